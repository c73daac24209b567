#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "cluster/raft_log_store.hpp"
#include "cluster/raft_types.hpp"

namespace dally::cluster {

/// The fixed membership and timing of a Raft group.
struct raft_config {
  node_id self = 0;
  /// The nodes that vote and count towards a majority (3 or 5 in a
  /// cluster); `self` may be one of them or a learner.
  std::vector<node_id> voters;
  /// Nodes that receive the log but never vote, stand or count.
  std::vector<node_id> learners;
  /// How often a leader sends AppendEntries when idle.
  int64_t heartbeat_ms = 100;
  /// A follower stands for election after a timeout drawn uniformly from
  /// [election_min_ms, election_max_ms], anew each time.
  int64_t election_min_ms = 500;
  int64_t election_max_ms = 1000;
  /// Applied entries kept in the log before a snapshot replaces them.
  uint64_t snapshot_every = 64;
  /// Most entries in one AppendEntries.
  uint64_t max_batch = 64;
  /// Seeds this node's election timeouts: nodes must differ, and a
  /// restarted node should get a new one.
  uint64_t seed = 0;
};

/// A committed entry the state machine applied, with the map after it.
struct applied_entry {
  log_entry entry;
  cluster_map state;
};

/// What a call to raft_node asks of its caller. The store already holds
/// every durable change (term, vote, entries, snapshot) when the call
/// returns, so the messages may go out at once, and must not go out before
/// the call returns.
struct raft_effects {
  std::vector<envelope> messages;
  /// Newly committed entries, in log order, each applied to the map.
  std::vector<applied_entry> applied;
  /// A snapshot from the leader that replaced the map (before `applied`).
  std::optional<snapshot> installed;
  /// For propose: the index of the new entry; empty when not the leader.
  std::optional<uint64_t> proposed_index;
};

/// One member of a Raft group (Ongaro and Ousterhout, extended version)
/// replicating the cluster map: leader election, log replication, commit
/// by a majority of the current term, snapshots and InstallSnapshot, and
/// non-voting learners. It reads no clock and no global randomness: the
/// caller passes the time and delivers messages.
class raft_node {
public:
  enum class role : uint8_t { follower, candidate, leader };

  /// Restores from `store` (term, vote, snapshot, log): a fresh node and a
  /// restarted one are built the same way. `store` outlives the node.
  raft_node(raft_config cfg, raft_log_store& store, int64_t now_ms);

  virtual ~raft_node() = default;

  raft_node(const raft_node&) = delete;
  raft_node& operator=(const raft_node&) = delete;

  /// Election and heartbeat timers.
  raft_effects on_tick(int64_t now_ms);

  /// A message from node `from`.
  raft_effects on_message(int64_t now_ms, node_id from,
                          const raft_message& msg);

  /// Appends `cmd` to the log if this node leads; committed (and applied)
  /// only once a majority of voters holds it.
  raft_effects propose(int64_t now_ms, command cmd);

  /// Makes `id` a learner from now on, a node that joined after the group
  /// was configured: a leader replicates to it from its next heartbeat.
  /// For a voter, this node or a known learner nothing changes.
  void add_learner(node_id id);

  /// The learners, those configured and those added.
  const std::vector<node_id>& learners() const noexcept {
    return cfg_.learners;
  }

  role current_role() const noexcept { return role_; }
  bool is_leader() const noexcept { return role_ == role::leader; }
  bool is_voter() const noexcept { return voter_; }
  uint64_t term() const { return store_.term(); }
  /// The leader of the current term, when known.
  std::optional<node_id> leader() const noexcept { return leader_; }
  uint64_t commit_index() const noexcept { return commit_; }
  uint64_t applied_index() const noexcept { return applied_; }
  /// The map after the last applied entry.
  const cluster_map& state() const noexcept { return state_; }
  const raft_log_store& store() const noexcept { return store_; }
  const raft_config& config() const noexcept { return cfg_; }

protected:
  /// Raft 5.4.1: whether a candidate whose log ends at (`last_term`,
  /// `last_index`) is at least as up to date as this node's log.
  virtual bool candidate_log_ok(uint64_t last_term, uint64_t last_index) const;

  /// The highest index a majority of voters holds, by the leader's
  /// match indexes (its own is its last index).
  virtual uint64_t majority_match() const;

  /// Raft 5.4.2: a leader commits by counting replicas only entries of its
  /// own term; earlier ones commit with them.
  virtual bool may_commit(uint64_t index) const;

private:
  void on_vote_request(int64_t now_ms, node_id from, const vote_request& req,
                       raft_effects& fx);
  void on_vote_reply(int64_t now_ms, node_id from, const vote_reply& rep,
                     raft_effects& fx);
  void on_append(int64_t now_ms, node_id from, const append_request& req,
                 raft_effects& fx);
  void on_append_reply(node_id from, const append_reply& rep, raft_effects& fx);
  void on_snapshot(int64_t now_ms, node_id from, const snapshot_request& req,
                   raft_effects& fx);
  void on_snapshot_reply(node_id from, const snapshot_reply& rep,
                         raft_effects& fx);

  /// Adopts a newer `term` seen in a message: follower, no vote.
  void observe_term(uint64_t term);
  void become_follower(int64_t now_ms, node_id leader);
  void start_election(int64_t now_ms, raft_effects& fx);
  void become_leader(int64_t now_ms, raft_effects& fx);
  void replicate_to(node_id peer, raft_effects& fx);
  void broadcast(int64_t now_ms, raft_effects& fx);
  void advance_commit(raft_effects& fx);
  void apply_committed(raft_effects& fx);
  void reset_election_timer(int64_t now_ms);
  /// Draws from the node's own splitmix64 stream.
  uint64_t next_random();
  bool log_matches(uint64_t index, uint64_t term) const;
  std::vector<node_id> peers() const;

  raft_config cfg_;
  raft_log_store& store_;
  bool voter_;
  role role_ = role::follower;
  std::optional<node_id> leader_;
  uint64_t commit_;
  uint64_t applied_;
  cluster_map state_;
  uint64_t rng_;
  int64_t election_due_ms_ = 0;
  int64_t heartbeat_due_ms_ = 0;
  std::set<node_id> votes_;
  /// Leader only: per peer, the next index to send and the highest index
  /// known to match.
  std::map<node_id, uint64_t> next_;
  std::map<node_id, uint64_t> match_;
};

} // namespace dally::cluster
