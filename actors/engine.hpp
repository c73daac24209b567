#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>

#include "core/placement.hpp"
#include "logic/engine_config.hpp"
#include "net/engine_actor.hpp"
#include "net/front_door.hpp"

namespace dally::actors {

/// Node glue -> engine (in process, never over the network): run the shards
/// `map` gives this node (engine_config::node_id) and no others. The engine
/// opens the shards it gained (under its supervisor, over their stores in
/// `data_dir/shard-N`) and closes those it lost (each flushes and closes its
/// store), and answers map_installed_msg once all of that is done. A map of
/// an older epoch than the installed one, or another map at the same epoch,
/// is refused with `stale_epoch`; one of another shard count with
/// `invalid_request`; both change nothing. Send it with
/// `caf::actor_cast<caf::actor>(engine)`: it is not part of engine_actor,
/// so a remote client cannot move shards.
struct install_map_msg {
  core::shard_map map;
};

/// Engine -> node glue: `epoch` is in force; the shards opened and closed
/// by it. A shard in `failed` did not open (its requests fail with
/// `unavailable` naming the cause; a store still locked by its previous
/// owner is retried instead, and the answer waits for it).
struct map_installed_msg {
  uint64_t epoch = 0;
  std::vector<uint32_t> opened;
  std::vector<uint32_t> closed;
  std::vector<uint32_t> failed;
};

/// Node glue -> engine (in process): the engines of the other nodes, by
/// node id, replacing the previous set. A request for a shard owned by a
/// node listed here is forwarded to it; one for a shard whose owner is not
/// listed fails with `unavailable` naming the shard, its owner and the map
/// epoch. The engine's own id is ignored. No answer.
struct set_peers_msg {
  std::map<core::node_id, engine_actor> engines;
};

/// Spawns a node's engine: the front door (`dally::engine_actor`) plus its
/// supervisor, shards, notifier pool and consumer registry, all linked to
/// it, so that sending the engine an exit stops them all (shards flush and
/// close their stores first).
///
/// The front door validates nothing itself: it routes each request to the
/// shard that owns it (ids: id % shard_count; new tasks with an idempotency
/// key: a hash of the key, so a retry lands where the first try did;
/// others: round robin over the shards this node runs), subscriptions to
/// the registry, and merges stats and dead-letter pages across shards.
/// Requests for a shard that is restarting fail with `unavailable`. In a
/// cluster (install_map_msg, set_peers_msg) a request for a shard of
/// another node is forwarded to that node's engine (forwarded_atom), and
/// its answer relayed; dead-letter pages merge every node's shards.
///
/// The engine answers (ready_atom) once every shard it owns at start has
/// opened its store, or with the first shard's error;
/// `embedded_engine::start` waits for it.
///
/// `door`, if given, is the front door of the listener that publishes the
/// engine (net::publish_options::door): the engine tells it of each
/// request it takes from a remote client, so that the listener stops
/// reading clients while too many wait.
engine_actor spawn_engine(caf::actor_system& sys, logic::engine_config cfg,
                          std::shared_ptr<net::front_door> door = nullptr);

/// How the engine opens shard `shard`'s store (its directory is
/// `data_dir/shard-<shard>`), for tools that inspect a stopped node's data.
storage::store_options shard_store_options(const logic::engine_config& cfg,
                                           uint32_t shard);

} // namespace dally::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::install_map_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::map_installed_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::set_peers_msg)
