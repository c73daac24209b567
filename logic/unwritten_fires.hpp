#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include "core/task_record.hpp"
#include "core/timer_entry.hpp"
#include "logic/outgoing_fires.hpp"
#include "storage/task_record.hpp"
#include "storage/write_batch.hpp"

namespace dally::logic {

/// First deliveries without a write. A task's first delivery need not be
/// written before it goes out if the task is indexed up to the fire
/// horizon of a commit that a power loss cannot take: should the process
/// die before the ack, the store still holds the task as pending, and the
/// next run counts that first attempt as spent and fires the task again
/// as attempt 2 (see docs/engine.md, "First deliveries without a write").
/// That saves a record rewrite, and often a whole commit, per delivered
/// task. Until the task's next write, what such a fire changed lives only
/// here, and every record read from the store is completed with it.
class unwritten_fires {
public:
  /// How far past a commit (and the fire lead) its fire horizon reaches: a
  /// shard without a commit for this long writes its next first delivery.
  /// After a crash, the tasks indexed between the last commit and its
  /// horizon that had not fired yet count one attempt as spent, so the step
  /// is short; a shard under load commits far more often than this anyway.
  static constexpr int64_t horizon_step_ms = 250;

  /// For a store opened with `meta`.
  explicit unwritten_fires(const storage::shard_meta& meta);

  /// The fire horizon a commit at `now_ms` persists.
  static int64_t horizon_after(int64_t now_ms, int64_t fire_lead_ms) noexcept;

  /// Whether the fire that made `rec` in flight, from the index entry
  /// `key`, may go out without a write: its first attempt of several, of
  /// a task whose stored entry (`base`) is `key` and lies within the
  /// durable horizon.
  bool may_skip_write(const core::task_record& rec, const storage::due_key& key,
                      const std::optional<storage::due_key>& base) const {
    return rec.task.attempt == 1 && rec.task.policy.max_attempts > 1 &&
           key.index_ms <= durable_horizon_ms_ && base && *base == key;
  }

  /// Completes a record read from the store with what only memory knows:
  /// the first delivery that went out without a write, if `rec` is that
  /// task's record; else, after a restart, the first attempt an earlier
  /// run may have spent that way, so that no redelivery repeats one.
  void complete_stored(core::task_record& rec) const;

  /// The committed first delivery of `rec` went out without a write.
  void mark(const core::task_record& rec);

  /// `id` was written: its stored record is current again.
  void forget(core::task_id id) {
    if (!marks_.empty())
      marks_.erase(id);
  }

  bool marked(core::task_id id) const { return marks_.contains(id); }

  /// Whether the staged `fires` need the batch fsync'd before they go out:
  /// a written fire does (a power loss would repeat its attempt), and so
  /// does a first delivery without a write of a task whose stored record
  /// still waits for its fsync (a power loss would repeat the delivery of
  /// an occurrence the record made due, at the same attempt).
  bool must_sync(std::span<const fired_task> fires) const;

  /// A commit at horizon `horizon_ms` is durable: tasks indexed up to it
  /// may fire without a write.
  void raise_durable_horizon(int64_t horizon_ms) noexcept;

  /// A commit that waits for its fsync wrote `batch`: until the store
  /// syncs, the live records it wrote could still be lost.
  void note_unsynced(const storage::write_batch& batch);

  /// The store has synced everything written.
  void synced() { unsynced_ids_.clear(); }

private:
  /// What a first delivery without a write changed of the stored record.
  struct fire_mark {
    uint64_t occurrence = 0;
    uint32_t attempt = 0;
    int64_t lease_deadline_ms = 0;
    uint32_t lease_ms = 0;
  };

  /// Whether the stored, pending `rec` may have been delivered by an
  /// earlier run whose first delivery went out without a write.
  bool maybe_fired_before_restart(const core::task_record& rec) const;

  absl::flat_hash_map<core::task_id, fire_mark> marks_;
  /// The fire horizon of the last commit a power loss cannot take.
  int64_t durable_horizon_ms_ = 0;
  /// The fire horizon the store was opened with: its pending tasks at
  /// attempt 0 indexed up to it may have been delivered by the last run.
  int64_t recovered_horizon_ms_ = 0;
  /// Local ids from here on were created since the store was opened.
  uint64_t first_new_local_id_ = 0;
  uint32_t shard_count_ = 0;
  /// Tasks whose live record a commit that waits for its fsync wrote (see
  /// storage::write_batch::urgent); empty once the store has synced.
  absl::flat_hash_set<core::task_id> unsynced_ids_;
};

} // namespace dally::logic
