#include "logic/outgoing_fires.hpp"

namespace dally::logic {

void outgoing_fires::hold(std::vector<held_delivery>& deliveries) {
  if (deliveries.empty())
    return;
  std::shared_ptr<delivery_hold[]> block{new delivery_hold[deliveries.size()]};
  size_t used = 0;
  for (auto& item : deliveries) {
    item.hold = std::shared_ptr<delivery_hold>(block, &block[used++]);
    holds_.insert_or_assign(item.delivery->id().task_id(), item.hold);
  }
}

bool outgoing_fires::take_back(core::task_id id) {
  if (staged_ids_.contains(id))
    return true;
  auto it = holds_.find(id);
  return it != holds_.end() && it->second->cancel();
}

bool outgoing_fires::waiting(core::task_id id) const {
  auto it = holds_.find(id);
  return it != holds_.end() && it->second->pending();
}

size_t outgoing_fires::held() const noexcept {
  size_t n = 0;
  for (const auto& [id, hold] : holds_)
    if (hold->pending())
      ++n;
  return n;
}

} // namespace dally::logic
