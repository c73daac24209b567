#define BOOST_TEST_MODULE shard_logic
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "core/recurrence.hpp"
#include "core/time_range.hpp"
#include "logic/record_cache.hpp"
#include "logic/shard_logic.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "storage/task_store.hpp"
#include "tests/storage/test_support.hpp"

using dally::core::errc;
using dally::core::task_id;
using dally::logic::change_outcome;
using dally::logic::dead_page;
using dally::logic::delivery_ref;
using dally::logic::release_queue;
using dally::logic::scheduled_task;
using dally::logic::shard_logic;
using dally::logic::shard_options;
using dally::logic::task_info;
using dally::storage::due_key;
using dally::storage::task_state;
using dally::storage::test::error_of;
using dally::storage::test::temp_dir;

namespace core = dally::core;
namespace storage = dally::storage;
namespace v1 = dally::v1;

namespace {

constexpr int64_t t0 = 1'700'000'000'000;
constexpr int64_t lease_ms = 10'000;
constexpr int64_t backoff_ms = 1'000;

/// Forwards to a real store; fails commits or reads on demand, to test
/// that the logic rolls back cleanly.
class failing_store final : public storage::task_store {
public:
  explicit failing_store(storage::task_store& inner) : inner_(inner) {
    // nop
  }

  bool fail_commits = false;
  bool fail_reads = false;
  size_t commits = 0;
  /// Records read (get and get_many).
  size_t reads = 0;

  core::error commit(const storage::write_batch& batch) override {
    if (fail_commits)
      return core::error{errc::io_error, "injected commit failure"};
    ++commits;
    return inner_.commit(batch);
  }

  core::error sync_if_due(int64_t now_ms) override {
    return inner_.sync_if_due(now_ms);
  }

  core::error sync() override { return inner_.sync(); }

  bool sync_pending() const noexcept override { return inner_.sync_pending(); }

  core::error index_deferred() override { return inner_.index_deferred(); }

  core::error write_failure() const override { return inner_.write_failure(); }

  task_id allocate_id() override { return inner_.allocate_id(); }

  core::result<std::optional<storage::task_record>> get(task_id id) override {
    if (fail_reads)
      return read_error();
    ++reads;
    return inner_.get(id);
  }

  core::result<std::vector<storage::task_record>>
  get_many(std::span<const task_id> ids) override {
    if (fail_reads)
      return read_error();
    reads += ids.size();
    return inner_.get_many(ids);
  }

  core::result<std::vector<storage::due_key>>
  scan_due(storage::due_key after, int64_t before_ms, size_t limit) override {
    return inner_.scan_due(after, before_ms, limit);
  }

  core::result<std::optional<storage::idempotency_entry>>
  find_key(std::string_view key, int64_t now_ms) override {
    return inner_.find_key(key, now_ms);
  }

  core::result<size_t> expire_keys(int64_t now_ms, size_t limit) override {
    return inner_.expire_keys(now_ms, limit);
  }

  core::result<std::vector<storage::dead_letter>>
  dead_letters(task_id after, size_t limit) override {
    return inner_.dead_letters(after, limit);
  }

  core::result<std::optional<storage::dead_letter>>
  get_dead(task_id id) override {
    return inner_.get_dead(id);
  }

  const storage::shard_meta& meta() const noexcept override {
    return inner_.meta();
  }

  core::error set_epoch(uint64_t epoch) override {
    return inner_.set_epoch(epoch);
  }

  void raise_fire_horizon(int64_t horizon_ms) override {
    inner_.raise_fire_horizon(horizon_ms);
  }

  const std::vector<storage::quarantined_record>& quarantined() const override {
    return inner_.quarantined();
  }

  storage::store_stats stats() const override { return inner_.stats(); }

private:
  static core::error read_error() {
    return core::error{errc::io_error, "injected read failure"};
  }

  storage::task_store& inner_;
};

shard_options test_options() {
  shard_options opts;
  opts.window.window_ms = 60'000;
  opts.default_policy.lease_ms = lease_ms;
  opts.default_policy.max_attempts = 3;
  opts.default_policy.backoff_initial_ms = backoff_ms;
  opts.default_policy.backoff_multiplier_permille = 2'000;
  opts.default_policy.backoff_max_ms = 60'000;
  return opts;
}

delivery_ref ref_of(const v1::Delivery& d) {
  return delivery_ref{d.id().task_id(), d.id().occurrence(), d.id().attempt()};
}

template<class T>
errc code_of(const core::result<T>& res) {
  return res ? errc::none : res.err().code();
}

/// A shard over a real RocksDB store (no fsync, for speed) behind a
/// failing_store, with the clock in the test's hands. Committed deliveries
/// go to `releases`, which hands them out when due, as the notifier does.
struct fixture {
  temp_dir dir;
  shard_options opts = test_options();
  std::unique_ptr<storage::rocks_task_store> rocks;
  std::unique_ptr<failing_store> store;
  std::unique_ptr<shard_logic> logic;
  release_queue releases;
  int64_t now = t0;
  /// The store's durability level at the next open.
  storage::durability durability = storage::durability::none;

  fixture() { open(); }

  void open() {
    storage::store_options so;
    so.path = (dir.path() / "shard").string();
    so.durability = durability;
    so.write_buffer_bytes = 1 << 20;
    so.block_cache_bytes = 1 << 20;
    auto res = storage::rocks_task_store::open(so);
    if (!res)
      BOOST_FAIL("open failed: " << res.err());
    rocks = std::move(*res);
    store = std::make_unique<failing_store>(*rocks);
    logic = std::make_unique<shard_logic>(*store, opts);
    logic->set_topic_available("jobs", true);
  }

  /// Drops the logic and the store, as a crash would (held deliveries
  /// included), and opens both again.
  void restart() {
    releases = release_queue{};
    logic.reset();
    store.reset();
    rocks.reset();
    open();
  }

  /// The store's due index, in order, deferred entries written first.
  std::vector<due_key> scan() {
    BOOST_REQUIRE(!rocks->index_deferred());
    auto got = rocks->scan_due({std::numeric_limits<int64_t>::min(), 0},
                               std::numeric_limits<int64_t>::max(), 1000);
    BOOST_REQUIRE(got);
    return *got;
  }

  /// Rebuilds the logic with other options (same store).
  void reconfigure(shard_options next) {
    opts = next;
    logic.reset();
    logic = std::make_unique<shard_logic>(*store, opts);
    logic->set_topic_available("jobs", true);
  }

  core::task make(int64_t due_ms, std::string payload = "payload",
                  std::string topic = "jobs") {
    core::task t;
    t.topic = std::move(topic);
    t.payload = std::move(payload);
    t.due_ms = due_ms;
    t.recurrence = *core::recurrence::at(due_ms);
    t.policy = opts.default_policy;
    return t;
  }

  /// Commits; returns the deliveries due now (held ones included).
  std::vector<v1::Delivery> commit() {
    auto res = logic->commit(now);
    BOOST_REQUIRE_MESSAGE(!res.err, "commit failed: " << res.err);
    BOOST_REQUIRE(!logic->dirty());
    for (auto& item : res.deliveries)
      releases.push(std::move(item));
    std::vector<v1::Delivery> out;
    for (auto& d : releases.pop_due(now))
      out.push_back(std::move(*d));
    return out;
  }

  /// The next time the shard or its held deliveries need attention.
  int64_t next_event_ms() const {
    return std::min(logic->next_wakeup_ms(), releases.next_release_ms());
  }

  /// Schedules and commits one task; returns its id.
  task_id add(int64_t due_ms, std::string payload = "payload",
              std::string topic = "jobs") {
    auto res =
      logic->schedule(now, make(due_ms, std::move(payload), std::move(topic)));
    BOOST_REQUIRE_MESSAGE(res, "schedule failed: " << error_of(res));
    BOOST_REQUIRE(res->created);
    auto out = commit();
    BOOST_REQUIRE(out.empty());
    return res->id;
  }

  /// Schedules a client request at `now` and commits it.
  scheduled_task add(const v1::ScheduleRequest& req) {
    auto t = dally::logic::to_task(req, now, opts);
    BOOST_REQUIRE_MESSAGE(t, "to_task failed: " << error_of(t));
    auto res = logic->schedule(now, std::move(*t));
    BOOST_REQUIRE_MESSAGE(res, "schedule failed: " << error_of(res));
    commit();
    return *res;
  }

  /// Fires at `at` and commits; returns the deliveries.
  std::vector<v1::Delivery> fire(int64_t at) {
    now = at;
    auto err = logic->fire(at);
    BOOST_REQUIRE_MESSAGE(!err, "fire failed: " << err);
    return commit();
  }

  /// Fires at `at` until the logic has nothing more to do right now.
  std::vector<v1::Delivery> fire_all(int64_t at) {
    std::vector<v1::Delivery> out;
    for (int i = 0; i < 1000; ++i) {
      auto got = fire(at);
      out.insert(out.end(), got.begin(), got.end());
      if (next_event_ms() > at)
        return out;
    }
    BOOST_FAIL("the logic keeps asking to be woken at once");
    return out;
  }

  v1::Delivery fire_one(int64_t at) {
    auto got = fire(at);
    BOOST_REQUIRE_EQUAL(got.size(), 1u);
    return got.front();
  }

  void ack(const v1::Delivery& d) {
    auto err = logic->ack(now, ref_of(d));
    BOOST_REQUIRE_MESSAGE(!err, "ack failed: " << err);
    BOOST_REQUIRE(commit().empty());
  }

  task_info get(task_id id) {
    auto res = logic->get(id);
    BOOST_REQUIRE_MESSAGE(res, "get failed: " << error_of(res));
    return *res;
  }

  bool live(task_id id) {
    auto res = logic->get(id);
    return res && !res->dead;
  }

  change_outcome revoke(task_id id) {
    auto res = logic->revoke(now, id);
    BOOST_REQUIRE_MESSAGE(res, "revoke failed: " << error_of(res));
    commit();
    return *res;
  }

  /// Drives a delivery through lease expiries until it is dead.
  void bury(task_id id, int64_t due_ms) {
    auto d = fire_one(std::max(now, due_ms));
    BOOST_REQUIRE_EQUAL(d.id().task_id(), id);
    for (;;) {
      BOOST_REQUIRE(fire(d.lease_deadline_ms()).empty());
      if (get(id).dead)
        return;
      d = fire_one(get(id).record.index_ms());
    }
  }
};

v1::ScheduleRequest request(std::string topic = "jobs",
                            std::string payload = "payload") {
  v1::ScheduleRequest req;
  req.set_topic(std::move(topic));
  req.set_payload(std::move(payload));
  return req;
}

/// `req` due at `at_ms` with a single attempt (so its first delivery is
/// always written) and the fixture's lease and backoff.
v1::ScheduleRequest single_attempt(v1::ScheduleRequest req, int64_t at_ms) {
  req.mutable_when()->set_at_ms(at_ms);
  auto* p = req.mutable_policy();
  p->set_lease_ms(lease_ms);
  p->set_max_attempts(1);
  p->set_backoff_initial_ms(backoff_ms);
  p->set_backoff_multiplier_permille(1'000);
  p->set_backoff_max_ms(backoff_ms);
  return req;
}

} // namespace

// -- the basic path -----------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(fires_at_due_never_before_and_ack_removes, fixture) {
  auto id = add(t0 + 1'000, "hello");
  auto info = get(id);
  BOOST_TEST(!info.dead);
  BOOST_TEST((info.record.state == task_state::pending));
  BOOST_TEST(info.record.task.due_ms == t0 + 1'000);
  BOOST_TEST(fire(t0 + 999).empty());
  auto d = fire_one(t0 + 1'000);
  BOOST_TEST(d.id().task_id() == id);
  BOOST_TEST(d.id().occurrence() == 0u);
  BOOST_TEST(d.id().attempt() == 1u);
  BOOST_TEST(d.attempt() == 1u);
  BOOST_TEST(d.topic() == "jobs");
  BOOST_TEST(d.payload() == "hello");
  BOOST_TEST(d.due_ms() == t0 + 1'000);
  BOOST_TEST(d.fire_ms() == t0 + 1'000);
  BOOST_TEST(d.lease_deadline_ms() == t0 + 1'000 + lease_ms);
  info = get(id);
  BOOST_TEST((info.record.state == task_state::in_flight));
  BOOST_TEST(info.record.task.attempt == 1u);
  BOOST_TEST(fire(t0 + 2'000).empty());
  ack(d);
  BOOST_TEST(code_of(logic->get(id)) == errc::not_found);
  // Its lease deadline passes without a redelivery.
  BOOST_TEST(fire(t0 + 1'000 + lease_ms + 60'000).empty());
  const auto& c = logic->counters();
  BOOST_TEST(c.scheduled == 1u);
  BOOST_TEST(c.fired == 1u);
  BOOST_TEST(c.acked == 1u);
  BOOST_TEST(c.redelivered == 0u);
  BOOST_TEST(c.commits == 3u);
}

BOOST_FIXTURE_TEST_CASE(past_due_fires_at_once, fixture) {
  auto id = add(t0 - 5'000);
  auto d = fire_one(t0);
  BOOST_TEST(d.id().task_id() == id);
  BOOST_TEST(d.due_ms() == t0 - 5'000);
  BOOST_TEST(d.fire_ms() == t0);
}

// -- firing ahead (fire_lead_ms) ----------------------------------------------

BOOST_FIXTURE_TEST_CASE(fires_ahead_and_holds_until_due, fixture) {
  auto lead = opts.fire_lead_ms;
  BOOST_REQUIRE(lead >= 4);
  auto due = t0 + 1'000;
  auto id = add(due);
  BOOST_TEST(fire(due - lead - 1).empty());
  BOOST_TEST((get(id).record.state == task_state::pending));
  // Within the lead: committed as fired, not delivered.
  BOOST_TEST(fire(due - lead).empty());
  BOOST_TEST(logic->held_size() == 1u);
  auto info = get(id);
  BOOST_TEST((info.record.state == task_state::in_flight));
  BOOST_TEST(info.record.task.attempt == 1u);
  BOOST_TEST(info.record.lease_deadline_ms == due + lease_ms);
  BOOST_TEST(logic->counters().fired == 1u);
  BOOST_TEST(releases.next_release_ms() == due);
  BOOST_TEST(fire(due - 1).empty());
  // Released at its due time, stamped as fired then.
  auto d = fire_one(due);
  BOOST_TEST(d.id().task_id() == id);
  BOOST_TEST(d.attempt() == 1u);
  BOOST_TEST(d.fire_ms() == due);
  BOOST_TEST(d.lease_deadline_ms() == due + lease_ms);
  BOOST_TEST(logic->held_size() == 0u);
  ack(d);
  BOOST_TEST(code_of(logic->get(id)) == errc::not_found);
}

BOOST_FIXTURE_TEST_CASE(held_deliveries_go_out_without_the_shard, fixture) {
  auto due = t0 + 1'000;
  add(due);
  add(due + 1);
  BOOST_TEST(fire(due + 1 - opts.fire_lead_ms).empty());
  BOOST_TEST(logic->held_size() == 2u);
  // The shard has nothing to do until the leases run out: releasing is the
  // notifier's (here the fixture's release_queue).
  BOOST_TEST(logic->next_wakeup_ms() > due + 1);
  BOOST_TEST(releases.pop_due(due - 1).empty());
  auto got = releases.pop_due(due);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0]->due_ms() == due);
  BOOST_TEST(got[0]->fire_ms() == due);
  BOOST_TEST(releases.next_release_ms() == due + 1);
  BOOST_TEST(logic->held_size() == 1u);
  got = releases.pop_due(due + 5);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0]->fire_ms() == due + 5);
  BOOST_TEST(logic->held_size() == 0u);
  BOOST_TEST(!logic->dirty());
}

BOOST_FIXTURE_TEST_CASE(a_held_task_is_revoked_or_rescheduled_as_pending,
                        fixture) {
  auto due = t0 + 1'000;
  auto a = add(due, "a");
  auto b = add(due, "b");
  auto c = add(due, "c");
  BOOST_TEST(fire(due - opts.fire_lead_ms).empty());
  BOOST_TEST(logic->held_size() == 3u);
  // Not sent yet: a revoke stops the delivery, a reschedule undoes the fire.
  BOOST_TEST((revoke(a) == change_outcome::done));
  auto moved = logic->reschedule(now, b, due + 5'000);
  BOOST_REQUIRE(moved);
  BOOST_TEST((*moved == change_outcome::done));
  BOOST_TEST(commit().empty());
  auto info = get(b);
  BOOST_TEST((info.record.state == task_state::pending));
  BOOST_TEST(info.record.task.attempt == 0u);
  BOOST_TEST(info.record.task.due_ms == due + 5'000);
  BOOST_TEST(logic->held_size() == 1u);
  // Only c goes out at the due time; b fires at its new time, attempt 1.
  auto d = fire_one(due);
  BOOST_TEST(d.id().task_id() == c);
  // Sent: now it is in flight for revoke and reschedule alike.
  moved = logic->reschedule(now, c, due + 9'000);
  BOOST_REQUIRE(moved);
  BOOST_TEST((*moved == change_outcome::in_flight));
  ack(d);
  BOOST_TEST(fire(due + 5'000 - opts.fire_lead_ms).empty());
  auto db = fire_one(due + 5'000);
  BOOST_TEST(db.id().task_id() == b);
  BOOST_TEST(db.attempt() == 1u);
  BOOST_TEST(code_of(logic->get(a)) == errc::not_found);
}

BOOST_FIXTURE_TEST_CASE(a_failed_revoke_of_a_held_task_loses_no_task, fixture) {
  auto due = t0 + 1'000;
  auto id = add(due);
  BOOST_TEST(fire(due - opts.fire_lead_ms).empty());
  auto res = logic->revoke(now, id);
  BOOST_REQUIRE(res);
  BOOST_TEST((*res == change_outcome::done));
  store->fail_commits = true;
  BOOST_TEST(logic->commit(now).err);
  store->fail_commits = false;
  // The revoke did not happen, but its hold was cancelled when it was
  // staged: the task stays in flight and comes back after its lease, as
  // after a crash.
  BOOST_TEST(fire(due).empty());
  BOOST_TEST((get(id).record.state == task_state::in_flight));
  BOOST_TEST(fire(due + lease_ms).empty());
  auto d = fire_one(due + lease_ms + backoff_ms);
  BOOST_TEST(d.id().task_id() == id);
  BOOST_TEST(d.attempt() == 2u);
}

BOOST_FIXTURE_TEST_CASE(a_hold_released_first_makes_a_revoke_in_flight,
                        fixture) {
  auto due = t0 + 1'000;
  auto id = add(due);
  now = due - opts.fire_lead_ms;
  BOOST_REQUIRE(!logic->fire(now));
  auto res = logic->commit(now);
  BOOST_REQUIRE(!res.err);
  BOOST_REQUIRE_EQUAL(res.deliveries.size(), 1u);
  auto& item = res.deliveries.front();
  BOOST_TEST(item.release_ms == due);
  BOOST_TEST(item.hold->pending());
  // The notifier's release wins the race: the revoke finds it out.
  BOOST_TEST(item.hold->claim());
  BOOST_TEST(!item.hold->cancel());
  BOOST_TEST((revoke(id) == change_outcome::in_flight));
  // The other way round: a cancelled hold is never released.
  auto other = add(due + 10);
  now = due + 10 - opts.fire_lead_ms;
  BOOST_REQUIRE(!logic->fire(now));
  res = logic->commit(now);
  BOOST_REQUIRE_EQUAL(res.deliveries.size(), 1u);
  auto second = std::move(res.deliveries.front());
  BOOST_TEST((revoke(other) == change_outcome::done));
  BOOST_TEST(!second.hold->pending());
  releases.push(std::move(second));
  BOOST_TEST(releases.pop_due(due + 10).empty());
  BOOST_TEST(releases.empty());
}

BOOST_FIXTURE_TEST_CASE(a_stream_fires_in_groups_and_never_early, fixture) {
  // One task due every ms for 200 ms, the shard woken whenever it asks:
  // every delivery goes out exactly at its due time, and since the shard
  // looks ahead at most every quarter of the lead, a commit carries
  // several tasks.
  constexpr int n = 200;
  auto first = t0 + 1'000;
  for (int i = 0; i < n; ++i)
    logic->schedule(now, make(first + i));
  commit();
  auto commits_before = logic->counters().commits;
  int delivered = 0;
  for (int step = 0; step < 10 * n && delivered < n; ++step) {
    auto at = std::max(next_event_ms(), now);
    for (const auto& d : fire(at)) {
      BOOST_TEST(d.fire_ms() == d.due_ms());
      ++delivered;
    }
  }
  BOOST_TEST(delivered == n);
  auto fire_commits = logic->counters().commits - commits_before;
  BOOST_TEST(fire_commits <= n / (opts.fire_lead_ms / 4) + 2);
  BOOST_TEST(logic->held_size() == 0u);
}

BOOST_FIXTURE_TEST_CASE(without_a_lead_tasks_fire_at_their_due_time, fixture) {
  auto next = opts;
  next.fire_lead_ms = 0;
  reconfigure(next);
  auto due = t0 + 1'000;
  auto id = add(due);
  BOOST_TEST(fire(due - 1).empty());
  BOOST_TEST((get(id).record.state == task_state::pending));
  BOOST_TEST(logic->next_wakeup_ms() == due);
  BOOST_TEST(fire_one(due).id().task_id() == id);
}

BOOST_FIXTURE_TEST_CASE(a_held_task_lost_in_a_crash_comes_back_after_its_lease,
                        fixture) {
  auto due = t0 + 1'000;
  auto id = add(due);
  BOOST_TEST(fire(due - opts.fire_lead_ms).empty());
  restart();
  // Committed as in flight: a restarted shard waits for the lease, then
  // redelivers with attempt 2, as for any delivery a crash interrupted.
  BOOST_TEST(fire(due).empty());
  BOOST_TEST(fire(due + lease_ms).empty());
  auto d = fire_one(due + lease_ms + backoff_ms);
  BOOST_TEST(d.id().task_id() == id);
  BOOST_TEST(d.attempt() == 2u);
}

BOOST_FIXTURE_TEST_CASE(next_wakeup_follows_the_work, fixture) {
  add(t0 + 1'000);
  BOOST_TEST(fire(t0).empty());
  // Fired a lead ahead of its time, delivered when due.
  BOOST_TEST(logic->next_wakeup_ms() == t0 + 1'000 - opts.fire_lead_ms);
  auto d = fire_one(t0 + 1'000);
  BOOST_TEST(logic->next_wakeup_ms() == d.lease_deadline_ms());
  ack(d);
  BOOST_TEST(logic->next_wakeup_ms() > t0 + 1'000 + lease_ms);
  BOOST_TEST(logic->window_size() == 0u);
}

BOOST_FIXTURE_TEST_CASE(fire_batch_bounds_one_fire, fixture) {
  auto next = opts;
  next.fire_batch = 3;
  reconfigure(next);
  for (int i = 0; i < 7; ++i)
    add(t0 + i);
  BOOST_TEST(fire(t0 + 100).size() == 3u);
  BOOST_TEST(logic->next_wakeup_ms() <= t0 + 100);
  BOOST_TEST(fire(t0 + 100).size() == 3u);
  BOOST_TEST(fire(t0 + 100).size() == 1u);
  BOOST_TEST(fire(t0 + 100).empty());
}

// -- validation ---------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(bad_tasks_are_refused_and_change_nothing, fixture) {
  auto before_meta = store->meta();
  auto expect = [&](core::task t, errc code) {
    auto res = logic->schedule(now, std::move(t));
    BOOST_TEST(code_of(res) == code, "got " << error_of(res));
    BOOST_TEST(!logic->dirty());
  };
  auto far = make(t0);
  far.due_ms = t0 + opts.limits.max_delay_ms + 1;
  expect(far, errc::delay_too_large);
  auto overflow = make(t0);
  overflow.due_ms = std::numeric_limits<int64_t>::max();
  expect(overflow, errc::invalid_time);
  auto negative = make(t0);
  negative.due_ms = -1;
  expect(negative, errc::invalid_time);
  auto big = make(t0);
  big.payload.assign(opts.limits.max_payload_bytes + 1, 'x');
  expect(big, errc::payload_too_large);
  auto no_topic = make(t0);
  no_topic.topic.clear();
  expect(no_topic, errc::invalid_topic);
  auto bad_policy = make(t0);
  bad_policy.policy.lease_ms = 0;
  expect(bad_policy, errc::invalid_policy);
  auto empty_key = make(t0);
  empty_key.idempotency_key = "";
  expect(empty_key, errc::invalid_idempotency_key);
  // Nothing was written, no id was used up, nothing fires.
  BOOST_TEST(commit().empty());
  BOOST_TEST(store->commits == 0u);
  BOOST_TEST(store->meta().next_local_id == before_meta.next_local_id);
  BOOST_TEST(fire(t0 + 3'700 * core::ms_per_day).empty());
  BOOST_TEST(logic->counters().scheduled == 0u);
  // A good task still gets the first id.
  auto id = add(t0);
  BOOST_TEST(id == before_meta.next_local_id * before_meta.shard_count +
                     before_meta.shard);
}

BOOST_FIXTURE_TEST_CASE(bad_requests_are_refused_by_to_task, fixture) {
  auto expect = [&](const v1::ScheduleRequest& req, errc code) {
    auto t = dally::logic::to_task(req, now, opts);
    BOOST_TEST(code_of(t) == code, "got " << error_of(t));
  };
  auto req = request();
  req.mutable_when()->set_in_ms(opts.limits.max_delay_ms + 1);
  expect(req, errc::delay_too_large);
  req.mutable_when()->set_in_ms(-1);
  expect(req, errc::invalid_time);
  req.mutable_when()->set_at_ms(std::numeric_limits<int64_t>::max());
  expect(req, errc::invalid_time);
  req.mutable_when()->set_at_ms(-5);
  expect(req, errc::invalid_time);
  // now + delay beyond the supported range.
  auto late = dally::logic::to_task(
    [] {
      auto r = request();
      r.mutable_when()->set_in_ms(10'000);
      return r;
    }(),
    core::max_time_ms - 5, opts);
  BOOST_TEST(code_of(late) == errc::invalid_time);
  req = request("jobs", std::string(opts.limits.max_payload_bytes + 1, 'x'));
  expect(req, errc::payload_too_large);
  req = request("");
  expect(req, errc::invalid_topic);
  req = request();
  req.mutable_when()->set_every_ms(0);
  expect(req, errc::invalid_period);
  req = request();
  req.mutable_when()->mutable_cron()->set_expression("61 * * * *");
  expect(req, errc::malformed_cron);
  req = request();
  req.mutable_when()->mutable_cron()->set_expression("* * * * *");
  req.mutable_when()->mutable_cron()->set_zone("Mars/Olympus");
  expect(req, errc::unknown_time_zone);
  req = request();
  req.mutable_when()->set_every_ms(1'000);
  req.mutable_when()->set_max_count(0);
  expect(req, errc::invalid_count);
  req = request();
  req.mutable_when()->mutable_intervals();
  expect(req, errc::empty_intervals);
  req = request();
  req.mutable_when()->set_at_ms(t0);
  req.mutable_when()->set_max_count(2);
  expect(req, errc::invalid_request);
  req = request();
  req.mutable_policy()->set_lease_ms(1'000);
  expect(req, errc::invalid_policy); // max_attempts 0
  // A kind this build does not know arrives as an unknown field.
  req = request();
  req.mutable_when()
    ->GetReflection()
    ->MutableUnknownFields(req.mutable_when())
    ->AddVarint(99, 1);
  expect(req, errc::invalid_request);
  req = request();
  req.mutable_when()->set_every_ms(1'000);
  req.mutable_when()->set_end_ms(t0 - 1);
  auto ended = dally::logic::to_task(req, now, opts);
  BOOST_TEST(!ended);
}

BOOST_FIXTURE_TEST_CASE(to_task_resolves_every_kind, fixture) {
  auto req = request("jobs", "data");
  auto t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->due_ms == now);
  BOOST_TEST((t->recurrence.kind() == core::recurrence_kind::at));
  BOOST_TEST(t->payload == "data");
  BOOST_TEST((t->policy == opts.default_policy));
  BOOST_TEST(!t->idempotency_key);

  req.mutable_when()->set_at_ms(t0 + 5);
  t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->due_ms == t0 + 5);

  req.mutable_when()->set_in_ms(250);
  t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST((t->recurrence.kind() == core::recurrence_kind::after));
  BOOST_TEST(t->due_ms == now + 250);

  req.mutable_when()->set_every_ms(1'000);
  req.mutable_when()->set_max_count(3);
  t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST((t->recurrence.kind() == core::recurrence_kind::fixed_rate));
  BOOST_TEST(t->due_ms == now + 1'000);
  BOOST_TEST(*t->recurrence.max_count() == 3u);

  req.mutable_when()->set_every_after_done_ms(2'000);
  t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST((t->recurrence.kind() == core::recurrence_kind::fixed_delay));
  BOOST_TEST(t->due_ms == now + 2'000);

  req = request();
  req.mutable_when()->mutable_intervals()->add_intervals_ms(100);
  req.mutable_when()->mutable_intervals()->add_intervals_ms(300);
  t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST((t->recurrence.kind() == core::recurrence_kind::intervals));
  BOOST_TEST(t->due_ms == now + 100);

  req = request();
  req.mutable_when()->mutable_cron()->set_expression("0 * * * *");
  t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST((t->recurrence.kind() == core::recurrence_kind::cron));
  BOOST_TEST(t->recurrence.cron_expr()->zone_name() == "UTC");
  BOOST_TEST(t->due_ms % 3'600'000 == 0);
  BOOST_TEST(t->due_ms > now);
  BOOST_TEST(t->due_ms <= now + 3'600'000);

  req = request();
  auto* p = req.mutable_policy();
  p->set_lease_ms(5'000);
  p->set_max_attempts(7);
  p->set_backoff_initial_ms(10);
  p->set_backoff_multiplier_permille(1'500);
  p->set_backoff_max_ms(100);
  req.set_idempotency_key("key-1");
  t = dally::logic::to_task(req, now, opts);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->policy.lease_ms == 5'000);
  BOOST_TEST(t->policy.max_attempts == 7u);
  BOOST_TEST(t->policy.backoff_initial_ms == 10);
  BOOST_TEST(t->policy.backoff_multiplier_permille == 1'500u);
  BOOST_TEST(t->policy.backoff_max_ms == 100);
  BOOST_REQUIRE(t->idempotency_key);
  BOOST_TEST(*t->idempotency_key == "key-1");
}

BOOST_FIXTURE_TEST_CASE(to_wire_carries_the_record, fixture) {
  auto id = add(t0 + 7, "bytes");
  auto wire = dally::logic::to_wire(get(id).record);
  BOOST_TEST(wire.id() == id);
  BOOST_TEST(wire.topic() == "jobs");
  BOOST_TEST(wire.due_ms() == t0 + 7);
  BOOST_TEST(wire.state() == v1::TASK_STATE_PENDING);
  BOOST_TEST(wire.policy().lease_ms() == lease_ms);
}

// -- idempotency --------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(idempotency_within_one_batch, fixture) {
  auto t = make(t0 + 500, "one");
  t.idempotency_key = "k";
  auto first = logic->schedule(now, t);
  BOOST_REQUIRE(first);
  BOOST_TEST(first->created);
  auto again = logic->schedule(now, t);
  BOOST_REQUIRE(again);
  BOOST_TEST(again->id == first->id);
  BOOST_TEST(!again->created);
  BOOST_TEST(again->due_ms == t0 + 500);
  auto other = t;
  other.payload = "two";
  BOOST_TEST(code_of(logic->schedule(now, other)) ==
             errc::idempotency_conflict);
  commit();
  BOOST_TEST(logic->counters().scheduled == 1u);
  // One task fires, once.
  BOOST_TEST(fire(t0 + 500).size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(idempotency_across_commits_and_completion, fixture) {
  auto t = make(t0 + 500, "one");
  t.idempotency_key = "k";
  auto first = logic->schedule(now, t);
  BOOST_REQUIRE(first);
  commit();
  auto again = logic->schedule(now, t);
  BOOST_REQUIRE(again);
  BOOST_TEST(again->id == first->id);
  BOOST_TEST(!again->created);
  BOOST_TEST(again->due_ms == t0 + 500);
  BOOST_TEST(!logic->dirty());
  auto other = t;
  other.topic = "elsewhere";
  BOOST_TEST(code_of(logic->schedule(now, other)) ==
             errc::idempotency_conflict);
  // Still answered after the task completed, with due 0.
  ack(fire_one(t0 + 500));
  auto after = logic->schedule(now, t);
  BOOST_REQUIRE(after);
  BOOST_TEST(after->id == first->id);
  BOOST_TEST(!after->created);
  BOOST_TEST(after->due_ms == 0);
  // After the retention the key names nothing: a new task.
  now = t0 + opts.key_retention_ms + 1;
  BOOST_TEST(!logic->maintain(now));
  auto fresh = logic->schedule(now, make(now, "other payload", "x"));
  BOOST_REQUIRE(fresh);
  auto keyed = make(now, "one");
  keyed.idempotency_key = "k";
  auto renewed = logic->schedule(now, keyed);
  BOOST_REQUIRE(renewed);
  BOOST_TEST(renewed->created);
  BOOST_TEST(renewed->id != first->id);
  commit();
  // Survives a restart.
  restart();
  auto replay = logic->schedule(now, keyed);
  BOOST_REQUIRE(replay);
  BOOST_TEST(replay->id == renewed->id);
  BOOST_TEST(!replay->created);
}

// -- unknown ids --------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(unknown_ids_are_not_found, fixture) {
  add(t0 + 1'000);
  for (task_id id : {task_id{0}, task_id{999'999}}) {
    BOOST_TEST(code_of(logic->get(id)) == errc::not_found);
    auto r = logic->revoke(now, id);
    BOOST_REQUIRE(r);
    BOOST_TEST((*r == change_outcome::not_found));
    auto m = logic->reschedule(now, id, t0 + 5);
    BOOST_REQUIRE(m);
    BOOST_TEST((*m == change_outcome::not_found));
    auto k = logic->kick(now, id, std::nullopt);
    BOOST_REQUIRE(k);
    BOOST_TEST((*k == change_outcome::not_found));
    BOOST_TEST(code_of(logic->touch(now, delivery_ref{id, 0, 1}, 0)) ==
               errc::stale_delivery);
    BOOST_TEST(logic->ack(now, delivery_ref{id, 0, 1}).code() ==
               errc::stale_delivery);
  }
  BOOST_TEST(!logic->dirty());
}

BOOST_AUTO_TEST_CASE(ids_of_other_shards_are_not_found) {
  temp_dir dir;
  storage::store_options so;
  so.path = (dir.path() / "s1").string();
  so.shard = 1;
  so.shard_count = 4;
  so.durability = storage::durability::none;
  auto store = storage::rocks_task_store::open(so);
  BOOST_REQUIRE(store);
  shard_logic logic{**store, test_options()};
  core::task t;
  t.topic = "jobs";
  t.due_ms = t0;
  auto res = logic.schedule(t0, t);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->id % 4 == 1u);
  BOOST_TEST(!logic.commit(t0).err);
  BOOST_TEST((*logic.revoke(t0, res->id) == change_outcome::done));
  BOOST_TEST(!logic.commit(t0).err);
  BOOST_TEST((*logic.revoke(t0, res->id) == change_outcome::completed));
  // The same local sequence on shard 2 was never issued here.
  BOOST_TEST((*logic.revoke(t0, res->id + 1) == change_outcome::not_found));
  BOOST_TEST((*logic.revoke(t0, res->id + 4) == change_outcome::not_found));
}

// -- revoke -------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(revoke_outcomes, fixture) {
  auto pending = add(t0 + 1'000);
  auto running = add(t0 + 1'000);
  auto acked = add(t0 + 1'000);
  BOOST_TEST((revoke(pending) == change_outcome::done));
  auto got = fire(t0 + 1'000);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  for (const auto& d : got)
    BOOST_TEST(d.id().task_id() != pending);
  const auto& run = got[0].id().task_id() == running ? got[0] : got[1];
  const auto& done = got[0].id().task_id() == acked ? got[0] : got[1];
  ack(done);
  BOOST_TEST((revoke(running) == change_outcome::in_flight));
  BOOST_TEST(logic->ack(now, ref_of(run)).code() == errc::stale_delivery);
  BOOST_TEST(logic->nack(now, ref_of(run), std::nullopt).code() ==
             errc::stale_delivery);
  BOOST_TEST(commit().empty());
  // Its lease runs out: nothing comes back.
  BOOST_TEST(fire_all(t0 + 1'000 + lease_ms + 60'000).empty());
  BOOST_TEST((revoke(acked) == change_outcome::completed));
  BOOST_TEST((revoke(pending) == change_outcome::completed));
  BOOST_TEST((revoke(running) == change_outcome::completed));
  BOOST_TEST((revoke(acked + 1'000) == change_outcome::not_found));
  BOOST_TEST(logic->counters().revoked == 2u);
}

BOOST_FIXTURE_TEST_CASE(revoke_within_the_batch, fixture) {
  auto res = logic->schedule(now, make(t0));
  BOOST_REQUIRE(res);
  auto r = logic->revoke(now, res->id);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::done));
  r = logic->revoke(now, res->id);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::completed));
  BOOST_TEST(code_of(logic->get(res->id)) == errc::not_found);
  commit();
  BOOST_TEST(fire_all(t0 + 60'000).empty());
  // A task fired in this batch has not gone out yet: its revoke stops it.
  auto id = add(t0 + 60'000);
  now = t0 + 60'000;
  BOOST_REQUIRE(!logic->fire(now));
  r = logic->revoke(now, id);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::done));
  BOOST_TEST(commit().empty());
  BOOST_TEST(fire_all(t0 + 600'000).empty());
}

// -- reschedule ---------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(reschedule_earlier_and_later, fixture) {
  auto early = add(t0 + 10'000);
  auto late = add(t0 + 10'000);
  auto r = logic->reschedule(now, early, t0 + 5'000);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::done));
  r = logic->reschedule(now, late, t0 + 20'000);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::done));
  BOOST_TEST(get(early).record.task.due_ms == t0 + 5'000); // Staged read.
  commit();
  BOOST_TEST(fire(t0 + 4'999).empty());
  auto d = fire_one(t0 + 5'000);
  BOOST_TEST(d.id().task_id() == early);
  BOOST_TEST(d.due_ms() == t0 + 5'000);
  BOOST_TEST(fire(t0 + 19'999).empty());
  d = fire_one(t0 + 20'000);
  BOOST_TEST(d.id().task_id() == late);
  // In flight: nothing changes.
  r = logic->reschedule(now, late, t0 + 100'000);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::in_flight));
  BOOST_TEST(!logic->dirty());
  ack(d);
  r = logic->reschedule(now, late, t0 + 100'000);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::completed));
}

BOOST_FIXTURE_TEST_CASE(reschedule_validates_and_takes_the_past, fixture) {
  auto id = add(t0 + 10'000);
  BOOST_TEST(code_of(logic->reschedule(now, id, -1)) == errc::invalid_time);
  BOOST_TEST(
    code_of(logic->reschedule(now, id, std::numeric_limits<int64_t>::max())) ==
    errc::invalid_time);
  BOOST_TEST(
    code_of(logic->reschedule(now, id, now + opts.limits.max_delay_ms + 1)) ==
    errc::delay_too_large);
  BOOST_TEST(!logic->dirty());
  BOOST_TEST(get(id).record.task.due_ms == t0 + 10'000);
  auto r = logic->reschedule(now, id, t0 - 1'000);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::done));
  commit();
  auto d = fire_one(t0);
  BOOST_TEST(d.due_ms() == t0 - 1'000);
}

BOOST_FIXTURE_TEST_CASE(reschedule_clears_a_waiting_retry, fixture) {
  auto id = add(t0);
  auto d = fire_one(t0);
  BOOST_REQUIRE(!logic->nack(now, ref_of(d), 50'000));
  commit();
  BOOST_TEST(get(id).record.retry_at_ms == t0 + 50'000);
  auto r = logic->reschedule(now, id, t0 + 2'000);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::done));
  commit();
  BOOST_TEST(get(id).record.retry_at_ms == 0);
  BOOST_TEST(fire(t0 + 1'999).empty());
  d = fire_one(t0 + 2'000);
  BOOST_TEST(d.attempt() == 2u);
}

// -- leases, retries, dead letters --------------------------------------------

BOOST_FIXTURE_TEST_CASE(lease_expiry_redelivers_after_backoff, fixture) {
  auto id = add(t0);
  auto d1 = fire_one(t0);
  auto deadline = d1.lease_deadline_ms();
  BOOST_TEST(fire(deadline - 1).empty());
  BOOST_TEST(fire(deadline).empty()); // Expired: back to pending.
  auto info = get(id);
  BOOST_TEST((info.record.state == task_state::pending));
  BOOST_TEST(info.record.retry_at_ms == deadline + backoff_ms);
  BOOST_TEST(info.record.task.due_ms == t0); // The anchor stays.
  BOOST_TEST(fire(deadline + backoff_ms - 1).empty());
  auto d2 = fire_one(deadline + backoff_ms);
  BOOST_TEST(d2.id().task_id() == id);
  BOOST_TEST(d2.attempt() == 2u);
  BOOST_TEST(d2.id().attempt() == 2u);
  BOOST_TEST(d2.due_ms() == t0);
  // The next backoff doubles.
  BOOST_TEST(fire(d2.lease_deadline_ms()).empty());
  BOOST_TEST(fire(d2.lease_deadline_ms() + 2 * backoff_ms - 1).empty());
  auto d3 = fire_one(d2.lease_deadline_ms() + 2 * backoff_ms);
  BOOST_TEST(d3.attempt() == 3u);
  const auto& c = logic->counters();
  BOOST_TEST(c.lease_expired == 2u);
  BOOST_TEST(c.redelivered == 2u);
  BOOST_TEST(c.fired == 3u);
}

BOOST_FIXTURE_TEST_CASE(a_stale_settle_leaves_the_cached_record, fixture) {
  // A settle takes its task's record out of the record cache instead of
  // copying it; a stale one puts it back, so the right ack reads nothing.
  BOOST_REQUIRE(opts.record_cache_bytes > 0);
  auto id = add(t0 + 1'000);
  auto d = fire_one(t0 + 1'000);
  auto reads_before = store->reads;
  auto wrong = ref_of(d);
  wrong.attempt += 1;
  BOOST_TEST(logic->ack(now, wrong).code() == errc::stale_delivery);
  BOOST_TEST(code_of(logic->touch(now, wrong, 0)) == errc::stale_delivery);
  ack(d);
  BOOST_TEST(store->reads == reads_before);
  BOOST_TEST(code_of(logic->get(id)) == errc::not_found);
}

BOOST_FIXTURE_TEST_CASE(stale_settles_after_redelivery, fixture) {
  add(t0);
  auto d1 = fire_one(t0);
  BOOST_TEST(fire(d1.lease_deadline_ms()).empty());
  auto d2 = fire_one(d1.lease_deadline_ms() + backoff_ms);
  BOOST_TEST(logic->ack(now, ref_of(d1)).code() == errc::stale_delivery);
  BOOST_TEST(logic->nack(now, ref_of(d1), 0).code() == errc::stale_delivery);
  BOOST_TEST(code_of(logic->touch(now, ref_of(d1), 0)) == errc::stale_delivery);
  BOOST_TEST(logic->requeue(now, ref_of(d1)).code() == errc::stale_delivery);
  BOOST_TEST(logic->undelivered(now, ref_of(d1)).code() ==
             errc::stale_delivery);
  auto wrong_occurrence = ref_of(d2);
  wrong_occurrence.occurrence = 1;
  BOOST_TEST(logic->ack(now, wrong_occurrence).code() == errc::stale_delivery);
  BOOST_TEST(!logic->dirty());
  ack(d2);
  BOOST_TEST(logic->ack(now, ref_of(d2)).code() == errc::stale_delivery);
}

BOOST_FIXTURE_TEST_CASE(max_attempts_dead_letter_and_kick, fixture) {
  auto id = add(t0);
  bury(id, t0);
  auto info = get(id);
  BOOST_TEST(info.dead);
  BOOST_TEST(info.dead_reason == "lease expired on attempt 3 of 3");
  BOOST_TEST(info.record.task.attempt == 3u);
  BOOST_TEST(logic->counters().dead_lettered == 1u);
  BOOST_TEST(logic->counters().lease_expired == 3u);
  BOOST_TEST(fire_all(now + 3'600'000).empty());
  // Revoke and reschedule see it as completed.
  auto r = logic->reschedule(now, id, now);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::completed));
  auto page = logic->dead_letters(0, 10);
  BOOST_REQUIRE(page);
  BOOST_REQUIRE_EQUAL(page->dead.size(), 1u);
  BOOST_TEST(page->dead[0].record.task.id == id);
  BOOST_TEST(page->next_after == 0u);
  // Kicked at a later time: not before it.
  auto kick_at = now + 5'000;
  auto k = logic->kick(now, id, kick_at);
  BOOST_REQUIRE(k);
  BOOST_TEST((*k == change_outcome::done));
  BOOST_TEST(!get(id).dead); // Staged read.
  commit();
  BOOST_TEST(logic->counters().kicked == 1u);
  BOOST_TEST(logic->dead_letters(0, 10)->dead.empty());
  BOOST_TEST(fire(kick_at - 1).empty());
  auto d = fire_one(kick_at);
  BOOST_TEST(d.id().task_id() == id);
  BOOST_TEST(d.attempt() == 1u);
  // A live task is no dead letter.
  k = logic->kick(now, id, std::nullopt);
  BOOST_REQUIRE(k);
  BOOST_TEST((*k == change_outcome::not_found));
  ack(d);
  k = logic->kick(now, id, std::nullopt);
  BOOST_REQUIRE(k);
  BOOST_TEST((*k == change_outcome::not_found));
}

BOOST_FIXTURE_TEST_CASE(dead_letters_page, fixture) {
  auto next = opts;
  next.default_policy.max_attempts = 1;
  reconfigure(next);
  opts = next;
  std::vector<task_id> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(add(t0));
  auto got = fire(t0);
  BOOST_REQUIRE_EQUAL(got.size(), 5u);
  for (const auto& d : got)
    BOOST_REQUIRE(!logic->nack(now, ref_of(d), std::nullopt));
  // Burials are visible before the commit.
  auto staged = logic->dead_letters(0, 10);
  BOOST_REQUIRE(staged);
  BOOST_TEST(staged->dead.size() == 5u);
  commit();
  BOOST_TEST(get(ids[0]).dead_reason == "nacked on attempt 1 of 1");
  std::vector<task_id> seen;
  task_id after = 0;
  std::vector<size_t> sizes;
  for (;;) {
    auto page = logic->dead_letters(after, 2);
    BOOST_REQUIRE(page);
    sizes.push_back(page->dead.size());
    for (const auto& dead : page->dead)
      seen.push_back(dead.record.task.id);
    if (page->next_after == 0)
      break;
    BOOST_TEST(page->next_after == seen.back());
    after = page->next_after;
  }
  BOOST_TEST(seen == ids, boost::test_tools::per_element());
  BOOST_TEST(sizes == (std::vector<size_t>{2, 2, 1}),
             boost::test_tools::per_element());
  // A kick staged in the batch hides the dead letter from the page.
  BOOST_REQUIRE(logic->kick(now, ids[1], std::nullopt));
  auto page = logic->dead_letters(0, 2);
  BOOST_REQUIRE(page);
  BOOST_REQUIRE_EQUAL(page->dead.size(), 2u);
  BOOST_TEST(page->dead[0].record.task.id == ids[0]);
  BOOST_TEST(page->dead[1].record.task.id == ids[2]);
  BOOST_TEST(page->next_after == ids[2]);
  // Page size 0: the configured default.
  page = logic->dead_letters(0, 0);
  BOOST_REQUIRE(page);
  BOOST_TEST(page->dead.size() == 4u);
  commit();
  BOOST_TEST(fire_one(now).id().task_id() == ids[1]);
}

BOOST_FIXTURE_TEST_CASE(nack_with_and_without_delay, fixture) {
  auto id = add(t0);
  auto d1 = fire_one(t0);
  BOOST_TEST(logic->nack(now, ref_of(d1), -1).code() == errc::invalid_time);
  BOOST_TEST(
    logic->nack(now, ref_of(d1), opts.limits.max_delay_ms + 1).code() ==
    errc::invalid_time);
  BOOST_TEST(!logic->dirty());
  BOOST_REQUIRE(!logic->nack(now, ref_of(d1), 5'000));
  commit();
  BOOST_TEST(fire(t0 + 4'999).empty());
  auto d2 = fire_one(t0 + 5'000);
  BOOST_TEST(d2.attempt() == 2u);
  // Without a delay: the backoff after attempt 2 (twice the initial).
  BOOST_REQUIRE(!logic->nack(now, ref_of(d2), std::nullopt));
  commit();
  BOOST_TEST(get(id).record.retry_at_ms == now + 2 * backoff_ms);
  BOOST_TEST(fire(now + 2 * backoff_ms - 1).empty());
  auto d3 = fire_one(now + 2 * backoff_ms);
  BOOST_TEST(d3.attempt() == 3u);
  // The last attempt: dead.
  BOOST_REQUIRE(!logic->nack(now, ref_of(d3), 0));
  commit();
  auto info = get(id);
  BOOST_TEST(info.dead);
  BOOST_TEST(info.dead_reason == "nacked on attempt 3 of 3");
  BOOST_TEST(logic->counters().nacked == 3u);
  BOOST_TEST(fire_all(now + 3'600'000).empty());
}

BOOST_FIXTURE_TEST_CASE(a_lease_read_back_has_no_more_left_than_its_length,
                        fixture) {
  // Touched under a wall clock an hour ahead, written; the node restarts
  // with the clock back where it belongs.
  auto id = add(t0);
  auto d = fire_one(t0);
  now = t0 + 3'600'000;
  BOOST_REQUIRE(logic->touch(now, ref_of(d), 20'000));
  commit();
  BOOST_TEST(get(id).record.lease_ms == 20'000);
  restart();
  // Met again at t0 + 1 s: not redelivered before the lease's length from
  // then, and redelivered then, although the stored deadline is an hour
  // out.
  BOOST_TEST(fire_all(t0 + 1'000).empty());
  BOOST_TEST(fire_all(t0 + 20'999).empty());
  BOOST_TEST((get(id).record.state == task_state::in_flight));
  BOOST_TEST(fire_all(t0 + 21'000).empty()); // Expired: back to pending.
  auto info = get(id);
  BOOST_TEST((info.record.state == task_state::pending));
  BOOST_TEST(info.record.retry_at_ms == t0 + 21'000 + backoff_ms);
  auto again = fire_one(t0 + 21'000 + backoff_ms);
  BOOST_TEST(again.id().attempt() == 2u);
}

BOOST_FIXTURE_TEST_CASE(touch_extends_the_lease, fixture) {
  auto id = add(t0);
  auto d = fire_one(t0);
  now = t0 + 5'000;
  auto touched = logic->touch(now, ref_of(d), 20'000);
  BOOST_REQUIRE(touched);
  BOOST_TEST(*touched == t0 + 25'000);
  commit();
  BOOST_TEST(get(id).record.lease_deadline_ms == t0 + 25'000);
  BOOST_TEST(fire(d.lease_deadline_ms()).empty());
  BOOST_TEST((get(id).record.state == task_state::in_flight));
  // 0: the policy's lease.
  now = t0 + 20'000;
  touched = logic->touch(now, ref_of(d), 0);
  BOOST_REQUIRE(touched);
  BOOST_TEST(*touched == t0 + 20'000 + lease_ms);
  commit();
  BOOST_TEST(code_of(logic->touch(now, ref_of(d), -1)) == errc::invalid_time);
  BOOST_TEST(
    code_of(logic->touch(now, ref_of(d), opts.limits.max_delay_ms + 1)) ==
    errc::invalid_time);
  BOOST_TEST(fire(t0 + 25'000).empty());
  BOOST_TEST((get(id).record.state == task_state::in_flight));
  BOOST_TEST(fire(t0 + 20'000 + lease_ms - 1).empty());
  BOOST_TEST(fire(t0 + 20'000 + lease_ms).empty()); // Expired now.
  BOOST_TEST((get(id).record.state == task_state::pending));
  BOOST_TEST(logic->counters().lease_expired == 1u);
  // The delivery lost its lease: it no longer settles.
  BOOST_TEST(logic->ack(now, ref_of(d)).code() == errc::stale_delivery);
}

BOOST_FIXTURE_TEST_CASE(requeue_counts_the_attempt, fixture) {
  auto id = add(t0);
  auto d1 = fire_one(t0);
  now = t0 + 100;
  BOOST_REQUIRE(!logic->requeue(now, ref_of(d1)));
  commit();
  BOOST_TEST((get(id).record.state == task_state::pending));
  auto d2 = fire_one(now);
  BOOST_TEST(d2.attempt() == 2u);
  BOOST_REQUIRE(!logic->requeue(now, ref_of(d2)));
  commit();
  auto d3 = fire_one(now);
  BOOST_TEST(d3.attempt() == 3u);
  BOOST_REQUIRE(!logic->requeue(now, ref_of(d3)));
  commit();
  BOOST_TEST(get(id).dead);
  BOOST_TEST(fire_all(now + 3'600'000).empty());
}

BOOST_FIXTURE_TEST_CASE(undelivered_parks_without_counting, fixture) {
  auto id = add(t0);
  auto d1 = fire_one(t0);
  BOOST_REQUIRE(!logic->undelivered(now, ref_of(d1)));
  commit();
  auto info = get(id);
  BOOST_TEST((info.record.state == task_state::pending));
  BOOST_TEST(info.record.task.attempt == 0u);
  // The topic is unavailable now: the task waits.
  BOOST_TEST(fire_all(t0 + 1'000).empty());
  BOOST_TEST(logic->waiting().at("jobs") == 1u);
  logic->set_topic_available("jobs", true);
  BOOST_TEST(logic->waiting().empty());
  auto d2 = fire_one(t0 + 2'000);
  BOOST_TEST(d2.attempt() == 1u);
  BOOST_TEST(d2.id().attempt() == 1u);
  ack(d2);
}

// -- periodic tasks -----------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(fixed_rate_fires_exactly_max_count, fixture) {
  auto req = request();
  req.mutable_when()->set_every_ms(1'000);
  req.mutable_when()->set_max_count(3);
  auto res = add(req);
  BOOST_TEST(res.due_ms == t0 + 1'000);
  std::vector<int64_t> dues;
  for (uint64_t k = 0; k < 3; ++k) {
    BOOST_TEST(fire(t0 + 1'000 * (k + 1) - 1).empty());
    auto d = fire_one(t0 + 1'000 * (k + 1));
    BOOST_TEST(d.id().task_id() == res.id);
    BOOST_TEST(d.id().occurrence() == k);
    BOOST_TEST(d.attempt() == 1u);
    dues.push_back(d.due_ms());
    now += 10;
    ack(d);
    if (k == 0) {
      // The next occurrence was written with the ack, atomically.
      restart();
      auto info = get(res.id);
      BOOST_TEST((info.record.state == task_state::pending));
      BOOST_TEST(info.record.task.due_ms == t0 + 2'000);
      BOOST_TEST(info.record.fired_count == 1u);
      BOOST_TEST(info.record.task.attempt == 0u);
    }
  }
  BOOST_TEST(dues == (std::vector<int64_t>{t0 + 1'000, t0 + 2'000, t0 + 3'000}),
             boost::test_tools::per_element());
  BOOST_TEST(code_of(logic->get(res.id)) == errc::not_found);
  BOOST_TEST(fire_all(t0 + 100'000).empty());
  BOOST_TEST((*logic->revoke(now, res.id) == change_outcome::completed));
}

BOOST_FIXTURE_TEST_CASE(fixed_delay_counts_from_the_ack, fixture) {
  auto req = request();
  req.mutable_when()->set_every_after_done_ms(1'000);
  auto res = add(req);
  auto d = fire_one(t0 + 1'000);
  now = t0 + 1'500;
  ack(d);
  BOOST_TEST(get(res.id).record.task.due_ms == t0 + 2'500);
  BOOST_TEST(fire(t0 + 2'499).empty());
  d = fire_one(t0 + 2'500);
  BOOST_TEST(d.id().occurrence() == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_day_of_cron_every_five_minutes, fixture) {
  auto req = request();
  req.mutable_when()->mutable_cron()->set_expression("*/5 * * * *");
  auto res = add(req);
  constexpr int64_t five_min = 300'000;
  auto first = (t0 / five_min + 1) * five_min;
  BOOST_TEST(res.due_ms == first);
  int64_t expected = first;
  for (uint64_t k = 0; k < 288; ++k) {
    BOOST_REQUIRE(fire(expected - 1).empty());
    auto got = fire(expected);
    BOOST_REQUIRE_EQUAL(got.size(), 1u);
    BOOST_REQUIRE_EQUAL(got[0].due_ms(), expected);
    BOOST_REQUIRE_EQUAL(got[0].id().occurrence(), k);
    now = expected + 50;
    ack(got[0]);
    expected += five_min;
  }
  BOOST_TEST(expected - first == core::ms_per_day);
  BOOST_TEST(logic->counters().acked == 288u);
  BOOST_TEST(get(res.id).record.task.due_ms == expected);
}

BOOST_FIXTURE_TEST_CASE(periodic_redelivery_keeps_the_occurrence, fixture) {
  auto req = request();
  req.mutable_when()->set_every_ms(60'000);
  auto res = add(req);
  auto d1 = fire_one(t0 + 60'000);
  BOOST_TEST(fire(d1.lease_deadline_ms()).empty());
  auto d2 = fire_one(d1.lease_deadline_ms() + backoff_ms);
  BOOST_TEST(d2.id().occurrence() == 0u);
  BOOST_TEST(d2.attempt() == 2u);
  BOOST_TEST(d2.due_ms() == t0 + 60'000);
  ack(d2);
  auto info = get(res.id);
  BOOST_TEST(info.record.task.due_ms == t0 + 120'000);
  BOOST_TEST(info.record.task.attempt == 0u);
  BOOST_TEST(info.record.fired_count == 1u);
}

// -- topics without consumers -------------------------------------------------

BOOST_FIXTURE_TEST_CASE(unavailable_topics_park_and_release, fixture) {
  auto a = add(t0 + 3'000, "a", "slow");
  auto b = add(t0 + 1'000, "b", "slow");
  auto c = add(t0 + 2'000, "c", "slow");
  auto other = add(t0 + 1'500);
  auto got = fire_all(t0 + 5'000);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0].id().task_id() == other);
  ack(got[0]);
  BOOST_TEST(logic->waiting().size() == 1u);
  BOOST_TEST(logic->waiting().at("slow") == 3u);
  BOOST_TEST(fire_all(t0 + 60'000).empty());
  BOOST_TEST(logic->next_wakeup_ms() > t0 + 60'000);
  logic->set_topic_available("slow", true);
  BOOST_TEST(logic->waiting().empty());
  BOOST_TEST(logic->next_wakeup_ms() <= t0 + 60'000);
  got = fire_all(t0 + 60'000);
  BOOST_REQUIRE_EQUAL(got.size(), 3u);
  BOOST_TEST(got[0].id().task_id() == b);
  BOOST_TEST(got[1].id().task_id() == c);
  BOOST_TEST(got[2].id().task_id() == a);
  BOOST_TEST(got[0].payload() == "b");
  // Unavailable again: later work waits again.
  logic->set_topic_available("slow", false);
  add(t0 + 61'000, "d", "slow");
  BOOST_TEST(fire_all(t0 + 62'000).empty());
  BOOST_TEST(logic->waiting().at("slow") == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_backlog_goes_back_a_pass_at_a_time, fixture) {
  // A topic that gets its first consumer after a long wait must not put
  // every parked task back into the window in one go (a million heap
  // inserts in one message): a pass's worth at a time, in due order.
  auto next = opts;
  next.fire_batch = 4;
  reconfigure(next);
  std::vector<task_id> ids;
  for (int i = 0; i < 20; ++i)
    ids.push_back(add(t0 + 10 + i, "p", "slow"));
  BOOST_TEST(fire_all(t0 + 1'000).empty());
  BOOST_TEST(logic->waiting().at("slow") == 20u);
  logic->set_topic_available("slow", true);
  BOOST_TEST(logic->waiting().at("slow") == 16u);
  BOOST_TEST(logic->next_wakeup_ms() <= t0 + 1'000);
  std::vector<task_id> fired;
  for (const auto& d : fire_all(t0 + 1'000))
    fired.push_back(d.id().task_id());
  BOOST_TEST(fired == ids, boost::test_tools::per_element());
  BOOST_TEST(logic->waiting().empty());
}

BOOST_FIXTURE_TEST_CASE(a_saturated_topic_keeps_its_records_cached, fixture) {
  auto next = opts;
  next.max_unanswered_per_topic = 2;
  reconfigure(next);
  // Due soon: the schedule's commit caches the records.
  for (int i = 0; i < 6; ++i)
    add(t0 + 100 + i);
  auto reads_before = store->reads;
  auto got = fire_all(t0 + 200);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_TEST(logic->waiting().at("jobs") == 4u);
  // The parked four come back as their topic reopens, and neither parking
  // nor firing them again reads a record.
  for (int round = 0; round < 3 && !got.empty(); ++round) {
    for (const auto& d : got)
      ack(d);
    got = fire_all(now);
  }
  BOOST_TEST(logic->counters().fired == 6u);
  BOOST_TEST(store->reads == reads_before);
}

BOOST_FIXTURE_TEST_CASE(the_record_cache_serves_a_burst_then_shrinks, fixture) {
  constexpr int n = 3000;
  for (int i = 0; i < n; ++i) {
    auto res = logic->schedule(now, make(t0 + 100 + i % 50));
    BOOST_REQUIRE(res);
  }
  BOOST_REQUIRE(commit().empty());
  BOOST_TEST(logic->cached_records() == size_t{n});
  BOOST_TEST(logic->record_cache_slots() >= size_t{n});
  auto reads_before = store->reads;
  auto got = fire_all(t0 + 200);
  BOOST_REQUIRE_EQUAL(got.size(), size_t{n});
  BOOST_TEST(logic->cached_records() == size_t{n}, "in flight: cached");
  // A hint over cached, unknown and repeated ids changes nothing.
  std::vector<task_id> ids;
  for (const auto& d : got)
    ids.push_back(d.id().task_id());
  ids.push_back(ids.front());
  ids.push_back(task_id{987654321});
  logic->prefetch(ids);
  logic->prefetch({});
  BOOST_TEST(logic->cached_records() == size_t{n});
  BOOST_TEST(!logic->dirty());
  for (const auto& d : got) {
    auto err = logic->ack(now, ref_of(d));
    BOOST_REQUIRE_MESSAGE(!err, "ack failed: " << err);
  }
  BOOST_REQUIRE(commit().empty());
  BOOST_TEST(store->reads == reads_before, "fires and acks read nothing");
  BOOST_TEST(logic->cached_records() == 0u);
  BOOST_TEST(logic->record_cache_slots() <= 1024u, "the table shrank");
}

BOOST_FIXTURE_TEST_CASE(a_topic_at_its_cap_waits_for_answers, fixture) {
  auto next = opts;
  next.max_unanswered_per_topic = 4;
  reconfigure(next);
  logic->set_topic_available("other", true);
  std::vector<task_id> jobs;
  for (int i = 0; i < 10; ++i)
    jobs.push_back(add(t0 + i));
  auto other = add(t0 + 5, "o", "other");
  auto got = fire_all(t0 + 100);
  // Four of `jobs` in due order; the other topic is not held back.
  BOOST_REQUIRE_EQUAL(got.size(), 5u);
  std::vector<task_id> fired;
  for (const auto& d : got)
    if (d.topic() == "jobs")
      fired.push_back(d.id().task_id());
  BOOST_TEST(std::vector<task_id>(fired) ==
               std::vector<task_id>(jobs.begin(), jobs.begin() + 4),
             boost::test_tools::per_element());
  BOOST_TEST(logic->waiting().at("jobs") == 6u);
  BOOST_TEST(logic->next_wakeup_ms() > t0 + 100);
  std::map<task_id, v1::Delivery> held;
  for (const auto& d : got)
    held.emplace(d.id().task_id(), d);
  // One answer leaves three unanswered: still above half the cap.
  ack(held.at(jobs[0]));
  BOOST_TEST(fire_all(t0 + 100).empty());
  // A nack answers too (its retry is a pending task again).
  auto err = logic->nack(now, ref_of(held.at(jobs[1])), 60'000);
  BOOST_REQUIRE(!err);
  BOOST_REQUIRE(commit().empty());
  // Two left: the topic reopens and fires up to the cap again.
  got = fire_all(t0 + 100);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_TEST(got[0].id().task_id() == jobs[4]);
  BOOST_TEST(got[1].id().task_id() == jobs[5]);
  ack(held.at(other));
  BOOST_TEST(fire_all(t0 + 100).empty());
  // A lease expiry answers as well.
  got = fire_all(t0 + 100 + lease_ms);
  BOOST_TEST(logic->counters().lease_expired == 4u);
  BOOST_TEST(got.size() == 4u);
  // The new four were first deliveries, which go out without a write: after
  // a restart they fire again at once, as attempt 2, and fill the cap; the
  // retries of the expired four wait until two of them are answered.
  restart();
  auto again = fire_all(now + backoff_ms);
  BOOST_REQUIRE_EQUAL(again.size(), 4u);
  for (size_t i = 0; i < again.size(); ++i) {
    BOOST_TEST(again[i].id().task_id() == got[i].id().task_id());
    BOOST_TEST(again[i].attempt() == 2u);
  }
  BOOST_TEST(logic->waiting().at("jobs") == 4u);
  ack(again[0]);
  ack(again[1]);
  BOOST_TEST(fire_all(now).size() == 2u);
}

/// Caps "jobs" at `cap` unanswered deliveries (record cache as given) and
/// schedules `n` of its tasks, due 1 ms apart from t0 + 10.
std::vector<task_id> cap_jobs_and_add(fixture& f, size_t cap, int n,
                                      size_t record_cache_bytes) {
  auto next = f.opts;
  next.max_unanswered_per_topic = cap;
  next.record_cache_bytes = record_cache_bytes;
  f.reconfigure(next);
  std::vector<task_id> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back(f.add(t0 + 10 + i));
  return ids;
}

BOOST_FIXTURE_TEST_CASE(a_saturated_topic_releases_only_what_it_can_take,
                        fixture) {
  // An overloaded shard used to put every parked task of a topic back into
  // the window each time half of its cap was answered; reading and parking
  // them all again for a few fires made it slower the further it fell
  // behind. With no record cache every pop reads, so reads count pops.
  constexpr int n = 200;
  auto ids = cap_jobs_and_add(*this, 4, n, 0);
  auto reads_before = store->reads;
  std::vector<task_id> fired;
  for (int round = 0; round < 2 * n && fired.size() < size_t{n}; ++round) {
    auto got = fire_all(t0 + 1'000);
    BOOST_REQUIRE_LE(got.size(), 4u);
    for (const auto& d : got) {
      fired.push_back(d.id().task_id());
      ack(d);
    }
  }
  BOOST_TEST(fired == ids, boost::test_tools::per_element());
  BOOST_TEST(logic->waiting().empty());
  // Each task is read when it is first due, once more when released (some
  // twice: released in one pass and parked again in the next) and for its
  // ack; taking up every parked task on each reopening read about n * n /
  // 8 (5,000 here).
  auto reads = store->reads - reads_before;
  BOOST_TEST_MESSAGE("reads for " << n << " fires: " << reads);
  BOOST_TEST(reads <= size_t{4 * n});
}

BOOST_FIXTURE_TEST_CASE(a_saturated_topic_skips_tasks_revoked_while_parked,
                        fixture) {
  // Released a cap's worth at a time, the parked tasks behind two revoked
  // ones still all come out, in due order.
  auto ids = cap_jobs_and_add(*this, 2, 8, opts.record_cache_bytes);
  auto got = fire_all(t0 + 1'000);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  // The next two in line are revoked while parked.
  BOOST_TEST((revoke(ids[2]) == change_outcome::done));
  BOOST_TEST((revoke(ids[3]) == change_outcome::done));
  for (const auto& d : got)
    ack(d);
  std::vector<task_id> fired;
  for (int round = 0; round < 10 && fired.size() < 4u; ++round)
    for (const auto& d : fire_all(t0 + 1'000)) {
      fired.push_back(d.id().task_id());
      ack(d);
    }
  BOOST_TEST(fired == std::vector<task_id>(ids.begin() + 4, ids.end()),
             boost::test_tools::per_element());
  BOOST_TEST(logic->waiting().empty());
}

BOOST_FIXTURE_TEST_CASE(a_release_that_fires_nothing_is_made_up_next_pass,
                        fixture) {
  auto ids = cap_jobs_and_add(*this, 2, 6, opts.record_cache_bytes);
  auto got = fire_all(t0 + 1'000);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_TEST(logic->waiting().at("jobs") == 4u);
  // The first answer reopens the topic with room for one: ids[2] goes
  // back into the window. It is revoked there, and the second answer, in
  // the same firing pass, leaves the topic with nothing in flight.
  ack(got[0]);
  BOOST_TEST(logic->waiting().at("jobs") == 3u);
  BOOST_TEST((revoke(ids[2]) == change_outcome::done));
  ack(got[1]);
  // The shard wants a pass at once, and that pass takes up two more.
  BOOST_TEST(logic->next_wakeup_ms() <= now);
  got = fire_all(now);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_TEST(got[0].id().task_id() == ids[3]);
  BOOST_TEST(got[1].id().task_id() == ids[4]);
}

BOOST_FIXTURE_TEST_CASE(parked_then_revoked_or_moved, fixture) {
  auto gone = add(t0, "x", "slow");
  auto moved = add(t0, "y", "slow");
  BOOST_TEST(fire_all(t0 + 1'000).empty());
  BOOST_TEST(logic->waiting().at("slow") == 2u);
  BOOST_TEST((revoke(gone) == change_outcome::done));
  auto r = logic->reschedule(now, moved, t0 + 30'000);
  BOOST_REQUIRE(r);
  commit();
  // Both changed while parked: their parked entries are gone.
  BOOST_TEST(logic->waiting().empty());
  logic->set_topic_available("slow", true);
  BOOST_TEST(fire_all(t0 + 29'999).empty());
  auto d = fire_one(t0 + 30'000);
  BOOST_TEST(d.id().task_id() == moved);
}

BOOST_FIXTURE_TEST_CASE(parked_overflow_reloads_the_window, fixture) {
  // Four parked in memory, two taken up per pass: the four kept must be
  // the earliest, or the reload after them would bring earlier ones last.
  auto next = opts;
  next.window.max_in_memory = 4;
  next.window.slice_size = 2;
  next.fire_batch = 2;
  reconfigure(next);
  std::vector<task_id> ids;
  for (int i = 0; i < 10; ++i)
    ids.push_back(add(t0 - 10'000 + i, "p", "slow"));
  auto keep = add(t0 + 20'000);
  BOOST_TEST(fire_all(t0).empty());
  BOOST_TEST(logic->waiting().at("slow") == 10u);
  logic->set_topic_available("slow", true);
  BOOST_TEST(logic->next_wakeup_ms() <= t0);
  std::vector<task_id> fired;
  for (auto at = t0; at <= t0 + 30'000; at += 100)
    for (const auto& d : fire_all(at)) {
      fired.push_back(d.id().task_id());
      now = at;
      ack(d);
    }
  auto expected = ids;
  expected.push_back(keep);
  BOOST_TEST(fired == expected, boost::test_tools::per_element());
  BOOST_TEST(logic->waiting().empty());
}

// -- pacing -------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(overdue_backlog_is_paced, fixture) {
  auto next = opts;
  next.overdue_rate_per_s = 100;
  next.late_threshold_ms = 1'000;
  next.window.max_in_memory = 10'000;
  reconfigure(next);
  for (int i = 0; i < 1'000; ++i) {
    auto res = logic->schedule(now, make(t0 - 600'000 + i));
    BOOST_REQUIRE(res);
  }
  commit();
  size_t fired = 0;
  int64_t last_due = std::numeric_limits<int64_t>::min();
  std::optional<task_id> fresh;
  bool fresh_fired = false;
  for (auto at = t0; at <= t0 + 5'000; at += 10) {
    now = at;
    if (at == t0 + 1'000) {
      auto res = logic->schedule(now, make(now, "fresh"));
      BOOST_REQUIRE(res);
      fresh = res->id;
      commit();
    }
    for (const auto& d : fire_all(at)) {
      if (fresh && d.id().task_id() == *fresh) {
        BOOST_TEST(at == t0 + 1'000);
        fresh_fired = true;
      } else {
        ++fired;
        BOOST_TEST(d.due_ms() >= last_due); // In due order.
        last_due = d.due_ms();
      }
      ack(d);
    }
    if (at == t0)
      BOOST_TEST(logic->backlog_size() > 0u);
  }
  BOOST_TEST(fresh_fired);
  // A burst of 10, then one every 10 ms for 5 s.
  BOOST_TEST(fired >= 500u);
  BOOST_TEST(fired <= 520u);
  BOOST_TEST(logic->next_wakeup_ms() <= t0 + 5'010);
  BOOST_TEST(logic->next_wakeup_ms() > t0 + 5'000 - 1);
}

BOOST_FIXTURE_TEST_CASE(a_shard_behind_under_load_is_not_paced, fixture) {
  auto next = opts;
  next.overdue_rate_per_s = 100;
  next.late_threshold_ms = 1'000;
  reconfigure(next);
  // Started with nothing overdue: there is no backlog of downtime.
  BOOST_TEST(fire_all(t0).empty());
  for (int i = 0; i < 300; ++i)
    BOOST_REQUIRE(logic->schedule(now, make(t0 + 100 + i)));
  commit();
  // The shard was too busy to wake for a minute: everything is far
  // overdue, yet none of it is backlog, so nothing holds it to the paced
  // rate (which would keep an overloaded shard behind for good).
  BOOST_TEST(fire_all(t0 + 60'000).size() == 300u);
  BOOST_TEST(logic->backlog_size() == 0u);
}

BOOST_FIXTURE_TEST_CASE(no_pacing_when_disabled, fixture) {
  auto next = opts;
  next.overdue_rate_per_s = 0;
  reconfigure(next);
  for (int i = 0; i < 300; ++i)
    BOOST_REQUIRE(logic->schedule(now, make(t0 - 600'000 + i)));
  commit();
  BOOST_TEST(fire_all(t0).size() == 300u);
  BOOST_TEST(logic->backlog_size() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_full_backlog_pauses_popping, fixture) {
  auto next = opts;
  next.overdue_rate_per_s = 10; // Burst of 1, one per 100 ms.
  next.max_backlog = 5;
  reconfigure(next);
  for (int i = 0; i < 20; ++i)
    BOOST_REQUIRE(logic->schedule(now, make(t0 - 600'000 + i)));
  commit();
  auto got = fire_all(t0);
  BOOST_TEST(got.size() == 1u);
  BOOST_TEST(logic->backlog_size() == 5u);
  // Nothing to do until the next token.
  BOOST_TEST(logic->next_wakeup_ms() == t0 + 100);
  BOOST_TEST(fire_all(t0 + 99).empty());
  got = fire_all(t0 + 100);
  BOOST_TEST(got.size() == 1u);
  size_t total = 2;
  for (auto at = t0 + 200; at <= t0 + 2'000; at += 100)
    total += fire_all(at).size();
  BOOST_TEST(total == 20u);
}

// -- group commit -------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(reads_see_staged_writes, fixture) {
  auto res = logic->schedule(now, make(t0 + 100, "staged"));
  BOOST_REQUIRE(res);
  BOOST_TEST(logic->dirty());
  auto info = logic->get(res->id);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->record.task.payload == "staged");
  auto r = logic->reschedule(now, res->id, t0 + 200);
  BOOST_REQUIRE(r);
  BOOST_TEST((*r == change_outcome::done));
  BOOST_TEST(logic->get(res->id)->record.task.due_ms == t0 + 200);
  BOOST_TEST(logic->counters().scheduled == 0u); // Not durable yet.
  commit();
  BOOST_TEST(logic->counters().scheduled == 1u);
  BOOST_TEST(fire(t0 + 199).empty());
  BOOST_TEST(fire_one(t0 + 200).id().task_id() == res->id);
}

BOOST_FIXTURE_TEST_CASE(a_task_changed_in_its_first_batch_is_stored_changed,
                        fixture) {
  // Tasks rescheduled or revoked in the batch that scheduled them: the
  // store must hold each as the batch left it, and nothing else.
  auto moved = logic->schedule(now, make(t0 + 100, "moved"));
  auto revoked = logic->schedule(now, make(t0 + 100, "revoked"));
  auto kept = logic->schedule(now, make(t0 + 300, "kept"));
  BOOST_REQUIRE(moved && revoked && kept);
  BOOST_REQUIRE(logic->reschedule(now, moved->id, t0 + 200));
  BOOST_REQUIRE(logic->revoke(now, revoked->id));
  commit();
  restart();
  auto stored = [&](task_id id) {
    auto got = rocks->get(id);
    BOOST_REQUIRE(got);
    return *got;
  };
  BOOST_REQUIRE(stored(moved->id));
  BOOST_TEST(stored(moved->id)->task.due_ms == t0 + 200);
  BOOST_TEST(stored(moved->id)->task.payload == "moved");
  BOOST_TEST(!stored(revoked->id));
  BOOST_REQUIRE(stored(kept->id));
  BOOST_TEST(stored(kept->id)->task.payload == "kept");
  BOOST_TEST(!stored(0));
  auto keys = scan();
  BOOST_REQUIRE_EQUAL(keys.size(), 2u);
  BOOST_TEST(keys[0].id == moved->id);
  BOOST_TEST(keys[0].index_ms == t0 + 200);
  BOOST_TEST(keys[1].id == kept->id);
  BOOST_TEST(fire(t0 + 199).empty());
  auto d = fire_one(t0 + 200);
  BOOST_TEST(d.id().task_id() == moved->id);
  BOOST_TEST(d.payload() == "moved");
  BOOST_TEST(fire_one(t0 + 300).payload() == "kept");
}

BOOST_FIXTURE_TEST_CASE(stale_index_entries_are_skipped, fixture) {
  auto moved = add(t0 + 1'000);
  auto revoked = add(t0 + 1'000);
  BOOST_TEST(fire(t0).empty()); // Loads both into the window.
  // Staged changes, then a fire in the same batch pops the old entries.
  BOOST_REQUIRE(logic->reschedule(now, moved, t0 + 5'000));
  BOOST_REQUIRE(logic->revoke(now, revoked));
  now = t0 + 1'000;
  BOOST_REQUIRE(!logic->fire(now));
  BOOST_TEST(commit().empty());
  BOOST_TEST(fire(t0 + 4'999).empty());
  BOOST_TEST(fire_one(t0 + 5'000).id().task_id() == moved);
  // A backlog entry whose task was revoked meanwhile fires nothing.
  auto next = opts;
  next.overdue_rate_per_s = 10; // A burst of one.
  reconfigure(next);
  auto first = add(t0 - 600'000);
  auto second = add(t0 - 599'000);
  auto got = fire_all(t0 + 5'000);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0].id().task_id() == first);
  BOOST_TEST(logic->backlog_size() == 1u);
  BOOST_TEST((revoke(second) == change_outcome::done));
  BOOST_TEST(fire_all(t0 + 6'000).empty());
  BOOST_TEST(logic->backlog_size() == 0u);
}

BOOST_FIXTURE_TEST_CASE(failed_commit_rolls_back, fixture) {
  auto a = add(t0 + 1'000, "a");
  auto b = add(t0 + 1'000, "b");
  auto c = add(t0 + 1'000, "c");
  auto acked = add(t0 + 500);
  auto running = fire_one(t0 + 500);
  BOOST_TEST(fire(t0 + 900).empty());
  auto window_before = logic->window_size();
  auto counters_before = logic->counters();
  // One batch: fire three, schedule one, revoke one, ack one.
  now = t0 + 1'000;
  BOOST_REQUIRE(!logic->fire(now));
  auto fresh = logic->schedule(now, make(t0 + 2'000, "new"));
  BOOST_REQUIRE(fresh);
  BOOST_REQUIRE(logic->revoke(now, c));
  BOOST_REQUIRE(!logic->ack(now, ref_of(running)));
  store->fail_commits = true;
  auto res = logic->commit(now);
  BOOST_TEST(res.err.code() == errc::io_error);
  BOOST_TEST(res.deliveries.empty());
  BOOST_TEST(!logic->dirty());
  BOOST_TEST(logic->window_size() == window_before + 0u);
  BOOST_TEST(logic->counters().commit_failures == 1u);
  BOOST_TEST(logic->counters().fired == counters_before.fired);
  BOOST_TEST(logic->counters().scheduled == counters_before.scheduled);
  store->fail_commits = false;
  // Nothing was half-applied.
  BOOST_TEST(code_of(logic->get(fresh->id)) == errc::not_found);
  for (auto id : {a, b, c}) {
    auto info = get(id);
    BOOST_TEST((info.record.state == task_state::pending));
    BOOST_TEST(info.record.task.attempt == 0u);
  }
  BOOST_TEST((get(acked).record.state == task_state::in_flight));
  // The popped tasks fire again, the revoked one included.
  auto got = fire(t0 + 1'000);
  BOOST_REQUIRE_EQUAL(got.size(), 3u);
  std::set<task_id> ids;
  for (const auto& d : got) {
    ids.insert(d.id().task_id());
    BOOST_TEST(d.attempt() == 1u);
  }
  BOOST_TEST((ids == std::set<task_id>{a, b, c}));
  // And the ack can be made again.
  ack(running);
  BOOST_TEST(code_of(logic->get(acked)) == errc::not_found);
}

BOOST_FIXTURE_TEST_CASE(failed_commit_of_expiries_and_burials, fixture) {
  auto id = add(t0);
  auto d1 = fire_one(t0);
  store->fail_commits = true;
  now = d1.lease_deadline_ms();
  BOOST_REQUIRE(!logic->fire(now));
  BOOST_TEST(logic->dirty());
  BOOST_TEST(logic->commit(now).err);
  store->fail_commits = false;
  BOOST_TEST((get(id).record.state == task_state::in_flight));
  // The expiry happens again after the failure.
  BOOST_TEST(fire(now).empty());
  BOOST_TEST((get(id).record.state == task_state::pending));
  auto d2 = fire_one(now + backoff_ms);
  BOOST_TEST(d2.attempt() == 2u);
  BOOST_TEST(logic->counters().lease_expired == 1u);
}

BOOST_FIXTURE_TEST_CASE(failed_reads_keep_the_window, fixture) {
  // Due beyond the hot horizon: not cached, so firing it reads.
  auto due = t0 + opts.hot_horizon_ms + 10'000;
  auto id = add(due);
  BOOST_TEST(fire(due - opts.fire_lead_ms - 1).empty());
  store->fail_reads = true;
  BOOST_TEST(logic->fire(due).code() == errc::io_error);
  BOOST_TEST(code_of(logic->revoke(due, id)) == errc::io_error);
  BOOST_TEST(!logic->dirty());
  store->fail_reads = false;
  BOOST_TEST(fire_one(due).id().task_id() == id);
}

// -- restart ------------------------------------------------------------------

/// The task as the store holds it, whatever the shard keeps in memory.
storage::task_record stored(storage::rocks_task_store& rocks, task_id id) {
  auto got = rocks.get(id);
  BOOST_REQUIRE(got);
  BOOST_REQUIRE(got->has_value());
  return **got;
}

BOOST_FIXTURE_TEST_CASE(a_first_delivery_goes_out_without_a_write, fixture) {
  // Without the record cache every request reads the store, which still
  // holds the task as pending: the shard completes what it reads.
  auto next = opts;
  next.record_cache_bytes = 0;
  reconfigure(next);
  auto a = add(t0);
  auto b = add(t0 + 1);
  auto c = add(t0 + 2);
  auto commits_before = store->commits;
  auto got = fire(t0 + 2);
  BOOST_REQUIRE_EQUAL(got.size(), 3u);
  BOOST_TEST(store->commits == commits_before, "the fire wrote nothing");
  for (auto id : {a, b, c}) {
    BOOST_TEST((stored(*rocks, id).state == task_state::pending));
    BOOST_TEST(stored(*rocks, id).task.attempt == 0u);
    auto info = get(id);
    BOOST_TEST((info.record.state == task_state::in_flight));
    BOOST_TEST(info.record.task.attempt == 1u);
  }
  BOOST_TEST((revoke(a) == change_outcome::in_flight));
  // A touch writes the delivery as it is.
  auto lease = logic->touch(now, ref_of(got[1]), 60'000);
  BOOST_REQUIRE(lease);
  BOOST_REQUIRE(commit().empty());
  BOOST_TEST((stored(*rocks, b).state == task_state::in_flight));
  BOOST_TEST(stored(*rocks, b).task.attempt == 1u);
  ack(got[1]);
  BOOST_TEST(!rocks->get(b)->has_value());
  // The lease of c runs out: written as pending at attempt 1, and the
  // redelivery is attempt 2.
  BOOST_TEST(fire(got[2].lease_deadline_ms()).empty());
  BOOST_TEST((stored(*rocks, c).state == task_state::pending));
  BOOST_TEST(stored(*rocks, c).task.attempt == 1u);
  auto d = fire_one(got[2].lease_deadline_ms() + backoff_ms);
  BOOST_TEST(d.id().task_id() == c);
  BOOST_TEST(d.attempt() == 2u);
  BOOST_TEST((stored(*rocks, c).state == task_state::in_flight));
  ack(d);
  BOOST_TEST(code_of(logic->get(a)) == errc::not_found);
}

BOOST_FIXTURE_TEST_CASE(at_sync_only_commits_someone_waits_for_are_fsynced,
                        fixture) {
  durability = storage::durability::sync;
  restart();
  auto syncs = [this] { return rocks->stats().syncs; };
  // A commit nobody waits for: a batch consumer's verdict, say.
  auto quiet_commit = [this] {
    auto res = logic->commit(now, false);
    BOOST_REQUIRE_MESSAGE(!res.err, "commit failed: " << res.err);
    std::vector<v1::Delivery> out;
    for (auto& item : res.deliveries)
      out.push_back(std::move(*item.delivery));
    return out;
  };
  auto a = add(t0);
  auto b = add(t0);
  BOOST_TEST(!logic->sync_pending());
  auto before = syncs();
  BOOST_REQUIRE(!logic->fire(now));
  auto got = quiet_commit();
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_TEST(syncs() == before, "first deliveries without a write");
  // The first commit that is not fsync'd fsyncs an id reservation.
  BOOST_REQUIRE(!logic->ack(now, ref_of(got[0])));
  quiet_commit();
  before = syncs();
  BOOST_REQUIRE(!logic->ack(now, ref_of(got[1])));
  quiet_commit();
  BOOST_TEST(syncs() == before);
  BOOST_TEST(logic->sync_pending());
  BOOST_TEST(code_of(logic->get(a)) == errc::not_found);
  BOOST_TEST(code_of(logic->get(b)) == errc::not_found);
  // A reply waits for the fsync of what it reports, even with nothing
  // staged.
  BOOST_TEST(!logic->dirty());
  BOOST_REQUIRE(!logic->commit(now, true).err);
  BOOST_TEST(syncs() == before + 1);
  BOOST_TEST(!logic->sync_pending());
  // A written fire is fsync'd before it goes out: a power loss must not
  // repeat its attempt.
  auto once = add(single_attempt(request(), now)).id;
  before = syncs();
  BOOST_REQUIRE(!logic->fire(now));
  got = quiet_commit();
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0].id().task_id() == once);
  BOOST_TEST(syncs() == before + 1);
  BOOST_REQUIRE(!logic->ack(now, ref_of(got[0])));
  quiet_commit();
  // A recurrence: the ack writes the next occurrence without an fsync, so
  // that occurrence's first delivery, though it writes nothing, must wait
  // for one (else a power loss could deliver it again at attempt 1).
  auto req = request();
  req.mutable_when()->set_every_ms(100);
  auto rec = add(req);
  BOOST_REQUIRE(rec.due_ms == now + 100);
  now = rec.due_ms;
  BOOST_REQUIRE(!logic->fire(now));
  got = quiet_commit();
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  now += 10;
  before = syncs();
  BOOST_REQUIRE(!logic->ack(now, ref_of(got[0])));
  quiet_commit();
  BOOST_TEST(syncs() == before);
  BOOST_TEST(logic->sync_pending());
  now = rec.due_ms + 100;
  BOOST_REQUIRE(!logic->fire(now));
  got = quiet_commit();
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0].id().occurrence() == 1u);
  BOOST_TEST(got[0].attempt() == 1u);
  BOOST_TEST((stored(*rocks, rec.id).state == task_state::pending),
             "a first delivery without a write");
  BOOST_TEST(syncs() == before + 1);
  BOOST_TEST(!logic->sync_pending());
}

BOOST_FIXTURE_TEST_CASE(some_first_deliveries_are_written, fixture) {
  // A task with a single attempt: a crash must not deliver it twice.
  auto once = add(single_attempt(request(), t0)).id;
  // A task due past the last commit's fire horizon.
  auto later = add(t0 + 1'000);
  auto d = fire_one(t0);
  BOOST_TEST(d.id().task_id() == once);
  BOOST_TEST((stored(*rocks, once).state == task_state::in_flight));
  d = fire_one(t0 + 1'000);
  BOOST_TEST(d.id().task_id() == later);
  BOOST_TEST((stored(*rocks, later).state == task_state::in_flight));
}

BOOST_FIXTURE_TEST_CASE(a_restarted_shard_leaves_no_stale_held_attempt,
                        fixture) {
  // Due within the last commit's fire horizon: its first delivery goes out
  // without a write. The other has a single attempt, so its fire is written.
  auto due = t0 + 100;
  auto unwritten = add(due, "unwritten");
  auto written = add(single_attempt(request("jobs", "written"), due)).id;
  BOOST_TEST(fire(due - opts.fire_lead_ms).empty());
  BOOST_TEST(logic->held_size() == 2u);
  BOOST_TEST((stored(*rocks, unwritten).state == task_state::pending));
  BOOST_TEST((stored(*rocks, written).state == task_state::in_flight));
  // The shard fails and its supervisor starts another on the same store,
  // while the notifier (here `releases`) still holds both deliveries.
  reconfigure(opts);
  auto got = fire_all(due);
  std::map<task_id, std::vector<uint32_t>> attempts;
  for (const auto& d : got)
    attempts[d.id().task_id()].push_back(d.attempt());
  // The successor fires the unwritten task again as attempt 2 (its first
  // may have gone out); the old attempt 1 must not go out beside it, in
  // either order (simulator seed 3957860591663489509). The written one's
  // held delivery still goes out on time.
  BOOST_TEST(attempts[unwritten] == std::vector<uint32_t>{2},
             boost::test_tools::per_element());
  BOOST_TEST(attempts[written] == std::vector<uint32_t>{1},
             boost::test_tools::per_element());
  BOOST_TEST(releases.empty());
}

BOOST_FIXTURE_TEST_CASE(a_first_delivery_lost_in_a_crash_comes_back_at_once,
                        fixture) {
  auto a = add(t0);
  auto b = add(t0 + 1);
  auto c = add(t0 + 200, "c", "idle");
  auto got = fire(t0 + 1);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  restart();
  logic->set_topic_available("idle", true);
  // Both may have been delivered: their first attempts count as spent,
  // a reschedule keeps that, and neither waits for its lease.
  BOOST_TEST(get(a).record.task.attempt == 1u);
  auto moved = logic->reschedule(now, b, t0 + 50);
  BOOST_REQUIRE(moved);
  BOOST_TEST((*moved == change_outcome::done));
  BOOST_REQUIRE(commit().empty());
  auto d = fire_one(now);
  BOOST_TEST(d.id().task_id() == a);
  BOOST_TEST(d.attempt() == 2u);
  d = fire_one(t0 + 50);
  BOOST_TEST(d.id().task_id() == b);
  BOOST_TEST(d.attempt() == 2u);
  // So does a task that waited for a consumer and was indexed before the
  // last commit's fire horizon: a spared attempt, never a repeated one.
  d = fire_one(t0 + 200);
  BOOST_TEST(d.id().task_id() == c);
  BOOST_TEST(d.attempt() == 2u);
  // A task scheduled since the restart was not there to fire.
  auto fresh = add(t0 + 10);
  d = fire_one(t0 + 200);
  BOOST_TEST(d.id().task_id() == fresh);
  BOOST_TEST(d.attempt() == 1u);
}

BOOST_FIXTURE_TEST_CASE(restart_recovers_pending_and_in_flight, fixture) {
  auto a = add(t0 + 1'000, "a");
  auto b = add(t0 + 2'000, "b");
  auto c = add(t0 + 500, "c");
  auto got = fire(t0 + 1'000);
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_TEST(got[0].id().task_id() == c); // Due order.
  BOOST_TEST(got[1].id().task_id() == a);
  ack(got[0]);
  auto lease_a = got[1].lease_deadline_ms();
  restart();
  BOOST_TEST(fire(t0 + 1'999).empty());
  auto d = fire_one(t0 + 2'000);
  BOOST_TEST(d.id().task_id() == b);
  BOOST_TEST(d.payload() == "b");
  ack(d);
  // The in-flight one comes back after its lease and the backoff.
  BOOST_TEST(fire(lease_a).empty());
  d = fire_one(lease_a + backoff_ms);
  BOOST_TEST(d.id().task_id() == a);
  BOOST_TEST(d.attempt() == 2u);
  ack(d);
  BOOST_TEST(fire_all(t0 + 3'600'000).empty());
  // The acked one stays gone, and the restarted shard knows it issued it.
  BOOST_TEST(code_of(logic->get(c)) == errc::not_found);
  BOOST_TEST((revoke(c) == change_outcome::completed));
  auto fresh = add(t0 + 10'000);
  BOOST_TEST(fresh > std::max({a, b, c}));
}

/// A due-index key as the store encodes it (time with the sign bit
/// flipped, then the id, both big-endian).
std::string raw_due_key(int64_t at_ms, task_id id) {
  std::string out(16, '\0');
  auto at = static_cast<uint64_t>(at_ms) ^ (uint64_t{1} << 63);
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>(at >> (56 - 8 * i));
    out[8 + i] = static_cast<char>(id >> (56 - 8 * i));
  }
  return out;
}

/// Moves one entry of the closed store's due index, with plain RocksDB.
void move_due_entry(const std::string& path, const due_key& from,
                    const due_key& to) {
  rocksdb::Options options;
  std::vector<std::string> names;
  BOOST_REQUIRE(rocksdb::DB::ListColumnFamilies(options, path, &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const auto& name : names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  BOOST_REQUIRE(
    rocksdb::DB::Open(options, path, descriptors, &handles, &raw).ok());
  std::unique_ptr<rocksdb::DB> db{raw};
  for (auto* handle : handles)
    if (handle->GetName() == "due") {
      rocksdb::WriteBatch batch;
      BOOST_REQUIRE(
        batch.Delete(handle, raw_due_key(from.index_ms, from.id)).ok());
      BOOST_REQUIRE(
        batch.Put(handle, raw_due_key(to.index_ms, to.id), "").ok());
      BOOST_REQUIRE(db->Write(rocksdb::WriteOptions{}, &batch).ok());
    }
  for (auto* handle : handles)
    BOOST_REQUIRE(db->DestroyColumnFamilyHandle(handle).ok());
  BOOST_REQUIRE(db->Close().ok());
}

BOOST_FIXTURE_TEST_CASE(an_older_stores_lease_entry_is_moved, fixture) {
  // Stores written before deliveries left the due index alone keep an
  // in-flight task's entry at its lease deadline: the shard still honours
  // the lease and moves the entry to the task's index time. (Due well past
  // the commit's fire horizon: its first delivery is written.)
  auto due = t0 + 1'000;
  auto id = add(due);
  auto d1 = fire_one(due);
  auto lease_ms = d1.lease_deadline_ms();
  BOOST_REQUIRE((scan() == std::vector<due_key>{{due, id}}));
  logic.reset();
  store.reset();
  rocks.reset();
  move_due_entry((dir.path() / "shard").string(), {due, id}, {lease_ms, id});
  open();
  BOOST_REQUIRE((scan() == std::vector<due_key>{{lease_ms, id}}));
  BOOST_TEST(fire(lease_ms - opts.fire_lead_ms - 1).empty());
  BOOST_TEST((scan() == std::vector<due_key>{{lease_ms, id}}));
  // Popped a lead ahead (as due work would be): the entry moves.
  BOOST_TEST(fire(lease_ms - 1).empty());
  BOOST_TEST((scan() == std::vector<due_key>{{due, id}}));
  BOOST_TEST((get(id).record.state == task_state::in_flight));
  // The lease runs out: redelivered after the backoff, attempt 2.
  BOOST_TEST(fire(lease_ms).empty());
  BOOST_TEST((scan() == std::vector<due_key>{{lease_ms + backoff_ms, id}}));
  auto d2 = fire_one(lease_ms + backoff_ms);
  BOOST_TEST(d2.attempt() == 2u);
  ack(d2);
  BOOST_TEST(scan().empty());
}

BOOST_FIXTURE_TEST_CASE(maintain_syncs_and_expires, fixture) {
  auto t = make(t0, "x");
  t.idempotency_key = "expiring";
  BOOST_REQUIRE(logic->schedule(now, t));
  commit();
  BOOST_TEST(!logic->maintain(t0 + 1));
  BOOST_TEST(store->find_key("expiring", t0 + 1)->has_value());
  BOOST_TEST(!logic->maintain(t0 + opts.key_retention_ms + 1));
  BOOST_TEST(!store->find_key("expiring", t0)->has_value());
}

// -- randomized ---------------------------------------------------------------

namespace {

/// What the test knows about a task, to check every delivery against.
struct model_task {
  std::string topic;
  /// Acked or revoked (committed or staged in the model's batch).
  bool gone = false;
  bool in_flight = false;
  /// Fired and committed, its delivery held until due (not yet released).
  bool held = false;
  /// A hold of the task was cancelled by a batch whose commit failed, or
  /// lost in a restart: the fired attempt comes back after its lease, so
  /// the next delivery may skip one attempt.
  bool may_skip = false;
  /// Pending: the earliest instant a delivery may happen.
  int64_t not_before = 0;
  /// In flight: the current delivery and its lease (held: the held
  /// delivery's lease).
  delivery_ref current;
  int64_t lease_deadline_ms = 0;
  /// The held delivery's lease ran out before its release (a fire after
  /// its deadline expired it): its release is stale.
  bool stale_hold = false;
  /// Deliveries of the current occurrence so far.
  uint32_t attempt = 0;
};

/// Random batches of requests, fires (most of them ahead of the due time,
/// held until released), settles, failed commits, topic changes and
/// restarts, checked against a model: nothing early, nothing after an ack
/// or revoke, attempts one by one, and in the end everything live is
/// delivered and acked.
void run_random(uint64_t seed) {
  BOOST_TEST_CONTEXT("seed " << seed) {
    dally::storage::test::prng rng{seed};
    fixture f;
    auto next = f.opts;
    next.overdue_rate_per_s = 0; // Deterministic: no pacing.
    next.fire_batch = 1'000'000;
    next.fire_lead_ms = 2'000;
    next.default_policy.max_attempts = 1'000;
    f.reconfigure(next);
    std::map<task_id, model_task> committed;
    bool slow_available = false;
    auto backoff = [&](uint32_t attempt) {
      return f.opts.default_policy.backoff_ms(attempt);
    };
    auto pick = [&](const std::map<task_id, model_task>& tasks,
                    bool in_flight_only) -> std::optional<task_id> {
      std::vector<task_id> ids;
      for (const auto& [id, t] : tasks)
        if (!t.gone && (!in_flight_only || t.in_flight))
          ids.push_back(id);
      if (ids.empty())
        return std::nullopt;
      return ids[rng.below(ids.size())];
    };
    for (int round = 0; round < 150; ++round) {
      auto staged = committed;
      auto last_fire = std::numeric_limits<int64_t>::min();
      // Held tasks revoked or rescheduled in this batch: their holds are
      // cancelled even if the commit fails.
      std::set<task_id> taken_back;
      auto ops = rng.between(1, 6);
      for (uint64_t op = 0; op < ops; ++op) {
        f.now += static_cast<int64_t>(rng.below(3'000));
        auto now = f.now;
        auto kind = rng.below(100);
        if (kind < 30) {
          auto topic = rng.below(3) == 0 ? "slow" : "jobs";
          auto due = now - 5'000 + static_cast<int64_t>(rng.below(25'000));
          auto res = f.logic->schedule(now, f.make(due, "p", topic));
          BOOST_REQUIRE(res);
          model_task t;
          t.topic = topic;
          t.not_before = due;
          staged[res->id] = t;
        } else if (kind < 55) {
          BOOST_REQUIRE(!f.logic->fire(now));
          last_fire = now;
          // Every committed lease that ran out expires now (not paced, not
          // parked). A lease touched in this batch has its new deadline in
          // the window only after the commit.
          for (auto& [id, t] : staged) {
            auto before = committed.find(id);
            if (!t.gone && t.in_flight && t.lease_deadline_ms <= now &&
                before != committed.end() && before->second.in_flight &&
                before->second.lease_deadline_ms == t.lease_deadline_ms) {
              t.in_flight = false;
              t.not_before = now + backoff(t.attempt);
            } else if (!t.gone && t.held && t.lease_deadline_ms <= now &&
                       before != committed.end() && before->second.held) {
              // Held past its whole lease (the model releases only between
              // batches): expired like a delivery in flight.
              t.held = false;
              t.stale_hold = true;
              t.attempt += 1;
              t.not_before = now + backoff(t.attempt);
            }
          }
        } else if (kind < 70) {
          auto id = pick(committed, true);
          if (!id)
            continue;
          auto& t = staged[*id];
          auto err = f.logic->ack(now, committed[*id].current);
          if (!err) {
            BOOST_TEST(t.in_flight);
            t.gone = true;
            t.in_flight = false;
          } else {
            BOOST_TEST(err.code() == errc::stale_delivery);
            BOOST_TEST(!t.in_flight,
                       "task "
                         << *id << ": "
                         << err.message()); // Expired in this batch, or gone.
          }
        } else if (kind < 75) {
          auto id = pick(committed, true);
          if (!id)
            continue;
          auto& t = staged[*id];
          auto retry = static_cast<int64_t>(rng.below(5'000));
          auto err = f.logic->nack(now, committed[*id].current, retry);
          if (!err) {
            BOOST_TEST(t.in_flight);
            t.in_flight = false;
            t.not_before = now + retry;
          } else {
            BOOST_TEST(!t.in_flight);
          }
        } else if (kind < 80) {
          auto id = pick(committed, true);
          if (!id)
            continue;
          auto& t = staged[*id];
          auto ext = static_cast<int64_t>(rng.below(20'000));
          auto res = f.logic->touch(now, committed[*id].current, ext);
          if (res) {
            BOOST_TEST(t.in_flight);
            t.lease_deadline_ms = *res;
          } else {
            BOOST_TEST(!t.in_flight);
          }
        } else if (kind < 90) {
          auto id = pick(staged, false);
          if (!id)
            continue;
          auto& t = staged[*id];
          auto res = f.logic->revoke(now, *id);
          BOOST_REQUIRE(res);
          if (t.held) {
            BOOST_TEST((*res == change_outcome::done));
            taken_back.insert(*id);
          } else if (t.in_flight || t.may_skip)
            BOOST_TEST((*res == change_outcome::in_flight ||
                        *res == change_outcome::done));
          else
            BOOST_TEST((*res == change_outcome::done));
          t.gone = true;
          t.in_flight = false;
          t.held = false;
        } else {
          auto id = pick(staged, false);
          if (!id)
            continue;
          auto& t = staged[*id];
          auto due = now + static_cast<int64_t>(rng.below(10'000));
          auto res = f.logic->reschedule(now, *id, due);
          BOOST_REQUIRE(res);
          if (t.held) {
            // Fired ahead and not released: the fire is undone.
            BOOST_TEST((*res == change_outcome::done));
            taken_back.insert(*id);
            t.held = false;
            t.not_before = due;
          } else if (*res == change_outcome::done) {
            BOOST_TEST(!t.in_flight);
            t.not_before = due;
          } else {
            // In flight (its delivery seen, or its hold lost), or fired
            // earlier in this batch while due.
            BOOST_TEST((*res == change_outcome::in_flight));
            BOOST_TEST(
              (t.in_flight || t.may_skip || t.not_before <= last_fire));
          }
        }
      }
      f.store->fail_commits = rng.below(10) == 0;
      auto res = f.logic->commit(f.now);
      f.store->fail_commits = false;
      BOOST_REQUIRE(!f.logic->dirty());
      if (res.err) {
        BOOST_TEST(res.deliveries.empty());
        for (auto id : taken_back) {
          if (auto it = committed.find(id); it != committed.end()) {
            it->second.held = false;
            it->second.may_skip = true;
          }
        }
      } else {
        for (auto& item : res.deliveries) {
          const auto& d = *item.delivery;
          auto it = staged.find(d.id().task_id());
          BOOST_REQUIRE(it != staged.end());
          auto& t = it->second;
          BOOST_TEST(!t.gone);
          BOOST_TEST(!t.in_flight);
          BOOST_TEST(!t.held);
          BOOST_TEST(item.release_ms >= t.not_before);
          BOOST_TEST(item.release_ms >= d.due_ms());
          if (t.may_skip)
            BOOST_TEST(d.attempt() >= t.attempt + 1,
                       "task " << d.id().task_id());
          else
            BOOST_TEST(d.attempt() == t.attempt + 1);
          BOOST_TEST((d.topic() != "slow" || slow_available));
          t.held = true;
          t.may_skip = false;
          t.stale_hold = false;
          t.lease_deadline_ms = d.lease_deadline_ms();
          f.releases.push(std::move(item));
        }
        committed = std::move(staged);
      }
      for (const auto& box : f.releases.pop_due(f.now)) {
        const auto& d = *box;
        auto& t = committed.at(d.id().task_id());
        if (t.stale_hold && d.attempt() == t.attempt) {
          t.stale_hold = false;
          continue;
        }
        BOOST_TEST(t.held);
        BOOST_TEST(!t.gone);
        BOOST_TEST(d.fire_ms() >= t.not_before);
        BOOST_TEST(d.fire_ms() >= d.due_ms());
        t.held = false;
        t.in_flight = true;
        t.current = ref_of(d);
        t.lease_deadline_ms = d.lease_deadline_ms();
        t.attempt = d.attempt();
      }
      if (rng.below(8) == 0) {
        slow_available = !slow_available;
        f.logic->set_topic_available("slow", slow_available);
      }
      if (rng.below(25) == 0) {
        // Held deliveries die with the process.
        for (auto& [id, t] : committed) {
          if (t.held) {
            t.held = false;
            t.may_skip = true;
          }
        }
        f.restart();
        f.reconfigure(next);
        f.logic->set_topic_available("slow", slow_available);
        // A first delivery that went out without a write is pending again,
        // its attempt counted as spent: it fires again at once. Any task
        // pending at attempt 0 and indexed up to the last commit's fire
        // horizon may have been delivered like that, so its next delivery
        // may skip an attempt too.
        for (auto& [id, t] : committed) {
          if (t.gone)
            continue;
          if (!t.in_flight) {
            if (t.attempt == 0)
              t.may_skip = true;
          } else if (f.get(id).record.state == task_state::pending) {
            BOOST_TEST(t.attempt == 1u);
            t.in_flight = false;
            t.may_skip = true;
          }
        }
      }
    }
    // Liveness: with every topic served, everything live fires and is
    // acked.
    f.logic->set_topic_available("slow", true);
    for (int i = 0; i < 600; ++i) {
      f.now += 1'000;
      for (const auto& d : f.fire_all(f.now)) {
        auto& t = committed.at(d.id().task_id());
        BOOST_TEST(!t.gone);
        BOOST_TEST(d.fire_ms() >= d.due_ms());
        f.ack(d);
        t.gone = true;
      }
    }
    for (const auto& [id, t] : committed)
      BOOST_TEST(t.gone, "task " << id << " never completed");
    BOOST_TEST(f.fire_all(f.now + 3'600'000).empty());
    BOOST_TEST(f.logic->window_size() == 0u);
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(random_batches_against_a_model) {
  for (uint64_t seed = 1; seed <= 6; ++seed)
    run_random(seed);
}

BOOST_FIXTURE_TEST_CASE(answers_to_committed_fires_read_nothing, fixture) {
  for (int i = 0; i < 3; ++i)
    add(now);
  auto fired = fire(now);
  BOOST_REQUIRE_EQUAL(fired.size(), 3u);
  // The in-flight records are cached: with every store read failing, an
  // ack, a touch and the ack after it, and a nack all still work.
  store->fail_reads = true;
  BOOST_TEST(!logic->ack(now, ref_of(fired[0])));
  commit();
  auto touched = logic->touch(now, ref_of(fired[1]), 60'000);
  BOOST_REQUIRE_MESSAGE(touched, "touch failed: " << error_of(touched));
  commit();
  BOOST_TEST(!logic->ack(now, ref_of(fired[1])));
  commit();
  BOOST_TEST(!logic->nack(now, ref_of(fired[2]), 500));
  commit();
  store->fail_reads = false;
  BOOST_TEST(!live(fired[0].id().task_id()));
  BOOST_TEST(!live(fired[1].id().task_id()));
  // The nacked task comes back with attempt 2; the cache holds that
  // delivery's record, not the first one's.
  auto again = fire_one(now + 500);
  BOOST_TEST(again.id().task_id() == fired[2].id().task_id());
  BOOST_TEST(again.attempt() == 2u);
  store->fail_reads = true;
  BOOST_TEST(code_of(logic->touch(now, ref_of(fired[2]), 0)) ==
             errc::stale_delivery);
  BOOST_TEST(!logic->ack(now, ref_of(again)));
  commit();
  store->fail_reads = false;
  BOOST_TEST(!live(again.id().task_id()));
  // Without the cache the same ack needs a read (and fails here).
  auto next = opts;
  next.record_cache_bytes = 0;
  reconfigure(next);
  add(now);
  auto uncached = fire_one(now);
  store->fail_reads = true;
  BOOST_TEST(logic->ack(now, ref_of(uncached)).code() == errc::io_error);
  store->fail_reads = false;
  ack(uncached);
}

BOOST_FIXTURE_TEST_CASE(tasks_due_soon_fire_without_a_read, fixture) {
  // Due within hot_horizon_ms of their commit: cached, fired with every
  // store read failing.
  auto soon = add(now + 1'000, "soon");
  auto later = add(now + opts.hot_horizon_ms + 60'000, "later");
  store->fail_reads = true;
  auto fired = fire(now + 1'000);
  BOOST_REQUIRE_EQUAL(fired.size(), 1u);
  BOOST_TEST(fired[0].id().task_id() == soon);
  BOOST_TEST(fired[0].payload() == "soon");
  BOOST_TEST(!logic->ack(now, ref_of(fired[0])));
  commit();
  // Due later: not cached, so its fire reads (and fails here).
  BOOST_TEST(logic->fire(now + opts.hot_horizon_ms + 60'000).code() ==
             errc::io_error);
  store->fail_reads = false;
  auto second = fire(now + opts.hot_horizon_ms + 60'000);
  BOOST_REQUIRE_EQUAL(second.size(), 1u);
  BOOST_TEST(second[0].id().task_id() == later);
  ack(second[0]);
  // A reschedule into the horizon caches the new record, not the old one.
  auto moved = add(now + opts.hot_horizon_ms + 60'000, "moved");
  auto target = now + 500;
  auto res = logic->reschedule(now, moved, target);
  BOOST_REQUIRE_MESSAGE(res, "reschedule failed: " << error_of(res));
  commit();
  store->fail_reads = true;
  auto third = fire(target);
  BOOST_REQUIRE_EQUAL(third.size(), 1u);
  BOOST_TEST(third[0].id().task_id() == moved);
  BOOST_TEST(third[0].due_ms() == target);
  store->fail_reads = false;
}

BOOST_FIXTURE_TEST_CASE(a_saturated_topic_leaves_its_backlog_in_the_window,
                        fixture) {
  // A shard behind on its only topic used to pop its whole due backlog as
  // soon as the topic saturated, reading every record to park it, and read
  // it again when the topic took it up: beyond the record cache, two reads
  // per task instead of one, and more work per task the further behind it
  // was. While every topic is closed waiting for answers, it pops nothing.
  constexpr int n = 4000;
  core::task_record probe;
  probe.task = make(t0);
  auto next = opts;
  next.max_unanswered_per_topic = 64;
  next.fire_batch = 64;
  next.record_cache_bytes = 300 * dally::logic::record_cache::footprint(probe);
  reconfigure(next);
  std::vector<task_id> ids;
  for (int i = 0; i < n; ++i) {
    auto res = logic->schedule(now, make(t0 + 10 + i * 900 / n));
    BOOST_REQUIRE(res);
    ids.push_back(res->id);
    if (i % 64 == 63)
      BOOST_REQUIRE(commit().empty());
  }
  BOOST_REQUIRE(commit().empty());
  auto reads_before = store->reads;
  std::vector<task_id> fired;
  uint64_t most_parked = 0;
  for (int round = 0; round < n && fired.size() < size_t{n}; ++round) {
    for (const auto& d : fire_all(t0 + 1'000 + round)) {
      fired.push_back(d.id().task_id());
      ack(d);
    }
    for (const auto& [topic, count] : logic->waiting())
      most_parked = std::max(most_parked, count);
  }
  BOOST_TEST(fired == ids, boost::test_tools::per_element());
  // What one pass popped after the topic saturated, not the backlog.
  BOOST_TEST(most_parked <= 64u);
  auto reads = store->reads - reads_before;
  BOOST_TEST_MESSAGE("reads for " << n << " fires: " << reads);
  // One read per task beyond the cache (its fire; its ack finds the
  // in-flight record cached); popping to park read 7,400 here.
  BOOST_TEST(reads <= size_t{n});
}

BOOST_FIXTURE_TEST_CASE(a_closed_topic_does_not_hold_up_an_open_one, fixture) {
  // Popping pauses only while no topic can fire: with another topic open,
  // the saturated topic's due tasks are still popped and parked, and the
  // open topic's tasks behind them fire.
  auto next = opts;
  next.max_unanswered_per_topic = 2;
  reconfigure(next);
  logic->set_topic_available("other", true);
  for (int i = 0; i < 10; ++i)
    add(t0 + 10 + i);
  auto other = add(t0 + 50, "o", "other");
  auto got = fire_all(t0 + 100);
  BOOST_REQUIRE_EQUAL(got.size(), 3u);
  BOOST_TEST(got.back().id().task_id() == other);
  BOOST_TEST(logic->waiting().at("jobs") == 8u);
  // No topic open and "jobs" waiting for answers: "other" has lost its
  // consumer, and its next due task stays in the window for now.
  logic->set_topic_available("other", false);
  ack(got[2]);
  add(t0 + 150, "o2", "other");
  BOOST_TEST(fire_all(t0 + 200).empty());
  BOOST_TEST(logic->waiting().count("other") == 0u);
  // Nothing waits for answers any more: every due task is parked, as for
  // topics without consumers.
  logic->set_topic_available("jobs", false);
  ack(got[0]);
  ack(got[1]);
  BOOST_TEST(fire_all(t0 + 200).empty());
  BOOST_TEST(logic->waiting().at("other") == 1u);
  BOOST_TEST(logic->waiting().at("jobs") == 8u);
}
