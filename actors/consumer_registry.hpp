#pragma once

#include <cstddef>
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
/// Requests (from the engine): (subscribe_request, consumer_actor),
/// (subscribe_request, batch_consumer_actor) and (unsubscribe_request,
/// consumer_actor) answered with empty_reply; (topics_atom) answered with a
/// topic_consumers_msg. A batch consumer gets up to its request's
/// `max_batch` deliveries per message (0: `default_max_batch`), at most its
/// `max_in_flight` and `max_batch_limit`.
///
/// A subscription's topic follows the rules of a task's (see
/// core::validate_topic, with `max_topic_bytes`): one that no task can
/// have is refused with invalid_topic.
caf::actor spawn_consumer_registry(caf::actor_system& sys,
                                   std::vector<caf::actor> notifiers,
                                   uint32_t default_max_in_flight,
                                   uint32_t default_max_batch,
                                   size_t max_topic_bytes);

/// The most deliveries one message to a batch consumer carries.
constexpr uint32_t max_batch_limit = 1024;

} // namespace dally::actors
