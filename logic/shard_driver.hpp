#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "logic/armed_timer.hpp"
#include "logic/release_queue.hpp"
#include "logic/shard_logic.hpp"
#include "logic/wall_clock.hpp"
#include "storage/store_options.hpp"

namespace dally::logic {

/// One consumer's verdict on a delivery, settled without an answer (a
/// batch consumer's acks and nacks).
struct verdict {
  delivery_ref ref;
  bool ack = true;
  /// Nack only: retry after this delay (unset: the task's backoff).
  std::optional<int64_t> retry_in_ms;
};

/// What the shard actor must do after a call of its driver, in this order
/// (each set field): print `log`; answer the held replies; quit with
/// `restart`; send itself a flush message; hand the deliveries to the
/// notifiers; arm the housekeeping; arm the wake-up. The driver fills it,
/// the actor carries it out and clears it.
struct shard_effects {
  /// The steady clock the actor's timers run on.
  using steady_time = std::chrono::steady_clock::time_point;

  /// A timer message the actor sends itself: its generation tells the
  /// armed one from those it replaced.
  struct timer {
    uint64_t generation = 0;
    /// 0 or less: at once.
    int64_t delay_us = 0;
  };

  /// A line for the log.
  std::string log;
  /// Answer every held reply, in the order held: with `held_error`, or with
  /// its own value when that is none.
  bool answer_held = false;
  core::error held_error;
  /// Quit with this error: the supervisor restarts the shard from its
  /// store, so that memory and disk agree again.
  core::error restart;
  /// Send the flush message (group commit: everything before it joins the
  /// batch).
  bool flush = false;
  /// Deliveries to hand on, by notifier; empty parts send nothing. The
  /// parts stay for reuse (the actor moves each one out).
  std::vector<std::vector<held_delivery>> deliveries;
  bool has_deliveries = false;
  /// The housekeeping message (maintain).
  std::optional<timer> maintain;
  /// The wake-up (fire), ahead of queued requests.
  std::optional<timer> wake;

  void clear() {
    log.clear();
    answer_held = false;
    held_error = {};
    restart = {};
    flush = false;
    has_deliveries = false;
    maintain.reset();
    wake.reset();
  }
};

/// The decisions of the shard actor, free of CAF: when a reply must wait for
/// the next commit, when to flush, when to wake up (exactly one wake-up
/// armed at a time), when to run the housekeeping, which notifier takes
/// each delivery, and when the shard must restart from its store. The
/// actor wires messages to it and to its `shard_logic`, keeps the response
/// promises of held replies (in the order this class counts them) and
/// carries out the `shard_effects`.
class shard_driver {
public:
  struct options {
    /// Notifiers the deliveries are spread over (by topic).
    size_t notifiers = 0;
    storage::durability durability = storage::durability::sync;
    int64_t sync_period_ms = 100;
  };

  /// Drives `logic`, reading due times on `wall` and the actor's timers on
  /// `steady_now`; all three outlive the driver.
  shard_driver(shard_logic& logic, const wall_clock& wall,
               std::function<shard_effects::steady_time()> steady_now,
               options opts);

  /// The first wake-up, at once: it loads the window.
  void start_waking(shard_effects& fx);

  /// The first housekeeping, at once: opening may have left the store
  /// unwritable (a failed quarantine).
  void start_maintaining(shard_effects& fx);

  // -- replies ----------------------------------------------------------------

  /// Whether a reply must wait for the next commit: writes are staged, or
  /// an earlier commit nobody waited for still waits for its fsync (what
  /// the reply reports could still be lost). If so it counts as held: the
  /// actor keeps its promise, answered at `answer_held`, and a flush is
  /// sent.
  bool hold_reply(shard_effects& fx);

  /// As hold_reply for a report of counters, which waits only for an
  /// unsynced commit: what it reports must survive a power loss.
  bool hold_report(shard_effects& fx);

  /// The answer to a consumer's ack, nack or touch that gave `err`;
  /// `awaited`: whether its sender waits for an answer. A verdict nobody
  /// waits for needs no fsync of its own (`sync` durability) and a refused
  /// one is dropped. Returns whether the reply is held (hold_reply).
  bool settle_reply(const core::error& err, bool awaited, shard_effects& fx);

  // -- after requests ---------------------------------------------------------

  /// Something may be staged: flush it (once per batch).
  void flush_soon(shard_effects& fx);

  /// A message nobody answers gave `err`: flush what it staged, unless it
  /// failed, and keep the wake-up in line.
  void settled(const core::error& err, shard_effects& fx);

  /// A batch consumer's verdicts, settled together: their records are
  /// looked up side by side (shard_logic::prefetch).
  void settle(std::span<const verdict> verdicts, shard_effects& fx);

  /// Keeps exactly one wake-up armed, at the logic's next work on the wall
  /// clock, waiting at most armed_timer::max_wait_us (see armed_timer); a
  /// step of the wall clock seen here or at a wake-up is logged.
  void arm(shard_effects& fx);

  /// After a write outside a commit failed (a quarantine while opening or
  /// reading, the idempotency keys' expiry, a periodic sync), restarts
  /// from the store, as a failed commit does: only a reopen makes it
  /// writable again. Else a shard with no commits would keep its store
  /// stuck, and a damaged record unquarantined (found by dally-sim, seed
  /// 12426585960701338637). Replies waiting for the staged batch get the
  /// error. Returns whether the shard restarts.
  bool restart_if_write_failed(shard_effects& fx);

  // -- timers -----------------------------------------------------------------

  /// The flush message: commits the batch, answers the held replies and
  /// hands on the deliveries.
  void flush(shard_effects& fx);

  /// A wake-up message of `generation`: fires what is due and commits it
  /// at once. Ignored unless it is the armed one.
  void wake(uint64_t generation, shard_effects& fx);

  /// A housekeeping message of `generation`. Ignored unless it is the
  /// armed one.
  void maintain(uint64_t generation, shard_effects& fx);

  /// The shard stops: what is staged is flushed, so that held replies get
  /// their answer.
  void stop(shard_effects& fx);

  /// Replies held.
  size_t held() const noexcept { return held_; }

  /// The wall clock (ms), read through the step watch: every reading a
  /// request acts on is checked for a step first, so that nothing (a
  /// lease above all) is worked out on a clock whose step the shard has
  /// not taken in. A step's log line goes out with the next effects.
  int64_t now_ms();

private:
  void answer_held(const core::error& err, shard_effects& fx);
  int64_t steady_us() const;
  int64_t read_wall_clock(shard_effects& fx);
  int64_t observe_wall_clock();
  void arm_maintain(shard_effects& fx);
  void split_deliveries(std::vector<held_delivery>& items, shard_effects& fx);

  shard_logic& logic_;
  const wall_clock& wall_;
  std::function<shard_effects::steady_time()> steady_now_;
  options opts_;
  size_t held_ = 0;
  bool flush_sent_ = false;
  /// The armed wake-up, at a wall-clock target.
  armed_timer wake_;
  /// Steps of the wall clock, seen at every reading.
  clock_step_watch steps_;
  /// What the last steps seen outside a call with effects have to say.
  std::string step_log_;
  /// The armed housekeeping: a sooner need re-arms it, and the message of
  /// the generation it replaced is ignored.
  bool maintain_armed_ = false;
  shard_effects::steady_time maintain_at_;
  uint64_t maintain_generation_ = 0;
  /// Scratch of `settle`: the ids of a batch of verdicts.
  std::vector<core::task_id> settle_ids_;
};

} // namespace dally::logic
