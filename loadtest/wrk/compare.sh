#!/usr/bin/env bash
# tools/call throughput and latency, side by side under identical load,
# interleaved: mcp-node on the embedded store, mcp-node on Redis, and a bare
# actix-web JSON echo (the ceiling), all on loopback.
# Each server runs one worker pinned to core 0; wrk (one thread) and
# redis-server run on core 1. Prints one line per run and the ratios.
# Rates are checked successes per second: the wrk script
# (loadtest/peers/wrk/tools_call.lua, rules in mcp_check.lua) gives every
# request its own id (RUN_ID keeps ids unique across runs, so a session
# never sees one twice) and counts an answer only when it carries that id
# and the exact echo text; any failed answer or socket error is printed
# with the run and makes the script exit 1 at the end.
#   CONNS=64 DURATION=10s ROUNDS=3 bash loadtest/wrk/compare.sh
#   TARGETS="embedded echo" ... to leave Redis out.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
SESSIONS_N=${SESSIONS_N:-64}
TARGETS=${TARGETS:-embedded redis echo}
EMBEDDED_ADDR=127.0.0.1:18181
ECHO_ADDR=127.0.0.1:18182
REDIS_NODE_ADDR=127.0.0.1:18183
REDIS_PORT=18184
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 1; }
cargo build --release --quiet -p mcp-node
cargo build --release --quiet -p mcp-cluster --example json_echo

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
node_flags=(--workers 1 --log error --max-in-flight 1024)
for target in $TARGETS; do
  case $target in
    embedded)
      taskset -c 0 ./target/release/mcp-node --bind $EMBEDDED_ADDR "${node_flags[@]}" >/dev/null &
      pids+=($!) ;;
    redis)
      command -v redis-server >/dev/null || { echo "redis-server is required" >&2; exit 1; }
      taskset -c 1 redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
      pids+=($!)
      sleep 0.5
      taskset -c 0 ./target/release/mcp-node --bind $REDIS_NODE_ADDR --redis-url "redis://127.0.0.1:$REDIS_PORT/" "${node_flags[@]}" >/dev/null &
      pids+=($!) ;;
    echo)
      taskset -c 0 ./target/release/examples/json_echo $ECHO_ADDR 1 &
      pids+=($!) ;;
    *) echo "unknown target $target" >&2; exit 1 ;;
  esac
done
sleep 1

sessions_for() { # addr -> comma-separated initialized session ids
  local ids=()
  for _ in $(seq 1 "$SESSIONS_N"); do
    local sid
    sid=$(curl -s -D - -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
      -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"0"}}}' \
      "http://$1/mcp" | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:" {print $2}')
    curl -s -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H "Mcp-Session-Id: $sid" \
      -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "http://$1/mcp"
    ids+=("$sid")
  done
  (IFS=,; echo "${ids[*]}")
}

declare -A url sessions total prefix
for target in $TARGETS; do
  case $target in
    embedded) url[$target]="http://$EMBEDDED_ADDR/mcp"; sessions[$target]=$(sessions_for $EMBEDDED_ADDR); prefix[$target]="Echo: " ;;
    redis) url[$target]="http://$REDIS_NODE_ADDR/mcp"; sessions[$target]=$(sessions_for $REDIS_NODE_ADDR); prefix[$target]="Echo: " ;;
    echo) url[$target]="http://$ECHO_ADDR/mcp"; sessions[$target]=""; prefix[$target]="" ;;
  esac
  total[$target]=0
done

run_id=0 failures=()
for round in $(seq 1 "$ROUNDS"); do
  for target in $TARGETS; do
    run_id=$((run_id + 1))
    out=$(SESSIONS=${sessions[$target]} RUN_ID=$run_id ECHO_PREFIX=${prefix[$target]} WRK_LUA_DIR=loadtest/peers/wrk \
      taskset -c 1 wrk -t1 -c"$CONNS" -d"$DURATION" --latency -s loadtest/peers/wrk/tools_call.lua "${url[$target]}") || true
    # checked ok N failed M socket_errors S responses R secs T ok_per_sec X
    rps=$(awk '$1 == "checked" && $2 == "ok" { print $13 }' <<<"$out")
    failed=$(awk '$1 == "checked" && $2 == "ok" { print $5 + $7 }' <<<"$out")
    p50=$(awk '$1=="50%" {print $2}' <<<"$out")
    p99=$(awk '$1=="99%" {print $2}' <<<"$out")
    if [[ -z $rps ]]; then
      rps=0 failed="no checked summary (wrk or script error)"
      echo "$out" >&2
    fi
    printf 'round %d %-9s ok/s=%-10s p50=%-8s p99=%-8s failed=%s\n' "$round" "$target" "$rps" "$p50" "$p99" "$failed"
    if [[ $failed != 0 ]]; then
      failures+=("round $round $target: $failed failed $(awk '$1 == "checked" && $2 != "ok" && $2 != "thread"' <<<"$out" | tr '\n' ' ')")
    fi
    total[$target]=$(awk -v a="${total[$target]}" -v b="$rps" 'BEGIN {print a + b}')
  done
done
for target in $TARGETS; do
  awk -v t="$target" -v s="${total[$target]}" -v r="$ROUNDS" 'BEGIN {printf "mean %-9s %.0f req/s\n", t, s / r}'
done
if [[ " $TARGETS " == *" embedded "* && " $TARGETS " == *" echo "* ]]; then
  awk -v n="${total[embedded]}" -v e="${total[echo]}" 'BEGIN {printf "embedded / echo = %.2f\n", n / e}'
fi
if [[ " $TARGETS " == *" embedded "* && " $TARGETS " == *" redis "* ]]; then
  awk -v n="${total[embedded]}" -v r="${total[redis]}" 'BEGIN {printf "redis / embedded = %.2f\n", r / n}'
fi
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "compare.sh: FAILED: answers that failed the check; these rates are not results:" >&2
  printf '  %s\n' "${failures[@]}" >&2
  exit 1
fi
