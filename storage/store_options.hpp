#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace rocksdb {
class FileSystem;
} // namespace rocksdb

namespace dally::storage {

struct committed_batch;

/// When an acknowledged write is safe.
enum class durability : uint8_t {
  /// Every urgent commit (one a reply or a delivery waits for, see
  /// write_batch::urgent) is fsync'd before it returns: nothing
  /// acknowledged is lost, even by power loss. One fsync per batch (group
  /// commit). Other commits are fsync'd with the next urgent one or within
  /// `sync_period_ms`; a power loss may take them, which at worst delivers
  /// a task again.
  sync,
  /// Commits go to the OS at once and are fsync'd every `sync_period_ms`:
  /// a process crash loses nothing, a power loss loses at most the writes of
  /// the last period.
  periodic,
  /// Commits still go to RocksDB's WAL (in the OS's page cache) before
  /// they return; only the fsync is skipped: nothing waits for one but the
  /// rare commit that moves the id reservation and an explicit `sync()`.
  /// A process crash (kill -9 included) loses nothing, since the OS still
  /// writes the WAL back; a power loss or kernel crash may lose any write
  /// the OS had not written back yet, acknowledged ones included.
  none,
};

/// How a shard's store is opened (in the manner of rocksdb::Options: plain
/// fields with documented defaults).
struct store_options {
  /// The shard's data directory; created when missing.
  std::string path;

  uint32_t shard = 0;

  /// Fixed when the cluster is created; reopening with another count fails.
  uint32_t shard_count = 1;

  storage::durability durability = durability::sync;

  /// With durability::periodic (and, for commits that are not urgent,
  /// durability::sync): the longest a write stays unsynced, given that the
  /// owner calls `sync_if_due` at least this often.
  int64_t sync_period_ms = 100;

  /// RocksDB memtable size per column family.
  size_t write_buffer_bytes = 64 << 20;

  /// RocksDB block cache shared by the shard's column families.
  size_t block_cache_bytes = 64 << 20;

  /// Most new tasks whose due-index entry commits may leave unwritten (see
  /// `write_batch::put_op::defer_index`); a commit writes the oldest
  /// entries beyond it. A task acked while its entry is still deferred
  /// never touches the index: two of its five memtable inserts saved. A
  /// crash leaves at most about this many tasks for the next open to
  /// index again (a range scan of their records). 0: nothing is deferred.
  size_t max_deferred_index = 1 << 16;

  /// Keeps the `tasks` family's memtable in a B-tree
  /// (`btree_memtable_factory`) instead of RocksDB's skip list: acks delete
  /// task keys in random order, and the skip list's search for each was the
  /// largest single cost of a task. Turns off RocksDB's concurrent memtable
  /// writes, which a store (one writer) never used. False: RocksDB's skip
  /// list, for comparison.
  bool btree_task_memtable = true;

  /// Runs RocksDB's flushes and compactions at the lowest CPU priority
  /// (nice 19), so that under load they take the cores' idle time instead
  /// of delaying the shards' firing. RocksDB's thread pools belong to its
  /// default environment, so this applies to every RocksDB database in the
  /// process, and a later store that leaves it off does not undo it.
  bool background_at_low_priority = true;

  /// Replaces RocksDB's file system (tests inject faults through it).
  std::shared_ptr<rocksdb::FileSystem> file_system;

  /// Called after every commit that was written, with what it wrote: the
  /// owner's, the store's own (creating the meta, quarantine, index
  /// writes, key expiry, the index writes of a clean close from the
  /// destructor) and `apply`'s, in order, from the thread that called the
  /// store. So a replicating primary sees its whole history (see
  /// replication_codec.hpp). It must not call the store. Unset: the store
  /// keeps nothing for it.
  std::function<void(const committed_batch&)> on_commit;
};

} // namespace dally::storage
