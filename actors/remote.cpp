#include "actors/remote.hpp"

#include <chrono>

#include <caf/io/middleman.hpp>
#include <caf/timespan.hpp>

#include "actors/type_ids.hpp"

namespace dally::actors {

void enable_network(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  using namespace std::chrono;
  cfg.set("middleman.heartbeat-interval", caf::timespan{seconds{1}});
  cfg.set("middleman.connection-timeout", caf::timespan{seconds{5}});
}

caf::expected<uint16_t> publish_engine(caf::actor_system& sys,
                                       const engine_actor& engine,
                                       const std::string& address,
                                       uint16_t port) {
  return sys.middleman().publish(
    engine, port, address.empty() ? nullptr : address.c_str(), true);
}

caf::expected<engine_actor>
connect_engine(caf::actor_system& sys, const std::string& host, uint16_t port) {
  return sys.middleman().remote_actor<engine_actor>(host, port);
}

} // namespace dally::actors
