// Peers that try to make a dallyd allocate what they never send, or hold
// its connection slots without working, over 127.0.0.1, while dallyctl
// keeps being served. Scaled down from the attacks of issue 52 (133
// connections claiming 60 MiB each, 500 such connections closed at once,
// 1,024 heartbeat squatters), enough to cross each limit.

#define BOOST_TEST_MODULE apps_hostile_clients
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "node.hpp"
#include "raw_peer.hpp"

using namespace dally::apps::test;
using std::chrono::seconds;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string show(const run_result& r) {
  return "exit " + std::to_string(r.code) + ", stdout: [" + r.out +
         "], stderr: [" + r.err + "]";
}

/// Resident memory of process `pid` in KiB (VmRSS), 0 if unknown.
uint64_t rss_kib(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoull(line.substr(6));
  return 0;
}

/// A bare BASP heartbeat header (operation 6, no payload).
std::string basp_heartbeat() {
  std::string hdr(32, '\0');
  hdr[0] = 0x06;
  return hdr;
}

/// A socket connected to 127.0.0.1:port, or -1. Without Boost.Test
/// checks, for threads of the test.
int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (fd >= 0 &&
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    fd = -1;
  }
  return fd;
}

/// Sends all of `bytes` on `fd`; false once the peer has closed.
bool send_bytes(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

constexpr uint32_t claim_bytes = 60u << 20;

/// dallyctl stats against `n` must answer within 15 s.
void require_served(node& n, const std::string& when) {
  auto r = n.ctl({"stats"}, {}, seconds{15});
  BOOST_REQUIRE_MESSAGE(r.code == 0, when << ": " << show(r));
}

} // namespace

BOOST_AUTO_TEST_CASE(claims_cost_only_the_bytes_that_arrive) {
  temp_dir dir;
  node n{dir.str("data"),
         dir.str("dallyd.log"),
         {"--handshake-timeout-ms", "60000", "--max-partial-bytes",
          std::to_string(64u << 20)}};
  require_served(n, "before");
  auto base_kib = rss_kib(n.proc().pid());
  // 24 connections each claim a 60 MiB message (under the 64 MiB cap)
  // and send nothing more: 1.4 GiB if sized up front.
  std::vector<std::unique_ptr<raw_socket>> claims;
  for (int i = 0; i < 24; ++i) {
    claims.push_back(std::make_unique<raw_socket>(n.port()));
    BOOST_REQUIRE(claims.back()->send_all(basp_client_handshake(claim_bytes)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds{500});
  require_served(n, "with 24 claims open");
  auto claimed_kib = rss_kib(n.proc().pid());
  BOOST_CHECK_MESSAGE(claimed_kib < base_kib + 128 * 1024,
                      "RSS grew from " << base_kib << " to " << claimed_kib
                                       << " KiB");
  // Three connections send 30 MiB of their claimed 60: together above the
  // 64 MiB budget of partial messages, so the third is closed.
  std::string chunk(30u << 20, '\0');
  std::vector<std::unique_ptr<raw_socket>> senders;
  for (int i = 0; i < 3; ++i) {
    senders.push_back(std::make_unique<raw_socket>(n.port()));
    senders.back()->send_all(basp_client_handshake(claim_bytes));
    senders.back()->send_all(chunk);
  }
  BOOST_CHECK(senders[2]->closed_by_peer(steady_clock::now() + seconds{10}));
  require_served(n, "with the budget of partial messages spent");
  auto sent_kib = rss_kib(n.proc().pid());
  BOOST_CHECK_MESSAGE(sent_kib < base_kib + 200 * 1024,
                      "RSS grew from " << base_kib << " to " << sent_kib
                                       << " KiB");
  BOOST_CHECK_MESSAGE(contains(n.log(), "--max-partial-bytes"), n.log());
  BOOST_CHECK_EQUAL(n.stop(), 0);
}

BOOST_AUTO_TEST_CASE(claims_closed_at_once_do_not_stall_the_node) {
  temp_dir dir;
  node n{dir.str("data"), dir.str("dallyd.log")};
  require_served(n, "before");
  auto t0 = steady_clock::now();
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i) {
      raw_socket s{n.port()};
      s.send_all(basp_client_handshake(claim_bytes));
    }
    require_served(n, "after " + std::to_string(100 * (round + 1)) +
                        " claims closed at once");
  }
  auto took = steady_clock::now() - t0;
  BOOST_CHECK_MESSAGE(took < seconds{20},
                      "300 claims and 3 requests took "
                        << std::chrono::duration_cast<seconds>(took).count()
                        << " s");
  BOOST_CHECK_MESSAGE(peak_rss_kib(n.proc().pid()) < 1024 * 1024,
                      "peak RSS " << peak_rss_kib(n.proc().pid()) << " KiB");
  BOOST_CHECK_EQUAL(n.stop(), 0);
}

BOOST_AUTO_TEST_CASE(heartbeat_squatters_do_not_hold_the_slots) {
  temp_dir dir;
  node n{dir.str("data"),
         dir.str("dallyd.log"),
         {"--max-connections", "32", "--max-pending-connections", "16",
          "--handshake-timeout-ms", "2000"}};
  require_served(n, "before");
  // 40 squatters, more than the node's slots, each sending a heartbeat
  // every 2 s and coming back at once when closed.
  std::atomic<bool> stop{false};
  std::atomic<int> reconnects{0};
  std::thread squatters{[&] {
    std::vector<int> socks(40, -1);
    while (!stop) {
      for (auto& fd : socks) {
        if (fd >= 0 && !send_bytes(fd, basp_heartbeat())) {
          ::close(fd);
          fd = -1;
          ++reconnects;
        }
        if (fd < 0 && (fd = connect_to(n.port())) >= 0)
          send_bytes(fd, basp_heartbeat());
      }
      std::this_thread::sleep_for(std::chrono::seconds{2});
    }
    for (auto fd : socks)
      if (fd >= 0)
        ::close(fd);
  }};
  auto t0 = steady_clock::now();
  int served = 0;
  while (steady_clock::now() - t0 < seconds{8}) {
    auto r = n.ctl({"stats"}, {}, seconds{15});
    BOOST_CHECK_MESSAGE(r.code == 0, show(r));
    served += r.code == 0 ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds{300});
  }
  stop = true;
  squatters.join();
  BOOST_TEST_MESSAGE("served " << served << " requests; squatters came back "
                               << reconnects << " times");
  BOOST_CHECK(served > 0);
  BOOST_CHECK(reconnects > 0);
  auto log = n.log();
  BOOST_CHECK_MESSAGE(
    contains(log, "no handshake and request within --handshake-timeout-ms") ||
      contains(log, "--max-pending-connections"),
    log);
  BOOST_CHECK_EQUAL(n.stop(), 0);
}

BOOST_AUTO_TEST_CASE(silent_and_idle_connections_are_timed_out) {
  temp_dir dir;
  node n{dir.str("data"),
         dir.str("dallyd.log"),
         {"--handshake-timeout-ms", "1000", "--idle-timeout-ms", "3000"}};
  // A connection that never sends anything.
  raw_socket silent{n.port()};
  auto t0 = steady_clock::now();
  BOOST_CHECK(silent.closed_by_peer(t0 + seconds{5}));
  BOOST_CHECK(steady_clock::now() - t0 >= std::chrono::milliseconds{900});
  BOOST_CHECK_MESSAGE(
    contains(n.log(), "no handshake and request within --handshake-timeout-ms"),
    n.log());
  // A consumer that subscribed and then only idles (heartbeats do not
  // count) is closed after the idle timeout; its dallyctl ends.
  auto consumer = n.spawn_ctl({"consume", "quiet"}, dir.str("consumer.err"));
  auto code = consumer->wait(steady_clock::now() + seconds{20});
  BOOST_CHECK_MESSAGE(code && *code != 0, "consume did not end: " << file_text(
                                            dir.str("consumer.err")));
  BOOST_CHECK_MESSAGE(contains(n.log(), "no request within --idle-timeout-ms"),
                      n.log());
  // A client that works is served.
  require_served(n, "after the timeouts");
  BOOST_CHECK_EQUAL(n.stop(), 0);
}
