#include "logic/topic_parking.hpp"

#include <algorithm>
#include <iterator>

namespace dally::logic {

topic_parking::topic_state& topic_parking::topic(const std::string& name) {
  auto [it, added] = topics_.try_emplace(name);
  if (added)
    it->second.name = name;
  return it->second;
}

void topic_parking::set_state(topic_state& ts, bool available,
                              bool saturated) noexcept {
  bool was_open = ts.available && !ts.saturated;
  ts.available = available;
  ts.saturated = saturated;
  bool is_open = ts.available && !ts.saturated;
  if (is_open != was_open) {
    if (is_open)
      ++open_topics_;
    else
      --open_topics_;
  }
}

void topic_parking::count_in_flight(core::task_id id,
                                    const std::string& topic_name) {
  auto [it, added] = in_flight_topics_.try_emplace(id, nullptr);
  if (!added)
    return;
  auto& ts = topic(topic_name);
  it->second = &ts;
  if (ts.in_flight++ == 0)
    ++topics_in_flight_;
  auto cap = opts_.max_unanswered;
  if (cap > 0 && ts.in_flight >= cap)
    set_state(ts, ts.available, true);
}

void topic_parking::uncount_in_flight(core::task_id id,
                                      storage::due_window& window) {
  auto it = in_flight_topics_.find(id);
  if (it == in_flight_topics_.end())
    return;
  auto& ts = *it->second;
  in_flight_topics_.erase(it);
  if (--ts.in_flight == 0)
    --topics_in_flight_;
  if (ts.saturated && ts.in_flight <= opts_.max_unanswered / 2)
    set_state(ts, ts.available, false);
  if (!ts.saturated && ts.available)
    release_parked(ts, window);
}

void topic_parking::unpark(core::task_id id) {
  auto it = parked_index_.find(id);
  if (it == parked_index_.end())
    return;
  auto [ts, key] = it->second;
  ts->parked.erase(key);
  parked_index_.erase(it);
}

void topic_parking::park(const storage::due_key& key,
                         const std::string& topic_name) {
  unpark(key.id);
  auto& ts = topic(topic_name);
  ts.parked.insert(key);
  parked_index_.emplace(key.id, std::make_pair(&ts, key));
  // Beyond the bound, the topic's latest entries stay on disk only: the
  // earliest go back first, and the reload after the last of them finds
  // the rest in due order.
  while (parked_index_.size() > opts_.max_in_memory) {
    auto last = std::prev(ts.parked.end());
    parked_index_.erase(last->id);
    ts.parked.erase(last);
    ++ts.dropped;
  }
}

void topic_parking::set_available(const std::string& name, bool available,
                                  storage::due_window& window) {
  if (!available) {
    auto it = topics_.find(name);
    if (it == topics_.end())
      return; // Unknown topics are unavailable.
    auto& ts = it->second;
    set_state(ts, false, ts.saturated);
    if (ts.parked.empty() && ts.dropped == 0 && ts.in_flight == 0)
      topics_.erase(it);
    return;
  }
  auto& ts = topic(name);
  set_state(ts, true, ts.saturated);
  if (!ts.saturated)
    release_parked(ts, window);
}

/// Puts parked entries of an open topic back into the window, earliest
/// due first: as many as its cap on unanswered deliveries leaves room
/// for, once per fire pass. Releasing more would only park them again
/// after reading their records, each time half the cap is answered: a
/// shard behind on a busy topic did that for every parked task, fell
/// further behind and never caught up.
void topic_parking::release_parked(topic_state& ts,
                                   storage::due_window& window) {
  if (ts.parked.empty() && ts.dropped == 0)
    return;
  // Released since the last pass: what that put back has not fired yet,
  // and whatever it left parked waits for the end of the next pass
  // (below), where the room is counted again.
  if (ts.released_in_pass == fire_passes_)
    return;
  auto cap = opts_.max_unanswered;
  // No more than one pass pops: the rest would wait in the window
  // uncounted, and the next release would add more on top.
  auto room = std::min(ts.parked.size(), opts_.fire_batch);
  if (cap > 0)
    room =
      std::min<uint64_t>(room, cap > ts.in_flight ? cap - ts.in_flight : 0);
  if (room == 0 && !ts.parked.empty())
    return;
  ts.released_in_pass = fire_passes_;
  auto it = ts.parked.begin();
  for (; room > 0; --room, ++it) {
    const auto& key = *it;
    parked_index_.erase(key.id);
    // The window may hold a newer entry of the task (its record changed
    // while parked): never overwrite it with the parked one.
    if (!window.contains(key.id))
      window.on_put(key);
  }
  ts.parked.erase(ts.parked.begin(), it);
  if (ts.parked.empty() && ts.dropped > 0) {
    reload_pending_ = true;
    ts.dropped = 0;
  }
  // More waiting: the end of the next pass takes up the next lot, if the
  // topic has room then.
  if (!ts.parked.empty() && !ts.release_deferred) {
    ts.release_deferred = true;
    deferred_releases_.push_back(ts.name);
  }
}

void topic_parking::release_deferred(storage::due_window& window) {
  if (deferred_releases_.empty())
    return;
  auto names = std::move(deferred_releases_);
  deferred_releases_.clear();
  for (const auto& name : names)
    if (auto t = topics_.find(name); t != topics_.end()) {
      t->second.release_deferred = false;
      if (t->second.available && !t->second.saturated)
        release_parked(t->second, window);
    }
}

void topic_parking::reset() {
  parked_index_.clear();
  for (auto it = topics_.begin(); it != topics_.end();) {
    it->second.parked.clear();
    it->second.dropped = 0;
    if (it->second.available || it->second.in_flight > 0)
      ++it;
    else
      it = topics_.erase(it);
  }
  reload_pending_ = false;
}

std::map<std::string, uint64_t> topic_parking::waiting() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [name, ts] : topics_)
    if (auto n = ts.parked.size() + ts.dropped; n > 0)
      out.emplace(name, n);
  return out;
}

} // namespace dally::logic
