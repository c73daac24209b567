#pragma once

// Shard maps and keys for the suites that run engines of a cluster: in one
// actor system (engine_cluster) or each published in its own
// (net/cluster_client).

#include <cstdint>
#include <string>
#include <vector>

#include "core/placement.hpp"

namespace dally::test {

/// Shard i on owners[i], at `epoch`.
inline core::shard_map map_of(uint64_t epoch,
                              const std::vector<core::node_id>& owners) {
  core::shard_map out;
  out.epoch = epoch;
  for (auto o : owners)
    out.shards.push_back({o});
  return out;
}

/// The first idempotency key (<prefix>0, <prefix>1, ...) whose shard of
/// `shard_count` is `shard`.
inline std::string key_on(uint32_t shard, uint32_t shard_count,
                          const std::string& prefix = "k") {
  for (int i = 0;; ++i) {
    auto key = prefix + std::to_string(i);
    if (core::shard_of_key(key, shard_count) == shard)
      return key;
  }
}

} // namespace dally::test
