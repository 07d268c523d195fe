#!/bin/sh
# tests/test_pkgconfig.sh — what a packager installs is enough for a plugin
# author and an application: installs this build into a temporary DESTDIR,
# then, using only what was installed and pkg-config,
#   - checks the installed headers, libsbx.pc and its plugindir (also as a
#     consumer's configure reads it, with PKG_CHECK_VAR),
#   - builds the out-of-tree plugin tests/oot-plugin/oot.c as libsbx-oot.so
#     (-fvisibility=hidden, a version script exporting sbx_plugin_init),
#     installs it into plugindir and loads it from an application built with
#     `pkg-config --cflags --libs libsbx` (tests/oot-plugin/load.c),
#   - checks the exported symbols of libsbx.so and of every plugin.
# TAP output. The Makefile passes SBX_TEST_* (make, build and source
# directories, compiler, configured directories, version).
set -u

n=0
failed=0
skip_rest=""
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }
diag() { sed 's/^/# /'; }
# check DESCRIPTION COMMAND...: one test point from COMMAND's status; its
# output becomes diagnostics. After a failed step that later ones need
# (skip_rest set), they fail naming it.
check() {
    desc=$1
    shift
    if [ -n "$skip_rest" ]; then
        not_ok "$desc (not run: $skip_rest failed)"
        return 1
    fi
    if out=$("$@" 2>&1); then
        ok "$desc"
        [ -z "$out" ] || printf '%s\n' "$out" | diag
        return 0
    fi
    not_ok "$desc"
    [ -z "$out" ] || printf '%s\n' "$out" | diag
    return 1
}

echo "1..13"

for v in SBX_TEST_MAKE SBX_TEST_BUILDDIR SBX_TEST_SRCDIR SBX_TEST_CC SBX_TEST_VERSION \
         SBX_TEST_PLUGINDIR SBX_TEST_PKGCONFIGDIR SBX_TEST_INCLUDEDIR SBX_TEST_LIBDIR \
         SBX_TEST_MANDIR SBX_TEST_DATADIR; do
    eval "val=\${$v-}"
    [ -n "$val" ] || { echo "# $v is not set (run through make check)"; skip_rest="the environment"; }
done
san_cflags=${SBX_TEST_CFLAGS-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbx-pkgconfig.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
dest=$tmp/dest
plugindir=$dest${SBX_TEST_PLUGINDIR-}
libdir=$dest${SBX_TEST_LIBDIR-}
includedir=$dest${SBX_TEST_INCLUDEDIR-}

# pkg-config sees only the installed libsbx.pc; paths it prints carry the
# DESTDIR (pkgconf adds the sysroot to variables as well, pkg-config 0.29
# only to -I/-L: add it where it is missing).
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
PKG_CONFIG_LIBDIR=$dest${SBX_TEST_PKGCONFIGDIR-}
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
unset PKG_CONFIG_PATH
in_dest() { case $1 in "$dest"/*) echo "$1" ;; *) echo "$dest$1" ;; esac; }

# 1. Install this build.
install_build() {
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $SBX_TEST_MAKE -s -C "$SBX_TEST_BUILDDIR" \
        install DESTDIR="$dest" >"$tmp/install.log" 2>&1 || { tail -n 20 "$tmp/install.log"; return 1; }
    [ -f "$dest$SBX_TEST_PKGCONFIGDIR/libsbx.pc" ] || { echo "no libsbx.pc installed"; return 1; }
}
check "make install DESTDIR=TMP installs the build" install_build || skip_rest="make install"

# 2. Exactly the two public headers.
headers() {
    got=$(cd "$includedir" && find . -type f | sort | tr '\n' ' ')
    [ "$got" = "./sbx/plugin.h ./sbx/sbx.h " ] || { echo "installed headers: $got"; return 1; }
}
check "installed headers are exactly <sbx/sbx.h> and <sbx/plugin.h>" headers

# 3. libsbx.pc: version, plugindir, flags.
pc() {
    v=$($PKG_CONFIG --modversion libsbx) || return 1
    [ "$v" = "$SBX_TEST_VERSION" ] || { echo "modversion $v, expected $SBX_TEST_VERSION"; return 1; }
    d=$(in_dest "$($PKG_CONFIG --variable=plugindir libsbx)")
    [ "$d" = "$plugindir" ] || { echo "plugindir $d, expected $plugindir"; return 1; }
    c=$($PKG_CONFIG --cflags libsbx) && l=$($PKG_CONFIG --libs libsbx) || return 1
    c=$(echo $c) l=$(echo $l)       # pkgconf leaves a trailing blank
    [ "$c" = "-I$includedir" ] || { echo "cflags \"$c\", expected \"-I$includedir\""; return 1; }
    [ "$l" = "-L$libdir -lsbx" ] || { echo "libs \"$l\", expected \"-L$libdir -lsbx\""; return 1; }
}
check "pkg-config reads libsbx.pc: version, plugindir, cflags, libs" pc

# 4. A consumer's configure finds plugindir with PKG_CHECK_VAR.
consumer() {
    mkdir "$tmp/consumer" && cd "$tmp/consumer" || return 1
    cat >configure.ac <<'EOF'
AC_INIT([sbx-consumer], [1])
PKG_PROG_PKG_CONFIG
PKG_CHECK_VAR([SBX_PLUGINDIR], [libsbx], [plugindir], [],
  [AC_MSG_ERROR([libsbx.pc does not tell plugindir])])
AC_CONFIG_FILES([plugindir.txt])
AC_OUTPUT
EOF
    echo '@SBX_PLUGINDIR@' >plugindir.txt.in
    autoreconf >autoreconf.log 2>&1 || { cat autoreconf.log; return 1; }
    ./configure >configure.log 2>&1 || { tail -n 20 configure.log; return 1; }
    d=$(in_dest "$(cat plugindir.txt)")
    [ "$d" = "$plugindir" ] || { echo "PKG_CHECK_VAR gave $d, expected $plugindir"; return 1; }
}
# (check runs each step in a subshell: the cd stays there.)
check "PKG_CHECK_VAR([SBX_PLUGINDIR], [libsbx], [plugindir]) in a consumer's configure" consumer

# 5. The out-of-tree plugin, from the installed SDK header alone.
build_plugin() {
    printf '{ global: sbx_plugin_init; local: *; };\n' >"$tmp/oot.sym"
    $SBX_TEST_CC -std=gnu11 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden \
        $($PKG_CONFIG --cflags libsbx) -Wl,--version-script="$tmp/oot.sym" \
        -o "$tmp/libsbx-oot.so" "$SBX_TEST_SRCDIR/oot-plugin/oot.c" || return 1
    mkdir -p "$plugindir" && cp "$tmp/libsbx-oot.so" "$plugindir/"
}
check "libsbx-oot.so builds with only pkg-config --cflags libsbx, into plugindir" build_plugin \
    || skip_rest=${skip_rest:-"building the plugin"}

# Defined dynamic symbols of $1, one per line: "NAME" or "NAME@@VERSION".
dynsyms() { nm -D --defined-only "$1" | awk '{ print $NF }' | sort; }

# 6. The plugin exports its init symbol and nothing else.
plugin_syms() {
    got=$(dynsyms "$plugindir/libsbx-oot.so" | tr '\n' ' ')
    [ "$got" = "sbx_plugin_init " ] || { echo "libsbx-oot.so exports: $got"; return 1; }
}
check "nm -D libsbx-oot.so: only sbx_plugin_init" plugin_syms

# 7. So does every plugin this build installed.
installed_plugin_syms() {
    count=0
    for so in "$plugindir"/libsbx-*.so; do
        [ "$so" != "$plugindir/libsbx-oot.so" ] || continue
        [ -f "$so" ] || continue
        count=$((count + 1))
        got=$(dynsyms "$so" | tr '\n' ' ')
        [ "$got" = "sbx_plugin_init " ] || { echo "$so exports: $got"; return 1; }
    done
    echo "$count installed plugin(s) checked"
}
check "nm -D of each installed plugin: only sbx_plugin_init" installed_plugin_syms

# 8. libsbx.so exports exactly the functions the header declares, in SBX_0.1.
lib_syms() {
    so=$(ls "$libdir"/libsbx.so.* 2>/dev/null | head -n 1)
    [ -n "$so" ] || { echo "no libsbx.so.* in $libdir"; return 1; }
    sed -n 's/^SBX_EXPORT[^(]*[^A-Za-z0-9_(]\(sbx_[A-Za-z0-9_]*\)(.*/\1@@SBX_0.1/p' \
        "$includedir/sbx/sbx.h" | sort >"$tmp/declared"
    dynsyms "$so" | grep -v '^SBX_0\.1$' >"$tmp/exported"
    [ -s "$tmp/declared" ] || { echo "no SBX_EXPORT function found in sbx.h"; return 1; }
    diff "$tmp/declared" "$tmp/exported" >"$tmp/syms.diff" && {
        echo "$(wc -l <"$tmp/declared") functions"
        return 0
    }
    echo "< declared in sbx.h only, > exported by $(basename "$so") only:"
    cat "$tmp/syms.diff"
    return 1
}
check "libsbx.so exports exactly the SBX_EXPORT functions of sbx.h, version node SBX_0.1" lib_syms

# 9. An application built against the installed library loads the plugin.
load_plugin() {
    # shellcheck disable=SC2086
    $SBX_TEST_CC -std=gnu11 -Wall -Wextra -Werror $san_cflags $($PKG_CONFIG --cflags libsbx) \
        -o "$tmp/load" "$SBX_TEST_SRCDIR/oot-plugin/load.c" $($PKG_CONFIG --libs libsbx) \
        || return 1
    LD_LIBRARY_PATH=$libdir SBX_PLUGIN_PATH=$plugindir OOT_EXPECT_PATH=$plugindir/libsbx-oot.so \
        "$tmp/load"
}
check "an application built with pkg-config --libs libsbx lists and loads oot from plugindir" \
    load_plugin

# 10. make install puts the man page in man1 and the bash completion where
# bash-completion loads it from.
man_and_completion() {
    [ -f "$dest$SBX_TEST_MANDIR/man1/sbx.1" ] || { echo "no $SBX_TEST_MANDIR/man1/sbx.1"; return 1; }
    cmp "$SBX_TEST_SRCDIR/../doc/sbx.1" "$dest$SBX_TEST_MANDIR/man1/sbx.1" || return 1
    c=$dest$SBX_TEST_DATADIR/bash-completion/completions/sbx
    [ -f "$c" ] || { echo "no $SBX_TEST_DATADIR/bash-completion/completions/sbx"; return 1; }
    cmp "$SBX_TEST_SRCDIR/../completions/sbx" "$c"
}
check "make install: man1/sbx.1 and bash-completion/completions/sbx" man_and_completion

# The README's example, as its commands build it.
awk '/^```c$/ { f = 1; next } /^```$/ { if (f) exit } f' "$SBX_TEST_SRCDIR/../README.md" \
    >"$tmp/hello.c"
# Runs "$@" with none of the variables that point at plugins, supervisor,
# plugin host or presets, and a state directory of the test's own.
bare() {
    env -u SBX_PLUGIN_PATH -u SBX_SUPERVISOR -u SBX_PLUGIN_HOST -u SBX_PRESET_DIR \
        -u SBX_PRESET_PATH -u LD_LIBRARY_PATH SBX_STATE_DIR="$tmp/state" "$@"
}
# hello's output: "hello from ROOT" with ROOT a local sandbox root.
hello_ok() {
    printf '%s\n' "$1" | grep -Eqx 'hello from /.*/sbx-local-[A-Za-z0-9]{6}/root' || {
        echo "printed: $1"
        return 1
    }
}

# 11. From the build tree: libsbx-uninstalled.pc builds it, and it runs
# with no variable: the build tree's library finds the build tree's
# plugins, supervisor and plugin host.
uninstalled_example() {
    # shellcheck disable=SC2086
    $SBX_TEST_CC -std=gnu11 -Wall -Wextra -Werror $san_cflags -o "$tmp/hello-tree" \
        "$tmp/hello.c" $(env -u PKG_CONFIG_LIBDIR -u PKG_CONFIG_SYSROOT_DIR \
                         PKG_CONFIG_PATH="$SBX_TEST_BUILDDIR" $PKG_CONFIG --cflags --libs libsbx) \
        || return 1
    out=$(bare "$tmp/hello-tree") || { echo "status $?: $out"; return 1; }
    hello_ok "$out"
}
check "README example: built with libsbx-uninstalled.pc, runs from the build tree with no SBX_*" \
    uninstalled_example

# 12. build/cli/sbx too, presets included.
uninstalled_sbx() {
    out=$(bare "$SBX_TEST_BUILDDIR/cli/sbx" run -- echo from the tree 2>&1) || {
        echo "sbx run: $out"
        return 1
    }
    [ "$out" = "from the tree" ] || { echo "sbx run printed: $out"; return 1; }
    out=$(bare "$SBX_TEST_BUILDDIR/cli/sbx" presets 2>&1 | sed -n 's/^\(claude-code\) .*/\1/p')
    [ "$out" = "claude-code" ] || { echo "sbx presets: no claude-code"; return 1; }
}
check "build/cli/sbx runs a sandbox and lists presets with no SBX_*" uninstalled_sbx

# 13. The installed copy, built as the README shows for an install in a
# prefix (rpath to pkg-config's libdir), never looks at the build tree: it
# searches only the installed plugin directory (empty in this DESTDIR
# run, so local is not installed).
installed_example() {
    # shellcheck disable=SC2086
    $SBX_TEST_CC -std=gnu11 -Wall -Wextra -Werror $san_cflags -o "$tmp/hello-installed" \
        "$tmp/hello.c" $($PKG_CONFIG --cflags --libs libsbx) \
        -Wl,-rpath,"$(in_dest "$($PKG_CONFIG --variable=libdir libsbx)")" || return 1
    out=$(bare "$tmp/hello-installed" 2>&1) && { echo "it ran: $out"; return 1; }
    want="searched=$SBX_TEST_PLUGINDIR;"
    case $out in
    *"code=backend_not_installed"*"$want"*) return 0 ;;
    esac
    echo "printed: $out"
    return 1
}
check "README example against the installed library (rpath): it never uses the build tree" \
    installed_example

[ "$n" -eq 13 ] || echo "# ran $n test points, planned 13"
exit 0
