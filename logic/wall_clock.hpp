#pragma once

#include <cstdint>
#include <functional>

namespace dally::logic {

/// The wall clock (UTC ms) an actor checks due times against, and how long
/// its timers wait for it. Waiting itself happens on the actor clock
/// (virtual under test), so timers re-check this clock when they fire.
class wall_clock {
public:
  /// `read_ms` empty: the system clock.
  explicit wall_clock(std::function<int64_t()> read_ms = {});

  int64_t now_ms() const { return read_ms_(); }

  /// The clock in µs (see delay_until_us); an injected clock in whole ms.
  int64_t now_us() const;

  /// µs until the clock reads `target_ms`; at most 0 when it already does.
  /// The system clock is read in µs, so that a timer does not wake up to
  /// 1 ms late from truncating now to the ms; an injected clock (tests, the
  /// simulator) counts in whole ms.
  int64_t delay_until_us(int64_t target_ms) const;

  const std::function<int64_t()>& reader() const noexcept { return read_ms_; }

private:
  std::function<int64_t()> read_ms_;
  bool system_ = false;
};

/// Tells a step of the wall clock (NTP, an operator) from time passing, by
/// watching it against the steady clock: the difference of the two moves
/// only by drift between readings, and by the whole step across one.
class clock_step_watch {
public:
  /// Smaller moves count as drift and reading jitter.
  static constexpr int64_t min_step_us = 1'000'000;

  /// The wall clock read `wall_us` at steady time `steady_us`: how far it
  /// stepped since the previous reading (forward above 0), or 0.
  int64_t observe(int64_t wall_us, int64_t steady_us) noexcept {
    auto offset_us = wall_us - steady_us;
    auto step_us = seen_ ? offset_us - offset_us_ : 0;
    seen_ = true;
    offset_us_ = offset_us;
    return step_us >= min_step_us || step_us <= -min_step_us ? step_us : 0;
  }

private:
  bool seen_ = false;
  int64_t offset_us_ = 0;
};

} // namespace dally::logic
