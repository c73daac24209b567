#include "core/quad_heap.hpp"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <utility>

namespace dally::core {

// Packed to 4 bytes: 20 instead of 24 bytes per entry. x86-64 and AArch64
// load 8-byte fields at 4-byte alignment at full speed.
#pragma pack(push, 4)
struct quad_heap::entry {
  int64_t due_ms;
  task_id id;
  uint32_t seq;
};
#pragma pack(pop)

namespace {

constexpr size_t arity = 4;

// Index slot encoding: 0 = empty, 1 = tombstone, otherwise
// ((pos + 1) << fp_bits) | fingerprint.
constexpr uint32_t empty_slot = 0;
constexpr uint32_t tombstone = 1;
constexpr unsigned fp_bits = 5;
constexpr uint32_t fp_mask = (uint32_t{1} << fp_bits) - 1;
constexpr size_t npos = std::numeric_limits<size_t>::max();
constexpr size_t min_slots = 16;
constexpr unsigned fp_shift = 27;

constexpr uint64_t hash(task_id id) noexcept {
  // Fibonacci hashing: ids are mostly arithmetic sequences (id % shards is
  // the shard), which a multiplicative hash spreads evenly.
  return id * 0x9E3779B97F4A7C15ull;
}

constexpr uint32_t fingerprint(uint64_t h) noexcept {
  return static_cast<uint32_t>(h >> fp_shift) & fp_mask;
}

constexpr uint32_t encode(size_t pos, uint32_t fp) noexcept {
  return (static_cast<uint32_t>(pos + 1) << fp_bits) | fp;
}

constexpr bool occupied(uint32_t slot) noexcept {
  return slot > tombstone;
}

constexpr size_t decode(uint32_t slot) noexcept {
  return (slot >> fp_bits) - 1;
}

// Keeps (entries + tombstones) at most 7/8 of the slots.
constexpr bool over_load(size_t used, size_t slots) noexcept {
  return used * 8 > slots * 7;
}

// Smallest table that holds `n` entries below the load limit.
size_t slots_for(size_t n) {
  return std::max(min_slots, n + n / 7 + 1);
}

} // namespace

void quad_heap::free_deleter::operator()(void* ptr) const noexcept {
  std::free(ptr);
}

quad_heap::quad_heap() = default;

quad_heap::quad_heap(quad_heap&& other) noexcept
  : heap_(std::move(other.heap_)), size_(std::exchange(other.size_, 0)),
    capacity_(std::exchange(other.capacity_, 0)),
    seq_(std::exchange(other.seq_, 0)), slots_(std::move(other.slots_)),
    slot_count_(std::exchange(other.slot_count_, 0)),
    tombstones_(std::exchange(other.tombstones_, 0)) {
  // nop
}

quad_heap& quad_heap::operator=(quad_heap&& other) noexcept {
  if (this != &other) {
    heap_ = std::move(other.heap_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    seq_ = std::exchange(other.seq_, 0);
    slots_ = std::move(other.slots_);
    slot_count_ = std::exchange(other.slot_count_, 0);
    tombstones_ = std::exchange(other.tombstones_, 0);
  }
  return *this;
}

quad_heap::~quad_heap() = default;

// -- public interface ---------------------------------------------------------

bool quad_heap::insert(task_id id, int64_t due_ms) {
  return probe_or_add(id, due_ms) == npos;
}

bool quad_heap::erase(task_id id) {
  auto s = find_slot(id);
  if (s == npos)
    return false;
  auto pos = decode(slots_[s]);
  clear_slot(s);
  remove_at(pos);
  purge_tombstones_if_needed();
  return true;
}

bool quad_heap::update(task_id id, int64_t due_ms) {
  auto s = find_slot(id);
  if (s == npos)
    return false;
  move_to(s, due_ms);
  return true;
}

bool quad_heap::upsert(task_id id, int64_t due_ms) {
  auto s = probe_or_add(id, due_ms);
  if (s == npos)
    return true;
  move_to(s, due_ms);
  return false;
}

bool quad_heap::contains(task_id id) const {
  return find_slot(id) != npos;
}

std::optional<int64_t> quad_heap::due_of(task_id id) const {
  auto s = find_slot(id);
  if (s == npos)
    return std::nullopt;
  int64_t due_ms = heap_.get()[decode(slots_[s])].due_ms; // packed: copy
  return due_ms;
}

std::optional<timer_entry> quad_heap::top() const {
  if (size_ == 0)
    return std::nullopt;
  const auto& e = heap_.get()[0];
  return timer_entry{e.id, e.due_ms};
}

std::optional<int64_t> quad_heap::next_due() const {
  if (size_ == 0)
    return std::nullopt;
  int64_t due_ms = heap_.get()[0].due_ms; // packed: copy
  return due_ms;
}

size_t quad_heap::pop_due(int64_t now_ms, size_t limit,
                          std::vector<timer_entry>& out) {
  size_t n = 0;
  auto* heap = heap_.get();
  while (n < limit && size_ > 0 && heap[0].due_ms <= now_ms) {
    out.push_back(timer_entry{heap[0].id, heap[0].due_ms});
    clear_slot(slot_at(heap[0].id, 0));
    remove_at(0);
    purge_tombstones_if_needed();
    ++n;
  }
  return n;
}

std::vector<timer_entry> quad_heap::pop_due(int64_t now_ms, size_t limit) {
  std::vector<timer_entry> out;
  pop_due(now_ms, limit, out);
  return out;
}

void quad_heap::clear() noexcept {
  size_ = 0;
  seq_ = 0;
  tombstones_ = 0;
  if (slot_count_ > 0)
    std::memset(slots_.get(), 0, slot_count_ * sizeof(uint32_t));
}

void quad_heap::reserve(size_t n) {
  if (n > max_entries)
    throw std::length_error("quad_heap: reserve beyond max_entries");
  if (n > capacity_)
    resize_heap(n);
  if (over_load(n + tombstones_, slot_count_))
    rebuild_index(std::max(slots_for(n), slot_count_));
}

void quad_heap::shrink_to_fit() {
  if (capacity_ > size_)
    resize_heap(size_);
  auto wanted = size_ == 0 ? 0 : slots_for(size_);
  if (wanted < slot_count_ || tombstones_ > 0)
    rebuild_index(wanted);
}

size_t quad_heap::memory_bytes() const noexcept {
  static_assert(sizeof(entry) == 20);
  return capacity_ * sizeof(entry) + slot_count_ * sizeof(uint32_t);
}

void quad_heap::set_next_sequence_for_testing(uint32_t seq) {
  for (size_t i = 0; i < size_; ++i)
    if (heap_.get()[i].seq >= seq)
      throw std::invalid_argument("sequence below a live entry's");
  seq_ = seq;
}

bool quad_heap::check_invariants() const {
  const auto* heap = heap_.get();
  if (size_ > capacity_)
    return false;
  for (size_t i = 1; i < size_; ++i)
    if (less(heap[i], heap[(i - 1) / arity]))
      return false;
  for (size_t i = 0; i < size_; ++i) {
    if (heap[i].seq >= seq_)
      return false;
    auto s = find_slot(heap[i].id);
    if (s == npos || decode(slots_[s]) != i)
      return false;
  }
  size_t used = 0;
  size_t dead = 0;
  for (size_t s = 0; s < slot_count_; ++s) {
    if (occupied(slots_[s]))
      ++used;
    else if (slots_[s] == tombstone)
      ++dead;
  }
  return used == size_ && dead == tombstones_ &&
         !over_load(size_ + tombstones_, slot_count_ ? slot_count_ : 1);
}

// -- heap ---------------------------------------------------------------------

bool quad_heap::less(const entry& x, const entry& y) noexcept {
  return x.due_ms < y.due_ms || (x.due_ms == y.due_ms && x.seq < y.seq);
}

void quad_heap::grow_heap() {
  // Grow by 1/8 (at least 16 entries): realloc of a large block remaps pages
  // instead of copying, so a small factor keeps slack low at little cost.
  auto wanted = std::max(capacity_ + capacity_ / 8, capacity_ + 16);
  resize_heap(std::min(wanted, max_entries));
}

void quad_heap::resize_heap(size_t n) {
  if (n == 0) {
    heap_.reset();
    capacity_ = 0;
    return;
  }
  auto* ptr = std::realloc(heap_.get(), n * sizeof(entry));
  if (ptr == nullptr)
    throw std::bad_alloc();
  (void)heap_.release();
  heap_.reset(static_cast<entry*>(ptr));
  capacity_ = n;
}

// Both sift functions move a hole instead of swapping: each displaced entry
// is written once. `slot` is the index slot of the entry at `pos`; it stays
// valid because sifting never adds or removes index slots. The displaced
// entries' index slots are fixed afterwards in one pass (`apply_moves`), so
// their cache misses overlap instead of stalling every level in turn.

struct quad_heap::move_log {
  // Deep enough for max_entries: log4(2^27) < 16.
  static constexpr size_t capacity = 16;
  task_id ids[capacity];
  uint32_t from[capacity];
  uint32_t to[capacity];
  size_t size = 0;

  void add(task_id id, size_t src, size_t dst) noexcept {
    assert(size < capacity);
    ids[size] = id;
    from[size] = static_cast<uint32_t>(src);
    to[size] = static_cast<uint32_t>(dst);
    ++size;
  }
};

void quad_heap::sift_up(size_t pos, size_t slot) {
  auto* heap = heap_.get();
  auto e = heap[pos];
  move_log log;
  while (pos > 0) {
    auto parent = (pos - 1) / arity;
    if (!less(e, heap[parent]))
      break;
    heap[pos] = heap[parent];
    log.add(heap[pos].id, parent, pos);
    pos = parent;
  }
  heap[pos] = e;
  // After the moves: the last mover's old position is now `pos`.
  apply_moves(log);
  slots_[slot] = encode(pos, slots_[slot] & fp_mask);
}

void quad_heap::sift_down(size_t pos, size_t slot) {
  auto* heap = heap_.get();
  auto e = heap[pos];
  move_log log;
  for (;;) {
    auto first = pos * arity + 1;
    if (first >= size_)
      break;
    auto last = std::min(first + arity, size_);
    // Start loading the next level (the children's blocks) while this
    // level's comparisons run: about 10% off a pop at a million entries.
    for (auto c = first; c < last && c * arity + 1 < size_; ++c)
      __builtin_prefetch(heap + c * arity + 1);
    auto best = first;
    for (auto c = first + 1; c < last; ++c)
      if (less(heap[c], heap[best]))
        best = c;
    if (!less(heap[best], e))
      break;
    heap[pos] = heap[best];
    log.add(heap[pos].id, best, pos);
    pos = best;
  }
  heap[pos] = e;
  // After the moves: the last mover's old position is now `pos`.
  apply_moves(log);
  slots_[slot] = encode(pos, slots_[slot] & fp_mask);
}

void quad_heap::apply_moves(const move_log& log) noexcept {
  for (size_t i = 0; i < log.size; ++i)
    __builtin_prefetch(&slots_[slot_for_hash(hash(log.ids[i]))], 1);
  // In move order: an entry's new position is the old position of the entry
  // moved before it, so no later search can match an updated slot.
  for (size_t i = 0; i < log.size; ++i) {
    auto s = slot_at(log.ids[i], log.from[i]);
    slots_[s] = encode(log.to[i], slots_[s] & fp_mask);
  }
}

// Returns the slot of a present `id`; otherwise adds it and returns npos.
size_t quad_heap::probe_or_add(task_id id, int64_t due_ms) {
  if (over_load(size_ + 1 + tombstones_, slot_count_))
    make_index_room();
  // One probe both finds a present id and the slot for an absent one.
  auto h = hash(id);
  auto fp = fingerprint(h);
  auto target = npos;
  for (auto s = slot_for_hash(h);; s = next_slot(s)) {
    auto v = slots_[s];
    if (v == empty_slot) {
      if (target == npos)
        target = s;
      break;
    }
    if (v == tombstone) {
      if (target == npos)
        target = s;
    } else if ((v & fp_mask) == fp && heap_.get()[decode(v)].id == id) {
      return s;
    }
  }
  if (size_ >= max_entries)
    throw std::length_error("quad_heap: more than max_entries entries");
  if (slots_[target] == tombstone)
    --tombstones_;
  if (size_ == capacity_)
    grow_heap();
  auto pos = static_cast<uint32_t>(size_++);
  heap_.get()[pos] = entry{due_ms, id, next_seq()};
  slots_[target] = encode(pos, fp);
  sift_up(pos, target);
  return npos;
}

void quad_heap::move_to(size_t s, int64_t due_ms) {
  auto pos = static_cast<uint32_t>(decode(slots_[s]));
  auto& e = heap_.get()[pos];
  auto old_due = e.due_ms;
  e.due_ms = due_ms;
  e.seq = next_seq();
  // A fresh sequence only ever moves an entry later among equal due times.
  if (due_ms < old_due)
    sift_up(pos, s);
  else
    sift_down(pos, s);
}

void quad_heap::remove_at(size_t pos) {
  auto last = --size_;
  if (pos == last)
    return;
  // Fill the hole with the last leaf, then restore the order from there.
  auto* heap = heap_.get();
  auto s = slot_at(heap[last].id, last);
  heap[pos] = heap[last];
  slots_[s] = encode(pos, slots_[s] & fp_mask);
  if (pos > 0 && less(heap[pos], heap[(pos - 1) / arity]))
    sift_up(pos, s);
  else
    sift_down(pos, s);
}

uint32_t quad_heap::next_seq() {
  if (seq_ == std::numeric_limits<uint32_t>::max())
    renumber_seqs();
  return seq_++;
}

void quad_heap::renumber_seqs() {
  // Once per 2^32 insertions: rank entries by (due, seq) and use the ranks.
  // Relative order is unchanged, so the heap needs no repair.
  auto* heap = heap_.get();
  std::vector<uint32_t> order(size_);
  for (size_t i = 0; i < size_; ++i)
    order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(),
            [heap](uint32_t x, uint32_t y) { return less(heap[x], heap[y]); });
  for (size_t rank = 0; rank < size_; ++rank)
    heap[order[rank]].seq = static_cast<uint32_t>(rank);
  seq_ = static_cast<uint32_t>(size_);
}

// -- index --------------------------------------------------------------------

size_t quad_heap::slot_for_hash(uint64_t h) const noexcept {
  // Maps the hash's high half onto [0, slot_count_) without a division, so
  // the table can grow by 1.5x instead of doubling.
  return static_cast<size_t>(((h >> 32) * slot_count_) >> 32);
}

size_t quad_heap::next_slot(size_t s) const noexcept {
  return s + 1 == slot_count_ ? 0 : s + 1;
}

size_t quad_heap::prev_slot(size_t s) const noexcept {
  return s == 0 ? slot_count_ - 1 : s - 1;
}

size_t quad_heap::find_slot(task_id id) const noexcept {
  if (size_ == 0)
    return npos;
  auto h = hash(id);
  auto fp = fingerprint(h);
  const auto* heap = heap_.get();
  for (auto s = slot_for_hash(h);; s = next_slot(s)) {
    auto v = slots_[s];
    if (v == empty_slot)
      return npos;
    if (occupied(v) && (v & fp_mask) == fp && heap[decode(v)].id == id)
      return s;
  }
}

size_t quad_heap::slot_at(task_id id, size_t pos) const noexcept {
  // Positions are unique, so matching the position alone is exact and needs
  // no look at the heap.
  auto want = static_cast<uint32_t>(pos + 1);
  for (auto s = slot_for_hash(hash(id));; s = next_slot(s))
    if ((slots_[s] >> fp_bits) == want)
      return s;
}

void quad_heap::clear_slot(size_t s) noexcept {
  if (slots_[next_slot(s)] != empty_slot) {
    slots_[s] = tombstone;
    ++tombstones_;
    return;
  }
  // Followed by an empty slot: no probe passes through here, nor through the
  // tombstones just before it.
  slots_[s] = empty_slot;
  for (auto p = prev_slot(s); slots_[p] == tombstone; p = prev_slot(p)) {
    slots_[p] = empty_slot;
    --tombstones_;
  }
}

void quad_heap::purge_tombstones_if_needed() {
  // Without inserts nothing else rebuilds the index: tombstones would pile
  // up and a drained heap would keep an index sized for its peak. Rebuild
  // after slot_count_ / 4 tombstones, or shrink once under 1/8 full (to a
  // load near 0.44, so regrowing takes a doubling); either way O(1)
  // amortized per removal.
  auto sparse = size_ * 8 < slot_count_ && slot_count_ > min_slots;
  if (sparse)
    rebuild_index(slots_for(2 * size_));
  else if (tombstones_ * 4 > slot_count_)
    rebuild_index(slot_count_);
}

void quad_heap::make_index_room() {
  // Tombstones alone: rebuild in place while the live entries leave 1/16 of
  // the table as headroom; otherwise grow by half. Either way the load after
  // the rebuild stays above 1/2, which bounds the index to 8 bytes per entry.
  auto live = size_ + 1;
  if (slot_count_ > 0 && live * 16 <= slot_count_ * 13)
    rebuild_index(slot_count_);
  else
    rebuild_index(std::max(slots_for(live), slot_count_ + slot_count_ / 2));
}

void quad_heap::rebuild_index(size_t slot_count) {
  tombstones_ = 0;
  if (slot_count == 0) {
    slots_.reset();
    slot_count_ = 0;
    return;
  }
  slots_.reset(new uint32_t[slot_count]());
  slot_count_ = slot_count;
  const auto* heap = heap_.get();
  for (size_t i = 0; i < size_; ++i) {
    auto h = hash(heap[i].id);
    auto s = slot_for_hash(h);
    while (slots_[s] != empty_slot)
      s = next_slot(s);
    slots_[s] = encode(i, fingerprint(h));
  }
}

} // namespace dally::core
