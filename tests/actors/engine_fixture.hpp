#pragma once

// A CAF test_coordinator fixture for the engine's actors: virtual time for
// both the actor clock and the engine's wall clock, scripted consumers, and
// synchronous request helpers. (CAF's own test DSL crashes under
// Boost.Test, hence this small one.)

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "../storage/test_support.hpp"
#include "actors/engine.hpp"
#include "actors/messages.hpp"
#include "net/engine_actor.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"

namespace dally::actors::test {

/// 2023-11-14T22:13:20Z: the wall clock's reading at virtual time zero.
constexpr int64_t t0 = 1'700'000'000'000;

struct test_config : caf::actor_system_config {
  test_config() {
    set("scheduler.policy", caf::atom("testing"));
    set("logger.verbosity", caf::atom("quiet"));
    dally::runtime::add_message_types(*this);
  }
};

/// What a scripted consumer does with a delivery.
enum class verdict_mode {
  ack,
  nack,
  /// Never answers (the request times out at the lease deadline).
  hang,
  /// Answers VERDICT_LATER; the test settles through the engine.
  later,
};

/// Everything a scripted consumer saw, with the wall-clock time of each.
struct consumer_log {
  verdict_mode mode = verdict_mode::ack;
  std::vector<v1::Delivery> got;
  std::vector<int64_t> got_ms;
  /// Promises of hanging deliveries, kept so that none is answered.
  std::vector<caf::typed_response_promise<net::delivery_reply>> held;
};

/// The error in `res`, printable; Boost builds the message of a passing
/// check too, so it must not touch a missing error.
template<class T>
std::string error_text(const caf::expected<T>& res) {
  return res ? std::string{"no error"} : net::describe(res.error());
}

/// A consumer that answers per `log->mode` and records what it got.
inline consumer_actor::behavior_type
scripted_consumer(consumer_actor::pointer self,
                  std::shared_ptr<consumer_log> log,
                  std::function<int64_t()> clock) {
  return {
    [self, log,
     clock](net::delivery_msg& d) -> caf::result<net::delivery_reply> {
      log->got.push_back(d.pb);
      log->got_ms.push_back(clock());
      v1::DeliveryReply reply;
      switch (log->mode) {
        case verdict_mode::ack:
          reply.set_verdict(v1::DeliveryReply::VERDICT_ACK);
          return net::delivery_reply{reply};
        case verdict_mode::nack:
          reply.set_verdict(v1::DeliveryReply::VERDICT_NACK);
          return net::delivery_reply{reply};
        case verdict_mode::later:
          reply.set_verdict(v1::DeliveryReply::VERDICT_LATER);
          return net::delivery_reply{reply};
        case verdict_mode::hang:
          break;
      }
      auto rp = self->make_response_promise<net::delivery_reply>();
      log->held.push_back(rp);
      return rp;
    },
  };
}

/// What a scripted batch consumer saw: each message's deliveries, and the
/// answer it gave (built by `answer` from the batch).
struct batch_log {
  std::vector<std::vector<v1::Delivery>> batches;
  /// Deliveries that came alone (delivery_msg); acked.
  std::vector<v1::Delivery> singles;
  std::function<v1::DeliveryBatchReply(const v1::DeliveryBatch&)> answer;
  /// Set: batches are held unanswered (their promises kept here).
  bool hold = false;
  std::vector<caf::typed_response_promise<net::delivery_batch_reply>> held;
};

/// A batch consumer that records every message and answers each batch with
/// `log->answer` (acks alone-coming deliveries).
inline batch_consumer_actor::behavior_type
scripted_batch_consumer(batch_consumer_actor::pointer self,
                        std::shared_ptr<batch_log> log) {
  return {
    [log](net::delivery_msg& d) {
      log->singles.push_back(d.pb);
      v1::DeliveryReply reply;
      reply.set_verdict(v1::DeliveryReply::VERDICT_ACK);
      return net::delivery_reply{reply};
    },
    [self, log](net::delivery_batch_msg& batch)
      -> caf::result<net::delivery_batch_reply> {
      log->batches.emplace_back(batch.pb.deliveries().begin(),
                                batch.pb.deliveries().end());
      if (!log->hold)
        return net::delivery_batch_reply{log->answer(batch.pb)};
      auto rp = self->make_response_promise<net::delivery_batch_reply>();
      log->held.push_back(rp);
      return rp;
    },
  };
}

/// Every verdict of `batch` set to `v`.
inline v1::DeliveryBatchReply
all_verdicts(const v1::DeliveryBatch& batch,
             v1::DeliveryReply::Verdict v = v1::DeliveryReply::VERDICT_ACK) {
  v1::DeliveryBatchReply out;
  for (int i = 0; i < batch.deliveries_size(); ++i)
    out.add_replies()->set_verdict(v);
  return out;
}

class engine_fixture {
public:
  explicit engine_fixture(logic::engine_config cfg = {}) {
    cfg_ = std::move(cfg);
    cfg_.data_dir = dir_.path().string();
    cfg_.wall_clock_ms = [this] { return now_ms(); };
    engine_ = spawn_engine(sys_, cfg_);
    run();
  }

  ~engine_fixture() { stop(); }

  /// Sends the engine an exit and runs until it and its shards are gone.
  void stop() {
    for (auto& c : consumers_)
      self_->send_exit(c, caf::exit_reason::user_shutdown);
    consumers_.clear();
    if (engine_) {
      self_->send_exit(engine_, caf::exit_reason::user_shutdown);
      engine_ = nullptr;
    }
    run();
  }

  /// Starts the engine again on the same data directory.
  void restart() {
    stop();
    engine_ = spawn_engine(sys_, cfg_);
    run();
  }

  /// The engine's wall clock: t0 plus virtual time elapsed.
  int64_t now_ms() {
    using namespace std::chrono;
    auto since = sched_.clock().current_time.time_since_epoch();
    return t0 + duration_cast<milliseconds>(since).count();
  }

  /// Runs every ready job, including the ones they create.
  void run() { sched_.run(); }

  /// Runs only `who`'s jobs while every other actor waits: the engine
  /// routes a burst of requests before any shard takes one.
  void run_only(const caf::actor& who) {
    auto* job =
      dynamic_cast<caf::resumable*>(caf::actor_cast<caf::abstract_actor*>(who));
    sched_.run_jobs_filtered([job](caf::resumable* r) { return r == job; });
  }

  /// Moves virtual time forward by `ms`, firing due timers on the way in
  /// order, and runs everything they cause.
  void advance_ms(int64_t ms) {
    auto target = sched_.clock().current_time + std::chrono::milliseconds{ms};
    run();
    while (sched_.clock().has_pending_timeout()) {
      auto next = sched_.clock().schedule().begin()->first;
      if (next > target)
        break;
      sched_.clock().current_time = std::max(sched_.clock().current_time, next);
      sched_.clock().trigger_timeout();
      run();
    }
    sched_.clock().current_time = target;
    run();
  }

  /// Advances to wall-clock time `at_ms`.
  void advance_to(int64_t at_ms) {
    auto now = now_ms();
    if (at_ms > now)
      advance_ms(at_ms - now);
    else
      run();
  }

  /// Sends `req` to the engine, runs everything, and returns the reply or
  /// the error. Fails the test if no answer came.
  template<class Reply, class... Req>
  caf::expected<Reply> call(Req... req) {
    return call_to<Reply>(caf::actor_cast<caf::actor>(engine_),
                          std::move(req)...);
  }

  template<class Reply, class... Req>
  caf::expected<Reply> call_to(const caf::actor& dest, Req... req) {
    auto handle = self_->request(dest, caf::infinite, std::move(req)...);
    run();
    std::optional<caf::expected<Reply>> out;
    if (self_->mailbox().empty()) {
      BOOST_FAIL("no answer from the engine");
    }
    handle.receive([&](Reply& reply) { out = std::move(reply); },
                   [&](caf::error& err) { out = std::move(err); });
    return std::move(*out);
  }

  /// Schedules `topic`/`payload` due at `due_ms`; fails the test on error.
  uint64_t schedule_at(const std::string& topic, int64_t due_ms,
                       std::string payload = "p") {
    v1::ScheduleRequest req;
    req.set_topic(topic);
    req.set_payload(std::move(payload));
    req.mutable_when()->set_at_ms(due_ms);
    auto res = call<net::schedule_reply>(net::schedule_request{std::move(req)});
    BOOST_REQUIRE_MESSAGE(res, "schedule failed: " << error_text(res));
    return res->pb.id();
  }

  /// Spawns a consumer with `mode`, subscribes it to `topic`.
  std::pair<consumer_actor, std::shared_ptr<consumer_log>>
  consumer(const std::string& topic, verdict_mode mode,
           uint32_t max_in_flight = 0) {
    auto log = std::make_shared<consumer_log>();
    log->mode = mode;
    auto clock = [this] { return now_ms(); };
    // Arguments go through spawn (not a capture): CAF 0.17 dereferences a
    // null tuple for argument-less function actors, which UBSan rejects.
    auto handle =
      sys_.spawn(scripted_consumer, log, std::function<int64_t()>{clock});
    consumers_.push_back(caf::actor_cast<caf::actor>(handle));
    subscribe(topic, handle, max_in_flight);
    return {handle, log};
  }

  /// Spawns a batch consumer answering with `log->answer` (all acks when
  /// unset), subscribes it to `topic` with `max_batch`.
  std::pair<batch_consumer_actor, std::shared_ptr<batch_log>>
  batch_consumer(const std::string& topic, uint32_t max_batch,
                 uint32_t max_in_flight = 0) {
    auto log = std::make_shared<batch_log>();
    log->answer = [](const v1::DeliveryBatch& b) { return all_verdicts(b); };
    auto handle = sys_.spawn(scripted_batch_consumer, log);
    consumers_.push_back(caf::actor_cast<caf::actor>(handle));
    v1::SubscribeRequest sub;
    sub.set_topic(topic);
    sub.set_max_in_flight(max_in_flight);
    sub.set_max_batch(max_batch);
    auto res = call<net::empty_reply>(net::subscribe_request{sub}, handle);
    BOOST_REQUIRE_MESSAGE(res, "subscribe failed: " << error_text(res));
    return {handle, log};
  }

  void subscribe(const std::string& topic, const consumer_actor& handle,
                 uint32_t max_in_flight = 0) {
    v1::SubscribeRequest sub;
    sub.set_topic(topic);
    sub.set_max_in_flight(max_in_flight);
    auto res = call<net::empty_reply>(net::subscribe_request{sub}, handle);
    BOOST_REQUIRE_MESSAGE(res, "subscribe failed: " << error_text(res));
  }

  v1::StatsReply stats() {
    auto res = call<net::stats_reply>(net::stats_request{});
    BOOST_REQUIRE(res);
    return res->pb;
  }

  std::vector<caf::actor> shards() {
    auto res = call<shard_handles_msg>(shards_atom::value);
    BOOST_REQUIRE(res);
    return res->shards;
  }

  const engine_actor& engine() const noexcept { return engine_; }

  logic::engine_config& config() noexcept { return cfg_; }

  caf::actor_system& sys() noexcept { return sys_; }

  caf::scoped_actor& self() noexcept { return self_; }

  /// Timeouts and delayed messages the actor clock holds.
  size_t clock_entries() { return sched_.clock().schedule().size(); }

private:
  storage::test::temp_dir dir_;
  test_config caf_cfg_;
  caf::actor_system sys_{caf_cfg_};
  caf::scheduler::test_coordinator& sched_ =
    dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler());
  caf::scoped_actor self_{sys_};
  logic::engine_config cfg_;
  engine_actor engine_;
  std::vector<caf::actor> consumers_;
};

/// A delivery's ref, for acks through the engine.
inline v1::DeliveryId id_of(const v1::Delivery& d) {
  return d.id();
}

} // namespace dally::actors::test
