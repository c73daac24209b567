#pragma once

#include <cstdint>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include "actors/engine_actor.hpp"

namespace dally::actors {

/// Loads CAF's middleman into `cfg` and turns on its heartbeats (every
/// second, connection dropped after 5 s without traffic): CAF's default is
/// none, and then a frozen peer is never detected. Call it, with
/// `add_message_types`, before creating the actor_system of a node or a
/// remote client.
void enable_network(caf::actor_system_config& cfg);

/// Publishes `engine` on `address:port` (port 0 picks a free one) and
/// returns the bound port. Each connection gets its own protocol state: a
/// peer that sends garbage loses its connection, nobody else is affected.
caf::expected<uint16_t> publish_engine(caf::actor_system& sys,
                                       const engine_actor& engine,
                                       const std::string& address,
                                       uint16_t port);

/// Connects to the engine a dallyd publishes at `host:port`. The handle
/// speaks `engine_actor`; requests to it fail with CAF errors (see
/// `from_caf`) when the node dies or the connection drops.
caf::expected<engine_actor>
connect_engine(caf::actor_system& sys, const std::string& host, uint16_t port);

} // namespace dally::actors
