#!/bin/sh
# tests/error_codes.sh — no error this library or its plugins make carries
# the code `unknown`: outside the code table (host/error.c), the wire
# decoder of a newer peer's code (host/wire.c) and the declarations
# (host/internal.h, host/include/sbx/sbx.h), no source names
# SBX_ERROR_UNKNOWN. A plugin's own `unknown` is replaced at the host
# services (tests/test_plugin_host: a_plugin_error_without_a_code_is_never_unknown).
# TAP output.
set -u
top=${srcdir:-.}
echo "1..1"
found=$(cd "$top" && grep -rn --include='*.c' --include='*.h' SBX_ERROR_UNKNOWN \
            host plugins cli sdk 2>/dev/null \
        | grep -v -e '^host/error\.c:' -e '^host/wire\.c:' -e '^host/internal\.h:' \
                  -e '^host/include/sbx/sbx\.h:')
if [ -z "$found" ]; then
    echo "ok 1 - no source makes an error with code unknown"
else
    echo "not ok 1 - sources that make an error with code unknown:"
    printf '%s\n' "$found" | sed 's/^/# /'
    exit 1
fi
