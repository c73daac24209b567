#include "logic/shard_ownership.hpp"

#include <set>
#include <utility>

namespace dally::logic {

std::vector<uint32_t> shards_owned(const core::shard_map& map,
                                   core::node_id self) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < map.shard_count(); ++i)
    if (map.shards[i].owner == self)
      out.push_back(i);
  return out;
}

map_change change_between(const std::optional<core::shard_map>& old,
                          const core::shard_map& next, core::node_id self) {
  map_change out;
  auto had = [&](uint32_t shard) {
    return old && shard < old->shard_count() && old->owner_of(shard) == self;
  };
  for (uint32_t i = 0; i < next.shard_count(); ++i) {
    bool has = next.owner_of(i) == self;
    if (has && !had(i))
      out.open.push_back(i);
  }
  if (old)
    for (uint32_t i = 0; i < old->shard_count(); ++i)
      if (had(i) && (i >= next.shard_count() || next.owner_of(i) != self))
        out.close.push_back(i);
  return out;
}

shard_ownership::shard_ownership(core::node_id self, uint32_t shard_count,
                                 bool own_all)
  : self_(self), shard_count_(shard_count) {
  if (own_all)
    map_ = core::shard_map::single_node(shard_count, self);
}

core::result<map_change> shard_ownership::install(core::shard_map next) {
  if (next.shard_count() != shard_count_)
    return core::error{core::errc::invalid_request,
                       "a shard map of " + std::to_string(next.shard_count()) +
                         " shards for a node of " +
                         std::to_string(shard_count_)};
  if (map_ && next.epoch < map_->epoch)
    return core::error{core::errc::stale_epoch,
                       "shard map epoch " + std::to_string(next.epoch) +
                         " is older than the installed epoch " +
                         std::to_string(map_->epoch)};
  if (map_ && next.epoch == map_->epoch && next != *map_)
    return core::error{core::errc::stale_epoch,
                       "another shard map at the installed epoch " +
                         std::to_string(map_->epoch)};
  auto change = change_between(map_, next, self_);
  map_ = std::move(next);
  return change;
}

bool shard_ownership::owns(uint32_t shard) const noexcept {
  return map_ && shard < map_->shard_count() &&
         map_->shards[shard].owner == self_;
}

std::vector<uint32_t> shard_ownership::owned() const {
  return map_ ? shards_owned(*map_, self_) : std::vector<uint32_t>{};
}

std::vector<core::node_id> shard_ownership::other_owners() const {
  std::set<core::node_id> out;
  if (map_)
    for (auto& p : map_->shards)
      if (p.owner != self_)
        out.insert(p.owner);
  return {out.begin(), out.end()};
}

route_decision shard_ownership::unavailable(uint32_t shard,
                                            bool forwarded) const {
  route_decision out;
  out.shard = shard;
  auto name = "shard " + std::to_string(shard);
  auto here = "node " + std::to_string(self_);
  if (!map_) {
    out.reason = name + ": " + here + " has no shard map yet";
    return out;
  }
  auto epoch = " at shard map epoch " + std::to_string(map_->epoch);
  if (shard >= shard_count_) {
    out.reason = name + " does not exist (" + std::to_string(shard_count_) +
                 " shards)" + epoch;
    return out;
  }
  out.owner = map_->owner_of(shard);
  auto owner = "node " + std::to_string(out.owner);
  if (forwarded)
    out.reason = name + " is owned by " + owner + ", not by " + here + epoch +
                 " (a forwarded request is not forwarded again)";
  else
    out.reason = name + " is owned by " + owner + epoch + ", which " + here +
                 " cannot reach";
  return out;
}

} // namespace dally::logic
