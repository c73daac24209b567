#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dally::sim {

/// When a client asked a task to fire, as the oracle keeps it: the
/// request's own fields, nothing the engine computed.
struct when_asked {
  enum class kind : uint8_t { at, in, every, cron, intervals };
  kind what = kind::at;
  /// at: the instant asked for.
  int64_t at_ms = 0;
  /// in: the delay after the engine took the request.
  int64_t in_ms = 0;
  /// every: the period (the first occurrence one period after the engine
  /// took the request).
  int64_t every_ms = 0;
  /// cron: six fields, seconds first, in UTC.
  std::string cron;
  /// intervals: the gaps of a finite list, from when the engine took it.
  std::vector<int64_t> intervals_ms;
  /// every, cron: how many occurrences (0: unbounded).
  uint64_t max_count = 0;
};

/// A cron expression of six fields (second, minute, hour, day of month,
/// month, day of week; UTC), each `*`, `*/n` or a number. Deliberately
/// small and unlike the engine's parser: the oracle's reference tests one
/// instant at a time.
class cron_reference {
public:
  /// nullopt for anything beyond that subset.
  static std::optional<cron_reference> parse(const std::string& text);

  /// Whether the instant `t_ms` (UTC) matches: a whole second whose
  /// fields all match.
  bool matches(int64_t t_ms) const;

private:
  struct field {
    int step = 1;             // `*` is step 1
    std::optional<int> value; // a number
  };
  std::array<field, 6> fields_{};
};

/// The occurrences a request asks for, found the slow and simple way: by
/// testing instant after instant, millisecond by millisecond, whether it
/// is one. The engine computes the next occurrence arithmetically
/// (core::recurrence); this is the oracle's independent reference.
///
/// Every kind but `at` depends on when the engine took the request
/// (`now_ms`, one of its wall-clock readings), which the oracle knows only
/// within bounds; the callers try the candidates.
class reference_schedule {
public:
  /// nullopt when the request is outside what the reference covers.
  static std::optional<reference_schedule> make(const when_asked& when);

  bool recurring() const noexcept;

  /// Occurrences it may fire: 1 for a one-shot task, the count of a
  /// bounded recurrence, the length of an interval list.
  uint64_t max_occurrences() const noexcept;

  /// Whether every one of those must fire: not for an interval list, whose
  /// points missed while an occurrence was still being delivered are
  /// skipped (catch-up without bursts).
  bool exact_count() const noexcept;

  /// Whether `t_ms` is an occurrence, for a request taken at `now_ms`.
  bool is_point(int64_t t_ms, int64_t now_ms) const;

  /// The first occurrence of a request taken at `now_ms`: `at` as asked
  /// (even in the past), the rest the first point from `now_ms` on (for
  /// cron strictly after it).
  std::optional<int64_t> first(int64_t now_ms) const;

  /// The first occurrence strictly after `after_ms`.
  std::optional<int64_t> next_after(int64_t after_ms, int64_t now_ms) const;

private:
  explicit reference_schedule(when_asked when) : when_(std::move(when)) {
    // nop
  }

  /// Steps from `from_ms` (inclusive) to the first point, at most
  /// `search_limit_ms` far.
  std::optional<int64_t> step_from(int64_t from_ms, int64_t now_ms) const;

  when_asked when_;
  std::optional<cron_reference> cron_;
  /// intervals: the offsets of the points from when it was taken.
  std::vector<int64_t> offsets_ms_;
};

/// The wait before redelivering after delivery `attempt` failed, from the
/// policy's fields: the initial wait, times the multiplier (in
/// thousandths, rounded up) per further attempt, capped. Written from the
/// documented rule, not taken from core::delivery_policy.
int64_t reference_backoff_ms(int64_t initial_ms, uint32_t multiplier_permille,
                             int64_t max_ms, uint32_t attempt);

} // namespace dally::sim
