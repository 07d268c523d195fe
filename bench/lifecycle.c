/*
 * bench/lifecycle: what a sandbox's life costs against spawning the same
 * code raw, in one run.
 *
 * Rows, each measured ROUNDS times, interleaved so that every row sees the
 * same machine load:
 *  - raw: posix_spawn of the interpreter execute_code('print(1)') runs in
 *    the sandbox (found once with `command -v python3` there), stdout read
 *    through a pipe, waitpid;
 *  - cycle: create + execute_code('python', 'print(1)') + destroy on one
 *    client, out of process and in process; and through sbx_create() (the
 *    process's shared client) out of process;
 *  - sbx_create back to back: another sbx_create() cycle started as soon as
 *    the one before returned from destroy (a loop over one client with
 *    nothing between: its create waits for the fill that destroy's answer
 *    started, the hand-over of the warm supervisor the client's spawner
 *    kept ready, while the spawner makes the next one; on bubblewrap it
 *    takes the second of the client's two warm sandboxes while the fill
 *    makes another);
 *  - create-only, exec-only (the execute_code on the fresh sandbox) and
 *    destroy-only times of the cycle, per mode, the exec's against raw;
 *  - destroy with 1,000 other live processes on the host (children of this
 *    program, each `sleep 600` that also dies with this program through
 *    PR_SET_PDEATHSIG; all of them are checked to run before the row and
 *    killed by pid after it) against destroy with none, measured before
 *    and again after that row, each in a loop of its own.
 *
 * Within a round, raw and the three cycles (sbx_create's with its back-to-
 * back one right after it) run in one of four orders, a Williams square:
 * over four rounds each comes right after each other one once. Each starts
 * SETTLE ms after the one before ended. A destroy's answer starts that
 * client's next fill (forks and directory work on the temporary directory,
 * about 1 ms on a quiet machine); a create on another client that starts
 * while it runs takes 0.1 to 0.5 ms longer on a 2-core machine. With
 * one fixed order and no pause the sbx_create row always followed the
 * in-process row's destroy and paid that, and the out-of-process row
 * (after the raw spawn) never did. Each client is used once a round (the
 * shared one twice: its back-to-back cycle), so that no row's client is
 * warmer than another's. A program using one client never meets another
 * client's fill; its own is in the back-to-back row.
 * Printed: the medians (p50) in ms, the ratios cycle / raw, loaded destroy
 * / plain destroy, the supervisor's context switches per cycle (its
 * voluntary + involuntary switches from /proc, read just before destroy:
 * the wake-ups of create and one exec; local and bubblewrap only), and the
 * caller's own voluntary context switches per in-process cycle (each one a
 * sleep of create, the exec or destroy: waits on the supervisor, and any
 * fixed sleep the library still has).
 *
 * PATH is set to the standard list (/usr/local/sbin:...:/bin) first, so
 * that the sandbox and the raw side run the system's python3, not a
 * per-user shim that costs more than everything measured here.
 *
 * Usage: lifecycle [-r ROUNDS] [-b BACKEND] [-p OTHER_PROCESSES] [-s SETTLE_MS]
 *        (default 30, local, 1000, 2)
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <sbx/sbx.h>

#include "bench.h"

extern char **environ;

static const char *g_backend = "local";

/* The other processes of the loaded destroy row, killed on any exit. */
static pid_t *g_kids;
static int g_nkids;

static void kill_kids(void)
{
    for (int i = 0; i < g_nkids; i++)
        kill(g_kids[i], SIGKILL);
    for (int i = 0; i < g_nkids; i++)
        while (waitpid(g_kids[i], NULL, 0) < 0 && errno == EINTR)
            ;
    g_nkids = 0;
}

static void die(const char *what, const sbx_error *err)
{
    kill_kids();
    fprintf(stderr, "lifecycle: %s: %s\n", what, err ? sbx_error_get0_message(err) : "failed");
    exit(1);
}

/* Raw: spawn @python -c 'print(1)', read its output, reap it. */
static double raw_once(const char *python)
{
    int p[2];
    if (pipe(p) < 0)
        die("pipe", NULL);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    char *argv[] = { (char *)python, "-c", "print(1)", NULL };
    double t0 = now_ms();
    pid_t pid;
    if (posix_spawn(&pid, python, &fa, NULL, argv, environ) != 0)
        die("posix_spawn", NULL);
    close(p[1]);
    char buf[16];
    ssize_t n, got = 0;
    while ((n = read(p[0], buf + got, sizeof buf - (size_t)got)) > 0)
        got += n;
    int status;
    waitpid(pid, &status, 0);
    double t = now_ms() - t0;
    close(p[0]);
    posix_spawn_file_actions_destroy(&fa);
    if (got != 2 || memcmp(buf, "1\n", 2) != 0)
        die("raw python printed something else", NULL);
    return t;
}

/* The supervisor pid in a local sandbox's session state; 0 when none. */
static long supervisor_pid(sbx_sandbox *sb)
{
    char *state = sbx_sandbox_session_state(sb, NULL);
    const char *p = state ? strstr(state, "\"supervisor_pid\":") : NULL;
    long pid = p ? strtol(p + 17, NULL, 10) : 0;
    free(state);
    return pid;
}

/* voluntary + nonvoluntary context switches of @pid; -1 when unreadable. */
static long ctxt_switches(long pid)
{
    char path[64], line[256];
    long total = 0;
    int seen = 0;
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "ctxt_switches:")) {
            total += strtol(strchr(line, ':') + 1, NULL, 10);
            seen++;
        }
    fclose(f);
    return seen == 2 ? total : -1;
}

/* The caller's voluntary context switches so far (all its threads). */
static long own_sleeps(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_nvcsw : 0;
}

/* The cycle rows: out of process, in process, sbx_create, sbx_create back
 * to back. */
#define NROWS 4

typedef struct cycle_times {
    double create, exec, destroy, total;
    long switches;
    long sleeps;
} cycle_times;

/* One create + execute_code + destroy on @client (NULL: sbx_create). */
static cycle_times cycle_once(sbx_client *client)
{
    cycle_times t = { 0 };
    sbx_error *err = NULL;
    long s0 = own_sleeps();
    double t0 = now_ms();
    sbx_sandbox *sb = client ? sbx_sandbox_create(client, NULL, &err)
                             : sbx_create(g_backend, NULL, &err);
    if (!sb)
        die("create", err);
    double t1 = now_ms();
    sbx_result *r = sbx_sandbox_execute_code(sb, "python", "print(1)", NULL, &err);
    if (!r || sbx_result_get_exit_code(r) != 0)
        die("execute_code", err);
    size_t len;
    const char *out = sbx_result_get0_stdout(r, &len);
    if (len != 2 || memcmp(out, "1\n", 2) != 0)
        die("execute_code printed something else", NULL);
    sbx_result_free(r);
    double t2 = now_ms();
    long sup = supervisor_pid(sb);
    t.switches = sup > 0 ? ctxt_switches(sup) : -1;
    double t3 = now_ms();
    if (sbx_sandbox_destroy(sb, &err) != 0)
        die("destroy", err);
    double t4 = now_ms();
    t.sleeps = own_sleeps() - s0;
    sbx_sandbox_free(sb);
    t.create = t1 - t0;
    t.exec = t2 - t1;
    t.destroy = t4 - t3;
    t.total = (t1 - t0) + (t2 - t1) + (t4 - t3);
    return t;
}

/* Destroy time of a fresh sandbox on @client. */
static double destroy_once(sbx_client *client)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(client, NULL, &err);
    if (!sb)
        die("create", err);
    double t0 = now_ms();
    if (sbx_sandbox_destroy(sb, &err) != 0)
        die("destroy", err);
    double t = now_ms() - t0;
    sbx_sandbox_free(sb);
    return t;
}

int main(int argc, char **argv)
{
    int rounds = 30, others = 1000, settle = 2, opt;
    while ((opt = getopt(argc, argv, "r:b:p:s:")) != -1) {
        switch (opt) {
        case 'r': rounds = atoi(optarg); break;
        case 'b': g_backend = optarg; break;
        case 'p': others = atoi(optarg); break;
        case 's': settle = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: lifecycle [-r ROUNDS] [-b BACKEND] [-p OTHER_PROCESSES] "
                            "[-s SETTLE_MS]\n");
            return 2;
        }
    }
    if (rounds < 3 || rounds > 10000 || others < 0 || others > 20000 || settle < 0
        || settle > 1000) {
        fprintf(stderr, "lifecycle: -r must be 3..10000, -p 0..20000 and -s 0..1000\n");
        return 2;
    }
    /* Attached sandboxes are the default; the record lives under a
     * directory of this run, removed at the end. */
    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    char statedir[] = "/tmp/sbx-bench-lifecycle-XXXXXX";
    if (!mkdtemp(statedir))
        die("mkdtemp", NULL);
    setenv("SBX_STATE_DIR", statedir, 1);

    sbx_error *err = NULL;
    sbx_client *out = sbx_client_new_with_mode(g_backend, SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    if (!out)
        die("client (out of process)", err);
    sbx_client *in = sbx_client_new_with_mode(g_backend, SBX_PLUGIN_MODE_IN_PROCESS, &err);
    if (!in)
        die("client (in process)", err);

    /* The interpreter the sandbox runs. */
    sbx_sandbox *probe = sbx_sandbox_create(in, NULL, &err);
    if (!probe)
        die("create", err);
    sbx_result *r = sbx_sandbox_execute_shell(probe, "command -v python3", &err);
    if (!r || sbx_result_get_exit_code(r) != 0)
        die("command -v python3", err);
    char python[4096];
    size_t plen;
    const char *pout = sbx_result_get0_stdout(r, &plen);
    snprintf(python, sizeof python, "%.*s", (int)(plen && pout[plen - 1] == '\n' ? plen - 1 : plen),
             pout);
    sbx_result_free(r);
    sbx_sandbox_destroy(probe, NULL);
    sbx_sandbox_free(probe);

    double *raw = calloc((size_t)rounds, sizeof(double));
    double *tot[NROWS], *cre[NROWS], *exe[NROWS], *des[NROWS];
    double *dplain = calloc((size_t)rounds, sizeof(double));
    double *dloaded = calloc((size_t)rounds, sizeof(double));
    double *dafter = calloc((size_t)rounds, sizeof(double));
    long *sw = calloc((size_t)rounds, sizeof(long));
    long *sl = calloc((size_t)rounds, sizeof(long));
    for (int m = 0; m < NROWS; m++) {
        tot[m] = calloc((size_t)rounds, sizeof(double));
        cre[m] = calloc((size_t)rounds, sizeof(double));
        exe[m] = calloc((size_t)rounds, sizeof(double));
        des[m] = calloc((size_t)rounds, sizeof(double));
    }
    sbx_client *clients[NROWS] = { out, in, NULL, NULL };
    static const char *const names[NROWS] = { "out of process", "in process",
                                              "sbx_create (shared)", "sbx_create back to back" };
    /* The orders of a round: 0 raw, 1 out of process, 2 in process,
     * 3 sbx_create (its back-to-back cycle right after it). Over four
     * rounds each comes right after each other one once. */
    static const int orders[4][4] = {
        { 0, 1, 3, 2 }, { 1, 2, 0, 3 }, { 2, 3, 1, 0 }, { 3, 0, 2, 1 },
    };
    useconds_t pause = (useconds_t)settle * 1000;

    /* Warm-up: caches, the plugin host's threads. */
    for (int m = 0; m < NROWS; m++)
        cycle_once(clients[m]);
    raw_once(python);

    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < 4; k++) {
            int item = orders[i % 4][k];
            if (pause)
                usleep(pause);
            if (item == 0) {
                raw[i] = raw_once(python);
                continue;
            }
            for (int m = item - 1; m < (item == 3 ? NROWS : item); m++) {
                cycle_times t = cycle_once(clients[m]);
                tot[m][i] = t.total;
                cre[m][i] = t.create;
                exe[m][i] = t.exec;
                des[m][i] = t.destroy;
                if (m == 1) {
                    sw[i] = t.switches;
                    sl[i] = t.sleeps;
                }
            }
        }
    }

    /* Destroy alone, then the same destroys with many other processes on
     * the host, then alone again. */
    for (int i = 0; i < rounds; i++) {
        if (pause)
            usleep(pause);
        dplain[i] = destroy_once(out);
    }

    g_kids = calloc((size_t)others + 1, sizeof(pid_t));
    if (!g_kids)
        die("calloc", NULL);
    for (int i = 0; i < others; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork of the other processes", NULL);
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() == 1)
                _exit(0);
            execl("/bin/sleep", "sleep", "600", (char *)NULL);
            _exit(127);
        }
        g_kids[g_nkids++] = pid;
    }
    /* Every one of them is there, and has become `sleep`. */
    for (int i = 0; i < g_nkids; i++) {
        char path[64], comm[64] = "";
        snprintf(path, sizeof path, "/proc/%d/comm", (int)g_kids[i]);
        for (int tries = 0; tries < 5000; tries++) {
            FILE *f = fopen(path, "r");
            if (f) {
                if (!fgets(comm, sizeof comm, f))
                    comm[0] = '\0';
                fclose(f);
            }
            if (strcmp(comm, "sleep\n") == 0)
                break;
            usleep(1000);
        }
        if (strcmp(comm, "sleep\n") != 0)
            die("one of the other processes is not running sleep", NULL);
    }
    int nkids = g_nkids;
    for (int i = 0; i < rounds; i++)
        dloaded[i] = destroy_once(out);
    kill_kids();
    for (int i = 0; i < rounds; i++)
        dafter[i] = destroy_once(out);

    double raw50 = median(raw, rounds);
    printf("lifecycle on %s, %d rounds, %d ms between rows; raw = posix_spawn of %s -c "
           "'print(1)'\n", g_backend, rounds, settle, python);
    printf("%-24s %10s %10s %10s %10s %10s %10s\n", "", "cycle p50", "create", "exec",
           "destroy", "cycle/raw", "exec/raw");
    printf("%-24s %8.2fms %10s %8.2fms %10s %10s %10s\n", "raw spawn", raw50, "", raw50, "",
           "1.00", "1.00");
    for (int m = 0; m < NROWS; m++) {
        double c = median(tot[m], rounds), x = median(exe[m], rounds);
        printf("%-24s %8.2fms %8.2fms %8.2fms %8.2fms %10.2f %10.2f\n", names[m], c,
               median(cre[m], rounds), x, median(des[m], rounds), c / raw50, x / raw50);
    }
    double dp = median(dplain, rounds), dl = median(dloaded, rounds);
    double da = median(dafter, rounds);
    printf("destroy (out of process): %.2f ms alone, %.2f ms with %d other live processes, "
           "%.2f ms alone after (ratio loaded/alone %.2f)\n", dp, dl, nkids, da,
           dl / ((dp + da) / 2));
    long swsum = 0;
    int swn = 0;
    for (int i = 0; i < rounds; i++)
        if (sw[i] >= 0) {
            swsum += sw[i];
            swn++;
        }
    if (swn)
        printf("supervisor context switches per cycle (create + one exec): %.1f\n",
               (double)swsum / swn);
    long slsum = 0;
    for (int i = 0; i < rounds; i++)
        slsum += sl[i];
    printf("caller's voluntary context switches (sleeps) per in-process cycle: %.1f\n",
           (double)slsum / rounds);

    sbx_client_free(out);
    sbx_client_free(in);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", statedir);
    if (system(rm) != 0)
        fprintf(stderr, "lifecycle: could not remove %s\n", statedir);
    return 0;
}
