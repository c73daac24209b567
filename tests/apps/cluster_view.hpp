#pragma once

// What the multi-process cluster suites and dally-failover-bench read: a
// free port for a seed, and a node's answer to `dallyctl cluster status
// --json`. No Boost.Test here: the bench includes it too.

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dally::apps::test {

/// A port on 127.0.0.1 that was free a moment ago; throws if there is none.
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if (::bind(fd, sa, sizeof(addr)) != 0 || ::getsockname(fd, sa, &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// The number after `"key":` in `json` from `pos`, or -1.
inline int64_t json_number(const std::string& json, const std::string& key,
                           size_t pos = 0) {
  auto i = json.find("\"" + key + "\":", pos);
  if (i == std::string::npos)
    return -1;
  return std::stoll(json.substr(i + key.size() + 3));
}

/// One node's answer to `dallyctl cluster status --json`.
struct view {
  /// An answer that names the node, its coordinator, term and epoch, and at
  /// least three nodes.
  bool ok = false;
  int64_t self = 0;
  int64_t coordinator = 0;
  int64_t epoch = 0;
  int64_t shard_count = 0;
  int64_t term = 0;
  /// The term of the newest entry the node knows committed.
  int64_t commit_term = 0;
  /// By node id: reachable, voter (or learner), and shards owned.
  std::map<int64_t, bool> reachable;
  std::map<int64_t, bool> voter;
  std::map<int64_t, int64_t> shards;
  std::string text;

  /// This node coordinates and has committed an entry of its own term.
  bool committing() const {
    return ok && coordinator == self && commit_term == term;
  }
};

/// The view in `json`; not ok for "" (a failed dallyctl).
inline view parse_view(const std::string& json) {
  view v;
  v.text = json;
  v.self = json_number(json, "self");
  v.coordinator = json_number(json, "coordinator");
  v.epoch = json_number(json, "epoch");
  v.shard_count = json_number(json, "shard_count");
  v.term = json_number(json, "term");
  v.commit_term = json_number(json, "commit_term");
  for (auto i = json.find("{\"id\":"); i != std::string::npos;
       i = json.find("{\"id\":", i + 1)) {
    auto id = json_number(json, "id", i);
    v.reachable[id] =
      json.find("\"reachable\":true", i) == json.find("\"reachable\":", i);
    v.voter[id] = json.find("\"voter\":true", i) == json.find("\"voter\":", i);
    v.shards[id] = json_number(json, "shards", i);
  }
  v.ok = v.self > 0 && v.coordinator >= 0 && v.epoch >= 0 &&
         v.commit_term >= 0 && v.reachable.size() >= 3;
  return v;
}

} // namespace dally::apps::test
