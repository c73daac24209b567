// The decisions about a published engine's connections, without CAF: who
// is admitted, who is closed for a deadline or to make room, and the budget
// of unfinished messages.

#define BOOST_TEST_MODULE connection_guard
#include <boost/test/unit_test.hpp>

#include "net/connection_guard.hpp"

using namespace dally::net;

namespace {

connection_limits small_limits() {
  connection_limits l;
  l.max_connections = 4;
  l.max_pending = 2;
  l.handshake_timeout_ms = 1000;
  l.idle_timeout_ms = 0;
  l.idle_eviction_ms = 500;
  l.max_partial_bytes = 100;
  return l;
}

/// Accepts `id` at `now`, and lets it complete the handshake and a request.
void accept_working(connection_guard& g, uint64_t id, int64_t now) {
  BOOST_REQUIRE(g.on_accept(id, now).admitted);
  g.on_handshake(id);
  g.on_request(id, now);
}

} // namespace

BOOST_AUTO_TEST_CASE(a_connection_that_never_sends_is_closed_at_the_deadline) {
  connection_guard g{small_limits()};
  BOOST_TEST(g.on_accept(1, 0).admitted);
  BOOST_TEST(g.expired(999).empty());
  auto out = g.expired(1000);
  BOOST_TEST_REQUIRE(out.size() == 1u);
  BOOST_TEST(out[0].conn == 1u);
  BOOST_TEST((out[0].why == close_reason::deadline));
  BOOST_TEST(g.open() == 0u);
  BOOST_TEST(g.pending() == 0u);
}

BOOST_AUTO_TEST_CASE(a_handshake_alone_does_not_meet_the_deadline) {
  connection_guard g{small_limits()};
  g.on_accept(1, 0);
  g.on_handshake(1);
  BOOST_TEST(g.expired(1000).size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_request_before_the_handshake_does_not_count) {
  connection_guard g{small_limits()};
  g.on_accept(1, 0);
  g.on_request(1, 10);
  BOOST_TEST(g.pending() == 1u);
  BOOST_TEST(g.expired(1000).size() == 1u);
}

BOOST_AUTO_TEST_CASE(
  a_working_connection_has_no_deadline_without_idle_timeout) {
  connection_guard g{small_limits()};
  accept_working(g, 1, 0);
  BOOST_TEST(g.pending() == 0u);
  BOOST_TEST(g.expired(1'000'000).empty());
}

BOOST_AUTO_TEST_CASE(the_idle_timeout_counts_from_the_last_request) {
  auto l = small_limits();
  l.idle_timeout_ms = 300;
  connection_guard g{l};
  accept_working(g, 1, 0);
  g.on_request(1, 200);
  BOOST_TEST(g.expired(499).empty());
  auto out = g.expired(500);
  BOOST_TEST_REQUIRE(out.size() == 1u);
  BOOST_TEST((out[0].why == close_reason::idle_timeout));
}

BOOST_AUTO_TEST_CASE(beyond_max_pending_the_oldest_pending_one_goes) {
  connection_guard g{small_limits()};
  accept_working(g, 1, 0);
  g.on_accept(2, 1);
  g.on_accept(3, 2);
  auto a = g.on_accept(4, 3);
  BOOST_TEST(a.admitted);
  BOOST_TEST_REQUIRE(a.evict.has_value());
  BOOST_TEST(a.evict->conn == 2u);
  BOOST_TEST((a.evict->why == close_reason::pending_cap));
  BOOST_TEST(g.pending() == 2u);
  BOOST_TEST(g.open() == 3u);
  // The working one is never taken for a pending one.
  for (uint64_t id = 5; id < 50; ++id) {
    auto b = g.on_accept(id, static_cast<int64_t>(id));
    BOOST_TEST(b.admitted);
    BOOST_TEST(b.evict->conn != 1u);
  }
  BOOST_TEST(g.open() == 3u);
}

BOOST_AUTO_TEST_CASE(slots_beyond_max_pending_stay_for_working_connections) {
  connection_guard g{small_limits()};
  // Squatters that never work hold at most max_pending slots, however
  // many come; clients that work get theirs in between.
  uint64_t id = 100;
  for (int i = 0; i < 15; ++i)
    BOOST_TEST(g.on_accept(id++, 0).admitted);
  accept_working(g, 10, 1);
  for (int i = 0; i < 5; ++i)
    BOOST_TEST(g.on_accept(id++, 1).admitted);
  accept_working(g, 11, 2);
  for (int i = 0; i < 5; ++i)
    BOOST_TEST(g.on_accept(id++, 2).admitted);
  BOOST_TEST(g.open() == 4u);
  BOOST_TEST(g.pending() == 2u);
  // Only squatters reach the deadline: both clients are still open.
  for (auto& c : g.expired(10'000))
    BOOST_TEST(c.conn >= 100u);
  BOOST_TEST(g.open() == 2u);
}

BOOST_AUTO_TEST_CASE(
  at_the_cap_an_idle_worker_makes_room_or_the_new_one_is_refused) {
  connection_guard g{small_limits()};
  for (uint64_t id = 1; id <= 4; ++id)
    accept_working(g, id, 0);
  g.on_request(1, 100);
  g.on_request(2, 100);
  g.on_request(3, 100);
  g.on_request(4, 50);
  // Connection 4 has sent no request for 450 ms, below idle_eviction.
  auto refused = g.on_accept(5, 500);
  BOOST_TEST(!refused.admitted);
  BOOST_TEST(!refused.evict.has_value());
  BOOST_TEST(g.open() == 4u);
  auto a = g.on_accept(6, 550);
  BOOST_TEST(a.admitted);
  BOOST_TEST_REQUIRE(a.evict.has_value());
  BOOST_TEST(a.evict->conn == 4u);
  BOOST_TEST((a.evict->why == close_reason::evicted_idle));
  BOOST_TEST(g.open() == 4u);
}

BOOST_AUTO_TEST_CASE(at_the_cap_an_idle_pending_one_goes_before_a_worker) {
  auto l = small_limits();
  l.max_pending = 4;
  connection_guard g{l};
  accept_working(g, 1, 0);
  accept_working(g, 2, 0);
  g.on_accept(3, 10);
  g.on_accept(4, 20);
  // The pending ones are young: the idlest worker goes.
  auto a = g.on_accept(5, 505);
  BOOST_TEST(a.admitted);
  BOOST_TEST(a.evict->conn == 1u);
  BOOST_TEST((a.evict->why == close_reason::evicted_idle));
  // Now the oldest pending one has idled long enough.
  auto b = g.on_accept(6, 510);
  BOOST_TEST(b.admitted);
  BOOST_TEST(b.evict->conn == 3u);
  BOOST_TEST((b.evict->why == close_reason::evicted_idle));
}

BOOST_AUTO_TEST_CASE(partial_messages_share_one_budget) {
  connection_guard g{small_limits()};
  g.on_accept(1, 0);
  g.on_accept(2, 0);
  BOOST_TEST(g.grow_partial(1, 60));
  BOOST_TEST(g.grow_partial(2, 40));
  BOOST_TEST(g.partial_bytes() == 100u);
  // One more byte for connection 2 exceeds it: 2 is forgotten, its bytes
  // freed.
  BOOST_TEST(!g.grow_partial(2, 1));
  BOOST_TEST(g.open() == 1u);
  BOOST_TEST(g.partial_bytes() == 60u);
  g.release_partial(1);
  BOOST_TEST(g.partial_bytes() == 0u);
  BOOST_TEST(g.grow_partial(1, 100));
}

BOOST_AUTO_TEST_CASE(closing_frees_the_budget_and_unknown_ids_are_ignored) {
  connection_guard g{small_limits()};
  g.on_accept(1, 0);
  BOOST_TEST(g.grow_partial(1, 80));
  g.on_close(1);
  BOOST_TEST(g.partial_bytes() == 0u);
  BOOST_TEST(g.pending() == 0u);
  g.on_close(1);
  g.on_handshake(7);
  g.on_request(7, 1);
  g.release_partial(7);
  BOOST_TEST(!g.grow_partial(7, 1));
  BOOST_TEST(g.open() == 0u);
}

BOOST_AUTO_TEST_CASE(a_closed_connection_is_not_expired_again) {
  connection_guard g{small_limits()};
  g.on_accept(1, 0);
  BOOST_TEST(g.expired(2000).size() == 1u);
  BOOST_TEST(g.expired(3000).empty());
}
