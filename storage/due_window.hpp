#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/quad_heap.hpp"
#include "core/timer_entry.hpp"
#include "storage/task_record.hpp"
#include "storage/task_store.hpp"
#include "storage/write_batch.hpp"

namespace dally::storage {

/// How much of a shard's due index a `due_window` keeps in memory. Values
/// below 1 count as 1; max_in_memory is capped at half of what a heap holds
/// (leaving room for the entries `due_window::on_put` may add beyond it).
struct due_window_options {
  /// Tasks whose index time is before now + window_ms are loaded; the rest
  /// stay on disk. A refill tops the window up once less than half of it is
  /// loaded ahead of now, so each refill loads about half a window of work.
  int64_t window_ms = 5 * 60 * 1000;

  /// Index entries read per scan: bounds the work (and the scratch memory)
  /// of one step of a refill.
  size_t slice_size = 4096;

  /// Most entries a refill brings into memory. After downtime, overdue work
  /// loads up to this many entries in due order; the rest follows as the
  /// heap drains. Only mutations that land before the load cursor (see
  /// `due_window::on_put`) may push the heap past it.
  size_t max_in_memory = 1'000'000;
};

/// The bounded in-memory part of a shard's due-time index: a 4-ary heap of
/// (id, index time) for the tasks the shard must act on soon, loaded from
/// the store slice by slice ahead of time.
///
/// A load cursor splits the index in two: every entry at or before the
/// cursor is in the heap (unless popped), every entry after it is on disk
/// only. Refills move the cursor forward; committed mutations land in the
/// heap or on disk only depending on which side of the cursor their key
/// falls. Since every heap entry sorts before every disk-only entry, popping
/// the heap yields the shard's work in due order, even while a backlog is
/// still loading.
///
/// Pure logic over the store: it never reads a clock (every time comes in
/// as an argument) and never writes. Not thread-safe; the shard owns it.
/// The usual loop on a wake-up at `now`:
///
///     window.refill(now);
///     window.pop_due(now, limit, out);   // then deliver `out`
///     arm a wake-up at window.next_wakeup_ms()
class due_window {
public:
  /// The cursor of a window that has loaded nothing yet.
  static constexpr due_key start_cursor{std::numeric_limits<int64_t>::min(), 0};

  /// Starts empty with the cursor before every entry: the first `refill`
  /// loads the window, overdue work first. That is also how a shard
  /// recovers after a restart.
  explicit due_window(task_store& store, due_window_options opts = {});

  due_window(const due_window&) = delete;
  due_window& operator=(const due_window&) = delete;

  /// Loads index entries up to now + window_ms, slice by slice, while the
  /// heap holds fewer than max_in_memory entries, but only once less than
  /// half a window is loaded ahead of `now_ms` (see `refill_at_ms`), so that
  /// calling it on every wake-up costs nothing most of the time. At most
  /// `max_slices` scans run per call, letting an actor interleave other
  /// work during a long load; `next_wakeup_ms` then asks to be called again
  /// at once. On a store error the cursor stays where the last successful
  /// slice left it and the window stays consistent.
  core::error refill(int64_t now_ms,
                     size_t max_slices = std::numeric_limits<size_t>::max());

  /// Keeps the heap in line with a batch the store has just committed.
  /// Call it only after `commit` succeeded.
  void on_write(const write_batch& batch);

  /// A committed index entry appeared (new task, revived dead letter): it
  /// enters the heap if it lies at or before the cursor (possibly past
  /// max_in_memory), else it stays on disk until a refill reaches it. Also
  /// the way to hand back an entry that was popped but not acted upon.
  void on_put(due_key key);

  /// A committed index entry went away (ack, revoke, burial).
  void on_erase(due_key key);

  /// A committed index entry moved (reschedule, delivery, nack, touch),
  /// possibly across the cursor in either direction.
  void on_replace(due_key before, due_key after);

  /// Removes up to `limit` heap entries with index_ms <= `now_ms` and
  /// appends them to `out` in due order; returns how many. Popped entries
  /// are the caller's: it must commit their next state (or `on_put` them
  /// back). Entries not loaded yet are not seen: call `refill` first.
  size_t pop_due(int64_t now_ms, size_t limit, std::vector<due_key>& out);

  /// When `refill` next has work: the cursor's index time minus half a
  /// window, or never (INT64_MAX) while the heap is full.
  int64_t refill_at_ms() const noexcept;

  /// When the shard must next call `refill` and `pop_due`: the earlier of
  /// the heap top and `refill_at_ms`. A value at or before now means at
  /// once (for example, a backlog is still loading).
  int64_t next_wakeup_ms() const noexcept;

  /// Every index entry at or before this key is in memory or popped.
  due_key cursor() const noexcept { return cursor_; }

  /// Whether `id` is in the heap.
  bool contains(core::task_id id) const { return heap_.contains(id); }

  /// Entries in the heap.
  size_t size() const noexcept { return heap_.size(); }

  bool empty() const noexcept { return heap_.empty(); }

  /// Bytes the window holds on the heap (heap array, id index, scratch).
  size_t memory_bytes() const noexcept;

  /// Returns memory a drained backlog left behind.
  void shrink_to_fit() { heap_.shrink_to_fit(); }

  const due_window_options& options() const noexcept { return opts_; }

private:
  bool needs_refill(int64_t now_ms) const noexcept;

  task_store& store_;
  due_window_options opts_;
  core::quad_heap heap_;
  due_key cursor_ = start_cursor;
  std::vector<core::timer_entry> popped_;
};

} // namespace dally::storage
