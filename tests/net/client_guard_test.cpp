// The client's stand-in for a remote node: what it does with requests still
// waiting when the node goes away, or when its actor system stops. Run under
// LeakSanitizer, the shutdown case fails if the stand-in's requests leak.

#define BOOST_TEST_MODULE client_guard
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_control_block.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "core/errc.hpp"
#include "net/client_guard.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"

using namespace dally;
using namespace dally::net;
using namespace std::chrono_literals;

namespace {

/// A node that takes schedule requests and never answers them: each stays
/// waiting in the stand-in.
caf::behavior silent_node(caf::event_based_actor* self,
                          std::shared_ptr<std::atomic<int>> received) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  return {
    [self, received, held](schedule_request&) {
      held->push_back(self->make_response_promise());
      ++*received;
      return held->back();
    },
  };
}

/// A node that answers every schedule request.
caf::behavior answering_node(std::shared_ptr<std::atomic<int>> answered) {
  return {
    [answered](schedule_request&) {
      ++*answered;
      return schedule_reply{};
    },
  };
}

void wait_for(const std::atomic<int>& n, int want) {
  auto until = std::chrono::steady_clock::now() + 10s;
  while (n.load() < want && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  BOOST_REQUIRE_EQUAL(n.load(), want);
}

/// Waits until `handle` is the only strong reference to its actor.
void wait_until_only_handle(const engine_actor& handle) {
  auto* ctrl = caf::actor_cast<caf::actor_control_block*>(handle);
  auto until = std::chrono::steady_clock::now() + 10s;
  while (ctrl->strong_refs.load() > 1 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  BOOST_REQUIRE_EQUAL(ctrl->strong_refs.load(), 1u);
}

schedule_request a_request() {
  v1::ScheduleRequest pb;
  pb.set_topic("t");
  pb.mutable_when()->set_in_ms(1'000);
  return schedule_request{pb};
}

struct fixture {
  caf::actor_system_config cfg;
  fixture() { runtime::add_message_types(cfg); }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(client_guard_suite, fixture)

BOOST_AUTO_TEST_CASE(a_waiting_request_fails_when_the_node_goes_down) {
  caf::actor_system sys{cfg};
  auto received = std::make_shared<std::atomic<int>>(0);
  auto node = sys.spawn(silent_node, received);
  auto guard =
    client_guard_for(sys, caf::actor_cast<engine_actor>(node), 1 << 20);
  auto answer = std::make_shared<caf::error>();
  std::thread asker{[&] {
    caf::scoped_actor asking{sys};
    asking->request(guard, 30s, a_request())
      .receive([](schedule_reply&) {},
               [&](caf::error& err) { *answer = std::move(err); });
  }};
  wait_for(*received, 1);
  caf::anon_send_exit(node, caf::exit_reason::kill);
  asker.join();
  auto got = from_caf(*answer);
  BOOST_CHECK(got.code() == core::errc::unavailable);
  BOOST_CHECK_MESSAGE(got.message().find("connection to the node was lost") !=
                        std::string::npos,
                      got.message());
}

BOOST_AUTO_TEST_CASE(a_stand_in_dropped_at_shutdown_frees_what_it_kept) {
  caf::actor_system sys{cfg};
  auto answered = std::make_shared<std::atomic<int>>(0);
  auto node = sys.spawn(answering_node, answered);
  auto guard =
    client_guard_for(sys, caf::actor_cast<engine_actor>(node), 1 << 20);
  {
    caf::scoped_actor self{sys};
    for (int i = 0; i < 3; ++i)
      self->request(guard, 10s, a_request())
        .receive([](schedule_reply&) {},
                 [](caf::error& err) { BOOST_FAIL(to_string(err)); });
  }
  BOOST_REQUIRE_EQUAL(answered->load(), 3);
  // The node's and the stand-in's workers may still hold it for a moment
  // after the last answer arrived; the stand-in must be idle and ours alone.
  wait_until_only_handle(guard);
  // What CAF 0.17's scheduler does at shutdown to an actor still queued:
  // clean it up without `on_exit`, then drop it.
  auto* ptr = caf::actor_cast<caf::abstract_actor*>(guard);
  static_cast<caf::scheduled_actor*>(ptr)->cleanup(
    caf::make_error(caf::exit_reason::user_shutdown), nullptr);
  auto addr = guard.address();
  guard = nullptr;
  BOOST_CHECK(caf::actor_cast<caf::strong_actor_ptr>(addr) == nullptr);
  caf::anon_send_exit(node, caf::exit_reason::kill);
}

BOOST_AUTO_TEST_SUITE_END()
