#include "sim/raft_history.hpp"

#include <algorithm>

namespace dally::sim {

raft_history::raft_history(uint32_t shard_count,
                           std::function<void(std::string)> log)
  : shard_count_(shard_count), log_(std::move(log)) {
  // nop
}

uint64_t raft_history::digest(const cluster::cluster_map& map) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  };
  mix(map.epoch);
  for (const auto& m : map.members)
    mix((uint64_t{m.id} << 8) | static_cast<uint64_t>(m.state));
  for (const auto& s : map.shards)
    mix(s.owner);
  return h;
}

void raft_history::fail(std::string invariant, std::string detail) {
  throw raft_failure{{std::move(invariant), std::move(detail)}};
}

void raft_history::start(cluster::node_id id, uint64_t applied,
                         uint64_t epoch) {
  nodes_[id] = node_state{applied, epoch};
}

bool raft_history::leader(cluster::node_id id, uint64_t term) {
  auto [i, fresh] = leader_of_term_.try_emplace(term, id);
  if (fresh) {
    log_("leader " + std::to_string(id) + " term " + std::to_string(term));
  } else if (i->second != id) {
    fail("election_safety", "nodes " + std::to_string(i->second) + " and " +
                              std::to_string(id) + " both lead term " +
                              std::to_string(term));
  }
  return fresh;
}

void raft_history::check_map(const cluster::cluster_map& map, uint64_t index) {
  auto where = " in the map of index " + std::to_string(index);
  if (shard_count_ > 0 && map.shard_count() != shard_count_ &&
      map.shard_count() != 0)
    fail("one_owner", std::to_string(map.shard_count()) + " shards" + where);
  for (uint32_t s = 0; s < map.shard_count(); ++s) {
    const auto& e = map.shards[s];
    if (!map.find(e.owner) || !e.replicas.empty() || !e.in_sync.empty())
      fail("one_owner", "shard " + std::to_string(s) + " owned by " +
                          std::to_string(e.owner) + ", not a member" + where);
  }
}

bool raft_history::applied(cluster::node_id id, uint64_t term,
                           const cluster::applied_entry& a) {
  auto& n = nodes_[id];
  auto index = a.entry.index;
  auto who = "node " + std::to_string(id) + " ";
  if (index != n.last_applied + 1)
    fail("state_machine_safety", who + "applied " + std::to_string(index) +
                                   " after " + std::to_string(n.last_applied));
  if (a.state.epoch < n.last_epoch)
    fail("epoch_order", who + "went from epoch " +
                          std::to_string(n.last_epoch) + " to " +
                          std::to_string(a.state.epoch));
  check_map(a.state, index);
  auto d = digest(a.state);
  auto [i, fresh] = committed_.try_emplace(
    index, committed_entry{a.entry, d, a.state.epoch, term});
  if (fresh) {
    log_("commit " + std::to_string(index) + " " +
         cluster::to_string(a.entry.cmd) + " epoch " +
         std::to_string(a.state.epoch));
    auto prev = committed_.find(index - 1);
    if (prev != committed_.end() && prev->second.epoch > a.state.epoch)
      fail("epoch_order", "epoch fell at index " + std::to_string(index));
    if (index > latest_index_) {
      latest_index_ = index;
      latest_ = a.state;
    }
  } else if (i->second.entry != a.entry || i->second.map_digest != d) {
    fail("state_machine_safety",
         who + "applied at index " + std::to_string(index) + " " +
           cluster::to_string(a.entry.cmd) + " of term " +
           std::to_string(a.entry.term) + ", another node " +
           cluster::to_string(i->second.entry.cmd) + " of term " +
           std::to_string(i->second.entry.term));
  } else {
    i->second.term_seen = std::min(i->second.term_seen, term);
  }
  n.last_applied = index;
  n.last_epoch = a.state.epoch;
  return fresh;
}

void raft_history::installed(cluster::node_id id,
                             const cluster::snapshot& snap) {
  auto& n = nodes_[id];
  auto who = "node " + std::to_string(id) + " ";
  if (snap.last_index <= n.last_applied)
    fail("state_machine_safety", who + "installed an older snapshot");
  if (snap.state.epoch < n.last_epoch)
    fail("epoch_order", who + "installed a snapshot of an older epoch");
  check_map(snap.state, snap.last_index);
  auto i = committed_.find(snap.last_index);
  if (i != committed_.end() && i->second.map_digest != digest(snap.state))
    fail("state_machine_safety", who + "installed a snapshot at " +
                                   std::to_string(snap.last_index) +
                                   " whose map differs from the committed one");
  log_("install " + std::to_string(id) + " at " +
       std::to_string(snap.last_index));
  n.last_applied = snap.last_index;
  n.last_epoch = snap.state.epoch;
}

} // namespace dally::sim
