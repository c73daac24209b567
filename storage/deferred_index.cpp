#include "storage/deferred_index.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <utility>

#include "core/placement.hpp"

namespace dally::storage {

namespace {

/// A ring this large is given back once it empties: a burst of entries (or
/// a recovery) does not keep its memory for good.
constexpr size_t kept_slots = size_t{1} << 16;

/// The ring holds ids up to this many times the bound apart: `age` trims
/// its span to twice the bound at each commit, and a batch's new ids (or
/// a recovery) may go beyond that until then.
constexpr size_t span_factor = 4;

} // namespace

deferred_index::deferred_index(uint64_t stride, uint64_t shard, size_t bound)
  : stride_(std::max<uint64_t>(stride, 1)),
    shard_(shard % std::max<uint64_t>(stride, 1)), bound_(bound) {
  // nop
}

// -- the committed entries ----------------------------------------------------

void deferred_index::for_each_open(
  const std::function<void(core::task_id, int64_t)>& f) const {
  for (size_t pos = 0; pos < committed_; ++pos)
    if (at(pos).flags & open)
      f(id_at(pos), at(pos).index_ms);
  for (const auto& [id, s] : foreign_)
    if (s.flags & open)
      f(id, s.index_ms);
}

void deferred_index::recover(core::task_id id, int64_t index_ms) {
  last_id_ = std::max(last_id_, id);
  ++live_;
  bool owned = core::shard_of(id, static_cast<uint32_t>(stride_)) == shard_;
  bool in_order = size_ == 0 || id > id_at(size_ - 1);
  size_t pos = size_ == 0 ? 0 : (id - base_id_) / stride_;
  if (!owned || !in_order || pos >= span_factor * std::max<size_t>(bound_, 1)) {
    foreign_[id] = slot{index_ms, open | recovered};
    return;
  }
  if (size_ == 0)
    base_id_ = id;
  grow_to(pos + 1);
  at(pos) = slot{index_ms, open | recovered};
  committed_ = size_;
}

// -- the commit being built ---------------------------------------------------

bool deferred_index::defer(core::task_id id, int64_t index_ms) {
  if (bound_ == 0 || id <= std::max(last_id_, last_id_now_) ||
      core::shard_of(id, static_cast<uint32_t>(stride_)) != shard_)
    return false;
  size_t pos = size_ == 0 ? 0 : (id - base_id_) / stride_;
  if (pos >= span_factor * bound_) {
    refused_id_ = std::max(refused_id_, id);
    return false;
  }
  if (size_ == 0)
    base_id_ = id;
  grow_to(pos + 1);
  at(pos) = slot{index_ms, added_now};
  ++added_now_;
  last_id_now_ = id;
  return true;
}

bool deferred_index::take(core::task_id id) {
  auto* s = find(id);
  if (s == nullptr)
    return false;
  if (s->flags & added_now) {
    // Deferred and settled by this batch: never written at all.
    s->flags = 0;
    --added_now_;
    return true;
  }
  if (!(s->flags & open) || (s->flags & settled_now))
    return false;
  settle(id, *s);
  return !(s->flags & recovered);
}

bool deferred_index::put_once(core::task_id id) const {
  const auto* s = find(id);
  if (s == nullptr || (s->flags & (rewritten | rewritten_now)))
    return false;
  if (s->flags & added_now)
    return true;
  return (s->flags & open) && !(s->flags & (settled_now | recovered));
}

void deferred_index::note_rewritten(core::task_id id) {
  auto* s = find(id);
  if (s == nullptr || !(s->flags & (open | added_now)) ||
      (s->flags & rewritten_now))
    return;
  s->flags |= rewritten_now;
  if (!(s->flags & added_now))
    touched_.push_back(id);
}

core::task_id
deferred_index::age(const std::function<void(core::task_id, int64_t)>& write) {
  auto live = live_ - settled_now_ + added_now_;
  // Entries the ring could not hold after a crash go first, all of them.
  for (auto& [id, s] : foreign_)
    if ((s.flags & open) && !(s.flags & settled_now)) {
      write(id, s.index_ms);
      settle(id, s);
      --live;
    }
  // The span in ids of this shard, this batch's included, and up to the id
  // `defer` refused, which the front must make room for.
  size_t listed = size_;
  if (refused_id_ != 0 && size_ > 0)
    listed = std::max<size_t>(listed, (refused_id_ - base_id_) / stride_ + 1);
  core::task_id lowest = 0;
  for (size_t pos = 0; pos < committed_; ++pos) {
    auto& s = at(pos);
    bool is_open = (s.flags & open) && !(s.flags & settled_now);
    if (is_open && live <= bound_ && listed <= 2 * bound_) {
      lowest = id_at(pos);
      break;
    }
    --listed;
    if (is_open) {
      write(id_at(pos), s.index_ms);
      settle(id_at(pos), s);
      --live;
    }
  }
  for (size_t pos = committed_; pos < size_; ++pos) {
    auto& s = at(pos);
    if (!(s.flags & added_now))
      continue;
    if (live <= bound_) {
      if (lowest == 0)
        lowest = id_at(pos);
      break;
    }
    write(id_at(pos), s.index_ms);
    s.flags = 0;
    --added_now_;
    --live;
  }
  return lowest;
}

void deferred_index::apply(
  const std::function<void(core::task_id, int64_t)>& recovered_gone) {
  for (auto id : touched_) {
    auto* s = find(id);
    if (s == nullptr)
      continue;
    if (s->flags & settled_now) {
      assert(s->flags & open);
      if (s->flags & recovered)
        recovered_gone(id, s->index_ms);
      s->flags = 0;
      --live_;
      foreign_.erase(id);
    } else if (s->flags & rewritten_now) {
      s->flags = static_cast<uint8_t>((s->flags & ~rewritten_now) | rewritten);
    }
  }
  for (size_t pos = committed_; pos < size_; ++pos) {
    auto& s = at(pos);
    if (s.flags & added_now) {
      s.flags = (s.flags & rewritten_now) ? open | rewritten : open;
      ++live_;
    } else {
      s.flags = 0;
    }
  }
  committed_ = size_;
  last_id_ = std::max(last_id_, last_id_now_);
  forget_batch();
  pop_settled_front();
}

void deferred_index::discard() {
  for (auto id : touched_)
    if (auto* s = find(id); s != nullptr)
      s->flags &= static_cast<uint8_t>(~(settled_now | rewritten_now));
  for (size_t pos = committed_; pos < size_; ++pos)
    at(pos) = slot{};
  size_ = committed_;
  forget_batch();
}

// -- private ------------------------------------------------------------------

deferred_index::slot* deferred_index::find(core::task_id id) {
  return const_cast<slot*>(std::as_const(*this).find(id));
}

const deferred_index::slot* deferred_index::find(core::task_id id) const {
  if (size_ > 0 && id >= base_id_ && (id - base_id_) % stride_ == 0) {
    auto pos = (id - base_id_) / stride_;
    if (pos < size_)
      return &at(pos);
  }
  if (!foreign_.empty())
    if (auto i = foreign_.find(id); i != foreign_.end())
      return &i->second;
  return nullptr;
}

void deferred_index::grow_to(size_t size) {
  if (size <= size_)
    return;
  if (size > ring_.size()) {
    std::vector<slot> bigger(std::bit_ceil(std::max<size_t>(size, 64)));
    for (size_t pos = 0; pos < size_; ++pos)
      bigger[pos] = at(pos);
    ring_ = std::move(bigger);
    mask_ = ring_.size() - 1;
    head_ = 0;
  }
  for (size_t pos = size_; pos < size; ++pos)
    at(pos) = slot{};
  size_ = size;
}

void deferred_index::forget_batch() noexcept {
  last_id_now_ = 0;
  refused_id_ = 0;
  settled_now_ = 0;
  added_now_ = 0;
  touched_.clear();
}

void deferred_index::settle(core::task_id id, slot& s) {
  s.flags |= settled_now;
  ++settled_now_;
  touched_.push_back(id);
}

void deferred_index::pop_settled_front() {
  while (size_ > 0 && !(at(0).flags & open)) {
    head_ = (head_ + 1) & mask_;
    base_id_ += stride_;
    --size_;
  }
  committed_ = size_;
  if (size_ == 0 && ring_.size() > kept_slots) {
    ring_ = std::vector<slot>{};
    mask_ = 0;
    head_ = 0;
  }
}

} // namespace dally::storage
