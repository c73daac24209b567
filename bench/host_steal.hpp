#pragma once

// How much of this machine's CPU time its host took away: the steal time
// of /proc/stat. A KVM guest whose vCPUs the host deschedules loses them
// for milliseconds at a time, also while a thread runs; no software on the
// guest meets a deadline inside such a gap. The benchmarks report it beside
// their figures, so that a slow or late run can be told from a slow build.

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace dally::bench {

/// All CPUs' time in jiffies, from the "cpu" line of /proc/stat.
struct cpu_times {
  uint64_t total = 0;
  uint64_t steal = 0;
  /// False if /proc/stat could not be read (not Linux, no /proc).
  bool ok = false;

  static cpu_times now() {
    cpu_times out;
    std::ifstream in("/proc/stat");
    std::string line;
    if (!std::getline(in, line) || line.rfind("cpu ", 0) != 0)
      return out;
    std::istringstream fields(line.substr(4));
    // user nice system idle iowait irq softirq steal (guest time is
    // already counted in user and nice).
    uint64_t x = 0;
    for (int i = 0; i < 8 && fields >> x; ++i) {
      out.total += x;
      if (i == 7) {
        out.steal = x;
        out.ok = true;
      }
    }
    return out;
  }
};

/// The host's steal between two readings in percent of all CPU time, or a
/// negative number if either reading failed or no time passed.
inline double steal_percent(const cpu_times& from, const cpu_times& to) {
  if (!from.ok || !to.ok || to.total <= from.total || to.steal < from.steal)
    return -1;
  return 100.0 * static_cast<double>(to.steal - from.steal) /
         static_cast<double>(to.total - from.total);
}

/// `percent` with one decimal, or "n/a" when it is unknown.
inline std::string steal_text(double percent) {
  if (percent < 0)
    return "n/a";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << percent;
  return out.str();
}

} // namespace dally::bench
