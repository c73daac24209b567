#include "core/task.hpp"

#include <cstdio>

#include "core/time_range.hpp"
#include "core/utf8.hpp"

namespace dally::core {

namespace {

std::string hex_byte(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02x", c);
  return buf;
}

} // namespace

error validate_topic(const std::string& topic, const task_limits& limits) {
  if (topic.empty())
    return error{errc::invalid_topic, "topic is empty"};
  if (topic.size() > limits.max_topic_bytes)
    return error{errc::invalid_topic,
                 "topic is " + std::to_string(topic.size()) +
                   " bytes long; the maximum is " +
                   std::to_string(limits.max_topic_bytes) + " bytes"};
  for (size_t i = 0; i < topic.size(); ++i) {
    auto c = static_cast<unsigned char>(topic[i]);
    if (c < 0x20 || c == 0x7f)
      return error{errc::invalid_topic, "topic contains control character " +
                                          hex_byte(c) + " at byte " +
                                          std::to_string(i)};
  }
  if (!is_valid_utf8(topic))
    return error{errc::invalid_topic, "topic is not valid UTF-8"};
  return {};
}

error task::validate(int64_t now_ms, const task_limits& limits) const {
  if (auto err = validate_topic(topic, limits))
    return err;
  if (payload.size() > limits.max_payload_bytes)
    return error{errc::payload_too_large,
                 "payload is " + std::to_string(payload.size()) +
                   " bytes; the maximum is " +
                   std::to_string(limits.max_payload_bytes) + " bytes"};
  if (idempotency_key) {
    if (idempotency_key->empty())
      return error{errc::invalid_idempotency_key,
                   "idempotency key is empty; omit it instead"};
    if (idempotency_key->size() > limits.max_idempotency_key_bytes)
      return error{
        errc::invalid_idempotency_key,
        "idempotency key is " + std::to_string(idempotency_key->size()) +
          " bytes long; the maximum is " +
          std::to_string(limits.max_idempotency_key_bytes) + " bytes"};
  }
  // Messages are built only on failure: validation is on the hot path.
  auto range = [] {
    return " is outside the supported range " + format_time(min_time_ms) +
           " to " + format_time(max_time_ms);
  };
  if (!is_valid_time(now_ms))
    return error{errc::invalid_time, "now " + format_time(now_ms) + range()};
  if (!is_valid_time(due_ms))
    return error{errc::invalid_time,
                 "due time " + format_time(due_ms) + range()};
  if (due_ms > now_ms && due_ms - now_ms > limits.max_delay_ms)
    return error{errc::delay_too_large, "due time " + format_time(due_ms) +
                                          " lies " +
                                          format_duration(due_ms - now_ms) +
                                          " after now; the maximum delay is " +
                                          format_duration(limits.max_delay_ms)};
  return policy.validate(limits.max_delay_ms);
}

} // namespace dally::core
