#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "logic/notifier_logic.hpp"

namespace dally::actors {

/// Spawns a notifier: it delivers fired tasks to consumers through a
/// `notifier_logic`, each delivery a request with a timeout at its lease
/// deadline, so that a consumer that hangs or dies holds up nothing but its
/// own deliveries. Verdicts go as ack or nack straight to the task's shard
/// (one of `shard_count`; each shard announces itself with shard_up_msg
/// when it starts), sparing the engine a hop per task; requeue, undelivered
/// and topic availability reports go to `engine`, which routes them to the
/// shards in order.
caf::actor spawn_notifier(caf::actor_system& sys, caf::actor engine,
                          uint32_t shard_count, logic::notifier_options opts,
                          std::function<int64_t()> wall_clock_ms);

} // namespace dally::actors
