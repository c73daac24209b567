#define BOOST_TEST_MODULE cron_expression
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <date/date.h>
#include <date/tz.h>

#include "core/cron_expression.hpp"
#include "core/time_range.hpp"
#include "time_test_util.hpp"

using namespace dally::core;
using dally::core::test::iso;
using dally::core::test::utc_ms;
using strings = std::vector<std::string>;

namespace {

cron_expression parse_ok(std::string_view text, std::string_view zone = "UTC") {
  auto expr = cron_expression::parse(text, zone);
  if (!expr)
    BOOST_FAIL("parse failed for '" << text << "': " << expr.err());
  return *expr;
}

/// The next `n` occurrences after `after` (ISO UTC), as ISO strings.
strings fires(std::string_view text, std::string_view zone,
              std::string_view after, size_t n) {
  auto expr = parse_ok(text, zone);
  strings result;
  std::optional<int64_t> t = utc_ms(after);
  for (size_t i = 0; i < n && t; ++i) {
    t = expr.next_after(*t);
    result.push_back(iso(t));
  }
  return result;
}

strings fires(std::string_view text, std::string_view after, size_t n) {
  return fires(text, "UTC", after, n);
}

/// Asserts that parsing fails with `code` and a message containing each
/// fragment.
void check_error(std::string_view text, std::string_view zone, errc code,
                 std::vector<std::string_view> fragments) {
  BOOST_TEST_INFO("expression '" << text << "' in zone '" << zone << "'");
  auto expr = cron_expression::parse(text, zone);
  BOOST_REQUIRE(!expr);
  BOOST_TEST(to_string(expr.err().code()) == to_string(code));
  for (auto fragment : fragments)
    BOOST_TEST(expr.err().message().find(fragment) != std::string::npos,
               "message '" << expr.err().message() << "' lacks '" << fragment
                           << "'");
}

void check_malformed(std::string_view text,
                     std::vector<std::string_view> fragments) {
  check_error(text, "UTC", errc::malformed_cron, std::move(fragments));
}

} // namespace

BOOST_AUTO_TEST_SUITE(cron_expression_tests)

// -- syntax -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(every_fifteen_minutes) {
  BOOST_TEST(fires("*/15 * * * *", "2024-01-01T00:07:30Z", 4) ==
               (strings{"2024-01-01T00:15:00Z", "2024-01-01T00:30:00Z",
                        "2024-01-01T00:45:00Z", "2024-01-01T01:00:00Z"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(next_is_strictly_after) {
  BOOST_TEST(fires("0 0 * * *", "2024-01-01T00:00:00Z", 1) ==
             strings{"2024-01-02T00:00:00Z"});
  BOOST_TEST(fires("0 0 * * *", "2023-12-31T23:59:59.999Z", 1) ==
             strings{"2024-01-01T00:00:00Z"});
  // Occurrences are whole seconds even when `after` is not.
  BOOST_TEST(fires("* * * * * *", "2024-01-01T00:00:00.001Z", 2) ==
             (strings{"2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"}));
}

BOOST_AUTO_TEST_CASE(six_fields_have_seconds_first) {
  auto expr = parse_ok("*/20 * * * * *");
  BOOST_TEST(expr.has_seconds());
  BOOST_TEST(!parse_ok("* * * * *").has_seconds());
  BOOST_TEST(fires("*/20 * * * * *", "2024-01-01T00:00:00Z", 3) ==
             (strings{"2024-01-01T00:00:20Z", "2024-01-01T00:00:40Z",
                      "2024-01-01T00:01:00Z"}));
  BOOST_TEST(fires("30 15 10 * * *", "2024-01-01T12:00:00Z", 2) ==
             (strings{"2024-01-02T10:15:30Z", "2024-01-03T10:15:30Z"}));
}

BOOST_AUTO_TEST_CASE(lists_ranges_and_steps) {
  BOOST_TEST(fires("0 10-20/5 * * *", "2024-01-01T00:00:00Z", 4) ==
             (strings{"2024-01-01T10:00:00Z", "2024-01-01T15:00:00Z",
                      "2024-01-01T20:00:00Z", "2024-01-02T10:00:00Z"}));
  // a/n runs from a to the field's maximum.
  BOOST_TEST(fires("5/20 * * * *", "2024-01-01T00:00:00Z", 4) ==
             (strings{"2024-01-01T00:05:00Z", "2024-01-01T00:25:00Z",
                      "2024-01-01T00:45:00Z", "2024-01-01T01:05:00Z"}));
  BOOST_TEST(fires("0,30 8,12-13 * * *", "2024-01-01T09:00:00Z", 5) ==
             (strings{"2024-01-01T12:00:00Z", "2024-01-01T12:30:00Z",
                      "2024-01-01T13:00:00Z", "2024-01-01T13:30:00Z",
                      "2024-01-02T08:00:00Z"}));
}

BOOST_AUTO_TEST_CASE(month_and_weekday_names_ignore_case) {
  BOOST_TEST(fires("0 0 1 jan,Jul *", "2024-02-01T00:00:00Z", 2) ==
             (strings{"2024-07-01T00:00:00Z", "2025-01-01T00:00:00Z"}));
  // 2024-03-08 is a Friday.
  BOOST_TEST(fires("0 9 * * MON-fri", "2024-03-08T10:00:00Z", 2) ==
             (strings{"2024-03-11T09:00:00Z", "2024-03-12T09:00:00Z"}));
  BOOST_TEST(fires("0 9 * * 1-5", "2024-03-08T10:00:00Z", 2) ==
             fires("0 9 * * MON-fri", "2024-03-08T10:00:00Z", 2));
  BOOST_TEST(fires("0 0 1 Feb-APR/2 *", "2024-01-15T00:00:00Z", 3) ==
             (strings{"2024-02-01T00:00:00Z", "2024-04-01T00:00:00Z",
                      "2025-02-01T00:00:00Z"}));
}

BOOST_AUTO_TEST_CASE(sunday_is_zero_and_seven) {
  strings sunday{"2024-03-10T12:00:00Z", "2024-03-17T12:00:00Z"};
  BOOST_TEST(fires("0 12 * * 0", "2024-03-08T00:00:00Z", 2) == sunday);
  BOOST_TEST(fires("0 12 * * 7", "2024-03-08T00:00:00Z", 2) == sunday);
  BOOST_TEST(fires("0 12 * * sun", "2024-03-08T00:00:00Z", 2) == sunday);
  // 5-7 is Friday, Saturday, Sunday.
  BOOST_TEST(fires("0 12 * * 5-7", "2024-03-08T00:00:00Z", 4) ==
             (strings{"2024-03-08T12:00:00Z", "2024-03-09T12:00:00Z",
                      "2024-03-10T12:00:00Z", "2024-03-15T12:00:00Z"}));
}

BOOST_AUTO_TEST_CASE(day_of_month_or_day_of_week_when_both_restricted) {
  // The 13th (a Saturday in January 2024) or any Friday.
  BOOST_TEST(fires("0 0 13 * FRI", "2024-01-01T00:00:00Z", 6) ==
             (strings{"2024-01-05T00:00:00Z", "2024-01-12T00:00:00Z",
                      "2024-01-13T00:00:00Z", "2024-01-19T00:00:00Z",
                      "2024-01-26T00:00:00Z", "2024-02-02T00:00:00Z"}));
}

BOOST_AUTO_TEST_CASE(day_fields_combine_with_and_when_one_is_unrestricted) {
  BOOST_TEST(fires("0 0 13 * *", "2024-01-01T00:00:00Z", 2) ==
             (strings{"2024-01-13T00:00:00Z", "2024-02-13T00:00:00Z"}));
  BOOST_TEST(fires("0 0 * * FRI", "2024-01-01T00:00:00Z", 2) ==
             (strings{"2024-01-05T00:00:00Z", "2024-01-12T00:00:00Z"}));
  // Restriction is about the values, not the spelling: 0-6 covers every
  // day of week, so only the 13th matches.
  BOOST_TEST(fires("0 0 13 * 0-6", "2024-01-01T00:00:00Z", 2) ==
             (strings{"2024-01-13T00:00:00Z", "2024-02-13T00:00:00Z"}));
}

BOOST_AUTO_TEST_CASE(leap_day) {
  BOOST_TEST(fires("0 0 29 2 *", "2024-03-01T00:00:00Z", 2) ==
             (strings{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}));
  // 2100 is not a leap year: eight years between occurrences.
  BOOST_TEST(fires("0 0 29 2 *", "2096-03-01T00:00:00Z", 1) ==
             strings{"2104-02-29T00:00:00Z"});
  // Midnight in Berlin is 23:00 UTC the day before in winter.
  BOOST_TEST(fires("0 0 29 FEB *", "Europe/Berlin", "2024-03-01T00:00:00Z",
                   1) == strings{"2028-02-28T23:00:00Z"});
}

BOOST_AUTO_TEST_CASE(year_boundaries) {
  BOOST_TEST(fires("59 23 31 12 *", "2024-06-01T00:00:00Z", 2) ==
             (strings{"2024-12-31T23:59:00Z", "2025-12-31T23:59:00Z"}));
  BOOST_TEST(fires("0 0 1 1 *", "2024-12-31T23:59:59.999Z", 1) ==
             strings{"2025-01-01T00:00:00Z"});
  BOOST_TEST(fires("*/30 * * * *", "2024-12-31T23:45:00Z", 2) ==
             (strings{"2025-01-01T00:00:00Z", "2025-01-01T00:30:00Z"}));
}

BOOST_AUTO_TEST_CASE(nothing_after_the_supported_range) {
  BOOST_TEST(fires("0 0 1 1 *", "9999-06-01T00:00:00Z", 1) == strings{"none"});
  BOOST_TEST(fires("59 59 23 31 12 *", "9999-12-31T23:59:58Z", 2) ==
             (strings{"9999-12-31T23:59:59Z", "none"}));
  auto expr = parse_ok("* * * * * *");
  BOOST_TEST(!expr.next_after(std::numeric_limits<int64_t>::max()));
  BOOST_TEST(iso(expr.next_after(std::numeric_limits<int64_t>::min())) ==
             "1970-01-01T00:00:00Z");
}

BOOST_AUTO_TEST_CASE(time_zone_offsets) {
  // 09:00 in Berlin: 08:00 UTC in winter, 07:00 UTC in summer.
  BOOST_TEST(fires("0 9 * * *", "Europe/Berlin", "2024-01-10T12:00:00Z", 1) ==
             strings{"2024-01-11T08:00:00Z"});
  BOOST_TEST(fires("0 9 * * *", "Europe/Berlin", "2024-07-10T12:00:00Z", 1) ==
             strings{"2024-07-11T07:00:00Z"});
  BOOST_TEST(parse_ok("0 9 * * *", "Europe/Berlin").zone_name() ==
             "Europe/Berlin");
}

BOOST_AUTO_TEST_CASE(text_is_kept_trimmed) {
  auto expr = parse_ok("  0   9 * *\tMON ");
  BOOST_TEST(expr.text() == "0   9 * *\tMON");
  BOOST_TEST(expr.zone_name() == "UTC");
}

// -- daylight saving time -----------------------------------------------------

// New York, 2024-03-10: 02:00 EST jumps to 03:00 EDT at 07:00 UTC.

BOOST_AUTO_TEST_CASE(new_york_spring_forward_daily_job_fires_after_gap) {
  BOOST_TEST(fires("30 2 * * *", "America/New_York", "2024-03-08T12:00:00Z",
                   3) == (strings{"2024-03-09T07:30:00Z", // 02:30 EST
                                  "2024-03-10T07:00:00Z", // 03:00 EDT, gap end
                                  "2024-03-11T06:30:00Z"}), // 02:30 EDT
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(new_york_spring_forward_several_skipped_times_fire_once) {
  BOOST_TEST(fires("0,15,30,45 2 * * *", "America/New_York",
                   "2024-03-10T06:00:00Z", 2) ==
             (strings{"2024-03-10T07:00:00Z", "2024-03-11T06:00:00Z"}));
  // Skipped 02:00 and 02:30 and a real 03:00 coincide: one firing.
  BOOST_TEST(fires("0,30 2-3 * * *", "America/New_York", "2024-03-10T06:00:00Z",
                   3) == (strings{"2024-03-10T07:00:00Z",   // 03:00 EDT
                                  "2024-03-10T07:30:00Z",   // 03:30 EDT
                                  "2024-03-11T06:00:00Z"}), // 02:00 EDT
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(new_york_spring_forward_hourly_job_follows_the_clock) {
  // Hour '*': the clock never shows 02:30, so 01:30 EST is followed by
  // 03:30 EDT, one hour of elapsed time later.
  BOOST_TEST(
    fires("30 * * * *", "America/New_York", "2024-03-10T06:00:00Z", 3) ==
    (strings{"2024-03-10T06:30:00Z", "2024-03-10T07:30:00Z",
             "2024-03-10T08:30:00Z"}));
  BOOST_TEST(
    fires("*/20 * * * *", "America/New_York", "2024-03-10T06:30:00Z", 3) ==
    (strings{"2024-03-10T06:40:00Z", "2024-03-10T07:00:00Z",
             "2024-03-10T07:20:00Z"}));
}

// New York, 2024-11-03: 02:00 EDT falls back to 01:00 EST at 06:00 UTC, so
// 01:00-01:59 occurs twice.

BOOST_AUTO_TEST_CASE(new_york_fall_back_daily_job_fires_once_at_first_pass) {
  BOOST_TEST(
    fires("30 1 * * *", "America/New_York", "2024-11-02T12:00:00Z", 2) ==
      (strings{"2024-11-03T05:30:00Z",   // 01:30 EDT
               "2024-11-04T06:30:00Z"}), // 01:30 EST, next day
    boost::test_tools::per_element());
  // 02:00 occurs once, in EST.
  BOOST_TEST(fires("0 2 * * *", "America/New_York", "2024-11-02T12:00:00Z",
                   1) == strings{"2024-11-03T07:00:00Z"});
}

BOOST_AUTO_TEST_CASE(new_york_fall_back_hourly_job_fires_in_both_passes) {
  BOOST_TEST(fires("30 * * * *", "America/New_York", "2024-11-03T04:00:00Z",
                   4) == (strings{"2024-11-03T04:30:00Z",   // 00:30 EDT
                                  "2024-11-03T05:30:00Z",   // 01:30 EDT
                                  "2024-11-03T06:30:00Z",   // 01:30 EST
                                  "2024-11-03T07:30:00Z"}), // 02:30 EST
             boost::test_tools::per_element());
}

// Berlin: 2024-03-31 02:00 CET -> 03:00 CEST at 01:00 UTC; 2024-10-27
// 03:00 CEST -> 02:00 CET at 01:00 UTC.

BOOST_AUTO_TEST_CASE(berlin_spring_forward) {
  BOOST_TEST(fires("30 2 * * *", "Europe/Berlin", "2024-03-29T12:00:00Z", 3) ==
               (strings{"2024-03-30T01:30:00Z", "2024-03-31T01:00:00Z",
                        "2024-04-01T00:30:00Z"}),
             boost::test_tools::per_element());
  BOOST_TEST(fires("0 * * * *", "Europe/Berlin", "2024-03-30T23:30:00Z", 3) ==
             (strings{"2024-03-31T00:00:00Z", "2024-03-31T01:00:00Z",
                      "2024-03-31T02:00:00Z"}));
}

BOOST_AUTO_TEST_CASE(berlin_fall_back) {
  BOOST_TEST(fires("30 2 * * *", "Europe/Berlin", "2024-10-26T12:00:00Z", 2) ==
               (strings{"2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"}),
             boost::test_tools::per_element());
  BOOST_TEST(fires("0 * * * *", "Europe/Berlin", "2024-10-26T23:30:00Z", 3) ==
               (strings{"2024-10-27T00:00:00Z",   // 02:00 CEST
                        "2024-10-27T01:00:00Z",   // 02:00 CET
                        "2024-10-27T02:00:00Z"}), // 03:00 CET
             boost::test_tools::per_element());
}

// Lord Howe Island shifts by 30 minutes: 2024-10-06 02:00 (+10:30) jumps to
// 02:30 (+11) at 2024-10-05T15:30Z; 2024-04-07 02:00 (+11) falls back to
// 01:30 (+10:30) at 2024-04-06T15:00Z.

BOOST_AUTO_TEST_CASE(lord_howe_half_hour_spring_forward) {
  BOOST_TEST(fires("15 2 * * *", "Australia/Lord_Howe", "2024-10-04T12:00:00Z",
                   3) == (strings{"2024-10-04T15:45:00Z", // 02:15 +10:30
                                  "2024-10-05T15:30:00Z", // 02:30 +11, gap end
                                  "2024-10-06T15:15:00Z"}), // 02:15 +11
             boost::test_tools::per_element());
  BOOST_TEST(fires("*/15 * * * *", "Australia/Lord_Howe",
                   "2024-10-05T15:00:00Z",
                   3) == (strings{"2024-10-05T15:15:00Z",   // 01:45 +10:30
                                  "2024-10-05T15:30:00Z",   // 02:30 +11
                                  "2024-10-05T15:45:00Z"}), // 02:45 +11
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(lord_howe_half_hour_fall_back) {
  BOOST_TEST(
    fires("45 1 * * *", "Australia/Lord_Howe", "2024-04-06T12:00:00Z", 2) ==
      (strings{"2024-04-06T14:45:00Z",   // 01:45 +11
               "2024-04-07T15:15:00Z"}), // 01:45 +10:30, next day
    boost::test_tools::per_element());
  BOOST_TEST(fires("*/15 * * * *", "Australia/Lord_Howe",
                   "2024-04-06T14:20:00Z",
                   5) == (strings{"2024-04-06T14:30:00Z",   // 01:30 +11
                                  "2024-04-06T14:45:00Z",   // 01:45 +11
                                  "2024-04-06T15:00:00Z",   // 01:30 +10:30
                                  "2024-04-06T15:15:00Z",   // 01:45 +10:30
                                  "2024-04-06T15:30:00Z"}), // 02:00 +10:30
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(every_hour_flag) {
  BOOST_TEST(parse_ok("30 * * * *").every_hour());
  BOOST_TEST(parse_ok("30 */1 * * *").every_hour());
  BOOST_TEST(parse_ok("30 0-23 * * *").every_hour());
  BOOST_TEST(!parse_ok("30 */2 * * *").every_hour());
  BOOST_TEST(!parse_ok("30 2 * * *").every_hour());
}

// -- search
// ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(matches_a_brute_force_scan) {
  // Chained next_after must visit exactly the minutes a naive scan accepts.
  struct sample {
    const char* text;
    std::function<bool(const date::year_month_day&, date::weekday, int, int)>
      accepts;
  };
  const sample samples[] = {
    {"*/7 3-5,22 1-10 * MON",
     [](auto ymd, auto wd, int h, int m) {
       auto dom = static_cast<unsigned>(ymd.day());
       return m % 7 == 0 && ((h >= 3 && h <= 5) || h == 22) &&
              (dom <= 10 || wd == date::Monday);
     }},
    {"0 12 */10 FEB,AUG *",
     [](auto ymd, auto, int h, int m) {
       auto dom = static_cast<unsigned>(ymd.day());
       auto month = static_cast<unsigned>(ymd.month());
       return m == 0 && h == 12 && (dom - 1) % 10 == 0 &&
              (month == 2 || month == 8);
     }},
  };
  for (const auto& s : samples) {
    BOOST_TEST_INFO(s.text);
    auto expr = parse_ok(s.text);
    date::sys_days first_day = date::year{2023} / 12 / 25;
    date::sys_days last_day = date::year{2025} / 1 / 5;
    auto next = expr.next_after(utc_ms("2023-12-25T00:00:00Z") - 1);
    size_t count = 0;
    for (auto day = first_day; day < last_day; day += date::days{1}) {
      date::year_month_day ymd{day};
      date::weekday wd{day};
      auto day_ms = std::chrono::milliseconds{day.time_since_epoch()}.count();
      for (int h = 0; h < 24; ++h) {
        for (int m = 0; m < 60; ++m) {
          if (!s.accepts(ymd, wd, h, m))
            continue;
          auto minute = day_ms + (h * 60 + m) * int64_t{60'000};
          ++count;
          BOOST_REQUIRE_EQUAL(iso(next), iso(minute));
          next = expr.next_after(minute);
        }
      }
    }
    BOOST_TEST(count > 5u);
  }
}

BOOST_AUTO_TEST_CASE(dst_rules_match_an_instant_scan) {
  // Around every 2024 transition of three zones, walk instants minute by
  // minute, apply the documented DST rules directly, and compare with
  // chained next_after.
  struct sample {
    const char* text;
    std::function<bool(int, int)> accepts; // local hour, minute
  };
  const sample samples[] = {
    {"30 2 * * *", [](int h, int m) { return h == 2 && m == 30; }},
    {"0,45 1-2 * * *",
     [](int h, int m) { return (h == 1 || h == 2) && (m == 0 || m == 45); }},
    {"*/15 * * * *", [](int, int m) { return m % 15 == 0; }},
  };
  using std::chrono::minutes;
  using std::chrono::seconds;
  for (auto zone_name :
       {"America/New_York", "Europe/Berlin", "Australia/Lord_Howe"}) {
    auto zone = date::locate_zone(zone_name);
    std::vector<date::sys_seconds> transitions;
    auto info = zone->get_info(date::sys_days{date::year{2024} / 1 / 1});
    while (info.end < date::sys_days{date::year{2025} / 1 / 1}) {
      transitions.push_back(info.end);
      info = zone->get_info(info.end);
    }
    BOOST_TEST_REQUIRE(transitions.size() == 2u);
    for (const auto& s : samples) {
      auto expr = parse_ok(s.text, zone_name);
      for (auto transition : transitions) {
        BOOST_TEST_INFO(s.text
                        << " in " << zone_name << " around "
                        << iso(transition.time_since_epoch().count() * 1000));
        auto from = transition - date::days{2};
        auto to = transition + date::days{2};
        strings expected;
        for (auto t = from; t < to; t += minutes{1}) {
          auto here = zone->get_info(t);
          auto before = zone->get_info(here.begin - seconds{1});
          auto shift = here.offset - before.offset;
          auto local = t + here.offset;
          auto tod = local - date::floor<date::days>(local);
          auto h = static_cast<int>(tod / std::chrono::hours{1});
          auto m = static_cast<int>(tod / minutes{1} % 60);
          bool second_pass = shift < seconds{0} && t < here.begin - shift;
          bool fire = s.accepts(h, m) && (!second_pass || expr.every_hour());
          if (shift > seconds{0} && t == here.begin && !expr.every_hour()) {
            // Any skipped local time fires at the first instant after.
            for (auto gap = seconds{0}; gap < shift; gap += minutes{1}) {
              auto skipped = here.begin + before.offset + gap;
              auto stod = skipped - date::floor<date::days>(skipped);
              fire = fire ||
                     s.accepts(static_cast<int>(stod / std::chrono::hours{1}),
                               static_cast<int>(stod / minutes{1} % 60));
            }
          }
          if (fire)
            expected.push_back(iso(t.time_since_epoch().count() * 1000));
        }
        strings actual;
        auto to_ms = to.time_since_epoch().count() * 1000;
        auto next = expr.next_after(from.time_since_epoch().count() * 1000 - 1);
        while (next && *next < to_ms) {
          actual.push_back(iso(next));
          next = expr.next_after(*next);
        }
        BOOST_TEST(actual == expected, boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(dense_search_is_fast) {
  auto expr = parse_ok("* * * * * *", "America/New_York");
  auto t = utc_ms("2024-03-10T06:59:00Z");
  for (int i = 0; i < 120; ++i)
    t = *expr.next_after(t);
  BOOST_TEST(iso(t) == "2024-03-10T07:01:00Z");
}

// -- errors -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(wrong_field_count) {
  check_malformed("* * * *", {"has 4 fields", "expected 5", "or 6"});
  check_malformed("* * * * * * *", {"has 7 fields"});
  check_malformed("", {"has 0 fields"});
  check_malformed("   ", {"has 0 fields"});
}

BOOST_AUTO_TEST_CASE(value_out_of_range) {
  check_malformed("0 24 * * *", {"cron field 2 (hour): value 24 out of range "
                                 "0-23"});
  check_malformed("60 * * * *", {"cron field 1 (minute): value 60 out of "
                                 "range 0-59"});
  check_malformed("60 * * * * *", {"cron field 1 (second): value 60"});
  check_malformed("0 0 0 * *", {"field 3 (day of month): value 0 out of "
                                "range 1-31"});
  check_malformed("0 0 * 13 *", {"field 4 (month): value 13 out of range "
                                 "1-12"});
  check_malformed("0 0 * * 8", {"field 5 (day of week): value 8 out of "
                                "range 0-7"});
  check_malformed("0 0 * * 99999999999999", {"field 5 (day of week): value "
                                             "99999999999999 out of range"});
}

BOOST_AUTO_TEST_CASE(unknown_names) {
  check_malformed("0 0 * FOO *", {"field 4 (month): 'FOO' is not a number "
                                  "or name (JAN-DEC)"});
  check_malformed("0 0 * * FUNDAY",
                  {"field 5 (day of week): 'FUNDAY'", "SUN-SAT"});
  // Names belong to their own field only.
  check_malformed("0 MON * * *", {"field 2 (hour): 'MON' is not a number"});
  check_malformed("0 0 * * JAN", {"field 5 (day of week): 'JAN'"});
  check_malformed("0 -1 * * *", {"field 2 (hour): missing value"});
}

BOOST_AUTO_TEST_CASE(reversed_range) {
  check_malformed("0 5-2 * * *", {"field 2 (hour): range 5-2 is reversed"});
  check_malformed("0 0 * * FRI-MON", {"field 5 (day of week): range "
                                      "FRI-MON is reversed"});
}

BOOST_AUTO_TEST_CASE(bad_steps) {
  check_malformed("*/0 * * * *", {"field 1 (minute): step 0 out of range "
                                  "1-60"});
  check_malformed("*/61 * * * *", {"step 61 out of range 1-60"});
  check_malformed("0 */ * * *", {"field 2 (hour): missing step"});
  check_malformed("0 /2 * * *", {"field 2 (hour): missing range before '/'"});
  check_malformed("0 */x * * *", {"field 2 (hour): step 'x' is not a "
                                  "number"});
  check_malformed("0 1/2/3 * * *", {"field 2 (hour): step '2/3' is not a "
                                    "number"});
}

BOOST_AUTO_TEST_CASE(bad_lists_and_wildcards) {
  check_malformed("1,,2 * * * *", {"field 1 (minute): empty list element"});
  check_malformed("1, * * * *", {"field 1 (minute): empty list element"});
  check_malformed("0 *-5 * * *", {"field 2 (hour): '*' cannot be part of a "
                                  "range"});
  check_malformed("0 1-* * * *", {"field 2 (hour): '*' cannot be part of a "
                                  "range"});
}

BOOST_AUTO_TEST_CASE(impossible_day_is_rejected_at_parse_time) {
  check_malformed("0 0 30 2 *", {"field 3 (day of month): day 30 never "
                                 "occurs in month FEB"});
  check_malformed("0 0 31 4,6,9,11 *", {"day 31 never occurs in month "
                                        "APR,JUN,SEP,NOV"});
  check_malformed("0 0 0 30-31 2 *", {"field 4 (day of month): day 30 or "
                                      "later never occurs"});
  // Possible: March has a 31st; with a day of week the OR rule applies.
  BOOST_TEST(fires("0 0 31 2,3 *", "2024-01-01T00:00:00Z", 1) ==
             strings{"2024-03-31T00:00:00Z"});
  BOOST_TEST(fires("0 0 30 2 MON", "2024-02-01T00:00:00Z", 1) ==
             strings{"2024-02-05T00:00:00Z"});
}

BOOST_AUTO_TEST_CASE(unknown_time_zone) {
  check_error("0 0 * * *", "Mars/Olympus_Mons", errc::unknown_time_zone,
              {"unknown time zone 'Mars/Olympus_Mons'"});
  check_error("0 0 * * *", "", errc::unknown_time_zone,
              {"time zone name is empty"});
  check_error("0 0 * * *", "../../etc/passwd", errc::unknown_time_zone,
              {"'../../etc/passwd'"});
}

BOOST_AUTO_TEST_SUITE_END()
