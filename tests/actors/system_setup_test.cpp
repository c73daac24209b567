// actors::rest_idle_workers: what it sets, that a user's own setting wins,
// and that a system whose idle workers block still runs every job that one
// worker hands to another (CAF announces such jobs to no sleeping worker).
// actors::prompt_outside_jobs: which scheduler it installs, and that a job
// from outside goes ahead of what a busy worker's actors queued.

#define BOOST_TEST_MODULE system_setup
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/settings.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/prompt_stealing.hpp"
#include "actors/system_setup.hpp"

using namespace dally;
using namespace std::chrono_literals;

namespace {

size_t moderate_polls(const caf::actor_system_config& cfg) {
  return caf::get_or(cfg, "work-stealing.moderate-poll-attempts",
                     size_t{12345});
}

/// Passes a counter back to its sender until it reaches `rounds`, then
/// reports to `done`. Every hop is a message a worker enqueues for another
/// actor.
caf::behavior pass_back(caf::event_based_actor* self, caf::actor done) {
  return {
    [self, done](caf::actor next, int hop, int rounds) {
      if (hop == rounds)
        self->send(done, hop);
      else
        self->send(next, self, hop + 1, rounds);
    },
  };
}

/// Where the actors of the ordering test write down that they ran.
struct run_log {
  std::mutex lock;
  std::vector<std::string> names;

  void add(std::string name) {
    std::lock_guard<std::mutex> guard{lock};
    names.push_back(std::move(name));
  }
};

/// Writes its name down on every number; answers a flag with itself.
caf::behavior logger(caf::event_based_actor*, run_log* log, std::string name) {
  return {
    [log, name](int) { log->add(name); },
    [](bool flag) { return flag; },
  };
}

/// Queues a message for each of `others` on its own worker, then keeps that
/// worker busy until the test has sent its outside message.
caf::behavior busy(caf::event_based_actor* self, std::vector<caf::actor> others,
                   std::atomic<int>* step) {
  return {
    [self, others, step](int) {
      for (const auto& other : others)
        self->send(other, 0);
      step->store(1);
      while (step->load() != 2)
        std::this_thread::yield();
    },
  };
}

/// Runs `busy` with three queued jobs on a single worker, sends `outside` a
/// message from this (non-worker) thread meanwhile, and returns the order in
/// which the four ran.
std::vector<std::string> run_order(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", 1);
  caf::actor_system sys{cfg};
  run_log log;
  std::atomic<int> step{0};
  std::vector<caf::actor> queued;
  for (auto name : {"a", "b", "c"})
    queued.push_back(sys.spawn(logger, &log, std::string{name}));
  auto outside = sys.spawn(logger, &log, std::string{"outside"});
  auto worker_hog = sys.spawn(busy, queued, &step);
  // Each actor's first run is a job of its own; let them all be done.
  caf::scoped_actor self{sys};
  for (auto& a : queued)
    self->request(a, caf::infinite, true)
      .receive([](bool) {}, [](caf::error&) {});
  self->request(outside, caf::infinite, true)
    .receive([](bool) {}, [](caf::error&) {});
  caf::anon_send(worker_hog, 0);
  while (step.load() != 1)
    std::this_thread::yield();
  caf::anon_send(outside, 0);
  step.store(2);
  for (int i = 0; i < 5000; ++i) {
    {
      std::lock_guard<std::mutex> guard{log.lock};
      if (log.names.size() == 4)
        break;
    }
    std::this_thread::sleep_for(1ms);
  }
  for (auto& a : queued)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(outside, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(worker_hog, caf::exit_reason::user_shutdown);
  std::lock_guard<std::mutex> guard{log.lock};
  return log.names;
}

/// Two pairs of `pass_back` actors pass two counters each until every
/// counter has made its rounds; fails the test if that takes a minute.
void pass_back_rings(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", 4);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  // Two pairs pass two counters each at once, so that jobs pile up on busy
  // workers while others have gone to rest.
  constexpr int rounds = 20'000;
  std::vector<caf::actor> members;
  for (int ring = 0; ring < 2; ++ring) {
    auto a = sys.spawn(pass_back, caf::actor{self});
    auto b = sys.spawn(pass_back, caf::actor{self});
    members.insert(members.end(), {a, b});
    // Two counters per pair, one starting at each end.
    self->send(a, b, 0, rounds);
    self->send(b, a, 1, rounds);
  }
  int finished = 0;
  bool timed_out = false;
  while (finished < 4 && !timed_out)
    self->receive(
      [&](int hop) {
        BOOST_CHECK_EQUAL(hop, rounds);
        ++finished;
      },
      caf::after(60s) >> [&] { timed_out = true; });
  BOOST_CHECK(!timed_out);
  BOOST_CHECK_EQUAL(finished, 4);
  for (const auto& m : members)
    self->send_exit(m, caf::exit_reason::user_shutdown);
}

} // namespace

BOOST_AUTO_TEST_CASE(it_turns_the_moderate_polling_off) {
  caf::actor_system_config cfg;
  BOOST_CHECK_EQUAL(moderate_polls(cfg), 12345u); // Nothing set yet.
  actors::rest_idle_workers(cfg);
  BOOST_CHECK_EQUAL(moderate_polls(cfg), 0u);
  // The short spin before a worker blocks stays CAF's.
  BOOST_CHECK(
    !caf::get_if(&cfg.content, "work-stealing.aggressive-poll-attempts"));
}

BOOST_AUTO_TEST_CASE(a_value_from_the_command_line_wins) {
  caf::actor_system_config cfg;
  actors::rest_idle_workers(cfg);
  std::vector<std::string> args{"--work-stealing.moderate-poll-attempts=500"};
  BOOST_REQUIRE(!cfg.parse(args));
  BOOST_CHECK_EQUAL(moderate_polls(cfg), 500u);
}

BOOST_AUTO_TEST_CASE(resting_workers_run_every_job_workers_hand_each_other) {
  caf::actor_system_config cfg;
  actors::rest_idle_workers(cfg);
  pass_back_rings(cfg);
}

BOOST_AUTO_TEST_CASE(prompt_outside_jobs_installs_its_scheduler) {
  using prompt = caf::scheduler::coordinator<actors::prompt_stealing>;
  {
    caf::actor_system_config cfg;
    actors::prompt_outside_jobs(cfg);
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{cfg};
    BOOST_CHECK(dynamic_cast<prompt*>(&sys.scheduler()) != nullptr);
    BOOST_CHECK_EQUAL(actors::describe_scheduler(sys),
                      "prompt stealing, 2 workers");
  }
  {
    // CAF's other scheduler, chosen as dallyd's operators would.
    caf::actor_system_config cfg;
    actors::prompt_outside_jobs(cfg);
    std::vector<std::string> args{"--scheduler.policy=sharing",
                                  "--scheduler.max-threads=3"};
    BOOST_REQUIRE(!cfg.parse(args));
    caf::actor_system sys{cfg};
    BOOST_CHECK_EQUAL(actors::describe_scheduler(sys),
                      "CAF work sharing, 3 workers");
  }
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 1);
    caf::actor_system sys{cfg};
    BOOST_CHECK_EQUAL(actors::describe_scheduler(sys),
                      "CAF work stealing, 1 worker");
  }
  {
    // The simulator's and the actor tests' deterministic scheduler still
    // wins when asked for.
    caf::actor_system_config cfg;
    actors::prompt_outside_jobs(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    caf::actor_system sys{cfg};
    BOOST_CHECK(dynamic_cast<prompt*>(&sys.scheduler()) == nullptr);
    BOOST_CHECK(dynamic_cast<caf::scheduler::test_coordinator*>(
                  &sys.scheduler()) != nullptr);
  }
}

BOOST_AUTO_TEST_CASE(an_outside_job_goes_ahead_of_what_a_busy_worker_queued) {
  {
    caf::actor_system_config cfg;
    actors::prompt_outside_jobs(cfg);
    auto order = run_order(cfg);
    BOOST_REQUIRE_EQUAL(order.size(), 4u);
    BOOST_CHECK_EQUAL(order.front(), "outside");
  }
  {
    // CAF's own work stealing puts it at the back: what this policy fixes.
    caf::actor_system_config cfg;
    auto order = run_order(cfg);
    BOOST_REQUIRE_EQUAL(order.size(), 4u);
    BOOST_CHECK_EQUAL(order.back(), "outside");
  }
}

BOOST_AUTO_TEST_CASE(prompt_workers_run_every_job_workers_hand_each_other) {
  caf::actor_system_config cfg;
  actors::rest_idle_workers(cfg);
  actors::prompt_outside_jobs(cfg);
  pass_back_rings(cfg);
}

BOOST_AUTO_TEST_CASE(cpu_slices_shorten_for_cafs_threads_only) {
  auto callers_slice = actors::cpu_slice_of_this_thread();
  // Linux 6.12 and later report the default slice of every fair thread;
  // older kernels keep none per thread and ignore the request.
  bool per_thread = callers_slice.count() > 0;
  caf::actor_system_config cfg;
  actors::prompt_outside_jobs(cfg);
  cfg.set("scheduler.max-threads", 2);
  auto shortened = actors::shorten_cpu_slices(cfg, 300us);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  // An argument: CAF 0.17 spawns a function without any through a null
  // pointer, which the sanitizers report.
  auto reporter = sys.spawn(
    [](caf::event_based_actor*, int) -> caf::behavior {
      return {[](int) { return actors::cpu_slice_of_this_thread().count(); }};
    },
    0);
  int64_t workers_slice = -1;
  self->request(reporter, 10s, 1)
    .receive([&](int64_t ns) { workers_slice = ns; },
             [](caf::error& err) { BOOST_ERROR(caf::to_string(err)); });
  if (per_thread) {
    // A worker sets it as it starts, before its first job.
    BOOST_CHECK_EQUAL(workers_slice, 300'000);
    // Both workers and the clock, each as soon as it runs.
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (shortened->load() < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    BOOST_CHECK_GE(shortened->load(), 3u);
  } else {
    BOOST_CHECK_EQUAL(shortened->load(), 0u);
  }
  // The caller's own thread is not CAF's: untouched.
  BOOST_CHECK(actors::cpu_slice_of_this_thread() == callers_slice);
  self->send_exit(reporter, caf::exit_reason::user_shutdown);
}
