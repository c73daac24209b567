#include "actors/shard.hpp"

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "actors/messages.hpp"
#include "logic/shard_driver.hpp"
#include "logic/shard_logic.hpp"
#include "logic/wall_clock.hpp"
#include "net/error.hpp"
#include "net/owning_actor.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

struct shard_state {
  static inline const char* name = "dally.shard";

  shard_setup setup;
  std::unique_ptr<storage::task_store> store;
  std::unique_ptr<logic::shard_logic> logic;
  std::unique_ptr<logic::shard_driver> driver;
  /// Replies held until the batch they depend on is durable, in the order
  /// the driver counted them.
  std::vector<std::function<void(const core::error&)>> held;
  /// New tasks whose answers are among `held`: answered with them.
  uint64_t held_tasks = 0;
  logic::shard_effects fx;
  logic::wall_clock clock;

  ~shard_state() {
    // The driver and the logic refer to the store: they go first. The
    // store closes its RocksDB instance (and lock) here, so a restart can
    // reopen it.
    driver.reset();
    logic.reset();
    store.reset();
  }
};

using shard_actor = net::owning_actor<shard_state>;

int64_t wall_now(shard_actor* self) {
  return self->state.driver->now_ms();
}

/// Sends `Atom` and the timer's generation to itself, after its delay.
template<caf::message_priority Priority, class Atom>
void send_timer(shard_actor* self, const logic::shard_effects::timer& t) {
  if (t.delay_us <= 0)
    self->send<Priority>(self, Atom::value, t.generation);
  else
    self->delayed_send<Priority>(self, std::chrono::microseconds{t.delay_us},
                                 Atom::value, t.generation);
}

/// Tells the engine that `tasks` new tasks it passed here are answered,
/// ahead of its queued requests so that its count stays close.
void report_answered(shard_actor* self, uint64_t tasks) {
  auto& st = self->state;
  if (tasks > 0)
    self->send<caf::message_priority::high>(
      st.setup.engine, schedules_answered_msg{st.setup.index, tasks});
}

/// Counts `tasks` new tasks as answered: now, or with the held answers.
void count_answer(shard_actor* self, bool held, uint64_t tasks) {
  if (held)
    self->state.held_tasks += tasks;
  else
    report_answered(self, tasks);
}

/// Carries out what the driver decided (see logic::shard_effects).
void carry_out(shard_actor* self) {
  auto& st = self->state;
  auto& fx = st.fx;
  if (!fx.log.empty() && st.setup.log) {
    std::istringstream lines{fx.log};
    for (std::string line; std::getline(lines, line);)
      st.setup.log("dally shard " + std::to_string(st.setup.index) + ": " +
                   line);
  }
  if (fx.answer_held) {
    auto held = std::move(st.held);
    st.held.clear();
    for (auto& f : held)
      f(fx.held_error);
    report_answered(self, std::exchange(st.held_tasks, 0));
  }
  if (fx.restart) {
    self->quit(net::to_caf(fx.restart));
    fx.clear();
    return;
  }
  if (fx.flush)
    self->send(self, flush_atom::value);
  if (fx.has_deliveries)
    for (size_t i = 0; i < fx.deliveries.size(); ++i)
      if (!fx.deliveries[i].empty())
        self->send(st.setup.notifiers[i],
                   deliver_batch{std::move(fx.deliveries[i])});
  if (fx.maintain)
    send_timer<caf::message_priority::normal, maintain_atom>(self,
                                                             *fx.maintain);
  // High priority: a wake-up goes ahead of queued requests, whose
  // processing would otherwise make every due task late.
  if (fx.wake)
    send_timer<caf::message_priority::high, wake_atom>(self, *fx.wake);
  fx.clear();
}

/// Calls `f(driver, effects)` and carries out what it decided.
template<class F>
void drive(shard_actor* self, F f) {
  f(*self->state.driver, self->state.fx);
  carry_out(self);
}

/// Whether the sender of the message being handled waits for its answer
/// (a request; the engine forwards clients' requests as they came).
bool awaited(shard_actor* self) {
  const auto* element = self->current_mailbox_element();
  return element != nullptr && element->mid.is_request();
}

/// Answers `value` at once, or once the next commit says how it went
/// (`hold`, as the driver decided): with the value, or the commit's error.
template<class Reply>
caf::result<Reply> reply(shard_actor* self, bool hold, Reply value) {
  if (!hold)
    return value;
  auto rp = self->make_response_promise<Reply>();
  self->state.held.emplace_back(
    [rp, v = std::move(value)](const core::error& err) mutable {
      if (err)
        rp.deliver(net::to_caf(err));
      else
        rp.deliver(std::move(v));
    });
  carry_out(self);
  return rp;
}

/// An error answer; held like a value so that answers keep their order.
template<class Reply>
caf::result<Reply> reply_error(shard_actor* self, bool hold,
                               const core::error& err) {
  if (!hold)
    return net::to_caf(err);
  auto rp = self->make_response_promise<Reply>();
  self->state.held.emplace_back(
    [rp, err](const core::error&) mutable { rp.deliver(net::to_caf(err)); });
  carry_out(self);
  return rp;
}

template<class Reply>
caf::result<Reply> answer(shard_actor* self, Reply value) {
  auto& st = self->state;
  return reply(self, st.driver->hold_reply(st.fx), std::move(value));
}

template<class Reply>
caf::result<Reply> fail(shard_actor* self, const core::error& err) {
  auto& st = self->state;
  return reply_error<Reply>(self, st.driver->hold_reply(st.fx), err);
}

logic::delivery_ref ref_of(const v1::DeliveryId& id) {
  return logic::delivery_ref{id.task_id(), id.occurrence(), id.attempt()};
}

v1::ChangeOutcome outcome_to_wire(logic::change_outcome x) {
  switch (x) {
    case logic::change_outcome::done:
      return v1::CHANGE_OUTCOME_DONE;
    case logic::change_outcome::in_flight:
      return v1::CHANGE_OUTCOME_IN_FLIGHT;
    case logic::change_outcome::completed:
      return v1::CHANGE_OUTCOME_COMPLETED;
    case logic::change_outcome::not_found:
      return v1::CHANGE_OUTCOME_NOT_FOUND;
  }
  return v1::CHANGE_OUTCOME_UNSPECIFIED;
}

/// Answers a change request with its outcome after the commit.
caf::result<net::change_reply>
answer_change(shard_actor* self, core::result<logic::change_outcome> res) {
  if (!res)
    return fail<net::change_reply>(self, res.err());
  v1::ChangeReply pb;
  pb.set_outcome(outcome_to_wire(*res));
  drive(self, [](auto& d, auto& fx) { d.flush_soon(fx); });
  return answer(self, net::change_reply{std::move(pb)});
}

/// Answers a consumer's ack, nack or touch that gave `err`.
caf::result<net::empty_reply> answer_settle(shard_actor* self,
                                            const core::error& err) {
  auto& st = self->state;
  bool asked = awaited(self);
  bool hold = st.driver->settle_reply(err, asked, st.fx);
  carry_out(self);
  if (err && asked)
    return reply_error<net::empty_reply>(self, hold, err);
  return reply(self, hold, net::empty_reply{});
}

/// Restarts if a write outside a commit failed, else keeps the wake-up in
/// line.
void arm_unless_failed(shard_actor* self) {
  drive(self, [](auto& d, auto& fx) {
    if (!d.restart_if_write_failed(fx))
      d.arm(fx);
  });
}

void restart_if_write_failed(shard_actor* self) {
  drive(self, [](auto& d, auto& fx) { d.restart_if_write_failed(fx); });
}

void arm(shard_actor* self) {
  drive(self, [](auto& d, auto& fx) { d.arm(fx); });
}

/// Stages the schedule `req` asks for; its answer as the wire has it.
template<class Request>
core::result<logic::scheduled_task> schedule_one(shard_actor* self,
                                                 Request&& req, int64_t now) {
  auto& st = self->state;
  auto t = logic::to_task(std::forward<Request>(req), now, st.setup.opts);
  if (!t)
    return t.err();
  return st.logic->schedule(now, std::move(*t));
}

caf::result<net::schedule_reply> on_schedule(shard_actor* self,
                                             net::schedule_request& req) {
  auto& st = self->state;
  auto res = schedule_one(self, std::move(req.pb), wall_now(self));
  if (!res) {
    bool hold = st.driver->hold_reply(st.fx);
    count_answer(self, hold, 1);
    return reply_error<net::schedule_reply>(self, hold, res.err());
  }
  v1::ScheduleReply pb;
  pb.set_id(res->id);
  pb.set_due_ms(res->due_ms);
  pb.set_created(res->created);
  drive(self, [](auto& d, auto& fx) {
    d.flush_soon(fx);
    d.arm(fx);
  });
  bool hold = st.driver->hold_reply(st.fx);
  count_answer(self, hold, 1);
  return reply(self, hold, net::schedule_reply{std::move(pb)});
}

caf::result<net::schedule_batch_reply>
on_schedule_batch(shard_actor* self, net::schedule_batch_request& req) {
  auto& st = self->state;
  auto now = wall_now(self);
  auto tasks = static_cast<uint64_t>(req.pb.tasks_size());
  v1::ScheduleBatchReply pb;
  for (auto& item : *req.pb.mutable_tasks()) {
    auto* out = pb.add_results();
    auto res = schedule_one(self, std::move(item), now);
    if (res) {
      auto* ok = out->mutable_scheduled();
      ok->set_id(res->id);
      ok->set_due_ms(res->due_ms);
      ok->set_created(res->created);
    } else {
      auto* bad = out->mutable_failure();
      bad->set_code(static_cast<uint32_t>(res.err().code()));
      bad->set_message(res.err().message());
    }
  }
  drive(self, [](auto& d, auto& fx) {
    d.flush_soon(fx);
    d.arm(fx);
  });
  bool hold = st.driver->hold_reply(st.fx);
  count_answer(self, hold, tasks);
  return reply(self, hold, net::schedule_batch_reply{std::move(pb)});
}

caf::result<net::get_reply> on_get(shard_actor* self, net::get_request& req) {
  auto res = self->state.logic->get(req.pb.id());
  if (!res) {
    auto out = fail<net::get_reply>(self, res.err());
    restart_if_write_failed(self);
    return out;
  }
  v1::GetReply pb;
  *pb.mutable_task() = logic::to_wire(res->record);
  pb.set_dead(res->dead);
  pb.set_dead_reason(res->dead_reason);
  return answer(self, net::get_reply{std::move(pb)});
}

caf::result<net::dead_letters_reply>
on_dead_letters(shard_actor* self, net::dead_letters_request& req) {
  auto& st = self->state;
  size_t limit =
    req.pb.limit() == 0 ? st.setup.opts.dead_letter_page : req.pb.limit();
  auto res = st.logic->dead_letters(req.pb.after_id(), limit);
  // Listing quarantines the damaged records it meets, and carries on if
  // that write fails: answer, then restart if the store needs it.
  if (!res) {
    auto out = fail<net::dead_letters_reply>(self, res.err());
    restart_if_write_failed(self);
    return out;
  }
  v1::DeadLettersReply pb;
  for (auto& dead : res->dead) {
    auto* out = pb.add_dead();
    *out->mutable_task() = logic::to_wire(dead.record);
    out->set_dead_ms(dead.dead_ms);
    out->set_reason(dead.reason);
  }
  pb.set_next_after_id(res->next_after);
  auto out = answer(self, net::dead_letters_reply{std::move(pb)});
  restart_if_write_failed(self);
  return out;
}

caf::result<shard_stats_msg> on_stats(shard_actor* self) {
  auto& st = self->state;
  auto& logic = *st.logic;
  shard_stats_msg out;
  out.counters = logic.counters();
  out.window = logic.window_size();
  out.backlog = logic.backlog_size();
  out.waiting = logic.waiting();
  auto store_stats = st.store->stats();
  out.memtable_bytes = store_stats.memtable_bytes;
  out.quarantined = store_stats.quarantined;
  return reply(self, st.driver->hold_report(st.fx), std::move(out));
}

caf::result<net::change_reply> on_kick(shard_actor* self,
                                       net::kick_request& req) {
  std::optional<int64_t> due;
  if (req.pb.has_due_ms())
    due = req.pb.due_ms();
  auto res = self->state.logic->kick(wall_now(self), req.pb.id(), due);
  auto out = answer_change(self, std::move(res));
  arm_unless_failed(self);
  return out;
}

caf::result<net::empty_reply> on_nack(shard_actor* self,
                                      net::nack_request& req) {
  std::optional<int64_t> retry;
  if (req.pb.has_retry_in_ms())
    retry = req.pb.retry_in_ms();
  auto err =
    self->state.logic->nack(wall_now(self), ref_of(req.pb.id()), retry);
  auto out = answer_settle(self, err);
  arm(self);
  return out;
}

caf::result<net::empty_reply> on_touch(shard_actor* self,
                                       net::touch_request& req) {
  auto res = self->state.logic->touch(wall_now(self), ref_of(req.pb.id()),
                                      req.pb.extend_ms());
  auto out = answer_settle(self, res ? core::error{} : res.err());
  arm(self);
  return out;
}

/// Each message to its handler; each handler one line, or a function above.
caf::behavior handlers(shard_actor* self) {
  auto& logic = *self->state.logic;
  return {
    [self](flush_atom) { drive(self, [](auto& d, auto& fx) { d.flush(fx); }); },
    [self](wake_atom, uint64_t gen) {
      drive(self, [gen](auto& d, auto& fx) { d.wake(gen, fx); });
    },
    [self](maintain_atom, uint64_t gen) {
      drive(self, [gen](auto& d, auto& fx) { d.maintain(gen, fx); });
    },
    [self](net::schedule_request& req) { return on_schedule(self, req); },
    [self](net::schedule_batch_request& req) {
      return on_schedule_batch(self, req);
    },
    [self, &logic](net::revoke_request& req) {
      return answer_change(self, logic.revoke(wall_now(self), req.pb.id()));
    },
    [self, &logic](net::reschedule_request& req) {
      auto out = answer_change(
        self, logic.reschedule(wall_now(self), req.pb.id(), req.pb.due_ms()));
      arm(self);
      return out;
    },
    [self](net::kick_request& req) { return on_kick(self, req); },
    [self](net::get_request& req) { return on_get(self, req); },
    [self, &logic](net::ack_request& req) {
      auto out =
        answer_settle(self, logic.ack(wall_now(self), ref_of(req.pb.id())));
      arm(self);
      return out;
    },
    [self](net::nack_request& req) { return on_nack(self, req); },
    // Verdicts a consumer gave with its answer: a refused one (stale,
    // unknown) has nobody to tell, as with a single ack or nack.
    [self](settle_batch_msg& msg) {
      drive(self, [&msg](auto& d, auto& fx) { d.settle(msg.items, fx); });
    },
    [self](net::touch_request& req) { return on_touch(self, req); },
    [self](net::dead_letters_request& req) {
      return on_dead_letters(self, req);
    },
    [self, &logic](requeue_msg& msg) {
      auto err = logic.requeue(wall_now(self), msg.ref);
      drive(self, [&err](auto& d, auto& fx) { d.settled(err, fx); });
    },
    [self, &logic](undelivered_msg& msg) {
      auto err = logic.undelivered(wall_now(self), msg.ref);
      drive(self, [&err](auto& d, auto& fx) { d.settled(err, fx); });
    },
    [self, &logic](topic_status_msg& msg) {
      logic.set_topic_available(msg.topic, msg.available);
      arm(self);
    },
    [self](stats_atom) { return on_stats(self); },
  };
}

/// Opens the store and starts the logic; false (quitting with the error)
/// if the store does not open.
bool open(shard_actor* self, shard_setup setup) {
  auto& st = self->state;
  st.setup = std::move(setup);
  st.clock = logic::wall_clock{st.setup.wall_clock_ms};
  auto opened = logic::open_shard_store(st.setup.open_store, st.setup.store);
  if (!opened) {
    self->quit(net::to_caf(opened.err()));
    return false;
  }
  st.store = std::move(*opened);
  st.logic = std::make_unique<logic::shard_logic>(*st.store, st.setup.opts);
  logic::shard_driver::options dopts;
  dopts.notifiers = st.setup.notifiers.size();
  dopts.durability = st.setup.store.durability;
  dopts.sync_period_ms = st.setup.store.sync_period_ms;
  st.driver = std::make_unique<logic::shard_driver>(
    *st.logic, st.clock, [self] { return self->clock().now(); }, dopts);
  return true;
}

/// Tells the engine, the supervisor and the notifiers that it serves.
void announce(shard_actor* self) {
  auto& st = self->state;
  auto self_handle = caf::actor_cast<caf::actor>(self);
  self->send(st.setup.engine, shard_up_msg{st.setup.index, self_handle});
  if (st.setup.supervisor)
    self->send(st.setup.supervisor, shard_up_msg{st.setup.index, self_handle});
  // Before any batch: notifiers send verdicts straight to this shard.
  for (auto& n : st.setup.notifiers)
    self->send(n, shard_up_msg{st.setup.index, self_handle});
}

caf::behavior shard_impl(shard_actor* self, shard_setup setup) {
  if (!open(self, std::move(setup)))
    return {};
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    auto& st = self->state;
    drive(self, [](auto& d, auto& fx) { d.stop(fx); });
    st.store->sync();
    self->quit(msg.reason);
  });
  announce(self);
  drive(self, [](auto& d, auto& fx) { d.start_waking(fx); });
  drive(self, [](auto& d, auto& fx) { d.start_maintaining(fx); });
  return handlers(self);
}

} // namespace

caf::actor spawn_shard(caf::actor_system& sys, shard_setup setup) {
  return sys.spawn(shard_impl, std::move(setup));
}

} // namespace dally::actors
