#include "runtime/idle_detector.hpp"

namespace dally::runtime {

bool idle_detector::idle(int64_t now_us, int64_t cpu_us) noexcept {
  if (!last_now_us_) {
    last_now_us_ = now_us;
    last_cpu_us_ = cpu_us;
    return false;
  }
  if (now_us <= *last_now_us_)
    return false; // No interval to judge.
  auto span_us = now_us - *last_now_us_;
  auto used_us = cpu_us > last_cpu_us_ ? cpu_us - last_cpu_us_ : 0;
  last_now_us_ = now_us;
  last_cpu_us_ = cpu_us;
  // used / span <= permille / 1000, without a division; both fit easily
  // (spans of years at most).
  return used_us * 1000 <= idle_permille_ * span_us;
}

} // namespace dally::runtime
