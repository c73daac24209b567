#pragma once

#include "cluster/raft_types.hpp"
#include "core/result.hpp"
#include "proto/dally_cluster.pb.h"

namespace dally::storage {

// The codec between the coordinator's types (cluster/, which knows no
// Protobuf) and their wire form in proto/dally_cluster.proto, so that net/ and
// the actor shell carry them as protobuf messages. Decoding checks what
// raft_node relies on and refuses the rest with invalid_request and a
// message that names the field; nothing is guessed.

/// The map as a ClusterMap.
void to_proto(const cluster::cluster_map& map, v1::ClusterMap& out);

/// Errors (invalid_request): a node id of 0 or beyond node_id's range,
/// members not sorted or repeated, a shard without an owner or owned by a
/// node the map does not hold.
core::result<cluster::cluster_map> from_proto(const v1::ClusterMap& in);

/// The command as a ClusterCommand.
void to_proto(const cluster::command& cmd, v1::ClusterCommand& out);

/// Errors (invalid_request): no command set, a node id of 0 or beyond
/// node_id's range.
core::result<cluster::command> from_proto(const v1::ClusterCommand& in);

/// The Raft message as a RaftMessage.
void to_proto(const cluster::raft_message& msg, v1::RaftMessage& out);

/// Errors (invalid_request): no message set; an entry without a command,
/// of index 0, or not following the one before it (AppendEntries entries
/// follow prev_index without a gap); a snapshot without its map or with
/// a map that does not decode.
core::result<cluster::raft_message> from_proto(const v1::RaftMessage& in);

} // namespace dally::storage
