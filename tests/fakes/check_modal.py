#!/usr/bin/python3
"""Drives the Modal contract fake (tests/fakes/modal.py) over gRPC with
python3-grpcio and the plugin's own protos (plugins/cloud/modal/*.proto,
compiled here with protoc) and checks the exact answers the contract gives:
the token metadata (UNAUTHENTICATED without it), the auth token of
AuthTokenGet (a JWT with its exp; UNAUTHENTICATED without it), NOT_FOUND and
INVALID_ARGUMENT where due, SandboxList by tags (each with its tags),
SandboxTagsGet, SandboxGetTunnels for the open ports, the command router's JWT
check (and an expired JWT), a TaskExecStart repeated with its exec id
running once, stdout read from an offset, stdin by offset (a repeated chunk
written once; one write larger than the pipes, answered while the command's
output is read), code and signal from TaskExecWait, a filesystem snapshot
restored by image id, a scripted RESOURCE_EXHAUSTED. The fake is started
on ephemeral ports and stopped by its PID; afterwards no process of it and
no sandbox directory is left. Prints TAP.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = os.path.join(HERE, "..", "..", "plugins", "cloud", "modal")
KEY = "modal-check-secret-123"

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


def run(tmp):
    gen = os.path.join(tmp, "pb")
    os.mkdir(gen)
    subprocess.run(["protoc", "--python_out=" + gen, "-I", PROTOS,
                    os.path.join(PROTOS, "api.proto"),
                    os.path.join(PROTOS, "task_command_router.proto")], check=True)
    sys.path.insert(0, gen)
    import grpc
    import api_pb2 as api
    import task_command_router_pb2 as tcr

    env = dict(os.environ, SBX_FAKE_API_KEY=KEY, TMPDIR=tmp)
    out = open(os.path.join(tmp, "out"), "w+")
    fake = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "modal.py")], env=env,
                            stdout=out, stderr=subprocess.DEVNULL)
    try:
        ports = {}
        for _ in range(200):
            out.seek(0)
            ports = dict(line.split() for line in out.read().splitlines() if " " in line)
            if "PORT" in ports:
                break
            time.sleep(0.05)
        if not check("the fake prints GRPC, ROUTER and PORT",
                     {"GRPC", "ROUTER", "PORT"} <= set(ports), repr(ports)):
            return
        ctl = grpc.insecure_channel("127.0.0.1:" + ports["GRPC"])
        md = [("x-modal-token-id", "ak-check"), ("x-modal-token-secret", KEY)]

        def call(ch, svc, name, req, resp, metadata=md, stream=False):
            path = "/%s/%s" % (svc, name)
            if stream:
                return list(ch.unary_stream(path, request_serializer=req.SerializeToString,
                                            response_deserializer=resp.FromString)(
                    req, metadata=metadata, timeout=20))
            return ch.unary_unary(path, request_serializer=req.SerializeToString,
                                  response_deserializer=resp.FromString)(
                req, metadata=metadata, timeout=20)

        def c(name, req, resp, **kw):
            return call(ctl, "modal.client.ModalClient", name, req, resp, **kw)

        def code_of(fn):
            try:
                fn()
                return grpc.StatusCode.OK
            except grpc.RpcError as e:
                return e.code()

        eq("no token: UNAUTHENTICATED", code_of(lambda: c(
            "AppGetOrCreate", api.AppGetOrCreateRequest(app_name="a"),
            api.AppGetOrCreateResponse, metadata=[])), grpc.StatusCode.UNAUTHENTICATED)
        eq("a wrong secret: UNAUTHENTICATED", code_of(lambda: c(
            "AppGetOrCreate", api.AppGetOrCreateRequest(app_name="a"),
            api.AppGetOrCreateResponse,
            metadata=[("x-modal-token-id", "ak"), ("x-modal-token-secret", "wrong")])),
            grpc.StatusCode.UNAUTHENTICATED)
        eq("no auth token: UNAUTHENTICATED", code_of(lambda: c(
            "AppGetOrCreate", api.AppGetOrCreateRequest(app_name="a"),
            api.AppGetOrCreateResponse)), grpc.StatusCode.UNAUTHENTICATED)
        tok = c("AuthTokenGet", api.AuthTokenGetRequest(), api.AuthTokenGetResponse).token
        parts = tok.split(".")
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))) \
            if len(parts) == 3 else {}
        check("AuthTokenGet gives a JWT whose exp is about an hour away",
              abs(claims.get("exp", 0) - (time.time() + 3600)) < 60, tok)
        md.append(("x-modal-auth-token", tok))
        eq("a made-up auth token: UNAUTHENTICATED", code_of(lambda: c(
            "AppGetOrCreate", api.AppGetOrCreateRequest(app_name="a"),
            api.AppGetOrCreateResponse,
            metadata=md[:2] + [("x-modal-auth-token", "a.b.c")])),
            grpc.StatusCode.UNAUTHENTICATED)
        a1 = c("AppGetOrCreate", api.AppGetOrCreateRequest(app_name="a"),
               api.AppGetOrCreateResponse).app_id
        a2 = c("AppGetOrCreate", api.AppGetOrCreateRequest(app_name="a"),
               api.AppGetOrCreateResponse).app_id
        check("AppGetOrCreate gives one id per name", a1 and a1 == a2, "%r %r" % (a1, a2))
        eq("an image without FROM: INVALID_ARGUMENT", code_of(lambda: c(
            "ImageGetOrCreate", api.ImageGetOrCreateRequest(app_id=a1, image=api.Image()),
            api.ImageGetOrCreateResponse)), grpc.StatusCode.INVALID_ARGUMENT)
        im = c("ImageGetOrCreate", api.ImageGetOrCreateRequest(
            app_id=a1, image=api.Image(dockerfile_commands=["FROM debian:bookworm"])),
            api.ImageGetOrCreateResponse).image_id
        joined = c("ImageJoinStreaming", api.ImageJoinStreamingRequest(image_id=im, timeout=5),
                   api.ImageJoinStreamingResponse, stream=True)
        eq("ImageJoinStreaming ends with SUCCESS",
           [m.result.status for m in joined], [api.GenericResult.GENERIC_STATUS_SUCCESS])
        eq("an unknown image: NOT_FOUND", code_of(lambda: c(
            "SandboxCreate", api.SandboxCreateRequest(
                app_id=a1, definition=api.Sandbox(image_id="im-none")),
            api.SandboxCreateResponse)), grpc.StatusCode.NOT_FOUND)
        sec = c("SecretGetOrCreate", api.SecretGetOrCreateRequest(
            env_dict={"WANTED": "yes it is"},
            object_creation_type=api.OBJECT_CREATION_TYPE_EPHEMERAL),
            api.SecretGetOrCreateResponse).secret_id
        sid = c("SandboxCreate", api.SandboxCreateRequest(
            app_id=a1, definition=api.Sandbox(image_id=im, timeout_secs=120, secret_ids=[sec],
                                              workdir="/work/w"),
            tags=[api.SandboxTag(tag_name="k", tag_value="v1")]),
            api.SandboxCreateResponse).sandbox_id
        listed = c("SandboxList", api.SandboxListRequest(
            tags=[api.SandboxTag(tag_name="k", tag_value="v1")]), api.SandboxListResponse)
        eq("SandboxList by tag finds it", [s.id for s in listed.sandboxes], [sid])
        eq("SandboxList gives its tags",
           [(t.tag_name, t.tag_value) for s in listed.sandboxes for t in s.tags], [("k", "v1")])
        older = c("SandboxList", api.SandboxListRequest(
            tags=[api.SandboxTag(tag_name="k", tag_value="v1")],
            before_timestamp=listed.sandboxes[0].created_at), api.SandboxListResponse)
        eq("SandboxList before its created_at does not", len(older.sandboxes), 0)
        got = c("SandboxTagsGet", api.SandboxTagsGetRequest(sandbox_id=sid),
                api.SandboxTagsGetResponse)
        eq("SandboxTagsGet gives its tags", [(t.tag_name, t.tag_value) for t in got.tags],
           [("k", "v1")])
        eq("SandboxTagsGet of an unknown sandbox: NOT_FOUND", code_of(lambda: c(
            "SandboxTagsGet", api.SandboxTagsGetRequest(sandbox_id="sb-none"),
            api.SandboxTagsGetResponse)), grpc.StatusCode.NOT_FOUND)
        tun = c("SandboxGetTunnels", api.SandboxGetTunnelsRequest(sandbox_id=sid, timeout=5),
                api.SandboxGetTunnelsResponse)
        eq("SandboxGetTunnels of a sandbox without open ports: none", len(tun.tunnels), 0)
        listed = c("SandboxList", api.SandboxListRequest(
            tags=[api.SandboxTag(tag_name="k", tag_value="v2")]), api.SandboxListResponse)
        eq("SandboxList by another tag does not", len(listed.sandboxes), 0)
        task = c("SandboxGetTaskId", api.SandboxGetTaskIdRequest(
            sandbox_id=sid, wait_until_ready=True), api.SandboxGetTaskIdResponse).task_id
        check("SandboxGetTaskId names the task", task.startswith("ta-"), task)
        acc = c("TaskGetCommandRouterAccess", api.TaskGetCommandRouterAccessRequest(task_id=task),
                api.TaskGetCommandRouterAccessResponse)
        eq("the router is on the ROUTER port", acc.url, "http://127.0.0.1:" + ports["ROUTER"])
        router = grpc.insecure_channel("127.0.0.1:" + ports["ROUTER"])
        auth = [("authorization", "Bearer " + acc.jwt)]

        def r(name, req, resp, metadata=auth, stream=False):
            return call(router, "modal.task_command_router.TaskCommandRouter", name, req, resp,
                        metadata=metadata, stream=stream)

        def start(eid, script, metadata=auth):
            return r("TaskExecStart", tcr.TaskExecStartRequest(
                task_id=task, exec_id=eid, command_args=["/bin/sh", "-c", script]),
                tcr.TaskExecStartResponse, metadata=metadata)

        def read(eid, fd=0, off=0):
            return b"".join(m.data for m in r("TaskExecStdioRead", tcr.TaskExecStdioReadRequest(
                task_id=task, exec_id=eid, offset=off, file_descriptor=fd),
                tcr.TaskExecStdioReadResponse, stream=True))

        def wait(eid):
            return r("TaskExecWait", tcr.TaskExecWaitRequest(task_id=task, exec_id=eid),
                     tcr.TaskExecWaitResponse)

        eq("no JWT: UNAUTHENTICATED", code_of(lambda: start("e0", "true", metadata=[])),
           grpc.StatusCode.UNAUTHENTICATED)
        start("e1", "echo $WANTED; pwd; echo err >&2; echo run >> /tmp/runs; exit 3")
        start("e1", "echo $WANTED; pwd; echo err >&2; echo run >> /tmp/runs; exit 3")
        eq("stdout: the secret's env, the workdir", read("e1"), b"yes it is\n/work/w\n")
        eq("stdout from offset 4", read("e1", 0, 4), b"it is\n/work/w\n")
        eq("stderr apart", read("e1", 1), b"err\n")
        w = wait("e1")
        eq("TaskExecWait: the code", (w.WhichOneof("exit_status"), w.code), ("code", 3))
        start("e2", "cat /tmp/runs")
        eq("a repeated TaskExecStart ran once", read("e2"), b"run\n")
        start("e3", "cat")
        for off, data, eof in ((0, b"abc", False), (0, b"abc", False), (3, b"def", True)):
            r("TaskExecStdinWrite", tcr.TaskExecStdinWriteRequest(
                task_id=task, exec_id="e3", offset=off, data=data, eof=eof),
                tcr.TaskExecStdinWriteResponse)
        eq("stdin by offset, a repeated chunk written once", read("e3"), b"abcdef")
        # One write far larger than the pipes between it and the command's
        # output: cat takes it only while its output is read.
        big = bytes(range(256)) * 8192
        start("e7", "cat")
        if eq("a 2 MiB stdin write to cat is answered", code_of(lambda: r(
                "TaskExecStdinWrite", tcr.TaskExecStdinWriteRequest(
                    task_id=task, exec_id="e7", offset=0, data=big, eof=True),
                tcr.TaskExecStdinWriteResponse)), grpc.StatusCode.OK):
            got = read("e7")
            check("cat gives the 2 MiB back", got == big,
                  "got %d bytes, %d of them as written" % (
                      len(got), sum(1 for x, y in zip(got, big) if x == y)))
            w = wait("e7")
            eq("cat of the 2 MiB: code 0", (w.WhichOneof("exit_status"), w.code), ("code", 0))
        # A terminal: pty_info's size, typed stdin echoed, stdout only.
        r("TaskExecStart", tcr.TaskExecStartRequest(
            task_id=task, exec_id="e8", command_args=["/bin/sh", "-c",
                                                      "read x; stty size; echo got=$x; exit 5"],
            pty_info=api.PTYInfo(enabled=True, winsz_rows=33, winsz_cols=77)),
            tcr.TaskExecStartResponse)
        r("TaskExecStdinWrite", tcr.TaskExecStdinWriteRequest(
            task_id=task, exec_id="e8", offset=0, data=b"abc\r"), tcr.TaskExecStdinWriteResponse)
        eq("a terminal: its size, the typed line echoed", read("e8"),
           b"abc\r\n33 77\r\ngot=abc\r\n")
        eq("a terminal: no stderr stream of its own", read("e8", 1), b"")
        w = wait("e8")
        eq("a terminal: the code", (w.WhichOneof("exit_status"), w.code), ("code", 5))
        start("e4", "kill -9 $$")
        w = wait("e4")
        eq("TaskExecWait: the signal", (w.WhichOneof("exit_status"), w.signal), ("signal", 9))
        start("e5", "echo kept > /work/w/snap.txt")
        wait("e5")
        snap = c("SandboxSnapshotFs", api.SandboxSnapshotFsRequest(sandbox_id=sid, timeout=10),
                 api.SandboxSnapshotFsResponse)
        eq("SandboxSnapshotFs: SUCCESS", snap.result.status,
           api.GenericResult.GENERIC_STATUS_SUCCESS)

        urllib.request.urlopen(urllib.request.Request(
            "http://127.0.0.1:%s/_fake/jwt/expire" % ports["PORT"], data=b"{}", method="POST"))
        eq("an expired JWT: UNAUTHENTICATED", code_of(lambda: start("e6", "true")),
           grpc.StatusCode.UNAUTHENTICATED)
        t = c("SandboxTerminate", api.SandboxTerminateRequest(sandbox_id=sid),
              api.SandboxTerminateResponse)
        eq("SandboxTerminate: TERMINATED", t.existing_result.status,
           api.GenericResult.GENERIC_STATUS_TERMINATED)
        wr = c("SandboxWait", api.SandboxWaitRequest(sandbox_id=sid, timeout=0),
               api.SandboxWaitResponse)
        eq("SandboxWait after it: TERMINATED", wr.result.status,
           api.GenericResult.GENERIC_STATUS_TERMINATED)
        eq("an unknown sandbox: NOT_FOUND", code_of(lambda: c(
            "SandboxWait", api.SandboxWaitRequest(sandbox_id="sb-none"),
            api.SandboxWaitResponse)), grpc.StatusCode.NOT_FOUND)

        sid2 = c("SandboxCreate", api.SandboxCreateRequest(
            app_id=a1, definition=api.Sandbox(image_id=snap.image_id, timeout_secs=60)),
            api.SandboxCreateResponse).sandbox_id
        task = c("SandboxGetTaskId", api.SandboxGetTaskIdRequest(sandbox_id=sid2),
                 api.SandboxGetTaskIdResponse).task_id
        acc = c("TaskGetCommandRouterAccess", api.TaskGetCommandRouterAccessRequest(task_id=task),
                api.TaskGetCommandRouterAccessResponse)
        auth[:] = [("authorization", "Bearer " + acc.jwt)]
        start("s1", "cat /work/w/snap.txt")
        eq("a sandbox from the snapshot has its file", read("s1"), b"kept\n")
        c("SandboxTerminate", api.SandboxTerminateRequest(sandbox_id=sid2),
          api.SandboxTerminateResponse)

        urllib.request.urlopen(urllib.request.Request(
            "http://127.0.0.1:%s/_fake/faults" % ports["PORT"],
            data=b'{"path": "SandboxCreate$", "code": 8}', method="POST",
            headers={"Content-Type": "application/json"}))
        eq("a scripted fault: RESOURCE_EXHAUSTED", code_of(lambda: c(
            "SandboxCreate", api.SandboxCreateRequest(
                app_id=a1, definition=api.Sandbox(image_id=im)), api.SandboxCreateResponse)),
            grpc.StatusCode.RESOURCE_EXHAUSTED)
    finally:
        fake.send_signal(signal.SIGTERM)
        try:
            fake.wait(20)
        except subprocess.TimeoutExpired:
            fake.kill()
            fake.wait()
        out.close()
    left = [d for d in bwrap_roots() if d.startswith(tmp)]
    eq("no sandbox of the fake runs after it stopped", left, [])
    eq("no directory of the fake is left", sorted(n for n in os.listdir(tmp)
                                                   if n.startswith("sbx-fake-modal")), [])


def main():
    tmp = tempfile.mkdtemp(prefix="sbx-check-modal-")
    try:
        run(tmp)
    except Exception as e:  # noqa: BLE001 - reported as a failure
        check("the checks ran to the end", False, repr(e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("TAP version 13")
    for i, (ok, name, detail) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
        if not ok and detail:
            print("# " + detail)
    print("1..%d" % len(results))
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
