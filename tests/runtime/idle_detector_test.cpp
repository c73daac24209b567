#define BOOST_TEST_MODULE idle_detector
#include <boost/test/unit_test.hpp>

#include "runtime/idle_detector.hpp"

using dally::runtime::idle_detector;

namespace {

/// 250 ms ticks; `cpu_ms` is what the process used in the tick.
struct ticker {
  idle_detector detector{50};
  int64_t now_us = 1'000'000;
  int64_t cpu_us = 0;

  ticker() { BOOST_TEST(!detector.idle(now_us, cpu_us)); }

  bool tick(int64_t cpu_ms) {
    now_us += 250'000;
    cpu_us += cpu_ms * 1000;
    return detector.idle(now_us, cpu_us);
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(the_first_sample_only_records) {
  idle_detector detector{50};
  BOOST_TEST(!detector.idle(1'000'000, 5'000'000));
  BOOST_TEST(detector.idle(1'250'000, 5'000'000));
}

BOOST_AUTO_TEST_CASE(busy_above_the_share_of_one_core) {
  ticker t;
  // 5% of 250 ms is 12.5 ms: 400 ms on two cores is busy, 13 ms too,
  // 12 ms and a light steady load are not.
  BOOST_TEST(!t.tick(400));
  BOOST_TEST(!t.tick(13));
  BOOST_TEST(t.tick(12));
  BOOST_TEST(t.tick(0));
  BOOST_TEST(!t.tick(100));
  for (int i = 0; i < 10; ++i)
    BOOST_TEST(t.tick(5));
}

BOOST_AUTO_TEST_CASE(a_clock_that_does_not_move_or_cpu_that_goes_back) {
  ticker t;
  BOOST_TEST(!t.tick(400));
  // The same instant again: no interval to judge, nothing recorded.
  BOOST_TEST(!t.detector.idle(t.now_us, t.cpu_us + 1'000'000));
  BOOST_TEST(!t.tick(400));
  // CPU time lower than before (another source): an idle interval.
  t.now_us += 250'000;
  BOOST_TEST(t.detector.idle(t.now_us, t.cpu_us - 5000));
}

BOOST_AUTO_TEST_CASE(longer_intervals_scale_the_threshold) {
  idle_detector detector{50};
  BOOST_TEST(!detector.idle(0, 0));
  // 40 ms in 1 s is 4%: idle; 60 ms in the next second is 6%: busy.
  BOOST_TEST(detector.idle(1'000'000, 40'000));
  BOOST_TEST(!detector.idle(2'000'000, 100'000));
}
