#pragma once

#include <chrono>
#include <cstdint>
#include <deque>

namespace dally::logic {

/// When the supervisor restarts a shard that failed: soon at first
/// (10 ms), backing off (doubling, at most 1 s) while it keeps failing,
/// and a minute after more than `max_per_minute` restarts within a minute,
/// so that a shard whose store cannot work does not spin.
class restart_backoff {
public:
  using steady_time = std::chrono::steady_clock::time_point;

  explicit restart_backoff(uint32_t max_per_minute)
    : max_per_minute_(max_per_minute < 1 ? 1 : max_per_minute) {}

  /// The shard failed at `now`: how long until it restarts.
  std::chrono::milliseconds failed(steady_time now);

  /// The shard serves again: the backoff starts over.
  void serving() noexcept { backoff_ = std::chrono::milliseconds{0}; }

private:
  uint32_t max_per_minute_;
  /// Times of recent restarts.
  std::deque<steady_time> restarts_;
  std::chrono::milliseconds backoff_{0};
};

} // namespace dally::logic
