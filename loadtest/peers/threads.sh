#!/usr/bin/env bash
# CPU per checked answer of one mcp-node binary, thread by thread: where a
# change's cost falls (the HTTP worker, the handler executor, the trace
# exporter's threads, ...), which paired.sh's whole-process figure hides.
#
# Usage (from anywhere):
#   bash loadtest/peers/threads.sh BIN
#
#   BIN       an mcp-node release binary, or a script that sets variables
#             (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, ...) and
#             execs one
#   CONNS     wrk connections (default 64)
#   DURATION  wrk duration (default 6s)
#   RUNS      how many times to repeat, a fresh node each time (default 2)
#
# The server runs on core 0 and wrk on core 1, sending `tools/call echo`
# over 64 sessions (loadtest/peers/wrk/tools_call.lua, every answer
# checked). Each thread's figure is its CPU time (utime + stime from
# /proc/PID/task/TID/stat, threads of one name added up) over the checked
# answers, with its voluntary context switches per 1,000 answers; threads
# that took no measurable CPU are left out. Port 18592 on 127.0.0.1.
set -euo pipefail

BIN=${1:?usage: threads.sh BIN}
CONNS=${CONNS:-64}
DURATION=${DURATION:-6s}
RUNS=${RUNS:-2}
PORT=18592
HERE=$(cd "$(dirname "$0")" && pwd)
TICK=$(getconf CLK_TCK)
# shellcheck source=common.sh
source "$HERE/common.sh"

command -v wrk >/dev/null || { echo "threads.sh: wrk is not installed" >&2; exit 1; }
command -v taskset >/dev/null || { echo "threads.sh: taskset is not installed" >&2; exit 1; }

node=""
cleanup() { [ -n "$node" ] && kill -9 "$node" 2>/dev/null || true; }
trap cleanup EXIT

# threads PID: "name ticks switches" per thread name, names without spaces
threads() {
  for task in /proc/"$1"/task/*; do
    local name ticks switches
    name=$(tr ' ' _ <"$task/comm")
    ticks=$(cpu_ticks "${task#/proc/}")
    switches=$(awk '/^voluntary_ctxt_switches/ {print $2}' "$task/status")
    echo "$name $ticks $switches"
  done | awk '{t[$1] += $2; s[$1] += $3} END {for (n in t) print n, t[n], s[n]}' | sort
}

out=$(mktemp -d)
for run in $(seq "$RUNS"); do
  taskset -c 0 "$BIN" --bind "127.0.0.1:$PORT" "${NODE_FLAGS[@]}" --max-sessions 20000 \
    "${QUOTAS_OFF[@]}" >/dev/null 2>&1 &
  node=$!
  wait_up "$PORT" threads.sh
  sessions=$(open_sessions_at "http://127.0.0.1:$PORT/mcp" 64 2025-11-25) ||
    { echo "threads.sh: initialize failed" >&2; exit 1; }
  threads "$node" >"$out/before"
  SESSIONS="$sessions" RUN_ID=$RANDOM ECHO_PREFIX="Echo: " WRK_LUA_DIR="$HERE/wrk" \
    taskset -c 1 wrk -t1 "-c$CONNS" "-d$DURATION" --timeout 5s -s "$HERE/wrk/tools_call.lua" \
    "http://127.0.0.1:$PORT/mcp" 2>&1 | awk '/checked ok/ {print $3, $5}' >"$out/answers"
  threads "$node" >"$out/after"
  kill -9 "$node" 2>/dev/null || true
  wait "$node" 2>/dev/null || true
  node=""
  read -r ok failed <"$out/answers"
  echo "run $run: $ok ok, $failed failed"
  join "$out/before" "$out/after" | awk -v ok="$ok" -v tick="$TICK" '{
      us = ($4 - $2) * 1e6 / tick / ok; cs = ($5 - $3) * 1000 / ok
      if (us >= 0.05 || cs >= 1) printf "  %-18s %6.2f us CPU/answer  %7.1f switches/1000 answers\n", $1, us, cs
    }'
done
rm -rf "$out"
