#!/usr/bin/env bash
# Two dallyd builds (or settings) against each other in alternating runs of
# the peers benchmark's Dally row, on one machine in one session. A host
# whose speed drifts within minutes makes a single run of each worthless;
# pairs taken back to back, their order swapped every pair, let the drift
# cancel. Prints each pair (with the share of CPU time the host took
# during each run) and, over all pairs, the median ratio NEW/BASE of
# end-to-end throughput and of dallyd's CPU per task, and in how many pairs
# NEW was better; then the throughput ratio again with the host's steal
# taken out (one linear slope fitted over all runs).
#
# Usage: bash scripts/ab-dallyd.sh [--pairs N] BASE NEW [driver flags]
#   BASE, NEW  dallyd executables; a wrapper script that execs dallyd with
#              extra flags or environment compares settings, e.g.
#                #!/bin/sh
#                exec /path/to/dallyd --notifiers 1 "$@"
#   --pairs N  pairs to run (default 12)
#   driver flags replace the default workload, the peers benchmark's own
#              scale (--durability periodic --tasks 1000000 --max-delay-ms
#              1000; shorter runs can reach opposite verdicts);
#              --systems dally and --pending-tasks 0 are always given.
# Needs the Release build of dally-peers-bench (bash scripts/bench-peers.sh
# builds it; or cmake --build build/bench --target dally-peers-bench).
# Writes build/bench/results/ab/pairs.tsv (DALLY_BENCH_BUILD_DIR and
# DALLY_PEERS_BENCH choose another build). Exit 1 if a run fails, 2 for
# bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=12
if [ "${1:-}" = "--pairs" ]; then
  pairs=${2:?--pairs needs a count}
  shift 2
fi
if [ $# -lt 2 ]; then
  # The comment block at the top, without its '# '.
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' \
    "$0" >&2
  exit 2
fi
case "$pairs" in
  '' | *[!0-9]* | 0)
    echo "--pairs must be a positive count" >&2
    exit 2
    ;;
esac
# Absolute paths: the driver starts dallyd in its data directory.
absolute() {
  if [ ! -f "$1" ] || [ ! -x "$1" ]; then
    echo "not an executable: $1" >&2
    return 2
  fi
  echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
}
base=$(absolute "$1") || exit 2
new=$(absolute "$2") || exit 2
shift 2
workload=(--durability periodic --tasks 1000000 --max-delay-ms 1000)
if [ $# -gt 0 ]; then
  workload=("$@")
fi

build=${DALLY_BENCH_BUILD_DIR:-build/bench}
driver=${DALLY_PEERS_BENCH:-$build/bench/peers/dally-peers-bench}
if [ ! -x "$driver" ]; then
  echo "no $driver: build it with" >&2
  echo "  cmake --build $build --target dally-peers-bench" >&2
  exit 2
fi
out="$build/results/ab"
scratch="$build/tmp/ab"
mkdir -p "$out" "$scratch"
scratch=$(cd "$scratch" && pwd)
tsv="$out/pairs.tsv"
printf 'pair\tbuild\te2e_per_s\tserver_cpu_us_per_task\tp99_ms\tschedule_per_s\thost_steal_pct\n' >"$tsv"

# One run; prints "e2e_per_s cpu_us_per_task p99_ms schedule_per_s
# host_steal_pct" from the driver's runs.tsv (columns by name, so that new
# columns do not shift them; a driver without the steal column gives -1).
run_one() {
  local dallyd=$1 dir
  dir=$(mktemp -d "$scratch/run.XXXXXX")
  if ! "$driver" --systems dally --pending-tasks 0 "${workload[@]}" \
    --out "$dir" --dir "$dir/data" --dallyd "$dallyd" >"$dir/console.txt" 2>&1; then
    echo "run failed with $dallyd; its output: $dir/console.txt" >&2
    return 1
  fi
  local row
  row=$(awk -F'\t' '
    NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    col["system"] && col["tasks"] && $col["system"] == "dally" {
      printf "%s %.2f %s %s %s\n", $col["e2e_per_s"],
        $col["server_cpu_s"] * 1e6 / $col["tasks"], $col["p99_ms"],
        $col["schedule_per_s"],
        col["host_steal_pct"] ? $col["host_steal_pct"] : -1
    }' "$dir/runs.tsv" 2>/dev/null || true)
  if [ -z "$row" ]; then
    echo "no Dally row in $dir/runs.tsv (a driver of another version?)" >&2
    return 1
  fi
  echo "$row"
  rm -rf "$dir"
}

echo "| pair | first | BASE e2e tasks/s | NEW e2e tasks/s | BASE CPU µs/task | NEW CPU µs/task | BASE p99 ms | NEW p99 ms | BASE host steal % | NEW host steal % |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for ((i = 1; i <= pairs; ++i)); do
  if ((i % 2 == 1)); then
    b=$(run_one "$base")
    n=$(run_one "$new")
    first=BASE
  else
    n=$(run_one "$new")
    b=$(run_one "$base")
    first=NEW
  fi
  read -r be bc bp bs bt <<<"$b"
  read -r ne nc np ns nt <<<"$n"
  printf '%d\tbase\t%s\t%s\t%s\t%s\t%s\n%d\tnew\t%s\t%s\t%s\t%s\t%s\n' \
    "$i" "$be" "$bc" "$bp" "$bs" "$bt" "$i" "$ne" "$nc" "$np" "$ns" "$nt" >>"$tsv"
  awk -v i="$i" -v f="$first" -v be="$be" -v ne="$ne" -v bc="$bc" \
    -v nc="$nc" -v bp="$bp" -v np="$np" -v bt="$bt" -v nt="$nt" 'BEGIN {
      printf "| %d | %s | %.1f k | %.1f k | %s | %s | %s | %s | %s | %s |\n",
        i, f, be / 1000, ne / 1000, bc, nc, bp, np,
        bt < 0 ? "n/a" : sprintf("%.1f", bt), nt < 0 ? "n/a" : sprintf("%.1f", nt)
    }'
done

awk -F'\t' '
  NR == 1 { next }
  $2 == "base" { be[$1] = $3; bc[$1] = $4; bt[$1] = $7 }
  $2 == "new" { ne[$1] = $3; nc[$1] = $4; nt[$1] = $7 }
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; ++i)
      for (j = i; j > 1 && a[j - 1] > a[j]; --j) {
        t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
      }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  # Two-sided sign test: the chance of a split at least this uneven if
  # either build were as likely to win a pair.
  function sign_p(k, n,   lo, i, c, tail) {
    lo = k < n - k ? k : n - k
    c = 1
    tail = 0
    for (i = 0; i <= lo; ++i) {
      tail += c
      c = c * (n - i) / (i + 1)
    }
    tail = 2 * tail / 2 ^ n
    return tail > 1 ? 1 : tail
  }
  END {
    n = 0
    for (p in be) {
      ++n
      re[n] = ne[p] / be[p]
      rc[n] = nc[p] / bc[p]
      faster += ne[p] > be[p]
      cheaper += nc[p] < bc[p]
    }
    printf "\nOver %d pairs: NEW/BASE end to end %.3f (median ratio), NEW faster in %d (sign test p = %.3f);", n, median(re, n), faster, sign_p(faster, n)
    printf " CPU per task %.3f, NEW cheaper in %d (p = %.3f).\n", median(rc, n), cheaper, sign_p(cheaper, n)
    # Steal time on the host slows a run by more than its share (on a
    # 2-vCPU guest about 2.5% of throughput per 1% stolen) and differs between the two
    # runs of a pair. One slope for both builds (each run against the means
    # of its own build) takes it out: each rate as if nothing was stolen.
    for (p in be) {
      if (bt[p] == "" || nt[p] == "" || bt[p] < 0 || nt[p] < 0) {
        print "Steal-adjusted: not every run knows its host steal."
        exit
      }
      mbe += be[p]; mne += ne[p]; mbt += bt[p]; mnt += nt[p]
    }
    mbe /= n; mne /= n; mbt /= n; mnt /= n
    for (p in be) {
      sxy += (be[p] - mbe) * (bt[p] - mbt) + (ne[p] - mne) * (nt[p] - mnt)
      sxx += (bt[p] - mbt) ^ 2 + (nt[p] - mnt) ^ 2
    }
    if (sxx == 0 || n < 3) {
      print "Steal-adjusted: too few pairs, or the same steal in every run."
      exit
    }
    slope = sxy / sxx
    k = 0
    for (p in be) {
      ++k
      ra[k] = (ne[p] - slope * nt[p]) / (be[p] - slope * bt[p])
      sum += ra[k]
      sum2 += ra[k] ^ 2
      afaster += ra[k] > 1
    }
    mean = sum / k
    var = (sum2 - k * mean ^ 2) / (k - 1)
    sd = var > 0 ? sqrt(var) : 0
    printf "Steal-adjusted (%.0f tasks/s per 1%% of CPU time stolen): NEW/BASE end to end %.3f (median ratio), mean %.3f +- %.3f (standard error), NEW faster in %d (p = %.3f).\n", -slope, median(ra, k), mean, sd / sqrt(k), afaster, sign_p(afaster, k)
  }' "$tsv"
echo "Per run: $tsv"
