#define BOOST_TEST_MODULE recurrence
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/recurrence.hpp"
#include "core/time_range.hpp"
#include "time_test_util.hpp"

using namespace dally::core;
using dally::core::test::iso;
using dally::core::test::utc_ms;

namespace {

const int64_t t0 = utc_ms("2024-01-01T00:00:00Z");
constexpr int64_t second_ms = 1'000;
constexpr int64_t minute_ms = 60'000;
constexpr int64_t hour_ms = 3'600'000;

recurrence ok(result<recurrence> rec) {
  if (!rec)
    BOOST_FAIL("factory failed: " << rec.err());
  return std::move(rec).value();
}

/// Asserts `rec` failed with `code` and a message containing each fragment.
void check_error(const result<recurrence>& rec, errc code,
                 std::vector<std::string> fragments) {
  BOOST_REQUIRE(!rec);
  BOOST_TEST(to_string(rec.err().code()) == to_string(code));
  for (const auto& fragment : fragments)
    BOOST_TEST(rec.err().message().find(fragment) != std::string::npos,
               "message '" << rec.err().message() << "' lacks '" << fragment
                           << "'");
}

/// Fires a schedule-anchored recurrence `n` times from `now`, passing each
/// due time as the next `after`, and returns the due times relative to t0.
std::vector<int64_t> chain(const recurrence& rec, int64_t now, size_t n) {
  std::vector<int64_t> result;
  auto next = rec.first_fire(now);
  uint64_t fired = 0;
  while (next && result.size() < n) {
    result.push_back(*next - t0);
    ++fired;
    next = rec.next_fire(*next, fired);
  }
  return result;
}

using offsets = std::vector<int64_t>;

} // namespace

BOOST_AUTO_TEST_SUITE(recurrence_tests)

// -- at -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(at_fires_once_at_its_instant) {
  auto rec = ok(recurrence::at(t0 + 5 * second_ms));
  BOOST_TEST((rec.kind() == recurrence_kind::at));
  BOOST_TEST(!rec.is_periodic());
  BOOST_TEST(rec.at_ms() == t0 + 5 * second_ms);
  BOOST_TEST(*rec.first_fire(t0) == t0 + 5 * second_ms);
  BOOST_TEST(*rec.next_fire(t0, 0) == t0 + 5 * second_ms);
  BOOST_TEST(!rec.next_fire(t0, 1));
  BOOST_TEST(!rec.next_fire(t0 + 5 * second_ms, 0));
  BOOST_TEST(
    !rec.next_after_completion(t0 + 5 * second_ms, t0 + 6 * second_ms, 1));
}

BOOST_AUTO_TEST_CASE(at_in_the_past_fires_at_once) {
  auto rec = ok(recurrence::at(t0 - hour_ms));
  BOOST_TEST(*rec.first_fire(t0) == t0 - hour_ms);
}

BOOST_AUTO_TEST_CASE(at_accepts_the_edges_of_the_supported_range) {
  BOOST_TEST(ok(recurrence::at(min_time_ms)).at_ms() == 0);
  BOOST_TEST(ok(recurrence::at(max_time_ms)).at_ms() == max_time_ms);
  BOOST_TEST(format_time(max_time_ms) == "9999-12-31T23:59:59.999Z");
}

BOOST_AUTO_TEST_CASE(at_rejects_negative_time) {
  check_error(recurrence::at(-1), errc::invalid_time,
              {"due time -1 ms", "outside the supported range",
               "1970-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z"});
}

BOOST_AUTO_TEST_CASE(at_rejects_time_after_year_9999) {
  check_error(recurrence::at(max_time_ms + 1), errc::invalid_time,
              {"due time 253402300800000 ms", "outside the supported range"});
}

BOOST_AUTO_TEST_CASE(default_recurrence_fires_once_at_once) {
  recurrence rec;
  BOOST_TEST((rec.kind() == recurrence_kind::at));
  BOOST_TEST(*rec.first_fire(t0) == 0);
  BOOST_TEST(!rec.next_fire(0, 1));
}

// -- after --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(after_is_anchored_at_now) {
  auto rec = ok(recurrence::after(t0, 90 * second_ms));
  BOOST_TEST((rec.kind() == recurrence_kind::after));
  BOOST_TEST(!rec.is_periodic());
  BOOST_TEST(rec.at_ms() == t0 + 90 * second_ms);
  BOOST_TEST(rec.delay_ms() == 90 * second_ms);
  // Later calls keep the instant fixed at scheduling time.
  BOOST_TEST(*rec.first_fire(t0 + 10 * second_ms) == t0 + 90 * second_ms);
  BOOST_TEST(!rec.next_fire(t0 + 90 * second_ms, 1));
  BOOST_TEST(ok(recurrence::after(t0, 0)).at_ms() == t0);
}

BOOST_AUTO_TEST_CASE(after_rejects_negative_delay) {
  check_error(recurrence::after(t0, -1), errc::invalid_time,
              {"delay -1 ms is negative"});
}

BOOST_AUTO_TEST_CASE(after_rejects_delay_above_maximum) {
  task_limits limits;
  check_error(recurrence::after(t0, limits.max_delay_ms + 1),
              errc::delay_too_large,
              {"delay 315619200001 ms", "exceeds the maximum delay",
               "315619200000 ms (3653d)"});
  limits.max_delay_ms = 1000;
  check_error(recurrence::after(t0, 1001, limits), errc::delay_too_large,
              {"delay 1001 ms (1s1ms) exceeds the maximum delay 1000 ms"});
  BOOST_TEST(ok(recurrence::after(t0, 1000, limits)).at_ms() == t0 + 1000);
}

BOOST_AUTO_TEST_CASE(after_rejects_sum_beyond_supported_range) {
  task_limits limits;
  limits.max_delay_ms = std::numeric_limits<int64_t>::max();
  check_error(recurrence::after(max_time_ms - 10, 100, limits),
              errc::invalid_time,
              {"plus delay 100 ms lies beyond 9999-12-31T23:59:59.999Z"});
  check_error(
    recurrence::after(t0, std::numeric_limits<int64_t>::max(), limits),
    errc::invalid_time, {"lies beyond"});
}

BOOST_AUTO_TEST_CASE(after_rejects_invalid_now) {
  check_error(recurrence::after(-5, 10), errc::invalid_time,
              {"now -5 ms is outside the supported range"});
}

// -- fixed rate
// -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(fixed_rate_starts_one_period_after_now_by_default) {
  auto rec = ok(recurrence::fixed_rate(t0, minute_ms));
  BOOST_TEST((rec.kind() == recurrence_kind::fixed_rate));
  BOOST_TEST(rec.is_periodic());
  BOOST_TEST(rec.start_ms() == t0 + minute_ms);
  BOOST_TEST(rec.period_ms() == minute_ms);
  BOOST_TEST(chain(rec, t0, 4) == (offsets{minute_ms, 2 * minute_ms,
                                           3 * minute_ms, 4 * minute_ms}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(fixed_rate_is_anchored_on_the_schedule) {
  auto rec = ok(recurrence::fixed_rate(t0, second_ms, {.start_ms = t0 + 500}));
  BOOST_TEST(*rec.first_fire(t0) == t0 + 500);
  // The next point depends on the schedule, not on how late `after` is.
  BOOST_TEST(*rec.next_fire(t0 + 500, 1) == t0 + 1500);
  BOOST_TEST(*rec.next_fire(t0 + 1499, 1) == t0 + 1500);
  BOOST_TEST(*rec.next_fire(t0 + 1500, 2) == t0 + 2500);
}

BOOST_AUTO_TEST_CASE(fixed_rate_past_start_only_sets_the_phase) {
  // Hourly at :15, anchored yesterday: the first occurrence is the next
  // :15 at or after now, not a replay of the missed ones.
  auto anchor = t0 - 24 * hour_ms + 15 * minute_ms;
  auto rec = ok(
    recurrence::fixed_rate(t0 + 10 * minute_ms, hour_ms, {.start_ms = anchor}));
  BOOST_TEST(iso(rec.first_fire(t0 + 10 * minute_ms)) ==
             "2024-01-01T00:15:00Z");
  BOOST_TEST(iso(rec.first_fire(t0 + 15 * minute_ms)) ==
             "2024-01-01T00:15:00Z");
  BOOST_TEST(iso(rec.first_fire(t0 + 16 * minute_ms)) ==
             "2024-01-01T01:15:00Z");
}

BOOST_AUTO_TEST_CASE(fixed_rate_end_is_inclusive) {
  auto rec = ok(recurrence::fixed_rate(
    t0, second_ms, {.start_ms = t0, .end_ms = t0 + 3 * second_ms}));
  BOOST_TEST(chain(rec, t0, 10) == (offsets{0, 1000, 2000, 3000}),
             boost::test_tools::per_element());
  BOOST_TEST(*rec.end_ms() == t0 + 3 * second_ms);
}

BOOST_AUTO_TEST_CASE(fixed_rate_max_count_counts_fired_occurrences) {
  auto rec = ok(recurrence::fixed_rate(t0, second_ms, {.max_count = 3}));
  BOOST_TEST(chain(rec, t0, 10) == (offsets{1000, 2000, 3000}),
             boost::test_tools::per_element());
  BOOST_TEST(*rec.max_count() == 3u);
  BOOST_TEST(rec.next_fire(t0, 2).has_value());
  BOOST_TEST(!rec.next_fire(t0, 3));
}

BOOST_AUTO_TEST_CASE(fixed_rate_skips_missed_points_without_a_burst) {
  auto rec =
    ok(recurrence::fixed_rate(t0, second_ms, {.start_ms = t0, .max_count = 3}));
  // Due at t0, acked on time: the next point.
  BOOST_TEST(*rec.next_after_completion(t0, t0 + 200, 1) == t0 + 1000);
  // Due at t0 + 1000 but acked 4.5 s late: one late firing, then resume on
  // the schedule after the completion; the skipped points do not count.
  BOOST_TEST(*rec.next_after_completion(t0 + 1000, t0 + 5500, 2) == t0 + 6000);
  BOOST_TEST(!rec.next_after_completion(t0 + 6000, t0 + 6100, 3));
}

BOOST_AUTO_TEST_CASE(fixed_rate_ends_at_the_supported_range) {
  auto rec = ok(recurrence::fixed_rate(max_time_ms - 2000, second_ms,
                                       {.start_ms = max_time_ms - 1500}));
  BOOST_TEST(chain(rec, max_time_ms - 2000, 5).size() == 2u);
  constexpr auto big = std::numeric_limits<int64_t>::max();
  auto every_ms = ok(recurrence::fixed_rate(t0, 1));
  BOOST_TEST(!every_ms.next_fire(big, 0));
  BOOST_TEST(!every_ms.next_fire(max_time_ms, 0));
  BOOST_TEST(*every_ms.next_fire(max_time_ms - 1, 0) == max_time_ms);
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_zero_period) {
  check_error(recurrence::fixed_rate(t0, 0), errc::invalid_period,
              {"period is 0 ms; it must be positive"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_negative_period) {
  check_error(recurrence::fixed_rate(t0, -5), errc::invalid_period,
              {"period is -5 ms; it must be positive"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_period_above_maximum_delay) {
  task_limits limits;
  limits.max_delay_ms = hour_ms;
  check_error(recurrence::fixed_rate(t0, hour_ms + 1, {}, limits),
              errc::delay_too_large,
              {"period is 3600001 ms", "exceeds the maximum delay 3600000 ms"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_zero_count) {
  check_error(recurrence::fixed_rate(t0, second_ms, {.max_count = 0}),
              errc::invalid_count, {"max_count is 0"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_end_before_start) {
  check_error(recurrence::fixed_rate(
                t0, second_ms, {.start_ms = t0 + 5000, .end_ms = t0 + 4999}),
              errc::invalid_time,
              {"end 2024-01-01T00:00:04.999Z is before start "
               "2024-01-01T00:00:05.000Z"});
  // Without a start, the default start (now + period) applies.
  check_error(recurrence::fixed_rate(t0, hour_ms, {.end_ms = t0 + minute_ms}),
              errc::invalid_time, {"is before start 2024-01-01T01:00:00.000Z"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_invalid_start) {
  check_error(recurrence::fixed_rate(t0, second_ms, {.start_ms = -1}),
              errc::invalid_time, {"start -1 ms is outside"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_invalid_end) {
  check_error(
    recurrence::fixed_rate(t0, second_ms, {.end_ms = max_time_ms + 1}),
    errc::invalid_time, {"end 253402300800000 ms is outside"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_start_too_far_ahead) {
  task_limits limits;
  limits.max_delay_ms = hour_ms;
  check_error(recurrence::fixed_rate(t0, second_ms,
                                     {.start_ms = t0 + hour_ms + 1}, limits),
              errc::delay_too_large,
              {"start 2024-01-01T01:00:00.001Z lies 3600001 ms",
               "maximum delay is 3600000 ms"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_invalid_now) {
  check_error(recurrence::fixed_rate(max_time_ms + 1, second_ms),
              errc::invalid_time, {"now 253402300800000 ms is outside"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_default_start_beyond_range) {
  check_error(recurrence::fixed_rate(max_time_ms - 10, second_ms),
              errc::invalid_time, {"default start", "lies beyond"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_rejects_schedule_that_ended_before_now) {
  check_error(
    recurrence::fixed_rate(
      t0, second_ms, {.start_ms = t0 - hour_ms, .end_ms = t0 - minute_ms}),
    errc::no_occurrence,
    {"fixed_rate recurrence has no occurrence after now "
     "2024-01-01T00:00:00.000Z up to end "
     "2023-12-31T23:59:00.000Z"});
}

BOOST_AUTO_TEST_CASE(fixed_rate_can_be_rebuilt_from_its_fields) {
  auto rec = ok(recurrence::fixed_rate(
    t0, minute_ms, {.end_ms = t0 + hour_ms, .max_count = 7}));
  auto copy = ok(recurrence::fixed_rate(rec.start_ms(), rec.period_ms(),
                                        {.start_ms = rec.start_ms(),
                                         .end_ms = rec.end_ms(),
                                         .max_count = rec.max_count()}));
  BOOST_TEST((copy == rec));
  BOOST_TEST(!(copy == ok(recurrence::fixed_rate(t0, minute_ms))));
}

// -- fixed delay
// ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(fixed_delay_counts_from_completion) {
  auto rec = ok(recurrence::fixed_delay(t0, minute_ms));
  BOOST_TEST((rec.kind() == recurrence_kind::fixed_delay));
  BOOST_TEST(rec.is_periodic());
  BOOST_TEST(*rec.first_fire(t0) == t0 + minute_ms);
  // The first run completed 300 ms after it was due.
  BOOST_TEST(*rec.next_fire(t0 + minute_ms + 300, 1) ==
             t0 + 2 * minute_ms + 300);
  BOOST_TEST(*rec.next_after_completion(t0 + minute_ms, t0 + 3 * minute_ms,
                                        1) == t0 + 4 * minute_ms);
}

BOOST_AUTO_TEST_CASE(fixed_delay_past_start_fires_at_once) {
  auto rec = ok(
    recurrence::fixed_delay(t0, minute_ms, {.start_ms = t0 - 5 * second_ms}));
  BOOST_TEST(*rec.first_fire(t0) == t0 - 5 * second_ms);
  BOOST_TEST(*rec.next_fire(t0 + 1, 1) == t0 + 1 + minute_ms);
}

BOOST_AUTO_TEST_CASE(fixed_delay_honours_end_and_count) {
  auto rec = ok(recurrence::fixed_delay(
    t0, minute_ms, {.end_ms = t0 + 3 * minute_ms, .max_count = 5}));
  BOOST_TEST(*rec.next_fire(t0 + 2 * minute_ms, 1) == t0 + 3 * minute_ms);
  BOOST_TEST(!rec.next_fire(t0 + 2 * minute_ms + 1, 1));
  BOOST_TEST(!rec.next_fire(t0, 5));
}

BOOST_AUTO_TEST_CASE(fixed_delay_rejects_zero_period) {
  check_error(recurrence::fixed_delay(t0, 0), errc::invalid_period,
              {"period is 0 ms"});
}

// -- intervals ----------------------------------------------------------------

const std::vector<int64_t> backoff_list{1000, 2000, 3000, 5000, 10000};

BOOST_AUTO_TEST_CASE(finite_interval_list_fires_once_per_interval) {
  auto rec = ok(recurrence::intervals(t0, backoff_list, false));
  BOOST_TEST((rec.kind() == recurrence_kind::intervals));
  BOOST_TEST(rec.is_periodic());
  BOOST_TEST(!rec.cyclic());
  BOOST_TEST(rec.start_ms() == t0);
  BOOST_TEST(rec.intervals_ms() == backoff_list);
  BOOST_TEST(chain(rec, t0, 10) == (offsets{1000, 3000, 6000, 11000, 21000}),
             boost::test_tools::per_element());
  BOOST_TEST(!rec.next_fire(t0 + 21000, 4));
  // A finite list never fires more often than it has entries.
  BOOST_TEST(!rec.next_fire(t0, 5));
  // Any point in time finds the following occurrence.
  BOOST_TEST(*rec.next_fire(t0 + 4000, 2) == t0 + 6000);
}

BOOST_AUTO_TEST_CASE(cyclic_interval_list_repeats) {
  auto rec = ok(recurrence::intervals(t0, backoff_list, true));
  BOOST_TEST(rec.cyclic());
  BOOST_TEST(chain(rec, t0, 12) ==
               (offsets{1000, 3000, 6000, 11000, 21000, 22000, 24000, 27000,
                        32000, 42000, 43000, 45000}),
             boost::test_tools::per_element());
  auto single = ok(recurrence::intervals(t0, {500}, true));
  BOOST_TEST(chain(single, t0, 3) == (offsets{500, 1000, 1500}));
}

BOOST_AUTO_TEST_CASE(interval_list_skips_points_before_now) {
  // Points at start + 1, 3, 6, 7, 9, 12, ... s with start = t0 - 4 s.
  auto rec = ok(recurrence::intervals(t0, {1000, 2000, 3000}, true,
                                      {.start_ms = t0 - 4000}));
  BOOST_TEST(*rec.first_fire(t0) - t0 == 2000);
  BOOST_TEST(*rec.first_fire(t0 - 1000) - t0 == -1000);
  BOOST_TEST(*rec.next_fire(t0 + 2000, 1) - t0 == 3000);
  BOOST_TEST(*rec.next_fire(t0 + 3000, 2) - t0 == 5000);
}

BOOST_AUTO_TEST_CASE(cyclic_interval_list_honours_end_and_count) {
  auto counted =
    ok(recurrence::intervals(t0, backoff_list, true, {.max_count = 7}));
  BOOST_TEST(chain(counted, t0, 20).size() == 7u);
  auto ended =
    ok(recurrence::intervals(t0, backoff_list, true, {.end_ms = t0 + 30000}));
  BOOST_TEST(chain(ended, t0, 20) ==
               (offsets{1000, 3000, 6000, 11000, 21000, 22000, 24000, 27000}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(interval_list_rejects_empty_list) {
  check_error(recurrence::intervals(t0, {}, false), errc::empty_intervals,
              {"interval list is empty"});
}

BOOST_AUTO_TEST_CASE(interval_list_rejects_zero_interval) {
  check_error(recurrence::intervals(t0, {1000, 2000, 0}, true),
              errc::invalid_period,
              {"interval 2 is 0 ms; it must be positive"});
}

BOOST_AUTO_TEST_CASE(interval_list_rejects_negative_interval) {
  check_error(recurrence::intervals(t0, {1000, -5}, false),
              errc::invalid_period, {"interval 1 is -5 ms"});
}

BOOST_AUTO_TEST_CASE(interval_list_rejects_too_many_entries) {
  task_limits limits;
  limits.max_intervals = 3;
  check_error(recurrence::intervals(t0, {1, 2, 3, 4}, true, {}, limits),
              errc::too_many_intervals,
              {"interval list has 4 entries; the maximum is 3"});
}

BOOST_AUTO_TEST_CASE(interval_list_rejects_interval_above_maximum_delay) {
  task_limits limits;
  limits.max_delay_ms = hour_ms;
  check_error(recurrence::intervals(t0, {hour_ms + 1}, true, {}, limits),
              errc::delay_too_large,
              {"interval 0 is 3600001 ms", "exceeds the maximum delay"});
}

BOOST_AUTO_TEST_CASE(interval_list_rejects_overflowing_sum) {
  task_limits limits;
  limits.max_delay_ms = std::numeric_limits<int64_t>::max();
  check_error(recurrence::intervals(
                t0, {std::numeric_limits<int64_t>::max(), 1}, true, {}, limits),
              errc::invalid_time, {"intervals 0 to 1 add up to more than"});
}

BOOST_AUTO_TEST_CASE(interval_list_rejects_list_entirely_in_the_past) {
  check_error(recurrence::intervals(t0, {1000, 2000}, false,
                                    {.start_ms = t0 - minute_ms}),
              errc::no_occurrence,
              {"intervals recurrence has no occurrence after now"});
}

// -- cron ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(cron_first_fire_is_strictly_after_now) {
  auto rec = ok(recurrence::cron(t0, "0 0 * * *"));
  BOOST_TEST((rec.kind() == recurrence_kind::cron));
  BOOST_TEST(rec.is_periodic());
  BOOST_TEST(rec.cron_expr()->text() == "0 0 * * *");
  BOOST_TEST(rec.cron_expr()->zone_name() == "UTC");
  BOOST_TEST(iso(rec.first_fire(t0)) == "2024-01-02T00:00:00Z");
  BOOST_TEST(iso(rec.next_fire(utc_ms("2024-01-02T00:00:00Z"), 1)) ==
             "2024-01-03T00:00:00Z");
  BOOST_TEST(ok(recurrence::at(t0)).cron_expr() == nullptr);
}

BOOST_AUTO_TEST_CASE(cron_in_a_time_zone) {
  auto rec = ok(recurrence::cron(t0, "0 9 * * MON-FRI", "Europe/Berlin"));
  BOOST_TEST(rec.cron_expr()->zone_name() == "Europe/Berlin");
  BOOST_TEST(iso(rec.first_fire(t0)) == "2024-01-01T08:00:00Z");
}

BOOST_AUTO_TEST_CASE(cron_start_is_inclusive) {
  auto rec = ok(recurrence::cron(t0, "0 0 * * *", "UTC",
                                 {.start_ms = utc_ms("2024-01-04T00:00:00Z")}));
  BOOST_TEST(iso(rec.first_fire(t0)) == "2024-01-04T00:00:00Z");
  auto later = ok(recurrence::cron(
    t0, "0 0 * * *", "UTC", {.start_ms = utc_ms("2024-01-04T00:00:00.001Z")}));
  BOOST_TEST(iso(later.first_fire(t0)) == "2024-01-05T00:00:00Z");
}

BOOST_AUTO_TEST_CASE(cron_honours_end_and_count) {
  auto rec = ok(recurrence::cron(t0, "0 0 * * *", "UTC",
                                 {.end_ms = utc_ms("2024-01-03T00:00:00Z")}));
  BOOST_TEST(chain(rec, t0, 10) == (offsets{24 * hour_ms, 48 * hour_ms}));
  auto counted = ok(recurrence::cron(t0, "0 0 * * *", "UTC", {.max_count = 1}));
  BOOST_TEST(chain(counted, t0, 10) == offsets{24 * hour_ms});
}

BOOST_AUTO_TEST_CASE(cron_skips_missed_points_without_a_burst) {
  auto rec = ok(recurrence::cron(t0, "0 0 * * *"));
  BOOST_TEST(iso(rec.next_after_completion(utc_ms("2024-01-02T00:00:00Z"),
                                           utc_ms("2024-01-04T12:00:00Z"),
                                           1)) == "2024-01-05T00:00:00Z");
}

BOOST_AUTO_TEST_CASE(cron_rejects_malformed_expression) {
  check_error(recurrence::cron(t0, "0 24 * * *"), errc::malformed_cron,
              {"cron field 2 (hour): value 24 out of range 0-23"});
}

BOOST_AUTO_TEST_CASE(cron_rejects_unknown_time_zone) {
  check_error(recurrence::cron(t0, "0 0 * * *", "Europe/Atlantis"),
              errc::unknown_time_zone, {"'Europe/Atlantis'"});
}

BOOST_AUTO_TEST_CASE(cron_rejects_end_before_first_match) {
  check_error(recurrence::cron(t0 + 1, "0 0 1 1 *", "UTC",
                               {.end_ms = utc_ms("2024-12-01T00:00:00Z")}),
              errc::no_occurrence,
              {"cron recurrence has no occurrence after now "
               "2024-01-01T00:00:00.001Z up to end 2024-12-01"});
}

// -- misc
// -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(kind_names) {
  BOOST_TEST(to_string(recurrence_kind::at) == "at");
  BOOST_TEST(to_string(recurrence_kind::after) == "after");
  BOOST_TEST(to_string(recurrence_kind::fixed_rate) == "fixed_rate");
  BOOST_TEST(to_string(recurrence_kind::fixed_delay) == "fixed_delay");
  BOOST_TEST(to_string(recurrence_kind::intervals) == "intervals");
  BOOST_TEST(to_string(recurrence_kind::cron) == "cron");
}

BOOST_AUTO_TEST_CASE(time_helpers_detect_overflow) {
  constexpr auto big = std::numeric_limits<int64_t>::max();
  BOOST_TEST(!checked_add(big, 1));
  BOOST_TEST(*checked_add(big - 1, 1) == big);
  BOOST_TEST(!checked_mul(big / 2 + 1, 2));
  BOOST_TEST(!add_time(max_time_ms, 1));
  BOOST_TEST(!add_time(0, -1));
  BOOST_TEST(*add_time(0, max_time_ms) == max_time_ms);
  BOOST_TEST(format_duration(90'000) == "90000 ms (1m30s)");
  BOOST_TEST(format_duration(-1'500) == "-1500 ms (-1s500ms)");
  BOOST_TEST(format_duration(999) == "999 ms");
}

BOOST_AUTO_TEST_SUITE_END()

// -- restore
// -----------------------------------------------------------------------

namespace {

/// What a store writes: every field the accessors expose.
recurrence_fields fields_of(const recurrence& rec) {
  recurrence_fields fields;
  fields.kind = rec.kind();
  fields.at_ms = rec.at_ms();
  fields.delay_ms = rec.delay_ms();
  fields.period_ms = rec.period_ms();
  fields.start_ms = rec.start_ms();
  fields.end_ms = rec.end_ms();
  fields.max_count = rec.max_count();
  fields.intervals_ms = rec.intervals_ms();
  fields.cyclic = rec.cyclic();
  if (const auto* expr = rec.cron_expr()) {
    fields.cron = expr->text();
    fields.zone = expr->zone_name();
  }
  return fields;
}

void check_round_trip(const recurrence& original) {
  auto restored = ok(recurrence::restore(fields_of(original)));
  BOOST_TEST((restored == original), to_string(original.kind()));
  BOOST_TEST(chain(restored, t0, 5) == chain(original, t0, 5),
             boost::test_tools::per_element());
}

} // namespace

BOOST_AUTO_TEST_SUITE(recurrence_restore_tests)

BOOST_AUTO_TEST_CASE(restore_rebuilds_every_kind_exactly) {
  check_round_trip(recurrence{});
  check_round_trip(ok(recurrence::at(t0 + 5 * second_ms)));
  check_round_trip(ok(recurrence::after(t0, 90 * second_ms)));
  check_round_trip(ok(recurrence::fixed_rate(
    t0, 15 * minute_ms,
    {.start_ms = t0 - 7 * minute_ms, .end_ms = t0 + 2 * hour_ms})));
  check_round_trip(
    ok(recurrence::fixed_delay(t0, minute_ms, {.max_count = 3})));
  check_round_trip(ok(recurrence::intervals(
    t0, {second_ms, 5 * second_ms, minute_ms}, false, {.start_ms = t0})));
  check_round_trip(
    ok(recurrence::intervals(t0, {minute_ms, 2 * minute_ms}, true,
                             {.end_ms = t0 + hour_ms, .max_count = 10})));
  check_round_trip(ok(recurrence::cron(t0, " 30 2 * * * ", "America/New_York",
                                       {.start_ms = t0 + hour_ms})));
  check_round_trip(ok(recurrence::cron(t0, "*/10 * * * * *")));
}

BOOST_AUTO_TEST_CASE(cron_recurrences_compare_by_value) {
  // Parsed twice: two expressions, equal by value; a copy shares the
  // parsed expression instead of copying its tables.
  auto x = ok(recurrence::cron(t0, "0 30 2 * * 1-5", "America/New_York"));
  auto y = ok(recurrence::cron(t0, "0 30 2 * * 1-5", "America/New_York"));
  BOOST_TEST(x.cron_expr() != y.cron_expr());
  BOOST_TEST((x == y));
  auto copy = x;
  BOOST_TEST(copy.cron_expr() == x.cron_expr());
  BOOST_TEST((copy == x));
  BOOST_TEST(
    (x != ok(recurrence::cron(t0, "0 30 3 * * 1-5", "America/New_York"))));
  BOOST_TEST(
    (x != ok(recurrence::cron(t0, "0 30 2 * * 1-5", "Europe/Berlin"))));
  BOOST_TEST((x != ok(recurrence::at(t0))));
  BOOST_TEST((ok(recurrence::at(t0)) == ok(recurrence::at(t0))));
}

BOOST_AUTO_TEST_CASE(periodic_fields_are_shared_and_one_shots_stay_small) {
  // A shard keeps and copies thousands of task records: a one-shot's
  // recurrence must not carry the periodic kinds' fields, and copies of a
  // periodic one share them.
  BOOST_TEST(sizeof(recurrence) <= 5 * sizeof(void*));
  BOOST_TEST(ok(recurrence::at(t0)).intervals_ms().empty());
  BOOST_TEST(!ok(recurrence::after(t0, second_ms)).end_ms());
  auto x = ok(recurrence::intervals(t0, {second_ms, minute_ms}, true,
                                    {.end_ms = t0 + hour_ms}));
  auto copy = x;
  BOOST_TEST(copy.intervals_ms().data() == x.intervals_ms().data());
  BOOST_TEST((copy == x));
  auto y = ok(recurrence::intervals(t0, {second_ms, minute_ms}, true,
                                    {.end_ms = t0 + 2 * hour_ms}));
  BOOST_TEST(!(y == x));
  BOOST_TEST(*y.end_ms() == t0 + 2 * hour_ms);
  BOOST_TEST(*x.end_ms() == t0 + hour_ms);
}

BOOST_AUTO_TEST_CASE(restore_ignores_now_and_limits) {
  // Exhausted by now and with a period above today's maximum delay: the
  // factories refuse both, a stored value still loads.
  recurrence_fields fields;
  fields.kind = recurrence_kind::fixed_rate;
  fields.period_ms = 4000 * ms_per_day;
  fields.start_ms = 0;
  fields.end_ms = second_ms;
  auto rec = ok(recurrence::restore(fields));
  BOOST_TEST(rec.period_ms() == 4000 * ms_per_day);
  BOOST_TEST(iso(rec.first_fire(t0)) == "none");
  check_error(recurrence::fixed_rate(t0, fields.period_ms),
              errc::delay_too_large, {"period"});
}

BOOST_AUTO_TEST_CASE(restore_ignores_fields_of_other_kinds) {
  recurrence_fields fields;
  fields.kind = recurrence_kind::at;
  fields.at_ms = t0;
  fields.period_ms = 5;
  fields.intervals_ms = {1, 2};
  fields.cron = "not a cron";
  BOOST_TEST((ok(recurrence::restore(fields)) == ok(recurrence::at(t0))));
}

BOOST_AUTO_TEST_CASE(restore_rejects_invalid_values) {
  auto with = [](recurrence_kind kind, auto edit) {
    recurrence_fields fields;
    fields.kind = kind;
    fields.at_ms = t0;
    fields.period_ms = minute_ms;
    fields.start_ms = t0;
    fields.intervals_ms = {minute_ms};
    fields.cron = "0 0 * * *";
    fields.zone = "UTC";
    edit(fields);
    return recurrence::restore(fields);
  };
  using f = recurrence_fields;
  check_error(with(recurrence_kind::at, [](f& x) { x.at_ms = -1; }),
              errc::invalid_time, {"due time"});
  check_error(with(recurrence_kind::after, [](f& x) { x.delay_ms = -5; }),
              errc::invalid_time, {"delay -5 ms"});
  check_error(
    with(recurrence_kind::after, [](f& x) { x.delay_ms = x.at_ms + 1; }),
    errc::invalid_time, {"reaches before"});
  check_error(with(recurrence_kind::fixed_rate, [](f& x) { x.period_ms = 0; }),
              errc::invalid_period, {"period"});
  check_error(with(recurrence_kind::fixed_delay,
                   [](f& x) { x.start_ms = max_time_ms + 1; }),
              errc::invalid_time, {"start"});
  check_error(
    with(recurrence_kind::fixed_rate, [](f& x) { x.end_ms = x.start_ms - 1; }),
    errc::invalid_time, {"is before start"});
  check_error(with(recurrence_kind::fixed_rate, [](f& x) { x.max_count = 0; }),
              errc::invalid_count, {"max_count is 0"});
  check_error(
    with(recurrence_kind::intervals, [](f& x) { x.intervals_ms = {}; }),
    errc::empty_intervals, {"empty"});
  check_error(with(recurrence_kind::intervals,
                   [](f& x) {
                     x.intervals_ms = {5, -1};
                   }),
              errc::invalid_period, {"interval 1"});
  check_error(with(recurrence_kind::cron, [](f& x) { x.cron = "0 24 * * *"; }),
              errc::malformed_cron, {"hour"});
  check_error(with(recurrence_kind::cron, [](f& x) { x.zone = "Mars/Base"; }),
              errc::unknown_time_zone, {"Mars/Base"});
  check_error(with(static_cast<recurrence_kind>(42), [](f&) {}),
              errc::invalid_period, {"recurrence kind 42 is unknown"});
}

BOOST_AUTO_TEST_SUITE_END()
