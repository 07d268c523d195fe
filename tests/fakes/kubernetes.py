#!/usr/bin/python3
"""A fake Kubernetes API server for the libsbx tests.

Follows the Kubernetes section of the provider contracts (pods, the exec
subresource over WebSocket, restricted Pod Security, NetworkPolicy; from
kubernetes/kubernetes staging/src/k8s.io/{apimachinery/pkg/util/
remotecommand/constants.go, apiserver/pkg/util/wsstream/conn.go,
kubelet/pkg/cri/streaming/remotecommand/websocket.go, client-go/tools/
remotecommand/v4.go}):

  GET    /version
  POST   /api/v1/namespaces/{ns}/pods            201 Pod; 409 AlreadyExists;
                                                 403 Forbidden when the pod
                                                 violates PodSecurity
                                                 "restricted:latest"
  GET    /api/v1/namespaces/{ns}/pods[?labelSelector=]   PodList
  GET    /api/v1/namespaces/{ns}/pods/{name}     Pod
  DELETE /api/v1/namespaces/{ns}/pods/{name}[?gracePeriodSeconds=N]
                                                 200 Pod with deletionTimestamp
                                                 (the pod goes after N s, at
                                                 most 1 s here), or 404
  GET    /api/v1/namespaces/{ns}/pods/{name}/exec?command=...&stdin=&stdout=
         &stderr=&tty=&container=   (Upgrade: websocket) the exec stream
  POST   /apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies
  GET    /apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies[?labelSelector=]
  GET|DELETE /apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}

Errors are metav1.Status objects ({"kind":"Status","apiVersion":"v1",
"status":"Failure","message","reason","details","code"}).

Pods: Pending (no container status) for pending_s, then Running with the
container waiting (ContainerCreating, ready false) for creating_s, then
running (ready true, started true); the commands of the pod run for real in
a bubblewrap instance (tests/fakes/nsbox.py) as the pod's runAsUser and
runAsGroup, with the container's env, its emptyDir volumes as directories
of mode 0777 at their mountPath. An image whose name starts with "nosuch"
never pulls (waiting ImagePullBackOff, message 'Back-off pulling image
"IMAGE"'); one that starts with "crashloop" crashes (waiting
CrashLoopBackOff, lastState.terminated.exitCode 1). activeDeadlineSeconds
ends the pod (phase Failed, reason DeadlineExceeded) counted from its
status.startTime (whole seconds), and a PATCH of the pod (JSON merge patch)
may lower it, never raise it, and change nothing else, as the API server's
pod update validation allows. The container's
memory limit (resources.limits.memory) is a cgroup v1 memory cgroup that
its execs join, seen in the pod at /sys/fs/cgroup/memory (read-only, with
its oom_kill counter in memory.oom_control), as a container sees its own. A pod that a
NetworkPolicy with policyTypes ["Egress"] and no egress rules selects (by
matchLabels) when it starts runs without a network (--unshare-net).
Until the container runs, an exec upgrade is refused with 400 'unable to
upgrade connection: container not found ("NAME")'.

Exec: the upgrade offers subprotocols in Sec-WebSocket-Protocol; the fake
takes the first of them it supports (v5.channel.k8s.io and
v4.channel.k8s.io; only v4 after POST /_fake/config {"protocols":
["v4.channel.k8s.io"]}). Frames are binary, [channel][payload]: 0 stdin,
1 stdout, 2 stderr, 3 the Status, 4 resize {"Width","Height"}, 255 close
(v5: [255, 0] closes the command's stdin). The fake first sends an empty
frame on stdout (or stderr, or the error channel when neither was asked
for), and ends with one Status on channel 3: {"metadata":{},"status":
"Success"}, or Failure with reason NonZeroExitCode and details.causes
[{"reason":"ExitCode","message":"N"}] (a command killed by signal N:
128+N, as a container runtime reports it), then a close frame. With v4 a
client's close ends the command's stdin too (and the stream). A pod deleted
(or past its activeDeadlineSeconds) while an exec runs in it kills the
command: its stream still ends with the Status (exit code 137) and a close
frame.

Credentials: "Authorization: Bearer <key>" (SBX_FAKE_API_KEY), or a client
certificate signed by the CA of SBX_FAKE_TLS_CA when the server speaks TLS
(SBX_FAKE_TLS_CERT and SBX_FAKE_TLS_KEY: its certificate and key; no TLS
when unset).

With TLS, the same routes are also served without TLS on a second port,
printed as "CONTROL <n>" before "PORT <n>". Control routes (no auth; not
logged): GET/DELETE /_fake/log, POST
/_fake/faults (tests/fakes/fakehttp.py); POST /_fake/config with any of
{"pending_s", "creating_s", "protocols", "exec_fault", "refuse_execs"}
("refuse_execs": N refuses the next N exec upgrades as if the container
were not running; "exec_fault":
"no_status" ends the next exec stream with a close frame and no Status,
"drop" cuts its connection without a close frame; used once); GET
/_fake/execs (what each exec stream carried: pod, command, offered,
protocol, stdin_bytes, stdin_closed (the [255,0] came), client_frames (the
last 8 channels the client sent, in order), resizes, status); GET
/_fake/pods (every pod ever created: its spec as created, labels,
start_time, patches [{"at", "spec"}], deletion and grace period);
GET /_fake/networkpolicies.

Python 3 standard library, and python3-wsproto (Debian) for WebSocket
framing. Run as root (bubblewrap and nsenter).
"""

import base64
import copy
import fcntl
import hashlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakehttp  # noqa: E402
import nsbox  # noqa: E402
from fakehttp import Reply  # noqa: E402

from wsproto import ConnectionType  # noqa: E402
from wsproto.connection import Connection  # noqa: E402
from wsproto.events import (BytesMessage, CloseConnection, Ping,  # noqa: E402
                            TextMessage)
from wsproto.frame_protocol import CloseReason  # noqa: E402
from wsproto.utilities import LocalProtocolError  # noqa: E402

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret")


def status(code, reason, message, name=None, kind=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if name is not None:
        body["details"] = {"name": name, "kind": kind or "pods"}
    return Reply(code, body)


def now_rfc3339(t=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t if t is not None else time.time()))


def selects(selector, labels):
    """Whether label selector @selector ("k=v,k2!=v,k3", "" = all) selects
    @labels."""
    for term in [t.strip() for t in (selector or "").split(",") if t.strip()]:
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "==" in term or "=" in term:
            k, v = re.split("==?", term, 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def pss_violations(pod):
    """The restricted Pod Security Standard's violations of @pod (strings,
    in the apiserver's words)."""
    out = []
    spec = pod.get("spec") or {}
    psc = spec.get("securityContext") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    bad_ape = [c.get("name") for c in containers
               if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]
    if bad_ape:
        out.append('allowPrivilegeEscalation != false (container "%s" must set '
                   'securityContext.allowPrivilegeEscalation=false)' % bad_ape[0])
    bad_caps = [c.get("name") for c in containers
                if "ALL" not in (((c.get("securityContext") or {}).get("capabilities") or {})
                                 .get("drop") or [])]
    if bad_caps:
        out.append('unrestricted capabilities (container "%s" must set '
                   'securityContext.capabilities.drop=["ALL"])' % bad_caps[0])
    for c in containers:
        add = (((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or [])
        if [a for a in add if a != "NET_BIND_SERVICE"]:
            out.append('unrestricted capabilities (container "%s" must not include %s in '
                       'securityContext.capabilities.add)' % (c.get("name"), add[0]))
    pod_nonroot = psc.get("runAsNonRoot") is True
    if not pod_nonroot and not all((c.get("securityContext") or {}).get("runAsNonRoot") is True
                                   for c in containers):
        out.append("runAsNonRoot != true (pod or container must set "
                   "securityContext.runAsNonRoot=true)")
    if psc.get("runAsUser") == 0 or any((c.get("securityContext") or {}).get("runAsUser") == 0
                                        for c in containers):
        out.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    pod_sec = (psc.get("seccompProfile") or {}).get("type")
    if pod_sec not in ("RuntimeDefault", "Localhost"):
        if not all(((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
                   in ("RuntimeDefault", "Localhost") for c in containers):
            out.append('seccompProfile (pod or container must set securityContext.'
                       'seccompProfile.type to "RuntimeDefault" or "Localhost")')
    for c in containers:
        if (c.get("securityContext") or {}).get("privileged"):
            out.append('privileged (container "%s" must not set securityContext.'
                       'privileged=true)' % c.get("name"))
    for v in spec.get("volumes") or []:
        kinds = [k for k in v if k != "name"]
        if kinds and kinds[0] not in ALLOWED_VOLUMES:
            out.append('restricted volume types (volume "%s" uses restricted volume type '
                       '"%s")' % (v.get("name"), kinds[0]))
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        out.append("host namespaces (hostNetwork=true)")
    return out


MEMCG = nsbox.MEMCG
make_memcg = nsbox.make_memcg
drop_memcg = nsbox.drop_memcg


def parse_quantity(q):
    """A memory quantity ("256Mi", "1Gi", "500M", "1048576") in bytes, or
    None."""
    if q is None:
        return None
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|K|M|G|T)?", str(q))
    if not m:
        return None
    mult = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
            "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return int(m.group(1)) * mult


class Pod:
    def __init__(self, fake, ns, obj):
        self.ns = ns
        self.obj = obj
        self.name = obj["metadata"]["name"]
        self.created = time.time()
        self.box = None
        self.state = "pending"          # pending, creating, running, pullbackoff,
        #                                 crashloop, failed, deleted
        self.deleted = False
        self.deadline_hit = False
        spec = obj["spec"]
        c = spec["containers"][0]
        self.container = c.get("name") or "sandbox"
        self.image = c.get("image") or ""
        psc = spec.get("securityContext") or {}
        csc = c.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
        self.user = (int(uid), int(gid)) if uid is not None else None
        self.env = {e["name"]: e.get("value", "") for e in c.get("env") or []
                    if "name" in e}
        self.workdir = c.get("workingDir") or "/"
        self.mounts = [m.get("mountPath") for m in c.get("volumeMounts") or []
                       if m.get("mountPath")]
        self.deadline = spec.get("activeDeadlineSeconds")
        self.memory = parse_quantity(((c.get("resources") or {}).get("limits") or {})
                                     .get("memory"))
        self.cgroup = None

    def labels(self):
        return self.obj["metadata"].get("labels") or {}

    def view(self):
        o = copy.deepcopy(self.obj)
        st = {"phase": "Pending", "conditions": [], "qosClass": "Burstable",
              "hostIP": "127.0.0.1", "podIP": "127.0.0.1"}
        cs = {"name": self.container, "image": self.image, "imageID": "",
              "restartCount": 0, "ready": False, "started": False}
        if self.state == "pending":
            st["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            o["status"] = st
            return o
        st["startTime"] = now_rfc3339(self.created)
        if self.state == "creating":
            st["phase"] = "Running"
            cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
        elif self.state == "running":
            st["phase"] = "Running"
            cs.update(ready=True, started=True,
                      state={"running": {"startedAt": now_rfc3339(self.created)}})
        elif self.state == "pullbackoff":
            cs["state"] = {"waiting": {"reason": "ImagePullBackOff",
                                       "message": 'Back-off pulling image "%s"' % self.image}}
        elif self.state == "crashloop":
            st["phase"] = "Running"
            cs["restartCount"] = 3
            cs["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                                       "message": "back-off 40s restarting failed container=%s"
                                       % self.container}}
            cs["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
        elif self.state == "failed":
            st["phase"] = "Failed"
            st["reason"] = "DeadlineExceeded"
            st["message"] = ("Pod was active on the node longer than the specified deadline")
            cs["state"] = {"terminated": {"exitCode": 137, "reason": "Error"}}
        st["containerStatuses"] = [cs]
        if self.deleted:
            o["metadata"]["deletionTimestamp"] = now_rfc3339()
        o["status"] = st
        return o


class K8sFake(fakehttp.Fake):
    def __init__(self):
        super().__init__(os.environ.get("SBX_FAKE_API_KEY", "fake-kubernetes-token"))
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-kubernetes-")
        self.pods = {}          # (ns, name) -> Pod
        self.history = []       # every pod created: {"ns","name","deleted","grace"}
        self.policies = {}      # (ns, name) -> NetworkPolicy object
        self.policy_log = []    # {"op": "create"|"delete", "ns", "name"}
        self.execs = []
        self.config = {"pending_s": 0.05, "creating_s": 0.05,
                       "protocols": ["v5.channel.k8s.io", "v4.channel.k8s.io"],
                       "exec_fault": None}
        self.ca = os.environ.get("SBX_FAKE_TLS_CA")

    def error_body(self, status_code, message, path, method):
        reason = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                  409: "AlreadyExists", 429: "TooManyRequests", 500: "InternalError",
                  503: "ServiceUnavailable"}.get(status_code, "Unknown")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": status_code}

    # ------------------------------------------------------------ pods
    def lifecycle(self, pod):
        """Moves @pod through its states (on a thread of its own)."""
        time.sleep(float(self.config["pending_s"]))
        with self.lock:
            if pod.deleted:
                return
            if pod.image.startswith("nosuch"):
                pod.state = "pullbackoff"
                return
            pod.state = "creating"
        time.sleep(float(self.config["creating_s"]))
        if pod.image.startswith("crashloop"):
            with self.lock:
                if not pod.deleted:
                    pod.state = "crashloop"
            return
        box = nsbox.Box(self.dir, "pod")
        # A container's / is readable by its non-root user; a pod that a
        # deny-egress policy selects has no network, for its execs too.
        os.chmod(box.root, 0o755)
        box.join_net = True
        # The container's memory limit: a memory cgroup that every exec
        # joins, visible in the pod at /sys/fs/cgroup/memory (read-only)
        # with its oom_kill counter, as a container sees its own cgroup.
        if pod.memory:
            pod.cgroup = make_memcg("sbx-fake-k8s-%s-%s" % (pod.name, secrets.token_hex(3)),
                                    pod.memory)
            if pod.cgroup:
                mp = os.path.join(box.root, MEMCG.lstrip("/"))
                os.makedirs(mp, exist_ok=True)
                for d in ("sys", "sys/fs", "sys/fs/cgroup", MEMCG.lstrip("/")):
                    os.chmod(os.path.join(box.root, d), 0o755)
                box.ro_binds.append((pod.cgroup, MEMCG))
        for m in pod.mounts:
            host = os.path.join(box.root, m.lstrip("/"))
            os.makedirs(host, exist_ok=True)
            os.chmod(host, 0o777)
        if pod.workdir != "/":
            os.makedirs(os.path.join(box.root, pod.workdir.lstrip("/")), exist_ok=True)
        try:
            box.start(not self.egress_denied(pod))
        except OSError as e:
            sys.stderr.write("pod %s did not start: %s\n" % (pod.name, e))
            box.delete()
            return
        with self.lock:
            if pod.deleted:
                dead = box
            else:
                dead = None
                pod.box = box
                pod.state = "running"
        if dead is not None:
            dead.delete()
            self.drop_cgroup(pod)

    def drop_cgroup(self, pod):
        cg, pod.cgroup = pod.cgroup, None
        if cg:
            drop_memcg(cg)

    def egress_denied(self, pod):
        with self.lock:
            for (ns, _), pol in self.policies.items():
                spec = pol.get("spec") or {}
                if ns != pod.ns or "Egress" not in (spec.get("policyTypes") or []):
                    continue
                if spec.get("egress"):
                    continue
                ml = (spec.get("podSelector") or {}).get("matchLabels") or {}
                if all(pod.labels().get(k) == v for k, v in ml.items()):
                    return True
        return False

    def reap(self, pod, now):
        """activeDeadlineSeconds: the pod fails once it has been active
        that long."""
        if pod.deadline is None or pod.deleted or pod.state in ("failed", "pending"):
            return
        if now - int(pod.created) >= float(pod.deadline):
            with self.lock:
                pod.state = "failed"
                box, pod.box = pod.box, None
            if box is not None:
                box.delete()
            self.drop_cgroup(pod)

    def delete_pod(self, pod, grace):
        with self.lock:
            pod.deleted = True
            for h in self.history:
                if h["ns"] == pod.ns and h["name"] == pod.name and h["deleted"] is None:
                    h["deleted"] = time.time()
                    h["grace"] = grace

        def later():
            time.sleep(min(float(grace or 0), 1.0))
            with self.lock:
                if self.pods.get((pod.ns, pod.name)) is pod:
                    del self.pods[(pod.ns, pod.name)]
                box, pod.box = pod.box, None
            if box is not None:
                box.delete()
            self.drop_cgroup(pod)
        if grace:
            threading.Thread(target=later, daemon=True).start()
        else:
            later()

    def boxes(self):
        with self.lock:
            return list(self.pods.values())

    def cleanup(self):
        for pod in self.boxes():
            if pod.box is not None:
                pod.box.delete()
            self.drop_cgroup(pod)
        shutil.rmtree(self.dir, ignore_errors=True)


FAKE = None


class K8sHandler(fakehttp.Handler):
    def authorized(self, auth):
        if auth == "Bearer " + self.fake.api_key:
            return True
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                return bool(self.connection.getpeercert())
            except (ValueError, ssl.SSLError):
                return False
        return False

    def fake_control(self, path):
        f = FAKE
        if path == "/_fake/config" and self.command == "POST":
            body = self.json_body()
            with f.lock:
                f.config.update(body)
            return self.send_json(204, None)
        if path == "/_fake/execs" and self.command == "GET":
            with f.lock:
                return self.send_json(200, list(f.execs))
        if path == "/_fake/pods" and self.command == "GET":
            with f.lock:
                return self.send_json(200, list(f.history))
        if path == "/_fake/networkpolicies" and self.command == "GET":
            with f.lock:
                return self.send_json(200, {"live": [p for p in f.policies.values()],
                                            "log": list(f.policy_log)})
        raise Reply(404, {"error": "no such control route: " + path})

    def route(self, path, query):
        f = FAKE
        meth = self.command
        if path == "/version" and meth == "GET":
            return self.send_json(200, {"major": "1", "minor": "32",
                                        "gitVersion": "v1.32.0-sbx-fake"})
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/exec)?", path)
        if m:
            ns, name, sub = m.group(1), m.group(2), m.group(3)
            if sub and meth == "GET":
                return self.exec_stream(ns, name, query)
            if name is None and meth == "POST":
                return self.create_pod(ns, self.json_body())
            if name is None and meth == "GET":
                sel = fakehttp.q1(query, "labelSelector", "")
                with f.lock:
                    items = [p.view() for (pns, _), p in f.pods.items()
                             if pns == ns and selects(sel, p.labels())]
                return self.send_json(200, {"kind": "PodList", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": "1"},
                                            "items": items})
            if name is not None and not sub:
                with f.lock:
                    pod = f.pods.get((ns, name))
                if pod is None:
                    raise status(404, "NotFound", 'pods "%s" not found' % name, name)
                if meth == "GET":
                    return self.send_json(200, pod.view())
                if meth == "PATCH":
                    return self.patch_pod(pod)
                if meth == "DELETE":
                    self.body_bytes()
                    grace = fakehttp.q1(query, "gracePeriodSeconds")
                    grace = int(grace) if grace is not None else 30
                    f.delete_pod(pod, grace)
                    return self.send_json(200, pod.view())
        m = re.fullmatch(r"/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/networkpolicies"
                         r"(?:/([^/]+))?", path)
        if m:
            return self.policy(m.group(1), m.group(2), query)
        raise status(404, "NotFound", "the server could not find the requested resource")

    # ------------------------------------------------------------ objects
    def create_pod(self, ns, body):
        f = FAKE
        if body.get("kind") != "Pod" or body.get("apiVersion") != "v1":
            raise status(400, "BadRequest", "Pod in version \"v1\" cannot be handled as a "
                         "Pod: kind and apiVersion must be Pod and v1")
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["generateName"] + secrets.token_hex(3)[:5]
        if not name or not NAME_RE.fullmatch(name) or len(name) > 63:
            raise status(422, "Invalid", 'Pod "%s" is invalid: metadata.name: Invalid value'
                         % (name or ""), name or "")
        spec = body.get("spec") or {}
        if not spec.get("containers"):
            raise status(422, "Invalid", 'Pod "%s" is invalid: spec.containers: Required '
                         'value' % name, name)
        bad = pss_violations(body)
        if bad:
            raise status(403, "Forbidden", 'pods "%s" is forbidden: violates PodSecurity '
                         '"restricted:latest": %s' % (name, ", ".join(bad)), name)
        meta["name"] = name
        meta["namespace"] = ns
        meta["uid"] = "%08x-0000-4000-8000-%012x" % (secrets.randbits(32), secrets.randbits(48))
        meta["creationTimestamp"] = now_rfc3339()
        meta["resourceVersion"] = "1"
        with f.lock:
            if (ns, name) in f.pods:
                raise status(409, "AlreadyExists", 'pods "%s" already exists' % name, name)
            pod = Pod(f, ns, body)
            f.pods[(ns, name)] = pod
            f.history.append({"ns": ns, "name": name, "deleted": None, "grace": None,
                              "spec": copy.deepcopy(body["spec"]),
                              "labels": meta.get("labels") or {}, "patches": [],
                              "start_time": now_rfc3339(pod.created)})
        threading.Thread(target=f.lifecycle, args=(pod,), daemon=True).start()
        self.send_json(201, pod.view())

    def patch_pod(self, pod):
        """A JSON merge patch (application/merge-patch+json) of a pod: of
        its spec only activeDeadlineSeconds may change, to a positive value
        no greater than the one it has (the API server's ValidatePodUpdate).
        Each patch is kept in the pod's history ("patches")."""
        f = FAKE
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype not in ("application/merge-patch+json",
                         "application/strategic-merge-patch+json"):
            raise status(415, "UnsupportedMediaType", "the body of the request was in an "
                         "unknown format - accepted media types include: "
                         "application/json-patch+json, application/merge-patch+json, "
                         "application/apply-patch+yaml")
        body = self.json_body()
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict) or set(body) != {"spec"} \
                or set(spec) != {"activeDeadlineSeconds"}:
            raise status(422, "Invalid", 'Pod "%s" is invalid: spec: Forbidden: pod updates '
                         'may not change fields other than `spec.containers[*].image`, '
                         '`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, '
                         '`spec.tolerations` (only additions to existing tolerations), '
                         '`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if '
                         'it was previously negative)' % pod.name, pod.name)
        new = spec["activeDeadlineSeconds"]
        if not isinstance(new, int) or isinstance(new, bool) or new < 0 or new > 2**31 - 1:
            raise status(422, "Invalid", 'Pod "%s" is invalid: spec.activeDeadlineSeconds: '
                         'Invalid value: %s: must be between 0 and 2147483647, inclusive'
                         % (pod.name, json.dumps(new)), pod.name)
        with f.lock:
            old = pod.deadline
            if old is not None and new > old:
                raise status(422, "Invalid", 'Pod "%s" is invalid: spec.activeDeadlineSeconds: '
                             'Invalid value: %d: must be less than or equal to previous value'
                             % (pod.name, new), pod.name)
            pod.deadline = new
            pod.obj["spec"]["activeDeadlineSeconds"] = new
            for h in f.history:
                if h["ns"] == pod.ns and h["name"] == pod.name and h["deleted"] is None:
                    h["patches"].append({"at": time.time(), "spec": spec})
            view = pod.view()
        return self.send_json(200, view)

    def policy(self, ns, name, query):
        f = FAKE
        meth = self.command
        if name is None and meth == "POST":
            body = self.json_body()
            pname = (body.get("metadata") or {}).get("name")
            if body.get("kind") != "NetworkPolicy" or not pname:
                raise status(400, "BadRequest", "not a NetworkPolicy with a name")
            body["metadata"]["namespace"] = ns
            with f.lock:
                if (ns, pname) in f.policies:
                    raise status(409, "AlreadyExists", 'networkpolicies.networking.k8s.io '
                                 '"%s" already exists' % pname, pname, "networkpolicies")
                f.policies[(ns, pname)] = body
                f.policy_log.append({"op": "create", "ns": ns, "name": pname})
            return self.send_json(201, body)
        if name is None and meth == "GET":
            sel = fakehttp.q1(query, "labelSelector", "")
            with f.lock:
                items = [p for (pns, _), p in f.policies.items()
                         if pns == ns and selects(sel, (p.get("metadata") or {})
                                                  .get("labels") or {})]
            return self.send_json(200, {"kind": "NetworkPolicyList",
                                        "apiVersion": "networking.k8s.io/v1", "items": items})
        with f.lock:
            pol = f.policies.get((ns, name))
        if pol is None:
            raise status(404, "NotFound", 'networkpolicies.networking.k8s.io "%s" not found'
                         % name, name, "networkpolicies")
        if meth == "GET":
            return self.send_json(200, pol)
        if meth == "DELETE":
            self.body_bytes()
            with f.lock:
                f.policies.pop((ns, name), None)
                f.policy_log.append({"op": "delete", "ns": ns, "name": name})
            return self.send_json(200, {"kind": "Status", "apiVersion": "v1",
                                        "status": "Success", "metadata": {}})
        raise status(405, "MethodNotAllowed", "the server does not allow this method")

    # ------------------------------------------------------------ exec
    def exec_stream(self, ns, name, query):
        f = FAKE
        with f.lock:
            pod = f.pods.get((ns, name))
            # The sandbox the exec runs in, held by the stream: a delete or
            # a deadline that ends the pod meanwhile ends the command (its
            # Status then says how), not the stream's own bookkeeping.
            box = pod.box if pod is not None else None
            cfg = dict(f.config)
            fault, f.config["exec_fault"] = f.config["exec_fault"], None
            refuse = int(f.config.get("refuse_execs") or 0) > 0
            if refuse:
                f.config["refuse_execs"] = int(f.config["refuse_execs"]) - 1
        if pod is None:
            raise status(404, "NotFound", 'pods "%s" not found' % name, name)
        if (self.headers.get("Upgrade") or "").lower() != "websocket":
            raise status(400, "BadRequest", "Upgrade request required")
        container = fakehttp.q1(query, "container", pod.container)
        if container != pod.container:
            raise status(400, "BadRequest", 'container %s is not valid for pod %s'
                         % (container, name))
        if refuse or pod.state != "running" or box is None:
            raise Reply(400, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure",
                              "message": 'unable to upgrade connection: container not found '
                                         '("%s")' % pod.container, "code": 400})
        argv = query.get("command") or []
        if not argv:
            raise status(400, "BadRequest", "you must specify at least 1 command")
        flag = (lambda k: fakehttp.q1(query, k, "false") in ("true", "1"))
        want_in, want_out, want_err, tty = flag("stdin"), flag("stdout"), flag("stderr"), \
            flag("tty")
        offered = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "")
                   .split(",") if p.strip()]
        proto = next((p for p in offered if p in cfg["protocols"]), None)
        if proto is None:
            raise status(400, "BadRequest", "unable to upgrade: no supported subprotocol "
                         "among %s" % offered)
        key = self.headers.get("Sec-WebSocket-Key") or ""
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        rec = {"pod": name, "command": argv, "offered": offered, "protocol": proto,
               "tty": tty, "stdin": want_in, "stdin_bytes": 0, "stdin_closed": False,
               "client_frames": [], "resizes": [], "status": None, "client_closed": False}
        with f.lock:
            f.execs.append(rec)
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", proto)
        self.end_headers()
        self.wfile.flush()
        self._status = 101
        self.close_connection = True
        ExecSession(self, pod, box, argv, proto, want_in, want_out, want_err, tty, rec,
                    fault).run()


class ExecSession:
    """One exec stream: the command, its pipes (or terminal) and the
    channel framing over wsproto.

    Threads: the handler's (run(): the command, its Status, the close),
    one pump per output (frames out), the reader (frames in). The wsproto
    connection and the TLS connection under it are each used by one thread
    at a time, under self.wlock: wsproto's frame state (the opcode of a
    message in progress) is shared by every send, so two outputs framed at
    once would make one a continuation frame of the other, and an OpenSSL
    connection must not be read and written at once. The reader waits for
    the socket outside the lock (poll) and reads without blocking under it.
    No thread touches the socket once finish() has marked it closed (the
    reader checks under the lock before each read), and run() returns (and
    the server closes the descriptor) once the reader has ended, or after
    5 s when it is held up writing the client's stdin to a command that
    does not read it: a descriptor number the kernel hands to the next
    connection is never read or written on behalf of this one."""

    def __init__(self, handler, pod, box, argv, proto, want_in, want_out, want_err, tty, rec,
                 fault):
        self.h = handler
        self.sock = handler.connection
        self.pod = pod
        self.box = box          # the pod's sandbox when the exec started
        self.argv = argv
        self.v5 = proto.startswith("v5")
        self.want_in, self.want_out, self.want_err, self.tty = (want_in, want_out, want_err,
                                                                tty)
        self.rec = rec
        self.fault = fault
        # The handshake was ours (above): wsproto's frame-level connection.
        self.ws = Connection(ConnectionType.SERVER)
        self.wlock = threading.Lock()
        self.proc = None
        self.master = None
        # The terminal's master is closed by the last of run() (its pump
        # finished) and the reader (it writes the client's stdin there).
        self.master_users = 2
        self.mlock = threading.Lock()
        self.stdin_w = None
        self.closed = False
        self.reader_thread = None

    def send_event(self, ev):
        """Frames @ev and sends it whole; nothing once the connection is
        closed (or wsproto's state no longer allows it: the client's
        close came)."""
        with self.wlock:
            if self.closed:
                return
            try:
                data = self.ws.send(ev)
            except LocalProtocolError:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def frame(self, ch, payload=b""):
        self.send_event(BytesMessage(data=bytes([ch]) + payload))

    def close_stdin(self):
        w, self.stdin_w = self.stdin_w, None
        if w is not None:
            try:
                w.close()
            except OSError:
                pass

    def release_master(self):
        with self.mlock:
            self.master_users -= 1
            master = self.master if self.master_users == 0 else None
            if master is not None:
                self.master = None
        if master is not None:
            try:
                os.close(master)
            except OSError:
                pass

    def receive(self):
        """The client's next bytes: data, b"" at the end (the client went,
        or finish() closed the stream), None when nothing came."""
        with self.wlock:
            if self.closed:
                return b""
            self.sock.setblocking(False)
            try:
                return self.sock.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                return None
            except OSError:
                return b""
            finally:
                self.sock.setblocking(True)

    def reader(self):
        """The client's frames: stdin, resize, close."""
        try:
            self.read_frames()
        finally:
            self.client_gone()
            if self.tty:
                self.release_master()

    def read_frames(self):
        buf = b""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        while True:
            # TLS may hold a decrypted rest that poll cannot see.
            pending = getattr(self.sock, "pending", None)
            if not (pending and pending()):
                # A bounded wait: finish() marking the stream closed is
                # seen within it even if no wakeup came.
                poller.poll(200)
            data = self.receive()
            if data is None:
                continue
            with self.wlock:
                try:
                    self.ws.receive_data(data or None)
                    events = list(self.ws.events())
                except Exception:  # noqa: BLE001 - a broken stream ends
                    events = []
                    data = b""
            if not data:
                return
            for ev in events:
                if isinstance(ev, BytesMessage) or isinstance(ev, TextMessage):
                    buf += ev.data if isinstance(ev, BytesMessage) else ev.data.encode()
                    if not ev.message_finished:
                        continue
                    msg, buf = buf, b""
                    if not msg:
                        continue
                    ch, payload = msg[0], msg[1:]
                    with FAKE.lock:
                        self.rec["client_frames"] = (self.rec["client_frames"] + [ch])[-8:]
                    if ch == 0:
                        with FAKE.lock:
                            self.rec["stdin_bytes"] += len(payload)
                        target = self.master if self.tty else self.stdin_w
                        if target is not None:
                            try:
                                if self.tty:
                                    os.write(self.master, payload)
                                else:
                                    target.write(payload)
                                    target.flush()
                            except OSError:
                                pass
                    elif ch == 4:
                        try:
                            sz = json.loads(payload)
                            with FAKE.lock:
                                self.rec["resizes"].append([sz.get("Width"), sz.get("Height")])
                            if self.master is not None:
                                fcntl.ioctl(self.master, termios.TIOCSWINSZ,
                                            struct.pack("HHHH", int(sz["Height"]),
                                                        int(sz["Width"]), 0, 0))
                        except (ValueError, KeyError, OSError):
                            pass
                    elif ch == 255 and self.v5 and payload[:1] == b"\x00":
                        with FAKE.lock:
                            self.rec["stdin_closed"] = True
                        if self.tty and self.master is not None:
                            try:
                                os.write(self.master, b"\x04")
                            except OSError:
                                pass
                        self.close_stdin()
                elif isinstance(ev, Ping):
                    self.send_event(ev.response())
                elif isinstance(ev, CloseConnection):
                    with FAKE.lock:
                        self.rec["client_closed"] = True
                    self.send_event(ev.response())
                    return

    def client_gone(self):
        """The client closed or went (or the stream ended): v4 has no other
        stdin EOF; the command's stdin ends, and a command still running is
        killed (the stream it belonged to is over)."""
        self.close_stdin()
        with self.wlock:
            self.closed = True

        def kill_later():
            time.sleep(0.5)
            if self.proc is not None and self.proc.poll() is None:
                self.box.kill_command(self.proc)
        threading.Thread(target=kill_later, daemon=True).start()

    def run(self):
        pod, box = self.pod, self.box
        env = dict(pod.env)
        try:
            if self.tty:
                self.master, slave = os.openpty()
                try:
                    fcntl.ioctl(self.master, termios.TIOCSWINSZ,
                                struct.pack("HHHH", 24, 80, 0, 0))
                    # setsid(1) -c: the command leads a session of its own
                    # in the pod with the terminal as its controlling
                    # terminal (nsenter stays out of it: a ^C reaches the
                    # command's group alone), as nsbox.popen_pty does.
                    self.proc = box.popen(["/usr/bin/setsid", "-c"] + list(self.argv),
                                          env=env, cwd=pod.workdir, stdin=slave,
                                          stdout=slave, stderr=slave, user=pod.user,
                                          cgroup=pod.cgroup)
                finally:
                    os.close(slave)
            else:
                self.proc = box.popen(self.argv, env=env, cwd=pod.workdir,
                                      stdin=subprocess.PIPE if self.want_in
                                      else subprocess.DEVNULL,
                                      user=pod.user, cgroup=pod.cgroup)
                self.stdin_w = self.proc.stdin
        except (nsbox.SandboxGone, OSError) as e:
            if self.master is not None:
                os.close(self.master)
                self.master = None
            self.frame(3, json.dumps({"metadata": {}, "status": "Failure",
                                      "message": str(e) or "container not running",
                                      "reason": "InternalError"}).encode())
            self.finish()
            return
        # The first frame: empty, on stdout (else stderr, else the error
        # channel).
        self.frame(1 if self.want_out else 2 if self.want_err else 3)
        self.reader_thread = threading.Thread(target=self.reader, daemon=True)
        self.reader_thread.start()
        if self.tty:
            pumps = [nsbox.OutputPump(self.master, lambda d: self.frame(1, d))]
        else:
            pumps = [nsbox.OutputPump(self.proc.stdout, lambda d: self.frame(1, d),
                                      close=True),
                     nsbox.OutputPump(self.proc.stderr, lambda d: self.frame(2, d),
                                      close=True)]
        code = self.proc.wait()
        # The exec ends with the command's process: what it wrote is sent,
        # a background child that holds the pipes is not waited for.
        for t in pumps:
            t.finish()
        box.forget(self.proc)
        if self.tty:
            self.release_master()
        if code < 0:
            code = 128 - code
        if self.fault == "drop":
            with self.wlock:
                self.closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.reader_thread.join(5)
            return
        if self.fault != "no_status":
            if code == 0:
                st = {"metadata": {}, "status": "Success"}
            else:
                st = {"metadata": {}, "status": "Failure",
                      "message": "command terminated with non-zero exit code: error "
                                 "executing command [%s], exit code %d"
                                 % (" ".join(self.argv), code),
                      "reason": "NonZeroExitCode",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
            with FAKE.lock:
                self.rec["status"] = st
            self.frame(3, json.dumps(st).encode())
        self.finish()
        self.reader_thread.join(5)

    def finish(self):
        self.send_event(CloseConnection(code=CloseReason.NORMAL_CLOSURE))
        # Give the client its close handshake, then end the connection.
        time.sleep(0.05)
        with self.wlock:
            self.closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    global FAKE
    FAKE = K8sFake()
    ctx = None
    cert, key = os.environ.get("SBX_FAKE_TLS_CERT"), os.environ.get("SBX_FAKE_TLS_KEY")
    if cert and key:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        if FAKE.ca:
            ctx.load_verify_locations(FAKE.ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL
    FAKE.start_reaper(FAKE.reap)
    if ctx is not None:
        # The control routes (and the API, with the bearer key) also on a
        # plain HTTP port, printed as "CONTROL <n>", for tests that script
        # the fake without TLS.
        K8sHandler.fake = FAKE
        plain = fakehttp.Server(("127.0.0.1", 0), K8sHandler)
        plain.daemon_threads = True
        sys.stdout.write("CONTROL %d\n" % plain.server_address[1])
        sys.stdout.flush()
        threading.Thread(target=plain.serve_forever, args=(0.2,), daemon=True).start()
    fakehttp.serve(FAKE, K8sHandler, ctx)


if __name__ == "__main__":
    main()
