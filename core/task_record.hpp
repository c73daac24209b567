#pragma once

#include <cstdint>

#include "core/task.hpp"

namespace dally::core {

/// Where a live task stands.
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

/// A live task with its delivery state: what the store keeps and what the
/// task's life cycle (see task_lifecycle) acts on.
struct task_record {
  core::task task;
  task_state state = task_state::pending;
  /// In flight: that lease's length when granted, if at most 49 days (else
  /// 0, as in records of older builds: the deadline is trusted as stored).
  /// Read back after a restart, a lease has no more than this left,
  /// whatever the wall clock did meanwhile. 32 bits keep the record small.
  uint32_t lease_ms = 0;
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
  core::stamp stamp;

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

/// A lease's length as a record keeps it: 0 (unknown) beyond 32 bits.
constexpr uint32_t kept_lease_ms(int64_t lease_ms) noexcept {
  return lease_ms > 0 && lease_ms <= int64_t{UINT32_MAX}
           ? static_cast<uint32_t>(lease_ms)
           : 0;
}

} // namespace dally::core
