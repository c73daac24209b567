#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace dally::sim {

/// The simulator's one source of randomness: xoshiro256** seeded through
/// splitmix64. Integer-only, with our own bounded draws (no std::
/// distributions, whose results differ between standard libraries), so a
/// seed gives the same run on every platform and compiler.
class prng {
public:
  explicit prng(uint64_t seed) noexcept;

  /// The seed this generator started from.
  uint64_t seed() const noexcept { return seed_; }

  /// The next 64 random bits.
  uint64_t next() noexcept;

  /// Uniform in [0, n), unbiased (multiply and reject). 0 when n is 0.
  uint64_t below(uint64_t n) noexcept;

  /// Uniform in [lo, hi], both included; `lo` when hi < lo.
  int64_t between(int64_t lo, int64_t hi) noexcept;

  /// True with probability num / den (false when den is 0).
  bool chance(uint64_t num, uint64_t den) noexcept;

  /// An element index of a container of `size` elements.
  size_t pick(size_t size) noexcept { return static_cast<size_t>(below(size)); }

  /// A generator with a stream of its own, derived from (and advancing)
  /// this one: components draw from forks so that adding draws in one does
  /// not shift every other component's choices.
  prng fork() noexcept;

private:
  uint64_t seed_;
  std::array<uint64_t, 4> state_;
};

} // namespace dally::sim
