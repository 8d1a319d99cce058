#!/usr/bin/env bash
# What a hosted session costs ([[upstreams]]: a child process per session):
# one release node hosts a small stdio server (by default
# tests/relay/hostile.py in its `well` mode: Python, standard library only;
# SERVER="argv as a JSON array" names another),
# `mcp-loadtest hold` opens N sessions (N children) and holds them; the
# script reports the spawn latency the node measured
# (mcp_upstream_spawn_duration_seconds: from starting a child to its
# initialize answer), the node's own extra RSS per session, and the
# servers' and their keepers' RSS and PSS (proportional: shared pages split
# among the processes sharing them) each; then the sessions end (DELETE)
# and the script checks that every server and keeper is gone.
#
# Usage (after `cargo build --release -p mcp-node -p mcp-loadtest`):
#   bash loadtest/relay-cost.sh            # N=1000
#   N=200 bash loadtest/relay-cost.sh
#
# Memory: every child is a process of its own; N of them need N times the
# child's RSS (about 10 MiB for the default Python server; `mcp-node --stdio`
# takes about 40 MiB, so 1,000 of it do not fit in 24 GiB).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NODE=${NODE:-$ROOT/target/release/mcp-node}
LOADTEST=${LOADTEST:-$ROOT/target/release/mcp-loadtest}
N=${N:-1000}
SERVER=${SERVER:-"[\"python3\", \"$ROOT/tests/relay/hostile.py\", \"well\"]"}
for bin in "$NODE" "$LOADTEST"; do
  [ -x "$bin" ] || { echo "relay-cost.sh: $bin missing: cargo build --release -p mcp-node -p mcp-loadtest" >&2; exit 1; }
done
ulimit -n "$(ulimit -Hn)"
DIR=$(mktemp -d)
node_pid=
cleanup() {
  [ -n "$node_pid" ] && { kill -9 "$node_pid" && wait "$node_pid"; } 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

cat >"$DIR/node.toml" <<TOML
[quotas]
initialize_per_address = 0       # every session comes from one address here
[[upstreams]]
name = "small"
command = $SERVER
max_children = $N
spawns_per_sec = 1000                # the cost, not the rate limit, is measured here
TOML
"$NODE" --config "$DIR/node.toml" --bind 127.0.0.1:0 --log warn >"$DIR/node.out" 2>"$DIR/node.err" &
node_pid=$!
url=
for _ in $(seq 1 100); do
  url=$(sed -n 's/^mcp-node listening on //p' "$DIR/node.out" | head -n 1)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$DIR/node.err" >&2; exit 1; }
metrics=${url%/mcp}/metrics

# The children: processes whose parent is the node (each server's keeper).
children() { { ps -o pid= --ppid "$node_pid" || true; } | tr -d ' '; }
# The servers: processes whose parent is a keeper.
servers() {
  local keepers
  keepers=$(children | paste -sd, -)
  [ -n "$keepers" ] || return 0
  { ps -o pid= --ppid "$keepers" || true; } | tr -d ' '
}
# Sum of a /proc/PID/smaps_rollup field (kB) over the processes $2...
sum_kb() {
  local field=$1 total=0 pid value
  shift
  for pid in "$@"; do
    value=$(awk -v f="$field:" '$1 == f {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
    total=$((total + ${value:-0}))
  done
  echo "$total"
}

# Open N sessions, 8 at a time, and hold them 20 s.
"$LOADTEST" hold --url "$url" --sessions "$N" --open-concurrency 8 --hold 20 \
  --server-pid "$node_pid" >"$DIR/hold.out" 2>"$DIR/hold.err" &
hold_pid=$!
# While they are held: count the children and measure them.
for _ in $(seq 1 600); do
  [ "$(children | wc -l)" -ge "$N" ] && break
  kill -0 "$hold_pid" 2>/dev/null || break
  sleep 0.1
done
sleep 2
running=$(children | wc -l)
server_pids=$(servers)
rss_kb=$(sum_kb Rss $server_pids)
pss_kb=$(sum_kb Pss $server_pids)
keeper_rss_kb=$(sum_kb Rss $(children))
keeper_pss_kb=$(sum_kb Pss $(children))
spawn=$(curl -s "$metrics" | awk '
  /^mcp_upstream_spawn_duration_seconds_bucket\{.*upstream="small"/ {
    match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); b[le] = $2; les[++n] = le }
  /^mcp_upstream_spawn_duration_seconds_count\{.*upstream="small"/ { count = $2 }
  END {
    if (count == 0) { print "none"; exit }
    for (q = 1; q <= 2; q++) {
      target = (q == 1 ? 0.5 : 0.99) * count
      for (i = 1; i <= n; i++) if (b[les[i]] >= target) { v[q] = les[i]; break }
    }
    printf "p50<=%ss p99<=%ss count=%d", v[1], v[2], count }')
wait "$hold_pid" || { cat "$DIR/hold.err" >&2; exit 1; }
hold=$(cat "$DIR/hold.out")
per_node=$(sed -n 's/.*per_session_bytes=\([0-9]*\).*/\1/p' <<<"$hold")
sleep 3
left=$(children | wc -l)
for pid in $server_pids; do
  [ -d "/proc/$pid" ] && left=$((left + 1))
done
each() { echo $(($1 / (running > 0 ? running : 1))); }
echo "relay-cost sessions=$N children_running=$running spawn=[$spawn] node_rss_per_session_bytes=${per_node:-na} child_rss_kib=$(each "$rss_kb") child_pss_kib=$(each "$pss_kb") keeper_rss_kib=$(each "$keeper_rss_kb") keeper_pss_kib=$(each "$keeper_pss_kb") processes_left_after_delete=$left"
[ "$running" -ge "$N" ] && [ "$left" = 0 ]
