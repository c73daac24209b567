#include "logic/record_cache.hpp"

namespace dally::logic {

void record_cache::remember(core::task_record&& rec) {
  auto it = cached_.find(rec.task.id);
  if (it == cached_.end()) {
    remember_new(std::move(rec));
    return;
  }
  // In place: the allocation stays, none is made.
  auto old_size = footprint(*it->second);
  auto size = footprint(rec);
  if (bytes_ - old_size + size > budget_bytes_) {
    bytes_ -= old_size;
    cached_.erase(it);
    return;
  }
  bytes_ += size - old_size;
  *it->second = std::move(rec);
}

void record_cache::remember_new(core::task_record&& rec) {
  auto id = rec.task.id;
  auto size = footprint(rec);
  if (bytes_ + size > budget_bytes_)
    return;
  bytes_ += size;
  cached_.emplace(id, std::make_unique<core::task_record>(std::move(rec)));
}

void record_cache::forget(core::task_id id) {
  if (auto it = cached_.find(id); it != cached_.end()) {
    bytes_ -= footprint(*it->second);
    cached_.erase(it);
  }
}

void record_cache::shrink() {
  constexpr size_t min_capacity = 1024;
  if (cached_.capacity() > min_capacity &&
      cached_.size() < cached_.capacity() / 8)
    cached_.rehash(0);
}

} // namespace dally::logic
