#!/bin/sh
# CASE-06 harness: runs the case06 tests of tests/test_cases with their
# stdin on a pipe that never closes, as under a CI runner or an agent
# harness. A command given no stdin must see EOF at once and a timeout must
# fire, whatever the caller's stdin is. Criterion gives each test process
# a stdin of its own; with SBX_TEST_STDIN_PIPE=1 the case06 tests take this
# program's stdin (the pipe below) as theirs.
#
# Runs from the build directory. The test program writes TAP to stdout
# (CRITERION_OUTPUTS=tap:/dev/stdout). Criterion lists the tests that
# --filter left out as skipped; they run in tests/test_cases itself, so the
# TAP is passed on without them (and with the plan counting only case06).
# Apart from a "Bail out!" line when the harness cannot be set up, this
# script writes nothing else to stdout. Exits with the test program's
# status.

prog=./tests/test_cases
if [ ! -x "$prog" ]; then
    echo "Bail out! $prog not found (run from the build directory)"
    exit 99
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/sbx-stdin-pipe-XXXXXX") || {
    echo "Bail out! cannot make a temporary directory"
    exit 99
}
fifo=$dir/stdin
if ! mkfifo "$fifo"; then
    rm -rf "$dir"
    echo "Bail out! cannot make a FIFO in $dir"
    exit 99
fi

# The writer holds the pipe open without ever writing or closing it. Its
# open() completes once the test program opens the other end.
sleep 1000 > "$fifo" &
writer=$!

# The library's own log (SBX_DEBUG=info) goes to stderr, into the test's
# log: a timeout that fires late shows there which step took the time.
SBX_DEBUG=${SBX_DEBUG:-info} SBX_TEST_STDIN_PIPE=1 CRITERION_OUTPUTS="tap:$dir/tap" \
    "$prog" --filter 'case06/*' < "$fifo"
status=$?

kill "$writer" 2>/dev/null
wait "$writer" 2>/dev/null

if [ -f "$dir/tap" ]; then
    # Drop the filtered-out tests (and their suites' headers), then print
    # the plan with the count of what is left.
    awk '
        /^ok - [^ ]*  # SKIP test was skipped$/ && $3 !~ /^case06::/ { next }
        /^# Running [0-9]+ tests? from / && $NF != "case06" {
            if (n && lines[n] == "#") n--
            next
        }
        /^1\.\.[0-9]+$/ { next }
        { lines[++n] = $0; if ($0 ~ /^(not )?ok /) tests++ }
        END {
            for (i = 1; i <= n; i++) {
                print lines[i]
                if (lines[i] ~ /^TAP version/) print "1.." tests + 0
            }
        }
    ' "$dir/tap"
else
    echo "Bail out! $prog wrote no TAP output"
    [ "$status" -ne 0 ] || status=99
fi
rm -rf "$dir"
exit "$status"
