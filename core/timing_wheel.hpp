#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/timer_entry.hpp"

namespace dally::core {

/// The shape of a `timing_wheel`.
struct timing_wheel_options {
  /// Width of one bucket of the lowest wheel: the wheel's resolution.
  int64_t tick_ms = 1;
  /// Buckets per wheel. Each overflow wheel's tick is the tick of the wheel
  /// below times this.
  uint32_t wheel_size = 64;
  /// The wheel's initial current time; not negative.
  int64_t start_ms = 0;
};

/// A hierarchical timing wheel in the manner of Kafka's purgatory, behind the
/// same interface as `quad_heap`, so a shard can use either. It trades the
/// heap's exact due-time order for O(1) amortized insert, erase and update.
///
/// Never early: an entry due at `d` fires at the first tick boundary at or
/// after `d` (`d` rounded up to a multiple of `tick_ms`, counted from 0), so
/// it comes out between 0 and `tick_ms - 1` ms late, never early. Rounding
/// up keeps "never delivered before due" true at any resolution.
///
/// Order: entries come out by fire tick and, within one tick, in insertion
/// order; an update counts as a fresh insertion. Due times that share a tick
/// are not sorted among themselves: the wheel cannot tell them apart.
///
/// Current time: the wheel has one, starting at `start_ms` and moved forward
/// by `pop_due`, never back. An entry due at or before it (even in the past,
/// or negative) is scheduled for the current tick, after the entries already
/// waiting there, and comes out on the next `pop_due`. When `limit` leaves
/// due entries behind, time stops at the tick of the first of them, so they
/// keep their order and later insertions cannot overtake them. Call
/// `pop_due` with a non-decreasing `now_ms`: an earlier one pops only what is
/// due by it and leaves the current time alone.
///
/// Structure: level 0 has `wheel_size` buckets of one tick; level k has
/// buckets of `wheel_size^k` ticks and exists once an entry needs it. An
/// entry sits on the lowest level whose range around the current time covers
/// its fire tick; when time enters a bucket of an upper level, its entries
/// cascade into the levels below. A per-level occupancy bitmap lets
/// `pop_due` go from non-empty bucket to non-empty bucket, so a jump of days
/// at a 1 ms tick costs only the buckets it empties or cascades.
///
/// Limits: ticks count from 0 in 64 bits, so every due time is valid. A fire
/// time past INT64_MAX (a due time near INT64_MAX that is no multiple of
/// `tick_ms`) can never come due; `next_due` reports it as INT64_MAX.
///
/// Memory: a 24-byte node per entry in a pool with a free list, linked into
/// its bucket by 32-bit indices, plus an index of 4-byte slots (the id is
/// read from the node, not stored twice): about 36 bytes an entry at a
/// million entries. Nothing is allocated before the first insert, pop or
/// reserve. A moved-from wheel is empty, as if newly constructed with the
/// same options.
class timing_wheel {
public:
  /// Largest number of entries a wheel can hold (nodes use 32-bit links).
  static constexpr size_t max_entries = (size_t{1} << 32) - 2;

  /// Largest `wheel_size`: a level allocates all its buckets at once.
  static constexpr uint32_t max_wheel_size = uint32_t{1} << 20;

  /// Throws std::invalid_argument when `tick_ms <= 0`, `wheel_size < 2`,
  /// `wheel_size > max_wheel_size` or `start_ms < 0`.
  explicit timing_wheel(timing_wheel_options opts = {});
  timing_wheel(timing_wheel&&) noexcept;
  timing_wheel& operator=(timing_wheel&&) noexcept;
  timing_wheel(const timing_wheel&) = delete;
  timing_wheel& operator=(const timing_wheel&) = delete;
  ~timing_wheel();

  /// Adds `id` due at `due_ms`. Returns false, changing nothing, when `id`
  /// is already present. Throws std::length_error past `max_entries`.
  bool insert(task_id id, int64_t due_ms);

  /// Removes `id`. Returns false when it is not present.
  bool erase(task_id id);

  /// Moves `id` to `due_ms`. An update counts as a fresh insertion for the
  /// order within a tick. Returns false when `id` is not present.
  bool update(task_id id, int64_t due_ms);

  /// Returns whether `id` is present.
  bool contains(task_id id) const;

  /// Returns the due time of `id` as given, if present.
  std::optional<int64_t> due_of(task_id id) const;

  /// Returns the earliest time at which `pop_due` may return something, the
  /// moment to arm the next wake-up for. It is never later than the earliest
  /// fire time; it is earlier only when the earliest entry still sits in an
  /// overflow wheel whose earlier entries were erased or updated since it
  /// last cascaded. Then waking up there cascades it and the next call is
  /// closer. It may lie before the current time: pop right away.
  std::optional<int64_t> next_due() const;

  /// Removes up to `limit` entries whose fire time is at most `now_ms` and
  /// appends them to `out` in (fire tick, insertion) order. Returns how many
  /// it appended. Entries left over by `limit` stay, in order, for the next
  /// call.
  size_t pop_due(int64_t now_ms, size_t limit, std::vector<timer_entry>& out);

  /// Convenience form of `pop_due` that returns a fresh vector.
  std::vector<timer_entry> pop_due(int64_t now_ms, size_t limit);

  size_t size() const noexcept;

  bool empty() const noexcept { return size() == 0; }

  /// Removes every entry; keeps the current time and the node and bucket
  /// memory (the index may release a large table).
  void clear() noexcept;

  /// Preallocates room for `n` entries in the node pool and the index.
  /// Throws std::length_error past `max_entries`.
  void reserve(size_t n);

  /// Bytes allocated by the node pool, the index, the buckets and the
  /// bookkeeping together.
  size_t memory_bytes() const noexcept;

  /// Verifies every bucket list, bitmap, level count, the placement of each
  /// entry, the index and the free list in O(n + buckets). For tests and the
  /// simulator; returns false on any violation.
  bool check_invariants() const;

private:
  struct impl;

  impl& state();

  timing_wheel_options opts_;
  std::unique_ptr<impl> impl_;
};

} // namespace dally::core
