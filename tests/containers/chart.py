"""The chart part: helm/mcp-node rendered with the real helm
(tests/helm/.bin/helm) and played with `podman kube play` (podman 4.3),
three releases side by side on a podman network of the test's own, with a
Redis (the redis:7-alpine image, network alias `redis`, which the chart's
default redis.url names) and an https test issuer (common.Issuer, its
certificate from common.Pki's private CA):

- mcpt-chart-plain: the chart's default values (image.tag=local, the image
  tests/containers/images.sh built);
- mcpt-chart-auth: helm/mcp-node/examples/keycloak.yaml with its issuer
  replaced by the test issuer, its resource by the URL the test reaches the
  pod at, and the private CA given as the chart says users give it:
  auth.caCertificates naming a ConfigMap (played beside the release, as a
  user would `kubectl create configmap` it);
- mcpt-chart-tls: TLS everywhere: tls.enabled, the certificate from a
  kubernetes.io/tls Secret, tls.reloadIntervalSecs 1; and redis.url
  rediss://redis-tls:6380/, a second Redis serving TLS only with a
  certificate of the test CA, which redis.caCertificates gives the node
  from a ConfigMap.

What the test changes in the rendered manifests, only where kube play
needs it (everything else is played as rendered: the image, args and
environment, the securityContext with uid 10001, the read-only root
filesystem and no capabilities, the probes, the ConfigMap volumes):
- each container port gets hostIP 127.0.0.1 and a free hostPort: kube play
  publishes only hostPort ports and podman 4.3 has no --publish for it;
- replicas: 1, as every replica would ask for the same host ports (kube
  play names the pods <deployment>-pod-<n>);
- the rendered Secret holding the Redis URL is not played: kube play 4.3
  stores a Secret document as a podman secret holding its YAML, which its
  own secretKeyRef then fails to read ("is not valid JSON"). The test
  creates that podman secret itself, named as the Secret, holding the JSON
  of the Secret's `data`, which is what secretKeyRef reads;
- the TLS Secret's volume becomes a hostPath directory: podman 4.3.1 panics
  on a `secret` volume (nil pointer in VolumeFromSecret). The directory is
  laid out as the kubelet lays out a Secret volume (the volume's items in a
  timestamped directory, `..data` linking to it, each item a link through
  `..data`), and the certificate is rotated as the kubelet updates it: a new
  directory, then `..data` replaced by an atomic rename;
- Service, ServiceAccount, PodDisruptionBudget, Ingress and the helm test
  Pod are not played (kube play 4.3 knows Pods, Deployments, ConfigMaps and
  PersistentVolumeClaims). The helm test pod's script is run from here
  instead, its curl connecting to the pod's published port in place of the
  Service (tests/helm/chart.py, run_test_pod).

What kube play does not do, so the test does it from outside: readiness
probes are not run, and an httpGet liveness or startup probe becomes a
`curl -f http://localhost:0/...` healthcheck (a named port maps to 0, and
the image has no curl) that podman runs only from systemd timers, which
this machine has not. So each probe's endpoint is called as the kubelet
calls it: the probe's path, its port resolved by name through the
container's ports (then to the published host port), its scheme.
terminationGracePeriodSeconds is not mapped (podman stops with 10 s), nor
are preStop hooks run, and `podman kube down` kills the pods (SIGKILL, exit
137) rather than stopping them: the test stops the pods with `podman pod
stop` (SIGTERM) first and checks that each node drains and exits 0.

Steps: render; network, both Redis, issuer, secrets, kube play; the pods run as
rendered; each probe answers as defined (readiness 200 once Redis answers);
a session through each (auth: 401 without a token, then a token from the
test issuer, whose https metadata and keys the node fetched trusting the
private CA from the ConfigMap); the helm test pod's script against each;
HTTPS verified with the test CA, then the certificate rotated in place and
served to new connections without a restart; the pods stopped (SIGTERM,
exit 0); `podman kube down`, then the network, both Redis and the issuer
removed, and nothing of the test left (pods, containers, volumes, secrets,
networks). Everything is removed in a finally
too.
"""

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from common import (IMAGE_UID, ROOT, Failed, Issuer, Pki, Session, free_port, podman, request,
                    scratch, wait_until)

PREFIX = "mcpt-chart"
NETWORK = f"{PREFIX}-net"
REDIS = f"{PREFIX}-redis"
# Redis over TLS only, its certificate from the test CA: the tls release's.
REDIS_TLS = f"{PREFIX}-redis-tls"
ISSUER = f"{PREFIX}-issuer"
CHART = ROOT / "helm" / "mcp-node"
KEYCLOAK = CHART / "examples" / "keycloak.yaml"
# Kinds kube play 4.3 plays; the rest of a release is left out (docstring).
PLAYED_KINDS = ("ConfigMap", "Deployment")
# How long a pod may take to answer its probes, and a changed certificate to
# reach new connections (the node reads it every tls.reloadIntervalSecs, 1).
START_TIMEOUT = 60
RELOAD_TIMEOUT = 30


def helm_chart_module():
    """tests/helm/chart.py (helm with its state under target/, objects of
    the rendered manifests, the helm test pod's script), loaded under
    another name: this file is `chart` too."""
    spec = importlib.util.spec_from_file_location("helm_chart", ROOT / "tests" / "helm" / "chart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Release:
    """One release of the chart: rendered, then played."""

    def __init__(self, name, values_files=(), sets=()):
        self.name = name
        self.values_files = list(values_files)
        self.sets = ["image.tag=local", *sets]
        self.ports = {"http": free_port(), "admin": free_port()}
        self.docs = None

    @property
    def url(self):
        scheme = "https" if self.https else "http"
        return f"{scheme}://127.0.0.1:{self.ports['http']}{self.env_value('MCP_HTTP__ENDPOINT') or '/mcp'}"

    def render(self, helm):
        self.docs = helm.render(self.name, "default", self.values_files, self.sets)
        self.deployment, self.container = helm.node_container(self.docs)
        self.https = self.env_value("MCP_TLS__CERT_FILE") is not None
        self.pod = f"{self.deployment['metadata']['name']}-pod-0"
        self.container_name = f"{self.pod}-{self.container['name']}"

    def env_value(self, name):
        for item in self.container.get("env", []):
            if item["name"] == name:
                return item.get("value")
        return None

    def played(self, tls_dir=None):
        """The documents kube play gets, changed only as the docstring says."""
        docs = []
        for doc in self.docs:
            if doc["kind"] not in PLAYED_KINDS:
                continue
            if doc["kind"] == "Deployment":
                doc = json.loads(json.dumps(doc))
                doc["spec"]["replicas"] = 1
                spec = doc["spec"]["template"]["spec"]
                for port in spec["containers"][0]["ports"]:
                    port["hostIP"] = "127.0.0.1"
                    port["hostPort"] = self.ports[port["name"]]
                for volume in spec.get("volumes", []):
                    if "secret" in volume:
                        assert volume["name"] == "tls" and tls_dir, volume
                        del volume["secret"]
                        volume["hostPath"] = {"path": str(tls_dir), "type": "Directory"}
            docs.append(doc)
        return docs

    def redis_secret(self):
        """The rendered Secret the Redis URL's secretKeyRef names, and the JSON
        podman 4.3's secretKeyRef reads (the Secret's data)."""
        env = {e["name"]: e for e in self.container["env"]}
        ref = env["MCP_REDIS_URL"]["valueFrom"]["secretKeyRef"]
        secret = [d for d in self.docs if d["kind"] == "Secret" and d["metadata"]["name"] == ref["name"]]
        assert len(secret) == 1, f"Secret {ref['name']} is not rendered"
        assert ref["key"] in secret[0]["data"], ref
        return ref["name"], json.dumps(secret[0]["data"])


class SecretVolume:
    """A directory laid out as the kubelet lays out a Secret volume: the
    volume's items in a timestamped directory, `..data` linking to it, each
    item a link through `..data`; updated as the kubelet updates it."""

    def __init__(self, path, items):
        self.path = Path(path)
        self.items = items
        self.path.mkdir(parents=True)
        self.path.chmod(0o755)
        self.generation = 0

    def write(self, data):
        """data: {key: bytes}; the items' files hold data[item.key]."""
        self.generation += 1
        version = self.path / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        version.mkdir()
        version.chmod(0o755)
        for item in self.items:
            target = version / item["path"]
            target.write_bytes(data[item["key"]])
            # The kubelet's default mode, 0644: the node runs as uid 10001.
            target.chmod(0o644)
        link = self.path / "..data_tmp"
        link.symlink_to(version.name)
        old = os.readlink(self.path / "..data") if (self.path / "..data").is_symlink() else None
        os.replace(link, self.path / "..data")
        for item in self.items:
            user = self.path / item["path"]
            if not user.is_symlink():
                user.symlink_to(f"..data/{item['path']}")
        if old:
            shutil.rmtree(self.path / old)


def peer_certificate(port, ca_file):
    """SHA-256 of the certificate a new TLS connection to port gets,
    verified against ca_file for 127.0.0.1."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()


def echoes(session, text):
    """tools/call echo answers `Echo: <text>`."""
    got = session.echo(text)
    assert got == f"Echo: {text}", got


def fingerprint(cert_path):
    pem = Path(cert_path).read_text()
    body = pem.split("-----BEGIN CERTIFICATE-----", 1)[1].split("-----END CERTIFICATE-----", 1)[0]
    return hashlib.sha256(base64.b64decode("".join(body.split()))).hexdigest()


def names(kind, *extra):
    """Names of podman objects of one kind (ps, pod ps, volume ls, secret
    ls, network ls) starting with the test's prefix."""
    out = podman(*kind, *extra, check=False).stdout
    return sorted(n for n in out.split() if n.startswith(PREFIX))


LISTINGS = {
    "pods": ("pod", "ps", "--format", "{{.Name}}"),
    "containers": ("ps", "-a", "--format", "{{.Names}}"),
    "volumes": ("volume", "ls", "--format", "{{.Name}}"),
    "secrets": ("secret", "ls", "--format", "{{.Name}}"),
    "networks": ("network", "ls", "--format", "{{.Name}}"),
}


def leftovers():
    return {what: names(args) for what, args in LISTINGS.items() if names(args)}


class ChartTest:
    def __init__(self):
        self.dir = scratch("chart")
        self.helm = helm_chart_module()
        # The issuer's URL is known before its key and certificate are made.
        self.issuer_url = "https://issuer:8443"
        self.plain = Release(f"{PREFIX}-plain")
        self.auth = Release(f"{PREFIX}-auth", [KEYCLOAK])
        self.tls = Release(f"{PREFIX}-tls", sets=[
            "tls.enabled=true", f"tls.secretName={PREFIX}-tls-cert", "tls.reloadIntervalSecs=1",
            "redis.url=rediss://redis-tls:6380/", f"redis.caCertificates.configMap={PREFIX}-redis-ca",
            "redis.caCertificates.key=ca.crt"])
        self.releases = (self.plain, self.auth, self.tls)
        self.auth_ca_map = f"{PREFIX}-auth-ca"
        self.redis_ca_map = f"{PREFIX}-redis-ca"
        self.resource = f"http://127.0.0.1:{self.auth.ports['http']}/mcp"
        self.auth.sets += [
            f"auth.issuers[0]={self.issuer_url}", f"auth.resource={self.resource}",
            f"auth.caCertificates.configMap={self.auth_ca_map}", "auth.caCertificates.key=ca.crt",
            "redis.keyPrefix=mcpt-chart-auth"]
        self.play_file = self.dir / "played.yaml"
        self.started = {}

    # Steps --------------------------------------------------------------------

    def render(self):
        """helm template for each release; the values reached the manifests.
        The private CA and the issuer's files too."""
        helm = os.environ.get("HELM", str(ROOT / "tests" / "helm" / ".bin" / "helm"))
        if shutil.which(helm) is None:
            raise Failed(f"{helm} missing: npm ci --prefix tests/js && bash tests/helm/install.sh")
        self.pki = Pki(self.dir / "pki")
        self.issuer = Issuer(self.pki, self.dir / "issuer")
        assert self.issuer.url == self.issuer_url, self.issuer.url
        for release in self.releases:
            release.render(self.helm)
        assert self.auth.env_value("MCP_AUTH__ISSUERS") == self.issuer.url
        assert self.auth.env_value("MCP_AUTH__CA_FILE") == "/etc/mcp/auth-ca/ca.crt"
        assert self.tls.env_value("MCP_TLS__CERT_FILE") == "/etc/mcp/tls/tls.crt"
        assert self.plain.env_value("MCP_TLS__CERT_FILE") is None
        assert self.tls.env_value("MCP_REDIS_CA_FILE") == "/etc/mcp/redis-ca/ca.crt"

    def start(self):
        """The network, Redis (alias redis), Redis over TLS (alias
        redis-tls), the issuer (alias issuer), the podman secrets for the
        Redis URLs, the TLS Secret's volume, then `podman kube play
        --network` of the three releases and the CA ConfigMaps in one file."""
        leftover = leftovers()
        assert not leftover, f"objects of an earlier run left: {leftover}"
        podman("network", "create", NETWORK)
        podman("run", "-d", "--name", REDIS, "--network", NETWORK, "--network-alias", "redis",
               "redis:7-alpine")
        self.issuer.start(NETWORK, ISSUER)
        redis_dir = self.dir / "redis-tls"
        redis_dir.mkdir()
        redis_dir.chmod(0o755)
        cert, key = self.pki.issue("redis-tls", ["redis-tls"])
        shutil.copy(cert, redis_dir / "redis.crt")
        shutil.copy(key, redis_dir / "redis.key")
        podman("run", "-d", "--name", REDIS_TLS, "--network", NETWORK, "--network-alias", "redis-tls",
               "-v", f"{redis_dir}:/tls:ro", "redis:7-alpine", "redis-server", "--bind", "0.0.0.0",
               "--protected-mode", "no", "--port", "0", "--tls-port", "6380",
               "--tls-cert-file", "/tls/redis.crt", "--tls-key-file", "/tls/redis.key",
               "--tls-auth-clients", "no")
        for release in self.releases:
            name, data = release.redis_secret()
            podman("secret", "create", name, "-", input=data)
        # The TLS Secret, as cert-manager would make it, in its volume's layout.
        cert, key = self.pki.issue("node-1", [self.tls.deployment["metadata"]["name"], "localhost"])
        volume = [v for v in self.tls.deployment["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "tls"][0]
        self.tls_volume = SecretVolume(self.dir / "tls-secret", volume["secret"]["items"])
        self.tls_volume.write({"tls.crt": cert.read_bytes(), "tls.key": key.read_bytes()})
        self.first_cert = cert
        # The private CA, as a user would `kubectl create configmap` it.
        docs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                 "data": {"ca.crt": self.pki.ca_cert.read_text()}}
                for name in (self.auth_ca_map, self.redis_ca_map)]
        for release in self.releases:
            docs += release.played(self.tls_volume.path if release is self.tls else None)
        docs.sort(key=lambda d: d["kind"] != "ConfigMap")
        self.play_file.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        podman("kube", "play", "--network", NETWORK, self.play_file, timeout=120)
        for release in self.releases:
            self.started[release.name] = podman(
                "inspect", "--format", "{{.Id}} {{.State.StartedAt}}", release.container_name).stdout.strip()

    def as_rendered(self):
        """kube play applied the rendered security context: uid 10001, a
        read-only root filesystem, no capabilities; the files mounted."""
        for release in self.releases:
            # The node's process as it runs: its ids and capability sets, and
            # whether the root filesystem takes a file.
            seen = podman("exec", release.container_name, "sh", "-c",
                          "cat /proc/1/status; touch /rootfs-probe 2>&1; echo touch=$?").stdout
            status = dict(line.split(":", 1) for line in seen.splitlines() if ":" in line)
            assert status["Uid"].split() == [str(IMAGE_UID)] * 4, f"{release.name}: Uid {status['Uid']}"
            assert status["Gid"].split() == [str(IMAGE_UID)] * 4, f"{release.name}: Gid {status['Gid']}"
            for caps in ("CapEff", "CapPrm", "CapBnd"):
                assert int(status[caps], 16) == 0, f"{release.name}: {caps} {status[caps]}"
            assert "Read-only file system" in seen and "touch=0" not in seen, seen[-300:]
            info = json.loads(podman("inspect", release.container_name).stdout)[0]
            mounts = {m["Destination"]: m for m in info["Mounts"]}
            for mount in release.container.get("volumeMounts", []):
                got = mounts.get(mount["mountPath"])
                assert got and got["RW"] is False, f"{release.name}: {mount['mountPath']}: {got}"

    def probes(self):
        """Each probe's endpoint as the kubelet calls it: startup and liveness
        200, readiness 200 once Redis answers."""
        for release in self.releases:
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                get = release.container[probe]["httpGet"]
                port = self.helm.container_port(release.container, get["port"])
                named = [p["name"] for p in release.container["ports"] if p["containerPort"] == port]
                host_port = release.ports[named[0]]
                url = f"{get.get('scheme', 'HTTP').lower()}://127.0.0.1:{host_port}{get['path']}"
                wait_until(f"{release.name} {probe} {url} 200",
                           lambda: request(url, ca_file=self.pki.ca_cert, timeout=5)[0] == 200,
                           timeout=START_TIMEOUT)

    def sessions(self):
        """A session through the default release; through the auth release,
        401 without a token, then one with a token of the test issuer."""
        session = Session(self.plain.url)
        echoes(session, "plain")
        session.close()
        status, headers, body = request(self.auth.url, "POST", {
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "container-tests", "version": "1"}}})
        assert status == 401 and "resource_metadata" in headers.get("www-authenticate", ""), \
            (status, headers, body[:200])
        session = self.issuer.session(self.auth.url, self.resource, scope="mcp:tools")
        echoes(session, "auth")
        who = json.loads(session.call("tools/call", {"name": "whoami", "arguments": {}})
                         ["content"][0]["text"])
        assert (who.get("issuer"), who.get("subject")) == (self.issuer.url, "alice"), who
        session.close()

    def helm_test_script(self):
        """The helm test pod's script, its curl connecting to each pod's
        published port in place of the Service (Host: the Service's name)."""
        for release in self.releases:
            service = self.helm.one(release.docs, "Service", release.deployment["metadata"]["name"])
            proc = self.helm.run_test_pod(release.docs, service["metadata"]["name"],
                                          service["spec"]["ports"][0]["port"], "127.0.0.1",
                                          release.ports["http"])
            assert proc.returncode == 0, f"{release.name}: {proc.stdout}{proc.stderr}"

    def https(self):
        """The TLS release: a session over https verified with the test CA;
        the certificate it serves is the Secret's."""
        got = peer_certificate(self.tls.ports["http"], self.pki.ca_cert)
        assert got == fingerprint(self.first_cert), "served certificate is not the Secret's"
        session = Session(self.tls.url, ca_file=self.pki.ca_cert)
        echoes(session, "tls")
        session.close()

    def rotate(self):
        """The Secret's certificate replaced as the kubelet replaces it: new
        connections get the new one, the container was not restarted."""
        cert, key = self.pki.issue("node-2", [self.tls.deployment["metadata"]["name"], "localhost"])
        assert fingerprint(cert) != fingerprint(self.first_cert)
        self.tls_volume.write({"tls.crt": cert.read_bytes(), "tls.key": key.read_bytes()})
        wait_until("the new certificate on new connections",
                   lambda: peer_certificate(self.tls.ports["http"], self.pki.ca_cert) == fingerprint(cert),
                   timeout=RELOAD_TIMEOUT)
        session = Session(self.tls.url, ca_file=self.pki.ca_cert)
        echoes(session, "rotated")
        session.close()
        now = podman("inspect", "--format", "{{.Id}} {{.State.StartedAt}}",
                     self.tls.container_name).stdout.strip()
        assert now == self.started[self.tls.name], f"restarted: {self.started[self.tls.name]} -> {now}"
        out = podman("logs", self.tls.container_name)
        logs = out.stdout + out.stderr
        assert "mcp-node listening on https://" in logs, logs[-800:]

    def stop(self):
        """podman pod stop: SIGTERM, and each node drains and exits 0 within
        podman's stop timeout (10 s: terminationGracePeriodSeconds is not
        mapped). `podman kube down` of podman 4.3 kills the pods outright
        (SIGKILL, exit 137), with no drain: stop them first."""
        # One `pod stop` per pod, side by side: podman stops the pods one
        # after another, each waiting for its node's drain.
        with ThreadPoolExecutor(len(self.releases)) as pool:
            list(pool.map(lambda r: podman("pod", "stop", r.pod, timeout=120), self.releases))
        for release in self.releases:
            state = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                           release.container_name).stdout.split()
            assert state == ["exited", "0"], f"{release.name}: {state}"

    def down(self):
        """podman kube down, then both Redis, the issuer, the podman secrets
        the test made and the network: nothing of the test is left. kube down of
        podman 4.3 leaves the volumes it made for ConfigMaps (named after
        them): those are removed too, by name, and reported."""
        podman("kube", "down", self.play_file, timeout=120)
        after = leftovers()
        pods = [p for p in after.get("pods", [])]
        containers = [c for c in after.get("containers", []) if c not in (REDIS, REDIS_TLS, ISSUER)]
        assert not pods and not containers, f"kube down left {pods} {containers}"
        maps = {d["metadata"]["name"] for d in yaml.safe_load_all(self.play_file.read_text())
                if d["kind"] == "ConfigMap"}
        for volume in after.get("volumes", []):
            assert volume in maps, f"kube down left volume {volume}, not a ConfigMap's"
            podman("volume", "rm", volume)
        podman("rm", "-f", "-t", "0", REDIS, REDIS_TLS, ISSUER)
        for release in self.releases:
            podman("secret", "rm", release.redis_secret()[0])
        podman("network", "rm", NETWORK)
        left = leftovers()
        assert not left, f"left behind: {left}"

    # Cleanup ------------------------------------------------------------------

    def cleanup(self):
        """Removes whatever the test made and is still there (a failed run)."""
        if self.play_file.exists():
            podman("kube", "down", self.play_file, check=False, timeout=120)
        for pod in names(LISTINGS["pods"]):
            podman("pod", "rm", "-f", "-t", "0", pod, check=False)
        for container in names(LISTINGS["containers"]):
            podman("rm", "-f", "-t", "0", container, check=False)
        for volume in names(LISTINGS["volumes"]):
            podman("volume", "rm", "-f", volume, check=False)
        for secret in names(LISTINGS["secrets"]):
            podman("secret", "rm", secret, check=False)
        if NETWORK in names(LISTINGS["networks"]):
            podman("network", "rm", "-f", NETWORK, check=False)


def run(checks):
    started = time.monotonic()
    test = ChartTest()
    try:
        checks.group([
            ("chart: helm template, default values, keycloak example with the test issuer and "
             "its CA, and tls.enabled with rediss:// and its CA", test.render),
            ("chart: podman kube play of the three releases with Redis, Redis over TLS and the "
             "https issuer", test.start),
            ("chart: pods run as rendered (uid 10001, read-only root, no capabilities, "
             "read-only mounts)", test.as_rendered),
            ("chart: each probe's endpoint answers as the probe defines it (readiness once Redis "
             "answers; tls: over rediss:// trusting redis.caCertificates)", test.probes),
            ("chart: a session through the default release; auth: 401 without a token, a session "
             "with the test issuer's token (its CA from auth.caCertificates)", test.sessions),
            ("chart: the helm test pod's script passes against each played pod", test.helm_test_script),
            ("chart: tls: a session over https, the Secret's certificate verified with the test CA",
             test.https),
            ("chart: tls: the Secret's certificate rotated in place reaches new connections, no "
             "restart", test.rotate),
            ("chart: podman pod stop: every node drains on SIGTERM and exits 0", test.stop),
            ("chart: podman kube down, then Redis, issuer, secrets and network gone: nothing left",
             test.down),
        ])
    finally:
        test.cleanup()
        print(f"   chart part: {time.monotonic() - started:.0f} s", flush=True)
