"""A stand-in for Jaeger's OTLP/HTTP receiver in the compose test (Jaeger
has no Debian package): takes POST /v1/traces on port 4318, answers 200
with an empty ExportTraceServiceResponse, and counts the exports and their
bytes; GET /count gives {"exports": N, "bytes": B}. The nodes export
protobuf (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf); the body is not
decoded, an export is proof enough that traces leave the nodes."""

import http.server
import json
import signal
import sys
import threading

lock = threading.Lock()
counts = {"exports": 0, "bytes": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        with lock:
            counts["exports"] += 1
            counts["bytes"] += len(body)
        self.send_response(200)
        self.send_header("Content-Type", self.headers.get("Content-Type") or "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        if self.path != "/count":
            self.send_error(404)
            return
        with lock:
            body = json.dumps(counts).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


# PID 1 of its container: SIGTERM (podman stop) has no default action there.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
http.server.ThreadingHTTPServer(("0.0.0.0", 4318), Handler).serve_forever()
