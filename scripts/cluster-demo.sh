#!/usr/bin/env bash
# A three-node Dally cluster on 127.0.0.1: installs what is missing, builds
# in Release (build/release), starts three dallyd with their data under one
# folder (./cluster-demo-data/n1..n3), waits until they agree on a
# coordinator and a shard map, subscribes one consumer at a standby,
# schedules tasks through every node and checks that each is delivered and
# none early. Then it kills the coordinator with kill -9, shows a standby
# taking over with the map intact, schedules more tasks with `dallyctl
# --seeds` (every node's address, the dead one too), restarts the killed
# node (it rejoins and runs its shards again), schedules through all three
# again and stops every node with SIGTERM. It exits non-zero if a task
# came early or went missing, no standby took over, or a node did not stop
# cleanly.
#
# Usage: bash scripts/cluster-demo.sh [--count N] [--data-dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/demo-common.sh
source scripts/lib/demo-common.sh

count=30
data=cluster-demo-data
demo_options cluster-demo.sh 3 2,14 "$@"
demo_build dallyd dallyctl

work=$(mktemp -d)
declare -A pid client_port cluster_port
consumer_pid=
stop_node() { # id signal
  local p=${pid[$1]:-}
  [ -n "$p" ] || return 0
  kill -"$2" "$p" 2>/dev/null || true
  local rc=0
  wait "$p" 2>/dev/null || rc=$?
  pid[$1]=
  return $rc
}
cleanup() {
  if [ -n "$consumer_pid" ]; then
    kill -TERM "$consumer_pid" 2>/dev/null || true
    wait "$consumer_pid" 2>/dev/null || true
  fi
  for id in 1 2 3; do
    if [ -n "${pid[$id]:-}" ]; then
      echo "stopping node $id after a failure; its log:" >&2
      stop_node "$id" TERM || true
      sed 's/^/  /' "$work/n$id.log" >&2 || true
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port on 127.0.0.1 that nothing listens on now.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
seeds=
for id in 1 2 3; do
  cluster_port[$id]=$(free_port)
  seeds+="${seeds:+,}$id@127.0.0.1:${cluster_port[$id]}"
done

declare -A log_from
start_node() { # id
  local id=$1
  touch "$work/n$id.log"
  log_from[$id]=$(($(wc -l <"$work/n$id.log") + 1))
  "$dallyd" --data-dir "$data/n$id" --port 0 --node-id "$id" \
    --cluster-seeds "$seeds" >"$work/n$id.out" 2>>"$work/n$id.log" &
  pid[$id]=$!
  local port=
  for _ in $(seq 600); do
    port=$(sed -n 's/^dallyd listening on .*:\([0-9]*\)$/\1/p' "$work/n$id.out")
    [ -n "$port" ] && break
    if ! kill -0 "${pid[$id]}" 2>/dev/null; then
      echo "node $id failed to start:" >&2
      cat "$work/n$id.log" >&2
      pid[$id]=
      exit 1
    fi
    sleep 0.1
  done
  [ -n "$port" ] || { echo "node $id did not start within 60 s" >&2; exit 1; }
  client_port[$id]=$port
}

status_json() { # id
  "$dallyctl" --json --timeout 2s --port "${cluster_port[$1]}" cluster status \
    2>/dev/null || true
}
num() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9]*\).*/\1/p" <<<"$2" | head -n 1; }

# Waits until every node in $@ names the same coordinator, one of them, and
# the same map epoch, and the coordinator's own term is committed; prints
# the coordinator.
settle() {
  for _ in $(seq 300); do
    local c= e= ok=1
    for id in "$@"; do
      local s cc ee
      s=$(status_json "$id")
      cc=$(num coordinator "$s"); ee=$(num epoch "$s")
      if [ -z "$cc" ] || [ "$cc" = 0 ] || [ -z "$ee" ] || [ "$ee" = 0 ] \
        || [ "$(num term "$s")" != "$(num commit_term "$s")" ] \
        || ! [[ " $* " == *" $cc "* ]] \
        || { [ -n "$c" ] && { [ "$cc" != "$c" ] || [ "$ee" != "$e" ]; }; }; then
        ok=0
        break
      fi
      c=$cc; e=$ee
    done
    if [ "$ok" = 1 ]; then
      echo "$c"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# Waits until the engines of $@ run the shards of a committed map (a node
# answers `unavailable: no shard map yet` before).
wait_serving() {
  for id in "$@"; do
    for _ in $(seq 300); do
      tail -n +"${log_from[$id]}" "$work/n$id.log" \
        | grep -q "engine runs map epoch" && break
      sleep 0.1
    done
    tail -n +"${log_from[$id]}" "$work/n$id.log" \
      | grep -q "engine runs map epoch" \
      || { echo "node $id did not open its shards within 30 s" >&2; exit 1; }
  done
}

echo "starting three nodes, data under $data/"
for id in 1 2 3; do
  start_node "$id"
  echo "  node $id: pid ${pid[$id]}, clients on 127.0.0.1:${client_port[$id]}," \
    "cluster on 127.0.0.1:${cluster_port[$id]}"
done
coordinator=$(settle 1 2 3) || { echo "the nodes did not agree within 30 s" >&2; exit 1; }
wait_serving 1 2 3
"$dallyctl" --port "${cluster_port[1]}" cluster status | sed 's/^/  /'

# The consumer subscribes at a standby, so it outlives the coordinator.
consumer_node=$((coordinator % 3 + 1))
topic="cluster-demo-$(date +%s)-$$"
"$dallyctl" --port "${client_port[$consumer_node]}" --json consume "$topic" \
  >"$work/deliveries" 2>"$work/consumer.err" &
consumer_pid=$!
sleep 1
: >"$work/ids"
schedule_round() { # n nodes...
  local n=$1 i=0
  shift
  local nodes=("$@")
  for i in $(seq 1 "$n"); do
    local id=${nodes[$(((i - 1) % ${#nodes[@]}))]}
    local delay_ms=$((1000 + (i - 1) * 3000 / (n - 1)))
    "$dallyctl" --port "${client_port[$id]}" schedule --topic "$topic" \
      --in "${delay_ms}ms" --payload "task $i of $n, via node $id" >>"$work/ids"
  done
}
# Waits until every scheduled id has been delivered (or 30 s).
wait_delivered() {
  for _ in $(seq 300); do
    local missing
    missing=$(comm -23 <(sort -u "$work/ids") \
      <(sed -n 's/.*"id":\([0-9]*\).*/\1/p' "$work/deliveries" | sort -u) | wc -l)
    [ "$missing" = 0 ] && return 0
    sleep 0.1
  done
  return 1
}
report() {
  local early
  early=$(sed -n 's/.*"lateness_ms":\(-[0-9]*\).*/\1/p' "$work/deliveries" | wc -l)
  local n
  n=$(sort -u "$work/ids" | wc -l)
  local late
  late=$(sed -n 's/.*"lateness_ms":\([0-9]*\).*/\1/p' "$work/deliveries" | sort -n)
  echo "  delivered $(sed -n 's/.*"id":\([0-9]*\).*/\1/p' "$work/deliveries" | sort -u | wc -l)" \
    "of $n tasks; lateness max $(tail -n 1 <<<"$late") ms; early: $early"
  [ "$early" = 0 ]
}

echo "scheduling $count tasks due 1-4 s out through nodes 1, 2 and 3;" \
  "consumer at node $consumer_node"
schedule_round "$count" 1 2 3
wait_delivered || { echo "not every task arrived within 30 s" >&2; exit 1; }
report || { echo "a task came early" >&2; exit 1; }

echo "kill -9 of the coordinator, node $coordinator"
start_ms=$(date +%s%3N)
stop_node "$coordinator" KILL || true
survivors=()
for id in 1 2 3; do [ "$id" != "$coordinator" ] && survivors+=("$id"); done
new=$(settle "${survivors[@]}") || { echo "no standby took over within 30 s" >&2; exit 1; }
echo "  node $new is coordinator $(( $(date +%s%3N) - start_ms )) ms after the kill"
"$dallyctl" --port "${cluster_port[$new]}" cluster status | sed 's/^/  /'

# dallyctl --seeds takes every node's client address and skips the dead one.
client_seeds=
for id in 1 2 3; do
  client_seeds+="${client_seeds:+,}127.0.0.1:${client_port[$id]}"
done
echo "scheduling $count more tasks with dallyctl --seeds $client_seeds"
for i in $(seq 1 "$count"); do
  delay_ms=$((1000 + (i - 1) * 3000 / (count - 1)))
  "$dallyctl" --seeds "$client_seeds" schedule --topic "$topic" \
    --in "${delay_ms}ms" --payload "task $i of $count, via --seeds" >>"$work/ids"
done
wait_delivered || { echo "not every task arrived within 30 s" >&2; exit 1; }
report || { echo "a task came early" >&2; exit 1; }

echo "restarting node $coordinator"
start_node "$coordinator"
settle 1 2 3 >/dev/null || { echo "node $coordinator did not rejoin within 30 s" >&2; exit 1; }
wait_serving "$coordinator"
"$dallyctl" --port "${cluster_port[$coordinator]}" cluster status | sed 's/^/  /'
echo "scheduling $count more tasks through nodes 1, 2 and 3"
schedule_round "$count" 1 2 3
wait_delivered || { echo "not every task arrived within 30 s" >&2; exit 1; }
report || { echo "a task came early" >&2; exit 1; }

kill -TERM "$consumer_pid" 2>/dev/null || true
wait "$consumer_pid" 2>/dev/null || true
consumer_pid=
failed=0
for id in 1 2 3; do
  rc=0
  stop_node "$id" TERM || rc=$?
  echo "node $id stopped (exit $rc)"
  [ "$rc" = 0 ] || failed=1
done
[ "$failed" = 0 ] || { echo "cluster demo FAILED: a node did not stop cleanly" >&2; exit 1; }
echo "ok: every task delivered, none early; a standby took over from the killed coordinator"
