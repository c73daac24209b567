#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.hpp"

namespace date {
class time_zone;
} // namespace date

namespace dally::core {

/// A parsed cron expression bound to an IANA time zone.
///
/// Syntax: 5 fields `minute hour day-of-month month day-of-week`, or 6
/// fields with `second` first. Each field is a comma-separated list of `*`,
/// `n`, `a-b`, `*/s`, `a-b/s` or `a/s` (from a to the field's maximum, step
/// s). Months accept JAN..DEC and days of week SUN..SAT, case-insensitive;
/// day of week 0 and 7 both mean Sunday. A field is *restricted* when its
/// values do not cover its whole range (so `*`, `*/1` and `0-7` are not).
/// When both day of month and day of week are restricted, a day matches if
/// either matches (classic cron); otherwise both must match.
///
/// An expression whose day of month can never occur in its months (such as
/// `0 0 30 2 *`, February 30) is rejected as malformed at parse time, so
/// every accepted expression fires at least once every 8 years (February
/// 29 skips 2100) and the search for the next occurrence is always short.
///
/// Daylight saving time. Fields match local wall-clock time in the zone.
/// - When the hour field is restricted (a job at given hours, e.g. a daily
///   job at 02:30), a local time skipped by a forward shift fires once, at
///   the first instant after the gap (the shift instant, whose local time
///   is the gap's end: 02:30 in New York's spring gap fires at 03:00 EDT),
///   however many skipped times match; it is never skipped silently. A
///   local time that occurs twice in a backward shift fires once, at the
///   first (earlier) instant.
/// - When the hour field matches every hour (`*`, e.g. every 15 minutes),
///   the job is about elapsed time and follows the wall clock as it is:
///   skipped local times do not fire (the clock never shows them) and
///   repeated local times fire in both passes.
///
/// Zone rules come from the operating system's tz database through
/// date/tz. Its reader uses the transitions listed in the zone files (in
/// Debian's files they end in 2037); after the last one, the last offset
/// stays in force.
class cron_expression {
public:
  /// Parses `text` for the zone named `zone_name`. Errors:
  /// errc::malformed_cron naming the field and the problem, e.g. "cron
  /// field 2 (hour): value 24 out of range 0-23"; errc::unknown_time_zone
  /// naming the zone.
  static result<cron_expression> parse(std::string_view text,
                                       std::string_view zone_name = "UTC");

  /// The first occurrence strictly after `after_ms` (UTC ms), or nullopt if
  /// there is none up to max_time_ms. Occurrences are whole seconds.
  std::optional<int64_t> next_after(int64_t after_ms) const;

  /// The expression as given, without surrounding whitespace.
  const std::string& text() const noexcept { return text_; }

  /// The zone name as given.
  const std::string& zone_name() const noexcept { return zone_name_; }

  /// True for the 6-field form (seconds first).
  bool has_seconds() const noexcept { return has_seconds_; }

  /// True if the hour field matches every hour: such jobs follow the wall
  /// clock through DST shifts instead of the once-per-local-time rule.
  bool every_hour() const noexcept { return hours_ == all_hours; }

  friend bool operator==(const cron_expression& x,
                         const cron_expression& y) noexcept {
    return x.text_ == y.text_ && x.zone_name_ == y.zone_name_;
  }

private:
  static constexpr uint32_t all_hours = (uint32_t{1} << 24) - 1;

  cron_expression() = default;

  /// The first local time (seconds since the local epoch) in [from_s,
  /// limit_s) that matches all fields, skipping whole months, days, hours
  /// and minutes that cannot match.
  std::optional<int64_t> next_local_match(int64_t from_s,
                                          int64_t limit_s) const;

  bool day_matches(int64_t local_day) const;

  uint64_t seconds_ = 0;  // bits 0-59
  uint64_t minutes_ = 0;  // bits 0-59
  uint32_t hours_ = 0;    // bits 0-23
  uint32_t days_ = 0;     // bits 1-31
  uint32_t months_ = 0;   // bits 1-12
  uint32_t weekdays_ = 0; // bits 0-6, 0 = Sunday
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
  bool has_seconds_ = false;
  const date::time_zone* zone_ = nullptr;
  std::string text_;
  std::string zone_name_;
};

} // namespace dally::core
