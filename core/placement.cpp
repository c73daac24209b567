#include "core/placement.hpp"

namespace dally::core {

uint64_t fnv1a(std::string_view bytes) noexcept {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint32_t shard_of_key(std::string_view key, uint32_t shard_count) noexcept {
  return shard_count == 0 ? 0 : static_cast<uint32_t>(fnv1a(key) % shard_count);
}

size_t notifier_of(std::string_view topic, size_t notifiers) noexcept {
  return notifiers == 0 ? 0 : static_cast<size_t>(fnv1a(topic) % notifiers);
}

shard_map shard_map::single_node(uint32_t shard_count, node_id owner) {
  shard_map out;
  out.shards.assign(shard_count, placement{owner});
  return out;
}

} // namespace dally::core
