#include "logic/wall_clock.hpp"

#include <chrono>
#include <utility>

#include "logic/engine_config.hpp"

namespace dally::logic {

int64_t system_wall_clock_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

wall_clock::wall_clock(std::function<int64_t()> read_ms)
  : read_ms_(std::move(read_ms)) {
  if (!read_ms_)
    read_ms_ = system_wall_clock_ms;
  using clock_fn = int64_t (*)();
  auto* fn = read_ms_.target<clock_fn>();
  system_ = fn != nullptr && *fn == &system_wall_clock_ms;
}

int64_t wall_clock::now_us() const {
  if (!system_)
    return read_ms_() * 1000;
  return std::chrono::duration_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

int64_t wall_clock::delay_until_us(int64_t target_ms) const {
  return target_ms * 1000 - now_us();
}

} // namespace dally::logic
