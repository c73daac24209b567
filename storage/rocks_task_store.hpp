#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/result.hpp"
#include "storage/store_options.hpp"
#include "storage/task_record.hpp"
#include "storage/task_store.hpp"
#include "storage/write_batch.hpp"

namespace dally::storage {

/// The key of task `id` in the "tasks" and "dead" families (see below).
std::string encode_task_key(core::task_id id);

/// The durable task store of one shard: one RocksDB instance in the shard's
/// data directory, values encoded as the protobuf messages of
/// proto/dally.proto.
///
/// Column families, with keys encoded so that byte order is scan order:
/// - "tasks": id (8 bytes big-endian) -> TaskRecord.
/// - "due": index time (8 bytes big-endian, sign bit flipped so negative
///   times sort first) + id (8 bytes big-endian) -> empty. One entry per
///   live task, at task_record::index_ms(), in flight or not. Stores
///   written before 2026-11 keep an in-flight task's entry at its lease
///   deadline instead; the shard moves such an entry when it meets it.
/// - "keys": idempotency key bytes -> IdempotencyRecord.
/// - "dead": id -> DeadLetter.
/// - "meta": "shard" -> ShardMeta.
/// - "quarantine": column family name, a zero byte and the original key ->
///   reason length (4 bytes big-endian), reason and the original value:
///   records that did not decode, kept for inspection.
///
/// What an acknowledged commit survives (see durability):
/// - sync: process crash and power loss; one fsync per urgent commit (the
///   others, which nobody waits for, are fsync'd with the next urgent one
///   or by `sync_if_due`).
/// - periodic: process crash; a power loss loses the commits made since the
///   last `sync_if_due` that synced (at most `sync_period_ms` of them if the
///   owner calls it at least that often).
/// - none: process crash; a power loss loses whatever the OS had not
///   written back.
///
/// After a failed write or sync, RocksDB may refuse further writes. The
/// failed commit reports its error; the next one first asks RocksDB to
/// resume and fails with store_unavailable (and the reason) while it
/// cannot. The directory is locked while open: a second opener, in this
/// process or another, gets store_locked.
class rocks_task_store final : public task_store {
public:
  /// Opens (creating it when missing) the store in `opts.path`. Errors:
  /// store_locked if the directory is in use; store_unavailable if the
  /// options are inconsistent or the directory belongs to another shard or
  /// shard count; corrupt_record if the shard meta does not decode (the
  /// store refuses to guess its id counter and epoch); io_error, no_space.
  static core::result<std::unique_ptr<rocks_task_store>>
  open(const store_options& opts);

  /// Closes RocksDB. Commits are already in the WAL; with periodic or no
  /// durability, unsynced ones are not fsync'd here (call sync() first).
  ~rocks_task_store() override;

  rocks_task_store(const rocks_task_store&) = delete;
  rocks_task_store& operator=(const rocks_task_store&) = delete;

  /// Also refuses, writing nothing, a batch with a topic or idempotency key
  /// that is not valid UTF-8 (invalid_topic, invalid_idempotency_key):
  /// protobuf would store it but never read it back.
  core::error commit(const write_batch& batch) override;

  /// Writes a batch of another store's history (a replica applying its
  /// primary's ReplicationEntry, decoded by `from_entry`) through the same
  /// path as `commit`: its stamps, its puts' deferrals and index writes as
  /// they are, its meta as this store's. Applying a store's entries in
  /// order to an empty store of the same shard and options gives the same
  /// store. Like any commit it is reported to `store_options::on_commit`.
  /// Errors: stale_epoch for an epoch below this store's; invalid_request
  /// (writing nothing) for another shard or stamps that do not follow
  /// this store's last; those of `commit`.
  core::error apply(const replicated_batch& entry);

  core::error sync_if_due(int64_t now_ms) override;

  core::error sync() override;

  bool sync_pending() const noexcept override;

  core::error index_deferred() override;

  core::error write_failure() const override;

  /// A new store starts at local id 1, so id 0 is never handed out. Throws
  /// std::length_error once the shard's ids are used up (2^64 / shard_count
  /// of them): handing out a used id again would be worse.
  core::task_id allocate_id() override;

  core::result<std::optional<task_record>> get(core::task_id id) override;

  core::result<std::vector<task_record>>
  get_many(std::span<const core::task_id> ids) override;

  /// Due keys of the wrong length are quarantined and skipped.
  core::result<std::vector<due_key>> scan_due(due_key after, int64_t before_ms,
                                              size_t limit) override;

  /// A key whose entry does not decode is quarantined (corrupt_record).
  core::result<std::optional<idempotency_entry>>
  find_key(std::string_view key, int64_t now_ms) override;

  /// Walks the keys round-robin from where the previous call stopped, so
  /// repeated calls with a small limit visit every key. Entries that do
  /// not decode are quarantined (not counted).
  core::result<size_t> expire_keys(int64_t now_ms, size_t limit) override;

  /// Entries that do not decode are quarantined and skipped, as in get_many.
  core::result<std::vector<dead_letter>> dead_letters(core::task_id after,
                                                      size_t limit) override;

  core::result<std::optional<dead_letter>> get_dead(core::task_id id) override;

  const shard_meta& meta() const noexcept override;

  /// Errors: stale_epoch for an epoch below the current one.
  core::error set_epoch(uint64_t epoch) override;
  void raise_fire_horizon(int64_t horizon_ms) override;

  const std::vector<quarantined_record>& quarantined() const override;

  /// `syncs` counts fsyncs: one per urgent commit with durability::sync
  /// (and one per commit that fsyncs an id reservation), those of
  /// sync_if_due and sync, and one when open creates the store.
  store_stats stats() const override;

  /// Writes every family's memtable to a table file and waits for it; with
  /// `compact`, then merges each family's files down to one level. RocksDB
  /// does both in the background at its own pace; this lets a test reach
  /// the states they create at a point it chooses.
  core::error flush(bool compact = false);

private:
  struct impl;

  explicit rocks_task_store(std::unique_ptr<impl> state);

  std::unique_ptr<impl> impl_;
};

} // namespace dally::storage
