#!/bin/bash
# tests/cli_docs.sh — the man page sbx(1) and the bash completion.
#
#  1. `man -l doc/sbx.1` renders it without a warning (groff's warnings on).
#  2. Every command of sbx's command table (the list `sbx --help` prints)
#     has a section ".SS \"sbx COMMAND ...\"" in the man page, and the page
#     has no section for a command sbx does not have.
#  3-n. The completion, sourced in bash, completes what a user types:
#     commands, options, backends, presets, ids and names of recorded
#     sandboxes (from a state store the test writes).
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

echo "1..20"

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
expect "--all --help --json --no-trunc" ps --
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

exit $failed
