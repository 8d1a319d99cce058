#!/usr/bin/env bash
# Checks the alerting rules deploy/prometheus/rules/mcp-node.rules.yml, each
# check on a line of its own, then `N passed, M failed`:
#   - `promtool check rules` accepts the file;
#   - `promtool test rules` passes mcp-node.rules.test.yml (every alert fires
#     once with its labels and annotations, and stays silent once);
#   - every alert has `for:`, a severity label (critical or warning), a
#     summary, a description and a runbook_url to its own anchor,
#     proto-docs/operations.md#alert-<name in lower case>;
#   - every alert has a firing and a silent case in the unit tests;
#   - every alert's runbook anchor exists in proto-docs/operations.md;
#   - promtool refuses a rules file with a broken expression, and the unit
#     tests fail on a rule whose threshold moved: a pass means the files were
#     checked.
# promtool must be on PATH (Debian: package prometheus; tests/run-all.sh
# installs it). A missing tool is a failure, never a skip.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG_DIR=${LOG_DIR:-$PWD/target/test-logs}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/prometheus-check.log"
RULES=deploy/prometheus/rules/mcp-node.rules.yml
TESTS=deploy/prometheus/rules/mcp-node.rules.test.yml
PROMTOOL=$(command -v promtool || true)

passed=0
failed=0
ok() {
  echo "ok   $1"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL $1"
  failed=$((failed + 1))
}
# check NAME EXPECTED(pass|fail) COMMAND...: runs COMMAND, its output to the log.
check() {
  local name=$1 expected=$2 status
  shift 2
  echo "== $name: $*" >>"$LOG"
  "$@" >>"$LOG" 2>&1
  status=$?
  if { [ "$expected" = pass ] && [ "$status" = 0 ]; } \
    || { [ "$expected" = fail ] && [ "$status" != 0 ] && [ "$status" != 127 ]; }; then
    ok "$name"
  else
    fail "$name (exit $status; see $LOG)"
  fi
}
: >"$LOG"

if [ -z "$PROMTOOL" ]; then
  fail "promtool not found: install it (apt-get install prometheus)"
  failed=$((failed + 3))
else
  check "$RULES passes promtool check rules" pass "$PROMTOOL" check rules "$RULES"
  # The test file names the rules file relative to itself.
  check "$TESTS passes promtool test rules" pass "$PROMTOOL" test rules "$TESTS"

  BROKEN=$(mktemp -d)
  trap 'rm -rf "$BROKEN"' EXIT
  sed 's/expr: up{job="mcp-node"} == 0$/expr: up{job="mcp-node"} == /' "$RULES" >"$BROKEN/bad-expr.rules.yml"
  if cmp -s "$RULES" "$BROKEN/bad-expr.rules.yml"; then
    fail "a rules file with a broken expression is refused (the McpNodeDown expression was not found to break)"
  else
    check "a rules file with a broken expression is refused" fail \
      "$PROMTOOL" check rules "$BROKEN/bad-expr.rules.yml"
  fi
  # The 5 % error thresholds (operations, HTTP 5xx) at 50 %: their firing cases must fail.
  mkdir -p "$BROKEN/moved"
  sed 's/^          ) > 0\.05$/          ) > 0.5/' "$RULES" >"$BROKEN/moved/mcp-node.rules.yml"
  cp "$TESTS" "$BROKEN/moved/"
  if cmp -s "$RULES" "$BROKEN/moved/mcp-node.rules.yml"; then
    fail "the unit tests fail on a moved threshold (the threshold was not found to move)"
  else
    check "the unit tests fail on a moved threshold" fail \
      "$PROMTOOL" test rules "$BROKEN/moved/mcp-node.rules.test.yml"
  fi
fi

# One line per alert: name, then what its block lacks (empty: nothing).
lacking=$(awk '
  function flush() {
    if (name == "") return
    miss = ""
    if (!has_for) miss = miss " for"
    if (!has_severity) miss = miss " severity(critical|warning)"
    if (!has_summary) miss = miss " summary"
    if (!has_description) miss = miss " description"
    if (!has_runbook) miss = miss " runbook_url(proto-docs/operations.md#alert-" tolower(name) ")"
    if (miss != "") print name ":" miss
    name = ""
  }
  /^ *- (alert|record):/ { flush() }
  /^ *- alert:/ {
    name = $3; has_for = has_severity = has_summary = has_description = has_runbook = 0
  }
  name != "" && /^ +for: [0-9]+[smh]$/ { has_for = 1 }
  name != "" && /^ +severity: (critical|warning)$/ { has_severity = 1 }
  name != "" && /^ +summary: "[^"]+"$/ { has_summary = 1 }
  name != "" && /^ +description: "[^"]+"$/ { has_description = 1 }
  name != "" && /^ +runbook_url: / {
    if ($2 == "\"proto-docs/operations.md#alert-" tolower(name) "\"") has_runbook = 1
  }
  END { flush() }
' "$RULES")
alerts=$(awk '/^ *- alert:/ { print $3 }' "$RULES")
if [ -z "$alerts" ]; then
  fail "no alert found in $RULES"
elif [ -n "$lacking" ]; then
  fail "every alert has for, severity, summary, description and its runbook anchor:"
  echo "$lacking" | sed 's/^/       /'
else
  ok "every alert ($(echo "$alerts" | wc -l)) has for, severity, summary, description and its runbook anchor"
fi

# Per alert name in the unit tests: how many cases expect it firing, how many silent.
untested=$(awk -v alerts="$alerts" '
  BEGIN { n = split(alerts, list, "\n") }
  /^ +alertname:/ { current = $2 }
  /^ +exp_alerts: *\[\]/ { silent[current]++; next }
  /^ +exp_alerts: *$/ { firing[current]++ }
  END {
    for (i = 1; i <= n; i++) {
      a = list[i]
      if (!firing[a] || !silent[a]) printf "%s: %d firing, %d silent\n", a, firing[a], silent[a]
    }
  }
' "$TESTS")
if [ -n "$alerts" ] && [ -z "$untested" ]; then
  ok "every alert has a firing and a silent case in $TESTS"
else
  fail "every alert has a firing and a silent case in $TESTS:"
  echo "$untested" | sed 's/^/       /'
fi

# Every alert's runbook section exists in proto-docs/operations.md.
undocumented=$(for a in $alerts; do
  anchor="alert-$(echo "$a" | tr '[:upper:]' '[:lower:]')"
  grep -q "id=\"$anchor\"" proto-docs/operations.md || echo "$a (#$anchor)"
done)
if [ -n "$alerts" ] && [ -z "$undocumented" ]; then
  ok "every alert has its runbook section in proto-docs/operations.md"
else
  fail "every alert has its runbook section in proto-docs/operations.md:"
  echo "$undocumented" | sed 's/^/       /'
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
