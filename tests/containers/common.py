"""What the container tests share: podman, HTTP and MCP from outside, a
private CA made with openssl, an https test issuer, and the check counter.

Only the standard library: the tests run with Debian's python3 (the chart
test adds PyYAML from tests/helm/.venv).
"""

import base64
import http.client
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LOG_DIR = Path(os.environ.get("LOG_DIR", ROOT / "target" / "test-logs")) / "containers"
PROTOCOL_VERSION = "2025-11-25"
# The user the image runs as (Dockerfile, USER) and the chart's runAsUser.
IMAGE_UID = 10001


class Failed(Exception):
    """A check that did not hold, with what was seen."""


def log_path(name):
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return LOG_DIR / name


def run(args, *, check=True, timeout=300, input=None, env=None, cwd=None):
    """Runs a command; its output goes to containers/commands.log too.
    Returns the CompletedProcess (text). Raises Failed when check and the
    exit status is not 0."""
    proc = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env=env,
        cwd=cwd,
    )
    with open(log_path("commands.log"), "a") as out:
        out.write(f"$ {' '.join(str(a) for a in args)}\n[exit {proc.returncode}]\n{proc.stdout}{proc.stderr}\n")
    if check and proc.returncode != 0:
        raise Failed(f"{' '.join(str(a) for a in args[:4])}... exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return proc


def podman(*args, check=True, timeout=300, input=None):
    return run(["podman", *args], check=check, timeout=timeout, input=input)


# Ports for published container ports: below Linux's ephemeral range
# (32768-60999), from which every outgoing connection takes its local port.
# A port bound to 0 and released comes from that range, and an outgoing
# connection may take it before podman binds it ("address already in use").
FREE_PORTS = range(10000, 32768)


def free_port():
    """A loopback port that was free a moment ago, outside the ephemeral range."""
    for _ in range(500):
        port = random.choice(FREE_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {FREE_PORTS.start}-{FREE_PORTS.stop - 1}")


def wait_until(what, probe, timeout=60, interval=0.25):
    """Calls probe() until it returns a true value (returned) or the time is
    up (Failed, naming what and the last error)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - any failure means "not yet"
            last = e
        if time.monotonic() > deadline:
            raise Failed(f"{what}: not within {timeout} s (last: {last!r})")
        time.sleep(interval)


def tls_context(ca_file):
    context = ssl.create_default_context(cafile=str(ca_file))
    return context


def request(url, method="GET", headers=None, body=None, ca_file=None, timeout=15):
    """One request on a fresh connection to an http:// or https:// URL on
    loopback; returns (status, headers with lowercase names, body bytes)."""
    scheme, rest = url.split("://", 1)
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.rpartition(":")
    assert host in ("127.0.0.1", "localhost"), f"the tests only reach loopback, not {host}"
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=tls_context(ca_file))
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        conn.request(method, "/" + path, body=data, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def answer(headers, body, request_id):
    """The JSON-RPC answer to request_id in a JSON or SSE response body."""
    if headers.get("content-type", "").startswith("text/event-stream"):
        for line in body.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if message.get("id") == request_id:
                    return message
        raise Failed(f"no answer to {request_id} in the stream: {body[:400]!r}")
    message = json.loads(body)
    if message.get("id") != request_id:
        raise Failed(f"answer to {message.get('id')}, not {request_id}: {message}")
    return message


class Session:
    """An MCP session (2025-11-25) over Streamable HTTP, from outside."""

    def __init__(self, url, token=None, ca_file=None, host=None):
        self.url = url
        self.ca_file = ca_file
        self.base = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if token:
            self.base["Authorization"] = f"Bearer {token}"
        if host:
            self.base["Host"] = host
        self.next_id = 1
        status, headers, body = self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "container-tests", "version": "1"},
                },
            }
        )
        if status != 200:
            raise Failed(f"initialize: HTTP {status} {body[:300]!r}")
        self.initialized = answer(headers, body, 0)["result"]
        self.session_id = headers["mcp-session-id"]
        self.base["Mcp-Session-Id"] = self.session_id
        self.base["MCP-Protocol-Version"] = PROTOCOL_VERSION
        status, _, body = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if status != 202:
            raise Failed(f"notifications/initialized: HTTP {status} {body[:300]!r}")

    def post(self, message, timeout=30):
        return request(self.url, "POST", self.base, message, self.ca_file, timeout)

    def call(self, method, params=None, timeout=30):
        """A request; its result (Failed on an error or another status)."""
        request_id = self.next_id
        self.next_id += 1
        status, headers, body = self.post(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}, timeout
        )
        if status != 200:
            raise Failed(f"{method}: HTTP {status} {body[:300]!r}")
        message = answer(headers, body, request_id)
        if "error" in message:
            raise Failed(f"{method}: {message['error']}")
        return message["result"]

    def echo(self, text):
        """tools/call echo; the text it answered."""
        result = self.call("tools/call", {"name": "echo", "arguments": {"message": text}})
        return result["content"][0]["text"]

    def close(self):
        request(self.url, "DELETE", self.base, None, self.ca_file)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Pki:
    """A private CA and certificates it signs, made with openssl in dir."""

    def __init__(self, dir):
        self.dir = Path(dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_cert = self.dir / "ca.crt"
        self.ca_key = self.dir / "ca.key"
        run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", self.ca_key, "-out", self.ca_cert, "-days", "2", "-subj", "/CN=mcp container tests CA"])

    def issue(self, name, dns_names):
        """A leaf certificate for dns_names (and 127.0.0.1); (cert, key) paths."""
        key = self.dir / f"{name}.key"
        csr = self.dir / f"{name}.csr"
        cert = self.dir / f"{name}.crt"
        ext = self.dir / f"{name}.ext"
        sans = ",".join([f"DNS:{n}" for n in dns_names] + ["IP:127.0.0.1"])
        ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
        run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN={dns_names[0]}"])
        run(["openssl", "x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key,
             "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext])
        # The containers run as uid 10001: the files must be readable to it.
        for path in (key, cert):
            path.chmod(0o644)
        return cert, key


ISSUER_SERVER = r'''
import http.server, ssl, sys, pathlib
root = pathlib.Path(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = root / self.path.lstrip("/").replace("..", "")
        if not path.is_file():
            self.send_error(404)
            return
        body = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.ThreadingHTTPServer(("0.0.0.0", 8443), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[2], sys.argv[3])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
'''


class Issuer:
    """An OAuth authorization server as far as a resource server sees one:
    RFC 8414 metadata and a JWKS over https (certificate from pki, for the
    host name `name`), served by python3 in a container of the
    mcp-test-services image on a podman network; tokens are RS256 JWTs
    signed here with openssl."""

    def __init__(self, pki, dir, name="issuer"):
        self.dir = Path(dir)
        self.name = name
        self.url = f"https://{name}:8443"
        self.www = self.dir / "www"
        (self.www / ".well-known").mkdir(parents=True, exist_ok=True)
        self.key = self.dir / "signing.key"
        run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", self.key])
        modulus = run(["openssl", "rsa", "-in", self.key, "-noout", "-modulus"]).stdout.strip().split("=", 1)[1]
        jwk = {"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
               "n": b64url(bytes.fromhex(modulus)), "e": b64url((65537).to_bytes(3, "big"))}
        (self.www / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
        (self.www / ".well-known" / "oauth-authorization-server").write_text(json.dumps({
            "issuer": self.url,
            "jwks_uri": f"{self.url}/jwks.json",
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "response_types_supported": ["code"],
        }))
        (self.dir / "server.py").write_text(ISSUER_SERVER)
        cert, key = pki.issue(name, [name])
        self.ca_file = pki.ca_cert
        self.cert, self.cert_key = self.dir / "tls.crt", self.dir / "tls.key"
        shutil.copy(cert, self.cert)
        shutil.copy(key, self.cert_key)
        self.container = None

    def start(self, network, container):
        """Runs the issuer on network as container, reachable as self.name,
        and waits until it serves its metadata (through a port published on
        127.0.0.1 for this check), so that a node started next finds it."""
        self.container = container
        port = free_port()
        podman("run", "-d", "--name", container, "--network", network, "--network-alias", self.name,
               "-p", f"127.0.0.1:{port}:8443",
               "-v", f"{self.dir}:/issuer:ro", "mcp-test-services",
               "python3", "/issuer/server.py", "/issuer/www", "/issuer/" + self.cert.name, "/issuer/" + self.cert_key.name)
        metadata = f"https://127.0.0.1:{port}/.well-known/oauth-authorization-server"
        wait_until("the test issuer serves its metadata",
                   lambda: request(metadata, ca_file=self.ca_file)[0] == 200, 30)

    def session(self, url, audience=None, scope="", timeout=30):
        """A session on url with a token of this issuer, retried while the
        node answers 503 (it has not fetched the issuer's keys yet: its first
        try may have come before the issuer's name resolved)."""
        token = self.token(audience or url, scope=scope)
        return wait_until(f"a session on {url} with the issuer's token",
                          lambda: Session(url, token=token), timeout, 1)

    def token(self, audience, subject="alice", scope="", lifetime=600):
        now = int(time.time())
        header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "k1"}).encode())
        claims = {"iss": self.url, "sub": subject, "aud": audience, "iat": now, "nbf": now - 5,
                  "exp": now + lifetime, "scope": scope}
        payload = b64url(json.dumps(claims).encode())
        signing_input = f"{header}.{payload}".encode()
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                                   input=signing_input, capture_output=True, check=True).stdout
        return f"{header}.{payload}.{b64url(signature)}"


class Checks:
    """Counts checks; prints `ok   NAME` or `FAIL NAME: why` for each. A
    group stops at its first failure (the later steps need the earlier)
    and counts every step it did not reach as failed."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def group(self, steps):
        """steps: [(name, fn)]; runs them in order."""
        for index, (name, fn) in enumerate(steps):
            started = time.monotonic()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a failing step of any kind
                print(f"FAIL {name}: {e}", flush=True)
                self.failed += 1
                for skipped, _ in steps[index + 1:]:
                    print(f"FAIL {skipped}: not reached", flush=True)
                    self.failed += 1
                return False
            print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)
            self.passed += 1
        return True


def scratch(name):
    """An empty directory for one test's files under the log directory."""
    path = log_path(name)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o755)
    return path
