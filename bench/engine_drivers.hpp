#pragma once

// Load drivers for dally-engine-bench: counting consumers, batch producers
// with a bounded number of outstanding requests, a paced stream producer,
// an open-loop producer that never waits for answers,
// and synchronous helpers around an engine handle (embedded or remote: the
// typed interface is the same).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "net/engine_actor.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"
#include "net/wire.hpp"

namespace dally::bench {

using tick_atom = caf::atom_constant<caf::atom("btick")>;

/// UTC wall clock in µs (the engine's due times are UTC ms).
inline int64_t wall_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch())
    .count();
}

inline int64_t wall_ms() {
  return wall_us() / 1000;
}

inline double seconds_between(std::chrono::steady_clock::time_point from,
                              std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// -- consumers ----------------------------------------------------------------

/// What the consumers of one run share with the driver.
struct consumer_tally {
  std::atomic<uint64_t> delivered{0};
  /// Deliveries with attempt > 1 (a lease ran out or a consumer failed).
  std::atomic<uint64_t> redelivered{0};
  /// Lateness is recorded only for deliveries of this topic (empty: none).
  std::string record_topic;
  std::mutex mtx;
  /// (due_ms, delivered wall µs - due_ms * 1000) per recorded delivery.
  std::vector<std::pair<int64_t, int64_t>> samples;
  /// fire_ms - due_ms of the same deliveries: when the notifier sent each
  /// (a task fired ahead is held until due), to tell a late release from a
  /// late consumer.
  std::vector<int64_t> fire_offsets_ms;
};

/// Counts `d` and, for the recorded topic, notes how late it arrived (wall
/// clock `now_us` minus the due time).
inline void tally_delivery(consumer_tally& tally, const v1::Delivery& d,
                           int64_t now_us) {
  if (!tally.record_topic.empty() && d.topic() == tally.record_topic) {
    std::lock_guard<std::mutex> guard{tally.mtx};
    tally.samples.emplace_back(d.due_ms(), now_us - d.due_ms() * 1000);
    tally.fire_offsets_ms.push_back(d.fire_ms() - d.due_ms());
  }
  if (d.attempt() > 1)
    tally.redelivered.fetch_add(1, std::memory_order_relaxed);
  tally.delivered.fetch_add(1, std::memory_order_relaxed);
}

inline net::delivery_reply ack_reply() {
  v1::DeliveryReply reply;
  reply.set_verdict(v1::DeliveryReply::VERDICT_ACK);
  return net::delivery_reply{std::move(reply)};
}

/// Acks every delivery at once and tallies it (lateness taken at the start
/// of the handler).
inline consumer_actor::behavior_type
counting_consumer(consumer_actor::pointer,
                  std::shared_ptr<consumer_tally> tally) {
  return {
    [tally](net::delivery_msg& d) {
      tally_delivery(*tally, d.pb, wall_us());
      return ack_reply();
    },
  };
}

/// The same as a batch consumer: acks a whole batch in one answer.
inline batch_consumer_actor::behavior_type
batch_counting_consumer(batch_consumer_actor::pointer,
                        std::shared_ptr<consumer_tally> tally) {
  return {
    [tally](net::delivery_msg& d) {
      tally_delivery(*tally, d.pb, wall_us());
      return ack_reply();
    },
    [tally](net::delivery_batch_msg& batch) {
      auto now_us = wall_us();
      v1::DeliveryBatchReply reply;
      for (const auto& d : batch.pb.deliveries()) {
        tally_delivery(*tally, d, now_us);
        reply.add_replies()->set_verdict(v1::DeliveryReply::VERDICT_ACK);
      }
      return net::delivery_batch_reply{std::move(reply)};
    },
  };
}

// -- batch producer -----------------------------------------------------------

/// A fixed number of tasks sent as schedule_batch requests.
struct batch_plan {
  std::string topic = "bench";
  uint64_t tasks = 0;
  uint32_t batch = 256;
  /// Requests awaiting their reply at most.
  uint32_t outstanding = 4;
  /// Due time of task `i` (0-based within this producer) sent at `now_ms`.
  std::function<int64_t(uint64_t i, int64_t now_ms)> due_ms;
};

struct batch_progress {
  std::atomic<uint64_t> scheduled{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<bool> done{false};
  std::mutex mtx;
  std::string first_error;

  void fail(uint64_t n, const std::string& what) {
    failed.fetch_add(n, std::memory_order_relaxed);
    std::lock_guard<std::mutex> guard{mtx};
    if (first_error.empty())
      first_error = what;
  }
};

struct batch_producer_state {
  uint64_t next = 0;
  uint64_t answered = 0;
  uint32_t in_flight = 0;
};

using batch_producer_actor = caf::stateful_actor<batch_producer_state>;

inline void produce_more(batch_producer_actor* self, engine_actor engine,
                         std::shared_ptr<const batch_plan> plan,
                         std::shared_ptr<batch_progress> progress) {
  auto& st = self->state;
  while (st.in_flight < plan->outstanding && st.next < plan->tasks) {
    v1::ScheduleBatchRequest req;
    auto now = wall_ms();
    auto n = std::min<uint64_t>(plan->batch, plan->tasks - st.next);
    for (uint64_t k = 0; k < n; ++k, ++st.next) {
      auto* t = req.add_tasks();
      t->set_topic(plan->topic);
      t->mutable_when()->set_at_ms(plan->due_ms(st.next, now));
    }
    ++st.in_flight;
    self->request(engine, caf::infinite, net::make_wire(std::move(req)))
      .then(
        [self, engine, plan, progress, n](net::schedule_batch_reply& r) {
          uint64_t ok = 0;
          for (const auto& res : r.pb.results())
            if (res.has_scheduled())
              ++ok;
          progress->scheduled.fetch_add(ok, std::memory_order_relaxed);
          if (ok < n) {
            std::string what = "schedule failed";
            for (const auto& res : r.pb.results())
              if (res.has_failure()) {
                what = res.failure().message();
                break;
              }
            progress->fail(n - ok, what);
          }
          auto& st = self->state;
          --st.in_flight;
          st.answered += n;
          produce_more(self, engine, plan, progress);
        },
        [self, engine, plan, progress, n](caf::error& err) {
          progress->fail(n, net::describe(err));
          auto& st = self->state;
          --st.in_flight;
          st.answered += n;
          produce_more(self, engine, plan, progress);
        });
  }
  if (st.answered == plan->tasks && st.in_flight == 0) {
    progress->done = true;
    self->quit();
  }
}

/// Sends `plan->tasks` tasks, keeping at most `plan->outstanding` requests
/// unanswered, and sets `progress->done` when every reply is in.
inline caf::behavior batch_producer(batch_producer_actor* self,
                                    engine_actor engine,
                                    std::shared_ptr<const batch_plan> plan,
                                    std::shared_ptr<batch_progress> progress) {
  produce_more(self, engine, plan, progress);
  return {
    [](tick_atom) {
      // Never sent; keeps the behavior non-empty.
    },
  };
}

// -- stream producer ----------------------------------------------------------

/// A steady stream: task i is due at first_due_ms + i * 1000 / rate_per_s
/// and is sent lead_ms before that.
struct stream_plan {
  std::string topic = "stream";
  double rate_per_s = 1000;
  int64_t first_due_ms = 0;
  int64_t lead_ms = 500;
  /// Tasks due at or after this are not sent.
  int64_t end_due_ms = 0;
  int64_t tick_ms = 5;
  uint32_t outstanding = 64;
  /// Most tasks per request.
  uint32_t max_batch = 1024;
};

struct stream_progress {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> scheduled{0};
  std::atomic<uint64_t> failed{0};
  /// Tasks whose schedule reply came after their due time.
  std::atomic<uint64_t> acked_after_due{0};
  /// Ticks that could not send because `outstanding` requests were open.
  std::atomic<uint64_t> stalled_ticks{0};
  std::atomic<bool> done{false};
};

struct stream_producer_state {
  uint64_t next = 0;
  uint64_t total = 0;
  uint32_t in_flight = 0;
};

using stream_producer_actor = caf::stateful_actor<stream_producer_state>;

inline int64_t stream_due_ms(const stream_plan& plan, uint64_t i) {
  return plan.first_due_ms + static_cast<int64_t>(static_cast<double>(i) *
                                                  1000.0 / plan.rate_per_s);
}

inline void stream_step(stream_producer_actor* self, engine_actor engine,
                        std::shared_ptr<const stream_plan> plan,
                        std::shared_ptr<stream_progress> progress) {
  auto& st = self->state;
  auto now = wall_ms();
  while (st.next < st.total &&
         stream_due_ms(*plan, st.next) - plan->lead_ms <= now) {
    if (st.in_flight >= plan->outstanding) {
      progress->stalled_ticks.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    v1::ScheduleBatchRequest req;
    int64_t last_due = 0;
    uint64_t n = 0;
    while (n < plan->max_batch && st.next < st.total) {
      auto due = stream_due_ms(*plan, st.next);
      if (due - plan->lead_ms > now)
        break;
      auto* t = req.add_tasks();
      t->set_topic(plan->topic);
      t->mutable_when()->set_at_ms(due);
      last_due = due;
      ++st.next;
      ++n;
    }
    progress->sent.fetch_add(n, std::memory_order_relaxed);
    ++st.in_flight;
    self->request(engine, caf::infinite, net::make_wire(std::move(req)))
      .then(
        [self, progress, n, last_due](net::schedule_batch_reply& r) {
          uint64_t ok = 0;
          for (const auto& res : r.pb.results())
            if (res.has_scheduled())
              ++ok;
          progress->scheduled.fetch_add(ok, std::memory_order_relaxed);
          progress->failed.fetch_add(n - ok, std::memory_order_relaxed);
          // Only the last task of the batch is checked: the others are
          // due earlier, so this undercounts at most by one batch.
          if (wall_ms() > last_due)
            progress->acked_after_due.fetch_add(n, std::memory_order_relaxed);
          --self->state.in_flight;
        },
        [self, progress, n](caf::error&) {
          progress->failed.fetch_add(n, std::memory_order_relaxed);
          --self->state.in_flight;
        });
  }
  if (st.next >= st.total && st.in_flight == 0) {
    progress->done = true;
    self->quit();
    return;
  }
  self->delayed_send(self, std::chrono::milliseconds{plan->tick_ms},
                     tick_atom::value);
}

/// Sends the stream of `plan` until its end, then sets `progress->done`.
inline caf::behavior
stream_producer(stream_producer_actor* self, engine_actor engine,
                std::shared_ptr<const stream_plan> plan,
                std::shared_ptr<stream_progress> progress) {
  auto span_ms = std::max<int64_t>(0, plan->end_due_ms - plan->first_due_ms);
  self->state.total = static_cast<uint64_t>(static_cast<double>(span_ms) *
                                            plan->rate_per_s / 1000.0);
  self->send(self, tick_atom::value);
  return {
    [self, engine, plan, progress](tick_atom) {
      stream_step(self, engine, plan, progress);
    },
  };
}

// -- open-loop producer -------------------------------------------------------

/// A producer that never waits: schedule batches at a fixed rate,
/// whatever the engine answers.
struct flood_plan {
  std::string topic = "flood";
  double rate_per_s = 1'000'000;
  int64_t span_ms = 3'000;
  /// Each task is due this long after it is sent.
  int64_t due_after_ms = 500;
  uint32_t batch = 64;
  int64_t tick_ms = 5;
};

struct flood_progress {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> overloaded{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> answered{0};
  std::atomic<bool> sending_done{false};
};

struct flood_state {
  int64_t start_ms = 0;
  uint64_t sent = 0;
};

using flood_actor = caf::stateful_actor<flood_state>;

/// Counts the answer to a batch of `n` tasks: `ok` scheduled, `refused`
/// refused with overloaded, the rest failed otherwise.
inline void flood_answer(flood_progress& p, uint64_t n, uint64_t ok,
                         uint64_t refused) {
  p.accepted.fetch_add(ok, std::memory_order_relaxed);
  p.overloaded.fetch_add(refused, std::memory_order_relaxed);
  p.failed.fetch_add(n - ok - refused, std::memory_order_relaxed);
  p.answered.fetch_add(n, std::memory_order_relaxed);
}

/// Sends a batch of `n` tasks due `plan.due_after_ms` from `now_ms`.
inline void flood_send(flood_actor* self, const engine_actor& engine,
                       const flood_plan& plan, uint64_t n, int64_t now_ms,
                       std::shared_ptr<flood_progress> progress) {
  v1::ScheduleBatchRequest req;
  for (uint64_t i = 0; i < n; ++i) {
    auto* t = req.add_tasks();
    t->set_topic(plan.topic);
    t->mutable_when()->set_at_ms(now_ms + plan.due_after_ms);
  }
  auto overloaded = static_cast<uint32_t>(core::errc::overloaded);
  self->request(engine, caf::infinite, net::make_wire(std::move(req)))
    .then(
      [progress, n, overloaded](net::schedule_batch_reply& r) {
        uint64_t ok = 0;
        uint64_t refused = 0;
        for (const auto& res : r.pb.results())
          if (res.has_scheduled())
            ++ok;
          else if (res.failure().code() == overloaded)
            ++refused;
        flood_answer(*progress, n, ok, refused);
      },
      [progress, n](caf::error& err) {
        bool refused = net::from_caf(err).code() == core::errc::overloaded;
        flood_answer(*progress, n, 0, refused ? n : 0);
      });
}

/// Sends what the rate asks for by now, then ticks again until the span
/// is over; it stays up to count the answers.
inline void flood_step(flood_actor* self, engine_actor engine,
                       std::shared_ptr<const flood_plan> plan,
                       std::shared_ptr<flood_progress> progress) {
  auto& st = self->state;
  auto now = wall_ms();
  auto elapsed = std::min(now - st.start_ms, plan->span_ms);
  auto target = static_cast<uint64_t>(static_cast<double>(elapsed) *
                                      plan->rate_per_s / 1000.0);
  while (st.sent < target) {
    auto n = std::min<uint64_t>(plan->batch, target - st.sent);
    flood_send(self, engine, *plan, n, now, progress);
    st.sent += n;
    progress->sent.fetch_add(n, std::memory_order_relaxed);
  }
  if (elapsed >= plan->span_ms) {
    progress->sending_done = true;
    return;
  }
  self->delayed_send(self, std::chrono::milliseconds{plan->tick_ms},
                     tick_atom::value);
}

/// Floods `engine` per `plan`; send it an exit once every answer is in.
inline caf::behavior flood_producer(flood_actor* self, engine_actor engine,
                                    std::shared_ptr<const flood_plan> plan,
                                    std::shared_ptr<flood_progress> progress) {
  self->state.start_ms = wall_ms();
  self->send(self, tick_atom::value);
  return {
    [self, engine, plan, progress](tick_atom) {
      flood_step(self, engine, plan, progress);
    },
  };
}

// -- synchronous helpers ------------------------------------------------------

/// Subscribes `consumer` (a consumer_actor or batch_consumer_actor) to
/// `topic`; an error on failure.
template<class Consumer>
caf::error subscribe(caf::scoped_actor& self, const engine_actor& engine,
                     const std::string& topic, const Consumer& consumer,
                     uint32_t max_in_flight, uint32_t max_batch = 0) {
  v1::SubscribeRequest sub;
  sub.set_topic(topic);
  sub.set_max_in_flight(max_in_flight);
  sub.set_max_batch(max_batch);
  caf::error failure;
  self
    ->request(engine, std::chrono::seconds{30},
              net::subscribe_request{std::move(sub)}, consumer)
    .receive([](net::empty_reply&) {},
             [&](caf::error& err) { failure = std::move(err); });
  return failure;
}

inline caf::expected<v1::StatsReply> engine_stats(caf::scoped_actor& self,
                                                  const engine_actor& engine) {
  caf::expected<v1::StatsReply> out =
    caf::make_error(caf::sec::request_timeout);
  self->request(engine, std::chrono::seconds{30}, net::stats_request{})
    .receive([&](net::stats_reply& r) { out = std::move(r.pb); },
             [&](caf::error& err) { out = std::move(err); });
  return out;
}

/// Polls `done` every `poll` until it holds or `timeout` passes; false on
/// timeout.
inline bool
wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
           std::chrono::microseconds poll = std::chrono::microseconds{500}) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

} // namespace dally::bench
