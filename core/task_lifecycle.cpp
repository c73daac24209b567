#include "core/task_lifecycle.hpp"

#include <algorithm>

#include "core/time_range.hpp"

namespace dally::core {

namespace {

/// Pending again, retried at `retry_at_ms`.
void retry_at(task_record& rec, int64_t retry_at_ms) {
  rec.state = task_state::pending;
  rec.lease_deadline_ms = 0;
  rec.lease_ms = 0;
  rec.retry_at_ms = retry_at_ms;
}

bool last_attempt(const task_record& rec) {
  return rec.task.attempt >= rec.task.policy.max_attempts;
}

} // namespace

task_lifecycle::~task_lifecycle() = default;

const task_lifecycle& task_lifecycle::standard() noexcept {
  static const task_lifecycle instance;
  return instance;
}

std::optional<int64_t> task_lifecycle::first_due(const task& t,
                                                 int64_t now_ms) const {
  return t.recurrence.first_fire(now_ms);
}

void task_lifecycle::fire(task_record& rec, int64_t now_ms) const {
  rec.state = task_state::in_flight;
  ++rec.task.attempt;
  rec.lease_ms = kept_lease_ms(rec.task.policy.lease_ms);
  rec.lease_deadline_ms =
    saturating_add(std::max(now_ms, rec.index_ms()), rec.task.policy.lease_ms);
}

transition task_lifecycle::ack(task_record& rec, int64_t now_ms) const {
  if (!rec.task.recurrence.is_periodic())
    return transition::removed();
  auto next = rec.task.recurrence.next_after_completion(rec.task.due_ms, now_ms,
                                                        rec.fired_count + 1);
  if (!next)
    return transition::removed();
  rec.state = task_state::pending;
  rec.task.due_ms = *next;
  rec.task.attempt = 0;
  rec.fired_count += 1;
  rec.retry_at_ms = 0;
  rec.lease_deadline_ms = 0;
  rec.lease_ms = 0;
  return transition::kept();
}

transition task_lifecycle::nack(task_record& rec, int64_t now_ms,
                                std::optional<int64_t> retry_in_ms) const {
  if (last_attempt(rec))
    return transition::buried("nacked on attempt " + attempt_text(rec));
  auto wait_ms =
    retry_in_ms ? *retry_in_ms : rec.task.policy.backoff_ms(rec.task.attempt);
  retry_at(rec, saturating_add(now_ms, wait_ms));
  return transition::kept();
}

void task_lifecycle::touch(task_record& rec, int64_t now_ms,
                           int64_t extend_ms) const {
  auto lease_ms = extend_ms == 0 ? rec.task.policy.lease_ms : extend_ms;
  rec.lease_ms = kept_lease_ms(lease_ms);
  rec.lease_deadline_ms = saturating_add(now_ms, lease_ms);
}

transition task_lifecycle::expire_lease(task_record& rec,
                                        int64_t now_ms) const {
  if (last_attempt(rec))
    return transition::buried("lease expired on attempt " + attempt_text(rec));
  retry_at(
    rec, saturating_add(now_ms, rec.task.policy.backoff_ms(rec.task.attempt)));
  return transition::kept();
}

transition task_lifecycle::requeue(task_record& rec, int64_t now_ms) const {
  if (last_attempt(rec))
    return transition::buried("consumer lost on attempt " + attempt_text(rec));
  retry_at(rec, now_ms);
  return transition::kept();
}

void task_lifecycle::give_back(task_record& rec) const {
  rec.state = task_state::pending;
  rec.lease_deadline_ms = 0;
  rec.lease_ms = 0;
  if (rec.task.attempt > 0)
    --rec.task.attempt;
}

transition task_lifecycle::revoke(task_record&) const {
  return transition::removed();
}

void task_lifecycle::reschedule(task_record& rec, int64_t due_ms) const {
  if (rec.state == task_state::in_flight) {
    rec.state = task_state::pending;
    rec.lease_deadline_ms = 0;
    rec.lease_ms = 0;
    --rec.task.attempt;
  }
  rec.task.due_ms = due_ms;
  rec.retry_at_ms = 0;
}

void task_lifecycle::kick(task_record& rec, int64_t now_ms,
                          std::optional<int64_t> due_ms) const {
  rec.state = task_state::pending;
  rec.task.attempt = 0;
  rec.task.due_ms = due_ms.value_or(now_ms);
  rec.retry_at_ms = 0;
  rec.lease_deadline_ms = 0;
  rec.lease_ms = 0;
}

std::string attempt_text(const task_record& rec) {
  return std::to_string(rec.task.attempt) + " of " +
         std::to_string(rec.task.policy.max_attempts);
}

} // namespace dally::core
