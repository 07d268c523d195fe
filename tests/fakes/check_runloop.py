#!/usr/bin/python3
"""Drives the Runloop contract fake (tests/fakes/runloop.py) over HTTP and
checks the exact answers the contract gives: the devbox routes and their
DevboxView fields, wait_for_status with its 408 when the hold ends, execute
with a client command_id (the same id answers the same execution, and the
command runs once), the execution wait, the file routes (multipart upload,
raw download, 404 for a missing file), disk snapshots restored by a create,
suspend/resume, shutdown as the end (no DELETE), list pages with has_more and
starting_after, the error body, and the Bearer key. The fake is started on
an ephemeral port and stopped by its PID; afterwards no process of it and no
devbox directory is left. Prints TAP.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
KEY = "runloop-check-key-789"
ALL = bytes(range(256)) * 1024        # 256 KiB of every byte value

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
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "runloop.py")],
                                     stdout=subprocess.PIPE, env=e)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise SystemExit("Bail out! runloop.py did not start: %r" % line)
        self.base = "http://127.0.0.1:%d" % int(line.split()[1])

    def req(self, method, path, body=None, raw=None, ctype=None, auth=True):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {}
        if auth:
            h["Authorization"] = "Bearer " + KEY
        if body is not None:
            h["Content-Type"] = "application/json"
        if ctype:
            h["Content-Type"] = ctype
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

    def upload(self, dbx, path, data):
        bnd = "check-boundary-1"
        raw = (b"--" + bnd.encode() + b"\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n"
               + path.encode() + b"\r\n--" + bnd.encode()
               + b"\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
               + b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--"
               + bnd.encode() + b"--\r\n")
        return self.json("POST", "/v1/devboxes/%s/upload_file" % dbx, raw=raw,
                         ctype="multipart/form-data; boundary=" + bnd)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


def run(tmpdir):
    P = "runloop "
    f = Fake(tmpdir)
    st, b = f.json("GET", "/v1/devboxes", auth=False)
    eq(P + "no key is 401 with a message", (st, b), (401, {"message": "Unauthorized"}))
    st, b = f.json("POST", "/v1/devboxes", {"frob": 1})
    eq(P + "unknown create field is 400", (st, b), (400, {"message": "unknown field frob"}))
    st, b = f.json("POST", "/v1/devboxes", {"launch_parameters": {"resource_size_request": "HUGE"}})
    eq(P + "unknown size is 400", st, 400)
    body = {"metadata": {"sbx_backend": "runloop", "k": "v"},
            "environment_variables": {"GREETING": "hello there"},
            "launch_parameters": {"resource_size_request": "MEDIUM",
                                  "keep_alive_time_seconds": 600}}
    st, d = f.json("POST", "/v1/devboxes", body)
    eq(P + "create 200", st, 200)
    dbx = d["id"]
    check(P + "id is dbx_", dbx.startswith("dbx_"), dbx)
    eq(P + "create view fields", (d["status"], d["metadata"], d["launch_parameters"]),
       ("provisioning", body["metadata"], body["launch_parameters"]))
    st, d = f.json("POST", "/v1/devboxes/%s/wait_for_status" % dbx,
                   {"statuses": ["running"], "timeout_seconds": 10})
    eq(P + "wait for running", (st, d["status"]), (200, "running"))
    st, d = f.json("POST", "/v1/devboxes/%s/wait_for_status" % dbx,
                   {"statuses": ["suspended"], "timeout_seconds": 31})
    eq(P + "a hold over 30 s is 400", st, 400)
    st, d = f.json("POST", "/v1/devboxes/%s/wait_for_status" % dbx,
                   {"statuses": ["suspended"], "timeout_seconds": 0})
    eq(P + "a hold that ends is 408", st, 408)
    cmd = {"command": "echo $GREETING; echo e >&2; echo x >> /tmp/n; pwd; exit 5",
           "command_id": "0190a0b0-0000-7000-8000-000000000001", "optimistic_timeout": 10}
    st, e = f.json("POST", "/v1/devboxes/%s/execute" % dbx, cmd)
    eq(P + "execute completes", (st, e["status"], e["exit_status"], e["stdout"], e["stderr"]),
       (200, "completed", 5, "hello there\n/home/user\n", "e\n"))
    st, e2 = f.json("POST", "/v1/devboxes/%s/execute" % dbx, cmd)
    eq(P + "the same command_id answers the same execution",
       (st, e2["execution_id"]), (200, e["execution_id"]))
    st, e3 = f.json("POST", "/v1/devboxes/%s/execute" % dbx,
                    {"command": "cat /tmp/n", "optimistic_timeout": 10})
    eq(P + "it ran once", e3["stdout"], "x\n")
    st, e = f.json("POST", "/v1/devboxes/%s/execute" % dbx,
                   {"command": "sleep 1; echo late", "command_id": "c-2",
                    "optimistic_timeout": 0})
    eq(P + "a running execution", (st, e["status"], "exit_status" in e), (200, "running", False))
    st, w = f.json("POST", "/v1/devboxes/%s/executions/%s/wait_for_status"
                   % (dbx, e["execution_id"]), {"statuses": ["completed"], "timeout_seconds": 0})
    eq(P + "its wait that ends is 408", st, 408)
    st, w = f.json("POST", "/v1/devboxes/%s/executions/%s/wait_for_status"
                   % (dbx, e["execution_id"]), {"statuses": ["completed"], "timeout_seconds": 10})
    eq(P + "its wait completes", (st, w["status"], w["stdout"]), (200, "completed", "late\n"))
    st, b = f.json("POST", "/v1/devboxes/%s/execute" % dbx,
                   {"command": "true", "optimistic_timeout": 26})
    eq(P + "optimistic_timeout over 25 is 400", st, 400)
    st, b = f.upload(dbx, "/tmp/all.bin", ALL)
    eq(P + "upload_file 200", st, 200)
    st, raw, ct = f.req("POST", "/v1/devboxes/%s/download_file" % dbx, {"path": "/tmp/all.bin"})
    eq(P + "download_file is the bytes", (st, raw == ALL, ct), (200, True,
                                                              "application/octet-stream"))
    st, b = f.json("POST", "/v1/devboxes/%s/download_file" % dbx, {"path": "/tmp/none"})
    eq(P + "a missing file is 404", (st, b), (404, {"message": "file not found: /tmp/none"}))
    st, b = f.json("POST", "/v1/devboxes/%s/write_file_contents" % dbx,
                   {"file_path": "rel.txt", "contents": "text\n"})
    st, raw, _ = f.req("POST", "/v1/devboxes/%s/read_file_contents" % dbx,
                       {"file_path": "/home/user/rel.txt"})
    eq(P + "relative paths are from home", (st, raw), (200, b"text\n"))
    st, s = f.json("POST", "/v1/devboxes/%s/snapshot_disk" % dbx, {"name": "s1"})
    check(P + "snapshot id", st == 200 and s["id"].startswith("snp_")
          and s["source_devbox_id"] == dbx, repr(s))
    st, d2 = f.json("POST", "/v1/devboxes", {"snapshot_id": s["id"]})
    f.json("POST", "/v1/devboxes/%s/wait_for_status" % d2["id"],
           {"statuses": ["running"], "timeout_seconds": 10})
    st, e = f.json("POST", "/v1/devboxes/%s/execute" % d2["id"],
                   {"command": "cat rel.txt", "optimistic_timeout": 10})
    eq(P + "a create from the snapshot has its files", e.get("stdout"), "text\n")
    st, d = f.json("POST", "/v1/devboxes/%s/suspend" % dbx)
    eq(P + "suspend", (st, d["status"]), (200, "suspended"))
    st, b = f.json("POST", "/v1/devboxes/%s/execute" % dbx, {"command": "true"})
    eq(P + "execute on a suspended devbox is 400", st, 400)
    st, d = f.json("POST", "/v1/devboxes/%s/resume" % dbx)
    eq(P + "resume", (st, d["status"]), (200, "running"))
    st, raw, _ = f.req("POST", "/v1/devboxes/%s/read_file_contents" % dbx,
                       {"file_path": "rel.txt"})
    eq(P + "the files outlive a suspend", raw, b"text\n")
    st, p1 = f.json("GET", "/v1/devboxes?limit=1")
    eq(P + "a page of one", (st, len(p1["devboxes"]), p1["has_more"], p1["total_count"]),
       (200, 1, True, 2))
    st, p2 = f.json("GET", "/v1/devboxes?limit=1&starting_after=" + p1["devboxes"][0]["id"])
    eq(P + "the next page", (len(p2["devboxes"]), p2["has_more"]), (1, False))
    eq(P + "pages hold each devbox once",
       sorted([p1["devboxes"][0]["id"], p2["devboxes"][0]["id"]]), sorted([dbx, d2["id"]]))
    st, b = f.json("DELETE", "/v1/devboxes/" + dbx)
    eq(P + "no DELETE route", st, 404)
    st, d = f.json("POST", "/v1/devboxes/%s/shutdown" % dbx)
    eq(P + "shutdown", (st, d["status"], d["shutdown_reason"]), (200, "shutdown", "api_shutdown"))
    st, d = f.json("GET", "/v1/devboxes/" + dbx)
    eq(P + "a shut down devbox stays visible", (st, d["status"]), (200, "shutdown"))
    st, b = f.json("POST", "/v1/devboxes/%s/execute" % dbx, {"command": "true"})
    eq(P + "execute on it is 400", st, 400)
    st, b = f.json("GET", "/v1/devboxes/dbx_none")
    eq(P + "an unknown devbox is 404", (st, b), (404, {"message": "devbox dbx_none not found"}))
    f.json("POST", "/v1/devboxes/%s/shutdown" % d2["id"])
    st, log = f.json("GET", "/_fake/log", auth=False)
    eq(P + "the log never holds the key", any(KEY in json.dumps(e) for e in log), False)
    eq(P + "stopped by PID", f.stop(), 0)
    left = [n for n in os.listdir(tmpdir) if n.startswith("sbx-fake-runloop-")]
    eq(P + "no devbox directory left", left, [])


def main():
    tmpdir = tempfile.mkdtemp(prefix="sbx-check-runloop-")
    try:
        run(tmpdir)
    except Exception as e:  # a crash is a failure of its own, named
        check("runloop ran to the end", False, "%s: %s" % (type(e).__name__, e))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    print("TAP version 13")
    failed = 0
    for i, (ok, name, detail) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
        if not ok:
            failed += 1
            print("# " + detail)
    print("1..%d" % len(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
