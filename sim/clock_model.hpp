#pragma once

#include <cstdint>

namespace dally::sim {

/// The simulated wall clock the engine reads, against the simulation's true
/// time: true time plus an offset that drifts in small steps and jumps
/// forward and backward, always within +-max_skew_ms. The oracle records
/// the readings the engine makes (see oracle::clock_read).
class clock_model {
public:
  explicit clock_model(int64_t max_skew_ms) noexcept;

  /// The wall clock at true time `true_ms` (which never goes back).
  int64_t wall_ms(int64_t true_ms) const noexcept;

  /// Moves the offset by `delta_ms`, clamped to the skew bound; returns the
  /// offset's actual change.
  int64_t shift(int64_t delta_ms) noexcept;

  int64_t offset_ms() const noexcept { return offset_ms_; }

  int64_t max_skew_ms() const noexcept { return max_skew_ms_; }

private:
  int64_t max_skew_ms_;
  int64_t offset_ms_ = 0;
};

} // namespace dally::sim
