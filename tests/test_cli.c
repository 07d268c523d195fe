/*
 * Tests of the `sbx` command-line tool: the built binary (path in SBX_CLI,
 * set by `make check` together with SBX_PLUGIN_PATH and SBX_SUPERVISOR)
 * runs as a child process with stdout and stderr on separate pipes, and the
 * tests compare what it printed exactly.
 *
 * Every run gets a fresh TMPDIR, under which the local backend makes its
 * sandboxes (${TMPDIR:-/tmp}/sbx-local-XXXXXX); after each run that
 * directory must hold no sbx-local-* entry, so a sandbox the tool did not
 * destroy is caught (except for runs that leave a sandbox on purpose:
 * `sbx create` and what follows it, until `sbx rm`). SBX_STATE_DIR points
 * at "state" in that directory, so `sbx create` records its sandboxes
 * there and never in the user's own state directory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

extern char **environ;

/* Longest a single sbx run may take before the test gives up on it. */
#define RUN_DEADLINE_SECS 60.0

/* ------------------------------------------------------------- fixtures */

static char g_tmpdir[PATH_MAX];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");

    if (base == NULL || *base == '\0')
        base = "/tmp";
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/sbx-cli-test-XXXXXX", base);
    if (mkdtemp(g_tmpdir) == NULL) {
        perror("mkdtemp");
        abort();
    }
}

static int remove_entry(const char *path, const struct stat *st, int type,
                        struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Destroys every sandbox recorded in state directory @dir (left by a
 * test that failed before its `sbx rm`). */
static void destroy_recorded(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    while (d != NULL && (de = readdir(d)) != NULL) {
        char path[PATH_MAX];
        json_object *doc, *state;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        doc = json_object_from_file(path);
        if (doc != NULL && json_object_object_get_ex(doc, "state", &state)) {
            sbx_sandbox *sb = sbx_resume(json_object_to_json_string(state), NULL);

            if (sb != NULL) {
                sbx_sandbox_destroy(sb, NULL);
                sbx_sandbox_free(sb);
            }
        }
        json_object_put(doc);
    }
    if (d != NULL)
        closedir(d);
}

static void remove_tmpdir(void)
{
    char dir[PATH_MAX + 32];

    if (g_tmpdir[0] == '\0')
        return;
    setenv("TMPDIR", g_tmpdir, 1);
    snprintf(dir, sizeof dir, "%s/state/sandboxes", g_tmpdir);
    destroy_recorded(dir);
    snprintf(dir, sizeof dir, "%s/xdg/sbx/sandboxes", g_tmpdir);
    destroy_recorded(dir);
    /* What a sandbox's keeper removes after its end may still be going
     * (at most the 5 s every end of a sandbox has): again until the
     * directory itself is gone. */
    for (int i = 0; i < 100; i++) {
        nftw(g_tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (access(g_tmpdir, F_OK) != 0)
            break;
        usleep(50000);
    }
}

TestSuite(cli, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 120);

/* ---------------------------------------------------------- running sbx */

typedef struct cli_run {
    int status;        /* exit code; 128+N when sbx itself died of signal N */
    char *out;         /* NUL-terminated */
    size_t out_len;
    char *err;         /* NUL-terminated */
    size_t err_len;
    double secs;       /* wall time */
    double stop_secs;  /* when the stop signal was sent (since the start), 0 if never */
} cli_run;

typedef struct cli_spec {
    const char *const *args;  /* arguments after "sbx", NULL-terminated */
    const char *stdin_data;   /* NULL: stdin is /dev/null */
    const char *const *env;   /* extra "KEY=VALUE" for sbx ("KEY": no KEY), NULL-terminated */
    const char *stop_marker;  /* when stdout contains it, send stop_signal */
    int stop_signal;
    int keep_sandboxes;       /* sandboxes may outlive the run (create...) */
    int as_nobody;            /* run sbx as uid/gid 65534 (through setpriv) */
    double stop_after_secs;   /* > 0: send stop_signal this long after the start */
    const char *stop_file;    /* when this file exists, send stop_signal */
} cli_spec;

static double now_secs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
    char *bigger = realloc(*buf, *len + n + 1);

    cr_assert_not_null(bigger);
    memcpy(bigger + *len, data, n);
    *len += n;
    bigger[*len] = '\0';
    *buf = bigger;
}

/* The environment of sbx: ours, without TMPDIR, SBX_BACKEND,
 * SBX_STATE_DIR, XDG_STATE_HOME and what @extra sets, plus
 * TMPDIR=<the test's directory>, SBX_STATE_DIR=<the test's directory>/state
 * (unless @extra sets it) and @extra. */
static char **child_env(const char *const *extra)
{
    size_t n = 0, i, j = 0, n_extra = 0;
    char **env;
    static char tmpdir_var[PATH_MAX + 8], state_var[PATH_MAX + 32];
    int extra_state = 0;

    while (environ[n] != NULL)
        n++;
    while (extra != NULL && extra[n_extra] != NULL) {
        if (strncmp(extra[n_extra], "SBX_STATE_DIR=", 14) == 0)
            extra_state = 1;
        n_extra++;
    }
    env = calloc(n + n_extra + 3, sizeof *env);
    cr_assert_not_null(env);
    for (i = 0; i < n; i++) {
        int overridden = 0;

        if (strncmp(environ[i], "TMPDIR=", 7) == 0 ||
            strncmp(environ[i], "SBX_BACKEND=", 12) == 0 ||
            strncmp(environ[i], "SBX_STATE_DIR=", 14) == 0 ||
            strncmp(environ[i], "XDG_STATE_HOME=", 15) == 0)
            continue;
        /* A variable @extra sets replaces ours. */
        for (size_t k = 0; k < n_extra && !overridden; k++) {
            const char *eq = strchr(extra[k], '=');
            size_t klen = eq ? (size_t)(eq - extra[k]) + 1 : strlen(extra[k]);

            overridden = strncmp(environ[i], extra[k], klen) == 0;
        }
        if (!overridden)
            env[j++] = environ[i];
    }
    snprintf(tmpdir_var, sizeof tmpdir_var, "TMPDIR=%s", g_tmpdir);
    env[j++] = tmpdir_var;
    if (!extra_state) {
        snprintf(state_var, sizeof state_var, "SBX_STATE_DIR=%s/state", g_tmpdir);
        env[j++] = state_var;
    }
    for (i = 0; i < n_extra; i++)
        if (strchr(extra[i], '=') != NULL)
            env[j++] = (char *)extra[i];
    env[j] = NULL;
    return env;
}

/* Names of the sbx-local-* entries under the test's TMPDIR, space-separated
 * ("" when none). */
static void sandboxes_left(char *out, size_t size)
{
    DIR *dir = opendir(g_tmpdir);
    struct dirent *de;
    size_t len = 0;

    out[0] = '\0';
    cr_assert_not_null(dir, "opendir %s: %s", g_tmpdir, strerror(errno));
    while ((de = readdir(dir)) != NULL) {
        if (strncmp(de->d_name, "sbx-local-", 10) != 0)
            continue;
        len += (size_t)snprintf(out + len, size - len, "%s%s", len ? " " : "",
                                de->d_name);
        if (len >= size)
            break;
    }
    closedir(dir);
}

/* Runs sbx as @spec says and waits for it and for EOF on both pipes. */
static cli_run run_spec(const cli_spec *spec)
{
    const char *cli = getenv("SBX_CLI");
    cli_run r = { 0 };
    int out_pipe[2], err_pipe[2], in_pipe[2] = { -1, -1 };
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    char **argv, **env;
    size_t argc = 0, i, in_off = 0, in_len = 0;
    pid_t pid;
    int rc, wstatus = 0, exited = 0, stop_sent = 0;
    double start, deadline;
    char left[1024];

    cr_assert_not_null(cli, "SBX_CLI is not set (run the tests with make check)");
    while (spec->args[argc] != NULL)
        argc++;
    argv = calloc(argc + 7, sizeof *argv);
    cr_assert_not_null(argv);
    {
        static const char *const nobody[] = { "/usr/bin/setpriv", "--reuid=65534",
                                              "--regid=65534", "--clear-groups", "--" };
        size_t k = 0;

        if (spec->as_nobody)
            for (; k < 5; k++)
                argv[k] = (char *)nobody[k];
        argv[k] = (char *)cli;
        for (i = 0; i < argc; i++)
            argv[k + 1 + i] = (char *)spec->args[i];
    }
    env = child_env(spec->env);

    cr_assert_eq(pipe2(out_pipe, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(err_pipe, O_CLOEXEC), 0);
    posix_spawn_file_actions_init(&fa);
    if (spec->stdin_data != NULL) {
        cr_assert_eq(pipe2(in_pipe, O_CLOEXEC), 0);
        fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
        in_len = strlen(spec->stdin_data);
        posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
    } else {
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    }
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);

    /* sbx starts with an empty signal mask and default dispositions,
     * whatever the test runner set up (SIGPIPE is ignored here). */
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGHUP);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    signal(SIGPIPE, SIG_IGN);
    start = now_secs();
    rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    cr_assert_eq(rc, 0, "posix_spawn %s: %s", cli, strerror(rc));
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (in_pipe[0] >= 0)
        close(in_pipe[0]);
    if (in_pipe[1] >= 0 && in_len == 0) {
        close(in_pipe[1]);
        in_pipe[1] = -1;
    }

    r.out = calloc(1, 1);
    r.err = calloc(1, 1);
    cr_assert(r.out != NULL && r.err != NULL);
    deadline = start + RUN_DEADLINE_SECS;
    while (out_pipe[0] >= 0 || err_pipe[0] >= 0 || !exited) {
        struct pollfd pfd[3];
        char buf[4096];
        int n;

        pfd[0].fd = out_pipe[0];
        pfd[0].events = POLLIN;
        pfd[1].fd = err_pipe[0];
        pfd[1].events = POLLIN;
        pfd[2].fd = in_pipe[1];
        pfd[2].events = POLLOUT;
        n = poll(pfd, 3, 100);
        cr_assert(n >= 0 || errno == EINTR, "poll: %s", strerror(errno));
        for (i = 0; n > 0 && i < 2; i++) {
            ssize_t got;

            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            got = read(pfd[i].fd, buf, sizeof buf);
            if (got > 0) {
                if (i == 0)
                    append(&r.out, &r.out_len, buf, (size_t)got);
                else
                    append(&r.err, &r.err_len, buf, (size_t)got);
            } else if (got == 0 || errno != EINTR) {
                close(pfd[i].fd);
                if (i == 0)
                    out_pipe[0] = -1;
                else
                    err_pipe[0] = -1;
            }
        }
        if (n > 0 && in_pipe[1] >= 0 && (pfd[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t put = write(in_pipe[1], spec->stdin_data + in_off, in_len - in_off);

            if (put > 0)
                in_off += (size_t)put;
            if ((put < 0 && errno != EAGAIN && errno != EINTR) || in_off == in_len) {
                close(in_pipe[1]);
                in_pipe[1] = -1;
            }
        }
        if (((spec->stop_marker != NULL && strstr(r.out, spec->stop_marker) != NULL) ||
             (spec->stop_after_secs > 0 && now_secs() - start >= spec->stop_after_secs) ||
             (spec->stop_file != NULL && access(spec->stop_file, F_OK) == 0)) &&
            !stop_sent) {
            kill(pid, spec->stop_signal);
            stop_sent = 1;
            r.stop_secs = now_secs() - start;
        }
        if (!exited && waitpid(pid, &wstatus, WNOHANG) == pid) {
            exited = 1;
            /* Whatever still holds the pipes must let go soon. */
            if (deadline > now_secs() + 10)
                deadline = now_secs() + 10;
        }
        if (now_secs() > deadline) {
            if (!exited) {
                kill(pid, SIGKILL);
                waitpid(pid, &wstatus, 0);
            }
            cr_assert_fail("sbx %s did not finish within the deadline (exited: %d); "
                    "stdout: \"%s\" stderr: \"%s\"",
                    spec->args[0] ? spec->args[0] : "", exited, r.out, r.err);
        }
    }
    if (in_pipe[1] >= 0)
        close(in_pipe[1]);
    r.secs = now_secs() - start;
    if (WIFEXITED(wstatus))
        r.status = WEXITSTATUS(wstatus);
    else if (WIFSIGNALED(wstatus))
        r.status = 128 + WTERMSIG(wstatus);
    else
        r.status = -1;
    free(argv);
    free(env);

    if (!spec->keep_sandboxes) {
        sandboxes_left(left, sizeof left);
        cr_expect_str_empty(left, "sbx %s left sandbox directories in %s: %s",
                            spec->args[0] ? spec->args[0] : "", g_tmpdir, left);
    }
    return r;
}

/* Runs `sbx ARGS...` with stdin at EOF. */
#define SBX(...) run_args((const char *const[]){ __VA_ARGS__, NULL })

static cli_run run_args(const char *const *args)
{
    cli_spec spec = { 0 };

    spec.args = args;
    return run_spec(&spec);
}

static void free_run(cli_run *r)
{
    free(r->out);
    free(r->err);
}

/* Checks an exact exit status and stdout, and reports stderr if not. */
static void expect_run(const cli_run *r, int status, const char *out)
{
    cr_expect_eq(r->status, status, "exit status %d, expected %d; stderr: \"%s\"",
                 r->status, status, r->err);
    if (out != NULL) {
        cr_expect_eq(r->out_len, strlen(out), "stdout is %zu bytes, expected %zu: \"%s\"",
                     r->out_len, strlen(out), r->out);
        cr_expect_str_eq(r->out, out, "stdout \"%s\", expected \"%s\"; stderr: \"%s\"",
                         r->out, out, r->err);
    }
}

/* The tool's own failure: exit 125, nothing on stdout, an "sbx: " message
 * on stderr that contains each of the NULL-terminated @needles. */
static void expect_tool_failure(const cli_run *r, const char *const *needles)
{
    size_t i;

    cr_expect_eq(r->status, 125, "exit status %d, expected 125; stderr: \"%s\"",
                 r->status, r->err);
    cr_expect_eq(r->out_len, 0, "stdout not empty: \"%s\"", r->out);
    cr_expect(strncmp(r->err, "sbx: ", 5) == 0, "stderr does not start with \"sbx: \": \"%s\"",
              r->err);
    for (i = 0; needles != NULL && needles[i] != NULL; i++)
        cr_expect(strstr(r->err, needles[i]) != NULL, "stderr lacks \"%s\": \"%s\"",
                  needles[i], r->err);
}

#define EXPECT_TOOL_FAILURE(r, ...) \
    expect_tool_failure((r), (const char *const[]){ __VA_ARGS__, NULL })

/* Runs git with @argv and asserts it succeeded. */
static void run_git(const char *const *argv)
{
    pid_t pid;
    int rc, wstatus;

    rc = posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv, environ);
    cr_assert_eq(rc, 0, "posix_spawnp %s: %s", argv[0], strerror(rc));
    cr_assert_eq(waitpid(pid, &wstatus, 0), pid);
    cr_assert(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0, "%s %s failed",
              argv[0], argv[1]);
}

/* ------------------------------------------------------------- sbx run */

Test(cli, run_streams_stdout_and_stderr_separately)
{
    cli_run r = SBX("run", "--", "sh", "-c", "echo out; echo err >&2; exit 3");

    cr_expect_eq(r.status, 3, "exit status %d; stderr: \"%s\"", r.status, r.err);
    cr_expect_str_eq(r.out, "out\n");
    cr_expect_str_eq(r.err, "err\n");
    free_run(&r);
}

Test(cli, run_env_value_is_literal)
{
    cli_run r = SBX("run", "-e", "A=x y", "--", "sh", "-c", "printf %s \"$A\"");

    expect_run(&r, 0, "x y");
    free_run(&r);
}

Test(cli, run_env_value_keeps_equals_and_quotes)
{
    cli_run r = SBX("run", "-e", "A='$HOME'=1", "--", "sh", "-c", "printf %s \"$A\"");

    expect_run(&r, 0, "'$HOME'=1");
    free_run(&r);
}

Test(cli, run_exit_code_of_signal_is_128_plus_n)
{
    cli_run r = SBX("run", "--", "/bin/sh", "-c", "kill -9 $$");

    expect_run(&r, 137, "");
    free_run(&r);
}

Test(cli, run_passes_the_command_flags_untouched)
{
    cli_run r = SBX("run", "--", "printf", "%s|", "-e", "--cpu", "--", "-b", "a b");

    expect_run(&r, 0, "-e|--cpu|--|-b|a b|");
    free_run(&r);
}

Test(cli, run_without_double_dash_stops_at_the_command)
{
    cli_run r = SBX("run", "-e", "K=v", "printf", "%s|", "-e", "x");

    expect_run(&r, 0, "-e|x|");
    free_run(&r);
}

Test(cli, run_argv_is_not_joined_into_a_shell_string)
{
    cli_run r = SBX("run", "--", "printf", "%s\n", "$(echo no)", "a;b");

    expect_run(&r, 0, "$(echo no)\na;b\n");
    free_run(&r);
}

Test(cli, run_stdin_is_at_eof)
{
    cli_spec spec = { 0 };
    cli_run r;

    spec.args = (const char *const[]){ "run", "--", "sh", "-c", "wc -c", NULL };
    spec.stdin_data = "this must not reach the command\n";
    r = run_spec(&spec);
    cr_expect_eq(r.status, 0, "stderr: \"%s\"", r.err);
    cr_expect_eq(atoi(r.out), 0, "the command read \"%s\" bytes", r.out);
    free_run(&r);
}

Test(cli, run_command_not_found_is_127)
{
    cli_run r = SBX("run", "--", "sbx-no-such-program-here");

    cr_expect_eq(r.status, 127, "exit status %d; stderr: \"%s\"", r.status, r.err);
    cr_expect_eq(r.out_len, 0);
    free_run(&r);
}

/* A docker user's `sbx run IMAGE COMMAND`: the image was run as the
 * command; the status stays 127 and a hint names --image. Not for a
 * command without arguments, a path, one given --image, or one this host
 * has (its 127 came from inside). */
Test(cli, run_of_an_image_name_hints_at_image)
{
    cli_run r = SBX("run", "sbx-no-such-image", "echo", "hi");

    cr_expect_eq(r.status, 127, "exit status %d; stderr: \"%s\"", r.status, r.err);
    cr_expect_eq(r.out_len, 0);
    cr_expect_str_eq(r.err, "sbx-no-such-image: command not found\n"
                            "sbx: hint: sbx run takes the command first, so "
                            "\"sbx-no-such-image\" was run as a program and not found; to "
                            "start from an image, give --image=sbx-no-such-image (on a "
                            "backend that takes one, as -b docker does)\n");
    free_run(&r);

    r = SBX("run", "--", "sbx-no-such-program-here");
    cr_expect_eq(r.status, 127);
    cr_expect_str_eq(r.err, "sbx-no-such-program-here: command not found\n");
    free_run(&r);

    r = SBX("run", "./sbx-no-such-image", "echo", "hi");
    cr_expect_eq(r.status, 127);
    cr_expect_eq(strstr(r.err, "hint") == NULL, 1, "stderr: \"%s\"", r.err);
    free_run(&r);

    r = SBX("run", "sh", "-c", "exit 127");
    cr_expect_eq(r.status, 127);
    cr_expect_str_eq(r.err, "");
    free_run(&r);
}

Test(cli, run_sandbox_is_made_under_tmpdir_and_removed)
{
    cli_run r = SBX("run", "--", "sh", "-c", "printf %s \"$SANDBOX_ROOT\"");
    char prefix[PATH_MAX + 16];
    struct stat st;

    cr_expect_eq(r.status, 0, "stderr: \"%s\"", r.err);
    snprintf(prefix, sizeof prefix, "%s/sbx-local-", g_tmpdir);
    cr_expect(strncmp(r.out, prefix, strlen(prefix)) == 0,
              "SANDBOX_ROOT \"%s\" is not under %s", r.out, prefix);
    cr_expect(r.out_len > 0 && stat(r.out, &st) < 0 && errno == ENOENT,
              "the sandbox root %s still exists", r.out);
    free_run(&r);
}

Test(cli, run_timeout_exits_124)
{
    cli_run r = SBX("run", "--timeout", "1", "--", "sleep", "30");

    cr_expect_eq(r.status, 124, "exit status %d; stderr: \"%s\"", r.status, r.err);
    cr_expect(r.secs < 15, "took %.1f s", r.secs);
    free_run(&r);
}

Test(cli, run_sigterm_destroys_the_sandbox)
{
    cli_spec spec = { 0 };
    cli_run r;
    struct stat st;
    char *nl;

    spec.args = (const char *const[]){
        "run", "--", "sh", "-c", "echo \"$SANDBOX_ROOT\"; sleep 60; echo late", NULL };
    spec.stop_marker = "\n";
    spec.stop_signal = SIGTERM;
    r = run_spec(&spec);
    cr_expect_eq(r.status, 128 + SIGTERM, "exit status %d; stderr: \"%s\"", r.status,
                 r.err);
    cr_expect(r.secs < 30, "took %.1f s", r.secs);
    cr_expect(strstr(r.out, "late") == NULL);
    nl = strchr(r.out, '\n');
    if (nl != NULL)
        *nl = '\0';
    cr_expect(r.out[0] != '\0' && stat(r.out, &st) < 0 && errno == ENOENT,
              "the sandbox root \"%s\" still exists", r.out);
    free_run(&r);
}

Test(cli, run_sigint_destroys_the_sandbox)
{
    cli_spec spec = { 0 };
    cli_run r;

    spec.args = (const char *const[]){ "run", "--", "sh", "-c", "echo go; sleep 60", NULL };
    spec.stop_marker = "go\n";
    spec.stop_signal = SIGINT;
    r = run_spec(&spec);
    cr_expect_eq(r.status, 128 + SIGINT, "exit status %d; stderr: \"%s\"", r.status,
                 r.err);
    cr_expect(r.secs < 30, "took %.1f s", r.secs);
    free_run(&r);
}

Test(cli, run_missing_backend_is_125)
{
    cli_run r = SBX("run", "-b", "nosuchbackend", "--", "true");

    EXPECT_TOOL_FAILURE(&r, "backend_not_installed", "nosuchbackend");
    free_run(&r);
}

Test(cli, run_backend_from_environment_and_b_overrides_it)
{
    cli_spec spec = { 0 };
    cli_run r;

    spec.env = (const char *const[]){ "SBX_BACKEND=nosuchbackend", NULL };
    spec.args = (const char *const[]){ "run", "--", "true", NULL };
    r = run_spec(&spec);
    EXPECT_TOOL_FAILURE(&r, "backend_not_installed", "nosuchbackend");
    free_run(&r);

    spec.args = (const char *const[]){ "run", "-b", "local", "--", "echo", "ok", NULL };
    r = run_spec(&spec);
    expect_run(&r, 0, "ok\n");
    free_run(&r);
}

/* -e KEY without a value is docker's: sbx's own KEY (spaces, '=' and all),
 * and nothing at all when sbx has no KEY; an empty KEY is an error naming
 * the value, for run, create and exec alike. */
Test(cli, run_env_key_alone_passes_sbx_own_value_as_docker)
{
    cli_spec spec = { 0 };
    cli_run r;

    spec.env = (const char *const[]){ "SBX_TEST_PASSED=a b=c", NULL };
    spec.args = (const char *const[]){ "run", "-e", "SBX_TEST_PASSED", "-e", "SBX_TEST_UNSET",
                                       "--", "sh", "-c",
                                       "printf '[%s][%s]' \"$SBX_TEST_PASSED\" "
                                       "\"${SBX_TEST_UNSET-unset}\"", NULL };
    r = run_spec(&spec);
    expect_run(&r, 0, "[a b=c][unset]");
    free_run(&r);

    r = SBX("run", "-e", "=x", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "\"=x\"", "KEY=VALUE or KEY");
    free_run(&r);
    r = SBX("run", "-e", "", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "\"\"", "KEY=VALUE or KEY");
    free_run(&r);
}

Test(cli, create_and_exec_env_key_alone_pass_sbx_own_value)
{
    cli_spec spec = { 0 };
    cli_run r;
    char id[256];

    spec.env = (const char *const[]){ "SBX_TEST_AT_CREATE=made", "SBX_TEST_AT_EXEC=ran",
                                      NULL };
    spec.keep_sandboxes = 1;
    spec.args = (const char *const[]){ "create", "-e", "SBX_TEST_AT_CREATE", NULL };
    r = run_spec(&spec);
    cr_assert_eq(r.status, 0, "create: %s", r.err);
    snprintf(id, sizeof id, "%.*s", (int)strcspn(r.out, "\n"), r.out);
    free_run(&r);
    spec.args = (const char *const[]){ "exec", "-e", "SBX_TEST_AT_EXEC", id, "--", "sh", "-c",
                                       "printf '%s %s' \"$SBX_TEST_AT_CREATE\" "
                                       "\"$SBX_TEST_AT_EXEC\"", NULL };
    r = run_spec(&spec);
    expect_run(&r, 0, "made ran");
    free_run(&r);
    r = SBX("rm", id);
    cr_assert_eq(r.status, 0, "rm: %s", r.err);
    free_run(&r);
}

/* A lifetime longer than local's longest is refused naming the value as
 * given (not rounded to 1e+11), the limit, and invalid_argument. */
Test(cli, create_timeout_beyond_the_longest_lifetime_names_it)
{
    cli_run r = SBX("create", "--timeout", "99999999999");

    EXPECT_TOOL_FAILURE(&r, "timeout_secs=99999999999 is longer than the local backend's "
                        "longest lifetime (2147483 s)", "code=invalid_argument",
                        "value=99999999999");
    free_run(&r);
}

/* run's sandbox lives 10 s past its command's --timeout: a --timeout that
 * the backend's longest lifetime takes, but not with those 10 s, is
 * refused, and sbx says where the value refused comes from. */
Test(cli, run_timeout_near_the_longest_lifetime_says_what_was_added)
{
    cli_run r = SBX("run", "--timeout", "2147480", "--", "true");

    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, "sbx: timeout_secs=2147490 is longer than the local backend's "
                            "longest lifetime (2147483 s) [code=invalid_argument; backend=local; "
                            "op=create; option=timeout_secs; value=2147490]\n"
                            "sbx: the lifetime asked for was --timeout 2147480 plus the 10 s the "
                            "sandbox is kept past it, so that the timeout ends the command\n");
    free_run(&r);
}

/* --rm as docker users type it: run destroys its sandbox anyway, so it is
 * accepted (and nothing is left); create, whose sandbox outlives sbx,
 * refuses it naming `sbx rm`. */
Test(cli, run_accepts_rm_and_create_refuses_it)
{
    char left[4096];
    cli_run r = SBX("run", "--rm", "--", "echo", "removed");

    expect_run(&r, 0, "removed\n");
    free_run(&r);
    sandboxes_left(left, sizeof left);
    cr_assert_str_eq(left, "");
    r = SBX("create", "--rm");
    EXPECT_TOOL_FAILURE(&r, "--rm is for `sbx run`", "sbx rm ID");
    free_run(&r);
}

Test(cli, run_env_bad_key_is_125)
{
    cli_run r = SBX("run", "-e", "1BAD=x", "--", "true");

    EXPECT_TOOL_FAILURE(&r, "1BAD", "invalid_argument");
    free_run(&r);
}

Test(cli, run_unmakeable_workdir_is_125)
{
    char file[PATH_MAX + 8], dir[PATH_MAX + 16];
    int fd;

    snprintf(file, sizeof file, "%s/a-file", g_tmpdir);
    fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    close(fd);
    snprintf(dir, sizeof dir, "%s/sub", file);
    cli_run r = SBX("run", "-w", dir, "--", "true");

    EXPECT_TOOL_FAILURE(&r, dir, "a component is not a directory", "invalid_argument");
    free_run(&r);
}

Test(cli, run_missing_workdir_is_made)
{
    char dir[PATH_MAX + 16], expected[PATH_MAX + 32];
    struct stat st;

    snprintf(dir, sizeof dir, "%s/new/wd", g_tmpdir);
    cli_run r = SBX("run", "-w", dir, "--", "pwd");
    snprintf(expected, sizeof expected, "%s\n", dir);
    expect_run(&r, 0, expected);
    cr_expect_eq(stat(dir, &st), 0, "%s is gone", dir);
    free_run(&r);
}

Test(cli, run_workdir_is_used_and_kept)
{
    char dir[PATH_MAX + 8], expected[PATH_MAX + 32];
    struct stat st;
    cli_run r;

    snprintf(dir, sizeof dir, "%s/wd", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0700), 0);
    r = SBX("run", "-w", dir, "--", "sh", "-c", "pwd; echo x > kept.txt");
    snprintf(expected, sizeof expected, "%s\n", dir);
    expect_run(&r, 0, expected);
    snprintf(expected, sizeof expected, "%s/kept.txt", dir);
    cr_expect_eq(stat(expected, &st), 0, "%s is gone", expected);
    free_run(&r);
}

Test(cli, run_bad_numbers_are_125)
{
    cli_run r = SBX("run", "--cpu", "abc", "--", "true");

    EXPECT_TOOL_FAILURE(&r, "invalid --cpu value \"abc\"");
    free_run(&r);
    r = SBX("run", "--memory", "12x", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "invalid --memory value \"12x\"");
    free_run(&r);
    r = SBX("run", "--timeout", "-1", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "invalid --timeout value \"-1\"");
    free_run(&r);
}

/* run --no-lifetime: the sandbox has no lifetime and the command no
 * timeout but --timeout's; a backend whose sandbox would outlive a killed
 * sbx refuses it with a configuration error naming the option and why,
 * and sbx says where the request came from. */
Test(cli, run_no_lifetime)
{
    cli_run r = SBX("run", "--no-lifetime", "--", "sh", "-c", "echo ok");

    cr_expect_eq(r.status, 0, "status %d: %s", r.status, r.err);
    cr_expect_str_eq(r.out, "ok\n");
    cr_expect_str_empty(r.err);
    free_run(&r);
    r = SBX("run", "--no-lifetime", "--timeout", "1", "--", "sleep", "30");
    cr_expect_eq(r.status, 124, "status %d: %s", r.status, r.err);
    cr_expect(r.secs < 10, "took %.1f s", r.secs);
    free_run(&r);
    r = SBX("run", "--no-lifetime", "-b", "docker", "--", "true");
    cr_expect_eq(r.status, 125);
    cr_expect_str_empty(r.out);
    if (strstr(r.err, "backend_not_installed") == NULL)   /* a build with docker's plugin */
        cr_expect_str_eq(r.err,
                     "sbx: timeout_secs: backend \"docker\" cannot end an attached sandbox when "
                     "its owners end, so it needs a lifetime (no lifetime, SBX_TIMEOUT_NONE, is "
                     "for local, bubblewrap and safehouse) [code=configuration; backend=docker; "
                     "op=create; reason=backend; option=timeout_secs]\nsbx: --no-lifetime asked "
                     "for no lifetime; give --timeout SECONDS instead\n");
    free_run(&r);
    r = SBX("exec-code", "--no-lifetime", "print(1)");
    cr_expect_eq(r.status, 125);
    free_run(&r);
}

/* A number out of range is refused naming the value and what is allowed:
 * what sbx_options_set_timeout_secs, _set_cpu and _set_memory_mb accept. */
Test(cli, bad_numbers_name_the_allowed_range)
{
    static const struct {
        const char *args[8];
        const char *err;
    } cases[] = {
        { { "create", "--timeout", "0" },
          "sbx: invalid --timeout value \"0\": expected seconds, a finite number greater than 0 "
          "(fractions allowed); a sandbox of create outlives sbx, so it needs a lifetime (`sbx "
          "run --no-lifetime` runs a command in a sandbox without one)\n"
          "sbx: see 'sbx create --help'\n" },
        { { "run", "--timeout=0", "--", "true" },
          "sbx: invalid --timeout value \"0\": expected seconds, a finite number greater than 0 "
          "(fractions allowed); for no lifetime, --no-lifetime (local, bubblewrap, safehouse: "
          "the sandbox then ends with sbx)\nsbx: see 'sbx run --help'\n" },
        { { "create", "--no-lifetime" },
          "sbx: --no-lifetime is refused: a sandbox of create outlives sbx (it is detached), and "
          "only its lifetime ends it; give --timeout SECONDS, or use `sbx run --no-lifetime`, "
          "whose sandbox ends with sbx\nsbx: see 'sbx create --help'\n" },

        { { "exec-code", "--timeout", "inf", "print(1)" },
          "sbx: invalid --timeout value \"inf\": expected seconds, a finite number greater than 0 "
          "(fractions allowed)\nsbx: see 'sbx exec-code --help'\n" },
        { { "exec", "--timeout", "-2", "someid", "true" },
          "sbx: invalid --timeout value \"-2\": expected seconds, a finite number greater than 0 "
          "(fractions allowed)\nsbx: see 'sbx exec --help'\n" },
        { { "create", "--cpu", "0" },
          "sbx: invalid --cpu value \"0\": expected vCPUs, a finite number greater than 0 "
          "(fractions allowed)\nsbx: see 'sbx create --help'\n" },
        { { "run", "--memory", "0.5", "--", "true" },
          "sbx: invalid --memory value \"0.5\": expected MiB, a whole number from 1 to "
          "9223372036854775807\nsbx: see 'sbx run --help'\n" },
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_run r = run_args(cases[i].args);

        cr_expect_eq(r.status, 125, "sbx %s %s %s: exit status %d", cases[i].args[0],
                     cases[i].args[1], cases[i].args[2], r.status);
        cr_expect_str_empty(r.out, "sbx %s: stdout \"%s\"", cases[i].args[0], r.out);
        cr_expect_str_eq(r.err, cases[i].err, "sbx %s %s %s", cases[i].args[0],
                         cases[i].args[1], cases[i].args[2]);
        free_run(&r);
    }
    /* Nothing was recorded: the state directory was not even made. */
    {
        char dir[PATH_MAX + 16];
        struct stat st;

        snprintf(dir, sizeof dir, "%s/state", g_tmpdir);
        cr_expect_neq(stat(dir, &st), 0, "%s exists", dir);
    }
}

Test(cli, run_cpu_and_memory_are_refused_on_local)
{
    cli_run r = SBX("run", "--cpu", "2", "--", "true");

    EXPECT_TOOL_FAILURE(&r, "configuration");
    free_run(&r);
    r = SBX("run", "--memory", "512", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "configuration");
    free_run(&r);
}

Test(cli, run_usage_errors_are_125)
{
    cli_run r = SBX("run");

    EXPECT_TOOL_FAILURE(&r, "no command");
    free_run(&r);
    r = SBX("run", "--no-such-option", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "--no-such-option");
    free_run(&r);
    r = SBX("run", "-e");
    EXPECT_TOOL_FAILURE(&r, "-e");
    free_run(&r);
    r = SBX("run", "--git-ref", "main", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "--git-repo");
    free_run(&r);
}

/* -v is --verbose: docker's -v SOURCE:/TARGET is refused, not run as the
 * command; a command that merely holds ":/" after -v -- runs. */
Test(cli, run_v_with_a_docker_volume_says_it_is_verbose)
{
    static const char msg[] =
        "sbx: -v is --verbose (the preset setup's output), not docker's volume: \"/tmp:/src\" "
        "is not mounted; copy a file in with --file LOCAL:SANDBOX_PATH, a directory with "
        "`sbx cp -r` into a created sandbox\n";
    char *want;
    cli_run r = SBX("run", "-v", "/tmp:/src", "--", "ls", "/src");

    cr_assert(asprintf(&want, "%ssbx: see 'sbx run --help'\n", msg) > 0);
    cr_expect_eq(r.status, 125);
    cr_expect_eq(r.out_len, 0, "stdout \"%s\"", r.out);
    cr_expect_str_eq(r.err, want);
    free(want);
    free_run(&r);
    r = SBX("create", "-v", "/tmp:/src");
    cr_assert(asprintf(&want, "%ssbx: see 'sbx create --help'\n", msg) > 0);
    cr_expect_eq(r.status, 125);
    cr_expect_eq(r.out_len, 0, "stdout \"%s\"", r.out);
    cr_expect_str_eq(r.err, want);
    free(want);
    free_run(&r);
    r = SBX("run", "-v", "--", "echo", "a:/b");
    expect_run(&r, 0, "a:/b\n");
    free_run(&r);
}

Test(cli, run_git_repo_is_cloned_into_the_sandbox)
{
    char repo[PATH_MAX + 16], file[PATH_MAX + 32];
    FILE *f;
    cli_run r;

    snprintf(repo, sizeof repo, "%s/hellorepo", g_tmpdir);
    cr_assert_eq(mkdir(repo, 0700), 0);
    snprintf(file, sizeof file, "%s/hello.txt", repo);
    f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs("hi\n", f);
    cr_assert_eq(fclose(f), 0);
    run_git((const char *const[]){ "git", "-C", repo, "init", "-q", NULL });
    run_git((const char *const[]){ "git", "-C", repo, "add", "hello.txt", NULL });
    run_git((const char *const[]){ "git", "-C", repo, "-c", "user.email=t@e",
                                      "-c", "user.name=t", "commit", "-qm", "init",
                                      NULL });

    r = SBX("run", "--git-repo", repo, "--", "sh", "-c",
            "cat \"$SANDBOX_ROOT/hellorepo/hello.txt\"");
    expect_run(&r, 0, "hi\n");
    free_run(&r);
}

Test(cli, run_git_repo_that_fails_to_clone_is_125)
{
    char repo[PATH_MAX + 16];
    cli_run r;

    snprintf(repo, sizeof repo, "%s/no-such-repo", g_tmpdir);
    r = SBX("run", "--git-repo", repo, "--", "true");
    EXPECT_TOOL_FAILURE(&r, "creation_failed");
    free_run(&r);
}

/* ------------------------------------------------------- sbx exec-code */

Test(cli, exec_code_python_by_default)
{
    cli_run r = SBX("exec-code", "print(6*7)");

    expect_run(&r, 0, "42\n");
    free_run(&r);
}

Test(cli, exec_code_reads_dash_from_stdin)
{
    cli_spec spec = { 0 };
    cli_run r;

    spec.args = (const char *const[]){ "exec-code", "-", NULL };
    spec.stdin_data = "print(1+1)\n";
    r = run_spec(&spec);
    expect_run(&r, 0, "2\n");
    free_run(&r);
}

Test(cli, exec_code_sh)
{
    cli_run r = SBX("exec-code", "-l", "sh", "echo $((2+3))");

    expect_run(&r, 0, "5\n");
    free_run(&r);
}

/* An unknown language is refused before any sandbox is made: on a backend
 * that does not exist the error is still the language's. */
Test(cli, exec_code_unknown_language_is_refused_before_a_create)
{
    cli_run r = SBX("exec-code", "-b", "nosuchbackend", "-l", "perl", "print 1");

    cr_assert_eq(r.status, 125, "status %d (%s)", r.status, r.err);
    cr_assert_str_eq(r.out, "");
    cr_assert_str_eq(r.err, "sbx: unknown language \"perl\" (known: python, bash, sh, node, "
                            "javascript, typescript, ruby, go)\nsbx: see 'sbx exec-code --help'\n");
    free_run(&r);
}

Test(cli, exec_code_exit_status_and_stderr)
{
    cli_run r = SBX("exec-code", "import sys; sys.stderr.write('e'); sys.exit(4)");

    expect_run(&r, 4, "");
    cr_expect_str_eq(r.err, "e");
    free_run(&r);
}

Test(cli, exec_code_unknown_language_is_125)
{
    cli_run r = SBX("exec-code", "-l", "cobol", "x");

    EXPECT_TOOL_FAILURE(&r, "cobol");
    free_run(&r);
}

Test(cli, exec_code_without_code_is_125)
{
    cli_run r = SBX("exec-code");

    EXPECT_TOOL_FAILURE(&r, "no code");
    free_run(&r);
}

/* -------------------------------------------------------- sbx backends */

Test(cli, backends_lists_local_ok)
{
    cli_run r = SBX("backends");
    char *line, *save = NULL;
    int found = 0;

    cr_expect_eq(r.status, 0, "stderr: \"%s\"", r.err);
    for (line = strtok_r(r.out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char name[64], version[64], status[64];

        if (sscanf(line, "%63s %63s %63s", name, version, status) == 3 &&
            strcmp(name, "local") == 0 && strcmp(status, "ok") == 0)
            found = 1;
    }
    cr_expect(found, "no \"local ... ok\" row in the table");
    free_run(&r);
}

static void set_path(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The row of backend @name in the `sbx backends` table @out (new string,
 * without its newline), or NULL. */
static char *backend_row(const char *out, const char *name)
{
    size_t n = strlen(name);
    const char *p = out;

    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, '\n');

        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strndup(p, end ? (size_t)(end - p) : strlen(p));
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

Test(cli, backends_status_says_what_the_probe_found)
{
    cli_spec spec = { 0 };
    const char *env[] = { "DOCKER_HOST=unix:///nonexistent/sbx-test.sock", NULL };
    cli_run r;
    char *row;

    spec.args = (const char *const[]){ "backends", NULL };
    spec.env = env;
    r = run_spec(&spec);
    cr_expect_eq(r.status, 0, "stderr: \"%s\"", r.err);
    row = backend_row(r.out, "docker");
    cr_assert_not_null(row, "no docker row: %s", r.out);
    static const char docker[] = "docker      0.1.0    unavailable: cannot reach the Docker "
                                 "Engine at unix:///nonexistent/sbx-test.sock: ";
    cr_expect(strncmp(row, docker, sizeof docker - 1) == 0, "row \"%s\"", row);
    free(row);
    row = backend_row(r.out, "safehouse");
    cr_assert_not_null(row, "no safehouse row: %s", r.out);
#ifdef __APPLE__
    cr_expect(strstr(row, "  ok") != NULL || strstr(row, "unavailable: ") != NULL, "%s", row);
#else
    static const char safehouse[] = "safehouse   0.1.0    unavailable: safehouse backend needs "
                                    "macOS (sandbox-exec) and the safehouse CLI";
    cr_expect(strncmp(row, safehouse, sizeof safehouse - 1) == 0, "row \"%s\"", row);
#endif
    free(row);
    row = backend_row(r.out, "local");
    cr_expect_str_eq(row, "local       0.1.0    ok");
    free(row);
    free_run(&r);

    /* No plugin at all: said on stderr, non-zero. */
    const char *none[] = { "SBX_PLUGIN_PATH=/nonexistent/sbx-plugins", NULL };
    char want[PATH_MAX + 128];
    set_path(want, sizeof want, "sbx: no backend plugin found (searched SBX_PLUGIN_PATH and "
             "%s)\n", sbx_plugin_dir());
    spec.env = none;
    r = run_spec(&spec);
    expect_run(&r, 125, "");
    cr_expect_str_eq(r.err, want);
    free_run(&r);
    spec.args = (const char *const[]){ "backends", "--json", NULL };
    r = run_spec(&spec);
    expect_run(&r, 125, "[\n]\n");
    cr_expect_str_eq(r.err, want);
    free_run(&r);
}

/* The path searched and the backends installed are in the message; the
 * bracket does not repeat them (the error's context still holds them). */
Test(cli, unknown_backend_lists_the_installed_ones)
{
    cli_spec spec = { 0 };
    char path[PATH_MAX], var[PATH_MAX + 32], want[4 * PATH_MAX];
    const char *env[] = { var, NULL };
    cli_run r;

    set_path(path, sizeof path, "%s", getenv("SBX_PLUGIN_PATH"));
    *strchr(path, ':') = '\0';   /* plugins/local/.libs only */
    set_path(var, sizeof var, "SBX_PLUGIN_PATH=%s", path);
    spec.env = env;
    spec.args = (const char *const[]){ "run", "-b", "nosuchbackend", "--", "true", NULL };
    r = run_spec(&spec);
    set_path(want, sizeof want, "sbx: backend \"nosuchbackend\" is not installed: no "
             "libsbx-nosuchbackend.so in %s:%s; installed: bubblewrap, local, safehouse "
             "[code=backend_not_installed; backend=nosuchbackend; op=client_new]\n", path,
             sbx_plugin_dir());
    expect_run(&r, 125, "");
    cr_expect_str_eq(r.err, want);
    free_run(&r);
    /* A backend this project ships: its package is named too. */
    spec.args = (const char *const[]){ "run", "-b", "e2b", "--", "true", NULL };
    r = run_spec(&spec);
    set_path(want, sizeof want, "sbx: backend \"e2b\" is not installed: no libsbx-e2b.so in "
             "%s:%s; installed: bubblewrap, local, safehouse (install the libsbx-e2b package "
             "or configure with --enable-plugin-e2b) [code=backend_not_installed; backend=e2b; "
             "op=client_new; package=libsbx-e2b]\n", path, sbx_plugin_dir());
    expect_run(&r, 125, "");
    cr_expect_str_eq(r.err, want);
    free_run(&r);
}

/* `sbx run true` with SBX_DEBUG=@value: its stderr (new string). */
static char *debug_stderr(const char *value)
{
    char var[64];
    const char *env[] = { var, NULL };
    cli_spec spec = { 0 };
    cli_run r;
    char *err;

    set_path(var, sizeof var, "SBX_DEBUG=%s", value);
    spec.args = (const char *const[]){ "run", "--", "true", NULL };
    spec.env = env;
    r = run_spec(&spec);
    cr_expect_eq(r.status, 0, "SBX_DEBUG=%s: status %d", value, r.status);
    cr_expect_eq(r.out_len, 0);
    err = strdup(r.err);
    free_run(&r);
    return err;
}

Test(cli, sbx_debug_1_prints_the_plugins_log)
{
    static const char *const all[] = { "1", "debug", "DEBUG", "yes", "3" };
    static const char *const none[] = { "0", "", "error", "warning" };

    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char *err = debug_stderr(all[i]);
        /* The plugin's own messages (it runs in its plugin host) and the
         * library's, one per line. */
        cr_expect(strncmp(err, "sbx[local]: loaded ", 19) == 0, "SBX_DEBUG=%s: \"%s\"", all[i],
                  err);
        cr_expect(strstr(err, "\nsbx[local]: created sbx-local-") != NULL,
                  "SBX_DEBUG=%s: \"%s\"", all[i], err);
        cr_expect(strstr(err, "\nsbx[local]: destroyed sbx-local-") != NULL,
                  "SBX_DEBUG=%s: \"%s\"", all[i], err);
        free(err);
    }
    /* Nothing goes wrong in this run: no error or warning to print. */
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        char *err = debug_stderr(none[i]);
        cr_expect_str_empty(err, "SBX_DEBUG=%s: \"%s\"", none[i], err);
        free(err);
    }
}

/* The mode plugins run in for this test run: SBX_PLUGIN_MODE, or the
 * default, out of process. */
static const char *default_mode(void)
{
    const char *m = getenv("SBX_PLUGIN_MODE");

    return m && *m ? m : "outofprocess";
}

static json_object *find_backend(json_object *array, const char *name)
{
    size_t i, n = json_object_array_length(array);

    for (i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(array, i), *v;

        if (json_object_object_get_ex(o, "name", &v) &&
            strcmp(json_object_get_string(v), name) == 0)
            return o;
    }
    return NULL;
}

Test(cli, backends_json)
{
    static const char *const broken[] = {
        "badabi", "nosymbol", "nulldesc", "shortdesc", "newminor"
    };
    static const char *const fields[] = {
        "name", "path", "version", "description", "abi", "usable", "available", "problem",
        "caps", "probed_caps", "mode"
    };
    cli_run r = SBX("backends", "--json");
    enum json_tokener_error jerr;
    json_object *root, *local, *v;
    size_t i, j;

    cr_assert_eq(r.status, 0, "stderr: \"%s\"", r.err);
    root = json_tokener_parse_verbose(r.out, &jerr);
    cr_assert_not_null(root, "not JSON (%s): %s", json_tokener_error_desc(jerr), r.out);
    cr_assert(json_object_is_type(root, json_type_array));
    for (i = 0; i < json_object_array_length(root); i++) {
        json_object *o = json_object_array_get_idx(root, i);

        cr_assert(json_object_is_type(o, json_type_object));
        for (j = 0; j < sizeof fields / sizeof fields[0]; j++)
            cr_expect(json_object_object_get_ex(o, fields[j], NULL),
                      "entry %zu lacks \"%s\"", i, fields[j]);
    }

    local = find_backend(root, "local");
    cr_assert_not_null(local, "no \"local\" entry: %s", r.out);
    cr_expect(json_object_object_get_ex(local, "usable", &v) &&
              json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v));
    cr_expect(json_object_object_get_ex(local, "problem", &v) && v == NULL);
    cr_expect(json_object_object_get_ex(local, "available", &v) &&
              json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v));
    cr_expect(json_object_object_get_ex(local, "caps", &v) &&
              json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0);
    cr_expect(json_object_object_get_ex(local, "probed_caps", &v) &&
              json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0);
    cr_expect(json_object_object_get_ex(local, "mode", &v) &&
              strcmp(json_object_get_string(v), default_mode()) == 0);

    for (i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        json_object *o = find_backend(root, broken[i]);

        cr_expect_not_null(o, "no \"%s\" entry", broken[i]);
        if (o == NULL)
            continue;
        cr_expect(json_object_object_get_ex(o, "usable", &v) &&
                  json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v),
                  "%s is usable", broken[i]);
        cr_expect(json_object_object_get_ex(o, "problem", &v) &&
                  json_object_is_type(v, json_type_string) &&
                  json_object_get_string_len(v) > 0,
                  "%s has no problem", broken[i]);
        cr_expect(json_object_object_get_ex(o, "probed_caps", &v) && v == NULL);
    }
    json_object_put(root);
    free_run(&r);
}

/* ------------------------------------------ sandboxes that outlive sbx */

/* snprintf that asserts the result fits. */
static void set_path(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_path(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < size, "path too long: %s", buf);
}

/* Runs `sbx ARGS...` allowing sandboxes to outlive the run. */
#define SBX_KEEP(...) run_keep((const char *const[]){ __VA_ARGS__, NULL }, NULL)
/* The same with extra environment variables (a NULL-terminated array). */
#define SBX_KEEP_ENV(env, ...) run_keep((const char *const[]){ __VA_ARGS__, NULL }, (env))

static cli_run run_keep(const char *const *args, const char *const *env)
{
    cli_spec spec = { 0 };

    spec.args = args;
    spec.env = env;
    spec.keep_sandboxes = 1;
    return run_spec(&spec);
}

/* Runs `sbx ARGS...` (keeping sandboxes) and checks its exact status,
 * stdout and stderr. */
static void expect_keep(const char *const *args, int status, const char *out, const char *err)
{
    cli_run r = run_keep(args, NULL);

    expect_run(&r, status, out);
    cr_expect_str_eq(r.err, err, "sbx %s: stderr \"%s\", expected \"%s\"", args[0], r.err, err);
    free_run(&r);
}

#define EXPECT_KEEP(status, out, err, ...) \
    expect_keep((const char *const[]){ __VA_ARGS__, NULL }, (status), (out), (err))

/* Runs `sbx create ARGS...` (with @env); asserts that it printed exactly
 * one line, a local sandbox id, and returns the id (free()). */
static char *create_with(const char *const *env, const char *const *args)
{
    const char *argv[16] = { "create" };
    size_t n = 1;
    cli_run r;
    char *id;

    while (args != NULL && args[n - 1] != NULL && n < 15) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    r = run_keep(argv, env);
    cr_assert_eq(r.status, 0, "sbx create: status %d, stderr \"%s\"", r.status, r.err);
    cr_assert_str_empty(r.err, "sbx create wrote on stderr: \"%s\"", r.err);
    cr_assert(r.out_len > 11 && strncmp(r.out, "sbx-local-", 10) == 0 &&
              strchr(r.out, '\n') == r.out + r.out_len - 1,
              "sbx create printed \"%s\"", r.out);
    id = strndup(r.out, r.out_len - 1);
    cr_assert_not_null(id);
    free_run(&r);
    return id;
}

#define CREATE(...) create_with(NULL, (const char *const[]){ __VA_ARGS__, NULL })

/* The record of sandbox @id under the default test state directory. */
static char *record_path(const char *id)
{
    char *p;

    cr_assert(asprintf(&p, "%s/state/sandboxes/%s.json", g_tmpdir, id) > 0);
    return p;
}

/* Asserts the permission bits of @path. */
static void expect_mode(const char *path, unsigned mode)
{
    struct stat st;

    cr_assert_eq(lstat(path, &st), 0, "%s: %s", path, strerror(errno));
    cr_expect_eq(st.st_mode & 07777, mode, "%s has mode %04o, expected %04o", path,
                 (unsigned)(st.st_mode & 07777), mode);
}

/* Entries of directory @path, without . and .. (-1 when unreadable). */
static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* Reads a whole file (NUL-terminated; its length in *@len). */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;

    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    for (;;) {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (got == 0)
            break;
        n += got;
    }
    fclose(f);
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

/* Runs `sbx ps -a --json` and returns the ids it lists, space-separated,
 * in its order, each as "ID:backend:alive" (alive 1, 0 or null). */
static char *ps_summary(const char *const *env)
{
    cli_run r = SBX_KEEP_ENV(env, "ps", "-a", "--json");
    json_object *array, *o, *v;
    char *out = calloc(1, 1);
    size_t len = 0, i;

    cr_assert_eq(r.status, 0, "sbx ps: status %d, stderr \"%s\"", r.status, r.err);
    array = json_tokener_parse(r.out);
    cr_assert(array != NULL && json_object_is_type(array, json_type_array),
              "sbx ps --json printed \"%s\"", r.out);
    for (i = 0; i < json_object_array_length(array); i++) {
        const char *id, *backend, *alive;
        char item[256];

        o = json_object_array_get_idx(array, i);
        cr_assert_eq(json_object_object_length(o), 7, "%s", json_object_to_json_string(o));
        cr_assert(json_object_object_get_ex(o, "id", &v));
        id = json_object_get_string(v);
        cr_assert(json_object_object_get_ex(o, "backend", &v));
        backend = json_object_get_string(v);
        cr_assert(json_object_object_get_ex(o, "alive", &v));
        alive = v == NULL ? "null" : json_object_get_boolean(v) ? "1" : "0";
        cr_assert(json_object_object_get_ex(o, "created", &v) &&
                  json_object_get_string_len(v) == 20, "created %s",
                  json_object_to_json_string(v));
        set_path(item, sizeof item, "%s%s:%s:%s", len ? " " : "", id, backend, alive);
        append(&out, &len, item, strlen(item));
    }
    json_object_put(array);
    free_run(&r);
    return out;
}

Test(cli, create_exec_rm_in_separate_processes)
{
    char *id = CREATE("-e", "FOO=from create", "--timeout", "300");
    char *rec = record_path(id), *want;
    cli_run r;

    /* The record: private, in a private directory; no env value in it. */
    char *text = slurp(rec, NULL);
    cr_expect(strstr(text, "from create") == NULL, "the record holds the env value: %s",
              text);
    free(text);

    /* Each exec is its own process; the sandbox keeps its files, its
     * background processes and its environment between them. */
    r = SBX_KEEP("exec", id, "--", "sh", "-c",
                 "mkdir -p \"$SANDBOX_ROOT/work\" && printf kept > \"$SANDBOX_ROOT/work/f\" && "
                 "{ sleep 1000 >/dev/null 2>&1 </dev/null & echo $! > \"$SANDBOX_ROOT/tmp/bg\"; }");
    expect_run(&r, 0, "");
    free_run(&r);
    r = SBX_KEEP("exec", id, "--", "sh", "-c",
                 "cat \"$SANDBOX_ROOT/work/f\"; kill -0 \"$(cat \"$SANDBOX_ROOT/tmp/bg\")\" && "
                 "printf ' alive'; printf ' %s' \"$FOO\"");
    expect_run(&r, 0, "kept alive from create");
    free_run(&r);

    /* Options of exec: per-call env wins, cwd, exit status, argv as is. */
    r = SBX_KEEP("exec", "-e", "FOO=per call", "--cwd", "/work", id, "--", "sh", "-c",
                 "printf '%s|' \"$FOO\" \"$(pwd)\" \"$1\"; exit 7", "sh", "$(x) ;y");
    cr_expect_eq(r.status, 7, "status %d, stderr \"%s\"", r.status, r.err);
    cr_assert(asprintf(&want, "per call|%s/sbx-local-", g_tmpdir) > 0);
    cr_expect(strncmp(r.out, want, strlen(want)) == 0, "stdout \"%s\"", r.out);
    cr_expect(strstr(r.out, "/work|$(x) ;y|") != NULL, "stdout \"%s\"", r.out);
    free(want);
    free_run(&r);
    /* -w and --workdir are docker's names of --cwd. */
    r = SBX_KEEP("exec", "-w", "/work", id, "cat", "f");
    expect_run(&r, 0, "kept");
    free_run(&r);
    r = SBX_KEEP("exec", "--workdir=/work", id, "cat", "f");
    expect_run(&r, 0, "kept");
    free_run(&r);
    r = SBX_KEEP("exec", "--timeout", "1", id, "sleep", "30");
    cr_expect_eq(r.status, 124, "status %d, stderr \"%s\"", r.status, r.err);
    cr_expect(r.secs < 10, "a 1 s timeout took %.1f s", r.secs);
    free_run(&r);
    r = SBX_KEEP("exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3");
    cr_expect_eq(r.status, 3);
    cr_expect_str_eq(r.out, "out\n");
    cr_expect_str_eq(r.err, "err\n");
    free_run(&r);

    /* ps lists it as alive; rm destroys and forgets it. */
    char *ps = ps_summary(NULL);
    cr_assert(asprintf(&want, "%s:local:1", id) > 0);
    cr_expect_str_eq(ps, want);
    free(want);
    free(ps);
    r = SBX_KEEP("rm", id);
    cr_assert(asprintf(&want, "%s\n", id) > 0);
    expect_run(&r, 0, want);
    cr_expect_str_empty(r.err);
    free(want);
    free_run(&r);
    cr_expect(access(rec, F_OK) < 0 && errno == ENOENT, "%s is still there", rec);
    ps = ps_summary(NULL);
    cr_expect_str_empty(ps, "ps after rm: %s", ps);
    free(ps);
    r = SBX("ps");
    expect_run(&r, 0, "ID  NAME  BACKEND  CREATED               STATE\n");
    free_run(&r);

    /* Nothing of it is left; and now it is unknown. */
    char left[1024];
    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left, "left after rm: %s", left);
    r = SBX("exec", id, "--", "true");
    cr_assert(asprintf(&want, "no such sandbox: %s", id) > 0);
    EXPECT_TOOL_FAILURE(&r, want);
    free_run(&r);
    r = SBX("rm", id);
    EXPECT_TOOL_FAILURE(&r, want);
    free(want);
    free_run(&r);
    free(rec);
    free(id);
}

Test(cli, create_cp_exec_ls_cp_back_rm_ps)
{
    char *id = create_with(NULL, NULL);
    char local[PATH_MAX], back[PATH_MAX], spec[PATH_MAX];
    const char content[] = "#!/bin/sh\necho 'from the host'\n";
    cli_run r;
    char *want, *got;
    size_t len;
    struct stat st;

    set_path(local, sizeof local, "%s/in.sh", g_tmpdir);
    FILE *f = fopen(local, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(content, 1, sizeof content - 1, f), sizeof content - 1);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(local, 0755), 0);

    /* cp in, into a directory that exists (a missing parent is an error:
     * cp_destination_whose_parent_is_missing_...). */
    r = SBX_KEEP("exec", id, "--", "sh", "-c", "mkdir \"$SANDBOX_ROOT/work\"");
    expect_run(&r, 0, "");
    free_run(&r);
    set_path(spec, sizeof spec, "%s:/work/in.sh", id);
    r = SBX_KEEP("cp", local, spec);
    expect_run(&r, 0, "");
    cr_expect_str_empty(r.err);
    free_run(&r);

    /* exec: the bytes are there, and the file runs. */
    r = SBX_KEEP("exec", id, "--", "sh", "-c",
                 "cat \"$SANDBOX_ROOT/work/in.sh\"; \"$SANDBOX_ROOT/work/in.sh\"");
    cr_assert(asprintf(&want, "%sfrom the host\n", content) > 0);
    expect_run(&r, 0, want);
    free(want);
    free_run(&r);

    /* ls: exact names, types and sizes. */
    r = SBX_KEEP("exec", id, "--", "sh", "-c", "mkdir \"$SANDBOX_ROOT/work/sub\"");
    expect_run(&r, 0, "");
    free_run(&r);
    r = SBX_KEEP("ls", id, "/work");
    cr_assert(asprintf(&want, "file %12zu  in.sh\ndir  %12s  sub\n", sizeof content - 1,
                       "4096") > 0);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    /* A directory's size is the file system's: compare the file line
     * exactly and the directory line by its fields. */
    cr_expect(strncmp(r.out, want, strchr(want, '\n') + 1 - want) == 0, "ls printed \"%s\"",
              r.out);
    cr_expect(strstr(r.out, "\ndir ") != NULL && strstr(r.out, "  sub\n") != NULL &&
              r.out[r.out_len - 1] == '\n', "ls printed \"%s\"", r.out);
    free(want);
    free_run(&r);
    r = SBX_KEEP("ls", "--json", id, "/work");
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    json_object *array = json_tokener_parse(r.out), *o, *v;
    cr_assert(array != NULL && json_object_array_length(array) == 2, "%s", r.out);
    o = json_object_array_get_idx(array, 0);
    cr_expect_eq(json_object_object_length(o), 5, "%s", json_object_to_json_string(o));
    cr_expect(json_object_object_get_ex(o, "name", &v) &&
              strcmp(json_object_get_string(v), "in.sh") == 0);
    cr_expect(json_object_object_get_ex(o, "path", &v) &&
              strcmp(json_object_get_string(v), "/work/in.sh") == 0, "path %s",
              json_object_to_json_string(v));
    cr_expect(json_object_object_get_ex(o, "is_dir", &v) && !json_object_get_boolean(v));
    cr_expect(json_object_object_get_ex(o, "size", &v) &&
              json_object_get_int64(v) == (int64_t)(sizeof content - 1));
    cr_expect(json_object_object_get_ex(o, "mode", &v) && json_object_get_int(v) == 0755,
              "mode %s", json_object_to_json_string(v));
    o = json_object_array_get_idx(array, 1);
    cr_expect(json_object_object_get_ex(o, "name", &v) &&
              strcmp(json_object_get_string(v), "sub") == 0);
    cr_expect(json_object_object_get_ex(o, "is_dir", &v) && json_object_get_boolean(v));
    json_object_put(array);
    free_run(&r);

    /* cp back: identical bytes, executable bit kept. */
    set_path(back, sizeof back, "%s/back.sh", g_tmpdir);
    r = SBX_KEEP("cp", spec, back);
    expect_run(&r, 0, "");
    free_run(&r);
    got = slurp(back, &len);
    cr_expect_eq(len, sizeof content - 1);
    cr_expect(memcmp(got, content, len) == 0, "copied back: \"%s\"", got);
    free(got);
    cr_assert_eq(stat(back, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0755, "mode %04o", (unsigned)(st.st_mode & 0777));

    /* rm, and ps no longer lists it. */
    r = SBX_KEEP("rm", id);
    cr_assert(asprintf(&want, "%s\n", id) > 0);
    expect_run(&r, 0, want);
    free(want);
    free_run(&r);
    char *ps = ps_summary(NULL);
    cr_expect_str_empty(ps, "ps after rm: %s", ps);
    free(ps);
    char left[1024];
    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left, "left after rm: %s", left);
    free(id);
}

Test(cli, cp_directories_dash_names_and_errors)
{
    char *id = create_with(NULL, NULL);
    char dir[PATH_MAX], path[PATH_MAX], spec[PATH_MAX], out[PATH_MAX], cwd[PATH_MAX];
    cli_run r;
    char *want, *got;

    /* A local tree: a file, an executable in a subdirectory, an empty
     * directory. */
    set_path(dir, sizeof dir, "%s/tree", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    set_path(path, sizeof path, "%s/sub", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    set_path(path, sizeof path, "%s/empty", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    set_path(path, sizeof path, "%s/a.txt", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("a\n", f);
    fclose(f);
    set_path(path, sizeof path, "%s/sub/run", dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\necho ran\n", f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);

    /* A directory needs -r. */
    set_path(spec, sizeof spec, "%s:/up", id);
    r = SBX_KEEP("cp", dir, spec);
    EXPECT_TOOL_FAILURE(&r, "is a directory", "-r");
    free_run(&r);
    r = SBX_KEEP("cp", "-r", dir, spec);
    expect_run(&r, 0, "");
    free_run(&r);
    r = SBX_KEEP("exec", id, "--", "sh", "-c",
                 "cd \"$SANDBOX_ROOT/up\" && cat a.txt && sub/run && "
                 "test -d empty && ls -A empty | wc -l");
    expect_run(&r, 0, "a\nran\n0\n");
    free_run(&r);

    /* And back, into a new local directory. */
    set_path(out, sizeof out, "%s/down", g_tmpdir);
    r = SBX_KEEP("cp", spec, out);
    EXPECT_TOOL_FAILURE(&r, "is a directory", "-r");
    free_run(&r);
    cr_expect(access(out, F_OK) < 0, "a refused copy made %s", out);
    r = SBX_KEEP("cp", "-r", spec, out);
    expect_run(&r, 0, "");
    free_run(&r);
    set_path(path, sizeof path, "%s/a.txt", out);
    got = slurp(path, NULL);
    cr_expect_str_eq(got, "a\n");
    free(got);
    set_path(path, sizeof path, "%s/sub/run", out);
    expect_mode(path, 0755);
    set_path(path, sizeof path, "%s/empty", out);
    cr_expect_eq(count_entries(path), 0);

    /* A file to an existing directory goes in under its own name; local
     * names starting with '-' pass after "--" or as ./-NAME. */
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    cr_assert_eq(chdir(g_tmpdir), 0);
    f = fopen("-dash", "w");
    cr_assert_not_null(f);
    fputs("dash\n", f);
    fclose(f);
    set_path(spec, sizeof spec, "%s:/up/sub", id);
    r = SBX_KEEP("cp", "--", "-dash", spec);
    expect_run(&r, 0, "");
    free_run(&r);
    set_path(spec, sizeof spec, "%s:/up/sub/", id);
    r = SBX_KEEP("cp", "./-dash", spec);   /* the same again: replaced */
    expect_run(&r, 0, "");
    free_run(&r);
    set_path(spec, sizeof spec, "%s:/up/sub/-dash", id);
    r = SBX_KEEP("cp", spec, "./-back");
    expect_run(&r, 0, "");
    free_run(&r);
    got = slurp("-back", NULL);
    cr_expect_str_eq(got, "dash\n");
    free(got);
    cr_assert_eq(chdir(cwd), 0);
    r = SBX_KEEP("ls", id, "/up/sub");
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    cr_assert(asprintf(&want, "file %12d  -dash\nfile %12d  run\n", 5, 19) > 0);
    cr_expect_str_eq(r.out, want);
    free(want);
    free_run(&r);

    /* Usage errors: exactly one side in a sandbox; a missing source. */
    r = SBX_KEEP("cp", "a", "b");
    EXPECT_TOOL_FAILURE(&r, "exactly one of SRC and DST");
    free_run(&r);
    set_path(spec, sizeof spec, "%s:/x", id);
    r = SBX_KEEP("cp", spec, spec);
    EXPECT_TOOL_FAILURE(&r, "exactly one of SRC and DST");
    free_run(&r);
    r = SBX_KEEP("cp", spec);
    EXPECT_TOOL_FAILURE(&r, "expected SRC and DST");
    free_run(&r);
    r = SBX_KEEP("cp", "sbx-local-nosuch:/x", "y");
    EXPECT_TOOL_FAILURE(&r, "no such sandbox: sbx-local-nosuch");
    free_run(&r);
    set_path(spec, sizeof spec, "%s:/no/such/file", id);
    set_path(path, sizeof path, "%s/never", g_tmpdir);
    r = SBX_KEEP("cp", spec, path);
    EXPECT_TOOL_FAILURE(&r, "not_found");
    free_run(&r);
    cr_expect(access(path, F_OK) < 0, "a failed copy made %s", path);

    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(id);
}

static void write_text(const char *path, const char *text, mode_t mode);

/* mkdir -p @path (0755). Returns 0 or -1. */
static int mkdir_p_for_test(const char *path)
{
    char buf[PATH_MAX];

    set_path(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p != '\0'; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

Test(cli, cp_destination_whose_parent_is_missing_is_an_error_in_both_directions)
{
    char *id = create_with(NULL, NULL), *want;
    char local[PATH_MAX], missing[PATH_MAX], dst[PATH_MAX + 64], src[PATH_MAX + 64];

    set_path(local, sizeof local, "%s/file", g_tmpdir);
    write_text(local, "data\n", 0644);
    set_path(missing, sizeof missing, "%s/no-such-dir/x", g_tmpdir);
    /* To the sandbox: nothing is made there. */
    set_path(dst, sizeof dst, "%s:/no-such-dir/x", id);
    cr_assert(asprintf(&want, "sbx: cannot copy to /no-such-dir/x: its parent directory "
                       "/no-such-dir does not exist in the sandbox\n") > 0);
    EXPECT_KEEP(125, "", want, "cp", local, dst);
    free(want);
    EXPECT_KEEP(1, "", "", "exec", id, "--", "sh", "-c", "test -e no-such-dir");
    set_path(dst, sizeof dst, "%s:/no-such-dir/", id);
    EXPECT_KEEP(125, "", "sbx: cannot copy to /no-such-dir/: no such directory in the "
                "sandbox\n", "cp", local, dst);
    /* To this host: neither. */
    set_path(dst, sizeof dst, "%s:/f", id);
    EXPECT_KEEP(0, "", "", "cp", local, dst);
    set_path(src, sizeof src, "%s:/f", id);
    cr_assert(asprintf(&want, "sbx: cannot copy to %s: its parent directory %s/no-such-dir "
                       "does not exist\n", missing, g_tmpdir) > 0);
    EXPECT_KEEP(125, "", want, "cp", src, missing);
    free(want);
    set_path(src, sizeof src, "%s:/", id);
    cr_assert(asprintf(&want, "sbx: cannot copy to %s: its parent directory %s/no-such-dir "
                       "does not exist\n", missing, g_tmpdir) > 0);
    EXPECT_KEEP(125, "", want, "cp", "-r", src, missing);
    free(want);
    set_path(missing, sizeof missing, "%s/no-such-dir", g_tmpdir);
    cr_expect(access(missing, F_OK) < 0 && errno == ENOENT, "%s was made", missing);
    /* A parent that is a file, or leads out of the sandbox (a symlink, ".."):
     * refused with the listing's reason, not as missing. */
    set_path(dst, sizeof dst, "%s:/f/x", id);
    EXPECT_KEEP(125, "", "sbx: cannot copy to /f/x: its parent directory /f cannot be used\n"
                "sbx: \"/f\" is not a directory [code=invalid_argument; backend=local; "
                "op=list_files; path=/f]\n", "cp", local, dst);
    EXPECT_KEEP(0, "", "", "exec", id, "--", "sh", "-c", "ln -s /etc \"$SANDBOX_ROOT/out\"");
    set_path(dst, sizeof dst, "%s:/out/evil", id);
    EXPECT_KEEP(125, "", "sbx: cannot copy to /out/evil: its parent directory /out cannot be "
                "used\nsbx: path \"/out\" leads outside the sandbox root (through \"..\" or a "
                "symlink) [code=invalid_argument; backend=local; op=list_files; path=/out]\n",
                "cp", local, dst);
    set_path(dst, sizeof dst, "%s:../escape", id);
    EXPECT_KEEP(125, "", "sbx: cannot copy to ../escape: its parent directory .. cannot be "
                "used\nsbx: path \"..\" leads outside the sandbox root (through \"..\" or a "
                "symlink) [code=invalid_argument; backend=local; op=list_files; path=..]\n",
                "cp", local, dst);
    cr_expect(access("/etc/evil", F_OK) < 0, "/etc/evil was made");
    /* A parent that exists: copied. */
    set_path(src, sizeof src, "%s:/f", id);
    set_path(dst, sizeof dst, "%s/back", g_tmpdir);
    EXPECT_KEEP(0, "", "", "cp", src, dst);
    char *got = slurp(dst, NULL);
    cr_expect_str_eq(got, "data\n");
    free(got);
    cr_assert(asprintf(&want, "%s\n", id) > 0);
    EXPECT_KEEP(0, want, "", "rm", id);
    free(want);
    free(id);
}

/* Runs the bash command @cmd with SBX (the sbx under test), SBX_STATE_DIR
 * and TMPDIR of this test; its stdout and stderr go to files @out and @err
 * under the test's directory (read back into *@out_text / *@err_text,
 * free()). Returns its exit status. */
static int shell_run(const char *cmd, char **out_text, char **err_text)
{
    char state[PATH_MAX], out[PATH_MAX], err[PATH_MAX], *full;
    int rc;

    set_path(state, sizeof state, "%s/state", g_tmpdir);
    set_path(out, sizeof out, "%s/shell.out", g_tmpdir);
    set_path(err, sizeof err, "%s/shell.err", g_tmpdir);
    cr_assert_eq(setenv("SBX_STATE_DIR", state, 1), 0);
    cr_assert_eq(setenv("TMPDIR", g_tmpdir, 1), 0);
    cr_assert_eq(setenv("SBX", getenv("SBX_CLI"), 1), 0);
    cr_assert(asprintf(&full, "bash -o pipefail -c '%s' >'%s' 2>'%s' </dev/null", cmd, out,
                       err) > 0);
    rc = system(full);
    free(full);
    cr_assert(WIFEXITED(rc), "%s: %d", cmd, rc);
    *out_text = slurp(out, NULL);
    *err_text = slurp(err, NULL);
    return WEXITSTATUS(rc);
}

Test(cli, cp_dash_streams_a_tar_to_and_from_the_sandbox)
{
    char *id = create_with(NULL, NULL), *out, *err, cmd[4 * PATH_MAX], dir[PATH_MAX];
    int rc;

    set_path(dir, sizeof dir, "%s/src/sub", g_tmpdir);
    cr_assert_eq(mkdir_p_for_test(dir), 0);
    set_path(dir, sizeof dir, "%s/src/a.txt", g_tmpdir);
    write_text(dir, "A\n", 0644);
    set_path(dir, sizeof dir, "%s/src/sub/b.sh", g_tmpdir);
    write_text(dir, "#!/bin/sh\necho b\n", 0755);
    EXPECT_KEEP(0, "", "", "exec", id, "--", "sh", "-c", "mkdir \"$SANDBOX_ROOT/dst\"");

    /* In: a tar on stdin, extracted into the directory, modes kept. */
    set_path(cmd, sizeof cmd, "cd \"%s/src\" && tar -cf - a.txt sub | \"$SBX\" cp - %s:/dst",
             g_tmpdir, id);
    rc = shell_run(cmd, &out, &err);
    cr_expect_eq(rc, 0, "status %d, stderr \"%s\"", rc, err);
    cr_expect_str_empty(out);
    cr_expect_str_empty(err);
    free(out);
    free(err);
    EXPECT_KEEP(0, "A\nb\n", "", "exec", id, "--", "sh", "-c",
                "cat \"$SANDBOX_ROOT/dst/a.txt\" && \"$SANDBOX_ROOT/dst/sub/b.sh\"");

    /* Out: a directory as a tar named from its last component. */
    set_path(cmd, sizeof cmd, "\"$SBX\" cp %s:/dst - | tar -tf - | sort", id);
    rc = shell_run(cmd, &out, &err);
    cr_expect_eq(rc, 0, "status %d, stderr \"%s\"", rc, err);
    cr_expect_str_eq(out, "dst/\ndst/a.txt\ndst/sub/\ndst/sub/b.sh\n");
    cr_expect_str_empty(err);
    free(out);
    free(err);
    /* A file alone, its mode kept. */
    set_path(cmd, sizeof cmd, "\"$SBX\" cp %s:/dst/sub/b.sh - | tar -tvf - | cut -c1-10; "
             "\"$SBX\" cp %s:/dst/a.txt - | tar -xOf -", id, id);
    rc = shell_run(cmd, &out, &err);
    cr_expect_eq(rc, 0, "status %d, stderr \"%s\"", rc, err);
    cr_expect_str_eq(out, "-rwxr-xr-x\nA\n");
    free(out);
    free(err);

    /* Refused: an entry leaving the destination, and a destination that
     * is not a directory; nothing is left in the sandbox or here. */
    set_path(cmd, sizeof cmd, "python3 -c \"import io,sys,tarfile; b=io.BytesIO(); "
             "t=tarfile.open(fileobj=b,mode=\\\"w\\\"); i=tarfile.TarInfo(\\\"../evil\\\"); "
             "i.size=1; t.addfile(i, io.BytesIO(b\\\"x\\\")); t.close(); "
             "sys.stdout.buffer.write(b.getvalue())\" | \"$SBX\" cp - %s:/dst", id);
    rc = shell_run(cmd, &out, &err);
    cr_expect_eq(rc, 125, "status %d, stderr \"%s\"", rc, err);
    cr_expect_str_eq(err, "sbx: refusing tar entry \"../evil\" on stdin: an absolute name or "
                     "one with \"..\"\n");
    free(out);
    free(err);
    EXPECT_KEEP(1, "", "", "exec", id, "--", "sh", "-c", "test -e \"$SANDBOX_ROOT/evil\"");
    set_path(cmd, sizeof cmd, "tar -C \"%s/src\" -cf - a.txt | \"$SBX\" cp - %s:/dst/a.txt",
             g_tmpdir, id);
    rc = shell_run(cmd, &out, &err);
    cr_expect_eq(rc, 125, "status %d", rc);
    cr_expect_str_eq(err, "sbx: cannot copy the tar stream on stdin to /dst/a.txt: no such "
                     "directory in the sandbox (the destination of \"-\" must be a "
                     "directory)\n");
    free(out);
    free(err);
    /* No staging directory is left behind. */
    set_path(cmd, sizeof cmd, "ls -d \"%s\"/sbx-cp-* 2>/dev/null | wc -l", g_tmpdir);
    rc = shell_run(cmd, &out, &err);
    cr_expect_str_eq(out, "0\n");
    free(out);
    free(err);
    char *want;
    cr_assert(asprintf(&want, "%s\n", id) > 0);
    EXPECT_KEEP(0, want, "", "rm", id);
    free(want);
    free(id);
}

Test(cli, state_files_are_private_in_private_directories)
{
    char *id = create_with(NULL, NULL);
    char path[PATH_MAX];

    set_path(path, sizeof path, "%s/state", g_tmpdir);
    expect_mode(path, 0700);
    set_path(path, sizeof path, "%s/state/sandboxes", g_tmpdir);
    expect_mode(path, 0700);
    char *rec = record_path(id);
    expect_mode(rec, 0600);
    /* Only the record: no temporary file is left beside it. */
    set_path(path, sizeof path, "%s/state/sandboxes", g_tmpdir);
    cr_expect_eq(count_entries(path), 1);

    /* {"created": ISO 8601 UTC, "state": the session state, "expires": ISO
     * 8601 UTC, "options": the options set (none here)}. */
    json_object *doc = json_object_from_file(rec), *v, *state;
    cr_assert_not_null(doc, "%s is not JSON", rec);
    cr_expect_eq(json_object_object_length(doc), 4);
    cr_expect(json_object_object_get_ex(doc, "options", &v) &&
              json_object_is_type(v, json_type_object) && json_object_object_length(v) == 0,
              "options %s", json_object_to_json_string(v));
    cr_expect(json_object_object_get_ex(doc, "expires", &v) &&
              json_object_get_string_len(v) == 20, "expires %s", json_object_to_json_string(v));
    cr_assert(json_object_object_get_ex(doc, "created", &v));
    const char *created = json_object_get_string(v);
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cr_expect(end != NULL && *end == '\0', "created \"%s\"", created);
    time_t t = timegm(&tm), now = time(NULL);
    cr_expect(t <= now && t > now - 120, "created \"%s\" is not now", created);
    cr_assert(json_object_object_get_ex(doc, "state", &state));
    cr_expect(json_object_object_get_ex(state, "id", &v) &&
              strcmp(json_object_get_string(v), id) == 0);
    cr_expect(json_object_object_get_ex(state, "version", &v) && json_object_get_int(v) == 1);
    json_object_put(doc);

    /* A directory that was too open is made private. */
    set_path(path, sizeof path, "%s/state/sandboxes", g_tmpdir);
    cr_assert_eq(chmod(path, 0755), 0);
    char *id2 = create_with(NULL, NULL);
    expect_mode(path, 0700);

    cli_run r = SBX_KEEP("rm", id, id2);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    cr_expect_eq(count_entries(path), 0);
    free(rec);
    free(id);
    free(id2);
}

Test(cli, state_directory_falls_back_to_xdg_state_home)
{
    char xdg[PATH_MAX], var[PATH_MAX + 32], path[PATH_MAX + 64];
    const char *env[3];

    set_path(xdg, sizeof xdg, "%s/xdg", g_tmpdir);
    set_path(var, sizeof var, "XDG_STATE_HOME=%s", xdg);
    env[0] = "SBX_STATE_DIR=";   /* empty: as if unset */
    env[1] = var;
    env[2] = NULL;
    char *id = create_with(env, NULL);
    set_path(path, sizeof path, "%s/sbx/sandboxes/%s.json", xdg, id);
    expect_mode(path, 0600);
    set_path(path, sizeof path, "%s/sbx/sandboxes", xdg);
    expect_mode(path, 0700);
    set_path(path, sizeof path, "%s/sbx", xdg);
    expect_mode(path, 0700);
    set_path(path, sizeof path, "%s/state", g_tmpdir);
    cr_expect(access(path, F_OK) < 0, "SBX_STATE_DIR= was not taken as unset");

    /* Another state directory does not know the id. */
    cli_run r = SBX_KEEP("exec", id, "true");
    EXPECT_TOOL_FAILURE(&r, "no such sandbox");
    free_run(&r);
    r = SBX_KEEP_ENV(env, "exec", id, "true");
    expect_run(&r, 0, "");
    free_run(&r);
    r = SBX_KEEP_ENV(env, "rm", id);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(id);
}

Test(cli, exec_on_an_unknown_id_is_125)
{
    cli_run r = SBX("exec", "sbx-local-nosuch", "--", "echo", "hi");

    EXPECT_TOOL_FAILURE(&r, "no such sandbox: sbx-local-nosuch");
    free_run(&r);
    /* Not a possible id: the same answer, and no file outside the state
     * directory is read. */
    r = SBX("exec", "../../etc/passwd", "--", "echo", "hi");
    EXPECT_TOOL_FAILURE(&r, "no such sandbox: ../../etc/passwd");
    free_run(&r);
    r = SBX("ls", "sbx-local-nosuch", "/");
    EXPECT_TOOL_FAILURE(&r, "no such sandbox: sbx-local-nosuch");
    free_run(&r);
    r = SBX("exec", "sbx-local-nosuch");
    EXPECT_TOOL_FAILURE(&r, "no command given");
    free_run(&r);
    r = SBX("exec");
    EXPECT_TOOL_FAILURE(&r, "no sandbox id given");
    free_run(&r);
    r = SBX("rm");
    EXPECT_TOOL_FAILURE(&r, "no sandbox id given");
    free_run(&r);
}

/* 1 when @pid no longer runs (gone, or a zombie waiting to be reaped). */
static int pid_gone(pid_t pid)
{
    char path[64], buf[512], *paren;
    FILE *f;
    size_t n;

    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 1;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return 1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    paren = strrchr(buf, ')');
    return paren != NULL && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* The creation time recorded for sandbox @id (free()). */
static char *record_created(const char *id)
{
    char *rec = record_path(id), *created;
    json_object *doc = json_object_from_file(rec), *v;

    cr_assert(doc != NULL && json_object_object_get_ex(doc, "created", &v), "%s", rec);
    created = strdup(json_object_get_string(v));
    json_object_put(doc);
    free(rec);
    return created;
}

/* The supervisor pid recorded for sandbox @id. */
static pid_t recorded_supervisor(const char *id)
{
    char *rec = record_path(id);
    json_object *doc = json_object_from_file(rec), *state, *data, *pid;

    cr_assert(doc != NULL && json_object_object_get_ex(doc, "state", &state) &&
              json_object_object_get_ex(state, "data", &data) &&
              json_object_object_get_ex(data, "supervisor_pid", &pid), "%s", rec);
    pid_t p = (pid_t)json_object_get_int(pid);
    json_object_put(doc);
    free(rec);
    return p;
}

/* The state `sbx ps -a --json` gives sandbox @id (free()); asserts one row. */
static char *ps_state(const char *id)
{
    cli_run r = SBX_KEEP("ps", "-a", "--json");
    json_object *array = json_tokener_parse(r.out), *v;
    char *state = NULL;

    cr_assert(array != NULL && json_object_is_type(array, json_type_array),
              "sbx ps --json printed \"%s\" (status %d)", r.out, r.status);
    for (size_t i = 0; i < json_object_array_length(array); i++) {
        json_object *o = json_object_array_get_idx(array, i);
        if (json_object_object_get_ex(o, "id", &v) && strcmp(json_object_get_string(v), id) == 0
            && json_object_object_get_ex(o, "state", &v))
            state = strdup(json_object_get_string(v));
    }
    cr_assert_not_null(state, "sbx ps -a does not list %s: %s", id, r.out);
    json_object_put(array);
    free_run(&r);
    return state;
}

/* Stops @pid and waits until it is (state T: the stop takes effect once
 * it runs); its parent's pid in *@ppid when not NULL. */
static void stop_and_wait(pid_t pid, pid_t *ppid)
{
    char path[64], buf[512], *paren;

    cr_assert_eq(kill(pid, SIGSTOP), 0);
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0;; i++) {
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        paren = strrchr(buf, ')');
        if (paren != NULL && paren[1] == ' ' && paren[2] == 'T')
            break;
        cr_assert(i < 5000, "process %d not stopped: %s", (int)pid, buf);
        usleep(1000);
    }
    if (ppid) {
        int pp = 0;
        cr_assert_eq(sscanf(paren + 2, "T %d", &pp), 1, "%s", buf);
        *ppid = pp;
    }
}

/* A sandbox whose supervisor is stopped (SIGSTOP, a debugger) cannot
 * answer, and is not waited for: sbx ps -a lists it "unknown" while its
 * lifetime runs (a ping waited for would outlast the 3 s lifetime) and
 * "expired" once it is over, as sbx gc says; sbx rm -f ends it and leaves
 * nothing. Its keeper (the supervisor's parent) is stopped too, as a stop
 * of the whole process group does: rm -f continues it, and it reaps the
 * supervisor and removes the directory. */
Test(cli, a_frozen_sandbox_is_listed_at_once_and_removed)
{
    char *id = CREATE("--timeout", "3");
    pid_t sup = recorded_supervisor(id), keeper = 0;
    char *state, *want;
    cli_run r;

    stop_and_wait(sup, &keeper);
    cr_assert_gt(keeper, 1);
    stop_and_wait(keeper, NULL);
    state = ps_state(id);
    cr_expect_str_eq(state, "unknown");
    free(state);
    /* Past its lifetime: expired, as gc says. */
    for (int i = 0; i < 100; i++) {
        state = ps_state(id);
        if (strcmp(state, "unknown") != 0)
            break;
        free(state);
        state = NULL;
        usleep(100000);
    }
    cr_expect_str_eq(state, "expired");
    free(state);
    /* gc goes by the lifecycle record, whose expiry may come a few
     * milliseconds after the one sbx create recorded. */
    cr_assert(asprintf(&want, "local %s expired would_reap\n", id) > 0);
    for (int i = 0;; i++) {
        r = SBX_KEEP("gc", "--dry-run");
        if (r.status == 0 && strcmp(r.out, want) == 0)
            break;
        cr_assert(i < 50, "gc --dry-run: status %d, stdout \"%s\", stderr \"%s\"", r.status,
                  r.out, r.err);
        free_run(&r);
        usleep(100000);
    }
    free(want);
    free_run(&r);
    r = SBX_KEEP("rm", "-f", id);
    cr_assert(asprintf(&want, "%s\n", id) > 0);
    expect_run(&r, 0, want);
    free(want);
    free_run(&r);
    for (int i = 0; i < 500 && !pid_gone(sup); i++)
        usleep(10000);
    cr_expect(pid_gone(sup), "the stopped supervisor %d outlived rm -f", (int)sup);
    for (int i = 0; i < 500 && !pid_gone(keeper); i++)
        usleep(10000);
    cr_expect(pid_gone(keeper), "the stopped keeper %d outlived rm -f", (int)keeper);
    char left[1024];
    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left, "left after rm -f: %s", left);
    free(id);
}

Test(cli, rm_of_a_sandbox_that_is_gone_forgets_it_and_exits_1)
{
    char *gone = create_with(NULL, NULL), *alive = create_with(NULL, NULL);
    pid_t sup = recorded_supervisor(gone);
    cli_run r;
    char *want, *ps;

    cr_assert_eq(kill(sup, SIGKILL), 0);
    for (int i = 0; i < 500 && !pid_gone(sup); i++)
        usleep(10000);
    cr_assert(pid_gone(sup), "the supervisor %d survived SIGKILL", (int)sup);
    /* Listed oldest first (by creation time, then id). */
    char *c_gone = record_created(gone), *c_alive = record_created(alive);
    int c = strcmp(c_gone, c_alive);
    if (c < 0 || (c == 0 && strcmp(gone, alive) < 0))
        cr_assert(asprintf(&want, "%s:local:0 %s:local:1", gone, alive) > 0);
    else
        cr_assert(asprintf(&want, "%s:local:1 %s:local:0", alive, gone) > 0);
    free(c_gone);
    free(c_alive);
    ps = ps_summary(NULL);
    cr_expect_str_eq(ps, want);
    free(want);
    free(ps);

    r = SBX_KEEP("rm", gone);
    cr_expect_eq(r.status, 1, "status %d, stderr \"%s\"", r.status, r.err);
    cr_expect_eq(r.out_len, 0, "stdout \"%s\"", r.out);
    cr_expect(strstr(r.err, "code=not_found") != NULL, "stderr \"%s\"", r.err);
    cr_assert(asprintf(&want, "sbx: sandbox %s no longer exists; forgot it\n", gone) > 0);
    cr_expect(strstr(r.err, want) != NULL, "stderr \"%s\"", r.err);
    free(want);
    free_run(&r);
    r = SBX_KEEP("rm", gone);
    cr_assert(asprintf(&want, "no such sandbox: %s", gone) > 0);
    EXPECT_TOOL_FAILURE(&r, want);
    free(want);
    free_run(&r);

    ps = ps_summary(NULL);
    cr_assert(asprintf(&want, "%s:local:1", alive) > 0);
    cr_expect_str_eq(ps, want);
    free(want);
    free(ps);
    r = SBX_KEEP("rm", alive);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(gone);
    free(alive);
}

Test(cli, ps_table)
{
    char *id = create_with(NULL, NULL);
    char *rec = record_path(id), *want;
    json_object *doc = json_object_from_file(rec), *v;

    cr_assert(doc && json_object_object_get_ex(doc, "created", &v));
    cr_assert(asprintf(&want, "ID%*s  NAME  BACKEND  CREATED               STATE\n"
                       "%s  -     local    %s  running\n", (int)strlen(id) - 2, "", id,
                       json_object_get_string(v)) > 0);
    json_object_put(doc);
    cli_run r = SBX_KEEP("ps");
    expect_run(&r, 0, want);
    free_run(&r);
    free(want);
    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0);
    free_run(&r);
    free(rec);
    free(id);
}

Test(cli, ps_quiet_prints_the_ids_alone_for_rm)
{
    char *id = create_with(NULL, NULL), *want;
    cli_run r;

    cr_assert(asprintf(&want, "%s\n", id) > 0);
    EXPECT_KEEP(0, want, "", "ps", "-q");
    EXPECT_KEEP(0, want, "", "ps", "--quiet", "--no-trunc", "-a");
    EXPECT_KEEP(125, "", "sbx: -q and --json cannot be used together\n"
                "sbx: see 'sbx ps --help'\n", "ps", "-q", "--json");
    /* What it printed names the sandbox, as `sbx rm $(sbx ps -q)` passes it. */
    r = SBX_KEEP("ps", "-q");
    cr_assert_eq(r.status, 0);
    cr_assert(r.out_len > 1 && r.out[r.out_len - 1] == '\n');
    r.out[r.out_len - 1] = '\0';
    EXPECT_KEEP(0, want, "", "rm", r.out);
    free_run(&r);
    EXPECT_KEEP(0, "", "", "ps", "-q");
    free(want);
    free(id);
}

/* ----------------------------------------------- ids, names, inspect */

/* The longest common prefix of @a and @b, plus one more character of @a
 * (a prefix that names @a alone), in @out. */
static void unique_prefix(const char *a, const char *b, char *out, size_t size)
{
    size_t n = 0;

    while (a[n] != '\0' && a[n] == b[n])
        n++;
    cr_assert(a[n] != '\0' && n + 2 <= size);
    memcpy(out, a, n + 1);
    out[n + 1] = '\0';
}

Test(cli, ids_take_names_and_unique_prefixes_as_docker_does)
{
    char *web = CREATE("--name", "web", "--timeout", "300");
    char *other = create_with(NULL, NULL);
    char prefix[64], *want, *ambiguous;
    cli_run r;

    /* By name, by a unique prefix, by the whole id. */
    EXPECT_KEEP(0, "by name\n", "", "exec", "web", "echo", "by name");
    unique_prefix(web, other, prefix, sizeof prefix);
    EXPECT_KEEP(0, "by prefix\n", "", "exec", prefix, "echo", "by prefix");
    EXPECT_KEEP(0, "whole\n", "", "exec", web, "echo", "whole");
    r = SBX_KEEP("ls", "web", "/");
    cr_expect_eq(r.status, 0, "ls by name: %d %s", r.status, r.err);
    free_run(&r);

    /* A prefix both ids share: ambiguous, naming both (oldest first). */
    char *c_web = record_created(web), *c_other = record_created(other);
    int first_web = strcmp(c_web, c_other) < 0 ||
                    (strcmp(c_web, c_other) == 0 && strcmp(web, other) < 0);
    cr_assert(asprintf(&ambiguous, "sbx: sandbox id prefix \"sbx-local-\" is ambiguous: it "
                       "matches %s, %s\n", first_web ? web : other,
                       first_web ? other : web) > 0);
    EXPECT_KEEP(125, "", ambiguous, "exec", "sbx-local-", "true");
    EXPECT_KEEP(125, "", ambiguous, "rm", "sbx-local-");
    free(c_web);
    free(c_other);
    free(ambiguous);
    /* Nothing matches: not found, naming it. */
    EXPECT_KEEP(125, "", "sbx: no such sandbox: nomatch\n", "exec", "nomatch", "true");
    EXPECT_KEEP(125, "[\n]\n", "sbx: no such sandbox: sbx-local-zzzzzzz\n",
                "inspect", "sbx-local-zzzzzzz");

    /* A taken name, a name that is an id, a malformed name: refused before
     * anything is made. */
    cr_assert(asprintf(&want, "sbx: the name \"web\" is already taken by sandbox %s\n",
                       web) > 0);
    EXPECT_KEEP(125, "", want, "create", "--name", "web");
    free(want);
    cr_assert(asprintf(&want, "sbx: the name \"%s\" is already the id of sandbox %s\n",
                       other, other) > 0);
    EXPECT_KEEP(125, "", want, "create", "--name", other);
    free(want);
    EXPECT_KEEP(125, "", "sbx: invalid --name value \"-x/y\": expected 1 to 200 of "
                "[A-Za-z0-9_.-], starting with a letter or digit\n",
                "create", "--name=-x/y");
    EXPECT_KEEP(125, "", "sbx: --name is for `sbx create`: the sandbox of run is not "
                "recorded\nsbx: see 'sbx run --help'\n", "run", "--name", "x", "true");
    char left[1024];

    /* ps shows the name; rm by name prints what was given and forgets it. */
    char *c = record_created(web), *c2 = record_created(other);
    cr_assert(asprintf(&want, "%-*s  NAME  BACKEND  CREATED               STATE\n"
                       "%s  %s  local    %s  running\n%s  %s  local    %s  running\n",
                       (int)strlen(web), "ID", first_web ? web : other, first_web ? "web " : "-   ",
                       first_web ? c : c2, first_web ? other : web,
                       first_web ? "-   " : "web ", first_web ? c2 : c) > 0);
    EXPECT_KEEP(0, want, "", "ps");
    free(want);
    free(c);
    free(c2);
    EXPECT_KEEP(0, "web\n", "", "rm", "web");
    EXPECT_KEEP(125, "", "sbx: no such sandbox: web\n", "exec", "web", "true");
    /* Unique now; rm prints the id as given, as docker rm does. */
    EXPECT_KEEP(0, "sbx-local-\n", "", "rm", "sbx-local-");
    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left, "left: %s", left);
    free(web);
    free(other);
}

/* The exposed ports of `create -p`, in JSON and in text; none once the
 * sandbox is gone. */
Test(cli, inspect_shows_the_exposed_ports_as_json_and_text)
{
    char *id = CREATE("--name", "web", "-p", "40124", "-p", "40123");
    char *created = record_created(id), *want;
    json_object *doc, *v;
    cli_run r = SBX_KEEP("inspect", "web");

    cr_assert_eq(r.status, 0, "inspect: %d %s", r.status, r.err);
    cr_expect_str_empty(r.err);
    doc = json_tokener_parse(r.out);
    cr_assert(doc != NULL && json_object_array_length(doc) == 1, "%s", r.out);
    cr_assert(json_object_object_get_ex(json_object_array_get_idx(doc, 0), "expires", &v));
    char *expires = strdup(json_object_get_string(v));
    cr_assert(json_object_object_get_ex(json_object_array_get_idx(doc, 0), "ports", &v));
    cr_expect_str_eq(json_object_to_json_string_ext(v, JSON_C_TO_STRING_SPACED),
                     "[ { \"port\": 40123, \"endpoint\": \"127.0.0.1:40123\" }, "
                     "{ \"port\": 40124, \"endpoint\": \"127.0.0.1:40124\" } ]");
    json_object_put(doc);
    free_run(&r);

    r = SBX_KEEP("inspect", "--format", "text", "web");
    cr_assert_eq(r.status, 0, "inspect: %d %s", r.status, r.err);
    cr_assert(asprintf(&want, "id: %s\nname: web\nbackend: local\nprovider_id: %s\n"
                       "state: running\ncreated: %s\nexpires: %s\noptions: {}\ncapabilities: exec,"
                       "exec_stdin,files,dir_transfer,resume,pty,lifetime,exposed_ports,"
                       "background,exec_stdin_stream,owner_watch\nport: 40123/tcp -> 127.0.0.1:40123\n"
                       "port: 40124/tcp -> 127.0.0.1:40124\n", id, id, created, expires) > 0);
    cr_expect_str_eq(r.out, want);
    free(want);
    free_run(&r);

    free(expires);

    r = SBX_KEEP("inspect", "-f", "yaml", "web");
    EXPECT_TOOL_FAILURE(&r, "invalid format \"yaml\": expected json or text");
    free_run(&r);

    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0);
    free_run(&r);
    free(created);
    free(id);
}

Test(cli, inspect_prints_the_record_state_options_and_capabilities)
{
    char *id = CREATE("--name", "box", "--timeout", "300", "-e", "SECRET=hidden");
    char *created = record_created(id), *want;
    json_object *doc = NULL, *v;
    cli_run r = SBX_KEEP("inspect", "box");

    cr_assert_eq(r.status, 0, "inspect: %d %s", r.status, r.err);
    cr_expect_str_empty(r.err);
    cr_expect(strstr(r.out, "hidden") == NULL, "an env value was recorded: %s", r.out);
    doc = json_tokener_parse(r.out);
    cr_assert(doc != NULL && json_object_is_type(doc, json_type_array) &&
              json_object_array_length(doc) == 1, "%s", r.out);
    json_object *o = json_object_array_get_idx(doc, 0);
    /* Every member, exactly; expires is the lifetime after creation. */
    cr_assert(json_object_object_get_ex(o, "expires", &v));
    const char *expires = json_object_get_string(v);
    struct tm tc = { 0 }, te = { 0 };
    cr_assert(strptime(created, "%Y-%m-%dT%H:%M:%SZ", &tc) != NULL);
    cr_assert(expires != NULL && strptime(expires, "%Y-%m-%dT%H:%M:%SZ", &te) != NULL,
              "expires %s", expires);
    double life = difftime(timegm(&te), timegm(&tc));
    cr_expect(life >= 300 && life <= 302, "lifetime %g s (%s .. %s)", life, created, expires);
    cr_assert(asprintf(&want, "{ \"id\": \"%s\", \"name\": \"box\", \"backend\": \"local\", "
                       "\"provider_id\": \"%s\", \"state\": \"running\", \"created\": \"%s\", "
                       "\"expires\": \"%s\", \"options\": { \"timeout_secs\": 300.0, "
                       "\"env_vars\": true }, \"capabilities\": [ \"exec\", \"exec_stdin\", "
                       "\"files\", \"dir_transfer\", \"resume\", \"pty\", \"lifetime\", "
                       "\"exposed_ports\", \"background\", \"exec_stdin_stream\", \"owner_watch\" ], "
                       "\"ports\": [ ] "
                       "}", id, id, created, expires) > 0);
    cr_expect_str_eq(json_object_to_json_string_ext(o, JSON_C_TO_STRING_SPACED), want);
    free(want);
    json_object_put(doc);
    free_run(&r);
    /* One unknown among known ones: the known printed, status 125. */
    r = SBX_KEEP("inspect", id, "nosuch");
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, "sbx: no such sandbox: nosuch\n");
    doc = json_tokener_parse(r.out);
    cr_expect(doc != NULL && json_object_array_length(doc) == 1, "%s", r.out);
    json_object_put(doc);
    free_run(&r);
    r = SBX_KEEP("inspect");
    EXPECT_TOOL_FAILURE(&r, "no sandbox id given");
    free_run(&r);
    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0);
    free_run(&r);
    free(created);
    free(id);
}

Test(cli, ps_all_lists_expired_ones_with_their_state_and_rm_f_forgets)
{
    char *brief = CREATE("--timeout", "1");
    char *lasting = CREATE("--timeout", "300");
    char *c_brief = record_created(brief), *c_lasting = record_created(lasting), *want;

    usleep(2200 * 1000);
    /* Without -a only the running one. */
    cr_assert(asprintf(&want, "%-*s  NAME  BACKEND  CREATED               STATE\n"
                       "%s  -     local    %s  running\n", (int)strlen(lasting), "ID",
                       lasting, c_lasting) > 0);
    EXPECT_KEEP(0, want, "", "ps");
    free(want);
    /* With -a both, oldest first: the brief one expired. */
    int brief_first = strcmp(c_brief, c_lasting) < 0 ||
                      (strcmp(c_brief, c_lasting) == 0 && strcmp(brief, lasting) < 0);
    char row_b[256], row_l[256];
    set_path(row_b, sizeof row_b, "%s  -     local    %s  expired\n", brief, c_brief);
    set_path(row_l, sizeof row_l, "%s  -     local    %s  running\n", lasting, c_lasting);
    cr_assert(asprintf(&want, "%-*s  NAME  BACKEND  CREATED               STATE\n"
                       "%s%s", (int)strlen(brief), "ID", brief_first ? row_b : row_l, brief_first ? row_l : row_b) > 0);
    EXPECT_KEEP(0, want, "", "ps", "-a");
    EXPECT_KEEP(0, want, "", "ps", "--all", "--no-trunc");
    free(want);
    /* rm -f of one that no longer exists: forgotten, status 0. */
    cr_assert(asprintf(&want, "%s\n", brief) > 0);
    cli_run r = SBX_KEEP("rm", "-f", brief);
    expect_run(&r, 0, "");
    cr_expect(strstr(r.err, "no longer exists; forgot it") != NULL, "%s", r.err);
    free_run(&r);
    free(want);
    char *rec = record_path(brief);
    cr_expect(access(rec, F_OK) < 0, "%s is still recorded", rec);
    free(rec);

    /* A record whose backend is not installed: rm refuses and keeps it,
     * rm -f forgets it. */
    rec = record_path(lasting);
    json_object *doc = json_object_from_file(rec), *state;
    cr_assert(doc && json_object_object_get_ex(doc, "state", &state));
    json_object_object_add(state, "backend", json_object_new_string("nosuchbackend"));
    char planted[PATH_MAX];
    set_path(planted, sizeof planted, "%s/state/sandboxes/sbx-nosuchbackend-1.json", g_tmpdir);
    cr_assert_eq(json_object_to_file(planted, doc), 0);
    cr_assert_eq(chmod(planted, 0600), 0);
    json_object_put(doc);
    r = SBX_KEEP("rm", "sbx-nosuchbackend-1");
    cr_expect_eq(r.status, 125, "rm: %d %s", r.status, r.err);
    cr_expect(strstr(r.err, "code=backend_not_installed") != NULL, "%s", r.err);
    free_run(&r);
    cr_expect_eq(access(planted, F_OK), 0, "rm without -f forgot it");
    r = SBX_KEEP("rm", "--force", "sbx-nosuch");
    expect_run(&r, 0, "sbx-nosuch\n");
    cr_expect(strstr(r.err, "sbx: forgot sandbox sbx-nosuchbackend-1 (-f); whatever is left "
                            "of it is not removed\n") != NULL, "%s", r.err);
    free_run(&r);
    cr_expect(access(planted, F_OK) < 0, "rm -f kept it");
    cr_assert(asprintf(&want, "%s\n", lasting) > 0);
    EXPECT_KEEP(0, want, "", "rm", lasting);
    free(want);
    free(rec);
    free(c_brief);
    free(c_lasting);
    free(brief);
    free(lasting);
}

Test(cli, stop_and_start_name_a_backend_that_cannot_stop)
{
    char *id = CREATE("--name", "box"), *want;

    cr_assert(asprintf(&want, "sbx: backend \"local\" cannot stop a sandbox without destroying "
                       "it [code=feature_not_supported; backend=local; op=stop; "
                       "sandbox_id=%s]\n", id) > 0);
    EXPECT_KEEP(125, "", want, "stop", "box");
    free(want);
    cr_assert(asprintf(&want, "sbx: backend \"local\" has no stopped sandbox to start: it "
                       "cannot stop one without destroying it [code=feature_not_supported; "
                       "backend=local; op=start; sandbox_id=%s]\n", id) > 0);
    EXPECT_KEEP(125, "", want, "start", id);
    free(want);
    EXPECT_KEEP(125, "", "sbx: no such sandbox: nosuch\n", "stop", "nosuch");
    cli_run r = SBX_KEEP("stop");
    EXPECT_TOOL_FAILURE(&r, "no sandbox id given");
    free_run(&r);
    /* Still running, and not marked stopped. */
    EXPECT_KEEP(0, "up\n", "", "exec", "box", "echo", "up");
    EXPECT_KEEP(0, "box\n", "", "rm", "box");
    free(id);
}

/* Adds to @names (space-separated, each followed by a space) the NAME of
 * every libsbx-NAME.so in DIR/.libs for each directory DIR under @parent. */
static void built_plugins_under(const char *parent, char *names, size_t size)
{
    DIR *dir = opendir(parent);
    struct dirent *de;

    cr_assert_not_null(dir, "opendir %s: %s", parent, strerror(errno));
    while ((de = readdir(dir)) != NULL) {
        char libs[PATH_MAX];
        DIR *sub;
        struct dirent *se;

        if (de->d_name[0] == '.')
            continue;
        set_path(libs, sizeof libs, "%s/%s/.libs", parent, de->d_name);
        if ((sub = opendir(libs)) == NULL)
            continue;
        while ((se = readdir(sub)) != NULL) {
            size_t n = strlen(se->d_name);

            if (n > 10 && strncmp(se->d_name, "libsbx-", 7) == 0 &&
                strcmp(se->d_name + n - 3, ".so") == 0) {
                size_t len = strlen(names);

                cr_assert(len + (n - 10) + 2 < size);
                memcpy(names + len, se->d_name + 7, n - 10);
                names[len + n - 10] = ' ';
                names[len + n - 9] = '\0';
            }
        }
        closedir(sub);
    }
    closedir(dir);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* @names sorted by name, in place. */
static void sort_words(char *names)
{
    char *words[64], *save = NULL, copy[4096];
    size_t n = 0;

    set_path(copy, sizeof copy, "%s", names);
    for (char *w = strtok_r(copy, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
        cr_assert(n < 64);
        words[n++] = w;
    }
    qsort(words, n, sizeof *words, cmp_str);
    names[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strcat(names, words[i]);
        strcat(names, " ");
    }
}

/* Without SBX_PLUGIN_PATH, the build tree's sbx finds every plugin built in
 * the tree (plugins/NAME/.libs and plugins/cloud/NAME/.libs: remote, ray,
 * runpod, e2b...), not only local and docker, so `sbx --remote URL` works
 * from a build tree as the README says. */
Test(cli, build_tree_sbx_finds_every_built_plugin)
{
    cli_spec spec = { 0 };
    const char *env[] = { "SBX_PLUGIN_PATH", NULL };
    char build[PATH_MAX], dir[PATH_MAX], want[4096] = "", got[4096] = "";
    const char *local = "/plugins/local/.libs";
    cli_run r;

    set_path(build, sizeof build, "%s", getenv("SBX_PLUGIN_PATH"));
    *strchr(build, ':') = '\0';
    cr_assert(strlen(build) > strlen(local) &&
              strcmp(build + strlen(build) - strlen(local), local) == 0, "%s", build);
    build[strlen(build) - strlen(local)] = '\0';
    set_path(dir, sizeof dir, "%s/plugins", build);
    built_plugins_under(dir, want, sizeof want);
    set_path(dir, sizeof dir, "%s/plugins/cloud", build);
    built_plugins_under(dir, want, sizeof want);
    sort_words(want);
    spec.env = env;
    spec.args = (const char *const[]){ "version", NULL };
    r = run_spec(&spec);
    expect_run(&r, 0, NULL);
    for (const char *row = strstr(r.out, "\nplugins:\n"); row != NULL;
         row = strstr(row + 1, "\n  ")) {
        char name[64], path[PATH_MAX];

        if (sscanf(row, " %63s %*s ABI %*s %4095s", name, path) != 2)
            continue;
        cr_expect(strncmp(path, build, strlen(build)) == 0, "%s from %s", name, path);
        strcat(got, name);
        strcat(got, " ");
    }
    cr_expect(strstr(want, "local ") != NULL, "built: %s", want);
    cr_expect_str_eq(got, want);
    free_run(&r);
}

Test(cli, version_command_lists_library_abi_and_plugins)
{
    cli_run r = SBX("version");
    char want[PATH_MAX * 2];

    set_path(want, sizeof want, "sbx:         %s\nlibsbx:      %s\nplugin ABI:  1.6\nplugins:\n",
             sbx_version(), sbx_version());
    cr_expect_eq(r.status, 0, "%d %s", r.status, r.err);
    cr_expect(strncmp(r.out, want, strlen(want)) == 0, "got \"%s\"", r.out);
    /* The local plugin's row: name, version, ABI, path. */
    const char *row = strstr(r.out, "\n  local ");
    char name[64], version[64], abi[64], path[PATH_MAX];
    cr_assert_not_null(row, "got \"%s\"", r.out);
    cr_assert_eq(sscanf(row, " %63s %63s ABI %63s %4095s", name, version, abi, path), 4,
                 "row \"%s\"", row);
    cr_expect_str_eq(version, sbx_version());
    cr_expect_str_eq(abi, "1.6");
    cr_expect(strlen(path) > 28 &&
              strcmp(path + strlen(path) - 28, "/plugins/local/.libs/libsbx-local.so" + 8) == 0,
              "path %s", path);
    free_run(&r);
    r = SBX("version", "--json");
    json_object *doc = json_tokener_parse(r.out), *v;
    cr_assert(doc != NULL, "%s", r.out);
    cr_expect(json_object_object_get_ex(doc, "plugin_abi", &v) &&
              strcmp(json_object_get_string(v), "1.6") == 0);
    cr_expect(json_object_object_get_ex(doc, "libsbx", &v) &&
              strcmp(json_object_get_string(v), sbx_version()) == 0);
    json_object_put(doc);
    free_run(&r);
}

Test(cli, create_failures_leave_nothing)
{
    char bad[PATH_MAX + 16], blocker[PATH_MAX];
    set_path(blocker, sizeof blocker, "%s/a-file", g_tmpdir);
    FILE *bf = fopen(blocker, "w");
    cr_assert_not_null(bf);
    fclose(bf);
    set_path(bad, sizeof bad, "%s/sub", blocker);
    cli_run r = SBX("create", "-w", bad);

    EXPECT_TOOL_FAILURE(&r, bad, "a component is not a directory");
    free_run(&r);
    r = SBX("create", "--cpu", "2");
    EXPECT_TOOL_FAILURE(&r, "cpu");
    free_run(&r);
    r = SBX("create", "extra");
    EXPECT_TOOL_FAILURE(&r, "unexpected argument \"extra\"");
    free_run(&r);
    /* An unusable state directory: refused, and nothing is left. */
    char var[PATH_MAX + 32], file[PATH_MAX];
    set_path(file, sizeof file, "%s/not-a-dir", g_tmpdir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    set_path(var, sizeof var, "SBX_STATE_DIR=%s", file);
    const char *env[] = { var, NULL };
    cli_spec spec = { 0 };
    spec.args = (const char *const[]){ "create", NULL };
    spec.env = env;
    r = run_spec(&spec);
    EXPECT_TOOL_FAILURE(&r, "state directory");
    free_run(&r);
}

/* ------------------------------------------------------------ the rest */

Test(cli, version)
{
    cli_run r = SBX("--version");

    expect_run(&r, 0, "sbx 0.1.0\n");
    cr_expect_str_empty(r.err);
    free_run(&r);
}

Test(cli, help)
{
    cli_run r = SBX("--help");

    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "Usage: sbx") != NULL, "%s", r.out);
    cr_expect_str_empty(r.err);
    free_run(&r);
    r = SBX("run", "--help");
    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "Usage: sbx run") != NULL, "%s", r.out);
    free_run(&r);
    r = SBX("help", "exec-code");
    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "Usage: sbx exec-code") != NULL, "%s", r.out);
    free_run(&r);
    r = SBX("backends", "-h");
    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "Usage: sbx backends") != NULL, "%s", r.out);
    free_run(&r);
    static const char *const cmds[] = { "create", "exec", "cp", "ls", "rm", "ps", "inspect",
                                        "version", "stop", "start" };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[64];

        snprintf(want, sizeof want, "Usage: sbx %s", cmds[i]);
        r = SBX(cmds[i], "--help");
        cr_expect_eq(r.status, 0, "sbx %s --help: %d", cmds[i], r.status);
        cr_expect(strncmp(r.out, want, strlen(want)) == 0, "%s", r.out);
        cr_expect_str_empty(r.err);
        free_run(&r);
        r = SBX("help", cmds[i]);
        cr_expect(strncmp(r.out, want, strlen(want)) == 0, "%s", r.out);
        free_run(&r);
    }
}

Test(cli, unknown_subcommand_is_125)
{
    cli_run r = SBX("frobnicate");

    EXPECT_TOOL_FAILURE(&r, "frobnicate");
    free_run(&r);
}

Test(cli, unknown_option_is_125)
{
    cli_run r = SBX("--bogus");

    EXPECT_TOOL_FAILURE(&r, "--bogus");
    free_run(&r);
}

Test(cli, no_subcommand_is_125)
{
    cli_spec spec = { 0 };
    cli_run r;

    spec.args = (const char *const[]){ NULL };
    r = run_spec(&spec);
    cr_expect_eq(r.status, 125);
    cr_expect_eq(r.out_len, 0);
    cr_expect(strstr(r.err, "Usage: sbx") != NULL, "%s", r.err);
    free_run(&r);
}

/* ------------------------------------------- creation options (run/create) */

Test(cli, run_file_copies_a_host_file_keeping_its_mode)
{
    char src[PATH_MAX + 16], arg[PATH_MAX + 64];
    FILE *f;

    snprintf(src, sizeof src, "%s/tool.sh", g_tmpdir);
    f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\necho tool ran\n", f);
    fclose(f);
    cr_assert_eq(chmod(src, 0750), 0);
    snprintf(arg, sizeof arg, "--file=%s:/bin/tool.sh", src);
    cli_run r = SBX("run", arg, "--", "sh", "-c",
                    "stat -c %a \"$SANDBOX_ROOT/bin/tool.sh\" && \"$SANDBOX_ROOT/bin/tool.sh\"");
    expect_run(&r, 0, "750\ntool ran\n");
    free_run(&r);

    r = SBX("run", "--file", "no-colon", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "invalid --file value \"no-colon\"");
    free_run(&r);
    snprintf(arg, sizeof arg, "%s/missing:/x", g_tmpdir);
    r = SBX("run", "--file", arg, "--", "true");
    EXPECT_TOOL_FAILURE(&r, "missing");
    free_run(&r);
}

Test(cli, run_refuses_what_local_cannot_honour)
{
    cli_run r = SBX("run", "--image", "python:3.12-slim", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "code=configuration", "option=image");
    free_run(&r);
    r = SBX("run", "--no-internet", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "code=configuration", "allow_internet");
    free_run(&r);
    r = SBX("run", "--opt", "create_timeout=120", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "code=configuration", "backend_options");
    free_run(&r);
    r = SBX("run", "--opt", "novalue", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "invalid --opt value \"novalue\"");
    free_run(&r);
    r = SBX("run", "--preset", "Bad Name", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "invalid preset name \"Bad Name\"");
    free_run(&r);
    r = SBX("run", "--preset", "no-such-preset", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "code=not_found", "no-such-preset");
    free_run(&r);
}

Test(cli, run_preset_from_preset_path)
{
    char dir[PATH_MAX + 16], file[PATH_MAX + 32], env_path[PATH_MAX + 48];
    FILE *f;

    snprintf(dir, sizeof dir, "%s/presets", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(file, sizeof file, "%s/t-cli.json", dir);
    f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs("{\"name\": \"t-cli\", \"description\": \"cli test\", \"env\": {\"P\": \"preset\"},"
          " \"setup_commands\": [\"echo set up > \\\"$SANDBOX_ROOT/marker\\\"\"]}", f);
    fclose(f);
    snprintf(env_path, sizeof env_path, "SBX_PRESET_PATH=%s", dir);
    const char *const env[] = { env_path, NULL };
    const char *const args[] = { "run", "--preset", "t-cli", "-e", "Q=caller", "--", "sh", "-c",
                                 "printf '%s %s ' \"$P\" \"$Q\"; cat \"$SANDBOX_ROOT/marker\"",
                                 NULL };
    cli_spec spec = { 0 };
    spec.args = args;
    spec.env = env;
    cli_run r = run_spec(&spec);
    expect_run(&r, 0, "preset caller set up\n");
    free_run(&r);

    const char *const list_args[] = { "presets", NULL };
    spec.args = list_args;
    r = run_spec(&spec);
    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "t-cli") != NULL && strstr(r.out, "cli test") != NULL &&
              strstr(r.out, "claude-code") != NULL, "%s", r.out);
    free_run(&r);
}

/* @text with every duration "N.N s" replaced by "T s" (new string). */
static char *mask_secs(const char *text)
{
    char *out = malloc(strlen(text) + 1), *o = out;
    const char *p = text;

    cr_assert_not_null(out);
    while (*p) {
        const char *q = p;
        while (*q >= '0' && *q <= '9')
            q++;
        if (q > p && (p == text || p[-1] == ' ') && q[0] == '.' && q[1] >= '0' &&
            q[1] <= '9' && strncmp(q + 2, " s", 2) == 0) {
            *o++ = 'T';
            p = q + 2;
            continue;
        }
        *o++ = *p++;
    }
    *o = '\0';
    return out;
}

/* Writes preset @name with the JSON @setup_commands under g_tmpdir/presets;
 * stores "SBX_PRESET_PATH=DIR" in @var. */
static void write_setup_preset(const char *name, const char *setup_commands, char *var,
                               size_t var_size)
{
    char dir[PATH_MAX + 16], file[PATH_MAX + 64];
    FILE *f;

    snprintf(dir, sizeof dir, "%s/presets", g_tmpdir);
    cr_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
    snprintf(file, sizeof file, "%s/%s.json", dir, name);
    f = fopen(file, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"name\": \"%s\", \"setup_commands\": %s}", name, setup_commands);
    fclose(f);
    snprintf(var, var_size, "SBX_PRESET_PATH=%s", dir);
}

/*
 * `sbx run --preset` shows each setup step as it starts and how long it
 * took; a failing step's error carries the tail of each output stream
 * (shown once, below the error's first line), and the command never runs.
 * With -v the steps' output is shown as it comes.
 */
Test(cli, run_preset_shows_setup_steps_and_the_failing_output)
{
    char var[PATH_MAX + 48];
    const char *env[] = { var, NULL };
    const char *const args[] = { "run", "--preset", "t-steps", "--", "echo", "never", NULL };
    const char *const vargs[] = { "run", "-v", "--preset", "t-steps", "--", "echo", "never",
                                  NULL };
    cli_spec spec = { 0 };
    const char *fail_cmd = "echo out-line; echo err-line >&2; exit 3";
    char *err, want[4096];

    write_setup_preset("t-steps", "[\"echo hello\", \"echo out-line; echo err-line >&2; "
                       "exit 3\"]", var, sizeof var);
    spec.args = args;
    spec.env = env;
    cli_run r = run_spec(&spec);
    expect_run(&r, 125, "");
    err = mask_secs(r.err);
    snprintf(want, sizeof want,
             "sbx: preset t-steps: step 1/2: echo hello\n"
             "sbx: preset t-steps: step 1/2 done in T s\n"
             "sbx: preset t-steps: step 2/2: %s\n"
             "sbx: preset t-steps: step 2/2 failed with exit code 3 after T s\n"
             "sbx: preset setup command 2 of 2 failed with exit code 3: %s [code=creation_failed; "
             "backend=local; op=create; step=preset_setup; exit_code=3]\n"
             "--- stdout ---\nout-line\n--- stderr ---\nerr-line\n",
             fail_cmd, fail_cmd);
    cr_expect_str_eq(err, want);
    free(err);
    free_run(&r);

    spec.args = vargs;
    r = run_spec(&spec);
    expect_run(&r, 125, "");
    err = mask_secs(r.err);
    snprintf(want, sizeof want,
             "sbx: preset t-steps: step 1/2: echo hello\n"
             "hello\n"
             "sbx: preset t-steps: step 1/2 done in T s\n"
             "sbx: preset t-steps: step 2/2: %s\n",
             fail_cmd);
    cr_expect(strncmp(err, want, strlen(want)) == 0, "stderr \"%s\"", err);
    /* The two streams of step 2 arrive in either order. */
    const char *rest = err + strlen(want);
    cr_expect(strncmp(rest, "out-line\nerr-line\n", 18) == 0 ||
              strncmp(rest, "err-line\nout-line\n", 18) == 0, "stderr \"%s\"", err);
    cr_expect(strstr(rest, "sbx: preset t-steps: step 2/2 failed with exit code 3 after T s\n"
                           "sbx: preset setup command 2 of 2") == rest + 18, "stderr \"%s\"", err);
    free(err);
    free_run(&r);

    /* Output that does not end a line: sbx's next line starts its own. */
    const char *const pargs[] = { "run", "-v", "--preset", "t-partial", "--", "echo", "ok",
                                  NULL };
    write_setup_preset("t-partial", "[\"printf partial\"]", var, sizeof var);
    spec.args = pargs;
    r = run_spec(&spec);
    expect_run(&r, 0, "ok\n");
    err = mask_secs(r.err);
    cr_expect_str_eq(err, "sbx: preset t-partial: step 1/1: printf partial\npartial\n"
                          "sbx: preset t-partial: step 1/1 done in T s\n");
    free(err);
    free_run(&r);
}

/*
 * CASE-49 through sbx: a command killed by the sandbox's memory limit says
 * so on stderr, as a timeout does, and exits 137; `kill -9 $$` exits 137
 * silently (bubblewrap: the sandbox's memory cgroup).
 */
Test(cli, run_says_when_the_memory_limit_killed_the_command)
{
    /* bubblewrap runs the sandbox as uid 65534: it must reach TMPDIR. */
    cr_assert_eq(chmod(g_tmpdir, 0711), 0);
    cli_run r = SBX("run", "-b", "bubblewrap", "--memory", "64", "--", "dd", "if=/dev/zero",
                    "of=/dev/null", "bs=256M", "count=1");
    expect_run(&r, 137, "");
    cr_expect_str_eq(r.err, "sbx: the command ran out of memory and was killed "
                            "(the sandbox's memory limit)\n");
    free_run(&r);
    r = SBX("run", "-b", "bubblewrap", "--memory", "64", "--", "sh", "-c", "kill -9 $$");
    expect_run(&r, 137, "");
    cr_expect_str_eq(r.err, "");
    free_run(&r);
}

Test(cli, presets_json_lists_the_builtin_presets)
{
    cli_run r = SBX("presets", "--json");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    json_object *array = json_tokener_parse(r.out);
    cr_assert_not_null(array, "not JSON: %s", r.out);
    cr_assert(json_object_is_type(array, json_type_array));
    cr_assert_eq(json_object_array_length(array), 3);
    const char *names[] = { "claude-code", "claude-code-codex", "codex" };
    for (size_t i = 0; i < 3; i++) {
        json_object *o = json_object_array_get_idx(array, i), *v;
        cr_assert(json_object_object_get_ex(o, "name", &v));
        cr_assert_str_eq(json_object_get_string(v), names[i]);
        cr_assert(json_object_object_get_ex(o, "memory_mb", &v));
        cr_assert_eq(json_object_get_int(v), 2048);
        cr_assert(json_object_object_get_ex(o, "source", &v));
        cr_assert(strstr(json_object_get_string(v), ".json") != NULL);
    }
    json_object_put(array);
    free_run(&r);
}

/* The mode plugins run in, per usable backend; a plugin that crashes while
 * loading is listed with the signal (it was inspected in a helper). */
Test(cli, backends_shows_the_plugin_mode)
{
    static const char *const inproc[] = { "SBX_PLUGIN_MODE=inprocess", NULL };
    static const char *const outproc[] = { "SBX_PLUGIN_MODE=outofprocess", NULL };
    static const char *const bad[] = { "SBX_PLUGIN_MODE=sideways", NULL };
    cli_run r = SBX_KEEP_ENV(outproc, "backends");

    cr_assert_eq(r.status, 0, "stderr: \"%s\"", r.err);
    cr_expect_not_null(strstr(r.out, "\n    mode:        outofprocess\n"), "%s", r.out);
    cr_expect_null(strstr(r.out, "mode:        inprocess"));
    cr_expect_not_null(strstr(r.out, "crashed while loading in a helper process "
                                     "(killed by signal 11 (SIGSEGV))"), "%s", r.out);
    free_run(&r);

    r = SBX_KEEP_ENV(inproc, "backends");
    cr_assert_eq(r.status, 0, "stderr: \"%s\"", r.err);
    cr_expect_not_null(strstr(r.out, "\n    mode:        inprocess\n"), "%s", r.out);
    cr_expect_null(strstr(r.out, "mode:        outofprocess"));
    free_run(&r);

    r = SBX_KEEP_ENV(bad, "backends");
    cr_assert_eq(r.status, 0, "stderr: \"%s\"", r.err);
    cr_expect_not_null(strstr(r.out, "mode:        unusable: invalid SBX_PLUGIN_MODE "
                                     "\"sideways\""), "%s", r.out);
    free_run(&r);
}

/* `sbx create` makes a detached sandbox: gc leaves it alone while its
 * lifetime lasts (the 600 s one), lists it in a dry run once it has ended
 * (the 1 s one), then destroys and forgets it. */
Test(cli, gc_reaps_an_expired_create_and_forgets_it)
{
    char *id = CREATE("--timeout", "1");
    char *lasting = CREATE("--timeout", "600");
    char *rec = record_path(id), *want;
    cli_run r;
    usleep(1300 * 1000);
    r = SBX_KEEP("gc", "--dry-run", "--json");
    cr_assert(asprintf(&want, "[{\"backend\":\"local\",\"id\":\"%s\",\"create_token\":", id) > 0);
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.err);
    cr_assert(strncmp(r.out, want, strlen(want)) == 0, "got \"%s\"", r.out);
    cr_assert(strstr(r.out, ",\"reason\":\"expired\",\"result\":\"would_reap\","
                            "\"error\":null}]\n") != NULL, "got \"%s\"", r.out);
    free(want);
    free_run(&r);
    cr_assert_eq(access(rec, F_OK), 0, "the dry run forgot it");
    r = SBX_KEEP("gc");
    cr_assert(asprintf(&want, "local %s expired reaped\n", id) > 0);
    expect_run(&r, 0, want);
    free(want);
    free_run(&r);
    cr_assert_eq(access(rec, F_OK), -1, "gc did not forget %s", id);
    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 125, "rm after gc: %d (%s)", r.status, r.err);
    free_run(&r);
    /* The one whose lifetime lasts was left alone, by both runs. */
    r = SBX_KEEP("rm", lasting);
    cr_assert(asprintf(&want, "%s\n", lasting) > 0);
    expect_run(&r, 0, want);
    free(want);
    free_run(&r);
    free(lasting);
    r = SBX("gc", "extra");
    EXPECT_TOOL_FAILURE(&r, "unexpected argument \"extra\"");
    free_run(&r);
    free(rec);
    free(id);
}

/* Backends not set up on this host (no credential, no configuration) come
 * on one line of gc's stderr together; one that is set up but cannot be
 * reached (a Docker Engine at a closed port) keeps a line of its own. */
Test(cli, gc_names_backends_not_set_up_on_one_line)
{
    const char *cli = getenv("SBX_CLI"), *slash = cli ? strrchr(cli, '/') : NULL;
    char *path, *docker;
    cli_run r;

    cr_assert_not_null(slash);
    /* The build tree: SBX_CLI is TOP/cli/sbx. */
    int top = (int)(slash - cli) - 4;
    cr_assert(top > 0 && strncmp(cli + top, "/cli/", 5) == 0, "SBX_CLI %s", cli);
    cr_assert(asprintf(&path, "SBX_PLUGIN_PATH=%.*s/plugins/cloud/e2b/.libs:%.*s/plugins/remote"
                              "/.libs:%.*s/plugins/cloud/runloop/.libs:%.*s/plugins/docker/.libs",
                       top, cli, top, cli, top, cli, top, cli) > 0);
    cr_assert(asprintf(&docker, "DOCKER_HOST=tcp://127.0.0.1:%d", 1) > 0);
    const char *const env[] = { path, docker, NULL };
    r = SBX_KEEP_ENV(env, "gc");
    cr_expect_eq(r.status, 0, "stderr: \"%s\"", r.err);
    cr_expect_str_eq(r.out, "");
    cr_expect_str_eq(r.err, "sbx: gc: backend docker cannot be listed: cannot reach the Docker "
                            "Engine at tcp://127.0.0.1:1: Couldn't connect to server (is dockerd "
                            "running?)\n"
                            "sbx: gc: not set up here, so not listed: e2b, remote, runloop "
                            "(see sbx backends)\n");
    free_run(&r);
    free(docker);
    free(path);
}

/* Every directory of a local sandbox under the test's TMPDIR that no
 * record of the CLI names, space-separated into @out ("" when none). */
static void unrecorded_sandboxes(char *out, size_t size)
{
    char left[4096], *save = NULL;

    out[0] = '\0';
    sandboxes_left(left, sizeof left);
    for (char *id = strtok_r(left, " ", &save); id != NULL; id = strtok_r(NULL, " ", &save)) {
        char *rec = record_path(id);

        if (access(rec, F_OK) != 0)
            snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] ? " " : "", id);
        free(rec);
    }
}

/* An `sbx create` SIGKILLed at any moment leaves no sandbox that no record
 * names: it is made attached (so it dies with sbx) and detached only once
 * recorded. Twenty kills spread over the create's first 200 ms; after
 * each, within 10 s, every sandbox directory left has its record. */
Test(cli, a_create_killed_midway_leaves_no_unrecorded_sandbox)
{
    const char *cli = getenv("SBX_CLI");
    char *const argv[] = { (char *)cli, "create", "--timeout", "15", NULL };
    char **env = child_env(NULL);
    char left[4096];
    posix_spawn_file_actions_t fa;

    cr_assert_not_null(cli, "SBX_CLI is not set (run the tests with make check)");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    for (int k = 0; k < 20; k++) {
        pid_t pid;
        int st;

        cr_assert_eq(posix_spawn(&pid, cli, &fa, NULL, argv, env), 0);
        usleep((useconds_t)(10000 * (k + 1)));
        kill(pid, SIGKILL);
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        double until = now_secs() + 10;
        do {
            unrecorded_sandboxes(left, sizeof left);
            if (left[0] == '\0')
                break;
            usleep(50000);
        } while (now_secs() < until);
        cr_assert_str_empty(left, "kill %d (after %d ms): sandboxes no record names: %s", k,
                            10 * (k + 1), left);
    }
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    /* What was recorded (a create that finished before its kill) goes. */
    sandboxes_left(left, sizeof left);
    char *save = NULL;
    for (char *id = strtok_r(left, " ", &save); id != NULL; id = strtok_r(NULL, " ", &save)) {
        cli_run r = SBX_KEEP("rm", "-f", id);
        cr_assert_eq(r.status, 0, "rm -f %s: %d (%s)", id, r.status, r.err);
        free_run(&r);
    }
    double until = now_secs() + 10;
    do
        sandboxes_left(left, sizeof left);
    while (left[0] != '\0' && now_secs() < until && usleep(50000) == 0);
    cr_assert_str_empty(left, "left after rm: %s", left);
}

/* The process that runs the local plugin (sbx itself in process, its
 * plugin host out of process) SIGKILLed the moment the supervisor program
 * starts, before it ran any of its own code: no sandbox directory was made
 * before that (the supervisor makes it, from a template, and its keeper
 * removes it), so none is left for nobody to remove. The stand-in
 * supervisor records its arguments and kills its parent. */
Test(cli, a_create_killed_as_its_supervisor_starts_leaves_no_directory)
{
    char stub[PATH_MAX], marker[PATH_MAX], var[PATH_MAX + 32], want[PATH_MAX + 64];
    char got[PATH_MAX + 64] = "", left[1024];
    const char *env[2] = { var, NULL };
    int inproc = strcmp(default_mode(), "inprocess") == 0;
    FILE *f;

    set_path(stub, sizeof stub, "%s/stub-supervisor", g_tmpdir);
    set_path(marker, sizeof marker, "%s/stub-args", g_tmpdir);
    f = fopen(stub, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\necho \"$@\" > '%s'\nkill -KILL $PPID\n", marker);
    fclose(f);
    cr_assert_eq(chmod(stub, 0755), 0);
    set_path(var, sizeof var, "SBX_SUPERVISOR=%s", stub);

    cli_run r = SBX_KEEP_ENV(env, "create", "--timeout", "15");
    if (inproc) {
        cr_expect_eq(r.status, 128 + SIGKILL, "status %d, stderr \"%s\"", r.status, r.err);
        cr_expect_str_empty(r.err);
    } else {
        cr_expect_eq(r.status, 125, "status %d, stderr \"%s\"", r.status, r.err);
        static const char head[] = "sbx: the plugin host of backend \"local\" (pid ";

        cr_expect(strncmp(r.err, head, sizeof head - 1) == 0
                  && strstr(r.err, ") died: killed by signal 9 (SIGKILL) [code=connection, "
                            "retryable; backend=local; op=create]\n") != NULL,
                  "stderr \"%s\"", r.err);
    }
    cr_expect_str_empty(r.out);
    free_run(&r);
    f = fopen(marker, "r");
    cr_assert_not_null(f, "the stand-in supervisor did not run");
    cr_assert_not_null(fgets(got, sizeof got, f));
    fclose(f);
    set_path(want, sizeof want, "--control-fd=3 --sandbox-dir=%s/sbx-local-XXXXXX\n", g_tmpdir);
    cr_expect_str_eq(got, want);
    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left, "left: %s", left);
    unlink(stub);
    unlink(marker);
}

/* As above with a workdir of the caller's: its tmp/, which the sandbox
 * would make, is made by the supervisor too (its keeper removes it), so the
 * workdir is left as it was, empty. */
Test(cli, a_create_in_a_workdir_killed_as_its_supervisor_starts_leaves_no_tmp)
{
    char stub[PATH_MAX], marker[PATH_MAX], var[PATH_MAX + 32], want[2 * PATH_MAX + 64];
    char wd[PATH_MAX], got[2 * PATH_MAX + 64] = "", left[1024];
    const char *env[2] = { var, NULL };
    FILE *f;

    set_path(stub, sizeof stub, "%s/stub-supervisor", g_tmpdir);
    set_path(marker, sizeof marker, "%s/stub-args", g_tmpdir);
    set_path(wd, sizeof wd, "%s/wd", g_tmpdir);
    cr_assert_eq(mkdir(wd, 0755), 0);
    f = fopen(stub, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\necho \"$@\" > '%s'\nkill -KILL $PPID\n", marker);
    fclose(f);
    cr_assert_eq(chmod(stub, 0755), 0);
    set_path(var, sizeof var, "SBX_SUPERVISOR=%s", stub);

    cli_run r = SBX_KEEP_ENV(env, "create", "--workdir", wd, "--timeout", "15");
    /* In process sbx itself was killed; out of process its plugin host. */
    cr_expect_eq(r.status, strcmp(default_mode(), "inprocess") == 0 ? 128 + SIGKILL : 125,
                 "status %d, stderr \"%s\"", r.status, r.err);
    free_run(&r);
    f = fopen(marker, "r");
    cr_assert_not_null(f, "the stand-in supervisor did not run");
    cr_assert_not_null(fgets(got, sizeof got, f));
    fclose(f);
    set_path(want, sizeof want, "--control-fd=3 --sandbox-dir=%s/sbx-local-XXXXXX --remove=%s/tmp\n",
             g_tmpdir, wd);
    cr_expect_str_eq(got, want);
    cr_expect(access(wd, F_OK) == 0);
    set_path(got, sizeof got, "%s/tmp", wd);
    cr_expect(access(got, F_OK) != 0, "%s was left", got);
    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left, "left: %s", left);
    rmdir(got);
    rmdir(wd);
    unlink(stub);
    unlink(marker);
}

/* ------------------------------------------------------------ presets */

/* A preset directory under the test's directory with a fifo named like a
 * preset, a file whose inner name is not its file name, and a good one;
 * the "SBX_PRESET_PATH=..." for it in @var. */
static void make_odd_presets(char *dir, size_t dir_size, char *var, size_t var_size)
{
    char path[PATH_MAX + 64];
    FILE *f;

    set_path(dir, dir_size, "%s/presets", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    set_path(path, sizeof path, "%s/fifo.json", dir);
    cr_assert_eq(mkfifo(path, 0644), 0, "mkfifo %s: %s", path, strerror(errno));
    set_path(path, sizeof path, "%s/mis.json", dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"name\": \"other\", \"description\": \"misnamed\"}", f);
    fclose(f);
    set_path(path, sizeof path, "%s/good.json", dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"name\": \"good\", \"description\": \"fine\"}", f);
    fclose(f);
    set_path(var, var_size, "SBX_PRESET_PATH=%s", dir);
}

/* A fifo where a preset file is expected is refused at once (it used to
 * hang `sbx run --preset` and `sbx presets`), and a preset file whose
 * "name" differs from the name it was loaded by is refused naming both. */
Test(cli, preset_fifo_and_misnamed_preset_are_refused)
{
    char dir[PATH_MAX], var[PATH_MAX + 32], want[3 * PATH_MAX];
    const char *env[2] = { var, NULL };
    cli_run r;

    make_odd_presets(dir, sizeof dir, var, sizeof var);
    r = SBX_KEEP_ENV(env, "run", "--preset", "fifo", "--", "true");
    set_path(want, sizeof want,
             "sbx: preset file %s/fifo.json is a fifo, not a regular file [code=invalid_argument; "
             "backend=local; op=preset; option=preset]\n", dir);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    cr_expect_str_empty(r.out);
    cr_expect(r.secs < 10, "took %.1f s", r.secs);
    free_run(&r);

    r = SBX_KEEP_ENV(env, "run", "--preset", "mis", "--", "true");
    set_path(want, sizeof want,
             "sbx: preset file %s/mis.json names preset \"other\", not \"mis\" (the name it was "
             "loaded by) [code=invalid_argument; backend=local; op=preset; "
             "name=mis; file_name=other; option=preset]\n", dir);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    cr_expect_str_empty(r.out);
    free_run(&r);

    /* The list leaves both out (like a file that does not parse); with
     * SBX_DEBUG it says why. */
    const char *debug_env[3] = { var, "SBX_DEBUG=1", NULL };
    r = SBX_KEEP_ENV(debug_env, "presets");
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    set_path(want, sizeof want, "good               fine\n"
                                "                   source: %s/good.json\n", dir);
    cr_expect(strstr(r.out, want) != NULL, "stdout \"%s\"", r.out);
    cr_expect(strstr(r.out, "fifo") == NULL && strstr(r.out, "other") == NULL &&
              strstr(r.out, "mis") == NULL, "stdout \"%s\"", r.out);
    set_path(want, sizeof want, "sbx[host]: preset file left out: preset file %s/fifo.json is a "
                                "fifo, not a regular file\n", dir);
    cr_expect(strstr(r.err, want) != NULL, "stderr \"%s\"", r.err);
    set_path(want, sizeof want, "sbx[host]: preset file %s/mis.json left out: it names preset "
                                "\"other\", not \"mis\"\n", dir);
    cr_expect(strstr(r.err, want) != NULL, "stderr \"%s\"", r.err);
    free_run(&r);

    r = SBX_KEEP_ENV(env, "presets", "--json");
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    json_object *array = json_tokener_parse(r.out);
    cr_assert_not_null(array, "not JSON: %s", r.out);
    cr_expect_eq(json_object_array_length(array), 4, "%s", r.out);
    json_object_put(array);
    free_run(&r);
}

/* ------------------------------------------ who may own the state */

/* Writes @text to @path with @mode (exactly: the umask does not apply). */
static void write_text(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(path, mode), 0);
}

/* A pid that no process has (a child that was reaped). */
static pid_t dead_pid(void)
{
    pid_t pid = fork();

    cr_assert(pid >= 0);
    if (pid == 0)
        _exit(0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    return pid;
}

/* A root-owned tree that a planted record names as a local sandbox's
 * meta directory and root (with "made_tmp": true), in @victim. */
static void make_victim(char *victim, size_t size)
{
    char path[PATH_MAX + 64];

    set_path(victim, size, "%s/victim", g_tmpdir);
    cr_assert_eq(mkdir(victim, 0755), 0);
    set_path(path, sizeof path, "%s/root", victim);
    cr_assert_eq(mkdir(path, 0755), 0);
    set_path(path, sizeof path, "%s/root/keep", victim);
    write_text(path, "precious\n", 0644);
}

/* Asserts the victim tree is as make_victim left it. */
static void expect_victim_intact(const char *victim)
{
    char path[PATH_MAX + 64];
    char *text;

    set_path(path, sizeof path, "%s/root/keep", victim);
    text = slurp(path, NULL);
    cr_expect_str_eq(text, "precious\n");
    free(text);
    set_path(path, sizeof path, "%s/root", victim);
    cr_expect_eq(count_entries(path), 1);
    cr_expect_eq(count_entries(victim), 1);
}

/* The record text a planted file holds: a local sandbox with @victim as
 * its meta directory, @victim/root as its root, a dead supervisor. */
static char *planted_record(const char *id, const char *victim)
{
    char *text;

    cr_assert(asprintf(&text,
                       "{\"created\":\"2025-01-02T03:04:05Z\",\"state\":{\"version\":1,"
                       "\"backend\":\"local\",\"id\":\"%s\",\"timeout_secs\":600,\"data\":"
                       "{\"meta\":\"%s\",\"root\":\"%s/root\",\"owns_root\":true,"
                       "\"made_tmp\":true,\"supervisor_pid\":%d,\"supervisor_start\":1}}}\n",
                       id, victim, victim, (int)dead_pid()) > 0);
    return text;
}

/* Root used a pre-existing sandboxes/ owned by nobody with mode 0777, and
 * a record planted there made `sbx rm` delete a root-owned tree: now
 * every command that reads the state refuses the directory, naming it, its
 * owner and its mode, and the tree is unchanged. */
Test(cli, state_directory_of_another_user_is_refused)
{
    char victim[PATH_MAX], dir[PATH_MAX + 32], file[PATH_MAX + 64], want[2 * PATH_MAX];
    char *text;
    cli_run r;

    cr_assert_eq(geteuid(), 0, "this test plants files as another user: run it as root");
    make_victim(victim, sizeof victim);
    set_path(dir, sizeof dir, "%s/state", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0700), 0);
    set_path(dir, sizeof dir, "%s/state/sandboxes", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0777), 0);
    cr_assert_eq(chmod(dir, 0777), 0);
    cr_assert_eq(chown(dir, 65534, 65534), 0);
    set_path(file, sizeof file, "%s/sbx-local-planted.json", dir);
    text = planted_record("sbx-local-planted", victim);
    write_text(file, text, 0666);
    free(text);
    cr_assert_eq(chown(file, 65534, 65534), 0);

    set_path(want, sizeof want,
             "sbx: refusing the state directory %s: it is owned by uid 65534 (nobody) and has "
             "mode 0777; it must be a directory owned by uid 0 (root) and not writable by group "
             "or others [code=configuration]\n", dir);
    const char *const cmds[][4] = {
        { "rm", "sbx-local-planted", NULL },
        { "ls", "sbx-local-planted", "/", NULL },
        { "exec", "sbx-local-planted", "true", NULL },
        { "ps", NULL },
        { "create", NULL },
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        r = run_keep(cmds[i], NULL);
        cr_expect_eq(r.status, 125, "sbx %s: status %d", cmds[i][0], r.status);
        cr_expect_str_eq(r.err, want, "sbx %s", cmds[i][0]);
        cr_expect_str_empty(r.out, "sbx %s", cmds[i][0]);
        free_run(&r);
        expect_victim_intact(victim);
    }
    /* create made no sandbox for a record it could not keep. */
    char left[1024];
    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left);
    cr_expect_eq(access(file, F_OK), 0);
    expect_mode(dir, 0777);

    /* Owned by root but writable by others: refused all the same. */
    cr_assert_eq(chown(dir, 0, 0), 0);
    r = SBX_KEEP("rm", "sbx-local-planted");
    set_path(want, sizeof want,
             "sbx: refusing the state directory %s: it is owned by uid 0 (root) and has mode "
             "0777; it must be a directory owned by uid 0 (root) and not writable by group or "
             "others [code=configuration]\n", dir);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    free_run(&r);
    expect_victim_intact(victim);
}

/* In a private directory, a record of another user, or one writable by
 * group or others, is refused; so is a state directory below a parent
 * that another user may write (one that is sticky, as /tmp, is fine). */
Test(cli, state_files_and_parents_of_others_are_refused)
{
    char victim[PATH_MAX], dir[PATH_MAX + 32], file[PATH_MAX + 64], want[3 * PATH_MAX];
    char open_dir[PATH_MAX + 32], var[PATH_MAX + 64];
    char *text;
    cli_run r;

    cr_assert_eq(geteuid(), 0, "this test plants files as another user: run it as root");
    make_victim(victim, sizeof victim);
    set_path(dir, sizeof dir, "%s/state", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0700), 0);
    set_path(dir, sizeof dir, "%s/state/sandboxes", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0700), 0);
    set_path(file, sizeof file, "%s/sbx-local-planted.json", dir);
    text = planted_record("sbx-local-planted", victim);
    write_text(file, text, 0600);
    free(text);
    cr_assert_eq(chown(file, 65534, 65534), 0);

    r = SBX_KEEP("rm", "sbx-local-planted");
    set_path(want, sizeof want,
             "sbx: refusing the state file %s: it is owned by uid 65534 (nobody) and has mode "
             "0600; it must be a regular file owned by uid 0 (root) and not writable by group or "
             "others [code=configuration]\n", file);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    free_run(&r);
    expect_victim_intact(victim);

    cr_assert_eq(chown(file, 0, 0), 0);
    cr_assert_eq(chmod(file, 0620), 0);
    r = SBX_KEEP("ls", "sbx-local-planted");
    set_path(want, sizeof want,
             "sbx: refusing the state file %s: it is owned by uid 0 (root) and has mode "
             "0620; it must be a regular file owned by uid 0 (root) and not writable by group or "
             "others [code=configuration]\n", file);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    free_run(&r);
    /* ps reports it, lists the rest (nothing here) and fails. */
    r = SBX_KEEP("ps");
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.out, "ID  NAME  BACKEND  CREATED               STATE\n");
    cr_expect_str_eq(r.err, want);
    free_run(&r);
    expect_victim_intact(victim);

    /* A parent another user may write. */
    set_path(open_dir, sizeof open_dir, "%s/open", g_tmpdir);
    cr_assert_eq(mkdir(open_dir, 0777), 0);
    cr_assert_eq(chmod(open_dir, 0777), 0);
    cr_assert_eq(chown(open_dir, 65534, 65534), 0);
    set_path(var, sizeof var, "SBX_STATE_DIR=%s/state", open_dir);
    const char *env[] = { var, NULL };
    r = SBX_KEEP_ENV(env, "create");
    set_path(want, sizeof want,
             "sbx: refusing the state directory %s/state/sandboxes: its parent %s is owned by "
             "uid 65534 (nobody) and has mode 0777; it must be owned by uid 0 (root) and not "
             "writable by group or others unless sticky [code=configuration]\n",
             open_dir, open_dir);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    cr_expect_str_empty(r.out);
    free_run(&r);
    set_path(file, sizeof file, "%s/state", open_dir);
    cr_expect(access(file, F_OK) < 0 && errno == ENOENT, "%s was made", file);

    /* Sticky and root's (as /tmp): usable. */
    cr_assert_eq(chown(open_dir, 0, 0), 0);
    cr_assert_eq(chmod(open_dir, 01777), 0);
    char *id = create_with(env, NULL);
    set_path(file, sizeof file, "%s/state", open_dir);
    expect_mode(file, 0700);
    r = SBX_KEEP_ENV(env, "rm", id);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(id);
}

/* A state directory that is a symbolic link (to a private directory of the
 * user's own, even) is refused, saying that it is one. */
Test(cli, a_state_directory_that_is_a_symlink_is_refused_as_one)
{
    char real[PATH_MAX + 32], link[PATH_MAX + 32], var[PATH_MAX + 64], want[2 * PATH_MAX];
    const char *env[] = { var, NULL };

    cr_assert_eq(geteuid(), 0, "the message names the user: run it as root");
    set_path(real, sizeof real, "%s/real-state", g_tmpdir);
    cr_assert_eq(mkdir(real, 0700), 0);
    set_path(link, sizeof link, "%s/state-link", g_tmpdir);
    cr_assert_eq(symlink(real, link), 0);
    set_path(var, sizeof var, "SBX_STATE_DIR=%s", link);
    cli_run r = SBX_KEEP_ENV(env, "ps");
    set_path(want, sizeof want,
             "sbx: refusing the state directory %s: it is a symbolic link; it must be a "
             "directory owned by uid 0 (root) and not writable by group or others "
             "[code=configuration]\n", link);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    free_run(&r);
}

/* As an unprivileged user the same rule holds: a state directory of
 * root's, or the user's own that others may write, is refused. */
Test(cli, state_directory_rules_hold_for_an_unprivileged_user)
{
    char base[PATH_MAX + 32], dir[PATH_MAX + 64], var[PATH_MAX + 64], want[2 * PATH_MAX];
    cli_run r;
    cli_spec spec = { 0 };
    const char *env[] = { var, NULL };
    const char *const ps[] = { "ps", NULL };

    cr_assert_eq(geteuid(), 0, "this test switches to uid 65534: run it as root");
    cr_assert_eq(chmod(g_tmpdir, 0711), 0);
    set_path(base, sizeof base, "%s/nobody-state", g_tmpdir);
    cr_assert_eq(mkdir(base, 0755), 0);
    set_path(dir, sizeof dir, "%s/sandboxes", base);
    cr_assert_eq(mkdir(dir, 0755), 0);
    set_path(var, sizeof var, "SBX_STATE_DIR=%s", base);
    spec.args = ps;
    spec.env = env;
    spec.keep_sandboxes = 1;
    spec.as_nobody = 1;

    r = run_spec(&spec);
    set_path(want, sizeof want,
             "sbx: refusing the state directory %s: it is owned by uid 0 (root) and has mode "
             "0755; it must be a directory owned by uid 65534 (nobody) and not writable by group "
             "or others [code=configuration]\n", base);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    free_run(&r);

    cr_assert_eq(chown(base, 65534, 65534), 0);
    cr_assert_eq(chown(dir, 65534, 65534), 0);
    cr_assert_eq(chmod(dir, 0770), 0);
    r = run_spec(&spec);
    set_path(want, sizeof want,
             "sbx: refusing the state directory %s: it is owned by uid 65534 (nobody) and has "
             "mode 0770; it must be a directory owned by uid 65534 (nobody) and not writable by "
             "group or others [code=configuration]\n", dir);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, want);
    free_run(&r);

    /* Its own and private: fine (and made 0700). */
    cr_assert_eq(chmod(dir, 0755), 0);
    r = run_spec(&spec);
    expect_run(&r, 0, "ID  NAME  BACKEND  CREATED               STATE\n");
    cr_expect_str_empty(r.err);
    free_run(&r);
    expect_mode(dir, 0700);
    expect_mode(base, 0700);
}

/* ------------------------------------------------ names from a sandbox */

/* File names are bytes the sandbox chose: the table shows control
 * characters and invalid UTF-8 as C-style escapes (one line per entry,
 * nothing for the terminal to act on), and --json stays valid UTF-8 with
 * the exact bytes in name_base64 / path_base64 when they are not. */
Test(cli, ls_escapes_names_and_json_stays_valid_utf8)
{
    char *id = create_with(NULL, NULL);
    cli_run r;

    r = SBX_KEEP("exec", id, "--", "sh", "-c",
                 "mkdir \"$SANDBOX_ROOT/d\" && cd \"$SANDBOX_ROOT/d\" && "
                 "touch \"$(printf 'a\\033[31mred')\" \"$(printf 'b\\nfile 0 fake')\" "
                 "\"$(printf 'c\\377\\376')\" \"$(printf 'd\\\\back')\" \"$(printf 'e\\303\\251')\" "
                 "\"$(printf 'f\\302\\233x')\" \"$(printf 'g\\tt\\rr\\177')\"");
    expect_run(&r, 0, "");
    free_run(&r);

    r = SBX_KEEP("ls", id, "/d");
    expect_run(&r, 0,
               "file            0  a\\x1b[31mred\n"
               "file            0  b\\nfile 0 fake\n"
               "file            0  c\\xff\\xfe\n"
               "file            0  d\\\\back\n"
               "file            0  e\xc3\xa9\n"
               "file            0  f\\xc2\\x9bx\n"
               "file            0  g\\tt\\rr\\x7f\n");
    cr_expect_str_empty(r.err);
    free_run(&r);

    r = SBX_KEEP("ls", "--json", id, "/d");
    expect_run(&r, 0,
               "[\n"
               "  {\n"
               "    \"name\": \"a\\u001b[31mred\",\n"
               "    \"path\": \"/d/a\\u001b[31mred\",\n"
               "    \"is_dir\": false,\n"
               "    \"size\": 0,\n"
               "    \"mode\": 420\n"
               "  },\n"
               "  {\n"
               "    \"name\": \"b\\nfile 0 fake\",\n"
               "    \"path\": \"/d/b\\nfile 0 fake\",\n"
               "    \"is_dir\": false,\n"
               "    \"size\": 0,\n"
               "    \"mode\": 420\n"
               "  },\n"
               "  {\n"
               "    \"name\": \"c\xef\xbf\xbd\xef\xbf\xbd\",\n"
               "    \"name_base64\": \"Y//+\",\n"
               "    \"path\": \"/d/c\xef\xbf\xbd\xef\xbf\xbd\",\n"
               "    \"path_base64\": \"L2QvY//+\",\n"
               "    \"is_dir\": false,\n"
               "    \"size\": 0,\n"
               "    \"mode\": 420\n"
               "  },\n"
               "  {\n"
               "    \"name\": \"d\\\\back\",\n"
               "    \"path\": \"/d/d\\\\back\",\n"
               "    \"is_dir\": false,\n"
               "    \"size\": 0,\n"
               "    \"mode\": 420\n"
               "  },\n"
               "  {\n"
               "    \"name\": \"e\xc3\xa9\",\n"
               "    \"path\": \"/d/e\xc3\xa9\",\n"
               "    \"is_dir\": false,\n"
               "    \"size\": 0,\n"
               "    \"mode\": 420\n"
               "  },\n"
               "  {\n"
               "    \"name\": \"f\\u009bx\",\n"
               "    \"path\": \"/d/f\\u009bx\",\n"
               "    \"is_dir\": false,\n"
               "    \"size\": 0,\n"
               "    \"mode\": 420\n"
               "  },\n"
               "  {\n"
               "    \"name\": \"g\\tt\\rr\\u007f\",\n"
               "    \"path\": \"/d/g\\tt\\rr\\u007f\",\n"
               "    \"is_dir\": false,\n"
               "    \"size\": 0,\n"
               "    \"mode\": 420\n"
               "  }\n"
               "]\n");
    /* Every name reads back to its exact bytes. */
    json_object *array = json_tokener_parse(r.out), *o, *v;
    cr_assert_not_null(array, "not JSON: %s", r.out);
    o = json_object_array_get_idx(array, 1);
    cr_expect(json_object_object_get_ex(o, "name", &v) &&
              strcmp(json_object_get_string(v), "b\nfile 0 fake") == 0);
    o = json_object_array_get_idx(array, 5);
    cr_expect(json_object_object_get_ex(o, "name", &v) &&
              strcmp(json_object_get_string(v), "f\xc2\x9bx") == 0);
    json_object_put(array);
    free_run(&r);

    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(id);
}

/* ---------------------------------------------------- exec's cwd rule */

/* On local, exec's --cwd is resolved by the rule of the file calls: ".."
 * above the root and a symlink leading out are refused with
 * invalid_argument (ls refuses the same paths), a missing directory is
 * not_found, a file is invalid_argument; the command does not run. */
Test(cli, exec_cwd_is_resolved_like_file_paths)
{
    char *id = create_with(NULL, NULL), want[1024], *root;
    cli_run r;

    r = SBX_KEEP("exec", id, "--", "sh", "-c",
                 "mkdir -p \"$SANDBOX_ROOT/work/sub\" && ln -s /etc \"$SANDBOX_ROOT/etc-link\" && "
                 "ln -s ../.. \"$SANDBOX_ROOT/work/up2\" && touch \"$SANDBOX_ROOT/afile\" && "
                 "printf %s \"$SANDBOX_ROOT\"");
    cr_assert_eq(r.status, 0, "stderr \"%s\"", r.err);
    root = strdup(r.out);
    free_run(&r);

    static const struct {
        const char *cwd, *code, *text;
    } refused[] = {
        { "../..", "invalid_argument", "leads outside the sandbox root (through \"..\" or a "
                                       "symlink)" },
        { "/work/sub/../../..", "invalid_argument", "leads outside the sandbox root (through "
                                                    "\"..\" or a symlink)" },
        { "/etc-link", "invalid_argument", "leads outside the sandbox root (through \"..\" or a "
                                           "symlink)" },
        { "/work/up2", "invalid_argument", "leads outside the sandbox root (through \"..\" or a "
                                           "symlink)" },
        { "/afile", "invalid_argument", "is not a directory" },
        { "/nope", "not_found", NULL },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        r = SBX_KEEP("exec", "--cwd", refused[i].cwd, id, "pwd");
        if (refused[i].text != NULL)
            set_path(want, sizeof want, "sbx: working directory \"%s\" %s [code=%s; "
                     "backend=local; op=exec; path=%s]\n", refused[i].cwd, refused[i].text,
                     refused[i].code, refused[i].cwd);
        else
            set_path(want, sizeof want, "sbx: working directory \"%s\" does not exist in "
                     "sandbox %s [code=%s; backend=local; op=exec; path=%s]\n", refused[i].cwd,
                     id, refused[i].code, refused[i].cwd);
        cr_expect_eq(r.status, 125, "--cwd %s: status %d", refused[i].cwd, r.status);
        cr_expect_str_eq(r.err, want);
        cr_expect_str_empty(r.out, "--cwd %s ran: \"%s\"", refused[i].cwd, r.out);
        free_run(&r);
    }
    /* The file calls refuse the escaping paths alike. */
    r = SBX_KEEP("ls", id, "/etc-link");
    EXPECT_TOOL_FAILURE(&r, "code=invalid_argument", "leads outside the sandbox root");
    free_run(&r);
    r = SBX_KEEP("ls", id, "../..");
    EXPECT_TOOL_FAILURE(&r, "code=invalid_argument", "leads outside the sandbox root");
    free_run(&r);

    /* Inside the root: taken, ".." and all, and the command sees the
     * resolved directory. */
    static const struct {
        const char *cwd, *under;
    } taken[] = { { "/work/sub/../..", "" }, { "work/sub", "/work/sub" },
                  { "/work/../work/", "/work" } };
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        r = SBX_KEEP("exec", "--cwd", taken[i].cwd, id, "pwd");
        set_path(want, sizeof want, "%s%s\n", root, taken[i].under);
        expect_run(&r, 0, want);
        free_run(&r);
    }

    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(root);
    free(id);
}

/* ------------------------------------------------------ stop signals */

/* Processes of this test's sbx runs still alive: an sbx or sbx-plugin-host
 * whose environment has this test's TMPDIR (space-separated pids). */
static void tool_processes_left(char *out, size_t size)
{
    char want[PATH_MAX + 16];
    DIR *d = opendir("/proc");
    struct dirent *de;
    size_t len = 0;

    out[0] = '\0';
    set_path(want, sizeof want, "TMPDIR=%s", g_tmpdir);
    while (d != NULL && (de = readdir(d)) != NULL) {
        char path[300], exe[PATH_MAX], *env, *p;
        const char *base;
        ssize_t n;
        size_t env_len = 0;
        int found = 0;

        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        snprintf(path, sizeof path, "/proc/%s/exe", de->d_name);
        n = readlink(path, exe, sizeof exe - 1);
        if (n <= 0)
            continue;
        exe[n] = '\0';
        base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
        if (strcmp(base, "sbx") != 0 && strcmp(base, "sbx-plugin-host") != 0)
            continue;
        snprintf(path, sizeof path, "/proc/%s/environ", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        env = NULL;
        size_t cap = 0;
        for (;;) {
            if (cap - env_len < 4096) {
                cap = cap ? cap * 2 : 65536;
                env = realloc(env, cap);
                cr_assert_not_null(env);
            }
            size_t got = fread(env + env_len, 1, cap - env_len - 1, f);
            if (got == 0)
                break;
            env_len += got;
        }
        fclose(f);
        for (p = env; p != NULL && p < env + env_len; p += strlen(p) + 1)
            if (strcmp(p, want) == 0)
                found = 1;
        if (env != NULL)
            env[env_len] = '\0';
        free(env);
        if (found)
            len += (size_t)snprintf(out + len, size > len ? size - len : 0, "%s%s(%s)",
                                    len ? " " : "", de->d_name, base);
    }
    if (d != NULL)
        closedir(d);
}

/* Waits up to @secs for no process of this test's sbx runs to be left. */
static void expect_no_tool_processes(double secs)
{
    char left[1024];
    double until = now_secs() + secs;

    do {
        tool_processes_left(left, sizeof left);
        if (left[0] == '\0')
            return;
        usleep(50000);
    } while (now_secs() < until);
    cr_expect_str_empty(left, "processes left: %s", left);
}

/* `sbx exec ID COMMAND` ends on SIGTERM and SIGINT at once, with 128+N,
 * and the command's processes end with it; the sandbox stays. */
Test(cli, exec_ends_on_sigterm_and_sigint_and_its_command_with_it)
{
    char *id = create_with(NULL, NULL);
    static const int sigs[] = { SIGTERM, SIGINT };
    static const char *const names[] = { "SIGTERM", "SIGINT" };

    for (size_t i = 0; i < 2; i++) {
        const char *const args[] = { "exec", id, "--", "sh", "-c", "echo $$; exec sleep 100",
                                     NULL };
        cli_spec spec = { 0 };
        char want[128];

        spec.args = args;
        spec.keep_sandboxes = 1;
        spec.stop_marker = "\n";
        spec.stop_signal = sigs[i];
        cli_run r = run_spec(&spec);
        cr_expect_eq(r.status, 128 + sigs[i], "%s: status %d", names[i], r.status);
        set_path(want, sizeof want, "sbx: %s received; the command was cancelled\n", names[i]);
        cr_expect_str_eq(r.err, want);
        cr_expect(r.stop_secs > 0 && r.secs - r.stop_secs < 1.0,
                  "%s: sbx took %.2f s after the signal", names[i], r.secs - r.stop_secs);
        pid_t pid = (pid_t)atoi(r.out);
        cr_assert(pid > 1, "stdout \"%s\"", r.out);
        double until = now_secs() + 3;
        while (!pid_gone(pid) && now_secs() < until)
            usleep(20000);
        cr_expect(pid_gone(pid), "%s: the command (pid %d) still runs", names[i], (int)pid);
        free_run(&r);
        expect_no_tool_processes(3);
    }
    cli_run r = SBX_KEEP("exec", id, "echo", "still here");
    expect_run(&r, 0, "still here\n");
    free_run(&r);
    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(id);
}

/* ------------------------------------------------------ SIGKILL of sbx */

/* Pids of live processes (other than this one) whose command line holds
 * @s, space-separated in @out ("" when none). */
static void procs_naming(const char *s, char *out, size_t size)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    size_t len = 0;

    out[0] = '\0';
    cr_assert_not_null(d);
    while ((de = readdir(d)) != NULL) {
        char path[300], buf[8192];
        pid_t pid;
        size_t n;
        FILE *f;

        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        pid = (pid_t)atoi(de->d_name);
        if (pid == getpid() || pid_gone(pid))
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", de->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++)
            if (buf[i] == '\0')
                buf[i] = ' ';
        buf[n] = '\0';
        if (strstr(buf, s) != NULL && len < size)
            len += (size_t)snprintf(out + len, size - len, "%s%d", len ? " " : "", (int)pid);
    }
    closedir(d);
}

/* Entries of the test's TMPDIR other than the state directory: what a
 * sandbox (its directory, trash), a spare made ahead or sbx left there,
 * space-separated in @out ("" when none). */
static void tmpdir_entries(char *out, size_t size)
{
    DIR *d = opendir(g_tmpdir);
    struct dirent *de;
    size_t len = 0;

    out[0] = '\0';
    cr_assert_not_null(d, "opendir %s: %s", g_tmpdir, strerror(errno));
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            strcmp(de->d_name, "state") == 0 || len >= size)
            continue;
        len += (size_t)snprintf(out + len, size - len, "%s%s", len ? " " : "", de->d_name);
    }
    closedir(d);
}

/* What is left on the host of the sandbox with directory @dir whose
 * command ran as @cmd, for a message in @out ("" when nothing): the
 * command, the directory, a process naming the directory (its supervisor,
 * keeper, reapers), another entry of TMPDIR, a process of sbx (sbx, its
 * plugin host). */
static void left_of_sandbox(const char *dir, pid_t cmd, char *out, size_t size)
{
    char what[1024];

    out[0] = '\0';
    if (!pid_gone(cmd)) {
        snprintf(out, size, "its command (pid %d)", (int)cmd);
        return;
    }
    if (access(dir, F_OK) == 0) {
        snprintf(out, size, "its directory %s", dir);
        return;
    }
    procs_naming(dir, what, sizeof what);
    if (what[0] != '\0') {
        snprintf(out, size, "processes naming its directory: %s", what);
        return;
    }
    tmpdir_entries(what, sizeof what);
    if (what[0] != '\0') {
        snprintf(out, size, "entries in %s: %s", g_tmpdir, what);
        return;
    }
    tool_processes_left(what, sizeof what);
    if (what[0] != '\0')
        snprintf(out, size, "processes of sbx: %s", what);
}

/*
 * `sbx run` makes an attached sandbox: sbx SIGKILLed while the command
 * runs (the command printed its pid and $SANDBOX_ROOT, so the sandbox and
 * its directory exist), plugins in @mode: within 5 s nothing of the
 * sandbox is left (left_of_sandbox()). Out of process the plugin host,
 * which outlives sbx, destroys it; in process its supervisor, which
 * watches sbx, ends it.
 */
static void run_sigkill_leaves_nothing(const char *mode, int no_lifetime)
{
    char mode_var[64], dir[PATH_MAX], left[2 * PATH_MAX];
    const char *env[] = { mode_var, NULL };
    cli_spec spec = { 0 };
    cli_run r;
    char *root, *end;
    pid_t cmd;
    double killed;
    size_t top = strlen(g_tmpdir) + 1;

    set_path(mode_var, sizeof mode_var, "SBX_PLUGIN_MODE=%s", mode);
    spec.args = no_lifetime
        ? (const char *const[]){ "run", "--no-lifetime", "--", "sh", "-c",
                                 "echo $$ \"$SANDBOX_ROOT\"; exec sleep 100", NULL }
        : (const char *const[]){ "run", "--", "sh", "-c",
                                 "echo $$ \"$SANDBOX_ROOT\"; exec sleep 100", NULL };
    spec.env = env;
    spec.stop_marker = "\n";
    spec.stop_signal = SIGKILL;
    spec.keep_sandboxes = 1;
    r = run_spec(&spec);
    /* run_spec returned once sbx was reaped and its pipes closed. */
    killed = now_secs() - (r.secs - r.stop_secs);
    cr_assert_eq(r.status, 128 + SIGKILL, "%s: status %d; stderr \"%s\"", mode, r.status,
                 r.err);
    cmd = (pid_t)strtol(r.out, &end, 10);
    cr_assert(cmd > 1 && *end == ' ', "%s: stdout \"%s\"", mode, r.out);
    root = end + 1;
    root[strcspn(root, "\n")] = '\0';
    /* Its directory: TMPDIR/sbx-local-XXXXXX, the root below it. */
    cr_assert(strncmp(root, g_tmpdir, top - 1) == 0 && root[top - 1] == '/' &&
              strncmp(root + top, "sbx-local-", 10) == 0,
              "%s: SANDBOX_ROOT \"%s\" is not under %s/sbx-local-", mode, root, g_tmpdir);
    set_path(dir, sizeof dir, "%.*s", (int)(top + strcspn(root + top, "/")), root);
    for (;;) {
        left_of_sandbox(dir, cmd, left, sizeof left);
        if (left[0] == '\0' || now_secs() - killed > 5.0)
            break;
        usleep(20000);
    }
    cr_assert_str_empty(left, "%s: %.1f s after the SIGKILL of sbx run, its sandbox left %s",
                        mode, now_secs() - killed, left);
    fprintf(stderr, "# %s%s: nothing of sbx run's sandbox left %.3f s after its SIGKILL\n",
            mode, no_lifetime ? " (--no-lifetime)" : "", now_secs() - killed);
    free_run(&r);
}

Test(cli, run_sigkill_leaves_nothing_out_of_process)
{
    run_sigkill_leaves_nothing("outofprocess", 0);
}

Test(cli, run_sigkill_leaves_nothing_in_process)
{
    run_sigkill_leaves_nothing("inprocess", 0);
}

/* Without a lifetime, sbx is what bounds the sandbox: its SIGKILL still
 * ends it within 5 s, in both plugin modes. */
Test(cli, run_no_lifetime_sigkill_leaves_nothing_out_of_process)
{
    run_sigkill_leaves_nothing("outofprocess", 1);
}

Test(cli, run_no_lifetime_sigkill_leaves_nothing_in_process)
{
    run_sigkill_leaves_nothing("inprocess", 1);
}

/*
 * An `sbx create` sandbox is detached: `sbx exec` on it SIGKILLed while
 * its command runs (plugins in @mode) ends that command within 5 s (as
 * SIGTERM does) and no process of that sbx is left; the sandbox stays as
 * it was: 5 s after the SIGKILL (when an attached one would be gone) its
 * directory and supervisor are there and it runs the next exec.
 */
static void exec_sigkill_keeps_the_created_sandbox(const char *mode)
{
    char mode_var[64], dir[PATH_MAX], left[1024];
    const char *env[] = { mode_var, NULL };
    cli_spec spec = { 0 };
    cli_run r;
    char *id, *end;
    pid_t cmd, sup;
    double killed;

    set_path(mode_var, sizeof mode_var, "SBX_PLUGIN_MODE=%s", mode);
    id = create_with(env, NULL);
    sup = recorded_supervisor(id);
    set_path(dir, sizeof dir, "%s/%s", g_tmpdir, id);
    cr_assert(sup > 1 && !pid_gone(sup), "%s: no supervisor of %s (pid %d)", mode, id, (int)sup);
    cr_assert_eq(access(dir, F_OK), 0, "%s: %s: %s", mode, dir, strerror(errno));

    spec.args = (const char *const[]){ "exec", id, "--", "sh", "-c", "echo $$; exec sleep 100",
                                       NULL };
    spec.env = env;
    spec.stop_marker = "\n";
    spec.stop_signal = SIGKILL;
    spec.keep_sandboxes = 1;
    r = run_spec(&spec);
    killed = now_secs() - (r.secs - r.stop_secs);
    cr_assert_eq(r.status, 128 + SIGKILL, "%s: status %d; stderr \"%s\"", mode, r.status,
                 r.err);
    cmd = (pid_t)strtol(r.out, &end, 10);
    cr_assert(cmd > 1 && *end == '\n', "%s: stdout \"%s\"", mode, r.out);
    while (!pid_gone(cmd) && now_secs() - killed < 5.0)
        usleep(20000);
    cr_expect(pid_gone(cmd), "%s: the command (pid %d) still runs %.1f s after the SIGKILL of "
              "sbx exec", mode, (int)cmd, now_secs() - killed);
    while (now_secs() < killed + 5.0)
        usleep(50000);
    tool_processes_left(left, sizeof left);
    cr_expect_str_empty(left, "%s: processes of sbx left: %s", mode, left);
    cr_expect(!pid_gone(sup), "%s: the supervisor of %s (pid %d) ended after the SIGKILL of "
              "sbx exec", mode, id, (int)sup);
    cr_expect_eq(access(dir, F_OK), 0, "%s: the directory %s went with sbx exec", mode, dir);
    free_run(&r);

    r = run_keep((const char *const[]){ "exec", id, "echo", "still here", NULL }, env);
    expect_run(&r, 0, "still here\n");
    free_run(&r);
    r = run_keep((const char *const[]){ "rm", id, NULL }, env);
    cr_expect_eq(r.status, 0, "%s: sbx rm: stderr \"%s\"", mode, r.err);
    free_run(&r);
    free(id);
}

Test(cli, exec_sigkill_keeps_the_created_sandbox_out_of_process)
{
    exec_sigkill_keeps_the_created_sandbox("outofprocess");
}

Test(cli, exec_sigkill_keeps_the_created_sandbox_in_process)
{
    exec_sigkill_keeps_the_created_sandbox("inprocess");
}

/* `sbx rm A B` stopped by SIGHUP while A's destroy runs, which finishes
 * whatever the caller does (the fault plugin's deaf destroy, 0.3 s): A is
 * removed (printed and forgotten, not "cancelled" and kept recorded), B
 * is left as it was, and sbx says so with 129. */
Test(cli, rm_stopped_by_a_signal_after_a_destroy_finished_counts_it_removed)
{
    static const char *const faulty[] = { "SBX_BACKEND=faulty", NULL };
    char *a = create_with(faulty, NULL), *b = create_with(faulty, NULL);
    char started[PATH_MAX + 16], started_var[PATH_MAX + 48], want[256];
    const char *env[] = { started_var, "SBX_FAULT_DESTROY_DEAF=0.3", NULL };
    const char *const args[] = { "rm", a, b, NULL };
    cli_spec spec = { 0 };

    set_path(started, sizeof started, "%s/started", g_tmpdir);
    set_path(started_var, sizeof started_var, "SBX_FAULT_STARTED=%s", started);
    spec.args = args;
    spec.env = env;
    spec.keep_sandboxes = 1;
    spec.stop_file = started;
    spec.stop_signal = SIGHUP;
    cli_run r = run_spec(&spec);
    cr_expect_eq(r.status, 129, "status %d, stderr \"%s\"", r.status, r.err);
    set_path(want, sizeof want, "%s\n", a);
    cr_expect_str_eq(r.out, want);
    cr_expect_str_eq(r.err, "sbx: SIGHUP received; 1 sandbox was not removed\n");
    free_run(&r);
    char *ps = ps_summary(NULL);
    set_path(want, sizeof want, "%s:faulty:1", b);
    cr_expect_str_eq(ps, want);
    free(ps);
    r = SBX_KEEP("rm", b);
    set_path(want, sizeof want, "%s\n", b);
    expect_run(&r, 0, want);
    free_run(&r);
    free(a);
    free(b);
}

/* `sbx cp` out of a sandbox whose transfer blocks ends on SIGTERM within a
 * second with 143 and leaves nothing: no staging entry, no directory it
 * made, no process. The fault plugin's transfers of a path named
 * sbx-fault-slow wait for their cancellation; sbx-fault-hang ignores it
 * (sbx then leaves the call behind and removes what it left). */
Test(cli, cp_ends_on_sigterm_while_the_transfer_blocks_and_leaves_nothing)
{
    static const char *const faulty[] = { "SBX_BACKEND=faulty", NULL };
    char *id = create_with(faulty, NULL);
    char out_dir[PATH_MAX + 16], dst[PATH_MAX + 64], src[PATH_MAX + 64], keep[PATH_MAX + 16];
    char started[PATH_MAX + 16], started_var[PATH_MAX + 48];
    const char *started_env[] = { started_var, NULL };
    cli_run r;

    set_path(started, sizeof started, "%s/started", g_tmpdir);
    set_path(started_var, sizeof started_var, "SBX_FAULT_STARTED=%s", started);

    r = SBX_KEEP("exec", id, "--", "sh", "-c",
                 "cd \"$SANDBOX_ROOT\" && mkdir -p d/sbx-fault-slow d/sbx-fault-hang && "
                 "echo x > d/sbx-fault-slow/sbx-fault-slow && "
                 "echo y > d/sbx-fault-hang/sbx-fault-hang");
    expect_run(&r, 0, "");
    free_run(&r);
    /* An existing directory the copies go into must stay as it was. */
    set_path(keep, sizeof keep, "%s/keep", g_tmpdir);
    cr_assert_eq(mkdir(keep, 0755), 0);

    static const struct {
        const char *flag, *path;
        int in_keep;
    } cases[] = {
        { "-r", "/d/sbx-fault-slow", 0 },
        { "-r", "/d/sbx-fault-hang", 0 },
        { "-r", "/d/sbx-fault-slow/sbx-fault-slow", 0 },
        { "-r", "/d/sbx-fault-hang/sbx-fault-hang", 0 },
        { "-r", "/d/sbx-fault-hang", 1 },
        { "-r", "/d/sbx-fault-hang/sbx-fault-hang", 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        set_path(out_dir, sizeof out_dir, "%s/out", g_tmpdir);
        if (cases[i].in_keep)
            set_path(dst, sizeof dst, "%s/x", keep);
        else
            set_path(dst, sizeof dst, "%s", out_dir);   /* made by the copy */
        set_path(src, sizeof src, "%s:%s", id, cases[i].path);
        const char *const args[] = { "cp", cases[i].flag, src, dst, NULL };
        cli_spec spec = { 0 };

        spec.args = args;
        spec.env = started_env;
        spec.keep_sandboxes = 1;
        spec.stop_file = started;
        spec.stop_signal = SIGTERM;
        unlink(started);
        r = run_spec(&spec);
        cr_expect_eq(access(started, F_OK), 0, "%s: the transfer never began", cases[i].path);
        cr_expect_eq(r.status, 143, "%s: status %d, stderr \"%s\"", cases[i].path, r.status,
                     r.err);
        cr_expect_str_eq(r.err, "sbx: SIGTERM received; the copy was cancelled\n", "%s: \"%s\"",
                         cases[i].path, r.err);
        cr_expect(r.secs - r.stop_secs < 1.0, "%s: sbx took %.2f s after the signal",
                  cases[i].path, r.secs - r.stop_secs);
        free_run(&r);
        cr_expect(access(out_dir, F_OK) < 0 && errno == ENOENT, "%s: %s was left",
                  cases[i].path, out_dir);
        cr_expect_eq(count_entries(keep), 0, "%s: something was left in %s", cases[i].path,
                     keep);
        expect_no_tool_processes(3);
    }

    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0, "stderr \"%s\"", r.err);
    free_run(&r);
    free(id);
}

/* `sbx create` ends on SIGTERM while the sandbox is being made (here: a
 * preset's setup command that sleeps): 143 at once, and neither a sandbox
 * nor a record nor the setup command is left. */
Test(cli, create_ends_on_sigterm_and_leaves_no_sandbox)
{
    char dir[PATH_MAX + 16], file[PATH_MAX + 32], started[PATH_MAX + 16];
    char var[PATH_MAX + 48], doc[2 * PATH_MAX], path[PATH_MAX + 32];
    const char *env[] = { var, NULL };
    const char *const args[] = { "create", "--preset", "t-sleepy", NULL };
    cli_spec spec = { 0 };
    FILE *f;

    set_path(dir, sizeof dir, "%s/presets", g_tmpdir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    set_path(started, sizeof started, "%s/started", g_tmpdir);
    set_path(file, sizeof file, "%s/t-sleepy.json", dir);
    set_path(doc, sizeof doc, "{\"name\": \"t-sleepy\", \"setup_commands\": "
             "[\"echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 100\"]}", started, started,
             started);
    f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs(doc, f);
    fclose(f);
    set_path(var, sizeof var, "SBX_PRESET_PATH=%s", dir);

    spec.args = args;
    spec.env = env;
    spec.stop_file = started;
    spec.stop_signal = SIGTERM;
    cli_run r = run_spec(&spec);   /* checks that no sandbox directory is left */
    cr_expect_eq(r.status, 143, "status %d, stderr \"%s\"", r.status, r.err);
    char *masked = mask_secs(r.err);
    char want_err[3 * PATH_MAX];
    set_path(want_err, sizeof want_err,
             "sbx: preset t-sleepy: step 1/1: echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 100\n"
             "sbx: preset t-sleepy: step 1/1 did not finish (after T s)\n"
             "sbx: SIGTERM received; the creation was cancelled\n",
             started, started, started);
    cr_expect_str_eq(masked, want_err);
    free(masked);
    cr_expect_str_empty(r.out);
    cr_expect(r.stop_secs > 0 && r.secs - r.stop_secs < 1.0, "sbx took %.2f s after the signal",
              r.secs - r.stop_secs);
    free_run(&r);

    char *pid_text = slurp(started, NULL);
    pid_t pid = (pid_t)atoi(pid_text);
    free(pid_text);
    cr_assert(pid > 1);
    cr_expect(pid_gone(pid), "the setup command (pid %d) still runs", (int)pid);
    set_path(path, sizeof path, "%s/state/sandboxes", g_tmpdir);
    cr_expect_eq(count_entries(path), 0, "a record was left");
    expect_no_tool_processes(3);
}

/* ------------------------------------------------ -i, -t and the old letters */

/* The letters' old meanings (-t SECONDS, -i IMAGE) are errors naming the
 * new option, exit 125, nothing created. */
Test(cli, old_letters_name_the_new_option)
{
    static const struct {
        const char *args[8];
        const char *err;
    } cases[] = {
        { { "run", "-t", "5", "--", "echo" },
          "sbx: -t now allocates a terminal: the lifetime is now --timeout 5\n"
          "sbx: see 'sbx run --help'\n" },
        { { "run", "-t", "5", "echo", "hi" },
          "sbx: -t now allocates a terminal: the lifetime is now --timeout 5\n"
          "sbx: see 'sbx run --help'\n" },
        { { "run", "-t0.5", "--", "echo" },
          "sbx: -t now allocates a terminal: the lifetime is now --timeout 0.5\n"
          "sbx: see 'sbx run --help'\n" },
        { { "run", "-i", "debian", "--", "sh" },
          "sbx: -i now keeps stdin open: the image is now --image debian\n"
          "sbx: see 'sbx run --help'\n" },
        { { "run", "-idebian", "--", "sh" },
          "sbx: -i now keeps stdin open: the image is now --image debian\n"
          "sbx: see 'sbx run --help'\n" },
        { { "create", "-t", "300" },
          "sbx: -t is no longer the lifetime: the lifetime is now --timeout 300\n"
          "sbx: see 'sbx create --help'\n" },
        { { "create", "-i", "python:3.12-slim" },
          "sbx: -i is no longer the image: the image is now --image python:3.12-slim\n"
          "sbx: see 'sbx create --help'\n" },
        { { "exec", "-t", "5", "someid", "true" },
          "sbx: -t now allocates a terminal: the timeout is now --timeout 5\n"
          "sbx: see 'sbx exec --help'\n" },
        { { "exec", "-t5", "someid", "true" },
          "sbx: -t now allocates a terminal: the timeout is now --timeout 5\n"
          "sbx: see 'sbx exec --help'\n" },
        { { "exec-code", "-t", "5", "print(1)" },
          "sbx: -t is no longer the lifetime: the lifetime is now --timeout 5\n"
          "sbx: see 'sbx exec-code --help'\n" },
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_run r = run_args(cases[i].args);

        cr_expect_eq(r.status, 125, "sbx %s %s %s: exit status %d", cases[i].args[0],
                     cases[i].args[1], cases[i].args[2], r.status);
        cr_expect_str_empty(r.out, "sbx %s %s: stdout \"%s\"", cases[i].args[0],
                            cases[i].args[1], r.out);
        cr_expect_str_eq(r.err, cases[i].err);
        free_run(&r);
    }
}

/* -t needs a terminal on stdin (here /dev/null, then a pipe). */
Test(cli, tty_needs_a_terminal)
{
    static const char err[] = "sbx: the input device is not a TTY (-t needs a terminal on "
                              "stdin)\n";
    cli_spec spec = { 0 };
    cli_run r = SBX("run", "-t", "--", "true");

    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, err);
    cr_expect_str_empty(r.out);
    free_run(&r);
    spec.args = (const char *const[]){ "run", "-it", "--", "cat", NULL };
    spec.stdin_data = "data\n";
    r = run_spec(&spec);
    cr_expect_eq(r.status, 125);
    cr_expect_str_eq(r.err, err);
    cr_expect_str_empty(r.out);
    free_run(&r);
}

/* -i passes sbx's stdin on; without it the command's stdin is empty. */
Test(cli, interactive_pipes_stdin)
{
    cli_spec spec = { 0 };
    cli_run r;
    char *id;

    spec.args = (const char *const[]){ "run", "-i", "--", "sh", "-c", "cat; exit 6", NULL };
    spec.stdin_data = "data\nmore";
    r = run_spec(&spec);
    expect_run(&r, 6, "data\nmore");
    cr_expect_str_empty(r.err);
    free_run(&r);
    spec.args = (const char *const[]){ "run", "--interactive", "--", "wc", "-c", NULL };
    spec.stdin_data = "12345";
    r = run_spec(&spec);
    expect_run(&r, 0, "5\n");
    free_run(&r);
    spec.args = (const char *const[]){ "run", "--", "sh", "-c", "cat; echo end", NULL };
    r = run_spec(&spec);
    expect_run(&r, 0, "end\n");
    free_run(&r);

    id = CREATE("--timeout", "120");
    spec.keep_sandboxes = 1;
    spec.args = (const char *const[]){ "exec", "-i", id, "cat", NULL };
    spec.stdin_data = "data\n";
    r = run_spec(&spec);
    expect_run(&r, 0, "data\n");
    cr_expect_str_empty(r.err);
    free_run(&r);
    spec.args = (const char *const[]){ "exec", id, "cat", NULL };
    r = run_spec(&spec);
    expect_run(&r, 0, "");
    free_run(&r);
    /* The command's stderr stays its own without a terminal. */
    spec.args = (const char *const[]){ "exec", "-i", id, "--", "sh", "-c",
                                       "read x; echo \"$x\" >&2; exit 3", NULL };
    r = run_spec(&spec);
    cr_expect_eq(r.status, 3);
    cr_expect_str_empty(r.out);
    cr_expect_str_eq(r.err, "data\n");
    free_run(&r);
    r = SBX_KEEP("rm", id);
    cr_expect_eq(r.status, 0);
    free_run(&r);
    free(id);
}

/* A sandbox never holds sbx's stdout: `id=$(sbx create -b bubblewrap)`
 * returns once the id is printed, not when the sandbox ends (its lifetime
 * here, 60 s, would be the wait). */
Test(cli, create_on_bubblewrap_does_not_hold_stdout)
{
    cr_assert_eq(chmod(g_tmpdir, 0711), 0);
    cli_run r = SBX_KEEP("create", "--backend", "bubblewrap", "--timeout", "60");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert(r.out_len > 11 && strncmp(r.out, "sbx-bwrap-", 10) == 0, "%s", r.out);
    cr_expect(r.secs < 30, "sbx create returned after %.1f s", r.secs);
    char *id = strndup(r.out, r.out_len - 1);
    free_run(&r);
    r = SBX("rm", id);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    free_run(&r);
    free(id);
}

/* ------------------------------------------------ pricing and agent */

Test(cli, pricing_prints_the_table_with_sources)
{
    cli_run r = SBX("pricing");
    json_object *doc, *e2b, *v;

    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.err, "");
    cr_assert(strncmp(r.out, "BACKEND     USD/VCPU-S         USD/GIB-S          GPUS  BILLED  "
                             "READ ON     SOURCE\n", 83) == 0, "%s", r.out);
    cr_assert(strstr(r.out, "\ne2b         0.000014           0.0000045          0     1s      "
                            "2026-08     https://e2b.dev/docs/faq/calculate-sandbox-price\n"),
              "%s", r.out);
    cr_assert(strstr(r.out, "\nlocal       0                  0                  0     cont.   "
                            "-           -\n"), "%s", r.out);
    cr_assert(strstr(r.out, "\nrunpod      -                  -                  7     1s"),
              "%s", r.out);
    free_run(&r);

    r = SBX("pricing", "--json");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    doc = json_tokener_parse(r.out);
    cr_assert_not_null(doc, "not JSON: %s", r.out);
    cr_assert(json_object_object_get_ex(json_object_object_get(doc, "backends"), "e2b", &e2b));
    cr_assert(json_object_object_get_ex(e2b, "source_url", &v));
    cr_assert_str_eq(json_object_get_string(v), "https://e2b.dev/docs/faq/calculate-sandbox-price");
    json_object_put(doc);
    free_run(&r);
}

/* The PATH that puts the stand-in agent CLIs of tests/agents first. */
static char *agents_path(void)
{
    char *p;

    cr_assert(asprintf(&p, "PATH=%s/agents:/usr/local/bin:/usr/bin:/bin",
                       getenv("SBX_TEST_SRCDIR")) > 0);
    return p;
}

Test(cli, agent_prints_the_answer_and_exits_0_only_on_success)
{
    char *path = agents_path();
    cli_run r = SBX("agent", "-e", path, "F1");

    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "done\n");
    cr_assert_str_eq(r.err, "");
    free_run(&r);

    /* CASE-56 G1: exit code 0 from the CLI, a failed run all the same. */
    r = SBX("agent", "-e", path, "G1");
    cr_assert_eq(r.status, 1);
    cr_assert_str_eq(r.out, "");
    cr_assert_str_eq(r.err, "sbx: the agent run failed: success with is_error true: API Error: "
                            "Rate limit reached [code=rate_limited]\n");
    free_run(&r);

    /* Output that is not the CLI's JSON: sbx's own failure. */
    r = SBX("agent", "-e", path, "garbage");
    cr_assert_eq(r.status, 125);
    cr_assert(strstr(r.err, "printed no claude-code JSON record [code=command_failed"), "%s",
              r.err);
    free_run(&r);
    free(path);
}

Test(cli, agent_json_has_exact_costs_and_null_for_unknown_ones)
{
    char *path = agents_path();
    cli_run r = SBX("agent", "--json", "--harness", "opencode", "-e", path, "F5");
    json_object *doc, *usage, *v;

    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert(strstr(r.out, "\"llm_cost_usd\": 0.011117,"), "%s", r.out);
    doc = json_tokener_parse(r.out);
    cr_assert_not_null(doc, "not JSON: %s", r.out);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(doc, "status")), "succeeded");
    cr_assert_str_eq(json_object_get_string(json_object_object_get(doc, "text")), "PONG");
    cr_assert_eq(json_object_get_int(json_object_object_get(doc, "exit_code")), 0);
    usage = json_object_object_get(doc, "usage");
    cr_assert_eq(json_object_get_int64(json_object_object_get(usage, "input_tokens")), 23088);
    cr_assert_eq(json_object_get_int64(json_object_object_get(usage, "reasoning_tokens")), 31);
    cr_assert(json_object_object_get_ex(usage, "compute_cost_usd", &v) && v != NULL);
    json_object_put(doc);
    free_run(&r);

    /* CASE-41 F3: no cost reported: null, never 0; still a success. */
    r = SBX("agent", "--json", "-e", path, "F3");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert(strstr(r.out, "\"llm_cost_usd\": null,"), "%s", r.out);
    cr_assert(strstr(r.out, "\"input_tokens\": 12,"), "%s", r.out);
    free_run(&r);

    /* CASE-41 F4: failed, exit status 1, the paid cost kept. */
    r = SBX("agent", "--json", "-e", path, "F4");
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.out, "\"status\": \"failed\","), "%s", r.out);
    cr_assert(strstr(r.out, "\"reason\": \"error_max_turns\","), "%s", r.out);
    cr_assert(strstr(r.out, "\"llm_cost_usd\": 0.41,"), "%s", r.out);
    cr_assert(strstr(r.out, "\"exit_code\": 1,"), "%s", r.out);
    free_run(&r);
    free(path);
}

Test(cli, agent_writes_the_ledger_named_by_SBX_LEDGER)
{
    char *path = agents_path();
    char *ledger, *ledger_env;
    const char *env[2] = { NULL, NULL };
    const char *args[] = { "agent", "--harness", "codex", "-e", path, "C1", NULL };
    cli_spec spec = { 0 };
    char line[4096];
    cli_run r;
    FILE *f;
    int n = 0;

    cr_assert(asprintf(&ledger, "%s/ledger.jsonl", g_tmpdir) > 0);
    cr_assert(asprintf(&ledger_env, "SBX_LEDGER=%s", ledger) > 0);
    env[0] = ledger_env;
    spec.args = args;
    spec.env = env;
    r = run_spec(&spec);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "The repository has a README.\n");
    free_run(&r);
    f = fopen(ledger, "r");
    cr_assert_not_null(f, "no ledger written");
    while (fgets(line, sizeof line, f)) {
        if (n == 0) {
            cr_assert(strstr(line, "\"kind\":\"agent_call\""), "%s", line);
            cr_assert(strstr(line, "\"harness\":\"codex\""), "%s", line);
            cr_assert(strstr(line, "\"llm_cost_usd\":null"), "%s", line);
            cr_assert(strstr(line, "\"cache_read_tokens\":24448,"), "%s", line);
        } else {
            cr_assert(strstr(line, "\"kind\":\"sandbox\""), "%s", line);
            cr_assert(strstr(line, "\"end\":\"destroyed\""), "%s", line);
            cr_assert(strstr(line, "\"agent_calls\":1,"), "%s", line);
        }
        n++;
    }
    fclose(f);
    cr_assert_eq(n, 2, "%d ledger lines", n);
    free(ledger_env);
    free(ledger);
    free(path);
}

Test(cli, agent_usage_errors_name_the_value)
{
    cli_run r = SBX("agent");

    cr_assert_eq(r.status, 125);
    cr_assert(strstr(r.err, "no prompt given"), "%s", r.err);
    free_run(&r);
    r = SBX("agent", "--harness", "aider", "x");
    cr_assert_eq(r.status, 125);
    cr_assert(strstr(r.err, "unknown harness \"aider\""), "%s", r.err);
    free_run(&r);
    r = SBX("agent", "--pass-env", "SBX_NO_SUCH_VARIABLE_SET", "x");
    cr_assert_eq(r.status, 125);
    cr_assert(strstr(r.err, "SBX_NO_SUCH_VARIABLE_SET"), "%s", r.err);
    free_run(&r);
}

Test(cli, find_cheapest_measures_each_backend_and_names_the_cheapest_that_worked)
{
    cli_run r = SBX("find-cheapest", "-b", "local,nosuch", "-n", "3", "--json");
    json_object *doc, *results, *o;

    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    doc = json_tokener_parse(r.out);
    cr_assert_not_null(doc, "not JSON: %s", r.out);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(doc, "cheapest")), "local");
    results = json_object_object_get(doc, "results");
    cr_assert_eq(json_object_array_length(results), 2);
    o = json_object_array_get_idx(results, 0);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(o, "backend")), "local");
    cr_assert(json_object_get_boolean(json_object_object_get(o, "ok")));
    cr_assert_eq(json_object_get_int(json_object_object_get(o, "runs")), 3);
    cr_assert_str_eq(json_object_to_json_string(json_object_object_get(o, "cost_per_run_usd")),
                     "0");
    cr_assert(json_object_get_double(json_object_object_get(o, "cold_p50_s")) <=
              json_object_get_double(json_object_object_get(o, "cold_p90_s")));
    cr_assert(json_object_get_double(json_object_object_get(o, "total_p50_s")) > 0);
    cr_assert(json_object_object_get(o, "error") == NULL);
    o = json_object_array_get_idx(results, 1);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(o, "backend")), "nosuch");
    cr_assert_not(json_object_get_boolean(json_object_object_get(o, "ok")));
    cr_assert_eq(json_object_get_int(json_object_object_get(o, "runs")), 0);
    cr_assert(json_object_object_get(o, "cost_per_run_usd") == NULL);
    cr_assert(strstr(json_object_get_string(json_object_object_get(o, "error")),
                     "backend \"nosuch\" is not installed"));
    json_object_put(doc);
    free_run(&r);

    r = SBX("find-cheapest", "-b", "nosuch", "-n", "1");
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.out, "\n-> No backend worked\n"), "%s", r.out);
    free_run(&r);

    r = SBX("find-cheapest", "-n", "0");
    cr_assert_eq(r.status, 125);
    cr_assert(strstr(r.err, "invalid -n value \"0\""), "%s", r.err);
    free_run(&r);
}

/* The cost per run is billed as usage bills a lifetime: a run far shorter
 * than the backend's 60 s minimum costs the minimum, so the figure is exact
 * whatever the machine's speed (60 s at $3.60 per vCPU-hour = $0.06). */
Test(cli, find_cheapest_bills_the_granularity_and_minimum_of_the_price_table)
{
    char path[PATH_MAX + 32], env_var[PATH_MAX + 64];
    static const char rates[] =
        "{\"backends\":{\"local\":{\"vcpu_usd_per_h\":3.6,\"ram_gib_usd_per_h\":0,"
        "\"billing_granularity_s\":60,\"minimum_s\":60}}}";
    const char *env[2] = { env_var, NULL };
    cli_spec spec = { 0 };
    cli_run r;
    json_object *doc, *o;
    FILE *f;

    snprintf(path, sizeof path, "%s/pricing-minute.json", g_tmpdir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fputs(rates, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
    snprintf(env_var, sizeof env_var, "SBX_PRICING_FILE=%s", path);
    spec.args = (const char *const[]){ "find-cheapest", "-b", "local", "-n", "1", "--json",
                                        NULL };
    spec.env = env;
    r = run_spec(&spec);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    doc = json_tokener_parse(r.out);
    cr_assert_not_null(doc, "not JSON: %s", r.out);
    o = json_object_array_get_idx(json_object_object_get(doc, "results"), 0);
    cr_assert(json_object_get_double(json_object_object_get(o, "total_p50_s")) < 60);
    cr_assert_str_eq(json_object_to_json_string(json_object_object_get(o, "cost_per_run_usd")),
                     "0.06");
    json_object_put(doc);
    free_run(&r);
    unlink(path);
}

/* CASE-48 through sbx agent: the key in sbx's environment reaches the agent
 * only with --pass-env. */
Test(cli, agent_passes_credentials_only_when_asked)
{
    char *path = agents_path();
    const char *env[] = { "ANTHROPIC_API_KEY=sk-ant-TESTSECRET-0000",
                          "AWS_SECRET_ACCESS_KEY=TESTSECRETaws0000", NULL };
    const char *without[] = { "agent", "-e", path, "env", NULL };
    const char *with[] = { "agent", "--pass-env", "ANTHROPIC_API_KEY", "-e", path, "env", NULL };
    cli_spec spec = { 0 };
    cli_run r;

    spec.env = env;
    spec.args = without;
    r = run_spec(&spec);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "keys=[] secrets=0\n");
    free_run(&r);
    spec.args = with;
    r = run_spec(&spec);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "keys=[ANTHROPIC_API_KEY ] secrets=1\n");
    free_run(&r);
    free(path);
}

Test(cli, ledger_sums_records_exactly_per_backend)
{
    char *file, *bad;
    FILE *f;
    cli_run r;

    cr_assert(asprintf(&file, "%s/ledger.jsonl", g_tmpdir) > 0);
    cr_assert(asprintf(&bad, "%s/bad.jsonl", g_tmpdir) > 0);
    f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs("{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"input_tokens\":11087,"
          "\"output_tokens\":145,\"llm_cost_usd\":0.0070147,\"compute_cost_usd\":0.0001}\n"
          "{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"input_tokens\":12001,"
          "\"output_tokens\":52,\"reasoning_tokens\":31,\"cache_read_tokens\":10880,"
          "\"cache_write_tokens\":256,\"llm_cost_usd\":0.0041023,\"compute_cost_usd\":null}\n"
          "{\"kind\":\"sandbox\",\"backend\":\"e2b\",\"compute_cost_usd\":0.36}\n"
          "\n"
          "{\"kind\":\"agent_call\",\"backend\":\"local\",\"input_tokens\":1,"
          "\"llm_cost_usd\":null}\n"
          "{\"kind\":\"sandbox\",\"backend\":\"local\",\"compute_cost_usd\":0}\n"
          "{\"kind\":\"sandbox\",\"backend\":\"runpod\",\"compute_cost_usd\":null}\n", f);
    fclose(f);
    r = SBX("ledger", file);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out,
        "BACKEND     SANDBOXES CALLS   TOKENS     LLM USD        COMPUTE USD    TOTAL USD\n"
        "e2b         1         2       34452      0.011117       0.36           0.371117\n"
        "local       1         1       1          0              0              0 "
        "(unknown: 1 llm, 0 compute)\n"
        "runpod      1         0       0          0              0              0 "
        "(unknown: 0 llm, 1 compute)\n"
        "all         3         3       34453      0.011117       0.36           0.371117 "
        "(unknown: 1 llm, 1 compute)\n");
    free_run(&r);
    r = SBX("ledger", "--json", file);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert(strstr(r.out, "\"total_cost_usd\": 0.371117\n"), "%s", r.out);
    free_run(&r);

    f = fopen(bad, "w");
    cr_assert_not_null(f);
    fputs("{\"kind\":\"sandbox\",\"backend\":\"e2b\",\"compute_cost_usd\":0.36}\nnot json\n", f);
    fclose(f);
    r = SBX("ledger", bad);
    cr_assert_eq(r.status, 125);
    cr_assert(strstr(r.err, "bad.jsonl:2: not a ledger record"), "%s", r.err);
    free_run(&r);
    free(file);
    free(bad);
}

/* A malformed rate in the user's pricing file is said, with its key, value
 * and file; it is not printed as "-", which means unpublished. */
Test(cli, pricing_names_a_malformed_rate)
{
    char path[PATH_MAX + 32], env_var[PATH_MAX + 64];
    const char *env[2] = { env_var, NULL };
    cli_spec spec = { 0 };
    cli_run r;
    FILE *f;

    snprintf(path, sizeof path, "%s/pricing-bad.json", g_tmpdir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fputs("{\"backends\":{\"local\":{\"vcpu_usd_per_s\":\"abc\"}}}", f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
    snprintf(env_var, sizeof env_var, "SBX_PRICING_FILE=%s", path);
    spec.args = (const char *const[]){ "pricing", NULL };
    spec.env = env;
    r = run_spec(&spec);
    cr_assert_eq(r.status, 125, "status %d, stdout: %s", r.status, r.out);
    cr_assert(strstr(r.err, "backend \"local\" has a malformed rate in the pricing table: "
                            "vcpu_usd_per_s \"abc\" is not a decimal number of USD >= 0"),
              "stderr: %s", r.err);
    cr_assert(strstr(r.err, path), "stderr: %s", r.err);
    free_run(&r);
    unlink(path);
}

/* A negative or non-numeric count or amount is named with its line, and
 * sums that pass what an int64_t holds are refused: never a wrapped,
 * negative total. */
static void
ledger_refuses(const char *records, const char *message)
{
    char *bad;
    FILE *f;
    cli_run r;

    cr_assert(asprintf(&bad, "%s/bad.jsonl", g_tmpdir) > 0);
    f = fopen(bad, "w");
    cr_assert_not_null(f);
    fputs(records, f);
    fclose(f);
    r = SBX("ledger", bad);
    cr_assert_eq(r.status, 125, "status %d, stdout: %s", r.status, r.out);
    cr_assert_str_eq(r.out, "");
    cr_assert(strstr(r.err, message), "stderr: %s, expected %s", r.err, message);
    free_run(&r);
    free(bad);
}

Test(cli, ledger_names_bad_values_and_sums_that_do_not_fit)
{
    ledger_refuses("{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"llm_cost_usd\":0.1}\n"
                   "{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"llm_cost_usd\":-0.1}\n",
                   "bad.jsonl:2: llm_cost_usd -0.1 is not an amount of USD >= 0 that fits");
    ledger_refuses("{\"kind\":\"sandbox\",\"backend\":\"e2b\",\"compute_cost_usd\":\"abc\"}\n",
                   "bad.jsonl:1: compute_cost_usd \"abc\" is not an amount of USD >= 0 that "
                   "fits");
    ledger_refuses("{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"input_tokens\":-5,"
                   "\"llm_cost_usd\":0}\n",
                   "bad.jsonl:1: input_tokens -5 is not a count (an integer >= 0)");
    ledger_refuses("{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"output_tokens\":1.5,"
                   "\"llm_cost_usd\":0}\n",
                   "bad.jsonl:1: output_tokens 1.5 is not a count (an integer >= 0)");
    ledger_refuses("{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"llm_cost_usd\":9000000}\n"
                   "{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"llm_cost_usd\":9000000}\n",
                   "bad.jsonl:2: llm_cost_usd 9000000 makes a sum past what an amount holds");
    ledger_refuses("{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"llm_cost_usd\":0,"
                   "\"input_tokens\":9223372036854775807,\"output_tokens\":1}\n",
                   "bad.jsonl:1: output_tokens 1 makes a sum past 9223372036854775807");
    /* Each backend's sum fits, the sum of all does not. */
    ledger_refuses("{\"kind\":\"agent_call\",\"backend\":\"e2b\",\"llm_cost_usd\":5000000}\n"
                   "{\"kind\":\"sandbox\",\"backend\":\"modal\",\"compute_cost_usd\":5000000}"
                   "\n",
                   "the totals pass what an amount holds");
}

/* ------------------------------------------- ports, users, persistence */

Test(cli, port_prints_the_exposed_ports_as_docker_does)
{
    char *id = CREATE("-p", "8081", "--publish", "8080");
    char *want;

    EXPECT_KEEP(0, "8080/tcp -> 127.0.0.1:8080\n8081/tcp -> 127.0.0.1:8081\n", "", "port", id);
    EXPECT_KEEP(0, "127.0.0.1:8080\n", "", "port", id, "8080");
    EXPECT_KEEP(0, "127.0.0.1:8081\n", "", "port", id, "8081/tcp");
    cr_assert(asprintf(&want, "sbx: port 9 of sandbox %s is not exposed [code=not_found; "
                       "backend=local; op=resolve_port; port=9; sandbox_id=%s]\n", id, id) > 0);
    EXPECT_KEEP(125, "", want, "port", id, "9");
    free(want);
    EXPECT_KEEP(125, "", "sbx: invalid port \"http\": expected a TCP port number 1..65535 (or "
                "PORT/tcp)\nsbx: see 'sbx port --help'\n", "port", id, "http");
    EXPECT_KEEP(125, "", "sbx: invalid -p value \"0\": expected a TCP port number 1..65535\n"
                "sbx: see 'sbx create --help'\n", "create", "-p", "0");
    /* A sandbox made without -p has none. */
    free(id);
    id = create_with(NULL, NULL);
    EXPECT_KEEP(0, "", "", "port", id);
    free(id);
}

Test(cli, exec_and_run_user_runs_as_the_user_the_backend_can)
{
    char *id = create_with(NULL, NULL);
    char uid[32], out[40], *want;

    snprintf(uid, sizeof uid, "%u", (unsigned)geteuid());
    snprintf(out, sizeof out, "%s\n", uid);
    EXPECT_KEEP(0, out, "", "exec", "-u", uid, id, "id", "-u");
    EXPECT_KEEP(0, out, "", "run", "--user", uid, "--", "id", "-u");
    const char *other = geteuid() == 0 ? "nobody" : "root";
    cr_assert(asprintf(&want, "sbx: local backend runs every command as uid %s (%s); user "
                       "\"%s\" cannot be chosen [code=feature_not_supported; backend=local; "
                       "op=exec; user=%s]\n", uid, getpwuid(geteuid())->pw_name, other,
                       other) > 0);
    EXPECT_KEEP(125, "", want, "exec", "-u", other, id, "true");
    free(want);
    /* create -u: the sandbox's default user, which local cannot have. */
    EXPECT_KEEP(125, "", "sbx: backend \"local\" cannot run its sandboxes as a chosen user "
                "(user \"app\" asked) [code=feature_not_supported; backend=local; op=create; "
                "user=app; option=user]\n", "create", "-u", "app");
    EXPECT_KEEP(125, "", "sbx: user \"a b\" is not a user name or uid (NULL, empty, too long, "
                "or holding whitespace or control characters) [code=invalid_argument; "
                "op=set_user; user=a b]\n", "create", "--user", "a b");
    free(id);
}

/* The names in the tar file @path, one a line (`tar -t`). */
static char *tar_list(const char *path)
{
    char *cmd, buf[4096];
    size_t n;
    FILE *p;

    cr_assert(asprintf(&cmd, "tar -tf '%s' 2>/dev/null", path) > 0);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    pclose(p);
    free(cmd);
    return strdup(buf);
}

Test(cli, persist_and_hydrate_carry_a_workspace_between_sandboxes)
{
    char ws[PATH_MAX], ws2[PATH_MAX], file[PATH_MAX], bad[PATH_MAX];
    char *id, *id2, *names, *want;

    set_path(ws, sizeof ws, "%s/ws", g_tmpdir);
    set_path(ws2, sizeof ws2, "%s/ws2", g_tmpdir);
    set_path(file, sizeof file, "%s/ws.tar", g_tmpdir);
    set_path(bad, sizeof bad, "%s/bad.tar", g_tmpdir);
    id = CREATE("-w", ws);
    EXPECT_KEEP(0, "", "", "exec", id, "sh", "-c",
                "mkdir -p \"$SANDBOX_ROOT/src\" && printf 'a\\n' > \"$SANDBOX_ROOT/src/a.txt\"");
    EXPECT_KEEP(0, "", "", "persist", id, file);
    expect_mode(file, 0600);
    names = tar_list(file);
    cr_expect_str_eq(names, "workspace/\nworkspace/src/\nworkspace/src/a.txt\n"
                            "workspace/tmp/\n");
    free(names);
    /* Another sandbox (another directory) gets it, and loses what it had. */
    id2 = CREATE("-w", ws2);
    EXPECT_KEEP(0, "", "", "exec", id2, "sh", "-c", "echo old > \"$SANDBOX_ROOT/old.txt\"");
    EXPECT_KEEP(0, "", "", "hydrate", id2, file);
    EXPECT_KEEP(0, "a\nabsent\n", "", "exec", id2, "sh", "-c",
                "cat \"$SANDBOX_ROOT/src/a.txt\"; test -e \"$SANDBOX_ROOT/old.txt\" || "
                "echo absent");
    /* -C: a directory of the sandbox. */
    EXPECT_KEEP(0, "", "", "hydrate", "-C", "/restored", id2, file);
    EXPECT_KEEP(0, "a\n", "", "exec", id2, "sh", "-c", "cat \"$SANDBOX_ROOT/restored/src/a.txt\"");
    /* A stream that is not one changes nothing. */
    write_text(bad, "not a tar stream\n", 0644);
    cr_assert(asprintf(&want, "sbx: not a tar stream") > 0);
    {
        cli_run r = run_keep((const char *const[]){ "hydrate", id2, bad, NULL }, NULL);

        EXPECT_TOOL_FAILURE(&r, want, "code=workspace");
        free_run(&r);
    }
    free(want);
    EXPECT_KEEP(0, "a\n", "", "exec", id2, "sh", "-c", "cat \"$SANDBOX_ROOT/src/a.txt\"");
    /* - is standard output. */
    {
        cli_run r = run_keep((const char *const[]){ "persist", id, "-", NULL }, NULL);

        cr_expect_eq(r.status, 0, "%s", r.err);
        cr_expect(r.out_len >= 1024 && r.out_len % 512 == 0, "%zu bytes", r.out_len);
        free_run(&r);
    }
    EXPECT_KEEP(125, "", "sbx: -C src: expected an absolute sandbox path\n"
                "sbx: see 'sbx persist --help'\n", "persist", "-C", "src", id, file);
    free(id);
    free(id2);
}
