#!/usr/bin/env bash
# Validates the deployment files, each check on a line of its own, then
# `N passed, M failed`:
#   - docker-compose.yml, its override docker-compose.tls.yml and the
#     container test's override tests/containers/compose.test.yml against
#     the Compose Specification's JSON schema (check-jsonschema
#     --builtin-schema vendor.compose-spec);
#   - that deploy/nginx/nginx-tls.conf is deploy/nginx/nginx.conf but for
#     its lines marked (TLS), its proxy_ssl_* lines and https://;
#   - deploy/prometheus/prometheus.yml with `promtool check config`;
#   - that each validator does refuse a broken copy of its file, so that a
#     pass means the file was checked.
# check-jsonschema comes from PyPI, pinned with every dependency in
# tests/compose/requirements.txt, into the virtualenv tests/compose/.venv
# (reinstalled when requirements.txt changes). promtool must be on PATH
# (Debian: package prometheus; tests/run-all.sh installs it). Exits non-zero
# when a check fails or a tool is missing: a missing tool is a failure, never
# a skip.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG_DIR=${LOG_DIR:-$PWD/target/test-logs}
mkdir -p "$LOG_DIR"
VENV=tests/compose/.venv
REQUIREMENTS=tests/compose/requirements.txt

if ! cmp -s "$REQUIREMENTS" "$VENV/requirements.installed" \
  || ! "$VENV/bin/check-jsonschema" --version >/dev/null 2>&1; then
  rm -rf "$VENV"
  { python3 -m venv "$VENV" \
    && "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input --no-deps \
      --only-binary=:all: -r "$REQUIREMENTS"; } >"$LOG_DIR/compose-pip-install.log" 2>&1 || {
    cat "$LOG_DIR/compose-pip-install.log" >&2
    echo "installing $REQUIREMENTS failed" >&2
    echo "0 passed, 1 failed"
    exit 1
  }
  cp "$REQUIREMENTS" "$VENV/requirements.installed"
fi
"$VENV/bin/python" -m pip check --disable-pip-version-check >"$LOG_DIR/compose-pip-check.log" 2>&1 || {
  cat "$LOG_DIR/compose-pip-check.log" >&2
  echo "$REQUIREMENTS does not pin every dependency" >&2
  echo "0 passed, 1 failed"
  exit 1
}
PROMTOOL=$(command -v promtool || true)

passed=0
failed=0
# check NAME EXPECTED(pass|fail) COMMAND...: runs COMMAND, its output to the log.
check() {
  local name=$1 expected=$2 log="$LOG_DIR/compose-check.log" status
  shift 2
  echo "== $name: $*" >>"$log"
  "$@" >>"$log" 2>&1
  status=$?
  if { [ "$expected" = pass ] && [ "$status" = 0 ]; } \
    || { [ "$expected" = fail ] && [ "$status" != 0 ] && [ "$status" != 127 ]; }; then
    echo "ok   $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name (exit $status; see $log)"
    failed=$((failed + 1))
  fi
}
: >"$LOG_DIR/compose-check.log"

BROKEN=$(mktemp -d)
trap 'rm -rf "$BROKEN"' EXIT
# A key the Compose Specification does not have, and a duration that is none.
{ cat docker-compose.yml; printf '\nnot_a_compose_key: true\n'; } >"$BROKEN/docker-compose.yml"
sed 's/^\(  scrape_interval:\).*/\1 five seconds/' deploy/prometheus/prometheus.yml >"$BROKEN/prometheus.yml"

check "docker-compose.yml follows the Compose Specification" pass \
  "$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml
check "a compose file with an unknown key is refused" fail \
  "$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec "$BROKEN/docker-compose.yml"
for file in docker-compose.tls.yml tests/containers/compose.test.yml; do
  check "$file follows the Compose Specification" pass \
    "$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec "$file"
done
# Each file without its header comment (up to the first empty line).
sed '1,/^$/d' deploy/nginx/nginx.conf >"$BROKEN/nginx.conf"
sed -e '1,/^$/d' -e '/proxy_ssl_\|(TLS)/d' -e 's#proxy_pass https://#proxy_pass http://#' \
  deploy/nginx/nginx-tls.conf >"$BROKEN/nginx-tls-as-plain.conf"
check "deploy/nginx/nginx-tls.conf is nginx.conf with https to the nodes" pass \
  diff -u "$BROKEN/nginx.conf" "$BROKEN/nginx-tls-as-plain.conf"
if [ -z "$PROMTOOL" ]; then
  echo "FAIL promtool not found: install it (apt-get install prometheus)"
  failed=$((failed + 2))
else
  # The rules file at the path the compose file mounts it on, here.
  sed "s#/etc/prometheus/rules/#$PWD/deploy/prometheus/rules/#" deploy/prometheus/prometheus.yml \
    >"$BROKEN/local-prometheus.yml"
  check "deploy/prometheus/prometheus.yml (with its rules) is a valid Prometheus configuration" pass \
    "$PROMTOOL" check config "$BROKEN/local-prometheus.yml"
  check "a Prometheus configuration with a bad duration is refused" fail \
    "$PROMTOOL" check config "$BROKEN/prometheus.yml"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
