#!/usr/bin/env bash
# CTest peers_failure: dally-peers-bench stops every server it started when
# a run fails, checked from outside the driver.
#  1. Rows that cannot finish (--timeout-s 1): the driver exits 1, says
#     FAILED and leaves no process behind.
#  2. The driver gets SIGTERM in the middle of a row: it exits, and no
#     process is left behind.
# A left-behind process is one whose working directory is under the
# scratch directory (the driver starts every server there).
# Usage: failure_test.sh DRIVER REDIS_SERVER BEANSTALKD WORK_DIR
set -u
driver=$1
redis=$2
beanstalkd=$3
work=$4

rm -rf "$work"
mkdir -p "$work/scratch" "$work/out"
scratch=$(cd "$work/scratch" && pwd)
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

left_behind() {
  local pid cwd
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null || true)
    case "$cwd" in
      "$scratch" | "$scratch"/*) echo "$pid" ;;
    esac
  done
}

check_none_left() {
  local left
  left=$(left_behind)
  if [ -n "$left" ]; then
    fail "$1: processes left running: $left"
    for pid in $left; do kill -KILL "$pid" 2>/dev/null || true; done
  fi
}

common=(--redis-server "$redis" --beanstalkd "$beanstalkd"
  --durability periodic --pending-tasks 0 --dir "$scratch")

# 1. Rows that time out.
"$driver" "${common[@]}" --systems dally,redis,beanstalkd --tasks 20000 \
  --timeout-s 1 --out "$work/out/timeout" >"$work/timeout.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "timed-out rows: exit $rc, expected 1"
grep -q "FAILED" "$work/timeout.log" ||
  fail "timed-out rows: no FAILED in the output"
if grep -q "servers left running" "$work/timeout.log"; then
  fail "timed-out rows: the driver found servers left running"
fi
check_none_left "timed-out rows"

# 2. SIGTERM while a row runs (Redis: it starts fast), once its server
# is up.
"$driver" "${common[@]}" --systems redis --tasks 5000000 --timeout-s 120 \
  --out "$work/out/term" >"$work/term.log" 2>&1 &
driver_pid=$!
for _ in $(seq 1 300); do
  [ -n "$(left_behind)" ] && break
  sleep 0.1
done
[ -n "$(left_behind)" ] || fail "SIGTERM: no server of the driver seen"
sleep 1
kill -TERM "$driver_pid"
waited=0
while kill -0 "$driver_pid" 2>/dev/null && [ "$waited" -lt 600 ]; do
  sleep 0.1
  waited=$((waited + 1))
done
if kill -0 "$driver_pid" 2>/dev/null; then
  fail "SIGTERM: the driver still runs 60 s later"
  kill -KILL "$driver_pid" 2>/dev/null || true
fi
wait "$driver_pid" 2>/dev/null
check_none_left "SIGTERM"

if [ "$failures" -gt 0 ]; then
  echo "--- timeout.log (tail)"
  tail -20 "$work/timeout.log"
  echo "--- term.log (tail)"
  tail -20 "$work/term.log"
  exit 1
fi
rm -rf "$work"
echo "peers_failure: every server stopped after failed rows and after SIGTERM"
