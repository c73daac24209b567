#!/usr/bin/env bash
# Dally's main job on a fresh machine: installs what is missing, builds in
# Release (build/release), starts one dallyd with its data in ./demo-data,
# schedules 20 tasks 1-5 s out through dallyctl, consumes them with
# `dallyctl consume --json`, prints each one's lateness and a summary, and
# stops the node with SIGTERM (also when anything fails). It exits non-zero
# if a task came early, went missing, or the node did not stop cleanly.
#
# Usage: bash scripts/demo.sh [--count N] [--data-dir DIR]
# The store in DIR outlives the demo: run it twice and the node recovers
# what the first run left (each run uses a topic of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/demo-common.sh
source scripts/lib/demo-common.sh

count=20
data=demo-data
demo_options demo.sh 2 2,11 "$@"
demo_build dallyd dallyctl dally-timer-demo

work=$(mktemp -d)
node_pid=
consumer_pid=
cleanup() {
  if [ -n "$consumer_pid" ] && kill -0 "$consumer_pid" 2>/dev/null; then
    kill -TERM "$consumer_pid" 2>/dev/null || true
    wait "$consumer_pid" 2>/dev/null || true
  fi
  if [ -n "$node_pid" ] && kill -0 "$node_pid" 2>/dev/null; then
    echo "stopping dallyd (pid $node_pid) after a failure" >&2
    kill -TERM "$node_pid" 2>/dev/null || true
    wait "$node_pid" 2>/dev/null || true
    echo "--- dallyd log ---" >&2
    cat "$work/dallyd.log" >&2 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# Interrupted (Ctrl-C, kill): exit, which runs the cleanup above.
trap 'exit 130' INT
trap 'exit 143' TERM

# Port 0: dallyd picks a free port and prints it.
"$dallyd" --data-dir "$data" --port 0 >"$work/dallyd.out" \
  2>"$work/dallyd.log" &
node_pid=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's/^dallyd listening on .*:\([0-9]*\)$/\1/p' "$work/dallyd.out")
  [ -n "$port" ] && break
  if ! kill -0 "$node_pid" 2>/dev/null; then
    echo "dallyd failed to start:" >&2
    cat "$work/dallyd.log" >&2
    node_pid=
    exit 1
  fi
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "dallyd did not start within 60 s" >&2
  exit 1
fi
echo "dallyd (pid $node_pid) listening on 127.0.0.1:$port, data in $data/"
sed 's/^/  dallyd: /' "$work/dallyd.log"
ctl() { "$dallyctl" --port "$port" "$@"; }

# A topic of this run's own, so tasks an interrupted earlier run left in
# the store are not mixed in.
topic="demo-$(date +%s)-$$"
"$dallyctl" --port "$port" --json consume "$topic" --max "$count" \
  >"$work/deliveries" 2>"$work/consumer.err" &
consumer_pid=$!
for _ in $(seq 100); do
  ctl --json stats | grep -q "\"topic\":\"$topic\",\"consumers\":1" && break
  sleep 0.1
done

echo "scheduling $count tasks due 1-5 s from now on topic $topic"
: >"$work/ids"
for i in $(seq 1 "$count"); do
  delay_ms=$((1000 + (i - 1) * 4000 / (count - 1)))
  ctl schedule --topic "$topic" --in "${delay_ms}ms" \
    --payload "task $i of $count, due in $delay_ms ms" >>"$work/ids"
done

# Every task is due within 5 s of its schedule; allow 20 s more.
for _ in $(seq 250); do
  kill -0 "$consumer_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$consumer_pid" 2>/dev/null; then
  echo "not every task arrived within 25 s" >&2
  kill -TERM "$consumer_pid" || true
fi
consumer_rc=0
wait "$consumer_pid" || consumer_rc=$?
consumer_pid=

# A number field of a JSON line from dallyctl --json.
field() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9]*\).*/\1/p" <<<"$2"; }

echo
printf '%-6s %-14s %-14s %9s  %s\n' id due delivered late payload
lateness=()
delivered_ids=()
while IFS= read -r line; do
  id=$(field id "$line")
  due=$(field due_ms "$line")
  at=$(field delivered_ms "$line")
  late=$(field lateness_ms "$line")
  payload=$(sed -n 's/.*"payload":"\([^"]*\)".*/\1/p' <<<"$line")
  printf '%-6s %-14s %-14s %6s ms  %s\n' "$id" \
    "$(date -u -d "@$((due / 1000)).$(printf %03d $((due % 1000)))" +%T.%3NZ)" \
    "$(date -u -d "@$((at / 1000)).$(printf %03d $((at % 1000)))" +%T.%3NZ)" \
    "$late" "$payload"
  lateness+=("$late")
  delivered_ids+=("$id")
done <"$work/deliveries"

early=0
for l in "${lateness[@]}"; do
  if [ "$l" -lt 0 ]; then
    early=$((early + 1))
  fi
done
missing=$(comm -23 <(sort -u "$work/ids") \
  <(printf '%s\n' "${delivered_ids[@]}" | sort -u) | wc -l)
n=${#lateness[@]}
echo
if [ "$n" -gt 0 ]; then
  sorted=$(printf '%s\n' "${lateness[@]}" | sort -n)
  min=$(echo "$sorted" | head -n 1)
  max=$(echo "$sorted" | tail -n 1)
  median=$(echo "$sorted" | sed -n "$(((n + 1) / 2))p")
  echo "delivered $n of $count tasks; lateness min $min ms, median" \
    "$median ms, max $max ms"
fi
echo "early: $early, missing: $missing"

# A clean stop: SIGTERM, stores flushed and closed, exit 0.
kill -TERM "$node_pid"
node_rc=0
wait "$node_pid" || node_rc=$?
node_pid=
echo "dallyd stopped (exit $node_rc)"
sed -n 's/^.*dallyd\[[0-9]*\]: \(since start\|engine stopped\|stopped\)/  dallyd: \1/p' \
  "$work/dallyd.log"

if [ "$consumer_rc" -ne 0 ] || [ "$early" -ne 0 ] || [ "$missing" -ne 0 ] \
  || [ "$n" -ne "$count" ] || [ "$node_rc" -ne 0 ]; then
  echo "demo FAILED" >&2
  cat "$work/consumer.err" >&2
  exit 1
fi
echo "ok: every task delivered once, none early"
