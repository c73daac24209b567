// runtime::configure: what each role sets up, and that a user's own setting
// made afterwards wins.

#define BOOST_TEST_MODULE runtime_setup
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/settings.hpp>
#include <caf/timespan.hpp>

#include <chrono>

#include "core/errc.hpp"
#include "net/error.hpp"
#include "runtime/setup.hpp"

using namespace dally;
using namespace std::chrono_literals;

namespace {

caf::timespan heartbeat(const caf::actor_system_config& cfg) {
  return caf::get_or(cfg, "middleman.heartbeat-interval", caf::timespan{0});
}

} // namespace

BOOST_AUTO_TEST_CASE(a_node_and_a_client_get_the_network_with_heartbeats) {
  for (auto r : {runtime::role::node, runtime::role::client}) {
    caf::actor_system_config cfg;
    runtime::configure(cfg, r);
    BOOST_CHECK(heartbeat(cfg) > caf::timespan{0});
    caf::actor_system sys{cfg};
    BOOST_CHECK(sys.has_middleman());
  }
}

BOOST_AUTO_TEST_CASE(an_embedded_engine_needs_no_network) {
  caf::actor_system_config cfg;
  runtime::configure(cfg, runtime::role::embedded);
  caf::actor_system sys{cfg};
  BOOST_CHECK(!sys.has_middleman());
}

BOOST_AUTO_TEST_CASE(the_scheduler_is_cafs_own) {
  caf::actor_system_config cfg;
  runtime::configure(cfg, runtime::role::node);
  cfg.set("scheduler.max-threads", 3);
  caf::actor_system sys{cfg};
  BOOST_CHECK_EQUAL(runtime::describe_scheduler(sys),
                    "CAF stealing, 3 workers");
}

BOOST_AUTO_TEST_CASE(dally_errors_render_with_their_code_and_message) {
  caf::actor_system_config cfg;
  runtime::configure(cfg, runtime::role::embedded);
  caf::actor_system sys{cfg};
  auto err = net::make_caf_error(core::errc::invalid_topic, "topic is empty");
  auto text = sys.render(err);
  BOOST_CHECK_MESSAGE(text.find("invalid_topic") != std::string::npos, text);
  BOOST_CHECK_MESSAGE(text.find("topic is empty") != std::string::npos, text);
}
