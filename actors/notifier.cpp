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
#include "actors/type_ids.hpp"

namespace dally::actors {

namespace {

struct notifier_state {
  static inline const char* name = "dally.notifier";

  caf::actor engine;
  /// By shard index: the running shard actor (each announces itself when
  /// it starts, before it sends any batch).
  std::vector<caf::actor> shards;
  std::unique_ptr<dispatcher> logic;
  std::function<int64_t()> wall_clock_ms;
  std::unordered_map<consumer_id, consumer_actor> consumers;
  dispatch_effects fx;
  /// The armed expiry check: its generation and wall-clock target.
  uint64_t expire_generation = 0;
  int64_t expire_armed_ms = std::numeric_limits<int64_t>::max();
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

delivery_ref ref_of(const v1::Delivery& d) {
  return delivery_ref{d.id().task_id(), d.id().occurrence(), d.id().attempt()};
}

void send_one(notifier_actor* self, consumer_id cid, v1::Delivery d) {
  auto& st = self->state;
  auto i = st.consumers.find(cid);
  if (i == st.consumers.end()) {
    // Unknown handle (a race with its removal): treat it as gone.
    st.logic->failed(cid, ref_of(d), false, st.wall_clock_ms(), st.fx);
    return;
  }
  auto ref = ref_of(d);
  auto timeout_ms =
    std::max<int64_t>(1, d.lease_deadline_ms() - st.wall_clock_ms());
  self
    ->request(i->second, std::chrono::milliseconds{timeout_ms},
              delivery_msg{std::move(d)})
    .then(
      [self, cid, ref](delivery_reply& reply) {
        auto& st = self->state;
        st.logic->answered(cid, ref, st.wall_clock_ms(), st.fx);
        v1::DeliveryId id;
        id.set_task_id(ref.id);
        id.set_occurrence(ref.occurrence);
        id.set_attempt(ref.attempt);
        switch (reply.pb.verdict()) {
          case v1::DeliveryReply::VERDICT_ACK: {
            v1::AckRequest ack;
            *ack.mutable_id() = id;
            caf::anon_send(settle_target(self, ref.id),
                           ack_request{std::move(ack)});
            break;
          }
          case v1::DeliveryReply::VERDICT_NACK: {
            v1::NackRequest nack;
            *nack.mutable_id() = id;
            if (reply.pb.has_retry_in_ms())
              nack.set_retry_in_ms(reply.pb.retry_in_ms());
            caf::anon_send(settle_target(self, ref.id),
                           nack_request{std::move(nack)});
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
        st.logic->failed(cid, ref, timeout, st.wall_clock_ms(), st.fx);
        act(self);
      });
}

/// Keeps one expiry check armed, at the dispatcher's next one. Armed after
/// `deliver` (which may start a queue) and after each check (which re-arms
/// for the new fronts); a front with a shorter lease than the one before
/// it is caught by the next check, or when its turn comes.
void arm_expiry(notifier_actor* self) {
  auto& st = self->state;
  auto next = st.logic->next_expiry_ms();
  if (next >= st.expire_armed_ms)
    return; // The armed check comes first; it re-arms when it runs.
  st.expire_armed_ms = next;
  auto gen = ++st.expire_generation;
  auto delay_ms = std::max<int64_t>(0, next - st.wall_clock_ms());
  self->delayed_send(self, std::chrono::milliseconds{delay_ms},
                     expire_atom::value, gen);
}

/// Carries out what the dispatcher asked for.
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
    for (auto& [cid, d] : fx.send)
      send_one(self, cid, std::move(d));
  }
}

caf::behavior notifier_impl(notifier_actor* self, caf::actor engine,
                            uint32_t shard_count, dispatcher_options opts,
                            std::function<int64_t()> wall_clock_ms) {
  auto& st = self->state;
  st.engine = std::move(engine);
  st.shards.resize(shard_count);
  st.logic = std::make_unique<dispatcher>(opts);
  st.wall_clock_ms = std::move(wall_clock_ms);
  return {
    [self](deliver_batch& batch) {
      auto& st = self->state;
      st.logic->deliver(std::move(batch.items), st.wall_clock_ms(), st.fx);
      act(self);
      arm_expiry(self);
    },
    [self](expire_atom, uint64_t gen) {
      auto& st = self->state;
      if (gen != st.expire_generation)
        return;
      st.expire_armed_ms = std::numeric_limits<int64_t>::max();
      st.logic->expire(st.wall_clock_ms(), st.fx);
      act(self);
      arm_expiry(self);
    },
    [self](shard_up_msg& msg) {
      auto& st = self->state;
      if (msg.index < st.shards.size())
        st.shards[msg.index] = std::move(msg.shard);
    },
    [self](consumers_msg& msg) {
      auto& st = self->state;
      std::vector<consumer_slot> slots;
      slots.reserve(msg.consumers.size());
      for (auto& [handle, cap] : msg.consumers) {
        auto cid = handle.id();
        st.consumers[cid] = handle;
        slots.push_back(consumer_slot{cid, cap});
      }
      st.logic->set_consumers(msg.topic, std::move(slots), st.wall_clock_ms(),
                              st.fx);
      act(self);
    },
    [self](consumer_down_msg& msg) {
      auto& st = self->state;
      st.logic->consumer_down(msg.id, st.wall_clock_ms(), st.fx);
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
                          uint32_t shard_count, dispatcher_options opts,
                          std::function<int64_t()> wall_clock_ms) {
  return sys.spawn(notifier_impl, std::move(engine), shard_count, opts,
                   std::move(wall_clock_ms));
}

} // namespace dally::actors
