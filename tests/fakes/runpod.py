#!/usr/bin/python3
"""A fake RunPod pod service (REST v2) for the libsbx tests.

Follows the RunPod section of the provider contracts (runpod/docs
api-reference-v2/openapi.json), on http://127.0.0.1:<n> (the plugin's
RUNPOD_API_BASE_URL; the API is under /v2):

  POST   /v2/pods                 CreatePodRequest -> 201 Pod (PROVISIONING)
  GET    /v2/pods                 {"pods": [Pod]}
  GET    /v2/pods/{id}            Pod
  POST   /v2/pods/{id}/action     {"action": "start|stop|restart|terminate"} -> 200 Pod
  DELETE /v2/pods/{id}            204 (terminated; later calls answer 404)

CreatePodRequest: "name" and "image" (or "templateId") are required; a GPU
is "gpu" {"id", "count"} or, as capacity fallback, "gpuTypeIds" (a list,
tried in order; "gpuTypePriority" "availability" or "custom") with
"gpuCount"; "env" {}, "ports" ["22/tcp", ...], "disk" (GB), any other
member kept as given. A GPU type named in /_fake/config's "unavailable"
has no capacity: a create whose every choice is unavailable answers 409.

A pod is real: one bubblewrap instance (tests/fakes/nsbox.py) running an
OpenSSH server on a free port of 127.0.0.1, as RunPod's images start one
when the pod's env holds PUBLIC_KEY (which becomes root's authorized key).
The pod becomes RUNNING with runtime.ports [{"private": 22, "public": P,
"type": "tcp", "ip": "127.0.0.1", "isIpPublic": true}] once the server
listens, after /_fake/config's "ready_delay" seconds (default 0). Its
"cost" is the GPU type's hourly price times the count (USD/h; 0 once
stopped). Terminating a pod ends every process in it.

Errors are application/problem+json {"title", "status", "detail"}; 429
answers carry Retry-After and RateLimit headers (fault rules of
tests/fakes/fakehttp.py). The credential is "Authorization: Bearer KEY" or
the bare key.

Control routes (no auth; not logged): GET/DELETE /_fake/log, POST
/_fake/faults (fakehttp.py); POST /_fake/config {"ready_delay": s,
"unavailable": [gpu type ids], "no_port": bool (RUNNING pods publish no
port 22), "login_user": name (pods created from then on also take this
login name for root, as an image with a user of its own does),
"public_host": name (pods created from then on report this name, not
127.0.0.1, as the address of port 22: a name that resolves to 127.0.0.1
where the test runs)}; GET /_fake/pods/{id} {"root", "port", "sshd_running", "body"};
POST /_fake/pods/{id}/sshd {"action": "stop"} stops the pod's SSH server
(its sessions too), {"action": "start", "new_host_key": bool} starts it
again on the same port, with a new host key when asked; POST
/_fake/pods/{id}/port {"public": n} reports port n as the pod's public port
for 22 from then on (a proxy in front of its server).

Python 3 standard library only. Run as root (bubblewrap, nsenter, sshd).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply  # noqa: E402

# USD per GPU per hour (the catalog's secure price; figures of the fake).
PRICES = {"NVIDIA GeForce RTX 4090": 0.69, "NVIDIA A40": 0.40, "NVIDIA L4": 0.43,
          "NVIDIA H100 80GB HBM3": 2.99, "NVIDIA A100 80GB PCIe": 1.64}
DEFAULT_PRICE = 0.50
SSHD = "/usr/sbin/sshd"


TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
          409: "Conflict", 422: "Unprocessable Entity", 429: "Too Many Requests",
          500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


def problem(status, detail):
    return Reply(status, {"title": TITLES.get(status, "Error"), "status": status,
                          "detail": detail})


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


_ports_lock = threading.Lock()
_ports_given = set()


def free_port():
    """A free port of 127.0.0.1 no pod of this fake was given before: two
    pods made at once never share one (a port is free again once the probe
    closes it, so the kernel may name it twice)."""
    with _ports_lock:
        while True:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            if port not in _ports_given:
                _ports_given.add(port)
                return port


class Pod:
    def __init__(self, fake, body, gpu_id, gpu_count):
        self.id = uuid.uuid4().hex[:14]
        self.body = body
        self.gpu_id = gpu_id
        self.gpu_count = gpu_count
        self.status = "PROVISIONING"
        self.created = time.time()
        self.started = None
        self.port = None
        self.sshd = None
        self.public_port = None
        self.public_host = fake.config.get("public_host")
        self.login_user = fake.config.get("login_user")
        self.box = nsbox.Box(fake.dir, "pod")
        self.lock = threading.Lock()

    def view(self, fake):
        env = self.body.get("env") or {}
        d = {k: v for k, v in self.body.items() if k not in ("gpu", "env")}
        d.update({
            "id": self.id, "name": self.body.get("name"), "status": self.status,
            "image": self.body.get("image", "runpod/base"),
            "env": env,
            "gpu": {"id": self.gpu_id, "count": self.gpu_count},
            "cost": (round(PRICES.get(self.gpu_id, DEFAULT_PRICE) * self.gpu_count, 4)
                     if self.status == "RUNNING" else 0),
            "createdAt": iso(self.created),
            "startedAt": iso(self.started) if self.started else None,
            "actions": ["stop", "restart", "terminate"],
            "runtime": None,
        })
        if self.status == "RUNNING":
            ports = []
            if not fake.config.get("no_port"):
                ports.append({"private": 22, "public": self.public_port or self.port, "type": "tcp",
                              "ip": self.public_host or "127.0.0.1", "isIpPublic": True})
            d["runtime"] = {"uptime": int(time.time() - (self.started or self.created)),
                            "ports": ports}
        return d

    # ---------------------------------------------------------------- sshd
    def prepare(self, fake):
        root = self.box.root
        os.makedirs(root + "/run/sshd", exist_ok=True)
        os.chmod(root + "/run/sshd", 0o755)
        d = root + "/run/rp-ssh"
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o700)
        shutil.copy(fake.host_key, d + "/host_key")
        os.chmod(d + "/host_key", 0o600)
        key = (self.body.get("env") or {}).get("PUBLIC_KEY", "")
        with open(d + "/authorized_keys", "w") as f:
            f.write(key + "\n")
        if self.login_user:
            # One more login name for root (uid 0), in a passwd file of
            # the pod's own bound over the host's.
            with open("/etc/passwd") as src, open(d + "/passwd", "w") as f:
                f.write(src.read())
                f.write("%s:x:0:0::/root:/bin/sh\n" % self.login_user)
            os.chmod(d + "/passwd", 0o644)
            self.box.ro_binds.append((d + "/passwd", "/etc/passwd"))
        self.port = free_port()
        self.write_sshd_config()

    def write_sshd_config(self):
        with open(self.box.root + "/run/rp-ssh/sshd_config", "w") as f:
            f.write("\n".join([
                "Port %d" % self.port, "ListenAddress 127.0.0.1",
                "HostKey /run/rp-ssh/host_key", "PidFile none",
                "AuthorizedKeysFile /run/rp-ssh/authorized_keys",
                "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
                "UseDNS no", "MaxSessions 64", "MaxStartups 64:30:128",
                "Subsystem sftp /usr/lib/openssh/sftp-server", ""]))

    def start_sshd(self, new_port=False):
        """Starts the pod's SSH server and waits until it says it listens
        (its own log line, not a connect, which another process's listener
        could answer). With @new_port, a server that could not bind (the
        port taken meanwhile by another process) is started again on
        another port, up to five times."""
        path = self.box.root + "/run/rp-ssh/sshd.log"
        for attempt in range(5):
            log = open(path, "a")
            try:
                start = log.tell()
                self.sshd = self.box.popen([SSHD, "-D", "-e", "-f", "/run/rp-ssh/sshd_config"],
                                           stdout=subprocess.DEVNULL, stderr=log)
            finally:
                log.close()
            want = "Server listening on 127.0.0.1 port %d." % self.port
            for _ in range(500):
                with open(path) as f:
                    f.seek(start)
                    said = f.read()
                if want in said and self.sshd.poll() is None:
                    return
                if self.sshd.poll() is not None:
                    break
                time.sleep(0.01)
            else:
                raise OSError("sshd did not listen on %d" % self.port)
            code = self.sshd.returncode
            self.box.forget(self.sshd)
            self.sshd = None
            if not new_port or "Address already in use" not in said:
                raise OSError("sshd exited %d: %s" % (code, said.strip()[-300:]))
            self.port = free_port()
            self.write_sshd_config()
        raise OSError("sshd found no free port")

    def stop_sshd(self):
        """Ends the SSH server and every session it runs (their processes
        are the server's descendants in the pod: killed by session)."""
        s, self.sshd = self.sshd, None
        if s is not None:
            self.box.kill_command(s)
            s.wait()
            self.box.forget(s)
        # Sessions are sshd's children in sessions of their own.
        subprocess.run(["nsenter", "-t", str(self.box.child_pid), "-m", "-p", "-r", "--",
                        "/usr/bin/pkill", "-KILL", "-x", "sshd"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def boot(self, fake):
        try:
            self.prepare(fake)
            self.box.start()
            self.start_sshd(new_port=True)
            delay = float(fake.config.get("ready_delay", 0))
            self.status = "STARTING"
            if delay > 0:
                time.sleep(delay)
            with self.lock:
                if self.status == "STARTING":
                    self.status = "RUNNING"
                    self.started = time.time()
        except Exception as e:  # noqa: BLE001 - the pod fails
            sys.stderr.write("pod %s: %r\n" % (self.id, e))
            self.status = "ERROR"


class RunpodFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "sbx-test-dummy-key"))
        self.dir = tempfile.mkdtemp(prefix="sbx-runpod-fake-")
        os.chmod(self.dir, 0o711)
        self.config = {}
        self.host_key = os.path.join(self.dir, "host_key")
        self.new_host_key()

    def new_host_key(self):
        for p in (self.host_key, self.host_key + ".pub"):
            if os.path.exists(p):
                os.unlink(p)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.host_key],
                       check=True, stdout=subprocess.DEVNULL)

    def error_body(self, status, message, path, method):
        return {"title": TITLES.get(status, "Error"), "status": status, "detail": message}

    def find(self, pid):
        with self.lock:
            pod = self.sandboxes.get(pid)
        if pod is None:
            raise problem(404, "pod %s not found" % pid)
        return pod

    def terminate(self, pod):
        with self.lock:
            self.sandboxes.pop(pod.id, None)
        pod.status = "TERMINATED"
        pod.box.delete()


class RunpodHandler(fakehttp.Handler):
    def send_json(self, status, obj, headers=None):
        # Errors are problem+json (RFC 9457), as RunPod's v2 API answers.
        if obj is not None and status >= 400 and isinstance(obj, dict) and "detail" in obj:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/problem+json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("RateLimit", '"minute";r=0;t=12')
                self.send_header("RateLimit-Policy", '"minute";q=60;w=60')
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self._status = status
            return
        super().send_json(status, obj, headers)

    def handle_any(self):
        # The bare key is accepted as well as "Bearer KEY".
        auth = self.headers.get("Authorization")
        if auth is not None and auth == self.fake.api_key:
            del self.headers["Authorization"]
            self.headers["Authorization"] = "Bearer " + auth
        super().handle_any()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any

    def fake_control(self, path):
        f = self.fake
        if path == "/_fake/config" and self.command == "POST":
            with f.lock:
                f.config.update(self.json_body())
            return self.send_json(204, None)
        m = re.fullmatch(r"/_fake/pods/([^/]+)(/sshd|/port)?", path)
        if not m:
            raise Reply(404, {"error": "no such control route: " + path})
        pod = f.find(m.group(1))
        if m.group(2) is None:
            return self.send_json(200, {"root": pod.box.root, "port": pod.port,
                                        "sshd_running": pod.sshd is not None
                                        and pod.sshd.poll() is None,
                                        "body": pod.body})
        if m.group(2) == "/port":
            pod.public_port = int(self.json_body()["public"])
            return self.send_json(204, None)
        action = self.json_body().get("action")
        if action == "stop":
            pod.stop_sshd()
        elif action == "start":
            if self.json_body().get("new_host_key"):
                f.new_host_key()
                shutil.copy(f.host_key, pod.box.root + "/run/rp-ssh/host_key")
            pod.start_sshd()
        else:
            raise Reply(400, {"error": "action must be stop or start"})
        return self.send_json(204, None)

    def route(self, path, query):
        f = self.fake
        if path == "/v2/pods" and self.command == "POST":
            return self.create()
        if path == "/v2/pods" and self.command == "GET":
            with f.lock:
                pods = list(f.sandboxes.values())
            return self.send_json(200, {"pods": [p.view(f) for p in pods]})
        m = re.fullmatch(r"/v2/pods/([^/]+)(/action)?", path)
        if not m:
            raise problem(404, "no route %s %s" % (self.command, path))
        pod = f.find(m.group(1))
        if m.group(2) is None and self.command == "GET":
            return self.send_json(200, pod.view(f))
        if m.group(2) is None and self.command == "DELETE":
            f.terminate(pod)
            return self.send_json(204, None)
        if m.group(2) and self.command == "POST":
            action = self.json_body().get("action")
            if action == "terminate":
                f.terminate(pod)
                return self.send_json(204, None)
            if action == "stop":
                pod.box.stop()
                pod.sshd = None
                pod.status = "EXITED"
            elif action in ("start", "restart"):
                pod.box.stop()
                pod.status = "PROVISIONING"
                threading.Thread(target=pod.boot, args=(f,), daemon=True).start()
            else:
                raise problem(400, "action %r is not start, stop, restart or terminate"
                              % (action,))
            return self.send_json(200, pod.view(f))
        raise problem(404, "no route %s %s" % (self.command, path))

    def create(self):
        f = self.fake
        body = self.json_body()
        if not isinstance(body, dict):
            raise problem(400, "the body is not a JSON object")
        if not body.get("name"):
            raise problem(400, "name is required")
        if not body.get("image") and not body.get("templateId"):
            raise problem(400, "image or templateId is required")
        env = body.get("env")
        if env is not None and (not isinstance(env, dict)
                                or not all(isinstance(v, str) for v in env.values())):
            raise problem(400, "env must be an object of strings")
        disk = body.get("disk")
        if disk is not None and (not isinstance(disk, int) or disk < 1):
            raise problem(400, "disk must be a whole number of GB >= 1")
        gpu = body.get("gpu")
        choices = []
        count = 1
        if isinstance(gpu, dict) and gpu.get("id"):
            choices.append(gpu["id"])
            count = gpu.get("count", 1)
        for g in body.get("gpuTypeIds") or []:
            if g not in choices:
                choices.append(g)
        if "gpuCount" in body and not (isinstance(gpu, dict) and "count" in gpu):
            count = body["gpuCount"]
        if not choices:
            raise problem(400, "a GPU (gpu.id or gpuTypeIds) or a CPU flavour is required")
        if not isinstance(count, int) or count < 1:
            raise problem(400, "gpu count must be a whole number >= 1")
        if body.get("gpuTypePriority") == "availability":
            choices.sort(key=lambda g: PRICES.get(g, DEFAULT_PRICE))
        with f.lock:
            unavailable = set(f.config.get("unavailable") or [])
        chosen = next((g for g in choices if g not in unavailable), None)
        if chosen is None:
            raise problem(409, "There are no longer any instances available with the "
                          "requested specifications (%s)" % ", ".join(choices))
        pod = Pod(f, body, chosen, count)
        with f.lock:
            f.sandboxes[pod.id] = pod
        threading.Thread(target=pod.boot, args=(f,), daemon=True).start()
        return self.send_json(201, pod.view(f))


def main():
    fakehttp.serve(RunpodFake(), RunpodHandler)


if __name__ == "__main__":
    main()
