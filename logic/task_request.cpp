#include "logic/task_request.hpp"

#include <string_view>
#include <utility>
#include <vector>

#include "core/task_lifecycle.hpp"
#include "core/time_range.hpp"
#include "storage/record_codec.hpp"

namespace dally::logic {

using core::errc;

namespace {

core::result<core::recurrence> to_recurrence(const v1::RecurrenceSpec& when,
                                             int64_t now_ms,
                                             const core::task_limits& limits) {
  using spec = v1::RecurrenceSpec;
  core::recurrence_bounds bounds;
  if (when.has_start_ms())
    bounds.start_ms = when.start_ms();
  if (when.has_end_ms())
    bounds.end_ms = when.end_ms();
  if (when.has_max_count())
    bounds.max_count = when.max_count();
  bool bounded = bounds.start_ms || bounds.end_ms || bounds.max_count;
  auto one_shot = [&](const char* what) -> core::error {
    if (!bounded)
      return {};
    return core::error{errc::invalid_request,
                       std::string{what} +
                         " takes no start_ms, end_ms or max_count; those "
                         "bound periodic kinds"};
  };
  switch (when.kind_case()) {
    case spec::KIND_NOT_SET:
      // A kind from a newer client arrives as an unknown field: refuse it
      // rather than firing at once.
      if (!when.GetReflection()->GetUnknownFields(when).empty())
        return core::error{errc::invalid_request,
                           "the recurrence kind is unknown to this node"};
      if (auto err = one_shot("a task without a recurrence kind"))
        return err;
      return core::recurrence::at(now_ms);
    case spec::kAtMs:
      if (auto err = one_shot("at_ms"))
        return err;
      return core::recurrence::at(when.at_ms());
    case spec::kInMs:
      if (auto err = one_shot("in_ms"))
        return err;
      return core::recurrence::after(now_ms, when.in_ms(), limits);
    case spec::kEveryMs:
      return core::recurrence::fixed_rate(now_ms, when.every_ms(), bounds,
                                          limits);
    case spec::kEveryAfterDoneMs:
      return core::recurrence::fixed_delay(now_ms, when.every_after_done_ms(),
                                           bounds, limits);
    case spec::kIntervals: {
      const auto& list = when.intervals().intervals_ms();
      return core::recurrence::intervals(
        now_ms, std::vector<int64_t>(list.begin(), list.end()),
        when.intervals().cyclic(), bounds, limits);
    }
    case spec::kCron: {
      const auto& zone = when.cron().zone();
      return core::recurrence::cron(now_ms, when.cron().expression(),
                                    zone.empty() ? std::string_view{"UTC"}
                                                 : std::string_view{zone},
                                    bounds, limits);
    }
  }
  return core::error{errc::invalid_request,
                     "recurrence kind " +
                       std::to_string(static_cast<int>(when.kind_case())) +
                       " is unknown"};
}

/// to_task with the request's topic and payload given apart, so that a
/// consumed request's strings can move instead of being copied.
core::result<core::task> make_task(const v1::ScheduleRequest& req,
                                   std::string topic, std::string payload,
                                   int64_t now_ms, const shard_options& opts) {
  auto rec = to_recurrence(req.when(), now_ms, opts.limits);
  if (!rec)
    return rec.err();
  core::task t;
  t.topic = std::move(topic);
  t.payload = std::move(payload);
  t.recurrence = std::move(*rec);
  if (req.has_policy()) {
    // Not storage::from_proto: a bad policy from a client is invalid_policy,
    // not a corrupt record.
    const auto& p = req.policy();
    t.policy.lease_ms = p.lease_ms();
    t.policy.max_attempts = p.max_attempts();
    t.policy.backoff_initial_ms = p.backoff_initial_ms();
    t.policy.backoff_multiplier_permille = p.backoff_multiplier_permille();
    t.policy.backoff_max_ms = p.backoff_max_ms();
  } else {
    t.policy = opts.default_policy;
  }
  auto due = lifecycle_of(opts).first_due(t, now_ms);
  if (!due)
    return core::error{errc::no_occurrence,
                       "the recurrence has no occurrence after " +
                         core::format_time(now_ms)};
  t.due_ms = *due;
  if (req.has_idempotency_key())
    t.idempotency_key = req.idempotency_key();
  if (auto err = t.validate(now_ms, opts.limits))
    return err;
  return t;
}

} // namespace

core::result<core::task> to_task(const v1::ScheduleRequest& req, int64_t now_ms,
                                 const shard_options& opts) {
  return make_task(req, req.topic(), req.payload(), now_ms, opts);
}

core::result<core::task> to_task(v1::ScheduleRequest&& req, int64_t now_ms,
                                 const shard_options& opts) {
  auto topic = std::move(*req.mutable_topic());
  auto payload = std::move(*req.mutable_payload());
  return make_task(req, std::move(topic), std::move(payload), now_ms, opts);
}

v1::TaskRecord to_wire(const core::task_record& rec) {
  v1::TaskRecord out;
  // Only a topic that is not UTF-8 fails, and validation refused those.
  static_cast<void>(storage::to_proto(rec, out));
  return out;
}

} // namespace dally::logic
