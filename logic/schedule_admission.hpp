#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.hpp"

namespace dally::logic {

/// The engine's admission of new tasks: how many each shard was passed
/// and has not answered yet (in its mailbox, or staged and waiting for its
/// commit). A schedule beyond `max_pending_per_shard` is refused with
/// `overloaded` before it reaches the shard, so a producer that does not
/// wait for its replies meets a clear error instead of growing the
/// shards' mailboxes without bound. Only new tasks count: revokes, acks,
/// nacks and the like reduce work and are never refused.
class schedule_admission {
public:
  struct numbers {
    /// Tasks passed to the shards and not answered yet.
    uint64_t pending = 0;
    /// The most any one shard had pending.
    uint64_t peak_per_shard = 0;
    /// Requests (or parts of batches) refused.
    uint64_t refused = 0;
  };

  /// `max_pending_per_shard` 0: no bound.
  schedule_admission(uint32_t shard_count, size_t max_pending_per_shard);

  /// Whether `tasks` new tasks may go to `shard` now; if so they are
  /// pending until `answered`. A request larger than the bound goes to a
  /// shard with nothing pending, so that it is not refused for ever.
  bool admit(uint32_t shard, size_t tasks);

  /// The shard answered `tasks` of the tasks it was passed.
  void answered(uint32_t shard, size_t tasks);

  /// The shard stopped or started again: what it had pending is answered
  /// (by the actor system, with an error) or gone.
  void reset(uint32_t shard);

  /// The error a refused request gets.
  core::error refusal(uint32_t shard) const;

  [[nodiscard]] size_t pending(uint32_t shard) const;

  [[nodiscard]] numbers report() const;

private:
  size_t max_pending_;
  std::vector<size_t> pending_;
  uint64_t peak_ = 0;
  uint64_t refused_ = 0;
};

} // namespace dally::logic
