#!/usr/bin/python3
"""Drives the E2B contract fake (tests/fakes/e2b.py) over HTTP and checks the
exact answers the contract gives: control-plane paths, status codes, JSON
fields and error bodies; envd's Connect envelopes byte for byte (flags,
big-endian length, JSON codec, base64 data, keepalives, an omitted exit code,
the end-of-stream frame); the process and file calls. The fake is started on
an ephemeral port and stopped by its PID; afterwards no process of it and no
sandbox directory is left. Prints TAP.
"""

import base64
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
KEY = "e2b-check-key-123"
ALL = bytes(range(256)) * 4096        # 1 MiB of every byte value

results = []


def check(name, cond, detail=""):
    results.append((bool(cond), name, detail))
    return bool(cond)


def eq(name, got, want):
    return check(name, got == want, "got %r, want %r" % (got, want))


def bwrap_roots():
    roots = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"bwrap") and b"--bind" in argv:
            i = argv.index(b"--bind")
            if i + 1 < len(argv):
                roots.add(argv[i + 1].decode())
    return roots


def envelope(flags, obj):
    data = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(data)) + data


def frames(raw):
    """(flags, length, JSON) of each envelope of @raw; raises on a torn one."""
    out = []
    while raw:
        flags, n = struct.unpack(">BI", raw[:5])
        body = raw[5:5 + n]
        if len(body) != n:
            raise ValueError("torn envelope")
        out.append((flags, n, json.loads(body)))
        raw = raw[5 + n:]
    return out


class Fake:
    def __init__(self, tmpdir):
        e = dict(os.environ)
        # The fake's temporary files go below @tmpdir, this check's own, so
        # that fakes other tests run at the same time are not counted.
        e["TMPDIR"] = tmpdir
        e["SBX_FAKE_API_KEY"] = KEY
        e["E2B_DOMAIN"] = "e2b.check"
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "e2b.py")], stdout=subprocess.PIPE,
                                     env=e)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise SystemExit("Bail out! e2b.py did not start: %r" % line)
        self.port = int(line.split()[1])
        self.base = "http://127.0.0.1:%d" % self.port

    def req(self, method, path, body=None, headers=None, raw=None, auth=True, sandbox=None,
            ctype=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {}
        if auth and sandbox is None:
            h["X-API-Key"] = KEY
        if sandbox is not None:
            h["E2b-Sandbox-Id"] = sandbox
            h["E2b-Sandbox-Port"] = "49983"
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

    def start(self, sid, cmd, stdin=False, headers=None, tag=None):
        body = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd], "envs": {"A": "1"}},
                "stdin": stdin}
        if tag:
            body["tag"] = tag
        h = {"Connect-Protocol-Version": "1", "Keepalive-Ping-Interval": "50"}
        h.update(headers or {})
        return self.req("POST", "/process.Process/Start", raw=envelope(0, body), sandbox=sid,
                        ctype="application/connect+json", headers=h)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


def events(raw):
    fr = frames(raw)
    return [x[2]["event"] for x in fr if x[0] == 0], fr[-1]


def fake_dirs(tmpdir):
    return {n for n in os.listdir(tmpdir) if n.startswith("sbx-fake-e2b-")}


def run():
    import shutil
    import tempfile
    tmpdir = tempfile.mkdtemp(prefix="sbx-check-e2b-")
    os.chmod(tmpdir, 0o755)
    try:
        f = Fake(tmpdir)
        try:
            body(f)
        finally:
            if f.proc.poll() is None:
                f.stop()
        eq("e2b: the fake's temporary directory is removed", fake_dirs(tmpdir), set())
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def body(f):
    P = "e2b: "
    st, b, _ = f.json("POST", "/sandboxes", {"templateID": "base"}, auth=False)
    eq(P + "no X-API-Key is 401", (st, b), (401, {"code": 401, "message": "Unauthorized"}))
    st, b, _ = f.json("POST", "/sandboxes", {"templateID": "base", "cpuCount": 4})
    eq(P + "create with cpuCount is 400 naming it",
       (st, b), (400, {"code": 400, "message": "request body has an unknown field \"cpuCount\""}))
    st, b, _ = f.json("POST", "/sandboxes", {"templateID": "nope"})
    eq(P + "unknown template is 404", (st, b["code"], b["message"]),
       (404, 404, "template 'nope' not found"))
    st, sb, _ = f.json("POST", "/sandboxes", {"templateID": "base", "timeout": 300,
                                              "metadata": {"sbx.owner": "t1"},
                                              "envVars": {"SBE": "x"}})
    eq(P + "create is 201", st, 201)
    eq(P + "Sandbox fields", sorted(sb), ["clientID", "domain", "envdAccessToken",
                                          "envdVersion", "sandboxID", "templateID"])
    sid = sb["sandboxID"]
    eq(P + "not secure: no access token", sb["envdAccessToken"], None)
    st, d, _ = f.json("GET", "/sandboxes/" + sid)
    eq(P + "get detail", (st, d["state"], d["cpuCount"], d["memoryMB"], d["metadata"]),
       (200, "running", 2, 512, {"sbx.owner": "t1"}))
    eq(P + "detail lifecycle", d["lifecycle"], {"autoResume": False, "onTimeout": "kill"})
    st, sec, _ = f.json("POST", "/sandboxes", {"templateID": "base", "secure": True,
                                               "metadata": {"sbx.owner": "t2"}})
    sid2 = sec["sandboxID"]
    check(P + "secure: a token", isinstance(sec["envdAccessToken"], str) and
          len(sec["envdAccessToken"]) == 32)
    st, lst, hd = f.json("GET", "/v2/sandboxes?metadata=sbx.owner%3Dt1")
    eq(P + "list by metadata", (st, [s["sandboxID"] for s in lst], hd.get("X-Total-Running")),
       (200, [sid], "1"))
    st, lst, hd = f.json("GET", "/v2/sandboxes?limit=1")
    eq(P + "list pages with X-Next-Token", (len(lst), hd.get("X-Next-Token")), (1, "1"))
    st, lst, hd = f.json("GET", "/v2/sandboxes?limit=1&nextToken=1")
    eq(P + "second page", ([s["sandboxID"] for s in lst], hd.get("X-Next-Token")), ([sid2], None))
    st, b, _ = f.json("GET", "/v2/sandboxes?limit=101")
    eq(P + "limit over 100 is 400", (st, b["message"]), (400, "limit must be in [1, 100], not 101"))

    # ---- envd: Start
    st, raw, hd = f.start(sid, "echo out; echo err >&2; echo $A $SBE $HOME; exit 3")
    eq(P + "Start is 200 connect+json", (st, hd.get("Content-Type")),
       (200, "application/connect+json"))
    fr = frames(raw)
    eq(P + "first frame bytes", raw[:5], struct.pack(">BI", 0, fr[0][1]))
    eq(P + "first event start", fr[0][2], {"event": {"start": {"pid": 1000}}})
    evs, last = events(raw)
    out = b"".join(base64.b64decode(e["data"]["stdout"]) for e in evs if "stdout" in
                   e.get("data", {}))
    err = b"".join(base64.b64decode(e["data"]["stderr"]) for e in evs if "stderr" in
                   e.get("data", {}))
    eq(P + "stdout base64", out, b"out\n1 x /home/user\n")
    eq(P + "stderr base64", err, b"err\n")
    eq(P + "end event", evs[-1], {"end": {"exitCode": 3, "exited": True,
                                          "status": "exit status 3"}})
    eq(P + "end-of-stream frame", (last[0], last[1], last[2]), (2, 2, {}))
    eq(P + "end-of-stream bytes", raw[-7:], b"\x02\x00\x00\x00\x02{}")
    st, raw, _ = f.start(sid, "true")
    evs, _ = events(raw)
    eq(P + "exit 0 leaves exitCode out", evs[-1], {"end": {"exited": True,
                                                           "status": "exit status 0"}})
    st, raw, _ = f.start(sid, "sleep 1.2", headers={"Keepalive-Ping-Interval": "0.3"})
    evs, _ = events(raw)
    check(P + "keepalives in quiet", sum(1 for e in evs if "keepalive" in e) >= 2, repr(evs))
    eq(P + "keepalive shape", [e for e in evs if "keepalive" in e][0], {"keepalive": {}})
    st, raw, _ = f.start(sid, "sleep 30", headers={"Connect-Timeout-Ms": "500"})
    fr = frames(raw)
    eq(P + "deadline ends with an error frame", (fr[-1][0], fr[-1][2]["error"]["code"]),
       (2, "deadline_exceeded"))
    st, b, _ = f.json("POST", "/process.Process/Start", raw=b"\x00\x00\x00\x00\x09{}",
                      sandbox=sid, ctype="application/connect+json")
    eq(P + "a torn envelope is invalid_argument", (st, b["code"]), (400, "invalid_argument"))
    st, b, _ = f.json("POST", "/process.Process/List", {}, sandbox=sid2)
    eq(P + "secure sandbox without token is 401", st, 401)
    st, b, _ = f.json("POST", "/process.Process/List", {}, sandbox=sid2,
                      headers={"X-Access-Token": sec["envdAccessToken"]})
    eq(P + "secure sandbox with token", (st, b), (200, {"processes": []}))

    # ---- stdin, List, SendSignal (a background Start read on a thread)
    got = {}

    def bg(key, cmd, **kw):
        got[key] = f.start(sid, cmd, **kw)
    t = threading.Thread(target=bg, args=("cat", "cat"), kwargs={"stdin": True, "tag": "c1"})
    t.start()
    pid = None
    for _ in range(100):
        st, b, _ = f.json("POST", "/process.Process/List", {}, sandbox=sid)
        if b["processes"]:
            pid = b["processes"][0]["pid"]
            break
        time.sleep(0.05)
    eq(P + "List shows the process", (b["processes"][0]["tag"],
                                      b["processes"][0]["config"]["args"]),
       ("c1", ["-l", "-c", "cat"]))
    st, b, _ = f.json("POST", "/process.Process/SendInput",
                      {"process": {"pid": pid}, "input": {"stdin": base64.b64encode(
                          b"hello\n").decode()}}, sandbox=sid)
    eq(P + "SendInput", (st, b), (200, {}))
    st, b, _ = f.json("POST", "/process.Process/CloseStdin", {"process": {"pid": pid}},
                      sandbox=sid)
    eq(P + "CloseStdin", (st, b), (200, {}))
    t.join(30)
    evs, _ = events(got["cat"][1])
    eq(P + "cat echoed stdin", b"".join(base64.b64decode(e["data"]["stdout"])
                                        for e in evs if "data" in e), b"hello\n")
    eq(P + "cat exit 0", evs[-1], {"end": {"exited": True, "status": "exit status 0"}})
    t = threading.Thread(target=bg, args=("sl", "sleep 60"))
    t.start()
    for _ in range(100):
        st, b, _ = f.json("POST", "/process.Process/List", {}, sandbox=sid)
        if b["processes"]:
            pid = b["processes"][0]["pid"]
            break
        time.sleep(0.05)
    st, b, _ = f.json("POST", "/process.Process/SendSignal",
                      {"process": {"pid": pid}, "signal": "SIGNAL_BOGUS"}, sandbox=sid)
    eq(P + "bad signal named", (st, b), (400, {"code": "invalid_argument",
                                               "message": "invalid signal 'SIGNAL_BOGUS'"}))
    st, b, _ = f.json("POST", "/process.Process/SendSignal",
                      {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}, sandbox=sid)
    eq(P + "SendSignal", (st, b), (200, {}))
    t.join(30)
    evs, _ = events(got["sl"][1])
    eq(P + "killed end", evs[-1], {"end": {"exitCode": -1, "exited": False,
                                           "status": "signal: killed"}})
    st, b, _ = f.json("POST", "/process.Process/SendInput",
                      {"process": {"pid": 999}, "input": {"stdin": ""}}, sandbox=sid)
    eq(P + "unknown pid is not_found", (st, b["code"]), (404, "not_found"))

    # ---- a terminal: Start with pty, data.pty events, SendInput pty, Update
    def bg_pty(key, cmd):
        body = {"process": {"cmd": "/bin/sh", "args": ["-c", cmd]},
                "pty": {"size": {"rows": 33, "cols": 77}}}
        got[key] = f.req("POST", "/process.Process/Start", raw=envelope(0, body), sandbox=sid,
                         ctype="application/connect+json",
                         headers={"Connect-Protocol-Version": "1",
                                  "Keepalive-Ping-Interval": "50"})
    root = f.json("GET", "/_fake/sandbox/" + sid, auth=False)[1]["root"]

    def wait_file(name):
        for _ in range(200):
            if os.path.exists(os.path.join(root, "tmp", name)):
                return True
            time.sleep(0.05)
        return False
    # Each step waits for the one before (files in the sandbox's /tmp), so
    # that the terminal's output has one order.
    t = threading.Thread(target=bg_pty, args=(
        "pty", "trap 'stty size; touch /tmp/winched' WINCH; test -t 0 && stty size; "
               "touch /tmp/ready; until read y; do :; done; echo got=$y; exit 6"))
    t.start()
    check(P + "the terminal's program runs", wait_file("ready"))
    pid = f.json("POST", "/process.Process/List", {}, sandbox=sid)[1]["processes"][0]["pid"]
    st, b, _ = f.json("POST", "/process.Process/CloseStdin", {"process": {"pid": pid}},
                      sandbox=sid)
    eq(P + "CloseStdin of a terminal refused", (st, b["code"]), (412, "failed_precondition"))
    st, b, _ = f.json("POST", "/process.Process/SendInput",
                      {"process": {"pid": pid}, "input": {"stdin": ""}}, sandbox=sid)
    eq(P + "stdin of a terminal refused", (st, b["code"]), (412, "failed_precondition"))
    st, b, _ = f.json("POST", "/process.Process/Update",
                      {"process": {"pid": pid}, "pty": {"size": {"rows": 40, "cols": 100}}},
                      sandbox=sid)
    eq(P + "Update resizes", (st, b), (200, {}))
    check(P + "the resize is a SIGWINCH", wait_file("winched"))
    st, b, _ = f.json("POST", "/process.Process/SendInput",
                      {"process": {"pid": pid}, "input": {"pty": base64.b64encode(
                          b"abc\r").decode()}}, sandbox=sid)
    eq(P + "SendInput pty", (st, b), (200, {}))
    t.join(30)
    evs, _ = events(got["pty"][1])
    check(P + "pty output only", all(set(e.get("data", {"pty": 1})) == {"pty"} for e in evs),
          repr(evs))
    eq(P + "pty output", b"".join(base64.b64decode(e["data"]["pty"]) for e in evs
                                  if "data" in e),
       b"33 77\r\n40 100\r\nabc\r\ngot=abc\r\n")
    eq(P + "pty end", evs[-1], {"end": {"exitCode": 6, "exited": True,
                                        "status": "exit status 6"}})

    # ---- Connect: the running process's stream again, by pid
    def connect(sel):
        return f.req("POST", "/process.Process/Connect", raw=envelope(0, {"process": sel}),
                     sandbox=sid, ctype="application/connect+json",
                     headers={"Connect-Protocol-Version": "1", "Keepalive-Ping-Interval": "50"})
    t = threading.Thread(target=bg, args=("late", "echo early; sleep 1; echo late; exit 4"))
    t.start()
    for _ in range(100):
        st, b, _ = f.json("POST", "/process.Process/List", {}, sandbox=sid)
        if b["processes"]:
            pid = b["processes"][0]["pid"]
            break
        time.sleep(0.05)
    time.sleep(0.3)     # "early" is out before the Connect
    st, raw, hd = connect({"pid": pid})
    t.join(30)
    eq(P + "Connect is 200 connect+json", (st, hd.get("Content-Type")),
       (200, "application/connect+json"))
    evs, last = events(raw)
    eq(P + "Connect events: start, later output, end", evs,
       [{"start": {"pid": pid}}, {"data": {"stdout": base64.b64encode(b"late\n").decode()}},
        {"end": {"exitCode": 4, "exited": True, "status": "exit status 4"}}])
    eq(P + "Connect end-of-stream frame", (last[0], last[2]), (2, {}))
    evs, _ = events(got["late"][1])
    eq(P + "the Start stream still has it all",
       b"".join(base64.b64decode(e["data"]["stdout"]) for e in evs if "data" in e),
       b"early\nlate\n")
    st, raw, _ = connect({"pid": pid})
    fr = frames(raw)
    eq(P + "Connect to an ended process: 200, not_found end-of-stream frame",
       (st, len(fr), fr[0][0], fr[0][2]["error"]["code"]), (200, 1, 2, "not_found"))

    # ---- files
    st, b, _ = f.json("POST", "/files?path=/home/user/d/all.bin&username=user", raw=ALL,
                      sandbox=sid, ctype="application/octet-stream")
    eq(P + "upload raw", (st, b), (200, [{"path": "/home/user/d/all.bin", "name": "all.bin",
                                          "type": "file"}]))
    st, data, hd = f.req("GET", "/files?path=/home/user/d/all.bin&username=user", sandbox=sid)
    eq(P + "download raw bytes", (st, data == ALL, hd.get("Content-Type")),
       (200, True, "application/octet-stream"))
    mp = (b"--bnd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m\"\r\n"
          b"Content-Type: application/octet-stream\r\n\r\nmulti\r\n--bnd--\r\n")
    st, b, _ = f.json("POST", "/files?path=m.txt", raw=mp, sandbox=sid,
                      ctype="multipart/form-data; boundary=bnd")
    eq(P + "upload multipart, relative to home", b[0]["path"], "/home/user/m.txt")
    st, data, _ = f.req("GET", "/files?path=/home/user/m.txt", sandbox=sid)
    eq(P + "multipart content", data, b"multi")
    st, b, _ = f.json("GET", "/files?path=/home/user/none", sandbox=sid)
    eq(P + "download missing is 404", (st, b), (404, {"message": "path '/home/user/none' does "
                                                      "not exist", "code": 404}))
    st, b, _ = f.json("GET", "/files?path=/home/user/d", sandbox=sid)
    eq(P + "download a directory is 400", (st, b["code"]), (400, 400))
    st, b, _ = f.json("GET", "/files?path=/x&username=bob", sandbox=sid)
    eq(P + "bad user is 401", (st, b["message"]), (401, "invalid username: 'bob'"))
    st, b, _ = f.json("POST", "/filesystem.Filesystem/ListDir",
                      {"path": "/home/user/d", "depth": 1}, sandbox=sid)
    e = b["entries"][0]
    eq(P + "ListDir entry", (st, e["name"], e["type"], e["path"], e["size"]),
       (200, "all.bin", "FILE_TYPE_FILE", "/home/user/d/all.bin", str(len(ALL))))
    st, b, _ = f.json("POST", "/filesystem.Filesystem/MakeDir", {"path": "/home/user/nd"},
                      sandbox=sid)
    eq(P + "MakeDir", (st, b["entry"]["type"]), (200, "FILE_TYPE_DIRECTORY"))
    st, b, _ = f.json("POST", "/filesystem.Filesystem/MakeDir", {"path": "/home/user/nd"},
                      sandbox=sid)
    eq(P + "MakeDir twice", (st, b["code"]), (409, "already_exists"))
    st, b, _ = f.json("POST", "/filesystem.Filesystem/Stat", {"path": "/home/user/m.txt"},
                      sandbox=sid)
    eq(P + "Stat", (st, b["entry"]["size"], b["entry"]["type"]), (200, "5", "FILE_TYPE_FILE"))
    st, b, _ = f.json("POST", "/filesystem.Filesystem/Remove", {"path": "/home/user/d"},
                      sandbox=sid)
    eq(P + "Remove", (st, b), (200, {}))
    st, b, _ = f.json("POST", "/filesystem.Filesystem/Stat", {"path": "/home/user/d"},
                      sandbox=sid)
    eq(P + "Stat removed", (st, b), (404, {"code": "not_found",
                                          "message": "path '/home/user/d' does not exist"}))

    # ---- timeout, pause, connect, kill
    st, b, _ = f.json("POST", "/sandboxes/%s/timeout" % sid, {"timeout": 120})
    eq(P + "set timeout 204", (st, b), (204, None))
    st, c, _ = f.json("GET", "/_fake/sandbox/" + sid, auth=False)
    eq(P + "timeout recorded", c["timeout"], 120)
    st, b, _ = f.json("POST", "/sandboxes/%s/timeout" % sid, {"timeout": "x"})
    eq(P + "bad timeout named", (st, b["message"]),
       (400, "timeout must be an integer in [0, 86400], not 'x'"))
    st, b, _ = f.json("POST", "/sandboxes/%s/pause" % sid, {})
    eq(P + "pause 204", st, 204)
    st, b, _ = f.json("POST", "/sandboxes/%s/pause" % sid, {})
    eq(P + "pause twice is 409", (st, b["code"]), (409, 409))
    st, b, _ = f.json("POST", "/files?path=/home/user/x", raw=b"x", sandbox=sid,
                      ctype="application/octet-stream")
    eq(P + "envd of a paused sandbox is 502", st, 502)
    st, b, _ = f.json("POST", "/sandboxes/%s/connect" % sid, {"timeout": 60})
    eq(P + "connect resumes: 201", (st, b["sandboxID"]), (201, sid))
    st, b, _ = f.json("POST", "/sandboxes/%s/connect" % sid, {"timeout": 60})
    eq(P + "connect running: 200", st, 200)
    st, data, _ = f.req("GET", "/files?path=/home/user/m.txt", sandbox=sid)
    eq(P + "files survive pause", data, b"multi")
    st, b, _ = f.json("POST", "/sandboxes/%s/connect" % sid, {})
    eq(P + "connect without timeout is 400", (st, b["message"]), (400, "timeout is required"))
    st, b, _ = f.json("POST", "/sandboxes", {"templateID": "base", "timeout": 1})
    sid3 = b["sandboxID"]
    time.sleep(2.5)
    st, b, _ = f.json("GET", "/sandboxes/" + sid3)
    eq(P + "timeout kills", (st, b["code"]), (404, 404))
    roots = {f.json("GET", "/_fake/sandbox/" + s, auth=False)[1]["root"] for s in (sid, sid2)}
    st, b, _ = f.json("DELETE", "/sandboxes/" + sid2)
    eq(P + "kill 204", (st, b), (204, None))
    st, b, _ = f.json("GET", "/sandboxes/" + sid2)
    eq(P + "killed is 404", (st, b["message"]),
       (404, "sandbox \"%s\" doesn't exist or you don't have access to it" % sid2))
    st, log, _ = f.json("GET", "/_fake/log", auth=False)
    check(P + "every request logged", len(log) >= 50, "%d entries" % len(log))
    eq(P + "the log never holds the key", any(KEY in json.dumps(e) for e in log), False)
    eq(P + "stopped by PID", f.stop(), 0)
    eq(P + "no sandbox process left", bwrap_roots() & roots, set())
    eq(P + "no sandbox directory left", [r for r in roots if os.path.exists(r)], [])


def main():
    try:
        run()
    except Exception as e:  # a crash is a failure of its own, named
        check("e2b ran to the end", False, "%s: %s" % (type(e).__name__, e))
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
