// A producer that sends schedule batches to a published engine without
// waiting for answers, over a real middleman on 127.0.0.1: the node stops
// reading it while too many requests wait for the engine (its front door),
// so what waits stays bounded; every request is still answered and every
// accepted task delivered, to a consumer on the producer's connection.

#define BOOST_TEST_MODULE front_door_flood
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "../storage/test_support.hpp"
#include "actors/embedded_engine.hpp"
#include "net/error.hpp"
#include "net/front_door.hpp"
#include "net/remote.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"

using namespace dally;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t door_bound = 32;
constexpr int batches = 3000;
constexpr int tasks_per_batch = 4;

template<class T>
std::string error_text(const caf::expected<T>& res) {
  return res ? std::string{"no error"} : net::describe(res.error());
}

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

struct tally {
  std::atomic<int> answered{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> overloaded{0};
  std::atomic<uint64_t> failed{0};
  std::mutex mtx;
  std::set<uint64_t> accepted_ids;
  std::set<uint64_t> delivered_ids;
};

/// Sends every batch at once, then counts the answers.
caf::behavior flood(caf::event_based_actor* self, engine_actor engine,
                    std::shared_ptr<tally> t) {
  auto due = wall_ms() + 300;
  for (int b = 0; b < batches; ++b) {
    v1::ScheduleBatchRequest req;
    for (int i = 0; i < tasks_per_batch; ++i) {
      auto* task = req.add_tasks();
      task->set_topic("flood");
      task->mutable_when()->set_at_ms(due);
    }
    self->request(engine, caf::infinite, net::make_wire(std::move(req)))
      .then(
        [t](net::schedule_batch_reply& r) {
          std::lock_guard guard{t->mtx};
          for (const auto& res : r.pb.results())
            if (res.has_scheduled()) {
              t->accepted_ids.insert(res.scheduled().id());
              ++t->accepted;
            } else if (res.failure().code() ==
                       static_cast<uint32_t>(core::errc::overloaded)) {
              ++t->overloaded;
            } else {
              ++t->failed;
            }
          ++t->answered;
        },
        [t](caf::error& err) {
          if (net::from_caf(err).code() == core::errc::overloaded)
            t->overloaded += tasks_per_batch;
          else
            t->failed += tasks_per_batch;
          ++t->answered;
        });
  }
  return {[](int) {}};
}

consumer_actor::behavior_type acking(consumer_actor::pointer,
                                     std::shared_ptr<tally> t) {
  return {
    [t](net::delivery_msg& d) {
      {
        std::lock_guard guard{t->mtx};
        t->delivered_ids.insert(d.pb.id().task_id());
      }
      v1::DeliveryReply reply;
      reply.set_verdict(v1::DeliveryReply::VERDICT_ACK);
      return net::delivery_reply{reply};
    },
  };
}

template<class Pred>
bool wait_for(Pred pred, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_flood_waits_in_the_producer_not_at_the_engine) {
  storage::test::temp_dir dir;
  auto door = std::make_shared<net::front_door>(door_bound);
  caf::actor_system_config node_cfg;
  runtime::configure(node_cfg, runtime::role::node);
  node_cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system node_sys{node_cfg};
  logic::engine_config ec;
  ec.shard_count = 2;
  ec.data_dir = dir.str();
  ec.log = [](const std::string&) {};
  auto engine = actors::embedded_engine::start(node_sys, ec, door);
  BOOST_REQUIRE_MESSAGE(engine, error_text(engine));
  net::publish_options opts;
  opts.door = door;
  auto port = net::publish_engine(node_sys, engine->handle(), "127.0.0.1", 0,
                                  std::move(opts));
  BOOST_REQUIRE_MESSAGE(port, error_text(port));

  caf::actor_system_config client_cfg;
  runtime::configure(client_cfg, runtime::role::client);
  client_cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system client_sys{client_cfg};
  auto remote = net::connect_engine(client_sys, "127.0.0.1", *port);
  BOOST_REQUIRE_MESSAGE(remote, error_text(remote));
  auto t = std::make_shared<tally>();
  // The consumer shares the producer's connection: its answers must get
  // through a closed door.
  auto consumer = client_sys.spawn(acking, t);
  caf::actor producer;
  // The client's actor system waits for its actors when it stops, also
  // after a failed check.
  auto stop_client = std::shared_ptr<void>(nullptr, [&](void*) {
    if (producer)
      caf::anon_send_exit(producer, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(consumer, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(*remote, caf::exit_reason::user_shutdown);
  });
  {
    caf::scoped_actor self{client_sys};
    v1::SubscribeRequest sub;
    sub.set_topic("flood");
    sub.set_max_in_flight(64);
    self
      ->request(*remote, 30s, net::subscribe_request{std::move(sub)}, consumer)
      .receive([](net::empty_reply&) {},
               [](caf::error& err) { BOOST_FAIL(net::describe(err)); });
  }
  producer = client_sys.spawn(flood, *remote, t);
  auto ok = wait_for([&] { return t->answered == batches; }, 60s);
  BOOST_REQUIRE_MESSAGE(ok, "answered " << t->answered << " of " << batches);
  BOOST_TEST(t->failed == 0u);
  BOOST_TEST(t->accepted + t->overloaded ==
             static_cast<uint64_t>(batches * tasks_per_batch));
  BOOST_TEST(t->accepted > 0u);
  // The door closed, and what waited for the engine stayed at its bound:
  // one request more per connection, read before it stopped.
  BOOST_TEST_MESSAGE("peak backlog " << door->peak_backlog() << ", closings "
                                     << door->closings());
  BOOST_TEST(door->closings() > 0u);
  BOOST_TEST(door->peak_backlog() <= static_cast<int64_t>(door_bound) + 2);
  BOOST_TEST(door->stalls() == 0u);
  BOOST_TEST(!door->closed());
  BOOST_TEST(door->backlog() == 0);
  // The node's stats tell the same.
  {
    caf::scoped_actor self{client_sys};
    self->request(*remote, 30s, net::stats_request{})
      .receive(
        [&](net::stats_reply& r) {
          BOOST_TEST(r.pb.front_door_backlog() == 0u);
          BOOST_TEST(r.pb.front_door_peak_backlog() ==
                     static_cast<uint64_t>(door->peak_backlog()));
          BOOST_TEST(r.pb.front_door_closings() == door->closings());
          BOOST_TEST(r.pb.front_door_stalls() == 0u);
        },
        [](caf::error& err) { BOOST_FAIL(net::describe(err)); });
  }
  auto all_delivered = [&] {
    std::lock_guard guard{t->mtx};
    return t->delivered_ids.size() >= t->accepted_ids.size();
  };
  BOOST_REQUIRE(wait_for(all_delivered, 60s));
  std::lock_guard guard{t->mtx};
  BOOST_TEST((t->delivered_ids == t->accepted_ids));
}
