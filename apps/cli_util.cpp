#include "apps/cli_util.hpp"

#include <charconv>
#include <chrono>
#include <limits>

#include <date/date.h>

#include "core/time_range.hpp"
#include "core/utf8.hpp"

namespace dally::apps {

namespace {

/// Length of the well-formed UTF-8 sequence at the start of `text`, or 0.
size_t utf8_sequence_length(std::string_view text) {
  auto lead = static_cast<unsigned char>(text[0]);
  size_t n = lead < 0x80   ? 1
             : lead < 0xC2 ? 0
             : lead < 0xE0 ? 2
             : lead < 0xF0 ? 3
             : lead < 0xF5 ? 4
                           : 0;
  if (n == 0 || n > text.size())
    return 0;
  return core::is_valid_utf8(text.substr(0, n)) ? n : 0;
}

constexpr char hex_digits[] = "0123456789abcdef";

void append_hex_byte(std::string& out, unsigned char c) {
  out += hex_digits[c >> 4];
  out += hex_digits[c & 0xF];
}

/// Reads exactly `n` decimal digits at `pos`, advancing it.
std::optional<int> digits(std::string_view text, size_t& pos, size_t n) {
  if (pos + n > text.size())
    return std::nullopt;
  int value = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = text[pos + i];
    if (c < '0' || c > '9')
      return std::nullopt;
    value = value * 10 + (c - '0');
  }
  pos += n;
  return value;
}

/// Consumes `c` at `pos` if it is there.
bool expect(std::string_view text, size_t& pos, char c) {
  if (pos < text.size() && text[pos] == c) {
    ++pos;
    return true;
  }
  return false;
}

/// Reads "ss[.fff]" (1 to 3 fraction digits) at `pos`, advancing it.
bool read_seconds(std::string_view text, size_t& pos, int& sec, int& ms) {
  auto ss = digits(text, pos, 2);
  if (!ss)
    return false;
  sec = *ss;
  if (!expect(text, pos, '.'))
    return true;
  int scale = 100;
  size_t first = pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' &&
         pos - first < 3) {
    ms += (text[pos] - '0') * scale;
    scale /= 10;
    ++pos;
  }
  return pos != first;
}

/// Reads the zone at `pos`, advancing it: Z (or z) or +hh:mm or -hh:mm.
/// Returns its offset from UTC in minutes.
std::optional<int> read_zone_offset_min(std::string_view text, size_t& pos) {
  if (expect(text, pos, 'Z') || expect(text, pos, 'z'))
    return 0;
  if (pos >= text.size() || (text[pos] != '+' && text[pos] != '-'))
    return std::nullopt;
  int sign = text[pos++] == '-' ? -1 : 1;
  auto oh = digits(text, pos, 2);
  if (!oh || !expect(text, pos, ':'))
    return std::nullopt;
  auto om = digits(text, pos, 2);
  if (!om || *oh > 23 || *om > 59)
    return std::nullopt;
  return sign * (*oh * 60 + *om);
}

/// Parses YYYY-MM-DD(T| )hh:mm[:ss[.fff]](Z|+hh:mm|-hh:mm) strictly.
std::optional<int64_t> parse_iso8601(std::string_view text) {
  size_t pos = 0;
  auto next_is = [&](char c) { return expect(text, pos, c); };
  auto y = digits(text, pos, 4);
  if (!y || !next_is('-'))
    return std::nullopt;
  auto mo = digits(text, pos, 2);
  if (!mo || !next_is('-'))
    return std::nullopt;
  auto d = digits(text, pos, 2);
  if (!d || !(next_is('T') || next_is('t') || next_is(' ')))
    return std::nullopt;
  auto h = digits(text, pos, 2);
  if (!h || !next_is(':'))
    return std::nullopt;
  auto mi = digits(text, pos, 2);
  if (!mi)
    return std::nullopt;
  int sec = 0;
  int ms = 0;
  if (next_is(':') && !read_seconds(text, pos, sec, ms))
    return std::nullopt;
  auto offset_min = read_zone_offset_min(text, pos);
  if (!offset_min || pos != text.size() || *h > 23 || *mi > 59 || sec > 59)
    return std::nullopt;
  date::year_month_day ymd{date::year{*y},
                           date::month{static_cast<unsigned>(*mo)},
                           date::day{static_cast<unsigned>(*d)}};
  if (!ymd.ok())
    return std::nullopt;
  auto days = date::sys_days{ymd}.time_since_epoch().count();
  return ((static_cast<int64_t>(days) * 24 + *h) * 60 + *mi - *offset_min) *
           60'000 +
         sec * 1000 + ms;
}

} // namespace

std::optional<int64_t> parse_duration_ms(std::string_view text) {
  if (text.empty())
    return std::nullopt;
  if (auto plain = parse_uint(text, std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(*plain);
  int64_t total = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t digits_end = pos;
    while (digits_end < text.size() && text[digits_end] >= '0' &&
           text[digits_end] <= '9')
      ++digits_end;
    auto number = parse_uint(text.substr(pos, digits_end - pos),
                             std::numeric_limits<int64_t>::max());
    if (!number)
      return std::nullopt;
    size_t unit_end = digits_end;
    while (unit_end < text.size() &&
           (text[unit_end] < '0' || text[unit_end] > '9'))
      ++unit_end;
    auto unit = text.substr(digits_end, unit_end - digits_end);
    int64_t scale = 0;
    if (unit == "ms")
      scale = 1;
    else if (unit == "s")
      scale = 1000;
    else if (unit == "m" || unit == "min")
      scale = 60'000;
    else if (unit == "h")
      scale = 3'600'000;
    else if (unit == "d")
      scale = core::ms_per_day;
    else
      return std::nullopt;
    auto part = core::checked_mul(static_cast<int64_t>(*number), scale);
    if (!part)
      return std::nullopt;
    auto sum = core::checked_add(total, *part);
    if (!sum)
      return std::nullopt;
    total = *sum;
    pos = unit_end;
  }
  return total;
}

std::optional<int64_t> parse_time_ms(std::string_view text) {
  if (text.empty())
    return std::nullopt;
  if (text.front() >= '0' && text.front() <= '9' &&
      text.find_first_not_of("0123456789") == std::string_view::npos) {
    auto ms = parse_uint(text, static_cast<uint64_t>(core::max_time_ms));
    if (!ms)
      return std::nullopt;
    return static_cast<int64_t>(*ms);
  }
  auto result = parse_iso8601(text);
  if (!result || *result < core::min_time_ms)
    return std::nullopt;
  return result;
}

std::optional<uint64_t> parse_uint(std::string_view text, uint64_t max) {
  if (text.empty() || text.front() < '0' || text.front() > '9')
    return std::nullopt;
  uint64_t value = 0;
  auto [ptr, ec] =
    std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size() || value > max)
    return std::nullopt;
  return value;
}

std::string json_quote(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 2);
  out += '"';
  size_t i = 0;
  while (i < bytes.size()) {
    auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x80) {
      if (auto n = utf8_sequence_length(bytes.substr(i)); n > 0) {
        out.append(bytes.substr(i, n));
        i += n;
        continue;
      }
      out += "\\u00";
      append_hex_byte(out, c);
      ++i;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\u00";
          append_hex_byte(out, c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "abcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto at = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k]));
  };
  for (; i + 3 <= bytes.size(); i += 3) {
    auto v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (auto rest = bytes.size() - i; rest > 0) {
    auto v = at(i) << 16;
    if (rest == 2)
      v |= at(i + 1) << 8;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += rest == 2 ? alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x80) {
      if (auto n = utf8_sequence_length(bytes.substr(i)); n > 0) {
        out.append(bytes.substr(i, n));
        i += n;
        continue;
      }
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      out += "\\x";
      append_hex_byte(out, c);
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

void json_object::key(std::string_view name) {
  if (body_.size() > 1)
    body_ += ',';
  body_ += json_quote(name);
  body_ += ':';
}

json_object& json_object::add(std::string_view name, int64_t value) {
  key(name);
  body_ += std::to_string(value);
  return *this;
}

json_object& json_object::add(std::string_view name, uint64_t value) {
  key(name);
  body_ += std::to_string(value);
  return *this;
}

json_object& json_object::add(std::string_view name, bool value) {
  key(name);
  body_ += value ? "true" : "false";
  return *this;
}

json_object& json_object::add(std::string_view name, std::string_view value) {
  key(name);
  body_ += json_quote(value);
  return *this;
}

json_object& json_object::add_raw(std::string_view name,
                                  std::string_view json) {
  key(name);
  body_ += json;
  return *this;
}

void add_payload(json_object& obj, std::string_view payload) {
  obj.add("payload", payload);
  if (!core::is_valid_utf8(payload))
    obj.add("payload_base64", base64(payload));
}

std::vector<std::string>
join_option_values(const std::vector<std::string>& args,
                   const std::set<std::string, std::less<>>& valued) {
  std::vector<std::string> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& arg = args[i];
    if (arg == "--") {
      out.insert(out.end(), args.begin() + static_cast<ptrdiff_t>(i),
                 args.end());
      break;
    }
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0 &&
        arg.find('=') == std::string::npos &&
        valued.count(std::string_view{arg}.substr(2)) > 0 &&
        i + 1 < args.size()) {
      out.push_back(arg + '=' + args[i + 1]);
      ++i;
      continue;
    }
    out.push_back(arg);
  }
  return out;
}

int64_t wall_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

namespace {

/// One "ID@HOST:PORT"; an error text when it is not one.
std::optional<cluster_seed_spec> parse_seed(std::string_view item,
                                            std::string& error) {
  auto at = item.find('@');
  auto colon = item.rfind(':');
  if (at == std::string_view::npos || colon == std::string_view::npos ||
      colon < at) {
    error = "'" + std::string{item} + "' is not ID@HOST:PORT";
    return std::nullopt;
  }
  auto id =
    parse_uint(item.substr(0, at), std::numeric_limits<uint32_t>::max());
  auto port = parse_uint(item.substr(colon + 1), 65535);
  cluster_seed_spec out;
  out.host = std::string{item.substr(at + 1, colon - at - 1)};
  if (!id || *id == 0)
    error = "'" + std::string{item} + "': the node id must be a number >= 1";
  else if (!port || *port == 0)
    error = "'" + std::string{item} + "': the port must be in [1, 65535]";
  else if (out.host.empty())
    error = "'" + std::string{item} + "': the host is empty";
  if (!error.empty())
    return std::nullopt;
  out.id = *id;
  out.port = static_cast<uint16_t>(*port);
  return out;
}

} // namespace

std::vector<cluster_seed_spec> parse_cluster_seeds(std::string_view text,
                                                   std::string& error) {
  std::vector<cluster_seed_spec> out;
  error.clear();
  size_t pos = 0;
  while (error.empty()) {
    auto comma = text.find(',', pos);
    auto item =
      text.substr(pos, comma == std::string_view::npos ? std::string_view::npos
                                                       : comma - pos);
    auto seed = parse_seed(item, error);
    if (!seed)
      break;
    for (const auto& s : out) {
      if (s.id == seed->id)
        error = "node id " + std::to_string(s.id) + " is listed twice";
      else if (s.host == seed->host && s.port == seed->port)
        error = "address " + s.host + ":" + std::to_string(s.port) +
                " is listed twice";
    }
    out.push_back(std::move(*seed));
    if (comma == std::string_view::npos)
      break;
    pos = comma + 1;
  }
  if (!error.empty())
    out.clear();
  return out;
}

} // namespace dally::apps
