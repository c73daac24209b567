#!/usr/bin/env bash
# The benchmarks in one command: checks the Debian packages, builds bench/
# in Release (build/bench), runs the timer benchmarks with 3 repetitions,
# then the durable store drivers, and prints markdown summaries of the
# medians. Raw output goes to build/bench/results/:
#   timers.json     Google Benchmark JSON, every repetition and aggregate
#   timers.txt      console output
#   timers.md       the markdown summary (also printed at the end)
#   store.md        durable store: schedule throughput vs plain RocksDB,
#                   window rebuild rate, bytes on disk per task
#   window_rss.md   RSS of a reopened shard with 10M tasks on disk (1M quick)
#   engine.md       the single-node engine end to end: throughput embedded
#                   and remote, firing lateness, RSS per pending task
#   engine.txt      its console output (every run, not just the medians)
#   machine.txt     CPU, memory, compiler and OS of this run
#
# Usage: bash scripts/bench.sh [--quick] [extra Google Benchmark flags]
#   --quick (or DALLY_BENCH_QUICK=1) skips the 10M cases, shortens the
#   store runs and fills 1M tasks instead of 10M for window_rss; the engine
#   benchmark runs fewer and shorter runs with smaller backlogs.
# The store and engine benchmarks write scratch data under $build/tmp
# (removed after).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--quick" ]; then
  export DALLY_BENCH_QUICK=1
  shift
fi

bash scripts/install-deps.sh
build=${DALLY_BENCH_BUILD_DIR:-build/bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDALLY_BUILD_BENCH=ON
cmake --build "$build" -j2 --target dally_timers_bench dally_store_bench \
  dally_window_rss dally-engine-bench

results="$build/results"
mkdir -p "$results"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|L2 cache|L3 cache):'
  grep MemTotal /proc/meminfo
  g++ --version | head -n 1
  echo "debian: $(cat /etc/debian_version)"
  echo "kernel: $(uname -r)"
  echo "quick: ${DALLY_BENCH_QUICK:-0}"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$results/machine.txt"

"$build/bench/dally_timers_bench" \
  --benchmark_repetitions=3 \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$results/timers.json" \
  --benchmark_out_format=json \
  --table_out="$results/timers.md" \
  "$@" | tee "$results/timers.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$results/machine.txt"

echo
"$build/bench/dally_store_bench" --dir "$build/tmp/store" \
  --md "$results/store.md"
echo
rss_tasks=10000000
if [ "${DALLY_BENCH_QUICK:-0}" != "0" ]; then
  rss_tasks=1000000
fi
"$build/bench/dally_window_rss" --tasks "$rss_tasks" --dir "$build/tmp/rss" \
  --md "$results/window_rss.md"
echo
echo "engine load before: $(cut -d' ' -f1-3 /proc/loadavg)" \
  >>"$results/machine.txt"
"$build/bench/dally-engine-bench" --dir "$build/tmp/engine" \
  --md "$results/engine.md" | tee "$results/engine.txt"
echo "engine load after: $(cut -d' ' -f1-3 /proc/loadavg)" \
  >>"$results/machine.txt"
rm -rf "$build/tmp"

echo
echo "results in $results/"
