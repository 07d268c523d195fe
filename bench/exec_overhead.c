/*
 * bench/exec_overhead: the cost of one exec through libsbx on a live sandbox
 * against the cheapest way to run the same program from the caller itself
 * (posix_spawn + waitpid, output read from a pipe), alternating the two in
 * one run so both see the same machine load.
 *
 * Four pairs are measured:
 *   argv  : execute_command({"/bin/true"})        vs posix_spawn("/bin/true")
 *   shell : execute_shell("echo hi")              vs posix_spawn("/bin/sh -c 'echo hi'")
 * each again while the caller holds 1 GiB of touched memory (a process that
 * forks would pay for copying its page tables; posix_spawn and the sandbox
 * supervisor do not), and again while every other core is busy (`+load`:
 * the bench starts one CPU-bound child per online core but one, each
 * bounded by alarm(LOAD_SECS) and by the bench's own death, and kills them
 * by pid after the row: every hop of an exec then waits for a CPU).
 *
 * On the bubblewrap backend one more pair shows what a live sandbox saves:
 *   bwrap : execute_command({"/bin/true"})        vs posix_spawn of a fresh
 *           `bwrap --unshare-{user,pid,ipc,uts,net} --new-session <the
 *           system tree read-only> --proc /proc --dev /dev /bin/true`
 * (there the ratio should be well below 1).
 *
 * Output: one line per pair with p50/p99 in microseconds and the ratio
 * library/raw at p50 and p99, and, where the sandbox has a supervisor
 * (local, bubblewrap), its and its reapers' wake-ups per exec (voluntary
 * context switches from /proc of the supervisor and of its children, the
 * reapers: a figure the machine's load does not change), the reapers'
 * part in brackets; then the caller's own wake-ups per library exec
 * (getrusage(RUSAGE_THREAD) around each call only) and, out of process,
 * the plugin host's (every thread of each child of this program that is
 * an sbx-plugin-host); last the time on a CPU per library exec of each of
 * them (the caller's thread CPU clock around each call; /proc/PID/schedstat
 * of the others, whatever they did meanwhile: the raw spawns do not touch
 * them; the reapers' part again in brackets), which the machine's load
 * does not change either. Targets (issue "exec benchmarks"): p50 ratio
 * <= 1.10, and <= 1.20 with 1 GiB held.
 *
 * Usage: exec_overhead [-n ITERATIONS] [-b BACKEND]   (default 400, local)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <dirent.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "bench.h"

extern char **environ;

/* Runs argv with posix_spawn, stdout on a pipe that is read to EOF, stdin
 * and stderr on /dev/null, and waits for it: what a caller would do. */
static int raw_spawn(char *const argv[])
{
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
        close(out[0]);
        return -1;
    }
    char buf[4096];
    while (read(out[0], buf, sizeof buf) > 0)
        ;
    close(out[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/** Longest a CPU-load child lives (it is killed by pid after its rows). */
#define LOAD_SECS 600

/** Starts @n CPU-bound children into @pids; returns how many started. */
static int start_load(pid_t *pids, int n)
{
    int k = 0;
    for (; k < n; k++) {
        pid_t p = fork();
        if (p < 0)
            break;
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() == 1)
                _exit(0);
            alarm(LOAD_SECS);
            for (volatile unsigned long x = 0;; x++)
                ;
        }
        pids[k] = p;
    }
    return k;
}

static void stop_load(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++)
        while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
            ;
}

static int lib_exec(sbx_sandbox *sb, const char *const *argv, const char *shell)
{
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    req.shell = shell;
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(sb, &req, &err);
    if (!r) {
        fprintf(stderr, "exec_overhead: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        exit(1);
    }
    int code = sbx_result_get_exit_code(r);
    sbx_result_free(r);
    return code;
}

/* The supervisor pid in a sandbox's session state; 0 when none. */
static long g_sup;

static long supervisor_pid(sbx_sandbox *sb)
{
    char *state = sbx_sandbox_session_state(sb, NULL);
    const char *p = state ? strstr(state, "\"supervisor_pid\":") : NULL;
    long pid = p ? strtol(p + 17, NULL, 10) : 0;
    free(state);
    return pid;
}

/* voluntary_ctxt_switches of @pid; 0 when unreadable. */
static long sleeps_of(long pid)
{
    char path[64], line[256];
    long v = 0;
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
            v = strtol(line + 24, NULL, 10);
    fclose(f);
    return v;
}

/* Nanoseconds on a CPU so far of the task whose schedstat is at @path
 * (its first field); 0 when unreadable. */
static long long cpu_ns_at(const char *path)
{
    long long v = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fscanf(f, "%lld", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

/* Wake-ups so far of the supervisor and its children (the reapers), and
 * in *@cpu_ns their time on a CPU; the reapers' part of each in *@reapers
 * and *@reapers_ns. Counts of a reaper that ended during the row are lost
 * with it (reapers are kept across execs). */
static long supervisor_sleeps(long long *cpu_ns, long *reapers, long long *reapers_ns)
{
    *cpu_ns = *reapers_ns = 0;
    *reapers = 0;
    if (g_sup <= 0)
        return 0;
    long total = sleeps_of(g_sup);
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/schedstat", g_sup);
    *cpu_ns += cpu_ns_at(path);
    snprintf(path, sizeof path, "/proc/%ld/task/%ld/children", g_sup, g_sup);
    FILE *f = fopen(path, "r");
    if (!f)
        return total;
    long kid;
    while (fscanf(f, "%ld", &kid) == 1) {
        *reapers += sleeps_of(kid);
        snprintf(path, sizeof path, "/proc/%ld/schedstat", kid);
        *reapers_ns += cpu_ns_at(path);
    }
    fclose(f);
    *cpu_ns += *reapers_ns;
    return total + *reapers;
}

/* Wake-ups so far of every thread of each plugin host this program
 * started (its children named sbx-plugin-host), and in *@cpu_ns their time
 * on a CPU; 0 in process. */
static long host_sleeps(long long *cpu_ns)
{
    char path[96], comm[64];
    long total = 0, kid;
    *cpu_ns = 0;
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fscanf(f, "%ld", &kid) == 1) {
        snprintf(path, sizeof path, "/proc/%ld/comm", kid);
        FILE *c = fopen(path, "r");
        int is_host = c && fgets(comm, sizeof comm, c) && strncmp(comm, "sbx-plugin-host", 15) == 0;
        if (c)
            fclose(c);
        if (!is_host)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/task", kid);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char st[384];
            if (e->d_name[0] == '.')
                continue;
            snprintf(st, sizeof st, "/proc/%ld/task/%s/status", kid, e->d_name);
            FILE *s = fopen(st, "r");
            char line[256];
            while (s && fgets(line, sizeof line, s))
                if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
                    total += strtol(line + 24, NULL, 10);
            if (s)
                fclose(s);
            snprintf(st, sizeof st, "/proc/%ld/task/%s/schedstat", kid, e->d_name);
            *cpu_ns += cpu_ns_at(st);
        }
        if (d)
            closedir(d);
    }
    fclose(f);
    return total;
}

/* The calling thread's voluntary context switches so far. */
static long own_sleeps(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nvcsw : 0;
}

/* The calling thread's time on a CPU so far, in nanoseconds. */
static long long own_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void measure(sbx_sandbox *sb, const char *label, int shell_form, int n,
                    char *const *raw_argv)
{
    static const char *const true_argv[] = {"/bin/true", NULL};
    static char *const raw_default[] = {"/bin/true", NULL};
    char *const *raw_true = raw_argv ? raw_argv : raw_default;
    static char *const raw_shell[] = {"/bin/sh", "-c", "echo hi", NULL};
    double *lib = calloc((size_t)n, sizeof *lib);
    double *raw = calloc((size_t)n, sizeof *raw);
    if (!lib || !raw) {
        perror("calloc");
        exit(1);
    }
    /* warm-up: page cache, dynamic linker, supervisor */
    for (int i = 0; i < 10; i++) {
        lib_exec(sb, shell_form ? NULL : true_argv, shell_form ? "echo hi" : NULL);
        raw_spawn(shell_form ? raw_shell : raw_true);
    }
    long long sup_cpu0, host_cpu0, sup_cpu, host_cpu, own_cpu = 0, rp_cpu0, rp_cpu;
    long rp0, rp;
    long sleeps0 = supervisor_sleeps(&sup_cpu0, &rp0, &rp_cpu0);
    long host0 = host_sleeps(&host_cpu0), own = 0;
    for (int i = 0; i < n; i++) {
        long own0 = own_sleeps();
        long long cpu0 = own_cpu_ns();
        double t0 = now_us();
        int a = lib_exec(sb, shell_form ? NULL : true_argv, shell_form ? "echo hi" : NULL);
        double t1 = now_us();
        own_cpu += own_cpu_ns() - cpu0;
        own += own_sleeps() - own0;
        int b = raw_spawn(shell_form ? raw_shell : raw_true);
        double t2 = now_us();
        if (a != 0 || b != 0) {
            fprintf(stderr, "exec_overhead: unexpected exit codes %d %d\n", a, b);
            exit(1);
        }
        lib[i] = t1 - t0;
        raw[i] = t2 - t1;
    }
    /* The raw spawns (the supervisor never sees them) barely add to it. */
    long sleeps = supervisor_sleeps(&sup_cpu, &rp, &rp_cpu) - sleeps0;
    long host = host_sleeps(&host_cpu) - host0;
    sup_cpu -= sup_cpu0;
    rp -= rp0;
    rp_cpu -= rp_cpu0;
    host_cpu -= host_cpu0;
    double lp50 = percentile(lib, (size_t)n, 0.50), lp99 = percentile(lib, (size_t)n, 0.99);
    double rp50 = percentile(raw, (size_t)n, 0.50), rp99 = percentile(raw, (size_t)n, 0.99);
    printf("%-22s lib p50 %8.1f us p99 %8.1f us | raw p50 %8.1f us p99 %8.1f us | ratio p50 %.3f p99 %.3f",
           label, lp50, lp99, rp50, rp99, lp50 / rp50, lp99 / rp99);
    if (g_sup > 0)
        printf(" | supervisor+reaper wake-ups/exec %.2f (reapers %.2f)", (double)sleeps / n,
               (double)rp / n);
    printf(" | caller %.2f host %.2f", (double)own / n, (double)host / n);
    printf(" | CPU us/exec caller %.0f host %.0f", own_cpu / 1e3 / n, host_cpu / 1e3 / n);
    if (g_sup > 0)
        printf(" supervisor+reapers %.0f (reapers %.0f)", sup_cpu / 1e3 / n, rp_cpu / 1e3 / n);
    printf("\n");
    free(lib);
    free(raw);
}

int main(int argc, char **argv)
{
    int n = 400;
    const char *backend = "local";
    int opt;
    while ((opt = getopt(argc, argv, "n:b:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'b')
            backend = optarg;
        else {
            fprintf(stderr, "usage: exec_overhead [-n ITERATIONS] [-b BACKEND]\n");
            return 2;
        }
    }
    if (n < 10)
        n = 10;
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_create(backend, NULL, &err);
    if (!sb) {
        fprintf(stderr, "exec_overhead: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        return 1;
    }
    g_sup = supervisor_pid(sb);
    printf("exec_overhead: backend %s, %d iterations per pair, alternating\n", backend, n);
    measure(sb, "argv /bin/true", 0, n, NULL);
    measure(sb, "shell echo hi", 1, n, NULL);
    if (strcmp(backend, "bubblewrap") == 0) {
        const char *bw = getenv("SBX_BWRAP");
        char *bwrap_argv[64];
        int k = 0;
        bwrap_argv[k++] = (char *)(bw && *bw ? bw : "/usr/bin/bwrap");
        static char *const fixed[] = {"--unshare-user", "--unshare-pid", "--unshare-ipc",
                                      "--unshare-uts", "--unshare-net", "--new-session",
                                      "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            bwrap_argv[k++] = fixed[i];
        /* bin, sbin, lib*: symlinks into /usr as on the host, or binds. */
        static char *const tops[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
        static char targets[6][256];
        for (size_t i = 0; i < sizeof tops / sizeof tops[0]; i++) {
            ssize_t l = readlink(tops[i], targets[i], sizeof targets[i] - 1);
            if (l > 0) {
                targets[i][l] = '\0';
                bwrap_argv[k++] = "--symlink";
                bwrap_argv[k++] = targets[i];
                bwrap_argv[k++] = tops[i];
            } else if (access(tops[i], F_OK) == 0) {
                bwrap_argv[k++] = "--ro-bind";
                bwrap_argv[k++] = tops[i];
                bwrap_argv[k++] = tops[i];
            }
        }
        static char *const tail[] = {"--proc", "/proc", "--dev", "/dev", "/bin/true", NULL};
        for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++)
            bwrap_argv[k++] = tail[i];
        measure(sb, "bwrap /bin/true", 0, n, bwrap_argv);
    }

    /* Every other core busy. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus > 1 ? (int)cpus - 1 : 1;
    pid_t load[256];
    if (want > 256)
        want = 256;
    int nload = start_load(load, want);
    if (nload != want) {
        stop_load(load, nload);
        fprintf(stderr, "exec_overhead: could start only %d of %d CPU-load processes\n", nload,
                want);
        return 1;
    }
    printf("(+load: %d CPU-bound process%s on %ld online cores)\n", nload,
           nload == 1 ? "" : "es", cpus);
    measure(sb, "argv /bin/true +load", 0, n, NULL);
    measure(sb, "shell echo hi +load", 1, n, NULL);
    stop_load(load, nload);

    size_t big = (size_t)1 << 30;
    char *hold = malloc(big);
    if (!hold) {
        perror("malloc 1 GiB");
    } else {
        memset(hold, 1, big); /* touch every page */
        measure(sb, "argv /bin/true +1GiB", 0, n, NULL);
        measure(sb, "shell echo hi +1GiB", 1, n, NULL);
        free(hold);
    }
    if (sbx_sandbox_destroy(sb, &err) != 0) {
        fprintf(stderr, "exec_overhead: destroy: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
    }
    sbx_sandbox_free(sb);
    return 0;
}
