#include "sim/cluster_sim.hpp"

#include <algorithm>
#include <array>
#include <iostream>
#include <map>
#include <memory>
#include <queue>
#include <set>

#include "cluster/raft_node.hpp"
#include "sim/event_log.hpp"
#include "sim/network_model.hpp"
#include "sim/prng.hpp"
#include "sim/raft_history.hpp"

namespace dally::sim {

using cluster::node_id;

namespace {

constexpr std::array<cluster_bug, 4> all_bugs{
  cluster_bug::none, cluster_bug::vote_without_log_check,
  cluster_bug::commit_without_majority, cluster_bug::commit_old_term};

constexpr std::array<const char*, 4> bug_names{"none", "vote-without-log-check",
                                               "commit-without-majority",
                                               "commit-old-term"};

/// Planted: grants a vote to any candidate of the current term.
class votes_blindly : public cluster::raft_node {
public:
  using raft_node::raft_node;

protected:
  bool candidate_log_ok(uint64_t, uint64_t) const override { return true; }
};

/// Planted: the leader alone is a majority.
class commits_alone : public cluster::raft_node {
public:
  using raft_node::raft_node;

protected:
  uint64_t majority_match() const override { return store().last_index(); }
};

/// Planted: entries of earlier terms commit by counting replicas.
class commits_old_terms : public cluster::raft_node {
public:
  using raft_node::raft_node;

protected:
  bool may_commit(uint64_t) const override { return true; }
};

std::unique_ptr<cluster::raft_node> make_node(cluster_bug bug,
                                              cluster::raft_config cfg,
                                              cluster::raft_log_store& store,
                                              int64_t now_ms) {
  switch (bug) {
    case cluster_bug::vote_without_log_check:
      return std::make_unique<votes_blindly>(std::move(cfg), store, now_ms);
    case cluster_bug::commit_without_majority:
      return std::make_unique<commits_alone>(std::move(cfg), store, now_ms);
    case cluster_bug::commit_old_term:
      return std::make_unique<commits_old_terms>(std::move(cfg), store, now_ms);
    case cluster_bug::none:
      break;
  }
  return std::make_unique<cluster::raft_node>(std::move(cfg), store, now_ms);
}

/// A memory_log_store that counts its writes, so that the log checks run
/// only for logs that changed.
class versioned_store : public cluster::memory_log_store {
public:
  using memory_log_store::memory_log_store;

  uint64_t version() const noexcept { return version_; }

  void replace_after(uint64_t index,
                     std::span<const cluster::log_entry> entries) override {
    ++version_;
    memory_log_store::replace_after(index, entries);
  }

  void save_snapshot(const cluster::snapshot& snap) override {
    ++version_;
    memory_log_store::save_snapshot(snap);
  }

private:
  uint64_t version_ = 0;
};

struct in_flight {
  int64_t at_ms;
  uint64_t seq;
  node_id from;
  node_id to;
  cluster::raft_message msg;

  bool operator>(const in_flight& other) const {
    return std::tie(at_ms, seq) > std::tie(other.at_ms, other.seq);
  }
};

struct sim_node {
  node_id id = 0;
  std::unique_ptr<versioned_store> store;
  std::unique_ptr<cluster::raft_node> raft;
  int64_t paused_until_ms = 0;
  /// The node's monotonic clock: offset + true time * (1 + rate).
  int64_t offset_ms = 0;
  int64_t rate_ppm = 0;
  uint64_t checked_version = ~uint64_t{0};

  int64_t local_ms(int64_t true_ms) const {
    return offset_ms + true_ms + true_ms * rate_ppm / 1'000'000;
  }
};

} // namespace

std::span<const cluster_bug> cluster_bugs() {
  return all_bugs;
}

std::string cluster_bug_name(cluster_bug bug) {
  return bug_names[static_cast<size_t>(bug)];
}

std::optional<cluster_bug> parse_cluster_bug(const std::string& name) {
  for (auto bug : all_bugs)
    if (cluster_bug_name(bug) == name)
      return bug;
  return std::nullopt;
}

namespace {

class cluster_simulation {
public:
  explicit cluster_simulation(const cluster_sim_options& opts);

  cluster_sim_result run();

private:
  void draw_params();
  cluster::raft_config config_for(node_id id);
  void start_node(sim_node& n);
  void crash(sim_node& n);
  void absorb(sim_node& n, cluster::raft_effects fx);
  void send(node_id from, cluster::envelope env);
  void deliver(in_flight m);
  void tick_all();
  void chaos();
  void partition_some();
  void propose();
  bool converged() const;
  void heal();
  void step_to(int64_t next_tick_ms);

  void check(sim_node& n);
  void check_leader(sim_node& n);
  void check_applied(sim_node& n, const cluster::applied_entry& a);
  void check_installed(sim_node& n, const cluster::snapshot& snap);
  void check_logs(sim_node& n);
  void check_pair(const sim_node& a, const sim_node& b);
  void check_completeness(sim_node& n);
  [[noreturn]] void fail(std::string invariant, std::string detail);
  void log(const std::string& text);

  cluster_sim_options opts_;
  prng gen_;
  prng chaos_;
  cluster_sim_result res_;
  cluster_sim_params& p_;
  event_log events_{40};
  network_model net_;
  cluster::cluster_map initial_;
  std::vector<node_id> voters_;
  std::vector<node_id> learners_;
  std::map<node_id, sim_node> nodes_;
  std::priority_queue<in_flight, std::vector<in_flight>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  int64_t now_ms_ = 0;
  raft_history history_;
};

cluster_simulation::cluster_simulation(const cluster_sim_options& opts)
  : opts_(opts), gen_(opts.seed), chaos_(gen_.fork()), p_(res_.params),
    net_(gen_.fork()),
    history_(0, [this](const std::string& text) { log(text); }) {
  draw_params();
  history_ = raft_history(p_.shard_count,
                          [this](const std::string& text) { log(text); });
  link_faults faults;
  faults.min_delay_ms = 1;
  faults.max_delay_ms = p_.max_delay_ms;
  faults.drop_per_million = p_.drop_per_million;
  faults.duplicate_per_million = p_.duplicate_per_million;
  net_ = network_model(gen_.fork(), faults);
  for (node_id id = 1; id <= p_.voters; ++id)
    voters_.push_back(id);
  if (p_.learner)
    learners_.push_back(p_.voters + 1);
  initial_ = cluster::cluster_map::create(p_.shard_count, voters_);
  auto all = voters_;
  all.insert(all.end(), learners_.begin(), learners_.end());
  for (auto id : all) {
    auto& n = nodes_[id];
    n.id = id;
    n.store = std::make_unique<versioned_store>(initial_);
    n.offset_ms = gen_.between(0, 100'000);
    n.rate_ppm = gen_.between(-50'000, 50'000);
    start_node(n);
  }
}

void cluster_simulation::draw_params() {
  p_.voters = static_cast<uint32_t>(gen_.between(3, 5));
  p_.learner = gen_.chance(1, 2);
  p_.shard_count = std::array<uint32_t, 3>{16, 32, 64}[gen_.pick(3)];
  p_.snapshot_every = static_cast<uint64_t>(gen_.between(4, 64));
  p_.drop_per_million = static_cast<uint32_t>(gen_.between(0, 200'000));
  p_.duplicate_per_million = static_cast<uint32_t>(gen_.between(0, 100'000));
  p_.max_delay_ms = gen_.between(1, 200);
  p_.crash_ppm = static_cast<uint32_t>(gen_.between(0, 200'000));
  p_.partition_ppm = static_cast<uint32_t>(gen_.between(0, 300'000));
  p_.heal_ppm = static_cast<uint32_t>(gen_.between(20'000, 200'000));
  p_.pause_ppm = static_cast<uint32_t>(gen_.between(0, 30'000));
  p_.propose_ppm = static_cast<uint32_t>(gen_.between(100'000, 800'000));
  p_.fault_phase_ms = gen_.between(500, 2'000) * 10;
  p_.max_batch = std::array<uint64_t, 4>{1, 2, 4, 16}[gen_.pick(4)];
}

cluster::raft_config cluster_simulation::config_for(node_id id) {
  cluster::raft_config cfg;
  cfg.self = id;
  cfg.voters = voters_;
  cfg.learners = learners_;
  cfg.snapshot_every = p_.snapshot_every;
  cfg.max_batch = p_.max_batch;
  cfg.seed = gen_.next();
  return cfg;
}

void cluster_simulation::start_node(sim_node& n) {
  n.raft =
    make_node(opts_.plant, config_for(n.id), *n.store, n.local_ms(now_ms_));
  history_.start(n.id, n.raft->applied_index(), n.raft->state().epoch);
  n.checked_version = ~uint64_t{0};
  log("start " + std::to_string(n.id) +
      " term=" + std::to_string(n.raft->term()) +
      " applied=" + std::to_string(n.raft->applied_index()));
  check(n);
}

void cluster_simulation::crash(sim_node& n) {
  log("crash " + std::to_string(n.id) +
      (n.raft->is_leader() ? " (leader)" : ""));
  n.raft.reset();
  ++res_.crashes;
}

void cluster_simulation::log(const std::string& text) {
  events_.add(now_ms_, text);
  if (opts_.verbose)
    std::cout << now_ms_ << ' ' << text << '\n';
}

void cluster_simulation::fail(std::string invariant, std::string detail) {
  throw raft_failure{{std::move(invariant), std::move(detail)}};
}

void cluster_simulation::absorb(sim_node& n, cluster::raft_effects fx) {
  if (fx.installed)
    check_installed(n, *fx.installed);
  for (const auto& a : fx.applied)
    check_applied(n, a);
  check(n);
  for (auto& env : fx.messages)
    send(n.id, std::move(env));
}

void cluster_simulation::send(node_id from, cluster::envelope env) {
  for (auto at : net_.send({from, env.to}, now_ms_)) {
    queue_.push({at, seq_++, from, env.to, env.msg});
    ++res_.messages;
  }
}

void cluster_simulation::deliver(in_flight m) {
  auto& n = nodes_.at(m.to);
  if (!n.raft)
    return;
  if (n.paused_until_ms > now_ms_) {
    // A paused process reads its socket when it wakes.
    m.at_ms = n.paused_until_ms;
    m.seq = seq_++;
    queue_.push(std::move(m));
    return;
  }
  ++res_.steps;
  absorb(n, n.raft->on_message(n.local_ms(now_ms_), m.from, m.msg));
}

void cluster_simulation::tick_all() {
  for (auto& [id, n] : nodes_) {
    if (!n.raft || n.paused_until_ms > now_ms_)
      continue;
    ++res_.steps;
    absorb(n, n.raft->on_tick(n.local_ms(now_ms_)));
  }
}

void cluster_simulation::partition_some() {
  auto all = voters_;
  all.insert(all.end(), learners_.begin(), learners_.end());
  auto a = all[chaos_.pick(all.size())];
  switch (chaos_.below(3)) {
    case 0: // isolate a node
      for (auto b : all)
        if (b != a) {
          net_.partition({a, b});
          net_.partition({b, a});
        }
      log("isolate " + std::to_string(a));
      break;
    case 1: { // one direction of one link
      auto b = all[chaos_.pick(all.size())];
      if (b != a)
        net_.partition({a, b});
      log("cut " + std::to_string(a) + "->" + std::to_string(b));
      break;
    }
    default: { // split in two
      std::set<node_id> side;
      for (auto id : all)
        if (chaos_.chance(1, 2))
          side.insert(id);
      for (auto x : all)
        for (auto y : all)
          if (side.contains(x) != side.contains(y))
            net_.partition({x, y});
      log("split");
      break;
    }
  }
}

void cluster_simulation::chaos() {
  auto pick_node = [this]() -> sim_node& {
    auto i = nodes_.begin();
    std::advance(i, static_cast<ptrdiff_t>(chaos_.pick(nodes_.size())));
    return i->second;
  };
  if (chaos_.chance(p_.crash_ppm, 1'000'000)) {
    auto& n = pick_node();
    sim_node* target = &n;
    if (chaos_.chance(1, 2))
      for (auto& [id, m] : nodes_)
        if (m.raft && m.raft->is_leader())
          target = &m;
    if (target->raft)
      crash(*target);
  }
  if (chaos_.chance(1, 5)) {
    auto& n = pick_node();
    if (!n.raft)
      start_node(n);
  }
  if (chaos_.chance(p_.pause_ppm, 1'000'000)) {
    auto& n = pick_node();
    n.paused_until_ms = now_ms_ + chaos_.between(200, 3000);
    log("pause " + std::to_string(n.id));
  }
  if (chaos_.chance(p_.partition_ppm, 1'000'000))
    partition_some();
  if (chaos_.chance(p_.heal_ppm, 1'000'000)) {
    net_.heal_all();
    log("heal");
  }
}

void cluster_simulation::propose() {
  std::vector<sim_node*> leaders;
  for (auto& [id, n] : nodes_)
    if (n.raft && n.raft->is_leader() && n.paused_until_ms <= now_ms_)
      leaders.push_back(&n);
  if (leaders.empty())
    return;
  auto& n = *leaders[chaos_.pick(leaders.size())];
  // A client waits while its leader has a backlog, as the coordinator's
  // shell will: otherwise small batches on a slow network never drain.
  if (n.raft->store().last_index() - n.raft->commit_index() >= 8)
    return;
  cluster::command cmd;
  auto node = static_cast<node_id>(chaos_.between(1, 8));
  switch (chaos_.below(3)) {
    case 0:
      cmd = cluster::add_node{node};
      break;
    case 1:
      cmd = cluster::remove_node{node};
      break;
    default:
      cmd = cluster::reassign{};
      break;
  }
  log("propose " + cluster::to_string(cmd) + " at " + std::to_string(n.id));
  ++res_.steps;
  absorb(n, n.raft->propose(n.local_ms(now_ms_), cmd));
}

bool cluster_simulation::converged() const {
  const cluster::raft_node* leader = nullptr;
  for (const auto& [id, n] : nodes_)
    if (n.raft && n.raft->is_leader())
      leader = n.raft.get();
  if (!leader || leader->commit_index() != leader->store().last_index())
    return false;
  for (const auto& [id, n] : nodes_)
    if (!n.raft || n.raft->applied_index() != leader->commit_index() ||
        n.raft->state() != leader->state() || n.raft->term() != leader->term())
      return false;
  return true;
}

void cluster_simulation::check(sim_node& n) {
  if (!n.raft)
    return;
  check_leader(n);
  check_logs(n);
  if (n.raft->is_leader())
    check_completeness(n);
}

void cluster_simulation::check_leader(sim_node& n) {
  if (n.raft->is_leader() && history_.leader(n.id, n.raft->term()))
    ++res_.elections;
}

void cluster_simulation::check_applied(sim_node& n,
                                       const cluster::applied_entry& a) {
  if (history_.applied(n.id, n.raft->term(), a))
    ++res_.committed;
}

void cluster_simulation::check_installed(sim_node& n,
                                         const cluster::snapshot& snap) {
  history_.installed(n.id, snap);
}

void cluster_simulation::check_logs(sim_node& n) {
  if (n.store->version() == n.checked_version)
    return;
  n.checked_version = n.store->version();
  for (const auto& [id, other] : nodes_)
    if (id != n.id)
      check_pair(n, other);
}

void cluster_simulation::check_pair(const sim_node& a, const sim_node& b) {
  const auto& x = *a.store;
  const auto& y = *b.store;
  auto lo =
    std::max(x.last_snapshot().last_index, y.last_snapshot().last_index);
  auto hi = std::min(x.last_index(), y.last_index());
  if (lo > hi)
    return;
  auto same = hi;
  while (same > lo && x.term_at(same) != y.term_at(same))
    --same;
  if (x.term_at(same) != y.term_at(same))
    return;
  for (auto j = same; j > lo; --j)
    if (x.entry(j) != y.entry(j))
      fail("log_matching", "nodes " + std::to_string(a.id) + " and " +
                             std::to_string(b.id) + " agree on the term at " +
                             std::to_string(same) + " but differ at " +
                             std::to_string(j));
}

void cluster_simulation::check_completeness(sim_node& n) {
  const auto& store = n.raft->store();
  auto term = n.raft->term();
  const auto& committed = history_.committed();
  auto from = committed.upper_bound(store.last_snapshot().last_index);
  for (auto i = from; i != committed.end(); ++i) {
    if (i->second.term_seen >= term)
      continue;
    if (i->first > store.last_index() ||
        store.entry(i->first) != i->second.entry)
      fail("leader_completeness",
           "leader " + std::to_string(n.id) + " of term " +
             std::to_string(term) + " lacks entry " + std::to_string(i->first) +
             " committed by term " + std::to_string(i->second.term_seen));
  }
}

void cluster_simulation::heal() {
  net_.heal_all();
  link_faults light;
  light.min_delay_ms = 1;
  light.max_delay_ms = p_.max_delay_ms;
  light.drop_per_million = std::min<uint32_t>(p_.drop_per_million, 50'000);
  light.duplicate_per_million = p_.duplicate_per_million;
  for (const auto& [a, na] : nodes_)
    for (const auto& [b, nb] : nodes_)
      if (a != b)
        net_.set_faults({a, b}, light);
  log("heal everything");
  for (auto& [id, n] : nodes_) {
    n.paused_until_ms = std::min(n.paused_until_ms, now_ms_);
    if (!n.raft)
      start_node(n);
  }
}

void cluster_simulation::step_to(int64_t next_tick_ms) {
  while (!queue_.empty() && queue_.top().at_ms <= next_tick_ms) {
    auto m = queue_.top();
    queue_.pop();
    now_ms_ = std::max(now_ms_, m.at_ms);
    deliver(std::move(m));
  }
  now_ms_ = next_tick_ms;
}

cluster_sim_result cluster_simulation::run() {
  constexpr int64_t tick_ms = 10;
  constexpr int64_t converge_within_ms = 20'000;
  auto faults_end = p_.fault_phase_ms;
  try {
    while (true) {
      step_to(now_ms_ + tick_ms);
      if (now_ms_ < faults_end) {
        if (now_ms_ % 100 == 0)
          chaos();
        if (now_ms_ % 50 == 0 && chaos_.chance(p_.propose_ppm, 1'000'000))
          propose();
      } else if (now_ms_ == faults_end) {
        heal();
      }
      tick_all();
      if (now_ms_ > faults_end && converged()) {
        res_.converged_after_ms = now_ms_ - faults_end;
        log("converged");
        break;
      }
      if (now_ms_ - faults_end > converge_within_ms)
        fail("convergence", "no leader with one map on every node " +
                              std::to_string(converge_within_ms) +
                              " ms after healing");
    }
  } catch (const raft_failure& f) {
    res_.failure = f.v;
    log("VIOLATION " + f.v.invariant + ": " + f.v.detail);
  }
  res_.hash = events_.hash_hex();
  res_.last_events.assign(events_.last().begin(), events_.last().end());
  return res_;
}

} // namespace

cluster_sim_result run_cluster_simulation(const cluster_sim_options& opts) {
  return cluster_simulation{opts}.run();
}

} // namespace dally::sim
