#define BOOST_TEST_MODULE watchdog
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include <pthread.h>

#include "runtime/watchdog.hpp"

using dally::runtime::describe_threads;
using dally::runtime::watchdog;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(disarmed_in_time_it_never_calls) {
  std::atomic<int> calls{0};
  watchdog w;
  w.arm(10s, [&] { ++calls; });
  BOOST_CHECK(!w.disarm());
  BOOST_CHECK_EQUAL(calls.load(), 0);
}

BOOST_AUTO_TEST_CASE(left_armed_it_calls_once_after_the_limit) {
  std::atomic<int> calls{0};
  watchdog w;
  auto t0 = std::chrono::steady_clock::now();
  std::atomic<int64_t> after_ms{-1};
  w.arm(50ms, [&] {
    after_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - t0)
                 .count();
    ++calls;
  });
  for (int i = 0; i < 600 && calls.load() == 0; ++i)
    std::this_thread::sleep_for(10ms);
  BOOST_CHECK(w.disarm());
  BOOST_CHECK_EQUAL(calls.load(), 1);
  BOOST_CHECK_GE(after_ms.load(), 50);
}

BOOST_AUTO_TEST_CASE(armed_again_the_first_countdown_is_gone) {
  std::atomic<int> first{0};
  std::atomic<int> second{0};
  watchdog w;
  w.arm(30ms, [&] { ++first; });
  w.arm(10s, [&] { ++second; });
  std::this_thread::sleep_for(100ms);
  BOOST_CHECK(!w.disarm());
  BOOST_CHECK_EQUAL(first.load(), 0);
  BOOST_CHECK_EQUAL(second.load(), 0);
}

BOOST_AUTO_TEST_CASE(threads_are_named_with_their_state) {
  std::atomic<bool> stop{false};
  std::thread t{[&] {
    while (!stop)
      std::this_thread::sleep_for(1ms);
  }};
  pthread_setname_np(t.native_handle(), "dally.probe");
  std::this_thread::sleep_for(20ms);
  auto text = describe_threads();
  stop = true;
  t.join();
  BOOST_CHECK_MESSAGE(text.find("dally.probe (") != std::string::npos, text);
}
