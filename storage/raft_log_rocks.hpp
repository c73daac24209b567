#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cluster/raft_log_store.hpp"
#include "core/result.hpp"

namespace rocksdb {
class DB;
} // namespace rocksdb

namespace dally::storage {

/// The durable raft_log_store: term and vote, the log and the latest
/// snapshot in a RocksDB database of their own. Every call is one synced
/// WriteBatch, so a crash leaves the state before or after it, never a mix.
/// Reads come from a copy in memory that follows each write.
class rocks_log_store : public cluster::raft_log_store {
public:
  /// Opens (or creates) the store in `dir`; a new store starts from
  /// `initial` at index 0. A record that does not decode, or a log with a
  /// gap, is an error (corrupt_record) rather than a guess.
  static core::result<std::unique_ptr<rocks_log_store>>
  open(const std::string& dir, cluster::cluster_map initial);

  ~rocks_log_store() override;

  rocks_log_store(const rocks_log_store&) = delete;
  rocks_log_store& operator=(const rocks_log_store&) = delete;

  uint64_t term() const override { return mem_.term(); }

  std::optional<cluster::node_id> vote() const override { return mem_.vote(); }

  /// Throws std::runtime_error when the write fails; nothing changes then.
  void save_term_vote(uint64_t term,
                      std::optional<cluster::node_id> vote) override;

  const cluster::snapshot& last_snapshot() const override {
    return mem_.last_snapshot();
  }

  uint64_t last_index() const override { return mem_.last_index(); }

  uint64_t term_at(uint64_t index) const override {
    return mem_.term_at(index);
  }

  const cluster::log_entry& entry(uint64_t index) const override {
    return mem_.entry(index);
  }

  /// Throws std::out_of_range for an index outside the log,
  /// std::invalid_argument for entries that do not follow it, and
  /// std::runtime_error when the write fails; nothing changes then.
  void replace_after(uint64_t index,
                     std::span<const cluster::log_entry> entries) override;

  /// Throws std::runtime_error when the write fails; nothing changes then.
  void save_snapshot(const cluster::snapshot& snap) override;

private:
  explicit rocks_log_store(std::unique_ptr<rocksdb::DB> db);

  core::error load(cluster::cluster_map initial);

  core::error load_term_vote();

  core::error load_entries();

  bool has_entries() const;

  std::unique_ptr<rocksdb::DB> db_;
  /// What the database holds, for reads; it follows each successful write.
  cluster::memory_log_store mem_;
};

} // namespace dally::storage
