// TLS on dallyd's CAF port, with certificates made for the test by the
// openssl command: only a client whose certificate the node's authority
// signed, and that trusts that authority, gets in; a node that other hosts
// can reach refuses to serve without TLS unless told --insecure.

#define BOOST_TEST_MODULE apps_tls
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "certs.hpp"
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

/// CPU time (user and system) of process `pid` in seconds.
double cpu_seconds(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  std::istringstream rest{text.substr(text.rfind(')') + 2)};
  std::vector<std::string> fields{std::istream_iterator<std::string>{rest}, {}};
  auto ticks = std::stod(fields.at(11)) + std::stod(fields.at(12));
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// dallyctl stats against `n` with `extra` options first.
run_result stats(node& n, std::vector<std::string> extra) {
  extra.insert(extra.end(), {"--timeout", "5s", "stats"});
  return n.ctl(extra, {}, seconds{30});
}

} // namespace

BOOST_AUTO_TEST_CASE(only_clients_of_the_right_authority_get_in) {
  temp_dir dir;
  make_ca(dir, "ca");
  make_ca(dir, "other-ca");
  make_cert(dir, "node", "ca");
  make_cert(dir, "client", "ca");
  make_cert(dir, "stranger", "other-ca");
  auto args = tls_args(dir, "node", "ca");
  args.insert(args.end(), {"--handshake-timeout-ms", "3000"});
  node n{dir.str("data"), dir.str("dallyd.log"), args};
  auto ok = stats(n, tls_args(dir, "client", "ca"));
  BOOST_CHECK_MESSAGE(ok.code == 0, show(ok));
  // Without TLS.
  auto plain = stats(n, {});
  BOOST_CHECK_MESSAGE(plain.code == 3, show(plain));
  // A client that does not trust the node's authority.
  auto distrust = stats(n, tls_args(dir, "client", "other-ca"));
  BOOST_CHECK_MESSAGE(distrust.code == 3, show(distrust));
  // A client whose certificate another authority signed.
  auto stranger = stats(n, tls_args(dir, "stranger", "other-ca"));
  BOOST_CHECK_MESSAGE(stranger.code == 3, show(stranger));
  // The node still serves the right client, and schedules over TLS.
  auto again =
    n.ctl({"--tls-cert", dir.str("client.pem"), "--tls-key",
           dir.str("client.key"), "--tls-ca", dir.str("ca.pem"), "schedule",
           "--topic", "t", "--in", "1h", "--payload", "x"});
  BOOST_CHECK_MESSAGE(again.code == 0, show(again));
  BOOST_CHECK(contains(n.log(), ", TLS"));
  // The limits of the port hold for TLS connections too: one that never
  // sends anything is closed at the deadline.
  // While it waits, the node does not spin on it (CAF's TLS session would
  // ask for write events until the peer answers).
  raw_socket silent{n.port()};
  auto cpu0 = cpu_seconds(n.proc().pid());
  std::this_thread::sleep_for(seconds{2});
  auto busy = cpu_seconds(n.proc().pid()) - cpu0;
  BOOST_CHECK_MESSAGE(busy < 0.5, "dallyd used " << busy << " s of CPU in 2 s");
  BOOST_CHECK(silent.closed_by_peer(steady_clock::now() + seconds{10}));
  BOOST_CHECK(contains(n.log(), "no handshake and request within"));
  // A silent peer still connected does not hold up the shutdown.
  raw_socket last{n.port()};
  BOOST_CHECK_EQUAL(n.stop(seconds{20}), 0);
}

BOOST_AUTO_TEST_CASE(other_hosts_are_served_only_with_tls_or_insecure) {
  temp_dir dir;
  std::vector<std::string> base{DALLYD,       "--port",        "0",
                                "--data-dir", dir.str("data"), "--address",
                                "0.0.0.0"};
  auto refused = run(base, {}, seconds{60});
  BOOST_CHECK_MESSAGE(refused.code == 2, show(refused));
  BOOST_CHECK_MESSAGE(contains(refused.err, "--insecure") &&
                        contains(refused.err, "--tls-cert"),
                      show(refused));
  // Half the TLS files, or files that do not fit, are refused too.
  make_ca(dir, "ca");
  make_cert(dir, "node", "ca");
  make_cert(dir, "other", "ca");
  auto half = base;
  half.insert(half.end(), {"--tls-cert", dir.str("node.pem")});
  auto r = run(half, {}, seconds{60});
  BOOST_CHECK_MESSAGE(r.code == 2 && contains(r.err, "--tls-key"), show(r));
  auto mismatch = base;
  mismatch.insert(mismatch.end(),
                  {"--tls-cert", dir.str("node.pem"), "--tls-key",
                   dir.str("other.key"), "--tls-ca", dir.str("ca.pem")});
  r = run(mismatch, {}, seconds{60});
  BOOST_CHECK_MESSAGE(r.code == 2 && contains(r.err, "does not belong"),
                      show(r));
  // With TLS, or with --insecure, it starts.
  for (auto extra :
       {tls_args(dir, "node", "ca"), std::vector<std::string>{"--insecure"}}) {
    auto argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    child d{argv, child::options{dir.str("dallyd.log"), false, {}}};
    auto line = d.read_line(steady_clock::now() + seconds{60});
    BOOST_CHECK_MESSAGE(line && contains(*line, "listening on 0.0.0.0:"),
                        file_text(dir.str("dallyd.log")));
    d.signal(SIGTERM);
    BOOST_CHECK_MESSAGE(d.wait(steady_clock::now() + seconds{30}) == 0,
                        file_text(dir.str("dallyd.log")));
  }
}
