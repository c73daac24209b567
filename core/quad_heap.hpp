#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/timer_entry.hpp"

namespace dally::core {

/// The 4-ary min-heap every shard owns: pending timers ordered by
/// (due time, insertion sequence), so equal due times pop in insertion order.
///
/// Unlike a priority queue with lazy deletion, erase and update by task id
/// are O(log n) and leave no garbage behind: revoke and reschedule are
/// first-class. Four children per node halve the depth of a binary heap and
/// keep siblings in one cache line (the arity Go's runtime uses for timers).
///
/// Memory: a heap entry is 20 bytes (due, id, sequence). The id -> position
/// index is a linear-probing table of 4-byte slots, each holding a position
/// and a 5-bit hash fingerprint; the id itself is read from the heap entry,
/// so the index stores no copy of it. The heap grows by 1/8 through realloc
/// (large blocks are remapped, not copied) and the index by 1/2 with its load
/// kept between 1/2 and 7/8, so a growing heap stays under 30 bytes per
/// entry in total (see `memory_bytes`). Draining shrinks the index; the
/// heap array keeps its capacity until `shrink_to_fit`.
class quad_heap {
public:
  /// Largest number of entries a heap can hold (positions use 27 bits).
  static constexpr size_t max_entries = (size_t{1} << 27) - 2;

  quad_heap();
  quad_heap(quad_heap&&) noexcept;
  quad_heap& operator=(quad_heap&&) noexcept;
  quad_heap(const quad_heap&) = delete;
  quad_heap& operator=(const quad_heap&) = delete;
  ~quad_heap();

  /// Adds `id` due at `due_ms`. Returns false, changing nothing, when `id`
  /// is already present. Throws std::length_error past `max_entries`.
  bool insert(task_id id, int64_t due_ms);

  /// Removes `id`. Returns false when it is not present.
  bool erase(task_id id);

  /// Moves `id` to `due_ms`. An update counts as a fresh insertion for the
  /// order among equal due times. Returns false when `id` is not present.
  bool update(task_id id, int64_t due_ms);

  /// Moves `id` to `due_ms` as `update` does, or adds it when absent, in one
  /// probe of the index: an absent id's probe walks its whole run, so
  /// `update` then `insert` would walk it twice. Returns true when it added.
  /// Throws std::length_error past `max_entries`.
  bool upsert(task_id id, int64_t due_ms);

  /// Returns whether `id` is present.
  bool contains(task_id id) const;

  /// Returns the due time of `id`, if present.
  std::optional<int64_t> due_of(task_id id) const;

  /// Returns the earliest entry without removing it.
  std::optional<timer_entry> top() const;

  /// Returns the earliest due time, the moment to arm the next wake-up for.
  std::optional<int64_t> next_due() const;

  /// Removes up to `limit` entries with `due_ms <= now_ms` and appends them
  /// to `out` in (due, sequence) order. Returns how many it appended.
  size_t pop_due(int64_t now_ms, size_t limit, std::vector<timer_entry>& out);

  /// Convenience form of `pop_due` that returns a fresh vector.
  std::vector<timer_entry> pop_due(int64_t now_ms, size_t limit);

  size_t size() const noexcept { return size_; }

  bool empty() const noexcept { return size_ == 0; }

  /// Removes every entry; keeps the allocated memory.
  void clear() noexcept;

  /// Preallocates room for `n` entries in both the heap and the index.
  void reserve(size_t n);

  /// Releases memory beyond what the current entries need.
  void shrink_to_fit();

  /// Bytes allocated by the heap array and the index together.
  size_t memory_bytes() const noexcept;

  /// Sets the next insertion sequence number, to exercise the renumbering
  /// that runs once every 2^32 insertions. Throws std::invalid_argument when
  /// `seq` is not above every live entry's sequence.
  void set_next_sequence_for_testing(uint32_t seq);

  /// Verifies the heap order, the index and the sequence bookkeeping in
  /// O(n). For tests and the simulator; returns false on any violation.
  bool check_invariants() const;

private:
  struct entry;
  struct move_log;

  // -- heap ------------------------------------------------------------------

  static bool less(const entry& x, const entry& y) noexcept;
  void grow_heap();
  void resize_heap(size_t n);
  void sift_up(size_t pos, size_t slot);
  void sift_down(size_t pos, size_t slot);
  void apply_moves(const move_log& log) noexcept;
  void remove_at(size_t pos);
  void move_to(size_t slot, int64_t due_ms);
  size_t probe_or_add(task_id id, int64_t due_ms);
  uint32_t next_seq();
  void renumber_seqs();

  // -- index -----------------------------------------------------------------

  size_t slot_for_hash(uint64_t h) const noexcept;
  size_t next_slot(size_t s) const noexcept;
  size_t prev_slot(size_t s) const noexcept;
  size_t find_slot(task_id id) const noexcept;
  size_t slot_at(task_id id, size_t pos) const noexcept;
  void clear_slot(size_t s) noexcept;
  void make_index_room();
  void purge_tombstones_if_needed();
  void rebuild_index(size_t slot_count);

  struct free_deleter {
    void operator()(void* ptr) const noexcept;
  };

  std::unique_ptr<entry, free_deleter> heap_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  uint32_t seq_ = 0;

  std::unique_ptr<uint32_t[]> slots_;
  size_t slot_count_ = 0;
  size_t tombstones_ = 0;
};

} // namespace dally::core
