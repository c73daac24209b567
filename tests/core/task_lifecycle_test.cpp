#define BOOST_TEST_MODULE task_lifecycle
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "core/recurrence.hpp"
#include "core/task_lifecycle.hpp"
#include "core/time_range.hpp"
#include "time_test_util.hpp"

using namespace dally::core;
using dally::core::test::utc_ms;

namespace {

const int64_t now = utc_ms("2024-01-01T00:00:00Z");
constexpr int64_t lease_ms = 10'000;

const task_lifecycle& life = task_lifecycle::standard();

/// A pending one-shot task due at `now`, with a 1 s backoff doubling up to
/// 4 s and `attempts` attempts.
task_record one_shot(uint32_t attempts = 3) {
  task_record rec;
  rec.task.id = 7;
  rec.task.topic = "t";
  rec.task.recurrence = recurrence::at(now).value();
  rec.task.due_ms = now;
  rec.task.policy.lease_ms = lease_ms;
  rec.task.policy.max_attempts = attempts;
  rec.task.policy.backoff_initial_ms = 1'000;
  rec.task.policy.backoff_multiplier_permille = 2'000;
  rec.task.policy.backoff_max_ms = 4'000;
  return rec;
}

/// A pending task every minute from `now`, at most `count` times.
task_record every_minute(uint64_t count) {
  auto rec = one_shot();
  recurrence_bounds bounds;
  bounds.max_count = count;
  rec.task.recurrence =
    recurrence::fixed_rate(now, 60'000, bounds, task_limits{}).value();
  rec.task.due_ms = *rec.task.recurrence.first_fire(now);
  return rec;
}

/// `rec` fired at `at_ms`.
task_record fired(task_record rec, int64_t at_ms = now) {
  life.fire(rec, at_ms);
  return rec;
}

bool is(const transition& t, transition::kind k) {
  return t.what == k;
}

} // namespace

BOOST_AUTO_TEST_CASE(first_due_is_the_recurrences_first_occurrence) {
  task t;
  t.recurrence = recurrence::at(now + 5'000).value();
  BOOST_TEST((life.first_due(t, now) == std::optional<int64_t>{now + 5'000}));
  recurrence_bounds ended;
  ended.start_ms = now - 120'000;
  ended.end_ms = now - 60'000;
  t.recurrence =
    recurrence::fixed_rate(now - 120'000, 10'000, ended, task_limits{}).value();
  BOOST_TEST(!life.first_due(t, now).has_value());
}

BOOST_AUTO_TEST_CASE(fire_counts_an_attempt_and_starts_the_lease) {
  auto rec = fired(one_shot(), now + 250);
  BOOST_TEST((rec.state == task_state::in_flight));
  BOOST_TEST(rec.task.attempt == 1u);
  BOOST_TEST(rec.lease_deadline_ms == now + 250 + lease_ms);
  BOOST_TEST(rec.lease_ms == lease_ms);
  // Fired ahead of its time: the lease runs from the due time.
  auto early = fired(one_shot(), now - 30);
  BOOST_TEST(early.lease_deadline_ms == now + lease_ms);
  // A retry's lease runs from its retry time, the index time.
  auto retry = one_shot();
  retry.retry_at_ms = now + 2'000;
  BOOST_TEST(fired(retry, now + 1'990).lease_deadline_ms ==
             now + 2'000 + lease_ms);
}

BOOST_AUTO_TEST_CASE(fire_saturates_a_lease_beyond_int64) {
  auto rec = one_shot();
  rec.task.policy.lease_ms = std::numeric_limits<int64_t>::max();
  BOOST_TEST(fired(rec).lease_deadline_ms ==
             std::numeric_limits<int64_t>::max());
}

BOOST_AUTO_TEST_CASE(ack_of_a_one_shot_task_removes_it) {
  auto rec = fired(one_shot());
  BOOST_TEST(is(life.ack(rec, now + 10), transition::kind::remove));
}

BOOST_AUTO_TEST_CASE(ack_of_a_periodic_task_moves_to_the_next_occurrence) {
  auto rec = every_minute(2);
  auto first_ms = rec.task.due_ms;
  life.fire(rec, first_ms);
  rec.retry_at_ms = first_ms + 500;
  auto step = life.ack(rec, first_ms + 700);
  BOOST_TEST(is(step, transition::kind::keep));
  BOOST_TEST((rec.state == task_state::pending));
  BOOST_TEST(rec.task.due_ms == first_ms + 60'000);
  BOOST_TEST(rec.task.attempt == 0u);
  BOOST_TEST(rec.fired_count == 1u);
  BOOST_TEST(rec.retry_at_ms == 0);
  BOOST_TEST(rec.lease_deadline_ms == 0);
  // The last occurrence's ack removes it.
  life.fire(rec, rec.task.due_ms);
  BOOST_TEST(is(life.ack(rec, rec.task.due_ms + 10), transition::kind::remove));
}

BOOST_AUTO_TEST_CASE(nack_retries_after_the_delay_or_the_backoff) {
  auto rec = fired(one_shot());
  BOOST_TEST(is(life.nack(rec, now + 100, 250), transition::kind::keep));
  BOOST_TEST((rec.state == task_state::pending));
  BOOST_TEST(rec.retry_at_ms == now + 350);
  BOOST_TEST(rec.lease_deadline_ms == 0);
  BOOST_TEST(rec.lease_ms == 0);
  BOOST_TEST(rec.task.attempt == 1u);
  life.fire(rec, now + 350);
  BOOST_TEST(
    is(life.nack(rec, now + 400, std::nullopt), transition::kind::keep));
  // Attempt 2 failed: twice the initial backoff.
  BOOST_TEST(rec.retry_at_ms == now + 400 + 2'000);
}

BOOST_AUTO_TEST_CASE(nack_of_the_last_attempt_buries_the_task) {
  auto rec = fired(one_shot(1));
  auto step = life.nack(rec, now + 100, 0);
  BOOST_TEST(is(step, transition::kind::bury));
  BOOST_TEST(step.reason == "nacked on attempt 1 of 1");
}

BOOST_AUTO_TEST_CASE(touch_extends_the_lease_from_now) {
  auto rec = fired(one_shot());
  life.touch(rec, now + 3'000, 500);
  BOOST_TEST(rec.lease_deadline_ms == now + 3'500);
  BOOST_TEST(rec.lease_ms == 500);
  life.touch(rec, now + 4'000, 0);
  BOOST_TEST(rec.lease_deadline_ms == now + 4'000 + lease_ms);
  BOOST_TEST((rec.state == task_state::in_flight));
  BOOST_TEST(rec.task.attempt == 1u);
}

BOOST_AUTO_TEST_CASE(lease_expiry_retries_with_backoff_then_buries) {
  auto rec = fired(one_shot(2));
  BOOST_TEST(
    is(life.expire_lease(rec, now + lease_ms), transition::kind::keep));
  BOOST_TEST((rec.state == task_state::pending));
  BOOST_TEST(rec.retry_at_ms == now + lease_ms + 1'000);
  BOOST_TEST(rec.task.attempt == 1u);
  life.fire(rec, rec.retry_at_ms);
  BOOST_TEST(rec.task.attempt == 2u);
  auto step = life.expire_lease(rec, rec.lease_deadline_ms);
  BOOST_TEST(is(step, transition::kind::bury));
  BOOST_TEST(step.reason == "lease expired on attempt 2 of 2");
}

BOOST_AUTO_TEST_CASE(requeue_makes_the_task_due_at_once_then_buries) {
  auto rec = fired(one_shot(2));
  BOOST_TEST(is(life.requeue(rec, now + 40), transition::kind::keep));
  BOOST_TEST((rec.state == task_state::pending));
  BOOST_TEST(rec.retry_at_ms == now + 40);
  BOOST_TEST(rec.index_ms() == now + 40);
  life.fire(rec, now + 40);
  auto step = life.requeue(rec, now + 50);
  BOOST_TEST(is(step, transition::kind::bury));
  BOOST_TEST(step.reason == "consumer lost on attempt 2 of 2");
}

BOOST_AUTO_TEST_CASE(giving_back_does_not_count_the_attempt) {
  auto rec = fired(one_shot());
  life.give_back(rec);
  BOOST_TEST((rec.state == task_state::pending));
  BOOST_TEST(rec.task.attempt == 0u);
  BOOST_TEST(rec.lease_deadline_ms == 0);
  // Never below zero (a record restored without its attempt).
  life.give_back(rec);
  BOOST_TEST(rec.task.attempt == 0u);
}

BOOST_AUTO_TEST_CASE(revoke_removes_the_task) {
  auto pending = one_shot();
  BOOST_TEST(is(life.revoke(pending), transition::kind::remove));
  auto in_flight = fired(one_shot());
  BOOST_TEST(is(life.revoke(in_flight), transition::kind::remove));
}

BOOST_AUTO_TEST_CASE(
  reschedule_moves_the_occurrence_and_undoes_an_unsent_fire) {
  auto rec = one_shot();
  rec.retry_at_ms = now + 900;
  life.reschedule(rec, now + 5'000);
  BOOST_TEST(rec.task.due_ms == now + 5'000);
  BOOST_TEST(rec.retry_at_ms == 0);
  auto held = fired(one_shot(), now - 20);
  life.reschedule(held, now + 7'000);
  BOOST_TEST((held.state == task_state::pending));
  BOOST_TEST(held.task.attempt == 0u);
  BOOST_TEST(held.lease_deadline_ms == 0);
  BOOST_TEST(held.task.due_ms == now + 7'000);
}

BOOST_AUTO_TEST_CASE(kick_revives_a_dead_letter_with_attempts_reset) {
  auto rec = fired(one_shot(1));
  rec.retry_at_ms = now + 10;
  life.kick(rec, now + 60'000, std::nullopt);
  BOOST_TEST((rec.state == task_state::pending));
  BOOST_TEST(rec.task.attempt == 0u);
  BOOST_TEST(rec.task.due_ms == now + 60'000);
  BOOST_TEST(rec.retry_at_ms == 0);
  BOOST_TEST(rec.lease_deadline_ms == 0);
  life.kick(rec, now + 60'000, now + 90'000);
  BOOST_TEST(rec.task.due_ms == now + 90'000);
}

BOOST_AUTO_TEST_CASE(a_subclass_replaces_one_transition) {
  // The simulator plants bugs this way; the rest stays the standard.
  struct never_done : task_lifecycle {
    transition ack(task_record& rec, int64_t) const override {
      rec.state = task_state::pending;
      return transition::kept();
    }
  } odd;
  auto rec = fired(one_shot());
  BOOST_TEST(is(odd.ack(rec, now), transition::kind::keep));
  BOOST_TEST(is(odd.revoke(rec), transition::kind::remove));
}
