#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "storage/task_record.hpp"

namespace dally::storage {

/// The column families a record can be quarantined from.
enum class record_family : uint8_t {
  tasks,
  due,
  keys,
  dead,
};

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

    friend bool operator==(const put_op&, const put_op&) = default;
  };
  struct replace_op {
    due_key before;
    task_record after;

    friend bool operator==(const replace_op&, const replace_op&) = default;
  };
  struct erase_op {
    due_key key;

    friend bool operator==(const erase_op&, const erase_op&) = default;
  };
  struct bury_op {
    due_key key;
    dead_letter dead;

    friend bool operator==(const bury_op&, const bury_op&) = default;
  };
  struct revive_op {
    core::task_id dead_id;
    task_record rec;

    friend bool operator==(const revive_op&, const revive_op&) = default;
  };
  struct drop_dead_op {
    core::task_id id;

    friend bool operator==(const drop_dead_op&, const drop_dead_op&) = default;
  };
  struct put_key_op {
    std::string key;
    idempotency_entry entry;

    friend bool operator==(const put_key_op&, const put_key_op&) = default;
  };
  struct erase_key_op {
    std::string key;

    friend bool operator==(const erase_key_op&, const erase_key_op&) = default;
  };
  /// A record that does not decode, moved aside as it was found.
  struct quarantine_op {
    record_family family = record_family::tasks;
    /// The record's key and value, bytes as stored.
    std::string key;
    std::string value;
    /// Why it does not decode.
    std::string reason;
    /// Due-index entries that go with a task record.
    std::vector<due_key> due;

    friend bool operator==(const quarantine_op&,
                           const quarantine_op&) = default;
  };
  /// A due-index entry a commit deferred, written now.
  struct index_op {
    due_key key;

    friend bool operator==(const index_op&, const index_op&) = default;
  };
  using op =
    std::variant<put_op, replace_op, erase_op, bury_op, revive_op, drop_dead_op,
                 put_key_op, erase_key_op, quarantine_op, index_op>;

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

  /// Moves a record that does not decode to the quarantine, with the due
  /// entries `due` of a task record. The store does this itself when a
  /// read meets such a record (see task_store::quarantined); it is an op
  /// so that a replica's copy loses the record too.
  void quarantine(record_family family, std::string key, std::string value,
                  std::string reason, std::vector<due_key> due = {}) {
    ops_.emplace_back(quarantine_op{family, std::move(key), std::move(value),
                                    std::move(reason), std::move(due)});
  }

  /// Writes the due-index entry `key` of a live task. The store does this
  /// itself for entries it deferred (see put_op::defer_index).
  void index(due_key key) { ops_.emplace_back(index_op{key}); }

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

  friend bool operator==(const write_batch&, const write_batch&) = default;

private:
  std::vector<op> ops_;
  bool urgent_ = true;
};

/// A batch as a store committed it: the caller's ops and what the store
/// decided about them, so that a replica can write exactly the same (see
/// `store_options::on_commit`; `to_entry` in replication_codec.hpp makes a
/// ReplicationEntry of it). A view into the store's memory, valid only
/// during the call that hands it out.
///
/// The history it describes: the ops of `batch` in order, then one
/// `index` op per key of `index_writes`; each takes the next seq, from
/// `first.seq` to `meta.last_seq`.
struct committed_batch {
  const write_batch& batch;
  /// Positions in `batch.ops()` of the puts that asked to defer their
  /// index entry and had it written at once (the store's bounds refused).
  /// Every other put with `defer_index` was deferred.
  std::span<const size_t> index_written;
  /// Deferred index entries that the commit wrote after the batch's ops,
  /// the oldest beyond the store's bounds.
  std::span<const due_key> index_writes;
  /// Epoch and seq of the first op (the seq after the last commit's when
  /// there is none).
  stamp first;
  /// The shard meta after the commit.
  const shard_meta& meta;
};

/// A committed batch as data, decoded from a ReplicationEntry by
/// `from_entry` (replication_codec.hpp), for `rocks_task_store::apply`.
/// Its batch holds the store's decisions: a put's `defer_index` says
/// whether its entry was deferred, and the entries written later are
/// `index` ops.
struct replicated_batch {
  stamp first;
  shard_meta meta;
  write_batch batch;

  /// The same batch as a commit reports it, to encode it again.
  committed_batch view() const { return {batch, {}, {}, first, meta}; }
};

} // namespace dally::storage
