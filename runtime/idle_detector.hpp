#pragma once

#include <cstdint>
#include <optional>

namespace dally::runtime {

/// Tells whether a process is idle, from its CPU time sampled at steady
/// intervals: an interval in which it used less than `idle_permille` of
/// one core. The heap purger returns freed pages in each such interval,
/// so that a busy process keeps reusing them and an idle one (or one
/// under a light load) does not hold them.
class idle_detector {
public:
  explicit idle_detector(int64_t idle_permille) noexcept
    : idle_permille_(idle_permille) {
    // nop
  }

  /// Feeds the process's CPU time so far (`cpu_us`) at `now_us` (steady
  /// clock). True when the interval since the previous call was idle. The
  /// first call only records, as does one at the same instant.
  bool idle(int64_t now_us, int64_t cpu_us) noexcept;

private:
  int64_t idle_permille_;
  std::optional<int64_t> last_now_us_;
  int64_t last_cpu_us_ = 0;
};

} // namespace dally::runtime
