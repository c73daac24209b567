// Durable store benchmarks: schedule throughput of rocks_task_store::commit
// against a plain RocksDB put loop, window rebuild rate from the due index,
// and bytes on disk per task. Prints markdown tables (also written to --md).
//
// Usage: dally_store_bench [--quick] [--dir DIR] [--runs N] [--seconds S]
//                          [--rebuild-tasks N] [--md FILE]
// --quick (or DALLY_BENCH_QUICK=1): shorter runs and 200k rebuild tasks.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
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

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "bench/store_tools.hpp"
#include "core/quad_heap.hpp"
#include "storage/due_window.hpp"
#include "storage/record_codec.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "storage/write_batch.hpp"

namespace {

using namespace dally;
using bench::die;
using clock_type = std::chrono::steady_clock;

constexpr int64_t t0_ms = 1'700'000'000'000;
constexpr int64_t day_ms = 86'400'000;

struct settings {
  std::string dir = "store-bench-tmp";
  int runs = 5;
  double seconds = 1.0;
  size_t rebuild_tasks = 1'000'000;
  std::string md_path;
};

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
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

std::unique_ptr<storage::rocks_task_store>
open_store(const std::string& path, storage::durability level) {
  storage::store_options opts;
  opts.path = path;
  opts.durability = level;
  auto store = storage::rocks_task_store::open(opts);
  if (!store) {
    std::ostringstream msg;
    msg << "open " << path << ": " << store.err();
    die(msg.str());
  }
  return std::move(*store);
}

/// Schedules one-shot tasks through the store for `seconds`, `batch` per
/// commit, calling sync_if_due after each commit as a shard does.
double store_rate(const std::string& path, storage::durability level,
                  size_t batch, double seconds) {
  auto store = open_store(path, level);
  storage::write_batch wb;
  size_t tasks = 0;
  auto start = clock_type::now();
  while (seconds_since(start) < seconds) {
    wb.clear();
    for (size_t i = 0; i < batch; ++i) {
      auto id = store->allocate_id();
      wb.put(
        bench::bench_record(id, t0_ms + static_cast<int64_t>(id % day_ms)));
    }
    if (auto err = store->commit(wb))
      die("commit failed");
    if (auto err = store->sync_if_due(wall_ms()))
      die("sync_if_due failed");
    tasks += batch;
  }
  return static_cast<double>(tasks) / seconds_since(start);
}

/// The same load as raw RocksDB puts: one key of 8 bytes and one value of
/// the store's record size per task, `batch` per WriteBatch, the same
/// WriteOptions.sync and, for periodic, a WAL sync every sync_period_ms.
double plain_rate(const std::string& path, storage::durability level,
                  size_t batch, double seconds, size_t value_bytes) {
  storage::store_options defaults;
  rocksdb::Options opts;
  opts.create_if_missing = true;
  opts.write_buffer_size = defaults.write_buffer_bytes;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(defaults.block_cache_bytes);
  opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw = nullptr;
  if (auto st = rocksdb::DB::Open(opts, path, &raw); !st.ok())
    die("plain open: " + st.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions wo;
  wo.sync = level == storage::durability::sync;
  std::mt19937_64 rng(1);
  std::string value(value_bytes, '\0');
  for (auto& c : value)
    c = static_cast<char>(rng());
  uint64_t id = 0;
  size_t tasks = 0;
  auto last_sync_ms = wall_ms();
  rocksdb::WriteBatch wb;
  auto start = clock_type::now();
  while (seconds_since(start) < seconds) {
    wb.Clear();
    for (size_t i = 0; i < batch; ++i, ++id) {
      char key[8];
      for (int b = 0; b < 8; ++b)
        key[b] = static_cast<char>(id >> (56 - 8 * b));
      wb.Put(rocksdb::Slice(key, 8), value);
    }
    if (auto st = db->Write(wo, &wb); !st.ok())
      die("plain write: " + st.ToString());
    if (level == storage::durability::periodic) {
      auto now = wall_ms();
      if (now - last_sync_ms >= defaults.sync_period_ms) {
        if (auto st = db->SyncWAL(); !st.ok())
          die("plain sync: " + st.ToString());
        last_sync_ms = now;
      }
    }
    tasks += batch;
  }
  auto rate = static_cast<double>(tasks) / seconds_since(start);
  if (auto st = db->Close(); !st.ok())
    die("plain close: " + st.ToString());
  return rate;
}

std::string rate_str(double per_s) {
  std::ostringstream out;
  if (per_s >= 1e6)
    out << std::fixed << std::setprecision(2) << per_s / 1e6 << " M";
  else if (per_s >= 1e3)
    out << std::fixed << std::setprecision(1) << per_s / 1e3 << " k";
  else
    out << std::fixed << std::setprecision(0) << per_s << ' ';
  return out.str();
}

std::string throughput_table(const settings& cfg, size_t value_bytes) {
  std::ostringstream md;
  md << "### Durable schedule throughput\n\n"
     << "Tasks/s, median of " << cfg.runs << " runs of " << cfg.seconds
     << " s each. store: `rocks_task_store::commit` of one-shot tasks "
     << "without payload (plus `sync_if_due` after each commit). plain: "
     << "RocksDB `Write` of the same number of 8-byte keys with values of "
     << value_bytes << " bytes (the encoded record), same `sync` flag, "
     << "periodic: `SyncWAL` every 100 ms.\n\n"
     << "| durability | batch | store tasks/s | plain tasks/s | store/plain |\n"
     << "|---|---:|---:|---:|---:|\n";
  std::cout << md.str() << std::flush;
  for (auto level : {storage::durability::sync, storage::durability::periodic,
                     storage::durability::none}) {
    for (size_t batch : {size_t{1}, size_t{16}, size_t{256}}) {
      std::vector<double> store_rates;
      std::vector<double> plain_rates;
      auto run_store = [&] {
        bench::scratch_dir dir(std::filesystem::path(cfg.dir) / "store");
        store_rates.push_back(store_rate(dir.str(), level, batch, cfg.seconds));
      };
      auto run_plain = [&] {
        bench::scratch_dir dir(std::filesystem::path(cfg.dir) / "plain");
        plain_rates.push_back(
          plain_rate(dir.str(), level, batch, cfg.seconds, value_bytes));
      };
      // Alternating the order spreads slow phases of a shared disk over both.
      for (int run = 0; run < cfg.runs; ++run) {
        if (run % 2 == 0) {
          run_store();
          run_plain();
        } else {
          run_plain();
          run_store();
        }
      }
      auto s = median(store_rates);
      auto p = median(plain_rates);
      std::ostringstream row;
      row << "| " << name_of(level) << " | " << batch << " | " << rate_str(s)
          << " | " << rate_str(p) << " | " << std::fixed << std::setprecision(2)
          << s / p << " |\n";
      std::cout << row.str() << std::flush;
      md << row.str();
    }
  }
  return md.str();
}

/// Fills a store with `n` tasks due at random times over 10 days (durability
/// none, 1000 per commit), as a shard's backlog.
void fill(const std::string& path, size_t n) {
  auto store = open_store(path, storage::durability::none);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> due(t0_ms, t0_ms + 10 * day_ms - 1);
  storage::write_batch wb;
  for (size_t done = 0; done < n;) {
    wb.clear();
    for (size_t i = 0; i < 1000 && done < n; ++i, ++done)
      wb.put(bench::bench_record(store->allocate_id(), due(rng)));
    if (auto err = store->commit(wb))
      die("fill commit failed");
  }
}

std::string rebuild_table(const settings& cfg) {
  auto n = cfg.rebuild_tasks;
  bench::scratch_dir dir(std::filesystem::path(cfg.dir) / "rebuild");
  auto start = clock_type::now();
  fill(dir.str(), n);
  auto fill_s = seconds_since(start);
  auto sst = bench::flush_and_measure(dir.str(), true);
  std::vector<double> scan_rates;
  std::vector<double> refill_rates;
  std::vector<double> heap_rates;
  size_t heap_bytes = 0;
  {
    auto store = open_store(dir.str(), storage::durability::none);
    std::vector<storage::due_key> all;
    for (int run = 0; run < cfg.runs; ++run) {
      // The whole window rebuild: scan plus heap inserts. The first run
      // follows the reopen, with RocksDB's block cache still empty.
      storage::due_window_options wopts;
      wopts.window_ms = 11 * day_ms;
      wopts.max_in_memory = n;
      storage::due_window window(*store, wopts);
      start = clock_type::now();
      if (auto err = window.refill(t0_ms))
        die("refill failed");
      refill_rates.push_back(static_cast<double>(window.size()) /
                             seconds_since(start));
      if (window.size() != n)
        die("refill loaded a different number of tasks");
      heap_bytes = window.memory_bytes();
      // The due index alone, slice by slice.
      start = clock_type::now();
      size_t seen = 0;
      storage::due_key cursor = storage::due_window::start_cursor;
      for (;;) {
        auto keys = store->scan_due(cursor, t0_ms + 11 * day_ms, 4096);
        if (!keys)
          die("scan_due failed");
        seen += keys->size();
        if (run == 0)
          all.insert(all.end(), keys->begin(), keys->end());
        if (keys->size() < 4096)
          break;
        cursor = keys->back();
      }
      if (run != 0)
        scan_rates.push_back(static_cast<double>(seen) / seconds_since(start));
      if (seen != n)
        die("scan saw a different number of tasks");
    }
    // The heap alone, fed the same keys in the same order.
    for (int run = 0; run < cfg.runs; ++run) {
      core::quad_heap heap;
      start = clock_type::now();
      for (const auto& key : all)
        heap.insert(key.id, key.index_ms);
      heap_rates.push_back(static_cast<double>(heap.size()) /
                           seconds_since(start));
    }
  }
  if (scan_rates.empty())
    scan_rates.push_back(0);
  std::ostringstream md;
  md << "### Window rebuild from the due index\n\n"
     << n << " pending tasks due over 10 days (filled in " << std::fixed
     << std::setprecision(1) << fill_s
     << " s, durability none, 1000 per commit), flushed and compacted, "
     << "store reopened; one window over all of them (slice 4096). " << cfg.runs
     << " runs; the first right after the reopen (empty block "
     << "cache), medians over all runs (scan: runs 2 and later).\n\n"
     << "| what | tasks/s |\n|---|---:|\n"
     << "| `due_window::refill`, first after reopen | "
     << rate_str(refill_rates.front()) << " |\n"
     << "| `due_window::refill` (scan + heap), median | "
     << rate_str(median(refill_rates)) << " |\n"
     << "| `scan_due` slices only, median | " << rate_str(median(scan_rates))
     << " |\n"
     << "| `quad_heap::insert` of the same keys only, median | "
     << rate_str(median(heap_rates)) << " |\n\n"
     << "Heap after the rebuild: " << heap_bytes << " bytes, "
     << std::setprecision(1)
     << static_cast<double>(heap_bytes) / static_cast<double>(n)
     << " bytes per task.\n\n";
  md << "### Bytes on disk per task (no payload)\n\n"
     << "Live SST bytes after flush and full compaction, divided by " << n
     << " tasks.\n\n| column family | bytes | bytes/task |\n|---|---:|---:|\n";
  uint64_t total = 0;
  for (const auto& [cf, bytes] : sst) {
    total += bytes;
    md << "| " << cf << " | " << bytes << " | " << std::setprecision(1)
       << static_cast<double>(bytes) / static_cast<double>(n) << " |\n";
  }
  md << "| **total** | " << total << " | " << std::setprecision(1)
     << static_cast<double>(total) / static_cast<double>(n) << " |\n";
  return md.str();
}

settings parse(int argc, char** argv) {
  settings cfg;
  auto quick = [&cfg] {
    cfg.runs = 3;
    cfg.seconds = 0.3;
    cfg.rebuild_tasks = 200'000;
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
      cfg.dir = next();
    else if (arg == "--runs")
      cfg.runs = std::max(1, std::stoi(next()));
    else if (arg == "--seconds")
      cfg.seconds = std::stod(next());
    else if (arg == "--rebuild-tasks")
      cfg.rebuild_tasks = std::stoull(next());
    else if (arg == "--md")
      cfg.md_path = next();
    else
      die("unknown argument " + arg +
          " (see the comment atop store_bench.cpp)");
  }
  return cfg;
}

} // namespace

int main(int argc, char** argv) {
  auto cfg = parse(argc, argv);
  bench::scratch_dir root(cfg.dir);
  // A record as the store writes it: stamped, with a mid-sized id.
  auto sample = bench::bench_record(123'456'789, t0_ms);
  sample.stamp = storage::stamp{1, 123'456'789};
  auto value = storage::encode(sample);
  if (!value)
    die("encode failed");
  auto value_bytes = value->size();
  std::cout << "store_bench: dir " << cfg.dir << ", " << cfg.runs
            << " runs, record " << value_bytes << " bytes\n";
  std::string md = throughput_table(cfg, value_bytes);
  std::cout << '\n' << std::flush;
  auto rebuild = rebuild_table(cfg);
  std::cout << rebuild;
  md += '\n' + rebuild;
  if (!cfg.md_path.empty())
    std::ofstream(cfg.md_path) << md;
  return 0;
}
