#pragma once

#include <cstdint>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

namespace dally::actors {

/// Spawns the consumer registry: subscriptions of consumer actors (local or
/// remote) to topics. It monitors every consumer; when one dies, its
/// subscriptions end and the notifiers requeue the deliveries it held. It
/// tells the notifier in charge of a topic who consumes it.
///
/// Requests (from the engine): (subscribe_request, consumer_actor) and
/// (unsubscribe_request, consumer_actor) answered with empty_reply;
/// (topics_atom) answered with a topic_consumers_msg.
caf::actor spawn_consumer_registry(caf::actor_system& sys,
                                   std::vector<caf::actor> notifiers,
                                   uint32_t default_max_in_flight);

} // namespace dally::actors
