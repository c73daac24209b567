#pragma once

#include <cstdint>

#include <caf/fwd.hpp>

#include "net/engine_actor.hpp"

namespace dally::net {

/// Bytes a request may need on the wire beyond its protobuf encoding: CAF's
/// message framing, type names and, for a subscription, the consumer's
/// address. A request is refused when its encoding plus this exceeds the
/// limit, so the node's own check never sees it.
constexpr uint64_t client_framing_bytes = 4096;

/// A remote client's local stand-in for the engine `node` (a proxy from
/// CAF's middleman). It forwards every request and passes the answer back,
/// with two differences a caller notices:
/// - a request whose encoding, plus `client_framing_bytes`, exceeds
///   `max_message_bytes` fails at once with request_too_large and is never
///   sent: the node would drop the whole connection for it;
/// - when the connection drops, requests still waiting for the node fail at
///   once with unavailable, instead of each at its own timeout; the
///   stand-in then exits with the proxy's exit reason, so monitoring it
///   tells of the loss.
/// The middleman keeps a stand-in that has sent to the node alive as long
/// as the connection, whoever still holds it; so a running stand-in for the
/// same system, proxy and limit is handed out again instead of a new one,
/// and a client that connects again and again does not collect them. An
/// exit sent to it ends it for every holder; the next connect gets a new
/// one.
engine_actor client_guard_for(caf::actor_system& sys, engine_actor node,
                              uint64_t max_message_bytes);

} // namespace dally::net
