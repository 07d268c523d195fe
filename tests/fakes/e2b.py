#!/usr/bin/python3
"""A fake E2B service for the libsbx tests.

Follows the E2B section of the provider contracts (e2b-dev/E2B:
spec/openapi.yml, spec/envd/process/process.proto,
spec/envd/filesystem/filesystem.proto, spec/envd/envd.yaml,
packages/python-sdk/e2b/envd/).

One listener on 127.0.0.1:<n> serves both planes.

Control plane (E2B_API_URL=http://127.0.0.1:<n>), header X-API-Key:
  POST   /sandboxes                  NewSandbox -> 201 Sandbox
  GET    /sandboxes/{id}             200 SandboxDetail
  GET    /v2/sandboxes?state=&metadata=k%3Dv&limit=&nextToken=
                                     200 [ListedSandbox], X-Next-Token,
                                     X-Total-Running
  DELETE /sandboxes/{id}             204
  POST   /sandboxes/{id}/timeout     {"timeout": s} counted from now, 204
  POST   /sandboxes/{id}/refreshes   {"duration": 0..3600}, 204
  POST   /sandboxes/{id}/pause       204; 409 when it is not running
  POST   /sandboxes/{id}/connect     {"timeout": s} 200 running, 201 resumed
  Errors: {"code": <int>, "message": "..."}.
A sandbox whose timeout passes is killed (autoPause: paused).

envd (port 49983 of the sandbox), chosen by either
  Host: 49983-<id>.<domain>   (domain from --domain / $E2B_DOMAIN, default
                               "e2b.local"; a client resolves it to 127.0.0.1)
  or the headers E2b-Sandbox-Id: <id> and E2b-Sandbox-Port: 49983.
Header X-Access-Token: <envdAccessToken> when created with "secure": true.
  POST /process.Process/Start        Connect server stream, JSON codec:
        request one envelope (flag 0, 4-byte big-endian length, JSON);
        answer envelopes {"event":{"start":{"pid":N}}}, {"event":{"data":
        {"stdout"|"stderr": base64}}}, {"event":{"keepalive":{}}} after each
        Keepalive-Ping-Interval seconds of quiet (header, default 50),
        {"event":{"end":{"exitCode":N,"exited":true,"status":"exit status N"}}}
        (exitCode left out when 0; a signal death: exited false,
        "status":"signal: killed"), then the end-of-stream frame (flag 2)
        "{}", or {"error":{"code":"deadline_exceeded",...}} when
        Connect-Timeout-Ms passes (the process is killed).
  POST /process.Process/Connect      Connect server stream: request one
        envelope {"process": {"pid": N} | {"tag": T}}; the answer is Start's
        stream of that running process from now on (its start event first;
        output sent before is not sent again; Keepalive-Ping-Interval and
        Connect-Timeout-Ms as for Start, the deadline ending only the
        stream). A process that is not running: 200 and the end-of-stream
        frame {"error": {"code": "not_found", ...}}.
  POST /process.Process/List|SendInput|CloseStdin|SendSignal|Update   unary JSON
  A terminal: Start with "pty": {"size": {"rows", "cols"}} runs the command
        on a real pseudo-terminal of that size, leading a session of its
        own with the terminal as its controlling terminal (stdin, stdout,
        stderr); its output comes as {"data": {"pty": base64}}; SendInput
        {"input": {"pty": base64}} types at it; Update {"process", "pty":
        {"size"}} resizes it (SIGWINCH); CloseStdin is refused
        (failed_precondition: a terminal's EOF is its ^D, as process.proto
        says); SendSignal signals the session's leader.
  GET|POST /files?path=&username=    raw bytes (POST: octet-stream or
        multipart field "file"; creates parents) -> [{"path","name","type"}]
        errors {"message", "code": <int>}
  POST /filesystem.Filesystem/ListDir|Stat|MakeDir|Remove|Move   unary JSON
  Unary errors: HTTP status and {"code": "not_found", "message": "..."}.
int64 values (pid is uint32, so a number; size is a string) follow proto3
JSON. The user (Authorization: Basic base64("user:"), or ?username= on
/files; "user" or "root") chooses HOME (/home/user or /root) and the base of
relative paths; every command runs as the sandbox's root (uid 0 in it).

The API key is SBX_FAKE_API_KEY (default "fake-e2b-key"). Every request is
logged (tests/fakes/fakehttp.py: GET/DELETE /_fake/log, POST /_fake/faults).
Control routes (no auth): GET /_fake/sandbox/{id} {"state", "root",
"running", "end_at", "timeout", "processes"}; POST /_fake/sandbox/{id}/vanish;
POST /_fake/sandbox/{id}/expire (its timeout passes now); POST
/_fake/hold_create {"seconds": s}: the next create makes its sandbox, then
waits s seconds before it answers. POST /_fake/keepalive {"seconds": s}: every
process stream started from now sends its keepalive after s seconds of quiet
whatever Keepalive-Ping-Interval says (0: as the header says again); GET
/_fake/keepalive {"seconds": s, "sent": n}, n the keepalive messages sent
since the last POST.

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import base64
import datetime
import json
import os
import re
import shutil
import signal
import stat as stm
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply  # noqa: E402

ENVD_PORT = 49983
ENVD_VERSION = "0.2.0"
TEMPLATES = {"base": (2, 512, 22 * 1024), "code-interpreter-v1": (2, 1024, 22 * 1024)}

SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}
CONNECT_STATUS = {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403,
                  "not_found": 404, "already_exists": 409, "failed_precondition": 412,
                  "resource_exhausted": 429, "internal": 500, "unavailable": 503,
                  "deadline_exceeded": 504}


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def aerr(status, message):
    """A control-plane error."""
    return Reply(status, {"code": status, "message": message})


def cerr(code, message):
    """A Connect unary error."""
    return Reply(CONNECT_STATUS[code], {"code": code, "message": message})


def ferr(status, message):
    """An envd /files error."""
    return Reply(status, {"message": message, "code": status})


def signal_command(sb, p, sig):
    """SendSignal: @sig to the command's processes. The fake's own wrapper
    (nsenter, the group's leader outside the sandbox) gets only SIGKILL, so
    that a command that ignores SIGTERM keeps running, as under envd."""
    if p.tty:
        nsbox.signal_pty(p.popen, sig)
        return
    if sig == signal.SIGKILL:
        sb.box.kill_command(p.popen, sig)
        return
    outer = p.popen.pid
    try:
        group = os.getpgid(outer)
    except OSError:
        return
    # envd signals the process it named, whenever the signal comes. Here the
    # command is nsenter's child, which a signal sent right after the start
    # event (a kill asked for before it) can precede: then the signal waits
    # for it (2 s at most), rather than reaching no process.
    until = time.time() + 2.0
    while True:
        hit = False
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == outer:
                continue
            try:
                if os.getpgid(int(d)) == group:
                    os.kill(int(d), sig)
                    hit = True
            except OSError:
                pass
        if hit or p.popen.poll() is not None or time.time() >= until:
            return
        time.sleep(0.005)


def envelope(flags, obj):
    data = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


class Process:
    def __init__(self, pid, config, tag):
        self.pid = pid
        self.config = config
        self.tag = tag
        self.popen = None
        self.box = None             # its sandbox's nsbox.Box
        self.events = []            # ("stdout"|"stderr", bytes)
        self.ended = False
        self.exited = False         # its process exited (ended: end event due)
        self.stdin_open = False
        self.tty = False            # it runs on a terminal
        self.master = None          # the terminal's master descriptor
        self.cond = threading.Condition()

    def emit(self, name, data):
        with self.cond:
            self.events.append((name, data))
            self.cond.notify_all()

    def pty_write(self, data):
        with self.cond:
            if self.master is not None:
                os.write(self.master, data)

    def close_master(self):
        with self.cond:
            if self.master is not None:
                os.close(self.master)
                self.master = None


class Sandbox:
    def __init__(self, fake, body):
        self.id = "i" + uuid.uuid4().hex[:19]
        self.template = body.get("templateID")
        self.metadata = dict(body.get("metadata") or {})
        self.envs = dict(body.get("envVars") or {})
        self.auto_pause = bool(body.get("autoPause", False))
        self.secure = bool(body.get("secure", False))
        self.token = uuid.uuid4().hex if self.secure else None
        self.allow_internet = body.get("allow_internet_access", True) is not False
        self.started = time.time()
        self.timeout = int(body.get("timeout", 15))
        self.end_at = self.started + self.timeout
        self.state = "running"
        self.box = nsbox.Box(fake.dir, "e2b")
        os.makedirs(os.path.join(self.box.root, "home", "user"), exist_ok=True)
        self.processes = {}
        self.next_pid = 1000

    def sandbox(self, fake):
        d = {"templateID": self.template, "sandboxID": self.id, "clientID": "6532622b",
             "envdVersion": ENVD_VERSION, "envdAccessToken": self.token, "domain": None}
        return d

    def detail(self, fake, listed=False):
        cpu, mem, disk = TEMPLATES[self.template]
        d = self.sandbox(fake)
        del d["envdAccessToken"]
        d.update({"startedAt": iso(self.started), "endAt": iso(self.end_at), "cpuCount": cpu,
                  "memoryMB": mem, "diskSizeMB": disk, "metadata": self.metadata,
                  "state": self.state})
        if not listed:
            d.update({"allowInternetAccess": self.allow_internet,
                      "lifecycle": {"autoResume": False,
                                    "onTimeout": "pause" if self.auto_pause else "kill"}})
        return d


class E2BFake(fakehttp.Fake):
    def __init__(self, domain):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-e2b-key"))
        self.domain = domain
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-e2b-")
        self.sandboxes = {}
        self.hold_create = 0.0
        self.keepalive = 0.0     # a forced keepalive interval (0: the header's)
        self.keepalives = 0      # keepalive messages sent since it was set
        self.port = 0
        threading.Thread(target=self.reaper, daemon=True).start()

    def error_body(self, status, message, path, method):
        if re.match(r"/(process|filesystem)\.", path):
            code = {v: k for k, v in CONNECT_STATUS.items()}.get(status, "unknown")
            return {"code": code, "message": message}
        return {"code": status, "message": message}

    def find(self, sid):
        with self.lock:
            sb = self.sandboxes.get(sid)
        if sb is None:
            raise aerr(404, "sandbox \"%s\" doesn't exist or you don't have access to it" % sid)
        return sb

    def kill(self, sb):
        with self.lock:
            self.sandboxes.pop(sb.id, None)
        sb.box.delete()

    def pause(self, sb):
        sb.state = "paused"
        sb.box.stop()

    def expire(self, sb):
        if sb.auto_pause:
            self.pause(sb)
        else:
            self.kill(sb)

    def reaper(self):
        while True:
            time.sleep(0.2)
            t = time.time()
            with self.lock:
                boxes = list(self.sandboxes.values())
            for sb in boxes:
                if sb.state == "running" and t >= sb.end_at:
                    self.expire(sb)

    def cleanup(self):
        with self.lock:
            boxes = list(self.sandboxes.values())
        for sb in boxes:
            sb.box.delete()
        shutil.rmtree(self.dir, ignore_errors=True)


FAKE = None


def q1(query, name, default=None):
    v = query.get(name)
    return v[0] if v else default


def positive_int(body, name, lo, hi, required=False):
    if name not in body:
        if required:
            raise aerr(400, "%s is required" % name)
        return None
    v = body[name]
    if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > hi:
        raise aerr(400, "%s must be an integer in [%d, %d], not %r" % (name, lo, hi, v))
    return v


class E2BHandler(fakehttp.Handler):
    def handle_any(self):
        # fakehttp checks "Authorization: Bearer <key>"; E2B sends X-API-Key
        # to the control plane and X-Access-Token to envd, and uses
        # Authorization for the envd user. Translate before the base's check.
        self.user = "user"
        self.envd_id = None
        path = urllib.parse.urlsplit(self.path).path
        auth = self.headers.get("Authorization")
        host = (self.headers.get("Host") or "").split(":")[0]
        m = re.fullmatch(r"(\d+)-([^.]+)\.(.+)", host)
        if m and m.group(3) == FAKE.domain:
            self.envd_id = (m.group(2), int(m.group(1)))
        elif self.headers.get("E2b-Sandbox-Id"):
            self.envd_id = (self.headers.get("E2b-Sandbox-Id"),
                            int(self.headers.get("E2b-Sandbox-Port") or 0))
        ok = False
        if path.startswith("/_fake/"):
            ok = True
        elif self.envd_id is not None:
            if auth and auth.startswith("Basic "):
                try:
                    self.user = base64.b64decode(auth[6:]).decode().split(":", 1)[0]
                except ValueError:
                    self.user = ""
            with FAKE.lock:
                sb = FAKE.sandboxes.get(self.envd_id[0])
            ok = sb is None or sb.token is None or \
                self.headers.get("X-Access-Token") == sb.token
        else:
            ok = self.headers.get("X-API-Key") == FAKE.api_key
        del self.headers["Authorization"]
        if ok:
            self.headers["Authorization"] = "Bearer " + FAKE.api_key
        super().handle_any()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any

    def fake_control(self, path):
        f = FAKE
        if path == "/_fake/hold_create" and self.command == "POST":
            f.hold_create = float(self.json_body().get("seconds", 0))
            return self.send_json(204, None)
        if path == "/_fake/keepalive" and self.command == "POST":
            with f.lock:
                f.keepalive = float(self.json_body().get("seconds", 0))
                f.keepalives = 0
            return self.send_json(204, None)
        if path == "/_fake/keepalive" and self.command == "GET":
            with f.lock:
                return self.send_json(200, {"seconds": f.keepalive, "sent": f.keepalives})
        m = re.fullmatch(r"/_fake/sandbox/([^/]+)(/vanish|/expire)?", path)
        if not m:
            raise Reply(404, {"error": "no such control route: " + path})
        sb = f.find(m.group(1))
        if m.group(2) == "/vanish":
            f.kill(sb)
            return self.send_json(204, None)
        if m.group(2) == "/expire":
            f.expire(sb)
            return self.send_json(204, None)
        self.send_json(200, {"state": sb.state, "root": sb.box.root, "running": sb.box.running(),
                             "end_at": sb.end_at, "timeout": sb.timeout,
                             "processes": sorted(p.pid for p in sb.processes.values()
                                                 if not (p.exited or p.ended))})

    def route(self, path, query):
        if self.envd_id is not None:
            return self.envd(path, query)
        return self.control_plane(path, query)

    # ------------------------------------------------------------ control plane
    def control_plane(self, path, query):
        f = FAKE
        meth = self.command
        if path == "/sandboxes" and meth == "POST":
            return self.create()
        if path == "/v2/sandboxes" and meth == "GET":
            return self.list(query)
        m = re.fullmatch(r"/sandboxes/([^/]+)(?:/(timeout|refreshes|pause|connect))?", path)
        if not m:
            raise aerr(404, "no route for %s %s" % (meth, path))
        body = self.json_body() if meth == "POST" else {}
        sb = f.find(m.group(1))
        action = m.group(2)
        if action is None and meth == "GET":
            return self.send_json(200, sb.detail(f))
        if action is None and meth == "DELETE":
            f.kill(sb)
            return self.send_json(204, None)
        if meth != "POST" or action is None:
            raise aerr(405, "method %s not allowed on %s" % (meth, path))
        if action == "timeout":
            t = positive_int(body, "timeout", 0, 86400, required=True)
            sb.timeout = t
            sb.end_at = time.time() + t
            return self.send_json(204, None)
        if action == "refreshes":
            d = positive_int(body, "duration", 0, 3600) or 0
            sb.end_at = max(sb.end_at, time.time() + d)
            return self.send_json(204, None)
        if action == "pause":
            if sb.state != "running":
                raise aerr(409, "sandbox \"%s\" is already paused" % sb.id)
            f.pause(sb)
            return self.send_json(204, None)
        t = positive_int(body, "timeout", 0, 86400, required=True)
        status = 200
        if sb.state == "paused":
            try:
                sb.box.start(sb.allow_internet)
            except OSError as e:
                raise aerr(500, "sandbox failed to resume: %s" % e)
            sb.state = "running"
            status = 201
        sb.timeout = t
        sb.end_at = time.time() + t
        return self.send_json(status, sb.sandbox(f))

    def create(self):
        f = FAKE
        body = self.json_body()
        known = ("templateID", "timeout", "autoPause", "autoPauseMemory", "autoResume", "secure",
                 "allow_internet_access", "network", "metadata", "envVars", "volumeMounts",
                 "mcp")
        for k in body:
            if k not in known:
                raise aerr(400, "request body has an unknown field \"%s\"" % k)
        tpl = body.get("templateID")
        if not isinstance(tpl, str) or not tpl:
            raise aerr(400, "templateID is required")
        if tpl not in TEMPLATES:
            raise aerr(404, "template '%s' not found" % tpl)
        positive_int(body, "timeout", 0, 86400)
        for k in ("metadata", "envVars"):
            v = body.get(k)
            if v is not None and (not isinstance(v, dict) or
                                  not all(isinstance(x, str) for x in v.values())):
                raise aerr(400, "%s must be an object of strings" % k)
        sb = Sandbox(f, body)
        try:
            sb.box.start(sb.allow_internet)
        except OSError as e:
            sb.box.delete()
            raise aerr(500, "sandbox failed to start: %s" % e)
        with f.lock:
            f.sandboxes[sb.id] = sb
            hold, f.hold_create = f.hold_create, 0.0
        if hold > 0:
            time.sleep(hold)    # made, and answered late (CASE-20)
        self.send_json(201, sb.sandbox(f))

    def list(self, query):
        f = FAKE
        limit = int(q1(query, "limit", "100"))
        if limit < 1 or limit > 100:
            raise aerr(400, "limit must be in [1, 100], not %d" % limit)
        states = (q1(query, "state") or "running,paused").split(",")
        want = {}
        meta = q1(query, "metadata")
        if meta:
            for kv in meta.split("&"):
                k, _, v = kv.partition("=")
                want[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
        start = int(q1(query, "nextToken") or 0)
        with f.lock:
            items = sorted(f.sandboxes.values(), key=lambda s: (s.started, s.id))
        items = [s for s in items if s.state in states and
                 all(s.metadata.get(k) == v for k, v in want.items())]
        page = items[start:start + limit]
        headers = {"X-Total-Running": str(sum(1 for s in items if s.state == "running"))}
        if start + limit < len(items):
            headers["X-Next-Token"] = str(start + limit)
        self.send_json(200, [s.detail(f, listed=True) for s in page], headers)

    # ------------------------------------------------------------ envd
    def envd(self, path, query):
        f = FAKE
        sid, port = self.envd_id
        with f.lock:
            sb = f.sandboxes.get(sid)
        if port != ENVD_PORT:
            self.body_bytes()
            raise Reply(502, {"message": "The sandbox is running but port is not open",
                              "sandboxId": sid, "port": port, "code": 502})
        if sb is None or sb.state != "running":
            self.body_bytes()
            raise Reply(502, {"message": "The sandbox was not found", "sandboxId": sid,
                              "code": 502})
        if self.user not in ("user", "root"):
            self.body_bytes()
            raise ferr(401, "invalid username: '%s'" % self.user)
        if path == "/files":
            return self.files(sb, query)
        if self.command != "POST":
            raise cerr("invalid_argument", "method %s not allowed" % self.command)
        if path == "/process.Process/Start":
            return self.start(sb)
        if path == "/process.Process/Connect":
            return self.connect(sb)
        body = self.json_body()
        if path.startswith("/process.Process/"):
            return self.process_rpc(sb, path[len("/process.Process/"):], body)
        if path.startswith("/filesystem.Filesystem/"):
            return self.fs_rpc(sb, path[len("/filesystem.Filesystem/"):], body)
        raise cerr("not_found", "no such procedure %s" % path)

    def home(self):
        return "/root" if self.user == "root" else "/home/" + self.user

    def spath(self, p):
        """Sandbox path @p, relative ones from the user's home."""
        if not p:
            raise cerr("invalid_argument", "path is required")
        if not p.startswith("/"):
            p = self.home() + "/" + p
        return p

    def host(self, sb, p, files=False):
        h = sb.box.host_path(p)
        if h is None:
            if files:
                raise ferr(400, "path %s leaves the sandbox" % p)
            raise cerr("invalid_argument", "path %s leaves the sandbox" % p)
        return h

    def start(self, sb):
        f = FAKE
        req = self.request_envelope()
        cfg = req.get("process") or {}
        cmd = cfg.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise cerr("invalid_argument", "process.cmd is required")
        args = cfg.get("args") or []
        cwd = cfg.get("cwd") or self.home()
        hcwd = self.host(sb, self.spath(cwd))
        if not os.path.isdir(hcwd):
            raise cerr("invalid_argument", "cwd '%s' does not exist" % cwd)
        env = {"HOME": self.home(), "USER": self.user}
        env.update(sb.envs)
        env.update(cfg.get("envs") or {})
        interval = self.keepalive_interval()
        deadline = self.deadline()
        with f.lock:
            pid = sb.next_pid
            sb.next_pid += 1
        p = Process(pid, {"cmd": cmd, "args": args, "envs": cfg.get("envs") or {},
                          "cwd": cwd}, req.get("tag"))
        p.box = sb.box
        argv = [cmd] + list(args)
        if "PATH" in env:
            # The command's PATH names sandbox directories: the host looks
            # its wrapper (nsenter) up in its own, and env(1) sets the
            # command's inside.
            argv = ["/usr/bin/env", "PATH=" + env.pop("PATH")] + argv
        pty = req.get("pty")
        size = None
        if pty is not None:
            size = (pty or {}).get("size") or {}
            rows, cols = size.get("rows"), size.get("cols")
            if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536
                       for v in (rows, cols)):
                raise cerr("invalid_argument", "pty.size needs rows and cols in [1, 65535], "
                           "not %r" % (size,))
            size = (rows, cols)
        try:
            if size:
                p.popen, p.master = sb.box.popen_pty(argv, size[0], size[1], env=env,
                                                     cwd=self.spath(cwd))
            else:
                p.popen = sb.box.popen(argv, env=env, cwd=self.spath(cwd),
                                       stdin=subprocess.PIPE if req.get("stdin") else
                                       subprocess.DEVNULL)
        except nsbox.SandboxGone:
            raise cerr("unavailable", "the sandbox is not running")
        p.stdin_open = bool(req.get("stdin")) and not size
        p.tty = bool(size)
        sb.processes[pid] = p
        if size:
            pumps = [nsbox.OutputPump(p.master, lambda d: p.emit("pty", d))]
        else:
            pumps = [nsbox.OutputPump(s, lambda d, n=n: p.emit(n, d), close=True)
                     for n, s in (("stdout", p.popen.stdout), ("stderr", p.popen.stderr))]

        def waiter():
            # envd's end event follows the process's exit (os/exec Wait),
            # not the end of its output: a background child that keeps
            # stdout open does not hold the command. What is in the pipes
            # when it exits is still sent.
            p.popen.wait()
            p.exited = True
            if p.popen.returncode < 0 and p.box.running():
                # Killed: the command itself is reaped before its end event
                # (envd is its parent); here it is the wrapper's child, so
                # wait (a little) for the group to be gone, zombies too.
                # Not when its sandbox was killed or paused under it: envd
                # went with it, no end event comes, and its streams are cut
                # at once.
                until = time.time() + 2.0
                while time.time() < until:
                    try:
                        os.killpg(p.popen.pid, 0)
                    except OSError:
                        break
                    time.sleep(0.01)
            for t in pumps:
                t.finish()
            if size:
                # envd closes the terminal with its process: what still
                # holds it (a background child) is hung up.
                p.close_master()
            sb.box.forget(p.popen)
            with p.cond:
                p.ended = True
                p.cond.notify_all()
        threading.Thread(target=waiter, daemon=True).start()

        self.stream(p, 0, interval, deadline, True)

    def keepalive_interval(self):
        """The stream's keepalive interval: Keepalive-Ping-Interval (whole
        seconds, default 50), or the one POST /_fake/keepalive forced."""
        f = FAKE
        try:
            interval = float(self.headers.get("Keepalive-Ping-Interval") or 50)
        except ValueError:
            interval = 50.0
        with f.lock:
            if f.keepalive > 0:
                interval = f.keepalive
        return interval

    def deadline(self):
        tmo = self.headers.get("Connect-Timeout-Ms")
        return time.time() + int(tmo) / 1000.0 if tmo else None

    def request_envelope(self):
        """The one request envelope of a server-stream call, as JSON."""
        if self.headers.get("Content-Type") != "application/connect+json":
            self.body_bytes()
            raise Reply(415, {"code": "unknown", "message": "unsupported content type %r"
                              % self.headers.get("Content-Type")})
        raw = self.body_bytes()
        if len(raw) < 5:
            raise cerr("invalid_argument", "the request is not one Connect envelope")
        flags, n = struct.unpack(">BI", raw[:5])
        if flags != 0 or n != len(raw) - 5:
            raise cerr("invalid_argument", "bad envelope (flags %d, length %d, %d bytes)"
                       % (flags, n, len(raw) - 5))
        try:
            return json.loads(raw[5:])
        except ValueError:
            raise cerr("invalid_argument", "the envelope is not JSON")

    def stream_head(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/connect+json")
        # Chunked, the connection kept alive after the stream's last chunk,
        # as envd's HTTP server (Go's net/http) does for a Connect stream.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200

    def stream(self, p, sent, interval, deadline, owner):
        """The stream of process @p from its event @sent on: the start event,
        its output, a keepalive after each @interval seconds of quiet, its
        end and the end-of-stream frame. When @deadline passes: the
        deadline_exceeded end-of-stream frame, and the process is killed
        when this is its Start stream (@owner)."""
        f = FAKE
        sb_box = p.box
        self.stream_head()
        self.chunk(envelope(0, {"event": {"start": {"pid": p.pid}}}))
        last = time.time()
        timed_out = False
        while True:
            with p.cond:
                while sent == len(p.events) and not p.ended:
                    wait = last + interval - time.time()
                    if deadline is not None:
                        wait = min(wait, deadline - time.time())
                    if wait <= 0:
                        break
                    p.cond.wait(wait)
                new = p.events[sent:]
                sent = len(p.events)
                ended = p.ended
            for name, data in new:
                self.chunk(envelope(0, {"event": {"data": {
                    name: base64.b64encode(data).decode()}}}))
            if new:
                last = time.time()
            if ended:
                break
            if deadline is not None and time.time() >= deadline:
                timed_out = True
                if owner:
                    if p.tty:
                        nsbox.kill_pty_session(p.popen)
                    sb_box.kill_command(p.popen)
                    p.popen.wait()
                break
            if time.time() >= last + interval:
                self.chunk(envelope(0, {"event": {"keepalive": {}}}))
                with f.lock:
                    f.keepalives += 1
                last = time.time()
        if not sb_box.running():
            # The sandbox was killed or paused under the command: envd,
            # which held this stream, went with it; the stream is cut
            # without its end (and the connection with it).
            self.close_connection = True
            return
        if timed_out:
            self.chunk(envelope(2, {"error": {"code": "deadline_exceeded",
                                              "message": "the operation timed out"}}))
        else:
            rc = p.popen.returncode
            if rc < 0:
                end = {"exitCode": -1, "exited": False,
                       "status": "signal: " + {9: "killed", 15: "terminated"}.get(
                           -rc, signal.Signals(-rc).name)}
            else:
                end = {"exited": True, "status": "exit status %d" % rc}
                if rc != 0:
                    end["exitCode"] = rc
            self.chunk(envelope(0, {"event": {"end": end}}))
            self.chunk(envelope(2, {}))
        self.chunk(b"")

    def connect(self, sb):
        """process.Process/Connect: {"process": {"pid"} or {"tag"}}, a server
        stream of the running process as Start's from now on (its start
        event first; output sent before the call is not sent again). A
        process that is not running: 200 and the end-of-stream frame
        {"error": {"code": "not_found", ...}}, as connect-go answers a
        stream's error."""
        req = self.request_envelope()
        interval = self.keepalive_interval()
        deadline = self.deadline()
        try:
            p = self.selected(sb, req)
        except Reply as e:
            if e.status != 404:
                raise
            self.stream_head()
            self.chunk(envelope(2, {"error": e.body}))
            self.chunk(b"")
            return
        with p.cond:
            sent = len(p.events)
        self.stream(p, sent, interval, deadline, False)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def selected(self, sb, body):
        sel = body.get("process") or {}
        if "pid" in sel:
            p = sb.processes.get(sel["pid"])
        elif "tag" in sel:
            p = next((x for x in sb.processes.values() if x.tag == sel["tag"]), None)
        else:
            raise cerr("invalid_argument", "process.pid or process.tag is required")
        if p is None or p.exited or p.ended:
            raise cerr("not_found", "process with pid %s not found" % sel.get("pid", sel.get("tag")))
        return p

    def process_rpc(self, sb, name, body):
        if name == "List":
            procs = [{"config": p.config, "pid": p.pid, **({"tag": p.tag} if p.tag else {})}
                     for p in sorted(sb.processes.values(), key=lambda x: x.pid)
                     if not (p.exited or p.ended)]
            return self.send_json(200, {"processes": procs})
        p = self.selected(sb, body)
        if name == "Update":
            size = ((body.get("pty") or {}).get("size")) or {}
            rows, cols = size.get("rows"), size.get("cols")
            if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536
                       for v in (rows, cols)):
                raise cerr("invalid_argument", "pty.size needs rows and cols in [1, 65535], "
                           "not %r" % (size,))
            with p.cond:
                if p.master is None:
                    raise cerr("failed_precondition", "process %d has no terminal" % p.pid)
                nsbox.resize(p.master, rows, cols)
            return self.send_json(200, {})
        if name == "SendInput":
            inp = body.get("input") or {}
            if "pty" in inp:
                if p.master is None:
                    raise cerr("failed_precondition", "process %d has no terminal" % p.pid)
                try:
                    data = base64.b64decode(inp["pty"], validate=True)
                except ValueError:
                    raise cerr("invalid_argument", "input.pty is not base64")
                try:
                    p.pty_write(data)
                except OSError:
                    pass
                return self.send_json(200, {})
            if "stdin" not in inp:
                raise cerr("invalid_argument", "input.stdin or input.pty is required")
            if not p.stdin_open:
                raise cerr("failed_precondition", "stdin of process %d is not open" % p.pid)
            try:
                data = base64.b64decode(inp["stdin"], validate=True)
            except ValueError:
                raise cerr("invalid_argument", "input.stdin is not base64")
            try:
                p.popen.stdin.write(data)
                p.popen.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
            return self.send_json(200, {})
        if name == "CloseStdin":
            if p.master is not None:
                raise cerr("failed_precondition", "process %d runs on a terminal: its stdin "
                           "is not closed (send its EOF character, 0x04)" % p.pid)
            if p.stdin_open:
                p.stdin_open = False
                try:
                    p.popen.stdin.close()
                except (BrokenPipeError, ValueError):
                    pass
            return self.send_json(200, {})
        if name == "SendSignal":
            sig = SIGNALS.get(body.get("signal"))
            if sig is None:
                raise cerr("invalid_argument", "invalid signal %r" % body.get("signal"))
            signal_command(sb, p, sig)
            return self.send_json(200, {})
        raise cerr("not_found", "no such procedure process.Process/%s" % name)

    def entry(self, sb, p):
        h = self.host(sb, p)
        st = os.lstat(h)
        kind = ("FILE_TYPE_SYMLINK" if stm.S_ISLNK(st.st_mode) else
                "FILE_TYPE_DIRECTORY" if stm.S_ISDIR(st.st_mode) else "FILE_TYPE_FILE")
        e = {"name": os.path.basename(p.rstrip("/")) or "/", "type": kind,
             "path": p, "size": str(st.st_size), "mode": st.st_mode & 0o7777,
             "permissions": stm.filemode(st.st_mode), "owner": "root", "group": "root",
             "modifiedTime": iso(st.st_mtime)}
        if kind == "FILE_TYPE_SYMLINK":
            e["symlinkTarget"] = os.readlink(h)
        return e

    def fs_rpc(self, sb, name, body):
        if name == "Move":
            src = self.spath(body.get("source"))
            dst = self.spath(body.get("destination"))
            hs, hd = self.host(sb, src), self.host(sb, dst)
            if not os.path.lexists(hs):
                raise cerr("not_found", "path '%s' does not exist" % src)
            os.rename(hs, hd)
            return self.send_json(200, {"entry": self.entry(sb, dst)})
        p = self.spath(body.get("path"))
        h = self.host(sb, p)
        if name == "MakeDir":
            if os.path.lexists(h):
                raise cerr("already_exists", "path '%s' already exists" % p)
            os.makedirs(h)
            return self.send_json(200, {"entry": self.entry(sb, p)})
        if not os.path.lexists(h):
            raise cerr("not_found", "path '%s' does not exist" % p)
        if name == "Stat":
            return self.send_json(200, {"entry": self.entry(sb, p)})
        if name == "Remove":
            if os.path.isdir(h) and not os.path.islink(h):
                shutil.rmtree(h)
            else:
                os.unlink(h)
            return self.send_json(200, {})
        if name == "ListDir":
            if not os.path.isdir(h):
                raise cerr("invalid_argument", "path '%s' is not a directory" % p)
            depth = body.get("depth", 1)
            if not isinstance(depth, int) or depth < 1:
                raise cerr("invalid_argument", "depth must be at least 1, not %r" % depth)
            out = []

            def walk(sp, d):
                for n in sorted(os.listdir(self.host(sb, sp))):
                    c = sp.rstrip("/") + "/" + n
                    e = self.entry(sb, c)
                    out.append(e)
                    if d > 1 and e["type"] == "FILE_TYPE_DIRECTORY":
                        walk(c, d - 1)
            walk(p, depth)
            return self.send_json(200, {"entries": out})
        raise cerr("not_found", "no such procedure filesystem.Filesystem/%s" % name)

    def files(self, sb, query):
        user = q1(query, "username")
        if user is not None:
            if user not in ("user", "root"):
                self.body_bytes()
                raise ferr(401, "invalid username: '%s'" % user)
            self.user = user
        p = q1(query, "path")
        if not p:
            self.body_bytes()
            raise ferr(400, "path is required")
        if not p.startswith("/"):
            p = self.home() + "/" + p
        h = self.host(sb, p, files=True)
        if self.command == "GET":
            if not os.path.lexists(h):
                raise ferr(404, "path '%s' does not exist" % p)
            if os.path.isdir(h):
                raise ferr(400, "path '%s' is a directory" % p)
            with open(h, "rb") as fh:
                data = fh.read()
            return self.send_bytes(200, data)
        if self.command != "POST":
            raise ferr(405, "method %s not allowed" % self.command)
        ctype = self.headers.get("Content-Type") or ""
        raw = self.body_bytes()
        if ctype.startswith("multipart/form-data"):
            data = self.multipart_file(ctype, raw)
        elif ctype == "application/octet-stream":
            data = raw
        else:
            raise ferr(400, "unsupported content type %r" % ctype)
        if os.path.isdir(h):
            raise ferr(400, "path '%s' is a directory" % p)
        try:
            os.makedirs(os.path.dirname(h), exist_ok=True)
            with open(h, "wb") as fh:
                fh.write(data)
        except OSError as e:
            raise ferr(400, "cannot write '%s': %s" % (p, e.strerror))
        self.send_json(200, [{"path": p, "name": os.path.basename(p), "type": "file"}])

    def multipart_file(self, ctype, raw):
        m = re.search(r"boundary=\"?([^\";]+)\"?", ctype)
        if not m:
            raise ferr(400, "multipart body without a boundary")
        sep = b"--" + m.group(1).encode()
        for part in raw.split(sep)[1:]:
            head, _, rest = part.partition(b"\r\n\r\n")
            if b'name="file"' in head:
                return rest[:-2] if rest.endswith(b"\r\n") else rest
        raise ferr(400, "multipart body without the field \"file\"")


def main():
    global FAKE
    domain = os.environ.get("E2B_DOMAIN", "e2b.local")
    if len(sys.argv) == 3 and sys.argv[1] == "--domain":
        domain = sys.argv[2]
    FAKE = E2BFake(domain)
    fakehttp.serve(FAKE, E2BHandler)


if __name__ == "__main__":
    main()
