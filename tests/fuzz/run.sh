#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz (cargo-fuzz + libFuzzer, on stable
# Rust) and runs each for a bounded time, starting from its checked-in seed
# corpus. Prints one line per target and a closing "N passed, M failed";
# exits non-zero when any target crashed (panic, broken invariant, timeout,
# memory limit) or did not build. With --build-only it installs cargo-fuzz if
# needed, builds the targets and exits (tests/run-all.sh builds them early,
# beside the Rust tests, and runs them later).
#
# Environment:
#   FUZZ_SECONDS   seconds per target (default 35)
#   FUZZ_JOBS      targets run at once (default 2: one per core of CI)
#   FUZZ_TARGETS   targets to run (default: every file in fuzz_targets/)
#   LOG_DIR        where the logs go (default target/test-logs at the root)
#
# Stable Rust: `--sanitizer none` keeps cargo-fuzz from passing the
# nightly-only -Zsanitizer flag; the coverage instrumentation libFuzzer
# needs (-Cpasses=sancov-module, -Cllvm-args=-sanitizer-coverage-*) is
# stable. Our code forbids `unsafe`, so AddressSanitizer adds little.
set -euo pipefail
cd "$(dirname "$0")"
BUILD_ONLY=
[ "${1:-}" = --build-only ] && BUILD_ONLY=1
FUZZ_DIR=$PWD
ROOT=$(cd ../.. && pwd)
LOG_DIR=${LOG_DIR:-$ROOT/target/test-logs}
mkdir -p "$LOG_DIR"
SECONDS_PER_TARGET=${FUZZ_SECONDS:-35}
JOBS=${FUZZ_JOBS:-2}
CARGO_FUZZ_VERSION=0.13.2
FLAGS=(--sanitizer none --debug-assertions)

if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked >"$LOG_DIR/fuzz-install.log" 2>&1 || {
    cat "$LOG_DIR/fuzz-install.log" >&2
    exit 1
  }
fi

if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a TARGETS <<<"$FUZZ_TARGETS"
else
  TARGETS=()
  for f in fuzz_targets/*.rs; do
    TARGETS+=("$(basename "$f" .rs)")
  done
fi

echo "== building ${#TARGETS[@]} fuzz targets (cargo fuzz build ${FLAGS[*]})"
build_start=$SECONDS
if ! cargo fuzz build "${FLAGS[@]}" >"$LOG_DIR/fuzz-build.log" 2>&1; then
  tail -n 40 "$LOG_DIR/fuzz-build.log" >&2
  echo "fuzz targets did not build"
  echo "0 passed, ${#TARGETS[@]} failed"
  exit 1
fi
echo "built in $((SECONDS - build_start)) s"
[ -n "$BUILD_ONLY" ] && exit 0
BIN_DIR=$FUZZ_DIR/target/$(rustc -vV | sed -n 's/^host: //p')/release

# Runs one target; its libFuzzer output goes to $LOG_DIR/fuzz-<target>.log.
# New inputs go to a scratch corpus under target/, never into corpus/.
run_target() {
  local t=$1 work=$FUZZ_DIR/target/corpus/$1 dict=()
  mkdir -p "$work" "$FUZZ_DIR/artifacts/$t"
  [ -f "dict/$t.dict" ] && dict=(-dict="dict/$t.dict")
  "$BIN_DIR/$t" "$work" "corpus/$t" "${dict[@]}" \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$FUZZ_DIR/artifacts/$t/" -print_final_stats=1 \
    >"$LOG_DIR/fuzz-$t.log" 2>&1
}

# One summary line from a finished target's log and exit status.
summary() {
  local t=$1 status=$2 log=$LOG_DIR/fuzz-$1.log runs rate cov
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 || true)
  if [ "$status" = 0 ]; then
    echo "$t: ok, ${runs:-?} runs in ${SECONDS_PER_TARGET} s (${rate:-?}/s), ${cov:-no coverage line}"
  else
    local artifact
    artifact=$(sed -n 's/.*Test unit written to //p' "$log" | tail -n 1)
    echo "$t: FAILED (exit $status), input ${artifact:-none written}; log $log"
    grep -m 1 -A 2 'panicked at' "$log" | sed 's/^/    /' || true
  fi
}

echo "== running each target for ${SECONDS_PER_TARGET} s, ${JOBS} at a time"
passed=0
failed=0
declare -A pids=()
for ((i = 0; i < ${#TARGETS[@]}; i += JOBS)); do
  batch=("${TARGETS[@]:i:JOBS}")
  for t in "${batch[@]}"; do
    if [ ! -x "$BIN_DIR/$t" ]; then
      echo "$t: FAILED (no binary at $BIN_DIR/$t)"
      failed=$((failed + 1))
      continue
    fi
    run_target "$t" &
    pids[$t]=$!
  done
  for t in "${batch[@]}"; do
    [ -n "${pids[$t]:-}" ] || continue
    status=0
    wait "${pids[$t]}" || status=$?
    summary "$t" "$status"
    if [ "$status" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
