#pragma once

#include <caf/fwd.hpp>

#include "logic/engine_config.hpp"
#include "net/engine_actor.hpp"

namespace dally::actors {

/// Spawns a node's engine: the front door (`dally::engine_actor`) plus its
/// supervisor, shards, notifier pool and consumer registry, all linked to
/// it, so that sending the engine an exit stops them all (shards flush and
/// close their stores first).
///
/// The front door validates nothing itself: it routes each request to the
/// shard that owns it (ids: id % shard_count; new tasks with an idempotency
/// key: a hash of the key, so a retry lands where the first try did;
/// others: round robin), subscriptions to the registry, and merges stats
/// and dead-letter pages across shards. Requests for a shard that is
/// restarting fail with `unavailable`.
///
/// The engine answers (ready_atom) once every shard has opened its store,
/// or with the first shard's error; `embedded_engine::start` waits for it.
engine_actor spawn_engine(caf::actor_system& sys, logic::engine_config cfg);

/// How the engine opens shard `shard`'s store (its directory is
/// `data_dir/shard-<shard>`), for tools that inspect a stopped node's data.
storage::store_options shard_store_options(const logic::engine_config& cfg,
                                           uint32_t shard);

} // namespace dally::actors
