#define BOOST_TEST_MODULE raft_log_rocks
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <unistd.h>

#include "cluster/raft_log_store.hpp"
#include "storage/raft_log_rocks.hpp"

using namespace dally;
using cluster::cluster_map;
using cluster::log_entry;
using cluster::raft_log_store;
using cluster::snapshot;
using core::errc;
using storage::rocks_log_store;

namespace fs = std::filesystem;

namespace {

/// A fresh directory, removed at the end of the test.
struct temp_dir {
  fs::path path;

  temp_dir() {
    path = fs::temp_directory_path() /
           ("dally-raftlog-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }

  ~temp_dir() { fs::remove_all(path); }

  static int& counter() {
    static int n = 0;
    return n;
  }

  std::string db() const { return (path / "raft").string(); }
};

cluster_map initial_map() {
  return cluster_map::create(4, {1, 2, 3});
}

std::unique_ptr<rocks_log_store> open_ok(const std::string& dir) {
  auto store = rocks_log_store::open(dir, initial_map());
  if (!store)
    BOOST_FAIL("open failed: " << store.err());
  return std::move(store).value();
}

std::vector<log_entry> entries(uint64_t term, uint64_t first, uint64_t n) {
  std::vector<log_entry> xs;
  for (uint64_t i = 0; i < n; ++i) {
    cluster::command cmd;
    switch ((first + i) % 5) {
      case 0:
        cmd = cluster::noop{};
        break;
      case 1:
        cmd = cluster::add_node{static_cast<core::node_id>(first + i),
                                first % 2 == 0 ? "127.0.0.1:7509" : ""};
        break;
      case 2:
        cmd = cluster::remove_node{2};
        break;
      case 3:
        cmd = cluster::create_map{16, {1, 2, 3}};
        break;
      default:
        cmd = cluster::reassign{};
    }
    xs.push_back(log_entry{term, first + i, cmd});
  }
  return xs;
}

snapshot snapshot_at(uint64_t index, uint64_t term) {
  snapshot snap{index, term, initial_map()};
  snap.state.apply(cluster::add_node{9, "127.0.0.1:7509"});
  snap.state.apply(cluster::add_node{8});
  snap.state.apply(cluster::remove_node{1});
  snap.state.shards[0].replicas = {2, 3};
  snap.state.shards[1].in_sync = {3};
  return snap;
}

/// Everything the interface shows, equal in both stores.
void check_same(const raft_log_store& x, const raft_log_store& y) {
  BOOST_TEST(x.term() == y.term());
  BOOST_TEST((x.vote() == y.vote()));
  BOOST_TEST((x.last_snapshot() == y.last_snapshot()));
  BOOST_REQUIRE_EQUAL(x.last_index(), y.last_index());
  auto first = x.last_snapshot().last_index;
  BOOST_TEST(x.term_at(first) == y.term_at(first));
  for (auto i = first + 1; i <= x.last_index(); ++i) {
    BOOST_TEST((x.entry(i) == y.entry(i)));
    BOOST_TEST(x.term_at(i) == y.term_at(i));
  }
  BOOST_CHECK_THROW(x.entry(first), std::out_of_range);
  BOOST_CHECK_THROW(y.entry(first), std::out_of_range);
  BOOST_CHECK_THROW(x.entry(x.last_index() + 1), std::out_of_range);
  BOOST_CHECK_THROW(y.entry(y.last_index() + 1), std::out_of_range);
}

/// One step of the sequence below, applied to a store.
using step = void (*)(raft_log_store&);

const std::vector<step>& steps() {
  static const std::vector<step> xs{
    [](raft_log_store& s) { s.save_term_vote(1, 2); },
    [](raft_log_store& s) { s.replace_after(0, entries(1, 1, 5)); },
    [](raft_log_store& s) { s.save_term_vote(2, std::nullopt); },
    [](raft_log_store& s) { s.replace_after(3, entries(2, 4, 4)); },
    [](raft_log_store& s) { s.replace_after(7, {}); },
    [](raft_log_store& s) { s.save_snapshot(snapshot_at(4, 2)); },
    [](raft_log_store& s) { s.replace_after(5, entries(3, 6, 3)); },
    [](raft_log_store& s) { s.save_snapshot(snapshot_at(8, 3)); },
    [](raft_log_store& s) { s.replace_after(8, entries(3, 9, 2)); },
    [](raft_log_store& s) { s.save_term_vote(4, 3); },
    [](raft_log_store& s) { s.save_snapshot(snapshot_at(10, 4)); },
    [](raft_log_store& s) { s.replace_after(10, entries(4, 11, 1)); },
    [](raft_log_store& s) { s.save_snapshot(snapshot_at(30, 5)); },
    [](raft_log_store& s) { s.replace_after(30, entries(5, 31, 2)); },
  };
  return xs;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_new_store_starts_from_the_initial_map) {
  temp_dir dir;
  auto store = open_ok(dir.db());
  cluster::memory_log_store memory{initial_map()};
  check_same(*store, memory);
  BOOST_TEST(store->last_index() == 0u);
  BOOST_TEST(store->term_at(0) == 0u);
}

BOOST_AUTO_TEST_CASE(behaves_as_the_memory_store_and_survives_reopen) {
  temp_dir dir;
  cluster::memory_log_store memory{initial_map()};
  auto store = open_ok(dir.db());
  for (auto& apply : steps()) {
    apply(memory);
    apply(*store);
    check_same(*store, memory);
    store.reset();
    store = open_ok(dir.db());
    check_same(*store, memory);
  }
  BOOST_TEST(store->last_index() == 32u);
  BOOST_TEST(store->term() == 4u);
  BOOST_TEST((store->vote() == std::optional<core::node_id>{3}));
}

BOOST_AUTO_TEST_CASE(a_snapshot_keeps_later_entries_only_when_they_match) {
  temp_dir dir;
  auto store = open_ok(dir.db());
  store->replace_after(0, entries(1, 1, 3));
  store->replace_after(3, entries(2, 4, 3));
  store->save_snapshot(snapshot_at(4, 2));
  BOOST_TEST(store->last_index() == 6u);
  BOOST_CHECK_THROW(store->entry(4), std::out_of_range);
  BOOST_TEST(store->entry(5).term == 2u);
  BOOST_TEST(store->term_at(4) == 2u);
  // Index 5 holds term 2, not 7: the log disagrees and goes.
  store->save_snapshot(snapshot_at(5, 7));
  BOOST_TEST(store->last_index() == 5u);
  BOOST_TEST(store->term_at(5) == 7u);
  store.reset();
  store = open_ok(dir.db());
  BOOST_TEST(store->last_index() == 5u);
  BOOST_TEST(store->last_snapshot().last_term == 7u);
  BOOST_CHECK_THROW(store->entry(6), std::out_of_range);
  // Nothing of the dropped entries is left in the database.
  store.reset();
  rocksdb::DB* raw = nullptr;
  BOOST_REQUIRE(rocksdb::DB::Open(rocksdb::Options{}, dir.db(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db{raw};
  std::unique_ptr<rocksdb::Iterator> it{db->NewIterator({})};
  size_t entry_keys = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next())
    entry_keys += it->key().starts_with("e") ? 1 : 0;
  BOOST_TEST(entry_keys == 0u);
}

BOOST_AUTO_TEST_CASE(entries_that_do_not_follow_are_rejected) {
  temp_dir dir;
  auto store = open_ok(dir.db());
  BOOST_CHECK_THROW(store->replace_after(0, entries(1, 2, 2)),
                    std::invalid_argument);
  BOOST_CHECK_THROW(store->replace_after(1, entries(1, 2, 2)),
                    std::out_of_range);
  BOOST_TEST(store->last_index() == 0u);
}

namespace {

/// Opens the store's database directly and overwrites `key`.
void damage(const std::string& dir, const std::string& key,
            const std::string& value) {
  rocksdb::DB* raw = nullptr;
  BOOST_REQUIRE(rocksdb::DB::Open(rocksdb::Options{}, dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db{raw};
  BOOST_REQUIRE(db->Put(rocksdb::WriteOptions{}, key, value).ok());
}

std::string entry_key(uint64_t index) {
  std::string key = "e";
  for (int shift = 56; shift >= 0; shift -= 8)
    key.push_back(static_cast<char>((index >> shift) & 0xff));
  return key;
}

void check_corrupt_open(const std::string& dir, const std::string& what) {
  auto store = rocks_log_store::open(dir, initial_map());
  BOOST_REQUIRE(!store);
  BOOST_TEST((store.err().code() == errc::corrupt_record));
  BOOST_TEST(store.err().message().find(what) != std::string::npos,
             store.err().message());
}

} // namespace

BOOST_AUTO_TEST_CASE(a_corrupt_record_is_an_error_at_open) {
  struct damage_case {
    std::string key;
    std::string value;
    std::string what;
  };
  std::vector<damage_case> cases{
    {entry_key(2), std::string{"\x01\x02", 2}, "entry 2"},
    {entry_key(2), "", "entry 2"},
    {entry_key(9), std::string(26, '\x01'), "entry 4"},
    {"s", std::string{"\x03"} + std::string(40, '\0'), "snapshot"},
    {"s", std::string{"\x00"} + std::string(40, '\0'), "snapshot"},
    {"s", std::string{"\x01"} + std::string(24, '\0') + std::string(8, '\xff'),
     "snapshot"},
    {"m",
     std::string{"\x01"} + std::string(8, '\0') + "\x05" + std::string(8, '\0'),
     "term and vote"},
  };
  for (auto& c : cases) {
    temp_dir dir;
    {
      auto store = open_ok(dir.db());
      store->save_term_vote(3, 1);
      store->replace_after(0, entries(3, 1, 3));
    }
    damage(dir.db(), c.key, c.value);
    check_corrupt_open(dir.db(), c.what);
  }
}

BOOST_AUTO_TEST_CASE(an_entry_with_a_bad_command_is_an_error_at_open) {
  temp_dir dir;
  {
    auto store = open_ok(dir.db());
    store->replace_after(0, entries(1, 1, 1));
  }
  std::string value{"\x01"};
  value += std::string{"\x01\0\0\0\0\0\0\0", 8};
  value += std::string{"\x01\0\0\0\0\0\0\0", 8};
  value += "\x07";
  damage(dir.db(), entry_key(1), value);
  check_corrupt_open(dir.db(), "entry 1");
}

namespace {

std::string u64_le(uint64_t x) {
  std::string out;
  for (int shift = 0; shift < 64; shift += 8)
    out.push_back(static_cast<char>((x >> shift) & 0xff));
  return out;
}

/// A version 1 entry (written before add_node had an address): term 2,
/// `index`, and the command `tag` with `tail`.
std::string v1_entry(uint64_t index, char tag, const std::string& tail) {
  return "\x01" + u64_le(2) + u64_le(index) + tag + tail;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_log_of_format_1_still_loads) {
  temp_dir dir;
  open_ok(dir.db()); // creates the database
  // A version 1 snapshot: index 0, term 0, epoch 2, one shard owned by
  // node 1 (no replicas, no in-sync set), members 1 (active) and 4
  // (leaving); members had no address.
  auto snap = "\x01" + u64_le(0) + u64_le(0) + u64_le(2) + u64_le(1) +
              u64_le(1) + u64_le(0) + u64_le(0) + u64_le(2) + u64_le(1) + '\0' +
              u64_le(4) + '\1';
  damage(dir.db(), "s", snap);
  damage(dir.db(), entry_key(1), v1_entry(1, '\x01', u64_le(5)));
  damage(dir.db(), entry_key(2), v1_entry(2, '\x02', u64_le(4)));
  auto store = open_ok(dir.db());
  auto map = store->last_snapshot().state;
  BOOST_TEST(map.epoch == 2u);
  BOOST_REQUIRE(map.members.size() == 2u);
  BOOST_TEST((map.find(4)->state == cluster::member::status::leaving));
  BOOST_TEST(map.find(4)->address.empty());
  BOOST_REQUIRE(store->last_index() == 2u);
  BOOST_TEST((store->entry(1).cmd == cluster::command{cluster::add_node{5}}));
  BOOST_TEST(std::get<cluster::add_node>(store->entry(1).cmd).address.empty());
  BOOST_TEST(
    (store->entry(2).cmd == cluster::command{cluster::remove_node{4}}));
  // Written again, it reads back the same, in the current format.
  store->save_snapshot(store->last_snapshot());
  store.reset();
  auto again = open_ok(dir.db());
  BOOST_TEST((again->last_snapshot().state == map));
}

BOOST_AUTO_TEST_CASE(an_add_node_with_an_address_is_no_format_1_entry) {
  temp_dir dir;
  open_ok(dir.db());
  damage(dir.db(), entry_key(1),
         v1_entry(1, '\x05', u64_le(5) + u64_le(1) + "x"));
  check_corrupt_open(dir.db(), "entry 1");
}

BOOST_AUTO_TEST_CASE(an_address_longer_than_its_record_is_an_error) {
  temp_dir dir;
  {
    auto store = open_ok(dir.db());
    store->replace_after(
      0, std::vector<log_entry>{{1, 1, cluster::add_node{5, "127.0.0.1:1"}}});
  }
  damage(dir.db(), entry_key(1),
         "\x02" + u64_le(1) + u64_le(1) + '\x05' + u64_le(5) + u64_le(99) +
           "127.0.0.1:1");
  check_corrupt_open(dir.db(), "entry 1");
}

BOOST_AUTO_TEST_CASE(a_directory_that_cannot_be_created_is_an_error) {
  temp_dir dir;
  std::ofstream{dir.path / "file"} << "x";
  auto store =
    rocks_log_store::open((dir.path / "file" / "raft").string(), initial_map());
  BOOST_REQUIRE(!store);
  BOOST_TEST((store.err().code() == errc::io_error));
  BOOST_TEST(store.err().message().find("cannot open") != std::string::npos,
             store.err().message());
}
