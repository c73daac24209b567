#define BOOST_TEST_MODULE btree_memtable
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "storage/btree_memtable.hpp"
#include "storage/rocks_task_store.hpp"
#include "test_support.hpp"

using namespace dally;

namespace {

/// A RocksDB database whose one column family keeps its memtable in the
/// B-tree, checked against a std::map of what was written.
struct db_fixture {
  storage::test::temp_dir dir;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::map<std::string, std::string> model;
  std::mt19937_64 gen{42};

  explicit db_fixture(size_t write_buffer_bytes = 64 << 20) {
    open(write_buffer_bytes);
  }

  ~db_fixture() { close(); }

  void open(size_t write_buffer_bytes) {
    rocksdb::DBOptions db_options;
    db_options.create_if_missing = true;
    db_options.create_missing_column_families = true;
    db_options.allow_concurrent_memtable_write = false;
    rocksdb::ColumnFamilyOptions cf_options;
    cf_options.write_buffer_size = write_buffer_bytes;
    cf_options.memtable_factory =
      std::make_shared<storage::btree_memtable_factory>();
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs{
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions{}},
      {"tasks", cf_options}};
    rocksdb::DB* raw = nullptr;
    auto st =
      rocksdb::DB::Open(db_options, dir.path().string(), cfs, &handles, &raw);
    BOOST_REQUIRE_MESSAGE(st.ok(), st.ToString());
    db.reset(raw);
  }

  void close() {
    if (!db)
      return;
    for (auto* h : handles)
      db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    handles.clear();
    db->Close().PermitUncheckedError();
    db.reset();
  }

  rocksdb::ColumnFamilyHandle* cf() { return handles.at(1); }

  /// Keys that tie on their first 8 bytes when zero-padded ("ab", "ab\0"),
  /// 8-byte task ids, longer and empty keys.
  std::string random_key() {
    switch (gen() % 4) {
      case 0: {
        std::string key = "ab";
        key.append(gen() % 4, '\0');
        if (gen() % 2)
          key.push_back(static_cast<char>(gen() % 3));
        return key;
      }
      case 1:
        return storage::encode_task_key(gen() % 512);
      case 2: {
        std::string key(9 + gen() % 4, 'x');
        for (auto& c : key)
          c = static_cast<char>(gen() % 4);
        return key;
      }
      default:
        return std::string(gen() % 2, '\xff');
    }
  }

  void put(const std::string& key, const std::string& value) {
    auto st = db->Put(rocksdb::WriteOptions{}, cf(), key, value);
    BOOST_REQUIRE_MESSAGE(st.ok(), st.ToString());
    model[key] = value;
  }

  void erase(const std::string& key) {
    auto st = db->Delete(rocksdb::WriteOptions{}, cf(), key);
    BOOST_REQUIRE_MESSAGE(st.ok(), st.ToString());
    model.erase(key);
  }

  /// Random puts, overwrites and deletes, some in batches that touch one
  /// key twice.
  void churn(size_t ops) {
    for (size_t i = 0; i < ops; ++i) {
      auto key = random_key();
      auto roll = gen() % 10;
      if (roll < 6) {
        put(key, "v" + std::to_string(i));
      } else if (roll < 9) {
        erase(key);
      } else {
        rocksdb::WriteBatch batch;
        BOOST_REQUIRE(batch.Put(cf(), key, "first").ok());
        BOOST_REQUIRE(batch.Delete(cf(), key).ok());
        BOOST_REQUIRE(batch.Put(cf(), key, "second").ok());
        auto st = db->Write(rocksdb::WriteOptions{}, &batch);
        BOOST_REQUIRE_MESSAGE(st.ok(), st.ToString());
        model[key] = "second";
      }
    }
  }

  std::optional<std::string> get(const std::string& key) {
    std::string value;
    auto st = db->Get(rocksdb::ReadOptions{}, cf(), key, &value);
    if (st.IsNotFound())
      return std::nullopt;
    BOOST_REQUIRE_MESSAGE(st.ok(), st.ToString());
    return value;
  }

  std::unique_ptr<rocksdb::Iterator> iterator() {
    return std::unique_ptr<rocksdb::Iterator>{
      db->NewIterator(rocksdb::ReadOptions{}, cf())};
  }

  /// Point reads, both directions of iteration and seeks agree with the
  /// model.
  void check() {
    for (int i = 0; i < 300; ++i) {
      auto key = random_key();
      auto it = model.find(key);
      auto got = get(key);
      BOOST_REQUIRE_EQUAL(got.has_value(), it != model.end());
      if (got)
        BOOST_REQUIRE_EQUAL(*got, it->second);
    }
    auto it = iterator();
    auto expected = model.begin();
    for (it->SeekToFirst(); it->Valid(); it->Next(), ++expected) {
      BOOST_REQUIRE(expected != model.end());
      BOOST_REQUIRE_EQUAL(it->key().ToString(), expected->first);
      BOOST_REQUIRE_EQUAL(it->value().ToString(), expected->second);
    }
    BOOST_REQUIRE(it->status().ok());
    BOOST_REQUIRE(expected == model.end());
    auto back = model.rbegin();
    for (it->SeekToLast(); it->Valid(); it->Prev(), ++back) {
      BOOST_REQUIRE(back != model.rend());
      BOOST_REQUIRE_EQUAL(it->key().ToString(), back->first);
    }
    BOOST_REQUIRE(back == model.rend());
    for (int i = 0; i < 200; ++i) {
      auto target = random_key();
      it->Seek(target);
      auto lower = model.lower_bound(target);
      BOOST_REQUIRE_EQUAL(it->Valid(), lower != model.end());
      if (it->Valid())
        BOOST_REQUIRE_EQUAL(it->key().ToString(), lower->first);
      it->SeekForPrev(target);
      auto upper = model.upper_bound(target);
      BOOST_REQUIRE_EQUAL(it->Valid(), upper != model.begin());
      if (it->Valid())
        BOOST_REQUIRE_EQUAL(it->key().ToString(), std::prev(upper)->first);
    }
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(reads_agree_with_what_was_written) {
  db_fixture f;
  for (int round = 0; round < 5; ++round) {
    f.churn(2000);
    f.check();
  }
}

BOOST_AUTO_TEST_CASE(flushed_and_replayed_memtables_keep_every_entry) {
  // A small write buffer: the memtables switch and flush often, so reads
  // merge B-tree memtables with files; the last one comes back from the
  // WAL at reopen.
  db_fixture f{64 << 10};
  f.churn(20000);
  uint64_t sst_bytes = 0;
  BOOST_REQUIRE(f.db->GetIntProperty(
    f.cf(), rocksdb::DB::Properties::kTotalSstFilesSize, &sst_bytes));
  BOOST_TEST(sst_bytes > 0u);
  f.check();
  f.close();
  f.open(64 << 10);
  f.check();
  f.churn(2000);
  f.check();
}

BOOST_AUTO_TEST_CASE(an_iterator_survives_writes_between_its_steps) {
  // An iterator holds a place in the tree while the same thread writes;
  // B-tree inserts move entries between nodes, so the iterator must find
  // its place again. It sees the data as of its creation (its snapshot).
  db_fixture f;
  for (uint64_t id = 0; id < 4000; id += 2)
    f.put(storage::encode_task_key(id), std::to_string(id));
  auto snapshot = f.model;
  auto it = f.iterator();
  auto expected = snapshot.begin();
  size_t steps = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next(), ++expected, ++steps) {
    BOOST_REQUIRE(expected != snapshot.end());
    BOOST_REQUIRE_EQUAL(it->key().ToString(), expected->first);
    // Between steps: new keys on both sides of the position, and
    // tombstones for keys the iterator has yet to reach.
    if (steps % 3 == 0)
      f.churn(20);
    if (steps % 5 == 0 && std::next(expected) != snapshot.end())
      f.erase(std::next(expected)->first);
  }
  BOOST_REQUIRE(expected == snapshot.end());
  // And backwards, with writes between the steps again.
  auto now = f.model;
  auto back = now.rbegin();
  steps = 0;
  auto rit = f.iterator();
  for (rit->SeekToLast(); rit->Valid(); rit->Prev(), ++back, ++steps) {
    BOOST_REQUIRE(back != now.rend());
    BOOST_REQUIRE_EQUAL(rit->key().ToString(), back->first);
    if (steps % 2 == 0)
      f.churn(10);
  }
  BOOST_REQUIRE(back == now.rend());
  f.check();
}

BOOST_AUTO_TEST_CASE(snapshots_see_the_version_of_their_time) {
  // The tree orders a key's versions newest first without reading them
  // (inline key and sequence number) for keys of up to 8 bytes, and by
  // RocksDB's comparator for longer ones: each snapshot must read exactly
  // the version written before it, deleted ones included.
  db_fixture f;
  using namespace std::string_literals;
  std::vector<std::string> keys{"",         "ab",          "ab\0\0"s,
                                "abcdefgh", "abcdefgh\0"s, "abcdefghi",
                                "abcdefgz", "\xff\xff\xff"};
  std::vector<const rocksdb::Snapshot*> snapshots;
  for (int version = 0; version < 12; ++version) {
    for (const auto& key : keys) {
      if (version % 4 == 3)
        f.erase(key);
      else
        f.put(key, key + "@" + std::to_string(version));
    }
    snapshots.push_back(f.db->GetSnapshot());
  }
  for (int version = 0; version < 12; ++version) {
    rocksdb::ReadOptions read;
    read.snapshot = snapshots[static_cast<size_t>(version)];
    for (const auto& key : keys) {
      std::string value;
      auto st = f.db->Get(read, f.cf(), key, &value);
      if (version % 4 == 3) {
        BOOST_TEST_INFO("key of " << key.size() << " bytes, v" << version);
        BOOST_REQUIRE(st.IsNotFound());
      } else {
        BOOST_REQUIRE_MESSAGE(st.ok(), st.ToString());
        BOOST_REQUIRE_EQUAL(value, key + "@" + std::to_string(version));
      }
    }
    std::unique_ptr<rocksdb::Iterator> it{f.db->NewIterator(read, f.cf())};
    size_t seen = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next())
      ++seen;
    BOOST_REQUIRE_EQUAL(seen, version % 4 == 3 ? 0u : keys.size());
  }
  for (const auto* s : snapshots)
    f.db->ReleaseSnapshot(s);
  f.check();
}

BOOST_AUTO_TEST_CASE(single_deletes_in_random_order_leave_the_rest) {
  // The store's own pattern: ids put once in ascending order, each erased
  // once with a SingleDelete in an order random against the ids, reads
  // between and a flush now and then; MultiGet reads many at once.
  db_fixture f{256 << 10};
  std::vector<std::string> live;
  uint64_t next_id = 1;
  for (int round = 0; round < 40; ++round) {
    rocksdb::WriteBatch batch;
    for (int i = 0; i < 300; ++i) {
      auto key = storage::encode_task_key(next_id);
      BOOST_REQUIRE(batch.Put(f.cf(), key, std::to_string(next_id)).ok());
      f.model[key] = std::to_string(next_id++);
      live.push_back(std::move(key));
    }
    for (int i = 0; i < 250 && !live.empty(); ++i) {
      auto at = f.gen() % live.size();
      std::swap(live[at], live.back());
      BOOST_REQUIRE(batch.SingleDelete(f.cf(), live.back()).ok());
      f.model.erase(live.back());
      live.pop_back();
    }
    auto st = f.db->Write(rocksdb::WriteOptions{}, &batch);
    BOOST_REQUIRE_MESSAGE(st.ok(), st.ToString());
    std::vector<std::string> keys;
    for (int i = 0; i < 64; ++i)
      keys.push_back(storage::encode_task_key(1 + f.gen() % next_id));
    std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
    std::vector<rocksdb::ColumnFamilyHandle*> cfs(keys.size(), f.cf());
    std::vector<std::string> values;
    auto statuses =
      f.db->MultiGet(rocksdb::ReadOptions{}, cfs, slices, &values);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = f.model.find(keys[i]);
      BOOST_REQUIRE_EQUAL(statuses[i].ok(), it != f.model.end());
      if (it != f.model.end())
        BOOST_REQUIRE_EQUAL(values[i], it->second);
      else
        BOOST_REQUIRE(statuses[i].IsNotFound());
    }
  }
  f.check();
  f.close();
  f.open(256 << 10);
  f.check();
}
