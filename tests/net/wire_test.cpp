// Wire compatibility: messages cross process boundaries as protobuf bytes
// inside CAF's framing, so old and new versions understand each other.

#define BOOST_TEST_MODULE wire
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "net/error.hpp"
#include "net/type_ids.hpp"
#include "net/wire.hpp"
#include "runtime/setup.hpp"

using namespace dally;
using namespace dally::net;
using namespace dally::runtime;

namespace {

/// A protobuf varint.
void put_varint(std::string& out, uint64_t x) {
  while (x >= 0x80) {
    out.push_back(static_cast<char>((x & 0x7F) | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<char>(x));
}

struct fixture {
  caf::actor_system_config cfg;
  fixture() { add_message_types(cfg); }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(wire_suite, fixture)

BOOST_AUTO_TEST_CASE(a_message_round_trips_through_caf_serialization) {
  caf::actor_system sys{cfg};
  v1::ScheduleRequest pb;
  pb.set_topic("billing");
  pb.set_payload(std::string{"\0\xff", 2});
  pb.mutable_when()->set_in_ms(5'000);
  pb.set_idempotency_key("order-1");
  schedule_request out{pb};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  BOOST_REQUIRE(!sink(out));
  schedule_request back;
  caf::binary_deserializer source{sys, buf};
  BOOST_REQUIRE(!source(back));
  BOOST_TEST(back.pb.SerializeAsString() == pb.SerializeAsString());
}

BOOST_AUTO_TEST_CASE(an_unknown_extra_field_from_a_newer_peer_is_skipped) {
  caf::actor_system sys{cfg};
  v1::ScheduleRequest pb;
  pb.set_topic("billing");
  pb.mutable_when()->set_at_ms(1'700'000'000'000);
  auto bytes = pb.SerializeAsString();
  // Field 99, varint: what a newer client might add.
  put_varint(bytes, (99u << 3) | 0u);
  put_varint(bytes, 12345);
  // Field 100, length-delimited.
  put_varint(bytes, (100u << 3) | 2u);
  put_varint(bytes, 3);
  bytes += "new";
  // CAF frames the wrapper as one string: write that string directly.
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  BOOST_REQUIRE(!sink(bytes));
  schedule_request back;
  caf::binary_deserializer source{sys, buf};
  BOOST_REQUIRE(!source(back));
  BOOST_TEST(back.pb.topic() == "billing");
  BOOST_TEST(back.pb.when().at_ms() == 1'700'000'000'000);
}

// A topic that is not UTF-8 is the node's to refuse, task by task
// (invalid_topic): the batch it came in must still parse, whole.
BOOST_AUTO_TEST_CASE(a_batch_with_a_malformed_topic_parses) {
  caf::actor_system sys{cfg};
  v1::ScheduleBatchRequest pb;
  pb.add_tasks()->set_topic("billing");
  pb.add_tasks()->set_topic(std::string{"t-\xff\xfe"});
  schedule_batch_request out{pb};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  BOOST_REQUIRE(!sink(out));
  schedule_batch_request back;
  caf::binary_deserializer source{sys, buf};
  BOOST_REQUIRE(!source(back));
  BOOST_REQUIRE(back.pb.tasks_size() == 2);
  BOOST_TEST(back.pb.tasks(0).topic() == "billing");
  BOOST_TEST(back.pb.tasks(1).topic() == std::string{"t-\xff\xfe"});
  v1::SubscribeRequest sub;
  sub.set_topic(std::string{"\xc0"});
  subscribe_request sub_out{sub};
  buf.clear();
  caf::binary_serializer sub_sink{sys, buf};
  BOOST_REQUIRE(!sub_sink(sub_out));
  subscribe_request sub_back;
  caf::binary_deserializer sub_source{sys, buf};
  BOOST_REQUIRE(!sub_source(sub_back));
  BOOST_TEST(sub_back.pb.topic() == std::string{"\xc0"});
}

BOOST_AUTO_TEST_CASE(garbage_bytes_are_refused_with_an_error) {
  caf::actor_system sys{cfg};
  std::string garbage = "\x0a\xff\xff\xff\xff\xff";
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  BOOST_REQUIRE(!sink(garbage));
  schedule_request back;
  caf::binary_deserializer source{sys, buf};
  BOOST_TEST(static_cast<bool>(source(back)));
}

BOOST_AUTO_TEST_CASE(dally_errors_keep_code_and_message_through_caf) {
  auto err = make_caf_error(core::errc::payload_too_large, "2 MiB > 1 MiB");
  auto back = from_caf(err);
  BOOST_TEST(back.code() == core::errc::payload_too_large);
  BOOST_TEST(back.message() == "2 MiB > 1 MiB");
  BOOST_TEST(describe(err) == "payload_too_large: 2 MiB > 1 MiB");
  auto caf_own = from_caf(caf::make_error(caf::sec::request_timeout));
  BOOST_TEST(caf_own.code() == core::errc::unavailable);
}

BOOST_AUTO_TEST_SUITE_END()
