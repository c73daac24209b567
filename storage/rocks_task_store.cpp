#include "storage/rocks_task_store.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <variant>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "core/placement.hpp"
#include "proto/dally.pb.h"
#include "storage/btree_memtable.hpp"
#include "storage/deferred_index.hpp"
#include "storage/record_codec.hpp"

namespace dally::storage {

namespace {

using core::errc;

/// Column families in the order of their handles (after "default").
enum cf_id : size_t {
  cf_tasks,
  cf_due,
  cf_keys,
  cf_dead,
  cf_meta,
  cf_quarantine,
  cf_count,
};

/// Local ids reserved per fsync'd reservation in periodic and none modes.
constexpr uint64_t id_reservation_block = uint64_t{1} << 16;

/// expire_keys examines at most this many keys per key it may delete, so
/// that maintenance stays cheap with millions of live idempotency keys.
constexpr size_t expire_visits_per_key = 16;

constexpr std::array<const char*, cf_count> cf_names = {
  "tasks", "due", "keys", "dead", "meta", "quarantine",
};

constexpr std::string_view meta_key = "shard";

constexpr size_t id_key_bytes = 8;

constexpr size_t due_key_bytes = 16;

constexpr uint64_t sign_bit = uint64_t{1} << 63;

void put_be64(std::string& out, uint64_t x) {
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>(x >> shift));
}

void put_be32(std::string& out, uint32_t x) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>(x >> shift));
}

uint64_t get_be64(std::string_view in) {
  uint64_t x = 0;
  for (size_t i = 0; i < 8; ++i)
    x = (x << 8) | static_cast<unsigned char>(in[i]);
  return x;
}

/// Flipping the sign bit maps int64 order onto unsigned byte order.
std::string encode_due(const due_key& key) {
  std::string out;
  out.reserve(due_key_bytes);
  put_be64(out, static_cast<uint64_t>(key.index_ms) ^ sign_bit);
  put_be64(out, key.id);
  return out;
}

due_key decode_due(std::string_view bytes) {
  return due_key{static_cast<int64_t>(get_be64(bytes) ^ sign_bit),
                 get_be64(bytes.substr(8))};
}

std::string_view view(const rocksdb::Slice& s) {
  return {s.data(), s.size()};
}

rocksdb::Slice slice(std::string_view s) {
  return {s.data(), s.size()};
}

std::string hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (auto c : bytes) {
    auto b = static_cast<unsigned char>(c);
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xF]);
  }
  return out;
}

/// "tasks/000000000000002a (task 42)", "keys/'order-7'", "due/0x...".
std::string describe(cf_id cf, std::string_view key) {
  std::string out = cf_names[cf];
  out += '/';
  if ((cf == cf_tasks || cf == cf_dead) && key.size() == id_key_bytes) {
    out += hex(key) + " (task " + std::to_string(get_be64(key)) + ")";
  } else if (cf == cf_keys || cf == cf_meta) {
    bool printable = std::all_of(key.begin(), key.end(),
                                 [](char c) { return c >= 0x20 && c < 0x7F; });
    out += printable ? "'" + std::string{key} + "'" : "0x" + hex(key);
  } else {
    out += "0x" + hex(key);
  }
  return out;
}

core::error from_status(const rocksdb::Status& status,
                        const std::string& what) {
  auto message = what + ": " + status.ToString();
  if (status.IsNoSpace())
    return core::error{errc::no_space, std::move(message)};
  if (status.IsCorruption())
    return core::error{errc::corrupt_record, std::move(message)};
  return core::error{errc::io_error, std::move(message)};
}

/// RocksDB reports a held LOCK file as an IOError: "While lock file: ..."
/// when another process holds it, "lock hold by current process" when this
/// one does.
bool is_lock_error(const rocksdb::Status& status) {
  if (!status.IsIOError())
    return false;
  auto text = status.ToString();
  return text.find("While lock file") != std::string::npos ||
         text.find("lock hold by current process") != std::string::npos;
}

cf_id cf_of(record_family family) {
  switch (family) {
    case record_family::tasks:
      return cf_tasks;
    case record_family::due:
      return cf_due;
    case record_family::keys:
      return cf_keys;
    case record_family::dead:
      return cf_dead;
  }
  return cf_tasks;
}

/// A quarantined record's key: its family's name, a zero byte and its key.
std::string quarantine_key(cf_id cf, std::string_view key) {
  std::string out = cf_names[cf];
  out.push_back('\0');
  out += key;
  return out;
}

/// A quarantined record's value: the reason's length (4 bytes big-endian),
/// the reason and the original value.
std::string quarantine_value(std::string_view reason, std::string_view value) {
  std::string out;
  out.reserve(4 + reason.size() + value.size());
  put_be32(out, static_cast<uint32_t>(reason.size()));
  out += reason;
  out += value;
  return out;
}

/// Collects a WriteBatch, keeping the first failure (a key or value too
/// large for a batch) instead of checking every call.
class batch_builder {
public:
  explicit batch_builder(const std::vector<rocksdb::ColumnFamilyHandle*>& cfs)
    : cfs_(cfs) {
    // nop
  }

  void put(cf_id cf, std::string_view key, std::string_view value) {
    keep(batch_.Put(cfs_[cf], slice(key), slice(value)));
  }

  void erase(cf_id cf, std::string_view key) {
    keep(batch_.Delete(cfs_[cf], slice(key)));
  }

  /// Erases a key that was put exactly once (see impl::put_once).
  void erase_once_put(cf_id cf, std::string_view key) {
    keep(batch_.SingleDelete(cfs_[cf], slice(key)));
  }

  const rocksdb::Status& status() const noexcept { return status_; }

  rocksdb::WriteBatch& batch() noexcept { return batch_; }

private:
  void keep(rocksdb::Status status) {
    if (status_.ok() && !status.ok())
      status_ = std::move(status);
  }

  const std::vector<rocksdb::ColumnFamilyHandle*>& cfs_;
  rocksdb::WriteBatch batch_;
  rocksdb::Status status_;
};

template<class... Fs>
struct overloaded : Fs... {
  using Fs::operator()...;
};

template<class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

} // namespace

std::string encode_task_key(core::task_id id) {
  std::string out;
  out.reserve(id_key_bytes);
  put_be64(out, id);
  return out;
}

// -- state --------------------------------------------------------------------

struct rocks_task_store::impl {
  store_options opts;
  /// Wraps opts.file_system; must outlive db.
  std::unique_ptr<rocksdb::Env> env;
  std::unique_ptr<rocksdb::DB> db;
  /// Our column families, by cf_id.
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  /// Every handle opened, "default" and unknown families included.
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  /// As of the last commit.
  shard_meta meta;
  /// Stamped on the next commit; ahead of meta after allocate_id/set_epoch.
  uint64_t next_local_id = 0;
  uint64_t epoch = 0;
  /// Stamped on the next commit; ahead of meta after raise_fire_horizon.
  int64_t fire_horizon_ms = 0;
  /// A write or sync failed: RocksDB may have stopped accepting writes.
  bool needs_resume = false;
  /// Written since the last fsync.
  bool dirty = false;
  std::optional<int64_t> last_sync_ms;
  /// expire_keys resumes after this key.
  std::optional<std::string> expire_cursor;
  /// Tasks whose due-index entry commits deferred, with what the commit
  /// being built changes about them (applied only once its write
  /// succeeded). Set up by `open` from the options.
  deferred_index deferred{1, 0, 0};
  /// The deferred entries found by `open` after a crash: until written,
  /// `scan_due` returns them with the index's own. Their entries may have
  /// been written before the crash, so settling one deletes it anyway.
  std::set<due_key> recovered;
  std::vector<quarantined_record> quarantined;
  store_stats stats;
  /// The record being encoded into a commit's batch (which copies it):
  /// reused, so that a write allocates no buffer per record.
  std::string value_scratch;
  /// What the commit being built decided, kept only for `opts.on_commit`
  /// (see committed_batch).
  std::vector<size_t> index_written;
  std::vector<due_key> index_writes;
  /// The commit being built quarantines records.
  bool quarantines_now = false;

  impl() = default;
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  ~impl() {
    if (!db)
      return;
    // A clean close leaves a complete index (older builds read it too); if
    // this fails, or the store stopped accepting writes, the next open
    // indexes from the mark in the meta.
    if (!needs_resume)
      index_all("indexing deferred tasks at close");
    for (auto* handle : handles)
      db->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
    db->Close().PermitUncheckedError();
  }

  std::string where() const {
    return "shard " + std::to_string(opts.shard) + " in " + opts.path;
  }

  /// Writes `builder`; `what` and `ops` name the write in an error.
  core::error write(batch_builder& builder, bool sync, std::string_view what,
                    size_t ops) {
    auto name = [&] {
      std::string out{what};
      if (ops > 0)
        out += " of " + std::to_string(ops) + " mutations";
      return out;
    };
    if (!builder.status().ok())
      return from_status(builder.status(), name());
    rocksdb::WriteOptions options;
    options.sync = sync;
    auto status = db->Write(options, &builder.batch());
    if (!status.ok()) {
      needs_resume = true;
      return from_status(status, name() + " (" + where() + ")");
    }
    if (sync) {
      dirty = false;
      ++stats.syncs;
    } else {
      dirty = true;
    }
    return {};
  }

  /// Lets RocksDB leave the read-only state an earlier failure left it in.
  core::error ensure_writable() {
    if (!needs_resume)
      return {};
    auto status = db->Resume();
    if (status.IsBusy())
      // RocksDB is already recovering by itself (e.g. after a full disk
      // got space back): the condition is temporary.
      return core::error{errc::store_unavailable,
                         "store of " + where() +
                           " is recovering from a failed write or sync; "
                           "retry shortly (" +
                           status.ToString() + ")"};
    if (!status.ok())
      return core::error{errc::store_unavailable,
                         "store of " + where() +
                           " stopped accepting writes after a failed write "
                           "or sync and cannot resume: " +
                           status.ToString()};
    needs_resume = false;
    return {};
  }

  core::error sync_wal() {
    auto status = db->SyncWAL();
    if (!status.ok()) {
      needs_resume = true;
      return from_status(status, "fsync of the WAL (" + where() + ")");
    }
    dirty = false;
    ++stats.syncs;
    return {};
  }

  // -- the one write path -----------------------------------------------------

  /// Adds the ops of a batch to the RocksDB batch being built, each
  /// stamped with the next seq of `next`.
  struct op_writer {
    impl& s;
    batch_builder& builder;
    shard_meta& next;
    /// The op's position in its batch.
    size_t pos = 0;

    stamp next_stamp() { return stamp{next.epoch, ++next.last_seq}; }

    /// Stamped as it is encoded: no copy of the record.
    core::error put_value(const task_record& rec) {
      if (auto err = encode_stamped(rec, next_stamp(), s.value_scratch))
        return err;
      builder.put(cf_tasks, encode_task_key(rec.task.id), s.value_scratch);
      // A large payload's buffer is not kept for every record after it.
      if (s.value_scratch.capacity() > kept_buffer_bytes)
        std::string{}.swap(s.value_scratch);
      return {};
    }

    core::error put_record(const task_record& rec) {
      if (auto err = put_value(rec))
        return err;
      builder.put(cf_due, encode_due(write_batch::key_of(rec)), {});
      return {};
    }

    /// Drops the index entry `key`, unless it was deferred and never
    /// written.
    void erase_due(const due_key& key) {
      if (!s.deferred.take(key.id))
        builder.erase(cf_due, encode_due(key));
    }

    core::error operator()(const write_batch::put_op& x) {
      if (x.defer_index) {
        if (s.deferred.defer(x.rec.task.id, x.rec.index_ms()))
          return put_value(x.rec);
        if (s.opts.on_commit)
          s.index_written.push_back(pos);
      }
      // Written now: any deferred entry of the id is settled.
      s.deferred.take(x.rec.task.id);
      return put_record(x.rec);
    }

    core::error operator()(const write_batch::replace_op& x) {
      // A delivery, touch or give-back keeps the index entry (deferred or
      // not): only the record changes.
      if (x.before == write_batch::key_of(x.after)) {
        s.deferred.note_rewritten(x.after.task.id);
        return put_value(x.after);
      }
      erase_due(x.before);
      return put_record(x.after);
    }

    core::error operator()(const write_batch::erase_op& x) {
      next_stamp();
      if (s.put_once(x.key.id))
        builder.erase_once_put(cf_tasks, encode_task_key(x.key.id));
      else
        builder.erase(cf_tasks, encode_task_key(x.key.id));
      erase_due(x.key);
      return {};
    }

    core::error operator()(const write_batch::bury_op& x) {
      auto dead = x.dead;
      dead.record.stamp = next_stamp();
      auto bytes = encode(dead);
      if (!bytes)
        return bytes.err();
      builder.erase(cf_tasks, encode_task_key(x.key.id));
      erase_due(x.key);
      builder.put(cf_dead, encode_task_key(dead.record.task.id), *bytes);
      return {};
    }

    core::error operator()(const write_batch::revive_op& x) {
      builder.erase(cf_dead, encode_task_key(x.dead_id));
      return put_record(x.rec);
    }

    core::error operator()(const write_batch::drop_dead_op& x) {
      next_stamp();
      builder.erase(cf_dead, encode_task_key(x.id));
      return {};
    }

    core::error operator()(const write_batch::put_key_op& x) {
      next_stamp();
      builder.put(cf_keys, x.key, encode(x.entry));
      return {};
    }

    core::error operator()(const write_batch::erase_key_op& x) {
      next_stamp();
      builder.erase(cf_keys, x.key);
      return {};
    }

    core::error operator()(const write_batch::quarantine_op& x) {
      next_stamp();
      auto cf = cf_of(x.family);
      builder.put(cf_quarantine, quarantine_key(cf, x.key),
                  quarantine_value(x.reason, x.value));
      builder.erase(cf, x.key);
      // A deferred entry of a task moved aside is never to be written.
      if (cf == cf_tasks && x.key.size() == id_key_bytes)
        s.deferred.take(get_be64(x.key));
      for (const auto& due : x.due)
        builder.erase(cf_due, encode_due(due));
      s.quarantines_now = true;
      return {};
    }

    core::error operator()(const write_batch::index_op& x) {
      next_stamp();
      s.deferred.take(x.key.id);
      builder.put(cf_due, encode_due(x.key), {});
      return {};
    }
  };

  /// Every change to the store goes through here, so that `opts.on_commit`
  /// sees the whole history: writes `batch` and the shard meta after it in
  /// one atomic write, each op stamped with the next seq, and reports it.
  /// With `follow`, `batch` is an entry of another store's history (see
  /// `apply`): it must continue this store's stamps, its puts' deferrals
  /// are taken as they are, and its meta becomes this store's.
  /// `sync_always` fsyncs whatever the durability.
  core::error commit_batch(const write_batch& batch, std::string_view what,
                           const replicated_batch* follow = nullptr,
                           bool sync_always = false) {
    if (auto err = ensure_writable())
      return err;
    if (follow != nullptr)
      if (auto err = check_follow(*follow))
        return err;
    auto next = meta;
    next.next_local_id = next_local_id;
    next.epoch = follow != nullptr ? follow->first.epoch : epoch;
    next.fire_horizon_ms = std::max(next.fire_horizon_ms, fire_horizon_ms);
    auto first = stamp{next.epoch, next.last_seq + 1};
    batch_builder builder{cfs};
    // What an earlier commit that failed had begun to change is undone.
    deferred.discard();
    index_written.clear();
    index_writes.clear();
    quarantines_now = false;
    op_writer writer{*this, builder, next};
    for (const auto& op : batch.ops()) {
      if (auto err = std::visit(writer, op))
        return err;
      ++writer.pos;
    }
    if (follow != nullptr)
      next = follow->meta;
    else
      next.unindexed_from = age_deferred(builder, next);
    auto sync =
      sync_always || (opts.durability == durability::sync && batch.urgent());
    if (follow == nullptr && !sync)
      reserve_ids(next);
    // A reservation that moved is fsync'd before any id past the old one
    // goes out (see reserve_ids).
    if (next.reserved_local_id != meta.reserved_local_id)
      sync = true;
    builder.put(cf_meta, meta_key, encode(next));
    if (auto err = write(builder, sync, what, batch.size()))
      return err;
    settle(batch, next, follow != nullptr);
    if (opts.on_commit)
      opts.on_commit(
        committed_batch{batch, index_written, index_writes, first, meta});
    return {};
  }

  /// Takes in a commit that was written.
  void settle(const write_batch& batch, const shard_meta& next, bool follow) {
    meta = next;
    if (follow) {
      // As after a reopen: ids up to the reservation may have gone out.
      next_local_id =
        std::max({next_local_id, meta.next_local_id, meta.reserved_local_id});
      epoch = std::max(epoch, meta.epoch);
      fire_horizon_ms = std::max(fire_horizon_ms, meta.fire_horizon_ms);
    }
    deferred.apply([this](core::task_id id, int64_t at) {
      recovered.erase(due_key{at, id});
    });
    if (quarantines_now)
      for (const auto& op : batch.ops())
        if (const auto* x = std::get_if<write_batch::quarantine_op>(&op)) {
          quarantined.push_back(
            {describe(cf_of(x->family), x->key), x->reason});
          ++stats.quarantined;
        }
    ++stats.commits;
    stats.mutations += batch.size();
  }

  /// Whether `entry` continues this store's history: same shard, an epoch
  /// not below this store's, and stamps right after its last.
  core::error check_follow(const replicated_batch& entry) const {
    const auto& m = entry.meta;
    if (m.shard != opts.shard || m.shard_count != opts.shard_count)
      return core::error{
        errc::invalid_request,
        "an entry of shard " + std::to_string(m.shard) + " of " +
          std::to_string(m.shard_count) + " does not apply to the store of " +
          where() + " (shard count " + std::to_string(opts.shard_count) + ")"};
    if (entry.first.epoch < epoch)
      return core::error{errc::stale_epoch,
                         "an entry of epoch " +
                           std::to_string(entry.first.epoch) +
                           " is older than the current epoch " +
                           std::to_string(epoch) + " of " + where()};
    if (entry.first.seq != meta.last_seq + 1 ||
        m.last_seq + 1 != entry.first.seq + entry.batch.size() ||
        m.epoch != entry.first.epoch)
      return core::error{
        errc::invalid_request,
        "an entry with seqs " + std::to_string(entry.first.seq) + " to " +
          std::to_string(m.last_seq) + " (" +
          std::to_string(entry.batch.size()) + " ops) does not follow seq " +
          std::to_string(meta.last_seq) + " of " + where()};
    return {};
  }

  /// Without a sync per commit, the id counter could be lost with unsynced
  /// commits and their ids reused. The commit that first uses an id past
  /// the durable reservation is fsync'd and moves the reservation well
  /// ahead.
  static void reserve_ids(shard_meta& next) {
    if (next.next_local_id > next.reserved_local_id)
      next.reserved_local_id =
        next.next_local_id > UINT64_MAX - id_reservation_block
          ? UINT64_MAX
          : next.next_local_id + id_reservation_block;
  }

  /// Writes the oldest deferred entries beyond the bound (in open entries,
  /// and twice that in the span of ids they cover), each an index op of
  /// the history after the batch's; returns the lowest id still deferred
  /// after the batch, or 0.
  core::task_id age_deferred(batch_builder& builder, shard_meta& next) {
    bool listening = static_cast<bool>(opts.on_commit);
    return deferred.age([&](core::task_id id, int64_t at) {
      builder.put(cf_due, encode_due({at, id}), {});
      ++next.last_seq;
      if (listening)
        index_writes.push_back(due_key{at, id});
    });
  }

  /// Writes every deferred index entry, which clears the mark in the meta.
  core::error index_all(std::string_view what) {
    if (deferred.empty() && meta.unindexed_from == 0)
      return {};
    write_batch batch;
    deferred.for_each_open([&batch](core::task_id id, int64_t at) {
      batch.index({at, id});
    });
    batch.set_urgent(opts.durability == durability::sync);
    return commit_batch(batch, what);
  }

  // -- quarantine -------------------------------------------------------------

  /// Moves the records `batch` quarantines aside, in a commit nobody
  /// waits for.
  core::error quarantine(write_batch& batch) {
    if (batch.empty())
      return {};
    batch.set_urgent(false);
    return commit_batch(batch, "quarantine");
  }

  /// Quarantines one record and returns the corrupt_record error reporting
  /// it.
  core::error quarantine_one(write_batch::quarantine_op op) {
    auto what = describe(cf_of(op.family), op.key);
    auto reason = op.reason;
    write_batch batch;
    batch.ops().emplace_back(std::move(op));
    if (auto err = quarantine(batch))
      return core::error{
        errc::corrupt_record,
        what + " does not decode (" + reason +
          "); moving it to quarantine failed: " + err.message()};
    return core::error{
      errc::corrupt_record,
      what + " does not decode and was moved to quarantine: " + reason};
  }

  /// The due keys a task value that does not decode may still have: if the
  /// bytes parse as a TaskRecord, its entries at the due time, the retry
  /// time and the lease deadline (older stores index in-flight tasks
  /// there); at most one of them exists.
  static std::vector<due_key> due_keys_of(std::string_view raw,
                                          core::task_id id) {
    v1::TaskRecord msg;
    if (raw.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
        !msg.ParseFromArray(raw.data(), static_cast<int>(raw.size())))
      return {};
    std::vector<due_key> keys;
    for (int64_t at :
         {msg.due_ms(), msg.retry_at_ms(), msg.lease_deadline_ms()})
      if (at != 0 || keys.empty()) {
        due_key key{at, id};
        if (std::find(keys.begin(), keys.end(), key) == keys.end())
          keys.push_back(key);
      }
    return keys;
  }

  /// Decodes the value of tasks/`id`, or says why it is corrupt.
  static core::result<task_record> decode_task(std::string_view raw,
                                               core::task_id id) {
    auto rec = decode_task_record(raw);
    if (rec && rec->task.id != id)
      return core::error{errc::corrupt_record, "the record holds task id " +
                                                 std::to_string(rec->task.id)};
    return rec;
  }

  static core::result<dead_letter> decode_dead(std::string_view raw,
                                               core::task_id id) {
    auto dead = decode_dead_letter(raw);
    if (dead && dead->record.task.id != id)
      return core::error{errc::corrupt_record,
                         "the dead letter holds task id " +
                           std::to_string(dead->record.task.id)};
    return dead;
  }

  /// The quarantine op of task record `key` whose value `raw` is corrupt.
  static write_batch::quarantine_op bad_task(std::string key, std::string raw,
                                             const core::error& err) {
    auto due = due_keys_of(raw, get_be64(key));
    return {record_family::tasks, std::move(key), std::move(raw), err.message(),
            std::move(due)};
  }

  /// Point read; nullopt if absent.
  core::result<std::optional<std::string>> read(cf_id cf,
                                                std::string_view key) {
    std::string value;
    auto status = db->Get(rocksdb::ReadOptions{}, cfs[cf], slice(key), &value);
    if (status.IsNotFound())
      return std::optional<std::string>{};
    if (!status.ok())
      return from_status(status, "reading " + describe(cf, key));
    return std::optional<std::string>{std::move(value)};
  }

  /// Whether the record of `id` was put exactly once, so that a
  /// SingleDelete may remove it: when it meets that put in a flush or a
  /// compaction, both vanish, where a Delete would leave a tombstone to
  /// carry down every level. RocksDB leaves a SingleDelete undefined over
  /// more than one put, so this holds only for a task whose entry is still
  /// deferred by the put of this process (ids are never reused) and whose
  /// record no commit has rewritten since. An entry recovered after a
  /// crash does not count: what was written for it before is unknown.
  bool put_once(core::task_id id) const { return deferred.put_once(id); }

  // -- open -------------------------------------------------------------------

  /// Reads the meta and what a crash left (after RocksDB opened).
  core::error start() {
    if (auto err = load_meta())
      return err;
    if (auto err = count_quarantine())
      return err;
    return recover_deferred();
  }

  /// After a crash: the tasks from meta.unindexed_from on may lack their
  /// index entry (a commit deferred it). They become deferred entries
  /// again, served by `scan_due` from memory until a commit, a clean close
  /// or `index_deferred` writes them. Opening writes nothing for them, so
  /// a failing or full disk still lets the shard start and serve reads.
  /// Records that do not decode are quarantined if the disk allows.
  core::error recover_deferred() {
    if (meta.unindexed_from == 0)
      return {};
    std::unique_ptr<rocksdb::Iterator> it{
      db->NewIterator(rocksdb::ReadOptions{}, cfs[cf_tasks])};
    auto start = encode_task_key(meta.unindexed_from);
    write_batch bad;
    for (it->Seek(slice(start)); it->Valid(); it->Next()) {
      auto key = it->key().ToString();
      if (key.size() != id_key_bytes)
        continue; // scan_due meets no such key; get() reports it
      auto id = get_be64(key);
      auto raw = it->value().ToString();
      auto rec = decode_task(raw, id);
      if (!rec) {
        bad.ops().emplace_back(
          bad_task(std::move(key), std::move(raw), rec.err()));
        continue;
      }
      auto at = rec->index_ms();
      deferred.recover(id, at);
      recovered.insert(due_key{at, id});
    }
    if (!it->status().ok())
      return from_status(it->status(),
                         "reading the tasks of " + where() + " after a crash");
    it.reset();
    // A disk that refuses the move leaves the record where get() will find
    // and quarantine it later.
    quarantine(bad);
    return {};
  }

  /// Starts stats.quarantined at the records moved aside before this open,
  /// so that a restart does not hide them from an operator.
  core::error count_quarantine() {
    std::unique_ptr<rocksdb::Iterator> it{
      db->NewIterator(rocksdb::ReadOptions{}, cfs[cf_quarantine])};
    for (it->SeekToFirst(); it->Valid(); it->Next())
      ++stats.quarantined;
    if (!it->status().ok())
      return from_status(it->status(), "counting quarantined records");
    return {};
  }

  /// Reads the shard meta, or commits a fresh one into a new store.
  core::error load_meta() {
    auto raw = read(cf_meta, meta_key);
    if (!raw)
      return raw.err();
    if (!*raw) {
      meta = shard_meta{opts.shard, opts.shard_count, 0, 0, 0};
      // Local id 0 is skipped so that task id 0 never exists: it stays free
      // to mean "no task" and "from the start" (dead_letters(0, n)).
      next_local_id = 1;
      return commit_batch(write_batch{}, "initializing the shard meta", nullptr,
                          true);
    }
    auto decoded = decode_shard_meta(**raw);
    if (!decoded) {
      if (decoded.err().code() != errc::corrupt_record)
        return core::error{decoded.err().code(),
                           opts.path + ": " + decoded.err().message()};
      return core::error{errc::corrupt_record,
                         describe(cf_meta, meta_key) + " in " + opts.path +
                           " does not decode (" + decoded.err().message() +
                           "); refusing to open: the id counter and epoch "
                           "cannot be recovered safely"};
    }
    if (decoded->shard != opts.shard ||
        decoded->shard_count != opts.shard_count)
      return core::error{errc::store_unavailable,
                         "data directory " + opts.path + " holds shard " +
                           std::to_string(decoded->shard) + " of " +
                           std::to_string(decoded->shard_count) +
                           ", not shard " + std::to_string(opts.shard) +
                           " of " + std::to_string(opts.shard_count)};
    meta = *decoded;
    // Ids up to the reservation may have gone out in commits a power loss
    // took back: never hand them out again.
    next_local_id = std::max(meta.next_local_id, meta.reserved_local_id);
    epoch = meta.epoch;
    return {};
  }

  // -- key expiry -------------------------------------------------------------

  /// A round of expire_keys: how far it may go and what it found.
  struct key_sweep {
    int64_t now_ms = 0;
    size_t limit = 0;
    /// Keys it may still examine, expired or not.
    size_t visits_left = 0;
    size_t expired = 0;
    /// Where the next round resumes (after this key), unset to wrap.
    std::optional<std::string> stopped_at;
    std::optional<std::string> last_visited;
    /// The expired keys' erasures and the quarantine of bad entries.
    write_batch batch;
  };

  /// Visits the keys in [from, to) (the whole range where unset), stopping
  /// at the limit or when its visits are used up; false once it stopped.
  core::result<bool> sweep_keys(key_sweep& sweep,
                                std::optional<std::string_view> from,
                                std::optional<std::string_view> to) {
    rocksdb::ReadOptions options;
    rocksdb::Slice upper;
    if (to) {
      upper = slice(*to);
      options.iterate_upper_bound = &upper;
    }
    std::unique_ptr<rocksdb::Iterator> it{
      db->NewIterator(options, cfs[cf_keys])};
    if (from)
      it->Seek(slice(*from));
    else
      it->SeekToFirst();
    for (; it->Valid(); it->Next())
      if (!sweep_key(sweep, view(it->key()), view(it->value())))
        return false;
    if (!it->status().ok())
      return from_status(it->status(),
                         "scanning the idempotency keys of " + where());
    return true;
  }

  /// Examines one key; false once the sweep stops.
  static bool sweep_key(key_sweep& sweep, std::string_view key,
                        std::string_view value) {
    if (sweep.visits_left == 0) {
      // The next call resumes at this key, right after the last visited.
      sweep.stopped_at = sweep.last_visited;
      return false;
    }
    --sweep.visits_left;
    sweep.last_visited = std::string{key};
    auto entry = decode_idempotency_entry(value);
    if (!entry) {
      sweep.batch.quarantine(record_family::keys, std::string{key},
                             std::string{value}, entry.err().message());
    } else if (sweep.now_ms > entry->expires_ms) {
      sweep.batch.erase_key(std::string{key});
      if (++sweep.expired == sweep.limit) {
        sweep.stopped_at = std::string{key};
        return false;
      }
    }
    return true;
  }
};

// -- open and close -----------------------------------------------------------

namespace {

/// Creates `path` and its missing parents, fsyncing the parent of each new
/// directory: otherwise a power loss soon after the first open could take
/// the whole store, sync-acknowledged writes included, with it.
core::error create_durable_dirs(rocksdb::FileSystem& fs,
                                const std::string& path) {
  namespace stdfs = std::filesystem;
  auto target = stdfs::absolute(path).lexically_normal();
  if (target.filename().empty())
    target = target.parent_path();
  std::vector<stdfs::path> missing;
  for (auto p = target; p != p.root_path(); p = p.parent_path()) {
    if (fs.FileExists(p.string(), rocksdb::IOOptions{}, nullptr).ok())
      break;
    missing.push_back(p);
  }
  for (auto i = missing.rbegin(); i != missing.rend(); ++i) {
    auto what = "creating data directory " + i->string();
    rocksdb::Status status =
      fs.CreateDirIfMissing(i->string(), rocksdb::IOOptions{}, nullptr);
    if (!status.ok())
      return from_status(status, what);
    std::unique_ptr<rocksdb::FSDirectory> parent;
    status = fs.NewDirectory(i->parent_path().string(), rocksdb::IOOptions{},
                             &parent, nullptr);
    if (status.ok())
      status = parent->Fsync(rocksdb::IOOptions{}, nullptr);
    if (!status.ok())
      return from_status(status, what);
  }
  return {};
}

core::error check_options(const store_options& opts) {
  if (opts.path.empty())
    return core::error{errc::store_unavailable, "store path is empty"};
  if (opts.shard_count == 0 || opts.shard >= opts.shard_count)
    return core::error{errc::store_unavailable,
                       "shard " + std::to_string(opts.shard) +
                         " does not exist with shard_count " +
                         std::to_string(opts.shard_count)};
  if (opts.durability == durability::periodic && opts.sync_period_ms <= 0)
    return core::error{errc::store_unavailable,
                       "sync_period_ms is " +
                         std::to_string(opts.sync_period_ms) +
                         "; periodic durability needs a positive period"};
  return {};
}

/// RocksDB's options for the store; `env` receives the environment over
/// `opts.file_system`, which must outlive the database.
rocksdb::DBOptions db_options_for(const store_options& opts,
                                  std::unique_ptr<rocksdb::Env>& env) {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  if (opts.file_system) {
    env = rocksdb::NewCompositeEnv(opts.file_system);
    db_options.env = env.get();
  }
  if (opts.background_at_low_priority) {
    // Each pool's threads lower themselves as they take their next job.
    auto* pools =
      db_options.env != nullptr ? db_options.env : rocksdb::Env::Default();
    for (auto pool :
         {rocksdb::Env::Priority::LOW, rocksdb::Env::Priority::HIGH})
      pools->LowerThreadPoolCPUPriority(pool, rocksdb::CpuPriority::kLow)
        .PermitUncheckedError();
  }
  // The B-tree memtable of "tasks" takes one writer at a time, as a store
  // writes anyway.
  if (opts.btree_task_memtable)
    db_options.allow_concurrent_memtable_write = false;
  return db_options;
}

/// Options of the families that are scanned ("due"), read by key and, by
/// default, "tasks", in that order.
std::array<rocksdb::ColumnFamilyOptions, 3>
family_options(const store_options& opts) {
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = rocksdb::NewLRUCache(opts.block_cache_bytes);
  // Index and filter blocks live in the bounded block cache, so memory
  // stays flat however many tasks are on disk (by default RocksDB keeps
  // them outside it, about 0.5 MiB per million tasks); L0's stay pinned.
  table_options.cache_index_and_filter_blocks = true;
  table_options.pin_l0_filter_and_index_blocks_in_cache = true;
  rocksdb::ColumnFamilyOptions scan_cf_options;
  scan_cf_options.write_buffer_size = opts.write_buffer_bytes;
  // Ids and due times mostly grow: inserting next to the last insert point
  // skips most of the memtable skip list's key comparisons. RocksDB keeps
  // one insert point per key prefix; 7 bytes of a big-endian key give one
  // per 256 ids or per 256 ms of due time, so the inserts of new tasks,
  // the tombstones of acked ones and the lease entries each keep their own
  // instead of moving one back and forth (22% less CPU per task in a plain
  // loop of the engine's writes).
  scan_cf_options.memtable_insert_with_hint_prefix_extractor.reset(
    rocksdb::NewFixedPrefixTransform(7));
  scan_cf_options.table_factory.reset(
    rocksdb::NewBlockBasedTableFactory(table_options));
  // Families read by key get a bloom filter; "due" is only ever scanned.
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions cf_options = scan_cf_options;
  cf_options.table_factory.reset(
    rocksdb::NewBlockBasedTableFactory(table_options));
  rocksdb::ColumnFamilyOptions tasks_cf_options = cf_options;
  if (opts.btree_task_memtable) {
    // Insert hints are the skip list's; the B-tree has no use for them.
    tasks_cf_options.memtable_insert_with_hint_prefix_extractor.reset();
    tasks_cf_options.memtable_factory =
      std::make_shared<btree_memtable_factory>();
  }
  return {scan_cf_options, cf_options, tasks_cf_options};
}

/// Every family to open: "default", ours, and those a newer version added
/// (RocksDB refuses a store unless all are opened).
std::vector<rocksdb::ColumnFamilyDescriptor>
family_descriptors(const store_options& opts,
                   const rocksdb::DBOptions& db_options) {
  auto [scan_cf_options, cf_options, tasks_cf_options] = family_options(opts);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);
  for (const auto* name : cf_names)
    descriptors.emplace_back(
      name, std::string_view{name} == "due"     ? scan_cf_options
            : std::string_view{name} == "tasks" ? tasks_cf_options
                                                : cf_options);
  // A new store has none (and no list to read).
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(db_options, opts.path, &existing).ok())
    for (const auto& name : existing)
      if (std::none_of(descriptors.begin(), descriptors.end(),
                       [&name](const auto& d) { return d.name == name; }))
        descriptors.emplace_back(name, cf_options);
  return descriptors;
}

} // namespace

core::result<std::unique_ptr<rocks_task_store>>
rocks_task_store::open(const store_options& opts) {
  if (auto err = check_options(opts))
    return err;
  auto state = std::make_unique<impl>();
  state->opts = opts;
  state->deferred =
    deferred_index{opts.shard_count, opts.shard, opts.max_deferred_index};
  auto db_options = db_options_for(opts, state->env);
  if (auto err = create_durable_dirs(
        opts.file_system ? *opts.file_system : *rocksdb::FileSystem::Default(),
        opts.path))
    return err;
  auto descriptors = family_descriptors(opts, db_options);
  rocksdb::DB* db = nullptr;
  auto status =
    rocksdb::DB::Open(db_options, opts.path, descriptors, &state->handles, &db);
  if (!status.ok()) {
    if (is_lock_error(status))
      return core::error{errc::store_locked,
                         "data directory " + opts.path +
                           " is in use by another process or store "
                           "instance (" +
                           status.ToString() + ")"};
    return from_status(status, "opening data directory " + opts.path);
  }
  state->db.reset(db);
  state->cfs.assign(state->handles.begin() + 1,
                    state->handles.begin() + 1 + cf_count);
  if (auto err = state->start())
    return err;
  return std::unique_ptr<rocks_task_store>{
    new rocks_task_store(std::move(state))};
}

rocks_task_store::rocks_task_store(std::unique_ptr<impl> state)
  : impl_(std::move(state)) {
  // nop
}

rocks_task_store::~rocks_task_store() = default;

// -- writes -------------------------------------------------------------------

core::error rocks_task_store::commit(const write_batch& batch) {
  if (batch.empty())
    return {};
  return impl_->commit_batch(batch, "commit");
}

core::error rocks_task_store::apply(const replicated_batch& entry) {
  return impl_->commit_batch(entry.batch, "applying a replicated batch",
                             &entry);
}

core::error rocks_task_store::write_failure() const {
  if (!impl_->needs_resume)
    return {};
  return core::error{errc::store_unavailable,
                     "a write or sync of the store of " + impl_->where() +
                       " failed; it must be reopened"};
}

core::error rocks_task_store::index_deferred() {
  auto& s = *impl_;
  if (auto err = s.ensure_writable())
    return err;
  return s.index_all("indexing deferred tasks");
}

core::error rocks_task_store::sync_if_due(int64_t now_ms) {
  auto& s = *impl_;
  if (s.opts.durability == durability::none || !s.dirty)
    return {};
  // A clock that went back counts as due rather than stalling the syncs.
  if (s.last_sync_ms && now_ms >= *s.last_sync_ms &&
      now_ms - *s.last_sync_ms < s.opts.sync_period_ms)
    return {};
  if (auto err = s.sync_wal())
    return err;
  s.last_sync_ms = now_ms;
  return {};
}

bool rocks_task_store::sync_pending() const noexcept {
  return impl_->opts.durability == durability::sync && impl_->dirty;
}

core::error rocks_task_store::sync() {
  auto& s = *impl_;
  if (!s.dirty)
    return {};
  return s.sync_wal();
}

core::task_id rocks_task_store::allocate_id() {
  auto& s = *impl_;
  auto id =
    s.next_local_id == std::numeric_limits<uint64_t>::max()
      ? std::nullopt
      : core::task_id_of(s.next_local_id, s.opts.shard, s.opts.shard_count);
  if (!id)
    throw std::length_error("task ids of " + s.where() + " are used up");
  ++s.next_local_id;
  return *id;
}

core::error rocks_task_store::set_epoch(uint64_t epoch) {
  auto& s = *impl_;
  if (epoch < s.epoch)
    return core::error{errc::stale_epoch,
                       "epoch " + std::to_string(epoch) +
                         " is older than the current epoch " +
                         std::to_string(s.epoch) + " of " + s.where()};
  s.epoch = epoch;
  return {};
}

void rocks_task_store::raise_fire_horizon(int64_t horizon_ms) {
  auto& s = *impl_;
  s.fire_horizon_ms = std::max(s.fire_horizon_ms, horizon_ms);
}

// -- reads --------------------------------------------------------------------

core::result<std::optional<task_record>>
rocks_task_store::get(core::task_id id) {
  auto& s = *impl_;
  auto key = encode_task_key(id);
  auto raw = s.read(cf_tasks, key);
  if (!raw)
    return raw.err();
  if (!*raw)
    return std::optional<task_record>{};
  auto rec = impl::decode_task(**raw, id);
  if (!rec)
    return s.quarantine_one(
      impl::bad_task(std::move(key), std::move(**raw), rec.err()));
  return std::optional<task_record>{std::move(*rec)};
}

core::result<std::vector<task_record>>
rocks_task_store::get_many(std::span<const core::task_id> ids) {
  auto& s = *impl_;
  std::vector<std::string> keys;
  keys.reserve(ids.size());
  for (auto id : ids)
    keys.push_back(encode_task_key(id));
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<rocksdb::ColumnFamilyHandle*> families(ids.size(),
                                                     s.cfs[cf_tasks]);
  std::vector<std::string> values;
  auto statuses =
    s.db->MultiGet(rocksdb::ReadOptions{}, families, slices, &values);
  std::vector<task_record> result;
  result.reserve(ids.size());
  write_batch bad;
  std::unordered_set<core::task_id> seen_bad;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (statuses[i].IsNotFound())
      continue;
    if (!statuses[i].ok())
      return from_status(statuses[i], "reading " + describe(cf_tasks, keys[i]));
    auto rec = impl::decode_task(values[i], ids[i]);
    if (rec)
      result.push_back(std::move(*rec));
    else if (seen_bad.insert(ids[i]).second)
      bad.ops().emplace_back(impl::bad_task(keys[i], values[i], rec.err()));
  }
  if (auto err = s.quarantine(bad))
    return err;
  return result;
}

namespace {

/// `from_index` (the index's entries of a scan) merged in order with the
/// entries of `recovered` after `after` and before `before_ms`: entries
/// deferred before a crash and not written yet. An entry both hold counts
/// once; at most `limit` in all.
std::vector<due_key> merge_recovered(const std::vector<due_key>& from_index,
                                     const std::set<due_key>& recovered,
                                     due_key after, int64_t before_ms,
                                     size_t limit) {
  std::vector<due_key> merged;
  merged.reserve(std::min(limit, from_index.size() + recovered.size()));
  auto in_index = from_index.begin();
  auto from_memory = recovered.upper_bound(after);
  auto in_range = [&] {
    return from_memory != recovered.end() && from_memory->index_ms < before_ms;
  };
  while (merged.size() < limit &&
         (in_index != from_index.end() || in_range())) {
    if (!in_range() ||
        (in_index != from_index.end() && *in_index < *from_memory))
      merged.push_back(*in_index++);
    else if (in_index != from_index.end() && *in_index == *from_memory) {
      merged.push_back(*in_index++);
      ++from_memory;
    } else
      merged.push_back(*from_memory++);
  }
  return merged;
}

} // namespace

core::result<std::vector<due_key>>
rocks_task_store::scan_due(due_key after, int64_t before_ms, size_t limit) {
  auto& s = *impl_;
  std::vector<due_key> result;
  if (limit == 0 || after.index_ms >= before_ms)
    return result;
  auto start = encode_due(after);
  auto upper = encode_due({before_ms, 0});
  rocksdb::Slice upper_slice = slice(upper);
  rocksdb::ReadOptions options;
  options.iterate_upper_bound = &upper_slice;
  write_batch bad;
  {
    std::unique_ptr<rocksdb::Iterator> it{
      s.db->NewIterator(options, s.cfs[cf_due])};
    it->Seek(slice(start));
    if (it->Valid() && view(it->key()) == start)
      it->Next();
    for (; it->Valid() && result.size() < limit; it->Next()) {
      auto key = view(it->key());
      if (key.size() != due_key_bytes) {
        bad.quarantine(
          record_family::due, std::string{key}, it->value().ToString(),
          "due key has " + std::to_string(key.size()) + " bytes, not 16");
        continue;
      }
      result.push_back(decode_due(key));
    }
    if (!it->status().ok())
      return from_status(it->status(),
                         "scanning the due index of " + s.where());
  }
  // Merged before the quarantine commits: a commit may write recovered
  // entries, which `result` was read without.
  if (!s.recovered.empty())
    result = merge_recovered(result, s.recovered, after, before_ms, limit);
  if (auto err = s.quarantine(bad))
    return err;
  return result;
}

core::result<std::optional<idempotency_entry>>
rocks_task_store::find_key(std::string_view key, int64_t now_ms) {
  auto& s = *impl_;
  auto raw = s.read(cf_keys, key);
  if (!raw)
    return raw.err();
  if (!*raw)
    return std::optional<idempotency_entry>{};
  auto entry = decode_idempotency_entry(**raw);
  if (!entry)
    return s.quarantine_one({record_family::keys,
                             std::string{key},
                             std::move(**raw),
                             entry.err().message(),
                             {}});
  if (now_ms > entry->expires_ms)
    return std::optional<idempotency_entry>{};
  return std::optional<idempotency_entry>{*entry};
}

core::result<size_t> rocks_task_store::expire_keys(int64_t now_ms,
                                                   size_t limit) {
  auto& s = *impl_;
  if (limit == 0)
    return size_t{0};
  // Keys examined per call at most, expired or not, so that a call costs
  // the same however many keys live: the cursor goes round them over calls.
  impl::key_sweep sweep;
  sweep.now_ms = now_ms;
  sweep.limit = limit;
  sweep.visits_left = limit > SIZE_MAX / expire_visits_per_key
                        ? SIZE_MAX
                        : limit * expire_visits_per_key;
  // The cursor names the last key visited: resume right after it (the key
  // plus a zero byte is the smallest greater key), then wrap around.
  std::optional<std::string> resume;
  if (s.expire_cursor)
    resume = *s.expire_cursor + '\0';
  auto more = s.sweep_keys(sweep, resume, std::nullopt);
  if (!more)
    return more.err();
  if (*more && resume) {
    more = s.sweep_keys(sweep, std::nullopt, *resume);
    if (!more)
      return more.err();
  }
  if (!sweep.batch.empty()) {
    sweep.batch.set_urgent(false);
    if (auto err = s.commit_batch(sweep.batch, "expiring idempotency keys"))
      return err;
  }
  s.expire_cursor = sweep.stopped_at;
  return sweep.expired;
}

core::result<std::vector<dead_letter>>
rocks_task_store::dead_letters(core::task_id after, size_t limit) {
  auto& s = *impl_;
  std::vector<dead_letter> result;
  if (limit == 0)
    return result;
  write_batch bad;
  {
    auto start = encode_task_key(after);
    std::unique_ptr<rocksdb::Iterator> it{
      s.db->NewIterator(rocksdb::ReadOptions{}, s.cfs[cf_dead])};
    it->Seek(slice(start));
    if (it->Valid() && view(it->key()) == start)
      it->Next();
    for (; it->Valid() && result.size() < limit; it->Next()) {
      auto key = view(it->key());
      if (key.size() != id_key_bytes) {
        bad.quarantine(record_family::dead, std::string{key},
                       it->value().ToString(),
                       "dead letter key has " + std::to_string(key.size()) +
                         " bytes, not 8");
        continue;
      }
      auto dead = impl::decode_dead(view(it->value()), get_be64(key));
      if (dead)
        result.push_back(std::move(*dead));
      else
        bad.quarantine(record_family::dead, std::string{key},
                       it->value().ToString(), dead.err().message());
    }
    if (!it->status().ok())
      return from_status(it->status(),
                         "scanning the dead letters of " + s.where());
  }
  if (auto err = s.quarantine(bad))
    return err;
  return result;
}

core::result<std::optional<dead_letter>>
rocks_task_store::get_dead(core::task_id id) {
  auto& s = *impl_;
  auto key = encode_task_key(id);
  auto raw = s.read(cf_dead, key);
  if (!raw)
    return raw.err();
  if (!*raw)
    return std::optional<dead_letter>{};
  auto dead = impl::decode_dead(**raw, id);
  if (!dead)
    return s.quarantine_one({record_family::dead,
                             std::move(key),
                             std::move(**raw),
                             dead.err().message(),
                             {}});
  return std::optional<dead_letter>{std::move(*dead)};
}

const shard_meta& rocks_task_store::meta() const noexcept {
  return impl_->meta;
}

const std::vector<quarantined_record>& rocks_task_store::quarantined() const {
  return impl_->quarantined;
}

core::error rocks_task_store::flush(bool compact) {
  auto& s = *impl_;
  if (auto err = s.ensure_writable())
    return err;
  auto status = s.db->Flush(rocksdb::FlushOptions{}, s.handles);
  if (!status.ok())
    return from_status(status, "flushing " + s.where());
  if (!compact)
    return {};
  for (auto* handle : s.handles) {
    status = s.db->CompactRange(rocksdb::CompactRangeOptions{}, handle, nullptr,
                                nullptr);
    if (!status.ok())
      return from_status(status, "compacting " + s.where());
  }
  return {};
}

store_stats rocks_task_store::stats() const {
  auto out = impl_->stats;
  uint64_t bytes = 0;
  if (impl_->db && impl_->db->GetAggregatedIntProperty(
                     rocksdb::DB::Properties::kSizeAllMemTables, &bytes))
    out.memtable_bytes = bytes;
  return out;
}

} // namespace dally::storage
