/*
 * test_tty.c — `sbx run -it -- sh` and `sbx exec -it ID sh` driven through a
 * real pseudo-terminal, as a user at a terminal drives them:
 *
 * - sbx runs with a terminal of 33x77 as its stdin/stdout/stderr and
 *   controlling terminal; the shell's prompt appears;
 * - typed `echo hi` comes back as its output;
 * - `stty size` in the sandbox shows 33 77; after the harness resizes its
 *   terminal (TIOCSWINSZ on the master: SIGWINCH to sbx) it shows 40 100;
 * - a typed Ctrl-C interrupts `sleep 30` and the prompt comes back;
 * - `exit 7` ends sbx with exit status 7;
 * - the terminal's attributes after sbx ended equal those before (sbx
 *   restored the mode it put in raw).
 *
 * On local and bubblewrap; with SBX_TEST_BACKEND set (the docker phase of
 * scripts/test), on that backend instead. Runs from the build directory
 * with the variables of `make check` (SBX_CLI).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "testutil.h"

#define PROMPT "sbx-tty-prompt> "

static char *g_tmp;
static char *g_id;              /* a sandbox of exec_it_sh not removed yet */

static char *sbx_capture(const char *const *args, int *status);

static void setup(void)
{
    char *state;

    g_tmp = tu_fresh_tmpdir();
    state = tu_strdup_printf("%s/state", g_tmp);
    /* TMPDIR is g_tmp (searchable by bubblewrap's user); the records go
     * below it (sbx keeps its state directory private). */
    setenv("SBX_STATE_DIR", state, 1);
    free(state);
}

static void teardown(void)
{
    if (g_id) {
        /* A failed exec_it_sh: its sandbox goes all the same. */
        const char *rm[] = { "rm", g_id, NULL };
        int status;

        free(sbx_capture(rm, &status));
        free(g_id);
        g_id = NULL;
    }
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(tty, .init = setup, .fini = teardown, .timeout = 180);

/* One sbx under a terminal. */
typedef struct term_run {
    int master, slave;          /* the slave stays open: its mode is read at the end */
    pid_t pid;
    char out[1 << 16];          /* what sbx wrote to the terminal */
    size_t len;
    size_t mark;                /* the part looked at by expect() starts here */
} term_run;

/* The backends to run on: SBX_TEST_BACKEND's, else local and bubblewrap. */
static const char *const *backends(void)
{
    static const char *one[2];
    static const char *const both[] = { "local", "bubblewrap", NULL };
    const char *b = getenv("SBX_TEST_BACKEND");

    if (b && *b && strcmp(b, "local") != 0) {
        one[0] = b;
        return one;
    }
    return both;
}

static const char *cli(void)
{
    const char *c = getenv("SBX_CLI");

    cr_assert(c && *c, "SBX_CLI is not set (run under make check)");
    return c;
}

/* Starts `sbx ARGS` on a new terminal of 33x77. */
static void term_start(term_run *t, const char *const *args)
{
    struct winsize ws = { .ws_row = 33, .ws_col = 77 };
    char *argv[24];
    size_t n = 0;

    memset(t, 0, sizeof(*t));
    cr_assert_eq(openpty(&t->master, &t->slave, NULL, NULL, &ws), 0, "openpty: %s",
                 strerror(errno));
    argv[n++] = (char *)cli();
    for (; args[n - 1] && n < 23; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    t->pid = fork();
    cr_assert_geq(t->pid, 0);
    if (t->pid == 0) {
        setsid();
        if (ioctl(t->slave, TIOCSCTTY, 0) < 0)
            _exit(126);
        dup2(t->slave, 0);
        dup2(t->slave, 1);
        dup2(t->slave, 2);
        close(t->master);
        if (t->slave > 2)
            close(t->slave);
        execv(argv[0], argv);
        _exit(127);
    }
    fcntl(t->master, F_SETFL, O_NONBLOCK);
}

/* Reads what is there within @ms. */
static void term_read(term_run *t, int ms)
{
    struct pollfd pf = { .fd = t->master, .events = POLLIN };

    if (poll(&pf, 1, ms) <= 0)
        return;
    for (;;) {
        ssize_t n = read(t->master, t->out + t->len, sizeof(t->out) - 1 - t->len);

        if (n <= 0)
            break;
        t->len += (size_t)n;
        t->out[t->len] = '\0';
    }
}

/* Waits (up to @secs) until the output after the mark holds @want; moves
 * the mark past it. */
static void expect(term_run *t, const char *want, double secs)
{
    double end = tu_now() + secs;
    char *at;

    while (!(at = strstr(t->out + t->mark, want))) {
        cr_assert(tu_now() < end, "no \"%s\" within %.0f s; the terminal shows: \"%s\"", want,
                  secs, t->out + t->mark);
        cr_assert_lt(t->len, sizeof(t->out) - 1, "output overflow");
        term_read(t, 100);
    }
    t->mark = (size_t)(at - t->out) + strlen(want);
}

static void type(term_run *t, const char *s)
{
    size_t n = strlen(s);

    cr_assert_eq(write(t->master, s, n), (ssize_t)n);
}

/* Waits for sbx to exit (within 30 s); returns its exit status. */
static int term_wait(term_run *t)
{
    double end = tu_now() + 30;
    int status;
    pid_t r;

    while ((r = waitpid(t->pid, &status, WNOHANG)) == 0) {
        if (tu_now() > end) {
            kill(t->pid, SIGKILL);
            waitpid(t->pid, &status, 0);
            cr_assert_fail("sbx did not exit within 30 s; the terminal shows: \"%s\"",
                           t->out + t->mark);
        }
        term_read(t, 50);
    }
    cr_assert_eq(r, t->pid);
    cr_assert(WIFEXITED(status), "sbx ended by signal %d", WTERMSIG(status));
    return WEXITSTATUS(status);
}

static void term_close(term_run *t)
{
    close(t->master);
    close(t->slave);
}

/* The session every test runs: prompt, echo, size, resize, ^C, exit 7. */
static void drive_shell(term_run *t, const char *backend)
{
    struct winsize ws = { .ws_row = 40, .ws_col = 100 };
    struct termios before, after;
    double end;
    int found = 0;

    cr_assert_eq(tcgetattr(t->slave, &before), 0);
    expect(t, PROMPT, 60);
    /* sbx put the terminal in raw mode while the shell runs. */
    cr_assert_eq(tcgetattr(t->slave, &after), 0);
    cr_assert_eq(after.c_lflag & (ICANON | ECHO | ISIG), 0,
                 "%s: the terminal is not raw while the command runs", backend);

    type(t, "echo hi\r");
    expect(t, "echo hi\r\nhi\r\n", 15);
    expect(t, PROMPT, 15);

    type(t, "stty size\r");
    expect(t, "stty size\r\n33 77\r\n", 15);
    expect(t, PROMPT, 15);

    /* A resize of the harness's terminal: SIGWINCH to sbx, which resizes the
     * command's. It arrives asynchronously: ask until it shows. */
    cr_assert_eq(ioctl(t->master, TIOCSWINSZ, &ws), 0);
    end = tu_now() + 15;
    while (!found) {
        cr_assert(tu_now() < end, "%s: stty size never showed 40 100: \"%s\"", backend,
                  t->out + t->mark);
        type(t, "stty size\r");
        expect(t, "stty size\r\n", 15);
        expect(t, PROMPT, 15);
        found = strstr(t->out + t->mark - strlen(PROMPT) - 10, "40 100\r\n") != NULL;
    }

    /* Ctrl-C reaches the command as a byte: the terminal in the sandbox
     * makes it SIGINT for sleep, and the shell prompts again. */
    type(t, "sleep 30; echo not-interrupted\r");
    expect(t, "sleep 30; echo not-interrupted\r\n", 15);
    usleep(300 * 1000);
    end = tu_now();
    type(t, "\003");
    expect(t, PROMPT, 10);
    cr_assert_lt(tu_now() - end, 10);
    cr_assert_null(strstr(t->out + t->mark - strlen(PROMPT), "not-interrupted\r\n"));
    type(t, "echo after\r");
    expect(t, "echo after\r\nafter\r\n", 15);

    type(t, "exit 7\r");
    cr_assert_eq(term_wait(t), 7, "%s: sbx's exit status; the terminal shows: \"%s\"", backend,
                 t->out + t->mark);
    cr_assert_eq(tcgetattr(t->slave, &after), 0);
    cr_assert_eq(after.c_iflag, before.c_iflag, "%s: c_iflag not restored", backend);
    cr_assert_eq(after.c_oflag, before.c_oflag, "%s: c_oflag not restored", backend);
    cr_assert_eq(after.c_cflag, before.c_cflag, "%s: c_cflag not restored", backend);
    cr_assert_eq(after.c_lflag, before.c_lflag, "%s: c_lflag not restored", backend);
    cr_assert_eq(memcmp(after.c_cc, before.c_cc, sizeof(before.c_cc)), 0,
                 "%s: c_cc not restored", backend);
}

Test(tty, run_it_sh)
{
    for (const char *const *b = backends(); *b; b++) {
        const char *args[] = { "run", "-it", "-b", *b, "-e", "PS1=" PROMPT, "--", "sh", NULL };
        term_run t;

        term_start(&t, args);
        drive_shell(&t, *b);
        term_close(&t);
    }
}

/* Runs `sbx ARGS` without a terminal; returns its stdout (new). The output
 * goes through a file: a sandbox that sbx started may hold a pipe open. */
static char *sbx_capture(const char *const *args, int *status)
{
    char *argv[16], *out = calloc(1, 4096);
    char *path = tu_strdup_printf("%s/capture", g_tmp);
    size_t n = 0;
    ssize_t len;
    int fd, st;
    pid_t pid;

    argv[n++] = (char *)cli();
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);

        dup2(null, 0);
        dup2(fd, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    len = pread(fd, out, 4095, 0);
    out[len > 0 ? len : 0] = '\0';
    close(fd);
    unlink(path);
    free(path);
    return out;
}

Test(tty, exec_it_sh)
{
    for (const char *const *b = backends(); *b; b++) {
        const char *create[] = { "create", "-b", *b, "--timeout", "170", NULL };
        int status;
        char *id = sbx_capture(create, &status), *nl;

        cr_assert_eq(status, 0, "sbx create -b %s: exit status %d", *b, status);
        if ((nl = strchr(id, '\n')))
            *nl = '\0';
        g_id = id;
        {
            const char *args[] = { "exec", "-it", "-e", "PS1=" PROMPT, id, "sh", NULL };
            const char *rm[] = { "rm", id, NULL };
            term_run t;
            char *out;

            term_start(&t, args);
            drive_shell(&t, *b);
            term_close(&t);
            out = sbx_capture(rm, &status);
            cr_expect_eq(status, 0, "sbx rm %s: exit status %d", id, status);
            free(out);
        }
        g_id = NULL;
        free(id);
    }
}
