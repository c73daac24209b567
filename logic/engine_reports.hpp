#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "logic/notifier_logic.hpp"
#include "logic/schedule_admission.hpp"
#include "logic/shard_logic.hpp"
#include "logic/shard_ownership.hpp"
#include "proto/dally_api.pb.h"

namespace dally::logic {

/// A shard's numbers, for stats.
struct shard_report {
  shard_counters counters;
  uint64_t window = 0;
  uint64_t backlog = 0;
  std::map<std::string, uint64_t> waiting;
  uint64_t memtable_bytes = 0;
  uint64_t quarantined = 0;
};

/// A notifier's numbers, for stats.
/// What the node's front door did (net::front_door): requests read for the
/// engine and not yet taken, and how often it held producers back.
struct front_door_report {
  uint64_t backlog = 0;
  uint64_t peak_backlog = 0;
  uint64_t closings = 0;
  uint64_t stalls = 0;
};

struct notifier_report {
  std::map<std::string, topic_counters> topics;
  uint64_t in_flight = 0;
};

/// The engine's stats: the numbers of every shard, notifier and the
/// consumer registry, added up, and per topic.
class stats_merge {
public:
  /// Stats of `shards` shards that restarted `restarts` times.
  stats_merge(uint32_t shards, uint64_t restarts);

  void add(const shard_report& r);
  void add(const notifier_report& r);
  /// Consumers per topic.
  void add(const std::map<std::string, uint32_t>& consumers);
  /// The engine's admission of new tasks.
  void add(const schedule_admission::numbers& n);
  void add(const front_door_report& r);

  /// The stats, topics in name order.
  v1::StatsReply take();

private:
  v1::TopicStats& topic(const std::string& name);

  v1::StatsReply reply_;
  std::map<std::string, v1::TopicStats> topics_;
};

/// One page of dead letters from the pages of every shard: the lowest ids,
/// in id order, and where the next page starts.
class dead_letter_merge {
public:
  /// Adds a shard's page, moving its dead letters out.
  void add(v1::DeadLettersReply& page);

  /// At most `limit` dead letters; next_after_id set when more follow.
  v1::DeadLettersReply take(size_t limit);

private:
  std::vector<v1::DeadLetter> dead_;
  bool more_ = false;
};

/// The shard map a node acts on, for a client that routes requests to the
/// shards' owners: the single-node map (epoch 0) outside a cluster, or
/// `unavailable` while a cluster node has no map yet.
core::result<v1::ClusterMapReply>
cluster_map_report(const shard_ownership& own);

} // namespace dally::logic
