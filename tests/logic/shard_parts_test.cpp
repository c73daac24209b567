#define BOOST_TEST_MODULE shard_parts
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/recurrence.hpp"
#include "logic/idempotency_keys.hpp"
#include "logic/lease_tracker.hpp"
#include "logic/outgoing_fires.hpp"
#include "logic/overdue_pacer.hpp"
#include "logic/record_cache.hpp"
#include "logic/staged_batch.hpp"
#include "logic/topic_parking.hpp"
#include "logic/unwritten_fires.hpp"
#include "storage/due_window.hpp"
#include "storage/rocks_task_store.hpp"
#include "tests/storage/test_support.hpp"

// The classes shard_logic coordinates, each on its own. shard_logic_test
// checks them working together.

using namespace dally;
using core::task_record;
using core::task_state;
using storage::due_key;

namespace {

constexpr int64_t t0 = 1'700'000'000'000;

task_record record(core::task_id id, int64_t due_ms,
                   std::string topic = "jobs") {
  task_record rec;
  rec.task.id = id;
  rec.task.topic = std::move(topic);
  rec.task.payload = "payload";
  rec.task.due_ms = due_ms;
  rec.task.recurrence = *core::recurrence::at(due_ms);
  rec.task.policy.max_attempts = 3;
  return rec;
}

/// A RocksDB store in a fresh directory (no fsync).
struct store_fixture {
  storage::test::temp_dir dir;
  std::unique_ptr<storage::rocks_task_store> store;

  store_fixture() {
    storage::store_options so;
    so.path = dir.str("shard");
    so.durability = storage::durability::none;
    so.write_buffer_bytes = 1 << 20;
    so.block_cache_bytes = 1 << 20;
    auto res = storage::rocks_task_store::open(so);
    BOOST_REQUIRE(res);
    store = std::move(*res);
  }
};

} // namespace

// -- staged_batch -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(staged_batch_lets_reads_see_staged_writes) {
  logic::staged_batch batch;
  BOOST_TEST(batch.empty());
  batch.put(record(4, t0));
  logic::record_slot s;
  BOOST_REQUIRE(batch.find(4, s));
  BOOST_REQUIRE(s.rec != nullptr);
  BOOST_TEST(!s.base.has_value());
  auto before = storage::write_batch::key_of(*s.rec);
  s.rec->task.due_ms = t0 + 5;
  batch.replace(s, before);
  BOOST_TEST(batch.find(4)->rec.task.due_ms == t0 + 5);
  batch.erase(s);
  logic::record_slot gone;
  BOOST_REQUIRE(batch.find(4, gone));
  BOOST_TEST(gone.rec == nullptr);
  BOOST_TEST(batch.writes().size() == 3u);
  BOOST_TEST(!batch.find(5, gone));
}

BOOST_AUTO_TEST_CASE(staged_batch_owns_a_record_found_elsewhere) {
  logic::staged_batch batch;
  auto stored = record(8, t0);
  logic::record_slot s;
  s.rec = &stored;
  s.base = storage::write_batch::key_of(stored);
  auto& entry = batch.own(s);
  BOOST_TEST(s.entry == &entry);
  BOOST_TEST(s.rec == &entry.rec);
  BOOST_TEST(entry.rec.task.id == 8u);
  BOOST_TEST((entry.base == std::optional<due_key>{due_key{t0, 8}}));
  // Owning stages no write.
  BOOST_TEST(batch.empty());
}

BOOST_AUTO_TEST_CASE(staged_batch_overlays_its_dead_letters_on_a_page) {
  logic::staged_batch batch;
  auto a = record(3, t0);
  logic::record_slot s;
  s.rec = &a;
  s.base = storage::write_batch::key_of(a);
  batch.bury(s, t0 + 1, "nacked");
  batch.revive(record(5, t0), nullptr);
  BOOST_TEST(batch.has_dead_changes());
  BOOST_TEST(batch.revived_from_store() == 1u);
  std::vector<storage::dead_letter> page{{record(1, t0), t0, "old"},
                                         {record(5, t0), t0, "revived"},
                                         {record(7, t0), t0, "old"}};
  batch.overlay_dead(page, 0);
  BOOST_REQUIRE(page.size() == 3u);
  BOOST_TEST(page[0].record.task.id == 1u);
  BOOST_TEST(page[1].record.task.id == 3u);
  BOOST_TEST(page[1].reason == "nacked");
  BOOST_TEST(page[2].record.task.id == 7u);
  // Only ids after `after` join.
  std::vector<storage::dead_letter> later;
  batch.overlay_dead(later, 3);
  BOOST_TEST(later.empty());
}

BOOST_AUTO_TEST_CASE(staged_batch_clears_for_the_next_batch) {
  logic::staged_batch batch;
  batch.put(record(4, t0));
  batch.consume(due_key{t0, 9});
  BOOST_TEST(batch.consumed().size() == 1u);
  batch.clear();
  BOOST_TEST(batch.empty());
  BOOST_TEST(!batch.contains(4));
  BOOST_TEST(batch.consumed().empty());
  BOOST_TEST(!batch.has_dead_changes());
}

// -- lease_tracker ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(lease_tracker_hands_back_what_a_failed_batch_popped) {
  logic::lease_tracker leases;
  leases.track(1, t0 + 10);
  leases.track(2, t0 + 20);
  leases.track(2, t0 + 30); // Replaces the older deadline.
  BOOST_TEST(leases.size() == 2u);
  std::vector<core::timer_entry> due;
  BOOST_TEST(leases.pop_due(t0 + 30, 10, due) == 2u);
  for (const auto& lease : due)
    leases.consume(lease);
  // Task 2's lease was tracked anew meanwhile: that one stays.
  leases.track(2, t0 + 99);
  leases.roll_back();
  BOOST_TEST(leases.contains(1));
  BOOST_TEST((leases.next_due() == std::optional<int64_t>{t0 + 10}));
  due.clear();
  BOOST_TEST(leases.pop_due(t0 + 50, 10, due) == 1u);
  BOOST_TEST((leases.next_due() == std::optional<int64_t>{t0 + 99}));
  // A committed batch forgets what it popped.
  leases.consume(due.front());
  leases.forget_consumed();
  leases.roll_back();
  BOOST_TEST(!leases.contains(1));
  leases.put_back(due);
  BOOST_TEST(leases.contains(1));
}

// A step of the wall clock moves every running lease by the step; what
// pops carries the deadline the record holds, and a rolled-back pop keeps
// its moved place.
BOOST_AUTO_TEST_CASE(lease_tracker_moves_running_leases_with_a_clock_step) {
  logic::lease_tracker leases;
  leases.track(1, t0 + 10);
  leases.track(2, t0 + 20);
  auto none = [](core::task_id) { return false; };
  leases.shift(-3'600'000, none);
  BOOST_TEST(
    (leases.next_due() == std::optional<int64_t>{t0 + 10 - 3'600'000}));
  leases.shift(1'000, none);
  std::vector<core::timer_entry> due;
  BOOST_TEST(leases.pop_due(t0 + 10 - 3'599'000, 10, due) == 1u);
  BOOST_REQUIRE(due.size() == 1u);
  BOOST_TEST(due[0].id == 1u);
  BOOST_TEST(due[0].due_ms == t0 + 10);
  leases.consume(due[0]);
  leases.roll_back();
  BOOST_TEST(
    (leases.next_due() == std::optional<int64_t>{t0 + 10 - 3'599'000}));
  // Tracked anew (a touch): the new deadline is on the new clock.
  leases.track(2, t0 + 50);
  due.clear();
  BOOST_TEST(leases.pop_due(t0 + 50, 10, due) == 2u);
  BOOST_REQUIRE(due.size() == 2u);
  BOOST_TEST(due[0].id == 1u);
  BOOST_TEST(due[1].id == 2u);
  BOOST_TEST(due[1].due_ms == t0 + 50);
  leases.put_back(due);
  BOOST_TEST(
    (leases.next_due() == std::optional<int64_t>{t0 + 10 - 3'599'000}));
  // A lease that stays (its delivery waits for its due time) keeps its
  // deadline.
  logic::lease_tracker held;
  held.track(7, t0 + 70);
  held.shift(-3'600'000, [](core::task_id id) { return id == 7; });
  BOOST_TEST((held.next_due() == std::optional<int64_t>{t0 + 70}));
}

BOOST_AUTO_TEST_CASE(lease_tracker_caps_a_lease_and_pops_it_as_stored) {
  logic::lease_tracker leases;
  leases.track_at_most(1, t0 + 3'600'000, t0 + 30'000);
  leases.track_at_most(2, t0 + 10, t0 + 30'000); // within the cap: as is
  BOOST_TEST((leases.next_due() == std::optional<int64_t>{t0 + 10}));
  std::vector<core::timer_entry> due;
  BOOST_TEST(leases.pop_due(t0 + 29'999, 10, due) == 1u);
  BOOST_REQUIRE(due.size() == 1u);
  BOOST_TEST(due[0].id == 2u);
  // A step moves the capped deadline; popped, it is the stored one.
  leases.shift(1'000, [](core::task_id) { return false; });
  due.clear();
  BOOST_TEST(leases.pop_due(t0 + 30'999, 10, due) == 0u);
  BOOST_TEST(leases.pop_due(t0 + 31'000, 10, due) == 1u);
  BOOST_REQUIRE(due.size() == 1u);
  BOOST_TEST(due[0].id == 1u);
  BOOST_TEST(due[0].due_ms == t0 + 3'600'000);
}

// -- topic_parking ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(topic_parking_holds_back_a_topic_without_consumers) {
  store_fixture f;
  storage::due_window window{*f.store};
  BOOST_REQUIRE(!window.refill(t0));
  logic::topic_parking parking{{0, 1024, 100}};
  BOOST_TEST(!parking.open("jobs"));
  parking.park(due_key{t0 - 2, 1}, "jobs");
  parking.park(due_key{t0 - 1, 2}, "jobs");
  BOOST_TEST(parking.any_parked());
  BOOST_TEST(parking.waiting().at("jobs") == 2u);
  parking.unpark(2);
  BOOST_TEST(parking.waiting().at("jobs") == 1u);
  parking.begin_pass();
  parking.set_available("jobs", true, window);
  BOOST_TEST(parking.open("jobs"));
  BOOST_TEST(window.contains(1));
  BOOST_TEST(!window.contains(2));
  BOOST_TEST(parking.waiting().empty());
}

BOOST_AUTO_TEST_CASE(topic_parking_saturates_at_the_cap_and_reopens_at_half) {
  store_fixture f;
  storage::due_window window{*f.store};
  BOOST_REQUIRE(!window.refill(t0));
  logic::topic_parking parking{{4, 1024, 100}};
  parking.set_available("jobs", true, window);
  for (core::task_id id = 1; id <= 4; ++id)
    parking.count_in_flight(id, "jobs");
  parking.count_in_flight(4, "jobs"); // Counted once.
  BOOST_TEST(!parking.open("jobs"));
  BOOST_TEST(parking.available("jobs"));
  parking.park(due_key{t0 - 1, 9}, "jobs");
  parking.uncount_in_flight(1, window);
  BOOST_TEST(!parking.open("jobs"));
  parking.begin_pass();
  parking.uncount_in_flight(2, window);
  BOOST_TEST(parking.open("jobs"));
  BOOST_TEST(window.contains(9));
}

BOOST_AUTO_TEST_CASE(topic_parking_drops_the_latest_beyond_its_bound) {
  store_fixture f;
  storage::due_window window{*f.store};
  BOOST_REQUIRE(!window.refill(t0));
  logic::topic_parking parking{{0, 1024, 2}};
  parking.park(due_key{t0 - 3, 1}, "jobs");
  parking.park(due_key{t0 - 1, 3}, "jobs");
  parking.park(due_key{t0 - 2, 2}, "jobs");
  // Two in memory, one dropped (still counted as waiting).
  BOOST_TEST(parking.waiting().at("jobs") == 3u);
  BOOST_TEST(!parking.reload_pending());
  parking.begin_pass();
  parking.set_available("jobs", true, window);
  BOOST_TEST(window.contains(1));
  BOOST_TEST(window.contains(2));
  BOOST_TEST(!window.contains(3));
  // The dropped entry comes back with a reload of the window.
  BOOST_TEST(parking.reload_pending());
  parking.reset();
  BOOST_TEST(!parking.reload_pending());
  BOOST_TEST(parking.open("jobs"));
}

BOOST_AUTO_TEST_CASE(topic_parking_releases_once_per_pass) {
  store_fixture f;
  storage::due_window window{*f.store};
  BOOST_REQUIRE(!window.refill(t0));
  // One fire pass pops at most two.
  logic::topic_parking parking{{0, 2, 100}};
  for (core::task_id id = 1; id <= 3; ++id)
    parking.park(due_key{t0 - 10 + static_cast<int64_t>(id), id}, "jobs");
  parking.begin_pass();
  parking.set_available("jobs", true, window);
  BOOST_TEST(window.size() == 2u);
  BOOST_TEST(parking.release_waiting());
  // The end of the next pass takes up the next lot.
  parking.begin_pass();
  parking.release_deferred(window);
  BOOST_TEST(window.size() == 3u);
  BOOST_TEST(!parking.release_waiting());
}

// -- record_cache -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(record_cache_keeps_to_its_budget) {
  auto one = logic::record_cache::footprint(record(1, t0));
  logic::record_cache cache{2 * one};
  cache.remember(record(1, t0));
  cache.remember_new(record(2, t0));
  cache.remember(record(3, t0)); // Does not fit.
  BOOST_TEST(cache.size() == 2u);
  BOOST_TEST(cache.bytes() == 2 * one);
  BOOST_TEST(!cache.contains(3));
  // A bigger version of a cached record that no longer fits drops it.
  auto big = record(2, t0);
  big.task.payload.assign(one, 'x');
  cache.remember(std::move(big));
  BOOST_TEST(!cache.contains(2));
  BOOST_TEST(cache.bytes() == one);
  auto newer = record(1, t0 + 7);
  cache.remember(std::move(newer));
  BOOST_TEST(cache.find(1)->task.due_ms == t0 + 7);
  std::optional<task_record> out;
  BOOST_TEST(cache.take(1, [&](task_record&& rec) { out = std::move(rec); }));
  BOOST_TEST(out->task.due_ms == t0 + 7);
  BOOST_TEST(cache.size() == 0u);
  BOOST_TEST(cache.bytes() == 0u);
  BOOST_TEST(!cache.take(1, [](task_record&&) {}));
}

BOOST_AUTO_TEST_CASE(record_cache_shrinks_its_table_after_a_burst) {
  logic::record_cache cache{size_t{1} << 30};
  for (core::task_id id = 1; id <= 5000; ++id)
    cache.remember_new(record(id, t0));
  auto grown = cache.slots();
  for (core::task_id id = 1; id <= 4990; ++id)
    cache.forget(id);
  cache.shrink();
  BOOST_TEST(cache.slots() < grown);
  BOOST_TEST(cache.size() == 10u);
}

// -- overdue_pacer ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(overdue_pacer_paces_the_backlog_of_the_downtime) {
  // 100 a second: a burst of 10 tokens, one more every 10 ms.
  logic::overdue_pacer pacer{{1'000, 100, 4}};
  pacer.start_pass(t0);
  auto late_before = pacer.late_before_ms(t0);
  BOOST_TEST(late_before == t0 - 1'000);
  BOOST_TEST(pacer.late(due_key{t0 - 5'000, 1}, late_before));
  BOOST_TEST(!pacer.late(due_key{t0 - 500, 2}, late_before));
  // Later, only what was overdue at the start is backlog.
  pacer.start_pass(t0 + 60'000);
  BOOST_TEST(pacer.late_before_ms(t0 + 60'000) == t0 - 1'000);
  BOOST_TEST(!pacer.must_queue());
  for (core::task_id id = 1; id <= 4; ++id)
    BOOST_TEST(pacer.enqueue(due_key{t0 - 9'000, id}));
  BOOST_TEST(pacer.full());
  BOOST_TEST(!pacer.enqueue(due_key{t0 - 9'000, 5}));
  BOOST_TEST(pacer.must_queue());
  std::vector<due_key> out;
  BOOST_TEST(pacer.take_turns(3, out) == 3u);
  BOOST_TEST(out.front().id == 1u);
  pacer.put_back(out);
  BOOST_TEST(pacer.size() == 4u);
}

BOOST_AUTO_TEST_CASE(overdue_pacer_spends_and_earns_tokens) {
  logic::overdue_pacer pacer{{1'000, 100, 100}};
  pacer.start_pass(t0);
  for (int i = 0; i < 10; ++i)
    pacer.spend_token();
  BOOST_TEST(pacer.next_token_ms() == t0 + 10);
  pacer.enqueue(due_key{t0 - 9'000, 1});
  BOOST_TEST(!pacer.turn_waiting());
  pacer.start_pass(t0 + 10);
  BOOST_TEST(pacer.turn_waiting());
  // A clock that goes back earns nothing.
  pacer.spend_token();
  pacer.start_pass(t0 - 50);
  BOOST_TEST(!pacer.turn_waiting());
  // Without pacing nothing is late.
  logic::overdue_pacer off{{1'000, 0, 100}};
  off.start_pass(t0);
  BOOST_TEST(!off.late(due_key{0, 1}, off.late_before_ms(t0)));
}

// -- outgoing_fires -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(outgoing_fires_take_back_what_has_not_gone_out) {
  logic::outgoing_fires fires;
  fires.stage(logic::fired_task{due_key{t0, 1}, 0, 1, false});
  BOOST_TEST(fires.any_staged());
  BOOST_TEST(fires.take_back(1));
  BOOST_TEST(!fires.take_back(2));
  fires.clear_staged();
  BOOST_TEST(!fires.take_back(1));
  std::vector<logic::held_delivery> out(2);
  out[0].delivery->mutable_id()->set_task_id(1);
  out[1].delivery->mutable_id()->set_task_id(2);
  fires.hold(out);
  BOOST_TEST(fires.held() == 2u);
  // Released: it went out, a revoke cannot take it back.
  BOOST_TEST(out[0].hold->claim());
  BOOST_TEST(!fires.take_back(1));
  BOOST_TEST(fires.take_back(2));
  BOOST_TEST(!out[1].hold->claim());
  BOOST_TEST(fires.held() == 0u);
  fires.drop_hold(2);
  BOOST_TEST(!fires.holds(2));
  BOOST_TEST(fires.holds(1));
}

// -- unwritten_fires ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(unwritten_fires_complete_the_stored_record) {
  storage::shard_meta meta;
  meta.shard_count = 2;
  meta.next_local_id = 10;
  meta.fire_horizon_ms = t0;
  logic::unwritten_fires unwritten{meta};
  auto rec = record(4, t0 - 100);
  // A first attempt within the horizon may skip its write.
  auto fired = rec;
  fired.task.attempt = 1;
  BOOST_TEST(unwritten.may_skip_write(fired, due_key{t0 - 100, 4},
                                      due_key{t0 - 100, 4}));
  BOOST_TEST(!unwritten.may_skip_write(fired, due_key{t0 + 100, 4},
                                       due_key{t0 + 100, 4}));
  fired.state = task_state::in_flight;
  fired.lease_deadline_ms = t0 + 5'000;
  unwritten.mark(fired);
  auto stored = rec;
  unwritten.complete_stored(stored);
  BOOST_TEST((stored.state == task_state::in_flight));
  BOOST_TEST(stored.task.attempt == 1u);
  BOOST_TEST(stored.lease_deadline_ms == t0 + 5'000);
  unwritten.forget(4);
  BOOST_TEST(!unwritten.marked(4));
}

BOOST_AUTO_TEST_CASE(
  unwritten_fires_count_an_attempt_the_last_run_may_have_spent) {
  storage::shard_meta meta;
  meta.shard_count = 2;
  meta.next_local_id = 10;
  meta.fire_horizon_ms = t0;
  logic::unwritten_fires unwritten{meta};
  auto old = record(2 * 9 + 1, t0 - 100); // Local id 9: from the last run.
  unwritten.complete_stored(old);
  BOOST_TEST(old.task.attempt == 1u);
  auto created = record(2 * 10 + 1, t0 - 100); // Created since the restart.
  unwritten.complete_stored(created);
  BOOST_TEST(created.task.attempt == 0u);
  auto beyond = record(2 * 9 + 1, t0 + 100); // Past the horizon.
  unwritten.complete_stored(beyond);
  BOOST_TEST(beyond.task.attempt == 0u);
}

BOOST_AUTO_TEST_CASE(unwritten_fires_say_when_fires_need_an_fsync) {
  storage::shard_meta meta;
  logic::unwritten_fires unwritten{meta};
  std::vector<logic::fired_task> fires{{due_key{t0, 1}, 0, 1, true}};
  BOOST_TEST(!unwritten.must_sync(fires));
  storage::write_batch batch;
  batch.put(record(1, t0));
  unwritten.note_unsynced(batch);
  BOOST_TEST(unwritten.must_sync(fires));
  unwritten.synced();
  BOOST_TEST(!unwritten.must_sync(fires));
  fires.push_back({due_key{t0, 2}, 0, 2, false});
  BOOST_TEST(unwritten.must_sync(fires));
  BOOST_TEST(logic::unwritten_fires::horizon_after(t0, 32) ==
             t0 + 32 + logic::unwritten_fires::horizon_step_ms);
}

// -- idempotency_keys ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(idempotency_keys_name_one_task_per_key) {
  store_fixture f;
  logic::idempotency_keys keys{*f.store, 1'000};
  logic::staged_batch batch;
  auto none = keys.lookup("k", 77, t0);
  BOOST_REQUIRE(none);
  BOOST_TEST(!none->has_value());
  keys.stage("k", 12, 77, t0, batch);
  auto staged = keys.lookup("k", 77, t0);
  BOOST_REQUIRE(staged);
  BOOST_TEST(**staged == 12u);
  auto conflict = keys.lookup("k", 78, t0);
  BOOST_REQUIRE(!conflict);
  BOOST_TEST((conflict.err().code() == core::errc::idempotency_conflict));
  // Committed, then forgotten after its retention.
  BOOST_REQUIRE(!f.store->commit(batch.writes()));
  keys.clear();
  BOOST_TEST(**keys.lookup("k", 77, t0 + 999) == 12u);
  BOOST_TEST(!keys.lookup("k", 77, t0 + 1'001)->has_value());
  BOOST_TEST(!keys.expire(t0 + 1'001, 10));
}
