#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/delivery_policy.hpp"
#include "core/error.hpp"
#include "core/recurrence.hpp"
#include "core/task_limits.hpp"
#include "core/timer_entry.hpp"

namespace dally::core {

/// A unit of delayed work: deliver `payload` to the consumers of `topic` at
/// `due_ms`, then again per `recurrence`, retrying per `policy` until acked.
/// Plain fields, so that it maps one to one onto the protobuf task record.
struct task {
  /// Cluster-unique id; `id % shard_count` is the owning shard.
  task_id id = 0;

  /// Routing key: consumers subscribe to topics.
  std::string topic;

  /// Opaque bytes handed to the consumer as they are.
  std::string payload;

  /// When the current occurrence is due, UTC ms. Never delivered earlier.
  int64_t due_ms = 0;

  /// What happens after the current occurrence is acked.
  core::recurrence recurrence;

  /// Lease, retries and backoff of each delivery.
  delivery_policy policy;

  /// Deliveries of the current occurrence so far: 0 before the first,
  /// incremented by one per delivery.
  uint32_t attempt = 0;

  /// Client-chosen key: scheduling twice with the same key yields one task.
  std::optional<std::string> idempotency_key;

  /// errc::none if the task may be accepted at `now_ms` under `limits`,
  /// else the first problem found, with a message naming the value and the
  /// limit: invalid_topic (empty, too long, control characters),
  /// payload_too_large, invalid_idempotency_key (empty or too long),
  /// invalid_time (now or due outside the supported range),
  /// delay_too_large (due more than limits.max_delay_ms after now),
  /// invalid_policy (see delivery_policy::validate). A due time in the
  /// past is fine: the task fires at once.
  error validate(int64_t now_ms, const task_limits& limits = {}) const;

  friend bool operator==(const task&, const task&) = default;
};

/// errc::none if `topic` may name a topic under `limits`, else
/// invalid_topic: empty, longer than limits.max_topic_bytes, a control
/// character, or not valid UTF-8.
error validate_topic(const std::string& topic, const task_limits& limits = {});

} // namespace dally::core
