#include "logic/unwritten_fires.hpp"

#include <algorithm>
#include <cassert>
#include <variant>

#include "core/placement.hpp"
#include "core/time_range.hpp"

namespace dally::logic {

unwritten_fires::unwritten_fires(const storage::shard_meta& meta)
  : durable_horizon_ms_(meta.fire_horizon_ms),
    recovered_horizon_ms_(meta.fire_horizon_ms),
    first_new_local_id_(meta.next_local_id), shard_count_(meta.shard_count) {
  // nop
}

int64_t unwritten_fires::horizon_after(int64_t now_ms,
                                       int64_t fire_lead_ms) noexcept {
  return core::saturating_add(
    now_ms, core::saturating_add(fire_lead_ms, horizon_step_ms));
}

bool unwritten_fires::maybe_fired_before_restart(
  const core::task_record& rec) const {
  if (rec.task.attempt != 0 || rec.state != core::task_state::pending ||
      rec.task.policy.max_attempts <= 1 ||
      rec.index_ms() > recovered_horizon_ms_)
    return false;
  // Tasks created since the restart were not there to fire.
  return shard_count_ == 0 ||
         core::local_id_of(rec.task.id, shard_count_) < first_new_local_id_;
}

void unwritten_fires::complete_stored(core::task_record& rec) const {
  auto it = marks_.find(rec.task.id);
  if (it == marks_.end()) {
    if (maybe_fired_before_restart(rec))
      rec.task.attempt = 1;
    return;
  }
  const auto& mark = it->second;
  // Every write of the task drops its mark, so the record is as fired.
  bool as_fired = rec.state == core::task_state::pending &&
                  rec.fired_count == mark.occurrence &&
                  rec.task.attempt + 1 == mark.attempt;
  assert(as_fired);
  if (!as_fired)
    return;
  rec.state = core::task_state::in_flight;
  rec.task.attempt = mark.attempt;
  rec.lease_deadline_ms = mark.lease_deadline_ms;
  rec.lease_ms = mark.lease_ms;
}

void unwritten_fires::mark(const core::task_record& rec) {
  marks_.insert_or_assign(rec.task.id,
                          fire_mark{rec.fired_count, rec.task.attempt,
                                    rec.lease_deadline_ms, rec.lease_ms});
}

bool unwritten_fires::must_sync(std::span<const fired_task> fires) const {
  for (const auto& f : fires)
    if (!f.unwritten || unsynced_ids_.contains(f.key.id))
      return true;
  return false;
}

void unwritten_fires::raise_durable_horizon(int64_t horizon_ms) noexcept {
  durable_horizon_ms_ = std::max(durable_horizon_ms_, horizon_ms);
}

void unwritten_fires::note_unsynced(const storage::write_batch& batch) {
  using wb = storage::write_batch;
  for (const auto& op : batch.ops()) {
    if (auto* x = std::get_if<wb::replace_op>(&op))
      unsynced_ids_.insert(x->after.task.id);
    else if (auto* y = std::get_if<wb::put_op>(&op))
      unsynced_ids_.insert(y->rec.task.id);
    else if (auto* z = std::get_if<wb::revive_op>(&op))
      unsynced_ids_.insert(z->rec.task.id);
  }
}

} // namespace dally::logic
