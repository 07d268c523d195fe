/*
 * The conformance suite (CONFORMANCE.md): sections Lifecycle, Exec and
 * Errors, with the exact values given there, on the backend named by
 * $SBX_TEST_BACKEND (default "local"). Shell commands address files as
 * "$SANDBOX_ROOT/..." so they hold where the sandbox owns / too.
 *
 * Every test runs in its own process with TMPDIR set to a fresh directory
 * made by the fixture, so that what a sandbox leaves on the host is
 * checked exactly: on local that directory must be empty after destroy.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "testutil.h"

static char *g_tmp;           /* this test's TMPDIR */
static sbx_client *g_client;  /* client of the backend under test */
static sbx_sandbox *g_sb;     /* the fixture's sandbox */
static const char *g_root;    /* its SANDBOX_ROOT */

static void client_setup(void)
{
    g_tmp = tu_fresh_tmpdir();
    /* Must never reach a command: the command environment is built from
     * scratch, not from the caller's. */
    setenv("SBX_TEST_CANARY", "leaked", 1);
    sbx_error *err = NULL;
    g_client = sbx_client_new(tu_backend(), &err);
    cr_assert_null(err, "sbx_client_new(%s): %s", tu_backend(),
                   err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(g_client);
}

static void sandbox_setup(void)
{
    client_setup();
    g_sb = tu_create(g_client, NULL);
    g_root = sbx_sandbox_get0_root(g_sb);
    cr_assert_not_null(g_root);
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

TestSuite(lifecycle, .init = sandbox_setup, .fini = teardown, .timeout = 60);
TestSuite(creation, .init = client_setup, .fini = teardown, .timeout = 60);
TestSuite(exec, .init = sandbox_setup, .fini = teardown, .timeout = 60);
TestSuite(errors, .init = sandbox_setup, .fini = teardown, .timeout = 60);
TestSuite(concurrency, .init = client_setup, .fini = teardown, .timeout = 120);

/* The host path of sandbox path @p (the root joined with it). free(). */
static char *host_path(const char *p)
{
    return tu_strdup_printf("%s%s", g_root, p);
}

/* Runs `test -e PATH; echo $?` in @sb: "0\n" when it exists. */
static int sandbox_file_exists(sbx_sandbox *sb, const char *sandbox_path)
{
    char *s = tu_strdup_printf("test -e \"$SANDBOX_ROOT%s\"; printf %%s $?", sandbox_path);
    sbx_result *r = tu_sh(sb, s, 10);
    free(s);
    tu_assert_exit(r, 0);
    const char *out = sbx_result_get0_stdout(r, NULL);
    int exists = strcmp(out, "0") == 0;
    cr_assert(exists || strcmp(out, "1") == 0, "test -e printed \"%s\"", out);
    sbx_result_free(r);
    return exists;
}

/* Common checks of an error from a call on a sandbox of the backend. */
static void assert_backend_error(const sbx_error *err, sbx_error_code code)
{
    tu_assert_error(err, code, NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    cr_assert_neq(sbx_error_get0_op(err)[0], '\0', "error without op: %s",
                  sbx_error_get0_message(err));
    cr_assert_neq(sbx_error_get0_message(err)[0], '\0');
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    char *s = sbx_error_to_string(err);
    char *want = tu_expected_error_string(err);
    cr_assert_str_eq(s, want);
    free(s);
    free(want);
}

/* ================================================================ Lifecycle */

Test(lifecycle, create_gives_live_sandbox)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1);
    cr_assert_null(err);
    cr_assert_str_eq(sbx_sandbox_get0_backend(g_sb), tu_backend());
    cr_assert_str_eq(sbx_client_get0_backend(g_client), tu_backend());
    const char *id = sbx_sandbox_get0_id(g_sb);
    cr_assert_not_null(id);
    cr_assert_neq(id[0], '\0');

    /* SANDBOX_ROOT in commands is sbx_sandbox_get0_root(). */
    sbx_result *r = tu_sh(g_sb, "printf '%s' \"$SANDBOX_ROOT\"", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, g_root);
    tu_assert_stderr(r, "");
    sbx_result_free(r);
    cr_assert_eq(sandbox_file_exists(g_sb, "/tmp"), 1, "$SANDBOX_ROOT/tmp is missing");

    if (tu_backend_is_local()) {
        /* The sandbox is a root directory under a metadata directory
         * ${TMPDIR}/sbx-local-XXXXXX (safehouse: sbx-safehouse-XXXXXX) whose
         * basename is the id. */
        cr_assert_eq(g_root[0], '/', "root \"%s\" is not absolute", g_root);
        struct stat st;
        cr_assert_eq(stat(g_root, &st), 0, "root %s: %s", g_root, strerror(errno));
        cr_assert(S_ISDIR(st.st_mode));
        char *tmp = host_path("/tmp");
        cr_assert_eq(stat(tmp, &st), 0);
        cr_assert(S_ISDIR(st.st_mode));
        free(tmp);
        cr_assert_eq(tu_count_entries(g_tmp), 1, "%s holds %d entries", g_tmp,
                     tu_count_entries(g_tmp));
        char *meta = tu_strdup_printf("%s/%s", g_tmp, id);
        cr_assert_eq(stat(meta, &st), 0, "no metadata directory %s", meta);
        cr_assert(S_ISDIR(st.st_mode));
        const char *prefix = strcmp(tu_backend(), "safehouse") == 0 ? "sbx-safehouse-"
                                                                     : "sbx-local-";
        cr_assert_eq(strncmp(id, prefix, strlen(prefix)), 0, "id \"%s\"", id);
        free(meta);
    }
}

Test(lifecycle, destroy_ends_sandbox)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 0);
    cr_assert_null(err, "is_alive after destroy: %s", err ? sbx_error_get0_message(err) : "");
    /* A second destroy is a no-op that succeeds. */
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);

    /* Every other call is not_found, never a crash. */
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo hi";
    err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    assert_backend_error(err, SBX_ERROR_NOT_FOUND);
    sbx_error_free(err);

    const char *argv[] = {"echo", "hi", NULL};
    sbx_exec_request areq = SBX_EXEC_REQUEST_INIT;
    areq.argv = argv;
    err = tu_exec_fail(g_sb, &areq, SBX_ERROR_NOT_FOUND);
    sbx_error_free(err);

    err = NULL;
    cr_assert_null(sbx_sandbox_execute_shell(g_sb, "echo hi", &err));
    assert_backend_error(err, SBX_ERROR_NOT_FOUND);
    sbx_error_clear(&err);
    cr_assert_null(sbx_sandbox_execute_code(g_sb, NULL, "print(1)", NULL, &err));
    assert_backend_error(err, SBX_ERROR_NOT_FOUND);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 0);
}

/* Starts background processes three ways (plain, own session, orphaned by
 * a subshell) and returns their pids. */
static size_t start_background(sbx_sandbox *sb, pid_t *pids, size_t max)
{
    sbx_result *r = tu_sh(sb,
        "P=\"$SANDBOX_ROOT/tmp/pids\"; "
        "sleep 1000 >/dev/null 2>&1 </dev/null & echo $! >> \"$P\"; "
        "setsid sleep 1001 >/dev/null 2>&1 </dev/null & echo $! >> \"$P\"; "
        "( sleep 1002 >/dev/null 2>&1 </dev/null & echo $! >> \"$P\" ); "
        "echo started", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "started\n");
    sbx_result_free(r);
    size_t n = tu_read_pids(sb, "$SANDBOX_ROOT/tmp/pids", pids, max);
    cr_assert_eq(n, 3);
    return n;
}

/* Backends whose sandboxes are containers of this host's Docker Engine. */
static int backend_is_docker(void)
{
    return strcmp(tu_backend(), "docker") == 0;
}

/*
 * nothing_left_behind on docker: the container's processes are processes of
 * this host, each with HOSTNAME=<first 12 characters of the id> in its
 * environment. After destroy all of them are gone, the sandbox is not
 * alive, and its session state resumes to not_found (the Engine no longer
 * has the container).
 */
static void nothing_left_behind_docker(void)
{
    pid_t pids[8];
    start_background(g_sb, pids, 8);
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state, "session_state: %s", err ? sbx_error_get0_message(err) : "");
    char *env_mark = tu_strdup_printf("HOSTNAME=%.12s", sbx_sandbox_get0_id(g_sb));
    pid_t before[64];
    size_t nbefore = tu_procs_mentioning(env_mark, before, 48);
    /* docker-init, the lifetime sleep and the three background sleeps. */
    cr_assert(nbefore >= 5, "only %zu processes of the container found before destroy",
              nbefore);
    cr_assert(nbefore < 48);

    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);
    for (size_t i = 0; i < nbefore; i++)
        cr_assert(tu_wait_pid_gone(before[i], 10.0), "process %s survived destroy",
                  tu_proc_describe(before[i]));
    pid_t after[8];
    cr_assert_eq(tu_procs_mentioning(env_mark, after, 8), 0, "a container process survived");
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 0);
    cr_assert_null(err);
    cr_assert_null(sbx_resume(state, &err), "the destroyed sandbox resumed");
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, NULL);
    sbx_error_free(err);
    free(state);
    free(env_mark);
}

static int backend_is_bubblewrap(void)
{
    return strcmp(tu_backend(), "bubblewrap") == 0;
}

static int in_pidns(pid_t pid, void *ns)
{
    char link[64], target[64];
    snprintf(link, sizeof link, "/proc/%d/ns/pid", (int)pid);
    ssize_t l = tu_pid_gone(pid) ? -1 : readlink(link, target, sizeof target - 1);
    if (l <= 0)
        return 0;
    target[l] = '\0';
    return strcmp(target, ns) == 0;
}

static int child_of_pid(pid_t pid, void *parent)
{
    return tu_ppid(pid) == *(pid_t *)parent;
}

/* The host pids of the processes in pid namespace @ns ("pid:[N]"). */
static size_t procs_in_pidns(const char *ns, pid_t *pids, size_t max)
{
    return tu_pids_where(in_pidns, (void *)ns, pids, max);
}

/*
 * nothing_left_behind on bubblewrap: one bwrap process per sandbox (its
 * command line names the sandbox's directory, so its id), whose only child
 * is the supervisor, pid 1 of the sandbox's pid namespace. After destroy
 * bwrap and every process of that namespace are gone, and so is the
 * sandbox's directory.
 */
static void nothing_left_behind_bubblewrap(void)
{
    pid_t inner[8];
    start_background(g_sb, inner, 8);
    const char *id = sbx_sandbox_get0_id(g_sb);
    pid_t bw[1] = { tu_bwrap_pid(id) };
    pid_t sups[2] = { 0, 0 }, sup;
    size_t nsup = tu_pids_where(child_of_pid, &bw[0], sups, 2);
    cr_assert(nsup < 2, "bwrap %d has two children", (int)bw[0]);
    sup = sups[0];
    cr_assert(sup > 1, "bwrap %d has no child", (int)bw[0]);
    char link[64], ns[64];
    snprintf(link, sizeof link, "/proc/%d/ns/pid", (int)sup);
    ssize_t l = readlink(link, ns, sizeof ns - 1);
    cr_assert(l > 0);
    ns[l] = '\0';
    /* Held open, the namespace keeps its inode number (ended, its
     * number would go to the next one made: the client's next warm
     * sandbox, made as soon as this one is destroyed). */
    int nsfd = open(link, O_RDONLY | O_CLOEXEC);
    cr_assert(nsfd >= 0, "open %s: %s", link, strerror(errno));
    pid_t before[64];
    size_t nbefore = procs_in_pidns(ns, before, 64);
    /* The supervisor, its idle reaper, the three sleeps. */
    cr_assert(nbefore >= 5, "only %zu processes in the sandbox's namespace", nbefore);
    cr_assert(nbefore < 64);
    char *meta = tu_strdup_printf("%s/%s", g_tmp, id);
    cr_assert(tu_exists(meta), "%s is not the sandbox's directory", meta);

    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);
    cr_assert(tu_wait_pid_gone(bw[0], 5.0), "bwrap %d survived destroy", (int)bw[0]);
    for (size_t i = 0; i < nbefore; i++)
        cr_assert(tu_wait_pid_gone(before[i], 5.0), "process %s survived destroy",
                  tu_proc_describe(before[i]));
    pid_t after[8];
    cr_assert_eq(procs_in_pidns(ns, after, 8), 0, "a process of the sandbox survived");
    close(nsfd);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 0);
    cr_assert_null(err);
    cr_assert(!tu_exists(meta), "destroy left %s", meta);
    free(meta);
}

/* sbx_client_list_owned() counts what it reports; records the fixture's. */
typedef struct {
    const char *want;
    int found;
    char token[128];
} owned_seen;

static int on_owned(const sbx_owned_sandbox *s, void *ud)
{
    owned_seen *o = ud;
    if (strcmp(s->id, o->want) == 0) {
        o->found++;
        snprintf(o->token, sizeof o->token, "%s", s->create_token);
    }
    return 0;
}

/* The capability bits the fixture's client has here. */
static uint64_t client_caps(void)
{
    uint64_t caps = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), 0, "probe: %s",
                 err ? sbx_error_get0_message(err) : "");
    return caps;
}

/*
 * nothing_left_behind on any other isolated backend (a hosted provider, or
 * its contract fake): three background processes started in the sandbox,
 * each with a marker of this test in its environment, end with destroy;
 * the sandbox is not alive, its session state resumes to not_found, and
 * with SBX_CAP_LIST_OWNED list_owned no longer names it. Where the
 * sandbox's processes are processes of this host (the test script sets
 * SBX_TEST_SANDBOX_PROCS_ON_HOST=1 for a contract fake, whose sandboxes
 * run real processes here), the marked processes are found before destroy
 * and none is left after it.
 */
static void nothing_left_behind_isolated(uint64_t caps)
{
    const char *on_host = getenv("SBX_TEST_SANDBOX_PROCS_ON_HOST");
    char *mark = tu_strdup_printf("SBX_TEST_MARK=nothing-left-%d-%ld", (int)getpid(),
                                  (long)time(NULL));
    const char *env[] = { mark, NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 1000 >/dev/null 2>&1 </dev/null & "
                "setsid sleep 1001 >/dev/null 2>&1 </dev/null & "
                "( sleep 1002 >/dev/null 2>&1 </dev/null & ); echo started";
    req.env = env;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "started\n");
    sbx_result_free(r);
    /* Counted until all three are seen (2 s at most): a process caught in
     * the middle of its exec shows an empty environ for a moment. */
    r = tu_sh(g_sb, "for t in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do n=0; "
                    "for d in /proc/[0-9]*; do "
                    "tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -q '^SBX_TEST_MARK=' "
                    "&& n=$((n+1)); done; [ $n -ge 3 ] && break; sleep 0.1; done; echo $n", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "3\n");
    sbx_result_free(r);
    pid_t before[16];
    size_t nbefore = tu_procs_mentioning(mark, before, 16);
    if (on_host && strcmp(on_host, "1") == 0)
        cr_assert_eq(nbefore, 3, "%zu processes of this host carry %s before destroy", nbefore,
                     mark);
    sbx_error *err = NULL;
    char *state = (caps & SBX_CAP_RESUME) ? sbx_sandbox_session_state(g_sb, &err) : NULL;
    cr_assert((state != NULL) == ((caps & SBX_CAP_RESUME) != 0), "session_state: %s",
              err ? sbx_error_get0_message(err) : "");
    char *id = strdup(sbx_sandbox_get0_id(g_sb));

    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);
    for (size_t i = 0; i < nbefore; i++)
        cr_assert(tu_wait_pid_gone(before[i], 5.0), "process %s survived destroy",
                  tu_proc_describe(before[i]));
    pid_t after[4];
    cr_assert_eq(tu_procs_mentioning(mark, after, 4), 0, "a marked process survived destroy");
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 0);
    cr_assert_null(err);
    if (state) {
        cr_assert_null(sbx_resume(state, &err), "the destroyed sandbox resumed");
        tu_assert_error(err, SBX_ERROR_NOT_FOUND, NULL);
        sbx_error_free(err);
        err = NULL;
    }
    if (caps & SBX_CAP_LIST_OWNED) {
        owned_seen seen = { .want = id };
        cr_assert(sbx_client_list_owned(g_client, on_owned, &seen, &err) >= 0, "list_owned: %s",
                  err ? sbx_error_get0_message(err) : "");
        cr_assert_eq(seen.found, 0, "%s is still listed after destroy", id);
    }
    free(id);
    free(state);
    free(mark);
}

Test(lifecycle, nothing_left_behind)
{
    if (backend_is_docker()) {
        nothing_left_behind_docker();
        return;
    }
    if (backend_is_bubblewrap()) {
        nothing_left_behind_bubblewrap();
        return;
    }
    uint64_t caps = client_caps();
    /* Remote: its processes are the control plane's upstream's (on this
     * host, SBX_TEST_SANDBOX_PROCS_ON_HOST, but not under this test's
     * directory): found by their mark, as on an isolated backend. */
    if ((caps & SBX_CAP_ISOLATION) || strcmp(tu_backend(), "remote") == 0) {
        nothing_left_behind_isolated(caps);
        return;
    }
    /* Not isolated: the sandbox's processes are this host's, under its
     * root. */
    pid_t pids[8];
    size_t n = start_background(g_sb, pids, 8);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(tu_pid_gone(pids[i]), 0, "background pid %d died before destroy",
                     (int)pids[i]);
    /* The three sleeps mention this test's TMPDIR (cwd and environment
     * under the root). */
    pid_t before[64];
    size_t nbefore = tu_procs_mentioning(g_tmp, before, 64);
    cr_assert(nbefore >= 3, "only %zu processes of the sandbox found before destroy",
              nbefore);
    /* The orphaned sleep was adopted by the sandbox's supervisor (its
     * subreaper), which must end with the sandbox too. */
    pid_t sup = tu_ppid(pids[2]);
    cr_assert(sup > 1 && sup != getpid(), "orphaned sleep %d has parent %d", (int)pids[2],
              (int)sup);
    const char *sup_bin = getenv("SBX_SUPERVISOR");
    if (sup_bin) {
        char *exe = tu_strdup_printf("/proc/%d/exe", (int)sup);
        struct stat a, b;
        cr_assert_eq(stat(exe, &a), 0);
        cr_assert_eq(stat(sup_bin, &b), 0);
        cr_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino,
                  "parent %d of the orphaned sleep is not %s", (int)sup, sup_bin);
        free(exe);
    }
    cr_assert(nbefore < 64);
    before[nbefore++] = sup;
    char *root = strdup(g_root);
    cr_assert(tu_exists(root));

    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);

    for (size_t i = 0; i < n; i++)
        cr_assert(tu_wait_pid_gone(pids[i], 5.0), "background pid %d survived destroy",
                  (int)pids[i]);
    for (size_t i = 0; i < nbefore; i++)
        cr_assert(tu_wait_pid_gone(before[i], 5.0), "process %d survived destroy",
                  (int)before[i]);
    pid_t after[64];
    size_t nafter = tu_procs_mentioning(g_tmp, after, 64);
    cr_assert_eq(nafter, 0, "%zu processes still mention %s (first: %d)", nafter, g_tmp,
                 nafter ? (int)after[0] : 0);
    cr_assert_eq(tu_exists(root), 0, "root %s survived destroy", root);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "%s is not empty after destroy", g_tmp);
    free(root);
}

Test(lifecycle, sbx_create_shorthand)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_create(tu_backend(), NULL, &err);
    cr_assert_null(err, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_not_null(sb);
    cr_assert_str_eq(sbx_sandbox_get0_backend(sb), tu_backend());
    sbx_result *r = tu_sh(sb, "echo shorthand", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "shorthand\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 0);
    sbx_sandbox_free(sb); /* frees its client too */
}

Test(lifecycle, sandboxes_are_distinct)
{
    sbx_sandbox *other = tu_create(g_client, NULL);
    cr_assert_str_neq(sbx_sandbox_get0_id(other), sbx_sandbox_get0_id(g_sb));
    if (g_root[0])
        cr_assert_str_neq(sbx_sandbox_get0_root(other), g_root);
    sbx_result *r = tu_sh(g_sb, "echo one > \"$SANDBOX_ROOT/tmp/f\"", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert_eq(sandbox_file_exists(other, "/tmp/f"), 0);
    cr_assert_eq(sbx_sandbox_destroy(other, NULL), 0);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1, "destroying one sandbox ended another");
    cr_assert_eq(sandbox_file_exists(g_sb, "/tmp/f"), 1);
    sbx_sandbox_free(other);
}

/* ================================================================= Creation */

/* Runs @cmd with /bin/sh on the host; asserts exit 0. */
static void host_sh(const char *cmd)
{
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "host command failed (%d): %s", rc, cmd);
}

/* A git repository at @dir with hello.txt on the default branch and
 * branch.txt on branch "feature". */
static void make_git_repo(const char *dir)
{
    char *cmd = tu_strdup_printf(
        "set -e; mkdir -p '%s'; cd '%s'; "
        "git init -q -b main . ; "
        "printf 'hello\\n' > hello.txt; git add hello.txt; "
        "git -c user.name=t -c user.email=t@example.invalid commit -q -m one; "
        "git checkout -q -b feature; printf 'feature\\n' > branch.txt; git add branch.txt; "
        "git -c user.name=t -c user.email=t@example.invalid commit -q -m two; "
        "git checkout -q main",
        dir, dir);
    host_sh(cmd);
    free(cmd);
}


/* list_owned and destroy_by_id: on a backend with SBX_CAP_LIST_OWNED the
 * fixture's sandbox is listed once with its create token and destroyed by
 * id (twice is success); without it both calls are feature_not_supported,
 * naming the backend. */
Test(lifecycle, list_owned_and_destroy_by_id_follow_caps)
{
    uint64_t caps = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), 0);
    const char *id = sbx_sandbox_get0_id(g_sb);
    owned_seen seen = { .want = id };
    int n = sbx_client_list_owned(g_client, on_owned, &seen, &err);
    if (!(caps & SBX_CAP_LIST_OWNED)) {
        cr_assert_eq(n, -1);
        char *msg = tu_strdup_printf("backend \"%s\" cannot list the sandboxes this library "
                                     "made", tu_backend());
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
        cr_assert_str_eq(sbx_error_get0_message(err), msg);
        cr_assert_str_eq(sbx_error_get0_op(err), "list_owned");
        free(msg);
        sbx_error_free(err);
        err = NULL;
        cr_assert_eq(sbx_client_destroy_by_id(g_client, id, &err), -1);
        msg = tu_strdup_printf("backend \"%s\" cannot destroy sandboxes by id", tu_backend());
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
        cr_assert_str_eq(sbx_error_get0_message(err), msg);
        free(msg);
        sbx_error_free(err);
        cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
        return;
    }
    cr_assert(n >= 1, "list_owned: %d: %s", n, err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(seen.found, 1, "the fixture's sandbox %s was listed %d times", id, seen.found);
    cr_assert(strlen(seen.token) > 0, "no create token");
    /* A NULL callback only counts. Other tests of this run may make and
     * destroy sandboxes meanwhile on a shared provider: the count is
     * compared when two listings around it agree. */
    int agreed = 0;
    for (int i = 0; i < 20 && !agreed; i++) {
        owned_seen s1 = { .want = id }, s2 = { .want = id };
        int c1 = sbx_client_list_owned(g_client, on_owned, &s1, &err);
        int c0 = sbx_client_list_owned(g_client, NULL, NULL, &err);
        int c2 = sbx_client_list_owned(g_client, on_owned, &s2, &err);
        cr_assert(c1 >= 1 && c0 >= 1 && c2 >= 1, "list_owned: %d %d %d", c1, c0, c2);
        if (c1 == c2) {
            cr_assert_eq(c0, c1, "counting gave %d, listing %d", c0, c1);
            agreed = 1;
        }
    }
    cr_assert(agreed, "list_owned never gave the same count twice in a row");
    cr_assert_eq(sbx_client_destroy_by_id(g_client, id, &err), 0, "destroy_by_id: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 0);
    cr_assert_eq(sbx_client_destroy_by_id(g_client, id, &err), 0, "a second destroy_by_id");
    seen.found = 0;
    cr_assert(sbx_client_list_owned(g_client, on_owned, &seen, &err) >= 0);
    cr_assert_eq(seen.found, 0, "%s is still listed after destroy_by_id", id);
}

/* Bad arguments name what is wrong and touch nothing. */
Test(lifecycle, owned_calls_refuse_bad_arguments)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_list_owned(NULL, NULL, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "client is NULL");
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_client_destroy_by_id(g_client, "", &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "sandbox id is NULL or empty");
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    sbx_error_free(err);
    err = NULL;
    cr_assert_null(sbx_sandbox_snapshot(NULL, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "sandbox is NULL");
    sbx_error_free(err);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
}

/* sbx_sandbox_snapshot: without SBX_CAP_SNAPSHOT it is
 * feature_not_supported naming the backend, and the sandbox runs on; with
 * it, a file written before the snapshot is in a sandbox created from the
 * snapshot's id. After destroy it is not_found. (Docker's snapshots, which
 * leave an image to remove, are tested with the Engine in test_docker.c.) */
Test(lifecycle, snapshot_without_the_capability)
{
    uint64_t caps = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_client_probe(g_client, &caps, &err), 0);
    if (!(caps & SBX_CAP_SNAPSHOT)) {
        cr_assert_null(sbx_sandbox_snapshot(g_sb, &err));
        char *msg = tu_strdup_printf("backend \"%s\" cannot snapshot sandboxes", tu_backend());
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
        cr_assert_str_eq(sbx_error_get0_message(err), msg);
        cr_assert_str_eq(sbx_error_get0_op(err), "snapshot");
        free(msg);
        sbx_error_free(err);
        err = NULL;
        cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
    } else if (!backend_is_docker()) {
        cr_assert_eq(sbx_sandbox_write_file(g_sb, "/tmp/snapped.txt", "before\n", 7, &err), 0,
                     "write_file: %s", err ? sbx_error_get0_message(err) : "");
        char *snap = sbx_sandbox_snapshot(g_sb, &err);
        cr_assert_not_null(snap, "snapshot: %s", err ? sbx_error_get0_message(err) : "");
        cr_assert_neq(snap[0], '\0');
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_snapshot_id(o, snap, NULL), 0);
        sbx_sandbox *sb2 = tu_create(g_client, o);
        sbx_options_free(o);
        char *data = NULL;
        size_t len = 0;
        cr_assert_eq(sbx_sandbox_read_file(sb2, "/tmp/snapped.txt", &data, &len, &err), 0,
                     "read_file in the sandbox made from %s: %s", snap,
                     err ? sbx_error_get0_message(err) : "");
        cr_assert_eq(len, 7);
        cr_assert_eq(memcmp(data, "before\n", 7), 0);
        free(data);
        cr_assert_str_neq(sbx_sandbox_get0_id(sb2), sbx_sandbox_get0_id(g_sb));
        cr_assert_eq(sbx_sandbox_destroy(sb2, NULL), 0);
        sbx_sandbox_free(sb2);
        free(snap);
    }
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert_null(sbx_sandbox_snapshot(g_sb, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    sbx_error_free(err);
}

/* The repository must be a path the sandbox sees: a docker container sees
 * it through a read-only bind mount at the same path. */
static void let_sandbox_see(sbx_options *o, const char *dir)
{
    if (backend_is_bubblewrap()) {
        /* Run by root, the sandbox is uid 65534: let it read @dir. */
        cr_assert_eq(chmod(dir, 0755), 0, "chmod(%s): %s", dir, strerror(errno));
        char *json = tu_strdup_printf("{\"ro_binds\":[\"%s\"]}", dir);
        cr_assert_eq(sbx_options_set_backend_options(o, json, NULL), 0);
        free(json);
        return;
    }
    if (!backend_is_docker())
        return;
    char *json = tu_strdup_printf("{\"HostConfig\":{\"Binds\":[\"%s:%s:ro\"]}}", dir, dir);
    cr_assert_eq(sbx_options_set_backend_options(o, json, NULL), 0);
    free(json);
}

Test(creation, git_clone_of_local_repo)
{
    char *src = tu_mkdtemp("src");
    char *repo = tu_strdup_printf("%s/proj.git", src);
    make_git_repo(repo);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_git_repo(o, repo, NULL, NULL), 0);
    let_sandbox_see(o, src);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    /* Cloned into the working directory as NAME (".git" dropped). */
    sbx_result *r = tu_sh(g_sb, "cat proj/hello.txt; test -e proj/branch.txt; echo $?", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hello\n1\n");
    sbx_result_free(r);

    sbx_sandbox *sb2;
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_git_repo(o, repo, "feature", NULL), 0);
    let_sandbox_see(o, src);
    sb2 = tu_create(g_client, o);
    sbx_options_free(o);
    r = tu_sh(sb2, "cat proj/hello.txt proj/branch.txt", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hello\nfeature\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb2, NULL), 0);
    sbx_sandbox_free(sb2);
    tu_rmtree(src);
    free(src);
    free(repo);
}

/*
 * A local repository path works where the sandbox cannot see the host's
 * path (docker, bubblewrap: nothing bound here): the repository is carried
 * in, cloned with its branches, its origin is the path given, and neither
 * the sandbox nor this host keeps the carried copy.
 */
Test(creation, git_clone_of_local_repo_carried_in)
{
    char *src = tu_mkdtemp("src");
    char *repo = tu_strdup_printf("%s/proj.git", src);
    make_git_repo(repo);
    for (int with_ref = 0; with_ref < 2; with_ref++) {
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_git_repo(o, repo, with_ref ? "feature" : NULL, NULL), 0);
        g_sb = tu_create(g_client, o);
        sbx_options_free(o);
        char *script = tu_strdup_printf(
            "cat proj/hello.txt; test -e proj/branch.txt; echo $?; "
            "git -C proj remote get-url origin; n=$(ls -a /tmp | grep -c '^\\.sbx-git-'); "
            "echo $n");
        sbx_result *r = tu_sh(g_sb, script, 20);
        free(script);
        tu_assert_exit(r, 0);
        char *want = tu_strdup_printf("hello\n%d\n%s\n0\n", with_ref ? 0 : 1, repo);
        tu_assert_stdout(r, want);
        free(want);
        sbx_result_free(r);
        cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    /* No bundle left in this host's TMPDIR. */
    DIR *d = opendir(g_tmp);
    cr_assert_not_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        cr_assert(strncmp(de->d_name, "sbx-git-", 8) != 0, "%s/%s was left", g_tmp,
                  de->d_name);
    closedir(d);
    tu_rmtree(src);
    free(src);
    free(repo);
}

Test(creation, failing_git_clone_leaves_nothing)
{
    char *missing = tu_strdup_printf("%s/no-such-repo", g_tmp);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_git_repo(o, missing, NULL, NULL), 0);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
    sbx_options_free(o);
    cr_assert_null(sb, "create succeeded although the clone of %s must fail", missing);
    assert_backend_error(err, SBX_ERROR_CREATION_FAILED);
    const char *step = sbx_error_get0_context(err, "step");
    cr_assert_not_null(step, "the error does not name the step");
    cr_assert_str_eq(step, "git_clone");
    sbx_error_free(err);
    if (tu_backend_is_local() || backend_is_bubblewrap()) {
        cr_assert_eq(tu_count_entries(g_tmp), 0, "a failed create left %d entries in %s",
                     tu_count_entries(g_tmp), g_tmp);
        pid_t pids[16];
        size_t n = tu_wait_procs_gone(g_tmp, pids, 16, 5.0);
        cr_assert_eq(n, 0, "a process of the failed sandbox survived (pid %d)",
                     n ? (int)pids[0] : 0);
    }
    free(missing);
}

/* An existing workdir: commands start there; on local it is the root and
 * is kept; bubblewrap's root_dir is a host directory as the sandbox's /,
 * kept and left without the mount points bwrap made in it. */
Test(creation, workdir_is_root_and_kept)
{
    char *wd;
    if (tu_backend_is_local() || backend_is_bubblewrap()) {
        wd = tu_strdup_printf("%s/wd", g_tmp);
        cr_assert_eq(mkdir(wd, 0755), 0);
    } else {
        wd = strdup("/tmp");
    }
    sbx_options *o = sbx_options_new();
    if (backend_is_bubblewrap()) {
        char *bo = tu_strdup_printf("{\"root_dir\":\"%s\"}", wd);
        cr_assert_eq(sbx_options_set_backend_options(o, bo, NULL), 0);
        free(bo);
    } else {
        cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    }
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    sbx_result *r = tu_sh(g_sb, "pwd; echo kept > kept.txt", 10);
    tu_assert_exit(r, 0);
    /* bubblewrap: the root_dir is the sandbox's /. */
    char *want = tu_strdup_printf("%s\n", backend_is_bubblewrap() ? "/" : wd);
    tu_assert_stdout(r, want);
    free(want);
    sbx_result_free(r);
    if (tu_backend_is_local()) {
        cr_assert_str_eq(sbx_sandbox_get0_root(g_sb), wd);
        cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
        struct stat st;
        cr_assert_eq(stat(wd, &st), 0, "destroy removed the caller's workdir %s", wd);
        cr_assert(S_ISDIR(st.st_mode));
        char *kept = tu_strdup_printf("%s/kept.txt", wd);
        cr_assert(tu_exists(kept), "destroy removed a file of the caller's workdir");
        free(kept);
        /* The metadata directory is gone; only the workdir remains. */
        cr_assert_eq(tu_count_entries(g_tmp), 1, "%s holds %d entries after destroy", g_tmp,
                     tu_count_entries(g_tmp));
    }
    if (backend_is_bubblewrap()) {
        cr_assert_str_eq(sbx_sandbox_get0_root(g_sb), "");
        cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
        char *kept = tu_strdup_printf("%s/kept.txt", wd);
        cr_assert(tu_exists(kept), "destroy removed a file of the caller's workdir");
        free(kept);
        /* Nothing but the command's file: the mount points are gone too. */
        cr_assert_eq(tu_count_entries(wd), 1, "%s holds %d entries after destroy", wd,
                     tu_count_entries(wd));
        cr_assert_eq(tu_count_entries(g_tmp), 1, "%s holds %d entries after destroy", g_tmp,
                     tu_count_entries(g_tmp));
    }
    if (!tu_backend_is_local() && !backend_is_bubblewrap()) {
        /* The sandbox may live on this host (remote over local):
         * its /tmp is then the host's, so the file goes before destroy. */
        r = tu_sh(g_sb, "rm kept.txt && test ! -e kept.txt", 10);
        tu_assert_exit(r, 0);
        sbx_result_free(r);
    }
    free(wd);
}

/*
 * A missing workdir is made on every backend, with its parents, and
 * commands start in it: on local (and safehouse) a host directory, kept
 * after destroy; on isolated backends (docker, bubblewrap, hosted
 * providers) a path inside the sandbox, where a relative one is
 * invalid_argument naming it.
 */
Test(creation, missing_workdir_is_made)
{
    /* Without isolation the workdir is a host directory. */
    int host = !(client_caps() & SBX_CAP_ISOLATION);
    char *wd = host ? tu_strdup_printf("%s/does/not/exist", g_tmp)
                    : tu_strdup_printf("/sbx-wd-%d/does/not/exist", (int)getpid());
    char *top = host ? tu_strdup_printf("%s/does", g_tmp)
                     : tu_strdup_printf("/sbx-wd-%d", (int)getpid());
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    sbx_result *r = tu_sh(g_sb, "pwd; echo made > f; cat f", 10);
    tu_assert_exit(r, 0);
    char *want = tu_strdup_printf("%s\nmade\n", wd);
    tu_assert_stdout(r, want);
    free(want);
    sbx_result_free(r);
    if (!host && !backend_is_docker())
        cr_assert(!tu_exists(top), "the workdir %s was made on the host", top);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    if (host) {
        char *f = tu_strdup_printf("%s/f", wd);
        cr_assert(tu_exists(f), "destroy removed %s of the caller's workdir", f);
        free(f);
    }
    free(wd);
    free(top);
    if (host)
        return;
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, "relative/dir", NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "relative/dir", NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    sbx_error_free(err);
}

/* Without isolation (local), a workdir that cannot be made (a component is
 * a file) is invalid_argument naming it, and what create made on the way is
 * gone. */
Test(creation, unmakeable_workdir_is_invalid_argument)
{
    if (client_caps() & SBX_CAP_ISOLATION)
        return;     /* the workdir is inside: missing_workdir_is_made */
    char *file = tu_strdup_printf("%s/a-file", g_tmp);
    tu_write_file(file, "x", 1, 0644);
    char *wd = tu_strdup_printf("%s/a-file/sub", g_tmp);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, wd, NULL);
    if (strcmp(tu_backend(), "remote") != 0) {
        /* Through a control plane the upstream's message is the
         * contract's fixed one, naming the workdir the request set. */
        char *msg = tu_strdup_printf("cannot make workdir \"%s\": a component is not a "
                                     "directory", wd);
        cr_assert_str_eq(sbx_error_get0_message(err), msg);
        free(msg);
        cr_assert_str_eq(sbx_error_get0_context(err, "path"), wd);
    }
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    sbx_error_free(err);
    cr_assert_eq(tu_count_entries(g_tmp), 1, "a refused create left something in %s", g_tmp);
    free(wd);
    free(file);
}

Test(creation, unsupported_limits_are_configuration_errors)
{
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
    struct {
        uint64_t cap;
        const char *name;
        int is_cpu;
    } limits[] = {{SBX_CAP_CPU_LIMIT, "cpu", 1}, {SBX_CAP_MEMORY_LIMIT, "memory", 0}};
    for (size_t i = 0; i < 2; i++) {
        sbx_options *o = sbx_options_new();
        if (limits[i].is_cpu)
            cr_assert_eq(sbx_options_set_cpu(o, 2.0, NULL), 0);
        else
            cr_assert_eq(sbx_options_set_memory_mb(o, 1024, NULL), 0);
        sbx_error *err = NULL;
        sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
        sbx_options_free(o);
        if (caps & limits[i].cap) {
            cr_assert_not_null(sb, "%s limit declared but refused", limits[i].name);
            cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
            sbx_sandbox_free(sb);
            continue;
        }
        cr_assert_null(sb, "%s limit accepted without the capability", limits[i].name);
        assert_backend_error(err, SBX_ERROR_CONFIGURATION);
        cr_assert(strstr(sbx_error_get0_message(err), limits[i].name) != NULL,
                  "message \"%s\" does not name the option", sbx_error_get0_message(err));
        sbx_error_free(err);
        if (tu_backend_is_local())
            cr_assert_eq(tu_count_entries(g_tmp), 0);
    }
}

/*
 * Options a backend has no notion of are refused with a configuration error
 * naming the option when the caller set them, and nothing is left behind.
 * The list is the local backend's; other backends accept some of them.
 */
Test(creation, local_refuses_provider_options)
{
    if (!tu_backend_is_local())
        return;
    static const struct {
        const char *option;
    } cases[] = {{"image"}, {"template"}, {"snapshot_id"}, {"app_name"}, {"gpu"},
                 {"disk_mb"}, {"backend_options"}, {"allow_internet"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sbx_options *o = sbx_options_new();
        const char *name = cases[i].option;
        int rc;
        if (strcmp(name, "image") == 0)
            rc = sbx_options_set_image(o, "python:3.12-slim", NULL);
        else if (strcmp(name, "template") == 0)
            rc = sbx_options_set_template(o, "base", NULL);
        else if (strcmp(name, "snapshot_id") == 0)
            rc = sbx_options_set_snapshot_id(o, "snap-1", NULL);
        else if (strcmp(name, "app_name") == 0)
            rc = sbx_options_set_app_name(o, "evals", NULL);
        else if (strcmp(name, "gpu") == 0)
            rc = sbx_options_set_gpu(o, "H100:2", NULL);
        else if (strcmp(name, "disk_mb") == 0)
            rc = sbx_options_set_disk_mb(o, 2048, NULL);
        else if (strcmp(name, "backend_options") == 0)
            rc = sbx_options_set_backend_options(o, "{\"Frob\":1}", NULL);
        else
            rc = sbx_options_set_allow_internet(o, 0, NULL);
        cr_assert_eq(rc, 0);
        sbx_error *err = NULL;
        sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
        sbx_options_free(o);
        cr_assert_null(sb, "%s accepted by local", name);
        assert_backend_error(err, SBX_ERROR_CONFIGURATION);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), name);
        cr_assert(strstr(sbx_error_get0_message(err), name) != NULL,
                  "message \"%s\" does not name %s", sbx_error_get0_message(err), name);
        sbx_error_free(err);
        cr_assert_eq(tu_count_entries(g_tmp), 0, "%s: something left in TMPDIR", name);
    }
    /* allow_internet set to its default is honoured. */
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 1, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
}

/*
 * A backend_options key the backend does not know is a configuration error
 * naming the key, on every backend (each declares its keys), and nothing
 * is left behind.
 */
Test(creation, unknown_backend_option_key_is_a_configuration_error)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"Frob\":1}", NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err), "backend_options Frob accepted");
    sbx_options_free(o);
    assert_backend_error(err, SBX_ERROR_CONFIGURATION);
    char *want;
    if (backend_is_docker())
        want = strdup("docker backend_options: unknown key \"Frob\" (known: the members of "
                      "the Docker Engine's container create body, e.g. \"HostConfig\", "
                      "\"User\", \"Labels\")");
    else if (backend_is_bubblewrap())
        want = strdup("bubblewrap backend_options: unknown key \"Frob\" (known: "
                      "\"ro_binds\", \"root_dir\")");
    else if (sbx_error_get0_context(err, "known"))
        /* A backend that takes options lists them in context "known". */
        want = tu_strdup_printf("%s backend_options: unknown key \"Frob\" (known: %s)",
                                tu_backend(), sbx_error_get0_context(err, "known"));
    else
        want = tu_strdup_printf("%s backend_options: unknown key \"Frob\" (the %s backend "
                                "takes no backend options)", tu_backend(), tu_backend());
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    free(want);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "backend_options");
    cr_assert_str_eq(sbx_error_get0_context(err, "name"), "Frob");
    sbx_error_free(err);
    if (!backend_is_docker())
        cr_assert_eq(tu_count_entries(g_tmp), 0, "a refused create left something in %s",
                     g_tmp);
}

/* timeout_secs is the sandbox's lifetime and the default exec timeout,
 * which is what is left of the lifetime: an exec's own timeout overrides
 * it (here a shorter one), and a command run with the default times out
 * (exit 124) when the lifetime ends, counted from create. */
Test(creation, timeout_secs_is_default_exec_timeout)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 4.0, NULL), 0);
    double created = tu_now();
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    /* An exec's own timeout overrides it. */
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "sleep 30", 1);
    double dt = tu_now() - t0;
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(dt >= 0.9 && dt <= 1.0 + SBX_KILL_GRACE_SECS + 1.0, "took %.2f s", dt);
    sbx_result_free(r);
    /* The default: until the end of the lifetime, 4 s after create began. */
    r = tu_sh(g_sb, "sleep 30", 0);
    dt = tu_now() - created;
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(dt >= 3.9 && dt <= 4.0 + SBX_KILL_GRACE_SECS + 1.0, "took %.2f s after create",
              dt);
    sbx_result_free(r);
}

/* ===================================================================== Exec */

Test(exec, echo_hi)
{
    sbx_result *r = tu_sh(g_sb, "echo hi", 10);
    tu_assert_exit(r, 0);
    size_t len = 99;
    const char *out = sbx_result_get0_stdout(r, &len);
    cr_assert_eq(len, 3);
    cr_assert_eq(memcmp(out, "hi\n", 3), 0);
    cr_assert_eq(out[3], '\0', "stdout is not NUL-terminated");
    len = 99;
    const char *err = sbx_result_get0_stderr(r, &len);
    cr_assert_not_null(err, "empty stderr must be a buffer, not NULL");
    cr_assert_eq(len, 0);
    cr_assert_eq(err[0], '\0');
    double d = sbx_result_get_duration_secs(r);
    cr_assert(d >= 0.0 && d < 10.0, "duration %f", d);
    sbx_result_free(r);

    /* The shorthand is the same call. */
    sbx_error *e = NULL;
    r = sbx_sandbox_execute_shell(g_sb, "echo hi", &e);
    cr_assert_null(e);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "hi\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
}

Test(exec, exit_codes)
{
    const int codes[] = {0, 1, 5, 255};
    for (size_t i = 0; i < 4; i++) {
        char *s = tu_strdup_printf("exit %d", codes[i]);
        sbx_result *r = tu_sh(g_sb, s, 10);
        tu_assert_exit(r, codes[i]);
        tu_assert_stdout(r, "");
        tu_assert_stderr(r, "");
        sbx_result_free(r);
        free(s);
    }
    const char *f[] = {"false", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = f;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 1);
    sbx_result_free(r);
    const char *sh5[] = {"sh", "-c", "exit 5", NULL};
    req.argv = sh5;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 5);
    sbx_result_free(r);
}

Test(exec, command_not_found_is_127)
{
    sbx_result *r = tu_sh(g_sb, "nosuchcmd_zz9", 10);
    tu_assert_exit(r, 127);
    tu_assert_stdout(r, "");
    cr_assert(strstr(sbx_result_get0_stderr(r, NULL), "not found") != NULL,
              "stderr \"%s\"", sbx_result_get0_stderr(r, NULL));
    sbx_result_free(r);

    const char *argv[] = {"nosuchcmd_zz9", "arg", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 127);
    tu_assert_stdout(r, "");
    cr_assert(strstr(sbx_result_get0_stderr(r, NULL), "not found") != NULL,
              "argv form: stderr \"%s\"", sbx_result_get0_stderr(r, NULL));
    sbx_result_free(r);
}

/* An argv whose first word starts with '-' names a program like any other
 * (no option of a shell's exec): none by that name is 127 with "not
 * found", the words after it untouched. */
Test(exec, argv_first_word_with_a_dash_is_a_program_name)
{
    const char *dash_x[] = {"-x", NULL};
    const char *dash_help[] = {"--help", "arg", NULL};
    const char *const *argvs[] = {dash_x, dash_help};
    for (size_t i = 0; i < 2; i++) {
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.argv = argvs[i];
        sbx_result *r = tu_exec(g_sb, &req);
        tu_assert_exit(r, 127);
        tu_assert_stdout(r, "");
        const char *err = sbx_result_get0_stderr(r, NULL);
        cr_assert(strstr(err, "not found") != NULL && strstr(err, argvs[i][0]) != NULL,
                  "%s: stderr \"%s\"", argvs[i][0], err);
        sbx_result_free(r);
    }
}

Test(exec, not_executable_is_126)
{
    sbx_result *r = tu_sh(g_sb,
        "printf '#!/bin/sh\\necho hi\\n' > \"$SANDBOX_ROOT/tmp/noexec.sh\"; "
        "chmod 644 \"$SANDBOX_ROOT/tmp/noexec.sh\"; \"$SANDBOX_ROOT/tmp/noexec.sh\"", 10);
    tu_assert_exit(r, 126);
    tu_assert_stdout(r, "");
    cr_assert(strstr(sbx_result_get0_stderr(r, NULL), "Permission denied") != NULL,
              "stderr \"%s\"", sbx_result_get0_stderr(r, NULL));
    sbx_result_free(r);

    char *path = tu_strdup_printf("%s/tmp/noexec.sh", g_root);
    const char *argv[] = {path, NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 126);
    tu_assert_stdout(r, "");
    sbx_result_free(r);
    free(path);
}

Test(exec, death_by_signal_is_128_plus_n)
{
    const struct {
        const char *script;
        int code;
    } cases[] = {
        {"kill -TERM $$", 128 + SIGTERM},
        {"kill -9 $$", 128 + SIGKILL},
        {"kill -USR1 $$", 128 + SIGUSR1},
        {"echo before; kill -SEGV $$; echo after", 128 + SIGSEGV},
    };
    cr_assert_eq(128 + SIGTERM, 143);
    cr_assert_eq(128 + SIGKILL, 137);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sbx_result *r = tu_sh(g_sb, cases[i].script, 10);
        tu_assert_exit(r, cases[i].code);
        sbx_result_free(r);
    }
    const char *argv[] = {"sh", "-c", "kill -TERM $$", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 143);
    sbx_result_free(r);
    r = tu_sh(g_sb, "echo before; kill -SEGV $$; echo after", 10);
    tu_assert_stdout(r, "before\n");
    sbx_result_free(r);
}

Test(exec, streams_separate_and_ordered)
{
    sbx_result *r = tu_sh(g_sb,
        "i=1; while [ $i -le 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done", 30);
    tu_assert_exit(r, 0);
    char *out = NULL, *err = NULL;
    size_t outn = 0, errn = 0;
    FILE *fo = open_memstream(&out, &outn), *fe = open_memstream(&err, &errn);
    for (int i = 1; i <= 300; i++) {
        fprintf(fo, "out%d\n", i);
        fprintf(fe, "err%d\n", i);
    }
    fclose(fo);
    fclose(fe);
    tu_assert_stdout_bytes(r, out, outn);
    tu_assert_stderr_bytes(r, err, errn);
    free(out);
    free(err);
    sbx_result_free(r);
}

/* A script printing all 256 byte values, @reps times, with octal escapes. */
static char *all_bytes_script(int reps, const char *redirect)
{
    char esc[256 * 4 + 1];
    for (int b = 0; b < 256; b++)
        snprintf(esc + 4 * b, 5, "\\%03o", b);
    return tu_strdup_printf("i=0; while [ $i -lt %d ]; do printf '%s'%s; i=$((i+1)); done",
                            reps, esc, redirect);
}

static unsigned char *all_bytes(int reps, size_t *len)
{
    *len = (size_t)reps * 256;
    unsigned char *p = malloc(*len);
    cr_assert_not_null(p);
    for (size_t i = 0; i < *len; i++)
        p[i] = (unsigned char)(i % 256);
    return p;
}

Test(exec, binary_bytes_exact)
{
    size_t len;
    unsigned char *want = all_bytes(4, &len);
    char *s1 = all_bytes_script(4, "");
    char *s2 = all_bytes_script(4, " >&2");
    char *script = tu_strdup_printf("%s; %s", s1, s2);
    sbx_result *r = tu_sh(g_sb, script, 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, want, len);
    tu_assert_stderr_bytes(r, want, len);
    sbx_result_free(r);
    free(script);
    free(s1);
    free(s2);
    free(want);
}

/* @len bytes of @c. */
static char *repeat(char c, size_t len)
{
    char *p = malloc(len + 1);
    cr_assert_not_null(p);
    memset(p, c, len);
    p[len] = '\0';
    return p;
}

Test(exec, one_mib_on_both_streams_at_once)
{
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb,
        "(head -c 1048576 /dev/zero | tr '\\0' a) & "
        "head -c 1048576 /dev/zero | tr '\\0' b >&2; wait", 30);
    double dt = tu_now() - t0;
    tu_assert_exit(r, 0);
    char *a = repeat('a', 1048576), *b = repeat('b', 1048576);
    tu_assert_stdout_bytes(r, a, 1048576);
    tu_assert_stderr_bytes(r, b, 1048576);
    cr_assert(dt < 10.0, "took %.2f s", dt);
    free(a);
    free(b);
    sbx_result_free(r);
}

Test(exec, stdin_is_fed)
{
    static const char data[] = "line one\n\0zero\xff\xfe\nlast";
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat";
    req.stdin_data = data;
    req.stdin_len = sizeof data - 1;
    req.timeout_secs = 10;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, data, sizeof data - 1);
    tu_assert_stderr(r, "");
    sbx_result_free(r);

    /* 1 MiB of every byte value, through stdin and back out. */
    size_t len;
    unsigned char *big = all_bytes(4096, &len);
    req.stdin_data = big;
    req.stdin_len = len;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, big, len);
    sbx_result_free(r);
    req.shell = "wc -c | tr -d ' '";
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1048576\n");
    sbx_result_free(r);
    free(big);

    /* Empty stdin given: EOF at once. */
    req.shell = "cat; echo eof";
    req.stdin_data = "";
    req.stdin_len = 0;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "eof\n");
    sbx_result_free(r);
}

Test(exec, no_stdin_is_eof_at_once)
{
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "cat; echo eof", 10);
    double dt = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "eof\n");
    cr_assert(dt < 1.0, "cat without stdin took %.2f s", dt);
    sbx_result_free(r);
    r = tu_sh(g_sb, "if read line; then echo got; else echo eof; fi", 10);
    tu_assert_stdout(r, "eof\n");
    sbx_result_free(r);
}

Test(exec, env_at_create_and_per_call)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "FOO", "create-foo", NULL), 0);
    cr_assert_eq(sbx_options_set_env(o, "BAR", "create-bar", NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);

    sbx_result *r = tu_sh(sb, "printf '%s|%s|%s' \"$FOO\" \"$BAR\" \"${BAZ-unset}\"", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "create-foo|create-bar|unset");
    sbx_result_free(r);

    const char *env[] = {"FOO=call-foo", "BAZ=call-baz", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "printf '%s|%s|%s' \"$FOO\" \"$BAR\" \"$BAZ\"";
    req.env = env;
    r = tu_exec(sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "call-foo|create-bar|call-baz");
    sbx_result_free(r);

    /* The overlay is per call only. */
    r = tu_sh(sb, "printf '%s|%s' \"$FOO\" \"${BAZ-unset}\"", 10);
    tu_assert_stdout(r, "create-foo|unset");
    sbx_result_free(r);

    /* argv form gets the same environment. */
    const char *argv[] = {"printenv", "FOO", NULL};
    sbx_exec_request areq = SBX_EXEC_REQUEST_INIT;
    areq.argv = argv;
    areq.env = env;
    r = tu_exec(sb, &areq);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "call-foo\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
}

Test(exec, env_values_arrive_literally)
{
    const char *v1 = "two words  and\ttab";
    const char *v2 = "line1\nline2\n";
    const char *v3 = "it's \"quoted\" `id` $(id) $HOME ${PATH} \\n \\";
    const char *v4 = "a=b=c==";
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "V1", v1, NULL), 0);
    cr_assert_eq(sbx_options_set_env(o, "V2", v2, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);

    char *e3 = tu_strdup_printf("V3=%s", v3);
    char *e4 = tu_strdup_printf("V4=%s", v4);
    const char *env[] = {e3, e4, "V5=", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "printf '%s|' \"$V1\" \"$V2\" \"$V3\" \"$V4\" \"${V5-unset}\"";
    req.env = env;
    sbx_result *r = tu_exec(sb, &req);
    tu_assert_exit(r, 0);
    char *want = tu_strdup_printf("%s|%s|%s|%s||", v1, v2, v3, v4);
    tu_assert_stdout(r, want);
    free(want);
    sbx_result_free(r);
    free(e3);
    free(e4);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
}

static void discard_chunk(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    (void)stream;
    (void)data;
    (void)len;
    (void)user_data;
}

/* Keys of one letter, which a backend's wrapper script might take for
 * variables of its own, reach the command with the caller's values: a..m
 * from the create's env, n..z per call, with the output kept to the end
 * and streamed (a backend may wrap the two ways apart). */
Test(exec, env_keys_a_wrapper_might_use_arrive_intact)
{
    sbx_options *o = sbx_options_new();
    char keys[26][2], vals[26][8], *pairs[14];
    char want[26 * 4 + 1] = "", shell[26 * 7 + 16] = "printf '%s|'";
    for (int i = 0; i < 26; i++) {
        snprintf(keys[i], sizeof keys[i], "%c", 'a' + i);
        snprintf(vals[i], sizeof vals[i], "%c-%c", i < 13 ? 'c' : 'p', 'a' + i);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s|", vals[i]);
        snprintf(shell + strlen(shell), sizeof shell - strlen(shell), " \"$%c\"", 'a' + i);
        if (i < 13)
            cr_assert_eq(sbx_options_set_env(o, keys[i], vals[i], NULL), 0);
        else
            pairs[i - 13] = tu_strdup_printf("%s=%s", keys[i], vals[i]);
    }
    pairs[13] = NULL;
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = shell;
    req.env = (const char *const *)pairs;
    for (int streamed = 0; streamed < 2; streamed++) {
        req.on_output = streamed ? discard_chunk : NULL;
        sbx_result *r = tu_exec(sb, &req);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, want);
        tu_assert_stderr(r, "");
        sbx_result_free(r);
    }
    for (int i = 0; i < 13; i++)
        free(pairs[i]);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
}

Test(exec, caller_environment_is_not_passed)
{
    sbx_result *r = tu_sh(g_sb, "printf '%s' \"${SBX_TEST_CANARY-unset}\"", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "unset");
    sbx_result_free(r);
    if (tu_backend_is_local()) {
        /* HOME is the root, TMPDIR its tmp. */
        r = tu_sh(g_sb, "printf '%s\\n' \"$HOME\" \"$TMPDIR\" \"$SANDBOX_ROOT\"", 10);
        tu_assert_exit(r, 0);
        char *want = tu_strdup_printf("%s\n%s/tmp\n%s\n", g_root, g_root, g_root);
        tu_assert_stdout(r, want);
        free(want);
        sbx_result_free(r);
    }
}

Test(exec, invalid_env_key_runs_nothing)
{
    const char *bad[] = {"1A=x", "A-B=x", "=x", "A B=x", "NOEQUALS", NULL};
    for (size_t i = 0; bad[i]; i++) {
        const char *env[] = {"GOOD=1", bad[i], NULL};
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = "touch \"$SANDBOX_ROOT/tmp/ran_marker\"";
        req.env = env;
        sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_INVALID_ARGUMENT);
        assert_backend_error(err, SBX_ERROR_INVALID_ARGUMENT);
        sbx_error_free(err);
        cr_assert_eq(sandbox_file_exists(g_sb, "/tmp/ran_marker"), 0,
                     "the command ran although env \"%s\" is invalid", bad[i]);
    }
}

Test(exec, cwd_per_call)
{
    sbx_result *r = tu_sh(g_sb, "mkdir -p \"$SANDBOX_ROOT/work/d\"", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "pwd";
    req.cwd = "/work/d";
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    char *want = tu_strdup_printf("%s/work/d\n", g_root);
    tu_assert_stdout(r, want);
    sbx_result_free(r);

    const char *argv[] = {"pwd", NULL};
    sbx_exec_request areq = SBX_EXEC_REQUEST_INIT;
    areq.argv = argv;
    areq.cwd = "/work/d";
    r = tu_exec(g_sb, &areq);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, want);
    sbx_result_free(r);
    free(want);

    req.cwd = "/";
    r = tu_exec(g_sb, &req);
    want = tu_strdup_printf("%s\n", g_root[0] ? g_root : "/");
    tu_assert_stdout(r, want);
    free(want);
    sbx_result_free(r);
}

Test(exec, missing_cwd_is_not_found_and_runs_nothing)
{
    char here[PATH_MAX];
    cr_assert_not_null(getcwd(here, sizeof here));
    char *marker_here = tu_strdup_printf("%s/ran_marker", here);
    cr_assert_eq(tu_exists(marker_here), 0, "%s exists before the test", marker_here);

    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "touch ran_marker; touch \"$SANDBOX_ROOT/tmp/ran_marker\"";
    req.cwd = "/work/missing";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    assert_backend_error(err, SBX_ERROR_NOT_FOUND);
    cr_assert(strstr(sbx_error_get0_message(err), "/work/missing") != NULL,
              "message \"%s\" does not name the cwd", sbx_error_get0_message(err));
    const char *path = sbx_error_get0_context(err, "path");
    cr_assert_not_null(path, "no context \"path\"");
    cr_assert(strstr(path, "/work/missing") != NULL, "context path \"%s\"", path);
    sbx_error_free(err);

    int ran_here = tu_exists(marker_here);
    if (ran_here)
        unlink(marker_here);
    cr_assert_eq(ran_here, 0, "the command ran in the caller's directory");
    cr_assert_eq(sandbox_file_exists(g_sb, "/tmp/ran_marker"), 0);
    cr_assert_eq(sandbox_file_exists(g_sb, "/ran_marker"), 0);
    free(marker_here);
}

/* A shell function for the checks after a timeout: "alive PID" succeeds
 * while process PID runs. kill -0 also succeeds on a zombie, a process
 * killed and not yet reaped by its parent; after a timeout that parent is
 * the sandbox's init (a provider's, reaping when it next runs), so there a
 * zombie is dead. On local, safehouse and bubblewrap the supervisor holds
 * the end of a killed exec until its whole tree is reaped, so there a
 * zombie counts as alive. Where /proc cannot be read, kill -0 decides. */
static const char *alive_fn(void)
{
    if (tu_backend_is_local() || strcmp(tu_backend(), "bubblewrap") == 0)
        return "alive() { kill -0 \"$1\" 2>/dev/null; }; ";
    return "alive() { if [ -r /proc/self/stat ]; then "
           "s=$(sed 's/.*) //' /proc/\"$1\"/stat 2>/dev/null | cut -c1); "
           "[ -n \"$s\" ] && [ \"$s\" != Z ]; else kill -0 \"$1\" 2>/dev/null; fi; }; ";
}

Test(exec, timeout_kills_tree)
{
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb,
        "sleep 30 & echo $! > \"$SANDBOX_ROOT/tmp/bg.pid\"; echo started; sleep 30", 1);
    double dt = tu_now() - t0;
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(dt >= 0.95, "returned after %.2f s, before the timeout", dt);
    cr_assert(dt <= 1.0 + SBX_KILL_GRACE_SECS + 3.0, "returned after %.2f s", dt);
    /* Output written before the timeout is kept. */
    tu_assert_stdout(r, "started\n");
    sbx_result_free(r);

    char *check = tu_strdup_printf("%salive $(cat \"$SANDBOX_ROOT/tmp/bg.pid\"); echo $?",
                                   alive_fn());
    r = tu_sh(g_sb, check, 10);
    free(check);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    if (tu_backend_is_local()) {
        pid_t pid;
        tu_read_pids(g_sb, "$SANDBOX_ROOT/tmp/bg.pid", &pid, 1);
        cr_assert(tu_pid_gone(pid), "background pid %d survived the timeout", (int)pid);
    }
    /* The sandbox itself lives on. */
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
}

Test(exec, timeout_kills_setsid_descendants)
{
    sbx_result *r = tu_sh(g_sb,
        "setsid sleep 31 >/dev/null 2>&1 </dev/null & echo $! > \"$SANDBOX_ROOT/tmp/s.pid\"; "
        "sleep 30", 1);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    sbx_result_free(r);
    char *check = tu_strdup_printf("%salive $(cat \"$SANDBOX_ROOT/tmp/s.pid\"); echo $?",
                                   alive_fn());
    r = tu_sh(g_sb, check, 10);
    free(check);
    const char *out = sbx_result_get0_stdout(r, NULL);
    if (strcmp(out, "1\n") != 0 && tu_backend_is_local()) {
        pid_t pid;
        tu_read_pids(g_sb, "$SANDBOX_ROOT/tmp/s.pid", &pid, 1);
        cr_assert_fail("the setsid'd descendant survived the timeout (%s)",
                       tu_proc_describe(pid));
    }
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
}

Test(exec, timeout_escalates_to_kill)
{
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb,
        "trap '' TERM; echo $$ > \"$SANDBOX_ROOT/tmp/sh.pid\"; "
        "sleep 300 & echo $! > \"$SANDBOX_ROOT/tmp/sleep.pid\"; wait", 1);
    double dt = tu_now() - t0;
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(dt >= 0.95 && dt <= 1.0 + SBX_KILL_GRACE_SECS + 3.0, "returned after %.2f s", dt);
    sbx_result_free(r);
    char *check = tu_strdup_printf("%sfor f in sh sleep; do "
                                   "alive $(cat \"$SANDBOX_ROOT/tmp/$f.pid\"); echo $f=$?; done",
                                   alive_fn());
    r = tu_sh(g_sb, check, 10);
    free(check);
    tu_assert_stdout(r, "sh=1\nsleep=1\n");
    sbx_result_free(r);
}

Test(exec, background_child_does_not_hold_the_exec)
{
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "sleep 5 & echo started", 20);
    double dt = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "started\n");
    cr_assert(dt < 3.0, "the exec waited %.2f s for a background child", dt);
    sbx_result_free(r);
}

/* A process freed while its stdin is open (never closed), its command
 * reading it, is not waited for: the free returns at once, even where the
 * backend takes stdin whole before the command starts (a file it uploads),
 * and the sandbox serves the next command. The free kills the command
 * (where it started at all): no process carrying the command's marker is
 * left in the sandbox 5 s later, as the sandbox's own /proc shows. */
Test(exec, a_process_freed_with_its_stdin_open_is_not_waited_for)
{
    char *mark = tu_strdup_printf("SBX_TEST_MARK=stdin-open-%d-%ld", (int)getpid(),
                                  (long)time(NULL));
    const char *env[] = { mark, NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat; sleep 30";
    req.env = env;
    req.flags = SBX_EXEC_STDIN_OPEN;
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_process_write_stdin(p, "abc", 3, &err), 0, "write_stdin: %s",
                 err ? sbx_error_get0_message(err) : "");
    usleep(300 * 1000);
    double t0 = tu_now();
    sbx_process_free(p);
    double took = tu_now() - t0;
    cr_assert_lt(took, 10.0, "the free took %.2f s", took);
    req.shell = "cat";
    req.env = NULL;
    req.flags = 0;
    req.stdin_data = "after";
    req.stdin_len = 5;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after");
    sbx_result_free(r);
    /* The marked processes of the sandbox, counted every 0.1 s until none
     * is left (5 s at most). */
    char *count = tu_strdup_printf(
        "for t in $(seq 1 50); do n=0; for d in /proc/[0-9]*; do "
        "tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -qx '%s' && n=$((n+1)); done; "
        "[ $n -eq 0 ] && break; sleep 0.1; done; echo $n", mark);
    r = tu_sh(g_sb, count, 20);
    free(count);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "0\n");
    sbx_result_free(r);
    free(mark);
}

/* "1\n2\n...N\n" as written by `seq 1 N`. */
static char *seq_text(int n, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    for (int i = 1; i <= n; i++)
        fprintf(f, "%d\n", i);
    fclose(f);
    return buf;
}

Test(exec, output_cap_keeps_first_n_bytes)
{
    size_t olen, elen;
    char *out = seq_text(30000, &olen); /* 168894 bytes */
    char *err = seq_text(20000, &elen); /* 108894 bytes */
    cr_assert_eq(olen, 168894);
    cr_assert_eq(elen, 108894);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "seq 1 30000; seq 1 20000 >&2";
    req.output_limit = 65536;
    req.timeout_secs = 30;
    sbx_result *r = tu_exec(g_sb, &req);
    cr_assert_eq(sbx_result_get_exit_code(r), 0);
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    tu_assert_stdout_bytes(r, out, 65536);
    tu_assert_stderr_bytes(r, err, 65536);
    cr_assert_eq(sbx_result_is_stdout_truncated(r), 1);
    cr_assert_eq(sbx_result_is_stderr_truncated(r), 1);
    sbx_result_free(r);

    /* Exactly at the cap: kept whole, not truncated. */
    req.shell = "head -c 65536 /dev/zero | tr '\\0' q";
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    char *q = repeat('q', 65536);
    tu_assert_stdout_bytes(r, q, 65536);
    free(q);
    sbx_result_free(r);

    /* One stream over, the other under. */
    req.shell = "seq 1 30000; echo small >&2";
    r = tu_exec(g_sb, &req);
    tu_assert_stdout_bytes(r, out, 65536);
    tu_assert_stderr(r, "small\n");
    cr_assert_eq(sbx_result_is_stdout_truncated(r), 1);
    cr_assert_eq(sbx_result_is_stderr_truncated(r), 0);
    sbx_result_free(r);
    free(out);
    free(err);
}

struct capture {
    char *out, *err;
    size_t outn, errn, outcap, errcap;
    size_t calls;
    int wrong_thread;
    int bad_stream;
    pthread_t thread;
};

static void append(char **buf, size_t *n, size_t *cap, const void *data, size_t len)
{
    if (*n + len + 1 > *cap) {
        *cap = (*n + len + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    memcpy(*buf + *n, data, len);
    *n += len;
}

static void on_output(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    struct capture *c = user_data;
    c->calls++;
    if (!pthread_equal(pthread_self(), c->thread))
        c->wrong_thread = 1;
    if (stream == SBX_STREAM_STDOUT)
        append(&c->out, &c->outn, &c->outcap, data, len);
    else if (stream == SBX_STREAM_STDERR)
        append(&c->err, &c->errn, &c->errcap, data, len);
    else
        c->bad_stream = 1;
}

static const char *stream_script =
    "i=1; while [ $i -le 2000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done; "
    "head -c 300000 /dev/zero | tr '\\0' z; head -c 200000 /dev/zero | tr '\\0' y >&2";

static void stream_expected(char **out, size_t *outn, char **err, size_t *errn)
{
    FILE *fo = open_memstream(out, outn), *fe = open_memstream(err, errn);
    for (int i = 1; i <= 2000; i++) {
        fprintf(fo, "out%d\n", i);
        fprintf(fe, "err%d\n", i);
    }
    for (int i = 0; i < 300000; i++)
        fputc('z', fo);
    for (int i = 0; i < 200000; i++)
        fputc('y', fe);
    fclose(fo);
    fclose(fe);
}

Test(exec, streaming_callback)
{
    struct capture c = {0};
    c.thread = pthread_self();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = stream_script;
    req.on_output = on_output;
    req.user_data = &c;
    req.timeout_secs = 30;
    sbx_result *r = tu_exec(g_sb, &req);
    size_t calls_at_return = c.calls;
    tu_assert_exit(r, 0);
    char *out, *err;
    size_t outn, errn;
    stream_expected(&out, &outn, &err, &errn);
    tu_assert_stdout_bytes(r, out, outn);
    tu_assert_stderr_bytes(r, err, errn);
    cr_assert(c.calls >= 2, "%zu callbacks", c.calls);
    tu_assert_bytes("stdout chunks", c.out, c.outn, out, outn);
    tu_assert_bytes("stderr chunks", c.err, c.errn, err, errn);
    cr_assert_eq(c.wrong_thread, 0, "a callback ran on another thread");
    cr_assert_eq(c.bad_stream, 0);
    /* Every callback came before the exec returned. */
    usleep(300000);
    cr_assert_eq(c.calls, calls_at_return, "callbacks after the exec returned");
    sbx_result_free(r);
    free(out);
    free(err);
    free(c.out);
    free(c.err);
}

Test(exec, streaming_callback_sees_output_past_cap)
{
    struct capture c = {0};
    c.thread = pthread_self();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = stream_script;
    req.on_output = on_output;
    req.user_data = &c;
    req.output_limit = 1000;
    req.timeout_secs = 30;
    sbx_result *r = tu_exec(g_sb, &req);
    char *out, *err;
    size_t outn, errn;
    stream_expected(&out, &outn, &err, &errn);
    cr_assert_eq(sbx_result_get_exit_code(r), 0);
    tu_assert_stdout_bytes(r, out, 1000);
    tu_assert_stderr_bytes(r, err, 1000);
    cr_assert_eq(sbx_result_is_stdout_truncated(r), 1);
    cr_assert_eq(sbx_result_is_stderr_truncated(r), 1);
    tu_assert_bytes("stdout chunks", c.out, c.outn, out, outn);
    tu_assert_bytes("stderr chunks", c.err, c.errn, err, errn);
    sbx_result_free(r);
    free(out);
    free(err);
    free(c.out);
    free(c.err);
}

Test(exec, no_capture_streams_only)
{
    struct capture c = {0};
    c.thread = pthread_self();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo to-out; echo to-err >&2; exit 3";
    req.on_output = on_output;
    req.user_data = &c;
    req.flags = SBX_EXEC_NO_CAPTURE;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 3);
    tu_assert_stdout(r, "");
    tu_assert_stderr(r, "");
    tu_assert_bytes("stdout chunks", c.out, c.outn, "to-out\n", 7);
    tu_assert_bytes("stderr chunks", c.err, c.errn, "to-err\n", 7);
    sbx_result_free(r);
    free(c.out);
    free(c.err);
}

Test(exec, argv_is_literal)
{
    const char *argv[] = {"printf", "%s|", "a b", "\"q\"", ";", "$(echo x)", "'s'",
                          "*", "$HOME", "", "-n", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "a b|\"q\"|;|$(echo x)|'s'|*|$HOME||-n|");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
}

Test(exec, shell_form_runs_a_script)
{
    sbx_result *r = tu_sh(g_sb,
        "printf 'b\\na\\nc\\n' | sort | tr a-z A-Z\n"
        "x=0; for i in 1 2 3; do x=$((x+i)); done; echo \"sum=$x\"\n"
        "if [ -d \"$SANDBOX_ROOT/tmp\" ]; then echo dir; fi", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "A\nB\nC\nsum=6\ndir\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
}

Test(exec, invalid_requests_run_nothing)
{
    const char *argv[] = {"sh", "-c", "touch \"$SANDBOX_ROOT/tmp/ran_marker\"", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    req.shell = "touch \"$SANDBOX_ROOT/tmp/ran_marker\"";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);

    sbx_exec_request none = SBX_EXEC_REQUEST_INIT;
    err = tu_exec_fail(g_sb, &none, SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);

    sbx_exec_request flags = SBX_EXEC_REQUEST_INIT;
    flags.shell = "touch \"$SANDBOX_ROOT/tmp/ran_marker\"";
    flags.flags = 0x80u;
    err = tu_exec_fail(g_sb, &flags, SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);

    const char *empty[] = {NULL};
    sbx_exec_request eargv = SBX_EXEC_REQUEST_INIT;
    eargv.argv = empty;
    err = tu_exec_fail(g_sb, &eargv, SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);

    err = NULL;
    cr_assert_null(sbx_sandbox_execute_command(g_sb, NULL, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);
    cr_assert_eq(sandbox_file_exists(g_sb, "/tmp/ran_marker"), 0);
}

Test(exec, execute_code_python)
{
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_code(g_sb, NULL, "print(1+2)", NULL, &err);
    cr_assert_null(err, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "3\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);

    r = sbx_sandbox_execute_code(g_sb, "python", "import sys\nprint('a b', file=sys.stderr)\n"
                                 "sys.exit(4)", NULL, &err);
    cr_assert_null(err);
    tu_assert_exit(r, 4);
    tu_assert_stdout(r, "");
    tu_assert_stderr(r, "a b\n");
    sbx_result_free(r);

    r = sbx_sandbox_execute_code(g_sb, NULL, "print(", NULL, &err);
    cr_assert_null(err, "a syntax error is a result, not an error");
    cr_assert_neq(sbx_result_get_exit_code(r), 0);
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    tu_assert_stdout(r, "");
    cr_assert(strstr(sbx_result_get0_stderr(r, NULL), "SyntaxError") != NULL,
              "stderr \"%s\"", sbx_result_get0_stderr(r, NULL));
    sbx_result_free(r);

    /* Request fields apply: stdin. */
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.stdin_data = "abc";
    req.stdin_len = 3;
    r = sbx_sandbox_execute_code(g_sb, NULL, "import sys; print(sys.stdin.read().upper())",
                                 &req, &err);
    cr_assert_null(err);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "ABC\n");
    sbx_result_free(r);
}

/* Streams output to a callback: the bytes are ignored. */
static void ignore_output(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    (void)stream;
    (void)data;
    (void)len;
    (void)user_data;
}

/* python3 first, python when there is no python3 (with and without an
 * output callback, which takes the shell launcher), and the report of a
 * missing interpreter. */
Test(exec, execute_code_python_fallback)
{
    sbx_error *err = NULL;
    /* Two PATH directories with every program of the system's but python:
     * one with "python" (python3 under that name), one without. */
    sbx_result *r = tu_sh(g_sb,
        "d=\"${TMPDIR:-/tmp}/pyonly\"; e=\"${TMPDIR:-/tmp}/nopy\"; "
        "py=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))') && "
        "mkdir -p \"$d\" \"$e\" && for t in \"$d\" \"$e\"; do "
        "find -H /usr/bin /bin -maxdepth 1 ! -type d ! -name 'python*' -exec ln -sf -t \"$t\" {} + "
        "|| exit 1; done && ln -sf \"$py\" \"$d/python\" && printf '%s\\n%s' \"$d\" \"$e\"", 30);
    tu_assert_exit(r, 0);
    char dirs[2][512];
    cr_assert_eq(sscanf(sbx_result_get0_stdout(r, NULL), "%511[^\n]\n%511s", dirs[0], dirs[1]), 2);
    sbx_result_free(r);

    char path[600];
    snprintf(path, sizeof path, "PATH=%s", dirs[0]);
    const char *env[] = { path, NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.env = env;
    for (int streamed = 0; streamed < 2; streamed++) {
        req.on_output = streamed ? ignore_output : NULL;
        r = sbx_sandbox_execute_code(g_sb, NULL, "import sys; print(sys.version_info[0])", &req,
                                     &err);
        cr_assert_null(err, "%s", err ? sbx_error_get0_message(err) : "");
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "3\n");
        tu_assert_stderr(r, "");
        sbx_result_free(r);
    }

    /* Neither: 127 and a "python: ... not found" line. */
    snprintf(path, sizeof path, "PATH=%s", dirs[1]);
    req.on_output = NULL;
    r = sbx_sandbox_execute_code(g_sb, NULL, "print(1)", &req, &err);
    cr_assert_null(err);
    tu_assert_exit(r, 127);
    tu_assert_stdout(r, "");
    const char *e = sbx_result_get0_stderr(r, NULL);
    cr_assert(strstr(e, "python: not found\n") || strstr(e, "python: command not found\n"),
              "stderr \"%s\"", e);
    sbx_result_free(r);
}

Test(exec, execute_code_other_languages)
{
    const char *langs[] = {"sh", "bash", NULL};
    for (size_t i = 0; langs[i]; i++) {
        sbx_error *err = NULL;
        sbx_result *r = sbx_sandbox_execute_code(g_sb, langs[i], "echo $((6*7)); echo e >&2",
                                                 NULL, &err);
        cr_assert_null(err, "%s: %s", langs[i], err ? sbx_error_get0_message(err) : "");
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "42\n");
        tu_assert_stderr(r, "e\n");
        sbx_result_free(r);
    }
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_execute_code(g_sb, "cobol", "DISPLAY 'x'.", NULL, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "cobol", NULL);
    sbx_error_clear(&err);

    const char *argv[] = {"true", NULL};
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    cr_assert_null(sbx_sandbox_execute_code(g_sb, NULL, "print(1)", &req, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
    sbx_error_free(err);
}

struct par_exec {
    sbx_sandbox *sb;
    int index;
    sbx_result *r;
    sbx_error *err;
};

static void *par_exec_main(void *arg)
{
    struct par_exec *p = arg;
    char script[64];
    snprintf(script, sizeof script, "sleep 1; echo %d", p->index);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = script;
    req.timeout_secs = 20;
    p->r = sbx_sandbox_execute_command(p->sb, &req, &p->err);
    return NULL;
}

Test(exec, concurrent_execs_in_one_sandbox)
{
    struct par_exec p[4];
    pthread_t t[4];
    double t0 = tu_now();
    for (int i = 0; i < 4; i++) {
        p[i] = (struct par_exec){g_sb, i, NULL, NULL};
        cr_assert_eq(pthread_create(&t[i], NULL, par_exec_main, &p[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    double dt = tu_now() - t0;
    for (int i = 0; i < 4; i++) {
        cr_assert_null(p[i].err, "thread %d: %s", i,
                       p[i].err ? sbx_error_get0_message(p[i].err) : "");
        tu_assert_exit(p[i].r, 0);
        char want[16];
        snprintf(want, sizeof want, "%d\n", i);
        tu_assert_stdout(p[i].r, want);
        sbx_result_free(p[i].r);
    }
    cr_assert(dt < 3.5, "4 concurrent 1 s commands took %.2f s (serialised?)", dt);
}

/* =================================================================== Errors */

Test(errors, every_error_names_code_backend_and_op)
{
    /* Exec errors. */
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "true";
    req.cwd = "/no/such/dir";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    assert_backend_error(err, SBX_ERROR_NOT_FOUND);
    cr_assert(strstr(sbx_error_get0_message(err), "/no/such/dir") != NULL);
    sbx_error_free(err);

    const char *env[] = {"9BAD=1", NULL};
    sbx_exec_request ereq = SBX_EXEC_REQUEST_INIT;
    ereq.shell = "true";
    ereq.env = env;
    err = tu_exec_fail(g_sb, &ereq, SBX_ERROR_INVALID_ARGUMENT);
    assert_backend_error(err, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "invalid environment variable name \"9BAD\": "
                     "must match [A-Za-z_][A-Za-z0-9_]*");
    sbx_error_free(err);

    /* Create errors (a missing workdir is made: a relative one is the
     * invalid workdir of isolated backends, one beneath a file that of
     * local). */
    sbx_options *o = sbx_options_new();
    char *wd = NULL;
    if (client_caps() & SBX_CAP_ISOLATION) {
        wd = strdup("relative/nope");
    } else {
        char *file = tu_strdup_printf("%s/a-file", g_tmp);
        tu_write_file(file, "x", 1, 0644);
        wd = tu_strdup_printf("%s/nope", file);
        free(file);
    }
    cr_assert_eq(sbx_options_set_workdir(o, wd, NULL), 0);
    err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    assert_backend_error(err, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(sbx_error_get0_message(err), wd) != NULL);
    sbx_error_free(err);
    sbx_options_free(o);
    free(wd);

    /* Calls on a destroyed sandbox. */
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    req.cwd = NULL;
    err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    assert_backend_error(err, SBX_ERROR_NOT_FOUND);
    sbx_error_free(err);
}

/* A read of a directory and a listing of a file are invalid_argument on
 * every backend, whatever code the provider answers them with (a 400 or
 * a 404 of its own): the message names the path, which is in the
 * error's context. */
Test(errors, a_directory_read_and_a_file_listed_are_invalid_argument)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/tmp/kind-dir/a-file", "x", 1, &err), 0,
                 "write: %s", err ? sbx_error_get0_message(err) : "");
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/tmp/kind-dir", &data, &len, &err), -1);
    cr_assert_null(data);
    assert_backend_error(err, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "\"/tmp/kind-dir\" is a directory");
    cr_assert_str_eq(sbx_error_get0_op(err), "read_file");
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/tmp/kind-dir");
    sbx_error_free(err);
    err = NULL;
    sbx_file_info **list = NULL;
    size_t count = 7;
    cr_assert_eq(sbx_sandbox_list_files(g_sb, "/tmp/kind-dir/a-file", &list, &count, &err), -1);
    cr_assert_null(list);
    cr_assert_eq(count, 0);
    assert_backend_error(err, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "\"/tmp/kind-dir/a-file\" is not a directory");
    cr_assert_str_eq(sbx_error_get0_op(err), "list_files");
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/tmp/kind-dir/a-file");
    sbx_error_free(err);
}

/* ============================================================== Concurrency */

struct par_life {
    sbx_client *client;
    int index;
    char failure[256];
};

static void *par_life_main(void *arg)
{
    struct par_life *p = arg;
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(p->client, NULL, &err);
    if (!sb) {
        snprintf(p->failure, sizeof p->failure, "create: %s",
                 err ? sbx_error_get0_message(err) : "?");
        sbx_error_free(err);
        return NULL;
    }
    char script[128], want[64];
    snprintf(script, sizeof script,
             "echo %d > \"$SANDBOX_ROOT/tmp/i\"; cat \"$SANDBOX_ROOT/tmp/i\"; echo e%d >&2",
             p->index, p->index);
    snprintf(want, sizeof want, "%d\n", p->index);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = script;
    req.timeout_secs = 30;
    sbx_result *r = sbx_sandbox_execute_command(sb, &req, &err);
    if (!r) {
        snprintf(p->failure, sizeof p->failure, "exec: %s",
                 err ? sbx_error_get0_message(err) : "?");
        sbx_error_free(err);
    } else {
        size_t n;
        const char *out = sbx_result_get0_stdout(r, &n);
        const char *e = sbx_result_get0_stderr(r, NULL);
        char ewant[64];
        snprintf(ewant, sizeof ewant, "e%d\n", p->index);
        if (sbx_result_get_exit_code(r) != 0 || n != strlen(want) ||
            memcmp(out, want, n) != 0 || strcmp(e, ewant) != 0)
            snprintf(p->failure, sizeof p->failure, "exit %d stdout \"%.*s\" stderr \"%s\"",
                     sbx_result_get_exit_code(r), (int)n, out, e);
        sbx_result_free(r);
    }
    if (sbx_sandbox_destroy(sb, &err) != 0 && !p->failure[0])
        snprintf(p->failure, sizeof p->failure, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "?");
    sbx_error_clear(&err);
    if (!p->failure[0] && sbx_sandbox_is_alive(sb, NULL) != 0)
        snprintf(p->failure, sizeof p->failure, "alive after destroy");
    sbx_sandbox_free(sb);
    return NULL;
}

Test(concurrency, eight_threads_create_exec_destroy)
{
    enum { N = 8 };
    struct par_life p[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].client = g_client;
        p[i].index = i;
        cr_assert_eq(pthread_create(&t[i], NULL, par_life_main, &p[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++)
        cr_assert_eq(p[i].failure[0], '\0', "thread %d: %s", i, p[i].failure);
    if (tu_backend_is_local()) {
        cr_assert_eq(tu_count_entries(g_tmp), 0, "%d entries left in %s",
                     tu_count_entries(g_tmp), g_tmp);
        pid_t pids[16];
        size_t n = tu_wait_procs_gone(g_tmp, pids, 16, 5.0);
        cr_assert_eq(n, 0, "a process survived (pid %d)", n ? (int)pids[0] : 0);
    }
}

/* ------------------------------------------------------------ file names */

TestSuite(names, .init = sandbox_setup, .fini = teardown, .timeout = 120);

/* The whole of host file @path (NULL when unreadable). */
static char *host_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

/*
 * File names are bytes, whatever the process's locale: single files and
 * directories named "naïve.txt" and "文件.txt" go in and out the same in the
 * C locale and in a UTF-8 one.
 */
static void names_round_trip(const char *locale)
{
    cr_assert_not_null(setlocale(LC_ALL, locale), "locale %s is not available", locale);
    static const char *const names[] = { "na\xc3\xafve.txt", "\xe6\x96\x87\xe4\xbb\xb6.txt" };
    char *up = tu_strdup_printf("%s/up-%s", g_tmp, locale);
    char *down = tu_strdup_printf("%s/down-%s", g_tmp, locale);
    cr_assert_eq(mkdir(up, 0755), 0);
    char *dir = tu_strdup_printf("names-%s", locale);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        /* A single file, both directions. */
        char *in = tu_strdup_printf("%s/%s", dir, names[i]);
        sbx_error *err = NULL;
        cr_assert_eq(sbx_sandbox_write_file(g_sb, in, names[i], strlen(names[i]), &err), 0,
                     "write_file %s in %s: %s", in, locale,
                     err ? sbx_error_get0_message(err) : "");
        char *data = NULL;
        size_t len = 0;
        cr_assert_eq(sbx_sandbox_read_file(g_sb, in, &data, &len, &err), 0,
                     "read_file %s in %s: %s", in, locale,
                     err ? sbx_error_get0_message(err) : "");
        cr_assert_eq(len, strlen(names[i]));
        cr_assert_eq(memcmp(data, names[i], len), 0);
        free(data);
        char *script = tu_strdup_printf("cat '%s'", in);
        sbx_result *r = tu_sh(g_sb, script, 20);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, names[i]);
        sbx_result_free(r);
        free(script);
        free(in);
        char *host = tu_strdup_printf("%s/%s", up, names[i]);
        tu_write_file(host, names[i], strlen(names[i]), 0644);
        free(host);
    }
    /* A directory holding both, both directions. */
    char *sdir = tu_strdup_printf("%s-dir", dir);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_upload_dir(g_sb, up, sdir, &err), 2, "upload_dir in %s: %s",
                 locale, err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_download_dir(g_sb, sdir, down, &err), 2,
                 "download_dir in %s: %s", locale, err ? sbx_error_get0_message(err) : "");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *host = tu_strdup_printf("%s/%s", down, names[i]);
        char *text = host_text(host);
        cr_assert_not_null(text, "download_dir made no %s", host);
        cr_assert_str_eq(text, names[i]);
        free(text);
        free(host);
    }
    cr_assert_eq(tu_count_entries(down), 2);
    free(sdir);
    free(dir);
    free(up);
    free(down);
    setlocale(LC_ALL, "C");
}

Test(names, file_names_are_bytes_in_the_c_locale)
{
    names_round_trip("C");
}

Test(names, file_names_are_bytes_in_a_utf8_locale)
{
    names_round_trip("C.UTF-8");
}

/*
 * A relative path whose first name starts with '-' is a path, never an
 * option of a command that moves or inspects it: a file "-f" goes in
 * (upload_file) and out (read_file, download_file), a file "-d/-f" is
 * written and listed, and a directory "-u" goes in and out whole.
 */
Test(names, paths_starting_with_a_dash_are_paths)
{
    sbx_error *err = NULL;
    char *up = tu_strdup_printf("%s/up-dash", g_tmp);
    char *down = tu_strdup_printf("%s/down-dash", g_tmp);
    char *host_f = tu_strdup_printf("%s/host-f", g_tmp);
    char *back_f = tu_strdup_printf("%s/back-f", g_tmp);
    cr_assert_eq(mkdir(up, 0755), 0);
    tu_write_file(host_f, "dash\n", 5, 0755);
    cr_assert_eq(sbx_sandbox_upload_file(g_sb, host_f, "-f", &err), 0, "upload_file -f: %s",
                 err ? sbx_error_get0_message(err) : "");
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "-f", &data, &len, &err), 0, "read_file -f: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 5);
    cr_assert_eq(memcmp(data, "dash\n", 5), 0);
    free(data);
    sbx_result *r = tu_sh(g_sb, "cat ./-f", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "dash\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_download_file(g_sb, "-f", back_f, &err), 0,
                 "download_file -f: %s", err ? sbx_error_get0_message(err) : "");
    char *text = host_text(back_f);
    cr_assert_not_null(text);
    cr_assert_str_eq(text, "dash\n");
    free(text);

    cr_assert_eq(sbx_sandbox_write_file(g_sb, "-d/-f", "in dir\n", 7, &err), 0,
                 "write_file -d/-f: %s", err ? sbx_error_get0_message(err) : "");
    sbx_file_info **list = NULL;
    size_t count = 0;
    cr_assert_eq(sbx_sandbox_list_files(g_sb, "-d", &list, &count, &err), 0,
                 "list_files -d: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(count, 1);
    cr_assert_str_eq(sbx_file_info_get0_name(list[0]), "-f");
    cr_assert_eq(sbx_file_info_is_dir(list[0]), 0);
    cr_assert_eq(sbx_file_info_get_size(list[0]), 7);
    sbx_file_info_list_free(list, count);

    char *in_up = tu_strdup_printf("%s/-g", up);
    tu_write_file(in_up, "up\n", 3, 0644);
    free(in_up);
    cr_assert_eq(sbx_sandbox_upload_dir(g_sb, up, "-u", &err), 1, "upload_dir -u: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_download_dir(g_sb, "-u", down, &err), 1, "download_dir -u: %s",
                 err ? sbx_error_get0_message(err) : "");
    char *got = tu_strdup_printf("%s/-g", down);
    text = host_text(got);
    cr_assert_not_null(text, "download_dir made no %s", got);
    cr_assert_str_eq(text, "up\n");
    free(text);
    free(got);
    cr_assert_eq(tu_count_entries(down), 1);
    free(up);
    free(down);
    free(host_f);
    free(back_f);
}
