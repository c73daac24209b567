// The simulator's checkers without the simulation: each rule of
// sim::oracle fires on the case it exists for and stays quiet otherwise;
// the reference schedule finds occurrences by itself; sim::clock_model
// keeps its skew bound.

#define BOOST_TEST_MODULE sim_oracle
#include <boost/test/unit_test.hpp>

#include "sim/clock_model.hpp"
#include "sim/oracle.hpp"
#include "sim/reference.hpp"

using namespace dally::sim;

namespace {

std::string invariant_of(const std::optional<violation>& v) {
  return v ? v->invariant : std::string{"none"};
}

task_request asked(const std::string& key, uint32_t max_attempts = 3) {
  task_request r;
  r.key = key;
  r.topic = "t";
  r.payload = "p-" + key;
  r.lease_ms = 1'000;
  r.max_attempts = max_attempts;
  r.backoff_initial_ms = 100;
  r.backoff_multiplier_permille = 2'000;
  r.backoff_max_ms = 5'000;
  return r;
}

task_request at(const std::string& key, int64_t at_ms,
                uint32_t max_attempts = 3) {
  auto r = asked(key, max_attempts);
  r.when.at_ms = at_ms;
  return r;
}

task_request every(const std::string& key, int64_t period_ms, uint64_t count) {
  auto r = asked(key);
  r.when.what = when_asked::kind::every;
  r.when.every_ms = period_ms;
  r.when.max_count = count;
  return r;
}

/// The engine takes `r` at wall-clock reading `now_ms` and answers `id`.
std::string schedule(oracle& o, const task_request& r, uint64_t id,
                     int64_t now_ms) {
  o.schedule_arrived(r, now_ms);
  o.clock_read(now_ms);
  return invariant_of(o.schedule_answered(r.key, id, now_ms));
}

delivery_sent sent(const task_request& r, uint64_t id, uint32_t attempt,
                   int64_t due_ms, int64_t true_ms, uint64_t occurrence = 0,
                   uint64_t consumer = 1) {
  delivery_sent d;
  d.ref = delivery_ref{id, occurrence, attempt};
  d.due_ms = due_ms;
  d.topic = r.topic;
  d.payload = r.payload;
  d.true_ms = true_ms;
  d.consumer = consumer;
  return d;
}

/// The engine reads `now_ms` (as its notifier does before a release) and
/// the delivery leaves.
std::string deliver(oracle& o, const delivery_sent& d, int64_t now_ms) {
  o.clock_read(now_ms);
  return invariant_of(o.sent(d));
}

/// A consumer acks `d`, and the engine processes the ack at reading
/// `engine_ms`.
void ack(oracle& o, const delivery_ref& d, int64_t engine_ms) {
  o.answered(d, consumer_verdict::ack);
  o.clock_read(engine_ms);
}

} // namespace

// -- never early --------------------------------------------------------------

BOOST_AUTO_TEST_CASE(nothing_leaves_before_the_engine_read_its_due_time) {
  auto r = at("k", 1'000);
  oracle o{0};
  schedule(o, r, 1, 0);
  BOOST_TEST(deliver(o, sent(r, 1, 1, 1'000, 999), 999) == "never_early");
  oracle ok{0};
  schedule(ok, r, 1, 0);
  BOOST_TEST(deliver(ok, sent(r, 1, 1, 1'000, 1'000), 1'000) == "none");
}

BOOST_AUTO_TEST_CASE(only_the_engines_own_readings_count) {
  // The oracle's readings are those the engine made: a reading of the due
  // time made after the delivery left does not excuse it.
  auto r = at("k", 1'000);
  oracle o{0};
  schedule(o, r, 1, 0);
  o.clock_read(990);
  BOOST_TEST(invariant_of(o.sent(sent(r, 1, 1, 1'000, 1'000))) ==
             "never_early");
}

BOOST_AUTO_TEST_CASE(true_time_may_trail_the_due_time_by_the_skew_only) {
  auto r = at("k", 1'000);
  oracle o{50};
  schedule(o, r, 1, 0);
  // The wall clock runs 50 ms ahead of true time.
  BOOST_TEST(deliver(o, sent(r, 1, 1, 1'000, 950), 1'000) == "none");
  oracle early{50};
  schedule(early, r, 1, 0);
  BOOST_TEST(deliver(early, sent(r, 1, 1, 1'000, 949), 1'000) == "never_early");
}

// -- due times ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_one_shot_carries_the_time_its_client_asked_for) {
  auto r = at("k", 42'339);
  oracle o{0};
  schedule(o, r, 1, 0);
  BOOST_TEST(deliver(o, sent(r, 1, 1, 41'839, 41'839), 41'839) == "due_time");
  // A reschedule that reached the engine may have moved it.
  oracle moved{0};
  schedule(moved, r, 1, 0);
  moved.reschedule_arrived(1, 41'839);
  BOOST_TEST(deliver(moved, sent(r, 1, 1, 41'839, 41'839), 41'839) == "none");
}

BOOST_AUTO_TEST_CASE(
  a_delay_counts_from_a_reading_made_while_the_engine_took_it) {
  auto r = asked("k");
  r.when.what = when_asked::kind::in;
  r.when.in_ms = 500;
  oracle o{0};
  o.schedule_arrived(r, 100);
  o.clock_read(100);
  o.clock_read(130);
  BOOST_TEST(invariant_of(o.schedule_answered("k", 1, 140)) == "none");
  BOOST_TEST(deliver(o, sent(r, 1, 1, 630, 630), 630) == "none");
  oracle off{0};
  off.schedule_arrived(r, 100);
  off.clock_read(100);
  off.clock_read(130);
  off.schedule_answered("k", 1, 140);
  BOOST_TEST(deliver(off, sent(r, 1, 1, 599, 600), 600) == "due_time");
}

BOOST_AUTO_TEST_CASE(occurrences_are_the_reference_schedules) {
  auto r = every("k", 5'000, 3);
  oracle o{0};
  schedule(o, r, 1, 20'000);
  BOOST_TEST(deliver(o, sent(r, 1, 1, 25'000, 25'000, 0), 25'000) == "none");
  ack(o, {1, 0, 1}, 25'010);
  // Every later occurrence 700 ms early: not a point of the schedule.
  BOOST_TEST(deliver(o, sent(r, 1, 1, 29'300, 29'300, 1), 29'300) ==
             "recurrence_due");
  oracle ok{0};
  schedule(ok, r, 1, 20'000);
  deliver(ok, sent(r, 1, 1, 25'000, 25'000, 0), 25'000);
  ack(ok, {1, 0, 1}, 25'010);
  BOOST_TEST(deliver(ok, sent(r, 1, 1, 30'000, 30'000, 1), 30'000) == "none");
  // The first occurrence pins when the engine took it.
  oracle first{0};
  schedule(first, r, 1, 20'000);
  BOOST_TEST(deliver(first, sent(r, 1, 1, 24'000, 24'000, 0), 24'000) ==
             "recurrence_due");
}

BOOST_AUTO_TEST_CASE(a_cron_starts_at_its_first_match_after_it_was_taken) {
  auto r = asked("k");
  r.when.what = when_asked::kind::cron;
  r.when.cron = "*/5 * * * * *";
  r.when.max_count = 2;
  // Taken at 20'000 (second 20 of a minute): 25'000 is the first match.
  for (int64_t due : {20'000, 24'000, 30'000}) {
    oracle o{0};
    schedule(o, r, 1, 20'000);
    BOOST_TEST(deliver(o, sent(r, 1, 1, due, due), due) == "recurrence_due",
               "due " << due);
  }
  oracle ok{0};
  schedule(ok, r, 1, 20'000);
  BOOST_TEST(deliver(ok, sent(r, 1, 1, 25'000, 25'000), 25'000) == "none");
  ack(ok, {1, 0, 1}, 25'010);
  // Two occurrences never share a due time.
  BOOST_TEST(deliver(ok, sent(r, 1, 1, 25'000, 25'020, 1), 25'020) ==
             "recurrence_due");
}

BOOST_AUTO_TEST_CASE(
  the_next_occurrence_comes_after_an_ack_and_skips_missed_points) {
  auto r = every("k", 1'000, 5);
  oracle o{0};
  schedule(o, r, 1, 0);
  deliver(o, sent(r, 1, 1, 1'000, 1'000, 0), 1'000);
  // No consumer acked occurrence 0.
  BOOST_TEST(deliver(o, sent(r, 1, 1, 2'000, 2'000, 1), 2'000) ==
             "recurrence_due");
  // Acked at 3'500: 2'000 and 3'000 are skipped, 4'000 is next.
  oracle late{0};
  schedule(late, r, 1, 0);
  deliver(late, sent(r, 1, 1, 1'000, 1'000, 0), 1'000);
  late.clock_read(3'500);
  ack(late, {1, 0, 1}, 3'500);
  BOOST_TEST(deliver(late, sent(r, 1, 1, 2'000, 3'500, 1), 3'500) ==
             "recurrence_due");
  oracle skipped{0};
  schedule(skipped, r, 1, 0);
  deliver(skipped, sent(r, 1, 1, 1'000, 1'000, 0), 1'000);
  skipped.clock_read(3'500);
  ack(skipped, {1, 0, 1}, 3'500);
  BOOST_TEST(deliver(skipped, sent(r, 1, 1, 4'000, 4'000, 1), 4'000) == "none");
}

BOOST_AUTO_TEST_CASE(the_reference_steps_through_time) {
  when_asked cron;
  cron.what = when_asked::kind::cron;
  cron.cron = "*/5 * * * * *";
  auto ref = reference_schedule::make(cron);
  BOOST_REQUIRE(ref.has_value());
  // 2023-11-14T22:13:20Z is second 20 of its minute.
  BOOST_TEST(ref->is_point(1'700'000'000'000, 0));
  BOOST_TEST(!ref->is_point(1'700'000'001'000, 0));
  BOOST_TEST(ref->first(1'700'000'000'000).value() == 1'700'000'005'000);
  BOOST_TEST(ref->next_after(1'700'000'003'000, 0).value() ==
             1'700'000'005'000);
  when_asked daily;
  daily.what = when_asked::kind::cron;
  daily.cron = "0 30 2 29 2 *"; // 02:30:00 on 29 February
  auto leap = reference_schedule::make(daily);
  BOOST_REQUIRE(leap.has_value());
  BOOST_TEST(leap->is_point(951'791'400'000, 0)); // 2000-02-29T02:30:00Z
  BOOST_TEST(!leap->is_point(951'791'401'000, 0));
  BOOST_TEST(
    !reference_schedule::make(
       when_asked{when_asked::kind::cron, 0, 0, 0, "1-5 * * * * *", {}, 0})
       .has_value());
  when_asked list;
  list.what = when_asked::kind::intervals;
  list.intervals_ms = {500, 1'500};
  auto gaps = reference_schedule::make(list);
  BOOST_TEST(gaps->first(100).value() == 600);
  BOOST_TEST(gaps->next_after(600, 100).value() == 2'100);
  BOOST_TEST(!gaps->next_after(2'100, 100).has_value());
  BOOST_TEST(gaps->max_occurrences() == 2u);
  BOOST_TEST(!gaps->exact_count());
  BOOST_TEST(reference_backoff_ms(100, 2'000, 5'000, 1) == 100);
  BOOST_TEST(reference_backoff_ms(100, 2'000, 5'000, 3) == 400);
  BOOST_TEST(reference_backoff_ms(100, 1'500, 5'000, 2) == 150);
  BOOST_TEST(reference_backoff_ms(100, 2'000, 5'000, 9) == 5'000);
}

// -- attempts and leases ------------------------------------------------------

BOOST_AUTO_TEST_CASE(attempts_go_up_by_one_unless_something_broke) {
  auto r = at("k", 0, 5);
  oracle o{0};
  schedule(o, r, 1, 0);
  BOOST_TEST(deliver(o, sent(r, 1, 1, 0, 10), 10) == "none");
  BOOST_TEST(deliver(o, sent(r, 1, 2, 0, 5'000), 5'000) == "none");
  BOOST_TEST(deliver(o, sent(r, 1, 2, 0, 9'000), 9'000) == "attempts");
  oracle skip{0};
  schedule(skip, r, 1, 0);
  deliver(skip, sent(r, 1, 1, 0, 10), 10);
  BOOST_TEST(deliver(skip, sent(r, 1, 3, 0, 5'000), 5'000) == "attempts");
  oracle crash{0};
  schedule(crash, r, 1, 0);
  deliver(crash, sent(r, 1, 1, 0, 10), 10);
  crash.restart();
  BOOST_TEST(deliver(crash, sent(r, 1, 3, 0, 20), 20) == "none");
  oracle above{0};
  schedule(above, at("k", 0, 1), 1, 0);
  BOOST_TEST(deliver(above, sent(r, 1, 2, 0, 10), 10) == "attempts");
  oracle zero{0};
  schedule(zero, r, 1, 0);
  BOOST_TEST(deliver(zero, sent(r, 1, 0, 0, 10), 10) == "attempts");
  // A lease that ran out gives no attempt back: the redelivery is the next.
  oracle again{0};
  schedule(again, r, 1, 0);
  deliver(again, sent(r, 1, 1, 0, 10), 10);
  BOOST_TEST(deliver(again, sent(r, 1, 1, 0, 5'000), 5'000) == "attempts");
}

BOOST_AUTO_TEST_CASE(a_redelivery_waits_for_the_lease_and_the_backoff) {
  // Due 0, lease 1'000, backoff 100 after attempt 1.
  auto r = at("k", 0);
  oracle o{0};
  schedule(o, r, 1, 0);
  deliver(o, sent(r, 1, 1, 0, 0), 0);
  BOOST_TEST(deliver(o, sent(r, 1, 2, 0, 1'099), 1'099) == "lease");
  oracle ok{0};
  schedule(ok, r, 1, 0);
  deliver(ok, sent(r, 1, 1, 0, 0), 0);
  BOOST_TEST(deliver(ok, sent(r, 1, 2, 0, 1'100), 1'100) == "none");
  // A nack's retry delay counts from a reading after the nack.
  oracle nacked{0};
  schedule(nacked, r, 1, 0);
  deliver(nacked, sent(r, 1, 1, 0, 0), 0);
  nacked.answered({1, 0, 1}, consumer_verdict::nack, 300);
  nacked.clock_read(200);
  BOOST_TEST(deliver(nacked, sent(r, 1, 2, 0, 499), 499) == "lease");
  oracle retried{0};
  schedule(retried, r, 1, 0);
  deliver(retried, sent(r, 1, 1, 0, 0), 0);
  retried.answered({1, 0, 1}, consumer_verdict::nack, 300);
  retried.clock_read(200);
  BOOST_TEST(deliver(retried, sent(r, 1, 2, 0, 500), 500) == "none");
  // A dead consumer's deliveries are requeued at once.
  oracle dead{0};
  schedule(dead, r, 1, 0);
  deliver(dead, sent(r, 1, 1, 0, 0), 0);
  dead.consumer_died(1);
  BOOST_TEST(deliver(dead, sent(r, 1, 2, 0, 10), 10) == "none");
}

BOOST_AUTO_TEST_CASE(an_accepted_touch_sets_the_lease_not_the_engines_report) {
  auto r = at("k", 0);
  oracle o{0};
  schedule(o, r, 1, 0);
  deliver(o, sent(r, 1, 1, 0, 0), 0);
  // Touched at a reading of 500 or later, by 3'000: ends at 3'500 at the
  // earliest, then the backoff.
  auto mark = o.reading_mark();
  o.clock_read(500);
  o.touch_answered({1, 0, 1}, 3'000, true, mark);
  BOOST_TEST(deliver(o, sent(r, 1, 2, 0, 3'000), 3'000) == "lease");
  oracle ok{0};
  schedule(ok, r, 1, 0);
  deliver(ok, sent(r, 1, 1, 0, 0), 0);
  mark = ok.reading_mark();
  ok.clock_read(500);
  ok.touch_answered({1, 0, 1}, 3'000, true, mark);
  BOOST_TEST(deliver(ok, sent(r, 1, 2, 0, 3'600), 3'600) == "none");
  // A touch refused once the lease ran out (at 1'000) changes nothing.
  oracle refused{0};
  schedule(refused, r, 1, 0);
  deliver(refused, sent(r, 1, 1, 0, 0), 0);
  mark = refused.reading_mark();
  refused.clock_read(1'000);
  BOOST_TEST(invariant_of(refused.touch_answered({1, 0, 1}, 3'000, false,
                                                 mark)) == "none");
  BOOST_TEST(deliver(refused, sent(r, 1, 2, 0, 1'100), 1'100) == "none");
}

BOOST_AUTO_TEST_CASE(the_engine_holds_an_attempt_until_its_lease_ends) {
  // Due 0, lease 1'000: until the engine's clock reads 1'000 it takes an
  // ack or a touch of attempt 1.
  auto r = at("k", 0);
  oracle o{0};
  schedule(o, r, 1, 0);
  deliver(o, sent(r, 1, 1, 0, 0), 0);
  o.clock_read(999);
  BOOST_TEST(invariant_of(o.touch_answered({1, 0, 1}, 3'000, false, 0)) ==
             "lease");
  oracle ack{0};
  schedule(ack, r, 1, 0);
  deliver(ack, sent(r, 1, 1, 0, 0), 0);
  ack.answered({1, 0, 1}, consumer_verdict::ack);
  ack.clock_read(999);
  BOOST_TEST(invariant_of(ack.ack_answered({1, 0, 1}, false)) == "lease");
  // A touch that set the lease to end at 3'500 (taken at 500).
  oracle touched{0};
  schedule(touched, r, 1, 0);
  deliver(touched, sent(r, 1, 1, 0, 0), 0);
  auto mark = touched.reading_mark();
  touched.clock_read(500);
  touched.touch_answered({1, 0, 1}, 3'000, true, mark);
  touched.answered({1, 0, 1}, consumer_verdict::ack);
  touched.clock_read(3'000);
  BOOST_TEST(invariant_of(touched.ack_answered({1, 0, 1}, false)) == "lease");
  // After a restart the engine may have moved the attempt on unseen.
  oracle restarted{0};
  schedule(restarted, r, 1, 0);
  deliver(restarted, sent(r, 1, 1, 0, 0), 0);
  restarted.restart();
  restarted.answered({1, 0, 1}, consumer_verdict::ack);
  BOOST_TEST(invariant_of(restarted.ack_answered({1, 0, 1}, false)) == "none");
  // An ack refused once the lease ran out does not count: the task must
  // come back, not end gone.
  oracle late{0};
  schedule(late, r, 1, 0);
  deliver(late, sent(r, 1, 1, 0, 0), 0);
  late.answered({1, 0, 1}, consumer_verdict::ack);
  late.clock_read(1'000);
  BOOST_TEST(invariant_of(late.ack_answered({1, 0, 1}, false)) == "none");
  BOOST_TEST(invariant_of(late.check_final(1, final_state::gone, 0)) ==
             "retry");
}

// -- revoke -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(nothing_leaves_once_a_revokes_done_left_the_engine) {
  auto r = at("k", 100);
  oracle o{0};
  schedule(o, r, 1, 0);
  o.revoke_arrived(1);
  // Answered done as it left the engine, whether or not the client ever
  // heard of it.
  o.revoke_answered(1, change_answer::done);
  BOOST_TEST(deliver(o, sent(r, 1, 1, 100, 100), 100) == "revoke");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::live, 0)) == "revoke");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "none");
  oracle running{0};
  schedule(running, r, 1, 0);
  running.revoke_arrived(1);
  running.revoke_answered(1, change_answer::in_flight);
  BOOST_TEST(deliver(running, sent(r, 1, 1, 100, 100), 100) == "none");
  BOOST_TEST(deliver(running, sent(r, 1, 2, 100, 2'000), 2'000) == "revoke");
  // Either answer ends the task: gone, neither live nor a dead letter.
  BOOST_TEST(invariant_of(running.check_final(1, final_state::dead, 2)) ==
             "revoke");
  BOOST_TEST(invariant_of(running.check_final(1, final_state::gone, 0)) ==
             "none");
}

BOOST_AUTO_TEST_CASE(only_a_revoke_without_a_definite_answer_excuses_an_end) {
  auto r = at("k", 100);
  oracle o{0};
  schedule(o, r, 1, 0);
  o.revoke_arrived(1);
  o.revoke_answered(1, change_answer::completed);
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "lost");
  oracle doubt{0};
  schedule(doubt, r, 1, 0);
  doubt.revoke_arrived(1);
  BOOST_TEST(invariant_of(doubt.check_final(1, final_state::gone, 0)) ==
             "none");
  oracle failed{0};
  schedule(failed, r, 1, 0);
  failed.revoke_arrived(1);
  failed.revoke_answered(1, change_answer::failed);
  BOOST_TEST(invariant_of(failed.check_final(1, final_state::gone, 0)) ==
             "none");
}

// -- ids and payloads ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(each_id_names_one_request) {
  oracle o{0};
  BOOST_TEST(schedule(o, at("a", 100), 1, 0) == "none");
  BOOST_TEST(schedule(o, at("b", 100), 1, 0) == "unique_id");
  oracle retry{0};
  BOOST_TEST(schedule(retry, at("a", 100), 1, 0) == "none");
  BOOST_TEST(invariant_of(retry.schedule_answered("a", 1, 10)) == "none");
  BOOST_TEST(invariant_of(retry.schedule_answered("a", 2, 20)) == "unique_id");
}

BOOST_AUTO_TEST_CASE(a_delivery_carries_what_its_client_asked_for) {
  auto r = at("a", 100);
  oracle o{0};
  schedule(o, r, 1, 0);
  auto d = sent(r, 1, 1, 100, 100);
  d.payload = "p-b";
  BOOST_TEST(deliver(o, d, 100) == "payload");
  oracle other{0};
  schedule(other, r, 1, 0);
  schedule(other, at("b", 100), 2, 0);
  d = sent(at("b", 100), 1, 1, 100, 100);
  BOOST_TEST(deliver(other, d, 100) == "payload");
  // A payload no client asked for, of a task no answer named.
  d = sent(r, 9, 1, 100, 100);
  d.payload = "nobody's";
  BOOST_TEST(deliver(other, d, 100) == "payload");
  // A task whose answer never left the engine is known by its payload:
  // checked as it leaves, not at the end.
  oracle unanswered{0};
  unanswered.schedule_arrived(r, 0);
  unanswered.clock_read(0);
  BOOST_TEST(deliver(unanswered, sent(r, 7, 1, 90, 95), 95) == "due_time");
  BOOST_TEST(unanswered.known_ids().empty());
}

// -- the end ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(done_means_a_consumer_acked) {
  auto r = at("k", 10, 3);
  oracle o{0};
  schedule(o, r, 1, 0);
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "lost");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::live, 0)) ==
             "liveness");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::dead, 2)) ==
             "dead_letter");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::dead, 3)) == "none");
  // Delivered once, nacked, never retried, gone.
  deliver(o, sent(r, 1, 1, 10, 10), 10);
  o.answered({1, 0, 1}, consumer_verdict::nack, 0);
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "retry");
  // Silence (the lease ran out) is no different.
  oracle silent{0};
  schedule(silent, r, 1, 0);
  deliver(silent, sent(r, 1, 1, 10, 10), 10);
  BOOST_TEST(invariant_of(silent.check_final(1, final_state::gone, 0)) ==
             "retry");
  silent.answered({1, 0, 1}, consumer_verdict::ack);
  BOOST_TEST(invariant_of(silent.check_final(1, final_state::gone, 0)) ==
             "none");
  // An ack of an attempt the engine moved past does not count.
  oracle stale{0};
  schedule(stale, r, 1, 0);
  deliver(stale, sent(r, 1, 1, 10, 10), 10);
  deliver(stale, sent(r, 1, 2, 10, 2'000), 2'000);
  stale.answered({1, 0, 1}, consumer_verdict::ack);
  BOOST_TEST(invariant_of(stale.check_final(1, final_state::gone, 0)) ==
             "retry");
  // An attempt sent again after an ack: that ack did not take effect.
  oracle again{0};
  schedule(again, r, 1, 0);
  deliver(again, sent(r, 1, 1, 10, 10), 10);
  again.answered({1, 0, 1}, consumer_verdict::ack);
  again.restart();
  deliver(again, sent(r, 1, 2, 10, 20), 20);
  BOOST_TEST(invariant_of(again.check_final(1, final_state::gone, 0)) ==
             "retry");
  // The last attempt failed: a dead letter, not gone.
  oracle last{0};
  schedule(last, at("k", 10, 1), 1, 0);
  deliver(last, sent(r, 1, 1, 10, 10), 10);
  BOOST_TEST(invariant_of(last.check_final(1, final_state::gone, 0)) ==
             "retry");
  // Schedules whose answer never left the engine are not checked.
  BOOST_TEST(invariant_of(o.check_final(9, final_state::gone, 0)) == "none");
}

BOOST_AUTO_TEST_CASE(a_bounded_recurrence_ends_with_each_occurrence_acked) {
  auto r = every("k", 1'000, 2);
  oracle o{0};
  schedule(o, r, 1, 0);
  deliver(o, sent(r, 1, 1, 1'000, 1'000, 0), 1'000);
  ack(o, {1, 0, 1}, 1'010);
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) ==
             "recurrence_count");
  BOOST_TEST(deliver(o, sent(r, 1, 1, 2'000, 2'000, 1), 2'000) == "none");
  ack(o, {1, 1, 1}, 2'010);
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "none");
  BOOST_TEST(deliver(o, sent(r, 1, 1, 3'000, 3'000, 2), 3'000) ==
             "recurrence_count");
  // An interval list may skip points it missed: at most its length.
  auto list = asked("l");
  list.when.what = when_asked::kind::intervals;
  list.when.intervals_ms = {1'000, 1'000};
  oracle gaps{0};
  schedule(gaps, list, 2, 0);
  deliver(gaps, sent(list, 2, 1, 1'000, 1'000, 0), 1'000);
  gaps.answered({2, 0, 1}, consumer_verdict::ack);
  BOOST_TEST(invariant_of(gaps.check_final(2, final_state::gone, 0)) == "none");
}

BOOST_AUTO_TEST_CASE(a_damaged_record_is_never_delivered_and_ends_quarantined) {
  auto r = at("a", 10);
  oracle o{0};
  schedule(o, r, 1, 0);
  schedule(o, at("b", 10), 2, 0);
  BOOST_TEST(deliver(o, sent(r, 1, 1, 10, 10), 10) == "none");
  o.damaged(1);
  BOOST_TEST(deliver(o, sent(r, 1, 2, 10, 5'000), 5'000) == "corrupt_record");
  // Gone or quarantined, never live or dead, and no loss to report.
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "none");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::quarantined, 0)) ==
             "none");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::live, 0)) ==
             "corrupt_record");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::dead, 1)) ==
             "corrupt_record");
  // Quarantine of a record no fault touched is a finding too.
  BOOST_TEST(invariant_of(o.check_final(2, final_state::quarantined, 0)) ==
             "corrupt_record");
}

BOOST_AUTO_TEST_CASE(the_clock_stays_within_its_skew) {
  clock_model c{100};
  BOOST_TEST(c.wall_ms(1'000) == 1'000);
  BOOST_TEST(c.shift(500) == 100);
  BOOST_TEST(c.wall_ms(1'010) == 1'110);
  BOOST_TEST(c.shift(-1'000) == -200);
  BOOST_TEST(c.wall_ms(1'030) == 930);
}
