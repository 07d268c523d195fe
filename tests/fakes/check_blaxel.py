#!/usr/bin/python3
"""Drives the Blaxel contract fake (tests/fakes/blaxel.py) over HTTP and checks
the exact answers the contract gives: the three headers, the control API's
Sandbox and error shapes, the list's cursor, the data plane's process answer
and NDJSON stream, raw and JSON file reads, multipart writes with their mode,
the multipart upload with its etags, standby and wake, ttl expiry, and
delete. Prints TAP. The fake is started on an ephemeral port and stopped by
its PID; afterwards no process of it and no sandbox directory is left.

Usage: check_blaxel.py
"""

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_fakes as cf  # noqa: E402
from check_fakes import check, eq, wait_until  # noqa: E402

KEY = "bkey-789"
WS = "sbx-test-ws"
VERSION = "2026-04-28"


def main():
    f = cf.Fake("blaxel.py", KEY)
    P = "blaxel "
    H = {"X-Blaxel-Authorization": "Bearer " + KEY, "X-Blaxel-Workspace": WS,
         "Blaxel-Version": VERSION}

    def call(method, path, body=None, headers=None, raw=None, hdrs=None):
        h = dict(H if hdrs is None else hdrs)
        h.update(headers or {})
        return f.json(method, path, body, headers=h, raw=raw, auth=False)

    st, r, _ = call("GET", "/v0/sandboxes", hdrs={"X-Blaxel-Workspace": WS,
                                                  "Blaxel-Version": VERSION})
    eq(P + "no X-Blaxel-Authorization: 401", st, 401)
    st, r, _ = call("GET", "/v0/sandboxes", hdrs={"X-Blaxel-Authorization": "Bearer " + KEY,
                                                  "X-Blaxel-Workspace": "other",
                                                  "Blaxel-Version": VERSION})
    eq(P + "another workspace: 403 {error}", (st, sorted(r)), (403, ["code", "error", "message"]))
    st, r, _ = call("GET", "/v0/sandboxes", hdrs={"X-Blaxel-Authorization": "Bearer " + KEY,
                                                  "X-Blaxel-Workspace": WS})
    eq(P + "no Blaxel-Version: 400", st, 400)

    st, r, _ = call("POST", "/v0/sandboxes", {"metadata": {"name": "Bad_Name"}})
    eq(P + "a bad name: 400 with the create error shape",
       (st, r["code"], r["status_code"], r["sandbox_name"]), (400, "INVALID_NAME", 400,
                                                             "Bad_Name"))
    st, r, _ = call("POST", "/v0/sandboxes", {"metadata": {"name": "sbx-m"},
                                              "spec": {"runtime": {"memory": 1500}}})
    eq(P + "memory not a multiple of 1024: 400 INVALID_MEMORY", (st, r["code"]),
       (400, "INVALID_MEMORY"))
    body = {"metadata": {"name": "sbx-one", "labels": {"sbx_backend": "blaxel"}},
            "spec": {"runtime": {"memory": 2048, "ttl": "600s",
                                 "envs": [{"name": "FOO", "value": "bar baz"}]}}}
    st, sb, _ = call("POST", "/v0/sandboxes", body)
    eq(P + "create: the Sandbox, DEPLOYED, its data plane in metadata.url",
       (st, sb["status"], sb["state"], sb["metadata"]["url"], sb["spec"]["runtime"]["memory"],
        sb["metadata"]["labels"]),
       (200, "DEPLOYED", "RUNNING", "%s/run/%s/sandboxes/sbx-one" % (f.base, WS), 2048,
        {"sbx_backend": "blaxel"}))
    st, r, _ = call("POST", "/v0/sandboxes", body)
    eq(P + "the same name again: 409", (st, r["code"]), (409, "SANDBOX_ALREADY_EXISTS"))
    st, r, _ = call("POST", "/v0/sandboxes?createIfNotExist=true", body)
    eq(P + "createIfNotExist: the existing one", (st, r["metadata"]["name"]), (200, "sbx-one"))
    D = "/run/%s/sandboxes/sbx-one" % WS

    st, r, _ = call("POST", D + "/process", {"command": "echo $FOO; echo e >&2; exit 3",
                                             "waitForCompletion": True})
    eq(P + "process with waitForCompletion: the ProcessResponse",
       (st, r["status"], r["exitCode"], r["stdout"], r["stderr"]),
       (200, "failed", 3, "bar baz\n", "e\n"))
    st, raw, hd = f.req("POST", D + "/process", {"command": "printf a; sleep 2.5; printf b",
                                                 "waitForCompletion": True},
                        headers=dict(H, Accept="text/event-stream"), auth=False)
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    res = json.loads(lines[-1]["data"])
    eq(P + "process stream: NDJSON, output, a keepalive, the result as a string",
       (st, hd.get("Content-Type"), [x["type"] for x in lines if x["type"] != "keepalive"],
        any(x["type"] == "keepalive" for x in lines), res["exitCode"], res["stdout"]),
       (200, "application/x-ndjson", ["stdout", "stdout", "result"], True, 0, "ab"))
    st, raw, _ = f.req("POST", D + "/process", {"command": "sleep 30", "timeout": 1,
                                                "waitForCompletion": True},
                       headers=H, auth=False)
    r = json.loads(raw)
    eq(P + "process timeout: killed", (r["status"], r["exitCode"]), ("killed", 137))
    st, r, _ = call("POST", D + "/process", {"command": "pwd", "workingDir": "/nope",
                                             "waitForCompletion": True})
    eq(P + "a missing workingDir: 400 {error}", (st, "error" in r), (400, True))

    data = bytes(range(256)) * 64
    form, ctype = cf.multipart([("permissions", b"0751", None), ("file", data, "x.bin")])
    st, r, _ = call("PUT", D + "/filesystem/work/sub/x.bin", headers={"Content-Type": ctype},
                    raw=form)
    eq(P + "multipart PUT makes parents", (st, r["path"]), (200, "/work/sub/x.bin"))
    st, raw, _ = f.req("GET", D + "/filesystem/work/sub/x.bin",
                       headers=dict(H, Accept="application/octet-stream"), auth=False)
    eq(P + "raw read: every byte back", (st, raw == data), (200, True))
    st, r, _ = call("GET", D + "/filesystem/work/sub")
    eq(P + "a directory's listing with the file's mode",
       (st, [(e["name"], e["size"], e["permissions"]) for e in r["files"]], r["subdirectories"]),
       (200, [("x.bin", len(data), "751")], []))
    st, r, _ = call("GET", D + "/filesystem/work/none.txt")
    eq(P + "a missing file: 404 {error}", (st, "error" in r), (404, True))
    st, r, _ = call("PUT", D + "/filesystem/work/t.txt", {"content": "text", "permissions": "644"})
    st, r, _ = call("GET", D + "/filesystem/work/t.txt")
    eq(P + "JSON PUT and JSON read", (st, r["content"]), (200, "text"))

    big = os.urandom((5 << 20) + 1000)
    st, r, _ = call("POST", D + "/filesystem-multipart/initiate/work/big.bin",
                    {"permissions": "0600"})
    uid = r["uploadId"]
    etags = []
    for n, part in enumerate((big[:5 << 20], big[5 << 20:]), 1):
        form, ctype = cf.multipart([("file", part, "part")])
        st, r, _ = call("PUT", D + "/filesystem-multipart/%s/part?partNumber=%d" % (uid, n),
                        headers={"Content-Type": ctype}, raw=form)
        etags.append(r["etag"])
    eq(P + "parts give their MD5 as etag", etags,
       [hashlib.md5(big[:5 << 20]).hexdigest(), hashlib.md5(big[5 << 20:]).hexdigest()])
    st, r, _ = call("POST", D + "/filesystem-multipart/%s/complete" % uid,
                    {"parts": [{"partNumber": 1, "etag": etags[1]},
                               {"partNumber": 2, "etag": etags[0]}]})
    eq(P + "complete with wrong etags: 400", st, 400)
    st, r, _ = call("POST", D + "/filesystem-multipart/%s/complete" % uid,
                    {"parts": [{"partNumber": 1, "etag": etags[0]},
                               {"partNumber": 2, "etag": etags[1]}]})
    st2, raw, _ = f.req("GET", D + "/filesystem/work/big.bin",
                        headers=dict(H, Accept="application/octet-stream"), auth=False)
    eq(P + "complete: the file whole", (st, st2, raw == big), (200, 200, True))
    form, ctype = cf.multipart([("file", big, "big")])
    st, r, _ = call("PUT", D + "/filesystem/work/big2.bin", headers={"Content-Type": ctype},
                    raw=form)
    eq(P + "one PUT past 5 MB: 413", st, 413)

    st, info, _ = call("GET", "/_fake/sandbox/sbx-one")
    root = info["root"]
    call("POST", "/_fake/sandbox/sbx-one/standby")
    eq(P + "standby: state STANDBY", call("GET", "/v0/sandboxes/sbx-one")[1]["state"], "STANDBY")
    st, r, _ = call("POST", D + "/process", {"command": "cat /work/t.txt",
                                             "waitForCompletion": True})
    eq(P + "a data-plane call wakes it, files kept", (r["stdout"],
                                                      call("GET", "/_fake/sandbox/sbx-one")[1][
                                                          "wakes"]), ("text", 1))

    for i in range(3):
        call("POST", "/v0/sandboxes", {"metadata": {"name": "sbx-p%d" % i},
                                       "spec": {"runtime": {"ttl": "1s" if i == 0 else "600s"}}})
    call("POST", "/_fake/config", {"page_size": 2})
    names, cursor, pages = [], None, 0
    while True:
        st, r, _ = call("GET", "/v0/sandboxes" + ("?cursor=" + cursor if cursor else ""))
        names += [s["metadata"]["name"] for s in r["data"]]
        pages += 1
        cursor = r["meta"]["nextCursor"]
        if not cursor:
            break
    eq(P + "list: {data, meta.nextCursor} to the end", (pages, len(names)), (2, 4))
    check(P + "ttl: deleted at its age",
          wait_until(lambda: call("GET", "/v0/sandboxes/sbx-p0")[0] == 404, 5))

    st, r, _ = call("DELETE", "/v0/sandboxes/sbx-one")
    eq(P + "delete: 200 DELETING", (st, r["status"]), (200, "DELETING"))
    eq(P + "deleted: 404 on both planes", (call("GET", "/v0/sandboxes/sbx-one")[0],
                                           call("GET", D + "/filesystem/work")[0]), (404, 404))
    eq(P + "deleted: its directory is gone", os.path.exists(root), False)
    st, log, _ = f.json("GET", "/_fake/log", auth=False)
    eq(P + "the log never holds the key", any(KEY in json.dumps(e) for e in log), False)
    roots = {call("GET", "/_fake/sandbox/sbx-p%d" % i)[1]["root"] for i in (1, 2)}
    eq(P + "stopped by PID", f.stop(), 0)
    eq(P + "no sandbox process left", cf.bwrap_roots() & (roots | {root}), set())
    eq(P + "no sandbox directory left", [r for r in roots if os.path.exists(r)], [])

    print("TAP version 13")
    failed = 0
    for i, (ok, name, detail) in enumerate(cf.results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
        if not ok:
            failed += 1
            print("# " + detail)
    print("1..%d" % len(cf.results))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:  # a crash is a failure of its own, named
        print("Bail out! blaxel check crashed: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
