#include "cluster/raft_node.hpp"

#include <algorithm>
#include <functional>

namespace dally::cluster {

namespace {

bool contains(const std::vector<node_id>& xs, node_id x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

} // namespace

raft_node::raft_node(raft_config cfg, raft_log_store& store, int64_t now_ms)
  : cfg_(std::move(cfg)), store_(store),
    voter_(contains(cfg_.voters, cfg_.self)),
    commit_(store.last_snapshot().last_index), applied_(commit_),
    state_(store.last_snapshot().state), rng_(cfg_.seed) {
  reset_election_timer(now_ms);
}

uint64_t raft_node::next_random() {
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void raft_node::reset_election_timer(int64_t now_ms) {
  auto span = cfg_.election_max_ms - cfg_.election_min_ms;
  auto extra =
    span <= 0
      ? 0
      : static_cast<int64_t>(next_random() % static_cast<uint64_t>(span + 1));
  election_due_ms_ = now_ms + cfg_.election_min_ms + extra;
}

void raft_node::add_learner(node_id id) {
  if (id == cfg_.self || contains(cfg_.voters, id) ||
      contains(cfg_.learners, id))
    return;
  cfg_.learners.push_back(id);
  if (role_ == role::leader) {
    next_[id] = store_.last_index() + 1;
    match_[id] = 0;
  }
}

std::vector<node_id> raft_node::peers() const {
  std::vector<node_id> out;
  for (const auto* group : {&cfg_.voters, &cfg_.learners})
    for (auto id : *group)
      if (id != cfg_.self && !contains(out, id))
        out.push_back(id);
  return out;
}

bool raft_node::log_matches(uint64_t index, uint64_t term) const {
  return index >= store_.last_snapshot().last_index &&
         index <= store_.last_index() && store_.term_at(index) == term;
}

raft_effects raft_node::on_tick(int64_t now_ms) {
  raft_effects fx;
  if (role_ == role::leader) {
    if (now_ms >= heartbeat_due_ms_)
      broadcast(now_ms, fx);
  } else if (voter_ && now_ms >= election_due_ms_) {
    start_election(now_ms, fx);
  }
  return fx;
}

raft_effects raft_node::on_message(int64_t now_ms, node_id from,
                                   const raft_message& msg) {
  raft_effects fx;
  std::visit(
    [&](const auto& m) {
      using type = std::decay_t<decltype(m)>;
      if (m.term > store_.term())
        observe_term(m.term);
      if constexpr (std::is_same_v<type, vote_request>)
        on_vote_request(now_ms, from, m, fx);
      else if constexpr (std::is_same_v<type, vote_reply>)
        on_vote_reply(now_ms, from, m, fx);
      else if constexpr (std::is_same_v<type, append_request>)
        on_append(now_ms, from, m, fx);
      else if constexpr (std::is_same_v<type, append_reply>)
        on_append_reply(from, m, fx);
      else if constexpr (std::is_same_v<type, snapshot_request>)
        on_snapshot(now_ms, from, m, fx);
      else
        on_snapshot_reply(from, m, fx);
    },
    msg);
  return fx;
}

raft_effects raft_node::propose(int64_t now_ms, command cmd) {
  raft_effects fx;
  if (role_ != role::leader)
    return fx;
  log_entry e{store_.term(), store_.last_index() + 1, std::move(cmd)};
  store_.replace_after(store_.last_index(), std::span{&e, 1});
  fx.proposed_index = e.index;
  advance_commit(fx);
  broadcast(now_ms, fx);
  return fx;
}

void raft_node::observe_term(uint64_t term) {
  store_.save_term_vote(term, std::nullopt);
  role_ = role::follower;
  leader_.reset();
  votes_.clear();
}

void raft_node::become_follower(int64_t now_ms, node_id leader) {
  role_ = role::follower;
  leader_ = leader;
  reset_election_timer(now_ms);
}

void raft_node::start_election(int64_t now_ms, raft_effects& fx) {
  store_.save_term_vote(store_.term() + 1, cfg_.self);
  role_ = role::candidate;
  leader_.reset();
  votes_ = {cfg_.self};
  reset_election_timer(now_ms);
  auto last = store_.last_index();
  vote_request req{store_.term(), last, store_.term_at(last)};
  for (auto id : cfg_.voters)
    if (id != cfg_.self)
      fx.messages.push_back({id, req});
  if (votes_.size() * 2 > cfg_.voters.size())
    become_leader(now_ms, fx);
}

void raft_node::become_leader(int64_t now_ms, raft_effects& fx) {
  role_ = role::leader;
  leader_ = cfg_.self;
  next_.clear();
  match_.clear();
  for (auto id : peers()) {
    next_[id] = store_.last_index() + 1;
    match_[id] = 0;
  }
  log_entry e{store_.term(), store_.last_index() + 1, noop{}};
  store_.replace_after(store_.last_index(), std::span{&e, 1});
  advance_commit(fx);
  broadcast(now_ms, fx);
}

bool raft_node::candidate_log_ok(uint64_t last_term,
                                 uint64_t last_index) const {
  auto mine = store_.last_index();
  auto my_term = store_.term_at(mine);
  return last_term > my_term || (last_term == my_term && last_index >= mine);
}

void raft_node::on_vote_request(int64_t now_ms, node_id from,
                                const vote_request& req, raft_effects& fx) {
  if (!voter_)
    return;
  auto vote = store_.vote();
  bool granted = req.term == store_.term() && (!vote || *vote == from) &&
                 candidate_log_ok(req.last_term, req.last_index);
  if (granted) {
    if (!vote)
      store_.save_term_vote(store_.term(), from);
    reset_election_timer(now_ms);
  }
  fx.messages.push_back({from, vote_reply{store_.term(), granted}});
}

void raft_node::on_vote_reply(int64_t now_ms, node_id from,
                              const vote_reply& rep, raft_effects& fx) {
  if (role_ != role::candidate || rep.term != store_.term() || !rep.granted ||
      !contains(cfg_.voters, from))
    return;
  votes_.insert(from);
  if (votes_.size() * 2 > cfg_.voters.size())
    become_leader(now_ms, fx);
}

void raft_node::on_append(int64_t now_ms, node_id from,
                          const append_request& req, raft_effects& fx) {
  if (req.term < store_.term()) {
    fx.messages.push_back(
      {from, append_reply{store_.term(), false, store_.last_index()}});
    return;
  }
  become_follower(now_ms, from);
  auto covered = req.prev_index + req.entries.size();
  auto snap_index = store_.last_snapshot().last_index;
  // Entries up to the snapshot are committed here already and match.
  auto first =
    std::find_if(req.entries.begin(), req.entries.end(),
                 [&](const log_entry& e) { return e.index > snap_index; });
  auto prev_index = req.prev_index;
  auto prev_term = req.prev_term;
  if (prev_index < snap_index) {
    prev_index = snap_index;
    prev_term = store_.last_snapshot().last_term;
    if (first == req.entries.end()) {
      fx.messages.push_back({from, append_reply{store_.term(), true, covered}});
      return;
    }
  }
  if (!log_matches(prev_index, prev_term)) {
    auto hint = std::min(store_.last_index(), prev_index - 1);
    fx.messages.push_back({from, append_reply{store_.term(), false, hint}});
    return;
  }
  for (auto i = first; i != req.entries.end(); ++i) {
    if (i->index <= store_.last_index() && store_.term_at(i->index) == i->term)
      continue;
    store_.replace_after(
      i->index - 1, std::span{&*i, static_cast<size_t>(req.entries.end() - i)});
    break;
  }
  if (req.commit > commit_)
    commit_ = std::max(commit_, std::min(req.commit, covered));
  apply_committed(fx);
  fx.messages.push_back({from, append_reply{store_.term(), true, covered}});
}

void raft_node::on_append_reply(node_id from, const append_reply& rep,
                                raft_effects& fx) {
  if (role_ != role::leader || rep.term != store_.term() ||
      !next_.contains(from))
    return;
  // Only a reply that moves the peer on sends more at once: duplicated or
  // stale replies must not multiply the messages in flight.
  auto& next = next_[from];
  auto& match = match_[from];
  if (rep.success) {
    if (rep.last_index <= match)
      return;
    match = rep.last_index;
    next = std::max(next, match + 1);
    advance_commit(fx);
    if (next <= store_.last_index())
      replicate_to(from, fx);
    return;
  }
  auto back =
    std::max({match + 1, std::min(next - 1, rep.last_index + 1), uint64_t{1}});
  if (back == next)
    return;
  next = back;
  replicate_to(from, fx);
}

void raft_node::on_snapshot(int64_t now_ms, node_id from,
                            const snapshot_request& req, raft_effects& fx) {
  if (req.term < store_.term()) {
    fx.messages.push_back({from, snapshot_reply{store_.term(), 0}});
    return;
  }
  become_follower(now_ms, from);
  if (req.snap.last_index > commit_) {
    store_.save_snapshot(req.snap);
    commit_ = applied_ = req.snap.last_index;
    state_ = req.snap.state;
    fx.installed = req.snap;
  }
  fx.messages.push_back(
    {from, snapshot_reply{store_.term(), req.snap.last_index}});
}

void raft_node::on_snapshot_reply(node_id from, const snapshot_reply& rep,
                                  raft_effects& fx) {
  if (role_ != role::leader || rep.term != store_.term() ||
      !next_.contains(from))
    return;
  if (rep.last_index <= match_[from])
    return;
  match_[from] = rep.last_index;
  next_[from] = std::max(next_[from], match_[from] + 1);
  advance_commit(fx);
  if (next_[from] <= store_.last_index())
    replicate_to(from, fx);
}

void raft_node::replicate_to(node_id peer, raft_effects& fx) {
  auto next = next_[peer];
  const auto& snap = store_.last_snapshot();
  if (next <= snap.last_index) {
    fx.messages.push_back({peer, snapshot_request{store_.term(), snap}});
    return;
  }
  append_request req;
  req.term = store_.term();
  req.prev_index = next - 1;
  req.prev_term = store_.term_at(req.prev_index);
  req.commit = commit_;
  auto last = std::min(store_.last_index(), next - 1 + cfg_.max_batch);
  for (auto i = next; i <= last; ++i)
    req.entries.push_back(store_.entry(i));
  fx.messages.push_back({peer, std::move(req)});
}

void raft_node::broadcast(int64_t now_ms, raft_effects& fx) {
  heartbeat_due_ms_ = now_ms + cfg_.heartbeat_ms;
  for (auto id : peers())
    replicate_to(id, fx);
}

uint64_t raft_node::majority_match() const {
  std::vector<uint64_t> matches;
  for (auto id : cfg_.voters)
    matches.push_back(id == cfg_.self ? store_.last_index() : match_.at(id));
  std::sort(matches.begin(), matches.end(), std::greater<>{});
  return matches.empty() ? 0 : matches[matches.size() / 2];
}

bool raft_node::may_commit(uint64_t index) const {
  return store_.term_at(index) == store_.term();
}

void raft_node::advance_commit(raft_effects& fx) {
  auto candidate = std::min(majority_match(), store_.last_index());
  if (candidate > commit_ && may_commit(candidate)) {
    commit_ = candidate;
    apply_committed(fx);
  }
}

void raft_node::apply_committed(raft_effects& fx) {
  while (applied_ < commit_ && applied_ < store_.last_index()) {
    const auto& e = store_.entry(applied_ + 1);
    state_.apply(e.cmd);
    ++applied_;
    fx.applied.push_back({e, state_});
  }
  auto snap_index = store_.last_snapshot().last_index;
  if (applied_ - snap_index >= cfg_.snapshot_every && cfg_.snapshot_every > 0)
    store_.save_snapshot({applied_, store_.term_at(applied_), state_});
}

} // namespace dally::cluster
