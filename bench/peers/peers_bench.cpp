// dally-peers-bench: Dally side by side with beanstalkd and Redis, in one
// run on one machine, each system started fresh on 127.0.0.1.
//
//  1. End to end, per durability level (sync, periodic) and system: P
//     producer threads schedule N tasks with delays uniform in [0, D] ms, C
//     consumers receive and ack them. Schedule and end-to-end throughput,
//     lateness (receive wall clock - due), the server's CPU and peak RSS,
//     and a check that no task was lost or delivered early.
//  2. Memory per pending task: a fresh server per system, M tasks due an
//     hour out, RSS after minus RSS before, per task.
//
// Usage: dally-peers-bench [--quick | --smoke] [options]
//   --systems LIST      dally,dally-embedded,dally-cluster3,redis,beanstalkd
//                       (all but dally-cluster3)
//   --durability LIST   sync,periodic (both)
//   --tasks N (1000000; drops the scale's --tasks-for) --producers P (2)
//   --consumers C (2) --max-delay-ms D (1000)
//   --tasks-for SYSTEM:LEVEL=N (beanstalkd:sync=20000; repeatable) the
//                       task count of one row
//   --batch B (1024 tasks in flight per producer)
//   --consumer-batch K (64) --payload-bytes S (64)
//   --dally-request-tasks N (1024 tasks per schedule_batch request)
//   --redis-move-batch N (500 members per mover script call)
//   --sync-period-ms MS (50: Dally's periodic durability, and with sync
//                       the fsync of writes nobody waits for)
//   --pending-tasks M (1000000; 0 skips the memory section)
//   --pending-due-s S (3600) --pending-durability LEVEL (periodic)
//   --timeout-s S (300 per run) --seed N (1)
//   --rounds N (1) runs the end-to-end section N times, the systems in
//                       reverse order in every other round; the report
//                       shows each system's median round and judges the
//                       goals by the median of the ratios within a round
//   --out DIR (results: peers.md, data files, plots.gp, logs/)
//   --dir DIR (scratch data directories; removed at the end)
//   --dallyd PATH --redis-server PATH --beanstalkd PATH
//   --raw (also write every task's lateness to raw-LEVEL-SYSTEM.txt)
// --quick: 100k tasks (beanstalkd:sync 2000), 100k pending, 120 s
// timeout (about a minute).
// --smoke: 1000 tasks, 2000 pending, periodic only (the CTest entry).
// Exit code: 0 when every row passed; 1 when a row lost a task, delivered
// one early or failed otherwise, or a server was left running; 2 for bad
// usage.

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "bench/host_steal.hpp"
#include "bench/peers/peer.hpp"
#include "bench/peers/process.hpp"
#include "bench/peers/report.hpp"
#include "runtime/heap_purger.hpp"
#include "runtime/retained_heap.hpp"

#ifndef DALLY_PEERS_DALLYD
#error "DALLY_PEERS_DALLYD must name the dallyd binary"
#endif
#ifndef DALLY_PEERS_SOURCE_DIR
#error "DALLY_PEERS_SOURCE_DIR must name the source tree"
#endif
#ifndef DALLY_PEERS_SCRATCH
#error "DALLY_PEERS_SCRATCH must name the default scratch directory"
#endif

namespace dally::bench::peers {

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  std::string scale = "default";
  std::vector<std::string> systems{"dally", "dally-embedded", "redis",
                                   "beanstalkd"};
  std::vector<std::string> levels{"sync", "periodic"};
  uint64_t tasks = 1'000'000;
  /// Task counts of single rows ("beanstalkd:sync" -> 20000): a system that
  /// fsyncs every operation would take most of an hour for the others'
  /// count, which in turn must be large for their end-to-end rate not to
  /// be mostly the delay.
  std::map<std::string, uint64_t> tasks_for{{"beanstalkd:sync", 20'000}};
  uint32_t producers = 2;
  uint32_t consumers = 2;
  int64_t max_delay_ms = 1000;
  uint32_t batch = 1024;
  uint64_t pending_tasks = 1'000'000;
  int64_t pending_due_s = 3600;
  std::string pending_durability = "periodic";
  double timeout_s = 300;
  uint64_t seed = 1;
  /// Times the end-to-end section runs: one run per row is one sample of a
  /// machine whose speed drifts.
  uint32_t rounds = 1;
  bool raw = false;
  std::filesystem::path out = "peers-results";
  std::filesystem::path dir = DALLY_PEERS_SCRATCH;
  peer_options popts;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::cerr << "dally-peers-bench: " << what
            << "\n(see the comment atop bench/peers/peers_bench.cpp)\n";
  std::exit(2);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

uint64_t to_u64(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    auto x = std::stoull(value, &used);
    if (used == value.size())
      return x;
  } catch (const std::exception&) {
    // below
  }
  usage_error(flag + " needs a non-negative integer, not '" + value + "'");
}

settings parse(int argc, char** argv) {
  settings s;
  s.popts.dallyd = DALLY_PEERS_DALLYD;
  s.popts.redis_server = "/usr/bin/redis-server";
  s.popts.beanstalkd = "/usr/bin/beanstalkd";
  std::vector<std::string> args(argv + 1, argv + argc);
  // Scales first, so that later flags override them.
  for (auto& a : args) {
    if (a == "--quick") {
      s.scale = "quick";
      s.tasks = 100'000;
      s.tasks_for["beanstalkd:sync"] = 2000;
      s.pending_tasks = 100'000;
      s.timeout_s = 120;
    } else if (a == "--smoke") {
      s.scale = "smoke";
      s.tasks = 1000;
      s.tasks_for.clear();
      s.pending_tasks = 2000;
      s.levels = {"periodic"};
      s.timeout_s = 120;
    }
  }
  // A task count of one's own replaces the scale's per-row counts.
  if (std::find(args.begin(), args.end(), "--tasks") != args.end())
    s.tasks_for.clear();
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size())
        usage_error("missing value after " + a);
      return args[++i];
    };
    if (a == "--quick" || a == "--smoke")
      continue;
    if (a == "--systems") {
      s.systems = split(next());
      for (auto& x : s.systems)
        if (x != "dally" && x != "dally-embedded" && x != "dally-cluster3" &&
            x != "redis" && x != "beanstalkd")
          usage_error("unknown system '" + x +
                      "' (dally, dally-embedded, dally-cluster3, redis, "
                      "beanstalkd)");
    } else if (a == "--durability") {
      s.levels = split(next());
      for (auto& x : s.levels)
        if (x != "sync" && x != "periodic")
          usage_error("--durability takes sync and periodic, not '" + x + "'");
    } else if (a == "--tasks") {
      s.tasks = to_u64(a, next());
    } else if (a == "--tasks-for") {
      // SYSTEM:LEVEL=N
      auto v = next();
      auto eq = v.find('=');
      if (eq == std::string::npos || v.find(':') > eq)
        usage_error("--tasks-for takes SYSTEM:LEVEL=N, e.g. "
                    "beanstalkd:sync=20000");
      auto n = to_u64(a, v.substr(eq + 1));
      if (n == 0)
        usage_error("--tasks-for needs at least 1 task");
      s.tasks_for[v.substr(0, eq)] = n;
    } else if (a == "--producers")
      s.producers = static_cast<uint32_t>(to_u64(a, next()));
    else if (a == "--consumers")
      s.consumers = static_cast<uint32_t>(to_u64(a, next()));
    else if (a == "--max-delay-ms")
      s.max_delay_ms = static_cast<int64_t>(to_u64(a, next()));
    else if (a == "--batch")
      s.batch = static_cast<uint32_t>(to_u64(a, next()));
    else if (a == "--consumer-batch")
      s.popts.consumer_batch = static_cast<uint32_t>(to_u64(a, next()));
    else if (a == "--payload-bytes")
      s.popts.payload_bytes = to_u64(a, next());
    else if (a == "--dally-request-tasks")
      s.popts.dally_request_tasks = static_cast<uint32_t>(to_u64(a, next()));
    else if (a == "--redis-move-batch")
      s.popts.redis_move_batch = static_cast<uint32_t>(to_u64(a, next()));
    else if (a == "--sync-period-ms")
      s.popts.sync_period_ms = static_cast<int64_t>(to_u64(a, next()));
    else if (a == "--pending-tasks")
      s.pending_tasks = to_u64(a, next());
    else if (a == "--pending-due-s")
      s.pending_due_s = static_cast<int64_t>(to_u64(a, next()));
    else if (a == "--pending-durability") {
      s.pending_durability = next();
      if (s.pending_durability != "sync" && s.pending_durability != "periodic")
        usage_error("--pending-durability takes sync or periodic");
    } else if (a == "--timeout-s")
      s.timeout_s = static_cast<double>(to_u64(a, next()));
    else if (a == "--seed")
      s.seed = to_u64(a, next());
    else if (a == "--rounds")
      s.rounds = static_cast<uint32_t>(std::min<uint64_t>(
        to_u64(a, next()), std::numeric_limits<uint32_t>::max()));
    else if (a == "--raw")
      s.raw = true;
    else if (a == "--out")
      s.out = next();
    else if (a == "--dir")
      s.dir = next();
    else if (a == "--dallyd")
      s.popts.dallyd = next();
    else if (a == "--redis-server")
      s.popts.redis_server = next();
    else if (a == "--beanstalkd")
      s.popts.beanstalkd = next();
    else
      usage_error("unknown argument '" + a + "'");
  }
  if (s.tasks == 0 || s.producers == 0 || s.consumers == 0 || s.batch == 0 ||
      s.popts.consumer_batch == 0 || s.popts.redis_move_batch == 0 ||
      s.popts.dally_request_tasks == 0 || s.popts.sync_period_ms == 0 ||
      s.timeout_s <= 0 || s.rounds == 0)
    usage_error("counts, batches, rounds, the sync period and the timeout "
                "must be at least 1");
  if (s.rounds > 20)
    usage_error("--rounds must be at most 20");
  if (s.popts.payload_bytes > 60'000)
    usage_error("--payload-bytes must be at most 60000 (beanstalkd's job "
                "size limit is 65535)");
  if (s.systems.empty() || s.levels.empty())
    usage_error("--systems and --durability must name at least one");
  // Every binary a chosen system needs must be there before anything
  // starts.
  auto need = [](const std::string& path, const std::string& what) {
    if (::access(path.c_str(), X_OK) != 0)
      usage_error("cannot run " + path + " (" + what + ")");
  };
  for (auto& x : s.systems) {
    if (x == "dally" || x == "dally-cluster3")
      need(s.popts.dallyd, "build the dallyd target, or pass --dallyd PATH");
    else if (x == "redis")
      need(s.popts.redis_server,
           "install Debian's redis-server (scripts/install-deps.sh) or pass "
           "--redis-server PATH");
    else if (x == "beanstalkd")
      need(s.popts.beanstalkd,
           "install Debian's beanstalkd (scripts/install-deps.sh) or pass "
           "--beanstalkd PATH");
  }
  return s;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// The first error any thread of a run reported.
class first_error {
public:
  void set(const std::string& what) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (what_.empty())
      what_ = what;
    failed_ = true;
  }

  bool failed() const { return failed_.load(); }

  std::string get() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return what_;
  }

private:
  mutable std::mutex mtx_;
  std::string what_;
  std::atomic<bool> failed_{false};
};

using producer_list = std::vector<std::unique_ptr<producer>>;

/// `n` producers, each with a connection of its own.
producer_list connect_producers(peer& p, uint32_t n) {
  producer_list out;
  for (uint32_t i = 0; i < n; ++i)
    out.push_back(p.make_producer());
  return out;
}

/// Schedules tasks [first_id, first_id + count) with a thread per
/// producer, `batch` tasks per schedule call; the delay of task i is
/// delay(i). Records each task's due times in `due` (indexed by id -
/// first_id) and counts them in `scheduled`. Returns the seconds from the
/// first schedule to the last acknowledgement.
double produce(producer_list& conns, uint64_t first_id, uint64_t count,
               uint32_t batch, const std::function<int64_t(uint64_t)>& delay,
               std::vector<task_slot>* due, std::atomic<uint64_t>& scheduled,
               first_error& error) {
  auto producers = static_cast<uint32_t>(conns.size());
  auto t0 = clock_type::now();
  std::vector<std::thread> threads;
  for (uint32_t k = 0; k < producers; ++k) {
    auto lo = first_id + count * k / producers;
    auto hi = first_id + count * (k + 1) / producers;
    threads.emplace_back([&, k, lo, hi] {
      std::vector<task_slot> slots;
      try {
        for (auto id = lo; id < hi && !error.failed(); id += batch) {
          slots.clear();
          for (auto i = id; i < std::min<uint64_t>(hi, id + batch); ++i)
            slots.push_back(task_slot{i, delay(i), 0});
          conns[k]->schedule(slots);
          if (due != nullptr)
            for (auto& t : slots)
              (*due)[t.id - first_id] = t;
          scheduled.fetch_add(slots.size(), std::memory_order_relaxed);
        }
      } catch (const std::exception& e) {
        error.set(e.what());
      }
    });
  }
  for (auto& t : threads)
    t.join();
  return seconds_since(t0);
}

std::filesystem::path fresh_dir(const settings& s, const std::string& name) {
  auto dir = s.dir / name;
  std::filesystem::remove_all(dir);
  make_dirs(dir);
  return dir;
}

peer_options options_for(const settings& s, const std::string& level,
                         const std::string& log_name) {
  auto opts = s.popts;
  opts.durability = level;
  opts.log_path = s.out / "logs" / log_name;
  // Servers append to their log: start each run's log empty.
  std::filesystem::remove(opts.log_path);
  return opts;
}

uint64_t tasks_of(const settings& s, const std::string& system,
                  const std::string& level) {
  auto i = s.tasks_for.find(system + ":" + level);
  return i == s.tasks_for.end() ? s.tasks : i->second;
}

/// Section 1: one system at one durability level.
run_result run_end_to_end(const settings& s, const std::string& system,
                          const std::string& level, uint32_t round) {
  auto suffix = s.rounds > 1 ? "-r" + std::to_string(round) : std::string{};
  auto opts = options_for(s, level, level + "-" + system + suffix + ".log");
  auto p = make_peer(system, opts);
  auto tasks = tasks_of(s, system, level);
  run_result r;
  r.system = system;
  r.name = p->name();
  r.durability = level;
  r.usage_scope = p->usage_scope();
  r.round = round;
  r.tasks = tasks;
  std::cout << "  " << r.name << ", " << level << " (" << tasks
            << " tasks): " << std::flush;
  auto dir = fresh_dir(s, level + "-" + system + suffix);
  delivery_log log(tasks);
  std::vector<task_slot> due(tasks);
  std::atomic<uint64_t> scheduled{0};
  first_error error;
  try {
    p->start(dir);
    auto consumers = p->start_consumers(s.consumers, log);
    auto conns = connect_producers(*p, s.producers);
    if (auto note = p->reset_peak(); !note.empty())
      r.notes.push_back(note);
    auto before = p->usage();
    auto driver_before = self_usage().cpu_s;
    auto steal_before = bench::cpu_times::now();
    auto t0 = clock_type::now();
    auto deadline =
      t0 + std::chrono::milliseconds{static_cast<int64_t>(s.timeout_s * 1000)};
    auto seed = s.seed;
    auto max_delay = s.max_delay_ms;
    // A jthread: joined however this block is left.
    std::jthread producing([&] {
      try {
        r.schedule_s = produce(
          conns, 0, tasks, s.batch,
          [seed, max_delay](uint64_t id) {
            return static_cast<int64_t>(splitmix(id ^ (seed << 32)) %
                                        static_cast<uint64_t>(max_delay + 1));
          },
          &due, scheduled, error);
      } catch (const std::exception& e) {
        error.set(e.what());
      }
    });
    // Everything received (or an error, or the deadline), then settled.
    auto last_print = clock_type::now();
    bool done = false;
    while (!done) {
      auto c_err = consumers->error();
      if (!c_err.empty())
        error.set(c_err);
      if (error.failed())
        break;
      if (clock_type::now() >= deadline) {
        error.set("not every task was received within --timeout-s (" +
                  fixed(s.timeout_s, 0) + " s)");
        break;
      }
      done = log.unique() >= tasks;
      if (!done)
        std::this_thread::sleep_for(std::chrono::microseconds{500});
      if (seconds_since(last_print) >= 10) {
        std::cout << "[" << scheduled.load() << " scheduled, " << log.unique()
                  << " received, " << log.acked() << " acked] " << std::flush;
        last_print = clock_type::now();
      }
    }
    producing.join();
    if (done && !error.failed()) {
      if (p->wait_settled(tasks, log, deadline))
        r.e2e_s = seconds_since(t0);
      else
        error.set("acks not settled within --timeout-s (" +
                  fixed(s.timeout_s, 0) + " s)");
    }
    auto after = p->usage();
    r.server_cpu_s = after.cpu_s - before.cpu_s;
    r.client_cpu_s = self_usage().cpu_s - driver_before;
    r.steal_percent =
      bench::steal_percent(steal_before, bench::cpu_times::now());
    r.peak_rss_kib = after.hwm_kib;
    if (auto c_err = consumers->stop(); !c_err.empty())
      error.set(c_err);
    consumers.reset();
    // Clients go before their server (Dally's share its actor system).
    conns.clear();
  } catch (const std::exception& e) {
    error.set(e.what());
  }
  // The server stops after its clients (gone with the try block), before
  // its data directory goes.
  if (auto note = p->stop(); !note.empty())
    r.notes.push_back(r.name + " " + note);
  p.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  r.scheduled = scheduled.load();
  r.unique = log.unique();
  r.deliveries = log.deliveries();
  r.malformed = log.malformed();
  r.missing = tasks - r.unique;
  r.late_us.reserve(r.unique);
  std::ofstream raw;
  if (s.raw) {
    raw.open(s.out / ("raw-" + level + "-" + system + ".txt"));
    raw << "# id due_ms reference_us first_receive_us lateness_us\n";
  }
  for (uint64_t id = 0; id < tasks; ++id) {
    auto first = log.first_us(id);
    if (first == 0)
      continue;
    auto& t = due[id];
    if (log.body_due_ms(id) != t.due_ms)
      ++r.malformed;
    if (first < t.due_ms * 1000)
      ++r.early;
    auto late = first - t.reference_us;
    r.late_us.push_back(late);
    if (raw.is_open())
      raw << id << ' ' << t.due_ms << ' ' << t.reference_us << ' ' << first
          << ' ' << late << '\n';
  }
  std::sort(r.late_us.begin(), r.late_us.end());
  if (error.failed())
    r.failures.push_back(error.get());
  if (r.missing > 0)
    r.failures.push_back(std::to_string(r.missing) + " of " +
                         std::to_string(tasks) + " tasks never received");
  if (r.early > 0)
    r.failures.push_back(std::to_string(r.early) +
                         " tasks received before their due time");
  if (r.malformed > 0)
    r.failures.push_back(std::to_string(r.malformed) +
                         " deliveries with a body that was not sent");
  if (r.ok()) {
    std::cout << fixed(r.schedule_rate(), 0) << " tasks/s scheduled, "
              << fixed(r.e2e_rate(), 0) << " end to end, lateness p50 "
              << fixed(static_cast<double>(r.late_percentile_us(0.5)) / 1000, 2)
              << " ms, p99 "
              << fixed(static_cast<double>(r.late_percentile_us(0.99)) / 1000,
                       2)
              << " ms, max "
              << fixed(static_cast<double>(r.late_us.back()) / 1000, 2)
              << " ms, server CPU " << fixed(r.server_cpu_s, 1)
              << " s, host steal " << bench::steal_text(r.steal_percent) << "%"
              << std::endl;
  } else {
    std::cout << "\n  *** FAILED: " << r.name << " (" << level << ")";
    for (auto& f : r.failures)
      std::cout << "\n  ***   " << f;
    std::cout << "\n  ***   server log: " << opts.log_path.string()
              << std::endl;
  }
  for (auto& n : r.notes)
    std::cout << "  note: " << n << std::endl;
  return r;
}

/// Section 2: RSS per pending task on a fresh server.
pending_result run_pending(const settings& s, const std::string& system) {
  auto level = s.pending_durability;
  auto opts = options_for(s, level, "memory-" + system + ".log");
  auto p = make_peer(system, opts);
  pending_result r;
  r.system = system;
  r.name = p->name();
  r.durability = level;
  r.usage_scope = p->usage_scope();
  r.tasks = s.pending_tasks;
  r.warmup = std::min<uint64_t>(10'000, s.pending_tasks / 10 + 1);
  r.due_s = s.pending_due_s;
  std::cout << "  " << r.name << ": " << std::flush;
  auto dir = fresh_dir(s, "memory-" + system);
  first_error error;
  try {
    p->start(dir);
    auto base_ms = s.pending_due_s * 1000;
    auto seed = s.seed;
    auto delay = [base_ms, seed](uint64_t id) {
      return base_ms +
             static_cast<int64_t>(splitmix(id ^ (seed << 32)) % 600'000);
    };
    std::atomic<uint64_t> scheduled{0};
    auto conns = connect_producers(*p, s.producers);
    // The same kind of tasks first, so that lazily built structures
    // (connections, arenas, caches) are in the baseline.
    produce(conns, 0, r.warmup, s.batch, delay, nullptr, scheduled, error);
    std::this_thread::sleep_for(std::chrono::seconds{1});
    r.rss_before_kib = p->usage().rss_kib;
    if (!error.failed())
      r.load_s = produce(conns, r.warmup, r.tasks, s.batch, delay, nullptr,
                         scheduled, error);
    std::this_thread::sleep_for(std::chrono::seconds{2});
    r.rss_after_kib = p->usage().rss_kib;
    conns.clear();
  } catch (const std::exception& e) {
    error.set(e.what());
  }
  if (auto note = p->stop(); !note.empty())
    r.notes.push_back(r.name + " " + note);
  p.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (error.failed())
    r.failures.push_back(error.get());
  if (r.ok())
    std::cout << fixed(r.bytes_per_task(), 1) << " bytes per pending task ("
              << r.tasks << " tasks, RSS "
              << fixed(static_cast<double>(r.rss_before_kib) / 1024, 1)
              << " -> " << fixed(static_cast<double>(r.rss_after_kib) / 1024, 1)
              << " MiB)" << std::endl;
  else
    std::cout << "\n  *** FAILED: " << r.name
              << " (memory): " << r.failures.front() << std::endl;
  return r;
}

std::string machine_line() {
  std::string model;
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  uint64_t mem_kib = 0;
  std::ifstream mem("/proc/meminfo");
  while (std::getline(mem, line))
    if (line.rfind("MemTotal:", 0) == 0)
      mem_kib = std::strtoull(line.c_str() + 9, nullptr, 10);
  utsname u{};
  ::uname(&u);
  std::ifstream deb("/etc/debian_version");
  std::string debian;
  std::getline(deb, debian);
  std::ifstream load("/proc/loadavg");
  std::string l1, l5, l15;
  load >> l1 >> l5 >> l15;
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) +
         " cores, " + fixed(static_cast<double>(mem_kib) / (1 << 20), 1) +
         " GiB RAM, kernel " + u.release + ", Debian " + debian +
         ", load average " + l1 + " " + l5 + " " + l15 + " at the start";
}

std::string versions_line(const settings& s) {
  auto pkg = [](const std::string& name) {
    auto v =
      command_output("dpkg-query -W -f='${Version}' " + name + " 2>/dev/null");
    return v.empty() ? std::string{"(not a Debian package here)"} : v;
  };
  auto commit =
    command_output("git -C '" + std::string{DALLY_PEERS_SOURCE_DIR} +
                   "' describe --always --dirty --abbrev=7 "
                   "2>/dev/null");
  return "beanstalkd " + pkg("beanstalkd") + " (" + s.popts.beanstalkd +
         "), redis-server " + pkg("redis-server") + " (" +
         s.popts.redis_server + "), libhiredis " + pkg("libhiredis-dev") +
         ", Dally " + (commit.empty() ? "(commit unknown)" : commit) +
         " (dallyd " + s.popts.dallyd + ")";
}

std::string workload_line(const settings& s) {
  std::ostringstream out;
  out << s.tasks << " tasks per row";
  for (auto& [row, n] : s.tasks_for)
    out << " (" << row << ": " << n << ")";
  out << ", delays uniform in [0, " << s.max_delay_ms
      << "] ms (beanstalkd: rounded up to whole seconds), payload "
      << s.popts.payload_bytes << " bytes; " << s.producers
      << " producer threads, each with up to " << s.batch
      << " tasks in flight (Redis and beanstalkd: " << s.batch
      << " pipelined commands; Dally: schedule_batch requests of "
      << s.popts.dally_request_tasks << ", all sent before the first reply "
      << "is awaited); " << s.consumers << " consumers taking up to "
      << s.popts.consumer_batch
      << " deliveries per round trip (Redis: pipelined LMOVE, then BLMOVE "
         "when empty; beanstalkd: pipelined reserve-with-timeout 0, then "
         "reserve-with-timeout 1; Dally: batch consumer actors, max_batch "
      << s.popts.consumer_batch << "), acking every delivery at once. Redis "
      << "mover: one thread, script calls of up to " << s.popts.redis_move_batch
      << " members, in a tight loop while it moves something, else every "
         "1 ms. Dally: --sync-period-ms "
      << s.popts.sync_period_ms
      << " (periodic: the fsync period; sync: the longest a batch "
         "consumer's verdicts wait for their fsync). Seed "
      << s.seed << ".";
  return out.str();
}

std::string utc_now() {
  auto t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

int run(int argc, char** argv) {
  auto s = parse(argc, argv);
  std::filesystem::create_directories(s.out / "logs");
  s.out = std::filesystem::canonical(s.out);
  // A directory of its own under the scratch root, so that two runs never
  // share one and the leftover check sees only this run's servers.
  std::filesystem::create_directories(s.dir);
  remove_stale_runs(s.dir);
  s.dir =
    std::filesystem::canonical(s.dir) / ("run-" + std::to_string(::getpid()));
  std::filesystem::remove_all(s.dir);
  std::filesystem::create_directories(s.dir);
  install_signal_guard(s.dir);
  ::signal(SIGPIPE, SIG_IGN);
  std::ostringstream command;
  for (int i = 0; i < argc; ++i)
    command << (i > 0 ? " " : "") << argv[i];
  report_context ctx;
  ctx.machine = machine_line();
  ctx.versions = versions_line(s);
  ctx.command = command.str();
  ctx.workload = workload_line(s);
  ctx.started_utc = utc_now();
  std::cout << "dally-peers-bench (" << s.scale << "): " << ctx.machine << "\n"
            << ctx.versions << "\nresults in " << s.out.string()
            << ", scratch data in " << s.dir.string() << std::endl;
  auto t0 = clock_type::now();
  std::vector<run_result> runs;
  for (uint32_t round = 1; round <= s.rounds; ++round) {
    // Reversed every other round, so that a drift of the machine's speed
    // during a round does not favour whichever system runs first.
    auto systems = s.systems;
    if (round % 2 == 0)
      std::reverse(systems.begin(), systems.end());
    for (auto& level : s.levels) {
      std::cout << "end to end, durability " << level;
      if (s.rounds > 1)
        std::cout << ", round " << round << " of " << s.rounds;
      std::cout << std::endl;
      for (auto& system : systems)
        runs.push_back(run_end_to_end(s, system, level, round));
      if (interrupted())
        break;
    }
    if (interrupted())
      break;
  }
  std::vector<pending_result> pending;
  if (s.pending_tasks > 0) {
    std::cout << "memory per pending task (" << s.pending_tasks << " tasks due "
              << s.pending_due_s << " s out, durability "
              << s.pending_durability << ")" << std::endl;
    for (auto& system : s.systems)
      pending.push_back(run_pending(s, system));
  }
  ctx.elapsed_s = seconds_since(t0);
  // An interrupted run writes no results.
  wait_if_interrupted();
  // Every server must be gone: anything still running in this run's
  // scratch directory is a server that escaped its stop.
  std::vector<pid_t> pids;
  auto leftovers = leftover_servers(s.dir, &pids);
  for (auto pid : pids)
    ::kill(pid, SIGKILL);
  std::error_code ec;
  std::filesystem::remove_all(s.dir, ec);
  auto md = markdown(ctx, runs, pending);
  if (!leftovers.empty()) {
    md += "\n**FAILED: servers left running** (killed now):";
    for (auto& l : leftovers)
      md += " " + l;
    md += "\n";
  }
  std::ofstream(s.out / "peers.md") << md;
  write_data(s.out, runs, pending,
             "Dally, Redis and beanstalkd" +
               (s.rounds > 1 ? ", each system's median round of " +
                                 std::to_string(s.rounds)
                             : std::string{}));
  std::cout << "\n" << md << std::flush;
  bool failed = !leftovers.empty();
  for (auto& r : runs)
    failed = failed || !r.ok();
  for (auto& p : pending)
    failed = failed || !p.ok();
  if (failed) {
    std::cout << "\n*** dally-peers-bench: FAILED (see above)" << std::endl;
    return 1;
  }
  std::cout << "\nresults in " << s.out.string() << std::endl;
  return 0;
}

} // namespace

} // namespace dally::bench::peers

int main(int argc, char** argv) {
  // The embedded engine keeps memory as dallyd does.
  dally::runtime::limit_retained_heap();
  std::optional<dally::runtime::heap_purger> purger;
  if (dally::runtime::heap_purger::available())
    purger.emplace(dally::runtime::heap_purger::options{});
  using namespace dally::bench::peers;
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    if (!interrupted())
      std::cerr << "dally-peers-bench: " << e.what() << '\n';
  }
  // After a signal the signal thread ends the process.
  wait_if_interrupted();
  return rc;
}
