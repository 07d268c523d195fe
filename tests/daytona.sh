#!/bin/sh
# The backend-neutral suites (conformance, cases, session state), then the
# daytona backend's own fault tests (tests/test_daytona), on the daytona
# backend through the Daytona contract fake (tests/fakes/daytona.py),
# in both plugin modes: out of process (the default) and in process
# (SBX_PLUGIN_MODE=inprocess). The fake is started on an ephemeral 127.0.0.1
# port, DAYTONA_API_URL points at it with a dummy DAYTONA_API_KEY, the suites
# run with SBX_TEST_BACKEND=daytona, and the fake is stopped by its PID. Their
# TAP streams are joined into one, as tests/bubblewrap.sh does; each test's
# name carries the backend, the mode and the program.
#
# tests/test_files is not among them: it never takes SBX_TEST_BACKEND (its
# suites use local backends only, and run in TESTS already); the file
# behaviour of a backend is in the conformance suite and the cases.
#
# The fake's sandboxes are real processes of this host, so
# SBX_TEST_SANDBOX_PROCS_ON_HOST=1 lets nothing_left_behind look for them.
#
# Runs from the build directory; writes only TAP to stdout. Exits 0 when
# every test passed, 1 otherwise. SBX_CLOUD_SUITES overrides the programs,
# SBX_CLOUD_MODES the modes ("outofprocess inprocess").

backend=daytona
fake="${SBX_TEST_SRCDIR:-$(dirname "$0")}/fakes/daytona.py"
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
DAYTONA_API_URL="http://127.0.0.1:$port/api"
DAYTONA_API_KEY=sbx-test-dummy-key
SBX_TEST_BACKEND=$backend
SBX_TEST_SANDBOX_PROCS_ON_HOST=1
SBX_PLUGIN_PATH="$PWD/plugins/cloud/$backend/.libs${SBX_PLUGIN_PATH:+:$SBX_PLUGIN_PATH}"
export DAYTONA_API_URL DAYTONA_API_KEY SBX_TEST_BACKEND SBX_TEST_SANDBOX_PROCS_ON_HOST \
    SBX_PLUGIN_PATH
unset DAYTONA_JWT_TOKEN DAYTONA_TARGET DAYTONA_ORGANIZATION_ID

total=0
failed=0
for mode in ${SBX_CLOUD_MODES:-outofprocess inprocess}; do
    SBX_PLUGIN_MODE=$mode
    export SBX_PLUGIN_MODE
    for prog in ${SBX_CLOUD_SUITES:-tests/test_conformance tests/test_cases tests/test_state tests/test_daytona}; do
        if [ ! -x "./$prog" ]; then
            echo "Bail out! $prog not found (run from the build directory)"
            exit 99
        fi
        out="$dir/tap"
        # The fault tests script the one fake, so they run one at a time.
        case $prog in
        tests/test_daytona) CRITERION_JOBS=1 "./$prog" >"$out" ;;
        *) "./$prog" >"$out" ;;
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
