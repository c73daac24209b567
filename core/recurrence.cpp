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
  rec.kind_ = recurrence_kind::fixed_rate;
  rec.period_ms_ = period_ms;
  if (auto err = apply_bounds(rec, now_ms, period_ms, bounds, limits))
    return err;
  return rec;
}

result<recurrence> recurrence::fixed_delay(int64_t now_ms, int64_t period_ms,
                                           const recurrence_bounds& bounds,
                                           const task_limits& limits) {
  if (auto err = check_period(period_ms, limits, "period"))
    return err;
  recurrence rec;
  rec.kind_ = recurrence_kind::fixed_delay;
  rec.period_ms_ = period_ms;
  if (auto err = apply_bounds(rec, now_ms, period_ms, bounds, limits))
    return err;
  return rec;
}

result<recurrence> recurrence::intervals(int64_t now_ms,
                                         std::vector<int64_t> intervals_ms,
                                         bool cyclic,
                                         const recurrence_bounds& bounds,
                                         const task_limits& limits) {
  recurrence rec;
  rec.kind_ = recurrence_kind::intervals;
  rec.cyclic_ = cyclic;
  if (auto err = apply_intervals(rec, std::move(intervals_ms), limits))
    return err;
  if (auto err = apply_bounds(rec, now_ms, 0, bounds, limits))
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
  rec.kind_ = recurrence_kind::cron;
  rec.cron_.expr = std::make_shared<const cron_expression>(std::move(*expr));
  if (auto err = apply_bounds(rec, now_ms, 0, bounds, limits))
    return err;
  return rec;
}

error recurrence::apply_bounds(recurrence& rec, int64_t now_ms,
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
    rec.start_ms_ = start;
  } else if (auto start = add_time(now_ms, default_start_delay_ms)) {
    rec.start_ms_ = *start;
  } else {
    return error{errc::invalid_time,
                 "default start (now " + format_time(now_ms) + " plus " +
                   format_duration(default_start_delay_ms) + ") lies beyond " +
                   format_time(max_time_ms) +
                   ", the end of the supported range"};
  }
  if (auto err = apply_end_and_count(rec, bounds.end_ms, bounds.max_count))
    return err;
  if (!rec.first_fire(now_ms)) {
    std::string why = rec.end_ms_ ? " up to end " + format_time(*rec.end_ms_)
                                  : " before " + format_time(max_time_ms);
    return error{errc::no_occurrence, std::string{to_string(rec.kind_)} +
                                        " recurrence has no occurrence " +
                                        "after now " + format_time(now_ms) +
                                        why};
  }
  return {};
}

error recurrence::apply_end_and_count(recurrence& rec,
                                      std::optional<int64_t> end_ms,
                                      std::optional<uint64_t> max_count) {
  if (end_ms) {
    auto end = *end_ms;
    if (!is_valid_time(end))
      return bad_time("end", end);
    if (end < rec.start_ms_)
      return error{errc::invalid_time, "end " + format_time(end) +
                                         " is before start " +
                                         format_time(rec.start_ms_)};
    rec.end_ms_ = end;
  }
  if (max_count) {
    if (*max_count == 0)
      return error{errc::invalid_count,
                   "max_count is 0; a recurrence must fire at least once"};
    rec.max_count_ = max_count;
  }
  return {};
}

error recurrence::apply_intervals(recurrence& rec,
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
  rec.offsets_ms_.clear();
  rec.offsets_ms_.reserve(intervals_ms.size());
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
    rec.offsets_ms_.push_back(sum);
  }
  rec.intervals_ms_ = std::move(intervals_ms);
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
  rec.kind_ = fields.kind;
  switch (fields.kind) {
    case recurrence_kind::at:
      if (!is_valid_time(fields.at_ms))
        return bad_time("due time", fields.at_ms);
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
      rec.at_ms_ = fields.at_ms;
      rec.delay_ms_ = fields.delay_ms;
      return rec;
    case recurrence_kind::fixed_rate:
    case recurrence_kind::fixed_delay:
      if (auto err = check_period(fields.period_ms, unlimited, "period"))
        return err;
      rec.period_ms_ = fields.period_ms;
      break;
    case recurrence_kind::intervals:
      if (auto err = apply_intervals(rec, fields.intervals_ms, unlimited))
        return err;
      rec.cyclic_ = fields.cyclic;
      break;
    case recurrence_kind::cron: {
      auto expr = cron_expression::parse(fields.cron, fields.zone);
      if (!expr)
        return expr.err();
      rec.cron_.expr =
        std::make_shared<const cron_expression>(std::move(*expr));
      break;
    }
    default:
      return error{errc::invalid_period,
                   "recurrence kind " +
                     std::to_string(static_cast<int>(fields.kind)) +
                     " is unknown"};
  }
  if (!is_valid_time(fields.start_ms))
    return bad_time("start", fields.start_ms);
  rec.start_ms_ = fields.start_ms;
  if (auto err = apply_end_and_count(rec, fields.end_ms, fields.max_count))
    return err;
  return rec;
}

std::optional<int64_t> recurrence::first_fire(int64_t now_ms) const {
  switch (kind_) {
    case recurrence_kind::at:
    case recurrence_kind::after:
      return at_ms_;
    case recurrence_kind::fixed_delay:
      return start_ms_;
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
  // Nothing lies strictly after the end of the supported range; returning
  // early also keeps the arithmetic below far from int64 limits.
  if (after_ms >= max_time_ms)
    return std::nullopt;
  if (max_count_ && fired_count >= *max_count_)
    return std::nullopt;
  std::optional<int64_t> next;
  switch (kind_) {
    case recurrence_kind::at:
    case recurrence_kind::after:
      if (fired_count == 0 && at_ms_ > after_ms)
        next = at_ms_;
      break;
    case recurrence_kind::fixed_delay:
      next = add_time(std::max<int64_t>(after_ms, min_time_ms), period_ms_);
      if (next && *next < start_ms_)
        next = start_ms_;
      break;
    case recurrence_kind::intervals:
      if (!cyclic_ && fired_count >= intervals_ms_.size())
        return std::nullopt;
      next = next_interval_point(after_ms);
      break;
    case recurrence_kind::fixed_rate:
    case recurrence_kind::cron:
      next = next_point(after_ms);
      break;
  }
  if (next && end_ms_ && *next > *end_ms_)
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
  if (kind_ == recurrence_kind::cron) {
    // At or after start: strictly after start - 1 (start >= 0).
    return cron_.expr->next_after(std::max(after_ms, start_ms_ - 1));
  }
  if (after_ms < start_ms_)
    return start_ms_;
  auto steps = (after_ms - start_ms_) / period_ms_ + 1;
  auto offset = checked_mul(steps, period_ms_);
  if (!offset)
    return std::nullopt;
  return add_time(start_ms_, *offset);
}

std::optional<int64_t> recurrence::next_interval_point(int64_t after_ms) const {
  auto first = add_time(start_ms_, offsets_ms_.front());
  if (!first)
    return std::nullopt;
  if (after_ms < *first)
    return first;
  auto cycle_ms = offsets_ms_.back();
  auto elapsed_ms = after_ms - start_ms_;
  auto pass = elapsed_ms / cycle_ms;
  auto rest_ms = elapsed_ms % cycle_ms;
  // The first occurrence of this pass later than rest_ms; there is one,
  // since rest_ms < cycle_ms == offsets_ms_.back().
  auto index =
    std::upper_bound(offsets_ms_.begin(), offsets_ms_.end(), rest_ms) -
    offsets_ms_.begin();
  if (!cyclic_ && pass > 0)
    return std::nullopt;
  auto pass_start = checked_mul(pass, cycle_ms);
  if (!pass_start)
    return std::nullopt;
  auto offset = checked_add(*pass_start, offsets_ms_[index]);
  if (!offset)
    return std::nullopt;
  return add_time(start_ms_, *offset);
}

} // namespace dally::core
