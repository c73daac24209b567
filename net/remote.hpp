#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include "net/connection_guard.hpp"
#include "net/engine_actor.hpp"
#include "net/front_door.hpp"

namespace dally::net {

/// Loads CAF's middleman into `cfg` and turns on its heartbeats (every
/// second, connection dropped after 5 s without traffic): CAF's default is
/// none, and then a frozen peer is never detected. Call it, with
/// `add_message_types`, before creating the actor_system of a node or a
/// remote client.
void enable_network(caf::actor_system_config& cfg);

/// Limits on what a peer of a published engine may send.
struct publish_options {
  /// Largest BASP message a peer may send, header excluded. CAF 0.17 sizes
  /// its read buffer to whatever length a header claims, up to 4 GiB, and
  /// zero-fills it, so a garbage or hostile header would cost the node that
  /// much memory and seconds of its network thread. A connection whose next
  /// message claims more is dropped before anything is allocated. The
  /// default leaves room for a batch of 64 tasks with 1 MiB payloads.
  uint64_t max_message_bytes = uint64_t{64} << 20;

  /// Told, on the network thread, of each connection dropped for a message
  /// above `max_message_bytes`: the peer's address and the claimed size.
  std::function<void(const std::string& peer, uint64_t claimed_bytes)>
    on_refused;

  /// Which connections are admitted and how long they may stay without
  /// work; how many bytes of unfinished messages all of them may hold
  /// (see connection_limits). A message is read into memory as its bytes
  /// arrive, never sized up front to what its header claims.
  connection_limits limits;

  /// Told, on the network thread, of each connection closed for
  /// `limits`: the peer's address and why, or no reason for a new
  /// connection refused because every slot holds one that works and none
  /// has idled long enough.
  std::function<void(const std::string& peer, std::optional<close_reason> why)>
    on_closed;

  /// Speak TLS on every connection, with the files given to `enable_tls`.
  bool tls = false;

  /// The bound on requests read for the published actor and not yet taken
  /// by it; give the same door to the engine (`spawn_engine`). A
  /// connection that brings a request while the door is closed stops
  /// reading its socket until the engine has caught up. None: requests are
  /// read as fast as they come, and wait in the engine's mailbox, which
  /// has no bound.
  std::shared_ptr<front_door> door;
};

/// Publishes `engine` on `address:port` (port 0 picks a free one) and
/// returns the bound port. Each connection gets its own protocol state: a
/// peer that sends garbage loses its connection, nobody else is affected.
caf::expected<uint16_t> publish_engine(caf::actor_system& sys,
                                       const engine_actor& engine,
                                       const std::string& address,
                                       uint16_t port,
                                       publish_options opts = {});

/// Publishes the dynamically typed `whom` (a node's cluster actor) like
/// `publish_engine`: the same limits, guard and TLS on its own port.
caf::expected<uint16_t> publish_actor(caf::actor_system& sys,
                                      const caf::actor& whom,
                                      const std::string& address, uint16_t port,
                                      publish_options opts = {});

/// How a client talks to a node.
struct connect_options {
  /// The node's limit on one message (dallyd --max-message-bytes, default
  /// 64 MiB). A request that would not fit fails at once with
  /// request_too_large and is never sent, since the node would drop the
  /// connection for it; set this when the node's limit differs.
  uint64_t max_message_bytes = uint64_t{64} << 20;

  /// Speak TLS, with the files given to `enable_tls`.
  bool tls = false;
};

/// Connects to the engine a dallyd publishes at `host:port`. The handle
/// speaks `engine_actor` and is a local stand-in for the node's engine
/// (see `client_guard_for`): requests too large for the node fail with
/// request_too_large, and when the node dies or the connection drops,
/// requests still waiting fail at once with unavailable and the handle
/// exits (monitor it to find out).
caf::expected<engine_actor> connect_engine(caf::actor_system& sys,
                                           const std::string& host,
                                           uint16_t port,
                                           connect_options opts = {});

} // namespace dally::net
