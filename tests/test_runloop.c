/*
 * test_runloop.c — what only the runloop backend does, through its contract
 * fake (tests/runloop.sh starts it and runs this program with
 * SBX_TEST_BACKEND=runloop): an execute whose answer was lost is sent again
 * with the same command_id and the command runs once; the 408 long-poll
 * loop goes on until the command completes; cpu and memory pick the
 * smallest named size that fits, else CUSTOM_SIZE; keep_alive_time_seconds
 * is always sent; destroy shuts the devbox down once; a devbox that failed
 * out_of_memory ends its command with 137 and the OOM flag (CASE-49), and
 * one that failed otherwise is gone with its failure_reason; list_owned
 * follows has_more to the last page (CASE-35); output past the wrapper's
 * report is downloaded exact; stop suspends (twice is fine) and start
 * resumes with the files; a resume from the session state wakes a
 * suspended devbox before it waits (CASE-53); a create answered after
 * its deadline is found by its token and shut down (CASE-20); a command's
 * output reaches the output callback while it runs (the update streams),
 * and an update stream cut off is reopened at its byte offset; text the
 * API's JSON cannot carry is refused before anything is sent (issue 16).
 */
#include "testutil.h"

#include <criterion/criterion.h>

#include <json-c/json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "runloop", "run by tests/runloop.sh");
    tu_fake_use("RUNLOOP_BASE_URL");
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"hold_cap\": 30, \"page_cap\": 5000, "
                 "\"lose_execute_answers\": 0, \"hold_create\": 0, \"drop_streams\": 0}");
    g_client = sbx_client_new("runloop", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
    g_sb = NULL;
}

static void teardown(void)
{
    tu_fake_post("/_fake/config", "{\"hold_cap\": 30, \"page_cap\": 5000, "
                 "\"lose_execute_answers\": 0, \"hold_create\": 0, \"drop_streams\": 0}");
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
}

TestSuite(runloop, .init = setup, .fini = teardown, .timeout = 90);

/* The fake's view of devbox @id (GET /_fake/devbox/ID), parsed. */
static json_object *fake_devbox(const char *id)
{
    char *path = tu_strdup_printf("/_fake/devbox/%s", id), *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    cr_assert_not_null(j);
    free(path);
    free(body);
    return j;
}

/* launch_parameters of the create body the fake got for @sb. */
static json_object *launch_params(sbx_sandbox *sb)
{
    json_object *j = fake_devbox(sbx_sandbox_get0_id(sb)), *lp = NULL, *out;
    json_object *body = NULL;
    cr_assert(json_object_object_get_ex(j, "body", &body));
    cr_assert(json_object_object_get_ex(body, "launch_parameters", &lp));
    out = json_object_get(lp);
    json_object_put(j);
    return out;
}

static long long lp_int(json_object *lp, const char *key)
{
    json_object *v = NULL;
    cr_assert(json_object_object_get_ex(lp, key, &v), "no %s", key);
    return (long long)json_object_get_int64(v);
}

static sbx_sandbox *create_sized(double cpu, long long memory_mb, double timeout)
{
    sbx_options *o = sbx_options_new();
    if (cpu > 0)
        cr_assert_eq(sbx_options_set_cpu(o, cpu, NULL), 0);
    if (memory_mb > 0)
        cr_assert_eq(sbx_options_set_memory_mb(o, memory_mb, NULL), 0);
    if (timeout > 0)
        cr_assert_eq(sbx_options_set_timeout_secs(o, timeout, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

Test(runloop, a_lost_execute_answer_is_sent_again_and_runs_once)
{
    g_sb = create_sized(0, 0, 0);
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"lose_execute_answers\": 1}");
    sbx_result *r = tu_sh(g_sb, "echo x >> /tmp/count; echo ran", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "ran\n");
    sbx_result_free(r);
    r = tu_sh(g_sb, "cat /tmp/count", 30);
    tu_assert_stdout(r, "x\n");
    sbx_result_free(r);
    /* The first two executes of the log: the lost one and its re-send,
     * with one command_id. */
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/v1/devboxes/%s/execute", sbx_sandbox_get0_id(g_sb));
    const char *ids[2] = { NULL, NULL };
    long statuses[2] = { 0, 0 };
    int n = 0;
    json_object *bodies[2] = { NULL, NULL };
    for (size_t i = 0; i < json_object_array_length(log) && n < 2; i++) {
        json_object *e = json_object_array_get_idx(log, i);
        if (strcmp(tu_json_str(e, "path"), re) != 0)
            continue;
        json_object *st = NULL;
        json_object_object_get_ex(e, "status", &st);
        statuses[n] = json_object_get_int(st);
        bodies[n] = json_tokener_parse(tu_json_str(e, "body"));
        ids[n] = tu_json_str(bodies[n], "command_id");
        n++;
    }
    cr_assert_eq(n, 2);
    cr_assert_eq(statuses[0], 502);
    cr_assert_eq(statuses[1], 200);
    cr_assert_not_null(ids[0]);
    cr_assert_str_eq(ids[0], ids[1]);
    cr_assert_eq(strlen(ids[0]), 36);
    cr_assert_eq(ids[0][14], '7', "command_id %s is not a UUIDv7", ids[0]);
    json_object_put(bodies[0]);
    json_object_put(bodies[1]);
    free(re);
    json_object_put(log);
}

/* Issue 16: what the API's JSON cannot carry (a byte that is not UTF-8 in
 * an argument, the shell command, the cwd; a path of read_file, whose
 * download names it in JSON, of write_file, whose chmod is a command, or
 * of list_files, a command) is invalid_argument naming the part, before
 * anything is sent; an env value goes as a file's bytes and arrives
 * exact (testutil.c). */
Test(runloop, text_json_cannot_carry_is_refused_before_sending)
{
    g_sb = tu_create(g_client, NULL);
    tu_json_text_refused("runloop", g_sb, TU_TEXT_WRITE | TU_TEXT_READ | TU_TEXT_LIST
                                          | TU_TEXT_ENV_AS_BYTES);
}

Test(runloop, the_408_loop_goes_on_until_the_command_completes)
{
    g_sb = create_sized(0, 0, 0);
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"hold_cap\": 0.2}");
    sbx_result *r = tu_sh(g_sb, "sleep 1.5; echo done; echo late >&2; exit 4", 30);
    tu_assert_exit(r, 4);
    tu_assert_stdout(r, "done\n");
    tu_assert_stderr(r, "late\n");
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    int waits = 0, held = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *st = NULL;
        const char *p = tu_json_str(e, "path");
        if (!strstr(p, "/executions/") || !strstr(p, "/wait_for_status"))
            continue;
        waits++;
        json_object_object_get_ex(e, "status", &st);
        held += json_object_get_int(st) == 408;
    }
    /* 1.5 s of command in holds of 0.2 s: several ended with 408, and
     * exactly one (the last) with the completed execution. */
    cr_assert(held >= 2, "%d holds ended with 408", held);
    cr_assert_eq(waits, held + 1);
    json_object_put(log);
}

Test(runloop, sizes_are_the_smallest_that_fit_else_custom)
{
    g_sb = create_sized(2, 4096, 0);
    json_object *lp = launch_params(g_sb);
    cr_assert_str_eq(tu_json_str(lp, "resource_size_request"), "MEDIUM");
    json_object_put(lp);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = create_sized(3, 0, 0);
    lp = launch_params(g_sb);
    cr_assert_str_eq(tu_json_str(lp, "resource_size_request"), "X_LARGE");
    json_object_put(lp);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = create_sized(12, 40000, 0);
    lp = launch_params(g_sb);
    cr_assert_str_eq(tu_json_str(lp, "resource_size_request"), "CUSTOM_SIZE");
    cr_assert_eq(lp_int(lp, "custom_cpu_cores"), 12);
    cr_assert_eq(lp_int(lp, "custom_gb_memory"), 40);
    json_object_put(lp);
}

Test(runloop, memory_under_x_small_names_the_minimum)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, 512, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err), "runloop backend: memory_mb 512: Runloop "
                     "devboxes have 1024 MB (X_SMALL) to 256 GiB");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "memory_mb");
    cr_assert_str_eq(sbx_error_get0_context(err, "min_mb"), "1024");
    sbx_error_free(err);
}

Test(runloop, the_lifetime_is_always_sent)
{
    g_sb = create_sized(0, 0, 0);
    json_object *lp = launch_params(g_sb);
    cr_assert_eq(lp_int(lp, "keep_alive_time_seconds"), 3600);
    json_object_put(lp);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = create_sized(0, 0, 100.5);
    lp = launch_params(g_sb);
    cr_assert_eq(lp_int(lp, "keep_alive_time_seconds"), 106);
    json_object_put(lp);
}

Test(runloop, destroy_shuts_the_devbox_down_once)
{
    g_sb = create_sized(0, 0, 0);
    char *id = strdup(sbx_sandbox_get0_id(g_sb));
    tu_fake_reset();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    json_object *j = fake_devbox(id);
    cr_assert_str_eq(tu_json_str(j, "status"), "shutdown");
    json_object_put(j);
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/v1/devboxes/%s/shutdown", id);
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    cr_assert_eq(json_object_array_length(log), 1);
    free(re);
    json_object_put(log);
    free(id);
}

/* A command that makes the fake fail its own devbox with @reason, then
 * sleeps: the fake is on this host's loopback, which the sandbox shares. */
static char *fail_script(const char *reason)
{
    const char *url = getenv("RUNLOOP_BASE_URL");
    return tu_strdup_printf("python3 -c 'import urllib.request as u; u.urlopen(u.Request("
                            "\"%s/_fake/devbox/%s/fail\", data=b\"{\\\"reason\\\": "
                            "\\\"%s\\\"}\", method=\"POST\"))'; sleep 20", url,
                            sbx_sandbox_get0_id(g_sb), reason);
}

Test(runloop, an_out_of_memory_failure_is_137_with_the_oom_flag)
{
    g_sb = create_sized(0, 0, 0);
    char *s = fail_script("out_of_memory");
    sbx_result *r = tu_sh(g_sb, s, 60);
    tu_assert_exit(r, 137);
    cr_assert_eq(sbx_result_is_oom_killed(r), 1);
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    sbx_result_free(r);
    free(s);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 0);
}

Test(runloop, a_failed_devbox_is_gone_with_its_failure_reason)
{
    g_sb = create_sized(0, 0, 0);
    char *s = fail_script("health_check_failed");
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_result *r = sbx_sandbox_execute_shell(g_sb, s, &err);
    cr_assert_null(r);
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s",
                 sbx_error_get0_message(err));
    sbx_error_free(err);
    err = NULL;
    free(s);
    /* Every later call fails at once; a fresh look names the reason. */
    r = sbx_sandbox_execute_shell(g_sb, "true", &err);
    cr_assert_null(r);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    sbx_error_free(err);
    err = NULL;
    sbx_sandbox *again = sbx_sandbox_resume(g_client, state, &err);
    cr_assert_null(again);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    cr_assert_str_eq(sbx_error_get0_context(err, "state"), "failure");
    cr_assert_str_eq(sbx_error_get0_context(err, "failure_reason"), "health_check_failed");
    sbx_error_free(err);
    free(state);
}

Test(runloop, list_owned_follows_every_page)
{
    sbx_sandbox *sbs[3];
    for (int i = 0; i < 3; i++)
        sbs[i] = create_sized(0, 0, 0);
    /* One devbox a page: each of the three found once, on pages of their
     * own (the devboxes of earlier tests are shut down, listed but not
     * live). */
    tu_fake_assert_list_owned_pages(g_client, sbs, "/v1/devboxes");
}

/* Output past what the wrapper's report carries is downloaded from its
 * files, exact, and the files are removed. */
Test(runloop, large_output_is_downloaded_exact)
{
    g_sb = create_sized(0, 0, 0);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "head -c 100000 /dev/zero | tr '\\0' 'a'; printf 'e%.0s' "
                          "$(seq 1 40000) >&2; exit 3", 30);
    tu_assert_exit(r, 3);
    size_t n = 0, m = 0;
    const char *out = sbx_result_get0_stdout(r, &n);
    const char *err = sbx_result_get0_stderr(r, &m);
    cr_assert_eq(n, 100000);
    cr_assert_eq(m, 40000);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(out[i], 'a', "byte %zu", i);
    for (size_t i = 0; i < m; i++)
        cr_assert_eq(err[i], 'e', "byte %zu", i);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/v1/devboxes/%s/download_file", sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 2);
    free(re);
    json_object_put(log);
    /* Only this command's own two files are there. */
    r = tu_sh(g_sb, "ls -a /tmp | grep -c '^\\.sbx-exec-'", 30);
    tu_assert_stdout(r, "2\n");
    sbx_result_free(r);
}

/* stop suspends the devbox, start resumes it with its files. */
Test(runloop, stop_suspends_and_start_resumes_with_the_files)
{
    g_sb = create_sized(0, 0, 0);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/root/keep.txt", "kept\n", 5, &err), 0,
                 "write_file: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_stop(g_sb, &err), 0, "stop: %s",
                 err ? sbx_error_get0_message(err) : "");
    json_object *j = fake_devbox(sbx_sandbox_get0_id(g_sb));
    cr_assert_str_eq(tu_json_str(j, "status"), "suspended");
    json_object_put(j);
    /* Stopping a stopped devbox succeeds. */
    cr_assert_eq(sbx_sandbox_stop(g_sb, &err), 0, "second stop: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_start(g_sb, &err), 0, "start: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(g_sb, "cat /root/keep.txt", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
}

/* A devbox suspended while no process had it is resumed by a resume from
 * its session state, with its files (CASE-53). */
Test(runloop, resume_wakes_a_suspended_devbox)
{
    g_sb = create_sized(0, 0, 0);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/root/keep.txt", "kept\n", 5, &err), 0);
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state);
    cr_assert_eq(sbx_sandbox_stop(g_sb, &err), 0, "stop: %s",
                 err ? sbx_error_get0_message(err) : "");
    tu_fake_reset();
    sbx_sandbox *again = sbx_sandbox_resume(g_client, state, &err);
    cr_assert_not_null(again, "resume: %s", err ? sbx_error_get0_message(err) : "");
    /* Resumed first, then waited for: no status hold ran out on the
     * suspended devbox. */
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/v1/devboxes/%s/(resume|wait_for_status)",
                                sbx_sandbox_get0_id(again));
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 2);
    const char *first = NULL;
    for (size_t i = 0; i < json_object_array_length(log) && !first; i++) {
        const char *p = tu_json_str(json_object_array_get_idx(log, i), "path");
        if (strstr(p, "/resume") || strstr(p, "/wait_for_status"))
            first = p;
    }
    cr_assert_not_null(strstr(first, "/resume"), "first: %s", first);
    free(re);
    json_object_put(log);
    sbx_result *r = tu_sh(again, "cat /root/keep.txt", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    sbx_sandbox_free(again);
    free(state);
}

/* The running devboxes at the fake, through its list route. */
static size_t fake_running(void)
{
    const char *key = getenv("RUNLOOP_API_KEY");
    char *h = tu_strdup_printf("Authorization: Bearer %s", key ? key : "");
    size_t n = tu_fake_array_length("/v1/devboxes?limit=5000&status=running", h, "devboxes");
    free(h);
    return n;
}

/* CASE-20: a create answered after the call's deadline made a devbox; the
 * plugin finds it by its create token (metadata) and shuts it down before
 * the timeout is returned. The call timeout bounds the create in both
 * plugin modes. */
Test(runloop, late_create_is_shut_down)
{
    size_t n0 = fake_running();
    tu_fake_post("/_fake/config", "{\"hold_create\": 4}");
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    sbx_error *err = NULL;
    double t0 = tu_now();
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    double dt = tu_now() - t0;
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    /* CASE-20: the timeout within 1.5 s; within 10 s the late devbox is shut down
     * (by the create's own look, or the reaper's after it). */
    cr_assert(dt <= 1.5, "the create returned after %.2f s", dt);
    sbx_error_free(err);
    cr_assert_eq(tu_wait_count(fake_running, n0, 10.0), n0, "the late devbox was not shut down "
                 "within 10 s");
}

/* ------------------------------------------------------------ live output */

/* The command prints a line, then waits (up to 10 s) for a file that only
 * the output callback makes, on seeing that line: "second" shows the line
 * reached the callback through the update stream while the command ran
 * ("never" when output came only at its end). */
Test(runloop, output_reaches_the_callback_while_the_command_runs)
{
    g_sb = create_sized(0, 0, 0);
    json_object *j = fake_devbox(sbx_sandbox_get0_id(g_sb));
    char *go = tu_strdup_printf("%s/tmp/go", tu_json_str(j, "root"));
    json_object_put(j);
    tu_assert_output_is_live(g_sb, go, "/tmp/go");
    free(go);
}

static void ignore_output(sbx_stream stream, const void *data, size_t len, void *ud)
{
    (void)stream;
    (void)data;
    (void)len;
    (void)ud;
}

/* Both update streams lose their connection after their first event: each
 * is reopened at the byte offset where it stopped, and the result is whole
 * and exact, bytes that are not UTF-8 included. */
Test(runloop, a_broken_update_stream_is_reopened_at_its_offset)
{
    g_sb = create_sized(0, 0, 0);
    tu_fake_reset();
    tu_fake_post("/_fake/config", "{\"drop_streams\": 2}");
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "echo one; echo err >&2; sleep 2; echo two; printf 'x\\377' >&2; exit 4";
    rq.timeout_secs = 30;
    rq.on_output = ignore_output;   /* the output is followed while it comes */
    sbx_result *r = tu_exec(g_sb, &rq);
    tu_assert_exit(r, 4);
    tu_assert_stdout(r, "one\ntwo\n");
    tu_assert_stderr_bytes(r, "err\nx\377", 6);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    int at0 = 0, at4 = 0;
    char seen[512] = "";
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *q = NULL;
        const char *p = tu_json_str(e, "path");
        if (!strstr(p, "/stream_stdout_updates") && !strstr(p, "/stream_stderr_updates"))
            continue;
        cr_assert(json_object_object_get_ex(e, "query", &q));
        const char *off = tu_json_str(q, "offset");
        cr_assert_not_null(off);
        snprintf(seen + strlen(seen), sizeof seen - strlen(seen), " %s@%s",
                 strstr(p, "stdout") ? "out" : "err", off);
        at0 += strcmp(off, "0") == 0;
        at4 += strcmp(off, "4") == 0;
    }
    json_object_put(log);
    /* Each stream opened at 0, and reopened at 4 ("one\n", "err\n"). */
    cr_assert_eq(at0, 2, "opened at:%s", seen);
    cr_assert_eq(at4, 2, "opened at:%s", seen);
}

/* A command whose output nobody follows reads no update stream and holds
 * its one execute to its end (past the first hold of a followed one): its
 * output comes in the wrapper's report, exact. */
Test(runloop, a_command_nobody_follows_is_one_execute)
{
    g_sb = create_sized(0, 0, 0);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "sleep 1.3; printf 'a\\0b\\377%%\\n'; printf 'e' >&2; exit 5",
                          30);
    tu_assert_exit(r, 5);
    tu_assert_stdout_bytes(r, "a\0b\377%\n", 6);
    tu_assert_stderr(r, "e");
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 1);
    cr_assert_eq(tu_fake_count(log, "POST", "/v1/devboxes/[^/]+/execute", NULL, 0), 1);
    json_object_put(log);
}
