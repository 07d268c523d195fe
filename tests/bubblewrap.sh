#!/bin/sh
# The backend-neutral suites (conformance, cases, files, session state, the
# session surface) and the attached-sandbox tests (an application, its
# plugin host or a supervisor SIGKILLed, in both plugin modes) run again on
# the bubblewrap backend: SBX_TEST_BACKEND=bubblewrap. Their TAP
# streams are joined into one (Criterion writes unnumbered "ok -" / "not ok -"
# lines; the plan comes last, counting all of them). A suite that exits
# non-zero without reporting a failure adds a "not ok" line of its own.
#
# Runs from the build directory; writes only TAP to stdout. Exits 0 when
# every test passed, 1 otherwise.

SBX_TEST_BACKEND=bubblewrap
export SBX_TEST_BACKEND
total=0
failed=0
for prog in tests/test_conformance tests/test_cases tests/test_files tests/test_state \
            tests/test_session tests/test_attached; do
    if [ ! -x "./$prog" ]; then
        echo "Bail out! $prog not found (run from the build directory)"
        exit 99
    fi
    out=$(mktemp "${TMPDIR:-/tmp}/sbx-bwrap-tap-XXXXXX") || {
        echo "Bail out! cannot make a temporary file"
        exit 99
    }
    "./$prog" >"$out"
    status=$?
    # Criterion lists the names with "ok - SUITE::TEST"; say which program.
    sed -e '/^TAP version/d' -e '/^1\.\.[0-9]*$/d' \
        -e "s|^ok - |ok - bubblewrap ${prog#tests/} |" \
        -e "s|^not ok - |not ok - bubblewrap ${prog#tests/} |" "$out"
    n=$(grep -c '^ok - \|^not ok - ' "$out")
    bad=$(grep -c '^not ok - ' "$out")
    rm -f "$out"
    total=$((total + n))
    failed=$((failed + bad))
    if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then
        echo "not ok - bubblewrap ${prog#tests/} exited with status $status"
        total=$((total + 1))
        failed=$((failed + 1))
    fi
done
echo "1..$total"
[ "$failed" -eq 0 ]
