#pragma once

#include <cassert>
#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "storage/task_record.hpp"

namespace dally::storage {

/// Mutations that a store applies atomically: all or nothing, one WAL write,
/// one fsync. A shard collects everything that arrived before its flush
/// message into one batch and defers its replies until `commit` returns.
///
/// The batch names previous versions where the due-time index needs them
/// (`replace`, `erase`), so a commit never reads before writing.
class write_batch {
public:
  struct put_op {
    task_record rec;
    /// The owner keeps this task's index entry in memory (its due-time
    /// window), so the store may write the entry later, or never if the
    /// task is gone first. Only the index must be complete after a
    /// restart, and the store guarantees that (see
    /// `store_options::max_deferred_index`).
    bool defer_index = false;
  };
  struct replace_op {
    due_key before;
    task_record after;
  };
  struct erase_op {
    due_key key;
  };
  struct bury_op {
    due_key key;
    dead_letter dead;
  };
  struct revive_op {
    core::task_id dead_id;
    task_record rec;
  };
  struct drop_dead_op {
    core::task_id id;
  };
  struct put_key_op {
    std::string key;
    idempotency_entry entry;
  };
  struct erase_key_op {
    std::string key;
  };
  using op = std::variant<put_op, replace_op, erase_op, bury_op, revive_op,
                          drop_dead_op, put_key_op, erase_key_op>;

  /// Adds a new task.
  void put(task_record rec) { ops_.emplace_back(put_op{std::move(rec)}); }

  /// Replaces `before` (its index entry goes) with `after`, a new version
  /// of the same task.
  void replace(const task_record& before, task_record after) {
    assert(before.task.id == after.task.id);
    ops_.emplace_back(replace_op{key_of(before), std::move(after)});
  }

  /// Removes a live task (ack of a one-shot task, revoke).
  void erase(const task_record& rec) {
    ops_.emplace_back(erase_op{key_of(rec)});
  }

  /// Moves a live task to the dead-letter set.
  void bury(const task_record& rec, int64_t dead_ms, std::string reason) {
    ops_.emplace_back(
      bury_op{key_of(rec), dead_letter{rec, dead_ms, std::move(reason)}});
  }

  /// Moves a dead letter back to the live set as `rec` (kick).
  void revive(core::task_id dead_id, task_record rec) {
    ops_.emplace_back(revive_op{dead_id, std::move(rec)});
  }

  /// Deletes a dead letter for good.
  void drop_dead(core::task_id id) { ops_.emplace_back(drop_dead_op{id}); }

  /// Records an idempotency key. Its retention is the writer's choice:
  /// `entry.expires_ms` (now + the engine's retention period); after it,
  /// `find_key` no longer sees the key and `expire_keys` deletes it.
  void put_key(std::string key, idempotency_entry entry) {
    ops_.emplace_back(put_key_op{std::move(key), entry});
  }

  /// Forgets an idempotency key.
  void erase_key(std::string key) {
    ops_.emplace_back(erase_key_op{std::move(key)});
  }

  const std::vector<op>& ops() const noexcept { return ops_; }

  /// The operations, to move records out of after a commit.
  std::vector<op>& ops() noexcept { return ops_; }

  size_t size() const noexcept { return ops_.size(); }

  bool empty() const noexcept { return ops_.empty(); }

  /// Whether a reply or a delivery waits for this batch to be durable.
  /// With durability::sync a store fsyncs each urgent batch before its
  /// commit returns; a batch that is not urgent (verdicts nobody waits an
  /// answer for, expired leases and keys) reaches the WAL at once, so a
  /// process crash keeps it, and is fsync'd with the next urgent one or by
  /// `sync_if_due`. True unless the owner says otherwise.
  bool urgent() const noexcept { return urgent_; }

  void set_urgent(bool x) noexcept { urgent_ = x; }

  void clear() noexcept {
    ops_.clear();
    urgent_ = true;
  }

  static due_key key_of(const task_record& rec) noexcept {
    return due_key{rec.index_ms(), rec.task.id};
  }

private:
  std::vector<op> ops_;
  bool urgent_ = true;
};

} // namespace dally::storage
