#include "actors/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/consumer_registry.hpp"
#include "actors/messages.hpp"
#include "actors/notifier.hpp"
#include "actors/shard.hpp"
#include "actors/supervisor.hpp"
#include "logic/engine_reports.hpp"
#include "logic/engine_routing.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

struct engine_state {
  static inline const char* name = "dally.engine";

  logic::engine_config cfg;
  /// Placement of requests on the shards.
  std::optional<logic::request_router> router;
  std::vector<caf::actor> shards;
  std::vector<caf::actor> notifiers;
  caf::actor registry;
  caf::actor supervisor;
  /// Topics some consumer can take deliveries of; sent to every (re)started
  /// shard before anything else.
  std::set<std::string> available;
  uint32_t shards_up = 0;
  std::vector<bool> ever_up;
  uint64_t restarts = 0;
  caf::error start_error;
  std::vector<caf::response_promise> ready_waiters;
  bool stopping = false;
  caf::error stop_reason;
};

using engine_impl_actor = caf::stateful_actor<engine_state>;

caf::error shard_unavailable(uint32_t index) {
  return net::make_caf_error(core::errc::unavailable,
                             "shard " + std::to_string(index) +
                               " is restarting; retry the request");
}

/// Forwards the current request to shard `index`, keeping the sender's
/// reply address; fails with `unavailable` while it is down.
template<class Msg>
void route(engine_impl_actor* self, uint32_t index, Msg& msg) {
  auto& shard = self->state.shards[index];
  if (!shard) {
    auto rp = self->make_response_promise();
    rp.deliver(shard_unavailable(index));
    return;
  }
  self->delegate(shard, std::move(msg));
}

/// Forwards the current request to the shard that owns task `id`.
template<class Msg>
void route_id(engine_impl_actor* self, uint64_t id, Msg& msg) {
  route(self, self->state.router->shard_of(id), msg);
}

/// Sends `msg` to the shard that owns task `id`, if it runs.
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
  } else if (st.shards_up == st.shards.size()) {
    for (auto& rp : st.ready_waiters)
      rp.deliver(ready_atom::value);
    st.ready_waiters.clear();
  }
}

/// Sends one part of a split schedule_batch and puts its answer in place.
void send_part(engine_impl_actor* self, logic::batch_part& part,
               std::shared_ptr<logic::batch_answer> acc,
               caf::typed_response_promise<net::schedule_batch_reply> rp) {
  auto finish = [acc, rp]() mutable {
    if (acc->complete())
      rp.deliver(net::schedule_batch_reply{acc->take()});
  };
  auto fail_all = [acc, finish,
                   positions = part.positions](const caf::error& err) mutable {
    acc->fail(positions, net::from_caf(err));
    finish();
  };
  auto& shard = self->state.shards[part.shard];
  if (!shard) {
    fail_all(shard_unavailable(part.shard));
    return;
  }
  self
    ->request(shard, caf::infinite,
              net::schedule_batch_request{std::move(part.request)})
    .then(
      [acc, finish, positions = std::move(part.positions)](
        net::schedule_batch_reply& sub) mutable {
        acc->fill(positions, sub.pb);
        finish();
      },
      fail_all);
}

/// Forwards a batch without idempotency keys whole to the next shard in
/// turn, whose reply is the answer (no copy of every task's request and
/// result to split and put back together); splits one with keys by shard,
/// sends each part, and puts the answers back in the request's order.
void schedule_batch(engine_impl_actor* self, net::schedule_batch_request& req) {
  auto& st = self->state;
  auto whole =
    st.router->whole(req.pb, [&st](uint32_t i) { return !!st.shards[i]; });
  if (whole) {
    self->delegate(st.shards[*whole], std::move(req));
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
    send_part(self, part, acc, rp);
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

/// Merges one page of dead letters from every shard, in id order.
void dead_letters(engine_impl_actor* self, net::dead_letters_request& req) {
  auto& st = self->state;
  auto rp = self->make_response_promise<net::dead_letters_reply>();
  size_t limit =
    req.pb.limit() == 0 ? st.cfg.shard.dead_letter_page : req.pb.limit();
  struct pending {
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
  auto acc = std::make_shared<pending>(
    pending{{}, st.shards.size(), limit, caf::error{}, rp});
  for (uint32_t i = 0; i < st.shards.size(); ++i) {
    if (!st.shards[i]) {
      acc->err = shard_unavailable(i);
      acc->done();
      continue;
    }
    v1::DeadLettersRequest part;
    part.set_after_id(req.pb.after_id());
    part.set_limit(static_cast<uint32_t>(limit));
    self->request(st.shards[i], caf::infinite, net::dead_letters_request{part})
      .then(
        [acc](net::dead_letters_reply& page) {
          acc->merge.add(page.pb);
          acc->done();
        },
        [acc](const caf::error& err) {
          acc->err = err;
          acc->done();
        });
  }
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
  st.supervisor = spawn_supervisor(sys, me, shard_setups(self),
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
    if (msg.source == st.supervisor.address())
      self->quit(st.stopping ? st.stop_reason : msg.reason);
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

void on_shard_up(engine_impl_actor* self, shard_up_msg& msg) {
  auto& st = self->state;
  if (msg.index >= st.shards.size())
    return;
  st.shards[msg.index] = msg.shard;
  for (auto& topic : st.available)
    self->send(msg.shard, topic_status_msg{topic, true});
  if (st.ever_up[msg.index]) {
    ++st.restarts;
  } else {
    st.ever_up[msg.index] = true;
    ++st.shards_up;
    check_ready(self);
  }
}

void on_shard_down(engine_impl_actor* self, shard_down_msg& msg) {
  auto& st = self->state;
  if (msg.index >= st.shards.size())
    return;
  st.shards[msg.index] = nullptr;
  if (!st.ever_up[msg.index] && !st.start_error) {
    auto err = net::from_caf(msg.reason);
    st.start_error = net::make_caf_error(
      err.code(), "shard " + std::to_string(msg.index) + ": " + err.message());
    check_ready(self);
  }
}

caf::result<ready_atom> on_ready(engine_impl_actor* self) {
  auto& st = self->state;
  if (st.start_error)
    return st.start_error;
  if (st.shards_up == st.shards.size())
    return ready_atom::value;
  auto rp = self->make_response_promise();
  st.ready_waiters.push_back(rp);
  return rp;
}

/// The requests of clients and consumers.
caf::message_handler client_requests(engine_impl_actor* self) {
  return {
    [self](net::schedule_request& req) {
      route(self, self->state.router->shard_for(req.pb), req);
    },
    [self](net::schedule_batch_request& req) { schedule_batch(self, req); },
    [self](net::revoke_request& req) { route_id(self, req.pb.id(), req); },
    [self](net::reschedule_request& req) { route_id(self, req.pb.id(), req); },
    [self](net::get_request& req) { route_id(self, req.pb.id(), req); },
    [self](net::kick_request& req) { route_id(self, req.pb.id(), req); },
    [self](net::ack_request& req) {
      route_id(self, req.pb.id().task_id(), req);
    },
    [self](net::nack_request& req) {
      route_id(self, req.pb.id().task_id(), req);
    },
    [self](net::touch_request& req) {
      route_id(self, req.pb.id().task_id(), req);
    },
    [self](net::subscribe_request& req, consumer_actor& consumer) {
      self->delegate(self->state.registry, std::move(req), std::move(consumer));
    },
    [self](net::subscribe_request& req, batch_consumer_actor& consumer) {
      self->delegate(self->state.registry, std::move(req), std::move(consumer));
    },
    [self](net::unsubscribe_request& req, consumer_actor& consumer) {
      self->delegate(self->state.registry, std::move(req), std::move(consumer));
    },
    [self](net::stats_request&) { stats(self); },
    [self](net::dead_letters_request& req) { dead_letters(self, req); },
  };
}

/// The messages of the engine's own actors (and of tests).
caf::message_handler node_messages(engine_impl_actor* self) {
  return {
    [self](requeue_msg& msg) { tell_owner(self, msg.ref.id, msg); },
    [self](undelivered_msg& msg) { tell_owner(self, msg.ref.id, msg); },
    [self](settle_batch_msg& msg) { on_settle_batch(self, msg); },
    [self](topic_status_msg& msg) { on_topic_status(self, msg); },
    [self](shard_up_msg& msg) { on_shard_up(self, msg); },
    [self](shard_down_msg& msg) { on_shard_down(self, msg); },
    [self](shards_atom) { return shard_handles_msg{self->state.shards}; },
    [self](ready_atom) { return on_ready(self); },
  };
}

caf::behavior engine_impl(engine_impl_actor* self, logic::engine_config cfg) {
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

engine_actor spawn_engine(caf::actor_system& sys, logic::engine_config cfg) {
  return caf::actor_cast<engine_actor>(sys.spawn(engine_impl, std::move(cfg)));
}

} // namespace dally::actors
