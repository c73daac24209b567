#include "actors/notifier.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"
#include "logic/answer_deadlines.hpp"
#include "logic/wall_clock.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

/// One of the notifier's armed timers: its generation (the message of an
/// older one is ignored) and wall-clock target.
struct armed_check {
  uint64_t generation = 0;
  int64_t armed_ms = std::numeric_limits<int64_t>::max();

  /// Whether the timer message of generation `gen` is the armed one; if
  /// so, nothing is armed any more.
  bool claim(uint64_t gen) noexcept {
    if (gen != generation)
      return false;
    armed_ms = std::numeric_limits<int64_t>::max();
    return true;
  }
};

struct notifier_state {
  static inline const char* name = "dally.notifier";

  caf::actor engine;
  /// By shard index: the running shard actor (each announces itself when
  /// it starts, before it sends any batch).
  std::vector<caf::actor> shards;
  std::unique_ptr<logic::notifier_logic> logic;
  logic::wall_clock clock;
  /// Fired deliveries waiting for their due time, and the armed release:
  /// its generation and wall-clock target.
  logic::release_queue holds;
  uint64_t release_generation = 0;
  int64_t release_armed_ms = std::numeric_limits<int64_t>::max();
  /// Handle and deliveries per message of each known consumer.
  std::unordered_map<logic::consumer_id, std::pair<consumer_actor, uint32_t>>
    consumers;
  logic::notifier_effects fx;
  /// The armed expiry check of queued deliveries.
  armed_check expiry;
  /// Requests to consumers awaiting an answer, timed out by one armed
  /// check rather than by CAF's clock (see answer_deadlines).
  logic::answer_deadlines awaiting;
  armed_check overdue;
};

using notifier_actor = caf::stateful_actor<notifier_state>;

void act(notifier_actor* self);

/// Where a verdict on task `id` goes: its shard, or the engine until that
/// shard has announced itself.
const caf::actor& settle_target(notifier_actor* self, core::task_id id) {
  auto& st = self->state;
  if (!st.shards.empty()) {
    auto& shard = st.shards[id % st.shards.size()];
    if (shard)
      return shard;
  }
  return st.engine;
}

/// Arms `check` (sending `Atom` and its generation) at `next_ms`, unless
/// it is armed for then or sooner: the armed check re-arms when it runs.
template<class Atom>
void arm_at(notifier_actor* self, armed_check& check, int64_t next_ms) {
  if (next_ms >= check.armed_ms)
    return;
  check.armed_ms = next_ms;
  auto gen = ++check.generation;
  auto delay_ms = std::max<int64_t>(0, next_ms - self->state.clock.now_ms());
  self->delayed_send(self, std::chrono::milliseconds{delay_ms}, Atom::value,
                     gen);
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
      v1::DeliveryId id;
      id.set_task_id(ref.id);
      id.set_occurrence(ref.occurrence);
      id.set_attempt(ref.attempt);
      switch (reply.pb.verdict()) {
        case v1::DeliveryReply::VERDICT_ACK: {
          v1::AckRequest ack;
          *ack.mutable_id() = id;
          caf::anon_send(settle_target(self, ref.id),
                         net::ack_request{std::move(ack)});
          break;
        }
        case v1::DeliveryReply::VERDICT_NACK: {
          v1::NackRequest nack;
          *nack.mutable_id() = id;
          if (reply.pb.has_retry_in_ms())
            nack.set_retry_in_ms(reply.pb.retry_in_ms());
          caf::anon_send(settle_target(self, ref.id),
                         net::nack_request{std::move(nack)});
          break;
        }
        default:
          break; // The consumer settles through the engine.
      }
      act(self);
    },
    [self, cid, ref](caf::error& err) {
      auto& st = self->state;
      bool timeout = err == caf::sec::request_timeout;
      st.logic->failed(cid, ref, timeout, st.clock.now_ms(), st.fx);
      act(self);
    });
}

/// Sends a batch consumer several deliveries in one request, timed out at
/// the earliest of their lease deadlines; its answer settles them all, and
/// the acks and nacks go to each shard in one message.
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
      auto& st = self->state;
      auto now_ms = st.clock.now_ms();
      // By target shard (or the engine): the verdicts to settle.
      std::vector<std::pair<caf::actor, settle_batch_msg>> out;
      const auto& verdicts = reply.pb.replies();
      for (size_t k = 0; k < refs.size(); ++k) {
        st.logic->answered(cid, refs[k], now_ms, st.fx);
        if (k >= static_cast<size_t>(verdicts.size()))
          continue; // No verdict: VERDICT_LATER, the lease decides.
        const auto& v = verdicts[static_cast<int>(k)];
        settle_item item{refs[k], true, std::nullopt};
        if (v.verdict() == v1::DeliveryReply::VERDICT_NACK) {
          item.ack = false;
          if (v.has_retry_in_ms())
            item.retry_in_ms = v.retry_in_ms();
        } else if (v.verdict() != v1::DeliveryReply::VERDICT_ACK) {
          continue;
        }
        const auto& target = settle_target(self, refs[k].id);
        auto j = std::find_if(out.begin(), out.end(),
                              [&](auto& p) { return p.first == target; });
        if (j == out.end()) {
          out.emplace_back(target, settle_batch_msg{});
          j = std::prev(out.end());
          j->second.items.reserve(refs.size() - k);
        }
        j->second.items.push_back(std::move(item));
      }
      for (auto& [target, msg] : out)
        caf::anon_send(target, std::move(msg));
      act(self);
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

/// Payload bytes one batch message carries at most (a larger delivery goes
/// alone), so that a batch of big payloads stays a sane message.
constexpr size_t max_batch_payload_bytes = size_t{1} << 20;

/// Sends what the notifier_logic chose: one message per delivery to a plain
/// consumer; to a batch consumer, its deliveries of this round in batches
/// of up to its `max_batch`, in the notifier_logic's order.
void send_all(
  notifier_actor* self,
  std::vector<std::pair<logic::consumer_id, logic::delivery_box>> sends) {
  auto& st = self->state;
  std::unordered_map<logic::consumer_id, std::vector<logic::delivery_box>>
    pending;
  std::vector<logic::consumer_id> order;
  for (auto& [cid, d] : sends) {
    auto i = st.consumers.find(cid);
    if (i == st.consumers.end() || i->second.second <= 1) {
      send_one(self, cid, std::move(d));
      continue;
    }
    auto [p, added] = pending.try_emplace(cid);
    if (added) {
      order.push_back(cid);
      p->second.reserve(std::min<size_t>(sends.size(), i->second.second));
    }
    p->second.push_back(std::move(d));
  }
  for (auto cid : order) {
    auto& items = pending[cid];
    size_t max_batch = st.consumers[cid].second;
    std::vector<logic::delivery_box> batch;
    batch.reserve(std::min(max_batch, items.size()));
    size_t bytes = 0;
    for (auto& d : items) {
      auto size = d->payload().size();
      if (!batch.empty() && (batch.size() == max_batch ||
                             bytes + size > max_batch_payload_bytes)) {
        send_batch(self, cid, std::move(batch));
        batch.clear();
        batch.reserve(std::min(max_batch, items.size()));
        bytes = 0;
      }
      bytes += size;
      batch.push_back(std::move(d));
    }
    if (batch.size() == 1)
      send_one(self, cid, std::move(batch.front()));
    else
      send_batch(self, cid, std::move(batch));
  }
}

/// Keeps one expiry check armed, at the notifier_logic's next one. Armed after
/// `deliver` (which may start a queue) and after each check (which re-arms
/// for the new fronts); a front with a shorter lease than the one before
/// it is caught by the next check, or when its turn comes.
void arm_expiry(notifier_actor* self) {
  auto& st = self->state;
  arm_at<expire_atom>(self, st.expiry, st.logic->next_expiry_ms());
}

/// Keeps one release armed, at the earliest held delivery's due time.
void arm_release(notifier_actor* self) {
  auto& st = self->state;
  auto next = st.holds.next_release_ms();
  if (next >= st.release_armed_ms)
    return; // The armed release comes first; it re-arms when it runs.
  st.release_armed_ms = next;
  auto gen = ++st.release_generation;
  auto delay_us = st.clock.delay_until_us(next);
  // High priority: releasing due deliveries goes ahead of answers and
  // batches queued in the mailbox.
  if (delay_us <= 0)
    self->send<caf::message_priority::high>(self, release_atom::value, gen);
  else
    self->delayed_send<caf::message_priority::high>(
      self, std::chrono::microseconds{delay_us}, release_atom::value, gen);
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

caf::behavior notifier_impl(notifier_actor* self, caf::actor engine,
                            uint32_t shard_count, logic::notifier_options opts,
                            std::function<int64_t()> wall_clock_ms) {
  auto& st = self->state;
  st.engine = std::move(engine);
  st.shards.resize(shard_count);
  st.logic = std::make_unique<logic::notifier_logic>(opts);
  st.clock = logic::wall_clock{std::move(wall_clock_ms)};
  return {
    [self](deliver_batch& batch) {
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
    },
    [self](release_atom, uint64_t gen) {
      auto& st = self->state;
      if (gen != st.release_generation)
        return;
      st.release_armed_ms = std::numeric_limits<int64_t>::max();
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
      auto& st = self->state;
      if (!st.overdue.claim(gen))
        return;
      // What CAF's clock sends at a request's timeout: its answer becomes
      // request_timeout. An answer that still arrives later is dropped.
      for (auto id : st.awaiting.pop_due(st.clock.now_ms()))
        self->eq_impl(caf::message_id{id}, self->ctrl(), self->context(),
                      caf::make_error(caf::sec::request_timeout));
      arm_overdue(self);
    },
    [self](shard_up_msg& msg) {
      auto& st = self->state;
      if (msg.index < st.shards.size())
        st.shards[msg.index] = std::move(msg.shard);
    },
    [self](consumers_msg& msg) {
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
    },
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
