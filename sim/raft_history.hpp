#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "cluster/raft_node.hpp"

namespace dally::sim {

/// A broken consensus invariant: which one, and what showed it.
struct cluster_violation {
  /// election_safety, log_matching, leader_completeness,
  /// state_machine_safety, epoch_order, one_owner or convergence.
  std::string invariant;
  std::string detail;
};

/// The committed history of a Raft group as its nodes report it, checked
/// as they do: one leader per term (election_safety), every node applying
/// the same entry and map at each index, one index after the other
/// (state_machine_safety), epochs that never fall (epoch_order), and every
/// shard of every committed map owned by one of its members (one_owner).
/// Both simulators feed it: dally-cluster-sim's Raft group alone and
/// dally-sim's cluster of engines. No CAF.
class raft_history {
public:
  /// `shard_count`: what every map must have (0: any, for maps before
  /// creation); `log` hears of each new leader and commit.
  raft_history(uint32_t shard_count, std::function<void(std::string)> log);

  /// Node `id` starts (or restarts) with `applied` applied at `epoch`.
  void start(cluster::node_id id, uint64_t applied, uint64_t epoch);

  /// Node `id` is leader of `term`; true if it is the term's first.
  bool leader(cluster::node_id id, uint64_t term);

  /// Node `id`, in `term`, applied `a`; true if no node had before.
  bool applied(cluster::node_id id, uint64_t term,
               const cluster::applied_entry& a);

  /// Node `id` installed the leader's snapshot `snap`.
  void installed(cluster::node_id id, const cluster::snapshot& snap);

  /// The committed entry at `index` as first applied, with the lowest term
  /// in which a node applied it (every leader of a later term must hold it).
  struct committed_entry {
    cluster::log_entry entry;
    uint64_t map_digest = 0;
    uint64_t epoch = 0;
    uint64_t term_seen = 0;
  };
  const std::map<uint64_t, committed_entry>& committed() const noexcept {
    return committed_;
  }

  /// The map of the highest committed index (empty before any).
  const cluster::cluster_map& latest() const noexcept { return latest_; }

  /// A fingerprint of a map (epoch, members, owners).
  static uint64_t digest(const cluster::cluster_map& map);

private:
  struct node_state {
    uint64_t last_applied = 0;
    uint64_t last_epoch = 0;
  };
  [[noreturn]] void fail(std::string invariant, std::string detail);
  void check_map(const cluster::cluster_map& map, uint64_t index);

  uint32_t shard_count_;
  std::function<void(std::string)> log_;
  std::map<cluster::node_id, node_state> nodes_;
  std::map<uint64_t, cluster::node_id> leader_of_term_;
  std::map<uint64_t, committed_entry> committed_;
  cluster::cluster_map latest_;
  uint64_t latest_index_ = 0;
};

/// Thrown by raft_history (and the simulators' own checks) at the first
/// broken invariant; the run ends there.
struct raft_failure {
  cluster_violation v;
};

} // namespace dally::sim
