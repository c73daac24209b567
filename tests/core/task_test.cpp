#define BOOST_TEST_MODULE task
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/delivery_policy.hpp"
#include "core/task.hpp"
#include "core/time_range.hpp"
#include "core/utf8.hpp"
#include "time_test_util.hpp"

using namespace dally::core;
using dally::core::test::utc_ms;

namespace {

const int64_t now = utc_ms("2024-01-01T00:00:00Z");

task valid_task() {
  task t;
  t.id = 42;
  t.topic = "billing.invoice";
  t.payload = "hello";
  t.due_ms = now + 60'000;
  t.recurrence = recurrence::after(now, 60'000).value();
  return t;
}

/// Asserts `err` has `code` and a message containing each fragment.
void check_error(const error& err, errc code,
                 std::vector<std::string> fragments) {
  BOOST_TEST(to_string(err.code()) == to_string(code));
  for (const auto& fragment : fragments)
    BOOST_TEST(err.message().find(fragment) != std::string::npos,
               "message '" << err.message() << "' lacks '" << fragment << "'");
}

} // namespace

BOOST_AUTO_TEST_SUITE(task_tests)

// -- task validation ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(valid_task_passes) {
  auto t = valid_task();
  BOOST_TEST(!t.validate(now));
  BOOST_TEST(t.attempt == 0u);
  BOOST_TEST(!t.idempotency_key);
  t.idempotency_key = "order-17";
  BOOST_TEST(!t.validate(now));
}

BOOST_AUTO_TEST_CASE(past_due_time_is_fine) {
  auto t = valid_task();
  t.due_ms = now - 3'600'000;
  BOOST_TEST(!t.validate(now));
}

BOOST_AUTO_TEST_CASE(limits_are_inclusive) {
  task_limits limits;
  auto t = valid_task();
  t.topic.assign(limits.max_topic_bytes, 't');
  t.payload.assign(limits.max_payload_bytes, '\0');
  t.idempotency_key = std::string(limits.max_idempotency_key_bytes, 'k');
  t.due_ms = now + limits.max_delay_ms;
  BOOST_TEST(!t.validate(now, limits));
}

BOOST_AUTO_TEST_CASE(empty_topic_is_rejected) {
  auto t = valid_task();
  t.topic.clear();
  check_error(t.validate(now), errc::invalid_topic, {"topic is empty"});
}

BOOST_AUTO_TEST_CASE(long_topic_is_rejected) {
  auto t = valid_task();
  t.topic.assign(257, 't');
  check_error(t.validate(now), errc::invalid_topic,
              {"topic is 257 bytes long; the maximum is 256 bytes"});
  task_limits limits;
  limits.max_topic_bytes = 4;
  t.topic = "abcde";
  check_error(t.validate(now, limits), errc::invalid_topic,
              {"5 bytes long; the maximum is 4 bytes"});
}

BOOST_AUTO_TEST_CASE(topic_with_control_character_is_rejected) {
  auto t = valid_task();
  t.topic = "bad\ntopic";
  check_error(t.validate(now), errc::invalid_topic,
              {"control character 0x0a at byte 3"});
}

BOOST_AUTO_TEST_CASE(large_payload_is_rejected) {
  auto t = valid_task();
  t.payload.assign((size_t{1} << 20) + 1, 'x');
  check_error(t.validate(now), errc::payload_too_large,
              {"payload is 1048577 bytes; the maximum is 1048576 bytes"});
}

BOOST_AUTO_TEST_CASE(empty_idempotency_key_is_rejected) {
  auto t = valid_task();
  t.idempotency_key = "";
  check_error(t.validate(now), errc::invalid_idempotency_key,
              {"idempotency key is empty"});
}

BOOST_AUTO_TEST_CASE(long_idempotency_key_is_rejected) {
  auto t = valid_task();
  t.idempotency_key = std::string(300, 'k');
  check_error(t.validate(now), errc::invalid_idempotency_key,
              {"idempotency key is 300 bytes long; the maximum is 256"});
}

BOOST_AUTO_TEST_CASE(negative_due_time_is_rejected) {
  auto t = valid_task();
  t.due_ms = -1;
  check_error(t.validate(now), errc::invalid_time,
              {"due time -1 ms is outside the supported range"});
}

BOOST_AUTO_TEST_CASE(due_time_after_year_9999_is_rejected) {
  auto t = valid_task();
  t.due_ms = max_time_ms + 1;
  check_error(
    t.validate(now), errc::invalid_time,
    {"due time 253402300800000 ms is outside", "9999-12-31T23:59:59.999Z"});
}

BOOST_AUTO_TEST_CASE(invalid_now_is_rejected) {
  auto t = valid_task();
  check_error(t.validate(-7), errc::invalid_time,
              {"now -7 ms is outside the supported range"});
}

BOOST_AUTO_TEST_CASE(due_time_too_far_ahead_is_rejected) {
  auto t = valid_task();
  task_limits limits;
  t.due_ms = now + limits.max_delay_ms + 1;
  check_error(t.validate(now), errc::delay_too_large,
              {"lies 315619200001 ms", "maximum delay is 315619200000 ms"});
}

BOOST_AUTO_TEST_CASE(invalid_policy_is_rejected) {
  auto t = valid_task();
  t.policy.lease_ms = 0;
  check_error(t.validate(now), errc::invalid_policy, {"lease_ms is 0"});
}

BOOST_AUTO_TEST_CASE(new_error_codes_have_names) {
  BOOST_TEST(to_string(errc::invalid_idempotency_key) ==
             "invalid_idempotency_key");
  BOOST_TEST(to_string(errc::too_many_intervals) == "too_many_intervals");
}

// -- delivery policy ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(default_policy_is_valid) {
  BOOST_TEST(!delivery_policy{}.validate());
}

BOOST_AUTO_TEST_CASE(policy_rejects_non_positive_lease) {
  delivery_policy p;
  p.lease_ms = 0;
  check_error(p.validate(), errc::invalid_policy,
              {"lease_ms is 0; a lease must be positive"});
  p.lease_ms = -5;
  check_error(p.validate(), errc::invalid_policy, {"lease_ms is -5"});
}

BOOST_AUTO_TEST_CASE(policy_rejects_huge_lease) {
  delivery_policy p;
  p.lease_ms = max_time_ms + 1;
  check_error(p.validate(), errc::invalid_policy,
              {"lease_ms is 253402300800000 ms; the maximum is the maximum "
               "delay"});
  // The cap is the maximum delay (ten years), not the end of the range.
  p.lease_ms = task_limits{}.max_delay_ms;
  BOOST_TEST(!p.validate());
  p.lease_ms = task_limits{}.max_delay_ms + 1;
  check_error(p.validate(), errc::invalid_policy, {"lease_ms is"});
  check_error(p.validate(1'000), errc::invalid_policy, {"lease_ms is"});
}

BOOST_AUTO_TEST_CASE(a_topic_follows_the_same_rules_alone) {
  BOOST_TEST(!validate_topic("billing"));
  check_error(validate_topic(std::string{"t-\xff\xfe"}), errc::invalid_topic,
              {"not valid UTF-8"});
  check_error(validate_topic(std::string(257, 't')), errc::invalid_topic,
              {"257 bytes long; the maximum is 256 bytes"});
  check_error(validate_topic(""), errc::invalid_topic, {"topic is empty"});
}

// Issue 52: a backoff of year 9999 set a retry time outside the supported
// range on the first nack.
BOOST_AUTO_TEST_CASE(policy_rejects_a_backoff_past_the_maximum_delay) {
  delivery_policy p;
  p.backoff_initial_ms = 253402300799999;
  p.backoff_max_ms = 253402300799999;
  check_error(p.validate(), errc::invalid_policy,
              {"backoff_initial_ms is 253402300799999 ms; the maximum is the "
               "maximum delay"});
  p.backoff_initial_ms = 1'000;
  check_error(p.validate(), errc::invalid_policy,
              {"backoff_max_ms is 253402300799999 ms"});
  p.backoff_max_ms = task_limits{}.max_delay_ms;
  BOOST_TEST(!p.validate());
  // Through a task: the node's limits decide.
  auto t = valid_task();
  t.policy.backoff_initial_ms = 253402300799999;
  t.policy.backoff_max_ms = 253402300799999;
  check_error(t.validate(now), errc::invalid_policy, {"backoff_initial_ms"});
}

BOOST_AUTO_TEST_CASE(policy_rejects_zero_attempts) {
  delivery_policy p;
  p.max_attempts = 0;
  check_error(p.validate(), errc::invalid_policy, {"max_attempts is 0"});
}

BOOST_AUTO_TEST_CASE(policy_rejects_negative_initial_backoff) {
  delivery_policy p;
  p.backoff_initial_ms = -1;
  check_error(p.validate(), errc::invalid_policy,
              {"backoff_initial_ms is -1; a wait cannot be negative"});
}

BOOST_AUTO_TEST_CASE(policy_rejects_shrinking_multiplier) {
  delivery_policy p;
  p.backoff_multiplier_permille = 999;
  check_error(p.validate(), errc::invalid_policy,
              {"backoff_multiplier_permille is 999; it must be >= 1000"});
}

BOOST_AUTO_TEST_CASE(policy_rejects_cap_below_initial) {
  delivery_policy p;
  p.backoff_initial_ms = 5'000;
  p.backoff_max_ms = 4'000;
  check_error(p.validate(), errc::invalid_policy,
              {"backoff_max_ms (4000) is below backoff_initial_ms (5000)"});
}

BOOST_AUTO_TEST_CASE(policy_rejects_huge_cap) {
  delivery_policy p;
  p.backoff_max_ms = std::numeric_limits<int64_t>::max();
  check_error(p.validate(), errc::invalid_policy,
              {"backoff_max_ms is 9223372036854775807 ms; the maximum is"});
}

BOOST_AUTO_TEST_CASE(backoff_doubles_up_to_the_cap) {
  delivery_policy p; // 1 s, x2, cap 10 min
  std::vector<int64_t> waits;
  for (uint32_t attempt = 0; attempt <= 12; ++attempt)
    waits.push_back(p.backoff_ms(attempt));
  BOOST_TEST(waits == (std::vector<int64_t>{
                        0, 1'000, 2'000, 4'000, 8'000, 16'000, 32'000, 64'000,
                        128'000, 256'000, 512'000, 600'000, 600'000}),
             boost::test_tools::per_element());
  BOOST_TEST(p.backoff_ms(std::numeric_limits<uint32_t>::max()) == 600'000);
}

BOOST_AUTO_TEST_CASE(backoff_rounds_up_fractional_growth) {
  delivery_policy p;
  p.backoff_multiplier_permille = 1'500;
  std::vector<int64_t> waits;
  for (uint32_t attempt = 1; attempt <= 5; ++attempt)
    waits.push_back(p.backoff_ms(attempt));
  // 3375 * 1.5 = 5062.5 rounds up to 5063.
  BOOST_TEST(waits == (std::vector<int64_t>{1'000, 1'500, 2'250, 3'375, 5'063}),
             boost::test_tools::per_element());
  // Rounding up makes even a tiny multiplier grow a tiny wait.
  p.backoff_initial_ms = 1;
  p.backoff_multiplier_permille = 1'001;
  BOOST_TEST(p.backoff_ms(4) == 4);
}

BOOST_AUTO_TEST_CASE(backoff_constant_and_zero) {
  delivery_policy p;
  p.backoff_multiplier_permille = 1'000;
  BOOST_TEST(p.backoff_ms(1) == 1'000);
  BOOST_TEST(p.backoff_ms(1'000'000) == 1'000);
  p.backoff_initial_ms = 0;
  BOOST_TEST(p.backoff_ms(1) == 0);
  BOOST_TEST(p.backoff_ms(50) == 0);
}

BOOST_AUTO_TEST_CASE(backoff_never_overflows) {
  delivery_policy p;
  p.backoff_initial_ms = max_time_ms / 2;
  p.backoff_max_ms = max_time_ms;
  p.backoff_multiplier_permille = std::numeric_limits<uint32_t>::max();
  BOOST_TEST(p.backoff_ms(1) == max_time_ms / 2);
  BOOST_TEST(p.backoff_ms(2) == max_time_ms);
  BOOST_TEST(p.backoff_ms(std::numeric_limits<uint32_t>::max()) == max_time_ms);
  // The slowest growth still reaches the largest cap quickly.
  p.backoff_initial_ms = 1;
  p.backoff_multiplier_permille = 1'001;
  BOOST_TEST(p.backoff_ms(std::numeric_limits<uint32_t>::max()) == max_time_ms);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(topic_must_be_utf8) {
  // Protobuf stores text fields as UTF-8 and refuses to read back anything
  // else, so a topic that is not would be accepted and then lost.
  dally::core::task t;
  t.topic = "bad\xff topic";
  auto err = t.validate(0);
  BOOST_CHECK(err.code() == dally::core::errc::invalid_topic);
  BOOST_CHECK_NE(err.message().find("UTF-8"), std::string::npos);
  t.topic = "t\xc3\xa9l\xc3\xa9phone";
  BOOST_CHECK(!t.validate(0));
}

BOOST_AUTO_TEST_CASE(utf8_validation) {
  BOOST_TEST(dally::core::is_valid_utf8(""));
  BOOST_TEST(dally::core::is_valid_utf8("plain ascii"));
  BOOST_TEST(dally::core::is_valid_utf8(
    "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));              // é € 😀
  BOOST_TEST(!dally::core::is_valid_utf8("\x80"));         // stray continuation
  BOOST_TEST(!dally::core::is_valid_utf8("\xc3"));         // truncated
  BOOST_TEST(!dally::core::is_valid_utf8("\xe0\x80\xaf")); // overlong
  BOOST_TEST(!dally::core::is_valid_utf8("\xed\xa0\x80")); // surrogate
  BOOST_TEST(!dally::core::is_valid_utf8("\xf4\x90\x80\x80")); // above U+10FFFF
  BOOST_TEST(!dally::core::is_valid_utf8("\xf8\x88\x80\x80\x80"));
}
