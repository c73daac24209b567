#define BOOST_TEST_MODULE apps_cluster_tls
#include <boost/test/unit_test.hpp>

// Three dallyd with TLS on their cluster ports, with certificates made for
// the test by the openssl command: they agree on one map; dallyctl reads
// the cluster status only with a certificate of the cluster's authority; a
// node started without TLS is never reachable for the others, and joins
// once restarted with TLS.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster_fixture.hpp"

using namespace dally::apps::test;
using std::chrono::seconds;

namespace {

std::string show(const run_result& r) {
  return "exit " + std::to_string(r.code) + ", stdout: [" + r.out +
         "], stderr: [" + r.err + "]";
}

/// A coordinator and a map among nodes 1 and 2, and node 3 unreachable.
bool two_of_three(const view& v) {
  return v.coordinator > 0 && v.coordinator != 3 && v.epoch >= 1 &&
         v.reachable.at(1) && v.reachable.at(2) && !v.reachable.at(3);
}

bool all_three(const view& v) {
  return v.coordinator > 0 && v.epoch >= 1 && v.shard_count == 16 &&
         v.reachable.at(1) && v.reachable.at(2) && v.reachable.at(3);
}

} // namespace

BOOST_AUTO_TEST_CASE(tls_nodes_agree_and_keep_out_the_rest) {
  dallyd_cluster c{{.voters = 3, .shards = 16, .tls = true}};
  make_ca(c.dir(), "other-ca");
  make_cert(c.dir(), "stranger", "other-ca");
  c.start(1, true);
  c.start(2, true);
  c.start(3, false);
  // Nodes 1 and 2 form a majority; node 3, without TLS, never becomes
  // reachable for them, however long they try (a few of their redials).
  auto views = c.wait_for({1, 2}, two_of_three, seconds{30});
  BOOST_REQUIRE_MESSAGE(agree(views) && two_of_three(views[1]),
                        views[1].text + "\n" + c.logs());
  std::this_thread::sleep_for(seconds{3});
  for (int id : {1, 2}) {
    auto v = c.status(id);
    BOOST_CHECK_MESSAGE(v.ok && !v.reachable.at(3), v.text);
  }
  // Node 3 itself hears from nobody (asked without TLS, as it speaks).
  auto lone = c.status(3, false);
  BOOST_CHECK_MESSAGE(lone.ok && !lone.reachable.at(1) &&
                        !lone.reachable.at(2) && lone.epoch == 0,
                      lone.text);
  // dallyctl reads the status of a TLS node only with a certificate of
  // the cluster's authority, trusting that authority.
  auto plain = c.status_run(1, {});
  BOOST_CHECK_MESSAGE(plain.code == 3, show(plain));
  auto distrust = c.status_run(1, tls_args(c.dir(), "client", "other-ca"));
  BOOST_CHECK_MESSAGE(distrust.code == 3, show(distrust));
  auto stranger = c.status_run(1, tls_args(c.dir(), "stranger", "other-ca"));
  BOOST_CHECK_MESSAGE(stranger.code == 3, show(stranger));
  auto ok = c.status_run(1, tls_args(c.dir(), "client", "ca"));
  BOOST_CHECK_MESSAGE(ok.code == 0, show(ok));
  // Restarted with TLS, node 3 joins, and all three agree.
  auto code = c.at(3).stop();
  BOOST_CHECK_MESSAGE(code == 0, "node 3 exit " << code << "\n"
                                                << c.at(3).log());
  c.start(3, true);
  views = c.wait_for({1, 2, 3}, all_three, seconds{30});
  BOOST_REQUIRE_MESSAGE(agree(views) && all_three(views[1]),
                        views[1].text + "\n" + c.logs());
  BOOST_CHECK(c.at(1).log().find("cluster: node 1 listening on 127.0.0.1:") !=
              std::string::npos);
  for (int id = 1; id <= 3; ++id) {
    auto code = c.at(id).stop();
    BOOST_CHECK_MESSAGE(code == 0, "node " << id << " exit " << code << "\n"
                                           << c.at(id).log());
  }
}

BOOST_AUTO_TEST_CASE(a_cluster_address_for_other_hosts_needs_tls) {
  temp_dir dir;
  auto port = std::to_string(free_port());
  std::vector<std::string> argv{DALLYD,
                                "--port",
                                "0",
                                "--data-dir",
                                dir.str("data"),
                                "--node-id",
                                "1",
                                "--cluster-seeds",
                                "1@0.0.0.0:" + port +
                                  ",2@127.0.0.1:1,3@127.0.0.1:2"};
  auto r = run(argv, {}, seconds{60});
  BOOST_CHECK_MESSAGE(
    r.code == 2 && r.err.find("cluster address 0.0.0.0") != std::string::npos &&
      r.err.find("--insecure") != std::string::npos,
    show(r));
}
