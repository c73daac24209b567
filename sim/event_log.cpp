#include "sim/event_log.hpp"

#include <algorithm>
#include <cstdio>

namespace dally::sim {

namespace {

constexpr uint64_t fnv_offset = 0xcbf29ce484222325ULL;
constexpr uint64_t fnv_prime = 0x100000001b3ULL;

uint64_t fnv1a(uint64_t h, std::string_view bytes) noexcept {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= fnv_prime;
  }
  return h;
}

} // namespace

event_log::event_log(size_t keep)
  : keep_(std::max<size_t>(keep, 1)), hash_(fnv_offset) {
  // nop
}

void event_log::add(int64_t now_ms, std::string_view text) {
  auto line = std::to_string(now_ms);
  line += ' ';
  line += text;
  // The newline ends each line, so ("1 ab", "c") and ("1 a", "bc") differ.
  hash_ = fnv1a(hash_, line);
  hash_ = fnv1a(hash_, "\n");
  ++count_;
  last_.push_back(std::move(line));
  if (last_.size() > keep_)
    last_.pop_front();
}

std::string event_log::hash_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(hash_));
  return buf;
}

} // namespace dally::sim
