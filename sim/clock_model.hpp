#pragma once

#include <algorithm>
#include <cstdint>

namespace dally::sim {

/// The simulated wall clock the engine reads, against the simulation's true
/// time: true time plus a skew that drifts in small steps and jumps forward
/// and backward within +-max_skew_ms, plus jumps of seconds to hours (an
/// NTP step, a wrong clock set right), plus a steady drift of `drift_ppm`
/// millionths of the time since `origin_ms`. The oracle records the readings
/// the engine makes (see oracle::clock_read).
class clock_model {
public:
  explicit clock_model(int64_t max_skew_ms, int64_t drift_ppm = 0,
                       int64_t origin_ms = 0) noexcept;

  /// The wall clock at true time `true_ms` (which never goes back).
  int64_t wall_ms(int64_t true_ms) const noexcept;

  /// Moves the skew by `delta_ms`, clamped to the skew bound; returns the
  /// skew's actual change.
  int64_t shift(int64_t delta_ms) noexcept;

  /// Steps the clock by `delta_ms`, unbounded.
  void jump(int64_t delta_ms) noexcept {
    jump_ms_ += delta_ms;
    max_jump_ms_ = std::max(max_jump_ms_, jump_ms_);
  }

  /// How far the jumps have left the clock behind the furthest it was
  /// ahead: due times the engine worked out then lie up to this much later
  /// on the clock it now has.
  int64_t stepped_back_ms() const noexcept { return max_jump_ms_ - jump_ms_; }

  /// The skew and the jumps together (the drift apart).
  int64_t offset_ms() const noexcept { return offset_ms_ + jump_ms_; }

  int64_t max_skew_ms() const noexcept { return max_skew_ms_; }

private:
  int64_t max_skew_ms_;
  int64_t drift_ppm_;
  int64_t origin_ms_;
  int64_t offset_ms_ = 0;
  int64_t jump_ms_ = 0;
  int64_t max_jump_ms_ = 0;
};

} // namespace dally::sim
