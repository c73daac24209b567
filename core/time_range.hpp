#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dally::core {

/// Earliest instant Dally accepts: the Unix epoch. Due times before it are
/// almost certainly unit mistakes (seconds vs ms) or sign bugs.
inline constexpr int64_t min_time_ms = 0;

/// Latest instant Dally accepts: 9999-12-31T23:59:59.999Z. Keeping a margin
/// far below INT64_MAX lets any time plus any supported delay be computed
/// without overflow, and every accepted time prints as a 4-digit year.
inline constexpr int64_t max_time_ms = 253'402'300'799'999;

/// Milliseconds per day, for building limits and test fixtures.
inline constexpr int64_t ms_per_day = 86'400'000;

/// True if `t_ms` lies in [min_time_ms, max_time_ms].
constexpr bool is_valid_time(int64_t t_ms) noexcept {
  return t_ms >= min_time_ms && t_ms <= max_time_ms;
}

/// `x + y`, or nullopt if it overflows int64.
constexpr std::optional<int64_t> checked_add(int64_t x, int64_t y) noexcept {
  int64_t sum = 0;
  if (__builtin_add_overflow(x, y, &sum))
    return std::nullopt;
  return sum;
}

/// `x + y`, clamped to the range of int64 instead of overflowing: for
/// deadlines that may lie "never" away.
constexpr int64_t saturating_add(int64_t x, int64_t y) noexcept {
  int64_t sum = 0;
  if (__builtin_add_overflow(x, y, &sum))
    return y > 0 ? INT64_MAX : INT64_MIN;
  return sum;
}

/// `x * y`, or nullopt if it overflows int64.
constexpr std::optional<int64_t> checked_mul(int64_t x, int64_t y) noexcept {
  int64_t product = 0;
  if (__builtin_mul_overflow(x, y, &product))
    return std::nullopt;
  return product;
}

/// `t_ms + delta_ms` if the sum neither overflows nor leaves the supported
/// range, else nullopt: the one way core code moves a time.
constexpr std::optional<int64_t> add_time(int64_t t_ms,
                                          int64_t delta_ms) noexcept {
  auto sum = checked_add(t_ms, delta_ms);
  if (!sum || !is_valid_time(*sum))
    return std::nullopt;
  return sum;
}

/// Formats a UTC instant as ISO 8601 with milliseconds, for error messages
/// and logs, e.g. "2024-03-10T07:00:00.000Z". Times outside the supported
/// range print as a raw number with unit, e.g. "-5 ms".
std::string format_time(int64_t t_ms);

/// Formats a duration for messages, e.g. "90000 ms (1m30s)".
std::string format_duration(int64_t d_ms);

} // namespace dally::core
