#define BOOST_TEST_MODULE engine_logic
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/placement.hpp"
#include "logic/consumer_sends.hpp"
#include "logic/engine_reports.hpp"
#include "logic/engine_routing.hpp"
#include "logic/restart_backoff.hpp"

// The decisions of the engine, notifier and supervisor actors, without CAF.

using namespace dally;

namespace {

v1::ScheduleRequest task(std::string key = {}) {
  v1::ScheduleRequest req;
  req.set_topic("t");
  req.set_payload(key.empty() ? "p" : key);
  if (!key.empty())
    req.set_idempotency_key(key);
  return req;
}

logic::delivery_box box(core::task_id id, size_t payload_bytes = 1) {
  logic::delivery_box out;
  out->mutable_id()->set_task_id(id);
  out->set_payload(std::string(payload_bytes, 'x'));
  return out;
}

} // namespace

// -- routing ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(router_places_ids_keys_and_new_tasks) {
  logic::request_router router{core::shard_map::single_node(3)};
  BOOST_TEST(router.shard_count() == 3u);
  BOOST_TEST(router.shard_of(7) == 1u);
  BOOST_TEST(router.shard_for(task("k1")) == core::shard_of_key("k1", 3));
  BOOST_TEST(router.shard_for(task("k1")) == core::shard_of_key("k1", 3));
  // Without a key: round the shards.
  BOOST_TEST(router.shard_for(task()) == 0u);
  BOOST_TEST(router.shard_for(task()) == 1u);
  BOOST_TEST(router.shard_for(task()) == 2u);
  BOOST_TEST(router.shard_for(task()) == 0u);
}

BOOST_AUTO_TEST_CASE(a_batch_without_keys_goes_whole_to_the_next_shard) {
  logic::request_router router{core::shard_map::single_node(2)};
  v1::ScheduleBatchRequest batch;
  *batch.add_tasks() = task();
  *batch.add_tasks() = task();
  auto up = [](uint32_t) { return true; };
  BOOST_TEST((router.whole(batch, up) == std::optional<uint32_t>{0}));
  BOOST_TEST((router.whole(batch, up) == std::optional<uint32_t>{1}));
  // The next shard is down: split instead (its part then fails alone).
  BOOST_TEST(!router.whole(batch, [](uint32_t) { return false; }));
  // With a key, or empty: split.
  *batch.add_tasks() = task("k");
  BOOST_TEST(!router.whole(batch, up));
  BOOST_TEST(!router.whole(v1::ScheduleBatchRequest{}, up));
}

BOOST_AUTO_TEST_CASE(a_batch_with_keys_splits_by_shard) {
  logic::request_router router{core::shard_map::single_node(4)};
  v1::ScheduleBatchRequest batch;
  std::vector<std::string> keys{"", "a", "", "b", "c"};
  for (const auto& key : keys)
    *batch.add_tasks() = task(key);
  auto parts = router.split(batch);
  std::map<uint32_t, std::vector<int>> expected;
  for (int i = 0; i < 5; ++i)
    expected[keys[i].empty() ? 0 : core::shard_of_key(keys[i], 4)].push_back(i);
  BOOST_REQUIRE(parts.size() == expected.size());
  uint32_t last = 0;
  for (const auto& part : parts) {
    BOOST_TEST(part.shard >= last); // In shard order.
    last = part.shard;
    BOOST_TEST(part.positions == expected[part.shard]);
    BOOST_TEST(part.request.tasks_size() ==
               static_cast<int>(part.positions.size()));
  }
  // The unkeyed tasks took a turn.
  BOOST_TEST(router.shard_for(task()) == 1u);
}

BOOST_AUTO_TEST_CASE(a_split_batch_is_answered_in_the_requests_order) {
  logic::batch_answer answer{3, 2};
  v1::ScheduleBatchReply part;
  part.add_results()->mutable_scheduled()->set_id(11);
  part.add_results()->mutable_scheduled()->set_id(13);
  answer.fill({0, 2}, part);
  BOOST_TEST(!answer.complete());
  answer.fail({1}, core::error{core::errc::unavailable, "shard 1 is down"});
  BOOST_TEST(answer.complete());
  auto reply = answer.take();
  BOOST_REQUIRE(reply.results_size() == 3);
  BOOST_TEST(reply.results(0).scheduled().id() == 11u);
  BOOST_TEST(reply.results(2).scheduled().id() == 13u);
  BOOST_TEST(reply.results(1).failure().code() ==
             static_cast<uint32_t>(core::errc::unavailable));
  BOOST_TEST(reply.results(1).failure().message() == "shard 1 is down");
}

// -- reports ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(stats_add_up_per_node_and_per_topic) {
  logic::stats_merge merge{2, 5};
  logic::shard_report a;
  a.counters.scheduled = 3;
  a.counters.acked = 2;
  a.window = 4;
  a.backlog = 1;
  a.waiting = {{"x", 2}};
  a.quarantined = 1;
  logic::shard_report b = a;
  b.waiting = {{"x", 1}, {"y", 4}};
  merge.add(a);
  merge.add(b);
  logic::notifier_report n;
  n.in_flight = 6;
  n.topics["y"].delivered = 9;
  merge.add(n);
  merge.add(std::map<std::string, uint32_t>{{"x", 2}});
  merge.add(logic::front_door_report{7, 1024, 3, 1});
  auto r = merge.take();
  BOOST_TEST(r.shards() == 2u);
  BOOST_TEST(r.shard_restarts() == 5u);
  BOOST_TEST(r.scheduled() == 6u);
  BOOST_TEST(r.acked() == 4u);
  BOOST_TEST(r.in_window() == 10u);
  BOOST_TEST(r.waiting() == 7u);
  BOOST_TEST(r.quarantined() == 2u);
  BOOST_TEST(r.in_flight() == 6u);
  BOOST_TEST(r.front_door_backlog() == 7u);
  BOOST_TEST(r.front_door_peak_backlog() == 1024u);
  BOOST_TEST(r.front_door_closings() == 3u);
  BOOST_TEST(r.front_door_stalls() == 1u);
  BOOST_REQUIRE(r.topics_size() == 2);
  BOOST_TEST(r.topics(0).topic() == "x");
  BOOST_TEST(r.topics(0).waiting() == 3u);
  BOOST_TEST(r.topics(0).consumers() == 2u);
  BOOST_TEST(r.topics(1).topic() == "y");
  BOOST_TEST(r.topics(1).delivered() == 9u);
}

BOOST_AUTO_TEST_CASE(dead_letter_pages_merge_in_id_order) {
  auto page = [](std::vector<uint64_t> ids, uint64_t next) {
    v1::DeadLettersReply out;
    for (auto id : ids)
      out.add_dead()->mutable_task()->set_id(id);
    out.set_next_after_id(next);
    return out;
  };
  logic::dead_letter_merge merge;
  auto a = page({2, 8}, 0);
  auto b = page({3, 5}, 0);
  merge.add(a);
  merge.add(b);
  auto first = merge.take(3);
  BOOST_REQUIRE(first.dead_size() == 3);
  BOOST_TEST(first.dead(0).task().id() == 2u);
  BOOST_TEST(first.dead(2).task().id() == 5u);
  BOOST_TEST(first.next_after_id() == 5u);
  // All fit, but a shard has more: the page says where to go on.
  logic::dead_letter_merge more;
  auto c = page({4}, 4);
  more.add(c);
  BOOST_TEST(more.take(10).next_after_id() == 4u);
  logic::dead_letter_merge done;
  auto d = page({4}, 0);
  done.add(d);
  BOOST_TEST(done.take(10).next_after_id() == 0u);
}

// -- sending to consumers -----------------------------------------------------

BOOST_AUTO_TEST_CASE(plain_consumers_get_one_message_per_delivery_first) {
  std::vector<std::pair<logic::consumer_id, logic::delivery_box>> sends;
  sends.emplace_back(1, box(10)); // batch consumer
  sends.emplace_back(2, box(11)); // plain
  sends.emplace_back(1, box(12));
  sends.emplace_back(1, box(13));
  sends.emplace_back(3, box(14)); // unknown
  std::vector<std::string> log;
  logic::dispatch_sends(
    std::move(sends),
    [](logic::consumer_id cid) -> size_t { return cid == 1 ? 2 : cid == 2; },
    [&](logic::consumer_id cid, logic::delivery_box d) {
      log.push_back("one " + std::to_string(cid) + ":" +
                    std::to_string(d->id().task_id()));
    },
    [&](logic::consumer_id cid, std::vector<logic::delivery_box> items) {
      std::string line = "batch " + std::to_string(cid) + ":";
      for (auto& d : items)
        line += " " + std::to_string(d->id().task_id());
      log.push_back(line);
    });
  std::vector<std::string> expected{"one 2:11", "one 3:14", "batch 1: 10 12",
                                    "one 1:13"};
  BOOST_TEST(log == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_batch_stays_under_its_payload_bound) {
  std::vector<std::pair<logic::consumer_id, logic::delivery_box>> sends;
  auto half = logic::max_batch_payload_bytes / 2 + 1;
  for (core::task_id id = 1; id <= 3; ++id)
    sends.emplace_back(1, box(id, half));
  std::vector<size_t> sizes;
  logic::dispatch_sends(
    std::move(sends), [](logic::consumer_id) -> size_t { return 64; },
    [&](logic::consumer_id, logic::delivery_box) { sizes.push_back(1); },
    [&](logic::consumer_id, std::vector<logic::delivery_box> items) {
      sizes.push_back(items.size());
    });
  BOOST_TEST(sizes == (std::vector<size_t>{1, 1, 1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(answers_become_verdicts_grouped_by_target) {
  logic::delivery_ref a{1, 0, 1}, b{2, 0, 1}, c{3, 0, 1}, d{4, 0, 1};
  v1::DeliveryBatchReply reply;
  reply.add_replies()->set_verdict(v1::DeliveryReply::VERDICT_ACK);
  auto* nack = reply.add_replies();
  nack->set_verdict(v1::DeliveryReply::VERDICT_NACK);
  nack->set_retry_in_ms(250);
  reply.add_replies()->set_verdict(v1::DeliveryReply::VERDICT_LATER);
  reply.add_replies()->set_verdict(v1::DeliveryReply::VERDICT_ACK);
  auto verdicts = logic::verdicts_of({a, b, c, d}, reply);
  BOOST_REQUIRE(verdicts.size() == 3u);
  BOOST_TEST(verdicts[1].ref.id == 2u);
  BOOST_TEST(!verdicts[1].ack);
  BOOST_TEST((verdicts[1].retry_in_ms == std::optional<int64_t>{250}));
  // A reply that stops short leaves the rest to their leases.
  v1::DeliveryBatchReply shorter;
  shorter.add_replies()->set_verdict(v1::DeliveryReply::VERDICT_ACK);
  BOOST_TEST(logic::verdicts_of({a, b}, shorter).size() == 1u);
  // By target: odd ids to one, even to another, in first-seen order.
  std::string odd = "odd", even = "even";
  auto groups = logic::group_verdicts<std::string>(
    verdicts, [&](core::task_id id) -> const std::string& {
      return id % 2 ? odd : even;
    });
  BOOST_REQUIRE(groups.size() == 2u);
  BOOST_TEST(groups[0].first == "odd");
  BOOST_TEST(groups[0].second.size() == 1u);
  BOOST_TEST(groups[1].first == "even");
  BOOST_TEST(groups[1].second.size() == 2u);
}

// -- restarts -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(restarts_back_off_and_pause_after_too_many) {
  using std::chrono::milliseconds;
  logic::restart_backoff backoff{3};
  std::chrono::steady_clock::time_point t{};
  BOOST_TEST(backoff.failed(t).count() == 10);
  BOOST_TEST(backoff.failed(t).count() == 20);
  BOOST_TEST(backoff.failed(t).count() == 40);
  // The fourth within a minute waits a minute.
  BOOST_TEST(backoff.failed(t).count() == 60'000);
  // Serving again starts the backoff over; the old restarts age out.
  backoff.serving();
  BOOST_TEST(backoff.failed(t + std::chrono::minutes{2}).count() == 10);
  for (int i = 0; i < 10; ++i)
    backoff.failed(t + std::chrono::minutes{2});
  BOOST_TEST(backoff.failed(t + std::chrono::minutes{2}).count() == 60'000);
  logic::restart_backoff capped{100};
  auto delay = milliseconds{0};
  for (int i = 0; i < 20; ++i)
    delay = capped.failed(t);
  BOOST_TEST(delay.count() == 1'000);
}
