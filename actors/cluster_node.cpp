#include "actors/cluster_node.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/spawn_options.hpp>

#include "actors/engine.hpp"
#include "cluster/node_glue.hpp"
#include "cluster/peer_monitor.hpp"
#include "cluster/raft_node.hpp"
#include "net/cluster_types.hpp"
#include "net/error.hpp"
#include "net/owning_actor.hpp"
#include "storage/cluster_codec.hpp"
#include "storage/raft_log_rocks.hpp"

namespace dally::actors {

namespace {

using cluster::node_id;
using tick_atom = caf::atom_constant<caf::atom("ctick")>;
/// Between cluster actors: (engine_hello_atom, node id, engine_actor, bool),
/// the sender's node and its engine, and whether the receiver is to name
/// its own engine back: a node that has just taken a link asks, since the
/// peer may have kept its end of the link (and its handle) and so would
/// never name its engine again to a node that forgot it.
using engine_hello_atom = caf::atom_constant<caf::atom("enghello")>;

struct cluster_state {
  cluster_node_config cfg;
  std::shared_ptr<storage::rocks_log_store> store;
  std::unique_ptr<cluster::raft_node> raft;
  std::unique_ptr<cluster::peer_monitor> monitor;
  /// The cluster actor of each peer we can send to.
  std::map<node_id, caf::actor> handles;
  std::optional<node_id> leader_seen;
  /// The epoch of the last map given to on_map.
  uint64_t published_epoch = 0;
  /// The term in which this node last proposed to create the map.
  uint64_t create_term = 0;
  /// Voters, learners, who dials whom.
  std::unique_ptr<cluster::membership> members;
  /// The committed maps on their way into the engine.
  cluster::map_feed feed;
  /// The other nodes' engines, and which of them the engine may use.
  cluster::peer_engines<engine_actor> engines;

  static inline const char* name = "dally.cluster";
};

using cluster_actor = net::owning_actor<cluster_state>;

int64_t now_ms(cluster_actor* self) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           self->clock().now().time_since_epoch())
    .count();
}

void event(cluster_actor* self, const std::string& line) {
  if (self->state.cfg.on_event)
    self->state.cfg.on_event(line);
}

const cluster_seed* find_seed(const cluster_node_config& cfg, node_id id) {
  auto i = std::find_if(cfg.seeds.begin(), cfg.seeds.end(),
                        [id](const cluster_seed& s) { return s.id == id; });
  return i == cfg.seeds.end() ? nullptr : &*i;
}

std::vector<node_id> seed_ids(const cluster_node_config& cfg) {
  std::vector<node_id> ids;
  for (const auto& s : cfg.seeds)
    ids.push_back(s.id);
  return ids;
}

void send_peer(cluster_actor* self, node_id to, v1::PeerMessage pb) {
  auto i = self->state.handles.find(to);
  if (i == self->state.handles.end())
    return;
  pb.set_from(self->state.cfg.self);
  if (!self->state.members->is_voter())
    pb.set_address(self->state.cfg.address);
  self->send(i->second, net::make_wire(std::move(pb)));
}

std::string list(const std::vector<uint32_t>& xs) {
  std::string out;
  for (auto x : xs)
    out += (out.empty() ? "" : ",") + std::to_string(x);
  return "[" + out + "]";
}

/// Installs `map` in the engine, and after its answer the newest map that
/// came in meanwhile.
void install(cluster_actor* self, core::shard_map map) {
  auto epoch = map.epoch;
  auto next = [self] {
    if (auto map = self->state.feed.answered())
      install(self, std::move(*map));
  };
  self
    ->request(caf::actor_cast<caf::actor>(self->state.cfg.engine),
              caf::infinite, install_map_msg{std::move(map)})
    .then(
      [self, next](map_installed_msg& done) {
        event(self,
              "engine runs map epoch " + std::to_string(done.epoch) +
                ": opened " + list(done.opened) + " closed " +
                list(done.closed) +
                (done.failed.empty() ? "" : " failed " + list(done.failed)));
        next();
      },
      [self, next, epoch](caf::error& err) {
        event(self, "the engine refused map epoch " + std::to_string(epoch) +
                      ": " + net::describe(err));
        next();
      });
}

/// Gives the engine the engines of the reachable peers.
void push_peers(cluster_actor* self) {
  auto& st = self->state;
  if (!st.cfg.engine)
    return;
  auto live = st.engines.live();
  std::string ids;
  for (const auto& [id, e] : live)
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  event(self, "the engine forwards to the engines of nodes [" + ids + "]");
  self->send(caf::actor_cast<caf::actor>(st.cfg.engine),
             set_peers_msg{std::move(live)});
}

/// Whether messages from `from`, which names its cluster `address`, are
/// taken (cluster::membership). A new learner is replicated to (when this
/// node leads) and watched.
bool admit(cluster_actor* self, node_id from, const std::string& address = {}) {
  auto& st = self->state;
  auto a = st.members->admit(from, address);
  if (a.new_learner) {
    event(self, "node " + std::to_string(from) + " joins as a learner" +
                  (address.empty() ? "" : " at " + address));
    st.raft->add_learner(from);
    st.monitor->add_peer(from);
  }
  return a.take;
}

void publish_map(cluster_actor* self, const cluster::cluster_map& map) {
  auto& st = self->state;
  for (const auto& m : map.members)
    admit(self, m.id);
  if (map.shards.empty() || map.epoch <= st.published_epoch)
    return;
  st.published_epoch = map.epoch;
  event(self, "committed map epoch " + std::to_string(map.epoch) + " (" +
                std::to_string(map.shard_count()) + " shards)");
  if (st.cfg.on_map)
    st.cfg.on_map(map);
  if (st.cfg.engine)
    if (auto now = st.feed.offer(map.to_core()))
      install(self, std::move(*now));
}

void carry_out(cluster_actor* self, cluster::raft_effects fx, int64_t now);

/// A coordinator proposes to add each learner that is not a member of the
/// map yet, once per term.
void propose_joins(cluster_actor* self, int64_t now) {
  auto& st = self->state;
  for (auto& join : st.members->joins_due(st.raft->is_leader(), st.raft->term(),
                                          st.raft->state()))
    carry_out(self, st.raft->propose(now, std::move(join)), now);
}

/// Reports a new coordinator; a coordinator of a cluster without a map
/// proposes to create it, once per term.
void after_raft(cluster_actor* self, int64_t now) {
  auto& st = self->state;
  auto leader = st.raft->leader();
  if (leader != st.leader_seen) {
    st.leader_seen = leader;
    if (leader)
      event(self, "coordinator is node " + std::to_string(*leader) + " (term " +
                    std::to_string(st.raft->term()) + ")");
  }
  if (st.raft->is_leader() && st.raft->state().shards.empty() &&
      st.create_term != st.raft->term()) {
    st.create_term = st.raft->term();
    carry_out(self,
              st.raft->propose(
                now, cluster::create_map{st.cfg.shard_count, seed_ids(st.cfg)}),
              now);
  }
  propose_joins(self, now);
}

void carry_out(cluster_actor* self, cluster::raft_effects fx, int64_t now) {
  for (auto& env : fx.messages) {
    v1::PeerMessage pb;
    storage::to_proto(env.msg, *pb.mutable_raft());
    send_peer(self, env.to, std::move(pb));
  }
  if (fx.installed)
    publish_map(self, fx.installed->state);
  for (const auto& a : fx.applied)
    publish_map(self, a.state);
  after_raft(self, now);
}

void carry_out(cluster_actor* self,
               const std::vector<cluster::peer_effect>& fx);

/// Takes `handle` as `peer`'s cluster actor (a new one replaces the old:
/// the peer restarted, and its engine is new too), watches it and names
/// this node's engine to it.
void adopt(cluster_actor* self, node_id peer, caf::actor handle) {
  auto& st = self->state;
  auto i = st.handles.find(peer);
  if (i != st.handles.end() && i->second == handle)
    return;
  if (i != st.handles.end())
    self->demonitor(i->second);
  if (st.engines.on_link_lost(peer))
    push_peers(self);
  self->monitor(handle);
  if (st.cfg.engine)
    self->send(handle, engine_hello_atom::value, uint32_t{st.cfg.self},
               st.cfg.engine, true);
  st.handles[peer] = std::move(handle);
  carry_out(self, st.monitor->on_connected(now_ms(self), peer));
}

/// Connects to `peer` through the middleman actor, or with TLS through the
/// OpenSSL module's: a detached actor of CAF's that does the blocking TCP
/// connect and handshakes, so this actor does not block. Whom it dials:
/// cluster::membership.
void dial(cluster_actor* self, node_id peer) {
  auto& st = self->state;
  const auto* seed = find_seed(st.cfg, peer);
  if (seed == nullptr || !st.members->dials(peer))
    return;
  auto& sys = self->system();
  auto mm = st.cfg.tls ? sys.openssl_manager().actor_handle()
                       : sys.middleman().actor_handle();
  auto timeout =
    std::chrono::milliseconds{st.monitor->config().connect_timeout_ms};
  self->request(mm, timeout, caf::connect_atom::value, seed->host, seed->port)
    .then(
      [self, peer](caf::node_id&, caf::strong_actor_ptr& ptr,
                   std::set<std::string>&) {
        if (ptr)
          adopt(self, peer, caf::actor_cast<caf::actor>(std::move(ptr)));
        else
          carry_out(self,
                    self->state.monitor->on_connect_failed(now_ms(self), peer));
      },
      [self, peer](caf::error&) {
        carry_out(self,
                  self->state.monitor->on_connect_failed(now_ms(self), peer));
      });
}

void carry_out(cluster_actor* self,
               const std::vector<cluster::peer_effect>& fx) {
  using kind = cluster::peer_effect::kind;
  for (const auto& e : fx) {
    switch (e.what) {
      case kind::send_heartbeat: {
        v1::PeerMessage pb;
        pb.mutable_heartbeat();
        send_peer(self, e.peer, std::move(pb));
        break;
      }
      case kind::connect:
        dial(self, e.peer);
        break;
      case kind::up:
        event(self, "node " + std::to_string(e.peer) + " is reachable");
        if (self->state.engines.on_reachable(e.peer, true))
          push_peers(self);
        break;
      case kind::down:
        event(self, "node " + std::to_string(e.peer) + " is unreachable");
        if (self->state.engines.on_reachable(e.peer, false))
          push_peers(self);
        break;
    }
  }
}

void on_peer_msg(cluster_actor* self, const v1::PeerMessage& pb) {
  auto& st = self->state;
  if (pb.from() > std::numeric_limits<node_id>::max())
    return;
  auto from = static_cast<node_id>(pb.from());
  if (!admit(self, from, pb.address()))
    return;
  if (auto sender = caf::actor_cast<caf::actor>(self->current_sender()))
    adopt(self, from, std::move(sender));
  auto now = now_ms(self);
  carry_out(self, st.monitor->on_message(now, from));
  if (!pb.has_raft())
    return;
  auto msg = storage::from_proto(pb.raft());
  if (!msg) {
    event(self, "dropped a message from node " + std::to_string(from) + ": " +
                  msg.err().message());
    return;
  }
  carry_out(self, st.raft->on_message(now, from, *msg), now);
}

/// Peer `from`'s cluster actor names its engine, and asks for this node's
/// when `answer`.
void on_engine_hello(cluster_actor* self, uint32_t from, engine_actor engine,
                     bool answer) {
  auto& st = self->state;
  if (!engine || !admit(self, from))
    return;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (sender) {
    auto known = st.handles.find(from);
    bool adopting = known == st.handles.end() || known->second != sender;
    adopt(self, from, sender);
    if (answer && !adopting && st.cfg.engine)
      self->send(sender, engine_hello_atom::value, uint32_t{st.cfg.self},
                 st.cfg.engine, false);
  }
  if (st.engines.on_hello(from, std::move(engine)))
    push_peers(self);
}

void on_down(cluster_actor* self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto i = st.handles.begin(); i != st.handles.end(); ++i) {
    if (i->second.address() == dm.source) {
      auto peer = i->first;
      st.handles.erase(i);
      if (st.engines.on_link_lost(peer))
        push_peers(self);
      carry_out(self, st.monitor->on_disconnected(now_ms(self), peer));
      return;
    }
  }
}

v1::ClusterStatusReply status(cluster_actor* self) {
  auto& st = self->state;
  const auto& map = st.raft->state();
  auto leader = st.raft->leader().value_or(0);
  v1::ClusterStatusReply out;
  out.set_self(st.cfg.self);
  out.set_coordinator(leader);
  out.set_term(st.raft->term());
  out.set_epoch(map.epoch);
  out.set_shard_count(map.shard_count());
  auto commit = st.raft->commit_index();
  const auto& log = st.raft->store();
  out.set_commit_index(commit);
  if (commit >= log.last_snapshot().last_index && commit <= log.last_index())
    out.set_commit_term(log.term_at(commit));
  std::map<node_id, uint32_t> owned;
  for (const auto& s : map.shards)
    ++owned[s.owner];
  auto add = [&](node_id id, std::string address, bool voter) {
    auto& n = *out.add_nodes();
    n.set_id(id);
    n.set_address(std::move(address));
    n.set_reachable(id == st.cfg.self || st.monitor->reachable(id));
    n.set_voter(voter);
    n.set_shards(owned[id]);
  };
  for (const auto& seed : st.cfg.seeds) {
    if (seed.id != leader)
      out.add_standbys(seed.id);
    add(seed.id, seed.host + ":" + std::to_string(seed.port), true);
  }
  // Learners: a voter knows those it heard from, every node those in
  // the map, a learner itself; at the address the map holds, else the one
  // the learner named.
  std::set<node_id> learners{st.members->learners().begin(),
                             st.members->learners().end()};
  for (const auto& m : map.members)
    if (!st.members->is_seed(m.id))
      learners.insert(m.id);
  if (!st.members->is_voter())
    learners.insert(st.cfg.self);
  for (auto id : learners) {
    const auto* m = map.find(id);
    auto address = m != nullptr ? m->address : std::string{};
    if (address.empty())
      address = id == st.cfg.self ? st.cfg.address : st.members->address_of(id);
    add(id, std::move(address), false);
  }
  return out;
}

caf::behavior cluster_node_impl(cluster_actor* self, cluster_node_config cfg,
                                std::shared_ptr<storage::rocks_log_store> log) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.store = std::move(log);
  cluster::raft_config rc;
  rc.self = st.cfg.self;
  rc.voters = seed_ids(st.cfg);
  rc.seed = st.cfg.random_seed;
  st.raft = std::make_unique<cluster::raft_node>(rc, *st.store, now_ms(self));
  st.members = std::make_unique<cluster::membership>(rc.self, rc.voters);
  cluster::peer_monitor_config mc;
  mc.heartbeat_ms = st.cfg.heartbeat_ms;
  mc.unreachable_ms = st.cfg.unreachable_ms;
  std::vector<node_id> peers;
  for (auto id : rc.voters)
    if (id != rc.self)
      peers.push_back(id);
  st.monitor = std::make_unique<cluster::peer_monitor>(mc, peers);
  publish_map(self, st.raft->state());
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  self->set_error_handler(
    [self](caf::error& err) { event(self, "error: " + net::describe(err)); });
  self->send(self, tick_atom::value);
  return {
    [self](tick_atom) {
      auto& st = self->state;
      auto now = now_ms(self);
      carry_out(self, st.monitor->on_tick(now));
      carry_out(self, st.raft->on_tick(now), now);
      self->delayed_send(self, std::chrono::milliseconds{st.cfg.tick_ms},
                         tick_atom::value);
    },
    [self](net::peer_msg& m) { on_peer_msg(self, m.pb); },
    [self](engine_hello_atom, uint32_t from, engine_actor& engine,
           bool answer) {
      on_engine_hello(self, from, std::move(engine), answer);
    },
    [self](net::cluster_status_request&) {
      return net::make_wire(status(self));
    },
  };
}

} // namespace

caf::expected<caf::actor> spawn_cluster_node(caf::actor_system& sys,
                                             cluster_node_config cfg) {
  if (cfg.self == 0 || cfg.seeds.empty())
    return caf::make_error(caf::sec::invalid_argument,
                           "a cluster node needs an id above 0 and seeds");
  if (cfg.tls && !sys.has_openssl_manager())
    return caf::make_error(caf::sec::invalid_argument,
                           "TLS needs CAF's OpenSSL module (net::enable_tls)");
  auto store = storage::rocks_log_store::open(cfg.log_dir, {});
  if (!store)
    return net::to_caf(store.err());
  std::shared_ptr<storage::rocks_log_store> log = std::move(*store);
  return sys.spawn<caf::detached>(cluster_node_impl, std::move(cfg),
                                  std::move(log));
}

caf::expected<uint32_t> cluster_shard_count(const std::string& log_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(log_dir, ec) && !ec)
    return uint32_t{0};
  auto store = storage::rocks_log_store::open(log_dir, {});
  if (!store)
    return net::to_caf(store.err());
  return cluster::stored_shard_count(**store);
}

} // namespace dally::actors
