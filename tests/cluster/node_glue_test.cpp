#define BOOST_TEST_MODULE node_glue
#include <boost/test/unit_test.hpp>

#include <map>
#include <string>
#include <vector>

#include "cluster/node_glue.hpp"

using namespace dally::cluster;
using dally::core::shard_map;

namespace {

shard_map map_at(uint64_t epoch) {
  auto m = shard_map::single_node(4, 1);
  m.epoch = epoch;
  return m;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_new_log_has_no_shard_count) {
  memory_log_store store{cluster_map{}};
  BOOST_TEST(stored_shard_count(store) == 0u);
}

BOOST_AUTO_TEST_CASE(the_first_create_map_in_the_log_gives_the_count) {
  memory_log_store store{cluster_map{}};
  std::vector<log_entry> log{log_entry{1, 1, noop{}},
                             log_entry{1, 2, create_map{12, {1, 2, 3}}},
                             log_entry{2, 3, create_map{64, {1, 2, 3}}}};
  store.replace_after(0, log);
  BOOST_TEST(stored_shard_count(store) == 12u);
}

BOOST_AUTO_TEST_CASE(the_snapshot_map_gives_the_count) {
  memory_log_store store{cluster_map{}};
  store.save_snapshot(snapshot{5, 1, cluster_map::create(9, {1, 2})});
  std::vector<log_entry> log{log_entry{1, 6, create_map{64, {1, 2}}}};
  store.replace_after(5, log);
  BOOST_TEST(stored_shard_count(store) == 9u);
}

BOOST_AUTO_TEST_CASE(maps_go_one_at_a_time_and_only_the_newest_waits) {
  map_feed feed;
  auto first = feed.offer(map_at(1));
  BOOST_REQUIRE(first);
  BOOST_TEST(first->epoch == 1u);
  BOOST_TEST(!feed.offer(map_at(2)));
  BOOST_TEST(!feed.offer(map_at(3)));
  BOOST_TEST(!feed.offer(map_at(2))); // older than the one waiting
  auto next = feed.answered();
  BOOST_REQUIRE(next);
  BOOST_TEST(next->epoch == 3u);
  BOOST_TEST(!feed.answered());
  BOOST_TEST(!feed.busy());
  BOOST_TEST(!feed.offer(map_at(3))); // already handed out
  auto later = feed.offer(map_at(4));
  BOOST_REQUIRE(later);
  BOOST_TEST(later->epoch == 4u);
}

BOOST_AUTO_TEST_CASE(a_peer_engine_counts_while_reachable_and_linked) {
  peer_engines<int> engines;
  BOOST_TEST(!engines.on_hello(2, 20)); // not reachable yet
  BOOST_TEST(engines.live().empty());
  BOOST_TEST(engines.on_reachable(2, true));
  BOOST_TEST((engines.live() == std::map<node_id, int>{{2, 20}}));
  BOOST_TEST(!engines.on_hello(2, 20));               // the same engine again
  BOOST_TEST(engines.on_reachable(3, true) == false); // no engine known
  BOOST_TEST(engines.on_hello(3, 30));
  BOOST_TEST(engines.live().size() == 2u);
  // Unreachable: left out, and back when reachable again.
  BOOST_TEST(engines.on_reachable(2, false));
  BOOST_TEST((engines.live() == std::map<node_id, int>{{3, 30}}));
  BOOST_TEST(engines.on_reachable(2, true));
  BOOST_TEST(engines.live().size() == 2u);
  // A lost link forgets the engine: a restarted peer names a new one.
  BOOST_TEST(engines.on_link_lost(3));
  BOOST_TEST(!engines.on_link_lost(3));
  BOOST_TEST((engines.live() == std::map<node_id, int>{{2, 20}}));
  BOOST_TEST(engines.on_hello(3, 31));
  BOOST_TEST((engines.live() == std::map<node_id, int>{{2, 20}, {3, 31}}));
}

BOOST_AUTO_TEST_CASE(a_voter_takes_in_learners_and_dials_higher_seeds) {
  membership m{2, {1, 2, 3}};
  BOOST_TEST(m.is_voter());
  BOOST_TEST(!m.dials(1));
  BOOST_TEST(!m.dials(2));
  BOOST_TEST(m.dials(3));
  BOOST_TEST(!m.dials(7)); // a learner dials in
  auto seed = m.admit(1);
  BOOST_TEST((seed.take && !seed.new_learner));
  BOOST_TEST(!m.admit(2).take); // itself
  BOOST_TEST(!m.admit(0).take);
  auto first = m.admit(7);
  BOOST_TEST((first.take && first.new_learner));
  auto again = m.admit(7);
  BOOST_TEST((again.take && !again.new_learner));
  BOOST_TEST((m.learners() == std::vector<node_id>{7}));
}

BOOST_AUTO_TEST_CASE(a_learner_talks_to_the_seeds_only_and_dials_them_all) {
  membership m{7, {1, 2, 3}};
  BOOST_TEST(!m.is_voter());
  for (node_id seed : {1u, 2u, 3u}) {
    BOOST_TEST(m.dials(seed));
    BOOST_TEST(m.admit(seed).take);
  }
  BOOST_TEST(!m.admit(8).take);
  BOOST_TEST(m.learners().empty());
}

BOOST_AUTO_TEST_CASE(a_coordinator_proposes_each_join_once_per_term) {
  membership m{1, {1, 2, 3}};
  m.admit(7);
  m.admit(8);
  auto map = cluster_map::create(4, {1, 2, 3});
  BOOST_TEST(m.joins_due(false, 1, map).empty());          // not leading
  BOOST_TEST(m.joins_due(true, 1, cluster_map{}).empty()); // no map yet
  BOOST_TEST((m.joins_due(true, 1, map) ==
              std::vector<add_node>{add_node{7}, add_node{8}}));
  BOOST_TEST(m.joins_due(true, 1, map).empty());
  map.apply(add_node{7});
  BOOST_TEST((m.joins_due(true, 2, map) == std::vector<add_node>{add_node{8}}));
}

BOOST_AUTO_TEST_CASE(a_join_carries_the_address_the_learner_named_last) {
  membership m{1, {1, 2, 3}};
  m.admit(7, "127.0.0.1:7507");
  m.admit(7); // a message that names no address forgets none
  BOOST_TEST(m.address_of(7) == "127.0.0.1:7507");
  BOOST_TEST(m.address_of(8).empty());
  auto map = cluster_map::create(4, {1, 2, 3});
  auto due = m.joins_due(true, 1, map);
  BOOST_TEST((due == std::vector<add_node>{add_node{7, "127.0.0.1:7507"}}));
  map.apply(due.front());
  BOOST_TEST(m.joins_due(true, 2, map).empty()); // the map knows it there
  // Restarted elsewhere: the map's address is stale, so the learner is
  // added again at its new one, once per term.
  m.admit(7, "127.0.0.1:7517");
  BOOST_TEST(m.address_of(7) == "127.0.0.1:7517");
  BOOST_TEST((m.joins_due(true, 2, map) ==
              std::vector<add_node>{add_node{7, "127.0.0.1:7517"}}));
  BOOST_TEST(m.joins_due(true, 2, map).empty());
  map.apply(add_node{7, "127.0.0.1:7517"});
  BOOST_TEST(m.joins_due(true, 3, map).empty());
  // A leaving member is not made active again by a new address.
  map.apply(remove_node{7});
  m.admit(7, "127.0.0.1:7527");
  BOOST_TEST(m.joins_due(true, 4, map).empty());
  // An address no host and port can be is not kept.
  m.admit(7, std::string(membership::max_address_chars + 1, 'x'));
  BOOST_TEST(m.address_of(7) == "127.0.0.1:7527");
}

BOOST_AUTO_TEST_CASE(only_a_voter_keeps_the_addresses_learners_name) {
  membership learner{7, {1, 2, 3}};
  learner.admit(1, "127.0.0.1:7501");
  learner.admit(8, "127.0.0.1:7508"); // not taken
  BOOST_TEST(learner.address_of(1).empty());
  BOOST_TEST(learner.address_of(8).empty());
  membership voter{1, {1, 2, 3}};
  voter.admit(2, "127.0.0.1:7502"); // a seed: its address is configured
  BOOST_TEST(voter.address_of(2).empty());
}
