#pragma once

// Small, pure helpers shared by dallyd and dallyctl: parsing times and
// durations typed by people, JSON and terminal output of arbitrary bytes,
// and argv normalisation for CAF's option parser.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace dally::apps {

/// Parses a duration typed by a person: plain milliseconds ("1500") or one
/// or more number-unit pairs with the units ms, s, m, h, d ("500ms", "5s",
/// "2m", "1h", "1d", "1h30m"). Nullopt on bad syntax, a negative value or
/// overflow.
std::optional<int64_t> parse_duration_ms(std::string_view text);

/// The system's wall clock as UTC ms, as a node reads it for due times.
int64_t wall_now_ms();

/// Parses an instant: UTC milliseconds since the Unix epoch
/// ("1795341600000") or ISO 8601 with a zone designator
/// ("2026-11-22T10:00:00Z", "2026-11-22T10:00:00.250Z",
/// "2026-11-22T11:00:00+01:00"). Nullopt otherwise, or before the epoch.
std::optional<int64_t> parse_time_ms(std::string_view text);

/// Parses a decimal unsigned integer no greater than `max`; no sign, no
/// spaces, no trailing text.
std::optional<uint64_t> parse_uint(std::string_view text,
                                   uint64_t max = UINT64_MAX);

/// `bytes` as a JSON string literal, quotes included. `"` and `\` are
/// escaped, control characters (and DEL) become \n, \t, ... or \u00XX,
/// well-formed UTF-8 sequences are kept as they are, and every byte that
/// starts no well-formed UTF-8 sequence becomes \u00XX (its Latin-1 code
/// point). The result is always valid UTF-8 and valid JSON; it is exact
/// for text that is valid UTF-8 (see `base64` for the rest).
std::string json_quote(std::string_view bytes);

/// Standard base64 (RFC 4648, with padding).
std::string base64(std::string_view bytes);

/// `bytes` for a terminal line: printable ASCII and well-formed UTF-8 are
/// kept, `\` is doubled, \n \r \t are written as such and every other byte
/// as \xXX, so one value never spans lines or moves the cursor.
std::string printable(std::string_view bytes);

/// Builds one flat JSON object, in insertion order.
class json_object {
public:
  json_object& add(std::string_view key, int64_t value);
  json_object& add(std::string_view key, uint64_t value);
  json_object& add(std::string_view key, uint32_t value) {
    return add(key, static_cast<uint64_t>(value));
  }
  json_object& add(std::string_view key, bool value);
  /// A string value: any bytes, quoted with `json_quote`.
  json_object& add(std::string_view key, std::string_view value);
  json_object& add(std::string_view key, const char* value) {
    return add(key, std::string_view{value});
  }
  json_object& add(std::string_view key, const std::string& value) {
    return add(key, std::string_view{value});
  }
  /// A value that is JSON already (an object, an array, null).
  json_object& add_raw(std::string_view key, std::string_view json);

  /// The object text, e.g. {"id":1,"topic":"t"}.
  std::string str() const { return body_ + '}'; }

private:
  void key(std::string_view name);

  std::string body_ = "{";
};

/// Adds the payload fields every JSON output uses: `payload` (json_quote)
/// and, when the bytes are not valid UTF-8, `payload_base64` with the
/// exact bytes.
void add_payload(json_object& obj, std::string_view payload);

/// One node of --cluster-seeds: "ID@HOST:PORT".
struct cluster_seed_spec {
  uint64_t id = 0;
  std::string host;
  uint16_t port = 0;
};

/// Parses a seed list, "1@127.0.0.1:7501,2@127.0.0.1:7502": ids from 1 and
/// distinct, a host that is not empty, ports in [1, 65535], and addresses
/// distinct. On bad input, `error` says which item is wrong and the list
/// is empty.
std::vector<cluster_seed_spec> parse_cluster_seeds(std::string_view text,
                                                   std::string& error);

/// CAF's parser takes long options only as "--name=value"; this joins
/// "--name value" into "--name=value" for every name in `valued` (given
/// without the leading dashes). An option already in "--name=value" form,
/// a flag, or a valued option at the end of the list is left as it is.
std::vector<std::string>
join_option_values(const std::vector<std::string>& args,
                   const std::set<std::string, std::less<>>& valued);

} // namespace dally::apps
