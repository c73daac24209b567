#pragma once

#include <cstdint>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/shard.hpp"

namespace dally::actors {

/// Spawns the node's supervisor: it holds the setup of every shard of the
/// data set (`shards`, by index), starts those `active` marks (the ones the
/// node owns), announces each to `engine` (shard_up_msg) and restarts a shard
/// that fails from its store, so that nothing acknowledged is lost: a shard
/// keeps no state that its store does not have. While a shard is down the
/// engine answers its requests with `unavailable` (shard_down_msg).
///
/// Restarts back off (10 ms, doubling, at most 1 s); after
/// `max_restarts_per_minute` in a minute the next try waits a minute. A
/// shard that fails at the very first start (its store is locked, corrupt
/// or of another shard count) is not retried: the engine reports the error
/// to whoever waits for it to become ready.
///
/// When the node's shard map changes, the engine sends open_shard_msg and
/// close_shard_msg: a closed shard flushes and closes its store and is not
/// restarted (shard_closed_msg to the engine); an opened one whose store is
/// still locked by its previous owner is retried with the same backoff.
caf::actor spawn_supervisor(caf::actor_system& sys, caf::actor engine,
                            std::vector<shard_setup> shards,
                            std::vector<bool> active,
                            uint32_t max_restarts_per_minute);

} // namespace dally::actors
