#!/usr/bin/env bash
# What a session's life costs on Redis, for two mcp-node binaries side by
# side: per checked life (initialize, notifications/initialized, DELETE),
# the node's CPU, redis-server's CPU and the commands Redis ran (`INFO
# commandstats`, scripts' inner commands included), each node alone on a
# redis-server of its own, both at the same time so that whatever else the
# machine does weighs on both.
#
# Usage (from anywhere):
#   bash loadtest/peers/redis-life.sh BIN_A BIN_B
#
#   BIN_A, BIN_B  mcp-node release binaries (the same path twice is a
#                 check of the method: B/A near 1)
#   DURATION      wrk duration (default 6s)
#   RUNS          how many times to repeat (default 3)
#   COMMANDS      1 to print each run's commands per life by name
#
# Both nodes run on core 0 (one HTTP worker each), each with its own
# redis-server and its own wrk (peers/wrk/life.lua, 16 connections, one
# thread each, every answer checked) on core 1. A node that has heartbeated
# on its Redis for a heartbeat TTL (6 s) and once more after it is alone in
# a whole node set (proto-docs/cluster.md, "control messages"): the script
# waits 9 s before loading it, so the figures are those of a lone node. CPU
# is utime + stime from /proc/PID/stat over the run. Ports 18592 and 18593
# (nodes), 6392 and 6393 (Redis) on 127.0.0.1.
set -euo pipefail

BIN_A=${1:?usage: redis-life.sh BIN_A BIN_B}
BIN_B=${2:?usage: redis-life.sh BIN_A BIN_B}
DURATION=${DURATION:-6s}
RUNS=${RUNS:-3}
COMMANDS=${COMMANDS:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
TICK=$(getconf CLK_TCK)
# shellcheck source=common.sh
source "$HERE/common.sh"

for tool in wrk taskset redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "redis-life.sh: $tool is not installed" >&2; exit 1; }
done

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  redis-cli -p 6392 shutdown nosave >/dev/null 2>&1 || true
  redis-cli -p 6393 shutdown nosave >/dev/null 2>&1 || true
}
trap cleanup EXIT

# redis PORT -> redis-server's pid, started empty on core 1
redis() {
  redis-cli -p "$1" shutdown nosave >/dev/null 2>&1 || true
  taskset -c 1 redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize yes --pidfile "$out/redis-$1.pid" >/dev/null
  for _ in $(seq 50); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && { cat "$out/redis-$1.pid"; return 0; }
    sleep 0.1
  done
  echo "redis-life.sh: redis-server on port $1 did not start" >&2
  exit 1
}

# start BIN PORT REDIS_PORT -> the node's pid
start() {
  taskset -c 0 "$1" --bind "127.0.0.1:$2" --redis-url "redis://127.0.0.1:$3" "${NODE_FLAGS[@]}" \
    --max-sessions 20000 "${QUOTAS_OFF[@]}" >/dev/null 2>&1 &
  echo $!
}

# load PORT OUT: "ok failed" of one wrk run into OUT
load() {
  RUN_ID=$RANDOM WRK_LUA_DIR="$HERE/wrk" taskset -c 1 wrk -t16 -c16 "-d$DURATION" --timeout 5s \
    -s "$HERE/wrk/life.lua" "http://127.0.0.1:$1/mcp" 2>&1 | awk '/^checked ok/ {print $3, $5}' >"$2"
}

# commands REDIS_PORT -> "name calls" per command since the last reset
commands() {
  redis-cli -p "$1" info commandstats | tr -d '\r' |
    awk -F'[:,=]' '/^cmdstat_/ {sub("cmdstat_", "", $1); print $1, $3}'
}

out=$(mktemp -d)
for run in $(seq "$RUNS"); do
  ra=$(redis 6392); rb=$(redis 6393)
  a=$(start "$BIN_A" 18592 6392); pids+=("$a")
  b=$(start "$BIN_B" 18593 6393); pids+=("$b")
  wait_up 18592 redis-life.sh; wait_up 18593 redis-life.sh
  sleep 9
  redis-cli -p 6392 config resetstat >/dev/null; redis-cli -p 6393 config resetstat >/dev/null
  na=$(cpu_ticks "$a"); nb=$(cpu_ticks "$b"); xa=$(cpu_ticks "$ra"); xb=$(cpu_ticks "$rb")
  load 18592 "$out/a" & wa=$!
  load 18593 "$out/b"
  wait "$wa"
  na=$(( $(cpu_ticks "$a") - na )); nb=$(( $(cpu_ticks "$b") - nb ))
  xa=$(( $(cpu_ticks "$ra") - xa )); xb=$(( $(cpu_ticks "$rb") - xb ))
  commands 6392 >"$out/ca"; commands 6393 >"$out/cb"
  kill -9 "$a" "$b" 2>/dev/null || true
  wait "$a" "$b" 2>/dev/null || true
  pids=()
  read -r oka fa <"$out/a"; read -r okb fb <"$out/b"
  ca=$(awk '{n += $2} END {print n + 0}' "$out/ca"); cb=$(awk '{n += $2} END {print n + 0}' "$out/cb")
  awk -v na="$na" -v nb="$nb" -v xa="$xa" -v xb="$xb" -v ca="$ca" -v cb="$cb" -v oka="$oka" -v okb="$okb" \
    -v fa="$fa" -v fb="$fb" -v tick="$TICK" -v run="$run" 'BEGIN {
      if (oka == 0 || okb == 0) { printf "run %d: no checked life (A %d, B %d)\n", run, oka, okb; exit 1 }
      una = na * 1e6 / tick / oka; unb = nb * 1e6 / tick / okb
      uxa = xa * 1e6 / tick / oka; uxb = xb * 1e6 / tick / okb
      printf "run %d: A %d lives, %d failed, node %.1f us, Redis %.1f us, %.2f commands per life | B %d lives, %d failed, node %.1f us, Redis %.1f us, %.2f commands per life | B/A node %.3f, Redis %.3f\n",
        run, oka, fa, una, uxa, ca / oka, okb, fb, unb, uxb, cb / okb, unb / una, uxb / uxa
    }'
  if [ "$COMMANDS" = 1 ]; then
    for side in a b; do
      ok=$oka; [ "$side" = b ] && ok=$okb
      printf '  %s:' "$(echo "$side" | tr ab AB)"
      sort "$out/c$side" | awk -v ok="$ok" '$2 / ok >= 0.005 {printf " %s %.2f", $1, $2 / ok}'
      echo
    done
  fi
  redis-cli -p 6392 shutdown nosave >/dev/null 2>&1 || true
  redis-cli -p 6393 shutdown nosave >/dev/null 2>&1 || true
done
rm -rf "$out"
