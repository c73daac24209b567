#pragma once

// The host's own timer lateness: the baseline for Dally's firing lateness.
// A KVM guest whose vCPUs the host deschedules wakes even an idle thread
// late; no delay engine on that guest can fire more punctually than this.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace dally::bench {

/// A thread that sleeps until deadlines `period` apart and records how late
/// it woke for each (a stall makes every deadline in it late, as it would
/// tasks due one per period), each sample keyed by its deadline in UTC ms (so
/// that it can be bucketed like the due times of the tasks it runs beside).
class timer_probe {
public:
  using clock_type = std::chrono::steady_clock;

  explicit timer_probe(
    std::chrono::microseconds period = std::chrono::microseconds{1000})
    : period_(period) {
    // nop
  }

  timer_probe(const timer_probe&) = delete;
  timer_probe& operator=(const timer_probe&) = delete;

  ~timer_probe() { stop(); }

  void start() {
    stop();
    running_ = true;
    thread_ = std::thread{[this] { loop(); }};
  }

  /// Stops the thread; the samples stay.
  void stop() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      running_ = false;
    }
    if (thread_.joinable())
      thread_.join();
  }

  /// (deadline in UTC ms, lateness in µs) of every wake-up so far.
  std::vector<std::pair<int64_t, int64_t>> samples() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return samples_;
  }

  /// Runs the probe for `span` on the calling thread's behalf and returns
  /// the sorted lateness in µs.
  static std::vector<int64_t> measure(std::chrono::milliseconds span) {
    timer_probe probe;
    probe.start();
    std::this_thread::sleep_for(span);
    probe.stop();
    std::vector<int64_t> out;
    for (auto& sample : probe.samples())
      out.push_back(sample.second);
    std::sort(out.begin(), out.end());
    return out;
  }

  /// What a thread that never sleeps sees: it reads the clock in a loop
  /// for `span` and counts the gaps between two reads longer than 2 ms,
  /// which on an otherwise idle machine only the host taking the vCPU away
  /// (or an interrupt storm) makes.
  /// A timer firing inside such a gap is late by the rest of it however
  /// the waiting is done, polling included.
  struct spin_stalls {
    uint64_t over_2ms = 0;
    int64_t longest_us = 0;
    double span_s = 0;
  };

  static spin_stalls spin(std::chrono::milliseconds span) {
    spin_stalls out;
    auto start = clock_type::now();
    auto end = start + span;
    auto last = start;
    for (auto now = last; now < end; last = now) {
      now = clock_type::now();
      auto gap_us =
        std::chrono::duration_cast<std::chrono::microseconds>(now - last)
          .count();
      if (gap_us > 2'000)
        ++out.over_2ms;
      out.longest_us = std::max(out.longest_us, gap_us);
    }
    out.span_s = std::chrono::duration<double>(last - start).count();
    return out;
  }

private:
  void loop() {
    using namespace std::chrono;
    auto steady0 = clock_type::now();
    auto wall0_us =
      duration_cast<microseconds>(system_clock::now().time_since_epoch())
        .count();
    auto deadline = steady0 + period_;
    for (;;) {
      std::this_thread::sleep_until(deadline);
      auto woke = clock_type::now();
      auto late_us = duration_cast<microseconds>(woke - deadline).count();
      auto due_ms =
        (wall0_us + duration_cast<microseconds>(deadline - steady0).count()) /
        1000;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        if (!running_)
          return;
        samples_.emplace_back(due_ms, late_us);
      }
      // After a stall the missed deadlines follow at once, each with its
      // own lateness, as tasks due one per period would.
      deadline += period_;
    }
  }

  std::chrono::microseconds period_;
  mutable std::mutex mtx_;
  bool running_ = false;
  std::vector<std::pair<int64_t, int64_t>> samples_;
  std::thread thread_;
};

} // namespace dally::bench
