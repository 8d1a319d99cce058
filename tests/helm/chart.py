"""Rendering the chart and reading what Kubernetes would make of it.

Shared by run.py (static checks) and e2e.py (the chart's pods as real
processes): running helm, finding objects in the rendered manifests, and
resolving a container's environment the way the kubelet does (secretKeyRef
from the rendered Secret, fieldRef from the pod, $(VAR) references).
"""

import base64
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mcp-node"
TESTS = ROOT / "tests" / "helm"


class HelmError(Exception):
    """helm exited non-zero; the message is its stderr."""


def helm(*args):
    """Runs helm (tests/helm/.bin/helm) with its state kept under target/."""
    state = ROOT / "target" / "helm-home"
    env = dict(os.environ)
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"),
                     ("HELM_DATA_HOME", "data")):
        env[var] = str(state / sub)
    # No cluster is ever contacted: lint and template work offline.
    env["KUBECONFIG"] = os.devnull
    proc = subprocess.run([os.environ.get("HELM", str(TESTS / ".bin" / "helm")), *args],
                          capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise HelmError(proc.stderr.strip() or proc.stdout.strip())
    return proc.stdout


def template_args(release, namespace, values_files=(), sets=(), chart=CHART):
    args = ["template", release, str(chart), "--namespace", namespace]
    for path in values_files:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return args


def render(release, namespace, values_files=(), sets=(), chart=CHART):
    """The manifests `helm template` writes, as a list of objects."""
    out = helm(*template_args(release, namespace, values_files, sets, chart))
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(docs, kind, name=None):
    """The objects of one kind (and name)."""
    return [d for d in docs
            if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs, kind, name=None):
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind}{' ' + name if name else ''}, found {len(found)}"
    return found[0]


def node_container(docs):
    deployment = one(docs, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"expected one container, found {len(containers)}"
    return deployment, containers[0]


def env_list(container):
    return {e["name"]: e for e in container.get("env", [])}


def container_port(container, port):
    """A probe's or Service's port (a name or a number) as a number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise AssertionError(f"no container port named {port!r}")


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text, defined):
    """Kubernetes' $(VAR) expansion: a defined variable is replaced, `$$` is a
    literal `$`, an undefined reference stays as written."""

    def sub(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return defined.get(name, match.group(0))

    return _REF.sub(sub, text)


def secret_value(docs, name, key):
    """A key of a rendered Secret, decoded."""
    secrets = find(docs, "Secret", name)
    assert secrets, f"Secret {name} is not rendered"
    secret = secrets[0]
    if key in secret.get("stringData", {}):
        return secret["stringData"][key]
    assert key in secret.get("data", {}), f"Secret {name} has no key {key}"
    return base64.b64decode(secret["data"][key]).decode()


def resolve_env(docs, container, pod, external_secrets=None):
    """The variables the kubelet would give `container` in `pod` (a dict with
    name, namespace, ip, labels, serviceAccountName), in order.

    secretKeyRef and configMapKeyRef are read from the rendered objects, or
    from `external_secrets` ({(name, key): value}) for a Secret the chart
    only names. fieldRef takes the pod's own fields."""
    external_secrets = external_secrets or {}
    assert "envFrom" not in container, "envFrom is not resolved by this test"
    env = {}
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            continue
        source = item.get("valueFrom", {})
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            if (ref["name"], ref["key"]) in external_secrets:
                env[name] = external_secrets[(ref["name"], ref["key"])]
            else:
                env[name] = secret_value(docs, ref["name"], ref["key"])
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            env[name] = one(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
        elif "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            fields = {
                "metadata.name": pod["name"],
                "metadata.namespace": pod["namespace"],
                "status.podIP": pod["ip"],
                "status.podIPs": pod["ip"],
                "status.hostIP": "127.0.0.1",
                "spec.nodeName": "node-1",
                "spec.serviceAccountName": pod["serviceAccountName"],
            }
            label = re.fullmatch(r"metadata\.labels\['(.+)'\]", path)
            if label:
                env[name] = pod["labels"][label.group(1)]
            else:
                assert path in fields, f"fieldRef {path} is not resolved by this test"
                env[name] = fields[path]
        else:
            raise AssertionError(f"env {name}: unsupported source {source}")
    return env


def run_test_pod(docs, service, port, to_host, to_port, timeout=60):
    """The `helm test` pod's own command, run here: its curl, through a
    wrapper first on PATH, connects to to_host:to_port in place of the
    Service service:port (curl --connect-to), Host staying the Service's
    name. Returns the finished process (stdout and stderr as text)."""
    pods = [p for p in find(docs, "Pod")
            if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    container = one(pods, "Pod")["spec"]["containers"][0]
    curl = shutil.which("curl")
    assert curl, "curl missing: apt-get install curl"
    with tempfile.TemporaryDirectory() as shim:
        wrapper = Path(shim) / "curl"
        wrapper.write_text(f'#!/bin/sh\nexec {curl} --connect-to '
                           f'{service}:{port}:{to_host}:{to_port} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        env = {"PATH": f"{shim}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        env.update({e["name"]: e["value"] for e in container.get("env", [])})
        return subprocess.run(container["command"] + container.get("args", []), env=env,
                              capture_output=True, text=True, timeout=timeout)


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free(host, port):
    """Whether host:port can be listened on (SO_REUSEADDR, as the node does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
            return True
        except OSError:
            return False


def wait_for(what, predicate, timeout, interval=0.05):
    """Polls `predicate` until it returns a true value (returned), failing
    with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
