#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/raft_history.hpp"

namespace dally::sim {

/// Consensus bugs planted on purpose in the cluster simulation, each
/// through a test-only subclass of cluster::raft_node that overrides one of
/// its protected rules: the simulator must find every one.
enum class cluster_bug : uint8_t {
  none,
  /// A vote is granted without the check that the candidate's log is at
  /// least as up to date (Raft 5.4.1).
  vote_without_log_check,
  /// A leader commits what it holds itself, without a majority.
  commit_without_majority,
  /// A leader commits an entry of an earlier term by counting its
  /// replicas (Raft 5.4.2, figure 8).
  commit_old_term,
};

/// Every bug, none included.
std::span<const cluster_bug> cluster_bugs();
std::optional<cluster_bug> parse_cluster_bug(const std::string& name);
std::string cluster_bug_name(cluster_bug bug);

struct cluster_sim_options {
  uint64_t seed = 1;
  cluster_bug plant = cluster_bug::none;
  /// Print the event log as it happens.
  bool verbose = false;
};

/// What the seed chose.
struct cluster_sim_params {
  uint32_t voters = 3;
  bool learner = false;
  uint32_t shard_count = 64;
  uint64_t snapshot_every = 64;
  /// Most entries in one AppendEntries.
  uint64_t max_batch = 16;
  uint32_t drop_per_million = 0;
  uint32_t duplicate_per_million = 0;
  int64_t max_delay_ms = 0;
  /// Per 100 ms of the fault phase, per million.
  uint32_t crash_ppm = 0;
  uint32_t partition_ppm = 0;
  /// Per 100 ms: the chance that every cut link heals.
  uint32_t heal_ppm = 0;
  uint32_t pause_ppm = 0;
  /// Per 50 ms, per million: the chance that a client proposes a change.
  uint32_t propose_ppm = 0;
  int64_t fault_phase_ms = 0;
};

struct cluster_sim_result {
  cluster_sim_params params;
  /// The event log's hash: the same seed and binary give the same one.
  std::string hash;
  uint64_t steps = 0;
  uint64_t messages = 0;
  uint64_t committed = 0;
  uint32_t elections = 0;
  uint32_t crashes = 0;
  /// From the end of the faults to a leader and one map everywhere.
  int64_t converged_after_ms = 0;
  std::optional<cluster_violation> failure;
  std::vector<std::string> last_events;
};

/// One deterministic run of a Raft group replicating the shard map: 3 to 5
/// voters and maybe a learner, each a cluster::raft_node on its own store
/// and skewed clock, linked through network_model (loss, delay,
/// reordering, duplicates, partitions, one-way cuts), with crashes,
/// restarts and pauses of single nodes and of the leader, and clients
/// proposing changes to whoever leads. Every invariant is checked after
/// every step; after the fault phase everything heals and a leader and
/// one map on every node must follow within a bound.
cluster_sim_result run_cluster_simulation(const cluster_sim_options& opts);

} // namespace dally::sim
