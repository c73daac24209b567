#include "sim/reference.hpp"

#include <algorithm>
#include <sstream>

namespace dally::sim {

namespace {

/// How far the reference steps in search of the next occurrence: an hour,
/// far more than the simulator's recurrences ever leave between two.
constexpr int64_t search_limit_ms = 3'600'000;

/// Year, month (1-12) and day (1-31) of a day counted from 1970-01-01
/// (days >= 0), the proleptic Gregorian calendar.
std::array<int64_t, 3> civil_from_days(int64_t days) {
  // Count 400-year eras from 0000-03-01, so that leap days end a year.
  days += 719'468;
  auto era = days / 146'097;
  auto doe = days - era * 146'097;
  auto yoe = (doe - doe / 1'460 + doe / 36'524 - doe / 146'096) / 365;
  auto doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  auto mp = (5 * doy + 2) / 153;
  auto day = doy - (153 * mp + 2) / 5 + 1;
  auto month = mp < 10 ? mp + 3 : mp - 9;
  auto year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  return {year, month, day};
}

} // namespace

std::optional<cron_reference> cron_reference::parse(const std::string& text) {
  std::istringstream in(text);
  cron_reference out;
  for (auto& f : out.fields_) {
    std::string word;
    if (!(in >> word))
      return std::nullopt;
    if (word == "*")
      continue;
    try {
      if (word.rfind("*/", 0) == 0) {
        f.step = std::stoi(word.substr(2));
        if (f.step <= 0)
          return std::nullopt;
      } else {
        size_t used = 0;
        f.value = std::stoi(word, &used);
        if (used != word.size())
          return std::nullopt;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  std::string rest;
  if (in >> rest)
    return std::nullopt;
  return out;
}

bool cron_reference::matches(int64_t t_ms) const {
  if (t_ms < 0 || t_ms % 1000 != 0)
    return false;
  auto s = t_ms / 1000;
  auto days = s / 86'400;
  auto [year, month, day] = civil_from_days(days);
  static_cast<void>(year);
  // 1970-01-01 was a Thursday (4; 0 is Sunday).
  std::array<int64_t, 6> now{s % 60, s / 60 % 60, s / 3'600 % 24,
                             day,    month,       (days + 4) % 7};
  // `*/n` counts from the field's least value: 1 for day and month.
  static constexpr std::array<int64_t, 6> least{0, 0, 0, 1, 1, 0};
  auto hit = [&](size_t k) {
    const auto& f = fields_[k];
    if (f.value)
      return now[k] == *f.value || (k == 5 && *f.value == 7 && now[k] == 0);
    return (now[k] - least[k]) % f.step == 0;
  };
  for (size_t k = 0; k < 3; ++k)
    if (!hit(k))
      return false;
  if (!hit(4))
    return false;
  auto restricted = [&](size_t k) {
    return fields_[k].value || fields_[k].step > 1;
  };
  // Classic cron: with both day fields restricted, either one will do.
  if (restricted(3) && restricted(5))
    return hit(3) || hit(5);
  return hit(3) && hit(5);
}

std::optional<reference_schedule>
reference_schedule::make(const when_asked& when) {
  reference_schedule out{when};
  switch (when.what) {
    case when_asked::kind::at:
      return out;
    case when_asked::kind::in:
      if (when.in_ms < 0)
        return std::nullopt;
      return out;
    case when_asked::kind::every:
      if (when.every_ms <= 0)
        return std::nullopt;
      return out;
    case when_asked::kind::cron:
      out.cron_ = cron_reference::parse(when.cron);
      if (!out.cron_)
        return std::nullopt;
      return out;
    case when_asked::kind::intervals: {
      int64_t sum = 0;
      for (auto gap : when.intervals_ms) {
        if (gap <= 0)
          return std::nullopt;
        sum += gap;
        out.offsets_ms_.push_back(sum);
      }
      if (out.offsets_ms_.empty())
        return std::nullopt;
      return out;
    }
  }
  return std::nullopt;
}

bool reference_schedule::recurring() const noexcept {
  return when_.what != when_asked::kind::at &&
         when_.what != when_asked::kind::in;
}

uint64_t reference_schedule::max_occurrences() const noexcept {
  if (!recurring())
    return 1;
  if (when_.what == when_asked::kind::intervals)
    return offsets_ms_.size();
  return when_.max_count == 0 ? UINT64_MAX : when_.max_count;
}

bool reference_schedule::exact_count() const noexcept {
  return when_.what != when_asked::kind::intervals;
}

bool reference_schedule::is_point(int64_t t_ms, int64_t now_ms) const {
  switch (when_.what) {
    case when_asked::kind::at:
      return t_ms == when_.at_ms;
    case when_asked::kind::in:
      return t_ms == now_ms + when_.in_ms;
    case when_asked::kind::every:
      return t_ms > now_ms && (t_ms - now_ms) % when_.every_ms == 0;
    case when_asked::kind::cron:
      return cron_->matches(t_ms);
    case when_asked::kind::intervals:
      return std::binary_search(offsets_ms_.begin(), offsets_ms_.end(),
                                t_ms - now_ms);
  }
  return false;
}

std::optional<int64_t> reference_schedule::step_from(int64_t from_ms,
                                                     int64_t now_ms) const {
  auto last = from_ms + search_limit_ms;
  if (when_.what == when_asked::kind::intervals)
    last = std::min(last, now_ms + offsets_ms_.back());
  for (auto t = from_ms; t <= last; ++t)
    if (is_point(t, now_ms))
      return t;
  return std::nullopt;
}

std::optional<int64_t> reference_schedule::first(int64_t now_ms) const {
  if (when_.what == when_asked::kind::at)
    return when_.at_ms;
  return step_from(when_.what == when_asked::kind::cron ? now_ms + 1 : now_ms,
                   now_ms);
}

std::optional<int64_t> reference_schedule::next_after(int64_t after_ms,
                                                      int64_t now_ms) const {
  if (!recurring())
    return std::nullopt;
  return step_from(after_ms + 1, now_ms);
}

int64_t reference_backoff_ms(int64_t initial_ms, uint32_t multiplier_permille,
                             int64_t max_ms, uint32_t attempt) {
  if (attempt == 0 || initial_ms <= 0 || max_ms <= 0)
    return 0;
  auto wait = std::min(initial_ms, max_ms);
  if (multiplier_permille <= 1000)
    return wait;
  for (uint32_t k = 1; k < attempt && wait < max_ms; ++k)
    wait = std::min(max_ms, (wait * multiplier_permille + 999) / 1000);
  return wait;
}

} // namespace dally::sim
