#define BOOST_TEST_MODULE apps_cluster
#include <boost/test/unit_test.hpp>

// Three dallyd processes with cluster flags on 127.0.0.1: they elect a
// coordinator and commit one shard map; a stopped node is reported
// unreachable and reachable again when it continues; kill -9 of the
// coordinator leaves a standby coordinating the same map, and the killed
// node rejoins when restarted.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cluster_fixture.hpp"

using namespace dally::apps::test;

namespace {

/// Settled also means the coordinator's no-op of this term is committed
/// and every node has heard so.
bool settled(const view& v) {
  return v.coordinator > 0 && v.epoch >= 1 && v.shard_count == 16 &&
         v.term >= 1 && v.commit_term == v.term && v.reachable.at(1) &&
         v.reachable.at(2) && v.reachable.at(3);
}

/// All three agree and see each other; the map as node 1 reports it.
view wait_settled(dallyd_cluster& c, const std::string& what) {
  auto views = c.wait_for({1, 2, 3}, settled, std::chrono::seconds{30});
  BOOST_REQUIRE_MESSAGE(agree(views) && settled(views[1]),
                        what + "; node 1 says " + views[1].text + "\n" +
                          c.logs());
  return views[1];
}

/// SIGSTOP of `stopped`: `others` report it unreachable; SIGCONT: all
/// three agree again.
void stop_and_continue(dallyd_cluster& c, int stopped,
                       std::vector<int> others) {
  c.at(stopped).proc().signal(SIGSTOP);
  auto views = c.wait_for(
    others, [&](const view& v) { return !v.reachable.at(stopped); },
    std::chrono::seconds{10});
  for (int id : others)
    BOOST_TEST(!views[id].reachable.at(stopped), views[id].text);
  c.at(stopped).proc().signal(SIGCONT);
  wait_settled(c, "not reachable again after SIGCONT");
}

/// kill -9 of the coordinator `coord`: the `standbys` agree on another
/// coordinator and keep the map `before`.
void kill_coordinator(dallyd_cluster& c, int coord,
                      const std::vector<int>& standbys, const view& before) {
  auto t0 = steady_clock::now();
  c.at(coord).kill();
  auto views = c.wait_for(
    standbys,
    [&](const view& v) {
      return v.coordinator > 0 && v.coordinator != coord &&
             !v.reachable.at(coord);
    },
    std::chrono::seconds{20});
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                steady_clock::now() - t0)
                .count();
  auto& v = views[standbys[0]];
  BOOST_REQUIRE_MESSAGE(agree(views) && v.coordinator > 0 &&
                          v.coordinator != coord,
                        "no new coordinator: " + v.text + "\n" + c.logs());
  BOOST_TEST_MESSAGE("new coordinator after " << took << " ms");
  BOOST_TEST(took < 10'000);
  for (int id : standbys) {
    BOOST_TEST(views[id].epoch == before.epoch);
    BOOST_TEST(views[id].shard_count == 16);
    BOOST_TEST((views[id].shards == before.shards));
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(three_nodes_agree_detect_a_stop_and_survive_a_kill) {
  dallyd_cluster c{{.voters = 3, .shards = 16}};
  c.start_all();
  auto before = wait_settled(c, "no agreement");
  int64_t total = 0;
  for (auto [id, n] : before.shards) {
    BOOST_TEST(n >= 5); // 16 shards on 3 nodes: 5 or 6 each
    total += n;
  }
  BOOST_TEST(total == 16);
  auto coord = static_cast<int>(before.coordinator);
  std::vector<int> standbys;
  for (int id = 1; id <= 3; ++id)
    if (id != coord)
      standbys.push_back(id);
  stop_and_continue(c, standbys[0], {coord, standbys[1]});
  kill_coordinator(c, coord, standbys, before);
  // The killed node restarts on its data directory and rejoins.
  c.start(coord);
  auto after = wait_settled(c, "the restarted node did not rejoin");
  BOOST_TEST(after.epoch == before.epoch);
  BOOST_TEST((after.shards == before.shards));
  for (int id = 1; id <= 3; ++id)
    BOOST_TEST(c.at(id).stop() == 0);
}
