#include "actors/consumer_registry.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "actors/messages.hpp"
#include "core/placement.hpp"
#include "core/task.hpp"
#include "net/error.hpp"
#include "net/owning_actor.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

namespace {

struct subscription {
  consumer_actor handle;
  uint32_t max_in_flight = 1;
  uint32_t max_batch = 1;
};

struct registry_state {
  static inline const char* name = "dally.registry";

  std::vector<caf::actor> notifiers;
  uint32_t default_max_in_flight = 1000;
  uint32_t default_max_batch = 64;
  core::task_limits limits;
  /// Topic -> consumers, in subscription order.
  std::map<std::string, std::vector<subscription>> topics;
  /// Consumer -> how many topics it consumes (monitored while > 0).
  std::unordered_map<caf::actor_addr, size_t> watched;
};

using registry_actor = net::owning_actor<registry_state>;

void publish(registry_actor* self, const std::string& topic) {
  auto& st = self->state;
  consumers_msg msg;
  msg.topic = topic;
  if (auto i = st.topics.find(topic); i != st.topics.end())
    for (auto& sub : i->second)
      msg.consumers.push_back(
        consumer_entry{sub.handle, sub.max_in_flight, sub.max_batch});
  auto& target = st.notifiers[core::notifier_of(topic, st.notifiers.size())];
  self->send(target, std::move(msg));
}

/// Adds `consumer` to the request's topic, or updates its limits there.
caf::result<net::empty_reply> subscribe(registry_actor* self,
                                        const v1::SubscribeRequest& req,
                                        consumer_actor consumer, bool batches) {
  auto& st = self->state;
  const auto& topic = req.topic();
  if (auto err = core::validate_topic(topic, st.limits))
    return net::make_caf_error(err.code(), err.message());
  if (!consumer)
    return net::make_caf_error(core::errc::invalid_request,
                               "subscribe needs a consumer actor");
  auto cap = req.max_in_flight() == 0
               ? st.default_max_in_flight
               : std::min(req.max_in_flight(), st.default_max_in_flight);
  uint32_t batch = 1;
  if (batches) {
    batch = req.max_batch() == 0 ? st.default_max_batch : req.max_batch();
    batch = std::min({batch, cap, max_batch_limit});
  }
  auto& subs = st.topics[topic];
  auto i = std::find_if(subs.begin(), subs.end(),
                        [&](auto& s) { return s.handle == consumer; });
  if (i != subs.end()) {
    i->max_in_flight = cap;
    i->max_batch = batch;
  } else {
    subs.push_back(subscription{consumer, cap, batch});
    if (st.watched[consumer.address()]++ == 0)
      self->monitor(consumer);
  }
  publish(self, topic);
  return net::empty_reply{};
}

/// Removes `consumer` from `topic`, if it was there.
void unsubscribe(registry_actor* self, const std::string& topic_name,
                 const consumer_actor& consumer) {
  auto& st = self->state;
  auto t = st.topics.find(topic_name);
  if (t == st.topics.end())
    return;
  auto& subs = t->second;
  auto i = std::find_if(subs.begin(), subs.end(),
                        [&](auto& s) { return s.handle == consumer; });
  if (i == subs.end())
    return;
  subs.erase(i);
  auto topic = t->first;
  if (subs.empty())
    st.topics.erase(t);
  if (auto w = st.watched.find(consumer.address());
      w != st.watched.end() && --w->second == 0) {
    st.watched.erase(w);
    self->demonitor(consumer.address());
  }
  publish(self, topic);
}

/// Drops a consumer that ended from every topic it consumed.
void on_consumer_down(registry_actor* self, const caf::down_msg& msg) {
  auto& st = self->state;
  if (st.watched.erase(msg.source) == 0)
    return;
  for (auto i = st.topics.begin(); i != st.topics.end();) {
    auto& subs = i->second;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const subscription& s) {
                                return s.handle.address() == msg.source;
                              }),
               subs.end());
    i = subs.empty() ? st.topics.erase(i) : std::next(i);
  }
  // The notifiers drop the consumer from every topic and requeue what it
  // held; they need no separate topic update.
  for (auto& n : st.notifiers)
    self->send(n, consumer_down_msg{msg.source.id()});
}

caf::behavior registry_impl(registry_actor* self,
                            std::vector<caf::actor> notifiers,
                            uint32_t default_max_in_flight,
                            uint32_t default_max_batch,
                            size_t max_topic_bytes) {
  auto& st = self->state;
  st.notifiers = std::move(notifiers);
  st.limits.max_topic_bytes = max_topic_bytes;
  st.default_max_in_flight = default_max_in_flight;
  st.default_max_batch =
    std::clamp<uint32_t>(default_max_batch, 1, max_batch_limit);
  self->set_down_handler(
    [self](caf::down_msg& msg) { on_consumer_down(self, msg); });
  return {
    [self](net::subscribe_request& req,
           consumer_actor& consumer) -> caf::result<net::empty_reply> {
      if (req.pb.max_batch() > 1)
        return net::make_caf_error(core::errc::invalid_request,
                                   "max_batch above 1 needs a batch consumer "
                                   "(dally::batch_consumer_actor)");
      return subscribe(self, req.pb, std::move(consumer), false);
    },
    [self](net::subscribe_request& req,
           batch_consumer_actor& consumer) -> caf::result<net::empty_reply> {
      return subscribe(self, req.pb, std::move(consumer), true);
    },
    [self](net::unsubscribe_request& req,
           consumer_actor& consumer) -> caf::result<net::empty_reply> {
      unsubscribe(self, req.pb.topic(), consumer);
      return net::empty_reply{};
    },
    [self](topics_atom) {
      topic_consumers_msg out;
      for (auto& [topic, subs] : self->state.topics)
        out.counts[topic] = static_cast<uint32_t>(subs.size());
      return out;
    },
  };
}

} // namespace

caf::actor spawn_consumer_registry(caf::actor_system& sys,
                                   std::vector<caf::actor> notifiers,
                                   uint32_t default_max_in_flight,
                                   uint32_t default_max_batch,
                                   size_t max_topic_bytes) {
  return sys.spawn(registry_impl, std::move(notifiers), default_max_in_flight,
                   default_max_batch, max_topic_bytes);
}

} // namespace dally::actors
