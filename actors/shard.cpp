#include "actors/shard.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <utility>

#include <caf/actor_ostream.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"
#include "logic/shard_logic.hpp"
#include "logic/wall_clock.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

size_t hash_index(const std::string& key, size_t count) noexcept {
  // FNV-1a: the same on every platform and in the simulator.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : key) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return count == 0 ? 0 : static_cast<size_t>(h % count);
}

namespace {

constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

/// How soon after a commit a shard forgets expired keys and syncs a
/// periodic store. Armed only by commits, so an idle shard has no timer.
constexpr auto maintain_interval = std::chrono::milliseconds{500};

struct shard_state {
  static inline const char* name = "dally.shard";

  shard_setup setup;
  std::unique_ptr<storage::task_store> store;
  std::unique_ptr<logic::shard_logic> logic;
  /// Replies held until the batch they depend on is durable.
  std::vector<std::function<void(const core::error&)>> held;
  /// Scratch of the settle handler: the ids of a batch of verdicts.
  std::vector<core::task_id> settle_ids;
  bool flush_sent = false;
  bool maintain_armed = false;
  /// When the armed housekeeping comes; a sooner need re-arms it, and the
  /// message of the generation it replaced is ignored.
  caf::actor_clock::time_point maintain_at;
  uint64_t maintain_generation = 0;
  /// The armed wake-up: its generation and wall-clock target.
  uint64_t wake_generation = 0;
  int64_t armed_ms = never_ms;
  logic::wall_clock clock;

  ~shard_state() {
    // The logic refers to the store: it goes first. The store closes its
    // RocksDB instance (and lock) here, so a restart can reopen it.
    logic.reset();
    store.reset();
  }
};

using shard_actor = caf::stateful_actor<shard_state>;

int64_t wall_now(shard_actor* self) {
  return self->state.clock.now_ms();
}

void schedule_flush(shard_actor* self) {
  auto& st = self->state;
  if (!st.flush_sent && (st.logic->dirty() || !st.held.empty())) {
    st.flush_sent = true;
    self->send(self, flush_atom::value);
  }
}

/// Keeps exactly one wake-up armed, at the logic's next work.
void arm(shard_actor* self) {
  auto& st = self->state;
  auto next = st.logic->next_wakeup_ms();
  if (next == never_ms) {
    if (st.armed_ms != never_ms) {
      ++st.wake_generation; // Cancels the armed one.
      st.armed_ms = never_ms;
    }
    return;
  }
  if (next >= st.armed_ms)
    return; // The armed wake-up comes first; it re-arms on arrival.
  auto gen = ++st.wake_generation;
  st.armed_ms = next;
  auto delay_us = st.clock.delay_until_us(next);
  // High priority: a wake-up goes ahead of queued requests, whose
  // processing would otherwise make every due task late.
  if (delay_us <= 0)
    self->send<caf::message_priority::high>(self, wake_atom::value, gen);
  else
    self->delayed_send<caf::message_priority::high>(
      self, std::chrono::microseconds{delay_us}, wake_atom::value, gen);
}

/// Whether a reply must wait for the next commit: writes are staged, or
/// an earlier commit nobody waited for still waits for its fsync (what the
/// reply reports could still be lost).
bool must_hold(shard_actor* self) {
  auto& logic = *self->state.logic;
  return logic.dirty() || logic.sync_pending();
}

/// Whether the sender of the message being handled waits for its answer
/// (a request; the engine forwards clients' requests as they came).
bool awaited(shard_actor* self) {
  const auto* element = self->current_mailbox_element();
  return element != nullptr && element->mid.is_request();
}

/// Answers at once when nothing is staged, else after the next commit.
template<class Reply>
caf::result<Reply> answer(shard_actor* self, Reply value) {
  auto& st = self->state;
  if (!must_hold(self))
    return value;
  auto rp = self->make_response_promise<Reply>();
  st.held.emplace_back(
    [rp, v = std::move(value)](const core::error& err) mutable {
      if (err)
        rp.deliver(net::to_caf(err));
      else
        rp.deliver(std::move(v));
    });
  schedule_flush(self);
  return rp;
}

/// An error answer; held like a value so that answers keep their order.
template<class Reply>
caf::result<Reply> fail(shard_actor* self, const core::error& err) {
  auto& st = self->state;
  if (!must_hold(self))
    return net::to_caf(err);
  auto rp = self->make_response_promise<Reply>();
  st.held.emplace_back(
    [rp, err](const core::error&) mutable { rp.deliver(net::to_caf(err)); });
  schedule_flush(self);
  return rp;
}

/// Hands a commit's fires to the notifiers of their topics, which release
/// each at its due time.
void send_deliveries(shard_actor* self,
                     std::vector<logic::held_delivery>& items) {
  auto& notifiers = self->state.setup.notifiers;
  if (items.empty() || notifiers.empty())
    return;
  if (notifiers.size() == 1) {
    self->send(notifiers[0], deliver_batch{std::move(items)});
    return;
  }
  // Counted first: growing each part as it fills would move every
  // delivery a few more times.
  std::vector<size_t> index(items.size());
  std::vector<size_t> count(notifiers.size());
  for (size_t k = 0; k < items.size(); ++k)
    ++count[index[k] =
              hash_index(items[k].delivery->topic(), notifiers.size())];
  std::vector<deliver_batch> per(notifiers.size());
  for (size_t i = 0; i < per.size(); ++i)
    per[i].items.reserve(count[i]);
  for (size_t k = 0; k < items.size(); ++k)
    per[index[k]].items.emplace_back(std::move(items[k]));
  for (size_t i = 0; i < per.size(); ++i)
    if (!per[i].items.empty())
      self->send(notifiers[i], std::move(per[i]));
}

/// Answers the replies held for the staged batch: with `err`, or as their
/// values when it is none.
void answer_held(shard_actor* self, const core::error& err) {
  auto held = std::move(self->state.held);
  self->state.held.clear();
  for (auto& f : held)
    f(err);
}

/// After a write outside a commit failed (a quarantine while opening or
/// reading, the idempotency keys' expiry, a periodic sync), restarts from
/// the store, as a failed commit does: only a reopen makes it writable
/// again. Else a shard with no commits would keep its store stuck, and a
/// damaged record unquarantined (found by dally-sim, seed
/// 12426585960701338637). Requests waiting for the staged batch get the
/// error. Returns whether the shard quits.
bool restart_if_write_failed(shard_actor* self) {
  auto err = self->state.logic->write_failure();
  if (!err)
    return false;
  answer_held(self, err);
  self->quit(net::to_caf(err));
  return true;
}

/// Arms the housekeeping, or re-arms it sooner: a periodic store, or a
/// sync one with a commit nobody waited for, must sync within its period
/// after a write.
void arm_maintain(shard_actor* self) {
  auto& st = self->state;
  std::chrono::milliseconds delay = maintain_interval;
  if (st.setup.store.durability == storage::durability::periodic ||
      st.logic->sync_pending())
    delay = std::min(delay, std::chrono::milliseconds{std::max<int64_t>(
                              1, st.setup.store.sync_period_ms)});
  // Armed for the housekeeping interval when the first commit nobody
  // waits for comes: its fsync must not wait that long.
  auto at = self->clock().now() + delay;
  if (st.maintain_armed && st.maintain_at <= at)
    return;
  st.maintain_armed = true;
  st.maintain_at = at;
  self->delayed_send(self, delay, maintain_atom::value,
                     ++st.maintain_generation);
}

void flush(shard_actor* self) {
  auto& st = self->state;
  st.flush_sent = false;
  auto now = wall_now(self);
  // With sync durability only a commit that someone waits for is fsync'd
  // at once (see shard_logic::commit).
  auto res = st.logic->commit(now, !st.held.empty());
  answer_held(self, res.err);
  if (res.err) {
    // The failed write is in doubt: it may still be on disk, and RocksDB
    // must not append to a WAL whose write failed (its writer keeps the
    // error). Restart from the store (the supervisor reopens it), so that
    // memory and disk agree again. Found by dally-sim.
    self->quit(net::to_caf(res.err));
    return;
  }
  send_deliveries(self, res.deliveries);
  arm_maintain(self);
  arm(self);
}

void wake(shard_actor* self) {
  auto& st = self->state;
  st.armed_ms = never_ms;
  auto now = wall_now(self);
  if (auto err = st.logic->fire(now)) {
    // A read failed, or the write that quarantines a damaged record did
    // (then RocksDB's WAL writer keeps the error, as after a failed
    // commit). Retrying here spun: the entries went back to the window,
    // due at once (found by dally-sim, seed 12051826974165715928). Restart
    // from the store instead, as a failed commit does; requests waiting
    // for the staged batch get the error.
    answer_held(self, err);
    self->quit(net::to_caf(err));
    return;
  }
  // Fired tasks go out after their commit: commit now rather than behind
  // the requests queued in the mailbox.
  if (st.logic->dirty()) {
    flush(self);
    return;
  }
  arm(self);
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

net::change_reply change_answer(logic::change_outcome x) {
  v1::ChangeReply pb;
  pb.set_outcome(outcome_to_wire(x));
  return net::change_reply{std::move(pb)};
}

/// Runs a change request and answers with its outcome after the commit.
caf::result<net::change_reply>
answer_change(shard_actor* self, core::result<logic::change_outcome> res) {
  if (!res)
    return fail<net::change_reply>(self, res.err());
  auto reply = change_answer(*res);
  schedule_flush(self);
  return answer(self, std::move(reply));
}

caf::result<net::empty_reply> answer_settle(shard_actor* self,
                                            core::error err) {
  if (!awaited(self)) {
    // A consumer's verdict the notifier forwards as a plain message: as
    // with a batch's verdicts, nobody is told, so its commit need not be
    // fsync'd at once (`sync` durability); a refused one is dropped.
    if (!err)
      schedule_flush(self);
    return net::empty_reply{};
  }
  if (err)
    return fail<net::empty_reply>(self, err);
  schedule_flush(self);
  return answer(self, net::empty_reply{});
}

caf::behavior shard_impl(shard_actor* self, shard_setup setup) {
  auto& st = self->state;
  st.setup = std::move(setup);
  st.clock = logic::wall_clock{st.setup.wall_clock_ms};
  auto opened = logic::open_shard_store(st.setup.open_store, st.setup.store);
  if (!opened) {
    self->quit(net::to_caf(opened.err()));
    return {};
  }
  st.store = std::move(*opened);
  st.logic = std::make_unique<logic::shard_logic>(*st.store, st.setup.opts);
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    // Flush what is staged so that held replies get their answer; then go.
    auto& st = self->state;
    if (st.logic && (st.logic->dirty() || !st.held.empty()))
      flush(self);
    if (st.store)
      st.store->sync();
    self->quit(msg.reason);
  });
  auto self_handle = caf::actor_cast<caf::actor>(self);
  self->send(st.setup.engine, shard_up_msg{st.setup.index, self_handle});
  if (st.setup.supervisor)
    self->send(st.setup.supervisor, shard_up_msg{st.setup.index, self_handle});
  // Before any batch: notifiers send verdicts straight to this shard.
  for (auto& n : st.setup.notifiers)
    self->send(n, shard_up_msg{st.setup.index, self_handle});
  self->send<caf::message_priority::high>(self, wake_atom::value,
                                          ++st.wake_generation);
  st.maintain_armed = true;
  st.maintain_at = self->clock().now();
  self->send(self, maintain_atom::value, ++st.maintain_generation);
  return {
    [self](flush_atom) { flush(self); },
    [self](wake_atom, uint64_t gen) {
      if (gen == self->state.wake_generation)
        wake(self);
    },
    [self](maintain_atom, uint64_t generation) {
      auto& st = self->state;
      if (generation != st.maintain_generation)
        return; // Re-armed sooner since.
      st.maintain_armed = false;
      if (auto err = st.logic->maintain(wall_now(self)))
        caf::aout(self) << "dally shard " << st.setup.index
                        << ": maintenance failed: " << err << std::endl;
      // Also right after start: opening quarantines damaged records, and
      // a failed write there leaves the store unwritable.
      if (restart_if_write_failed(self))
        return;
      // A commit still waiting for its fsync (its period had not passed).
      if (st.logic->sync_pending())
        arm_maintain(self);
    },
    [self](net::schedule_request& req) -> caf::result<net::schedule_reply> {
      auto& st = self->state;
      auto now = wall_now(self);
      auto t = logic::to_task(std::move(req.pb), now, st.setup.opts);
      if (!t)
        return fail<net::schedule_reply>(self, t.err());
      auto res = st.logic->schedule(now, std::move(*t));
      if (!res)
        return fail<net::schedule_reply>(self, res.err());
      v1::ScheduleReply pb;
      pb.set_id(res->id);
      pb.set_due_ms(res->due_ms);
      pb.set_created(res->created);
      schedule_flush(self);
      arm(self);
      return answer(self, net::schedule_reply{std::move(pb)});
    },
    [self](net::schedule_batch_request& req)
      -> caf::result<net::schedule_batch_reply> {
      auto& st = self->state;
      auto now = wall_now(self);
      v1::ScheduleBatchReply pb;
      for (auto& item : *req.pb.mutable_tasks()) {
        auto* out = pb.add_results();
        auto t = logic::to_task(std::move(item), now, st.setup.opts);
        core::result<logic::scheduled_task> res =
          t ? st.logic->schedule(now, std::move(*t))
            : core::result<logic::scheduled_task>{t.err()};
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
      schedule_flush(self);
      arm(self);
      return answer(self, net::schedule_batch_reply{std::move(pb)});
    },
    [self](net::revoke_request& req) -> caf::result<net::change_reply> {
      auto res = self->state.logic->revoke(wall_now(self), req.pb.id());
      return answer_change(self, std::move(res));
    },
    [self](net::reschedule_request& req) -> caf::result<net::change_reply> {
      auto res = self->state.logic->reschedule(wall_now(self), req.pb.id(),
                                               req.pb.due_ms());
      auto reply = answer_change(self, std::move(res));
      arm(self);
      return reply;
    },
    [self](net::kick_request& req) -> caf::result<net::change_reply> {
      std::optional<int64_t> due;
      if (req.pb.has_due_ms())
        due = req.pb.due_ms();
      auto res = self->state.logic->kick(wall_now(self), req.pb.id(), due);
      auto reply = answer_change(self, std::move(res));
      if (!restart_if_write_failed(self))
        arm(self);
      return reply;
    },
    [self](net::get_request& req) -> caf::result<net::get_reply> {
      auto res = self->state.logic->get(req.pb.id());
      if (!res) {
        auto reply = fail<net::get_reply>(self, res.err());
        restart_if_write_failed(self);
        return reply;
      }
      v1::GetReply pb;
      *pb.mutable_task() = logic::to_wire(res->record);
      pb.set_dead(res->dead);
      pb.set_dead_reason(res->dead_reason);
      return answer(self, net::get_reply{std::move(pb)});
    },
    [self](net::ack_request& req) -> caf::result<net::empty_reply> {
      auto err = self->state.logic->ack(wall_now(self), ref_of(req.pb.id()));
      auto reply = answer_settle(self, std::move(err));
      arm(self);
      return reply;
    },
    [self](net::nack_request& req) -> caf::result<net::empty_reply> {
      std::optional<int64_t> retry;
      if (req.pb.has_retry_in_ms())
        retry = req.pb.retry_in_ms();
      auto err =
        self->state.logic->nack(wall_now(self), ref_of(req.pb.id()), retry);
      auto reply = answer_settle(self, std::move(err));
      arm(self);
      return reply;
    },
    [self](settle_batch_msg& msg) {
      // Verdicts a consumer gave with its answer: a refused one (stale,
      // unknown) has nobody to tell, as with a single ack or nack.
      auto& logic = *self->state.logic;
      auto& ids = self->state.settle_ids;
      ids.clear();
      for (const auto& item : msg.items)
        ids.push_back(item.ref.id);
      logic.prefetch(ids);
      auto now = wall_now(self);
      bool changed = false;
      for (auto& item : msg.items) {
        auto err = item.ack ? logic.ack(now, item.ref)
                            : logic.nack(now, item.ref, item.retry_in_ms);
        changed = changed || !err;
      }
      if (changed)
        schedule_flush(self);
      arm(self);
    },
    [self](net::touch_request& req) -> caf::result<net::empty_reply> {
      auto res = self->state.logic->touch(wall_now(self), ref_of(req.pb.id()),
                                          req.pb.extend_ms());
      auto reply = answer_settle(self, res ? core::error{} : res.err());
      arm(self);
      return reply;
    },
    [self](
      net::dead_letters_request& req) -> caf::result<net::dead_letters_reply> {
      auto& st = self->state;
      size_t limit =
        req.pb.limit() == 0 ? st.setup.opts.dead_letter_page : req.pb.limit();
      auto res = st.logic->dead_letters(req.pb.after_id(), limit);
      // Listing quarantines the damaged records it meets, and carries on
      // if that write fails: answer, then restart if the store needs it.
      if (!res) {
        auto reply = fail<net::dead_letters_reply>(self, res.err());
        restart_if_write_failed(self);
        return reply;
      }
      v1::DeadLettersReply pb;
      for (auto& dead : res->dead) {
        auto* out = pb.add_dead();
        *out->mutable_task() = logic::to_wire(dead.record);
        out->set_dead_ms(dead.dead_ms);
        out->set_reason(dead.reason);
      }
      pb.set_next_after_id(res->next_after);
      auto reply = answer(self, net::dead_letters_reply{std::move(pb)});
      restart_if_write_failed(self);
      return reply;
    },
    [self](requeue_msg& msg) {
      auto err = self->state.logic->requeue(wall_now(self), msg.ref);
      if (!err)
        schedule_flush(self);
      arm(self);
    },
    [self](undelivered_msg& msg) {
      auto err = self->state.logic->undelivered(wall_now(self), msg.ref);
      if (!err)
        schedule_flush(self);
      arm(self);
    },
    [self](topic_status_msg& msg) {
      self->state.logic->set_topic_available(msg.topic, msg.available);
      arm(self);
    },
    [self](stats_atom) -> caf::result<shard_stats_msg> {
      auto& logic = *self->state.logic;
      shard_stats_msg out;
      out.counters = logic.counters();
      out.window = logic.window_size();
      out.backlog = logic.backlog_size();
      out.waiting = logic.waiting();
      auto store_stats = self->state.store->stats();
      out.memtable_bytes = store_stats.memtable_bytes;
      out.quarantined = store_stats.quarantined;
      // What the counters report must survive a power loss: a commit that
      // nobody waited for is fsync'd first.
      if (!logic.sync_pending())
        return out;
      return answer(self, std::move(out));
    },
  };
}

} // namespace

caf::actor spawn_shard(caf::actor_system& sys, shard_setup setup) {
  return sys.spawn(shard_impl, std::move(setup));
}

} // namespace dally::actors
