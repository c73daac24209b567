#pragma once

// What the multi-process cluster suites read: a free port for a seed, and a
// node's answer to `dallyctl cluster status --json`.

#include <cstdint>
#include <map>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

namespace dally::apps::test {

/// A port on 127.0.0.1 that was free a moment ago.
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  BOOST_REQUIRE(::bind(fd, sa, sizeof(addr)) == 0);
  BOOST_REQUIRE(::getsockname(fd, sa, &len) == 0);
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
  bool ok = false;
  int64_t coordinator = 0;
  int64_t epoch = 0;
  int64_t shard_count = 0;
  int64_t term = 0;
  /// The term of the newest entry the node knows committed.
  int64_t commit_term = 0;
  /// By node id: reachable, and shards owned.
  std::map<int64_t, bool> reachable;
  std::map<int64_t, int64_t> shards;
  std::string text;
};

inline view parse_view(const std::string& json) {
  view v;
  v.text = json;
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
    v.shards[id] = json_number(json, "shards", i);
  }
  v.ok = v.coordinator >= 0 && v.epoch >= 0 && v.reachable.size() == 3;
  return v;
}

} // namespace dally::apps::test
