#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace dally::runtime {

/// Returns the allocator's freed pages to the OS in every interval in
/// which the process is idle (see idle_detector), from a thread of its own.
/// dallyd runs on jemalloc with a long decay (core/jemalloc_conf.cpp), so that
/// under load new write buffers and batches reuse freed pages instead of
/// faulting in fresh ones; this purger keeps an idle node's RSS at what its
/// pending tasks need. Without jemalloc (`available()` false) it does nothing.
class heap_purger {
public:
  struct hooks {
    /// The process's CPU time so far in µs, less the purger's own.
    std::function<int64_t()> cpu_us;
    /// Hands freed pages back to the OS; false if it could not.
    std::function<bool()> purge;
  };

  struct options {
    /// How often the process's CPU time is sampled.
    std::chrono::milliseconds period{250};
    /// An interval below this share of one core (per mille) is idle.
    int64_t idle_permille = 50;
  };

  /// Whether this process runs on an allocator the purger can purge
  /// (jemalloc, linked or preloaded).
  static bool available();

  /// Sampling getrusage and purging every jemalloc arena.
  static hooks process_hooks();

  /// Starts the thread; with `hooks` for tests.
  explicit heap_purger(options opts, hooks h = process_hooks());

  /// Stops and joins the thread.
  ~heap_purger();

  heap_purger(const heap_purger&) = delete;
  heap_purger& operator=(const heap_purger&) = delete;

  /// Purges done so far (one per idle interval).
  uint64_t purges() const noexcept {
    return purges_.load(std::memory_order_relaxed);
  }

private:
  void run();

  options opts_;
  hooks hooks_;
  std::atomic<uint64_t> purges_{0};
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace dally::runtime
