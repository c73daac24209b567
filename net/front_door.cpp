#include "net/front_door.hpp"

#include <algorithm>
#include <utility>

namespace dally::net {

front_door::front_door(uint64_t max_backlog, uint64_t resume_backlog,
                       int64_t stall_ms)
  : max_(std::max<uint64_t>(1, max_backlog)),
    resume_(resume_backlog > 0 && resume_backlog < max_ ? resume_backlog
                                                        : max_ / 2),
    stall_ms_(stall_ms) {
  // nop
}

void front_door::set_waker(std::function<void()> waker) {
  std::lock_guard<std::mutex> guard{waker_mtx_};
  waker_ = std::move(waker);
}

bool front_door::on_request() {
  auto now = backlog_.fetch_add(1) + 1;
  auto peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    // peak reloaded
  }
  if (closed_.load())
    return true;
  if (now < static_cast<int64_t>(max_))
    return false;
  closed_.store(true);
  closings_.fetch_add(1);
  // The engine may have taken the backlog down before it could see the
  // door closed; then nobody would wake the listener.
  if (backlog_.load() <= static_cast<int64_t>(resume_)) {
    closed_.store(false);
    return false;
  }
  return true;
}

void front_door::on_taken() {
  taken_.fetch_add(1);
  auto now = backlog_.fetch_sub(1) - 1;
  if (now > static_cast<int64_t>(resume_) || !closed_.load() ||
      wake_sent_.exchange(true))
    return;
  std::lock_guard<std::mutex> guard{waker_mtx_};
  if (waker_)
    waker_();
}

bool front_door::reopen() {
  wake_sent_.store(false);
  if (!closed_.load())
    return false;
  if (backlog_.load() > static_cast<int64_t>(resume_))
    return false;
  closed_.store(false);
  return true;
}

} // namespace dally::net

namespace dally::net {

bool front_door::on_tick(int64_t now_ms) {
  auto taken = taken_.load();
  if (!closed_.load() || taken != last_taken_) {
    last_taken_ = taken;
    last_progress_ms_ = now_ms;
    return false;
  }
  if (now_ms - last_progress_ms_ < stall_ms_)
    return false;
  last_progress_ms_ = now_ms;
  stalls_.fetch_add(1);
  backlog_.store(0);
  wake_sent_.store(false);
  closed_.store(false);
  return true;
}

} // namespace dally::net
