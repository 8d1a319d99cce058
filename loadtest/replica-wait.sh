#!/usr/bin/env bash
# What waiting for a replica costs (`[redis] replica_acks`): one release node
# on a Redis primary with one replica, the same load with the wait off (0) and
# on (1), side by side, ROUNDS times in turn.
#
# Usage (from anywhere, after `cargo build --release -p mcp-node -p mcp-loadtest`):
#   bash loadtest/replica-wait.sh
#
#   SCENARIO   loadtest/scenarios file, or a path (default mixed.toml)
#   SESSIONS   virtual sessions (default 100)
#   DURATION   seconds per measurement (default 20)
#   ROUNDS     measurements of each setting (default 2)
#
# Prints one line per measurement: operations per second, failed operations,
# the p50 and p99 of `echo_call` (answered as JSON: no event written),
# `long_call` and `drop_and_resume` (progress and answer are events written to
# Redis), and the node's count of waits by outcome. Redis runs without persistence in a temporary
# directory, on free loopback ports; everything stops when the script ends.
# The node inherits the environment: `MCP_RESPONSE_MODE=sse` answers every
# call on an SSE stream (a stream created, an answer appended, the stream
# closed: three writes waited for).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NODE=${NODE:-$ROOT/target/release/mcp-node}
LOADTEST=${LOADTEST:-$ROOT/target/release/mcp-loadtest}
SCENARIO=${SCENARIO:-mixed.toml}
case $SCENARIO in */*) ;; *) SCENARIO=$ROOT/loadtest/scenarios/$SCENARIO ;; esac
SESSIONS=${SESSIONS:-100}
DURATION=${DURATION:-20}
ROUNDS=${ROUNDS:-2}
for bin in "$NODE" "$LOADTEST"; do
  [ -x "$bin" ] || { echo "replica-wait.sh: $bin missing: cargo build --release -p mcp-node -p mcp-loadtest" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "replica-wait.sh: redis-server missing (apt-get install redis-server)" >&2; exit 1; }

WORK=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

PRIMARY=$(free_port)
REPLICA=$(free_port)
redis-server --port "$PRIMARY" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
  --logfile "$WORK/primary.log" &
pids+=($!)
redis-server --port "$REPLICA" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
  --logfile "$WORK/replica.log" --replicaof 127.0.0.1 "$PRIMARY" &
pids+=($!)
for _ in $(seq 100); do
  redis-cli -p "$PRIMARY" info replication 2>/dev/null | grep -q 'slave0:.*state=online' && break
  sleep 0.1
done

measure() {
  local acks=$1 port admin node_pid report
  port=$(free_port)
  admin=$(free_port)
  report="$WORK/report-$acks.json"
  redis-cli -p "$PRIMARY" flushall >/dev/null
  MCP_REDIS__REPLICA_ACKS=$acks "$NODE" --redis-url "redis://127.0.0.1:$PRIMARY/" \
    --bind "127.0.0.1:$port" --admin-bind "127.0.0.1:$admin" --log warn >"$WORK/node.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$admin/readyz" >/dev/null && break
    sleep 0.1
  done
  "$LOADTEST" run --url "http://127.0.0.1:$port/mcp" --scenario "$SCENARIO" \
    --sessions "$SESSIONS" --duration "$DURATION" --ramp-up 2 --max-errors 1000000 \
    --report "$report" >/dev/null 2>&1 || true
  local waits
  waits=$(curl -fs "http://127.0.0.1:$admin/metrics" | grep '^mcp_redis_replica_waits_total' |
    sed 's/mcp_redis_replica_waits_total{outcome="\([a-z]*\)"} /\1=/' | tr '\n' ' ')
  kill "$node_pid"
  wait "$node_pid" 2>/dev/null || true
  python3 - "$report" "$acks" "$waits" <<'EOF'
import json, sys
report, acks, waits = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(report))
line = (f"replica_acks={acks}: {r['ops_per_sec']:.0f} ops/s, {r['total_failed']} failed")
for name in ("echo_call", "long_call", "drop_and_resume"):
    op = r["operations"].get(name)
    if op:
        line += f"; {name} p50 {op['p50_ms']:.1f} ms, p99 {op['p99_ms']:.1f} ms"
print(line + f"; waits: {waits.strip()}")
EOF
}

for _ in $(seq "$ROUNDS"); do
  measure 0
  measure 1
done
