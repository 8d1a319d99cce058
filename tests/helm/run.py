"""Tests of the Helm chart helm/mcp-node, one line per check, then
`N passed, M failed`.

For each value set (the chart's defaults and tests/helm/values-*.yaml):
  - `helm lint --strict`;
  - `helm template`, then every rendered object validated offline against the
    Kubernetes OpenAPI schemas of the oldest and newest release the chart
    supports (kubernetes-validate, strict: unknown fields are errors). The
    Prometheus Operator's ServiceMonitor and PrometheusRule are not in those
    schemas: they are validated against tests/helm/crd-schemas/*.json, written
    from the operator's API reference (with Kubernetes' own ObjectMeta and
    LabelSelector), and a PrometheusRule's groups also with `promtool check
    rules`;
  - what the chart promises, read from the manifests: probes on the admin
    listener, drain-aware grace period, security context, the Redis URL from
    a Secret, Host and Origin allow-lists covering the Service's names and the
    Ingress hosts, selectors that match the pods, every file the node reads
    (TLS certificate and key, CA certificates) projected by a read-only
    mount without subPath, HTTPS in the Service and the test pod when the
    node serves it, NOTES.txt;
  - the real mcp-node binary given the rendered environment (and the rendered
    ConfigMap as its --config file): it starts and reports no unknown MCP_
    variable (bind addresses moved to loopback; issuers and the
    introspection endpoint moved to a closed loopback port, so that nothing
    leaves the machine; the TLS certificate and key and the CA files it
    names made where the pod mounts them, moved under a temporary
    directory; with TLS on, its listener must speak HTTPS with that
    certificate). With authorization on, its protected resource
    metadata must say what the values say, and the `helm test` pod's script
    must pass against it (401 without a token, the metadata through the
    Service's name).
The value sets include the chart's example values for identity providers
(helm/mcp-node/examples/*.yaml).
Then value sets the chart must refuse (tests/helm/refused/), a check that the
validators do refuse a broken object, and the end-to-end test (e2e.py).

Environment: HELM (default tests/helm/.bin/helm), MCP_NODE (default
target/debug/mcp-node), LOG_DIR (default target/test-logs).
"""

import copy
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import referencing
import yaml
from importlib_resources import files

import chart
import e2e
from chart import CHART, ROOT, TESTS, env_list, find, node_container, one

# The chart's kubeVersion is >=1.25: the oldest and the newest release whose
# schemas kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.25.0", "1.37.0")
# The node's defaults for the drain (README, "Flags and environment variables").
DEFAULT_DRAIN_DELAY_SECS = 5
DEFAULT_DRAIN_GRACE_SECS = 30
LOG_DIR = Path(os.environ.get("LOG_DIR", ROOT / "target" / "test-logs"))
NODE = Path(os.environ.get("MCP_NODE", ROOT / "target" / "debug" / "mcp-node"))
# A provider's program built on mcp_cluster::cli: the chart must serve it as
# it serves mcp-node (crates/mcp-cluster/examples/slow_tools.rs).
PROVIDER = Path(os.environ.get("MCP_PROVIDER",
                               ROOT / "target" / "debug" / "examples" / "slow_tools"))


class ValueSet:
    """A release rendered from the chart with some values files."""

    def __init__(self, name, files, release="mcp-node", namespace="default",
                 external_secrets=None, expect=None):
        self.name = name
        # Relative to tests/helm/, or absolute (the chart's examples).
        self.files = [TESTS / f for f in files]
        self.release = release
        self.namespace = namespace
        # Secrets the chart names but does not create: {(name, key): value}.
        self.external_secrets = external_secrets or {}
        # Checks of this set only: fn(docs).
        self.expect = expect


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, fn, *args):
        """Runs fn(*args); an exception is a failure. Returns fn's value."""
        started = time.monotonic()
        try:
            value = fn(*args)
        except Exception as err:  # noqa: BLE001 - every failure is reported
            self.failed += 1
            detail = str(err) or type(err).__name__
            if not isinstance(err, (AssertionError, chart.HelmError)):
                detail = traceback.format_exc()
            print(f"FAIL {name}: {detail}", flush=True)
            return None
        self.passed += 1
        print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)
        return value


# Validation ------------------------------------------------------------------

def _definitions():
    """Kubernetes' own definitions (ObjectMeta, LabelSelector), for the CRD
    schemas, from the newest strict schema set kubernetes-validate ships."""
    version = KUBERNETES_VERSIONS[-1]
    path = files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json")
    return json.loads(path.read_text())


_REGISTRY = None


def crd_validator(kind):
    global _REGISTRY
    if _REGISTRY is None:
        definitions = referencing.Resource.from_contents(_definitions())
        _REGISTRY = definitions @ referencing.Registry()
    schema = json.loads((TESTS / "crd-schemas" / f"{kind.lower()}.json").read_text())
    return jsonschema.Draft202012Validator(schema, registry=_REGISTRY)


CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"),
             ("monitoring.coreos.com/v1", "PrometheusRule")}


def validate(doc):
    """Errors of one object: Kubernetes schemas, or the CRD schemas."""
    label = f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}"
    errors = []
    if (doc.get("apiVersion"), doc.get("kind")) in CRD_KINDS:
        for err in crd_validator(doc["kind"]).iter_errors(doc):
            path = "/".join(str(p) for p in err.absolute_path)
            errors.append(f"{label}: {path}: {err.message}")
        if doc["kind"] == "PrometheusRule" and not errors:
            errors += promtool_check_rules(doc, label)
        return errors
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = "/".join(str(p) for p in err.absolute_path)
            errors.append(f"{label} (Kubernetes {version}): {path}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError as err:
            errors.append(f"{label}: {err.message}")
    return errors


def promtool_check_rules(doc, label):
    """The rule groups, as a Prometheus rule file, through `promtool check
    rules` (PromQL parsed, durations and names checked)."""
    promtool = shutil.which("promtool")
    if not promtool:
        return [f"{label}: promtool missing (apt-get install prometheus)"]
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as rules:
        yaml.safe_dump({"groups": doc["spec"]["groups"]}, rules)
        rules.flush()
        proc = subprocess.run([promtool, "check", "rules", rules.name],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"{label}: promtool check rules: {proc.stdout}{proc.stderr}"]
    return []


def check_valid(docs):
    errors = [e for doc in docs for e in validate(doc)]
    assert not errors, "\n  " + "\n  ".join(errors)


# What every value set must give -----------------------------------------------

def allowed(patterns, value):
    """The node's Host/Origin match (crates/mcp-cluster-http/src/config.rs): equal
    ignoring case, `*`, or `host:*` for the host with any port or none."""
    for p in patterns:
        if p == "*" or p.lower() == value.lower():
            return True
        if p.endswith(":*"):
            base = p[:-2].lower()
            head, rest = value[:len(base)].lower(), value[len(base):]
            if head == base and (rest == "" or (rest[:1] == ":" and rest[1:].isdigit())):
                return True
    return False


def ingress_hosts(docs):
    hosts = []
    for ing in find(docs, "Ingress"):
        hosts += [r["host"] for r in ing["spec"].get("rules", []) if "host" in r]
        for tls in ing["spec"].get("tls", []):
            hosts += tls.get("hosts", [])
    return hosts


def check_common(vs, docs):
    deployment, container = node_container(docs)
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    env = env_list(container)
    values = {name: e.get("value") for name, e in env.items()}

    # Selectors: the Deployment's own, the Service's, PDB's and spread's.
    labels = pod["metadata"]["labels"]
    def selects(selector):
        return all(labels.get(k) == v for k, v in selector.items())
    assert selects(deployment["spec"]["selector"]["matchLabels"]), "Deployment selector"

    # The listeners: MCP on the container port `http`, probes on `admin`.
    http_port = chart.container_port(container, "http")
    admin_port = chart.container_port(container, "admin")
    assert values["MCP_BIND"].endswith(f":{http_port}"), values["MCP_BIND"]
    assert values["MCP_ADMIN_BIND"].endswith(f":{admin_port}"), values["MCP_ADMIN_BIND"]
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path, f"{probe} path {get['path']}"
        assert chart.container_port(container, get["port"]) == admin_port, \
            f"{probe} not on the admin port"
        assert get.get("scheme", "HTTP") == "HTTP" and "host" not in get, probe
    # /readyz waits up to the Redis command timeout for a PING.
    timeout_ms = int(values.get("MCP_REDIS__COMMAND_TIMEOUT_MS") or 1000)
    assert container["readinessProbe"]["timeoutSeconds"] * 1000 > timeout_ms, \
        "readiness timeout not above the Redis command timeout"

    # The clients' Service: the MCP port, onto the container's `http`.
    fullname = deployment["metadata"]["name"]
    service = one(docs, "Service", fullname)
    assert selects(service["spec"]["selector"]), "Service selector"
    ports = service["spec"]["ports"]
    assert [p["name"] for p in ports] == ["http"], ports
    assert chart.container_port(container, ports[0]["targetPort"]) == http_port
    assert "sessionAffinity" not in service["spec"] or \
        service["spec"]["sessionAffinity"] == "None"

    # Shutdown: the kubelet waits longer than preStop + drain delay + grace.
    sleep = 0
    pre_stop = container.get("lifecycle", {}).get("preStop")
    if pre_stop:
        command = pre_stop["exec"]["command"]
        assert command[0] == "sleep" and len(command) == 2, command
        sleep = int(command[1])
    delay = int(values.get("MCP_DRAIN_DELAY_SECS") or DEFAULT_DRAIN_DELAY_SECS)
    grace = int(values.get("MCP_DRAIN_GRACE_SECS") or DEFAULT_DRAIN_GRACE_SECS)
    assert spec["terminationGracePeriodSeconds"] > sleep + delay + grace, \
        f"grace {spec['terminationGracePeriodSeconds']} <= {sleep} + {delay} + {grace}"

    # Security context, pod and container.
    psc, csc = spec.get("securityContext", {}), container.get("securityContext", {})
    assert psc.get("runAsNonRoot") is True or csc.get("runAsNonRoot") is True
    assert (csc.get("seccompProfile") or psc.get("seccompProfile")) == {"type": "RuntimeDefault"}
    assert csc.get("readOnlyRootFilesystem") is True
    assert csc.get("allowPrivilegeEscalation") is False
    assert csc.get("capabilities", {}).get("drop") == ["ALL"]
    assert spec.get("automountServiceAccountToken") is False
    # Docker-link variables would land in the node's MCP_ namespace.
    assert spec.get("enableServiceLinks") is False

    # Redis URL from a Secret; a rendered Secret holds the key referenced.
    ref = env["MCP_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    if (ref["name"], ref["key"]) not in vs.external_secrets:
        assert chart.secret_value(docs, ref["name"], ref["key"]).startswith(
            ("redis://", "rediss://"))

    # Host and Origin: every name of the Service, every Ingress host.
    hosts = values["MCP_ALLOWED_HOSTS"].split(",")
    origins = values["MCP_ALLOWED_ORIGINS"].split(",")
    ns = deployment["metadata"]["namespace"]
    domain = vs_cluster_domain(docs)
    svc_port = ports[0]["port"]
    for name in (fullname, f"{fullname}.{ns}", f"{fullname}.{ns}.svc",
                 f"{fullname}.{ns}.svc.{domain}"):
        for host in (name, f"{name}:{svc_port}"):
            assert allowed(hosts, host), f"Host {host} not allowed: {hosts}"
    tls_hosts = {h for ing in find(docs, "Ingress") for t in ing["spec"].get("tls", [])
                 for h in t.get("hosts", [])}
    for host in ingress_hosts(docs):
        for value in (host, f"{host}:443", f"{host}:80"):
            assert allowed(hosts, value), f"Ingress Host {value} not allowed"
        assert allowed(origins, f"https://{host}"), f"Origin https://{host} not allowed"
        if host not in tls_hosts:
            assert allowed(origins, f"http://{host}"), f"Origin http://{host} not allowed"
    assert not allowed(hosts, "evil.example.com"), "any Host allowed"
    assert not allowed(origins, "https://evil.example.com"), "any Origin allowed"

    # Spreading and disruption budget select the pods.
    for c in spec.get("topologySpreadConstraints", []):
        assert selects(c["labelSelector"]["matchLabels"]), c
    for pdb in find(docs, "PodDisruptionBudget"):
        assert selects(pdb["spec"]["selector"]["matchLabels"]), "PDB selector"
    for hpa in find(docs, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", fullname)
        assert "replicas" not in deployment["spec"], "replicas fixed under an HPA"

    # ServiceMonitor: a Service it selects exposes the admin port as named.
    for monitor in find(docs, "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        chosen = [s for s in find(docs, "Service")
                  if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        assert [s["metadata"]["name"] for s in chosen] == [f"{fullname}-admin"], chosen
        admin = chosen[0]
        assert selects(admin["spec"]["selector"])
        for endpoint in monitor["spec"]["endpoints"]:
            port = [p for p in admin["spec"]["ports"] if p["name"] == endpoint["port"]]
            assert port, f"ServiceMonitor port {endpoint['port']} not on {fullname}-admin"
            assert chart.container_port(container, port[0]["targetPort"]) == admin_port
            assert endpoint["path"] == "/metrics"

    # Authorization: the variables, the file, the routes to the metadata.
    check_auth(docs, deployment, container, env, hosts)

    # The `helm test` pod: through the Service, as a hook.
    test_pods = [p for p in find(docs, "Pod")
                 if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert len(test_pods) == 1, "one helm test pod"
    test_env = env_list(test_pods[0]["spec"]["containers"][0])
    endpoint = values.get("MCP_HTTP__ENDPOINT", "/mcp")
    scheme = "https" if "MCP_TLS__CERT_FILE" in env else "http"
    assert test_env["MCP_URL"]["value"] == f"{scheme}://{fullname}:{svc_port}{endpoint}"

    # TLS and the files the node reads from mounted ConfigMaps and Secrets.
    check_files(deployment, container, env, service, test_env)


# The node's variables naming a file, and the volume type each may come from.
FILE_VARIABLES = {
    "MCP_TLS__CERT_FILE": ("secret",),
    "MCP_TLS__KEY_FILE": ("secret",),
    "MCP_AUTH__CA_FILE": ("configMap", "secret"),
    "MCP_REDIS_CA_FILE": ("configMap", "secret"),
}


def mounted_file(deployment, container, path):
    """The volume and key a file path of the container comes from: the
    read-only mount holding it (no subPath, which the kubelet would never
    update) and the volume's item projecting that file. (volume, key)."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            assert mount.get("readOnly") is True and "subPath" not in mount, mount
            volume = volumes[mount["name"]]
            source = volume.get("secret") or volume.get("configMap")
            items = {i["path"]: i["key"] for i in source.get("items", [])}
            name = path[len(prefix):]
            assert name in items, f"{path}: {mount['name']} projects {sorted(items)}"
            return volume, items[name]
    raise AssertionError(f"{path} is on no volume mount")


def check_files(deployment, container, env, service, test_env):
    """Every file variable names a file projected by a read-only mount of a
    ConfigMap or Secret. With MCP_TLS__* (tls.enabled): both files from one
    Secret, a reload interval, the Service's appProtocol https and the test
    pod on https; the probes stay plain HTTP (checked above). Without: no
    MCP_TLS__ variable, appProtocol http."""
    for name, kinds in FILE_VARIABLES.items():
        if name in env:
            volume, _ = mounted_file(deployment, container, env[name]["value"])
            assert any(kind in volume for kind in kinds), (name, volume)
    tls = [n for n in env if n.startswith("MCP_TLS__")]
    if not tls:
        assert service["spec"]["ports"][0]["appProtocol"] == "http", service
        assert "CURL_TLS" not in test_env
        return
    assert sorted(tls) == ["MCP_TLS__CERT_FILE", "MCP_TLS__KEY_FILE",
                           "MCP_TLS__RELOAD_INTERVAL_SECS"], tls
    cert, _ = mounted_file(deployment, container, env["MCP_TLS__CERT_FILE"]["value"])
    key, _ = mounted_file(deployment, container, env["MCP_TLS__KEY_FILE"]["value"])
    assert cert is key and "secret" in cert, (cert, key)
    assert int(env["MCP_TLS__RELOAD_INTERVAL_SECS"]["value"]) >= 1
    assert service["spec"]["ports"][0]["appProtocol"] == "https", service
    assert test_env["CURL_TLS"]["value"] == "--insecure", test_env


METADATA_PATH = "/.well-known/oauth-protected-resource"
CONFIG_DIR = "/etc/mcp-node"


def config_map(docs, deployment):
    """The node's rendered TOML file (ConfigMap <fullname>-config), parsed,
    or None."""
    maps = find(docs, "ConfigMap", f"{deployment['metadata']['name']}-config")
    if not maps:
        return None
    return tomllib.loads(maps[0]["data"]["mcp-node.toml"])


def check_auth(docs, deployment, container, env, hosts):
    """With MCP_AUTH__RESOURCE (auth.enabled): the resource's host is an
    allowed Host, every Ingress host routes the protected resource metadata,
    the tool scopes reach the node as its --config file (mounted from the
    ConfigMap, the pods rolled by its checksum) and the helm test pod knows
    the resource. Without: no MCP_AUTH__ variable, no file."""
    args = container.get("args", [])
    toml = config_map(docs, deployment)
    test_pod = [p for p in find(docs, "Pod")
                if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"][0]
    test_env = env_list(test_pod["spec"]["containers"][0])
    if "MCP_AUTH__RESOURCE" not in env:
        assert not [n for n in env if n.startswith("MCP_AUTH__")], sorted(env)
        assert "auth" not in (toml or {}), toml
        # A file only for upstreams (checked with their value set).
        assert (toml is None) == ("--config" not in args), args
        assert "MCP_RESOURCE" not in test_env
        return
    resource = env["MCP_AUTH__RESOURCE"]["value"]
    assert re.fullmatch(r"https://[^/?#\s,]+(/[^?#\s,]*)?", resource), resource
    host = urlsplit(resource).hostname
    assert allowed(hosts, host) and allowed(hosts, f"{host}:443"), \
        f"the resource's host {host} is not an allowed Host: {hosts}"
    for ing in find(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            routed = [p for p in rule["http"]["paths"]
                      if p["pathType"] != "Exact"
                      and (METADATA_PATH + "/").startswith(p["path"].rstrip("/") + "/")]
            assert routed, f"Ingress host {rule['host']} does not route {METADATA_PATH}"
    if env.get("MCP_AUTH__INTROSPECTION__CLIENT_ID"):
        ref = env["MCP_AUTH__INTROSPECTION__CLIENT_SECRET"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] and ref["key"], ref
    if toml is None:
        assert "--config" not in args, args
    else:
        assert set(toml) - {"upstreams"} == {"auth"} and set(toml["auth"]) == {"tool_scopes"}, toml
        assert args[:2] == ["--config", f"{CONFIG_DIR}/mcp-node.toml"], args
        mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
        assert mounts["config"]["mountPath"] == CONFIG_DIR and mounts["config"]["readOnly"]
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == \
            f"{deployment['metadata']['name']}-config", volumes
        assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]
    assert test_env["MCP_RESOURCE"]["value"] == resource, test_env


def vs_cluster_domain(docs):
    """The cluster domain the chart used: from the longest Service name."""
    hosts = env_list(node_container(docs)[1])["MCP_ALLOWED_HOSTS"]["value"].split(",")
    name = one(docs, "Deployment")["metadata"]["name"]
    for host in hosts:
        prefix = f"{name}."
        if host.startswith(prefix) and ".svc." in host:
            return host.split(".svc.", 1)[1].removesuffix(":*")
    raise AssertionError("no fully qualified Service name in MCP_ALLOWED_HOSTS")


# Per-set expectations -----------------------------------------------------------

def expect_defaults(docs):
    deployment, container = node_container(docs)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Deployment", "Pod", "PodDisruptionBudget", "Secret", "Service",
                     "ServiceAccount"], kinds
    assert deployment["spec"]["replicas"] == 3
    assert one(docs, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
    spec = deployment["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 2 + 5 + 30 + 10
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "2"]
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert values["MCP_BIND"] == "0.0.0.0:8080" and values["MCP_ADMIN_BIND"] == "0.0.0.0:9090"
    assert values["MCP_ALLOWED_HOSTS"] == (
        "mcp-node:*,mcp-node.default:*,mcp-node.default.svc:*,"
        "mcp-node.default.svc.cluster.local:*,localhost:*,127.0.0.1:*,[::1]:*")
    assert "checksum/redis-secret" in deployment["spec"]["template"]["metadata"]["annotations"]
    assert container["image"] == "mcp-node:0.1.0"
    assert chart.secret_value(docs, "mcp-node-redis", "redis-url") == "redis://redis:6379/"


def expect_full(docs):
    deployment, container = node_container(docs)
    for kind in ("Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceMonitor"):
        assert find(docs, kind), f"no {kind}"
    values = {e["name"]: e.get("value") for e in container["env"]}
    # Every config key reaches its variable.
    assert {k: values.get(k) for k in (
        "MCP_REDIS__KEY_PREFIX", "MCP_REDIS__COMMAND_TIMEOUT_MS", "MCP_REDIS__REPLICA_ACKS",
        "MCP_REDIS__REPLICA_ACK_TIMEOUT_MS", "MCP_DRAIN_DELAY_SECS",
        "MCP_DRAIN_GRACE_SECS", "MCP_SESSION_TTL_SECS", "MCP_MAX_SESSIONS",
        "MCP_MAX_IN_FLIGHT", "MCP_MAX_BODY_BYTES", "MCP_REQUEST_TIMEOUT_SECS",
        "MCP_RESPONSE_MODE", "MCP_WORKERS", "MCP_KEEP_ALIVE_SECS",
        "MCP_REQUEST_BODY_TIMEOUT_SECS", "MCP_SSE_WRITE_STALL_TIMEOUT_SECS",
        "MCP_MAX_CONNECTIONS",
        "MCP_MAX_CONNECTIONS_PER_PEER", "MCP_CONNECTION_LIMIT_EXEMPT", "MCP_PAGE_SIZE",
        "MCP_SKILLS_DIR", "MCP_LOG", "MCP_LOG_JSON", "MCP_RUNTIME__SSE_KEEP_ALIVE_SECS")} == {
        "MCP_REDIS__KEY_PREFIX": "mcp-prod", "MCP_REDIS__COMMAND_TIMEOUT_MS": "500",
        "MCP_REDIS__REPLICA_ACKS": "1", "MCP_REDIS__REPLICA_ACK_TIMEOUT_MS": "250",
        "MCP_DRAIN_DELAY_SECS": "10", "MCP_DRAIN_GRACE_SECS": "60",
        "MCP_SESSION_TTL_SECS": "3600", "MCP_MAX_SESSIONS": "20000",
        "MCP_MAX_IN_FLIGHT": "32", "MCP_MAX_BODY_BYTES": "8388608",
        "MCP_REQUEST_TIMEOUT_SECS": "300", "MCP_RESPONSE_MODE": "sse", "MCP_WORKERS": "4",
        "MCP_KEEP_ALIVE_SECS": "5", "MCP_REQUEST_BODY_TIMEOUT_SECS": "20",
        "MCP_SSE_WRITE_STALL_TIMEOUT_SECS": "45",
        "MCP_MAX_CONNECTIONS": "50000", "MCP_MAX_CONNECTIONS_PER_PEER": "1000",
        "MCP_CONNECTION_LIMIT_EXEMPT": "10.244.0.0/16,127.0.0.1,::1", "MCP_PAGE_SIZE": "50",
        "MCP_SKILLS_DIR": "/srv/skills", "MCP_LOG": "info,mcp_cluster_runtime=debug", "MCP_LOG_JSON": "true",
        "MCP_RUNTIME__SSE_KEEP_ALIVE_SECS": "10"}, values
    # The quotas and who the client is behind the ingress; 0 (off) reaches
    # the node too.
    assert {k: values.get(k) for k in (
        "MCP_TRUSTED_PROXIES", "MCP_QUOTA_INITIALIZE_PER_ADDRESS",
        "MCP_QUOTA_REQUESTS_PER_PRINCIPAL", "MCP_QUOTA_SESSIONS_PER_PRINCIPAL",
        "MCP_QUOTA_STREAMS_PER_PRINCIPAL", "MCP_QUOTA_LISTEN_STREAMS_PER_ADDRESS",
        "MCP_QUOTA_TASKS_PER_PRINCIPAL", "MCP_QUOTA_TASKS_PER_ADDRESS",
        "MCP_QUOTA_REQUESTS_PER_ADDRESS", "MCP_QUOTA_STREAMS_PER_ADDRESS",
        "MCP_QUOTA_IN_FLIGHT_BYTES_PER_CLIENT")} == {
        "MCP_TRUSTED_PROXIES": "10.244.0.0/16,127.0.0.1,::1",
        "MCP_QUOTA_INITIALIZE_PER_ADDRESS": "120", "MCP_QUOTA_REQUESTS_PER_PRINCIPAL": "3000",
        "MCP_QUOTA_SESSIONS_PER_PRINCIPAL": "50", "MCP_QUOTA_STREAMS_PER_PRINCIPAL": "0",
        "MCP_QUOTA_LISTEN_STREAMS_PER_ADDRESS": "40", "MCP_QUOTA_TASKS_PER_PRINCIPAL": "30",
        "MCP_QUOTA_TASKS_PER_ADDRESS": "0", "MCP_QUOTA_REQUESTS_PER_ADDRESS": "2400",
        "MCP_QUOTA_STREAMS_PER_ADDRESS": "0",
        "MCP_QUOTA_IN_FLIGHT_BYTES_PER_CLIENT": "4194304"}, values
    # The server card, each key its variable (the node checks them at start).
    assert {k: v for k, v in values.items() if k.startswith("MCP_SERVER_CARD__")} == {
        "MCP_SERVER_CARD__NAME": "com.example/tools",
        "MCP_SERVER_CARD__DESCRIPTION": "Example tools behind a three-node MCP cluster.",
        "MCP_SERVER_CARD__TITLE": "Example tools", "MCP_SERVER_CARD__VERSION": "2.1.0",
        "MCP_SERVER_CARD__WEBSITE_URL": "https://example.com/tools",
        "MCP_SERVER_CARD__PUBLIC_URL": "https://mcp.example.com",
        "MCP_SERVER_CARD__PUBLISH_TOOLS": "true"}, values
    spec = deployment["spec"]["template"]["spec"]
    # extraVolumes and extraVolumeMounts, beside the chart's own.
    assert {"name": "upstream-token", "secret": {"secretName": "upstream-token"}} in spec["volumes"]
    assert {"name": "upstream-token", "mountPath": "/var/run/secrets/upstream",
            "readOnly": True} in container["volumeMounts"]
    assert spec["terminationGracePeriodSeconds"] == 2 + 10 + 60 + 10
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    assert "maxUnavailable" not in one(docs, "PodDisruptionBudget")["spec"]
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 12)
    origins = values["MCP_ALLOWED_ORIGINS"].split(",")
    # TLS host: https only; the other host: both schemes.
    assert "https://mcp.example.com:*" in origins and "http://mcp.example.com:*" not in origins
    assert "http://tools.example.org:*" in origins
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    # The scraped series carry the job the rules select.
    assert {"action": "replace", "targetLabel": "job", "replacement": "mcp-prod"} in \
        monitor["spec"]["endpoints"][0]["relabelings"], monitor
    # The alert rules: deploy/'s, selecting that job.
    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    shipped = yaml.safe_load(
        (ROOT / "deploy/prometheus/rules/mcp-node.rules.yml").read_text()
        .replace('job="mcp-node"', 'job="mcp-prod"'))
    assert rule["spec"]["groups"] == shipped["groups"], "PrometheusRule differs from deploy/"
    assert 'job="mcp-node"' not in json.dumps(rule["spec"])
    # The dashboard, for the Grafana sidecar.
    dashboard = one(docs, "ConfigMap", "mcp-node-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"]["grafana_folder"] == "MCP"
    assert json.loads(dashboard["data"]["mcp-node-dashboard.json"]) == json.loads(
        (ROOT / "deploy/grafana/mcp-node-dashboard.json").read_text())
    labels = deployment["spec"]["template"]["metadata"]
    assert labels["labels"]["example.com/tier"] == "backend"
    assert labels["annotations"]["example.com/team"] == "tools"


def check_shipped_copies():
    """The chart's files/ are the very files of deploy/ (a chart can only read
    files inside itself)."""
    for chart_file, source in (
            ("mcp-node.rules.yml", "deploy/prometheus/rules/mcp-node.rules.yml"),
            ("mcp-node-dashboard.json", "deploy/grafana/mcp-node-dashboard.json")):
        copy_text = (CHART / "files" / chart_file).read_text()
        assert copy_text == (ROOT / source).read_text(), \
            f"helm/mcp-node/files/{chart_file} differs from {source}: copy it again"


def expect_existing_secret(docs):
    deployment, container = node_container(docs)
    assert not find(docs, "Secret"), "a Secret rendered although redis.existingSecret is set"
    assert not find(docs, "ServiceAccount") and not find(docs, "PodDisruptionBudget")
    ref = env_list(container)["MCP_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "shared-redis", "key": "url"}, ref
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "default"
    assert "lifecycle" not in container
    assert spec["terminationGracePeriodSeconds"] == 60
    assert "annotations" not in deployment["spec"]["template"]["metadata"]
    assert container["image"] == ("registry.example.com/mcp/mcp-node@sha256:"
                                  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")


def expect_extra_hosts(docs):
    _, container = node_container(docs)
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert values["MCP_ALLOWED_HOSTS"] == (
        "tools:*,tools.edge-ns:*,tools.edge-ns.svc:*,tools.edge-ns.svc.corp.internal:*,"
        "mcp.corp.example,203.0.113.10:80"), values["MCP_ALLOWED_HOSTS"]
    assert values["MCP_ALLOWED_ORIGINS"] == "https://console.corp.example"
    service = one(docs, "Service", "tools")
    assert service["spec"]["type"] == "LoadBalancer" and service["spec"]["ports"][0]["port"] == 80


def expect_e2e(docs):
    _, container = node_container(docs)
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert "mcp.example.com:*" in values["MCP_ALLOWED_HOSTS"].split(",")
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["path"] == "/metrics"


def env_values(docs):
    _, container = node_container(docs)
    return {e["name"]: e.get("value") for e in container["env"]}


def auth_values(docs):
    return {k: v for k, v in env_values(docs).items() if k.startswith("MCP_AUTH__")}


def expect_keycloak(docs):
    assert auth_values(docs) == {
        "MCP_AUTH__RESOURCE": "https://mcp.example.com/mcp",
        "MCP_AUTH__ISSUERS": "https://keycloak.example.com/realms/mcp",
        "MCP_AUTH__REQUIRED_SCOPES": "mcp:tools",
        "MCP_AUTH__RESOURCE_NAME": "MCP tools"}, auth_values(docs)
    assert config_map(docs, one(docs, "Deployment")) == {
        "auth": {"tool_scopes": {"touch_resource": ["mcp:write"]}}}


def expect_auth0(docs):
    assert auth_values(docs) == {
        "MCP_AUTH__RESOURCE": "https://mcp.example.com/mcp",
        "MCP_AUTH__ISSUERS": "https://example-tenant.auth0.com/",
        "MCP_AUTH__REQUIRED_SCOPES": "mcp:tools"}, auth_values(docs)
    assert config_map(docs, one(docs, "Deployment")) == {
        "auth": {"tool_scopes": {"touch_resource": ["mcp:write"]}}}


def expect_entra_id(docs):
    app = "11111111-1111-1111-1111-111111111111"
    assert auth_values(docs) == {
        "MCP_AUTH__RESOURCE": "https://mcp.example.com/mcp",
        "MCP_AUTH__ISSUERS":
            "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/v2.0",
        "MCP_AUTH__AUDIENCES": app,
        "MCP_AUTH__REQUIRED_SCOPES": "mcp.tools",
        "MCP_AUTH__SCOPES_SUPPORTED": f"api://{app}/mcp.tools,api://{app}/mcp.write"}, \
        auth_values(docs)
    assert config_map(docs, one(docs, "Deployment")) == {
        "auth": {"tool_scopes": {"touch_resource": ["mcp.write"]}}}


def expect_auth_introspection(docs):
    _, container = node_container(docs)
    assert auth_values(docs) == {
        "MCP_AUTH__RESOURCE": "https://tools.example.org/mcp",
        "MCP_AUTH__AUDIENCES": "urn:example:mcp,mcp-tools",
        "MCP_AUTH__REQUIRED_SCOPES": "mcp",
        "MCP_AUTH__SCOPES_SUPPORTED": "mcp,mcp:admin",
        "MCP_AUTH__ALGORITHMS": "ES256,EdDSA",
        "MCP_AUTH__LEEWAY_SECS": "5",
        "MCP_AUTH__RESOURCE_NAME": "Example tools",
        "MCP_AUTH__INTROSPECTION__ENDPOINT": "https://idp.example.org/oauth2/introspect",
        "MCP_AUTH__INTROSPECTION__CLIENT_ID": "mcp-resource-server",
        "MCP_AUTH__INTROSPECTION__CLIENT_SECRET": None,
        "MCP_AUTH__INTROSPECTION__CALLS_PER_ADDRESS": "20",
        "MCP_AUTH__INTROSPECTION__CALLS_PER_SECOND": "0",
        "MCP_AUTH__INTROSPECTION__RESERVED_CALLS_PER_SECOND": "0",
        "MCP_AUTH__INTROSPECTION__RESERVED_CALLS_PER_ADDRESS": "3",
        "MCP_AUTH__CA_FILE": "/etc/mcp/auth-ca/ca.crt"}, auth_values(docs)
    # The private CA: that key alone of the Secret, read-only.
    volume, key = mounted_file(*node_container(docs), "/etc/mcp/auth-ca/ca.crt")
    assert volume["secret"] == {"secretName": "idp-ca",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}]}, volume
    ref = env_list(container)["MCP_AUTH__INTROSPECTION__CLIENT_SECRET"]["valueFrom"]
    assert ref == {"secretKeyRef": {"name": "idp-introspection", "key": "secret"}}, ref
    # The chart renders no Secret for it: it only names one.
    assert [s["metadata"]["name"] for s in find(docs, "Secret")] == ["mcp-node-redis"]
    assert config_map(docs, one(docs, "Deployment")) == {"auth": {"tool_scopes": {
        "add": ["mcp:admin"], "test_simple_text": ["mcp:admin", "mcp:read"]}}}
    # The Exact path stays; the metadata is routed beside it.
    paths = one(docs, "Ingress")["spec"]["rules"][0]["http"]["paths"]
    assert [(p["path"], p["pathType"]) for p in paths] == [
        ("/mcp", "Exact"), (METADATA_PATH, "Prefix")], paths


def expect_tls(docs):
    deployment, container = node_container(docs)
    values = env_values(docs)
    assert {k: v for k, v in values.items() if "TLS" in k or "CA_FILE" in k} == {
        "MCP_TLS__CERT_FILE": "/etc/mcp/tls/tls.crt",
        "MCP_TLS__KEY_FILE": "/etc/mcp/tls/tls.key",
        "MCP_TLS__RELOAD_INTERVAL_SECS": "5",
        "MCP_REDIS_CA_FILE": "/etc/mcp/redis-ca/ca-bundle.pem"}, values
    assert chart.secret_value(docs, "mcp-node-redis", "redis-url") == \
        "rediss://redis.data.svc:6380/"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "mcp-node-cert", "items": [
        {"key": "fullchain.pem", "path": "tls.crt"},
        {"key": "privkey.pem", "path": "tls.key"}]}, volumes
    assert volumes["redis-ca"]["configMap"] == {"name": "redis-ca", "items": [
        {"key": "ca-bundle.pem", "path": "ca-bundle.pem"}]}, volumes
    assert sorted(volumes) == ["redis-ca", "tls"], sorted(volumes)
    # Neither the certificate nor a CA changes the origins browsers use.
    origins = values["MCP_ALLOWED_ORIGINS"].split(",")
    assert "https://mcp.example.com:*" in origins and "http://mcp.example.com:*" not in origins


def expect_upstreams(docs):
    """upstreams: one [[upstreams]] table in the node's configuration file,
    every key as given (the node accepting it is check_binary_accepts)."""
    deployment, container = node_container(docs)
    assert config_map(docs, deployment) == {"upstreams": [{
        "name": "everything",
        "command": ["node", "/app/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
                    "stdio"],
        "env": {"API_BASE": "https://api.example.com", "QUOTED": 'a "quoted" value'},
        "inherit_env": ["PATH", "HOME"],
        "max_children": 64,
        "initialize_timeout_secs": 10,
        "tasks": "optional",
        "tool_tasks": {"slow_report": "required"},
        "pool_idle_per_key": 8,
    }]}, config_map(docs, deployment)
    assert "--config" in container["args"], container["args"]


def expect_upstreams_http(docs):
    """upstreams with urls: an HTTP server's replicas, as given."""
    deployment, container = node_container(docs)
    assert config_map(docs, deployment) == {"upstreams": [{
        "name": "replicas",
        "urls": ["http://upstream-0.upstream:8080/mcp", "http://upstream-1.upstream:8080/mcp"],
        "connect_timeout_secs": 3,
    }]}, config_map(docs, deployment)
    assert "--config" in container["args"], container["args"]


def expect_upstreams_federation(docs):
    """Several upstreams: each its own [[upstreams]] table, in order, and the
    separator as a top-level key before them."""
    deployment, container = node_container(docs)
    assert config_map(docs, deployment) == {
        "upstream_separator": ".",
        "upstreams": [
            {"name": "files", "command": ["/opt/files/bin/mcp-files"]},
            {"name": "time", "command": ["/opt/time/bin/mcp-server-time"], "prefix": False},
        ],
    }, config_map(docs, deployment)
    assert "--config" in container["args"], container["args"]


EXAMPLES = CHART / "examples"

VALUE_SETS = [
    ValueSet("defaults", [], expect=expect_defaults),
    ValueSet("full", ["values-full.yaml"], namespace="prod", expect=expect_full),
    ValueSet("existing-secret", ["values-existing-secret.yaml"], release="mcp",
             external_secrets={("shared-redis", "url"): None},
             expect=expect_existing_secret),
    ValueSet("extra-hosts", ["values-extra-hosts.yaml"], release="edge", namespace="edge-ns",
             expect=expect_extra_hosts),
    ValueSet("e2e-values", ["values-e2e.yaml"], expect=expect_e2e),
    ValueSet("tls", ["values-tls.yaml"], expect=expect_tls),
    ValueSet("upstreams", ["values-upstreams.yaml"], expect=expect_upstreams),
    ValueSet("upstreams-http", ["values-upstreams-http.yaml"], expect=expect_upstreams_http),
    ValueSet("upstreams-federation", ["values-upstreams-federation.yaml"],
             expect=expect_upstreams_federation),
    ValueSet("keycloak", [EXAMPLES / "keycloak.yaml"], expect=expect_keycloak),
    ValueSet("auth0", [EXAMPLES / "auth0.yaml"], namespace="mcp", expect=expect_auth0),
    ValueSet("entra-id", [EXAMPLES / "entra-id.yaml"], release="tools",
             expect=expect_entra_id),
    ValueSet("auth-introspection", ["values-auth-introspection.yaml"],
             external_secrets={("idp-introspection", "secret"): "introspection-secret"},
             expect=expect_auth_introspection),
]


# NOTES.txt ------------------------------------------------------------------------

def render_notes(vs):
    """NOTES.txt as `helm install` prints it. `helm template` skips NOTES.txt,
    so a copy of the chart carries its text, unchanged, in a template that
    renders it as a YAML string."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = Path(tmp) / "mcp-node"
        shutil.copytree(CHART, copy_dir)
        notes = (copy_dir / "templates" / "NOTES.txt").read_text()
        (copy_dir / "templates" / "notes-under-test.yaml").write_text(
            '{{- define "notes-under-test" -}}\n' + notes + "\n{{- end }}\n"
            'notes: {{ include "notes-under-test" . | toJson }}\n')
        args = chart.template_args(vs.release, vs.namespace, vs.files, chart=copy_dir)
        out = chart.helm(*args, "--show-only", "templates/notes-under-test.yaml")
    text = yaml.safe_load(out)["notes"]
    (LOG_DIR / f"helm-notes-{vs.name}.txt").write_text(text)
    deployment, container = node_container(chart.render(vs.release, vs.namespace, vs.files))
    hosts = env_list(container)["MCP_ALLOWED_HOSTS"]["value"]
    assert f"Allowed Host values (others get 403): {hosts}" in text, text
    assert f"helm test {vs.release} -n {vs.namespace}" in text, text
    return text


def expect_notes(vs, text):
    """What NOTES.txt must say for this value set."""
    warnings = {
        "defaults": ["redis.url is the chart's default"],
        "full": ["https://mcp.example.com/mcp", "https://tools.example.org/mcp",
                 "AUTHORIZATION IS OFF and the Service is exposed by an Ingress"],
        "existing-secret": ["URL from Secret shared-redis, key url"],
        "extra-hosts": ["The Service is of type LoadBalancer",
                        "config.allowLoopback is off",
                        "AUTHORIZATION IS OFF and the Service is exposed by a LoadBalancer Service"],
        "e2e-values": ["http://mcp.example.com/mcp", "list\nits pod network in config.connectionLimitExempt",
                       "config.trustedProxies (X-Forwarded-For then names the client)",
                       "AUTHORIZATION IS OFF and the Service is exposed by an Ingress"],
        "keycloak": ["Authorization is on", "https://keycloak.example.com/realms/mcp",
                     "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
                     "touch_resource: mcp:write", "Bearer $TOKEN"],
        "auth0": ["with aud https://mcp.example.com/mcp.", "https://example-tenant.auth0.com/"],
        "entra-id": ["(or 11111111-1111-1111-1111-111111111111)"],
        "tls": ["https://mcp-node.default.svc.cluster.local:8080/mcp",
                "certificate and key of Secret mcp-node-cert\n(keys fullchain.pem, privkey.pem), read again every 5 s",
                "The pods speak HTTPS only", "curl -si https://localhost:8080/mcp",
                "--cacert ca.crt"],
        "upstreams": ["The nodes host the MCP server everything (node /app/node_modules/",
                      "so node must be in the image", "the Service needs no session affinity"],
        "upstreams-federation": ["One endpoint serves these 2 servers as one (a federation):",
                                 "files: tools and prompts named files.<name>, resource URIs files+<uri>",
                                 "time: tools, prompts and resource URIs keep their own names",
                                 "so /opt/time/bin/mcp-server-time must be in the image",
                                 "stop the pods at start (exit 64"],
        "upstreams-http": ["The nodes host the MCP server replicas at http://upstream-0.upstream:8080/mcp,",
                           "at the replicas in turn", "the Service needs no session affinity"],
        "auth-introspection": ["the introspection endpoint's server",
                               "https://tools.example.org/.well-known/oauth-protected-resource/mcp",
                               "test_simple_text: mcp:admin mcp:read"],
    }[vs.name]
    if "Authorization is on" in text:
        assert "AUTHORIZATION IS OFF" not in text, text
    if vs.name != "tls":
        assert "serve HTTPS" not in text and "--cacert" not in text, text
    for warning in warnings:
        assert warning in text, f"NOTES.txt lacks {warning!r}:\n{text}"


# The real binary ------------------------------------------------------------------

def loopback(url, port):
    """url with its scheme and authority replaced by http://127.0.0.1:port:
    the node's calls to it go nowhere but a closed loopback port."""
    return f"http://127.0.0.1:{port}{urlsplit(url).path}"


def check_binary_accepts(vs, docs):
    """mcp-node started with the rendered environment (listeners moved to
    127.0.0.1 port 0, Redis pointing at a closed loopback port) and, when the
    chart renders one, the ConfigMap's file as --config: it binds, waits for
    Redis, warns about no unknown MCP_ variable, and SIGTERM ends it with 0.
    With authorization on, issuers and the introspection endpoint point at a
    closed loopback port too (their path kept): the node starts without them,
    its metadata must say what the values say, and the helm test pod's script
    must pass against it."""
    deployment, container = node_container(docs)
    closed_port = chart.free_port()
    closed = f"redis://127.0.0.1:{closed_port}/"
    secrets = {key: closed if value is None else value
               for key, value in vs.external_secrets.items()}
    authorization = any(e["name"] == "MCP_AUTH__RESOURCE" for e in container.get("env", []))
    pod = {"name": "config-check", "namespace": vs.namespace, "ip": "127.0.0.1",
           "labels": deployment["spec"]["template"]["metadata"]["labels"],
           "serviceAccountName": deployment["spec"]["template"]["spec"]["serviceAccountName"]}
    env = chart.resolve_env(docs, container, pod, secrets)
    # rediss:// stays rediss:// (MCP_REDIS_CA_FILE needs it).
    scheme = env["MCP_REDIS_URL"].split("://", 1)[0]
    env["MCP_REDIS_URL"] = f"{scheme}://127.0.0.1:{closed_port}/"
    env["MCP_BIND"] = "127.0.0.1:0"
    env["MCP_ADMIN_BIND"] = "127.0.0.1:0"
    # A folder of skills in the image: here, the repository's.
    if env.get("MCP_SKILLS_DIR"):
        env["MCP_SKILLS_DIR"] = str(ROOT / "tests" / "skills")
    rendered = dict(env)
    if env.get("MCP_AUTH__ISSUERS"):
        env["MCP_AUTH__ISSUERS"] = ",".join(
            loopback(u, closed_port) for u in env["MCP_AUTH__ISSUERS"].split(","))
    if env.get("MCP_AUTH__INTROSPECTION__ENDPOINT"):
        env["MCP_AUTH__INTROSPECTION__ENDPOINT"] = loopback(
            env["MCP_AUTH__INTROSPECTION__ENDPOINT"], closed_port)
    log = LOG_DIR / f"helm-config-{vs.name}.log"
    out = LOG_DIR / f"helm-config-{vs.name}.out"
    args = list(container.get("args", []))
    redis = None
    if authorization:
        # A node serves its routes (and so the authorization checks) only
        # once connected to its store: a real Redis, on loopback.
        redis_port = chart.free_port()
        env["MCP_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/"
        with open(LOG_DIR / f"helm-config-{vs.name}-redis.log", "w") as redis_log:
            redis = subprocess.Popen(
                [e2e.binary("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"],
                stdout=redis_log, stderr=subprocess.STDOUT)
    with tempfile.TemporaryDirectory() as tmp:
        tls_cert = mount_files(deployment, container, env, Path(tmp))
        if "--config" in args:
            # The ConfigMap's file, where the pod would have it mounted.
            at = args.index("--config") + 1
            maps = one(docs, "ConfigMap", f"{deployment['metadata']['name']}-config")
            name = Path(args[at]).name
            (Path(tmp) / name).write_text(maps["data"][name])
            args[at] = str(Path(tmp) / name)
        with open(log, "w") as err, open(out, "w") as stdout:
            proc = subprocess.Popen([str(NODE), *args], env=env, stdout=stdout, stderr=err)
        try:
            chart.wait_for("the node's listeners",
                           lambda: proc.poll() is not None
                           or "mcp-node probes on" in out.read_text(),
                           timeout=20)
            assert proc.poll() is None, f"mcp-node exited {proc.returncode}: {log.read_text()}"
            listening = re.search(r"mcp-node listening on (?:\w+://)?127\.0\.0\.1:(\d+)",
                                  out.read_text())
            assert listening, out.read_text()
            if tls_cert:
                check_https(int(listening.group(1)), tls_cert)
            if authorization:
                probes = re.search(r"mcp-node probes on http://127\.0\.0\.1:(\d+)",
                                   out.read_text())
                assert probes, out.read_text()
                chart.wait_for("readiness with Redis up",
                               lambda: ready(int(probes.group(1))), timeout=15, interval=0.1)
                check_node_auth(docs, rendered, env, int(listening.group(1)), log)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=15)
            assert code == 0, f"exit {code} on SIGTERM: {log.read_text()}"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if redis is not None:
                redis.terminate()
                redis.wait(timeout=10)
    text = log.read_text()
    assert "Unknown MCP_ environment variable" not in text, \
        [l for l in text.splitlines() if "Unknown MCP_" in l]


def mount_files(deployment, container, env, tmp):
    """The files the rendered variables name (FILE_VARIABLES), made where the
    pod would have them mounted, moved under tmp: a self-signed certificate
    for 127.0.0.1 and its key for MCP_TLS__*, that certificate as the CA
    file of MCP_AUTH__CA_FILE and MCP_REDIS_CA_FILE. env is changed to name
    them; returns the certificate's path (None without one)."""
    named = [n for n in FILE_VARIABLES if n in env]
    if not named:
        return None
    cert, key = tmp / "self-signed.crt", tmp / "self-signed.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    for name in named:
        path = env[name]
        mounted_file(deployment, container, path)
        moved = tmp / "mounts" / path.lstrip("/")
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(key if name == "MCP_TLS__KEY_FILE" else cert, moved)
        env[name] = str(moved)
    return cert if "MCP_TLS__CERT_FILE" in named else None


def check_https(port, ca_file):
    """The main listener speaks HTTPS with the mounted certificate."""
    context = ssl.create_default_context(cafile=str(ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request("GET", "/healthz", headers={"Host": "localhost"})
        status = conn.getresponse().status
    finally:
        conn.close()
    assert 200 <= status < 500, status


def ready(admin_port):
    """GET /readyz on the admin listener answers 200."""
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=2)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def check_node_auth(docs, rendered, env, port, log):
    """The running node has authorization on as the values say: its
    protected resource metadata (RFC 9728) names the resource, the issuers,
    the scopes (scopesSupported, else the required scopes then the tool
    scopes of the --config file) and the algorithms; and the helm test pod's
    script passes against it (401 without a token, the metadata at the path
    WWW-Authenticate names, with the Service's name as Host)."""
    assert "Authorization on" in log.read_text(), log.read_text()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", METADATA_PATH, headers={"Host": "localhost"})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert resp.status == 200, f"GET {METADATA_PATH}: {resp.status} {body!r}"
    metadata = json.loads(body)
    split = lambda name: [v for v in (env.get(name) or "").split(",") if v]  # noqa: E731
    assert metadata["resource"] == rendered["MCP_AUTH__RESOURCE"], metadata
    assert metadata["authorization_servers"] == split("MCP_AUTH__ISSUERS"), metadata
    scopes = split("MCP_AUTH__SCOPES_SUPPORTED")
    if not scopes:
        scopes = split("MCP_AUTH__REQUIRED_SCOPES")
        toml = config_map(docs, one(docs, "Deployment")) or {"auth": {"tool_scopes": {}}}
        for tool in sorted(toml["auth"]["tool_scopes"]):
            scopes += [s for s in toml["auth"]["tool_scopes"][tool] if s not in scopes]
    assert metadata.get("scopes_supported", []) == scopes, (metadata, scopes)
    assert metadata["resource_signing_alg_values_supported"] == \
        (split("MCP_AUTH__ALGORITHMS") or ["RS256", "ES256"]), metadata
    if env.get("MCP_AUTH__RESOURCE_NAME"):
        assert metadata["resource_name"] == env["MCP_AUTH__RESOURCE_NAME"], metadata
    service = one(docs, "Service", one(docs, "Deployment")["metadata"]["name"])
    proc = chart.run_test_pod(docs, service["metadata"]["name"],
                              service["spec"]["ports"][0]["port"], "127.0.0.1", port)
    assert proc.returncode == 0, f"helm test script: exit {proc.returncode}: " \
                                 f"{proc.stdout}{proc.stderr}"
    assert "401 without a token; protected resource metadata" in proc.stdout, proc.stdout


# Values the chart must refuse ------------------------------------------------------

def refused_sets():
    """tests/helm/refused/*.yaml, each opening with `# refused: <text>`, the
    text helm's error must contain."""
    for path in sorted((TESTS / "refused").glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        assert first.startswith("# refused: "), f"{path.name}: no '# refused:' line"
        yield path, first.removeprefix("# refused: ")


def check_refused(path, text):
    try:
        chart.render("mcp-node", "default", [path])
    except chart.HelmError as err:
        assert text in str(err), f"refused, but not for {text!r}: {err}"
        return
    raise AssertionError("rendered; expected a refusal")


def check_validators_refuse():
    """A broken Deployment and a broken ServiceMonitor fail validation: a pass
    above means the objects were checked."""
    docs = chart.render("mcp-node", "default", [TESTS / "values-full.yaml"])
    deployment = copy.deepcopy(one(docs, "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/"
    errors = validate(deployment)
    assert len(errors) == len(KUBERNETES_VERSIONS), errors
    monitor = copy.deepcopy(one(docs, "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"
    assert validate(monitor), "a ServiceMonitor with a bad interval passed"
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "x"},
            "spec": {"groups": [{"name": "g", "rules": [{"record": "a:b", "expr": "up",
                                                          "for": "5m"}]}]}}
    assert validate(rule), "a recording rule with `for` passed"
    rule["spec"]["groups"][0]["rules"][0] = {"alert": "Down", "expr": "up", "for": "5m"}
    assert validate(rule) == [], "a good alerting rule refused"
    rule["spec"]["groups"][0]["rules"][0]["expr"] = "up =="
    errors = validate(rule)
    assert len(errors) == 1 and "promtool check rules: " in errors[0], errors


def main():
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    results = Results()
    assert NODE.exists(), f"{NODE} missing: cargo build -p mcp-node"
    for vs in VALUE_SETS:
        where = f"{vs.name} ({vs.release} in {vs.namespace})"
        lint = ["lint", "--strict", str(CHART), "--namespace", vs.namespace]
        for f in vs.files:
            lint += ["-f", str(f)]
        results.check(f"helm lint --strict: {where}", chart.helm, *lint)
        docs = results.check(f"helm template: {where}", chart.render, vs.release,
                             vs.namespace, vs.files)
        if docs is None:
            continue
        kinds = ", ".join(sorted({d["kind"] for d in docs}))
        results.check(f"{vs.name}: valid against Kubernetes {' and '.join(KUBERNETES_VERSIONS)}"
                      f" and the CRD schemas ({len(docs)} objects: {kinds})", check_valid, docs)
        results.check(f"{vs.name}: probes, shutdown, security, Redis Secret, allowed Host and"
                      " Origin, selectors, helm test pod", check_common, vs, docs)
        results.check(f"{vs.name}: its own values rendered as expected", vs.expect, docs)
        notes = results.check(f"{vs.name}: NOTES.txt renders", render_notes, vs)
        if notes is not None:
            results.check(f"{vs.name}: NOTES.txt says what this release needs", expect_notes,
                          vs, notes)
        results.check(f"{vs.name}: mcp-node accepts the rendered environment, no unknown"
                      " MCP_ variable", check_binary_accepts, vs, docs)
    for path, text in refused_sets():
        results.check(f"refused: {path.name} ({text})", check_refused, path, text)
    results.check("the validators refuse a broken Deployment, ServiceMonitor and"
                  " PrometheusRule", check_validators_refuse)
    results.check("the chart ships deploy/'s alert rules and dashboard unchanged",
                  check_shipped_copies)
    e2e.run(results, NODE, LOG_DIR)
    # A provider's own binary (mcp_cluster::cli::run around its tools) in the
    # same pods, with only the image changed.
    e2e.run(results, PROVIDER, LOG_DIR, label="e2e, a provider's binary (slow_tools)",
            echo_prefix="", subdir="helm-e2e-provider")
    print(f"{results.passed} passed, {results.failed} failed", flush=True)
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
