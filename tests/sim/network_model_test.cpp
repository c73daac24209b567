#define BOOST_TEST_MODULE network_model
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <vector>

#include "sim/network_model.hpp"
#include "sim/prng.hpp"

using namespace dally::sim;

namespace {

const link_id a_to_b{1, 2};
const link_id b_to_a{2, 1};
const link_id a_to_c{1, 3};

} // namespace

BOOST_AUTO_TEST_CASE(a_faultless_link_delivers_at_once_and_in_order) {
  network_model net{prng{1}};
  BOOST_TEST(net.send(a_to_b, 100) == std::vector<int64_t>{100});
  BOOST_TEST(net.send(a_to_b, 100) == std::vector<int64_t>{100});
  BOOST_TEST(net.send(a_to_b, 105) == std::vector<int64_t>{105});
}

BOOST_AUTO_TEST_CASE(delays_stay_in_range_and_never_reorder_a_link) {
  network_model net{prng{2}, link_faults{5, 50, 0, 0}};
  int64_t last = 0;
  bool late = false;
  for (int64_t t = 0; t < 10'000; t += 3) {
    auto got = net.send(a_to_b, t);
    BOOST_REQUIRE_EQUAL(got.size(), 1u);
    BOOST_TEST_REQUIRE(got[0] >= t + 5);
    BOOST_TEST_REQUIRE(got[0] >= last);
    // Only keeping the send order may hold a message past the maximum.
    if (got[0] > t + 50)
      BOOST_TEST_REQUIRE(got[0] == last);
    late |= got[0] > t + 40;
    last = got[0];
  }
  BOOST_TEST(late);
  // Per-link faults override the defaults.
  net.set_faults(a_to_c, link_faults{});
  BOOST_TEST(net.send(a_to_c, 7) == std::vector<int64_t>{7});
}

BOOST_AUTO_TEST_CASE(a_partition_cuts_one_direction_until_healed) {
  network_model net{prng{3}};
  net.partition(a_to_b);
  BOOST_TEST(net.partitioned(a_to_b));
  BOOST_TEST(!net.partitioned(b_to_a));
  BOOST_TEST(net.send(a_to_b, 10).empty());
  BOOST_TEST(net.send(b_to_a, 10) == std::vector<int64_t>{10});
  net.heal(a_to_b);
  BOOST_TEST(!net.partitioned(a_to_b));
  BOOST_TEST(net.send(a_to_b, 11) == std::vector<int64_t>{11});
  net.partition(a_to_b);
  net.partition(b_to_a);
  net.heal_all();
  BOOST_TEST(net.send(a_to_b, 12) == std::vector<int64_t>{12});
  BOOST_TEST(net.send(b_to_a, 12) == std::vector<int64_t>{12});
}

BOOST_AUTO_TEST_CASE(a_clog_holds_messages_until_it_ends) {
  network_model net{prng{4}};
  net.clog(a_to_b, 500);
  BOOST_TEST(net.send(a_to_b, 10) == std::vector<int64_t>{500});
  BOOST_TEST(net.send(a_to_b, 20) == std::vector<int64_t>{500});
  BOOST_TEST(net.send(b_to_a, 20) == std::vector<int64_t>{20});
  BOOST_TEST(net.send(a_to_b, 600) == std::vector<int64_t>{600});
  // A shorter clog does not end a longer one; heal_all ends them all, but
  // what was sent keeps its time and later messages keep the order.
  net.clog(a_to_b, 2'000);
  net.clog(a_to_b, 1'000);
  BOOST_TEST(net.send(a_to_b, 700) == std::vector<int64_t>{2'000});
  net.heal_all();
  BOOST_TEST(net.send(a_to_b, 800) == std::vector<int64_t>{2'000});
  BOOST_TEST(net.send(a_to_b, 2'500) == std::vector<int64_t>{2'500});
}

BOOST_AUTO_TEST_CASE(drops_and_duplicates_follow_their_rates) {
  // 10% dropped, 5% of the rest duplicated; a fixed seed, so fixed counts.
  network_model net{prng{5}, link_faults{0, 0, 100'000, 50'000}};
  int dropped = 0;
  int duplicated = 0;
  for (int i = 0; i < 100'000; ++i) {
    auto got = net.send(a_to_b, i);
    if (got.empty())
      ++dropped;
    else if (got.size() == 2) {
      ++duplicated;
      BOOST_TEST_REQUIRE(got[0] == got[1]);
    }
  }
  BOOST_TEST((dropped > 9'500 && dropped < 10'500), "dropped " << dropped);
  BOOST_TEST((duplicated > 4'200 && duplicated < 4'800),
             "duplicated " << duplicated);
}

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_network) {
  auto run = [](bool cut_a) {
    network_model net{prng{6}, link_faults{1, 30, 200'000, 100'000}};
    if (cut_a)
      net.partition(a_to_c);
    std::vector<std::vector<int64_t>> out;
    for (int64_t t = 0; t < 500; ++t) {
      net.send(a_to_c, t);
      out.push_back(net.send(a_to_b, t));
    }
    return out;
  };
  BOOST_TEST(run(false) == run(false));
  // A partition elsewhere does not shift this link's draws.
  BOOST_TEST(run(false) == run(true));
}
