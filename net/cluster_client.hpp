#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "net/engine_actor.hpp"
#include "net/remote.hpp"

namespace dally::net {

/// The client address (host and engine port) of one node of a cluster.
struct seed_address {
  std::string host;
  uint16_t port = 0;

  std::string str() const { return host + ":" + std::to_string(port); }
};

/// Reads "host:port,host:port,..." (at least one; IPv6 hosts in brackets:
/// "[::1]:7400"); `invalid_request` naming the bad entry otherwise.
caf::expected<std::vector<seed_address>> parse_seeds(std::string_view text);

/// How a cluster client talks to the nodes.
struct cluster_options {
  /// For each connection (message limit, TLS).
  connect_options connect;
  /// Tries of a request that may be retried, the first one included.
  uint32_t attempts = 6;
  /// The n-th retry waits n times this long, giving the cluster time to
  /// commit and spread a new map.
  uint32_t retry_delay_ms = 100;
  /// How long a node may take to tell its shard map.
  uint32_t map_timeout_ms = 5000;
};

/// Connects to every seed it can reach (each one's engine, as
/// `connect_engine` does), learns each one's node id and the newest shard
/// map among them, and returns a local stand-in that speaks
/// `engine_actor` for the whole cluster:
/// - A request about a task (get, revoke, reschedule, kick, ack, nack,
///   touch) goes straight to the node that owns the task's shard when the
///   client holds a connection to it, otherwise to any live node, which
///   forwards it. A new task with an idempotency key goes to its key's
///   owner; one without, round the live nodes (each puts it in one of its
///   own shards). Stats are those of one live node; dead letters and the
///   cluster map any node answers for the whole cluster.
/// - When a node refuses a request as not its own (the error names a map
///   epoch), has no map yet, or a shard is opening or restarting, the
///   client refreshes its map from every node it reaches (and tries the
///   seeds it has no connection to), then sends the request again, up to
///   `attempts` tries. A request that may have been done (its node's
///   connection dropped, or a forwarded request went unanswered) is sent
///   again only if repeating it is harmless: reads (get, stats, dead
///   letters, cluster map), schedules and batches whose every task has an
///   idempotency key, and subscriptions. Everything else fails with the
///   node's error; a schedule without a key is never sent twice.
/// - A subscription is made at one node, whose engine repeats it at every
///   other node. If that node's connection drops, the client subscribes
///   the same consumers again through another live node.
/// Fails with `unavailable` listing each seed's error when none answers.
/// Stop the stand-in with an exit message when done.
caf::expected<engine_actor> connect_cluster(caf::actor_system& sys,
                                            std::vector<seed_address> seeds,
                                            cluster_options opts = {});

} // namespace dally::net
