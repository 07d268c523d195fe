#!/bin/sh
# The backend-neutral suites (conformance, cases, files, session state), and
# tests/test_e2b (what is E2B's own: gone, lifetime, pause), on the e2b
# backend, through the E2B contract fake (tests/fakes/e2b.py): the
# fake is started on an ephemeral 127.0.0.1 port, E2B_API_URL points at it
# for the control plane and E2B_SANDBOX_URL for envd (the sandbox is chosen
# by the E2b-Sandbox-Id header), with a dummy E2B_API_KEY, the suites run
# with SBX_TEST_BACKEND=e2b twice, with the plugin out of
# process and then with SBX_PLUGIN_MODE=inprocess (the *_slow tests only in
# the first run), and the fake is stopped by its PID. Their TAP streams are
# joined into one, as tests/bubblewrap.sh does. The local plugins of the
# build are on the plugin path too: test_files compares against them.
#
# Runs from the build directory; writes only TAP to stdout. Exits 0 when
# every test passed, 1 otherwise. SBX_CLOUD_SUITES overrides the programs.

backend=e2b
fake="${SBX_TEST_SRCDIR:-$(dirname "$0")}/fakes/e2b.py"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
dir=$(mktemp -d "${TMPDIR:-/tmp}/sbx-$backend-XXXXXX") || { echo "Bail out! mktemp"; exit 99; }
SBX_FAKE_API_KEY=sbx-test-dummy-key "$py" "$fake" >"$dir/port" 2>"$dir/fake.log" &
fake_pid=$!
stop_fake() {
    kill "$fake_pid" 2>/dev/null
    wait "$fake_pid" 2>/dev/null
    rm -rf "$dir"
}
trap stop_fake EXIT
trap 'exit 1' INT TERM
i=0
while ! grep -q '^PORT ' "$dir/port" 2>/dev/null; do
    i=$((i + 1))
    if [ "$i" -gt 200 ] || ! kill -0 "$fake_pid" 2>/dev/null; then
        echo "Bail out! the $backend fake did not start: $(cat "$dir/fake.log")"
        exit 99
    fi
    sleep 0.05
done
port=$(sed -n 's/^PORT //p' "$dir/port")
E2B_API_URL="http://127.0.0.1:$port"
E2B_SANDBOX_URL="http://127.0.0.1:$port"
E2B_API_KEY=sbx-test-dummy-key
SBX_TEST_BACKEND=$backend
SBX_PLUGIN_PATH="$PWD/plugins/cloud/$backend/.libs:$PWD/plugins/local/.libs:$PWD/tests/plugins/.libs${SBX_PLUGIN_PATH:+:$SBX_PLUGIN_PATH}"
export E2B_API_URL E2B_SANDBOX_URL E2B_API_KEY SBX_TEST_BACKEND SBX_PLUGIN_PATH
unset E2B_DOMAIN E2B_DEBUG SBX_PLUGIN_MODE

total=0
failed=0
# run_suites LABEL [criterion arguments]
run_suites() {
    label=$1
    shift
    for prog in ${SBX_CLOUD_SUITES:-tests/test_conformance tests/test_cases tests/test_files tests/test_state tests/test_e2b}; do
        if [ ! -x "./$prog" ]; then
            echo "Bail out! $prog not found (run from the build directory)"
            exit 99
        fi
        out="$dir/tap"
        "./$prog" "$@" >"$out"
        status=$?
        sed -e '/^TAP version/d' -e '/^1\.\.[0-9]*$/d' \
            -e "s|^ok - |ok - $label ${prog#tests/} |" \
            -e "s|^not ok - |not ok - $label ${prog#tests/} |" "$out"
        n=$(grep -c '^ok - \|^not ok - ' "$out")
        bad=$(grep -c '^not ok - ' "$out")
        total=$((total + n))
        failed=$((failed + bad))
        if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then
            echo "not ok - $label ${prog#tests/} exited with status $status"
            total=$((total + 1))
            failed=$((failed + 1))
        fi
    done
}
run_suites "$backend"
SBX_PLUGIN_MODE=inprocess
export SBX_PLUGIN_MODE
run_suites "$backend-inprocess" --filter='*/!(*_slow)'
echo "1..$total"
[ "$failed" -eq 0 ]
