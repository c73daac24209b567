#pragma once

#include <atomic>
#include <cstdint>

namespace dally::logic {

/// Decides, once, between a fired delivery going out and its shard taking
/// it back. A shard fires tasks ahead of their due time and hands each
/// delivery with a hold to its notifier, which releases it when due; a
/// revoke or reschedule in between cancels the hold instead. Both sides run
/// on different threads and only one of them can win, so the shard knows
/// for certain whether the delivery went out (outcome in_flight) or never
/// will (outcome done), without asking the notifier.
class delivery_hold {
public:
  /// Notifier: the delivery may go out now. False if the shard cancelled
  /// it first.
  bool claim() noexcept { return settle(state::released); }

  /// Shard: the delivery must never go out. False if it already went out.
  bool cancel() noexcept { return settle(state::cancelled); }

  /// Neither released nor cancelled yet.
  bool pending() const noexcept {
    return state_.load(std::memory_order_acquire) == state::held;
  }

private:
  enum state : uint8_t { held, released, cancelled };

  bool settle(state to) noexcept {
    uint8_t expected = state::held;
    return state_.compare_exchange_strong(expected, to,
                                          std::memory_order_acq_rel);
  }

  std::atomic<uint8_t> state_{state::held};
};

} // namespace dally::logic
