#define BOOST_TEST_MODULE rocks_task_store
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>

#include "core/recurrence.hpp"
#include "core/time_range.hpp"
#include "storage/fault_fs.hpp"
#include "storage/record_codec.hpp"
#include "storage/rocks_task_store.hpp"
#include "test_support.hpp"

using namespace dally;
using namespace dally::storage;
using core::errc;

namespace dally::storage {

std::ostream& boost_test_print_type(std::ostream& out, const due_key& key) {
  return out << '(' << key.index_ms << ", " << key.id << ')';
}

} // namespace dally::storage

using dally::storage::test::temp_dir;

namespace {

constexpr int64_t t0 = 1'704'067'200'000; // 2024-01-01T00:00:00Z

store_options options_for(const temp_dir& dir, uint32_t shard = 0,
                          uint32_t shard_count = 1,
                          durability level = durability::sync) {
  store_options opts;
  opts.path = dir.path().string();
  opts.shard = shard;
  opts.shard_count = shard_count;
  opts.durability = level;
  opts.write_buffer_bytes = 1 << 20;
  opts.block_cache_bytes = 1 << 20;
  return opts;
}

std::unique_ptr<rocks_task_store> open_ok(const store_options& opts) {
  auto store = rocks_task_store::open(opts);
  if (!store)
    BOOST_FAIL("open failed: " << store.err());
  return std::move(store).value();
}

template<class T>
T ok(core::result<T> x) {
  if (!x)
    BOOST_FAIL("unexpected error: " << x.err());
  return std::move(x).value();
}

void commit_ok(task_store& store, const write_batch& batch) {
  if (auto err = store.commit(batch))
    BOOST_FAIL("commit failed: " << err);
}

void check_error(const core::error& err, errc code,
                 const std::vector<std::string>& fragments) {
  BOOST_TEST(to_string(err.code()) == to_string(code), err);
  for (const auto& fragment : fragments)
    BOOST_TEST(err.message().find(fragment) != std::string::npos,
               "message '" << err.message() << "' lacks '" << fragment << "'");
}

task_record make_task(core::task_id id, int64_t due_ms,
                      std::string topic = "jobs") {
  task_record rec;
  rec.task.id = id;
  rec.task.topic = std::move(topic);
  rec.task.payload = "payload of " + std::to_string(id);
  rec.task.due_ms = due_ms;
  rec.task.recurrence = ok(core::recurrence::at(
    std::clamp<int64_t>(due_ms, core::min_time_ms, core::max_time_ms)));
  return rec;
}

/// `rec` with the stamp the store gave `stored`, to compare the rest.
task_record with_stamp(task_record rec, const task_record& stored) {
  rec.stamp = stored.stamp;
  return rec;
}

std::vector<due_key> scan_all(task_store& store) {
  return ok(store.scan_due({std::numeric_limits<int64_t>::min(), 0},
                           std::numeric_limits<int64_t>::max(), 1000));
}

/// Opens the store's directory with plain RocksDB (the store closed), to
/// plant bytes no store would write.
void with_raw_db(
  const temp_dir& dir,
  const std::function<void(
    rocksdb::DB&, std::map<std::string, rocksdb::ColumnFamilyHandle*>&)>& fn) {
  rocksdb::Options options;
  std::vector<std::string> names;
  BOOST_REQUIRE(
    rocksdb::DB::ListColumnFamilies(options, dir.path().string(), &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const auto& name : names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  auto status = rocksdb::DB::Open(options, dir.path().string(), descriptors,
                                  &handles, &raw);
  BOOST_REQUIRE_MESSAGE(status.ok(), status.ToString());
  std::unique_ptr<rocksdb::DB> db{raw};
  std::map<std::string, rocksdb::ColumnFamilyHandle*> cfs;
  for (auto* handle : handles)
    cfs[handle->GetName()] = handle;
  fn(*db, cfs);
  for (auto* handle : handles)
    BOOST_REQUIRE(db->DestroyColumnFamilyHandle(handle).ok());
  BOOST_REQUIRE(db->Close().ok());
}

/// Waits for `pid` at most `timeout`, killing it if it hangs; returns its
/// exit code or -1.
int wait_bounded(pid_t pid, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

BOOST_AUTO_TEST_SUITE(rocks_task_store_tests)

// -- writes and reads
// -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(put_get_replace_erase) {
  temp_dir dir;
  auto store = open_ok(options_for(dir));
  auto a = make_task(store->allocate_id(), t0 + 100);
  auto b = make_task(store->allocate_id(), t0 + 50, "other");
  b.task.idempotency_key = "key-b";
  write_batch batch;
  batch.put(a);
  batch.put(b);
  commit_ok(*store, batch);
  auto got_a = ok(store->get(a.task.id));
  BOOST_REQUIRE(got_a);
  BOOST_TEST((*got_a == with_stamp(a, *got_a)));
  BOOST_TEST(got_a->stamp.seq == 1u);
  auto got_b = ok(store->get(b.task.id));
  BOOST_REQUIRE(got_b);
  BOOST_TEST((*got_b == with_stamp(b, *got_b)));
  BOOST_TEST(got_b->stamp.seq == 2u);
  BOOST_TEST(!ok(store->get(12345)));
  auto due = scan_all(*store);
  BOOST_REQUIRE(due.size() == 2u);
  BOOST_TEST(due[0].id == b.task.id);
  BOOST_TEST(due[1].id == a.task.id);
  // Replace: a is delivered and now in flight; its index entry stays at
  // the due time (the shard tracks leases in memory).
  auto a2 = *got_a;
  a2.state = task_state::in_flight;
  a2.lease_deadline_ms = t0 + 30'100;
  a2.task.attempt = 1;
  batch.clear();
  batch.replace(*got_a, a2);
  commit_ok(*store, batch);
  auto got_a2 = ok(store->get(a.task.id));
  BOOST_REQUIRE(got_a2);
  BOOST_TEST((*got_a2 == with_stamp(a2, *got_a2)));
  BOOST_TEST(got_a2->stamp.seq == 3u);
  due = scan_all(*store);
  BOOST_REQUIRE(due.size() == 2u);
  BOOST_TEST((due[1] == due_key{t0 + 100, a.task.id}));
  // A nack puts it back with a retry time: the entry moves there.
  auto a3 = *got_a2;
  a3.state = task_state::pending;
  a3.lease_deadline_ms = 0;
  a3.retry_at_ms = t0 + 40'000;
  batch.clear();
  batch.replace(*got_a2, a3);
  commit_ok(*store, batch);
  got_a2 = ok(store->get(a.task.id));
  BOOST_REQUIRE(got_a2);
  due = scan_all(*store);
  BOOST_REQUIRE(due.size() == 2u);
  BOOST_TEST((due[1] == due_key{t0 + 40'000, a.task.id}));
  // Erase b.
  batch.clear();
  batch.erase(*got_b);
  commit_ok(*store, batch);
  BOOST_TEST(!ok(store->get(b.task.id)));
  due = scan_all(*store);
  BOOST_REQUIRE(due.size() == 1u);
  BOOST_TEST(due[0].id == a.task.id);
  auto many = ok(store->get_many(
    std::vector<core::task_id>{b.task.id, a.task.id, 999, a.task.id}));
  BOOST_REQUIRE(many.size() == 2u);
  BOOST_TEST((many[0] == *got_a2));
  BOOST_TEST((many[1] == *got_a2));
}

BOOST_AUTO_TEST_CASE(either_memtable_reads_what_the_other_wrote) {
  // The tasks' memtable (B-tree or RocksDB's skip list) is not part of
  // the files: a store reopened with the other one (the WAL replayed
  // into it, as a close does not flush) has every task.
  temp_dir dir;
  auto opts = options_for(dir);
  std::map<core::task_id, task_record> live;
  auto churn = [&](task_store& store, int round) {
    write_batch batch;
    for (int i = 0; i < 300; ++i) {
      auto rec = make_task(store.allocate_id(), t0 + (i * 7919) % 1000);
      batch.put(rec);
      live[rec.task.id] = rec;
    }
    commit_ok(store, batch);
    // Erase every third, in an order unlike the ids', as acks do.
    batch.clear();
    std::vector<core::task_id> ids;
    for (const auto& [id, rec] : live)
      if ((id + static_cast<core::task_id>(round)) % 3 == 0)
        ids.push_back(id);
    std::reverse(ids.begin(), ids.end());
    for (auto id : ids) {
      auto got = ok(store.get(id));
      BOOST_REQUIRE(got);
      batch.erase(*got);
      live.erase(id);
    }
    commit_ok(store, batch);
  };
  auto check = [&](task_store& store) {
    BOOST_TEST(scan_all(store).size() == live.size());
    for (const auto& [id, rec] : live) {
      auto got = ok(store.get(id));
      BOOST_REQUIRE_MESSAGE(got, "task " << id << " is missing");
      BOOST_TEST((*got == with_stamp(rec, *got)));
    }
  };
  for (int round = 0; round < 4; ++round) {
    opts.btree_task_memtable = round % 2 == 0;
    BOOST_TEST_CONTEXT("round " << round << ", btree "
                                << opts.btree_task_memtable) {
      auto store = open_ok(opts);
      check(*store);
      churn(*store, round);
      check(*store);
    }
  }
}

BOOST_AUTO_TEST_CASE(bury_revive_and_drop_dead) {
  temp_dir dir;
  auto store = open_ok(options_for(dir));
  std::vector<task_record> tasks;
  write_batch batch;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back(make_task(store->allocate_id(), t0 + i));
    batch.put(tasks.back());
  }
  commit_ok(*store, batch);
  for (auto& rec : tasks)
    rec = *ok(store->get(rec.task.id));
  batch.clear();
  batch.bury(tasks[0], t0 + 500, "max attempts (10) reached");
  batch.bury(tasks[2], t0 + 501, "poison");
  commit_ok(*store, batch);
  BOOST_TEST(!ok(store->get(tasks[0].task.id)));
  BOOST_TEST(scan_all(*store).size() == 1u);
  auto dead = ok(store->get_dead(tasks[0].task.id));
  BOOST_REQUIRE(dead);
  BOOST_TEST(dead->reason == "max attempts (10) reached");
  BOOST_TEST(dead->dead_ms == t0 + 500);
  BOOST_TEST((dead->record == with_stamp(tasks[0], dead->record)));
  BOOST_TEST(!ok(store->get_dead(tasks[1].task.id)));
  auto letters = ok(store->dead_letters(0, 10));
  BOOST_REQUIRE(letters.size() == 2u);
  BOOST_TEST(letters[0].record.task.id == tasks[0].task.id);
  BOOST_TEST(letters[1].record.task.id == tasks[2].task.id);
  letters = ok(store->dead_letters(tasks[0].task.id, 10));
  BOOST_REQUIRE(letters.size() == 1u);
  BOOST_TEST(letters[0].record.task.id == tasks[2].task.id);
  BOOST_TEST(ok(store->dead_letters(0, 1)).size() == 1u);
  // Kick tasks[0] back with a fresh attempt count and due time.
  auto kicked = dead->record;
  kicked.task.attempt = 0;
  kicked.task.due_ms = t0 + 9'000;
  batch.clear();
  batch.revive(tasks[0].task.id, kicked);
  batch.drop_dead(tasks[2].task.id);
  commit_ok(*store, batch);
  BOOST_TEST(ok(store->dead_letters(0, 10)).empty());
  auto back = ok(store->get(tasks[0].task.id));
  BOOST_REQUIRE(back);
  BOOST_TEST(back->task.due_ms == t0 + 9'000);
  auto due = scan_all(*store);
  BOOST_REQUIRE(due.size() == 2u);
  BOOST_TEST((due[1] == due_key{t0 + 9'000, tasks[0].task.id}));
}

BOOST_AUTO_TEST_CASE(idempotency_keys_and_expiry) {
  temp_dir dir;
  auto store = open_ok(options_for(dir));
  write_batch batch;
  for (int i = 0; i < 7; ++i) {
    // Keys 0-4 expire at t0 + i, keys 5 and 6 much later.
    auto expires = i < 5 ? t0 + i : t0 + 1'000'000;
    batch.put_key("key-" + std::to_string(i),
                  idempotency_entry{uint64_t(100 + i), expires, uint64_t(i)});
  }
  commit_ok(*store, batch);
  auto entry = ok(store->find_key("key-3", t0 + 3));
  BOOST_REQUIRE(entry);
  BOOST_TEST((*entry == idempotency_entry{103, t0 + 3, 3}));
  BOOST_TEST(!ok(store->find_key("key-3", t0 + 4)));
  BOOST_TEST(!ok(store->find_key("nope", t0)));
  // Nothing expired yet at t0 - 1.
  BOOST_TEST(ok(store->expire_keys(t0 - 1, 10)) == 0u);
  BOOST_TEST(ok(store->expire_keys(t0 + 10, 2)) == 2u);
  BOOST_TEST(ok(store->expire_keys(t0 + 10, 2)) == 2u);
  BOOST_TEST(ok(store->expire_keys(t0 + 10, 2)) == 1u);
  BOOST_TEST(ok(store->expire_keys(t0 + 10, 2)) == 0u);
  BOOST_TEST(ok(store->expire_keys(t0 + 10, 0)) == 0u);
  for (int i = 0; i < 5; ++i)
    BOOST_TEST(!ok(store->find_key("key-" + std::to_string(i), t0 - 100)));
  BOOST_TEST(ok(store->find_key("key-5", t0 + 10)).has_value());
  batch.clear();
  batch.erase_key("key-5");
  commit_ok(*store, batch);
  BOOST_TEST(!ok(store->find_key("key-5", t0)));
  BOOST_TEST(ok(store->find_key("key-6", t0)).has_value());
}

BOOST_AUTO_TEST_CASE(expiring_keys_examines_a_bounded_number_per_call) {
  temp_dir dir;
  auto store = open_ok(options_for(dir));
  // 1,000 live keys ("a-...") sort before 10 expired ones ("z-...").
  write_batch batch;
  for (int i = 0; i < 1'000; ++i)
    batch.put_key("a-" + std::to_string(1'000 + i),
                  idempotency_entry{uint64_t(i + 1), t0 + 1'000'000, 0});
  for (int i = 0; i < 10; ++i)
    batch.put_key("z-" + std::to_string(i),
                  idempotency_entry{uint64_t(5'000 + i), t0, 0});
  commit_ok(*store, batch);
  // A call with limit 4 examines at most 64 keys: the first ones find
  // nothing to expire, and the cursor walks on until the expired keys go,
  // at most 4 per call, without any call scanning everything.
  std::vector<size_t> per_call;
  size_t total = 0;
  for (int call = 0; call < 40 && total < 10; ++call) {
    auto n = ok(store->expire_keys(t0 + 10, 4));
    BOOST_TEST(n <= 4u);
    per_call.push_back(n);
    total += n;
  }
  BOOST_TEST(total == 10u);
  BOOST_REQUIRE(!per_call.empty());
  BOOST_TEST(per_call.front() == 0u);
  BOOST_TEST(per_call.size() >= 1'000u / 64u);
  for (int i = 0; i < 10; ++i)
    BOOST_TEST(!ok(store->find_key("z-" + std::to_string(i), t0 - 1)));
  BOOST_TEST(ok(store->find_key("a-1000", t0 + 10)).has_value());
  // Round and round: nothing else expires, and calls stay cheap.
  for (int call = 0; call < 40; ++call)
    BOOST_TEST(ok(store->expire_keys(t0 + 10, 4)) == 0u);
}

BOOST_AUTO_TEST_CASE(batches_are_atomic_and_stamped) {
  temp_dir dir;
  auto store = open_ok(options_for(dir));
  auto before = store->stats();
  commit_ok(*store, write_batch{});
  BOOST_TEST(store->stats().commits == before.commits);
  BOOST_TEST(store->meta().last_seq == 0u);
  write_batch batch;
  for (int i = 0; i < 300; ++i) {
    auto rec = make_task(store->allocate_id(), t0 + i % 7);
    batch.put(rec);
    batch.put_key("k" + std::to_string(i),
                  idempotency_entry{rec.task.id, t0 + 60'000, 0});
  }
  // A bad record in the middle refuses the whole batch.
  auto bad = make_task(store->allocate_id(), t0, "bad\xff topic");
  auto good = batch;
  batch.put(bad);
  batch.put(make_task(store->allocate_id(), t0));
  check_error(store->commit(batch), errc::invalid_topic, {"not valid UTF-8"});
  BOOST_TEST(scan_all(*store).empty());
  BOOST_TEST(!ok(store->find_key("k0", t0)));
  BOOST_TEST(store->meta().last_seq == 0u);
  BOOST_TEST(store->stats().commits == before.commits);
  // The good part commits in one write.
  commit_ok(*store, good);
  auto due = scan_all(*store);
  BOOST_TEST(due.size() == 300u);
  BOOST_TEST(ok(store->find_key("k299", t0)).has_value());
  BOOST_TEST(store->meta().last_seq == 600u);
  BOOST_TEST(store->meta().next_local_id == 303u);
  auto after = store->stats();
  BOOST_TEST(after.commits == before.commits + 1);
  BOOST_TEST(after.mutations == before.mutations + 600);
  BOOST_TEST(after.syncs == before.syncs + 1);
  // 600 records and keys went into the write buffers.
  BOOST_TEST(after.memtable_bytes > before.memtable_bytes + 600 * 16);
  // Stamps follow the batch order.
  std::vector<core::task_id> ids;
  for (const auto& key : due)
    ids.push_back(key.id);
  uint64_t last_seq = 0;
  std::sort(ids.begin(), ids.end());
  for (const auto& rec : ok(store->get_many(ids))) {
    BOOST_TEST(rec.stamp.seq > last_seq);
    last_seq = rec.stamp.seq;
  }
}

BOOST_AUTO_TEST_CASE(scan_order_with_negative_zero_and_large_times) {
  temp_dir dir;
  auto store = open_ok(options_for(dir));
  constexpr auto min = std::numeric_limits<int64_t>::min();
  constexpr auto max = std::numeric_limits<int64_t>::max();
  std::vector<due_key> keys = {
    {0, 5},      {-1, 9}, {max - 1, 1}, {min + 1, 3}, {t0, 8},        {t0, 2},
    {-5'000, 4}, {1, 7},  {0, 6},       {t0, 100},    {-5'000, 1000},
  };
  write_batch batch;
  for (const auto& key : keys) {
    auto rec = make_task(key.id, key.index_ms);
    batch.put(rec);
  }
  commit_ok(*store, batch);
  auto sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  auto all = scan_all(*store);
  BOOST_TEST(all == sorted, boost::test_tools::per_element());
  // Paging: strictly after the last key seen, limit 3 at a time.
  std::vector<due_key> paged;
  due_key after{min, 0};
  for (;;) {
    auto page = ok(store->scan_due(after, max, 3));
    BOOST_TEST(page.size() <= 3u);
    if (page.empty())
      break;
    paged.insert(paged.end(), page.begin(), page.end());
    after = page.back();
  }
  BOOST_TEST(paged == sorted, boost::test_tools::per_element());
  // before_ms is exclusive; after is exclusive down to the id.
  auto window = ok(store->scan_due({0, 5}, t0, 100));
  std::vector<due_key> expected = {{0, 6}, {1, 7}};
  BOOST_TEST(window == expected, boost::test_tools::per_element());
  window = ok(store->scan_due({-1, 9}, 1, 100));
  expected = {{0, 5}, {0, 6}};
  BOOST_TEST(window == expected, boost::test_tools::per_element());
  BOOST_TEST(ok(store->scan_due({t0, 0}, t0, 100)).empty());
  BOOST_TEST(ok(store->scan_due({min, 0}, max, 0)).empty());
}

// -- meta, reopen, epochs
// -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(reopen_keeps_everything_and_never_reuses_ids) {
  temp_dir dir;
  auto opts = options_for(dir, 2, 4);
  core::task_id first = 0;
  core::task_id unused = 0;
  {
    auto store = open_ok(opts);
    BOOST_TEST(store->meta().shard == 2u);
    BOOST_TEST(store->meta().shard_count == 4u);
    first = store->allocate_id();
    BOOST_TEST(first == 6u);
    BOOST_TEST(store->allocate_id() == 10u);
    BOOST_TEST(store->meta().next_local_id == 1u); // not committed yet
    BOOST_TEST(!store->set_epoch(7));
    store->raise_fire_horizon(t0 + 500);
    store->raise_fire_horizon(t0 + 100);            // Never lowers it.
    BOOST_TEST(store->meta().fire_horizon_ms == 0); // Not committed yet.
    write_batch batch;
    batch.put(make_task(first, t0));
    batch.put_key("k", idempotency_entry{first, t0 + 10, 1});
    commit_ok(*store, batch);
    BOOST_TEST(store->meta().next_local_id == 3u);
    BOOST_TEST(store->meta().epoch == 7u);
    auto rec = ok(store->get(first));
    BOOST_REQUIRE(rec);
    BOOST_TEST(rec->stamp.epoch == 7u);
    batch.clear();
    batch.bury(*rec, t0 + 1, "gone");
    commit_ok(*store, batch);
    // Allocated after the last commit: the next open may hand it out again,
    // but it was never used.
    unused = store->allocate_id();
  }
  auto store = open_ok(opts);
  BOOST_TEST(store->meta().last_seq == 3u);
  BOOST_TEST(store->meta().epoch == 7u);
  BOOST_TEST(store->meta().next_local_id == 3u);
  BOOST_TEST(store->meta().fire_horizon_ms == t0 + 500);
  auto next = store->allocate_id();
  BOOST_TEST(next > first);
  BOOST_TEST(next % 4 == 2u);
  BOOST_TEST(next <= unused);
  BOOST_TEST(ok(store->get_dead(first)).has_value());
  BOOST_TEST(ok(store->find_key("k", t0)).has_value());
  check_error(store->set_epoch(6), errc::stale_epoch,
              {"epoch 6 is older than the current epoch 7"});
  BOOST_TEST(!store->set_epoch(7));
  BOOST_TEST(!store->set_epoch(9));
  write_batch batch;
  batch.put(make_task(next, t0));
  commit_ok(*store, batch);
  BOOST_TEST(ok(store->get(next))->stamp.epoch == 9u);
  BOOST_TEST(ok(store->get(next))->stamp.seq == 4u);
  BOOST_TEST(store->meta().fire_horizon_ms == t0 + 500); // Kept.
}

BOOST_AUTO_TEST_CASE(unsynced_modes_reopen_past_the_id_reservation) {
  // A power loss may take unsynced commits and with them the id counter;
  // the fsync'd reservation keeps their ids from being handed out again.
  temp_dir dir;
  auto opts = options_for(dir, 0, 1, durability::periodic);
  uint64_t reserved = 0;
  core::task_id last = 0;
  {
    auto store = open_ok(opts);
    for (int i = 0; i < 5; ++i) {
      write_batch batch;
      last = store->allocate_id();
      batch.put(make_task(last, t0));
      commit_ok(*store, batch);
    }
    reserved = store->meta().reserved_local_id;
    BOOST_TEST(reserved > store->meta().next_local_id);
  }
  auto store = open_ok(opts);
  auto next = store->allocate_id();
  BOOST_TEST(next > last);
  BOOST_TEST(next == reserved); // shard 0 of 1: id == local id
}

namespace {

/// Records which directories get fsync'd, and in what order.
class dir_sync_recorder : public rocksdb::FileSystemWrapper {
public:
  dir_sync_recorder()
    : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {
    // nop
  }

  const char* Name() const override { return "dir_sync_recorder"; }

  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& io_opts,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override {
    auto status = target()->NewDirectory(name, io_opts, result, dbg);
    if (status.ok())
      *result =
        std::make_unique<recording_dir>(std::move(*result), name, synced);
    return status;
  }

  std::vector<std::string> synced;

private:
  class recording_dir : public rocksdb::FSDirectoryWrapper {
  public:
    recording_dir(std::unique_ptr<rocksdb::FSDirectory> dir, std::string name,
                  std::vector<std::string>& log)
      : rocksdb::FSDirectoryWrapper(std::move(dir)), name_(std::move(name)),
        log_(log) {
      // nop
    }

    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      auto status = rocksdb::FSDirectoryWrapper::Fsync(options, dbg);
      if (status.ok())
        log_.push_back(name_);
      return status;
    }

  private:
    std::string name_;
    std::vector<std::string>& log_;
  };
};

} // namespace

BOOST_AUTO_TEST_CASE(creating_the_data_directory_fsyncs_its_parents) {
  // Under strict POSIX a new directory survives a power loss only once its
  // parent is fsync'd; RocksDB syncs the data directory itself, not its
  // parents, so the store must.
  temp_dir dir;
  auto fs = std::make_shared<dir_sync_recorder>();
  auto opts = options_for(dir);
  opts.path = (dir.path() / "a" / "b" / "shard").string();
  opts.file_system = fs;
  { open_ok(opts); }
  for (const auto& parent :
       {dir.path(), dir.path() / "a", dir.path() / "a" / "b"})
    BOOST_TEST(
      std::count(fs->synced.begin(), fs->synced.end(), parent.string()) == 1,
      parent.string() << " fsync'd once");
}

BOOST_AUTO_TEST_CASE(reopen_with_other_shard_settings_fails) {
  temp_dir dir;
  { open_ok(options_for(dir, 1, 4)); }
  auto other_count = rocks_task_store::open(options_for(dir, 1, 8));
  BOOST_REQUIRE(!other_count);
  check_error(other_count.err(), errc::store_unavailable,
              {"holds shard 1 of 4, not shard 1 of 8", dir.path().string()});
  auto other_shard = rocks_task_store::open(options_for(dir, 3, 4));
  BOOST_REQUIRE(!other_shard);
  check_error(other_shard.err(), errc::store_unavailable,
              {"holds shard 1 of 4, not shard 3 of 4"});
  auto invalid = rocks_task_store::open(options_for(dir, 4, 4));
  BOOST_REQUIRE(!invalid);
  check_error(invalid.err(), errc::store_unavailable,
              {"shard 4 does not exist with shard_count 4"});
  BOOST_TEST(rocks_task_store::open(options_for(dir, 1, 4)).has_value());
}

BOOST_AUTO_TEST_CASE(store_from_a_newer_version_with_more_families_opens) {
  temp_dir dir;
  { open_ok(options_for(dir)); }
  with_raw_db(dir, [](rocksdb::DB& db, auto&) {
    rocksdb::ColumnFamilyHandle* handle = nullptr;
    BOOST_REQUIRE(
      db.CreateColumnFamily(rocksdb::ColumnFamilyOptions{}, "future", &handle)
        .ok());
    BOOST_REQUIRE(db.DestroyColumnFamilyHandle(handle).ok());
  });
  auto store = open_ok(options_for(dir));
  write_batch batch;
  batch.put(make_task(store->allocate_id(), t0));
  commit_ok(*store, batch);
}

// -- durability
// -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(periodic_sync_when_due) {
  temp_dir dir;
  auto opts = options_for(dir, 0, 1, durability::periodic);
  opts.sync_period_ms = 100;
  auto store = open_ok(opts);
  auto commit_one = [&] {
    write_batch batch;
    batch.put(make_task(store->allocate_id(), t0));
    commit_ok(*store, batch);
  };
  // The first commit with a new id fsyncs the id reservation once.
  auto opened = store->stats().syncs;
  commit_one();
  BOOST_TEST(store->stats().syncs == opened + 1);
  BOOST_TEST(store->meta().reserved_local_id > store->meta().next_local_id);
  BOOST_TEST(!store->sync_if_due(500));
  auto base = store->stats().syncs;
  commit_one();
  BOOST_TEST(store->stats().syncs == base); // not synced by the commit
  BOOST_TEST(!store->sync_if_due(1'000));
  BOOST_TEST(store->stats().syncs == base + 1);
  commit_one();
  BOOST_TEST(!store->sync_if_due(1'050)); // within the period
  BOOST_TEST(store->stats().syncs == base + 1);
  BOOST_TEST(!store->sync_if_due(1'100));
  BOOST_TEST(store->stats().syncs == base + 2);
  BOOST_TEST(!store->sync_if_due(5'000)); // nothing written since
  BOOST_TEST(store->stats().syncs == base + 2);
  commit_one();
  BOOST_TEST(!store->sync_if_due(10)); // the clock went back: sync
  BOOST_TEST(store->stats().syncs == base + 3);
  commit_one();
  BOOST_TEST(!store->sync());
  BOOST_TEST(!store->sync()); // nothing left to sync
  BOOST_TEST(store->stats().syncs == base + 4);
}

BOOST_AUTO_TEST_CASE(sync_and_none_durability_count_their_fsyncs) {
  temp_dir sync_dir;
  auto synced = open_ok(options_for(sync_dir, 0, 1, durability::sync));
  auto base = synced->stats().syncs;
  for (int i = 0; i < 3; ++i) {
    write_batch batch;
    batch.put(make_task(synced->allocate_id(), t0));
    commit_ok(*synced, batch);
  }
  BOOST_TEST(!synced->sync_if_due(t0));
  BOOST_TEST(!synced->sync());
  BOOST_TEST(synced->stats().syncs == base + 3);
  temp_dir none_dir;
  auto unsynced = open_ok(options_for(none_dir, 0, 1, durability::none));
  write_batch reserve;
  reserve.put(make_task(unsynced->allocate_id(), t0));
  commit_ok(*unsynced, reserve); // fsyncs the id reservation
  base = unsynced->stats().syncs;
  write_batch batch;
  batch.put(make_task(unsynced->allocate_id(), t0));
  commit_ok(*unsynced, batch);
  BOOST_TEST(!unsynced->sync_if_due(t0));
  BOOST_TEST(!unsynced->sync_if_due(t0 + 1'000'000));
  BOOST_TEST(unsynced->stats().syncs == base);
  BOOST_TEST(!unsynced->sync()); // asked for explicitly
  BOOST_TEST(unsynced->stats().syncs == base + 1);
}

/// The nice values of this process's threads named `name`.
std::vector<int> nice_of_threads(const std::string& name) {
  std::vector<int> out;
  for (const auto& entry :
       std::filesystem::directory_iterator{"/proc/self/task"}) {
    std::ifstream comm{entry.path() / "comm"};
    std::string got;
    std::getline(comm, got);
    if (got != name)
      continue;
    std::ifstream stat{entry.path() / "stat"};
    std::string line;
    std::getline(stat, line);
    // After "pid (comm) ": state is field 3, nice field 19.
    std::istringstream rest{line.substr(line.rfind(')') + 2)};
    std::string field;
    for (int i = 3; i <= 19 && rest >> field; ++i)
      if (i == 19)
        out.push_back(std::stoi(field));
  }
  return out;
}

BOOST_AUTO_TEST_CASE(flushes_run_at_the_lowest_cpu_priority) {
  temp_dir dir;
  auto opts = options_for(dir, 0, 1, durability::none);
  opts.background_at_low_priority = true;
  auto store = open_ok(opts);
  // 1 MiB memtables: a few MiB of records make RocksDB flush.
  auto low = [] {
    auto nices = nice_of_threads("rocksdb:high");
    return std::find(nices.begin(), nices.end(), 19) != nices.end();
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
  int64_t written = 0;
  while (!low() && std::chrono::steady_clock::now() < deadline) {
    if (written < 64 << 20) {
      write_batch batch;
      for (int i = 0; i < 64; ++i) {
        auto rec = make_task(store->allocate_id(), t0 + 3'600'000);
        rec.task.payload.assign(4096, 'x');
        batch.put(std::move(rec));
      }
      commit_ok(*store, batch);
      written += 64 * 4096;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
  }
  BOOST_TEST(low(), "no flush thread runs at nice 19 after "
                      << (written >> 20) << " MiB were written");
}

// -- locking
// -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(second_open_in_the_same_process_is_refused) {
  temp_dir dir;
  auto opts = options_for(dir);
  {
    auto first = open_ok(opts);
    auto second = rocks_task_store::open(opts);
    BOOST_REQUIRE(!second);
    check_error(second.err(), errc::store_locked,
                {"data directory " + opts.path + " is in use"});
  }
  open_ok(opts);
}

BOOST_AUTO_TEST_CASE(open_while_another_process_holds_the_store_is_refused) {
  temp_dir dir;
  auto opts = options_for(dir);
  // The child tries to open what this process holds; it reports by exit
  // code: 0 store_locked, 1 another error, 2 opened.
  {
    auto held = open_ok(opts);
    auto pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      ::alarm(20);
      auto store = rocks_task_store::open(opts);
      ::_exit(store ? 2 : store.err().code() == errc::store_locked ? 0 : 1);
    }
    BOOST_TEST(wait_bounded(pid, std::chrono::seconds(25)) == 0);
  }
  // The other way round: another process holds the lock file as RocksDB
  // does (an fcntl write lock), and this one tries to open.
  int ready[2];
  int done[2];
  BOOST_REQUIRE(::pipe(ready) == 0);
  BOOST_REQUIRE(::pipe(done) == 0);
  auto pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(20);
    ::close(ready[0]);
    ::close(done[1]);
    auto lock_path = dir.path() / "LOCK";
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    char answer = fd >= 0 && ::fcntl(fd, F_SETLK, &lock) == 0 ? 'y' : 'n';
    [[maybe_unused]] auto n = ::write(ready[1], &answer, 1);
    n = ::read(done[0], &answer, 1);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  char answer = 'n';
  BOOST_REQUIRE(::read(ready[0], &answer, 1) == 1);
  BOOST_REQUIRE(answer == 'y');
  auto store = rocks_task_store::open(opts);
  ::close(done[1]); // lets the child exit
  ::close(ready[0]);
  BOOST_TEST(wait_bounded(pid, std::chrono::seconds(25)) == 0);
  BOOST_REQUIRE(!store);
  check_error(store.err(), errc::store_locked, {"is in use"});
  open_ok(opts);
}

// -- corrupt records
// -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(corrupt_task_records_are_quarantined) {
  temp_dir dir;
  auto opts = options_for(dir);
  std::vector<task_record> tasks;
  {
    auto store = open_ok(opts);
    write_batch batch;
    for (int i = 0; i < 4; ++i) {
      tasks.push_back(make_task(store->allocate_id(), t0 + i));
      batch.put(tasks.back());
    }
    commit_ok(*store, batch);
  }
  auto id_a = tasks[0].task.id;
  auto id_b = tasks[1].task.id; // garbage bytes
  auto id_c = tasks[2].task.id; // parses, invalid state
  auto id_d = tasks[3].task.id; // garbage, found by get_many
  with_raw_db(dir, [&](rocksdb::DB& db, auto& cfs) {
    rocksdb::WriteOptions wo;
    BOOST_REQUIRE(
      db.Put(wo, cfs["tasks"], encode_task_key(id_b), "\xff\xff garbage").ok());
    v1::TaskRecord msg;
    BOOST_REQUIRE(!to_proto(tasks[2], msg));
    msg.set_state(v1::TASK_STATE_UNSPECIFIED);
    BOOST_REQUIRE(
      db.Put(wo, cfs["tasks"], encode_task_key(id_c), msg.SerializeAsString())
        .ok());
    BOOST_REQUIRE(db.Put(wo, cfs["tasks"], encode_task_key(id_d), "\xff").ok());
  });
  auto store = open_ok(opts);
  BOOST_TEST(ok(store->get(id_a)).has_value());
  auto bad = store->get(id_b);
  BOOST_REQUIRE(!bad);
  check_error(
    bad.err(), errc::corrupt_record,
    {"tasks/0000000000000002 (task 2)", "moved to quarantine", "TaskRecord"});
  BOOST_REQUIRE(store->quarantined().size() == 1u);
  BOOST_TEST(store->quarantined()[0].where ==
             "tasks/0000000000000002 (task 2)");
  BOOST_TEST(store->quarantined()[0].reason.find("do not parse") !=
             std::string::npos);
  BOOST_TEST(!ok(store->get(id_b))); // gone from "tasks"
  bad = store->get(id_c);
  BOOST_REQUIRE(!bad);
  check_error(bad.err(), errc::corrupt_record,
              {"(task 3)", "state: unspecified"});
  // get_many skips and quarantines.
  auto many = ok(store->get_many(std::vector<core::task_id>{id_d, id_a}));
  BOOST_REQUIRE(many.size() == 1u);
  BOOST_TEST(many[0].task.id == id_a);
  BOOST_TEST(store->quarantined().size() == 3u);
  BOOST_TEST(store->stats().quarantined == 3u);
  // c's due key was derivable and went with it; b's and d's were not.
  auto due = scan_all(*store);
  std::vector<core::task_id> due_ids;
  for (const auto& key : due)
    due_ids.push_back(key.id);
  std::vector<core::task_id> expected = {id_a, id_b, id_d};
  BOOST_TEST(due_ids == expected, boost::test_tools::per_element());
  // The shard keeps working.
  write_batch batch;
  auto fresh = make_task(store->allocate_id(), t0 + 10);
  batch.put(fresh);
  commit_ok(*store, batch);
  BOOST_TEST(ok(store->get(fresh.task.id)).has_value());
  store.reset();
  // The raw bytes are kept with their reason.
  with_raw_db(dir, [&](rocksdb::DB& db, auto& cfs) {
    std::string value;
    auto key = std::string{"tasks"} + '\0' + encode_task_key(id_b);
    BOOST_REQUIRE(
      db.Get(rocksdb::ReadOptions{}, cfs["quarantine"], key, &value).ok());
    BOOST_TEST(value.find("do not parse") != std::string::npos);
    BOOST_TEST(value.substr(value.size() - 10) == "\xff\xff garbage");
  });
}

BOOST_AUTO_TEST_CASE(corrupt_due_keys_dead_letters_and_keys_are_quarantined) {
  temp_dir dir;
  auto opts = options_for(dir);
  std::vector<task_record> tasks;
  {
    auto store = open_ok(opts);
    write_batch batch;
    for (int i = 0; i < 3; ++i) {
      tasks.push_back(make_task(store->allocate_id(), t0 + i));
      batch.put(tasks.back());
    }
    batch.put_key("good", idempotency_entry{0, t0 + 100, 0});
    commit_ok(*store, batch);
    batch.clear();
    batch.bury(*ok(store->get(tasks[1].task.id)), t0, "r1");
    batch.bury(*ok(store->get(tasks[2].task.id)), t0, "r2");
    commit_ok(*store, batch);
  }
  with_raw_db(dir, [&](rocksdb::DB& db, auto& cfs) {
    rocksdb::WriteOptions wo;
    BOOST_REQUIRE(db.Put(wo, cfs["due"], "short", "").ok());
    BOOST_REQUIRE(
      db.Put(wo, cfs["dead"], encode_task_key(tasks[1].task.id), "\xff").ok());
    BOOST_REQUIRE(db.Put(wo, cfs["dead"], "odd", "").ok());
    BOOST_REQUIRE(db.Put(wo, cfs["keys"], "bad-key", "\xff\xff").ok());
    BOOST_REQUIRE(db.Put(wo, cfs["keys"], "bad-too", "\xff\xff").ok());
  });
  auto store = open_ok(opts);
  auto due = scan_all(*store);
  BOOST_REQUIRE(due.size() == 1u);
  BOOST_TEST(due[0].id == tasks[0].task.id);
  BOOST_REQUIRE(store->quarantined().size() == 1u);
  BOOST_TEST(store->quarantined()[0].where ==
             "due/0x" + std::string{"73686f7274"});
  BOOST_TEST(store->quarantined()[0].reason == "due key has 5 bytes, not 16");
  BOOST_TEST(scan_all(*store).size() == 1u);
  auto dead = store->get_dead(tasks[1].task.id);
  BOOST_REQUIRE(!dead);
  check_error(dead.err(), errc::corrupt_record,
              {"dead/0000000000000002 (task 2)", "DeadLetter"});
  auto letters = ok(store->dead_letters(0, 10));
  BOOST_REQUIRE(letters.size() == 1u);
  BOOST_TEST(letters[0].record.task.id == tasks[2].task.id);
  BOOST_TEST(ok(store->dead_letters(0, 10)).size() == 1u);
  auto key = store->find_key("bad-key", t0);
  BOOST_REQUIRE(!key);
  check_error(key.err(), errc::corrupt_record,
              {"keys/'bad-key'", "IdempotencyRecord"});
  BOOST_TEST(!ok(store->find_key("bad-key", t0)));
  // expire_keys moves the other one aside and goes on.
  BOOST_TEST(ok(store->expire_keys(t0 + 1'000, 10)) == 1u);
  BOOST_TEST(store->quarantined().size() == 5u);
  BOOST_TEST(store->quarantined().back().where == "keys/'bad-too'");
}

BOOST_AUTO_TEST_CASE(corrupt_meta_refuses_to_open) {
  temp_dir dir;
  auto opts = options_for(dir);
  { open_ok(opts); }
  with_raw_db(dir, [](rocksdb::DB& db, auto& cfs) {
    BOOST_REQUIRE(
      db.Put(rocksdb::WriteOptions{}, cfs["meta"], "shard", "\xff\xff").ok());
  });
  auto store = rocks_task_store::open(opts);
  BOOST_REQUIRE(!store);
  check_error(store.err(), errc::corrupt_record,
              {"meta/'shard'", "does not decode", "refusing to open"});
}

BOOST_AUTO_TEST_SUITE_END()

// -- deferred index entries
// -----------------------------------------------------------------------

namespace {

/// A put whose index entry the store may defer.
void put_deferred(write_batch& batch, task_record rec) {
  batch.put(std::move(rec));
  std::get<write_batch::put_op>(batch.ops().back()).defer_index = true;
}

std::vector<core::task_id> ids_of(const std::vector<due_key>& keys) {
  std::vector<core::task_id> out;
  for (const auto& key : keys)
    out.push_back(key.id);
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(
  deferred_index_entries_are_written_when_asked_and_at_close) {
  temp_dir dir;
  auto opts = options_for(dir);
  opts.max_deferred_index = 100;
  auto store = open_ok(opts);
  std::vector<task_record> tasks;
  write_batch batch;
  for (int i = 0; i < 6; ++i) {
    tasks.push_back(make_task(store->allocate_id(), t0 + i));
    put_deferred(batch, tasks.back());
  }
  commit_ok(*store, batch);
  // Records are there, index entries are not (yet).
  BOOST_TEST(ok(store->get(tasks[0].task.id)).has_value());
  BOOST_TEST(scan_all(*store).empty());
  BOOST_TEST(store->meta().unindexed_from == tasks[0].task.id);
  batch.clear();
  batch.erase(tasks[0]); // acked while deferred: the index is never touched
  auto fired = tasks[1];
  fired.state = task_state::in_flight;
  batch.replace(tasks[1], fired); // same index time: stays deferred
  auto moved = tasks[2];
  moved.task.due_ms = t0 + 100;
  moved.task.recurrence = ok(core::recurrence::at(t0 + 100));
  batch.replace(tasks[2], moved); // new index time: written now
  commit_ok(*store, batch);
  auto due = scan_all(*store);
  BOOST_REQUIRE(due.size() == 1u);
  BOOST_TEST(due[0] == (due_key{t0 + 100, tasks[2].task.id}));
  BOOST_TEST(store->meta().unindexed_from == tasks[1].task.id);
  // index_deferred writes the rest, in one commit.
  BOOST_REQUIRE(!store->index_deferred());
  std::vector<core::task_id> expected = {tasks[1].task.id, tasks[3].task.id,
                                         tasks[4].task.id, tasks[5].task.id,
                                         tasks[2].task.id};
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  BOOST_TEST(store->meta().unindexed_from == 0u);
  // Acked after its entry was written: the entry goes.
  batch.clear();
  batch.erase(tasks[3]);
  commit_ok(*store, batch);
  expected.erase(expected.begin() + 1);
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  // A clean close writes what is still deferred.
  batch.clear();
  auto late = make_task(store->allocate_id(), t0 + 50);
  put_deferred(batch, late);
  commit_ok(*store, batch);
  store.reset();
  store = open_ok(opts);
  expected.insert(expected.end() - 1, late.task.id);
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  BOOST_TEST(store->meta().unindexed_from == 0u);
}

BOOST_AUTO_TEST_CASE(
  deferred_entries_beyond_the_bound_are_written_oldest_first) {
  temp_dir dir;
  auto opts = options_for(dir);
  opts.max_deferred_index = 4;
  auto store = open_ok(opts);
  std::vector<core::task_id> ids;
  for (int round = 0; round < 2; ++round) {
    write_batch batch;
    for (int i = 0; i < 5; ++i) {
      auto rec = make_task(store->allocate_id(), t0 + 10 * round + i);
      ids.push_back(rec.task.id);
      put_deferred(batch, rec);
    }
    commit_ok(*store, batch);
  }
  // Ten deferred, four may stay so: the six oldest are written.
  std::vector<core::task_id> expected(ids.begin(), ids.begin() + 6);
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  BOOST_TEST(store->meta().unindexed_from == ids[6]);
  // With the bound at 0 nothing is deferred.
  store.reset();
  opts.max_deferred_index = 0;
  store = open_ok(opts);
  write_batch batch;
  auto rec = make_task(store->allocate_id(), t0 + 99);
  put_deferred(batch, rec);
  commit_ok(*store, batch);
  BOOST_TEST(ids_of(scan_all(*store)).back() == rec.task.id);
  BOOST_TEST(store->meta().unindexed_from == 0u);
}

BOOST_AUTO_TEST_CASE(a_crash_leaves_no_deferred_task_unindexed) {
  temp_dir dir;
  auto fs = std::make_shared<fault_fs>();
  auto opts = options_for(dir);
  opts.file_system = fs;
  opts.max_deferred_index = 100;
  auto store = open_ok(opts);
  // Indexed before the deferred ones: below the mark, not rescanned.
  write_batch batch;
  auto old = make_task(store->allocate_id(), t0 + 1000);
  batch.put(old);
  commit_ok(*store, batch);
  std::vector<task_record> tasks;
  batch.clear();
  for (int i = 0; i < 5; ++i) {
    tasks.push_back(make_task(store->allocate_id(), t0 + i));
    put_deferred(batch, tasks.back());
  }
  commit_ok(*store, batch);
  batch.clear();
  batch.erase(tasks[0]);
  commit_ok(*store, batch);
  BOOST_TEST(ids_of(scan_all(*store)) ==
               std::vector<core::task_id>{old.task.id},
             boost::test_tools::per_element());
  // The process dies: the close writes nothing.
  fs->set_active(false);
  store.reset();
  fs->set_active(true);
  // One deferred record is damaged meanwhile: quarantined, not indexed.
  with_raw_db(dir, [&](rocksdb::DB& db, auto& cfs) {
    BOOST_REQUIRE(db.Put(rocksdb::WriteOptions{}, cfs["tasks"],
                         encode_task_key(tasks[4].task.id), "\xff garbage")
                    .ok());
  });
  // The WAL refuses writes and syncs: opening writes nothing for the
  // deferred entries, so the shard still starts, and scans see them from
  // memory.
  fault_spec wal;
  wal.kinds = file_kind::wal;
  fs->fail_writes(1000, wal);
  fs->fail_syncs(1000, wal);
  store = open_ok(opts);
  std::vector<core::task_id> expected = {tasks[1].task.id, tasks[2].task.id,
                                         tasks[3].task.id, old.task.id};
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  // Scans in slices and from a cursor merge both sources in order.
  auto first = ok(store->scan_due({std::numeric_limits<int64_t>::min(), 0},
                                  std::numeric_limits<int64_t>::max(), 2));
  BOOST_TEST(ids_of(first) ==
               (std::vector<core::task_id>{tasks[1].task.id, tasks[2].task.id}),
             boost::test_tools::per_element());
  auto rest =
    ok(store->scan_due(first.back(), std::numeric_limits<int64_t>::max(), 10));
  BOOST_TEST(ids_of(rest) ==
               (std::vector<core::task_id>{tasks[3].task.id, old.task.id}),
             boost::test_tools::per_element());
  BOOST_TEST(
    ok(store->scan_due({std::numeric_limits<int64_t>::min(), 0}, t0 + 2, 10))
      .size() == 1u);
  BOOST_TEST(store->meta().unindexed_from == tasks[1].task.id);
  BOOST_TEST(store->quarantined().empty());
  // A crash again, the disk healthy now: the damaged record is moved aside.
  fs->clear_faults();
  fs->set_active(false);
  store.reset();
  fs->set_active(true);
  store = open_ok(opts);
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  // Acking a recovered task deletes its entry (it may have been written
  // before the crash); writing the rest clears the mark.
  batch.clear();
  batch.erase(tasks[1]);
  commit_ok(*store, batch);
  expected.erase(expected.begin());
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  BOOST_REQUIRE(!store->index_deferred());
  BOOST_TEST(store->meta().unindexed_from == 0u);
  BOOST_TEST(ids_of(scan_all(*store)) == expected,
             boost::test_tools::per_element());
  BOOST_REQUIRE(store->quarantined().size() == 1u);
  BOOST_TEST(store->quarantined()[0].where.find(
               "(task " + std::to_string(tasks[4].task.id) + ")") !=
             std::string::npos);
  BOOST_TEST(!ok(store->get(tasks[4].task.id)).has_value());
  BOOST_TEST(!ok(store->get(tasks[0].task.id)).has_value());
}

namespace {

/// The table files of the "tasks" family (the store closed).
size_t task_table_files(const temp_dir& dir) {
  size_t n = 0;
  with_raw_db(dir, [&n](rocksdb::DB& db, auto&) {
    std::vector<rocksdb::LiveFileMetaData> files;
    db.GetLiveFilesMetaData(&files);
    n = static_cast<size_t>(
      std::count_if(files.begin(), files.end(), [](const auto& file) {
        return file.column_family_name == "tasks";
      }));
  });
  return n;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_task_put_once_and_acked_leaves_no_tombstone) {
  temp_dir dir;
  auto opts = options_for(dir);
  opts.max_deferred_index = 100;
  // Puts a task (its index entry deferred or written), acks it and
  // flushes, in a session of its own.
  auto put_and_ack = [&](bool deferred) {
    auto store = open_ok(opts);
    write_batch batch;
    auto rec = make_task(store->allocate_id(), t0);
    if (deferred)
      put_deferred(batch, rec);
    else
      batch.put(rec);
    commit_ok(*store, batch);
    batch.clear();
    batch.erase(rec);
    commit_ok(*store, batch);
    BOOST_REQUIRE(!store->flush());
    return rec;
  };
  // Entry deferred: the put and its erase vanish together in the flush,
  // and no table file is written for them.
  auto once = put_and_ack(true);
  BOOST_TEST(task_table_files(dir) == 0u);
  // Entry written: the erase leaves a tombstone that the flush writes.
  auto indexed = put_and_ack(false);
  BOOST_TEST(task_table_files(dir) == 1u);
  auto store = open_ok(opts);
  BOOST_TEST(!ok(store->get(once.task.id)).has_value());
  BOOST_TEST(!ok(store->get(indexed.task.id)).has_value());
}

BOOST_AUTO_TEST_CASE(a_record_rewritten_in_place_is_erased_for_good) {
  temp_dir dir;
  auto fs = std::make_shared<fault_fs>();
  auto opts = options_for(dir);
  opts.file_system = fs;
  opts.max_deferred_index = 100;
  auto store = open_ok(opts);
  auto in_flight = [](task_record rec) {
    rec.state = task_state::in_flight;
    rec.lease_deadline_ms = t0 + 30'000;
    return rec;
  };
  // Each record is put, compacted down a level, rewritten in place (its
  // index entry stays deferred), and erased. An erase that removed only
  // the newest put would bring the first one back once it met that put in
  // a compaction without the lower level.
  write_batch batch;
  auto acked = make_task(store->allocate_id(), t0);
  auto crashed = make_task(store->allocate_id(), t0 + 1);
  put_deferred(batch, acked);
  put_deferred(batch, crashed);
  commit_ok(*store, batch);
  BOOST_REQUIRE(!store->flush(true));
  batch.clear();
  batch.replace(acked, in_flight(acked));
  batch.replace(crashed, in_flight(crashed));
  commit_ok(*store, batch);
  BOOST_REQUIRE(!store->flush());
  batch.clear();
  batch.erase(in_flight(acked));
  commit_ok(*store, batch);
  BOOST_REQUIRE(!store->flush());
  // `crashed` is erased after a crash, its history unknown to the store.
  fs->set_active(false);
  store.reset();
  fs->set_active(true);
  store = open_ok(opts);
  BOOST_REQUIRE(ok(store->get(crashed.task.id)).has_value());
  batch.clear();
  batch.erase(in_flight(crashed));
  commit_ok(*store, batch);
  BOOST_REQUIRE(!store->flush());
  store.reset();
  // Level 0's files of "tasks" (the second puts and the erases) merged
  // among themselves, as RocksDB may do when level 1 is busy.
  with_raw_db(dir, [](rocksdb::DB& db, auto& cfs) {
    std::vector<rocksdb::LiveFileMetaData> files;
    db.GetLiveFilesMetaData(&files);
    std::vector<std::string> level0;
    for (const auto& file : files)
      if (file.column_family_name == "tasks" && file.level == 0)
        level0.push_back(file.name);
    BOOST_REQUIRE_MESSAGE(level0.size() >= 2u, level0.size());
    auto status =
      db.CompactFiles(rocksdb::CompactionOptions{}, cfs["tasks"], level0, 0);
    BOOST_REQUIRE_MESSAGE(status.ok(), status.ToString());
  });
  store = open_ok(opts);
  for (const auto& rec : {acked, crashed})
    BOOST_TEST(!ok(store->get(rec.task.id)).has_value(),
               "task " << rec.task.id << " came back");
}
