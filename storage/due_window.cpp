#include "storage/due_window.hpp"

#include <algorithm>
#include <type_traits>
#include <variant>

namespace dally::storage {

namespace {

constexpr int64_t min_ms = std::numeric_limits<int64_t>::min();
constexpr int64_t max_ms = std::numeric_limits<int64_t>::max();
constexpr core::task_id max_id = std::numeric_limits<core::task_id>::max();

int64_t saturating_add(int64_t x, int64_t y) noexcept {
  int64_t sum = 0;
  if (__builtin_add_overflow(x, y, &sum))
    return y > 0 ? max_ms : min_ms;
  return sum;
}

} // namespace

due_window::due_window(task_store& store, due_window_options opts)
  : store_(store), opts_(opts) {
  // A zero window would never load what is due right now, and a zero slice
  // would never advance the cursor.
  opts_.window_ms = std::max<int64_t>(opts_.window_ms, 1);
  opts_.slice_size = std::max<size_t>(opts_.slice_size, 1);
  opts_.max_in_memory = std::clamp<size_t>(opts_.max_in_memory, 1,
                                           core::quad_heap::max_entries / 2);
}

core::error due_window::refill(int64_t now_ms, size_t max_slices) {
  if (!needs_refill(now_ms))
    return {};
  auto horizon_ms = saturating_add(now_ms, opts_.window_ms);
  // Everything before the horizon is loaded once a scan comes back short.
  auto end = due_key{saturating_add(horizon_ms, -1), max_id};
  for (size_t slices = 0; slices < max_slices && cursor_ < end &&
                          heap_.size() < opts_.max_in_memory;
       ++slices) {
    auto want = std::min(opts_.slice_size, opts_.max_in_memory - heap_.size());
    auto keys = store_.scan_due(cursor_, horizon_ms, want);
    if (!keys)
      return keys.err();
    for (const auto& key : *keys)
      heap_.upsert(key.id, key.index_ms);
    if (keys->size() < want)
      cursor_ = end;
    else if (!keys->empty())
      cursor_ = keys->back();
  }
  return {};
}

void due_window::on_write(const write_batch& batch) {
  for (const auto& op : batch.ops()) {
    std::visit(
      [this](const auto& x) {
        using op_type = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<op_type, write_batch::put_op>)
          on_put(write_batch::key_of(x.rec));
        else if constexpr (std::is_same_v<op_type, write_batch::replace_op>) {
          // The shard tracks in-flight tasks by their leases, not here.
          if (x.after.state == task_state::in_flight)
            on_erase(x.before);
          else
            on_replace(x.before, write_batch::key_of(x.after));
        } else if constexpr (std::is_same_v<op_type, write_batch::erase_op>)
          on_erase(x.key);
        else if constexpr (std::is_same_v<op_type, write_batch::bury_op>)
          on_erase(x.key);
        else if constexpr (std::is_same_v<op_type, write_batch::revive_op>)
          on_put(write_batch::key_of(x.rec));
        // Dead-letter drops and idempotency keys do not touch the index.
      },
      op);
  }
}

void due_window::on_put(due_key key) {
  if (key <= cursor_) {
    heap_.upsert(key.id, key.index_ms);
  } else {
    // A stale copy of the id must not fire at its old time.
    heap_.erase(key.id);
  }
}

void due_window::on_erase(due_key key) {
  heap_.erase(key.id);
}

void due_window::on_replace(due_key before, due_key after) {
  if (before.id != after.id)
    heap_.erase(before.id);
  on_put(after);
}

size_t due_window::pop_due(int64_t now_ms, size_t limit,
                           std::vector<due_key>& out) {
  popped_.clear();
  auto n = heap_.pop_due(now_ms, limit, popped_);
  out.reserve(out.size() + n);
  for (const auto& entry : popped_)
    out.push_back(due_key{entry.due_ms, entry.id});
  return n;
}

size_t due_window::memory_bytes() const noexcept {
  return heap_.memory_bytes() + popped_.capacity() * sizeof(core::timer_entry);
}

int64_t due_window::refill_at_ms() const noexcept {
  if (heap_.size() >= opts_.max_in_memory)
    return max_ms;
  // Due once less than half a window lies loaded ahead of now. Right after
  // a complete refill at `now` this is now + ceil(window / 2), always later
  // than now, so a shard never spins on refills that have nothing to load.
  return saturating_add(saturating_add(cursor_.index_ms, 1),
                        -(opts_.window_ms / 2));
}

int64_t due_window::next_wakeup_ms() const noexcept {
  auto at = refill_at_ms();
  if (auto top = heap_.next_due())
    at = std::min(at, *top);
  return at;
}

bool due_window::needs_refill(int64_t now_ms) const noexcept {
  return refill_at_ms() <= now_ms;
}

} // namespace dally::storage
