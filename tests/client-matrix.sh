#!/usr/bin/env bash
# The client matrix against one target: each MCP client (the official SDKs and
# Inspector, and the agent frameworks), in each
# protocol era and negotiation mode it offers, runs its checks against URL, one
# process each, and gets one summary line:
#   matrix <client> x <target>: PASS|FAIL (era <era>, <its own count>, <seconds> s)
# then `matrix <target>: N passed, M failed` counts the clients. Exits 1 if any failed.
#
#   bash tests/client-matrix.sh URL TARGET-NAME
#
# Each client prints the era it negotiated, read off the HTTP exchanges it made
# (`era: session (...)` or `era: 2026-07-28 (...)`), and runs that era's checks;
# a client that settles on another era than the one listed for it below fails
# (e.g. a probing client that falls back to initialize against this server).
#
# Needs what tests/run-all.sh installs: tests/js/node_modules (npm ci --prefix
# tests/js) and tests/py/.venv (tests/py/requirements.txt), and the agent frameworks'
# tests/py/frameworks/<name>/.venv (each from its requirements.txt). A missing one is a
# failure. Each client's full output goes to $LOG_DIR/matrix-<client>-<target>.log
# and is printed when the client fails. The clients and their checks:
# tests/js/README.md ("Client matrix") and README.md ("Tested clients").
set -uo pipefail
cd "$(dirname "$0")/.."
url=${1:?usage: client-matrix.sh URL TARGET-NAME}
target=${2:?usage: client-matrix.sh URL TARGET-NAME}
LOG_DIR=${LOG_DIR:-$PWD/target/test-logs}
mkdir -p "$LOG_DIR"
NODE=tests/js/node_modules/.bin/node
PYTHON=tests/py/.venv/bin/python
# The agent frameworks, each in its own virtualenv (they pin other mcp releases).
PY_PYDANTIC_AI=tests/py/frameworks/pydantic-ai/.venv/bin/python
PY_OPENAI_AGENTS=tests/py/frameworks/openai-agents/.venv/bin/python
PY_LANGCHAIN=tests/py/frameworks/langchain-mcp-adapters/.venv/bin/python
# A client that hangs is a failure, not a stuck CI run; a healthy run takes seconds.
RUN_TIMEOUT_SECS=${MATRIX_RUN_TIMEOUT_SECS:-120}

for tool in "$NODE" "$PYTHON" "$PY_PYDANTIC_AI" "$PY_OPENAI_AGENTS" "$PY_LANGCHAIN"; do
  if [ ! -x "$tool" ]; then
    echo "matrix: $tool missing (tests/run-all.sh installs it)" >&2
    echo "matrix $target: 0 passed, 1 failed"
    exit 1
  fi
done

# client name, the era it must negotiate, then its command line (URL inserted
# after the script).
CLIENTS=(
  "ts-sdk-v1|session|$NODE tests/js/client-matrix-v1.mjs"
  "ts-sdk-v2|session|$NODE tests/js/client-matrix-v2.mjs"
  "ts-sdk-v2-auto|2026-07-28|$NODE tests/js/client-matrix-v2.mjs --negotiation auto"
  "ts-sdk-v2-2026|2026-07-28|$NODE tests/js/client-matrix-v2.mjs --negotiation 2026-07-28"
  "python-sdk-legacy|session|$PYTHON tests/py/client_matrix.py --mode legacy"
  "python-sdk-auto|2026-07-28|$PYTHON tests/py/client_matrix.py"
  "python-sdk-2026|2026-07-28|$PYTHON tests/py/client_matrix.py --mode 2026-07-28"
  "inspector-cli|session|$NODE tests/js/client-matrix-inspector.mjs"
  "inspector-cli-auto|2026-07-28|$NODE tests/js/client-matrix-inspector.mjs --protocol-era auto"
  "inspector-cli-2026|2026-07-28|$NODE tests/js/client-matrix-inspector.mjs --protocol-era modern"
  "ai-sdk|2026-07-28|$NODE tests/js/client-matrix-ai-sdk.mjs"
  "ai-sdk-legacy|session|$NODE tests/js/client-matrix-ai-sdk.mjs --discovery off"
  "pydantic-ai|2026-07-28|$PY_PYDANTIC_AI tests/py/frameworks/pydantic_ai_matrix.py"
  "pydantic-ai-legacy|session|$PY_PYDANTIC_AI tests/py/frameworks/pydantic_ai_matrix.py --mode legacy"
  "pydantic-ai-2026|2026-07-28|$PY_PYDANTIC_AI tests/py/frameworks/pydantic_ai_matrix.py --mode 2026-07-28"
  "openai-agents|2026-07-28|$PY_OPENAI_AGENTS tests/py/frameworks/openai_agents_matrix.py"
  "langchain-mcp-adapters|session|$PY_LANGCHAIN tests/py/frameworks/langchain_mcp_matrix.py"
)

passed=0
failed=0
for entry in "${CLIENTS[@]}"; do
  name=${entry%%|*}
  rest=${entry#*|}
  want_era=${rest%%|*}
  read -r -a cmd <<<"${rest#*|}"
  # The scripts take the URL first, then their flags.
  args=("${cmd[@]:0:2}" "$url" "${cmd[@]:2}")
  log="$LOG_DIR/matrix-$name-$target.log"
  start=$(date +%s%N)
  timeout -k 5 "$RUN_TIMEOUT_SECS" "${args[@]}" >"$log" 2>&1
  status=$?
  secs=$(awk -v ns=$(($(date +%s%N) - start)) 'BEGIN { printf "%.1f", ns / 1e9 }')
  counts=$(sed -n 's/^[a-z0-9-]*: \([0-9]* passed, [0-9]* failed\)$/\1/p' "$log" | tail -n 1)
  era=$(sed -n 's/^era: \([^ ]*\).*$/\1/p' "$log" | tail -n 1)
  [ "$status" = 124 ] && counts="timed out after $RUN_TIMEOUT_SECS s"
  if [ "$status" = 0 ] && [ -n "$counts" ] && [ "${counts#* passed, }" = "0 failed" ] && [ "$era" = "$want_era" ]; then
    passed=$((passed + 1))
    echo "matrix $name x $target: PASS (era $era, ${counts}, ${secs} s)"
  else
    failed=$((failed + 1))
    why=${counts:-exit $status}
    [ "$era" = "$want_era" ] || why="era ${era:-not reported}, expected $want_era; $why"
    echo "matrix $name x $target: FAIL ($why, ${secs} s); its output ($log):"
    sed 's/^/    /' "$log"
  fi
done
echo "matrix $target: $passed passed, $failed failed"
[ "$failed" = 0 ]
