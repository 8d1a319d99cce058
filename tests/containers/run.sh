#!/usr/bin/env bash
# The image, docker-compose.yml and the Helm chart, built and started with
# podman as users start them (tests/containers/run.py says what each part
# checks). One line per check, then `N passed, M failed`.
#
#   bash tests/containers/run.sh [image] [compose] [chart]   # default: all
#
# Needs podman, runc, mmdebstrap, openssl, python3 (tests/run-all.sh installs
# them), podman-compose and the conformance suite (npm ci --prefix tests/js)
# for the compose part, and helm with PyYAML
# (tests/helm/install.sh) for the chart part. MCP_NODE names the release
# binary the image gets (default: target/release/mcp-node, built when
# missing). A missing tool is a failure, never a skip.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LOG_DIR=${LOG_DIR:-$PWD/target/test-logs}
mkdir -p "$LOG_DIR/containers"
export CONTAINERS_CONF=$PWD/tests/containers/containers.conf

fail() {
  echo "FAIL $1"
  echo "0 passed, 1 failed"
  exit 1
}
for tool in podman runc mmdebstrap openssl python3 podman-compose; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is missing (apt-get install $tool)"
done
if [ -z "${MCP_NODE:-}" ]; then
  cargo build --release -p mcp-node --quiet 2>"$LOG_DIR/containers/cargo-build.log" \
    || fail "cargo build --release -p mcp-node (see $LOG_DIR/containers/cargo-build.log)"
  MCP_NODE=$PWD/target/release/mcp-node
fi
# A provider's binary for the image part (crates/mcp-cluster/examples/slow_tools.rs).
if [ -z "${MCP_PROVIDER:-}" ]; then
  cargo build -p mcp-cluster --example slow_tools --quiet 2>"$LOG_DIR/containers/cargo-build.log" \
    || fail "cargo build -p mcp-cluster --example slow_tools (see $LOG_DIR/containers/cargo-build.log)"
  export MCP_PROVIDER=$PWD/target/debug/examples/slow_tools
fi
WORK=$LOG_DIR/containers/images bash tests/containers/images.sh "$MCP_NODE" \
  >"$LOG_DIR/containers/images.log" 2>&1 \
  || { tail -n 30 "$LOG_DIR/containers/images.log"; fail "building the images (see $LOG_DIR/containers/images.log)"; }
# PyYAML for the compose and chart parts comes from the chart tests' venv.
PYTHON=python3
[ -x tests/helm/.venv/bin/python ] && PYTHON=tests/helm/.venv/bin/python
exec "$PYTHON" tests/containers/run.py "$@"
