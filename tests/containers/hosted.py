"""The image pattern for hosting someone else's MCP server
(deploy/hosted/node, deploy/hosted/python): each built FROM mcp-node:local
with its runtime from Debian and its server's package from npm or PyPI
installed at build time, then started as the chart runs the node (image
user, read-only root filesystem, no capabilities), from outside:

- a session gets the hosted server's own `initialize` answer (its name),
  its tools, and a tool's answer (server-everything's `echo` from npm;
  mcp-server-time's `get_current_time` from PyPI);
- inside the container the server runs under its keeper
  (`--relay-keeper`), both gone once the session is deleted;
- `podman stop` drains the node, which exits 0.
"""

import os
import shutil
import time

from common import Failed, Session, free_port, podman, request, scratch, wait_until

PREFIX = "mcpt-hosted"
BASE = "localhost/mcp-node:local"
# BASE trusting this machine's CA roots (deploy/private-ca).
TRUSTING = "localhost/mcpt-hosted-base:latest"
# Run as the chart runs the node.
HARDENED = [
    "--read-only",
    "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges",
]
SERVERS = {
    # context under deploy/hosted: image tag, the server's name in its
    # initialize answer, its program (in its command line), a tool and its
    # arguments, what the tool's first text holds.
    "node": ("localhost/mcpt-hosted-node:latest", "mcp-servers/everything",
             "mcp-server-everything", "echo", {"message": "from npm"}, "from npm"),
    "python": ("localhost/mcpt-hosted-python:latest", "mcp-time",
               "mcp-server-time", "get_current_time", {"timezone": "UTC"}, "UTC"),
}


def processes(name):
    """The command lines running in container `name`, from /proc."""
    out = podman("exec", name, "bash", "-c",
                 'for p in /proc/[0-9]*; do tr "\\0" " " < "$p/cmdline" 2>/dev/null; echo; done').stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def run(checks):
    from common import ROOT

    def cleanup():
        names = podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{PREFIX}-").stdout.split()
        if names:
            podman("rm", "-f", "-t", "0", *names, check=False)
        podman("rmi", "-f", *(tag for tag, *_ in SERVERS.values()), TRUSTING, check=False)

    def base():
        # The registries may sit behind this machine's own CA (a TLS-
        # inspecting proxy): the base trusts the machine's roots, made the
        # way deploy/private-ca documents.
        context = scratch("hosted-ca")
        shutil.copy(os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"),
                    context / "machine-roots.crt")
        podman("build", "--quiet", "--pull=never", "--format", "docker",
               "--build-arg", f"IMAGE={BASE}", "-t", TRUSTING,
               "-f", str(ROOT / "deploy" / "private-ca" / "Dockerfile"), str(context), timeout=300)

    def build(kind):
        tag = SERVERS[kind][0]
        podman("build", "--quiet", "--pull=never", "--format", "docker",
               "--build-arg", f"IMAGE={TRUSTING}", "-t", tag,
               str(ROOT / "deploy" / "hosted" / kind), timeout=900)

    def serve(kind):
        tag, server_name, program, tool, arguments, expected = SERVERS[kind]
        name = f"{PREFIX}-{kind}"
        port = free_port()
        podman("run", "-d", "--name", name, *HARDENED,
               "-p", f"127.0.0.1:{port}:8080", "-e", "MCP_ALLOWED_HOSTS=127.0.0.1:*", tag)
        base = f"http://127.0.0.1:{port}"
        wait_until(f"{name} /healthz", lambda: request(f"{base}/healthz")[0] == 200, 30)
        session = Session(f"{base}/mcp")
        got_name = session.initialized.get("serverInfo", {}).get("name")
        if got_name != server_name:
            raise Failed(f"serverInfo {got_name!r}, not the hosted server's {server_name!r}")
        tools = [t["name"] for t in session.call("tools/list")["tools"]]
        if tool not in tools:
            raise Failed(f"{tool} not among the hosted tools: {sorted(tools)}")
        result = session.call("tools/call", {"name": tool, "arguments": arguments})
        text = result["content"][0]["text"]
        if result.get("isError") or expected not in text:
            raise Failed(f"{tool} answered {text[:300]!r}")
        running = processes(name)
        keepers = [p for p in running if "--relay-keeper" in p]
        servers = [p for p in running if program in p and "--relay-keeper" not in p]
        if len(keepers) != 1 or not servers:
            raise Failed(f"one keeper and its server expected: {running}")
        session.close()

        def ended():
            return not [p for p in processes(name) if "--relay-keeper" in p or program in p]

        wait_until(f"{name}: keeper and server gone after DELETE", ended, 15)
        started = time.monotonic()
        podman("stop", "-t", "30", name, timeout=60)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        if code != "0":
            raise Failed(f"exit code {code} after podman stop ({time.monotonic() - started:.1f} s)")

    cleanup()
    try:
        for kind, server in (("node", "a Node.js server from npm"),
                             ("python", "a Python server from PyPI")):
            tool = SERVERS[kind][3]
            checks.group([
                ("hosted: the base trusting this machine's roots (deploy/private-ca)", base),
                (f"hosted: {server} built into the image (deploy/hosted/{kind})",
                 lambda kind=kind: build(kind)),
                (f"hosted: its session, tools and {tool}; its keeper; both gone after DELETE; drains to exit 0",
                 lambda kind=kind: serve(kind)),
            ])
    finally:
        cleanup()
