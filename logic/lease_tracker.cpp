#include "logic/lease_tracker.hpp"

#include <limits>

#include "core/time_range.hpp"

namespace dally::logic {

void lease_tracker::shift(int64_t step_ms,
                          const std::function<bool(core::task_id)>& stays) {
  if (step_ms == 0 || heap_.empty())
    return;
  auto all = heap_.pop_due(std::numeric_limits<int64_t>::max(), heap_.size());
  for (const auto& lease : all) {
    if (stays(lease.id)) {
      heap_.insert(lease.id, lease.due_ms);
      continue;
    }
    auto& m =
      shifted_.try_emplace(lease.id, moved{lease.due_ms, 0}).first->second;
    m.step_ms = core::saturating_add(m.step_ms, step_ms);
    heap_.insert(lease.id, core::saturating_add(m.stored_ms, m.step_ms));
  }
}

void lease_tracker::track_at_most(core::task_id id, int64_t deadline_ms,
                                  int64_t latest_ms) {
  track(id, deadline_ms);
  if (latest_ms >= deadline_ms)
    return;
  heap_.upsert(id, latest_ms);
  shifted_.insert_or_assign(id, moved{deadline_ms, latest_ms - deadline_ms});
}

size_t lease_tracker::pop_due(int64_t now_ms, size_t limit,
                              std::vector<core::timer_entry>& out) {
  auto first = out.size();
  auto n = heap_.pop_due(now_ms, limit, out);
  if (!shifted_.empty())
    for (auto i = first; i < out.size(); ++i)
      if (auto it = shifted_.find(out[i].id); it != shifted_.end())
        out[i].due_ms = it->second.stored_ms;
  return n;
}

void lease_tracker::put_back(std::span<const core::timer_entry> leases) {
  for (const auto& lease : leases)
    reinsert(lease);
}

void lease_tracker::roll_back() {
  for (const auto& lease : consumed_)
    if (!heap_.contains(lease.id))
      reinsert(lease);
  consumed_.clear();
}

void lease_tracker::reinsert(const core::timer_entry& lease) {
  auto due_ms = lease.due_ms;
  if (auto it = shifted_.find(lease.id);
      it != shifted_.end() && it->second.stored_ms == lease.due_ms)
    due_ms = core::saturating_add(due_ms, it->second.step_ms);
  heap_.insert(lease.id, due_ms);
}

} // namespace dally::logic
