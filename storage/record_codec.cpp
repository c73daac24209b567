#include "storage/record_codec.hpp"

#include "core/utf8.hpp"

#include <climits>
#include <cstdint>
#include <memory>
#include <utility>

namespace dally::storage {

namespace {

/// Version 2 marks a meta with unindexed_from set: older builds, which
/// would not index those tasks, refuse it.
constexpr uint32_t meta_format_version = 2;

core::error corrupt(std::string what) {
  return core::error{core::errc::corrupt_record, std::move(what)};
}

template<class Message>
bool parse(Message& msg, std::string_view bytes) {
  return bytes.size() <= static_cast<size_t>(INT_MAX) &&
         msg.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

core::error unparsable(std::string_view type, std::string_view bytes) {
  return corrupt(std::string{type} + ": " + std::to_string(bytes.size()) +
                 " bytes do not parse");
}

} // namespace

// -- recurrence ---------------------------------------------------------------

void to_proto(const core::recurrence& rec, v1::Recurrence& out) {
  out.Clear();
  switch (rec.kind()) {
    case core::recurrence_kind::at:
      out.set_kind(v1::Recurrence::KIND_AT);
      break;
    case core::recurrence_kind::after:
      out.set_kind(v1::Recurrence::KIND_AFTER);
      break;
    case core::recurrence_kind::fixed_rate:
      out.set_kind(v1::Recurrence::KIND_FIXED_RATE);
      break;
    case core::recurrence_kind::fixed_delay:
      out.set_kind(v1::Recurrence::KIND_FIXED_DELAY);
      break;
    case core::recurrence_kind::intervals:
      out.set_kind(v1::Recurrence::KIND_INTERVALS);
      break;
    case core::recurrence_kind::cron:
      out.set_kind(v1::Recurrence::KIND_CRON);
      break;
  }
  out.set_at_ms(rec.at_ms());
  out.set_delay_ms(rec.delay_ms());
  out.set_period_ms(rec.period_ms());
  out.set_start_ms(rec.start_ms());
  if (rec.end_ms())
    out.set_end_ms(*rec.end_ms());
  if (rec.max_count())
    out.set_max_count(*rec.max_count());
  for (auto interval : rec.intervals_ms())
    out.add_intervals_ms(interval);
  out.set_cyclic(rec.cyclic());
  if (const auto* expr = rec.cron_expr()) {
    out.set_cron(expr->text());
    out.set_zone(expr->zone_name());
  }
}

core::result<core::recurrence> from_proto(const v1::Recurrence& msg) {
  core::recurrence_fields fields;
  switch (msg.kind()) {
    case v1::Recurrence::KIND_AT:
      fields.kind = core::recurrence_kind::at;
      break;
    case v1::Recurrence::KIND_AFTER:
      fields.kind = core::recurrence_kind::after;
      break;
    case v1::Recurrence::KIND_FIXED_RATE:
      fields.kind = core::recurrence_kind::fixed_rate;
      break;
    case v1::Recurrence::KIND_FIXED_DELAY:
      fields.kind = core::recurrence_kind::fixed_delay;
      break;
    case v1::Recurrence::KIND_INTERVALS:
      fields.kind = core::recurrence_kind::intervals;
      break;
    case v1::Recurrence::KIND_CRON:
      fields.kind = core::recurrence_kind::cron;
      break;
    default:
      return corrupt("Recurrence field kind: unknown value " +
                     std::to_string(static_cast<int>(msg.kind())));
  }
  fields.at_ms = msg.at_ms();
  fields.delay_ms = msg.delay_ms();
  fields.period_ms = msg.period_ms();
  fields.start_ms = msg.start_ms();
  if (msg.has_end_ms())
    fields.end_ms = msg.end_ms();
  if (msg.has_max_count())
    fields.max_count = msg.max_count();
  fields.intervals_ms.assign(msg.intervals_ms().begin(),
                             msg.intervals_ms().end());
  fields.cyclic = msg.cyclic();
  fields.cron = msg.cron();
  fields.zone = msg.zone();
  auto rec = core::recurrence::restore(fields);
  if (!rec)
    return corrupt("Recurrence (" + std::string{to_string(fields.kind)} +
                   "): " + std::string{to_string(rec.err().code())} + ": " +
                   rec.err().message());
  return rec;
}

// -- delivery policy ----------------------------------------------------------

void to_proto(const core::delivery_policy& policy, v1::DeliveryPolicy& out) {
  out.set_lease_ms(policy.lease_ms);
  out.set_max_attempts(policy.max_attempts);
  out.set_backoff_initial_ms(policy.backoff_initial_ms);
  out.set_backoff_multiplier_permille(policy.backoff_multiplier_permille);
  out.set_backoff_max_ms(policy.backoff_max_ms);
}

core::result<core::delivery_policy> from_proto(const v1::DeliveryPolicy& msg) {
  core::delivery_policy policy;
  policy.lease_ms = msg.lease_ms();
  policy.max_attempts = msg.max_attempts();
  policy.backoff_initial_ms = msg.backoff_initial_ms();
  policy.backoff_multiplier_permille = msg.backoff_multiplier_permille();
  policy.backoff_max_ms = msg.backoff_max_ms();
  if (auto err = policy.validate())
    return corrupt("DeliveryPolicy: " + err.message());
  return policy;
}

// -- task record --------------------------------------------------------------

namespace {

/// Clears `msg` like Clear(), which would delete its sub-messages: a
/// reused message (the encoder's scratch) keeps them, three allocations
/// fewer per record written. Every field to_proto writes is set anew.
void clear_keeping_parts(v1::TaskRecord& msg) {
  std::unique_ptr<v1::Recurrence> recurrence{msg.release_recurrence()};
  std::unique_ptr<v1::DeliveryPolicy> policy{msg.release_policy()};
  std::unique_ptr<v1::Stamp> stamp_msg{msg.release_stamp()};
  msg.Clear();
  if (recurrence)
    msg.set_allocated_recurrence(recurrence.release());
  if (policy)
    msg.set_allocated_policy(policy.release());
  if (stamp_msg)
    msg.set_allocated_stamp(stamp_msg.release());
}

} // namespace

core::error to_proto(const task_record& rec, v1::TaskRecord& out) {
  const auto& t = rec.task;
  if (!core::is_valid_utf8(t.topic))
    return core::error{core::errc::invalid_topic, "topic of task " +
                                                    std::to_string(t.id) +
                                                    " is not valid UTF-8"};
  clear_keeping_parts(out);
  out.set_id(t.id);
  out.set_topic(t.topic);
  out.set_payload(t.payload);
  out.set_due_ms(t.due_ms);
  to_proto(t.recurrence, *out.mutable_recurrence());
  to_proto(t.policy, *out.mutable_policy());
  out.set_attempt(t.attempt);
  out.set_state(rec.state == task_state::in_flight ? v1::TASK_STATE_IN_FLIGHT
                                                   : v1::TASK_STATE_PENDING);
  out.set_lease_deadline_ms(rec.lease_deadline_ms);
  out.set_lease_ms(rec.lease_ms);
  out.set_retry_at_ms(rec.retry_at_ms);
  if (t.idempotency_key)
    out.set_idempotency_key(*t.idempotency_key);
  out.set_fired_count(rec.fired_count);
  out.mutable_stamp()->set_epoch(rec.stamp.epoch);
  out.mutable_stamp()->set_seq(rec.stamp.seq);
  return {};
}

core::result<task_record> from_proto(const v1::TaskRecord& msg) {
  task_record rec;
  switch (msg.state()) {
    case v1::TASK_STATE_PENDING:
      rec.state = task_state::pending;
      break;
    case v1::TASK_STATE_IN_FLIGHT:
      rec.state = task_state::in_flight;
      break;
    default:
      return corrupt(
        "TaskRecord field state: " +
        std::string{msg.state() == v1::TASK_STATE_UNSPECIFIED
                      ? "unspecified"
                      : "unknown value " + std::to_string(msg.state())});
  }
  auto recurrence = from_proto(msg.recurrence());
  if (!recurrence)
    return corrupt("TaskRecord field recurrence: " +
                   recurrence.err().message());
  auto policy = from_proto(msg.policy());
  if (!policy)
    return corrupt("TaskRecord field policy: " + policy.err().message());
  auto& t = rec.task;
  t.id = msg.id();
  t.topic = msg.topic();
  t.payload = msg.payload();
  t.due_ms = msg.due_ms();
  t.recurrence = std::move(*recurrence);
  t.policy = *policy;
  t.attempt = msg.attempt();
  if (msg.has_idempotency_key())
    t.idempotency_key = msg.idempotency_key();
  rec.lease_deadline_ms = msg.lease_deadline_ms();
  rec.lease_ms = core::kept_lease_ms(msg.lease_ms());
  rec.retry_at_ms = msg.retry_at_ms();
  rec.fired_count = msg.fired_count();
  rec.stamp = stamp{msg.stamp().epoch(), msg.stamp().seq()};
  return rec;
}

// -- dead letter --------------------------------------------------------------

core::error to_proto(const dead_letter& dead, v1::DeadLetter& out) {
  out.Clear();
  if (auto err = to_proto(dead.record, *out.mutable_task()))
    return err;
  out.set_dead_ms(dead.dead_ms);
  if (core::is_valid_utf8(dead.reason))
    out.set_reason(dead.reason);
  else
    out.set_reason(core::sanitize_utf8(dead.reason));
  return {};
}

core::result<dead_letter> from_proto(const v1::DeadLetter& msg) {
  if (!msg.has_task())
    return corrupt("DeadLetter field task: missing");
  auto rec = from_proto(msg.task());
  if (!rec)
    return corrupt("DeadLetter field task: " + rec.err().message());
  return dead_letter{std::move(*rec), msg.dead_ms(), msg.reason()};
}

// -- idempotency entry --------------------------------------------------------

void to_proto(const idempotency_entry& entry, v1::IdempotencyRecord& out) {
  out.set_task_id(entry.task_id);
  out.set_expires_ms(entry.expires_ms);
  out.set_digest(entry.digest);
}

core::result<idempotency_entry> from_proto(const v1::IdempotencyRecord& msg) {
  return idempotency_entry{msg.task_id(), msg.expires_ms(), msg.digest()};
}

// -- shard meta ---------------------------------------------------------------

void to_proto(const shard_meta& meta, v1::ShardMeta& out) {
  out.set_format_version(meta.unindexed_from != 0 ? 2 : 1);
  out.set_shard(meta.shard);
  out.set_shard_count(meta.shard_count);
  out.set_next_local_id(meta.next_local_id);
  out.set_epoch(meta.epoch);
  out.set_last_seq(meta.last_seq);
  out.set_reserved_local_id(meta.reserved_local_id);
  out.set_unindexed_from(meta.unindexed_from);
  out.set_fire_horizon_ms(meta.fire_horizon_ms);
}

core::result<shard_meta> from_proto(const v1::ShardMeta& msg) {
  if (msg.format_version() == 0)
    return corrupt("ShardMeta field format_version: missing");
  if (msg.format_version() > meta_format_version)
    return core::error{core::errc::store_unavailable,
                       "shard meta has format version " +
                         std::to_string(msg.format_version()) +
                         "; this build reads up to version " +
                         std::to_string(meta_format_version)};
  if (msg.shard_count() == 0)
    return corrupt("ShardMeta field shard_count: 0");
  if (msg.shard() >= msg.shard_count())
    return corrupt("ShardMeta field shard: " + std::to_string(msg.shard()) +
                   " is not below shard_count " +
                   std::to_string(msg.shard_count()));
  return shard_meta{msg.shard(),          msg.shard_count(),
                    msg.next_local_id(),  msg.epoch(),
                    msg.last_seq(),       msg.reserved_local_id(),
                    msg.unindexed_from(), msg.fire_horizon_ms()};
}

// -- bytes --------------------------------------------------------------------

namespace {

/// A TaskRecord message per thread, reused: Clear() keeps its strings and
/// submessages, so encoding or decoding a record allocates for the record
/// only, not six times over for the message (a record is encoded once per
/// task at least). A payload beyond `kept_buffer_bytes` is not kept
/// afterwards.
v1::TaskRecord& scratch_task_record() {
  thread_local v1::TaskRecord msg;
  return msg;
}

void trim(v1::TaskRecord& msg) {
  if (msg.payload().capacity() > kept_buffer_bytes) {
    msg.mutable_payload()->clear();
    msg.mutable_payload()->shrink_to_fit();
  }
}

} // namespace

core::result<std::string> encode(const task_record& rec) {
  std::string out;
  if (auto err = encode_stamped(rec, rec.stamp, out))
    return err;
  return out;
}

core::error encode_stamped(const task_record& rec, stamp at, std::string& out) {
  auto& msg = scratch_task_record();
  auto err = to_proto(rec, msg);
  if (!err) {
    msg.mutable_stamp()->set_epoch(at.epoch);
    msg.mutable_stamp()->set_seq(at.seq);
    out.clear();
    msg.AppendToString(&out);
  }
  trim(msg);
  return err;
}

core::result<std::string> encode(const dead_letter& dead) {
  v1::DeadLetter msg;
  if (auto err = to_proto(dead, msg))
    return err;
  return msg.SerializeAsString();
}

std::string encode(const idempotency_entry& entry) {
  v1::IdempotencyRecord msg;
  to_proto(entry, msg);
  return msg.SerializeAsString();
}

std::string encode(const shard_meta& meta) {
  v1::ShardMeta msg;
  to_proto(meta, msg);
  return msg.SerializeAsString();
}

core::result<task_record> decode_task_record(std::string_view bytes) {
  auto& msg = scratch_task_record();
  if (!parse(msg, bytes)) {
    trim(msg);
    return unparsable("TaskRecord", bytes);
  }
  auto out = from_proto(msg);
  trim(msg);
  return out;
}

core::result<dead_letter> decode_dead_letter(std::string_view bytes) {
  v1::DeadLetter msg;
  if (!parse(msg, bytes))
    return unparsable("DeadLetter", bytes);
  return from_proto(msg);
}

core::result<idempotency_entry>
decode_idempotency_entry(std::string_view bytes) {
  v1::IdempotencyRecord msg;
  if (!parse(msg, bytes))
    return unparsable("IdempotencyRecord", bytes);
  return from_proto(msg);
}

core::result<shard_meta> decode_shard_meta(std::string_view bytes) {
  v1::ShardMeta msg;
  if (!parse(msg, bytes))
    return unparsable("ShardMeta", bytes);
  return from_proto(msg);
}

} // namespace dally::storage
