// The simulator's checkers without the simulation: each invariant of
// sim::oracle fires on the case it exists for and stays quiet otherwise,
// and sim::clock_model keeps its skew bound and its high-water mark.

#define BOOST_TEST_MODULE sim_oracle
#include <boost/test/unit_test.hpp>

#include "sim/clock_model.hpp"
#include "sim/oracle.hpp"

using namespace dally::sim;

namespace {

delivery_seen at(uint64_t id, uint32_t attempt, int64_t due_ms, int64_t now_ms,
                 uint64_t occurrence = 0) {
  delivery_seen d;
  d.id = id;
  d.occurrence = occurrence;
  d.attempt = attempt;
  d.due_ms = due_ms;
  d.true_ms = now_ms;
  d.wall_high_water_ms = now_ms;
  return d;
}

task_expectation once(int64_t due_ms, uint32_t max_attempts = 3) {
  task_expectation t;
  t.due_ms = due_ms;
  t.max_attempts = max_attempts;
  return t;
}

std::string invariant_of(const std::optional<violation>& v) {
  return v ? v->invariant : std::string{"none"};
}

} // namespace

BOOST_AUTO_TEST_CASE(a_delivery_before_the_wall_clock_reached_its_due_time) {
  oracle o{0};
  o.acknowledged(1, once(1'000));
  BOOST_TEST(invariant_of(o.delivered(at(1, 1, 1'000, 999))) == "never_early");
  oracle ok{0};
  ok.acknowledged(1, once(1'000));
  BOOST_TEST(invariant_of(ok.delivered(at(1, 1, 1'000, 1'000))) == "none");
}

BOOST_AUTO_TEST_CASE(true_time_may_trail_by_the_skew_only) {
  oracle o{50};
  o.acknowledged(1, once(1'000));
  auto d = at(1, 1, 1'000, 960);
  d.wall_high_water_ms = 1'010; // The wall clock ran 50 ms ahead.
  BOOST_TEST(invariant_of(o.delivered(d)) == "none");
  o.acknowledged(2, once(1'000));
  auto early = at(2, 1, 1'000, 940);
  early.wall_high_water_ms = 1'000;
  BOOST_TEST(invariant_of(o.delivered(early)) == "never_early");
}

BOOST_AUTO_TEST_CASE(attempts_go_up_by_one_unless_something_broke) {
  oracle o{0};
  o.acknowledged(1, once(0));
  BOOST_TEST(invariant_of(o.delivered(at(1, 1, 0, 10))) == "none");
  BOOST_TEST(invariant_of(o.delivered(at(1, 2, 0, 20))) == "none");
  BOOST_TEST(invariant_of(o.delivered(at(1, 2, 0, 30))) == "attempts");
  oracle skip{0};
  skip.acknowledged(1, once(0));
  skip.delivered(at(1, 1, 0, 10));
  BOOST_TEST(invariant_of(skip.delivered(at(1, 3, 0, 20))) == "attempts");
  oracle crash{0};
  crash.acknowledged(1, once(0));
  crash.delivered(at(1, 1, 0, 10));
  crash.disturbance();
  BOOST_TEST(invariant_of(crash.delivered(at(1, 3, 0, 20))) == "none");
}

BOOST_AUTO_TEST_CASE(nothing_after_a_revoke_answered_done) {
  oracle o{0};
  o.acknowledged(1, once(100));
  o.revoke_sent(1);
  o.revoke_answered(1, revoke_answer::done);
  BOOST_TEST(invariant_of(o.delivered(at(1, 1, 100, 100))) == "revoke");
  oracle running{0};
  running.acknowledged(1, once(100));
  running.revoke_sent(1);
  running.revoke_answered(1, revoke_answer::in_flight);
  BOOST_TEST(invariant_of(running.delivered(at(1, 1, 100, 100))) == "none");
  BOOST_TEST(invariant_of(running.delivered(at(1, 2, 100, 200))) == "revoke");
}

BOOST_AUTO_TEST_CASE(a_delivery_past_its_lease_is_stale_and_checked_less) {
  // Attempt 1 (lease to 800) waited in a stalled consumer's mailbox; its
  // lease ran out and attempt 2 went to another consumer first.
  oracle o{0};
  o.acknowledged(1, once(0));
  auto second = at(1, 2, 0, 1'000);
  second.lease_deadline_ms = 1'800;
  BOOST_TEST(invariant_of(o.delivered(second)) == "none");
  auto first = at(1, 1, 0, 1'200);
  first.lease_deadline_ms = 800;
  BOOST_TEST(invariant_of(o.delivered(first)) == "none");
  // Received before its deadline, the same delivery is out of order.
  first.wall_high_water_ms = 799;
  BOOST_TEST(invariant_of(o.delivered(first)) == "attempts");
  // Stale deliveries are still never early.
  oracle early{0};
  early.acknowledged(1, once(1'000));
  auto d = at(1, 1, 1'000, 999);
  d.lease_deadline_ms = 900;
  BOOST_TEST(invariant_of(early.delivered(d)) == "never_early");
  // A stale delivery counts as one of its task: its ack may be accepted.
  oracle seen{0};
  seen.acknowledged(1, once(0));
  auto late = at(1, 1, 0, 1'000);
  late.lease_deadline_ms = 1'000;
  BOOST_TEST(invariant_of(seen.delivered(late)) == "none");
  BOOST_TEST(invariant_of(seen.check_final(1, final_state::gone, 0)) == "none");
  // After a revoke answered done, a stale delivery may still arrive.
  oracle revoked{0};
  revoked.acknowledged(1, once(0));
  revoked.revoke_sent(1);
  revoked.revoke_answered(1, revoke_answer::done);
  BOOST_TEST(invariant_of(revoked.delivered(late)) == "none");
  auto fresh = at(1, 2, 0, 1'000);
  fresh.lease_deadline_ms = 1'800;
  BOOST_TEST(invariant_of(revoked.delivered(fresh)) == "revoke");
  // After in_flight: the stale attempt does not use up the one delivery.
  oracle flying{0};
  flying.acknowledged(1, once(0));
  flying.revoke_sent(1);
  flying.revoke_answered(1, revoke_answer::in_flight);
  BOOST_TEST(invariant_of(flying.delivered(late)) == "none");
  BOOST_TEST(invariant_of(flying.delivered(fresh)) == "none");
  auto third = at(1, 3, 0, 1'100);
  third.lease_deadline_ms = 2'000;
  BOOST_TEST(invariant_of(flying.delivered(third)) == "revoke");
}

BOOST_AUTO_TEST_CASE(a_one_shot_delivery_carries_a_due_time_it_was_given) {
  oracle o{0};
  o.acknowledged(1, once(100));
  o.reschedule_sent(1, 500);
  BOOST_TEST(invariant_of(o.delivered(at(1, 1, 500, 500))) == "none");
  o.acknowledged(2, once(100));
  BOOST_TEST(invariant_of(o.delivered(at(2, 1, 300, 300))) == "due_time");
}

BOOST_AUTO_TEST_CASE(recurrences_fire_their_count) {
  task_expectation rec;
  rec.recurring = true;
  rec.occurrences = 2;
  rec.max_attempts = 1;
  oracle o{0};
  o.acknowledged(1, rec);
  o.delivered(at(1, 1, 10, 10, 0));
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) ==
             "recurrence_count");
  o.delivered(at(1, 1, 20, 20, 1));
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "none");
  BOOST_TEST(invariant_of(o.delivered(at(1, 1, 30, 30, 2))) ==
             "recurrence_count");
  // An interval list may skip points it missed: at most its length.
  rec.exact_count = false;
  o.acknowledged(2, rec);
  o.delivered(at(2, 1, 10, 10, 0));
  BOOST_TEST(invariant_of(o.check_final(2, final_state::gone, 0)) == "none");
}

BOOST_AUTO_TEST_CASE(the_end_state_of_every_acknowledged_task) {
  oracle o{0};
  o.acknowledged(1, once(10, 3));
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "lost");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::live, 0)) ==
             "liveness");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::dead, 2)) ==
             "dead_letter");
  BOOST_TEST(invariant_of(o.check_final(1, final_state::dead, 3)) == "none");
  o.delivered(at(1, 1, 10, 10));
  BOOST_TEST(invariant_of(o.check_final(1, final_state::gone, 0)) == "none");
  // A task whose revoke went out may be gone undelivered.
  o.acknowledged(2, once(10));
  o.revoke_sent(2);
  BOOST_TEST(invariant_of(o.check_final(2, final_state::gone, 0)) == "none");
  // Unacknowledged tasks (a schedule whose answer was lost) are not checked.
  BOOST_TEST(invariant_of(o.check_final(3, final_state::gone, 0)) == "none");
}

BOOST_AUTO_TEST_CASE(a_damaged_record_is_never_delivered_and_ends_quarantined) {
  oracle o{0};
  o.acknowledged(1, once(10));
  o.acknowledged(2, once(10));
  BOOST_TEST(o.intact_ids() == (std::vector<uint64_t>{1, 2}));
  BOOST_TEST(invariant_of(o.delivered(at(1, 1, 10, 10))) == "none");
  o.damaged(1);
  BOOST_TEST(o.intact_ids() == (std::vector<uint64_t>{2}));
  BOOST_TEST(invariant_of(o.delivered(at(1, 2, 10, 20))) == "corrupt_record");
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

BOOST_AUTO_TEST_CASE(the_clock_stays_within_its_skew_and_remembers_its_peak) {
  clock_model c{100};
  BOOST_TEST(c.wall_ms(1'000) == 1'000);
  BOOST_TEST(c.shift(1'000, 500) == 100);
  BOOST_TEST(c.wall_ms(1'010) == 1'110);
  BOOST_TEST(c.shift(1'020, -1'000) == -200);
  BOOST_TEST(c.wall_ms(1'030) == 930);
  // The reading just before the step back is the high-water mark.
  BOOST_TEST(c.high_water_ms(1'030) == 1'120);
  BOOST_TEST(c.high_water_ms(1'300) == 1'200);
}
