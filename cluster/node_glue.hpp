#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster_map.hpp"
#include "cluster/raft_log_store.hpp"
#include "core/placement.hpp"

namespace dally::cluster {

/// The shard count of the cluster whose Raft log is `store`: its snapshot
/// map's, else that of the first create_map in the log; 0 when it has
/// neither (a new cluster). A node starts its engine with it, so that a
/// cluster keeps its count whatever --cluster-shards says later.
uint32_t stored_shard_count(const raft_log_store& store);

/// Who a cluster node takes messages from, whom it dials, and which
/// learners its coordinator adds to the map, with their addresses. The
/// seeds are the voters. A voter takes in any other node it hears from, or
/// finds in the map, as a learner; a learner talks to the seeds only and
/// names its own cluster address in what it sends. A voter dials the seeds
/// of a higher id (CAF 0.17 keeps one connection between two nodes and
/// drops a second handshake, so exactly one side of a pair dials), a
/// learner every seed, and nobody dials a learner: a learner redials a
/// seed whose link it lost, also one that restarted, so the link and the
/// heartbeats of both sides come back without a second dialer.
class membership {
public:
  static constexpr size_t max_address_chars = 261;

  membership(node_id self, std::vector<node_id> seeds);

  /// Whether this node is one of the seeds.
  bool is_voter() const noexcept { return voter_; }

  /// Whether `id` is one of the seeds.
  bool is_seed(node_id id) const noexcept;

  /// A message from `from`, which names its cluster `address` (a learner
  /// does; empty: none named): whether to take it, and whether `from` is a
  /// learner this node has not known before (to replicate to and watch). A
  /// voter keeps the address a learner names last, if it is at most
  /// max_address_chars long (a host name and a port).
  struct admission {
    bool take = false;
    bool new_learner = false;
  };
  admission admit(node_id from, const std::string& address = {});

  /// Whether this node dials `peer`.
  bool dials(node_id peer) const noexcept;

  /// The learners a voter knows, in the order it learned them.
  const std::vector<node_id>& learners() const noexcept { return learners_; }

  /// The address learner `id` named last; empty if it named none.
  std::string address_of(node_id id) const;

  /// At a coordinator (`leading`) in `term` of a map with shards: the
  /// learners to add, with the addresses they named: those not members of
  /// `map`, and active members the map knows at another address than the
  /// one they named (a leaving member stays leaving); each join (node and
  /// address) proposed once per term.
  std::vector<add_node> joins_due(bool leading, uint64_t term,
                                  const cluster_map& map);

private:
  node_id self_;
  std::vector<node_id> seeds_;
  bool voter_;
  std::vector<node_id> learners_;
  /// By learner: the address it named last.
  std::map<node_id, std::string> addresses_;
  /// By learner: the term in which its add_node was last proposed, and
  /// the address proposed.
  std::map<node_id, std::pair<uint64_t, std::string>> proposed_;
};

/// Hands the committed maps to the engine one install at a time: while
/// one is under way only the newest map waits, and a map no newer than
/// one already handed out or waiting is dropped, so an older map never
/// overtakes a newer one.
class map_feed {
public:
  /// A committed map: the map to install now, or nothing (an install is
  /// under way, or the map is not newer).
  std::optional<core::shard_map> offer(core::shard_map map);

  /// The engine answered the install under way: the map to install next,
  /// if a newer one waits.
  std::optional<core::shard_map> answered();

  /// Whether an install is under way.
  bool busy() const noexcept { return busy_; }

private:
  bool busy_ = false;
  /// The epoch of the newest map handed out or waiting.
  std::optional<uint64_t> newest_;
  std::optional<core::shard_map> waiting_;
};

/// The engines of the other nodes that this node's engine may forward to:
/// a peer's engine counts while the peer is reachable and the link that
/// named it is up. A lost link forgets the handle (a restarted peer has a
/// new engine and names it again), and an unreachable peer is left out,
/// so that a request for its shards fails at once with `unavailable`
/// instead of waiting for a dead node. `Handle` is the engine's handle
/// type (compared with ==).
template<class Handle>
class peer_engines {
public:
  /// Peer `id` named its engine; true when the live set changed.
  bool on_hello(node_id id, Handle engine) {
    auto& p = peers_[id];
    if (p.engine && *p.engine == engine)
      return false;
    p.engine = std::move(engine);
    return p.reachable;
  }

  /// The link to `id` is gone or replaced; true when the live set changed.
  bool on_link_lost(node_id id) {
    auto i = peers_.find(id);
    if (i == peers_.end() || !i->second.engine)
      return false;
    bool was_live = i->second.reachable;
    i->second.engine.reset();
    return was_live;
  }

  /// Peer `id` became reachable (`up`) or unreachable; true when the live
  /// set changed.
  bool on_reachable(node_id id, bool up) {
    auto& p = peers_[id];
    if (p.reachable == up)
      return false;
    p.reachable = up;
    return p.engine.has_value();
  }

  /// The reachable peers with a known engine.
  std::map<node_id, Handle> live() const {
    std::map<node_id, Handle> out;
    for (const auto& [id, p] : peers_)
      if (p.reachable && p.engine)
        out.emplace(id, *p.engine);
    return out;
  }

private:
  struct peer {
    bool reachable = false;
    std::optional<Handle> engine;
  };
  std::map<node_id, peer> peers_;
};

} // namespace dally::cluster
