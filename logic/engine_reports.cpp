#include "logic/engine_reports.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace dally::logic {

stats_merge::stats_merge(uint32_t shards, uint64_t restarts) {
  reply_.set_shards(shards);
  reply_.set_shard_restarts(restarts);
}

v1::TopicStats& stats_merge::topic(const std::string& name) {
  auto& t = topics_[name];
  t.set_topic(name);
  return t;
}

void stats_merge::add(const shard_report& m) {
  auto& r = reply_;
  const auto& c = m.counters;
  r.set_in_window(r.in_window() + m.window + m.backlog);
  r.set_scheduled(r.scheduled() + c.scheduled);
  r.set_fired(r.fired() + c.fired);
  r.set_acked(r.acked() + c.acked);
  r.set_nacked(r.nacked() + c.nacked);
  r.set_redelivered(r.redelivered() + c.redelivered);
  r.set_dead_lettered(r.dead_lettered() + c.dead_lettered);
  r.set_revoked(r.revoked() + c.revoked);
  r.set_commits(r.commits() + c.commits);
  r.set_memtable_bytes(r.memtable_bytes() + m.memtable_bytes);
  r.set_quarantined(r.quarantined() + m.quarantined);
  for (const auto& [name, n] : m.waiting) {
    r.set_waiting(r.waiting() + n);
    auto& t = topic(name);
    t.set_waiting(t.waiting() + n);
  }
}

void stats_merge::add(const notifier_report& m) {
  reply_.set_in_flight(reply_.in_flight() + m.in_flight);
  for (const auto& [name, c] : m.topics) {
    auto& t = topic(name);
    t.set_in_flight(t.in_flight() + c.in_flight);
    t.set_queued(t.queued() + c.queued);
    t.set_delivered(t.delivered() + c.delivered);
  }
}

void stats_merge::add(const std::map<std::string, uint32_t>& consumers) {
  for (const auto& [name, n] : consumers)
    topic(name).set_consumers(n);
}

void stats_merge::add(const schedule_admission::numbers& n) {
  reply_.set_pending_schedules(n.pending);
  reply_.set_peak_pending_per_shard(n.peak_per_shard);
  reply_.set_overloaded(n.refused);
}

void stats_merge::add(const front_door_report& r) {
  reply_.set_front_door_backlog(r.backlog);
  reply_.set_front_door_peak_backlog(r.peak_backlog);
  reply_.set_front_door_closings(r.closings);
  reply_.set_front_door_stalls(r.stalls);
}

v1::StatsReply stats_merge::take() {
  for (auto& [name, t] : topics_)
    *reply_.add_topics() = t;
  return std::move(reply_);
}

void dead_letter_merge::add(v1::DeadLettersReply& page) {
  for (auto& d : *page.mutable_dead())
    dead_.push_back(std::move(d));
  if (page.next_after_id() != 0)
    more_ = true;
}

v1::DeadLettersReply dead_letter_merge::take(size_t limit) {
  std::sort(dead_.begin(), dead_.end(), [](const auto& x, const auto& y) {
    return x.task().id() < y.task().id();
  });
  v1::DeadLettersReply out;
  for (size_t i = 0; i < dead_.size() && i < limit; ++i)
    *out.add_dead() = std::move(dead_[i]);
  if ((more_ || dead_.size() > limit) && out.dead_size() > 0)
    out.set_next_after_id(out.dead(out.dead_size() - 1).task().id());
  return out;
}

core::result<v1::ClusterMapReply>
cluster_map_report(const shard_ownership& own) {
  const auto& map = own.map();
  if (!map)
    return core::error{core::errc::unavailable,
                       "node " + std::to_string(own.self()) +
                         " has no shard map yet; ask another node"};
  v1::ClusterMapReply out;
  out.set_node_id(own.self());
  out.set_epoch(map->epoch);
  out.set_shard_count(map->shard_count());
  for (const auto& p : map->shards)
    out.add_owners(p.owner);
  return out;
}

} // namespace dally::logic
