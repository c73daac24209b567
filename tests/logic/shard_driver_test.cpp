#define BOOST_TEST_MODULE shard_driver
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/placement.hpp"
#include "core/recurrence.hpp"
#include "logic/armed_timer.hpp"
#include "logic/shard_driver.hpp"
#include "logic/shard_logic.hpp"
#include "storage/rocks_task_store.hpp"
#include "tests/storage/test_support.hpp"

using namespace dally;
using logic::shard_driver;
using logic::shard_effects;

namespace {

constexpr int64_t t0 = 1'700'000'000'000;

/// Hands every call to a real store; fails commits on demand.
class failing_store final : public storage::task_store {
public:
  explicit failing_store(storage::task_store& inner) : inner_(inner) {}

  bool fail_commits = false;

  core::error commit(const storage::write_batch& batch) override {
    if (fail_commits)
      return core::error{core::errc::io_error, "injected commit failure"};
    return inner_.commit(batch);
  }
  core::error sync_if_due(int64_t now_ms) override {
    return inner_.sync_if_due(now_ms);
  }
  bool sync_pending() const noexcept override { return inner_.sync_pending(); }
  core::error sync() override { return inner_.sync(); }
  core::error index_deferred() override { return inner_.index_deferred(); }
  core::error write_failure() const override {
    if (fail_commits)
      return core::error{core::errc::io_error, "the store is unwritable"};
    return inner_.write_failure();
  }
  core::task_id allocate_id() override { return inner_.allocate_id(); }
  core::result<std::optional<storage::task_record>>
  get(core::task_id id) override {
    return inner_.get(id);
  }
  core::result<std::vector<storage::task_record>>
  get_many(std::span<const core::task_id> ids) override {
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
  dead_letters(core::task_id after, size_t limit) override {
    return inner_.dead_letters(after, limit);
  }
  core::result<std::optional<storage::dead_letter>>
  get_dead(core::task_id id) override {
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
  storage::task_store& inner_;
};

/// A shard's logic and driver over a real store, with both clocks in the
/// test's hands.
struct fixture {
  explicit fixture(storage::durability durability = storage::durability::none,
                   size_t notifiers = 2) {
    storage::store_options so;
    so.path = dir.str("shard");
    so.durability = durability;
    so.write_buffer_bytes = 1 << 20;
    so.block_cache_bytes = 1 << 20;
    auto res = storage::rocks_task_store::open(so);
    BOOST_REQUIRE(res);
    rocks = std::move(*res);
    store = std::make_unique<failing_store>(*rocks);
    logic::shard_options opts;
    opts.fire_lead_ms = 0;
    logic = std::make_unique<logic::shard_logic>(*store, opts);
    for (const auto* topic : {"a", "b", "c", "d"})
      logic->set_topic_available(topic, true);
    shard_driver::options dopts;
    dopts.notifiers = notifiers;
    dopts.durability = durability;
    dopts.sync_period_ms = 100;
    driver = std::make_unique<shard_driver>(
      *logic, clock, [this] { return steady; }, dopts);
    // The first wake-up loads the window.
    driver->start_waking(fx);
    auto gen = fx.wake->generation;
    fx.clear();
    driver->wake(gen, fx);
    // Armed at the window's next refill, a capped wait away.
    if (fx.wake)
      armed = fx.wake->generation;
    fx.clear();
  }

  /// Stages a task of `topic` due at `due_ms`.
  void schedule(int64_t due_ms, std::string topic = "a") {
    core::task t;
    t.topic = std::move(topic);
    t.payload = "p";
    t.due_ms = due_ms;
    t.recurrence = *core::recurrence::at(due_ms);
    BOOST_REQUIRE(logic->schedule(now, std::move(t)));
  }

  storage::test::temp_dir dir;
  std::unique_ptr<storage::rocks_task_store> rocks;
  std::unique_ptr<failing_store> store;
  std::unique_ptr<logic::shard_logic> logic;
  int64_t now = t0;
  shard_effects::steady_time steady{};
  logic::wall_clock clock{[this] { return now; }};
  std::unique_ptr<shard_driver> driver;
  shard_effects fx;
  /// The wake-up the constructor left armed.
  uint64_t armed = 0;
};

} // namespace

BOOST_AUTO_TEST_CASE(replies_wait_for_the_commit_of_what_is_staged) {
  fixture f;
  BOOST_TEST(!f.driver->hold_reply(f.fx));
  BOOST_TEST(!f.fx.flush);
  f.schedule(t0 + 700);
  BOOST_TEST(f.driver->hold_reply(f.fx));
  BOOST_TEST(f.fx.flush);
  f.fx.clear();
  // One flush message per batch.
  BOOST_TEST(f.driver->hold_reply(f.fx));
  BOOST_TEST(!f.fx.flush);
  BOOST_TEST(f.driver->held() == 2u);
  f.driver->flush(f.fx);
  BOOST_TEST(f.fx.answer_held);
  BOOST_TEST(!f.fx.held_error);
  BOOST_TEST(!f.fx.restart);
  BOOST_TEST(f.driver->held() == 0u);
  // The task's wake-up.
  BOOST_REQUIRE(f.fx.wake.has_value());
  BOOST_TEST(f.fx.wake->delay_us == 700'000);
  BOOST_REQUIRE(f.fx.maintain.has_value());
  BOOST_TEST(f.fx.maintain->delay_us == 500'000);
}

BOOST_AUTO_TEST_CASE(a_settle_nobody_waits_for_is_never_held) {
  fixture f;
  f.schedule(t0 + 1'000);
  BOOST_TEST(!f.driver->settle_reply(core::error{}, false, f.fx));
  BOOST_TEST(f.fx.flush);
  f.fx.clear();
  fixture g;
  auto refused = core::error{core::errc::stale_delivery, "stale"};
  BOOST_TEST(!g.driver->settle_reply(refused, false, g.fx));
  BOOST_TEST(!g.fx.flush);
  // Awaited, refused, nothing staged: answered at once.
  BOOST_TEST(!g.driver->settle_reply(refused, true, g.fx));
  g.schedule(t0);
  BOOST_TEST(g.driver->settle_reply(refused, true, g.fx));
}

BOOST_AUTO_TEST_CASE(one_wake_up_is_armed_at_the_next_work) {
  fixture f;
  f.schedule(t0 + 500);
  f.schedule(t0 + 900);
  f.driver->flush(f.fx);
  BOOST_REQUIRE(f.fx.wake.has_value());
  auto armed = f.fx.wake->generation;
  BOOST_TEST(f.fx.wake->delay_us == 500'000);
  f.fx.clear();
  // Later work leaves the armed wake-up alone.
  f.driver->arm(f.fx);
  BOOST_TEST(!f.fx.wake.has_value());
  f.schedule(t0 + 200);
  f.driver->flush(f.fx);
  BOOST_REQUIRE(f.fx.wake.has_value());
  BOOST_TEST(f.fx.wake->delay_us == 200'000);
  BOOST_TEST(f.fx.wake->generation != armed);
  auto sooner = f.fx.wake->generation;
  f.fx.clear();
  // The replaced wake-up changes nothing when it comes.
  f.now = t0 + 500;
  f.steady += std::chrono::milliseconds{500};
  f.driver->wake(armed, f.fx);
  BOOST_TEST(!f.fx.has_deliveries);
  BOOST_TEST(!f.fx.wake.has_value());
  // The armed one fires what is due and commits it at once.
  f.driver->wake(sooner, f.fx);
  BOOST_TEST(f.fx.has_deliveries);
  BOOST_REQUIRE(f.fx.wake.has_value());
  BOOST_TEST(f.fx.wake->delay_us == 400'000);
}

BOOST_AUTO_TEST_CASE(no_wake_up_waits_longer_than_the_cap) {
  fixture f;
  f.schedule(t0 + 3'600'000);
  f.driver->flush(f.fx);
  // The wake-up armed before comes within a second: it stays in charge.
  BOOST_TEST(!f.fx.wake.has_value());
  auto gen = f.armed;
  f.fx.clear();
  // It comes, nothing is due: it waits another second, no more.
  f.now += 1'000;
  f.steady += std::chrono::seconds{1};
  f.driver->wake(gen, f.fx);
  BOOST_TEST(!f.fx.has_deliveries);
  BOOST_REQUIRE(f.fx.wake.has_value());
  BOOST_TEST(f.fx.wake->delay_us == logic::armed_timer::max_wait_us);
}

// Issue 52, forward step: 8 tasks due in 4 minutes, the wall clock steps
// 1 h forward, 8 tasks due at once are scheduled. The armed wake-up (for
// the first task, on the old clock) must not stay in charge.
BOOST_AUTO_TEST_CASE(a_forward_step_fires_what_is_due_on_the_new_clock) {
  fixture f;
  for (int i = 0; i < 8; ++i)
    f.schedule(t0 + 240'000);
  f.driver->flush(f.fx);
  f.fx.clear();
  f.steady += std::chrono::milliseconds{100};
  f.now += 3'600'000 + 100;
  for (int i = 0; i < 8; ++i)
    f.schedule(f.now);
  f.driver->flush(f.fx);
  BOOST_REQUIRE(f.fx.wake.has_value());
  BOOST_TEST(f.fx.wake->delay_us == 0);
  BOOST_TEST(f.fx.log.find("warning: the wall clock stepped forward by "
                           "3600000 ms") != std::string::npos,
             f.fx.log);
  auto gen = f.fx.wake->generation;
  f.fx.clear();
  f.driver->wake(gen, f.fx);
  BOOST_TEST(f.fx.has_deliveries);
  size_t fired = 0;
  for (const auto& part : f.fx.deliveries)
    fired += part.size();
  BOOST_TEST(fired == 16u);
}

// Issue 52, back then forth: the wall clock steps back 1 h and returns
// 12 s later. Nothing fires while it is back; what came due fires within
// a wait of the return, none stranded.
BOOST_AUTO_TEST_CASE(a_step_back_and_its_return_strand_nothing) {
  fixture f;
  for (int i = 0; i < 4; ++i)
    f.schedule(t0 + 5'000 + i);
  f.driver->flush(f.fx);
  BOOST_TEST(!f.fx.wake.has_value());
  auto gen = f.armed;
  f.fx.clear();
  // Back an hour, one second later.
  f.steady += std::chrono::seconds{1};
  f.now = t0 + 1'000 - 3'600'000;
  f.driver->wake(gen, f.fx);
  BOOST_TEST(!f.fx.has_deliveries);
  BOOST_TEST(f.fx.log.find("stepped back by 3600000 ms") != std::string::npos,
             f.fx.log);
  BOOST_REQUIRE(f.fx.wake.has_value());
  BOOST_TEST(f.fx.wake->delay_us <= logic::armed_timer::max_wait_us);
  // Waking every second while it is back fires nothing.
  for (int i = 0; i < 12; ++i) {
    gen = f.fx.wake->generation;
    f.fx.clear();
    f.steady += std::chrono::seconds{1};
    f.now += 1'000;
    f.driver->wake(gen, f.fx);
    BOOST_TEST(!f.fx.has_deliveries);
    BOOST_REQUIRE(f.fx.wake.has_value());
  }
  // It returns: the next wake-up, at most a second on, fires all four.
  gen = f.fx.wake->generation;
  f.fx.clear();
  f.steady += std::chrono::seconds{1};
  f.now = t0 + 14'000;
  f.driver->wake(gen, f.fx);
  size_t fired = 0;
  for (const auto& part : f.fx.deliveries)
    fired += part.size();
  BOOST_TEST(fired == 4u);
}

namespace {

/// The attempts of what `fx` delivered, taken out as the actor does and
/// released as a notifier does.
std::vector<uint32_t> take_attempts(shard_effects& fx) {
  std::vector<uint32_t> out;
  if (!fx.has_deliveries)
    return out;
  for (auto& part : fx.deliveries) {
    for (const auto& item : part) {
      out.push_back(item.delivery->id().attempt());
      if (item.hold)
        BOOST_TEST(item.hold->claim());
    }
    part.clear();
  }
  return out;
}

} // namespace

// A lease is a length of time: a step of the wall clock back by an hour
// while a task is in flight does not hold it (and, under a cap on
// unanswered deliveries, its topic) for an hour more. Its lease runs out
// 30 s after the delivery, as granted. (The task was due 2 h before:
// nothing fires before its due time, whatever the step.)
BOOST_AUTO_TEST_CASE(a_running_lease_keeps_its_length_across_a_step_back) {
  fixture f;
  f.schedule(t0 - 7'200'000);
  f.driver->flush(f.fx);
  auto gen = f.fx.wake->generation;
  f.fx.clear();
  f.driver->wake(gen, f.fx);
  BOOST_TEST(take_attempts(f.fx) == std::vector<uint32_t>{1});
  BOOST_REQUIRE(f.fx.wake.has_value());
  // Back an hour, one second after the delivery; then a second a wake-up.
  f.now = t0 + 1'000 - 3'600'000;
  std::vector<uint32_t> later;
  for (int s = 1; s <= 40 && later.empty(); ++s) {
    gen = f.fx.wake->generation;
    f.fx.clear();
    f.steady += std::chrono::seconds{1};
    if (s > 1)
      f.now += 1'000;
    f.driver->wake(gen, f.fx);
    later = take_attempts(f.fx);
    if (!later.empty())
      BOOST_TEST(s >= 30, "redelivered " << s
                                         << " s after the delivery, attempt "
                                         << later.front());
    BOOST_REQUIRE(f.fx.wake.has_value());
  }
  BOOST_TEST(later == std::vector<uint32_t>{2});
}

BOOST_AUTO_TEST_CASE(deliveries_go_to_the_notifier_of_their_topic) {
  fixture f{storage::durability::none, 3};
  for (const auto* topic : {"a", "b", "c", "d"})
    f.schedule(t0, topic);
  f.driver->flush(f.fx);
  f.fx.clear();
  f.driver->start_waking(f.fx);
  auto gen = f.fx.wake->generation;
  f.fx.clear();
  f.driver->wake(gen, f.fx);
  BOOST_REQUIRE(f.fx.has_deliveries);
  BOOST_REQUIRE(f.fx.deliveries.size() == 3u);
  size_t total = 0;
  for (size_t i = 0; i < 3; ++i)
    for (const auto& item : f.fx.deliveries[i]) {
      ++total;
      BOOST_TEST(core::notifier_of(item.delivery->topic(), 3) == i);
    }
  BOOST_TEST(total == 4u);
}

BOOST_AUTO_TEST_CASE(a_failed_commit_restarts_the_shard) {
  fixture f;
  f.schedule(t0 + 1'000);
  BOOST_TEST(f.driver->hold_reply(f.fx));
  f.fx.clear();
  f.store->fail_commits = true;
  f.driver->flush(f.fx);
  BOOST_TEST(f.fx.answer_held);
  BOOST_TEST((f.fx.held_error.code() == core::errc::io_error));
  BOOST_TEST((f.fx.restart.code() == core::errc::io_error));
  BOOST_TEST(!f.fx.wake.has_value());
  BOOST_TEST(!f.fx.maintain.has_value());
}

BOOST_AUTO_TEST_CASE(an_unwritable_store_restarts_the_shard) {
  fixture f;
  BOOST_TEST(!f.driver->restart_if_write_failed(f.fx));
  f.store->fail_commits = true;
  BOOST_TEST(f.driver->restart_if_write_failed(f.fx));
  BOOST_TEST(f.fx.answer_held);
  BOOST_TEST(static_cast<bool>(f.fx.restart));
  f.fx.clear();
  f.driver->start_maintaining(f.fx);
  auto gen = f.fx.maintain->generation;
  f.fx.clear();
  f.driver->maintain(gen, f.fx);
  BOOST_TEST(static_cast<bool>(f.fx.restart));
}

BOOST_AUTO_TEST_CASE(housekeeping_comes_sooner_for_an_unsynced_commit) {
  fixture f{storage::durability::sync, 1};
  f.driver->start_maintaining(f.fx);
  auto first = f.fx.maintain->generation;
  BOOST_TEST(f.fx.maintain->delay_us == 0);
  f.fx.clear();
  // Three tasks, committed and fired (fsync'd: replies and deliveries
  // wait).
  f.schedule(t0);
  f.schedule(t0);
  f.schedule(t0);
  BOOST_TEST(f.driver->hold_reply(f.fx));
  f.driver->flush(f.fx);
  f.fx.clear();
  f.driver->start_waking(f.fx);
  auto gen = f.fx.wake->generation;
  f.fx.clear();
  f.driver->wake(gen, f.fx);
  BOOST_REQUIRE(f.fx.has_deliveries);
  std::vector<logic::verdict> acks;
  for (const auto& item : f.fx.deliveries[0]) {
    const auto& id = item.delivery->id();
    acks.push_back({{id.task_id(), id.occurrence(), id.attempt()}, true, {}});
  }
  BOOST_REQUIRE(acks.size() == 3u);
  f.fx.clear();
  // The first commit nobody waits for is fsync'd all the same: it moves
  // the store's reservation of ids ahead.
  f.driver->settle(std::span{acks}.first(1), f.fx);
  f.driver->flush(f.fx);
  BOOST_TEST(!f.logic->sync_pending());
  f.fx.clear();
  // An ack nobody waits for is not fsync'd at once; the housekeeping armed
  // at start comes sooner than the sync period anyway.
  f.driver->settle(std::span{acks}.subspan(1, 1), f.fx);
  f.driver->flush(f.fx);
  BOOST_TEST(f.logic->sync_pending());
  BOOST_TEST(!f.fx.maintain.has_value());
  f.fx.clear();
  // A report waits for the fsync.
  BOOST_TEST(f.driver->hold_report(f.fx));
  BOOST_TEST(f.fx.flush);
  f.fx.clear();
  f.driver->maintain(first, f.fx);
  BOOST_TEST(f.fx.log.empty());
  BOOST_TEST(!f.fx.restart);
  BOOST_TEST(!f.logic->sync_pending());
  BOOST_TEST(!f.fx.maintain.has_value());
  f.driver->flush(f.fx); // The report's.
  f.fx.clear();
  // The next one is armed within the sync period.
  f.driver->settle(std::span{acks}.subspan(2), f.fx);
  f.driver->flush(f.fx);
  BOOST_TEST(f.logic->sync_pending());
  BOOST_REQUIRE(f.fx.maintain.has_value());
  BOOST_TEST(f.fx.maintain->delay_us == 100'000);
  auto second = f.fx.maintain->generation;
  f.fx.clear();
  // A replaced housekeeping changes nothing; the armed one, within the
  // period, does not sync yet and comes again.
  f.now += 50;
  f.driver->maintain(first, f.fx);
  BOOST_TEST(!f.fx.maintain.has_value());
  f.driver->maintain(second, f.fx);
  BOOST_TEST(f.logic->sync_pending());
  BOOST_REQUIRE(f.fx.maintain.has_value());
  BOOST_TEST(f.fx.maintain->delay_us == 100'000);
}

BOOST_AUTO_TEST_CASE(stopping_flushes_what_is_staged) {
  fixture f;
  f.driver->stop(f.fx);
  BOOST_TEST(!f.fx.answer_held);
  f.schedule(t0 + 1'000);
  f.driver->stop(f.fx);
  BOOST_TEST(f.fx.answer_held);
  BOOST_TEST(!f.logic->dirty());
}

BOOST_AUTO_TEST_CASE(verdicts_settle_together) {
  fixture f;
  f.schedule(t0);
  f.schedule(t0);
  f.driver->flush(f.fx);
  f.fx.clear();
  f.driver->start_waking(f.fx);
  auto gen = f.fx.wake->generation;
  f.fx.clear();
  f.driver->wake(gen, f.fx);
  BOOST_REQUIRE(f.fx.has_deliveries);
  std::vector<logic::verdict> verdicts;
  for (auto& part : f.fx.deliveries)
    for (auto& item : part) {
      const auto& id = item.delivery->id();
      verdicts.push_back(logic::verdict{
        {id.task_id(), id.occurrence(), id.attempt()}, verdicts.empty(), 500});
    }
  BOOST_REQUIRE(verdicts.size() == 2u);
  f.fx.clear();
  f.driver->settle(verdicts, f.fx);
  BOOST_TEST(f.fx.flush);
  BOOST_TEST(f.logic->dirty());
  f.fx.clear();
  // Refused (stale now): nothing to flush.
  f.driver->flush(f.fx);
  f.fx.clear();
  f.driver->settle(verdicts, f.fx);
  BOOST_TEST(!f.fx.flush);
}
