#!/usr/bin/env python3
"""A stdio MCP server that misbehaves on purpose, for the relay's tests.

Usage: hostile.py MODE. It answers `initialize` (unless MODE says not to) and
`tools/call` of its one tool `act` as MODE says:

  silent        never answers initialize
  stderr-flood  writes 16 MiB to stderr before answering initialize
  long-line     answers `act` with a 20 MiB line
  exit-in-call  exits (status 3) when `act` is called
  grandchild    on initialize, forks a grandchild that sleeps; both ignore
                SIGTERM and stdin's end
  roots         asks the client `roots/list` once it is initialized (outside
                any request) and answers `act` with the client's answer, or
                "no answer yet"
  roots-flood   asks `roots/list` 20 times at once when initialized and
                answers `act` with every answer it got so far, as JSON
  roots-big     as roots-flood, but 8 questions of 300 kB each (a padding
                parameter)
  echo-meta     answers `act` with the `_meta` its request carried, as JSON
                text
  elicit        `act` asks the client `elicitation/create` as many times as
                its argument `questions` says (default 1), one after the
                other (all at once with `together: true`), then answers
                with every answer and how many times `act` was called in
                this process, as JSON text (with `hold: true` it never
                answers); `pad: N` pads each question with N bytes (in its
                `_meta`), and `log_after_ms: T` sends a log line T ms after
                the questions, before their answers; `progress_after: N`
                reports progress N times once answered (1 of N, 2 of N,
                ..., 300 ms apart), each with a log line "step I", before
                it answers
  modern        speaks 2026-07-28 too: answers `server/discover`, and `act`
                first answers `input_required` (one elicitation, under the
                key `name`, and a `requestState` of its own), then, retried
                with both, the state it got back, the answer, the client
                capabilities of the request's `_meta`, its process id and
                its count of calls, as JSON text. Its notes are those of
                `watch`, heard through `subscriptions/listen` (each listen
                logged as "PID listen URI,URI... tools|-", its
                cancellation as "PID unlisten"); `act` {note, text} writes
                one, and "tools" poked (as in `watch`) announces a tools
                list change to the listens that want it
  watch         keeps notes in files of the directory $WATCH_DIR (note://a
                is the file note-a, and so on) and offers them as
                subscribable resources: `act` {note, text} writes one;
                `resources/subscribe` and `resources/unsubscribe` are
                logged to the file subscriptions.log as "PID subscribe URI";
                every 50 ms, a subscribed note whose file changed is
                announced (`notifications/resources/updated`), and so is the
                URI written into a file poke-PID (then removed; written
                elsewhere and renamed there, so as to be read whole)
  well          behaves
"""

import json
import os
import signal
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "well"
ROOTS_ANSWER = []
# elicit: calls of `act` so far, and the call waiting for its answers.
CALLS = 0
ELICITING = {}


SEND = threading.Lock()
# watch: the subscribed URIs, each with its file's state when last seen.
SUBSCRIBED = {}
# modern: the listen requests running, by id: their URIs (each with its
# file's state when last seen) and whether they want tools list changes.
LISTENS = {}
WATCH_DIR = os.environ.get("WATCH_DIR", ".")


def send(message):
    with SEND:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def note_file(uri):
    return os.path.join(WATCH_DIR, "note-" + uri.removeprefix("note://"))


def note_state(uri):
    try:
        st = os.stat(note_file(uri))
        return (st.st_mtime_ns, st.st_size)
    except FileNotFoundError:
        return None


def updated(uri, listen=None):
    params = {"uri": uri}
    if listen is not None:
        params["_meta"] = {"io.modelcontextprotocol/subscriptionId": listen}
    send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params})


def watch_notes():
    poke = os.path.join(WATCH_DIR, f"poke-{os.getpid()}")
    while True:
        time.sleep(0.05)
        # (listen id, URIs with their states): one entry without an id for
        # the subscriptions of `watch`.
        watched = [(None, SUBSCRIBED)] + [(i, l["uris"]) for i, l in list(LISTENS.items())]
        for listen, uris in watched:
            for uri, seen in list(uris.items()):
                now = note_state(uri)
                if now != seen:
                    uris[uri] = now
                    updated(uri, listen)
        if os.path.exists(poke):
            with open(poke) as f:
                uri = f.read().strip()
            os.remove(poke)
            for listen, uris in watched:
                if uri in uris:
                    updated(uri, listen)
            if uri == "tools":
                for i, l in list(LISTENS.items()):
                    if l["tools"]:
                        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                              "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": i}}})


def listen(request):
    wanted = request.get("params", {}).get("notifications") or {}
    uris = [u for u in wanted.get("resourceSubscriptions") or [] if u.startswith("note://")]
    tools = bool(wanted.get("toolsListChanged"))
    LISTENS[request["id"]] = {"uris": {u: note_state(u) for u in uris}, "tools": tools}
    log_subscription("listen", ",".join(uris) + (" tools" if tools else " -"))
    acknowledged = {"resourceSubscriptions": uris}
    if tools:
        acknowledged["toolsListChanged"] = True
    send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
        "_meta": {"io.modelcontextprotocol/subscriptionId": request["id"]},
        "notifications": acknowledged}})


def log_subscription(what, uri):
    with open(os.path.join(WATCH_DIR, "subscriptions.log"), "a") as f:
        f.write(f"{os.getpid()} {what} {uri}\n")


def write_note(request):
    arguments = request.get("params", {}).get("arguments") or {}
    # Whole, or not at all: a watcher never sees it half written.
    path = note_file("note://" + arguments["note"])
    with open(f"{path}.{os.getpid()}", "w") as f:
        f.write(arguments["text"])
    os.replace(f"{path}.{os.getpid()}", path)
    answer(request, {"content": [{"type": "text", "text": "wrote"}]})


def answer(request, result):
    send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def elicit(n=None):
    n = n or len(ELICITING["answers"]) + 1
    params = {"message": f"question {n}",
              "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}
    if ELICITING.get("pad"):
        params["_meta"] = {"pad": "p" * ELICITING["pad"]}
    send({"jsonrpc": "2.0", "id": f"ask-{CALLS}-{n}", "method": "elicitation/create", "params": params})


def main():
    global CALLS
    if MODE == "grandchild":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE in ("watch", "modern"):
        threading.Thread(target=watch_notes, daemon=True).start()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        method = request.get("method")
        if MODE in ("roots", "roots-flood", "roots-big") and method == "notifications/initialized":
            count = {"roots": 1, "roots-flood": 20, "roots-big": 8}[MODE]
            params = {"pad": "p" * 300_000} if MODE == "roots-big" else {}
            for n in range(1, count + 1):
                send({"jsonrpc": "2.0", "id": f"roots-{n}", "method": "roots/list", "params": params})
            continue
        if str(request.get("id")).startswith("roots-") and method is None:
            ROOTS_ANSWER.append(request)
            continue
        if str(request.get("id")).startswith("ask-") and method is None:
            ELICITING["answers"].append(request.get("result", request.get("error")))
            if ELICITING["together"]:
                ELICITING["answers"].sort(key=lambda a: json.dumps(a))
            if len(ELICITING["answers"]) < ELICITING["questions"]:
                if not ELICITING["together"]:
                    elicit()
            elif ELICITING["hold"]:
                pass
            else:
                token = ELICITING["request"].get("params", {}).get("_meta", {}).get("progressToken")
                steps = ELICITING["progress_after"]
                for step in range(1, steps + 1):
                    if token is not None:
                        send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                            "progressToken": token, "progress": step, "total": steps,
                            "message": f"step {step}"}})
                    send({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": f"step {step}"}})
                    time.sleep(0.3)
                text = json.dumps({"calls": CALLS, "answers": ELICITING["answers"]})
                answer(ELICITING["request"], {"content": [{"type": "text", "text": text}]})
            continue
        if method == "notifications/cancelled" and MODE == "modern":
            if LISTENS.pop(request.get("params", {}).get("requestId"), None) is not None:
                log_subscription("unlisten", "")
            continue
        if "id" not in request or method is None:
            continue
        if method == "subscriptions/listen" and MODE == "modern":
            listen(request)
            continue
        if method == "server/discover" and MODE == "modern":
            answer(request, {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {"listChanged": True}, "resources": {"subscribe": True}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "hostile-modern", "version": "1"}},
            })
            continue
        if method == "initialize":
            if MODE == "silent":
                continue
            if MODE == "stderr-flood":
                chunk = "x" * 1023 + "\n"
                for _ in range(16 * 1024):
                    sys.stderr.write(chunk)
                sys.stderr.flush()
            if MODE == "grandchild":
                if os.fork() == 0:
                    # The grandchild: keeps the process group, ignores
                    # SIGTERM, and outlives its parent's stdin.
                    sys.stdin.close()
                    while True:
                        time.sleep(1)
            capabilities = {"tools": {}}
            if MODE == "watch":
                capabilities["resources"] = {"subscribe": True}
            answer(request, {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": capabilities,
                "serverInfo": {"name": "hostile-" + MODE, "version": "1"},
            })
        elif MODE == "watch" and method == "resources/list":
            answer(request, {"resources": [{"uri": f"note://{n}", "name": n} for n in "ab"]})
        elif MODE == "watch" and method in ("resources/subscribe", "resources/unsubscribe"):
            uri = request["params"]["uri"]
            if method == "resources/subscribe":
                SUBSCRIBED[uri] = note_state(uri)
            else:
                SUBSCRIBED.pop(uri, None)
            log_subscription(method.removeprefix("resources/"), uri)
            answer(request, {})
        elif method == "tools/list":
            answer(request, {"tools": [{"name": "act", "inputSchema": {"type": "object"}}]})
        elif method == "tools/call":
            if MODE == "long-line":
                text = "y" * (20 * 1024 * 1024)
                answer(request, {"content": [{"type": "text", "text": text}]})
            elif MODE == "exit-in-call":
                sys.exit(3)
            elif MODE in ("roots-flood", "roots-big"):
                answer(request, {"content": [{"type": "text", "text": json.dumps(ROOTS_ANSWER)}]})
            elif MODE == "roots":
                text = json.dumps(ROOTS_ANSWER[0]) if ROOTS_ANSWER else "no answer yet"
                answer(request, {"content": [{"type": "text", "text": text}]})
            elif MODE == "modern" and "note" in (request.get("params", {}).get("arguments") or {}):
                write_note(request)
            elif MODE == "modern":
                CALLS += 1
                params = request.get("params", {})
                state = params.get("requestState")
                if state is None:
                    answer(request, {
                        "resultType": "input_required",
                        "inputRequests": {"name": {"method": "elicitation/create", "params": {
                            "message": "who?",
                            "requestedSchema": {"type": "object",
                                                "properties": {"name": {"type": "string"}}}}}},
                        "requestState": f"child-state-{CALLS}",
                    })
                else:
                    meta = params.get("_meta", {})
                    text = json.dumps({
                        "state": state,
                        "answer": (params.get("inputResponses") or {}).get("name"),
                        "caps": meta.get("io.modelcontextprotocol/clientCapabilities"),
                        "pid": os.getpid(),
                        "calls": CALLS,
                    })
                    answer(request, {"content": [{"type": "text", "text": text}]})
            elif MODE == "elicit":
                CALLS += 1
                arguments = request.get("params", {}).get("arguments") or {}
                ELICITING.update(request=request, answers=[],
                                 questions=int(arguments.get("questions", 1)),
                                 together=bool(arguments.get("together")),
                                 hold=bool(arguments.get("hold")),
                                 pad=int(arguments.get("pad", 0)),
                                 progress_after=int(arguments.get("progress_after", 0)))
                for n in range(ELICITING["questions"] if ELICITING["together"] else 1):
                    elicit(n + 1)
                if "log_after_ms" in arguments:
                    time.sleep(arguments["log_after_ms"] / 1000)
                    send({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "asked"}})
            elif MODE == "watch":
                write_note(request)
            elif MODE == "echo-meta":
                meta = request.get("params", {}).get("_meta", {})
                answer(request, {"content": [{"type": "text", "text": json.dumps(meta)}]})
            else:
                answer(request, {"content": [{"type": "text", "text": "acted"}]})
        else:
            send({"jsonrpc": "2.0", "id": request["id"],
                  "error": {"code": -32601, "message": "method not found"}})
    if MODE == "grandchild":
        # stdin ended: stay anyway, as a server that ignores its end would.
        while True:
            time.sleep(1)


main()
