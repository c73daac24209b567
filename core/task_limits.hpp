#pragma once

#include <cstddef>
#include <cstdint>

#include "core/time_range.hpp"

namespace dally::core {

/// Size and time limits a node enforces on every incoming task, so that no
/// client can exhaust memory, disk or the supported time range. Plain
/// fields with defaults, like rocksdb::Options: set what you need to change.
struct task_limits {
  /// Longest topic, in bytes. Topics route deliveries; they are not data.
  size_t max_topic_bytes = 256;

  /// Largest payload, in bytes (1 MiB). Bigger blobs belong in a blob store
  /// with a reference in the payload.
  size_t max_payload_bytes = size_t{1} << 20;

  /// Longest delay from now to a due time, to a start time, and longest
  /// period or interval (3653 days, i.e. ten years including leap days).
  int64_t max_delay_ms = 3653 * ms_per_day;

  /// Longest idempotency key, in bytes.
  size_t max_idempotency_key_bytes = 256;

  /// Most entries in an interval list.
  size_t max_intervals = 1024;

  friend bool operator==(const task_limits&, const task_limits&) = default;
};

} // namespace dally::core
