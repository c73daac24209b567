#define BOOST_TEST_MODULE record_codec
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/recurrence.hpp"
#include "storage/record_codec.hpp"

using namespace dally;
using namespace dally::storage;
using core::errc;
using core::recurrence;

namespace {

constexpr int64_t t0 = 1'704'067'200'000; // 2024-01-01T00:00:00Z
constexpr int64_t minute_ms = 60'000;

template<class T>
T ok(core::result<T> x) {
  if (!x)
    BOOST_FAIL("unexpected error: " << x.err());
  return std::move(x).value();
}

template<class T>
void check_corrupt(const core::result<T>& x, const std::string& fragment,
                   errc code = errc::corrupt_record) {
  BOOST_REQUIRE(!x);
  BOOST_TEST(to_string(x.err().code()) == to_string(code));
  BOOST_TEST(x.err().message().find(fragment) != std::string::npos,
             "message '" << x.err().message() << "' lacks '" << fragment
                         << "'");
}

std::vector<recurrence> every_kind() {
  return {
    recurrence{},
    ok(recurrence::at(t0 + 1)),
    ok(recurrence::after(t0, 5 * minute_ms)),
    ok(recurrence::fixed_rate(t0, minute_ms,
                              {.start_ms = t0 - 30'000,
                               .end_ms = t0 + 60 * minute_ms,
                               .max_count = 7})),
    ok(recurrence::fixed_delay(t0, 2 * minute_ms)),
    ok(recurrence::intervals(t0, {1'000, 2'000, 3'000}, false)),
    ok(recurrence::intervals(t0, {minute_ms, 5 * minute_ms}, true,
                             {.start_ms = t0 + 10, .max_count = 100})),
    ok(recurrence::cron(t0, "0 30 2 * * 1-5", "America/New_York",
                        {.end_ms = t0 + 400 * 24 * 60 * minute_ms})),
  };
}

task_record sample_record() {
  task_record rec;
  rec.task.id = 0x0102030405060708;
  rec.task.topic = "billing.invoice";
  rec.task.payload = std::string{"\0\x01\xff payload", 11};
  rec.task.due_ms = t0 + 42;
  rec.task.recurrence = ok(recurrence::fixed_rate(t0, minute_ms));
  rec.task.policy.lease_ms = 5'000;
  rec.task.policy.max_attempts = 3;
  rec.task.attempt = 2;
  rec.task.idempotency_key = "order-17";
  rec.state = task_state::in_flight;
  rec.lease_deadline_ms = t0 + 5'042;
  rec.lease_ms = 5'000;
  rec.fired_count = 9;
  rec.retry_at_ms = t0 + 7'000;
  rec.stamp = stamp{4, 1234};
  return rec;
}

/// A varint as protobuf writes it.
std::string varint(uint64_t x) {
  std::string out;
  while (x >= 0x80) {
    out.push_back(static_cast<char>((x & 0x7F) | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<char>(x));
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(record_codec_tests)

BOOST_AUTO_TEST_CASE(every_recurrence_kind_round_trips) {
  for (const auto& rec : every_kind()) {
    v1::Recurrence msg;
    to_proto(rec, msg);
    auto back = ok(from_proto(msg));
    BOOST_TEST((back == rec), to_string(rec.kind()));
    // And through bytes, inside a full record.
    auto stored = sample_record();
    stored.task.recurrence = rec;
    auto decoded = ok(decode_task_record(ok(encode(stored))));
    BOOST_TEST((decoded.task.recurrence == rec), to_string(rec.kind()));
  }
}

BOOST_AUTO_TEST_CASE(task_record_round_trips) {
  auto rec = sample_record();
  BOOST_TEST((ok(decode_task_record(ok(encode(rec)))) == rec));
  rec.state = task_state::pending;
  rec.task.idempotency_key.reset();
  rec.task.payload.clear();
  rec.task.topic = "t\xc3\xa9l\xc3\xa9phone"; // UTF-8 is fine
  BOOST_TEST((ok(decode_task_record(ok(encode(rec)))) == rec));
  BOOST_TEST(!ok(decode_task_record(ok(encode(rec)))).task.idempotency_key);
  // An empty key is a key, distinct from none.
  rec.task.idempotency_key = "";
  BOOST_TEST((ok(decode_task_record(ok(encode(rec)))) == rec));
}

BOOST_AUTO_TEST_CASE(encode_stamped_leaves_nothing_of_the_record_before) {
  // The encoder keeps its scratch message's parts between records: a
  // record with every optional field set, then a bare one, must not leak
  // a field of the first into the second.
  auto full = sample_record();
  full.task.recurrence = every_kind().back(); // cron, zone and end
  std::string out = "left over from before";
  BOOST_REQUIRE(!encode_stamped(full, stamp{7, 99}, out));
  auto first = ok(decode_task_record(out));
  BOOST_TEST(first.stamp.epoch == 7u);
  BOOST_TEST(first.stamp.seq == 99u);
  first.stamp = full.stamp;
  BOOST_TEST((first == full));
  task_record bare;
  bare.task.id = 5;
  bare.task.topic = "t";
  bare.task.due_ms = t0;
  bare.task.recurrence = ok(recurrence::at(t0));
  BOOST_REQUIRE(!encode_stamped(bare, stamp{8, 1}, out));
  auto second = ok(decode_task_record(out));
  BOOST_TEST(!second.task.idempotency_key);
  BOOST_TEST(second.stamp.seq == 1u);
  second.stamp = bare.stamp;
  BOOST_TEST((second == bare));
  BOOST_TEST((ok(decode_task_record(ok(encode(full)))) == full));
}

BOOST_AUTO_TEST_CASE(a_task_record_stays_small) {
  // Shards cache, copy and move records on every fire and ack; 104 bytes
  // more per record cost about 5% of dallyd's CPU per streamed task.
  BOOST_TEST(sizeof(task_record) <= 32 * sizeof(void*));
}

BOOST_AUTO_TEST_CASE(dead_letter_key_and_meta_round_trip) {
  dead_letter dead{sample_record(), t0 + 99, "max attempts (3) reached"};
  BOOST_TEST((ok(decode_dead_letter(ok(encode(dead)))) == dead));
  idempotency_entry entry{77, t0 + 1'000, 0xfedcba9876543210};
  BOOST_TEST((ok(decode_idempotency_entry(encode(entry))) == entry));
  shard_meta meta{3, 8, 1'000'000, 5, 123'456};
  BOOST_TEST((ok(decode_shard_meta(encode(meta))) == meta));
  // Version 1 unless the deferred-index mark is set: builds that would
  // not index those tasks refuse version 2.
  v1::ShardMeta msg;
  BOOST_REQUIRE(msg.ParseFromString(encode(meta)));
  BOOST_TEST(msg.format_version() == 1u);
  meta.unindexed_from = 4'242;
  BOOST_TEST((ok(decode_shard_meta(encode(meta))) == meta));
  BOOST_REQUIRE(msg.ParseFromString(encode(meta)));
  BOOST_TEST(msg.format_version() == 2u);
  // The fire horizon needs no new version: older builds that ignore it
  // only deliver a first attempt again after a crash.
  meta.unindexed_from = 0;
  meta.fire_horizon_ms = t0 + 250;
  BOOST_TEST((ok(decode_shard_meta(encode(meta))) == meta));
  BOOST_REQUIRE(msg.ParseFromString(encode(meta)));
  BOOST_TEST(msg.format_version() == 1u);
}

BOOST_AUTO_TEST_CASE(garbage_bytes_are_corrupt_records) {
  const std::string garbage = "\xff\xff\xff\xff\xff";
  check_corrupt(decode_task_record(garbage),
                "TaskRecord: 5 bytes do not parse");
  check_corrupt(decode_dead_letter(garbage), "DeadLetter");
  check_corrupt(decode_idempotency_entry(garbage), "IdempotencyRecord");
  check_corrupt(decode_shard_meta(garbage), "ShardMeta");
  // Cut inside the payload: a truncated length-delimited field.
  auto bytes = ok(encode(sample_record()));
  auto cut = bytes.substr(0, bytes.find("payload") + 3);
  check_corrupt(decode_task_record(cut), "do not parse");
}

BOOST_AUTO_TEST_CASE(unknown_fields_are_tolerated) {
  auto rec = sample_record();
  auto bytes = ok(encode(rec));
  // Field 99 as a varint, field 100 as bytes: what a newer version may add.
  bytes += varint(99 << 3) + varint(123456789);
  bytes += varint((100 << 3) | 2) + varint(3) + "new";
  BOOST_TEST((ok(decode_task_record(bytes)) == rec));
  auto meta_bytes = encode(shard_meta{0, 1, 5, 0, 9});
  meta_bytes += varint(50 << 3) + varint(1);
  BOOST_TEST(ok(decode_shard_meta(meta_bytes)).next_local_id == 5u);
}

BOOST_AUTO_TEST_CASE(invalid_fields_are_corrupt_records) {
  v1::TaskRecord msg;
  BOOST_REQUIRE(!to_proto(sample_record(), msg));
  auto decode = [](const v1::TaskRecord& m) {
    return decode_task_record(m.SerializeAsString());
  };
  auto edited = msg;
  edited.set_state(v1::TASK_STATE_UNSPECIFIED);
  check_corrupt(decode(edited), "TaskRecord field state: unspecified");
  edited = msg;
  edited.set_state(static_cast<v1::TaskState>(9));
  check_corrupt(decode(edited), "state: unknown value 9");
  edited = msg;
  edited.mutable_recurrence()->set_kind(static_cast<v1::Recurrence::Kind>(17));
  check_corrupt(decode(edited), "Recurrence field kind: unknown value 17");
  edited = msg;
  edited.mutable_recurrence()->set_kind(v1::Recurrence::KIND_CRON);
  edited.mutable_recurrence()->set_cron("0 61 * * *");
  edited.mutable_recurrence()->set_zone("UTC");
  check_corrupt(decode(edited),
                "recurrence: Recurrence (cron): malformed_cron");
  edited = msg;
  edited.mutable_recurrence()->set_period_ms(0);
  check_corrupt(decode(edited), "invalid_period");
  edited = msg;
  edited.clear_policy();
  check_corrupt(decode(edited), "TaskRecord field policy: DeliveryPolicy");
  v1::DeadLetter dead;
  dead.set_reason("no task");
  check_corrupt(decode_dead_letter(dead.SerializeAsString()),
                "DeadLetter field task: missing");
  v1::ShardMeta meta;
  meta.set_shard_count(4);
  check_corrupt(decode_shard_meta(meta.SerializeAsString()),
                "format_version: missing");
  meta.set_format_version(1);
  meta.set_shard(4);
  check_corrupt(decode_shard_meta(meta.SerializeAsString()),
                "shard: 4 is not below shard_count 4");
  meta.set_shard_count(0);
  meta.set_shard(0);
  check_corrupt(decode_shard_meta(meta.SerializeAsString()), "shard_count: 0");
  meta.set_shard_count(1);
  meta.set_format_version(3);
  check_corrupt(decode_shard_meta(meta.SerializeAsString()), "format version 3",
                errc::store_unavailable);
}

BOOST_AUTO_TEST_CASE(text_that_protobuf_cannot_read_back_is_refused) {
  auto rec = sample_record();
  rec.task.topic = "bad\xff";
  check_corrupt(encode(rec), "topic of task", errc::invalid_topic);
  rec.task.topic = "ok";
  // Idempotency keys are bytes: any key round-trips.
  rec.task.idempotency_key = std::string{"\xc0\x80\xff\0k", 5};
  auto key_back = ok(decode_task_record(ok(encode(rec))));
  BOOST_TEST(*key_back.task.idempotency_key == *rec.task.idempotency_key);
  rec.task.idempotency_key.reset();
  // A reason is text for people: bad bytes become U+FFFD.
  dead_letter dead{rec, t0, "consumer said \xff!"};
  auto back = ok(decode_dead_letter(ok(encode(dead))));
  BOOST_TEST(back.reason == "consumer said \xEF\xBF\xBD!");
}

BOOST_AUTO_TEST_CASE(index_time_is_the_retry_time_while_a_retry_waits) {
  auto rec = sample_record();
  // In flight: indexed where it was pending, acted on at the lease deadline.
  BOOST_TEST(rec.index_ms() == t0 + 7'000);
  BOOST_TEST(rec.action_ms() == t0 + 5'042);
  rec.state = task_state::pending;
  BOOST_TEST(rec.index_ms() == t0 + 7'000); // pending: the later retry time
  BOOST_TEST(rec.action_ms() == t0 + 7'000);
  rec.retry_at_ms = 0;
  BOOST_TEST(rec.index_ms() == t0 + 42); // no retry: the due time
  rec.retry_at_ms = t0 + 1;
  BOOST_TEST(rec.index_ms() == t0 + 42); // never before the due time
}

BOOST_AUTO_TEST_SUITE_END()
