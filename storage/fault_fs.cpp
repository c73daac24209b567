#include "storage/fault_fs.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

namespace dally::storage {

namespace {

using rocksdb::FileOptions;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

constexpr uint64_t no_limit = std::numeric_limits<uint64_t>::max();

/// A path in one canonical spelling, so that "db//x" and "db/x" match.
std::string normal(const std::string& path) {
  auto result = std::filesystem::path{path}.lexically_normal().string();
  while (result.size() > 1 && result.back() == '/')
    result.pop_back();
  return result;
}

std::string parent_of(const std::string& normal_path) {
  return std::filesystem::path{normal_path}.parent_path().string();
}

IOStatus refused(const std::string& what) {
  return IOStatus::IOError("dally_fault_fs: inactive, refused", what);
}

IOStatus injected(const fault_spec& spec, const char* op,
                  const std::string& path) {
  auto msg = std::string{"dally_fault_fs: injected "} + op + " failure";
  if (spec.code == fault_code::no_space)
    return IOStatus::NoSpace(msg, path);
  return IOStatus::IOError(msg, path);
}

} // namespace

file_kind kind_of(const std::string& path) noexcept {
  auto slash = path.find_last_of('/');
  auto name = std::string_view{path};
  if (slash != std::string::npos)
    name.remove_prefix(slash + 1);
  if (name.ends_with(".log"))
    return file_kind::wal;
  if (name.starts_with("MANIFEST-"))
    return file_kind::manifest;
  if (name.ends_with(".sst"))
    return file_kind::table;
  return file_kind::other;
}

namespace detail {

/// What the file system knows about one file it created.
struct file_state {
  std::string path;
  file_kind kind = file_kind::other;
  /// End of the data written so far.
  uint64_t size = 0;
  /// End of the data made durable by a successful sync.
  uint64_t synced = 0;
  /// After a failed sync, bytes from here on stay lost.
  uint64_t durable_limit = no_limit;
  bool entry_durable = false;
};

/// The shared state behind a fault_fs and the files it hands out (files may
/// outlive the file system object by a little while RocksDB shuts down).
class fault_tracker {
public:
  explicit fault_tracker(std::shared_ptr<rocksdb::FileSystem> target)
    : target_(std::move(target)) {
    // nop
  }

  // -- gates ------------------------------------------------------------------

  /// Ok while active; counts and refuses otherwise.
  IOStatus gate(const std::string& what) {
    std::lock_guard guard{mtx_};
    if (active_)
      return IOStatus::OK();
    ++stats_.refused_inactive;
    return refused(what);
  }

  /// Decides the fate of an append to `file`: ok, or the failure to report;
  /// `torn` says whether half of the bytes go to disk first.
  IOStatus before_write(const file_state& file, bool& torn) {
    std::lock_guard guard{mtx_};
    torn = false;
    if (!still_alive()) {
      ++stats_.refused_inactive;
      return refused(file.path);
    }
    if (auto spec = draw(write_budget_, write_ppm_, file.kind)) {
      ++stats_.injected_write_failures;
      torn = spec->torn;
      return injected(*spec, "write", file.path);
    }
    return IOStatus::OK();
  }

  void wrote(file_state& file, uint64_t offset, uint64_t len) {
    std::lock_guard guard{mtx_};
    file.size = std::max(file.size, offset + len);
    ++stats_.writes;
    stats_.bytes_written += len;
  }

  void truncated(file_state& file, uint64_t size) {
    std::lock_guard guard{mtx_};
    file.size = size;
    file.synced = std::min(file.synced, size);
  }

  /// Decides the fate of a sync of `file` and, if it may go ahead, returns
  /// in `covered` how much of the file it covers.
  IOStatus before_sync(file_state& file, uint64_t& covered) {
    std::lock_guard guard{mtx_};
    covered = file.size;
    if (!still_alive()) {
      ++stats_.refused_inactive;
      return refused(file.path);
    }
    if (auto spec = draw(sync_budget_, sync_ppm_, file.kind)) {
      ++stats_.injected_sync_failures;
      file.durable_limit = std::min(file.durable_limit, file.synced);
      return injected(*spec, "sync", file.path);
    }
    return IOStatus::OK();
  }

  void synced(file_state& file, uint64_t covered, bool ok) {
    std::lock_guard guard{mtx_};
    if (!ok) {
      file.durable_limit = std::min(file.durable_limit, file.synced);
      return;
    }
    ++stats_.syncs;
    file.synced = std::max(file.synced, std::min(covered, file.size));
    if (!strict_dirs_) {
      file.entry_durable = true;
      for (auto dir = parent_of(file.path); dirs_.contains(dir);
           dir = parent_of(dir)) {
        dirs_[dir] = true;
        if (parent_of(dir) == dir)
          break;
      }
    }
  }

  IOStatus before_dir_sync(const std::string& dir) {
    std::lock_guard guard{mtx_};
    if (still_alive())
      return IOStatus::OK();
    ++stats_.refused_inactive;
    return refused(dir);
  }

  void dir_synced(const std::string& dir) {
    std::lock_guard guard{mtx_};
    ++stats_.dir_syncs;
    for (auto& [path, file] : files_)
      if (parent_of(path) == dir)
        file->entry_durable = true;
    for (auto& [path, durable] : dirs_)
      if (parent_of(path) == dir)
        durable = true;
  }

  // -- namespace changes ------------------------------------------------------

  /// Whether `path` names an entry that survives a power loss right now.
  bool durable_entry(const std::string& path) {
    {
      std::lock_guard guard{mtx_};
      if (auto i = files_.find(path); i != files_.end())
        return i->second->entry_durable;
    }
    return target_->FileExists(path, IOOptions{}, nullptr).ok();
  }

  std::shared_ptr<file_state> track(const std::string& path, uint64_t size,
                                    bool entry_durable) {
    auto file = std::make_shared<file_state>();
    file->path = path;
    file->kind = kind_of(path);
    file->size = size;
    file->synced = size;
    file->entry_durable = entry_durable;
    std::lock_guard guard{mtx_};
    files_[path] = file;
    return file;
  }

  std::shared_ptr<file_state> find(const std::string& path) {
    std::lock_guard guard{mtx_};
    auto i = files_.find(path);
    return i == files_.end() ? nullptr : i->second;
  }

  void forget(const std::string& path) {
    std::lock_guard guard{mtx_};
    files_.erase(path);
    dirs_.erase(path);
  }

  /// A rename is atomic and durable at once; as journaling file systems
  /// persist namespace changes in order, every earlier creation is then
  /// durable too (else a new CURRENT could name a MANIFEST that is gone).
  void renamed(const std::string& src, const std::string& dst) {
    std::lock_guard guard{mtx_};
    if (auto i = files_.find(src); i != files_.end()) {
      auto file = i->second;
      files_.erase(i);
      file->path = dst;
      file->kind = kind_of(dst);
      files_[dst] = std::move(file);
    } else {
      files_.erase(dst);
    }
    for (auto& [path, file] : files_)
      file->entry_durable = true;
    for (auto& [path, durable] : dirs_)
      durable = true;
  }

  void created_dir(const std::string& dir) {
    std::lock_guard guard{mtx_};
    dirs_.emplace(dir, false);
  }

  // -- controls ---------------------------------------------------------------

  void set_active(bool active) {
    std::lock_guard guard{mtx_};
    active_ = active;
    countdown_.reset();
  }

  bool active() {
    std::lock_guard guard{mtx_};
    return active_;
  }

  void die_after(uint64_t ops) {
    std::lock_guard guard{mtx_};
    countdown_ = ops;
  }

  void set_strict_dirs(bool strict) {
    std::lock_guard guard{mtx_};
    strict_dirs_ = strict;
  }

  void set_write_budget(uint32_t count, fault_spec spec) {
    std::lock_guard guard{mtx_};
    write_budget_ = {count, spec};
  }

  void set_sync_budget(uint32_t count, fault_spec spec) {
    std::lock_guard guard{mtx_};
    sync_budget_ = {count, spec};
  }

  void set_random(uint64_t seed, uint32_t write_ppm, uint32_t sync_ppm,
                  fault_spec spec) {
    std::lock_guard guard{mtx_};
    prng_ = seed;
    write_ppm_ = write_ppm;
    sync_ppm_ = sync_ppm;
    random_spec_ = spec;
  }

  void clear_faults() {
    std::lock_guard guard{mtx_};
    write_budget_ = {};
    sync_budget_ = {};
    write_ppm_ = 0;
    sync_ppm_ = 0;
  }

  core::error drop_unsynced_data() {
    std::lock_guard guard{mtx_};
    ++stats_.power_losses;
    auto fail = [](const std::string& what, const std::string& why) {
      return core::error{core::errc::io_error,
                         "dally_fault_fs: power loss simulation failed to " +
                           what + ": " + why};
    };
    for (auto& [path, file] : files_) {
      uint64_t actual = 0;
      auto st = target_->GetFileSize(path, IOOptions{}, &actual, nullptr);
      if (!st.ok()) {
        // Gone with a directory removed behind our back: nothing to drop.
        if (target_->FileExists(path, IOOptions{}, nullptr).IsNotFound())
          continue;
        return fail("stat " + path, st.ToString());
      }
      if (!file->entry_durable) {
        st = target_->DeleteFile(path, IOOptions{}, nullptr);
        if (!st.ok())
          return fail("remove " + path, st.ToString());
        ++stats_.files_removed;
        stats_.bytes_dropped += actual;
        continue;
      }
      auto keep = std::min(file->synced, file->durable_limit);
      if (actual > keep) {
        // RocksDB's POSIX file system does not implement Truncate.
        std::error_code ec;
        std::filesystem::resize_file(path, keep, ec);
        if (ec)
          return fail("truncate " + path, ec.message());
        ++stats_.files_truncated;
        stats_.bytes_dropped += actual - keep;
      }
    }
    // Deepest first: removing a parent removes its children anyway.
    for (auto i = dirs_.rbegin(); i != dirs_.rend(); ++i) {
      if (i->second)
        continue;
      std::error_code ec;
      std::filesystem::remove_all(i->first, ec);
      if (ec)
        return fail("remove " + i->first, ec.message());
      ++stats_.dirs_removed;
    }
    files_.clear();
    dirs_.clear();
    return {};
  }

  // -- observers --------------------------------------------------------------

  fault_fs_stats stats() {
    std::lock_guard guard{mtx_};
    return stats_;
  }

  std::vector<tracked_file_status> tracked_files() {
    std::lock_guard guard{mtx_};
    std::vector<tracked_file_status> result;
    for (const auto& [path, file] : files_)
      result.push_back({path, file->size,
                        std::min(file->synced, file->durable_limit),
                        file->entry_durable});
    return result;
  }

  std::vector<std::string> unsynced_dirs() {
    std::lock_guard guard{mtx_};
    std::vector<std::string> result;
    for (const auto& [path, durable] : dirs_)
      if (!durable)
        result.push_back(path);
    return result;
  }

private:
  struct budget {
    uint32_t count = 0;
    fault_spec spec;
  };

  /// Whether a write or sync may go ahead; counts down to a planned death.
  bool still_alive() {
    if (active_ && countdown_) {
      if (*countdown_ == 0) {
        active_ = false;
        countdown_.reset();
      } else {
        --*countdown_;
      }
    }
    return active_;
  }

  /// The failure to inject into an operation on a `kind` file, if any.
  /// Budgets come first; the random draw only happens for matching files,
  /// so a seed gives the same faults for the same sequence of operations.
  std::optional<fault_spec> draw(budget& b, uint32_t ppm, file_kind kind) {
    if (b.count > 0 && matches(b.spec.kinds, kind)) {
      --b.count;
      return b.spec;
    }
    if (ppm > 0 && matches(random_spec_.kinds, kind) &&
        next_random() % 1'000'000 < ppm)
      return random_spec_;
    return std::nullopt;
  }

  /// SplitMix64: tiny, seedable, good enough for picking faults.
  uint64_t next_random() {
    prng_ += 0x9e3779b97f4a7c15ull;
    auto z = prng_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  std::shared_ptr<rocksdb::FileSystem> target_;
  std::mutex mtx_;
  bool active_ = true;
  bool strict_dirs_ = false;
  /// Writes and syncs left before the file system dies on its own.
  std::optional<uint64_t> countdown_;
  std::map<std::string, std::shared_ptr<file_state>> files_;
  /// Directories created here, and whether their entries are durable.
  std::map<std::string, bool> dirs_;
  budget write_budget_;
  budget sync_budget_;
  uint64_t prng_ = 0;
  uint32_t write_ppm_ = 0;
  uint32_t sync_ppm_ = 0;
  fault_spec random_spec_;
  fault_fs_stats stats_;
};

} // namespace detail

namespace {

using detail::fault_tracker;
using detail::file_state;

/// A file being written: forwards to the real file and reports to the
/// tracker what was written and synced.
class tracked_file final : public rocksdb::FSWritableFileOwnerWrapper {
public:
  tracked_file(std::shared_ptr<fault_tracker> tracker,
               std::shared_ptr<file_state> state,
               std::unique_ptr<rocksdb::FSWritableFile> file)
    : FSWritableFileOwnerWrapper(std::move(file)), tracker_(std::move(tracker)),
      state_(std::move(state)), path_(state_->path) {
    // nop
  }

  IOStatus Append(const Slice& data, const IOOptions& opts,
                  IODebugContext* dbg) override {
    return append(data, opts, dbg);
  }

  IOStatus Append(const Slice& data, const IOOptions& opts,
                  const rocksdb::DataVerificationInfo&,
                  IODebugContext* dbg) override {
    return append(data, opts, dbg);
  }

  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& opts,
                            IODebugContext* dbg) override {
    return positioned_append(data, offset, opts, dbg);
  }

  IOStatus PositionedAppend(const Slice& data, uint64_t offset,
                            const IOOptions& opts,
                            const rocksdb::DataVerificationInfo&,
                            IODebugContext* dbg) override {
    return positioned_append(data, offset, opts, dbg);
  }

  IOStatus Truncate(uint64_t size, const IOOptions& opts,
                    IODebugContext* dbg) override {
    if (auto st = tracker_->gate(path_); !st.ok())
      return st;
    auto st = target()->Truncate(size, opts, dbg);
    if (st.ok())
      tracker_->truncated(*state_, size);
    return st;
  }

  IOStatus Close(const IOOptions& opts, IODebugContext* dbg) override {
    // A dead process's descriptors get closed as well, so the real file is
    // closed either way; closing makes nothing durable.
    auto gate = tracker_->gate(path_);
    auto st = target()->Close(opts, dbg);
    return gate.ok() ? st : gate;
  }

  IOStatus Flush(const IOOptions& opts, IODebugContext* dbg) override {
    if (auto st = tracker_->gate(path_); !st.ok())
      return st;
    return target()->Flush(opts, dbg);
  }

  IOStatus Sync(const IOOptions& opts, IODebugContext* dbg) override {
    return sync(opts, dbg, false);
  }

  IOStatus Fsync(const IOOptions& opts, IODebugContext* dbg) override {
    return sync(opts, dbg, true);
  }

  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& opts,
                     IODebugContext* dbg) override {
    // Starts writeback only; durability is left to Sync/Fsync.
    if (auto st = tracker_->gate(path_); !st.ok())
      return st;
    return target()->RangeSync(offset, nbytes, opts, dbg);
  }

  IOStatus Allocate(uint64_t offset, uint64_t len, const IOOptions& opts,
                    IODebugContext* dbg) override {
    if (auto st = tracker_->gate(path_); !st.ok())
      return st;
    return target()->Allocate(offset, len, opts, dbg);
  }

private:
  IOStatus append(const Slice& data, const IOOptions& opts,
                  IODebugContext* dbg) {
    auto offset = target()->GetFileSize(opts, dbg);
    bool torn = false;
    auto verdict = tracker_->before_write(*state_, torn);
    if (!verdict.ok()) {
      if (torn && data.size() > 1) {
        Slice half{data.data(), data.size() / 2};
        if (target()->Append(half, opts, dbg).ok())
          tracker_->wrote(*state_, offset, half.size());
      }
      return verdict;
    }
    auto st = target()->Append(data, opts, dbg);
    if (st.ok())
      tracker_->wrote(*state_, offset, data.size());
    return st;
  }

  IOStatus positioned_append(const Slice& data, uint64_t offset,
                             const IOOptions& opts, IODebugContext* dbg) {
    bool torn = false;
    auto verdict = tracker_->before_write(*state_, torn);
    if (!verdict.ok()) {
      if (torn && data.size() > 1) {
        Slice half{data.data(), data.size() / 2};
        if (target()->PositionedAppend(half, offset, opts, dbg).ok())
          tracker_->wrote(*state_, offset, half.size());
      }
      return verdict;
    }
    auto st = target()->PositionedAppend(data, offset, opts, dbg);
    if (st.ok())
      tracker_->wrote(*state_, offset, data.size());
    return st;
  }

  IOStatus sync(const IOOptions& opts, IODebugContext* dbg, bool full) {
    uint64_t covered = 0;
    if (auto st = tracker_->before_sync(*state_, covered); !st.ok())
      return st;
    auto st = full ? target()->Fsync(opts, dbg) : target()->Sync(opts, dbg);
    tracker_->synced(*state_, covered, st.ok());
    return st;
  }

  std::shared_ptr<fault_tracker> tracker_;
  std::shared_ptr<file_state> state_;
  /// For messages; the state's path may change under the tracker's lock.
  std::string path_;
};

/// A directory handle whose fsync makes new entries in it durable.
class tracked_dir final : public rocksdb::FSDirectoryWrapper {
public:
  tracked_dir(std::shared_ptr<fault_tracker> tracker, std::string path,
              std::unique_ptr<rocksdb::FSDirectory> dir)
    : FSDirectoryWrapper(std::move(dir)), tracker_(std::move(tracker)),
      path_(std::move(path)) {
    // nop
  }

  IOStatus Fsync(const IOOptions& opts, IODebugContext* dbg) override {
    if (auto st = tracker_->before_dir_sync(path_); !st.ok())
      return st;
    auto st = FSDirectoryWrapper::Fsync(opts, dbg);
    if (st.ok())
      tracker_->dir_synced(path_);
    return st;
  }

  IOStatus
  FsyncWithDirOptions(const IOOptions& opts, IODebugContext* dbg,
                      const rocksdb::DirFsyncOptions& dir_opts) override {
    if (auto st = tracker_->before_dir_sync(path_); !st.ok())
      return st;
    auto st = FSDirectoryWrapper::FsyncWithDirOptions(opts, dbg, dir_opts);
    if (st.ok())
      tracker_->dir_synced(path_);
    return st;
  }

private:
  std::shared_ptr<fault_tracker> tracker_;
  std::string path_;
};

} // namespace

fault_fs::fault_fs()
  : FileSystemWrapper(rocksdb::FileSystem::Default()),
    tracker_(std::make_shared<fault_tracker>(rocksdb::FileSystem::Default())) {
  // nop
}

fault_fs::~fault_fs() = default;

void fault_fs::set_active(bool active) {
  tracker_->set_active(active);
}

bool fault_fs::active() const {
  return tracker_->active();
}

void fault_fs::die_after(uint64_t ops) {
  tracker_->die_after(ops);
}

void fault_fs::set_strict_directories(bool strict) {
  tracker_->set_strict_dirs(strict);
}

void fault_fs::fail_writes(uint32_t count, fault_spec spec) {
  tracker_->set_write_budget(count, spec);
}

void fault_fs::fail_syncs(uint32_t count, fault_spec spec) {
  tracker_->set_sync_budget(count, spec);
}

void fault_fs::fail_randomly(uint64_t seed, uint32_t write_ppm,
                             uint32_t sync_ppm, fault_spec spec) {
  tracker_->set_random(seed, write_ppm, sync_ppm, spec);
}

void fault_fs::clear_faults() {
  tracker_->clear_faults();
}

core::error fault_fs::drop_unsynced_data() {
  return tracker_->drop_unsynced_data();
}

fault_fs_stats fault_fs::stats() const {
  return tracker_->stats();
}

std::vector<tracked_file_status> fault_fs::tracked_files() const {
  return tracker_->tracked_files();
}

std::vector<std::string> fault_fs::unsynced_dirs() const {
  return tracker_->unsynced_dirs();
}

IOStatus fault_fs::NewWritableFile(const std::string& fname,
                                   const FileOptions& opts,
                                   std::unique_ptr<rocksdb::FSWritableFile>* r,
                                   IODebugContext* dbg) {
  auto path = normal(fname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  auto existed = tracker_->durable_entry(path);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  auto st = target()->NewWritableFile(fname, opts, &file, dbg);
  if (!st.ok())
    return st;
  auto state = tracker_->track(path, 0, existed);
  *r =
    std::make_unique<tracked_file>(tracker_, std::move(state), std::move(file));
  return st;
}

IOStatus
fault_fs::ReopenWritableFile(const std::string& fname, const FileOptions& opts,
                             std::unique_ptr<rocksdb::FSWritableFile>* r,
                             IODebugContext* dbg) {
  auto path = normal(fname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  auto state = tracker_->find(path);
  auto existed = state ? state->entry_durable : tracker_->durable_entry(path);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  auto st = target()->ReopenWritableFile(fname, opts, &file, dbg);
  if (!st.ok())
    return st;
  if (!state) {
    uint64_t size = 0;
    if (!target()->GetFileSize(fname, IOOptions{}, &size, dbg).ok())
      size = 0;
    // What was there before is as durable as we assume untracked files are;
    // a file that did not exist starts with a fresh, undurable entry.
    state = tracker_->track(path, size, existed);
  }
  *r =
    std::make_unique<tracked_file>(tracker_, std::move(state), std::move(file));
  return st;
}

IOStatus fault_fs::ReuseWritableFile(
  const std::string& fname, const std::string& old_fname,
  const FileOptions& opts, std::unique_ptr<rocksdb::FSWritableFile>* r,
  IODebugContext* dbg) {
  auto path = normal(fname);
  auto old_path = normal(old_fname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  auto st = target()->ReuseWritableFile(fname, old_fname, opts, &file, dbg);
  if (!st.ok())
    return st;
  tracker_->renamed(old_path, path);
  // The recycled bytes are garbage: only what gets rewritten and synced
  // counts, so track the file as if it were new (its entry is durable).
  auto state = tracker_->track(path, 0, true);
  *r =
    std::make_unique<tracked_file>(tracker_, std::move(state), std::move(file));
  return st;
}

IOStatus fault_fs::NewRandomRWFile(const std::string& fname,
                                   const FileOptions& opts,
                                   std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                   IODebugContext* dbg) {
  if (auto st = tracker_->gate(normal(fname)); !st.ok())
    return st;
  return target()->NewRandomRWFile(fname, opts, r, dbg);
}

IOStatus fault_fs::NewDirectory(const std::string& name, const IOOptions& opts,
                                std::unique_ptr<rocksdb::FSDirectory>* r,
                                IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSDirectory> dir;
  auto st = target()->NewDirectory(name, opts, &dir, dbg);
  if (!st.ok())
    return st;
  *r = std::make_unique<tracked_dir>(tracker_, normal(name), std::move(dir));
  return st;
}

IOStatus fault_fs::DeleteFile(const std::string& fname, const IOOptions& opts,
                              IODebugContext* dbg) {
  auto path = normal(fname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  auto st = target()->DeleteFile(fname, opts, dbg);
  if (st.ok())
    tracker_->forget(path);
  return st;
}

IOStatus fault_fs::Truncate(const std::string& fname, size_t size,
                            const IOOptions& opts, IODebugContext* dbg) {
  auto path = normal(fname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  auto st = target()->Truncate(fname, size, opts, dbg);
  if (st.ok())
    if (auto state = tracker_->find(path))
      tracker_->truncated(*state, size);
  return st;
}

IOStatus fault_fs::CreateDir(const std::string& dirname, const IOOptions& opts,
                             IODebugContext* dbg) {
  auto path = normal(dirname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  auto st = target()->CreateDir(dirname, opts, dbg);
  if (st.ok())
    tracker_->created_dir(path);
  return st;
}

IOStatus fault_fs::CreateDirIfMissing(const std::string& dirname,
                                      const IOOptions& opts,
                                      IODebugContext* dbg) {
  auto path = normal(dirname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  auto existed = target()->FileExists(dirname, opts, dbg).ok();
  auto st = target()->CreateDirIfMissing(dirname, opts, dbg);
  if (st.ok() && !existed)
    tracker_->created_dir(path);
  return st;
}

IOStatus fault_fs::DeleteDir(const std::string& dirname, const IOOptions& opts,
                             IODebugContext* dbg) {
  auto path = normal(dirname);
  if (auto st = tracker_->gate(path); !st.ok())
    return st;
  auto st = target()->DeleteDir(dirname, opts, dbg);
  if (st.ok())
    tracker_->forget(path);
  return st;
}

IOStatus fault_fs::RenameFile(const std::string& src, const std::string& dst,
                              const IOOptions& opts, IODebugContext* dbg) {
  auto src_path = normal(src);
  auto dst_path = normal(dst);
  if (auto st = tracker_->gate(dst_path); !st.ok())
    return st;
  auto st = target()->RenameFile(src, dst, opts, dbg);
  if (st.ok())
    tracker_->renamed(src_path, dst_path);
  return st;
}

IOStatus fault_fs::LinkFile(const std::string& src, const std::string& dst,
                            const IOOptions& opts, IODebugContext* dbg) {
  if (auto st = tracker_->gate(normal(dst)); !st.ok())
    return st;
  return target()->LinkFile(src, dst, opts, dbg);
}

IOStatus fault_fs::NewLogger(const std::string& fname, const IOOptions& opts,
                             std::shared_ptr<rocksdb::Logger>* result,
                             IODebugContext* dbg) {
  if (auto st = tracker_->gate(normal(fname)); !st.ok())
    return st;
  return target()->NewLogger(fname, opts, result, dbg);
}

} // namespace dally::storage
