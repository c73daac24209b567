#pragma once

#include <cstdint>
#include <string>

#include "core/task.hpp"
#include "core/task_record.hpp"

namespace dally::storage {

/// The record types live in core/, where the task life cycle acts on them;
/// storage keeps its names for them.
using task_state = core::task_state;
using stamp = core::stamp;
using task_record = core::task_record;

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
