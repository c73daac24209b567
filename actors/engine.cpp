#include "actors/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "actors/consumer_registry.hpp"
#include "actors/messages.hpp"
#include "actors/notifier.hpp"
#include "actors/shard.hpp"
#include "actors/supervisor.hpp"
#include "core/task.hpp"
#include "logic/engine_reports.hpp"
#include "logic/engine_routing.hpp"
#include "logic/schedule_admission.hpp"
#include "logic/shard_ownership.hpp"
#include "net/error.hpp"
#include "net/owning_actor.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

struct install_waiter {
  caf::typed_response_promise<map_installed_msg> rp;
  map_installed_msg answer;
};

struct remembered_subscription {
  v1::SubscribeRequest req;
  caf::actor consumer;
  /// The consumer is a batch_consumer_actor.
  bool batch = false;
};

struct engine_state {
  static inline const char* name = "dally.engine";

  logic::engine_config cfg;
  /// Placement of requests on the shards.
  std::optional<logic::request_router> router;
  /// New tasks passed to each shard and not answered yet.
  std::optional<logic::schedule_admission> admission;
  /// Which shards this node runs, by its newest shard map.
  std::optional<logic::shard_ownership> owner;
  /// The engines of the other nodes, by node id.
  std::map<core::node_id, caf::actor> peers;
  std::vector<caf::actor> shards;
  std::vector<caf::actor> notifiers;
  caf::actor registry;
  caf::actor supervisor;
  /// Topics some consumer can take deliveries of; sent to every (re)started
  /// shard before anything else.
  std::set<std::string> available;
  /// Shards owned at start that have not come up yet (ready_atom waits).
  std::set<uint32_t> initial_left;
  std::vector<bool> ever_up;
  uint64_t restarts = 0;
  caf::error start_error;
  std::vector<caf::response_promise> ready_waiters;
  /// Shards a map change opens or closes that are not done yet.
  std::set<uint32_t> opening;
  std::set<uint32_t> closing;
  /// Shards a map change opened that failed to open, with the cause.
  std::map<uint32_t, caf::error> open_errors;
  std::vector<install_waiter> install_waiters;
  /// Subscriptions made here, repeated at every other node's engine so
  /// that their consumers get deliveries from every shard of the cluster.
  std::vector<remembered_subscription> subscriptions;
  /// Consumers of `subscriptions`, monitored to forget them when they end.
  std::set<caf::actor_addr> watched;
  bool stopping = false;
  caf::error stop_reason;
};

/// The engine's actor: it tells its front door of each request it takes
/// from a client on another node (not an answer, not anonymous: the
/// requests the listener counts, see net::front_door).
class engine_impl_actor : public net::owning_actor<engine_state> {
public:
  using net::owning_actor<engine_state>::owning_actor;

  caf::invoke_message_result consume(caf::mailbox_element& x) override {
    // Before the handler, which may move the sender out of `x`.
    auto counted =
      door_ && x.sender && x.sender->node() != node() && !x.mid.is_response();
    handling_counted_ = counted;
    auto result = net::owning_actor<engine_state>::consume(x);
    handling_counted_ = false;
    if (counted && result != caf::invoke_message_result::skipped)
      door_->on_taken();
    return result;
  }

  void set_door(std::shared_ptr<net::front_door> door) {
    door_ = std::move(door);
  }

  /// The front door's numbers; all 0 without one.
  logic::front_door_report door_report() const {
    if (!door_)
      return {};
    // Not the request being handled (a stats request asks this). A request
    // taken before the listener counted it makes the backlog dip below 0
    // for a moment.
    auto waiting = door_->backlog() - (handling_counted_ ? 1 : 0);
    return {static_cast<uint64_t>(std::max<int64_t>(waiting, 0)),
            static_cast<uint64_t>(std::max<int64_t>(door_->peak_backlog(), 0)),
            door_->closings(), door_->stalls()};
  }

private:
  std::shared_ptr<net::front_door> door_;
  /// The request being handled was counted by the door.
  bool handling_counted_ = false;
};

/// The reply of each request the engine routes.
template<class Req>
struct reply_of;

#define DALLY_REPLY_OF(req, rep)                                               \
  template<>                                                                   \
  struct reply_of<net::req> {                                                  \
    using type = net::rep;                                                     \
  }
DALLY_REPLY_OF(schedule_request, schedule_reply);
DALLY_REPLY_OF(schedule_batch_request, schedule_batch_reply);
DALLY_REPLY_OF(revoke_request, change_reply);
DALLY_REPLY_OF(reschedule_request, change_reply);
DALLY_REPLY_OF(kick_request, change_reply);
DALLY_REPLY_OF(get_request, get_reply);
DALLY_REPLY_OF(ack_request, empty_reply);
DALLY_REPLY_OF(nack_request, empty_reply);
DALLY_REPLY_OF(touch_request, empty_reply);
DALLY_REPLY_OF(dead_letters_request, dead_letters_reply);
#undef DALLY_REPLY_OF

caf::error shard_unavailable(engine_impl_actor* self, uint32_t index) {
  auto& st = self->state;
  auto name = "shard " + std::to_string(index);
  auto node = " on node " + std::to_string(st.cfg.node_id);
  if (auto i = st.open_errors.find(index); i != st.open_errors.end())
    return net::make_caf_error(core::errc::unavailable,
                               name + " did not open" + node + ": " +
                                 net::describe(i->second));
  if (st.opening.count(index) > 0)
    return net::make_caf_error(core::errc::unavailable,
                               name + " is opening" + node +
                                 "; retry the request");
  return net::make_caf_error(core::errc::unavailable,
                             name + " is restarting; retry the request");
}

/// The error of a request forwarded to node `owner`: its own answer, or
/// `unavailable` when it did not answer (the request may have been done).
caf::error peer_error(core::node_id owner, const caf::error& err) {
  if (err.category() == net::error_category)
    return err;
  return net::make_caf_error(
    core::errc::unavailable,
    "node " + std::to_string(owner) + " did not answer a forwarded request (" +
      net::describe(err) + "); retry it with its idempotency key");
}

logic::route_decision decide(engine_impl_actor* self, uint32_t index,
                             bool forwarded) {
  auto& st = self->state;
  return st.owner->route(index, forwarded, [&st](core::node_id node) {
    return st.peers.count(node) > 0;
  });
}

/// Sends `req` to node `owner`'s engine as a forwarded request; `on_reply`
/// or `on_error` gets its answer.
template<class Reply, class Req, class OnReply, class OnError>
void ask_peer(engine_impl_actor* self, core::node_id owner, Req req,
              OnReply on_reply, OnError on_error) {
  auto timeout = std::chrono::milliseconds{self->state.cfg.forward_timeout_ms};
  self
    ->request(self->state.peers.at(owner), timeout, forwarded_atom::value,
              std::move(req))
    .then([on_reply](Reply& reply) mutable { on_reply(reply); },
          [on_error, owner](caf::error& err) mutable {
            on_error(peer_error(owner, err));
          });
}

/// Forwards the current request to the shard that owns it: its actor here,
/// or the engine of its owner, keeping the sender's reply address; fails
/// with `unavailable` when neither can take it, and with `overloaded` when
/// its `new_tasks` do not fit in the shard here (its owner elsewhere
/// decides for itself).
template<class Msg>
void route(engine_impl_actor* self, uint32_t index, Msg& msg, bool forwarded,
           size_t new_tasks = 0) {
  using reply_t = typename reply_of<Msg>::type;
  auto d = decide(self, index, forwarded);
  if (d.where == logic::route_decision::kind::forward) {
    auto rp = self->make_response_promise<reply_t>();
    ask_peer<reply_t>(
      self, d.owner, std::move(msg),
      [rp](reply_t& reply) mutable { rp.deliver(std::move(reply)); },
      [rp](const caf::error& err) mutable { rp.deliver(err); });
    return;
  }
  // A response promise takes over the request's answer: made only when the
  // engine answers itself, never before a delegate.
  if (d.where == logic::route_decision::kind::unavailable) {
    self->make_response_promise().deliver(
      net::make_caf_error(core::errc::unavailable, d.reason));
    return;
  }
  auto& shard = self->state.shards[index];
  if (!shard) {
    self->make_response_promise().deliver(shard_unavailable(self, index));
    return;
  }
  auto& admission = *self->state.admission;
  if (new_tasks > 0 && !admission.admit(index, new_tasks)) {
    self->make_response_promise().deliver(
      net::to_caf(admission.refusal(index)));
    return;
  }
  self->delegate(shard, std::move(msg));
}

/// Sends `msg` to the shard that owns task `id`, if it runs here.
template<class Msg>
void tell_owner(engine_impl_actor* self, uint64_t id, const Msg& msg) {
  auto& shard = self->state.shards[self->state.router->shard_of(id)];
  if (shard)
    self->send(shard, msg);
}

void check_ready(engine_impl_actor* self) {
  auto& st = self->state;
  if (st.start_error) {
    for (auto& rp : st.ready_waiters)
      rp.deliver(st.start_error);
    st.ready_waiters.clear();
  } else if (st.initial_left.empty()) {
    for (auto& rp : st.ready_waiters)
      rp.deliver(ready_atom::value);
    st.ready_waiters.clear();
  }
}

/// Sends one part of a split schedule_batch and puts its answer in place.
void send_part(engine_impl_actor* self, logic::batch_part& part,
               std::shared_ptr<logic::batch_answer> acc,
               caf::typed_response_promise<net::schedule_batch_reply> rp,
               bool forwarded) {
  auto finish = [acc, rp]() mutable {
    if (acc->complete())
      rp.deliver(net::schedule_batch_reply{acc->take()});
  };
  auto fail_all = [acc, finish,
                   positions = part.positions](const caf::error& err) mutable {
    acc->fail(positions, net::from_caf(err));
    finish();
  };
  auto fill = [acc, finish, positions = part.positions](
                net::schedule_batch_reply& sub) mutable {
    acc->fill(positions, sub.pb);
    finish();
  };
  auto d = decide(self, part.shard, forwarded);
  if (d.where == logic::route_decision::kind::unavailable) {
    fail_all(net::make_caf_error(core::errc::unavailable, d.reason));
    return;
  }
  net::schedule_batch_request sub{std::move(part.request)};
  if (d.where == logic::route_decision::kind::forward) {
    ask_peer<net::schedule_batch_reply>(self, d.owner, std::move(sub), fill,
                                        fail_all);
    return;
  }
  auto& shard = self->state.shards[part.shard];
  if (!shard) {
    fail_all(shard_unavailable(self, part.shard));
    return;
  }
  auto& admission = *self->state.admission;
  if (!admission.admit(part.shard, static_cast<size_t>(sub.pb.tasks_size()))) {
    fail_all(net::to_caf(admission.refusal(part.shard)));
    return;
  }
  self->request(shard, caf::infinite, std::move(sub)).then(fill, fail_all);
}

/// Forwards a batch without idempotency keys whole to the next shard in
/// turn, when it runs here, whose reply is the answer (no copy of every
/// task's request and result to split and put back together); splits one
/// with keys by shard, sends each part (here or to its owner), and puts the
/// answers back in the request's order.
void schedule_batch(engine_impl_actor* self, net::schedule_batch_request& req,
                    bool forwarded) {
  auto& st = self->state;
  auto whole = st.router->whole(
    req.pb, [&st](uint32_t i) { return st.owner->owns(i) && !!st.shards[i]; });
  if (whole) {
    if (st.admission->admit(*whole, static_cast<size_t>(req.pb.tasks_size())))
      self->delegate(st.shards[*whole], std::move(req));
    else
      self->make_response_promise().deliver(
        net::to_caf(st.admission->refusal(*whole)));
    return;
  }
  auto rp = self->make_response_promise<net::schedule_batch_reply>();
  auto n = req.pb.tasks_size();
  auto parts = st.router->split(req.pb);
  if (parts.empty()) {
    rp.deliver(net::schedule_batch_reply{});
    return;
  }
  auto acc = std::make_shared<logic::batch_answer>(n, parts.size());
  for (auto& part : parts)
    send_part(self, part, acc, rp, forwarded);
}

/// Asks every shard, notifier and the registry for their numbers.
void stats(engine_impl_actor* self) {
  auto& st = self->state;
  auto rp = self->make_response_promise<net::stats_reply>();
  struct pending {
    logic::stats_merge merge;
    size_t left = 0;
    caf::typed_response_promise<net::stats_reply> rp;
    void done() {
      if (--left == 0)
        rp.deliver(net::stats_reply{merge.take()});
    }
  };
  auto acc = std::make_shared<pending>(pending{
    logic::stats_merge{static_cast<uint32_t>(st.shards.size()), st.restarts},
    1 + st.notifiers.size(), rp});
  acc->merge.add(st.admission->report());
  acc->merge.add(self->door_report());
  for (auto& s : st.shards)
    if (s)
      ++acc->left;
  auto ignore = [acc](const caf::error&) { acc->done(); };
  auto add = [acc](const auto& report) {
    acc->merge.add(report);
    acc->done();
  };
  for (auto& s : st.shards)
    if (s)
      self->request(s, caf::infinite, stats_atom::value)
        .then([add](shard_stats_msg& m) { add(m); }, ignore);
  for (auto& n : st.notifiers)
    self->request(n, caf::infinite, stats_atom::value)
      .then([add](notifier_stats_msg& m) { add(m); }, ignore);
  self->request(st.registry, caf::infinite, topics_atom::value)
    .then([add](topic_consumers_msg& m) { add(m.counts); }, ignore);
}

/// A dead-letter page being merged from its sources.
struct dead_letter_pages {
  logic::dead_letter_merge merge;
  size_t left = 0;
  size_t limit = 0;
  caf::error err;
  caf::typed_response_promise<net::dead_letters_reply> rp;

  void done() {
    if (--left > 0)
      return;
    if (err)
      rp.deliver(err);
    else
      rp.deliver(net::dead_letters_reply{merge.take(limit)});
  }
};

/// Why node `node`'s shards cannot be asked from here.
caf::error node_unavailable(engine_impl_actor* self, core::node_id node) {
  auto& map = *self->state.owner->map();
  uint32_t shard = 0;
  while (shard + 1 < map.shard_count() && map.owner_of(shard) != node)
    ++shard;
  return net::make_caf_error(
    core::errc::unavailable,
    self->state.owner->unavailable(shard, false).reason);
}

/// Merges one page of dead letters from every shard, in id order: this
/// node's shards, and unless the request was forwarded here, one page from
/// each other node that owns a shard.
void dead_letters(engine_impl_actor* self, net::dead_letters_request& req,
                  bool forwarded) {
  auto& st = self->state;
  auto rp = self->make_response_promise<net::dead_letters_reply>();
  if (!st.owner->map()) {
    rp.deliver(net::make_caf_error(core::errc::unavailable,
                                   st.owner->unavailable(0, false).reason));
    return;
  }
  size_t limit =
    req.pb.limit() == 0 ? st.cfg.shard.dead_letter_page : req.pb.limit();
  auto owned = st.owner->owned();
  auto others =
    forwarded ? std::vector<core::node_id>{} : st.owner->other_owners();
  auto acc = std::make_shared<dead_letter_pages>(dead_letter_pages{
    {}, owned.size() + others.size() + 1, limit, caf::error{}, rp});
  v1::DeadLettersRequest part;
  part.set_after_id(req.pb.after_id());
  part.set_limit(static_cast<uint32_t>(limit));
  auto add = [acc](net::dead_letters_reply& page) {
    acc->merge.add(page.pb);
    acc->done();
  };
  auto fail = [acc](const caf::error& err) {
    acc->err = err;
    acc->done();
  };
  for (auto i : owned) {
    if (st.shards[i])
      self
        ->request(st.shards[i], caf::infinite, net::dead_letters_request{part})
        .then(add, fail);
    else
      fail(shard_unavailable(self, i));
  }
  for (auto node : others) {
    if (st.peers.count(node) > 0)
      ask_peer<net::dead_letters_reply>(
        self, node, net::dead_letters_request{part}, add, fail);
    else
      fail(node_unavailable(self, node));
  }
  acc->done();
}

std::vector<shard_setup> shard_setups(engine_impl_actor* self) {
  auto& st = self->state;
  auto& cfg = st.cfg;
  std::vector<shard_setup> out;
  for (uint32_t i = 0; i < cfg.shard_count; ++i) {
    shard_setup s;
    s.index = i;
    s.store = shard_store_options(cfg, i);
    s.opts = logic::shard_options_of(cfg);
    s.engine = caf::actor_cast<caf::actor>(self);
    s.notifiers = st.notifiers;
    s.wall_clock_ms = cfg.wall_clock_ms;
    s.log = cfg.log;
    s.open_store = cfg.open_store;
    out.push_back(std::move(s));
  }
  return out;
}

/// Spawns the notifiers, the consumer registry and the supervisor (which
/// starts the shards), all linked to the engine.
void spawn_children(engine_impl_actor* self) {
  auto& st = self->state;
  auto me = caf::actor_cast<caf::actor>(self);
  auto& sys = self->system();
  logic::notifier_options dopts;
  dopts.max_in_flight_total = st.cfg.max_in_flight_total;
  dopts.max_queued_per_topic = st.cfg.max_queued_per_topic;
  for (uint32_t i = 0; i < st.cfg.notifiers; ++i) {
    st.notifiers.push_back(
      spawn_notifier(sys, me, st.cfg.shard_count, dopts, st.cfg.wall_clock_ms));
    self->link_to(st.notifiers.back());
  }
  st.registry = spawn_consumer_registry(
    sys, st.notifiers, st.cfg.max_in_flight_per_consumer,
    st.cfg.default_max_batch, st.cfg.shard.limits.max_topic_bytes);
  self->link_to(st.registry);
  std::vector<bool> active(st.cfg.shard_count, false);
  for (auto i : st.initial_left)
    active[i] = true;
  st.supervisor =
    spawn_supervisor(sys, me, shard_setups(self), std::move(active),
                     st.cfg.max_restarts_per_minute);
  self->link_to(st.supervisor);
  self->monitor(st.supervisor);
}

/// Stopping: the supervisor stops the shards, which flush and close their
/// stores; the engine goes last (when the supervisor is down), so that
/// waiting for it means waiting for all of them.
void set_stop_handlers(engine_impl_actor* self) {
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    if (msg.source == st.supervisor.address()) {
      self->quit(st.stopping ? st.stop_reason : msg.reason);
      return;
    }
    // A consumer of a subscription made here ended; the other nodes'
    // registries see it end themselves.
    st.watched.erase(msg.source);
    std::erase_if(st.subscriptions, [&](const remembered_subscription& s) {
      return s.consumer.address() == msg.source;
    });
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    if (st.stopping)
      return;
    st.stopping = true;
    st.stop_reason = msg.reason
                       ? msg.reason
                       : caf::make_error(caf::exit_reason::user_shutdown);
    for (auto& n : st.notifiers)
      self->send_exit(n, st.stop_reason);
    self->send_exit(st.registry, st.stop_reason);
    self->send_exit(st.supervisor, st.stop_reason);
  });
}

void on_settle_batch(engine_impl_actor* self, settle_batch_msg& msg) {
  // Before a notifier knows a shard; a shard that is down misses its
  // verdicts, and the leases redeliver those tasks.
  auto& st = self->state;
  std::vector<settle_batch_msg> parts(st.shards.size());
  for (auto& item : msg.items)
    parts[st.router->shard_of(item.ref.id)].items.push_back(std::move(item));
  for (size_t i = 0; i < parts.size(); ++i)
    if (!parts[i].items.empty() && st.shards[i])
      self->send(st.shards[i], std::move(parts[i]));
}

/// Counts the answers of shard `msg.index`'s current actor only: an
/// earlier one's pending tasks were reset when it stopped.
void on_answered(engine_impl_actor* self, const schedules_answered_msg& msg) {
  auto& st = self->state;
  if (msg.index < st.shards.size() && st.shards[msg.index] &&
      self->current_sender() ==
        caf::actor_cast<caf::strong_actor_ptr>(st.shards[msg.index]))
    st.admission->answered(msg.index, msg.tasks);
}

void on_topic_status(engine_impl_actor* self, topic_status_msg& msg) {
  auto& st = self->state;
  if (msg.available)
    st.available.insert(msg.topic);
  else
    st.available.erase(msg.topic);
  for (auto& shard : st.shards)
    if (shard)
      self->send(shard, msg);
}

/// Subscribes `sub.consumer` at node `node`'s engine (forwarded, so it
/// goes no further); a failure is logged: the node may be down, and its
/// engine gets the subscription again when it is set as a peer again.
void subscribe_at(engine_impl_actor* self, core::node_id node,
                  const remembered_subscription& sub) {
  auto timeout = std::chrono::milliseconds{self->state.cfg.forward_timeout_ms};
  auto& peer = self->state.peers.at(node);
  auto log = [self, node, topic = sub.req.topic()](const caf::error& err) {
    self->state.cfg.log("dally: subscribing to topic " + topic + " at node " +
                        std::to_string(node) +
                        " failed: " + net::describe(err));
  };
  auto req = net::subscribe_request{sub.req};
  auto ok = [](net::empty_reply&) {};
  if (sub.batch)
    self
      ->request(peer, timeout, forwarded_atom::value, std::move(req),
                caf::actor_cast<batch_consumer_actor>(sub.consumer))
      .then(ok, log);
  else
    self
      ->request(peer, timeout, forwarded_atom::value, std::move(req),
                caf::actor_cast<consumer_actor>(sub.consumer))
      .then(ok, log);
}

/// A subscription the registry here accepted: remember it and make it at
/// every other node.
void subscribed(engine_impl_actor* self, remembered_subscription sub) {
  auto& st = self->state;
  std::erase_if(st.subscriptions, [&](const remembered_subscription& s) {
    return s.consumer == sub.consumer && s.req.topic() == sub.req.topic();
  });
  if (st.watched.insert(sub.consumer.address()).second)
    self->monitor(sub.consumer);
  for (auto& [node, peer] : st.peers)
    subscribe_at(self, node, sub);
  st.subscriptions.push_back(std::move(sub));
}

/// Answers the map installs whose shards are all opened and closed.
void check_installed(engine_impl_actor* self) {
  auto& st = self->state;
  if (!st.opening.empty() || !st.closing.empty())
    return;
  for (auto& w : st.install_waiters) {
    for (auto i : w.answer.opened)
      if (st.open_errors.count(i) > 0)
        w.answer.failed.push_back(i);
    w.rp.deliver(std::move(w.answer));
  }
  st.install_waiters.clear();
}

void on_shard_up(engine_impl_actor* self, shard_up_msg& msg) {
  auto& st = self->state;
  if (msg.index >= st.shards.size() || !st.owner->owns(msg.index))
    return; // lost by a newer map; the supervisor is closing it
  st.shards[msg.index] = msg.shard;
  st.admission->reset(msg.index);
  for (auto& topic : st.available)
    self->send(msg.shard, topic_status_msg{topic, true});
  bool first = !st.ever_up[msg.index];
  st.ever_up[msg.index] = true;
  bool opened = st.opening.erase(msg.index) > 0;
  st.open_errors.erase(msg.index);
  if (st.initial_left.erase(msg.index) > 0)
    check_ready(self);
  else if (!first && !opened)
    ++st.restarts;
  check_installed(self);
}

void on_shard_down(engine_impl_actor* self, shard_down_msg& msg) {
  auto& st = self->state;
  if (msg.index >= st.shards.size())
    return;
  st.shards[msg.index] = nullptr;
  st.admission->reset(msg.index);
  auto err = net::from_caf(msg.reason);
  auto failure = net::make_caf_error(
    err.code(), "shard " + std::to_string(msg.index) + ": " + err.message());
  if (st.initial_left.count(msg.index) > 0 && !st.start_error) {
    st.start_error = failure;
    check_ready(self);
  } else if (st.opening.count(msg.index) > 0 &&
             err.code() != core::errc::store_locked) {
    // A locked store is retried by the supervisor: its previous owner is
    // still closing it.
    st.opening.erase(msg.index);
    st.open_errors[msg.index] = failure;
    st.cfg.log("dally: " + net::describe(failure));
    check_installed(self);
  }
}

void on_shard_closed(engine_impl_actor* self, shard_closed_msg& msg) {
  self->state.closing.erase(msg.index);
  check_installed(self);
}

/// New tasks without a key go round the shards this node runs, so that it
/// hands out ids only in its own shards; a node that runs none sends them
/// round every shard (to their owners).
void update_turns(engine_impl_actor* self) {
  auto& st = self->state;
  st.router->set_turns(st.owner->owned());
}

caf::result<map_installed_msg> on_install(engine_impl_actor* self,
                                          install_map_msg& msg) {
  auto& st = self->state;
  auto change = st.owner->install(std::move(msg.map));
  if (!change)
    return net::to_caf(change.err());
  for (auto i : change->close) {
    if (st.initial_left.erase(i) > 0)
      check_ready(self);
    st.shards[i] = nullptr;
    st.admission->reset(i);
    st.opening.erase(i);
    st.open_errors.erase(i);
    st.closing.insert(i);
    self->send(st.supervisor, close_shard_msg{i});
  }
  for (auto i : change->open) {
    st.open_errors.erase(i);
    st.opening.insert(i);
    self->send(st.supervisor, open_shard_msg{i});
  }
  update_turns(self);
  auto rp = self->make_response_promise<map_installed_msg>();
  st.install_waiters.push_back(install_waiter{
    rp, map_installed_msg{
          st.owner->map()->epoch, change->open, change->close, {}}});
  check_installed(self);
  return rp;
}

/// Replaces the other nodes' engines; one that is new (or a new handle)
/// gets every subscription made here.
void on_set_peers(engine_impl_actor* self, set_peers_msg& msg) {
  auto& st = self->state;
  auto old = std::move(st.peers);
  st.peers.clear();
  for (auto& [node, handle] : msg.engines)
    if (node != st.cfg.node_id && handle)
      st.peers.emplace(node, caf::actor_cast<caf::actor>(handle));
  for (auto& [node, peer] : st.peers) {
    auto i = old.find(node);
    if (i != old.end() && i->second == peer)
      continue;
    for (auto& sub : st.subscriptions)
      subscribe_at(self, node, sub);
  }
}

caf::result<ready_atom> on_ready(engine_impl_actor* self) {
  auto& st = self->state;
  if (st.start_error)
    return st.start_error;
  if (st.initial_left.empty())
    return ready_atom::value;
  auto rp = self->make_response_promise();
  st.ready_waiters.push_back(rp);
  return rp;
}

/// The shard of a request about an existing task.
template<class Req>
uint64_t task_of(const Req& req) {
  return req.pb.id();
}

template<class Req>
requires requires(const Req& r) {
  r.pb.id().task_id();
}
uint64_t task_of(const Req& req) {
  return req.pb.id().task_id();
}

/// Routes a request about task `task_of(req)`, from a client or (prefixed
/// with forwarded_atom) from another node's engine.
template<class Req>
caf::message_handler by_task(engine_impl_actor* self) {
  return {
    [self](Req& req) {
      route(self, self->state.router->shard_of(task_of(req)), req, false);
    },
    [self](forwarded_atom, Req& req) {
      route(self, self->state.router->shard_of(task_of(req)), req, true);
    },
  };
}

/// Subscribes at the registry here (whose answer is the client's) and, on
/// a cluster node (not open_all_shards) and unless forwarded, at every other
/// node; a subscription the registry will refuse (a bad topic, no consumer,
/// batches for a plain consumer) is not repeated. A single node adds no
/// message to a subscription.
template<class Consumer>
void subscribe(engine_impl_actor* self, net::subscribe_request& req,
               Consumer& consumer, bool forwarded) {
  auto& st = self->state;
  constexpr bool batch = std::is_same_v<Consumer, batch_consumer_actor>;
  bool valid = consumer &&
               !core::validate_topic(req.pb.topic(), st.cfg.shard.limits) &&
               (batch || req.pb.max_batch() <= 1);
  if (!forwarded && !st.cfg.open_all_shards && valid)
    subscribed(self, remembered_subscription{
                       req.pb, caf::actor_cast<caf::actor>(consumer), batch});
  self->delegate(st.registry, std::move(req), std::move(consumer));
}

/// Unsubscribes here, and (unless forwarded) at every other node.
void unsubscribe(engine_impl_actor* self, net::unsubscribe_request& req,
                 consumer_actor& consumer, bool forwarded) {
  auto& st = self->state;
  if (!forwarded) {
    auto handle = caf::actor_cast<caf::actor>(consumer);
    std::erase_if(st.subscriptions, [&](const remembered_subscription& s) {
      return s.consumer == handle && s.req.topic() == req.pb.topic();
    });
    auto timeout = std::chrono::milliseconds{st.cfg.forward_timeout_ms};
    for (auto& [node, peer] : st.peers)
      self->request(peer, timeout, forwarded_atom::value, req, consumer)
        .then([](net::empty_reply&) {}, [](const caf::error&) {});
  }
  self->delegate(st.registry, std::move(req), std::move(consumer));
}

/// Subscriptions: at the registry here, and at every other node's engine
/// (forwarded ones only here).
caf::message_handler subscriptions(engine_impl_actor* self) {
  return {
    [self](net::subscribe_request& req, consumer_actor& consumer) {
      subscribe(self, req, consumer, false);
    },
    [self](net::subscribe_request& req, batch_consumer_actor& consumer) {
      subscribe(self, req, consumer, false);
    },
    [self](net::unsubscribe_request& req, consumer_actor& consumer) {
      unsubscribe(self, req, consumer, false);
    },
    [self](forwarded_atom, net::subscribe_request& req,
           consumer_actor& consumer) { subscribe(self, req, consumer, true); },
    [self](forwarded_atom, net::subscribe_request& req,
           batch_consumer_actor& consumer) {
      subscribe(self, req, consumer, true);
    },
    [self](forwarded_atom, net::unsubscribe_request& req,
           consumer_actor& consumer) {
      unsubscribe(self, req, consumer, true);
    },
  };
}

/// The requests that create tasks or span shards.
caf::message_handler spanning_requests(engine_impl_actor* self) {
  return {
    [self](net::schedule_request& req) {
      route(self, self->state.router->shard_for(req.pb), req, false, 1);
    },
    [self](forwarded_atom, net::schedule_request& req) {
      route(self, self->state.router->shard_for(req.pb), req, true, 1);
    },
    [self](net::schedule_batch_request& req) {
      schedule_batch(self, req, false);
    },
    [self](forwarded_atom, net::schedule_batch_request& req) {
      schedule_batch(self, req, true);
    },
    [self](net::dead_letters_request& req) { dead_letters(self, req, false); },
    [self](forwarded_atom, net::dead_letters_request& req) {
      dead_letters(self, req, true);
    },
    [self](net::stats_request&) { stats(self); },
    [self](net::cluster_map_request&) -> caf::result<net::cluster_map_reply> {
      auto report = logic::cluster_map_report(*self->state.owner);
      if (!report)
        return net::to_caf(report.err());
      return net::cluster_map_reply{std::move(*report)};
    },
  };
}

/// The requests of clients and consumers.
caf::message_handler client_requests(engine_impl_actor* self) {
  return spanning_requests(self)
    .or_else(by_task<net::revoke_request>(self))
    .or_else(by_task<net::reschedule_request>(self))
    .or_else(by_task<net::get_request>(self))
    .or_else(by_task<net::kick_request>(self))
    .or_else(by_task<net::ack_request>(self))
    .or_else(by_task<net::nack_request>(self))
    .or_else(by_task<net::touch_request>(self))
    .or_else(subscriptions(self));
}

/// The messages of the engine's own actors, of the node (shard maps,
/// peers) and of tests.
caf::message_handler node_messages(engine_impl_actor* self) {
  return {
    [self](requeue_msg& msg) { tell_owner(self, msg.ref.id, msg); },
    [self](undelivered_msg& msg) { tell_owner(self, msg.ref.id, msg); },
    [self](settle_batch_msg& msg) { on_settle_batch(self, msg); },
    [self](schedules_answered_msg& msg) { on_answered(self, msg); },
    [self](topic_status_msg& msg) { on_topic_status(self, msg); },
    [self](shard_up_msg& msg) { on_shard_up(self, msg); },
    [self](shard_down_msg& msg) { on_shard_down(self, msg); },
    [self](shard_closed_msg& msg) { on_shard_closed(self, msg); },
    [self](install_map_msg& msg) { return on_install(self, msg); },
    [self](set_peers_msg& msg) { on_set_peers(self, msg); },
    [self](shards_atom) { return shard_handles_msg{self->state.shards}; },
    [self](ready_atom) { return on_ready(self); },
  };
}

caf::behavior engine_impl(engine_impl_actor* self, logic::engine_config cfg,
                          std::shared_ptr<net::front_door> door) {
  self->set_door(std::move(door));
  auto& st = self->state;
  if (!cfg.wall_clock_ms)
    cfg.wall_clock_ms = logic::system_wall_clock_ms;
  if (!cfg.log)
    cfg.log = [](const std::string& line) {
      auto text = line + "\n";
      std::fwrite(text.data(), 1, text.size(), stderr);
      std::fflush(stderr);
    };
  cfg.shard_count = std::max<uint32_t>(1, cfg.shard_count);
  cfg.notifiers = std::max<uint32_t>(1, cfg.notifiers);
  st.cfg = std::move(cfg);
  st.router.emplace(core::shard_map::single_node(st.cfg.shard_count));
  st.admission.emplace(st.cfg.shard_count, st.cfg.max_pending_per_shard);
  st.owner.emplace(st.cfg.node_id, st.cfg.shard_count, st.cfg.open_all_shards);
  for (auto i : st.owner->owned())
    st.initial_left.insert(i);
  update_turns(self);
  st.shards.resize(st.cfg.shard_count);
  st.ever_up.resize(st.cfg.shard_count, false);
  spawn_children(self);
  set_stop_handlers(self);
  return client_requests(self).or_else(node_messages(self));
}

} // namespace

storage::store_options shard_store_options(const logic::engine_config& cfg,
                                           uint32_t shard) {
  storage::store_options out;
  out.path =
    (std::filesystem::path{cfg.data_dir} / ("shard-" + std::to_string(shard)))
      .string();
  out.shard = shard;
  out.shard_count = cfg.shard_count;
  out.durability = cfg.durability;
  out.sync_period_ms = cfg.sync_period_ms;
  out.write_buffer_bytes = cfg.write_buffer_bytes;
  out.block_cache_bytes = cfg.block_cache_bytes;
  out.max_deferred_index = cfg.max_deferred_index;
  out.btree_task_memtable = cfg.btree_task_memtable;
  out.background_at_low_priority = cfg.rocksdb_background_at_low_priority;
  out.file_system = cfg.file_system;
  return out;
}

engine_actor spawn_engine(caf::actor_system& sys, logic::engine_config cfg,
                          std::shared_ptr<net::front_door> door) {
  return caf::actor_cast<engine_actor>(
    sys.spawn(engine_impl, std::move(cfg), std::move(door)));
}

} // namespace dally::actors
