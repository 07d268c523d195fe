#!/usr/bin/python3
"""A fake Ray cluster's Jobs REST API (the dashboard, port 8265) for the
libsbx tests.

Follows the Ray section of the provider contracts (ray-project/ray
python/ray/dashboard/modules/job/{job_head,common,pydantic_models}.py,
dashboard/modules/version.py; API version "5", Ray 2.52), on
http://127.0.0.1:<n> (RAY_ADDRESS):

  GET    /api/version                  {"version": "5", "ray_version",
                                       "ray_commit", "session_name"}
  POST   /api/jobs/                    {"entrypoint" (required),
                                       "submission_id", "runtime_env"
                                       {"working_dir", "env_vars"},
                                       "metadata" {str: str},
                                       "entrypoint_num_cpus",
                                       "entrypoint_num_gpus",
                                       "entrypoint_memory" (int),
                                       "entrypoint_resources" {str: number}}
                                       -> {"submission_id", "job_id"}; a bad
                                       type or a submission_id in use is 400
  GET    /api/jobs/                    [JobDetails]
  GET    /api/jobs/{id}                JobDetails, or 404 "Job X does not exist"
  GET    /api/jobs/{id}/logs           {"logs"}: stdout and stderr merged, as
                                       text (bad UTF-8 bytes replaced)
  GET    /api/jobs/{id}/logs/tail      WebSocket (RFC 6455): the log as text
                                       frames as it grows; the server closes
                                       once the job is terminal
  POST   /api/jobs/{id}/stop           {"stopped"}: SIGTERM to the
                                       entrypoint's process group, SIGKILL
                                       RAY_JOB_STOP_WAIT_TIME_S (3) later
  DELETE /api/jobs/{id}                {"deleted"}; terminal jobs only (400)
  GET|PUT /api/packages/{protocol}/{name}
                                       a working_dir package (a zip): 200 or
                                       404 / stored

JobDetails: {"type": "SUBMISSION", "job_id", "submission_id",
"driver_info", "status" (PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED),
"entrypoint", "message", "error_type", "start_time", "end_time" (ms),
"metadata", "runtime_env", "driver_agent_http_address", "driver_node_id",
"driver_exit_code", "entrypoint_num_cpus", ...}. Generated ids are
"raysubmit_" and 16 letters and digits.

The cluster is one node: a real directory that is "/" for the entrypoints
(tests/fakes/nsbox.py), each entrypoint run there by "/bin/sh -c" in a
session of its own, with the node's environment and the runtime
environment's env_vars, in the unpacked working_dir package when the job
names one (else in /tmp), its stdout and stderr both appended to the job's
one log. The entrypoint runs under nsenter(1), which a stop's SIGTERM ends
at once: the job is STOPPED with driver_exit_code -15 (the signal, as
Popen reports it) whatever the entrypoint does with the signal, and what it
still writes reaches the log after that. The node has the resources {"CPU": 4, "GPU": 1, "memory": 8 GiB}
(SBX_FAKE_RAY_RESOURCES, a JSON object, overrides them); a job whose
entrypoint resources are not free waits PENDING until they are; one that
asks more than the node has stays PENDING until stopped, as on a cluster
that cannot grow. A package is removed once a job that used it ended (the
cluster's reference counting) and the job's unpacked copy with it.

Errors are text/plain, as Ray's dashboard answers them. The cluster runs
with RAY_AUTH_MODE=token, its token SBX_FAKE_API_KEY: every request carries "Authorization: Bearer <token>" (no header: 401
"Unauthorized: missing authentication token"; another token: 403 "Forbidden:
invalid authentication token").

Control routes (no auth; not logged): GET/DELETE /_fake/log, POST
/_fake/faults (tests/fakes/fakehttp.py); POST /_fake/config {"log_lag_s":
s}: a job's last line (after the last newline before its end) shows in its
logs only s seconds after the job ended (ray-project/ray#46413, the log
that lags its job's status, CASE-24), "lose_submit_answers": n (the next n
submits make their job, then close the connection without an answer); GET /_fake/jobs {id: {"status",
"pid", "alive"}}; GET /_fake/node {"root"}.

Python 3 standard library only. Run as root (bubblewrap and nsenter).
"""

import base64
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import nsbox  # noqa: E402

TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
STOP_WAIT_S = float(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", "3"))
PKG_DIR = "/tmp/ray/session_latest/runtime_resources/working_dir_files"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Job:
    def __init__(self, sid, body):
        self.submission_id = sid
        self.entrypoint = body["entrypoint"]
        self.runtime_env = body.get("runtime_env") or {}
        self.metadata = body.get("metadata") or {}
        self.cpus = body.get("entrypoint_num_cpus")
        self.gpus = body.get("entrypoint_num_gpus")
        self.memory = body.get("entrypoint_memory")
        self.resources = body.get("entrypoint_resources")
        self.status = "PENDING"
        self.message = ("Job has not started yet. It may be waiting for resources "
                        "(CPUs, GPUs, memory, custom resources) to become available.")
        self.error_type = None
        self.start_time = int(time.time() * 1000)
        self.end_time = None
        self.end_wall = None
        self.exit_code = None
        self.proc = None
        self.stop_asked = False
        self.log_path = None
        self.unpacked = None
        self.package = None

    def need(self):
        """The node resources the entrypoint takes."""
        n = {"CPU": float(self.cpus or 0), "GPU": float(self.gpus or 0),
             "memory": float(self.memory or 0)}
        for k, v in (self.resources or {}).items():
            n[k] = n.get(k, 0) + float(v)
        return n

    def details(self):
        return {
            "type": "SUBMISSION",
            "job_id": None if self.status == "PENDING" else self.submission_id,
            "submission_id": self.submission_id,
            "driver_info": None if self.proc is None else {
                "id": self.submission_id, "node_ip_address": "127.0.0.1",
                "pid": str(self.proc.pid)},
            "status": self.status,
            "entrypoint": self.entrypoint,
            "message": self.message,
            "error_type": self.error_type,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "metadata": self.metadata,
            "runtime_env": self.runtime_env,
            "driver_agent_http_address": "http://127.0.0.1:52365",
            "driver_node_id": "f" * 56,
            "driver_exit_code": self.exit_code,
            "entrypoint_num_cpus": self.cpus,
            "entrypoint_num_gpus": self.gpus,
            "entrypoint_memory": self.memory,
            "entrypoint_resources": self.resources,
        }


class RayFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", ""))
        self.dir = tempfile.mkdtemp(prefix="sbx-ray-fake-")
        os.makedirs(os.path.join(self.dir, "logs"))
        os.makedirs(os.path.join(self.dir, "packages"))
        self.node = nsbox.Box(self.dir, "node")
        self.node.start()
        self.jobs = {}          # submission_id -> Job, in submission order
        self.packages = {}      # "gcs://name" -> host path of the zip
        self.total = {"CPU": 4.0, "GPU": 1.0, "memory": 8.0 * 2 ** 30}
        extra = os.environ.get("SBX_FAKE_RAY_RESOURCES")
        if extra:
            self.total.update({k: float(v) for k, v in json.loads(extra).items()})
        self.used = {}
        self.cond = threading.Condition(self.lock)
        self.log_lag_s = 0.0
        self.lose_submit_answers = 0

    def error_body(self, status, message, path, method):
        """Ray's errors are text: a fault rule answers its message as is."""
        return message

    # ------------------------------------------------------------ resources
    def fits_ever(self, need):
        return all(v <= self.total.get(k, 0.0) for k, v in need.items() if v > 0)

    def fits_now(self, need):
        return all(v <= self.total.get(k, 0.0) - self.used.get(k, 0.0)
                   for k, v in need.items() if v > 0)

    # ------------------------------------------------------------ jobs
    def run(self, job):
        """The job's supervisor: waits for its resources, starts the
        entrypoint, records its end."""
        need = job.need()
        with self.cond:
            while not job.stop_asked and not (self.fits_ever(need) and self.fits_now(need)):
                self.cond.wait(0.5)
            if job.stop_asked:
                self.end(job, None)
                return
            for k, v in need.items():
                self.used[k] = self.used.get(k, 0.0) + v
        try:
            self.start(job)
        except Exception as e:  # noqa: BLE001 - a failed setup fails the job
            with self.cond:
                self.free_resources(need)
                job.error_type = "RUNTIME_ENV_SETUP_FAILURE"
                self.end(job, None, "runtime env setup failed: %s" % e)
            return
        rc = job.proc.wait()
        self.node.forget(job.proc)
        with self.cond:
            self.free_resources(need)
            self.end(job, rc)

    def free_resources(self, need):
        for k, v in need.items():
            self.used[k] = self.used.get(k, 0.0) - v
        self.cond.notify_all()

    def start(self, job):
        cwd = "/tmp"
        wd = job.runtime_env.get("working_dir")
        if wd:
            with self.lock:
                pkg = self.packages.get(wd)
            if pkg is None:
                raise OSError("working_dir package %s does not exist" % wd)
            name = wd.split("://", 1)[1]
            if name.endswith(".zip"):
                name = name[:-4]
            cwd = PKG_DIR + "/" + name + "-" + job.submission_id
            host = self.node.host_path(cwd)
            os.makedirs(host)
            with zipfile.ZipFile(pkg) as z:
                for info in z.infolist():
                    z.extract(info, host)
                    mode = (info.external_attr >> 16) & 0o7777
                    if mode and not info.is_dir():
                        os.chmod(os.path.join(host, info.filename), mode)
            job.unpacked = host
            job.package = wd
        env = {"RAY_JOB_ID": job.submission_id, "RAY_ADDRESS": "127.0.0.1:6379",
               "RAY_SUBMISSION_ID": job.submission_id}
        env.update({k: str(v) for k, v in (job.runtime_env.get("env_vars") or {}).items()})
        full = nsbox.default_env()
        del full["SANDBOX_ROOT"]
        full.update(env)
        log = open(job.log_path, "ab", buffering=0)
        try:
            proc = self.node.popen(["/bin/sh", "-c", job.entrypoint], env=full, cwd=cwd,
                                   stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
        finally:
            log.close()
        with self.lock:
            job.proc = proc
            job.status = "RUNNING"
            job.message = "Job is currently running."
            if job.stop_asked:
                self.kill(job)

    def end(self, job, rc, message=None):
        """Under the lock: the job's terminal status."""
        job.end_time = int(time.time() * 1000)
        job.end_wall = time.time()
        job.exit_code = rc
        if job.stop_asked:
            job.status = "STOPPED"
            job.message = "Job was intentionally stopped."
        elif message is not None:
            job.status = "FAILED"
            job.message = message
        elif rc == 0:
            job.status = "SUCCEEDED"
            job.message = "Job finished successfully."
        else:
            job.status = "FAILED"
            job.error_type = "JOB_ENTRYPOINT_COMMAND_ERROR"
            tail = self.read_log(job, lag=False)[-20000:]
            job.message = ("Job entrypoint command failed with exit code %s, last available "
                           "logs (truncated to 20,000 chars):\n%s" % (rc, tail))
        if job.unpacked:
            shutil.rmtree(job.unpacked, ignore_errors=True)
            job.unpacked = None
        if job.package:
            # The package's reference went with the job.
            pkg = self.packages.pop(job.package, None)
            if pkg:
                try:
                    os.unlink(pkg)
                except OSError:
                    pass
        self.cond.notify_all()

    def kill(self, job):
        """SIGTERM to the entrypoint's process group, SIGKILL later."""
        proc = job.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass

        def later():
            time.sleep(STOP_WAIT_S)
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        threading.Thread(target=later, daemon=True).start()

    def read_log(self, job, lag=True):
        try:
            with open(job.log_path, "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        if lag and self.log_lag_s > 0 and job.status in TERMINAL:
            if time.time() < (job.end_wall or 0) + self.log_lag_s:
                cut = data.rstrip(b"\n").rfind(b"\n")
                data = data[:cut + 1] if cut >= 0 else b""
        return data.decode("utf-8", "replace")

    def cleanup(self):
        with self.lock:
            jobs = list(self.jobs.values())
        for j in jobs:
            if j.proc is not None:
                try:
                    os.killpg(j.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        self.node.delete()
        shutil.rmtree(self.dir, ignore_errors=True)


def new_id():
    alnum = string.ascii_letters + string.digits
    return "raysubmit_" + "".join(random.choice(alnum) for _ in range(16))


def check_number(body, key, integer=False):
    v = body.get(key)
    if v is None:
        return
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok:
        raise fakehttp.Reply(400, None, {"x-message": "%s must be %s, got %s" % (
            key, "an integer" if integer else "a number", type(v).__name__)})
    if v < 0:
        raise fakehttp.Reply(400, None, {"x-message": "%s must be a non-negative number, got %r"
                                         % (key, v)})


class RayHandler(fakehttp.Handler):
    def send_json(self, status, obj, headers=None):
        """A str is an error's text (a fault rule's answer): text/plain."""
        if isinstance(obj, str):
            self.send_error_reply(status, obj, headers)
        else:
            super().send_json(status, obj, headers)

    def send_error_reply(self, status, message, headers=None):
        """Ray's dashboard answers errors as text/plain."""
        if status == 401 and self.headers.get("Authorization") is not None:
            status, message = 403, "Forbidden: invalid authentication token"
        elif status == 401:
            message = "Unauthorized: missing authentication token"
        data = message.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self._status = status

    def fail(self, status, message):
        raise fakehttp.Reply(status, None, {"x-message": message})

    def job(self, sid):
        with self.fake.lock:
            j = self.fake.jobs.get(sid)
        if j is None:
            self.fail(404, "Job %s does not exist" % sid)
        return j

    def route(self, path, query):
        f = self.fake
        m = self.command
        if path == "/api/version" and m == "GET":
            self.send_json(200, {"version": "5", "ray_version": "2.52.0",
                                 "ray_commit": "0" * 40, "session_name": "session_fake"})
            return
        if path in ("/api/jobs/", "/api/jobs") and m == "POST":
            return self.submit()
        if path in ("/api/jobs/", "/api/jobs") and m == "GET":
            with f.lock:
                self.send_json(200, [j.details() for j in f.jobs.values()])
            return
        mt = re.match(r"^/api/jobs/([^/]+)(/logs|/logs/tail|/stop)?$", path)
        if mt:
            sid = urllib.parse.unquote(mt.group(1))
            what = mt.group(2)
            if what is None and m == "GET":
                j = self.job(sid)
                with f.lock:
                    self.send_json(200, j.details())
                return
            if what is None and m == "DELETE":
                j = self.job(sid)
                with f.lock:
                    if j.status not in TERMINAL:
                        self.fail(400, "Attempted to delete job with id '%s', but it is in a "
                                       "non-terminal state %s." % (sid, j.status))
                    del f.jobs[sid]
                try:
                    os.unlink(j.log_path)
                except OSError:
                    pass
                self.send_json(200, {"deleted": True})
                return
            if what == "/logs" and m == "GET":
                j = self.job(sid)
                self.send_json(200, {"logs": f.read_log(j)})
                return
            if what == "/logs/tail" and m == "GET":
                return self.tail(self.job(sid))
            if what == "/stop" and m == "POST":
                j = self.job(sid)
                with f.lock:
                    stopped = j.status not in TERMINAL
                    if stopped and not j.stop_asked:
                        j.stop_asked = True
                        f.kill(j)
                        f.cond.notify_all()
                self.send_json(200, {"stopped": stopped})
                return
        mp = re.match(r"^/api/packages/([^/]+)/([^/]+)$", path)
        if mp:
            uri = "%s://%s" % (mp.group(1), mp.group(2))
            if m == "GET":
                with f.lock:
                    have = uri in f.packages
                if not have:
                    self.fail(404, "Package %s does not exist" % uri)
                self.send_json(200, None)
                return
            if m == "PUT":
                data = self.body_bytes()
                host = os.path.join(f.dir, "packages",
                                    hashlib.sha1(uri.encode()).hexdigest() + ".zip")
                with open(host, "wb") as out:
                    out.write(data)
                with f.lock:
                    f.packages[uri] = host
                self.send_json(200, None)
                return
        self.fail(404, "404: Not Found")

    def submit(self):
        f = self.fake
        try:
            body = json.loads(self.body_bytes() or b"{}")
        except ValueError as e:
            self.fail(400, "Failed to parse the request body: %s" % e)
        if not isinstance(body, dict) or not isinstance(body.get("entrypoint"), str):
            self.fail(400, "JobSubmitRequest: entrypoint is required (a string)")
        for k in ("entrypoint_num_cpus", "entrypoint_num_gpus"):
            check_number(body, k)
        check_number(body, "entrypoint_memory", integer=True)
        res = body.get("entrypoint_resources")
        if res is not None and (not isinstance(res, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool)
                for v in res.values())):
            self.fail(400, "entrypoint_resources must be a dict of str to number")
        renv = body.get("runtime_env")
        if renv is not None:
            if not isinstance(renv, dict):
                self.fail(400, "runtime_env must be a dict")
            ev = renv.get("env_vars")
            if ev is not None and (not isinstance(ev, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in ev.items())):
                self.fail(400, "runtime_env: env_vars must be a dict of str to str")
        meta = body.get("metadata")
        if meta is not None and (not isinstance(meta, dict) or not all(
                isinstance(v, str) for v in meta.values())):
            self.fail(400, "metadata must be a dict of str to str")
        sid = body.get("submission_id") or new_id()
        with f.lock:
            if sid in f.jobs:
                self.fail(400, "Job with submission_id %s already exists. Please use a "
                               "different submission_id." % sid)
            job = Job(sid, body)
            job.log_path = os.path.join(f.dir, "logs",
                                        hashlib.sha1(sid.encode()).hexdigest() + ".log")
            open(job.log_path, "wb").close()
            f.jobs[sid] = job
        threading.Thread(target=f.run, args=(job,), daemon=True).start()
        with f.lock:
            lose = f.lose_submit_answers > 0
            if lose:
                f.lose_submit_answers -= 1
        if lose:
            # The job is submitted; its answer is lost on the way.
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.send_json(200, {"submission_id": sid, "job_id": sid})

    # ------------------------------------------------------------ tail
    def tail(self, job):
        """GET /api/jobs/{id}/logs/tail: a WebSocket (RFC 6455) whose text
        frames carry the log as it grows; closed once the job is terminal
        and its whole log is sent."""
        key = self.headers.get("Sec-WebSocket-Key")
        if (self.headers.get("Upgrade") or "").lower() != "websocket" or not key:
            self.fail(400, "Expected a WebSocket upgrade")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self._status = 101
        sent = 0
        while True:
            with self.fake.lock:
                done = job.status in TERMINAL
            data = self.fake.read_log(job).encode()
            if len(data) > sent:
                self.ws_send(0x1, data[sent:])
                sent = len(data)
            if done and (self.fake.log_lag_s <= 0
                         or time.time() >= (job.end_wall or 0) + self.fake.log_lag_s):
                break
            time.sleep(0.05)
        self.ws_send(0x8, b"\x03\xe8")
        self.close_connection = True

    def ws_send(self, opcode, payload):
        n = len(payload)
        if n < 126:
            head = bytes([0x80 | opcode, n])
        elif n < 65536:
            head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
        self.wfile.write(head + payload)
        self.wfile.flush()

    # ------------------------------------------------------------ control
    def fake_control(self, path):
        f = self.fake
        if path == "/_fake/config" and self.command == "POST":
            cfg = self.json_body()
            if "log_lag_s" in cfg:
                f.log_lag_s = float(cfg["log_lag_s"])
            if "lose_submit_answers" in cfg:
                f.lose_submit_answers = int(cfg["lose_submit_answers"])
            self.send_json(204, None)
        elif path == "/_fake/jobs" and self.command == "GET":
            with f.lock:
                out = {sid: {"status": j.status,
                             "pid": j.proc.pid if j.proc else None,
                             "alive": j.proc is not None and j.proc.poll() is None}
                       for sid, j in f.jobs.items()}
            self.send_json(200, out)
        elif path == "/_fake/node" and self.command == "GET":
            self.send_json(200, {"root": f.node.root})
        else:
            raise fakehttp.Reply(404, {"error": "no such control route: " + path})


def main():
    fake = RayFake()
    fakehttp.serve(fake, RayHandler)


if __name__ == "__main__":
    main()
