/*
 * bench/fanout: N sandboxes at once through the asynchronous API against
 * the same work done one after the other, in one run.
 *
 * Each sandbox goes create -> exec /bin/true -> destroy. The sequential
 * side calls the synchronous API in a loop; the asynchronous side submits
 * every create at once to an sbx_async pool from one thread and chains
 * execute_async and destroy_async from the callbacks, the main thread only
 * polling sbx_async_get_fd() and dispatching. Rounds alternate the two, so
 * both see the same machine load. Creates are sbx_create() /
 * sbx_create_async(), which use the process-wide client of the backend
 * (out of process one plugin host for all of them), or with -s
 * sbx_sandbox_create[_async]() on a client the bench makes.
 *
 * Output, per round: both wall times and the speed-up (sequential time /
 * asynchronous time); then the median speed-up, and memory:
 *  - application peak RSS per sandbox: the rise of this process's VmHWM
 *    (/proc/self/status) during the asynchronous side, reset before it
 *    through /proc/self/clear_refs, divided by N;
 *  - one supervisor's RSS and PSS (sbx-supervisor, the process a local
 *    sandbox keeps; /proc/PID/status and smaps_rollup), sampled on a live
 *    sandbox; and, out of process, the plugin host's of the bench's own
 *    client (without -s that client serves only the sandbox sampled).
 *
 * Usage: fanout [-s] [-n SANDBOXES] [-r ROUNDS] [-w WORKERS] [-b BACKEND]
 *        (default sbx_create's client, 100, 3, 0 = the pool's default,
 *        local)
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "bench.h"

static const char *g_backend = "local";
static sbx_client *g_client;  /* -s: the bench's client; NULL: sbx_create's */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const sbx_error *err)
{
    fprintf(stderr, "fanout: %s: %s\n", what, err ? sbx_error_get0_message(err) : "failed");
    exit(1);
}

/* A "Key:   N kB" line of /proc/@pid/@file, in KiB; -1 when absent. */
static long proc_kib(const char *pid, const char *file, const char *key)
{
    char path[320], line[256];
    size_t klen = strlen(key);
    long v = -1;
    snprintf(path, sizeof path, "/proc/%s/%s", pid, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtol(line + klen + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* ---------------------------------------------------------- sequential */

static const char *const true_argv[] = { "/bin/true", NULL };

static void one_sequential(void)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = g_client ? sbx_sandbox_create(g_client, NULL, &err)
                               : sbx_create(g_backend, NULL, &err);
    if (!sb)
        die("create", err);
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = true_argv;
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &err);
    if (!r || sbx_result_get_exit_code(r) != 0)
        die("exec /bin/true", err);
    sbx_result_free(r);
    if (sbx_sandbox_destroy(sb, &err) != 0)
        die("destroy", err);
    sbx_sandbox_free(sb);
}

static double run_sequential(int n)
{
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        one_sequential();
    return now_s() - t0;
}

/* ---------------------------------------------------------- asynchronous */

typedef struct fan {
    sbx_async *async;
    int finished;
    int failed;
} fan;

static void on_destroyed(sbx_op *op, void *ud)
{
    fan *f = ud;
    if (sbx_op_get_error(op))
        die("destroy_async", sbx_op_get_error(op));
    sbx_sandbox_free(sbx_op_get0_sandbox(op));
    f->finished++;
}

static void on_executed(sbx_op *op, void *ud)
{
    fan *f = ud;
    const sbx_result *r = sbx_op_get0_result(op);
    if (!r || sbx_result_get_exit_code(r) != 0)
        die("execute_async /bin/true", sbx_op_get_error(op));
    sbx_error *err = NULL;
    if (!sbx_sandbox_destroy_async(f->async, sbx_op_get0_sandbox(op), on_destroyed, f, &err))
        die("destroy_async", err);
}

static void on_created(sbx_op *op, void *ud)
{
    fan *f = ud;
    sbx_sandbox *sb = sbx_op_steal_sandbox(op);
    if (!sb)
        die("create_async", sbx_op_get_error(op));
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = true_argv;
    sbx_error *err = NULL;
    if (!sbx_sandbox_execute_async(f->async, sb, &rq, on_executed, f, &err))
        die("execute_async", err);
}

/* Runs the asynchronous side; stores the rise of VmHWM in *@peak_kib. */
static double run_async(int n, unsigned workers, long *peak_kib)
{
    sbx_error *err = NULL;
    /* Start from the current RSS: reset the high-water mark (Linux >= 4.0). */
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1)
            perror("fanout: clear_refs");
        close(fd);
    }
    long rss0 = proc_kib("self", "status", "VmRSS");
    long hwm0 = proc_kib("self", "status", "VmHWM");
    long base = hwm0 < rss0 ? hwm0 : rss0;

    double t0 = now_s();
    fan f = { 0 };
    f.async = sbx_async_new(workers, &err);
    if (!f.async)
        die("sbx_async_new", err);
    for (int i = 0; i < n; i++)
        if (!(g_client ? sbx_sandbox_create_async(f.async, g_client, NULL, on_created, &f, &err)
                       : sbx_create_async(f.async, g_backend, NULL, on_created, &f, &err)))
            die("create_async", err);
    while (f.finished < n) {
        struct pollfd p = { .fd = sbx_async_get_fd(f.async), .events = POLLIN };
        if (poll(&p, 1, -1) < 0 && errno != EINTR) {
            perror("fanout: poll");
            exit(1);
        }
        sbx_async_dispatch(f.async);
    }
    sbx_async_free(f.async);
    double dt = now_s() - t0;
    *peak_kib = proc_kib("self", "status", "VmHWM") - base;
    return dt;
}

/* ---------------------------------------------------------- supervisor */

/* RSS and PSS (KiB) of process @pid. */
static void pid_mem(int pid, long *rss, long *pss)
{
    char s[32];
    snprintf(s, sizeof s, "%d", pid);
    *rss = proc_kib(s, "status", "VmRSS");
    *pss = proc_kib(s, "smaps_rollup", "Pss");
}

/* RSS and PSS (KiB) of the process whose command line or cwd names
 * @sandbox_id (a local sandbox's state directory); -1 when not found. */
static void supervisor_mem(const char *sandbox_id, long *rss, long *pss)
{
    *rss = *pss = -1;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    char self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]) || strcmp(e->d_name, self) == 0)
            continue;
        char path[320], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        int hit = 0;
        for (size_t i = 0; i < len; i += strlen(buf + i) + 1)
            if (strstr(buf + i, sandbox_id))
                hit = 1;
        if (!hit) {
            snprintf(path, sizeof path, "/proc/%s/cwd", e->d_name);
            ssize_t l = readlink(path, buf, sizeof buf - 1);
            hit = l > 0 && (buf[l] = '\0', strstr(buf, sandbox_id) != NULL);
        }
        if (!hit)
            continue;
        pid_mem(atoi(e->d_name), rss, pss);
        break;
    }
    closedir(d);
}

int main(int argc, char **argv)
{
    int n = 100, rounds = 3, opt;
    unsigned workers = 0;
    int shared = 0;
    while ((opt = getopt(argc, argv, "sn:r:w:b:")) != -1) {
        if (opt == 's')
            shared = 1;
        else if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'r')
            rounds = atoi(optarg);
        else if (opt == 'w')
            workers = (unsigned)atoi(optarg);
        else if (opt == 'b')
            g_backend = optarg;
        else {
            fprintf(stderr, "usage: fanout [-s] [-n SANDBOXES] [-r ROUNDS] [-w WORKERS] "
                    "[-b BACKEND]\n");
            return 2;
        }
    }
    if (n < 1)
        n = 1;
    if (rounds < 1)
        rounds = 1;

    sbx_error *err = NULL;
    sbx_client *sample = sbx_client_new(g_backend, &err);
    if (!sample)
        die("client", err);
    if (shared)
        g_client = sample;

    /* Warm-up: plugin loaded, page cache, the supervisor binary. */
    for (int i = 0; i < 3; i++)
        one_sequential();

    printf("fanout: %d sandboxes (create -> exec /bin/true -> destroy) on %s (%s), %s, "
           "%u workers, %d rounds\n", n, g_backend,
           sbx_plugin_mode_name(sbx_client_get_plugin_mode(sample)),
           shared ? "the bench's own client" : "sbx_create's process-wide client",
           workers ? workers : (unsigned)SBX_ASYNC_DEFAULT_WORKERS, rounds);
    double *ratio = calloc((size_t)rounds, sizeof *ratio);
    long peak_max = 0;
    if (!ratio)
        return 1;
    for (int r = 0; r < rounds; r++) {
        double seq = run_sequential(n);
        long peak = 0;
        double as = run_async(n, workers, &peak);
        ratio[r] = seq / as;
        if (peak > peak_max)
            peak_max = peak;
        printf("round %d: sequential %.3f s (%.1f ms per sandbox), async %.3f s, "
               "speed-up %.2fx, peak RSS +%.1f MiB\n", r + 1, seq, seq * 1000 / n, as,
               ratio[r], peak / 1024.0);
    }
    qsort(ratio, (size_t)rounds, sizeof *ratio, cmp_double);
    printf("median speed-up (sequential / async): %.2fx\n", ratio[rounds / 2]);
    printf("application peak RSS per sandbox (async side): %.1f KiB\n",
           (double)peak_max / n);
    free(ratio);

    sbx_sandbox *sb = sbx_sandbox_create(sample, NULL, &err);
    if (!sb)
        die("create", err);
    long rss, pss;
    supervisor_mem(sbx_sandbox_get0_id(sb), &rss, &pss);
    if (rss >= 0)
        printf("supervisor per sandbox: RSS %ld KiB, PSS %ld KiB\n", rss, pss);
    else
        printf("supervisor per sandbox: no process names sandbox %s (not a local sandbox)\n",
               sbx_sandbox_get0_id(sb));
    if (sbx_client_get_host_pid(sample) > 0) {
        pid_mem(sbx_client_get_host_pid(sample), &rss, &pss);
        printf("plugin host per client: RSS %ld KiB, PSS %ld KiB\n", rss, pss);
    }
    if (sbx_sandbox_destroy(sb, &err) != 0)
        die("destroy", err);
    sbx_sandbox_free(sb);
    sbx_client_free(sample);
    return 0;
}
