#define BOOST_TEST_MODULE cluster_client
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "../actors/cluster_maps.hpp"
#include "../storage/test_support.hpp"
#include "actors/embedded_engine.hpp"
#include "actors/engine.hpp"
#include "net/cluster_client.hpp"
#include "net/cluster_routing.hpp"
#include "net/error.hpp"
#include "net/remote.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"

// The cluster client against engines of a cluster, each in an actor system
// of its own (as if in its own process) and published on 127.0.0.1, the
// client in another; plus its routing and retry rules alone.

using namespace dally;
using dally::test::key_on;
using dally::test::map_of;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t shards = 4;

template<class T>
std::string error_text(const caf::expected<T>& res) {
  return res ? std::string{"no error"} : net::describe(res.error());
}

/// A port on 127.0.0.1 nobody listens on (bound, then closed).
uint16_t dead_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) ==
                0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// One node of a cluster: its own actor system, engine and published port.
struct node {
  core::node_id id;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::optional<actors::embedded_engine> engine;
  uint16_t port = 0;

  node(core::node_id self, const std::string& data_dir) : id(self) {
    runtime::configure(cfg, runtime::role::node);
    cfg.set("logger.verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
    logic::engine_config ec;
    ec.shard_count = shards;
    ec.node_id = self;
    ec.open_all_shards = false;
    ec.data_dir = data_dir;
    ec.log = [](const std::string&) {};
    auto started = actors::embedded_engine::start(*sys, ec);
    BOOST_REQUIRE_MESSAGE(started, error_text(started));
    engine.emplace(std::move(*started));
    auto bound =
      net::publish_engine(*sys, engine->handle(), "127.0.0.1", 0, {});
    BOOST_REQUIRE_MESSAGE(bound, error_text(bound));
    port = *bound;
  }

  ~node() { stop(); }

  /// Stops the engine and the actor system: every connection closes.
  void stop() {
    if (!sys)
      return;
    engine->stop();
    engine.reset();
    sys.reset();
  }

  void install(const core::shard_map& map) {
    caf::scoped_actor self{*sys};
    self
      ->request(caf::actor_cast<caf::actor>(engine->handle()), 60s,
                actors::install_map_msg{map})
      .receive([](actors::map_installed_msg&) {},
               [](caf::error& err) { BOOST_FAIL(net::describe(err)); });
  }
};

/// Nodes 1..n, each with its own data directory, or (shared) one root so
/// that a shard can move between them.
struct cluster {
  storage::test::temp_dir dir;
  std::vector<std::unique_ptr<node>> nodes;
  caf::actor_system_config client_cfg;
  std::unique_ptr<caf::actor_system> client_sys;
  std::optional<engine_actor> client;

  explicit cluster(size_t n, bool shared_root = false) {
    for (core::node_id i = 1; i <= n; ++i)
      nodes.push_back(std::make_unique<node>(
        i, shared_root ? dir.str() : dir.str("node-" + std::to_string(i))));
    runtime::configure(client_cfg, runtime::role::client);
    client_cfg.set("logger.verbosity", caf::atom("quiet"));
    client_sys = std::make_unique<caf::actor_system>(client_cfg);
  }

  ~cluster() {
    if (client)
      caf::anon_send_exit(*client, caf::exit_reason::user_shutdown);
    client.reset();
    client_sys.reset();
    nodes.clear();
  }

  node& at(core::node_id id) { return *nodes.at(id - 1); }

  void install_all(const core::shard_map& map) {
    for (auto& n : nodes)
      n->install(map);
  }

  /// Each node's engine gets every other's, over the network.
  void link() {
    for (auto& n : nodes) {
      actors::set_peers_msg peers;
      for (auto& other : nodes) {
        if (other.get() == n.get())
          continue;
        auto h = net::connect_engine(*n->sys, "127.0.0.1", other->port);
        BOOST_REQUIRE_MESSAGE(h, error_text(h));
        peers.engines.emplace(other->id, *h);
      }
      caf::anon_send(caf::actor_cast<caf::actor>(n->engine->handle()),
                     std::move(peers));
    }
  }

  std::vector<net::seed_address> seeds() {
    std::vector<net::seed_address> out;
    for (auto& n : nodes)
      out.push_back({"127.0.0.1", n->port});
    return out;
  }

  void connect(std::vector<net::seed_address> seeds,
               net::cluster_options opts = {}) {
    auto c = net::connect_cluster(*client_sys, std::move(seeds), opts);
    BOOST_REQUIRE_MESSAGE(c, error_text(c));
    client = *c;
  }

  template<class Reply, class... Ts>
  caf::expected<Reply> call(Ts&&... xs) {
    caf::scoped_actor self{*client_sys};
    caf::expected<Reply> out{caf::error{}};
    self
      ->request(caf::actor_cast<caf::actor>(*client), 30s,
                std::forward<Ts>(xs)...)
      .receive([&](Reply& r) { out = std::move(r); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  caf::expected<net::schedule_reply> schedule(std::string key = {},
                                              std::string topic = "t",
                                              int64_t in_ms = 60'000) {
    v1::ScheduleRequest req;
    req.set_topic(topic);
    req.set_payload("p");
    req.mutable_when()->set_in_ms(in_ms);
    if (!key.empty())
      req.set_idempotency_key(key);
    return call<net::schedule_reply>(net::schedule_request{req});
  }

  caf::expected<net::get_reply> get(uint64_t id) {
    v1::GetRequest req;
    req.set_id(id);
    return call<net::get_reply>(net::get_request{req});
  }
};

/// Waits up to `limit` for `cond`.
bool eventually(std::function<bool()> cond, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond())
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

/// Task ids a consumer got.
struct seen_ids {
  std::mutex mtx;
  std::set<uint64_t> ids;

  void add(uint64_t id) {
    std::lock_guard guard{mtx};
    ids.insert(id);
  }

  bool has(uint64_t id) {
    std::lock_guard guard{mtx};
    return ids.count(id) > 0;
  }
};

consumer_actor::behavior_type acking(consumer_actor::pointer,
                                     std::shared_ptr<seen_ids> seen) {
  return {
    [seen](net::delivery_msg& d) {
      seen->add(d.pb.id().task_id());
      v1::DeliveryReply reply;
      reply.set_verdict(v1::DeliveryReply::VERDICT_ACK);
      return net::delivery_reply{reply};
    },
  };
}

} // namespace

BOOST_AUTO_TEST_CASE(routes_and_retry_rules) {
  net::cluster_routes r;
  BOOST_TEST(!r.any());
  BOOST_TEST(r.learn(map_of(2, {1, 2, 1, 2})));
  BOOST_TEST(!r.learn(map_of(1, {1, 1, 1, 1})));
  BOOST_TEST(!r.learn(map_of(2, {1, 1, 1, 1})));
  r.set_live(1, true);
  r.set_live(2, true);
  for (uint64_t id = 0; id < 8; ++id)
    BOOST_TEST(*r.for_task(id) == (id % 2 == 0 ? 1u : 2u));
  v1::ScheduleRequest keyed;
  keyed.set_idempotency_key(key_on(3, shards));
  BOOST_TEST(*r.for_schedule(keyed) == 2u);
  r.set_live(2, false);
  BOOST_TEST(*r.for_task(1) == 1u); // its owner is gone: any live node
  BOOST_TEST(*r.for_schedule(keyed) == 1u);
  using net::failure_kind;
  auto kind = [](core::errc code, std::string text) {
    return net::classify(core::error{code, std::move(text)});
  };
  BOOST_TEST((kind(core::errc::unavailable,
                   "shard 1 is owned by node 2 at shard map epoch 3, which "
                   "node 1 cannot reach") == failure_kind::refused));
  BOOST_TEST((kind(core::errc::unavailable, "node 3 has no shard map yet") ==
              failure_kind::refused));
  BOOST_TEST((
    kind(core::errc::unavailable, "shard 2 is restarting; retry the request") ==
    failure_kind::refused));
  BOOST_TEST(
    (kind(core::errc::unavailable, "the connection to the node was lost (x)") ==
     failure_kind::maybe_done));
  BOOST_TEST(
    (kind(core::errc::unavailable,
          "node 2 did not answer a forwarded request (timeout); "
          "retry it with its idempotency key") == failure_kind::maybe_done));
  BOOST_TEST((kind(core::errc::not_found, "no task 7") == failure_kind::final));
  BOOST_TEST(!net::may_retry(failure_kind::maybe_done, false));
  BOOST_TEST(net::may_retry(failure_kind::maybe_done, true));
  BOOST_TEST(net::may_retry(failure_kind::refused, false));
  BOOST_TEST(!net::may_retry(failure_kind::final, true));
}

BOOST_AUTO_TEST_CASE(seeds_parse) {
  auto ok = net::parse_seeds("127.0.0.1:7400,[::1]:7401,db-2:1");
  BOOST_REQUIRE(ok);
  BOOST_REQUIRE(ok->size() == 3u);
  BOOST_TEST((*ok)[1].host == "::1");
  BOOST_TEST((*ok)[1].port == 7401);
  BOOST_TEST((*ok)[2].str() == "db-2:1");
  for (auto bad : {"", "h", "h:", ":1", "h:0", "h:65536", "h:1,", "h:x"})
    BOOST_TEST(!net::parse_seeds(bad), bad);
}

BOOST_AUTO_TEST_CASE(a_single_node_answers_the_map_as_its_own) {
  storage::test::temp_dir dir;
  caf::actor_system_config cfg;
  runtime::configure(cfg, runtime::role::embedded);
  caf::actor_system sys{cfg};
  logic::engine_config ec;
  ec.shard_count = shards;
  ec.data_dir = dir.str();
  auto engine = actors::embedded_engine::start(sys, ec);
  BOOST_REQUIRE(engine);
  caf::scoped_actor self{sys};
  self->request(engine->handle(), 10s, net::cluster_map_request{})
    .receive(
      [](net::cluster_map_reply& r) {
        BOOST_TEST(r.pb.node_id() == 0u);
        BOOST_TEST(r.pb.epoch() == 0u);
        BOOST_TEST(r.pb.shard_count() == shards);
        BOOST_TEST(r.pb.owners_size() == static_cast<int>(shards));
        for (auto o : r.pb.owners())
          BOOST_TEST(o == 0u);
      },
      [](caf::error& err) { BOOST_FAIL(net::describe(err)); });
  engine->stop();
}

BOOST_AUTO_TEST_CASE(requests_go_straight_to_the_owner) {
  cluster c{2};
  c.install_all(map_of(1, {1, 2, 1, 2}));
  // Not linked: a node refuses another's shard, so only requests sent
  // straight to the owner succeed, at the first try.
  net::cluster_options opts;
  opts.attempts = 1;
  c.connect(c.seeds(), opts);
  for (uint32_t shard = 0; shard < shards; ++shard) {
    auto res = c.schedule(key_on(shard, shards));
    BOOST_REQUIRE_MESSAGE(res, error_text(res));
    BOOST_TEST(res->pb.id() % shards == shard);
    auto got = c.get(res->pb.id());
    BOOST_REQUIRE_MESSAGE(got, error_text(got));
  }
  auto map = c.call<net::cluster_map_reply>(net::cluster_map_request{});
  BOOST_REQUIRE_MESSAGE(map, error_text(map));
  BOOST_TEST(map->pb.epoch() == 1u);
  BOOST_TEST(map->pb.owners(1) == 2u);
}

BOOST_AUTO_TEST_CASE(a_new_map_epoch_is_learned_and_the_request_retried) {
  cluster c{2, true};
  c.install_all(map_of(1, {1, 2, 1, 2}));
  c.connect(c.seeds());
  auto task = c.schedule(key_on(0, shards));
  BOOST_REQUIRE_MESSAGE(task, error_text(task));
  // Shard 0 moves to node 2 (node 1 closes it first); the client still
  // sends its requests to node 1, which refuses them naming epoch 2.
  c.at(1).install(map_of(2, {2, 2, 1, 2}));
  c.at(2).install(map_of(2, {2, 2, 1, 2}));
  auto got = c.get(task->pb.id());
  BOOST_REQUIRE_MESSAGE(got, error_text(got));
  BOOST_TEST(got->pb.task().id() == task->pb.id());
  auto again = c.schedule(key_on(0, shards));
  BOOST_REQUIRE_MESSAGE(again, error_text(again));
  BOOST_TEST(again->pb.id() == task->pb.id());
  BOOST_TEST(!again->pb.created());
}

BOOST_AUTO_TEST_CASE(a_dead_seed_is_skipped) {
  cluster c{2};
  c.install_all(map_of(1, {1, 2, 1, 2}));
  c.link();
  auto seeds = c.seeds();
  seeds.insert(seeds.begin(), {"127.0.0.1", dead_port()});
  c.connect(seeds);
  for (uint32_t shard = 0; shard < shards; ++shard) {
    auto res = c.schedule(key_on(shard, shards));
    BOOST_REQUIRE_MESSAGE(res, error_text(res));
  }
  auto none = net::connect_cluster(*c.client_sys, {{"127.0.0.1", dead_port()}});
  BOOST_REQUIRE(!none);
  BOOST_TEST(net::from_caf(none.error()).code() == core::errc::unavailable);
  BOOST_TEST(error_text(none).find("no seed of the cluster answered") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_consumer_is_resubscribed_when_its_node_is_gone) {
  cluster c{2};
  c.install_all(map_of(1, {1, 2, 1, 2}));
  // Not linked: node 1, where the client subscribes (its first live node),
  // cannot repeat the subscription at node 2, so only the client's own
  // resubscription brings node 2's deliveries once node 1 is gone.
  c.connect(c.seeds());
  auto seen = std::make_shared<seen_ids>();
  auto consumer = c.client_sys->spawn(acking, seen);
  v1::SubscribeRequest sub;
  sub.set_topic("t");
  auto subscribed =
    c.call<net::empty_reply>(net::subscribe_request{sub}, consumer);
  BOOST_REQUIRE_MESSAGE(subscribed, error_text(subscribed));
  auto first = c.schedule(key_on(0, shards, "a"), "t", 10);
  BOOST_REQUIRE_MESSAGE(first, error_text(first));
  BOOST_TEST(eventually([&] { return seen->has(first->pb.id()); }, 30s));
  c.at(1).stop();
  std::vector<uint64_t> later;
  for (uint32_t shard : {1u, 3u}) {
    auto res = c.schedule(key_on(shard, shards, "b"), "t", 10);
    BOOST_REQUIRE_MESSAGE(res, error_text(res));
    later.push_back(res->pb.id());
  }
  BOOST_TEST(eventually(
    [&] {
      for (auto id : later)
        if (!seen->has(id))
          return false;
      return true;
    },
    30s));
  // Node 1's shards are unavailable, with the epoch named.
  auto lost = c.schedule(key_on(0, shards, "c"));
  BOOST_REQUIRE(!lost);
  BOOST_TEST(error_text(lost).find("shard map epoch 1") != std::string::npos);
  caf::anon_send_exit(consumer, caf::exit_reason::user_shutdown);
}
