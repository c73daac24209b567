#define BOOST_TEST_MODULE heap_purger
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/heap_purger.hpp"

using dally::runtime::heap_purger;
using namespace std::chrono_literals;

namespace {

/// A fake process: its CPU time grows by 1 s per read while busy; purges
/// are counted.
struct fake_process {
  std::atomic<bool> busy{false};
  std::atomic<int64_t> cpu_us{0};
  std::atomic<int> purges{0};
  std::atomic<int> reads{0};

  heap_purger::hooks hooks() {
    return {[this] {
              ++reads;
              if (busy)
                cpu_us += 1'000'000;
              return cpu_us.load();
            },
            [this] {
              ++purges;
              return true;
            }};
  }
};

/// Waits (bounded) until `pred` holds.
template<class Pred>
bool eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

} // namespace

BOOST_AUTO_TEST_CASE(purges_while_idle_and_never_while_busy) {
  fake_process p;
  p.busy = true;
  heap_purger purger{{5ms, 50}, p.hooks()};
  auto reads = p.reads.load();
  BOOST_TEST(eventually([&] { return p.reads >= reads + 5; }));
  BOOST_TEST(p.purges == 0);
  // Idle: a purge per interval.
  p.busy = false;
  BOOST_TEST(eventually([&] { return p.purges >= 3; }));
  // Busy again: the purges stop (at most one interval was judged idle
  // while the switch happened).
  p.busy = true;
  reads = p.reads.load();
  BOOST_TEST(eventually([&] { return p.reads >= reads + 2; }));
  auto purges = p.purges.load();
  reads = p.reads.load();
  BOOST_TEST(eventually([&] { return p.reads >= reads + 5; }));
  BOOST_TEST(p.purges == purges);
  BOOST_TEST(purger.purges() == static_cast<uint64_t>(purges));
}

BOOST_AUTO_TEST_CASE(a_failed_purge_is_not_counted) {
  fake_process p;
  auto hooks = p.hooks();
  std::atomic<int> tries{0};
  hooks.purge = [&] {
    ++tries;
    return false;
  };
  heap_purger purger{{5ms, 50}, hooks};
  BOOST_TEST(eventually([&] { return tries >= 2; }));
  BOOST_TEST(purger.purges() == 0u);
}

BOOST_AUTO_TEST_CASE(stops_promptly_with_a_long_period) {
  fake_process p;
  auto start = std::chrono::steady_clock::now();
  { heap_purger purger{{1h, 50}, p.hooks()}; }
  auto elapsed = std::chrono::steady_clock::now() - start;
  BOOST_TEST(
    std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() <
    5000);
  BOOST_TEST(p.reads == 0);
}
