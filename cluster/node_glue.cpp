#include "cluster/node_glue.hpp"

#include <algorithm>
#include <variant>

namespace dally::cluster {

uint32_t stored_shard_count(const raft_log_store& store) {
  const auto& snap = store.last_snapshot();
  if (snap.state.shard_count() > 0)
    return snap.state.shard_count();
  for (auto i = snap.last_index + 1; i <= store.last_index(); ++i)
    if (const auto* c = std::get_if<create_map>(&store.entry(i).cmd);
        c != nullptr && c->shard_count > 0)
      return c->shard_count;
  return 0;
}

membership::membership(node_id self, std::vector<node_id> seeds)
  : self_(self), seeds_(std::move(seeds)), voter_(is_seed(self)) {}

bool membership::is_seed(node_id id) const noexcept {
  return std::find(seeds_.begin(), seeds_.end(), id) != seeds_.end();
}

membership::admission membership::admit(node_id from,
                                        const std::string& address) {
  if (from == 0 || from == self_)
    return {};
  if (is_seed(from))
    return {true, false};
  if (!voter_)
    return {};
  if (!address.empty() && address.size() <= max_address_chars)
    addresses_[from] = address;
  if (std::find(learners_.begin(), learners_.end(), from) != learners_.end())
    return {true, false};
  learners_.push_back(from);
  return {true, true};
}

std::string membership::address_of(node_id id) const {
  auto i = addresses_.find(id);
  return i == addresses_.end() ? std::string{} : i->second;
}

bool membership::dials(node_id peer) const noexcept {
  return is_seed(peer) && peer != self_ && (!voter_ || peer > self_);
}

std::vector<add_node> membership::joins_due(bool leading, uint64_t term,
                                            const cluster_map& map) {
  std::vector<add_node> out;
  if (!leading || map.shards.empty())
    return out;
  for (auto id : learners_) {
    auto address = address_of(id);
    const auto* known = map.find(id);
    if (known != nullptr && (known->state != member::status::active ||
                             address.empty() || known->address == address))
      continue;
    auto join = std::make_pair(term, address);
    if (auto i = proposed_.find(id); i != proposed_.end() && i->second == join)
      continue;
    proposed_[id] = std::move(join);
    out.emplace_back(id, std::move(address));
  }
  return out;
}

std::optional<core::shard_map> map_feed::offer(core::shard_map map) {
  if (newest_ && map.epoch <= *newest_)
    return std::nullopt;
  newest_ = map.epoch;
  if (busy_) {
    waiting_ = std::move(map);
    return std::nullopt;
  }
  busy_ = true;
  return map;
}

std::optional<core::shard_map> map_feed::answered() {
  busy_ = false;
  if (!waiting_)
    return std::nullopt;
  busy_ = true;
  auto next = std::move(*waiting_);
  waiting_.reset();
  return next;
}

} // namespace dally::cluster
