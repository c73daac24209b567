#define BOOST_TEST_MODULE cluster_placement
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "cluster/cluster_map.hpp"
#include "cluster/placement.hpp"

using namespace dally::cluster;

BOOST_TEST_DONT_PRINT_LOG_VALUE(dally::cluster::cluster_map)

namespace {

std::vector<node_id> nodes_upto(node_id n) {
  std::vector<node_id> out;
  for (node_id i = 1; i <= n; ++i)
    out.push_back(i);
  return out;
}

size_t moved(const std::vector<node_id>& a, const std::vector<node_id>& b) {
  size_t out = 0;
  for (size_t i = 0; i < a.size(); ++i)
    out += a[i] != b[i] ? 1 : 0;
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(placement_is_deterministic_and_ignores_node_order) {
  auto a = place_shards(64, {1, 2, 3});
  auto b = place_shards(64, {3, 1, 2, 2});
  BOOST_TEST(a == b);
  BOOST_TEST(place_shards(64, {}).empty());
}

BOOST_AUTO_TEST_CASE(placement_spreads_the_shards_evenly) {
  for (uint32_t shards : {16u, 64u, 256u})
    for (node_id n = 1; n <= 7; ++n) {
      std::map<node_id, uint32_t> load;
      for (auto owner : place_shards(shards, nodes_upto(n)))
        ++load[owner];
      auto room = (shards + n - 1) / n;
      uint32_t total = 0;
      for (auto [node, count] : load) {
        BOOST_TEST(node >= 1);
        BOOST_TEST(node <= n);
        BOOST_TEST(count <= room);
        total += count;
      }
      BOOST_TEST(total == shards);
      // Every node gets a share: none is more than one node's room short.
      BOOST_TEST(load.size() == n);
    }
}

BOOST_AUTO_TEST_CASE(a_join_or_a_leave_moves_about_one_nth) {
  const uint32_t shards = 256;
  for (node_id n = 2; n <= 6; ++n) {
    auto before = place_shards(shards, nodes_upto(n));
    auto after = place_shards(shards, nodes_upto(n + 1));
    // A perfect scheme moves shards / (n + 1) to the newcomer; allow a
    // third more for the capacity bound, far below a reshuffle.
    auto ideal = shards / (n + 1);
    BOOST_TEST(moved(before, after) >= ideal);
    BOOST_TEST(moved(before, after) <= ideal + ideal / 3 + 2);
    // Shards that move go to the new node.
    size_t to_new = 0;
    for (size_t s = 0; s < shards; ++s)
      to_new += before[s] != after[s] && after[s] == n + 1 ? 1 : 0;
    BOOST_TEST(to_new >= ideal);
    // The leave is the join backwards.
    BOOST_TEST(moved(after, before) == moved(before, after));
  }
}

BOOST_AUTO_TEST_CASE(every_change_raises_the_epoch_and_noops_do_not) {
  auto map = cluster_map::create(64, {1, 2, 3});
  BOOST_TEST(map.epoch == 1u);
  BOOST_TEST(map.shard_count() == 64u);
  BOOST_TEST(!map.apply(noop{}));
  BOOST_TEST(!map.apply(add_node{2}));
  BOOST_TEST(!map.apply(reassign{}));
  BOOST_TEST(map.epoch == 1u);
  BOOST_TEST(map.apply(add_node{4}));
  BOOST_TEST(map.epoch == 2u);
  BOOST_TEST(map.active_nodes() == (std::vector<node_id>{1, 2, 3, 4}));
  BOOST_TEST(map.apply(reassign{}));
  BOOST_TEST(map.epoch == 3u);
  size_t on_four = 0;
  for (const auto& s : map.shards)
    on_four += s.owner == 4 ? 1 : 0;
  BOOST_TEST(on_four == 16u);
}

BOOST_AUTO_TEST_CASE(a_member_keeps_the_address_its_add_node_gave) {
  auto map = cluster_map::create(8, {1, 2, 3});
  BOOST_TEST(map.find(1)->address.empty()); // a seed's is configured
  BOOST_TEST(map.apply(add_node{4, "127.0.0.1:7504"}));
  BOOST_TEST(map.find(4)->address == "127.0.0.1:7504");
  BOOST_TEST(!map.apply(add_node{4, "127.0.0.1:7504"}));
  BOOST_TEST(!map.apply(add_node{4})); // no address: keeps the one it has
  BOOST_TEST(map.find(4)->address == "127.0.0.1:7504");
  BOOST_TEST(map.apply(add_node{4, "127.0.0.1:7514"})); // moved: a change
  BOOST_TEST(map.find(4)->address == "127.0.0.1:7514");
  BOOST_TEST(map.epoch == 3u);
  BOOST_TEST(map.apply(remove_node{4}));
  BOOST_TEST(map.apply(add_node{4}));
  BOOST_TEST((map.find(4)->state == member::status::active));
  BOOST_TEST(map.find(4)->address == "127.0.0.1:7514");
  BOOST_TEST(to_string(add_node{4, "h:1"}) == "add 4 at h:1");
  BOOST_TEST(to_string(add_node{4}) == "add 4");
}

BOOST_AUTO_TEST_CASE(only_the_first_create_makes_the_map) {
  cluster_map map;
  BOOST_TEST(!map.apply(create_map{0, {1, 2}}));
  BOOST_TEST(!map.apply(create_map{8, {}}));
  BOOST_TEST(map.epoch == 0u);
  BOOST_TEST(map.apply(create_map{8, {3, 1, 2}}));
  auto expected = cluster_map::create(8, {1, 2, 3});
  BOOST_TEST((map == expected));
  BOOST_TEST(map.epoch == 1u);
  BOOST_TEST(!map.apply(create_map{16, {1, 2, 3, 4}}));
  BOOST_TEST((map == expected));
  BOOST_TEST(to_string(command{create_map{8, {1, 2}}}) == "create 8 on 1,2");
}

BOOST_AUTO_TEST_CASE(a_leaving_node_keeps_its_shards_until_a_reassign) {
  auto map = cluster_map::create(64, {1, 2, 3});
  BOOST_TEST(map.apply(remove_node{2}));
  BOOST_REQUIRE(map.find(2) != nullptr);
  BOOST_TEST((map.find(2)->state == member::status::leaving));
  auto owns_two = [&] {
    return std::any_of(map.shards.begin(), map.shards.end(),
                       [](const shard_entry& s) { return s.owner == 2; });
  };
  BOOST_TEST(owns_two());
  BOOST_TEST(map.apply(reassign{}));
  BOOST_TEST(!owns_two());
  BOOST_TEST(map.find(2) == nullptr);
  BOOST_TEST(map.epoch == 3u);
  // The core view routes by the same owners and epoch.
  auto core = map.to_core();
  BOOST_TEST(core.epoch == map.epoch);
  for (uint32_t s = 0; s < 64; ++s)
    BOOST_TEST(core.owner_of(s) == map.shards[s].owner);
}

BOOST_AUTO_TEST_CASE(a_reassign_without_active_members_changes_nothing) {
  auto map = cluster_map::create(8, {1});
  BOOST_TEST(map.apply(remove_node{1}));
  auto before = map;
  BOOST_TEST(!map.apply(reassign{}));
  BOOST_TEST(map == before);
}
