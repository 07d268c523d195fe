#!/usr/bin/python3
"""Drives the Cloudflare Sandbox Bridge contract fake (tests/fakes/cloudflare.py)
over HTTP and checks the exact answers the contract gives: the bearer key,
the id's alphabet, the SSE framing of exec (base64 stdout/stderr, the exit
event, an error event's JSON over several data lines), the /workspace-only
file routes with their 403, 404 and exact bytes, persist/hydrate, running,
sessions and DELETE. The fake is started on an ephemeral port and stopped
by its PID; afterwards no process of it and no sandbox directory is left.
Prints TAP.
"""

import base64
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
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
KEY = "cf-check-key-123"
ALL = bytes(range(256)) * 4096        # 1 MiB of every byte value
P = "cloudflare: "

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
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "cloudflare.py")],
                                     stdout=subprocess.PIPE, env=e)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise SystemExit("Bail out! cloudflare.py did not start: %r" % line)
        self.base = "http://127.0.0.1:%d" % int(line.split()[1])

    def req(self, method, path, body=None, raw=None, auth=True, headers=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {"Authorization": "Bearer " + KEY} if auth else {}
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        r = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, method, path, body=None, **kw):
        st, data = self.req(method, path, body, **kw)
        try:
            return st, (json.loads(data) if data else None)
        except ValueError:
            return st, data

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


def sse(raw):
    """[(event, data)] of an SSE body."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        ev, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        out.append((ev, "\n".join(data)))
    return out


def pty(f, sid):
    """The terminal WebSocket: a session's terminal runs `shell` on a real
    pseudo-terminal of cols x rows; output as binary frames, ready and exit
    controls, resize control, typed binary frames; a later connection gets
    the output so far."""
    import fakews
    port = int(f.base.rsplit(":", 1)[1])
    st, b = f.json("GET", "/v1/sandbox/%s/pty" % sid)
    eq(P + "pty without an upgrade is 400", (st, b), (400, {
        "error": "WebSocket upgrade required", "code": "invalid_request"}))
    prog = ("#!/bin/sh\ntrap 'stty size; touch /tmp/winched' WINCH; stty size; "
            "touch /tmp/ready; until read x; do :; done; echo got=$x; exit 7\n")
    f.req("PUT", "/v1/sandbox/%s/file/workspace/prog" % sid, raw=prog.encode())
    f.json("POST", "/v1/sandbox/%s/exec" % sid, {"argv": ["chmod", "700", "/workspace/prog"]})
    ses = f.json("POST", "/v1/sandbox/%s/session" % sid)[1]["id"]
    path = "/v1/sandbox/%s/pty?cols=77&rows=33&shell=/workspace/prog&session=%s" % (sid, ses)
    ws = fakews.Client(port, path, {"Authorization": "Bearer " + KEY})
    eq(P + "pty: 101", ws.status, 101)
    # What the program wrote before this client attached comes first (the
    # output so far), then "ready"; nothing after "ready" precedes it.
    first = b""
    op, d = ws.recv()
    while op == fakews.OP_BINARY:
        first += d
        op, d = ws.recv()
    eq(P + "pty: ready", (op, d), (fakews.OP_TEXT, b'{"type": "ready"}'))
    root = f.json("GET", "/_fake/sandbox/" + sid, auth=False)[1]["root"]

    def wait_file(name):
        for _ in range(200):
            if os.path.exists(os.path.join(root, "tmp", name)):
                return True
            time.sleep(0.05)
        return False
    check(P + "pty: the program runs", wait_file("ready"))
    again = fakews.Client(port, path, {"Authorization": "Bearer " + KEY})
    eq(P + "pty: a second connection gets the output so far", again.recv(),
       (fakews.OP_BINARY, b"33 77\r\n"))
    again.close()
    ws.send(fakews.OP_TEXT, b'{"type":"resize","cols":100,"rows":40}')
    check(P + "pty: resize is a SIGWINCH", wait_file("winched"))
    ws.send(fakews.OP_BINARY, b"abc\r")
    out, ctl, close = first, [], None
    try:
        while True:
            op, d = ws.recv()
            if op == fakews.OP_BINARY:
                out += d
            else:
                ctl.append(d)
    except fakews.Closed as e:
        close = e.code
    ws.close()
    eq(P + "pty: output", out, b"33 77\r\n40 100\r\nabc\r\ngot=abc\r\n")
    eq(P + "pty: exit control, then the close", (ctl, close),
       ([b'{"type": "exit", "code": 7}'], 1000))
    ws = fakews.Client(port, "/v1/sandbox/%s/pty?session=nosuch" % sid,
                       {"Authorization": "Bearer " + KEY})
    eq(P + "pty: an unknown session is 502", (ws.status, json.loads(ws.body)["code"]),
       (502, "exec_transport_error"))
    ws.close()
    f.json("DELETE", "/v1/sandbox/%s/session/%s" % (sid, ses))


def body(f):
    st, b = f.json("GET", "/health", auth=False)
    eq(P + "health needs no key", (st, b), (200, {"ok": True}))
    st, b = f.json("POST", "/v1/sandbox", auth=False)
    eq(P + "no key is 401", (st, b["code"]), (401, "unauthorized"))
    st, b = f.json("POST", "/v1/sandbox")
    sid = b["id"]
    check(P + "create mints a 26-char base32 id", st == 200 and re.fullmatch(r"[a-z2-7]{26}", sid),
          repr(b))
    st, b = f.json("GET", "/v1/sandbox/%s/running" % sid)
    eq(P + "a new sandbox's container has not started", (st, b), (200, {"running": False}))
    st, b = f.json("POST", "/v1/sandbox/Bad_Id/exec", {"argv": ["true"]})
    eq(P + "an id outside [a-z2-7] is 400", (st, b["code"]), (400, "invalid_request"))
    st, b = f.json("POST", "/v1/sandbox/%s/exec" % sid, {"argv": []})
    eq(P + "empty argv is 400", (st, b["error"]), (400, "argv must be a non-empty array of strings"))
    st, raw = f.req("POST", "/v1/sandbox/%s/exec" % sid,
                    {"argv": ["sh", "-c", "printf 'a\\0b'; printf e >&2; exit 7"]})
    ev = sse(raw)
    outs = b"".join(base64.b64decode(d) for e, d in ev if e == "stdout")
    errs = b"".join(base64.b64decode(d) for e, d in ev if e == "stderr")
    eq(P + "stdout is base64, exact", outs, b"a\0b")
    eq(P + "stderr apart", errs, b"e")
    eq(P + "the exit event ends the stream", ev[-1], ("exit", json.dumps({"exit_code": 7})))
    st, raw = f.req("POST", "/v1/sandbox/%s/exec" % sid,
                    {"argv": ["sh", "-c", "printf 'x\\377y'"]})
    outs = b"".join(base64.b64decode(d) for e, d in sse(raw) if e == "stdout")
    eq(P + "output is carried as UTF-8 text (a bad byte is U+FFFD)", outs,
       "x\ufffdy".encode())
    st, raw = f.req("POST", "/v1/sandbox/%s/exec" % sid, {"argv": ["sleep", "5"],
                                                          "timeout_ms": 200})
    eq(P + "timeout_ms ends with an error event", sse(raw)[-1],
       ("error", json.dumps({"error": "command timed out after 200 ms", "code": "exec_error"})))
    f.json("POST", "/_fake/exec_error", {"error": "line1\nline2", "code": "exec_transport_error"},
           auth=False)
    st, raw = f.req("POST", "/v1/sandbox/%s/exec" % sid, {"argv": ["true"]})
    eq(P + "the scripted error event", sse(raw)[-1],
       ("error", json.dumps({"error": "line1\nline2", "code": "exec_transport_error"})))
    st, b = f.json("PUT", "/v1/sandbox/%s/file/workspace/d/all.bin" % sid, raw=ALL)
    eq(P + "write under /workspace", (st, b), (200, {"ok": True}))
    st, raw = f.req("GET", "/v1/sandbox/%s/file/workspace/d/all.bin" % sid)
    eq(P + "read gives the bytes exact", (st, raw == ALL), (200, True))
    st, b = f.json("GET", "/v1/sandbox/%s/file/workspace/none" % sid)
    eq(P + "a missing file is 404 workspace_read_not_found", (st, b["code"]),
       (404, "workspace_read_not_found"))
    st, b = f.json("PUT", "/v1/sandbox/%s/file/etc/x" % sid, raw=b"x")
    eq(P + "outside /workspace is 403", (st, b),
       (403, {"error": "path must be inside /workspace: /etc/x", "code": "invalid_request"}))
    f.req("PUT", "/v1/sandbox/%s/file/workspace/skip/x" % sid, raw=b"x")
    st, tarball = f.req("POST", "/v1/sandbox/%s/persist?excludes=skip" % sid)
    names = sorted(m.name for m in tarfile.open(fileobj=io.BytesIO(tarball)).getmembers())
    eq(P + "persist is a tar of /workspace without the excludes", (st, names),
       (200, [".", "./d", "./d/all.bin"]))
    st, b = f.json("POST", "/v1/sandbox")
    sid2 = b["id"]
    st, b = f.json("POST", "/v1/sandbox/%s/hydrate" % sid2, raw=tarball)
    eq(P + "hydrate", (st, b), (200, {"ok": True}))
    st, raw = f.req("GET", "/v1/sandbox/%s/file/workspace/d/all.bin" % sid2)
    eq(P + "hydrated files are exact", (st, raw == ALL), (200, True))
    st, b = f.json("POST", "/v1/sandbox/%s/session" % sid)
    check(P + "a session has an id", st == 200 and b.get("id"), repr(b))
    st, b = f.json("DELETE", "/v1/sandbox/%s/session/%s" % (sid, b["id"]))
    eq(P + "a session is deleted", st, 204)
    pty(f, sid)
    st, b = f.json("POST", "/v1/sandbox/%s/exec" % sid, {"argv": ["true"]},
                   headers={"Session-Id": "bad id"})
    eq(P + "a bad Session-Id is 400", st, 400)
    roots = {f.json("GET", "/_fake/sandbox/" + s, auth=False)[1]["root"] for s in (sid, sid2)}
    st, b = f.json("GET", "/v1/sandbox/%s/running" % sid)
    eq(P + "running after an exec", b, {"running": True})
    for s in (sid, sid2):
        st, b = f.json("DELETE", "/v1/sandbox/" + s)
        eq(P + "DELETE is 204", (st, b), (204, None))
    st, b = f.json("DELETE", "/v1/sandbox/" + sid)
    eq(P + "DELETE again is 204", st, 204)
    eq(P + "deleted: not running", f.json("GET", "/v1/sandbox/%s/running" % sid)[1],
       {"running": False})
    eq(P + "deleted: its directories are gone", [r for r in roots if os.path.exists(r)], [])
    st, log = f.json("GET", "/_fake/log", auth=False)
    eq(P + "the log never holds the key", any(KEY in json.dumps(e) for e in log), False)
    eq(P + "stopped by PID", f.stop(), 0)


def run():
    tmpdir = tempfile.mkdtemp(prefix="sbx-check-cloudflare-")
    os.chmod(tmpdir, 0o755)
    try:
        f = Fake(tmpdir)
        try:
            body(f)
        finally:
            if f.proc.poll() is None:
                f.stop()
        eq(P + "the fake's temporary directory is removed",
           [n for n in os.listdir(tmpdir) if n.startswith("sbx-fake-cloudflare-")], [])
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def main():
    try:
        run()
    except Exception as e:  # a crash is a failure of its own, named
        check(P + "ran to the end", False, "%s: %s" % (type(e).__name__, e))
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
