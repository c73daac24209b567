#include "core/delivery_policy.hpp"

#include <string>
#include <utility>

#include "core/time_range.hpp"

namespace dally::core {

namespace {

error bad_policy(std::string text) {
  return error{errc::invalid_policy, "delivery policy: " + std::move(text)};
}

} // namespace

int64_t delivery_policy::backoff_ms(uint32_t attempt) const noexcept {
  if (attempt == 0 || backoff_initial_ms <= 0 || backoff_max_ms <= 0)
    return 0;
  auto wait =
    backoff_initial_ms < backoff_max_ms ? backoff_initial_ms : backoff_max_ms;
  // Stops at the cap, at a fixed point (multiplier 1000 or less), or after
  // attempt - 1 steps. With a multiplier above 1000 the wait grows by at
  // least 1 ms per step and geometrically once it is large, so the loop
  // reaches any int64 cap within a few tens of thousands of steps.
  for (uint32_t i = 1; i < attempt && wait < backoff_max_ms; ++i) {
    int64_t scaled = 0;
    if (__builtin_mul_overflow(wait, int64_t{backoff_multiplier_permille},
                               &scaled))
      return backoff_max_ms;
    auto next = scaled / 1000 + (scaled % 1000 != 0 ? 1 : 0);
    if (next <= wait)
      break;
    wait = next < backoff_max_ms ? next : backoff_max_ms;
  }
  return wait;
}

error delivery_policy::validate(int64_t max_wait_ms) const {
  auto too_long = [max_wait_ms](const char* field, int64_t value) {
    return bad_policy(std::string{field} + " is " + std::to_string(value) +
                      " ms; the maximum is the maximum delay, " +
                      format_duration(max_wait_ms));
  };
  if (lease_ms <= 0)
    return bad_policy("lease_ms is " + std::to_string(lease_ms) +
                      "; a lease must be positive");
  if (lease_ms > max_wait_ms)
    return too_long("lease_ms", lease_ms);
  if (max_attempts < 1)
    return bad_policy("max_attempts is 0; at least 1 delivery is needed");
  if (backoff_initial_ms < 0)
    return bad_policy("backoff_initial_ms is " +
                      std::to_string(backoff_initial_ms) +
                      "; a wait cannot be negative");
  if (backoff_initial_ms > max_wait_ms)
    return too_long("backoff_initial_ms", backoff_initial_ms);
  if (backoff_multiplier_permille < 1000)
    return bad_policy("backoff_multiplier_permille is " +
                      std::to_string(backoff_multiplier_permille) +
                      "; it must be >= 1000 (1.0x) so that waits never "
                      "shrink");
  if (backoff_max_ms < backoff_initial_ms)
    return bad_policy("backoff_max_ms (" + std::to_string(backoff_max_ms) +
                      ") is below backoff_initial_ms (" +
                      std::to_string(backoff_initial_ms) + ")");
  if (backoff_max_ms > max_wait_ms)
    return too_long("backoff_max_ms", backoff_max_ms);
  return {};
}

} // namespace dally::core
