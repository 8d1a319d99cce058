#!/usr/bin/env bash
# The crates as others depend on them:
#   1. mcp-cluster compiles with no feature (a provider's binary on it,
#      tests/bare-provider), with each of redis, otlp, tls and auth alone, and with full
#      (each built alone: nothing else in the build turns a feature on);
#   2. a provider's binary without features (tests/bare-provider, built alone) serves
#      an MCP session, and exits with 64 and a line naming the feature when it is
#      configured for Redis, TLS, authorization or trace export (flags, variables,
#      configuration file);
#   3. cargo publish --dry-run --workspace: every publishable crate packages and
#      resolves against the crates.io index (--no-verify: see below).
# Prints "N passed, M failed" last; exits non-zero when a check failed.
# With --build-only it does the builds of 1 and exits (tests/run-all.sh does them
# early, beside the Rust tests, and runs the checks later on the built tree).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD_ONLY=
[ "${1:-}" = --build-only ] && BUILD_ONLY=1
LOG_DIR=${LOG_DIR:-$PWD/target/test-logs}
DIR="$LOG_DIR/features"
rm -rf "$DIR"
mkdir -p "$DIR"
passed=0
failed=0

pass() {
  echo "ok: $1"
  passed=$((passed + 1))
}

fail() {
  echo "FAILED: $1" >&2
  [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 40 "$2" >&2
  failed=$((failed + 1))
}

# 1. A provider's binary on mcp-cluster without features, built alone (a workspace
# build unifies every member's features: mcp-node's `full` would reach it).
BARE=target/debug/mcp-bare-provider
if cargo build --quiet -p mcp-bare-provider >"$DIR/build-bare.log" 2>&1; then
  pass "mcp-cluster compiles without features: the provider on it builds"
else
  fail "the provider without features does not build" "$DIR/build-bare.log"
  echo "$passed passed, $failed failed"
  exit 1
fi

# 1b. Each feature alone and all of them: the library alone (`cargo build`, not
# `check`: the dependencies' artifacts of the build above and of the workspace build
# are reused, where check would compile every dependency once more as metadata).
for features in redis otlp tls auth full; do
  if cargo build --quiet -p mcp-cluster --lib --no-default-features --features "$features" \
    >"$DIR/build-$features.log" 2>&1; then
    pass "mcp-cluster compiles with the feature(s): $features"
  else
    fail "mcp-cluster with the feature(s): $features" "$DIR/build-$features.log"
  fi
done
if [ -n "$BUILD_ONLY" ]; then
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
  exit
fi

# 2. The provider without features, started: without configuration it serves a
# session.
"$BARE" --bind 127.0.0.1:0 --log warn >"$DIR/bare.out" 2>"$DIR/bare.err" &
pid=$!
url=
for _ in $(seq 1 100); do
  url=$(sed -n 's/^bare-provider listening on //p' "$DIR/bare.out" | head -n 1)
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  fail "the provider without features did not start" "$DIR/bare.err"
else
  answer=$(curl -sS --max-time 10 "$url" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"check","version":"1"}}}' 2>&1)
  if grep -q '"name":"bare-provider"' <<<"$answer"; then
    pass "the provider without features answers initialize"
  else
    echo "$answer" >"$DIR/initialize.log"
    fail "the provider without features did not answer initialize" "$DIR/initialize.log"
  fi
fi
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null

# Configured for what it lacks: exit 64, one line naming the feature.
# refuses NAME FEATURE [VAR=VALUE...] -- [FLAG...]
refuses() {
  local name=$1 feature=$2 envs=() status
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    envs+=("$1")
    shift
  done
  shift
  env "${envs[@]}" "$BARE" --bind 127.0.0.1:0 "$@" >"$DIR/refuse-$name.out" 2>"$DIR/refuse-$name.err" </dev/null
  status=$?
  if [ "$status" = 64 ] && grep -q "without the \`$feature\` feature" "$DIR/refuse-$name.err"; then
    pass "without $feature, $name is refused: $(head -n 1 "$DIR/refuse-$name.err")"
  else
    echo "exit status $status" >>"$DIR/refuse-$name.err"
    fail "without $feature, $name was not refused with 64 naming the feature" "$DIR/refuse-$name.err"
  fi
}

cat >"$DIR/redis.toml" <<'TOML'
[redis]
url = "redis://127.0.0.1:6379"
TOML
refuses redis-flag redis -- --redis-url redis://127.0.0.1:6379/
refuses redis-variable redis MCP_REDIS__KEY_PREFIX=blue --
refuses redis-file redis -- --config "$DIR/redis.toml"
refuses tls-variables tls MCP_TLS__CERT_FILE=/etc/mcp/tls.crt MCP_TLS__KEY_FILE=/etc/mcp/tls.key --
refuses auth-variables auth MCP_AUTH__RESOURCE=https://mcp.example.com/mcp \
  MCP_AUTH__ISSUERS=https://idp.example.com --
refuses otlp-flag otlp -- --otlp-endpoint http://127.0.0.1:4318
refuses otlp-variable otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 --

# 3. The crates as crates.io would take them. --no-verify: packaging, the manifests
# as published and the resolution of every crate against the index (and against the
# others, packaged in order) are checked; building each packaged crate again from
# scratch (the verify step) would compile the whole dependency tree once more,
# many minutes on a CI machine, for what the workspace build already compiles.
if cargo publish --dry-run --workspace --no-verify --allow-dirty >"$DIR/publish.log" 2>&1; then
  pass "cargo publish --dry-run --workspace: $(grep -c '^ *Packaged' "$DIR/publish.log") crates"
else
  fail "cargo publish --dry-run --workspace" "$DIR/publish.log"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
