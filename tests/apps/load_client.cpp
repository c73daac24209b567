// dally-load-client: schedules tasks on a dallyd as fast as the node
// acknowledges them, for the kill -9 test. Each task is due at a random
// instant `--min-delay-ms`..`--max-delay-ms` from when it is sent; for
// every task the node acknowledged it prints "ID AT_MS" on its own line
// (flushed at once), AT_MS being the time it asked for (not the due time
// the node answered), so whatever is on stdout when the node is killed was
// acknowledged, with what the client asked. Stops after --count tasks or at the
// first failed request (exit 1), e.g. when the node dies.
//
// usage: dally-load-client --port P [--host H] [--topic T] [--count N]
//          [--batch B] [--min-delay-ms MS] [--max-delay-ms MS] [--seed S]

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "logic/engine_config.hpp"
#include "net/engine_actor.hpp"
#include "net/error.hpp"
#include "net/remote.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"

namespace {

struct options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string topic = "load";
  uint64_t count = 1'000'000;
  uint32_t batch = 8;
  int64_t min_delay_ms = 1000;
  int64_t max_delay_ms = 4000;
  uint64_t seed = 1;
};

bool parse(int argc, char** argv, options& opts) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string name = argv[i];
    std::string value = argv[i + 1];
    if (name == "--host")
      opts.host = value;
    else if (name == "--port")
      opts.port = static_cast<uint16_t>(std::stoul(value));
    else if (name == "--topic")
      opts.topic = value;
    else if (name == "--count")
      opts.count = std::stoull(value);
    else if (name == "--batch")
      opts.batch = static_cast<uint32_t>(std::stoul(value));
    else if (name == "--min-delay-ms")
      opts.min_delay_ms = std::stoll(value);
    else if (name == "--max-delay-ms")
      opts.max_delay_ms = std::stoll(value);
    else if (name == "--seed")
      opts.seed = std::stoull(value);
    else
      return false;
  }
  return argc % 2 == 1 && opts.port != 0 && opts.batch > 0 &&
         opts.max_delay_ms >= opts.min_delay_ms;
}

/// SplitMix64.
uint64_t next(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ull;
  auto z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

} // namespace

int main(int argc, char** argv) {
  options opts;
  if (!parse(argc, argv, opts)) {
    std::fputs("usage: dally-load-client --port P [--host H] [--topic T] "
               "[--count N] [--batch B] [--min-delay-ms MS] "
               "[--max-delay-ms MS] [--seed S]\n",
               stderr);
    return 2;
  }
  caf::actor_system_config cfg;
  dally::runtime::add_message_types(cfg);
  dally::net::enable_network(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  auto engine = dally::net::connect_engine(sys, opts.host, opts.port);
  if (!engine) {
    std::fprintf(stderr, "cannot connect: %s\n",
                 dally::net::describe(engine.error()).c_str());
    return 3;
  }
  caf::scoped_actor self{sys};
  uint64_t state = opts.seed;
  uint64_t sent = 0;
  int rc = 0;
  while (sent < opts.count && rc == 0) {
    dally::v1::ScheduleBatchRequest req;
    auto now = dally::logic::system_wall_clock_ms();
    auto span =
      static_cast<uint64_t>(opts.max_delay_ms - opts.min_delay_ms + 1);
    std::vector<int64_t> asked;
    for (uint32_t i = 0; i < opts.batch && sent < opts.count; ++i, ++sent) {
      auto* t = req.add_tasks();
      t->set_topic(opts.topic);
      t->set_payload("load-" + std::to_string(sent));
      asked.push_back(now + opts.min_delay_ms +
                      static_cast<int64_t>(next(state) % span));
      t->mutable_when()->set_at_ms(asked.back());
    }
    self
      ->request(*engine, std::chrono::seconds{10},
                dally::net::make_wire(std::move(req)))
      .receive(
        [&](dally::net::schedule_batch_reply& reply) {
          std::string out;
          size_t k = 0;
          for (const auto& r : reply.pb.results()) {
            auto at = k < asked.size() ? asked[k] : 0;
            ++k;
            if (r.has_scheduled()) {
              out += std::to_string(r.scheduled().id()) + ' ' +
                     std::to_string(at) + '\n';
            } else {
              std::fprintf(stderr, "task failed: %u %s\n", r.failure().code(),
                           r.failure().message().c_str());
              rc = 1;
            }
          }
          std::fwrite(out.data(), 1, out.size(), stdout);
          std::fflush(stdout);
        },
        [&](caf::error& err) {
          std::fprintf(stderr, "request failed: %s\n",
                       dally::net::describe(err).c_str());
          rc = 1;
        });
  }
  return rc;
}
