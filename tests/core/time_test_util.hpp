#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include <date/date.h>

#include "core/time_range.hpp"

namespace dally::core::test {

// GCC 12 warns, in optimised builds only, that date::parse may use its
// seconds before setting them; date.h sets them on every path that uses
// them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/// Parses "2024-03-10T07:00:00Z" or "2024-03-10T07:00:00.250Z" as UTC ms.
inline int64_t utc_ms(std::string_view iso) {
  std::istringstream in{std::string{iso}};
  date::sys_time<std::chrono::milliseconds> t;
  in >> date::parse("%FT%TZ", t);
  if (in.fail())
    throw std::invalid_argument("bad test time: " + std::string{iso});
  return t.time_since_epoch().count();
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// An optional time as ISO text, "none" for nullopt, without ".000" for
/// whole seconds: readable assertions.
inline std::string iso(std::optional<int64_t> t_ms) {
  if (!t_ms)
    return "none";
  auto text = format_time(*t_ms);
  if (auto pos = text.find(".000Z"); pos != std::string::npos)
    text.replace(pos, 5, "Z");
  return text;
}

} // namespace dally::core::test
