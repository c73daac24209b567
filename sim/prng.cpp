#include "sim/prng.hpp"

namespace dally::sim {

namespace {

uint64_t splitmix64(uint64_t& x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  auto z = x;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t rotl(uint64_t x, int k) noexcept {
  return (x << k) | (x >> (64 - k));
}

} // namespace

prng::prng(uint64_t seed) noexcept : seed_(seed) {
  auto x = seed;
  for (auto& word : state_)
    word = splitmix64(x);
}

uint64_t prng::next() noexcept {
  auto& s = state_;
  auto out = rotl(s[1] * 5, 7) * 9;
  auto t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

uint64_t prng::below(uint64_t n) noexcept {
  if (n == 0)
    return 0;
  // The high word of x * n is uniform in [0, n) once the low words that
  // would favour some results (fewer than 2^64 mod n of them) are rejected.
  auto m = static_cast<unsigned __int128>(next()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    auto threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

int64_t prng::between(int64_t lo, int64_t hi) noexcept {
  if (hi < lo)
    return lo;
  auto span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  auto offset = span == UINT64_MAX ? next() : below(span + 1);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + offset);
}

bool prng::chance(uint64_t num, uint64_t den) noexcept {
  return den != 0 && below(den) < num;
}

prng prng::fork() noexcept {
  return prng{next()};
}

} // namespace dally::sim
