"""docker-compose.yml started as users start it: podman-compose (Debian's
1.0.3) from the images images.sh tagged as the file names them, with
tests/containers/compose.test.yml in place of Jaeger (an OTLP/HTTP counter)
and free ports on 127.0.0.1 given through the file's port variables.

- the cluster: `up -d --no-build`; every healthcheck of the file passes
  (run by `podman healthcheck run`: nothing runs them by itself without
  systemd) and nginx answers;
- the official conformance suite through its nginx, both requirement sets;
  the nodes' traces reach the OTLP endpoint;
- Prometheus scrapes every node (three targets up, `up{job="mcp-node"}`
  three times 1) and loaded the alert rules;
- `down -v` removes the containers and the volume; podman-compose 1.0.3
  leaves the project's network (containers/podman-compose#490), which
  `podman network rm` removes as the README says; then nothing of the
  project remains;
- node HTTPS (docker-compose.tls.yml): a session through nginx to nodes
  that serve TLS, then a new certificate pair put in MCP_TLS_DIR is what
  every node presents to new connections within a few reload intervals,
  with no restart; then the same cleanup.
"""

import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse

from common import (
    LOG_DIR,
    ROOT,
    Failed,
    Pki,
    Session,
    free_port,
    log_path,
    podman,
    request,
    run as run_command,
    scratch,
    wait_until,
)

COMPOSE = "podman-compose"
SERVICES = ("redis", "jaeger", "node1", "node2", "node3", "lb", "prometheus")
# Services with a healthcheck in docker-compose.yml (jaeger has none).
HEALTHCHECKED = ("redis", "node1", "node2", "node3", "lb", "prometheus")
NODES = ("node1", "node2", "node3")
PORT_VARIABLES = {
    "lb": "MCP_LB_PORT",
    "node1": "MCP_NODE1_PORT",
    "node2": "MCP_NODE2_PORT",
    "node3": "MCP_NODE3_PORT",
    "prometheus": "MCP_PROMETHEUS_PORT",
    "jaeger_ui": "MCP_JAEGER_UI_PORT",
    "otlp": "MCP_OTLP_PORT",
}
# The reload interval of the nodes' certificate in the TLS project.
TLS_RELOAD_INTERVAL_SECS = 1


class Project:
    """One podman-compose project of docker-compose.yml and overrides, on
    free loopback ports, named mcpt-compose-<suffix>."""

    def __init__(self, suffix, overrides, extra_env=None):
        self.name = f"mcpt-compose-{suffix}-{os.getpid()}"
        self.files = ["docker-compose.yml", *overrides]
        self.ports = {key: free_port() for key in PORT_VARIABLES}
        self.env = dict(os.environ)
        self.env.update({var: str(self.ports[key]) for key, var in PORT_VARIABLES.items()})
        self.env.update(extra_env or {})
        # `podman logs -f` of every service, into LOG_DIR: kept after
        # `down` removed the containers, drain lines included.
        self.log_followers = []

    def compose(self, *args, timeout=300, check=True):
        command = [COMPOSE, "-p", self.name]
        for file in self.files:
            command += ["-f", file]
        return run_command([*command, *args], env=self.env, cwd=ROOT, timeout=timeout, check=check)

    def url(self, key, path="", scheme="http"):
        return f"{scheme}://127.0.0.1:{self.ports[key]}{path}"

    def up(self):
        # The images exist (images.sh): never build, never pull.
        proc = self.compose("up", "-d", "--no-build")
        # podman-compose 1.0.3 exits 0 even when a `podman run` failed:
        # every service must have its container, running.
        for service in SERVICES:
            state = podman("inspect", "--format", "{{.State.Status}}", self.container(service)).stdout.strip()
            if state != "running":
                raise Failed(f"{service} is {state} after up (see {log_path('commands.log')}):"
                             f" {proc.stdout[-400:]}")
        for service in SERVICES:
            out = open(log_path(f"{self.name}-{service}.log"), "w")
            self.log_followers.append(subprocess.Popen(
                ["podman", "logs", "-f", "-t", self.container(service)],
                stdout=out, stderr=subprocess.STDOUT))
            out.close()

    def container(self, service):
        """The container of service, found by the labels compose puts on it
        (podman-compose 1.0.3 names it project_service_1, Docker Compose
        project-service-1)."""
        names = podman("ps", "-a", "--filter", f"label=com.docker.compose.project={self.name}",
                       "--filter", f"label=com.docker.compose.service={service}",
                       "--format", "{{.Names}}").stdout.split()
        if len(names) != 1:
            raise Failed(f"{len(names)} containers of service {service}: {names}")
        return names[0]

    def wait_healthy(self):
        """Runs every service's compose healthcheck until it passes."""
        for service in HEALTHCHECKED:
            container = self.container(service)
            wait_until(f"{service}'s healthcheck",
                       lambda: podman("healthcheck", "run", container, check=False, timeout=30).returncode == 0,
                       timeout=120, interval=1)

    def leftovers(self):
        """Every container, pod, network and volume of this project still
        there, by the compose labels and by name."""
        found = {}
        label = f"label=io.podman.compose.project={self.name}"
        name = f"name={self.name}"
        for kind, command in (
            ("container", ["ps", "-a", "--format", "{{.Names}}"]),
            ("pod", ["pod", "ls", "--format", "{{.Name}}"]),
            ("network", ["network", "ls", "--format", "{{.Name}}"]),
            ("volume", ["volume", "ls", "--format", "{{.Name}}"]),
        ):
            names = set(podman(*command, "--filter", label).stdout.split())
            # By name: this project's, not one whose name starts the same.
            names.update(n for n in podman(*command, "--filter", name).stdout.split()
                         if re.match(rf"{re.escape(self.name)}([_-]|$)", n))
            if names:
                found[kind] = sorted(names)
        return found

    def down(self):
        """`down -v`; then what it left (see leftovers)."""
        self.compose("down", "-v")
        return self.leftovers()

    def clean(self):
        """After a failure too: `down -v`, then removes by name what is left
        of this project (only its own objects)."""
        if self.leftovers():
            self.compose("down", "-v", check=False)
        left = self.leftovers()
        for container in left.get("container", []):
            podman("rm", "-f", "-t", "0", container, check=False)
        for pod in left.get("pod", []):
            podman("pod", "rm", "-f", pod, check=False)
        for network in left.get("network", []):
            podman("network", "rm", "-f", network, check=False)
        for volume in left.get("volume", []):
            podman("volume", "rm", "-f", volume, check=False)
        # Each follower ends with its container; one that does not is ended.
        for follower in self.log_followers:
            try:
                follower.wait(timeout=10)
            except subprocess.TimeoutExpired:
                follower.kill()
                follower.wait()


def conformance(url, requirements, log_name):
    """tests/js/conformance.sh against url; Failed unless it passed every
    required scenario. Returns the "N passed, M failed" line."""
    if not (ROOT / "tests/js/node_modules/.bin/node").exists():
        raise Failed("the conformance suite is not installed: run npm ci --prefix tests/js")
    env = dict(os.environ, CONFORMANCE_REQUIREMENTS=requirements)
    proc = subprocess.run(["bash", "tests/js/conformance.sh", url], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    log_path(log_name).write_text(proc.stdout + proc.stderr)
    counts = re.findall(r"^(\d+) passed, (\d+) failed$", proc.stdout, re.M)
    if not counts:
        raise Failed(f"no summary line (see {log_path(log_name)}): {proc.stdout[-400:]}{proc.stderr[-400:]}")
    passed, failed = map(int, counts[-1])
    if proc.returncode != 0 or failed or not passed:
        failures = [line for line in proc.stdout.splitlines() if line.startswith(("FAIL", "    FAILURE"))]
        raise Failed(f"{passed} passed, {failed} failed (see {log_path(log_name)}): {failures[:6]}")
    return f"{passed} passed, {failed} failed"


def get_json(url):
    status, _, body = request(url)
    if status != 200:
        raise Failed(f"GET {url}: HTTP {status} {body[:200]!r}")
    return json.loads(body)


def check_prometheus(project):
    base = project.url("prometheus")

    def targets_up():
        targets = get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]
        nodes = {t["labels"].get("instance"): t["health"] for t in targets
                 if t["labels"].get("job") == "mcp-node"}
        if nodes != {node: "up" for node in NODES}:
            raise Failed(f"mcp-node targets: {nodes}")
        return True

    # The first scrape comes within scrape_interval (5 s) of the start.
    wait_until("Prometheus scraping node1..node3", targets_up, timeout=60, interval=1)
    query = urllib.parse.quote('up{job="mcp-node"}')
    series = get_json(f"{base}/api/v1/query?query={query}")["data"]["result"]
    values = sorted((s["metric"]["instance"], s["value"][1]) for s in series)
    if values != [(node, "1") for node in NODES]:
        raise Failed(f'up{{job="mcp-node"}}: {values}')
    groups = get_json(f"{base}/api/v1/rules")["data"]["groups"]
    rules = [r["name"] for g in groups if g["file"].endswith("mcp-node.rules.yml") for r in g["rules"]]
    if not rules:
        raise Failed(f"no rule of mcp-node.rules.yml loaded: {groups}")


def check_traces(project):
    def exported():
        counts = get_json(project.url("otlp", "/count"))
        return counts["exports"] > 0 and counts["bytes"] > 0

    # The nodes' batch exporter sends every 5 s.
    wait_until("a trace export from the nodes", exported, timeout=60, interval=1)


def check_down(project):
    """`down -v` removes containers, pods and volumes; what podman-compose
    1.0.3 leaves is its default network only, which `podman network rm`
    removes (README); then nothing of the project remains."""
    left = project.down()
    network = f"{project.name}_default"
    if left and left != {"network": [network]}:
        raise Failed(f"left after down -v: {left}")
    if left:
        podman("network", "rm", network)
    left = project.leftovers()
    if left:
        raise Failed(f"left after down -v and network rm: {left}")


def session_through_lb(project, text):
    session = Session(project.url("lb", "/mcp"))
    try:
        got = session.echo(text)
        if got != f"Echo: {text}":
            raise Failed(f"echo answered {got!r} to {text!r}")
    finally:
        session.close()


def presented_certificate(port, ca_file):
    """The DER certificate a node presents to a new TLS connection on its
    published port, verified against ca_file for the name localhost."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def der(cert_file):
    return ssl.PEM_cert_to_DER_cert(cert_file.read_text())


def run_plain(checks):
    project = Project("plain", ["tests/containers/compose.test.yml"])
    try:
        checks.group([
            ("compose: podman-compose up -d (docker-compose.yml, free ports)", project.up),
            ("compose: every healthcheck passes (redis, node1..3, lb, prometheus)", project.wait_healthy),
            ("compose: nginx answers /readyz",
             lambda: wait_until("nginx /readyz", lambda: request(project.url("lb", "/readyz"))[0] == 200,
                                timeout=60, interval=1)),
            ("compose: a session through nginx (tools/call echo)", lambda: session_through_lb(project, "compose")),
            ("compose: conformance suite 2025-11-25 through nginx",
             lambda: print(f"     {conformance(project.url('lb', '/mcp'), '2025-11-25', 'compose-conformance.log')}")),
            ("compose: conformance suite 2026-07-28 through nginx",
             lambda: print(f"     {conformance(project.url('lb', '/mcp'), '2026-07-28', 'compose-conformance-2026.log')}")),
            ("compose: the nodes' traces reach the OTLP endpoint (jaeger:4318)", lambda: check_traces(project)),
            ("compose: Prometheus scrapes node1..3 and loaded the alert rules", lambda: check_prometheus(project)),
            ("compose: down -v, then podman network rm, leaves nothing of the project", lambda: check_down(project)),
        ])
    finally:
        project.clean()


def run_tls(checks):
    work = scratch("compose-tls")
    names = ["mcp-node", "node1", "node2", "node3", "localhost"]
    tls_dir = work / "tls"
    tls_dir.mkdir()
    tls_dir.chmod(0o755)

    def install(cert, key):
        """Puts a pair in MCP_TLS_DIR as a rotation does: each file
        replaced whole (rename), the key first."""
        for source, target in ((key, "tls.key"), (cert, "tls.crt")):
            temporary = tls_dir / f".{target}.new"
            shutil.copy(source, temporary)
            temporary.chmod(0o644)
            os.replace(temporary, tls_dir / target)

    project = Project("tls", ["tests/containers/compose.test.yml", "docker-compose.tls.yml"], {
        "MCP_TLS_DIR": str(tls_dir),
        "MCP_TLS_RELOAD_INTERVAL_SECS": str(TLS_RELOAD_INTERVAL_SECS),
    })
    started = {}
    pki = None
    first = None

    def up():
        nonlocal pki, first
        pki = Pki(work / "pki")
        first = pki.issue("nodes-1", names)
        install(*first)
        shutil.copy(pki.ca_cert, tls_dir / "ca.crt")
        (tls_dir / "ca.crt").chmod(0o644)
        project.up()

    def nodes_present(cert_file):
        want = der(cert_file)
        for node in NODES:
            got = presented_certificate(project.ports[node], pki.ca_cert)
            if got != want:
                raise Failed(f"{node} presents another certificate than {cert_file.name}")
        return True

    def first_pair():
        nodes_present(first[0])
        for node in NODES:
            started[node] = podman("inspect", "--format", "{{.State.StartedAt}}",
                                   project.container(node)).stdout.strip()

    def rotate():
        second = pki.issue("nodes-2", names)
        install(*second)
        # A few reload intervals: the node reads both files every interval.
        wait_until("every node presenting the new certificate", lambda: nodes_present(second[0]),
                   timeout=10 * TLS_RELOAD_INTERVAL_SECS + 20, interval=0.5)
        for node in NODES:
            now = podman("inspect", "--format", "{{.State.StartedAt}}", project.container(node)).stdout.strip()
            if now != started[node]:
                raise Failed(f"{node} was restarted ({started[node]} -> {now})")

    try:
        checks.group([
            ("compose tls: up -d with docker-compose.tls.yml (MCP_TLS_DIR from common.Pki)", up),
            ("compose tls: every healthcheck passes", project.wait_healthy),
            ("compose tls: node1..3 serve https with the certificate of MCP_TLS_DIR", first_pair),
            ("compose tls: a session through nginx, https to the nodes verified against ca.crt",
             lambda: wait_until("a session through nginx", lambda: session_through_lb(project, "tls") or True,
                                timeout=60, interval=1)),
            ("compose tls: a new pair in MCP_TLS_DIR is served to new connections, no restart", rotate),
            ("compose tls: a session through nginx after the rotation",
             lambda: session_through_lb(project, "rotated")),
            ("compose tls: down -v, then podman network rm, leaves nothing of the project",
             lambda: check_down(project)),
        ])
    finally:
        project.clean()


def run(checks):
    started = time.monotonic()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    run_plain(checks)
    run_tls(checks)
    print(f"     compose part: {time.monotonic() - started:.0f} s", flush=True)
