// Dally embedded in a CAF application: start an engine in this process's
// actor_system, subscribe a consumer actor, schedule a few tasks a second
// out and wait until each was delivered and acked.
//
//   dally-embedded [DATA_DIR]     (default: ./dally-embedded-data)

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/embedded_engine.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"

namespace {

using namespace dally;

int64_t wall_ms() {
  return logic::system_wall_clock_ms();
}

/// Acks every delivery and tells `main` about it.
consumer_actor::behavior_type printer(consumer_actor::pointer self,
                                      caf::actor main) {
  return {
    [self, main](net::delivery_msg& d) {
      auto late = wall_ms() - d.pb.due_ms();
      std::cout << "delivered task " << d.pb.id().task_id() << " ("
                << d.pb.payload() << "), attempt " << d.pb.attempt() << ", "
                << late << " ms after its due time" << std::endl;
      caf::anon_send(main, d.pb.id().task_id());
      v1::DeliveryReply reply;
      reply.set_verdict(v1::DeliveryReply::VERDICT_ACK);
      return net::delivery_reply{reply};
    },
  };
}

} // namespace

int main(int argc, char** argv) {
  caf::actor_system_config cfg;
  runtime::configure(cfg, runtime::role::embedded);
  caf::actor_system sys{cfg};
  logic::engine_config ecfg;
  ecfg.data_dir = argc > 1 ? argv[1] : "dally-embedded-data";
  ecfg.shard_count = 2;
  auto engine = actors::embedded_engine::start(sys, ecfg);
  if (!engine) {
    std::cerr << "cannot start the engine: " << net::describe(engine.error())
              << std::endl;
    return 1;
  }
  caf::scoped_actor self{sys};
  auto consumer = sys.spawn(printer, caf::actor_cast<caf::actor>(self));
  auto fail = [&](const caf::error& err) {
    std::cerr << "request failed: " << net::describe(err) << std::endl;
  };
  bool ok = true;
  v1::SubscribeRequest sub;
  sub.set_topic("greetings");
  self
    ->request(engine->handle(), std::chrono::seconds{5},
              net::subscribe_request{sub}, consumer)
    .receive([](net::empty_reply&) {},
             [&](caf::error& err) {
               ok = false;
               fail(err);
             });
  const int count = 5;
  for (int i = 0; ok && i < count; ++i) {
    v1::ScheduleRequest req;
    req.set_topic("greetings");
    req.set_payload("hello #" + std::to_string(i));
    req.mutable_when()->set_in_ms(1'000 + 100 * i);
    self
      ->request(engine->handle(), std::chrono::seconds{5},
                net::schedule_request{req})
      .receive(
        [&](net::schedule_reply& r) {
          std::cout << "scheduled task " << r.pb.id() << " due in "
                    << r.pb.due_ms() - wall_ms() << " ms" << std::endl;
        },
        [&](caf::error& err) {
          ok = false;
          fail(err);
        });
  }
  int delivered = 0;
  while (ok && delivered < count) {
    self->receive([&](uint64_t) { ++delivered; },
                  caf::after(std::chrono::seconds{10}) >>
                    [&] {
                      std::cerr << "timed out waiting for deliveries"
                                << std::endl;
                      ok = false;
                    });
  }
  self->send_exit(consumer, caf::exit_reason::user_shutdown);
  engine->stop();
  std::cout << delivered << " of " << count << " tasks delivered" << std::endl;
  return ok ? 0 : 1;
}
