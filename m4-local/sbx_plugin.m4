# sbx_plugin.m4 - configure switches for libsbx plugins (collectd's AC_PLUGIN shape).
#
# SBX_PLUGIN(NAME, DEFAULT, DESCRIPTION, CHECKS)
# ----------------------------------------------
# Adds --enable-plugin-NAME=auto|yes|no (DEFAULT, one of those, when the
# switch is not given; --disable-plugin-NAME means no). Unless the plugin is
# disabled, CHECKS (configure code) runs and names each dependency it does
# not find with SBX_PLUGIN_MISSING([WHAT]). Then:
#   auto: the plugin is built when nothing is missing;
#   yes:  the plugin is built, and SBX_PLUGIN_REQUIRED fails (after printing
#         the summary table) when something is missing;
#   no:   the plugin is not built and CHECKS do not run.
# Sets build_plugin_NAME to yes or no, defines
# AM_CONDITIONAL([BUILD_PLUGIN_NAME]) (upper case, '-' as '_'), which gates
# the plugin and its tests in Makefile.am, and adds a row to the summary
# table printed by SBX_PLUGIN_TABLE.
AC_DEFUN([SBX_PLUGIN],
[m4_pushdef([sbx_var], m4_translit([$1], [-], [_]))dnl
m4_pushdef([sbx_VAR], m4_toupper(m4_translit([$1], [-], [_])))dnl
AC_ARG_ENABLE([plugin-$1],
  [AS_HELP_STRING([--enable-plugin-$1@<:@=auto|yes|no@:>@],
    [build libsbx-$1.so: $3 (default: $2)])],
  [], [enable_plugin_[]sbx_var=$2])
sbx_plugin_missing=
AS_CASE([$enable_plugin_[]sbx_var],
  [auto|yes], [$4],
  [no], [],
  [AC_MSG_ERROR([--enable-plugin-$1: expected auto, yes or no, got "$enable_plugin_[]sbx_var"])])
AS_IF([test "x$enable_plugin_[]sbx_var" = xno],
        [build_plugin_[]sbx_var=no; sbx_plugin_why="disabled (--enable-plugin-$1=no)"],
      [test -z "$sbx_plugin_missing"],
        [build_plugin_[]sbx_var=yes; sbx_plugin_why=],
      [test "x$enable_plugin_[]sbx_var" = xyes],
        [build_plugin_[]sbx_var=no; sbx_plugin_why="missing: $sbx_plugin_missing"
         sbx_plugin_required_missing="${sbx_plugin_required_missing:+$sbx_plugin_required_missing; }--enable-plugin-$1=yes needs $sbx_plugin_missing"],
        [build_plugin_[]sbx_var=no; sbx_plugin_why="missing: $sbx_plugin_missing"])
AC_MSG_CHECKING([whether to build plugin $1])
AC_MSG_RESULT([$build_plugin_[]sbx_var${sbx_plugin_why:+ ($sbx_plugin_why)}])
AM_CONDITIONAL([BUILD_PLUGIN_]sbx_VAR, [test "x$build_plugin_[]sbx_var" = xyes])
sbx_plugin_table="$sbx_plugin_table
$(printf '    %-12s %-5s %s' "$1" "$build_plugin_[]sbx_var" "$sbx_plugin_why")"
m4_popdef([sbx_VAR])dnl
m4_popdef([sbx_var])dnl
])

# SBX_PLUGIN_MISSING(WHAT)
# ------------------------
# Inside the CHECKS of SBX_PLUGIN: records that dependency WHAT (shown to
# the user, e.g. "libcurl (Debian: libcurl4-openssl-dev)") was not found.
AC_DEFUN([SBX_PLUGIN_MISSING],
[sbx_plugin_missing="${sbx_plugin_missing:+$sbx_plugin_missing, }$1"])

# SBX_PLUGIN_TABLE
# ----------------
# Prints the table of plugins: name, built (yes/no) and why not.
AC_DEFUN([SBX_PLUGIN_TABLE],
[AS_ECHO(["    plugin       built why not"])
AS_ECHO(["$sbx_plugin_table"]) | sed "1d; s/ *$//"])

# SBX_PLUGIN_REQUIRED
# -------------------
# After every SBX_PLUGIN: when a plugin asked for with =yes misses a
# dependency, prints the table and fails.
AC_DEFUN([SBX_PLUGIN_REQUIRED],
[AS_IF([test -n "$sbx_plugin_required_missing"],
  [SBX_PLUGIN_TABLE
   AC_MSG_ERROR([$sbx_plugin_required_missing (=auto builds without it)])])])
