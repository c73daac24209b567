#include "net/cluster_routing.hpp"

#include <iterator>
#include <string>
#include <utility>

namespace dally::net {

bool cluster_routes::learn(core::shard_map map) {
  if (map_ && map.epoch <= map_->epoch)
    return false;
  map_ = std::move(map);
  return true;
}

void cluster_routes::set_live(core::node_id node, bool live) {
  if (live)
    live_.insert(node);
  else
    live_.erase(node);
}

std::optional<core::node_id> cluster_routes::any() {
  if (live_.empty())
    return std::nullopt;
  auto i = live_.begin();
  std::advance(i, static_cast<long>(next_++ % live_.size()));
  return *i;
}

std::optional<core::node_id> cluster_routes::owner_or_any(uint32_t shard) {
  if (map_ && shard < map_->shard_count()) {
    auto owner = map_->owner_of(shard);
    if (live(owner))
      return owner;
  }
  return any();
}

std::optional<core::node_id> cluster_routes::for_task(uint64_t id) {
  if (!map_ || map_->shard_count() == 0)
    return any();
  return owner_or_any(map_->shard_of(id));
}

std::optional<core::node_id>
cluster_routes::for_schedule(const v1::ScheduleRequest& req) {
  if (!req.has_idempotency_key() || !map_ || map_->shard_count() == 0)
    return any();
  return owner_or_any(map_->shard_of_key(req.idempotency_key()));
}

std::optional<core::node_id>
cluster_routes::for_batch(const v1::ScheduleBatchRequest& req) {
  if (!map_ || map_->shard_count() == 0 || req.tasks_size() == 0 ||
      !is_idempotent(req))
    return any();
  std::optional<core::node_id> owner;
  for (const auto& t : req.tasks()) {
    auto o = map_->owner_of(map_->shard_of_key(t.idempotency_key()));
    if (owner && *owner != o)
      return any();
    owner = o;
  }
  return live(*owner) ? owner : any();
}

failure_kind classify(const core::error& err) {
  if (err.code() == core::errc::stale_epoch)
    return failure_kind::refused;
  if (err.code() != core::errc::unavailable)
    return failure_kind::final;
  // The phrases of a node's routing refusals (logic::shard_ownership and
  // the engine): nothing was done.
  for (const char* phrase :
       {"shard map epoch", "has no shard map yet", "retry the request"})
    if (err.message().find(phrase) != std::string::npos)
      return failure_kind::refused;
  return failure_kind::maybe_done;
}

bool is_idempotent(const v1::ScheduleRequest& req) {
  return req.has_idempotency_key();
}

bool is_idempotent(const v1::ScheduleBatchRequest& req) {
  for (const auto& t : req.tasks())
    if (!t.has_idempotency_key())
      return false;
  return true;
}

core::result<core::shard_map> map_of(const v1::ClusterMapReply& reply) {
  if (reply.shard_count() == 0 ||
      static_cast<uint32_t>(reply.owners_size()) != reply.shard_count())
    return core::error{core::errc::invalid_request,
                       "node " + std::to_string(reply.node_id()) +
                         " reported a shard map of " +
                         std::to_string(reply.owners_size()) + " owners for " +
                         std::to_string(reply.shard_count()) + " shards"};
  core::shard_map out;
  out.epoch = reply.epoch();
  for (auto owner : reply.owners())
    out.shards.push_back({owner});
  return out;
}

} // namespace dally::net
