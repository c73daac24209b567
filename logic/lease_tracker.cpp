#include "logic/lease_tracker.hpp"

namespace dally::logic {

void lease_tracker::put_back(std::span<const core::timer_entry> leases) {
  for (const auto& lease : leases)
    heap_.insert(lease.id, lease.due_ms);
}

void lease_tracker::roll_back() {
  for (const auto& lease : consumed_)
    if (!heap_.contains(lease.id))
      heap_.insert(lease.id, lease.due_ms);
  consumed_.clear();
}

} // namespace dally::logic
