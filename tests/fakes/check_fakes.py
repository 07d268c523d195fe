#!/usr/bin/python3
"""Drives the Daytona and Tensorlake contract fakes over HTTP and checks the
exact answers the contracts give (paths, status codes, JSON fields, error
bodies, SSE framing, raw bytes), so the fakes the plugins are tested against
are themselves tested, and checks that the HTTP plumbing every fake shares
(fakehttp.py) answers on sockets with TCP_NODELAY set and that the pump
every fake reads a command's output with (nsbox.OutputPump) drops nothing a
command wrote. Prints TAP. Each fake
is started on an ephemeral port and stopped by its PID; afterwards no
process of it and no sandbox directory is left.

Usage: check_fakes.py [daytona|tensorlake|fakehttp|outputpump]...  (default: all four)
"""

import email.utils
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
ALL = bytes(range(256)) * 4096        # 1 MiB of every byte value

results = []


def check(name, cond, detail=""):
    results.append((bool(cond), name, detail))
    return bool(cond)


def eq(name, got, want):
    return check(name, got == want, "got %r, want %r" % (got, want))


class Fake:
    running = []    # started and not yet stopped: main() stops what a crash left

    def __init__(self, script, key, env=None):
        e = dict(os.environ)
        e["SBX_FAKE_API_KEY"] = key
        e.update(env or {})
        self.key = key
        self.proc = subprocess.Popen([PY, os.path.join(HERE, script)], stdout=subprocess.PIPE,
                                     env=e)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise SystemExit("Bail out! %s did not start: %r" % (script, line))
        self.port = int(line.split()[1])
        self.base = "http://127.0.0.1:%d" % self.port
        Fake.running.append(self)

    def req(self, method, path, body=None, headers=None, raw=None, auth=True, base=None):
        url = (base or self.base) + path
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {}
        if auth:
            h["Authorization"] = "Bearer " + self.key
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        r = urllib.request.Request(url, data=data, method=method, headers=h)
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
        if self in Fake.running:
            Fake.running.remove(self)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


def multipart(fields):
    boundary = "sbxfakeboundary7d1e"
    out = b""
    for name, data, filename in fields:
        out += b"--" + boundary.encode() + b"\r\n"
        disp = 'form-data; name="%s"' % name
        if filename:
            disp += '; filename="%s"' % filename
        out += b"Content-Disposition: " + disp.encode() + b"\r\n"
        if filename:
            out += b"Content-Type: application/octet-stream\r\n"
        out += b"\r\n" + data + b"\r\n"
    out += b"--" + boundary.encode() + b"--\r\n"
    return out, "multipart/form-data; boundary=" + boundary


def sse_events(raw):
    """The data: payloads (JSON) and the number of comment lines of an SSE body."""
    events, comments = [], 0
    for block in raw.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
            elif line.startswith(":"):
                comments += 1
    return events, comments


def bwrap_roots():
    """Sandbox roots of running bwrap processes (from their command lines)."""
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
                roots.add(argv[i + 1].decode(errors="replace"))
    return roots


def wait_until(fn, secs):
    end = time.time() + secs
    while time.time() < end:
        if fn():
            return True
        time.sleep(0.05)
    return fn()


# ---------------------------------------------------------------- Daytona
def daytona_pty(f, P, T):
    """The daemon's PTY sessions: the user's shell on a terminal, its
    WebSocket (control frame, output, input), resize, the exit code in the
    close frame."""
    import fakews
    st, r, _ = f.json("POST", T + "/process/pty", {"id": "p1", "cols": 1001})
    eq(P + "pty: cols over 1000 is 400", (st, r["message"]),
       (400, "invalid value for cols - must be less than 1000"))
    # The shell runs what PROMPT_COMMAND holds before its first prompt.
    script = ("trap 'stty size; touch /tmp/winched' WINCH; stty size; touch /tmp/ready; "
              "until read x; do :; done; echo got=$x; exit 7")
    st, r, _ = f.json("POST", T + "/process/pty", {
        "id": "p1", "cols": 77, "rows": 33, "lazyStart": True,
        "envs": {"S": script, "PROMPT_COMMAND": 'unset PROMPT_COMMAND; exec /bin/sh -c "$S"'}})
    eq(P + "pty create: 201 sessionId", (st, r), (201, {"sessionId": "p1"}))
    st, r, _ = f.json("POST", T + "/process/pty", {"id": "p1"})
    eq(P + "pty: a taken id is 409", (st, r["message"]),
       (409, "PTY session with ID 'p1' already exists"))
    st, r, _ = f.json("GET", T + "/process/pty/p1")
    eq(P + "pty info before the attach", (st, r["cols"], r["rows"], r["active"],
                                          r["envs"]["TERM"]), (200, 77, 33, False,
                                                                "xterm-256color"))
    ws = fakews.Client(f.port, T + "/process/pty/p1/connect",
                       {"Authorization": "Bearer dkey-123"})
    eq(P + "pty connect: 101", ws.status, 101)
    eq(P + "pty connect: the control frame first", ws.recv(),
       (fakews.OP_TEXT, b'{"type": "control", "status": "connected"}'))
    root = f.json("GET", "/_fake/sandbox/" + T.split("/")[-1], auth=False)[1]["root"]
    check(P + "pty: lazyStart starts the shell at the attach",
          wait_until(lambda: os.path.exists(root + "/tmp/ready"), 10))
    st, r, _ = f.json("POST", T + "/process/pty/p1/resize", {"cols": 100, "rows": 40})
    eq(P + "pty resize: 200 info", (st, r["cols"], r["rows"], r["active"]),
       (200, 100, 40, True))
    check(P + "pty resize: SIGWINCH", wait_until(lambda: os.path.exists(root + "/tmp/winched"),
                                                 10))
    ws.send(fakews.OP_BINARY, b"abc\r")
    out, close = b"", None
    try:
        while True:
            out += ws.recv()[1]
    except fakews.Closed as e:
        close = (e.code, e.reason)
    ws.close()
    eq(P + "pty output: binary frames", out, b"33 77\r\n40 100\r\nabc\r\ngot=abc\r\n")
    eq(P + "pty end: the exit code in the close frame", close,
       (1011, '{"exitCode":7,"exitReason":"non-zero exit"}'))
    st, r, _ = f.json("GET", T + "/process/pty/p1")
    eq(P + "pty: an ended session is gone", (st, r["message"]), (404, "PTY session not found"))
    ws = fakews.Client(f.port, T + "/process/pty/p1/connect",
                       {"Authorization": "Bearer dkey-123"})
    try:
        ws.recv()
        close = None
    except fakews.Closed as e:
        close = (e.code, e.reason)
    ws.close()
    eq(P + "pty connect to an ended session: closed at once", close,
       (1000, '{"error": "PTY session not found"}'))


def daytona():
    f = Fake("daytona.py", "dkey-123", {"SBX_FAKE_MINUTE": "1"})
    P = "daytona "
    st, body, _ = f.json("POST", "/api/sandbox", {}, auth=False)
    eq(P + "no Bearer: 401", st, 401)
    eq(P + "401 body is NestJS's", sorted(body), ["error", "message", "path", "statusCode",
                                                   "timestamp"])
    eq(P + "401 body fields", (body["statusCode"], body["error"], body["path"]),
       (401, "Unauthorized", "/api/sandbox"))
    st, body, _ = f.json("POST", "/api/sandbox", {"cpu": 1.5})
    eq(P + "cpu not an integer: 400", (st, body["message"]), (400, "cpu must be an integer number"))
    st, body, _ = f.json("POST", "/api/sandbox", {"cpu": 8})
    eq(P + "cpu over the org maximum: 400", (st, body["message"]),
       (400, "CPU request 8 exceeds maximum allowed per sandbox (4)"))
    st, sb, _ = f.json("POST", "/api/sandbox", {"labels": {"sbx.create-token": "sbx-1"},
                                                "env": {"A": "1"}, "cpu": 2, "memory": 2,
                                                "ttlMinutes": 30, "autoStopInterval": 0})
    eq(P + "create: 200", st, 200)
    eq(P + "create echoes the body", (sb["state"], sb["cpu"], sb["memory"], sb["disk"],
                                      sb["ttlMinutes"], sb["autoStopInterval"], sb["labels"]),
       ("started", 2, 2, 3, 30, 0, {"sbx.create-token": "sbx-1"}))
    eq(P + "toolboxProxyUrl points at the fake", sb["toolboxProxyUrl"],
       f.base + "/toolbox")
    sid = sb["id"]
    T = "/toolbox/" + sid
    st, got, _ = f.json("GET", "/api/sandbox/" + sid)
    eq(P + "get by id", (st, got["id"], got["state"]), (200, sid, "started"))
    st, lst, _ = f.json("GET", "/api/sandbox?labels=" +
                        urllib.request.quote(json.dumps({"sbx.create-token": "sbx-1"})))
    eq(P + "list by labels", (st, [s["id"] for s in lst["items"]], lst["nextCursor"]),
       (200, [sid], None))
    st, lst, _ = f.json("GET", "/api/sandbox?labels=" +
                        urllib.request.quote(json.dumps({"sbx.create-token": "other"})))
    eq(P + "list by other labels is empty", lst["items"], [])

    st, r, _ = f.json("POST", T + "/process/execute",
                      {"command": "echo hi; echo err >&2; pwd; exit 3", "cwd": "/work"})
    eq(P + "execute: exitCode and merged result", (st, r), (200, {"exitCode": 3,
                                                                  "result": "hi\nerr\n/work\n"}))
    st, r, _ = f.json("POST", T + "/process/execute", {"command": "sleep 30", "timeout": 1})
    eq(P + "execute timeout: 408 daemon body", (st, r["statusCode"], r["message"], r["method"]),
       (408, 408, "command execution timeout", "POST"))
    st, r, _ = f.json("POST", T + "/process/execute",
                      {"command": "ps -eo args | grep -c '^sleep 30$'"})
    eq(P + "the timed-out command was killed", r["result"], "0\n")
    st, r, _ = f.json("POST", T + "/process/execute", {"command": "echo $HOME; ps -eo pid= | wc -l"})
    eq(P + "HOME and a pid namespace of its own",
       r["result"].split("\n")[0], "/root")
    daytona_pty(f, P, T)
    SPLIT = {"X-Daytona-Split-Output": "true"}
    st, _, _ = f.req("POST", T + "/process/session", {"sessionId": "s1"})
    eq(P + "session create: 201", st, 201)
    # Without an SDK version or X-Daytona-Split-Output: true the daemon
    # merges the streams (pkg/session/common.go IsCombinedOutput).
    st, r, _ = f.json("POST", T + "/process/session/s1/exec",
                      {"command": "printf out; printf err >&2; exit 4"})
    eq(P + "session exec without the split header: merged output only",
       (st, r["exitCode"], r.get("stdout"), r.get("stderr"), r["output"] in ("outerr", "errout")),
       (200, 4, None, None, True))
    st, r, _ = f.json("POST", T + "/process/session/s1/exec",
                      {"command": "printf out; printf err >&2; exit 4"}, headers=SPLIT)
    eq(P + "session exec keeps stdout and stderr apart",
       (st, r["exitCode"], r["stdout"], r["stderr"]), (200, 4, "out", "err"))
    st, r, _ = f.json("POST", T + "/process/session/s1/exec",
                      {"command": "printf a; sleep 0.3; printf b >&2", "runAsync": True}, headers=SPLIT)
    eq(P + "async session exec: 202 with cmdId", (st, sorted(r)), (202, ["cmdId"]))
    cmd = r["cmdId"]
    st, logs, _ = f.req("GET", T + "/process/session/s1/command/%s/logs?follow=true" % cmd)
    eq(P + "followed logs carry the stream markers", (st, logs),
       (200, b"\x01\x01\x01a\x02\x02\x02b"))
    st, c, _ = f.json("GET", T + "/process/session/s1/command/" + cmd)
    eq(P + "command record", (c["id"], c["exitCode"]), (cmd, 0))
    # The answer is JSON text (Go's encoding/json: one U+FFFD per byte that
    # is not UTF-8, a real U+FFFD kept); the logs are the bytes.
    st, r, _ = f.json("POST", T + "/process/session/s1/exec",
                      {"command": "printf 'ok\\377\\376\\n'; printf 'e\\342\\202A\\357\\277\\275' >&2"}, headers=SPLIT)
    eq(P + "session exec: U+FFFD for each byte that is not UTF-8",
       (st, r["exitCode"], r["stdout"], r["stderr"]),
       (200, 0, "ok\ufffd\ufffd\n", "e\ufffd\ufffdA\ufffd"))
    st, logs, _ = f.req("GET", T + "/process/session/s1/command/%s/logs" % r["cmdId"])
    # The two streams are read apart, so either chunk may come first.
    o, e = b"\x01\x01\x01ok\xff\xfe\n", b"\x02\x02\x02e\xe2\x82A\xef\xbf\xbd"
    eq(P + "the logs (no follow) are the bytes, with the stream markers",
       (st, logs == o + e or logs == e + o), (200, True))
    # A script longer than an environment string may be reaches its shell
    # whole (through a pipe), its command's stdin still /dev/null.
    big = "x=" + "a" * (200 * 1024) + "; echo ${#x}; cat; echo end"
    st, r, _ = f.json("POST", T + "/process/session/s1/exec", {"command": big}, headers=SPLIT)
    eq(P + "session exec of a 200 KiB script", (st, r["exitCode"], r["stdout"], r["stderr"]),
       (200, 0, "204800\nend\n", ""))
    st, r, _ = f.json("POST", T + "/process/session/s1/exec",
                      {"command": "cat; echo \"${SBX_FAKE_SCRIPT-unset}\""}, headers=SPLIT)
    eq(P + "session exec: stdin at its end, the script's carrier not inherited",
       (st, r["exitCode"], r["stdout"]), (200, 0, "unset\n"))
    st, _, _ = f.req("DELETE", T + "/process/session/s1")
    eq(P + "session delete: 204", st, 204)

    mp, ctype = multipart([("file", ALL, "bin.dat")])
    st, _, _ = f.req("POST", T + "/files/upload?path=/work/deep/bin.dat", raw=mp,
                     headers={"Content-Type": ctype})
    eq(P + "upload (multipart file): 200", st, 200)
    st, data, hd = f.req("GET", T + "/files/download?path=/work/deep/bin.dat")
    check(P + "download is byte-exact (1 MiB, all byte values)", st == 200 and data == ALL,
          "status %d, %d bytes" % (st, len(data)))
    eq(P + "download is octet-stream", hd.get("Content-Type"), "application/octet-stream")
    st, r, _ = f.json("POST", T + "/process/execute", {"command": "sha256sum /work/deep/bin.dat"})
    eq(P + "the sandbox sees the same bytes", r["result"].split()[0],
       "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83")
    mp, ctype = multipart([("files[0].path", b"/work/b/one", None), ("files[0].file", b"1\n", "one"),
                           ("files[1].path", "/work/b/tw\u00f6 +%20".encode(), None),
                           ("files[1].file", b"", "two")])
    st, _, _ = f.req("POST", T + "/files/bulk-upload", raw=mp, headers={"Content-Type": ctype})
    eq(P + "bulk-upload: 200", st, 200)
    st, lst, _ = f.json("GET", T + "/files?path=/work/b")
    eq(P + "list: names, isDir, sizes",
       [(e["name"], e["isDir"], e["size"], e["path"]) for e in lst],
       [("one", False, 2, "/work/b/one"), ("tw\u00f6 +%20", False, 0, "/work/b/tw\u00f6 +%20")])
    st, info, _ = f.json("GET", T + "/files/info?path=/work/b")
    eq(P + "info of a directory", (st, info["isDir"], info["name"], info["permissions"]),
       (200, True, "b", "0755"))
    st, r, _ = f.json("GET", T + "/files/download?path=/work/none")
    eq(P + "download of a missing file: 404", (st, r["statusCode"], r["code"]),
       (404, 404, "NOT_FOUND"))
    st, r, _ = f.json("GET", T + "/files/download?path=/work/../../etc/passwd")
    eq(P + "a path out of the sandbox: 400", st, 400)

    # CASE-53: stopped and archived sandboxes keep their files; start wakes them.
    f.json("POST", "/_fake/config", {"start_delay": {"stopped": 0.5, "archived": 1.0}}, auth=False)
    st, _, _ = f.req("POST", T + "/process/session", {"sessionId": "s2"})
    eq(P + "a session made before the stop: 201", st, 201)
    f.json("POST", "/_fake/sandbox/%s/state" % sid, {"state": "stopped"}, auth=False)
    st, r, _ = f.json("GET", "/api/sandbox/" + sid)
    eq(P + "stopped: GET shows it", (st, r["state"]), (200, "stopped"))
    st, r, _ = f.json("POST", T + "/process/execute", {"command": "echo x"})
    eq(P + "stopped: toolbox answers 400 not started", (st, r["message"]),
       (400, "failed to resolve container IP after 3 attempts: no IP address found. "
             "Is the Sandbox started?"))
    st, r, _ = f.json("POST", "/api/sandbox/%s/start" % sid)
    eq(P + "start from stopped: starting", (st, r["state"]), (200, "starting"))
    check(P + "starting becomes started",
          wait_until(lambda: f.json("GET", "/api/sandbox/" + sid)[1]["state"] == "started", 5))
    st, r, _ = f.json("POST", T + "/process/execute", {"command": "wc -c < /work/deep/bin.dat"})
    eq(P + "files kept over a stop", r, {"exitCode": 0, "result": "1048576\n"})
    st, r, _ = f.json("POST", T + "/process/session/s2/exec", {"command": "echo x"}, headers=SPLIT)
    eq(P + "sessions end with the stopped daemon: 404", (st, r["statusCode"], r["message"]),
       (404, 404, "session s2 not found"))
    f.json("POST", "/_fake/sandbox/%s/state" % sid, {"state": "archived"}, auth=False)
    st, r, _ = f.json("POST", "/api/sandbox/%s/start" % sid)
    eq(P + "start from archived: restoring", r["state"], "restoring")
    check(P + "restoring becomes started",
          wait_until(lambda: f.json("GET", "/api/sandbox/" + sid)[1]["state"] == "started", 5))
    st, ctl, _ = f.json("GET", "/_fake/sandbox/" + sid, auth=False)
    eq(P + "two start requests counted", ctl["starts"], 2)
    f.json("POST", "/_fake/sandbox/%s/state" % sid, {"state": "error",
                                                     "errorReason": "disk quota exceeded"},
           auth=False)
    st, r, _ = f.json("GET", "/api/sandbox/" + sid)
    eq(P + "error state with its reason", (r["state"], r["errorReason"]),
       ("error", "disk quota exceeded"))
    st, r, _ = f.json("POST", "/api/sandbox/%s/start" % sid)
    eq(P + "start of an errored sandbox: 400", (st, r["message"]),
       (400, "Sandbox is in an errored state: disk quota exceeded"))

    # Faults: 429 with Retry-After, a 5xx burst.
    f.json("POST", "/_fake/faults", [{"method": "GET", "path": "^/api/sandbox/", "status": 429,
                                      "retry_after": "2", "times": 1},
                                     {"method": "POST", "path": "^/api/sandbox$", "status": 503,
                                      "times": 2}], auth=False)
    st, r, hd = f.json("GET", "/api/sandbox/" + sid)
    eq(P + "scripted 429 with Retry-After", (st, hd.get("Retry-After"), r["error"]),
       (429, "2", "Too Many Requests"))
    st, r, _ = f.json("GET", "/api/sandbox/" + sid)
    eq(P + "the 429 answers once", st, 200)
    codes = [f.json("POST", "/api/sandbox", {"autoStopInterval": 0})[0] for _ in range(3)]
    eq(P + "a 5xx burst of two, then the create", codes, [503, 503, 200])
    st, log, _ = f.json("GET", "/_fake/log", auth=False)
    eq(P + "the log holds every request, never the key",
       (any("dkey-123" in json.dumps(e) for e in log), log[0]["auth"], log[1]["auth"]),
       (False, None, "Bearer <redacted>"))
    eq(P + "the log numbers requests and keeps bodies, the header redacted",
       ([e["n"] for e in log[:2]], log[0]["headers"].get("Authorization"),
        log[1]["headers"].get("Authorization"), json.loads(log[-1]["body"])),
       ([1, 2], None, "Bearer <redacted>", {"autoStopInterval": 0}))
    # after / times -1 / pass (with delay) / drop / retry_after_date.
    f.json("POST", "/_fake/faults", [{"method": "GET", "path": "^/api/sandbox/", "status": 500,
                                      "after": 1, "times": -1}], auth=False)
    codes = [f.json("GET", "/api/sandbox/" + sid)[0] for _ in range(3)]
    eq(P + "after 1, always", codes, [200, 500, 500])
    st, rules, _ = f.json("GET", "/_fake/faults", auth=False)
    eq(P + "the rule counts what it saw and did", (rules[0]["seen"], rules[0]["acted"]), (3, 2))
    f.req("DELETE", "/_fake/faults", auth=False)
    eq(P + "DELETE /_fake/faults removes them", f.json("GET", "/api/sandbox/" + sid)[0], 200)
    f.json("POST", "/_fake/faults", {"path": "^/api/sandbox/", "action": "pass", "delay": 0.5},
           auth=False)
    t0 = time.time()
    st, r, _ = f.json("GET", "/api/sandbox/" + sid)
    eq(P + "pass: answered normally after the delay", (st, r["id"], time.time() - t0 >= 0.5),
       (200, sid, True))
    f.json("POST", "/_fake/faults", {"path": "^/api/sandbox/", "action": "drop"}, auth=False)
    try:
        f.req("GET", "/api/sandbox/" + sid)
        dropped = False
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
        dropped = True
    check(P + "drop: the connection closes without an answer", dropped)
    f.json("POST", "/_fake/faults", {"path": "^/api/sandbox/", "status": 429,
                                     "retry_after_date": 3}, auth=False)
    st, r, hd = f.json("GET", "/api/sandbox/" + sid)
    gap = (email.utils.parsedate_to_datetime(hd["Retry-After"])
           - email.utils.parsedate_to_datetime(hd["Date"])).total_seconds()
    eq(P + "retry_after_date: an HTTP-date 3 s after Date", (st, gap), (429, 3.0))
    # concurrency: two held for 1 s each; two more meanwhile are refused with
    # the provider's 429, without Retry-After; the slots free up after.
    f.json("POST", "/_fake/faults", {"method": "GET", "path": "^/api/sandbox/",
                                     "concurrency": 2, "delay": 1}, auth=False)
    held = [threading.Thread(target=lambda: f.json("GET", "/api/sandbox/" + sid))
            for _ in range(2)]
    for t in held:
        t.start()
    check(P + "concurrency: two requests hold the slots",
          wait_until(lambda: f.json("GET", "/_fake/faults", auth=False)[1][0]["inflight"] == 2, 4))
    refused = [f.json("GET", "/api/sandbox/" + sid) for _ in range(2)]
    eq(P + "concurrency: beyond the limit, 429 in the NestJS body, no Retry-After",
       [(st, r["statusCode"], r["error"], r["message"], "Retry-After" in hd)
        for st, r, hd in refused],
       [(429, 429, "Too Many Requests", "Too many concurrent requests (limit 2)", False)] * 2)
    for t in held:
        t.join()
    eq(P + "concurrency: a slot is free again once answered",
       f.json("GET", "/api/sandbox/" + sid)[0], 200)
    # A slot is freed once its answer was sent, just after the client got it.
    wait_until(lambda: f.json("GET", "/_fake/faults", auth=False)[1][0]["inflight"] == 0, 4)
    rule = f.json("GET", "/_fake/faults", auth=False)[1][0]
    eq(P + "concurrency: the rule counts what it admitted and refused",
       [rule[k] for k in ("seen", "admitted", "acted", "inflight", "peak")], [5, 3, 2, 0, 2])
    f.req("DELETE", "/_fake/faults", auth=False)
    st, lst, _ = f.json("GET", "/api/sandbox?limit=1")
    eq(P + "pagination: nextCursor", (len(lst["items"]), lst["nextCursor"]), (1, "1"))
    for s in f.json("GET", "/api/sandbox")[1]["items"]:
        f.req("DELETE", "/api/sandbox/" + s["id"])

    # Lifetime: ttlMinutes deletes, autoStopInterval stops (SBX_FAKE_MINUTE=1 s).
    st, sb2, _ = f.json("POST", "/api/sandbox", {"ttlMinutes": 2, "autoStopInterval": 0})
    st, sb3, _ = f.json("POST", "/api/sandbox", {"autoStopInterval": 1})
    check(P + "autoStopInterval stops an idle sandbox",
          wait_until(lambda: f.json("GET", "/_fake/sandbox/" + sb3["id"], auth=False)[1]["state"]
                     == "stopped", 4))
    check(P + "ttlMinutes deletes the sandbox",
          wait_until(lambda: f.json("GET", "/api/sandbox/" + sb2["id"])[0] == 404, 4))
    root = f.json("GET", "/_fake/sandbox/" + sb3["id"], auth=False)[1]["root"]
    st, r, _ = f.json("DELETE", "/api/sandbox/" + sb3["id"])
    eq(P + "delete: 200 Sandbox", (st, r["id"]), (200, sb3["id"]))
    st, r, _ = f.json("GET", "/api/sandbox/" + sb3["id"])
    eq(P + "deleted: 404 NestJS body", (st, r["message"]),
       (404, "Sandbox with ID or name %s not found" % sb3["id"]))
    eq(P + "deleted: its directory is gone", os.path.exists(root), False)
    roots = {f.json("GET", "/_fake/sandbox/" + s, auth=False)[1]["root"]
             for s in f.json("GET", "/_fake/sandboxes", auth=False)[1]}
    eq(P + "stopped by PID", f.stop(), 0)
    eq(P + "no sandbox process left", bwrap_roots() & (roots | {root}), set())


# ---------------------------------------------------------------- Tensorlake
def tensorlake():
    f = Fake("tensorlake.py", "tkey-456")
    P = "tensorlake "
    st, r, _ = f.json("POST", "/sandboxes", {}, auth=False)
    eq(P + "no Bearer: 401", st, 401)
    st, r, _ = f.json("POST", "/sandboxes", {"metadata": {"a": "b"}})
    eq(P + "no metadata at create", (st, r["message"]), (400, "unknown field `metadata`"))
    st, r, _ = f.json("POST", "/sandboxes", {"timeout_secs": 600,
                                             "resources": {"cpus": 1.0, "memory_mb": 1024}})
    eq(P + "create: pending with a sandbox_url",
       (st, r["status"], r["sandbox_url"]),
       (200, "pending", "%s/sandbox/%s" % (f.base, r["sandbox_id"])))
    sid = r["sandbox_id"]
    D = "/sandbox/" + sid
    check(P + "pending becomes running",
          wait_until(lambda: f.json("GET", "/sandboxes/" + sid)[1]["status"] == "running", 5))
    st, info, _ = f.json("GET", "/sandboxes/" + sid)
    eq(P + "SandboxInfo", (info["sandbox_id"], info["timeout_secs"], info["resources"]["cpus"],
                           info["resources"]["memory_mb"]), (sid, 600, 1.0, 1024))
    st, raw, hd = f.req("POST", D + "/api/v1/processes/run",
                        {"command": "/bin/sh", "args": ["-c", "echo hi; echo err >&2; printf tail;"
                                                        " exit 3"], "working_dir": "/work"},
                        headers={"Accept": "text/event-stream"})
    ev, _ = sse_events(raw)
    eq(P + "run: SSE content type", (st, hd.get("Content-Type")), (200, "text/event-stream"))
    eq(P + "run: pid first", sorted(ev[0]), ["pid", "started_at"])
    eq(P + "run: one line per event, then the exit",
       sorted([(e["stream"], e["line"]) for e in ev[1:-1]]) + [ev[-1]],
       [("stderr", "err"), ("stdout", "hi"), ("stdout", "tail"),
        {"exit_code": 3, "oom_killed": False}])
    st, raw, _ = f.req("POST", D + "/api/v1/processes/run",
                       {"command": "/bin/sh", "args": ["-c", "sleep 3; echo done"]})
    ev, comments = sse_events(raw)
    eq(P + "no keepalive before 15 s of quiet", (comments, ev[-2]["line"], ev[-1]),
       (0, "done", {"exit_code": 0, "oom_killed": False}))
    f.req("POST", "/_fake/keepalive", {"seconds": 1}, auth=False)
    st, raw, _ = f.req("POST", D + "/api/v1/processes/run",
                       {"command": "/bin/sh", "args": ["-c", "sleep 3; echo done"]})
    ev, comments = sse_events(raw)
    st, ka, _ = f.json("GET", "/_fake/keepalive", auth=False)
    f.req("POST", "/_fake/keepalive", {"seconds": 0}, auth=False)
    eq(P + "a quiet command gets empty keepalive comments, counted",
       (comments >= 2, all(ln == b":" for ln in raw.split(b"\n") if ln.startswith(b":")), ka["sent"] == comments,
        ev[-2]["line"], ev[-1]),
       (True, True, True, "done", {"exit_code": 0, "oom_killed": False}))
    st, raw, _ = f.req("POST", D + "/api/v1/processes/run",
                       {"command": "sleep", "args": ["30"], "timeout": 1})
    ev, _ = sse_events(raw)
    eq(P + "run timeout: killed by SIGKILL", ev[-1], {"oom_killed": False, "signal": 9})
    st, raw, _ = f.req("POST", "/api/v1/processes/run",
                       {"command": "/bin/sh", "args": ["-c", "echo $HOME $A"],
                        "env": {"A": "x y"}}, headers={"X-Tensorlake-Sandbox-Id": sid})
    ev, _ = sse_events(raw)
    eq(P + "routing by X-Tensorlake-Sandbox-Id; env per process", ev[1]["line"], "/root x y")
    st, p, _ = f.json("POST", D + "/api/v1/processes",
                      {"command": "/bin/cat", "stdin_mode": "pipe"})
    eq(P + "start: 201 ProcessInfo", (st, p["status"], p["stdin_writable"], p["command"]),
       (201, "running", True, "/bin/cat"))
    pid = p["pid"]
    f.req("POST", D + "/api/v1/processes/%d/stdin" % pid, raw=b"abc\ndef")
    f.req("POST", D + "/api/v1/processes/%d/stdin/close" % pid, raw=b"")
    check(P + "stdin reaches the process, close ends it",
          wait_until(lambda: f.json("GET", D + "/api/v1/processes/%d" % pid)[1]["status"]
                     == "exited", 5))
    st, out, _ = f.json("GET", D + "/api/v1/processes/%d/output" % pid)
    eq(P + "output lines", out, {"pid": pid, "lines": ["abc", "def"], "line_count": 2})
    st, p, _ = f.json("POST", D + "/api/v1/processes", {"command": "sleep", "args": ["30"]})
    f.req("DELETE", D + "/api/v1/processes/%d" % p["pid"])
    check(P + "DELETE process = SIGKILL",
          wait_until(lambda: f.json("GET", D + "/api/v1/processes/%d" % p["pid"])[1]
                     .get("signal") == 9, 5))

    st, _, _ = f.req("PUT", D + "/api/v1/files?path=/work/deep/bin.dat", raw=ALL,
                     headers={"Content-Type": "application/octet-stream"})
    eq(P + "PUT raw bytes: 204", st, 204)
    st, data, _ = f.req("GET", D + "/api/v1/files?path=/work/deep/bin.dat")
    check(P + "GET raw bytes is byte-exact", st == 200 and data == ALL,
          "status %d, %d bytes" % (st, len(data)))
    st, raw, _ = f.req("POST", D + "/api/v1/processes/run",
                       {"command": "sha256sum", "args": ["/work/deep/bin.dat"]})
    ev, _ = sse_events(raw)
    eq(P + "the sandbox sees the same bytes", ev[1]["line"].split()[0],
       "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83")
    f.req("PUT", D + "/api/v1/files?path=/work/z.txt", raw=b"zz")
    st, lst, _ = f.json("GET", D + "/api/v1/files/list?path=/work")
    eq(P + "list: directories first", [(e["name"], e["is_dir"], e["size"]) for e in lst["entries"]],
       [("deep", True, None), ("z.txt", False, 2)])
    st, r, _ = f.json("GET", D + "/api/v1/files?path=/work/none")
    eq(P + "missing file: 404 {error, code}", (st, r["code"]), (404, "not_found"))
    st, r, _ = f.json("GET", D + "/api/v1/files?path=/work")
    eq(P + "a directory: 400", st, 400)
    st, r, _ = f.json("GET", D + "/api/v1/files?path=/work/../etc/passwd")
    eq(P + "a path with ..: 403", st, 403)

    st, s, _ = f.json("POST", "/sandboxes/%s/snapshot" % sid, {"snapshot_type": "filesystem"})
    eq(P + "snapshot", (st, s["status"]), (200, "completed"))
    st, sn, _ = f.json("GET", "/snapshots/" + s["snapshot_id"])
    eq(P + "snapshot record", (sn["sandbox_id"], sn["status"]), (sid, "completed"))
    st, r2, _ = f.json("POST", "/sandboxes", {"snapshot_id": s["snapshot_id"]})
    sid2 = r2["sandbox_id"]
    st, data, _ = f.req("GET", "/sandbox/%s/api/v1/files?path=/work/z.txt" % sid2)
    eq(P + "restore from the snapshot keeps the files", (st, data), (200, b"zz"))
    st, r, _ = f.json("POST", "/sandboxes/%s/suspend" % sid)
    eq(P + "suspend of an unnamed sandbox: 400", st, 400)

    f.json("POST", "/_fake/faults", [{"method": "*", "path": "^/sandboxes/", "status": 429,
                                      "times": 1}, {"method": "GET", "path": "^/sandboxes/",
                                                    "status": 502, "times": 2}], auth=False)
    codes = [f.json("GET", "/sandboxes/" + sid)[0] for _ in range(4)]
    eq(P + "scripted 429, then a 5xx burst", codes, [429, 502, 502, 200])

    st, r, _ = f.json("POST", "/sandboxes", {"timeout_secs": 1})
    short = r["sandbox_id"]
    check(P + "timeout_secs terminates an unnamed sandbox",
          wait_until(lambda: f.json("GET", "/sandboxes/" + short)[1]["status"] == "terminated", 5))
    eq(P + "its termination reason", f.json("GET", "/sandboxes/" + short)[1]["termination_reason"],
       "timeout")
    st, r, _ = f.json("POST", "/sandboxes", {"timeout_secs": 1, "name": "named-one"})
    named = r["sandbox_id"]
    check(P + "a named sandbox suspends after timeout_secs without traffic",
          wait_until(lambda: f.json("GET", "/sandboxes/" + named)[1]["status"] == "suspended", 5))
    f.req("PUT", "/sandbox/%s/api/v1/files?path=/work/w" % named, raw=b"w")
    eq(P + "traffic resumes it", f.json("GET", "/sandboxes/" + named)[1]["status"], "running")

    root = f.json("GET", "/_fake/sandbox/" + sid, auth=False)[1]["root"]
    st, _, _ = f.req("DELETE", "/sandboxes/" + sid)
    eq(P + "delete: 200", st, 200)
    eq(P + "deleted: terminated", f.json("GET", "/sandboxes/" + sid)[1]["status"], "terminated")
    st, r, _ = f.json("GET", D + "/api/v1/files?path=/work/z.txt")
    eq(P + "deleted: data plane 404", (st, r["code"]), (404, "not_found"))
    eq(P + "deleted: its directory is gone", os.path.exists(root), False)
    st, lst, _ = f.json("GET", "/sandboxes?status=running")
    eq(P + "list status=running", sorted(s["id"] for s in lst["sandboxes"]), sorted([sid2, named]))
    st, lst, _ = f.json("GET", "/sandboxes")
    eq(P + "list without status has the terminated ones too", len(lst["sandboxes"]), 4)
    st, log, _ = f.json("GET", "/_fake/log", auth=False)
    eq(P + "the log never holds the key", any("tkey-456" in json.dumps(e) for e in log), False)
    roots = {f.json("GET", "/_fake/sandbox/" + s, auth=False)[1]["root"] for s in (sid2, named)}
    eq(P + "stopped by PID", f.stop(), 0)
    eq(P + "no sandbox process left", bwrap_roots() & (roots | {root}), set())


def fakehttp_nodelay():
    """fakehttp's server, in this process, with a route that answers the
    TCP_NODELAY option of the connection it answers on: set (Nagle's
    algorithm would hold a streamed answer's last small write until the
    client's delayed ACK) on each of two connections."""
    sys.path.insert(0, HERE)
    import fakehttp

    class Probe(fakehttp.Handler):
        def route(self, path, query):
            self.send_json(200, {"nodelay": self.connection.getsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY)})

    Probe.fake = fakehttp.Fake("probe-key")
    server = fakehttp.Server(("127.0.0.1", 0), Probe)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    t.start()
    try:
        for i in (1, 2):
            c = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
            c.request("GET", "/probe", headers={"Authorization": "Bearer probe-key"})
            r = c.getresponse()
            eq("fakehttp: connection %d is answered with TCP_NODELAY set" % i,
               (r.status, json.loads(r.read())["nodelay"] != 0), (200, True))
            c.close()
    finally:
        server.shutdown()
        server.server_close()
        t.join()


def output_pump():
    """nsbox.OutputPump, which every fake's command streams go through:
    once the command has exited, finish() returns with everything it wrote
    passed on, however slowly the consumer takes it (a consumer that needs
    0.3 s a chunk, as a loaded machine can make it, lost the rest to a
    fixed 0.2 s drain before); a background child holding the pipe does not
    hold finish(); a terminal's output comes through whole the same way."""
    sys.path.insert(0, HERE)
    import nsbox
    P = "OutputPump: "
    for slow in (0.0, 0.3):
        got = {1: bytearray(), 2: bytearray()}

        def sink(fd):
            def emit(data):
                time.sleep(slow)
                got[fd].extend(data)
            return emit
        c = subprocess.Popen(["/bin/sh", "-c", "printf 'a\\377'; sleep 0.05; printf b; "
                              "printf 'e1\\n' >&2; sleep 0.05; printf 'e2' >&2; "
                              "(sleep 30 &); exec sleep 0.01"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        pumps = [nsbox.OutputPump(c.stdout, sink(1)), nsbox.OutputPump(c.stderr, sink(2))]
        c.wait()
        t0 = time.time()
        for p in pumps:
            p.finish()
        took = time.time() - t0
        eq(P + "stdout whole, consumer taking %.1f s a chunk" % slow, bytes(got[1]),
           b"a\xffb")
        eq(P + "stderr whole, consumer taking %.1f s a chunk" % slow, bytes(got[2]), b"e1\ne2")
        check(P + "a background child holding the pipes does not hold finish() (%.1f s)"
              % slow, took < 5, "finish took %.2f s" % took)
        try:
            os.killpg(c.pid, signal.SIGKILL)
        except OSError:
            pass
        c.stdout.close()
        c.stderr.close()
    # close=True: the pump reads (and drops) what a background child writes
    # after finish() until the child lets go, then closes the pipe.
    c = subprocess.Popen(["/bin/sh", "-c", "(sleep 0.3; echo late; exec sleep 0.2) & echo now"],
                         stdout=subprocess.PIPE)
    got = bytearray()
    pump = nsbox.OutputPump(c.stdout, got.extend, close=True)
    c.wait()
    pump.finish()
    eq(P + "close=True: the command's output, not the background child's", bytes(got), b"now\n")
    check(P + "close=True: the pipe is closed once the background child lets go",
          wait_until(lambda: c.stdout.closed, 10), "still open after 10 s")
    eq(P + "close=True: nothing of the background child's reached the consumer", bytes(got),
       b"now\n")
    # A descriptor numbered past select()'s FD_SETSIZE (1024), as a fake
    # that has run many commands holds.
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        c = subprocess.Popen(["/bin/sh", "-c", "echo high"], stdout=subprocess.PIPE)
        high = bytearray()
        pump = nsbox.OutputPump(c.stdout, high.extend)
        c.wait()
        pump.finish()
        eq(P + "a pipe numbered past 1024 (%s) comes through whole"
           % ("yes" if c.stdout.fileno() > 1024 else "no"), bytes(high), b"high\n")
        c.stdout.close()
    finally:
        for fd in held:
            os.close(fd)
    master, slave = os.openpty()
    got = bytearray()

    def slow_emit(data):
        time.sleep(0.3)
        got.extend(data)
    c = subprocess.Popen(["/bin/sh", "-c", "printf one; sleep 0.05; printf two"],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    pump = nsbox.OutputPump(master, slow_emit)
    c.wait()
    pump.finish()
    os.close(master)
    eq(P + "a terminal's output whole, consumer taking 0.3 s a chunk", bytes(got), b"onetwo")


def main():
    which = sys.argv[1:] or ["daytona", "tensorlake", "fakehttp", "outputpump"]
    for w in which:
        try:
            {"daytona": daytona, "tensorlake": tensorlake, "fakehttp": fakehttp_nodelay,
             "outputpump": output_pump}[w]()
        except Exception as e:  # a crash is a failure of its own, named
            check(w + " ran to the end", False, "%s: %s" % (type(e).__name__, e))
        finally:
            for f in list(Fake.running):   # a crashed section's fake, by PID
                f.stop()
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
