#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

namespace dally::sim {

/// What happened in a simulated run, in order, one line per event:
/// "<virtual ms> <text>". It keeps a running FNV-1a hash of every line, the
/// run's fingerprint (the same seed and binary must give the same hash),
/// and the last lines for a failure report.
class event_log {
public:
  /// Keeps the last `keep` lines (at least 1).
  explicit event_log(size_t keep = 64);

  void add(int64_t now_ms, std::string_view text);

  /// Events added so far.
  uint64_t size() const noexcept { return count_; }

  /// The hash of every line so far, in order.
  uint64_t hash() const noexcept { return hash_; }

  /// `hash()` as 16 lowercase hex digits.
  std::string hash_hex() const;

  /// The most recent lines, oldest first.
  const std::deque<std::string>& last() const noexcept { return last_; }

private:
  size_t keep_;
  uint64_t count_ = 0;
  uint64_t hash_;
  std::deque<std::string> last_;
};

} // namespace dally::sim
