#!/usr/bin/python3
"""A fake Vercel Sandbox service (v1 API) for the libsbx tests.

Follows the Vercel section of the provider contracts (vercel/sandbox tag
@vercel/sandbox@1.10.2: packages/vercel-sandbox/src/api-client/
api-client.ts and validators.ts; the official mock's error codes), on
http://127.0.0.1:<n> (the base URL in place of https://vercel.com/api).
Every request carries "Authorization: Bearer <token>" and ?teamId=<team>.

  POST /v1/sandboxes                       {projectId, timeout (ms), resources
                                           {vcpus}, runtime, networkPolicy, env,
                                           source {type: snapshot, snapshotId}}
                                           -> {sandbox, routes}
  GET  /v1/sandboxes/{id}                  {sandbox, routes}
  GET  /v1/sandboxes?project=&limit=&since=&until=
                                           {sandboxes, pagination {count, next,
                                           prev}}: newest first; next is the
                                           createdAt to pass as until for the
                                           next page (null at the end)
  POST /v1/sandboxes/{id}/stop             {sandbox} (stopping, then stopped)
  POST /v1/sandboxes/{id}/extend-timeout   {duration} ms -> {sandbox}
  POST /v1/sandboxes/{id}/network-policy   policy -> {sandbox}
  POST /v1/sandboxes/{id}/cmd              {command, args, cwd, env, sudo, wait}
                                           wait false: {command}; wait true:
                                           NDJSON, {command} then {command}
                                           with exitCode
  GET  /v1/sandboxes/{id}/cmd/{cmdId}[?wait=true]   {command}
  GET  /v1/sandboxes/{id}/cmd/{cmdId}/logs NDJSON {"stream": "stdout"|"stderr",
                                           "data": text}; {"stream": "error",
                                           "data": {code, message}} when the
                                           sandbox stops mid-stream
  POST /v1/sandboxes/{id}/{cmdId}/kill     {signal} -> {command}
  POST /v1/sandboxes/{id}/fs/mkdir         {path, cwd} -> {}
  POST /v1/sandboxes/{id}/fs/write         gzipped tar, header x-cwd -> {}
  POST /v1/sandboxes/{id}/fs/read          {path, cwd} -> raw bytes, 404 missing
  POST /v1/sandboxes/{id}/snapshot         {expiration} -> {snapshot, sandbox}:
                                           the sandbox stops
  GET|DELETE /v1/sandboxes/snapshots/{id}, GET /v1/sandboxes/snapshots

Commands run as given (command and args, no shell) with the default cwd
/vercel/sandbox; a sandbox stops (status stopped) when its timeout runs out
after create (extend-timeout adds to it); a stopped sandbox stays visible to
GET and list, other calls on it answer 410 sandbox_stopped. Errors are
{"error": {"code", "message"}}. Sandboxes are real (tests/fakes/nsbox.py).

Control routes (no auth; not logged): GET/DELETE /_fake/log, POST /_fake/faults
(tests/fakes/fakehttp.py); POST /_fake/sandbox/{id}/vanish (404 everywhere);
POST /_fake/sandbox/{id}/stop (stopped by the provider, as at its timeout);
GET /_fake/sandbox/{id} {"status", "root", "running", "timeout", "body"};
POST /_fake/config {"create_pending": s, "page_cap": n (list pages hold at
most n sandboxes, whatever the limit), "hold_create": s (a create makes its
sandbox, then answers that many seconds later)}.

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import gzip
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply, q1  # noqa: E402

CWD = "/vercel/sandbox"
TEAM = os.environ.get("SBX_FAKE_TEAM", "team_fake")
PROJECT = os.environ.get("SBX_FAKE_PROJECT", "prj_fake")
RUNTIMES = ("node22", "node24", "python3.13")
ENDED = ("stopped", "failed", "aborted")


def ms(t=None):
    return int((time.time() if t is None else t) * 1000)


def rerr(status, code, message):
    return Reply(status, {"error": {"code": code, "message": message}})


class Command:
    def __init__(self, sandbox_id, body):
        self.id = "cmd_" + uuid.uuid4().hex[:24]
        self.sandbox_id = sandbox_id
        self.name = body.get("command")
        self.args = list(body.get("args") or [])
        self.cwd = body.get("cwd") or CWD
        self.started = ms()
        self.popen = None
        self.exit_code = None
        self.out = []           # (stream, bytes) in arrival order
        self.cond = threading.Condition()
        self.stopped = False    # ended by its sandbox's stop, not by itself

    def view(self):
        return {"id": self.id, "name": self.name, "args": self.args, "cwd": self.cwd,
                "sandboxId": self.sandbox_id, "exitCode": self.exit_code,
                "startedAt": self.started}


class Sandbox:
    def __init__(self, fake, body):
        self.id = "sbx_" + uuid.uuid4().hex[:24]
        self.body = body
        self.status = "pending"
        self.created = ms()
        self.timeout = int(body.get("timeout") or 300000)
        self.vcpus = int((body.get("resources") or {}).get("vcpus") or 2)
        self.policy = body.get("networkPolicy") or {"mode": "allow-all"}
        self.env = dict(body.get("env") or {})
        self.stopped_at = None
        self.snapshotted_at = None
        self.box = nsbox.Box(fake.dir, "vercel")
        os.makedirs(os.path.join(self.box.root, CWD.lstrip("/")), exist_ok=True)
        self.commands = {}
        self.cond = threading.Condition()

    def view(self):
        d = {"id": self.id, "memory": self.vcpus * 2048, "vcpus": self.vcpus,
             "region": "iad1", "runtime": self.body.get("runtime") or "node24",
             "timeout": self.timeout, "status": self.status, "requestedAt": self.created,
             "createdAt": self.created, "updatedAt": ms(), "cwd": CWD,
             "networkPolicy": self.policy}
        if self.status == "running":
            d["startedAt"] = self.created
        if self.stopped_at is not None:
            d["stoppedAt"] = self.stopped_at
            d["duration"] = self.stopped_at - self.created
        if self.snapshotted_at is not None:
            d["snapshottedAt"] = self.snapshotted_at
        src = self.body.get("source") or {}
        if src.get("type") == "snapshot":
            d["sourceSnapshotId"] = src.get("snapshotId")
        return d

    def set_status(self, s):
        with self.cond:
            self.status = s
            self.cond.notify_all()


class VercelFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-vercel-token"))
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-vercel-")
        self.snapshots = {}
        self.config = {"create_pending": 0.0, "page_cap": 100, "hold_create": 0.0}
        self.port = 0
        self.start_reaper(self.reap)

    def error_body(self, status, message, path, method):
        code = {400: "bad_request", 401: "forbidden", 404: "not_found",
                410: "sandbox_stopped", 429: "too_many_requests"}.get(status, "internal_error")
        return {"error": {"code": code, "message": message}}

    def reap(self, sb, now):
        if sb.status in ("pending", "running") and ms(now) >= sb.created + sb.timeout:
            self.stop(sb)

    def stop(self, sb, status="stopped"):
        if sb.status in ENDED:
            return
        sb.set_status("stopping")
        sb.box.delete()
        sb.stopped_at = ms()
        sb.set_status(status)
        for c in list(sb.commands.values()):
            with c.cond:
                c.cond.notify_all()

    def find(self, key):
        with self.lock:
            sb = self.sandboxes.get(key)
        if sb is None:
            raise rerr(404, "not_found", "sandbox %s not found" % key)
        return sb


FAKE = None


class VercelHandler(fakehttp.Handler):
    def fake_control(self, path):
        f = FAKE
        if path == "/_fake/config" and self.command == "POST":
            with f.lock:
                f.config.update(self.json_body())
            return self.send_json(204, None)
        m = re.fullmatch(r"/_fake/sandbox/([^/]+)(/vanish|/stop)?", path)
        if not m:
            raise rerr(404, "not_found", "no such control route: " + path)
        sb = f.find(m.group(1))
        if m.group(2) == "/vanish":
            sb.box.delete()
            with f.lock:
                f.sandboxes.pop(sb.id, None)
            return self.send_json(204, None)
        if m.group(2) == "/stop":
            f.stop(sb)
            return self.send_json(204, None)
        self.send_json(200, {"status": sb.status, "root": sb.box.root,
                             "running": sb.box.running(), "timeout": sb.timeout,
                             "body": sb.body})

    def route(self, path, query):
        f = FAKE
        meth = self.command
        if q1(query, "teamId") != TEAM:
            raise rerr(403, "forbidden", "teamId %r is not the token's team" %
                       q1(query, "teamId"))
        if path == "/v1/sandboxes" and meth == "POST":
            return self.create()
        if path == "/v1/sandboxes" and meth == "GET":
            return self.list(query)
        if path == "/v1/sandboxes/snapshots" and meth == "GET":
            with f.lock:
                snaps = [s["view"] for s in f.snapshots.values()]
            return self.send_json(200, {"snapshots": snaps, "pagination": {
                "count": len(snaps), "next": None, "prev": None}})
        m = re.fullmatch(r"/v1/sandboxes/snapshots/([^/]+)", path)
        if m:
            with f.lock:
                s = f.snapshots.get(m.group(1))
                if s is not None and meth == "DELETE":
                    f.snapshots.pop(m.group(1))
            if s is None:
                raise rerr(404, "not_found", "snapshot %s not found" % m.group(1))
            if meth == "DELETE":
                shutil.rmtree(s["dir"], ignore_errors=True)
                s["view"]["status"] = "deleted"
            return self.send_json(200, {"snapshot": s["view"]})
        m = re.fullmatch(r"/v1/sandboxes/([^/]+)(/.*)?", path)
        if not m:
            raise rerr(404, "not_found", "no route for %s %s" % (meth, path))
        sb = f.find(m.group(1))
        sub = m.group(2) or ""
        if sub == "" and meth == "GET":
            return self.send_json(200, {"sandbox": sb.view(), "routes": []})
        m2 = re.fullmatch(r"/cmd/([^/]+)(/logs)?", sub)
        if m2 and meth == "GET":
            c = sb.commands.get(m2.group(1))
            if c is None:
                raise rerr(404, "not_found", "command %s not found" % m2.group(1))
            if m2.group(2):
                return self.logs(sb, c)
            if q1(query, "wait") == "true":
                with c.cond:
                    c.cond.wait_for(lambda: c.exit_code is not None or c.stopped or
                                    sb.status in ENDED)
                if c.exit_code is None:
                    raise rerr(410, "sandbox_stopped", "sandbox %s stopped" % sb.id)
            return self.send_json(200, {"command": c.view()})
        if meth != "POST":
            raise rerr(404, "not_found", "no route for %s %s" % (meth, path))
        if sub == "/fs/write":
            body = None
        else:
            body = self.json_body()
            if not isinstance(body, dict):
                raise rerr(400, "bad_request", "the body must be a JSON object")
        if sub == "/stop":
            f.stop(sb)
            return self.send_json(200, {"sandbox": sb.view()})
        if sb.status in ENDED or sb.status == "stopping":
            self.body_bytes()
            raise rerr(410, "sandbox_stopped", "sandbox %s is %s" % (sb.id, sb.status))
        if sub == "/extend-timeout":
            d = body.get("duration")
            if not isinstance(d, int) or isinstance(d, bool) or d < 1:
                raise rerr(400, "bad_request", "duration must be a positive integer (ms)")
            sb.timeout += d
            return self.send_json(200, {"sandbox": sb.view()})
        if sub == "/network-policy":
            if body.get("mode") not in ("allow-all", "deny-all", "custom"):
                raise rerr(400, "bad_request", "unknown network policy mode %r" %
                           body.get("mode"))
            sb.policy = body
            return self.send_json(200, {"sandbox": sb.view()})
        if sb.status != "running":
            raise rerr(400, "bad_request", "sandbox %s is %s" % (sb.id, sb.status))
        if sub == "/cmd":
            return self.run(sb, body)
        m2 = re.fullmatch(r"/([^/]+)/kill", sub)
        if m2 and m2.group(1) not in ("fs", "cmd"):
            c = sb.commands.get(m2.group(1))
            if c is None:
                raise rerr(404, "not_found", "command %s not found" % m2.group(1))
            sig = body.get("signal", 15)
            if not isinstance(sig, int) or sig < 1 or sig > 64:
                raise rerr(400, "bad_request", "signal must be an integer from 1 to 64")
            if c.exit_code is None:
                sb.box.kill_command(c.popen, sig)
            return self.send_json(200, {"command": c.view()})
        if sub == "/fs/mkdir":
            host = self.host(sb, body.get("path"), body.get("cwd"))
            try:
                os.mkdir(host)
            except FileExistsError:
                raise rerr(400, "bad_request", "%s exists" % body.get("path"))
            except OSError as e:
                raise rerr(400, "bad_request", "cannot make %s: %s" % (body.get("path"),
                                                                     e.strerror))
            return self.send_json(200, {})
        if sub == "/fs/read":
            host = self.host(sb, body.get("path"), body.get("cwd"))
            if not os.path.isfile(host):
                raise rerr(404, "file_not_found", "file not found: %s" % body.get("path"))
            with open(host, "rb") as fh:
                return self.send_bytes(200, fh.read())
        if sub == "/fs/write":
            return self.write(sb)
        if sub == "/snapshot":
            exp = body.get("expiration", 30 * 86400000)
            if not isinstance(exp, int) or exp < 0:
                raise rerr(400, "bad_request", "expiration must be an integer >= 0 (ms)")
            sid = "snap_" + uuid.uuid4().hex[:24]
            d = os.path.join(f.dir, sid)
            sb.set_status("snapshotting")
            shutil.copytree(sb.box.root, d, symlinks=True)
            view = {"id": sid, "sourceSandboxId": sb.id, "region": "iad1",
                    "status": "created", "sizeBytes": 0, "createdAt": ms(),
                    "updatedAt": ms()}
            if exp:
                view["expiresAt"] = ms() + exp
            with f.lock:
                f.snapshots[sid] = {"dir": d, "view": view}
            sb.snapshotted_at = ms()
            sb.status = "running"
            f.stop(sb)
            return self.send_json(200, {"snapshot": view, "sandbox": sb.view()})
        raise rerr(404, "not_found", "no route for %s %s" % (meth, path))

    # ------------------------------------------------------------ helpers
    @staticmethod
    def host(sb, p, cwd=None):
        if not isinstance(p, str) or not p:
            raise rerr(400, "bad_request", "path is required")
        if not p.startswith("/"):
            p = (cwd or CWD).rstrip("/") + "/" + p
        host = sb.box.host_path(p)
        if host is None:
            raise rerr(400, "bad_request", "path leaves the sandbox: %s" % p)
        return host

    def write(self, sb):
        if (self.headers.get("Content-Type") or "") != "application/gzip":
            self.body_bytes()
            raise rerr(400, "bad_request", "fs/write wants content-type application/gzip")
        cwd = self.headers.get("x-cwd") or CWD
        try:
            raw = gzip.decompress(self.body_bytes())
            tf = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")
            members = tf.getmembers()
        except (OSError, EOFError, tarfile.TarError) as e:
            raise rerr(400, "bad_request", "the body is not a gzipped tar: %s" % e)
        for mem in members:
            if not mem.isfile() and not mem.isdir():
                raise rerr(400, "bad_request", "unsupported tar entry %s" % mem.name)
            host = self.host(sb, mem.name, cwd)
            try:
                if mem.isdir():
                    os.makedirs(host, exist_ok=True)
                    continue
                if os.path.isdir(host):
                    raise rerr(400, "bad_request", "path is a directory: %s" % mem.name)
                os.makedirs(os.path.dirname(host), exist_ok=True)
                with open(host, "wb") as fh:
                    fh.write(tf.extractfile(mem).read())
                os.chmod(host, mem.mode & 0o7777)
            except OSError as e:
                raise rerr(400, "bad_request", "cannot write %s: %s" % (mem.name, e.strerror))
        return self.send_json(200, {})

    def ndjson_start(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200

    def line(self, obj):
        data = json.dumps(obj).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunks(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ------------------------------------------------------------ create, list
    def create(self):
        f = FAKE
        body = self.json_body()
        known = ("projectId", "ports", "source", "timeout", "resources", "runtime",
                 "networkPolicy", "env")
        for k in body:
            if k not in known:
                raise rerr(400, "bad_request", "unknown field %s" % k)
        if body.get("projectId") != PROJECT:
            raise rerr(400, "bad_request", "projectId %r is not a project of the team" %
                       body.get("projectId"))
        t = body.get("timeout")
        if t is not None and (not isinstance(t, int) or isinstance(t, bool) or t < 1):
            raise rerr(400, "bad_request", "timeout must be a positive integer (ms)")
        v = (body.get("resources") or {}).get("vcpus")
        if v is not None and v not in (1, 2, 4, 8):
            raise rerr(400, "bad_request", "resources.vcpus must be 1, 2, 4 or 8")
        if body.get("runtime") is not None and body["runtime"] not in RUNTIMES:
            raise rerr(400, "bad_request", "unknown runtime %r" % body["runtime"])
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(x, str) for x in env.values()):
            raise rerr(400, "bad_request", "env must be an object of strings")
        pol = body.get("networkPolicy")
        if pol is not None and (not isinstance(pol, dict) or
                                pol.get("mode") not in ("allow-all", "deny-all", "custom")):
            raise rerr(400, "bad_request", "networkPolicy.mode must be allow-all, deny-all "
                       "or custom")
        snap = None
        src = body.get("source")
        if src is not None:
            if not isinstance(src, dict) or src.get("type") != "snapshot":
                raise rerr(400, "bad_request", "the fake takes only source type snapshot")
            with f.lock:
                snap = f.snapshots.get(src.get("snapshotId"))
            if snap is None:
                raise rerr(404, "not_found", "snapshot %s not found" % src.get("snapshotId"))
        sb = Sandbox(f, body)
        if snap is not None:
            shutil.rmtree(sb.box.root)
            shutil.copytree(snap["dir"], sb.box.root, symlinks=True)
        with f.lock:
            f.sandboxes[sb.id] = sb
        pending = float(f.config.get("create_pending", 0))

        def ready():
            try:
                sb.box.start(sb.policy.get("mode") != "deny-all")
            except OSError as e:
                sb.set_status("failed")
                sys.stderr.write("sandbox failed to start: %s\n" % e)
                return
            if sb.status == "pending":
                sb.set_status("running")
        if pending > 0:
            tm = threading.Timer(pending, ready)
            tm.daemon = True
            tm.start()
        else:
            ready()
        hold = float(f.config.get("hold_create", 0))
        if hold > 0:
            time.sleep(hold)    # made, then answered late (a lost answer)
        self.send_json(200, {"sandbox": sb.view(), "routes": []})

    def list(self, query):
        f = FAKE
        if q1(query, "project") not in (None, PROJECT):
            raise rerr(400, "bad_request", "project %r is not a project of the team" %
                       q1(query, "project"))
        try:
            limit = int(q1(query, "limit", "20"))
            until = q1(query, "until")
            until = int(until) if until else None
            since = q1(query, "since")
            since = int(since) if since else None
        except ValueError:
            raise rerr(400, "bad_request", "limit, since and until must be integers")
        if limit < 1 or limit > 100:
            raise rerr(400, "bad_request", "limit must be from 1 to 100")
        with f.lock:
            items = sorted(f.sandboxes.values(), key=lambda s: (s.created, s.id), reverse=True)
        items = [s for s in items if (until is None or s.created < until) and
                 (since is None or s.created >= since)]
        limit = min(limit, int(f.config.get("page_cap", 100)))
        page = items[:limit]
        nxt = page[-1].created if len(items) > limit else None
        self.send_json(200, {"sandboxes": [s.view() for s in page],
                             "pagination": {"count": len(page), "next": nxt, "prev": None}})

    # ------------------------------------------------------------ commands
    def run(self, sb, body):
        name = body.get("command")
        args = body.get("args") or []
        if not isinstance(name, str) or not name:
            raise rerr(400, "bad_request", "command is required")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise rerr(400, "bad_request", "args must be an array of strings")
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(x, str) for x in env.values()):
            raise rerr(400, "bad_request", "env must be an object of strings")
        c = Command(sb.id, body)
        host = sb.box.host_path(c.cwd)
        if host is None or not os.path.isdir(host):
            raise rerr(400, "bad_request", "cwd %s is not a directory" % c.cwd)
        full = dict(sb.env)
        full.update(env)
        full.setdefault("HOME", "/root")
        try:
            c.popen = sb.box.popen([name] + args, env=full, cwd=c.cwd,
                                   stdin=subprocess.DEVNULL)
        except nsbox.SandboxGone:
            raise rerr(410, "sandbox_stopped", "sandbox %s is not running" % sb.id)
        except OSError as e:
            raise rerr(400, "bad_request", "cannot run %s: %s" % (name, e.strerror))
        sb.commands[c.id] = c

        def pump(fh, stream):
            for chunk in iter(lambda: fh.read1(65536), b""):
                with c.cond:
                    c.out.append((stream, chunk))
                    c.cond.notify_all()

        def reap():
            ts = [threading.Thread(target=pump, args=(c.popen.stdout, "stdout"), daemon=True),
                  threading.Thread(target=pump, args=(c.popen.stderr, "stderr"), daemon=True)]
            for t in ts:
                t.start()
            code = c.popen.wait()
            for t in ts:
                t.join()
            sb.box.forget(c.popen)
            with c.cond:
                if sb.status in ("stopping",) + ENDED:
                    c.stopped = True
                else:
                    c.exit_code = code if code >= 0 else 128 - code
                c.cond.notify_all()
        # The command as started (exitCode null), taken before its reaper
        # runs: a command that ends at once still answers its start first.
        started = c.view()
        threading.Thread(target=reap, daemon=True).start()
        if not body.get("wait"):
            return self.send_json(200, {"command": started})
        self.ndjson_start()
        self.line({"command": started})
        with c.cond:
            c.cond.wait_for(lambda: c.exit_code is not None or c.stopped or
                            sb.status in ENDED)
        if c.exit_code is None:
            self.line({"error": {"code": "sandbox_stopped",
                                 "message": "sandbox %s stopped" % sb.id}})
        else:
            self.line({"command": c.view()})
        self.end_chunks()

    def logs(self, sb, c):
        self.ndjson_start()
        i = 0
        while True:
            with c.cond:
                c.cond.wait_for(lambda: len(c.out) > i or c.exit_code is not None or
                                c.stopped or sb.status in ENDED)
                items = c.out[i:]
                i = len(c.out)
                done = c.exit_code is not None
                ended = c.stopped or sb.status in ENDED
            for stream, data in items:
                self.line({"stream": stream, "data": data.decode("utf-8", "replace")})
            if done and len(c.out) == i:
                break
            if ended and not done:
                self.line({"stream": "error", "data": {
                    "code": "sandbox_stopped", "message": "sandbox %s stopped" % sb.id}})
                break
        self.end_chunks()


def main():
    global FAKE
    FAKE = VercelFake()
    fakehttp.serve(FAKE, VercelHandler)


if __name__ == "__main__":
    main()
