// When a published engine's listener stops and resumes reading requests
// from clients, without CAF: the bound on requests read and not yet taken
// by the engine, and the wake-up that opens the door again.

#define BOOST_TEST_MODULE front_door
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cstdint>
#include <thread>

#include "net/front_door.hpp"

using namespace dally::net;

BOOST_AUTO_TEST_CASE(stays_open_below_the_bound) {
  front_door door{4};
  BOOST_TEST(door.resume_backlog() == 2u);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(!door.on_request());
  door.on_taken();
  BOOST_TEST(!door.on_request());
  BOOST_TEST(!door.closed());
  BOOST_TEST(door.backlog() == 3);
  BOOST_TEST(door.peak_backlog() == 3);
  BOOST_TEST(door.closings() == 0u);
}

BOOST_AUTO_TEST_CASE(closes_at_the_bound_and_wakes_once_at_the_low_mark) {
  front_door door{4};
  int wakes = 0;
  door.set_waker([&] { ++wakes; });
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(!door.on_request());
  BOOST_TEST(door.on_request());
  BOOST_TEST(door.closed());
  // A connection that still brings a request while closed stops too.
  BOOST_TEST(door.on_request());
  BOOST_TEST(door.backlog() == 5);
  door.on_taken();
  door.on_taken();
  BOOST_TEST(wakes == 0);
  door.on_taken();
  BOOST_TEST(wakes == 1);
  door.on_taken();
  BOOST_TEST(wakes == 1);
  BOOST_TEST(door.reopen());
  BOOST_TEST(!door.closed());
  BOOST_TEST(door.closings() == 1u);
  BOOST_TEST(door.peak_backlog() == 5);
}

BOOST_AUTO_TEST_CASE(a_wake_that_finds_the_backlog_up_again_waits_for_next) {
  front_door door{4, 1};
  int wakes = 0;
  door.set_waker([&] { ++wakes; });
  for (int i = 0; i < 4; ++i)
    door.on_request();
  BOOST_TEST(door.closed());
  door.on_taken();
  door.on_taken();
  door.on_taken();
  BOOST_TEST(wakes == 1);
  // Requests read before their connections stopped raise it again.
  door.on_request();
  door.on_request();
  BOOST_TEST(!door.reopen());
  BOOST_TEST(door.closed());
  door.on_taken();
  BOOST_TEST(wakes == 1);
  door.on_taken();
  BOOST_TEST(wakes == 2);
  BOOST_TEST(door.reopen());
}

BOOST_AUTO_TEST_CASE(a_late_wake_for_an_open_door_changes_nothing) {
  front_door door{2};
  BOOST_TEST(!door.reopen());
  BOOST_TEST(!door.on_request());
  BOOST_TEST(!door.closed());
}

BOOST_AUTO_TEST_CASE(the_engine_may_take_before_the_listener_counts) {
  front_door door{2};
  door.on_taken();
  BOOST_TEST(door.backlog() == -1);
  BOOST_TEST(!door.on_request());
  BOOST_TEST(!door.on_request());
  BOOST_TEST(door.on_request());
}

BOOST_AUTO_TEST_CASE(resume_mark_must_be_below_the_bound) {
  BOOST_TEST(front_door(10, 10).resume_backlog() == 5u);
  BOOST_TEST(front_door(10, 3).resume_backlog() == 3u);
  BOOST_TEST(front_door(0).max_backlog() == 1u);
  BOOST_TEST(front_door(1).resume_backlog() == 0u);
}

// A listener and an engine on two threads: every closing is followed by a
// wake, and the listener never reads far past the bound.
BOOST_AUTO_TEST_CASE(two_threads_never_strand_a_closed_door) {
  constexpr int64_t total = 200'000;
  constexpr uint64_t max = 64;
  front_door door{max};
  std::atomic<int> wakes{0};
  door.set_waker([&] { wakes.fetch_add(1); });
  std::atomic<int64_t> sent{0};
  std::thread engine{[&] {
    int64_t taken = 0;
    while (taken < total)
      if (taken < sent.load()) {
        door.on_taken();
        ++taken;
      }
  }};
  int seen_wakes = 0;
  int64_t max_seen = 0;
  while (sent.load() < total) {
    if (door.closed()) {
      if (wakes.load() > seen_wakes) {
        ++seen_wakes;
        door.reopen();
      }
      continue;
    }
    sent.fetch_add(1);
    door.on_request();
    max_seen = std::max(max_seen, door.backlog());
  }
  engine.join();
  BOOST_TEST(door.backlog() == 0);
  BOOST_TEST(max_seen <= static_cast<int64_t>(max));
  BOOST_TEST(door.peak_backlog() <= static_cast<int64_t>(max));
}

BOOST_AUTO_TEST_CASE(a_count_that_never_reaches_the_engine_opens_after_stall) {
  front_door door{2, 0, 1000};
  door.on_tick(0);
  door.on_request();
  BOOST_TEST(door.on_request());
  // Counted requests the engine never gets: nothing is taken.
  BOOST_TEST(!door.on_tick(100));
  BOOST_TEST(!door.on_tick(900));
  BOOST_TEST(door.closed());
  BOOST_TEST(door.on_tick(1000));
  BOOST_TEST(!door.closed());
  BOOST_TEST(door.backlog() == 0);
  BOOST_TEST(door.stalls() == 1u);
}

BOOST_AUTO_TEST_CASE(an_engine_that_takes_slowly_keeps_the_door_closed) {
  front_door door{4, 1, 1000};
  door.on_tick(0);
  for (int i = 0; i < 4; ++i)
    door.on_request();
  BOOST_TEST(door.closed());
  for (int64_t t = 500; t <= 1500; t += 500) {
    door.on_taken();
    BOOST_TEST(!door.on_tick(t));
  }
  BOOST_TEST(door.closed());
  BOOST_TEST(door.stalls() == 0u);
}
