// Memory of a shard with a large backlog on disk: fills a store with
// pending tasks due over 10 days, and at 10%, 50% and 100% of the fill
// starts a fresh process (this program with --measure) that reopens the
// store, rebuilds a window of the same number of tasks (1% of the final
// count by default) and reports its RSS at each stage. Flat RSS across the
// three rows means memory follows the window, not the backlog.
//
// Usage: dally_window_rss [--tasks N] [--window-percent P] [--dir DIR]
//                         [--md FILE]
// Defaults: 10M tasks, 1%, ./window-rss-tmp. The 10M fill takes a minute or
// two; --tasks 1000000 is the quick form.

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/store_tools.hpp"
#include "storage/due_window.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "storage/write_batch.hpp"

namespace {

using namespace dally;
using bench::die;
using clock_type = std::chrono::steady_clock;

constexpr int64_t t0_ms = 1'700'000'000'000;
constexpr int64_t spread_ms = 10 * 86'400'000LL;

struct settings {
  size_t tasks = 10'000'000;
  double window_percent = 1.0;
  std::string dir = "window-rss-tmp";
  std::string md_path;
  // --measure mode (the child process).
  bool measure = false;
  size_t on_disk = 0;
  size_t window_tasks = 0;
};

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

std::unique_ptr<storage::rocks_task_store> open_store(const std::string& path) {
  storage::store_options opts;
  opts.path = path;
  opts.durability = storage::durability::none;
  auto store = storage::rocks_task_store::open(opts);
  if (!store) {
    std::ostringstream msg;
    msg << "open " << path << ": " << store.err();
    die(msg.str());
  }
  return std::move(*store);
}

/// What the child reports, one `key=value` per field on one line.
struct measurement {
  uint64_t rss_start_kib = 0;
  uint64_t rss_open_kib = 0;
  uint64_t rss_window_kib = 0;
  uint64_t heap_entries = 0;
  uint64_t heap_bytes = 0;
  int64_t window_ms = 0;
  double refill_s = 0;
};

/// The child: a fresh process that reopens the store and rebuilds a window
/// holding about `window_tasks` of the `on_disk` tasks.
int run_measure(const settings& cfg) {
  if (cfg.on_disk == 0 || cfg.window_tasks == 0)
    die("--measure needs --on-disk and --window-tasks");
  measurement m;
  m.rss_start_kib = bench::rss_kib();
  auto store = open_store(cfg.dir);
  m.rss_open_kib = bench::rss_kib();
  storage::due_window_options opts;
  // Tasks are spread evenly over 10 days, so this window holds about
  // window_tasks of them.
  m.window_ms = std::max<int64_t>(
    1, static_cast<int64_t>(static_cast<double>(spread_ms) *
                            static_cast<double>(cfg.window_tasks) /
                            static_cast<double>(cfg.on_disk)));
  opts.window_ms = m.window_ms;
  storage::due_window window(*store, opts);
  auto start = clock_type::now();
  if (auto err = window.refill(t0_ms))
    die("refill failed");
  m.refill_s = seconds_since(start);
  m.rss_window_kib = bench::rss_kib();
  m.heap_entries = window.size();
  m.heap_bytes = window.memory_bytes();
  std::cout << "rss_start_kib=" << m.rss_start_kib
            << " rss_open_kib=" << m.rss_open_kib
            << " rss_window_kib=" << m.rss_window_kib
            << " heap_entries=" << m.heap_entries
            << " heap_bytes=" << m.heap_bytes << " window_ms=" << m.window_ms
            << " refill_s=" << m.refill_s << '\n';
  return 0;
}

measurement spawn_measure(const settings& cfg, size_t on_disk,
                          size_t window_tasks) {
  char exe[4096];
  auto len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0)
    die("readlink /proc/self/exe failed");
  exe[len] = '\0';
  std::ostringstream cmd;
  cmd << '\'' << exe << "' --measure --dir '" << cfg.dir << "' --on-disk "
      << on_disk << " --window-tasks " << window_tasks;
  auto* pipe = popen(cmd.str().c_str(), "r");
  if (pipe == nullptr)
    die("popen failed");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr)
    out += buf;
  if (pclose(pipe) != 0)
    die("measuring process failed: " + out);
  std::map<std::string, std::string> fields;
  std::istringstream in(out);
  std::string field;
  while (in >> field)
    if (auto eq = field.find('='); eq != std::string::npos)
      fields[field.substr(0, eq)] = field.substr(eq + 1);
  measurement m;
  m.rss_start_kib = std::stoull(fields.at("rss_start_kib"));
  m.rss_open_kib = std::stoull(fields.at("rss_open_kib"));
  m.rss_window_kib = std::stoull(fields.at("rss_window_kib"));
  m.heap_entries = std::stoull(fields.at("heap_entries"));
  m.heap_bytes = std::stoull(fields.at("heap_bytes"));
  m.window_ms = std::stoll(fields.at("window_ms"));
  m.refill_s = std::stod(fields.at("refill_s"));
  return m;
}

double mib(uint64_t kib) {
  return static_cast<double>(kib) / 1024.0;
}

int run_fill(settings cfg) {
  bench::scratch_dir dir(cfg.dir);
  cfg.dir = (dir.path() / "shard").string();
  auto window_tasks =
    std::max<size_t>(1, static_cast<size_t>(static_cast<double>(cfg.tasks) *
                                            cfg.window_percent / 100.0));
  std::vector<size_t> checkpoints{cfg.tasks / 10, cfg.tasks / 2, cfg.tasks};
  std::ostringstream md;
  md << "Pending tasks due uniformly over 10 days, filled with durability "
        "none, 1000 per commit. Each row: the filling process closes the "
        "store and flushes its memtables, then a fresh process reopens it "
        "and rebuilds a window of about "
     << window_tasks << " tasks.\n\n"
     << "| tasks on disk | SST MiB | window | heap entries | heap MiB | RSS "
        "at start MiB | RSS store open MiB | RSS window built MiB | RSS per "
        "windowed task (bytes) | refill tasks/s |\n"
     << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  std::cout << "filler: RSS at start " << std::fixed << std::setprecision(1)
            << mib(bench::rss_kib()) << " MiB\n";
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> due(t0_ms, t0_ms + spread_ms - 1);
  size_t filled = 0;
  auto start = clock_type::now();
  for (auto checkpoint : checkpoints) {
    {
      auto store = open_store(cfg.dir);
      storage::write_batch wb;
      while (filled < checkpoint) {
        wb.clear();
        for (size_t i = 0; i < 1000 && filled < checkpoint; ++i, ++filled)
          wb.put(bench::bench_record(store->allocate_id(), due(rng)));
        if (auto err = store->commit(wb))
          die("fill commit failed");
      }
      std::cout << "filler: " << filled << " tasks after " << std::fixed
                << std::setprecision(1) << seconds_since(start)
                << " s, RSS with the store open " << mib(bench::rss_kib())
                << " MiB\n";
    }
    auto sst = bench::flush_and_measure(cfg.dir, false);
    uint64_t sst_bytes = 0;
    for (const auto& [cf, bytes] : sst)
      sst_bytes += bytes;
    std::cout << "filler: store closed and flushed, RSS "
              << mib(bench::rss_kib()) << " MiB\n";
    auto m = spawn_measure(cfg, filled, window_tasks);
    auto per_task = m.heap_entries == 0
                      ? 0.0
                      : static_cast<double>(m.rss_window_kib - m.rss_open_kib) *
                          1024.0 / static_cast<double>(m.heap_entries);
    std::ostringstream row;
    row << std::fixed << "| " << filled << " | " << std::setprecision(0)
        << static_cast<double>(sst_bytes) / (1 << 20) << " | "
        << std::setprecision(1) << static_cast<double>(m.window_ms) / 60'000.0
        << " min | " << m.heap_entries << " | "
        << static_cast<double>(m.heap_bytes) / (1 << 20) << " | "
        << mib(m.rss_start_kib) << " | " << mib(m.rss_open_kib) << " | "
        << mib(m.rss_window_kib) << " | " << std::setprecision(0) << per_task
        << " | " << static_cast<double>(m.heap_entries) / m.refill_s << " |\n";
    std::cout << row.str() << std::flush;
    md << row.str();
  }
  std::cout << '\n' << md.str();
  if (!cfg.md_path.empty())
    std::ofstream(cfg.md_path) << md.str();
  return 0;
}

settings parse(int argc, char** argv) {
  settings cfg;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--tasks")
      cfg.tasks = std::stoull(next());
    else if (arg == "--window-percent")
      cfg.window_percent = std::stod(next());
    else if (arg == "--dir")
      cfg.dir = next();
    else if (arg == "--md")
      cfg.md_path = next();
    else if (arg == "--measure")
      cfg.measure = true;
    else if (arg == "--on-disk")
      cfg.on_disk = std::stoull(next());
    else if (arg == "--window-tasks")
      cfg.window_tasks = std::stoull(next());
    else
      die("unknown argument " + arg + " (see the comment atop window_rss.cpp)");
  }
  if (cfg.tasks < 10)
    die("--tasks must be at least 10");
  return cfg;
}

} // namespace

int main(int argc, char** argv) {
  auto cfg = parse(argc, argv);
  return cfg.measure ? run_measure(cfg) : run_fill(cfg);
}
