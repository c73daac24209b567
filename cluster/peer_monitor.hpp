#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/placement.hpp"

namespace dally::cluster {

using core::node_id;

/// Timing of the links between cluster nodes, all on the monotonic clock.
struct peer_monitor_config {
  /// How often a heartbeat goes to each connected peer.
  int64_t heartbeat_ms = 200;
  /// A peer heard from neither by heartbeat nor by any other message for
  /// this long is unreachable.
  int64_t unreachable_ms = 1000;
  /// The wait before the first reconnect after a failure or a lost link;
  /// each further failure doubles it, up to `reconnect_max_ms`.
  int64_t reconnect_min_ms = 100;
  int64_t reconnect_max_ms = 2000;
  /// A connect attempt without an answer for this long counts as failed.
  int64_t connect_timeout_ms = 2000;
};

/// What the monitor asks of its shell.
struct peer_effect {
  enum class kind : uint8_t {
    /// Send a heartbeat to `peer`.
    send_heartbeat,
    /// Start connecting to `peer` (answer with on_connected or
    /// on_connect_failed).
    connect,
    /// `peer` is reachable again (or for the first time).
    up,
    /// `peer` is unreachable.
    down,
  };
  kind what = kind::send_heartbeat;
  node_id peer = 0;

  friend bool operator==(const peer_effect&, const peer_effect&) = default;
};

/// What the monitor knows of one peer, for status reports.
struct peer_status {
  node_id id = 0;
  bool reachable = false;
  bool connected = false;
  /// When the peer was last heard from; -1 for never.
  int64_t last_heard_ms = -1;
};

/// The failure detector of a cluster node: it keeps a link to each peer,
/// sends heartbeats over it, declares a peer unreachable when nothing has
/// come from it for `unreachable_ms`, and reconnects lost links with capped
/// exponential backoff. It reads no clock: the caller passes `now` (the
/// monotonic clock) and the events, and carries out the effects returned.
class peer_monitor {
public:
  /// Every peer starts disconnected and unreachable; the first tick
  /// connects to each.
  peer_monitor(peer_monitor_config cfg, const std::vector<node_id>& peers);

  /// Heartbeats due, connects due, peers gone silent.
  std::vector<peer_effect> on_tick(int64_t now_ms);

  /// The link to `peer` works: heartbeats start at once.
  std::vector<peer_effect> on_connected(int64_t now_ms, node_id peer);

  /// A connect attempt failed; the next one waits for the backoff.
  std::vector<peer_effect> on_connect_failed(int64_t now_ms, node_id peer);

  /// Anything arrived from `peer` (a heartbeat or any other message).
  std::vector<peer_effect> on_message(int64_t now_ms, node_id peer);

  /// The link to `peer` is gone (its handle went down): `peer` is
  /// unreachable until heard from again, and a reconnect follows the
  /// backoff.
  std::vector<peer_effect> on_disconnected(int64_t now_ms, node_id peer);

  /// Watches `peer` from now on, a node that joined after the monitor was
  /// made: disconnected and unreachable until it connects. A known peer:
  /// nothing changes.
  void add_peer(node_id peer);

  /// Whether `peer` was heard from within `unreachable_ms`; false for an
  /// unknown node.
  bool reachable(node_id peer) const;

  /// Every peer, by id.
  std::vector<peer_status> status() const;

  const peer_monitor_config& config() const noexcept { return cfg_; }

private:
  enum class link : uint8_t { disconnected, connecting, connected };

  struct peer_state {
    link state = link::disconnected;
    bool reachable = false;
    int64_t last_heard_ms = -1;
    /// disconnected: when to connect; connecting: when to give up;
    /// connected: when the next heartbeat goes.
    int64_t due_ms = 0;
    int64_t backoff_ms = 0;
  };

  void tick_peer(int64_t now_ms, node_id id, peer_state& p,
                 std::vector<peer_effect>& fx) const;
  /// Back to disconnected; the next connect waits for the grown backoff.
  void lose_link(int64_t now_ms, peer_state& p) const;

  peer_monitor_config cfg_;
  std::map<node_id, peer_state> peers_;
};

} // namespace dally::cluster
