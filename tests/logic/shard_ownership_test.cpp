#define BOOST_TEST_MODULE shard_ownership
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "core/placement.hpp"
#include "logic/engine_routing.hpp"
#include "logic/shard_ownership.hpp"

// Which shards a node of a cluster runs, what a new map asks it to open and
// close, and where each request goes, without CAF.

using namespace dally;
using kind = logic::route_decision::kind;

namespace {

/// A map of `owners.size()` shards, shard i on owners[i], at `epoch`.
core::shard_map map_of(uint64_t epoch, std::vector<core::node_id> owners) {
  core::shard_map out;
  out.epoch = epoch;
  for (auto o : owners)
    out.shards.push_back({o});
  return out;
}

auto reach(std::set<core::node_id> nodes) {
  return [nodes](core::node_id n) { return nodes.count(n) > 0; };
}

} // namespace

BOOST_AUTO_TEST_CASE(a_single_node_owns_every_shard_at_epoch_zero) {
  logic::shard_ownership own{0, 4, true};
  BOOST_REQUIRE(own.map());
  BOOST_TEST(own.map()->epoch == 0u);
  BOOST_TEST(own.owned() == (std::vector<uint32_t>{0, 1, 2, 3}));
  BOOST_TEST(own.other_owners().empty());
  auto d = own.route(2, false, reach({}));
  BOOST_TEST((d.where == kind::local));
}

BOOST_AUTO_TEST_CASE(a_cluster_node_runs_nothing_before_its_first_map) {
  logic::shard_ownership own{3, 4, false};
  BOOST_TEST(!own.map());
  BOOST_TEST(own.owned().empty());
  auto d = own.route(1, false, reach({1, 2}));
  BOOST_TEST((d.where == kind::unavailable));
  BOOST_TEST(d.reason == "shard 1: node 3 has no shard map yet");
}

BOOST_AUTO_TEST_CASE(the_first_map_opens_the_nodes_shards) {
  logic::shard_ownership own{1, 4, false};
  auto change = own.install(map_of(1, {1, 2, 1, 2}));
  BOOST_REQUIRE(change);
  BOOST_TEST(change->open == (std::vector<uint32_t>{0, 2}));
  BOOST_TEST(change->close.empty());
  BOOST_TEST(own.owned() == (std::vector<uint32_t>{0, 2}));
  BOOST_TEST(own.other_owners() == (std::vector<core::node_id>{2}));
}

BOOST_AUTO_TEST_CASE(a_newer_map_opens_gained_and_closes_lost_shards) {
  logic::shard_ownership own{1, 4, false};
  BOOST_REQUIRE(own.install(map_of(1, {1, 2, 1, 2})));
  auto change = own.install(map_of(2, {2, 1, 1, 3}));
  BOOST_REQUIRE(change);
  BOOST_TEST(change->open == (std::vector<uint32_t>{1}));
  BOOST_TEST(change->close == (std::vector<uint32_t>{0}));
  BOOST_TEST(own.map()->epoch == 2u);
  BOOST_TEST(own.other_owners() == (std::vector<core::node_id>{2, 3}));
}

BOOST_AUTO_TEST_CASE(a_single_node_joining_a_cluster_closes_what_it_loses) {
  logic::shard_ownership own{0, 3, true};
  auto change = own.install(map_of(1, {0, 5, 5}));
  BOOST_REQUIRE(change);
  BOOST_TEST(change->open.empty());
  BOOST_TEST(change->close == (std::vector<uint32_t>{1, 2}));
}

BOOST_AUTO_TEST_CASE(an_older_map_is_refused_and_changes_nothing) {
  logic::shard_ownership own{1, 2, false};
  BOOST_REQUIRE(own.install(map_of(5, {1, 2})));
  auto stale = own.install(map_of(4, {2, 1}));
  BOOST_REQUIRE(!stale);
  BOOST_TEST((stale.err().code() == core::errc::stale_epoch));
  BOOST_TEST(stale.err().message() ==
             "shard map epoch 4 is older than the installed epoch 5");
  BOOST_TEST(own.map()->epoch == 5u);
  BOOST_TEST(own.owned() == (std::vector<uint32_t>{0}));
}

BOOST_AUTO_TEST_CASE(the_same_map_again_changes_nothing) {
  logic::shard_ownership own{1, 2, false};
  BOOST_REQUIRE(own.install(map_of(5, {1, 2})));
  auto again = own.install(map_of(5, {1, 2}));
  BOOST_REQUIRE(again);
  BOOST_TEST((*again == logic::map_change{}));
}

BOOST_AUTO_TEST_CASE(another_map_at_the_same_epoch_is_refused) {
  logic::shard_ownership own{1, 2, false};
  BOOST_REQUIRE(own.install(map_of(5, {1, 2})));
  auto other = own.install(map_of(5, {2, 1}));
  BOOST_REQUIRE(!other);
  BOOST_TEST((other.err().code() == core::errc::stale_epoch));
  BOOST_TEST(own.owned() == (std::vector<uint32_t>{0}));
}

BOOST_AUTO_TEST_CASE(a_map_of_another_shard_count_is_refused) {
  logic::shard_ownership own{1, 2, false};
  auto bad = own.install(map_of(1, {1, 2, 1}));
  BOOST_REQUIRE(!bad);
  BOOST_TEST((bad.err().code() == core::errc::invalid_request));
  BOOST_TEST(!own.map());
}

BOOST_AUTO_TEST_CASE(requests_go_local_forward_or_are_unavailable) {
  logic::shard_ownership own{1, 3, false};
  BOOST_REQUIRE(own.install(map_of(7, {1, 2, 3})));
  auto peers = reach({2});
  BOOST_TEST((own.route(0, false, peers).where == kind::local));
  auto fwd = own.route(1, false, peers);
  BOOST_TEST((fwd.where == kind::forward));
  BOOST_TEST(fwd.owner == 2u);
  auto none = own.route(2, false, peers);
  BOOST_TEST((none.where == kind::unavailable));
  BOOST_TEST(none.owner == 3u);
  BOOST_TEST(none.reason ==
             "shard 2 is owned by node 3 at shard map epoch 7, which node 1 "
             "cannot reach");
}

BOOST_AUTO_TEST_CASE(a_forwarded_request_is_never_forwarded_again) {
  logic::shard_ownership own{1, 2, false};
  BOOST_REQUIRE(own.install(map_of(3, {1, 2})));
  BOOST_TEST((own.route(0, true, reach({2})).where == kind::local));
  auto d = own.route(1, true, reach({2}));
  BOOST_TEST((d.where == kind::unavailable));
  BOOST_TEST(d.reason == "shard 1 is owned by node 2, not by node 1 at shard "
                         "map epoch 3 (a forwarded request is not forwarded "
                         "again)");
}

BOOST_AUTO_TEST_CASE(new_tasks_go_round_the_shards_a_node_runs) {
  logic::request_router router{core::shard_map::single_node(4)};
  router.set_turns({1, 3, 9});
  v1::ScheduleRequest req;
  req.set_topic("t");
  std::vector<uint32_t> got;
  for (int i = 0; i < 4; ++i)
    got.push_back(router.shard_for(req));
  BOOST_TEST(got == (std::vector<uint32_t>{1, 3, 1, 3}));
  v1::ScheduleBatchRequest batch;
  *batch.add_tasks() = req;
  auto up_all = [](uint32_t) { return true; };
  auto whole = router.whole(batch, up_all);
  BOOST_REQUIRE(whole);
  BOOST_TEST(*whole == 1u);
  auto parts = router.split(batch);
  BOOST_REQUIRE(parts.size() == 1u);
  BOOST_TEST(parts[0].shard == 3u);
  router.set_turns({});
  BOOST_TEST(router.shard_for(req) == 0u);
  BOOST_TEST(router.shard_for(req) == 1u);
}
