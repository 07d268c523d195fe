/*
 * Attached sandboxes out of process, on the backend under test
 * ($SBX_TEST_BACKEND: local under `make check`, bubblewrap again in
 * tests/bubblewrap.sh, docker in scripts/test): the plugin host of an
 * application that ends without destroying its sandboxes (SIGKILL
 * mid-exec, normal exit) destroys the attached ones within 5 s and removes
 * their rows; detached ones and ones another live process resumed are left
 * alone. A plugin host SIGKILLed itself destroys nothing: the application
 * still owns the sandboxes; when it dies too, on docker sbx_gc() reaps
 * them, on local and bubblewrap their supervisors, which watch the
 * application, end them within 5 s and sbx_gc() removes the rows. In
 * process there is no host: on docker sbx_gc() reaps them; on local and
 * bubblewrap the supervisors watch the application itself and end them
 * within 5 s of its SIGKILL (tests named in_process_* and supervisor_*,
 * which run on both of these backends whatever SBX_TEST_BACKEND says). A
 * SIGKILLed supervisor leaves nothing behind either, in both modes.
 *
 * On local and bubblewrap a sandbox is gone when nothing of it is left on
 * the host: no row, command or directory, none of the supervisor, keeper
 * and (bubblewrap) bwrap processes it had when it was made, no mount
 * naming it or its root; the supervisor tests also look for any other
 * process whose command line names it.
 *
 * Each test has its own TMPDIR and SBX_STATE_DIR (so its own record). The
 * applications are forked children; each makes its own client.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include <sbx/sbx.h>

#include "recordutil.h"
#include "testutil.h"

static tu_dirs g_dirs;   /* this test's directory, its TMPDIR and SBX_STATE_DIR */

static void setup(void)
{
    tu_dirs_make(&g_dirs, "sbx-attached", 1);
    /* The library's and its plugin hosts' info lines (which host served,
     * what an ending host destroyed) go to the log, for a failure. */
    cr_assert_eq(setenv("SBX_DEBUG", "info", 0), 0);
}

/* Whatever a failed test left: every sandbox the record still knows is
 * destroyed (detached ones too), so nothing outlives the test. */
static void destroy_leftovers(void)
{
    char *path = tu_strdup_printf("%s/lifecycle.db", g_dirs.state);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    if (tu_exists(path) && sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT session_state FROM sandboxes WHERE session_state != ''",
                           -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            sbx_sandbox *sb = sbx_resume((const char *)sqlite3_column_text(st, 0), NULL);
            if (sb)
                sbx_sandbox_destroy(sb, NULL);
            sbx_sandbox_free(sb);
        }
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(path);
}

static void teardown(void)
{
    destroy_leftovers();
    tu_dirs_free(&g_dirs);
}

TestSuite(attached, .init = setup, .fini = teardown, .timeout = 240);

static int is_dir_backend(void)
{
    return tu_backend_is_local() || strcmp(tu_backend(), "bubblewrap") == 0;
}

static long long rows_where(const char *what)
{
    char *sql = tu_strdup_printf("SELECT count(*) FROM sandboxes WHERE %s", what);
    long long n = tu_record_int(g_dirs.state, sql);
    free(sql);
    return n;
}

static long long rows_for(const char *id)
{
    return tu_record_rows_for(g_dirs.state, id);
}

/* ------------------------------------------------------------ the holder */

enum { MAXSB = 24 };

enum { MAXFAM = 4 };

/* What a holder child reports: per sandbox its id, whether it is
 * detached, the host pid of the command running in it (0: none) and its
 * session state; and its plugin host's pid. On local and bubblewrap the
 * test adds, as each sandbox is reported, its root (from the session
 * state) and its family: its supervisor (the session state's
 * supervisor_pid) and the ancestors of that one whose command lines name
 * the sandbox (its keeper; on bubblewrap the bwrap process between them),
 * each with its start time (field 22 of /proc/PID/stat). */
typedef struct held {
    int n;
    char id[MAXSB][160];
    int detached[MAXSB];
    pid_t cmd[MAXSB];
    char *state[MAXSB];
    char root[MAXSB][512];
    int nfam[MAXSB];
    pid_t fam[MAXSB][MAXFAM];
    unsigned long long fam_start[MAXSB][MAXFAM];
    pid_t host;
    pid_t child;
} held;

/* The start time of @pid (field 22 of /proc/PID/stat, in clock ticks
 * since boot); 0 when it is gone or has exited (a zombie). */
static unsigned long long proc_start(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* After the command's name: state (field 3), then 18 fields up to the
     * start time. */
    const char *p = strrchr(buf, ')');
    char state;
    unsigned long long start = 0;
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                     "%*s %*s %*s %*s %llu", &state, &start) != 2)
        return 0;
    return state == 'Z' || state == 'X' ? 0 : start;
}

/* 1 when the command line of @pid holds @s. */
static int cmdline_names(pid_t pid, const char *s)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t k = 0; k < n; k++)
        if (buf[k] == '\0')
            buf[k] = ' ';
    buf[n] = '\0';
    return strstr(buf, s) != NULL;
}

/* The number after "\"@key\":" in the session state @state; 0 when none. */
static long long state_number(const char *state, const char *key)
{
    char *want = tu_strdup_printf("\"%s\":", key);
    const char *p = strstr(state, want);
    long long v = p ? strtoll(p + strlen(want), NULL, 10) : 0;
    free(want);
    return v;
}

/* Sandbox @i of @h on local or bubblewrap, as it is reported: its root
 * and its family (held); asserts that its supervisor runs and that a
 * keeper stands above it. */
static void note_family(held *h, int i)
{
    const char *st = h->state[i];
    h->nfam[i] = 0;
    h->root[i][0] = '\0';
    if (!is_dir_backend())
        return;
    /* "root":"PATH", its slashes possibly escaped ("\/"). */
    const char *r = strstr(st, "\"root\":");
    cr_assert_not_null(r, "no root in the session state of %s: %s", h->id[i], st);
    r += strlen("\"root\":");
    while (*r == ' ')
        r++;
    cr_assert_eq(*r, '"', "%s", st);
    size_t k = 0;
    for (r++; *r && *r != '"' && k < sizeof h->root[0] - 1; r++) {
        if (*r == '\\' && r[1])
            r++;
        h->root[i][k++] = *r;
    }
    h->root[i][k] = '\0';
    cr_assert_eq(h->root[i][0], '/', "root \"%s\" of %s", h->root[i], h->id[i]);

    pid_t sup = (pid_t)state_number(st, "supervisor_pid");
    unsigned long long start = (unsigned long long)state_number(st, "supervisor_start");
    cr_assert(sup > 1 && start > 0, "no supervisor in the session state of %s: %s", h->id[i],
              st);
    cr_assert_eq(proc_start(sup), start, "the supervisor of %s is not running: %s", h->id[i],
                 tu_proc_describe(sup));
    h->fam[i][0] = sup;
    h->fam_start[i][0] = start;
    /* A warm supervisor's keeper writes the sandbox's directory over its
     * command line once it hears of the claim, a moment after it. */
    for (double end = tu_now() + 2.0;; usleep(5000)) {
        h->nfam[i] = 1;
        for (pid_t p = tu_ppid(sup); p > 1 && p != getpid() && h->nfam[i] < MAXFAM
                                     && cmdline_names(p, h->id[i]); p = tu_ppid(p)) {
            h->fam[i][h->nfam[i]] = p;
            h->fam_start[i][h->nfam[i]] = proc_start(p);
            h->nfam[i]++;
        }
        if (h->nfam[i] >= 2 || tu_now() > end)
            break;
    }
    cr_assert_geq(h->nfam[i], 2, "no keeper of %s above its supervisor: %s", h->id[i],
                  tu_proc_describe(tu_ppid(sup)));
}

typedef struct exec_arg {
    sbx_sandbox *sb;
} exec_arg;

static void *run_sleep(void *p)
{
    exec_arg *a = p;
    /* Never returns while the sandbox lives: the exec is in flight when the
     * application is killed. */
    sbx_result *r = sbx_sandbox_execute_shell(a->sb, "echo $$ > attach.pid; exec sleep 100",
                                              NULL);
    sbx_result_free(r);
    return NULL;
}

/* The host pid of the command that wrote attach.pid in @sb (waits for it). */
static pid_t running_pid(sbx_sandbox *sb)
{
    for (int i = 0; i < 400; i++) {
        sbx_result *r = sbx_sandbox_execute_shell(sb, "cat attach.pid 2>/dev/null", NULL);
        long v = r ? strtol(sbx_result_get0_stdout(r, NULL), NULL, 10) : 0;
        sbx_result_free(r);
        if (v > 0)
            return tu_host_pid(sb, (pid_t)v);
        usleep(25 * 1000);
    }
    return 0;
}

/*
 * Forks an application that makes @nattached attached sandboxes (each with
 * `sleep 100` running in it when @exec) and @ndetached detached ones on its
 * own client in @mode, reports them on a pipe, and then either waits to be
 * killed or, with @exit_after, exits without destroying or freeing
 * anything as soon as the test has noted what it reported (when this
 * returns). With @exit_after 2, each attached sandbox is resumed on that
 * client and its creating handle freed before the exit.
 */
/* The lifetime start_holder() gives its attached sandboxes (its detached
 * ones have 600 s): SBX_TIMEOUT_NONE for the tests of sandboxes without a
 * lifetime, which only their owners bound. */
static double g_attached_lifetime = 600;

static void start_holder(held *h, int nattached, int ndetached, int exec, sbx_plugin_mode mode,
                         int exit_after)
{
    int p[2], go[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(pipe(go), 0);
    memset(h, 0, sizeof(*h));
    pid_t test = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* Should the test end early (a failed assertion), the application
         * dies with it, and its attached sandboxes with their owner. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != test)
            _exit(4);
        close(p[0]);
        close(go[1]);
        sbx_error *err = NULL;
        sbx_client *c = sbx_client_new_with_mode(tu_backend(), mode, &err);
        if (!c) {
            dprintf(p[1], "E client: %s\n", sbx_error_get0_message(err));
            _exit(2);
        }
        sbx_options *o = sbx_options_new();
        if (sbx_options_set_timeout_secs(o, g_attached_lifetime, &err) < 0) {
            dprintf(p[1], "E options: %s\n", sbx_error_get0_message(err));
            _exit(2);
        }
        sbx_options *d = sbx_options_new();
        sbx_options_set_timeout_secs(d, 600, NULL);
        sbx_options_set_detached(d, 1, NULL);
        static exec_arg args[MAXSB];
        for (int i = 0; i < nattached + ndetached; i++) {
            int det = i >= nattached;
            sbx_sandbox *sb = sbx_sandbox_create(c, det ? d : o, &err);
            if (!sb) {
                dprintf(p[1], "E create: %s\n", sbx_error_get0_message(err));
                _exit(2);
            }
            pid_t cmd = 0;
            if (exec && !det) {
                pthread_t t;
                args[i].sb = sb;
                if (pthread_create(&t, NULL, run_sleep, &args[i]) != 0)
                    _exit(3);
                cmd = running_pid(sb);
                if (cmd <= 0) {
                    dprintf(p[1], "E no command pid\n");
                    _exit(3);
                }
                /* A container's pids are not this host's to check: the
                 * container itself is checked instead. */
                if (!is_dir_backend())
                    cmd = 0;
            }
            char *state = sbx_sandbox_session_state(sb, NULL);
            dprintf(p[1], "%c %s %d %s\n", det ? 'D' : 'A', sbx_sandbox_get0_id(sb), (int)cmd,
                    state ? state : "-");
            if (exit_after == 2 && !det) {
                /* Held on through a resumed handle; the creating one freed. */
                sbx_sandbox *again = state ? sbx_sandbox_resume(c, state, &err) : NULL;
                if (!again) {
                    dprintf(p[1], "E resume: %s\n", err ? sbx_error_get0_message(err) : "");
                    _exit(2);
                }
                sbx_sandbox_free(sb);
            }
            free(state);
        }
        dprintf(p[1], "H %d\n", sbx_client_get_host_pid(c));
        close(p[1]);
        /* Not before the test has noted the sandboxes' processes and the
         * plugin host (a byte, or EOF should the test end). */
        char ch;
        if (exit_after && read(go[0], &ch, 1) >= 0)
            exit(0);
        for (;;)
            pause();
    }
    close(p[1]);
    close(go[0]);
    FILE *f = fdopen(p[0], "r");
    cr_assert_not_null(f);
    char *line = NULL;
    size_t cap = 0;
    h->child = pid;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        cr_assert_neq(line[0], 'E', "the application failed: %s", line + 2);
        if (line[0] == 'H') {
            h->host = (pid_t)atoi(line + 2);
            break;
        }
        cr_assert_lt(h->n, MAXSB);
        char kind, id[160];
        int cmd, used = 0;
        cr_assert_eq(sscanf(line, "%c %159s %d %n", &kind, id, &cmd, &used), 3, "%s", line);
        snprintf(h->id[h->n], sizeof h->id[0], "%s", id);
        h->detached[h->n] = kind == 'D';
        h->cmd[h->n] = (pid_t)cmd;
        h->state[h->n] = strdup(line + used);
        note_family(h, h->n);
        h->n++;
    }
    free(line);
    fclose(f);
    cr_assert_eq(h->n, nattached + ndetached, "the application reported %d sandboxes", h->n);
    if (mode == SBX_PLUGIN_MODE_OUT_OF_PROCESS)
        cr_assert(h->host > 0 && tu_is_plugin_host(h->host), "no plugin host: %d", (int)h->host);
    else
        cr_assert_eq(h->host, 0);
    cr_assert_eq(write(go[1], "g", 1), 1);
    close(go[1]);
}

static void held_free(held *h)
{
    for (int i = 0; i < h->n; i++)
        free(h->state[i]);
}

static const char *left_on_host(const held *h, int i);

/* 1 when sandbox @i of @h is gone: no row, its command ended, and on
 * local and bubblewrap nothing of it left on the host (left_on_host():
 * its directory, supervisor, keeper, bwrap and mounts). */
static int gone(const held *h, int i)
{
    if (rows_for(h->id[i]) != 0)
        return 0;
    if (h->cmd[i] > 0 && !tu_pid_gone(h->cmd[i]))
        return 0;
    return !is_dir_backend() || !left_on_host(h, i);
}

/* Resuming sandbox @i must fail with not_found (in process: no host keeps
 * it, no owner is left behind that matters). */
static void assert_not_resumable(const held *h, int i)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_resume(h->state[i], &err);
    cr_assert_null(sb, "sandbox %s can still be resumed", h->id[i]);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s: %s", h->id[i],
                 sbx_error_get0_message(err));
    sbx_error_free(err);
}

static int collect_owned(const sbx_owned_sandbox *s, void *ud)
{
    char *ids = ud;
    strncat(ids, s->id, 8191 - strlen(ids));
    strncat(ids, " ", 8191 - strlen(ids));
    return 0;
}

/* On a backend that lists what it holds with this library's labels (a
 * container on docker): the attached sandboxes of @h are not listed, the
 * detached ones are. */
static void assert_listing(const held *h)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    static char ids[8192];
    ids[0] = '\0';
    if (sbx_client_list_owned(c, collect_owned, ids, &err) < 0) {
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED, "%s",
                     sbx_error_get0_message(err));
        sbx_error_free(err);
        sbx_client_free(c);
        return;
    }
    for (int i = 0; i < h->n; i++) {
        char *word = tu_strdup_printf("%s ", h->id[i]);
        cr_assert_eq(strstr(ids, word) != NULL, h->detached[i], "%s is %slisted: %s", h->id[i],
                     h->detached[i] ? "not " : "", ids);
        free(word);
    }
    sbx_client_free(c);
}

/* 1 when this host's mount table names @id. */
static int mounts_mention(const char *id)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    cr_assert_not_null(f);
    char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, id) != NULL;
    fclose(f);
    return found;
}

/* The first process (not this one) whose command line names one of the
 * attached sandboxes of @h (its supervisor, keeper, bwrap), with the index
 * of that sandbox in *@which; 0 when none. One pass over /proc. */
static pid_t proc_naming_attached(const held *h, int *which)
{
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    struct dirent *e;
    pid_t found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64], buf[8192];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t k = 0; k < n; k++)
            if (buf[k] == '\0')
                buf[k] = ' ';
        buf[n] = '\0';
        for (int i = 0; i < h->n && !found; i++)
            if (!h->detached[i] && strstr(buf, h->id[i]) && !tu_pid_gone(pid)) {
                found = pid;
                *which = i;
            }
    }
    closedir(d);
    return found;
}

/* What is left of sandbox @i of @h on a local or bubblewrap host, its row
 * aside: its command, its directory, a process of its family (its
 * supervisor, keeper or bwrap, as noted when it was reported), a mount
 * naming it or its root. NULL when nothing. */
static const char *left_on_host(const held *h, int i)
{
    static char what[1024];
    char *dir = tu_strdup_printf("%s/%s", g_dirs.tmp, h->id[i]);
    what[0] = '\0';
    if (h->cmd[i] > 0 && !tu_pid_gone(h->cmd[i]))
        snprintf(what, sizeof what, "its command (%s)", tu_proc_describe(h->cmd[i]));
    else if (tu_exists(dir))
        snprintf(what, sizeof what, "its directory %s", dir);
    for (int k = 0; !what[0] && k < h->nfam[i]; k++)
        if (proc_start(h->fam[i][k]) == h->fam_start[i][k])
            snprintf(what, sizeof what, "its %s (%s)",
                     k == 0 ? "supervisor" : k == h->nfam[i] - 1 ? "keeper" : "bwrap",
                     tu_proc_describe(h->fam[i][k]));
    if (!what[0] && mounts_mention(h->id[i]))
        snprintf(what, sizeof what, "a mount naming it");
    else if (!what[0] && h->root[i][0] && mounts_mention(h->root[i]))
        snprintf(what, sizeof what, "a mount naming its root %s", h->root[i]);
    free(dir);
    return what[0] ? what : NULL;
}

/* Waits up to @secs after @t0 until nothing of the attached sandboxes of
 * @h is left on the host (rows aside): no command, directory, mount or
 * process naming one. Returns the seconds it took (at most @secs). */
static double wait_attached_ended(const held *h, double t0, double secs)
{
    for (;;) {
        int left = -1, which = -1;
        for (int i = 0; i < h->n && left < 0; i++)
            if (!h->detached[i] && left_on_host(h, i))
                left = i;
        pid_t p = left < 0 ? proc_naming_attached(h, &which) : 0;
        double t = tu_now() - t0;
        if (left < 0 && !p) {
            cr_assert_leq(t, secs, "nothing is left, but only %.2f s later", t);
            return t;
        }
        if (t > secs) {
            if (left >= 0)
                cr_assert_fail("%.1f s later sandbox %s still has %s", t, h->id[left],
                               left_on_host(h, left));
            cr_assert_fail("%.1f s later a process names sandbox %s: %s", t, h->id[which],
                           tu_proc_describe(p));
        }
        usleep(20 * 1000);
    }
}

/* Sandbox @i is still there: its row, its command, its directory, its
 * supervisor and keeper (the same processes as when it was reported). */
static void assert_there(const held *h, int i)
{
    cr_assert_eq(rows_for(h->id[i]), 1, "the row of %s is gone", h->id[i]);
    if (h->cmd[i] > 0)
        cr_assert_eq(tu_pid_gone(h->cmd[i]), 0, "the command of %s ended: %s", h->id[i],
                     tu_proc_describe(h->cmd[i]));
    for (int k = 0; k < h->nfam[i]; k++)
        cr_assert_eq(proc_start(h->fam[i][k]), h->fam_start[i][k],
                     "a process of the family of %s (its supervisor and those above it) "
                     "ended: %s", h->id[i], tu_proc_describe(h->fam[i][k]));
    if (is_dir_backend()) {
        char *dir = tu_strdup_printf("%s/%s", g_dirs.tmp, h->id[i]);
        cr_assert(tu_exists(dir), "%s is gone", dir);
        free(dir);
    }
}

/* Waits up to @secs until every attached sandbox of @h is gone; returns
 * the seconds it took (asserts). */
static double wait_attached_gone(const held *h, double t0, double secs)
{
    for (;;) {
        int left = 0;
        for (int i = 0; i < h->n; i++)
            if (!h->detached[i] && !gone(h, i))
                left++;
        double t = tu_now() - t0;
        if (!left)
            return t;
        if (t > secs) {
            for (int i = 0; i < h->n; i++)
                if (!h->detached[i] && !gone(h, i)) {
                    const char *what = is_dir_backend() ? left_on_host(h, i) : NULL;
                    cr_assert_fail("sandbox %s is still there %.1f s later (row %lld, "
                                   "command %s; %s)", h->id[i], t, rows_for(h->id[i]),
                                   h->cmd[i] ? tu_proc_describe(h->cmd[i]) : "none",
                                   what ? what : "nothing else on the host");
                }
        }
        usleep(20 * 1000);
    }
}

/* The detached sandboxes are untouched; the test destroys them. */
static void destroy_detached(const held *h)
{
    for (int i = 0; i < h->n; i++) {
        if (!h->detached[i])
            continue;
        char *sql = sqlite3_mprintf("provider_id = %Q AND detached = 1", h->id[i]);
        cr_assert_eq(rows_where(sql), 1, "the detached row of %s changed", h->id[i]);
        sqlite3_free(sql);
        assert_there(h, i);
        sbx_error *err = NULL;
        sbx_sandbox *sb = sbx_resume(h->state[i], &err);
        cr_assert_not_null(sb, "%s: %s", h->id[i], err ? sbx_error_get0_message(err) : "");
        cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
        sbx_sandbox_free(sb);
        cr_assert_eq(rows_for(h->id[i]), 0);
    }
}

/* ------------------------------------------------------------------ tests */

/* SIGKILL of an application holding 20 attached sandboxes mid-exec and 2
 * detached: within 5 s the attached ones are gone (command, directory,
 * container, row), the detached ones untouched, and the host has exited. */
Test(attached, sigkill_of_the_application_destroys_its_attached_sandboxes)
{
    held h;
    start_holder(&h, 20, 2, 1, SBX_PLUGIN_MODE_OUT_OF_PROCESS, 0);
    for (int i = 0; i < h.n; i++)
        assert_there(&h, i);
    double t0 = tu_now();
    cr_assert_eq(kill(h.child, SIGKILL), 0);
    cr_assert_eq(waitpid(h.child, NULL, 0), h.child);
    double took = wait_attached_gone(&h, t0, 5.0);
    fprintf(stderr, "# %s: 20 attached sandboxes gone %.3f s after the SIGKILL\n", tu_backend(),
            took);
    cr_assert(tu_wait_pid_gone(h.host, 5.0 - (tu_now() - t0) + 0.5), "%s",
              tu_proc_describe(h.host));
    for (int i = 0; i < h.n; i++)
        if (!h.detached[i])
            assert_not_resumable(&h, i);
    cr_assert_eq(rows_where("detached = 0"), 0);
    cr_assert_eq(rows_where("detached = 1"), 2);
    if (is_dir_backend()) {
        cr_assert_eq(tu_count_entries(g_dirs.tmp), 2, "more than the detached directories are left");
        cr_assert_eq(tu_wait_spares_gone(g_dirs.tmp, 5.0 - (tu_now() - t0) + 0.5), 0,
                     "the client's spare directory outlived the application by 5 s");
    }
    assert_listing(&h);
    /* Nothing left for gc but the detached ones, which it leaves. */
    cr_assert_eq(sbx_gc(SBX_GC_DRY_RUN, NULL, NULL, NULL), 0);
    destroy_detached(&h);
    held_free(&h);
}

/* Normal exit without destroy or free also destroys them. */
Test(attached, exit_without_destroy_destroys_its_attached_sandboxes)
{
    held h;
    start_holder(&h, 3, 1, 0, SBX_PLUGIN_MODE_OUT_OF_PROCESS, 1);
    double t0 = tu_now();
    int status;
    cr_assert_eq(waitpid(h.child, &status, 0), h.child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    wait_attached_gone(&h, t0, 5.0);
    cr_assert(tu_wait_pid_gone(h.host, 5.0), "%s", tu_proc_describe(h.host));
    cr_assert_eq(rows_where("1"), 1);
    destroy_detached(&h);
    held_free(&h);
}

/* Each attached sandbox held on through a handle resumed by the process
 * that created it, its creating handle freed (the plugin host then frees
 * that one at once and keeps the resumed one): an exit without destroy or
 * free still destroys them, through the handle kept. */
Test(attached, exit_holding_resumed_handles_only_destroys_its_attached_sandboxes)
{
    held h;
    start_holder(&h, 3, 1, 0, SBX_PLUGIN_MODE_OUT_OF_PROCESS, 2);
    double t0 = tu_now();
    int status;
    cr_assert_eq(waitpid(h.child, &status, 0), h.child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    wait_attached_gone(&h, t0, 5.0);
    cr_assert(tu_wait_pid_gone(h.host, 5.0), "%s", tu_proc_describe(h.host));
    cr_assert_eq(rows_where("1"), 1);
    destroy_detached(&h);
    held_free(&h);
}

/* The plugin host SIGKILLed instead: it destroys nothing, and the
 * sandboxes belong to the living application. When the application dies
 * too (with no host to notice), they stay until sbx_gc() reaps them. */
static void host_sigkill_on_a_dir_backend(void);

Test(attached, sigkill_of_the_plugin_host_leaves_them_to_gc)
{
    if (is_dir_backend()) {
        /* Their supervisors watch the host: see that test. */
        host_sigkill_on_a_dir_backend();
        return;
    }
    held h;
    start_holder(&h, 20, 2, 1, SBX_PLUGIN_MODE_OUT_OF_PROCESS, 0);
    cr_assert_eq(kill(h.host, SIGKILL), 0);
    cr_assert(tu_wait_pid_gone(h.host, 5.0), "%s", tu_proc_describe(h.host));
    cr_assert_eq(kill(h.child, SIGKILL), 0);
    cr_assert_eq(waitpid(h.child, NULL, 0), h.child);
    usleep(2000 * 1000);
    cr_assert_eq(rows_where("detached = 0"), 20, "a row went without a host to remove it");
    for (int i = 0; i < h.n; i++) {
        cr_assert_eq(rows_for(h.id[i]), 1);
        if (is_dir_backend()) {
            char *dir = tu_strdup_printf("%s/%s", g_dirs.tmp, h.id[i]);
            cr_assert(tu_exists(dir), "%s went without a host to remove it", dir);
            free(dir);
        }
    }
    cr_assert_eq(sbx_gc(0, NULL, NULL, NULL), 20);
    double t0 = tu_now();
    wait_attached_gone(&h, t0, 5.0);
    assert_listing(&h);
    for (int i = 0; i < h.n; i++)
        if (!h.detached[i])
            assert_not_resumable(&h, i);
    destroy_detached(&h);
    held_free(&h);
}

/* A sandbox another live process resumed survives its creator's death,
 * and goes when that process dies too (its own host destroys it). */
Test(attached, a_sandbox_resumed_by_a_live_process_survives)
{
    held a;
    start_holder(&a, 1, 0, 0, SBX_PLUGIN_MODE_OUT_OF_PROCESS, 0);
    int q[2];
    cr_assert_eq(pipe(q), 0);
    pid_t b = fork();
    cr_assert(b >= 0);
    if (b == 0) {
        close(q[0]);
        sbx_client *c = sbx_client_new_with_mode(tu_backend(), SBX_PLUGIN_MODE_OUT_OF_PROCESS,
                                                 NULL);
        sbx_sandbox *sb = c ? sbx_sandbox_resume(c, a.state[0], NULL) : NULL;
        if (!sb)
            _exit(2);
        dprintf(q[1], "%d\n", sbx_client_get_host_pid(c));
        close(q[1]);
        for (;;)
            pause();
    }
    close(q[1]);
    char buf[32] = "";
    cr_assert_gt(read(q[0], buf, sizeof buf - 1), 0, "the resuming process failed");
    close(q[0]);
    pid_t bhost = (pid_t)atoi(buf);
    cr_assert(tu_is_plugin_host(bhost));
    char *sql = sqlite3_mprintf("SELECT count(*) FROM owners JOIN sandboxes USING "
                                "(create_token) WHERE provider_id = %Q", a.id[0]);
    cr_assert_eq(tu_record_int(g_dirs.state, sql), 2);

    cr_assert_eq(kill(a.child, SIGKILL), 0);
    cr_assert_eq(waitpid(a.child, NULL, 0), a.child);
    /* The creator's host is done once it exits: it left the sandbox. */
    cr_assert(tu_wait_pid_gone(a.host, 5.0), "%s", tu_proc_describe(a.host));
    assert_there(&a, 0);
    cr_assert_eq(tu_record_int(g_dirs.state, sql), 1, "the dead creator is still an owner");
    char *owner = sqlite3_mprintf("SELECT pid FROM owners JOIN sandboxes USING "
                                  "(create_token) WHERE provider_id = %Q", a.id[0]);
    cr_assert_eq(tu_record_int(g_dirs.state, owner), b);
    sqlite3_free(owner);

    double t0 = tu_now();
    cr_assert_eq(kill(b, SIGKILL), 0);
    cr_assert_eq(waitpid(b, NULL, 0), b);
    wait_attached_gone(&a, t0, 5.0);
    cr_assert(tu_wait_pid_gone(bhost, 5.0), "%s", tu_proc_describe(bhost));
    assert_not_resumable(&a, 0);
    sqlite3_free(sql);
    held_free(&a);
}

/* An application that frees its client (and so its host's socket) but
 * lives on keeps its attached sandbox; the host stays until the
 * application ends and then destroys it. Freeing the client does not wait
 * for that. */
Test(attached, freeing_the_client_keeps_the_sandbox_until_the_process_ends)
{
    int p[2], go[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        close(go[1]);
        sbx_client *c = sbx_client_new_with_mode(tu_backend(), SBX_PLUGIN_MODE_OUT_OF_PROCESS,
                                                 NULL);
        sbx_sandbox *sb = c ? sbx_sandbox_create(c, NULL, NULL) : NULL;
        if (!sb)
            _exit(2);
        int host = sbx_client_get_host_pid(c);
        dprintf(p[1], "%s %d\n", sbx_sandbox_get0_id(sb), host);
        double t0 = tu_now();
        sbx_sandbox_free(sb);
        sbx_client_free(c);
        dprintf(p[1], "%.3f\n", tu_now() - t0);
        close(p[1]);
        char ch;
        if (read(go[0], &ch, 1) != 1)
            _exit(3);
        _exit(0);
    }
    close(p[1]);
    close(go[0]);
    FILE *f = fdopen(p[0], "r");
    char id[160];
    int host;
    double freeing;
    cr_assert_eq(fscanf(f, "%159s %d %lf", id, &host, &freeing), 3);
    fclose(f);
    cr_assert_lt(freeing, 1.0, "freeing the client waited %.3f s for its host", freeing);
    usleep(500 * 1000);
    cr_assert_eq(tu_pid_gone(host), 0, "the host left its attached sandbox: %s",
                 tu_proc_describe(host));
    cr_assert_eq(rows_for(id), 1);
    double t0 = tu_now();
    cr_assert_eq(write(go[1], "x", 1), 1);
    close(go[1]);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    while (rows_for(id) != 0 && tu_now() - t0 < 5.0)
        usleep(20 * 1000);
    cr_assert_eq(rows_for(id), 0, "the sandbox outlived its process by 5 s");
    cr_assert(tu_wait_pid_gone(host, 5.0), "%s", tu_proc_describe(host));
    if (is_dir_backend()) {
        cr_assert_eq(tu_count_entries(g_dirs.tmp), 0);
        cr_assert_eq(tu_wait_spares_gone(g_dirs.tmp, 5.0), 0);
    }
}

/* In process there is no plugin host: a SIGKILLed application's attached
 * sandboxes are reaped by sbx_gc() (every one of them, reason owner_gone). */
typedef struct gc_count {
    int owner_gone, reaped;
} gc_count;

static int count_gc(const sbx_gc_item *item, void *ud)
{
    gc_count *c = ud;
    if (item->reason == SBX_GC_OWNER_GONE)
        c->owner_gone++;
    c->reaped += item->reaped;
    return 0;
}

Test(attached, in_process_gc_reaps_them)
{
    held h;
    start_holder(&h, 5, 1, 1, SBX_PLUGIN_MODE_IN_PROCESS, 0);
    cr_assert_eq(kill(h.child, SIGKILL), 0);
    cr_assert_eq(waitpid(h.child, NULL, 0), h.child);
    cr_assert_eq(rows_where("detached = 0"), 5);
    gc_count n = { 0, 0 };
    cr_assert_eq(sbx_gc(0, count_gc, &n, NULL), 5);
    cr_assert_eq(n.owner_gone, 5);
    cr_assert_eq(n.reaped, 5);
    wait_attached_gone(&h, tu_now(), 5.0);
    destroy_detached(&h);
    held_free(&h);
}

/* ------------------------------------- local and bubblewrap: supervisors */

/* On local or bubblewrap (SBX_TEST_BACKEND as the caller set it): an
 * application in @mode holding 20 attached sandboxes mid-exec and 2
 * detached is SIGKILLed; with @victim 'h', its plugin host first (then
 * the sandboxes live on for the application, their owner). Within 5 s of
 * the application's SIGKILL nothing of the attached ones is left on the
 * host (their supervisors watch the application); the detached ones are
 * untouched. The rows stay (no host was left to remove them) until
 * sbx_gc() reaps them, reason owner_gone; then the test destroys the
 * detached ones. */
static void supervisors_end_them(sbx_plugin_mode mode, char victim)
{
    held h;
    start_holder(&h, 20, 2, 1, mode, 0);
    for (int i = 0; i < h.n; i++)
        assert_there(&h, i);
    if (g_attached_lifetime < 0) {
        for (int i = 0; i < h.n; i++)
            cr_assert_eq(strstr(h.state[i], "\"timeout_secs\":-1,") != NULL, !h.detached[i],
                         "%s", h.state[i]);
        cr_assert_eq(rows_where("detached = 0 AND expires_at = 0"), 20);
    }
    if (victim == 'h') {
        /* Their owner is the application, which lives on: its next call
         * would start a new host that resumes them. (The execs in flight
         * were the host's connections: they end with it.) */
        cr_assert_eq(kill(h.host, SIGKILL), 0);
        cr_assert(tu_wait_pid_gone(h.host, 5.0), "%s", tu_proc_describe(h.host));
        usleep(1000 * 1000);
        for (int i = 0; i < h.n; i++) {
            char *dir = tu_strdup_printf("%s/%s", g_dirs.tmp, h.id[i]);
            cr_assert(tu_exists(dir), "%s went with the plugin host", dir);
            free(dir);
            cr_assert_eq(rows_for(h.id[i]), 1);
        }
    }
    double t0 = tu_now();
    cr_assert_eq(kill(h.child, SIGKILL), 0);
    cr_assert_eq(waitpid(h.child, NULL, 0), h.child);
    double took = wait_attached_ended(&h, t0, 5.0);
    fprintf(stderr, "# %s, %s: 20 attached sandboxes gone %.3f s after the SIGKILL of the "
            "application%s\n", tu_backend(),
            mode == SBX_PLUGIN_MODE_IN_PROCESS ? "in process" : "out of process", took,
            victim == 'h' ? " (its plugin host SIGKILLed before)" : "");
    for (int i = 0; i < h.n; i++)
        if (h.detached[i])
            assert_there(&h, i);
    cr_assert_eq(tu_count_entries(g_dirs.tmp), 2, "more than the detached directories are left");
    cr_assert_eq(tu_wait_spares_gone(g_dirs.tmp, 5.0 - (tu_now() - t0)), 0,
                 "the client's spare directory outlived the application by 5 s");
    long long attached_rows = rows_where("detached = 0");
    if (attached_rows != 20) {
        char *rows = tu_record_dump(g_dirs.state);
        cr_assert_eq(attached_rows, 20, "the record:%s", rows);
        free(rows);
    }
    gc_count n = { 0, 0 };
    cr_assert_eq(sbx_gc(0, count_gc, &n, NULL), 20);
    cr_assert_eq(n.owner_gone, 20);
    cr_assert_eq(rows_where("detached = 0"), 0);
    for (int i = 0; i < h.n; i++)
        if (!h.detached[i])
            assert_not_resumable(&h, i);
    destroy_detached(&h);
    held_free(&h);
}

static void host_sigkill_on_a_dir_backend(void)
{
    supervisors_end_them(SBX_PLUGIN_MODE_OUT_OF_PROCESS, 'h');
}

Test(attached, in_process_sigkill_local)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "local", 1), 0);
    supervisors_end_them(SBX_PLUGIN_MODE_IN_PROCESS, 'a');
}

Test(attached, in_process_sigkill_bubblewrap)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "bubblewrap", 1), 0);
    supervisors_end_them(SBX_PLUGIN_MODE_IN_PROCESS, 'a');
}

/* Attached sandboxes without a lifetime (SBX_TIMEOUT_NONE: the session
 * state says "timeout_secs":-1): their owner is all that bounds them, and
 * its SIGKILL ends them as it ends those with one, in both plugin modes
 * and on local and bubblewrap; sbx_gc() then reaps their rows (their
 * owners are gone; they have no expiry). */
static void no_lifetime_owner_sigkill(const char *backend, sbx_plugin_mode mode)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", backend, 1), 0);
    g_attached_lifetime = SBX_TIMEOUT_NONE;
    if (mode == SBX_PLUGIN_MODE_IN_PROCESS) {
        supervisors_end_them(mode, 'a');
        return;
    }
    held h;
    start_holder(&h, 20, 2, 1, mode, 0);
    for (int i = 0; i < h.n; i++) {
        assert_there(&h, i);
        cr_assert_eq(strstr(h.state[i], "\"timeout_secs\":-1,") != NULL, !h.detached[i],
                     "%s", h.state[i]);
    }
    cr_assert_eq(rows_where("detached = 0 AND expires_at = 0"), 20);
    double t0 = tu_now();
    cr_assert_eq(kill(h.child, SIGKILL), 0);
    cr_assert_eq(waitpid(h.child, NULL, 0), h.child);
    double took = wait_attached_gone(&h, t0, 5.0);
    fprintf(stderr, "# %s, out of process: 20 attached sandboxes without a lifetime gone %.3f s "
            "after the SIGKILL\n", backend, took);
    cr_assert_eq(rows_where("detached = 0"), 0);
    cr_assert_eq(sbx_gc(SBX_GC_DRY_RUN, NULL, NULL, NULL), 0);
    destroy_detached(&h);
    held_free(&h);
}

Test(attached, no_lifetime_sigkill_local_out_of_process)
{
    no_lifetime_owner_sigkill("local", SBX_PLUGIN_MODE_OUT_OF_PROCESS);
}

Test(attached, no_lifetime_sigkill_local_in_process)
{
    no_lifetime_owner_sigkill("local", SBX_PLUGIN_MODE_IN_PROCESS);
}

Test(attached, no_lifetime_sigkill_bubblewrap_out_of_process)
{
    no_lifetime_owner_sigkill("bubblewrap", SBX_PLUGIN_MODE_OUT_OF_PROCESS);
}

Test(attached, no_lifetime_sigkill_bubblewrap_in_process)
{
    no_lifetime_owner_sigkill("bubblewrap", SBX_PLUGIN_MODE_IN_PROCESS);
}

/* Out of process with the plugin host SIGKILLed first: the supervisors,
 * which watch the application, still end them within 5 s of its SIGKILL. */
Test(attached, no_lifetime_host_then_application_sigkill_local)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "local", 1), 0);
    g_attached_lifetime = SBX_TIMEOUT_NONE;
    supervisors_end_them(SBX_PLUGIN_MODE_OUT_OF_PROCESS, 'h');
}

Test(attached, supervisor_watch_plugin_host_sigkill_bubblewrap)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "bubblewrap", 1), 0);
    supervisors_end_them(SBX_PLUGIN_MODE_OUT_OF_PROCESS, 'h');
}

/* The supervisor_pid of sandbox @id's record file (META/record). */
static pid_t supervisor_pid(const char *id)
{
    char *path = tu_strdup_printf("%s/%s/record", g_dirs.tmp, id);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strstr(buf, "\"supervisor_pid\":");
    cr_assert_not_null(p, "%s: %s", path, buf);
    free(path);
    return (pid_t)atoi(p + strlen("\"supervisor_pid\":"));
}

/* The supervisor of a sandbox SIGKILLed (its application alive, @mode):
 * within 5 s its command, directory, keeper (and bwrap), processes and
 * mounts are gone; the other sandbox of the application is untouched.
 * Run on local and bubblewrap, in both modes. */
static void supervisor_sigkill(sbx_plugin_mode mode)
{
    held h;
    start_holder(&h, 2, 0, 1, mode, 0);
    pid_t sup = supervisor_pid(h.id[0]);
    cr_assert_gt(sup, 1);
    double t0 = tu_now();
    cr_assert_eq(kill(sup, SIGKILL), 0);
    held one = h;
    one.n = 1;
    double took = wait_attached_ended(&one, t0, 5.0);
    fprintf(stderr, "# %s, %s: nothing of the sandbox left %.3f s after its supervisor's "
            "SIGKILL\n", tu_backend(),
            mode == SBX_PLUGIN_MODE_IN_PROCESS ? "in process" : "out of process", took);
    assert_there(&h, 1);
    /* The exec in flight fails with not_found, and the library, finding
     * the sandbox gone, removes its row. */
    while (rows_for(h.id[0]) != 0 && tu_now() - t0 < 5.0)
        usleep(20 * 1000);
    cr_assert_eq(rows_for(h.id[0]), 0, "the row of the sandbox whose supervisor was killed "
                 "is still there");
    cr_assert_eq(kill(h.child, SIGKILL), 0);
    cr_assert_eq(waitpid(h.child, NULL, 0), h.child);
    if (mode == SBX_PLUGIN_MODE_IN_PROCESS)
        cr_assert_eq(sbx_gc(0, NULL, NULL, NULL), 1);
    wait_attached_gone(&h, t0, 10.0);
    cr_assert_eq(rows_where("1"), 0);
    held_free(&h);
}

Test(attached, supervisor_sigkill_local)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "local", 1), 0);
    supervisor_sigkill(SBX_PLUGIN_MODE_OUT_OF_PROCESS);
}

Test(attached, supervisor_sigkill_local_in_process)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "local", 1), 0);
    supervisor_sigkill(SBX_PLUGIN_MODE_IN_PROCESS);
}

Test(attached, supervisor_sigkill_bubblewrap)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "bubblewrap", 1), 0);
    supervisor_sigkill(SBX_PLUGIN_MODE_IN_PROCESS);
}

Test(attached, supervisor_sigkill_bubblewrap_out_of_process)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "bubblewrap", 1), 0);
    supervisor_sigkill(SBX_PLUGIN_MODE_OUT_OF_PROCESS);
}

/* --------------------------------------------- local: the client's spare */

/* The pid of the process listening on spare @spare's socket (its warm
 * supervisor), as SO_PEERCRED names it; asserts. */
static pid_t spare_supervisor(const char *spare)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/sock", spare);
    int fd = -1, rc = -1;
    /* Bound a moment before it listens. */
    for (double end = tu_now() + 5.0; rc < 0 && tu_now() < end;) {
        if (fd >= 0)
            close(fd);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(fd >= 0);
        rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        if (rc < 0)
            usleep(2000);
    }
    cr_assert_eq(rc, 0, "%s: %s", sa.sun_path, strerror(errno));
    struct ucred cred = { 0 };
    socklen_t len = sizeof cred;
    cr_assert_eq(getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len), 0);
    close(fd);
    return cred.pid;
}

/* The names of the spares in @dir once there are @want of them, each with
 * its socket listening, waiting up to 5 s (names[i] freed by the caller);
 * asserts. */
static void find_spares(const char *dir, size_t want, char **names)
{
    double end = tu_now() + 5.0;
    size_t n = 0;
    for (;;) {
        n = 0;
        DIR *d = opendir(dir);
        cr_assert_not_null(d);
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strncmp(e->d_name, ".sbx-spare-", 11) == 0 && n < 8)
                names[n++] = strdup(e->d_name);
        closedir(d);
        size_t ready = 0;
        for (size_t i = 0; i < n && n == want; i++) {
            char *sock = tu_strdup_printf("%s/%s/sock", dir, names[i]);
            ready += tu_exists(sock);
            free(sock);
        }
        if (ready == want || tu_now() >= end)
            break;
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        usleep(5000);
    }
    cr_assert_eq(n, want, "%zu spare directories in %s, not %zu", n, dir, want);
}

/* An in-process local client whose warm supervisors have made their
 * spares: one sandbox created and destroyed (the destroy starts the next
 * fill), the client's spare and the one its spawner keeps ready, their
 * names in @names[0..1]; asserts. */
static sbx_client *client_with_spares(char **names)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_mode("local", SBX_PLUGIN_MODE_IN_PROCESS, &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    find_spares(g_dirs.tmp, 2, names);
    return c;
}

/* A local client makes the next sandbox's directory ahead, in its warm
 * supervisor (a spare, .sbx-spare-*, its root, tmp/ and socket in it), and
 * its spawner keeps one more ready. Each supervisor SIGKILLed: within 5 s
 * its directory and it are gone; the client's next create still works
 * (without them), and freeing the client leaves no spare behind. */
Test(attached, killed_spare_leaves_nothing)
{
    cr_assert_eq(setenv("SBX_TEST_BACKEND", "local", 1), 0);
    sbx_error *err = NULL;
    char *names[8];
    sbx_client *c = client_with_spares(names);
    sbx_sandbox *sb;
    cr_assert_eq(tu_count_entries(g_dirs.tmp), 0);
    for (int i = 0; i < 2; i++) {
        char *spare = tu_strdup_printf("%s/%s", g_dirs.tmp, names[i]);
        struct stat st;
        cr_assert_eq(stat(spare, &st), 0);
        cr_assert_eq(st.st_mode & 0777, 0700, "%s has mode %o", spare, st.st_mode & 0777);
        char *tmp = tu_strdup_printf("%s/root/tmp", spare);
        cr_assert_eq(stat(tmp, &st), 0, "%s: %s", tmp, strerror(errno));
        cr_assert(S_ISDIR(st.st_mode));
        free(tmp);
        char *sock = tu_strdup_printf("%s/sock", spare);
        cr_assert_eq(stat(sock, &st), 0, "%s: %s", sock, strerror(errno));
        cr_assert(S_ISSOCK(st.st_mode));
        free(sock);

        pid_t sup = spare_supervisor(spare);
        cr_assert_gt(sup, 1, "no supervisor listens in %s", spare);
        double t0 = tu_now();
        cr_assert_eq(kill(sup, SIGKILL), 0);
        while (tu_exists(spare) && tu_now() - t0 < 5.0)
            usleep(5000);
        cr_assert(!tu_exists(spare), "%s is still there %.1f s after its supervisor's SIGKILL",
                  spare, tu_now() - t0);
        cr_assert(tu_wait_pid_gone(sup, 5.0 - (tu_now() - t0)), "%s", tu_proc_describe(sup));
        fprintf(stderr, "# a SIGKILLed spare's directory gone %.3f s later\n", tu_now() - t0);
        free(spare);
        free(names[i]);
    }

    sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_result *r = sbx_sandbox_execute_shell(sb, "echo hi", &err);
    cr_assert_not_null(r, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    /* Made again: the client's and the spawner's. */
    find_spares(g_dirs.tmp, 2, names);
    free(names[0]);
    free(names[1]);
    sbx_client_free(c);
    cr_assert_eq(tu_wait_spares_gone(g_dirs.tmp, 0), 0, "freeing the client left a spare");
    cr_assert_eq(tu_count_entries(g_dirs.tmp), 0);
}

/* A create that takes the client's spare and then fails (its workdir's
 * tmp is a file) leaves nothing of it: that spare's directory is gone when
 * create returns (the spawner's ready one stays), and the caller's workdir
 * is as it was. A workdir that works takes the next spare: its unused root
 * goes, and the sandbox runs in the workdir. */
Test(attached, a_failed_create_with_a_spare_leaves_nothing)
{
    sbx_error *err = NULL;
    char *names[8], *after[8];
    sbx_client *c = client_with_spares(names);
    sbx_sandbox *sb;

    char *wd = tu_strdup_printf("%s/wd", g_dirs.top);
    char *file = tu_strdup_printf("%s/wd/tmp", g_dirs.top);
    cr_assert_eq(mkdir(wd, 0700), 0);
    tu_write_file(file, "x", 1, 0600);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    sb = sbx_sandbox_create(c, o, &err);
    cr_assert_null(sb, "a create whose workdir's tmp is a file worked");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CREATION_FAILED, "%s",
                 sbx_error_get0_message(err));
    cr_assert(strstr(sbx_error_get0_message(err), file), "%s", sbx_error_get0_message(err));
    sbx_error_free(err);
    err = NULL;
    /* One of the two is left: the spawner's. */
    find_spares(g_dirs.tmp, 1, after);
    cr_assert(strcmp(after[0], names[0]) == 0 || strcmp(after[0], names[1]) == 0,
              "%s is neither %s nor %s", after[0], names[0], names[1]);
    free(after[0]);
    free(names[0]);
    free(names[1]);
    cr_assert_eq(tu_count_entries(g_dirs.tmp), 0);
    struct stat st;
    cr_assert_eq(stat(file, &st), 0);
    cr_assert(S_ISREG(st.st_mode));

    /* The next create (cold) and its destroy make a spare again; one with
     * a workdir that works takes it. */
    cr_assert_eq(unlink(file), 0);
    sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    find_spares(g_dirs.tmp, 2, names);
    free(names[0]);
    free(names[1]);
    sb = sbx_sandbox_create(c, o, &err);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    char *meta = tu_strdup_printf("%s/%s", g_dirs.tmp, sbx_sandbox_get0_id(sb));
    char *unused = tu_strdup_printf("%s/root", meta);
    cr_assert(tu_exists(meta), "%s", meta);
    cr_assert(!tu_exists(unused), "%s is left in a sandbox with a workdir", unused);
    sbx_result *r = sbx_sandbox_execute_shell(sb, "pwd; ls -d \"$TMPDIR\"", &err);
    cr_assert_not_null(r, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_exit(r, 0);
    char *want = tu_strdup_printf("%s\n%s\n", wd, file);
    tu_assert_stdout(r, want);
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    cr_assert(!tu_exists(file), "the tmp/ create made in the workdir is left");
    sbx_options_free(o);
    sbx_client_free(c);
    cr_assert_eq(tu_wait_spares_gone(g_dirs.tmp, 0), 0);
    cr_assert_eq(tu_count_entries(g_dirs.tmp), 0);
    free(want);
    free(unused);
    free(meta);
    free(file);
    free(wd);
}

/* ------------------------------------------------ SIGKILL mid-create */

/*
 * The application SIGKILLed while its create is in flight in the plugin
 * host, after the provider made the sandbox (the "faulty" backend's create
 * holds for up to 3 s once HOLD/ID exists, as a container that exists but
 * has not started yet): the host finishes that create before it exits. A
 * create that honours the cancel removes what it made; one that ignores it
 * (@deaf) returns a sandbox, which the host destroys as any attached one.
 * Either way HOLD ends empty, the host is gone within 5 s and no row is
 * left for gc.
 */
static void sigkill_mid_create(int deaf)
{
    char *hold = tu_strdup_printf("%s/hold", g_dirs.top);
    char *started = tu_strdup_printf("%s/started", g_dirs.top);
    int p[2];

    cr_assert_eq(mkdir(hold, 0700), 0);
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        setenv("SBX_FAULT_CREATE_HOLD", hold, 1);
        setenv("SBX_FAULT_STARTED", started, 1);
        if (deaf)
            setenv("SBX_FAULT_CREATE_DEAF", "1", 1);
        sbx_error *err = NULL;
        sbx_client *c = sbx_client_new_with_mode("faulty", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
        if (!c) {
            dprintf(p[1], "E client: %s\n", sbx_error_get0_message(err));
            _exit(2);
        }
        dprintf(p[1], "H %d\n", sbx_client_get_host_pid(c));
        sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
        /* Not reached before the SIGKILL: the create holds for 1.5 s or more. */
        dprintf(p[1], "E create returned %s\n", sb ? "a sandbox" : sbx_error_get0_message(err));
        _exit(3);
    }
    close(p[1]);
    char line[512];
    ssize_t n = read(p[0], line, sizeof(line) - 1);
    cr_assert_gt(n, 0);
    line[n] = '\0';
    cr_assert_eq(line[0], 'H', "the application failed: %s", line);
    pid_t host = (pid_t)atoi(line + 2);
    cr_assert(host > 0 && tu_is_plugin_host(host), "no plugin host: %d", (int)host);
    double t0 = tu_now();
    while (!tu_exists(started) && tu_now() - t0 < 20)
        usleep(5000);
    cr_assert(tu_exists(started), "the create never reached the provider's part");
    cr_assert_eq(tu_count_entries(hold), 1, "the provider's resource is not there");

    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    t0 = tu_now();
    cr_assert(tu_wait_pid_gone(host, 5.0), "%s", tu_proc_describe(host));
    fprintf(stderr, "# %s create: plugin host gone %.3f s after the SIGKILL\n",
            deaf ? "a deaf" : "a cancellable", tu_now() - t0);
    cr_assert_eq(tu_count_entries(hold), 0,
                 "the sandbox made by the create in flight outlived its application");
    cr_assert_eq(rows_where("1"), deaf ? 0 : 1, "rows left");
    close(p[0]);
    rmdir(hold);
    unlink(started);
    free(hold);
    free(started);
}

Test(attached, sigkill_mid_create_the_cancelled_create_removes_what_it_made)
{
    sigkill_mid_create(0);
}

Test(attached, sigkill_mid_create_the_sandbox_it_returns_is_destroyed)
{
    sigkill_mid_create(1);
}

/* ------------------------------------------------- SIGKILL mid-exec */

/*
 * The application SIGKILLed while a command of a detached sandbox runs (the
 * sandbox outlives it, as after `sbx create`): the command's tree ends
 * within 5 s on every backend, as the application's free of the process
 * would have ended it, and the sandbox itself stays. On docker the exec's
 * process lived on in the container until the plugin host freed the
 * processes the application left.
 */
Test(attached, sigkill_mid_exec_ends_the_command_and_keeps_the_detached_sandbox)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        sbx_error *err = NULL;
        sbx_client *c = sbx_client_new_with_mode(tu_backend(), SBX_PLUGIN_MODE_OUT_OF_PROCESS,
                                                 &err);
        if (!c) {
            dprintf(p[1], "E client: %s\n", sbx_error_get0_message(err));
            _exit(2);
        }
        sbx_options *d = sbx_options_new();
        sbx_options_set_timeout_secs(d, 600, NULL);
        sbx_options_set_detached(d, 1, NULL);
        sbx_sandbox *sb = sbx_sandbox_create(c, d, &err);
        if (!sb) {
            dprintf(p[1], "E create: %s\n", sbx_error_get0_message(err));
            _exit(2);
        }
        char *state = sbx_sandbox_session_state(sb, NULL);
        dprintf(p[1], "S %d %s\n", sbx_client_get_host_pid(c), state ? state : "-");
        close(p[1]);
        /* Never returns while the sandbox lives. */
        sbx_result *r = sbx_sandbox_execute_shell(sb, "echo $$ > exec.pid; exec sleep 100",
                                                  NULL);
        sbx_result_free(r);
        _exit(3);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    cr_assert_not_null(f);
    char *line = NULL;
    size_t cap = 0;
    cr_assert_gt(getline(&line, &cap, f), 0);
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    cr_assert_eq(line[0], 'S', "the application failed: %s", line);
    int used = 0, host = 0;
    cr_assert_eq(sscanf(line, "S %d %n", &host, &used), 1, "%s", line);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_resume(line + used, &err);
    cr_assert_not_null(sb, "resume: %s", err ? sbx_error_get0_message(err) : "");
    /* The command runs: its pid file is there and the process answers. */
    sbx_result *r = NULL;
    double t0 = tu_now();
    for (;;) {
        r = tu_sh(sb, "kill -0 \"$(cat exec.pid 2>/dev/null)\" 2>/dev/null; echo $?", 10);
        if (strcmp(sbx_result_get0_stdout(r, NULL), "0\n") == 0 || tu_now() - t0 > 20)
            break;
        sbx_result_free(r);
        usleep(50 * 1000);
    }
    tu_assert_stdout(r, "0\n");
    sbx_result_free(r);

    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    t0 = tu_now();
    cr_assert(tu_wait_pid_gone((pid_t)host, 5.0), "%s", tu_proc_describe((pid_t)host));
    for (;;) {
        r = tu_sh(sb, "kill -0 \"$(cat exec.pid)\" 2>/dev/null; echo $?", 10);
        if (strcmp(sbx_result_get0_stdout(r, NULL), "1\n") == 0 || tu_now() - t0 > 5.0)
            break;
        sbx_result_free(r);
        usleep(50 * 1000);
    }
    fprintf(stderr, "# the command of a detached sandbox ended %.3f s after the SIGKILL of "
            "its application\n", tu_now() - t0);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_is_alive(sb, &err), 1, "the detached sandbox went too");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    free(line);
}
