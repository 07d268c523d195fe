/*
 * Cases from the field (CASES.md): CASE-01, 02, 04, 06, 07, 09, 18, 49 and 55,
 * with their exact expected bytes, digests and exit codes, on the backend
 * named by $SBX_TEST_BACKEND (default "local"). "/tmp" in the case text is
 * "$SANDBOX_ROOT/tmp" here, so the commands hold on every backend.
 *
 * The case06 suite is also run by tests/stdin_pipe.sh with this program's
 * stdin on a pipe that never closes (the situation of CASE-06).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "testutil.h"

static char *g_tmp;
static sbx_client *g_client;
static sbx_sandbox *g_sb;
static const char *g_root;

static void setup(void)
{
    g_tmp = tu_fresh_tmpdir();
    sbx_error *err = NULL;
    g_client = sbx_client_new(tu_backend(), &err);
    cr_assert_null(err, "sbx_client_new(%s): %s", tu_backend(),
                   err ? sbx_error_get0_message(err) : "");
    g_sb = tu_create(g_client, NULL);
    g_root = sbx_sandbox_get0_root(g_sb);
}

static void teardown(void)
{
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
    g_client = NULL;
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(case01, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(case02, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(case04, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(case06, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(case07, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(case09, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(case18, .init = setup, .fini = teardown, .timeout = 30);

static void assert_sha256(const char *what, const char *data, size_t len, const char *want)
{
    char hex[65];
    tu_sha256_hex(data, len, hex);
    cr_assert_str_eq(hex, want, "%s: sha256 %s, expected %s", what, hex, want);
}

/* ================================================================ CASE-01 */

static const char *case01_cmd =
    "head -c 1048576 /dev/zero | tr '\\0' x; head -c 1048576 /dev/zero | tr '\\0' e >&2; echo end";

static void case01_expected(char **out, char **err)
{
    *out = malloc(1048580);
    *err = malloc(1048576);
    cr_assert(*out && *err);
    memset(*out, 'x', 1048576);
    memcpy(*out + 1048576, "end\n", 4);
    memset(*err, 'e', 1048576);
}

Test(case01, sha256_selfcheck)
{
    /* The digest helper itself, on FIPS 180-2 vectors, so that the digests
     * below are checked by a correct SHA-256. */
    char hex[65];
    tu_sha256_hex("", 0, hex);
    cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    tu_sha256_hex("abc", 3, hex);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    tu_sha256_hex(m, strlen(m), hex);
    cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

Test(case01, large_output_both_streams)
{
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = case01_cmd;
    req.timeout_secs = 30;
    double t0 = tu_now();
    sbx_result *r = tu_exec(g_sb, &req);
    double dt = tu_now() - t0;
    cr_assert(dt < 10.0, "took %.2f s", dt);
    tu_assert_exit(r, 0);

    char *out, *err;
    case01_expected(&out, &err);
    tu_assert_stdout_bytes(r, out, 1048580);
    tu_assert_stderr_bytes(r, err, 1048576);
    size_t n;
    const char *got = sbx_result_get0_stdout(r, &n);
    assert_sha256("stdout", got, n,
                  "6cb4c3cc8e6ca6e73deba93c80da87e5c1333909d76890fc14d50128b02e27fc");
    got = sbx_result_get0_stderr(r, &n);
    assert_sha256("stderr", got, n,
                  "58d8d1bac7272bfce62a6a2d90d14b56790543f56418cd7bc0cd6ca121984295");
    sbx_result_free(r);
    free(out);
    free(err);
}

Test(case01, capped_output_is_flagged)
{
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = case01_cmd;
    req.timeout_secs = 30;
    req.output_limit = 65536;
    double t0 = tu_now();
    sbx_result *r = tu_exec(g_sb, &req);
    double dt = tu_now() - t0;
    cr_assert(dt < 10.0, "took %.2f s", dt);
    cr_assert_eq(sbx_result_get_exit_code(r), 0);
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    char *out, *err;
    case01_expected(&out, &err);
    tu_assert_stdout_bytes(r, out, 65536);
    tu_assert_stderr_bytes(r, err, 65536);
    cr_assert_eq(sbx_result_is_stdout_truncated(r), 1, "stdout cut without the flag");
    cr_assert_eq(sbx_result_is_stderr_truncated(r), 1, "stderr cut without the flag");
    sbx_result_free(r);
    free(out);
    free(err);
}

/* ================================================================ CASE-02 */

static void case02_run(const char *cmd, int code, const char *stderr_has)
{
    sbx_error *err = NULL;
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = cmd;
    req.timeout_secs = 10;
    sbx_result *r = sbx_sandbox_execute_command(g_sb, &req, &err);
    cr_assert_null(err, "the call itself failed: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(r);
    tu_assert_exit(r, code);
    if (stderr_has)
        cr_assert(strstr(sbx_result_get0_stderr(r, NULL), stderr_has) != NULL,
                  "stderr \"%s\" lacks \"%s\"", sbx_result_get0_stderr(r, NULL), stderr_has);
    sbx_result_free(r);
}

Test(case02, a_exit_5)
{
    case02_run("exit 5", 5, NULL);
}

Test(case02, b_exit_255)
{
    case02_run("exit 255", 255, NULL);
}

Test(case02, c_command_not_found)
{
    case02_run("nosuchcmd_zz9", 127, "not found");
}

Test(case02, d_not_executable)
{
    case02_run("printf '#!/bin/sh\\necho hi\\n' > \"$SANDBOX_ROOT/tmp/noexec.sh\"; "
               "chmod 644 \"$SANDBOX_ROOT/tmp/noexec.sh\"; \"$SANDBOX_ROOT/tmp/noexec.sh\"",
               126, "Permission denied");
}

/* ================================================================ CASE-04 */

/* sandbox_sleep300_count()'s test: a running `sleep 300` whose
 * environment holds the entry @ud ("SANDBOX_ROOT=root"). */
static int sleep300_of(pid_t pid, void *ud)
{
    const char *needle = ud;
    char buf[65536];
    if (tu_pid_gone(pid) || tu_cmdline(pid, buf, sizeof buf) != 9
        || strcmp(buf, "sleep 300") != 0)
        return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    /* With its NUL: the whole entry. */
    return n > 0 && memmem(buf, (size_t)n, needle, strlen(needle) + 1) != NULL;
}

/* Processes of this sandbox (SANDBOX_ROOT=root in their environment)
 * whose command line is exactly `sleep 300`, still running. */
static int sandbox_sleep300_count(void)
{
    char *needle = tu_strdup_printf("SANDBOX_ROOT=%s", g_root);
    int count = (int)tu_pids_where(sleep300_of, needle, NULL, SIZE_MAX);
    free(needle);
    return count;
}

/* "ps inside the sandbox shows no sleep 300". */
static void assert_no_sleep300(void)
{
    if (tu_backend_host_dirs()) {
        /* Commands share the host's process table: look for this sandbox's
         * processes there. */
        cr_assert_eq(sandbox_sleep300_count(), 0, "a `sleep 300` of the sandbox survived");
    } else {
        sbx_result *r = tu_sh(g_sb, "ps -eo args | grep -cx 'sleep 300'", 10);
        tu_assert_stdout(r, "0\n");
        sbx_result_free(r);
    }
}

Test(case04, timeout_kills_process_tree)
{
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "sleep 300 & echo $! > \"$SANDBOX_ROOT/tmp/bg.pid\"; wait", 1);
    double dt = tu_now() - t0;
    cr_assert(dt <= 2.5, "returned after %.2f s", dt);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    sbx_result_free(r);

    sbx_result *r2 = tu_sh(g_sb, "kill -0 $(cat \"$SANDBOX_ROOT/tmp/bg.pid\") 2>/dev/null; echo $?", 10);
    tu_assert_exit(r2, 0);
    tu_assert_stdout(r2, "1\n");
    sbx_result_free(r2);
    assert_no_sleep300();
    if (tu_backend_host_dirs()) {
        pid_t pid;
        tu_read_pids(g_sb, "$SANDBOX_ROOT/tmp/bg.pid", &pid, 1);
        cr_assert(tu_pid_gone(pid), "background sleep %d survived", (int)pid);
    }
}

Test(case04, term_ignoring_tree_is_killed)
{
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "trap '' TERM; sleep 300", 1);
    double dt = tu_now() - t0;
    cr_assert(dt <= 6.0, "returned after %.2f s", dt);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    sbx_result_free(r);
    assert_no_sleep300();
}

Test(case04, sleep300_probe_sees_live_process)
{
    /* The probe used above finds a live `sleep 300` of this sandbox, so
     * its zero above is not vacuous. */
    sbx_result *r = tu_sh(g_sb,
        "sleep 300 >/dev/null 2>&1 </dev/null & echo $! > \"$SANDBOX_ROOT/tmp/live.pid\"", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    if (tu_backend_host_dirs()) {
        /* Bounded wait: the background child may not have exec'd yet. */
        double end = tu_now() + 3.0;
        while (sandbox_sleep300_count() != 1 && tu_now() < end)
            usleep(20000);
        cr_assert_eq(sandbox_sleep300_count(), 1);
    } else {
        /* The same bounded wait, inside (the exec above may return before
         * its background child exec'd sleep). */
        r = tu_sh(g_sb, "i=0; while n=$(ps -eo args | grep -cx 'sleep 300'); "
                        "[ \"$n\" != 1 ] && [ $i -lt 150 ]; do i=$((i+1)); sleep 0.02; done; "
                        "echo $n", 10);
        tu_assert_stdout(r, "1\n");
        sbx_result_free(r);
    }
    r = tu_sh(g_sb, "kill $(cat \"$SANDBOX_ROOT/tmp/live.pid\")", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
}

/* ================================================================ CASE-06 */

/*
 * Under tests/stdin_pipe.sh (SBX_TEST_STDIN_PIPE=1) the program's stdin is
 * a pipe that never closes. Criterion gives each test process a stdin pipe
 * of its own, so take the program's one (the stdin of the runner, our
 * parent) and make it this process's stdin: the library must not read it,
 * wait for its EOF, or hand it to a command.
 */
static void use_harness_stdin(void)
{
    const char *h = getenv("SBX_TEST_STDIN_PIPE");
    if (!h || strcmp(h, "1") != 0)
        return;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/0", (int)getppid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert(fd >= 0, "cannot open the program's stdin %s: %s", path, strerror(errno));
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode), "the program's stdin is not a pipe under the harness");
    cr_assert(dup2(fd, 0) == 0);
    close(fd);
    /* Open, empty, and not at EOF. */
    struct pollfd p = {.fd = 0, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 0), 0, "the harness pipe is readable or closed (revents %#x)",
                 (unsigned)p.revents);
}

Test(case06, r1_no_stdin_is_eof)
{
    use_harness_stdin();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat; echo eof";
    req.timeout_secs = 10;
    double t0 = tu_now();
    sbx_result *r = tu_exec(g_sb, &req);
    double dt = tu_now() - t0;
    cr_assert(dt < 1.0, "r1 took %.2f s", dt);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "eof\n");
    sbx_result_free(r);
}

Test(case06, r2_given_stdin_is_read)
{
    use_harness_stdin();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat; echo eof";
    req.stdin_data = "abc\n";
    req.stdin_len = 4;
    req.timeout_secs = 10;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "abc\neof\n");
    sbx_result_free(r);
}

Test(case06, r3_timeout_fires_whatever_stdin)
{
    use_harness_stdin();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 100";
    req.timeout_secs = 2;
    double t0 = tu_now();
    sbx_result *r = tu_exec(g_sb, &req);
    double dt = tu_now() - t0;
    cr_assert(dt <= 3.0, "r3 took %.2f s", dt);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    sbx_result_free(r);
}

/* ================================================================ CASE-07 */

Test(case07, non_utf8_output_is_returned)
{
    sbx_result *r = tu_sh(g_sb, "printf 'ok\\377\\376\\n'; printf 'e\\200\\n' >&2", 10);
    tu_assert_exit(r, 0);
    static const unsigned char out[] = {0x6f, 0x6b, 0xff, 0xfe, 0x0a};
    static const unsigned char err[] = {0x65, 0x80, 0x0a};
    tu_assert_stdout_bytes(r, out, sizeof out);
    tu_assert_stderr_bytes(r, err, sizeof err);
    sbx_result_free(r);
}

/* ================================================================ CASE-09 */

Test(case09, streams_separate_empty_not_null)
{
    sbx_result *r1 = tu_sh(g_sb, "echo out; echo err >&2; echo out2", 10);
    tu_assert_exit(r1, 0);
    tu_assert_stdout(r1, "out\nout2\n");
    tu_assert_stderr(r1, "err\n");
    sbx_result_free(r1);

    sbx_result *r2 = tu_sh(g_sb, "echo only", 10);
    tu_assert_exit(r2, 0);
    tu_assert_stdout(r2, "only\n");
    size_t len = 1234;
    const char *e = sbx_result_get0_stderr(r2, &len);
    cr_assert_not_null(e, "empty stderr is NULL");
    cr_assert_eq(len, 0);
    sbx_result_free(r2);

    sbx_result *r3 = tu_sh(g_sb, "echo boom >&2; exit 3", 10);
    tu_assert_exit(r3, 3);
    len = 1234;
    const char *o = sbx_result_get0_stdout(r3, &len);
    cr_assert_not_null(o, "empty stdout is NULL");
    cr_assert_eq(len, 0);
    tu_assert_stderr(r3, "boom\n");
    sbx_result_free(r3);
}

/* ================================================================ CASE-18 */

Test(case18, missing_cwd_is_clear_error)
{
    char here[PATH_MAX];
    cr_assert_not_null(getcwd(here, sizeof here));
    char *marker_here = tu_strdup_printf("%s/ran_marker", here);
    cr_assert_eq(tu_exists(marker_here), 0, "%s exists before the test", marker_here);
    if (tu_backend_is_local())
        cr_assert_eq(tu_exists("/ran_marker"), 0, "/ran_marker exists before the test");

    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "touch ran_marker; pwd";
    req.cwd = "/definitely/not/here";
    sbx_error *err = NULL;
    sbx_result *r1 = sbx_sandbox_execute_command(g_sb, &req, &err);
    cr_assert_null(r1, "the command ran (exit %d) although its cwd is missing",
                   r1 ? sbx_result_get_exit_code(r1) : 0);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/definitely/not/here", NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    sbx_error_free(err);

    int ran_here = tu_exists(marker_here);
    if (ran_here)
        unlink(marker_here);
    cr_assert_eq(ran_here, 0, "ran_marker appeared in the caller's directory");
    /* Not in the default cwd (the root on local) nor in the sandbox's /. */
    sbx_result *r = tu_sh(g_sb,
        "test -e ran_marker; a=$?; test -e \"$SANDBOX_ROOT/ran_marker\"; b=$?; "
        "test -e /ran_marker; c=$?; echo $a$b$c", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "111\n");
    sbx_result_free(r);
    free(marker_here);
}

/* CASE-18 allows creating a missing workdir where the library documents
 * it: sbx_options_set_workdir documents it for every backend. Commands
 * start in it; on local it is a host directory (here beneath the test's
 * own, so nothing is made at the host's root), elsewhere a path inside. */
Test(case18, create_with_missing_workdir)
{
    char *wd = tu_backend_host_dirs() ? tu_strdup_printf("%s/nope/deeper", g_tmp)
                                      : strdup("/nope");
    if (tu_backend_host_dirs())
        cr_assert_eq(tu_exists(wd), 0);
    else if (strcmp(tu_backend(), "docker") != 0)
        cr_assert_eq(tu_exists("/nope"), 0, "/nope exists on this machine");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
    sbx_options_free(o);
    cr_assert_not_null(sb, "create with workdir %s: %s", wd,
                       err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb, "pwd", 10);
    tu_assert_exit(r, 0);
    char *want = tu_strdup_printf("%s\n", wd);
    tu_assert_stdout(r, want);
    free(want);
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    if (tu_backend_host_dirs())
        cr_assert(tu_exists(wd), "destroy removed the caller's workdir %s", wd);
    else if (strcmp(tu_backend(), "docker") != 0)
        cr_assert_eq(tu_exists("/nope"), 0, "the sandbox made /nope on the host");
    free(wd);
}

/* ================================================================ CASE-55 */

TestSuite(case55, .init = setup, .fini = teardown, .timeout = 120);

static const char case55_z[] =
    "i=0; while [ $i -lt 50 ]; do (sleep 0.1 &); i=$((i+1)); done; sleep 1; "
    "grep -h '^State:' /proc/[0-9]*/status | grep -c Z; true";

/* The number of zombies among the descendants of @top (itself excluded),
 * read from the host's /proc. */
static int zombies_below(pid_t top)
{
    enum { MAX = 65536 };
    static pid_t pids[MAX], ppids[MAX];
    static char state[MAX];
    size_t n = 0;
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%ld/status", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char st = '?';
        long pp = -1;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "State:", 6) == 0)
                sscanf(line + 6, " %c", &st);
            else if (strncmp(line, "PPid:", 5) == 0)
                pp = strtol(line + 5, NULL, 10);
        }
        fclose(f);
        pids[n] = (pid_t)pid;
        ppids[n] = (pid_t)pp;
        state[n] = st;
        n++;
    }
    closedir(d);
    /* Descendants by repeated passes over the parent links. */
    static char below[MAX];
    memset(below, 0, n);
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (below[i])
                continue;
            int under = ppids[i] == top;
            for (size_t k = 0; !under && k < n; k++)
                under = below[k] && pids[k] == ppids[i];
            if (under) {
                below[i] = 1;
                changed = 1;
            }
        }
    }
    int z = 0;
    for (size_t i = 0; i < n; i++)
        z += below[i] && state[i] == 'Z';
    return z;
}

/* A: 250 orphans in five runs, and no zombie is ever left. Where the
 * sandbox has its own process namespace (bubblewrap, docker) the case's
 * command counts them itself and prints 0 each time; on local, whose
 * commands see the host's processes (and the host's unrelated zombies),
 * C: the zombies below the library's supervisor are counted instead. */
Test(case55, a_orphans_are_reaped_no_zombies_pile_up)
{
    int own_pid_ns = !tu_backend_host_dirs();
    for (int run = 0; run < 5; run++) {
        sbx_result *r = tu_sh(g_sb, case55_z, 60);
        tu_assert_exit(r, 0);
        /* On a loaded machine the last of the 50 forks can start so late
         * that its sleep ends as the count runs: a zombie for the moment
         * until PID 1 is given a CPU, which is not a pile-up. Such a run
         * is made once more; an init that never reaps prints 50 again. */
        size_t n = 0;
        const char *out = sbx_result_get0_stdout(r, &n);
        if (own_pid_ns && (n != 2 || memcmp(out, "0\n", 2) != 0)) {
            /* (not cr_log_warn: a warning makes Criterion's exit status 1) */
            fprintf(stderr, "# CASE-55 run %d counted %.*s zombie(s) as it ended; run again\n",
                    run, (int)n, out);
            sbx_result_free(r);
            r = tu_sh(g_sb, case55_z, 60);
            tu_assert_exit(r, 0);
        }
        if (own_pid_ns)
            tu_assert_stdout(r, "0\n");
        sbx_result_free(r);
    }
    /* Remote over local: the supervisor is the control plane's, not
     * named in the remote session state; the runs' exit status is all. */
    if (!own_pid_ns && tu_backend_is_local()) {
        char *state = sbx_sandbox_session_state(g_sb, NULL);
        cr_assert_not_null(state);
        const char *p = strstr(state, "\"supervisor_pid\":");
        cr_assert_not_null(p, "no supervisor_pid in %s", state);
        pid_t sup = (pid_t)strtol(p + 17, NULL, 10);
        free(state);
        cr_assert(sup > 1);
        cr_assert_eq(zombies_below(sup), 0, "zombies below the supervisor %d", (int)sup);
    }
}

/* ================================================================ CASE-49 */

/*
 * CASE-49 A: a command killed by the sandbox's memory limit (64 MiB) says
 * so: exit 137, not timed out, sbx_result_is_oom_killed() set (the
 * sandbox cgroup's OOM-kill counter rose); `kill -9 $$` gives 137 without
 * it; the sandbox lives on. A backend that cannot enforce memory_mb
 * (local) refuses it, naming the option. A backend whose smallest memory
 * limit is above 64 MiB refuses 64 as a configuration error with its
 * minimum in context "min_mb": the case then runs at that minimum when it
 * stays at or below the 256 MiB the commands allocate (Tensorlake: 256);
 * a larger minimum (memory in whole GB, Daytona: 1024) cannot hold the case,
 * and the refusal is what is checked.
 */
static void case49_setup(void)
{
    uint64_t caps = 0;
    sbx_error *err = NULL;

    g_tmp = tu_fresh_tmpdir();
    g_client = sbx_client_new(tu_backend(), &err);
    cr_assert_null(err, "sbx_client_new(%s): %s", tu_backend(),
                   err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, 64, NULL), 0);
    g_sb = sbx_sandbox_create(g_client, o, &err);
    const char *min_mb = err ? sbx_error_get0_context(err, "min_mb") : NULL;
    long min = min_mb ? strtol(min_mb, NULL, 10) : 0;
    if (!(caps & SBX_CAP_MEMORY_LIMIT) || min > 256) {
        cr_assert_null(g_sb);
        tu_assert_error(err, SBX_ERROR_CONFIGURATION, "memory_mb", NULL);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), "memory_mb");
        sbx_error_free(err);
    } else {
        if (!g_sb && min > 64) {
            tu_assert_error(err, SBX_ERROR_CONFIGURATION, "memory_mb", NULL);
            cr_assert_str_eq(sbx_error_get0_context(err, "option"), "memory_mb");
            sbx_error_free(err);
            err = NULL;
            cr_assert_eq(sbx_options_set_memory_mb(o, (int64_t)min, NULL), 0);
            g_sb = tu_create(g_client, o);
        }
        cr_assert_not_null(g_sb, "create with memory_mb 64: %s",
                           err ? sbx_error_get0_message(err) : "");
    }
    sbx_options_free(o);
}

TestSuite(case49, .init = case49_setup, .fini = teardown, .timeout = 120);

/* Runs @script in the 64 MiB sandbox: @code, never timed out, and the OOM
 * flag as @oom. */
static void case49_expect(const char *script, int code, int oom, const char *out)
{
    if (!g_sb)
        return;             /* refused above, as the case says */
    sbx_result *r = tu_sh(g_sb, script, 60);
    tu_assert_exit(r, code);
    cr_assert_eq(sbx_result_is_timed_out(r), 0, "%s: timed out", script);
    cr_assert_eq(sbx_result_is_oom_killed(r), oom, "%s: oom_killed %d, expected %d", script,
                 sbx_result_is_oom_killed(r), oom);
    if (out)
        tu_assert_stdout(r, out);
    sbx_result_free(r);
}

Test(case49, a1_dd_past_the_limit_is_oom_killed)
{
    case49_expect("dd if=/dev/zero of=/dev/null bs=256M count=1", 137, 1, "");
    /* A4: the sandbox lives on, and the next command has no OOM flag. */
    case49_expect("echo alive", 0, 0, "alive\n");
}

Test(case49, a2_python_bytearray_past_the_limit_is_oom_killed)
{
    case49_expect("python3 -c 'b=bytearray(256*1024*1024)'", 137, 1, "");
    case49_expect("echo alive", 0, 0, "alive\n");
}

Test(case49, a3_kill_9_is_137_without_oom)
{
    case49_expect("kill -9 $$", 137, 0, "");
    case49_expect("echo alive", 0, 0, "alive\n");
}

Test(case49, a4_after_an_oom_kill_and_a_kill_9_the_sandbox_lives)
{
    case49_expect("dd if=/dev/zero of=/dev/null bs=256M count=1", 137, 1, "");
    case49_expect("kill -9 $$", 137, 0, "");
    case49_expect("echo alive", 0, 0, "alive\n");
}
