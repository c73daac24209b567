#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cron_expression.hpp"
#include "core/result.hpp"
#include "core/task_limits.hpp"

namespace dally::core {

/// Optional limits shared by the periodic kinds (fixed rate, fixed delay,
/// interval lists, cron).
struct recurrence_bounds {
  /// Where the schedule begins; see each factory for its default and
  /// meaning. Must be a valid time no further than max_delay_ms from now.
  std::optional<int64_t> start_ms = std::nullopt;

  /// No occurrence after this instant (inclusive bound). Must be >= start.
  std::optional<int64_t> end_ms = std::nullopt;

  /// Fire at most this many times. Must be >= 1.
  std::optional<uint64_t> max_count = std::nullopt;
};

/// The shapes a recurrence can take.
enum class recurrence_kind : uint8_t {
  /// Once, at an absolute instant.
  at,
  /// Once, a delay after the instant the task was scheduled.
  after,
  /// Occurrences at start, start + period, start + 2 * period, ...
  fixed_rate,
  /// First at start, then each one `period` after the previous completed.
  fixed_delay,
  /// Occurrences at start + i0, start + i0 + i1, ... (cyclic: repeating the
  /// list forever).
  intervals,
  /// Matches of a cron expression in a time zone.
  cron,
};

/// Returns the enumerator's name, e.g. "fixed_rate".
std::string_view to_string(recurrence_kind kind) noexcept;

/// Every field of a recurrence that its accessors expose, as stored on disk
/// or sent over the wire, for rebuilding it with `recurrence::restore`.
struct recurrence_fields {
  recurrence_kind kind = recurrence_kind::at;
  int64_t at_ms = 0;
  int64_t delay_ms = 0;
  int64_t period_ms = 0;
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms = std::nullopt;
  std::optional<uint64_t> max_count = std::nullopt;
  std::vector<int64_t> intervals_ms;
  bool cyclic = false;
  /// cron: the expression text and the zone name.
  std::string cron;
  std::string zone;
};

/// When a task fires: once at an instant, once after a delay, periodically
/// at a fixed rate or with a fixed delay, along a list of irregular
/// intervals, or per a cron expression in a time zone.
///
/// A value type, built only by the validating factories, so every instance
/// is valid. Nothing here reads a clock: "now" is always an argument. All
/// times are UTC ms in [min_time_ms, max_time_ms]; an occurrence that would
/// fall beyond max_time_ms does not exist (the schedule is exhausted).
///
/// Anchoring: for schedule-anchored kinds (at, after, fixed rate,
/// intervals, cron) occurrences are fixed points on a timeline and
/// next_fire() takes the previous occurrence's due time. For fixed delay
/// the next occurrence depends on when the previous one completed, and
/// next_fire() takes the completion time.
///
/// Catch-up: missed occurrences are never replayed in a burst. A task that
/// fires late (downtime, slow consumer) fires once; the shard then asks
/// next_after_completion(), which for schedule-anchored kinds returns the
/// first schedule point strictly after both the late occurrence's due time
/// and the completion time. Skipped points do not count toward max_count.
///
/// Persisting: the accessors expose every stored field; `restore` rebuilds
/// an equal value from them.
class recurrence {
public:
  /// Once at time 0: fires immediately. Exists so that a task can be
  /// default-constructed; real tasks use a factory.
  recurrence() = default;

  /// Once at `at_ms`. A time in the past is valid and fires at once.
  /// Errors: invalid_time if `at_ms` is outside the supported range.
  static result<recurrence> at(int64_t at_ms);

  /// Once at `now_ms + delay_ms`. Errors: invalid_time if now is invalid,
  /// the delay is negative or the sum overflows the supported range;
  /// delay_too_large if the delay exceeds limits.max_delay_ms.
  static result<recurrence> after(int64_t now_ms, int64_t delay_ms,
                                  const task_limits& limits = {});

  /// Every `period_ms`, anchored on the schedule: occurrences at start +
  /// k * period regardless of when earlier ones ran. start defaults to
  /// now + period. A start in the past only sets the phase: the first
  /// occurrence is the first schedule point at or after now.
  /// Errors: invalid_period (period <= 0), delay_too_large (period or
  /// start too far), invalid_time (bad now/start/end, end before start),
  /// invalid_count (max_count 0), no_occurrence (nothing left after now).
  static result<recurrence> fixed_rate(int64_t now_ms, int64_t period_ms,
                                       const recurrence_bounds& bounds = {},
                                       const task_limits& limits = {});

  /// First at start (default now + period; a past start fires at once),
  /// then `period_ms` after each completion. Errors as for fixed_rate.
  static result<recurrence> fixed_delay(int64_t now_ms, int64_t period_ms,
                                        const recurrence_bounds& bounds = {},
                                        const task_limits& limits = {});

  /// Irregular gaps, anchored at start (default now): the first occurrence
  /// is start + intervals[0], each next one the following interval later.
  /// A finite list fires intervals.size() times at most; a cyclic one
  /// starts over after the last interval, forever (or until end/count).
  /// Occurrences before now are skipped, as for fixed_rate.
  /// Errors: empty_intervals, too_many_intervals (> limits.max_intervals),
  /// invalid_period (an interval <= 0, naming its index), delay_too_large
  /// (an interval too long), and the bounds errors of fixed_rate.
  static result<recurrence> intervals(int64_t now_ms,
                                      std::vector<int64_t> intervals_ms,
                                      bool cyclic,
                                      const recurrence_bounds& bounds = {},
                                      const task_limits& limits = {});

  /// Matches of `expression` in `zone_name` (see cron_expression for the
  /// syntax and the DST rules), strictly after now and at or after start
  /// (default now). Errors: malformed_cron, unknown_time_zone, the bounds
  /// errors of fixed_rate.
  static result<recurrence> cron(int64_t now_ms, std::string_view expression,
                                 std::string_view zone_name = "UTC",
                                 const recurrence_bounds& bounds = {},
                                 const task_limits& limits = {});

  /// Rebuilds a stored recurrence from its fields, equal to the one they
  /// were read from. Checks only what makes the value itself valid (times in
  /// range, positive period and intervals, end not before start, count at
  /// least 1, a cron that parses in a known zone), nothing relative to now
  /// or to configurable limits: a stored schedule stays loadable after its
  /// start has passed or the limits were lowered. Fields the kind does not
  /// use are ignored. Errors: the codes of the factories, naming the field.
  static result<recurrence> restore(const recurrence_fields& fields);

  /// The due time when the task is scheduled at `now_ms`: for at/after the
  /// instant as-is (a past one fires at once); for fixed_delay the start
  /// as-is; for fixed_rate and intervals the first schedule point at or
  /// after now; for cron the first match strictly after now. nullopt if
  /// nothing is left.
  std::optional<int64_t> first_fire(int64_t now_ms) const;

  /// The next occurrence strictly after `after_ms`, or nullopt when the
  /// schedule is exhausted (fired_count reached max_count or the single
  /// shot has fired, past end, a finite list done, beyond max_time_ms).
  /// `after_ms` is the previous occurrence's due time (or now before the
  /// first) for schedule-anchored kinds, the completion time for
  /// fixed_delay. `fired_count` is how many occurrences have fired so far.
  std::optional<int64_t> next_fire(int64_t after_ms,
                                   uint64_t fired_count) const;

  /// The next due time once the occurrence due at `due_ms` completed at
  /// `completed_ms` (the ack), with `fired_count` occurrences fired
  /// including it. Applies the catch-up rule: fixed_delay counts from the
  /// completion; the other kinds skip every point up to both times.
  std::optional<int64_t> next_after_completion(int64_t due_ms,
                                               int64_t completed_ms,
                                               uint64_t fired_count) const;

  /// True for kinds that may fire more than once.
  bool is_periodic() const noexcept {
    return kind_ != recurrence_kind::at && kind_ != recurrence_kind::after;
  }

  recurrence_kind kind() const noexcept { return kind_; }

  /// at/after: the single due time.
  int64_t at_ms() const noexcept { return at_ms_; }

  /// after: the delay as given.
  int64_t delay_ms() const noexcept { return delay_ms_; }

  /// fixed_rate/fixed_delay: the period.
  int64_t period_ms() const noexcept { return periodic().period_ms; }

  /// Periodic kinds: the resolved start (defaults applied).
  int64_t start_ms() const noexcept { return periodic().start_ms; }

  const std::optional<int64_t>& end_ms() const noexcept {
    return periodic().end_ms;
  }

  const std::optional<uint64_t>& max_count() const noexcept {
    return periodic().max_count;
  }

  /// intervals: the gaps as given.
  const std::vector<int64_t>& intervals_ms() const noexcept {
    return periodic().intervals_ms;
  }

  /// intervals: whether the list repeats.
  bool cyclic() const noexcept { return periodic().cyclic; }

  /// cron: the parsed expression (text and zone name), else nullptr.
  const cron_expression* cron_expr() const noexcept {
    const auto& expr = periodic().cron;
    return expr ? &*expr : nullptr;
  }

  /// Equal kind and fields (a shared schedule compares by value).
  friend bool operator==(const recurrence& x, const recurrence& y) {
    return x.kind_ == y.kind_ && x.at_ms_ == y.at_ms_ &&
           x.delay_ms_ == y.delay_ms_ &&
           (x.periodic_ == y.periodic_ || x.periodic() == y.periodic());
  }

private:
  /// What only the periodic kinds use. Shared and immutable once built, so
  /// that a one-shot task's recurrence stays a few words (a shard keeps
  /// thousands of task records in memory and copies them) and the copies
  /// of a periodic one share a single block.
  struct schedule {
    int64_t period_ms = 0;
    int64_t start_ms = 0;
    std::optional<int64_t> end_ms;
    std::optional<uint64_t> max_count;
    std::vector<int64_t> intervals_ms;
    /// intervals: offsets of one pass's occurrences from start (running
    /// sums of intervals_ms); derived, not persisted.
    std::vector<int64_t> offsets_ms;
    bool cyclic = false;
    std::optional<cron_expression> cron;

    friend bool operator==(const schedule&, const schedule&) = default;
  };

  /// The schedule, or an empty one for at/after.
  const schedule& periodic() const noexcept {
    static const schedule none;
    return periodic_ ? *periodic_ : none;
  }

  /// Gives `rec` a fresh schedule of `kind` and returns it for the
  /// factory to fill in before the value escapes.
  static schedule& start_building(recurrence& rec, recurrence_kind kind);

  /// Validates now and the bounds, resolves the start (default: now +
  /// default_start_delay_ms) and checks that something is left to fire.
  static error apply_bounds(recurrence& rec, schedule& sched, int64_t now_ms,
                            int64_t default_start_delay_ms,
                            const recurrence_bounds& bounds,
                            const task_limits& limits);

  /// Validates and sets the optional end (not before the start) and count.
  static error apply_end_and_count(schedule& sched,
                                   std::optional<int64_t> end_ms,
                                   std::optional<uint64_t> max_count);

  /// Validates the intervals (each positive and within limits, sum without
  /// overflow) and sets them with their running sums.
  static error apply_intervals(schedule& sched,
                               std::vector<int64_t> intervals_ms,
                               const task_limits& limits);

  /// The schedule point strictly after `after_ms`, ignoring end and count.
  std::optional<int64_t> next_point(int64_t after_ms) const;

  std::optional<int64_t> next_interval_point(int64_t after_ms) const;

  recurrence_kind kind_ = recurrence_kind::at;
  int64_t at_ms_ = 0;
  int64_t delay_ms_ = 0;
  /// Null for at/after.
  std::shared_ptr<const schedule> periodic_;
};

} // namespace dally::core
