#define BOOST_TEST_MODULE quad_heap
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/quad_heap.hpp"

using dally::core::quad_heap;
using dally::core::task_id;
using dally::core::timer_entry;

namespace {

/// The obviously correct model: a sorted map keyed by (due, sequence).
class reference_model {
public:
  bool insert(task_id id, int64_t due_ms) {
    if (keys_.count(id) != 0)
      return false;
    key k{due_ms, seq_++};
    keys_.emplace(id, k);
    order_.emplace(k, id);
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

  bool upsert(task_id id, int64_t due_ms) {
    return !update(id, due_ms) && insert(id, due_ms);
  }

  std::optional<int64_t> due_of(task_id id) const {
    auto i = keys_.find(id);
    if (i == keys_.end())
      return std::nullopt;
    return i->second.first;
  }

  std::optional<int64_t> next_due() const {
    if (order_.empty())
      return std::nullopt;
    return order_.begin()->first.first;
  }

  std::vector<timer_entry> pop_due(int64_t now_ms, size_t limit) {
    std::vector<timer_entry> out;
    while (out.size() < limit && !order_.empty() &&
           order_.begin()->first.first <= now_ms) {
      auto i = order_.begin();
      out.push_back(timer_entry{i->second, i->first.first});
      keys_.erase(i->second);
      order_.erase(i);
    }
    return out;
  }

  size_t size() const { return keys_.size(); }

  /// Any live id, chosen by `rng`.
  task_id pick(std::mt19937_64& rng) const {
    auto i = order_.begin();
    std::advance(
      i, static_cast<long>(rng() % std::min<size_t>(order_.size(), 64)));
    return i->second;
  }

private:
  using key = std::pair<int64_t, uint64_t>;
  std::map<key, task_id> order_;
  std::unordered_map<task_id, key> keys_;
  uint64_t seq_ = 0;
};

void drain_and_check_order(quad_heap& heap) {
  auto all = heap.pop_due(std::numeric_limits<int64_t>::max(), heap.size());
  size_t out_of_order = 0;
  for (size_t i = 1; i < all.size(); ++i)
    out_of_order += all[i - 1].due_ms > all[i].due_ms ? 1 : 0;
  BOOST_CHECK_EQUAL(out_of_order, 0u);
  BOOST_CHECK(heap.empty());
}

/// Runs `steps` random operations against both the heap and the model.
void random_run(uint64_t seed, size_t steps, int64_t due_spread,
                size_t id_space) {
  std::mt19937_64 rng{seed};
  quad_heap heap;
  reference_model model;
  int64_t now = 0;
  auto rand_due = [&] {
    return now +
           static_cast<int64_t>(rng() % static_cast<uint64_t>(due_spread));
  };
  for (size_t step = 0; step < steps; ++step) {
    auto op = rng() % 100;
    if (op < 40) {
      auto id = rng() % id_space;
      auto due = rand_due();
      BOOST_REQUIRE_EQUAL(heap.insert(id, due), model.insert(id, due));
    } else if (op < 55) {
      auto id =
        model.size() > 0 && rng() % 4 != 0 ? model.pick(rng) : rng() % id_space;
      BOOST_REQUIRE_EQUAL(heap.erase(id), model.erase(id));
    } else if (op < 70) {
      auto id =
        model.size() > 0 && rng() % 4 != 0 ? model.pick(rng) : rng() % id_space;
      auto due = rand_due();
      if (rng() % 2 == 0)
        BOOST_REQUIRE_EQUAL(heap.update(id, due), model.update(id, due));
      else
        BOOST_REQUIRE_EQUAL(heap.upsert(id, due), model.upsert(id, due));
    } else if (op < 80) {
      auto id = rng() % id_space;
      BOOST_REQUIRE(heap.due_of(id) == model.due_of(id));
      BOOST_REQUIRE_EQUAL(heap.contains(id), model.due_of(id).has_value());
    } else {
      now +=
        static_cast<int64_t>(rng() % static_cast<uint64_t>(due_spread / 4 + 1));
      auto limit = rng() % 3 == 0 ? size_t{1} : rng() % 50;
      auto got = heap.pop_due(now, limit);
      auto want = model.pop_due(now, limit);
      BOOST_REQUIRE(got == want);
    }
    BOOST_REQUIRE_EQUAL(heap.size(), model.size());
    BOOST_REQUIRE(heap.next_due() == model.next_due());
    if (step % 997 == 0)
      BOOST_REQUIRE(heap.check_invariants());
  }
  BOOST_REQUIRE(heap.check_invariants());
  auto got = heap.pop_due(std::numeric_limits<int64_t>::max(), heap.size());
  auto want = model.pop_due(std::numeric_limits<int64_t>::max(), model.size());
  BOOST_REQUIRE(got == want);
}

/// Builds a heap of `n` entries with ids 0..n-1 and due time = 10 * id, so
/// ids 0, 1..4, 5..20 form the first three levels.
quad_heap make_levels(size_t n) {
  quad_heap heap;
  for (size_t i = 0; i < n; ++i)
    BOOST_REQUIRE(heap.insert(i, static_cast<int64_t>(10 * i)));
  return heap;
}

std::vector<task_id> ids_of(const std::vector<timer_entry>& xs) {
  std::vector<task_id> out;
  for (const auto& x : xs)
    out.push_back(x.id);
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(edges)

BOOST_AUTO_TEST_CASE(empty_heap) {
  quad_heap heap;
  BOOST_CHECK(heap.empty());
  BOOST_CHECK(!heap.top());
  BOOST_CHECK(!heap.next_due());
  BOOST_CHECK(heap.pop_due(1000, 10).empty());
  BOOST_CHECK(!heap.erase(1));
  BOOST_CHECK(!heap.update(1, 5));
  BOOST_CHECK(!heap.contains(1));
  BOOST_CHECK(!heap.due_of(1));
  BOOST_CHECK(heap.check_invariants());
  BOOST_CHECK_EQUAL(heap.memory_bytes(), 0u);
}

BOOST_AUTO_TEST_CASE(one_entry) {
  quad_heap heap;
  BOOST_CHECK(heap.insert(7, 100));
  BOOST_CHECK(!heap.insert(7, 50));
  BOOST_CHECK_EQUAL(*heap.due_of(7), 100);
  BOOST_CHECK(heap.pop_due(99, 10).empty());
  BOOST_CHECK(heap.update(7, 40));
  BOOST_CHECK_EQUAL(*heap.next_due(), 40);
  auto got = heap.pop_due(40, 10);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_CHECK_EQUAL(got[0].id, 7u);
  BOOST_CHECK_EQUAL(got[0].due_ms, 40);
  BOOST_CHECK(heap.empty());
  BOOST_CHECK(heap.insert(7, 1));
  BOOST_CHECK(heap.erase(7));
  BOOST_CHECK(!heap.erase(7));
  BOOST_CHECK(heap.empty());
  BOOST_CHECK(heap.check_invariants());
}

BOOST_AUTO_TEST_CASE(two_entries) {
  quad_heap heap;
  BOOST_CHECK(heap.insert(1, 20));
  BOOST_CHECK(heap.insert(2, 10));
  BOOST_CHECK_EQUAL(heap.top()->id, 2u);
  BOOST_CHECK(heap.update(1, 5));
  BOOST_CHECK_EQUAL(heap.top()->id, 1u);
  BOOST_CHECK(heap.erase(1));
  BOOST_CHECK_EQUAL(heap.top()->id, 2u);
  BOOST_CHECK(heap.insert(1, 10));
  // Equal due times: insertion order.
  BOOST_CHECK(ids_of(heap.pop_due(10, 5)) == (std::vector<task_id>{2, 1}));
  BOOST_CHECK(heap.check_invariants());
}

BOOST_AUTO_TEST_CASE(erase_head_last_leaf_and_middle) {
  for (auto victim : {task_id{0}, task_id{30}, task_id{3}, task_id{12}}) {
    auto heap = make_levels(31);
    BOOST_TEST_CONTEXT("victim " << victim) {
      BOOST_CHECK(heap.erase(victim));
      BOOST_CHECK(heap.check_invariants());
      BOOST_CHECK(!heap.contains(victim));
      auto all = heap.pop_due(1000, 100);
      BOOST_REQUIRE_EQUAL(all.size(), 30u);
      task_id expected = 0;
      for (const auto& x : all) {
        if (expected == victim)
          ++expected;
        BOOST_CHECK_EQUAL(x.id, expected++);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(update_head_last_leaf_and_middle) {
  // Move each kind of node both earlier and later and check the full order.
  for (auto victim : {task_id{0}, task_id{30}, task_id{3}, task_id{12}}) {
    for (auto due : {int64_t{-5}, int64_t{155}, int64_t{1000}}) {
      auto heap = make_levels(31);
      BOOST_TEST_CONTEXT("victim " << victim << " due " << due) {
        BOOST_CHECK(heap.update(victim, due));
        BOOST_CHECK(heap.check_invariants());
        BOOST_CHECK_EQUAL(*heap.due_of(victim), due);
        auto all = heap.pop_due(1000, 100);
        BOOST_REQUIRE_EQUAL(all.size(), 31u);
        for (size_t i = 1; i < all.size(); ++i)
          BOOST_CHECK_LE(all[i - 1].due_ms, all[i].due_ms);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(upsert_adds_or_moves) {
  quad_heap heap;
  BOOST_CHECK(heap.upsert(1, 30));
  BOOST_CHECK(heap.upsert(2, 20));
  BOOST_CHECK(!heap.upsert(1, 10));
  BOOST_CHECK_EQUAL(heap.size(), 2u);
  BOOST_CHECK(heap.due_of(1) == 10);
  // A move counts as a fresh insertion among equal due times.
  BOOST_CHECK(!heap.upsert(1, 20));
  BOOST_CHECK(heap.check_invariants());
  BOOST_CHECK(ids_of(heap.pop_due(100, 10)) == (std::vector<task_id>{2, 1}));
}

BOOST_AUTO_TEST_CASE(update_to_equal_due_goes_behind) {
  quad_heap heap;
  heap.insert(1, 10);
  heap.insert(2, 10);
  heap.insert(3, 10);
  // A reschedule counts as a fresh insertion among equal due times.
  heap.update(1, 10);
  BOOST_CHECK(ids_of(heap.pop_due(10, 5)) == (std::vector<task_id>{2, 3, 1}));
}

BOOST_AUTO_TEST_CASE(equal_due_times_pop_in_insertion_order) {
  quad_heap heap;
  std::mt19937_64 rng{11};
  std::vector<task_id> ids;
  for (task_id i = 0; i < 5000; ++i) {
    auto id = rng();
    if (heap.insert(id, 42))
      ids.push_back(id);
  }
  BOOST_CHECK(ids_of(heap.pop_due(42, ids.size())) == ids);
}

BOOST_AUTO_TEST_CASE(pop_due_respects_now_and_limit) {
  auto heap = make_levels(100); // due 0, 10, ..., 990
  auto first = heap.pop_due(95, 3);
  BOOST_CHECK(ids_of(first) == (std::vector<task_id>{0, 1, 2}));
  auto rest = heap.pop_due(95, 100);
  BOOST_CHECK(ids_of(rest) == (std::vector<task_id>{3, 4, 5, 6, 7, 8, 9}));
  BOOST_CHECK(heap.pop_due(95, 100).empty());
  BOOST_CHECK(heap.pop_due(1000, 0).empty());
  BOOST_CHECK_EQUAL(heap.size(), 90u);
  // The appending form adds to what is already in the vector.
  std::vector<timer_entry> out{{999, 1}};
  BOOST_CHECK_EQUAL(heap.pop_due(100, 10, out), 1u);
  BOOST_CHECK_EQUAL(out.size(), 2u);
  BOOST_CHECK_EQUAL(out[1].id, 10u);
}

BOOST_AUTO_TEST_CASE(extreme_due_times) {
  quad_heap heap;
  auto lo = std::numeric_limits<int64_t>::min();
  auto hi = std::numeric_limits<int64_t>::max();
  heap.insert(1, hi);
  heap.insert(2, lo);
  heap.insert(3, 0);
  BOOST_CHECK(ids_of(heap.pop_due(hi, 10)) == (std::vector<task_id>{2, 3, 1}));
}

BOOST_AUTO_TEST_CASE(sequence_wraparound_keeps_order) {
  quad_heap heap;
  heap.insert(1, 10);
  heap.insert(2, 5);
  heap.insert(3, 10);
  BOOST_CHECK_THROW(heap.set_next_sequence_for_testing(1),
                    std::invalid_argument);
  heap.set_next_sequence_for_testing(std::numeric_limits<uint32_t>::max() - 1);
  heap.insert(4, 10); // takes the last sequence number
  heap.insert(5, 10); // renumbers first
  heap.insert(6, 5);
  BOOST_CHECK(heap.check_invariants());
  BOOST_CHECK(ids_of(heap.pop_due(10, 10)) ==
              (std::vector<task_id>{2, 6, 1, 3, 4, 5}));
}

BOOST_AUTO_TEST_CASE(clear_reserve_shrink) {
  quad_heap heap;
  heap.reserve(1000);
  auto reserved = heap.memory_bytes();
  BOOST_CHECK_GE(reserved, 1000u * 20);
  for (task_id i = 0; i < 1000; ++i)
    heap.insert(i, static_cast<int64_t>(i));
  BOOST_CHECK_EQUAL(heap.memory_bytes(), reserved);
  for (task_id i = 0; i < 990; ++i)
    heap.erase(i);
  heap.shrink_to_fit();
  BOOST_CHECK_LT(heap.memory_bytes(), reserved / 10);
  BOOST_CHECK(heap.check_invariants());
  BOOST_CHECK(ids_of(heap.pop_due(995, 10)) ==
              (std::vector<task_id>{990, 991, 992, 993, 994, 995}));
  heap.clear();
  BOOST_CHECK(heap.empty());
  BOOST_CHECK(!heap.contains(999));
  BOOST_CHECK(heap.insert(999, 1));
  BOOST_CHECK(heap.check_invariants());
}

BOOST_AUTO_TEST_CASE(move_leaves_source_empty) {
  auto heap = make_levels(10);
  quad_heap other{std::move(heap)};
  BOOST_CHECK_EQUAL(other.size(), 10u);
  BOOST_CHECK(heap.empty()); // NOLINT: moved-from state is specified
  BOOST_CHECK(heap.insert(1, 1));
  heap = std::move(other);
  BOOST_CHECK_EQUAL(heap.size(), 10u);
  BOOST_CHECK(heap.check_invariants());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(reference_model_runs)

BOOST_AUTO_TEST_CASE(small_id_space_many_collisions) {
  // Few ids: duplicates, unknown ids and tombstone reuse are frequent.
  for (uint64_t seed = 1; seed <= 5; ++seed)
    random_run(seed, 40'000, 1000, 64);
}

BOOST_AUTO_TEST_CASE(narrow_due_range_many_ties) {
  for (uint64_t seed = 10; seed <= 12; ++seed)
    random_run(seed, 40'000, 8, 4096);
}

BOOST_AUTO_TEST_CASE(wide_range_growing_heap) {
  random_run(99, 200'000, 1'000'000, 1'000'000);
}

BOOST_AUTO_TEST_CASE(erase_heavy_churn_reuses_tombstones) {
  // Insert and erase over a moving id window so the index fills with
  // tombstones and must rebuild in place rather than grow.
  quad_heap heap;
  reference_model model;
  std::mt19937_64 rng{5};
  for (task_id id = 0; id < 300'000; ++id) {
    auto due = static_cast<int64_t>(rng() % 10'000);
    BOOST_REQUIRE_EQUAL(heap.insert(id, due), model.insert(id, due));
    if (id >= 500)
      BOOST_REQUIRE_EQUAL(heap.erase(id - 500), model.erase(id - 500));
  }
  BOOST_CHECK(heap.check_invariants());
  BOOST_CHECK_EQUAL(heap.size(), 500u);
  // 500 live entries must not have kept an index sized for thousands.
  BOOST_CHECK_LT(heap.memory_bytes(), 64u * 1024);
  BOOST_CHECK(heap.pop_due(10'000, 1000) == model.pop_due(10'000, 1000));
}

BOOST_AUTO_TEST_CASE(draining_shrinks_the_index) {
  // Pops alone must give the index back: the heap array keeps its
  // capacity, but the index (at least 4 bytes per peak entry) shrinks.
  quad_heap heap;
  for (task_id id = 0; id < 100'000; ++id)
    heap.insert(id, static_cast<int64_t>(id));
  auto peak = heap.memory_bytes();
  heap.pop_due(99'899, 100'000);
  BOOST_CHECK_EQUAL(heap.size(), 100u);
  BOOST_CHECK_LE(heap.memory_bytes(), peak - 4 * 100'000 + 4 * 1'000);
  BOOST_CHECK(heap.check_invariants());
  BOOST_CHECK_EQUAL(heap.pop_due(100'000, 1000).size(), 100u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(scale)

BOOST_AUTO_TEST_CASE(two_million_entries) {
  constexpr size_t n = 2'000'000;
  quad_heap heap;
  std::mt19937_64 rng{2026};
  size_t inserted = 0;
  for (task_id id = 0; id < n; ++id)
    inserted += heap.insert(id * 16 + 3, static_cast<int64_t>(rng() >> 24));
  BOOST_CHECK_EQUAL(inserted, n);
  BOOST_CHECK_EQUAL(heap.size(), n);
  auto per_entry = static_cast<double>(heap.memory_bytes()) / n;
  BOOST_TEST_MESSAGE("bytes per entry at 2M: " << per_entry);
  BOOST_CHECK_LE(per_entry, 32.0);
  // Revoke every third, reschedule every fifth, then drain in order.
  size_t erased = 0;
  for (task_id id = 0; id < n; id += 3)
    erased += heap.erase(id * 16 + 3) ? 1 : 0;
  for (task_id id = 1; id < n; id += 5)
    heap.update(id * 16 + 3, static_cast<int64_t>(rng() >> 24));
  BOOST_CHECK_EQUAL(heap.size(), n - erased);
  BOOST_CHECK(heap.check_invariants());
  drain_and_check_order(heap);
}

BOOST_AUTO_TEST_CASE(memory_stays_under_32_bytes_while_growing) {
  // Check the bound at every size on the way up, not just at round numbers.
  quad_heap heap;
  double worst = 0;
  for (task_id id = 0; id < 300'000; ++id) {
    heap.insert(id, static_cast<int64_t>(id));
    if (id >= 1000) {
      auto per_entry = static_cast<double>(heap.memory_bytes()) /
                       static_cast<double>(heap.size());
      worst = std::max(worst, per_entry);
    }
  }
  BOOST_TEST_MESSAGE("worst bytes per entry from 1k to 300k: " << worst);
  BOOST_CHECK_LE(worst, 32.0);
}

BOOST_AUTO_TEST_SUITE_END()
