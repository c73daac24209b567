#include "logic/schedule_admission.hpp"

#include <algorithm>
#include <string>

namespace dally::logic {

schedule_admission::schedule_admission(uint32_t shard_count,
                                       size_t max_pending_per_shard)
  : max_pending_(max_pending_per_shard), pending_(shard_count, 0) {}

bool schedule_admission::admit(uint32_t shard, size_t tasks) {
  auto& pending = pending_.at(shard);
  if (max_pending_ > 0 && pending > 0 && pending + tasks > max_pending_) {
    ++refused_;
    return false;
  }
  pending += tasks;
  peak_ = std::max<uint64_t>(peak_, pending);
  return true;
}

void schedule_admission::answered(uint32_t shard, size_t tasks) {
  auto& pending = pending_.at(shard);
  pending -= std::min(pending, tasks);
}

void schedule_admission::reset(uint32_t shard) {
  pending_.at(shard) = 0;
}

core::error schedule_admission::refusal(uint32_t shard) const {
  return core::error{core::errc::overloaded,
                     "shard " + std::to_string(shard) + " has " +
                       std::to_string(pending_.at(shard)) +
                       " new tasks not answered yet (max_pending_per_shard " +
                       std::to_string(max_pending_) + "); retry later"};
}

size_t schedule_admission::pending(uint32_t shard) const {
  return pending_.at(shard);
}

schedule_admission::numbers schedule_admission::report() const {
  numbers out;
  for (auto p : pending_)
    out.pending += p;
  out.peak_per_shard = peak_;
  out.refused = refused_;
  return out;
}

} // namespace dally::logic
