#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/placement.hpp"

namespace dally::cluster {

using core::node_id;

/// Where one shard lives. `replicas` and `in_sync` stay empty until
/// replication arrives; they are part of the map (and of its equality) so
/// that the log and snapshots already carry them.
struct shard_entry {
  node_id owner = 0;
  std::vector<node_id> replicas;
  std::vector<node_id> in_sync;

  friend bool operator==(const shard_entry&, const shard_entry&) = default;
};

/// A node the map knows. A leaving node keeps its shards until a
/// `reassign` moves them, then leaves the map.
struct member {
  enum class status : uint8_t { active, leaving };
  node_id id = 0;
  status state = status::active;
  /// Where the node listens for the others (HOST:PORT), as its add_node
  /// gave it; empty for the seeds (their addresses are the nodes'
  /// configuration) and for a node added without one.
  std::string address;

  friend bool operator==(const member&, const member&) = default;
};

/// Makes `node` an active member (again), listening at `address`
/// (HOST:PORT) for the other nodes, so that every node that applies the
/// log knows where a learner listens. An empty address keeps the one the
/// member has.
struct add_node {
  node_id node = 0;
  std::string address;

  add_node() = default;
  explicit add_node(node_id id, std::string at = {})
    : node(id), address(std::move(at)) {}

  friend bool operator==(const add_node&, const add_node&) = default;
};

/// Marks `node` as leaving; its shards move at the next `reassign`.
struct remove_node {
  node_id node = 0;
  friend bool operator==(const remove_node&, const remove_node&) = default;
};

/// Places every shard on the active members by rendezvous hashing
/// (place_shards) and drops the leaving members, which then own nothing.
struct reassign {
  friend bool operator==(const reassign&, const reassign&) = default;
};

/// The entry a new Raft leader appends to commit its term; no change.
struct noop {
  friend bool operator==(const noop&, const noop&) = default;
};

/// Creates the map of a new cluster: `shard_count` shards placed on
/// `nodes`, all active. Only the first takes effect, on a map without
/// shards; later ones change nothing, so a node configured with another
/// shard count cannot change a cluster's.
struct create_map {
  uint32_t shard_count = 0;
  std::vector<node_id> nodes;
  friend bool operator==(const create_map&, const create_map&) = default;
};

/// A change of the map: the commands of the replicated log.
using command = std::variant<noop, add_node, remove_node, reassign, create_map>;

/// "add 4 at 127.0.0.1:7504", "add 4", "remove 2", "reassign", "noop", "create
/// 64 on 1,2,3": for logs and reports.
std::string to_string(const command& cmd);

/// The coordinator's state machine: the shard map of a cluster, which
/// node owns which shard, with an epoch that grows by one with every
/// change. Every node applies the same committed commands in the same
/// order and so holds the same map at the same log index.
struct cluster_map {
  /// Raised by every change; equal maps at equal epochs.
  uint64_t epoch = 0;
  /// By shard; the size is the shard count, fixed at creation.
  std::vector<shard_entry> shards;
  /// Sorted by id.
  std::vector<member> members;

  /// `shard_count` shards placed on `nodes` (all active), at epoch 1.
  static cluster_map create(uint32_t shard_count, std::vector<node_id> nodes);

  /// Applies `cmd`; true when the map changed (and the epoch rose). A
  /// command that changes nothing (adding an active member at the address
  /// it has, or without one; reassigning a placed map; or any reassign
  /// with no active member) is a no-op.
  bool apply(const command& cmd);

  uint32_t shard_count() const noexcept {
    return static_cast<uint32_t>(shards.size());
  }

  /// The member `id`, or null.
  const member* find(node_id id) const noexcept;

  /// The ids of the active members, ascending.
  std::vector<node_id> active_nodes() const;

  /// The view of core/ (owners and epoch) the engine routes by.
  core::shard_map to_core() const;

  friend bool operator==(const cluster_map&, const cluster_map&) = default;
};

} // namespace dally::cluster
