#!/usr/bin/python3
"""A fake Daytona (v0 "Daytona API" + Toolbox API) for the libsbx tests.

Follows the Daytona section of the provider contracts (daytona/clients
openapi-specs api.json and toolbox.json; daytonaio/daytona v0.190.0): paths,
the Bearer header, the JSON fields of CreateSandbox and Sandbox, status codes,
the NestJS error body of the API and the daemon's error body of the toolbox.

Listens on 127.0.0.1 (an ephemeral port, printed as "PORT <n>"):
  API      http://127.0.0.1:<n>/api         (DAYTONA_API_URL)
  toolbox  http://127.0.0.1:<n>/toolbox/<id> (the sandbox's toolboxProxyUrl
                                              + "/" + id)
Authorization: "Bearer <key>", the key from SBX_FAKE_API_KEY (default
"fake-daytona-key").

Sandboxes are real (tests/fakes/nsbox.py): a directory that is `/` for real
processes in their own pid namespace; stopping a sandbox kills its processes
and keeps its files; deleting it kills them and removes the directory.

Lifecycle: create answers 200 with state "started" (or "creating" for
`create_pending` seconds, see below); stopped and archived sandboxes answer
every toolbox call with 400 "failed to resolve container IP ... Is the Sandbox
started?" until POST /sandbox/{id}/start, which goes through "starting"
(from stopped) or "restoring" (from archived) to "started". ttlMinutes deletes
the sandbox that many minutes after create; autoStopInterval (default 15)
stops it after that many idle minutes (a request about the sandbox is
activity, counted when the request starts: a long one, such as a command
run at once or its followed logs, counts only then; POST
/sandbox/{id}/last-activity is one). SBX_FAKE_MINUTE sets the length of a
minute in seconds (default 60), so tests can see those timers; the idle stop
of one sandbox can also be set in seconds while the fake runs (see
/_fake/sandbox/{id}/idle_stop).

Preview links: GET /sandbox/{id}/ports/{port}/preview-url answers
{"sandboxId", "url": "https://PORT-ID.proxy.daytona.works", "token"}, the
token one per sandbox (the x-daytona-preview-token of a private sandbox).

Commands see the sandbox's env (CreateSandbox `env`) and start in the
user's home, /root, unless a cwd is given; relative file paths resolve
against it too (the daemon's working directory).

Exec: POST /process/execute pipes the command into /bin/sh on its stdin,
stdout and stderr merged into `result` (as the daemon does); 408 when its
timeout passes (the process group is killed). Sessions keep stdout and stderr
apart: POST /process/session/{sid}/exec runs the command with /bin/sh -c
(each command in a shell of its own, its script passed in that shell's
environment or through a pipe, never a host command line; the command ends when its shell exits, whatever
background children still hold its output), synchronously, or with runAsync=true in
the background; GET .../command/{cmdId} gives its exitCode (null while it
runs) and GET .../command/{cmdId}/logs its output, each chunk prefixed by
\\x01\\x01\\x01 (stdout) or \\x02\\x02\\x02 (stderr); ?follow=true streams the
chunks as they come until the command ends. The synchronous answer
{"cmdId", "exitCode", "stdout", "stderr", "output"} is JSON text made by Go's
encoding/json from the log's bytes: each byte that is not UTF-8 is U+FFFD
there (one per byte, as Go decodes), while the logs are the bytes themselves
(apps/daemon/pkg/session/execute.go, log.go: the log file as read, sent as
text/plain).
Where the fake differs from the daemon (daytonaio/daytona apps/daemon/pkg/
session/wrapper_linux.go at the newest stored revision): the daemon's labelers
read each stream line by line with the shell's `read` (a last line without a
newline gets one, NUL bytes are dropped, and stdout and stderr interleave by
lines); this fake prefixes the chunks as they are read, byte for byte. And the
daemon's answers depend on the client's X-Daytona-SDK-Version
(pkg/session/common.go, toolbox/process/session/log.go): with none and no
"X-Daytona-Split-Output: true", or one below 0.27.0, the output is merged with
the markers removed; a synchronous exec carries stdout and stderr apart from
0.163.0 (or with no version and that header); the non-follow logs are the raw
bytes with their markers from 0.27.0 below 0.163.0, JSON text
{output, stdout, stderr} from 0.163.0. This fake merges a synchronous
answer's streams (only "output") for a client that sends neither the version
nor "X-Daytona-Split-Output: true", as the daemon does, and otherwise answers
as to a client that gets both: stdout and stderr apart, and the logs' raw
bytes.

Sessions live in the toolbox
daemon's memory (apps/daemon/pkg/toolbox/process/session), which ends with
the sandbox's processes: once a sandbox was stopped, archived or in error,
its sessions are gone (404 "session <id> not found").

PTY sessions (the daemon's toolbox/process/pty): POST /process/pty {"id",
"cwd"?, "envs"?, "cols"?, "rows"? (default 80x24; above 1000 is 400),
"lazyStart"?} -> 201 {"sessionId"} (409 when the id is taken) starts the
user's shell, /bin/bash with no argument (an interactive shell), on a real
pseudo-terminal of that size in the sandbox (the session's leader, the
terminal its controlling terminal), with the envs (TERM=xterm-256color unless
given), in cwd (default the daemon's working directory); with lazyStart it
starts when the first client attaches. GET /process/pty {"sessions": [info]};
GET|DELETE /process/pty/{id} (info {"id", "cwd", "envs", "cols", "rows",
"createdAt", "active"}; DELETE kills it, exit code 137); POST
/process/pty/{id}/resize {"cols", "rows"} -> 200 info (TIOCSWINSZ: SIGWINCH;
410 once it ended). GET /process/pty/{id}/connect is the WebSocket: a text
frame {"type": "control", "status": "connected"} first, then the terminal's
output as binary frames; every client message (text or binary) is typed at
the terminal; when the shell exits, the close frame (1000 for exit code 0,
1011 otherwise) carries {"exitCode": N, "exitReason"?} as its reason (a
shell killed by a signal: exitCode -1, as Go's ExitCode() gives it), and the
session is removed. An unknown or ended session: the upgrade is answered and
closed at once with 1000 {"error": "PTY session not found"}. Output the
terminal writes while no client is attached is dropped, as the daemon's
broadcast drops it.

Control routes (no auth; not logged):
  GET  /_fake/log, DELETE /_fake/log, POST /_fake/faults  (tests/fakes/fakehttp.py)
  POST /_fake/sandbox/{id}/state {"state": "stopped"|"archived"|"error"|
       "starting", "errorReason": "...", "after": s}: the provider changes the
       state ("starting": becomes "started" after `after` seconds)
  POST /_fake/sandbox/{id}/vanish: the sandbox is gone (404 from then on); a
       command running in it is killed, and its session exec or followed
       logs are cut without an answer (the daemon dies with its sandbox),
       as when the sandbox is stopped or deleted
  POST /_fake/sandbox/{id}/no_perl: the sandbox's image has no perl: its
       commands' PATH becomes one directory, NO_PERL_BIN, holding links to
       every command of the usual PATH but perl and perl*
  POST /_fake/sandbox/{id}/idle_stop {"seconds": s}: the sandbox is stopped
       s seconds after the start of the last request about it (API or
       toolbox), in place of its autoStopInterval; 0 or null: back to that
  POST /_fake/config {"start_delay": {"stopped": s, "archived": s},
       "create_pending": s, "toolbox_url": URL}: toolbox_url is the
       toolboxProxyUrl answered from then on (a proxy in front of this
       fake's toolbox; null: this fake's own)
  GET  /_fake/sandbox/{id}: {"state", "root", "running", "starts", "ttlMinutes",
       "autoStopInterval", "labels", "deadline", "idle_stops" (how many times
       the idle stop stopped it), "activities" (POST .../last-activity
       requests)}
  GET  /_fake/sandboxes: the ids the fake holds

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import codecs
import datetime
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import secrets
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import fakews  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply, q1  # noqa: E402

MINUTE = float(os.environ.get("SBX_FAKE_MINUTE", "60"))
# The toolbox daemon's working directory: the sandbox user's home. Commands
# without a cwd start there and relative file paths resolve against it.
WORKDIR = "/root"
# The longest session script passed in its shell's environment (one string
# there may hold 128 KiB, MAX_ARG_STRLEN); a longer one goes through a pipe.
SCRIPT_IN_ENV_MAX = 64 * 1024
ORG_ID = "org-fake"
MAX_CPU, MAX_MEMORY_GB, MAX_DISK_GB = 4, 8, 10
STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"
NOT_STARTED = ("failed to resolve container IP after 3 attempts: no IP address found. "
               "Is the Sandbox started?")
REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           408: "Request Timeout", 409: "Conflict", 410: "Gone", 422: "Unprocessable Entity",
           429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
           503: "Service Unavailable", 504: "Gateway Timeout"}


def _go_replace(err):
    """One U+FFFD per byte that is not UTF-8, as Go gives it (utf8.DecodeRune
    takes one byte of an invalid sequence at a time, and encoding/json puts
    U+FFFD for each): Python's "replace" would put one for a whole
    truncated sequence."""
    return "\ufffd", err.start + 1


codecs.register_error("go-replace", _go_replace)


def go_text(b):
    """Bytes @b as the daemon's JSON carries them (a Go string through
    encoding/json): every byte that is not UTF-8 becomes U+FFFD."""
    return b.decode("utf-8", "go-replace")


def now_iso(t=None):
    t = time.time() if t is None else t
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Command:
    def __init__(self, cmd_id, command):
        self.id = cmd_id
        self.command = command
        self.exit_code = None
        self.chunks = []            # (prefix, bytes)
        self.cond = threading.Condition()


class PtySession:
    """One of the daemon's PTY sessions: the user's shell on a terminal, and
    the WebSocket clients attached to it."""

    def __init__(self, sb, body):
        self.sb = sb
        self.id = body["id"]
        self.cwd = body.get("cwd") or WORKDIR
        self.envs = dict(body.get("envs") or {})
        self.envs.setdefault("TERM", "xterm-256color")
        self.cols = body.get("cols") or 80
        self.rows = body.get("rows") or 24
        self.created = time.time()
        self.active = False
        self.started = False
        self.popen = None
        self.master = None
        self.killed = False         # DELETE killed it
        self.clients = []
        self.lock = threading.Lock()

    def info(self):
        return {"id": self.id, "cwd": self.cwd, "envs": self.envs, "cols": self.cols,
                "rows": self.rows, "createdAt": now_iso(self.created), "active": self.active}

    def start(self):
        with self.lock:
            if self.started:
                return
            self.started = True
            env = dict(self.sb.env)
            env.update(self.envs)
            argv = ["/bin/bash"]
            if "PATH" in env:
                argv = ["/usr/bin/env", "PATH=" + env.pop("PATH")] + argv
            self.popen, self.master = self.sb.box.popen_pty(argv, self.rows, self.cols,
                                                            env=env, cwd=self.cwd)
            self.active = True
        reader = nsbox.OutputPump(self.master, self.broadcast)

        def wait():
            rc = self.popen.wait()
            reader.finish()
            self.sb.box.forget(self.popen)
            if self.killed:
                self.finish(137, "SIGKILL")
            else:
                self.finish(rc if rc >= 0 else -1)
        threading.Thread(target=wait, daemon=True).start()

    def broadcast(self, data):
        with self.lock:
            clients = list(self.clients)
        for ws in clients:
            try:
                ws.send_binary(data)
            except (fakews.Closed, OSError, ValueError):
                pass

    def type(self, data):
        with self.lock:
            if self.master is not None and self.active:
                os.write(self.master, data)

    def resize(self, cols, rows):
        with self.lock:
            nsbox.resize(self.master, rows, cols)
            self.cols, self.rows = cols, rows

    def finish(self, code, reason=None):
        """The shell ended with @code: every client gets the close frame with
        it, the terminal is closed and the session removed."""
        with self.lock:
            if not self.active and self.master is None:
                return
            self.active = False
            clients, self.clients = self.clients, []
            if self.master is not None:
                os.close(self.master)
                self.master = None
        if reason is None and code != 0:
            reason = {130: "Ctrl+C", 137: "SIGKILL", 143: "SIGTERM"}.get(
                code, "signal %d" % (code - 128) if code > 128 else "non-zero exit")
        data = {"exitCode": code}
        if reason is not None:
            data["exitReason"] = reason
        # Gone before a client hears of the end, so that a client asking
        # right after the close frame finds it gone.
        self.sb.ptys.pop(self.id, None)
        for ws in clients:
            ws.close(1000 if code == 0 else 1011, json.dumps(data, separators=(",", ":")))

    def kill(self):
        """DELETE: the shell and its session are killed; the clients get
        exit code 137 (from the waiter, once the reader has stopped)."""
        with self.lock:
            self.killed = True
            popen = self.popen
        if popen is not None:
            nsbox.kill_pty_session(popen)
        else:
            self.finish(137, "SIGKILL")


class Sandbox:
    def __init__(self, fake, body):
        self.id = str(uuid.uuid4())
        self.body = body
        self.name = body.get("name") or self.id
        self.labels = dict(body.get("labels") or {})
        self.state = "started"
        self.error_reason = None
        self.created = time.time()
        self.updated = self.created
        self.last_activity = self.created
        self.auto_stop = body.get("autoStopInterval", 15)
        self.auto_archive = body.get("autoArchiveInterval", 10080)
        self.auto_delete = body.get("autoDeleteInterval", -1)
        self.ttl = body.get("ttlMinutes")
        self.env = dict(body.get("env") or {})
        self.starts = 0
        self.box = nsbox.Box(fake.dir, "daytona")
        self.sessions = {}          # sid -> {cmdId: Command}
        self.ptys = {}              # id -> PtySession
        self.pending_until = 0.0
        self.state_timer = None
        self.idle_stop_s = None     # /_fake/sandbox/{id}/idle_stop
        self.idle_stops = 0
        self.activities = 0

    def json(self, fake):
        b = self.body
        return {
            "id": self.id,
            "name": self.name,
            "organizationId": ORG_ID,
            "snapshot": b.get("snapshot"),
            "user": b.get("user") or "root",
            "env": b.get("env") or {},
            "labels": self.labels,
            "public": bool(b.get("public", False)),
            "networkBlockAll": bool(b.get("networkBlockAll", False)),
            "networkAllowList": b.get("networkAllowList"),
            "target": b.get("target") or "us",
            "cpu": b.get("cpu", 1),
            "gpu": b.get("gpu", 0),
            "memory": b.get("memory", 1),
            "disk": b.get("disk", 3),
            "state": self.state,
            "desiredState": "destroyed" if self.state == "destroyed" else
                            ("stopped" if self.state in ("stopped", "archived") else "started"),
            "errorReason": self.error_reason,
            "recoverable": False,
            "createdAt": now_iso(self.created),
            "updatedAt": now_iso(self.updated),
            "lastActivityAt": now_iso(self.last_activity),
            "autoStopInterval": self.auto_stop,
            "autoArchiveInterval": self.auto_archive,
            "autoDeleteInterval": self.auto_delete,
            "ttlMinutes": self.ttl,
            "sandboxClass": "small",
            "runnerId": "runner-fake",
            "volumes": b.get("volumes") or [],
            "toolboxProxyUrl": fake.config.get("toolbox_url")
                               or "http://127.0.0.1:%d/toolbox" % fake.port,
        }


class DaytonaFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-daytona-key"))
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-daytona-")
        self.sandboxes = {}
        self.snapshots = {}         # name -> directory
        self.config = {"start_delay": {"stopped": 0.0, "archived": 0.0}, "create_pending": 0.0}
        self.port = 0
        self.start_reaper(self.reap)

    def error_body(self, status, message, path, method):
        if path.startswith("/toolbox/"):
            return {"statusCode": status, "message": message,
                    "code": REASONS.get(status, "Error").upper().replace(" ", "_"),
                    "timestamp": now_iso(), "path": path, "method": method}
        return {"path": path, "timestamp": now_iso(), "statusCode": status,
                "error": REASONS.get(status, "Error"), "message": message}

    def find(self, id_or_name):
        with self.lock:
            sb = self.sandboxes.get(id_or_name)
            if sb is None:
                for s in self.sandboxes.values():
                    if s.name == id_or_name:
                        sb = s
                        break
        if sb is None:
            raise Reply(404, None, {"x-message": "Sandbox with ID or name %s not found" % id_or_name})
        return sb

    def remove(self, sb):
        with self.lock:
            self.sandboxes.pop(sb.id, None)
        if sb.state_timer:
            sb.state_timer.cancel()
        sb.state = "destroyed"
        sb.box.delete()

    def set_state(self, sb, state, reason=None):
        sb.state = state
        sb.updated = time.time()
        if state in ("stopped", "archived", "error"):
            self.stop_box(sb)
        if reason is not None:
            sb.error_reason = reason

    @staticmethod
    def stop_box(sb):
        """The sandbox's processes end, and with them its toolbox daemon,
        which holds the sessions in its memory: a started sandbox has none."""
        sb.box.stop()
        sb.sessions = {}
        # A started terminal's shell died with the sandbox: its waiter
        # closes it.
        for pty in list(sb.ptys.values()):
            if not pty.started:
                pty.finish(-1)
        sb.ptys = {}

    def later(self, sb, delay, fn):
        if sb.state_timer:
            sb.state_timer.cancel()
        sb.state_timer = threading.Timer(delay, fn)
        sb.state_timer.daemon = True
        sb.state_timer.start()

    def start_sandbox(self, sb):
        """POST /sandbox/{id}/start on a stopped or archived sandbox."""
        before = sb.state
        sb.starts += 1
        delay = float(self.config["start_delay"].get(before, 0.0))
        sb.state = "restoring" if before == "archived" else "starting"

        def done():
            try:
                sb.box.start(not sb.body.get("networkBlockAll", False))
                sb.state = "started"
                sb.error_reason = None
            except OSError as e:
                sb.state = "error"
                sb.error_reason = str(e)
            sb.updated = time.time()
            sb.last_activity = time.time()
        if delay <= 0:
            done()
        else:
            self.later(sb, delay, done)

    def reap(self, sb, t):
        """ttlMinutes deletes; autoStopInterval (or the idle_stop seconds)
        stops an idle sandbox."""
        idle = sb.idle_stop_s or (sb.auto_stop * MINUTE if sb.auto_stop else None)
        if sb.ttl and t >= sb.created + sb.ttl * MINUTE:
            self.remove(sb)
        elif (sb.state == "started" and idle and not self.busy(sb)
              and t >= sb.last_activity + idle):
            sb.idle_stops += 1
            self.set_state(sb, "stopped")

    @staticmethod
    def busy(sb):
        return False

    def cleanup(self):
        for sb in self.boxes():
            if sb.state_timer:
                sb.state_timer.cancel()
        super().cleanup()   # the snapshots are under self.dir too


FAKE = None


def file_info(host, sandbox_path):
    st = os.lstat(host)
    try:
        import pwd
        import grp
        owner = pwd.getpwuid(st.st_uid).pw_name
        group = grp.getgrgid(st.st_gid).gr_name
    except (KeyError, ImportError):
        owner, group = str(st.st_uid), str(st.st_gid)
    return {
        "name": os.path.basename(sandbox_path.rstrip("/")) or "/",
        "path": sandbox_path,
        "isDir": stat.S_ISDIR(st.st_mode),
        "size": st.st_size,
        "mode": stat.filemode(st.st_mode),
        "permissions": "%04o" % stat.S_IMODE(st.st_mode),
        "owner": owner,
        "group": group,
        "modifiedAt": now_iso(st.st_mtime),
        "modTime": now_iso(st.st_mtime),
    }


def parse_multipart(ctype, body):
    """[(name, filename, bytes)] of a multipart/form-data body (byte-exact)."""
    m = re.search(r'boundary="?([^";]+)"?', ctype or "")
    if not m:
        raise Reply(400, None, {"x-message": "multipart body without a boundary"})
    delim = b"--" + m.group(1).encode()
    parts = []
    for chunk in body.split(delim)[1:]:
        if chunk.startswith(b"--"):
            break
        if chunk.startswith(b"\r\n"):
            chunk = chunk[2:]
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep:
            continue
        if data.endswith(b"\r\n"):
            data = data[:-2]
        name = filename = None
        for line in head.decode("utf-8", "surrogateescape").split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                n = re.search(r'\bname="([^"]*)"', line)
                f = re.search(r'\bfilename="([^"]*)"', line)
                name = n.group(1) if n else None
                filename = f.group(1) if f else None
        parts.append((name, filename, data))
    return parts


# The one directory of the PATH of a sandbox without perl (a sandbox path).
NO_PERL_BIN = "/.sbx-fake-bin"


def hide_perl(sb):
    """Makes @sb an image without perl: NO_PERL_BIN holds a link to each
    command of the usual PATH's directories (the host's, which the sandbox
    sees read-only) but perl and perl*, and is the PATH of its commands."""
    host = sb.box.host_path(NO_PERL_BIN)
    os.makedirs(host, exist_ok=True)
    for d in nsbox.default_env()["PATH"].split(":"):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            link = os.path.join(host, n)
            if n.startswith("perl") or os.path.lexists(link):
                continue
            os.symlink(os.path.join(d, n), link)
    sb.env["PATH"] = NO_PERL_BIN


class DaytonaHandler(fakehttp.Handler):
    # ------------------------------------------------------------ control
    def fake_control(self, path):
        f = FAKE
        m = re.fullmatch(r"/_fake/sandbox/([^/]+)(/state|/vanish|/no_perl|/idle_stop)?", path)
        if path == "/_fake/config" and self.command == "POST":
            body = self.json_body()
            with f.lock:
                for k, v in body.items():
                    if isinstance(v, dict):
                        f.config.setdefault(k, {}).update(v)
                    else:
                        f.config[k] = v
            self.send_json(204, None)
        elif path == "/_fake/sandboxes":
            with f.lock:
                self.send_json(200, sorted(f.sandboxes))
        elif m and m.group(2) == "/state":
            sb = f.find(m.group(1))
            body = self.json_body()
            state = body["state"]
            f.set_state(sb, state, body.get("errorReason"))
            if state == "starting":
                f.stop_box(sb)
                f.later(sb, float(body.get("after", 0)), lambda: f.start_sandbox(sb)
                        if sb.state != "destroyed" else None)
                sb.starts -= 1  # someone else started it: not a start request
            self.send_json(204, None)
        elif m and m.group(2) == "/vanish":
            f.remove(f.find(m.group(1)))
            self.send_json(204, None)
        elif m and m.group(2) == "/idle_stop":
            sb = f.find(m.group(1))
            v = self.json_body().get("seconds")
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                                  or v < 0):
                raise Reply(400, {"error": "seconds must be a number >= 0 or null"})
            sb.idle_stop_s = float(v) if v else None
            self.send_json(204, None)
        elif m and m.group(2) == "/no_perl":
            hide_perl(f.find(m.group(1)))
            self.send_json(204, None)
        elif m:
            sb = f.find(m.group(1))
            self.send_json(200, {"state": sb.state, "root": sb.box.root,
                                 "running": sb.box.running(), "starts": sb.starts,
                                 "ttlMinutes": sb.ttl, "autoStopInterval": sb.auto_stop,
                                 "labels": sb.labels,
                                 "deadline": sb.created + sb.ttl * MINUTE if sb.ttl else None,
                                 "idle_stops": sb.idle_stops, "activities": sb.activities})
        else:
            raise Reply(404, {"error": "no such control route: " + path})

    # ------------------------------------------------------------ routes
    def route(self, path, query):
        if path.startswith("/api/"):
            return self.api(path[4:], query)
        m = re.fullmatch(r"/toolbox/([^/]+)(/.*)", path)
        if m:
            return self.toolbox(m.group(1), m.group(2), query)
        raise Reply(404, None, {"x-message": "Cannot %s %s" % (self.command, path)})

    def api(self, path, query):
        f = FAKE
        meth = self.command
        if path == "/sandbox" and meth == "POST":
            return self.create()
        if path == "/sandbox" and meth == "GET":
            return self.list(query)
        m = re.fullmatch(r"/sandbox/([^/]+)(?:/(.*))?", path)
        if not m:
            raise Reply(404, None, {"x-message": "Cannot %s /api%s" % (meth, path)})
        sb = f.find(m.group(1))
        action = m.group(2)
        sb.last_activity = time.time()
        if action is None and meth == "GET":
            return self.send_json(200, sb.json(f))
        if action is None and meth == "DELETE":
            f.remove(sb)
            return self.send_json(200, sb.json(f))
        if meth == "POST" and action == "start":
            if sb.state in ("stopped", "archived"):
                f.start_sandbox(sb)
            elif sb.state == "error":
                raise Reply(400, None, {"x-message": "Sandbox is in an errored state: %s"
                                        % (sb.error_reason or "")})
            return self.send_json(200, sb.json(f))
        if meth == "POST" and action == "stop":
            if sb.state not in ("stopped", "archived"):
                f.set_state(sb, "stopped")
            return self.send_json(200, sb.json(f))
        if meth == "POST" and action in ("archive", "pause"):
            if action == "archive" and sb.state != "stopped":
                raise Reply(400, None, {"x-message": "Sandbox is not stopped"})
            f.set_state(sb, "archived" if action == "archive" else "paused")
            if action == "pause":
                sb.box.stop()
            return self.send_json(200, sb.json(f))
        m2 = re.fullmatch(r"(autostop|ttl)/(-?\d+)", action or "")
        if meth == "POST" and m2:
            n = int(m2.group(2))
            if n < 0:
                raise Reply(400, None, {"x-message": "%s must be >= 0" % m2.group(1)})
            if m2.group(1) == "autostop":
                sb.auto_stop = n
            else:
                sb.ttl = n or None
                sb.created = time.time() if n else sb.created
            return self.send_json(200, sb.json(f))
        m3 = re.fullmatch(r"ports/([0-9]+)/preview-url", action or "")
        if meth == "GET" and m3:
            port = int(m3.group(1))
            if not 1 <= port <= 65535:
                raise Reply(400, None, {"x-message": "invalid port %s" % m3.group(1)})
            with f.lock:
                if not getattr(sb, "preview_token", None):
                    sb.preview_token = secrets.token_hex(16)
            return self.send_json(200, {"sandboxId": sb.id,
                                        "url": "https://%d-%s.proxy.daytona.works" % (port, sb.id),
                                        "token": sb.preview_token})
        if meth == "POST" and action == "last-activity":
            sb.activities += 1
            return self.send_json(201, None)
        if meth == "POST" and action == "snapshot":
            body = self.json_body()
            name = body.get("name")
            if not isinstance(name, str) or not name:
                raise Reply(400, None, {"x-message": "name must be a non-empty string"})
            dest = tempfile.mkdtemp(prefix="snap-", dir=f.dir)
            shutil.rmtree(dest)
            shutil.copytree(sb.box.root, dest, symlinks=True)
            with f.lock:
                f.snapshots[name] = dest
            return self.send_json(200, sb.json(f))
        if meth == "PUT" and action == "labels":
            body = self.json_body()
            sb.labels = dict(body.get("labels") or {})
            return self.send_json(200, {"labels": sb.labels})
        raise Reply(404, None, {"x-message": "Cannot %s /api%s" % (meth, path)})

    def create(self):
        f = FAKE
        body = self.json_body()
        if not isinstance(body, dict):
            raise Reply(400, None, {"x-message": "body must be an object"})
        for k in ("cpu", "memory", "disk", "gpu", "autoStopInterval", "autoArchiveInterval",
                  "autoDeleteInterval", "ttlMinutes"):
            if k in body and (not isinstance(body[k], int) or isinstance(body[k], bool)):
                raise Reply(400, None, {"x-message": "%s must be an integer number" % k})
        for k in ("env", "labels"):
            if k in body and not (isinstance(body[k], dict)
                                  and all(isinstance(v, str) for v in body[k].values())):
                raise Reply(400, None, {"x-message": "%s must be an object of strings" % k})
        if body.get("cpu", 1) > MAX_CPU or body.get("cpu", 1) < 1:
            raise Reply(400, None, {"x-message": "CPU request %d exceeds maximum allowed per "
                                    "sandbox (%d)" % (body["cpu"], MAX_CPU)})
        if body.get("memory", 1) > MAX_MEMORY_GB or body.get("memory", 1) < 1:
            raise Reply(400, None, {"x-message": "Memory request %dGB exceeds maximum allowed "
                                    "per sandbox (%dGB)" % (body["memory"], MAX_MEMORY_GB)})
        if body.get("disk", 3) > MAX_DISK_GB or body.get("disk", 3) < 1:
            raise Reply(400, None, {"x-message": "Disk request %dGB exceeds maximum allowed "
                                    "per sandbox (%dGB)" % (body["disk"], MAX_DISK_GB)})
        if body.get("gpu", 0):
            raise Reply(400, None, {"x-message": "No available runners with GPU"})
        if "ttlMinutes" in body and body["ttlMinutes"] < 1:
            raise Reply(400, None, {"x-message": "ttlMinutes must be at least 1"})
        snap = body.get("snapshot")
        if snap is not None and snap not in f.snapshots:
            raise Reply(404, None, {"x-message": "Snapshot %s not found" % snap})
        with f.lock:
            if body.get("name") and any(s.name == body["name"] for s in f.sandboxes.values()):
                raise Reply(409, None, {"x-message": "Sandbox with name %s already exists"
                                        % body["name"]})
        sb = Sandbox(f, body)
        if snap is not None:
            shutil.rmtree(sb.box.root)
            shutil.copytree(f.snapshots[snap], sb.box.root, symlinks=True)
        try:
            sb.box.start(not body.get("networkBlockAll", False))
        except OSError as e:
            sb.box.delete()
            raise Reply(500, None, {"x-message": "sandbox failed to start: %s" % e})
        with f.lock:
            f.sandboxes[sb.id] = sb
        pending = float(f.config.get("create_pending", 0))
        if pending > 0:
            sb.state = "creating"

            def ready():
                if sb.state == "creating":
                    sb.state = "started"
            f.later(sb, pending, ready)
        self.send_json(200, sb.json(f))

    def list(self, query):
        f = FAKE
        labels = q1(query, "labels")
        want = {}
        if labels:
            try:
                want = json.loads(labels)
            except ValueError:
                raise Reply(400, None, {"x-message": "labels must be a JSON object"})
        states = [s for s in (q1(query, "states") or "").split(",") if s]
        limit = int(q1(query, "limit", "100"))
        if limit < 1 or limit > 200:
            raise Reply(400, None, {"x-message": "limit must not be greater than 200"})
        cursor = int(q1(query, "cursor", "0") or 0)
        with f.lock:
            items = sorted(f.sandboxes.values(), key=lambda s: (s.created, s.id))
        items = [s for s in items
                 if all(s.labels.get(k) == v for k, v in want.items())
                 and (not states or s.state in states)
                 and (not q1(query, "name") or s.name == q1(query, "name"))]
        page = items[cursor:cursor + limit]
        nxt = str(cursor + limit) if cursor + limit < len(items) else None
        self.send_json(200, {"items": [s.json(f) for s in page], "nextCursor": nxt})

    # ------------------------------------------------------------ toolbox
    def toolbox(self, sid, path, query):
        f = FAKE
        # The body is read whatever the answer, as the daemon's HTTP server
        # does, so that the next request on a kept-alive connection starts
        # where it should.
        self.body_bytes()
        try:
            sb = f.find(sid)
        except Reply:
            raise Reply(404, None, {"x-message": "sandbox %s not found" % sid})
        sb.last_activity = time.time()
        if sb.state != "started" or not sb.box.running():
            self.body_bytes()
            raise Reply(400, None, {"x-message": NOT_STARTED})
        meth = self.command
        if path == "/process/execute" and meth == "POST":
            return self.execute(sb)
        if path == "/process/session" and meth == "POST":
            body = self.json_body()
            s = body.get("sessionId")
            if not isinstance(s, str) or not s:
                raise Reply(400, None, {"x-message": "sessionId is required"})
            if s in sb.sessions:
                raise Reply(409, None, {"x-message": "session %s already exists" % s})
            sb.sessions[s] = {}
            return self.send_json(201, None)
        m = re.fullmatch(r"/process/session/([^/]+)(/exec|/command/([^/]+)(/logs)?)?", path)
        if m:
            sess = sb.sessions.get(m.group(1))
            if sess is None:
                raise Reply(404, None, {"x-message": "session %s not found" % m.group(1)})
            if m.group(2) is None and meth == "DELETE":
                for c in sess.values():
                    if c.exit_code is None and hasattr(c, "popen"):
                        sb.box.kill_command(c.popen)
                del sb.sessions[m.group(1)]
                return self.send_json(204, None)
            if m.group(2) is None and meth == "GET":
                return self.send_json(200, {"sessionId": m.group(1), "commands": [
                    {"id": c.id, "command": c.command, "exitCode": c.exit_code}
                    for c in sess.values()]})
            if m.group(2) == "/exec" and meth == "POST":
                return self.session_exec(sb, sess)
            if m.group(3) and meth == "GET":
                c = sess.get(m.group(3))
                if c is None:
                    raise Reply(404, None, {"x-message": "command %s not found" % m.group(3)})
                if m.group(4):
                    return self.logs(sb, c, q1(query, "follow") == "true")
                return self.send_json(200, {"id": c.id, "command": c.command,
                                            "exitCode": c.exit_code})
        if path == "/process/pty" or path.startswith("/process/pty/"):
            return self.pty(sb, path, meth)
        if path == "/files" and meth == "GET":
            return self.list_files(sb, query)
        if path == "/files" and meth == "DELETE":
            host = self.host(sb, q1(query, "path"))
            if not os.path.lexists(host):
                raise Reply(404, None, {"x-message": "file not found"})
            if os.path.isdir(host) and not os.path.islink(host):
                if q1(query, "recursive") == "true":
                    shutil.rmtree(host)
                else:
                    try:
                        os.rmdir(host)
                    except OSError as e:
                        raise Reply(400, None, {"x-message": str(e)})
            else:
                os.unlink(host)
            return self.send_json(204, None)
        if path == "/files/info" and meth == "GET":
            p = q1(query, "path")
            host = self.host(sb, p)
            if not os.path.lexists(host):
                raise Reply(404, None, {"x-message": "file not found: %s" % p})
            return self.send_json(200, file_info(host, p))
        if path == "/files/download" and meth == "GET":
            p = q1(query, "path")
            host = self.host(sb, p)
            if not os.path.exists(host):
                raise Reply(404, None, {"x-message": "file not found: %s" % p})
            if os.path.isdir(host):
                raise Reply(400, None, {"x-message": "path is a directory: %s" % p})
            with open(host, "rb") as fh:
                data = fh.read()
            return self.send_bytes(200, data)
        if path == "/files/upload" and meth == "POST":
            p = q1(query, "path")
            host = self.host(sb, p)
            parts = parse_multipart(self.headers.get("Content-Type"), self.body_bytes())
            files = [d for (n, _fn, d) in parts if n == "file"]
            if not files:
                raise Reply(400, None, {"x-message": "multipart field file is missing"})
            self.put(host, files[0])
            return self.send_json(200, None)
        if path == "/files/bulk-upload" and meth == "POST":
            parts = parse_multipart(self.headers.get("Content-Type"), self.body_bytes())
            paths, datas = {}, {}
            for (n, _fn, d) in parts:
                m2 = re.fullmatch(r"files\[(\d+)\]\.(path|file)", n or "")
                if m2 and m2.group(2) == "path":
                    paths[m2.group(1)] = d.decode("utf-8", "surrogateescape")
                elif m2:
                    datas[m2.group(1)] = d
            if not paths or set(paths) != set(datas):
                raise Reply(400, None, {"x-message": "each files[i] needs a path and a file"})
            for i in sorted(paths, key=int):
                self.put(self.host(sb, paths[i]), datas[i])
            return self.send_json(200, None)
        if path == "/files/folder" and meth == "POST":
            host = self.host(sb, q1(query, "path"))
            mode = int(q1(query, "mode", "0755"), 8)
            os.makedirs(host, exist_ok=True)
            os.chmod(host, mode)
            return self.send_json(201, None)
        if path == "/files/move" and meth == "POST":
            src = self.host(sb, q1(query, "source"))
            dst = self.host(sb, q1(query, "destination"))
            if not os.path.lexists(src):
                raise Reply(404, None, {"x-message": "file not found"})
            os.rename(src, dst)
            return self.send_json(200, None)
        raise Reply(404, None, {"x-message": "Cannot %s %s" % (meth, path)})

    @staticmethod
    def host(sb, p):
        if p is None or p == "":
            raise Reply(400, None, {"x-message": "path is required"})
        if not p.startswith("/"):
            p = WORKDIR + "/" + p
        host = sb.box.host_path(p)
        if host is None:
            raise Reply(400, None, {"x-message": "invalid path: %s" % p})
        return host

    @staticmethod
    def put(host, data):
        if os.path.isdir(host):
            raise Reply(400, None, {"x-message": "path is a directory"})
        os.makedirs(os.path.dirname(host), exist_ok=True)
        with open(host, "wb") as fh:
            fh.write(data)

    def list_files(self, sb, query):
        p = q1(query, "path") or "/"
        host = self.host(sb, p)
        if not os.path.exists(host):
            raise Reply(404, None, {"x-message": "directory not found: %s" % p})
        if not os.path.isdir(host):
            raise Reply(400, None, {"x-message": "not a directory: %s" % p})
        depth = int(q1(query, "depth", "1") or 1)
        out = []

        def walk(h, sp, d):
            for name in sorted(os.listdir(h)):
                hp = os.path.join(h, name)
                spp = sp.rstrip("/") + "/" + name
                out.append(file_info(hp, spp))
                if d > 1 and os.path.isdir(hp) and not os.path.islink(hp):
                    walk(hp, spp, d - 1)
        walk(host, p, depth)
        self.send_json(200, out)

    def execute(self, sb):
        body = self.json_body()
        cmd = body.get("command")
        if not isinstance(cmd, str):
            raise Reply(400, None, {"x-message": "command is required"})
        cwd = body.get("cwd") or WORKDIR
        envs = body.get("envs") or {}
        timeout = body.get("timeout")
        host = sb.box.host_path(cwd)
        if host is None or not os.path.isdir(host):
            return self.send_json(200, {"exitCode": -1,
                                        "result": "chdir %s: no such file or directory" % cwd})
        env = dict(sb.env)
        env.update(envs)
        p = sb.box.popen(["/bin/sh"], env=env, cwd=cwd, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(cmd.encode(), timeout=timeout if timeout else None)
        except subprocess.TimeoutExpired:
            sb.box.kill_command(p)
            p.communicate()
            sb.box.forget(p)
            raise Reply(408, None, {"x-message": "command execution timeout"})
        sb.box.forget(p)
        code = p.returncode
        if code < 0:
            code = 128 - code
        self.send_json(200, {"exitCode": code, "result": go_text(out)})

    def pty(self, sb, path, meth):
        """The daemon's PTY sessions (toolbox/process/pty)."""
        if path == "/process/pty" and meth == "GET":
            return self.send_json(200, {"sessions": [p.info() for p in sb.ptys.values()]})
        if path == "/process/pty" and meth == "POST":
            body = self.json_body()
            pid = body.get("id")
            if not isinstance(pid, str) or not pid:
                raise Reply(400, None, {"x-message": "session ID is required"})
            if pid in sb.ptys:
                raise Reply(409, None, {"x-message": "PTY session with ID '%s' already exists"
                                        % pid})
            for k in ("cols", "rows"):
                v = body.get(k)
                if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                    raise Reply(400, None, {"x-message": "invalid value for %s" % k})
                if v is not None and v > 1000:
                    raise Reply(400, None, {"x-message": "invalid value for %s - must be less "
                                            "than 1000" % k})
            envs = body.get("envs") or {}
            if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
                raise Reply(400, None, {"x-message": "envs must be an object of strings"})
            cwd = body.get("cwd") or WORKDIR
            hp = sb.box.host_path(cwd)
            if not hp or not os.path.isdir(hp):
                raise Reply(500, None, {"x-message": "failed to start PTY session"})
            p = PtySession(sb, body)
            sb.ptys[pid] = p
            if not body.get("lazyStart"):
                try:
                    p.start()
                except nsbox.SandboxGone:
                    sb.ptys.pop(pid, None)
                    raise Reply(500, None, {"x-message": "failed to start PTY session"})
            return self.send_json(201, {"sessionId": pid})
        m = re.fullmatch(r"/process/pty/([^/]+)(/connect|/resize)?", path)
        if not m:
            raise Reply(404, None, {"x-message": "no route for %s %s" % (meth, path)})
        p = sb.ptys.get(m.group(1))
        if m.group(2) == "/connect" and meth == "GET":
            return self.pty_connect(p)
        if p is None:
            raise Reply(404, None, {"x-message": "PTY session not found"})
        if m.group(2) is None and meth == "GET":
            return self.send_json(200, p.info())
        if m.group(2) is None and meth == "DELETE":
            p.kill()
            return self.send_json(200, {"message": "PTY session deleted"})
        if m.group(2) == "/resize" and meth == "POST":
            body = self.json_body()
            cols, rows = body.get("cols"), body.get("rows")
            for k, v in (("cols", cols), ("rows", rows)):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v > 1000:
                    raise Reply(400, None, {"x-message": "%s must be in [1, 1000], not %r"
                                            % (k, v)})
            if not p.active:
                raise Reply(410, None, {"x-message": "PTY session '%s' has terminated and "
                                        "cannot be resized" % p.id})
            p.resize(cols, rows)
            return self.send_json(200, p.info())
        raise Reply(405, None, {"x-message": "method %s not allowed" % meth})

    def pty_connect(self, p):
        why = fakews.upgrade_error(self)
        if why is not None:
            raise Reply(400, None, {"x-message": why})
        ws = fakews.WebSocket(self)
        if p is None or (p.started and not p.active):
            ws.close(1000, json.dumps({"error": "PTY session not found"}))
            return
        with p.lock:
            p.clients.append(ws)
        ws.send_text(json.dumps({"type": "control", "status": "connected"}))
        try:
            p.start()
        except nsbox.SandboxGone:
            p.finish(-1)
            return
        try:
            while True:
                _op, data = ws.recv()
                try:
                    p.type(data)
                except OSError:
                    pass
        except fakews.Closed:
            pass
        with p.lock:
            if ws in p.clients:
                p.clients.remove(ws)

    def session_exec(self, sb, sess):
        body = self.json_body()
        cmd = body.get("command")
        if not isinstance(cmd, str):
            raise Reply(400, None, {"x-message": "command is required"})
        run_async = bool(body.get("runAsync", body.get("async", False)))
        c = Command(str(uuid.uuid4()), cmd)
        sess[c.id] = c
        # The script reaches the shell without a command line on the host,
        # where `ps` would show what it exports, and without a process of
        # its own, as the daemon writes it to a file its session's shell
        # sources: in the environment of the command's shell (readable by
        # root alone, unset before it runs, so its commands do not inherit
        # it), or, beyond what one environment string may hold, through a
        # pipe the shell reads whole before the command gets /dev/null as
        # its stdin.
        data = cmd.encode("utf-8", "surrogateescape")
        if len(data) <= SCRIPT_IN_ENV_MAX and b"\0" not in data:
            env = dict(sb.env)
            env["SBX_FAKE_SCRIPT"] = data
            p = sb.box.popen(["/bin/sh", "-c",
                              'eval "unset SBX_FAKE_SCRIPT\n$SBX_FAKE_SCRIPT"'],
                             env=env, cwd=WORKDIR, stdin=subprocess.DEVNULL)
        else:
            rd, wr = os.pipe()
            try:
                p = sb.box.popen(["/bin/sh", "-c", 'eval "exec </dev/null\n$(cat)"'],
                                 env=sb.env, cwd=WORKDIR, stdin=rd)
            finally:
                os.close(rd)

            def feed():
                try:
                    os.write(wr, data)
                except OSError:
                    pass
                finally:
                    os.close(wr)
            threading.Thread(target=feed, daemon=True).start()
        c.popen = p

        def sink(prefix):
            def emit(data):
                with c.cond:
                    c.chunks.append((prefix, data))
                    c.cond.notify_all()
            return emit

        pumps = [nsbox.OutputPump(p.stdout, sink(STDOUT_PREFIX), close=True),
                 nsbox.OutputPump(p.stderr, sink(STDERR_PREFIX), close=True)]

        def finish():
            # The command's end: what it wrote is read to the end, a
            # background child that holds the pipes is not waited for
            # (its later bytes are dropped).
            code = p.wait()
            for t in pumps:
                t.finish()
            sb.box.forget(p)
            with c.cond:
                c.exit_code = 128 - code if code < 0 else code
                c.cond.notify_all()
        if run_async:
            threading.Thread(target=finish, daemon=True).start()
            return self.send_json(202, {"cmdId": c.id})
        finish()
        if sb.state != "started":
            # The sandbox was stopped or deleted while the command ran: the
            # daemon that held this request died with it (the command was
            # killed with it), so no answer comes; the connection is cut.
            self.close_connection = True
            return
        out = b"".join(d for (pr, d) in c.chunks if pr == STDOUT_PREFIX)
        err = b"".join(d for (pr, d) in c.chunks if pr == STDERR_PREFIX)
        both = b"".join(d for (_pr, d) in c.chunks)
        if (not self.headers.get("X-Daytona-SDK-Version")
                and self.headers.get("X-Daytona-Split-Output") != "true"):
            # A client that names no SDK version and does not ask for the
            # streams apart gets them merged (pkg/session/common.go
            # IsCombinedOutput).
            return self.send_json(200, {"cmdId": c.id, "exitCode": c.exit_code,
                                        "output": go_text(both)})
        self.send_json(200, {"cmdId": c.id, "exitCode": c.exit_code,
                             "stdout": go_text(out),
                             "stderr": go_text(err),
                             "output": go_text(both)})

    def logs(self, sb, c, follow):
        if not follow:
            with c.cond:
                data = b"".join(pr + d for (pr, d) in c.chunks)
            return self.send_bytes(200, data, "text/plain")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200
        sent = 0
        while True:
            with c.cond:
                while sent == len(c.chunks) and c.exit_code is None:
                    c.cond.wait(1.0)
                new = c.chunks[sent:]
                sent = len(c.chunks)
                ended = c.exit_code is not None and sent == len(c.chunks)
            for (pr, d) in new:
                piece = pr + d
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            if ended:
                break
        if sb.state != "started":
            # Stopped or deleted while the command ran: the daemon died
            # with its sandbox, the stream is cut without its last chunk.
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")


def main():
    global FAKE
    FAKE = DaytonaFake()
    fakehttp.serve(FAKE, DaytonaHandler)


if __name__ == "__main__":
    main()
