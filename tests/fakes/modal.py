"""The Modal contract fake: a gRPC server from the plugin's own subset of
Modal's protos (plugins/cloud/modal/*.proto, compiled here with protoc
--python_out into a temporary directory), on Debian's python3-grpcio.

Modal has no REST API (contract section 5): the control plane is the gRPC
service modal.client.ModalClient, and commands go to a per-task "command
router" (modal.task_command_router.TaskCommandRouter) on the URL that
TaskGetCommandRouterAccess names, with the JWT it hands out. This fake
serves:

- the control RPCs on one port: AuthTokenGet (a JWT whose exp is its
  lifetime from now), AppGetOrCreate, ImageGetOrCreate,
  ImageJoinStreaming, SecretGetOrCreate (an env dict the sandbox or one
  command gets), SandboxCreate, SandboxGetTaskId, SandboxWait,
  SandboxTerminate, SandboxList (by tags, before_timestamp, each
  SandboxInfo with its tags), SandboxTagsGet, SandboxGetTunnels,
  SandboxSnapshotFs (the sandbox's directory copied into an image, which
  SandboxCreate takes back by image_id) and TaskGetCommandRouterAccess.
  Every call must carry the metadata x-modal-token-id (any non-empty value)
  and x-modal-token-secret equal to the fake's key (SBX_FAKE_API_KEY), and
  every unary call but AuthTokenGet an x-modal-auth-token that AuthTokenGet
  handed out and has not expired (go/client.go's authTokenInterceptor),
  else UNAUTHENTICATED; an unknown sandbox is NOT_FOUND.
- Resources: memory_mb_max is the sandbox's memory limit, a cgroup v1
  memory cgroup its commands join, seen in it read-only at
  /sys/fs/cgroup/memory with its oom_kill counter (as a container sees its
  own); without a writable memory controller the limit is not enforced.
- Tunnels: each port of the definition's open_ports gets a TLS listener on
  127.0.0.1 (a self-signed certificate for 127.0.0.1, made with openssl at
  the first) whose connections are carried to that port on 127.0.0.1, where
  a sandbox with a network (allow_internet) listens; SandboxGetTunnels
  answers TunnelData host 127.0.0.1, the listener's port, container_port.
- The same two services over TLS too (HTTP/2 by ALPN, that certificate),
  on the ports printed as "GRPCS <n>" and "ROUTERS <n>"; GET /_fake/tls_ca
  gives the certificate (PEM) to trust. A client there re-uses its
  connections, which the log's "peer" shows.
- the command router on a second port: TaskExecStart (idempotent by the
  client's exec_id), TaskExecStdioRead (a server stream of the command's
  stdout or stderr from an offset, sent as it arrives), TaskExecStdinWrite
  (by offset: bytes already written are not written again; answered once
  they are in the command's stdin, its output pumped meanwhile) and
  TaskExecWait (code, or signal). A TaskExecStart with pty_info.enabled
  runs the command on a real pseudo-terminal of winsz_rows x winsz_cols
  (leading a session of its own, the terminal its controlling terminal and
  its stdin, stdout and stderr): the terminal's output is the stdout
  stream (stderr's ends empty), stdin bytes are typed at it, and an eof
  leaves it as it is (a terminal has no end of input but its ^D; it is
  closed when the command ends). Each checks "authorization: Bearer JWT"
  against the JWTs the fake handed out for that task and not expired, else
  UNAUTHENTICATED.

Sandboxes are real (tests/fakes/nsbox.py): a directory that is "/" for real
processes. timeout_secs ends a sandbox (GenericResult TIMEOUT).

The HTTP side (tests/fakes/fakehttp.py) prints "PORT <n>" and serves the
request log and the fault rules (/_fake/log, /_fake/faults) on that port;
the gRPC ports are printed before it as "GRPC <n>" and "ROUTER <n>". Every
RPC is a log entry {"method": "POST", "path": "/SERVICE/METHOD", "status":
its gRPC code, "body": the request in protobuf text form, "auth": the
metadata, secrets redacted, "timeout_s": the seconds its grpc-timeout left
when it arrived, or null, "peer": the client's address and port, which
names its connection}. Fault rules match that path; their actions
here: "status" answers gRPC code "code" (default 8, RESOURCE_EXHAUSTED)
with "message"; "pass" waits "delay" seconds and then serves the call (a
create answered after the client's deadline); "cut" (TaskExecStdioRead)
ends the stream abruptly, after "bytes" bytes of output (default 1); a
TaskExecStdioRead is matched as ".../TaskExecStdioRead#stdout" or
"#stderr". Test
routes: POST /_fake/auth {"ttl": SECONDS} sets the lifetime of auth tokens
handed out from then on; POST /_fake/jwt {"ttl": SECONDS} sets the lifetime of JWTs handed
out from then on and POST /_fake/jwt/expire expires every JWT handed out
so far; POST /_fake/router_url {"url": URL} makes TaskGetCommandRouterAccess
name URL (a proxy in front of the router; "" for the router itself);
GET /_fake/sandboxes lists the running sandboxes' ids; POST /_fake/sandboxes
{"tags": {NAME: VALUE}} makes a sandbox as another client of the workspace
would (a default image, those tags), answering {"sandbox_id"};
GET /_fake/sandbox/{id} shows one sandbox ({"state", "task_id",
"tags", "execs", "workdir", "resources", "tunnels"}); POST /_fake/sandbox/{id}/vanish drops it as
the provider would after an outage (its processes end, NOT_FOUND from then
on).
"""

import base64
import faulthandler
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent import futures

import fakehttp
import nsbox

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "plugins", "cloud", "modal")

_gen = tempfile.mkdtemp(prefix="sbx-fake-modal-pb-")
subprocess.run(["protoc", "--python_out=" + _gen, "-I", PROTO_DIR,
                os.path.join(PROTO_DIR, "api.proto"),
                os.path.join(PROTO_DIR, "task_command_router.proto")], check=True)
sys.path.insert(0, _gen)
import api_pb2 as api  # noqa: E402
import task_command_router_pb2 as tcr  # noqa: E402
shutil.rmtree(_gen, ignore_errors=True)

import grpc  # noqa: E402
from google.protobuf import text_format  # noqa: E402

GR = api.GenericResult
CTRL = "modal.client.ModalClient"
ROUTER = "modal.task_command_router.TaskCommandRouter"
CHUNK = 65536


class Abort(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class Exec:
    def __init__(self, proc, master=None):
        self.proc = proc
        self.master = master        # a terminal's master descriptor, or None
        self.tty = master is not None
        self.out = [bytearray(), bytearray()]
        self.eof = [False, self.tty]     # a terminal has no stderr of its own
        self.code = None        # returncode once it ended
        self.done = False       # ended, and its output read (or given up on)
        self.stdin_off = 0
        self.stdin_closed = False
        # stdin has a lock of its own: a write blocks until the command has
        # taken its bytes, and the command takes them only while its output
        # is pumped, which needs cond.
        self.stdin_lock = threading.Lock()
        self.cond = threading.Condition()

    def sink(self, i):
        def emit(data):
            with self.cond:
                self.out[i] += data
                self.cond.notify_all()
        return emit

    def at_eof(self, i):
        def end():
            with self.cond:
                self.eof[i] = True
                self.cond.notify_all()
        return end

    def pty_write(self, data):
        with self.cond:
            if self.master is not None:
                os.write(self.master, data)

    def reap(self, pumps=()):
        """The streams end when the command ended: what it wrote is read to
        the end (nsbox.OutputPump), and a background child that still holds
        the pipes does not hold the streams open. A terminal is closed
        then."""
        rc = self.proc.wait()
        for t in pumps:
            t.finish()
        with self.cond:
            self.eof = [True, True]
            if self.tty:
                os.close(self.master)
                self.master = None
            self.code = rc
            self.done = True
            self.cond.notify_all()


def _pipe(a, b):
    try:
        while True:
            data = a.recv(CHUNK)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Tunnel:
    """A TLS listener on 127.0.0.1 whose connections go on to @port of
    127.0.0.1 in the clear."""

    def __init__(self, tls, port):
        self.port = port
        self.tls = tls
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.host_port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.carry, args=(c,), daemon=True).start()

    def carry(self, c):
        try:
            c = self.tls.wrap_socket(c, server_side=True)
            t = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            t.settimeout(None)
        except OSError:
            c.close()
            return
        threading.Thread(target=_pipe, args=(t, c), daemon=True).start()
        _pipe(c, t)

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class Sandbox:
    def __init__(self, fake, req, sid):
        d = req.definition
        self.id = sid
        self.task_id = "ta-" + sid[3:]
        self.app_id = req.app_id
        self.tags = {t.tag_name: t.tag_value for t in req.tags}
        self.created = time.time()
        self.timeout = d.timeout_secs or 300
        self.workdir = d.workdir or None
        self.env = {}
        for s in d.secret_ids:
            self.env.update(fake.secret(s))
        self.state = "running"
        self.result = None
        self.execs = {}
        self.box = nsbox.Box(fake.dir, "modal")
        r = d.resources
        self.resources = {"milli_cpu": r.milli_cpu, "milli_cpu_max": r.milli_cpu_max,
                          "memory_mb": r.memory_mb, "memory_mb_max": r.memory_mb_max,
                          "ephemeral_disk_mb": r.ephemeral_disk_mb,
                          "gpu_type": r.gpu_config.gpu_type, "gpu_count": r.gpu_config.count}
        self.cgroup = None
        if r.memory_mb_max:
            self.cgroup = nsbox.make_memcg("sbx-fake-modal-" + sid, r.memory_mb_max << 20)
            if self.cgroup:
                nsbox.bind_memcg(self.box, self.cgroup)
        self.tunnels = [Tunnel(fake.tls(), p.port) for p in d.open_ports.ports]
        img = fake.images.get(d.image_id)
        if img and img.get("dir"):
            _copy_tree(img["dir"], self.box.root)
        blocked = d.network_access.network_access_type == api.NetworkAccess.BLOCKED
        if self.workdir:
            p = self.box.host_path(self.workdir)
            if p:
                os.makedirs(p, exist_ok=True)
        self.box.start(allow_internet=not blocked)

    def end(self, status, exception=""):
        if self.state != "running":
            return
        self.state = "terminated"
        self.result = GR(status=status, exception=exception)
        for t in self.tunnels:
            t.close()
        self.box.delete()
        if self.cgroup:
            nsbox.drop_memcg(self.cgroup)
            self.cgroup = None


def _remaining(ctx):
    """The seconds the call's grpc-timeout leaves, or None when it has none
    (grpcio then gives a huge number)."""
    t = ctx.time_remaining()
    return t if t is not None and t < 1e9 else None


def _copy_tree(src, dst):
    for name in os.listdir(src):
        s, t = os.path.join(src, name), os.path.join(dst, name)
        if os.path.islink(s):
            if not os.path.lexists(t):
                os.symlink(os.readlink(s), t)
        elif os.path.isdir(s):
            shutil.copytree(s, t, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(s, t)


class ModalFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-modal-secret"))
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-modal-")
        self.apps = {}
        self.images = {}
        self.secrets = {}
        self.jwts = {}          # jwt -> [task_id, expires_at]
        self.jwt_ttl = 3600.0
        self.router_port = 0
        self.router_url = None  # the URL handed out instead of the router's own
        self.auth = {}          # auth token -> expires_at
        self.auth_ttl = 3600.0
        self._tls = None
        self.seq = 0
        self.start_reaper(self.expire)

    def next_id(self, prefix):
        with self.lock:
            self.seq += 1
            return "%s-%s%04d" % (prefix, uuid.uuid4().hex[:12], self.seq)

    def tls(self):
        """The tunnels' TLS context: a self-signed certificate for
        127.0.0.1, made once."""
        with self.lock:
            if self._tls is None:
                key = os.path.join(self.dir, "tunnel.key")
                crt = os.path.join(self.dir, "tunnel.crt")
                subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:prime256v1", "-nodes",
                                "-keyout", key, "-out", crt, "-days", "1",
                                "-subj", "/CN=127.0.0.1",
                                "-addext", "subjectAltName=IP:127.0.0.1"],
                               check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(crt, key)
                with open(key, "rb") as fh:
                    self.tls_key = fh.read()
                with open(crt, "rb") as fh:
                    self.tls_crt = fh.read()
                self._tls = ctx
            return self._tls

    def secret(self, sid):
        with self.lock:
            return dict(self.secrets.get(sid, {}))

    def expire(self, sb, now):
        if sb.state == "running" and now >= sb.created + sb.timeout:
            sb.end(GR.GENERIC_STATUS_TIMEOUT, "sandbox timed out")

    def find(self, sid):
        with self.lock:
            sb = self.sandboxes.get(sid)
        if sb is None:
            raise Abort(grpc.StatusCode.NOT_FOUND, "Sandbox %s not found" % sid)
        return sb

    def by_task(self, task_id):
        with self.lock:
            for sb in self.sandboxes.values():
                if sb.task_id == task_id:
                    return sb
        raise Abort(grpc.StatusCode.NOT_FOUND, "Task %s not found" % task_id)

    # ------------------------------------------------------------ calls
    def call(self, service, name, req, ctx, fn):
        md = dict(ctx.invocation_metadata())
        entry = {"time": time.time(), "method": "POST", "path": "/%s/%s" % (service, name),
                 "query": {}, "body": text_format.MessageToString(req, as_utf8=True),
                 "auth": {k: ("<redacted>" if k in ("x-modal-token-secret", "authorization",
                                                    "x-modal-auth-token")
                              else v) for k, v in md.items()
                          if k.startswith("x-modal") or k == "authorization"},
                 "timeout_s": _remaining(ctx), "peer": ctx.peer(), "status": None}
        self.record(entry)
        try:
            if service == CTRL:
                if not md.get("x-modal-token-id") or \
                        md.get("x-modal-token-secret") != self.api_key:
                    raise Abort(grpc.StatusCode.UNAUTHENTICATED, "Invalid token id or secret")
                if name not in ("AuthTokenGet", "ImageJoinStreaming"):
                    with self.lock:
                        exp = self.auth.get(md.get("x-modal-auth-token", ""))
                    entry["auth_token"] = exp is not None
                    if exp is None or time.time() >= exp:
                        raise Abort(grpc.StatusCode.UNAUTHENTICATED,
                                    "missing or expired x-modal-auth-token")
            fpath = entry["path"]
            if name == "TaskExecStdioRead":
                fpath += "#stderr" if req.file_descriptor == \
                    tcr.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR else "#stdout"
            rule = self.take_fault("POST", fpath, [])
            if rule is not None:
                entry["fault"] = True
                act = rule.get("action", "status")
                if act == "pass":
                    time.sleep(float(rule.get("delay", 0)))
                elif act == "status":
                    if rule.get("delay"):
                        time.sleep(float(rule["delay"]))
                    code = int(rule.get("code", 8))
                    sc = [c for c in grpc.StatusCode if c.value[0] == code][0]
                    raise Abort(sc, rule.get("message", "Fault injected (code %d)" % code))
                elif act == "cut":
                    ctx.sbx_cut = int(rule.get("bytes", 1))
            out = fn(req, ctx, md)
            entry["status"] = 0
            return out
        except Abort as a:
            entry["status"] = a.code.value[0]
            ctx.abort(a.code, a.message)
        finally:
            self.finish(entry)

    def stream(self, service, name, req, ctx, fn):
        """As call(), for a server stream: @fn yields messages."""
        gen = self.call(service, name, req, ctx, fn)
        return gen

    def check_jwt(self, md, task_id):
        auth = md.get("authorization", "")
        jwt = auth[7:] if auth.startswith("Bearer ") else ""
        with self.lock:
            rec = self.jwts.get(jwt)
        if rec is None or rec[0] != task_id:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, "invalid JWT for task %s" % task_id)
        if time.time() >= rec[1]:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, "JWT expired")

    # ------------------------------------------------------------ control
    def AuthTokenGet(self, req, ctx, md):
        def b64(d):
            return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
        with self.lock:
            exp = int(time.time() + self.auth_ttl)
            tok = "%s.%s.%s" % (b64({"alg": "none", "typ": "JWT"}),
                                b64({"exp": exp, "jti": uuid.uuid4().hex}), "fake")
            self.auth[tok] = exp
        return api.AuthTokenGetResponse(token=tok)

    def AppGetOrCreate(self, req, ctx, md):
        name = req.app_name or "default"
        with self.lock:
            if name not in self.apps:
                self.apps[name] = "ap-" + uuid.uuid4().hex[:20]
            return api.AppGetOrCreateResponse(app_id=self.apps[name])

    def ImageGetOrCreate(self, req, ctx, md):
        cmds = list(req.image.dockerfile_commands)
        if not cmds or not cmds[0].startswith("FROM "):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "image has no FROM line")
        iid = self.next_id("im")
        with self.lock:
            self.images[iid] = {"dockerfile": cmds}
        return api.ImageGetOrCreateResponse(image_id=iid)

    def ImageJoinStreaming(self, req, ctx, md):
        with self.lock:
            ok = req.image_id in self.images
        if not ok:
            raise Abort(grpc.StatusCode.NOT_FOUND, "Image %s not found" % req.image_id)
        return [api.ImageJoinStreamingResponse(result=GR(status=GR.GENERIC_STATUS_SUCCESS),
                                               entry_id="1", eof=True)]

    def SecretGetOrCreate(self, req, ctx, md):
        sid = self.next_id("st")
        with self.lock:
            self.secrets[sid] = dict(req.env_dict)
        return api.SecretGetOrCreateResponse(secret_id=sid)

    def SandboxCreate(self, req, ctx, md):
        d = req.definition
        with self.lock:
            img = self.images.get(d.image_id)
        if img is None:
            raise Abort(grpc.StatusCode.NOT_FOUND, "Image %s not found" % d.image_id)
        for s in d.secret_ids:
            with self.lock:
                if s not in self.secrets:
                    raise Abort(grpc.StatusCode.NOT_FOUND, "Secret %s not found" % s)
        sid = self.next_id("sb")
        sb = Sandbox(self, req, sid)
        with self.lock:
            self.sandboxes[sid] = sb
        return api.SandboxCreateResponse(sandbox_id=sid)

    def SandboxGetTaskId(self, req, ctx, md):
        sb = self.find(req.sandbox_id)
        if sb.state != "running":
            return api.SandboxGetTaskIdResponse(task_result=sb.result)
        return api.SandboxGetTaskIdResponse(task_id=sb.task_id)

    def SandboxWait(self, req, ctx, md):
        sb = self.find(req.sandbox_id)
        end = time.time() + max(0.0, min(req.timeout, 55.0))
        while sb.state == "running" and time.time() < end:
            time.sleep(0.05)
        if sb.state == "running":
            return api.SandboxWaitResponse()
        return api.SandboxWaitResponse(result=sb.result)

    def SandboxTerminate(self, req, ctx, md):
        sb = self.find(req.sandbox_id)
        sb.end(GR.GENERIC_STATUS_TERMINATED)
        return api.SandboxTerminateResponse(existing_result=sb.result)

    def SandboxList(self, req, ctx, md):
        want = {t.tag_name: t.tag_value for t in req.tags}
        out = api.SandboxListResponse()
        for sb in self.boxes():
            if req.app_id and sb.app_id != req.app_id:
                continue
            if sb.state != "running" and not req.include_finished:
                continue
            if any(sb.tags.get(k) != v for k, v in want.items()):
                continue
            if req.before_timestamp and sb.created >= req.before_timestamp:
                continue
            si = out.sandboxes.add(id=sb.id, created_at=sb.created)
            for k, v in sb.tags.items():
                si.tags.add(tag_name=k, tag_value=v)
        return out

    def SandboxTagsGet(self, req, ctx, md):
        sb = self.find(req.sandbox_id)
        out = api.SandboxTagsGetResponse()
        for k, v in sb.tags.items():
            out.tags.add(tag_name=k, tag_value=v)
        return out

    def SandboxGetTunnels(self, req, ctx, md):
        sb = self.find(req.sandbox_id)
        out = api.SandboxGetTunnelsResponse()
        for t in sb.tunnels:
            out.tunnels.add(host="127.0.0.1", port=t.host_port, container_port=t.port)
        return out

    def SandboxSnapshotFs(self, req, ctx, md):
        sb = self.find(req.sandbox_id)
        if sb.state != "running":
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, "Sandbox %s has ended" % sb.id)
        iid = self.next_id("im")
        dst = os.path.join(self.dir, "images", iid)
        os.makedirs(dst)
        for name in ("work", "tmp", "root", "home", "opt", "srv", "var"):
            s = os.path.join(sb.box.root, name)
            if os.path.isdir(s) and not os.path.islink(s):
                shutil.copytree(s, os.path.join(dst, name), symlinks=True,
                                ignore_dangling_symlinks=True)
        with self.lock:
            self.images[iid] = {"dir": dst}
        return api.SandboxSnapshotFsResponse(image_id=iid,
                                             result=GR(status=GR.GENERIC_STATUS_SUCCESS))

    def TaskGetCommandRouterAccess(self, req, ctx, md):
        sb = self.by_task(req.task_id)
        if sb.state != "running":
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, "Task %s has ended" % req.task_id)
        jwt = "fakejwt." + uuid.uuid4().hex
        with self.lock:
            self.jwts[jwt] = [req.task_id, time.time() + self.jwt_ttl]
        with self.lock:
            url = self.router_url or "http://127.0.0.1:%d" % self.router_port
        return api.TaskGetCommandRouterAccessResponse(jwt=jwt, url=url)

    # ------------------------------------------------------------ router
    def router_sandbox(self, req, md):
        self.check_jwt(md, req.task_id)
        sb = self.by_task(req.task_id)
        if sb.state != "running":
            raise Abort(grpc.StatusCode.NOT_FOUND, "Task %s has ended" % req.task_id)
        return sb

    def TaskExecStart(self, req, ctx, md):
        sb = self.router_sandbox(req, md)
        with self.lock:
            if req.exec_id in sb.execs:
                return tcr.TaskExecStartResponse()
        if not req.command_args:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "no command")
        env = dict(sb.env)
        for s in req.secret_ids:
            env.update(self.secret(s))
        cwd = req.workdir or sb.workdir or "/"
        hp = sb.box.host_path(cwd)
        if not hp or not os.path.isdir(hp):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "workdir %s does not exist" % cwd)
        argv = list(req.command_args)
        if "PATH" in env:
            # The command's PATH names sandbox directories: the host looks
            # its wrapper (nsenter) up in its own, and env(1) sets the
            # command's inside.
            argv = ["/usr/bin/env", "PATH=" + env.pop("PATH")] + argv
        pty = req.pty_info if req.HasField("pty_info") and req.pty_info.enabled else None
        if pty is not None and not (0 < pty.winsz_rows < 65536 and 0 < pty.winsz_cols < 65536):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "pty_info needs winsz_rows and "
                        "winsz_cols in [1, 65535], not %dx%d"
                        % (pty.winsz_rows, pty.winsz_cols))
        try:
            if pty is not None:
                proc, master = sb.box.popen_pty(argv, pty.winsz_rows, pty.winsz_cols,
                                                env=env, cwd=cwd)
            else:
                proc = sb.box.popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE,
                                    cgroup=sb.cgroup)
                master = None
        except nsbox.SandboxGone:
            raise Abort(grpc.StatusCode.NOT_FOUND, "Task %s has ended" % req.task_id)
        ex = Exec(proc, master)
        with self.lock:
            sb.execs[req.exec_id] = ex
        if ex.tty:
            pumps = [nsbox.OutputPump(master, ex.sink(0), ex.at_eof(0))]
        else:
            pumps = [nsbox.OutputPump(f, ex.sink(i), ex.at_eof(i), close=True)
                     for i, f in enumerate((proc.stdout, proc.stderr))]
        threading.Thread(target=ex.reap, args=(pumps,), daemon=True).start()
        return tcr.TaskExecStartResponse()

    def find_exec(self, sb, exec_id):
        with self.lock:
            ex = sb.execs.get(exec_id)
        if ex is None:
            raise Abort(grpc.StatusCode.NOT_FOUND, "exec %s not found" % exec_id)
        return ex

    def TaskExecStdioRead(self, req, ctx, md):
        sb = self.router_sandbox(req, md)
        ex = self.find_exec(sb, req.exec_id)
        i = 1 if req.file_descriptor == tcr.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR else 0
        cut = getattr(ctx, "sbx_cut", None)
        return self._read(ex, i, req.offset, cut, ctx)

    def _read(self, ex, i, off, cut, ctx):
        sent = 0
        while ctx.is_active():
            with ex.cond:
                while len(ex.out[i]) <= off and not ex.eof[i] and not ex.done \
                        and ctx.is_active():
                    ex.cond.wait(0.5)
                data = bytes(ex.out[i][off:off + CHUNK])
                done = (ex.eof[i] or ex.done) and len(ex.out[i]) <= off
            if done:
                return
            if not data:
                continue
            if cut is not None and sent + len(data) >= cut:
                data = data[:max(0, cut - sent)]
                if data:
                    yield tcr.TaskExecStdioReadResponse(data=data)
                time.sleep(0.05)
                ctx.cancel()
                return
            off += len(data)
            sent += len(data)
            yield tcr.TaskExecStdioReadResponse(data=data)

    def TaskExecStdinWrite(self, req, ctx, md):
        sb = self.router_sandbox(req, md)
        ex = self.find_exec(sb, req.exec_id)
        with ex.stdin_lock:
            if ex.stdin_closed:
                return tcr.TaskExecStdinWriteResponse()
            data = req.data
            if req.offset > ex.stdin_off:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "stdin offset %d past %d"
                            % (req.offset, ex.stdin_off))
            data = data[ex.stdin_off - req.offset:]
            try:
                if data and ex.tty:
                    ex.pty_write(data)
                elif data:
                    ex.proc.stdin.write(data)
                    ex.proc.stdin.flush()
                ex.stdin_off += len(data)
                if req.eof:
                    ex.stdin_closed = True
                    if not ex.tty:
                        ex.proc.stdin.close()
            except (BrokenPipeError, ValueError, OSError):
                ex.stdin_closed = True
        return tcr.TaskExecStdinWriteResponse()

    def TaskExecWait(self, req, ctx, md):
        sb = self.router_sandbox(req, md)
        ex = self.find_exec(sb, req.exec_id)
        with ex.cond:
            while ex.code is None and ctx.is_active():
                ex.cond.wait(0.5)
            rc = ex.code
        if rc is None:
            raise Abort(grpc.StatusCode.CANCELLED, "cancelled")
        sb.box.forget(ex.proc)
        if rc < 0:
            return tcr.TaskExecWaitResponse(signal=-rc)
        return tcr.TaskExecWaitResponse(code=rc)

    # ------------------------------------------------------------ cleanup
    def cleanup(self):
        for sb in self.boxes():
            for t in sb.tunnels:
                t.close()
            sb.box.delete()
            if sb.cgroup:
                nsbox.drop_memcg(sb.cgroup)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def handlers(fake, service, pkg, names, streams):
    table = {}
    for name in names:
        req_cls = getattr(pkg, name + "Request")
        resp_cls = getattr(pkg, name + "Response")

        def unary(req, ctx, name=name):
            return fake.call(service, name, req, ctx,
                             lambda r, c, md: getattr(fake, name)(r, c, md))

        def stream(req, ctx, name=name):
            out = fake.call(service, name, req, ctx,
                            lambda r, c, md: getattr(fake, name)(r, c, md))
            if out is not None:
                yield from out

        if name in streams:
            table[name] = grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=req_cls.FromString,
                response_serializer=resp_cls.SerializeToString)
        else:
            table[name] = grpc.unary_unary_rpc_method_handler(
                unary, request_deserializer=req_cls.FromString,
                response_serializer=resp_cls.SerializeToString)
    return grpc.method_handlers_generic_handler(service, table)


class Handler(fakehttp.Handler):
    def fake_control(self, path):
        f = self.fake
        parts = path.strip("/").split("/")
        if path == "/_fake/auth" and self.command == "POST":
            with f.lock:
                f.auth_ttl = float(self.json_body().get("ttl", 3600))
            self.send_json(204, None)
        elif path == "/_fake/tls_ca" and self.command == "GET":
            f.tls()
            self.send_bytes(200, f.tls_crt, "application/x-pem-file")
        elif path == "/_fake/jwt" and self.command == "POST":
            with f.lock:
                f.jwt_ttl = float(self.json_body().get("ttl", 3600))
            self.send_json(204, None)
        elif path == "/_fake/router_url" and self.command == "POST":
            with f.lock:
                f.router_url = self.json_body().get("url") or None
            self.send_json(204, None)
        elif path == "/_fake/jwt/expire" and self.command == "POST":
            with f.lock:
                for rec in f.jwts.values():
                    rec[1] = 0
            self.send_json(204, None)
        elif path == "/_fake/sandboxes" and self.command == "POST":
            tags = self.json_body().get("tags") or {}
            iid = f.next_id("im")
            with f.lock:
                f.images[iid] = {"dockerfile": ["FROM debian:bookworm"]}
            req = api.SandboxCreateRequest(
                app_id="ap-other", definition=api.Sandbox(image_id=iid, timeout_secs=300),
                tags=[api.SandboxTag(tag_name=k, tag_value=v) for k, v in tags.items()])
            sid = f.next_id("sb")
            sb = Sandbox(f, req, sid)
            with f.lock:
                f.sandboxes[sid] = sb
            self.send_json(200, {"sandbox_id": sid})
        elif path == "/_fake/sandboxes" and self.command == "GET":
            self.send_json(200, [sb.id for sb in f.boxes() if sb.state == "running"])
        elif len(parts) == 3 and parts[1] == "sandbox" and self.command == "GET":
            with f.lock:
                sb = f.sandboxes.get(parts[2])
            if sb is None:
                raise fakehttp.Reply(404, {"error": "no sandbox " + parts[2]})
            self.send_json(200, {"state": sb.state, "task_id": sb.task_id, "tags": sb.tags,
                                 "execs": len(sb.execs), "workdir": sb.workdir,
                                 "timeout": sb.timeout, "resources": sb.resources,
                                 "tunnels": {str(t.port): t.host_port for t in sb.tunnels}})
        elif len(parts) == 4 and parts[1] == "sandbox" and parts[3] == "vanish":
            with f.lock:
                sb = f.sandboxes.pop(parts[2], None)
            if sb is None:
                raise fakehttp.Reply(404, {"error": "no sandbox " + parts[2]})
            sb.box.delete()
            self.send_json(204, None)
        else:
            super().fake_control(path)


def main():
    fake = ModalFake()
    ctrl = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    ctrl.add_generic_rpc_handlers((handlers(
        fake, CTRL, api,
        ["AuthTokenGet", "AppGetOrCreate", "ImageGetOrCreate", "ImageJoinStreaming",
         "SecretGetOrCreate", "SandboxCreate", "SandboxGetTaskId", "SandboxWait",
         "SandboxTerminate", "SandboxList", "SandboxTagsGet", "SandboxGetTunnels",
         "SandboxSnapshotFs", "TaskGetCommandRouterAccess"],
        {"ImageJoinStreaming"}),))
    port = ctrl.add_insecure_port("127.0.0.1:0")
    fake.tls()
    creds = grpc.ssl_server_credentials([(fake.tls_key, fake.tls_crt)])
    tls_port = ctrl.add_secure_port("127.0.0.1:0", creds)
    router = grpc.server(futures.ThreadPoolExecutor(max_workers=256))
    router.add_generic_rpc_handlers((handlers(
        fake, ROUTER, tcr,
        ["TaskExecStart", "TaskExecStdioRead", "TaskExecStdinWrite", "TaskExecWait"],
        {"TaskExecStdioRead"}),))
    fake.router_port = router.add_insecure_port("127.0.0.1:0")
    router_tls_port = router.add_secure_port("127.0.0.1:0", creds)
    ctrl.start()
    router.start()
    sys.stdout.write("GRPC %d\nROUTER %d\nGRPCS %d\nROUTERS %d\n"
                     % (port, fake.router_port, tls_port, router_tls_port))
    sys.stdout.flush()
    try:
        fakehttp.serve(fake, Handler)
    finally:
        ctrl.stop(0)
        router.stop(0)


if __name__ == "__main__":
    # A crash of the server (grpcio's core) leaves its traceback in the
    # fake's log (tests/hosted.sh shows it). SIGPIPE stays ignored, as
    # Python sets it: a command that ended before its stdin was written is
    # a BrokenPipeError (TaskExecStdinWrite), never the fake's end.
    faulthandler.enable()
    main()
