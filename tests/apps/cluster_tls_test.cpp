#define BOOST_TEST_MODULE apps_cluster_tls
#include <boost/test/unit_test.hpp>

// Three dallyd with TLS on their cluster ports, with certificates made for
// the test by the openssl command: they agree on one map; dallyctl reads
// the cluster status only with a certificate of the cluster's authority; a
// node started without TLS is never reachable for the others, and joins
// once restarted with TLS.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "certs.hpp"
#include "cluster_view.hpp"
#include "node.hpp"

using namespace dally::apps::test;
using std::chrono::seconds;

namespace {

std::string show(const run_result& r) {
  return "exit " + std::to_string(r.code) + ", stdout: [" + r.out +
         "], stderr: [" + r.err + "]";
}

class tls_cluster {
public:
  tls_cluster() {
    make_ca(dir_, "ca");
    make_ca(dir_, "other-ca");
    make_cert(dir_, "node", "ca");
    make_cert(dir_, "client", "ca");
    make_cert(dir_, "stranger", "other-ca");
    for (int id = 1; id <= 3; ++id)
      ports_[id] = free_port();
    for (auto [id, port] : ports_)
      seeds_ += (seeds_.empty() ? "" : ",") + std::to_string(id) +
                "@127.0.0.1:" + std::to_string(port);
  }

  void start(int id, bool tls) {
    auto name = "n" + std::to_string(id);
    std::vector<std::string> args{"--node-id",        std::to_string(id),
                                  "--cluster-seeds",  seeds_,
                                  "--cluster-shards", "16",
                                  "--heartbeat-ms",   "100",
                                  "--unreachable-ms", "1000"};
    if (tls)
      for (auto& a : tls_args(dir_, "node", "ca"))
        args.push_back(a);
    nodes_[id].reset();
    nodes_[id] =
      std::make_unique<node>(dir_.str(name), dir_.str(name + ".log"), args);
  }

  node& at(int id) { return *nodes_.at(id); }

  /// `dallyctl cluster status --json` against node `id` with `extra`.
  run_result status_run(int id, const std::vector<std::string>& extra) {
    std::vector<std::string> argv{DALLYCTL,    "--json",
                                  "--timeout", "5s",
                                  "--port",    std::to_string(ports_.at(id))};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"cluster", "status"});
    return run(argv, {}, seconds{20});
  }

  /// Node `id`'s view, asked with the client certificate (or without TLS).
  view status(int id, bool tls = true) {
    auto r = status_run(id, tls ? tls_args(dir_, "client", "ca")
                                : std::vector<std::string>{});
    return r.code == 0 ? parse_view(r.out) : view{};
  }

  /// Asks each of `ids` until `good` holds for all answers at once, for at
  /// most `limit`; the answers of the last round.
  std::map<int, view> wait_for(const std::vector<int>& ids,
                               const std::function<bool(const view&)>& good,
                               seconds limit) {
    auto deadline = steady_clock::now() + limit;
    std::map<int, view> views;
    for (;;) {
      bool all = true;
      for (int id : ids) {
        views[id] = status(id);
        all = all && views[id].ok && good(views[id]);
      }
      if (all || steady_clock::now() >= deadline)
        return views;
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
    }
  }

  const temp_dir& dir() const { return dir_; }

  std::string logs() {
    std::string out;
    for (auto& [id, n] : nodes_)
      out += "--- node " + std::to_string(id) + "\n" + n->log();
    return out;
  }

private:
  temp_dir dir_;
  std::map<int, uint16_t> ports_;
  std::string seeds_;
  std::map<int, std::unique_ptr<node>> nodes_;
};

/// A coordinator and a map among nodes 1 and 2, and node 3 unreachable.
bool two_of_three(const view& v) {
  return v.coordinator > 0 && v.coordinator != 3 && v.epoch >= 1 &&
         v.reachable.at(1) && v.reachable.at(2) && !v.reachable.at(3);
}

bool all_three(const view& v) {
  return v.coordinator > 0 && v.epoch >= 1 && v.shard_count == 16 &&
         v.reachable.at(1) && v.reachable.at(2) && v.reachable.at(3);
}

bool agree(const std::map<int, view>& views) {
  const auto& first = views.begin()->second;
  for (const auto& [id, v] : views)
    if (!v.ok || v.coordinator != first.coordinator || v.epoch != first.epoch ||
        v.shards != first.shards)
      return false;
  return true;
}

} // namespace

BOOST_AUTO_TEST_CASE(tls_nodes_agree_and_keep_out_the_rest) {
  tls_cluster c;
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
