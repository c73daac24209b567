#define BOOST_TEST_MODULE idle_detector
#include <boost/test/unit_test.hpp>

#include "core/idle_detector.hpp"

using dally::core::idle_detector;

namespace {

/// 250 ms ticks; `cpu_ms` is what the process used in the tick.
struct ticker {
  idle_detector detector{50};
  int64_t now_us = 1'000'000;
  int64_t cpu_us = 0;

  ticker() { BOOST_TEST(!detector.idle_after_busy(now_us, cpu_us)); }

  bool tick(int64_t cpu_ms) {
    now_us += 250'000;
    cpu_us += cpu_ms * 1000;
    return detector.idle_after_busy(now_us, cpu_us);
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(purges_once_when_the_start_up_is_over) {
  ticker t;
  // Start-up counts as busy: the first idle tick says so, later ones not.
  BOOST_TEST(t.tick(0));
  BOOST_TEST(!t.tick(0));
  BOOST_TEST(!t.tick(1));
}

BOOST_AUTO_TEST_CASE(purges_once_per_idle_spell_after_a_busy_one) {
  ticker t;
  BOOST_TEST(t.tick(0));
  // 5% of 250 ms is 12.5 ms: 400 ms on two cores is busy, 13 ms too.
  BOOST_TEST(!t.tick(400));
  BOOST_TEST(!t.tick(13));
  BOOST_TEST(t.tick(12));
  BOOST_TEST(!t.tick(12));
  BOOST_TEST(!t.tick(0));
  BOOST_TEST(!t.tick(100));
  BOOST_TEST(t.tick(2));
}

BOOST_AUTO_TEST_CASE(a_light_steady_load_counts_as_idle) {
  ticker t;
  BOOST_TEST(t.tick(5));
  for (int i = 0; i < 20; ++i)
    BOOST_TEST(!t.tick(5));
}

BOOST_AUTO_TEST_CASE(a_clock_that_does_not_move_or_cpu_that_goes_back) {
  ticker t;
  BOOST_TEST(!t.tick(400));
  // The same instant again: no interval to judge, nothing changes.
  BOOST_TEST(!t.detector.idle_after_busy(t.now_us, t.cpu_us));
  // CPU time lower than before (another source): an idle interval.
  t.now_us += 250'000;
  BOOST_TEST(t.detector.idle_after_busy(t.now_us, t.cpu_us - 5000));
}
