#define BOOST_TEST_MODULE release_queue
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "logic/delivery_hold.hpp"
#include "logic/release_queue.hpp"

using dally::logic::delivery_hold;
using dally::logic::held_delivery;
using dally::logic::release_queue;

namespace {

held_delivery item(uint64_t id, int64_t release_ms) {
  held_delivery out;
  out.delivery->mutable_id()->set_task_id(id);
  out.delivery->set_due_ms(release_ms);
  out.release_ms = release_ms;
  out.hold = std::make_shared<delivery_hold>();
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(releases_in_time_order_and_never_early) {
  release_queue q;
  BOOST_TEST(q.empty());
  BOOST_TEST(q.next_release_ms() == std::numeric_limits<int64_t>::max());
  q.push(item(3, 130));
  q.push(item(1, 110));
  q.push(item(2, 110));
  q.push(item(4, 100));
  BOOST_TEST(q.size() == 4u);
  BOOST_TEST(q.next_release_ms() == 100);
  BOOST_TEST(q.pop_due(99).empty());
  auto got = q.pop_due(110);
  BOOST_REQUIRE_EQUAL(got.size(), 3u);
  // By release time; equal times in the order they came.
  BOOST_TEST(got[0]->id().task_id() == 4u);
  BOOST_TEST(got[1]->id().task_id() == 1u);
  BOOST_TEST(got[2]->id().task_id() == 2u);
  for (const auto& d : got)
    BOOST_TEST(d->fire_ms() == 110);
  BOOST_TEST(q.size() == 1u);
  BOOST_TEST(q.next_release_ms() == 130);
  got = q.pop_due(1'000);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0]->fire_ms() == 1'000);
  BOOST_TEST(q.empty());
}

BOOST_AUTO_TEST_CASE(a_cancelled_hold_never_goes_out) {
  release_queue q;
  auto kept = item(1, 100);
  auto dropped = item(2, 100);
  auto kept_hold = kept.hold;
  auto dropped_hold = dropped.hold;
  q.push(std::move(kept));
  q.push(std::move(dropped));
  BOOST_TEST(dropped_hold->cancel());
  BOOST_TEST(!dropped_hold->cancel());
  auto got = q.pop_due(100);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0]->id().task_id() == 1u);
  BOOST_TEST(q.empty());
  // Released: the shard can no longer take it back.
  BOOST_TEST(!kept_hold->pending());
  BOOST_TEST(!kept_hold->cancel());
  BOOST_TEST(!dropped_hold->claim());
}
