#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/result.hpp"
#include "storage/task_record.hpp"
#include "storage/write_batch.hpp"

namespace dally::storage {

/// A record that failed to decode and was moved aside.
struct quarantined_record {
  /// Column family and key, printable (hex where binary).
  std::string where;
  /// Why it failed to decode.
  std::string reason;
};

/// Counters a store keeps about itself.
struct store_stats {
  uint64_t commits = 0;
  uint64_t mutations = 0;
  uint64_t syncs = 0;
  /// Records in quarantine, those moved aside before this open included.
  uint64_t quarantined = 0;
  /// Bytes held in write buffers (memtables, active and awaiting flush):
  /// memory bounded by the write buffer settings, not by the task count.
  uint64_t memtable_bytes = 0;
};

/// One shard's slice of the durable task set. Only the shard actor calls
/// it, from one thread; no method is thread-safe.
///
/// Every error comes back as a `core::error` (io_error, no_space,
/// store_locked, corrupt_record, store_unavailable, not_found) with a
/// message; storage engine types never leave storage/.
class task_store {
public:
  virtual ~task_store();

  /// Applies `batch` atomically (all or nothing) and returns once it is
  /// durable at the configured level (with durability::sync, once it is
  /// in the WAL if it is not urgent; see `write_batch::urgent`). Stamps every
  /// mutation with the shard's epoch and the next sequence numbers and persists
  /// the shard meta (id counter included) in the same atomic write. The
  /// store's own changes (quarantine, deferred index entries, key expiry)
  /// are commits too, so its history is the sequence of its commits.
  ///
  /// An error means the outcome is unknown, not that nothing happened: a
  /// batch whose WAL write landed but whose fsync failed is invisible now
  /// and may reappear, whole, after a restart. Callers answer such a batch
  /// as "in doubt" (clients retry with their idempotency key).
  virtual core::error commit(const write_batch& batch) = 0;

  /// With durability::periodic, or with durability::sync while a commit
  /// that was not urgent waits (see `sync_pending`): fsyncs if
  /// `sync_period_ms` has passed since the last time it did. A no-op
  /// otherwise.
  virtual core::error sync_if_due(int64_t now_ms) = 0;

  /// With durability::sync: whether a commit that was not urgent (see
  /// `write_batch::urgent`) still waits for its fsync, so that a power loss
  /// could take it. Always false at the other levels, where no commit
  /// waits for an fsync of its own.
  virtual bool sync_pending() const noexcept = 0;

  /// Fsyncs whatever was written so far.
  virtual core::error sync() = 0;

  /// Writes every due-index entry that commits deferred (see
  /// `write_batch::put_op::defer_index`), so that `scan_due` sees every
  /// live task, e.g. before an owner rebuilds its window from the index.
  virtual core::error index_deferred() = 0;

  /// An error while a failed write or sync leaves the store unwritable
  /// (until a commit resumes it, or it is reopened). Its owner should then
  /// reopen it rather than write on: RocksDB's WAL writer keeps the error
  /// of a failed append, and 7.8 aborts the process if it is resumed and
  /// the next append fails too (see docs/simulation.md).
  virtual core::error write_failure() const = 0;

  /// Hands out the next task id of this shard (id % shard_count == shard).
  /// The counter is persisted by the next commit; ids are never reused,
  /// not even after a power loss took unsynced commits (an fsync'd
  /// reservation runs ahead of the counter), though gaps may appear.
  virtual core::task_id allocate_id() = 0;

  /// A live task by id: nullopt if unknown; corrupt_record (naming the key)
  /// if it does not decode, in which case it is also quarantined.
  virtual core::result<std::optional<task_record>> get(core::task_id id) = 0;

  /// Live tasks by id, in the order asked; unknown ids are skipped and
  /// corrupt ones quarantined (see `quarantined`).
  virtual core::result<std::vector<task_record>>
  get_many(std::span<const core::task_id> ids) = 0;

  /// Up to `limit` due-index entries strictly after `after` and with
  /// index_ms < `before_ms`, in (index_ms, id) order. Reads keys only.
  virtual core::result<std::vector<due_key>>
  scan_due(due_key after, int64_t before_ms, size_t limit) = 0;

  /// The entry for `key` if it has not expired at `now_ms`.
  virtual core::result<std::optional<idempotency_entry>>
  find_key(std::string_view key, int64_t now_ms) = 0;

  /// Deletes up to `limit` keys expired at `now_ms`; returns how many. A
  /// call examines a bounded number of keys (a fixed multiple of `limit`),
  /// resuming where the last one stopped, so its cost does not grow with
  /// the number of live keys; an expired key goes within a few rounds.
  virtual core::result<size_t> expire_keys(int64_t now_ms, size_t limit) = 0;

  /// Up to `limit` dead letters with id > `after`, in id order.
  virtual core::result<std::vector<dead_letter>>
  dead_letters(core::task_id after, size_t limit) = 0;

  /// One dead letter by id, or nullopt.
  virtual core::result<std::optional<dead_letter>>
  get_dead(core::task_id id) = 0;

  /// The shard's bookkeeping as of the last commit.
  virtual const shard_meta& meta() const noexcept = 0;

  /// Sets the epoch stamped on later mutations (persisted by the next
  /// commit). Epochs never go back: a lower one is refused.
  virtual core::error set_epoch(uint64_t epoch) = 0;

  /// Raises the fire horizon persisted by the next commit (see
  /// `shard_meta::fire_horizon_ms`); a lower value changes nothing.
  virtual void raise_fire_horizon(int64_t horizon_ms) = 0;

  /// Records moved aside since open because they did not decode.
  virtual const std::vector<quarantined_record>& quarantined() const = 0;

  virtual store_stats stats() const = 0;
};

} // namespace dally::storage
