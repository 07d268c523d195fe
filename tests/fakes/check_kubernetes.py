#!/usr/bin/python3
"""Drives the Kubernetes API server contract fake (tests/fakes/kubernetes.py)
over HTTP (no TLS here: tests/kubernetes.sh runs it with TLS) and checks
the exact answers of the contract's section 7: Status error bodies, the
restricted Pod Security refusal (403), AlreadyExists (409), the pod's
status transitions (Pending, Running with the container waiting, then
running), ImagePullBackOff, the exec upgrade refused with 400 until the
container runs, the exec WebSocket's framing (the chosen subprotocol, the
initial empty stdout frame, output on channels 1 and 2, one Status on
channel 3 with the exit code, the close frame; v5's [255, 0] stdin close;
v4 chosen when the client offers only v4), NetworkPolicy objects, a PATCH
(JSON merge patch) that may lower activeDeadlineSeconds but not raise it
nor change another field, DELETE with its grace period and the 404 after.
The fake is started on an ephemeral port and stopped by its PID. Prints
TAP.

python3-wsproto (Debian) frames the client side.
"""

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
KEY = "k8s-check-key-123"
NS = "/api/v1/namespaces/default"

results = []


def check(name, cond, detail=""):
    results.append((bool(cond), name, detail))
    return bool(cond)


def eq(name, got, want):
    return check(name, got == want, "got %r, want %r" % (got, want))


class Fake:
    def __init__(self, tmpdir, tls=None):
        """The fake without TLS, or with @tls (certificate, key): then exec
        streams go over TLS and the JSON routes to its plain port."""
        e = dict(os.environ)
        e["TMPDIR"] = tmpdir
        e["SBX_FAKE_API_KEY"] = KEY
        for k in ("SBX_FAKE_TLS_CERT", "SBX_FAKE_TLS_KEY", "SBX_FAKE_TLS_CA"):
            e.pop(k, None)
        self.tls = None
        if tls:
            e["SBX_FAKE_TLS_CERT"], e["SBX_FAKE_TLS_KEY"] = tls
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.tls.load_verify_locations(tls[0])
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "kubernetes.py")],
                                     stdout=subprocess.PIPE, env=e)
        line = self.proc.stdout.readline().decode()
        control = None
        if tls and line.startswith("CONTROL "):
            control = int(line.split()[1])
            line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT ") or (tls and control is None):
            raise SystemExit("Bail out! kubernetes.py did not start: %r" % line)
        self.port = int(line.split()[1])
        self.base = "http://127.0.0.1:%d" % (control or self.port)

    def json(self, method, path, body=None, auth=True, ctype="application/json"):
        data = None if body is None else json.dumps(body).encode()
        h = {"Authorization": "Bearer " + KEY} if auth else {}
        if body is not None:
            h["Content-Type"] = ctype
        r = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw else None

    def exec(self, pod, argv, protocols, stdin=None, tty=False, resize=None):
        """One exec stream: (status line, chosen protocol, frames [(ch, bytes)],
        close code)."""
        q = [("container", "sandbox")] + [("command", a) for a in argv] + [
            ("stdin", "true" if stdin is not None else "false"), ("stdout", "true"),
            ("stderr", "false" if tty else "true"), ("tty", "true" if tty else "false")]
        path = "%s/pods/%s/exec?%s" % (NS, pod, urllib.parse.urlencode(q))
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        if self.tls:
            s = self.tls.wrap_socket(s, server_hostname="127.0.0.1")
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n"
                   "Sec-WebSocket-Protocol: %s\r\nAuthorization: Bearer %s\r\n\r\n"
                   % (path, key, protocols, KEY)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            if not d:
                break
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        hdrs = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip()
                for ln in lines[1:] if ":" in ln}
        if not lines[0].startswith("HTTP/1.1 101"):
            n = int(hdrs.get("content-length", "0"))
            while len(rest) < n:
                d = s.recv(65536)
                if not d:
                    break
                rest += d
            s.close()
            return lines[0], None, [], json.loads(rest or b"null")
        ws = Connection(ConnectionType.CLIENT)
        if resize:
            s.sendall(ws.send(BytesMessage(data=b"\x04" + json.dumps(resize).encode())))
        if stdin is not None:
            s.sendall(ws.send(BytesMessage(data=b"\x00" + stdin)))
            if hdrs.get("sec-websocket-protocol", "").startswith("v5"):
                s.sendall(ws.send(BytesMessage(data=b"\xff\x00")))
        frames, code = [], None
        ws.receive_data(rest)
        while code is None:
            for ev in ws.events():
                if isinstance(ev, BytesMessage):
                    frames.append((ev.data[0], bytes(ev.data[1:])))
                elif isinstance(ev, CloseConnection):
                    code = ev.code
                    s.sendall(ws.send(ev.response()))
            if code is not None:
                break
            d = s.recv(65536)
            if not d:
                break
            ws.receive_data(d)
        s.close()
        return lines[0], hdrs.get("sec-websocket-protocol"), frames, code

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


def pod(name, image="debian:bookworm-slim", restricted=True):
    sc = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    psc = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
           "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"sandbox": name}},
            "spec": {"securityContext": psc if restricted else {},
                     "containers": [{"name": "sandbox", "image": image,
                                     "securityContext": sc if restricted else {},
                                     "volumeMounts": [{"name": "w", "mountPath": "/work"}]}],
                     "volumes": [{"name": "w", "emptyDir": {}}]}}


def wait_state(f, name, want, secs=10):
    end = time.time() + secs
    seen = []
    while time.time() < end:
        st, b = f.json("GET", "%s/pods/%s" % (NS, name))
        cs = (b.get("status") or {}).get("containerStatuses") or [{}]
        state = (b["status"]["phase"], sorted((cs[0].get("state") or {}).keys()))
        if not seen or seen[-1] != state:
            seen.append(state)
        if want(b):
            return seen, b
        time.sleep(0.02)
    return seen, None


def checks(f):
    st, b = f.json("GET", "/version")
    eq("version 200", (st, b["major"]), (200, "1"))
    st, b = f.json("GET", NS + "/pods/p", auth=False)
    eq("no credential: 401 Status", (st, b["kind"], b["status"], b["code"]),
       (401, "Status", "Failure", 401))
    st, b = f.json("POST", NS + "/pods", pod("loose", restricted=False))
    eq("a pod outside restricted PSS: 403 Forbidden", (st, b["reason"]), (403, "Forbidden"))
    check("403 names the policy", 'violates PodSecurity "restricted:latest": '
          'allowPrivilegeEscalation != false' in b["message"], b["message"])
    f.json("POST", "/_fake/config", {"pending_s": 0.3, "creating_s": 0.3}, auth=False)
    st, b = f.json("POST", NS + "/pods", pod("p1"))
    eq("create 201 Pending", (st, b["status"]["phase"]), (201, "Pending"))
    st, b = f.json("POST", NS + "/pods", pod("p1"))
    eq("same name: 409 AlreadyExists", (st, b["reason"], b["details"]["name"]),
       (409, "AlreadyExists", "p1"))
    line, _, _, body = f.exec("p1", ["true"], "v5.channel.k8s.io")
    eq("exec before the container runs: 400 container not found",
       (line.split()[1], body["message"]),
       ("400", 'unable to upgrade connection: container not found ("sandbox")'))
    seen, b = wait_state(f, "p1", lambda b: b["status"]["containerStatuses"][0]["ready"]
                         if b["status"].get("containerStatuses") else False)
    eq("Pending, then Running waiting, then Running running", seen,
       [("Pending", []), ("Running", ["waiting"]), ("Running", ["running"])])
    line, proto, frames, code = f.exec(
        "p1", ["sh", "-c", "cat; echo err >&2; exit 3"], "v5.channel.k8s.io,v4.channel.k8s.io",
        stdin=b"hello\n")
    eq("v5 chosen", (line.split()[1], proto), ("101", "v5.channel.k8s.io"))
    eq("the first frame is an empty stdout frame", frames[:1], [(1, b"")])
    eq("stdout on 1, stderr on 2", (b"".join(p for c, p in frames if c == 1),
                                     b"".join(p for c, p in frames if c == 2)),
       (b"hello\n", b"err\n"))
    st3 = [json.loads(p) for c, p in frames if c == 3 and p]
    eq("one Status on 3: NonZeroExitCode with ExitCode 3",
       [(s["status"], s["reason"], s["details"]["causes"]) for s in st3],
       [("Failure", "NonZeroExitCode", [{"reason": "ExitCode", "message": "3"}])])
    eq("then a normal close", code, 1000)
    line, proto, frames, code = f.exec("p1", ["sh", "-c", "echo v4"], "v4.channel.k8s.io")
    eq("v4 when offered alone; Success", (proto, [json.loads(p) for c, p in frames
                                                  if c == 3 and p]),
       ("v4.channel.k8s.io", [{"metadata": {}, "status": "Success"}]))
    # stdout and stderr written at once: every frame is a whole binary
    # message (two outputs framed together must not make one a
    # continuation of the other), nothing lost, the close normal.
    n = 3000
    line, proto, frames, code = f.exec(
        "p1", ["sh", "-c", 'i=0; while [ $i -lt %d ]; do echo o$i; echo e$i >&2; '
               'i=$((i+1)); done' % n], "v5.channel.k8s.io")
    eq("stdout and stderr at once: both whole, in order, closed normally",
       (b"".join(p for c, p in frames if c == 1) == b"".join(b"o%d\n" % i for i in range(n)),
        b"".join(p for c, p in frames if c == 2) == b"".join(b"e%d\n" % i for i in range(n)),
        sorted(set(c for c, p in frames)), [json.loads(p) for c, p in frames if c == 3 and p],
        code),
       (True, True, [1, 2, 3], [{"metadata": {}, "status": "Success"}], 1000))
    line, proto, frames, code = f.exec("p1", ["sh", "-c", "sleep 0.5; stty size"], "v5.channel.k8s.io",
                                       stdin=b"", tty=True,
                                       resize={"Width": 101, "Height": 31})
    eq("tty: the resize on channel 4 holds", b"".join(p for c, p in frames if c == 1),
       b"31 101\r\n")
    st, b = f.json("POST", NS + "/pods", pod("p2", image="nosuch:tag"))
    seen, b = wait_state(f, "p2", lambda b: (b["status"].get("containerStatuses") or [{}])[0]
                         .get("state", {}).get("waiting", {}).get("reason") == "ImagePullBackOff")
    eq("an unknown image: ImagePullBackOff with its message",
       b["status"]["containerStatuses"][0]["state"]["waiting"]["message"] if b else None,
       'Back-off pulling image "nosuch:tag"')
    np = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
          "metadata": {"name": "p1-deny-egress"},
          "spec": {"podSelector": {"matchLabels": {"sandbox": "p1"}}, "policyTypes": ["Egress"]}}
    NP = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies"
    st, b = f.json("POST", NP, np)
    eq("NetworkPolicy 201", (st, b["metadata"]["name"]), (201, "p1-deny-egress"))
    st, b = f.json("DELETE", NP + "/p1-deny-egress")
    eq("NetworkPolicy DELETE 200", st, 200)
    st, b = f.json("DELETE", NP + "/p1-deny-egress")
    eq("NetworkPolicy gone: 404 NotFound", (st, b["reason"]), (404, "NotFound"))
    mp = "application/merge-patch+json"
    st, b = f.json("PATCH", NS + "/pods/p1", {"spec": {"activeDeadlineSeconds": 600}},
                   ctype=mp)
    eq("PATCH sets activeDeadlineSeconds", (st, b["spec"]["activeDeadlineSeconds"]), (200, 600))
    st, b = f.json("PATCH", NS + "/pods/p1", {"spec": {"activeDeadlineSeconds": 60}},
                   ctype=mp)
    eq("PATCH lowers it", (st, b["spec"]["activeDeadlineSeconds"]), (200, 60))
    st, b = f.json("PATCH", NS + "/pods/p1", {"spec": {"activeDeadlineSeconds": 61}},
                   ctype=mp)
    eq("PATCH cannot raise it: 422", (st, b["reason"], b["message"]),
       (422, "Invalid", 'Pod "p1" is invalid: spec.activeDeadlineSeconds: Invalid value: 61: '
        'must be less than or equal to previous value'))
    st, b = f.json("PATCH", NS + "/pods/p1", {"spec": {"restartPolicy": "Always"}}, ctype=mp)
    eq("PATCH of another spec field: 422 Forbidden", (st, b["reason"],
       b["message"].startswith('Pod "p1" is invalid: spec: Forbidden: pod updates may not '
                               'change fields other than')), (422, "Invalid", True))
    st, b = f.json("PATCH", NS + "/pods/p1", {"spec": {"activeDeadlineSeconds": 30}})
    eq("PATCH as application/json: 415", (st, b["reason"]), (415, "UnsupportedMediaType"))
    st, b = f.json("DELETE", NS + "/pods/p1?gracePeriodSeconds=0")
    eq("DELETE 200 with deletionTimestamp", (st, "deletionTimestamp" in b["metadata"]),
       (200, True))
    st, b = f.json("GET", NS + "/pods/p1")
    eq("then 404 NotFound Status", (st, b["kind"], b["reason"], b["details"]),
       (404, "Status", "NotFound", {"name": "p1", "kind": "pods"}))
    st, b = f.json("GET", "/_fake/pods", auth=False)
    eq("the grace period is recorded", [p["grace"] for p in b if p["name"] == "p1"], [0])
    f.json("DELETE", NS + "/pods/p2?gracePeriodSeconds=0")
    # A pod deleted while an exec runs in it: the command is killed, and
    # the stream still ends with its Status (exit 137, SIGKILL) and a
    # close frame.
    f.json("POST", NS + "/pods", pod("p3"))
    wait_state(f, "p3", lambda b: b["status"]["containerStatuses"][0]["ready"]
               if b["status"].get("containerStatuses") else False)
    got = {}
    t = threading.Thread(target=lambda: got.update(
        r=f.exec("p3", ["sh", "-c", "echo started; exec sleep 30"], "v5.channel.k8s.io")))
    t.start()
    end = time.time() + 10
    while time.time() < end:
        st, b = f.json("GET", "/_fake/execs", auth=False)
        if any(e["pod"] == "p3" for e in b):
            break
        time.sleep(0.02)
    time.sleep(0.3)
    st, b = f.json("DELETE", NS + "/pods/p3?gracePeriodSeconds=0")
    t.join(30)
    line, proto, frames, code = got.get("r", ("", None, [], None))
    eq("a pod deleted under its exec: the Status says 137, then a normal close",
       (b"".join(p for c, p in frames if c == 1),
        [(s["reason"], s["details"]["causes"]) for s in
         (json.loads(p) for c, p in frames if c == 3 and p)], code),
       (b"started\n", [("NonZeroExitCode", [{"reason": "ExitCode", "message": "137"}])],
        1000))


def tls_checks(f, pods=8, each=40):
    """Exec streams over TLS from @pods threads at once, @each one after
    another on each: every upgrade is answered (101) and every stream
    carries its command's output whole, its Status and a normal close. (A
    stream that went on reading its connection after the server closed it
    would read, with its keys, the bytes of the next connection given the
    same descriptor, and answer them with an alert: that connection's
    handshake or upgrade answer then failed to decrypt.)"""
    f.json("POST", "/_fake/config", {"pending_s": 0, "creating_s": 0}, auth=False)
    for i in range(pods):
        f.json("POST", NS + "/pods", pod("t%d" % i))
    for i in range(pods):
        wait_state(f, "t%d" % i, lambda b: b["status"]["containerStatuses"][0]["ready"]
                   if b["status"].get("containerStatuses") else False)
    bad = []

    def worker(i):
        for k in range(each):
            try:
                line, _, frames, code = f.exec(
                    "t%d" % i, ["sh", "-c", "echo o%d; echo e%d >&2" % (k, k)],
                    "v5.channel.k8s.io")
            except (OSError, ValueError) as e:
                bad.append((i, k, repr(e)))
                continue
            got = (line.split()[1] if line else "", b"".join(p for c, p in frames if c == 1),
                   b"".join(p for c, p in frames if c == 2),
                   [json.loads(p)["status"] for c, p in frames if c == 3 and p], code)
            if got != ("101", b"o%d\n" % k, b"e%d\n" % k, ["Success"], 1000):
                bad.append((i, k, got))
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(pods)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    eq("%d exec streams over TLS from %d threads: every upgrade answered, every "
       "output whole" % (pods * each, pods), bad[:3], [])
    for i in range(pods):
        f.json("DELETE", NS + "/pods/t%d?gracePeriodSeconds=0" % i)


def run():
    tmp = tempfile.mkdtemp(prefix="sbx-check-kubernetes-")
    f = Fake(tmp)
    try:
        checks(f)
    finally:
        eq("the fake stops by its PID", f.stop(), 0)
        left = os.listdir(tmp)
        os.rmdir(tmp) if not left else None
    check("no pod directory left", not left, repr(left))
    tmp = tempfile.mkdtemp(prefix="sbx-check-kubernetes-")
    cert, key = os.path.join(tmp, "server.crt"), os.path.join(tmp, "server.key")
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                           "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                           "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not check("openssl made the server's certificate", made.returncode == 0,
                 made.stderr.decode(errors="replace")):
        shutil.rmtree(tmp)
        return
    f = Fake(tmp, (cert, key))
    try:
        tls_checks(f)
    finally:
        eq("the TLS fake stops by its PID", f.stop(), 0)
        os.remove(cert)
        os.remove(key)
        left = os.listdir(tmp)
        os.rmdir(tmp) if not left else None
    check("no pod directory left after the TLS streams", not left, repr(left))


def main():
    try:
        run()
    except Exception as e:  # a crash is a failure of its own, named
        check("kubernetes ran to the end", False, "%s: %s" % (type(e).__name__, e))
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
