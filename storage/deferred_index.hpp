#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/timer_entry.hpp"

namespace dally::storage {

/// The tasks of one store whose due-index entry commits deferred (see
/// store_options::max_deferred_index), and what the commit being built
/// changes about them.
///
/// A shard allocates its ids densely (local id * shard count + shard), and
/// only an id above every deferred one may be deferred, so the entries are
/// a ring indexed by id, not a hash table: a lookup is an offset, and
/// dropping settled entries from the front is a walk over adjacent memory.
/// Hash tables here took about 5% of dallyd's profile at full load (four
/// lookups per task, each a likely cache miss), the ring 2%; end to end
/// the difference hid in the host's noise.
///
/// Changes made while a commit is built (`defer`, `take`, `note_rewritten`,
/// `age`) are seen by the queries at once, and either applied once the
/// commit is written (`apply`) or undone (`discard`). An id of another
/// shard (a record written by hand) is never deferred; after a crash
/// `recover` keeps such ids apart, and the next commit writes them.
class deferred_index {
public:
  /// `stride` is the shard count and `shard` this store's shard (its ids
  /// are `shard` modulo `stride`); `bound` is max_deferred_index: at most
  /// that many open entries, over a span of at most twice as many ids of
  /// the shard.
  deferred_index(uint64_t stride, uint64_t shard, size_t bound);

  // -- the committed entries -------------------------------------------------

  /// Open (deferred, not yet written) entries as of the last commit.
  size_t live() const noexcept { return live_; }

  bool empty() const noexcept { return live_ == 0; }

  /// Calls `f(id, index_ms)` for each open entry, in id order (after a
  /// crash, ids of other shards last).
  void
  for_each_open(const std::function<void(core::task_id, int64_t)>& f) const;

  /// After a crash, in id order: `id`'s index entry may be missing. It is
  /// open, and `take` reports it as needing its entry erased anyway.
  void recover(core::task_id id, int64_t index_ms);

  // -- the commit being built ------------------------------------------------

  /// Defers the index entry of the new task `id` if `id` is above every
  /// deferred id (this batch's too), belongs to this shard and fits the
  /// span. False: the caller writes the entry.
  bool defer(core::task_id id, int64_t index_ms);

  /// The caller writes or drops `id`'s index entry now. Returns whether
  /// that entry was deferred and never written, so that there is nothing
  /// to erase; a recovered entry returns false (it may be on disk).
  bool take(core::task_id id);

  /// Whether `id`'s record was put exactly once: deferred by this process
  /// (by an earlier commit or this batch), not recovered, and not
  /// rewritten by any commit (see rocks_task_store's put_once).
  bool put_once(core::task_id id) const;

  /// The batch rewrites `id`'s record in place (its index entry stays).
  void note_rewritten(core::task_id id);

  /// Writes, through `write(id, index_ms)`, the oldest open entries beyond
  /// the bounds, then this batch's beyond the bound. Returns the lowest id
  /// still open after the batch, or 0.
  core::task_id age(const std::function<void(core::task_id, int64_t)>& write);

  /// The batch was written: its changes hold. Calls `recovered_gone` with
  /// each settled entry that `recover` had brought in.
  void apply(const std::function<void(core::task_id, int64_t)>& recovered_gone);

  /// The batch was not written: its changes are undone.
  void discard();

  /// Ids of this shard the ring spans, from its oldest open entry to the
  /// newest deferred one, holes and this batch's included (for tests).
  size_t span() const noexcept { return size_; }

private:
  enum flag : uint8_t {
    /// Deferred by a committed batch and not written since.
    open = 1,
    /// Brought in by `recover`: its entry may be on disk.
    recovered = 2,
    /// Its record was rewritten by a committed batch.
    rewritten = 4,
    /// This batch writes or drops the entry.
    settled_now = 8,
    /// Deferred by this batch.
    added_now = 16,
    /// This batch rewrites its record.
    rewritten_now = 32,
  };

  struct slot {
    int64_t index_ms = 0;
    uint8_t flags = 0;
  };

  /// The slot of `id`, or null.
  slot* find(core::task_id id);
  const slot* find(core::task_id id) const;

  slot& at(size_t pos) noexcept { return ring_[(head_ + pos) & mask_]; }
  const slot& at(size_t pos) const noexcept {
    return ring_[(head_ + pos) & mask_];
  }
  core::task_id id_at(size_t pos) const noexcept {
    return base_id_ + pos * stride_;
  }
  void grow_to(size_t size);
  /// Drops the bookkeeping of the batch being built (its slots' flags are
  /// the caller's to settle).
  void forget_batch() noexcept;
  void settle(core::task_id id, slot& s);
  void pop_settled_front();

  uint64_t stride_;
  uint64_t shard_;
  size_t bound_;
  std::vector<slot> ring_;
  size_t mask_ = 0;
  size_t head_ = 0;
  /// Slots in use; [0, committed_) as of the last commit, the rest added
  /// by the batch being built.
  size_t size_ = 0;
  size_t committed_ = 0;
  /// The id of slot 0 (meaningless while size_ is 0).
  core::task_id base_id_ = 0;
  size_t live_ = 0;
  /// The highest id deferred so far (committed), and by this batch.
  core::task_id last_id_ = 0;
  core::task_id last_id_now_ = 0;
  /// The highest id `defer` refused for the span: `age` writes the front
  /// so that a later id fits.
  core::task_id refused_id_ = 0;
  size_t settled_now_ = 0;
  size_t added_now_ = 0;
  /// Ids whose committed slot this batch flagged, for apply and discard.
  std::vector<core::task_id> touched_;
  /// Recovered ids the ring does not hold (of another shard, or beyond
  /// its span; rare): the next commit writes them. Ordered, so that what
  /// a commit writes does not vary between runs.
  std::map<core::task_id, slot> foreign_;
};

} // namespace dally::storage
