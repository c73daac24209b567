#define BOOST_TEST_MODULE armed_timer
#include <boost/test/unit_test.hpp>

#include <cstdint>

#include "logic/armed_timer.hpp"
#include "logic/wall_clock.hpp"

using namespace dally;
using logic::armed_timer;

namespace {

constexpr int64_t t0 = 1'700'000'000'000;
constexpr int64_t ms = 1'000;
constexpr int64_t s = 1'000'000;
constexpr int64_t hour = 3'600 * s;

} // namespace

BOOST_AUTO_TEST_CASE(one_message_is_armed_at_the_earliest_target) {
  armed_timer timer;
  auto first = timer.arm(t0 + 100, t0 * ms, 0);
  BOOST_REQUIRE(first.has_value());
  BOOST_TEST(first->delay_us == 100 * ms);
  // The armed one comes first.
  BOOST_TEST(!timer.arm(t0 + 200, t0 * ms, 0).has_value());
  auto sooner = timer.arm(t0 + 50, t0 * ms, 0);
  BOOST_REQUIRE(sooner.has_value());
  BOOST_TEST(sooner->delay_us == 50 * ms);
  BOOST_TEST(!timer.claim(first->generation)); // Replaced.
  BOOST_TEST(timer.claim(sooner->generation));
  BOOST_TEST(timer.armed_ms() == armed_timer::never_ms);
  auto again = timer.arm(t0 + 300, t0 * ms, 0);
  BOOST_REQUIRE(again.has_value());
  timer.cancel();
  BOOST_TEST(!timer.claim(again->generation));
  auto now = timer.now();
  BOOST_TEST(timer.claim(now));
  BOOST_TEST(!timer.arm(armed_timer::never_ms, t0 * ms, 0).has_value());
}

BOOST_AUTO_TEST_CASE(no_wait_outlasts_the_cap) {
  armed_timer timer;
  // A target an hour away waits a second, then the actor looks again.
  auto w = timer.arm(t0 + 3'600'000, t0 * ms, 0);
  BOOST_REQUIRE(w.has_value());
  BOOST_TEST(w->delay_us == armed_timer::max_wait_us);
  // A target in the past fires at once.
  armed_timer late;
  auto due = late.arm(t0 - 5'000, t0 * ms, 0);
  BOOST_REQUIRE(due.has_value());
  BOOST_TEST(due->delay_us == 0);
}

// The forward step of issue 52: a wake-up armed for a task 4 minutes
// away; the wall clock steps 1 h forward (the steady clock moves 1 s);
// tasks due at once are scheduled. The target lies after the armed one on
// the wall clock, yet the armed message is a whole wait away on the steady
// clock: it must re-arm.
BOOST_AUTO_TEST_CASE(a_forward_step_re_arms_for_the_same_or_a_later_target) {
  armed_timer timer;
  int64_t steady = 0;
  auto armed = timer.arm(t0 + 240'000, t0 * ms, steady);
  BOOST_REQUIRE(armed.has_value());
  steady += 200 * ms;
  auto wall_us = t0 * ms + 200 * ms + hour;
  // The same target, now overdue: at once.
  auto same = timer.arm(t0 + 240'000, wall_us, steady);
  BOOST_REQUIRE(same.has_value());
  BOOST_TEST(same->delay_us == 0);
  // And one due now, after it on the wall clock, keeps that.
  BOOST_TEST(!timer.arm(wall_us / ms, wall_us, steady).has_value());
}

BOOST_AUTO_TEST_CASE(reading_jitter_does_not_re_arm) {
  armed_timer timer;
  BOOST_REQUIRE(timer.arm(t0 + 500, t0 * ms, 0).has_value());
  // 300 µs of steady time, the ms clock reads 1 ms more: no new message.
  BOOST_TEST(!timer.arm(t0 + 500, (t0 + 1) * ms, 300).has_value());
}

// Back, then forth: the wall clock steps back 1 h while a task is 100 ms
// away. The armed message comes, nothing is due on the wall clock, and it
// re-arms for at most the cap, so that when the clock returns 12 s later
// the task fires within a second of it.
BOOST_AUTO_TEST_CASE(a_backward_step_waits_at_most_the_cap) {
  armed_timer timer;
  int64_t steady = 0;
  auto armed = timer.arm(t0 + 100, t0 * ms, steady);
  BOOST_REQUIRE(armed.has_value());
  steady += 100 * ms;
  BOOST_TEST(timer.claim(armed->generation));
  auto wall_us = t0 * ms + 100 * ms - hour;
  auto again = timer.arm(t0 + 100, wall_us, steady);
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->delay_us == armed_timer::max_wait_us);
}

BOOST_AUTO_TEST_CASE(a_step_is_told_from_time_passing) {
  logic::clock_step_watch watch;
  BOOST_TEST(watch.observe(t0 * ms, 0) == 0);
  // Both clocks move 10 s: no step.
  BOOST_TEST(watch.observe(t0 * ms + 10 * s, 10 * s) == 0);
  // Drift and jitter below the threshold: no step.
  BOOST_TEST(watch.observe(t0 * ms + 20 * s + 999 * ms, 20 * s) == 0);
  // The wall clock steps an hour forward.
  BOOST_TEST(watch.observe(t0 * ms + 21 * s + hour, 21 * s) == hour - 999 * ms);
  // And back by 1 h 12 s.
  BOOST_TEST(watch.observe(t0 * ms + 10 * s, 22 * s) == -(hour + 12 * s));
}
