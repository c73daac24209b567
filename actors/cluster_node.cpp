#include "actors/cluster_node.hpp"

#include <algorithm>
#include <chrono>
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
#include <caf/stateful_actor.hpp>

#include "cluster/peer_monitor.hpp"
#include "cluster/raft_node.hpp"
#include "net/cluster_types.hpp"
#include "net/error.hpp"
#include "storage/cluster_codec.hpp"
#include "storage/raft_log_rocks.hpp"

namespace dally::actors {

namespace {

using cluster::node_id;
using tick_atom = caf::atom_constant<caf::atom("ctick")>;

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

  static inline const char* name = "dally.cluster";
};

using cluster_actor = caf::stateful_actor<cluster_state>;

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
  self->send(i->second, net::make_wire(std::move(pb)));
}

void publish_map(cluster_actor* self, const cluster::cluster_map& map) {
  auto& st = self->state;
  if (map.shards.empty() || map.epoch <= st.published_epoch)
    return;
  st.published_epoch = map.epoch;
  event(self, "committed map epoch " + std::to_string(map.epoch) + " (" +
                std::to_string(map.shard_count()) + " shards)");
  if (st.cfg.on_map)
    st.cfg.on_map(map);
}

void carry_out(cluster_actor* self, cluster::raft_effects fx, int64_t now);

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
/// the peer restarted) and watches it.
void adopt(cluster_actor* self, node_id peer, caf::actor handle) {
  auto& st = self->state;
  auto i = st.handles.find(peer);
  if (i != st.handles.end() && i->second == handle)
    return;
  if (i != st.handles.end())
    self->demonitor(i->second);
  self->monitor(handle);
  st.handles[peer] = std::move(handle);
  carry_out(self, st.monitor->on_connected(now_ms(self), peer));
}

/// Connects to `peer` through the middleman actor, or with TLS through the
/// OpenSSL module's: a detached actor of CAF's that does the blocking TCP
/// connect and handshakes, so this actor does not block. Only seeds of a
/// higher id are dialled: the lower ones dial this node, since CAF 0.17
/// drops a second connection between two nodes.
void dial(cluster_actor* self, node_id peer) {
  auto& st = self->state;
  const auto* seed = find_seed(st.cfg, peer);
  if (peer < st.cfg.self || seed == nullptr)
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
        break;
      case kind::down:
        event(self, "node " + std::to_string(e.peer) + " is unreachable");
        break;
    }
  }
}

void on_peer_msg(cluster_actor* self, const v1::PeerMessage& pb) {
  auto& st = self->state;
  if (pb.from() > std::numeric_limits<node_id>::max())
    return;
  auto from = static_cast<node_id>(pb.from());
  if (from == st.cfg.self || find_seed(st.cfg, from) == nullptr)
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

void on_down(cluster_actor* self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto i = st.handles.begin(); i != st.handles.end(); ++i) {
    if (i->second.address() == dm.source) {
      auto peer = i->first;
      st.handles.erase(i);
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
  for (const auto& seed : st.cfg.seeds) {
    if (seed.id != leader)
      out.add_standbys(seed.id);
    auto& n = *out.add_nodes();
    n.set_id(seed.id);
    n.set_address(seed.host + ":" + std::to_string(seed.port));
    n.set_reachable(seed.id == st.cfg.self || st.monitor->reachable(seed.id));
    n.set_voter(true);
    n.set_shards(owned[seed.id]);
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
    [self](net::cluster_status_request&) {
      return net::make_wire(status(self));
    },
  };
}

} // namespace

caf::expected<caf::actor> spawn_cluster_node(caf::actor_system& sys,
                                             cluster_node_config cfg) {
  if (find_seed(cfg, cfg.self) == nullptr)
    return caf::make_error(caf::sec::invalid_argument,
                           "node " + std::to_string(cfg.self) +
                             " is not among the cluster seeds");
  if (cfg.tls && !sys.has_openssl_manager())
    return caf::make_error(caf::sec::invalid_argument,
                           "TLS needs CAF's OpenSSL module (net::enable_tls)");
  auto store = storage::rocks_log_store::open(cfg.log_dir, {});
  if (!store)
    return net::to_caf(store.err());
  std::shared_ptr<storage::rocks_log_store> log = std::move(*store);
  return sys.spawn(cluster_node_impl, std::move(cfg), std::move(log));
}

} // namespace dally::actors
