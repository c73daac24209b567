#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "cluster/cluster_map.hpp"
#include "net/engine_actor.hpp"

namespace dally::actors {

/// A voter of the cluster and the address its cluster actor is published
/// on (dallyd --cluster-seeds).
struct cluster_seed {
  cluster::node_id id = 0;
  std::string host;
  uint16_t port = 0;
};

/// What a node's cluster actor needs (docs/cluster.md).
struct cluster_node_config {
  cluster::node_id self = 0;
  /// Every voter. A node that is not among them is a learner: it dials
  /// every seed, and the voters take it in (it joins the map by a
  /// committed add_node), replicate the log to it and link its engine. It
  /// never votes or stands, and owns no shard until a reassign gives it
  /// some (nothing proposes one yet).
  std::vector<cluster_seed> seeds;
  /// This node's own cluster address, HOST:PORT (a learner's
  /// --cluster-listen). A learner names it in every message to the seeds,
  /// and the coordinator commits it with the learner's add_node, so every
  /// node lists it in its status, also after a restart. A seed's address is
  /// its entry in `seeds`.
  std::string address;
  /// The shard count of a new cluster; an existing cluster keeps its own.
  uint32_t shard_count = 64;
  /// The directory of the durable Raft log (rocks_log_store).
  std::string log_dir;
  /// Heartbeats between nodes, and the silence after which a node is
  /// unreachable (cluster::peer_monitor).
  int64_t heartbeat_ms = 200;
  int64_t unreachable_ms = 1000;
  /// How often the Raft node and the monitor are driven.
  int64_t tick_ms = 20;
  /// Dial the other seeds with TLS, through the actor of CAF's OpenSSL
  /// module (net::enable_tls), with the node's own certificate; their
  /// cluster ports must speak TLS as well.
  bool tls = false;
  /// Seeds the election timeouts; differ per node and per start.
  uint64_t random_seed = 0;
  /// Told of every committed map, in commit order, on the cluster actor's
  /// thread: the restored map at start (if the cluster has one), then each
  /// change. Must return quickly.
  std::function<void(const cluster::cluster_map&)> on_map;
  /// This node's engine, started without shards (open_all_shards false)
  /// and with the cluster's shard count (cluster_shard_count). The
  /// cluster actor installs every committed map in it (install_map_msg,
  /// one at a time, only ever a newer one), names it to the other nodes,
  /// and gives it the engines of the reachable ones (set_peers_msg). Null:
  /// the cluster runs without an engine.
  engine_actor engine;
  /// Told of notable events (peers up and down, a new coordinator), one
  /// line each, on the cluster actor's thread.
  std::function<void(const std::string&)> on_event;
};

/// Opens the Raft log under `cfg.log_dir` and spawns the node's cluster
/// actor: it runs a cluster::raft_node over the log and a
/// cluster::peer_monitor, links to the other seeds (a node dials the seeds
/// of higher id; lower ones dial it, since CAF 0.17 keeps one connection
/// per pair of nodes), exchanges heartbeats and Raft messages with them
/// (net::peer_msg), and answers net::cluster_status_request. The first
/// coordinator creates the map through the log. Publishing the actor on
/// its seed address is the caller's. It runs until sent an exit message,
/// on a thread of its own, so that shards opening their stores on the
/// scheduler's threads, or any load on the engine, do not hold up its
/// heartbeats and elections.
/// Errors: the log's (corrupt_record, io_error), or a configuration without
/// seeds, with `self` 0, or that asks for TLS without CAF's OpenSSL module
/// (invalid_argument).
caf::expected<caf::actor> spawn_cluster_node(caf::actor_system& sys,
                                             cluster_node_config cfg);

/// The shard count of the cluster whose Raft log is under `log_dir`
/// (cluster::stored_shard_count), or 0 for a new cluster (no log yet); a node
/// starts its engine with it before the cluster actor. Errors: the log's, as
/// spawn_cluster_node.
caf::expected<uint32_t> cluster_shard_count(const std::string& log_dir);

} // namespace dally::actors
