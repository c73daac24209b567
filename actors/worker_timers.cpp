#include "actors/worker_timers.hpp"

#include <algorithm>
#include <chrono>

namespace dally::actors {

namespace {

/// std::push_heap builds a max-heap; "later" puts the earliest on top.
bool later(const worker_timers::entry& x, const worker_timers::entry& y) {
  if (x.due_ns != y.due_ns)
    return x.due_ns > y.due_ns;
  return x.seq > y.seq;
}

} // namespace

bool worker_timers::push(int64_t due_ns, caf::strong_actor_ptr receiver,
                         caf::message content, caf::message_priority priority) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto before = heap_.empty() ? never_ns : heap_.front().due_ns;
  heap_.push_back(entry{due_ns, next_seq_++, std::move(receiver),
                        std::move(content), priority});
  std::push_heap(heap_.begin(), heap_.end(), later);
  publish_earliest();
  return due_ns < before;
}

void worker_timers::take_due(int64_t now_ns, std::vector<entry>& out) {
  std::lock_guard<std::mutex> guard{mtx_};
  while (!heap_.empty() && heap_.front().due_ns <= now_ns) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    out.push_back(std::move(heap_.back()));
    heap_.pop_back();
  }
  publish_earliest();
}

void worker_timers::clear() {
  std::vector<entry> dropped;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    dropped.swap(heap_);
    publish_earliest();
  }
  // The receivers' references go outside the lock.
}

size_t worker_timers::size() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return heap_.size();
}

int64_t worker_timers::now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

void worker_timers::publish_earliest() {
  earliest_ns_.store(heap_.empty() ? never_ns : heap_.front().due_ns,
                     std::memory_order_seq_cst);
}

} // namespace dally::actors
