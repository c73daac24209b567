#include "actors/supervisor.hpp"

#include <algorithm>
#include <chrono>

#include <caf/actor_ostream.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "actors/messages.hpp"
#include "logic/restart_backoff.hpp"
#include "net/error.hpp"
#include "net/owning_actor.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

using restart_atom = caf::atom_constant<caf::atom("restart")>;

struct supervised {
  shard_setup setup;
  caf::actor handle;
  bool started_once = false;
  logic::restart_backoff backoff;
  /// The node owns the shard: it runs, or is restarted.
  bool active = false;
  /// Stopping because the node lost it (not restarted on its down).
  bool closing = false;
  /// Opened by a map change: a first open that finds the store locked is
  /// retried (the previous owner is closing it).
  bool retry_locked = false;
};

struct supervisor_state {
  static inline const char* name = "dally.supervisor";

  caf::actor engine;
  std::vector<supervised> shards;
  bool stopping = false;
  caf::error stop_reason;
};

using supervisor_actor = net::owning_actor<supervisor_state>;

void start(supervisor_actor* self, uint32_t index) {
  auto& s = self->state.shards[index];
  s.setup.supervisor = caf::actor_cast<caf::actor>(self);
  s.handle = spawn_shard(self->system(), s.setup);
  self->monitor(s.handle);
}

/// Stop every shard and quit only once all have flushed and closed their
/// stores, so that whoever waits for us can reopen them.
void stop(supervisor_actor* self, const caf::exit_msg& msg) {
  auto& st = self->state;
  if (st.stopping)
    return;
  st.stopping = true;
  st.stop_reason = msg.reason;
  bool any = false;
  for (auto& s : st.shards)
    if (s.handle) {
      any = true;
      self->send_exit(s.handle, msg.reason);
    }
  if (!any)
    self->quit(msg.reason);
}

/// Whether a shard that never opened its store is tried again: only when
/// a map change opened it and its store is still locked.
bool retry_first_open(const supervised& s, const caf::error& reason) {
  return s.retry_locked &&
         net::from_caf(reason).code() == core::errc::store_locked;
}

/// Shard `index` went down: tell the engine, and restart it unless it
/// never opened its store (restarting will not help then).
void shard_down(supervisor_actor* self, uint32_t index,
                const caf::down_msg& msg) {
  auto& st = self->state;
  auto& s = st.shards[index];
  s.handle = nullptr;
  auto reason = net::describe(msg.reason);
  self->send(st.engine, shard_down_msg{index, msg.reason});
  if (!s.started_once && !retry_first_open(s, msg.reason))
    return;
  auto delay = s.backoff.failed(std::chrono::steady_clock::now());
  caf::aout(self) << "dally: shard " << index << " failed (" << reason
                  << "), restarting in " << delay.count() << " ms" << std::endl;
  self->delayed_send(self, delay, restart_atom::value, index);
}

void on_down(supervisor_actor* self, const caf::down_msg& msg) {
  auto& st = self->state;
  auto i = std::find_if(st.shards.begin(), st.shards.end(), [&](auto& s) {
    return s.handle && s.handle.address() == msg.source;
  });
  if (i == st.shards.end())
    return;
  if (st.stopping) {
    i->handle = nullptr;
    if (std::none_of(st.shards.begin(), st.shards.end(),
                     [](auto& s) { return static_cast<bool>(s.handle); }))
      self->quit(st.stop_reason);
    return;
  }
  auto index = static_cast<uint32_t>(i - st.shards.begin());
  if (i->closing) {
    i->handle = nullptr;
    i->closing = false;
    self->send(st.engine, shard_closed_msg{index});
    if (i->active)
      start(self, index);
    return;
  }
  shard_down(self, index, msg);
}

/// The node owns shard `index` now.
void open_shard(supervisor_actor* self, uint32_t index) {
  auto& st = self->state;
  if (st.stopping || index >= st.shards.size())
    return;
  auto& s = st.shards[index];
  s.active = true;
  s.retry_locked = true;
  if (!s.handle)
    start(self, index);
}

/// The node lost shard `index`: stop it (it flushes and closes its store).
void close_shard(supervisor_actor* self, uint32_t index) {
  auto& st = self->state;
  if (st.stopping || index >= st.shards.size())
    return;
  auto& s = st.shards[index];
  s.active = false;
  s.started_once = false;
  s.retry_locked = false;
  if (s.closing)
    return;
  if (!s.handle) {
    self->send(st.engine, shard_closed_msg{index});
    return;
  }
  s.closing = true;
  self->send_exit(s.handle, caf::exit_reason::user_shutdown);
}

caf::behavior supervisor_impl(supervisor_actor* self, caf::actor engine,
                              std::vector<shard_setup> shards,
                              std::vector<bool> active,
                              uint32_t max_restarts_per_minute) {
  auto& st = self->state;
  st.engine = std::move(engine);
  for (auto& setup : shards)
    st.shards.push_back(
      supervised{std::move(setup),
                 {},
                 false,
                 logic::restart_backoff{max_restarts_per_minute}});
  for (uint32_t i = 0; i < st.shards.size(); ++i)
    if (i < active.size() && active[i]) {
      st.shards[i].active = true;
      start(self, i);
    }
  self->set_exit_handler([self](const caf::exit_msg& msg) { stop(self, msg); });
  self->set_down_handler(
    [self](const caf::down_msg& msg) { on_down(self, msg); });
  return {
    [self](restart_atom, uint32_t index) {
      if (!self->state.stopping && index < self->state.shards.size() &&
          self->state.shards[index].active && !self->state.shards[index].handle)
        start(self, index);
    },
    [self](shard_up_msg& msg) {
      // A shard confirms that its store is open and it serves requests.
      auto& st = self->state;
      if (msg.index < st.shards.size()) {
        st.shards[msg.index].started_once = true;
        st.shards[msg.index].backoff.serving();
      }
    },
    [self](open_shard_msg& msg) { open_shard(self, msg.index); },
    [self](close_shard_msg& msg) { close_shard(self, msg.index); },
  };
}

} // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, caf::actor engine,
                            std::vector<shard_setup> shards,
                            std::vector<bool> active,
                            uint32_t max_restarts_per_minute) {
  return sys.spawn(supervisor_impl, std::move(engine), std::move(shards),
                   std::move(active), max_restarts_per_minute);
}

} // namespace dally::actors
