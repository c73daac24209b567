#define BOOST_TEST_MODULE event_log
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "sim/event_log.hpp"

using dally::sim::event_log;

BOOST_AUTO_TEST_CASE(the_hash_is_fixed_by_the_lines) {
  event_log log;
  BOOST_TEST(log.size() == 0u);
  log.add(0, "start seed=42");
  log.add(5, "schedule id=7 due=100");
  log.add(100, "fire id=7 attempt=1");
  BOOST_TEST(log.size() == 3u);
  // FNV-1a 64 of the three lines, each ending in '\n' (computed apart in
  // Python): the hash printed by one build must match any other's.
  BOOST_TEST(log.hash_hex() == "e5d663c0bc554e25");
  BOOST_TEST(log.hash() == 0xe5d663c0bc554e25ULL);
}

BOOST_AUTO_TEST_CASE(order_time_and_boundaries_change_the_hash) {
  auto hash_of = [](std::vector<std::pair<int64_t, std::string>> lines) {
    event_log log;
    for (auto& [t, text] : lines)
      log.add(t, text);
    return log.hash();
  };
  auto base = hash_of({{1, "a"}, {2, "b"}});
  BOOST_TEST(base == hash_of({{1, "a"}, {2, "b"}}));
  BOOST_TEST(base != hash_of({{2, "b"}, {1, "a"}}));
  BOOST_TEST(base != hash_of({{1, "a"}, {3, "b"}}));
  BOOST_TEST(hash_of({{1, "ab"}, {1, "c"}}) != hash_of({{1, "a"}, {1, "bc"}}));
  BOOST_TEST(event_log{}.hash_hex() == "cbf29ce484222325");
}

BOOST_AUTO_TEST_CASE(it_keeps_the_last_lines) {
  event_log log{3};
  for (int i = 0; i < 10; ++i)
    log.add(i, "event " + std::to_string(i));
  BOOST_TEST(log.size() == 10u);
  BOOST_REQUIRE_EQUAL(log.last().size(), 3u);
  BOOST_TEST(log.last().front() == "7 event 7");
  BOOST_TEST(log.last().back() == "9 event 9");
  event_log one{0};
  one.add(1, "x");
  one.add(2, "y");
  BOOST_TEST(one.last().size() == 1u);
}
