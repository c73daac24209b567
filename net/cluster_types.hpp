#pragma once

#include <caf/type_id.hpp>

#include "net/type_ids.hpp"
#include "net/wire.hpp"
#include "proto/dally_cluster.pb.h"

namespace dally::net {

/// Between cluster nodes: a heartbeat or a Raft message, with the sender's
/// node id (proto/dally_cluster.proto).
using peer_msg = wire<v1::PeerMessage>;

/// dallyctl -> a node's cluster actor: what the node knows of the cluster.
using cluster_status_request = wire<v1::ClusterStatusRequest>;
using cluster_status_reply = wire<v1::ClusterStatusReply>;

} // namespace dally::net

// The cluster's messages, in a block of their own after the engine's, so
// that a single node's types keep their ids. Registered with
// `runtime::add_message_types` like the engine's.
CAF_BEGIN_TYPE_ID_BLOCK(dally_cluster, caf::id_block::dally::end)

CAF_ADD_TYPE_ID(dally_cluster, (dally::net::peer_msg))
CAF_ADD_TYPE_ID(dally_cluster, (dally::net::cluster_status_request))
CAF_ADD_TYPE_ID(dally_cluster, (dally::net::cluster_status_reply))

CAF_END_TYPE_ID_BLOCK(dally_cluster)
