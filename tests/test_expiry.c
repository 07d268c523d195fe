/*
 * The lifetime of a sandbox on local and on bubblewrap (each test runs on
 * both; SBX_TEST_BACKEND is set for the test's own process): timeout_secs at create, counted from readiness and
 * enforced by the sandbox's supervisor. At its end every process of the
 * sandbox, its directory and its mounts are gone (within 2 s of the end);
 * calls on it then (exec, the file calls, resume) fail with not_found
 * naming the expiry, and the first call on a handle to it removes its
 * lifecycle-record row (a resume leaves it to sbx_gc()). A command running at the end
 * is ended too.
 *
 * Each test has its own TMPDIR (searchable by others: bubblewrap run by
 * root runs its sandboxes as uid 65534) and SBX_STATE_DIR.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include <sbx/sbx.h>

#include "recordutil.h"
#include "testutil.h"

static tu_dirs g_dirs;   /* this test's directory, its TMPDIR and SBX_STATE_DIR */

static void setup(void)
{
    tu_dirs_make(&g_dirs, "sbx-expiry", 1);
}

static void teardown(void)
{
    tu_dirs_free(&g_dirs);
}

TestSuite(expiry, .init = setup, .fini = teardown, .timeout = 120);

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Rows of this test's lifecycle record for provider id @id. */
static long long rows_for(const char *id)
{
    return tu_record_rows_for(g_dirs.state, id);
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

/* What of sandbox @id is left: its directory, a process naming it, a
 * mount naming it, or background command @bg (a host pid; 0: none). NULL
 * when nothing. */
static const char *left_of(const char *id, pid_t bg)
{
    static char what[256];
    char *dir = tu_strdup_printf("%s/%s", g_dirs.tmp, id);
    pid_t pids[4];
    size_t np = tu_procs_mentioning(id, pids, 4);
    if (tu_exists(dir))
        snprintf(what, sizeof what, "its directory %s", dir);
    else if (np)
        snprintf(what, sizeof what, "a process naming it: %s", tu_proc_describe(pids[0]));
    else if (bg > 0 && !tu_pid_gone(bg))
        snprintf(what, sizeof what, "its command: %s", tu_proc_describe(bg));
    else if (mounts_mention(id))
        snprintf(what, sizeof what, "a mount naming it");
    else
        what[0] = '\0';
    free(dir);
    return what[0] ? what : NULL;
}

/* Waits until nothing of @id is left; returns the seconds since @t0, or
 * fails once more than @secs passed. */
static double wait_nothing_left(const char *id, pid_t bg, double t0, double secs)
{
    for (;;) {
        const char *left = left_of(id, bg);
        double t = tu_now() - t0;
        if (!left)
            return t;
        cr_assert_leq(t, secs, "%.2f s after create, sandbox %s still has %s", t, id, left);
        usleep(20 * 1000);
    }
}

static sbx_sandbox *create_with_lifetime(sbx_client **client, double secs, double *wall0,
                                         double *t_created)
{
    sbx_error *err = NULL;
    *client = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(*client, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, secs, NULL), 0);
    *wall0 = wall_now();
    sbx_sandbox *sb = tu_create(*client, o);
    *t_created = tu_now();
    sbx_options_free(o);
    return sb;
}

/* A sandbox with a 2 s lifetime: alive and running a background command at
 * 1 s, and by 4 s after create nothing of it is left (tree, directory,
 * mounts). An exec then is not_found, "sandbox ID expired at T (lifetime
 * 2 s)" with T its expiry, and removes the sandbox's row. */
static void two_second_lifetime(void)
{
    sbx_client *c;
    double wall0, t0;
    sbx_sandbox *sb = create_with_lifetime(&c, 2.0, &wall0, &t0);
    const char *id = sbx_sandbox_get0_id(sb);
    cr_assert_eq(rows_for(id), 1);
    char *state = sbx_sandbox_session_state(sb, NULL);
    cr_assert_not_null(state);
    sbx_result *r = tu_sh(sb, "sleep 100 >/dev/null 2>&1 & echo $!", 30);
    pid_t bg = tu_host_pid(sb, (pid_t)atoi(sbx_result_get0_stdout(r, NULL)));
    sbx_result_free(r);
    cr_assert_gt(bg, 1);
    while (tu_now() - t0 < 1.0)
        usleep(20 * 1000);
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 1, "the sandbox ended before 1 s");
    cr_assert_eq(tu_pid_gone(bg), 0, "%s", tu_proc_describe(bg));

    double took = wait_nothing_left(id, bg, t0, 4.0);
    fprintf(stderr, "# %s: nothing left %.3f s after create (lifetime 2 s)\n", tu_backend(),
            took);
    cr_assert_geq(took, 1.0, "the sandbox ended %.3f s after create, before its lifetime", took);

    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "true";
    req.timeout_secs = 30;
    sbx_error *err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    double when = tu_expires_at(err);
    cr_assert(when >= (double)(long long)wall0 + 2.0 && when <= wall0 + took + 2.0,
              "expiry %.0f is not 2 s after readiness (create began at %.3f)", when, wall0);
    char *want = tu_strdup_printf("sandbox %s expired at %s (lifetime 2 s)", id,
                                  sbx_error_get0_context(err, "expires_at"));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    sbx_error_free(err);
    cr_assert_eq(rows_for(id), 0, "the row of expired sandbox %s is still there", id);
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 0);
    /* The file calls, and resuming from the session state, say the same. */
    char *data = NULL;
    size_t len = 0;
    err = NULL;
    cr_assert_eq(sbx_sandbox_read_file(sb, "x", &data, &len, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    sbx_error_free(err);
    err = NULL;
    sbx_sandbox *again = sbx_sandbox_resume(c, state, &err);
    cr_assert_null(again);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s", sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    sbx_error_free(err);
    free(want);
    free(state);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* A command still running at the end of the lifetime is ended with the
 * sandbox: the exec fails with not_found naming the expiry, by 4 s. */
static void command_at_expiry(void)
{
    sbx_client *c;
    double wall0, t0;
    sbx_sandbox *sb = create_with_lifetime(&c, 2.0, &wall0, &t0);
    const char *id = sbx_sandbox_get0_id(sb);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "exec sleep 100";
    req.timeout_secs = 60;
    sbx_error *err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    double took = tu_now() - t0;
    cr_assert_leq(took, 4.0, "the exec returned %.3f s after create", took);
    char *want = tu_strdup_printf("sandbox %s expired at %s (lifetime 2 s) while the command "
                                  "ran", id, sbx_error_get0_context(err, "expires_at"));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    free(want);
    double when = tu_expires_at(err);
    cr_assert(when >= (double)(long long)wall0 + 2.0 && when <= wall0 + took + 2.0,
              "expiry %.0f is not 2 s after readiness (create began at %.3f)", when, wall0);
    sbx_error_free(err);
    wait_nothing_left(id, 0, t0, 4.0);
    cr_assert_eq(rows_for(id), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* The default exec timeout is what is left of the lifetime: a command that
 * ignores SIGTERM, sent at that timeout, is ended by the sandbox's end
 * (1 s after the expiry) before the grace's SIGKILL; the exec is timed out
 * all the same (124, timed_out), with the output it wrote, not not_found. */
static void default_timeout_term_ignored(void)
{
    sbx_client *c;
    double wall0, t0;
    sbx_sandbox *sb = create_with_lifetime(&c, 3.0, &wall0, &t0);
    const char *id = sbx_sandbox_get0_id(sb);
    sbx_result *r = tu_sh(sb, "trap '' TERM; echo started; sleep 30; echo never", 0);
    double took = tu_now() - t0;
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    tu_assert_stdout(r, "started\n");
    cr_assert(took >= 2.9 && took <= 3.0 + SBX_KILL_GRACE_SECS + 1.0,
              "the exec returned %.3f s after create (lifetime 3 s)", took);
    sbx_result_free(r);
    wait_nothing_left(id, 0, t0, 6.0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* Detaching does not touch the lifetime: a detached sandbox ends by it too,
 * its handle freed before (as `sbx create` leaves one). A resume from its
 * session state then fails with not_found naming the expiry and leaves the
 * row to sbx_gc() (which forgets an `sbx create` record with it). */
static void detached_lifetime(void)
{
    sbx_client *c;
    double wall0, t0;
    sbx_sandbox *sb = create_with_lifetime(&c, 2.0, &wall0, &t0);
    char *id = tu_strdup_printf("%s", sbx_sandbox_get0_id(sb));
    cr_assert_eq(sbx_sandbox_detach(sb, NULL), 0);
    char *state = sbx_sandbox_session_state(sb, NULL);
    cr_assert_not_null(state);
    sbx_sandbox_free(sb);
    double took = wait_nothing_left(id, 0, t0, 4.0);
    cr_assert_geq(took, 1.0, "the sandbox ended %.3f s after create", took);
    cr_assert_eq(rows_for(id), 1);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_resume(c, state, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s", sbx_error_get0_message(err));
    char *want = tu_strdup_printf("sandbox %s expired at %s (lifetime 2 s)", id,
                                  sbx_error_get0_context(err, "expires_at"));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    sbx_error_free(err);
    cr_assert_eq(rows_for(id), 1, "the resume took the row of expired sandbox %s", id);
    free(want);
    free(state);
    free(id);
    sbx_client_free(c);
}

/* ------------------------------------------------- no lifetime at all */

/* The session state of @sb (asserted). */
static char *state_of(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
    return state;
}

/*
 * An attached sandbox without a lifetime (SBX_TIMEOUT_NONE): its record
 * row has no expiry, its session state says "timeout_secs":-1 and its
 * plugin data no lifetime ("lifetime":0.0,"expires_at":0.0: the
 * supervisor has no deadline); it is alive and answers 4.5 s after create (a 2 s lifetime
 * is over by 4 s, above); sbx_gc() leaves it (its owner, this process,
 * lives); it cannot be detached (configuration, naming the option and
 * the reason; the row stays attached); another process resumes it, runs a
 * command in it and exits, and it lives on for its creator; destroy then
 * leaves nothing.
 */
static void no_lifetime(void)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, SBX_TIMEOUT_NONE, NULL), 0);
    double t0 = tu_now();
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    char *id = tu_strdup_printf("%s", sbx_sandbox_get0_id(sb));

    char *sql = sqlite3_mprintf("SELECT count(*) FROM sandboxes WHERE provider_id = %Q AND "
                                "expires_at = 0 AND detached = 0", id);
    cr_assert_eq(tu_record_int(g_dirs.state, sql), 1, "%s", tu_record_dump(g_dirs.state));
    char *state = state_of(sb);
    cr_assert_not_null(strstr(state, ",\"timeout_secs\":-1,"), "%s", state);
    cr_assert_not_null(strstr(state, "\"lifetime\":0.0,\"expires_at\":0.0"), "%s", state);

    sbx_result *r = tu_sh(sb, "echo kept > f.txt", 30);
    sbx_result_free(r);
    while (tu_now() - t0 < 4.5)
        usleep(50 * 1000);
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 1, "the sandbox ended without a lifetime");
    r = tu_sh(sb, "cat f.txt", 30);
    cr_assert_str_eq(sbx_result_get0_stdout(r, NULL), "kept\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_gc(SBX_GC_DRY_RUN, NULL, NULL, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");

    cr_assert_eq(sbx_sandbox_detach(sb, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    char *want = tu_strdup_printf("timeout_secs: sandbox %s has no lifetime, and a detached "
                                  "sandbox needs one: nothing else would end it", id);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "timeout_secs");
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "detached");
    free(want);
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(tu_record_int(g_dirs.state, sql), 1, "the detach changed the row");

    /* Another process takes it up and lets go. */
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        sbx_client *c2 = sbx_client_new(tu_backend(), NULL);
        sbx_sandbox *again = c2 ? sbx_sandbox_resume(c2, state, NULL) : NULL;
        sbx_result *r2 = again ? sbx_sandbox_execute_shell(again, "cat f.txt", NULL) : NULL;
        int ok = r2 && strcmp(sbx_result_get0_stdout(r2, NULL), "kept\n") == 0;
        sbx_result_free(r2);
        sbx_sandbox_free(again);
        _exit(ok ? 0 : 3);
    }
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the resuming process: %d", status);
    usleep(1500 * 1000);
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 1, "the sandbox ended with its resumer");
    r = tu_sh(sb, "cat f.txt", 30);
    cr_assert_str_eq(sbx_result_get0_stdout(r, NULL), "kept\n");
    sbx_result_free(r);

    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    wait_nothing_left(id, 0, tu_now(), 2.0);
    cr_assert_eq(rows_for(id), 0);
    sqlite3_free(sql);
    free(state);
    free(id);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* A detached sandbox without a lifetime is refused before anything is
 * made: configuration, naming the option and the reason. */
static void no_lifetime_detached_refused(void)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, SBX_TIMEOUT_NONE, NULL), 0);
    cr_assert_eq(sbx_options_set_detached(o, 1, NULL), 0);
    cr_assert_null(sbx_sandbox_create(c, o, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION, "%s",
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "timeout_secs: a detached sandbox needs a lifetime: nothing else ends it "
                     "(no lifetime, SBX_TIMEOUT_NONE, is for an attached sandbox, which ends "
                     "with its owners)");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "timeout_secs");
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "detached");
    sbx_error_free(err);
    sbx_options_free(o);
    cr_assert_eq(tu_count_entries(g_dirs.tmp), 0, "the refused create made something");
    char *db = tu_strdup_printf("%s/lifecycle.db", g_dirs.state);
    if (tu_exists(db))
        cr_assert_eq(tu_record_int(g_dirs.state, "SELECT count(*) FROM sandboxes"), 0);
    free(db);
    sbx_client_free(c);
}

#define ON_BOTH(name, fn)                                                   \
    Test(expiry, local_##name)                                              \
    {                                                                       \
        cr_assert_eq(setenv("SBX_TEST_BACKEND", "local", 1), 0);            \
        fn();                                                               \
    }                                                                       \
    Test(expiry, bubblewrap_##name)                                         \
    {                                                                       \
        cr_assert_eq(setenv("SBX_TEST_BACKEND", "bubblewrap", 1), 0);       \
        fn();                                                               \
    }

ON_BOTH(a_two_second_lifetime_ends_the_sandbox, two_second_lifetime)
ON_BOTH(a_command_running_at_expiry_is_ended, command_at_expiry)
ON_BOTH(a_default_timeout_ignored_by_the_command_is_a_timeout, default_timeout_term_ignored)
ON_BOTH(a_detached_sandbox_ends_by_its_lifetime, detached_lifetime)
ON_BOTH(no_lifetime_lives_with_its_owners_alone, no_lifetime)
ON_BOTH(no_lifetime_is_refused_for_a_detached_sandbox, no_lifetime_detached_refused)

/* Backends that cannot end an attached sandbox when its owners end refuse
 * a sandbox without a lifetime by name, before the provider is asked
 * (docker: nothing runs after the application's SIGKILL in process). */
Test(expiry, no_lifetime_is_refused_where_nothing_else_bounds_the_sandbox)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("docker", &err);
    if (c == NULL && sbx_error_get_code(err) == SBX_ERROR_BACKEND_NOT_INSTALLED)
        cr_skip_test("the docker plugin is not built");
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, SBX_TIMEOUT_NONE, NULL), 0);
    cr_assert_null(sbx_sandbox_create(c, o, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION, "%s",
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "timeout_secs: backend \"docker\" cannot end an attached sandbox when its "
                     "owners end, so it needs a lifetime (no lifetime, SBX_TIMEOUT_NONE, is for "
                     "local, bubblewrap and safehouse)");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "timeout_secs");
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "backend");
    sbx_error_free(err);
    sbx_options_free(o);
    sbx_client_free(c);
}
