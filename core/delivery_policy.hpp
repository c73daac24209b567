#pragma once

#include <cstdint>

#include "core/error.hpp"
#include "core/task_limits.hpp"

namespace dally::core {

/// How a task is delivered: how long a consumer may hold it, how often it is
/// retried and how long to wait between retries. Plain fields with defaults
/// (like rocksdb::Options) so that it maps one to one onto a protobuf record.
///
/// Backoff is exponential with a cap and uses integer arithmetic only (the
/// multiplier is in thousandths), so every node and the simulator compute
/// exactly the same retry times.
struct delivery_policy {
  /// Time-to-run: a delivery not acked, nacked or touched within this lease
  /// counts as failed and is redelivered. Must be > 0.
  int64_t lease_ms = 30'000;

  /// Deliveries before the task moves to the dead-letter set. Must be >= 1;
  /// 1 means no retry.
  uint32_t max_attempts = 10;

  /// Wait before the second delivery (after the first failed). Must be >= 0.
  int64_t backoff_initial_ms = 1'000;

  /// Growth of the wait per further attempt, in thousandths: 2000 doubles
  /// it, 1500 grows it by half, 1000 keeps it constant. Must be >= 1000
  /// (a shrinking backoff would hammer a struggling consumer).
  uint32_t backoff_multiplier_permille = 2'000;

  /// Upper bound of the wait. Must be >= backoff_initial_ms.
  int64_t backoff_max_ms = 600'000;

  /// The wait before redelivering after delivery number `attempt` failed
  /// (`attempt` is task::attempt after that delivery, so 1 for the first).
  /// backoff_ms(0) is 0; backoff_ms(1) is backoff_initial_ms; each further
  /// attempt multiplies the previous wait by the multiplier, rounding up to
  /// whole ms so that any multiplier above 1000 really grows; the result
  /// never exceeds backoff_max_ms and never overflows.
  int64_t backoff_ms(uint32_t attempt) const noexcept;

  /// errc::none if every field is in range, else errc::invalid_policy with
  /// a message naming the field, its value and the rule it breaks. The
  /// lease and the waits are at most `max_wait_ms` (the node's maximum
  /// delay, task_limits::max_delay_ms), so that no lease deadline or retry
  /// time leaves the supported range.
  error validate(int64_t max_wait_ms = task_limits{}.max_delay_ms) const;

  friend bool operator==(const delivery_policy&,
                         const delivery_policy&) = default;
};

} // namespace dally::core
