#pragma once

#include <caf/actor_control_block.hpp>
#include <caf/message.hpp>
#include <caf/message_priority.hpp>

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

namespace dally::actors {

/// Timed messages that CAF's workers deliver themselves (see
/// `prompt_stealing`), instead of CAF's timer thread: a message that comes
/// due while a worker rests wakes that worker, which then runs the
/// receiver at once, rather than the timer thread waking first and then
/// waking a worker. Thread-safe.
class worker_timers {
public:
  static constexpr int64_t never_ns = std::numeric_limits<int64_t>::max();

  struct entry {
    /// On the steady clock, in ns since its epoch.
    int64_t due_ns = 0;
    /// Order of arming, so that entries due together go out in that order.
    uint64_t seq = 0;
    caf::strong_actor_ptr receiver;
    caf::message content;
    caf::message_priority priority = caf::message_priority::normal;
  };

  /// Adds a message for `receiver` at `due_ns`; true if it is now the
  /// earliest, which a resting worker may need to hear of.
  bool push(int64_t due_ns, caf::strong_actor_ptr receiver,
            caf::message content, caf::message_priority priority);

  /// The earliest due time; `never_ns` when empty. Lock-free, so a worker
  /// can check it between jobs.
  int64_t earliest_ns() const noexcept {
    return earliest_ns_.load(std::memory_order_seq_cst);
  }

  /// Moves the entries due at `now_ns` to `out`, in due order.
  void take_due(int64_t now_ns, std::vector<entry>& out);

  /// Drops every entry (the actor system is shutting down).
  void clear();

  size_t size() const;

  /// Now on the steady clock, in ns.
  static int64_t now_ns() noexcept;

private:
  void publish_earliest();

  mutable std::mutex mtx_;
  /// A binary min-heap by (due_ns, seq).
  std::vector<entry> heap_;
  uint64_t next_seq_ = 0;
  std::atomic<int64_t> earliest_ns_{never_ns};
};

} // namespace dally::actors
