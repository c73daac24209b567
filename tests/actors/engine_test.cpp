// The engine's actors end to end under CAF's test_coordinator: virtual time
// drives both the actor clock and the wall clock, so timers fire exactly
// and a day of cron passes in moments.

#define BOOST_TEST_MODULE engine
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "engine_fixture.hpp"
#include "storage/fault_fs.hpp"

using namespace dally;
using namespace dally::actors;
using namespace dally::actors::test;

namespace {

logic::engine_config small_config() {
  logic::engine_config cfg;
  cfg.shard_count = 2;
  cfg.notifiers = 2;
  cfg.durability = storage::durability::none;
  cfg.write_buffer_bytes = 4 << 20;
  cfg.block_cache_bytes = 4 << 20;
  return cfg;
}

struct fixture : engine_fixture {
  fixture() : engine_fixture(small_config()) {
    // nop
  }
};

v1::AckRequest ack_of(const v1::Delivery& d) {
  v1::AckRequest req;
  *req.mutable_id() = d.id();
  return req;
}

core::errc code_of(const caf::error& err) {
  return net::from_caf(err).code();
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(engine, fixture)

BOOST_AUTO_TEST_CASE(a_task_fires_at_its_due_time_and_an_ack_completes_it) {
  auto [consumer, log] = this->consumer("mail", verdict_mode::ack);
  auto due = now_ms() + 5'000;
  auto id = schedule_at("mail", due, "hello");
  advance_to(due - 1);
  BOOST_TEST(log->got.empty());
  advance_to(due);
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  auto& d = log->got[0];
  BOOST_TEST(d.id().task_id() == id);
  BOOST_TEST(d.topic() == "mail");
  BOOST_TEST(d.payload() == "hello");
  BOOST_TEST(d.due_ms() == due);
  BOOST_TEST(d.fire_ms() >= due);
  BOOST_TEST(d.attempt() == 1u);
  BOOST_TEST(log->got_ms[0] == due);
  v1::GetRequest get;
  get.set_id(id);
  auto res = call<net::get_reply>(net::get_request{get});
  BOOST_REQUIRE(!res);
  BOOST_TEST(code_of(res.error()) == core::errc::not_found);
  auto st = stats();
  BOOST_TEST(st.acked() == 1u);
  BOOST_TEST(st.fired() == 1u);
  // Nothing comes back later.
  advance_ms(120'000);
  BOOST_TEST(log->got.size() == 1u);
}

BOOST_AUTO_TEST_CASE(ids_name_their_shard_and_a_past_due_time_fires_at_once) {
  auto [consumer, log] = this->consumer("t", verdict_mode::ack);
  std::set<uint64_t> shards;
  for (int i = 0; i < 8; ++i) {
    auto id = schedule_at("t", now_ms() - 60'000);
    shards.insert(id % 2);
  }
  BOOST_TEST(shards.size() == 2u); // Round robin over both shards.
  run();
  BOOST_TEST(log->got.size() == 8u);
}

BOOST_AUTO_TEST_CASE(bad_input_gets_its_error_and_changes_nothing) {
  auto expect = [&](v1::ScheduleRequest req, core::errc code) {
    auto res = call<net::schedule_reply>(net::schedule_request{std::move(req)});
    BOOST_REQUIRE(!res);
    BOOST_TEST(code_of(res.error()) == code, error_text(res));
  };
  v1::ScheduleRequest base;
  base.set_topic("t");
  base.mutable_when()->set_in_ms(1'000);
  {
    auto req = base;
    req.set_topic("");
    expect(req, core::errc::invalid_topic);
  }
  {
    auto req = base;
    req.mutable_when()->set_in_ms(3654LL * 86'400'000);
    expect(req, core::errc::delay_too_large);
  }
  {
    auto req = base;
    req.mutable_when()->set_in_ms(-5);
    expect(req, core::errc::invalid_time);
  }
  {
    auto req = base;
    req.mutable_when()->set_at_ms(std::numeric_limits<int64_t>::max());
    expect(req, core::errc::invalid_time);
  }
  {
    auto req = base;
    req.set_payload(std::string((1 << 20) + 1, 'x'));
    expect(req, core::errc::payload_too_large);
  }
  {
    auto req = base;
    req.set_idempotency_key("k");
    auto first = call<net::schedule_reply>(net::schedule_request{req});
    BOOST_REQUIRE(first);
    auto again = call<net::schedule_reply>(net::schedule_request{req});
    BOOST_REQUIRE(again);
    BOOST_TEST(again->pb.id() == first->pb.id());
    BOOST_TEST(!again->pb.created());
    req.set_payload("other");
    expect(req, core::errc::idempotency_conflict);
  }
  for (uint64_t unknown : {uint64_t{999'999}, uint64_t{1'000'000}}) {
    v1::GetRequest get;
    get.set_id(unknown);
    auto res = call<net::get_reply>(net::get_request{get});
    BOOST_REQUIRE(!res);
    BOOST_TEST(code_of(res.error()) == core::errc::not_found);
    v1::RevokeRequest rev;
    rev.set_id(unknown);
    auto out = call<net::change_reply>(net::revoke_request{rev});
    BOOST_REQUIRE(out);
    BOOST_TEST(out->pb.outcome() == v1::CHANGE_OUTCOME_NOT_FOUND);
  }
  // One task (the keyed one) and nothing else was created.
  BOOST_TEST(stats().scheduled() == 1u);
}

BOOST_AUTO_TEST_CASE(a_batch_is_answered_in_its_order_whole_or_split) {
  // Without keys a batch goes whole to one shard (the next in turn); with
  // keys it is split by shard and put back together. Either way result i
  // answers task i, failures included.
  auto due = now_ms() + 60'000;
  auto make = [due](std::vector<std::string> keys) {
    v1::ScheduleBatchRequest batch;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto* t = batch.add_tasks();
      t->set_topic(i == 2 ? "" : "orders"); // The third is refused.
      t->set_payload("p" + std::to_string(i));
      t->mutable_when()->set_at_ms(due);
      if (!keys[i].empty())
        t->set_idempotency_key(keys[i]);
    }
    return batch;
  };
  auto check = [&](const v1::ScheduleBatchRequest& batch,
                   const v1::ScheduleBatchReply& reply) {
    BOOST_REQUIRE_EQUAL(reply.results_size(), batch.tasks_size());
    std::set<uint64_t> shards;
    for (int i = 0; i < batch.tasks_size(); ++i) {
      const auto& r = reply.results(i);
      if (i == 2) {
        BOOST_REQUIRE(r.has_failure());
        BOOST_TEST(r.failure().code() ==
                   static_cast<uint32_t>(core::errc::invalid_topic));
        continue;
      }
      BOOST_REQUIRE(r.has_scheduled());
      v1::GetRequest get;
      get.set_id(r.scheduled().id());
      auto got = call<net::get_reply>(net::get_request{get});
      BOOST_REQUIRE(got);
      BOOST_TEST(got->pb.task().payload() == batch.tasks(i).payload());
      shards.insert(r.scheduled().id() % 2);
    }
    return shards;
  };
  std::set<uint64_t> whole_shards;
  for (int round = 0; round < 2; ++round) {
    auto batch = make({"", "", "", "", ""});
    auto res =
      call<net::schedule_batch_reply>(net::schedule_batch_request{batch});
    BOOST_REQUIRE(res);
    auto shards = check(batch, res->pb);
    BOOST_TEST(shards.size() == 1u); // Whole, to one shard.
    whole_shards.insert(shards.begin(), shards.end());
  }
  BOOST_TEST(whole_shards.size() == 2u); // The shards take turns.
  auto keys = std::vector<std::string>{"a", "", "b", "c", "", "d", "e", "f"};
  auto batch = make(keys);
  auto res =
    call<net::schedule_batch_reply>(net::schedule_batch_request{batch});
  BOOST_REQUIRE(res);
  BOOST_TEST(check(batch, res->pb).size() == 2u); // Split over both.
  auto empty = call<net::schedule_batch_reply>(net::schedule_batch_request{});
  BOOST_REQUIRE(empty);
  BOOST_TEST(empty->pb.results_size() == 0);
}

BOOST_AUTO_TEST_CASE(a_hanging_consumer_blocks_neither_its_shard_nor_others) {
  auto [slow, slow_log] = this->consumer("slow", verdict_mode::hang, 10);
  auto [fast, fast_log] = this->consumer("fast", verdict_mode::ack);
  auto start = now_ms() + 1'000;
  // The slow topic fills its consumer's slots and queue first.
  v1::ScheduleBatchRequest slow_batch;
  for (int i = 0; i < 1'000; ++i) {
    auto* t = slow_batch.add_tasks();
    t->set_topic("slow");
    t->mutable_when()->set_at_ms(start);
  }
  BOOST_REQUIRE(call<net::schedule_batch_reply>(
    net::schedule_batch_request{std::move(slow_batch)}));
  // 10k tasks on the fast topic, spread over the next second.
  std::map<uint64_t, int64_t> due_of;
  for (int b = 0; b < 10; ++b) {
    v1::ScheduleBatchRequest batch;
    for (int i = 0; i < 1'000; ++i) {
      auto* t = batch.add_tasks();
      t->set_topic("fast");
      t->mutable_when()->set_at_ms(start + (b * 1'000 + i) / 10);
    }
    auto res =
      call<net::schedule_batch_reply>(net::schedule_batch_request{batch});
    BOOST_REQUIRE(res);
    for (int i = 0; i < res->pb.results_size(); ++i) {
      BOOST_REQUIRE(res->pb.results(i).has_scheduled());
      due_of[res->pb.results(i).scheduled().id()] =
        batch.tasks(i).when().at_ms();
    }
  }
  advance_to(start + 1'000);
  BOOST_TEST(slow_log->got.size() == 10u); // Its cap, no more.
  BOOST_REQUIRE_EQUAL(fast_log->got.size(), 10'000u);
  int64_t worst = 0;
  for (size_t i = 0; i < fast_log->got.size(); ++i) {
    auto& d = fast_log->got[i];
    BOOST_TEST(fast_log->got_ms[i] >= d.due_ms());
    worst = std::max(worst, fast_log->got_ms[i] - due_of[d.id().task_id()]);
  }
  // In virtual time nothing runs late: every fast task went out at its
  // due millisecond although the slow consumer never answered.
  BOOST_TEST(worst == 0);
  auto st = stats();
  uint64_t held = 0;
  for (auto& t : st.topics())
    if (t.topic() == "slow")
      held = t.waiting() + t.queued() + t.in_flight();
  // Queued at the notifier or parked at their shards, not lost.
  BOOST_TEST(held == 1'000u);
}

BOOST_AUTO_TEST_CASE(tasks_without_a_consumer_wait_and_are_not_lost) {
  auto due = now_ms() + 1'000;
  for (int i = 0; i < 5; ++i)
    schedule_at("orphan", due + i);
  advance_to(due + 10'000);
  auto st = stats();
  BOOST_TEST(st.waiting() == 5u);
  BOOST_TEST(st.fired() == 0u);
  auto [consumer, log] = this->consumer("orphan", verdict_mode::ack);
  run();
  BOOST_REQUIRE_EQUAL(log->got.size(), 5u);
  for (auto& d : log->got)
    BOOST_TEST(d.attempt() == 1u); // Waiting used up no attempt.
  BOOST_TEST(stats().waiting() == 0u);
}

BOOST_AUTO_TEST_CASE(consumers_of_a_topic_share_its_load) {
  auto [a, log_a] = this->consumer("shared", verdict_mode::later, 5);
  auto [b, log_b] = this->consumer("shared", verdict_mode::later, 5);
  auto due = now_ms() + 100;
  for (int i = 0; i < 10; ++i)
    schedule_at("shared", due);
  advance_to(due);
  BOOST_TEST(log_a->got.size() == 5u);
  BOOST_TEST(log_b->got.size() == 5u);
}

BOOST_AUTO_TEST_CASE(a_dead_consumers_deliveries_are_requeued) {
  auto [a, log_a] = this->consumer("jobs", verdict_mode::hang);
  auto due = now_ms() + 100;
  for (int i = 0; i < 3; ++i)
    schedule_at("jobs", due);
  advance_to(due);
  BOOST_REQUIRE_EQUAL(log_a->got.size(), 3u);
  auto [b, log_b] = this->consumer("jobs", verdict_mode::ack);
  self()->send_exit(a, caf::exit_reason::kill);
  run();
  // Requeued at once, long before the 30 s lease would run out.
  advance_ms(10);
  BOOST_REQUIRE_EQUAL(log_b->got.size(), 3u);
  for (auto& d : log_b->got)
    BOOST_TEST(d.attempt() == 2u);
  advance_ms(60'000);
  BOOST_TEST(log_b->got.size() == 3u);
  BOOST_TEST(stats().acked() == 3u);
}

BOOST_AUTO_TEST_CASE(leases_expire_back_off_and_end_in_dead_letters) {
  auto [c, log] = this->consumer("flaky", verdict_mode::later);
  v1::ScheduleRequest req;
  req.set_topic("flaky");
  req.mutable_when()->set_in_ms(0);
  auto* policy = req.mutable_policy();
  policy->set_lease_ms(1'000);
  policy->set_max_attempts(3);
  policy->set_backoff_initial_ms(500);
  policy->set_backoff_multiplier_permille(2'000);
  policy->set_backoff_max_ms(10'000);
  auto res = call<net::schedule_reply>(net::schedule_request{req});
  BOOST_REQUIRE(res);
  auto id = res->pb.id();
  auto start = now_ms();
  run();
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  // Lease 1 s, then backoff 500 ms: attempt 2 at +1.5 s, not before.
  advance_to(start + 1'499);
  BOOST_TEST(log->got.size() == 1u);
  advance_to(start + 1'500);
  BOOST_REQUIRE_EQUAL(log->got.size(), 2u);
  BOOST_TEST(log->got[1].attempt() == 2u);
  // Lease 1 s, backoff 1 s: attempt 3 at +3.5 s.
  advance_to(start + 3'499);
  BOOST_TEST(log->got.size() == 2u);
  advance_to(start + 3'500);
  BOOST_REQUIRE_EQUAL(log->got.size(), 3u);
  BOOST_TEST(log->got[2].attempt() == 3u);
  // The third lease runs out: dead letter.
  advance_to(start + 10'000);
  BOOST_TEST(log->got.size() == 3u);
  auto dead = call<net::dead_letters_reply>(net::dead_letters_request{});
  BOOST_REQUIRE(dead);
  BOOST_REQUIRE_EQUAL(dead->pb.dead_size(), 1);
  BOOST_TEST(dead->pb.dead(0).task().id() == id);
  BOOST_TEST(stats().dead_lettered() == 1u);
  // Kick it back: delivered again, attempts start over.
  v1::KickRequest kick;
  kick.set_id(id);
  auto kicked = call<net::change_reply>(net::kick_request{kick});
  BOOST_REQUIRE(kicked);
  BOOST_TEST(kicked->pb.outcome() == v1::CHANGE_OUTCOME_DONE);
  run();
  BOOST_REQUIRE_EQUAL(log->got.size(), 4u);
  BOOST_TEST(log->got[3].attempt() == 1u);
  auto acked = call<net::empty_reply>(net::ack_request{ack_of(log->got[3])});
  BOOST_REQUIRE(acked);
  BOOST_TEST(call<net::dead_letters_reply>(net::dead_letters_request{})
               ->pb.dead_size() == 0);
}

BOOST_AUTO_TEST_CASE(a_batch_consumer_gets_many_deliveries_per_message) {
  auto [c, log] = this->batch_consumer("bulk", 8);
  auto due = now_ms() + 1'000;
  std::set<uint64_t> scheduled;
  for (int i = 0; i < 40; ++i)
    scheduled.insert(schedule_at("bulk", due));
  advance_to(due);
  std::set<uint64_t> seen;
  size_t largest = 0;
  for (auto& batch : log->batches) {
    largest = std::max(largest, batch.size());
    for (auto& d : batch) {
      BOOST_TEST(d.attempt() == 1u);
      BOOST_TEST(d.due_ms() == due);
      seen.insert(d.id().task_id());
    }
  }
  for (auto& d : log->singles)
    seen.insert(d.id().task_id());
  BOOST_TEST(largest == 8u); // Batches form, and none is above max_batch.
  BOOST_TEST(log->batches.size() < 40u);
  BOOST_TEST((seen == scheduled));
  BOOST_TEST(stats().acked() == 40u);
  // Settled by the batch answers: nothing comes again.
  auto messages = log->batches.size() + log->singles.size();
  advance_ms(120'000);
  BOOST_TEST(log->batches.size() + log->singles.size() == messages);
}

BOOST_AUTO_TEST_CASE(answered_deliveries_leave_no_timeout_behind) {
  // CAF 0.17 keeps a request's timeout in its clock until the deadline
  // even after the answer: with a timeout per delivery request, a busy
  // node with long leases would hold one per delivery of a whole lease.
  auto [one, one_log] = this->consumer("one", verdict_mode::ack);
  auto [many, many_log] = this->batch_consumer("many", 4);
  auto due = now_ms() + 100;
  for (int i = 0; i < 300; ++i) {
    schedule_at("one", due + i);
    schedule_at("many", due + i);
  }
  advance_to(due + 300);
  BOOST_REQUIRE_EQUAL(one_log->got.size(), 300u);
  BOOST_TEST(stats().acked() == 600u);
  // Well inside the 30 s lease: what is left is the engine's own timers.
  BOOST_TEST(clock_entries() < 20u);
}

BOOST_AUTO_TEST_CASE(a_batch_answer_settles_each_delivery_by_its_verdict) {
  auto [c, log] = this->batch_consumer("mixed", 16);
  // The first batch: ack, nack (retry in 200 ms), and no verdict for the
  // rest (VERDICT_LATER: their lease decides). Later batches: all acked.
  auto first = std::make_shared<bool>(true);
  log->answer = [first](const v1::DeliveryBatch& b) {
    if (!*first)
      return all_verdicts(b);
    *first = false;
    v1::DeliveryBatchReply out;
    out.add_replies()->set_verdict(v1::DeliveryReply::VERDICT_ACK);
    auto* nack = out.add_replies();
    nack->set_verdict(v1::DeliveryReply::VERDICT_NACK);
    nack->set_retry_in_ms(200);
    return out;
  };
  auto due = now_ms() + 1'000;
  // One shard's ids only (same shard, same fire): they come as one batch.
  std::vector<uint64_t> ids;
  while (ids.size() < 4) {
    v1::ScheduleRequest req;
    req.set_topic("mixed");
    req.mutable_when()->set_at_ms(due);
    auto* policy = req.mutable_policy();
    policy->set_lease_ms(2'000);
    policy->set_max_attempts(5);
    policy->set_backoff_initial_ms(500);
    policy->set_backoff_multiplier_permille(2'000);
    policy->set_backoff_max_ms(10'000);
    auto res = call<net::schedule_reply>(net::schedule_request{req});
    BOOST_REQUIRE_MESSAGE(res, "schedule failed: " << error_text(res));
    if (res->pb.id() % config().shard_count == 0)
      ids.push_back(res->pb.id());
    else {
      v1::RevokeRequest rev;
      rev.set_id(res->pb.id());
      BOOST_REQUIRE(call<net::change_reply>(net::revoke_request{rev}));
    }
  }
  advance_to(due);
  BOOST_REQUIRE_EQUAL(log->batches.size(), 1u);
  auto batch = log->batches.front(); // A copy: more batches come.
  BOOST_REQUIRE_EQUAL(batch.size(), 4u);
  auto acked = batch[0].id().task_id();
  auto nacked = batch[1].id().task_id();
  advance_ms(100);
  BOOST_TEST(log->batches.size() == 1u); // Nothing back before 200 ms.
  advance_ms(30'000);
  std::map<uint64_t, std::vector<uint32_t>> attempts;
  for (auto& b : log->batches)
    for (auto& d : b)
      attempts[d.id().task_id()].push_back(d.attempt());
  for (auto& d : log->singles)
    attempts[d.id().task_id()].push_back(d.attempt());
  BOOST_TEST((attempts[acked] == std::vector<uint32_t>{1}));
  BOOST_TEST((attempts[nacked] == std::vector<uint32_t>{1, 2}));
  for (size_t i = 2; i < 4; ++i) {
    auto id = batch[i].id().task_id();
    BOOST_TEST((attempts[id] == std::vector<uint32_t>{1, 2}));
  }
  BOOST_TEST(stats().acked() == 4u);
}

BOOST_AUTO_TEST_CASE(a_dead_batch_consumers_deliveries_are_requeued) {
  auto [a, log_a] = this->batch_consumer("jobs", 0);
  log_a->hold = true;
  auto due = now_ms() + 100;
  for (int i = 0; i < 10; ++i)
    schedule_at("jobs", due);
  advance_to(due);
  size_t held = 0;
  for (auto& b : log_a->batches)
    held += b.size();
  BOOST_REQUIRE_EQUAL(held, 10u);
  auto [b, log_b] = this->consumer("jobs", verdict_mode::ack);
  self()->send_exit(a, caf::exit_reason::kill);
  run();
  advance_ms(10); // Long before the 30 s lease would run out.
  BOOST_REQUIRE_EQUAL(log_b->got.size(), 10u);
  for (auto& d : log_b->got)
    BOOST_TEST(d.attempt() == 2u);
  BOOST_TEST(stats().acked() == 10u);
}

// A consumer may subscribe only to a topic a task can have: consume used
// to take a topic longer than a schedule allows.
BOOST_AUTO_TEST_CASE(subscribe_refuses_a_topic_no_task_can_have) {
  auto log = std::make_shared<consumer_log>();
  auto clock = [this] { return now_ms(); };
  auto c = sys().spawn(scripted_consumer, log, std::function<int64_t()>{clock});
  for (auto topic :
       {std::string(257, 't'), std::string{"t-\xff\xfe"}, std::string{}}) {
    v1::SubscribeRequest sub;
    sub.set_topic(topic);
    auto res = call<net::empty_reply>(net::subscribe_request{sub}, c);
    BOOST_REQUIRE(!res);
    BOOST_TEST(code_of(res.error()) == core::errc::invalid_topic);
  }
  v1::SubscribeRequest sub;
  sub.set_topic(std::string(256, 't'));
  BOOST_TEST(!!call<net::empty_reply>(net::subscribe_request{sub}, c));
  self()->send_exit(c, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(
  max_batch_is_for_batch_consumers_and_within_max_in_flight) {
  auto log = std::make_shared<consumer_log>();
  auto clock = [this] { return now_ms(); };
  auto plain =
    sys().spawn(scripted_consumer, log, std::function<int64_t()>{clock});
  v1::SubscribeRequest sub;
  sub.set_topic("t");
  sub.set_max_batch(4);
  auto res = call<net::empty_reply>(net::subscribe_request{sub}, plain);
  BOOST_REQUIRE(!res);
  BOOST_TEST(code_of(res.error()) == core::errc::invalid_request);
  self()->send_exit(plain, caf::exit_reason::user_shutdown);
  // A batch consumer holding at most 3 gets at most 3 per message.
  auto [c, blog] = this->batch_consumer("t", 100, 3);
  auto due = now_ms() + 100;
  for (int i = 0; i < 12; ++i)
    schedule_at("t", due);
  advance_to(due + 1'000);
  size_t total = blog->singles.size();
  for (auto& b : blog->batches) {
    BOOST_TEST(b.size() <= 3u);
    total += b.size();
  }
  BOOST_TEST(total == 12u);
  BOOST_TEST(stats().acked() == 12u);
}

BOOST_AUTO_TEST_CASE(waiting_behind_a_hanging_consumer_uses_up_no_attempt) {
  // One slot, never answered: each delivery's lease runs out. The tasks
  // queued behind it go back to their shards before their leases run out,
  // so each becomes a dead letter only after max_attempts deliveries.
  auto [c, log] = this->consumer("stuck", verdict_mode::hang, 1);
  std::set<uint64_t> ids;
  for (int i = 0; i < 5; ++i) {
    v1::ScheduleRequest req;
    req.set_topic("stuck");
    req.mutable_when()->set_in_ms(0);
    auto* policy = req.mutable_policy();
    policy->set_lease_ms(1'000);
    policy->set_max_attempts(2);
    policy->set_backoff_initial_ms(100);
    policy->set_backoff_multiplier_permille(1'000);
    policy->set_backoff_max_ms(100);
    auto res = call<net::schedule_reply>(net::schedule_request{req});
    BOOST_REQUIRE(res);
    ids.insert(res->pb.id());
  }
  advance_ms(60'000);
  std::map<uint64_t, std::vector<uint32_t>> attempts;
  for (auto& d : log->got)
    attempts[d.id().task_id()].push_back(d.attempt());
  auto dead = call<net::dead_letters_reply>(net::dead_letters_request{});
  BOOST_REQUIRE(dead);
  BOOST_REQUIRE_EQUAL(dead->pb.dead_size(), 5);
  for (auto& x : dead->pb.dead())
    BOOST_TEST(attempts[x.task().id()] == (std::vector<uint32_t>{1, 2}),
               "task " << x.task().id());
}

BOOST_AUTO_TEST_CASE(nack_touch_and_stale_acks) {
  auto [c, log] = this->consumer("work", verdict_mode::later);
  auto due = now_ms() + 10;
  schedule_at("work", due);
  advance_to(due);
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  auto first = log->got[0];
  // Nack with a delay: back in 2 s as attempt 2.
  v1::NackRequest nack;
  *nack.mutable_id() = first.id();
  nack.set_retry_in_ms(2'000);
  BOOST_REQUIRE(call<net::empty_reply>(net::nack_request{nack}));
  advance_ms(1'999);
  BOOST_TEST(log->got.size() == 1u);
  advance_ms(1);
  BOOST_REQUIRE_EQUAL(log->got.size(), 2u);
  auto second = log->got[1];
  BOOST_TEST(second.attempt() == 2u);
  // The first delivery is settled: acking it again is stale.
  auto stale = call<net::empty_reply>(net::ack_request{ack_of(first)});
  BOOST_REQUIRE(!stale);
  BOOST_TEST(code_of(stale.error()) == core::errc::stale_delivery);
  // Touch: the lease (30 s) now ends 60 s from now; no redelivery at 30 s.
  v1::TouchRequest touch;
  *touch.mutable_id() = second.id();
  touch.set_extend_ms(60'000);
  BOOST_REQUIRE(call<net::empty_reply>(net::touch_request{touch}));
  advance_ms(45'000);
  BOOST_TEST(log->got.size() == 2u);
  BOOST_REQUIRE(call<net::empty_reply>(net::ack_request{ack_of(second)}));
  advance_ms(120'000);
  BOOST_TEST(log->got.size() == 2u);
}

BOOST_AUTO_TEST_CASE(revoke_and_reschedule_have_definite_outcomes) {
  auto [c, log] = this->consumer("r", verdict_mode::later);
  auto due = now_ms() + 10'000;
  auto pending = schedule_at("r", due);
  auto moved = schedule_at("r", due);
  auto flying = schedule_at("r", now_ms());
  run();
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  auto change = [&](auto req) {
    auto res = call<net::change_reply>(std::move(req));
    BOOST_REQUIRE(res);
    return res->pb.outcome();
  };
  v1::RevokeRequest rev;
  rev.set_id(pending);
  BOOST_TEST(change(net::revoke_request{rev}) == v1::CHANGE_OUTCOME_DONE);
  BOOST_TEST(change(net::revoke_request{rev}) == v1::CHANGE_OUTCOME_COMPLETED);
  v1::RescheduleRequest res;
  res.set_id(moved);
  res.set_due_ms(due + 5'000);
  BOOST_TEST(change(net::reschedule_request{res}) == v1::CHANGE_OUTCOME_DONE);
  res.set_id(flying);
  BOOST_TEST(change(net::reschedule_request{res}) ==
             v1::CHANGE_OUTCOME_IN_FLIGHT);
  rev.set_id(flying);
  BOOST_TEST(change(net::revoke_request{rev}) == v1::CHANGE_OUTCOME_IN_FLIGHT);
  // The revoked in-flight task is never redelivered; the moved one fires
  // at its new time, not the old one.
  advance_to(due + 4'999);
  BOOST_TEST(log->got.size() == 1u);
  advance_to(due + 5'000);
  BOOST_REQUIRE_EQUAL(log->got.size(), 2u);
  BOOST_TEST(log->got[1].id().task_id() == moved);
  BOOST_REQUIRE(call<net::empty_reply>(net::ack_request{ack_of(log->got[1])}));
  advance_ms(120'000);
  BOOST_TEST(log->got.size() == 2u);
}

BOOST_AUTO_TEST_CASE(tasks_fired_ahead_are_still_revoked_and_moved_in_time) {
  // Within the lead before their due time tasks are committed as fired and
  // held by their notifier; until then revoke and reschedule still answer
  // done.
  auto [c, log] = this->consumer("ahead", verdict_mode::ack);
  auto due = now_ms() + 10'000;
  auto revoked = schedule_at("ahead", due);
  auto moved = schedule_at("ahead", due);
  auto kept = schedule_at("ahead", due);
  advance_to(due - 2);
  BOOST_TEST(log->got.empty());
  BOOST_TEST(stats().fired() == 3u);
  auto change = [&](auto req) {
    auto res = call<net::change_reply>(std::move(req));
    BOOST_REQUIRE(res);
    return res->pb.outcome();
  };
  v1::RevokeRequest rev;
  rev.set_id(revoked);
  BOOST_TEST(change(net::revoke_request{rev}) == v1::CHANGE_OUTCOME_DONE);
  v1::RescheduleRequest res;
  res.set_id(moved);
  res.set_due_ms(due + 5'000);
  BOOST_TEST(change(net::reschedule_request{res}) == v1::CHANGE_OUTCOME_DONE);
  advance_to(due - 1);
  BOOST_TEST(log->got.empty());
  advance_to(due);
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  BOOST_TEST(log->got[0].id().task_id() == kept);
  BOOST_TEST(log->got_ms[0] == due);
  advance_to(due + 4'999);
  BOOST_TEST(log->got.size() == 1u);
  advance_to(due + 5'000);
  BOOST_REQUIRE_EQUAL(log->got.size(), 2u);
  BOOST_TEST(log->got[1].id().task_id() == moved);
  BOOST_TEST(log->got[1].attempt() == 1u);
  advance_ms(120'000);
  BOOST_TEST(log->got.size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_day_of_cron_passes_in_virtual_time) {
  auto [c, log] = this->consumer("cron", verdict_mode::ack);
  v1::ScheduleRequest req;
  req.set_topic("cron");
  req.mutable_when()->mutable_cron()->set_expression("*/5 * * * *");
  auto res = call<net::schedule_reply>(net::schedule_request{req});
  BOOST_REQUIRE(res);
  auto started = std::chrono::steady_clock::now();
  auto begin = now_ms();
  advance_to(begin + 86'400'000);
  auto took = std::chrono::steady_clock::now() - started;
  BOOST_TEST_MESSAGE(
    "a day of cron took "
    << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
    << " ms");
  auto st = stats();
  BOOST_TEST_MESSAGE("fired " << st.fired() << " acked " << st.acked()
                              << " in_window " << st.in_window());
  // 2023-11-14T22:13:20Z + 24 h holds 288 five-minute marks.
  BOOST_REQUIRE_EQUAL(log->got.size(), 288u);
  for (size_t i = 0; i < log->got.size(); ++i) {
    auto& d = log->got[i];
    BOOST_TEST(d.due_ms() % 300'000 == 0);
    BOOST_TEST(log->got_ms[i] == d.due_ms()); // Exactly on time.
    BOOST_TEST(d.id().occurrence() == i);
    BOOST_TEST(d.attempt() == 1u);
  }
}

BOOST_AUTO_TEST_CASE(a_crashed_shard_restarts_with_nothing_acknowledged_lost) {
  auto [c, log] = this->consumer("s", verdict_mode::ack);
  auto due = now_ms() + 60'000;
  std::set<uint64_t> ids;
  for (int i = 0; i < 20; ++i)
    ids.insert(schedule_at("s", due + i));
  auto before = shards();
  BOOST_REQUIRE_EQUAL(before.size(), 2u);
  // A hard kill: no flush, no goodbye.
  self()->send_exit(before[0], caf::exit_reason::kill);
  run();
  advance_ms(2'000); // Restart backoff.
  auto after = shards();
  BOOST_REQUIRE(after[0]);
  BOOST_TEST((after[0] != before[0]));
  BOOST_TEST(stats().shard_restarts() == 1u);
  advance_to(due + 1'000);
  std::set<uint64_t> got;
  for (auto& d : log->got)
    got.insert(d.id().task_id());
  BOOST_TEST(got == ids, "every acknowledged task was delivered");
  // The notifiers send verdicts straight to the restarted shard: every ack
  // counts and nothing comes back when the leases would have run out.
  advance_ms(120'000);
  BOOST_TEST(log->got.size() == 20u);
  BOOST_TEST(stats().acked() == 20u);
  BOOST_TEST(stats().redelivered() == 0u);
}

BOOST_AUTO_TEST_CASE(a_restart_recovers_pending_and_in_flight_tasks) {
  auto due = now_ms() + 1'000;
  auto a = schedule_at("x", due + 60'000);
  {
    auto [c, log] = this->consumer("x", verdict_mode::hang);
    schedule_at("x", due);
    advance_to(due);
    BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  }
  restart();
  auto [c, log] = this->consumer("x", verdict_mode::ack);
  // The in-flight one comes back after its lease (30 s), the pending one at
  // its due time.
  advance_to(due + 29'999);
  BOOST_TEST(log->got.size() == 0u);
  advance_to(due + 30'000 + 1'000); // Lease plus the first backoff.
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  BOOST_TEST(log->got[0].attempt() == 2u);
  advance_to(due + 60'000);
  BOOST_REQUIRE_EQUAL(log->got.size(), 2u);
  BOOST_TEST(log->got[1].id().task_id() == a);
}

BOOST_AUTO_TEST_CASE(a_first_delivery_lost_in_a_restart_comes_back_at_once) {
  auto due = now_ms() + 100; // Within the schedule commit's fire horizon.
  {
    auto [c, log] = this->consumer("x", verdict_mode::hang);
    schedule_at("x", due);
    advance_to(due);
    BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
    BOOST_TEST(log->got[0].attempt() == 1u);
  }
  restart();
  auto [c, log] = this->consumer("x", verdict_mode::ack);
  // Its first delivery went out without a write: the store still holds it
  // as pending, so it fires at once, with that attempt counted as spent.
  advance_ms(10);
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  BOOST_TEST(log->got[0].attempt() == 2u);
  advance_ms(120'000);
  BOOST_TEST(log->got.size() == 1u);
  BOOST_TEST(stats().acked() == 1u);
}

BOOST_AUTO_TEST_CASE(a_second_engine_on_the_same_data_fails_to_start) {
  auto cfg = config();
  cfg.wall_clock_ms = [this] { return now_ms(); };
  auto second = spawn_engine(sys(), cfg);
  auto res =
    call_to<ready_atom>(caf::actor_cast<caf::actor>(second), ready_atom::value);
  BOOST_REQUIRE(!res);
  BOOST_TEST(code_of(res.error()) == core::errc::store_locked, error_text(res));
  self()->send_exit(second, caf::exit_reason::user_shutdown);
  run();
}

BOOST_AUTO_TEST_CASE(with_sync_only_verdicts_someone_waits_for_are_fsynced) {
  // A consumer's answer comes to the shard as a plain message from the
  // notifier: nobody waits for its commit, which is fsync'd within the
  // sync period. An ack a client sends through the engine is answered
  // only after its fsync.
  auto fs = std::make_shared<storage::fault_fs>();
  auto cfg = small_config();
  cfg.durability = storage::durability::sync;
  cfg.sync_period_ms = 100;
  cfg.file_system = fs;
  engine_fixture f{cfg};
  auto [consumer, log] = f.consumer("mail", verdict_mode::ack);
  // First a task per shard: a store's first commit that is not fsync'd
  // anyway fsyncs its id reservation.
  auto warm_up = f.now_ms() + 1'000;
  f.schedule_at("mail", warm_up);
  f.schedule_at("mail", warm_up);
  f.advance_to(warm_up + cfg.sync_period_ms);
  BOOST_REQUIRE_EQUAL(log->got.size(), 2u);
  log->got.clear();
  auto due = f.now_ms() + 1'000;
  f.schedule_at("mail", due);
  f.advance_to(due - 1);
  auto before = fs->stats().syncs;
  f.advance_to(due);
  BOOST_REQUIRE_EQUAL(log->got.size(), 1u);
  BOOST_TEST(fs->stats().syncs == before);
  f.advance_ms(cfg.sync_period_ms);
  BOOST_TEST(fs->stats().syncs == before + 1);
  BOOST_TEST(f.stats().acked() == 3u);

  log->mode = verdict_mode::later;
  auto due2 = f.now_ms() + 1'000;
  f.schedule_at("mail", due2);
  f.advance_to(due2);
  BOOST_REQUIRE_EQUAL(log->got.size(), 2u);
  before = fs->stats().syncs;
  auto res = f.call<net::empty_reply>(net::ack_request{ack_of(log->got[1])});
  BOOST_REQUIRE_MESSAGE(res, error_text(res));
  BOOST_TEST(fs->stats().syncs == before + 1);
}

BOOST_AUTO_TEST_SUITE_END()
