#!/bin/bash
# tests/cli_docs.sh — the man page sbx(1) and the bash completion.
#
#  1. `man -l doc/sbx.1` renders it without a warning (groff's warnings on).
#  2. Every command of sbx's command table (the list `sbx --help` prints)
#     has a section ".SS \"sbx COMMAND ...\"" in the man page, and the page
#     has no section for a command sbx does not have.
#  3-20. The completion, sourced in bash, completes what a user types:
#     commands, options, backends, presets, ids and names of recorded
#     sandboxes (from a state store the test writes).
#  21. The README's example of sandboxes that outlive sbx runs as written
#     on the local backend, and leaves nothing behind.
#  22. `sbx --help` and each `sbx COMMAND --help` fit 80 columns (a path
#     the help names, which depends on the installation, counts as 5).
#
# Runs from the build directory with SBX_CLI and SBX_TEST_SRCDIR set (make
# check). TAP output.
set -u
top=${SBX_TEST_SRCDIR:?}/..
sbx=${SBX_CLI:?}
page=$top/doc/sbx.1
completion=$top/completions/sbx
n=0
failed=0

ok() {
    n=$((n + 1))
    echo "ok $n - $1"
}

not_ok() {
    n=$((n + 1))
    failed=1
    echo "not ok $n - $1"
    shift
    printf '# %s\n' "$@"
}

echo "1..22"

# 1. Renders without warnings.
warnings=$(MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings=all -l "$page" 2>&1 >/dev/null)
rendered=$(MANWIDTH=80 LC_ALL=C.UTF-8 man -l "$page" 2>/dev/null | wc -l)
if [ -z "$warnings" ] && [ "$rendered" -gt 100 ]; then
    ok "man -l renders doc/sbx.1 without warnings ($rendered lines)"
else
    not_ok "man -l doc/sbx.1: $rendered lines, warnings:" "$warnings"
fi

# 2. One section per command of the command table, no other.
commands=$("$sbx" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\).*/\1/p')
sections=$(sed -n 's/^\.SS "sbx \([a-z][a-z\\-]*\).*/\1/p' "$page" | sed 's/\\-/-/g')
if [ -n "$commands" ] && [ "$(sort <<<"$commands")" = "$(sort <<<"$sections")" ]; then
    ok "each of the $(wc -l <<<"$commands") commands has a section in sbx(1)"
else
    not_ok "commands and man page sections differ (< commands, > sections):" \
        "$(diff <(sort <<<"$commands") <(sort <<<"$sections"))"
fi

# The completion, against a state store with two recorded sandboxes.
state=$(mktemp -d "${TMPDIR:-/tmp}/sbx-cli-docs-XXXXXX") || exit 99
trap 'rm -rf "$state"' EXIT
mkdir -m 0700 "$state/sandboxes"
printf '{"created":"2026-01-01T00:00:00Z","state":{"backend":"local"},"name":"web"}\n' \
    >"$state/sandboxes/sbx-local-AAAAAA.json"
printf '{"created":"2026-01-01T00:00:01Z","state":{"backend":"local"}}\n' \
    >"$state/sandboxes/sbx-local-BBBBBB.json"
export SBX_STATE_DIR=$state
# The build's own plugins only (make check adds the broken test plugins).
SBX_PLUGIN_PATH=$(printf '%s' "${SBX_PLUGIN_PATH:?}" | cut -d: -f1-2)
export SBX_PLUGIN_PATH

# complete WORD... : what _sbx offers for the last word, space-separated.
complete_words() {
    SBX_BIN=$sbx bash -c '
        source "$1"; shift
        sbx() { "$SBX_BIN" "$@"; }
        COMP_WORDS=("$SBX_BIN" "$@")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        _sbx
        printf "%s\n" "${COMPREPLY[*]}"' _ "$completion" "$@"
}

expect() {
    local want=$1
    shift
    local got
    got=$(complete_words "$@")
    if [ "$got" = "$want" ]; then
        ok "sbx $* <TAB> gives \"$want\""
    else
        not_ok "sbx $* <TAB>: got \"$got\", expected \"$want\""
    fi
}

expect "run" ru
expect "run rm" r
expect "exec-code exec" exe
expect "--help --remote --version" -
expect "exec-code exec" --remote http://127.0.0.1:1 exe
expect "--group-by --help --json --since --until -h" --remote=http://127.0.0.1:1 costs -
expect "--all --help --json --no-trunc --quiet" ps --
expect "--force --help -f -h" rm -
expect "bubblewrap docker local safehouse" run -b ""
expect "local" create --backend lo
expect "claude-code claude-code-codex codex" run --preset ""
expect "sbx-local-AAAAAA web sbx-local-BBBBBB" exec ""
expect "web" inspect w
expect "sbx-local-AAAAAA:" cp /etc/hosts sbx-local-A
expect "inspect" help ins
expect "" exec web ""
expect "sbx-local-AAAAAA web sbx-local-BBBBBB" persist -C /work ""
expect "web" port w

# 21. The README's "Sandboxes that outlive sbx" example, its "$ " lines run
#     as written (sbx the build's, a script.sh of our own) in a directory
#     of their own with a state store of their own.
work=$(mktemp -d "${TMPDIR:-/tmp}/sbx-readme-XXXXXX") || exit 99
trap 'rm -rf "$state" "$work"' EXIT
example=$(awk '/^Sandboxes that outlive sbx:$/ { f = 1; next }
               f && /^```/ { if (++fence == 2) exit; next }
               f && fence == 1 && sub(/^\$ /, "")' "$top/README.md")
mkdir -m 0700 "$work/state" "$work/tmp"
printf '#!/bin/sh\necho "$GREETING from the script"\n' >"$work/script.sh"
chmod +x "$work/script.sh"
got=$(cd "$work" && SBX_BIN=$sbx SBX_STATE_DIR=$work/state TMPDIR=$work/tmp SBX_BACKEND=local \
      bash -ec 'sbx() { "$SBX_BIN" "$@"; }; eval "$1"' _ "$example" 2>&1)
rc=$?
# Whatever a failed step left recorded goes (a sandbox lives on otherwise).
for rec in "$work"/state/sandboxes/*.json; do
    [ -e "$rec" ] || continue
    id=${rec##*/}
    SBX_STATE_DIR=$work/state TMPDIR=$work/tmp "$sbx" rm -f "${id%.json}" >/dev/null 2>&1
    rc=${rc/#0/1}
done
for _ in $(seq 50); do
    [ -z "$(ls -A "$work/tmp")" ] && break
    sleep 0.1
done
if [ $rc -eq 0 ] && [ "$(wc -l <<<"$example")" -eq 7 ] \
    && [ "$(cat "$work/out" 2>/dev/null)" = "hi from the script" ] \
    && [ -z "$(ls -A "$work/tmp")" ] && [ -z "$(ls -A "$work/state/sandboxes")" ]; then
    ok "the README's example of sandboxes that outlive sbx runs as written"
else
    not_ok "the README's example of sandboxes that outlive sbx: status $rc" \
        "example: $example" "output: $got" "out: $(cat "$work/out" 2>&1)" \
        "left: $(ls -A "$work/tmp" "$work/state/sandboxes" 2>&1)"
fi

# 22. Every help page fits 80 columns.
wide=$(for cmd in "" $commands; do
           "$sbx" $cmd --help 2>&1 | sed -E 's#/[A-Za-z0-9._/${}:*-]{24,}#/PATH#g' |
               awk -v c="sbx${cmd:+ $cmd} --help" 'length($0) > 80 { print c ": " $0 }'
       done)
if [ -z "$wide" ]; then
    ok "sbx --help and the help of each of the $(wc -l <<<"$commands") commands fit 80 columns"
else
    not_ok "help lines wider than 80 columns:" "$wide"
fi

exit $failed
