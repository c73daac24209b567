#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/utilities/options_util.h>

#include "core/recurrence.hpp"
#include "storage/task_record.hpp"

// Helpers shared by the store benchmarks: scratch directories, RSS, a
// record like the ones a shard writes, and flushing/compacting a closed
// store's RocksDB directly to measure its SST files.

namespace dally::bench {

/// Prints `what` and exits: a benchmark cannot continue after a failure.
[[noreturn]] inline void die(std::string_view what) {
  std::cerr << "error: " << what << '\n';
  std::exit(1);
}

/// The resident set of this process in KiB (VmRSS of /proc/self/status).
inline uint64_t rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::strtoull(line.c_str() + 6, nullptr, 10);
  return 0;
}

/// A directory made empty on construction and removed on destruction.
class scratch_dir {
public:
  explicit scratch_dir(std::filesystem::path path) : path_(std::move(path)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }

  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

  std::string str() const { return path_.string(); }

private:
  std::filesystem::path path_;
};

/// A one-shot task without payload, as a shard stores a fresh schedule.
inline storage::task_record bench_record(core::task_id id, int64_t due_ms) {
  storage::task_record rec;
  rec.task.id = id;
  rec.task.topic = "bench.topic";
  rec.task.due_ms = due_ms;
  auto at = core::recurrence::at(due_ms);
  if (!at)
    die("recurrence::at failed");
  rec.task.recurrence = *at;
  return rec;
}

/// Opens the closed RocksDB directory `path` with the options it was
/// written with (its latest OPTIONS file), flushes every column family,
/// optionally compacts each into its bottom level, and returns the bytes
/// of live SST files per column family.
inline std::map<std::string, uint64_t>
flush_and_measure(const std::string& path, bool compact) {
  rocksdb::ConfigOptions config;
  rocksdb::DBOptions db_opts;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  auto st = rocksdb::LoadLatestOptions(config, path, &db_opts, &cfs);
  if (!st.ok())
    die("LoadLatestOptions: " + st.ToString());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  st = rocksdb::DB::Open(db_opts, path, cfs, &handles, &raw);
  if (!st.ok())
    die("DB::Open: " + st.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  if (st = db->Flush(rocksdb::FlushOptions{}, handles); !st.ok())
    die("Flush: " + st.ToString());
  if (compact) {
    rocksdb::CompactRangeOptions opts;
    opts.bottommost_level_compaction =
      rocksdb::BottommostLevelCompaction::kForce;
    for (auto* handle : handles)
      if (st = db->CompactRange(opts, handle, nullptr, nullptr); !st.ok())
        die("CompactRange: " + st.ToString());
  }
  std::vector<rocksdb::LiveFileMetaData> files;
  db->GetLiveFilesMetaData(&files);
  std::map<std::string, uint64_t> bytes;
  for (const auto& cf : cfs)
    bytes[cf.name] = 0;
  for (const auto& file : files)
    bytes[file.column_family_name] += file.size;
  for (auto* handle : handles)
    db->DestroyColumnFamilyHandle(handle);
  if (st = db->Close(); !st.ok())
    die("Close: " + st.ToString());
  return bytes;
}

} // namespace dally::bench
