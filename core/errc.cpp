#include "core/errc.hpp"

namespace dally::core {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::none:
      return "none";
    case errc::invalid_time:
      return "invalid_time";
    case errc::delay_too_large:
      return "delay_too_large";
    case errc::invalid_period:
      return "invalid_period";
    case errc::empty_intervals:
      return "empty_intervals";
    case errc::invalid_count:
      return "invalid_count";
    case errc::malformed_cron:
      return "malformed_cron";
    case errc::unknown_time_zone:
      return "unknown_time_zone";
    case errc::invalid_topic:
      return "invalid_topic";
    case errc::payload_too_large:
      return "payload_too_large";
    case errc::invalid_policy:
      return "invalid_policy";
    case errc::no_occurrence:
      return "no_occurrence";
    case errc::not_found:
      return "not_found";
    case errc::duplicate_id:
      return "duplicate_id";
    case errc::invalid_idempotency_key:
      return "invalid_idempotency_key";
    case errc::too_many_intervals:
      return "too_many_intervals";
    case errc::io_error:
      return "io_error";
    case errc::no_space:
      return "no_space";
    case errc::store_locked:
      return "store_locked";
    case errc::corrupt_record:
      return "corrupt_record";
    case errc::store_unavailable:
      return "store_unavailable";
    case errc::stale_epoch:
      return "stale_epoch";
    case errc::stale_delivery:
      return "stale_delivery";
    case errc::invalid_request:
      return "invalid_request";
    case errc::unavailable:
      return "unavailable";
    case errc::idempotency_conflict:
      return "idempotency_conflict";
    case errc::request_too_large:
      return "request_too_large";
    case errc::overloaded:
      return "overloaded";
  }
  return "unknown";
}

} // namespace dally::core
