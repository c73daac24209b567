#!/usr/bin/env bash
# Dally side by side with beanstalkd and Redis in one command: checks the
# Debian packages (beanstalkd, redis-server, libhiredis-dev, gnuplot-nox
# for the plots), builds dally-peers-bench and dallyd in Release
# (build/bench), runs the benchmark and draws the plots. Every server is
# started fresh on 127.0.0.1 with its data under build/bench/tmp/peers and
# stopped at the end, also when the run fails or is interrupted.
#
# Results in build/bench/results/peers/:
#   peers.md          the markdown tables (also printed at the end)
#   peers.txt         the console output
#   throughput.png    schedule and end-to-end throughput per durability
#   lateness-sync.png, lateness-periodic.png   lateness CDFs and tails
#   rss.png           memory per pending task
#   *.dat, runs.tsv   the data behind them; plots.gp draws them
#   logs/             each server's log
#
# Usage: bash scripts/bench-peers.sh [--quick] [dally-peers-bench flags]
#   The default scale takes about 5 minutes on 2 cores (under 10);
#   --quick about a minute. Other flags go to the driver (see the comment
#   atop bench/peers/peers_bench.cpp), e.g. --systems redis,dally, or
#   --rounds 3 to judge the goals by the median of three rounds.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
if ! command -v gnuplot >/dev/null 2>&1; then
  cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gnuplot-nox"
  if [ "$(id -u)" -ne 0 ]; then
    echo "The plots need gnuplot (Debian's gnuplot-nox). Run as root:" >&2
    echo "  $cmd" >&2
    exit 1
  fi
  echo "installing: gnuplot-nox"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    gnuplot-nox
fi

build=${DALLY_BENCH_BUILD_DIR:-build/bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDALLY_BUILD_BENCH=ON
cmake --build "$build" -j2 --target dally-peers-bench dallyd

results="$build/results/peers"
scratch="$build/tmp/peers"
mkdir -p "$results" "$scratch"
scratch=$(cd "$scratch" && pwd)
rm -f "$results"/*.png "$results"/*.dat "$results"/plots.gp \
  "$results"/peers.md "$results"/runs.tsv

driver=""
tailer=""
# Processes whose working directory is under the scratch directory are
# servers of this run (the driver starts each one there).
leftovers() {
  local pid cwd
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null || true)
    case "$cwd" in
      "$scratch"|"$scratch"/*) echo "$pid" ;;
    esac
  done
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
    # The driver stops its servers on SIGTERM (and they die with it).
    kill -TERM "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
  if [ -n "$tailer" ]; then
    kill "$tailer" 2>/dev/null || true
  fi
  local left
  left=$(leftovers)
  if [ -n "$left" ]; then
    echo "error: servers left running (pids $left): killing them" >&2
    for pid in $left; do kill -KILL "$pid" 2>/dev/null || true; done
    rc=1
  fi
  rm -rf "$scratch"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# In the background so that a signal reaches the trap at once; the console
# output goes to peers.txt and is shown as it comes.
: >"$results/peers.txt"
"$build/bench/peers/dally-peers-bench" --out "$results" --dir "$scratch" \
  "$@" >"$results/peers.txt" 2>&1 &
driver=$!
tail -n +1 -f --pid="$driver" "$results/peers.txt" &
tailer=$!
rc=0
wait "$driver" || rc=$?
driver=""
wait "$tailer" 2>/dev/null || true
tailer=""

if [ -f "$results/plots.gp" ]; then
  (cd "$results" && gnuplot plots.gp)
  echo "plots: $(cd "$results" && ls *.png | tr '\n' ' ')"
fi
echo "results in $results/"
exit "$rc"
