#define BOOST_TEST_MODULE engine_cluster
#include <boost/test/unit_test.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster_maps.hpp"
#include "engine_fixture.hpp"

// Two engines of a cluster in one actor system under the test coordinator:
// each runs the shards a shard map gives its node, forwards requests for
// the other node's shards, and answers `unavailable` where it cannot.

using namespace dally;
using dally::test::key_on;
using dally::test::map_of;
using namespace dally::actors;
using namespace dally::actors::test;

namespace {

constexpr uint32_t shards = 4;

logic::engine_config node_config() {
  logic::engine_config cfg;
  cfg.shard_count = shards;
  cfg.node_id = 1;
  cfg.open_all_shards = false;
  return cfg;
}

/// Node 1 is the fixture's engine; node 2 runs in the same actor system,
/// with its own data directory or (shared_root) the same one.
struct two_nodes {
  engine_fixture fx{node_config()};
  storage::test::temp_dir dir_b;
  engine_actor b;

  explicit two_nodes(bool shared_root = false) {
    auto cfg = fx.config();
    cfg.node_id = 2;
    if (!shared_root)
      cfg.data_dir = dir_b.path().string();
    b = spawn_engine(fx.sys(), cfg);
    fx.run();
  }

  ~two_nodes() {
    fx.self()->send_exit(b, caf::exit_reason::user_shutdown);
    fx.stop();
  }

  caf::actor node(core::node_id id) {
    return caf::actor_cast<caf::actor>(id == 1 ? fx.engine() : b);
  }

  caf::expected<map_installed_msg> install(core::node_id id,
                                           core::shard_map map) {
    return fx.call_to<map_installed_msg>(node(id), install_map_msg{map});
  }

  void install_both(core::shard_map map) {
    for (core::node_id id : {1u, 2u}) {
      auto res = install(id, map);
      BOOST_REQUIRE_MESSAGE(res, "install: " << error_text(res));
    }
  }

  /// Each engine gets a handle to the other.
  void link() {
    set_peers_msg peers;
    peers.engines = {{1, fx.engine()}, {2, b}};
    fx.self()->send(node(1), peers);
    fx.self()->send(node(2), peers);
    fx.run();
  }

  caf::expected<net::schedule_reply>
  schedule(core::node_id via, std::string key = {}, int64_t due_ms = 0) {
    v1::ScheduleRequest req;
    req.set_topic("t");
    req.set_payload("p");
    req.mutable_when()->set_at_ms(due_ms ? due_ms : fx.now_ms() + 1000);
    if (!key.empty())
      req.set_idempotency_key(key);
    return fx.call_to<net::schedule_reply>(node(via),
                                           net::schedule_request{req});
  }

  caf::expected<net::get_reply> get(core::node_id via, uint64_t id) {
    v1::GetRequest req;
    req.set_id(id);
    return fx.call_to<net::get_reply>(node(via), net::get_request{req});
  }

  /// Subscribes `consumer` to topic "t" at node `id` as well; whether the
  /// node took it.
  bool subscribe_at(core::node_id id, const consumer_actor& consumer) {
    v1::SubscribeRequest sub;
    sub.set_topic("t");
    return static_cast<bool>(fx.call_to<net::empty_reply>(
      node(id), net::subscribe_request{sub}, consumer));
  }

  std::vector<caf::actor> shard_handles(core::node_id id) {
    auto res = fx.call_to<shard_handles_msg>(node(id), shards_atom::value);
    BOOST_REQUIRE(res);
    return res->shards;
  }
};

bool is_unavailable(const caf::error& err) {
  return net::from_caf(err).code() == core::errc::unavailable;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_node_without_a_map_runs_no_shard) {
  two_nodes n;
  for (auto& s : n.shard_handles(1))
    BOOST_TEST(!s);
  auto res = n.schedule(1);
  BOOST_REQUIRE(!res);
  BOOST_TEST(is_unavailable(res.error()));
  BOOST_TEST(error_text(res).find("node 1 has no shard map yet") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(each_node_runs_only_the_shards_the_map_gives_it) {
  two_nodes n;
  auto res = n.install(1, map_of(1, {1, 2, 1, 2}));
  BOOST_REQUIRE_MESSAGE(res, error_text(res));
  BOOST_TEST(res->epoch == 1u);
  BOOST_TEST(res->opened == (std::vector<uint32_t>{0, 2}));
  BOOST_TEST(res->closed.empty());
  BOOST_REQUIRE(n.install(2, map_of(1, {1, 2, 1, 2})));
  auto a = n.shard_handles(1);
  auto b = n.shard_handles(2);
  for (uint32_t i = 0; i < shards; ++i) {
    BOOST_TEST(!!a[i] == (i % 2 == 0));
    BOOST_TEST(!!b[i] == (i % 2 == 1));
  }
  // Without a key, a node hands out ids only in the shards it runs.
  for (int i = 0; i < 4; ++i) {
    auto via_a = n.schedule(1);
    BOOST_REQUIRE_MESSAGE(via_a, error_text(via_a));
    BOOST_TEST(via_a->pb.id() % 2 == 0u);
    auto via_b = n.schedule(2);
    BOOST_REQUIRE_MESSAGE(via_b, error_text(via_b));
    BOOST_TEST(via_b->pb.id() % 2 == 1u);
  }
}

BOOST_AUTO_TEST_CASE(tasks_scheduled_through_either_node_land_on_their_owner) {
  two_nodes n;
  n.install_both(map_of(1, {1, 2, 1, 2}));
  n.link();
  auto [consumer, log] = n.fx.consumer("t", verdict_mode::ack);
  BOOST_REQUIRE(n.subscribe_at(2, consumer));
  std::set<uint64_t> ids;
  int64_t due = n.fx.now_ms() + 500;
  for (uint32_t shard = 0; shard < shards; ++shard)
    for (core::node_id via : {1u, 2u}) {
      // Keys of every shard through both nodes: half are forwarded.
      auto key = key_on(shard, shards, "via" + std::to_string(via) + "-");
      auto res = n.schedule(via, key, due);
      BOOST_REQUIRE_MESSAGE(res, error_text(res));
      BOOST_TEST(res->pb.id() % shards == shard);
      ids.insert(res->pb.id());
      // The retry through the other node finds the first try.
      auto again = n.schedule(via == 1 ? 2 : 1, key, due);
      BOOST_REQUIRE_MESSAGE(again, error_text(again));
      BOOST_TEST(again->pb.id() == res->pb.id());
      BOOST_TEST(!again->pb.created());
    }
  for (auto id : ids)
    for (core::node_id via : {1u, 2u}) {
      auto got = n.get(via, id);
      BOOST_REQUIRE_MESSAGE(got, error_text(got));
      BOOST_TEST(got->pb.task().id() == id);
    }
  n.fx.advance_to(due + 100);
  std::set<uint64_t> delivered;
  for (auto& d : log->got)
    delivered.insert(d.id().task_id());
  BOOST_TEST(delivered == ids);
  BOOST_TEST(log->got.size() == ids.size());
  for (auto ms : log->got_ms)
    BOOST_TEST(ms >= due);
}

BOOST_AUTO_TEST_CASE(a_batch_is_split_between_the_nodes) {
  two_nodes n;
  n.install_both(map_of(1, {1, 2, 1, 2}));
  n.link();
  v1::ScheduleBatchRequest batch;
  for (uint32_t shard = 0; shard < shards; ++shard) {
    auto* t = batch.add_tasks();
    t->set_topic("t");
    t->set_payload("p");
    t->mutable_when()->set_at_ms(n.fx.now_ms() + 1000);
    t->set_idempotency_key(key_on(shard, shards));
    auto* plain = batch.add_tasks();
    *plain = *t;
    plain->clear_idempotency_key();
  }
  auto res = n.fx.call_to<net::schedule_batch_reply>(
    n.node(1), net::schedule_batch_request{batch});
  BOOST_REQUIRE_MESSAGE(res, error_text(res));
  BOOST_REQUIRE(res->pb.results_size() == batch.tasks_size());
  for (int i = 0; i < batch.tasks_size(); ++i) {
    auto& r = res->pb.results(i);
    BOOST_REQUIRE_MESSAGE(r.has_scheduled(), r.failure().message());
    auto id = r.scheduled().id();
    if (i % 2 == 0)
      BOOST_TEST(id % shards == static_cast<uint64_t>(i / 2));
    else
      BOOST_TEST(id % 2 == 0u); // node 1's own shards
    BOOST_TEST(
      static_cast<bool>(n.get(2, id))); // found through the other node as well
  }
}

BOOST_AUTO_TEST_CASE(settling_and_changing_through_the_other_node) {
  two_nodes n;
  n.install_both(map_of(1, {1, 2, 1, 2}));
  n.link();
  auto [consumer, log] = n.fx.consumer("t", verdict_mode::later);
  BOOST_REQUIRE(n.subscribe_at(2, consumer));
  auto owned_by_b = n.schedule(2, {}, n.fx.now_ms() + 100);
  auto revoke_me = n.schedule(2, {}, n.fx.now_ms() + 100'000);
  BOOST_REQUIRE(owned_by_b && revoke_me);
  n.fx.advance_ms(200);
  BOOST_REQUIRE(log->got.size() == 1u);
  v1::AckRequest ack;
  *ack.mutable_id() = log->got[0].id();
  auto acked = n.fx.call_to<net::empty_reply>(n.node(1), net::ack_request{ack});
  BOOST_REQUIRE_MESSAGE(acked, error_text(acked));
  auto gone = n.get(1, owned_by_b->pb.id());
  BOOST_TEST(!static_cast<bool>(gone));
  v1::RevokeRequest rev;
  rev.set_id(revoke_me->pb.id());
  auto revoked =
    n.fx.call_to<net::change_reply>(n.node(1), net::revoke_request{rev});
  BOOST_REQUIRE_MESSAGE(revoked, error_text(revoked));
  BOOST_TEST(revoked->pb.outcome() == v1::CHANGE_OUTCOME_DONE);
}

BOOST_AUTO_TEST_CASE(a_shard_whose_owner_has_no_handle_is_unavailable) {
  two_nodes n;
  n.install_both(map_of(3, {1, 2, 1, 2}));
  auto res = n.schedule(1, key_on(1, shards));
  BOOST_REQUIRE(!res);
  BOOST_TEST(is_unavailable(res.error()));
  BOOST_TEST(error_text(res) ==
             "unavailable: shard 1 is owned by node 2 at shard map epoch 3, "
             "which node 1 cannot reach");
  auto get = n.get(1, 3);
  BOOST_REQUIRE(!get);
  BOOST_TEST(error_text(get).find("shard 3 is owned by node 2") !=
             std::string::npos);
  v1::DeadLettersRequest dl;
  auto dead = n.fx.call_to<net::dead_letters_reply>(
    n.node(1), net::dead_letters_request{dl});
  BOOST_REQUIRE(!dead);
  BOOST_TEST(is_unavailable(dead.error()));
  // A batch: node 1's part is done, node 2's tasks fail, nothing else.
  v1::ScheduleBatchRequest batch;
  for (uint32_t shard : {0u, 1u}) {
    auto* t = batch.add_tasks();
    t->set_topic("t");
    t->set_payload("p");
    t->mutable_when()->set_at_ms(n.fx.now_ms() + 1000);
    t->set_idempotency_key(key_on(shard, shards));
  }
  auto part = n.fx.call_to<net::schedule_batch_reply>(
    n.node(1), net::schedule_batch_request{batch});
  BOOST_REQUIRE(part);
  BOOST_TEST(part->pb.results(0).has_scheduled());
  BOOST_TEST(part->pb.results(1).failure().code() ==
             static_cast<uint32_t>(core::errc::unavailable));
  // Once linked, the key's first try is made then, on node 2.
  n.link();
  auto later = n.schedule(1, key_on(1, shards));
  BOOST_REQUIRE_MESSAGE(later, error_text(later));
  BOOST_TEST(later->pb.created());
  auto dead_now = n.fx.call_to<net::dead_letters_reply>(
    n.node(1), net::dead_letters_request{dl});
  BOOST_TEST(static_cast<bool>(dead_now));
}

BOOST_AUTO_TEST_CASE(a_stale_map_is_refused_and_changes_nothing) {
  two_nodes n;
  BOOST_REQUIRE(n.install(1, map_of(5, {1, 2, 1, 2})));
  auto stale = n.install(1, map_of(4, {1, 1, 1, 1}));
  BOOST_REQUIRE(!stale);
  BOOST_TEST(net::from_caf(stale.error()).code() == core::errc::stale_epoch);
  auto same_epoch = n.install(1, map_of(5, {2, 2, 2, 2}));
  BOOST_REQUIRE(!same_epoch);
  BOOST_TEST(net::from_caf(same_epoch.error()).code() ==
             core::errc::stale_epoch);
  auto a = n.shard_handles(1);
  for (uint32_t i = 0; i < shards; ++i)
    BOOST_TEST(!!a[i] == (i % 2 == 0));
  auto wrong_count = n.install(1, map_of(6, {1, 2}));
  BOOST_REQUIRE(!wrong_count);
  BOOST_TEST(net::from_caf(wrong_count.error()).code() ==
             core::errc::invalid_request);
}

BOOST_AUTO_TEST_CASE(a_map_change_moves_a_shard_over_a_shared_data_root) {
  two_nodes n{true};
  n.install_both(map_of(1, {1, 2, 1, 2}));
  n.link();
  auto [consumer, log] = n.fx.consumer("t", verdict_mode::ack);
  BOOST_REQUIRE(n.subscribe_at(2, consumer));
  int64_t due = n.fx.now_ms() + 5000;
  auto task = n.schedule(1, key_on(0, shards), due);
  BOOST_REQUIRE(task);
  BOOST_REQUIRE(task->pb.id() % shards == 0u);
  // Node 2 learns of the move first: shard 0's store is still open on
  // node 1, so node 2 retries the open until node 1 has closed it.
  caf::scoped_actor waiter{n.fx.sys()};
  auto moved = map_of(2, {2, 2, 1, 2});
  auto b_done =
    waiter->request(n.node(2), caf::infinite, install_map_msg{moved});
  n.fx.advance_ms(50);
  BOOST_TEST(waiter->mailbox().empty());
  auto a_done = n.install(1, moved);
  BOOST_REQUIRE_MESSAGE(a_done, error_text(a_done));
  BOOST_TEST(a_done->closed == (std::vector<uint32_t>{0}));
  BOOST_TEST(!n.shard_handles(1)[0]);
  n.fx.advance_ms(2000);
  BOOST_REQUIRE(!waiter->mailbox().empty());
  b_done.receive(
    [](map_installed_msg& m) {
      BOOST_TEST(m.opened == (std::vector<uint32_t>{0}));
      BOOST_TEST(m.failed.empty());
    },
    [](caf::error& err) { BOOST_FAIL(net::describe(err)); });
  BOOST_TEST(!!n.shard_handles(2)[0]);
  // The task is on node 2 now, found through either node, and delivered.
  for (core::node_id via : {1u, 2u}) {
    auto got = n.get(via, task->pb.id());
    BOOST_REQUIRE_MESSAGE(got, error_text(got));
  }
  n.fx.advance_to(due + 100);
  BOOST_REQUIRE(log->got.size() == 1u);
  BOOST_TEST(log->got[0].id().task_id() == task->pb.id());
  BOOST_TEST(log->got_ms[0] >= due);
}

BOOST_AUTO_TEST_CASE(a_single_node_is_unchanged_by_default) {
  engine_fixture fx;
  auto res = fx.call<ready_atom>(ready_atom::value);
  BOOST_REQUIRE(res);
  for (auto& s : fx.shards())
    BOOST_TEST(!!s);
}

BOOST_AUTO_TEST_CASE(a_consumer_subscribed_at_one_node_gets_every_shard) {
  two_nodes n;
  n.install_both(map_of(1, {1, 2, 1, 2}));
  // Subscribed at node 1 before the nodes know each other: node 2 gets the
  // subscription when it becomes node 1's peer.
  auto [early, early_log] = n.fx.consumer("early", verdict_mode::ack);
  n.link();
  auto [late, late_log] = n.fx.consumer("late", verdict_mode::ack);
  std::set<uint64_t> early_ids, late_ids;
  int64_t due = n.fx.now_ms() + 500;
  for (core::node_id via : {1u, 2u})
    for (int i = 0; i < 2; ++i)
      for (std::string topic : {"early", "late"}) {
        v1::ScheduleRequest req;
        req.set_topic(topic);
        req.set_payload("p");
        req.mutable_when()->set_at_ms(due);
        auto res = n.fx.call_to<net::schedule_reply>(
          n.node(via), net::schedule_request{req});
        BOOST_REQUIRE_MESSAGE(res, error_text(res));
        (topic == "early" ? early_ids : late_ids).insert(res->pb.id());
      }
  n.fx.advance_to(due + 100);
  std::set<uint64_t> got_early, got_late;
  for (auto& d : early_log->got)
    got_early.insert(d.id().task_id());
  for (auto& d : late_log->got)
    got_late.insert(d.id().task_id());
  BOOST_TEST(got_early == early_ids);
  BOOST_TEST(got_late == late_ids);
  BOOST_TEST(early_log->got.size() == early_ids.size());
  // Unsubscribed at node 1: no more deliveries from either node.
  v1::UnsubscribeRequest unsub;
  unsub.set_topic("late");
  BOOST_REQUIRE(n.fx.call_to<net::empty_reply>(
    n.node(1), net::unsubscribe_request{unsub}, late));
  n.fx.run();
  for (core::node_id via : {1u, 2u}) {
    v1::ScheduleRequest req;
    req.set_topic("late");
    req.set_payload("p");
    req.mutable_when()->set_at_ms(n.fx.now_ms() + 100);
    BOOST_REQUIRE(n.fx.call_to<net::schedule_reply>(
      n.node(via), net::schedule_request{req}));
  }
  n.fx.advance_ms(1000);
  BOOST_TEST(late_log->got.size() == late_ids.size());
}

BOOST_AUTO_TEST_CASE(a_node_tells_its_map_to_clients) {
  two_nodes n;
  auto none =
    n.fx.call_to<net::cluster_map_reply>(n.node(2), net::cluster_map_request{});
  BOOST_REQUIRE(!none);
  BOOST_TEST(is_unavailable(none.error()));
  BOOST_TEST(error_text(none).find("node 2 has no shard map yet") !=
             std::string::npos);
  n.install_both(map_of(7, {1, 2, 2, 1}));
  auto map =
    n.fx.call_to<net::cluster_map_reply>(n.node(2), net::cluster_map_request{});
  BOOST_REQUIRE_MESSAGE(map, error_text(map));
  BOOST_TEST(map->pb.node_id() == 2u);
  BOOST_TEST(map->pb.epoch() == 7u);
  BOOST_TEST(map->pb.shard_count() == shards);
  std::vector<uint32_t> owners{map->pb.owners().begin(),
                               map->pb.owners().end()};
  BOOST_TEST(owners == (std::vector<uint32_t>{1, 2, 2, 1}));
}
