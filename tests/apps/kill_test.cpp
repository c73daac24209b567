#define BOOST_TEST_MODULE apps_kill
#include <boost/test/unit_test.hpp>

// kill -9 of dallyd under load: a load client schedules tasks due within a
// few seconds and records every id the node acknowledged; dallyd is
// SIGKILLed mid-stream (twice: once under load, once again right after the
// restart, while it recovers and loads more), then a consumer on the
// restarted node must receive every acknowledged id, none before its due
// time.

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "node.hpp"

#ifndef DALLY_LOAD_CLIENT
#error "DALLY_LOAD_CLIENT must name the dally-load-client binary"
#endif

using namespace dally::apps::test;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

/// Acknowledged id -> the time its client asked for.
using acked_map = std::map<uint64_t, int64_t>;

/// Runs the load client against `n`, SIGKILLs the node `kill_after` after
/// the first acknowledgment (whatever request is under way then), and
/// collects every acknowledged id. Returns how many were acknowledged in
/// this round.
size_t load_and_kill(node& n, const temp_dir& dir, acked_map& acked,
                     milliseconds kill_after, uint64_t seed) {
  child load{{DALLY_LOAD_CLIENT, "--port", std::to_string(n.port()), "--topic",
              "load", "--batch", "8", "--min-delay-ms", "1000",
              "--max-delay-ms", "4000", "--seed", std::to_string(seed)},
             child::options{dir.str("load.err"), false, {}}};
  size_t round = 0;
  auto take = [&](const std::string& line) {
    auto space = line.find(' ');
    BOOST_REQUIRE_MESSAGE(space != std::string::npos, "bad line " << line);
    acked[std::stoull(line.substr(0, space))] =
      std::stoll(line.substr(space + 1));
    ++round;
  };
  if (auto first = load.read_line(steady_clock::now() + seconds{20}))
    take(*first);
  auto kill_at = steady_clock::now() + kill_after;
  while (auto line = load.read_line(kill_at))
    take(*line);
  n.kill();
  // Lines already written were acknowledged before the kill.
  auto drain_deadline = steady_clock::now() + seconds{20};
  while (auto line = load.read_line(drain_deadline))
    take(*line);
  auto code = load.wait(steady_clock::now() + seconds{5});
  if (!code)
    load.kill_now();
  BOOST_TEST_MESSAGE("round acknowledged " << round << " tasks");
  return round;
}

} // namespace

BOOST_AUTO_TEST_CASE(acknowledged_tasks_survive_kill_9) {
  temp_dir dir;
  auto data = dir.str("data");
  acked_map acked;
  auto t0 = steady_clock::now();
  {
    node n{data, dir.str("dallyd1.log")};
    auto round = load_and_kill(n, dir, acked, milliseconds{2500}, 1);
    BOOST_REQUIRE_MESSAGE(round > 0, "nothing acknowledged; log:\n" << n.log());
  }
  {
    // Killed again shortly after the restart, while it fires the first
    // round's tasks (many of them overdue by now) and takes new ones.
    node n{data, dir.str("dallyd2.log")};
    load_and_kill(n, dir, acked, milliseconds{700}, 2);
  }
  node n{data, dir.str("dallyd3.log")};
  auto consumer =
    n.spawn_ctl({"--json", "consume", "load"}, dir.str("consume.err"));
  std::set<uint64_t> remaining;
  for (auto& [id, due] : acked)
    remaining.insert(id);
  std::set<uint64_t> delivered;
  size_t early = 0;
  size_t lines = 0;
  auto deadline = steady_clock::now() + seconds{40};
  while (!remaining.empty()) {
    auto line = consumer->read_line(deadline);
    if (!line)
      break;
    ++lines;
    auto id = static_cast<uint64_t>(json_int(*line, "id"));
    auto due = json_int(*line, "due_ms");
    auto at = json_int(*line, "delivered_ms");
    // Judged by the time the client asked for, not the one the node
    // reports (for a task whose acknowledgment the client never saw, that
    // is all there is).
    auto asked = due;
    if (auto i = acked.find(id); i != acked.end()) {
      asked = i->second;
      BOOST_CHECK_MESSAGE(due == asked, "due time " << due << ", asked for "
                                                    << asked << ": " << *line);
    }
    if (at < asked) {
      ++early;
      BOOST_ERROR("delivered early: " << *line << " (asked for " << asked
                                      << ")");
    }
    delivered.insert(id);
    remaining.erase(id);
  }
  size_t missing = remaining.size();
  size_t shown = 0;
  for (auto id : remaining)
    if (++shown <= 10)
      BOOST_ERROR("acknowledged task " << id << " (asked for " << acked[id]
                                       << ") was never delivered");
  BOOST_TEST_MESSAGE("acknowledged " << acked.size() << ", delivered "
                                     << delivered.size() << " distinct in "
                                     << lines << " deliveries, missing "
                                     << missing << ", early " << early);
  BOOST_CHECK_EQUAL(missing, 0u);
  BOOST_CHECK_EQUAL(early, 0u);
  consumer->signal(SIGTERM);
  BOOST_CHECK_EQUAL(
    consumer->wait(steady_clock::now() + seconds{20}).value_or(-1), 0);
  BOOST_CHECK_EQUAL(n.stop(), 0);
  if (missing > 0)
    BOOST_TEST_MESSAGE("last dallyd log:\n" << n.log());
  BOOST_CHECK(steady_clock::now() - t0 < seconds{60});
}
