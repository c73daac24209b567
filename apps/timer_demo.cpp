// dally-timer-demo: schedules thousands of timers through Dally's core at
// real time and prints how late each one fired, then a summary.
//
// Waiting uses the monotonic clock; due times are UTC wall-clock ms and are
// re-checked against the wall clock on every wake-up, as the shard will.
// The demo checks its own results: it exits non-zero if a timer fired
// early, a revoked timer fired, or a live timer never fired.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/quad_heap.hpp"
#include "core/recurrence.hpp"
#include "core/timing_wheel.hpp"

namespace {

using namespace dally::core;

struct options {
  uint64_t count = 5000;
  int64_t spread_ms = 5000;
  uint64_t seed = 0;
  bool quiet = false;
  bool wheel = false;
  int64_t tick_ms = 10;
};

int64_t wall_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch())
    .count();
}

void usage() {
  std::puts(
    "usage: dally-timer-demo [--count N] [--spread-ms MS] [--seed S]\n"
    "                        [--wheel [--tick-ms MS]] [--quiet]\n"
    "  --count N      one-shot timers to schedule (default 5000)\n"
    "  --spread-ms MS due times spread over this many ms (default 5000)\n"
    "  --seed S       random seed (default: from the clock, printed)\n"
    "  --wheel        use core::timing_wheel instead of core::quad_heap\n"
    "  --tick-ms MS   the wheel's tick (default 10); fires up to a tick late\n"
    "  --quiet        print the summary only");
}

bool parse_int(std::string_view text, int64_t& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && ptr == text.data() + text.size();
}

bool parse_args(int argc, char** argv, options& opts) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](int64_t& out, int64_t min, int64_t max) {
      if (i + 1 >= argc || !parse_int(argv[i + 1], out) || out < min ||
          out > max) {
        std::fprintf(stderr, "%s needs a number in [%lld, %lld]\n", argv[i],
                     static_cast<long long>(min), static_cast<long long>(max));
        return false;
      }
      ++i;
      return true;
    };
    int64_t n = 0;
    if (arg == "--count") {
      if (!value(n, 1, 10'000'000))
        return false;
      opts.count = static_cast<uint64_t>(n);
    } else if (arg == "--spread-ms") {
      if (!value(opts.spread_ms, 1, 3'600'000))
        return false;
    } else if (arg == "--seed") {
      if (!value(n, 0, INT64_MAX))
        return false;
      opts.seed = static_cast<uint64_t>(n);
    } else if (arg == "--tick-ms") {
      if (!value(opts.tick_ms, 1, 60'000))
        return false;
    } else if (arg == "--wheel") {
      opts.wheel = true;
    } else if (arg == "--quiet") {
      opts.quiet = true;
    } else if (arg == "--help" || arg == "-h") {
      usage();
      std::exit(0);
    } else {
      std::fprintf(stderr, "unknown argument: %s\n", argv[i]);
      usage();
      return false;
    }
  }
  return true;
}

/// A timer the demo scheduled, and what should become of it.
struct timer_info {
  const char* kind = "once";
  int64_t due_ms = 0;
  const recurrence* rec = nullptr;
  uint64_t fired = 0;
  bool revoked = false;
};

int64_t percentile(const std::vector<int64_t>& sorted, uint64_t per_mille) {
  if (sorted.empty())
    return 0;
  auto idx = (sorted.size() - 1) * per_mille / 1000;
  return sorted[idx];
}

/// Everything the demo counts while it runs, to judge itself at the end.
struct tally {
  std::unordered_map<task_id, timer_info> info;
  uint64_t revoked = 0;
  uint64_t rescheduled = 0;
  uint64_t expected_periodic = 0;
  std::vector<int64_t> lateness_us;
  uint64_t early = 0;
  uint64_t moved = 0;
  uint64_t fired_revoked = 0;
};

/// Due times drawn from the demo's one random sequence, so that a seed
/// gives the same timers every run.
struct due_draw {
  std::mt19937_64 rng;
  int64_t from_ms;
  int64_t spread_ms;

  int64_t operator()() {
    return from_ms +
           static_cast<int64_t>(rng() % static_cast<uint64_t>(spread_ms));
  }
};

/// One-shot timers, then a tenth of them revoked and a tenth rescheduled.
template<class Timers>
void schedule_one_shots(Timers& timers, const options& opts, due_draw& draw,
                        tally& t) {
  for (task_id id = 1; id <= opts.count; ++id) {
    auto due = draw();
    timers.insert(id, due);
    t.info[id] = timer_info{"once", due, nullptr, 0, false};
  }
  for (task_id id = 1; id <= opts.count; ++id) {
    auto pick = draw.rng() % 10;
    if (pick == 0 && timers.erase(id)) {
      t.info[id].revoked = true;
      ++t.revoked;
    } else if (pick == 1) {
      auto due = draw();
      timers.update(id, due);
      t.info[id].due_ms = due;
      t.info[id].kind = "resched";
      ++t.rescheduled;
    }
  }
}

/// A recurrence the demo schedules beside the one-shot timers.
struct periodic {
  task_id id;
  const char* kind;
  const recurrence* rec;
};

template<class Timers>
void schedule_recurrences(Timers& timers, const std::vector<periodic>& all,
                          int64_t start_ms, tally& t) {
  for (const auto& p : all) {
    auto due = p.rec->first_fire(start_ms);
    timers.insert(p.id, *due);
    t.info[p.id] = timer_info{p.kind, *due, p.rec, 0, false};
    t.expected_periodic += *p.rec->max_count();
  }
}

void print_plan(const options& opts, const tally& t) {
  std::printf("scheduled %llu one-shot timers over %lld ms (%llu revoked, "
              "%llu rescheduled) and 2 recurrences (every 400 ms x8, cron "
              "'* * * * * *' Europe/Berlin x4) on %s, seed %llu\n",
              static_cast<unsigned long long>(opts.count),
              static_cast<long long>(opts.spread_ms),
              static_cast<unsigned long long>(t.revoked),
              static_cast<unsigned long long>(t.rescheduled),
              opts.wheel ? "timing_wheel" : "quad_heap",
              static_cast<unsigned long long>(opts.seed));
}

/// Counts one fired timer and schedules a recurrence's next occurrence.
template<class Timers>
void on_fired(Timers& timers, const timer_entry& e, int64_t now_us,
              int64_t start_ms, bool quiet, tally& t) {
  auto& ti = t.info[e.id];
  // Judged by the time the demo asked for, not the one the timers report
  // back.
  auto late_us = now_us - ti.due_ms * 1000;
  if (late_us < 0)
    ++t.early;
  if (e.due_ms != ti.due_ms)
    ++t.moved;
  if (ti.revoked)
    ++t.fired_revoked;
  ++ti.fired;
  t.lateness_us.push_back(late_us);
  if (!quiet)
    std::printf("fired id=%-6llu %-7s due=+%-5lld ms late=%.3f ms\n",
                static_cast<unsigned long long>(e.id), ti.kind,
                static_cast<long long>(ti.due_ms - start_ms),
                static_cast<double>(late_us) / 1000.0);
  if (ti.rec != nullptr) {
    auto next_due =
      ti.rec->next_after_completion(e.due_ms, now_us / 1000, ti.fired);
    if (next_due) {
      timers.insert(e.id, *next_due);
      ti.due_ms = *next_due;
    }
  }
}

template<class Timers>
void fire_until_empty(Timers& timers, int64_t start_ms, bool quiet, tally& t) {
  std::vector<timer_entry> batch;
  while (!timers.empty()) {
    auto next = *timers.next_due();
    auto wait_us = next * 1000 - wall_us();
    if (wait_us > 0) {
      // Wait on the monotonic clock; the wall clock decides what is due.
      std::this_thread::sleep_until(std::chrono::steady_clock::now() +
                                    std::chrono::microseconds{wait_us});
    }
    auto now_us = wall_us();
    batch.clear();
    timers.pop_due(now_us / 1000, 1024, batch);
    for (const auto& e : batch)
      on_fired(timers, e, now_us, start_ms, quiet, t);
  }
}

/// Prints the summary and returns the exit code: 0 when nothing fired
/// early, nothing was lost and no revoked timer fired.
int report(const options& opts, tally& t) {
  uint64_t missing = 0;
  uint64_t fired_total = 0;
  for (const auto& [id, ti] : t.info) {
    fired_total += ti.fired;
    auto want = ti.revoked ? 0 : ti.rec ? *ti.rec->max_count() : uint64_t{1};
    if (ti.fired < want)
      missing += want - ti.fired;
  }
  auto expected = opts.count - t.revoked + t.expected_periodic;
  auto& lateness_us = t.lateness_us;
  std::sort(lateness_us.begin(), lateness_us.end());
  auto ms = [](int64_t us) { return static_cast<double>(us) / 1000.0; };
  std::printf(
    "\nsummary: fired %llu (expected %llu), early %llu, at another due "
    "time %llu, revoked but fired %llu, never fired %llu\n",
    static_cast<unsigned long long>(fired_total),
    static_cast<unsigned long long>(expected),
    static_cast<unsigned long long>(t.early),
    static_cast<unsigned long long>(t.moved),
    static_cast<unsigned long long>(t.fired_revoked),
    static_cast<unsigned long long>(missing));
  std::printf("lateness ms: p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max "
              "%.3f\n",
              ms(percentile(lateness_us, 500)),
              ms(percentile(lateness_us, 900)),
              ms(percentile(lateness_us, 990)),
              ms(percentile(lateness_us, 999)), ms(lateness_us.back()));
  auto ok = t.early == 0 && t.moved == 0 && t.fired_revoked == 0 &&
            missing == 0 && fired_total == expected;
  std::printf("%s\n", ok ? "OK: nothing early, nothing lost, no revoked "
                           "timer fired"
                         : "FAILED");
  return ok ? 0 : 1;
}

template<class Timers>
int run(Timers& timers, const options& opts) {
  auto start_ms = wall_us() / 1000;
  auto lead_ms = int64_t{500};
  due_draw draw{std::mt19937_64{opts.seed}, start_ms + lead_ms, opts.spread_ms};
  tally t;
  schedule_one_shots(timers, opts, draw, t);

  // Two recurrences from core: a fixed rate and a 6-field cron in a zone.
  auto every = recurrence::fixed_rate(start_ms, 400, {{}, {}, 8});
  auto cron =
    recurrence::cron(start_ms, "* * * * * *", "Europe/Berlin", {{}, {}, 4});
  if (!every || !cron) {
    std::fprintf(stderr, "recurrence rejected: %s\n",
                 (!every ? every.err() : cron.err()).message().c_str());
    return 2;
  }
  schedule_recurrences(
    timers,
    {{opts.count + 1, "every", &*every}, {opts.count + 2, "cron", &*cron}},
    start_ms, t);
  print_plan(opts, t);
  fire_until_empty(timers, start_ms, opts.quiet, t);
  return report(opts, t);
}

} // namespace

int main(int argc, char** argv) {
  options opts;
  opts.seed = static_cast<uint64_t>(wall_us());
  if (!parse_args(argc, argv, opts))
    return 2;
  // Block-buffer stdout: printing must not delay the next timer.
  static char buf[1 << 16];
  std::setvbuf(stdout, buf, _IOFBF, sizeof(buf));
  if (opts.wheel) {
    timing_wheel timers{
      timing_wheel_options{opts.tick_ms, 64, wall_us() / 1000}};
    return run(timers, opts);
  }
  quad_heap timers;
  return run(timers, opts);
}
