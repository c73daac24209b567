#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/delivery_policy.hpp"
#include "core/error.hpp"
#include "core/recurrence.hpp"
#include "core/result.hpp"
#include "proto/dally.pb.h"
#include "storage/task_record.hpp"

namespace dally::storage {

// Conversions between the storage structs and their protobuf messages
// (schema v1, proto/dally.proto), and between those and bytes.
//
// Decoding never trusts its input: bytes that do not parse or a field that
// no valid value can have (unknown enum value, recurrence that does not
// rebuild, missing nested message) give errc::corrupt_record with a message
// naming the field. Unknown fields written by newer versions are ignored.
//
// Encoding refuses text that is not valid UTF-8: protobuf writes such a
// string field but refuses to parse it back, so it would turn an accepted
// task into an unreadable record.

/// Fills `out` with every field of `rec` (its accessors' values).
void to_proto(const core::recurrence& rec, v1::Recurrence& out);

/// Rebuilds a recurrence equal to the one written (see
/// core::recurrence::restore).
core::result<core::recurrence> from_proto(const v1::Recurrence& msg);

/// Fills `out` with the policy's fields.
void to_proto(const core::delivery_policy& policy, v1::DeliveryPolicy& out);

/// The policy, if it passes delivery_policy::validate.
core::result<core::delivery_policy> from_proto(const v1::DeliveryPolicy& msg);

/// Errors: invalid_topic if the topic is not
/// valid UTF-8.
core::error to_proto(const task_record& rec, v1::TaskRecord& out);

/// Errors: corrupt_record for an unspecified or unknown state, a
/// recurrence that does not restore or a policy that does not validate.
core::result<task_record> from_proto(const v1::TaskRecord& msg);

/// Like the task record's; a reason that is not valid UTF-8 (it is text for
/// people) is stored with each bad byte replaced by U+FFFD.
core::error to_proto(const dead_letter& dead, v1::DeadLetter& out);

/// Errors: corrupt_record for a missing or invalid task.
core::result<dead_letter> from_proto(const v1::DeadLetter& msg);

/// Fills `out` with the entry's fields.
void to_proto(const idempotency_entry& entry, v1::IdempotencyRecord& out);

/// Every field value is valid, so this never fails; it returns a result
/// like its siblings.
core::result<idempotency_entry> from_proto(const v1::IdempotencyRecord& msg);

/// Writes format_version 1.
void to_proto(const shard_meta& meta, v1::ShardMeta& out);

/// Errors: corrupt_record for a missing format version, a zero shard count
/// or a shard outside it; store_unavailable for a format version newer than
/// this build reads.
core::result<shard_meta> from_proto(const v1::ShardMeta& msg);

/// The serialized TaskRecord; errors as for to_proto.
core::result<std::string> encode(const task_record& rec);

/// Buffers reused from record to record keep at most this much: one
/// large payload does not pin its memory for every record after it.
constexpr size_t kept_buffer_bytes = 64 << 10;

/// Serializes `rec` as carrying `at` for its stamp into `out`, whose
/// capacity it reuses: the store's hot path stamps and encodes every
/// record it writes without copying the record or allocating.
core::error encode_stamped(const task_record& rec, stamp at, std::string& out);

/// The serialized DeadLetter; errors as for to_proto.
core::result<std::string> encode(const dead_letter& dead);

/// The serialized IdempotencyRecord.
std::string encode(const idempotency_entry& entry);

/// The serialized ShardMeta.
std::string encode(const shard_meta& meta);

/// Parses and checks a TaskRecord; corrupt_record if the bytes do not
/// parse, else as from_proto.
core::result<task_record> decode_task_record(std::string_view bytes);

/// As decode_task_record, for a DeadLetter.
core::result<dead_letter> decode_dead_letter(std::string_view bytes);

/// As decode_task_record, for an IdempotencyRecord.
core::result<idempotency_entry>
decode_idempotency_entry(std::string_view bytes);

/// As decode_task_record, for a ShardMeta.
core::result<shard_meta> decode_shard_meta(std::string_view bytes);

} // namespace dally::storage
