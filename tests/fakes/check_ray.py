#!/usr/bin/python3
"""Drives the Ray Jobs API contract fake (tests/fakes/ray.py) over HTTP and
checks the exact answers the contract gives: /api/version, a submit with a
client submission_id (and a generated "raysubmit_" id), JobDetails with its
status and driver_exit_code, the merged stdout and stderr of the job's
log, runtime_env env_vars reaching the entrypoint, a working_dir package
as its working directory, stop (SIGTERM to the entrypoint) and STOPPED,
DELETE of terminal jobs only, a job whose resources the node lacks staying
PENDING, the log tail over a WebSocket closed at the job's end, a log that
lags its job's end (log_lag_s), text/plain errors (404, 400 for a bad type
and for a submission_id in use) and the token (401 without, 403 with
another). The fake is started on an ephemeral port and stopped by its PID;
afterwards no process of it and no directory of it is left. Prints TAP.
"""

import base64
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
KEY = "ray-check-token-456"

results = []


def check(name, cond, detail=""):
    results.append((bool(cond), name, detail))
    return bool(cond)


def eq(name, got, want):
    return check(name, got == want, "got %r, want %r" % (got, want))


class Fake:
    def __init__(self, tmpdir):
        e = dict(os.environ)
        e["TMPDIR"] = tmpdir
        e["SBX_FAKE_API_KEY"] = KEY
        e.pop("SBX_FAKE_RAY_RESOURCES", None)
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "ray.py")],
                                     stdout=subprocess.PIPE, env=e)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise SystemExit("Bail out! ray.py did not start: %r" % line)
        self.port = int(line.split()[1])
        self.base = "http://127.0.0.1:%d" % self.port

    def req(self, method, path, body=None, raw=None, auth="Bearer " + KEY):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {}
        if auth:
            h["Authorization"] = auth
        if body is not None:
            h["Content-Type"] = "application/json"
        r = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type")

    def json(self, method, path, body=None, **kw):
        st, data, _ = self.req(method, path, body, **kw)
        try:
            return st, (json.loads(data) if data else None)
        except ValueError:
            return st, data

    def wait(self, sid, statuses=("SUCCEEDED", "FAILED", "STOPPED"), secs=30):
        end = time.time() + secs
        while True:
            st, j = self.json("GET", "/api/jobs/" + sid)
            if st == 200 and j["status"] in statuses:
                return j
            if time.time() > end:
                return j
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def ws_tail(port, sid):
    """The text frames of /api/jobs/{sid}/logs/tail until the server's
    close frame: (the joined text, whether a close frame came)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET /api/jobs/%s/logs/tail HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
               "Authorization: Bearer %s\r\n\r\n" % (sid, key, KEY)).encode())
    f = s.makefile("rb")
    status = f.readline()
    headers = {}
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                                         .encode()).digest()).decode()
    ok = status.startswith(b"HTTP/1.1 101") and headers.get("sec-websocket-accept") == want
    text, closed = b"", False
    while ok:
        h = f.read(2)
        if len(h) < 2:
            break
        op, n = h[0] & 0x0F, h[1] & 0x7F
        if n == 126:
            n = int.from_bytes(f.read(2), "big")
        elif n == 127:
            n = int.from_bytes(f.read(8), "big")
        payload = f.read(n)
        if op == 0x1:
            text += payload
        elif op == 0x8:
            closed = True
            break
    s.close()
    return ok, text.decode(), closed


def main():
    tmp = tempfile.mkdtemp(prefix="check-ray-")
    fake = Fake(tmp)
    try:
        run(fake)
    finally:
        fake.stop()
    left = [n for n in os.listdir(tmp)]
    check("no directory of the fake is left", not left, "left: %r" % left)
    shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % len(results))
    bad = 0
    for i, (ok, name, detail) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
        if not ok:
            bad += 1
            print("# " + detail.replace("\n", "\n# "))
    return 1 if bad else 0


def run(f):
    st, j = f.json("GET", "/api/version")
    eq("version", (st, j.get("version"), sorted(j)),
       (200, "5", ["ray_commit", "ray_version", "session_name", "version"]))

    # Auth: none is 401, another token 403, both text/plain.
    st, data, ct = f.req("GET", "/api/jobs/", auth=None)
    eq("no token: 401 text", (st, data, ct),
       (401, b"Unauthorized: missing authentication token", "text/plain; charset=utf-8"))
    st, data, ct = f.req("GET", "/api/jobs/", auth="Bearer nope")
    eq("another token: 403", (st, data), (403, b"Forbidden: invalid authentication token"))

    # A job: merged log, env_vars, exit code.
    st, j = f.json("POST", "/api/jobs/", {
        "entrypoint": "echo out; echo err >&2; echo \"$GREETING\"; exit 3",
        "submission_id": "check-1", "runtime_env": {"env_vars": {"GREETING": "hi there"}},
        "metadata": {"k": "v"}})
    eq("submit answers both ids", (st, j), (200, {"submission_id": "check-1",
                                                  "job_id": "check-1"}))
    d = f.wait("check-1")
    eq("a failed job", (d["status"], d["driver_exit_code"], d["type"], d["metadata"],
                        d["error_type"]),
       ("FAILED", 3, "SUBMISSION", {"k": "v"}, "JOB_ENTRYPOINT_COMMAND_ERROR"))
    check("its message names the exit code",
          d["message"].startswith("Job entrypoint command failed with exit code 3"),
          d["message"])
    st, j = f.json("GET", "/api/jobs/check-1/logs")
    eq("stdout and stderr merged in one log", (st, j), (200, {"logs": "out\nerr\nhi there\n"}))
    st, data, ct = f.req("POST", "/api/jobs/", {"entrypoint": "true",
                                                "submission_id": "check-1"})
    eq("a submission_id in use: 400 text", (st, data, ct),
       (400, b"Job with submission_id check-1 already exists. Please use a different "
             b"submission_id.", "text/plain; charset=utf-8"))
    st, data, _ = f.req("POST", "/api/jobs/", {"entrypoint": "true",
                                               "entrypoint_num_cpus": "two"})
    eq("a bad type: 400", (st, data),
       (400, b"entrypoint_num_cpus must be a number, got str"))

    # A generated id; a job that succeeds.
    st, j = f.json("POST", "/api/jobs/", {"entrypoint": "printf ok"})
    sid = j["submission_id"]
    check("a generated id is raysubmit_ and 16 letters and digits",
          sid.startswith("raysubmit_") and len(sid) == 26 and sid[10:].isalnum(), sid)
    d = f.wait(sid)
    eq("a job that succeeds", (d["status"], d["driver_exit_code"], d["message"]),
       ("SUCCEEDED", 0, "Job finished successfully."))

    # The log tail over a WebSocket: every line, then the close.
    st, j = f.json("POST", "/api/jobs/", {"entrypoint": "echo a; sleep 0.3; echo b",
                                          "submission_id": "check-tail"})
    ok, text, closed = ws_tail(f.port, "check-tail")
    eq("tail: the upgrade, the whole log, the close", (ok, text, closed), (True, "a\nb\n", True))

    # A working_dir package is the entrypoint's working directory.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.txt", "from the package\n")
    st, _, _ = f.req("GET", "/api/packages/gcs/_ray_pkg_check.zip")
    eq("a missing package: 404", st, 404)
    st, _, _ = f.req("PUT", "/api/packages/gcs/_ray_pkg_check.zip", raw=buf.getvalue())
    eq("package PUT", st, 200)
    st, _, _ = f.req("GET", "/api/packages/gcs/_ray_pkg_check.zip")
    eq("the package is there", st, 200)
    f.json("POST", "/api/jobs/", {"entrypoint": "cat data.txt",
                                  "submission_id": "check-pkg",
                                  "runtime_env": {"working_dir": "gcs://_ray_pkg_check.zip"}})
    d = f.wait("check-pkg")
    st, j = f.json("GET", "/api/jobs/check-pkg/logs")
    eq("the package's files in the working directory", (d["status"], j["logs"]),
       ("SUCCEEDED", "from the package\n"))

    # stop: SIGTERM to the entrypoint; STOPPED; DELETE of terminal jobs only.
    f.json("POST", "/api/jobs/", {"entrypoint": "trap 'echo term; exit 143' TERM; "
                                                "echo up; sleep 30 & wait",
                                  "submission_id": "check-stop"})
    f.wait("check-stop", statuses=("RUNNING",))
    end = time.time() + 10
    while f.json("GET", "/api/jobs/check-stop/logs")[1]["logs"] != "up\n" and time.time() < end:
        time.sleep(0.05)
    st, data, ct = f.req("DELETE", "/api/jobs/check-stop")
    eq("DELETE of a running job: 400", (st, data),
       (400, b"Attempted to delete job with id 'check-stop', but it is in a non-terminal "
             b"state RUNNING."))
    st, j = f.json("POST", "/api/jobs/check-stop/stop")
    eq("stop", (st, j), (200, {"stopped": True}))
    d = f.wait("check-stop")
    eq("a stopped job", (d["status"], d["driver_exit_code"], d["message"]),
       ("STOPPED", -15, "Job was intentionally stopped."))
    end = time.time() + 10
    while (f.json("GET", "/api/jobs/check-stop/logs")[1]["logs"] != "up\nterm\n"
           and time.time() < end):
        time.sleep(0.05)
    eq("its trap ran", f.json("GET", "/api/jobs/check-stop/logs")[1]["logs"], "up\nterm\n")
    st, j = f.json("POST", "/api/jobs/check-stop/stop")
    eq("stop of a stopped job", (st, j), (200, {"stopped": False}))
    st, j = f.json("DELETE", "/api/jobs/check-stop")
    eq("DELETE", (st, j), (200, {"deleted": True}))
    st, data, ct = f.req("GET", "/api/jobs/check-stop")
    eq("a deleted job: 404 text", (st, data, ct),
       (404, b"Job check-stop does not exist", "text/plain; charset=utf-8"))

    # Resources the node lacks: PENDING until stopped.
    f.json("POST", "/api/jobs/", {"entrypoint": "echo never", "submission_id": "check-big",
                                  "entrypoint_num_gpus": 8})
    time.sleep(0.3)
    st, d = f.json("GET", "/api/jobs/check-big")
    eq("more GPUs than the node has: PENDING", (d["status"], d["job_id"], d["driver_info"]),
       ("PENDING", None, None))
    f.json("POST", "/api/jobs/check-big/stop")
    d = f.wait("check-big")
    eq("a pending job stops", (d["status"], f.json("GET", "/api/jobs/check-big/logs")[1]),
       ("STOPPED", {"logs": ""}))

    # A log that lags its job's end: the last line shows log_lag_s later.
    st, _, _ = f.req("POST", "/_fake/config", {"log_lag_s": 1.0}, auth=None)
    f.json("POST", "/api/jobs/", {"entrypoint": "echo one; echo two",
                                  "submission_id": "check-lag"})
    f.wait("check-lag")
    eq("the last line held back", f.json("GET", "/api/jobs/check-lag/logs")[1],
       {"logs": "one\n"})
    time.sleep(1.1)
    eq("and there later", f.json("GET", "/api/jobs/check-lag/logs")[1], {"logs": "one\ntwo\n"})
    f.req("POST", "/_fake/config", {"log_lag_s": 0}, auth=None)

    st, j = f.json("GET", "/api/jobs/")
    eq("the list holds the jobs not deleted",
       sorted(x["submission_id"] for x in j if x["submission_id"].startswith("check-")),
       ["check-1", "check-big", "check-lag", "check-pkg", "check-tail"])
    st, data, ct = f.req("GET", "/api/jobs/nope/logs")
    eq("logs of an unknown job: 404", (st, data), (404, b"Job nope does not exist"))


if __name__ == "__main__":
    sys.exit(main())
