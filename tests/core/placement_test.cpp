#define BOOST_TEST_MODULE placement
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "core/placement.hpp"

using namespace dally::core;

BOOST_AUTO_TEST_CASE(fnv1a_matches_the_reference_values) {
  // The published test vectors of 64-bit FNV-1a: every node and the
  // simulator must place a key alike.
  BOOST_TEST(fnv1a("") == 0xcbf29ce484222325ULL);
  BOOST_TEST(fnv1a("a") == 0xaf63dc4c8601ec8cULL);
  BOOST_TEST(fnv1a("foobar") == 0x85944171f73967e8ULL);
}

BOOST_AUTO_TEST_CASE(ids_are_dealt_round_the_shards) {
  for (uint32_t count : {1u, 3u, 4u})
    for (uint32_t shard = 0; shard < count; ++shard)
      for (uint64_t local : {0ULL, 1ULL, 17ULL, 1ULL << 40}) {
        auto id = task_id_of(local, shard, count);
        BOOST_REQUIRE(id.has_value());
        BOOST_TEST(*id == local * count + shard);
        BOOST_TEST(shard_of(*id, count) == shard);
        BOOST_TEST(local_id_of(*id, count) == local);
      }
}

BOOST_AUTO_TEST_CASE(ids_beyond_64_bits_are_refused) {
  auto max = std::numeric_limits<uint64_t>::max();
  BOOST_TEST(!task_id_of(max / 4 + 1, 0, 4).has_value());
  BOOST_TEST(!task_id_of(max / 4, 3 + 4, 4).has_value());
  BOOST_TEST(task_id_of(max / 4 - 1, 3, 4).has_value());
}

BOOST_AUTO_TEST_CASE(no_shards_place_everything_at_zero) {
  BOOST_TEST(shard_of(12, 0) == 0u);
  BOOST_TEST(shard_of_key("k", 0) == 0u);
  BOOST_TEST(notifier_of("t", 0) == 0u);
}

BOOST_AUTO_TEST_CASE(keys_and_topics_are_placed_by_their_hash) {
  BOOST_TEST(shard_of_key("foobar", 5) == 0x85944171f73967e8ULL % 5);
  BOOST_TEST(notifier_of("foobar", 3) == 0x85944171f73967e8ULL % 3);
  // Spread: 100 keys reach each of 4 shards.
  std::set<uint32_t> seen;
  for (int i = 0; i < 100; ++i)
    seen.insert(shard_of_key("k" + std::to_string(i), 4));
  BOOST_TEST(seen.size() == 4u);
}

BOOST_AUTO_TEST_CASE(a_single_node_map_places_like_the_functions) {
  auto map = shard_map::single_node(3, 5);
  BOOST_TEST(map.epoch == 0u);
  BOOST_TEST(map.shard_count() == 3u);
  for (task_id id = 0; id < 12; ++id)
    BOOST_TEST(map.shard_of(id) == shard_of(id, 3));
  BOOST_TEST(map.shard_of_key("abc") == shard_of_key("abc", 3));
  BOOST_TEST(map.owner_of(2) == 5u);
  BOOST_CHECK_THROW(map.owner_of(3), std::out_of_range);
}
