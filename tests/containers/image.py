"""The mcp-node image (mcp-node:local, the Dockerfile's `prebuilt` target
around the release binary) started as the chart runs it: as the image's
user (uid 10001), with
a read-only root filesystem, no capabilities and no privilege escalation,
on a podman network of the test's own, its ports published on 127.0.0.1.

Checks, in order (the first failure stops the rest):
- the image: its user, entrypoint and healthcheck, and Debian's public
  roots in /etc/ssl/certs;
- a node starts, serves an MCP session, and the image's healthcheck passes
  (`podman healthcheck run`), also with the probes on the main listener;
- authorization against an https test issuer whose certificate a private
  CA signed: without the CA the node cannot fetch the issuer's keys (503,
  so the check below proves the CA is what makes it work); with the CA
  mounted and named by MCP_AUTH__CA_FILE, 401 without a token and a session
  with one; with the CA added to the image's system roots the documented
  way (deploy/private-ca/Dockerfile: an image FROM mcp-node,
  update-ca-certificates), a session with no CA setting at all;
- SIGTERM (`podman stop`) drains: /readyz turns 503 while the node keeps
  serving, a request in flight gets its answer, and the node exits with 0;
- a provider's own binary (crates/mcp-cluster/examples/slow_tools.rs, built
  on mcp_cluster::cli; MCP_PROVIDER) in the same image pattern (the
  prebuilt target, --build-arg BINARY): its tools are served, the image's
  healthcheck passes.
"""

import json
import os
import shutil
import threading
import time
from pathlib import Path

from common import (
    IMAGE_UID,
    ROOT,
    Failed,
    Issuer,
    Pki,
    Session,
    free_port,
    podman,
    request,
    scratch,
    wait_until,
)

IMAGE = "mcp-node:local"
PREFIX = "mcpt-image"
NETWORK = f"{PREFIX}-net"
# The image with the test CA among its system roots.
CA_IMAGE = "localhost/mcpt-image-with-ca:latest"
# A provider's binary in the same image pattern.
PROVIDER_IMAGE = "localhost/mcpt-image-provider:latest"
# As the chart's securityContext runs the container, the user being the
# image's own (USER).
HARDENED = [
    "--read-only",
    "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges",
]


class Node:
    """One container of the image, main and admin listeners published on
    127.0.0.1 at free ports."""

    def __init__(self, name, env=(), image=IMAGE, admin=True):
        self.name = f"{PREFIX}-{name}"
        self.port = free_port()
        self.admin_port = free_port() if admin else None
        args = ["run", "-d", "--name", self.name, "--network", NETWORK, *HARDENED,
                "-p", f"127.0.0.1:{self.port}:8080",
                "-e", "MCP_ALLOWED_HOSTS=127.0.0.1:*"]
        if admin:
            args += ["-p", f"127.0.0.1:{self.admin_port}:9090", "-e", "MCP_ADMIN_BIND=0.0.0.0:9090"]
        for item in env:
            args += ["-e", item]
        podman(*args, image)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        probe_port = self.admin_port or self.port
        self.probe = f"http://127.0.0.1:{probe_port}"
        wait_until(f"{self.name} /healthz", lambda: request(f"{self.probe}/healthz")[0] == 200, 30)

    def logs(self):
        proc = podman("logs", self.name, check=False)
        return proc.stdout + proc.stderr

    def healthy(self):
        """`podman healthcheck run`: the image's own HEALTHCHECK, run in the
        container; exit 0 means healthy."""
        proc = podman("healthcheck", "run", self.name, check=False)
        if proc.returncode != 0:
            raise Failed(f"healthcheck of {self.name}: exit {proc.returncode} {proc.stdout}{proc.stderr}")
        return True

    def remove(self):
        podman("rm", "-f", "-t", "0", self.name, check=False)


def inspect_image():
    image = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
    config = image["Config"]
    if config.get("User") != f"{IMAGE_UID}:{IMAGE_UID}":
        raise Failed(f"image user {config.get('User')!r}, not {IMAGE_UID}:{IMAGE_UID}")
    if config.get("Entrypoint") != ["/usr/local/bin/mcp-node"]:
        raise Failed(f"entrypoint {config.get('Entrypoint')}")
    health = image.get("Healthcheck") or {}
    if "/healthz" not in " ".join(health.get("Test") or []):
        raise Failed(f"no /healthz healthcheck in the image: {health}")
    roots = podman("run", "--rm", "--entrypoint", "bash", IMAGE, "-c",
                   "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt").stdout
    if int(roots.strip() or 0) < 100:
        raise Failed(f"only {roots.strip()} public roots in /etc/ssl/certs/ca-certificates.crt")


def run(checks):
    work = scratch("image")
    state = {}

    def cleanup():
        names = podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{PREFIX}-").stdout.split()
        if names:
            podman("rm", "-f", "-t", "0", *names, check=False)
        podman("network", "rm", "-f", NETWORK, check=False)
        podman("rmi", "-f", CA_IMAGE, PROVIDER_IMAGE, check=False)

    def network():
        cleanup()
        podman("network", "create", NETWORK)

    def session_and_healthcheck():
        node = Node("plain")
        state["plain"] = node
        session = Session(node.url)
        if session.echo("through the image") != "Echo: through the image":
            raise Failed("echo answered otherwise")
        session.close()
        node.healthy()
        ids = podman("exec", node.name, "id", "-u").stdout.strip() + ":" + podman("exec", node.name, "id", "-g").stdout.strip()
        if ids != f"{IMAGE_UID}:{IMAGE_UID}":
            raise Failed(f"the node runs as {ids}, not {IMAGE_UID}:{IMAGE_UID}")

    def healthcheck_on_main_listener():
        # No admin listener: the probes are on the main one, and so is the
        # image's healthcheck (MCP_BIND's port).
        node = Node("no-admin", admin=False)
        node.healthy()
        node.remove()

    def issuer():
        pki = Pki(work / "pki")
        state["pki"] = pki
        issuer = Issuer(pki, work / "issuer")
        issuer.start(NETWORK, f"{PREFIX}-issuer")
        state["issuer"] = issuer

    def auth_env(node_port):
        issuer = state["issuer"]
        return [f"MCP_AUTH__RESOURCE=http://127.0.0.1:{node_port}/mcp", f"MCP_AUTH__ISSUERS={issuer.url}"]

    def authorized_node(name, extra_args=(), env=(), image=IMAGE):
        # The resource names the published port, which Node picks: pick it
        # first and pass it through MCP_AUTH__RESOURCE.
        port = free_port()
        node_name = f"{PREFIX}-{name}"
        admin_port = free_port()
        podman("run", "-d", "--name", node_name, "--network", NETWORK, *HARDENED,
               "-p", f"127.0.0.1:{port}:8080", "-p", f"127.0.0.1:{admin_port}:9090",
               "-e", "MCP_ADMIN_BIND=0.0.0.0:9090", "-e", "MCP_ALLOWED_HOSTS=127.0.0.1:*",
               *[a for item in auth_env(port) for a in ("-e", item)],
               *[a for item in env for a in ("-e", item)], *extra_args, image)
        wait_until(f"{node_name} /healthz", lambda: request(f"http://127.0.0.1:{admin_port}/healthz")[0] == 200, 30)
        return f"http://127.0.0.1:{port}/mcp", node_name

    def token_for(url):
        return state["issuer"].token(url)

    def no_ca_no_keys():
        url, name = authorized_node("auth-no-ca")
        status, _, body = request(url, "POST", {"Content-Type": "application/json",
                                               "Accept": "application/json, text/event-stream",
                                               "Authorization": f"Bearer {token_for(url)}"},
                                  {"jsonrpc": "2.0", "id": 0, "method": "ping"})
        podman("rm", "-f", "-t", "0", name, check=False)
        if status != 503 or b"authorization server unavailable" not in body:
            raise Failed(f"without the CA: HTTP {status} {body[:200]!r}, not 503 authorization server unavailable")

    def ca_file_mounted():
        pki = state["pki"]
        url, name = authorized_node(
            "auth-ca-file",
            extra_args=["-v", f"{pki.ca_cert}:/etc/mcp/idp-ca.pem:ro"],
            env=["MCP_AUTH__CA_FILE=/etc/mcp/idp-ca.pem"],
        )
        status, headers, _ = request(url, "POST", {"Content-Type": "application/json"}, {})
        if status != 401 or "resource_metadata" not in headers.get("www-authenticate", ""):
            raise Failed(f"without a token: HTTP {status} {headers.get('www-authenticate')}")
        session = state["issuer"].session(url)
        who = session.call("tools/call", {"name": "whoami", "arguments": {}})["content"][0]["text"]
        if "alice" not in who:
            raise Failed(f"whoami: {who}")
        podman("rm", "-f", "-t", "0", name, check=False)

    def ca_in_system_roots():
        pki = state["pki"]
        context = work / "ca-image"
        context.mkdir()
        (context / "test-ca.crt").write_bytes(pki.ca_cert.read_bytes())
        # Not a certificate: only *.crt files are added.
        (context / "README").write_text("the test CA\n")
        # The README's recipe for a private CA trusted by everything.
        podman("build", "--quiet", "--pull=never", "--format", "docker", "-t", CA_IMAGE,
               "-f", str(ROOT / "deploy" / "private-ca" / "Dockerfile"), "--build-arg", f"IMAGE={IMAGE}", str(context))
        url, name = authorized_node("auth-system-ca", image=CA_IMAGE)
        session = state["issuer"].session(url)
        if session.echo("trusted") != "Echo: trusted":
            raise Failed("echo answered otherwise")
        podman("rm", "-f", "-t", "0", name, check=False)

    def sigterm_drains():
        node = Node("drain", env=["MCP_DRAIN_DELAY_SECS=2", "MCP_DRAIN_GRACE_SECS=20"])
        session = Session(node.url)
        outcome = {}

        def long_call():
            try:
                outcome["result"] = session.call(
                    "tools/call",
                    {"name": "long_running_operation", "arguments": {"duration_ms": 4000, "steps": 2}},
                    timeout=60,
                )
            except Exception as e:  # noqa: BLE001 - reported below
                outcome["error"] = e

        caller = threading.Thread(target=long_call)
        caller.start()
        # The call is admitted also if it arrives during the drain delay (the
        # listener still accepts): a second is enough either way.
        time.sleep(1)
        stopper = threading.Thread(target=lambda: podman("stop", "-t", "40", node.name, check=False, timeout=60))
        stopper.start()
        wait_until("/readyz 503 while draining",
                   lambda: request(f"{node.probe}/readyz")[0] == 503, 10, 0.1)
        caller.join(60)
        stopper.join(60)
        if "error" in outcome:
            raise Failed(f"the call in flight failed: {outcome['error']}")
        text = " ".join(c.get("text", "") for c in outcome["result"].get("content", []))
        if text != "Long running operation completed: 2 steps in 4000 ms":
            raise Failed(f"the call in flight answered {outcome['result']}")
        state_line = podman("inspect", "--format", "{{.State.ExitCode}} {{.State.Status}}", node.name).stdout.strip()
        if state_line != "0 exited":
            raise Failed(f"after SIGTERM: {state_line!r}, not '0 exited'; log tail: {node.logs()[-600:]}")

    def provider_image():
        # A provider's own binary (mcp_cluster::cli) in the same image
        # pattern: the prebuilt target with BINARY naming it.
        binary = Path(os.environ.get("MCP_PROVIDER", ROOT / "target" / "debug" / "examples" / "slow_tools"))
        context = work / "provider-image"
        context.mkdir()
        shutil.copy(binary, context / "slow_tools")
        podman("build", "--quiet", "--pull=never", "--format", "docker", "--target", "prebuilt",
               "--build-arg", "BINARY=slow_tools", "-t", PROVIDER_IMAGE,
               "-f", str(ROOT / "Dockerfile"), str(context))
        node = Node("provider", image=PROVIDER_IMAGE)
        session = Session(node.url)
        tools = {t["name"] for t in session.call("tools/list")["tools"]}
        if not {"echo", "sleep_blocking", "limited"} <= tools:
            raise Failed(f"the provider's tools are not served: {sorted(tools)}")
        if session.echo("from the provider") != "from the provider":
            raise Failed("the provider's echo answered otherwise")
        if session.initialized["serverInfo"]["name"] != "slow-tools":
            raise Failed(f"serverInfo: {session.initialized['serverInfo']}")
        node.healthy()
        node.remove()

    try:
        checks.group([
            ("image: user 10001, entrypoint, healthcheck, Debian's public roots", inspect_image),
            ("image: test network", network),
            ("image: a session through a hardened container, and its healthcheck", session_and_healthcheck),
            ("image: healthcheck with the probes on the main listener", healthcheck_on_main_listener),
            ("image: https test issuer signed by a private CA", issuer),
            ("image: without the private CA the issuer's keys cannot be fetched (503)", no_ca_no_keys),
            ("image: private CA as MCP_AUTH__CA_FILE: 401 without a token, a session with one", ca_file_mounted),
            ("image: private CA in the system roots (update-ca-certificates): a session", ca_in_system_roots),
            ("image: SIGTERM drains: /readyz 503, the call in flight answered, exit 0", sigterm_drains),
            ("image: a provider's binary (slow_tools) in the same image: its tools, healthcheck", provider_image),
        ])
    finally:
        cleanup()
