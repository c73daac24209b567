#include "logic/release_queue.hpp"

#include <limits>
#include <utility>

namespace dally::logic {

void release_queue::push(held_delivery item) {
  auto [it, added] = buckets_.try_emplace(item.release_ms);
  // Room for a few: a bucket grown one by one reallocated for most pushes.
  if (added)
    it->second.reserve(bucket_reserve);
  it->second.push_back(std::move(item));
  ++size_;
}

int64_t release_queue::next_release_ms() const noexcept {
  if (buckets_.empty())
    return std::numeric_limits<int64_t>::max();
  return buckets_.begin()->first;
}

std::vector<delivery_box> release_queue::pop_due(int64_t now_ms) {
  std::vector<delivery_box> out;
  while (!buckets_.empty() && buckets_.begin()->first <= now_ms) {
    auto node = buckets_.extract(buckets_.begin());
    size_ -= node.mapped().size();
    out.reserve(out.size() + node.mapped().size());
    for (auto& item : node.mapped()) {
      if (item.hold && !item.hold->claim())
        continue; // Revoked or rescheduled before its time.
      item.delivery->set_fire_ms(now_ms);
      out.push_back(std::move(item.delivery));
    }
  }
  return out;
}

} // namespace dally::logic
