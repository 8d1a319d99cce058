#!/usr/bin/env bash
# tools/call throughput and latency of mcp-node beside a bare actix-web JSON
# echo (the ceiling), under identical load, interleaved, on loopback.
# The server under test runs with one worker pinned to core 0; wrk runs with
# one thread pinned to core 1. Prints one line per run and the ratio.
#   CONNS=64 DURATION=10s ROUNDS=3 bash loadtest/wrk/compare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
SESSIONS_N=${SESSIONS_N:-64}
NODE_ADDR=127.0.0.1:18181
ECHO_ADDR=127.0.0.1:18182
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 1; }
cargo build --release --quiet -p mcp-node
cargo build --release --quiet -p mcp-server --example json_echo

taskset -c 0 ./target/release/mcp-node --bind $NODE_ADDR --workers 1 --log error --max-in-flight 1024 >/dev/null &
NODE=$!
taskset -c 0 ./target/release/examples/json_echo $ECHO_ADDR 1 &
ECHO=$!
trap 'kill $NODE $ECHO 2>/dev/null; wait 2>/dev/null' EXIT
sleep 1

sessions=()
for _ in $(seq 1 "$SESSIONS_N"); do
  sid=$(curl -s -D - -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"0"}}}' \
    "http://$NODE_ADDR/mcp" | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:" {print $2}')
  curl -s -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H "Mcp-Session-Id: $sid" \
    -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "http://$NODE_ADDR/mcp"
  sessions+=("$sid")
done
SESSIONS=$(IFS=,; echo "${sessions[*]}")

run() { # name url sessions
  local out
  out=$(SESSIONS=$3 taskset -c 1 wrk -t1 -c"$CONNS" -d"$DURATION" --latency -s loadtest/wrk/tools_call.lua "$2")
  local rps p50 p99 errors
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  printf '%-10s rps=%-10s p50=%-8s p99=%-8s %s\n' "$1" "$rps" "$p50" "$p99" "$errors" >&2
  echo "$rps"
}

node_total=0
echo_total=0
for round in $(seq 1 "$ROUNDS"); do
  n=$(run mcp-node "http://$NODE_ADDR/mcp" "$SESSIONS")
  e=$(run json-echo "http://$ECHO_ADDR/mcp" "")
  node_total=$(awk -v a="$node_total" -v b="$n" 'BEGIN {print a + b}')
  echo_total=$(awk -v a="$echo_total" -v b="$e" 'BEGIN {print a + b}')
done
awk -v n="$node_total" -v e="$echo_total" -v r="$ROUNDS" -v c="$CONNS" \
  'BEGIN {printf "mean over %d rounds at %d connections: mcp-node %.0f req/s, json-echo %.0f req/s, ratio %.2f\n", r, c, n/r, e/r, n/e}'
