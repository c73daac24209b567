#define BOOST_TEST_MODULE storage_faults
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/errc.hpp"
#include "core/recurrence.hpp"
#include "core/result.hpp"
#include "storage/fault_fs.hpp"
#include "storage/record_damage.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "storage/write_batch.hpp"
#include "test_support.hpp"

using dally::core::errc;
using dally::core::task_id;
using dally::storage::due_key;
using dally::storage::durability;
using dally::storage::fault_code;
using dally::storage::fault_fs;
using dally::storage::fault_spec;
using dally::storage::file_kind;
using dally::storage::record_damage;
using dally::storage::rocks_task_store;
using dally::storage::store_options;
using dally::storage::task_record;
using dally::storage::write_batch;

using dally::storage::test::error_of;
using dally::storage::test::prng;

using dally::storage::test::temp_dir;

namespace {

constexpr int64_t t0_ms = 1'700'000'000'000;

/// A task with contents drawn from `rng`, so that a damaged copy shows.
task_record make_record(task_id id, prng& rng) {
  task_record rec;
  rec.task.id = id;
  rec.task.topic = "faults." + std::to_string(rng.below(8));
  auto len = rng.below(64);
  for (uint64_t i = 0; i < len; ++i)
    rec.task.payload.push_back(static_cast<char>(rng.below(256)));
  rec.task.due_ms = t0_ms + static_cast<int64_t>(rng.below(3'600'000));
  rec.task.recurrence = dally::core::recurrence::at(rec.task.due_ms).value();
  return rec;
}

/// Equal in everything the writer chose (the store adds the stamp).
bool same_content(const task_record& x, const task_record& y) {
  return x.task == y.task && x.state == y.state &&
         x.lease_deadline_ms == y.lease_deadline_ms &&
         x.fired_count == y.fired_count && x.retry_at_ms == y.retry_at_ms;
}

std::string describe(const dally::core::error& err) {
  std::ostringstream out;
  out << err;
  return out.str();
}

using batch = std::vector<task_record>;

/// A rocks_task_store on a fault_fs, and a model of what it must hold:
/// batches acknowledged (must survive whatever the durability level
/// promises), batches in doubt (failed or unsynced: all or nothing), and
/// tasks that are gone for good (must never come back, though their ids may
/// be handed out again).
class harness {
public:
  /// With `strict_dirs`, only directory fsyncs make new files and
  /// directories durable, so the store must fsync the parent of the data
  /// directory it creates; without, file fsyncs make their entries durable
  /// too (ext4, XFS).
  explicit harness(durability level, uint64_t seed, bool strict_dirs = true)
    : fs_(std::make_shared<fault_fs>()), rng_(seed) {
    fs_->set_strict_directories(strict_dirs);
    opts_.path = (dir_.path() / "shard").string();
    opts_.shard = 1;
    opts_.shard_count = 4;
    opts_.durability = level;
    opts_.sync_period_ms = 100;
    // Small memtables: flushes (new SSTs, MANIFEST edits, new WALs) happen
    // often, so crashes and faults also land in the middle of them.
    opts_.write_buffer_bytes = 64 << 10;
    opts_.block_cache_bytes = 1 << 20;
    opts_.file_system = fs_;
  }

  ~harness() {
    store_.reset();
    fs_->set_active(true);
  }

  fault_fs& fs() { return *fs_; }

  rocks_task_store& store() { return *store_; }

  prng& rng() { return rng_; }

  bool is_open() const { return store_ != nullptr; }

  dally::core::error try_open() {
    auto res = rocks_task_store::open(opts_);
    if (!res)
      return res.err();
    store_ = std::move(res).value();
    return {};
  }

  void open() {
    auto err = try_open();
    BOOST_REQUIRE_MESSAGE(!err, "open failed: " << err);
  }

  /// Closes the store as a clean shutdown does.
  void close() { store_.reset(); }

  /// The process dies: whatever it had handed to the OS stays.
  void kill() {
    fs_->set_active(false);
    store_.reset();
    fs_->set_active(true);
  }

  /// The machine loses power: the process dies and unsynced data is lost.
  void power_loss() {
    fs_->set_active(false);
    store_.reset();
    auto err = fs_->drop_unsynced_data();
    BOOST_REQUIRE_MESSAGE(!err, "drop_unsynced_data: " << err);
    fs_->set_active(true);
  }

  /// Commits `n` new tasks as one batch. On success the batch is
  /// acknowledged; on failure it is in doubt. `urgent`: see
  /// write_batch::urgent.
  dally::core::error commit_new(size_t n, bool urgent = true) {
    batch recs;
    write_batch wb;
    wb.set_urgent(urgent);
    for (size_t i = 0; i < n; ++i) {
      recs.push_back(make_record(store_->allocate_id(), rng_));
      wb.put(recs.back());
      if (auto i = gone_.find(recs.back().task.id); i != gone_.end()) {
        reused_acked_ids_ += i->second ? 1 : 0;
        gone_.erase(i);
      }
    }
    auto err = store_->commit(wb);
    if (err)
      doubtful_.push_back(std::move(recs));
    else
      acked_.push_back(std::move(recs));
    return err;
  }

  /// Everything acknowledged so far counts as safe from power loss (the
  /// caller knows it was synced).
  void mark_synced() { synced_batches_ = acked_.size(); }

  /// Ids handed out again after the acknowledged task that had them was
  /// lost to a power loss (periodic and none only).
  size_t reused_acked_ids() const { return reused_acked_ids_; }

  /// Checks the store against the model: every acknowledged batch from
  /// `first_unsafe` on may be lost (but then, like every batch in doubt,
  /// entirely, and only as a suffix of the history); everything before is
  /// intact; nothing unknown appears; the due index holds exactly the live
  /// tasks; the id counter is past every live id; nothing was quarantined.
  /// With `settle` (after a reopen) the model then keeps what is visible
  /// and forgets the rest; without (in the running process) batches in
  /// doubt stay so: a batch whose fsync failed is in the WAL and may come
  /// back at the next open.
  void verify(size_t first_unsafe, bool settle = true) {
    BOOST_REQUIRE(store_);
    auto visible_in = [this](const batch& recs) {
      size_t n = 0;
      for (const auto& rec : recs) {
        auto got = store_->get(rec.task.id);
        BOOST_REQUIRE_MESSAGE(got.has_value(),
                              "get(" << rec.task.id << "): " << error_of(got));
        if (!got->has_value())
          continue;
        ++n;
        BOOST_CHECK_MESSAGE(same_content(**got, rec),
                            "task " << rec.task.id << " damaged");
      }
      return n;
    };
    std::vector<batch> kept;
    std::vector<batch> lost;
    std::vector<batch> lost_doubtful;
    bool lost_one = false;
    for (size_t i = 0; i < acked_.size(); ++i) {
      auto n = visible_in(acked_[i]);
      if (i < first_unsafe) {
        BOOST_CHECK_MESSAGE(n == acked_[i].size(),
                            "acknowledged batch "
                              << i << " lost " << acked_[i].size() - n << " of "
                              << acked_[i].size());
      } else {
        BOOST_CHECK_MESSAGE(n == 0 || n == acked_[i].size(),
                            "unsynced batch " << i << " half there: " << n
                                              << " of " << acked_[i].size());
        BOOST_CHECK_MESSAGE(n == 0 || !lost_one,
                            "batch " << i << " survived an earlier loss");
      }
      lost_one = lost_one || n == 0;
      (n == 0 ? lost : kept).push_back(acked_[i]);
    }
    for (const auto& recs : doubtful_) {
      auto n = visible_in(recs);
      BOOST_CHECK_MESSAGE(n == 0 || n == recs.size(),
                          "failed batch half there: " << n << " of "
                                                      << recs.size());
      (n == 0 ? lost_doubtful : kept).push_back(recs);
    }
    std::set<task_id> live;
    task_id max_id = 0;
    for (const auto& recs : kept)
      for (const auto& rec : recs) {
        live.insert(rec.task.id);
        max_id = std::max(max_id, rec.task.id);
      }
    // The due index: exactly the live tasks, at their due times.
    std::map<task_id, int64_t> due;
    due_key after{std::numeric_limits<int64_t>::min(), 0};
    for (;;) {
      auto page =
        store_->scan_due(after, std::numeric_limits<int64_t>::max(), 512);
      BOOST_REQUIRE_MESSAGE(page.has_value(), "scan_due: " << error_of(page));
      if (page->empty())
        break;
      for (const auto& key : *page)
        due.emplace(key.id, key.index_ms);
      after = page->back();
    }
    BOOST_CHECK_EQUAL(due.size(), live.size());
    for (const auto& recs : kept)
      for (const auto& rec : recs) {
        auto i = due.find(rec.task.id);
        BOOST_CHECK_MESSAGE(i != due.end() && i->second == rec.task.due_ms,
                            "task " << rec.task.id << " missing from index");
      }
    for (const auto& [id, ms] : due)
      BOOST_CHECK_MESSAGE(live.contains(id),
                          "unknown task " << id << " in index");
    for (const auto& [id, was_acked] : gone_) {
      auto got = store_->get(id);
      BOOST_REQUIRE(got.has_value());
      BOOST_CHECK_MESSAGE(!got->has_value(), "lost task " << id << " is back");
    }
    // The counter must be past every live id, or a new task could overwrite
    // a surviving one. (Ids of lost commits may come again: the counter
    // advance was lost with them.)
    auto next = store_->allocate_id();
    BOOST_CHECK_GT(next, max_id);
    BOOST_CHECK_EQUAL(next % 4, 1u);
    BOOST_CHECK(store_->quarantined().empty());
    BOOST_CHECK_EQUAL(store_->stats().quarantined, 0u);
    if (!settle)
      return;
    for (const auto& recs : lost)
      forget(recs, true);
    for (const auto& recs : lost_doubtful)
      forget(recs, false);
    acked_ = std::move(kept);
    doubtful_.clear();
    synced_batches_ = acked_.size();
  }

  /// Verifies with only the batches acknowledged after the last
  /// `mark_synced` at risk.
  void verify_synced() { verify(synced_batches_); }

  /// Verifies that nothing acknowledged was lost.
  void verify_all() { verify(acked_.size()); }

private:
  void forget(const batch& recs, bool was_acked) {
    for (const auto& rec : recs)
      gone_.emplace(rec.task.id, was_acked);
  }

  temp_dir dir_;
  std::shared_ptr<fault_fs> fs_;
  store_options opts_;
  std::unique_ptr<rocks_task_store> store_;
  prng rng_;
  std::vector<batch> acked_;
  std::vector<batch> doubtful_;
  /// Ids of lost tasks, and whether they had been acknowledged.
  std::map<task_id, bool> gone_;
  size_t reused_acked_ids_ = 0;
  size_t synced_batches_ = 0;
};

/// Commits `count` batches of 1..`max_size` tasks, requiring success.
void commit_batches(harness& h, size_t count, size_t max_size) {
  for (size_t i = 0; i < count; ++i) {
    auto err = h.commit_new(h.rng().between(1, max_size));
    BOOST_REQUIRE_MESSAGE(!err, "commit failed: " << err);
  }
}

} // namespace

// -- power loss ---------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(power_loss)

BOOST_AUTO_TEST_CASE(fault_fs_drops_exactly_the_unsynced_data) {
  // The model the other cases rely on, checked on the file system alone.
  temp_dir dir;
  fault_fs fs;
  auto path = (dir.path() / "000007.log").string();
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOOptions io;
  BOOST_REQUIRE(fs.NewWritableFile(path, {}, &file, nullptr).ok());
  BOOST_REQUIRE(file->Append("durable", io, nullptr).ok());
  BOOST_REQUIRE(file->Sync(io, nullptr).ok());
  BOOST_REQUIRE(file->Append("-lost", io, nullptr).ok());
  BOOST_REQUIRE(file->RangeSync(0, 12, io, nullptr).ok());
  BOOST_REQUIRE(file->Close(io, nullptr).ok());
  auto never = (dir.path() / "000008.log").string();
  BOOST_REQUIRE(fs.NewWritableFile(never, {}, &file, nullptr).ok());
  BOOST_REQUIRE(file->Append("never synced", io, nullptr).ok());
  BOOST_REQUIRE(file->Close(io, nullptr).ok());
  auto files = fs.tracked_files();
  BOOST_REQUIRE_EQUAL(files.size(), 2u);
  BOOST_CHECK_EQUAL(files[0].written_bytes, 12u);
  BOOST_CHECK_EQUAL(files[0].synced_bytes, 7u);
  // Not strict: the fsync also made the first file's entry durable.
  BOOST_CHECK(files[0].entry_durable);
  BOOST_CHECK(!files[1].entry_durable);
  fs.set_active(false);
  BOOST_CHECK(!file->Append("x", io, nullptr).ok());
  BOOST_CHECK(!fs.NewWritableFile(never, {}, &file, nullptr).ok());
  BOOST_CHECK(!fs.DeleteFile(path, io, nullptr).ok());
  BOOST_REQUIRE(!fs.drop_unsynced_data());
  fs.set_active(true);
  BOOST_CHECK_EQUAL(std::filesystem::file_size(path), 7u);
  BOOST_CHECK(!std::filesystem::exists(never));
  auto stats = fs.stats();
  BOOST_CHECK_EQUAL(stats.files_removed, 1u);
  BOOST_CHECK_EQUAL(stats.files_truncated, 1u);
  BOOST_CHECK_EQUAL(stats.bytes_dropped, 5u + 12u);
  BOOST_CHECK_EQUAL(stats.refused_inactive, 3u);
  BOOST_CHECK(fs.tracked_files().empty());
}

BOOST_AUTO_TEST_CASE(fault_fs_strict_directories_need_a_directory_fsync) {
  temp_dir dir;
  fault_fs fs;
  fs.set_strict_directories(true);
  rocksdb::IOOptions io;
  auto sub = (dir.path() / "sub").string();
  BOOST_REQUIRE(fs.CreateDirIfMissing(sub, io, nullptr).ok());
  BOOST_CHECK_EQUAL(fs.unsynced_dirs().size(), 1u);
  auto synced = sub + "/a.sst";
  std::unique_ptr<rocksdb::FSWritableFile> file;
  BOOST_REQUIRE(fs.NewWritableFile(synced, {}, &file, nullptr).ok());
  BOOST_REQUIRE(file->Append("abc", io, nullptr).ok());
  BOOST_REQUIRE(file->Fsync(io, nullptr).ok());
  BOOST_REQUIRE(file->Close(io, nullptr).ok());
  BOOST_CHECK(!fs.tracked_files()[0].entry_durable);
  std::unique_ptr<rocksdb::FSDirectory> handle;
  BOOST_REQUIRE(fs.NewDirectory(sub, io, &handle, nullptr).ok());
  BOOST_REQUIRE(handle->Fsync(io, nullptr).ok());
  BOOST_CHECK(fs.tracked_files()[0].entry_durable);
  // The directory itself still hangs on an unsynced entry in its parent.
  BOOST_CHECK_EQUAL(fs.unsynced_dirs().size(), 1u);
  BOOST_REQUIRE(!fs.drop_unsynced_data());
  BOOST_CHECK(!std::filesystem::exists(sub));
  BOOST_CHECK_EQUAL(fs.stats().dirs_removed, 1u);
  BOOST_CHECK_EQUAL(fs.stats().dir_syncs, 1u);
  // A rename persists itself and every namespace change before it.
  auto manifest = (dir.path() / "MANIFEST-000002").string();
  BOOST_REQUIRE(fs.NewWritableFile(manifest, {}, &file, nullptr).ok());
  BOOST_REQUIRE(file->Append("edits", io, nullptr).ok());
  BOOST_REQUIRE(file->Fsync(io, nullptr).ok());
  BOOST_REQUIRE(file->Close(io, nullptr).ok());
  auto tmp = (dir.path() / "000002.dbtmp").string();
  BOOST_REQUIRE(fs.NewWritableFile(tmp, {}, &file, nullptr).ok());
  BOOST_REQUIRE(file->Append("MANIFEST-000002\n", io, nullptr).ok());
  BOOST_REQUIRE(file->Fsync(io, nullptr).ok());
  BOOST_REQUIRE(file->Close(io, nullptr).ok());
  for (const auto& f : fs.tracked_files())
    BOOST_CHECK(!f.entry_durable);
  auto current = (dir.path() / "CURRENT").string();
  BOOST_REQUIRE(fs.RenameFile(tmp, current, io, nullptr).ok());
  auto files = fs.tracked_files();
  BOOST_REQUIRE_EQUAL(files.size(), 2u);
  for (const auto& f : files)
    BOOST_CHECK(f.entry_durable);
  BOOST_REQUIRE(!fs.drop_unsynced_data());
  BOOST_CHECK_EQUAL(std::filesystem::file_size(manifest), 5u);
  BOOST_CHECK_EQUAL(std::filesystem::file_size(current), 16u);
}

BOOST_AUTO_TEST_CASE(fault_fs_injects_counted_and_seeded_failures) {
  temp_dir dir;
  fault_fs fs;
  rocksdb::IOOptions io;
  std::unique_ptr<rocksdb::FSWritableFile> wal;
  std::unique_ptr<rocksdb::FSWritableFile> sst;
  BOOST_REQUIRE(
    fs.NewWritableFile((dir.path() / "1.log").string(), {}, &wal, nullptr)
      .ok());
  BOOST_REQUIRE(
    fs.NewWritableFile((dir.path() / "2.sst").string(), {}, &sst, nullptr)
      .ok());
  fs.fail_writes(2, {fault_code::no_space, file_kind::wal, true});
  BOOST_CHECK(sst->Append("fine", io, nullptr).ok());
  auto st = wal->Append("torn write", io, nullptr);
  BOOST_CHECK(st.IsNoSpace());
  BOOST_CHECK(wal->Append("again", io, nullptr).IsNoSpace());
  BOOST_CHECK(wal->Append("ok", io, nullptr).ok());
  fs.fail_syncs(1, {fault_code::io_error, file_kind::any, false});
  st = sst->Sync(io, nullptr);
  BOOST_CHECK(st.IsIOError() && !st.IsNoSpace());
  // The failed sync lost the bytes for good, even if a later one succeeds.
  BOOST_CHECK(sst->Sync(io, nullptr).ok());
  for (const auto& f : fs.tracked_files())
    if (f.path.ends_with("2.sst"))
      BOOST_CHECK_EQUAL(f.synced_bytes, 0u);
    else
      BOOST_CHECK_EQUAL(f.written_bytes, 5u + 2u + 2u); // torn halves + ok
  auto draws = [&](uint64_t seed) {
    fs.fail_randomly(seed, 250'000, 0,
                     {fault_code::io_error, file_kind::any, false});
    std::string pattern;
    for (int i = 0; i < 64; ++i)
      pattern += sst->Append("x", io, nullptr).ok() ? '.' : 'x';
    fs.clear_faults();
    return pattern;
  };
  auto first = draws(7);
  auto again = draws(7);
  auto other = draws(8);
  BOOST_CHECK_EQUAL(first, again);
  BOOST_CHECK_NE(first, other);
  auto failed = [](const std::string& pattern) {
    return static_cast<uint64_t>(
      std::count(pattern.begin(), pattern.end(), 'x'));
  };
  BOOST_CHECK(failed(first) > 4 && failed(first) < 40);
  // die_after: two more operations, then the process is gone.
  fs.die_after(2);
  BOOST_CHECK(sst->Append("a", io, nullptr).ok());
  BOOST_CHECK(sst->Sync(io, nullptr).ok());
  BOOST_CHECK(!sst->Append("b", io, nullptr).ok());
  BOOST_CHECK(!fs.active());
  fs.set_active(true);
  BOOST_CHECK_EQUAL(fs.stats().injected_write_failures,
                    2u + failed(first) + failed(again) + failed(other));
  BOOST_CHECK_EQUAL(fs.stats().injected_sync_failures, 1u);
  BOOST_CHECK(wal->Close(io, nullptr).ok());
  BOOST_CHECK(sst->Close(io, nullptr).ok());
}

BOOST_AUTO_TEST_CASE(sync_mode_loses_no_acknowledged_write) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      harness h(durability::sync, seed);
      h.open();
      for (int round = 0; round < 6; ++round) {
        BOOST_TEST_CONTEXT("round " << round) {
          switch (h.rng().below(3)) {
            case 0: // between commits
              commit_batches(h, h.rng().between(1, 40), 16);
              break;
            case 1: // a stream of tiny batches
              commit_batches(h, h.rng().between(50, 150), 1);
              break;
            default: { // in the middle of a commit or a flush
              h.fs().die_after(h.rng().between(0, 300));
              for (int i = 0; i < 1000; ++i)
                if (h.commit_new(h.rng().between(1, 16)))
                  break;
              break;
            }
          }
          h.power_loss();
          h.open();
          h.verify_all();
        }
      }
      BOOST_CHECK_EQUAL(h.reused_acked_ids(), 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(sync_mode_fsyncs_only_urgent_batches) {
  // A batch nobody waits for reaches the WAL (a process crash keeps it)
  // and is fsync'd by the next urgent batch or by sync_if_due.
  harness h(durability::sync, 21);
  // The first batch after an open that is not fsync'd and takes new ids
  // fsyncs an id reservation instead, so that a power loss can never hand
  // its ids out again.
  auto reserve = [&h] {
    auto before = h.store().stats().syncs;
    BOOST_REQUIRE(!h.commit_new(1, false));
    BOOST_TEST(h.store().stats().syncs == before + 1);
    BOOST_TEST(!h.store().sync_pending());
    h.mark_synced();
  };
  h.open();
  reserve();
  commit_batches(h, 3, 16);
  BOOST_TEST(!h.store().sync_pending());
  auto before = h.store().stats().syncs;
  BOOST_REQUIRE(!h.commit_new(4, false));
  BOOST_TEST(h.store().stats().syncs == before);
  BOOST_TEST(h.store().sync_pending());
  // A process crash loses nothing.
  h.kill();
  h.open();
  h.verify_all();
  reserve();
  // Not urgent, then urgent: the urgent batch's fsync covers both.
  BOOST_REQUIRE(!h.commit_new(4, false));
  BOOST_TEST(h.store().sync_pending());
  BOOST_REQUIRE(!h.commit_new(4, true));
  BOOST_TEST(!h.store().sync_pending());
  h.power_loss();
  h.open();
  h.verify_all();
  reserve();
  // Not urgent, then power loss: what was fsync'd before is intact, the
  // rest may be lost.
  BOOST_REQUIRE(!h.commit_new(4, false));
  BOOST_REQUIRE(!h.commit_new(4, false));
  BOOST_TEST(h.store().sync_pending());
  h.power_loss();
  h.open();
  h.verify_synced();
  reserve();
  // sync_if_due fsyncs a waiting batch once its period has passed.
  BOOST_REQUIRE(!h.commit_new(4, false));
  BOOST_TEST(h.store().sync_pending());
  before = h.store().stats().syncs;
  BOOST_REQUIRE(!h.store().sync_if_due(t0_ms));
  BOOST_TEST(h.store().stats().syncs == before + 1);
  BOOST_TEST(!h.store().sync_pending());
  BOOST_REQUIRE(!h.commit_new(4, false));
  BOOST_REQUIRE(!h.store().sync_if_due(t0_ms + 10));
  BOOST_TEST(h.store().sync_pending()); // within the period
  BOOST_REQUIRE(!h.store().sync_if_due(t0_ms + 100));
  BOOST_TEST(!h.store().sync_pending());
  h.mark_synced();
  h.power_loss();
  h.open();
  h.verify_all();
  BOOST_CHECK_EQUAL(h.reused_acked_ids(), 0u);
}

BOOST_AUTO_TEST_CASE(other_levels_never_report_a_pending_sync) {
  for (auto level : {durability::periodic, durability::none}) {
    harness h(level, 22);
    h.open();
    BOOST_REQUIRE(!h.commit_new(4, false));
    BOOST_REQUIRE(!h.commit_new(4, true));
    BOOST_TEST(!h.store().sync_pending());
  }
}

BOOST_AUTO_TEST_CASE(sync_mode_new_store_survives_power_loss) {
  // The store creates its own directory; file fsyncs make it durable.
  harness h(durability::sync, 12, false);
  h.open();
  commit_batches(h, 3, 16);
  h.power_loss();
  h.open();
  h.verify_all();
  commit_batches(h, 3, 16);
  h.power_loss();
  h.open();
  h.verify_all();
}

BOOST_AUTO_TEST_CASE(power_loss_while_creating_the_store) {
  // How many writes and syncs creating a store takes, then a power cut at
  // points spread over them: the next open must give a working store.
  uint64_t ops = 0;
  {
    harness h(durability::sync, 13);
    h.open();
    auto st = h.fs().stats();
    ops = st.writes + st.syncs + st.dir_syncs;
  }
  BOOST_REQUIRE_GT(ops, 0u);
  for (uint64_t at = 0; at < ops; at += std::max<uint64_t>(1, ops / 10)) {
    BOOST_TEST_CONTEXT("power cut after " << at << " of " << ops) {
      harness h(durability::sync, 14 + at);
      h.fs().die_after(at);
      // Fails if the power goes before the store is open; both are fine.
      h.try_open();
      h.power_loss();
      h.open();
      h.verify_all();
      commit_batches(h, 3, 16);
      h.power_loss();
      h.open();
      h.verify_all();
    }
  }
}

BOOST_AUTO_TEST_CASE(sync_mode_survives_a_crash_during_recovery) {
  harness h(durability::sync, 11);
  h.open();
  commit_batches(h, 30, 16);
  h.power_loss();
  // Power fails again while the store opens (WAL replay, flush of what it
  // replayed, new MANIFEST and WAL), at points spread over the recovery,
  // and right after it for the later ones.
  for (uint64_t ops = 0; ops < 48; ops += 4) {
    h.fs().die_after(ops);
    // Fails if the power goes before the store is open; both are fine.
    h.try_open();
    h.power_loss();
  }
  h.open();
  h.verify_all();
  commit_batches(h, 5, 16);
  h.power_loss();
  h.open();
  h.verify_all();
}

BOOST_AUTO_TEST_CASE(periodic_mode_loses_at_most_the_unsynced_window) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      harness h(durability::periodic, seed);
      h.open();
      int64_t now = t0_ms;
      for (int round = 0; round < 5; ++round) {
        BOOST_TEST_CONTEXT("round " << round) {
          std::optional<int64_t> last_sync_ms;
          auto batches = h.rng().between(5, 60);
          for (uint64_t i = 0; i < batches; ++i) {
            auto err = h.commit_new(h.rng().between(1, 16));
            BOOST_REQUIRE_MESSAGE(!err, "commit failed: " << err);
            now += static_cast<int64_t>(h.rng().below(40));
            auto before = h.store().stats().syncs;
            err = h.store().sync_if_due(now);
            BOOST_REQUIRE_MESSAGE(!err, "sync_if_due failed: " << err);
            if (h.store().stats().syncs > before) {
              h.mark_synced();
              last_sync_ms = now;
            } else if (last_sync_ms) {
              BOOST_CHECK_MESSAGE(now - *last_sync_ms < 100,
                                  "no sync " << now - *last_sync_ms
                                             << " ms after the last");
            }
          }
          if (round % 2 == 1) {
            // A process crash loses nothing, synced or not.
            h.kill();
            h.open();
            h.verify_all();
          } else {
            h.power_loss();
            h.open();
            h.verify_synced();
          }
        }
      }
      // The id reservation is fsync'd: lost commits never free their ids.
      BOOST_CHECK_EQUAL(h.reused_acked_ids(), 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(periodic_mode_explicit_sync_is_durable) {
  harness h(durability::periodic, 5);
  h.open();
  commit_batches(h, 20, 16);
  BOOST_REQUIRE(!h.store().sync());
  h.mark_synced();
  commit_batches(h, 20, 16);
  h.power_loss();
  h.open();
  h.verify_synced();
}

BOOST_AUTO_TEST_CASE(none_mode_reopens_cleanly) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      harness h(durability::none, seed);
      h.open();
      for (int round = 0; round < 4; ++round) {
        BOOST_TEST_CONTEXT("round " << round) {
          commit_batches(h, h.rng().between(1, 80), 16);
          if (round == 3) {
            h.kill();
            h.open();
            h.verify_all();
          } else {
            h.power_loss();
            h.open();
            h.verify(0);
          }
        }
      }
      // Still usable after all that.
      commit_batches(h, 3, 4);
      BOOST_REQUIRE(!h.store().sync());
      h.mark_synced();
      h.power_loss();
      h.open();
      h.verify_synced();
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// -- I/O errors ---------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(io_errors)

namespace {

struct fault_case {
  const char* name;
  bool on_sync;
  fault_spec spec;
  errc expected;
};

const fault_case fault_cases[] = {
  {"write EIO",
   false,
   {fault_code::io_error, file_kind::wal, false},
   errc::io_error},
  {"torn write EIO",
   false,
   {fault_code::io_error, file_kind::wal, true},
   errc::io_error},
  {"write ENOSPC",
   false,
   {fault_code::no_space, file_kind::wal, false},
   errc::no_space},
  {"torn write ENOSPC",
   false,
   {fault_code::no_space, file_kind::wal, true},
   errc::no_space},
  {"sync EIO",
   true,
   {fault_code::io_error, file_kind::wal, false},
   errc::io_error},
  {"sync ENOSPC",
   true,
   {fault_code::no_space, file_kind::wal, false},
   errc::no_space},
};

/// Injects `fc` into the next commit and checks the error, the batch
/// (all or nothing, in process), the earlier batches, and what the store
/// does next.
void fail_one_commit(harness& h, const fault_case& fc) {
  if (fc.on_sync)
    h.fs().fail_syncs(1, fc.spec);
  else
    h.fs().fail_writes(1, fc.spec);
  auto err = h.commit_new(12);
  BOOST_REQUIRE_MESSAGE(err, "the commit did not fail");
  BOOST_CHECK_MESSAGE(err.code() == fc.expected,
                      "expected " << to_string(fc.expected) << ", got "
                                  << describe(err));
  BOOST_CHECK(!err.message().empty());
  // The store says so, for an owner that must reopen it (a shard does).
  BOOST_CHECK(h.store().write_failure().code() == errc::store_unavailable);
  // The fault is spent: the store works again, or says clearly it cannot.
  for (int i = 0; i < 3; ++i) {
    auto next = h.commit_new(2);
    BOOST_CHECK_MESSAGE(!next || next.code() == errc::store_unavailable,
                        "after the fault: " << describe(next));
    BOOST_TEST_MESSAGE(fc.name << ", then: "
                               << (next ? describe(next) : "committed"));
    if (!next)
      break;
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(failed_commit_is_all_or_nothing_after_reopen) {
  uint64_t seed = 100;
  for (const auto& fc : fault_cases) {
    BOOST_TEST_CONTEXT(fc.name) {
      harness h(durability::sync, ++seed);
      h.open();
      commit_batches(h, 10, 16);
      fail_one_commit(h, fc);
      // Reads still work and see the failed batch entirely or not at all.
      h.verify(std::numeric_limits<size_t>::max(), false);
      h.close();
      h.open();
      BOOST_CHECK(!h.store().write_failure());
      h.verify_all();
      commit_batches(h, 5, 16);
      h.close();
      h.open();
      h.verify_all();
    }
  }
}

BOOST_AUTO_TEST_CASE(failed_commit_then_power_loss) {
  uint64_t seed = 200;
  for (const auto& fc : fault_cases) {
    BOOST_TEST_CONTEXT(fc.name) {
      harness h(durability::sync, ++seed);
      h.open();
      commit_batches(h, 10, 16);
      fail_one_commit(h, fc);
      h.power_loss();
      h.open();
      h.verify_all();
      commit_batches(h, 5, 16);
      h.power_loss();
      h.open();
      h.verify_all();
    }
  }
}

BOOST_AUTO_TEST_CASE(full_disk_recovers_without_reopen) {
  // RocksDB retries by itself after ENOSPC; once space is back, the store
  // accepts commits again without being reopened.
  for (bool on_sync : {false, true}) {
    BOOST_TEST_CONTEXT((on_sync ? "sync" : "write") << " ENOSPC") {
      harness h(durability::sync, on_sync ? 401 : 402);
      h.open();
      commit_batches(h, 10, 16);
      fault_spec spec{fault_code::no_space, file_kind::wal, !on_sync};
      if (on_sync)
        h.fs().fail_syncs(1, spec);
      else
        h.fs().fail_writes(1, spec);
      auto err = h.commit_new(12);
      BOOST_CHECK_MESSAGE(err.code() == errc::no_space, describe(err));
      auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds{10};
      auto next = h.commit_new(2);
      while (next.code() == errc::store_unavailable &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
        next = h.commit_new(2);
      }
      BOOST_CHECK_MESSAGE(!next, "still failing: " << describe(next));
      commit_batches(h, 5, 16);
      h.power_loss();
      h.open();
      h.verify_all();
    }
  }
}

BOOST_AUTO_TEST_CASE(random_faults_never_lose_acknowledged_writes) {
  // Seeded faults on every kind of file, WAL, SSTs and MANIFEST alike,
  // including background flushes; after each failure the process dies or
  // the machine loses power, and the store is reopened (retrying while
  // faults keep it from opening).
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      harness h(durability::sync, 300 + seed);
      auto code = seed == 2 ? fault_code::no_space : fault_code::io_error;
      h.fs().fail_randomly(seed, 15'000, 15'000,
                           {code, file_kind::any, seed == 3});
      int failures = 0;
      for (int attempt = 0; !h.is_open(); ++attempt) {
        BOOST_REQUIRE(attempt < 50);
        if (h.try_open())
          h.power_loss();
      }
      for (int i = 0; i < 200; ++i) {
        if (!h.commit_new(h.rng().between(1, 16)))
          continue;
        ++failures;
        if (h.rng().below(2) == 0)
          h.kill();
        else
          h.power_loss();
        for (int attempt = 0; !h.is_open(); ++attempt) {
          BOOST_REQUIRE(attempt < 50);
          if (h.try_open())
            h.power_loss();
        }
        h.verify_all();
      }
      BOOST_TEST_MESSAGE(
        "seed " << seed << ": " << failures << " failed commits, "
                << h.fs().stats().injected_write_failures << " write and "
                << h.fs().stats().injected_sync_failures << " sync faults");
      BOOST_CHECK_GT(failures, 0);
      h.fs().clear_faults();
      h.power_loss();
      h.open();
      h.verify_all();
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// -- damaged records ----------------------------------------------------------

BOOST_AUTO_TEST_SUITE(damaged_records)

BOOST_AUTO_TEST_CASE(damaged_records_survive_power_loss_and_stay_counted) {
  // What the simulator's "corrupt record" fault does: a record rewritten
  // with bytes that pass RocksDB's checksums but do not decode, synced, so
  // a power loss keeps it. The store moves each aside when it meets it and
  // counts them across reopens; the other records are untouched.
  temp_dir dir;
  auto fs = std::make_shared<fault_fs>();
  store_options opts;
  opts.path = (dir.path() / "shard").string();
  opts.file_system = fs;
  prng rng{7};
  std::vector<task_record> recs;
  {
    auto store = rocks_task_store::open(opts);
    BOOST_REQUIRE_MESSAGE(store.has_value(), error_of(store));
    write_batch wb;
    for (int i = 0; i < 5; ++i) {
      recs.push_back(make_record((*store)->allocate_id(), rng));
      wb.put(recs.back());
    }
    BOOST_REQUIRE(!(*store)->commit(wb));
  }
  const record_damage kinds[] = {record_damage::garbage,
                                 record_damage::invalid_field,
                                 record_damage::wrong_id};
  for (size_t i = 0; i < 3; ++i) {
    auto err = damage_task_record(opts, recs[i].task.id, kinds[i]);
    BOOST_REQUIRE_MESSAGE(!err, describe(err));
  }
  auto unknown =
    damage_task_record(opts, recs.back().task.id + 100, record_damage::garbage);
  BOOST_TEST(unknown.code() == errc::not_found);
  fs->set_active(false);
  BOOST_REQUIRE(!fs->drop_unsynced_data());
  fs->set_active(true);
  {
    auto store = rocks_task_store::open(opts);
    BOOST_REQUIRE_MESSAGE(store.has_value(), error_of(store));
    for (size_t i = 0; i < 3; ++i) {
      auto got = (*store)->get(recs[i].task.id);
      BOOST_REQUIRE_MESSAGE(!got.has_value(),
                            "damage " << i << " went unnoticed");
      BOOST_TEST(got.err().code() == errc::corrupt_record);
    }
    for (size_t i = 3; i < recs.size(); ++i) {
      auto got = (*store)->get(recs[i].task.id);
      BOOST_REQUIRE(got.has_value() && got->has_value());
      BOOST_TEST(same_content(**got, recs[i]));
    }
    BOOST_TEST((*store)->stats().quarantined == 3u);
  }
  auto store = rocks_task_store::open(opts);
  BOOST_REQUIRE_MESSAGE(store.has_value(), error_of(store));
  BOOST_TEST((*store)->quarantined().empty());
  BOOST_TEST((*store)->stats().quarantined == 3u);
  auto gone = (*store)->get(recs[0].task.id);
  BOOST_REQUIRE(gone.has_value());
  BOOST_TEST(!gone->has_value());
}

BOOST_AUTO_TEST_SUITE_END()
