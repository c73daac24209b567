#include "logic/staged_batch.hpp"

#include <algorithm>

namespace dally::logic {

namespace {

/// A record whose only purpose is to carry `key` into write_batch::replace,
/// which reads nothing of its `before` argument but the index entry.
core::task_record key_stub(const storage::due_key& key) {
  core::task_record rec;
  rec.task.id = key.id;
  rec.task.due_ms = key.index_ms;
  return rec;
}

} // namespace

void staged_batch::overlay::clear() {
  for (size_t i = 0; i < used_; ++i)
    reset_in_place(*pool_[i]);
  used_ = 0;
  clear_for_reuse(index_);
  // What a rare huge batch staged is not kept.
  if (pool_.size() > kept_entries)
    pool_.resize(kept_entries);
}

staged_entry& staged_batch::own(record_slot& s) {
  if (s.entry != nullptr)
    return *s.entry;
  auto& entry = overlay_[s.rec->task.id];
  entry.what = staged_entry::kind::live;
  entry.rec = std::move(*s.rec);
  entry.base = s.base;
  s.entry = &entry;
  s.rec = &entry.rec;
  return entry;
}

void staged_batch::replace(record_slot& s, const storage::due_key& before) {
  batch_.replace(key_stub(before), *s.rec);
  own(s).what = staged_entry::kind::live;
}

void staged_batch::erase(record_slot& s) {
  batch_.erase(*s.rec);
  auto& entry = own(s);
  entry.what = staged_entry::kind::erased;
  reset_in_place(entry.rec);
}

void staged_batch::bury(record_slot& s, int64_t now_ms, std::string reason) {
  batch_.bury(*s.rec, now_ms, reason);
  auto& entry = own(s);
  entry.what = staged_entry::kind::dead;
  entry.dead_ms = now_ms;
  entry.dead_reason = std::move(reason);
  has_dead_changes_ = true;
}

void staged_batch::put(core::task_record rec) {
  batch_.put(rec);
  auto& entry = overlay_[rec.task.id];
  entry.what = staged_entry::kind::live;
  entry.rec = std::move(rec);
  entry.base.reset();
}

void staged_batch::revive(core::task_record rec, staged_entry* entry) {
  auto id = rec.task.id;
  batch_.revive(id, rec);
  if (entry == nullptr) {
    entry = &overlay_[id];
    entry->base.reset();
    ++revived_from_store_;
  }
  entry->what = staged_entry::kind::live;
  entry->rec = std::move(rec);
  entry->dead_ms = 0;
  entry->dead_reason.clear();
  has_dead_changes_ = true;
}

void staged_batch::overlay_dead(std::vector<storage::dead_letter>& page,
                                core::task_id after) const {
  std::erase_if(page, [this](const storage::dead_letter& dead) {
    return overlay_.contains(dead.record.task.id);
  });
  overlay_.for_each([&](core::task_id id, const staged_entry& entry) {
    if (entry.what == staged_entry::kind::dead && id > after)
      page.push_back(
        storage::dead_letter{entry.rec, entry.dead_ms, entry.dead_reason});
  });
  std::sort(page.begin(), page.end(), [](const auto& x, const auto& y) {
    return x.record.task.id < y.record.task.id;
  });
}

void staged_batch::clear() {
  batch_.clear();
  overlay_.clear();
  consumed_.clear();
  revived_from_store_ = 0;
  has_dead_changes_ = false;
}

} // namespace dally::logic
