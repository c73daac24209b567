#define BOOST_TEST_MODULE due_window
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/recurrence.hpp"
#include "storage/due_window.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "storage/write_batch.hpp"
#include "test_support.hpp"

using dally::core::task_id;
using dally::storage::due_key;
using dally::storage::due_window;
using dally::storage::due_window_options;
using dally::storage::rocks_task_store;
using dally::storage::store_options;
using dally::storage::task_record;
using dally::storage::task_state;
using dally::storage::write_batch;

using dally::storage::test::temp_dir;

namespace {

constexpr int64_t t0_ms = 1'700'000'000'000;
constexpr int64_t window_ms = 60'000;

/// A real store plus the model of what it holds (id -> record), so tests
/// can build replace/erase batches and know what must fire when.
struct fixture {
  temp_dir dir;
  std::unique_ptr<rocks_task_store> store;
  std::unique_ptr<due_window> window;
  std::map<task_id, task_record> live;

  fixture() { open(); }

  void open() {
    store_options opts;
    opts.path = (dir.path() / "shard").string();
    opts.durability = dally::storage::durability::none;
    auto res = rocks_task_store::open(opts);
    if (!res)
      BOOST_FAIL("open failed: " << res.err());
    store = std::move(*res);
  }

  /// Drops the window and the store, as a crash or restart would.
  void close() {
    window.reset();
    store.reset();
  }

  due_window& make_window(due_window_options opts) {
    window = std::make_unique<due_window>(*store, opts);
    return *window;
  }

  void commit(const write_batch& batch) {
    auto err = store->commit(batch);
    BOOST_REQUIRE_MESSAGE(!err, "commit failed: " << err);
    if (window)
      window->on_write(batch);
  }

  task_record make_pending(task_id id, int64_t due_ms) {
    task_record rec;
    rec.task.id = id;
    rec.task.topic = "jobs";
    rec.task.due_ms = due_ms;
    rec.task.recurrence = *dally::core::recurrence::at(due_ms);
    return rec;
  }

  task_id schedule(int64_t due_ms) {
    auto rec = make_pending(store->allocate_id(), due_ms);
    write_batch batch;
    batch.put(rec);
    commit(batch);
    live.emplace(rec.task.id, rec);
    return rec.task.id;
  }

  /// Schedules many tasks in batches of 1000, without touching the window.
  std::vector<task_id> schedule_many(const std::vector<int64_t>& dues_ms) {
    std::vector<task_id> ids;
    write_batch batch;
    auto flush = [&] {
      auto err = store->commit(batch);
      BOOST_REQUIRE_MESSAGE(!err, "commit failed: " << err);
      batch.clear();
    };
    for (auto due_ms : dues_ms) {
      auto rec = make_pending(store->allocate_id(), due_ms);
      ids.push_back(rec.task.id);
      live.emplace(rec.task.id, rec);
      batch.put(std::move(rec));
      if (batch.size() == 1000)
        flush();
    }
    if (!batch.empty())
      flush();
    return ids;
  }

  void replace(task_id id, task_record after) {
    auto& before = live.at(id);
    write_batch batch;
    batch.replace(before, after);
    commit(batch);
    before = std::move(after);
  }

  void reschedule(task_id id, int64_t due_ms) {
    auto after = make_pending(id, due_ms);
    replace(id, after);
  }

  /// Marks a task delivered: in flight until `lease_deadline_ms`.
  void deliver(task_id id, int64_t lease_deadline_ms) {
    auto after = live.at(id);
    after.state = task_state::in_flight;
    after.lease_deadline_ms = lease_deadline_ms;
    after.task.attempt += 1;
    replace(id, after);
  }

  void erase(task_id id) {
    write_batch batch;
    batch.erase(live.at(id));
    commit(batch);
    live.erase(id);
  }

  std::vector<due_key> pop(int64_t now_ms,
                           size_t limit = std::numeric_limits<size_t>::max()) {
    std::vector<due_key> out;
    window->pop_due(now_ms, limit, out);
    return out;
  }

  /// Refills and pops until nothing more is due at `now_ms`.
  std::vector<due_key> drain(int64_t now_ms, size_t limit_per_pop = 64) {
    std::vector<due_key> out;
    for (int i = 0; i < 1'000'000; ++i) {
      auto err = window->refill(now_ms);
      BOOST_REQUIRE_MESSAGE(!err, "refill failed: " << err);
      BOOST_REQUIRE_LE(window->size(), window->options().max_in_memory);
      if (window->pop_due(now_ms, limit_per_pop, out) == 0 &&
          window->next_wakeup_ms() > now_ms)
        return out;
    }
    BOOST_FAIL("drain does not terminate");
    return out;
  }

  /// Whether the store's due index holds `key`.
  bool on_disk(due_key key) {
    auto after = due_key{key.index_ms - 1, std::numeric_limits<task_id>::max()};
    auto res = store->scan_due(after, key.index_ms + 1, 1'000);
    BOOST_REQUIRE(res.has_value());
    return std::find(res->begin(), res->end(), key) != res->end();
  }
};

due_window_options small_window() {
  due_window_options opts;
  opts.window_ms = window_ms;
  opts.slice_size = 16;
  opts.max_in_memory = 100'000;
  return opts;
}

std::vector<task_id> ids_of(const std::vector<due_key>& keys) {
  std::vector<task_id> ids;
  for (const auto& key : keys)
    ids.push_back(key.id);
  return ids;
}

} // namespace

BOOST_AUTO_TEST_SUITE(window_bounds)

BOOST_FIXTURE_TEST_CASE(tasks_beyond_the_window_wait_on_disk, fixture) {
  auto soon = schedule(t0_ms + 10'000);
  auto late = schedule(t0_ms + window_ms + 10'000);
  auto far = schedule(t0_ms + 100 * window_ms);
  auto& w = make_window(small_window());
  BOOST_REQUIRE(!w.refill(t0_ms));
  BOOST_CHECK(w.contains(soon));
  BOOST_CHECK(!w.contains(late));
  BOOST_CHECK(!w.contains(far));
  BOOST_CHECK_EQUAL(w.size(), 1u);
  BOOST_CHECK((w.cursor() < due_key{t0_ms + window_ms, 0}));
  BOOST_CHECK_GT(w.memory_bytes(), 0u);
  // The wake-up comes at the first due time; the refill is due when half the
  // window has passed.
  BOOST_CHECK_EQUAL(w.next_wakeup_ms(), t0_ms + 10'000);
  BOOST_CHECK_EQUAL(w.refill_at_ms(), t0_ms + window_ms / 2);
  // Before the refill time a refill loads nothing.
  BOOST_REQUIRE(!w.refill(t0_ms + window_ms / 2 - 1));
  BOOST_CHECK(!w.contains(late));
  BOOST_CHECK(ids_of(pop(t0_ms + 9'999)).empty());
  BOOST_CHECK(ids_of(pop(t0_ms + 10'000)) == std::vector<task_id>{soon});
  // Half a window later the late task is loaded ahead of time.
  BOOST_REQUIRE(!w.refill(t0_ms + window_ms / 2));
  BOOST_CHECK(w.contains(late));
  BOOST_CHECK(!w.contains(far));
  BOOST_CHECK(ids_of(drain(t0_ms + window_ms + 9'999)).empty());
  BOOST_CHECK(ids_of(drain(t0_ms + window_ms + 10'000)) ==
              std::vector<task_id>{late});
  BOOST_CHECK(ids_of(drain(t0_ms + 100 * window_ms)) ==
              std::vector<task_id>{far});
  BOOST_CHECK(w.empty());
}

BOOST_FIXTURE_TEST_CASE(new_tasks_go_to_the_heap_or_to_disk_only, fixture) {
  auto& w = make_window(small_window());
  BOOST_REQUIRE(!w.refill(t0_ms));
  auto inside = schedule(t0_ms + window_ms / 2);
  auto edge = schedule(t0_ms + window_ms - 1);
  auto beyond = schedule(t0_ms + window_ms);
  auto overdue = schedule(t0_ms - 5'000);
  BOOST_CHECK(w.contains(inside));
  BOOST_CHECK(w.contains(edge));
  BOOST_CHECK(w.contains(overdue));
  BOOST_CHECK(!w.contains(beyond));
  BOOST_CHECK(on_disk({t0_ms + window_ms, beyond}));
  BOOST_CHECK_EQUAL(w.next_wakeup_ms(), t0_ms - 5'000);
  BOOST_CHECK(ids_of(drain(t0_ms)) == std::vector<task_id>{overdue});
  BOOST_CHECK(ids_of(drain(t0_ms + window_ms - 1)) ==
              (std::vector<task_id>{inside, edge}));
  BOOST_CHECK(ids_of(drain(t0_ms + window_ms)) == std::vector<task_id>{beyond});
}

BOOST_FIXTURE_TEST_CASE(revoke_and_reschedule_across_the_cursor, fixture) {
  auto& w = make_window(small_window());
  BOOST_REQUIRE(!w.refill(t0_ms));
  auto out_going = schedule(t0_ms + 1'000);
  auto in_coming = schedule(t0_ms + 10 * window_ms);
  auto revoked_mem = schedule(t0_ms + 2'000);
  auto revoked_disk = schedule(t0_ms + 20 * window_ms);
  auto moved_within = schedule(t0_ms + 3'000);
  BOOST_REQUIRE(w.contains(out_going) && w.contains(revoked_mem));
  BOOST_REQUIRE(!w.contains(in_coming) && !w.contains(revoked_disk));

  // Out of the window: leaves the heap, stays on disk.
  reschedule(out_going, t0_ms + 5 * window_ms);
  BOOST_CHECK(!w.contains(out_going));
  BOOST_CHECK(on_disk({t0_ms + 5 * window_ms, out_going}));
  // Into the window: joins the heap at its new time.
  reschedule(in_coming, t0_ms + 4'000);
  BOOST_CHECK(w.contains(in_coming));
  // Within the window: moves in the heap.
  reschedule(moved_within, t0_ms + 500);
  erase(revoked_mem);
  erase(revoked_disk);
  BOOST_CHECK(!w.contains(revoked_mem));
  BOOST_CHECK_EQUAL(w.size(), 2u);

  BOOST_CHECK(ids_of(drain(t0_ms + window_ms)) ==
              (std::vector<task_id>{moved_within, in_coming}));
  BOOST_CHECK(ids_of(drain(t0_ms + 5 * window_ms - 1)).empty());
  BOOST_CHECK(ids_of(drain(t0_ms + 5 * window_ms)) ==
              std::vector<task_id>{out_going});
  // The revoked far task never comes back.
  BOOST_CHECK(ids_of(drain(t0_ms + 100 * window_ms)).empty());
}

BOOST_FIXTURE_TEST_CASE(in_flight_tasks_leave_the_heap_until_a_reload,
                        fixture) {
  // The shard tracks leases itself: a delivered task's index entry stays at
  // its index time in the store, out of the heap, and comes back only when
  // a new window (a restart) loads the index again, or when it is pending
  // again.
  auto& w = make_window(small_window());
  auto acked = schedule(t0_ms);
  auto retried = schedule(t0_ms + 1);
  auto held = schedule(t0_ms + 2);
  BOOST_REQUIRE(ids_of(drain(t0_ms + 2)) ==
                (std::vector<task_id>{acked, retried, held}));
  deliver(acked, t0_ms + 30'000);
  deliver(retried, t0_ms + 30'000);
  deliver(held, t0_ms + 3 * window_ms);
  BOOST_CHECK(w.empty());
  BOOST_CHECK(ids_of(drain(t0_ms + 10 * window_ms)).empty());
  erase(acked);
  auto again = live.at(retried);
  again.state = task_state::pending;
  again.lease_deadline_ms = 0;
  again.retry_at_ms = t0_ms + 50'000;
  replace(retried, again);
  BOOST_CHECK(w.contains(retried));
  BOOST_CHECK(ids_of(drain(t0_ms + 49'999)).empty());
  BOOST_CHECK(ids_of(drain(t0_ms + 50'000)) == std::vector<task_id>{retried});
  // A restart finds the task still in flight at its due time.
  close();
  open();
  make_window(small_window());
  auto after = drain(t0_ms + 50'000);
  BOOST_REQUIRE_EQUAL(after.size(), 2u);
  BOOST_CHECK((after[0] == due_key{t0_ms + 2, held}));
  BOOST_CHECK((after[1] == due_key{t0_ms + 50'000, retried}));
}

BOOST_FIXTURE_TEST_CASE(popped_entries_can_be_handed_back, fixture) {
  auto& w = make_window(small_window());
  auto id = schedule(t0_ms);
  auto popped = drain(t0_ms);
  BOOST_REQUIRE_EQUAL(popped.size(), 1u);
  BOOST_CHECK(!w.contains(id));
  w.on_put(popped.front());
  BOOST_CHECK(ids_of(drain(t0_ms)) == std::vector<task_id>{id});
}

BOOST_FIXTURE_TEST_CASE(burial_and_revival_follow_the_window, fixture) {
  auto& w = make_window(small_window());
  BOOST_REQUIRE(!w.refill(t0_ms));
  auto id = schedule(t0_ms + 1'000);
  BOOST_REQUIRE(w.contains(id));
  write_batch bury;
  bury.bury(live.at(id), t0_ms, "attempts used up");
  commit(bury);
  BOOST_CHECK(!w.contains(id));
  auto revived = make_pending(id, t0_ms + 2'000);
  write_batch revive;
  revive.revive(id, revived);
  commit(revive);
  live[id] = revived;
  BOOST_CHECK(w.contains(id));
  BOOST_CHECK(ids_of(drain(t0_ms + 2'000)) == std::vector<task_id>{id});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(backlog)

BOOST_FIXTURE_TEST_CASE(max_in_memory_bounds_a_large_overdue_backlog, fixture) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> past(t0_ms - 86'400'000, t0_ms);
  std::vector<int64_t> dues;
  for (int i = 0; i < 20'000; ++i)
    dues.push_back(past(rng));
  schedule_many(dues);
  auto opts = small_window();
  opts.slice_size = 64;
  opts.max_in_memory = 500;
  auto& w = make_window(opts);
  BOOST_REQUIRE(!w.refill(t0_ms));
  BOOST_CHECK_EQUAL(w.size(), 500u);
  BOOST_CHECK_EQUAL(w.refill_at_ms(), std::numeric_limits<int64_t>::max());
  // New work scheduled during the backlog lands after the cursor: disk only,
  // and it fires after the overdue work, in due order.
  auto fresh = schedule(t0_ms);
  BOOST_CHECK(!w.contains(fresh));
  BOOST_CHECK_EQUAL(w.size(), 500u);

  auto popped = drain(t0_ms, 37);
  BOOST_REQUIRE_EQUAL(popped.size(), dues.size() + 1);
  BOOST_CHECK(std::is_sorted(popped.begin(), popped.end()));
  BOOST_CHECK(std::adjacent_find(popped.begin(), popped.end()) == popped.end());
  BOOST_CHECK_EQUAL(popped.back().id, fresh);
  for (const auto& key : popped)
    BOOST_REQUIRE_EQUAL(key.index_ms, live.at(key.id).index_ms());
  w.shrink_to_fit();
  BOOST_CHECK(w.empty());
}

BOOST_FIXTURE_TEST_CASE(max_slices_bounds_one_refill_call, fixture) {
  std::vector<int64_t> dues(1'000, t0_ms - 1);
  schedule_many(dues);
  auto opts = small_window();
  opts.slice_size = 100;
  auto& w = make_window(opts);
  BOOST_REQUIRE(!w.refill(t0_ms, 3));
  BOOST_CHECK_EQUAL(w.size(), 300u);
  // The rest is not loaded yet, so the shard is asked to come back at once.
  BOOST_CHECK_LE(w.next_wakeup_ms(), t0_ms);
  BOOST_REQUIRE(!w.refill(t0_ms));
  BOOST_CHECK_EQUAL(w.size(), 1'000u);
  BOOST_CHECK_GT(w.refill_at_ms(), t0_ms);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(recovery)

BOOST_FIXTURE_TEST_CASE(reopen_rebuilds_the_window_overdue_first, fixture) {
  // Before the restart: tasks overdue, soon, far, in flight (lease short
  // and long), rescheduled and revoked, with the window running.
  auto& w = make_window(small_window());
  BOOST_REQUIRE(!w.refill(t0_ms));
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> spread(-2 * window_ms, 50 * window_ms);
  std::vector<task_id> ids;
  for (int i = 0; i < 600; ++i)
    ids.push_back(schedule(t0_ms + spread(rng)));
  auto delivered = drain(t0_ms);
  BOOST_REQUIRE(!delivered.empty());
  for (size_t i = 0; i < delivered.size(); ++i)
    deliver(delivered[i].id, t0_ms + (i % 2 == 0 ? 20'000 : 12 * window_ms));
  for (size_t i = 0; i < ids.size(); i += 7)
    if (live.contains(ids[i]))
      erase(ids[i]);
  for (size_t i = 3; i < ids.size(); i += 11)
    if (live.contains(ids[i]))
      reschedule(ids[i], t0_ms + spread(rng));
  auto max_id = ids.back();

  close();
  open();
  // Downtime: the restart happens 10 windows later.
  auto now_ms = t0_ms + 10 * window_ms;
  auto opts = small_window();
  opts.max_in_memory = 100;
  make_window(opts);
  std::set<task_id> fired;
  due_key last{std::numeric_limits<int64_t>::min(), 0};
  for (int step = 0; step < 100'000 && fired.size() < live.size(); ++step) {
    for (const auto& key : drain(now_ms, 50)) {
      BOOST_REQUIRE_MESSAGE(fired.insert(key.id).second,
                            "fired twice: " << key.id);
      const auto& rec = live.at(key.id);
      BOOST_REQUIRE_EQUAL(key.index_ms, rec.index_ms());
      BOOST_REQUIRE_LE(key.index_ms, now_ms);
      BOOST_REQUIRE(last < key);
      last = key;
    }
    // Nothing due is left behind, in memory or on disk.
    for (const auto& [id, rec] : live)
      if (!fired.contains(id))
        BOOST_REQUIRE_GT(rec.index_ms(), now_ms);
    now_ms = std::max(now_ms + 1, window->next_wakeup_ms());
  }
  BOOST_CHECK_EQUAL(fired.size(), live.size());
  auto fresh = store->allocate_id();
  BOOST_CHECK_GT(fresh, max_id);
  BOOST_CHECK(!live.contains(fresh));
}

BOOST_FIXTURE_TEST_CASE(randomized_against_a_model_with_restarts, fixture) {
  // A shard's life: schedule, revoke, reschedule, deliver, ack, time passing
  // and restarts, with a small heap; after every step exactly the tasks due
  // by now have fired, each once per due time.
  std::mt19937_64 rng(2024);
  auto opts = small_window();
  opts.max_in_memory = 40;
  opts.slice_size = 8;
  make_window(opts);
  auto now_ms = t0_ms;
  std::map<task_id, int64_t> pending_fire; // id -> index_ms not fired yet
  std::set<task_id> in_flight;
  auto pick = [&]() -> std::optional<task_id> {
    if (live.empty())
      return std::nullopt;
    auto it = live.begin();
    std::advance(it, static_cast<long>(rng() % live.size()));
    return it->first;
  };
  auto rand_time = [&] {
    std::uniform_int_distribution<int64_t> d(-window_ms, 4 * window_ms);
    return now_ms + d(rng);
  };
  for (int step = 0; step < 1'500; ++step) {
    switch (rng() % 8) {
      case 0:
      case 1: {
        auto id = schedule(rand_time());
        pending_fire[id] = live.at(id).index_ms();
        break;
      }
      case 2:
        if (auto id = pick()) {
          erase(*id);
          pending_fire.erase(*id);
          in_flight.erase(*id);
        }
        break;
      case 3:
        if (auto id = pick()) {
          reschedule(*id, rand_time());
          pending_fire[*id] = live.at(*id).index_ms();
          in_flight.erase(*id);
        }
        break;
      case 4:
        if (step % 50 == 0) {
          close();
          open();
          make_window(opts);
          for (auto id : in_flight)
            pending_fire[id] = live.at(id).index_ms();
          in_flight.clear();
        }
        break;
      default:
        now_ms += static_cast<int64_t>(rng() % (window_ms / 3));
        break;
    }
    for (const auto& key : drain(now_ms, 16)) {
      auto it = pending_fire.find(key.id);
      BOOST_REQUIRE_MESSAGE(it != pending_fire.end(),
                            "fired unexpectedly: " << key.id);
      BOOST_REQUIRE_EQUAL(it->second, key.index_ms);
      BOOST_REQUIRE_LE(key.index_ms, now_ms);
      pending_fire.erase(it);
      // Half the deliveries are acked at once, the rest stay in flight:
      // out of the heap until a restart loads them again.
      if (rng() % 2 == 0) {
        erase(key.id);
      } else {
        deliver(key.id, now_ms + 1 + static_cast<int64_t>(rng() % 100'000));
        in_flight.insert(key.id);
      }
    }
    for (const auto& [id, index_ms] : pending_fire)
      BOOST_REQUIRE_GT(index_ms, now_ms);
  }
}

BOOST_AUTO_TEST_SUITE_END()
