#define BOOST_TEST_MODULE peer_monitor
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

#include "cluster/peer_monitor.hpp"

using namespace dally::cluster;
using kind = peer_effect::kind;

namespace {

peer_monitor_config config() {
  peer_monitor_config cfg;
  cfg.heartbeat_ms = 100;
  cfg.unreachable_ms = 1000;
  cfg.reconnect_min_ms = 100;
  cfg.reconnect_max_ms = 800;
  cfg.connect_timeout_ms = 500;
  return cfg;
}

bool has(const std::vector<peer_effect>& fx, kind what, node_id peer) {
  return std::find(fx.begin(), fx.end(), peer_effect{what, peer}) != fx.end();
}

size_t count(const std::vector<peer_effect>& fx, kind what) {
  return static_cast<size_t>(std::count_if(
    fx.begin(), fx.end(), [&](const auto& e) { return e.what == what; }));
}

/// A monitor of peers 2 and 3, both connected and heard from at 0.
peer_monitor connected_pair() {
  peer_monitor m{config(), {2, 3}};
  m.on_tick(0);
  for (node_id id : {2, 3}) {
    m.on_connected(0, id);
    m.on_message(0, id);
  }
  return m;
}

} // namespace

BOOST_AUTO_TEST_CASE(first_tick_connects_to_every_peer) {
  peer_monitor m{config(), {2, 3}};
  auto fx = m.on_tick(0);
  BOOST_TEST(fx.size() == 2u);
  BOOST_TEST(has(fx, kind::connect, 2));
  BOOST_TEST(has(fx, kind::connect, 3));
  BOOST_TEST(!m.reachable(2));
  // A connect in flight is not repeated.
  BOOST_TEST(m.on_tick(10).empty());
}

BOOST_AUTO_TEST_CASE(connected_peer_gets_heartbeats_on_schedule) {
  peer_monitor m{config(), {2}};
  m.on_tick(0);
  auto fx = m.on_connected(5, 2);
  BOOST_TEST(has(fx, kind::send_heartbeat, 2));
  BOOST_TEST(m.on_tick(50).empty());
  BOOST_TEST(has(m.on_tick(105), kind::send_heartbeat, 2));
  BOOST_TEST(m.on_tick(150).empty());
  BOOST_TEST(has(m.on_tick(205), kind::send_heartbeat, 2));
}

BOOST_AUTO_TEST_CASE(first_message_brings_peer_up_once) {
  peer_monitor m{config(), {2}};
  BOOST_TEST(has(m.on_message(0, 2), kind::up, 2));
  BOOST_TEST(m.reachable(2));
  BOOST_TEST(m.on_message(10, 2).empty());
}

BOOST_AUTO_TEST_CASE(silent_peer_goes_down_after_timeout_and_comes_back) {
  auto m = connected_pair();
  for (int64_t t = 100; t < 1000; t += 100) {
    m.on_message(t, 3);
    BOOST_TEST(count(m.on_tick(t), kind::down) == 0u);
  }
  m.on_message(1000, 3);
  auto fx = m.on_tick(1000);
  BOOST_TEST(has(fx, kind::down, 2));
  BOOST_TEST(!has(fx, kind::down, 3));
  BOOST_TEST(!m.reachable(2));
  BOOST_TEST(m.reachable(3));
  // Down is reported once, and heartbeats keep going to the silent peer.
  fx = m.on_tick(1100);
  BOOST_TEST(count(fx, kind::down) == 0u);
  BOOST_TEST(has(fx, kind::send_heartbeat, 2));
  BOOST_TEST(has(m.on_message(1200, 2), kind::up, 2));
  BOOST_TEST(m.reachable(2));
}

BOOST_AUTO_TEST_CASE(timeout_is_configurable) {
  auto cfg = config();
  cfg.unreachable_ms = 300;
  peer_monitor m{cfg, {2}};
  m.on_tick(0);
  m.on_message(0, 2);
  BOOST_TEST(!has(m.on_tick(299), kind::down, 2));
  BOOST_TEST(m.reachable(2));
  BOOST_TEST(has(m.on_tick(300), kind::down, 2));
}

BOOST_AUTO_TEST_CASE(lost_link_is_down_at_once_and_reconnects_with_backoff) {
  auto m = connected_pair();
  auto fx = m.on_disconnected(200, 2);
  BOOST_TEST(has(fx, kind::down, 2));
  BOOST_TEST(!m.reachable(2));
  BOOST_TEST(!has(m.on_tick(299), kind::connect, 2));
  BOOST_TEST(has(m.on_tick(300), kind::connect, 2));
  // Failures double the wait up to the cap: 200, 400, 800, 800.
  int64_t now = 300;
  for (int64_t wait : {200, 400, 800, 800}) {
    m.on_connect_failed(now, 2);
    BOOST_TEST(!has(m.on_tick(now + wait - 1), kind::connect, 2));
    BOOST_TEST(has(m.on_tick(now + wait), kind::connect, 2));
    now += wait;
  }
  // Success resets the backoff.
  m.on_connected(now, 2);
  m.on_disconnected(now + 10, 2);
  BOOST_TEST(has(m.on_tick(now + 110), kind::connect, 2));
}

BOOST_AUTO_TEST_CASE(unanswered_connect_times_out_and_retries) {
  peer_monitor m{config(), {2}};
  m.on_tick(0);
  BOOST_TEST(m.on_tick(499).empty());
  BOOST_TEST(m.on_tick(500).empty()); // gives up, waits the backoff
  BOOST_TEST(has(m.on_tick(600), kind::connect, 2));
}

BOOST_AUTO_TEST_CASE(late_connect_failure_leaves_a_working_link_alone) {
  auto m = connected_pair();
  BOOST_TEST(m.on_connect_failed(50, 2).empty());
  BOOST_TEST(has(m.on_tick(100), kind::send_heartbeat, 2));
}

BOOST_AUTO_TEST_CASE(unknown_peers_are_ignored) {
  peer_monitor m{config(), {2}};
  BOOST_TEST(m.on_message(0, 9).empty());
  BOOST_TEST(m.on_connected(0, 9).empty());
  BOOST_TEST(m.on_disconnected(0, 9).empty());
  BOOST_TEST(!m.reachable(9));
  BOOST_TEST(m.status().size() == 1u);
}

BOOST_AUTO_TEST_CASE(an_added_peer_is_watched_like_the_others) {
  auto m = connected_pair();
  BOOST_TEST(m.on_message(10, 4).empty()); // unknown yet
  m.add_peer(4);
  m.add_peer(2); // known: unchanged
  BOOST_TEST(m.reachable(2));
  BOOST_TEST(!m.reachable(4));
  BOOST_TEST(has(m.on_tick(20), kind::connect, 4));
  BOOST_TEST(has(m.on_connected(30, 4), kind::send_heartbeat, 4));
  BOOST_TEST(has(m.on_message(30, 4), kind::up, 4));
  BOOST_TEST(has(m.on_tick(1100), kind::down, 4));
}

BOOST_AUTO_TEST_CASE(status_reports_each_peer) {
  auto m = connected_pair();
  m.on_disconnected(10, 3);
  auto st = m.status();
  BOOST_TEST(st.size() == 2u);
  BOOST_TEST(st[0].id == 2u);
  BOOST_TEST(st[0].reachable);
  BOOST_TEST(st[0].connected);
  BOOST_TEST(st[0].last_heard_ms == 0);
  BOOST_TEST(st[1].id == 3u);
  BOOST_TEST(!st[1].reachable);
  BOOST_TEST(!st[1].connected);
}
