#pragma once

// A cluster of dallyd processes on 127.0.0.1 for the multi-process cluster
// suites: voters named by --cluster-seeds, learners outside the seeds, TLS
// on the cluster links as an option; each node's `cluster status`, and
// waiting until the nodes agree.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "certs.hpp"
#include "cluster_view.hpp"
#include "node.hpp"

namespace dally::apps::test {

/// Whether every answer is ok and names the same coordinator and map.
inline bool agree(const std::map<int, view>& views) {
  const auto& first = views.begin()->second;
  for (const auto& [id, v] : views)
    if (!v.ok || v.coordinator != first.coordinator || v.epoch != first.epoch ||
        v.shards != first.shards)
      return false;
  return true;
}

/// Whether the answers agree and `good` holds for each.
inline bool agree_on(const std::map<int, view>& views,
                     const std::function<bool(const view&)>& good) {
  if (!agree(views))
    return false;
  for (const auto& [id, v] : views)
    if (!good(v))
      return false;
  return true;
}

struct cluster_options {
  /// Nodes 1 to `voters` are the seeds; the `learners` after them listen on
  /// a cluster address of their own and join as learners.
  int voters = 3;
  int learners = 0;
  uint32_t shards = 16;
  /// TLS on the cluster links: an authority `ca` with certificates `node`
  /// (for dallyd) and `client` (for dallyctl) in dir().
  bool tls = false;
};

class dallyd_cluster {
public:
  /// Picks the ports (and makes the certificates); starts no node.
  explicit dallyd_cluster(cluster_options opt) : opt_(opt) {
    if (opt_.tls) {
      make_ca(dir_, "ca");
      make_cert(dir_, "node", "ca");
      make_cert(dir_, "client", "ca");
    }
    for (int id = 1; id <= opt_.voters + opt_.learners; ++id)
      ports_[id] = free_port();
    for (int id = 1; id <= opt_.voters; ++id)
      seeds_ += (seeds_.empty() ? "" : ",") + std::to_string(id) +
                "@127.0.0.1:" + std::to_string(ports_[id]);
  }

  void start_all() {
    for (auto [id, port] : ports_)
      start(id);
  }

  /// Starts node `id` on its data directory (again, after a stop or a
  /// kill); with TLS if the cluster has it, unless `tls` is false.
  void start(int id, bool tls = true) {
    auto name = "n" + std::to_string(id);
    std::vector<std::string> args{
      "--node-id",        std::to_string(id),
      "--cluster-seeds",  seeds_,
      "--cluster-shards", std::to_string(opt_.shards),
      "--heartbeat-ms",   "100",
      "--unreachable-ms", "1000"};
    if (id > opt_.voters) {
      args.emplace_back("--cluster-listen");
      args.push_back("127.0.0.1:" + std::to_string(ports_.at(id)));
    }
    if (opt_.tls && tls)
      for (auto& a : tls_args(dir_, "node", "ca"))
        args.push_back(a);
    nodes_[id].reset();
    nodes_[id] =
      std::make_unique<node>(dir_.str(name), dir_.str(name + ".log"), args);
  }

  node& at(int id) { return *nodes_.at(id); }

  /// Node `id`'s cluster address.
  std::string address(int id) const {
    return "127.0.0.1:" + std::to_string(ports_.at(id));
  }

  const temp_dir& dir() const { return dir_; }

  /// `dallyctl cluster status` (with `json`, `--json`) against node `id`,
  /// with the options `extra`.
  run_result status_run(int id, const std::vector<std::string>& extra,
                        bool json = true) {
    std::vector<std::string> argv{DALLYCTL, "--timeout", "5s", "--port",
                                  std::to_string(ports_.at(id))};
    if (json)
      argv.emplace_back("--json");
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"cluster", "status"});
    return run(argv, {}, std::chrono::seconds{20});
  }

  /// Node `id`'s view; asked with the client certificate if the cluster
  /// has TLS, unless `tls` is false.
  /// A dallyctl that failed (timed out on a loaded machine) is run again,
  /// three times in all; the last failure is the view's text.
  view status(int id, bool tls = true) {
    run_result r;
    for (int attempt = 0; attempt < 3; ++attempt) {
      r = status_run(id, opt_.tls && tls ? tls_args(dir_, "client", "ca")
                                         : std::vector<std::string>{});
      if (r.code == 0)
        return parse_view(r.out);
    }
    view failed;
    failed.text = "dallyctl exit " + std::to_string(r.code) + ": " + r.err;
    return failed;
  }

  /// Asks each of `ids` until `good` holds for all answers at once and
  /// they agree (a new election may come between two answers), for at most
  /// `limit`; the answers of the last round (see `agree_on`).
  std::map<int, view> wait_for(const std::vector<int>& ids,
                               const std::function<bool(const view&)>& good,
                               std::chrono::seconds limit) {
    auto deadline = steady_clock::now() + limit;
    std::map<int, view> views;
    for (;;) {
      bool all = true;
      for (int id : ids) {
        views[id] = status(id);
        all = all && views[id].ok && good(views[id]);
      }
      if ((all && agree(views)) || steady_clock::now() >= deadline)
        return views;
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
    }
  }

  /// Every node's log, for a failure message.
  std::string logs() {
    std::string out;
    for (auto& [id, n] : nodes_)
      out += "--- node " + std::to_string(id) + "\n" + n->log();
    return out;
  }

private:
  cluster_options opt_;
  temp_dir dir_;
  std::map<int, uint16_t> ports_;
  std::string seeds_;
  std::map<int, std::unique_ptr<node>> nodes_;
};

} // namespace dally::apps::test
