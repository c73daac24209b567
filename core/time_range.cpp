#include "core/time_range.hpp"

#include <chrono>

#include <date/date.h>

namespace dally::core {

std::string format_time(int64_t t_ms) {
  if (!is_valid_time(t_ms))
    return std::to_string(t_ms) + " ms";
  using ms_time = date::sys_time<std::chrono::milliseconds>;
  return date::format("%FT%TZ", ms_time{std::chrono::milliseconds{t_ms}});
}

std::string format_duration(int64_t d_ms) {
  auto result = std::to_string(d_ms) + " ms";
  if (d_ms < 1000 && d_ms > -1000)
    return result;
  // Split the magnitude into units; unsigned so that INT64_MIN is fine.
  uint64_t rest =
    d_ms < 0 ? 0 - static_cast<uint64_t>(d_ms) : static_cast<uint64_t>(d_ms);
  struct unit {
    uint64_t ms;
    const char* suffix;
  };
  static constexpr unit units[] = {
    {86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1'000, "s"}, {1, "ms"},
  };
  std::string parts;
  for (const auto& u : units) {
    if (auto n = rest / u.ms; n > 0) {
      parts += std::to_string(n);
      parts += u.suffix;
      rest -= n * u.ms;
    }
  }
  result += " (";
  if (d_ms < 0)
    result += '-';
  result += parts;
  result += ')';
  return result;
}

} // namespace dally::core
