#include "storage/replication_codec.hpp"

#include <string>
#include <utility>
#include <variant>

#include "storage/record_codec.hpp"

namespace dally::storage {

namespace {

using v1::ReplicationOp;

core::error corrupt(std::string what) {
  return core::error{core::errc::corrupt_record,
                     "ReplicationEntry: " + std::move(what)};
}

void to_proto(const due_key& key, v1::DueKey& out) {
  out.set_index_ms(key.index_ms);
  out.set_id(key.id);
}

due_key from_proto(const v1::DueKey& msg) {
  return due_key{msg.index_ms(), msg.id()};
}

ReplicationOp::Family to_proto(record_family family) {
  switch (family) {
    case record_family::tasks:
      return ReplicationOp::FAMILY_TASKS;
    case record_family::due:
      return ReplicationOp::FAMILY_DUE;
    case record_family::keys:
      return ReplicationOp::FAMILY_KEYS;
    case record_family::dead:
      return ReplicationOp::FAMILY_DEAD;
  }
  return ReplicationOp::FAMILY_TASKS;
}

core::result<record_family> from_proto(ReplicationOp::Family family) {
  switch (family) {
    case ReplicationOp::FAMILY_TASKS:
      return record_family::tasks;
    case ReplicationOp::FAMILY_DUE:
      return record_family::due;
    case ReplicationOp::FAMILY_KEYS:
      return record_family::keys;
    case ReplicationOp::FAMILY_DEAD:
      return record_family::dead;
    default:
      return core::error{core::errc::corrupt_record,
                         "unknown quarantine family " + std::to_string(family)};
  }
}

/// A record as the commit stamped it.
core::error to_proto(const task_record& rec, stamp at, v1::TaskRecord& out) {
  if (auto err = storage::to_proto(rec, out))
    return err;
  out.mutable_stamp()->set_epoch(at.epoch);
  out.mutable_stamp()->set_seq(at.seq);
  return {};
}

/// Writes one op of a batch, stamped `at`, into `out`.
struct op_encoder {
  ReplicationOp& out;
  stamp at;
  /// A put whose deferral the store refused.
  bool index_written;

  core::error operator()(const write_batch::put_op& x) {
    auto& put = *out.mutable_put();
    put.set_index_deferred(x.defer_index && !index_written);
    return to_proto(x.rec, at, *put.mutable_record());
  }
  core::error operator()(const write_batch::replace_op& x) {
    auto& replace = *out.mutable_replace();
    to_proto(x.before, *replace.mutable_before());
    return to_proto(x.after, at, *replace.mutable_after());
  }
  core::error operator()(const write_batch::erase_op& x) {
    to_proto(x.key, *out.mutable_erase());
    return {};
  }
  core::error operator()(const write_batch::bury_op& x) {
    auto& bury = *out.mutable_bury();
    to_proto(x.key, *bury.mutable_key());
    if (auto err = storage::to_proto(x.dead, *bury.mutable_dead()))
      return err;
    bury.mutable_dead()->mutable_task()->mutable_stamp()->set_epoch(at.epoch);
    bury.mutable_dead()->mutable_task()->mutable_stamp()->set_seq(at.seq);
    return {};
  }
  core::error operator()(const write_batch::revive_op& x) {
    auto& revive = *out.mutable_revive();
    revive.set_dead_id(x.dead_id);
    return to_proto(x.rec, at, *revive.mutable_record());
  }
  core::error operator()(const write_batch::drop_dead_op& x) {
    out.set_drop_dead(x.id);
    return {};
  }
  core::error operator()(const write_batch::put_key_op& x) {
    auto& put = *out.mutable_put_key();
    put.set_key(x.key);
    storage::to_proto(x.entry, *put.mutable_entry());
    return {};
  }
  core::error operator()(const write_batch::erase_key_op& x) {
    out.set_erase_key(x.key);
    return {};
  }
  core::error operator()(const write_batch::quarantine_op& x) {
    auto& q = *out.mutable_quarantine();
    q.set_family(to_proto(x.family));
    q.set_key(x.key);
    q.set_value(x.value);
    q.set_reason(x.reason);
    for (const auto& key : x.due)
      to_proto(key, *q.add_due());
    return {};
  }
  core::error operator()(const write_batch::index_op& x) {
    to_proto(x.key, *out.mutable_index());
    return {};
  }
};

/// Which op of an entry is decoded, named in errors only.
struct op_ref {
  int pos;
  uint64_t seq;

  core::error error(const std::string& what) const {
    return corrupt("op " + std::to_string(pos) + " (seq " +
                   std::to_string(seq) + "): " + what);
  }
};

/// The record in `msg`, or the error naming the op.
core::result<task_record> record_of(const v1::TaskRecord& msg, bool present,
                                    op_ref what) {
  if (!present)
    return what.error("record missing");
  auto rec = storage::from_proto(msg);
  if (!rec)
    return what.error(rec.err().message());
  return rec;
}

core::error decode_records(const ReplicationOp& msg, write_batch& out,
                           op_ref what) {
  using op = write_batch::op;
  if (msg.has_put()) {
    auto rec = record_of(msg.put().record(), msg.put().has_record(), what);
    if (!rec)
      return rec.err();
    out.ops().emplace_back(
      op{write_batch::put_op{std::move(*rec), msg.put().index_deferred()}});
  } else if (msg.has_replace()) {
    const auto& x = msg.replace();
    auto rec = record_of(x.after(), x.has_after(), what);
    if (!rec)
      return rec.err();
    out.ops().emplace_back(
      op{write_batch::replace_op{from_proto(x.before()), std::move(*rec)}});
  } else if (msg.has_bury()) {
    if (!msg.bury().has_dead())
      return what.error("dead letter missing");
    auto dead = storage::from_proto(msg.bury().dead());
    if (!dead)
      return what.error(dead.err().message());
    out.ops().emplace_back(
      op{write_batch::bury_op{from_proto(msg.bury().key()), std::move(*dead)}});
  } else {
    const auto& x = msg.revive();
    auto rec = record_of(x.record(), x.has_record(), what);
    if (!rec)
      return rec.err();
    out.ops().emplace_back(
      op{write_batch::revive_op{x.dead_id(), std::move(*rec)}});
  }
  return {};
}

/// Appends the op in `msg` to `out`.
core::error decode_op(const ReplicationOp& msg, write_batch& out, op_ref what) {
  switch (msg.op_case()) {
    case ReplicationOp::kPut:
    case ReplicationOp::kReplace:
    case ReplicationOp::kBury:
    case ReplicationOp::kRevive:
      return decode_records(msg, out, what);
    case ReplicationOp::kErase:
      out.ops().emplace_back(write_batch::erase_op{from_proto(msg.erase())});
      return {};
    case ReplicationOp::kDropDead:
      out.drop_dead(msg.drop_dead());
      return {};
    case ReplicationOp::kPutKey: {
      auto entry = storage::from_proto(msg.put_key().entry());
      if (!entry)
        return what.error(entry.err().message());
      out.put_key(msg.put_key().key(), *entry);
      return {};
    }
    case ReplicationOp::kEraseKey:
      out.erase_key(msg.erase_key());
      return {};
    case ReplicationOp::kQuarantine: {
      const auto& q = msg.quarantine();
      auto family = from_proto(q.family());
      if (!family)
        return what.error(family.err().message());
      std::vector<due_key> due;
      for (const auto& key : q.due())
        due.push_back(from_proto(key));
      out.quarantine(*family, q.key(), q.value(), q.reason(), std::move(due));
      return {};
    }
    case ReplicationOp::kIndex:
      out.index(from_proto(msg.index()));
      return {};
    case ReplicationOp::OP_NOT_SET:
      break;
  }
  return what.error("no op (or one this build does not know)");
}

} // namespace

core::error to_entry(const committed_batch& batch, v1::ReplicationEntry& out) {
  out.Clear();
  out.set_shard(batch.meta.shard);
  out.mutable_first()->set_epoch(batch.first.epoch);
  out.mutable_first()->set_seq(batch.first.seq);
  out.set_last_seq(batch.meta.last_seq);
  storage::to_proto(batch.meta, *out.mutable_meta());
  out.set_urgent(batch.batch.urgent());
  const auto& ops = batch.batch.ops();
  out.mutable_ops()->Reserve(
    static_cast<int>(ops.size() + batch.index_writes.size()));
  auto written = batch.index_written.begin();
  auto seq = batch.first.seq;
  for (size_t pos = 0; pos < ops.size(); ++pos, ++seq) {
    bool refused = written != batch.index_written.end() && *written == pos;
    if (refused)
      ++written;
    op_encoder encode{*out.add_ops(), stamp{batch.first.epoch, seq}, refused};
    if (auto err = std::visit(encode, ops[pos]))
      return err;
  }
  for (const auto& key : batch.index_writes)
    to_proto(key, *out.add_ops()->mutable_index());
  return {};
}

core::result<replicated_batch> from_entry(const v1::ReplicationEntry& in) {
  if (!in.has_meta())
    return corrupt("meta missing");
  auto meta = storage::from_proto(in.meta());
  if (!meta)
    return core::error{meta.err().code(),
                       "ReplicationEntry: " + meta.err().message()};
  auto ops = static_cast<uint64_t>(in.ops_size());
  if (in.shard() != meta->shard || in.last_seq() != meta->last_seq ||
      in.first().epoch() != meta->epoch ||
      in.first().seq() + ops != in.last_seq() + 1)
    return corrupt("shard " + std::to_string(in.shard()) + ", stamps " +
                   std::to_string(in.first().epoch()) + "." +
                   std::to_string(in.first().seq()) + " to " +
                   std::to_string(in.last_seq()) + " with " +
                   std::to_string(ops) + " ops do not match the meta (shard " +
                   std::to_string(meta->shard) + ", epoch " +
                   std::to_string(meta->epoch) + ", last seq " +
                   std::to_string(meta->last_seq) + ")");
  replicated_batch out;
  out.first = stamp{in.first().epoch(), in.first().seq()};
  out.meta = *meta;
  out.batch.set_urgent(in.urgent());
  out.batch.ops().reserve(ops);
  for (int i = 0; i < in.ops_size(); ++i)
    if (auto err =
          decode_op(in.ops(i), out.batch, op_ref{i, in.first().seq() + i}))
      return err;
  return out;
}

} // namespace dally::storage
