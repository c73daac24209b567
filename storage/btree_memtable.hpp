#pragma once

#include <rocksdb/memtablerep.h>

namespace dally::storage {

/// A RocksDB memtable kept in a B-tree (abseil's) whose entries carry the
/// first 8 bytes of their user key, its length and the sequence number
/// inline, so that an insert compares against keys in the tree's own nodes
/// instead of following a pointer per comparison as RocksDB's skip list
/// does (for keys of up to 8 bytes, never). Meant for the `tasks` family,
/// whose acks delete keys in random order: there the skip list's search
/// was the largest single cost of a task.
///
/// One writer, and readers only on the writer's thread or on a memtable
/// that no longer takes writes (flushes read immutable ones): the owner
/// must set `DBOptions::allow_concurrent_memtable_write = false`, which
/// RocksDB enforces since this factory does not support concurrent inserts.
/// A store is only ever used from its shard's thread, so this holds.
///
/// Also required of the column family: RocksDB's default (bytewise) key
/// comparator, which the inline prefixes assume; no merge operator and no
/// in-place updates (`inplace_update_support`): RocksDB deletes the
/// iterator it asks for when it counts merge operands or updates in place,
/// but not the one of a point read, which this memtable therefore keeps
/// per thread. The store's families meet all three.
class btree_memtable_factory : public rocksdb::MemTableRepFactory {
public:
  using rocksdb::MemTableRepFactory::CreateMemTableRep;

  rocksdb::MemTableRep*
  CreateMemTableRep(const rocksdb::MemTableRep::KeyComparator& cmp,
                    rocksdb::Allocator* allocator,
                    const rocksdb::SliceTransform* transform,
                    rocksdb::Logger* logger) override;

  const char* Name() const override { return "DallyBTreeMemTableFactory"; }
};

} // namespace dally::storage
