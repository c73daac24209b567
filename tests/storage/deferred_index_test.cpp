#define BOOST_TEST_MODULE deferred_index
#include <boost/test/unit_test.hpp>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "storage/deferred_index.hpp"

using dally::core::task_id;
using dally::storage::deferred_index;

namespace {

std::vector<task_id> age_ids(deferred_index& d, task_id* lowest = nullptr) {
  std::vector<task_id> written;
  auto low = d.age([&](task_id id, int64_t) { written.push_back(id); });
  if (lowest != nullptr)
    *lowest = low;
  return written;
}

void apply(deferred_index& d) {
  d.apply([](task_id, int64_t) {});
}

std::vector<task_id> open_ids(const deferred_index& d) {
  std::vector<task_id> out;
  d.for_each_open([&](task_id id, int64_t) { out.push_back(id); });
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(an_entry_settled_in_its_own_batch_is_never_written) {
  deferred_index d{1, 0, 100};
  BOOST_TEST(d.defer(1, 10));
  BOOST_TEST(d.put_once(1));
  BOOST_TEST(d.take(1)); // nothing to erase
  BOOST_TEST(!d.take(1));
  BOOST_TEST(age_ids(d).empty());
  apply(d);
  BOOST_TEST(d.empty());
  BOOST_TEST(d.span() == 0u);
}

BOOST_AUTO_TEST_CASE(only_ids_above_every_deferred_one_of_the_shard_defer) {
  deferred_index d{4, 1, 100};
  BOOST_TEST(d.defer(5, 10));
  BOOST_TEST(!d.defer(5, 10));  // not above
  BOOST_TEST(!d.defer(3, 10));  // below
  BOOST_TEST(!d.defer(10, 10)); // shard 2's
  BOOST_TEST(d.defer(13, 10));
  apply(d);
  BOOST_TEST(!d.defer(9, 10)); // below a committed one
  BOOST_TEST(d.defer(17, 10));
  apply(d);
  BOOST_TEST(open_ids(d) == (std::vector<task_id>{5, 13, 17}),
             boost::test_tools::per_element());
  BOOST_TEST(d.span() == 4u); // 5, 9 (a hole), 13, 17
  BOOST_TEST(d.take(5));
  BOOST_TEST(d.take(9) == false);
  apply(d);
  BOOST_TEST(d.span() == 2u); // the front moved past the hole
  BOOST_TEST(d.live() == 2u);
}

BOOST_AUTO_TEST_CASE(a_rewritten_or_recovered_record_was_not_put_once) {
  deferred_index d{1, 0, 100};
  BOOST_TEST(d.defer(1, 10));
  BOOST_TEST(d.defer(2, 10));
  d.note_rewritten(2); // in the batch that put it
  apply(d);
  BOOST_TEST(d.put_once(1));
  BOOST_TEST(!d.put_once(2));
  d.note_rewritten(1);
  BOOST_TEST(!d.put_once(1)); // seen within the batch already
  d.discard();
  BOOST_TEST(d.put_once(1)); // undone
  d.note_rewritten(1);
  apply(d);
  BOOST_TEST(!d.put_once(1));
  // Still deferred: its index entry was never written.
  BOOST_TEST(d.take(1));
  apply(d);
  deferred_index r{1, 0, 100};
  r.recover(7, 70);
  BOOST_TEST(!r.put_once(7));
  std::vector<std::pair<task_id, int64_t>> gone;
  BOOST_TEST(!r.take(7)); // its entry may be on disk: erase it
  r.apply([&](task_id id, int64_t at) { gone.emplace_back(id, at); });
  BOOST_REQUIRE(gone.size() == 1u);
  BOOST_TEST(gone[0].first == 7u);
  BOOST_TEST(gone[0].second == 70);
  BOOST_TEST(r.empty());
}

BOOST_AUTO_TEST_CASE(a_discarded_batch_leaves_the_entries_as_they_were) {
  deferred_index d{1, 0, 2};
  BOOST_TEST(d.defer(1, 10));
  BOOST_TEST(d.defer(2, 20));
  apply(d);
  BOOST_TEST(d.take(1));
  d.note_rewritten(2);
  BOOST_TEST(d.defer(3, 30));
  BOOST_TEST(d.defer(4, 40));
  BOOST_TEST(age_ids(d) == (std::vector<task_id>{2}));
  d.discard();
  BOOST_TEST(open_ids(d) == (std::vector<task_id>{1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(d.put_once(2));
  BOOST_TEST(d.live() == 2u);
  // The discarded batch's ids may be deferred again.
  BOOST_TEST(d.defer(3, 30));
  apply(d);
  BOOST_TEST(d.live() == 3u);
}

BOOST_AUTO_TEST_CASE(the_oldest_entries_beyond_the_bounds_are_written) {
  deferred_index d{1, 0, 4};
  task_id lowest = 0;
  for (task_id id = 1; id <= 5; ++id)
    BOOST_TEST(d.defer(id, 0));
  BOOST_TEST(age_ids(d, &lowest) == (std::vector<task_id>{1}));
  BOOST_TEST(lowest == 2u);
  apply(d);
  for (task_id id = 6; id <= 10; ++id)
    BOOST_TEST(d.defer(id, 0));
  BOOST_TEST(age_ids(d, &lowest) == (std::vector<task_id>{2, 3, 4, 5, 6}),
             boost::test_tools::per_element());
  BOOST_TEST(lowest == 7u);
  apply(d);
  // One entry stays open while ids move on: the span is trimmed to twice
  // the bound, and an id far beyond it makes the front go.
  BOOST_TEST(d.take(8));
  BOOST_TEST(d.take(9));
  BOOST_TEST(d.take(10));
  apply(d);
  BOOST_TEST(d.live() == 1u);
  BOOST_TEST(!d.defer(7 + 4 * 4, 0)); // beyond the ring
  BOOST_TEST(age_ids(d, &lowest) == (std::vector<task_id>{7}));
  BOOST_TEST(lowest == 0u);
  apply(d);
  BOOST_TEST(d.empty());
  BOOST_TEST(d.defer(7 + 4 * 4 + 1, 0));
}

BOOST_AUTO_TEST_CASE(
  recovered_ids_the_ring_cannot_hold_go_with_the_next_commit) {
  deferred_index d{2, 0, 4};
  d.recover(2, 20);
  d.recover(3, 30); // another shard's
  d.recover(4, 40);
  d.recover(200, 2000); // far beyond the span
  BOOST_TEST(d.live() == 4u);
  BOOST_TEST(open_ids(d) == (std::vector<task_id>{2, 4, 3, 200}),
             boost::test_tools::per_element());
  task_id lowest = 0;
  BOOST_TEST(age_ids(d, &lowest) == (std::vector<task_id>{3, 200}),
             boost::test_tools::per_element());
  BOOST_TEST(lowest == 2u);
  std::set<task_id> gone;
  d.apply([&](task_id id, int64_t) { gone.insert(id); });
  BOOST_TEST(gone == (std::set<task_id>{3, 200}));
  // A recovered entry settled by a later batch (its record quarantined)
  // may be on disk, and is reported gone once the batch is written.
  BOOST_TEST(!d.take(2));
  BOOST_TEST(!d.take(2));
  gone.clear();
  d.apply([&](task_id id, int64_t at) {
    gone.insert(id);
    BOOST_TEST(at == 20);
  });
  BOOST_TEST(gone == (std::set<task_id>{2}));
  BOOST_TEST(d.live() == 1u);
}

// Random batches against a model of what is on disk: a task's index entry
// is written or its entry is open here at or above the lowest id the
// commit reports (what recovery rescans); an entry `take` reports as never
// written is not on disk; put_once holds only for a record put once.
BOOST_AUTO_TEST_CASE(random_batches_keep_every_live_task_findable) {
  constexpr size_t bound = 8;
  constexpr uint64_t stride = 3;
  constexpr uint64_t shard = 1;
  for (uint32_t seed = 1; seed <= 25; ++seed) {
    std::mt19937_64 rng{seed};
    auto chance = [&](int percent) {
      return static_cast<int>(rng() % 100) < percent;
    };
    struct task {
      int puts = 1;
      bool recovered = false;
    };
    std::map<task_id, task> live;
    std::set<task_id> disk;
    task_id lowest = 0;
    task_id next = shard;
    auto d = std::make_unique<deferred_index>(stride, shard, bound);
    for (int round = 0; round < 300; ++round) {
      auto live_before = live;
      auto disk_before = disk;
      d->discard();
      auto ops = 1 + rng() % 6;
      for (size_t k = 0; k < ops; ++k) {
        auto pick = [&]() {
          auto i = live.begin();
          std::advance(i, static_cast<long>(rng() % live.size()));
          return i;
        };
        if (live.empty() || chance(45)) {
          next += stride * (1 + rng() % 2);
          auto id = chance(5) ? next + 1 : next; // another shard's, rarely
          if (!(chance(80) && d->defer(id, 0)))
            disk.insert(id);
          live[id] = task{};
        } else if (chance(50)) {
          auto i = pick();
          auto once = d->put_once(i->first);
          BOOST_TEST((!once || (i->second.puts == 1 && !i->second.recovered)));
          if (d->take(i->first))
            BOOST_TEST(!disk.contains(i->first));
          else
            disk.erase(i->first);
          live.erase(i);
        } else if (chance(60)) {
          auto i = pick();
          d->note_rewritten(i->first);
          ++i->second.puts;
        } else {
          auto i = pick(); // a new index time: the entry moves
          if (!d->take(i->first))
            disk.erase(i->first);
          disk.insert(i->first);
          ++i->second.puts;
        }
      }
      task_id low = 0;
      for (auto id : age_ids(*d, &low))
        disk.insert(id);
      if (chance(10)) {
        d->discard(); // the write failed
        live = std::move(live_before);
        disk = std::move(disk_before);
        continue;
      }
      apply(*d);
      lowest = low;
      BOOST_TEST(d->live() <= bound);
      BOOST_TEST(d->span() <= 4 * bound);
      auto open = open_ids(*d);
      std::set<task_id> open_set(open.begin(), open.end());
      for (const auto& [id, t] : live) {
        bool found =
          disk.contains(id) || (open_set.contains(id) && id >= lowest);
        BOOST_TEST(found, "seed " << seed << " round " << round << " task "
                                  << id << " cannot be found");
      }
      for (auto id : open)
        BOOST_TEST(live.contains(id));
      if (chance(5)) {
        // A crash: the next open rescans the records from `lowest` on.
        d = std::make_unique<deferred_index>(stride, shard, bound);
        if (lowest != 0)
          for (auto& [id, t] : live)
            if (id >= lowest) {
              d->recover(id, 0);
              t.recovered = true;
            }
      }
    }
  }
}
