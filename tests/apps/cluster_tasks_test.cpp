#define BOOST_TEST_MODULE apps_cluster_tasks
#include <boost/test/unit_test.hpp>

// Three dallyd with cluster flags on 127.0.0.1, a fourth outside the seeds
// that joins as a learner, and one consumer subscribed at one voter. Tasks
// scheduled through every node (with idempotency keys, so that many are
// forwarded to their shard's owner) all reach the consumer from every
// shard, none early. kill -9 of a voter that is not the coordinator: its
// shards answer `unavailable` naming it, the others keep taking tasks and
// the consumer keeps receiving; restarted, its shards come back with their
// tasks. SIGSTOP of that node: a request for its shard ends in
// `unavailable` within seconds.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster/cluster_map.hpp"
#include "cluster_fixture.hpp"
#include "core/placement.hpp"

using namespace dally::apps::test;
using std::chrono::seconds;

namespace {

constexpr uint32_t shard_count = 6;
const std::string topic = "jobs";

/// The owner of each shard: the map the cluster creates (rendezvous
/// placement over the seeds), which every node computes alike.
const dally::cluster::cluster_map placement =
  dally::cluster::cluster_map::create(shard_count, {1, 2, 3});

uint32_t owner_of_task(uint64_t id) {
  return placement.shards.at(dally::core::shard_of(id, shard_count)).owner;
}

uint32_t owner_of_key(const std::string& key) {
  return placement.shards.at(dally::core::shard_of_key(key, shard_count)).owner;
}

/// One try at scheduling task `key` through `n` (`when`: --in or --at
/// and its value): its id, or the error in `err`.
std::optional<uint64_t> schedule(node& n, const std::string& key,
                                 const std::vector<std::string>& when,
                                 std::string& err) {
  std::vector<std::string> args{"--json", "schedule", "--topic",   topic,
                                "--key",  key,        "--payload", key};
  args.insert(args.end(), when.begin(), when.end());
  auto r = n.ctl(args);
  err = r.err;
  if (r.code != 0)
    return std::nullopt;
  auto id = json_field(r.out, "id");
  return id ? std::optional<uint64_t>{std::stoull(*id)} : std::nullopt;
}

/// Schedules `key` through `n`, retrying for at most 30 s while the
/// cluster installs its map and its nodes learn each other's engines (the
/// key makes a retry the same task).
uint64_t schedule_retrying(node& n, const std::string& key,
                           const std::vector<std::string>& when) {
  auto deadline = steady_clock::now() + seconds{30};
  std::string err;
  for (;;) {
    if (auto id = schedule(n, key, when, err))
      return *id;
    BOOST_REQUIRE_MESSAGE(steady_clock::now() < deadline,
                          "schedule " + key + " failed: " + err);
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
  }
}

/// `dallyctl --json consume` at one node, read line by line.
class consumer {
public:
  consumer(node& n, const std::string& err_path)
    : proc_(n.spawn_ctl({"--json", "consume", topic}, err_path)) {}

  ~consumer() {
    proc_->signal(SIGTERM);
    if (!proc_->wait(steady_clock::now() + seconds{20}))
      proc_->kill_now();
  }

  consumer(const consumer&) = delete;
  consumer& operator=(const consumer&) = delete;

  /// Reads deliveries until every id in `want` has come, for at most
  /// `limit`; whether all came.
  bool wait_for(const std::set<uint64_t>& want, seconds limit) {
    auto deadline = steady_clock::now() + limit;
    for (;;) {
      if (std::all_of(want.begin(), want.end(),
                      [&](uint64_t id) { return first_.count(id) > 0; }))
        return true;
      auto line = proc_->read_line(deadline);
      if (!line)
        return false;
      auto id = json_field(*line, "id");
      auto due = json_field(*line, "due_ms");
      auto at = json_field(*line, "delivered_ms");
      BOOST_REQUIRE_MESSAGE(id && due && at, "bad delivery line: " + *line);
      auto d = delivery{std::stoll(*due), std::stoll(*at)};
      if (d.delivered_ms < d.due_ms)
        early_.push_back(*line);
      first_.emplace(std::stoull(*id), d);
    }
  }

  struct delivery {
    int64_t due_ms = 0;
    int64_t delivered_ms = 0;
  };

  /// The first delivery of each task.
  const std::map<uint64_t, delivery>& first() const { return first_; }

  /// Lines of deliveries that came before their due time.
  const std::vector<std::string>& early() const { return early_; }

private:
  std::unique_ptr<child> proc_;
  std::map<uint64_t, delivery> first_;
  std::vector<std::string> early_;
};

/// Every node knows the coordinator and the map, reaches the three voters
/// and knows node 4 as a learner that owns no shard.
bool settled(const view& v) {
  bool nodes_ok = v.reachable.size() == 4;
  for (int id = 1; id <= 4 && nodes_ok; ++id)
    nodes_ok = v.reachable.count(id) > 0 && v.voter.at(id) == (id != 4) &&
               (id == 4 ? v.shards.at(id) == 0 : v.reachable.at(id));
  return nodes_ok && v.coordinator > 0 && v.coordinator != 4 && v.epoch >= 1 &&
         v.shard_count == int64_t{shard_count} && v.commit_term == v.term;
}

/// `dallyctl cluster status` as text: the coordinator it names, the other
/// voters as standbys, node 4 as a learner. A node's line is "node ID
/// ADDRESS reachable|unreachable ROLE shards=N" (ADDRESS may be empty).
void check_roles_text(dallyd_cluster& c) {
  auto r = c.status_run(1, {}, false);
  BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
  std::map<int, std::string> role;
  int coord = 0;
  for (const auto& line : lines_of(r.out)) {
    if (line.rfind("coordinator: ", 0) == 0)
      coord = std::stoi(line.substr(13));
    if (line.rfind("node ", 0) != 0)
      continue;
    std::istringstream in{line.substr(5)};
    int id = 0;
    in >> id;
    for (std::string word; in >> word;)
      if (word == "reachable" || word == "unreachable") {
        in >> role[id];
        break;
      }
  }
  BOOST_TEST(role.size() == 4u, r.out);
  for (int id = 1; id <= 4; ++id)
    BOOST_TEST(role[id] == (id == coord ? "coordinator"
                            : id == 4   ? "learner"
                                        : "standby"),
               "node " << id << " in:\n"
                       << r.out);
}

/// Schedules `per_node` tasks through each of `through`, named
/// `prefix-NODE-I`, with `when`; their ids.
std::set<uint64_t> schedule_through(dallyd_cluster& c,
                                    const std::vector<int>& through,
                                    const std::string& prefix, int per_node,
                                    const std::vector<std::string>& when) {
  std::set<uint64_t> ids;
  for (int n : through)
    for (int i = 0; i < per_node; ++i)
      ids.insert(schedule_retrying(
        c.at(n), prefix + "-" + std::to_string(n) + "-" + std::to_string(i),
        when));
  return ids;
}

/// With `victim` down: a task of each of its shards is `unavailable`
/// through `other`, naming the shard's owner; the other shards answer (the
/// task, or not_found once it was delivered and acked).
void check_unavailable(dallyd_cluster& c, int other, int victim,
                       const std::set<uint64_t>& ids) {
  std::set<uint32_t> seen;
  for (auto id : ids) {
    auto shard = dally::core::shard_of(id, shard_count);
    if (!seen.insert(shard).second)
      continue;
    auto r = c.at(other).ctl({"get", std::to_string(id)});
    if (owner_of_task(id) == static_cast<uint32_t>(victim)) {
      BOOST_TEST(r.code == 1, "get " << id << ": " << r.out << r.err);
      BOOST_TEST(r.err.find("unavailable") != std::string::npos, r.err);
      BOOST_TEST(r.err.find("owned by node " + std::to_string(victim)) !=
                   std::string::npos,
                 r.err);
    } else {
      // Answered by its owner: live, or on a slow machine already due,
      // delivered and acked (gone).
      BOOST_TEST((r.code == 0 || r.err.find("not_found") != std::string::npos),
                 "get " << id << ": " << r.err);
    }
  }
  BOOST_TEST(seen.size() == shard_count);
}

/// With `victim` down, new tasks through the `living` nodes: those whose
/// key falls on the victim's shards fail with `unavailable`, the others
/// are taken; their ids.
std::set<uint64_t> schedule_around(dallyd_cluster& c,
                                   const std::vector<int>& living, int victim) {
  std::set<uint64_t> taken;
  int refused = 0;
  for (int n : living) {
    for (int i = 0; i < 6; ++i) {
      auto key = "c-" + std::to_string(n) + "-" + std::to_string(i);
      std::string err;
      auto id = schedule(c.at(n), key, {"--in", "1s"}, err);
      if (owner_of_key(key) == static_cast<uint32_t>(victim)) {
        ++refused;
        BOOST_TEST(!id, key << " was taken by a dead node's shard");
        BOOST_TEST(err.find("unavailable") != std::string::npos, err);
      } else {
        BOOST_TEST(id.has_value(), key << ": " << err);
        if (id)
          taken.insert(*id);
      }
    }
  }
  BOOST_TEST(refused > 0);
  BOOST_TEST(!taken.empty());
  return taken;
}

/// SIGSTOP of `frozen`: a request for one of its tasks through `other`
/// ends in `unavailable` within dallyd's --forward-timeout-ms (5 s), or at
/// once once `frozen` counts as unreachable, not at the client's timeout.
void check_frozen_owner(dallyd_cluster& c, int other, int frozen,
                        const std::set<uint64_t>& ids) {
  auto it = std::find_if(ids.begin(), ids.end(), [&](uint64_t id) {
    return owner_of_task(id) == static_cast<uint32_t>(frozen);
  });
  BOOST_REQUIRE(it != ids.end());
  c.at(frozen).proc().signal(SIGSTOP);
  auto t0 = steady_clock::now();
  auto r = c.at(other).ctl({"get", std::to_string(*it)});
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                steady_clock::now() - t0)
                .count();
  c.at(frozen).proc().signal(SIGCONT);
  BOOST_TEST_MESSAGE("a frozen owner's task, after " << took
                                                     << " ms: " << r.err);
  BOOST_TEST(r.code == 1, r.out << r.err);
  BOOST_TEST(r.err.find("unavailable") != std::string::npos, r.err);
  BOOST_TEST(took < 8000);
}

} // namespace

BOOST_AUTO_TEST_CASE(tasks_through_every_node_survive_a_killed_node) {
  dallyd_cluster c{{.voters = 3, .learners = 1, .shards = shard_count}};
  c.start_all();
  BOOST_REQUIRE_MESSAGE(
    agree_on(c.wait_for({1, 2, 3, 4}, settled, seconds{30}), settled),
    "no agreement\n" + c.logs());
  auto learner = c.status(1);
  BOOST_TEST(learner.reachable.at(4), learner.text);
  check_roles_text(c);
  for (int id = 1; id <= 3; ++id) { // every voter knows where 4 listens
    auto v = c.status(id);
    BOOST_TEST(v.text.find("\"id\":4,\"address\":\"" + c.address(4) + "\"") !=
                 std::string::npos,
               v.text);
  }
  auto coord = static_cast<int>(c.status(1).coordinator);
  int victim = coord == 3 ? 2 : 3;
  int home = 6 - coord - victim; // neither: the consumer's node
  consumer cons{c.at(home), c.dir().str("consume.err")};
  // Before the kill: every node takes tasks for every shard.
  auto a = schedule_through(c, {1, 2, 3, 4}, "a", 4, {"--in", "2s"});
  std::set<uint32_t> shards;
  for (auto id : a)
    shards.insert(dally::core::shard_of(id, shard_count));
  BOOST_TEST(shards.size() == shard_count);
  BOOST_REQUIRE_MESSAGE(cons.wait_for(a, seconds{30}),
                        "not all delivered before the kill\n" + c.logs());
  // Due after the kill: the victim's share waits for its restart.
  auto b_due = now_ms() + 15'000;
  auto b =
    schedule_through(c, {1, 2, 3}, "b", 4, {"--at", std::to_string(b_due)});
  auto killed_at = now_ms();
  c.at(victim).kill();
  auto unreachable = [&](const view& v) { return !v.reachable.at(victim); };
  BOOST_REQUIRE_MESSAGE(
    agree_on(c.wait_for({coord, home}, unreachable, seconds{10}), unreachable),
    "the killed node is still reachable\n" + c.logs());
  check_unavailable(c, home, victim, b);
  auto after = schedule_around(c, {coord, home, 4}, victim);
  BOOST_REQUIRE_MESSAGE(cons.wait_for(after, seconds{30}),
                        "not delivered while a node is down\n" + c.logs());
  // Restarted, the victim's shards come back with their tasks.
  auto restarted_at = now_ms();
  c.start(victim);
  BOOST_REQUIRE_MESSAGE(cons.wait_for(b, seconds{60}),
                        "tasks lost with the killed node\n" + c.logs());
  for (auto id : b)
    if (owner_of_task(id) == static_cast<uint32_t>(victim) && b_due > killed_at)
      BOOST_TEST(cons.first().at(id).delivered_ms >= restarted_at);
  for (const auto& line : cons.early())
    BOOST_ERROR("delivered early: " + line);
  check_frozen_owner(c, home, victim, b);
  for (int id = 1; id <= 4; ++id)
    BOOST_TEST(c.at(id).stop() == 0, "node " << id << ":\n" << c.at(id).log());
}
