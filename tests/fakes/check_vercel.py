#!/usr/bin/python3
"""Drives the Vercel Sandbox contract fake (tests/fakes/vercel.py) over HTTP
and checks the exact answers the v1 contract gives: paths with ?teamId=,
status codes, JSON fields and the {"error": {code, message}} bodies; the
cmd NDJSON (the {command} line without, then with, its exitCode); the logs
stream (stdout and stderr tagged per line, the error line when the sandbox
stops mid-stream); gzipped-tar writes and raw reads (404 when missing);
snapshot stopping its sandbox; list pages by until. The fake is started on
an ephemeral port and stopped by its PID; afterwards no process of it and
no sandbox directory is left. Prints TAP.
"""

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
KEY = "vercel-check-key-123"
T = "?teamId=team_fake"
ALL = bytes(range(256)) * 4096        # 1 MiB of every byte value

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
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "vercel.py")],
                                     stdout=subprocess.PIPE, env=e)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise SystemExit("Bail out! vercel.py did not start: %r" % line)
        self.base = "http://127.0.0.1:%d" % int(line.split()[1])

    def req(self, method, path, body=None, raw=None, ctype=None, headers=None, auth=True):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {"Authorization": "Bearer " + KEY} if auth else {}
        if body is not None:
            h["Content-Type"] = "application/json"
        if ctype:
            h["Content-Type"] = ctype
        h.update(headers or {})
        r = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def json(self, method, path, body=None, **kw):
        st, data, hd = self.req(method, path, body, **kw)
        try:
            return st, (json.loads(data) if data else None), hd
        except ValueError:
            return st, data, hd

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


def lines(raw):
    return [json.loads(x) for x in raw.split(b"\n") if x.strip()]


def targz(name, data, mode=0o644):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        ti.mode = mode
        tf.addfile(ti, io.BytesIO(data))
    return gzip.compress(buf.getvalue())


def run():
    tmp = tempfile.mkdtemp(prefix="sbx-check-vercel-")
    f = Fake(tmp)
    try:
        checks(f)
    finally:
        if f.proc.poll() is None:      # a check raised before the fake was stopped
            f.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def checks(f):
    P = ""
    st, b, _ = f.json("POST", "/v1/sandboxes" + T, {"projectId": "prj_fake"}, auth=False)
    eq("no token is 401", st, 401)
    st, b, _ = f.json("POST", "/v1/sandboxes?teamId=other", {"projectId": "prj_fake"})
    eq("another team is 403 forbidden", (st, b["error"]["code"]), (403, "forbidden"))
    st, b, _ = f.json("POST", "/v1/sandboxes" + T, {"projectId": "prj_x"})
    eq("another project is 400 bad_request", (st, b["error"]["code"]), (400, "bad_request"))
    st, b, _ = f.json("POST", "/v1/sandboxes" + T, {"projectId": "prj_fake", "resources":
                                                    {"vcpus": 3}})
    eq("3 vcpus is 400", st, 400)
    st, b, _ = f.json("POST", "/v1/sandboxes" + T, {"projectId": "prj_fake", "timeout": 60000,
                                                    "env": {"A": "1"}})
    eq("create 200", st, 200)
    sb = b["sandbox"]
    sid = sb["id"]
    eq("create fields", (sb["status"], sb["timeout"], sb["cwd"], b["routes"]),
       ("running", 60000, "/vercel/sandbox", []))
    st, b, hd = f.req("POST", "/v1/sandboxes/%s/cmd%s" % (sid, T),
                      {"command": "bash", "args": ["-c", "echo $A; echo e >&2; exit 3"],
                       "wait": True})
    ls = lines(b)
    eq("cmd wait is NDJSON", (st, hd.get("Content-Type")), (200, "application/x-ndjson"))
    eq("two command lines", [x["command"]["exitCode"] for x in ls], [None, 3])
    cid = ls[0]["command"]["id"]
    st, b, _ = f.req("GET", "/v1/sandboxes/%s/cmd/%s/logs%s" % (sid, cid, T))
    # stdout and stderr are two pipes: their lines come in either order.
    eq("logs tagged per line", sorted(lines(b), key=lambda x: x["stream"]),
       [{"stream": "stderr", "data": "e\n"}, {"stream": "stdout", "data": "1\n"}])
    st, b, _ = f.json("GET", "/v1/sandboxes/%s/cmd/%s%s&wait=true" % (sid, cid, T))
    eq("get cmd wait", (st, b["command"]["exitCode"], b["command"]["cwd"]),
       (200, 3, "/vercel/sandbox"))
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/cmd%s" % (sid, T),
                      {"command": "sleep", "args": ["30"]})
    kid = b["command"]["id"]
    eq("cmd without wait is JSON", (st, b["command"]["exitCode"]), (200, None))
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/%s/kill%s" % (sid, kid, T), {"signal": 15})
    eq("kill 200", st, 200)
    st, b, _ = f.json("GET", "/v1/sandboxes/%s/cmd/%s%s&wait=true" % (sid, kid, T))
    eq("killed by 15 is 143", b["command"]["exitCode"], 143)
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/fs/write%s" % (sid, T), raw=targz("d/all.bin", ALL),
                      ctype="application/gzip", headers={"x-cwd": "/tmp"})
    eq("write 200 {}", (st, b), (200, {}))
    st, b, hd = f.req("POST", "/v1/sandboxes/%s/fs/read%s" % (sid, T), {"path": "/tmp/d/all.bin"})
    eq("read gives the bytes", (st, hd.get("Content-Type"), b == ALL),
       (200, "application/octet-stream", True))
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/fs/read%s" % (sid, T), {"path": "/tmp/none"})
    eq("missing is 404", st, 404)
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/fs/write%s" % (sid, T), raw=b"not gzip",
                      ctype="application/gzip")
    eq("not gzip is 400", (st, b["error"]["code"]), (400, "bad_request"))
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/fs/mkdir%s" % (sid, T), {"path": "nd"})
    eq("mkdir relative to the cwd", st, 200)
    root = f.json("GET", "/_fake/sandbox/" + sid, auth=False)[1]["root"]
    eq("made in /vercel/sandbox", os.path.isdir(os.path.join(root, "vercel/sandbox/nd")), True)
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/extend-timeout%s" % (sid, T), {"duration": 1000})
    eq("extend adds", b["sandbox"]["timeout"], 61000)
    # A command whose sandbox stops mid-stream: its logs end with an error line.
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/cmd%s" % (sid, T),
                      {"command": "bash", "args": ["-c", "echo a; sleep 30"]})
    lid = b["command"]["id"]
    out = {}

    def follow():
        out["logs"] = f.req("GET", "/v1/sandboxes/%s/cmd/%s/logs%s" % (sid, lid, T))[1]
    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.5)
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/snapshot%s" % (sid, T), {})
    t.join(30)
    eq("snapshot stops the sandbox", (st, b["sandbox"]["status"], b["snapshot"]["status"]),
       (200, "stopped", "created"))
    snap = b["snapshot"]["id"]
    ll = lines(out.get("logs", b""))
    eq("logs end with an error line", (ll[0], ll[-1]["stream"], ll[-1]["data"]["code"]),
       ({"stream": "stdout", "data": "a\n"}, "error", "sandbox_stopped"))
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/cmd%s" % (sid, T), {"command": "true"})
    eq("a stopped sandbox is 410", (st, b["error"]["code"]), (410, "sandbox_stopped"))
    st, b, _ = f.json("POST", "/v1/sandboxes" + T, {"projectId": "prj_fake", "source":
                                                    {"type": "snapshot", "snapshotId": snap}})
    sid2 = b["sandbox"]["id"]
    st, b, _ = f.req("POST", "/v1/sandboxes/%s/fs/read%s" % (sid2, T), {"path": "/tmp/d/all.bin"})
    eq("a create from the snapshot has its files", (st, b == ALL), (200, True))
    sids = [sid2]
    for _ in range(2):
        time.sleep(0.01)
        sids.append(f.json("POST", "/v1/sandboxes" + T, {"projectId": "prj_fake"})[1]
                    ["sandbox"]["id"])
    seen, until, pages = [], None, 0
    while True:
        q = "&project=prj_fake&limit=2" + ("&until=%d" % until if until else "")
        st, b, _ = f.json("GET", "/v1/sandboxes" + T + q)
        pages += 1
        seen += [x["id"] for x in b["sandboxes"]]
        until = b["pagination"]["next"]
        if until is None:
            break
    eq("list pages by until, newest first", (seen, pages), (list(reversed(sids)) + [sid], 2))
    roots = {f.json("GET", "/_fake/sandbox/" + s, auth=False)[1]["root"] for s in sids}
    st, b, _ = f.json("POST", "/v1/sandboxes/%s/stop%s" % (sids[1], T))
    eq("stop 200 stopped", (st, b["sandbox"]["status"]), (200, "stopped"))
    st, b, _ = f.json("GET", "/v1/sandboxes/nope" + T)
    eq("unknown sandbox 404 not_found", (st, b["error"]["code"]), (404, "not_found"))
    st, log, _ = f.json("GET", "/_fake/log", auth=False)
    eq("the log never holds the key", any(KEY in json.dumps(e) for e in log), False)
    eq(P + "stopped by PID", f.stop(), 0)
    check("no sandbox directory left", not [r for r in roots if os.path.exists(r)])


def main():
    try:
        run()
    except Exception as e:  # a crash is a failure of its own, named
        check("vercel ran to the end", False, "%s: %s" % (type(e).__name__, e))
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
