#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/task.hpp"
#include "core/task_record.hpp"

namespace dally::core {

/// What a step of a task's life cycle does with its record.
struct transition {
  enum class kind : uint8_t {
    /// The record stays live, as the step changed it.
    keep,
    /// The task is done: its record goes.
    remove,
    /// The task used up its attempts: its record becomes a dead letter.
    bury,
  };

  kind what = kind::keep;
  /// bury: why, as the dead letter says it.
  std::string reason;

  static transition kept() { return transition{}; }
  static transition removed() { return transition{kind::remove, {}}; }
  static transition buried(std::string why) {
    return transition{kind::bury, std::move(why)};
  }
};

/// The life cycle of one task: what each event (a fire, a consumer's ack,
/// nack or touch, a lease running out, ...) does to its record. The shard
/// keeps the books around it (what is staged, fired, leased, cached) and
/// asks this class what a transition does, so that the rules of the
/// delivery contract live in one place (see docs/engine.md).
///
/// The transitions are virtual for one reason: the simulator's self-test
/// plants bugs in them (sim/planted.hpp) to check that it catches each.
/// Production uses this class as it is, through `standard()`. The
/// transitions are const and this class has no state, so one instance
/// serves every shard at once.
class task_lifecycle {
public:
  task_lifecycle() = default;
  task_lifecycle(const task_lifecycle&) = delete;
  task_lifecycle& operator=(const task_lifecycle&) = delete;
  virtual ~task_lifecycle();

  /// The life cycle of the delivery contract.
  static const task_lifecycle& standard() noexcept;

  /// When a new task `t` is first due, scheduled at `now_ms`: its
  /// recurrence's first occurrence; nullopt when it has none.
  virtual std::optional<int64_t> first_due(const task& t, int64_t now_ms) const;

  /// Fires a pending task: in flight as the next attempt, its lease
  /// running from its index time (a task fired ahead of its time is
  /// delivered then) or from now, whichever is later.
  virtual void fire(task_record& rec, int64_t now_ms) const;

  /// The delivery was acked: a periodic task moves to its next occurrence
  /// (pending, attempts reset); a task with no occurrence left is done.
  virtual transition ack(task_record& rec, int64_t now_ms) const;

  /// The delivery was nacked: pending again, retried `retry_in_ms` from
  /// now (unset: the policy's backoff); a dead letter if it was the last
  /// attempt.
  virtual transition nack(task_record& rec, int64_t now_ms,
                          std::optional<int64_t> retry_in_ms) const;

  /// The consumer asks for more time: the lease runs until now +
  /// `extend_ms` (0: the policy's lease).
  virtual void touch(task_record& rec, int64_t now_ms, int64_t extend_ms) const;

  /// The lease ran out unanswered: pending again after the policy's
  /// backoff (the attempt counts); a dead letter if it was the last.
  virtual transition expire_lease(task_record& rec, int64_t now_ms) const;

  /// The consumer holding the delivery died: due again at once (the
  /// attempt counts); a dead letter if it was the last.
  virtual transition requeue(task_record& rec, int64_t now_ms) const;

  /// No consumer took the delivery: pending again with the attempt not
  /// counted.
  virtual void give_back(task_record& rec) const;

  /// The client revoked the task: it is done. The shard answers whether a
  /// delivery was still under way.
  virtual transition revoke(task_record& rec) const;

  /// The client moved the current occurrence to `due_ms`, clearing a
  /// waiting retry. An in-flight record here is one fired and not sent
  /// (the shard takes such a delivery back first): its fire is undone.
  virtual void reschedule(task_record& rec, int64_t due_ms) const;

  /// A dead letter is kicked back: pending at `due_ms` (unset: now) with
  /// its attempts reset.
  virtual void kick(task_record& rec, int64_t now_ms,
                    std::optional<int64_t> due_ms) const;
};

/// "attempt N of M", as dead letters and errors name an attempt.
std::string attempt_text(const task_record& rec);

} // namespace dally::core
