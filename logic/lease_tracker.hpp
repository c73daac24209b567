#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
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
///
/// A lease is a length of time granted to a consumer, so when the wall
/// clock steps (`shift`), a running lease keeps the time it had left: it
/// runs out at its deadline plus the step. Entries popped carry the
/// deadline as stored, which is what the record holds.
class lease_tracker {
public:
  /// Tracks `id`'s lease until `deadline_ms`, replacing an older one.
  void track(core::task_id id, int64_t deadline_ms) {
    heap_.upsert(id, deadline_ms);
    shifted_.erase(id);
  }

  /// Tracks `id`'s lease, stored as ending at `deadline_ms`, to run out at
  /// `latest_ms` at the latest (popped with the deadline as stored): a
  /// lease read back after a restart was granted under a wall clock that
  /// may have stepped back since, yet it has no more left than its length.
  void track_at_most(core::task_id id, int64_t deadline_ms, int64_t latest_ms);

  /// `id` is no longer in flight.
  void forget(core::task_id id) {
    heap_.erase(id);
    shifted_.erase(id);
  }

  /// The wall clock stepped by `step_ms` (forward above 0): every lease
  /// tracked now ends that much later on the new clock, except those for
  /// which `stays(id)` holds (a delivery not out yet, whose lease starts
  /// when the clock reads its due time).
  void shift(int64_t step_ms, const std::function<bool(core::task_id)>& stays);

  bool contains(core::task_id id) const { return heap_.contains(id); }

  /// The earliest deadline, if any.
  std::optional<int64_t> next_due() const { return heap_.next_due(); }

  /// Moves up to `limit` deadlines due at `now_ms` into `out`.
  size_t pop_due(int64_t now_ms, size_t limit,
                 std::vector<core::timer_entry>& out);

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
  /// A lease that `shift` moved: its deadline as stored, and the step.
  struct moved {
    int64_t stored_ms = 0;
    int64_t step_ms = 0;
  };

  /// Tracks `lease` (a deadline as stored) again, moved as it was.
  void reinsert(const core::timer_entry& lease);

  core::quad_heap heap_;
  std::unordered_map<core::task_id, moved> shifted_;
  std::vector<core::timer_entry> consumed_;
};

} // namespace dally::logic
