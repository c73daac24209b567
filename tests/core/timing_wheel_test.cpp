#define BOOST_TEST_MODULE timing_wheel
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/timing_wheel.hpp"

using dally::core::task_id;
using dally::core::timer_entry;
using dally::core::timing_wheel;
using dally::core::timing_wheel_options;

namespace {

constexpr int64_t max_ms = std::numeric_limits<int64_t>::max();
constexpr int64_t min_ms = std::numeric_limits<int64_t>::min();
constexpr size_t no_limit = std::numeric_limits<size_t>::max();

using wide = __int128;

/// The obviously correct model, in 128-bit milliseconds so it shares no
/// tick arithmetic with the wheel: entries keyed by (fire time, sequence),
/// where the fire time is the due time rounded up to the tick, but never
/// before the model's current time.
class reference_model {
public:
  explicit reference_model(timing_wheel_options opts)
    : tick_ms_(opts.tick_ms), now_ms_(floor_to_tick(opts.start_ms)) {}

  bool insert(task_id id, int64_t due_ms) {
    if (keys_.count(id) != 0)
      return false;
    key k{std::max(ceil_to_tick(due_ms), now_ms_), seq_++};
    keys_.emplace(id, k);
    order_.emplace(k, timer_entry{id, due_ms});
    return true;
  }

  bool erase(task_id id) {
    auto i = keys_.find(id);
    if (i == keys_.end())
      return false;
    order_.erase(i->second);
    keys_.erase(i);
    return true;
  }

  bool update(task_id id, int64_t due_ms) {
    if (!erase(id))
      return false;
    return insert(id, due_ms);
  }

  std::optional<int64_t> due_of(task_id id) const {
    auto i = keys_.find(id);
    if (i == keys_.end())
      return std::nullopt;
    return order_.at(i->second).due_ms;
  }

  /// The exact earliest fire time, saturated at INT64_MAX.
  std::optional<int64_t> next_fire() const {
    if (order_.empty())
      return std::nullopt;
    return static_cast<int64_t>(
      std::min<wide>(order_.begin()->first.first, max_ms));
  }

  /// Pops what fires by `now_ms`; time moves to `now_ms`, or to the first
  /// entry `limit` left behind, and never back.
  std::vector<timer_entry> pop_due(int64_t now_ms, size_t limit) {
    std::vector<timer_entry> out;
    while (out.size() < limit && !order_.empty() &&
           order_.begin()->first.first <= now_ms) {
      auto i = order_.begin();
      out.push_back(i->second);
      keys_.erase(i->second.id);
      order_.erase(i);
    }
    wide next = order_.empty() ? floor_to_tick(now_ms)
                               : std::min(floor_to_tick(now_ms),
                                          order_.begin()->first.first);
    now_ms_ = std::max(now_ms_, next);
    return out;
  }

  /// Whether some entry's rounded-up due time is at most `now_ms`.
  bool has_rounded_due(int64_t now_ms) const {
    for (const auto& [k, e] : order_)
      if (ceil_to_tick(e.due_ms) <= now_ms)
        return true;
    return false;
  }

  size_t size() const { return keys_.size(); }

  /// Any live id, chosen by `rng`.
  task_id pick(std::mt19937_64& rng) const {
    auto i = order_.begin();
    std::advance(i, static_cast<long>(rng() % order_.size()));
    return i->second.id;
  }

private:
  using key = std::pair<wide, uint64_t>;

  wide floor_to_tick(int64_t ms) const {
    wide q = ms / tick_ms_;
    if (ms % tick_ms_ < 0)
      --q;
    return q * tick_ms_;
  }

  wide ceil_to_tick(int64_t ms) const {
    wide down = floor_to_tick(ms);
    return down == ms ? down : down + tick_ms_;
  }

  int64_t tick_ms_;
  wide now_ms_;
  uint64_t seq_ = 0;
  std::map<key, timer_entry> order_;
  std::unordered_map<task_id, key> keys_;
};

uint64_t below(std::mt19937_64& rng, uint64_t n) {
  return n == 0 ? 0 : rng() % n;
}

/// `tick * wheel^levels`, capped so that sums stay far from overflow.
int64_t span_ms(const timing_wheel_options& opts, int levels) {
  int64_t span = opts.tick_ms;
  for (int i = 0; i < levels && span < (int64_t{1} << 40); ++i)
    span *= opts.wheel_size;
  return std::min(span, int64_t{1} << 40);
}

struct run_params {
  timing_wheel_options opts;
  uint64_t seed;
  size_t steps;
  size_t id_space;
  /// Without erase and update, next_due must be exact.
  bool inserts_only = false;
};

/// Runs random operations against both the wheel and the model and compares
/// every answer, every popped sequence and, periodically, the invariants.
void random_run(const run_params& p) {
  BOOST_TEST_CONTEXT("tick " << p.opts.tick_ms << ", wheel "
                             << p.opts.wheel_size << ", seed " << p.seed) {
    std::mt19937_64 rng{p.seed};
    timing_wheel wheel{p.opts};
    reference_model model{p.opts};
    int64_t now = p.opts.start_ms;
    int64_t max_now = now;
    auto rand_due = [&]() -> int64_t {
      auto r = rng() % 100;
      if (r < 30)
        return now + static_cast<int64_t>(below(rng, 3 * span_ms(p.opts, 1)));
      if (r < 50)
        return now + static_cast<int64_t>(below(rng, span_ms(p.opts, 2)));
      if (r < 60)
        return now + static_cast<int64_t>(below(rng, span_ms(p.opts, 4)));
      if (r < 65)
        return now + static_cast<int64_t>(below(rng, uint64_t{1} << 38));
      if (r < 75)
        return now - static_cast<int64_t>(below(rng, 50 * p.opts.tick_ms));
      if (r < 88) // few distinct values: many equal due times
        return now + p.opts.tick_ms * static_cast<int64_t>(below(rng, 4));
      if (r < 92) {
        const int64_t extremes[] = {max_ms, max_ms - 1, min_ms, -1, 0, 1};
        return extremes[below(rng, std::size(extremes))];
      }
      return now + static_cast<int64_t>(below(rng, span_ms(p.opts, 3)));
    };
    auto pick_id = [&]() -> task_id {
      return model.size() > 0 && rng() % 4 != 0 ? model.pick(rng)
                                                : rng() % p.id_space;
    };
    for (size_t step = 0; step < p.steps; ++step) {
      auto op = rng() % 100;
      if (op < 40 || (p.inserts_only && op < 60)) {
        auto id = rng() % p.id_space;
        auto due = rand_due();
        BOOST_REQUIRE_EQUAL(wheel.insert(id, due), model.insert(id, due));
      } else if (op < 50 && !p.inserts_only) {
        auto id = pick_id();
        BOOST_REQUIRE_EQUAL(wheel.erase(id), model.erase(id));
      } else if (op < 60 && !p.inserts_only) {
        auto id = pick_id();
        auto due = rand_due();
        BOOST_REQUIRE_EQUAL(wheel.update(id, due), model.update(id, due));
      } else if (op < 68) {
        auto id = pick_id();
        BOOST_REQUIRE(wheel.due_of(id) == model.due_of(id));
        BOOST_REQUIRE_EQUAL(wheel.contains(id), model.due_of(id).has_value());
      } else {
        auto r = rng() % 100;
        if (r < 55)
          now += static_cast<int64_t>(below(rng, 2 * p.opts.tick_ms));
        else if (r < 80)
          now += static_cast<int64_t>(below(rng, 4 * span_ms(p.opts, 1)));
        else if (r < 93)
          now += static_cast<int64_t>(below(rng, span_ms(p.opts, 3)));
        else if (r < 97)
          now += static_cast<int64_t>(below(rng, uint64_t{1} << 36));
        else
          now -= static_cast<int64_t>(below(rng, 3 * p.opts.tick_ms));
        auto limit = rng() % 2 == 0 ? no_limit : below(rng, 6);
        std::vector<timer_entry> got{timer_entry{~task_id{0}, 0}};
        auto n = wheel.pop_due(now, limit, got);
        auto want = model.pop_due(now, limit);
        BOOST_REQUIRE_EQUAL(n, want.size());
        BOOST_REQUIRE(got.front() == (timer_entry{~task_id{0}, 0}));
        got.erase(got.begin());
        BOOST_REQUIRE(got == want);
        for (const auto& e : got)
          BOOST_REQUIRE_LE(e.due_ms, now);
        // With a non-decreasing clock and no limit, nothing whose rounded
        // due time has passed stays behind.
        if (now >= max_now && limit == no_limit && rng() % 8 == 0)
          BOOST_REQUIRE(!model.has_rounded_due(now));
        max_now = std::max(max_now, now);
      }
      BOOST_REQUIRE_EQUAL(wheel.size(), model.size());
      auto next = wheel.next_due();
      auto want_next = model.next_fire();
      BOOST_REQUIRE_EQUAL(next.has_value(), want_next.has_value());
      if (next) {
        BOOST_REQUIRE_LE(*next, *want_next);
        if (p.inserts_only)
          BOOST_REQUIRE_EQUAL(*next, *want_next);
      }
      if (step % 1000 == 0)
        BOOST_REQUIRE(wheel.check_invariants());
    }
    BOOST_REQUIRE(wheel.check_invariants());
    auto got = wheel.pop_due(max_ms, no_limit);
    auto want = model.pop_due(max_ms, no_limit);
    BOOST_REQUIRE(got == want);
    BOOST_REQUIRE_EQUAL(wheel.size(), model.size());
    BOOST_REQUIRE(wheel.check_invariants());
  }
}

std::vector<task_id> ids_of(const std::vector<timer_entry>& xs) {
  std::vector<task_id> out;
  for (const auto& x : xs)
    out.push_back(x.id);
  return out;
}

int64_t round_up(int64_t due_ms, int64_t tick_ms) {
  return (due_ms + tick_ms - 1) / tick_ms * tick_ms;
}

} // namespace

BOOST_AUTO_TEST_SUITE(edges)

BOOST_AUTO_TEST_CASE(invalid_options_throw) {
  using opts = timing_wheel_options;
  BOOST_CHECK_THROW(timing_wheel{opts{.tick_ms = 0}}, std::invalid_argument);
  BOOST_CHECK_THROW(timing_wheel{opts{.tick_ms = -5}}, std::invalid_argument);
  BOOST_CHECK_THROW(timing_wheel{opts{.wheel_size = 0}}, std::invalid_argument);
  BOOST_CHECK_THROW(timing_wheel{opts{.wheel_size = 1}}, std::invalid_argument);
  BOOST_CHECK_THROW(
    timing_wheel{opts{.wheel_size = timing_wheel::max_wheel_size + 1}},
    std::invalid_argument);
  BOOST_CHECK_THROW(timing_wheel{opts{.start_ms = -1}}, std::invalid_argument);
  BOOST_CHECK_NO_THROW((timing_wheel{opts{.tick_ms = 1, .wheel_size = 2}}));
  BOOST_CHECK_NO_THROW((timing_wheel{
    opts{.tick_ms = max_ms, .wheel_size = timing_wheel::max_wheel_size}}));
}

BOOST_AUTO_TEST_CASE(empty_wheel) {
  timing_wheel wheel;
  BOOST_CHECK(wheel.empty());
  BOOST_CHECK_EQUAL(wheel.memory_bytes(), 0u);
  BOOST_CHECK(!wheel.next_due());
  BOOST_CHECK(wheel.pop_due(1000, 10).empty());
  BOOST_CHECK(!wheel.erase(1));
  BOOST_CHECK(!wheel.update(1, 5));
  BOOST_CHECK(!wheel.contains(1));
  BOOST_CHECK(!wheel.due_of(1));
  BOOST_CHECK(!wheel.next_due());
  BOOST_CHECK(wheel.check_invariants());
}

BOOST_AUTO_TEST_CASE(one_entry) {
  timing_wheel wheel;
  BOOST_CHECK(wheel.insert(7, 100));
  BOOST_CHECK(!wheel.insert(7, 50));
  BOOST_CHECK_EQUAL(*wheel.due_of(7), 100);
  BOOST_CHECK_EQUAL(*wheel.next_due(), 100);
  BOOST_CHECK(wheel.pop_due(50, 10).empty());
  BOOST_CHECK(wheel.update(7, 70));
  BOOST_CHECK_EQUAL(*wheel.next_due(), 70);
  BOOST_CHECK(wheel.pop_due(69, 10).empty());
  // Time is now 69: an update into the past is due at once.
  BOOST_CHECK(wheel.update(7, 40));
  BOOST_CHECK_EQUAL(*wheel.next_due(), 69);
  auto got = wheel.pop_due(69, 10);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_CHECK(got[0] == (timer_entry{7, 40}));
  BOOST_CHECK(wheel.empty());
  BOOST_CHECK(!wheel.next_due());
  BOOST_CHECK(wheel.insert(7, 1000));
  BOOST_CHECK(wheel.erase(7));
  BOOST_CHECK(!wheel.erase(7));
  BOOST_CHECK(wheel.empty());
  BOOST_CHECK(!wheel.next_due());
  BOOST_CHECK(wheel.pop_due(max_ms, no_limit).empty());
  BOOST_CHECK(wheel.check_invariants());
}

BOOST_AUTO_TEST_CASE(two_entries) {
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 8}};
  BOOST_CHECK(wheel.insert(1, 30));
  BOOST_CHECK(wheel.insert(2, 20));
  BOOST_CHECK_EQUAL(*wheel.next_due(), 20);
  BOOST_CHECK(wheel.erase(2)); // the entry due next
  BOOST_CHECK_EQUAL(*wheel.next_due(), 30);
  BOOST_CHECK(wheel.insert(2, 10));
  BOOST_CHECK(wheel.update(2, 50)); // the entry due next moves behind
  BOOST_CHECK_EQUAL(*wheel.next_due(), 30);
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK(ids_of(wheel.pop_due(100, 10)) == (std::vector<task_id>{1, 2}));
  BOOST_CHECK(wheel.empty());
}

BOOST_AUTO_TEST_CASE(deep_overflow_entry) {
  // With 8 buckets a tick, 10^9 ms sits on level 9 of the wheel.
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 8}};
  const int64_t deep = 1'000'000'000;
  BOOST_CHECK(wheel.insert(1, deep));
  BOOST_CHECK(wheel.insert(2, deep + 1));
  BOOST_CHECK(wheel.insert(3, 5));
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK(wheel.erase(1));
  BOOST_CHECK(wheel.check_invariants());
  // The bucket's lower bound may lag behind the erase, never run ahead.
  BOOST_CHECK_LE(*wheel.next_due(), 5);
  BOOST_CHECK(ids_of(wheel.pop_due(5, 10)) == (std::vector<task_id>{3}));
  auto next = wheel.next_due();
  BOOST_REQUIRE(next);
  BOOST_CHECK_LE(*next, deep + 1);
  BOOST_CHECK(wheel.update(2, 7)); // from deep down to level 0
  BOOST_CHECK_EQUAL(*wheel.next_due(), 7);
  BOOST_CHECK(wheel.update(2, deep)); // and back up
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK(wheel.pop_due(deep - 1, 10).empty());
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK_EQUAL(*wheel.next_due(), deep); // cascaded: exact again
  BOOST_CHECK(ids_of(wheel.pop_due(deep, 10)) == (std::vector<task_id>{2}));
  BOOST_CHECK(wheel.empty());
  BOOST_CHECK(wheel.check_invariants());
}

BOOST_AUTO_TEST_CASE(next_due_is_a_lower_bound_that_converges) {
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 8}};
  // Both in the same level-2 bucket [64, 128).
  BOOST_CHECK(wheel.insert(1, 100));
  BOOST_CHECK(wheel.insert(2, 120));
  BOOST_CHECK_EQUAL(*wheel.next_due(), 100);
  BOOST_CHECK(wheel.erase(1));
  auto next = *wheel.next_due();
  BOOST_CHECK_LE(next, 120);
  // Waking up at each reported time reaches the entry within a few rounds.
  int rounds = 0;
  std::vector<timer_entry> got;
  while (got.empty() && rounds < 10) {
    next = *wheel.next_due();
    got = wheel.pop_due(next, 10);
    ++rounds;
  }
  BOOST_CHECK(ids_of(got) == (std::vector<task_id>{2}));
  BOOST_CHECK_EQUAL(next, 120);
  BOOST_CHECK_LE(rounds, 3);
}

BOOST_AUTO_TEST_CASE(equal_due_times_keep_insertion_order) {
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 4}};
  // Ids 0..9 go in while the due time is still in an overflow wheel, ids
  // 10..19 after time has moved close, straight into level 0; the cascade
  // must not let the later ones overtake.
  for (task_id id = 0; id < 10; ++id)
    BOOST_CHECK(wheel.insert(id, 1000));
  BOOST_CHECK(wheel.pop_due(998, no_limit).empty());
  for (task_id id = 10; id < 20; ++id)
    BOOST_CHECK(wheel.insert(id, 1000));
  BOOST_CHECK(wheel.update(3, 1000)); // a fresh insertion: goes last
  BOOST_CHECK(wheel.check_invariants());
  std::vector<task_id> want;
  for (task_id id = 0; id < 20; ++id)
    if (id != 3)
      want.push_back(id);
  want.push_back(3);
  BOOST_CHECK(ids_of(wheel.pop_due(1000, no_limit)) == want);
}

BOOST_AUTO_TEST_CASE(same_tick_different_due_times_in_insertion_order) {
  timing_wheel wheel{{.tick_ms = 10, .wheel_size = 8}};
  BOOST_CHECK(wheel.insert(1, 29));
  BOOST_CHECK(wheel.insert(2, 21));
  BOOST_CHECK(wheel.insert(3, 30));
  BOOST_CHECK(wheel.insert(4, 20));
  BOOST_CHECK(ids_of(wheel.pop_due(30, no_limit)) ==
              (std::vector<task_id>{4, 1, 2, 3}));
}

BOOST_AUTO_TEST_CASE(due_in_the_past_fires_on_next_pop) {
  timing_wheel wheel{{.tick_ms = 10, .wheel_size = 8, .start_ms = 1005}};
  BOOST_CHECK(wheel.insert(1, 1000)); // due exactly at the current tick
  BOOST_CHECK(wheel.insert(2, 3));
  BOOST_CHECK(wheel.insert(3, -50));
  BOOST_CHECK(wheel.insert(4, min_ms));
  BOOST_CHECK_LE(*wheel.next_due(), 1005);
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK(ids_of(wheel.pop_due(1005, no_limit)) ==
              (std::vector<task_id>{1, 2, 3, 4}));
  BOOST_CHECK(wheel.pop_due(5000, no_limit).empty());
  BOOST_CHECK(wheel.insert(5, 10));
  BOOST_CHECK(wheel.insert(6, 4999));
  BOOST_CHECK_EQUAL(*wheel.next_due(), 5000);
  BOOST_CHECK(ids_of(wheel.pop_due(5000, no_limit)) ==
              (std::vector<task_id>{5, 6}));
}

BOOST_AUTO_TEST_CASE(clock_going_back_pops_nothing_early) {
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 8}};
  BOOST_CHECK(wheel.pop_due(500, no_limit).empty());
  BOOST_CHECK(wheel.insert(1, 450)); // overdue: current tick 500
  BOOST_CHECK(wheel.insert(2, 600));
  BOOST_CHECK(wheel.pop_due(480, no_limit).empty());
  BOOST_CHECK(wheel.pop_due(-7, no_limit).empty());
  BOOST_CHECK(ids_of(wheel.pop_due(600, no_limit)) ==
              (std::vector<task_id>{1, 2}));
}

BOOST_AUTO_TEST_CASE(huge_jump_of_now) {
  timing_wheel wheel; // 1 ms tick, 64 buckets
  const int64_t day_ms = 86'400'000;
  std::vector<task_id> want;
  for (task_id id = 0; id < 50; ++id) {
    BOOST_CHECK(wheel.insert(id, static_cast<int64_t>(id) * 7 * day_ms + 3));
    want.push_back(id);
  }
  BOOST_CHECK(wheel.pop_due(2, no_limit).empty());
  BOOST_CHECK_EQUAL(*wheel.next_due(), 3);
  // A year at a 1 ms tick in one call: the wheel jumps from bucket to
  // bucket instead of walking 3 * 10^10 empty ticks.
  auto got = wheel.pop_due(365 * day_ms, no_limit);
  BOOST_CHECK(ids_of(got) == want);
  BOOST_CHECK(wheel.empty());
  BOOST_CHECK(wheel.insert(99, 365 * day_ms + 5));
  BOOST_CHECK_EQUAL(*wheel.next_due(), 365 * day_ms + 5);
  BOOST_CHECK(wheel.pop_due(max_ms - 1, no_limit).size() == 1);
  BOOST_CHECK(wheel.insert(100, 1)); // overdue at the very end of time
  BOOST_CHECK(ids_of(wheel.pop_due(max_ms, 1)) == (std::vector<task_id>{100}));
  BOOST_CHECK(wheel.check_invariants());
}

BOOST_AUTO_TEST_CASE(limit_smaller_than_the_due_batch) {
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 4}};
  for (task_id id = 0; id < 10; ++id)
    BOOST_CHECK(wheel.insert(id, static_cast<int64_t>(id / 3) * 10 + 5));
  BOOST_CHECK(wheel.pop_due(100, 0).empty());
  BOOST_CHECK_EQUAL(wheel.size(), 10u);
  BOOST_CHECK(ids_of(wheel.pop_due(100, 2)) == (std::vector<task_id>{0, 1}));
  BOOST_CHECK(ids_of(wheel.pop_due(100, 3)) == (std::vector<task_id>{2, 3, 4}));
  // Time stopped at the first entry left behind (tick 15), so an overdue
  // insertion lines up behind it and an entry due at 16 does not jump ahead.
  BOOST_CHECK(wheel.insert(20, 0));
  BOOST_CHECK(wheel.insert(21, 16));
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK(ids_of(wheel.pop_due(100, 3)) ==
              (std::vector<task_id>{5, 20, 21}));
  BOOST_CHECK(ids_of(wheel.pop_due(100, no_limit)) ==
              (std::vector<task_id>{6, 7, 8, 9}));
  BOOST_CHECK(wheel.empty());
}

BOOST_AUTO_TEST_CASE(tick_lateness_bound) {
  // Every due time in [0, 200) with a 10 ms tick, popped at every ms: each
  // entry fires exactly at its due time rounded up to the tick, that is 0
  // to 9 ms late and never early.
  for (uint32_t wheel_size : {2u, 8u, 64u}) {
    const int64_t tick_ms = 10;
    timing_wheel wheel{{.tick_ms = tick_ms, .wheel_size = wheel_size}};
    for (int64_t due = 0; due < 200; ++due)
      BOOST_REQUIRE(wheel.insert(static_cast<task_id>(due), due));
    size_t popped = 0;
    for (int64_t now = 0; now < 220; ++now) {
      for (const auto& e : wheel.pop_due(now, no_limit)) {
        BOOST_REQUIRE_EQUAL(now, round_up(e.due_ms, tick_ms));
        BOOST_REQUIRE_GE(now - e.due_ms, 0);
        BOOST_REQUIRE_LT(now - e.due_ms, tick_ms);
        ++popped;
      }
      if (auto next = wheel.next_due())
        BOOST_REQUIRE_GT(*next, now);
    }
    BOOST_CHECK_EQUAL(popped, 200u);
  }
}

BOOST_AUTO_TEST_CASE(extreme_due_times) {
  // INT64_MAX rounds up past INT64_MAX with a 100 ms tick: it can never come
  // due, and next_due saturates.
  timing_wheel coarse{{.tick_ms = 100, .wheel_size = 8}};
  BOOST_CHECK(coarse.insert(1, max_ms));
  BOOST_CHECK(coarse.insert(2, max_ms - max_ms % 100));
  BOOST_CHECK_EQUAL(*coarse.next_due(), max_ms - max_ms % 100);
  BOOST_CHECK(ids_of(coarse.pop_due(max_ms, no_limit)) ==
              (std::vector<task_id>{2}));
  BOOST_CHECK_EQUAL(*coarse.next_due(), max_ms);
  BOOST_CHECK_EQUAL(coarse.size(), 1u);
  BOOST_CHECK(coarse.check_invariants());
  // With a 1 ms tick every due time is reachable.
  timing_wheel fine{{.tick_ms = 1, .wheel_size = 2}};
  BOOST_CHECK(fine.insert(1, max_ms));
  BOOST_CHECK(fine.insert(2, max_ms - 1));
  BOOST_CHECK(fine.insert(3, min_ms));
  BOOST_CHECK(fine.check_invariants());
  BOOST_CHECK(ids_of(fine.pop_due(0, no_limit)) == (std::vector<task_id>{3}));
  BOOST_CHECK_EQUAL(*fine.next_due(), max_ms - 1);
  BOOST_CHECK(ids_of(fine.pop_due(max_ms, no_limit)) ==
              (std::vector<task_id>{2, 1}));
  BOOST_CHECK(fine.check_invariants());
}

BOOST_AUTO_TEST_CASE(clear_reserve_move_and_memory) {
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 16, .start_ms = 100}};
  wheel.reserve(1000);
  auto reserved = wheel.memory_bytes();
  BOOST_CHECK_GT(reserved, 1000u * 24);
  for (task_id id = 0; id < 1000; ++id)
    BOOST_CHECK(wheel.insert(id, 100 + static_cast<int64_t>(id) * 37));
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK_LT(wheel.memory_bytes(), reserved + 4096);
  wheel.clear();
  BOOST_CHECK(wheel.empty());
  BOOST_CHECK(!wheel.contains(5));
  BOOST_CHECK(!wheel.next_due());
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK(wheel.insert(5, 50)); // before start: overdue
  BOOST_CHECK_EQUAL(*wheel.next_due(), 100);
  timing_wheel other{std::move(wheel)};
  BOOST_CHECK_EQUAL(other.size(), 1u);
  BOOST_CHECK(wheel.empty()); // NOLINT: moved-from state is specified
  BOOST_CHECK(wheel.insert(1, 1));
  BOOST_CHECK(wheel.check_invariants());
  wheel = std::move(other);
  BOOST_CHECK_EQUAL(wheel.size(), 1u);
  BOOST_CHECK(ids_of(wheel.pop_due(100, 10)) == (std::vector<task_id>{5}));
  BOOST_CHECK(wheel.check_invariants());
}

BOOST_AUTO_TEST_CASE(churn_reuses_nodes) {
  timing_wheel wheel{{.tick_ms = 1, .wheel_size = 8}};
  for (task_id id = 0; id < 100; ++id)
    BOOST_CHECK(wheel.insert(id, 1000 + static_cast<int64_t>(id)));
  size_t bytes = 0;
  for (int round = 0; round < 50; ++round) {
    for (task_id id = 0; id < 100; ++id)
      BOOST_CHECK(wheel.erase(id));
    for (task_id id = 0; id < 100; ++id)
      BOOST_CHECK(wheel.insert(id, 1000 + round * 10));
    // The index may grow once to absorb its tombstones, then holds still.
    if (round == 5)
      bytes = wheel.memory_bytes();
  }
  BOOST_CHECK(wheel.check_invariants());
  BOOST_CHECK_EQUAL(wheel.memory_bytes(), bytes);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(reference_model_runs)

BOOST_AUTO_TEST_CASE(tick_and_wheel_size_grid) {
  uint64_t seed = 1;
  for (int64_t tick_ms : {1, 7, 100})
    for (uint32_t wheel_size : {2u, 8u, 64u})
      random_run({.opts = {.tick_ms = tick_ms,
                           .wheel_size = wheel_size,
                           .start_ms = static_cast<int64_t>(seed * 1000)},
                  .seed = seed++,
                  .steps = 25'000,
                  .id_space = 2000});
}

BOOST_AUTO_TEST_CASE(wheel_sizes_not_a_power_of_two) {
  uint64_t seed = 100;
  for (uint32_t wheel_size : {3u, 10u, 100u})
    random_run({.opts = {.tick_ms = 7, .wheel_size = wheel_size},
                .seed = seed++,
                .steps = 25'000,
                .id_space = 2000});
}

BOOST_AUTO_TEST_CASE(small_id_space_many_collisions) {
  for (uint64_t seed = 200; seed < 203; ++seed)
    random_run({.opts = {.tick_ms = 1, .wheel_size = 8},
                .seed = seed,
                .steps = 20'000,
                .id_space = 32});
}

BOOST_AUTO_TEST_CASE(next_due_exact_without_erase_or_update) {
  uint64_t seed = 300;
  for (int64_t tick_ms : {1, 7})
    for (uint32_t wheel_size : {2u, 8u, 10u, 64u})
      random_run({.opts = {.tick_ms = tick_ms, .wheel_size = wheel_size},
                  .seed = seed++,
                  .steps = 10'000,
                  .id_space = 5000,
                  .inserts_only = true});
}

BOOST_AUTO_TEST_SUITE_END()
