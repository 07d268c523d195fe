#!/usr/bin/python3
"""Drives the RunPod contract fake (tests/fakes/runpod.py) over HTTP and
checks the exact answers the contract gives (REST v2): the credential as
"Bearer KEY" or the bare key, problem+json errors, the create's required
members, a pod from PROVISIONING to RUNNING with its port mapping for 22
and its hourly cost, its SSH server (a real one, reached with the key of
the pod's PUBLIC_KEY), the list, gpuTypeIds capacity fallback and the 409
without capacity, a 429 with Retry-After and RateLimit, the stop action,
DELETE and the 404 after it. The fake is started on an ephemeral port and
stopped by its PID; afterwards no pod directory is left. Prints TAP.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
KEY = "runpod-check-key-456"

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
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "runpod.py")],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=e)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise SystemExit("Bail out! runpod.py did not start: %r" % line)
        self.base = "http://127.0.0.1:%d" % int(line.split()[1])

    def req(self, method, path, body=None, auth="Bearer " + KEY):
        data = None if body is None else json.dumps(body).encode()
        h = {}
        if auth:
            h["Authorization"] = auth
        if body is not None:
            h["Content-Type"] = "application/json"
        r = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(r, timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def json(self, method, path, body=None, **kw):
        st, h, raw = self.req(method, path, body, **kw)
        return st, h, (json.loads(raw) if raw else None)

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=30)


def run(tmpdir):
    P = "runpod fake: "
    f = Fake(tmpdir)
    key = os.path.join(tmpdir, "id_ed25519")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "check", "-f", key],
                   check=True, stdin=subprocess.DEVNULL)
    pub = open(key + ".pub").read().strip()
    st, h, b = f.json("GET", "/v2/pods", auth=None)
    eq(P + "no key is 401 problem+json", (st, h.get("Content-Type"), b),
       (401, "application/problem+json",
        {"title": "Unauthorized", "status": 401, "detail": "Unauthorized"}))
    eq(P + "the bare key is taken", f.json("GET", "/v2/pods", auth=KEY)[::2], (200, {"pods": []}))
    st, h, b = f.json("POST", "/v2/pods", {"image": "x", "gpu": {"id": "NVIDIA A40"}})
    eq(P + "a create without name is 400", (st, b),
       (400, {"title": "Bad Request", "status": 400, "detail": "name is required"}))
    st, h, b = f.json("POST", "/v2/pods", {"name": "n", "image": "x"})
    eq(P + "a create without GPU is 400", (st, b["detail"]),
       (400, "a GPU (gpu.id or gpuTypeIds) or a CPU flavour is required"))
    body = {"name": "check", "image": "runpod/base:0.6.2-cuda12.2.0",
            "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 2}, "ports": ["22/tcp"],
            "env": {"PUBLIC_KEY": pub, "A": "1"}, "disk": 20}
    st, h, pod = f.json("POST", "/v2/pods", body)
    eq(P + "create is 201 PROVISIONING, no runtime, cost 0",
       (st, pod["status"], pod["runtime"], pod["cost"], pod["gpu"], pod["disk"]),
       (201, "PROVISIONING", None, 0, {"id": "NVIDIA GeForce RTX 4090", "count": 2}, 20))
    pid = pod["id"]
    end = time.time() + 20
    while time.time() < end:
        st, h, pod = f.json("GET", "/v2/pods/" + pid)
        if pod["status"] == "RUNNING":
            break
        time.sleep(0.05)
    ports = (pod.get("runtime") or {}).get("ports") or [{}]
    port = ports[0].get("public")
    eq(P + "RUNNING with 22/tcp mapped on 127.0.0.1 and the hourly cost",
       (pod["status"], ports, pod["cost"]),
       ("RUNNING", [{"private": 22, "public": port, "type": "tcp", "ip": "127.0.0.1",
                     "isIpPublic": True}], 1.38))
    r = subprocess.run(["ssh", "-F", "/dev/null", "-i", key, "-p", str(port), "-o",
                        "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o",
                        "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                        "-o", "LogLevel=ERROR", "root@127.0.0.1", "echo hi"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    eq(P + "the pod's SSH server takes its PUBLIC_KEY", (r.returncode, r.stdout),
       (0, b"hi\n"))
    st, h, b = f.json("GET", "/v2/pods")
    eq(P + "list holds the pod", (st, [p["id"] for p in b["pods"]]), (200, [pid]))
    f.json("POST", "/_fake/config", {"unavailable": ["NVIDIA GeForce RTX 4090"]}, auth=None)
    st, h, p2 = f.json("POST", "/v2/pods", {"name": "fb", "image": "x",
                                            "gpuTypeIds": ["NVIDIA GeForce RTX 4090",
                                                           "NVIDIA L4"]})
    eq(P + "gpuTypeIds falls back to the first with capacity", (st, p2["gpu"]),
       (201, {"id": "NVIDIA L4", "count": 1}))
    st, h, b = f.json("POST", "/v2/pods", {"name": "none", "image": "x",
                                           "gpu": {"id": "NVIDIA GeForce RTX 4090"}})
    eq(P + "no capacity is 409", (st, b),
       (409, {"title": "Conflict", "status": 409,
              "detail": "There are no longer any instances available with the requested "
                        "specifications (NVIDIA GeForce RTX 4090)"}))
    f.json("POST", "/_fake/config", {"unavailable": []}, auth=None)
    f.json("POST", "/_fake/faults", {"method": "GET", "path": "^/v2/pods$", "status": 429,
                                     "retry_after": "3", "message": "slow down"}, auth=None)
    st, h, b = f.json("GET", "/v2/pods")
    eq(P + "429 with Retry-After, RateLimit and problem+json",
       (st, h.get("Retry-After"), h.get("RateLimit"), h.get("RateLimit-Policy"),
        h.get("Content-Type"), b),
       (429, "3", '"minute";r=0;t=12', '"minute";q=60;w=60', "application/problem+json",
        {"title": "Too Many Requests", "status": 429, "detail": "slow down"}))
    st, h, b = f.json("POST", "/v2/pods/%s/action" % p2["id"], {"action": "stop"})
    eq(P + "stop is 200 EXITED, cost 0", (st, b["status"], b["cost"]), (200, "EXITED", 0))
    st, h, b = f.json("POST", "/v2/pods/%s/action" % p2["id"], {"action": "pause"})
    eq(P + "an unknown action is 400", (st, b["detail"]),
       (400, "action 'pause' is not start, stop, restart or terminate"))
    for i, p in enumerate((pid, p2["id"])):
        eq(P + "DELETE of pod %d is 204" % (i + 1), f.req("DELETE", "/v2/pods/" + p)[0], 204)
    st, h, b = f.json("GET", "/v2/pods/" + pid)
    eq(P + "a terminated pod is 404", (st, b),
       (404, {"title": "Not Found", "status": 404, "detail": "pod %s not found" % pid}))
    st, h, log = f.json("GET", "/_fake/log", auth=None)
    eq(P + "the log never holds the key", any(KEY in json.dumps(e) for e in log), False)
    eq(P + "stopped by PID", f.stop(), 0)
    left = [n for n in os.listdir(tmpdir) if n.startswith("sbx-runpod-fake-")]
    eq(P + "no pod directory left", left, [])


def main():
    tmpdir = tempfile.mkdtemp(prefix="sbx-check-runpod-")
    os.chmod(tmpdir, 0o711)
    try:
        run(tmpdir)
    except Exception as e:  # a crash is a failure of its own, named
        check("runpod ran to the end", False, "%s: %s" % (type(e).__name__, e))
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
