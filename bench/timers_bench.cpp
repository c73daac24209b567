/// Timer structure benchmarks: quad_heap against std::priority_queue with
/// lazy deletion, boost's mutable 4-ary heap and the timing wheel, at 10k,
/// 1M and 10M pending entries; scripts/bench.sh runs it.
///
/// Every benchmark times only the operations under test, reading the
/// thread's CPU clock around each batch (manual time, minus the measured
/// cost of the readings), and leaves setup and the undo that keeps the
/// pending count at N untimed. CPU time rather than wall time, because the
/// machines this runs on are shared: time spent waiting for the CPU is not
/// the structure's. Counters:
///
///   ns_per_op        timed CPU nanoseconds per operation
///   bytes_per_entry  heap bytes (glibc mallinfo2: uordblks + hblkhd)
///                    allocated while inserting the N entries, divided by N;
///                    includes the id index of every structure
///   own_bytes_per_entry  what the structure reports itself (memory_bytes()
///                    of quad_heap and timing_wheel), divided by N
///
/// Flags beyond Google Benchmark's: --table_out=FILE also writes the
/// markdown summary there. DALLY_BENCH_QUICK=1 in the environment skips
/// the 10M cases.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <malloc.h>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <time.h>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/timer_adapters.hpp"

namespace dally::bench {
namespace {

/// 2025-01-01T00:00:00Z: due times look like real UTC milliseconds.
constexpr int64_t epoch_ms = 1'735'689'600'000;

/// Pending due times spread uniformly over the next 10 minutes.
constexpr int64_t window_ms = 600'000;

/// Operations per timed batch in the insert, erase and update benchmarks,
/// and the expected entries per pop in the pop_due benchmark: N/10, at
/// most 10,000, so the clock reading is a small share of every batch and
/// the untimed undo stays small against N.
constexpr size_t batch_for(size_t n) {
  return std::clamp<size_t>(n / 10, 1, 10'000);
}

/// Share of the scheduled entries the mixed workload cancels, in percent.
constexpr size_t cancel_percent = 30;

/// Most entries the mixed workload fires per pop_due call, as a shard does.
constexpr size_t fire_limit = 1024;

constexpr uint64_t seed = 20250101;

/// A bijection on 64-bit integers (splitmix64's finalizer): distinct
/// counters give distinct, well-spread task ids.
constexpr task_id make_id(uint64_t counter) noexcept {
  uint64_t z = counter + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A due time in (now_ms, now_ms + window_ms].
int64_t draw_due(std::mt19937_64& rng, int64_t now_ms) {
  return now_ms + 1 + static_cast<int64_t>(rng() % window_ms);
}

/// Bytes the process has allocated from glibc malloc right now.
size_t heap_in_use() {
  auto info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

/// CPU time this thread has used, in ns. Unlike wall time it leaves out
/// the time the thread waits while other processes run on a busy machine.
int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// The median cost of two back-to-back clock readings (a system call,
/// about a microsecond in a VM), subtracted from every timed batch.
int64_t clock_overhead_ns() {
  static const int64_t overhead = [] {
    std::vector<int64_t> samples(1001);
    for (auto& sample : samples) {
      auto start = thread_cpu_ns();
      sample = thread_cpu_ns() - start;
    }
    auto mid = samples.begin() + static_cast<ptrdiff_t>(samples.size() / 2);
    std::nth_element(samples.begin(), mid, samples.end());
    return *mid;
  }();
  return overhead;
}

/// Runs `fn` and returns the thread CPU seconds it took.
template<class Fn>
double cpu_seconds(Fn&& fn) {
  auto overhead = clock_overhead_ns();
  auto start = thread_cpu_ns();
  fn();
  auto elapsed = thread_cpu_ns() - start - overhead;
  return static_cast<double>(std::max<int64_t>(elapsed, 0)) * 1e-9;
}

/// Moves a uniformly random subset of `count` ids to the front of `ids`
/// (a partial Fisher-Yates shuffle); the set of ids stays the same.
void pick_front(std::vector<task_id>& ids, size_t count, std::mt19937_64& rng) {
  for (size_t i = 0; i < count; ++i) {
    auto j = i + static_cast<size_t>(rng() % (ids.size() - i));
    std::swap(ids[i], ids[j]);
  }
}

// -- pre-filled structures ----------------------------------------------------

/// `filled::cycle_end` when no compaction cycle run just ended.
constexpr size_t no_cycle_end = std::numeric_limits<size_t>::max();

/// A structure holding N pending entries, shared by the insert, erase,
/// update and pop_due benchmarks of one (structure, N). Each benchmark
/// leaves it with the same N ids pending, every due time after `now_ms`.
template<class Timers>
struct filled {
  std::unique_ptr<Timers> timers;
  /// The pending ids, always the same set (order changes).
  std::vector<task_id> ids;
  /// Current time: pop_due advances it; new due times follow it.
  int64_t now_ms = epoch_ms;
  /// Counter for ids never used before (the pending ids use 0..N-1).
  uint64_t next_counter = 0;
  std::mt19937_64 rng{seed};
  double bytes_per_entry = 0;
  double own_bytes_per_entry = 0;
  /// The compaction count at which the last cycle run ended, while no
  /// other benchmark has run since (see run_batches).
  size_t cycle_end = no_cycle_end;
};

/// The one pre-filled structure alive at a time, so that the 10M cases of
/// different structures never share memory.
struct fixture_slot {
  std::string key;
  std::shared_ptr<void> value;
};

fixture_slot& current_fixture() {
  static fixture_slot slot;
  return slot;
}

void release_fixture() {
  current_fixture().value.reset();
  current_fixture().key.clear();
}

/// Returns the pre-filled structure of type Timers with n entries, building
/// it (and measuring its memory) on first use.
template<class Timers>
filled<Timers>& fixture(size_t n) {
  auto& slot = current_fixture();
  auto key = std::string{Timers::name} + "/" + std::to_string(n);
  if (slot.key != key) {
    release_fixture();
    auto f = std::make_shared<filled<Timers>>();
    f->ids.reserve(n);
    for (uint64_t i = 0; i < n; ++i)
      f->ids.push_back(make_id(i));
    f->next_counter = n;
    auto before = heap_in_use();
    f->timers = std::make_unique<Timers>(epoch_ms);
    for (auto id : f->ids)
      f->timers->insert(id, draw_due(f->rng, f->now_ms));
    auto after = heap_in_use();
    f->bytes_per_entry = static_cast<double>(after - before) / n;
    if constexpr (requires { f->timers->memory_bytes(); })
      f->own_bytes_per_entry =
        static_cast<double>(f->timers->memory_bytes()) / n;
    slot.value = f;
    slot.key = std::move(key);
  }
  return *static_cast<filled<Timers>*>(slot.value.get());
}

/// What one batch of an operation benchmark did.
struct batch_result {
  double seconds = 0;
  size_t ops = 0;
};

/// Runs an operation benchmark: `batch` performs one batch (untimed setup,
/// timed operations, untimed undo) and returns the timed part. Sets the
/// counters every operation benchmark reports.
///
/// With `by_cycles`, for a structure that compacts its garbage (the
/// lazy-deletion queue), it measures whole compaction cycles instead of a
/// minimum time: each iteration first runs batches untimed until a
/// compaction happens (skipped when the previous cycle run just ended with
/// one and nothing ran since), then times batches until `cycles` more
/// compactions have happened (about 1M operations, at least one cycle). The
/// O(N) compactions then count in exactly the proportion a long run has them.
template<bool by_cycles, class Timers, class Batch>
void run_batches(benchmark::State& state, filled<Timers>& f, size_t n,
                 Batch&& batch) {
  double timed = 0;
  size_t ops = 0;
  bool ok = true;
  for (auto _ : state) {
    batch_result sum;
    if constexpr (by_cycles) {
      auto cycles = std::max<size_t>(1, 1'000'000 / n);
      if (f.cycle_end != f.timers->compactions()) {
        auto first = f.timers->compactions();
        while (f.timers->compactions() == first)
          batch(ok);
      }
      auto from = f.timers->compactions();
      while (f.timers->compactions() < from + cycles) {
        auto r = batch(ok);
        sum.seconds += r.seconds;
        sum.ops += r.ops;
      }
      f.cycle_end = f.timers->compactions();
    } else {
      f.cycle_end = no_cycle_end;
      sum = batch(ok);
    }
    state.SetIterationTime(sum.seconds);
    timed += sum.seconds;
    ops += sum.ops;
  }
  if (!ok || f.timers->size() != n || ops == 0) {
    state.SkipWithError("wrong result or pending count");
    return;
  }
  state.counters["ns_per_op"] = timed * 1e9 / static_cast<double>(ops);
  state.counters["bytes_per_entry"] = f.bytes_per_entry;
  if (f.own_bytes_per_entry > 0)
    state.counters["own_bytes_per_entry"] = f.own_bytes_per_entry;
  state.SetItemsProcessed(static_cast<int64_t>(ops));
}

// -- operation benchmarks -----------------------------------------------------

/// Inserts a batch of fresh ids; untimed, erases them again.
template<class Timers>
void bm_insert(benchmark::State& state, size_t n) {
  auto& f = fixture<Timers>(n);
  auto batch = batch_for(n);
  std::vector<task_id> ids(batch);
  std::vector<int64_t> dues(batch);
  run_batches<false>(state, f, n, [&](bool& ok) {
    for (size_t i = 0; i < batch; ++i) {
      ids[i] = make_id(f.next_counter++);
      dues[i] = draw_due(f.rng, f.now_ms);
    }
    auto seconds = cpu_seconds([&] {
      for (size_t i = 0; i < batch; ++i)
        ok &= f.timers->insert(ids[i], dues[i]);
    });
    for (auto id : ids)
      f.timers->erase(id);
    return batch_result{seconds, batch};
  });
}

/// Erases a batch of random pending ids; untimed, inserts them again with
/// fresh due times.
template<class Timers>
void bm_erase(benchmark::State& state, size_t n) {
  auto& f = fixture<Timers>(n);
  auto batch = batch_for(n);
  std::vector<int64_t> dues(batch);
  run_batches<Timers::compacts_garbage>(state, f, n, [&](bool& ok) {
    pick_front(f.ids, batch, f.rng);
    for (auto& due : dues)
      due = draw_due(f.rng, f.now_ms);
    auto seconds = cpu_seconds([&] {
      for (size_t i = 0; i < batch; ++i)
        ok &= f.timers->erase(f.ids[i]);
    });
    for (size_t i = 0; i < batch; ++i)
      f.timers->insert(f.ids[i], dues[i]);
    return batch_result{seconds, batch};
  });
}

/// Moves a batch of random pending ids to fresh random due times.
template<class Timers>
void bm_update(benchmark::State& state, size_t n) {
  auto& f = fixture<Timers>(n);
  auto batch = batch_for(n);
  std::vector<int64_t> dues(batch);
  run_batches<Timers::compacts_garbage>(state, f, n, [&](bool& ok) {
    pick_front(f.ids, batch, f.rng);
    for (auto& due : dues)
      due = draw_due(f.rng, f.now_ms);
    auto seconds = cpu_seconds([&] {
      for (size_t i = 0; i < batch; ++i)
        ok &= f.timers->update(f.ids[i], dues[i]);
    });
    return batch_result{seconds, batch};
  });
}

/// Advances now by the time in which a batch of entries comes due on
/// average and pops everything due (one call, no limit); untimed, inserts
/// the popped ids again, due within the next window, so that N stays
/// steady. ns_per_op is per popped entry. Popping leaves no garbage, so
/// this one runs for a minimum time for every structure.
template<class Timers>
void bm_pop_due(benchmark::State& state, size_t n) {
  auto& f = fixture<Timers>(n);
  auto batch = batch_for(n);
  auto step = std::max<int64_t>(1, static_cast<int64_t>(batch) * window_ms /
                                     static_cast<int64_t>(n));
  std::vector<timer_entry> out;
  out.reserve(4 * batch);
  auto pop_batch = [&](bool& ok) {
    out.clear();
    f.now_ms += step;
    size_t popped = 0;
    auto seconds = cpu_seconds([&] {
      popped =
        f.timers->pop_due(f.now_ms, std::numeric_limits<size_t>::max(), out);
    });
    ok &= popped == out.size();
    for (size_t i = 0; i < out.size(); ++i) {
      ok &= out[i].due_ms <= f.now_ms;
      ok &= i == 0 || out[i - 1].due_ms <= out[i].due_ms;
      f.timers->insert(out[i].id, draw_due(f.rng, f.now_ms));
    }
    return batch_result{seconds, popped};
  };
  run_batches<false>(state, f, n, pop_batch);
}

/// The inputs of the mixed workload: the same for every structure.
struct mixed_inputs {
  std::vector<task_id> ids;
  std::vector<int64_t> dues;
  std::vector<task_id> cancels;

  explicit mixed_inputs(size_t n) : ids(n), dues(n) {
    std::mt19937_64 rng{seed};
    for (size_t i = 0; i < n; ++i) {
      ids[i] = make_id(i);
      dues[i] = draw_due(rng, epoch_ms);
    }
    auto count = n * cancel_percent / 100;
    cancels = ids;
    pick_front(cancels, count, rng);
    cancels.resize(count);
  }

  /// Operations one run performs: schedules, cancels and fired entries.
  size_t ops() const { return 2 * ids.size(); }
};

/// One run of the mixed workload: schedules every input into an empty
/// structure, cancels the chosen 30% by id, then fires the rest in due
/// order: wake up at next_due() and pop what is due, at most fire_limit
/// per call. Returns the seconds from the construction of the empty
/// structure to the last pop (destruction excluded); clears `ok` when the
/// fired entries are not exactly the uncancelled ones in due order.
template<class Timers>
double run_mixed(const mixed_inputs& in, std::vector<timer_entry>& fired,
                 bool& ok) {
  fired.clear();
  std::unique_ptr<Timers> timers;
  auto seconds = cpu_seconds([&] {
    timers = std::make_unique<Timers>(epoch_ms);
    for (size_t i = 0; i < in.ids.size(); ++i)
      timers->insert(in.ids[i], in.dues[i]);
    for (auto id : in.cancels)
      timers->erase(id);
    while (auto due = timers->next_due())
      timers->pop_due(*due, fire_limit, fired);
  });
  timers.reset();
  ok &= fired.size() == in.ids.size() - in.cancels.size();
  ok &= std::is_sorted(fired.begin(), fired.end(),
                       [](const timer_entry& x, const timer_entry& y) {
                         return x.due_ms < y.due_ms;
                       });
  return seconds;
}

/// The mixed workload (see run_mixed); ns_per_op is per schedule, cancel
/// or fired entry.
template<class Timers>
void bm_mixed(benchmark::State& state, size_t n) {
  release_fixture();
  mixed_inputs in{n};
  std::vector<timer_entry> fired;
  fired.reserve(n);
  double timed = 0;
  size_t ops = 0;
  bool ok = true;
  for (auto _ : state) {
    auto seconds = run_mixed<Timers>(in, fired, ok);
    state.SetIterationTime(seconds);
    timed += seconds;
    ops += in.ops();
  }
  if (!ok) {
    state.SkipWithError("wrong fired count or order");
    return;
  }
  state.counters["ns_per_op"] = timed * 1e9 / static_cast<double>(ops);
  state.SetItemsProcessed(static_cast<int64_t>(ops));
}

/// The goal's comparison measured in pairs: each iteration runs the mixed
/// workload on quad_heap and on boost's heap back to back (alternating
/// which goes first), so both see the same background load. The counter
/// boost_over_quad is the median of the per-pair time ratios.
void bm_mixed_pair(benchmark::State& state, size_t n) {
  release_fixture();
  mixed_inputs in{n};
  std::vector<timer_entry> fired;
  fired.reserve(n);
  std::vector<double> ratios;
  bool ok = true;
  for (auto _ : state) {
    double quad = 0;
    double boost = 0;
    if (ratios.size() % 2 == 0) {
      quad = run_mixed<quad_heap_adapter>(in, fired, ok);
      boost = run_mixed<boost_d_ary_adapter>(in, fired, ok);
    } else {
      boost = run_mixed<boost_d_ary_adapter>(in, fired, ok);
      quad = run_mixed<quad_heap_adapter>(in, fired, ok);
    }
    state.SetIterationTime(quad + boost);
    ratios.push_back(boost / quad);
  }
  if (!ok || ratios.empty()) {
    state.SkipWithError("wrong fired count or order");
    return;
  }
  std::sort(ratios.begin(), ratios.end());
  auto mid = ratios.size() / 2;
  state.counters["boost_over_quad"] =
    ratios.size() % 2 == 1 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
}

// -- registration -------------------------------------------------------------

/// The paired mixed-workload comparison runs at this N only.
constexpr size_t pair_n = 1'000'000;
constexpr const char* pair_name =
  "mixed_pair/quad_heap_vs_boost_d_ary_heap/1000000";

const std::vector<std::string_view> operations = {"insert", "erase", "update",
                                                  "pop_due", "mixed"};

const std::vector<std::string_view> structures = {
  quad_heap_adapter::name, timing_wheel_adapter::name,
  lazy_priority_queue_adapter::name, boost_d_ary_adapter::name};

/// Registered benchmark name -> (operation, structure, N), for the summary.
struct case_key {
  std::string_view operation;
  std::string_view structure;
  size_t n;
};

std::map<std::string, case_key>& cases() {
  static std::map<std::string, case_key> result;
  return result;
}

/// Registers the five benchmarks of one structure at one N. A structure
/// that compacts its garbage runs erase and update, the operations that
/// make garbage, as one iteration of whole compaction cycles per repetition
/// (see run_batches). Its insert benchmark leaves garbage too, by the
/// untimed erase that undoes each batch, but compacts only there.
template<class Timers>
void register_structure(size_t n) {
  using fn = void (*)(benchmark::State&, size_t);
  const std::pair<std::string_view, fn> table[] = {
    {"insert", &bm_insert<Timers>}, {"erase", &bm_erase<Timers>},
    {"update", &bm_update<Timers>}, {"pop_due", &bm_pop_due<Timers>},
    {"mixed", &bm_mixed<Timers>},
  };
  for (auto [operation, bm] : table) {
    auto name = std::string{operation} + "/" + std::string{Timers::name} + "/" +
                std::to_string(n);
    cases().emplace(name, case_key{operation, Timers::name, n});
    auto* b = benchmark::RegisterBenchmark(name.c_str(), bm, n);
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
    if (operation == "erase" || operation == "update") {
      if constexpr (Timers::compacts_garbage)
        b->Iterations(1);
      else
        b->MinTime(0.3);
    } else if (operation != "mixed")
      b->MinTime(0.3);
    else if (n <= 10'000)
      b->MinTime(0.5);
    else if (n <= 1'000'000)
      b->Iterations(3);
    else
      b->Iterations(1);
  }
}

// -- summary ------------------------------------------------------------------

/// Console output as usual, plus a markdown summary of the medians (or of
/// the single run without repetitions) when everything has run.
class summary_reporter : public benchmark::ConsoleReporter {
public:
  explicit summary_reporter(std::string table_out)
    : ConsoleReporter(OO_Tabular), table_out_(std::move(table_out)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      if (run.run_name.function_name == pair_name && !run.error_occurred) {
        bool median =
          run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
        if (median || (run.run_type == Run::RT_Iteration && !pair_median_)) {
          pair_ratio_ = counter(run, "boost_over_quad");
          pair_median_ = median;
        }
      }
      auto it = cases().find(run.run_name.function_name);
      if (run.error_occurred || it == cases().end())
        continue;
      bool median =
        run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (!median && run.run_type == Run::RT_Aggregate)
        continue;
      auto& slot = results_[run.run_name.function_name];
      if (median || !slot.median)
        slot = result{median, counter(run, "ns_per_op"),
                      counter(run, "bytes_per_entry"),
                      counter(run, "own_bytes_per_entry")};
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    auto text = summary();
    GetOutputStream() << '\n' << text << std::flush;
    if (!table_out_.empty())
      std::ofstream{table_out_} << text;
  }

private:
  struct result {
    bool median = false;
    double ns_per_op = 0;
    double bytes_per_entry = 0;
    double own_bytes_per_entry = 0;
  };

  static double counter(const Run& run, const std::string& name) {
    auto it = run.counters.find(name);
    return it == run.counters.end() ? 0.0 : it->second.value;
  }

  const result* find(std::string_view operation, std::string_view structure,
                     size_t n) const {
    auto it = results_.find(std::string{operation} + "/" +
                            std::string{structure} + "/" + std::to_string(n));
    return it == results_.end() ? nullptr : &it->second;
  }

  std::vector<size_t> sizes() const {
    std::vector<size_t> result;
    for (const auto& [name, key] : cases())
      if (find(key.operation, key.structure, key.n) != nullptr &&
          std::find(result.begin(), result.end(), key.n) == result.end())
        result.push_back(key.n);
    std::sort(result.begin(), result.end());
    return result;
  }

  static std::string fixed(double value, int digits) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(digits) << value;
    return out.str();
  }

  std::string summary() const {
    std::ostringstream out;
    out << "ns per operation (median):\n\n| operation | N |";
    for (auto structure : structures)
      out << ' ' << structure << " |";
    out << "\n|---|---:|";
    for (size_t i = 0; i < structures.size(); ++i)
      out << "---:|";
    out << '\n';
    for (auto operation : operations)
      for (auto n : sizes()) {
        out << "| " << operation << " | " << n << " |";
        for (auto structure : structures) {
          auto* r = find(operation, structure, n);
          out << ' ' << (r ? fixed(r->ns_per_op, 1) : "-") << " |";
        }
        out << '\n';
      }
    out << "\nbytes per pending entry (mallinfo2 delta while inserting N, "
           "index included):\n\n| N |";
    for (auto structure : structures)
      out << ' ' << structure << " |";
    const std::string_view self_reporting[] = {quad_heap_adapter::name,
                                               timing_wheel_adapter::name};
    for (auto structure : self_reporting)
      out << ' ' << structure << " memory_bytes()/N |";
    out << "\n|---:|";
    for (size_t i = 0; i < structures.size() + 2; ++i)
      out << "---:|";
    out << '\n';
    for (auto n : sizes()) {
      out << "| " << n << " |";
      for (auto structure : structures) {
        auto* r = find("insert", structure, n);
        out << ' ' << (r ? fixed(r->bytes_per_entry, 1) : "-") << " |";
      }
      for (auto structure : self_reporting) {
        auto* r = find("insert", structure, n);
        out << ' ' << (r ? fixed(r->own_bytes_per_entry, 1) : "-") << " |";
      }
      out << '\n';
    }
    out << "\nmixed workload, time relative to quad_heap (higher = quad_heap "
           "faster):\n\n| N |";
    for (auto structure : structures)
      out << ' ' << structure << " |";
    out << "\n|---:|";
    for (size_t i = 0; i < structures.size(); ++i)
      out << "---:|";
    out << '\n';
    for (auto n : sizes()) {
      auto* q = find("mixed", quad_heap_adapter::name, n);
      out << "| " << n << " |";
      for (auto structure : structures) {
        auto* r = find("mixed", structure, n);
        out << ' '
            << (q && r && q->ns_per_op > 0
                  ? fixed(r->ns_per_op / q->ns_per_op, 2)
                  : "-")
            << " |";
      }
      out << '\n';
    }
    auto* q = find("mixed", quad_heap_adapter::name, 1'000'000);
    auto* b = find("mixed", boost_d_ary_adapter::name, 1'000'000);
    if (q && b && q->ns_per_op > 0) {
      auto ratio = b->ns_per_op / q->ns_per_op;
      out << "\nmixed at 1M: boost_d_ary_heap / quad_heap = " << fixed(ratio, 2)
          << " (goal >= 1.20: " << (ratio >= 1.2 ? "met" : "NOT met") << ")\n";
    }
    if (pair_ratio_ > 0)
      out << "mixed at 1M, paired runs: boost_d_ary_heap / quad_heap = "
          << fixed(pair_ratio_, 2)
          << " (goal >= 1.20: " << (pair_ratio_ >= 1.2 ? "met" : "NOT met")
          << ")\n";
    double worst = 0;
    for (auto n : sizes())
      if (auto* r = find("insert", quad_heap_adapter::name, n))
        worst = std::max(worst, r->bytes_per_entry);
    if (worst > 0)
      out << "quad_heap bytes per entry, largest over N = " << fixed(worst, 1)
          << " (goal <= 32: " << (worst <= 32 ? "met" : "NOT met") << ")\n";
    return out.str();
  }

  std::string table_out_;
  std::map<std::string, result> results_;
  double pair_ratio_ = 0;
  bool pair_median_ = false;
};

} // namespace
} // namespace dally::bench

int main(int argc, char** argv) {
  using namespace dally::bench;
  std::string table_out;
  std::vector<char*> args;
  constexpr std::string_view table_flag = "--table_out=";
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with(table_flag))
      table_out = arg.substr(table_flag.size());
    else
      args.push_back(argv[i]);
  }
  int args_count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data()))
    return 1;
  const char* quick = std::getenv("DALLY_BENCH_QUICK");
  bool is_quick = quick != nullptr && std::string_view{quick} == "1";
  std::vector<size_t> sizes = {10'000, 1'000'000};
  if (!is_quick)
    sizes.push_back(10'000'000);
  for (auto n : sizes) {
    register_structure<quad_heap_adapter>(n);
    register_structure<timing_wheel_adapter>(n);
    register_structure<lazy_priority_queue_adapter>(n);
    register_structure<boost_d_ary_adapter>(n);
    if (n == pair_n)
      benchmark::RegisterBenchmark(pair_name, &bm_mixed_pair, n)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(5);
  }
  summary_reporter reporter{table_out};
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
