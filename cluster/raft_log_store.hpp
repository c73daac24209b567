#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "cluster/raft_types.hpp"

namespace dally::cluster {

/// What a Raft node must not forget across a crash: its current term and
/// vote, its log and its latest snapshot. Every write is durable when it
/// returns; raft_node writes before it hands out the messages that depend
/// on the write, which is what lets it promise a vote or an entry.
class raft_log_store {
public:
  virtual ~raft_log_store() = default;

  virtual uint64_t term() const = 0;

  virtual std::optional<node_id> vote() const = 0;

  virtual void save_term_vote(uint64_t term, std::optional<node_id> vote) = 0;

  /// The newest snapshot; before any, index 0 with the initial map.
  virtual const snapshot& last_snapshot() const = 0;

  /// The last index of the log (the snapshot's when the log is empty).
  virtual uint64_t last_index() const = 0;

  /// The term of entry `index`, in [last_snapshot().last_index,
  /// last_index()].
  virtual uint64_t term_at(uint64_t index) const = 0;

  /// Entry `index`, in (last_snapshot().last_index, last_index()].
  virtual const log_entry& entry(uint64_t index) const = 0;

  /// Drops the entries after `index` (>= the snapshot's last index) and
  /// appends `entries`, which follow `index` without a gap.
  virtual void replace_after(uint64_t index,
                             std::span<const log_entry> entries) = 0;

  /// Makes `snap` the snapshot. Entries after its last index survive only
  /// if the log holds its last entry (same index and term); otherwise the
  /// whole log goes (Raft figure 13, step 6 and 7).
  virtual void save_snapshot(const snapshot& snap) = 0;
};

/// A raft_log_store in memory, for tests and the simulator: it survives a
/// simulated crash (a new raft_node reads it) as a synced store would.
class memory_log_store : public raft_log_store {
public:
  /// An empty log whose state at index 0 is `initial`.
  explicit memory_log_store(cluster_map initial);

  uint64_t term() const override { return term_; }

  std::optional<node_id> vote() const override { return vote_; }

  void save_term_vote(uint64_t term, std::optional<node_id> vote) override;

  const snapshot& last_snapshot() const override { return snap_; }

  uint64_t last_index() const override {
    return snap_.last_index + entries_.size();
  }

  uint64_t term_at(uint64_t index) const override;

  const log_entry& entry(uint64_t index) const override;

  void replace_after(uint64_t index,
                     std::span<const log_entry> entries) override;

  void save_snapshot(const snapshot& snap) override;

  /// Whether the log holds entry `index` of `term` (the snapshot's last
  /// included): what decides if a new snapshot keeps the entries after it.
  bool holds(uint64_t index, uint64_t term) const;

private:
  uint64_t term_ = 0;
  std::optional<node_id> vote_;
  snapshot snap_;
  /// Entries snap_.last_index + 1, ...
  std::vector<log_entry> entries_;
};

} // namespace dally::cluster
