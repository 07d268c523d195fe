/*
 * Tests of the `sbx` command-line tool: the built binary (path in SBX_CLI,
 * set by `make check` together with SBX_PLUGIN_PATH and SBX_SUPERVISOR)
 * runs as a child process with stdout and stderr on separate pipes, and the
 * tests compare what it printed exactly.
 *
 * Every run gets a fresh TMPDIR, under which the local backend makes its
 * sandboxes (${TMPDIR:-/tmp}/sbx-local-XXXXXX); after each run that
 * directory must hold no sbx-local-* entry, so a sandbox the tool did not
 * destroy is caught.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

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

static void remove_tmpdir(void)
{
    if (g_tmpdir[0] != '\0')
        nftw(g_tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
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
} cli_run;

typedef struct cli_spec {
    const char *const *args;  /* arguments after "sbx", NULL-terminated */
    const char *stdin_data;   /* NULL: stdin is /dev/null */
    const char *const *env;   /* extra "KEY=VALUE" for sbx, NULL-terminated */
    const char *stop_marker;  /* when stdout contains it, send stop_signal */
    int stop_signal;
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

/* The environment of sbx: ours, without TMPDIR and SBX_BACKEND, plus
 * TMPDIR=<the test's directory> and @extra. */
static char **child_env(const char *const *extra)
{
    size_t n = 0, i, j = 0, n_extra = 0;
    char **env;
    static char tmpdir_var[PATH_MAX + 8];

    while (environ[n] != NULL)
        n++;
    while (extra != NULL && extra[n_extra] != NULL)
        n_extra++;
    env = calloc(n + n_extra + 2, sizeof *env);
    cr_assert_not_null(env);
    for (i = 0; i < n; i++) {
        if (strncmp(environ[i], "TMPDIR=", 7) == 0 ||
            strncmp(environ[i], "SBX_BACKEND=", 12) == 0)
            continue;
        env[j++] = environ[i];
    }
    snprintf(tmpdir_var, sizeof tmpdir_var, "TMPDIR=%s", g_tmpdir);
    env[j++] = tmpdir_var;
    for (i = 0; i < n_extra; i++)
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
    argv = calloc(argc + 2, sizeof *argv);
    cr_assert_not_null(argv);
    argv[0] = (char *)cli;
    for (i = 0; i < argc; i++)
        argv[i + 1] = (char *)spec->args[i];
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
    rc = posix_spawn(&pid, cli, &fa, &attr, argv, env);
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
        if (spec->stop_marker != NULL && !stop_sent &&
            strstr(r.out, spec->stop_marker) != NULL) {
            kill(pid, spec->stop_signal);
            stop_sent = 1;
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

    sandboxes_left(left, sizeof left);
    cr_expect_str_empty(left, "sbx %s left sandbox directories in %s: %s",
                        spec->args[0] ? spec->args[0] : "", g_tmpdir, left);
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
    cli_run r = SBX("run", "-t", "1", "--", "sleep", "30");

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

Test(cli, run_env_without_equals_is_125)
{
    cli_run r = SBX("run", "-e", "BADVALUE", "--", "true");

    EXPECT_TOOL_FAILURE(&r, "\"BADVALUE\"", "KEY=VALUE");
    free_run(&r);
}

Test(cli, run_env_bad_key_is_125)
{
    cli_run r = SBX("run", "-e", "1BAD=x", "--", "true");

    EXPECT_TOOL_FAILURE(&r, "1BAD", "invalid_argument");
    free_run(&r);
}

Test(cli, run_missing_workdir_is_125)
{
    cli_run r = SBX("run", "-w", "/definitely/not/here", "--", "true");

    EXPECT_TOOL_FAILURE(&r, "/definitely/not/here");
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
    r = SBX("run", "-t", "-1", "--", "true");
    EXPECT_TOOL_FAILURE(&r, "invalid -t value \"-1\"");
    free_run(&r);
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
        "name", "path", "version", "description", "abi", "usable", "problem",
        "caps", "probed_caps"
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
    cr_expect(json_object_object_get_ex(local, "caps", &v) &&
              json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0);
    cr_expect(json_object_object_get_ex(local, "probed_caps", &v) &&
              json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0);

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
