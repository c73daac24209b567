#define BOOST_TEST_MODULE replication
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "core/recurrence.hpp"
#include "core/time_range.hpp"
#include "storage/fault_fs.hpp"
#include "storage/record_damage.hpp"
#include "storage/replication_codec.hpp"
#include "storage/rocks_task_store.hpp"
#include "test_support.hpp"

using namespace dally;
using namespace dally::storage;
using core::errc;
using dally::storage::test::temp_dir;

namespace {

constexpr int64_t t0 = 1'704'067'200'000; // 2024-01-01T00:00:00Z

template<class T>
T ok(core::result<T> x) {
  if (!x)
    BOOST_FAIL("unexpected error: " << x.err());
  return std::move(x).value();
}

void check_error(const core::error& err, errc code, const std::string& part) {
  BOOST_TEST(to_string(err.code()) == to_string(code), err);
  BOOST_TEST(err.message().find(part) != std::string::npos,
             "message '" << err.message() << "' lacks '" << part << "'");
}

task_record make_task(core::task_id id, int64_t due_ms) {
  task_record rec;
  rec.task.id = id;
  rec.task.topic = "jobs";
  rec.task.payload = "payload of " + std::to_string(id);
  rec.task.due_ms = due_ms;
  rec.task.recurrence = ok(core::recurrence::at(
    std::clamp<int64_t>(due_ms, core::min_time_ms, core::max_time_ms)));
  return rec;
}

task_record in_flight(task_record rec, int64_t lease_deadline_ms) {
  rec.state = task_state::in_flight;
  rec.lease_deadline_ms = lease_deadline_ms;
  ++rec.task.attempt;
  return rec;
}

/// Every family of the store at `path`, key -> value, read with plain
/// RocksDB (read-only, so the store may be open).
using store_dump = std::map<std::string, std::map<std::string, std::string>>;

store_dump dump(const std::string& path) {
  rocksdb::Options options;
  std::vector<std::string> names;
  auto status = rocksdb::DB::ListColumnFamilies(options, path, &names);
  BOOST_REQUIRE_MESSAGE(status.ok(), status.ToString());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const auto& name : names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  status =
    rocksdb::DB::OpenForReadOnly(options, path, descriptors, &handles, &raw);
  BOOST_REQUIRE_MESSAGE(status.ok(), status.ToString());
  std::unique_ptr<rocksdb::DB> db{raw};
  store_dump out;
  for (auto* handle : handles) {
    auto& family = out[handle->GetName()];
    std::unique_ptr<rocksdb::Iterator> it{
      db->NewIterator(rocksdb::ReadOptions{}, handle)};
    for (it->SeekToFirst(); it->Valid(); it->Next())
      family[it->key().ToString()] = it->value().ToString();
    BOOST_REQUIRE(it->status().ok());
  }
  for (auto* handle : handles)
    BOOST_REQUIRE(db->DestroyColumnFamilyHandle(handle).ok());
  return out;
}

/// Reports each difference between the dumps, as "family/key".
void check_same_dump(const store_dump& a, const store_dump& b,
                     const std::string& when) {
  BOOST_TEST_CONTEXT(when) {
    std::set<std::string> families;
    for (const auto& [name, _] : a)
      families.insert(name);
    for (const auto& [name, _] : b)
      families.insert(name);
    for (const auto& name : families) {
      auto empty = std::map<std::string, std::string>{};
      const auto& x = a.count(name) ? a.at(name) : empty;
      const auto& y = b.count(name) ? b.at(name) : empty;
      size_t differences = 0;
      for (const auto& [key, value] : x)
        if (auto i = y.find(key); i == y.end() || i->second != value)
          ++differences;
      for (const auto& [key, _] : y)
        if (!x.count(key))
          ++differences;
      BOOST_TEST(differences == 0u, "family " << name << ": " << differences
                                              << " of " << x.size() << " / "
                                              << y.size() << " differ");
    }
  }
}

/// A primary store whose every commit is encoded as a ReplicationEntry
/// (as bytes), and a replica, an empty store of the same shard, that
/// applies them in order.
class replicated_pair {
public:
  /// `replica_deferred_bound`: the replica's max_deferred_index.
  explicit replicated_pair(size_t replica_deferred_bound = 4)
    : fs_(std::make_shared<fault_fs>()) {
    primary_opts_ = options("primary");
    primary_opts_.file_system = fs_;
    primary_opts_.on_commit = [this](const committed_batch& batch) {
      v1::ReplicationEntry entry;
      auto err = to_entry(batch, entry);
      BOOST_TEST(!err, err);
      entries_.push_back(entry.SerializeAsString());
    };
    replica_opts_ = options("replica");
    replica_opts_.max_deferred_index = replica_deferred_bound;
    replica_ = open(replica_opts_);
    primary_ = open(primary_opts_);
  }

  ~replicated_pair() {
    primary_.reset();
    fs_->set_active(true);
  }

  rocks_task_store& primary() { return *primary_; }

  rocks_task_store& replica() { return *replica_; }

  const store_options& primary_options() const { return primary_opts_; }

  const std::vector<std::string>& entries() const { return entries_; }

  void commit(const write_batch& batch) {
    auto err = primary_->commit(batch);
    BOOST_REQUIRE_MESSAGE(!err, "commit failed: " << err);
  }

  /// Applies the entries the replica has not seen yet.
  void catch_up() {
    for (; applied_ < entries_.size(); ++applied_) {
      v1::ReplicationEntry entry;
      BOOST_REQUIRE(entry.ParseFromString(entries_[applied_]));
      auto batch = ok(from_entry(entry));
      auto err = replica_->apply(batch);
      BOOST_REQUIRE_MESSAGE(!err, "entry " << applied_ << ": " << err);
    }
  }

  /// Catches up, then compares both stores: every family byte for byte
  /// (records with their stamps, due index, keys, dead letters,
  /// quarantine, meta), the meta in memory and the quarantine count.
  void check_same(const std::string& when) {
    catch_up();
    BOOST_TEST_CONTEXT(when) {
      BOOST_TEST((primary_ == nullptr || primary_->meta() == replica_->meta()));
      if (primary_ != nullptr)
        BOOST_TEST(primary_->stats().quarantined ==
                   replica_->stats().quarantined);
    }
    check_same_dump(dump(primary_opts_.path), dump(replica_path()), when);
  }

  /// A clean shutdown and a new start of the primary.
  void restart() {
    close();
    primary_ = open(primary_opts_);
  }

  void close() { primary_.reset(); }

  /// The primary's process dies: what it wrote stays, its close writes
  /// nothing.
  void kill() {
    fs_->set_active(false);
    primary_.reset();
    fs_->set_active(true);
  }

  void reopen() { primary_ = open(primary_opts_); }

  void close_replica() { replica_.reset(); }

  void restart_replica() {
    replica_.reset();
    replica_ = open(replica_opts_);
  }

  std::string replica_path() const { return dir_.str("replica"); }

private:
  store_options options(const std::string& name) const {
    store_options opts;
    opts.path = dir_.str(name);
    opts.shard = 1;
    opts.shard_count = 2;
    opts.write_buffer_bytes = 1 << 20;
    opts.block_cache_bytes = 1 << 20;
    // Small, so that commits write deferred entries as they age.
    opts.max_deferred_index = 4;
    return opts;
  }

  static std::unique_ptr<rocks_task_store> open(const store_options& opts) {
    auto store = rocks_task_store::open(opts);
    if (!store)
      BOOST_FAIL("open failed: " << store.err());
    return std::move(store).value();
  }

  temp_dir dir_;
  std::shared_ptr<fault_fs> fs_;
  store_options primary_opts_;
  store_options replica_opts_;
  std::unique_ptr<rocks_task_store> primary_;
  std::unique_ptr<rocks_task_store> replica_;
  std::vector<std::string> entries_;
  size_t applied_ = 0;
};

/// Schedules `n` tasks due from `due_ms` on, their index entries deferred
/// (as a shard does for tasks in its window) where `defer`, every third
/// with an idempotency key.
std::vector<task_record> schedule(replicated_pair& pair, int n, int64_t due_ms,
                                  bool defer) {
  std::vector<task_record> out;
  write_batch batch;
  for (int i = 0; i < n; ++i) {
    auto rec = make_task(pair.primary().allocate_id(), due_ms + 1000 * i);
    batch.put(rec);
    std::get<write_batch::put_op>(batch.ops().back()).defer_index = defer;
    if (i % 3 == 0)
      batch.put_key("key-" + std::to_string(rec.task.id),
                    idempotency_entry{rec.task.id, due_ms + 60'000,
                                      content_digest(rec.task)});
    out.push_back(rec);
  }
  pair.commit(batch);
  return out;
}

/// The ops of `entries`, by kind (a deferred put counts as "put deferred").
std::set<std::string> op_kinds(const std::vector<std::string>& entries) {
  std::set<std::string> out;
  for (const auto& bytes : entries) {
    v1::ReplicationEntry entry;
    BOOST_REQUIRE(entry.ParseFromString(bytes));
    for (const auto& op : entry.ops()) {
      const auto* field =
        v1::ReplicationOp::descriptor()->FindFieldByNumber(op.op_case());
      BOOST_REQUIRE(field != nullptr);
      auto name = field->name();
      if (op.has_put() && op.put().index_deferred())
        name += " deferred";
      out.insert(name);
    }
  }
  return out;
}

/// A committed batch with every kind of op, as a store would report it.
struct every_op {
  write_batch batch;
  std::vector<size_t> index_written{2};
  std::vector<due_key> index_writes{{t0 + 5, 25}, {t0 + 6, 29}};
  stamp first{7, 50};
  shard_meta meta{1, 4, 100, 7, 0, 200, 13, t0 + 9};

  every_op() {
    batch.put(make_task(5, t0));
    batch.put(make_task(9, t0 + 1));
    batch.put(make_task(13, t0 + 2));
    std::get<write_batch::put_op>(batch.ops()[1]).defer_index = true;
    // Asked to defer, written at once (index_written).
    std::get<write_batch::put_op>(batch.ops()[2]).defer_index = true;
    auto before = make_task(17, t0 + 3);
    batch.replace(before, in_flight(before, t0 + 30'000));
    batch.erase(make_task(21, t0 + 4));
    auto dying = make_task(33, t0 + 5);
    dying.task.attempt = 5;
    batch.bury(dying, t0 + 7, "attempts used up");
    batch.revive(37, make_task(37, t0 + 8));
    batch.drop_dead(41);
    batch.put_key(std::string{"k\0\xff", 3}, idempotency_entry{5, t0 + 60, 99});
    batch.erase_key("old-key");
    batch.quarantine(record_family::tasks, encode_task_key(45),
                     std::string{"\x08\x2d\xff\0junk", 8}, "bad bytes",
                     {{t0 + 1, 45}, {t0 + 2, 45}});
    batch.quarantine(record_family::due, "short", "", "due key has 5 bytes");
    batch.quarantine(record_family::keys, "key", "\xff", "bad entry");
    batch.quarantine(record_family::dead, encode_task_key(49), "x", "bad");
    batch.index({t0 + 4, 53});
    batch.set_urgent(false);
    meta.last_seq = first.seq + batch.size() + index_writes.size() - 1;
  }

  committed_batch view() const {
    return {batch, index_written, index_writes, first, meta};
  }

  /// What decoding the entry gives: the store's decisions in the ops, the
  /// stamps in the records.
  write_batch decoded() const {
    auto out = batch;
    auto seq = first.seq;
    for (auto& op : out.ops()) {
      auto at = stamp{first.epoch, seq++};
      std::visit(
        [at](auto& x) {
          using op_type = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<op_type, write_batch::put_op> ||
                        std::is_same_v<op_type, write_batch::revive_op>)
            x.rec.stamp = at;
          else if constexpr (std::is_same_v<op_type, write_batch::replace_op>)
            x.after.stamp = at;
          else if constexpr (std::is_same_v<op_type, write_batch::bury_op>)
            x.dead.record.stamp = at;
        },
        op);
    }
    std::get<write_batch::put_op>(out.ops()[2]).defer_index = false;
    for (const auto& key : index_writes)
      out.index(key);
    return out;
  }
};

v1::ReplicationEntry entry_of(const committed_batch& batch) {
  v1::ReplicationEntry entry;
  auto err = to_entry(batch, entry);
  BOOST_REQUIRE_MESSAGE(!err, err);
  return entry;
}

} // namespace

BOOST_AUTO_TEST_SUITE(replication_tests)

BOOST_AUTO_TEST_CASE(every_op_kind_survives_the_codec) {
  every_op in;
  std::set<size_t> kinds;
  for (const auto& op : in.batch.ops())
    kinds.insert(op.index());
  // A new kind of op must be added here (and to the codec).
  BOOST_TEST(kinds.size() == std::variant_size_v<write_batch::op>);
  auto bytes = entry_of(in.view()).SerializeAsString();
  v1::ReplicationEntry parsed;
  BOOST_REQUIRE(parsed.ParseFromString(bytes));
  BOOST_TEST(parsed.ops_size() == static_cast<int>(in.batch.size() + 2));
  auto out = ok(from_entry(parsed));
  BOOST_TEST((out.first == in.first));
  BOOST_TEST((out.meta == in.meta));
  BOOST_TEST(!out.batch.urgent());
  auto expected = in.decoded();
  BOOST_REQUIRE(out.batch.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    BOOST_TEST((out.batch.ops()[i] == expected.ops()[i]), "op " << i);
  // Encoding the decoded batch again gives the same bytes.
  BOOST_TEST(entry_of(out.view()).SerializeAsString() == bytes);
}

BOOST_AUTO_TEST_CASE(entries_that_do_not_decode_are_refused) {
  every_op in;
  auto good = entry_of(in.view());
  auto missing_meta = good;
  missing_meta.clear_meta();
  check_error(from_entry(missing_meta).err(), errc::corrupt_record,
              "meta missing");
  auto wrong_range = good;
  wrong_range.set_last_seq(good.last_seq() + 1);
  check_error(from_entry(wrong_range).err(), errc::corrupt_record,
              "do not match the meta");
  auto fewer_ops = good;
  fewer_ops.mutable_ops()->RemoveLast();
  check_error(from_entry(fewer_ops).err(), errc::corrupt_record,
              "do not match the meta");
  auto empty_op = good;
  empty_op.mutable_ops(3)->Clear();
  check_error(from_entry(empty_op).err(), errc::corrupt_record,
              "op 3 (seq 53): no op");
  auto bad_record = good;
  bad_record.mutable_ops(0)->mutable_put()->mutable_record()->set_state(
    v1::TASK_STATE_UNSPECIFIED);
  check_error(from_entry(bad_record).err(), errc::corrupt_record,
              "op 0 (seq 50): TaskRecord field state");
  auto no_record = good;
  no_record.mutable_ops(3)->mutable_replace()->clear_after();
  check_error(from_entry(no_record).err(), errc::corrupt_record,
              "op 3 (seq 53): record missing");
  auto bad_family = good;
  for (auto& op : *bad_family.mutable_ops())
    if (op.has_quarantine())
      op.mutable_quarantine()->set_family(
        static_cast<v1::ReplicationOp::Family>(9));
  check_error(from_entry(bad_family).err(), errc::corrupt_record,
              "unknown quarantine family 9");
}

BOOST_AUTO_TEST_CASE(a_replica_applies_only_the_next_entry_of_its_shard) {
  temp_dir dir;
  std::vector<replicated_batch> entries;
  store_options opts;
  opts.path = dir.str("primary");
  opts.on_commit = [&entries](const committed_batch& batch) {
    entries.push_back(ok(from_entry(entry_of(batch))));
  };
  auto primary = ok(rocks_task_store::open(opts));
  write_batch batch;
  batch.put(make_task(primary->allocate_id(), t0));
  BOOST_REQUIRE(!primary->commit(batch));
  batch.clear();
  batch.put(make_task(primary->allocate_id(), t0));
  BOOST_REQUIRE(!primary->commit(batch));
  BOOST_REQUIRE(entries.size() == 3u); // the new store's meta, two commits
  BOOST_TEST(entries[0].batch.empty());
  BOOST_TEST(entries[1].first.seq == 1u);
  BOOST_TEST(entries[2].first.seq == 2u);

  store_options other = opts;
  other.path = dir.str("other shard");
  other.shard = 1;
  other.shard_count = 2;
  other.on_commit = nullptr;
  check_error(ok(rocks_task_store::open(other))->apply(entries[1]),
              errc::invalid_request, "of shard 0 of 1 does not apply");

  store_options copy = opts;
  copy.path = dir.str("replica");
  copy.on_commit = nullptr;
  auto replica = ok(rocks_task_store::open(copy));
  BOOST_REQUIRE(!replica->apply(entries[0]));
  check_error(replica->apply(entries[2]), errc::invalid_request,
              "with seqs 2 to 2 (1 ops) does not follow seq 0");
  BOOST_TEST(replica->meta().last_seq == 0u);
  BOOST_TEST(!ok(replica->get(entries[2].meta.next_local_id - 1)));
  BOOST_REQUIRE(!replica->apply(entries[1]));
  check_error(replica->apply(entries[1]), errc::invalid_request,
              "does not follow seq 1");
  BOOST_REQUIRE(!replica->set_epoch(3));
  check_error(replica->apply(entries[2]), errc::stale_epoch,
              "epoch 0 is older than the current epoch 3");
  BOOST_TEST(replica->meta().last_seq == 1u);
}

// The history of a store, replayed from its entries on an empty store,
// gives the same store. A primary goes through schedules, fires, acks,
// nacks, burials, kicks, idempotency keys and their expiry, deferred index
// entries written later, a crash, a damaged record quarantined when the
// store opens and one when it is read, and clean restarts.
BOOST_AUTO_TEST_CASE(a_store_history_replays_on_an_empty_store) {
  replicated_pair pair;
  auto& p = pair;
  auto now = t0;
  auto a = schedule(p, 9, now + 1000, true);
  auto b = schedule(p, 6, now + 500, false);
  p.check_same("schedules");

  // Fires (in place, deferred entries included), then acks of fired and
  // unfired tasks, and a nack that moves an entry.
  write_batch batch;
  // a[0] to a[4] are indexed (the bound of 4 wrote the oldest), a[5] to
  // a[8] deferred.
  for (int i : {0, 1, 2, 6})
    batch.replace(a[i], in_flight(a[i], now + 30'000));
  batch.replace(b[0], in_flight(b[0], now + 30'000));
  p.commit(batch);
  batch.clear();
  batch.erase(in_flight(a[0], now + 30'000));
  batch.erase(a[3]);
  batch.erase(a[7]);
  batch.erase(b[1]);
  auto nacked = a[1];
  nacked.task.attempt = 1;
  nacked.retry_at_ms = now + 90'000;
  batch.replace(in_flight(a[1], now + 30'000), nacked);
  p.commit(batch);
  p.check_same("fires, acks, nacks");

  // Burials, a kick, a drop; keys put, erased and expired.
  batch.clear();
  batch.bury(in_flight(a[2], now + 30'000), now + 31'000, "attempts used up");
  batch.bury(b[2], now + 31'000, "bad payload");
  batch.bury(a[5], now + 31'000, "revoked by hand");
  batch.erase_key("key-" + std::to_string(b[0].task.id));
  batch.put_key("short-lived", idempotency_entry{b[3].task.id, now + 10, 1});
  p.commit(batch);
  batch.clear();
  auto kicked = a[2];
  kicked.task.attempt = 0;
  kicked.task.due_ms = now + 40'000;
  batch.revive(kicked.task.id, kicked);
  batch.drop_dead(b[2].task.id);
  p.commit(batch);
  BOOST_TEST(ok(p.primary().expire_keys(now + 200'000, 100)) >= 3u);
  p.check_same("burials, kicks, keys");

  // A new epoch and fire horizon; ids skipped, so that a deferral is
  // refused; then every deferred entry written.
  BOOST_REQUIRE(!p.primary().set_epoch(2));
  p.primary().raise_fire_horizon(now + 5'000);
  for (int i = 0; i < 40; ++i)
    p.primary().allocate_id();
  schedule(p, 3, now + 2'000, true);
  p.check_same("epoch, horizon, a refused deferral");
  schedule(p, 2, now + 2'500, true);
  BOOST_REQUIRE(p.primary().meta().unindexed_from != 0u);
  BOOST_REQUIRE(!p.primary().index_deferred());
  BOOST_TEST(p.primary().meta().unindexed_from == 0u);
  p.check_same("index_deferred");

  // A crash with deferred entries open, one of whose records is damaged:
  // the reopened store quarantines it and serves the rest from memory.
  auto d = schedule(p, 3, now + 3'000, true);
  BOOST_REQUIRE(p.primary().meta().unindexed_from != 0u);
  p.check_same("before the crash");
  p.kill();
  BOOST_REQUIRE(!damage_task_record(p.primary_options(), d[1].task.id,
                                    record_damage::garbage));
  p.reopen();
  BOOST_TEST(p.primary().quarantined().size() == 1u);
  p.check_same("reopened after a crash");
  batch.clear();
  batch.erase(d[0]);
  batch.replace(d[2], in_flight(d[2], now + 60'000));
  p.commit(batch);
  auto e = schedule(p, 3, now + 4'000, true);
  p.check_same("after the crash");

  // A clean restart, then a damaged record met by reads.
  p.restart();
  p.check_same("restarted");
  p.close();
  BOOST_REQUIRE(!damage_task_record(p.primary_options(), e[0].task.id,
                                    record_damage::wrong_id));
  BOOST_REQUIRE(!damage_task_record(p.primary_options(), a[6].task.id,
                                    record_damage::invalid_field));
  p.reopen();
  check_error(p.primary().get(e[0].task.id).err(), errc::corrupt_record,
              "moved to quarantine");
  std::vector<core::task_id> ids{a[6].task.id, a[8].task.id};
  BOOST_TEST(ok(p.primary().get_many(ids)).size() == 1u);
  p.check_same("quarantined by reads");

  // The history held every kind of op.
  BOOST_TEST((op_kinds(p.entries()) ==
              std::set<std::string>{"put", "put deferred", "replace", "erase",
                                    "bury", "revive", "drop_dead", "put_key",
                                    "erase_key", "quarantine", "index"}));
  // Both closed: the primary's close writes its deferred entries.
  p.close();
  p.catch_up();
  p.close_replica();
  check_same_dump(dump(p.primary_options().path), dump(p.replica_path()),
                  "both closed");
}

// A replica that defers no index entry writes each one as it applies the
// put, so its clean close adds no op of its own and it can go on applying
// after a restart. Its index holds entries the primary still defers, so
// the stores are compared once the primary's close has written those.
BOOST_AUTO_TEST_CASE(a_replica_that_defers_nothing_keeps_in_step) {
  replicated_pair p{0};
  auto now = t0;
  auto a = schedule(p, 6, now + 1000, true);
  p.catch_up();
  BOOST_TEST((p.primary().meta() == p.replica().meta()));
  p.restart_replica();
  write_batch batch;
  batch.replace(a[4], in_flight(a[4], now + 30'000));
  batch.erase(a[5]);
  batch.bury(a[0], now + 31'000, "attempts used up");
  p.commit(batch);
  p.catch_up();
  p.kill();
  p.reopen();
  schedule(p, 3, now + 2000, true);
  p.restart_replica();
  p.catch_up();
  BOOST_TEST((p.primary().meta() == p.replica().meta()));
  p.close();
  p.catch_up();
  p.close_replica();
  check_same_dump(dump(p.primary_options().path), dump(p.replica_path()),
                  "both closed");
}

BOOST_AUTO_TEST_SUITE_END()
