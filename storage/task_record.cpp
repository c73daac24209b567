#include "storage/task_record.hpp"

namespace dally::storage {

uint64_t content_digest(const core::task& t) noexcept {
  // FNV-1a over the topic, a separator that cannot occur in a topic (topics
  // reject control characters), and the payload.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ull;
  };
  for (auto c : t.topic)
    mix(static_cast<unsigned char>(c));
  mix(0);
  for (auto c : t.payload)
    mix(static_cast<unsigned char>(c));
  return h;
}

} // namespace dally::storage
