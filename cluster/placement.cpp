#include "cluster/placement.hpp"

#include <algorithm>
#include <tuple>

namespace dally::cluster {

namespace {

/// splitmix64's finaliser: mixes every input bit into every output bit.
uint64_t mix(uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

} // namespace

uint64_t rendezvous_score(uint32_t shard, node_id node) noexcept {
  return mix(mix(uint64_t{shard} + 0x9e3779b97f4a7c15ULL) ^ uint64_t{node});
}

std::vector<node_id> place_shards(uint32_t shard_count,
                                  std::vector<node_id> nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (nodes.empty())
    return {};
  struct pair {
    uint64_t score;
    uint32_t shard;
    size_t node;
  };
  std::vector<pair> pairs;
  pairs.reserve(size_t{shard_count} * nodes.size());
  for (uint32_t s = 0; s < shard_count; ++s)
    for (size_t n = 0; n < nodes.size(); ++n)
      pairs.push_back({rendezvous_score(s, nodes[n]), s, n});
  std::sort(pairs.begin(), pairs.end(), [](const pair& a, const pair& b) {
    return std::tie(b.score, a.shard, a.node) <
           std::tie(a.score, b.shard, b.node);
  });
  auto room = (size_t{shard_count} + nodes.size() - 1) / nodes.size();
  std::vector<size_t> load(nodes.size(), 0);
  std::vector<bool> placed(shard_count, false);
  std::vector<node_id> owners(shard_count, 0);
  for (const auto& p : pairs) {
    if (placed[p.shard] || load[p.node] == room)
      continue;
    placed[p.shard] = true;
    ++load[p.node];
    owners[p.shard] = nodes[p.node];
  }
  return owners;
}

} // namespace dally::cluster
