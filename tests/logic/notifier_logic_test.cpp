#define BOOST_TEST_MODULE notifier_logic
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "logic/notifier_logic.hpp"

using dally::logic::consumer_id;
using dally::logic::consumer_slot;
using dally::logic::delivery_box;
using dally::logic::delivery_ref;
using dally::logic::notifier_effects;
using dally::logic::notifier_logic;
using dally::logic::notifier_options;
namespace v1 = dally::v1;

namespace {

using availability_list = std::vector<std::pair<std::string, bool>>;

delivery_box make_delivery(const std::string& topic, uint64_t id,
                           int64_t lease_deadline_ms = 0) {
  v1::Delivery d;
  d.mutable_id()->set_task_id(id);
  d.mutable_id()->set_occurrence(0);
  d.mutable_id()->set_attempt(1);
  d.set_topic(topic);
  d.set_payload("payload-" + std::to_string(id));
  d.set_attempt(1);
  d.set_lease_deadline_ms(lease_deadline_ms);
  return delivery_box{std::move(d)};
}

/// Deliveries with ids first, first + 1, ... of one topic.
std::vector<delivery_box> make_batch(const std::string& topic, uint64_t first,
                                     size_t count,
                                     int64_t lease_deadline_ms = 0) {
  std::vector<delivery_box> batch;
  for (size_t i = 0; i < count; ++i)
    batch.push_back(make_delivery(topic, first + i, lease_deadline_ms));
  return batch;
}

delivery_ref ref(uint64_t id) {
  return delivery_ref{id, 0, 1};
}

std::vector<uint64_t> ids_of(const std::vector<delivery_ref>& refs) {
  std::vector<uint64_t> ids;
  for (const auto& r : refs)
    ids.push_back(r.id);
  return ids;
}

/// The task ids sent, in order.
std::vector<uint64_t> sent_ids(const notifier_effects& fx) {
  std::vector<uint64_t> ids;
  for (const auto& [cid, d] : fx.send)
    ids.push_back(d->id().task_id());
  return ids;
}

/// The consumers sent to, in order.
std::vector<consumer_id> sent_to(const notifier_effects& fx) {
  std::vector<consumer_id> ids;
  for (const auto& [cid, d] : fx.send)
    ids.push_back(cid);
  return ids;
}

/// Task ids sent to each consumer.
std::map<consumer_id, std::vector<uint64_t>>
by_consumer(const notifier_effects& fx) {
  std::map<consumer_id, std::vector<uint64_t>> result;
  for (const auto& [cid, d] : fx.send)
    result[cid].push_back(d->id().task_id());
  return result;
}

notifier_options total_cap(uint32_t n) {
  notifier_options opts;
  opts.max_in_flight_total = n;
  return opts;
}

} // namespace

BOOST_AUTO_TEST_CASE(consumers_of_a_topic_share_its_load) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 100}, {2, 100}, {3, 100}}, 0, fx);
  fx.clear();
  disp.deliver(make_batch("t", 1, 30), 0, fx);
  BOOST_REQUIRE_EQUAL(fx.send.size(), 30u);
  // Equal load: strict rotation.
  for (size_t i = 0; i < fx.send.size(); ++i)
    BOOST_TEST(fx.send[i].first == consumer_id{i % 3 + 1});
  BOOST_TEST(fx.send[0].second->payload() == "payload-1");
  auto sent = by_consumer(fx);
  BOOST_TEST(sent[1].size() == 10u);
  BOOST_TEST(sent[2].size() == 10u);
  BOOST_TEST(sent[3].size() == 10u);
  // Consumer 2 answers everything: it has the fewest and takes the next 10.
  for (auto id : sent[2]) {
    notifier_effects none;
    BOOST_TEST(disp.answered(2, ref(id), 0, none));
    BOOST_TEST(none.empty());
  }
  fx.clear();
  disp.deliver(make_batch("t", 100, 10), 0, fx);
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>(10, 2));
  // All hold 10 again: back to rotation.
  fx.clear();
  disp.deliver(make_batch("t", 200, 3), 0, fx);
  auto to = sent_to(fx);
  BOOST_TEST(std::set<consumer_id>(to.begin(), to.end()).size() == 3u);
  BOOST_TEST(disp.in_flight() == 33u);
  BOOST_TEST(disp.counters().at("t").in_flight == 33u);
  BOOST_TEST(disp.counters().at("t").delivered == 43u);
  BOOST_TEST(disp.counters().at("t").consumers == 3u);
}

BOOST_AUTO_TEST_CASE(a_consumer_never_holds_more_than_its_cap) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 2}, {2, 3}}, 0, fx);
  disp.deliver(make_batch("t", 1, 7), 0, fx);
  auto sent = by_consumer(fx);
  BOOST_TEST(sent[1].size() == 2u);
  BOOST_TEST(sent[2].size() == 3u);
  auto c = disp.counters().at("t");
  BOOST_TEST(c.queued == 2u);
  BOOST_TEST(c.in_flight == 5u);
  // A freed slot at consumer 1 takes exactly one queued delivery, the
  // oldest, to consumer 1.
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(sent[1].front()), 0, fx));
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{6});
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{1});
  BOOST_TEST(disp.counters().at("t").queued == 1u);
}

BOOST_AUTO_TEST_CASE(total_cap_holds_across_topics_and_frees_fairly) {
  notifier_logic disp{total_cap(4)};
  notifier_effects fx;
  disp.set_consumers("a", {{1, 10}}, 0, fx);
  disp.set_consumers("b", {{2, 10}}, 0, fx);
  disp.set_consumers("c", {{3, 10}}, 0, fx);
  fx.clear();
  disp.deliver(make_batch("a", 1, 4), 0, fx);
  BOOST_TEST(fx.send.size() == 4u);
  fx.clear();
  disp.deliver(make_batch("b", 101, 3), 0, fx);
  disp.deliver(make_batch("c", 201, 3), 0, fx);
  disp.deliver(make_batch("a", 5, 2), 0, fx);
  BOOST_TEST(fx.send.empty());
  BOOST_TEST(fx.undelivered.empty());
  BOOST_TEST(disp.in_flight() == 4u);
  // Every freed slot goes to the next waiting topic in turn, even when it
  // is freed by a topic that has work queued itself.
  std::map<consumer_id, std::vector<uint64_t>> held{{1, {1, 2, 3, 4}}};
  std::vector<consumer_id> order;
  while (order.size() < 8) {
    // Answer the oldest delivery of the consumer with the most.
    auto most = std::max_element(held.begin(), held.end(),
                                 [](const auto& x, const auto& y) {
                                   return x.second.size() < y.second.size();
                                 });
    auto cid = most->first;
    auto id = most->second.front();
    most->second.erase(most->second.begin());
    fx.clear();
    BOOST_REQUIRE(disp.answered(cid, ref(id), 0, fx));
    BOOST_REQUIRE_EQUAL(fx.send.size(), 1u);
    order.push_back(fx.send[0].first);
    held[fx.send[0].first].push_back(fx.send[0].second->id().task_id());
    BOOST_TEST(disp.in_flight() == 4u);
  }
  BOOST_TEST(order == (std::vector<consumer_id>{2, 3, 1, 2, 3, 1, 2, 3}));
  for (const auto& [name, c] : disp.counters())
    BOOST_TEST(c.queued == 0u, name);
}

BOOST_AUTO_TEST_CASE(a_hanging_consumer_blocks_no_other_topic) {
  notifier_logic disp{total_cap(10'050)};
  notifier_effects fx;
  disp.set_consumers("a", {{1, 50}}, 0, fx);
  disp.set_consumers("b", {{2, 10'000}}, 0, fx);
  fx.clear();
  // Consumer 1 never answers: 50 held, the rest queued ("a" unavailable).
  disp.deliver(make_batch("a", 1, 200, 1'000'000), 10, fx);
  BOOST_TEST(fx.send.size() == 50u);
  BOOST_TEST(fx.undelivered.empty());
  BOOST_TEST(fx.availability == (availability_list{{"a", false}}));
  fx.clear();
  disp.deliver(make_batch("b", 1'000, 10'000, 1'000'000), 20, fx);
  BOOST_TEST(fx.send.size() == 10'000u);
  BOOST_TEST(fx.undelivered.empty());
  BOOST_TEST(fx.availability.empty());
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>(10'000, 2));
  BOOST_TEST(disp.counters().at("b").queued == 0u);
  BOOST_TEST(disp.counters().at("a").queued == 150u);
  BOOST_TEST(disp.in_flight() == 10'050u);
}

BOOST_AUTO_TEST_CASE(a_topic_without_consumers_is_undelivered) {
  notifier_logic disp;
  notifier_effects fx;
  disp.deliver(make_batch("x", 1, 2), 0, fx);
  BOOST_TEST(fx.send.empty());
  BOOST_TEST(ids_of(fx.undelivered) == (std::vector<uint64_t>{1, 2}));
  BOOST_TEST(fx.availability == (availability_list{{"x", false}}));
  // Announced once only.
  fx.clear();
  disp.deliver(make_batch("x", 3, 1), 0, fx);
  BOOST_TEST(ids_of(fx.undelivered) == std::vector<uint64_t>{3});
  BOOST_TEST(fx.availability.empty());
  // Other topics are unaffected.
  fx.clear();
  disp.set_consumers("y", {{1, 1}}, 0, fx);
  disp.deliver(make_batch("y", 4, 1), 0, fx);
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{4});
  BOOST_TEST(fx.undelivered.empty());
  BOOST_TEST(fx.availability == (availability_list{{"y", true}}));
  BOOST_TEST(disp.counters().count("x") == 0u);
}

BOOST_AUTO_TEST_CASE(subscribing_announces_availability_changes_only) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 1}}, 0, fx);
  BOOST_TEST(fx.availability == (availability_list{{"t", true}}));
  fx.clear();
  disp.set_consumers("t", {{1, 1}, {2, 1}}, 0, fx);
  BOOST_TEST(fx.empty());
  disp.set_consumers("t", {}, 0, fx);
  BOOST_TEST(fx.availability == (availability_list{{"t", false}}));
  fx.clear();
  disp.set_consumers("t", {}, 0, fx);
  BOOST_TEST(fx.empty());
  disp.set_consumers("t", {{3, 1}}, 0, fx);
  BOOST_TEST(fx.availability == (availability_list{{"t", true}}));
  fx.clear();
  disp.deliver(make_batch("t", 1, 1), 0, fx);
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{3});
}

BOOST_AUTO_TEST_CASE(losing_the_last_consumer_returns_the_queue) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 1}}, 0, fx);
  disp.deliver(make_batch("t", 1, 2), 0, fx);
  fx.clear();
  disp.set_consumers("t", {}, 0, fx);
  BOOST_TEST(ids_of(fx.undelivered) == std::vector<uint64_t>{2});
  BOOST_TEST(fx.availability == (availability_list{{"t", false}}));
  BOOST_TEST(fx.requeue.empty());
  // Consumer 1 still holds delivery 1 and may answer it.
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(1), 0, fx));
  BOOST_TEST(fx.empty());
  BOOST_TEST(disp.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(a_full_queue_announces_unavailable_until_half_drained) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 4}}, 0, fx);
  fx.clear();
  // Soft bound 4: 4 held, and at 4 queued the topic is announced
  // unavailable once; what shards fired before they heard is still queued.
  disp.deliver(make_batch("t", 1, 10), 0, fx);
  BOOST_TEST(sent_ids(fx) == (std::vector<uint64_t>{1, 2, 3, 4}));
  BOOST_TEST(fx.undelivered.empty());
  BOOST_TEST(fx.availability == (availability_list{{"t", false}}));
  BOOST_TEST(disp.counters().at("t").queued == 6u);
  // 5, 4 and 3 queued: still unavailable; at 2 (half) available.
  for (uint64_t id = 1; id <= 3; ++id) {
    fx.clear();
    BOOST_TEST(disp.answered(1, ref(id), 0, fx));
    BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{id + 4});
    BOOST_TEST(fx.availability.empty());
  }
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(4), 0, fx));
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{8});
  BOOST_TEST(disp.counters().at("t").queued == 2u);
  BOOST_TEST(fx.availability == (availability_list{{"t", true}}));
}

BOOST_AUTO_TEST_CASE(beyond_the_hard_bound_deliveries_go_back) {
  notifier_options opts;
  opts.max_queued_per_topic = 3;
  notifier_logic disp{opts};
  notifier_effects fx;
  disp.set_consumers("t", {{1, 2}}, 0, fx);
  fx.clear();
  // 2 held, 3 queued; the rest refused, announced once.
  disp.deliver(make_batch("t", 1, 7), 0, fx);
  BOOST_TEST(sent_ids(fx) == (std::vector<uint64_t>{1, 2}));
  BOOST_TEST(ids_of(fx.undelivered) == (std::vector<uint64_t>{6, 7}));
  BOOST_TEST(fx.availability == (availability_list{{"t", false}}));
  BOOST_TEST(disp.counters().at("t").queued == 3u);
  // Drained to half the soft bound (1): available again, room again.
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(1), 0, fx));
  BOOST_TEST(fx.availability.empty());
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(2), 0, fx));
  BOOST_TEST(sent_ids(fx) == (std::vector<uint64_t>{4}));
  BOOST_TEST(fx.availability == (availability_list{{"t", true}}));
  fx.clear();
  disp.deliver(make_batch("t", 8, 1), 0, fx);
  BOOST_TEST(fx.empty());
  BOOST_TEST(disp.counters().at("t").queued == 2u);
}

BOOST_AUTO_TEST_CASE(a_delivery_that_waited_half_its_lease_goes_back) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 2}}, 0, fx);
  fx.clear();
  std::vector<delivery_box> batch;
  batch.push_back(make_delivery("t", 1, 1'000));
  batch.push_back(make_delivery("t", 2, 1'000));
  batch.push_back(make_delivery("t", 3, 500));
  batch.push_back(make_delivery("t", 4, 2'000));
  disp.deliver(std::move(batch), 100, fx);
  BOOST_TEST(sent_ids(fx) == (std::vector<uint64_t>{1, 2}));
  BOOST_TEST(disp.counters().at("t").queued == 2u);
  fx.clear();
  // Fired at 0: by 600, delivery 3 (lease to 500) has waited more than
  // half its lease; it goes back to its shard unsent, before the shard's
  // lease timer would redeliver it with the next attempt, and the topic
  // is announced again after it (the shard parks the topic on taking it
  // back). Delivery 4 (lease to 2000) is sent.
  BOOST_TEST(disp.answered(1, ref(1), 600, fx));
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{4});
  BOOST_TEST(ids_of(fx.undelivered) == std::vector<uint64_t>{3});
  BOOST_TEST(fx.availability == (availability_list{{"t", true}}));
  BOOST_TEST(fx.requeue.empty());
  auto c = disp.counters().at("t");
  BOOST_TEST(c.expired == 1u);
  BOOST_TEST(c.queued == 0u);
  BOOST_TEST(c.delivered == 3u);
  // One that arrives past half its lease goes back too; no lease (0)
  // never runs out.
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(2), 2'500, fx));
  BOOST_TEST(disp.answered(1, ref(4), 2'500, fx));
  batch.clear();
  batch.push_back(make_delivery("t", 5, 2'500));
  batch.push_back(make_delivery("t", 6, 0));
  fx.clear();
  disp.deliver(std::move(batch), 2'500, fx);
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{6});
  BOOST_TEST(ids_of(fx.undelivered) == std::vector<uint64_t>{5});
  BOOST_TEST(disp.counters().at("t").expired == 2u);
}

BOOST_AUTO_TEST_CASE(expire_gives_back_what_waited_behind_a_hanging_consumer) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 1}}, 0, fx);
  fx.clear();
  BOOST_TEST(disp.next_expiry_ms() == std::numeric_limits<int64_t>::max());
  // Consumer 1 holds delivery 1 and never answers; 2 and 3 wait.
  disp.deliver(make_batch("t", 1, 3, 1'000), 0, fx);
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{1});
  BOOST_TEST(fx.availability == (availability_list{{"t", false}}));
  BOOST_TEST(disp.next_expiry_ms() == 500);
  fx.clear();
  disp.expire(499, fx);
  BOOST_TEST(fx.empty());
  // Half their lease has passed: both go back (their attempts are not
  // counted), and the topic is announced available after them.
  disp.expire(500, fx);
  BOOST_TEST(ids_of(fx.undelivered) == (std::vector<uint64_t>{2, 3}));
  BOOST_TEST(fx.availability == (availability_list{{"t", true}}));
  BOOST_TEST(fx.send.empty());
  BOOST_TEST(disp.counters().at("t").queued == 0u);
  BOOST_TEST(disp.counters().at("t").expired == 2u);
  BOOST_TEST(disp.next_expiry_ms() == std::numeric_limits<int64_t>::max());
  BOOST_TEST(disp.in_flight() == 1u);
}

BOOST_AUTO_TEST_CASE(expired_deliveries_make_room_in_a_full_queue) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 1}}, 0, fx);
  fx.clear();
  disp.deliver(make_batch("t", 1, 2, 1'000), 0, fx);
  BOOST_TEST(disp.counters().at("t").queued == 1u);
  // Delivery 2 waited past half its lease: it goes back and gives way to
  // delivery 3.
  fx.clear();
  disp.deliver(make_batch("t", 3, 1, 5'000), 1'000, fx);
  BOOST_TEST(ids_of(fx.undelivered) == std::vector<uint64_t>{2});
  BOOST_TEST(fx.availability == (availability_list{{"t", true}}));
  BOOST_TEST(fx.send.empty());
  BOOST_TEST(disp.counters().at("t").queued == 1u);
  BOOST_TEST(disp.counters().at("t").expired == 1u);
}

BOOST_AUTO_TEST_CASE(a_dead_consumer_requeues_what_it_held) {
  notifier_logic disp{total_cap(4)};
  notifier_effects fx;
  disp.set_consumers("t", {{1, 4}, {2, 4}}, 0, fx);
  fx.clear();
  disp.deliver(make_batch("t", 1, 6), 0, fx);
  auto sent = by_consumer(fx);
  BOOST_TEST(sent[1] == (std::vector<uint64_t>{1, 3}));
  BOOST_TEST(sent[2] == (std::vector<uint64_t>{2, 4}));
  BOOST_TEST(disp.counters().at("t").queued == 2u);
  fx.clear();
  disp.consumer_down(1, 0, fx);
  BOOST_TEST(ids_of(fx.requeue) == (std::vector<uint64_t>{1, 3}));
  // The freed total slots carry the queue to consumer 2.
  BOOST_TEST(sent_ids(fx) == (std::vector<uint64_t>{5, 6}));
  BOOST_TEST(sent_to(fx) == (std::vector<consumer_id>{2, 2}));
  BOOST_TEST(fx.undelivered.empty());
  BOOST_TEST(fx.availability.empty());
  BOOST_TEST(disp.in_flight() == 4u);
  BOOST_TEST(disp.counters().at("t").consumers == 1u);
  // Nothing of consumer 1 is left.
  fx.clear();
  BOOST_TEST(!disp.answered(1, ref(1), 0, fx));
  disp.consumer_down(1, 0, fx);
  BOOST_TEST(fx.empty());
  // Losing the last consumer makes the topic unavailable.
  disp.deliver(make_batch("t", 7, 1), 0, fx);
  BOOST_TEST(disp.counters().at("t").queued == 1u);
  fx.clear();
  disp.consumer_down(2, 0, fx);
  BOOST_TEST(ids_of(fx.requeue) == (std::vector<uint64_t>{2, 4, 5, 6}));
  BOOST_TEST(ids_of(fx.undelivered) == std::vector<uint64_t>{7});
  BOOST_TEST(fx.availability == (availability_list{{"t", false}}));
  BOOST_TEST(disp.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(a_dead_consumer_requeues_across_topics) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("a", {{1, 5}}, 0, fx);
  disp.set_consumers("b", {{1, 5}, {2, 5}}, 0, fx);
  disp.deliver(make_batch("a", 1, 2), 0, fx);
  disp.deliver(make_batch("b", 10, 2), 0, fx);
  fx.clear();
  disp.consumer_down(1, 0, fx);
  BOOST_TEST(ids_of(fx.requeue) == (std::vector<uint64_t>{1, 2, 10}));
  BOOST_TEST(fx.availability == (availability_list{{"a", false}}));
  BOOST_TEST(disp.in_flight() == 1u);
  BOOST_TEST(disp.counters().at("b").consumers == 1u);
}

BOOST_AUTO_TEST_CASE(a_timeout_frees_the_slot_without_requeue) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 1}}, 0, fx);
  disp.deliver(make_batch("t", 1, 2), 0, fx);
  fx.clear();
  disp.failed(1, ref(1), true, 0, fx);
  BOOST_TEST(fx.requeue.empty());
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{2});
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{1});
  BOOST_TEST(disp.in_flight() == 1u);
  // A late answer to the timed out delivery frees nothing.
  fx.clear();
  BOOST_TEST(!disp.answered(1, ref(1), 0, fx));
  BOOST_TEST(fx.empty());
  BOOST_TEST(disp.in_flight() == 1u);
}

BOOST_AUTO_TEST_CASE(another_failure_requeues_and_spares_the_consumer) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 2}, {2, 2}}, 0, fx);
  disp.deliver(make_batch("t", 1, 4), 0, fx);
  BOOST_TEST(by_consumer(fx)[1] == (std::vector<uint64_t>{1, 3}));
  fx.clear();
  disp.failed(1, ref(1), false, 0, fx);
  BOOST_TEST(ids_of(fx.requeue) == std::vector<uint64_t>{1});
  BOOST_TEST(fx.send.empty());
  BOOST_TEST(disp.in_flight() == 3u);
  // The same failure again requeues nothing more.
  fx.clear();
  disp.failed(1, ref(1), false, 0, fx);
  BOOST_TEST(fx.empty());
  // Consumer 1 gets nothing new, though it has a free slot.
  BOOST_TEST(disp.counters().at("t").consumers == 1u);
  disp.answered(2, ref(2), 0, fx);
  disp.deliver(make_batch("t", 5, 2), 0, fx);
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{2});
  BOOST_TEST(disp.counters().at("t").queued == 1u);
  // consumer_down then requeues what it still held, once.
  fx.clear();
  disp.consumer_down(1, 0, fx);
  BOOST_TEST(ids_of(fx.requeue) == std::vector<uint64_t>{3});
}

BOOST_AUTO_TEST_CASE(answers_for_unknown_deliveries_return_false) {
  notifier_logic disp;
  notifier_effects fx;
  BOOST_TEST(!disp.answered(7, ref(1), 0, fx));
  disp.set_consumers("t", {{1, 1}, {2, 1}}, 0, fx);
  disp.deliver(make_batch("t", 1, 1), 0, fx);
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{1});
  fx.clear();
  BOOST_TEST(!disp.answered(2, ref(1), 0, fx));    // Wrong consumer.
  BOOST_TEST(!disp.answered(1, ref(2), 0, fx));    // Unknown task.
  BOOST_TEST(!disp.answered(1, {1, 0, 2}, 0, fx)); // Other attempt.
  BOOST_TEST(!disp.answered(1, {1, 1, 1}, 0, fx)); // Other occurrence.
  BOOST_TEST(fx.empty());
  BOOST_TEST(disp.in_flight() == 1u);
  BOOST_TEST(disp.answered(1, ref(1), 0, fx));
  BOOST_TEST(!disp.answered(1, ref(1), 0, fx)); // Already answered.
  BOOST_TEST(disp.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(a_removed_consumer_answers_free_its_slots) {
  notifier_logic disp{total_cap(2)};
  notifier_effects fx;
  disp.set_consumers("t", {{1, 2}}, 0, fx);
  disp.deliver(make_batch("t", 1, 2), 0, fx);
  fx.clear();
  disp.set_consumers("t", {{2, 2}}, 0, fx);
  BOOST_TEST(fx.empty());
  disp.deliver(make_batch("t", 3, 2), 0, fx);
  BOOST_TEST(fx.empty()); // The total cap is full.
  BOOST_TEST(disp.counters().at("t").in_flight == 2u);
  BOOST_TEST(disp.answered(1, ref(1), 0, fx));
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{2});
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(2), 0, fx));
  BOOST_TEST(sent_ids(fx) == std::vector<uint64_t>{4});
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{2});
  BOOST_TEST(disp.in_flight() == 2u);
}

BOOST_AUTO_TEST_CASE(a_relisted_consumer_keeps_its_count) {
  notifier_logic disp;
  notifier_effects fx;
  disp.set_consumers("t", {{1, 2}}, 0, fx);
  disp.deliver(make_batch("t", 1, 2), 0, fx);
  disp.set_consumers("t", {{2, 2}}, 0, fx);
  disp.set_consumers("t", {{1, 2}, {2, 2}}, 0, fx);
  fx.clear();
  // Consumer 1 still holds 2: everything goes to consumer 2.
  disp.deliver(make_batch("t", 3, 3), 0, fx);
  BOOST_TEST(sent_to(fx) == (std::vector<consumer_id>{2, 2}));
  fx.clear();
  BOOST_TEST(disp.answered(1, ref(1), 0, fx));
  BOOST_TEST(sent_to(fx) == std::vector<consumer_id>{1});
}

// Random operations against the bookkeeping every caller relies on: each
// delivery is accounted for exactly once, no cap is ever exceeded.
BOOST_AUTO_TEST_CASE(random_operations_keep_the_books) {
  constexpr uint32_t total = 20;
  notifier_logic disp{total_cap(total)};
  std::mt19937_64 rng{42};
  auto below = [&rng](uint64_t n) {
    return std::uniform_int_distribution<uint64_t>{0, n - 1}(rng);
  };
  const std::vector<std::string> topics{"a", "b", "c"};
  std::map<std::string, std::vector<consumer_slot>> lists;
  // consumer -> topic -> held ids (this model's view).
  std::map<consumer_id, std::map<std::string, std::set<uint64_t>>> held;
  std::map<uint64_t, std::string> topic_of;
  uint64_t next_id = 1;
  uint64_t delivered = 0;
  uint64_t undelivered = 0;
  uint64_t requeued = 0;
  uint64_t answered = 0;
  uint64_t timed_out = 0;
  int64_t now_ms = 0;
  for (int step = 0; step < 20'000; ++step) {
    notifier_effects fx;
    now_ms += static_cast<int64_t>(below(3));
    switch (below(10)) {
      case 0: { // Resubscribe a topic.
        auto& topic = topics[below(topics.size())];
        std::vector<consumer_slot> list;
        for (consumer_id id = 1; id <= 4; ++id)
          if (below(2) == 0)
            list.push_back({id, static_cast<uint32_t>(1 + below(4))});
        lists[topic] = list;
        disp.set_consumers(topic, list, now_ms, fx);
        break;
      }
      case 1: { // A consumer dies.
        consumer_id id = 1 + below(4);
        for (auto& [topic, list] : lists)
          std::erase_if(list, [id](const auto& s) { return s.id == id; });
        disp.consumer_down(id, now_ms, fx);
        break;
      }
      case 2:
      case 3:
      case 4: { // Answers or failures.
        consumer_id id = 1 + below(4);
        std::vector<uint64_t> ids;
        for (auto& [topic, set] : held[id])
          ids.insert(ids.end(), set.begin(), set.end());
        if (ids.empty())
          break;
        auto task = ids[below(ids.size())];
        auto how = below(4);
        if (how < 2) {
          BOOST_REQUIRE(disp.answered(id, ref(task), now_ms, fx));
          ++answered;
          held[id][topic_of[task]].erase(task);
        } else if (how == 2) {
          disp.failed(id, ref(task), true, now_ms, fx);
          ++timed_out;
          held[id][topic_of[task]].erase(task);
        } else {
          // Requeued (checked below), and the consumer is taken as gone.
          disp.failed(id, ref(task), false, now_ms, fx);
          BOOST_REQUIRE_EQUAL(fx.requeue.size(), 1u);
          for (auto& [topic, list] : lists)
            std::erase_if(list, [id](const auto& s) { return s.id == id; });
        }
        break;
      }
      default: { // A batch.
        auto& topic = topics[below(topics.size())];
        auto count = 1 + below(8);
        auto batch = make_batch(topic, next_id, count, now_ms + 50);
        for (auto& d : batch)
          d->set_fire_ms(now_ms);
        for (uint64_t i = 0; i < count; ++i)
          topic_of[next_id + i] = topic;
        next_id += count;
        delivered += count;
        disp.deliver(std::move(batch), now_ms, fx);
      }
    }
    for (const auto& [cid, d] : fx.send) {
      const auto& topic = d->topic();
      // Sent only to a current consumer of the topic, within its cap.
      auto& list = lists[topic];
      auto slot = std::find_if(list.begin(), list.end(),
                               [cid](const auto& s) { return s.id == cid; });
      BOOST_REQUIRE(slot != list.end());
      auto& set = held[cid][topic];
      BOOST_REQUIRE(set.insert(d->id().task_id()).second);
      BOOST_REQUIRE_LE(set.size(), slot->max_in_flight);
    }
    for (const auto& r : fx.requeue) {
      bool found = false;
      for (auto& [cid, topics_held] : held)
        found = topics_held[topic_of[r.id]].erase(r.id) > 0 || found;
      BOOST_REQUIRE(found);
      ++requeued;
    }
    undelivered += fx.undelivered.size();
    size_t model_in_flight = 0;
    for (auto& [cid, topics_held] : held)
      for (auto& [topic, set] : topics_held)
        model_in_flight += set.size();
    BOOST_REQUIRE_EQUAL(disp.in_flight(), model_in_flight);
    BOOST_REQUIRE_LE(disp.in_flight(), total);
    // Conservation: every delivery is held, queued, given back (refused or
    // overdue in the queue, `expired` counting the latter) or settled.
    uint64_t queued = 0;
    uint64_t expired = 0;
    uint64_t sent = 0;
    for (const auto& [name, c] : disp.counters()) {
      queued += c.queued;
      expired += c.expired;
      sent += c.delivered;
    }
    BOOST_REQUIRE_EQUAL(delivered, sent + queued + undelivered);
    BOOST_REQUIRE_LE(expired, undelivered);
    BOOST_REQUIRE_EQUAL(sent,
                        model_in_flight + answered + timed_out + requeued);
  }
  BOOST_TEST(answered > 1'000u);
  BOOST_TEST(requeued > 100u);
  BOOST_TEST(undelivered > 100u);
}
