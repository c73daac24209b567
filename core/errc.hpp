#pragma once

#include <cstdint>
#include <string_view>

namespace dally::core {

/// Dally's error codes. Core code returns them inside `core::error`; the
/// actor layer maps them one to one onto a `caf::error` category, so a code
/// keeps its meaning from the pure core up to a remote client.
enum class errc : uint8_t {
  none = 0,
  /// A time is negative, overflows, or lies outside the supported range.
  invalid_time,
  /// A delay exceeds the configured maximum.
  delay_too_large,
  /// A period or interval is zero or negative.
  invalid_period,
  /// An interval list is empty.
  empty_intervals,
  /// A repetition count is zero.
  invalid_count,
  /// A cron expression does not parse; the message names the field.
  malformed_cron,
  /// A time zone name is not in the IANA database.
  unknown_time_zone,
  /// A topic is empty or too long.
  invalid_topic,
  /// A payload exceeds the configured maximum size.
  payload_too_large,
  /// A delivery policy is inconsistent (lease, attempts, backoff).
  invalid_policy,
  /// A recurrence has no occurrence at or after the requested time.
  no_occurrence,
  /// An id is not known.
  not_found,
  /// An id is already present.
  duplicate_id,
  /// An idempotency key is empty or too long.
  invalid_idempotency_key,
  /// An interval list has more entries than the configured maximum.
  too_many_intervals,
  /// The store failed to read or write (the message carries the cause).
  io_error,
  /// The disk is full; nothing of the failed batch was written.
  no_space,
  /// The data directory is locked by another process or store instance.
  store_locked,
  /// A stored record does not decode; the message names its key.
  corrupt_record,
  /// The store is closed or was opened with incompatible settings.
  store_unavailable,
  /// An epoch older than the current one: a newer owner has taken over.
  stale_epoch,
  /// An ack, nack or touch names a delivery that is no longer current: the
  /// lease ran out and the task was redelivered, or it was settled already.
  stale_delivery,
  /// A request is missing a required field or mixes incompatible ones.
  invalid_request,
  /// A shard is restarting or gave up, or a peer did not answer; the
  /// request may be retried (with its idempotency key).
  unavailable,
  /// An idempotency key already names a task with another topic or payload.
  idempotency_conflict,
  /// A request is larger than the node reads in one message; a remote
  /// client refuses it before it is sent, so the connection stays up.
  request_too_large,
  /// The engine holds as much accepted work as it is configured to (new
  /// tasks not answered yet); nothing was done. Retry later, after a
  /// pause: the refusal is cheap, and a retry with the same idempotency
  /// key is safe.
  overloaded,
};

/// Returns the enumerator's name, e.g. "invalid_time".
std::string_view to_string(errc code) noexcept;

} // namespace dally::core
