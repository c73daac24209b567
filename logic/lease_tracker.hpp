#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/quad_heap.hpp"
#include "core/timer_entry.hpp"

namespace dally::logic {

/// The lease deadlines of a shard's committed in-flight tasks, in memory:
/// the due index keeps an in-flight task's entry at its index time (so
/// firing rewrites only the record), so the shard learns that a lease ran
/// out from here, without reading the store. Deadlines popped for the
/// batch being staged are kept until its commit: a failed one hands them
/// back.
class lease_tracker {
public:
  /// Tracks `id`'s lease until `deadline_ms`, replacing an older one.
  void track(core::task_id id, int64_t deadline_ms) {
    heap_.upsert(id, deadline_ms);
  }

  /// `id` is no longer in flight.
  void forget(core::task_id id) { heap_.erase(id); }

  bool contains(core::task_id id) const { return heap_.contains(id); }

  /// The earliest deadline, if any.
  std::optional<int64_t> next_due() const { return heap_.next_due(); }

  /// Moves up to `limit` deadlines due at `now_ms` into `out`.
  size_t pop_due(int64_t now_ms, size_t limit,
                 std::vector<core::timer_entry>& out) {
    return heap_.pop_due(now_ms, limit, out);
  }

  /// Puts popped deadlines back that nothing acted upon (a read failed).
  void put_back(std::span<const core::timer_entry> leases);

  /// The batch being staged acted upon `lease` (popped).
  void consume(const core::timer_entry& lease) { consumed_.push_back(lease); }

  /// The batch's commit failed: its popped deadlines are due again, unless
  /// the task's lease is tracked anew.
  void roll_back();

  /// The batch committed, or staged nothing: nothing to hand back.
  void forget_consumed() { consumed_.clear(); }

  size_t size() const noexcept { return heap_.size(); }

private:
  core::quad_heap heap_;
  std::vector<core::timer_entry> consumed_;
};

} // namespace dally::logic
