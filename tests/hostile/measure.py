#!/usr/bin/env python3
"""Measures what hostile clients do to an mcp-node binary, side by side.

The hostile-client tests (tests/tests/hostile_*.rs) assert bounds on the
current build; this script runs the same attacks against any binary (an
older build included) and prints the figures, so a change can be measured
before and after on one machine:

    python3 tests/hostile/measure.py --node target/release/mcp-node all
    python3 tests/hostile/measure.py --node /tmp/old/mcp-node oversized

Attacks (each on a fresh node on a free loopback port):
  oversized      200 initializes with 3.5 MiB of capabilities (8 at a time)
  subscriptions  one session, 2,000 subscribes to distinct 100 KB URIs
  batch          a 2025-03-26 batch of 300 messages (a subscribe, 299 touch_resource
                 calls): the status and error the client gets
  slow-bodies    with 256 file descriptors, 1,000 connections from 127.0.0.2
                 that send headers and one byte of body; then /healthz and
                 initialize from 127.0.0.1
  abandoned      3 rounds of 10,000 sessions abandoned (session TTL 2 s), RSS
                 after each round
  abandoned-redis  2 rounds of 2,000 abandoned sessions on a Redis node, keys
                 left 20 s after the TTL (needs redis-server on PATH)
Only loopback is used. Python standard library only.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

VERSION = "2025-11-25"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """An mcp-node process on a free port (optionally with `ulimit -n`)."""

    def __init__(self, binary, args=(), open_files=None):
        self.port = free_port()
        cmd = [binary, "--bind", f"127.0.0.1:{self.port}", "--log", "error", *args]
        if open_files:
            cmd = ["sh", "-c", f'ulimit -n {open_files} && exec "$0" "$@"', *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise SystemExit(f"node did not start: {line!r}")
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            kib = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        return kib / 1024

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def post(url, body, session=None, timeout=30):
    """POST a JSON body; returns (status, headers, parsed JSON or text)."""
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = VERSION
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            status, hdrs = response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        text, status, hdrs = err.read().decode(), err.code, dict(err.headers)
    try:
        return status, hdrs, json.loads(text)
    except ValueError:
        return status, hdrs, text


def initialize(url, version=VERSION, capabilities=None):
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": capabilities or {},
                       "clientInfo": {"name": "measure", "version": "1"}}}
    status, headers, answer = post(url, body)
    session = {k.lower(): v for k, v in headers.items()}.get("mcp-session-id")
    if session:
        post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return status, session, answer


def oversized(binary):
    node = Node(binary)
    try:
        before = node.rss_mib()
        caps = {"experimental": {"blob": "x" * (3 * 1024 * 1024 + 512 * 1024)}}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: initialize(node.url, capabilities=caps), range(200)))
        time.sleep(1)
        after = node.rss_mib()
        sessions = sum(1 for _, session, _ in results if session)
        refused = sum(1 for _, _, a in results if isinstance(a, dict) and "error" in a)
        print(f"oversized: 200 initializes with 3.5 MiB capabilities: {sessions} sessions created, "
              f"{refused} refused; RSS {before:.0f} -> {after:.0f} MiB")
    finally:
        node.stop()


def subscriptions(binary):
    node = Node(binary)
    try:
        _, session, _ = initialize(node.url)
        before = node.rss_mib()
        long = "u" * (100 * 1024)
        accepted = 0
        for i in range(2000):
            body = {"jsonrpc": "2.0", "id": i + 2, "method": "resources/subscribe",
                    "params": {"uri": f"test://{i}/{long}"}}
            _, _, answer = post(node.url, body, session)
            accepted += isinstance(answer, dict) and "result" in answer
        time.sleep(1)
        after = node.rss_mib()
        print(f"subscriptions: 2,000 subscribes to distinct 100 KB URIs: {accepted} accepted; "
              f"RSS {before:.0f} -> {after:.0f} MiB")
    finally:
        node.stop()


def batch(binary):
    node = Node(binary)
    try:
        _, session, _ = initialize(node.url, version="2025-03-26")
        members = [{"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
                    "params": {"uri": "test://static-text"}}]
        members += [{"jsonrpc": "2.0", "id": i, "method": "tools/call",
                     "params": {"name": "touch_resource", "arguments": {"uri": "test://static-text"}}}
                    for i in range(2, 301)]
        data = json.dumps(members).encode()
        request = urllib.request.Request(node.url, data=data, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-03-26"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read().decode()
        answers = json.loads(text) if text.startswith("[") else text
        ran = len(answers) if isinstance(answers, list) else 0
        print(f"batch: 300 messages: HTTP {status}; {ran} members answered; "
              f"body {text[:160]!r}")
    finally:
        node.stop()


def slow_bodies(binary):
    node = Node(binary, open_files=256)
    try:
        slow = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{")
        sockets, failed = [], 0
        for _ in range(1000):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", node.port))
                s.sendall(slow)
                sockets.append(s)
            except OSError:
                failed += 1
                s.close()
        time.sleep(1)
        held = 0
        for s in sockets:
            s.setblocking(False)
            try:
                s.recv(1)  # b"" (closed by the node) or an answer
            except BlockingIOError:
                held += 1  # open, waiting for the rest of the body
            except OSError:
                pass
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{node.port}/healthz", timeout=5) as r:
                health = r.status
        except Exception as err:  # noqa: BLE001 - any failure is the figure
            health = f"failed ({type(err).__name__})"
        try:
            status, session, _ = initialize(node.url)
            init = "ok" if session else f"HTTP {status}"
        except Exception as err:  # noqa: BLE001
            init = f"failed ({type(err).__name__})"
        print(f"slow bodies: 1,000 slow connections from one address, 256 descriptors: "
              f"{held} held open by the node, {failed} could not connect; "
              f"/healthz: {health}; initialize: {init}")
        for s in sockets:
            s.close()
    finally:
        node.stop()


def abandon(url, n):
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: initialize(url), range(n)))


def abandoned(binary):
    node = Node(binary, ["--session-ttl-secs", "2"])
    try:
        rss = []
        for _ in range(3):
            abandon(node.url, 10_000)
            time.sleep(14)
            rss.append(node.rss_mib())
        print("abandoned sessions (embedded): RSS after each of 3 rounds of 10,000: "
              + " -> ".join(f"{r:.1f}" for r in rss) + " MiB")
    finally:
        node.stop()


def abandoned_redis(binary):
    redis = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    workdir = tempfile.mkdtemp()
    server = subprocess.Popen([redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", workdir],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)

    def dbsize():
        out = subprocess.run(["redis-cli", "-p", str(port), "DBSIZE"], capture_output=True, text=True)
        return int(out.stdout.strip())

    node = Node(binary, ["--session-ttl-secs", "2", "--redis-url", f"redis://127.0.0.1:{port}/"])
    try:
        baseline = dbsize()
        figures = []
        for _ in range(2):
            abandon(node.url, 2_000)
            during = dbsize()
            time.sleep(20)
            figures.append((during, dbsize()))
        print(f"abandoned sessions (Redis): keys at start {baseline}; "
              + "; ".join(f"round {i}: {d} while open, {a} 20 s after the TTL"
                          for i, (d, a) in enumerate(figures)))
    finally:
        node.stop()
        server.kill()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


ATTACKS = {
    "oversized": oversized,
    "subscriptions": subscriptions,
    "batch": batch,
    "slow-bodies": slow_bodies,
    "abandoned": abandoned,
    "abandoned-redis": abandoned_redis,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", default="target/release/mcp-node", help="the mcp-node binary")
    parser.add_argument("attack", choices=[*ATTACKS, "all"])
    args = parser.parse_args()
    if not os.path.exists(args.node):
        raise SystemExit(f"{args.node} not found (cargo build --release -p mcp-node)")
    names = list(ATTACKS) if args.attack == "all" else [args.attack]
    for name in names:
        ATTACKS[name](args.node)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
