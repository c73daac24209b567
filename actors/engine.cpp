#include "actors/engine.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
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
#include "net/error.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

struct engine_state {
  static inline const char* name = "dally.engine";

  logic::engine_config cfg;
  std::vector<caf::actor> shards;
  std::vector<caf::actor> notifiers;
  caf::actor registry;
  caf::actor supervisor;
  /// Topics some consumer can take deliveries of; sent to every (re)started
  /// shard before anything else.
  std::set<std::string> available;
  uint32_t next_shard = 0;
  uint32_t shards_up = 0;
  std::vector<bool> ever_up;
  uint64_t restarts = 0;
  caf::error start_error;
  std::vector<caf::response_promise> ready_waiters;
  bool stopping = false;
  caf::error stop_reason;
};

using engine_impl_actor = caf::stateful_actor<engine_state>;

/// The shard of an idempotency key: the same for every retry.
uint32_t key_shard(const std::string& key, size_t count) {
  return static_cast<uint32_t>(hash_index(key, count));
}

caf::error shard_unavailable(uint32_t index) {
  return net::make_caf_error(core::errc::unavailable,
                             "shard " + std::to_string(index) +
                               " is restarting; retry the request");
}

/// Forwards the current request to the shard owning `index`, keeping the
/// sender's reply address; fails with `unavailable` while it is down.
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

uint32_t owner(engine_impl_actor* self, uint64_t id) {
  return static_cast<uint32_t>(id % self->state.shards.size());
}

uint32_t shard_for(engine_impl_actor* self, const v1::ScheduleRequest& req) {
  auto& st = self->state;
  if (req.has_idempotency_key())
    return key_shard(req.idempotency_key(), st.shards.size());
  auto i = st.next_shard;
  st.next_shard = (st.next_shard + 1) % st.shards.size();
  return i;
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

/// Forwards a batch without idempotency keys whole to the next shard in
/// turn; splits one with keys by shard, sends each part, and puts the
/// answers back in the request's order.
void schedule_batch(engine_impl_actor* self, net::schedule_batch_request& req) {
  auto& st = self->state;
  auto n = req.pb.tasks_size();
  const auto& tasks = req.pb.tasks();
  if (n > 0 && st.shards[st.next_shard] &&
      std::none_of(tasks.begin(), tasks.end(), [](const auto& task) {
        return task.has_idempotency_key();
      })) {
    // Its shard's reply is the answer: no copy of every task's request and
    // result to split and put back together.
    auto shard = st.next_shard;
    st.next_shard = (st.next_shard + 1) % st.shards.size();
    self->delegate(st.shards[shard], std::move(req));
    return;
  }
  auto rp = self->make_response_promise<net::schedule_batch_reply>();
  struct pending {
    v1::ScheduleBatchReply reply;
    size_t parts_left = 0;
    caf::typed_response_promise<net::schedule_batch_reply> rp;
  };
  auto acc = std::make_shared<pending>();
  acc->rp = rp;
  for (int i = 0; i < n; ++i)
    acc->reply.add_results();
  // Tasks without a key all go to one shard, keyed ones to their key's.
  std::map<uint32_t, std::pair<net::schedule_batch_request, std::vector<int>>>
    parts;
  uint32_t unkeyed = st.next_shard;
  bool used_unkeyed = false;
  for (int i = 0; i < n; ++i) {
    auto& task = *req.pb.mutable_tasks(i);
    uint32_t shard;
    if (task.has_idempotency_key()) {
      shard = key_shard(task.idempotency_key(), st.shards.size());
    } else {
      shard = unkeyed;
      used_unkeyed = true;
    }
    auto& part = parts[shard];
    *part.first.pb.add_tasks() = std::move(task);
    part.second.push_back(i);
  }
  if (used_unkeyed)
    st.next_shard = (st.next_shard + 1) % st.shards.size();
  if (parts.empty()) {
    rp.deliver(net::schedule_batch_reply{});
    return;
  }
  acc->parts_left = parts.size();
  for (auto& [shard, part] : parts) {
    auto positions = std::move(part.second);
    auto fail_all = [acc, positions](const caf::error& err) {
      auto e = net::from_caf(err);
      for (auto pos : positions) {
        auto* f = acc->reply.mutable_results(pos)->mutable_failure();
        f->set_code(static_cast<uint32_t>(e.code()));
        f->set_message(e.message());
      }
      if (--acc->parts_left == 0)
        acc->rp.deliver(net::schedule_batch_reply{std::move(acc->reply)});
    };
    if (!st.shards[shard]) {
      fail_all(shard_unavailable(shard));
      continue;
    }
    self->request(st.shards[shard], caf::infinite, std::move(part.first))
      .then(
        [acc, positions](net::schedule_batch_reply& sub) {
          for (size_t k = 0; k < positions.size(); ++k)
            *acc->reply.mutable_results(positions[k]) =
              std::move(*sub.pb.mutable_results(static_cast<int>(k)));
          if (--acc->parts_left == 0)
            acc->rp.deliver(net::schedule_batch_reply{std::move(acc->reply)});
        },
        fail_all);
  }
}

/// Asks every shard, notifier and the registry for their numbers.
void stats(engine_impl_actor* self) {
  auto& st = self->state;
  auto rp = self->make_response_promise<net::stats_reply>();
  struct pending {
    v1::StatsReply reply;
    std::map<std::string, v1::TopicStats> topics;
    size_t left = 0;
    caf::typed_response_promise<net::stats_reply> rp;
    void done() {
      if (--left > 0)
        return;
      for (auto& [name, t] : topics)
        *reply.add_topics() = t;
      rp.deliver(net::stats_reply{std::move(reply)});
    }
  };
  auto acc = std::make_shared<pending>();
  acc->rp = rp;
  acc->reply.set_shards(static_cast<uint32_t>(st.shards.size()));
  acc->reply.set_shard_restarts(st.restarts);
  acc->left = 1 + st.notifiers.size();
  for (auto& s : st.shards)
    if (s)
      ++acc->left;
  auto topic = [acc](const std::string& name) -> v1::TopicStats& {
    auto& t = acc->topics[name];
    t.set_topic(name);
    return t;
  };
  auto ignore = [acc](const caf::error&) { acc->done(); };
  for (auto& s : st.shards) {
    if (!s)
      continue;
    self->request(s, caf::infinite, stats_atom::value)
      .then(
        [acc, topic](shard_stats_msg& m) {
          auto& r = acc->reply;
          auto& c = m.counters;
          r.set_in_window(r.in_window() + m.window + m.backlog);
          r.set_scheduled(r.scheduled() + c.scheduled);
          r.set_fired(r.fired() + c.fired);
          r.set_acked(r.acked() + c.acked);
          r.set_nacked(r.nacked() + c.nacked);
          r.set_redelivered(r.redelivered() + c.redelivered);
          r.set_dead_lettered(r.dead_lettered() + c.dead_lettered);
          r.set_revoked(r.revoked() + c.revoked);
          r.set_commits(r.commits() + c.commits);
          r.set_memtable_bytes(r.memtable_bytes() + m.memtable_bytes);
          r.set_quarantined(r.quarantined() + m.quarantined);
          for (auto& [name, n] : m.waiting) {
            r.set_waiting(r.waiting() + n);
            auto& t = topic(name);
            t.set_waiting(t.waiting() + n);
          }
          acc->done();
        },
        ignore);
  }
  for (auto& n : st.notifiers) {
    self->request(n, caf::infinite, stats_atom::value)
      .then(
        [acc, topic](notifier_stats_msg& m) {
          acc->reply.set_in_flight(acc->reply.in_flight() + m.in_flight);
          for (auto& [name, c] : m.topics) {
            auto& t = topic(name);
            t.set_in_flight(t.in_flight() + c.in_flight);
            t.set_queued(t.queued() + c.queued);
            t.set_delivered(t.delivered() + c.delivered);
          }
          acc->done();
        },
        ignore);
  }
  self->request(st.registry, caf::infinite, topics_atom::value)
    .then(
      [acc, topic](topic_consumers_msg& m) {
        for (auto& [name, n] : m.counts)
          topic(name).set_consumers(n);
        acc->done();
      },
      ignore);
}

/// Merges one page of dead letters from every shard, in id order.
void dead_letters(engine_impl_actor* self, net::dead_letters_request& req) {
  auto& st = self->state;
  auto rp = self->make_response_promise<net::dead_letters_reply>();
  size_t limit =
    req.pb.limit() == 0 ? st.cfg.shard.dead_letter_page : req.pb.limit();
  struct pending {
    std::vector<v1::DeadLetter> dead;
    bool more = false;
    size_t left = 0;
    size_t limit = 0;
    caf::error err;
    caf::typed_response_promise<net::dead_letters_reply> rp;
    void done() {
      if (--left > 0)
        return;
      if (err) {
        rp.deliver(err);
        return;
      }
      std::sort(dead.begin(), dead.end(),
                [](auto& x, auto& y) { return x.task().id() < y.task().id(); });
      v1::DeadLettersReply out;
      for (size_t i = 0; i < dead.size() && i < limit; ++i)
        *out.add_dead() = std::move(dead[i]);
      if ((more || dead.size() > limit) && out.dead_size() > 0)
        out.set_next_after_id(out.dead(out.dead_size() - 1).task().id());
      rp.deliver(net::dead_letters_reply{std::move(out)});
    }
  };
  auto acc = std::make_shared<pending>();
  acc->rp = rp;
  acc->limit = limit;
  acc->left = st.shards.size();
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
          for (auto& d : *page.pb.mutable_dead())
            acc->dead.push_back(std::move(d));
          if (page.pb.next_after_id() != 0)
            acc->more = true;
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
    s.opts = cfg.shard;
    if (s.opts.max_unanswered_per_topic == 0 &&
        cfg.max_unanswered_per_topic > 0)
      s.opts.max_unanswered_per_topic =
        (cfg.max_unanswered_per_topic + cfg.shard_count - 1) / cfg.shard_count;
    s.engine = caf::actor_cast<caf::actor>(self);
    s.notifiers = st.notifiers;
    s.wall_clock_ms = cfg.wall_clock_ms;
    s.open_store = cfg.open_store;
    out.push_back(std::move(s));
  }
  return out;
}

caf::behavior engine_impl(engine_impl_actor* self, logic::engine_config cfg) {
  auto& st = self->state;
  if (!cfg.wall_clock_ms)
    cfg.wall_clock_ms = logic::system_wall_clock_ms;
  cfg.shard_count = std::max<uint32_t>(1, cfg.shard_count);
  cfg.notifiers = std::max<uint32_t>(1, cfg.notifiers);
  st.cfg = std::move(cfg);
  st.shards.resize(st.cfg.shard_count);
  st.ever_up.resize(st.cfg.shard_count, false);
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
  st.registry = spawn_consumer_registry(sys, st.notifiers,
                                        st.cfg.max_in_flight_per_consumer,
                                        st.cfg.default_max_batch);
  self->link_to(st.registry);
  st.supervisor = spawn_supervisor(sys, me, shard_setups(self),
                                   st.cfg.max_restarts_per_minute);
  self->link_to(st.supervisor);
  self->monitor(st.supervisor);
  self->set_down_handler([self](caf::down_msg& msg) {
    // The supervisor goes once every shard has closed its store.
    auto& st = self->state;
    if (msg.source == st.supervisor.address())
      self->quit(st.stopping ? st.stop_reason : msg.reason);
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    // Stopping: the supervisor stops the shards, which flush and close
    // their stores; the engine goes last, so that waiting for it means
    // waiting for all of them.
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
  return {
    [self](net::schedule_request& req) {
      route(self, shard_for(self, req.pb), req);
    },
    [self](net::schedule_batch_request& req) { schedule_batch(self, req); },
    [self](net::revoke_request& req) {
      route(self, owner(self, req.pb.id()), req);
    },
    [self](net::reschedule_request& req) {
      route(self, owner(self, req.pb.id()), req);
    },
    [self](net::get_request& req) {
      route(self, owner(self, req.pb.id()), req);
    },
    [self](net::kick_request& req) {
      route(self, owner(self, req.pb.id()), req);
    },
    [self](net::ack_request& req) {
      route(self, owner(self, req.pb.id().task_id()), req);
    },
    [self](net::nack_request& req) {
      route(self, owner(self, req.pb.id().task_id()), req);
    },
    [self](net::touch_request& req) {
      route(self, owner(self, req.pb.id().task_id()), req);
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
    [self](requeue_msg& msg) {
      auto& shard = self->state.shards[owner(self, msg.ref.id)];
      if (shard)
        self->send(shard, msg);
    },
    [self](undelivered_msg& msg) {
      auto& shard = self->state.shards[owner(self, msg.ref.id)];
      if (shard)
        self->send(shard, msg);
    },
    [self](settle_batch_msg& msg) {
      // Before a notifier knows a shard; a shard that is down misses its
      // verdicts, and the leases redeliver those tasks.
      auto& st = self->state;
      std::vector<settle_batch_msg> parts(st.shards.size());
      for (auto& item : msg.items)
        parts[owner(self, item.ref.id)].items.push_back(std::move(item));
      for (size_t i = 0; i < parts.size(); ++i)
        if (!parts[i].items.empty() && st.shards[i])
          self->send(st.shards[i], std::move(parts[i]));
    },
    [self](topic_status_msg& msg) {
      auto& st = self->state;
      if (msg.available)
        st.available.insert(msg.topic);
      else
        st.available.erase(msg.topic);
      for (auto& shard : st.shards)
        if (shard)
          self->send(shard, msg);
    },
    [self](shard_up_msg& msg) {
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
    },
    [self](shard_down_msg& msg) {
      auto& st = self->state;
      if (msg.index >= st.shards.size())
        return;
      st.shards[msg.index] = nullptr;
      if (!st.ever_up[msg.index] && !st.start_error) {
        auto err = net::from_caf(msg.reason);
        st.start_error =
          net::make_caf_error(err.code(), "shard " + std::to_string(msg.index) +
                                            ": " + err.message());
        check_ready(self);
      }
    },
    [self](shards_atom) { return shard_handles_msg{self->state.shards}; },
    [self](ready_atom) -> caf::result<ready_atom> {
      auto& st = self->state;
      if (st.start_error)
        return st.start_error;
      if (st.shards_up == st.shards.size())
        return ready_atom::value;
      auto rp = self->make_response_promise();
      st.ready_waiters.push_back(rp);
      return rp;
    },
  };
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
