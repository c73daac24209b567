#define BOOST_TEST_MODULE cluster_codec
#include <boost/test/unit_test.hpp>

#include <string>

#include "storage/cluster_codec.hpp"

using namespace dally;
using namespace dally::cluster;
using dally::core::errc;

BOOST_TEST_DONT_PRINT_LOG_VALUE(dally::cluster::cluster_map)
BOOST_TEST_DONT_PRINT_LOG_VALUE(dally::cluster::command)

namespace {

/// A map with a leaving member, a learner with its address, replicas and
/// an in-sync set.
cluster_map sample_map() {
  auto map = cluster_map::create(8, {1, 2, 3});
  map.apply(remove_node{3});
  map.apply(add_node{4, "127.0.0.1:7504"});
  map.shards[0].replicas = {2, 3};
  map.shards[0].in_sync = {2};
  return map;
}

/// Encodes `msg`, sends it through its bytes, decodes it.
raft_message round_trip(const raft_message& msg) {
  v1::RaftMessage pb;
  storage::to_proto(msg, pb);
  v1::RaftMessage back;
  BOOST_REQUIRE(back.ParseFromString(pb.SerializeAsString()));
  auto out = storage::from_proto(back);
  BOOST_REQUIRE(out.has_value());
  return *out;
}

append_request sample_append() {
  return append_request{7,
                        4,
                        6,
                        {{7, 5, add_node{9, "10.0.0.9:7509"}},
                         {7, 6, remove_node{2}},
                         {7, 7, reassign{}},
                         {7, 8, noop{}},
                         {7, 9, create_map{64, {1, 2, 3}}},
                         {7, 10, add_node{9}}},
                        5};
}

/// The error of decoding `pb`, which must fail.
core::error decode_error(const v1::RaftMessage& pb) {
  auto out = storage::from_proto(pb);
  BOOST_REQUIRE(!out.has_value());
  return out.err();
}

} // namespace

BOOST_AUTO_TEST_CASE(map_round_trips) {
  auto map = sample_map();
  v1::ClusterMap pb;
  storage::to_proto(map, pb);
  auto back = storage::from_proto(pb);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST((*back == map));
  BOOST_TEST(back->epoch == map.epoch);
}

BOOST_AUTO_TEST_CASE(every_raft_message_round_trips) {
  auto vr = std::get<vote_request>(round_trip(vote_request{3, 10, 2}));
  BOOST_TEST(vr.term == 3u);
  BOOST_TEST(vr.last_index == 10u);
  BOOST_TEST(vr.last_term == 2u);
  auto vp = std::get<vote_reply>(round_trip(vote_reply{3, true}));
  BOOST_TEST(vp.term == 3u);
  BOOST_TEST(vp.granted);
  auto in = sample_append();
  auto ar = std::get<append_request>(round_trip(in));
  BOOST_TEST(ar.term == in.term);
  BOOST_TEST(ar.prev_index == in.prev_index);
  BOOST_TEST(ar.prev_term == in.prev_term);
  BOOST_TEST(ar.commit == in.commit);
  BOOST_TEST((ar.entries == in.entries));
  auto ap = std::get<append_reply>(round_trip(append_reply{4, true, 9}));
  BOOST_TEST(ap.term == 4u);
  BOOST_TEST(ap.success);
  BOOST_TEST(ap.last_index == 9u);
  snapshot snap{12, 3, sample_map()};
  auto sr = std::get<snapshot_request>(round_trip(snapshot_request{5, snap}));
  BOOST_TEST(sr.term == 5u);
  BOOST_TEST((sr.snap == snap));
  auto sp = std::get<snapshot_reply>(round_trip(snapshot_reply{5, 12}));
  BOOST_TEST(sp.term == 5u);
  BOOST_TEST(sp.last_index == 12u);
}

BOOST_AUTO_TEST_CASE(heartbeat_without_entries_round_trips) {
  auto ar =
    std::get<append_request>(round_trip(append_request{2, 0, 0, {}, 0}));
  BOOST_TEST(ar.entries.empty());
}

BOOST_AUTO_TEST_CASE(empty_message_is_refused) {
  auto err = decode_error(v1::RaftMessage{});
  BOOST_TEST(err.code() == errc::invalid_request);
  BOOST_TEST(err.message().find("without a kind") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(entries_with_a_gap_are_refused) {
  v1::RaftMessage pb;
  storage::to_proto(sample_append(), pb);
  pb.mutable_append_request()->mutable_entries(2)->set_index(9);
  auto err = decode_error(pb);
  BOOST_TEST(err.code() == errc::invalid_request);
  BOOST_TEST(err.message().find("entry 9 where entry 7") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(entry_without_command_is_refused) {
  v1::RaftMessage pb;
  storage::to_proto(sample_append(), pb);
  pb.mutable_append_request()->mutable_entries(0)->clear_command();
  BOOST_TEST(decode_error(pb).message().find("without a command") !=
             std::string::npos);
  pb.mutable_append_request()->mutable_entries(0)->mutable_command();
  BOOST_TEST(decode_error(pb).message().find("command without a kind") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_add_node_and_a_member_without_address_read_as_empty) {
  // As written before the address existed: field 2 of the command only,
  // fields 1 and 2 of a member only.
  v1::ClusterCommand cmd;
  cmd.set_add_node(4);
  v1::ClusterCommand old_cmd;
  BOOST_REQUIRE(old_cmd.ParseFromString(cmd.SerializeAsString()));
  auto out = storage::from_proto(old_cmd);
  BOOST_REQUIRE(out.has_value());
  BOOST_TEST((*out == command{add_node{4}}));
  BOOST_TEST(std::get<add_node>(*out).address.empty());
  auto map = sample_map();
  v1::ClusterMap pb;
  storage::to_proto(map, pb);
  for (auto& m : *pb.mutable_members())
    m.clear_address();
  auto back = storage::from_proto(pb);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(back->find(4)->address.empty());
  BOOST_TEST(back->members.size() == map.members.size());
}

BOOST_AUTO_TEST_CASE(node_zero_is_refused) {
  v1::ClusterCommand cmd;
  cmd.set_add_node(0);
  auto out = storage::from_proto(cmd);
  BOOST_REQUIRE(!out.has_value());
  BOOST_TEST(out.err().code() == errc::invalid_request);
  cmd.set_remove_node(uint64_t{1} << 40);
  BOOST_TEST(!storage::from_proto(cmd).has_value());
  cmd.mutable_create()->add_nodes(0);
  BOOST_TEST(!storage::from_proto(cmd).has_value());
}

BOOST_AUTO_TEST_CASE(snapshot_without_map_is_refused) {
  v1::RaftMessage pb;
  storage::to_proto(snapshot_request{5, snapshot{12, 3, sample_map()}}, pb);
  pb.mutable_snapshot_request()->mutable_snapshot()->clear_state();
  BOOST_TEST(decode_error(pb).message().find("snapshot without a map") !=
             std::string::npos);
  pb.mutable_snapshot_request()->clear_snapshot();
  BOOST_TEST(decode_error(pb).message().find("without a snapshot") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(map_with_an_owner_outside_it_is_refused) {
  v1::ClusterMap pb;
  storage::to_proto(sample_map(), pb);
  pb.mutable_shards(3)->set_owner(7);
  auto out = storage::from_proto(pb);
  BOOST_REQUIRE(!out.has_value());
  BOOST_TEST(out.err().code() == errc::invalid_request);
  BOOST_TEST(out.err().message().find("shard 3 owned by node 7") !=
             std::string::npos);
  pb.mutable_shards(3)->set_owner(0);
  BOOST_TEST(!storage::from_proto(pb).has_value());
}

BOOST_AUTO_TEST_CASE(map_with_unsorted_members_is_refused) {
  v1::ClusterMap pb;
  storage::to_proto(sample_map(), pb);
  pb.mutable_members(1)->set_id(1);
  auto out = storage::from_proto(pb);
  BOOST_REQUIRE(!out.has_value());
  BOOST_TEST(out.err().message().find("not sorted") != std::string::npos);
  pb.mutable_members(0)->set_id(0);
  BOOST_TEST(!storage::from_proto(pb).has_value());
}

BOOST_AUTO_TEST_CASE(bytes_that_do_not_parse_are_refused_by_protobuf) {
  v1::RaftMessage pb;
  BOOST_TEST(!pb.ParseFromString(std::string("\xff\xff\xff", 3)));
}
