#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "cluster/cluster_map.hpp"

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
  /// Every voter, this node among them.
  std::vector<cluster_seed> seeds;
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
/// its seed address is the caller's. It runs until sent an exit message.
/// Errors: the log's (corrupt_record, io_error), or a configuration whose
/// seeds do not include `self` or that asks for TLS without CAF's OpenSSL
/// module (invalid_argument).
caf::expected<caf::actor> spawn_cluster_node(caf::actor_system& sys,
                                             cluster_node_config cfg);

} // namespace dally::actors
