#include "actors/notifier.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include "actors/messages.hpp"
#include "core/placement.hpp"
#include "logic/answer_deadlines.hpp"
#include "logic/armed_timer.hpp"
#include "logic/consumer_sends.hpp"
#include "logic/wall_clock.hpp"
#include "net/owning_actor.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

struct notifier_state {
  static inline const char* name = "dally.notifier";

  caf::actor engine;
  /// By shard index: the running shard actor (each announces itself when
  /// it starts, before it sends any batch).
  std::vector<caf::actor> shards;
  std::unique_ptr<logic::notifier_logic> logic;
  logic::wall_clock clock;
  /// Fired deliveries waiting for their due time, and the armed release.
  logic::release_queue holds;
  logic::armed_timer release;
  /// Handle and deliveries per message of each known consumer.
  std::unordered_map<logic::consumer_id, std::pair<consumer_actor, uint32_t>>
    consumers;
  logic::notifier_effects fx;
  /// The armed expiry check of queued deliveries.
  logic::armed_timer expiry;
  /// Requests to consumers awaiting an answer, timed out by one armed
  /// check rather than by CAF's clock (see answer_deadlines).
  logic::answer_deadlines awaiting;
  logic::armed_timer overdue;
};

using notifier_actor = net::owning_actor<notifier_state>;

void act(notifier_actor* self);

/// Where a verdict on task `id` goes: its shard, or the engine until that
/// shard has announced itself.
const caf::actor& settle_target(notifier_actor* self, core::task_id id) {
  auto& st = self->state;
  if (!st.shards.empty()) {
    auto count = static_cast<uint32_t>(st.shards.size());
    auto& shard = st.shards[core::shard_of(id, count)];
    if (shard)
      return shard;
  }
  return st.engine;
}

/// The actor clock (steady; virtual under test), in µs.
int64_t steady_us(notifier_actor* self) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           self->clock().now().time_since_epoch())
    .count();
}

/// Arms `timer` (sending `Atom` and its generation) at `next_ms` on the
/// wall clock, unless it is armed for then or sooner: the armed check
/// re-arms when it runs. A wait is capped (see armed_timer).
template<class Atom,
         caf::message_priority Priority = caf::message_priority::normal>
void arm_at(notifier_actor* self, logic::armed_timer& timer, int64_t next_ms) {
  auto w = timer.arm(next_ms, self->state.clock.now_us(), steady_us(self));
  if (!w)
    return;
  if (w->delay_us <= 0)
    self->send<Priority>(self, Atom::value, w->generation);
  else
    self->delayed_send<Priority>(self, std::chrono::microseconds{w->delay_us},
                                 Atom::value, w->generation);
}

/// Keeps one check armed at the earliest deadline of an unanswered
/// request; re-armed after each check.
void arm_overdue(notifier_actor* self) {
  auto& st = self->state;
  arm_at<overdue_atom>(self, st.overdue, st.awaiting.next_ms());
}

/// Sends `msg` to `dest` as a request that times out at the lease deadline
/// `lease_deadline_ms` (at least 1 ms from now), as CAF's request timeout
/// would, without leaving anything behind once answered. `on_answer` and
/// `on_error` are the request's handlers; `Reply` is what it answers.
template<class Reply, class Handle, class Msg, class OnAnswer, class OnError>
void request_until(notifier_actor* self, const Handle& dest, Msg msg,
                   int64_t lease_deadline_ms, OnAnswer on_answer,
                   OnError on_error) {
  auto& st = self->state;
  auto now_ms = st.clock.now_ms();
  auto deadline_ms = now_ms + std::max<int64_t>(1, lease_deadline_ms - now_ms);
  auto handle = self->request(dest, caf::infinite, std::move(msg));
  auto id = handle.id().integer_value();
  st.awaiting.track(deadline_ms, id);
  arm_overdue(self);
  handle.then(
    [self, deadline_ms, id, on_answer = std::move(on_answer)](Reply& reply) {
      self->state.awaiting.untrack(deadline_ms, id);
      on_answer(reply);
    },
    [self, deadline_ms, id, on_error = std::move(on_error)](caf::error& err) {
      self->state.awaiting.untrack(deadline_ms, id);
      on_error(err);
    });
}

logic::delivery_ref ref_of(const v1::Delivery& d) {
  return logic::delivery_ref{d.id().task_id(), d.id().occurrence(),
                             d.id().attempt()};
}

/// Sends a consumer's verdict on to the task's shard as an ack or a nack.
void forward(notifier_actor* self, const logic::verdict& v) {
  v1::DeliveryId id;
  id.set_task_id(v.ref.id);
  id.set_occurrence(v.ref.occurrence);
  id.set_attempt(v.ref.attempt);
  if (v.ack) {
    v1::AckRequest ack;
    *ack.mutable_id() = id;
    caf::anon_send(settle_target(self, v.ref.id),
                   net::ack_request{std::move(ack)});
    return;
  }
  v1::NackRequest nack;
  *nack.mutable_id() = id;
  if (v.retry_in_ms)
    nack.set_retry_in_ms(*v.retry_in_ms);
  caf::anon_send(settle_target(self, v.ref.id),
                 net::nack_request{std::move(nack)});
}

void send_one(notifier_actor* self, logic::consumer_id cid,
              logic::delivery_box box) {
  auto& st = self->state;
  auto& d = *box;
  auto i = st.consumers.find(cid);
  if (i == st.consumers.end()) {
    // Unknown handle (a race with its removal): treat it as gone.
    st.logic->failed(cid, ref_of(d), false, st.clock.now_ms(), st.fx);
    return;
  }
  auto ref = ref_of(d);
  auto lease_deadline_ms = d.lease_deadline_ms();
  request_until<net::delivery_reply>(
    self, i->second.first, net::delivery_msg{std::move(d)}, lease_deadline_ms,
    [self, cid, ref](net::delivery_reply& reply) {
      auto& st = self->state;
      st.logic->answered(cid, ref, st.clock.now_ms(), st.fx);
      // Other answers: the consumer settles through the engine.
      if (auto v = logic::verdict_of(ref, reply.pb))
        forward(self, *v);
      act(self);
    },
    [self, cid, ref](caf::error& err) {
      auto& st = self->state;
      bool timeout = err == caf::sec::request_timeout;
      st.logic->failed(cid, ref, timeout, st.clock.now_ms(), st.fx);
      act(self);
    });
}

/// A batch consumer answered: each delivery's slot is free, and the acks
/// and nacks go to each shard in one message.
void batch_answered(notifier_actor* self, logic::consumer_id cid,
                    const std::vector<logic::delivery_ref>& refs,
                    const v1::DeliveryBatchReply& reply) {
  auto& st = self->state;
  auto now_ms = st.clock.now_ms();
  for (const auto& ref : refs)
    st.logic->answered(cid, ref, now_ms, st.fx);
  auto groups = logic::group_verdicts<caf::actor>(
    logic::verdicts_of(refs, reply),
    [self](core::task_id id) -> const caf::actor& {
      return settle_target(self, id);
    });
  for (auto& [target, verdicts] : groups)
    caf::anon_send(target, settle_batch_msg{std::move(verdicts)});
  act(self);
}

/// Sends a batch consumer several deliveries in one request, timed out at
/// the earliest of their lease deadlines; its answer settles them all.
void send_batch(notifier_actor* self, logic::consumer_id cid,
                std::vector<logic::delivery_box> items) {
  auto& st = self->state;
  auto i = st.consumers.find(cid);
  if (i == st.consumers.end()) {
    for (auto& d : items)
      st.logic->failed(cid, ref_of(*d), false, st.clock.now_ms(), st.fx);
    return;
  }
  std::vector<logic::delivery_ref> refs;
  refs.reserve(items.size());
  int64_t deadline_ms = std::numeric_limits<int64_t>::max();
  v1::DeliveryBatch batch;
  batch.mutable_deliveries()->Reserve(static_cast<int>(items.size()));
  for (auto& d : items) {
    refs.push_back(ref_of(*d));
    deadline_ms = std::min(deadline_ms, d->lease_deadline_ms());
    batch.mutable_deliveries()->AddAllocated(d.release());
  }
  auto handle = caf::actor_cast<caf::actor>(i->second.first);
  request_until<net::delivery_batch_reply>(
    self, handle, net::delivery_batch_msg{std::move(batch)}, deadline_ms,
    [self, cid, refs](net::delivery_batch_reply& reply) {
      batch_answered(self, cid, refs, reply.pb);
    },
    [self, cid, refs](caf::error& err) {
      auto& st = self->state;
      bool timeout = err == caf::sec::request_timeout;
      auto now_ms = st.clock.now_ms();
      for (auto& ref : refs)
        st.logic->failed(cid, ref, timeout, now_ms, st.fx);
      act(self);
    });
}

/// Sends what the notifier_logic chose (see logic::dispatch_sends).
void send_all(
  notifier_actor* self,
  std::vector<std::pair<logic::consumer_id, logic::delivery_box>> sends) {
  auto& st = self->state;
  logic::dispatch_sends(
    std::move(sends),
    [&st](logic::consumer_id cid) -> size_t {
      auto i = st.consumers.find(cid);
      return i == st.consumers.end() ? 0 : i->second.second;
    },
    [self](logic::consumer_id cid, logic::delivery_box d) {
      send_one(self, cid, std::move(d));
    },
    [self](logic::consumer_id cid, std::vector<logic::delivery_box> items) {
      send_batch(self, cid, std::move(items));
    });
}

/// Keeps one expiry check armed, at the notifier_logic's next one. Armed
/// after `deliver` (which may start a queue) and after each check (which
/// re-arms for the new fronts); a front with a shorter lease than the one
/// before it is caught by the next check, or when its turn comes.
void arm_expiry(notifier_actor* self) {
  auto& st = self->state;
  arm_at<expire_atom>(self, st.expiry, st.logic->next_expiry_ms());
}

/// Keeps one release armed, at the earliest held delivery's due time. High
/// priority: releasing due deliveries goes ahead of answers and batches
/// queued in the mailbox.
void arm_release(notifier_actor* self) {
  auto& st = self->state;
  arm_at<release_atom, caf::message_priority::high>(self, st.release,
                                                    st.holds.next_release_ms());
}

/// Hands the held deliveries that are due to the notifier_logic.
void release_due(notifier_actor* self) {
  auto& st = self->state;
  auto now = st.clock.now_ms();
  auto due = st.holds.pop_due(now);
  if (!due.empty()) {
    st.logic->deliver(std::move(due), now, st.fx);
    act(self);
    arm_expiry(self);
  }
  arm_release(self);
}

/// Carries out what the notifier_logic asked for.
void act(notifier_actor* self) {
  auto& st = self->state;
  // Sending may add effects (an unknown consumer); loop until quiet.
  while (!st.fx.empty()) {
    auto fx = std::move(st.fx);
    st.fx.clear();
    // Undelivered first: a shard that takes a delivery back marks its
    // topic unavailable, and an availability sent with it must come after.
    for (auto& ref : fx.undelivered)
      self->send(st.engine, undelivered_msg{ref});
    for (auto& ref : fx.requeue)
      self->send(st.engine, requeue_msg{ref});
    for (auto& [topic, available] : fx.availability)
      self->send(st.engine, topic_status_msg{topic, available});
    send_all(self, std::move(fx.send));
  }
}

void on_deliver_batch(notifier_actor* self, deliver_batch& batch) {
  auto& st = self->state;
  auto now = st.clock.now_ms();
  bool any_due = false;
  for (auto& item : batch.items) {
    any_due = any_due || item.release_ms <= now;
    st.holds.push(std::move(item));
  }
  if (any_due)
    release_due(self);
  else
    arm_release(self);
}

/// What CAF's clock sends at a request's timeout: its answer becomes
/// request_timeout. An answer that still arrives later is dropped.
void time_out_overdue(notifier_actor* self) {
  auto& st = self->state;
  for (auto id : st.awaiting.pop_due(st.clock.now_ms()))
    self->eq_impl(caf::message_id{id}, self->ctrl(), self->context(),
                  caf::make_error(caf::sec::request_timeout));
  arm_overdue(self);
}

void on_consumers(notifier_actor* self, consumers_msg& msg) {
  auto& st = self->state;
  std::vector<logic::consumer_slot> slots;
  slots.reserve(msg.consumers.size());
  for (auto& c : msg.consumers) {
    auto cid = c.handle.id();
    st.consumers[cid] = {c.handle, c.max_batch};
    slots.push_back(logic::consumer_slot{cid, c.max_in_flight});
  }
  st.logic->set_consumers(msg.topic, std::move(slots), st.clock.now_ms(),
                          st.fx);
  act(self);
}

caf::behavior notifier_impl(notifier_actor* self, caf::actor engine,
                            uint32_t shard_count, logic::notifier_options opts,
                            std::function<int64_t()> wall_clock_ms) {
  auto& st = self->state;
  st.engine = std::move(engine);
  st.shards.resize(shard_count);
  st.logic = std::make_unique<logic::notifier_logic>(opts);
  st.clock = logic::wall_clock{std::move(wall_clock_ms)};
  return {
    [self](deliver_batch& batch) { on_deliver_batch(self, batch); },
    [self](release_atom, uint64_t gen) {
      if (self->state.release.claim(gen))
        release_due(self);
    },
    [self](expire_atom, uint64_t gen) {
      auto& st = self->state;
      if (!st.expiry.claim(gen))
        return;
      st.logic->expire(st.clock.now_ms(), st.fx);
      act(self);
      arm_expiry(self);
    },
    [self](overdue_atom, uint64_t gen) {
      if (self->state.overdue.claim(gen))
        time_out_overdue(self);
    },
    [self](shard_up_msg& msg) {
      auto& st = self->state;
      if (msg.index < st.shards.size())
        st.shards[msg.index] = std::move(msg.shard);
    },
    [self](consumers_msg& msg) { on_consumers(self, msg); },
    [self](consumer_down_msg& msg) {
      auto& st = self->state;
      st.logic->consumer_down(msg.id, st.clock.now_ms(), st.fx);
      st.consumers.erase(msg.id);
      act(self);
    },
    [self](stats_atom) {
      notifier_stats_msg out;
      out.topics = self->state.logic->counters();
      out.in_flight = self->state.logic->in_flight();
      return out;
    },
  };
}

} // namespace

caf::actor spawn_notifier(caf::actor_system& sys, caf::actor engine,
                          uint32_t shard_count, logic::notifier_options opts,
                          std::function<int64_t()> wall_clock_ms) {
  return sys.spawn(notifier_impl, std::move(engine), shard_count, opts,
                   std::move(wall_clock_ms));
}

} // namespace dally::actors
