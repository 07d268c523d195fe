#!/usr/bin/python3
"""A fake Cloudflare Sandbox Bridge worker for the libsbx tests.

Follows the Cloudflare section of the provider contracts (cloudflare/
sandbox-sdk: bridge/worker/README.md, packages/sandbox/src/bridge/
{routes,helpers,types}.ts). The bridge is a Worker the user deploys; its
URL is CLOUDFLARE_SANDBOX_WORKER_URL, http://127.0.0.1:<n> here:

  GET    /health                      {"ok": true} (no auth)
  POST   /v1/sandbox                  {"id": "<26 base32 chars>"}: only mints
                                      an id; the container starts lazily on
                                      the first exec or file call
  POST   /v1/sandbox/{id}/exec        {argv[], timeout_ms?, cwd?} -> SSE:
                                      "event: stdout|stderr" with base64 data
                                      (of the output decoded as UTF-8 text,
                                      as the bridge's toBase64 has it),
                                      then "event: exit" {"exit_code": N}, or
                                      "event: error" {"error", "code"}
  GET|PUT /v1/sandbox/{id}/file/<path minus its leading />
                                      raw bytes; /workspace only (else 403);
                                      read of a missing file 404
                                      workspace_read_not_found; PUT <= 32 MiB
  GET    /v1/sandbox/{id}/running     {"running": bool}
  POST   /v1/sandbox/{id}/persist?excludes=a,b   raw tar of /workspace
  POST   /v1/sandbox/{id}/hydrate     tar body -> {"ok": true}
  DELETE /v1/sandbox/{id}             204 (also if never started; the id is
                                      reusable: a later call starts afresh)
  POST   /v1/sandbox/{id}/session     {"id"}; DELETE .../session/{sid} 204
  GET    /v1/sandbox/{id}/pty?cols=&rows=&shell=&session=
                                      the terminal WebSocket (the SDK's
                                      terminal(): packages/sandbox-container
                                      pty-ws-handler.ts, shared pty-types.ts):
                                      the session's terminal (one per
                                      session, "default" without one; an
                                      unknown session is 502
                                      exec_transport_error) runs `shell`
                                      (default bash) on a real
                                      pseudo-terminal of cols x rows
                                      (default 80x24) in /workspace, with
                                      TERM=xterm-256color; a second
                                      connection to a live terminal gets its
                                      output so far (up to 256 KiB) first.
                                      Server: binary frames of output, text
                                      {"type":"ready"} once attached,
                                      {"type":"exit","code"} when the
                                      program ended (then the close),
                                      {"type":"error","message"}. Client:
                                      binary frames are typed at the
                                      terminal, text {"type":"resize",
                                      "cols","rows"} resizes it (SIGWINCH).
                                      Not a WebSocket upgrade: 400.
  POST   /v1/sandbox/{id}/tunnel/{port}   {id, port, url, hostname, name,
                                      createdAt}: a quick tunnel to the port
                                      (the same one again for a port that
                                      has one); DELETE closes it (the same
                                      object; 404 when there is none)
The id must match [a-z2-7]{1,128} (else 400). "Authorization: Bearer <key>"
on /v1/*, the key from SBX_FAKE_API_KEY (default "fake-cloudflare-key").
Errors are {"error": msg, "code": code}. A command that outlives its
timeout_ms is killed (its whole process group) and ends with "event:
error" code exec_error. Sandboxes are real (tests/fakes/nsbox.py); the
container's /workspace is a directory of its own.

Control routes (no auth; not logged): GET/DELETE /_fake/log, POST
/_fake/faults (tests/fakes/fakehttp.py); GET /_fake/sandbox/{id}
{"root", "running", "execs", "sessions"}; POST /_fake/sandbox/{id}/crash
(the container stops: a running exec ends with "event: error" code
exec_transport_error); POST /_fake/exec_error {"error", "code", "stdout"?}
(the next exec runs nothing: it sends the base64 of "stdout" when given,
then "event: error" with that error and code).

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import base64
import codecs
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import fakews  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply  # noqa: E402

ID_RE = re.compile(r"[a-z2-7]{1,128}")
SESSION_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
MAX_BODY = 32 * 1024 * 1024
PTY_BUFFER = 256 * 1024
B32 = "abcdefghijklmnopqrstuvwxyz234567"


def err(status, message, code=None):
    return Reply(status, {"error": message, "code": code or {
        400: "invalid_request", 401: "unauthorized", 403: "invalid_request",
        404: "not_found", 413: "payload_too_large"}.get(status, "error")})


class Terminal:
    """A session's terminal: its program on a pseudo-terminal, the output
    kept for a connection that comes later, the connections attached."""

    def __init__(self, sb, program, cols, rows):
        self.sb = sb
        self.popen, self.master = sb.box.popen_pty([program], rows, cols, cwd="/workspace",
                                                   env={"TERM": "xterm-256color"})
        self.buffer = bytearray()
        self.clients = []
        self.lock = threading.Lock()
        self.closed = False
        reader = nsbox.OutputPump(self.master, self.emit)

        def wait():
            rc = self.popen.wait()
            reader.finish()
            sb.box.forget(self.popen)
            with self.lock:
                self.closed = True
                clients, self.clients = self.clients, []
                os.close(self.master)
                self.master = None
            msg = {"type": "exit", "code": rc if rc >= 0 else 128 - rc}
            if rc < 0:
                msg["signal"] = signal.Signals(-rc).name
            for ws in clients:
                try:
                    ws.send_text(json.dumps(msg))
                except (fakews.Closed, OSError, ValueError):
                    pass
                ws.close(1000, "PTY exited")
        threading.Thread(target=wait, daemon=True).start()

    def emit(self, data):
        with self.lock:
            self.buffer += data
            del self.buffer[:-PTY_BUFFER]
            clients = list(self.clients)
        for ws in clients:
            try:
                ws.send_binary(data)
            except (fakews.Closed, OSError, ValueError):
                pass

    def type(self, data):
        with self.lock:
            if self.master is not None:
                os.write(self.master, data)

    def resize(self, cols, rows):
        with self.lock:
            if self.master is not None:
                nsbox.resize(self.master, rows, cols)


class Sandbox:
    def __init__(self, fake, sid):
        self.id = sid
        self.box = nsbox.Box(fake.dir, "cloudflare")
        os.makedirs(os.path.join(self.box.root, "workspace"), exist_ok=True)
        self.execs = 0
        self.sessions = set()
        self.tunnels = {}           # port -> the tunnel object
        self.running_cmds = set()
        self.terminals = {}         # session (or "default") -> Terminal

    def ensure(self):
        self.box.start(True)


class CloudflareFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-cloudflare-key"))
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-cloudflare-")
        self.port = 0
        self.exec_errors = []      # scripted error events, for the next execs

    def error_body(self, status, message, path, method):
        return {"error": message, "code": {401: "unauthorized", 404: "not_found",
                                           429: "rate_limited",
                                           503: "capacity_exceeded"}.get(status, "error")}

    def get(self, sid):
        """The sandbox @sid, made when first used (the bridge's ids are
        names of Durable Objects: any valid id has one)."""
        if not ID_RE.fullmatch(sid):
            raise err(400, "invalid sandbox id: %s" % sid)
        with self.lock:
            sb = self.sandboxes.get(sid)
            if sb is None:
                sb = self.sandboxes[sid] = Sandbox(self, sid)
        return sb

    def drop(self, sid):
        with self.lock:
            sb = self.sandboxes.pop(sid, None)
        if sb is not None:
            sb.box.delete()

    def cleanup(self):
        with self.lock:
            boxes = list(self.sandboxes.values())
        for sb in boxes:
            sb.box.delete()
        shutil.rmtree(self.dir, ignore_errors=True)


FAKE = None


def workspace_path(path):
    """The sandbox path of a file route's @path, or a 403."""
    p = "/" + path.lstrip("/")
    parts = [x for x in p.split("/") if x not in ("", ".")]
    if ".." in parts or not parts or parts[0] != "workspace":
        raise err(403, "path must be inside /workspace: %s" % p)
    return "/" + "/".join(parts)


class CloudflareHandler(fakehttp.Handler):
    def handle_any(self):
        # GET /health is the one route without the key (and is not logged).
        if self.command == "GET" and self.path.split("?")[0] == "/health":
            self._status = 0
            return self.send_json(200, {"ok": True})
        return fakehttp.Handler.handle_any(self)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any

    def fake_control(self, path):
        f = FAKE
        if path == "/_fake/exec_error" and self.command == "POST":
            with f.lock:
                f.exec_errors.append(self.json_body())
            return self.send_json(204, None)
        m = re.fullmatch(r"/_fake/sandbox/([^/]+)(/crash)?", path)
        if not m:
            raise Reply(404, {"error": "no such control route: " + path})
        with f.lock:
            sb = f.sandboxes.get(m.group(1))
        if sb is None:
            raise Reply(404, {"error": "no sandbox " + m.group(1)})
        if m.group(2):
            sb.box.stop()
            return self.send_json(204, None)
        self.send_json(200, {"root": sb.box.root, "running": sb.box.running(),
                             "execs": sb.execs, "sessions": sorted(sb.sessions),
                             "tunnels": sorted(sb.tunnels)})

    def route(self, path, query):
        f = FAKE
        meth = self.command
        if path == "/v1/sandbox" and meth == "POST":
            self.body_bytes()
            sid = "".join(secrets.choice(B32) for _ in range(26))
            f.get(sid)
            return self.send_json(200, {"id": sid})
        m = re.fullmatch(r"/v1/sandbox/([^/]+)(/.*)?", path)
        if not m:
            raise err(404, "not found: %s %s" % (meth, path), "not_found")
        sid, rest = m.group(1), m.group(2) or ""
        if not ID_RE.fullmatch(sid):
            raise err(400, "invalid sandbox id: %s" % sid)
        session = self.headers.get("Session-Id")
        if session is not None and not SESSION_RE.fullmatch(session):
            raise err(400, "invalid Session-Id: %s" % session)
        if rest == "" and meth == "DELETE":
            self.body_bytes()
            f.drop(sid)
            return self.send_json(204, None)
        if rest == "/running" and meth == "GET":
            with f.lock:
                sb = f.sandboxes.get(sid)
            return self.send_json(200, {"running": bool(sb and sb.box.running())})
        sb = f.get(sid)
        if rest == "/exec" and meth == "POST":
            return self.exec(sb, self.json_body())
        if rest.startswith("/file/") and meth in ("GET", "PUT"):
            return self.file(sb, rest[len("/file/"):])
        if rest == "/persist" and meth == "POST":
            self.body_bytes()
            ex = [e for e in (query.get("excludes") or [""])[0].split(",") if e]
            return self.persist(sb, ex)
        if rest == "/hydrate" and meth == "POST":
            return self.hydrate(sb)
        if rest == "/pty" and meth == "GET":
            return self.pty(sb, query)
        if rest == "/session" and meth == "POST":
            self.body_bytes()
            s = "s" + secrets.token_hex(8)
            sb.sessions.add(s)
            return self.send_json(200, {"id": s})
        m = re.fullmatch(r"/tunnel/([0-9]+)", rest)
        if m and meth in ("POST", "DELETE"):
            self.body_bytes()
            port = int(m.group(1))
            if not 1 <= port <= 65535:
                raise err(400, "invalid port: %s" % m.group(1), "invalid_request")
            with f.lock:
                t = sb.tunnels.get(port)
                if meth == "DELETE":
                    if t is None:
                        raise err(404, "no tunnel to port %d" % port, "tunnel_error")
                    del sb.tunnels[port]
                elif t is None:
                    name = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12))
                    host = "%s.trycloudflare.com" % name
                    t = sb.tunnels[port] = {
                        "id": "tun-" + secrets.token_hex(8), "port": port,
                        "url": "https://" + host, "hostname": host, "name": name,
                        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            return self.send_json(200, t)
        m = re.fullmatch(r"/session/([^/]+)", rest)
        if m and meth == "DELETE":
            sb.sessions.discard(m.group(1))
            return self.send_json(204, None)
        raise err(404, "not found: %s %s" % (meth, path), "not_found")

    # ------------------------------------------------------------ terminals
    def pty(self, sb, query):
        if fakews.upgrade_error(self) is not None:
            raise err(400, "WebSocket upgrade required")
        q = {k: v[0] for k, v in query.items()}
        try:
            cols = float(q["cols"]) if q.get("cols") else 80
            rows = float(q["rows"]) if q.get("rows") else 24
        except ValueError:
            raise err(400, "cols and rows must be valid numbers")
        session = q.get("session")
        if session is not None and session not in sb.sessions:
            raise err(502, "terminal failed: session %s not found" % session,
                      "exec_transport_error")
        tid = session or "default"
        try:
            sb.ensure()
        except OSError as e:
            raise err(502, "terminal failed: container did not start: %s" % e,
                      "exec_transport_error")
        with FAKE.lock:
            term = sb.terminals.get(tid)
            if term is None or term.closed:
                try:
                    term = Terminal(sb, q.get("shell") or "bash", int(cols), int(rows))
                except nsbox.SandboxGone:
                    raise err(502, "terminal failed: the container is not running",
                              "exec_transport_error")
                sb.terminals[tid] = term
        ws = fakews.WebSocket(self)
        # The output so far, then "ready", under the terminal's lock: no
        # new output can come between them (or before "ready").
        with term.lock:
            closed = term.closed
            if not closed:
                if term.buffer:
                    ws.send_binary(bytes(term.buffer))
                term.clients.append(ws)
                ws.send_text(json.dumps({"type": "ready"}))
        if closed:
            ws.send_text(json.dumps({"type": "error", "message": "PTY is closed"}))
            ws.close(1011, "PTY is closed")
            return
        try:
            while True:
                op, data = ws.recv()
                if op == fakews.OP_BINARY:
                    try:
                        term.type(data)
                    except OSError:
                        pass
                    continue
                try:
                    control = json.loads(data)
                    if control.get("type") != "resize":
                        continue
                    c, r = control.get("cols"), control.get("rows")
                    if not all(isinstance(v, int) and 0 < v < 65536 for v in (c, r)):
                        ws.send_text(json.dumps({"type": "error", "message": "Invalid "
                                                 "dimensions: cols and rows must be "
                                                 "positive"}))
                        continue
                    term.resize(c, r)
                except (ValueError, AttributeError):
                    ws.send_text(json.dumps({"type": "error",
                                             "message": "Invalid control message"}))
        except fakews.Closed:
            pass
        with term.lock:
            if ws in term.clients:
                term.clients.remove(ws)

    # ------------------------------------------------------------ files
    def file(self, sb, path):
        import urllib.parse
        p = workspace_path(urllib.parse.unquote(path))
        try:
            sb.ensure()
        except OSError as e:
            raise err(502, "container did not start: %s" % e, "pool_error")
        host = sb.box.host_path(p)
        if host is None:
            raise err(403, "path must be inside /workspace: %s" % p)
        if self.command == "GET":
            if not os.path.isfile(host):
                raise err(404, "file not found: %s" % p, "workspace_read_not_found")
            with open(host, "rb") as fh:
                return self.send_bytes(200, fh.read())
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise err(413, "payload too large (max 33554432 bytes)", "payload_too_large")
        data = self.body_bytes()
        if len(data) > MAX_BODY:
            raise err(413, "payload too large (max 33554432 bytes)", "payload_too_large")
        if os.path.isdir(host):
            raise err(400, "is a directory: %s" % p)
        os.makedirs(os.path.dirname(host), exist_ok=True)
        with open(host, "wb") as fh:
            fh.write(data)
        self.send_json(200, {"ok": True})

    def persist(self, sb, excludes):
        root = os.path.join(sb.box.root, "workspace")
        buf = io.BytesIO()

        def keep(ti):
            name = ti.name[2:] if ti.name.startswith("./") else ti.name
            for e in excludes:
                if name == e or name.startswith(e.rstrip("/") + "/"):
                    return None
            return ti
        with tarfile.open(fileobj=buf, mode="w") as t:
            t.add(root, arcname=".", filter=keep)
        self.send_bytes(200, buf.getvalue(), "application/x-tar")

    def hydrate(self, sb):
        data = self.body_bytes()
        if len(data) > MAX_BODY:
            raise err(413, "payload too large (max 33554432 bytes)", "payload_too_large")
        root = os.path.join(sb.box.root, "workspace")
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r") as t:
                for ti in t.getmembers():
                    parts = [x for x in ti.name.split("/") if x not in ("", ".")]
                    if ".." in parts or ti.islnk():
                        raise err(400, "bad archive member: %s" % ti.name)
                t.extractall(root)
        except tarfile.TarError as e:
            raise err(502, "cannot extract the archive: %s" % e,
                      "workspace_archive_write_error")
        self.send_json(200, {"ok": True})

    # ------------------------------------------------------------ exec
    def exec(self, sb, body):
        argv = body.get("argv")
        if (not isinstance(argv, list) or not argv
                or not all(isinstance(a, str) for a in argv)):
            raise err(400, "argv must be a non-empty array of strings")
        timeout_ms = body.get("timeout_ms")
        if timeout_ms is not None and (not isinstance(timeout_ms, int) or timeout_ms <= 0):
            raise err(400, "timeout_ms must be a positive integer")
        cwd = body.get("cwd") or "/workspace"
        cwd = workspace_path(cwd)
        try:
            sb.ensure()
        except OSError as e:
            raise err(502, "container did not start: %s" % e, "pool_error")
        host = sb.box.host_path(cwd)
        if host is None or not os.path.isdir(host):
            raise err(400, "cwd does not exist: %s" % cwd)
        sb.execs += 1
        with FAKE.lock:
            scripted = FAKE.exec_errors.pop(0) if FAKE.exec_errors else None
        if scripted is not None:
            return self.scripted_error(scripted)
        try:
            c = sb.box.popen(argv, cwd=cwd)
        except nsbox.SandboxGone:
            raise err(502, "the container is not running", "exec_transport_error")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200
        wlock = threading.Lock()
        broken = []
        ended = []

        def write(raw):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            self.wfile.flush()

        def frame(name, data):
            return (("event: %s\n" % name).encode()
                    + b"".join(b"data: " + ln.encode() + b"\n" for ln in data.split("\n"))
                    + b"\n")

        def event(name, data):
            with wlock:
                write(frame(name, data))

        def sink(name):
            # The bridge's onOutput gets the output as text and base64s its
            # UTF-8 (toBase64): bytes that are not UTF-8 become U+FFFD.
            dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

            def emit(raw, final=False):
                data = dec.decode(raw, final=final).encode()
                if not data or broken:
                    return
                try:
                    with wlock:
                        # A background child's output after the exit event
                        # is dropped: the stream has ended.
                        if not ended:
                            write(frame(name, base64.b64encode(data).decode()))
                except (BrokenPipeError, ConnectionResetError, ValueError):
                    broken.append(1)
                    sb.box.kill_command(c)
            return emit
        sinks = [sink("stdout"), sink("stderr")]
        pumps = [nsbox.OutputPump(c.stdout, sinks[0], close=True),
                 nsbox.OutputPump(c.stderr, sinks[1], close=True)]
        timed_out = False
        try:
            c.wait(timeout=timeout_ms / 1000.0 if timeout_ms else None)
        except subprocess.TimeoutExpired:
            timed_out = True
            sb.box.kill_command(c, signal.SIGKILL)
            c.wait()
        # The stream ends with the command's own process: what it wrote is
        # drained, a background child holding the pipes is not waited for.
        for pump, emit in zip(pumps, sinks):
            pump.finish()
            emit(b"", final=True)
        with wlock:
            ended.append(1)
        sb.box.forget(c)
        crashed = not sb.box.running()
        try:
            if broken:
                raise BrokenPipeError()
            if timed_out:
                event("error", json.dumps({"error": "command timed out after %d ms"
                                           % timeout_ms, "code": "exec_error"}))
            elif crashed:
                event("error", json.dumps({"error": "the container stopped while the "
                                           "command ran", "code": "exec_transport_error"}))
            else:
                code = c.returncode
                event("exit", json.dumps({"exit_code": 128 - code if code < 0 else code}))
            write(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


    def scripted_error(self, e):
        out = b""
        if e.get("stdout"):
            out += (b"event: stdout\ndata: " + base64.b64encode(e["stdout"].encode())
                    + b"\n\n")
        msg = json.dumps({"error": e.get("error", "scripted"), "code": e.get("code",
                                                                          "exec_error")})
        out += b"event: error\n" + b"".join(b"data: " + ln.encode() + b"\n"
                                            for ln in msg.split("\n")) + b"\n"
        self.send_bytes(200, out, "text/event-stream")


def main():
    global FAKE
    FAKE = CloudflareFake()
    fakehttp.serve(FAKE, CloudflareHandler)


if __name__ == "__main__":
    main()
