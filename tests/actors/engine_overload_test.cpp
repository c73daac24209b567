// A producer faster than the engine: schedules sent without waiting for
// their answers. Under CAF's test_coordinator the engine routes a whole
// burst before any shard runs, so the admission bound decides exactly.

#define BOOST_TEST_MODULE engine_overload
#include <boost/test/unit_test.hpp>

#include <set>
#include <string>
#include <vector>

#include "engine_fixture.hpp"

using namespace dally;
using namespace dally::actors;
using namespace dally::actors::test;

namespace {

constexpr size_t bound = 8;

logic::engine_config overload_config() {
  logic::engine_config cfg;
  cfg.shard_count = 2;
  cfg.notifiers = 1;
  cfg.durability = storage::durability::sync;
  cfg.write_buffer_bytes = 4 << 20;
  cfg.block_cache_bytes = 4 << 20;
  cfg.max_pending_per_shard = bound;
  return cfg;
}

v1::ScheduleRequest task_due(int64_t due_ms, const std::string& payload) {
  v1::ScheduleRequest req;
  req.set_topic("t");
  req.set_payload(payload);
  req.mutable_when()->set_at_ms(due_ms);
  return req;
}

bool is_overloaded(const caf::error& err) {
  return net::from_caf(err).code() == core::errc::overloaded;
}

struct fixture : engine_fixture {
  fixture() : engine_fixture(overload_config()) {}

  caf::actor engine_handle() { return caf::actor_cast<caf::actor>(engine()); }

  /// Sends `n` schedules due at `due_ms` without waiting, lets the engine
  /// route them all before any shard runs, then runs everything.
  /// Accepted ids go to `accepted`; returns how many were overloaded.
  size_t burst(size_t n, int64_t due_ms, std::set<uint64_t>& accepted) {
    using handle = decltype(self()->request(engine(), caf::infinite,
                                            net::schedule_request{}));
    std::vector<handle> sent;
    for (size_t i = 0; i < n; ++i)
      sent.push_back(self()->request(
        engine(), caf::infinite,
        net::schedule_request{task_due(due_ms, "p" + std::to_string(i))}));
    run_only(engine_handle());
    run();
    size_t refused = 0;
    for (auto& h : sent) {
      BOOST_REQUIRE(!self()->mailbox().empty());
      h.receive(
        [&](net::schedule_reply& r) {
          BOOST_TEST(accepted.insert(r.pb.id()).second);
        },
        [&](caf::error& err) {
          BOOST_TEST(is_overloaded(err), net::describe(err));
          ++refused;
        });
    }
    return refused;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(overload, fixture)

BOOST_AUTO_TEST_CASE(
  a_burst_beyond_the_bound_is_refused_and_nothing_accepted_is_lost) {
  auto due = now_ms() + 1'000;
  std::set<uint64_t> accepted;
  // 100 at once into 2 shards of 8: 16 go through, 84 are refused.
  BOOST_TEST(burst(100, due, accepted) == 100u - 2 * bound);
  BOOST_TEST(accepted.size() == 2 * bound);
  auto s = stats();
  BOOST_TEST(s.peak_pending_per_shard() == bound);
  BOOST_TEST(s.pending_schedules() == 0u); // every accepted one answered
  BOOST_TEST(s.overloaded() == 84u);
  BOOST_TEST(s.scheduled() == 2 * bound); // a refusal created nothing
  // The answers made room: the next burst goes through again.
  BOOST_TEST(burst(10, due, accepted) == 0u);
  BOOST_TEST(accepted.size() == 2 * bound + 10);
  BOOST_TEST(stats().peak_pending_per_shard() == bound);
  // Every accepted task is on disk and delivered, once, at its time.
  restart();
  auto [c, log] = this->consumer("t", verdict_mode::ack);
  advance_to(due - 1);
  BOOST_TEST(log->got.empty());
  advance_to(due + 100);
  std::set<uint64_t> got;
  for (auto& d : log->got)
    got.insert(d.id().task_id());
  BOOST_TEST(log->got.size() == accepted.size());
  BOOST_TEST((got == accepted));
}

BOOST_AUTO_TEST_CASE(revokes_and_reads_are_not_refused_at_the_bound) {
  auto early = schedule_at("t", now_ms() + 60'000);
  std::set<uint64_t> accepted;
  using handle =
    decltype(self()->request(engine(), caf::infinite, net::schedule_request{}));
  std::vector<handle> full;
  for (size_t i = 0; i < 3 * bound; ++i)
    full.push_back(
      self()->request(engine(), caf::infinite,
                      net::schedule_request{task_due(now_ms() + 60'000, "f")}));
  v1::RevokeRequest revoke;
  revoke.set_id(early);
  auto revoked =
    self()->request(engine(), caf::infinite, net::revoke_request{revoke});
  run_only(engine_handle());
  run();
  for (auto& h : full)
    h.receive([](net::schedule_reply&) {}, [](caf::error&) {});
  std::optional<v1::ChangeReply> outcome;
  revoked.receive([&](net::change_reply& r) { outcome = r.pb; },
                  [](caf::error& err) {
                    BOOST_FAIL("revoke refused: " << net::describe(err));
                  });
  BOOST_REQUIRE(outcome);
  BOOST_TEST(outcome->outcome() == v1::CHANGE_OUTCOME_DONE);
  BOOST_TEST(stats().overloaded() == 3 * bound - 2 * bound);
  BOOST_TEST(stats().revoked() == 1u);
}

BOOST_AUTO_TEST_CASE(
  a_batch_fits_whole_or_is_refused_and_one_above_the_bound_waits_for_an_idle_shard) {
  auto due = now_ms() + 60'000;
  int next = 0;
  auto make = [due, &next](size_t n, bool keys) {
    v1::ScheduleBatchRequest batch;
    for (size_t i = 0; i < n; ++i) {
      auto* t = batch.add_tasks();
      *t = task_due(due, "b" + std::to_string(next));
      if (keys)
        t->set_idempotency_key("k" + std::to_string(next));
      ++next;
    }
    return net::schedule_batch_request{batch};
  };
  // Whole batches (no keys) take turns over the shards: two fill both,
  // the third is refused whole. A keyed batch is split: each part finds
  // its shard full, and each of its tasks fails with overloaded.
  auto b1 = self()->request(engine(), caf::infinite, make(bound, false));
  auto b2 = self()->request(engine(), caf::infinite, make(bound, false));
  auto b3 = self()->request(engine(), caf::infinite, make(1, false));
  auto b4 = self()->request(engine(), caf::infinite, make(8, true));
  run_only(engine_handle());
  run();
  for (auto* h : {&b1, &b2})
    h->receive(
      [](net::schedule_batch_reply& r) {
        BOOST_REQUIRE_EQUAL(r.pb.results_size(), static_cast<int>(bound));
        for (auto& res : r.pb.results())
          BOOST_TEST(res.has_scheduled());
      },
      [](caf::error& err) { BOOST_FAIL(net::describe(err)); });
  b3.receive([](net::schedule_batch_reply&) { BOOST_FAIL("not refused"); },
             [](caf::error& err) { BOOST_TEST(is_overloaded(err)); });
  b4.receive(
    [](net::schedule_batch_reply& r) {
      BOOST_REQUIRE_EQUAL(r.pb.results_size(), 8);
      for (auto& res : r.pb.results())
        BOOST_TEST(res.failure().code() ==
                   static_cast<uint32_t>(core::errc::overloaded));
    },
    [](caf::error& err) { BOOST_FAIL(net::describe(err)); });
  BOOST_TEST(stats().scheduled() == 2 * bound);
  // Answered, the shards are idle: a batch above the bound goes through.
  auto big = call<net::schedule_batch_reply>(make(3 * bound, false));
  BOOST_REQUIRE(big);
  for (auto& res : big->pb.results())
    BOOST_TEST(res.has_scheduled());
  BOOST_TEST(stats().scheduled() == 5 * bound);
}

BOOST_AUTO_TEST_SUITE_END()
