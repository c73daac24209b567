#include "net/cluster_client.hpp"
#include "net/owning_actor.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "net/cluster_routing.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"

namespace dally::net {

namespace {

/// A seed answered: its engine's stand-in and what it said of the map.
struct seed_reached {
  size_t seed = 0;
  engine_actor engine;
  v1::ClusterMapReply map;
};

} // namespace

} // namespace dally::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::net::seed_reached)

namespace dally::net {

namespace {

using retry_atom = caf::atom_constant<caf::atom("retry")>;
using reached_all_atom = caf::atom_constant<caf::atom("reachedall")>;

struct remembered_subscription {
  v1::SubscribeRequest req;
  caf::actor consumer;
  /// The consumer is a batch_consumer_actor.
  bool batch = false;
};

struct client_state {
  static inline const char* name = "dally.cluster_client";

  std::vector<seed_address> seeds;
  cluster_options opts;
  cluster_routes routes;
  /// A live connection per node, and the node of each stand-in.
  std::map<core::node_id, engine_actor> conns;
  std::map<caf::actor_addr, core::node_id> node_of;
  /// The node behind each seed reached, by seed index.
  std::map<size_t, core::node_id> seed_node;
  /// Subscriptions made through this client, and the node they were made
  /// at.
  std::vector<remembered_subscription> subscriptions;
  std::optional<core::node_id> home;
  /// A connector is trying the seeds without a connection.
  bool reaching = false;
  /// Work waiting for a retry_atom.
  std::map<uint64_t, std::function<void()>> delayed;
  uint64_t next_delayed = 0;
};

using client_actor = owning_actor<client_state>;

/// Connects to `seed`'s engine and asks it for its node id and map.
caf::expected<seed_reached> reach_seed(caf::actor_system& sys, size_t index,
                                       const seed_address& seed,
                                       const cluster_options& opts) {
  auto engine = connect_engine(sys, seed.host, seed.port, opts.connect);
  if (!engine)
    return std::move(engine.error());
  caf::scoped_actor self{sys};
  caf::expected<seed_reached> out{caf::error{}};
  self
    ->request(*engine, std::chrono::milliseconds{opts.map_timeout_ms},
              cluster_map_request{})
    .receive(
      [&](cluster_map_reply& reply) {
        out = seed_reached{index, *engine, std::move(reply.pb)};
      },
      [&](caf::error& err) { out = std::move(err); });
  return out;
}

/// Runs `fn` on the client after `delay_ms`.
void after(client_actor* self, uint32_t delay_ms, std::function<void()> fn) {
  auto& st = self->state;
  auto id = st.next_delayed++;
  st.delayed.emplace(id, std::move(fn));
  self->delayed_send(self, std::chrono::milliseconds{delay_ms},
                     retry_atom::value, id);
}

void subscribe_at_home(client_actor* self, const remembered_subscription& sub,
                       std::optional<caf::response_promise> rp);

/// Subscribes every remembered consumer again through a live node, after
/// the node they were made at is gone; with no node live, the next seed
/// reached gets them.
void rehome(client_actor* self) {
  auto& st = self->state;
  if (st.home && st.routes.live(*st.home))
    return;
  st.home = st.routes.any();
  if (!st.home)
    return;
  for (const auto& sub : st.subscriptions)
    subscribe_at_home(self, sub, std::nullopt);
}

/// Takes a seed's connection: learns its map and, unless the client holds
/// one to that node already, routes requests through it.
void on_reached(client_actor* self, seed_reached& r) {
  auto& st = self->state;
  auto map = map_of(r.map);
  if (!map)
    return;
  auto node = r.map.node_id();
  st.seed_node[r.seed] = node;
  st.routes.learn(std::move(*map));
  if (st.conns.count(node) > 0)
    return;
  st.conns.emplace(node, r.engine);
  st.node_of[r.engine.address()] = node;
  self->monitor(r.engine);
  st.routes.set_live(node, true);
  rehome(self);
}

/// Reaches each of `missing` (seed index and address) and tells `client`
/// of every seed that answered, then that it is done.
void connector(caf::blocking_actor* self, caf::actor client,
               std::vector<std::pair<size_t, seed_address>> missing,
               cluster_options opts) {
  for (auto& [index, seed] : missing)
    if (auto r = reach_seed(self->system(), index, seed, opts))
      self->send(client, std::move(*r));
  self->send(client, reached_all_atom::value);
}

/// Tries, on a thread of its own (connecting blocks), every seed the
/// client holds no connection to.
void reach_missing(client_actor* self) {
  auto& st = self->state;
  if (st.reaching)
    return;
  std::vector<std::pair<size_t, seed_address>> missing;
  for (size_t i = 0; i < st.seeds.size(); ++i)
    if (st.seed_node.count(i) == 0)
      missing.emplace_back(i, st.seeds[i]);
  if (missing.empty())
    return;
  st.reaching = true;
  // Arguments, not captures: CAF 0.17 dereferences a null tuple to call a
  // spawned function that takes none.
  self->system().spawn<caf::detached + caf::hidden>(
    connector, caf::actor_cast<caf::actor>(self), std::move(missing), st.opts);
}

/// Asks every connected node for its map, and tries the other seeds.
void refresh(client_actor* self) {
  auto& st = self->state;
  for (auto& [node, engine] : st.conns)
    self
      ->request(engine, std::chrono::milliseconds{st.opts.map_timeout_ms},
                cluster_map_request{})
      .then(
        [self](cluster_map_reply& reply) {
          if (auto map = map_of(reply.pb))
            self->state.routes.learn(std::move(*map));
        },
        [](caf::error&) {});
  reach_missing(self);
}

/// One request on its way through the client: where it goes, and how
/// often it has been tried.
struct pending_call {
  caf::message msg;
  std::function<std::optional<core::node_id>(cluster_routes&)> pick;
  bool idempotent = false;
  caf::response_promise rp;
  uint32_t tries = 0;
};

template<class Reply>
void attempt(client_actor* self, std::shared_ptr<pending_call> c);

/// Sends `c` again after a refresh of the map, if `kind` and the request
/// allow it and tries remain; otherwise answers with `err`.
template<class Reply>
void retry_or_fail(client_actor* self, std::shared_ptr<pending_call> c,
                   caf::error err, failure_kind kind) {
  auto& st = self->state;
  if (c->tries >= st.opts.attempts || !may_retry(kind, c->idempotent)) {
    if (c->rp.pending())
      c->rp.deliver(std::move(err));
    return;
  }
  refresh(self);
  after(self, c->tries * st.opts.retry_delay_ms,
        [self, c] { attempt<Reply>(self, c); });
}

std::string seed_list(const client_state& st) {
  std::string out;
  for (const auto& s : st.seeds)
    out += (out.empty() ? "" : ",") + s.str();
  return out;
}

template<class Reply>
void attempt(client_actor* self, std::shared_ptr<pending_call> c) {
  auto& st = self->state;
  ++c->tries;
  auto node = c->pick(st.routes);
  if (!node) {
    retry_or_fail<Reply>(self, c,
                         make_caf_error(core::errc::unavailable,
                                        "no node of the cluster is reachable "
                                        "(seeds " +
                                          seed_list(st) + ")"),
                         failure_kind::refused);
    return;
  }
  auto dest = caf::actor_cast<caf::actor>(st.conns.at(*node));
  self->request(dest, caf::infinite, c->msg)
    .then(
      [c](Reply& reply) mutable {
        if (c->rp.pending())
          c->rp.deliver(std::move(reply));
      },
      [self, c](caf::error& err) {
        // A stand-in that had already exited never saw the request.
        auto kind = err == caf::sec::request_receiver_down
                      ? failure_kind::refused
                      : classify(from_caf(err));
        retry_or_fail<Reply>(self, c, std::move(err), kind);
      });
}

/// Starts the request in the current message, to the node `pick` names.
template<class Reply, class Pick>
caf::response_promise start(client_actor* self, caf::message msg,
                            bool idempotent, Pick pick) {
  auto c = std::make_shared<pending_call>();
  c->msg = std::move(msg);
  c->pick = std::move(pick);
  c->idempotent = idempotent;
  c->rp = self->make_response_promise();
  attempt<Reply>(self, c);
  return c->rp;
}

void subscribe_at_home(client_actor* self, const remembered_subscription& sub,
                       std::optional<caf::response_promise> rp) {
  auto msg =
    sub.batch
      ? caf::make_message(subscribe_request{sub.req},
                          caf::actor_cast<batch_consumer_actor>(sub.consumer))
      : caf::make_message(subscribe_request{sub.req},
                          caf::actor_cast<consumer_actor>(sub.consumer));
  auto c = std::make_shared<pending_call>();
  c->msg = std::move(msg);
  c->pick = [self](cluster_routes&) {
    rehome(self);
    return self->state.home;
  };
  c->idempotent = true;
  // A resubscription nobody waits for has no promise to answer.
  if (rp)
    c->rp = *rp;
  attempt<empty_reply>(self, c);
}

/// Remembers a subscription (replacing one of the same consumer and topic)
/// and makes it at the home node.
template<class Consumer>
caf::response_promise subscribe(client_actor* self, subscribe_request& req,
                                Consumer& consumer) {
  auto& st = self->state;
  constexpr bool batch = std::is_same_v<Consumer, batch_consumer_actor>;
  remembered_subscription sub{req.pb, caf::actor_cast<caf::actor>(consumer),
                              batch};
  std::erase_if(st.subscriptions, [&](const remembered_subscription& s) {
    return s.consumer == sub.consumer && s.req.topic() == sub.req.topic();
  });
  if (sub.consumer)
    st.subscriptions.push_back(sub);
  auto rp = self->make_response_promise();
  subscribe_at_home(self, sub, rp);
  return rp;
}

caf::response_promise unsubscribe(client_actor* self, unsubscribe_request& req,
                                  consumer_actor& consumer) {
  auto& st = self->state;
  auto handle = caf::actor_cast<caf::actor>(consumer);
  std::erase_if(st.subscriptions, [&](const remembered_subscription& s) {
    return s.consumer == handle && s.req.topic() == req.pb.topic();
  });
  return start<empty_reply>(self, caf::make_message(req, consumer), true,
                            [self](cluster_routes&) {
                              rehome(self);
                              return self->state.home;
                            });
}

/// A request about the task `id`: to its owner, idempotent or not.
template<class Reply, class Req>
caf::response_promise by_task(client_actor* self, Req& req, uint64_t id,
                              bool idempotent) {
  return start<Reply>(self, caf::make_message(std::move(req)), idempotent,
                      [id](cluster_routes& r) { return r.for_task(id); });
}

/// A request any node answers.
template<class Reply, class Req>
caf::response_promise anywhere(client_actor* self, Req& req) {
  return start<Reply>(self, caf::make_message(std::move(req)), true,
                      [](cluster_routes& r) { return r.any(); });
}

caf::message_handler task_requests(client_actor* self) {
  return {
    [self](schedule_request& req) {
      bool idem = is_idempotent(req.pb);
      auto pb = req.pb;
      return start<schedule_reply>(
        self, caf::make_message(std::move(req)), idem,
        [pb](cluster_routes& r) { return r.for_schedule(pb); });
    },
    [self](schedule_batch_request& req) {
      bool idem = is_idempotent(req.pb);
      auto pb = req.pb;
      return start<schedule_batch_reply>(
        self, caf::make_message(std::move(req)), idem,
        [pb](cluster_routes& r) { return r.for_batch(pb); });
    },
    [self](revoke_request& req) {
      return by_task<change_reply>(self, req, req.pb.id(), false);
    },
    [self](reschedule_request& req) {
      return by_task<change_reply>(self, req, req.pb.id(), false);
    },
    [self](kick_request& req) {
      return by_task<change_reply>(self, req, req.pb.id(), false);
    },
    [self](get_request& req) {
      return by_task<get_reply>(self, req, req.pb.id(), true);
    },
    [self](ack_request& req) {
      return by_task<empty_reply>(self, req, req.pb.id().task_id(), false);
    },
    [self](nack_request& req) {
      return by_task<empty_reply>(self, req, req.pb.id().task_id(), false);
    },
    [self](touch_request& req) {
      return by_task<empty_reply>(self, req, req.pb.id().task_id(), false);
    },
  };
}

caf::message_handler other_requests(client_actor* self) {
  return {
    [self](subscribe_request& req, consumer_actor& consumer) {
      return subscribe(self, req, consumer);
    },
    [self](subscribe_request& req, batch_consumer_actor& consumer) {
      return subscribe(self, req, consumer);
    },
    [self](unsubscribe_request& req, consumer_actor& consumer) {
      return unsubscribe(self, req, consumer);
    },
    [self](stats_request& req) { return anywhere<stats_reply>(self, req); },
    [self](dead_letters_request& req) {
      return anywhere<dead_letters_reply>(self, req);
    },
    [self](cluster_map_request& req) {
      return anywhere<cluster_map_reply>(self, req);
    },
  };
}

/// A node's connection dropped: requests go elsewhere, subscriptions made
/// there are made again through another node, and the seeds are tried.
void on_down(client_actor* self, caf::down_msg& msg) {
  auto& st = self->state;
  auto i = st.node_of.find(msg.source);
  if (i == st.node_of.end())
    return;
  auto node = i->second;
  st.node_of.erase(i);
  st.conns.erase(node);
  st.routes.set_live(node, false);
  std::erase_if(st.seed_node,
                [node](const auto& e) { return e.second == node; });
  rehome(self);
  reach_missing(self);
}

caf::behavior cluster_client(client_actor* self,
                             std::vector<seed_address> seeds,
                             cluster_options opts,
                             std::vector<seed_reached> reached) {
  auto& st = self->state;
  st.seeds = std::move(seeds);
  st.opts = std::move(opts);
  st.opts.attempts = std::max<uint32_t>(1, st.opts.attempts);
  for (auto& r : reached)
    on_reached(self, r);
  self->set_down_handler([self](caf::down_msg& msg) { on_down(self, msg); });
  caf::message_handler internal{
    [self](seed_reached& r) { on_reached(self, r); },
    [self](reached_all_atom) { self->state.reaching = false; },
    [self](retry_atom, uint64_t id) {
      auto& delayed = self->state.delayed;
      auto i = delayed.find(id);
      if (i == delayed.end())
        return;
      auto fn = std::move(i->second);
      delayed.erase(i);
      fn();
    },
  };
  return task_requests(self).or_else(other_requests(self)).or_else(internal);
}

/// "host:port", the host possibly in brackets.
caf::expected<seed_address> parse_seed(std::string_view entry) {
  auto bad = [&](const std::string& why) {
    return make_caf_error(core::errc::invalid_request,
                          "seed '" + std::string{entry} + "': " + why);
  };
  auto colon = entry.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return bad("expected host:port");
  auto host = entry.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  auto port_text = entry.substr(colon + 1);
  uint32_t port = 0;
  if (port_text.empty() || port_text.size() > 5)
    return bad("the port must be a number in [1, 65535]");
  for (char ch : port_text) {
    if (ch < '0' || ch > '9')
      return bad("the port must be a number in [1, 65535]");
    port = port * 10 + static_cast<uint32_t>(ch - '0');
  }
  if (port == 0 || port > 65535)
    return bad("the port must be a number in [1, 65535]");
  return seed_address{std::string{host}, static_cast<uint16_t>(port)};
}

} // namespace

caf::expected<std::vector<seed_address>> parse_seeds(std::string_view text) {
  std::vector<seed_address> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    auto end = comma == std::string_view::npos ? text.size() : comma;
    auto seed = parse_seed(text.substr(pos, end - pos));
    if (!seed)
      return std::move(seed.error());
    out.push_back(std::move(*seed));
    if (comma == std::string_view::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

caf::expected<engine_actor> connect_cluster(caf::actor_system& sys,
                                            std::vector<seed_address> seeds,
                                            cluster_options opts) {
  if (seeds.empty())
    return make_caf_error(core::errc::invalid_request,
                          "connect_cluster needs at least one seed");
  std::vector<seed_reached> reached;
  std::string errors;
  for (size_t i = 0; i < seeds.size(); ++i) {
    auto r = reach_seed(sys, i, seeds[i], opts);
    if (r)
      reached.push_back(std::move(*r));
    else
      errors += (errors.empty() ? "" : "; ") + seeds[i].str() + ": " +
                describe(r.error());
  }
  if (reached.empty())
    return make_caf_error(core::errc::unavailable,
                          "no seed of the cluster answered (" + errors + ")");
  // Hidden, like the stand-ins it talks through (see client_guard_for).
  auto client = sys.spawn<caf::hidden>(cluster_client, std::move(seeds),
                                       std::move(opts), std::move(reached));
  return caf::actor_cast<engine_actor>(client);
}

} // namespace dally::net
