#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/file_system.h>

#include "core/error.hpp"

namespace dally::storage {

namespace detail {
class fault_tracker;
} // namespace detail

/// Kinds of RocksDB files, told apart by name, to aim faults at some of them.
/// Values are bits; combine them with `|`.
enum class file_kind : uint8_t {
  /// Write-ahead logs (`*.log`).
  wal = 1,
  /// `MANIFEST-*`.
  manifest = 2,
  /// Table files (`*.sst`).
  table = 4,
  /// Everything else (CURRENT, OPTIONS-*, IDENTITY, temporary files).
  other = 8,
  any = 15,
};

constexpr file_kind operator|(file_kind x, file_kind y) noexcept {
  return static_cast<file_kind>(static_cast<uint8_t>(x) |
                                static_cast<uint8_t>(y));
}

/// True if `kind` is one of the kinds in `mask`.
constexpr bool matches(file_kind mask, file_kind kind) noexcept {
  return (static_cast<uint8_t>(mask) & static_cast<uint8_t>(kind)) != 0;
}

/// The kind of the file at `path`, judged by its name.
file_kind kind_of(const std::string& path) noexcept;

/// What an injected failure reports.
enum class fault_code : uint8_t {
  /// A generic I/O error (EIO).
  io_error,
  /// The disk is full (ENOSPC).
  no_space,
};

/// How injected failures fail.
struct fault_spec {
  fault_code code = fault_code::io_error;
  /// Only files of these kinds fail (and count towards a budget).
  file_kind kinds = file_kind::any;
  /// A failing write first writes half of its bytes (a torn write), as a
  /// disk that fills up mid-write does.
  bool torn = false;
};

/// What the file system saw; for assertions.
struct fault_fs_stats {
  /// Successful appends to tracked files, and their bytes.
  uint64_t writes = 0;
  uint64_t bytes_written = 0;
  /// Successful Sync/Fsync of files, and fsyncs of directories.
  uint64_t syncs = 0;
  uint64_t dir_syncs = 0;
  /// Failures injected on purpose.
  uint64_t injected_write_failures = 0;
  uint64_t injected_sync_failures = 0;
  /// Operations refused because the file system was inactive.
  uint64_t refused_inactive = 0;
  /// Power losses simulated, files and directories they removed, files they
  /// cut short, bytes they dropped.
  uint64_t power_losses = 0;
  uint64_t files_removed = 0;
  uint64_t dirs_removed = 0;
  uint64_t files_truncated = 0;
  uint64_t bytes_dropped = 0;
};

/// A tracked file: what was written, what a power loss would keep.
struct tracked_file_status {
  std::string path;
  uint64_t written_bytes = 0;
  uint64_t synced_bytes = 0;
  /// Whether the file's directory entry survives a power loss.
  bool entry_durable = false;
};

/// A RocksDB file system that simulates power loss and disk faults for
/// tests and the simulator: data reaches the real (default) file system at
/// once, as it reaches the page cache, while the wrapper records what was
/// made durable, so that `drop_unsynced_data` can later throw away exactly
/// what a power cut would.
///
/// What it models:
/// - File data is durable up to the size at the start of the last successful
///   Sync/Fsync. Flush, RangeSync (sync_file_range syncs neither metadata nor
///   the disk cache) and Close make nothing durable.
/// - A failed sync poisons the file's unsynced bytes: they stay lost even if
///   a later sync succeeds (Linux marks such pages clean after a writeback
///   error).
/// - A file or directory created through this file system has a durable
///   directory entry once its parent directory is fsync'd; unless
///   `strict_directories` is set, a successful sync of a file also makes its
///   own entry and those of its tracked ancestors durable (ext4 and XFS
///   commit them in the same journal transaction).
/// - Renames and deletions are atomic and durable at once (the renamed file
///   keeps its data state). Namespace changes persist in order, as on a
///   journaling file system: a rename makes every earlier creation durable
///   too, so that a new CURRENT never names a MANIFEST that is gone.
/// - A power loss truncates every tracked file to its durable size, removes
///   files and directories (with all they hold) whose entries are not
///   durable, and starts tracking afresh.
///
/// What it does not model: a rename undone by a power loss before the
/// directory fsync (RocksDB fsyncs the directory after each rename anyway);
/// files it did not create (those that existed before, the info LOG, the
/// LOCK file, hard links, random-access read-write files) are always
/// durable; reordered or partially persisted writes within the unsynced
/// tail; corruption of synced data; read errors.
///
/// Thread-safe: RocksDB's background threads write and sync files
/// concurrently with the writer.
class fault_fs : public rocksdb::FileSystemWrapper {
public:
  /// Wraps RocksDB's default (POSIX) file system.
  fault_fs();

  ~fault_fs() override;

  static const char* kClassName() { return "dally_fault_fs"; }

  const char* Name() const override { return kClassName(); }

  // -- controls ---------------------------------------------------------------

  /// An inactive file system fails every write, sync, create, rename and
  /// delete, as if the process had died; set before closing a database so
  /// that its shutdown changes nothing on disk.
  void set_active(bool active);

  bool active() const;

  /// Lets the next `ops` file writes and syncs (directory fsyncs included)
  /// succeed, then turns inactive at the one after, which fails: a crash at
  /// a chosen point of the I/O stream, e.g. between a WAL append and its
  /// fsync. set_active cancels it.
  void die_after(uint64_t ops);

  /// Only directory fsyncs (and renames, see above) make new directory
  /// entries durable, as POSIX's letter has it; off by default.
  void set_strict_directories(bool strict);

  /// Fails the next `count` appends to matching files.
  void fail_writes(uint32_t count, fault_spec spec = {});

  /// Fails the next `count` syncs of matching files.
  void fail_syncs(uint32_t count, fault_spec spec = {});

  /// Fails each append / sync of a matching file with the given probability
  /// in parts per million, drawn from a PRNG seeded with `seed`. The same
  /// sequence of operations draws the same faults; RocksDB's background
  /// threads may interleave theirs differently from run to run.
  void fail_randomly(uint64_t seed, uint32_t write_ppm, uint32_t sync_ppm,
                     fault_spec spec = {});

  /// Stops injecting failures (budgets and random ones).
  void clear_faults();

  /// Simulates a power cut: cuts tracked files back to their durable size
  /// and removes entries that were never made durable. Call it with the
  /// database closed (set_active(false) first, so that closing writes
  /// nothing); afterwards every file on disk counts as durable.
  core::error drop_unsynced_data();

  // -- observers --------------------------------------------------------------

  fault_fs_stats stats() const;

  /// Files written through this file system since the last power loss.
  std::vector<tracked_file_status> tracked_files() const;

  /// Directories created through this file system whose entries are not
  /// durable yet.
  std::vector<std::string> unsynced_dirs() const;

  // -- rocksdb::FileSystem ----------------------------------------------------

  rocksdb::IOStatus NewWritableFile(const std::string& fname,
                                    const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus
  ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                     std::unique_ptr<rocksdb::FSWritableFile>* r,
                     rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus
  ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                    const rocksdb::FileOptions& opts,
                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                    rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus NewRandomRWFile(const std::string& fname,
                                    const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& opts,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus DeleteFile(const std::string& fname,
                               const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus Truncate(const std::string& fname, size_t size,
                             const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus CreateDir(const std::string& dirname,
                              const rocksdb::IOOptions& opts,
                              rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus CreateDirIfMissing(const std::string& dirname,
                                       const rocksdb::IOOptions& opts,
                                       rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus DeleteDir(const std::string& dirname,
                              const rocksdb::IOOptions& opts,
                              rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst,
                               const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus LinkFile(const std::string& src, const std::string& dst,
                             const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus NewLogger(const std::string& fname,
                              const rocksdb::IOOptions& opts,
                              std::shared_ptr<rocksdb::Logger>* result,
                              rocksdb::IODebugContext* dbg) override;

private:
  std::shared_ptr<detail::fault_tracker> tracker_;
};

} // namespace dally::storage
