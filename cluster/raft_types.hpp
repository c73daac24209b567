#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "cluster/cluster_map.hpp"

namespace dally::cluster {

/// One entry of the replicated log. Indexes start at 1; index 0 is the
/// state every node starts from.
struct log_entry {
  uint64_t term = 0;
  uint64_t index = 0;
  command cmd;

  friend bool operator==(const log_entry&, const log_entry&) = default;
};

/// The state machine after the entry `last_index` (of `last_term`), which
/// replaces every entry up to it.
struct snapshot {
  uint64_t last_index = 0;
  uint64_t last_term = 0;
  cluster_map state;

  friend bool operator==(const snapshot&, const snapshot&) = default;
};

/// RequestVote (Raft figure 2).
struct vote_request {
  uint64_t term = 0;
  uint64_t last_index = 0;
  uint64_t last_term = 0;
};

struct vote_reply {
  uint64_t term = 0;
  bool granted = false;
};

/// AppendEntries (Raft figure 2); a heartbeat has no entries.
struct append_request {
  uint64_t term = 0;
  uint64_t prev_index = 0;
  uint64_t prev_term = 0;
  std::vector<log_entry> entries;
  uint64_t commit = 0;
};

/// On success `last_index` is the last index the request covered (what the
/// follower now matches); on failure the follower's last index, a hint for
/// how far back the leader must go.
struct append_reply {
  uint64_t term = 0;
  bool success = false;
  uint64_t last_index = 0;
};

/// InstallSnapshot (Raft figure 13), in one message: the map is small.
struct snapshot_request {
  uint64_t term = 0;
  snapshot snap;
};

/// `last_index`: the snapshot's last index, which the follower now holds.
struct snapshot_reply {
  uint64_t term = 0;
  uint64_t last_index = 0;
};

/// A message between two raft_nodes.
using raft_message =
  std::variant<vote_request, vote_reply, append_request, append_reply,
               snapshot_request, snapshot_reply>;

/// A message to send to node `to`.
struct envelope {
  node_id to = 0;
  raft_message msg;
};

} // namespace dally::cluster
