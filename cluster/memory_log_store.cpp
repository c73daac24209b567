#include <stdexcept>

#include "cluster/raft_log_store.hpp"

namespace dally::cluster {

memory_log_store::memory_log_store(cluster_map initial) {
  snap_.state = std::move(initial);
}

void memory_log_store::save_term_vote(uint64_t term,
                                      std::optional<node_id> vote) {
  term_ = term;
  vote_ = vote;
}

uint64_t memory_log_store::term_at(uint64_t index) const {
  if (index == snap_.last_index)
    return snap_.last_term;
  return entry(index).term;
}

const log_entry& memory_log_store::entry(uint64_t index) const {
  if (index <= snap_.last_index || index > last_index())
    throw std::out_of_range("raft log: no entry " + std::to_string(index));
  return entries_[index - snap_.last_index - 1];
}

void memory_log_store::replace_after(uint64_t index,
                                     std::span<const log_entry> entries) {
  if (index < snap_.last_index || index > last_index())
    throw std::out_of_range("raft log: cannot append after " +
                            std::to_string(index));
  entries_.resize(index - snap_.last_index);
  entries_.insert(entries_.end(), entries.begin(), entries.end());
}

bool memory_log_store::holds(uint64_t index, uint64_t term) const {
  return index <= last_index() && index >= snap_.last_index &&
         term_at(index) == term;
}

void memory_log_store::save_snapshot(const snapshot& snap) {
  if (holds(snap.last_index, snap.last_term))
    entries_.erase(entries_.begin(),
                   entries_.begin() + static_cast<ptrdiff_t>(snap.last_index -
                                                             snap_.last_index));
  else
    entries_.clear();
  snap_ = snap;
}

} // namespace dally::cluster
