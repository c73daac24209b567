// actors::worker_timers, and the timed messages that prompt_stealing's
// workers deliver themselves: never before their time, in due order, by a
// resting worker while another is busy, by a busy one once it is free, and
// none left behind when the actor system stops.

#define BOOST_TEST_MODULE worker_timers
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/prompt_stealing.hpp"
#include "actors/system_setup.hpp"
#include "actors/worker_timers.hpp"

using namespace dally;
using namespace std::chrono_literals;

namespace {

constexpr int64_t ms_ns = 1'000'000;

/// When each timed message arrived, with the due time it carried.
struct arrivals {
  std::mutex lock;
  std::vector<std::pair<int64_t, int64_t>> due_and_arrived_ns;

  size_t size() {
    std::lock_guard<std::mutex> guard{lock};
    return due_and_arrived_ns.size();
  }

  /// Waits up to `limit` for `n` arrivals.
  bool await(size_t n, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (size() < n) {
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
};

/// Writes down the arrival of each due time it receives.
caf::behavior recorder(caf::event_based_actor*, arrivals* log) {
  return {
    [log](int64_t due_ns) {
      auto now = actors::worker_timers::now_ns();
      std::lock_guard<std::mutex> guard{log->lock};
      log->due_and_arrived_ns.emplace_back(due_ns, now);
    },
  };
}

/// Spins on its worker until `release` is set, then notes when it ended.
caf::behavior hog(caf::event_based_actor*, std::atomic<bool>* release,
                  std::atomic<int64_t>* ended_ns) {
  return {
    [release, ended_ns](int) {
      while (!release->load())
        std::this_thread::yield();
      ended_ns->store(actors::worker_timers::now_ns());
    },
  };
}

struct prompt_config : caf::actor_system_config {
  explicit prompt_config(int workers) {
    actors::rest_idle_workers(*this);
    actors::prompt_outside_jobs(*this);
    set("scheduler.max-threads", workers);
    // A resting worker that does not watch the timers looks for work only
    // this often, so a message that arrives within a few seconds was
    // delivered by the watcher.
    set("work-stealing.relaxed-sleep-duration", caf::timespan{30s});
  }
};

/// A system of `workers` workers, one of them kept busy by a `hog` until
/// `let_go`, and a `recorder` to arm messages for.
struct hogged_system {
  explicit hogged_system(int workers)
    : cfg(workers), sys(cfg), dest(sys.spawn(recorder, &log)),
      busy(sys.spawn(hog, &release, &hog_ended_ns)),
      fn(actors::worker_timer_of(sys)) {
    caf::anon_send(busy, 0);
  }

  ~hogged_system() {
    let_go();
    caf::anon_send_exit(dest, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(busy, caf::exit_reason::user_shutdown);
  }

  /// Ends the hog's job; returns when it ended.
  int64_t let_go() {
    release = true;
    while (hog_ended_ns.load() == 0)
      std::this_thread::sleep_for(1ms);
    return hog_ended_ns.load();
  }

  // Before the system, so that they outlive its actors.
  arrivals log;
  std::atomic<bool> release{false};
  std::atomic<int64_t> hog_ended_ns{0};
  prompt_config cfg;
  caf::actor_system sys;
  caf::actor dest;
  caf::actor busy;
  actors::worker_timer_fn fn;
};

void arm(const actors::worker_timer_fn& fn, const caf::actor& dest,
         int64_t due_ns) {
  fn(due_ns, caf::actor_cast<caf::strong_actor_ptr>(dest),
     caf::make_message(due_ns), caf::message_priority::high);
}

} // namespace

BOOST_AUTO_TEST_CASE(the_heap_gives_entries_back_in_due_order) {
  actors::worker_timers timers;
  BOOST_CHECK_EQUAL(timers.earliest_ns(), actors::worker_timers::never_ns);
  auto msg = [](int x) { return caf::make_message(x); };
  auto normal = caf::message_priority::normal;
  BOOST_CHECK(timers.push(300, nullptr, msg(1), normal));  // first
  BOOST_CHECK(timers.push(100, nullptr, msg(2), normal));  // earlier
  BOOST_CHECK(!timers.push(200, nullptr, msg(3), normal)); // not earliest
  BOOST_CHECK(!timers.push(100, nullptr, msg(4), normal)); // a tie
  BOOST_CHECK_EQUAL(timers.earliest_ns(), 100);
  std::vector<actors::worker_timers::entry> out;
  timers.take_due(99, out);
  BOOST_CHECK(out.empty());
  timers.take_due(200, out);
  BOOST_REQUIRE_EQUAL(out.size(), 3u);
  // Due together: in the order armed.
  BOOST_CHECK_EQUAL(out[0].content.get_as<int>(0), 2);
  BOOST_CHECK_EQUAL(out[1].content.get_as<int>(0), 4);
  BOOST_CHECK_EQUAL(out[2].content.get_as<int>(0), 3);
  BOOST_CHECK_EQUAL(timers.earliest_ns(), 300);
  BOOST_CHECK_EQUAL(timers.size(), 1u);
  timers.clear();
  BOOST_CHECK_EQUAL(timers.size(), 0u);
  BOOST_CHECK_EQUAL(timers.earliest_ns(), actors::worker_timers::never_ns);
}

BOOST_AUTO_TEST_CASE(only_the_prompt_scheduler_offers_worker_timers) {
  {
    prompt_config cfg{2};
    caf::actor_system sys{cfg};
    BOOST_CHECK(static_cast<bool>(actors::worker_timer_of(sys)));
  }
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{cfg};
    BOOST_CHECK(!actors::worker_timer_of(sys));
  }
  {
    // Virtual time stays with the test coordinator's clock.
    prompt_config cfg{2};
    cfg.set("scheduler.policy", caf::atom("testing"));
    caf::actor_system sys{cfg};
    BOOST_CHECK(!actors::worker_timer_of(sys));
  }
}

BOOST_AUTO_TEST_CASE(messages_arrive_not_before_their_time_in_due_order) {
  prompt_config cfg{2};
  caf::actor_system sys{cfg};
  arrivals log;
  auto dest = sys.spawn(recorder, &log);
  auto fn = actors::worker_timer_of(sys);
  BOOST_REQUIRE(fn);
  // Armed out of order from a thread that is no worker, while the workers
  // rest; some due at the same time.
  auto base = actors::worker_timers::now_ns() + 20 * ms_ns;
  constexpr int count = 60;
  for (int i = count - 1; i >= 0; --i)
    arm(fn, dest, base + (i / 2) * 3 * ms_ns);
  BOOST_REQUIRE(log.await(count, 5s));
  std::lock_guard<std::mutex> guard{log.lock};
  int64_t last_due = 0;
  for (auto [due, arrived] : log.due_and_arrived_ns) {
    BOOST_CHECK_GE(arrived, due);
    BOOST_CHECK_GE(due, last_due);
    last_due = due;
  }
  caf::anon_send_exit(dest, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_resting_worker_delivers_while_another_is_busy) {
  hogged_system hogged{2};
  // The message comes due while one worker spins; the other, resting,
  // wakes up for it. The hog lets go only after it arrived or 5 s passed.
  arm(hogged.fn, hogged.dest, actors::worker_timers::now_ns() + 50 * ms_ns);
  bool arrived = hogged.log.await(1, 5s);
  hogged.let_go();
  BOOST_CHECK(arrived);
}

BOOST_AUTO_TEST_CASE(a_busy_worker_delivers_once_it_is_free) {
  hogged_system hogged{1};
  arm(hogged.fn, hogged.dest, actors::worker_timers::now_ns() + 5 * ms_ns);
  // The only worker spins past the due time: nothing can deliver it yet.
  std::this_thread::sleep_for(100ms);
  BOOST_CHECK_EQUAL(hogged.log.size(), 0u);
  auto ended_ns = hogged.let_go();
  BOOST_REQUIRE(hogged.log.await(1, 10s));
  std::lock_guard<std::mutex> guard{hogged.log.lock};
  BOOST_CHECK_GE(hogged.log.due_and_arrived_ns[0].second, ended_ns);
}

BOOST_AUTO_TEST_CASE(armed_from_a_worker_the_next_one_comes_in_turn) {
  // A chain: each arrival arms the next from inside a worker, as a
  // notifier re-arms its release.
  prompt_config cfg{2};
  caf::actor_system sys{cfg};
  arrivals log;
  auto fn = actors::worker_timer_of(sys);
  constexpr int count = 40;
  // An argument: CAF 0.17 spawns a function without any through a null
  // pointer, which the sanitizers report.
  auto chain = sys.spawn(
    [&](caf::event_based_actor* self, int) -> caf::behavior {
      return {
        [&, self](int64_t due_ns) {
          auto now = actors::worker_timers::now_ns();
          size_t n;
          {
            std::lock_guard<std::mutex> guard{log.lock};
            log.due_and_arrived_ns.emplace_back(due_ns, now);
            n = log.due_and_arrived_ns.size();
          }
          if (n < count)
            arm(fn, caf::actor{self}, now + 2 * ms_ns);
        },
      };
    },
    0);
  arm(fn, chain, actors::worker_timers::now_ns() + 2 * ms_ns);
  BOOST_REQUIRE(log.await(count, 5s));
  std::lock_guard<std::mutex> guard{log.lock};
  for (auto [due, arrived] : log.due_and_arrived_ns)
    BOOST_CHECK_GE(arrived, due);
  caf::anon_send_exit(chain, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(the_system_stops_with_timers_still_armed) {
  arrivals log;
  {
    prompt_config cfg{2};
    caf::actor_system sys{cfg};
    auto dest = sys.spawn(recorder, &log);
    auto fn = actors::worker_timer_of(sys);
    // An hour out: the system must neither wait for it nor leak it (the
    // sanitizers' leak check).
    arm(fn, dest, actors::worker_timers::now_ns() + 3600'000 * ms_ns);
    caf::anon_send_exit(dest, caf::exit_reason::user_shutdown);
  }
  BOOST_CHECK_EQUAL(log.size(), 0u);
}
