#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include "core/timer_entry.hpp"
#include "logic/delivery_hold.hpp"
#include "logic/release_queue.hpp"
#include "logic/reuse.hpp"
#include "storage/task_record.hpp"

namespace dally::logic {

/// A delivery staged by a fire, built when the commit succeeds.
struct fired_task {
  storage::due_key key;
  uint64_t occurrence = 0;
  uint32_t attempt = 0;
  /// A first delivery that goes out without a write (see unwritten_fires).
  bool unwritten = false;
};

/// Fires on their way out: staged in the current batch, or committed and
/// held until their due time (see delivery_hold). A revoke or reschedule
/// asks here whether a task's delivery has gone out yet, and takes back
/// one that has not, so that it can answer `done` for certain: such a
/// delivery never goes out.
class outgoing_fires {
public:
  /// A fire staged in the current batch.
  void stage(const fired_task& f) {
    staged_.push_back(f);
    staged_ids_.insert(f.key.id);
  }

  /// The batch's fires, in the order staged (due order).
  std::span<const fired_task> staged() const noexcept { return staged_; }

  bool any_staged() const noexcept { return !staged_.empty(); }

  /// The batch committed or failed.
  void clear_staged() {
    staged_.clear();
    clear_for_reuse(staged_ids_);
  }

  /// Gives each of a commit's deliveries a hold, which its release claims
  /// and a revoke or reschedule may cancel first. One block for the
  /// batch's holds: it goes once the last of them is dropped.
  void hold(std::vector<held_delivery>& deliveries);

  /// A newer write of `id` commits: it supersedes the delivery's hold (a
  /// revoke or reschedule cancelled it when staged, a settle follows its
  /// release).
  void drop_hold(core::task_id id) {
    if (!holds_.empty())
      holds_.erase(id);
  }

  bool holds(core::task_id id) const { return holds_.contains(id); }

  /// Whether `id`'s committed delivery waits for its due time, neither
  /// released nor cancelled yet.
  bool waiting(core::task_id id) const;

  /// Makes sure `id`'s delivery never goes out, if it has not gone out
  /// yet: a fire staged in this batch is dropped at the commit, a held
  /// delivery's hold is cancelled now (so this holds even if the batch's
  /// commit fails: the task then comes back after its lease). False when
  /// the delivery is out (or was never fired).
  bool take_back(core::task_id id);

  /// Committed deliveries whose hold is neither released nor cancelled.
  size_t held() const noexcept;

  /// Cancels the pending holds of the tasks for which `pred(id)` holds.
  template<class Pred>
  void cancel_if(Pred pred) {
    for (const auto& [id, hold] : holds_)
      if (pred(id))
        hold->cancel();
  }

private:
  std::vector<fired_task> staged_;
  absl::flat_hash_set<core::task_id> staged_ids_;
  /// The holds of committed deliveries, by task, until a newer write of
  /// the task commits.
  absl::flat_hash_map<core::task_id, std::shared_ptr<delivery_hold>> holds_;
};

} // namespace dally::logic
