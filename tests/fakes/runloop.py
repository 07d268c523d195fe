#!/usr/bin/python3
"""A fake Runloop devbox service for the libsbx tests.

Follows the Runloop section of the provider contracts
(runloopai/api-client-python: src/runloop_api_client/_client.py,
resources/devboxes/*.py, types/*.py), on http://127.0.0.1:<n>
(RUNLOOP_BASE_URL):

  POST /v1/devboxes                         create -> DevboxView
  GET  /v1/devboxes/{id}                    DevboxView
  GET  /v1/devboxes?limit=&starting_after=&status=
                                            {"devboxes", "has_more", "total_count"}
  POST /v1/devboxes/{id}/wait_for_status    {"statuses", "timeout_seconds" <= 30}
                                            DevboxView, or 408 when the hold ends
  POST /v1/devboxes/{id}/shutdown|suspend|resume|keep_alive
  POST /v1/devboxes/{id}/execute            {"command", "command_id",
                                            "optimistic_timeout" <= 25, "shell_name"}
                                            an execution; the same command_id
                                            answers the same execution (it never
                                            runs twice)
  POST /v1/devboxes/{id}/executions/{eid}/wait_for_status
                                            {"statuses", "timeout_seconds" <= 25},
                                            or 408
  GET  /v1/devboxes/{id}/executions/{eid}
  GET  /v1/devboxes/{id}/executions/{eid}/stream_stdout_updates?offset=N
  GET  /v1/devboxes/{id}/executions/{eid}/stream_stderr_updates?offset=N
                                            SSE: "data: {"output", "offset"}"
                                            events, the stream's bytes from
                                            byte offset N as they come (output
                                            as text, bad UTF-8 replaced; offset
                                            the chunk's first byte); the answer
                                            ends once the execution completed
  POST /v1/devboxes/{id}/executions/{eid}/kill
  POST /v1/devboxes/{id}/read_file_contents  {"file_path"} -> text/plain
  POST /v1/devboxes/{id}/write_file_contents {"file_path", "contents"}
  POST /v1/devboxes/{id}/upload_file         multipart: "path", "file"
  POST /v1/devboxes/{id}/download_file       {"path"} -> bytes
  POST /v1/devboxes/{id}/snapshot_disk       {"name", "metadata"} -> snapshot
  GET  /v1/devboxes/disk_snapshots, POST /v1/devboxes/disk_snapshots/{id}/delete

Relative file paths are taken from the home directory (/home/user), where
commands run too. An execution's stdout and stderr are text (UTF-8, bad
bytes replaced), as the real service's JSON carries them. A devbox shuts
down keep_alive_time_seconds (default 3600) after create or its last
keep_alive (shutdown_reason "keep_alive_timeout"); a shutdown devbox stays
visible to GET and list, and every other call on it answers 400. Devboxes
are real (tests/fakes/nsbox.py). Errors are {"message": ...} JSON.

Control routes (no auth; not logged): GET/DELETE /_fake/log, POST /_fake/faults
(tests/fakes/fakehttp.py); POST /_fake/devbox/{id}/vanish (404 everywhere);
POST /_fake/devbox/{id}/fail {"reason"} (status failure with that
failure_reason); GET /_fake/devbox/{id} {"status", "root", "running",
"keep_alive", "executions", "body"}; POST /_fake/config {"create_pending": s,
"hold_cap": s (caps the long-poll holds, to test the 408 loop),
"page_cap": n (list pages hold at most n devboxes, whatever the limit),
"lose_execute_answers": n (the next n executes start their command, then
answer 502 as if the answer were lost on the way), "hold_create": s (a create
makes its devbox at once and answers s seconds later), "drop_streams": n (the
next n output streams opened at offset 0 lose their connection after their
first event)}.

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import email.parser
import email.policy
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
from fakehttp import Reply, q1  # noqa: E402

HOME = "/home/user"
SIZES = ("X_SMALL", "SMALL", "MEDIUM", "LARGE", "X_LARGE", "XX_LARGE", "CUSTOM_SIZE")
TERMINAL = ("shutdown", "failure")


def ms(t=None):
    return int((time.time() if t is None else t) * 1000)


def rerr(status, message):
    return Reply(status, {"message": message})


class Execution:
    def __init__(self, eid, command):
        self.id = eid
        self.command = command
        self.popen = None
        self.exit_status = None
        self.stdout = b""
        self.stderr = b""
        self.cond = threading.Condition()

    def view(self, devbox_id):
        d = {"devbox_id": devbox_id, "execution_id": self.id,
             "status": "completed" if self.exit_status is not None else "running"}
        if self.exit_status is not None:
            d["exit_status"] = self.exit_status
            d["stdout"] = self.stdout.decode("utf-8", "replace")
            d["stderr"] = self.stderr.decode("utf-8", "replace")
            d["stdout_truncated"] = False
            d["stderr_truncated"] = False
        return d


class Devbox:
    def __init__(self, fake, body):
        self.id = "dbx_" + uuid.uuid4().hex[:24]
        self.body = body
        self.status = "provisioning"
        self.created = time.time()
        self.ended = None
        lp = body.get("launch_parameters") or {}
        self.keep_alive = int(lp.get("keep_alive_time_seconds") or 3600)
        self.alive_from = self.created
        self.failure_reason = None
        self.shutdown_reason = None
        self.transitions = [{"status": "provisioning", "transition_time_ms": ms()}]
        self.box = nsbox.Box(fake.dir, "runloop")
        os.makedirs(os.path.join(self.box.root, HOME.lstrip("/")), exist_ok=True)
        self.executions = {}        # execution_id -> Execution
        self.by_command_id = {}     # command_id -> execution_id
        self.env = dict(body.get("environment_variables") or {})
        self.cond = threading.Condition()

    def set_status(self, s):
        with self.cond:
            self.status = s
            self.transitions.append({"status": s, "transition_time_ms": ms()})
            self.cond.notify_all()

    def view(self):
        d = {"id": self.id, "name": self.body.get("name"), "status": self.status,
             "create_time_ms": ms(self.created),
             "launch_parameters": self.body.get("launch_parameters") or {},
             "metadata": self.body.get("metadata") or {},
             "state_transitions": list(self.transitions),
             "blueprint_id": self.body.get("blueprint_id"),
             "snapshot_id": self.body.get("snapshot_id"),
             "capabilities": [], "tunnel": None}
        if self.ended is not None:
            d["end_time_ms"] = ms(self.ended)
        if self.failure_reason:
            d["failure_reason"] = self.failure_reason
        if self.shutdown_reason:
            d["shutdown_reason"] = self.shutdown_reason
        return d


class RunloopFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-runloop-key"))
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-runloop-")
        self.snapshots = {}         # id -> {"dir", "view"}
        self.config = {"create_pending": 0.0, "hold_cap": 30.0, "page_cap": 5000,
                       "lose_execute_answers": 0, "hold_create": 0.0}
        self.port = 0
        self.start_reaper(self.reap)

    def error_body(self, status, message, path, method):
        return {"message": message}

    def reap(self, dbx, now):
        if dbx.status in ("running", "provisioning", "initializing", "suspended") \
                and now >= dbx.alive_from + dbx.keep_alive:
            self.end(dbx, "shutdown", shutdown_reason="keep_alive_timeout")

    def end(self, dbx, status, shutdown_reason=None, failure_reason=None):
        if dbx.status in TERMINAL:
            return
        # The end is recorded before the devbox's processes are killed, as
        # the provider records why it ends a devbox: a command killed with
        # it finds its devbox ended, with the reason.
        dbx.shutdown_reason = shutdown_reason
        dbx.failure_reason = failure_reason
        dbx.ended = time.time()
        dbx.set_status(status)
        dbx.box.delete()

    def find(self, key):
        with self.lock:
            dbx = self.sandboxes.get(key)
        if dbx is None:
            raise rerr(404, "devbox %s not found" % key)
        return dbx

    def hold(self, want):
        return max(0.0, min(float(want), float(self.config.get("hold_cap", 30.0))))


FAKE = None


class RunloopHandler(fakehttp.Handler):
    def fake_control(self, path):
        f = FAKE
        m = re.fullmatch(r"/_fake/devbox/([^/]+)(/vanish|/fail)?", path)
        if path == "/_fake/config" and self.command == "POST":
            with f.lock:
                f.config.update(self.json_body())
            return self.send_json(204, None)
        if not m:
            raise Reply(404, {"message": "no such control route: " + path})
        dbx = f.find(m.group(1))
        if m.group(2) == "/vanish":
            dbx.box.delete()
            with f.lock:
                f.sandboxes.pop(dbx.id, None)
            return self.send_json(204, None)
        if m.group(2) == "/fail":
            f.end(dbx, "failure", failure_reason=self.json_body().get("reason",
                                                                       "execution_failed"))
            return self.send_json(204, None)
        self.send_json(200, {"status": dbx.status, "root": dbx.box.root,
                             "running": dbx.box.running(), "keep_alive": dbx.keep_alive,
                             "executions": len(dbx.executions), "body": dbx.body})

    def route(self, path, query):
        f = FAKE
        meth = self.command
        if path == "/v1/devboxes" and meth == "POST":
            return self.create()
        if path == "/v1/devboxes" and meth == "GET":
            return self.list(query)
        if path == "/v1/devboxes/disk_snapshots" and meth == "GET":
            with f.lock:
                snaps = [s["view"] for s in f.snapshots.values()]
            return self.send_json(200, {"snapshots": snaps, "has_more": False,
                                        "total_count": len(snaps)})
        m = re.fullmatch(r"/v1/devboxes/disk_snapshots/([^/]+)/delete", path)
        if m and meth == "POST":
            with f.lock:
                s = f.snapshots.pop(m.group(1), None)
            if s is None:
                raise rerr(404, "snapshot %s not found" % m.group(1))
            shutil.rmtree(s["dir"], ignore_errors=True)
            return self.send_json(200, {})
        m = re.fullmatch(r"/v1/devboxes/([^/]+)(/.*)?", path)
        if not m:
            raise rerr(404, "no route for %s %s" % (meth, path))
        dbx = f.find(m.group(1))
        sub = m.group(2) or ""
        if sub == "" and meth == "GET":
            return self.send_json(200, dbx.view())
        if meth != "POST" and not (meth == "GET" and sub.startswith("/executions/")):
            raise rerr(404, "no route for %s %s" % (meth, path))
        body = self.json_body() if not sub.startswith("/upload_file") else None
        if sub == "/wait_for_status":
            return self.wait_status(dbx, body)
        if sub == "/shutdown":
            f.end(dbx, "shutdown", shutdown_reason="api_shutdown")
            return self.send_json(200, dbx.view())
        if dbx.status in TERMINAL:
            raise rerr(400, "devbox %s is %s" % (dbx.id, dbx.status))
        if sub == "/keep_alive":
            dbx.alive_from = time.time()
            return self.send_json(200, {})
        if sub == "/suspend":
            if dbx.status != "running":
                raise rerr(400, "devbox %s is %s, not running" % (dbx.id, dbx.status))
            dbx.set_status("suspending")
            dbx.box.stop()
            dbx.set_status("suspended")
            return self.send_json(200, dbx.view())
        if sub == "/resume":
            if dbx.status != "suspended":
                raise rerr(400, "devbox %s is %s, not suspended" % (dbx.id, dbx.status))
            dbx.set_status("resuming")
            dbx.box.start(self.allow_internet(dbx))
            dbx.alive_from = time.time()
            dbx.set_status("running")
            return self.send_json(200, dbx.view())
        if dbx.status != "running":
            raise rerr(400, "devbox %s is %s, not running" % (dbx.id, dbx.status))
        if sub == "/execute":
            return self.execute(dbx, body, query)
        m2 = re.fullmatch(r"/executions/([^/]+)(/wait_for_status|/kill"
                          r"|/stream_stdout_updates|/stream_stderr_updates)?", sub)
        if m2:
            ex = dbx.executions.get(m2.group(1))
            if ex is None:
                raise rerr(404, "execution %s not found" % m2.group(1))
            if m2.group(2) is None and meth == "GET":
                return self.send_json(200, ex.view(dbx.id))
            if m2.group(2) and m2.group(2).startswith("/stream_") and meth == "GET":
                return self.stream_updates(ex, m2.group(2)[8:14], query)
            if m2.group(2) == "/kill":
                if ex.exit_status is None:
                    dbx.box.kill_command(ex.popen, signal.SIGKILL)
                return self.send_json(200, ex.view(dbx.id))
            if m2.group(2) == "/wait_for_status":
                t = body.get("timeout_seconds", 25)
                if not isinstance(t, int) or t < 0 or t > 25:
                    raise rerr(400, "timeout_seconds must be an integer from 0 to 25")
                with ex.cond:
                    ex.cond.wait_for(lambda: ex.exit_status is not None, FAKE.hold(t))
                if ex.exit_status is None:
                    raise rerr(408, "execution %s is still running" % ex.id)
                return self.send_json(200, ex.view(dbx.id))
        if sub == "/read_file_contents":
            host = self.host(dbx, body.get("file_path"))
            if not os.path.isfile(host):
                raise rerr(404, "file not found: %s" % body.get("file_path"))
            with open(host, "rb") as fh:
                return self.send_bytes(200, fh.read(), "text/plain; charset=utf-8")
        if sub == "/write_file_contents":
            host = self.host(dbx, body.get("file_path"))
            contents = body.get("contents")
            if not isinstance(contents, str):
                raise rerr(400, "contents must be a string")
            os.makedirs(os.path.dirname(host), exist_ok=True)
            with open(host, "wb") as fh:
                fh.write(contents.encode())
            return self.send_json(200, {})
        if sub == "/upload_file":
            fields = self.multipart()
            p = fields.get("path")
            data = fields.get("file")
            if p is None or data is None:
                raise rerr(400, "multipart fields path and file are required")
            host = self.host(dbx, p.decode())
            if os.path.isdir(host):
                raise rerr(400, "path is a directory: %s" % p.decode())
            try:
                os.makedirs(os.path.dirname(host), exist_ok=True)
                with open(host, "wb") as fh:
                    fh.write(data)
            except OSError as e:
                raise rerr(400, "cannot write %s: %s" % (p.decode(), e.strerror))
            return self.send_json(200, {})
        if sub == "/download_file":
            host = self.host(dbx, body.get("path"))
            if not os.path.isfile(host):
                raise rerr(404, "file not found: %s" % body.get("path"))
            with open(host, "rb") as fh:
                return self.send_bytes(200, fh.read())
        if sub == "/snapshot_disk":
            sid = "snp_" + uuid.uuid4().hex[:24]
            d = os.path.join(f.dir, sid)
            shutil.copytree(dbx.box.root, d, symlinks=True)
            view = {"id": sid, "create_time_ms": ms(), "source_devbox_id": dbx.id,
                    "name": body.get("name"), "metadata": body.get("metadata") or {},
                    "size_bytes": 0}
            with f.lock:
                f.snapshots[sid] = {"dir": d, "view": view, "body": dbx.body}
            return self.send_json(200, view)
        raise rerr(404, "no route for %s %s" % (meth, path))

    # ------------------------------------------------------------ helpers
    @staticmethod
    def allow_internet(dbx):
        lp = dbx.body.get("launch_parameters") or {}
        return not lp.get("network_policy_id")

    @staticmethod
    def host(dbx, p):
        if not isinstance(p, str) or not p:
            raise rerr(400, "path is required")
        if not p.startswith("/"):
            p = HOME + "/" + p
        host = dbx.box.host_path(p)
        if host is None:
            raise rerr(400, "path leaves the devbox: %s" % p)
        return host

    def multipart(self):
        ctype = self.headers.get("Content-Type") or ""
        if not ctype.startswith("multipart/form-data"):
            raise rerr(400, "upload_file wants multipart/form-data")
        raw = b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + self.body_bytes()
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
        out = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            out[name] = part.get_payload(decode=True) or b""
        return out

    def wait_status(self, dbx, body):
        statuses = body.get("statuses")
        t = body.get("timeout_seconds", 30)
        if not isinstance(statuses, list) or not statuses:
            raise rerr(400, "statuses is required")
        if not isinstance(t, int) or t < 0 or t > 30:
            raise rerr(400, "timeout_seconds must be an integer from 0 to 30")
        with dbx.cond:
            dbx.cond.wait_for(lambda: dbx.status in statuses or dbx.status in TERMINAL,
                              FAKE.hold(t))
        if dbx.status not in statuses:
            if dbx.status in TERMINAL:
                raise rerr(400, "devbox %s is %s" % (dbx.id, dbx.status))
            raise rerr(408, "devbox %s is %s" % (dbx.id, dbx.status))
        return self.send_json(200, dbx.view())

    # ------------------------------------------------------------ create, list
    def create(self):
        f = FAKE
        body = self.json_body()
        known = ("name", "blueprint_id", "blueprint_name", "snapshot_id", "entrypoint",
                 "environment_variables", "secrets", "metadata", "launch_parameters",
                 "code_mounts", "file_mounts", "repo_connection_id")
        for k in body:
            if k not in known:
                raise rerr(400, "unknown field %s" % k)
        lp = body.get("launch_parameters") or {}
        size = lp.get("resource_size_request")
        if size is not None and size not in SIZES:
            raise rerr(400, "unknown resource_size_request %r" % size)
        if size == "CUSTOM_SIZE":
            c, m = lp.get("custom_cpu_cores"), lp.get("custom_gb_memory")
            if not isinstance(c, int) or not isinstance(m, int) or c < 1 or m < 1:
                raise rerr(400, "CUSTOM_SIZE needs integer custom_cpu_cores and "
                           "custom_gb_memory")
        elif "custom_cpu_cores" in lp or "custom_gb_memory" in lp:
            raise rerr(400, "custom_* sizes need resource_size_request CUSTOM_SIZE")
        ka = lp.get("keep_alive_time_seconds")
        if ka is not None and (not isinstance(ka, int) or isinstance(ka, bool) or ka < 1):
            raise rerr(400, "keep_alive_time_seconds must be a positive integer")
        meta = body.get("metadata") or {}
        env = body.get("environment_variables") or {}
        for d, what in ((meta, "metadata"), (env, "environment_variables")):
            if not isinstance(d, dict) or not all(isinstance(v, str) for v in d.values()):
                raise rerr(400, "%s must be an object of strings" % what)
        snap = None
        if body.get("snapshot_id"):
            with f.lock:
                snap = f.snapshots.get(body["snapshot_id"])
            if snap is None:
                raise rerr(404, "snapshot %s not found" % body["snapshot_id"])
        dbx = Devbox(f, body)
        if snap is not None:
            shutil.rmtree(dbx.box.root)
            shutil.copytree(snap["dir"], dbx.box.root, symlinks=True)
        with f.lock:
            f.sandboxes[dbx.id] = dbx
        pending = float(f.config.get("create_pending", 0))

        def ready():
            try:
                dbx.box.start(self.allow_internet(dbx))
            except OSError as e:
                f.end(dbx, "failure", failure_reason="health_check_failed")
                sys.stderr.write("devbox failed to start: %s\n" % e)
                return
            if dbx.status == "provisioning":
                dbx.set_status("running")
        hold = float(f.config.get("hold_create", 0))
        if hold > 0:
            ready()
            time.sleep(hold)
            return self.send_json(200, dbx.view())
        if pending > 0:
            tm = threading.Timer(pending, ready)
            tm.daemon = True
            tm.start()
            self.send_json(200, dbx.view())
        else:
            view = dbx.view()
            ready()
            self.send_json(200, view)

    def list(self, query):
        f = FAKE
        try:
            limit = int(q1(query, "limit", "20"))
        except ValueError:
            raise rerr(400, "limit must be an integer")
        if limit < 1 or limit > 5000:
            raise rerr(400, "limit must be from 1 to 5000")
        status = q1(query, "status")
        after = q1(query, "starting_after")
        with f.lock:
            items = sorted(f.sandboxes.values(), key=lambda d: (d.created, d.id), reverse=True)
        items = [d for d in items if status is None or d.status == status]
        if after:
            ids = [d.id for d in items]
            if after not in ids:
                raise rerr(400, "starting_after %s is not a devbox" % after)
            items = items[ids.index(after) + 1:]
        limit = min(limit, int(f.config.get("page_cap", 5000)))
        page = items[:limit]
        self.send_json(200, {"devboxes": [d.view() for d in page],
                             "has_more": len(items) > limit, "total_count": len(items)})

    # ------------------------------------------------------------ execute
    def stream_updates(self, ex, which, query):
        """SSE of one output stream of @ex from byte offset ?offset=, until the
        execution completed and everything was sent."""
        try:
            off = int(q1(query, "offset", "0") or 0)
        except ValueError:
            raise rerr(400, "offset must be an integer")
        with FAKE.lock:
            drop = off == 0 and FAKE.config.get("drop_streams", 0) > 0
            if drop:
                FAKE.config["drop_streams"] -= 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200

        def event(raw):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            self.wfile.flush()
        try:
            while True:
                with ex.cond:
                    ex.cond.wait_for(lambda: len(getattr(ex, which)) > off
                                     or ex.exit_status is not None, 1.0)
                    data = getattr(ex, which)[off:]
                    ended = ex.exit_status is not None
                if data:
                    msg = json.dumps({"output": data.decode("utf-8", "replace"), "offset": off})
                    event(b"data: " + msg.encode() + b"\n\n")
                    off += len(data)
                    if drop:
                        # The connection is lost mid-answer.
                        self.close_connection = True
                        return
                elif ended:
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def execute(self, dbx, body, query):
        cmd = body.get("command")
        cid = body.get("command_id")
        if not isinstance(cmd, str) or not cmd:
            raise rerr(400, "command is required")
        if cid is not None and not isinstance(cid, str):
            raise rerr(400, "command_id must be a string")
        t = body.get("optimistic_timeout", 0)
        if not isinstance(t, int) or t < 0 or t > 25:
            raise rerr(400, "optimistic_timeout must be an integer from 0 to 25")
        with FAKE.lock:
            eid = dbx.by_command_id.get(cid) if cid else None
            ex = dbx.executions.get(eid) if eid else None
            if ex is None:
                ex = Execution("exe_" + uuid.uuid4().hex[:24], cmd)
                dbx.executions[ex.id] = ex
                if cid:
                    dbx.by_command_id[cid] = ex.id
                fresh = True
            else:
                fresh = False
        if fresh:
            env = dict(dbx.env)
            try:
                ex.popen = dbx.box.popen(
                    ["/usr/bin/env", "HOME=" + HOME, "/bin/bash", "-c", cmd], env=env, cwd=HOME,
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            except nsbox.SandboxGone:
                raise rerr(400, "devbox %s is not running" % dbx.id)

            def pump(stream, which):
                while True:
                    data = stream.read1(65536)
                    if not data:
                        break
                    with ex.cond:
                        setattr(ex, which, getattr(ex, which) + data)
                        ex.cond.notify_all()
            pumps = [threading.Thread(target=pump, args=(st, w), daemon=True)
                     for st, w in ((ex.popen.stdout, "stdout"), (ex.popen.stderr, "stderr"))]
            for th in pumps:
                th.start()

            def reap():
                for th in pumps:
                    th.join()
                code = ex.popen.wait()
                dbx.box.forget(ex.popen)
                with ex.cond:
                    ex.exit_status = code if code >= 0 else 128 - code
                    ex.cond.notify_all()
            threading.Thread(target=reap, daemon=True).start()
        with FAKE.lock:
            lose = fresh and FAKE.config.get("lose_execute_answers", 0) > 0
            if lose:
                FAKE.config["lose_execute_answers"] -= 1
        if lose:
            raise rerr(502, "bad gateway")
        with ex.cond:
            ex.cond.wait_for(lambda: ex.exit_status is not None, FAKE.hold(t))
        self.send_json(200, ex.view(dbx.id))


def main():
    global FAKE
    FAKE = RunloopFake()
    fakehttp.serve(FAKE, RunloopHandler)


if __name__ == "__main__":
    main()
