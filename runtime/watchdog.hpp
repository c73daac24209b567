#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dally::runtime {

/// Calls a function on its own thread if it is not disarmed in time. A
/// process arms it before a step that may hang (CAF 0.17's actor system
/// teardown waits for every actor and connection without a limit) and
/// disarms it after; what to do then (log, exit) is the caller's.
class watchdog {
public:
  watchdog() = default;
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;

  /// Disarms and joins.
  ~watchdog();

  /// Calls `on_expiry` after `limit` unless disarm() (or the destructor)
  /// comes first. Arming an armed watchdog replaces nothing: it is
  /// disarmed first.
  void arm(std::chrono::milliseconds limit, std::function<void()> on_expiry);

  /// Stops the countdown; returns whether `on_expiry` ran (or is running).
  bool disarm();

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool fired_ = false;
  std::thread thread_;
};

/// The threads of this process, one per entry: "name (state, wait channel)",
/// from /proc/self/task; for a report of where a process hangs.
std::string describe_threads();

} // namespace dally::runtime
