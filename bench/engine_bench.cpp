// dally-engine-bench: the single-node engine end to end.
//
//  1. Throughput of schedule -> fire -> deliver -> ack: embedded (engine,
//     producers and consumers in one actor_system) and remote (engine
//     published on 127.0.0.1, producers and consumers in a child process
//     that connects with connect_engine), with durability sync and none,
//     against a plain RocksDB loop doing the same writes per task.
//  2. The maximum load: the highest rate of a steady stream the engine
//     keeps up with. Firing lateness (wall clock at the consumer minus due
//     time) of a steady stream at --load-factor (0.7) of it, with
//     --small-pending and --large-pending tasks pending (sync), the small
//     case again with durability none, and for comparison at the load
//     factor of the burst throughput of 1; against the host's own timer
//     lateness (bench::timer_probe, a thread waking every 1 ms), idle
//     before each row and beside the stream, the host's steal time
//     (bench/host_steal.hpp) at both, and the stalls of a thread that
//     never sleeps, idle.
//  3. RSS per pending task, inside the window and beyond it, each in a
//     fresh child process.
//
// Usage: dally-engine-bench [--quick] [--md FILE] [--dir DIR]
//   --only throughput,lateness,open-loop,rss   sections to run (default:
//     throughput,lateness,rss)
//   --runs N          throughput runs per cell, lateness periods (3)
//   --shards N, --notifiers N, --caf-threads N (0: CAF's default)
//   --write-buffer BYTES (0: the engine's default memtable size)
//   --task-memtable btree|skiplist: the tasks' memtable (btree, as dallyd)
//   --fire-lead-ms MS (shard_options::fire_lead_ms; -1: the default, 32)
//   throughput: --tasks N (100k) --modes embedded,remote,plain
//     --durability sync,none --producers N (2) --outstanding N (4 requests
//     per producer) --batch N (256) --consumers N (2) --max-in-flight N
//     --max-batch N (deliveries per message; 0: the engine's default, 64;
//     1: plain consumers, one delivery per message)
//   lateness: --small-pending N (100k) --large-pending N (10M)
//     --in-window-pending N (100k) --warmup-s S (2) --measure-s S (4)
//     --load-factor F (0.7) of the sustained stream rate, found first by
//     streams at rising rates (--no-search: of the burst throughput in 1)
//     --stream-rate R (instead of F x max) --lead-ms MS (500)
//     --overload-factor F (1.3; 0: none) a last stream at F x the sustained
//     rate, to see the engine come back from more load than it can take
//     (--overload-rate R: at R instead, also without the search;
//     --overload-s S1,S2,...: one such stream of each length in seconds,
//     default warm-up + measure; --large-pending 0 skips that row)
//     --dump-lateness PATH (a file per row: due_ms, lateness µs, and
//     fire_ms - due_ms, when the notifier sent it, per delivery)
//   open-loop: --flood-rate R (1M tasks/s) --flood-s S (3) --flood-batch N
//     (64 tasks per request): a producer in a child process sends at R for
//     S s over 127.0.0.1 without waiting for any answer, far above what
//     the engine carries; one row per --max-pending-per-shard N1,N2,...
//     (default: the engine's; 0: no bound) and --front-door N1,N2,...
//     (requests waiting for the engine; default: dallyd's; 0: none) with
//     accepted/s, overloaded/s, the node's RSS, the engine's peak of
//     unanswered tasks per shard, and the drain (not in the default set)
//   rss: --rss-tasks N (1M) --rss-write-buffer BYTES (4 MiB)
//   --default-heap: keep glibc's default trim threshold (default: as
//     dallyd); the RSS section's last row also runs jemalloc's defaults
// --quick (or DALLY_BENCH_QUICK=1): 2 runs, 20k tasks per run, 20k and
// 200k pending, 1 s periods, 100k tasks for RSS; well under a minute.
// Scratch data goes to a fresh directory under /tmp (or --dir, emptied
// first), removed at the end. Progress goes to stdout, then the markdown
// summary (also written to --md).

#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "actors/embedded_engine.hpp"
#include "actors/messages.hpp"
#include "bench/engine_drivers.hpp"
#include "bench/host_steal.hpp"
#include "bench/store_tools.hpp"
#include "bench/timer_probe.hpp"
#include "logic/engine_config.hpp"
#include "net/error.hpp"
#include "net/remote.hpp"
#include "net/type_ids.hpp"
#include "runtime/heap_purger.hpp"
#include "runtime/retained_heap.hpp"
#include "runtime/setup.hpp"
#include "storage/record_codec.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "storage/write_batch.hpp"

namespace {

using namespace dally;
using bench::die;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t minute_ms = 60'000;
constexpr int64_t hour_ms = 60 * minute_ms;
constexpr int64_t day_ms = 24 * hour_ms;

struct settings {
  bool quick = false;
  std::string dir;
  std::string md_path;
  /// Lateness: writes "due_ms late_us" per delivery to PATH.DURABILITY.N.
  std::string dump_path;
  std::set<std::string> sections{"throughput", "lateness", "rss"};
  /// Throughput: which runs, at which durability levels.
  std::set<std::string> modes{"embedded", "remote", "plain"};
  std::vector<storage::durability> levels{storage::durability::sync,
                                          storage::durability::none};
  int runs = 3;
  // Engine shape (every section).
  uint32_t shards = 4;
  uint32_t notifiers = 2;
  /// CAF scheduler threads; 0: CAF's default (one per core).
  uint32_t caf_threads = 0;
  /// CAF scheduler.max-throughput (messages per actor per turn); 0: CAF's
  /// default (unbounded).
  uint32_t caf_max_throughput = 0;
  /// --task-memtable: storage::store_options::btree_task_memtable.
  bool btree_task_memtable = true;
  // Throughput.
  uint64_t tasks = 100'000;
  uint32_t producers = 2;
  uint32_t batch = 256;
  uint32_t outstanding = 4;
  uint32_t consumers = 2;
  /// Per consumer; 0: the engine's default (max_in_flight_per_consumer).
  uint32_t max_in_flight = 0;
  /// Deliveries per message to a consumer: 1 spawns plain consumers, else
  /// batch consumers asking for this many (0: the engine's default).
  uint32_t max_batch = 0;
  /// Memtable bytes per column family; 0: the engine's default.
  size_t write_buffer_bytes = 0;
  /// shard_options::fire_lead_ms; -1: the engine's default.
  int64_t fire_lead_ms = -1;
  // Lateness.
  uint64_t small_pending = 100'000;
  uint64_t large_pending = 10'000'000;
  uint64_t in_window_pending = 100'000;
  double warmup_s = 2;
  double measure_s = 4;
  double load_factor = 0.7;
  double stream_rate = 0;
  /// The overload stream: this factor of the sustained rate, or this rate.
  double overload_factor = 1.3;
  double overload_rate = 0;
  /// Lengths in seconds of the overload streams, one row each; empty: one
  /// of warmup_s + measure_s.
  std::vector<double> overload_spans_s;
  /// Find the highest stream rate the engine keeps up with and take the
  /// load factor of that (else of the burst throughput).
  bool search = true;
  int64_t lead_ms = 500;
  // Open loop: a producer that never waits for answers.
  double flood_rate = 1'000'000;
  double flood_s = 3;
  uint32_t flood_batch = 64;
  /// engine_config::max_pending_per_shard of each row; empty: the default.
  std::vector<int64_t> flood_bounds;
  /// The front door's bound of each row (0: none); empty: the default.
  std::vector<int64_t> flood_doors;
  // RSS.
  uint64_t rss_tasks = 1'000'000;
  size_t rss_write_buffer_bytes = 4 << 20;
  // Child process modes.
  std::string child;
  uint16_t port = 0;
  std::string rss_where;
  /// RSS child: leave glibc's trim threshold at its default instead of
  /// setting it as dallyd does.
  bool default_heap = false;
};

// -- small utilities ----------------------------------------------------------

double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

/// Nearest-rank percentile of sorted `xs`.
int64_t percentile(const std::vector<int64_t>& xs, double p) {
  if (xs.empty())
    return 0;
  auto rank =
    static_cast<size_t>(std::ceil(p * static_cast<double>(xs.size())));
  return xs[std::clamp<size_t>(rank, 1, xs.size()) - 1];
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string rate_str(double per_s) {
  std::ostringstream out;
  if (per_s >= 1e6)
    out << std::fixed << std::setprecision(2) << per_s / 1e6 << " M";
  else if (per_s >= 1e3)
    out << std::fixed << std::setprecision(1) << per_s / 1e3 << " k";
  else
    out << std::fixed << std::setprecision(0) << per_s;
  return out.str();
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

/// x / y, or a dash when either is missing.
std::string ratio_str(double x, double y) {
  if (x <= 0 || y <= 0)
    return "–";
  return fixed(x / y, 2);
}

std::string ms_str(int64_t us) {
  return fixed(static_cast<double>(us) / 1000.0, 2);
}

std::string_view name_of(storage::durability level) {
  switch (level) {
    case storage::durability::sync:
      return "sync";
    case storage::durability::periodic:
      return "periodic";
    default:
      return "none";
  }
}

/// User plus system CPU seconds of this process so far.
double cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string self_exe() {
  char buf[4096];
  auto len = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (len <= 0)
    die("readlink /proc/self/exe failed");
  buf[len] = '\0';
  return buf;
}

/// Runs `cmd`, returns its stdout as key=value fields; dies if it fails.
std::map<std::string, std::string> run_child(const std::string& cmd) {
  auto* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr)
    die("popen failed");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr)
    out += buf;
  if (pclose(pipe) != 0)
    die("child failed: " + cmd + "\n" + out);
  std::map<std::string, std::string> fields;
  std::istringstream in(out);
  std::string field;
  while (in >> field)
    if (auto eq = field.find('='); eq != std::string::npos)
      fields[field.substr(0, eq)] = field.substr(eq + 1);
  return fields;
}

std::string field(const std::map<std::string, std::string>& fields,
                  const std::string& key) {
  auto i = fields.find(key);
  if (i == fields.end())
    die("child output lacks " + key);
  return i->second;
}

/// The arguments that give a child process the same settings.
std::string child_args(const settings& s) {
  std::ostringstream out;
  out << " --shards " << s.shards << " --notifiers " << s.notifiers
      << " --tasks " << s.tasks << " --producers " << s.producers << " --batch "
      << s.batch << " --outstanding " << s.outstanding << " --consumers "
      << s.consumers << " --max-in-flight " << s.max_in_flight
      << " --max-batch " << s.max_batch << " --rss-tasks " << s.rss_tasks
      << " --rss-write-buffer " << s.rss_write_buffer_bytes
      << " --write-buffer " << s.write_buffer_bytes << " --fire-lead-ms "
      << s.fire_lead_ms << " --caf-threads " << s.caf_threads;
  out << " --task-memtable " << (s.btree_task_memtable ? "btree" : "skiplist");
  return out.str();
}

/// An actor_system config as dallyd's (or a client's, with the network),
/// with --caf-threads and --caf-max-throughput.
struct caf_config : caf::actor_system_config {
  caf_config(const settings& s, bool network) {
    runtime::configure(*this, network ? runtime::role::client
                                      : runtime::role::embedded);
    if (s.caf_threads > 0)
      set("scheduler.max-threads", static_cast<size_t>(s.caf_threads));
    if (s.caf_max_throughput > 0)
      set("scheduler.max-throughput",
          static_cast<size_t>(s.caf_max_throughput));
  }
};

logic::engine_config engine_cfg(const settings& s, const std::string& dir,
                                storage::durability level) {
  logic::engine_config cfg;
  cfg.data_dir = dir;
  cfg.shard_count = s.shards;
  cfg.notifiers = s.notifiers;
  cfg.durability = level;
  if (s.max_in_flight > 0)
    cfg.max_in_flight_per_consumer = s.max_in_flight;
  if (s.write_buffer_bytes > 0)
    cfg.write_buffer_bytes = s.write_buffer_bytes;
  if (s.fire_lead_ms >= 0)
    cfg.shard.fire_lead_ms = s.fire_lead_ms;
  cfg.btree_task_memtable = s.btree_task_memtable;
  return cfg;
}

/// actors::embedded_engine with a stop that waits until every shard has
/// closed its store (the next run may reopen the data directory at once)
/// and that survives an engine which does not quit after its shards.
class bench_engine {
public:
  bench_engine(caf::actor_system& sys, logic::engine_config cfg,
               std::shared_ptr<net::front_door> door = nullptr)
    : sys_(&sys) {
    auto started =
      actors::embedded_engine::start(sys, std::move(cfg), std::move(door));
    if (!started)
      die("cannot start the engine: " + net::describe(started.error()));
    engine_.emplace(std::move(*started));
    handle_ = engine_->handle();
  }

  bench_engine(const bench_engine&) = delete;
  bench_engine& operator=(const bench_engine&) = delete;

  ~bench_engine() { stop(); }

  const engine_actor& handle() const noexcept { return handle_; }

  /// Stops the engine and waits until every shard has flushed and closed
  /// its store (embedded_engine::stop waits for the engine only). The
  /// engine quits after its supervisor, which quits after the shards; an
  /// engine that stays up 200 ms after its shards (a regression seen while
  /// this benchmark was written) is reported and killed.
  void stop() {
    if (!handle_)
      return;
    caf::scoped_actor self{*sys_};
    std::vector<caf::actor> shards;
    self
      ->request(caf::actor_cast<caf::actor>(handle_), std::chrono::seconds{30},
                actors::shards_atom::value)
      .receive([&](actors::shard_handles_msg& m) { shards = m.shards; },
               [](caf::error&) {});
    std::set<caf::actor_addr> waiting;
    for (auto& shard : shards)
      if (shard) {
        self->monitor(shard);
        waiting.insert(shard.address());
      }
    self->monitor(handle_);
    self->send_exit(handle_, caf::exit_reason::user_shutdown);
    bool engine_down = false;
    bool timed_out = false;
    while (!timed_out && (!waiting.empty() || !engine_down)) {
      auto grace = waiting.empty() ? std::chrono::milliseconds{200}
                                   : std::chrono::milliseconds{60'000};
      self->receive(
        [&](const caf::down_msg& m) {
          if (m.source == handle_.address())
            engine_down = true;
          else
            waiting.erase(m.source);
        },
        caf::after(grace) >> [&] { timed_out = true; });
    }
    if (!waiting.empty())
      die("shards did not stop within 60 s");
    if (!engine_down) {
      if (!warned_) {
        std::cerr << "note: the engine did not quit after its shards; "
                     "killing it (a bug in actors/)\n";
        warned_ = true;
      }
      self->send_exit(handle_, caf::exit_reason::kill);
      self->receive([](const caf::down_msg&) {});
    }
    handle_ = nullptr;
    // Its own stop now sees a terminated actor and returns at once.
    engine_.reset();
  }

private:
  static inline bool warned_ = false;
  caf::actor_system* sys_;
  std::optional<actors::embedded_engine> engine_;
  engine_actor handle_;
};

v1::StatsReply stats_or_die(caf::scoped_actor& self,
                            const engine_actor& engine) {
  auto st = bench::engine_stats(self, engine);
  if (!st)
    die("stats failed: " + net::describe(st.error()));
  return std::move(*st);
}

/// Spawns `n` counting consumers sharing `tally` and subscribes them.
std::vector<caf::actor>
spawn_consumers(caf::actor_system& sys, caf::scoped_actor& self,
                const engine_actor& engine, const std::string& topic,
                uint32_t n, uint32_t max_in_flight, uint32_t max_batch,
                std::shared_ptr<bench::consumer_tally> tally) {
  std::vector<caf::actor> out;
  for (uint32_t i = 0; i < n; ++i) {
    caf::error err;
    if (max_batch == 1) {
      auto handle = sys.spawn(bench::counting_consumer, tally);
      err = bench::subscribe(self, engine, topic, handle, max_in_flight);
      out.push_back(caf::actor_cast<caf::actor>(handle));
    } else {
      auto handle = sys.spawn(bench::batch_counting_consumer, tally);
      err =
        bench::subscribe(self, engine, topic, handle, max_in_flight, max_batch);
      out.push_back(caf::actor_cast<caf::actor>(handle));
    }
    if (err)
      die("subscribe failed: " + net::describe(err));
  }
  // The topic's availability travels notifier -> engine -> shards; tasks
  // fired before it arrives would be parked and come back, which is a
  // different path than the one measured.
  std::this_thread::sleep_for(milliseconds{100});
  return out;
}

/// Schedules `total` tasks of `topic` with `producers` batch producers and
/// waits for every reply; returns the seconds it took.
double load_tasks(caf::actor_system& sys, const engine_actor& engine,
                  const std::string& topic, uint64_t total, uint32_t producers,
                  uint32_t batch, uint32_t outstanding,
                  std::function<int64_t(uint64_t, int64_t)> due_ms) {
  auto start = clock_type::now();
  std::vector<std::shared_ptr<bench::batch_progress>> progress;
  uint64_t offset = 0;
  for (uint32_t p = 0; p < producers; ++p) {
    auto plan = std::make_shared<bench::batch_plan>();
    plan->topic = topic;
    plan->tasks = total / producers + (p < total % producers ? 1 : 0);
    plan->batch = batch;
    plan->outstanding = outstanding;
    plan->due_ms = [due_ms, offset](uint64_t i, int64_t now) {
      return due_ms(offset + i, now);
    };
    offset += plan->tasks;
    progress.push_back(std::make_shared<bench::batch_progress>());
    sys.spawn(bench::batch_producer, engine,
              std::shared_ptr<const bench::batch_plan>(plan), progress.back());
  }
  auto all_done = [&] {
    for (auto& p : progress)
      if (!p->done)
        return false;
    return true;
  };
  auto timeout =
    milliseconds{std::max<int64_t>(120'000, static_cast<int64_t>(total / 2))};
  if (!bench::wait_until(all_done, timeout, std::chrono::milliseconds{2}))
    die("loading " + std::to_string(total) + " tasks timed out");
  for (auto& p : progress)
    if (p->failed > 0)
      die("loading failed for " + std::to_string(p->failed.load()) +
          " tasks: " + p->first_error);
  return bench::seconds_between(start, clock_type::now());
}

// -- 1. throughput ------------------------------------------------------------

struct throughput_result {
  double deliver_s = 0;
  double ack_s = 0;
  uint64_t tasks = 0;
  uint64_t delivered = 0;
  uint64_t redelivered = 0;
  uint64_t acked = 0;
  uint64_t commits = 0;
  /// Fires counted by the engine (above `tasks` when deliveries went back
  /// to their shard, e.g. undelivered while consumers were saturated).
  uint64_t fired = 0;
  /// CPU seconds of the engine's process during the run (embedded: with
  /// producers and consumers; remote: the engine's side only).
  double cpu_s = 0;
  /// Remote: CPU seconds of the client process (producers, consumers).
  double client_cpu_s = 0;

  double rate() const { return static_cast<double>(tasks) / ack_s; }
};

/// Consumers subscribe, producers schedule `s.tasks` tasks due at once,
/// and the run ends when the engine's stats count every ack as done
/// (committed). Works on an embedded handle or a remote one.
throughput_result drive_throughput(caf::actor_system& sys,
                                   const engine_actor& engine,
                                   const settings& s) {
  caf::scoped_actor self{sys};
  auto tally = std::make_shared<bench::consumer_tally>();
  auto consumers = spawn_consumers(sys, self, engine, "bench", s.consumers,
                                   s.max_in_flight, s.max_batch, tally);
  auto before = stats_or_die(self, engine);
  throughput_result out;
  out.tasks = s.tasks;
  auto cpu_start = cpu_s();
  auto start = clock_type::now();
  std::vector<std::shared_ptr<bench::batch_progress>> progress;
  for (uint32_t p = 0; p < s.producers; ++p) {
    auto plan = std::make_shared<bench::batch_plan>();
    plan->topic = "bench";
    plan->tasks = s.tasks / s.producers + (p < s.tasks % s.producers ? 1 : 0);
    plan->batch = s.batch;
    plan->outstanding = s.outstanding;
    plan->due_ms = [](uint64_t, int64_t now) { return now; };
    progress.push_back(std::make_shared<bench::batch_progress>());
    sys.spawn(bench::batch_producer, engine,
              std::shared_ptr<const bench::batch_plan>(plan), progress.back());
  }
  auto timeout =
    milliseconds{std::max<int64_t>(60'000, static_cast<int64_t>(s.tasks / 2))};
  bool ok =
    bench::wait_until([&] { return tally->delivered >= s.tasks; }, timeout);
  auto delivered_at = clock_type::now();
  v1::StatsReply after;
  if (ok) {
    ok = bench::wait_until(
      [&] {
        after = stats_or_die(self, engine);
        return after.acked() - before.acked() >= s.tasks;
      },
      milliseconds{30'000}, std::chrono::microseconds{200});
  }
  auto acked_at = clock_type::now();
  for (auto& p : progress)
    if (p->failed > 0)
      die("schedule failed for " + std::to_string(p->failed.load()) +
          " tasks: " + p->first_error);
  if (!ok) {
    auto st = stats_or_die(self, engine);
    die("throughput run stalled: delivered " +
        std::to_string(tally->delivered) + " of " + std::to_string(s.tasks) +
        "; engine: " + st.ShortDebugString());
  }
  out.cpu_s = cpu_s() - cpu_start;
  out.deliver_s = bench::seconds_between(start, delivered_at);
  out.ack_s = bench::seconds_between(start, acked_at);
  out.delivered = tally->delivered;
  out.redelivered = tally->redelivered;
  out.acked = after.acked() - before.acked();
  out.commits = after.commits() - before.commits();
  out.fired = after.fired() - before.fired();
  for (auto& c : consumers)
    self->send_exit(c, caf::exit_reason::user_shutdown);
  return out;
}

throughput_result run_embedded(const settings& s, storage::durability level,
                               const std::filesystem::path& root) {
  bench::scratch_dir dir(root / "embedded");
  caf_config cfg{s, false};
  caf::actor_system sys{cfg};
  bench_engine engine(sys, engine_cfg(s, dir.str(), level));
  auto res = drive_throughput(sys, engine.handle(), s);
  engine.stop();
  return res;
}

void print_child_result(const throughput_result& r) {
  std::cout << "deliver_s=" << r.deliver_s << " ack_s=" << r.ack_s
            << " delivered=" << r.delivered << " redelivered=" << r.redelivered
            << " acked=" << r.acked << " commits=" << r.commits
            << " fired=" << r.fired << " cpu_s=" << r.cpu_s << std::endl;
}

/// The child side of a remote run: connects, drives, prints.
int run_remote_child(const settings& s) {
  caf_config cfg{s, true};
  caf::actor_system sys{cfg};
  auto engine = net::connect_engine(sys, "127.0.0.1", s.port);
  if (!engine)
    die("cannot connect: " + net::describe(engine.error()));
  auto res = drive_throughput(sys, *engine, s);
  print_child_result(res);
  return 0;
}

throughput_result run_remote(const settings& s, storage::durability level,
                             const std::filesystem::path& root) {
  bench::scratch_dir dir(root / "remote");
  caf_config cfg{s, true};
  caf::actor_system sys{cfg};
  bench_engine engine(sys, engine_cfg(s, dir.str(), level));
  auto port = net::publish_engine(sys, engine.handle(), "127.0.0.1", 0);
  if (!port)
    die("publish failed: " + net::describe(port.error()));
  auto cpu_start = cpu_s();
  auto fields = run_child("'" + self_exe() + "' --child remote --port " +
                          std::to_string(*port) + child_args(s));
  auto engine_cpu_s = cpu_s() - cpu_start;
  throughput_result r;
  r.tasks = s.tasks;
  r.deliver_s = std::stod(field(fields, "deliver_s"));
  r.ack_s = std::stod(field(fields, "ack_s"));
  r.delivered = std::stoull(field(fields, "delivered"));
  r.redelivered = std::stoull(field(fields, "redelivered"));
  r.acked = std::stoull(field(fields, "acked"));
  r.commits = std::stoull(field(fields, "commits"));
  r.fired = std::stoull(field(fields, "fired"));
  r.cpu_s = engine_cpu_s;
  r.client_cpu_s = std::stod(field(fields, "cpu_s"));
  static_cast<void>(sys.middleman().unpublish(engine.handle(), *port));
  engine.stop();
  return r;
}

/// The same durable work per task as the engine, in plain RocksDB, one
/// thread: records in a `tasks` column family, due keys in a `due` one (as
/// the store keeps them), `batch` tasks per WriteBatch and three
/// WriteBatches per batch: schedule (put record, put due key), fire (put
/// record: the due key stays, the lease lives in memory), ack (delete
/// record, delete due key); WriteOptions.sync as the engine's durability.
double plain_lifecycle_rate(const std::string& path, bool sync, uint64_t tasks,
                            uint32_t batch, size_t value_bytes) {
  logic::engine_config defaults;
  rocksdb::DBOptions db_opts;
  db_opts.create_if_missing = true;
  db_opts.create_missing_column_families = true;
  rocksdb::ColumnFamilyOptions cf_opts;
  cf_opts.write_buffer_size = defaults.write_buffer_bytes;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(defaults.block_cache_bytes);
  cf_opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs{
    {rocksdb::kDefaultColumnFamilyName, cf_opts},
    {"tasks", cf_opts},
    {"due", cf_opts}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  if (auto st = rocksdb::DB::Open(db_opts, path, cfs, &handles, &raw); !st.ok())
    die("plain open: " + st.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  auto* tasks_cf = handles[1];
  auto* due_cf = handles[2];
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  std::string value(value_bytes, 'v');
  auto record_key = [](uint64_t id) {
    std::string k(8, '\0');
    for (int b = 0; b < 8; ++b)
      k[b] = static_cast<char>(id >> (56 - 8 * b));
    return k;
  };
  auto index_key = [](int64_t due, uint64_t id) {
    std::string k(16, '\0');
    for (int b = 0; b < 8; ++b) {
      k[b] = static_cast<char>(static_cast<uint64_t>(due) >> (56 - 8 * b));
      k[8 + b] = static_cast<char>(id >> (56 - 8 * b));
    }
    return k;
  };
  rocksdb::WriteBatch wb;
  auto write = [&] {
    if (auto st = db->Write(wo, &wb); !st.ok())
      die("plain write: " + st.ToString());
    wb.Clear();
  };
  auto start = clock_type::now();
  for (uint64_t first = 0; first < tasks; first += batch) {
    auto last = std::min<uint64_t>(tasks, first + batch);
    auto now = bench::wall_ms();
    for (auto id = first; id < last; ++id) {
      wb.Put(tasks_cf, record_key(id), value);
      wb.Put(due_cf, index_key(now, id), rocksdb::Slice{});
    }
    write();
    for (auto id = first; id < last; ++id)
      wb.Put(tasks_cf, record_key(id), value);
    write();
    for (auto id = first; id < last; ++id) {
      wb.Delete(tasks_cf, record_key(id));
      wb.Delete(due_cf, index_key(now, id));
    }
    write();
  }
  auto rate = static_cast<double>(tasks) /
              bench::seconds_between(start, clock_type::now());
  for (auto* handle : handles)
    db->DestroyColumnFamilyHandle(handle);
  if (auto st = db->Close(); !st.ok())
    die("plain close: " + st.ToString());
  return rate;
}

struct throughput_cell {
  std::vector<double> embedded;
  std::vector<double> remote;
  std::vector<double> plain;
  std::vector<double> tasks_per_commit;
  /// CPU µs per task: embedded process, remote engine and client
  /// processes, plain loop.
  std::vector<double> embedded_cpu;
  std::vector<double> remote_engine_cpu;
  std::vector<double> remote_client_cpu;
  std::vector<double> plain_cpu;
  uint64_t redelivered = 0;
};

struct throughput_summary {
  std::string md;
  /// Median embedded sync tasks/s (the stream rate of section 2 derives
  /// from it).
  double embedded_sync = 0;
  double embedded_none = 0;
  double remote_sync = 0;
};

/// "median (min – max)", or a dash without runs.
std::string spread(const std::vector<double>& xs) {
  if (xs.empty())
    return "–";
  auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
  return rate_str(median(xs)) + " (" + rate_str(*lo) + " – " + rate_str(*hi) +
         ")";
}

throughput_summary throughput_section(const settings& s,
                                      const std::filesystem::path& root) {
  auto sample = bench::bench_record(123'456'789, 1'700'000'000'000);
  sample.stamp = storage::stamp{1, 123'456'789};
  auto value = storage::encode(sample);
  if (!value)
    die("encode failed");
  std::map<storage::durability, throughput_cell> cells;
  auto load_start = loadavg();
  auto t0 = clock_type::now();
  for (auto level : s.levels) {
    auto& cell = cells[level];
    for (int run = 0; run < s.runs; ++run) {
      // Rotate the order so that slow phases of the shared machine and disk
      // spread over all three.
      for (int k = 0; k < 3; ++k) {
        static const char* const mode_names[] = {"embedded", "remote", "plain"};
        auto mode = (run + k) % 3;
        if (!s.modes.count(mode_names[mode]))
          continue;
        switch (mode) {
          case 0: {
            auto r = run_embedded(s, level, root);
            cell.embedded.push_back(r.rate());
            cell.tasks_per_commit.push_back(
              static_cast<double>(r.tasks) /
              static_cast<double>(std::max<uint64_t>(1, r.commits)));
            cell.embedded_cpu.push_back(1e6 * r.cpu_s /
                                        static_cast<double>(r.tasks));
            cell.redelivered += r.redelivered;
            std::cout << "  " << name_of(level) << " embedded run " << run + 1
                      << ": " << rate_str(r.rate()) << " tasks/s (last "
                      << "delivery after " << fixed(r.deliver_s, 2)
                      << " s, all acks committed after " << fixed(r.ack_s, 2)
                      << " s, " << r.commits << " commits, " << r.fired
                      << " fires, "
                      << fixed(1e6 * r.cpu_s / static_cast<double>(r.tasks), 1)
                      << " CPU µs per task)" << std::endl;
            break;
          }
          case 1: {
            auto r = run_remote(s, level, root);
            cell.remote.push_back(r.rate());
            cell.remote_engine_cpu.push_back(1e6 * r.cpu_s /
                                             static_cast<double>(r.tasks));
            cell.remote_client_cpu.push_back(1e6 * r.client_cpu_s /
                                             static_cast<double>(r.tasks));
            cell.redelivered += r.redelivered;
            std::cout << "  " << name_of(level) << " remote run " << run + 1
                      << ": " << rate_str(r.rate()) << " tasks/s (last "
                      << "delivery after " << fixed(r.deliver_s, 2)
                      << " s, all acks committed after " << fixed(r.ack_s, 2)
                      << " s, CPU µs per task: engine "
                      << fixed(1e6 * r.cpu_s / static_cast<double>(r.tasks), 1)
                      << ", client "
                      << fixed(1e6 * r.client_cpu_s /
                                 static_cast<double>(r.tasks),
                               1)
                      << ")" << std::endl;
            break;
          }
          default: {
            bench::scratch_dir dir(root / "plain");
            auto cpu_start = cpu_s();
            auto rate = plain_lifecycle_rate(dir.str(),
                                             level == storage::durability::sync,
                                             s.tasks, s.batch, value->size());
            cell.plain.push_back(rate);
            cell.plain_cpu.push_back(1e6 * (cpu_s() - cpu_start) /
                                     static_cast<double>(s.tasks));
            std::cout << "  " << name_of(level) << " plain RocksDB run "
                      << run + 1 << ": " << rate_str(rate) << " tasks/s"
                      << std::endl;
            break;
          }
        }
      }
    }
  }
  auto elapsed = bench::seconds_between(t0, clock_type::now());
  throughput_summary out;
  auto& sync = cells[storage::durability::sync];
  auto& none = cells[storage::durability::none];
  out.embedded_sync = median(sync.embedded);
  out.embedded_none = median(none.embedded);
  out.remote_sync = median(sync.remote);
  std::ostringstream md;
  md << "### End-to-end throughput\n\n"
     << s.tasks << " tasks per run, due at once (at_ms = now), " << s.producers
     << " producers x " << s.outstanding
     << " outstanding schedule_batch requests of " << s.batch << ", "
     << s.consumers << " consumers acking at once (max_in_flight "
     << (s.max_in_flight > 0
           ? std::to_string(s.max_in_flight)
           : std::to_string(logic::engine_config{}.max_in_flight_per_consumer) +
               ", the default")
     << ", "
     << (s.max_batch == 1
           ? std::string{"one delivery per message"}
           : "batch consumers, max_batch " +
               (s.max_batch == 0
                  ? std::to_string(logic::engine_config{}.default_max_batch) +
                      ", the default"
                  : std::to_string(s.max_batch)))
     << "), " << s.shards << " shards, " << s.notifiers
     << " notifiers. A run ends when the engine's stats count all acks "
     << "committed. Median of " << s.runs << " runs (min – max). Plain: "
     << "one thread, same writes per task in plain RocksDB (3 WriteBatches "
     << "per " << s.batch << " tasks), same sync flag. Load average "
     << load_start << " before, " << loadavg() << " after ("
     << fixed(elapsed, 0) << " s).\n\n"
     << "| durability | embedded tasks/s | remote tasks/s | plain RocksDB "
        "tasks/s | embedded/plain | remote/embedded | tasks per commit |\n"
     << "|---|---:|---:|---:|---:|---:|---:|\n";
  for (auto level : s.levels) {
    auto& c = cells[level];
    auto e = median(c.embedded);
    auto r = median(c.remote);
    auto p = median(c.plain);
    md << "| " << name_of(level) << " | " << spread(c.embedded) << " | "
       << spread(c.remote) << " | " << spread(c.plain) << " | "
       << ratio_str(e, p) << " | " << ratio_str(r, e) << " | "
       << (c.tasks_per_commit.empty() ? "–"
                                      : fixed(median(c.tasks_per_commit), 0))
       << " |\n";
  }
  auto cpu = [](const std::vector<double>& xs) {
    return xs.empty() ? std::string{"–"} : fixed(median(xs), 1);
  };
  md << "\nCPU time (user + system, all threads) per task, µs, medians; "
        "what the machine's cores spent, independent of how busy it was "
        "otherwise:\n\n"
     << "| durability | embedded (engine + producers + consumers) | remote: "
        "engine process | remote: client process | plain RocksDB |\n"
     << "|---|---:|---:|---:|---:|\n";
  for (auto level : s.levels) {
    auto& c = cells[level];
    md << "| " << name_of(level) << " | " << cpu(c.embedded_cpu) << " | "
       << cpu(c.remote_engine_cpu) << " | " << cpu(c.remote_client_cpu) << " | "
       << cpu(c.plain_cpu) << " |\n";
  }
  md << "\nsync/none: embedded "
     << ratio_str(out.embedded_sync, out.embedded_none) << ", remote "
     << ratio_str(median(sync.remote), median(none.remote))
     << ". Redeliveries seen by consumers: "
     << sync.redelivered + none.redelivered << ".\n\n"
     << "**Goal >= 100k tasks/s end to end with sync (embedded): "
     << (out.embedded_sync >= 100'000 ? "met" : "missed") << "** ("
     << rate_str(out.embedded_sync) << " tasks/s; remote "
     << rate_str(out.remote_sync) << ").\n";
  out.md = md.str();
  return out;
}

// -- 2. lateness --------------------------------------------------------------

struct lateness_result {
  uint64_t pending = 0;
  uint64_t in_window = 0;
  uint64_t far = 0;
  double far_load_s = 0;
  /// Seconds until the engine went idle after opening the backlog.
  double settle_s = 0;
  double rate = 0;
  int64_t window_ms = 0;
  std::vector<std::array<int64_t, 4>> periods;
  /// The host's timer lateness (bench::timer_probe, one deadline per ms):
  /// p50, p99 and max over 2 s with the engine idle just before the
  /// stream, and per period while the stream ran beside it.
  std::array<int64_t, 3> timer_idle{};
  std::vector<std::array<int64_t, 4>> timer_periods;
  /// The host's steal time in percent of all CPU time (bench::cpu_times)
  /// during the idle probe and from the stream's start until everything
  /// was delivered; negative if unknown.
  double steal_idle_percent = -1;
  double steal_stream_percent = -1;
  /// A thread that never sleeps, for 1 s after the idle timer probe.
  bench::timer_probe::spin_stalls spin_idle;
  uint64_t expected = 0;
  uint64_t delivered = 0;
  uint64_t acked_after_due = 0;
  uint64_t stalled_ticks = 0;
  uint64_t redelivered = 0;
  uint64_t engine_in_window = 0;
  /// Process CPU seconds and engine commits from the stream's start until
  /// everything was delivered.
  double stream_cpu_s = 0;
  uint64_t stream_commits = 0;
  /// Seconds from the producer's last answer until every task was
  /// delivered (-1: not within drain_wait_ms), and the process CPU seconds
  /// of those.
  double drain_s = -1;
  double drain_cpu_s = 0;
  /// Seconds from the stream's start until the producer's last answer (a
  /// producer slowed down by late answers takes longer than the stream),
  /// and the process's RSS then, in MiB.
  double producer_s = 0;
  double producer_rss_mib = 0;
  std::string load;
  storage::durability level = storage::durability::sync;
};

/// Writes `n` pending tasks of topic "far", due at `base_ms` plus up to 10
/// days, straight into the shard stores of an engine with data directory
/// `data_dir` (the directories and options the engine gives its shards),
/// with durability none, 1000 per commit, two threads. Much faster than
/// scheduling them through the engine, and the stores end up as the
/// engine would have written them. Returns the seconds it took and, per
/// shard, one id that was written (to check that the engine sees them).
std::pair<double, std::vector<core::task_id>>
fill_far_direct(const settings& s, const std::string& data_dir, uint64_t n,
                int64_t base_ms) {
  auto start = clock_type::now();
  std::vector<core::task_id> probe(s.shards, 0);
  std::atomic<bool> failed{false};
  auto fill_shard = [&](uint32_t shard) {
    logic::engine_config defaults;
    storage::store_options opts;
    opts.path =
      (std::filesystem::path{data_dir} / ("shard-" + std::to_string(shard)))
        .string();
    opts.shard = shard;
    opts.shard_count = s.shards;
    opts.durability = storage::durability::none;
    opts.write_buffer_bytes = defaults.write_buffer_bytes;
    opts.block_cache_bytes = defaults.block_cache_bytes;
    opts.btree_task_memtable = s.btree_task_memtable;
    auto store = storage::rocks_task_store::open(opts);
    if (!store) {
      failed = true;
      return;
    }
    auto count = n / s.shards + (shard < n % s.shards ? 1 : 0);
    storage::write_batch wb;
    for (uint64_t done = 0; done < count;) {
      wb.clear();
      for (size_t i = 0; i < 1000 && done < count; ++i, ++done) {
        auto id = (*store)->allocate_id();
        auto rec = bench::bench_record(
          id, base_ms + static_cast<int64_t>(splitmix(id) % (10 * day_ms)));
        rec.task.topic = "far";
        probe[shard] = id;
        wb.put(std::move(rec));
      }
      if (auto err = (*store)->commit(wb)) {
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (uint32_t shard = t; shard < s.shards; shard += 2)
        fill_shard(shard);
    });
  for (auto& th : threads)
    th.join();
  if (failed)
    die("filling the shard stores failed");
  return {bench::seconds_between(start, clock_type::now()), probe};
}

/// Waits until this process used less than 5% of one core over half a
/// second (background compactions done), at most `timeout`; returns the
/// seconds waited.
double wait_idle(milliseconds timeout) {
  auto start = clock_type::now();
  for (;;) {
    auto cpu0 = cpu_s();
    auto t0 = clock_type::now();
    std::this_thread::sleep_for(milliseconds{500});
    auto busy =
      (cpu_s() - cpu0) / bench::seconds_between(t0, clock_type::now());
    if (busy < 0.05 || clock_type::now() - start > timeout)
      return bench::seconds_between(start, clock_type::now());
  }
}

/// The stream producer's tasks keep at most this many requests open.
constexpr uint32_t stream_outstanding = 64;

/// How long a stream's tasks may take to be delivered after the producer's
/// last answer.
constexpr int64_t drain_wait_ms = 60'000;

lateness_result lateness_case(const settings& s, uint64_t pending, double rate,
                              storage::durability level,
                              const std::filesystem::path& root) {
  bench::scratch_dir dir(root / "lateness");
  lateness_result out;
  out.level = level;
  out.pending = pending;
  out.rate = rate;
  out.in_window = std::min(pending, s.in_window_pending);
  out.far = pending - out.in_window;
  auto measured_ms =
    static_cast<int64_t>(1000 * (s.warmup_s + s.measure_s * s.runs));
  // The in-window pending tasks are due after the measurement and before
  // the window's end.
  out.window_ms = std::max<int64_t>(minute_ms, measured_ms + 30'000);
  auto window_cfg = [&](storage::durability level) {
    auto cfg = engine_cfg(s, dir.str(), level);
    cfg.shard.window.window_ms = out.window_ms;
    cfg.shard.window.max_in_memory = 1'000'000;
    return cfg;
  };
  std::vector<core::task_id> probes;
  if (out.far > 0) {
    // The backlog beyond the window goes straight into the shard stores;
    // the measuring engine then opens them.
    std::filesystem::create_directories(dir.path());
    auto [secs, ids] =
      fill_far_direct(s, dir.str(), out.far, bench::wall_ms() + hour_ms);
    out.far_load_s = secs;
    probes = ids;
    std::cout << "  wrote " << out.far << " tasks beyond the window into the "
              << "shard stores in " << fixed(secs, 1) << " s ("
              << rate_str(static_cast<double>(out.far) / secs)
              << " tasks/s, durability none, 2 threads)" << std::endl;
  }
  caf_config cfg{s, false};
  caf::actor_system sys{cfg};
  bench_engine engine(sys, window_cfg(level));
  caf::scoped_actor self{sys};
  for (auto id : probes) {
    if (id == 0)
      continue;
    v1::GetRequest get;
    get.set_id(id);
    bool found = false;
    self
      ->request(engine.handle(), std::chrono::seconds{30},
                net::get_request{std::move(get)})
      .receive([&](net::get_reply& r) { found = r.pb.task().id() == id; },
               [](caf::error&) {});
    if (!found)
      die("the engine does not see task " + std::to_string(id) +
          " written into its store");
  }
  auto tally = std::make_shared<bench::consumer_tally>();
  tally->record_topic = "stream";
  // Room for every sample up front: the consumers append under one mutex,
  // and growing the vectors there copied up to 48 MiB at once, which showed
  // as stalls of 5 to 25 ms at 0.5, 1 and 2 million samples.
  auto expected_samples =
    static_cast<size_t>(rate * static_cast<double>(measured_ms) / 1000 * 1.1) +
    1024;
  tally->samples.reserve(expected_samples);
  tally->fire_offsets_ms.reserve(expected_samples);
  auto consumers =
    spawn_consumers(sys, self, engine.handle(), "stream", s.consumers,
                    s.max_in_flight, s.max_batch, tally);
  if (out.far > 0) {
    // RocksDB compacts the freshly written backlog in the background; the
    // stream should meet an engine in its steady state, not one sharing
    // the cores with that, so wait until the process is idle.
    out.settle_s = wait_idle(milliseconds{120'000});
    std::cout << "  waited " << fixed(out.settle_s, 1)
              << " s for background work (compactions) to finish" << std::endl;
  }
  if (out.in_window > 0) {
    // Topic "held" has no consumer: should one come due, it is parked, not
    // delivered.
    auto lo = bench::wall_ms() + measured_ms + s.lead_ms + 10'000;
    auto span =
      std::max<int64_t>(1, bench::wall_ms() + out.window_ms - 2'000 - lo);
    auto secs =
      load_tasks(sys, engine.handle(), "held", out.in_window, s.producers, 1000,
                 8, [lo, span](uint64_t i, int64_t) {
                   return lo + static_cast<int64_t>(splitmix(i) % span);
                 });
    std::cout << "  loaded " << out.in_window << " tasks inside the window in "
              << fixed(secs, 1) << " s (durability " << name_of(level) << ")"
              << std::endl;
  }
  {
    auto steal_before = bench::cpu_times::now();
    auto idle = bench::timer_probe::measure(milliseconds{2'000});
    out.steal_idle_percent =
      bench::steal_percent(steal_before, bench::cpu_times::now());
    out.spin_idle = bench::timer_probe::spin(milliseconds{1'000});
    out.timer_idle = {percentile(idle, 0.5), percentile(idle, 0.99),
                      idle.empty() ? 0 : idle.back()};
  }
  out.load = loadavg();
  auto plan = std::make_shared<bench::stream_plan>();
  plan->rate_per_s = rate;
  plan->lead_ms = s.lead_ms;
  plan->first_due_ms = bench::wall_ms() + s.lead_ms + 100;
  plan->end_due_ms = plan->first_due_ms + measured_ms;
  plan->outstanding = stream_outstanding;
  auto progress = std::make_shared<bench::stream_progress>();
  auto commits_before = stats_or_die(self, engine.handle()).commits();
  auto cpu_before = cpu_s();
  auto steal_before = bench::cpu_times::now();
  bench::timer_probe probe;
  probe.start();
  auto stream_start = clock_type::now();
  sys.spawn(bench::stream_producer, engine.handle(),
            std::shared_ptr<const bench::stream_plan>(plan), progress);
  if (!bench::wait_until([&] { return progress->done.load(); },
                         milliseconds{measured_ms + 120'000}, milliseconds{5}))
    die("the stream producer did not finish");
  auto answered_at = clock_type::now();
  auto cpu_answered = cpu_s();
  // A mark for a profiler attached to the drain alone.
  std::cout << "  draining: the producer has its last answer" << std::endl;
  out.producer_s = bench::seconds_between(stream_start, answered_at);
  out.producer_rss_mib = static_cast<double>(bench::rss_kib()) / 1024;
  if (bench::wait_until([&] { return tally->delivered >= progress->scheduled; },
                        milliseconds{drain_wait_ms}, milliseconds{1}))
    out.drain_s = bench::seconds_between(answered_at, clock_type::now());
  else
    std::cout << "  warning: " << progress->scheduled - tally->delivered
              << " stream tasks not delivered " << drain_wait_ms / 1000
              << " s after the end" << std::endl;
  std::cout << "  drained" << std::endl;
  out.drain_cpu_s = cpu_s() - cpu_answered;
  probe.stop();
  out.stream_cpu_s = cpu_s() - cpu_before;
  out.steal_stream_percent =
    bench::steal_percent(steal_before, bench::cpu_times::now());
  auto st = stats_or_die(self, engine.handle());
  out.stream_commits = st.commits() - commits_before;
  out.engine_in_window = st.in_window();
  for (auto& c : consumers)
    self->send_exit(c, caf::exit_reason::user_shutdown);
  engine.stop();
  if (progress->failed > 0)
    die("stream schedules failed: " + std::to_string(progress->failed));
  out.acked_after_due = progress->acked_after_due;
  out.stalled_ticks = progress->stalled_ticks;
  out.redelivered = tally->redelivered;
  out.delivered = tally->delivered;
  out.expected = progress->scheduled;
  std::lock_guard<std::mutex> guard{tally->mtx};
  if (!s.dump_path.empty()) {
    std::ofstream dump(s.dump_path + "." + std::string{name_of(level)} + "." +
                       std::to_string(pending));
    for (size_t i = 0; i < tally->samples.size(); ++i)
      dump << tally->samples[i].first << ' ' << tally->samples[i].second << ' '
           << tally->fire_offsets_ms[i] << '\n';
  }
  auto measure_from =
    plan->first_due_ms + static_cast<int64_t>(1000 * s.warmup_s);
  auto period_ms = static_cast<int64_t>(1000 * s.measure_s);
  // p50, p99, p99.9 and max of the samples due in each period.
  auto by_period = [&](const std::vector<std::pair<int64_t, int64_t>>& xs) {
    std::vector<std::vector<int64_t>> per(s.runs);
    for (auto& [due, late] : xs) {
      if (due < measure_from)
        continue;
      auto k = (due - measure_from) / period_ms;
      if (k < s.runs)
        per[k].push_back(late);
    }
    std::vector<std::array<int64_t, 4>> result;
    for (auto& ys : per) {
      std::sort(ys.begin(), ys.end());
      result.push_back({percentile(ys, 0.5), percentile(ys, 0.99),
                        percentile(ys, 0.999), ys.empty() ? 0 : ys.back()});
    }
    return result;
  };
  out.periods = by_period(tally->samples);
  out.timer_periods = by_period(probe.samples());
  for (size_t k = 0; k < out.periods.size(); ++k)
    std::cout << "  period: p50 " << ms_str(out.periods[k][0]) << " ms, p99 "
              << ms_str(out.periods[k][1]) << " ms, p99.9 "
              << ms_str(out.periods[k][2]) << " ms, max "
              << ms_str(out.periods[k][3]) << " ms; host timer p99 "
              << ms_str(out.timer_periods[k][1]) << " ms, max "
              << ms_str(out.timer_periods[k][3]) << " ms" << std::endl;
  std::cout << "  host timer with the engine idle: p50 "
            << ms_str(out.timer_idle[0]) << " ms, p99 "
            << ms_str(out.timer_idle[1]) << " ms, max "
            << ms_str(out.timer_idle[2]) << " ms; host steal "
            << bench::steal_text(out.steal_idle_percent) << "% idle, "
            << bench::steal_text(out.steal_stream_percent)
            << "% beside the stream; a spinning thread stalled over 2 ms "
            << out.spin_idle.over_2ms << " times in "
            << fixed(out.spin_idle.span_s, 1) << " s, longest "
            << ms_str(out.spin_idle.longest_us) << " ms" << std::endl;
  return out;
}

/// p50, p99 and max in µs of appending 4 KiB to a file under `root` and
/// fdatasync'ing it, 200 times.
std::array<int64_t, 3> fsync_latency(const std::filesystem::path& root) {
  auto path = (root / "fsync-probe").string();
  auto fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0)
    die("cannot create " + path);
  std::string block(4096, 'x');
  std::vector<int64_t> us;
  for (int i = 0; i < 200; ++i) {
    auto start = clock_type::now();
    if (::write(fd, block.data(), block.size()) !=
          static_cast<ssize_t>(block.size()) ||
        ::fdatasync(fd) != 0)
      die("fsync probe failed");
    us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                   clock_type::now() - start)
                   .count());
  }
  ::close(fd);
  std::filesystem::remove(path);
  std::sort(us.begin(), us.end());
  return {percentile(us, 0.5), percentile(us, 0.99), us.back()};
}

/// Whether a stream kept up: everything delivered, every schedule answered
/// before its task was due, and lateness at the median small (a stream the
/// engine cannot carry piles up and is seconds late at the median; a
/// passing stall of the host only shows in the tail).
bool kept_up(const lateness_result& r) {
  if (r.delivered < r.expected || r.acked_after_due > 0 || r.periods.empty())
    return false;
  std::vector<double> p50;
  for (auto& p : r.periods)
    p50.push_back(static_cast<double>(p[0]));
  return median(p50) <= 5'000;
}

/// The highest rate of a steady stream the engine keeps up with (sync,
/// nothing else pending): the maximum load for the lateness goal. A
/// stream costs more per task than a burst of tasks due at once (smaller
/// batches, commits, messages), so the burst throughput overstates it.
struct sustained_search {
  double rate = 0;
  /// Each step: its rate, the run, and whether it kept up.
  std::vector<std::tuple<double, lateness_result, bool>> steps;
};

sustained_search find_sustained_rate(const settings& s, double burst_rate,
                                     const std::filesystem::path& root) {
  auto t = s;
  t.runs = 1;
  t.warmup_s = 1;
  t.measure_s = s.quick ? 1 : 3;
  t.in_window_pending = 0;
  t.dump_path.clear();
  sustained_search out;
  // Start at half the burst rate, in steps of 15%; a failed step is tried
  // once more before the search stops, so that one stall of the host does
  // not end it.
  double rate = std::max(1'000.0, std::round(burst_rate / 2'000) * 1'000);
  bool retried = false;
  for (int step = 0; step < 16; ++step) {
    std::cout << "sustained stream: " << rate_str(rate) << " tasks/s"
              << std::endl;
    auto r = lateness_case(t, 0, rate, storage::durability::sync, root);
    auto ok = kept_up(r);
    out.steps.emplace_back(rate, r, ok);
    if (ok) {
      out.rate = rate;
      retried = false;
      rate = std::round(rate * 1.15 / 1'000) * 1'000;
    } else if (!retried) {
      retried = true;
    } else {
      break;
    }
  }
  return out;
}

/// CPU µs per delivered task of `r`, the drain included.
double cpu_us_per_task(const lateness_result& r) {
  return 1e6 * r.stream_cpu_s /
         static_cast<double>(std::max<uint64_t>(1, r.delivered));
}

/// Streams at `rate`, more than the engine can carry, one per length of
/// --overload-s (sync, nothing else pending, one period each).
std::vector<lateness_result> overload_rows(const settings& s, double rate,
                                           const std::filesystem::path& root) {
  auto spans = s.overload_spans_s;
  if (spans.empty())
    spans.push_back(s.warmup_s + s.measure_s);
  std::vector<lateness_result> out;
  for (auto span : spans) {
    auto t = s;
    t.runs = 1;
    t.dump_path.clear();
    t.warmup_s = std::min(s.warmup_s, span / 2);
    t.measure_s = span - t.warmup_s;
    std::cout << "overload: stream " << rate_str(rate) << " tasks/s for "
              << fixed(span, 1) << " s, nothing pending, durability sync"
              << std::endl;
    out.push_back(lateness_case(t, 0, rate, storage::durability::sync, root));
    auto& r = out.back();
    std::cout << "  delivered " << r.delivered << "/" << r.expected
              << ", producer done after " << fixed(r.producer_s, 1)
              << " s (RSS " << fixed(r.producer_rss_mib, 0) << " MiB), drained "
              << fixed(r.drain_s, 1)
              << " s after the producer's last answer, CPU "
              << fixed(cpu_us_per_task(r), 1) << " µs per task ("
              << fixed(r.drain_cpu_s, 1) << " s of it while draining)"
              << std::endl;
  }
  return out;
}

std::string overload_md(const settings& s, double rate,
                        const std::vector<lateness_result>& rows) {
  std::ostringstream md;
  md << "\n### Overload\n\n"
     << "Streams the engine cannot carry, at " << rate_str(rate) << " tasks/s"
     << (s.overload_rate > 0
           ? " (set by --overload-rate)"
           : " (" + fixed(s.overload_factor, 2) + " of the sustained rate)")
     << ", sync, nothing else pending: they fall behind, and the question is "
     << "whether they come back. The producer keeps at most "
     << stream_outstanding << " schedule requests open, and the engine "
     << "answers a schedule once it is committed, so a slow engine slows it "
     << "down: producer s is the time from the stream's start until its "
     << "last answer (against the stream's length), RSS the process's "
     << "then. Drain: seconds from the producer's last answer "
     << "until every task was delivered (came back: within 30 s). The "
     << "latest task's lateness is how far behind it fell; CPU per task "
     << "(the drain included) compares with the streams above.\n\n"
     << "| stream s | stream tasks/s | delivered/sent | p50 ms | max ms | "
        "schedule acked after due | producer s | RSS MiB | drain s | CPU µs "
        "per task | came back |\n"
     << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : rows) {
    auto p = r.periods.empty() ? std::array<int64_t, 4>{} : r.periods[0];
    bool back = r.delivered >= r.expected && r.drain_s >= 0 && r.drain_s <= 30;
    md << "| " << fixed(static_cast<double>(r.expected) / rate, 1) << " | "
       << rate_str(rate) << " | " << r.delivered << "/" << r.expected << " | "
       << ms_str(p[0]) << " | " << ms_str(p[3]) << " | " << r.acked_after_due
       << " | " << fixed(r.producer_s, 1) << " | "
       << fixed(r.producer_rss_mib, 0) << " | "
       << (r.drain_s >= 0 ? fixed(r.drain_s, 1) : "> 60") << " | "
       << fixed(cpu_us_per_task(r), 1) << " | " << (back ? "yes" : "**no**")
       << " |\n";
  }
  return md.str();
}

std::string lateness_section(const settings& s, double burst_rate,
                             const std::filesystem::path& root) {
  std::ostringstream search_md;
  double max_rate = burst_rate;
  std::string max_text =
    fixed(s.load_factor, 2) + " of the embedded sync throughput (burst) above";
  if (s.stream_rate <= 0 && s.search) {
    auto found =
      find_sustained_rate(s, burst_rate > 0 ? burst_rate : 100'000.0, root);
    if (found.rate <= 0)
      die("the engine kept up with no stream rate tried");
    max_rate = found.rate;
    max_text = fixed(s.load_factor, 2) + " of the sustained stream rate, " +
               rate_str(found.rate) + " tasks/s";
    search_md
      << "### Maximum load: the highest stream rate kept up with\n\n"
      << "Streams (sync, nothing else pending, 1 s warm-up then "
      << (s.quick ? 1 : 3) << " s measured) at rising rates from "
      << (burst_rate > 0 ? "half the burst throughput"
                         : "50k tasks/s (the throughput section was skipped)")
      << ", 15% per step; a stream keeps up when every task "
      << "is delivered, every schedule is answered before its task is due "
      << "and the median lateness is at most 5 ms (a stream the engine "
      << "cannot carry piles up and is seconds late at the median; a "
      << "passing stall of the host only shows in the tail). A failed step "
      << "is tried once more. The highest rate that kept up is the maximum "
      << "load of the lateness goal: a delay engine's load is tasks coming "
      << "due one after another, which cost more per task than a burst due "
      << "at once (smaller batches, more commits and messages).\n\n"
      << "| stream tasks/s | p50 ms | p99 ms | max ms | delivered/sent | "
         "schedule acked after due | CPU µs per task | kept up |\n"
      << "|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for (auto& [step_rate, r, ok] : found.steps) {
      auto p = r.periods.empty() ? std::array<int64_t, 4>{} : r.periods[0];
      auto cpu_us = 1e6 * r.stream_cpu_s /
                    static_cast<double>(std::max<uint64_t>(1, r.delivered));
      search_md << "| " << rate_str(step_rate) << " | " << ms_str(p[0]) << " | "
                << ms_str(p[1]) << " | " << ms_str(p[3]) << " | " << r.delivered
                << "/" << r.expected << " | " << r.acked_after_due << " | "
                << fixed(cpu_us, 1) << " | " << (ok ? "yes" : "no") << " |\n";
    }
    search_md << "\nSustained stream rate: **" << rate_str(found.rate)
              << " tasks/s**";
    if (burst_rate > 0)
      search_md << " (" << ratio_str(found.rate, burst_rate)
                << " of the burst throughput)";
    search_md << ".\n\n";
  }
  double rate = s.stream_rate > 0 ? s.stream_rate : s.load_factor * max_rate;
  if (rate <= 0)
    die("lateness needs --stream-rate when the throughput section is skipped");
  std::vector<lateness_result> rows;
  auto fsync = fsync_latency(root);
  std::cout << "fsync latency of the scratch disk: p50 " << ms_str(fsync[0])
            << " ms, p99 " << ms_str(fsync[1]) << " ms, max "
            << ms_str(fsync[2]) << " ms" << std::endl;
  for (auto pending : {s.small_pending, s.large_pending}) {
    if (pending == 0 && !rows.empty())
      continue;
    std::cout << "lateness with " << pending << " pending tasks, stream "
              << rate_str(rate) << " tasks/s, durability sync" << std::endl;
    rows.push_back(
      lateness_case(s, pending, rate, storage::durability::sync, root));
  }
  // The same small case without fsync: what the engine adds on its own.
  std::cout << "lateness with " << s.small_pending << " pending tasks, stream "
            << rate_str(rate) << " tasks/s, durability none" << std::endl;
  rows.push_back(
    lateness_case(s, s.small_pending, rate, storage::durability::none, root));
  // For comparison, not for the goal: the load factor of the burst rate.
  double burst_based = s.load_factor * burst_rate;
  if (s.stream_rate <= 0 && s.search && burst_based > 0) {
    std::cout << "lateness with " << s.small_pending << " pending tasks, "
              << "stream " << rate_str(burst_based)
              << " tasks/s (of the burst rate), durability sync" << std::endl;
    rows.push_back(lateness_case(s, s.small_pending, burst_based,
                                 storage::durability::sync, root));
  }
  // More than the engine can carry: does it come back?
  double over_rate = s.overload_rate;
  if (over_rate <= 0 && s.overload_factor > 0 && s.stream_rate <= 0 && s.search)
    over_rate = std::round(max_rate * s.overload_factor / 1'000) * 1'000;
  std::vector<lateness_result> over;
  if (over_rate > 0)
    over = overload_rows(s, over_rate, root);
  std::ostringstream md;
  md << search_md.str() << "### Firing lateness under load\n\n"
     << "A stream of tasks due at a steady " << rate_str(rate) << " tasks/s ("
     << (s.stream_rate > 0 ? "set by --stream-rate" : max_text)
     << "), each scheduled " << s.lead_ms << " ms before its due time, "
     << "embedded, durability as in the row; lateness = wall clock at the "
     << "consumer's handler minus due_ms. Pending tasks: up to "
     << s.in_window_pending
     << " inside the window (due after the measurement, scheduled through "
     << "the engine), the rest beyond it (due 1 h to 10 days out, written "
     << "straight into the shard stores before the engine starts, then "
     << "waiting for compactions: "
     << fixed(rows.size() > 1 ? rows[1].settle_s : 0.0, 1) << " s). "
     << "Window " << rows.front().window_ms / 1000 << " s, max_in_memory 1M. "
     << s.warmup_s << " s warm-up, then " << s.runs << " periods of "
     << s.measure_s << " s; percentiles are medians over the periods, max "
     << "is over all.\n\n"
     << "| durability | pending | beyond window | stream tasks/s | p50 ms | "
        "p99 ms | p99.9 ms | max ms | delivered/sent | schedule acked after "
        "due | CPU µs per task | commits per 1k tasks | host timer p99 "
        "ms, idle | host timer p99 ms, beside the stream | host steal %, "
        "idle | host steal %, beside the stream | spinning thread, idle: "
        "stalls over 2 ms per s, longest ms | load avg |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|---:|---:|---|\n";
  bool met = true;
  int64_t host_idle_p99 = 0;
  for (auto& r : rows) {
    std::array<std::vector<double>, 4> cols;
    int64_t worst = 0;
    for (auto& p : r.periods) {
      for (int i = 0; i < 3; ++i)
        cols[i].push_back(static_cast<double>(p[i]));
      worst = std::max(worst, p[3]);
    }
    std::vector<double> timer_p99;
    for (auto& p : r.timer_periods)
      timer_p99.push_back(static_cast<double>(p[1]));
    auto p99 = static_cast<int64_t>(median(cols[1]));
    host_idle_p99 = std::max(host_idle_p99, r.timer_idle[1]);
    if (r.level == storage::durability::sync && r.rate == rate)
      met = met && p99 <= 2'000 && r.delivered >= r.expected;
    md << "| " << name_of(r.level) << " | " << r.pending << " | " << r.far
       << " | " << rate_str(r.rate) << " | "
       << ms_str(static_cast<int64_t>(median(cols[0]))) << " | " << ms_str(p99)
       << " | " << ms_str(static_cast<int64_t>(median(cols[2]))) << " | "
       << ms_str(worst) << " | " << r.delivered << "/" << r.expected << " | "
       << r.acked_after_due << " | "
       << fixed(1e6 * r.stream_cpu_s /
                  static_cast<double>(std::max<uint64_t>(1, r.delivered)),
                1)
       << " | "
       << fixed(1e3 * static_cast<double>(r.stream_commits) /
                  static_cast<double>(std::max<uint64_t>(1, r.delivered)),
                1)
       << " | " << ms_str(r.timer_idle[1]) << " | "
       << ms_str(static_cast<int64_t>(median(timer_p99))) << " | "
       << bench::steal_text(r.steal_idle_percent) << " | "
       << bench::steal_text(r.steal_stream_percent) << " | "
       << fixed(static_cast<double>(r.spin_idle.over_2ms) /
                  std::max(r.spin_idle.span_s, 1e-3),
                1)
       << ", " << ms_str(r.spin_idle.longest_us) << " | " << r.load << " |\n";
  }
  md << "\nThe scratch disk's fsync (4 KiB append + fdatasync, 200 times): "
     << "p50 " << ms_str(fsync[0]) << " ms, p99 " << ms_str(fsync[1])
     << " ms, max " << ms_str(fsync[2]) << " ms. With sync durability a "
     << "fired task is delivered only after the commit that marks it in "
     << "flight is fsync'd; tasks are fired up to fire_lead_ms ahead of "
     << "their due time, so only commits slower than that make them late. "
     << "CPU is the whole process's (engine, producer, consumers) from the "
     << "stream's start until everything was delivered, per delivered "
     << "task; commits are the engine's (schedules, fires, acks). The host "
     << "timer is the baseline: a thread of this process sleeping until a "
     << "deadline every 1 ms (std::this_thread::sleep_until), its lateness "
     << "per deadline, for 2 s with the engine idle just before each row "
     << "and beside the stream during it (median of the periods' p99). No "
     << "engine on this machine fires more punctually than that thread "
     << "wakes. Host steal is the share of all CPU time that the host "
     << "took from this machine's vCPUs (/proc/stat), in those 2 s and "
     << "during the stream: the host deschedules a vCPU for milliseconds at "
     << "a time, running thread or not, and whatever is due meanwhile is "
     << "late. The spinning thread shows it without the timer: it reads "
     << "the clock in a loop for 1 s after the idle probe and counts the "
     << "gaps between two reads over 2 ms, which busy polling would not "
     << "escape either.\n\n"
     << (rows.back().rate != rate
           ? "The last row streams " + fixed(s.load_factor, 2) +
               " of the burst throughput instead, for comparison; it is "
               "not part of the goal. "
           : "")
     << "**Goal p99 lateness <= 2 ms at "
     << (s.stream_rate > 0 ? "the set rate"
                           : fixed(s.load_factor, 2) + " of max load")
     << " (sync rows at " << rate_str(rate)
     << " tasks/s): " << (met ? "met" : "missed") << "**"
     << (!met && host_idle_p99 > 2'000
           ? " (the host's own timer p99 with the engine idle reached " +
               ms_str(host_idle_p99) + " ms, above the goal)"
           : "")
     << ".\n";
  if (!over.empty())
    md << overload_md(s, over_rate, over);
  return md.str();
}

// -- 3. RSS per pending task --------------------------------------------------

/// The child side: a fresh process with an engine, RSS before and after
/// scheduling rss_tasks tasks inside (`window`) or beyond (`beyond`) the
/// window, and again after as many more: what a task adds once the bounded
/// costs (write buffers, caches, deferred index entries) are paid.
int run_rss_child(const settings& s) {
  bool inside = s.rss_where == "window";
  if (!inside && s.rss_where != "beyond")
    die("--rss-where must be window or beyond");
  auto dir_tmpl = std::string{"/tmp/dally-engine-rss-XXXXXX"};
  if (!s.dir.empty())
    dir_tmpl = s.dir + "/rss-XXXXXX";
  std::filesystem::create_directories(
    std::filesystem::path(dir_tmpl).parent_path());
  if (mkdtemp(dir_tmpl.data()) == nullptr)
    die("mkdtemp failed");
  bench::scratch_dir dir(dir_tmpl);
  uint64_t rss_start = bench::rss_kib();
  uint64_t rss_before = 0;
  uint64_t rss_after = 0;
  uint64_t rss_trimmed = 0;
  uint64_t mem_before = 0;
  uint64_t mem_after = 0;
  uint64_t in_window = 0;
  uint64_t rss_after2 = 0;
  uint64_t mem_after2 = 0;
  uint64_t in_window2 = 0;
  double load_s = 0;
  {
    caf_config cfg{s, false};
    caf::actor_system sys{cfg};
    auto ecfg = engine_cfg(s, dir.str(), storage::durability::none);
    ecfg.write_buffer_bytes = s.rss_write_buffer_bytes;
    if (inside) {
      ecfg.shard.window.window_ms = 3 * hour_ms;
      ecfg.shard.window.max_in_memory =
        std::max<size_t>(1'000'000, 2 * s.rss_tasks);
    } else {
      ecfg.shard.window.window_ms = minute_ms;
      ecfg.shard.window.max_in_memory = 1'000'000;
    }
    bench_engine engine(sys, ecfg);
    caf::scoped_actor self{sys};
    auto base = bench::wall_ms();
    int64_t lo = inside ? base + 10 * minute_ms : base + 2 * hour_ms;
    int64_t span = inside ? hour_ms : 10 * day_ms;
    auto due = [lo, span](uint64_t i, int64_t) {
      return lo + static_cast<int64_t>(splitmix(i) % span);
    };
    // Warm-up of the same kind, so that lazily allocated structures
    // (threads, arenas, caches) count in the baseline.
    uint64_t warm = 10'000;
    load_tasks(
      sys, engine.handle(), "rss", warm, s.producers, 1000, 8,
      [due](uint64_t i, int64_t now) { return due(i + (1ULL << 40), now); });
    std::this_thread::sleep_for(milliseconds{500});
    rss_before = bench::rss_kib();
    mem_before = stats_or_die(self, engine.handle()).memtable_bytes();
    load_s = load_tasks(sys, engine.handle(), "rss", s.rss_tasks, s.producers,
                        1000, 8, due);
    // Idle for 1 s, then while the stores' memtables still shrink (flushes
    // of full write buffers under way), at most 10 s in all.
    auto settle = [&] {
      std::this_thread::sleep_for(milliseconds{1000});
      auto stats = stats_or_die(self, engine.handle());
      for (int i = 0; i < 36; ++i) {
        std::this_thread::sleep_for(milliseconds{250});
        auto next = stats_or_die(self, engine.handle());
        bool shrank = next.memtable_bytes() < stats.memtable_bytes();
        stats = std::move(next);
        if (!shrank)
          break;
      }
      return stats;
    };
    auto after_stats = settle();
    in_window = after_stats.in_window();
    mem_after = after_stats.memtable_bytes();
    rss_after = bench::rss_kib();
    malloc_trim(0);
    rss_trimmed = bench::rss_kib();
    load_tasks(
      sys, engine.handle(), "rss", s.rss_tasks, s.producers, 1000, 8,
      [due](uint64_t i, int64_t now) { return due(i + (1ULL << 41), now); });
    after_stats = settle();
    in_window2 = after_stats.in_window();
    mem_after2 = after_stats.memtable_bytes();
    malloc_trim(0);
    rss_after2 = bench::rss_kib();
    engine.stop();
  }
  std::cout << "rss_start_kib=" << rss_start << " rss_before_kib=" << rss_before
            << " rss_after_kib=" << rss_after
            << " rss_trimmed_kib=" << rss_trimmed
            << " memtable_before_kib=" << mem_before / 1024
            << " memtable_after_kib=" << mem_after / 1024
            << " in_window=" << in_window << " load_s=" << load_s
            << " rss_after2_kib=" << rss_after2
            << " memtable_after2_kib=" << mem_after2 / 1024
            << " in_window2=" << in_window2 << std::endl;
  return 0;
}

// -- open loop ----------------------------------------------------------------

struct flood_result {
  int64_t bound = 0;
  int64_t door = 0;
  int64_t peak_backlog = 0;
  uint64_t door_closings = 0;
  uint64_t door_stalls = 0;
  uint64_t sent = 0;
  uint64_t accepted = 0;
  uint64_t overloaded = 0;
  uint64_t failed = 0;
  uint64_t delivered = 0;
  /// From the first send until the last answer.
  double answered_s = 0;
  double rss_before_mib = 0;
  double rss_peak_mib = 0;
  double rss_after_mib = 0;
  uint64_t peak_pending = 0;
  /// From the last answer until every accepted task was delivered; -1: not
  /// within drain_wait_ms.
  double drain_s = -1;
  double drain_cpu_s = 0;
  double cpu_s = 0;
};

double rss_mib() {
  return static_cast<double>(bench::rss_kib()) / 1024;
}

/// The child side of an open-loop row: connects, floods, prints.
int run_flood_child(const settings& s) {
  caf_config cfg{s, true};
  caf::actor_system sys{cfg};
  auto engine = net::connect_engine(sys, "127.0.0.1", s.port);
  if (!engine)
    die("cannot connect: " + net::describe(engine.error()));
  auto plan = std::make_shared<bench::flood_plan>();
  plan->rate_per_s = s.flood_rate;
  plan->span_ms = static_cast<int64_t>(1000 * s.flood_s);
  plan->batch = s.flood_batch;
  plan->due_after_ms = s.lead_ms;
  auto progress = std::make_shared<bench::flood_progress>();
  auto start = clock_type::now();
  auto producer =
    sys.spawn(bench::flood_producer, *engine,
              std::shared_ptr<const bench::flood_plan>(plan), progress);
  auto all_answered = [&] {
    return progress->sending_done.load() &&
           progress->answered.load() == progress->sent.load();
  };
  // Held back by the node's front door, the answers come at the rate the
  // node commits, long after the flood's span.
  if (!bench::wait_until(all_answered,
                         milliseconds{plan->span_ms + 10 * drain_wait_ms},
                         milliseconds{5}))
    die("the open-loop producer's requests were not all answered");
  std::cout << "answered_s=" << bench::seconds_between(start, clock_type::now())
            << " sent=" << progress->sent << " accepted=" << progress->accepted
            << " overloaded=" << progress->overloaded
            << " failed=" << progress->failed << std::endl;
  caf::anon_send_exit(producer, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*engine, caf::exit_reason::user_shutdown);
  return 0;
}

/// The arguments of an open-loop child.
std::string flood_child_args(const settings& s, uint16_t port) {
  std::ostringstream out;
  out << " --child flood --port " << port << " --flood-rate " << s.flood_rate
      << " --flood-s " << s.flood_s << " --flood-batch " << s.flood_batch
      << " --lead-ms " << s.lead_ms << " --caf-threads " << s.caf_threads;
  return out.str();
}

/// One open-loop row: the engine (sync) with max_pending_per_shard `bound`
/// (-1: its default) and a front door of `door` requests (0: none),
/// published on 127.0.0.1 and flooded per --flood-* by a child process,
/// consumers acking in this one.
flood_result flood_case(const settings& s, int64_t bound, int64_t door,
                        const std::filesystem::path& root) {
  bench::scratch_dir dir(root / "flood");
  flood_result out;
  auto ecfg = engine_cfg(s, dir.str(), storage::durability::sync);
  if (bound >= 0)
    ecfg.max_pending_per_shard = static_cast<size_t>(bound);
  out.bound = static_cast<int64_t>(ecfg.max_pending_per_shard);
  out.door = door;
  caf_config cfg{s, true};
  caf::actor_system sys{cfg};
  net::publish_options opts;
  if (door > 0)
    opts.door = std::make_shared<net::front_door>(static_cast<uint64_t>(door));
  bench_engine engine(sys, ecfg, opts.door);
  auto front = opts.door;
  auto port =
    net::publish_engine(sys, engine.handle(), "127.0.0.1", 0, std::move(opts));
  if (!port)
    die("publish failed: " + net::describe(port.error()));
  caf::scoped_actor self{sys};
  auto tally = std::make_shared<bench::consumer_tally>();
  auto consumers =
    spawn_consumers(sys, self, engine.handle(), "flood", s.consumers,
                    s.max_in_flight, s.max_batch, tally);
  out.rss_before_mib = rss_mib();
  auto cpu_before = cpu_s();
  std::map<std::string, std::string> fields;
  std::atomic<bool> child_done{false};
  std::thread child{[&] {
    fields = run_child("'" + self_exe() + "'" + flood_child_args(s, *port));
    child_done = true;
  }};
  auto child_exited = [&] {
    out.rss_peak_mib = std::max(out.rss_peak_mib, rss_mib());
    return child_done.load();
  };
  bench::wait_until(child_exited, milliseconds{1'000'000}, milliseconds{20});
  child.join();
  auto answered_at = clock_type::now();
  auto cpu_answered = cpu_s();
  std::cout << "  draining: the producer has its last answer" << std::endl;
  out.answered_s = std::stod(field(fields, "answered_s"));
  out.sent = std::stoull(field(fields, "sent"));
  out.accepted = std::stoull(field(fields, "accepted"));
  out.overloaded = std::stoull(field(fields, "overloaded"));
  out.failed = std::stoull(field(fields, "failed"));
  auto delivered_all = [&] {
    out.rss_peak_mib = std::max(out.rss_peak_mib, rss_mib());
    return tally->delivered.load() >= out.accepted;
  };
  if (bench::wait_until(delivered_all, milliseconds{drain_wait_ms},
                        milliseconds{5}))
    out.drain_s = bench::seconds_between(answered_at, clock_type::now());
  std::cout << "  drained" << std::endl;
  out.drain_cpu_s = cpu_s() - cpu_answered;
  out.cpu_s = cpu_s() - cpu_before;
  out.rss_after_mib = rss_mib();
  auto st = stats_or_die(self, engine.handle());
  out.peak_pending = st.peak_pending_per_shard();
  out.peak_backlog = front ? front->peak_backlog() : -1;
  out.door_closings = front ? front->closings() : 0;
  out.door_stalls = front ? front->stalls() : 0;
  out.delivered = tally->delivered;
  for (auto& c : consumers)
    self->send_exit(c, caf::exit_reason::user_shutdown);
  static_cast<void>(sys.middleman().unpublish(engine.handle(), *port));
  engine.stop();
  return out;
}

std::string flood_section(const settings& s,
                          const std::filesystem::path& root) {
  auto bounds = s.flood_bounds;
  if (bounds.empty())
    bounds.push_back(-1);
  auto doors = s.flood_doors;
  if (doors.empty())
    doors.push_back(static_cast<int64_t>(net::front_door::default_max_backlog));
  std::vector<flood_result> rows;
  for (auto door : doors)
    for (auto bound : bounds) {
      std::cout << "open loop: " << rate_str(s.flood_rate) << " tasks/s for "
                << fixed(s.flood_s, 1) << " s in batches of " << s.flood_batch
                << ", max_pending_per_shard "
                << (bound < 0 ? std::string{"default"} : std::to_string(bound))
                << ", front door " << door << std::endl;
      rows.push_back(flood_case(s, bound, door, root));
      auto& r = rows.back();
      std::cout << "  sent " << r.sent << ", accepted " << r.accepted
                << ", overloaded " << r.overloaded << ", failed " << r.failed
                << "; answered after " << fixed(r.answered_s, 1) << " s; RSS "
                << fixed(r.rss_before_mib, 0) << " -> peak "
                << fixed(r.rss_peak_mib, 0) << " -> "
                << fixed(r.rss_after_mib, 0) << " MiB; peak pending per shard "
                << r.peak_pending << "; peak front door backlog "
                << r.peak_backlog << " (closed " << r.door_closings
                << " times, " << r.door_stalls << " stalls); delivered "
                << r.delivered << ", drained "
                << (r.drain_s >= 0 ? fixed(r.drain_s, 1) : "> 60")
                << " s after the last answer (CPU " << fixed(r.drain_cpu_s, 1)
                << " s)" << std::endl;
    }
  std::ostringstream md;
  md << "\n### Open loop: a producer that never waits\n\n"
     << "One producer in another process sends schedule batches of "
     << s.flood_batch << " tasks over 127.0.0.1 at " << rate_str(s.flood_rate)
     << " tasks/s for " << fixed(s.flood_s, 1)
     << " s without waiting for any answer (sync, tasks due " << s.lead_ms
     << " ms after they are sent, " << s.consumers
     << " consumers acking). Per second of the flood (from the first send "
     << "until the last answer): tasks accepted and refused with "
     << "`overloaded`. RSS of the node's process before, at its highest and "
     << "after the drain; peak: the most tasks one shard had unanswered (the "
     << "engine's stats); front door: the bound on requests read from "
     << "clients and not yet taken by the engine (0: none), and the most "
     << "that waited; drain: from the last answer until every accepted "
     << "task was delivered; CPU: the node's.\n\n"
     << "| max_pending_per_shard | front door | sent | accepted/s | "
        "overloaded/s | RSS before / peak / after MiB | peak pending per "
        "shard | peak front door backlog | drain s | drain CPU s | CPU µs "
        "per accepted task |\n"
     << "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rows) {
    auto per_s = [&](uint64_t n) {
      return rate_str(static_cast<double>(n) / std::max(r.answered_s, 1e-9));
    };
    md << "| " << (r.bound == 0 ? std::string{"none"} : std::to_string(r.bound))
       << " | " << (r.door == 0 ? std::string{"none"} : std::to_string(r.door))
       << " | " << r.sent << " | " << per_s(r.accepted) << " | "
       << per_s(r.overloaded) << " | " << fixed(r.rss_before_mib, 0) << " / "
       << fixed(r.rss_peak_mib, 0) << " / " << fixed(r.rss_after_mib, 0)
       << " | " << r.peak_pending << " | "
       << (r.peak_backlog >= 0 ? std::to_string(r.peak_backlog) : "-") << " | "
       << (r.drain_s >= 0 ? fixed(r.drain_s, 1) : "> 60") << " | "
       << fixed(r.drain_cpu_s, 1) << " | "
       << fixed(1e6 * r.cpu_s /
                  static_cast<double>(std::max<uint64_t>(1, r.accepted)),
                1)
       << " |\n";
  }
  return md.str();
}

std::string rss_section(const settings& s, const std::filesystem::path& root) {
  std::ostringstream md;
  md << "### RSS per pending task\n\n"
     << "A fresh process per row: engine (" << s.shards << " shards, "
     << "durability none, write_buffer_bytes "
     << s.rss_write_buffer_bytes / (1 << 20) << " MiB so that memtables "
     << "stay small), 10k warm-up tasks, RSS (VmRSS) before; then "
     << s.rss_tasks << " tasks scheduled, idle for 1 s and then while the "
     << "memtables still shrink (pending flushes; at most 10 s), RSS after; "
     << "per task = (after - before) / tasks. The heap is set up as dallyd "
     << "does (" << runtime::heap_description()
     << (runtime::heap_purger::available()
           ? ", freed pages purged as soon as the process goes idle"
           : "")
     << "; with the C library's "
     << "malloc runtime::limit_retained_heap sets glibc's trim threshold to "
     << "1 MiB), except in the last row, which keeps the allocator's "
     << "defaults (jemalloc: dirty pages kept 10 s, no background thread; "
     << "glibc: a trim threshold that grows up to 64 MiB). Trimmed: after "
     << "malloc_trim(0), which returns glibc's freed memory to the OS (it "
     << "does nothing for jemalloc). Memtables: the "
     << "stores' write buffers (stats memtable_bytes) before and after; "
     << "they are bounded by write_buffer_bytes, not by the task count, and "
     << "how full they are when RSS is read depends on flush timing, so a "
     << "column leaves their growth out. Then " << s.rss_tasks
     << " more tasks in the same process, settled the same way: RSS after "
     << "them minus RSS trimmed after the first ones, per added task, is "
     << "what a pending task costs once the bounded costs (write buffers, "
     << "caches, deferred index entries, the allocator's arenas) are paid: "
     << "the marginal cost, which the goal is judged by.\n\n"
     << "| where | window | in memory (stats in_window) | RSS before MiB | "
        "RSS after MiB | bytes/task | bytes/task trimmed | memtables MiB "
        "before, after | bytes/task without memtable growth | load tasks/s "
        "| in memory after the second load | RSS after it MiB | marginal "
        "bytes/task | marginal without the memtables' change |\n"
     << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|\n";
  double inside_per_task = 0;
  double inside_no_mem = 0;
  double inside_marginal = 0;
  double inside_marginal_no_mem = 0;
  std::map<std::string, std::pair<double, double>> per_where;
  // The third row repeats the first with the allocator's defaults: for
  // jemalloc through MALLOC_CONF, which overrides the compiled-in options;
  // for glibc its default trim threshold (raised with the largest block
  // freed, up to 64 MiB; free memory below
  // it stays in the process).
  struct row_spec {
    std::string where;
    std::string flags;
    std::string label;
  };
  std::vector<row_spec> specs{{"window", "", "inside the window"},
                              {"beyond", "", "beyond it"},
                              {"window", " --default-heap",
                               "inside the window, the allocator's defaults"}};
  for (auto& spec : specs) {
    auto& where = spec.where;
    std::string env;
    if (!spec.flags.empty())
      env = "MALLOC_CONF=dirty_decay_ms:10000,muzzy_decay_ms:0,"
            "background_thread:false ";
    auto fields =
      run_child(env + "'" + self_exe() + "' --child rss --rss-where " + where +
                spec.flags + child_args(s) + " --dir '" + root.string() + "'");
    auto before = std::stod(field(fields, "rss_before_kib"));
    auto after = std::stod(field(fields, "rss_after_kib"));
    auto trimmed = std::stod(field(fields, "rss_trimmed_kib"));
    auto n = static_cast<double>(s.rss_tasks);
    auto per = (after - before) * 1024 / n;
    auto per_trimmed = (trimmed - before) * 1024 / n;
    auto mem_before_kib = std::stod(field(fields, "memtable_before_kib"));
    auto mem_after_kib = std::stod(field(fields, "memtable_after_kib"));
    auto per_no_mem =
      (after - before - (mem_after_kib - mem_before_kib)) * 1024 / n;
    auto after2 = std::stod(field(fields, "rss_after2_kib"));
    auto mem_after2_kib = std::stod(field(fields, "memtable_after2_kib"));
    auto marginal = (after2 - trimmed) * 1024 / n;
    auto marginal_no_mem =
      (after2 - trimmed - (mem_after2_kib - mem_after_kib)) * 1024 / n;
    if (where == "window" && spec.flags.empty()) {
      inside_per_task = per;
      inside_no_mem = per_no_mem;
      inside_marginal = marginal;
      inside_marginal_no_mem = marginal_no_mem;
    }
    if (spec.flags.empty())
      per_where[where] = {per, per_trimmed};
    std::ostringstream row;
    row << "| " << spec.label << " | "
        << (where == "window" ? "3 h (due 10-70 min out)"
                              : "60 s (due 2 h - 10 days out)")
        << " | " << field(fields, "in_window") << " | "
        << fixed(before / 1024, 1) << " | " << fixed(after / 1024, 1) << " | "
        << fixed(per, 1) << " | " << fixed(per_trimmed, 1) << " | "
        << fixed(mem_before_kib / 1024, 1) << ", "
        << fixed(mem_after_kib / 1024, 1) << " | " << fixed(per_no_mem, 1)
        << " | " << rate_str(n / std::stod(field(fields, "load_s"))) << " | "
        << field(fields, "in_window2") << " | " << fixed(after2 / 1024, 1)
        << " | " << fixed(marginal, 1) << " | " << fixed(marginal_no_mem, 1)
        << " |\n";
    std::cout << row.str() << std::flush;
    md << row.str();
  }
  auto& in = per_where["window"];
  auto& out = per_where["beyond"];
  md << "\nInside minus beyond the window, what holding a task in memory "
        "costs on top of storing it: "
     << fixed(in.first - out.first, 1) << " bytes per task ("
     << fixed(in.second - out.second, 1) << " trimmed).\n"
     << "\n**Goal <= 64 bytes RSS per pending task in the window: "
     << (inside_marginal <= 64 ? "met" : "missed") << "** ("
     << fixed(inside_marginal, 1) << " bytes per task added to a window of "
     << s.rss_tasks << ", " << fixed(inside_marginal_no_mem, 1)
     << " without the memtables' change; over the first " << s.rss_tasks
     << " tasks " << fixed(inside_per_task, 1) << " bytes on average, "
     << fixed(inside_no_mem, 1) << " without the memtables' growth).\n";
  return md.str();
}

// -- main ---------------------------------------------------------------------

std::string machine() {
  std::ostringstream out;
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  std::ifstream mem("/proc/meminfo");
  std::string mem_total;
  while (std::getline(mem, line))
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream in(line.substr(9));
      uint64_t kib = 0;
      in >> kib;
      mem_total = fixed(static_cast<double>(kib) / (1 << 20), 1) + " GiB";
    }
  out << std::thread::hardware_concurrency() << " CPUs (" << model << "), "
      << mem_total << " RAM, load average " << loadavg() << ", heap "
      << runtime::heap_description();
  return out.str();
}

/// The scratch root, removed at exit also when a failure ends the run
/// through die() (std::exit skips the destructors of locals).
std::string scratch_root;

void remove_scratch_root() {
  if (!scratch_root.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(scratch_root, ec);
  }
}

settings parse(int argc, char** argv) {
  settings s;
  auto quick = [&s] {
    s.quick = true;
    s.runs = 2;
    s.tasks = 20'000;
    s.small_pending = 20'000;
    s.large_pending = 200'000;
    s.in_window_pending = 20'000;
    s.warmup_s = 1;
    s.measure_s = 1;
    s.rss_tasks = 100'000;
  };
  if (const char* env = std::getenv("DALLY_BENCH_QUICK");
      env != nullptr && std::strcmp(env, "0") != 0 && *env != '\0')
    quick();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--quick")
      quick();
    else if (arg == "--dir")
      s.dir = next();
    else if (arg == "--md")
      s.md_path = next();
    else if (arg == "--dump-lateness")
      s.dump_path = next();
    else if (arg == "--only") {
      s.sections.clear();
      std::istringstream in(next());
      std::string name;
      while (std::getline(in, name, ','))
        s.sections.insert(name);
    } else if (arg == "--modes") {
      s.modes.clear();
      std::istringstream in(next());
      std::string name;
      while (std::getline(in, name, ','))
        s.modes.insert(name);
    } else if (arg == "--durability") {
      s.levels.clear();
      std::istringstream in(next());
      std::string name;
      while (std::getline(in, name, ',')) {
        if (name == "sync")
          s.levels.push_back(storage::durability::sync);
        else if (name == "periodic")
          s.levels.push_back(storage::durability::periodic);
        else if (name == "none")
          s.levels.push_back(storage::durability::none);
        else
          die("unknown durability " + name);
      }
    } else if (arg == "--caf-max-throughput")
      s.caf_max_throughput = static_cast<uint32_t>(std::stoul(next()));
    else if (arg == "--task-memtable") {
      auto name = next();
      if (name != "btree" && name != "skiplist")
        die("--task-memtable must be btree or skiplist");
      s.btree_task_memtable = name == "btree";
    } else if (arg == "--caf-threads")
      s.caf_threads = static_cast<uint32_t>(std::stoul(next()));
    else if (arg == "--runs")
      s.runs = std::max(1, std::stoi(next()));
    else if (arg == "--shards")
      s.shards = static_cast<uint32_t>(std::stoul(next()));
    else if (arg == "--fire-lead-ms")
      s.fire_lead_ms = std::stoll(next());
    else if (arg == "--no-search")
      s.search = false;
    else if (arg == "--notifiers")
      s.notifiers = static_cast<uint32_t>(std::stoul(next()));
    else if (arg == "--tasks")
      s.tasks = std::stoull(next());
    else if (arg == "--producers")
      s.producers = std::max(1u, static_cast<uint32_t>(std::stoul(next())));
    else if (arg == "--batch")
      s.batch = std::max(1u, static_cast<uint32_t>(std::stoul(next())));
    else if (arg == "--outstanding")
      s.outstanding = std::max(1u, static_cast<uint32_t>(std::stoul(next())));
    else if (arg == "--consumers")
      s.consumers = std::max(1u, static_cast<uint32_t>(std::stoul(next())));
    else if (arg == "--max-in-flight")
      s.max_in_flight = static_cast<uint32_t>(std::stoul(next()));
    else if (arg == "--max-batch")
      s.max_batch = static_cast<uint32_t>(std::stoul(next()));
    else if (arg == "--small-pending")
      s.small_pending = std::stoull(next());
    else if (arg == "--large-pending")
      s.large_pending = std::stoull(next());
    else if (arg == "--in-window-pending")
      s.in_window_pending = std::stoull(next());
    else if (arg == "--warmup-s")
      s.warmup_s = std::stod(next());
    else if (arg == "--measure-s")
      s.measure_s = std::stod(next());
    else if (arg == "--load-factor")
      s.load_factor = std::stod(next());
    else if (arg == "--overload-factor")
      s.overload_factor = std::stod(next());
    else if (arg == "--overload-rate")
      s.overload_rate = std::stod(next());
    else if (arg == "--overload-s") {
      std::istringstream list{next()};
      for (std::string x; std::getline(list, x, ',');)
        s.overload_spans_s.push_back(std::stod(x));
    } else if (arg == "--stream-rate")
      s.stream_rate = std::stod(next());
    else if (arg == "--lead-ms")
      s.lead_ms = std::stoll(next());
    else if (arg == "--flood-rate")
      s.flood_rate = std::stod(next());
    else if (arg == "--flood-s")
      s.flood_s = std::stod(next());
    else if (arg == "--flood-batch")
      s.flood_batch = std::max(1u, static_cast<uint32_t>(std::stoul(next())));
    else if (arg == "--max-pending-per-shard") {
      std::istringstream list{next()};
      for (std::string x; std::getline(list, x, ',');)
        s.flood_bounds.push_back(std::stoll(x));
    } else if (arg == "--front-door") {
      std::istringstream list{next()};
      for (std::string x; std::getline(list, x, ',');)
        s.flood_doors.push_back(std::stoll(x));
    } else if (arg == "--rss-tasks")
      s.rss_tasks = std::max<uint64_t>(1, std::stoull(next()));
    else if (arg == "--write-buffer")
      s.write_buffer_bytes = std::stoull(next());
    else if (arg == "--rss-write-buffer")
      s.rss_write_buffer_bytes = std::stoull(next());
    else if (arg == "--child")
      s.child = next();
    else if (arg == "--port")
      s.port = static_cast<uint16_t>(std::stoul(next()));
    else if (arg == "--rss-where")
      s.rss_where = next();
    else if (arg == "--default-heap")
      s.default_heap = true;
    else
      die("unknown argument " + arg +
          " (see the comment atop engine_bench.cpp)");
  }
  return s;
}

} // namespace

int main(int argc, char** argv) {
  auto s = parse(argc, argv);
  // The engine's processes keep memory as dallyd does, unless asked not to.
  std::optional<dally::runtime::heap_purger> purger;
  if (!s.default_heap) {
    dally::runtime::limit_retained_heap();
    if (dally::runtime::heap_purger::available())
      purger.emplace(dally::runtime::heap_purger::options{});
  }
  if (s.child == "remote")
    return run_remote_child(s);
  if (s.child == "rss")
    return run_rss_child(s);
  if (s.child == "flood")
    return run_flood_child(s);
  if (!s.child.empty())
    die("unknown --child " + s.child);
  std::string root_path = s.dir;
  if (root_path.empty()) {
    std::string tmpl = "/tmp/dally-engine-bench-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr)
      die("mkdtemp failed");
    root_path = tmpl;
  }
  bench::scratch_dir root(root_path);
  scratch_root = root_path;
  std::atexit(remove_scratch_root);
  std::ostringstream md;
  std::string caf_threads =
    std::string{"CAF's scheduler, "} +
    (s.caf_threads > 0 ? std::to_string(s.caf_threads) + " threads"
                       : std::string{"its default thread count"}) +
    ". Tasks' memtable: " +
    (s.btree_task_memtable ? "B-tree" : "RocksDB's skip list");
  md << "Machine: " << machine() << ". " << caf_threads << ". "
     << (s.quick ? "Quick run. " : "") << "Scratch data in " << root_path
     << ".\n\n";
  std::cout << "dally-engine-bench: " << machine() << "\n"
            << caf_threads << std::endl;
  double max_rate = 0;
  if (s.sections.count("throughput")) {
    std::cout << "throughput (" << s.tasks << " tasks per run, " << s.runs
              << " runs)" << std::endl;
    auto t = throughput_section(s, root.path());
    max_rate = t.embedded_sync;
    md << t.md << '\n';
  }
  if (s.sections.count("lateness")) {
    md << lateness_section(s, max_rate, root.path()) << '\n';
  }
  if (s.sections.count("open-loop"))
    md << flood_section(s, root.path()) << '\n';
  if (s.sections.count("rss")) {
    std::cout << "RSS per pending task (" << s.rss_tasks << " tasks)"
              << std::endl;
    md << rss_section(s, root.path()) << '\n';
  }
  md << "Load average at the end: " << loadavg() << ".\n";
  std::cout << "\n" << md.str() << std::flush;
  if (!s.md_path.empty())
    std::ofstream(s.md_path) << md.str();
  return 0;
}
