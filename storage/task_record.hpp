#pragma once

#include <cstdint>
#include <string>

#include "core/task.hpp"

namespace dally::storage {

/// Where a stored task stands.
enum class task_state : uint8_t {
  /// Waiting for its due time.
  pending,
  /// Delivered and not yet acked; redelivered when its lease runs out.
  in_flight,
};

/// Where a mutation sits in a shard's history (room for replication:
/// replicas order writes by it and fence older epochs).
struct stamp {
  uint64_t epoch = 0;
  uint64_t seq = 0;

  friend bool operator==(const stamp&, const stamp&) = default;
};

/// A live task as the store keeps it: the task plus its delivery state.
struct task_record {
  core::task task;
  task_state state = task_state::pending;
  /// In flight: when the lease runs out.
  int64_t lease_deadline_ms = 0;
  /// Pending after a failed delivery or a nack: not before this instant
  /// (0 when unset); kept while the retry is in flight. Kept apart from
  /// `task.due_ms`, which stays the occurrence's due time, the anchor of the
  /// recurrence.
  int64_t retry_at_ms = 0;
  /// Occurrences fired and completed so far (periodic kinds).
  uint64_t fired_count = 0;
  /// Assigned by the store when the record is committed.
  storage::stamp stamp;

  /// The time of the task's entry in the due-time index: the due time, or
  /// the later retry time. A delivery leaves it where it is (the in-flight
  /// record keeps `retry_at_ms`), so firing rewrites only the record; the
  /// shard tracks lease deadlines in memory and finds in-flight tasks
  /// again, after a restart, through this entry.
  int64_t index_ms() const noexcept {
    return retry_at_ms != 0 && retry_at_ms > task.due_ms ? retry_at_ms
                                                         : task.due_ms;
  }

  /// The instant the shard must next act on this task: the lease deadline
  /// while in flight, else `index_ms()`.
  int64_t action_ms() const noexcept {
    return state == task_state::in_flight ? lease_deadline_ms : index_ms();
  }

  friend bool operator==(const task_record&, const task_record&) = default;
};

/// A task that used up its attempts.
struct dead_letter {
  task_record record;
  int64_t dead_ms = 0;
  std::string reason;

  friend bool operator==(const dead_letter&, const dead_letter&) = default;
};

/// What an idempotency key points at.
struct idempotency_entry {
  core::task_id task_id = 0;
  /// After this instant the key is forgotten.
  int64_t expires_ms = 0;
  /// Digest of what was scheduled under the key (see `content_digest`).
  uint64_t digest = 0;

  friend bool operator==(const idempotency_entry&,
                         const idempotency_entry&) = default;
};

/// A stable 64-bit digest of a task's topic and payload (FNV-1a, the same
/// on every platform), to refuse one key reused for different content.
uint64_t content_digest(const core::task& t) noexcept;

/// Per-shard bookkeeping, persisted with every commit.
struct shard_meta {
  uint32_t shard = 0;
  uint32_t shard_count = 1;
  /// Next local sequence: ids are next_local_id * shard_count + shard.
  uint64_t next_local_id = 0;
  uint64_t epoch = 0;
  /// Sequence number of the last committed mutation.
  uint64_t last_seq = 0;
  /// Durable high-water mark of handed-out local ids (see dally.proto).
  uint64_t reserved_local_id = 0;
  /// Live tasks with ids from this one on may have no due-index entry yet
  /// (see dally.proto); 0: all are indexed.
  core::task_id unindexed_from = 0;
  /// First deliveries of tasks due up to this instant may go out without
  /// a write (see dally.proto); 0: none did.
  int64_t fire_horizon_ms = 0;

  friend bool operator==(const shard_meta&, const shard_meta&) = default;
};

/// One (index time, id) entry of the due-time index, in scan order.
struct due_key {
  int64_t index_ms = 0;
  core::task_id id = 0;

  friend auto operator<=>(const due_key&, const due_key&) = default;
};

} // namespace dally::storage
