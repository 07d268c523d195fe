/*
 * tests/test_async.c — the asynchronous API (sbx_async, sbx_op, the _async
 * forms) on the backend named by $SBX_TEST_BACKEND (default local):
 *
 *  - 100 sandboxes at once from one thread: create -> execute -> write_file
 *    -> read_file -> destroy, each step submitted from the previous one's
 *    callback; the main thread only polls sbx_async_get_fd() and
 *    dispatches; every output checked exactly; nothing left behind;
 *  - cancellation of an operation that has not started (it never runs) and
 *    of a running exec (its process tree is killed, TERM then KILL);
 *  - the per-client bound (observed concurrency is exactly the bound; other
 *    clients go ahead of the waiting operations);
 *  - callbacks on the dispatching thread, the descriptor's readiness,
 *    sbx_async_free() with pending and undispatched operations (no callback,
 *    no thread, descriptor or sandbox left);
 *  - every other _async form once, and bad arguments.
 *
 * Every test runs in its own process with TMPDIR set to a fresh directory,
 * which must be empty again at the end on local.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "testutil.h"

static char *g_tmp;           /* this test's TMPDIR (sandboxes live here on local) */
static sbx_client *g_client;  /* client of the backend under test */
static pthread_t g_main;      /* the thread that dispatches */

static void setup(void)
{
    g_tmp = tu_fresh_tmpdir();
    g_main = pthread_self();
    sbx_error *err = NULL;
    g_client = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(g_client, "sbx_client_new(%s): %s", tu_backend(),
                       err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    sbx_client_free(g_client);
    g_client = NULL;
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(async, .init = setup, .fini = teardown, .timeout = 240);

/* ------------------------------------------------------------- helpers */

static const char *msg(const sbx_error *err)
{
    return err ? sbx_error_get0_message(err) : "(no error)";
}

/* Asserts that the op succeeded and runs on the dispatching thread. */
static void op_ok(sbx_op *op, const char *what)
{
    cr_assert(pthread_equal(pthread_self(), g_main), "%s: callback on another thread", what);
    cr_assert_null(sbx_op_get_error(op), "%s failed: %s", what, msg(sbx_op_get_error(op)));
}

/* Asserts that nothing of the test's sandboxes is left on the host: no
 * process mentions the TMPDIR (the supervisors) and it is empty. */
static void assert_nothing_left(void)
{
    if (!tu_backend_is_local() && strcmp(tu_backend(), "bubblewrap") != 0)
        return;
    pid_t pids[16];
    size_t n = tu_wait_procs_gone(g_tmp, pids, 16, 5.0);
    cr_assert_eq(n, 0, "a process of a sandbox survived: %s",
                 n ? tu_proc_describe(pids[0]) : "");
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%d entries left in %s",
                 tu_count_entries(g_tmp), g_tmp);
}

/* 1 when the pool's descriptor is readable now. */
static int fd_readable(sbx_async *a)
{
    struct pollfd p = { .fd = sbx_async_get_fd(a), .events = POLLIN };
    int r = poll(&p, 1, 0);
    cr_assert(r >= 0, "poll: %s", strerror(errno));
    return r > 0;
}

/* The event loop: polls the descriptor and dispatches until *@flag is
 * non-zero (or, with @flag NULL, until nothing is pending); fails after
 * @secs. */
static void run_loop(sbx_async *a, const volatile int *flag, double secs)
{
    double end = tu_now() + secs;
    while (flag ? !*flag : sbx_async_pending(a) > 0) {
        double left = end - tu_now();
        cr_assert(left > 0, "operations still pending after %.0f s (%zu pending)", secs,
                  sbx_async_pending(a));
        struct pollfd p = { .fd = sbx_async_get_fd(a), .events = POLLIN };
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        cr_assert(r >= 0 || errno == EINTR, "poll: %s", strerror(errno));
        if (r > 0)
            cr_assert(sbx_async_dispatch(a) > 0, "the descriptor was readable, nothing ran");
    }
}

/* Number of entries of /proc/self/@what ("fd", "task"). */
static int count_self(const char *what)
{
    char *path = tu_strdup_printf("/proc/self/%s", what);
    int n = tu_count_entries(path);
    free(path);
    cr_assert(n > 0);
    return n;
}

static sbx_async *new_pool(unsigned workers)
{
    sbx_error *err = NULL;
    sbx_async *a = sbx_async_new(workers, &err);
    cr_assert_not_null(a, "sbx_async_new(%u): %s", workers, msg(err));
    return a;
}

/* Runs @script synchronously; asserts exit 0 and the exact stdout. */
static void sh_ok(sbx_sandbox *sb, const char *script, const char *want_stdout)
{
    sbx_result *r = tu_sh(sb, script, 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, want_stdout);
    sbx_result_free(r);
}

/* Overwrites then frees a buffer the library was given: a library that
 * kept the pointer instead of a copy would read garbage. */
static void scrub_free(void *p, size_t len)
{
    memset(p, 'X', len);
    free(p);
}

/* ------------------------------------------- (a) 100 sandboxes at once */

#define FANOUT 100

typedef struct chain {
    sbx_async *async;
    int idx;
    sbx_sandbox *sb;
    char path[64];
    char *content;
    size_t content_len;
    int stage;                /* 1 created, 2 executed, 3 written, 4 read, 5 destroyed */
    int *finished;
} chain;

static void chain_destroyed(sbx_op *op, void *ud);
static void chain_read(sbx_op *op, void *ud);
static void chain_written(sbx_op *op, void *ud);
static void chain_executed(sbx_op *op, void *ud);

static void chain_created(sbx_op *op, void *ud)
{
    chain *c = ud;
    op_ok(op, "create");
    cr_assert_eq(sbx_op_get_kind(op), SBX_OP_CREATE);
    cr_assert_eq(c->stage, 0);
    c->sb = sbx_op_steal_sandbox(op);
    cr_assert_not_null(c->sb);
    cr_assert_null(sbx_op_steal_sandbox(op), "a sandbox stolen twice");
    c->stage = 1;

    /* Request buffers on the heap, scrubbed and freed right after the
     * submission: the op must hold copies. */
    char *idx = tu_strdup_printf("IDX=%d", c->idx);
    char *script = strdup("printf 'out-%s-%s-' \"$IDX\" \"$OPT_IDX\"; cat; "
                          "printf 'err-%s' \"$IDX\" >&2; exit $((IDX % 7))");
    char *in = tu_strdup_printf("stdin-%d", c->idx);
    const char **argv = calloc(4, sizeof(*argv));
    const char **env = calloc(2, sizeof(*env));
    cr_assert(script && argv && env);
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[2] = script;
    env[0] = idx;
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = argv;
    rq.env = env;
    rq.stdin_data = in;
    rq.stdin_len = strlen(in);
    sbx_error *err = NULL;
    cr_assert_not_null(sbx_sandbox_execute_async(c->async, c->sb, &rq, chain_executed, c, &err),
                       "execute_async: %s", msg(err));
    scrub_free(in, strlen(in));
    scrub_free(script, strlen(script));
    scrub_free(idx, strlen(idx));
    free(argv);
    free(env);
}

static void chain_executed(sbx_op *op, void *ud)
{
    chain *c = ud;
    op_ok(op, "execute");
    cr_assert_eq(c->stage, 1);
    cr_assert_eq(sbx_op_get_kind(op), SBX_OP_EXECUTE_COMMAND);
    cr_assert_eq(sbx_op_get0_sandbox(op), c->sb);
    const sbx_result *r = sbx_op_get0_result(op);
    cr_assert_not_null(r);
    char *want_out = tu_strdup_printf("out-%d-%d-stdin-%d", c->idx, c->idx, c->idx);
    char *want_err = tu_strdup_printf("err-%d", c->idx);
    tu_assert_stdout(r, want_out);
    tu_assert_stderr(r, want_err);
    cr_assert_eq(sbx_result_get_exit_code(r), c->idx % 7, "sandbox %d: exit %d", c->idx,
                 sbx_result_get_exit_code(r));
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    free(want_out);
    free(want_err);
    c->stage = 2;

    /* idx lines and a NUL byte: binary-safe and different per sandbox. */
    size_t cap = 64 + (size_t)c->idx * 32;
    c->content = malloc(cap);
    cr_assert_not_null(c->content);
    size_t len = 0;
    for (int i = 0; i <= c->idx; i++)
        len += (size_t)snprintf(c->content + len, cap - len, "line %d of %d\n", i, c->idx);
    c->content[len++] = '\0';
    c->content[len++] = (char)(c->idx & 0xff);
    c->content_len = len;
    snprintf(c->path, sizeof(c->path), "data/dir-%d/file.bin", c->idx);
    char *copy = malloc(len);
    cr_assert_not_null(copy);
    memcpy(copy, c->content, len);
    char *path = strdup(c->path);
    sbx_error *err = NULL;
    cr_assert_not_null(sbx_sandbox_write_file_async(c->async, c->sb, path, copy, len,
                                                    chain_written, c, &err),
                       "write_file_async: %s", msg(err));
    scrub_free(copy, len);
    scrub_free(path, strlen(path));
}

static void chain_written(sbx_op *op, void *ud)
{
    chain *c = ud;
    op_ok(op, "write_file");
    cr_assert_eq(c->stage, 2);
    cr_assert_eq(sbx_op_get_int64(op), 0);
    c->stage = 3;
    sbx_error *err = NULL;
    cr_assert_not_null(sbx_sandbox_read_file_async(c->async, c->sb, c->path, chain_read, c,
                                                   &err),
                       "read_file_async: %s", msg(err));
}

static void chain_read(sbx_op *op, void *ud)
{
    chain *c = ud;
    op_ok(op, "read_file");
    cr_assert_eq(c->stage, 3);
    size_t len = 0;
    char *data = sbx_op_steal_data(op, &len);
    cr_assert_not_null(data);
    tu_assert_bytes("file content", data, len, c->content, c->content_len);
    free(data);
    cr_assert_null(sbx_op_steal_data(op, &len));
    cr_assert_eq(len, 0);
    c->stage = 4;
    sbx_error *err = NULL;
    cr_assert_not_null(sbx_sandbox_destroy_async(c->async, c->sb, chain_destroyed, c, &err),
                       "destroy_async: %s", msg(err));
}

static void chain_destroyed(sbx_op *op, void *ud)
{
    chain *c = ud;
    op_ok(op, "destroy");
    cr_assert_eq(c->stage, 4);
    cr_assert_eq(sbx_op_get_kind(op), SBX_OP_DESTROY);
    sbx_sandbox_free(c->sb);
    c->sb = NULL;
    free(c->content);
    c->content = NULL;
    c->stage = 5;
    (*c->finished)++;
}

Test(async, hundred_sandboxes_from_one_thread)
{
    sbx_async *a = new_pool(0);
    chain *chains = calloc(FANOUT, sizeof(*chains));
    cr_assert_not_null(chains);
    volatile int finished = 0;

    for (int i = 0; i < FANOUT; i++) {
        chains[i].async = a;
        chains[i].idx = i;
        chains[i].finished = (int *)&finished;
        sbx_options *o = sbx_options_new();
        char *v = tu_strdup_printf("%d", i);
        cr_assert_eq(sbx_options_set_env(o, "OPT_IDX", v, NULL), 0);
        sbx_error *err = NULL;
        cr_assert_not_null(sbx_create_async(a, tu_backend(), o, chain_created, &chains[i], &err),
                           "create_async %d: %s", i, msg(err));
        sbx_options_free(o);    /* copied at submission */
        scrub_free(v, strlen(v));
    }
    cr_assert_eq(sbx_async_pending(a), FANOUT);

    /* The main thread only polls and dispatches. */
    double end = tu_now() + 200;
    while (finished < FANOUT) {
        cr_assert(tu_now() < end, "%d of %d chains finished", finished, FANOUT);
        struct pollfd p = { .fd = sbx_async_get_fd(a), .events = POLLIN };
        int r = poll(&p, 1, 1000);
        cr_assert(r >= 0 || errno == EINTR);
        if (r > 0)
            sbx_async_dispatch(a);
    }
    for (int i = 0; i < FANOUT; i++)
        cr_assert_eq(chains[i].stage, 5, "chain %d stopped at stage %d", i, chains[i].stage);
    cr_assert_eq(sbx_async_pending(a), 0);
    cr_assert_eq(fd_readable(a), 0, "descriptor readable with nothing to dispatch");
    cr_assert_eq(sbx_async_dispatch(a), 0);
    sbx_async_free(a);
    free(chains);
    assert_nothing_left();
}

/* ------------------------------------------------- (b) pending cancel */

typedef struct rec {
    int ran;
    sbx_error_code code;
    int has_error;
    sbx_error_outcome outcome;
    char message[512];
    char out[256];
    int exit_code;
    int cancel_rc;            /* sbx_op_cancel(op) from inside the callback */
    int order;
    int *counter;
    double at;
} rec;

static void record(sbx_op *op, void *ud)
{
    rec *r = ud;
    cr_assert(pthread_equal(pthread_self(), g_main), "callback on another thread");
    cr_assert_eq(r->ran, 0, "callback ran twice");
    r->ran = 1;
    r->at = tu_now();
    if (r->counter)
        r->order = ++*r->counter;
    r->cancel_rc = sbx_op_cancel(op);
    const sbx_error *e = sbx_op_get_error(op);
    r->has_error = e != NULL;
    if (e) {
        r->code = sbx_error_get_code(e);
        r->outcome = sbx_error_get_outcome(e);
        snprintf(r->message, sizeof(r->message), "%s", sbx_error_get0_message(e));
        cr_assert_null(sbx_op_get0_result(op));
        cr_assert_eq(sbx_op_get_int64(op), -1);
    }
    const sbx_result *res = sbx_op_get0_result(op);
    if (res) {
        snprintf(r->out, sizeof(r->out), "%s", sbx_result_get0_stdout(res, NULL));
        r->exit_code = sbx_result_get_exit_code(res);
    }
}

Test(async, cancel_pending_never_runs)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sbx_async *a = new_pool(1);
    int counter = 0;
    rec r1 = { .counter = &counter }, r2 = { .counter = &counter }, r3 = { .counter = &counter };
    sbx_error *err = NULL;

    sbx_op *op1 = sbx_sandbox_execute_shell_async(a, sb, "sleep 2; echo first", record, &r1,
                                                  &err);
    cr_assert_not_null(op1, "%s", msg(err));
    sbx_op *op2 = sbx_sandbox_execute_shell_async(
        a, sb, ": > \"$SANDBOX_ROOT/tmp/ran2\"; echo second", record, &r2, &err);
    cr_assert_not_null(op2, "%s", msg(err));
    /* The only worker has op1 for two seconds: op2 has not started. */
    cr_assert_eq(sbx_op_cancel(op2), 1);
    cr_assert_eq(sbx_op_cancel(op2), 1, "a second cancel still reports cancelled");
    cr_assert_eq(sbx_async_pending(a), 2);

    run_loop(a, &r2.ran, 10);
    cr_assert_eq(r2.order, 1, "the cancelled op completes at once, before the running one");
    cr_assert_eq(r1.ran, 0);
    cr_assert_eq(r2.has_error, 1);
    cr_assert_eq(r2.code, SBX_ERROR_CANCELLED, "code %s: %s", sbx_error_code_name(r2.code),
                 r2.message);
    cr_assert_eq(r2.outcome, SBX_ERROR_OUTCOME_FAILED, "never started: outcome failed");
    cr_assert(strstr(r2.message, "before it started"), "message: %s", r2.message);
    cr_assert_eq(r2.cancel_rc, 1);

    run_loop(a, &r1.ran, 10);
    cr_assert_eq(r1.has_error, 0, "%s", r1.message);
    cr_assert_str_eq(r1.out, "first\n");
    cr_assert_eq(r1.cancel_rc, 0, "cancelling a completed op is too late");

    /* One worker, FIFO: anything still queued would run before op3. */
    sbx_op *op3 = sbx_sandbox_execute_shell_async(
        a, sb, "test -e \"$SANDBOX_ROOT/tmp/ran2\" && echo ran || echo absent", record, &r3,
        &err);
    cr_assert_not_null(op3, "%s", msg(err));
    run_loop(a, NULL, 10);
    cr_assert_eq(r3.has_error, 0, "%s", r3.message);
    cr_assert_str_eq(r3.out, "absent\n", "the cancelled command ran");
    cr_assert_eq(counter, 3);

    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}

/* ------------------------------------------------- (c) running cancel */

/* Waits until the sandbox file @path exists (sync calls from this thread
 * while the async op runs: a sandbox accepts concurrent calls). */
static void wait_marker(sbx_sandbox *sb, const char *path, double secs)
{
    char *script = tu_strdup_printf("test -e \"%s\" && echo yes || echo no", path);
    double end = tu_now() + secs;
    for (;;) {
        sbx_result *r = tu_sh(sb, script, 10);
        int yes = strcmp(sbx_result_get0_stdout(r, NULL), "yes\n") == 0;
        sbx_result_free(r);
        if (yes)
            break;
        cr_assert(tu_now() < end, "marker %s not written after %.0f s", path, secs);
        usleep(20000);
    }
    free(script);
}

/* Asserts that every pid listed in sandbox file @path is gone. */
static void assert_pids_gone(sbx_sandbox *sb, const char *path)
{
    char *script = tu_strdup_printf(
        "for p in $(cat \"%s\"); do kill -0 $p 2>/dev/null && echo alive $p; done; echo end",
        path);
    double end = tu_now() + 5;
    for (;;) {
        sbx_result *r = tu_sh(sb, script, 10);
        int gone = strcmp(sbx_result_get0_stdout(r, NULL), "end\n") == 0;
        if (gone || tu_now() >= end) {
            tu_assert_stdout(r, "end\n");
            sbx_result_free(r);
            break;
        }
        sbx_result_free(r);
        usleep(50000);
    }
    free(script);
    if (tu_backend_is_local()) {
        pid_t pids[4];
        size_t n = tu_read_pids(sb, path, pids, 4);
        for (size_t i = 0; i < n; i++)
            cr_assert(tu_wait_pid_gone(tu_host_pid(sb, pids[i]), 5), "pid survived the cancel: %s",
                      tu_proc_describe(pids[i]));
    }
}

Test(async, cancel_running_exec_kills_tree)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sbx_async *a = new_pool(2);
    rec r = { 0 };
    sbx_error *err = NULL;

    sbx_op *op = sbx_sandbox_execute_shell_async(
        a, sb,
        "P=\"$SANDBOX_ROOT/tmp/pids\"; echo $$ > \"$P\"; "
        "sleep 30 & echo $! >> \"$P\"; echo started; "
        /* The marker a second after the start: by then the start has
         * returned to the library (out of process its answer crosses the
         * plugin host), so the cancel finds the command running. */
        "sleep 1; : > \"$SANDBOX_ROOT/tmp/started\"; wait",
        record, &r, &err);
    cr_assert_not_null(op, "%s", msg(err));
    wait_marker(sb, "$SANDBOX_ROOT/tmp/started", 20);
    cr_assert_eq(r.ran, 0);
    double t0 = tu_now();
    cr_assert_eq(sbx_op_cancel(op), 1);
    run_loop(a, &r.ran, 15);
    double dt = r.at - t0;
    cr_assert(dt < 5.0, "the cancelled exec took %.2f s to end", dt);
    cr_assert_eq(r.has_error, 1);
    cr_assert_eq(r.code, SBX_ERROR_CANCELLED, "code %s: %s", sbx_error_code_name(r.code),
                 r.message);
    cr_assert_eq(r.outcome, SBX_ERROR_OUTCOME_UNKNOWN, "it had started: outcome unknown");
    cr_assert(strstr(r.message, "while it ran"), "message: %s", r.message);
    cr_assert_eq(r.cancel_rc, 1);
    assert_pids_gone(sb, "$SANDBOX_ROOT/tmp/pids");

    /* The sandbox lives on, and the worker's cancel descriptor was reset:
     * the next op on the same pool runs normally. */
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 1);
    rec r2 = { 0 };
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, "echo after", record, &r2, &err));
    rec r3 = { 0 };
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, "echo again", record, &r3, &err));
    run_loop(a, NULL, 15);
    cr_assert_eq(r2.has_error, 0, "%s", r2.message);
    cr_assert_str_eq(r2.out, "after\n");
    cr_assert_eq(r3.has_error, 0, "%s", r3.message);
    cr_assert_str_eq(r3.out, "again\n");

    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}

Test(async, cancel_escalates_to_kill)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sbx_async *a = new_pool(1);
    rec r = { 0 };
    sbx_error *err = NULL;

    sbx_op *op = sbx_sandbox_execute_shell_async(
        a, sb,
        "trap '' TERM; P=\"$SANDBOX_ROOT/tmp/pids\"; echo $$ > \"$P\"; "
        "sleep 300 & echo $! >> \"$P\"; "
        /* A second after the start: the start has returned by then. */
        "sleep 1; : > \"$SANDBOX_ROOT/tmp/started\"; wait",
        record, &r, &err);
    cr_assert_not_null(op, "%s", msg(err));
    wait_marker(sb, "$SANDBOX_ROOT/tmp/started", 20);
    double t0 = tu_now();
    cr_assert_eq(sbx_op_cancel(op), 1);
    run_loop(a, &r.ran, 20);
    double dt = r.at - t0;
    /* TERM is ignored by the shell: KILL follows after the grace. */
    cr_assert(dt >= SBX_KILL_GRACE_SECS - 0.2, "ended after %.2f s, before the grace", dt);
    cr_assert(dt <= SBX_KILL_GRACE_SECS + 3.0, "ended after %.2f s", dt);
    cr_assert_eq(r.code, SBX_ERROR_CANCELLED, "code %s: %s", sbx_error_code_name(r.code),
                 r.message);
    assert_pids_gone(sb, "$SANDBOX_ROOT/tmp/pids");

    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}

/* Creates cancelled at once: those that never started report cancelled;
 * whatever was made is destroyed; nothing is left. */
typedef struct create_rec {
    int ran, cancelled, made;
    sbx_sandbox *sb;
} create_rec;

static void create_cb(sbx_op *op, void *ud)
{
    create_rec *r = ud;
    r->ran = 1;
    const sbx_error *e = sbx_op_get_error(op);
    if (e) {
        cr_assert_eq(sbx_error_get_code(e), SBX_ERROR_CANCELLED, "%s", msg(e));
        cr_assert_null(sbx_op_get0_sandbox(op));
        cr_assert_null(sbx_op_steal_sandbox(op));
        r->cancelled = 1;
    } else {
        r->sb = sbx_op_steal_sandbox(op);
        cr_assert_not_null(r->sb);
        r->made = 1;
    }
}

Test(async, cancel_creates_leaves_nothing)
{
    sbx_async *a = new_pool(2);
    create_rec recs[6] = { { 0 } };
    sbx_op *ops[6];
    sbx_error *err = NULL;

    for (int i = 0; i < 6; i++) {
        ops[i] = sbx_sandbox_create_async(a, g_client, NULL, create_cb, &recs[i], &err);
        cr_assert_not_null(ops[i], "%s", msg(err));
    }
    int cancelled = 0;
    for (int i = 0; i < 6; i++)
        cancelled += sbx_op_cancel(ops[i]);
    run_loop(a, NULL, 60);
    int seen = 0;
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(recs[i].ran, 1);
        seen += recs[i].cancelled;
        if (recs[i].sb) {
            cr_assert_eq(sbx_sandbox_destroy(recs[i].sb, NULL), 0);
            sbx_sandbox_free(recs[i].sb);
        }
    }
    /* Two workers: at least four creates had not started. */
    cr_assert_geq(cancelled, 4);
    cr_assert_eq(seen, cancelled, "sbx_op_cancel said %d, callbacks saw %d", cancelled, seen);
    sbx_async_free(a);
    assert_nothing_left();
}

/* ------------------------------------------------- (d) per-client bound */

typedef struct slot_rec {
    int ran;
    int count;                /* entries the script saw */
    int *finished;
} slot_rec;

static void slot_cb(sbx_op *op, void *ud)
{
    slot_rec *r = ud;
    op_ok(op, "slot script");
    const sbx_result *res = sbx_op_get0_result(op);
    tu_assert_exit(res, 0);
    const char *out = sbx_result_get0_stdout(res, NULL);
    char *end;
    long v = strtol(out, &end, 10);
    cr_assert(end != out && *end == '\n', "output \"%s\"", out);
    r->count = (int)v;
    r->ran = 1;
    (*r->finished)++;
}

Test(async, max_per_client_bounds_concurrency)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sbx_async *a = new_pool(8);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_async_set_max_per_client(a, 2, &err), 0, "%s", msg(err));
    sh_ok(sb, "mkdir -p \"$SANDBOX_ROOT/tmp/slots\"", "");

    /* Each op holds a slot directory for 1 s and counts the slots taken
     * meanwhile. Two at a time: the first op sees the second (started
     * right after it), and no op can see a third. Without the bound all
     * six would run at once and see six. */
    slot_rec recs[6] = { { 0 } };
    int finished = 0;
    for (int i = 0; i < 6; i++) {
        char *script = tu_strdup_printf(
            "S=\"$SANDBOX_ROOT/tmp/slots\"; mkdir \"$S/%d\"; sleep 1; "
            "n=$(ls \"$S\" | wc -l); rmdir \"$S/%d\"; echo $n", i, i);
        recs[i].finished = &finished;
        cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, script, slot_cb, &recs[i],
                                                           &err), "%s", msg(err));
        free(script);
    }
    run_loop(a, NULL, 60);
    cr_assert_eq(finished, 6);
    int max = 0;
    for (int i = 0; i < 6; i++) {
        cr_assert(recs[i].count >= 1 && recs[i].count <= 6, "op %d saw %d", i, recs[i].count);
        if (recs[i].count > max)
            max = recs[i].count;
    }
    cr_assert_eq(max, 2, "at most 2 ops of one client at once: saw %d", max);

    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}

typedef struct order_rec {
    char name[8];
    char (*log)[8];
    int *n;
} order_rec;

static void order_cb(sbx_op *op, void *ud)
{
    order_rec *r = ud;
    op_ok(op, r->name);
    snprintf(r->log[(*r->n)++], 8, "%s", r->name);
}

Test(async, other_clients_go_ahead)
{
    sbx_error *err = NULL;
    sbx_client *other = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(other, "%s", msg(err));
    sbx_sandbox *sa = tu_create(g_client, NULL);
    sbx_sandbox *sbb = tu_create(other, NULL);
    sbx_async *a = new_pool(3);
    cr_assert_eq(sbx_async_set_max_per_client(a, 1, &err), 0);

    char log[4][8];
    int n = 0;
    order_rec ra1 = { "A1", log, &n }, ra2 = { "A2", log, &n }, ra3 = { "A3", log, &n },
              rb1 = { "B1", log, &n };
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sa, "sleep 1.5", order_cb, &ra1, &err));
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sa, "true", order_cb, &ra2, &err));
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sa, "true", order_cb, &ra3, &err));
    /* Submitted last, but its client is below the bound: it starts on a
     * free worker while A2 and A3 wait for A1. */
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sbb, "true", order_cb, &rb1, &err));
    run_loop(a, NULL, 30);
    cr_assert_eq(n, 4);
    cr_assert_str_eq(log[0], "B1");
    cr_assert_str_eq(log[1], "A1");
    cr_assert_str_eq(log[2], "A2");
    cr_assert_str_eq(log[3], "A3");

    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sa, NULL), 0);
    cr_assert_eq(sbx_sandbox_destroy(sbb, NULL), 0);
    sbx_sandbox_free(sa);
    sbx_sandbox_free(sbb);
    sbx_client_free(other);
    assert_nothing_left();
}

/* ------------------------------------ (e) threads, descriptor, free */

typedef struct thread_rec {
    pthread_t ran_on;
    int ran;
} thread_rec;

static void thread_cb(sbx_op *op, void *ud)
{
    thread_rec *r = ud;
    cr_assert_null(sbx_op_get_error(op), "%s", msg(sbx_op_get_error(op)));
    r->ran_on = pthread_self();
    r->ran++;
}

typedef struct dispatcher {
    sbx_async *a;
    int want;
    int got;
} dispatcher;

static void *dispatch_thread(void *arg)
{
    dispatcher *d = arg;
    double end = tu_now() + 30;
    while (d->got < d->want && tu_now() < end) {
        int n = sbx_async_wait(d->a, 1.0);
        if (n > 0)
            d->got += n;
    }
    return NULL;
}

Test(async, callbacks_run_on_the_dispatching_thread)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sbx_async *a = new_pool(4);
    thread_rec recs[8] = { { 0 } };
    sbx_error *err = NULL;

    for (int i = 0; i < 8; i++)
        cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, "echo x", thread_cb, &recs[i],
                                                           &err), "%s", msg(err));
    /* Dispatched by another thread than the one that submitted. */
    dispatcher d = { a, 8, 0 };
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, dispatch_thread, &d), 0);
    pthread_join(t, NULL);
    cr_assert_eq(d.got, 8);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(recs[i].ran, 1);
        cr_assert(pthread_equal(recs[i].ran_on, t), "callback %d not on the dispatcher", i);
    }
    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
}

Test(async, descriptor_readable_exactly_while_completions_wait)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sbx_async *a = new_pool(2);
    thread_rec r1 = { 0 }, r2 = { 0 }, r3 = { 0 };
    sbx_error *err = NULL;

    cr_assert_geq(sbx_async_get_fd(a), 0);
    cr_assert_eq(fd_readable(a), 0);
    cr_assert_eq(sbx_async_wait(a, 5.0), 0, "nothing outstanding: returns at once");

    /* One completion: readable until dispatched, and only then. */
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, "true", thread_cb, &r1, &err));
    cr_assert_eq(sbx_async_pending(a), 1);
    struct pollfd p = { .fd = sbx_async_get_fd(a), .events = POLLIN };
    cr_assert_eq(poll(&p, 1, 20000), 1, "no completion within 20 s");
    usleep(200000);
    cr_assert_eq(fd_readable(a), 1, "readability went away without a dispatch");
    cr_assert_eq(sbx_async_pending(a), 1, "a completed op counts until dispatched");
    cr_assert_eq(r1.ran, 0, "a callback ran before dispatch");
    cr_assert_eq(sbx_async_dispatch(a), 1);
    cr_assert_eq(r1.ran, 1);
    cr_assert_eq(fd_readable(a), 0, "readable with nothing to dispatch");
    cr_assert_eq(sbx_async_pending(a), 0);
    cr_assert_eq(sbx_async_dispatch(a), 0);

    /* Two more through sbx_async_wait. */
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, "true", thread_cb, &r2, &err));
    cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, "true", thread_cb, &r3, &err));
    int n = 0;
    double end = tu_now() + 20;
    while (n < 2 && tu_now() < end)
        n += sbx_async_wait(a, 5.0);
    cr_assert_eq(n, 2);
    cr_assert_eq(r2.ran + r3.ran, 2);
    cr_assert_eq(fd_readable(a), 0);
    cr_assert_eq(sbx_async_pending(a), 0);
    cr_assert_eq(sbx_async_wait(a, 0), 0);
    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
}

static void must_not_run(sbx_op *op, void *ud)
{
    (void)op;
    (void)ud;
    cr_assert_fail("a callback ran after sbx_async_free");
}

Test(async, free_cancels_pending_and_leaves_nothing)
{
    /* No local supervisor started ahead: its socket and starting thread
     * come and go with creates, and are not the pool's. */
    cr_assert_eq(setenv("SBX_LOCAL_WARM", "0", 1), 0);
    sbx_sandbox *sb = tu_create(g_client, NULL);
    /* sbx_create_async() uses the process's shared client of the backend,
     * which stays once made (its plugin host and socket are not the
     * pool's): made here, before counting. */
    sbx_sandbox *warm = sbx_create(tu_backend(), NULL, NULL);
    cr_assert_not_null(warm);
    cr_assert_eq(sbx_sandbox_destroy(warm, NULL), 0);
    sbx_sandbox_free(warm);
    /* Out of process, an ended exec leaves its client the epoll set it
     * polled, for the next exec (not the pool's either): made here too. */
    sh_ok(sb, "true", "");
    int fds0 = count_self("fd"), tasks0 = count_self("task");
    sbx_async *a = new_pool(1);
    sbx_error *err = NULL;

    /* A create that completes but is never dispatched: free destroys it. */
    cr_assert_not_null(sbx_create_async(a, tu_backend(), NULL, must_not_run, NULL, &err),
                       "%s", msg(err));
    double end = tu_now() + 30;
    while (!fd_readable(a)) {
        cr_assert(tu_now() < end, "the create did not complete");
        usleep(20000);
    }
    cr_assert_eq(sbx_async_pending(a), 1);

    /* One running exec, then ops that never start (one of them a create). */
    cr_assert_not_null(sbx_sandbox_execute_shell_async(
        a, sb, ": > \"$SANDBOX_ROOT/tmp/first\"; sleep 1", must_not_run, NULL, &err));
    wait_marker(sb, "$SANDBOX_ROOT/tmp/first", 20);
    for (int i = 0; i < 4; i++) {
        char *script = tu_strdup_printf(": > \"$SANDBOX_ROOT/tmp/never-%d\"", i);
        cr_assert_not_null(sbx_sandbox_execute_shell_async(a, sb, script, must_not_run, NULL,
                                                           &err));
        free(script);
    }
    cr_assert_not_null(sbx_create_async(a, tu_backend(), NULL, must_not_run, NULL, &err));
    cr_assert_not_null(sbx_sandbox_write_file_async(a, sb, "tmp/never-file", "x", 1,
                                                    must_not_run, NULL, &err));
    cr_assert_eq(sbx_async_pending(a), 8);
    double t0 = tu_now();
    sbx_async_free(a);          /* waits for the running exec (about 1 s) */
    cr_assert(tu_now() - t0 < 10, "free took %.1f s", tu_now() - t0);

    cr_assert_eq(count_self("fd"), fds0, "descriptors left by the pool");
    cr_assert_eq(count_self("task"), tasks0, "threads left by the pool");
    sh_ok(sb, "ls \"$SANDBOX_ROOT/tmp\" | grep -c never; true", "0\n");
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}

/* A callback that frees its own pool: the free returns at once (the
 * running exec below waits for a file this callback writes after it, so a
 * free that waited would never return), submissions are refused from then
 * on, no other callback runs, and the pool is gone, threads and descriptor
 * with it, once the dispatch returns. */
typedef struct self_free {
    sbx_async *a;
    sbx_sandbox *sb;
    int ran;
    sbx_error_code submit_code;
    char *submit_message;
    int nested_wait;
} self_free;

static void free_from_callback(sbx_op *op, void *ud)
{
    self_free *st = ud;
    sbx_error *err = NULL;

    op_ok(op, "exec");
    st->ran++;
    sbx_async_free(st->a);
    cr_assert_null(sbx_sandbox_execute_shell_async(st->a, st->sb, "true", must_not_run, NULL,
                                                   &err), "queued after the pool was freed");
    st->submit_code = sbx_error_get_code(err);
    st->submit_message = strdup(sbx_error_get0_message(err));
    sbx_error_free(err);
    st->nested_wait = sbx_async_wait(st->a, -1);
    cr_assert_eq(sbx_sandbox_write_file(st->sb, "tmp/go", "x", 1, &err), 0, "%s", msg(err));
}

Test(async, a_callback_may_free_its_own_pool, .timeout = 60)
{
    cr_assert_eq(setenv("SBX_LOCAL_WARM", "0", 1), 0);
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sh_ok(sb, "true", "");
    int fds0 = count_self("fd"), tasks0 = count_self("task");
    self_free st = { .a = new_pool(2), .sb = sb };
    sbx_error *err = NULL;

    cr_assert_not_null(sbx_sandbox_execute_shell_async(
        st.a, sb, ": > \"$SANDBOX_ROOT/tmp/waiting\"; "
                  "while [ ! -e \"$SANDBOX_ROOT/tmp/go\" ]; do sleep 0.05; done",
        must_not_run, NULL, &err), "%s", msg(err));
    wait_marker(sb, "$SANDBOX_ROOT/tmp/waiting", 20);
    cr_assert_not_null(sbx_sandbox_execute_shell_async(st.a, sb, "true", free_from_callback,
                                                       &st, &err), "%s", msg(err));
    cr_assert_eq(sbx_async_wait(st.a, 30), 1);
    /* st.a is freed now. */
    cr_assert_eq(st.ran, 1);
    cr_assert_eq(st.submit_code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(st.submit_message,
                     "cannot queue execute_command: the pool is being freed");
    cr_assert_eq(st.nested_wait, 0);
    cr_assert_eq(count_self("fd"), fds0, "descriptors left by the pool");
    cr_assert_eq(count_self("task"), tasks0, "threads left by the pool");
    free(st.submit_message);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}

static void unstolen_cb(sbx_op *op, void *ud)
{
    char **root = ud;
    op_ok(op, "create");
    cr_assert_not_null(sbx_op_get0_sandbox(op));
    *root = strdup(sbx_sandbox_get0_root(sbx_op_get0_sandbox(op)));
    /* not stolen: the library destroys it */
}

Test(async, unstolen_sandbox_is_destroyed)
{
    sbx_async *a = new_pool(2);
    char *root = NULL;
    sbx_error *err = NULL;
    cr_assert_not_null(sbx_sandbox_create_async(a, g_client, NULL, unstolen_cb, &root, &err));
    cr_assert_not_null(sbx_create_async(a, tu_backend(), NULL, NULL, NULL, &err),
                       "a NULL callback is allowed");
    run_loop(a, NULL, 30);
    cr_assert_not_null(root);
    sbx_async_free(a);          /* lets the internal destroys finish */
    if (tu_backend_is_local())
        cr_assert_eq(tu_exists(root), 0, "root %s of an unstolen sandbox left", root);
    free(root);
    assert_nothing_left();
}

/* ------------------------------------------------ every other form once */

typedef struct any_rec {
    int ran;
    sbx_op_kind kind;
    sbx_error *error;
    int64_t value;
    char *data;
    size_t len;
    sbx_file_info **list;
    size_t count;
    sbx_sandbox *sb;
    sbx_client *client;
    sbx_result *result;
} any_rec;

static void any_cb(sbx_op *op, void *ud)
{
    any_rec *r = ud;
    cr_assert(pthread_equal(pthread_self(), g_main));
    r->ran = 1;
    r->kind = sbx_op_get_kind(op);
    r->value = sbx_op_get_int64(op);
    r->error = sbx_op_steal_error(op);
    cr_assert_null(sbx_op_get_error(op), "stolen");
    r->data = sbx_op_steal_data(op, &r->len);
    r->list = sbx_op_steal_file_list(op, &r->count);
    r->sb = sbx_op_steal_sandbox(op);
    r->client = sbx_op_steal_client(op);
    r->result = sbx_op_steal_result(op);
}

static void any_free(any_rec *r)
{
    sbx_error_free(r->error);
    free(r->data);
    sbx_file_info_list_free(r->list, r->count);
    sbx_result_free(r->result);
    sbx_client_free(r->client);
    memset(r, 0, sizeof(*r));
}

/* Submits with @submit (an expression using `a`, `&r`) and runs to its end. */
#define RUN_ONE(r, kind_, expr)                                                 \
    do {                                                                        \
        memset(&(r), 0, sizeof(r));                                             \
        sbx_error *e_ = NULL;                                                   \
        sbx_op *op_ = (expr);                                                   \
        cr_assert_not_null(op_, "%s: %s", #expr, msg(e_));                      \
        run_loop(a, &(r).ran, 60);                                              \
        cr_assert_eq((r).kind, kind_);                                          \
    } while (0)
#define E (&e_)

Test(async, every_form)
{
    sbx_async *a = new_pool(4);
    any_rec r;
    char *work = tu_mkdtemp("async-work");

    RUN_ONE(r, SBX_OP_CLIENT_NEW, sbx_client_new_async(a, tu_backend(), any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    cr_assert_not_null(r.client);
    cr_assert_str_eq(sbx_client_get0_backend(r.client), tu_backend());
    any_free(&r);

    for (int m = SBX_PLUGIN_MODE_OUT_OF_PROCESS; m <= SBX_PLUGIN_MODE_IN_PROCESS; m++) {
        RUN_ONE(r, SBX_OP_CLIENT_NEW,
                sbx_client_new_with_mode_async(a, tu_backend(), (sbx_plugin_mode)m, any_cb, &r,
                                               E));
        cr_assert_null(r.error, "%s", msg(r.error));
        cr_assert_not_null(r.client);
        cr_assert_eq(sbx_client_get_plugin_mode(r.client), (sbx_plugin_mode)m);
        cr_assert_eq(sbx_client_get_host_pid(r.client) > 0, m == SBX_PLUGIN_MODE_OUT_OF_PROCESS);
        any_free(&r);
    }

    RUN_ONE(r, SBX_OP_CLIENT_PROBE, sbx_client_probe_async(a, g_client, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
    cr_assert_eq((uint64_t)r.value, caps);
    cr_assert(caps & SBX_CAP_EXEC);
    any_free(&r);

    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "GREETING", "hello world", NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 120, NULL), 0);
    cr_assert_eq(sbx_options_add_file(o, "seed/a.txt", "seed", 4, NULL), 0);
    RUN_ONE(r, SBX_OP_SANDBOX_CREATE, sbx_sandbox_create_async(a, g_client, o, any_cb, &r, E));
    sbx_options_free(o);
    cr_assert_null(r.error, "%s", msg(r.error));
    sbx_sandbox *sb = r.sb;
    cr_assert_not_null(sb);
    any_free(&r);
    sh_ok(sb, "echo \"$GREETING\"; cat seed/a.txt", "hello world\nseed");

    RUN_ONE(r, SBX_OP_IS_ALIVE, sbx_sandbox_is_alive_async(a, sb, any_cb, &r, E));
    cr_assert_null(r.error);
    cr_assert_eq(r.value, 1);
    any_free(&r);

    RUN_ONE(r, SBX_OP_EXECUTE_SHELL, sbx_sandbox_execute_shell_async(a, sb, "echo sh; exit 3",
                                                                     any_cb, &r, E));
    cr_assert_not_null(r.result);
    tu_assert_stdout(r.result, "sh\n");
    cr_assert_eq(sbx_result_get_exit_code(r.result), 3);
    cr_assert_eq(r.value, 0);
    any_free(&r);

    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.stdin_data = "from stdin";
    rq.stdin_len = 10;
    RUN_ONE(r, SBX_OP_EXECUTE_CODE,
            sbx_sandbox_execute_code_async(a, sb, "sh", "printf 'code:'; cat", &rq, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    tu_assert_stdout(r.result, "code:from stdin");
    any_free(&r);
    RUN_ONE(r, SBX_OP_EXECUTE_CODE,
            sbx_sandbox_execute_code_async(a, sb, "cobol", "x", NULL, any_cb, &r, E));
    tu_assert_error(r.error, SBX_ERROR_INVALID_ARGUMENT, "cobol", NULL);
    cr_assert_str_eq(sbx_error_get0_op(r.error), "execute_code");
    cr_assert_eq(r.value, -1);
    any_free(&r);

    RUN_ONE(r, SBX_OP_EXECUTE_COMMAND,
            sbx_sandbox_execute_command_async(a, sb, &(sbx_exec_request){
                .struct_size = sizeof(sbx_exec_request),
                .argv = (const char *const[]){ "printf", "%s|%s", "a b", "-c", NULL } },
                any_cb, &r, E));
    tu_assert_stdout(r.result, "a b|-c");
    any_free(&r);

    RUN_ONE(r, SBX_OP_WRITE_FILE,
            sbx_sandbox_write_file_async(a, sb, "dir/one.txt", "one\n", 4, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    any_free(&r);

    RUN_ONE(r, SBX_OP_LIST_FILES, sbx_sandbox_list_files_async(a, sb, "dir", any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    cr_assert_eq(r.count, 1);
    cr_assert_str_eq(sbx_file_info_get0_name(r.list[0]), "one.txt");
    cr_assert_eq(sbx_file_info_get_size(r.list[0]), 4);
    any_free(&r);

    RUN_ONE(r, SBX_OP_READ_FILE, sbx_sandbox_read_file_async(a, sb, "dir/missing", any_cb, &r, E));
    tu_assert_error(r.error, SBX_ERROR_NOT_FOUND, NULL);
    cr_assert_str_eq(sbx_error_get0_op(r.error), "read_file");
    cr_assert_null(r.data);
    any_free(&r);

    /* Descriptors: read_file_to_fd into a pipe, write_file_from_fd from one. */
    int p[2];
    cr_assert_eq(pipe(p), 0);
    RUN_ONE(r, SBX_OP_READ_FILE_TO_FD,
            sbx_sandbox_read_file_to_fd_async(a, sb, "dir/one.txt", p[1], any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    char buf[16] = { 0 };
    cr_assert_eq(read(p[0], buf, sizeof(buf)), 4);
    cr_assert_str_eq(buf, "one\n");
    cr_assert_eq(write(p[1], "two\n", 4), 4);
    close(p[1]);
    any_free(&r);
    RUN_ONE(r, SBX_OP_WRITE_FILE_FROM_FD,
            sbx_sandbox_write_file_from_fd_async(a, sb, "dir/two.sh", p[0], 0755, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    close(p[0]);
    any_free(&r);
    sh_ok(sb, "cat dir/two.sh; test -x dir/two.sh && echo exec", "two\nexec\n");

    /* Files and directories between host and sandbox. */
    char *hfile = tu_strdup_printf("%s/host.txt", work);
    tu_write_file(hfile, "host bytes", 10, 0700);
    RUN_ONE(r, SBX_OP_UPLOAD_FILE,
            sbx_sandbox_upload_file_async(a, sb, hfile, "up/host.txt", any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    any_free(&r);
    char *back = tu_strdup_printf("%s/back.txt", work);
    RUN_ONE(r, SBX_OP_DOWNLOAD_FILE,
            sbx_sandbox_download_file_async(a, sb, "up/host.txt", back, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    struct stat st;
    cr_assert_eq(stat(back, &st), 0);
    cr_assert_eq(st.st_size, 10);
    cr_assert_eq(st.st_mode & 0777, 0700);
    any_free(&r);

    char *tree = tu_strdup_printf("%s/tree", work);
    cr_assert_eq(mkdir(tree, 0755), 0);
    char *f1 = tu_strdup_printf("%s/x", tree);
    tu_write_file(f1, "x", 1, 0644);
    RUN_ONE(r, SBX_OP_UPLOAD_DIR,
            sbx_sandbox_upload_dir_async(a, sb, tree, "treecopy", any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    cr_assert_eq(r.value, 1);
    any_free(&r);
    char *tree2 = tu_strdup_printf("%s/tree2", work);
    RUN_ONE(r, SBX_OP_DOWNLOAD_DIR,
            sbx_sandbox_download_dir_async(a, sb, "dir", tree2, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    cr_assert_eq(r.value, 2);
    any_free(&r);

    /* A tar stream through extract_tar_fd. */
    char *tarfile = tu_strdup_printf("%s/t.tar", work);
    char *cmd = tu_strdup_printf("tar -C '%s' -cf '%s' x", tree, tarfile);
    cr_assert_eq(system(cmd), 0);
    int tfd = open(tarfile, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(tfd, 0);
    char *dest = tu_strdup_printf("%s/extracted", work);
    cr_assert_eq(mkdir(dest, 0755), 0);
    RUN_ONE(r, SBX_OP_EXTRACT_TAR, sbx_extract_tar_fd_async(a, tfd, dest, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    cr_assert_eq(r.value, 1);
    close(tfd);
    any_free(&r);

    /* Snapshot and destroy by id: the local backends have neither (the
     * errors are the synchronous calls', with their op names). */
    RUN_ONE(r, SBX_OP_SNAPSHOT, sbx_sandbox_snapshot_async(a, sb, any_cb, &r, E));
    tu_assert_error(r.error, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                    "cannot snapshot sandboxes", NULL);
    cr_assert_str_eq(sbx_error_get0_backend(r.error), tu_backend());
    cr_assert_str_eq(sbx_error_get0_op(r.error), "snapshot");
    cr_assert_null(r.data);
    any_free(&r);
    RUN_ONE(r, SBX_OP_DESTROY_BY_ID,
            sbx_client_destroy_by_id_async(a, g_client, sbx_sandbox_get0_id(sb), any_cb, &r, E));
    tu_assert_error(r.error, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                    "cannot destroy sandboxes by id", NULL);
    cr_assert_str_eq(sbx_error_get0_op(r.error), "destroy_by_id");
    any_free(&r);

    /* Session state, then resume it both ways. */
    RUN_ONE(r, SBX_OP_SESSION_STATE, sbx_sandbox_session_state_async(a, sb, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    cr_assert_not_null(r.data);
    cr_assert_eq(r.len, strlen(r.data));
    char *state = r.data;
    r.data = NULL;
    any_free(&r);
    RUN_ONE(r, SBX_OP_SANDBOX_RESUME, sbx_sandbox_resume_async(a, g_client, state, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    cr_assert_str_eq(sbx_sandbox_get0_id(r.sb), sbx_sandbox_get0_id(sb));
    sbx_sandbox_free(r.sb);
    r.sb = NULL;
    any_free(&r);
    RUN_ONE(r, SBX_OP_RESUME, sbx_resume_async(a, state, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    sh_ok(r.sb, "cat dir/one.txt", "one\n");
    sbx_sandbox_free(r.sb);
    r.sb = NULL;
    any_free(&r);
    free(state);

    RUN_ONE(r, SBX_OP_DESTROY, sbx_sandbox_destroy_async(a, sb, any_cb, &r, E));
    cr_assert_null(r.error, "%s", msg(r.error));
    any_free(&r);
    RUN_ONE(r, SBX_OP_IS_ALIVE, sbx_sandbox_is_alive_async(a, sb, any_cb, &r, E));
    cr_assert_eq(r.value, 0);
    any_free(&r);
    RUN_ONE(r, SBX_OP_EXECUTE_SHELL, sbx_sandbox_execute_shell_async(a, sb, "true", any_cb, &r, E));
    tu_assert_error(r.error, SBX_ERROR_NOT_FOUND, "destroyed", NULL);
    any_free(&r);
    sbx_sandbox_free(sb);

    sbx_async_free(a);
    tu_rmtree(work);
    free(work);
    free(hfile);
    free(back);
    free(tree);
    free(tree2);
    free(f1);
    free(tarfile);
    free(cmd);
    free(dest);
    assert_nothing_left();
}

/* --------------------------------------------------- (f) bad arguments */

/* @err is read after @op was computed (argument order is unspecified). */
static void expect_null(sbx_op *op, sbx_error **err, const char *what)
{
    cr_assert_null(op);
    char *want = tu_strdup_printf("%s is NULL", what);
    tu_assert_error(*err, SBX_ERROR_INVALID_ARGUMENT, want, NULL);
    free(want);
    sbx_error_clear(err);
}

Test(async, bad_arguments)
{
    sbx_sandbox *sb = tu_create(g_client, NULL);
    sbx_async *a = new_pool(1);
    sbx_error *err = NULL;
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "true";

    expect_null(sbx_sandbox_execute_async(NULL, sb, &rq, NULL, NULL, &err), &err, "async");
    expect_null(sbx_sandbox_execute_async(a, NULL, &rq, NULL, NULL, &err), &err, "sandbox");
    expect_null(sbx_sandbox_execute_async(a, sb, NULL, NULL, NULL, &err), &err, "request");
    expect_null(sbx_sandbox_read_file_async(NULL, sb, "x", NULL, NULL, &err), &err, "async");
    expect_null(sbx_sandbox_read_file_async(a, NULL, "x", NULL, NULL, &err), &err, "sandbox");
    expect_null(sbx_sandbox_destroy_async(a, NULL, NULL, NULL, &err), &err, "sandbox");
    expect_null(sbx_create_async(NULL, "local", NULL, NULL, NULL, &err), &err, "async");
    expect_null(sbx_sandbox_create_async(a, NULL, NULL, NULL, NULL, &err), &err, "client");
    expect_null(sbx_client_probe_async(a, NULL, NULL, NULL, &err), &err, "client");
    expect_null(sbx_extract_tar_fd_async(NULL, 0, "/tmp", NULL, NULL, &err), &err, "async");

    /* The op name and backend are on the submission error. */
    err = NULL;
    cr_assert_null(sbx_sandbox_write_file_async(NULL, sb, "x", "", 0, NULL, NULL, &err));
    cr_assert_str_eq(sbx_error_get0_op(err), "write_file");
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    sbx_error_free(err);

    /* A request whose struct_size is too small cannot be copied. */
    sbx_exec_request small = rq;
    small.struct_size = 8;
    err = NULL;
    cr_assert_null(sbx_sandbox_execute_async(a, sb, &small, NULL, NULL, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "struct_size", NULL);
    sbx_error_free(err);

    /* Pool arguments. */
    err = NULL;
    cr_assert_null(sbx_async_new(SBX_ASYNC_MAX_WORKERS + 1, &err));
    char *v = tu_strdup_printf("%u", SBX_ASYNC_MAX_WORKERS + 1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "max_workers", v, NULL);
    free(v);
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_async_set_max_per_client(NULL, 1, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "async is NULL", NULL);
    sbx_error_free(err);
    cr_assert_eq(sbx_async_get_fd(NULL), -1);
    cr_assert_eq(sbx_async_dispatch(NULL), -1);
    cr_assert_eq(sbx_async_wait(NULL, 0), -1);
    cr_assert_eq(sbx_async_wait(a, NAN), -1);
    cr_assert_eq(sbx_async_pending(NULL), 0);
    cr_assert_eq(sbx_op_cancel(NULL), -1);
    sbx_async_free(NULL);
    cr_assert_eq(sbx_async_pending(a), 0, "a refused submission queued nothing");

    /* Other bad values reach the callback as the synchronous call reports
     * them. */
    any_rec r;
    RUN_ONE(r, SBX_OP_READ_FILE, sbx_sandbox_read_file_async(a, sb, NULL, any_cb, &r, E));
    cr_assert_not_null(r.error);
    cr_assert_eq(sbx_error_get_code(r.error), SBX_ERROR_INVALID_ARGUMENT, "%s", msg(r.error));
    any_free(&r);
    rq.argv = (const char *const[]){ "true", NULL };
    RUN_ONE(r, SBX_OP_EXECUTE_COMMAND, sbx_sandbox_execute_async(a, sb, &rq, any_cb, &r, E));
    tu_assert_error(r.error, SBX_ERROR_INVALID_ARGUMENT, "exactly one of argv and shell", NULL);
    any_free(&r);
    RUN_ONE(r, SBX_OP_CREATE, sbx_create_async(a, "no-such-backend", NULL, any_cb, &r, E));
    cr_assert_eq(sbx_error_get_code(r.error), SBX_ERROR_BACKEND_NOT_INSTALLED, "%s",
                 msg(r.error));
    any_free(&r);

    sbx_async_free(a);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    assert_nothing_left();
}

Test(async, cancelled_code)
{
    cr_assert_eq(SBX_ERROR_CANCELLED, 14);
    cr_assert_str_eq(sbx_error_code_name(SBX_ERROR_CANCELLED), "cancelled");
}
