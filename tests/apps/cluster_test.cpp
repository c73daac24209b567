#define BOOST_TEST_MODULE apps_cluster
#include <boost/test/unit_test.hpp>

// Three dallyd processes with cluster flags on 127.0.0.1: they elect a
// coordinator and commit one shard map; a stopped node is reported
// unreachable and reachable again when it continues; kill -9 of the
// coordinator leaves a standby coordinating the same map, and the killed
// node rejoins when restarted.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster_view.hpp"
#include "node.hpp"

using namespace dally::apps::test;

namespace {

class cluster3 {
public:
  cluster3() {
    for (int id = 1; id <= 3; ++id)
      ports_[id] = free_port();
    for (auto [id, port] : ports_)
      seeds_ += (seeds_.empty() ? "" : ",") + std::to_string(id) +
                "@127.0.0.1:" + std::to_string(port);
    for (int id = 1; id <= 3; ++id)
      start(id);
  }

  void start(int id) {
    auto name = "n" + std::to_string(id);
    nodes_[id] = std::make_unique<node>(
      dir_.str(name), dir_.str(name + ".log"),
      std::vector<std::string>{"--node-id", std::to_string(id),
                               "--cluster-seeds", seeds_, "--cluster-shards",
                               "16", "--heartbeat-ms", "100",
                               "--unreachable-ms", "1000"});
  }

  node& at(int id) { return *nodes_.at(id); }

  view status(int id) {
    auto r = run({DALLYCTL, "--json", "--timeout", "5s", "--port",
                  std::to_string(ports_.at(id)), "cluster", "status"},
                 {}, std::chrono::seconds{10});
    if (r.code != 0)
      return view{};
    return parse_view(r.out);
  }

  /// Asks each of `ids` until `good` holds for all answers at once, for at
  /// most `limit`; the answers of the last round.
  std::map<int, view> wait_for(const std::vector<int>& ids,
                               const std::function<bool(const view&)>& good,
                               std::chrono::seconds limit) {
    auto deadline = steady_clock::now() + limit;
    std::map<int, view> views;
    for (;;) {
      bool all = true;
      for (int id : ids) {
        views[id] = status(id);
        all = all && views[id].ok && good(views[id]);
      }
      if (all || steady_clock::now() >= deadline)
        return views;
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
    }
  }

  std::string logs() {
    std::string out;
    for (auto& [id, n] : nodes_)
      out += "--- node " + std::to_string(id) + "\n" + n->log();
    return out;
  }

private:
  temp_dir dir_;
  std::map<int, uint16_t> ports_;
  std::string seeds_;
  std::map<int, std::unique_ptr<node>> nodes_;
};

/// Whether every answer names the same coordinator and map.
bool agree(const std::map<int, view>& views) {
  const auto& first = views.begin()->second;
  for (const auto& [id, v] : views)
    if (!v.ok || v.coordinator != first.coordinator || v.epoch != first.epoch ||
        v.shards != first.shards)
      return false;
  return true;
}

/// Settled also means the coordinator's no-op of this term is committed
/// and every node has heard so.
bool settled(const view& v) {
  return v.coordinator > 0 && v.epoch >= 1 && v.shard_count == 16 &&
         v.term >= 1 && v.commit_term == v.term && v.reachable.at(1) &&
         v.reachable.at(2) && v.reachable.at(3);
}

/// All three agree and see each other; the map as node 1 reports it.
view wait_settled(cluster3& c, const std::string& what) {
  auto views = c.wait_for({1, 2, 3}, settled, std::chrono::seconds{30});
  BOOST_REQUIRE_MESSAGE(agree(views) && settled(views[1]),
                        what + "; node 1 says " + views[1].text + "\n" +
                          c.logs());
  return views[1];
}

/// SIGSTOP of `stopped`: `others` report it unreachable; SIGCONT: all
/// three agree again.
void stop_and_continue(cluster3& c, int stopped, std::vector<int> others) {
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
void kill_coordinator(cluster3& c, int coord, const std::vector<int>& standbys,
                      const view& before) {
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
  cluster3 c;
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
