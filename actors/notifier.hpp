#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/dispatcher.hpp"

namespace dally::actors {

/// Spawns a notifier: it delivers fired tasks to consumers through a
/// `dispatcher`, each delivery a request with a timeout at its lease
/// deadline, so that a consumer that hangs or dies holds up nothing but its
/// own deliveries. Verdicts go to `engine` as ack or nack; requeue,
/// undelivered and topic availability reports too (the engine routes them
/// to the shards in order).
caf::actor spawn_notifier(caf::actor_system& sys, caf::actor engine,
                          dispatcher_options opts,
                          std::function<int64_t()> wall_clock_ms);

} // namespace dally::actors
