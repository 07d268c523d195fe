"""fakebase.py - what every contract fake of a hosted provider shares.

Python 3 standard library only. A fake is a ThreadingHTTPServer on
127.0.0.1 whose sandboxes are real: a directory each, and real processes
(subprocess) running in it, so the conformance suite checks real exit codes,
signals, stdin and files through a plugin.

What this module gives a fake (tests/fakes/e2b.py is the first user):

- Server start on an ephemeral port of 127.0.0.1: main() prints the base URL
  ("http://127.0.0.1:PORT") as the first line on stdout, flushed, then serves
  until SIGTERM / SIGINT. Tests start the fake, read that line, and stop it
  by its PID.
- The request log: every request, as one JSON line (n, t = UNIX seconds,
  method, path, query, headers, body as text with undecodable bytes
  escaped, truncated at 64 KiB) appended to the file given by --log (or
  $FAKE_LOG), and kept in memory for GET /_fake/log. Tests count requests
  with it.
- The fault script: rules tried in order against every request; the first
  that matches acts. A rule is a JSON object:
    method   "POST" (any when missing)
    path     regular expression matched against the path (re.fullmatch)
    after    let this many matching requests through first (default 0)
    count    act on this many requests, then retire (default 1; -1 = always)
    action   "status": answer `status` with `headers` and `body` (a JSON
               value, or a string sent as is);
             "drop": close the connection without an answer;
             "delay": sleep `delay` seconds, then handle the request
               normally (a create that answers after the client gave up);
             "hang": read the request, answer nothing for `delay` seconds,
               then close.
    retry_after_date  with "status": a Retry-After header holding the
             HTTP-date this many seconds after the answer's Date header.
  Rules come from --faults FILE / $FAKE_FAULTS (a JSON list) at start and
  from POST /_fake/faults (a rule or a list, appended); DELETE /_fake/faults
  removes them all. GET /_fake/faults lists them with what they did.
- Provider control: POST /_fake/control/NAME with a JSON body calls the
  fake's control_NAME(body) (pause a sandbox, drop it, ...), answering its
  return value as JSON.
- Sandboxes: Sandbox (a directory under the fake's temporary directory)
  and Proc (a command in it). When bwrap is on the machine a command sees
  the sandbox directory as its /, with the host's /usr and /etc read-only,
  so the sandbox owns / as on a hosted provider (SANDBOX_ROOT is ""); the
  fake refuses to start without it (--no-isolation runs commands in the
  directory on the host's own /, for fakes that do not need that). A
  command's environment is only what the request gave plus PATH, HOME,
  USER: the fake's own environment (the test's credentials) never reaches
  it. Each command is a session of its own; killing a command kills its
  process group; deleting a sandbox kills every process of its sessions
  (background ones included) and removes its directory; so does the fake's
  exit (atexit and SIGTERM / SIGINT), so nothing outlives it.
"""

import argparse
import atexit
import base64
import email.utils
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_BODY_MAX = 65536


class DropConnection(Exception):
    """Raised by a handler to close the connection without an answer."""


class Answer(Exception):
    """Raised by a handler to answer at once: status, JSON (or bytes) body."""

    def __init__(self, status, body=None, headers=None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


# ---------------------------------------------------------------- processes

_all_lock = threading.Lock()
_all_sandboxes = []


def _sessions_processes(sids):
    """PIDs of the processes whose session id is in sids (scans /proc)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read().decode("latin-1")
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 3 and int(rest[3]) in sids:
            out.append(int(name))
    return out


class Proc:
    """A command running in a sandbox: stdout / stderr read on threads into
    a list of events, stdin a pipe."""

    def __init__(self, sandbox, argv, env, cwd, stdin=True):
        self.sandbox = sandbox
        self.cond = threading.Condition()
        self.events = []        # ("stdout"|"stderr", bytes) in arrival order
        self.exit_code = None
        self.closed = 0         # output streams finished
        full_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": sandbox.home, "USER": sandbox.user, "LANG": "C.UTF-8"}
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            sandbox.wrap(argv, cwd), env=full_env, cwd=sandbox.host_cwd(cwd),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, close_fds=True)
        self.pid = self.popen.pid
        sandbox.add_session(self.pid)
        for name, stream in (("stdout", self.popen.stdout), ("stderr", self.popen.stderr)):
            threading.Thread(target=self._pump, args=(name, stream), daemon=True).start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _pump(self, name, stream):
        while True:
            try:
                chunk = os.read(stream.fileno(), 65536)
            except OSError:
                chunk = b""
            with self.cond:
                if not chunk:
                    self.closed += 1
                    self.cond.notify_all()
                    break
                self.events.append((name, chunk))
                self.cond.notify_all()
        stream.close()

    def _wait(self):
        rc = self.popen.wait()
        code = 128 - rc if rc < 0 else rc
        with self.cond:
            self.exit_code = code
            self.cond.notify_all()

    def done(self):
        return self.exit_code is not None and self.closed == 2

    def next_events(self, start, timeout):
        """Events from index start, waiting up to timeout seconds for one or
        for the end; returns (events, done)."""
        with self.cond:
            end = time.monotonic() + timeout
            while len(self.events) <= start and not self.done():
                left = end - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return self.events[start:], self.done()

    def write_stdin(self, data):
        if self.popen.stdin:
            try:
                self.popen.stdin.write(data)
                self.popen.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def close_stdin(self):
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass

    def signal(self, sig):
        """Sends sig to the command's process group (background children
        included)."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass


class Sandbox:
    """A directory that is a sandbox's /, and the sessions of its commands."""

    def __init__(self, base, sid, isolate=True, user="user", home="/home/user"):
        self.id = sid
        self.root = tempfile.mkdtemp(prefix="sb-", dir=base)
        self.isolate = isolate
        self.user = user
        self.home = home if isolate else self.root + home
        for d in ("tmp", "work", "proc", home.lstrip("/")):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        os.chmod(os.path.join(self.root, "tmp"), 0o1777)
        self.sessions = set()
        self.procs = {}
        self.lock = threading.Lock()
        with _all_lock:
            _all_sandboxes.append(self)

    def path(self, p):
        """The host path of sandbox path p (absolute, or relative to the
        home); None when it would leave the sandbox."""
        if not p.startswith("/"):
            p = self.home_in_sandbox() + "/" + p
        norm = os.path.normpath(p)
        if norm.startswith("//"):
            norm = norm[1:]
        host = os.path.join(self.root, norm.lstrip("/"))
        real = os.path.realpath(host)
        if not (real == self.root or real.startswith(self.root + "/")):
            return None
        return host

    def home_in_sandbox(self):
        return self.home if self.isolate else self.home[len(self.root):]

    def host_cwd(self, cwd):
        if self.isolate:
            return self.root
        h = self.path(cwd) if cwd else None
        return h if h and os.path.isdir(h) else self.root

    def wrap(self, argv, cwd):
        if not self.isolate:
            return argv
        w = ["bwrap", "--bind", self.root, "/", "--ro-bind", "/usr", "/usr",
             "--ro-bind", "/etc", "/etc", "--dev", "/dev", "--die-with-parent"]
        for name in ("bin", "lib", "lib64", "lib32", "sbin"):
            target = os.path.join("/", name)
            if os.path.islink(target):
                w += ["--symlink", os.readlink(target), target]
            elif os.path.isdir(target):
                w += ["--ro-bind", target, target]
        w += ["--chdir", cwd or self.home, "--"]
        return w + list(argv)

    def add_session(self, sid):
        with self.lock:
            self.sessions.add(sid)

    def kill_all(self):
        with self.lock:
            sids = set(self.sessions)
        for _ in range(50):
            pids = _sessions_processes(sids) if sids else []
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def destroy(self):
        self.kill_all()
        shutil.rmtree(self.root, ignore_errors=True)
        with _all_lock:
            if self in _all_sandboxes:
                _all_sandboxes.remove(self)


def _cleanup_all():
    with _all_lock:
        boxes = list(_all_sandboxes)
    for sb in boxes:
        try:
            sb.destroy()
        except Exception:
            pass


# ---------------------------------------------------------------- the server

class Fake:
    """A fake provider: routes, its sandboxes, the log and the faults. A
    subclass sets `name` and calls route() for each endpoint."""

    name = "fake"

    def __init__(self, args):
        self.args = args
        self.lock = threading.RLock()
        self.log = []
        self.log_file = open(args.log, "a") if args.log else None
        self.faults = []
        self.routes = []
        self.tmp = tempfile.mkdtemp(prefix="sbx-fake-%s-" % self.name)
        self.isolate = not args.no_isolation
        if self.isolate and not shutil.which("bwrap"):
            sys.stderr.write("%s fake: bwrap is not installed (its sandboxes own / through it)\n"
                             % self.name)
            sys.exit(2)
        if args.faults:
            with open(args.faults) as f:
                self.add_faults(json.load(f))

    def route(self, method, pattern, fn):
        self.routes.append((method, re.compile(pattern), fn))

    def new_sandbox(self, sid, **kw):
        return Sandbox(self.tmp, sid, isolate=self.isolate, **kw)

    # -- log and faults

    def record(self, entry):
        with self.lock:
            entry["n"] = len(self.log) + 1
            self.log.append(entry)
            if self.log_file:
                self.log_file.write(json.dumps(entry) + "\n")
                self.log_file.flush()

    def add_faults(self, rules):
        if isinstance(rules, dict):
            rules = [rules]
        with self.lock:
            for r in rules:
                r = dict(r)
                r.setdefault("count", 1)
                r.setdefault("after", 0)
                r["seen"] = 0
                r["acted"] = 0
                self.faults.append(r)

    def match_fault(self, method, path):
        with self.lock:
            for r in self.faults:
                if r.get("method") and r["method"] != method:
                    continue
                if r.get("path") and not re.fullmatch(r["path"], path):
                    continue
                if r["count"] >= 0 and r["acted"] >= r["count"]:
                    continue
                r["seen"] += 1
                if r["seen"] <= r["after"]:
                    continue
                r["acted"] += 1
                return dict(r)
        return None

    # -- control endpoints

    def control(self, handler, method, path, body):
        if path == "/_fake/log" and method == "GET":
            with self.lock:
                return 200, list(self.log)
        if path == "/_fake/faults":
            if method == "POST":
                self.add_faults(json.loads(body or b"[]"))
                return 200, {"ok": True}
            if method == "DELETE":
                with self.lock:
                    self.faults = []
                return 200, {"ok": True}
            with self.lock:
                return 200, list(self.faults)
        m = re.fullmatch(r"/_fake/control/([a-z_]+)", path)
        if m and method == "POST":
            fn = getattr(self, "control_" + m.group(1), None)
            if fn:
                return 200, fn(json.loads(body or b"{}"))
        return 404, {"message": "no control endpoint %s %s" % (method, path)}

    def shutdown(self):
        _cleanup_all()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None

    def log_message(self, fmt, *args):
        pass

    # -- reading

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            out = b""
            while True:
                line = self.rfile.readline()
                if not line:
                    break
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                out += self.rfile.read(size)
                self.rfile.readline()
            return out
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    # -- writing

    def send_json(self, status, obj, headers=None):
        if isinstance(obj, (bytes, bytearray)):
            data = bytes(obj)
            ctype = "application/octet-stream"
        elif isinstance(obj, str):
            data = obj.encode()
            ctype = "text/plain"
        elif obj is None:
            data = b""
            ctype = None
        else:
            data = json.dumps(obj).encode()
            ctype = "application/json"
        self.send_response(status)
        hdrs = dict(headers or {})
        if ctype and not any(k.lower() == "content-type" for k in hdrs):
            self.send_header("Content-Type", ctype)
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def start_stream(self, status, ctype, headers=None):
        """Starts a chunked answer; then write_chunk() and end_stream()."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data):
        if not data:
            return
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- dispatch

    def handle_any(self):
        fake = self.fake
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        body = self.read_body()
        if path.startswith("/_fake/"):
            status, obj = fake.control(self, self.command, path, body)
            self.send_json(status, obj)
            return
        fake.record({
            "t": time.time(), "method": self.command, "path": path, "query": url.query,
            "headers": {k: v for k, v in self.headers.items()},
            "body": body[:LOG_BODY_MAX].decode("utf-8", "backslashreplace"),
        })
        rule = fake.match_fault(self.command, path)
        if rule:
            act = rule.get("action", "status")
            if act == "drop":
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if act == "hang":
                time.sleep(float(rule.get("delay", 5)))
                self.close_connection = True
                return
            if act == "delay":
                time.sleep(float(rule.get("delay", 1)))
            else:
                headers = dict(rule.get("headers") or {})
                now = time.time()
                headers["Date"] = email.utils.formatdate(now, usegmt=True)
                if "retry_after_date" in rule:
                    headers["Retry-After"] = email.utils.formatdate(
                        now + float(rule["retry_after_date"]), usegmt=True)
                self.send_json(int(rule.get("status", 500)), rule.get("body"), headers)
                return
        for method, pattern, fn in fake.routes:
            if method != self.command:
                continue
            m = pattern.fullmatch(path)
            if not m:
                continue
            try:
                fn(self, m, query, body)
            except Answer as a:
                self.send_json(a.status, a.body, a.headers)
            except DropConnection:
                self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            except Exception:
                traceback.print_exc()
                self.send_json(500, {"code": 500, "message": "fake: internal error"})
            return
        self.send_json(404, {"code": 404, "message": "no route %s %s" % (self.command, path)})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any


def arg_parser(name):
    p = argparse.ArgumentParser(description="contract fake of %s" % name)
    p.add_argument("--log", default=os.environ.get("FAKE_LOG"),
                   help="append every request here as JSON lines")
    p.add_argument("--faults", default=os.environ.get("FAKE_FAULTS"),
                   help="a JSON file with a list of fault rules")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    p.add_argument("--no-isolation", action="store_true",
                   help="run commands on the host's / (no bwrap)")
    return p


def serve(fake_class, argv=None):
    """Parses the arguments, starts fake_class on 127.0.0.1, prints its base
    URL, serves until SIGTERM / SIGINT and cleans up."""
    args = arg_parser(fake_class.name).parse_args(argv)
    fake = fake_class(args)
    atexit.register(fake.shutdown)

    class H(Handler):
        pass
    H.fake = fake
    server = ThreadingHTTPServer(("127.0.0.1", args.port), H)
    server.daemon_threads = True
    fake.server = server

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stdout.write("http://127.0.0.1:%d\n" % server.server_address[1])
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        fake.shutdown()
    return 0


def b64(data):
    return base64.b64encode(data).decode()
