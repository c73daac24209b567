#include "sim/clock_model.hpp"

#include <algorithm>

namespace dally::sim {

clock_model::clock_model(int64_t max_skew_ms, int64_t drift_ppm,
                         int64_t origin_ms) noexcept
  : max_skew_ms_(std::max<int64_t>(max_skew_ms, 0)), drift_ppm_(drift_ppm),
    origin_ms_(origin_ms) {
  // nop
}

int64_t clock_model::wall_ms(int64_t true_ms) const noexcept {
  auto drift = (true_ms - origin_ms_) * drift_ppm_ / 1'000'000;
  return true_ms + offset_ms_ + jump_ms_ + drift;
}

int64_t clock_model::shift(int64_t delta_ms) noexcept {
  auto before = offset_ms_;
  offset_ms_ = std::clamp(offset_ms_ + delta_ms, -max_skew_ms_, max_skew_ms_);
  return offset_ms_ - before;
}

} // namespace dally::sim
