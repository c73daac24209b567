#define BOOST_TEST_MODULE raft_node
#include <boost/test/unit_test.hpp>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "cluster/raft_node.hpp"

using namespace dally::cluster;

BOOST_TEST_DONT_PRINT_LOG_VALUE(dally::cluster::cluster_map)
BOOST_TEST_DONT_PRINT_LOG_VALUE(dally::cluster::command)
BOOST_TEST_DONT_PRINT_LOG_VALUE(std::optional<dally::cluster::node_id>)

namespace {

/// A group of raft_nodes on a perfect network the test steps by hand:
/// messages wait in one queue; cut nodes neither send nor receive.
struct group {
  std::vector<node_id> voters;
  std::vector<node_id> learners;
  uint64_t snapshot_every = 64;
  int64_t now_ms = 0;
  std::map<node_id, std::unique_ptr<memory_log_store>> stores;
  std::map<node_id, std::unique_ptr<raft_node>> nodes;
  std::map<node_id, std::vector<applied_entry>> applied;
  std::map<node_id, int> installed;
  std::deque<std::pair<node_id, envelope>> queue;
  std::set<node_id> cut;

  group(std::vector<node_id> vs, std::vector<node_id> ls = {},
        uint64_t snap_every = 64)
    : voters(std::move(vs)), learners(std::move(ls)),
      snapshot_every(snap_every) {
    auto all = voters;
    all.insert(all.end(), learners.begin(), learners.end());
    for (auto id : all) {
      stores[id] =
        std::make_unique<memory_log_store>(cluster_map::create(16, {1, 2, 3}));
      start(id);
    }
  }

  raft_config config(node_id id) const {
    raft_config cfg;
    cfg.self = id;
    cfg.voters = voters;
    cfg.learners = learners;
    cfg.seed = id * 7919 + static_cast<uint64_t>(now_ms);
    cfg.snapshot_every = snapshot_every;
    return cfg;
  }

  void start(node_id id) {
    nodes[id] = std::make_unique<raft_node>(config(id), *stores[id], now_ms);
  }

  raft_node& node(node_id id) { return *nodes.at(id); }

  void absorb(node_id from, raft_effects fx) {
    for (auto& e : fx.messages)
      queue.emplace_back(from, std::move(e));
    for (auto& a : fx.applied)
      applied[from].push_back(std::move(a));
    if (fx.installed)
      ++installed[from];
  }

  void deliver_all() {
    while (!queue.empty()) {
      auto [from, env] = std::move(queue.front());
      queue.pop_front();
      if (cut.contains(from) || cut.contains(env.to) || !nodes.count(env.to))
        continue;
      absorb(env.to, node(env.to).on_message(now_ms, from, env.msg));
    }
  }

  /// Advances the time by `ms` in 10 ms ticks, delivering everything.
  void run(int64_t ms) {
    for (int64_t t = 0; t < ms; t += 10) {
      now_ms += 10;
      for (auto& [id, n] : nodes)
        absorb(id, n->on_tick(now_ms));
      deliver_all();
    }
  }

  std::vector<node_id> leaders() {
    std::vector<node_id> out;
    for (auto& [id, n] : nodes)
      if (n->is_leader() && !cut.contains(id))
        out.push_back(id);
    return out;
  }

  node_id elect() {
    run(3000);
    auto ls = leaders();
    BOOST_REQUIRE_EQUAL(ls.size(), 1u);
    return ls.front();
  }

  uint64_t propose(node_id at, command cmd) {
    auto fx = node(at).propose(now_ms, std::move(cmd));
    auto index = fx.proposed_index;
    absorb(at, std::move(fx));
    BOOST_REQUIRE(index.has_value());
    return *index;
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(three_voters_elect_one_leader_that_commits_a_noop) {
  group g{{1, 2, 3}};
  auto leader = g.elect();
  auto term = g.node(leader).term();
  for (auto id : {1u, 2u, 3u}) {
    BOOST_TEST(g.node(id).term() == term);
    BOOST_TEST(g.node(id).leader() == std::optional<node_id>{leader});
    BOOST_REQUIRE_EQUAL(g.applied[id].size(), 1u);
    BOOST_TEST((g.applied[id][0].entry.cmd == command{noop{}}));
  }
  // A leader that keeps sending heartbeats keeps its term.
  g.run(5000);
  BOOST_TEST(g.node(leader).is_leader());
  BOOST_TEST(g.node(leader).term() == term);
}

BOOST_AUTO_TEST_CASE(a_follower_refuses_to_propose) {
  group g{{1, 2, 3}};
  auto leader = g.elect();
  auto other = leader == 1 ? 2u : 1u;
  auto fx = g.node(other).propose(g.now_ms, add_node{9});
  BOOST_TEST(!fx.proposed_index.has_value());
  BOOST_TEST(fx.messages.empty());
}

BOOST_AUTO_TEST_CASE(entries_replicate_and_apply_in_order_everywhere) {
  group g{{1, 2, 3}};
  auto leader = g.elect();
  g.propose(leader, add_node{4});
  g.propose(leader, reassign{});
  g.propose(leader, remove_node{1});
  g.deliver_all();
  g.run(300);
  for (auto id : {1u, 2u, 3u}) {
    const auto& a = g.applied[id];
    BOOST_REQUIRE_EQUAL(a.size(), 4u);
    for (size_t i = 0; i < a.size(); ++i)
      BOOST_TEST(a[i].entry.index == i + 1);
    BOOST_TEST(a.back().state == g.node(leader).state());
    BOOST_TEST(g.node(id).state().epoch == 4u);
  }
}

BOOST_AUTO_TEST_CASE(a_leader_cut_off_from_the_majority_commits_nothing) {
  group g{{1, 2, 3}};
  auto old = g.elect();
  g.cut.insert(old);
  auto index = g.propose(old, add_node{7});
  g.run(3000);
  BOOST_TEST(g.node(old).commit_index() < index);
  BOOST_TEST(g.node(old).state().find(7) == nullptr);
  // The majority elects another leader, which commits without the old one.
  auto others = g.leaders();
  BOOST_REQUIRE_EQUAL(others.size(), 1u);
  auto leader = others.front();
  BOOST_TEST(leader != old);
  g.propose(leader, add_node{8});
  g.run(300);
  BOOST_TEST(g.node(leader).state().find(8) != nullptr);
  // Healed, the old leader steps down and drops its uncommitted entry.
  g.cut.clear();
  g.run(1000);
  BOOST_TEST(!g.node(old).is_leader());
  BOOST_TEST(g.node(old).state() == g.node(leader).state());
  BOOST_TEST(g.node(old).state().find(7) == nullptr);
}

BOOST_AUTO_TEST_CASE(one_follower_is_a_majority_of_three) {
  group g{{1, 2, 3}};
  auto leader = g.elect();
  auto follower = leader == 1 ? 2u : 1u;
  auto third = 6u - leader - follower;
  g.cut.insert(third);
  g.propose(leader, add_node{7});
  g.run(200);
  BOOST_TEST(g.node(leader).state().find(7) != nullptr);
  BOOST_TEST(g.node(third).state().find(7) == nullptr);
}

BOOST_AUTO_TEST_CASE(stale_terms_are_refused_and_newer_ones_adopted) {
  group g{{1, 2, 3}};
  auto leader = g.elect();
  auto term = g.node(leader).term();
  auto follower = leader == 1 ? 2u : 1u;
  // An append from an old term is refused with the current term.
  auto fx = g.node(follower).on_message(g.now_ms, 3,
                                        append_request{term - 1, 0, 0, {}, 0});
  BOOST_REQUIRE_EQUAL(fx.messages.size(), 1u);
  auto* rep = std::get_if<append_reply>(&fx.messages[0].msg);
  BOOST_REQUIRE(rep != nullptr);
  BOOST_TEST(!rep->success);
  BOOST_TEST(rep->term == term);
  BOOST_TEST(g.node(follower).leader() == std::optional<node_id>{leader});
  // A reply of a newer term makes the leader step down.
  g.node(leader).on_message(g.now_ms, follower, vote_reply{term + 5, false});
  BOOST_TEST(!g.node(leader).is_leader());
  BOOST_TEST(g.node(leader).term() == term + 5);
  BOOST_TEST(!g.node(leader).store().vote().has_value());
}

BOOST_AUTO_TEST_CASE(a_vote_goes_once_per_term_and_survives_a_restart) {
  group g{{1, 2, 3}};
  auto fx = g.node(1).on_message(0, 2, vote_request{5, 0, 0});
  auto* rep = std::get_if<vote_reply>(&fx.messages.at(0).msg);
  BOOST_REQUIRE(rep != nullptr);
  BOOST_TEST(rep->granted);
  g.start(1);
  fx = g.node(1).on_message(0, 3, vote_request{5, 0, 0});
  rep = std::get_if<vote_reply>(&fx.messages.at(0).msg);
  BOOST_REQUIRE(rep != nullptr);
  BOOST_TEST(!rep->granted);
  BOOST_TEST(g.node(1).store().vote() == std::optional<node_id>{2});
  // The same candidate asking again (a duplicate) gets the same answer.
  fx = g.node(1).on_message(0, 2, vote_request{5, 0, 0});
  BOOST_TEST(std::get<vote_reply>(fx.messages.at(0).msg).granted);
}

BOOST_AUTO_TEST_CASE(no_vote_for_a_candidate_with_an_older_log) {
  group g{{1, 2, 3}};
  auto leader = g.elect();
  g.propose(leader, add_node{4});
  g.run(200);
  auto follower = leader == 1 ? 2u : 1u;
  auto term = g.node(follower).term();
  auto last = g.node(follower).store().last_index();
  auto last_term = g.node(follower).store().term_at(last);
  // Shorter log of the same last term: refused.
  auto fx = g.node(follower).on_message(
    g.now_ms, 3, vote_request{term + 1, last - 1, last_term});
  BOOST_TEST(!std::get<vote_reply>(fx.messages.at(0).msg).granted);
  // Older last term, longer log: refused.
  fx = g.node(follower).on_message(
    g.now_ms, 3, vote_request{term + 2, last + 5, last_term - 1});
  BOOST_TEST(!std::get<vote_reply>(fx.messages.at(0).msg).granted);
  // As up to date: granted.
  fx = g.node(follower).on_message(g.now_ms, 3,
                                   vote_request{term + 3, last, last_term});
  BOOST_TEST(std::get<vote_reply>(fx.messages.at(0).msg).granted);
}

namespace {

/// The seam of the planted "figure-8" bug: commits by counting replicas
/// whatever the entry's term.
class counts_old_terms : public raft_node {
public:
  using raft_node::raft_node;

protected:
  bool may_commit(uint64_t) const override { return true; }
};

/// Leader 1 of term 3 over followers 2 and 3; entry 1 of term 2 sits in
/// the leader's log only. Returns the commit index after follower 2
/// reports holding entry 1 but not yet the leader's noop of term 3.
template<class Node>
uint64_t commit_after_old_term_replica() {
  memory_log_store store{cluster_map::create(16, {1, 2, 3})};
  store.save_term_vote(2, 1);
  log_entry old{2, 1, add_node{4}};
  store.replace_after(0, std::span{&old, 1});
  raft_config cfg;
  cfg.self = 1;
  cfg.voters = {1, 2, 3};
  cfg.seed = 1;
  Node n{cfg, store, 0};
  n.on_tick(2000);
  BOOST_REQUIRE(n.current_role() == raft_node::role::candidate);
  BOOST_REQUIRE_EQUAL(n.term(), 3u);
  n.on_message(2000, 2, vote_reply{3, true});
  BOOST_REQUIRE(n.is_leader());
  BOOST_REQUIRE_EQUAL(n.store().last_index(), 2u);
  n.on_message(2001, 2, append_reply{3, true, 1});
  return n.commit_index();
}

} // namespace

BOOST_AUTO_TEST_CASE(a_leader_commits_only_entries_of_its_own_term) {
  BOOST_TEST(commit_after_old_term_replica<raft_node>() == 0u);
  // The seam the simulator plants, to show this test can fail.
  BOOST_TEST(commit_after_old_term_replica<counts_old_terms>() == 1u);
  // Once the noop of term 3 is on a majority, both commit.
  memory_log_store store{cluster_map::create(16, {1, 2, 3})};
  raft_config cfg;
  cfg.self = 1;
  cfg.voters = {1, 2, 3};
  raft_node n{cfg, store, 0};
  n.on_tick(2000);
  n.on_message(2000, 2, vote_reply{1, true});
  BOOST_REQUIRE(n.is_leader());
  BOOST_TEST(n.commit_index() == 0u);
  auto fx = n.on_message(2001, 3, append_reply{1, true, 1});
  BOOST_TEST(n.commit_index() == 1u);
  BOOST_TEST(fx.applied.size() == 1u);
}

BOOST_AUTO_TEST_CASE(learners_get_the_log_but_never_vote_or_count) {
  group g{{1, 2, 3}, {4}};
  auto leader = g.elect();
  BOOST_TEST(leader != 4u);
  BOOST_TEST(!g.node(4).is_voter());
  g.propose(leader, add_node{4});
  g.run(200);
  BOOST_TEST(g.node(4).state() == g.node(leader).state());
  BOOST_TEST(g.applied[4].size() == 2u);
  // A learner answers no vote request.
  auto fx = g.node(4).on_message(g.now_ms, 1, vote_request{99, 100, 99});
  BOOST_TEST(fx.messages.empty());
  // Leader plus learner is no majority of three voters.
  for (auto id : {1u, 2u, 3u})
    if (id != leader)
      g.cut.insert(id);
  auto index = g.propose(leader, add_node{5});
  g.run(200);
  BOOST_TEST(g.node(leader).commit_index() < index);
  // A learner never stands, however long it hears nothing.
  group lonely{{1, 2, 3}, {4}};
  lonely.cut = {1, 2, 3};
  lonely.run(10000);
  BOOST_TEST((lonely.node(4).current_role() == raft_node::role::follower));
  BOOST_TEST(lonely.node(4).term() == 0u);
}

BOOST_AUTO_TEST_CASE(a_learner_added_later_gets_the_log) {
  group g{{1, 2, 3}};
  auto leader = g.elect();
  // Node 4 knows the voters; they do not know it yet.
  g.stores[4] =
    std::make_unique<memory_log_store>(cluster_map::create(16, {1, 2, 3}));
  g.start(4);
  g.run(500);
  BOOST_TEST(g.node(4).commit_index() == 0u);
  BOOST_TEST(!g.node(4).is_voter());
  for (auto id : {1u, 2u, 3u, 4u})
    g.node(id).add_learner(4);
  g.node(leader).add_learner(4);
  g.node(leader).add_learner(1);
  BOOST_TEST((g.node(leader).learners() == std::vector<node_id>{4}));
  BOOST_TEST(g.node(4).learners().empty());
  g.propose(leader, add_node{4});
  g.run(300);
  BOOST_TEST(g.node(4).state() == g.node(leader).state());
  BOOST_TEST(g.node(4).state().find(4) != nullptr);
  BOOST_TEST(g.node(4).commit_index() == g.node(leader).commit_index());
  BOOST_TEST((g.node(4).current_role() == raft_node::role::follower));
}

BOOST_AUTO_TEST_CASE(a_lagging_follower_catches_up_by_snapshot) {
  group g{{1, 2, 3}, {}, 4};
  auto leader = g.elect();
  auto lagging = leader == 1 ? 2u : 1u;
  g.cut.insert(lagging);
  for (node_id n = 10; n < 20; ++n) {
    g.propose(leader, add_node{n});
    g.run(50);
  }
  BOOST_TEST(g.node(leader).store().last_snapshot().last_index > 4u);
  g.cut.clear();
  g.run(500);
  BOOST_TEST(g.installed[lagging] >= 1);
  BOOST_TEST(g.node(lagging).state() == g.node(leader).state());
  BOOST_TEST(g.node(lagging).applied_index() == g.node(leader).applied_index());
  // A restart restores the map from the snapshot and the log after it.
  auto before = g.node(lagging).state();
  g.start(lagging);
  BOOST_TEST(g.node(lagging).applied_index() <= g.node(leader).commit_index());
  g.run(500);
  BOOST_TEST(g.node(lagging).state() == before);
}

BOOST_AUTO_TEST_CASE(a_single_voter_commits_alone) {
  group g{{1}};
  auto leader = g.elect();
  BOOST_TEST(leader == 1u);
  g.propose(1, add_node{2});
  BOOST_TEST(g.node(1).state().find(2) != nullptr);
}

BOOST_AUTO_TEST_CASE(duplicated_replies_send_nothing_more) {
  // A lagging follower is fed one entry per reply; were every duplicate of
  // a reply answered with another batch, duplicates would multiply the
  // messages in flight without bound.
  memory_log_store store{cluster_map::create(16, {1, 2, 3})};
  store.save_term_vote(1, std::nullopt);
  std::vector<log_entry> old{{1, 1, add_node{4}}, {1, 2, add_node{5}}};
  store.replace_after(0, old);
  raft_config cfg;
  cfg.self = 1;
  cfg.voters = {1, 2, 3};
  cfg.max_batch = 1;
  raft_node n{cfg, store, 0};
  n.on_tick(2000);
  n.on_message(2000, 2, vote_reply{2, true});
  BOOST_REQUIRE(n.is_leader());
  BOOST_REQUIRE_EQUAL(n.store().last_index(), 3u);
  // Follower 2 is missing everything: the leader backs off once.
  auto refused = n.on_message(2001, 2, append_reply{2, false, 0});
  BOOST_TEST(refused.messages.size() == 1u);
  auto refused_again = n.on_message(2002, 2, append_reply{2, false, 0});
  BOOST_TEST(refused_again.messages.empty());
  // Each step forward sends the next entry; its duplicate sends nothing.
  auto first = n.on_message(2003, 2, append_reply{2, true, 1});
  BOOST_TEST(first.messages.size() == 1u);
  auto again = n.on_message(2004, 2, append_reply{2, true, 1});
  BOOST_TEST(again.messages.empty());
}
