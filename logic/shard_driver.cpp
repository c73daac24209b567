#include "logic/shard_driver.hpp"

#include <algorithm>
#include <limits>
#include <sstream>
#include <utility>

#include "core/placement.hpp"

namespace dally::logic {

namespace {

constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

/// How soon after a commit a shard forgets expired keys and syncs a
/// periodic store. Armed only by commits, so an idle shard has no timer.
constexpr std::chrono::milliseconds maintain_interval{500};

} // namespace

shard_driver::shard_driver(
  shard_logic& logic, const wall_clock& wall,
  std::function<shard_effects::steady_time()> steady_now, options opts)
  : logic_(logic), wall_(wall), steady_now_(std::move(steady_now)),
    opts_(opts) {
  // nop
}

void shard_driver::start_waking(shard_effects& fx) {
  fx.wake = shard_effects::timer{wake_.now(), 0};
}

void shard_driver::start_maintaining(shard_effects& fx) {
  maintain_armed_ = true;
  maintain_at_ = steady_now_();
  fx.maintain = shard_effects::timer{++maintain_generation_, 0};
}

// -- replies ------------------------------------------------------------------

bool shard_driver::hold_reply(shard_effects& fx) {
  if (!logic_.dirty() && !logic_.sync_pending())
    return false;
  ++held_;
  flush_soon(fx);
  return true;
}

bool shard_driver::hold_report(shard_effects& fx) {
  return logic_.sync_pending() && hold_reply(fx);
}

bool shard_driver::settle_reply(const core::error& err, bool awaited,
                                shard_effects& fx) {
  if (!awaited) {
    if (!err)
      flush_soon(fx);
    return false;
  }
  if (!err)
    flush_soon(fx);
  return hold_reply(fx);
}

// -- after requests -----------------------------------------------------------

void shard_driver::flush_soon(shard_effects& fx) {
  if (!flush_sent_ && (logic_.dirty() || held_ > 0)) {
    flush_sent_ = true;
    fx.flush = true;
  }
}

void shard_driver::settled(const core::error& err, shard_effects& fx) {
  if (!err)
    flush_soon(fx);
  arm(fx);
}

void shard_driver::settle(std::span<const verdict> verdicts,
                          shard_effects& fx) {
  settle_ids_.clear();
  for (const auto& v : verdicts)
    settle_ids_.push_back(v.ref.id);
  logic_.prefetch(settle_ids_);
  auto now = now_ms();
  bool changed = false;
  for (const auto& v : verdicts) {
    auto err =
      v.ack ? logic_.ack(now, v.ref) : logic_.nack(now, v.ref, v.retry_in_ms);
    changed = changed || !err;
  }
  if (changed)
    flush_soon(fx);
  arm(fx);
}

void shard_driver::arm(shard_effects& fx) {
  auto now_us = read_wall_clock(fx);
  auto next = logic_.next_wakeup_ms();
  if (next == never_ms) {
    wake_.cancel();
    return;
  }
  // An armed wake-up that comes first re-arms on arrival.
  if (auto w = wake_.arm(next, now_us, steady_us()))
    fx.wake = shard_effects::timer{w->generation, w->delay_us};
}

bool shard_driver::restart_if_write_failed(shard_effects& fx) {
  auto err = logic_.write_failure();
  if (!err)
    return false;
  answer_held(err, fx);
  fx.restart = std::move(err);
  return true;
}

// -- timers -------------------------------------------------------------------

void shard_driver::flush(shard_effects& fx) {
  flush_sent_ = false;
  // With sync durability only a commit that someone waits for is fsync'd
  // at once (see shard_logic::commit).
  auto res = logic_.commit(now_ms(), held_ > 0);
  answer_held(res.err, fx);
  if (res.err) {
    // The failed write is in doubt: it may still be on disk, and RocksDB
    // must not append to a WAL whose write failed (its writer keeps the
    // error). Restart from the store (the supervisor reopens it), so that
    // memory and disk agree again. Found by dally-sim.
    fx.restart = std::move(res.err);
    return;
  }
  split_deliveries(res.deliveries, fx);
  arm_maintain(fx);
  arm(fx);
}

void shard_driver::wake(uint64_t generation, shard_effects& fx) {
  if (!wake_.claim(generation))
    return;
  if (auto err = logic_.fire(read_wall_clock(fx) / 1000)) {
    // A read failed, or the write that quarantines a damaged record did
    // (then RocksDB's WAL writer keeps the error, as after a failed
    // commit). Retrying here spun: the entries went back to the window,
    // due at once (found by dally-sim, seed 12051826974165715928). Restart
    // from the store instead, as a failed commit does.
    answer_held(err, fx);
    fx.restart = std::move(err);
    return;
  }
  // Fired tasks go out after their commit: commit now rather than behind
  // the requests queued in the mailbox.
  if (logic_.dirty()) {
    flush(fx);
    return;
  }
  arm(fx);
}

void shard_driver::maintain(uint64_t generation, shard_effects& fx) {
  if (generation != maintain_generation_)
    return; // Re-armed sooner since.
  maintain_armed_ = false;
  if (auto err = logic_.maintain(now_ms())) {
    std::ostringstream out;
    out << "maintenance failed: " << err;
    fx.log = out.str();
  }
  // Also right after start: opening quarantines damaged records, and a
  // failed write there leaves the store unwritable.
  if (restart_if_write_failed(fx))
    return;
  // A commit still waiting for its fsync (its period had not passed).
  if (logic_.sync_pending())
    arm_maintain(fx);
}

void shard_driver::stop(shard_effects& fx) {
  if (logic_.dirty() || held_ > 0)
    flush(fx);
}

// -- private ------------------------------------------------------------------

int64_t shard_driver::steady_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           steady_now_().time_since_epoch())
    .count();
}

int64_t shard_driver::now_ms() {
  return observe_wall_clock() / 1000;
}

/// Reads the wall clock (µs) and takes in a step: running leases keep
/// their length, and after a forward step what the clock now says is due
/// is paced as overdue work. The step is told loudly.
int64_t shard_driver::observe_wall_clock() {
  auto now_us = wall_.now_us();
  auto step_us = steps_.observe(now_us, steady_us());
  if (step_us == 0)
    return now_us;
  logic_.wall_clock_stepped(now_us / 1000, step_us / 1000);
  std::ostringstream out;
  out << "warning: the wall clock stepped "
      << (step_us > 0 ? "forward" : "back") << " by "
      << (step_us > 0 ? step_us : -step_us) / 1000
      << " ms against the steady clock; "
      << (step_us > 0 ? "what is due now fires, paced as overdue work"
                      : "nothing fires before the clock reads its due time")
      << "; running leases keep their length";
  if (!step_log_.empty())
    step_log_ += "\n";
  step_log_ += out.str();
  return now_us;
}

/// Reads the wall clock (µs) as `observe_wall_clock` does, and puts what
/// the steps seen since the last effects have to say in `fx`.
int64_t shard_driver::read_wall_clock(shard_effects& fx) {
  auto now_us = observe_wall_clock();
  if (!step_log_.empty()) {
    if (!fx.log.empty())
      fx.log += "\n";
    fx.log += step_log_;
    step_log_.clear();
  }
  return now_us;
}

void shard_driver::answer_held(const core::error& err, shard_effects& fx) {
  fx.answer_held = true;
  fx.held_error = err;
  held_ = 0;
}

/// Arms the housekeeping, or re-arms it sooner: a periodic store, or a
/// sync one with a commit nobody waited for, must sync within its period
/// after a write.
void shard_driver::arm_maintain(shard_effects& fx) {
  std::chrono::milliseconds delay = maintain_interval;
  if (opts_.durability == storage::durability::periodic ||
      logic_.sync_pending())
    delay = std::min(delay, std::chrono::milliseconds{
                              std::max<int64_t>(1, opts_.sync_period_ms)});
  // Armed for the housekeeping interval when the first commit nobody
  // waits for comes: its fsync must not wait that long.
  auto at = steady_now_() + delay;
  if (maintain_armed_ && maintain_at_ <= at)
    return;
  maintain_armed_ = true;
  maintain_at_ = at;
  fx.maintain = shard_effects::timer{++maintain_generation_,
                                     std::chrono::microseconds{delay}.count()};
}

/// Hands each delivery to the notifier of its topic. Counted first:
/// growing each part as it fills would move every delivery a few more
/// times.
void shard_driver::split_deliveries(std::vector<held_delivery>& items,
                                    shard_effects& fx) {
  auto n = opts_.notifiers;
  if (items.empty() || n == 0)
    return;
  fx.has_deliveries = true;
  fx.deliveries.resize(n);
  if (n == 1) {
    fx.deliveries[0] = std::move(items);
    return;
  }
  std::vector<size_t> index(items.size());
  std::vector<size_t> count(n);
  for (size_t k = 0; k < items.size(); ++k)
    ++count[index[k] = core::notifier_of(items[k].delivery->topic(), n)];
  for (size_t i = 0; i < n; ++i) {
    fx.deliveries[i].clear();
    fx.deliveries[i].reserve(count[i]);
  }
  for (size_t k = 0; k < items.size(); ++k)
    fx.deliveries[index[k]].emplace_back(std::move(items[k]));
}

} // namespace dally::logic
