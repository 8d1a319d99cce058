"""End-to-end: the chart's pods as real processes.

The chart is rendered with tests/helm/values-e2e.yaml (release mcp-node in
namespace default, an Ingress host mcp.example.com) and redis.url naming a
redis-server this test starts on a free loopback port. From the rendered
Deployment, three real `mcp-node` processes (target/debug/mcp-node, the
image's entrypoint) are started with exactly the container's args and its
environment as the kubelet resolves it: MCP_REDIS_URL from the rendered
Secret through its secretKeyRef, every other variable as rendered.

One thing is changed, and only that: three pods cannot all listen on
0.0.0.0:8080 and 0.0.0.0:9090 on one machine, so each "pod" gets an address
of its own, 127.0.0.2, 127.0.0.3 and 127.0.0.4, in place of 0.0.0.0 in
MCP_BIND and MCP_ADMIN_BIND; the ports stay the chart's.

The probes are then called as the kubelet calls them: HTTP GET on the
probe's port (resolved by name from the container's ports) and path, with
the pod address in Host, success being a status from 200 to 399. nginx in
front of the three (round robin, as tests/run-all.sh's nginx_config and
mcp-cluster-testkit's Nginx) stands in for the Service and the Ingress: the MCP
sessions through it carry the Service's cluster DNS name, or the Ingress
host, in Host. Prometheus is played by a GET of the ServiceMonitor's port
and path on each pod. Steps run in order and the first failure stops the
rest (each counted as failed).
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import chart
from chart import TESTS, find, node_container, one

RELEASE = "mcp-node"
NAMESPACE = "default"
SERVICE_FQDN = f"{RELEASE}.{NAMESPACE}.svc.cluster.local"
INGRESS_HOST = "mcp.example.com"
POD_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
PROTOCOL_VERSION = "2025-11-25"
# How long the nodes may take to connect once Redis is up: their retry
# interval doubles up to 5 s (README, "Cluster").
REDIS_CONNECT_TIMEOUT_SECS = 15


def http_request(host, port, method, path, headers, body=None, timeout=10):
    """One request on a fresh connection; (status, headers with lowercase
    names, body bytes). Headers are sent as given (Host included)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def answer(headers, body, request_id):
    """The JSON-RPC answer to `request_id` in a JSON or SSE response body."""
    if headers.get("content-type", "").startswith("text/event-stream"):
        for line in body.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if message.get("id") == request_id:
                    return message
        raise AssertionError(f"no answer to {request_id} in the stream: {body!r}")
    message = json.loads(body)
    assert message.get("id") == request_id, message
    return message


class Pod:
    """One node process standing for one pod of the Deployment."""

    def __init__(self, index, address, deployment, container, docs, node, log_dir):
        self.name = f"{RELEASE}-{index}"
        self.address = address
        self.container = container
        template = deployment["spec"]["template"]
        pod = {"name": self.name, "namespace": NAMESPACE, "ip": address,
               "labels": template["metadata"]["labels"],
               "serviceAccountName": template["spec"]["serviceAccountName"]}
        self.env = chart.resolve_env(docs, container, pod)
        # The only change: this pod's own address instead of 0.0.0.0.
        for var in ("MCP_BIND", "MCP_ADMIN_BIND"):
            host, port = self.env[var].rsplit(":", 1)
            assert host == "0.0.0.0", f"{var}={self.env[var]}: expected 0.0.0.0"
            self.env[var] = f"{address}:{port}"
        assert "command" not in container, "the container's command replaces the entrypoint"
        self.args = [chart.expand(a, self.env) for a in container.get("args", [])]
        self.http_port = chart.container_port(container, "http")
        self.out = log_dir / f"{self.name}.out"
        self.err = log_dir / f"{self.name}.err"
        self.node = node
        self.proc = None

    def start(self):
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen([str(self.node), *self.args], env=self.env,
                                         stdout=out, stderr=err)

    def probe(self, name):
        """The status the kubelet's httpGet probe `name` gets, None when the
        connection fails."""
        spec = self.container[name]
        get = spec["httpGet"]
        port = chart.container_port(self.container, get["port"])
        headers = {"Host": f"{self.address}:{port}", "User-Agent": "kube-probe/1.31",
                   "Accept": "*/*", "Connection": "close"}
        for header in get.get("httpHeaders", []):
            headers[header["name"]] = header["value"]
        try:
            status, _, _ = http_request(self.address, port, "GET", get["path"], headers,
                                        timeout=spec.get("timeoutSeconds", 1))
            return status
        except OSError:
            return None

    def probe_passes(self, name):
        status = self.probe(name)
        return status is not None and 200 <= status < 400

    def logs(self):
        return self.err.read_text() if self.err.exists() else ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def nginx_config(dir_, listen_port, upstreams):
    """nginx.conf of a plain round-robin load balancer, as tests/run-all.sh's
    nginx_config writes it."""
    servers = "".join(f"        server {u} max_fails=0;\n" for u in upstreams)
    return f"""daemon off;
master_process off;
worker_processes 1;
pid {dir_}/nginx.pid;
error_log {dir_}/error.log warn;

events {{
    worker_connections 1024;
}}

http {{
    log_format upstream '$remote_addr "$request" $status host=$http_host upstream=$upstream_addr';
    access_log {dir_}/access.log upstream;
    client_body_temp_path {dir_}/client_body;
    proxy_temp_path {dir_}/proxy;
    fastcgi_temp_path {dir_}/fastcgi;
    uwsgi_temp_path {dir_}/uwsgi;
    scgi_temp_path {dir_}/scgi;

    upstream mcp {{
{servers}        keepalive 16;
        keepalive_timeout 4s;
    }}

    server {{
        listen 127.0.0.1:{listen_port};
        client_max_body_size 0;

        location / {{
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
            proxy_connect_timeout 5s;
            proxy_next_upstream error timeout;
        }}
    }}
}}
"""


def binary(name):
    found = shutil.which(name) or (f"/usr/sbin/{name}" if os.access(f"/usr/sbin/{name}", os.X_OK)
                                   else None)
    assert found, f"{name} missing: apt-get install {name if name != 'nginx' else 'nginx-light'}"
    return found


class Test:
    """The processes of the test and the steps over them."""

    def __init__(self, node, log_dir, echo_prefix, subdir):
        self.node = node
        self.echo_prefix = echo_prefix
        self.log_dir = log_dir / subdir
        shutil.rmtree(self.log_dir, ignore_errors=True)
        self.log_dir.mkdir(parents=True)
        self.pods = []
        self.redis = None
        self.nginx = None
        self.lb_port = None
        self.redis_port = chart.free_port()
        self.docs = None

    # Steps -----------------------------------------------------------------

    def render(self):
        self.docs = chart.render(RELEASE, NAMESPACE, [TESTS / "values-e2e.yaml"],
                                 [f"redis.url=redis://127.0.0.1:{self.redis_port}/"])
        self.deployment, self.container = node_container(self.docs)
        assert chart.env_list(self.container)["MCP_REDIS_URL"]["valueFrom"]["secretKeyRef"]
        for address in POD_ADDRESSES:
            for name in ("http", "admin"):
                port = chart.container_port(self.container, name)
                assert chart.port_free(address, port), \
                    f"{address}:{port} is taken (a listener on 0.0.0.0:{port}?); free it to run this test"

    def start_nodes_before_redis(self):
        """Pods may start before Redis: the startup probe and the liveness
        probe pass, readiness fails until Redis answers."""
        for i, address in enumerate(POD_ADDRESSES):
            pod = Pod(i, address, self.deployment, self.container, self.docs, self.node,
                      self.log_dir)
            pod.start()
            self.pods.append(pod)
        startup = self.container["startupProbe"]
        budget = startup["periodSeconds"] * startup["failureThreshold"]
        for pod in self.pods:
            chart.wait_for(f"{pod.name}'s startup probe",
                           lambda: pod.proc.poll() is not None or pod.probe_passes("startupProbe"),
                           timeout=budget)
            assert pod.proc.poll() is None, f"{pod.name} exited {pod.proc.returncode}: {pod.logs()}"
            assert pod.probe_passes("livenessProbe"), f"{pod.name} liveness"
            status = pod.probe("readinessProbe")
            assert status == 503, f"{pod.name} readiness {status} without Redis, expected 503"

    def start_redis(self):
        """With Redis up, readiness passes (200) on every pod, and the nodes
        reported no unknown MCP_ variable."""
        with open(self.log_dir / "redis.log", "w") as log:
            self.redis = subprocess.Popen(
                [binary("redis-server"), "--port", str(self.redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
                stdout=log, stderr=subprocess.STDOUT)
        for pod in self.pods:
            chart.wait_for(f"{pod.name}'s readiness with Redis up",
                           lambda: pod.probe("readinessProbe") == 200,
                           timeout=REDIS_CONNECT_TIMEOUT_SECS, interval=0.1)
            assert pod.probe_passes("livenessProbe")
            assert "Unknown MCP_ environment variable" not in pod.logs(), pod.logs()

    def start_nginx(self):
        binary_path = binary("nginx")
        dir_ = self.log_dir / "nginx"
        dir_.mkdir()
        upstreams = [f"{p.address}:{p.http_port}" for p in self.pods]
        for _ in range(3):
            port = chart.free_port()
            (dir_ / "nginx.conf").write_text(nginx_config(dir_, port, upstreams))
            with open(dir_ / "output.log", "w") as out:
                proc = subprocess.Popen([binary_path, "-e", str(dir_ / "error.log"), "-p",
                                         str(dir_), "-c", str(dir_ / "nginx.conf")],
                                        stdout=out, stderr=subprocess.STDOUT)
            try:
                chart.wait_for("nginx", lambda: proc.poll() is not None or connectable(port),
                               timeout=5)
            except AssertionError:
                pass
            if proc.poll() is None and connectable(port):
                self.nginx, self.lb_port = proc, port
                return
            proc.kill()
            proc.wait()
        raise AssertionError(f"nginx did not start: {(dir_ / 'output.log').read_text()}")

    def session(self, host, origin=None, tag="session"):
        """initialize, notifications/initialized, tools/list, tools/call echo,
        DELETE, each through the load balancer with `host` in Host."""
        endpoint = chart.env_list(self.container)["MCP_HTTP__ENDPOINT"]["value"]
        headers = {"Host": host, "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if origin:
            headers["Origin"] = origin

        def post(message):
            return http_request("127.0.0.1", self.lb_port, "POST", endpoint, headers,
                                json.dumps(message))

        status, h, body = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "helm-e2e", "version": "1"}}})
        assert status == 200, f"initialize via Host {host}: {status} {body!r}"
        session_id = h.get("mcp-session-id")
        assert session_id, f"initialize via Host {host}: no Mcp-Session-Id"
        assert answer(h, body, 1)["result"]["protocolVersion"] == PROTOCOL_VERSION
        headers["Mcp-Session-Id"] = session_id
        headers["MCP-Protocol-Version"] = PROTOCOL_VERSION
        status, _, body = post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202, f"notifications/initialized: {status} {body!r}"
        status, h, body = post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert status == 200, f"tools/list: {status} {body!r}"
        tools = [t["name"] for t in answer(h, body, 2)["result"]["tools"]]
        assert "echo" in tools, tools
        text = f"{tag} via {host}"
        status, h, body = post({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                "params": {"name": "echo", "arguments": {"message": text}}})
        assert status == 200, f"tools/call echo: {status} {body!r}"
        result = answer(h, body, 3)["result"]
        assert result["content"][0]["text"] == f"{self.echo_prefix}{text}", result
        del headers["Content-Type"]
        status, _, body = http_request("127.0.0.1", self.lb_port, "DELETE", endpoint, headers)
        assert status == 200, f"DELETE: {status} {body!r}"
        headers["Content-Type"] = "application/json"
        status, _, _ = post({"jsonrpc": "2.0", "id": 4, "method": "ping"})
        assert status == 404, f"ping after DELETE: {status}, expected 404"

    def service_names(self):
        """Each name of the Service, with and without its port, opens a
        session (initialize 200, DELETE 200)."""
        port = one(self.docs, "Service", RELEASE)["spec"]["ports"][0]["port"]
        names = [RELEASE, f"{RELEASE}.{NAMESPACE}", f"{RELEASE}.{NAMESPACE}.svc", SERVICE_FQDN]
        endpoint = chart.env_list(self.container)["MCP_HTTP__ENDPOINT"]["value"]
        for name in names:
            for host in (name, f"{name}:{port}"):
                headers = {"Host": host, "Content-Type": "application/json",
                           "Accept": "application/json, text/event-stream"}
                status, h, body = http_request(
                    "127.0.0.1", self.lb_port, "POST", endpoint, headers,
                    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                        "clientInfo": {"name": "helm-e2e", "version": "1"}}}))
                assert status == 200 and h.get("mcp-session-id"), f"Host {host}: {status} {body!r}"
                status, _, _ = http_request(
                    "127.0.0.1", self.lb_port, "DELETE", endpoint,
                    {"Host": host, "Mcp-Session-Id": h["mcp-session-id"],
                     "MCP-Protocol-Version": PROTOCOL_VERSION})
                assert status == 200, f"DELETE via Host {host}: {status}"

    def refused(self):
        """A Host the chart does not allow, and an Origin it does not allow
        with an allowed Host, get 403."""
        endpoint = chart.env_list(self.container)["MCP_HTTP__ENDPOINT"]["value"]
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "helm-e2e", "version": "1"}}})
        base = {"Content-Type": "application/json",
                "Accept": "application/json, text/event-stream"}
        for extra in ({"Host": "evil.example.com"}, {"Host": f"{RELEASE}.evil.example.com:8080"},
                      {"Host": SERVICE_FQDN, "Origin": "https://evil.example.com"},
                      {"Host": INGRESS_HOST, "Origin": f"http://{INGRESS_HOST}.evil.example.com"}):
            status, _, _ = http_request("127.0.0.1", self.lb_port, "POST", endpoint,
                                        {**base, **extra}, body)
            assert status == 403, f"{extra}: {status}, expected 403"

    def server_card(self):
        """serverCard on: every pod serves the card at <endpoint>/server-card,
        the same bytes under the same ETag, named as the values say, its
        remote at the public URL; an If-None-Match of it gets 304 anywhere."""
        endpoint = chart.env_list(self.container)["MCP_HTTP__ENDPOINT"]["value"]
        path = endpoint.rstrip("/") + "/server-card"
        seen = set()
        for pod in self.pods:
            status, h, body = http_request(pod.address, pod.http_port, "GET", path,
                                           {"Host": SERVICE_FQDN})
            assert status == 200, f"{pod.name} {path}: {status}"
            assert h.get("content-type", "").startswith("application/mcp-server-card+json"), h
            seen.add((h.get("etag"), body))
        assert len(seen) == 1, f"the pods serve {len(seen)} different cards"
        (etag, body), = seen
        card = json.loads(body)
        assert card["name"] == "com.example/helm-e2e", card
        assert card["remotes"][0]["url"] == f"https://mcp.example.com{endpoint}", card
        status, _, _ = http_request("127.0.0.1", self.lb_port, "GET", path,
                                    {"Host": SERVICE_FQDN, "If-None-Match": etag})
        assert status == 304, f"If-None-Match through the load balancer: {status}"

    def helm_test_pod(self):
        """The `helm test` pod's own command, run here: its curl goes to the
        load balancer in place of the Service's address (curl --connect-to
        through a wrapper first on PATH), Host stays the Service's name."""
        port = one(self.docs, "Service", RELEASE)["spec"]["ports"][0]["port"]
        proc = chart.run_test_pod(self.docs, RELEASE, port, "127.0.0.1", self.lb_port)
        assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stdout}{proc.stderr}"
        assert "initialized and deleted" in proc.stdout, proc.stdout

    def spread(self):
        """nginx sent requests to every pod (the sessions above crossed nodes)."""
        log = (self.log_dir / "nginx" / "access.log").read_text()
        used = {p.address for p in self.pods if f"upstream={p.address}:" in log}
        assert used == set(POD_ADDRESSES), f"pods used: {sorted(used)}"

    def scrape(self):
        """Every pod answers the ServiceMonitor's scrape: its port, by name on
        the Service it selects, then that port's target on the pod, and its
        path give 200 and the Prometheus text format with the node's metrics."""
        monitor = one(self.docs, "ServiceMonitor")
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [s for s in find(self.docs, "Service")
                    if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        assert len(services) == 1, [s["metadata"]["name"] for s in services]
        for endpoint in monitor["spec"]["endpoints"]:
            port = [p for p in services[0]["spec"]["ports"] if p["name"] == endpoint["port"]]
            assert port, f"no port {endpoint['port']} on {services[0]['metadata']['name']}"
            target = chart.container_port(self.container, port[0]["targetPort"])
            timeout = int(endpoint.get("scrapeTimeout", "10s").removesuffix("s"))
            for pod in self.pods:
                status, h, body = http_request(
                    pod.address, target, "GET", endpoint["path"],
                    {"Host": f"{pod.address}:{target}", "User-Agent": "Prometheus/3.5.0",
                     "Accept": "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"}, timeout=timeout)
                assert status == 200, f"{pod.name} {endpoint['path']}: {status}"
                assert h.get("content-type", "").startswith("text/plain"), h
                assert "\n# TYPE mcp_" in "\n" + body.decode(), body[:500]

    def sigterm(self):
        """SIGTERM to one pod: readiness fails at once while liveness passes and
        the node still serves, for the drain delay the chart's preStop and
        grace period count on; sessions through the load balancer go on."""
        pod = self.pods[0]
        delay = int(pod.env.get("MCP_DRAIN_DELAY_SECS", "5"))
        assert delay >= 2, f"drain delay {delay} s too short to observe"
        self.terminated_at = time.monotonic()
        pod.proc.send_signal(signal.SIGTERM)
        status = chart.wait_for("readiness to fail after SIGTERM",
                                lambda: (s := pod.probe("readinessProbe")) != 200 and s, timeout=1)
        assert status == 503, f"readiness {status} while draining, expected 503"
        assert pod.probe_passes("livenessProbe"), "liveness fails while draining"
        endpoint = chart.env_list(self.container)["MCP_HTTP__ENDPOINT"]["value"]
        status, h, body = http_request(
            pod.address, pod.http_port, "POST", endpoint,
            {"Host": SERVICE_FQDN, "Content-Type": "application/json",
             "Accept": "application/json, text/event-stream"},
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                "clientInfo": {"name": "helm-e2e", "version": "1"}}}))
        assert status == 200 and h.get("mcp-session-id"), f"draining pod: {status} {body!r}"
        assert time.monotonic() - self.terminated_at < delay, "checks outlasted the drain delay"
        self.session(SERVICE_FQDN, tag="during drain")

    def drained_exit(self):
        """The node exits with 0 within the pod's grace period, less the
        preStop sleep that the kubelet counts in it."""
        pod = self.pods[0]
        spec = self.deployment["spec"]["template"]["spec"]
        sleep = 0
        pre_stop = self.container.get("lifecycle", {}).get("preStop")
        if pre_stop:
            sleep = int(pre_stop["exec"]["command"][1])
        budget = spec["terminationGracePeriodSeconds"] - sleep
        remaining = budget - (time.monotonic() - self.terminated_at)
        try:
            code = pod.proc.wait(timeout=max(remaining, 0))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{pod.name} still running {budget} s after SIGTERM") from None
        assert code == 0, f"{pod.name} exited {code}: {pod.logs()}"

    def after_drain(self):
        """The two other pods serve sessions through the load balancer."""
        for host in (SERVICE_FQDN, INGRESS_HOST):
            self.session(host, tag="after drain")

    def stop(self):
        # SIGKILL: the drain was tested above; here only the time matters.
        for pod in self.pods:
            pod.stop()
        for proc in (self.nginx, self.redis):
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def connectable(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def run(results, node, log_dir, label="e2e", echo_prefix="Echo: ", subdir="helm-e2e"):
    """The steps with `node` as the image's entrypoint: mcp-node, or a
    provider's own binary built on mcp_cluster::cli (its `echo` answering
    `echo_prefix` and the message). Each check is named `label: step`."""
    test = Test(node, log_dir, echo_prefix, subdir)
    steps = [
        ("render with values-e2e.yaml and the test's Redis URL; pod addresses free",
         test.render),
        ("three pods start before Redis: startup and liveness probes pass, readiness 503",
         test.start_nodes_before_redis),
        ("Redis up: readiness 200 on every pod, no unknown MCP_ variable",
         test.start_redis),
        ("nginx round robin in front of the three pods", test.start_nginx),
        (f"MCP session through the load balancer with Host {SERVICE_FQDN}",
         lambda: test.session(SERVICE_FQDN)),
        (f"MCP session with the Ingress host {INGRESS_HOST} and Origin https://{INGRESS_HOST}",
         lambda: test.session(INGRESS_HOST, origin=f"https://{INGRESS_HOST}")),
        ("every Service name, with and without the port, is allowed", test.service_names),
        ("a Host or an Origin the chart does not allow gets 403", test.refused),
        ("the helm test pod's script passes through the load balancer", test.helm_test_pod),
        ("every pod serves the same server card (serverCard), 304 on its ETag",
         test.server_card),
        ("requests reached all three pods", test.spread),
        ("every pod answers the ServiceMonitor's scrape (port, path) with its metrics",
         test.scrape),
        ("SIGTERM: readiness 503, liveness 200, the pod still serves; sessions go on",
         test.sigterm),
        ("the terminated pod exits 0 within terminationGracePeriodSeconds less preStop",
         test.drained_exit),
        ("after the drain the other pods serve sessions (Service and Ingress Host)",
         test.after_drain),
    ]
    try:
        for i, (name, step) in enumerate(steps):
            if results.check(f"{label}: {name}", lambda: step() or True) is None:
                for skipped, _ in steps[i + 1:]:
                    results.failed += 1
                    print(f"FAIL {label}: {skipped}: not run, an earlier step failed", flush=True)
                print(f"     logs: {test.log_dir}", flush=True)
                break
    finally:
        test.stop()
