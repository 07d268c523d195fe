#!/usr/bin/python3
"""A fake Blaxel sandboxes service for the libsbx tests.

Follows the Blaxel section of the provider contracts (blaxel-ai/sdk-typescript
@blaxel/core src/client/{sdk,types}.gen.ts, src/sandbox/{process,filesystem};
blaxel-ai/sandbox sandbox-api/src/handler/process.go):

Control plane, http://127.0.0.1:<n>/v0 (BL_API_URL):
  POST   /v0/sandboxes              create (body Sandbox; 409 when the name
                                    exists); status DEPLOYING, then DEPLOYED
  GET    /v0/sandboxes[?cursor=&limit=&showTerminated=]
                                    {"data": [...], "meta": {"nextCursor"}}
  GET|DELETE /v0/sandboxes/{name}   (DELETE is permanent: 404 afterwards)
Data plane, per sandbox: metadata.url, http://127.0.0.1:<n>/run/{ws}/sandboxes/{name}
(BL_RUN_URL is http://127.0.0.1:<n>/run):
  POST /process                     {command (a shell string, run by sh -c),
                                    workingDir, env{}, waitForCompletion,
                                    timeout s (0: none)}; with waitForCompletion
                                    the ProcessResponse JSON; with "Accept:
                                    text/event-stream" application/x-ndjson
                                    lines {"type": "stdout|stderr|keepalive|
                                    result", "data"} (result: the
                                    ProcessResponse as a JSON string)
  GET  /process, GET|DELETE /process/{pid|name}, DELETE /process/{id}/kill
  GET  /filesystem/{path}           a directory {name,path,files[],
                                    subdirectories[]}, or a file (raw bytes
                                    with "Accept: application/octet-stream",
                                    else {..., content})
  PUT  /filesystem/{path}           JSON {content?, isDirectory?, permissions?}
                                    or multipart (file, permissions); makes
                                    parents; at most 5 MB in one request
  DELETE /filesystem/{path}?recursive=true|false
  POST /filesystem-multipart/initiate/{path} {"permissions"?} -> {"uploadId","path"}
  PUT  /filesystem-multipart/{uploadId}/part?partNumber=N (multipart, "file";
                                    at most 5 MB) -> {"partNumber","etag","size"}
  POST /filesystem-multipart/{uploadId}/complete {"parts": [{"partNumber","etag"}]}
  DELETE /filesystem-multipart/{uploadId}/abort
Every call wants "X-Blaxel-Authorization: Bearer <key>" (SBX_FAKE_API_KEY,
default "fake-blaxel-key"), "X-Blaxel-Workspace: <ws>" (SBX_FAKE_WORKSPACE,
default "sbx-test-ws"; another is 403) and a "Blaxel-Version" header (400
without). Create errors are {code, message, sandbox_name?, status_code};
other errors {error, code?, message?}.

Lifetime: spec.runtime.ttl ("90s", "5m", "24h") deletes the sandbox that long
after create (status TERMINATED, then gone from GET). A sandbox goes to state
STANDBY when told (POST /_fake/sandbox/{name}/standby: its processes end,
its files stay) and any data-plane call wakes it (state RUNNING) first.
Sandboxes are real (tests/fakes/nsbox.py); spec.runtime.envs is the
environment of every process, the per-call env winning.

Control routes (no auth; not logged): GET/DELETE /_fake/log, POST /_fake/faults
(tests/fakes/fakehttp.py); GET /_fake/sandboxes (the live names);
POST /_fake/sandbox/{name}/vanish (404 everywhere);
POST /_fake/sandbox/{name}/standby; GET /_fake/sandbox/{name} {"status",
"state", "root", "running", "ttl_s", "wakes"}; POST /_fake/config
{"deploy_delay": s, "page_size": n, "stream_error": message (the next
process stream ends with an "error" line carrying the message instead of
its "result"), "stream_drop": true (the next process stream's connection
is closed after its first output line, mid-answer, the process running
on)}.

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import datetime
import hashlib
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
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply  # noqa: E402

KEEPALIVE_SECS = 2.0
PART_MAX = 5 * 1024 * 1024
STATUSES = ("DELETING", "TERMINATED", "FAILED", "DEACTIVATED", "DEACTIVATING", "UPLOADING",
            "BUILDING", "DEPLOYING", "DEPLOYED", "BUILT")
NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,47}[a-z0-9])?")


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


def err(status, message):
    return Reply(status, {"error": message, "code": status, "message": message})


def cerr(status, code, message, name=None):
    return Reply(status, {"code": code, "message": message, "sandbox_name": name,
                          "status_code": status})


def ttl_secs(s):
    m = re.fullmatch(r"(\d+)([smhd])", s or "")
    if not m:
        return None
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


class Process:
    def __init__(self, pid, name, command, cwd):
        self.pid = pid
        self.name = name
        self.command = command
        self.cwd = cwd
        self.popen = None
        self.chunks = []            # (stream, bytes)
        self.exit_code = None
        self.status = "running"
        self.started = time.time()
        self.completed = None
        self.cond = threading.Condition()

    def text(self, which=None):
        with self.cond:
            return b"".join(d for (s, d) in self.chunks
                            if which is None or s == which).decode("utf-8", "replace")

    def info(self):
        return {"pid": str(self.pid), "name": self.name, "command": self.command,
                "status": self.status, "startedAt": iso(self.started),
                "completedAt": iso(self.completed) if self.completed else None,
                "exitCode": self.exit_code if self.exit_code is not None else 0,
                "workingDir": self.cwd, "stdout": self.text("stdout"),
                "stderr": self.text("stderr"), "logs": self.text(), "restartCount": 0}


class Sandbox:
    def __init__(self, fake, body):
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        rt = spec.get("runtime") or {}
        self.name = meta["name"]
        self.labels = dict(meta.get("labels") or {})
        self.body = body
        self.status = "DEPLOYING"
        self.state = "RUNNING"
        self.created = time.time()
        self.last_used = self.created
        self.ttl = ttl_secs(rt.get("ttl"))
        self.memory = rt.get("memory", 4096)
        self.image = rt.get("image") or "blaxel/base-image:latest"
        self.envs = {e["name"]: e["value"] for e in rt.get("envs") or []}
        self.box = nsbox.Box(fake.dir, "blaxel")
        self.processes = {}
        self.next_pid = 1000
        self.wakes = 0
        self.url = "http://127.0.0.1:%d/run/%s/sandboxes/%s" % (fake.port, fake.workspace,
                                                               self.name)

    def info(self, fake):
        return {
            "metadata": {"name": self.name, "displayName": self.name, "labels": self.labels,
                         "url": self.url, "workspace": fake.workspace,
                         "createdAt": iso(self.created)},
            "spec": {"region": (self.body.get("spec") or {}).get("region", "us-pdx-1"),
                     "runtime": {"image": self.image, "memory": self.memory,
                                 "ttl": ((self.body.get("spec") or {}).get("runtime") or {})
                                 .get("ttl"),
                                 "envs": [{"name": k, "value": v}
                                          for k, v in self.envs.items()]}},
            "status": self.status,
            "state": self.state,
            "lastUsedAt": iso(self.last_used),
            "expiresIn": (int(self.created + self.ttl - time.time())
                          if self.ttl is not None else None),
        }


class BlaxelFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-blaxel-key"))
        self.workspace = os.environ.get("SBX_FAKE_WORKSPACE", "sbx-test-ws")
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-blaxel-")
        self.sandboxes = {}
        self.uploads = {}           # uploadId -> {"sb", "path", "parts", "permissions"}
        self.config = {"deploy_delay": 0.0, "page_size": 0}
        self.port = 0
        threading.Thread(target=self.reaper, daemon=True).start()

    def error_body(self, status, message, path, method):
        return {"error": message, "code": status, "message": message}

    def find(self, name):
        with self.lock:
            sb = self.sandboxes.get(name)
        if sb is None:
            raise err(404, "sandbox %s not found" % name)
        return sb

    def delete(self, sb, status="TERMINATED"):
        sb.status = status
        sb.box.delete()
        with self.lock:
            if self.sandboxes.get(sb.name) is sb:
                del self.sandboxes[sb.name]

    def standby(self, sb):
        sb.state = "STANDBY"
        sb.box.stop()

    def wake(self, sb):
        if sb.state == "STANDBY":
            sb.box.start()
            sb.state = "RUNNING"
            sb.wakes += 1
        sb.last_used = time.time()

    def reaper(self):
        while True:
            time.sleep(0.2)
            t = time.time()
            with self.lock:
                boxes = list(self.sandboxes.values())
            for sb in boxes:
                if sb.ttl is not None and t >= sb.created + sb.ttl:
                    self.delete(sb)

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


def multipart(ctype, body):
    m = re.search(r'boundary="?([^";]+)"?', ctype or "")
    if not m:
        raise err(400, "multipart body without a boundary")
    sep = b"--" + m.group(1).encode()
    out = {}
    for part in body.split(sep)[1:]:
        if part.startswith(b"--"):
            break
        part = part[2:] if part.startswith(b"\r\n") else part
        head, _, data = part.partition(b"\r\n\r\n")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        n = re.search(rb'name="([^"]*)"', head)
        if n:
            out[n.group(1).decode()] = data
    return out


class BlaxelHandler(fakehttp.Handler):
    auth_header = "X-Blaxel-Authorization"

    def fake_control(self, path):
        f = FAKE
        m = re.fullmatch(r"/_fake/sandbox/([^/]+)(/vanish|/standby)?", path)
        if path == "/_fake/sandboxes" and self.command == "GET":
            with f.lock:
                names = sorted(f.sandboxes)
            return self.send_json(200, names)
        if path == "/_fake/config" and self.command == "POST":
            with f.lock:
                f.config.update(self.json_body())
            return self.send_json(204, None)
        if not m:
            raise Reply(404, {"error": "no such control route: " + path})
        sb = f.find(m.group(1))
        if m.group(2) == "/vanish":
            f.delete(sb)
            return self.send_json(204, None)
        if m.group(2) == "/standby":
            f.standby(sb)
            return self.send_json(204, None)
        self.send_json(200, {"status": sb.status, "state": sb.state, "root": sb.box.root,
                             "running": sb.box.running(), "ttl_s": sb.ttl, "wakes": sb.wakes,
                             "memory": sb.memory, "labels": sb.labels})

    def route(self, path, query):
        f = FAKE
        if self.headers.get("X-Blaxel-Workspace") != f.workspace:
            self.body_bytes()
            raise err(403, "workspace %s is not this key's" % self.headers.get(
                "X-Blaxel-Workspace"))
        if not self.headers.get("Blaxel-Version"):
            self.body_bytes()
            raise err(400, "the Blaxel-Version header is required")
        m = re.fullmatch(r"/run/([^/]+)/sandboxes/([^/]+)(/.*)", path)
        if m:
            if m.group(1) != f.workspace:
                raise err(404, "no such workspace %s" % m.group(1))
            return self.data_plane(m.group(2), m.group(3), query)
        if path.startswith("/v0/"):
            return self.control_plane(path[3:], query)
        raise err(404, "no route for %s %s" % (self.command, path))

    # ------------------------------------------------------------ control plane
    def control_plane(self, path, query):
        f = FAKE
        meth = self.command
        if path == "/sandboxes" and meth == "POST":
            return self.create(query)
        if path == "/sandboxes" and meth == "GET":
            return self.list(query)
        m = re.fullmatch(r"/sandboxes/([^/]+)", path)
        if not m:
            raise err(404, "no route for %s %s" % (meth, path))
        sb = f.find(m.group(1))
        if meth == "GET":
            return self.send_json(200, sb.info(f))
        if meth == "DELETE":
            info = sb.info(f)
            f.delete(sb)
            info["status"] = "DELETING"
            return self.send_json(200, info)
        raise err(405, "method %s not allowed" % meth)

    def create(self, query):
        f = FAKE
        body = self.json_body()
        for k in body:
            if k not in ("metadata", "spec", "status", "lifecycle"):
                raise cerr(400, "INVALID_FIELD", "unknown field %s" % k)
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise cerr(400, "INVALID_NAME", "metadata.name %r is not a valid name" % name, name)
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise cerr(400, "INVALID_LABELS", "metadata.labels must map strings to strings",
                       name)
        rt = (body.get("spec") or {}).get("runtime") or {}
        mem = rt.get("memory", 4096)
        if not isinstance(mem, int) or isinstance(mem, bool) or mem < 1024 or mem % 1024:
            raise cerr(400, "INVALID_MEMORY", "spec.runtime.memory %r must be a multiple of "
                       "1024 MB" % (mem,), name)
        if "ttl" in rt and ttl_secs(rt["ttl"]) is None:
            raise cerr(400, "INVALID_TTL", "spec.runtime.ttl %r is not a duration" % rt["ttl"],
                       name)
        for p in rt.get("ports") or []:
            if p.get("target") in (80, 443, 8080):
                raise cerr(400, "RESERVED_PORT", "port %s is reserved" % p.get("target"), name)
        with f.lock:
            old = f.sandboxes.get(name)
        if old is not None:
            if q1(query, "createIfNotExist") == "true":
                return self.send_json(200, old.info(f))
            raise cerr(409, "SANDBOX_ALREADY_EXISTS", "sandbox %s already exists" % name, name)
        sb = Sandbox(f, body)
        try:
            sb.box.start()
        except OSError as e:
            sb.box.delete()
            raise cerr(500, "INTERNAL", "sandbox failed to start: %s" % e, name)
        with f.lock:
            f.sandboxes[name] = sb
        delay = float(f.config.get("deploy_delay", 0))

        def deployed():
            if sb.status == "DEPLOYING":
                sb.status = "DEPLOYED"
        if delay > 0:
            tm = threading.Timer(delay, deployed)
            tm.daemon = True
            tm.start()
        else:
            deployed()
        info = sb.info(f)
        info["status"] = "DEPLOYING" if delay > 0 else info["status"]
        self.send_json(200, info)

    def list(self, query):
        f = FAKE
        limit = int(q1(query, "limit", "0") or 0) or 100
        if f.config.get("page_size"):
            limit = min(limit, int(f.config["page_size"]))
        cursor = int(q1(query, "cursor", "0") or 0)
        with f.lock:
            items = sorted(f.sandboxes.values(), key=lambda s: (s.created, s.name))
        page = items[cursor:cursor + limit]
        nxt = str(cursor + limit) if cursor + limit < len(items) else None
        self.send_json(200, {"data": [s.info(f) for s in page],
                             "meta": {"nextCursor": nxt, "hasMore": nxt is not None}})

    # ------------------------------------------------------------ data plane
    def data_plane(self, name, path, query):
        f = FAKE
        with f.lock:
            sb = f.sandboxes.get(name)
        if sb is None or sb.status != "DEPLOYED":
            self.body_bytes()
            raise err(404 if sb is None else 503, "sandbox %s is %s" % (
                name, "not found" if sb is None else sb.status))
        f.wake(sb)
        meth = self.command
        if path == "/process" and meth == "POST":
            return self.run(sb, self.json_body())
        if path == "/process" and meth == "GET":
            return self.send_json(200, [p.info() for p in list(sb.processes.values())])
        m = re.fullmatch(r"/process/([^/]+)(/kill|/logs)?", path)
        if m:
            key = m.group(1)
            p = next((q for q in list(sb.processes.values())
                      if str(q.pid) == key or q.name == key), None)
            if p is None:
                raise err(404, "process %s not found" % key)
            if m.group(2) == "/logs" and meth == "GET":
                return self.send_json(200, {"logs": p.text(), "stdout": p.text("stdout"),
                                            "stderr": p.text("stderr")})
            if meth == "GET" and m.group(2) is None:
                return self.send_json(200, p.info())
            if meth == "DELETE":
                if p.completed is None:
                    sb.box.kill_command(p.popen, signal.SIGKILL if m.group(2) else
                                        signal.SIGTERM)
                return self.send_json(200, {"message": "process %s stopped" % key})
        if path.startswith("/filesystem-multipart/"):
            return self.multipart_upload(sb, path[len("/filesystem-multipart"):], query)
        if path == "/filesystem" or path.startswith("/filesystem/"):
            fpath = urllib.parse.unquote(path[len("/filesystem"):]) or "/"
            return self.files(sb, fpath, query)
        raise err(404, "no route for %s %s" % (meth, path))

    @staticmethod
    def host(sb, p):
        if ".." in p.split("/"):
            raise err(403, "path must not contain ..")
        host = sb.box.host_path(p)
        if host is None:
            raise err(403, "path leaves the sandbox: %s" % p)
        return host

    def files(self, sb, fpath, query):
        meth = self.command
        host = self.host(sb, fpath)
        if meth == "GET":
            if not os.path.lexists(host):
                raise err(404, "no such file or directory: %s" % fpath)
            if os.path.isdir(host):
                files, subs = [], []
                for name in sorted(os.listdir(host)):
                    hp = os.path.join(host, name)
                    st = os.lstat(hp)
                    e = {"name": name, "path": os.path.join(fpath, name),
                         "permissions": "%o" % (st.st_mode & 0o7777), "owner": "root",
                         "group": "root", "lastModified": iso(st.st_mtime)}
                    if os.path.isdir(hp) and not os.path.islink(hp):
                        subs.append(e)
                    else:
                        e["size"] = st.st_size
                        files.append(e)
                return self.send_json(200, {"name": os.path.basename(fpath), "path": fpath,
                                            "files": files, "subdirectories": subs})
            with open(host, "rb") as fh:
                data = fh.read()
            if "application/octet-stream" in (self.headers.get("Accept") or ""):
                return self.send_bytes(200, data)
            st = os.stat(host)
            return self.send_json(200, {"name": os.path.basename(fpath), "path": fpath,
                                        "size": len(data), "permissions": "%o" % (
                                            st.st_mode & 0o7777),
                                        "content": data.decode("utf-8", "replace")})
        if meth == "PUT":
            ctype = self.headers.get("Content-Type") or ""
            body = self.body_bytes()
            if len(body) > PART_MAX + 65536:
                raise err(413, "request body over 5 MB: use /filesystem-multipart")
            if ctype.startswith("multipart/form-data"):
                parts = multipart(ctype, body)
                if "file" not in parts:
                    raise err(400, "multipart body without a file part")
                if len(parts["file"]) > PART_MAX:
                    raise err(413, "file over 5 MB: use /filesystem-multipart")
                return self.put_file(host, fpath, parts["file"],
                                     parts.get("permissions", b"").decode() or None)
            req = json.loads(body or b"{}")
            if req.get("isDirectory"):
                if os.path.exists(host) and not os.path.isdir(host):
                    raise err(400, "%s exists and is not a directory" % fpath)
                os.makedirs(host, exist_ok=True)
                if req.get("permissions"):
                    os.chmod(host, int(req["permissions"], 8))
                return self.send_json(200, {"message": "directory created", "path": fpath})
            return self.put_file(host, fpath, (req.get("content") or "").encode(),
                                 req.get("permissions"))
        if meth == "DELETE":
            if not os.path.lexists(host):
                raise err(404, "no such file or directory: %s" % fpath)
            if os.path.isdir(host) and not os.path.islink(host):
                if q1(query, "recursive") != "true" and os.listdir(host):
                    raise err(400, "directory %s is not empty" % fpath)
                shutil.rmtree(host)
            else:
                os.unlink(host)
            return self.send_json(200, {"message": "deleted", "path": fpath})
        raise err(405, "method %s not allowed" % meth)

    def put_file(self, host, fpath, data, permissions):
        if os.path.isdir(host):
            raise err(400, "%s is a directory" % fpath)
        os.makedirs(os.path.dirname(host), exist_ok=True)
        with open(host, "wb") as fh:
            fh.write(data)
        if permissions:
            try:
                os.chmod(host, int(permissions, 8))
            except ValueError:
                raise err(400, "permissions %r are not octal" % permissions)
        return self.send_json(200, {"message": "file written", "path": fpath})

    def multipart_upload(self, sb, rest, query):
        f = FAKE
        m = re.fullmatch(r"/initiate(/.*)", rest)
        if m and self.command == "POST":
            fpath = urllib.parse.unquote(m.group(1))
            host = self.host(sb, fpath)
            req = self.json_body()
            uid = uuid.uuid4().hex
            with f.lock:
                f.uploads[uid] = {"sb": sb, "host": host, "path": fpath, "parts": {},
                                  "permissions": req.get("permissions")}
            return self.send_json(200, {"uploadId": uid, "path": fpath})
        m = re.fullmatch(r"/([0-9a-f]+)/(part|complete|abort)", rest)
        with f.lock:
            up = f.uploads.get(m.group(1)) if m else None
        if up is None or up["sb"] is not sb:
            self.body_bytes()
            raise err(404, "upload not found")
        if m.group(2) == "part" and self.command == "PUT":
            n = int(q1(query, "partNumber", "0") or 0)
            parts = multipart(self.headers.get("Content-Type"), self.body_bytes())
            if "file" not in parts:
                raise err(400, "part %d: multipart body without a file part" % n)
            data = parts["file"]
            if n < 1 or n > 10000 or len(data) > PART_MAX:
                raise err(400, "part %d: parts are numbered 1..10000, at most 5 MB" % n)
            etag = hashlib.md5(data).hexdigest()
            up["parts"][n] = (data, etag)
            return self.send_json(200, {"partNumber": n, "etag": etag, "size": len(data)})
        if m.group(2) == "abort" and self.command == "DELETE":
            with f.lock:
                f.uploads.pop(m.group(1), None)
            return self.send_json(200, {"message": "Multipart upload aborted successfully"})
        if m.group(2) == "complete" and self.command == "POST":
            req = self.json_body()
            got = [(p.get("partNumber"), p.get("etag")) for p in req.get("parts") or []]
            want = [(n, up["parts"][n][1]) for n in sorted(up["parts"])]
            if got != want:
                raise err(400, "parts %r do not match the uploaded %r" % (got, want))
            with f.lock:
                f.uploads.pop(m.group(1), None)
            return self.put_file(up["host"], up["path"],
                                 b"".join(up["parts"][n][0] for n, _ in got), up["permissions"])
        raise err(405, "method not allowed")

    # ------------------------------------------------------------ processes
    def start(self, sb, body):
        cmd = body.get("command")
        if not isinstance(cmd, str) or not cmd:
            raise err(422, "command is required")
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise err(422, "env must be an object of strings")
        name = body.get("name")
        if name and any(p.name == name and p.completed is None
                        for p in sb.processes.values()):
            raise err(400, "a process named %s is running" % name)
        cwd = body.get("workingDir") or "/"
        host = sb.box.host_path(cwd)
        if host is None or not os.path.isdir(host):
            raise err(400, "workingDir %s does not exist" % cwd)
        full = dict(sb.envs)
        full.update(env)
        argv = ["/bin/sh", "-c", cmd]
        if "PATH" in full:
            argv = ["/usr/bin/env", "PATH=" + full.pop("PATH")] + argv
        sb.next_pid += 1
        p = Process(sb.next_pid, name or "proc-%d" % sb.next_pid, cmd, cwd)
        try:
            p.popen = sb.box.popen(argv, env=full, cwd=cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except nsbox.SandboxGone:
            raise err(404, "sandbox %s not found" % sb.name)
        sb.processes[p.pid] = p

        def pump(stream, which):
            while True:
                data = stream.read1(65536)
                if not data:
                    break
                with p.cond:
                    p.chunks.append((which, data))
                    p.cond.notify_all()
        threads = [threading.Thread(target=pump, args=(s, w), daemon=True)
                   for s, w in ((p.popen.stdout, "stdout"), (p.popen.stderr, "stderr"))]
        for t in threads:
            t.start()

        def reap():
            for t in threads:
                t.join()
            code = p.popen.wait()
            sb.box.forget(p.popen)
            with p.cond:
                p.exit_code = code if code >= 0 else 128 - code
                p.status = "killed" if code < 0 else ("completed" if code == 0 else "failed")
                p.completed = time.time()
                p.cond.notify_all()
        threading.Thread(target=reap, daemon=True).start()
        return p

    def run(self, sb, body):
        f = FAKE
        timeout = body.get("timeout") or 0
        p = self.start(sb, body)
        deadline = time.time() + timeout if timeout else None
        stream = "text/event-stream" in (self.headers.get("Accept") or "")
        if not body.get("waitForCompletion") and not stream:
            return self.send_json(200, p.info())
        if not stream:
            with p.cond:
                while p.completed is None:
                    p.cond.wait(0.2)
                    if deadline and time.time() >= deadline and p.completed is None:
                        sb.box.kill_command(p.popen, signal.SIGKILL)
                        deadline = None
            return self.send_json(200, p.info())
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200

        def line(obj):
            raw = json.dumps(obj).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            self.wfile.flush()
        with f.lock:
            drop = f.config.pop("stream_drop", None)
        try:
            sent = 0
            quiet = time.time()
            while True:
                with p.cond:
                    if sent == len(p.chunks) and p.completed is None:
                        p.cond.wait(0.2)
                    new = p.chunks[sent:]
                    sent += len(new)
                    ended = p.completed is not None and sent == len(p.chunks)
                for (which, data) in new:
                    line({"type": which, "data": data.decode("utf-8", "replace")})
                    quiet = time.time()
                    if drop:
                        # The connection is lost mid-answer: no result, no
                        # end of the chunked body; the process runs on.
                        self.close_connection = True
                        return
                if ended:
                    break
                if deadline and time.time() >= deadline:
                    sb.box.kill_command(p.popen, signal.SIGKILL)
                    deadline = None
                if time.time() - quiet >= KEEPALIVE_SECS:
                    line({"type": "keepalive", "data": ""})
                    quiet = time.time()
            with f.lock:
                fail = f.config.pop("stream_error", None)
            if fail:
                line({"type": "error", "data": fail})
            else:
                line({"type": "result", "data": json.dumps(p.info())})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def main():
    global FAKE
    FAKE = BlaxelFake()
    fakehttp.serve(FAKE, BlaxelHandler)


if __name__ == "__main__":
    main()
