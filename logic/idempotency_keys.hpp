#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/error.hpp"
#include "core/result.hpp"
#include "core/timer_entry.hpp"
#include "logic/staged_batch.hpp"
#include "storage/task_record.hpp"
#include "storage/task_store.hpp"

namespace dally::logic {

/// Idempotency keys: a schedule with a key that an earlier schedule used
/// (within the key's retention) answers that task instead of creating
/// another, so that a client may retry a schedule whose answer it never
/// got. Keys staged in the current batch count before they are written.
class idempotency_keys {
public:
  /// Keys of `store`, each kept for `retention_ms` after its schedule.
  idempotency_keys(storage::task_store& store, int64_t retention_ms)
    : store_(store), retention_ms_(retention_ms) {}

  /// The task that an earlier schedule with `key` created, if the key is
  /// known at `now_ms` (staged, or stored and unexpired). Content with
  /// another `digest` (see storage::content_digest) fails with
  /// idempotency_conflict: one key, one task.
  core::result<std::optional<core::task_id>>
  lookup(const std::string& key, uint64_t digest, int64_t now_ms) const;

  /// Stages `key` for the new task `id` (content `digest`) in `batch`.
  void stage(const std::string& key, core::task_id id, uint64_t digest,
             int64_t now_ms, staged_batch& batch);

  /// Deletes up to `limit` keys expired at `now_ms` from the store. A write
  /// of its own, safe while a batch is staged: it deletes only keys that
  /// `lookup` no longer returns, and a key the batch stages again lands
  /// after it.
  core::error expire(int64_t now_ms, size_t limit);

  /// The batch committed or failed: what it staged is stored or gone.
  void clear() { staged_.clear(); }

private:
  storage::task_store& store_;
  int64_t retention_ms_;
  std::unordered_map<std::string, storage::idempotency_entry> staged_;
};

} // namespace dally::logic
