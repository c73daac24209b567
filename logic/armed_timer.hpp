#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

namespace dally::logic {

/// One timer an actor keeps armed at the earliest of its next work: the
/// actor sends itself a message with the generation this returns, and
/// acts on a message only if its generation is the armed one, so that
/// arming sooner (or cancelling) needs no way to take a sent message back.
///
/// Targets are wall-clock times, but the message waits on the steady
/// clock, which an NTP step does not move. So no wait is trusted for
/// long: each is capped at `max_wait_us`, after which the actor re-reads
/// the wall clock and arms again; and a target that, read on the wall
/// clock now, comes sooner on the steady clock than the armed message
/// (the wall clock stepped forward) re-arms at once.
class armed_timer {
public:
  static constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

  /// The longest wait derived from one reading of the wall clock: after a
  /// backward step and the step back, due work waits at most this long.
  static constexpr int64_t max_wait_us = 1'000'000;

  /// A forward step smaller than this does not re-arm a timer for the same
  /// target (reading the wall clock in whole ms must not re-arm on every
  /// call); the timer then comes this much late at most.
  static constexpr int64_t step_tolerance_us = 2'000;

  /// The message to send: its generation, and after how long.
  struct wake {
    uint64_t generation = 0;
    int64_t delay_us = 0;
  };

  /// Arms for the wall-clock time `at_ms`, the wall clock reading `now_us`
  /// at steady time `steady_us` (both in µs), unless the armed message
  /// comes then or sooner on the steady clock (it re-arms when it comes):
  /// the message to send, or nullopt. never_ms arms nothing.
  std::optional<wake> arm(int64_t at_ms, int64_t now_us,
                          int64_t steady_us) noexcept {
    if (at_ms == never_ms)
      return std::nullopt;
    int64_t wait_us = 0;
    auto now_ms = now_us / 1000;
    if (at_ms >= now_ms + max_wait_us / 1000)
      wait_us = max_wait_us;
    else if (at_ms > now_ms - 1)
      wait_us = std::max<int64_t>(0, at_ms * 1000 - now_us);
    auto fire_us = steady_us + wait_us;
    if (armed_ms_ != never_ms && fire_us >= fire_us_)
      return std::nullopt;
    if (at_ms >= armed_ms_ && fire_us + step_tolerance_us >= fire_us_)
      return std::nullopt;
    armed_ms_ = at_ms;
    fire_us_ = fire_us;
    return wake{++generation_, wait_us};
  }

  /// A message sent now, apart from the armed target: the generation to
  /// send (it replaces the armed one).
  uint64_t now() noexcept { return ++generation_; }

  /// Nothing to wait for: the armed message, if any, is ignored.
  void cancel() noexcept {
    if (armed_ms_ != never_ms) {
      ++generation_;
      armed_ms_ = never_ms;
    }
  }

  /// Whether the message of generation `gen` is the armed one; if so,
  /// nothing is armed any more.
  bool claim(uint64_t gen) noexcept {
    if (gen != generation_)
      return false;
    armed_ms_ = never_ms;
    return true;
  }

  /// The wall-clock target of the armed message; never_ms when none is
  /// armed.
  int64_t armed_ms() const noexcept { return armed_ms_; }

private:
  uint64_t generation_ = 0;
  int64_t armed_ms_ = never_ms;
  /// When the armed message comes, on the steady clock (µs).
  int64_t fire_us_ = 0;
};

} // namespace dally::logic
