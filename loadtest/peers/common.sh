# Sourced by compare.sh, paired.sh, allocations.sh and redis-life.sh: how they start
# mcp-node, and opening the sessions their wrk runs of tools_call.lua rotate
# over.

# The flags every script here starts mcp-node with, after --bind: one HTTP
# worker (the peers are given one core too), errors only, in-flight room for
# 64 connections' worth of requests.
NODE_FLAGS=(--workers 1 --log error --max-in-flight 1024)
# The quotas off: the peers have none, and one load generator on one address
# is not the many clients they are for. (A build that predates these flags
# is started with NODE_FLAGS alone.)
QUOTAS_OFF=(--quota-initialize-per-address 0 --quota-requests-per-principal 0
  --quota-sessions-per-principal 0 --quota-streams-per-principal 0
  --quota-requests-per-address 0 --quota-streams-per-address 0)

# open_sessions_at URL N VERSION [TOKENS] -> N comma-separated session ids, each
# initialized (initialize, then notifications/initialized, both at VERSION).
# The id comes from the Mcp-Session-Id header, whether the body is JSON or
# SSE. TOKENS: comma-separated bearer tokens, used in turn. Returns 1 (and
# says so on stderr) when an initialize gives no session id.
open_sessions_at() {
  local url=$1 n=$2 version=$3 tokens=() ids=() sid i
  IFS=, read -r -a tokens <<<"${4:-}"
  for i in $(seq 0 $((n - 1))); do
    local head=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
    [[ ${#tokens[@]} -gt 0 ]] && head+=(-H "Authorization: Bearer ${tokens[$((i % ${#tokens[@]}))]}")
    sid=$(curl -s --max-time 10 -D - -o /dev/null "${head[@]}" \
      -d "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"$version\",\"capabilities\":{},\"clientInfo\":{\"name\":\"wrk\",\"version\":\"0\"}}}" \
      "$url" | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:" {print $2}')
    [[ -n $sid ]] || { echo "$url gave no Mcp-Session-Id on initialize" >&2; return 1; }
    curl -s --max-time 10 -o /dev/null "${head[@]}" -H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $version" \
      -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$url"
    ids+=("$sid")
  done
  (IFS=,; echo "${ids[*]}")
}

# wait_up PORT SCRIPT: returns once mcp-node on 127.0.0.1:PORT answers
# /healthz; after 10 s says so (as SCRIPT) and exits.
wait_up() {
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$1/healthz" && return 0
    sleep 0.1
  done
  echo "$2: the server on port $1 did not start" >&2
  exit 1
}

# cpu_ticks PID -> the process's user + system time so far, in clock ticks
# (fields 14 and 15 of /proc/<pid>/stat, counted after the command name,
# which may hold spaces).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
