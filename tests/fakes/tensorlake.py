#!/usr/bin/python3
"""A fake Tensorlake Sandboxes service for the libsbx tests.

Follows the Tensorlake section of the provider contracts
(tensorlakeai/tensorlake: src/tensorlake/sandbox/_defaults.py,
crates/cloud-sdk/src/sandboxes/; docs.tensorlake.ai/api-reference/v2):

Control plane, http://127.0.0.1:<n> (TENSORLAKE_API_URL), flat paths:
  POST   /sandboxes                 create, or restore with snapshot_id
  GET    /sandboxes/{idOrName}      SandboxInfo
  GET    /sandboxes?limit=&cursor=&direction=&status=
  PATCH  /sandboxes/{id}            name, allow_unauthenticated_access,
                                    exposed_ports, network (never timeout_secs)
  DELETE /sandboxes/{id}
  POST   /sandboxes/{idOrName}/suspend|resume (named sandboxes only)
  POST   /sandboxes/{id}/snapshot   {"snapshot_type": "memory"|"filesystem"}
  GET|DELETE /snapshots/{id}, GET /snapshots
Data plane, per sandbox: the sandbox_url the control plane returns
(http://127.0.0.1:<n>/sandbox/<id>), or http://127.0.0.1:<n> with the header
X-Tensorlake-Sandbox-Id: <id> (TENSORLAKE_SANDBOX_PROXY_URL):
  POST /api/v1/processes            201 ProcessInfo (no shell: command + args)
  POST /api/v1/processes/run        SSE: {"pid","started_at"}, one
                                    {"line","timestamp","stream"} per output
                                    line (the line without its "\\n"; text),
                                    then {"exit_code","signal","oom_killed"};
                                    an empty comment (":") after each 15 s
                                    of quiet (the daemon's axum
                                    KeepAlive::default())
  GET  /api/v1/processes, GET|DELETE /api/v1/processes/{pid} (DELETE = SIGKILL)
  POST /api/v1/processes/{pid}/signal {"signal": N}, .../stdin (raw bytes),
       .../stdin/close
  GET  /api/v1/processes/{pid}/output, .../output/follow (SSE, as run)
  GET|PUT|DELETE /api/v1/files?path= (raw bytes; PUT creates parents, 204)
  GET  /api/v1/files/list?path=     directories first
  GET  /api/v1/health
Both planes want "Authorization: Bearer <key>", the key from SBX_FAKE_API_KEY
(default "fake-tensorlake-key"). Data-plane errors are {"error", "code"};
control-plane errors {"message", "code"}.

Lifetime: an unnamed sandbox with timeout_secs > 0 is terminated that many
seconds after create (termination_reason "timeout"); a named one is suspended
after timeout_secs without traffic, and data-plane traffic resumes it.
Terminated sandboxes stay visible to GET and to list without a status filter;
their data plane answers 404. Signals and kills go to the process's whole
process group. Sandboxes are real (tests/fakes/nsbox.py). resources.memory_mb
is enforced with a cgroup v1 memory cgroup per sandbox (where the memory
controller is writable), and a run's end event says oom_killed when the
cgroup's oom_kill counter rose while the command ran. A command's PATH is
set inside the sandbox.

Control routes (no auth; not logged): GET/DELETE /_fake/log, POST /_fake/faults
(tests/fakes/fakehttp.py); POST /_fake/sandbox/{id}/vanish (the provider lost
it: 404 everywhere); POST /_fake/sandbox/{id}/suspend; GET /_fake/sandbox/{id}
{"status", "root", "running", "timeout_secs", "name", "runs"};
POST /_fake/config {"create_pending": s, "snapshot_delay": s};
POST /_fake/keepalive {"seconds": s}: the SSE streams started from now send
their keepalive comment after s seconds of quiet (0: the default 15 s), and
the count of keepalives sent starts again from 0; GET /_fake/keepalive
{"seconds": s, "sent": n}.

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply  # noqa: E402

NAMESPACE = "default"
GPU_MODELS = ("A100-40GB", "A100-80GB", "H100", "T4", "A6000", "A10")
# crates/container-daemon (tensorlakeai/indexify) answers its SSE routes
# with axum's Sse::keep_alive(KeepAlive::default()): the comment ":" (an
# empty comment line) after 15 s without an event.
KEEPALIVE_SECS = 15.0
MEMCG = "/sys/fs/cgroup/memory"     # cgroup v1 memory controller


class MemoryLimit:
    """resources.memory_mb, enforced: a cgroup v1 memory cgroup per sandbox
    that each command joins before it runs (nsbox's popen(cgroup=): the
    process joins it before it executes nsenter, so the command and all it
    starts are born inside), and its oom_kill counter, which tells an
    out-of-memory kill from another SIGKILL. Without a writable memory
    controller the limit is not enforced."""

    def __init__(self, sid, memory_mb):
        self.name = "sbx-fake-tl-" + sid
        self.path = os.path.join(MEMCG, self.name)
        try:
            os.mkdir(self.path)
            limit = str(memory_mb * 1024 * 1024)
            for f in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
                if os.path.exists(os.path.join(self.path, f)):
                    with open(os.path.join(self.path, f), "w") as fh:
                        fh.write(limit)
        except OSError:
            self.path = None

    def oom_kills(self):
        if self.path is None:
            return 0
        try:
            with open(os.path.join(self.path, "memory.oom_control")) as fh:
                for line in fh:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def delete(self):
        if self.path is not None:
            for _ in range(50):
                try:
                    os.rmdir(self.path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            self.path = None


def ms(t=None):
    return int((time.time() if t is None else t) * 1000)


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


def err(status, message, code=None):
    return Reply(status, {"error": message, "code": code or {
        400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
        409: "conflict", 500: "internal"}.get(status, "error")})


def cerr(status, message):
    return Reply(status, {"message": message, "code": status})


class Process:
    def __init__(self, pid, command, args):
        self.pid = pid
        self.command = command
        self.args = args
        self.popen = None
        self.lines = []             # (stream, text, timestamp ms)
        self.exit_code = None
        self.signal = None
        self.oom_killed = False
        self.ended = None
        self.started = ms()
        self.stdin_writable = False
        self.cond = threading.Condition()

    def status(self):
        if self.ended is None:
            return "running"
        if self.oom_killed:
            return "oom_killed"
        return "signaled" if self.signal is not None else "exited"

    def info(self):
        d = {"pid": self.pid, "status": self.status(), "stdin_writable": self.stdin_writable,
             "command": self.command, "args": self.args, "started_at": self.started}
        if self.exit_code is not None:
            d["exit_code"] = self.exit_code
        if self.signal is not None:
            d["signal"] = self.signal
        if self.ended is not None:
            d["ended_at"] = self.ended
        return d


class Sandbox:
    def __init__(self, fake, body):
        self.id = uuid.uuid4().hex[:20]
        self.body = body
        self.name = body.get("name")
        self.status = "pending"
        self.created = time.time()
        self.last_traffic = self.created
        self.timeout = int(body.get("timeout_secs") or 0)
        self.termination_reason = None
        self.outcome = None
        self.box = nsbox.Box(fake.dir, "tensorlake")
        self.memory = MemoryLimit(self.id, int((body.get("resources") or {}).get("memory_mb",
                                                                               1024)))
        self.processes = {}
        self.next_pid = 100
        self.runs = 0
        net = body.get("network") or {}
        self.allow_internet = net.get("allow_internet_access", True)

    def info(self, fake):
        r = self.body.get("resources") or {}
        return {
            "sandbox_id": self.id,
            "id": self.id,
            "namespace": NAMESPACE,
            "status": self.status,
            "image": self.body.get("image") or "tensorlake/ubuntu-24.04",
            "resources": {"cpus": r.get("cpus", 1.0), "memory_mb": r.get("memory_mb", 1024),
                          "ephemeral_disk_mb": r.get("disk_mb", r.get("ephemeral_disk_mb", 10240))},
            "timeout_secs": self.timeout,
            "network_policy": {"allow_internet_access": self.allow_internet,
                               "allow_out": (self.body.get("network") or {}).get("allow_out", []),
                               "deny_out": (self.body.get("network") or {}).get("deny_out", [])},
            "outcome": self.outcome,
            "termination_reason": self.termination_reason,
            "created_at": iso(self.created),
            "name": self.name,
            "routing_hint": "fake-1",
            "exposed_ports": self.body.get("exposed_ports") or [],
            "sandbox_url": "http://127.0.0.1:%d/sandbox/%s" % (fake.port, self.id),
        }


class TensorlakeFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-tensorlake-key"))
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-tensorlake-")
        self.sandboxes = {}
        self.snapshots = {}         # id -> {"dir", "status", "sandbox_id", "type", "created"}
        self.config = {"create_pending": 0.0, "snapshot_delay": 0.0}
        self.keepalive = 0.0     # a forced keepalive interval (0: KEEPALIVE_SECS)
        self.keepalives = 0      # keepalive comments sent since it was set
        self.port = 0
        threading.Thread(target=self.reaper, daemon=True).start()

    def error_body(self, status, message, path, method):
        if "/api/v1/" in path:
            return {"error": message, "code": {401: "unauthorized", 404: "not_found",
                                               429: "rate_limited"}.get(status, "error")}
        return {"message": message, "code": status}

    def find(self, key, live=False):
        with self.lock:
            sb = self.sandboxes.get(key)
            if sb is None:
                cands = [s for s in self.sandboxes.values()
                         if s.name == key and s.status != "terminated"]
                sb = cands[0] if cands else None
        if sb is None or (live and sb.status == "terminated"):
            raise cerr(404, "sandbox %s not found" % key)
        return sb

    def terminate(self, sb, reason):
        if sb.status == "terminated":
            return
        sb.status = "terminated"
        sb.termination_reason = reason
        sb.outcome = "success" if reason == "user_request" else reason
        sb.box.delete()
        sb.memory.delete()

    def suspend(self, sb):
        sb.status = "suspended"
        sb.box.stop()

    def resume(self, sb):
        sb.box.start(sb.allow_internet)
        sb.status = "running"
        sb.last_traffic = time.time()

    def reaper(self):
        while True:
            time.sleep(0.2)
            t = time.time()
            with self.lock:
                boxes = list(self.sandboxes.values())
            for sb in boxes:
                if sb.timeout <= 0 or sb.status not in ("running", "pending"):
                    continue
                if sb.name is None and t >= sb.created + sb.timeout:
                    self.terminate(sb, "timeout")
                elif (sb.name is not None and t >= sb.last_traffic + sb.timeout
                      and not any(p.ended is None for p in sb.processes.values())):
                    self.suspend(sb)

    def cleanup(self):
        with self.lock:
            boxes = list(self.sandboxes.values())
        for sb in boxes:
            sb.box.delete()
            sb.memory.delete()
        shutil.rmtree(self.dir, ignore_errors=True)


FAKE = None


def q1(query, name, default=None):
    v = query.get(name)
    return v[0] if v else default


class TensorlakeHandler(fakehttp.Handler):
    def fake_control(self, path):
        f = FAKE
        m = re.fullmatch(r"/_fake/sandbox/([^/]+)(/vanish|/suspend)?", path)
        if path == "/_fake/config" and self.command == "POST":
            with f.lock:
                f.config.update(self.json_body())
            return self.send_json(204, None)
        if path == "/_fake/keepalive" and self.command == "POST":
            with f.lock:
                f.keepalive = float(self.json_body().get("seconds", 0))
                f.keepalives = 0
            return self.send_json(204, None)
        if path == "/_fake/keepalive" and self.command == "GET":
            with f.lock:
                return self.send_json(200, {"seconds": f.keepalive, "sent": f.keepalives})
        if not m:
            raise Reply(404, {"error": "no such control route: " + path})
        sb = f.find(m.group(1))
        if m.group(2) == "/vanish":
            sb.box.delete()
            sb.memory.delete()
            with f.lock:
                f.sandboxes.pop(sb.id, None)
            return self.send_json(204, None)
        if m.group(2) == "/suspend":
            f.suspend(sb)
            return self.send_json(204, None)
        self.send_json(200, {"status": sb.status, "root": sb.box.root,
                             "running": sb.box.running(), "timeout_secs": sb.timeout,
                             "name": sb.name, "runs": sb.runs})

    def route(self, path, query):
        m = re.fullmatch(r"/sandbox/([^/]+)(/api/v1/.*)", path)
        if m:
            return self.data_plane(m.group(1), m.group(2), query)
        if path.startswith("/api/v1/"):
            sid = self.headers.get("X-Tensorlake-Sandbox-Id")
            if not sid:
                raise err(400, "X-Tensorlake-Sandbox-Id is required")
            return self.data_plane(sid, path, query)
        return self.control_plane(path, query)

    # ------------------------------------------------------------ control plane
    def control_plane(self, path, query):
        f = FAKE
        meth = self.command
        if path == "/sandboxes" and meth == "POST":
            return self.create()
        if path == "/sandboxes" and meth == "GET":
            return self.list(query)
        if path == "/snapshots" and meth == "GET":
            with f.lock:
                snaps = [dict(snapshot_id=k, **{x: v[x] for x in ("status", "sandbox_id",
                                                                   "snapshot_type")})
                         for k, v in f.snapshots.items()]
            return self.send_json(200, {"snapshots": snaps})
        m = re.fullmatch(r"/snapshots/([^/]+)", path)
        if m:
            with f.lock:
                s = f.snapshots.get(m.group(1))
            if s is None:
                raise cerr(404, "snapshot %s not found" % m.group(1))
            if meth == "DELETE":
                with f.lock:
                    f.snapshots.pop(m.group(1), None)
                shutil.rmtree(s["dir"], ignore_errors=True)
                return self.send_json(200, {})
            return self.send_json(200, {"snapshot_id": m.group(1), "status": s["status"],
                                        "sandbox_id": s["sandbox_id"],
                                        "snapshot_type": s["snapshot_type"],
                                        "created_at": iso(s["created"])})
        m = re.fullmatch(r"/sandboxes/([^/]+)(?:/(suspend|resume|snapshot|copy))?", path)
        if not m:
            raise cerr(404, "no route for %s %s" % (meth, path))
        sb = f.find(m.group(1))
        action = m.group(2)
        if action is None and meth == "GET":
            return self.send_json(200, sb.info(f))
        if action is None and meth == "DELETE":
            f.terminate(sb, "user_request")
            return self.send_json(200, {})
        if action is None and meth == "PATCH":
            body = self.json_body()
            for k in body:
                if k not in ("name", "allow_unauthenticated_access", "exposed_ports", "network"):
                    raise cerr(400, "unknown field `%s`" % k)
            if "exposed_ports" in body:
                ports = body["exposed_ports"]
                if not isinstance(ports, list) or not all(
                        isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535
                        for p in ports):
                    raise cerr(400, "exposed_ports: expected a list of port numbers")
                sb.body["exposed_ports"] = ports
            if "name" in body:
                sb.name = body["name"]
            return self.send_json(200, sb.info(f))
        if sb.status == "terminated":
            raise cerr(404, "sandbox %s not found" % m.group(1))
        if action == "suspend" and meth == "POST":
            if sb.name is None:
                raise cerr(400, "ephemeral sandboxes cannot be suspended")
            if sb.status == "suspended":
                return self.send_json(200, sb.info(f))
            f.suspend(sb)
            return self.send_json(202, sb.info(f))
        if action == "resume" and meth == "POST":
            if sb.name is None:
                raise cerr(400, "ephemeral sandboxes cannot be resumed")
            if sb.status == "running":
                return self.send_json(200, sb.info(f))
            f.resume(sb)
            return self.send_json(202, sb.info(f))
        if action == "snapshot" and meth == "POST":
            body = self.json_body()
            kind = body.get("snapshot_type", "filesystem")
            if kind not in ("memory", "filesystem"):
                raise cerr(400, "snapshot_type must be memory or filesystem, not %r" % kind)
            sid = "snap-" + uuid.uuid4().hex[:16]
            dest = os.path.join(f.dir, sid)
            shutil.copytree(sb.box.root, dest, symlinks=True)
            delay = float(f.config.get("snapshot_delay", 0))
            rec = {"dir": dest, "status": "in_progress" if delay > 0 else "completed",
                   "sandbox_id": sb.id, "snapshot_type": kind, "created": time.time()}
            with f.lock:
                f.snapshots[sid] = rec
            if delay > 0:
                sb.status = "snapshotting"

                def done():
                    rec["status"] = "completed"
                    if sb.status == "snapshotting":
                        sb.status = "running"
                t = threading.Timer(delay, done)
                t.daemon = True
                t.start()
            return self.send_json(200, {"snapshot_id": sid, "status": rec["status"]})
        raise cerr(404, "no route for %s %s" % (meth, path))

    def create(self):
        f = FAKE
        body = self.json_body()
        known = ("image", "resources", "timeout_secs", "entrypoint", "network", "snapshot_id",
                 "name", "secret_names", "allow_unauthenticated_access", "exposed_ports",
                 "template_id", "file_systems")
        for k in body:
            if k not in known:
                raise cerr(400, "unknown field `%s`" % k)
        r = body.get("resources") or {}
        for k in r:
            if k not in ("cpus", "memory_mb", "disk_mb", "ephemeral_disk_mb", "gpus"):
                raise cerr(400, "unknown field `resources.%s`" % k)
        if "cpus" in r and (not isinstance(r["cpus"], (int, float)) or r["cpus"] <= 0):
            raise cerr(400, "resources.cpus must be a positive number")
        if "memory_mb" in r and (not isinstance(r["memory_mb"], int) or r["memory_mb"] < 256):
            raise cerr(400, "resources.memory_mb must be an integer >= 256")
        for g in r.get("gpus") or []:
            if g.get("model") not in GPU_MODELS:
                raise cerr(400, "unknown GPU model %r" % g.get("model"))
        t = body.get("timeout_secs", 0)
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise cerr(400, "timeout_secs must be a non-negative integer")
        if body.get("name") is not None:
            with f.lock:
                if any(s.name == body["name"] and s.status != "terminated"
                       for s in f.sandboxes.values()):
                    raise cerr(409, "a sandbox named %s exists" % body["name"])
        snap = None
        if body.get("snapshot_id"):
            with f.lock:
                snap = f.snapshots.get(body["snapshot_id"])
            if snap is None or snap["status"] != "completed":
                raise cerr(404, "snapshot %s not found" % body["snapshot_id"])
        sb = Sandbox(f, body)
        if snap is not None:
            shutil.rmtree(sb.box.root)
            shutil.copytree(snap["dir"], sb.box.root, symlinks=True)
        try:
            sb.box.start(sb.allow_internet)
        except OSError as e:
            sb.box.delete()
            sb.memory.delete()
            raise cerr(500, "sandbox failed to start: %s" % e)
        with f.lock:
            f.sandboxes[sb.id] = sb
        pending = float(f.config.get("create_pending", 0))

        def ready():
            if sb.status == "pending":
                sb.status = "running"
                sb.last_traffic = time.time()
        if pending > 0:
            tm = threading.Timer(pending, ready)
            tm.daemon = True
            tm.start()
        else:
            ready()
        info = sb.info(f)
        self.send_json(200, {"sandbox_id": sb.id, "status": "pending", "routing_hint": "fake-1",
                             "sandbox_url": info["sandbox_url"], "name": sb.name})

    def list(self, query):
        f = FAKE
        limit = int(q1(query, "limit", "100"))
        status = q1(query, "status")
        cursor = int(q1(query, "cursor", "0") or 0)
        with f.lock:
            items = sorted(f.sandboxes.values(), key=lambda s: (s.created, s.id))
        items = [s for s in items if status is None or s.status == status]
        page = items[cursor:cursor + limit]
        nxt = str(cursor + limit) if cursor + limit < len(items) else None
        prev = str(max(0, cursor - limit)) if cursor > 0 else None
        out = []
        for s in page:
            d = s.info(f)
            del d["sandbox_id"]
            out.append(d)
        self.send_json(200, {"sandboxes": out, "prev_cursor": prev, "next_cursor": nxt})

    # ------------------------------------------------------------ data plane
    def data_plane(self, sid, path, query):
        f = FAKE
        with f.lock:
            sb = f.sandboxes.get(sid)
        if sb is None or sb.status == "terminated":
            self.body_bytes()
            raise err(404, "sandbox %s not found" % sid)
        if sb.status == "suspended":
            f.resume(sb)             # proxy traffic resumes a suspended sandbox
        sb.last_traffic = time.time()
        meth = self.command
        if path == "/api/v1/health":
            return self.send_json(200, {"healthy": True})
        if path == "/api/v1/processes" and meth == "POST":
            p = self.start_process(sb, self.json_body())
            return self.send_json(201, p.info())
        if path == "/api/v1/processes" and meth == "GET":
            return self.send_json(200, {"processes": [p.info() for p in sb.processes.values()]})
        if path == "/api/v1/processes/run" and meth == "POST":
            body = self.json_body()
            timeout = body.get("timeout")
            p = self.start_process(sb, body)
            sb.runs += 1
            return self.sse(sb, p, timeout, first={"pid": p.pid, "started_at": p.started})
        if path.startswith("/api/v1/processes/"):
            m = re.fullmatch(r"/api/v1/processes/(\d+)(/signal|/stdin|/stdin/close|/output"
                             r"|/output/follow)?", path)
            p = sb.processes.get(int(m.group(1))) if m else None
            if p is None:
                self.body_bytes()
                raise err(404, "process not found")
            action = m.group(2)
            if action is None and meth == "GET":
                return self.send_json(200, p.info())
            if action is None and meth == "DELETE":
                if p.ended is None:
                    sb.box.kill_command(p.popen, signal.SIGKILL)
                return self.send_json(200, p.info())
            if action == "/signal" and meth == "POST":
                sig = self.json_body().get("signal")
                if not isinstance(sig, int) or sig <= 0 or sig > 64:
                    raise err(400, "invalid signal %r" % sig)
                if p.ended is None:
                    sb.box.kill_command(p.popen, sig)
                return self.send_json(200, {})
            if action == "/stdin" and meth == "POST":
                data = self.body_bytes()
                if not p.stdin_writable:
                    raise err(400, "stdin is not writable")
                try:
                    p.popen.stdin.write(data)
                    p.popen.stdin.flush()
                except (BrokenPipeError, ValueError):
                    pass
                return self.send_json(200, {})
            if action == "/stdin/close" and meth == "POST":
                if p.stdin_writable:
                    p.stdin_writable = False
                    try:
                        p.popen.stdin.close()
                    except (BrokenPipeError, ValueError):
                        pass
                return self.send_json(200, {})
            if action == "/output" and meth == "GET":
                with p.cond:
                    lines = [t for (_s, t, _ts) in p.lines]
                return self.send_json(200, {"pid": p.pid, "lines": lines,
                                            "line_count": len(lines)})
            if action == "/output/follow" and meth == "GET":
                return self.sse(sb, p, None, first=None)
        if path == "/api/v1/files" and meth == "GET":
            host = self.host(sb, q1(query, "path"))
            if not os.path.exists(host):
                raise err(404, "file not found: %s" % q1(query, "path"))
            if os.path.isdir(host):
                raise err(400, "path is a directory: %s" % q1(query, "path"))
            with open(host, "rb") as fh:
                return self.send_bytes(200, fh.read())
        if path == "/api/v1/files" and meth == "PUT":
            host = self.host(sb, q1(query, "path"))
            data = self.body_bytes()
            if os.path.isdir(host):
                raise err(400, "path is a directory: %s" % q1(query, "path"))
            os.makedirs(os.path.dirname(host), exist_ok=True)
            with open(host, "wb") as fh:
                fh.write(data)
            return self.send_json(204, None)
        if path == "/api/v1/files" and meth == "DELETE":
            host = self.host(sb, q1(query, "path"))
            if not os.path.lexists(host):
                raise err(404, "file not found: %s" % q1(query, "path"))
            if os.path.isdir(host) and not os.path.islink(host):
                shutil.rmtree(host)
            else:
                os.unlink(host)
            return self.send_json(204, None)
        if path == "/api/v1/files/list" and meth == "GET":
            p = q1(query, "path") or "/"
            host = self.host(sb, p)
            if not os.path.isdir(host):
                raise err(404, "directory not found: %s" % p)
            entries = []
            for name in os.listdir(host):
                hp = os.path.join(host, name)
                st = os.lstat(hp)
                is_dir = os.path.isdir(hp) and not os.path.islink(hp)
                entries.append({"name": name, "is_dir": is_dir,
                                "size": None if is_dir else st.st_size,
                                "modified_at": ms(st.st_mtime)})
            entries.sort(key=lambda e: (not e["is_dir"], e["name"]))
            return self.send_json(200, {"path": p, "entries": entries})
        raise err(404, "no route for %s %s" % (meth, path))

    @staticmethod
    def host(sb, p):
        if p is None:
            raise err(400, "path is required")
        if ".." in p.split("/"):
            raise err(403, "path must not contain ..")
        host = sb.box.host_path(p)
        if host is None:
            raise err(403, "path leaves the sandbox: %s" % p)
        return host

    def start_process(self, sb, body):
        cmd = body.get("command")
        if not isinstance(cmd, str) or not cmd:
            raise err(400, "command is required")
        args = body.get("args") or []
        env = body.get("env") or {}
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise err(400, "args must be a list of strings")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise err(400, "env must be an object of strings")
        cwd = body.get("working_dir") or "/"
        host = sb.box.host_path(cwd)
        if host is None or not os.path.isdir(host):
            raise err(400, "working_dir %s does not exist" % cwd)
        stdin_pipe = body.get("stdin_mode") == "pipe"
        out_mode = body.get("stdout_mode", "capture")
        err_mode = body.get("stderr_mode", "capture")
        sb.next_pid += 1
        p = Process(sb.next_pid, cmd, args)
        # The command's PATH is the sandbox's, not the one this fake finds
        # nsenter by: /usr/bin/env sets it inside, before the command is
        # looked up.
        env = dict(env)
        argv = [cmd] + args
        if "PATH" in env:
            argv = ["/usr/bin/env", "PATH=" + env.pop("PATH")] + argv
        oom_before = sb.memory.oom_kills()
        try:
            p.popen = sb.box.popen(
                argv, env=env, cwd=cwd, cgroup=sb.memory.path,
                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if out_mode == "discard" else subprocess.PIPE,
                stderr=subprocess.DEVNULL if err_mode == "discard" else subprocess.PIPE)
        except nsbox.SandboxGone:
            raise err(404, "sandbox %s not found" % sb.id)
        p.stdin_writable = stdin_pipe
        sb.processes[p.pid] = p

        def pump(stream, name):
            buf = b""
            while True:
                data = stream.read1(65536)
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self_add(name, line)
            if buf:
                self_add(name, buf)

        def self_add(name, line):
            with p.cond:
                p.lines.append((name, line.decode("utf-8", "replace"), ms()))
                p.cond.notify_all()

        threads = []
        for stream, name in ((p.popen.stdout, "stdout"), (p.popen.stderr, "stderr")):
            if stream is not None:
                t = threading.Thread(target=pump, args=(stream, name), daemon=True)
                t.start()
                threads.append(t)

        def reap():
            for t in threads:
                t.join()
            code = p.popen.wait()
            sb.box.forget(p.popen)
            with p.cond:
                if code < 0:
                    p.signal = -code
                else:
                    p.exit_code = code
                # A SIGKILL of the command, or of the last command of its
                # shell (128 + 9).
                killed = code == -signal.SIGKILL or code == 128 + signal.SIGKILL
                p.oom_killed = killed and sb.memory.oom_kills() > oom_before
                p.ended = ms()
                p.cond.notify_all()
        threading.Thread(target=reap, daemon=True).start()
        return p

    def sse(self, sb, p, timeout, first):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200

        def write(raw):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            self.wfile.flush()

        def event(obj):
            write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        deadline = time.time() + timeout if timeout else None
        with FAKE.lock:
            interval = FAKE.keepalive or KEEPALIVE_SECS
        try:
            if first is not None:
                event(first)
            sent = 0
            quiet_since = time.time()
            while True:
                with p.cond:
                    if sent == len(p.lines) and p.ended is None:
                        p.cond.wait(0.2)
                    new = p.lines[sent:]
                    sent += len(new)
                    ended = p.ended is not None and sent == len(p.lines)
                for (stream, text, ts) in new:
                    event({"line": text, "timestamp": ts, "stream": stream})
                    quiet_since = time.time()
                if ended:
                    break
                if deadline and time.time() >= deadline and p.ended is None:
                    sb.box.kill_command(p.popen, signal.SIGKILL)
                    deadline = None
                if time.time() - quiet_since >= interval:
                    write(b":\n\n")
                    with FAKE.lock:
                        FAKE.keepalives += 1
                    quiet_since = time.time()
            end = {"oom_killed": p.oom_killed}
            if p.exit_code is not None:
                end["exit_code"] = p.exit_code
            if p.signal is not None:
                end["signal"] = p.signal
            event(end)
            write(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def main():
    global FAKE
    FAKE = TensorlakeFake()
    fakehttp.serve(FAKE, TensorlakeHandler)


if __name__ == "__main__":
    main()
