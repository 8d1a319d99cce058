#!/usr/bin/env bash
# How many sessions and SSE streams one node holds, and what each costs:
# `mcp-loadtest hold` against a fresh release node per measurement.
#
# Usage (from anywhere, after `cargo build --release -p mcp-node -p mcp-loadtest`):
#   bash loadtest/capacity.sh
#
#   SESSIONS   sessions without streams (default 100000), embedded and on Redis
#   STREAMS    stream counts to measure, each a session with its standalone GET
#              stream (default "5000 9500": each connection holds two
#              descriptors, and this machine's limit is 20,000), embedded
#   OPEN       sessions opened at once (default 64)
#   SETTLE     seconds between the last session opened and the memory reading
#              for sessions without streams (default 40: past the node's
#              passivation of a session idle for 30 s, its idle check every
#              5 s and the 1 s grace); with streams, 2
#   MIMALLOC_PURGE_DELAY  when set, the node's allocator setting (unset, as
#              in the image)
#   SOURCES    local addresses the generator connects from, taken in turn
#              (default "127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5"): one source
#              address reaches the node's port about 28,000 times, so stream
#              counts past that need several (the node is started with
#              127.0.0.0/8 exempt from its 512 connections per address)
#
# Prints one line per measurement: node RSS per session (from /proc/PID/status,
# after the sessions opened and settled; idle sessions without a stream have
# passivated by then) and, on Redis, Redis's `used_memory`
# per session. Each stream holds one connection, so one file descriptor on the
# node and one in the generator: the script raises both processes' open-file
# limit to the hard limit (20,000 on the machines this project is measured
# on), which bounds the stream counts. Sessions without streams need no
# connection of their own (the generator's pool is shared). Ports: free
# loopback ports; Redis runs without persistence in a temporary directory.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NODE=${NODE:-$ROOT/target/release/mcp-node}
LOADTEST=${LOADTEST:-$ROOT/target/release/mcp-loadtest}
SESSIONS=${SESSIONS:-100000}
STREAMS=${STREAMS:-5000 9500}
OPEN=${OPEN:-64}
SETTLE=${SETTLE:-40}
SOURCES=${SOURCES:-127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5}
source_args=()
for source in $SOURCES; do source_args+=(--source-address "$source"); done
for bin in "$NODE" "$LOADTEST"; do
  [ -x "$bin" ] || { echo "capacity.sh: $bin missing: cargo build --release -p mcp-node -p mcp-loadtest" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "capacity.sh: redis-server is not installed" >&2; exit 1; }

ulimit -n "$(ulimit -Hn)"
DIR=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
  done
  rm -rf "$DIR"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts a node with any extra flags; sets NODE_PID and NODE_URL.
start_node() {
  local port
  port=$(free_port)
  "$NODE" --bind "127.0.0.1:$port" --max-sessions "$((SESSIONS + 1000))" \
    --quota-initialize-per-address 0 --quota-requests-per-address 0 --quota-streams-per-address 0 \
    --connection-limit-exempt 127.0.0.0/8 --log error "$@" \
    >"$DIR/node.out" 2>"$DIR/node.err" &
  NODE_PID=$!
  pids+=("$NODE_PID")
  NODE_URL="http://127.0.0.1:$port/mcp"
  for _ in $(seq 1 100); do
    grep -q 'listening on' "$DIR/node.out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "capacity.sh: the node did not start:" >&2
  cat "$DIR/node.err" >&2
  exit 1
}

stop_node() {
  kill -TERM "$NODE_PID" 2>/dev/null || true
  wait "$NODE_PID" 2>/dev/null || true
}

# Runs `hold` against NODE_URL; prints its result line. With a Redis port as $1,
# also Redis's used_memory per session, read while the sessions are held.
hold() {
  local redis_port=$1
  shift
  local before=0 after=0 line
  [ -n "$redis_port" ] && before=$(redis-cli -p "$redis_port" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
  "$LOADTEST" hold --url "$NODE_URL" --server-pid "$NODE_PID" --open-concurrency "$OPEN" \
    "${source_args[@]}" --hold 4 "$@" >"$DIR/hold.out" 2>"$DIR/hold.err" &
  local hold_pid=$!
  pids+=("$hold_pid")
  for _ in $(seq 1 3000); do
    grep -q 'holding for' "$DIR/hold.err" 2>/dev/null && break
    kill -0 "$hold_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$redis_port" ] && after=$(redis-cli -p "$redis_port" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
  wait "$hold_pid" || { echo "capacity.sh: hold failed:" >&2; tail -5 "$DIR/hold.err" >&2; exit 1; }
  line=$(grep '^hold ' "$DIR/hold.out")
  if [ -n "$redis_port" ]; then
    local held
    held=$(sed -n 's/.*sessions=\([0-9]*\).*/\1/p' <<<"$line")
    line="$line redis_bytes_per_session=$(((after - before) / held))"
  fi
  echo "$line"
}

echo "== $SESSIONS sessions without streams, embedded store"
start_node
hold "" --sessions "$SESSIONS" --settle "$SETTLE"
stop_node

echo "== $SESSIONS sessions without streams, on Redis"
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
  --dbfilename none.rdb >"$DIR/redis.log" 2>&1 &
pids+=("$!")
for _ in $(seq 1 100); do redis-cli -p "$redis_port" PING >/dev/null 2>&1 && break; sleep 0.1; done
start_node --redis-url "redis://127.0.0.1:$redis_port/"
hold "$redis_port" --sessions "$SESSIONS" --settle "$SETTLE"
stop_node

for n in $STREAMS; do
  echo "== $n sessions, each with its GET stream, embedded store"
  start_node
  hold "" --sessions "$n" --get-stream
  stop_node
done
