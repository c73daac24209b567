#include "runtime/heap_purger.hpp"

#include <ctime>

#include <sys/resource.h>

#include "runtime/idle_detector.hpp"
#include "runtime/jemalloc_ctl.hpp"

namespace dally::runtime {

namespace {

int64_t micros(const timeval& tv) {
  return static_cast<int64_t>(tv.tv_sec) * 1'000'000 + tv.tv_usec;
}

/// The calling thread's CPU time, µs.
int64_t thread_cpu_us() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 0;
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

} // namespace

bool heap_purger::available() {
  return find_mallctl() != nullptr;
}

heap_purger::hooks heap_purger::process_hooks() {
  hooks h;
  // Called on the purger's thread: its own CPU (the purges) is left out,
  // or a long purge would make the next interval look busy.
  h.cpu_us = [] {
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) != 0)
      return int64_t{0};
    return micros(ru.ru_utime) + micros(ru.ru_stime) - thread_cpu_us();
  };
  h.purge = [] {
    auto* ctl = find_mallctl();
    // "arena.<MALLCTL_ARENAS_ALL>.purge": every arena's unused dirty and
    // muzzy pages go back to the OS now.
    return ctl != nullptr &&
           ctl("arena.4096.purge", nullptr, nullptr, nullptr, 0) == 0;
  };
  return h;
}

heap_purger::heap_purger(options opts, hooks h)
  : opts_(opts), hooks_(std::move(h)) {
  thread_ = std::thread{[this] { run(); }};
}

heap_purger::~heap_purger() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void heap_purger::run() {
  idle_detector detector{opts_.idle_permille};
  auto micros_now = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
  };
  std::unique_lock<std::mutex> lock{mtx_};
  for (;;) {
    if (cv_.wait_for(lock, opts_.period, [this] { return stop_; }))
      return;
    lock.unlock();
    if (detector.idle(micros_now(), hooks_.cpu_us()) && hooks_.purge())
      purges_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
  }
}

} // namespace dally::runtime
