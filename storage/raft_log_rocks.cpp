#include "storage/raft_log_rocks.hpp"

#include <limits>
#include <stdexcept>
#include <string_view>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

namespace dally::storage {

using cluster::cluster_map;
using cluster::command;
using cluster::log_entry;
using cluster::node_id;
using cluster::snapshot;
using core::errc;

namespace {

/// The first byte of every value. Version 2 added the members' addresses
/// to the snapshot and an add_node with an address to the entries; a
/// version 1 value still reads (its members and add_nodes without an
/// address), a value of any other version is rejected.
constexpr uint8_t format_version = 2;
constexpr uint8_t oldest_version = 1;

/// Keys: "m" term and vote, "s" the snapshot, "e" + big-endian index an
/// entry (so entries sort by index and "f" bounds them all).
const std::string meta_key = "m";
const std::string snapshot_key = "s";
const std::string entries_end = "f";

std::string entry_key(uint64_t index) {
  std::string key = "e";
  for (int shift = 56; shift >= 0; shift -= 8)
    key.push_back(static_cast<char>((index >> shift) & 0xff));
  return key;
}

class writer {
public:
  writer() { out_.push_back(static_cast<char>(format_version)); }

  void u8(uint8_t x) { out_.push_back(static_cast<char>(x)); }

  void u64(uint64_t x) {
    for (int shift = 0; shift < 64; shift += 8)
      out_.push_back(static_cast<char>((x >> shift) & 0xff));
  }

  void ids(const std::vector<node_id>& xs) {
    u64(xs.size());
    for (auto x : xs)
      u64(x);
  }

  void text(const std::string& x) {
    u64(x.size());
    out_ += x;
  }

  std::string take() { return std::move(out_); }

private:
  std::string out_;
};

/// Reads what writer wrote; every read checks the length first and a
/// failed read leaves `ok()` false for good.
class reader {
public:
  explicit reader(std::string_view in) : in_(in) {
    version_ = u8();
    ok_ = version_ >= oldest_version && version_ <= format_version;
  }

  bool ok() const noexcept { return ok_; }

  /// The format version the value was written in.
  uint8_t version() const noexcept { return version_; }

  bool done() const noexcept { return ok_ && pos_ == in_.size(); }

  uint8_t u8() {
    if (!ok_ || pos_ >= in_.size())
      return fail();
    return static_cast<uint8_t>(in_[pos_++]);
  }

  uint64_t u64() {
    if (!ok_ || in_.size() - pos_ < 8)
      return fail();
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i)
      x |= uint64_t{static_cast<uint8_t>(in_[pos_++])} << (8 * i);
    return x;
  }

  node_id id() {
    auto x = u64();
    if (x > std::numeric_limits<node_id>::max())
      return static_cast<node_id>(fail());
    return static_cast<node_id>(x);
  }

  /// A count of items of at least `item_size` bytes each: never more than
  /// the bytes left can hold.
  size_t count(size_t item_size) {
    auto n = u64();
    if (!ok_ || n > (in_.size() - pos_) / item_size)
      return fail();
    return static_cast<size_t>(n);
  }

  std::vector<node_id> ids() {
    std::vector<node_id> xs(count(8));
    for (auto& x : xs)
      x = id();
    return xs;
  }

  std::string text() {
    auto n = count(1);
    std::string x{in_.substr(pos_, n)};
    pos_ += n;
    return x;
  }

  /// Marks the input as invalid (a value no encoding produces).
  void reject() noexcept { ok_ = false; }

private:
  uint8_t fail() {
    ok_ = false;
    return 0;
  }

  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
  uint8_t version_ = 0;
};

void put_command(writer& out, const command& cmd) {
  if (auto* add = std::get_if<cluster::add_node>(&cmd)) {
    out.u8(5);
    out.u64(add->node);
    out.text(add->address);
  } else if (auto* remove = std::get_if<cluster::remove_node>(&cmd)) {
    out.u8(2);
    out.u64(remove->node);
  } else if (std::holds_alternative<cluster::reassign>(cmd)) {
    out.u8(3);
  } else if (auto* create = std::get_if<cluster::create_map>(&cmd)) {
    out.u8(4);
    out.u64(create->shard_count);
    out.ids(create->nodes);
  } else {
    out.u8(0);
  }
}

command get_command(reader& in) {
  switch (in.u8()) {
    case 0:
      return cluster::noop{};
    case 1:
      return cluster::add_node{in.id()};
    case 5: {
      if (in.version() < 2)
        in.reject();
      auto id = in.id();
      return cluster::add_node{id, in.text()};
    }
    case 2:
      return cluster::remove_node{in.id()};
    case 3:
      return cluster::reassign{};
    case 4: {
      auto count = in.u64();
      if (count > std::numeric_limits<uint32_t>::max())
        in.reject();
      auto nodes = in.ids();
      return cluster::create_map{static_cast<uint32_t>(count),
                                 std::move(nodes)};
    }
    default:
      in.reject();
      return cluster::noop{};
  }
}

std::string encode_entry(const log_entry& x) {
  writer out;
  out.u64(x.term);
  out.u64(x.index);
  put_command(out, x.cmd);
  return out.take();
}

std::string encode_meta(uint64_t term, std::optional<node_id> vote) {
  writer out;
  out.u64(term);
  out.u8(vote ? 1 : 0);
  out.u64(vote.value_or(0));
  return out.take();
}

std::string encode_snapshot(const snapshot& x) {
  writer out;
  out.u64(x.last_index);
  out.u64(x.last_term);
  out.u64(x.state.epoch);
  out.u64(x.state.shards.size());
  for (auto& shard : x.state.shards) {
    out.u64(shard.owner);
    out.ids(shard.replicas);
    out.ids(shard.in_sync);
  }
  out.u64(x.state.members.size());
  for (auto& m : x.state.members) {
    out.u64(m.id);
    out.u8(static_cast<uint8_t>(m.state));
    out.text(m.address);
  }
  return out.take();
}

std::optional<snapshot> decode_snapshot(std::string_view value) {
  reader in{value};
  snapshot x;
  x.last_index = in.u64();
  x.last_term = in.u64();
  x.state.epoch = in.u64();
  x.state.shards.resize(in.count(24));
  for (auto& shard : x.state.shards) {
    shard.owner = in.id();
    shard.replicas = in.ids();
    shard.in_sync = in.ids();
  }
  x.state.members.resize(in.count(9));
  for (auto& m : x.state.members) {
    m.id = in.id();
    auto state = in.u8();
    if (state > 1)
      return std::nullopt;
    m.state = static_cast<cluster::member::status>(state);
    if (in.version() >= 2)
      m.address = in.text();
  }
  if (!in.done())
    return std::nullopt;
  return x;
}

std::optional<log_entry> decode_entry(std::string_view value) {
  reader in{value};
  log_entry x;
  x.term = in.u64();
  x.index = in.u64();
  x.cmd = get_command(in);
  if (!in.done())
    return std::nullopt;
  return x;
}

core::error from_status(const rocksdb::Status& status,
                        const std::string& what) {
  auto message = "raft log: " + what + ": " + status.ToString();
  if (status.IsNoSpace())
    return core::error{errc::no_space, std::move(message)};
  if (status.IsCorruption())
    return core::error{errc::corrupt_record, std::move(message)};
  return core::error{errc::io_error, std::move(message)};
}

core::error corrupt(const std::string& what) {
  return core::error{errc::corrupt_record, "raft log: corrupt " + what};
}

void write_synced(rocksdb::DB& db, rocksdb::WriteBatch& batch,
                  const char* what) {
  rocksdb::WriteOptions options;
  options.sync = true;
  auto status = db.Write(options, &batch);
  if (!status.ok())
    throw std::runtime_error("raft log: " + std::string{what} +
                             " failed: " + status.ToString());
}

} // namespace

rocks_log_store::rocks_log_store(std::unique_ptr<rocksdb::DB> db)
  : db_(std::move(db)), mem_(cluster_map{}) {
  // nop
}

rocks_log_store::~rocks_log_store() = default;

core::result<std::unique_ptr<rocks_log_store>>
rocks_log_store::open(const std::string& dir, cluster_map initial) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  auto status = rocksdb::DB::Open(options, dir, &raw);
  if (!status.ok())
    return from_status(status, "cannot open " + dir);
  std::unique_ptr<rocks_log_store> store{
    new rocks_log_store{std::unique_ptr<rocksdb::DB>{raw}}};
  if (auto err = store->load(std::move(initial)))
    return core::error{err.code(), err.message() + " (in " + dir + ")"};
  return store;
}

core::error rocks_log_store::load_term_vote() {
  std::string value;
  auto status = db_->Get(rocksdb::ReadOptions{}, meta_key, &value);
  if (status.IsNotFound())
    return {};
  if (!status.ok())
    return from_status(status, "reading term and vote");
  reader in{value};
  auto term = in.u64();
  auto has_vote = in.u8();
  auto vote = in.id();
  if (!in.done() || has_vote > 1)
    return corrupt("term and vote");
  mem_.save_term_vote(term, has_vote == 1 ? std::optional{vote} : std::nullopt);
  return {};
}

core::error rocks_log_store::load(cluster_map initial) {
  if (auto err = load_term_vote())
    return err;
  std::string value;
  auto status = db_->Get(rocksdb::ReadOptions{}, snapshot_key, &value);
  if (status.ok()) {
    auto snap = decode_snapshot(value);
    if (!snap)
      return corrupt("snapshot");
    mem_.save_snapshot(*snap);
  } else if (!status.IsNotFound()) {
    return from_status(status, "reading the snapshot");
  } else if (mem_.term() != 0 || mem_.vote() || has_entries()) {
    return corrupt("store: the snapshot is missing");
  } else {
    cluster::snapshot first;
    first.state = std::move(initial);
    rocksdb::WriteOptions options;
    options.sync = true;
    status = db_->Put(options, snapshot_key, encode_snapshot(first));
    if (!status.ok())
      return from_status(status, "writing the initial snapshot");
    mem_.save_snapshot(first);
  }
  return load_entries();
}

bool rocks_log_store::has_entries() const {
  std::unique_ptr<rocksdb::Iterator> it{
    db_->NewIterator(rocksdb::ReadOptions{})};
  it->Seek(entry_key(0));
  return it->Valid() && it->key().ToStringView() < entries_end;
}

core::error rocks_log_store::load_entries() {
  std::unique_ptr<rocksdb::Iterator> it{
    db_->NewIterator(rocksdb::ReadOptions{})};
  for (it->Seek(entry_key(0)); it->Valid(); it->Next()) {
    auto key = it->key().ToStringView();
    if (key >= entries_end)
      break;
    auto expected = mem_.last_index() + 1;
    if (key != entry_key(expected))
      return corrupt("log: entry " + std::to_string(expected) +
                     " missing or out of place");
    auto entry = decode_entry(it->value().ToStringView());
    if (!entry || entry->index != expected)
      return corrupt("entry " + std::to_string(expected));
    mem_.replace_after(expected - 1, std::span{&*entry, 1});
  }
  if (!it->status().ok())
    return from_status(it->status(), "reading the log");
  return {};
}

void rocks_log_store::save_term_vote(uint64_t term,
                                     std::optional<node_id> vote) {
  rocksdb::WriteBatch batch;
  batch.Put(meta_key, encode_meta(term, vote));
  write_synced(*db_, batch, "saving term and vote");
  mem_.save_term_vote(term, vote);
}

void rocks_log_store::replace_after(uint64_t index,
                                    std::span<const log_entry> entries) {
  if (index < last_snapshot().last_index || index > last_index())
    throw std::out_of_range("raft log: cannot append after " +
                            std::to_string(index));
  rocksdb::WriteBatch batch;
  batch.DeleteRange(entry_key(index + 1), entries_end);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].index != index + 1 + i)
      throw std::invalid_argument(
        "raft log: entry " + std::to_string(entries[i].index) +
        " does not follow " + std::to_string(index + i));
    batch.Put(entry_key(entries[i].index), encode_entry(entries[i]));
  }
  write_synced(*db_, batch, "appending to the log");
  mem_.replace_after(index, entries);
}

void rocks_log_store::save_snapshot(const snapshot& snap) {
  auto keeps = mem_.holds(snap.last_index, snap.last_term);
  rocksdb::WriteBatch batch;
  batch.Put(snapshot_key, encode_snapshot(snap));
  batch.DeleteRange(entry_key(0),
                    keeps ? entry_key(snap.last_index + 1) : entries_end);
  write_synced(*db_, batch, "saving the snapshot");
  mem_.save_snapshot(snap);
}

} // namespace dally::storage
