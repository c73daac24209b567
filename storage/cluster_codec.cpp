#include "storage/cluster_codec.hpp"

#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace dally::storage {

using cluster::cluster_map;
using cluster::command;
using cluster::node_id;
using cluster::raft_message;
using core::errc;

namespace {

core::error bad(std::string what) {
  return {errc::invalid_request, "malformed cluster message: " + what};
}

void put_ids(const std::vector<node_id>& ids,
             google::protobuf::RepeatedField<uint64_t>& out) {
  out.Reserve(static_cast<int>(ids.size()));
  for (auto id : ids)
    out.Add(id);
}

/// `id` as a node id, if it is one (from 1, within node_id's range).
std::optional<node_id> to_id(uint64_t id) {
  if (id == 0 || id > std::numeric_limits<node_id>::max())
    return std::nullopt;
  return static_cast<node_id>(id);
}

/// The ids of `in`, or an error naming `what` for one that is no node id.
core::result<std::vector<node_id>>
get_ids(const google::protobuf::RepeatedField<uint64_t>& in,
        const std::string& what) {
  std::vector<node_id> out;
  out.reserve(static_cast<size_t>(in.size()));
  for (auto id : in) {
    auto x = to_id(id);
    if (!x)
      return bad(what + " lists node " + std::to_string(id));
    out.push_back(*x);
  }
  return out;
}

} // namespace

static void to_proto(const cluster::snapshot& snap, v1::RaftSnapshot& out) {
  out.set_last_index(snap.last_index);
  out.set_last_term(snap.last_term);
  to_proto(snap.state, *out.mutable_state());
}

static core::result<cluster::snapshot> from_proto(const v1::RaftSnapshot& in) {
  if (!in.has_state())
    return bad("snapshot without a map");
  auto state = from_proto(in.state());
  if (!state)
    return state.err();
  return cluster::snapshot{in.last_index(), in.last_term(), std::move(*state)};
}

static void to_proto(const cluster::append_request& req,
                     v1::RaftAppendRequest& out) {
  out.set_term(req.term);
  out.set_prev_index(req.prev_index);
  out.set_prev_term(req.prev_term);
  out.set_commit(req.commit);
  for (const auto& e : req.entries) {
    auto& pe = *out.add_entries();
    pe.set_term(e.term);
    pe.set_index(e.index);
    to_proto(e.cmd, *pe.mutable_command());
  }
}

static core::result<cluster::append_request>
from_proto(const v1::RaftAppendRequest& in) {
  cluster::append_request req{
    in.term(), in.prev_index(), in.prev_term(), {}, in.commit()};
  req.entries.reserve(static_cast<size_t>(in.entries_size()));
  for (const auto& pe : in.entries()) {
    auto expected = req.prev_index + req.entries.size() + 1;
    if (pe.index() != expected)
      return bad("entry " + std::to_string(pe.index()) + " where entry " +
                 std::to_string(expected) + " must follow");
    if (!pe.has_command())
      return bad("entry " + std::to_string(pe.index()) + " without a command");
    auto cmd = from_proto(pe.command());
    if (!cmd)
      return cmd.err();
    auto& entry = req.entries.emplace_back();
    entry.term = pe.term();
    entry.index = pe.index();
    entry.cmd = std::move(*cmd);
  }
  return req;
}

void to_proto(const cluster_map& map, v1::ClusterMap& out) {
  out.set_epoch(map.epoch);
  for (const auto& s : map.shards) {
    auto& ps = *out.add_shards();
    ps.set_owner(s.owner);
    put_ids(s.replicas, *ps.mutable_replicas());
    put_ids(s.in_sync, *ps.mutable_in_sync());
  }
  for (const auto& m : map.members) {
    auto& pm = *out.add_members();
    pm.set_id(m.id);
    pm.set_leaving(m.state == cluster::member::status::leaving);
    pm.set_address(m.address);
  }
}

core::result<cluster_map> from_proto(const v1::ClusterMap& in) {
  cluster_map map;
  map.epoch = in.epoch();
  for (const auto& pm : in.members()) {
    auto id = to_id(pm.id());
    if (!id)
      return bad("member id " + std::to_string(pm.id()));
    if (!map.members.empty() && map.members.back().id >= *id)
      return bad("members not sorted by id, or repeated, at " +
                 std::to_string(*id));
    map.members.push_back({*id,
                           pm.leaving() ? cluster::member::status::leaving
                                        : cluster::member::status::active,
                           pm.address()});
  }
  map.shards.reserve(static_cast<size_t>(in.shards_size()));
  for (const auto& ps : in.shards()) {
    auto shard = std::to_string(map.shards.size());
    if (ps.owner() == 0)
      return bad("shard " + shard + " without an owner");
    auto owner = to_id(ps.owner());
    if (!owner || map.find(*owner) == nullptr)
      return bad("shard " + shard + " owned by node " +
                 std::to_string(ps.owner()) + ", not a member");
    auto replicas = get_ids(ps.replicas(), "shard " + shard + " replicas");
    if (!replicas)
      return replicas.err();
    auto in_sync = get_ids(ps.in_sync(), "shard " + shard + " in-sync set");
    if (!in_sync)
      return in_sync.err();
    map.shards.push_back({*owner, std::move(*replicas), std::move(*in_sync)});
  }
  return map;
}

void to_proto(const command& cmd, v1::ClusterCommand& out) {
  std::visit(
    [&](const auto& c) {
      using T = std::decay_t<decltype(c)>;
      if constexpr (std::is_same_v<T, cluster::noop>)
        out.mutable_noop();
      else if constexpr (std::is_same_v<T, cluster::add_node>) {
        out.set_add_node(c.node);
        out.set_address(c.address);
      } else if constexpr (std::is_same_v<T, cluster::remove_node>)
        out.set_remove_node(c.node);
      else if constexpr (std::is_same_v<T, cluster::reassign>)
        out.mutable_reassign();
      else {
        auto& p = *out.mutable_create();
        p.set_shard_count(c.shard_count);
        put_ids(c.nodes, *p.mutable_nodes());
      }
    },
    cmd);
}

core::result<command> from_proto(const v1::ClusterCommand& in) {
  switch (in.kind_case()) {
    case v1::ClusterCommand::kNoop:
      return command{cluster::noop{}};
    case v1::ClusterCommand::kAddNode: {
      auto id = to_id(in.add_node());
      if (!id)
        return bad("add_node of node " + std::to_string(in.add_node()));
      return command{cluster::add_node{*id, in.address()}};
    }
    case v1::ClusterCommand::kRemoveNode: {
      auto id = to_id(in.remove_node());
      if (!id)
        return bad("remove_node of node " + std::to_string(in.remove_node()));
      return command{cluster::remove_node{*id}};
    }
    case v1::ClusterCommand::kReassign:
      return command{cluster::reassign{}};
    case v1::ClusterCommand::kCreate: {
      auto nodes = get_ids(in.create().nodes(), "create");
      if (!nodes)
        return nodes.err();
      return command{
        cluster::create_map{in.create().shard_count(), std::move(*nodes)}};
    }
    default:
      return bad("command without a kind");
  }
}

void to_proto(const raft_message& msg, v1::RaftMessage& out) {
  std::visit(
    [&](const auto& m) {
      using T = std::decay_t<decltype(m)>;
      if constexpr (std::is_same_v<T, cluster::vote_request>) {
        auto& p = *out.mutable_vote_request();
        p.set_term(m.term);
        p.set_last_index(m.last_index);
        p.set_last_term(m.last_term);
      } else if constexpr (std::is_same_v<T, cluster::vote_reply>) {
        auto& p = *out.mutable_vote_reply();
        p.set_term(m.term);
        p.set_granted(m.granted);
      } else if constexpr (std::is_same_v<T, cluster::append_request>) {
        to_proto(m, *out.mutable_append_request());
      } else if constexpr (std::is_same_v<T, cluster::append_reply>) {
        auto& p = *out.mutable_append_reply();
        p.set_term(m.term);
        p.set_success(m.success);
        p.set_last_index(m.last_index);
      } else if constexpr (std::is_same_v<T, cluster::snapshot_request>) {
        auto& p = *out.mutable_snapshot_request();
        p.set_term(m.term);
        to_proto(m.snap, *p.mutable_snapshot());
      } else {
        auto& p = *out.mutable_snapshot_reply();
        p.set_term(m.term);
        p.set_last_index(m.last_index);
      }
    },
    msg);
}

core::result<raft_message> from_proto(const v1::RaftMessage& in) {
  using M = v1::RaftMessage;
  switch (in.kind_case()) {
    case M::kVoteRequest: {
      const auto& p = in.vote_request();
      return raft_message{
        cluster::vote_request{p.term(), p.last_index(), p.last_term()}};
    }
    case M::kVoteReply:
      return raft_message{
        cluster::vote_reply{in.vote_reply().term(), in.vote_reply().granted()}};
    case M::kAppendRequest: {
      auto req = from_proto(in.append_request());
      if (!req)
        return req.err();
      return raft_message{std::move(*req)};
    }
    case M::kAppendReply: {
      const auto& p = in.append_reply();
      return raft_message{
        cluster::append_reply{p.term(), p.success(), p.last_index()}};
    }
    case M::kSnapshotRequest: {
      const auto& p = in.snapshot_request();
      if (!p.has_snapshot())
        return bad("snapshot request without a snapshot");
      auto snap = from_proto(p.snapshot());
      if (!snap)
        return snap.err();
      return raft_message{
        cluster::snapshot_request{p.term(), std::move(*snap)}};
    }
    case M::kSnapshotReply: {
      const auto& p = in.snapshot_reply();
      return raft_message{cluster::snapshot_reply{p.term(), p.last_index()}};
    }
    default:
      return bad("raft message without a kind");
  }
}

} // namespace dally::storage
