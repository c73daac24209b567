#include "core/timing_wheel.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>

#include <absl/container/flat_hash_set.h>
#include <absl/hash/hash.h>

namespace dally::core {

namespace {

constexpr uint32_t nil = std::numeric_limits<uint32_t>::max();
constexpr uint64_t no_tick = std::numeric_limits<uint64_t>::max();
constexpr int64_t max_ms = std::numeric_limits<int64_t>::max();

/// One entry. Live nodes are linked into a bucket, free nodes into the free
/// list through `next`.
struct node {
  task_id id;
  int64_t due_ms;
  uint32_t prev;
  uint32_t next;
};

/// An intrusive list of nodes, appended at the tail so a bucket keeps
/// insertion order.
struct bucket {
  uint32_t head = nil;
  uint32_t tail = nil;
  /// Lower bound of the fire ticks in the bucket, for `next_due`: exact
  /// until an entry leaves other than by popping or cascading.
  uint64_t min_tick = no_tick;
};

struct level {
  std::vector<bucket> buckets;
  /// Bit d is set when bucket d is non-empty.
  std::vector<uint64_t> occupied;
  size_t count = 0;
};

/// What the index stores: a node position. Hashing and comparing go through
/// the node's id, so the index needs 4 bytes a slot instead of 16.
struct node_ref {
  uint32_t index;
};

struct ref_hash {
  using is_transparent = void;

  const std::vector<node>* nodes = nullptr;

  size_t operator()(node_ref ref) const noexcept {
    return absl::Hash<task_id>{}((*nodes)[ref.index].id);
  }

  size_t operator()(task_id id) const noexcept {
    return absl::Hash<task_id>{}(id);
  }
};

struct ref_eq {
  using is_transparent = void;

  const std::vector<node>* nodes = nullptr;

  bool operator()(node_ref x, node_ref y) const noexcept {
    return (*nodes)[x.index].id == (*nodes)[y.index].id;
  }

  bool operator()(node_ref x, task_id id) const noexcept {
    return (*nodes)[x.index].id == id;
  }

  bool operator()(task_id id, node_ref x) const noexcept {
    return (*nodes)[x.index].id == id;
  }
};

} // namespace

// Ticks are unsigned 64-bit counts of `tick_ms` from time 0. Write a tick in
// base `wheel_size`: level k holds the entries whose fire tick agrees with
// the current tick in every digit above k and differs in digit k, in the
// bucket named by that digit. Level 0 holds the entries of the current
// level-0 block. Fire ticks are never below the current tick, so every
// occupied bucket of a level lies at or after the current tick's digit, and
// the lowest occupied bucket of the lowest non-empty level holds the
// earliest entries.
struct timing_wheel::impl {
  explicit impl(const timing_wheel_options& opts)
    : tick_ms(opts.tick_ms), wheel_size(opts.wheel_size),
      pow2(std::has_single_bit(opts.wheel_size)),
      digit_bits(static_cast<unsigned>(std::countr_zero(opts.wheel_size))),
      index(0, ref_hash{&nodes}, ref_eq{&nodes}) {
    spans.push_back(1);
    while (spans.back() <= no_tick / wheel_size)
      spans.push_back(spans.back() * wheel_size);
    now_tick = static_cast<uint64_t>(opts.start_ms / tick_ms);
  }

  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  // -- tick arithmetic -------------------------------------------------------

  /// The tick an entry due at `due_ms` fires at, ignoring the current time.
  uint64_t ceil_tick(int64_t due_ms) const noexcept {
    if (due_ms <= 0)
      return 0;
    // due_ms / tick_ms + 1 cannot overflow: tick_ms == 1 leaves no remainder.
    return static_cast<uint64_t>(due_ms / tick_ms + (due_ms % tick_ms != 0));
  }

  /// The tick an entry due at `due_ms` sits at now: overdue entries sit at
  /// the current tick.
  uint64_t fire_tick(int64_t due_ms) const noexcept {
    return std::max(ceil_tick(due_ms), now_tick);
  }

  int64_t tick_to_ms(uint64_t tick) const noexcept {
    if (tick > static_cast<uint64_t>(max_ms / tick_ms))
      return max_ms;
    return static_cast<int64_t>(tick) * tick_ms;
  }

  /// `tick` with its lowest k digits dropped.
  uint64_t block(uint64_t tick, size_t k) const noexcept {
    if (k >= spans.size())
      return 0;
    return pow2 ? tick >> (k * digit_bits) : tick / spans[k];
  }

  uint32_t digit(uint64_t tick, size_t k) const noexcept {
    uint64_t b = block(tick, k);
    return static_cast<uint32_t>(pow2 ? b & (wheel_size - 1) : b % wheel_size);
  }

  /// The level an entry firing at `tick` (>= now_tick) belongs on.
  size_t level_for(uint64_t tick) const noexcept {
    if (pow2) {
      uint64_t diff = tick ^ now_tick;
      return diff == 0 ? 0 : (63 - std::countl_zero(diff)) / digit_bits;
    }
    size_t k = 0;
    while (block(tick, k + 1) != block(now_tick, k + 1))
      ++k;
    return k;
  }

  /// The first tick covered by bucket `d` of level `k`.
  uint64_t bucket_start(size_t k, uint32_t d) const noexcept {
    return (block(now_tick, k + 1) * wheel_size + d) * spans[k];
  }

  /// The lowest occupied bucket of a non-empty level.
  uint32_t lowest_occupied(size_t k) const noexcept {
    const auto& words = levels[k].occupied;
    size_t w = digit(now_tick, k) / 64;
    while (words[w] == 0)
      ++w;
    return static_cast<uint32_t>(w * 64 + std::countr_zero(words[w]));
  }

  // -- buckets ---------------------------------------------------------------

  void ensure_level(size_t k) {
    while (levels.size() <= k) {
      level lv;
      lv.buckets.resize(wheel_size);
      lv.occupied.resize((wheel_size + 63) / 64);
      levels.push_back(std::move(lv));
    }
  }

  /// Appends node `idx` to the bucket of `tick`. The level must exist.
  void link(uint32_t idx, uint64_t tick) noexcept {
    size_t k = level_for(tick);
    uint32_t d = digit(tick, k);
    level& lv = levels[k];
    bucket& b = lv.buckets[d];
    node& n = nodes[idx];
    n.prev = b.tail;
    n.next = nil;
    if (b.tail == nil) {
      b.head = idx;
      lv.occupied[d / 64] |= uint64_t{1} << (d % 64);
    } else {
      nodes[b.tail].next = idx;
    }
    b.tail = idx;
    b.min_tick = std::min(b.min_tick, tick);
    if (lv.count++ == 0)
      level_mask |= uint64_t{1} << k;
  }

  void mark_empty(size_t k, uint32_t d) noexcept {
    level& lv = levels[k];
    lv.buckets[d].min_tick = no_tick;
    lv.occupied[d / 64] &= ~(uint64_t{1} << (d % 64));
  }

  void drop_count(size_t k, size_t n) noexcept {
    level& lv = levels[k];
    lv.count -= n;
    if (lv.count == 0)
      level_mask &= ~(uint64_t{1} << k);
  }

  /// Takes node `idx` out of the bucket of `tick`, where it sits.
  void unlink(uint32_t idx, uint64_t tick) noexcept {
    size_t k = level_for(tick);
    uint32_t d = digit(tick, k);
    bucket& b = levels[k].buckets[d];
    const node& n = nodes[idx];
    if (n.prev == nil)
      b.head = n.next;
    else
      nodes[n.prev].next = n.next;
    if (n.next == nil)
      b.tail = n.prev;
    else
      nodes[n.next].prev = n.prev;
    if (b.head == nil)
      mark_empty(k, d);
    drop_count(k, 1);
  }

  /// Moves every entry of bucket `d` of level `k` to the levels below, in
  /// list order, once the current tick has entered the bucket's range.
  void cascade(size_t k, uint32_t d) noexcept {
    uint32_t idx = levels[k].buckets[d].head;
    levels[k].buckets[d] = bucket{};
    mark_empty(k, d);
    size_t moved = 0;
    while (idx != nil) {
      uint32_t next = nodes[idx].next;
      link(idx, ceil_tick(nodes[idx].due_ms));
      idx = next;
      ++moved;
    }
    drop_count(k, moved);
  }

  // -- node pool -------------------------------------------------------------

  uint32_t alloc_node(task_id id, int64_t due_ms) {
    uint32_t idx;
    if (free_head != nil) {
      idx = free_head;
      free_head = nodes[idx].next;
      nodes[idx] = node{id, due_ms, nil, nil};
    } else {
      if (nodes.size() >= max_entries)
        throw std::length_error("timing_wheel: too many entries");
      idx = static_cast<uint32_t>(nodes.size());
      nodes.push_back(node{id, due_ms, nil, nil});
    }
    return idx;
  }

  void free_node(uint32_t idx) noexcept {
    nodes[idx] = node{0, 0, nil, free_head};
    free_head = idx;
  }

  std::optional<uint32_t> find(task_id id) const {
    auto it = index.find(id);
    if (it == index.end())
      return std::nullopt;
    return it->index;
  }

  // -- state -----------------------------------------------------------------

  const int64_t tick_ms;
  const uint32_t wheel_size;
  const bool pow2;
  const unsigned digit_bits;
  /// spans[k] = wheel_size^k ticks, for every k where that fits in 64 bits.
  std::vector<uint64_t> spans;
  uint64_t now_tick = 0;
  std::vector<node> nodes;
  uint32_t free_head = nil;
  size_t size = 0;
  absl::flat_hash_set<node_ref, ref_hash, ref_eq> index;
  std::vector<level> levels;
  /// Bit k is set when level k holds an entry.
  uint64_t level_mask = 0;
};

timing_wheel::timing_wheel(timing_wheel_options opts) {
  if (opts.tick_ms <= 0)
    throw std::invalid_argument("timing_wheel: tick_ms must be positive");
  if (opts.wheel_size < 2 || opts.wheel_size > max_wheel_size)
    throw std::invalid_argument(
      "timing_wheel: wheel_size must lie in [2, max_wheel_size]");
  if (opts.start_ms < 0)
    throw std::invalid_argument("timing_wheel: start_ms must not be negative");
  opts_ = opts;
}

timing_wheel::impl& timing_wheel::state() {
  if (!impl_)
    impl_ = std::make_unique<impl>(opts_);
  return *impl_;
}

timing_wheel::timing_wheel(timing_wheel&&) noexcept = default;

timing_wheel& timing_wheel::operator=(timing_wheel&&) noexcept = default;

timing_wheel::~timing_wheel() = default;

bool timing_wheel::insert(task_id id, int64_t due_ms) {
  auto& s = state();
  if (s.index.contains(id))
    return false;
  uint64_t tick = s.fire_tick(due_ms);
  s.ensure_level(s.level_for(tick));
  uint32_t idx = s.alloc_node(id, due_ms);
  try {
    s.index.insert(node_ref{idx});
  } catch (...) {
    s.free_node(idx);
    throw;
  }
  s.link(idx, tick);
  ++s.size;
  return true;
}

bool timing_wheel::erase(task_id id) {
  if (!impl_)
    return false;
  auto& s = *impl_;
  auto it = s.index.find(id);
  if (it == s.index.end())
    return false;
  uint32_t idx = it->index;
  s.index.erase(it);
  s.unlink(idx, s.fire_tick(s.nodes[idx].due_ms));
  s.free_node(idx);
  --s.size;
  return true;
}

bool timing_wheel::update(task_id id, int64_t due_ms) {
  if (!impl_)
    return false;
  auto& s = *impl_;
  auto idx = s.find(id);
  if (!idx)
    return false;
  uint64_t tick = s.fire_tick(due_ms);
  s.ensure_level(s.level_for(tick));
  s.unlink(*idx, s.fire_tick(s.nodes[*idx].due_ms));
  s.nodes[*idx].due_ms = due_ms;
  s.link(*idx, tick);
  return true;
}

bool timing_wheel::contains(task_id id) const {
  return impl_ && impl_->index.contains(id);
}

std::optional<int64_t> timing_wheel::due_of(task_id id) const {
  if (!impl_)
    return std::nullopt;
  auto idx = impl_->find(id);
  if (!idx)
    return std::nullopt;
  return impl_->nodes[*idx].due_ms;
}

std::optional<int64_t> timing_wheel::next_due() const {
  if (!impl_ || impl_->level_mask == 0)
    return std::nullopt;
  const auto& s = *impl_;
  auto k = static_cast<size_t>(std::countr_zero(s.level_mask));
  uint32_t d = s.lowest_occupied(k);
  // A level-0 bucket holds a single tick; an upper one knows a lower bound.
  uint64_t tick =
    k == 0 ? s.bucket_start(0, d) : s.levels[k].buckets[d].min_tick;
  return s.tick_to_ms(tick);
}

size_t timing_wheel::pop_due(int64_t now_ms, size_t limit,
                             std::vector<timer_entry>& out) {
  if (now_ms < 0)
    return 0;
  auto& s = state();
  auto target = static_cast<uint64_t>(now_ms / s.tick_ms);
  if (target < s.now_tick)
    return 0;
  size_t popped = 0;
  while (s.level_mask != 0) {
    auto k = static_cast<size_t>(std::countr_zero(s.level_mask));
    uint32_t d = s.lowest_occupied(k);
    uint64_t start = s.bucket_start(k, d);
    if (start > target)
      break;
    // Nothing fires before `start`: time may skip straight to it.
    s.now_tick = start;
    if (k > 0) {
      s.cascade(k, d);
      continue;
    }
    if (popped == limit)
      return popped;
    bucket& b = s.levels[0].buckets[d];
    while (b.head != nil && popped < limit) {
      uint32_t idx = b.head;
      const node& n = s.nodes[idx];
      out.push_back(timer_entry{n.id, n.due_ms});
      s.index.erase(n.id);
      b.head = n.next;
      if (b.head == nil) {
        b.tail = nil;
        s.mark_empty(0, d);
      } else {
        s.nodes[b.head].prev = nil;
      }
      s.drop_count(0, 1);
      s.free_node(idx);
      --s.size;
      ++popped;
    }
    if (b.head != nil)
      return popped;
  }
  s.now_tick = target;
  return popped;
}

std::vector<timer_entry> timing_wheel::pop_due(int64_t now_ms, size_t limit) {
  std::vector<timer_entry> out;
  pop_due(now_ms, limit, out);
  return out;
}

size_t timing_wheel::size() const noexcept {
  return impl_ ? impl_->size : 0;
}

void timing_wheel::clear() noexcept {
  if (!impl_)
    return;
  auto& s = *impl_;
  s.index.clear();
  for (auto& lv : s.levels) {
    std::fill(lv.buckets.begin(), lv.buckets.end(), bucket{});
    std::fill(lv.occupied.begin(), lv.occupied.end(), 0);
    lv.count = 0;
  }
  s.level_mask = 0;
  s.nodes.clear();
  s.free_head = nil;
  s.size = 0;
}

void timing_wheel::reserve(size_t n) {
  if (n > max_entries)
    throw std::length_error("timing_wheel: reserve beyond max_entries");
  auto& s = state();
  s.nodes.reserve(n);
  s.index.reserve(n);
}

size_t timing_wheel::memory_bytes() const noexcept {
  if (!impl_)
    return 0;
  const auto& s = *impl_;
  size_t bytes = sizeof(impl);
  bytes += s.nodes.capacity() * sizeof(node);
  bytes += s.spans.capacity() * sizeof(uint64_t);
  bytes += s.levels.capacity() * sizeof(level);
  for (const auto& lv : s.levels) {
    bytes += lv.buckets.capacity() * sizeof(bucket);
    bytes += lv.occupied.capacity() * sizeof(uint64_t);
  }
  // absl's table: one control byte per slot, one sentinel, a cloned group of
  // 15 control bytes, padding to the slot alignment, then the slots.
  if (size_t cap = s.index.bucket_count(); cap > 0) {
    constexpr size_t align = alignof(node_ref);
    size_t ctrl = (cap + 1 + 15 + align - 1) / align * align;
    bytes += ctrl + cap * sizeof(node_ref);
  }
  return bytes;
}

bool timing_wheel::check_invariants() const {
  if (!impl_)
    return true;
  const auto& s = *impl_;
  if (s.index.size() != s.size)
    return false;
  std::vector<bool> seen(s.nodes.size(), false);
  size_t total = 0;
  uint64_t mask = 0;
  for (size_t k = 0; k < s.levels.size(); ++k) {
    const level& lv = s.levels[k];
    if (lv.buckets.size() != s.wheel_size ||
        lv.occupied.size() != (s.wheel_size + 63) / 64)
      return false;
    size_t count = 0;
    for (uint32_t d = 0; d < s.wheel_size; ++d) {
      const bucket& b = lv.buckets[d];
      bool bit = (lv.occupied[d / 64] >> (d % 64)) & 1;
      if ((b.head == nil) != (b.tail == nil) || bit != (b.head != nil))
        return false;
      if (b.head == nil && b.min_tick != no_tick)
        return false;
      uint32_t prev = nil;
      for (uint32_t idx = b.head; idx != nil; idx = s.nodes[idx].next) {
        if (idx >= s.nodes.size() || seen[idx])
          return false;
        seen[idx] = true;
        const node& n = s.nodes[idx];
        if (n.prev != prev)
          return false;
        uint64_t tick = s.fire_tick(n.due_ms);
        if (s.level_for(tick) != k || s.digit(tick, k) != d ||
            tick < b.min_tick)
          return false;
        auto at = s.find(n.id);
        if (!at || *at != idx)
          return false;
        prev = idx;
        ++count;
      }
      if (b.tail != prev)
        return false;
    }
    if (count != lv.count)
      return false;
    if (count > 0)
      mask |= uint64_t{1} << k;
    total += count;
  }
  if (mask != s.level_mask || total != s.size)
    return false;
  size_t free_count = 0;
  for (uint32_t idx = s.free_head; idx != nil; idx = s.nodes[idx].next) {
    if (idx >= s.nodes.size() || seen[idx])
      return false;
    seen[idx] = true;
    ++free_count;
  }
  return total + free_count == s.nodes.size();
}

} // namespace dally::core
