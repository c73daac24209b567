#pragma once

#include <cstdint>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/shard.hpp"

namespace dally::actors {

/// Spawns the node's supervisor: it starts one shard actor per entry of
/// `shards`, announces each to `engine` (shard_up_msg) and restarts a shard
/// that fails from its store, so that nothing acknowledged is lost: a shard
/// keeps no state that its store does not have. While a shard is down the
/// engine answers its requests with `unavailable` (shard_down_msg).
///
/// Restarts back off (10 ms, doubling, at most 1 s); after
/// `max_restarts_per_minute` in a minute the next try waits a minute. A
/// shard that fails at the very first start (its store is locked, corrupt
/// or of another shard count) is not retried: the engine reports the error
/// to whoever waits for it to become ready.
caf::actor spawn_supervisor(caf::actor_system& sys, caf::actor engine,
                            std::vector<shard_setup> shards,
                            uint32_t max_restarts_per_minute);

} // namespace dally::actors
