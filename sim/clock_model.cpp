#include "sim/clock_model.hpp"

#include <algorithm>

namespace dally::sim {

clock_model::clock_model(int64_t max_skew_ms) noexcept
  : max_skew_ms_(std::max<int64_t>(max_skew_ms, 0)) {
  // nop
}

int64_t clock_model::wall_ms(int64_t true_ms) noexcept {
  auto now = true_ms + offset_ms_;
  high_water_ms_ = std::max(high_water_ms_, now);
  return now;
}

int64_t clock_model::shift(int64_t true_ms, int64_t delta_ms) noexcept {
  // The reading just before the jump counts towards the high-water mark.
  wall_ms(true_ms);
  auto before = offset_ms_;
  offset_ms_ = std::clamp(offset_ms_ + delta_ms, -max_skew_ms_, max_skew_ms_);
  return offset_ms_ - before;
}

int64_t clock_model::high_water_ms(int64_t true_ms) noexcept {
  wall_ms(true_ms);
  return high_water_ms_;
}

} // namespace dally::sim
