// actors::rest_idle_workers: what it sets, that a user's own setting wins,
// and that a system whose idle workers block still runs every job that one
// worker hands to another (CAF announces such jobs to no sleeping worker).

#define BOOST_TEST_MODULE system_setup
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/settings.hpp>

#include <chrono>
#include <string>
#include <vector>

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
