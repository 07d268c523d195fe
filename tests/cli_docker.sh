#!/bin/bash
# tests/cli_docker.sh — the sbx commands a docker user reaches for, on the
# docker backend against a real Docker Engine (the docker phase of
# scripts/test runs it: make check TESTS=tests/cli_docker.sh with
# SBX_DOCKER_IMAGE set): a 64-digit id shown by 12 digits in ps (in full
# with --no-trunc), prefixes and --name wherever an id goes, inspect,
# cp's missing-parent errors in both directions, "-" tar streams, and
# stop / start.
# Removes the container it made (sbx rm -f) on every exit path. TAP output.
set -u
sbx=${SBX_CLI:?}
image=${SBX_DOCKER_IMAGE:-sbx-test/debian:bookworm}
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1))
    failed=1
    echo "not ok $n - $1"
    shift
    printf '# %s\n' "$@"
}
# expect DESC WANT GOT
expect() {
    if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1" "expected: $2" "got:      $3"; fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbx-cli-docker-XXXXXX") || exit 99
export SBX_STATE_DIR=$tmp/state TMPDIR=$tmp
id=
cleanup() {
    [ -z "$id" ] || "$sbx" rm -f "$id" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

echo "1..20"
id=$("$sbx" create -b docker --image "$image" --name dk --timeout 300 2>"$tmp/err")
if ! printf '%s' "$id" | grep -Eqx '[0-9a-f]{64}'; then
    not_ok "sbx create -b docker --name dk prints a 64-digit id" "printed: $id" "$(cat "$tmp/err")"
    exit 1
fi
ok "sbx create -b docker --name dk prints a 64-digit id"
created=$(sed -n 's/.*"created":"\([^"]*\)".*/\1/p' "$SBX_STATE_DIR/sandboxes/$id.json")

expect "ps shows the id by 12 digits" \
    "$(printf 'ID            NAME  BACKEND  CREATED               STATE\n%s  dk    docker   %s  running' \
        "${id:0:12}" "$created")" "$("$sbx" ps 2>&1)"
expect "ps --no-trunc shows it in full" \
    "$(printf '%s  dk    docker   %s  running' "$id" "$created")" \
    "$("$sbx" ps --no-trunc 2>&1 | tail -n 1)"
expect "exec by a 5-digit prefix" "12" \
    "$("$sbx" exec "${id:0:5}" -- sh -c 'cut -d. -f1 /etc/debian_version' 2>&1)"
expect "exec by name" "dk" "$("$sbx" exec dk -- echo dk 2>&1)"
expect "inspect: id, backend, provider id, state" \
    "$id docker $id running" \
    "$("$sbx" inspect "${id:0:12}" | tr -d ' ",' | sed -n 's/^\(id\|backend\|provider_id\|state\):\(.*\)/\2/p' | tr '\n' ' ' | sed 's/ $//')"

echo data >"$tmp/f"
out=$("$sbx" cp "$tmp/f" dk:/nonexistent-dir/x 2>&1; echo "status $?")
expect "cp to the sandbox: a missing parent is an error naming it" \
    "$(printf 'sbx: cannot copy to /nonexistent-dir/x: its parent directory /nonexistent-dir does not exist in the sandbox\nstatus 125')" \
    "$out"
out=$("$sbx" cp dk:/etc/hostname "$tmp/nonexistent-dir/x" 2>&1; echo "status $?")
expect "cp from the sandbox: a missing parent is an error naming it" \
    "$(printf 'sbx: cannot copy to %s/nonexistent-dir/x: its parent directory %s/nonexistent-dir does not exist\nstatus 125' "$tmp" "$tmp")" \
    "$out"
[ ! -e "$tmp/nonexistent-dir" ] && [ "$("$sbx" exec dk -- sh -c 'test -e /nonexistent-dir; echo $?')" = 1 ] &&
    ok "neither missing parent was made" || not_ok "a missing parent was made"

mkdir -p "$tmp/in/sub" && echo A >"$tmp/in/a.txt" && echo B >"$tmp/in/sub/b.txt"
out=$(tar -C "$tmp/in" -cf - a.txt sub | "$sbx" cp - dk:/tmp 2>&1; echo "status $?")
expect "cp - dk:/tmp extracts a tar from stdin" "status 0" "$out"
expect "what it extracted is there" "A B" \
    "$("$sbx" exec dk -- sh -c 'cat /tmp/a.txt /tmp/sub/b.txt' | tr '\n' ' ' | sed 's/ $//')"
expect "cp dk:/tmp/sub - writes a tar named from its last component" \
    "$(printf 'sub/\nsub/b.txt')" "$("$sbx" cp dk:/tmp/sub - | tar -tf - | sort)"

# stop / start: paused, files kept, exec refused until start.
"$sbx" exec dk -- sh -c 'echo kept > /root/keep' >/dev/null 2>&1
expect "stop prints the id as given" "dk" "$("$sbx" stop dk 2>&1)"
expect "ps -a shows it stopped, ps does not list it" \
    "$(printf 'ID            NAME  BACKEND  CREATED               STATE\n%s  dk    docker   %s  stopped\n---\nID  NAME  BACKEND  CREATED               STATE' \
        "${id:0:12}" "$created")" "$("$sbx" ps -a 2>&1; echo ---; "$sbx" ps 2>&1)"
"$sbx" exec dk -- true >/dev/null 2>&1
expect "exec on the stopped sandbox fails" 125 $?
expect "start prints the id as given" "${id:0:7}" "$("$sbx" start "${id:0:7}" 2>&1)"
expect "after start: running, and its files are kept" "running kept" \
    "$("$sbx" inspect dk | sed -n 's/.*"state": "\(.*\)",/\1/p') $("$sbx" exec dk -- cat /root/keep 2>&1)"

"$sbx" rm dk >/dev/null 2>&1 && id=

# create -u: the sandbox's default user, for exec and for what cp puts in.
id=$("$sbx" create -b docker --image "$image" -u nobody --timeout 300 2>"$tmp/err")
expect "create -u nobody: exec runs as nobody" "nobody 65534" \
    "$("$sbx" exec "$id" -- sh -c 'echo "$(id -un) $(id -u)"' 2>&1)$(cat "$tmp/err")"
"$sbx" cp "$tmp/f" "$id:/tmp/f" >/dev/null 2>&1
expect "what cp put in belongs to nobody" "65534:65534" \
    "$("$sbx" exec "$id" -- stat -c %u:%g /tmp/f 2>&1)"
expect "inspect records the user" '"user": "nobody"' \
    "$("$sbx" inspect "$id" | grep -o '"user": "[^"]*"')"
"$sbx" rm "$id" >/dev/null 2>&1 && id=
exit $failed
