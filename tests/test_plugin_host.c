/*
 * The out-of-process plugin host (sbx-plugin-host and the proxy in libsbx):
 * modes, faults proven with test-only plugins that crash or hang on purpose
 * (tests/plugins/faults.c), reattaching sandboxes after a crash, and what
 * the plugin's side keeps.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "testutil.h"

static char *g_tmp;

static void setup(void)
{
    g_tmp = tu_fresh_tmpdir();
    unsetenv("SBX_PLUGIN_MODE");
}

static void teardown(void)
{
    tu_continue_stopped();
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%s is not empty at the end", g_tmp);
    tu_rmtree(g_tmp);
    free(g_tmp);
}

TestSuite(plugin_host, .init = setup, .fini = teardown, .timeout = 120);

static sbx_client *faulty_client(void)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("faulty", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c, "client: %s", err ? sbx_error_get0_message(err) : "");
    return c;
}

static sbx_result *run_argv(sbx_sandbox *sb, const char *const *argv, sbx_error **err)
{
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = argv;
    return sbx_sandbox_execute_command(sb, &rq, err);
}

static void expect_echo(sbx_sandbox *sb, const char *word)
{
    sbx_error *err = NULL;
    const char *argv[] = { "echo", word, NULL };
    sbx_result *r = run_argv(sb, argv, &err);
    cr_assert_not_null(r, "echo %s: %s", word, err ? sbx_error_get0_message(err) : "");
    char *want = tu_strdup_printf("%s\n", word);
    tu_assert_stdout(r, want);
    tu_assert_exit(r, 0);
    free(want);
    sbx_result_free(r);
}

/* 1 when a process whose command line contains @needle still runs. */
static int
host_alive(int pid)
{
    return pid > 0 && !tu_pid_gone((pid_t)pid);
}

/* ------------------------------------------------------------------ modes */

Test(plugin_host, default_mode_is_out_of_process_with_a_host_per_client)
{
    sbx_error *err = NULL;
    sbx_client *a = sbx_client_new("local", &err);
    cr_assert_not_null(a);
    sbx_client *b = sbx_client_new("local", &err);
    cr_assert_not_null(b);
    cr_assert_eq(sbx_client_get_plugin_mode(a), SBX_PLUGIN_MODE_OUT_OF_PROCESS);
    int pa = sbx_client_get_host_pid(a), pb = sbx_client_get_host_pid(b);
    cr_assert(pa > 0 && pb > 0 && pa != pb, "host pids %d and %d", pa, pb);
    cr_assert(tu_is_plugin_host(pa), "pid %d is not sbx-plugin-host", pa);
    cr_assert_eq(tu_ppid(pa), getpid());
    /* One host serves several sandboxes. */
    sbx_sandbox *s1 = tu_create(a, NULL), *s2 = tu_create(a, NULL);
    expect_echo(s1, "one");
    expect_echo(s2, "two");
    cr_assert_eq(sbx_client_get_host_pid(a), pa);
    cr_assert_eq(sbx_sandbox_destroy(s1, &err), 0);
    cr_assert_eq(sbx_sandbox_destroy(s2, &err), 0);
    sbx_sandbox_free(s1);
    sbx_sandbox_free(s2);
    sbx_client_free(a);
    sbx_client_free(b);
    /* Freeing the client stops and reaps its host. */
    cr_assert(tu_pid_gone((pid_t)pa) && tu_pid_gone((pid_t)pb));
    cr_assert_eq(kill((pid_t)pa, 0), -1, "host %d was not reaped", pa);
}

/* ------------------------------------------- a host killed while no call waits */

/* Threads of process @pid still in /proc (0 once it was reaped). */
static int threads_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Waits (up to 5 s, asserted) until the SIGKILLed plugin host @pid has
 * ended with all its threads. Its main thread turns zombie first (which
 * tu_pid_gone() counts as gone) while its other threads may still be
 * exiting and holding its descriptors, its end of the socket among them:
 * the application sees the hang-up only once the last has ended. */
static void wait_host_ended(pid_t pid)
{
    double until = tu_now() + 5;
    while (!(tu_pid_gone(pid) && threads_of(pid) <= 1) && tu_now() < until)
        usleep(1000);
    cr_assert(tu_pid_gone(pid) && threads_of(pid) <= 1, "%s, %d threads",
              tu_proc_describe(pid), threads_of(pid));
}

/* "echo @word" with a working directory: a command that goes through the
 * plugin host (one without goes straight to the supervisor), so that it
 * needs the host that serves @sb. */
static void expect_echo_through_the_host(sbx_sandbox *sb, const char *word)
{
    sbx_error *err = NULL;
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    const char *argv[] = { "echo", word, NULL };
    rq.argv = argv;
    rq.cwd = "/";
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &err);
    cr_assert_not_null(r, "echo %s (cwd /): %s", word, err ? sbx_error_get0_message(err) : "");
    char *want = tu_strdup_printf("%s\n", word);
    tu_assert_stdout(r, want);
    tu_assert_exit(r, 0);
    free(want);
    sbx_result_free(r);
}

/* Any client's host SIGKILLed while no call waits (nobody reads its socket
 * then): the next call, on a sandbox, starts a new host that took the
 * sandbox over, instead of failing on the dead host's socket; so does the
 * next create. */
Test(plugin_host, a_host_killed_while_idle_is_restarted_by_the_next_call)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = tu_create(c, NULL);
    for (int round = 0; round < 2; round++) {
        int host = sbx_client_get_host_pid(c);
        cr_assert(host > 0);
        cr_assert_eq(kill((pid_t)host, SIGKILL), 0);
        wait_host_ended((pid_t)host);
        sbx_sandbox *made = NULL;
        if (round == 0) {
            expect_echo_through_the_host(sb, "restarted");
        } else {
            made = sbx_sandbox_create(c, NULL, &err);
            cr_assert_not_null(made, "create after the host's SIGKILL: %s",
                               err ? sbx_error_get0_message(err) : "");
            expect_echo_through_the_host(made, "made");
            expect_echo_through_the_host(sb, "reattached");
        }
        int host2 = sbx_client_get_host_pid(c);
        cr_assert(host2 > 0 && host2 != host, "round %d: host %d after %d", round, host2, host);
        if (made) {
            cr_assert_eq(sbx_sandbox_destroy(made, &err), 0, "%s",
                         err ? sbx_error_get0_message(err) : "");
            sbx_sandbox_free(made);
        }
    }
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* ------------------------------------------------- the client sbx_create shares */

/* The plugin hosts this process started that still run (zombies not
 * counted): their pids in @pids (at most @max, in /proc's order); returns
 * how many. sbx_create() keeps its client to itself, so this is how a test
 * sees the host that serves its sandboxes. */
static size_t own_hosts(pid_t *pids, size_t max)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    size_t n = 0;

    cr_assert_not_null(d);
    while ((e = readdir(d)) != NULL) {
        long v = strtol(e->d_name, NULL, 10);
        if (v <= 0 || tu_ppid((pid_t)v) != getpid() || !tu_is_plugin_host((pid_t)v) ||
            tu_pid_gone((pid_t)v))
            continue;
        if (n < max)
            pids[n] = (pid_t)v;
        n++;
    }
    closedir(d);
    return n;
}

/* The one plugin host this process runs; asserts there is exactly one. */
static pid_t the_own_host(const char *when)
{
    pid_t pids[16];
    size_t n = own_hosts(pids, 16);
    cr_assert_eq(n, 1, "%s: %zu plugin hosts run for this process, not 1", when, n);
    return pids[0];
}

static sbx_sandbox *create_local(void)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_create("local", NULL, &err);
    cr_assert_not_null(sb, "sbx_create: %s", err ? sbx_error_get0_message(err) : "");
    return sb;
}

/* Two sandboxes made with sbx_create("local") in one process, and a third
 * resumed with sbx_resume() from the first's session state, are served by
 * one plugin host: the process-wide client of the backend. A client made
 * with sbx_client_new() keeps a host of its own beside it. */
Test(plugin_host, sbx_create_shares_one_host_per_backend)
{
    sbx_error *err = NULL;
    pid_t pids[4];
    cr_assert_eq(own_hosts(pids, 4), 0);
    sbx_sandbox *a = create_local();
    pid_t host = the_own_host("after one sbx_create");
    sbx_sandbox *b = create_local();
    cr_assert_eq(the_own_host("after two sbx_create"), host);
    expect_echo_through_the_host(a, "a");
    expect_echo_through_the_host(b, "b");
    char *state = sbx_sandbox_session_state(a, &err);
    cr_assert_not_null(state, "session state: %s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *r = sbx_resume(state, &err);
    free(state);
    cr_assert_not_null(r, "sbx_resume: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(sbx_sandbox_get0_id(r), sbx_sandbox_get0_id(a));
    expect_echo_through_the_host(r, "resumed");
    cr_assert_eq(the_own_host("after sbx_resume"), host);

    sbx_client *own = sbx_client_new("local", &err);
    cr_assert_not_null(own, "%s", err ? sbx_error_get0_message(err) : "");
    int own_host = sbx_client_get_host_pid(own);
    cr_assert(own_host > 0 && own_host != host, "own client's host %d, shared host %d",
              own_host, (int)host);
    cr_assert_eq(own_hosts(pids, 4), 2);
    sbx_client_free(own);
    cr_assert_eq(the_own_host("after sbx_client_free"), host);

    cr_assert_eq(sbx_sandbox_destroy(r, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(r);
    sbx_sandbox_free(a); /* destroyed through r */
    cr_assert_eq(sbx_sandbox_destroy(b, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(b);
}

/* The shared client's host SIGKILLed while idle: the next sbx_create()
 * works, on a new host that also took the earlier sandbox over (a call on
 * it that needs the host starts no other). */
Test(plugin_host, sbx_create_after_its_host_was_killed_starts_a_new_one)
{
    sbx_error *err = NULL;
    sbx_sandbox *a = create_local();
    expect_echo_through_the_host(a, "before");
    pid_t host = the_own_host("before the kill");
    cr_assert_eq(kill(host, SIGKILL), 0);
    wait_host_ended(host);

    sbx_sandbox *b = sbx_create("local", NULL, &err);
    cr_assert_not_null(b, "sbx_create after the host's SIGKILL: %s",
                       err ? sbx_error_get0_message(err) : "");
    pid_t host2 = the_own_host("after the kill and a create");
    cr_assert_neq(host2, host);
    expect_echo(b, "after");
    expect_echo_through_the_host(b, "after-host");
    expect_echo_through_the_host(a, "reattached");
    cr_assert_eq(the_own_host("after a call on the earlier sandbox"), host2);
    cr_assert_eq(sbx_sandbox_destroy(a, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_destroy(b, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);
}

typedef struct creator {
    pthread_barrier_t *made;    /* every thread holds its sandbox */
    pthread_barrier_t *counted; /* the main thread counted the hosts */
    sbx_error *error;
    const char *step;
    char word[16];
} creator;

/* sbx_create, wait for the others, an exec through the host, destroy,
 * free; the first failure's step and error are kept for the main thread. */
static void *create_use_destroy(void *arg)
{
    creator *c = arg;
    sbx_sandbox *sb = sbx_create("local", NULL, &c->error);
    if (!sb)
        c->step = "create";
    pthread_barrier_wait(c->made);
    pthread_barrier_wait(c->counted);
    if (!sb)
        return NULL;
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    const char *argv[] = { "echo", c->word, NULL };
    rq.argv = argv;
    rq.cwd = "/";
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &c->error);
    char *want = tu_strdup_printf("%s\n", c->word);
    size_t len = 0;
    const char *out = r ? sbx_result_get0_stdout(r, &len) : NULL;
    if (!r)
        c->step = "exec";
    else if (len != strlen(want) || memcmp(out, want, len) != 0 ||
             sbx_result_get_exit_code(r) != 0)
        c->step = "exec output";
    free(want);
    sbx_result_free(r);
    if (sbx_sandbox_destroy(sb, c->step ? NULL : &c->error) != 0 && !c->step)
        c->step = "destroy";
    sbx_sandbox_free(sb);
    return NULL;
}

/* Eight threads call sbx_create() at once, the first ones among them
 * before the shared client exists: one client is made, and its one host
 * serves all eight. When every sandbox is freed the client is kept, as
 * sbx_create() documents, with its host: a later sbx_create() uses that
 * same host. Three rounds. */
Test(plugin_host, threads_creating_at_once_share_one_host_kept_after_the_last_free)
{
    enum { N = 8, ROUNDS = 3 };
    pid_t host = 0;

    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_t made, counted;
        creator c[N];
        pthread_t t[N];
        cr_assert_eq(pthread_barrier_init(&made, NULL, N + 1), 0);
        cr_assert_eq(pthread_barrier_init(&counted, NULL, N + 1), 0);
        for (int i = 0; i < N; i++) {
            c[i] = (creator){ .made = &made, .counted = &counted };
            snprintf(c[i].word, sizeof c[i].word, "r%d-t%d", round, i);
            cr_assert_eq(pthread_create(&t[i], NULL, create_use_destroy, &c[i]), 0);
        }
        pthread_barrier_wait(&made);
        pid_t pids[N + 1];
        size_t n = own_hosts(pids, N + 1);
        pthread_barrier_wait(&counted);
        for (int i = 0; i < N; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&made);
        pthread_barrier_destroy(&counted);
        for (int i = 0; i < N; i++)
            cr_assert_null(c[i].step, "round %d, thread %d: %s: %s", round, i, c[i].step,
                           c[i].error ? sbx_error_get0_message(c[i].error) : "no error");
        cr_assert_eq(n, 1, "round %d: %zu plugin hosts for %d sandboxes made at once", round,
                     n, N);
        if (round == 0)
            host = pids[0];
        cr_assert_eq(pids[0], host, "round %d: host %d, not the first round's %d", round,
                     (int)pids[0], (int)host);
        /* Every sandbox freed: the client and its host stay. */
        cr_assert_eq(the_own_host("after every sandbox was freed"), host);
    }
    sbx_sandbox *sb = create_local();
    expect_echo_through_the_host(sb, "later");
    cr_assert_eq(the_own_host("after a later sbx_create"), host);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
}

/*
 * Out of process, a command that runs to its end goes straight to a local
 * sandbox's supervisor (its session state's exec_endpoint): with the
 * plugin host stopped it still runs, with its stdin, output, exit code and
 * timeout (its tree killed through the same connection); one with a
 * working directory goes through the host, which answers once continued,
 * and the host was never restarted.
 */
Test(plugin_host, a_command_to_its_end_goes_straight_to_the_supervisor)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("local", &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = tu_create(c, NULL);
    int host = sbx_client_get_host_pid(c);
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_result *r, *late;
    double t0;

    cr_assert(host > 0);
    rq.shell = "read x; echo \"got $x\"; echo err >&2; exit 7";
    rq.stdin_data = "line\n";
    rq.stdin_len = 5;
    cr_assert_eq(kill(host, SIGSTOP), 0);
    r = sbx_sandbox_execute_command(sb, &rq, &err);
    rq = (sbx_exec_request)SBX_EXEC_REQUEST_INIT;
    rq.shell = "sleep 30";
    rq.timeout_secs = 0.3;
    t0 = tu_now();
    late = sbx_sandbox_execute_command(sb, &rq, &err);
    double took = tu_now() - t0;
    kill(host, SIGCONT);
    cr_assert_not_null(r, "with the host stopped: %s", err ? sbx_error_get0_message(err) : "");
    tu_assert_stdout(r, "got line\n");
    tu_assert_stderr(r, "err\n");
    tu_assert_exit(r, 7);
    sbx_result_free(r);
    cr_assert_not_null(late, "timeout with the host stopped: %s",
                       err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_result_is_timed_out(late), 1);
    cr_assert_eq(sbx_result_get_exit_code(late), 124);
    cr_assert(took < 5.0, "the timed-out command took %.2f s", took);
    sbx_result_free(late);

    rq = (sbx_exec_request)SBX_EXEC_REQUEST_INIT;
    rq.shell = "echo in";
    rq.cwd = "/";
    r = sbx_sandbox_execute_command(sb, &rq, &err);
    cr_assert_not_null(r, "with a cwd: %s", err ? sbx_error_get0_message(err) : "");
    tu_assert_stdout(r, "in\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert_eq(sbx_client_get_host_pid(c), host);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* 1 when the file @path holds each of the @n strings @want. */
static int file_holds_all(const char *path, char **want, int n)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    size_t len = 0;
    int all = 1;

    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert(getdelim(&buf, &len, '\0', f) >= 0 || feof(f));
    fclose(f);
    for (int i = 0; i < n && all; i++)
        all = buf && strstr(buf, want[i]) != NULL;
    free(buf);
    return all;
}

/* Out of process, destroy of a local sandbox goes to its supervisor as its
 * commands do: it ends the sandbox with the plugin host stopped. The host
 * finishes later (what its plugin keeps of the sandbox), and the handle the
 * application freed meanwhile goes too (the plugin's debug log says when
 * it releases a handle). Eight at a time: the host, let go, finds eight
 * destroys queued, each with the free of its handle right behind it, which
 * its threads read and run at once; a destroy that looked its handle up
 * after that free was refused as "not known", and its sandbox held until
 * the host's end. */
#define ROUNDS 48
#define BATCH 8
Test(plugin_host, a_destroy_goes_straight_to_the_supervisor_and_the_host_lets_go_after)
{
    sbx_error *err = NULL;
    tu_debug_log l;
    char *ids[ROUNDS];
    tu_debug_log_start(&l);
    sbx_client *c = sbx_client_new("local", &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    /* A stalled host fails a call that needs it within 5 s (and is then
     * killed), rather than hang the test. */
    cr_assert_eq(sbx_client_set_call_timeout(c, 5, &err), 0);
    sbx_sandbox *sb = tu_create(c, NULL);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    int host = sbx_client_get_host_pid(c);
    cr_assert(host > 0);

    for (int round = 0; round < ROUNDS / BATCH; round++) {
        sbx_sandbox *sbs[BATCH];
        char *roots[BATCH];
        pid_t escaped[BATCH];
        for (int j = 0; j < BATCH; j++) {
            int i = round * BATCH + j;
            sbs[j] = tu_create(c, NULL);
            roots[j] = strdup(sbx_sandbox_get0_root(sbs[j]));
            ids[i] = tu_strdup_printf("released %s\n", sbx_sandbox_get0_id(sbs[j]));
            sbx_result *r = tu_sh(sbs[j], "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!",
                                  10);
            escaped[j] = (pid_t)atoi(sbx_result_get0_stdout(r, NULL));
            sbx_result_free(r);
            cr_assert(escaped[j] > 1);
            cr_assert_eq(tu_pid_gone(escaped[j]), 0);
        }

        /* The host finds the destroys and the frees behind them queued. */
        tu_stop_pid(host);
        for (int j = 0; j < BATCH; j++) {
            double t0 = tu_now();
            int rc = sbx_sandbox_destroy(sbs[j], &err);
            double took = tu_now() - t0;
            int gone = tu_pid_gone(escaped[j]), root_left = tu_exists(roots[j]);
            sbx_sandbox_free(sbs[j]);
            if (rc != 0 || took >= 2.0 || gone != 1 || root_left)
                kill(host, SIGCONT);
            cr_assert_eq(rc, 0, "destroy with the host stopped: %s",
                         err ? sbx_error_get0_message(err) : "");
            cr_assert(took < 2.0, "destroy took %.2f s", took);
            cr_assert_eq(gone, 1, "the sandbox's process %d outlived its destroy",
                         (int)escaped[j]);
            cr_assert_eq(root_left, 0, "%s is still there after destroy", roots[j]);
            free(roots[j]);
        }
        kill(host, SIGCONT);
    }
    /* The host read the destroys and the frees behind them: each handle is
     * released, by the application's free or, when that came while the
     * destroy ran, once the destroy is over; a lost free would hold the
     * plugin's handle until the host's end, when its log says "released"
     * after "released ... now" below. */
    double until = tu_now() + 5;
    char log_path[64];          /* the log is unlinked: by its descriptor */
    snprintf(log_path, sizeof log_path, "/proc/self/fd/%d", l.fd);
    while (!file_holds_all(log_path, ids, ROUNDS) && tu_now() < until)
        usleep(10000);
    cr_assert_eq(sbx_client_get_host_pid(c), host);
    sb = tu_create(c, NULL);
    expect_echo(sb, "after");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    fprintf(stderr, "released ... now\n");
    fflush(stderr);
    sbx_client_free(c);
    char *log = tu_debug_log_stop(&l);
    const char *now = strstr(log, "released ... now\n");
    cr_assert_not_null(now);
    for (int i = 0; i < ROUNDS; i++) {
        const char *at = strstr(log, ids[i]);
        cr_assert(at && at < now, "no \"%.*s\" before the client's free", (int)strlen(ids[i]) - 1,
                  ids[i]);
        free(ids[i]);
    }
    free(log);
}

#undef ROUNDS
#undef BATCH

Test(plugin_host, in_process_by_option_and_by_environment)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_IN_PROCESS, &err);
    cr_assert_not_null(c);
    cr_assert_eq(sbx_client_get_plugin_mode(c), SBX_PLUGIN_MODE_IN_PROCESS);
    cr_assert_eq(sbx_client_get_host_pid(c), 0);
    sbx_sandbox *sb = tu_create(c, NULL);
    expect_echo(sb, "inside");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);

    setenv("SBX_PLUGIN_MODE", "inprocess", 1);
    c = sbx_client_new("local", &err);
    cr_assert_not_null(c);
    cr_assert_eq(sbx_client_get_plugin_mode(c), SBX_PLUGIN_MODE_IN_PROCESS);
    sbx_client_free(c);
    /* The explicit mode wins over the environment. */
    c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c);
    cr_assert_eq(sbx_client_get_plugin_mode(c), SBX_PLUGIN_MODE_OUT_OF_PROCESS);
    cr_assert(sbx_client_get_host_pid(c) > 0);
    sbx_client_free(c);

    setenv("SBX_PLUGIN_MODE", "sideways", 1);
    cr_assert_null(sbx_client_new("local", &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "SBX_PLUGIN_MODE", "\"sideways\"", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "SBX_PLUGIN_MODE"), "sideways");
    sbx_error_clear(&err);
    unsetenv("SBX_PLUGIN_MODE");
    cr_assert_null(sbx_client_new_with_mode("local", (sbx_plugin_mode)7, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "invalid plugin mode 7", NULL);
    sbx_error_free(err);
    cr_assert_str_eq(sbx_plugin_mode_name(SBX_PLUGIN_MODE_IN_PROCESS), "inprocess");
    cr_assert_str_eq(sbx_plugin_mode_name(SBX_PLUGIN_MODE_OUT_OF_PROCESS), "outofprocess");
}

Test(plugin_host, missing_host_program_is_a_configuration_error)
{
    char *saved = strdup(getenv("SBX_PLUGIN_HOST"));
    setenv("SBX_PLUGIN_HOST", "/nonexistent/sbx-plugin-host", 1);
    sbx_error *err = NULL;
    cr_assert_null(sbx_client_new("local", &err));
    setenv("SBX_PLUGIN_HOST", saved, 1);
    free(saved);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "/nonexistent/sbx-plugin-host",
                    "SBX_PLUGIN_MODE=inprocess", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/nonexistent/sbx-plugin-host");
    sbx_error_free(err);
}

Test(plugin_host, loader_errors_travel_field_by_field)
{
    sbx_error *in = NULL, *out = NULL;
    cr_assert_null(sbx_client_new_with_mode("badabi", SBX_PLUGIN_MODE_IN_PROCESS, &in));
    cr_assert_null(sbx_client_new_with_mode("badabi", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &out));
    cr_assert_eq(sbx_error_get_code(out), sbx_error_get_code(in));
    cr_assert_eq(sbx_error_get_code(out), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(out), sbx_error_get0_message(in));
    cr_assert_str_eq(sbx_error_get0_backend(out), "badabi");
    cr_assert_str_eq(sbx_error_get0_op(out), sbx_error_get0_op(in));
    cr_assert_str_eq(sbx_error_get0_context(out, "path"), sbx_error_get0_context(in, "path"));
    cr_assert_eq(sbx_error_get_outcome(out), sbx_error_get_outcome(in));
    sbx_error_free(in);
    sbx_error_free(out);
    out = NULL;

    /* A missing backend is reported without starting a host. */
    cr_assert_null(sbx_client_new_with_mode("nosuchbackend", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &out));
    tu_assert_error(out, SBX_ERROR_BACKEND_NOT_INSTALLED, "libsbx-nosuchbackend.so", NULL);
    sbx_error_free(out);
}

/* @text with every @id replaced by "ID" (new string). */
static char *without_id(const char *text, const char *id)
{
    size_t n = strlen(id);
    char *out = calloc(1, strlen(text) + 1), *o = out;
    for (const char *p = text; *p;) {
        if (n && strncmp(p, id, n) == 0) {
            o = stpcpy(o, "ID");
            p += n;
        } else {
            *o++ = *p++;
        }
    }
    return out;
}

Test(plugin_host, plugin_errors_keep_code_outcome_and_context)
{
    sbx_error *in_err = NULL, *out_err = NULL;
    char *ids[2] = { NULL, NULL };
    for (int mode = 0; mode < 2; mode++) {
        sbx_client *c = sbx_client_new_with_mode(
            "local", mode ? SBX_PLUGIN_MODE_OUT_OF_PROCESS : SBX_PLUGIN_MODE_IN_PROCESS,
            &in_err);
        cr_assert_not_null(c);
        sbx_sandbox *sb = tu_create(c, NULL);
        sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
        const char *argv[] = { "true", NULL };
        rq.argv = argv;
        rq.cwd = "/no/such/dir";
        sbx_error **e = mode ? &out_err : &in_err;
        ids[mode] = strdup(sbx_sandbox_get0_id(sb));
        cr_assert_null(sbx_sandbox_execute_command(sb, &rq, e));
        cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
        sbx_sandbox_free(sb);
        sbx_client_free(c);
    }
    cr_assert_eq(sbx_error_get_code(out_err), SBX_ERROR_NOT_FOUND);
    char *ra = sbx_error_to_string(in_err), *rb = sbx_error_to_string(out_err);
    char *a = without_id(ra, ids[0]), *b = without_id(rb, ids[1]);
    cr_assert_str_eq(b, a);
    cr_assert_str_eq(b, "working directory \"/no/such/dir\" does not exist in sandbox ID "
                        "[code=not_found; backend=local; op=exec; path=/no/such/dir]");
    free(ra);
    free(rb);
    free(ids[0]);
    free(ids[1]);
    cr_assert_eq(sbx_error_get_outcome(out_err), sbx_error_get_outcome(in_err));
    cr_assert_str_eq(sbx_error_get0_context(out_err, "path"), "/no/such/dir");
    free(a);
    free(b);
    sbx_error_free(in_err);
    sbx_error_free(out_err);
}

/* ------------------------------------------------------------------ crashes */

/* An exec that runs for 20 s on @sb in a thread of its own; it makes the
 * file @mark in the sandbox's root once running. */
typedef struct long_exec {
    sbx_sandbox *sb;
    const char *mark;
    sbx_result *result;
    sbx_error *error;
} long_exec;

static void *long_exec_main(void *arg)
{
    long_exec *le = arg;
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    char *script = tu_strdup_printf("touch \"$SANDBOX_ROOT/%s\"; exec sleep 20", le->mark);
    rq.shell = script;
    le->result = sbx_sandbox_execute_command(le->sb, &rq, &le->error);
    free(script);
    return NULL;
}

/* Waits up to 10 s for @le's mark in @root, then removes it: 1 when it
 * came, else 0. */
static int long_exec_started(const long_exec *le, const char *root)
{
    char *path = tu_strdup_printf("%s/%s", root, le->mark);
    double until = tu_now() + 10;
    while (!tu_exists(path) && tu_now() < until)
        usleep(2000);
    int ok = unlink(path) == 0;
    free(path);
    return ok;
}

Test(plugin_host, crash_in_a_slot_fails_calls_in_flight_and_the_next_call_reattaches)
{
    sbx_error *err = NULL;
    sbx_client *c = faulty_client();
    int host1 = sbx_client_get_host_pid(c);
    sbx_sandbox *a = tu_create(c, NULL), *b = tu_create(c, NULL);
    const char *root_a = sbx_sandbox_get0_root(a);
    cr_assert_eq(sbx_sandbox_write_file(a, "/kept.txt", "kept\n", 5, &err), 0);

    /* A call in flight on sandbox a while the plugin crashes in b's exec. */
    long_exec le = { .sb = a, .mark = "started" };
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, long_exec_main, &le), 0);
    cr_assert(long_exec_started(&le, root_a), "the long exec did not start");

    const char *crash[] = { "sbx-fault-crash", NULL };
    cr_assert_null(run_argv(b, crash, &err));
    tu_assert_error(err, SBX_ERROR_CONNECTION, "plugin host", "faulty",
                    "killed by signal 11 (SIGSEGV)", NULL);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    cr_assert_str_eq(sbx_error_get0_backend(err), "faulty");
    sbx_error_clear(&err);

    /* The call in flight failed the same way, long before its 20 s. */
    pthread_join(t, NULL);
    cr_assert_null(le.result, "the exec in flight did not fail");
    tu_assert_error(le.error, SBX_ERROR_CONNECTION, "SIGSEGV", NULL);
    cr_assert_eq(sbx_error_is_retryable(le.error), 1);
    sbx_error_free(le.error);
    cr_assert(tu_pid_gone((pid_t)host1));
    cr_assert_eq(sbx_client_get_host_pid(c), 0);

    /* The next call starts a new host; both sandboxes were reattached from
     * their session state, files and all. */
    expect_echo(a, "again");
    int host2 = sbx_client_get_host_pid(c);
    cr_assert(host2 > 0 && host2 != host1, "host %d after crash of %d", host2, host1);
    expect_echo(b, "b-again");
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(a, "/kept.txt", &data, &len, &err), 0);
    tu_assert_bytes("kept.txt", data, len, "kept\n", 5);
    free(data);
    cr_assert_eq(sbx_sandbox_is_alive(a, &err), 1);

    /* Nothing the plugin started outlives destroy: a background process
     * started after the reattach dies with its sandbox. */
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "sleep 60 >/dev/null 2>&1 & echo $!";
    sbx_result *r = tu_exec(a, &rq);
    pid_t bg = (pid_t)strtol(sbx_result_get0_stdout(r, NULL), NULL, 10);
    sbx_result_free(r);
    cr_assert(bg > 1 && !tu_pid_gone(bg), "background sleep %d not running", (int)bg);
    cr_assert_eq(sbx_sandbox_destroy(a, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_destroy(b, &err), 0);
    cr_assert(tu_wait_pid_gone(bg, 5.0), "%s survived destroy", tu_proc_describe(bg));
    cr_assert_eq(tu_exists(root_a), 0, "root of a survived destroy");
    /* Destroy returns once every process of the sandbox is dead; the
     * supervisor exits after it answered (it removes the trash first):
     * bounded by the 5 s every end of a sandbox has. */
    pid_t after[4];
    size_t nafter = tu_wait_procs_gone(g_tmp, after, 4, 5.0);
    cr_assert_eq(nafter, 0, "a process of the sandboxes survived: %s",
                 nafter ? tu_proc_describe(after[0]) : "");
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);
    sbx_client_free(c);
    cr_assert(tu_pid_gone((pid_t)host2));
}

/* Eight execs in flight when the host is SIGKILLed all fail, and none of
 * them starts a new host on its way out: a call on a process never does
 * (the process lived on the dead host). Were one to, it would reattach
 * every sandbox to a host the application never asked for, which would
 * then destroy the attached ones when the application ends. Three rounds,
 * each ended by the kill and begun by a call that restarts the host. */
Test(plugin_host, execs_in_flight_at_a_host_kill_start_no_new_host)
{
    enum { N = 8, ROUNDS = 3 };
    sbx_error *err = NULL;
    sbx_client *c = faulty_client();
    sbx_sandbox *sb = tu_create(c, NULL);
    const char *root = sbx_sandbox_get0_root(sb);

    for (int round = 0; round < ROUNDS; round++) {
        if (round > 0)
            expect_echo(sb, "restarted");   /* the call that starts the next host */
        int host = sbx_client_get_host_pid(c);
        cr_assert(host > 0, "round %d: no host", round);
        static const char *const marks[N] = { "in-0", "in-1", "in-2", "in-3",
                                              "in-4", "in-5", "in-6", "in-7" };
        long_exec f[N];
        pthread_t t[N];
        for (int i = 0; i < N; i++) {
            f[i] = (long_exec){ .sb = sb, .mark = marks[i] };
            cr_assert_eq(pthread_create(&t[i], NULL, long_exec_main, &f[i]), 0);
        }
        for (int i = 0; i < N; i++)
            cr_assert(long_exec_started(&f[i], root), "round %d: exec %d did not start", round, i);
        /* Killed from outside, with no call in flight: the execs' threads
         * find out together (their wait on the process wakes at the host's
         * hang-up), and each then asks about its process. */
        cr_assert_eq(kill((pid_t)host, SIGKILL), 0);
        for (int i = 0; i < N; i++) {
            pthread_join(t[i], NULL);
            cr_assert_null(f[i].result, "round %d: exec %d did not fail", round, i);
            tu_assert_error(f[i].error, SBX_ERROR_CONNECTION, NULL);
            sbx_error_free(f[i].error);
        }
        cr_assert(tu_pid_gone((pid_t)host), "round %d: host %d lives on", round, host);
        cr_assert_eq(sbx_client_get_host_pid(c), 0,
                     "round %d: a call on a process of the crashed host %d started host %d",
                     round, host, sbx_client_get_host_pid(c));
    }
    expect_echo(sb, "last");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* A plugin error without a code, or no error at all, reaches the
 * application with the code of the slot (exec_start: execution_failed),
 * never `unknown`, in both plugin modes. */
Test(plugin_host, a_plugin_error_without_a_code_is_never_unknown)
{
    const sbx_plugin_mode modes[] = { SBX_PLUGIN_MODE_OUT_OF_PROCESS, SBX_PLUGIN_MODE_IN_PROCESS };
    for (int m = 0; m < 2; m++) {
        sbx_error *err = NULL;
        sbx_client *c = sbx_client_new_with_mode("faulty", modes[m], &err);
        cr_assert_not_null(c, "client: %s", err ? sbx_error_get0_message(err) : "");
        sbx_sandbox *sb = tu_create(c, NULL);

        const char *unknown[] = { "sbx-fault-unknown", NULL };
        cr_assert_null(run_argv(sb, unknown, &err));
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_EXECUTION_FAILED, "mode %d: %s: %s", m,
                     sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
        cr_assert_str_eq(sbx_error_get0_message(err), "a failure without a code (fault plugin)");
        cr_assert_str_eq(sbx_error_get0_backend(err), "faulty");
        sbx_error_clear(&err);

        const char *silent[] = { "sbx-fault-silent", NULL };
        cr_assert_null(run_argv(sb, silent, &err));
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_EXECUTION_FAILED, "mode %d: %s: %s", m,
                     sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
        cr_assert_str_eq(sbx_error_get0_message(err),
                         "backend \"faulty\": exec_start failed without reporting an error");
        sbx_error_clear(&err);

        expect_echo(sb, "still-usable");
        cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
        sbx_sandbox_free(sb);
        sbx_client_free(c);
    }
}

Test(plugin_host, crash_in_init_is_a_retryable_connection_error)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_client_new_with_mode("crashinit", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err));
    tu_assert_error(err, SBX_ERROR_CONNECTION, "crashinit", "killed by signal 11 (SIGSEGV)",
                    "before it was ready", NULL);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    sbx_error_free(err);

    /* The listing inspects each plugin in a helper process: crashinit is
     * listed with the signal, the rest as usual. */
    sbx_backend_info **list = NULL;
    size_t count = 0;
    cr_assert_eq(sbx_backends_list(&list, &count, &err), 0);
    int seen_crash = 0, seen_local = 0;
    for (size_t i = 0; i < count; i++) {
        const char *name = sbx_backend_info_get0_name(list[i]);
        const char *problem = sbx_backend_info_get0_problem(list[i]);
        if (strcmp(name, "crashinit") == 0) {
            seen_crash = 1;
            cr_assert_str_eq(problem, "crashed while loading in a helper process "
                                      "(killed by signal 11 (SIGSEGV))");
            cr_assert_eq(sbx_backend_info_get_caps(list[i]), 0);
        }
        if (strcmp(name, "local") == 0) {
            seen_local = 1;
            cr_assert_null(problem);
            cr_assert_str_eq(sbx_backend_info_get0_version(list[i]), sbx_version());
        }
    }
    cr_assert(seen_crash && seen_local);
    sbx_backend_info_list_free(list, count);
}

/* ------------------------------------------------------------------ deadlines */

Test(plugin_host, a_call_past_its_deadline_is_cancelled_and_the_host_kept)
{
    sbx_error *err = NULL;
    sbx_client *c = faulty_client();
    sbx_sandbox *sb = tu_create(c, NULL);
    int host = sbx_client_get_host_pid(c);
    cr_assert_eq(sbx_client_set_call_timeout(c, 0.5, &err), 0);
    const char *slow[] = { "sbx-fault-slow", NULL };
    cr_assert_null(run_argv(sb, slow, &err));
    /* The plugin saw its cancel descriptor fire and answered: its own
     * timeout error comes back, and the host lives on. */
    tu_assert_error(err, SBX_ERROR_TIMEOUT, "call cancelled (fault plugin)", NULL);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_client_get_host_pid(c), host);
    cr_assert(host_alive(host));
    expect_echo(sb, "same-host");
    cr_assert_eq(sbx_client_get_host_pid(c), host);

    cr_assert_eq(sbx_client_set_call_timeout(c, -1, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "-1", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

Test(plugin_host, an_unacknowledged_cancel_kills_the_host)
{
    sbx_error *err = NULL;
    sbx_client *c = faulty_client();
    sbx_sandbox *sb = tu_create(c, NULL);
    int host = sbx_client_get_host_pid(c);
    cr_assert_eq(sbx_client_set_call_timeout(c, 0.5, &err), 0);
    const char *hang[] = { "sbx-fault-hang", NULL };
    cr_assert_null(run_argv(sb, hang, &err));
    tu_assert_error(err, SBX_ERROR_TIMEOUT, "did not acknowledge a cancel", "killed", NULL);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    sbx_error_clear(&err);
    cr_assert(tu_wait_pid_gone((pid_t)host, 5.0), "the hung host %d still runs", host);

    /* The next call starts a new host with the sandbox reattached. */
    cr_assert_eq(sbx_client_set_call_timeout(c, 0, &err), 0);
    expect_echo(sb, "after-kill");
    int host2 = sbx_client_get_host_pid(c);
    cr_assert(host2 > 0 && host2 != host);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* ------------------------------------------------------------------ resume */

Test(plugin_host, a_sandbox_resumed_in_the_other_mode)
{
    sbx_error *err = NULL;
    sbx_client *oop = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    sbx_client *inp = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_IN_PROCESS, &err);
    cr_assert(oop && inp);
    sbx_sandbox *sb = tu_create(oop, NULL);
    cr_assert_eq(sbx_sandbox_write_file(sb, "/x", "1", 1, &err), 0);
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state);
    sbx_sandbox *again = sbx_sandbox_resume(inp, state, &err);
    cr_assert_not_null(again, "resume: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(sbx_sandbox_get0_id(again), sbx_sandbox_get0_id(sb));
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "cat \"$SANDBOX_ROOT/x\"";
    sbx_result *r = tu_exec(again, &rq);
    tu_assert_stdout(r, "1");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(again, &err), 0);
    cr_assert_eq(sbx_sandbox_is_alive(sb, &err), 0);
    sbx_sandbox_free(again);
    sbx_sandbox_free(sb);
    sbx_client_free(inp);
    sbx_client_free(oop);
    free(state);
}

/* ------------------------------------------------------------------ wire */

/* The frame header of host/wire.h, written here by hand so the test checks
 * the documented layout, not the code that makes it. */
struct frame_header {
    uint32_t magic, type, slot, body_len;
    uint64_t call_id;
};

static void put32(char **p, uint32_t v)
{
    memcpy(*p, &v, 4);
    *p += 4;
}

static uint32_t get32(const char **p)
{
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

/* Starts `sbx-plugin-host --serve 3` on a socketpair; returns our end. */
/* Starts the plugin host on one end of a socket pair and returns the other;
 * its stderr goes to a pipe whose read end is *@err when @err is not NULL. */
static int start_raw_host_err(pid_t *pid, int *err)
{
    int sv[2], ep[2] = { -1, -1 };
    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    if (err)
        cr_assert_eq(pipe2(ep, O_CLOEXEC), 0);
    *pid = fork();
    cr_assert(*pid >= 0);
    if (*pid == 0) {
        dup2(sv[1], 3);
        if (err)
            dup2(ep[1], 2);
        execl(getenv("SBX_PLUGIN_HOST"), "sbx-plugin-host", "--serve", "3", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    if (err) {
        close(ep[1]);
        *err = ep[0];
    }
    return sv[0];
}

static int start_raw_host(pid_t *pid)
{
    return start_raw_host_err(pid, NULL);
}

/* An application that goes before its HELLO (killed while starting its
 * host): the host ends with status 1 and writes nothing on the terminal it
 * shares with the application. */
Test(plugin_host, an_application_gone_before_hello_ends_the_host_quietly)
{
    pid_t pid;
    int err;
    int sock = start_raw_host_err(&pid, &err);
    close(sock);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
    char buf[256];
    ssize_t n = read(err, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    cr_assert_eq(n, 0, "the host wrote \"%s\"", buf);
    close(err);
}

Test(plugin_host, the_wire_opens_with_its_own_version_exchange)
{
    pid_t pid;
    int sock = start_raw_host(&pid);
    char frame[256], *p = frame + sizeof(struct frame_header);
    /* HELLO: this side speaks wire versions 10 to 12 only. */
    put32(&p, 10);
    put32(&p, 12);
    put32(&p, 5);
    memcpy(p, "local", 6);
    p += 6;
    struct frame_header h = { 0x57584253u, 1, 0, (uint32_t)(p - frame - sizeof h), 0 };
    memcpy(frame, &h, sizeof h);
    cr_assert_eq(send(sock, frame, (size_t)(p - frame), 0), p - frame);

    char in[4096];
    ssize_t n = recv(sock, in, sizeof in, 0);
    cr_assert(n > (ssize_t)sizeof h, "no WELCOME (%zd bytes)", n);
    memcpy(&h, in, sizeof h);
    cr_assert_eq(h.magic, 0x57584253u);
    cr_assert_eq(h.type, 2u, "frame type %u is not WELCOME", h.type);
    const char *q = in + sizeof h;
    cr_assert_eq(get32(&q), 0u, "a version was chosen");
    cr_assert_eq(get32(&q), (uint32_t)pid);
    cr_assert_eq(get32(&q), 0u, "the plugin was loaded anyway");
    cr_assert_eq(get32(&q), 1u, "no error follows");
    cr_assert_eq(get32(&q), (uint32_t)SBX_ERROR_CONFIGURATION);
    get32(&q); /* outcome */
    for (int i = 0; i < 2; i++) { /* backend, op: empty strings or NULL */
        uint32_t l = get32(&q);
        if (l != 0xffffffffu)
            q += l + 1;
    }
    uint32_t len = get32(&q);
    cr_assert_str_eq(q, "wire protocol mismatch: libsbx speaks versions 10 to 12, "
                        "sbx-plugin-host speaks 9 to 9");
    cr_assert_eq(strlen(q), len);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    close(sock);
}

Test(plugin_host, a_frame_that_is_not_ours_ends_the_host)
{
    pid_t pid;
    int sock = start_raw_host(&pid);
    cr_assert_eq(send(sock, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
    char buf[16];
    cr_assert_eq(recv(sock, buf, sizeof buf, 0), 0, "the host answered");
    close(sock);
}

/* ------------------------------------------------------------------ threads */

typedef struct shared_use {
    sbx_sandbox *sb;
    const char *dir;
    int index;
    int failures;
} shared_use;

static void *download_many(void *arg)
{
    shared_use *u = arg;
    for (int i = 0; i < 20; i++) {
        char *dest = tu_strdup_printf("%s/copy-%d-%d", u->dir, u->index, i);
        sbx_error *err = NULL;
        /* download_file asks stat_file first: its name is a string the
         * plugin returns borrowed, on a sandbox all threads share. */
        if (sbx_sandbox_download_file(u->sb, "/shared.txt", dest, &err) != 0) {
            u->failures++;
            sbx_error_free(err);
        } else {
            char buf[64] = "";
            FILE *f = fopen(dest, "r");
            size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            if (n != 7 || memcmp(buf, "shared\n", 7) != 0)
                u->failures++;
            unlink(dest);
        }
        free(dest);
    }
    return NULL;
}

Test(plugin_host, threads_share_a_sandbox)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c);
    sbx_sandbox *sb = tu_create(c, NULL);
    cr_assert_eq(sbx_sandbox_write_file(sb, "/shared.txt", "shared\n", 7, &err), 0);
    char *dir = tu_mkdtemp("copies");
    shared_use u[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        u[i] = (shared_use){ .sb = sb, .dir = dir, .index = i };
        cr_assert_eq(pthread_create(&t[i], NULL, download_many, &u[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(u[i].failures, 0, "thread %d: %d of 20 downloads failed", i, u[i].failures);
    }
    cr_assert_eq(tu_count_entries(dir), 0);
    tu_rmtree(dir);
    free(dir);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

typedef struct racer {
    sbx_client *client;
    sbx_sandbox *made;
    sbx_error *error;
} racer;

static void *create_one(void *arg)
{
    racer *r = arg;
    r->made = sbx_sandbox_create(r->client, NULL, &r->error);
    return NULL;
}

Test(plugin_host, calls_racing_a_restart_all_get_the_new_host)
{
    sbx_error *err = NULL;
    sbx_client *c = faulty_client();
    sbx_sandbox *sb = tu_create(c, NULL);
    const char *crash[] = { "sbx-fault-crash", NULL };
    cr_assert_null(run_argv(sb, crash, &err));
    sbx_error_clear(&err);
    /* Four creates race to restart the host; one does, the others wait for
     * it (and for the reattach) instead of using a half-started host. */
    racer r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){ .client = c };
        cr_assert_eq(pthread_create(&t[i], NULL, create_one, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    int host = sbx_client_get_host_pid(c);
    cr_assert(host > 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(r[i].made, "create %d: %s", i,
                           r[i].error ? sbx_error_get0_message(r[i].error) : "");
        expect_echo(r[i].made, "raced");
        cr_assert_eq(sbx_sandbox_destroy(r[i].made, &err), 0);
        sbx_sandbox_free(r[i].made);
    }
    expect_echo(sb, "reattached");
    cr_assert_eq(sbx_client_get_host_pid(c), host);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* ------------------------------------------------------------------ idle threads */

typedef struct sleeper {
    sbx_sandbox *sb;
    const char *secs;
    sbx_result *result;
    sbx_error *error;
} sleeper;

static void *run_sleep(void *arg)
{
    sleeper *s = arg;
    const char *argv[] = { "sh", "-c", "sleep \"$0\" && echo slept", s->secs, NULL };
    s->result = run_argv(s->sb, argv, &s->error);
    return NULL;
}

/* Runs @n `sleep @secs` calls at once on @sb; each must print "slept". */
static void sleep_together(sbx_sandbox *sb, int n, const char *secs, int round)
{
    sleeper s[4];
    pthread_t t[4];
    for (int i = 0; i < n; i++) {
        s[i] = (sleeper){ .sb = sb, .secs = secs };
        cr_assert_eq(pthread_create(&t[i], NULL, run_sleep, &s[i]), 0);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        cr_assert_not_null(s[i].result, "round %d, call %d of %d: %s", round, i, n,
                           s[i].error ? sbx_error_get0_message(s[i].error) : "");
        tu_assert_stdout(s[i].result, "slept\n");
        tu_assert_exit(s[i].result, 0);
        sbx_result_free(s[i].result);
    }
}

/* The pool grows to five threads, then idles down to two while a call is
 * in flight (SBX_PLUGIN_HOST_IDLE_MS=50): whichever threads retire, the
 * main thread among them or not, the host keeps answering with the same
 * pid and ends only when the client is freed. */
Test(plugin_host, idle_threads_retire_while_a_call_runs_and_the_host_stays)
{
    sbx_error *err = NULL;
    cr_assert_eq(setenv("SBX_PLUGIN_HOST_IDLE_MS", "50", 1), 0);
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c);
    sbx_sandbox *sb = tu_create(c, NULL);
    int host = sbx_client_get_host_pid(c);
    cr_assert(host > 0);
    for (int round = 0; round < 6; round++) {
        sleep_together(sb, 4, "0.3", round);
        /* One call in flight for 0.6 s: the idle threads time out meanwhile. */
        sleep_together(sb, 1, "0.6", round);
        cr_assert_eq(sbx_client_get_host_pid(c), host, "round %d: the host was restarted", round);
        cr_assert(host_alive(host), "round %d: host %d is gone", round, host);
    }
    expect_echo(sb, "still-here");
    cr_assert_eq(sbx_client_get_host_pid(c), host);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    cr_assert(host_alive(host), "host %d ended before its client was freed", host);
    sbx_client_free(c);
    cr_assert(tu_pid_gone((pid_t)host));
    unsetenv("SBX_PLUGIN_HOST_IDLE_MS");
}

/* ------------------------------------------------------------------ sizes, descriptors */

Test(plugin_host, arguments_larger_than_a_packet)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c);
    sbx_sandbox *sb = tu_create(c, NULL);
    /* 700 000 bytes of arguments: far more than one socket packet holds
     * (the frame's body travels in a memfd); ten arguments, each below the
     * kernel's limit for one argument string. */
    const char *argv[15] = { "sh", "-c", "n=0; for a; do n=$((n + ${#a})); done; echo $n", "sh" };
    char *big[10];
    for (int i = 0; i < 10; i++) {
        big[i] = malloc(70001);
        memset(big[i], 'a' + i, 70000);
        big[i][70000] = '\0';
        argv[4 + i] = big[i];
    }
    argv[14] = NULL;
    sbx_result *r = run_argv(sb, argv, &err);
    cr_assert_not_null(r, "exec: %s", err ? sbx_error_get0_message(err) : "");
    tu_assert_stdout(r, "700000\n");
    sbx_result_free(r);
    for (int i = 0; i < 10; i++)
        free(big[i]);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

Test(plugin_host, the_host_inherits_none_of_the_applications_descriptors)
{
    int p[2];
    cr_assert_eq(pipe(p), 0); /* deliberately without close-on-exec */
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c);
    int host = sbx_client_get_host_pid(c);
    close(p[1]);
    /* Only the host could still hold the write end. */
    char b;
    cr_assert_eq(read(p[0], &b, 1), 0, "the pipe did not reach EOF: the host %d holds it", host);
    close(p[0]);
    sbx_client_free(c);
}

Test(plugin_host, a_plugin_that_hangs_while_loading_is_killed)
{
    char *marker = tu_strdup_printf("%s/hang-init", g_tmp);
    setenv("SBX_FAULT_HANG_INIT", marker, 1); /* the host inherits it */
    sbx_error *err = NULL;
    sbx_client *c = faulty_client();
    sbx_sandbox *sb = tu_create(c, NULL);
    cr_assert_eq(sbx_client_set_call_timeout(c, 1.0, &err), 0);
    int host = sbx_client_get_host_pid(c);

    /* The next host hangs in sbx_plugin_init: the restart gives up after
     * the call timeout and kills it. */
    tu_write_file(marker, "", 0, 0644);
    const char *crash[] = { "sbx-fault-crash", NULL };
    cr_assert_null(run_argv(sb, crash, &err));
    tu_assert_error(err, SBX_ERROR_CONNECTION, "SIGSEGV", NULL);
    sbx_error_clear(&err);
    double t0 = tu_now();
    const char *argv[] = { "true", NULL };
    cr_assert_null(run_argv(sb, argv, &err));
    tu_assert_error(err, SBX_ERROR_TIMEOUT, "did not finish loading the plugin within 1 s",
                    "was killed", NULL);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    sbx_error_clear(&err);
    cr_assert(tu_now() - t0 < 10.0, "the restart waited %.1f s", tu_now() - t0);
    cr_assert_eq(sbx_client_get_host_pid(c), 0);

    /* Loading works again: the next call starts a host that reattaches. */
    unlink(marker);
    expect_echo(sb, "loaded");
    cr_assert(sbx_client_get_host_pid(c) > 0 && sbx_client_get_host_pid(c) != host);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    unsetenv("SBX_FAULT_HANG_INIT");
    free(marker);
}
