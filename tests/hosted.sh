#!/bin/sh
# tests/hosted.sh BACKEND: the backend-neutral suites (conformance, cases,
# session state), then tests/test_BACKEND for what only that backend does, on
# a hosted backend through its contract fake (tests/fakes/BACKEND.py). The
# fake is started on an ephemeral 127.0.0.1 port with a dummy key, the
# backend's URL variables point at it, the suites run with
# SBX_TEST_BACKEND=BACKEND in each plugin mode, and the fake is stopped by its
# PID. Their TAP streams are joined into one, as tests/bubblewrap.sh does;
# each test's name carries the backend, the mode and the program. One wrapper
# per backend (tests/daytona.sh, tests/e2b.sh, tests/tensorlake.sh,
# tests/blaxel.sh, tests/runloop.sh, tests/vercel.sh, tests/cloudflare.sh,
# tests/modal.sh, tests/ray.sh, tests/runpod.sh, tests/remote.sh,
# tests/kubernetes.sh) is what TESTS runs. For remote the server is no fake but the build's
# sbx-server, over its local backend, reached with a product key of an
# organization made at start; its store is SQLite, or PostgreSQL when
# SBX_TEST_CP_PG_URL names a server (a database of its own made there;
# tests/test_remote alone then, see the suites below).
#
# Modes: SBX_CLOUD_MODES, "outofprocess inprocess" by default. When both run,
# the slow cases (*_slow) run only out of process; scripts/test runs
# "outofprocess" in build/ci and "inprocess" in build/asan, so each case runs
# once per build; a CRITERION_TEST_PATTERN of the caller's chooses alone, in
# both modes. The backend's own tests script the one fake, so they run one at
# a time (CRITERION_JOBS=1).
#
# tests/test_files is not among the suites: it never takes SBX_TEST_BACKEND
# (it runs in TESTS already); a backend's file behaviour is in the
# conformance suite and the cases. The fakes' sandboxes are real processes of
# this host, so SBX_TEST_SANDBOX_PROCS_ON_HOST=1 lets the suites look for what
# a sandbox left behind. The build's local plugins are on the plugin path
# too, for the suites that compare against them.
#
# Runs from the build directory; writes only TAP to stdout. Exits 0 when
# every test passed, 1 otherwise, 99 when the fake could not start.
# SBX_CLOUD_SUITES overrides the programs.
#
# Terminals: on the backends whose plugin declares SBX_CAP_PTY (the
# provider runs commands on a terminal), the terminal tests run too: tests/test_process (its tty
# suite: isatty, the size at the start, a resize with SIGWINCH, echo of
# typed input, ^C, hang-up, ^D, the exit code; and the process handle
# without a terminal, whose stdin tests check SBX_CAP_EXEC_STDIN_STREAM
# themselves) and tests/test_tty (`sbx run -it` and `sbx exec -it`
# under a real terminal).

backend=$1
here=${SBX_TEST_SRCDIR:-$(dirname "$0")}
fake="$here/fakes/$backend.py"
case $backend in
daytona | e2b | tensorlake | blaxel | runloop | vercel | cloudflare | modal | ray | runpod | remote | kubernetes) ;;
*) echo "Bail out! hosted.sh: unknown backend '$backend' (daytona, e2b, tensorlake, blaxel, runloop, vercel, cloudflare, modal, ray, runpod, remote, kubernetes)"; exit 99 ;;
esac
py=/usr/bin/python3
[ -x "$py" ] || py=python3
dir=$(mktemp -d "${TMPDIR:-/tmp}/sbx-$backend-XXXXXX") || { echo "Bail out! mktemp"; exit 99; }
if [ "$backend" = kubernetes ]; then
    # The API server fake speaks TLS: a throwaway CA, the server's
    # certificate (127.0.0.1 and localhost) and a client certificate
    # (mutual TLS, as a kubeconfig's user has it), made in the run's
    # directory and removed with it.
    tls_fail() { echo "Bail out! openssl failed: $(cat "$dir/openssl.log")"; rm -rf "$dir"; exit 99; }
    (
        cd "$dir" || exit 1
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout ca.key -out ca.crt -days 1 -subj /CN=sbx-test-ca &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout server.key -out server.csr -subj /CN=kube-apiserver &&
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out server.crt -days 1 -extfile server.ext &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout client.key -out client.csr -subj "/O=system:masters/CN=sbx-test" &&
        openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out client.crt -days 1 -extfile client.ext
    ) >"$dir/openssl.log" 2>&1 || tls_fail
    SBX_FAKE_TLS_CERT=$dir/server.crt SBX_FAKE_TLS_KEY=$dir/server.key SBX_FAKE_TLS_CA=$dir/ca.crt
    export SBX_FAKE_TLS_CERT SBX_FAKE_TLS_KEY SBX_FAKE_TLS_CA
fi
upstream_pid=
if [ "$backend" = remote ]; then
    # Not a fake: the real control plane (server/sbx-server of this build)
    # on an ephemeral port, SQLite in the run's directory, running its
    # sandboxes on the build's local backend. For tests/test_remote's
    # provider failures it also enables docker, which has no engine here
    # (502 with the provider's connection payload), and e2b, pointed at
    # its contract fake answering every create 504 (the provider's timeout
    # payload).
    [ -x "$PWD/server/sbx-server" ] ||
        { echo "Bail out! server/sbx-server not found (run from the build directory)"; exit 99; }
    SBX_FAKE_API_KEY=sbx-test-dummy-key SBX_FAKE_FAULTS='[{"method":"POST","path":"^/sandboxes$","status":504,"times":-1,"body":{"message":"upstream timed out"}}]' \
        "$py" "$here/fakes/e2b.py" >"$dir/e2b-port" 2>"$dir/e2b.log" &
    upstream_pid=$!
    i=0
    while ! grep -q '^PORT ' "$dir/e2b-port" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 200 ] || ! kill -0 "$upstream_pid" 2>/dev/null; then
            echo "Bail out! the e2b fake did not start: $(cat "$dir/e2b.log")"
            kill "$upstream_pid" 2>/dev/null
            rm -rf "$dir"
            exit 99
        fi
        sleep 0.05
    done
    e2b_url="http://127.0.0.1:$(sed -n 's/^PORT //p' "$dir/e2b-port")"
    # The store: SQLite in the run's directory; with SBX_TEST_CP_PG_URL (a
    # PostgreSQL server, as scripts/test's pg_phase starts one) a database
    # of its own there, made now and dropped with the run's directory.
    cp_db="$dir/cp.db"
    if [ -n "${SBX_TEST_CP_PG_URL:-}" ]; then
        pg_db=sbxremote_$$_$(date +%s)
        if ! psql -X -q -v ON_ERROR_STOP=1 "$SBX_TEST_CP_PG_URL" \
                -c "CREATE DATABASE $pg_db" >"$dir/psql.log" 2>&1; then
            echo "Bail out! cannot make a PostgreSQL database: $(cat "$dir/psql.log")"
            pg_db=
            kill "$upstream_pid" 2>/dev/null
            rm -rf "$dir"
            exit 99
        fi
        # The URL with its database replaced (its query kept).
        cp_db=$(printf '%s' "$SBX_TEST_CP_PG_URL" |
                    sed -E "s#^([A-Za-z]+://[^/?]*)(/[^?]*)?#\1/$pg_db#")
    fi
    SBX_TEST_CP_ADMIN_TOKEN=sbx-test-admin-$$
    env BESPOKE_API_KEY_PEPPER=sbx-test-pepper-$$ \
        BESPOKE_CONTROL_PLANE_ADMIN_TOKEN=$SBX_TEST_CP_ADMIN_TOKEN \
        BESPOKE_CONTROL_PLANE_DB="$cp_db" BESPOKE_ALLOWED_BACKENDS=local,docker,e2b \
        DOCKER_HOST="unix://$dir/no-docker.sock" HOST=127.0.0.1 PORT=0 \
        E2B_API_URL="$e2b_url" E2B_SANDBOX_URL="$e2b_url" E2B_API_KEY=sbx-test-dummy-key \
        SBX_PLUGIN_PATH="$PWD/plugins/local/.libs:$PWD/plugins/docker/.libs:$PWD/plugins/cloud/e2b/.libs" \
        "$PWD/server/sbx-server" >"$dir/port" 2>"$dir/fake.log" &
else
    SBX_FAKE_API_KEY=sbx-test-dummy-key "$py" "$fake" >"$dir/port" 2>"$dir/fake.log" &
fi
fake_pid=$!
stop_fake() {
    # The control plane's sandboxes outlive it: any a test left (one that
    # crashed before its teardown) is terminated first.
    if [ "$backend" = remote ] && [ -n "${BESPOKE_SANDBOX_KEY:-}" ] && kill -0 "$fake_pid" 2>/dev/null; then
        "$py" -c '
import json, sys, urllib.request
url, key = sys.argv[1], sys.argv[2]
h = {"Authorization": "Bearer " + key}
rq = urllib.request.Request(url + "/v1/sandboxes", headers=h)
for sb in json.load(urllib.request.urlopen(rq, timeout=30)):
    if sb["status"] not in ("destroyed", "failed"):
        try:
            urllib.request.urlopen(urllib.request.Request(url + "/v1/sandboxes/" + sb["id"],
                                   method="DELETE", headers=h), timeout=60)
        except Exception as e:
            print("# left sandbox %s: %s" % (sb["id"], e))' "$url" "$BESPOKE_SANDBOX_KEY"
    fi
    # A fake that ended before the suites did is said (its status and the
    # end of its log) as TAP comments: the failures above came from it.
    if ! kill -0 "$fake_pid" 2>/dev/null; then
        wait "$fake_pid"
        echo "# the $backend fake ended early with status $?; the end of its log:"
        tail -n 20 "$dir/fake.log" 2>/dev/null | sed 's/^/#   /'
    fi
    kill "$fake_pid" 2>/dev/null
    wait "$fake_pid" 2>/dev/null
    # When a test failed, the fake's own tracebacks (a handler that raised
    # closes its connection unanswered) go with the failures, as TAP
    # comments.
    if [ "${failed:-0}" -ne 0 ] && grep -q '^Traceback' "$dir/fake.log" 2>/dev/null; then
        echo "# tracebacks in the $backend fake's log (at most 120 lines):"
        awk '/^Traceback/ { on = 1 } on { print } /^[A-Za-z_.]*(Error|Exception)/ { on = 0 }' \
            "$dir/fake.log" | head -n 120 | sed 's/^/#   /'
    fi
    if [ -n "$upstream_pid" ]; then
        kill "$upstream_pid" 2>/dev/null
        wait "$upstream_pid" 2>/dev/null
    fi
    if [ -n "${pg_db:-}" ]; then
        psql -X -q "$SBX_TEST_CP_PG_URL" -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" \
            >/dev/null 2>&1 || echo "# the PostgreSQL database $pg_db was not dropped"
    fi
    rm -rf "$dir"
}
trap stop_fake EXIT
trap 'exit 1' INT TERM
i=0
port_line='^PORT '
[ "$backend" = remote ] && port_line='^listening on http://127.0.0.1:'
while ! grep -q "$port_line" "$dir/port" 2>/dev/null; do
    i=$((i + 1))
    if [ "$i" -gt 200 ] || ! kill -0 "$fake_pid" 2>/dev/null; then
        echo "Bail out! the $backend fake did not start: $(cat "$dir/fake.log")"
        exit 99
    fi
    sleep 0.05
done
if [ "$backend" = remote ]; then
    url=$(sed -n 's|^listening on \(http://127.0.0.1:[0-9]*\)$|\1|p' "$dir/port")
else
    url="http://127.0.0.1:$(sed -n 's/^PORT //p' "$dir/port")"
fi

# The provider's own variables (the contracts name them): where it is, the
# dummy key, and nothing from the caller's environment that would send the
# plugin elsewhere.
case $backend in
daytona)
    DAYTONA_API_URL="$url/api" DAYTONA_API_KEY=sbx-test-dummy-key
    export DAYTONA_API_URL DAYTONA_API_KEY
    unset DAYTONA_JWT_TOKEN DAYTONA_TARGET DAYTONA_ORGANIZATION_ID ;;
e2b)
    # envd is reached on the same port; the sandbox is chosen by the
    # E2b-Sandbox-Id header.
    E2B_API_URL=$url E2B_SANDBOX_URL=$url E2B_API_KEY=sbx-test-dummy-key
    export E2B_API_URL E2B_SANDBOX_URL E2B_API_KEY
    unset E2B_DOMAIN E2B_DEBUG E2B_ACCESS_TOKEN ;;
tensorlake)
    TENSORLAKE_API_URL=$url TENSORLAKE_API_KEY=sbx-test-dummy-key
    export TENSORLAKE_API_URL TENSORLAKE_API_KEY
    unset TENSORLAKE_SANDBOX_PROXY_URL ;;
blaxel)
    # Each sandbox's data plane is on the same port (its metadata.url).
    BL_API_URL=$url/v0 BL_RUN_URL=$url/run BL_API_KEY=sbx-test-dummy-key
    BL_WORKSPACE=sbx-test-ws
    export BL_API_URL BL_RUN_URL BL_API_KEY BL_WORKSPACE
    unset BL_REGION ;;
runloop)
    RUNLOOP_BASE_URL=$url RUNLOOP_API_KEY=sbx-test-dummy-key
    export RUNLOOP_BASE_URL RUNLOOP_API_KEY ;;
cloudflare)
    # The Sandbox Bridge worker the user deploys; the fake plays it.
    CLOUDFLARE_SANDBOX_WORKER_URL=$url CLOUDFLARE_SANDBOX_API_KEY=sbx-test-dummy-key
    # Snapshots are kept on this side: in the run's directory, removed
    # with it.
    SBX_CLOUDFLARE_SNAPSHOT_DIR="$dir/snapshots"
    export CLOUDFLARE_SANDBOX_WORKER_URL CLOUDFLARE_SANDBOX_API_KEY SBX_CLOUDFLARE_SNAPSHOT_DIR ;;
modal)
    # gRPC, not HTTP: the fake's control service on the port it printed as
    # "GRPC <n>" (h2c); its test routes (log, faults) stay on $url. No
    # ~/.modal.toml of the caller's is read.
    MODAL_SERVER_URL="http://127.0.0.1:$(sed -n 's/^GRPC //p' "$dir/port")"
    MODAL_TOKEN_ID=ak-sbx-test MODAL_TOKEN_SECRET=sbx-test-dummy-key
    MODAL_CONFIG_PATH="$dir/no-modal.toml" SBX_MODAL_FAKE_URL=$url
    # The command router's own port, for a test that puts a proxy before it;
    # the TLS ports of both services, for the tests of connection re-use.
    SBX_MODAL_ROUTER_PORT=$(sed -n 's/^ROUTER //p' "$dir/port")
    SBX_MODAL_GRPCS_PORT=$(sed -n 's/^GRPCS //p' "$dir/port")
    SBX_MODAL_ROUTERS_PORT=$(sed -n 's/^ROUTERS //p' "$dir/port")
    export MODAL_SERVER_URL MODAL_TOKEN_ID MODAL_TOKEN_SECRET MODAL_CONFIG_PATH SBX_MODAL_FAKE_URL \
        SBX_MODAL_ROUTER_PORT SBX_MODAL_GRPCS_PORT SBX_MODAL_ROUTERS_PORT
    unset MODAL_ENVIRONMENT MODAL_PROFILE ;;
vercel)
    VERCEL_API_URL=$url VERCEL_TOKEN=sbx-test-dummy-key
    VERCEL_TEAM_ID=team_fake VERCEL_PROJECT_ID=prj_fake
    export VERCEL_API_URL VERCEL_TOKEN VERCEL_TEAM_ID VERCEL_PROJECT_ID
    unset VERCEL_OIDC_TOKEN ;;
ray)
    # The fake cluster runs with RAY_AUTH_MODE=token, the dummy key its
    # token.
    RAY_ADDRESS=$url RAY_AUTH_TOKEN=sbx-test-dummy-key
    export RAY_ADDRESS RAY_AUTH_TOKEN
    unset RAY_AUTH_TOKEN_PATH ;;
kubernetes)
    # A kubeconfig whose current context reaches the fake over TLS with
    # the client certificate (no token); tests/test_kubernetes writes
    # others (bearer tokens, bad values) of its own. SBX_K8S_TEST_DIR
    # holds the CA and the certificates for them.
    b64() { base64 -w0 <"$1"; }
    url="https://127.0.0.1:$(sed -n 's/^PORT //p' "$dir/port")"
    {
        echo "apiVersion: v1"
        echo "kind: Config"
        echo "current-context: fake"
        echo "clusters:"
        echo "- name: fake"
        echo "  cluster:"
        echo "    server: $url"
        echo "    certificate-authority-data: $(b64 "$dir/ca.crt")"
        echo "users:"
        echo "- name: sbx-test"
        echo "  user:"
        echo "    client-certificate-data: $(b64 "$dir/client.crt")"
        echo "    client-key-data: $(b64 "$dir/client.key")"
        echo "contexts:"
        echo "- name: fake"
        echo "  context:"
        echo "    cluster: fake"
        echo "    user: sbx-test"
        echo "    namespace: sbx-test"
    } >"$dir/kubeconfig"
    # The fake's routes without TLS (control and API, bearer key).
    SBX_K8S_FAKE_CONTROL_URL="http://127.0.0.1:$(sed -n 's/^CONTROL //p' "$dir/port")"
    KUBECONFIG=$dir/kubeconfig SBX_K8S_FAKE_URL=$url SBX_K8S_TEST_DIR=$dir
    export KUBECONFIG SBX_K8S_FAKE_URL SBX_K8S_TEST_DIR SBX_K8S_FAKE_CONTROL_URL
    unset KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT ;;
remote)
    # An organization made with the admin token; its first key (every
    # scope) is the suites'. The tests make more (scopes, other
    # organizations) with the admin token.
    BESPOKE_SANDBOX_KEY=$("$py" -c '
import json, sys, urllib.request
rq = urllib.request.Request(sys.argv[1] + "/v1/organizations", method="POST",
                            data=b"{\"name\":\"sbx-test\"}",
                            headers={"X-Control-Plane-Admin": sys.argv[2],
                                     "Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(rq, timeout=30))["api_key"]["secret"])' \
        "$url" "$SBX_TEST_CP_ADMIN_TOKEN") ||
        { echo "Bail out! the control plane did not make an organization"; exit 99; }
    BESPOKE_SANDBOX_URL=$url BESPOKE_SANDBOX_BACKEND=local
    # The server's store (its SQLite file or its PostgreSQL URL):
    # tests/test_remote makes the server fail one statement there (a
    # trigger) for its 500 answers.
    SBX_TEST_CP_DB=$cp_db
    export BESPOKE_SANDBOX_URL BESPOKE_SANDBOX_KEY BESPOKE_SANDBOX_BACKEND SBX_TEST_CP_ADMIN_TOKEN \
        SBX_TEST_CP_DB ;;
runpod)
    # The fake's pods are OpenSSH servers on 127.0.0.1 that trust the
    # PUBLIC_KEY of their env: a throwaway client key in the run's
    # directory (removed with it), and a default GPU type for the suites'
    # creates, which name none.
    ssh-keygen -q -t ed25519 -N '' -C sbx-test -f "$dir/id_ed25519" </dev/null ||
        { echo "Bail out! ssh-keygen failed"; exit 99; }
    RUNPOD_API_BASE_URL=$url RUNPOD_API_KEY=sbx-test-dummy-key
    SBX_RUNPOD_SSH_KEY="$dir/id_ed25519" SBX_RUNPOD_GPU="NVIDIA GeForce RTX 4090"
    export RUNPOD_API_BASE_URL RUNPOD_API_KEY SBX_RUNPOD_SSH_KEY SBX_RUNPOD_GPU ;;
esac
SBX_TEST_BACKEND=$backend
SBX_TEST_SANDBOX_PROCS_ON_HOST=1
plugin_dir=$PWD/plugins/cloud/$backend/.libs
[ "$backend" = ray ] && plugin_dir=$PWD/plugins/ray/.libs
[ "$backend" = runpod ] && plugin_dir=$PWD/plugins/runpod/.libs
[ "$backend" = remote ] && plugin_dir=$PWD/plugins/remote/.libs
SBX_PLUGIN_PATH="$plugin_dir:$PWD/plugins/local/.libs:$PWD/tests/plugins/.libs${SBX_PLUGIN_PATH:+:$SBX_PLUGIN_PATH}"
export SBX_TEST_BACKEND SBX_TEST_SANDBOX_PROCS_ON_HOST SBX_PLUGIN_PATH

# The terminal tests where the plugin declares the pty capability (`sbx
# backends`; daytona and cloudflare have it when the build has the base's
# WebSocket client).
terminal=
if "${SBX_CLI:-./cli/sbx}" backends 2>/dev/null | awk -v b="$backend" '
        $1 == b { on = 1; next } /^[^ ]/ { on = 0 }
        on && $1 == "declared:" { for (i = 2; i <= NF; i++) if ($i == "pty") found = 1 }
        END { exit !found }'; then
    terminal="tests/test_process tests/test_tty"
fi

modes=${SBX_CLOUD_MODES:-outofprocess inprocess}
total=0
failed=0
for mode in $modes; do
    SBX_PLUGIN_MODE=$mode
    export SBX_PLUGIN_MODE
    filter=
    case " $modes " in
    *" outofprocess "*)
        [ "$mode" = outofprocess ] || [ -n "${CRITERION_TEST_PATTERN:-}" ] ||
            filter='--filter=*/!(*_slow)' ;;
    esac
    suites="tests/test_conformance tests/test_cases tests/test_state tests/test_$backend $terminal"
    # On PostgreSQL the remote backend runs tests/test_remote alone: what
    # the store decides (the idempotency reservation and the create's
    # record, the execution's claim and its replays, a failed execute's
    # stored payload, the records list_owned and gc read, a store that
    # fails a statement) is what that program drives through the server,
    # and tests/test_server runs whole on both stores. The backend-neutral
    # suites drive the same few statements (a create, executes, a
    # terminate) through the same code; what they add is the plugin's and
    # the sandbox's behaviour, which does not depend on the store, so
    # running them twice would double the time for nothing.
    [ "$backend" = remote ] && [ -n "${SBX_TEST_CP_PG_URL:-}" ] && suites=tests/test_remote
    for prog in ${SBX_CLOUD_SUITES:-$suites}; do
        if [ ! -x "./$prog" ]; then
            echo "Bail out! $prog not found (run from the build directory)"
            exit 99
        fi
        out="$dir/tap"
        case $backend:$prog in
        *:tests/test_$backend) CRITERION_JOBS=1 "./$prog" $filter >"$out" ;;
        # The sandboxes of one Ray cluster share its node's process table:
        # the cases that count a command's processes with ps run one at a
        # time.
        ray:tests/test_cases) CRITERION_JOBS=1 "./$prog" $filter >"$out" ;;
        *) "./$prog" $filter >"$out" ;;
        esac
        status=$?
        name="$backend $mode ${prog#tests/}"
        sed -e '/^TAP version/d' -e '/^1\.\.[0-9]*$/d' \
            -e "s|^ok - |ok - $name |" \
            -e "s|^not ok - |not ok - $name |" "$out"
        n=$(grep -c '^ok - \|^not ok - ' "$out")
        bad=$(grep -c '^not ok - ' "$out")
        total=$((total + n))
        failed=$((failed + bad))
        if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then
            echo "not ok - $name exited with status $status"
            total=$((total + 1))
            failed=$((failed + 1))
        fi
    done
done
echo "1..$total"
[ "$failed" -eq 0 ]
