#include "core/cron_expression.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <chrono>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <date/date.h>
#include <date/tz.h>

#include "core/time_range.hpp"

namespace dally::core {

namespace {

constexpr int64_t seconds_per_day = 86'400;

/// Static description of one cron field.
struct field_spec {
  const char* name;
  int min;
  int max;
  /// Three-letter names for min, min + 1, ... (months, days of week).
  const char* const* names;
  int name_count;
  const char* names_hint;
};

constexpr const char* month_names[] = {"JAN", "FEB", "MAR", "APR",
                                       "MAY", "JUN", "JUL", "AUG",
                                       "SEP", "OCT", "NOV", "DEC"};

constexpr const char* weekday_names[] = {"SUN", "MON", "TUE", "WED",
                                         "THU", "FRI", "SAT"};

constexpr field_spec second_field{"second", 0, 59, nullptr, 0, nullptr};
constexpr field_spec minute_field{"minute", 0, 59, nullptr, 0, nullptr};
constexpr field_spec hour_field{"hour", 0, 23, nullptr, 0, nullptr};
constexpr field_spec day_field{"day of month", 1, 31, nullptr, 0, nullptr};
constexpr field_spec month_field{"month", 1, 12, month_names, 12, "JAN-DEC"};
constexpr field_spec weekday_field{"day of week", 0, 7,
                                   weekday_names, 7, "SUN-SAT"};

/// Parses one field into a bit mask (bit i set = value i matches).
class field_parser {
public:
  field_parser(const field_spec& spec, size_t position)
    : spec_(spec), position_(position) {
    // nop
  }

  result<uint64_t> parse(std::string_view text) const {
    uint64_t mask = 0;
    size_t begin = 0;
    while (true) {
      auto end = text.find(',', begin);
      auto item = text.substr(begin, end == std::string_view::npos
                                       ? std::string_view::npos
                                       : end - begin);
      if (item.empty())
        return fail("empty list element in '" + std::string{text} + "'");
      auto bits = parse_item(item);
      if (!bits)
        return bits.err();
      mask |= *bits;
      if (end == std::string_view::npos)
        return mask;
      begin = end + 1;
    }
  }

private:
  result<uint64_t> parse_item(std::string_view item) const {
    auto base = item;
    std::optional<int> step;
    if (auto slash = item.find('/'); slash != std::string_view::npos) {
      base = item.substr(0, slash);
      auto step_text = item.substr(slash + 1);
      if (step_text.empty())
        return fail("missing step after '/' in '" + std::string{item} + "'");
      auto n = parse_number(step_text);
      if (!n)
        return fail("step '" + std::string{step_text} + "' is not a number");
      auto max_step = spec_.max - spec_.min + 1;
      if (*n < 1 || *n > max_step)
        return fail("step " + std::string{step_text} + " out of range 1-" +
                    std::to_string(max_step));
      step = *n;
      if (base.empty())
        return fail("missing range before '/' in '" + std::string{item} + "'");
    }
    int first = spec_.min;
    int last = spec_.max;
    if (base != "*") {
      auto dash = base.find('-');
      auto first_text = base.substr(0, dash);
      auto v = parse_value(first_text);
      if (!v)
        return v.err();
      first = *v;
      if (dash != std::string_view::npos) {
        auto w = parse_value(base.substr(dash + 1));
        if (!w)
          return w.err();
        last = *w;
        if (first > last)
          return fail("range " + std::string{base} +
                      " is reversed (start after end)");
      } else if (!step) {
        last = first;
      }
    }
    uint64_t bits = 0;
    for (int v = first; v <= last; v += step.value_or(1))
      bits |= uint64_t{1} << v;
    return bits;
  }

  result<int> parse_value(std::string_view text) const {
    if (text.empty())
      return fail("missing value in range");
    if (text == "*")
      return fail("'*' cannot be part of a range");
    if (auto n = parse_number(text)) {
      if (*n < spec_.min || *n > spec_.max)
        return fail("value " + std::string{text} + " out of range " +
                    std::to_string(spec_.min) + "-" +
                    std::to_string(spec_.max));
      return *n;
    }
    for (int i = 0; i < spec_.name_count; ++i)
      if (equals_ignore_case(text, spec_.names[i]))
        return spec_.min + i;
    // Built with append: GCC 12 warns (-Wrestrict, a false positive) on
    // "literal" + std::string&& in Release builds.
    std::string quoted{"'"};
    quoted.append(text).append("'");
    if (spec_.names != nullptr)
      return fail(quoted + " is not a number or name (" + spec_.names_hint +
                  ")");
    return fail(quoted + " is not a number");
  }

  /// A non-negative decimal; values too large for int map to INT_MAX so
  /// that they are reported as out of range, not as non-numbers.
  static std::optional<int> parse_number(std::string_view text) {
    if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) {
          return c >= '0' && c <= '9';
        }))
      return std::nullopt;
    int n = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec == std::errc::result_out_of_range)
      return std::numeric_limits<int>::max();
    return n;
  }

  static bool equals_ignore_case(std::string_view x, std::string_view y) {
    return x.size() == y.size() &&
           std::equal(x.begin(), x.end(), y.begin(), [](char a, char b) {
             auto upper = [](char c) {
               return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c;
             };
             return upper(a) == upper(b);
           });
  }

  error fail(std::string why) const {
    return error{errc::malformed_cron, "cron field " +
                                         std::to_string(position_) + " (" +
                                         spec_.name + "): " + std::move(why)};
  }

  const field_spec& spec_;
  size_t position_;
};

std::vector<std::string_view> split_fields(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i]))
      ++i;
    auto begin = i;
    while (i < text.size() && !is_space(text[i]))
      ++i;
    if (i > begin)
      fields.push_back(text.substr(begin, i - begin));
  }
  return fields;
}

std::string_view trim(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  while (!text.empty() && is_space(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && is_space(text.back()))
    text.remove_suffix(1);
  return text;
}

uint64_t full_mask(int min, int max) {
  uint64_t mask = 0;
  for (int v = min; v <= max; ++v)
    mask |= uint64_t{1} << v;
  return mask;
}

/// Lowest set bit at or above `from`, or -1.
int next_bit(uint64_t mask, int from) {
  if (from >= 64)
    return -1;
  auto rest = mask >> from;
  return rest == 0 ? -1 : from + std::countr_zero(rest);
}

int64_t floor_div(int64_t x, int64_t y) {
  auto q = x / y;
  return (x % y != 0 && (x < 0) != (y < 0)) ? q - 1 : q;
}

int64_t day_number(const date::year_month_day& ymd) {
  return date::local_days{ymd}.time_since_epoch().count();
}

/// Longest day of month per month (February: 29, leap years).
constexpr int max_days_in_month[] = {0,  31, 29, 31, 30, 31, 30,
                                     31, 31, 30, 31, 30, 31};

/// An error if the first day of month in `days` occurs in none of the
/// `months` (bit m for month m); the day field is field 4 with seconds,
/// else 3.
std::optional<error> day_never_occurs(uint32_t days, uint32_t months,
                                      bool has_seconds) {
  auto first_day = std::countr_zero(days);
  bool possible = false;
  std::string month_list;
  for (int m = 1; m <= 12; ++m) {
    if ((months >> m & 1) == 0)
      continue;
    possible = possible || first_day <= max_days_in_month[m];
    if (!month_list.empty())
      month_list += ",";
    month_list += month_names[m - 1];
  }
  if (possible)
    return std::nullopt;
  auto day_pos = has_seconds ? 4 : 3;
  return error{errc::malformed_cron,
               "cron field " + std::to_string(day_pos) +
                 " (day of month): day " + std::to_string(first_day) +
                 (days == (uint32_t{1} << first_day) ? "" : " or later") +
                 " never occurs in month " + month_list +
                 ", so the expression never fires"};
}

} // namespace

result<cron_expression> cron_expression::parse(std::string_view text,
                                               std::string_view zone_name) {
  cron_expression expr;
  expr.text_ = std::string{trim(text)};
  auto fields = split_fields(text);
  if (fields.size() != 5 && fields.size() != 6)
    return error{errc::malformed_cron,
                 "cron expression '" + expr.text_ + "' has " +
                   std::to_string(fields.size()) +
                   " fields; expected 5 (minute hour day-of-month month "
                   "day-of-week) or 6 (second first)"};
  expr.has_seconds_ = fields.size() == 6;
  const std::array<const field_spec*, 6> specs{&second_field, &minute_field,
                                               &hour_field,   &day_field,
                                               &month_field,  &weekday_field};
  std::array<uint64_t, 6> masks{uint64_t{1}, 0, 0, 0, 0, 0};
  auto skip = expr.has_seconds_ ? 0 : 1;
  for (size_t i = 0; i < fields.size(); ++i) {
    auto mask = field_parser{*specs[i + skip], i + 1}.parse(fields[i]);
    if (!mask)
      return mask.err();
    masks[i + skip] = *mask;
  }
  // Day of week 7 is Sunday, like 0.
  if (masks[5] & (uint64_t{1} << 7))
    masks[5] = (masks[5] & ~(uint64_t{1} << 7)) | 1;
  expr.seconds_ = masks[0];
  expr.minutes_ = masks[1];
  expr.hours_ = static_cast<uint32_t>(masks[2]);
  expr.days_ = static_cast<uint32_t>(masks[3]);
  expr.months_ = static_cast<uint32_t>(masks[4]);
  expr.weekdays_ = static_cast<uint32_t>(masks[5]);
  expr.days_restricted_ = expr.days_ != full_mask(1, 31);
  expr.weekdays_restricted_ = expr.weekdays_ != full_mask(0, 6);
  // With day of week unrestricted, only the day of month selects days: it
  // must fit at least one of the months, else the expression never fires.
  if (expr.days_restricted_ && !expr.weekdays_restricted_)
    if (auto err =
          day_never_occurs(expr.days_, expr.months_, expr.has_seconds_))
      return *err;
  expr.zone_name_ = std::string{zone_name};
  if (zone_name.empty())
    return error{errc::unknown_time_zone, "time zone name is empty"};
  try {
    expr.zone_ = date::locate_zone(zone_name);
    // Loads the zone's rules now, so that a broken file fails here.
    expr.zone_->get_info(date::sys_seconds{});
  } catch (const std::exception& ex) {
    return error{errc::unknown_time_zone,
                 "unknown time zone '" + expr.zone_name_ + "': " + ex.what()};
  }
  return expr;
}

bool cron_expression::day_matches(int64_t local_day) const {
  date::local_days day{date::days{local_day}};
  date::year_month_day ymd{day};
  auto dom = static_cast<unsigned>(ymd.day());
  auto dow = date::weekday{day}.c_encoding();
  bool dom_ok = (days_ >> dom & 1) != 0;
  bool dow_ok = (weekdays_ >> dow & 1) != 0;
  if (days_restricted_ && weekdays_restricted_)
    return dom_ok || dow_ok;
  return dom_ok && dow_ok;
}

std::optional<int64_t>
cron_expression::next_local_match(int64_t from_s, int64_t limit_s) const {
  auto day = floor_div(from_s, seconds_per_day);
  auto tod = from_s - day * seconds_per_day;
  auto next_day = [&] {
    ++day;
    tod = 0;
  };
  // Every pass moves (day, tod) strictly forward and the limit bounds the
  // loop; skipping whole months and days keeps it short.
  while (day * seconds_per_day + tod < limit_s) {
    date::year_month_day ymd{date::local_days{date::days{day}}};
    auto month = static_cast<int>(static_cast<unsigned>(ymd.month()));
    if ((months_ >> month & 1) == 0) {
      auto year = ymd.year();
      auto m = next_bit(months_, month + 1);
      if (m < 0) {
        year += date::years{1};
        m = next_bit(months_, 1);
      }
      day = day_number(year / date::month{static_cast<unsigned>(m)} / 1);
      tod = 0;
      continue;
    }
    if (!day_matches(day)) {
      next_day();
      continue;
    }
    auto hour = static_cast<int>(tod / 3600);
    auto minute = static_cast<int>(tod / 60 % 60);
    auto second = static_cast<int>(tod % 60);
    auto h = next_bit(hours_, hour);
    if (h < 0) {
      next_day();
      continue;
    }
    if (h != hour) {
      tod = int64_t{h} * 3600;
      continue;
    }
    auto m = next_bit(minutes_, minute);
    if (m < 0) {
      tod = int64_t{hour + 1} * 3600;
      if (tod >= seconds_per_day)
        next_day();
      continue;
    }
    if (m != minute) {
      tod = int64_t{hour} * 3600 + int64_t{m} * 60;
      continue;
    }
    auto s = next_bit(seconds_, second);
    if (s < 0) {
      tod = int64_t{hour} * 3600 + int64_t{minute + 1} * 60;
      if (tod >= seconds_per_day)
        next_day();
      continue;
    }
    auto local = day * seconds_per_day + tod + (s - second);
    if (local >= limit_s)
      return std::nullopt;
    return local;
  }
  return std::nullopt;
}

std::optional<int64_t> cron_expression::next_after(int64_t after_ms) const {
  constexpr int64_t max_s = max_time_ms / 1000;
  // First whole second strictly after after_ms.
  auto s = std::max<int64_t>(floor_div(after_ms, 1000) + 1, 0);
  while (s <= max_s) {
    auto info = zone_->get_info(date::sys_seconds{std::chrono::seconds{s}});
    auto begin = info.begin.time_since_epoch().count();
    auto end = std::min(info.end.time_since_epoch().count(), max_s + 1);
    auto offset = info.offset.count();
    auto previous = offset;
    if (begin > 0)
      previous =
        zone_->get_info(date::sys_seconds{std::chrono::seconds{begin - 1}})
          .offset.count();
    auto shift = offset - previous;
    if (shift > 0 && s == begin && !every_hour()) {
      // Forward shift at `begin`: local times in [begin + previous,
      // begin + offset) never occur; any match there fires now, once.
      if (next_local_match(begin + previous, begin + offset))
        return begin * 1000;
    }
    if (shift < 0) {
      // Backward shift: instants in [begin, begin - shift) show local times
      // already seen before the shift (the second pass).
      auto second_pass_end = std::min(begin - shift, end);
      if (s < second_pass_end) {
        if (every_hour()) {
          if (auto local =
                next_local_match(s + offset, second_pass_end + offset))
            return (*local - offset) * 1000;
        }
        s = second_pass_end;
      }
    }
    if (s < end) {
      if (auto local = next_local_match(s + offset, end + offset))
        return (*local - offset) * 1000;
    }
    s = end;
  }
  return std::nullopt;
}

} // namespace dally::core
