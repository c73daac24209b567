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

} // namespace dally::logic
