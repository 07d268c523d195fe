"""HTTP plumbing of the Daytona and Tensorlake contract fakes.

- serve(): a ThreadingHTTPServer on 127.0.0.1, port 0 (the kernel picks
  one); the port is printed on stdout as one line "PORT <n>" once it listens.
  SIGTERM and SIGINT stop the server and call the fake's cleanup (which kills
  every process its sandboxes run).
- A request log: every request (method, path, query, a few headers, the body
  length, the status answered), without the credential: the Authorization
  header is recorded as "Bearer <redacted>" or absent. GET /_fake/log returns
  it as JSON; DELETE /_fake/log empties it.
- A fault script: POST /_fake/faults with a JSON list of rules, each
  {"method": "GET"|"*", "path": regex matched against the path, "status": N,
   "times": N (how many requests it answers; default 1), "retry_after": "s",
   "body": object, "delay": seconds before answering}.
  A matching rule answers in place of the route, with the provider's error
  body when "body" is not given. The env variable SBX_FAKE_FAULTS may hold
  the same list at start.

Python 3 standard library only.
"""

import json
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Reply(Exception):
    """Raised by a route to answer with @status and a JSON @body."""

    def __init__(self, status, body=None, headers=None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


class Fake:
    """State shared by a fake's handlers: the log and the fault rules."""

    def __init__(self, api_key):
        self.api_key = api_key
        self.lock = threading.Lock()
        self.log = []
        self.faults = []
        env = os.environ.get("SBX_FAKE_FAULTS")
        if env:
            self.faults = json.loads(env)

    def record(self, entry):
        with self.lock:
            self.log.append(entry)

    def take_fault(self, method, path):
        with self.lock:
            for rule in self.faults:
                if rule.get("method", "*") not in ("*", method):
                    continue
                if not re.search(rule.get("path", ""), path):
                    continue
                left = rule.get("times", 1)
                if left == 0:
                    continue
                rule["times"] = left - 1
                return dict(rule)
        return None

    # Overridden by each fake.
    def error_body(self, status, message, path, method):
        return {"statusCode": status, "message": message}

    def cleanup(self):
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None  # set by serve()

    def log_message(self, fmt, *args):  # quiet: the request log is the record
        pass

    # ------------------------------------------------------------ helpers
    def parsed(self):
        u = urllib.parse.urlsplit(self.path)
        return u.path, urllib.parse.parse_qs(u.query, keep_blank_values=True)

    def body_bytes(self):
        if getattr(self, "_body", None) is not None:
            return self._body
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            self._body = b"".join(parts)
            return self._body
        n = int(self.headers.get("Content-Length") or 0)
        data = b""
        while len(data) < n:
            chunk = self.rfile.read(n - len(data))
            if not chunk:
                break
            data += chunk
        self._body = data
        return data

    def json_body(self):
        raw = self.body_bytes()
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise Reply(400, None, {"x-message": "request body is not JSON"})

    def send_json(self, status, obj, headers=None):
        data = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        if obj is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self._status = status

    def send_bytes(self, status, data, ctype="application/octet-stream"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._status = status

    def send_error_reply(self, status, message, headers=None):
        path, _ = self.parsed()
        self.send_json(status, self.fake.error_body(status, message, path, self.command),
                       headers)

    # ------------------------------------------------------------ dispatch
    def handle_any(self):
        self._body = None
        self._status = 0
        path, query = self.parsed()
        auth = self.headers.get("Authorization")
        entry = {
            "method": self.command,
            "path": path,
            "query": {k: v[0] for k, v in query.items()},
            "auth": None if auth is None else (auth.split(" ", 1)[0] + " <redacted>"),
            "content_type": self.headers.get("Content-Type"),
            "time": time.time(),
        }
        try:
            if path.startswith("/_fake/"):
                self.control(path)
            else:
                rule = self.fake.take_fault(self.command, path)
                if rule is not None:
                    self.body_bytes()
                    if rule.get("delay"):
                        time.sleep(float(rule["delay"]))
                    status = int(rule.get("status", 500))
                    headers = {}
                    if "retry_after" in rule:
                        headers["Retry-After"] = str(rule["retry_after"])
                    body = rule.get("body")
                    if body is None:
                        body = self.fake.error_body(status, rule.get("message", "scripted fault"),
                                                    path, self.command)
                    self.send_json(status, body, headers)
                    entry["fault"] = True
                elif auth != "Bearer " + self.fake.api_key:
                    self.body_bytes()
                    self.send_error_reply(401, "Unauthorized")
                else:
                    self.route(path, query)
        except Reply as r:
            if r.body is not None:
                self.send_json(r.status, r.body, r.headers)
            else:
                msg = r.headers.pop("x-message", "error")
                self.send_error_reply(r.status, msg, r.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        entry["status"] = self._status
        entry["body_len"] = len(self._body or b"")
        if not path.startswith("/_fake/"):
            self.fake.record(entry)

    def control(self, path):
        f = self.fake
        if path == "/_fake/log" and self.command == "GET":
            with f.lock:
                self.send_json(200, list(f.log))
        elif path == "/_fake/log" and self.command == "DELETE":
            with f.lock:
                f.log.clear()
            self.send_json(204, None)
        elif path == "/_fake/faults" and self.command == "POST":
            rules = self.json_body()
            with f.lock:
                f.faults = rules if isinstance(rules, list) else [rules]
            self.send_json(204, None)
        else:
            self.fake_control(path)

    def fake_control(self, path):
        raise Reply(404, {"error": "no such control route: " + path})

    def route(self, path, query):
        raise Reply(404, None, {"x-message": "Cannot %s %s" % (self.command, path)})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any


def serve(fake, handler_class):
    """Listens on 127.0.0.1 (ephemeral port), prints "PORT <n>", serves
    until SIGTERM/SIGINT, then runs fake.cleanup()."""
    handler_class.fake = fake
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    server.daemon_threads = True
    fake.port = server.server_address[1]

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stdout.write("PORT %d\n" % fake.port)
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        fake.cleanup()
        server.server_close()
