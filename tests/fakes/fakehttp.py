"""HTTP plumbing of the contract fakes of hosted providers (tests/fakes/).

- serve(): a ThreadingHTTPServer on 127.0.0.1, port 0 (the kernel picks
  one), with a listen backlog of 1024 (bursts of connections) and
  TCP_NODELAY on every accepted connection (Handler); the port is printed
  on stdout as one line "PORT <n>" once it listens.
  SIGTERM and SIGINT stop the server and call the fake's cleanup (which kills
  every process its sandboxes run).
- A request log that tests read: every request, numbered from 1 ("n"), with
  its time, method, path, query, headers, body (as text, undecodable bytes
  escaped, the first 64 KiB), body length and the status answered ("fault":
  true when a fault rule answered). The entry is listed as the request
  arrives; its status is set as the answer starts (before the client can
  read it), its body and body_len as the body is read (before any answer)
  and again once the answer is finished; "conn" numbers the TCP connection
  it came on (from 1, in the order the fake accepted them, control routes'
  connections too), so a test can count the connections requests took. The credential is never in it: the
  Authorization header is recorded as "Bearer <redacted>" (in "auth" and in
  "headers"; X-API-Key, X-Access-Token, Cookie and any header holding the
  fake's key as "<redacted>"), so a test can search the log for a secret. GET /_fake/log
  returns it as JSON; DELETE /_fake/log empties it. With SBX_FAKE_LOG set,
  every entry is also appended to that file as a JSON line.
- A fault script: POST /_fake/faults with a JSON list of rules (or one rule)
  replaces the rules; DELETE /_fake/faults removes them; GET /_fake/faults
  lists them with their counters. Rules are tried in order; a rule is
  {"method": "GET"|"*" (default "*"),
   "path": regex searched in the path,
   "after": let this many matching requests through first (default 0),
   "times": act on this many requests (default 1; -1 = always),
   "action": "status" (default): answer "status" (default 500) with "body"
             (default: the provider's error body with "message"), after
             "delay" seconds when given;
             "pass": wait "delay" seconds, then handle the request normally
             (a create that answers after the client gave up);
             "drop": close the connection without an answer;
             "hang": read the request, answer nothing for "delay" seconds
             (default 5), then close,
   "retry_after": a Retry-After value sent as is,
   "retry_after_date": seconds: Retry-After as the HTTP-date that many
             seconds after the answer's Date header,
   "concurrency": N: a provider that takes N at a time: at most N matching
             requests are handled at once (each holds its slot until its
             answer is sent, after "delay" seconds when given, so that a
             test can make slots last); one that comes while N are being
             handled is answered "status" (default 429) with the provider's
             error body ("message" default "Too many concurrent requests
             (limit N)") and no Retry-After unless "retry_after" or
             "retry_after_date" is given. "times" (default -1 here) bounds
             the refusals; "after" is not used. The rule counts "admitted",
             "inflight" (now) and "peak" (the most at once) besides "seen"
             and "acted" (refusals)}.
  Each rule counts "seen" (matching requests) and "acted". The env variable
  SBX_FAKE_FAULTS may hold a list at start.
- q1() and Fake's sandbox helpers (boxes(), start_reaper(), the default
  cleanup()) are what every fake writes alike.

Python 3 standard library only.
"""

import email.utils
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_BODY_MAX = 65536

# A provider's sandbox starts its processes with every signal at its default
# action. A fake started with some ignored (nohup ignores SIGHUP; a shell's
# background job SIGINT and SIGQUIT) would hand that on to its sandboxes'
# commands, where a shell cannot even trap a signal ignored on entry: the
# fakes' servers and everything they start take the defaults back.
for _sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.SIG_DFL)


def q1(query, name, default=None):
    """The first value of query parameter @name (parse_qs form), or @default."""
    v = query.get(name)
    return v[0] if v else default


class Reply(Exception):
    """Raised by a route to answer with @status and a JSON @body."""

    def __init__(self, status, body=None, headers=None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


class Fake:
    """State shared by a fake's handlers: the log and the fault rules.

    A fake keeps its sandboxes in self.sandboxes (id -> object with a .box,
    an nsbox.Box) and its files under self.dir (None: none), both guarded
    by self.lock, for boxes(), start_reaper() and cleanup()."""

    def __init__(self, api_key):
        self.api_key = api_key
        self.lock = threading.Lock()
        self.log = []
        self.faults = []
        self.sandboxes = {}
        self.dir = None
        self.log_file = None
        self.connections = 0    # accepted so far (Handler.setup)
        path = os.environ.get("SBX_FAKE_LOG")
        if path:
            self.log_file = open(path, "a", encoding="utf-8")
        env = os.environ.get("SBX_FAKE_FAULTS")
        if env:
            self.set_faults(json.loads(env))

    def record(self, entry):
        """Logs @entry as the request arrives, before any answer is sent, so
        that a client reading /_fake/log after its answer always finds it;
        finish() fills in the answer's fields."""
        with self.lock:
            entry["n"] = len(self.log) + 1
            self.log.append(entry)

    def finish(self, entry):
        """Completes @entry (status, body) once answered and writes it to the
        log file."""
        with self.lock:
            if self.log_file:
                self.log_file.write(json.dumps(entry) + "\n")
                self.log_file.flush()

    def set_faults(self, rules):
        """Replaces the fault rules with @rules (a rule or a list)."""
        if isinstance(rules, dict):
            rules = [rules]
        fresh = []
        for r in rules:
            r = dict(r)
            if "concurrency" in r:
                r.setdefault("times", -1)
                r.setdefault("status", 429)
                r.setdefault("message", "Too many concurrent requests (limit %d)"
                             % int(r["concurrency"]))
                r["admitted"] = r["inflight"] = r["peak"] = 0
            r.setdefault("times", 1)
            r.setdefault("after", 0)
            r["seen"] = 0
            r["acted"] = 0
            fresh.append(r)
        with self.lock:
            self.faults = fresh

    def take_fault(self, method, path, held):
        """The first rule that acts on this request (a copy), or None. A
        concurrency rule that admits the request appends itself to @held
        (a list; release() frees the slot once the request is answered) and
        acts as "pass" with its delay."""
        with self.lock:
            for rule in self.faults:
                if rule.get("method", "*") not in ("*", method):
                    continue
                if not re.search(rule.get("path", ""), path):
                    continue
                times = rule.get("times", 1)
                if "concurrency" in rule:
                    rule["seen"] += 1
                    if rule["inflight"] < int(rule["concurrency"]):
                        rule["inflight"] += 1
                        rule["admitted"] += 1
                        rule["peak"] = max(rule["peak"], rule["inflight"])
                        held.append(rule)
                        if rule.get("delay"):
                            return {"action": "pass", "delay": rule["delay"]}
                        return None
                    if times >= 0 and rule["acted"] >= times:
                        continue
                    rule["acted"] += 1
                    refusal = dict(rule)
                    refusal.pop("delay", None)
                    refusal["action"] = "status"
                    return refusal
                if times >= 0 and rule.get("acted", 0) >= times:
                    continue
                rule["seen"] = rule.get("seen", 0) + 1
                if rule["seen"] <= rule.get("after", 0):
                    continue
                rule["acted"] = rule.get("acted", 0) + 1
                return dict(rule)
        return None

    def release(self, held):
        """Frees the slots of the concurrency rules in @held."""
        with self.lock:
            for rule in held:
                rule["inflight"] -= 1
            held.clear()

    def boxes(self):
        """A snapshot of the sandboxes (a list)."""
        with self.lock:
            return list(self.sandboxes.values())

    def start_reaper(self, fn, interval=0.2):
        """Calls fn(sandbox, now) for every sandbox every @interval seconds on
        a daemon thread (lifetimes, idle stops); an exception of @fn is
        printed to stderr and the loop goes on."""
        def loop():
            while True:
                time.sleep(interval)
                now = time.time()
                for sb in self.boxes():
                    try:
                        fn(sb, now)
                    except Exception as e:  # noqa: BLE001 - keep reaping
                        sys.stderr.write("reaper: %r\n" % (e,))
        threading.Thread(target=loop, daemon=True).start()

    # Overridden by each fake.
    def error_body(self, status, message, path, method):
        return {"statusCode": status, "message": message}

    def cleanup(self):
        """At exit: deletes every sandbox's box (its processes end, its
        directory goes) and the fake's directory."""
        for sb in self.boxes():
            box = getattr(sb, "box", None)
            if box is not None:
                box.delete()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None  # set by serve()
    auth_header = "Authorization"  # the header that carries "Bearer <key>"
    # TCP_NODELAY on each accepted socket (StreamRequestHandler.setup()):
    # with Nagle's algorithm on, an answer written in more than one small
    # write (headers, then body; a stream's frames) holds its last write
    # until the client's delayed ACK, some 40 ms or more per request on
    # loopback, which no provider's server adds.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # quiet: the request log is the record
        pass

    def setup(self):
        # One handler per accepted connection: its number, for the log.
        super().setup()
        with self.fake.lock:
            self.fake.connections += 1
            self.conn = self.fake.connections

    def send_response(self, code, message=None):
        """Puts @code in the request's log entry before the answer can reach
        the client (the headers are buffered until end_headers), so a client
        reading /_fake/log after its answer never finds the status open.
        No lock: routes answer while holding the fake's lock, and storing
        into a key the entry already has is atomic and keeps its size."""
        entry = getattr(self, "_entry", None)
        if entry is not None:
            entry["status"] = code
        super().send_response(code, message)

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
            self.log_body()
            return self._body
        n = int(self.headers.get("Content-Length") or 0)
        data = b""
        while len(data) < n:
            chunk = self.rfile.read(n - len(data))
            if not chunk:
                break
            data += chunk
        self._body = data
        self.log_body()
        return data

    def log_body(self):
        """Sets the request's body in its log entry as soon as it is read,
        before any answer to it goes out: a client that reads /_fake/log
        right after its answer finds the body there."""
        entry = getattr(self, "_entry", None)
        if entry is None:
            return
        with self.fake.lock:
            entry["body_len"] = len(self._body)
            entry["body"] = self._body[:LOG_BODY_MAX].decode("utf-8", "backslashreplace")

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
    def date_time_string(self, timestamp=None):
        # The Date header of a fault's answer is the time its
        # retry_after_date counts from.
        if timestamp is None:
            timestamp = getattr(self, "_now", None)
        return email.utils.formatdate(timestamp, usegmt=True)

    # Headers that carry a credential in some provider's protocol.
    SECRET_HEADERS = ("authorization", "x-api-key", "x-access-token", "cookie")

    def redact_header(self, name, value):
        """@value as the log keeps it: a credential header (or any header
        holding the fake's key) as "<redacted>", Authorization keeping its
        scheme ("Bearer <redacted>")."""
        key = self.fake.api_key
        if name.lower() == "authorization":
            return value.split(" ", 1)[0] + " <redacted>"
        if name.lower() in self.SECRET_HEADERS or (key and key in value):
            return "<redacted>"
        return value

    def fault(self, rule, path):
        """Acts on a fault rule; True when it answered (or dropped)."""
        act = rule.get("action", "status")
        self.body_bytes()
        if act == "drop":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        if act == "hang":
            time.sleep(float(rule.get("delay", 5)))
            self.close_connection = True
            return True
        if rule.get("delay"):
            time.sleep(float(rule["delay"]))
        if act == "pass":
            return False
        status = int(rule.get("status", 500))
        headers = {}
        self._now = time.time()
        if "retry_after" in rule:
            headers["Retry-After"] = str(rule["retry_after"])
        if "retry_after_date" in rule:
            headers["Retry-After"] = email.utils.formatdate(
                self._now + float(rule["retry_after_date"]), usegmt=True)
        body = rule.get("body")
        if body is None:
            body = self.fake.error_body(status, rule.get("message", "scripted fault"),
                                        path, self.command)
        self.send_json(status, body, headers)
        return True

    def handle_any(self):
        self._body = None
        self._status = 0
        self._now = None
        path, query = self.parsed()
        auth = self.headers.get(self.auth_header)
        redacted = None if auth is None else (auth.split(" ", 1)[0] + " <redacted>")
        entry = {
            "method": self.command,
            "path": path,
            "query": {k: v[0] for k, v in query.items()},
            "auth": redacted,
            "headers": {k: self.redact_header(k, v) for k, v in self.headers.items()},
            "content_type": self.headers.get("Content-Type"),
            "time": time.time(),
            "conn": self.conn,
            "status": None,     # set as the answer starts (None: not yet)
        }
        self._entry = None
        if not path.startswith("/_fake/"):
            self.fake.record(entry)
            self._entry = entry
        held = []
        try:
            if path.startswith("/_fake/"):
                self.control(path)
            else:
                rule = self.fake.take_fault(self.command, path, held)
                if rule is not None and self.fault(rule, path):
                    entry["fault"] = True
                elif not self.authorized(auth):
                    self.body_bytes()
                    self.send_error_reply(401, "Unauthorized")
                else:
                    if rule is not None and not held:
                        entry["fault"] = True
                    self.route(path, query)
        except Reply as r:
            if r.body is not None:
                self.send_json(r.status, r.body, r.headers)
            else:
                msg = r.headers.pop("x-message", "error")
                self.send_error_reply(r.status, msg, r.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.fake.release(held)
        with self.fake.lock:
            if self._status or entry["status"] is None:
                entry["status"] = self._status
            entry["body_len"] = len(self._body or b"")
            entry["body"] = (self._body or b"")[:LOG_BODY_MAX].decode("utf-8",
                                                                      "backslashreplace")
        if not path.startswith("/_fake/"):
            self.fake.finish(entry)

    def authorized(self, auth):
        """Whether the request carries the fake's credential: by default
        "Authorization: Bearer <key>" (a fake with other credentials, such
        as client certificates, overrides it)."""
        return auth == "Bearer " + self.fake.api_key

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
            f.set_faults(self.json_body())
            self.send_json(204, None)
        elif path == "/_fake/faults" and self.command == "DELETE":
            f.set_faults([])
            self.send_json(204, None)
        elif path == "/_fake/faults" and self.command == "GET":
            with f.lock:
                self.send_json(200, [dict(r) for r in f.faults])
        else:
            self.fake_control(path)

    def fake_control(self, path):
        raise Reply(404, {"error": "no such control route: " + path})

    def route(self, path, query):
        raise Reply(404, None, {"x-message": "Cannot %s %s" % (self.command, path)})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any


class Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: a burst of clients connecting at
    # once (a create storm) would see SYNs dropped and wait out TCP's
    # retransmission (1, 3, 7, 15 s ...), which no provider does.
    request_queue_size = 1024


def serve(fake, handler_class, ssl_context=None):
    """Listens on 127.0.0.1 (ephemeral port), prints "PORT <n>", serves
    until SIGTERM/SIGINT, then runs fake.cleanup(). With @ssl_context (an
    ssl.SSLContext for a server), every connection is TLS, its handshake
    made on the connection's own thread."""
    handler_class.fake = fake
    server = Server(("127.0.0.1", 0), handler_class)
    if ssl_context is not None:
        server.socket = ssl_context.wrap_socket(server.socket, server_side=True,
                                                do_handshake_on_connect=False)
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
