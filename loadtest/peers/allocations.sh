#!/usr/bin/env bash
# Heap allocations per `tools/call echo`, in both eras: a count that does not
# move with the machine's speed, unlike the rates compare.sh measures (on a
# virtual machine whose speed drifts, a cut of a few percent in CPU is lost
# in the noise of a rate; its allocations are not).
#
# Usage: bash loadtest/peers/allocations.sh
#   CONNS     wrk connections (default 16)
#   SHORT     seconds of the short run (default 2)
#   LONG      seconds of the long run (default 5)
#   NODE_BIN  an mcp-node built with `--features system-allocator` to measure
#             instead of building this tree's (a build of another commit)
#
# How: mcp-node is built with the `system-allocator` feature (the system
# allocator instead of mimalloc, which heap profilers cannot see) into
# target/alloc-profile, started under heaptrack (apt-get install heaptrack)
# on core 0 with compare.sh's flags, and called by wrk on core 1 with
# loadtest/peers/wrk/tools_call.lua (every answer checked) over 16 sessions
# (session era) or with no session (2026-07-28). Each era runs twice, SHORT
# and LONG seconds, each on a fresh node: what start-up and opening the
# sessions allocate is the same in both, so the difference of the two runs'
# allocation calls over the difference of their checked answers is what one
# call costs. Prints one line per era:
#   allocations era=session per_call=82.0 (calls 21463, allocations 1761145)
set -euo pipefail
cd "$(dirname "$0")/../.."
CONNS=${CONNS:-16}
SHORT=${SHORT:-2}
LONG=${LONG:-5}
PORT=18592
OUT=target/alloc-profile
PROTOCOL_VERSION=2025-11-25
# shellcheck source=common.sh
source loadtest/peers/common.sh
command -v heaptrack >/dev/null || { echo "heaptrack is required (apt-get install heaptrack)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 1; }
if [[ -n ${NODE_BIN:-} ]]; then
  BIN=$NODE_BIN
else
  cargo build --release --quiet -p mcp-node --features system-allocator --target-dir "$OUT"
  BIN=$OUT/release/mcp-node
fi
mkdir -p "$OUT/heaptrack"

# run ERA SECS -> "checked_answers allocation_calls"
run() {
  local era=$1 secs=$2 data=$OUT/heaptrack/$1-$2 node url=http://127.0.0.1:$PORT/mcp sessions= i
  rm -f "$data".*
  taskset -c 0 heaptrack -o "$data" "$BIN" --bind 127.0.0.1:$PORT "${NODE_FLAGS[@]}" \
    "${QUOTAS_OFF[@]}" >"$data.log" 2>&1 &
  for i in $(seq 1 100); do
    curl -s -o /dev/null --max-time 1 "$url" && break
    sleep 0.2
  done
  # heaptrack starts the node as a process of its own: that is what must be stopped.
  node=$(pgrep -n -f -- "$BIN --bind 127.0.0.1:$PORT") || { echo "the node did not start: see $data.log" >&2; exit 1; }
  if [[ $era == session ]]; then
    sessions=$(open_sessions_at "$url" "$CONNS" "$PROTOCOL_VERSION") || { kill "$node"; exit 1; }
  fi
  SESSIONS=$sessions STATELESS=$([[ $era == 2026 ]] && echo 1 || echo 0) RUN_ID=$RANDOM ECHO_PREFIX="Echo: " \
    WRK_LUA_DIR=loadtest/peers/wrk timeout $((secs + 30)) taskset -c 1 \
    wrk -t1 -c"$CONNS" -d"${secs}s" -s loadtest/peers/wrk/tools_call.lua "$url" >"$data.wrk" 2>&1 || true
  # heaptrack writes its file once the node has exited (after its drain),
  # and then says so.
  kill "$node"
  for i in $(seq 1 300); do
    grep -q "Heaptrack finished" "$data.log" && break
    sleep 0.2
  done
  grep -q "Heaptrack finished" "$data.log" || { echo "heaptrack did not finish: see $data.log" >&2; exit 1; }
  local ok failed calls
  read -r ok failed < <(awk '/^checked ok/ {print $3, $5}' "$data.wrk" | tail -n 1)
  [[ ${failed:-1} == 0 && -n ${ok:-} ]] || { echo "failed answers or no summary: see $data.wrk" >&2; exit 1; }
  calls=$(heaptrack_print -f "$data.zst" --print-peaks 0 --print-allocators 0 --print-leaks 0 \
    --print-temporary 0 2>/dev/null | awk '/calls to allocation functions/ {print $5}')
  echo "$ok $calls"
}

for era in session 2026; do
  read -r ok_short calls_short < <(run "$era" "$SHORT")
  read -r ok_long calls_long < <(run "$era" "$LONG")
  [[ -n ${calls_short:-} && -n ${calls_long:-} ]] || exit 1
  awk -v era="$era" -v a="$ok_short" -v b="$ok_long" -v x="$calls_short" -v y="$calls_long" 'BEGIN {
    if (b <= a) { print "the long run answered no more than the short one" > "/dev/stderr"; exit 1 }
    printf "allocations era=%s per_call=%.1f (calls %d, allocations %d)\n", era, (y - x) / (b - a), b - a, y - x
  }'
done
