// Prints the next fire times of a cron expression, in UTC and local time.
//
//   dally-cron-preview '30 2 * * *' America/New_York 5
//
// Exit status: 0 on success, 1 for a bad expression or zone, 2 for usage.

#include <charconv>
#include <chrono>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <date/date.h>
#include <date/tz.h>

#include "core/cron_expression.hpp"
#include "core/time_range.hpp"

namespace {

constexpr int max_count = 1000;

int usage(const char* program) {
  std::cerr << "usage: " << program << " EXPRESSION [ZONE] [COUNT]\n"
            << "  EXPRESSION  cron, 5 fields (min hour dom month dow) or 6\n"
            << "              (seconds first); quote it for the shell\n"
            << "  ZONE        IANA time zone, default UTC\n"
            << "  COUNT       fire times to print, 1-" << max_count
            << ", default 5\n";
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  using namespace dally::core;
  if (argc < 2 || argc > 4 || std::strcmp(argv[1], "--help") == 0)
    return usage(argv[0]);
  std::string_view zone_name = argc > 2 ? argv[2] : "UTC";
  int count = 5;
  if (argc > 3) {
    std::string_view text = argv[3];
    auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), count);
    if (ec != std::errc{} || ptr != text.data() + text.size() || count < 1 ||
        count > max_count) {
      std::cerr << "error: COUNT must be a number from 1 to " << max_count
                << ", got '" << text << "'\n";
      return usage(argv[0]);
    }
  }
  auto expr = cron_expression::parse(argv[1], zone_name);
  if (!expr) {
    std::cerr << "error: " << expr.err() << '\n';
    return 1;
  }
  auto zone = date::locate_zone(zone_name);
  auto now = std::chrono::time_point_cast<std::chrono::milliseconds>(
    std::chrono::system_clock::now());
  std::optional<int64_t> t = now.time_since_epoch().count();
  std::cout << "next " << count << " fire times of '" << expr->text() << "' in "
            << expr->zone_name() << ":\n";
  for (int i = 1; i <= count; ++i) {
    t = expr->next_after(*t);
    if (!t) {
      std::cout << "(no more fire times before " << format_time(max_time_ms)
                << ")\n";
      break;
    }
    date::sys_seconds instant{std::chrono::seconds{*t / 1000}};
    date::zoned_seconds local{zone, instant};
    std::cout << i << ". " << date::format("%FT%TZ", instant) << "  "
              << date::format("%F %T %Z (%z)", local) << '\n';
  }
  return 0;
}
