#!/usr/bin/env bash
# CTest ab_dallyd: scripts/ab-dallyd.sh at a tiny scale.
#  1. One pair of the same dallyd: both rows run and the summary counts
#     the pair.
#  2. A NEW that cannot start: the script exits 1 and names the failure.
#  3. A driver that reports no Dally row: exit 1, said so.
#  4. A driver whose rate falls linearly with the host's steal: the
#     steal-adjusted ratio of identical builds is exactly 1.
#  5. Bad usage exits 2.
# Usage: ab_test.sh SOURCE_DIR DRIVER DALLYD WORK_DIR
set -u
src=$1
driver=$2
dallyd=$3
work=$4

rm -rf "$work"
mkdir -p "$work"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# ab-dallyd.sh with the driver $1.
ab_with() {
  local with=$1
  shift
  DALLY_BENCH_BUILD_DIR="$work" DALLY_PEERS_BENCH="$with" \
    bash "$src/scripts/ab-dallyd.sh" "$@"
}
ab() {
  ab_with "$driver" "$@"
}
tiny=(--durability periodic --tasks 2000 --max-delay-ms 200 --timeout-s 60)

out=$(ab --pairs 1 "$dallyd" "$dallyd" "${tiny[@]}" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "a pair of working builds exited $rc"
echo "$out" | grep -q "^| 1 | BASE | " || fail "no row for pair 1"
# Its last two columns are both runs' host steal, read from /proc/stat.
echo "$out" | grep -qE '^\| 1 \| BASE \| .* \| [0-9]+\.[0-9] \| [0-9]+\.[0-9] \|$' ||
  fail "the row for pair 1 does not end in both runs' host steal"
echo "$out" | grep -q "^Over 1 pairs: " || fail "no summary over 1 pair"
# One pair is too few to fit the steal's slope: said so, not a figure.
echo "$out" | grep -q "^Steal-adjusted: too few pairs" ||
  fail "no steal-adjusted line saying one pair is too few"
[ "$(grep -c $'^1\t' "$work/results/ab/pairs.tsv")" -eq 2 ] ||
  fail "pairs.tsv does not hold both runs of pair 1"

broken="$work/broken-dallyd"
printf '#!/bin/sh\nexit 1\n' >"$broken"
chmod +x "$broken"
out=$(ab --pairs 1 "$dallyd" "$broken" "${tiny[@]}" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "a NEW that cannot start exited $rc, not 1"
echo "$out" | grep -q "run failed with $broken" ||
  fail "the failure does not name the build"

# Writes a stand-in for the driver at $1: it finds --out DIR among its
# arguments, creates DIR and runs the shell lines $2 with $out_dir set to
# it ($0 is the stand-in's own path).
fake_driver() {
  {
    echo '#!/usr/bin/env bash'
    echo 'while [ $# -gt 0 ]; do'
    echo '  [ "$1" = "--out" ] && out_dir=$2 && mkdir -p "$out_dir"'
    echo '  shift'
    echo 'done'
    printf '%s\n' "$2"
  } >"$1"
  chmod +x "$1"
}

# A driver that succeeds but reports no Dally row (another version's
# columns): exit 1, said so.
odd_driver="$work/odd-driver"
fake_driver "$odd_driver" \
  'printf "name\tvalue\nsomething\t1\n" >"$out_dir/runs.tsv"'
out=$(ab_with "$odd_driver" --pairs 1 "$dallyd" "$dallyd" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "a driver without a Dally row: exit $rc, not 1"
echo "$out" | grep -q "no Dally row" || fail "a missing row is not named"

# A driver whose runs lose 3000 tasks/s per 1% of steal, the n-th run
# having n - 1 % stolen, the same for either build: the raw ratios differ
# from 1 (the order of a pair decides which run is slower), the
# steal-adjusted ones are exactly 1.
steal_driver="$work/steal-driver"
fake_driver "$steal_driver" '
n=$(cat "$0.runs" 2>/dev/null || echo 0)
echo $((n + 1)) >"$0.runs"
printf "system\ttasks\te2e_per_s\tserver_cpu_s\tp99_ms\tschedule_per_s\thost_steal_pct\n" >"$out_dir/runs.tsv"
printf "dally\t1000\t%d\t0.01\t1.00\t1000\t%d.00\n" $((100000 - 3000 * n)) "$n" >>"$out_dir/runs.tsv"'
out=$(ab_with "$steal_driver" --pairs 4 "$dallyd" "$dallyd" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "the steal driver's pairs exited $rc"
echo "$out" | grep -q "^Over 4 pairs: NEW/BASE end to end 1.000 " &&
  fail "the raw ratio should not come out at 1.000 here"
echo "$out" | grep -q "^Steal-adjusted (3000 tasks/s per 1% of CPU time stolen): NEW/BASE end to end 1.000 (median ratio), mean 1.000 +- 0.000" ||
  fail "the steal-adjusted ratio is not 1.000 with a slope of 3000"

ab "$dallyd" >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "one build only exited $rc, not 2"
ab --pairs 0 "$dallyd" "$dallyd" >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "--pairs 0 exited $rc, not 2"

if [ $failures -gt 0 ]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "ab_dallyd: all checks passed"
