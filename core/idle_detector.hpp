#pragma once

#include <cstdint>
#include <optional>

namespace dally::core {

/// Tells when a process has just gone idle, from its CPU time sampled at
/// steady intervals: the first interval in which it used less than
/// `idle_permille` of one core, after one in which it used more. The heap
/// purger returns freed pages then, once per idle spell, so that a busy
/// process keeps reusing them and an idle one does not hold them.
class idle_detector {
public:
  explicit idle_detector(int64_t idle_permille) noexcept
    : idle_permille_(idle_permille) {
    // nop
  }

  /// Feeds the process's CPU time so far (`cpu_us`) at `now_us` (steady
  /// clock). True when the interval since the previous call was idle and
  /// the process was busy since the last true (or since it started: the
  /// start-up's garbage counts). The first call only records.
  bool idle_after_busy(int64_t now_us, int64_t cpu_us) noexcept;

private:
  int64_t idle_permille_;
  std::optional<int64_t> last_now_us_;
  int64_t last_cpu_us_ = 0;
  bool busy_since_ = true;
};

} // namespace dally::core
