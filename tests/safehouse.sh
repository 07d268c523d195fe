#!/bin/sh
# The backend-neutral suites (conformance, cases, files, session state) on
# the safehouse backend, with a stand-in for the safehouse CLI (macOS only):
# a script that checks and records its arguments (--workdir=$SANDBOX_ROOT
# --env -- COMMAND...) and runs the command. Their TAP streams are joined
# into one; then two checks of the stand-in's record: every command went
# through it, always with the sandbox root as workdir.
#
# Runs from the build directory; writes only TAP to stdout. Exits 0 when
# every test passed, 1 otherwise.

dir=$(mktemp -d "${TMPDIR:-/tmp}/sbx-safehouse-cli-XXXXXX") || {
    echo "Bail out! cannot make a temporary directory"
    exit 99
}
trap 'rm -rf "$dir"' EXIT
log=$dir/calls
cat >"$dir/safehouse" <<EOS
#!/bin/sh
# Stand-in for the safehouse CLI: records and checks its arguments.
# One line per call, written at once (a script's newlines become spaces).
line=\$(printf '%s' "\$*" | tr '\n' ' ')
printf '%s\n' "\$line" >> '$log'
case "\$1" in
--workdir=*) wd=\${1#--workdir=} ;;
*) echo "safehouse stand-in: expected --workdir=DIR, got \$1" >&2; exit 125 ;;
esac
if [ "\$wd" != "\$SANDBOX_ROOT" ] || [ "\$2" != "--env" ] || [ "\$3" != "--" ]; then
    echo "safehouse stand-in: bad arguments: \$*" >&2
    exit 125
fi
shift 3
exec "\$@"
EOS
chmod 755 "$dir/safehouse"
SBX_SAFEHOUSE=$dir/safehouse
SBX_TEST_BACKEND=safehouse
export SBX_SAFEHOUSE SBX_TEST_BACKEND
total=0
failed=0
for prog in tests/test_conformance tests/test_cases tests/test_files tests/test_state; do
    if [ ! -x "./$prog" ]; then
        echo "Bail out! $prog not found (run from the build directory)"
        exit 99
    fi
    out=$dir/tap
    "./$prog" >"$out"
    status=$?
    sed -e '/^TAP version/d' -e '/^1\.\.[0-9]*$/d' \
        -e "s|^ok - |ok - safehouse ${prog#tests/} |" \
        -e "s|^not ok - |not ok - safehouse ${prog#tests/} |" "$out"
    n=$(grep -c '^ok - \|^not ok - ' "$out")
    bad=$(grep -c '^not ok - ' "$out")
    total=$((total + n))
    failed=$((failed + bad))
    if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then
        echo "not ok - safehouse ${prog#tests/} exited with status $status"
        total=$((total + 1))
        failed=$((failed + 1))
    fi
done
calls=$(wc -l <"$log" 2>/dev/null || echo 0)
total=$((total + 2))
if [ "$calls" -ge 100 ]; then
    echo "ok - safehouse: commands went through the CLI ($calls calls)"
else
    echo "not ok - safehouse: only $calls commands went through the CLI"
    failed=$((failed + 1))
fi
if [ "$(grep -c '^--workdir=/[^ ]* --env -- ' "$log")" -eq "$calls" ]; then
    echo "ok - safehouse: every call was --workdir=ROOT --env -- COMMAND"
else
    echo "not ok - safehouse: calls without --workdir=ROOT --env --:"
    grep -v '^--workdir=/[^ ]* --env -- ' "$log" | head -5 | sed 's/^/# /'
    failed=$((failed + 1))
fi
echo "1..$total"
[ "$failed" -eq 0 ]
