#include "logic/answer_deadlines.hpp"

namespace dally::logic {

void answer_deadlines::track(int64_t deadline_ms, uint64_t id) {
  entries_.emplace(deadline_ms, id);
}

void answer_deadlines::untrack(int64_t deadline_ms, uint64_t id) {
  entries_.erase({deadline_ms, id});
}

std::vector<uint64_t> answer_deadlines::pop_due(int64_t now_ms) {
  std::vector<uint64_t> out;
  auto it = entries_.begin();
  while (it != entries_.end() && it->first <= now_ms) {
    out.push_back(it->second);
    it = entries_.erase(it);
  }
  return out;
}

int64_t answer_deadlines::next_ms() const noexcept {
  return entries_.empty() ? never_ms : entries_.begin()->first;
}

} // namespace dally::logic
