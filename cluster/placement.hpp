#pragma once

#include <cstdint>
#include <vector>

#include "core/placement.hpp"

namespace dally::cluster {

using core::node_id;

/// The rendezvous (highest random weight) score of `node` for `shard`: the
/// same on every node and platform.
uint64_t rendezvous_score(uint32_t shard, node_id node) noexcept;

/// The owner of each of `shard_count` shards among `nodes` (order and
/// duplicates do not matter); empty when `nodes` is empty. Every node gets
/// at most ceil(shard_count / nodes) shards: the (shard, node) pairs are
/// taken by falling score and a pair is used while its shard is unplaced
/// and its node has room. A shard's place depends only on the scores, so
/// when a node joins or leaves only about 1/N of the shards move.
std::vector<node_id> place_shards(uint32_t shard_count,
                                  std::vector<node_id> nodes);

} // namespace dally::cluster
