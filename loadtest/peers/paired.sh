#!/usr/bin/env bash
# CPU per checked answer of two mcp-node binaries (or two eras of one), run
# at the same time so that whatever else the machine does weighs on both.
#
# Usage (from anywhere):
#   bash loadtest/peers/paired.sh BIN_A BIN_B
#   ERA_A=session ERA_B=2026 bash loadtest/peers/paired.sh BIN BIN
#
#   BIN_A, BIN_B  mcp-node release binaries (the same path twice compares eras)
#   ERA_A, ERA_B  session (default) or 2026: how each is called
#   CONNS         wrk connections per server (default 64)
#   DURATION      wrk duration (default 8s)
#   RUNS          how many times to repeat (default 3)
#
# Both servers run on core 0 (one HTTP worker each, executor threads
# inherit the affinity), each with its own wrk on core 1 sending
# `tools/call echo` (loadtest/peers/wrk/tools_call.lua, every answer
# checked). The figure is the server's CPU time (utime + stime from
# /proc/PID/stat) divided by its checked answers, and B/A is A's CPU per
# answer over B's: above 1, B answers more per CPU second. Throughput alone
# moves with the machine from one minute to the next; two servers measured
# at once see the same machine. Ports 18590 and 18591 on 127.0.0.1.
set -euo pipefail

BIN_A=${1:?usage: paired.sh BIN_A BIN_B}
BIN_B=${2:?usage: paired.sh BIN_A BIN_B}
ERA_A=${ERA_A:-session}
ERA_B=${ERA_B:-session}
CONNS=${CONNS:-64}
DURATION=${DURATION:-8s}
RUNS=${RUNS:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
TICK=$(getconf CLK_TCK)
# shellcheck source=common.sh
source "$HERE/common.sh"

command -v wrk >/dev/null || { echo "paired.sh: wrk is not installed" >&2; exit 1; }
command -v taskset >/dev/null || { echo "paired.sh: taskset is not installed" >&2; exit 1; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# start BIN PORT -> the server's pid
start() {
  taskset -c 0 "$1" --bind "127.0.0.1:$2" "${NODE_FLAGS[@]}" --max-sessions 20000 \
    "${QUOTAS_OFF[@]}" >/dev/null 2>&1 &
  echo $!
}

# sessions PORT -> 64 comma-separated session ids, each initialized
sessions() {
  open_sessions_at "http://127.0.0.1:$1/mcp" 64 2025-11-25 || { echo "paired.sh: initialize failed on port $1" >&2; exit 1; }
}

# load PORT ERA SESSIONS OUT: "ok failed" of one wrk run into OUT
load() {
  local stateless=0
  [ "$2" = 2026 ] && stateless=1
  SESSIONS="$3" STATELESS=$stateless RUN_ID=$RANDOM ECHO_PREFIX="Echo: " WRK_LUA_DIR="$HERE/wrk" \
    taskset -c 1 wrk -t1 "-c$CONNS" "-d$DURATION" --timeout 5s -s "$HERE/wrk/tools_call.lua" \
    "http://127.0.0.1:$1/mcp" 2>&1 | awk '/checked ok/ {print $3, $5}' >"$4"
}

out=$(mktemp -d)
for run in $(seq "$RUNS"); do
  a=$(start "$BIN_A" 18590); pids+=("$a")
  b=$(start "$BIN_B" 18591); pids+=("$b")
  wait_up 18590 paired.sh; wait_up 18591 paired.sh
  sa=""; sb=""
  [ "$ERA_A" = session ] && sa=$(sessions 18590)
  [ "$ERA_B" = session ] && sb=$(sessions 18591)
  ta=$(cpu_ticks "$a"); tb=$(cpu_ticks "$b")
  load 18590 "$ERA_A" "$sa" "$out/a" & wa=$!
  load 18591 "$ERA_B" "$sb" "$out/b"
  wait "$wa"
  ta=$(( $(cpu_ticks "$a") - ta )); tb=$(( $(cpu_ticks "$b") - tb ))
  kill -9 "$a" "$b" 2>/dev/null || true
  wait "$a" "$b" 2>/dev/null || true
  pids=()
  read -r oka fa <"$out/a"; read -r okb fb <"$out/b"
  awk -v ta="$ta" -v tb="$tb" -v oka="$oka" -v okb="$okb" -v fa="$fa" -v fb="$fb" \
    -v tick="$TICK" -v run="$run" -v ea="$ERA_A" -v eb="$ERA_B" 'BEGIN {
      ua = ta * 1e6 / tick / oka; ub = tb * 1e6 / tick / okb
      printf "run %d: A (%s) %d ok, %d failed, %.2f us CPU/answer | B (%s) %d ok, %d failed, %.2f us CPU/answer | B/A %.3f\n",
        run, ea, oka, fa, ua, eb, okb, fb, ub, ua / ub
    }'
done
rm -rf "$out"
