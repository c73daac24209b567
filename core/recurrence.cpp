#include "core/recurrence.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "core/time_range.hpp"

namespace dally::core {

namespace {

error bad_time(const std::string& what, int64_t t_ms) {
  return error{errc::invalid_time, what + " " + format_time(t_ms) +
                                     " is outside the supported range " +
                                     format_time(min_time_ms) + " to " +
                                     format_time(max_time_ms)};
}

error check_now(int64_t now_ms) {
  if (!is_valid_time(now_ms))
    return bad_time("now", now_ms);
  return {};
}

error check_period(int64_t period_ms, const task_limits& limits,
                   const std::string& what) {
  if (period_ms <= 0)
    return error{errc::invalid_period, what + " is " +
                                         format_duration(period_ms) +
                                         "; it must be positive"};
  if (period_ms > limits.max_delay_ms)
    return error{errc::delay_too_large, what + " is " +
                                          format_duration(period_ms) +
                                          "; it exceeds the maximum delay " +
                                          format_duration(limits.max_delay_ms)};
  return {};
}

} // namespace

std::string_view to_string(recurrence_kind kind) noexcept {
  switch (kind) {
    case recurrence_kind::at:
      return "at";
    case recurrence_kind::after:
      return "after";
    case recurrence_kind::fixed_rate:
      return "fixed_rate";
    case recurrence_kind::fixed_delay:
      return "fixed_delay";
    case recurrence_kind::intervals:
      return "intervals";
    case recurrence_kind::cron:
      return "cron";
  }
  return "unknown";
}

result<recurrence> recurrence::at(int64_t at_ms) {
  if (!is_valid_time(at_ms))
    return bad_time("due time", at_ms);
  recurrence rec;
  rec.kind_ = recurrence_kind::at;
  rec.at_ms_ = at_ms;
  return rec;
}

result<recurrence> recurrence::after(int64_t now_ms, int64_t delay_ms,
                                     const task_limits& limits) {
  if (auto err = check_now(now_ms))
    return err;
  if (delay_ms < 0)
    return error{errc::invalid_time,
                 "delay " + format_duration(delay_ms) + " is negative"};
  if (delay_ms > limits.max_delay_ms)
    return error{errc::delay_too_large, "delay " + format_duration(delay_ms) +
                                          " exceeds the maximum delay " +
                                          format_duration(limits.max_delay_ms)};
  auto due = add_time(now_ms, delay_ms);
  if (!due)
    return error{errc::invalid_time,
                 "now " + format_time(now_ms) + " plus delay " +
                   format_duration(delay_ms) + " lies beyond " +
                   format_time(max_time_ms) + ", the end of the " +
                   "supported range"};
  recurrence rec;
  rec.kind_ = recurrence_kind::after;
  rec.at_ms_ = *due;
  rec.delay_ms_ = delay_ms;
  return rec;
}

result<recurrence> recurrence::fixed_rate(int64_t now_ms, int64_t period_ms,
                                          const recurrence_bounds& bounds,
                                          const task_limits& limits) {
  if (auto err = check_period(period_ms, limits, "period"))
    return err;
  recurrence rec;
  auto& sched = start_building(rec, recurrence_kind::fixed_rate);
  sched.period_ms = period_ms;
  if (auto err = apply_bounds(rec, sched, now_ms, period_ms, bounds, limits))
    return err;
  return rec;
}

result<recurrence> recurrence::fixed_delay(int64_t now_ms, int64_t period_ms,
                                           const recurrence_bounds& bounds,
                                           const task_limits& limits) {
  if (auto err = check_period(period_ms, limits, "period"))
    return err;
  recurrence rec;
  auto& sched = start_building(rec, recurrence_kind::fixed_delay);
  sched.period_ms = period_ms;
  if (auto err = apply_bounds(rec, sched, now_ms, period_ms, bounds, limits))
    return err;
  return rec;
}

result<recurrence> recurrence::intervals(int64_t now_ms,
                                         std::vector<int64_t> intervals_ms,
                                         bool cyclic,
                                         const recurrence_bounds& bounds,
                                         const task_limits& limits) {
  recurrence rec;
  auto& sched = start_building(rec, recurrence_kind::intervals);
  sched.cyclic = cyclic;
  if (auto err = apply_intervals(sched, std::move(intervals_ms), limits))
    return err;
  if (auto err = apply_bounds(rec, sched, now_ms, 0, bounds, limits))
    return err;
  return rec;
}

result<recurrence> recurrence::cron(int64_t now_ms, std::string_view expression,
                                    std::string_view zone_name,
                                    const recurrence_bounds& bounds,
                                    const task_limits& limits) {
  auto expr = cron_expression::parse(expression, zone_name);
  if (!expr)
    return expr.err();
  recurrence rec;
  auto& sched = start_building(rec, recurrence_kind::cron);
  sched.cron = std::move(*expr);
  if (auto err = apply_bounds(rec, sched, now_ms, 0, bounds, limits))
    return err;
  return rec;
}

recurrence::schedule& recurrence::start_building(recurrence& rec,
                                                 recurrence_kind kind) {
  auto sched = std::make_shared<schedule>();
  rec.kind_ = kind;
  rec.periodic_ = sched;
  return *sched;
}

error recurrence::apply_bounds(recurrence& rec, schedule& sched, int64_t now_ms,
                               int64_t default_start_delay_ms,
                               const recurrence_bounds& bounds,
                               const task_limits& limits) {
  if (auto err = check_now(now_ms))
    return err;
  if (bounds.start_ms) {
    auto start = *bounds.start_ms;
    if (!is_valid_time(start))
      return bad_time("start", start);
    if (start > now_ms && start - now_ms > limits.max_delay_ms)
      return error{errc::delay_too_large,
                   "start " + format_time(start) + " lies " +
                     format_duration(start - now_ms) +
                     " after now; the maximum delay is " +
                     format_duration(limits.max_delay_ms)};
    sched.start_ms = start;
  } else if (auto start = add_time(now_ms, default_start_delay_ms)) {
    sched.start_ms = *start;
  } else {
    return error{errc::invalid_time,
                 "default start (now " + format_time(now_ms) + " plus " +
                   format_duration(default_start_delay_ms) + ") lies beyond " +
                   format_time(max_time_ms) +
                   ", the end of the supported range"};
  }
  if (auto err = apply_end_and_count(sched, bounds.end_ms, bounds.max_count))
    return err;
  if (!rec.first_fire(now_ms)) {
    std::string why = sched.end_ms ? " up to end " + format_time(*sched.end_ms)
                                   : " before " + format_time(max_time_ms);
    return error{errc::no_occurrence, std::string{to_string(rec.kind_)} +
                                        " recurrence has no occurrence " +
                                        "after now " + format_time(now_ms) +
                                        why};
  }
  return {};
}

error recurrence::apply_end_and_count(schedule& sched,
                                      std::optional<int64_t> end_ms,
                                      std::optional<uint64_t> max_count) {
  if (end_ms) {
    auto end = *end_ms;
    if (!is_valid_time(end))
      return bad_time("end", end);
    if (end < sched.start_ms)
      return error{errc::invalid_time, "end " + format_time(end) +
                                         " is before start " +
                                         format_time(sched.start_ms)};
    sched.end_ms = end;
  }
  if (max_count) {
    if (*max_count == 0)
      return error{errc::invalid_count,
                   "max_count is 0; a recurrence must fire at least once"};
    sched.max_count = max_count;
  }
  return {};
}

error recurrence::apply_intervals(schedule& sched,
                                  std::vector<int64_t> intervals_ms,
                                  const task_limits& limits) {
  if (intervals_ms.empty())
    return error{errc::empty_intervals,
                 "interval list is empty; it needs at least one interval"};
  if (intervals_ms.size() > limits.max_intervals)
    return error{errc::too_many_intervals,
                 "interval list has " + std::to_string(intervals_ms.size()) +
                   " entries; the maximum is " +
                   std::to_string(limits.max_intervals)};
  sched.offsets_ms.clear();
  sched.offsets_ms.reserve(intervals_ms.size());
  int64_t sum = 0;
  for (size_t i = 0; i < intervals_ms.size(); ++i) {
    auto what = "interval " + std::to_string(i);
    if (auto err = check_period(intervals_ms[i], limits, what))
      return err;
    auto next = checked_add(sum, intervals_ms[i]);
    if (!next)
      return error{errc::invalid_time, "intervals 0 to " + std::to_string(i) +
                                         " add up to more than int64 ms"};
    sum = *next;
    sched.offsets_ms.push_back(sum);
  }
  sched.intervals_ms = std::move(intervals_ms);
  return {};
}

result<recurrence> recurrence::restore(const recurrence_fields& fields) {
  // The limits were enforced when the value was scheduled; a stored value
  // must load even if they have been lowered since.
  const task_limits unlimited{
    .max_delay_ms = std::numeric_limits<int64_t>::max(),
    .max_intervals = std::numeric_limits<size_t>::max(),
  };
  recurrence rec;
  switch (fields.kind) {
    case recurrence_kind::at:
      if (!is_valid_time(fields.at_ms))
        return bad_time("due time", fields.at_ms);
      rec.kind_ = fields.kind;
      rec.at_ms_ = fields.at_ms;
      return rec;
    case recurrence_kind::after:
      if (!is_valid_time(fields.at_ms))
        return bad_time("due time", fields.at_ms);
      if (fields.delay_ms < 0 || fields.delay_ms > fields.at_ms - min_time_ms)
        return error{errc::invalid_time,
                     "delay " + format_duration(fields.delay_ms) +
                       " is negative or reaches before " +
                       format_time(min_time_ms) + " from due time " +
                       format_time(fields.at_ms)};
      rec.kind_ = fields.kind;
      rec.at_ms_ = fields.at_ms;
      rec.delay_ms_ = fields.delay_ms;
      return rec;
    case recurrence_kind::fixed_rate:
    case recurrence_kind::fixed_delay:
    case recurrence_kind::intervals:
    case recurrence_kind::cron:
      break;
    default:
      return error{errc::invalid_period,
                   "recurrence kind " +
                     std::to_string(static_cast<int>(fields.kind)) +
                     " is unknown"};
  }
  auto& sched = start_building(rec, fields.kind);
  switch (fields.kind) {
    case recurrence_kind::fixed_rate:
    case recurrence_kind::fixed_delay:
      if (auto err = check_period(fields.period_ms, unlimited, "period"))
        return err;
      sched.period_ms = fields.period_ms;
      break;
    case recurrence_kind::intervals:
      if (auto err = apply_intervals(sched, fields.intervals_ms, unlimited))
        return err;
      sched.cyclic = fields.cyclic;
      break;
    default: {
      auto expr = cron_expression::parse(fields.cron, fields.zone);
      if (!expr)
        return expr.err();
      sched.cron = std::move(*expr);
      break;
    }
  }
  if (!is_valid_time(fields.start_ms))
    return bad_time("start", fields.start_ms);
  sched.start_ms = fields.start_ms;
  if (auto err = apply_end_and_count(sched, fields.end_ms, fields.max_count))
    return err;
  return rec;
}

std::optional<int64_t> recurrence::first_fire(int64_t now_ms) const {
  const auto& sched = periodic();
  switch (kind_) {
    case recurrence_kind::at:
    case recurrence_kind::after:
      return at_ms_;
    case recurrence_kind::fixed_delay:
      return sched.start_ms;
    case recurrence_kind::fixed_rate:
    case recurrence_kind::intervals:
      // At or after now: strictly after now - 1 (now >= 0, no overflow).
      return next_fire(std::max<int64_t>(now_ms, min_time_ms) - 1, 0);
    case recurrence_kind::cron:
      return next_fire(now_ms, 0);
  }
  return std::nullopt;
}

std::optional<int64_t> recurrence::next_fire(int64_t after_ms,
                                             uint64_t fired_count) const {
  const auto& sched = periodic();
  // Nothing lies strictly after the end of the supported range; returning
  // early also keeps the arithmetic below far from int64 limits.
  if (after_ms >= max_time_ms)
    return std::nullopt;
  if (sched.max_count && fired_count >= *sched.max_count)
    return std::nullopt;
  std::optional<int64_t> next;
  switch (kind_) {
    case recurrence_kind::at:
    case recurrence_kind::after:
      if (fired_count == 0 && at_ms_ > after_ms)
        next = at_ms_;
      break;
    case recurrence_kind::fixed_delay:
      next =
        add_time(std::max<int64_t>(after_ms, min_time_ms), sched.period_ms);
      if (next && *next < sched.start_ms)
        next = sched.start_ms;
      break;
    case recurrence_kind::intervals:
      if (!sched.cyclic && fired_count >= sched.intervals_ms.size())
        return std::nullopt;
      next = next_interval_point(after_ms);
      break;
    case recurrence_kind::fixed_rate:
    case recurrence_kind::cron:
      next = next_point(after_ms);
      break;
  }
  if (next && sched.end_ms && *next > *sched.end_ms)
    return std::nullopt;
  return next;
}

std::optional<int64_t>
recurrence::next_after_completion(int64_t due_ms, int64_t completed_ms,
                                  uint64_t fired_count) const {
  if (kind_ == recurrence_kind::fixed_delay)
    return next_fire(completed_ms, fired_count);
  return next_fire(std::max(due_ms, completed_ms), fired_count);
}

std::optional<int64_t> recurrence::next_point(int64_t after_ms) const {
  const auto& sched = periodic();
  if (kind_ == recurrence_kind::cron) {
    // At or after start: strictly after start - 1 (start >= 0).
    return sched.cron->next_after(std::max(after_ms, sched.start_ms - 1));
  }
  if (after_ms < sched.start_ms)
    return sched.start_ms;
  auto steps = (after_ms - sched.start_ms) / sched.period_ms + 1;
  auto offset = checked_mul(steps, sched.period_ms);
  if (!offset)
    return std::nullopt;
  return add_time(sched.start_ms, *offset);
}

std::optional<int64_t> recurrence::next_interval_point(int64_t after_ms) const {
  const auto& sched = periodic();
  auto first = add_time(sched.start_ms, sched.offsets_ms.front());
  if (!first)
    return std::nullopt;
  if (after_ms < *first)
    return first;
  auto cycle_ms = sched.offsets_ms.back();
  auto elapsed_ms = after_ms - sched.start_ms;
  auto pass = elapsed_ms / cycle_ms;
  auto rest_ms = elapsed_ms % cycle_ms;
  // The first occurrence of this pass later than rest_ms; there is one,
  // since rest_ms < cycle_ms == the last offset.
  auto index = std::upper_bound(sched.offsets_ms.begin(),
                                sched.offsets_ms.end(), rest_ms) -
               sched.offsets_ms.begin();
  if (!sched.cyclic && pass > 0)
    return std::nullopt;
  auto pass_start = checked_mul(pass, cycle_ms);
  if (!pass_start)
    return std::nullopt;
  auto offset = checked_add(*pass_start, sched.offsets_ms[index]);
  if (!offset)
    return std::nullopt;
  return add_time(sched.start_ms, *offset);
}

} // namespace dally::core
