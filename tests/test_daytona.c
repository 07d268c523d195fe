/*
 * test_daytona.c — the daytona backend against scripted faults of its
 * contract fake (tests/fakes/daytona.py): CASE-19 (429 with and without
 * Retry-After, on a read and, A to E, on the create), 5xx bursts on a read (retried) and on an unsafe call
 * (never re-sent, outcome unknown), CASE-32 (a sandbox deleted behind the
 * library's back is not_found "gone"), CASE-53 (a stopped or archived
 * sandbox is started on use, also for a command with stdin, a starting one
 * waited for, an errored one names its state), the requests of a warm
 * exec (one, two when its output is not UTF-8: CASE-07 exact) also on an
 * image without perl, the line an argv command is sent as (sh -c, as any
 * other), the sessions of
 * commands at once and of a freed handle, CASE-36
 * (the credential is never in an error, the session state or the fake's
 * log outside the header), CASE-20 (a create answered after the client's
 * timeout leaves no sandbox: found by its create token and deleted) and a
 * storm of 100 async creates against a provider that takes 5 at a time
 * (the fake's "concurrency" rule): all succeed, with backoff that grows;
 * the create's body: ttlMinutes max(1, ceil(lifetime / 60)) only for a
 * lifetime the caller set, autoStopInterval 15 always, memory in whole GB
 * and a memory_mb that is not a multiple of 1024 refused naming it; CASE-48
 * (this process's environment never reaches the sandbox or the provider);
 * execute_code in each language the reference gives Daytona (python,
 * javascript, typescript, ruby, go) and the shells, running real code;
 * CASE-52 C (a command quiet for 12 s, run at once or streamed, is not cut,
 * and ends at its own timeout; a command a signal ended, by its timeout
 * or itself, has only its own stderr: not its session shell's report of
 * it), A (behind a 5 s idle reaper in front of the
 * toolbox: the cut request's command is found by its mark and its logs
 * followed again, one start; a start the daemon never had, dropped, is
 * sent again once) and D (the fake's idle stop at 5 s: the
 * activity renewed every 2 s keeps the sandbox; without renewal the exec
 * fails saying stopped), and refresh_activity_s's bad values; warm execs one after another share one TCP
 * connection at the fake; files through the plugin (CASE-17, list_files,
 * HOME, CASE-45, CASE-46: the tu_files_* helpers of testutil.c).
 *
 * Run by tests/daytona.sh, which starts the fake and sets DAYTONA_API_URL
 * (http://127.0.0.1:PORT/api) and DAYTONA_API_KEY. The fake's control
 * routes (/_fake/...) are on the same port. Each test clears the fake's
 * request log and faults first and reads the log to count requests.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sbx/sbx.h>

#include "testutil.h"

static sbx_client *g_client;
static sbx_sandbox *g_sb;
static int g_port;

/* ------------------------------------------------------------ fixtures */

static void setup(void)
{
    g_port = tu_fake_use("DAYTONA_API_URL");
    cr_assert_str_eq(tu_backend(), "daytona");
    sbx_error *err = NULL;
    g_client = sbx_client_new("daytona", &err);
    cr_assert_not_null(g_client, "client: %s", err ? sbx_error_get0_message(err) : "");
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
}

static void teardown(void)
{
    tu_reaper_stop();
    if (g_port) {
        tu_fake_reset();
        tu_fake_post("/_fake/config", "{\"toolbox_url\":null}");
    }
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
    g_client = NULL;
}

TestSuite(daytona_faults, .init = setup, .fini = teardown, .timeout = 60);

static const char *sb_id(void)
{
    return sbx_sandbox_get0_id(g_sb);
}

/* ------------------------------------------------------------ CASE-19 */

/* A 429 on is_alive's read, GET /api/sandbox/{id} (testutil.c). With
 * Retry-After: 2 twice, the read waits what it names each time, then is
 * sent again and succeeds: three GETs, each at least 2 s after the one
 * before as the fake saw them. */
Test(daytona_faults, case19_429_with_retry_after_is_honoured)
{
    tu_fake_assert_retry_after_seconds_waited(g_sb, "/api/sandbox/");
}

/* Without Retry-After the first backoff is at least 0.5 s (no tight loop). */
Test(daytona_faults, case19_429_without_retry_after_backs_off)
{
    tu_fake_assert_backoff_without_retry_after(g_sb, "/api/sandbox/");
}

/* A Retry-After past the wait cap (60 s) fails at once: rate_limited,
 * retryable, retry_after_s in the context, one request. */
Test(daytona_faults, case19_429_with_an_hour_is_rate_limited_at_once)
{
    tu_fake_assert_retry_after_past_the_cap_rate_limited("daytona", g_sb, "/api/sandbox/");
}

/* CASE-19 A-E on the create (POST /api/sandbox), whose 429s are re-sent
 * (it carries its create token). */

#define CREATE_RE "/api/sandbox"

/* A client of its own with the client options @config (JSON). */
static sbx_client *client_with(const char *config)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_config("daytona", SBX_PLUGIN_MODE_DEFAULT, config, &err);
    cr_assert_not_null(c, "client %s: %s", config, err ? sbx_error_get0_message(err) : "");
    return c;
}

/* The next @times creates (-1: every one) are answered 429, with the rule's
 * members @extra (",\"retry_after\":...", or ""). */
static void creates_answer_429(int times, const char *extra)
{
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"^%s$\",\"status\":429,"
                                  "\"times\":%d%s}", CREATE_RE, times, extra);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
}

/* The statuses the fake answered to the creates it logged, in order, into
 * @st (up to @max); returns how many creates it logged. */
static int create_statuses(json_object *log, int *st, int max)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *v;
        if (strcmp(tu_json_str(e, "method"), "POST") != 0
            || strcmp(tu_json_str(e, "path"), CREATE_RE) != 0)
            continue;
        if (n < max)
            st[n] = json_object_object_get_ex(e, "status", &v) ? json_object_get_int(v) : -1;
        n++;
    }
    return n;
}

/* Asserts that the fake holds the fixture's sandbox and @id only (sorted,
 * as /_fake/sandboxes lists them), or the fixture's alone when @id is NULL. */
static void assert_fake_holds(const char *id)
{
    char *ids = NULL, *want;
    cr_assert_eq(tu_fake_http("GET", "/_fake/sandboxes", NULL, NULL, &ids), 200);
    if (!id)
        want = tu_strdup_printf("[\"%s\"]", sb_id());
    else if (strcmp(id, sb_id()) < 0)
        want = tu_strdup_printf("[\"%s\", \"%s\"]", id, sb_id());
    else
        want = tu_strdup_printf("[\"%s\", \"%s\"]", sb_id(), id);
    cr_assert_str_eq(ids, want);
    free(want);
    free(ids);
}

/* CASE-19 A: two 429s with Retry-After: 2, then success, with retries = 3:
 * the create returns the sandbox the third POST made, after exactly 3
 * POSTs (429, 429, 200), each gap >= 2.0 s as the fake saw them. */
Test(daytona_faults, case19_a_create_waits_retry_after_each_time)
{
    sbx_client *c = client_with("{\"retries\": 3}");
    creates_answer_429(2, ",\"retry_after\":\"2\"");
    sbx_sandbox *sb = tu_create(c, NULL);
    json_object *log = tu_fake_log();
    double t[3] = { 0, 0, 0 };
    int st[3] = { 0, 0, 0 };
    cr_assert_eq(tu_fake_count(log, "POST", CREATE_RE, t, 3), 3);
    cr_assert_eq(create_statuses(log, st, 3), 3);
    cr_assert(st[0] == 429 && st[1] == 429 && st[2] == 200, "statuses %d %d %d", st[0], st[1],
              st[2]);
    cr_assert(t[1] - t[0] >= 2.0, "the second POST came %.3f s after the first", t[1] - t[0]);
    cr_assert(t[2] - t[1] >= 2.0, "the third POST came %.3f s after the second", t[2] - t[1]);
    json_object_put(log);
    assert_fake_holds(sbx_sandbox_get0_id(sb));
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* CASE-19 B: one 429 whose Retry-After is an HTTP-date 3 s after the
 * answer's Date, then success: 2 POSTs, the gap >= 2.5 s (3 s less 0.5 s
 * of skew). */
Test(daytona_faults, case19_b_create_waits_retry_after_date)
{
    creates_answer_429(1, ",\"retry_after_date\":3");
    sbx_sandbox *sb = tu_create(g_client, NULL);
    json_object *log = tu_fake_log();
    double t[2] = { 0, 0 };
    int st[2] = { 0, 0 };
    cr_assert_eq(tu_fake_count(log, "POST", CREATE_RE, t, 2), 2);
    cr_assert_eq(create_statuses(log, st, 2), 2);
    cr_assert(st[0] == 429 && st[1] == 200, "statuses %d %d", st[0], st[1]);
    cr_assert(t[1] - t[0] >= 2.5, "the second POST came %.3f s after the first", t[1] - t[0]);
    json_object_put(log);
    assert_fake_holds(sbx_sandbox_get0_id(sb));
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
}

/* CASE-19 C: as A with retries = 0: rate_limited, retryable, with
 * retry_after_s 2 in its context, after exactly 1 POST; no sandbox made. */
Test(daytona_faults, case19_c_create_without_retries_is_rate_limited)
{
    sbx_client *c = client_with("{\"retries\": 0}");
    creates_answer_429(2, ",\"retry_after\":\"2\"");
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(c, NULL, &err), "the create succeeded");
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_RATE_LIMITED, "code %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_str_eq(sbx_error_get0_backend(err), "daytona");
    cr_assert_str_eq(sbx_error_get0_context(err, "retry_after_s"), "2");
    cr_assert_str_eq(sbx_error_get0_context(err, "http_status"), "429");
    cr_assert_null(sbx_error_get0_context(err, "attempts"), "attempts: %s",
                   sbx_error_get0_context(err, "attempts"));
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", CREATE_RE, NULL, 0), 1);
    json_object_put(log);
    assert_fake_holds(NULL);
    sbx_client_free(c);
}

/* CASE-19 D: Retry-After: 3600, past the 60 s cap: rate_limited at once
 * with retry_after_s 3600 in its context, after exactly 1 POST. */
Test(daytona_faults, case19_d_create_with_an_hour_is_rate_limited_at_once)
{
    creates_answer_429(1, ",\"retry_after\":\"3600\"");
    sbx_error *err = NULL;
    double t0 = tu_now();
    cr_assert_null(sbx_sandbox_create(g_client, NULL, &err), "the create succeeded");
    cr_assert(tu_now() - t0 < 30.0, "it waited");
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_RATE_LIMITED, "code %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_str_eq(sbx_error_get0_context(err, "retry_after_s"), "3600");
    cr_assert_null(sbx_error_get0_context(err, "attempts"));
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", CREATE_RE, NULL, 0), 1);
    json_object_put(log);
    assert_fake_holds(NULL);
}

/* CASE-19 E: every create answered 429 without Retry-After, retries = 3:
 * exactly 1 + 3 POSTs (no tight loop), then rate_limited with attempts 4.
 * The waits are equal jitter over steps of 1, 2 and 4 s, so the gaps are at
 * least their fixed halves, 0.5, 1 and 2 s: the first >= 0.5 s, and
 * growing. */
Test(daytona_faults, case19_e_create_without_retry_after_backs_off)
{
    sbx_client *c = client_with("{\"retries\": 3}");
    creates_answer_429(-1, "");
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(c, NULL, &err), "the create succeeded");
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_RATE_LIMITED, "code %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "attempts"), "4");
    cr_assert_str_eq(sbx_error_get0_context(err, "retry_after_s"), "0");
    const char *w = sbx_error_get0_context(err, "waited_s");
    cr_assert(w && atof(w) >= 3.5, "waited_s: %s", w ? w : "(none)");
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    double t[4] = { 0, 0, 0, 0 };
    cr_assert_eq(tu_fake_count(log, "POST", CREATE_RE, t, 4), 4);
    json_object_put(log);
    cr_assert(t[1] - t[0] >= 0.5, "the first re-send came %.3f s after the 429", t[1] - t[0]);
    cr_assert(t[2] - t[1] >= 1.0, "the second re-send came %.3f s after", t[2] - t[1]);
    cr_assert(t[3] - t[2] >= 2.0, "the third re-send came %.3f s after", t[3] - t[2]);
    assert_fake_holds(NULL);
    sbx_client_free(c);
}

/* ------------------------------------------------------------ 5xx bursts */

/* A read (file download) answered 503 twice is sent again and gives the
 * whole file: three downloads. */
Test(daytona_faults, a_5xx_burst_on_a_read_is_retried)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/r.txt", "read me\n", 8, &err), 0);
    char *re = tu_strdup_printf("/toolbox/%s/files/download", sb_id());
    char *rule = tu_strdup_printf("{\"method\":\"GET\",\"path\":\"^%s$\",\"status\":503,"
                                  "\"times\":2}", re);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/work/r.txt", &data, &len, &err), 0,
                 "read_file: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 8);
    cr_assert_eq(memcmp(data, "read me\n", 8), 0);
    free(data);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "GET", re, NULL, 0), 3);
    free(re);
    json_object_put(log);
}

/* The command's start (POST .../exec, not safe to repeat) answered 502 is
 * never sent again: the exec fails (connection, so retryable by its code)
 * with outcome unknown after exactly one start request. */
Test(daytona_faults, a_5xx_on_an_unsafe_call_is_never_resent)
{
    const char *re_fmt = "/toolbox/%s/process/session/[^/]+/exec";
    char *re = tu_strdup_printf(re_fmt, sb_id());
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"^%s$\",\"status\":502}", re);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo once";
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(g_sb, &req, &err);
    cr_assert_null(r, "the exec succeeded");
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN, "outcome of %s",
                 sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONNECTION, "code %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_str_eq(sbx_error_get0_backend(err), "daytona");
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    free(re);
    json_object_put(log);
    /* The sandbox works on. */
    r = tu_sh(g_sb, "echo after", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after\n");
    sbx_result_free(r);
}

/* ------------------------------------------------------------ CASE-32 */

/* Deleted behind the library's back: the next exec is not_found "gone"
 * with the sandbox's id in its context (sandbox_id), not retryable, after
 * two requests (the toolbox's 404 and the control plane's, which confirms
 * it); the one after fails at once with no request; destroy succeeds
 * without one. */
Test(daytona_faults, case32_a_vanished_sandbox_is_gone)
{
    sbx_result *r = tu_sh(g_sb, "echo hi", 10);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", sb_id());
    tu_fake_post(path, NULL);
    free(path);
    tu_fake_reset();

    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo again";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    cr_assert_not_null(sbx_error_get0_context(err, "sandbox_id"), "no sandbox_id: %s",
                       sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "sandbox_id"), sb_id());
    cr_assert_str_eq(sbx_error_get0_backend(err), "daytona");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    char *want = tu_strdup_printf("daytona sandbox %s is gone (the provider no longer has it)",
                                  sb_id());
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    free(want);
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 2, "%s",
                 json_object_to_json_string(log));
    char *item = tu_strdup_printf("^/api/sandbox/%s$", sb_id());
    cr_assert_eq(tu_fake_count(log, "GET", item, NULL, 0), 1, "%s",
                 json_object_to_json_string(log));
    free(item);
    json_object_put(log);

    req.shell = "echo third";
    err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    cr_assert_not_null(sbx_error_get0_context(err, "sandbox_id"));
    cr_assert_str_eq(sbx_error_get0_context(err, "sandbox_id"), sb_id());
    sbx_error_free(err);
    err = NULL;
    tu_fake_reset();
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);
    log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 0, "%s", json_object_to_json_string(log));
    json_object_put(log);
}

/* A 404 from the toolbox (every /process/session call) says nothing of the
 * sandbox itself: the exec fails with the toolbox's 404 (not_found, not
 * "gone") after the control plane's look (a GET of the sandbox, which
 * answers started); the host's is_alive on the not_found (a second GET)
 * and the caller's say 1 (the sandbox's record is kept); destroy sends
 * its DELETE, and the fake holds the sandbox no more. */
Test(daytona_faults, a_toolbox_404_is_not_gone_until_the_control_plane_says_so)
{
    tu_fake_post("/_fake/faults", "{\"path\":\"/process/session\",\"status\":404,"
                 "\"times\":-1,\"body\":{\"message\":\"provider says 404\"}}");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo hi";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_null(sbx_error_get0_context(err, "reason"), "reason %s: %s",
                   sbx_error_get0_context(err, "reason"), sbx_error_get0_message(err));
    cr_assert_not_null(strstr(sbx_error_get0_message(err), "provider says 404"), "%s",
                       sbx_error_get0_message(err));
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    char *item = tu_strdup_printf("^/api/sandbox/%s$", sb_id());
    cr_assert_eq(tu_fake_count(log, "GET", item, NULL, 0), 2, "%s",
                 json_object_to_json_string(log));
    json_object_put(log);
    err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1, "is_alive: %s",
                 err ? sbx_error_get0_message(err) : "");

    tu_fake_reset();
    char *id = tu_strdup_printf("%s", sb_id());
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_null(err);
    log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "DELETE", item, NULL, 0), 1, "%s",
                 json_object_to_json_string(log));
    json_object_put(log);
    free(item);
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id);
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, NULL), 404, "the fake still has %s", id);
    free(path);
    free(id);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
}

/* ------------------------------------------------------------ CASE-53 */

/* Stopped by the provider: is_alive still says it exists; the exec starts
 * it (one start request, no create, no delete) and sees its file. */
Test(daytona_faults, case53_a_stopped_sandbox_is_started_on_use)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/keep.txt", "kept\n", 5, &err), 0);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/state", sb_id());
    tu_fake_post(path, "{\"state\":\"stopped\"}");
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "cat /work/keep.txt", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/api/sandbox/%s/start", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "POST", "/api/sandbox", NULL, 0), 0);
    cr_assert_eq(tu_fake_count(log, "DELETE", "/api/sandbox/.*", NULL, 0), 0);
    free(re);
    json_object_put(log);
    free(path);
}

/* Being started by someone else ("starting", then "started" after 1 s):
 * the exec waits for it and sends no start request of its own. */
Test(daytona_faults, case53_a_starting_sandbox_is_waited_for)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/keep.txt", "kept\n", 5, &err), 0);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/state", sb_id());
    tu_fake_post(path, "{\"state\":\"starting\",\"after\":1}");
    free(path);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "cat /work/keep.txt", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/api/sandbox/.*/start", NULL, 0), 0);
    cr_assert(tu_fake_count(log, "GET", "/api/sandbox/[^/]+", NULL, 0) >= 1,
              "the state was not read");
    json_object_put(log);
}

/* In state error: no start request, and an error carrying the state (in
 * its context) and the provider's errorReason (in its message); not
 * not_found. */
Test(daytona_faults, case53_an_errored_sandbox_names_its_state)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s/state", sb_id());
    tu_fake_post(path, "{\"state\":\"error\",\"errorReason\":\"disk quota exceeded\"}");
    free(path);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo no";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_EXECUTION_FAILED);
    cr_assert_str_eq(sbx_error_get0_context(err, "state"), "error");
    char *want = tu_strdup_printf("daytona sandbox %s is in state error: disk quota exceeded",
                                  sb_id());
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    free(want);
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/api/sandbox/.*/start", NULL, 0), 0);
    json_object_put(log);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
}

/* The session id in a logged toolbox path (a new string), or NULL. */
static char *session_of(json_object *entry)
{
    const char *pth = tu_json_str(entry, "path");
    const char *at = strstr(pth, "/process/session/");
    if (!at)
        return NULL;
    at += strlen("/process/session/");
    return strndup(at, strcspn(at, "/"));
}

/* The fake's view of the sandbox (GET /_fake/sandbox/ID), parsed. */
static json_object *fake_sandbox(void)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", sb_id());
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    cr_assert(j && json_object_is_type(j, json_type_object), "%s", body);
    free(body);
    free(path);
    return j;
}

static int64_t jint(json_object *o, const char *k)
{
    json_object *v;
    cr_assert(json_object_object_get_ex(o, k, &v), "no \"%s\" in %s", k,
              json_object_to_json_string(o));
    return json_object_get_int64(v);
}

/* Archived by the provider (CASE-53 B): is_alive says it exists and
 * starts nothing; the exec sends exactly one start request, waits through
 * "restoring" (3 s here) until "started" and sees the file written before:
 * the same sandbox, no create, no delete. The handle's toolbox session
 * ended with the archived sandbox's daemon: the command is sent to it
 * twice (400 "Is the Sandbox started?", then, after the start, 404), then
 * once to one new session. */
Test(daytona_faults, case53_an_archived_sandbox_is_started_on_use)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/keep.txt", "kept\n", 5, &err), 0);
    sbx_result *r = tu_sh(g_sb, "echo warm", 10);
    tu_assert_stdout(r, "warm\n");
    sbx_result_free(r);
    tu_fake_post("/_fake/config", "{\"start_delay\":{\"archived\":3}}");
    char *path = tu_strdup_printf("/_fake/sandbox/%s/state", sb_id());
    tu_fake_post(path, "{\"state\":\"archived\"}");
    free(path);
    tu_fake_reset();

    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1, "is_alive: %s",
                 err ? sbx_error_get0_message(err) : "");
    json_object *fs = fake_sandbox();
    cr_assert_str_eq(tu_json_str(fs, "state"), "archived");
    cr_assert_eq(jint(fs, "starts"), 0);
    json_object_put(fs);

    double t0 = tu_now();
    r = tu_sh(g_sb, "cat /work/keep.txt", 30);
    double waited = tu_now() - t0;
    tu_fake_post("/_fake/config", "{\"start_delay\":{\"archived\":0}}");
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
    /* Not before the fake's restore was over. */
    cr_assert(waited >= 3.0, "the exec ended %.3f s after it began, inside \"restoring\"",
              waited);

    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/api/sandbox/%s/start", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    free(re);
    cr_assert_eq(tu_fake_count(log, "POST", "/api/sandbox", NULL, 0), 0);
    cr_assert_eq(tu_fake_count(log, "DELETE", "/api/sandbox/.*", NULL, 0), 0);
    re = tu_strdup_printf("/toolbox/%s/process/session", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    free(re);
    re = tu_strdup_printf("/toolbox/%s/process/session/[^/]+/exec", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 3, "%s", json_object_to_json_string(log));
    free(re);
    json_object_put(log);
    fs = fake_sandbox();
    cr_assert_str_eq(tu_json_str(fs, "state"), "started");
    cr_assert_eq(jint(fs, "starts"), 1);
    json_object_put(fs);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
}

/* A command with stdin on a stopped sandbox: the stdin upload is the
 * exec's first request and meets the stopped sandbox; after the one start
 * it is sent again whole (300,000 bytes of every byte value), and the
 * command reads all of it. */
Test(daytona_faults, case53_stdin_reaches_a_command_on_a_stopped_sandbox)
{
    sbx_result *r = tu_sh(g_sb, "echo warm", 10);
    sbx_result_free(r);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/state", sb_id());
    tu_fake_post(path, "{\"state\":\"stopped\"}");
    free(path);
    tu_fake_reset();

    size_t n = 300000;
    unsigned char *in = malloc(n);
    for (size_t i = 0; i < n; i++)
        in[i] = (unsigned char)(i * 7 + i / 256);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat; echo done >&2";
    req.stdin_data = in;
    req.stdin_len = n;
    req.timeout_secs = 30;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, in, n);
    tu_assert_stderr(r, "done\n");
    sbx_result_free(r);
    free(in);

    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/api/sandbox/%s/start", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    free(re);
    re = tu_strdup_printf("/toolbox/%s/files/upload", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 2);
    free(re);
    json_object_put(log);
}

/* ------------------------------------------------------------ warm exec */

/* The bytes an output callback got, per stream. */
typedef struct streamed {
    char out[256], err[256];
    size_t nout, nerr;
} streamed;

static void keep_output(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    streamed *s = user_data;
    char *dst = stream == SBX_STREAM_STDERR ? s->err : s->out;
    size_t *n = stream == SBX_STREAM_STDERR ? &s->nerr : &s->nout;
    if (*n + len <= sizeof s->out) {
        memcpy(dst + *n, data, len);
        *n += len;
    }
}

/* An exec on a handle that has run a command before (so it has an idle
 * toolbox session), without stdin and without an output callback, takes
 * exactly one request when its output is UTF-8: the command run in that
 * session with "runAsync": false, whose answer carries its exit code and
 * its stdout and stderr, apart and byte for byte. With an
 * output callback it takes three: the command started (POST .../exec), its
 * output followed as it comes (GET .../logs) and its exit code read
 * (GET .../command/ID). With stdin, the upload of stdin is a fourth, in
 * the same session, and the command removes the uploaded file itself. No
 * session is made or deleted. */
Test(daytona_faults, a_warm_exec_takes_one_request_three_when_streamed)
{
    sbx_result *r = tu_sh(g_sb, "echo warm", 10);
    tu_assert_stdout(r, "warm\n");
    sbx_result_free(r);
    char *sess = tu_strdup_printf("/toolbox/%s/process/session/sbx-session-[0-9a-f]{24}",
                                  sb_id());
    char *exec_re = tu_strdup_printf("%s/exec", sess);
    char *logs_re = tu_strdup_printf("%s/command/[^/]+/logs", sess);
    char *cmd_re = tu_strdup_printf("%s/command/[^/]+", sess);
    char *upload_re = tu_strdup_printf("/toolbox/%s/files/upload", sb_id());
    char *first_session = NULL;
    static const int requests[3] = { 1, 3, 4 };

    for (int round = 0; round < 3; round++) {
        streamed got = { .nout = 0 };
        tu_fake_reset();
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        if (round == 0) {
            req.shell = "printf 'out\\303\\251\\342\\202\\254\\n'; printf 'err\\303\\274\\n' >&2; "
                        "exit 3";
        } else if (round == 1) {
            req.shell = "echo out; echo err >&2; exit 3";
            req.on_output = keep_output;
            req.user_data = &got;
        } else {
            req.shell = "cat; echo err >&2";
            req.stdin_data = "piped\n";
            req.stdin_len = 6;
        }
        req.timeout_secs = 10;
        r = tu_exec(g_sb, &req);
        tu_assert_exit(r, round == 2 ? 0 : 3);
        if (round == 0) {
            tu_assert_stdout_bytes(r, "out\303\251\342\202\254\n", 9);
            tu_assert_stderr_bytes(r, "err\303\274\n", 6);
        } else {
            tu_assert_stdout(r, round == 1 ? "out\n" : "piped\n");
            tu_assert_stderr(r, "err\n");
        }
        sbx_result_free(r);
        if (round == 1) {
            cr_assert_eq(got.nout, 4);
            cr_assert_eq(memcmp(got.out, "out\n", 4), 0);
            cr_assert_eq(got.nerr, 4);
            cr_assert_eq(memcmp(got.err, "err\n", 4), 0);
        }

        json_object *log = tu_fake_log();
        cr_assert_eq(json_object_array_length(log), requests[round], "round %d: %s", round,
                     json_object_to_json_string(log));
        cr_assert_eq(tu_fake_count(log, "POST", exec_re, NULL, 0), 1);
        cr_assert_eq(tu_fake_count(log, "GET", logs_re, NULL, 0), round == 0 ? 0 : 1);
        cr_assert_eq(tu_fake_count(log, "GET", cmd_re, NULL, 0), round == 0 ? 0 : 1);
        cr_assert_eq(tu_fake_count(log, "POST", upload_re, NULL, 0), round == 2 ? 1 : 0);
        /* The same session every time. */
        for (size_t i = 0; i < json_object_array_length(log); i++) {
            char *id = session_of(json_object_array_get_idx(log, i));
            if (!id)
                continue;
            if (!first_session)
                first_session = id;
            else {
                cr_assert_str_eq(id, first_session);
                free(id);
            }
        }
        json_object_put(log);
    }
    /* The stdin file is gone from the sandbox. */
    r = tu_sh(g_sb, "ls -a /tmp | grep '^\\.sbx-exec-' || true", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "");
    sbx_result_free(r);
    free(first_session);
    free(sess);
    free(exec_re);
    free(logs_re);
    free(cmd_re);
    free(upload_re);
}

/* The one-request exec against the daemon's JSON text (the fake answers
 * as the daemon: each byte that is not UTF-8 is U+FFFD in the answer's
 * stdout and stderr, the command's logs are its bytes). Each round runs on
 * a warm handle without an output callback and checks the exact bytes of
 * both streams, apart, and the requests the fake saw:
 *  0. CASE-07: stdout 6f 6b ff fe 0a, stderr 65 80 0a, exit 0: the answer
 *     holds U+FFFD, so the output is read once from the logs (no follow):
 *     2 requests;
 *  1. UTF-8 that is not ASCII on both streams: 1 request;
 *  2. output that really holds U+FFFD (EF BF BD written by the command):
 *     the answer cannot tell it from a replaced byte, so the logs are
 *     read: 2 requests, the bytes exact;
 *  3. a lone byte on stderr only, stdout UTF-8: 2 requests, both exact. */
Test(daytona_faults, the_one_request_exec_is_byte_exact_through_the_logs)
{
    char *sess = tu_strdup_printf("/toolbox/%s/process/session/sbx-session-[0-9a-f]{24}",
                                  sb_id());
    char *exec_re = tu_strdup_printf("%s/exec", sess);
    char *logs_re = tu_strdup_printf("%s/command/[^/]+/logs", sess);
    sbx_result *r = tu_sh(g_sb, "true", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    static const struct {
        const char *shell, *out, *err;
        size_t nout, nerr;
        int exit_code, requests;
    } rounds[] = {
        { "printf 'ok\\377\\376\\n'; printf 'e\\200\\n' >&2", "ok\377\376\n", "e\200\n", 5, 3,
          0, 2 },
        { "printf 'h\\303\\251\\n'; printf '\\342\\202\\254\\n' >&2; exit 4", "h\303\251\n",
          "\342\202\254\n", 4, 4, 4, 1 },
        { "printf 'a\\357\\277\\275b\\n'; printf '\\357\\277\\275\\n' >&2", "a\357\277\275b\n",
          "\357\277\275\n", 6, 4, 0, 2 },
        { "printf 'fine\\n'; printf '\\342\\202\\n' >&2; exit 1", "fine\n", "\342\202\n", 5, 3,
          1, 2 },
    };
    for (size_t i = 0; i < sizeof rounds / sizeof rounds[0]; i++) {
        tu_fake_reset();
        r = tu_sh(g_sb, rounds[i].shell, 10);
        tu_assert_exit(r, rounds[i].exit_code);
        tu_assert_stdout_bytes(r, rounds[i].out, rounds[i].nout);
        tu_assert_stderr_bytes(r, rounds[i].err, rounds[i].nerr);
        sbx_result_free(r);
        json_object *log = tu_fake_log();
        cr_assert_eq(json_object_array_length(log), rounds[i].requests, "round %zu: %s", i,
                     json_object_to_json_string(log));
        cr_assert_eq(tu_fake_count(log, "POST", exec_re, NULL, 0), 1, "round %zu", i);
        cr_assert_eq(tu_fake_count(log, "GET", logs_re, NULL, 0), rounds[i].requests - 1,
                     "round %zu", i);
        /* The logs read whole, not followed. */
        for (size_t k = 0; k < json_object_array_length(log); k++) {
            json_object *e = json_object_array_get_idx(log, k), *q, *f;
            if (json_object_object_get_ex(e, "query", &q)
                && json_object_object_get_ex(q, "follow", &f))
                cr_assert_fail("round %zu: a followed read: %s", i,
                               json_object_to_json_string(e));
        }
        json_object_put(log);
    }
    free(sess);
    free(exec_re);
    free(logs_re);
}

/* The exec needs nothing of the image but /bin/sh: on one whose PATH has
 * no perl (the fake's no_perl) a warm exec is still one request, its
 * stdout and stderr apart and exact, and output that is not UTF-8 two. */
Test(daytona_faults, an_image_without_perl_takes_one_request)
{
    sbx_result *r = tu_sh(g_sb, "true", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    char *no_perl = tu_strdup_printf("/_fake/sandbox/%s/no_perl", sb_id());
    tu_fake_post(no_perl, "{}");
    free(no_perl);
    for (int round = 0; round < 2; round++) {
        tu_fake_reset();
        r = tu_sh(g_sb, round == 0 ? "command -v perl || echo 'no perl'; echo err >&2; exit 3"
                                   : "command -v perl || printf 'no\\377\\n'; exit 3", 10);
        tu_assert_exit(r, 3);
        if (round == 0) {
            tu_assert_stdout(r, "no perl\n");
            tu_assert_stderr(r, "err\n");
        } else {
            tu_assert_stdout_bytes(r, "no\377\n", 4);
            tu_assert_stderr(r, "");
        }
        sbx_result_free(r);
        json_object *log = tu_fake_log();
        cr_assert_eq(json_object_array_length(log), round + 1, "round %d: %s", round,
                     json_object_to_json_string(log));
        json_object_put(log);
    }
}

/* A command given as an argv runs under sh -c like any other (daytona.c,
 * top: a bare program in the daemon's bash session could differ): its
 * line at the daemon is exactly the marker, then /bin/sh -c with "exec"
 * and the quoted words, exec'd in a subshell whose stderr is the
 * command's, its group's stdin /dev/null and its session shell's stderr
 * /dev/null (daytona.c, dt_command_line). What that line gives
 * for a program with no #! line: it is read by /bin/sh (exit 3, its
 * arguments whole), and when it runs past its timeout it is killed whole
 * (its shell loop is gone once the exec returned). The fake runs each
 * line in /bin/sh, not in a bash session, so the line is what tells. */
Test(daytona_faults, an_argv_command_runs_under_sh_c_like_any_other)
{
    sbx_result *r = tu_sh(g_sb, "printf '%s\\n' 'printf \"%s|\" \"$0\" \"$@\"' 'exit 3' > /tmp/ns"
                          " && printf '%s\\n' 'echo $$ > /tmp/loop.pid' 'while :; do sleep 0.1; "
                          "done' > /tmp/loop && chmod 755 /tmp/ns /tmp/loop", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    tu_fake_reset();
    static const char *const ns[] = { "/tmp/ns", "a b", NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = ns;
    req.timeout_secs = 10;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 3);
    tu_assert_stdout(r, "/tmp/ns|a b|");
    tu_assert_stderr(r, "");
    sbx_result_free(r);

    /* The line the session's shell got (the fake logs a request's body
     * as it reads it, before it answers). */
    char *ex = tu_strdup_printf("^/toolbox/%s/process/session/sbx-session-[0-9a-f]{24}/exec$",
                                sb_id());
    regex_t re;
    cr_assert_eq(regcomp(&re, ex, REG_EXTENDED | REG_NOSUB), 0);
    json_object *body = NULL, *cv;
    json_object *log = tu_fake_log();
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        const char *m = tu_json_str(e, "method"), *path = tu_json_str(e, "path");
        if (!m || !path || strcmp(m, "POST") != 0 || regexec(&re, path, 0, NULL, 0) != 0)
            continue;
        n++;
        const char *b = tu_json_str(e, "body");
        if (b)
            body = json_tokener_parse(b);
    }
    cr_assert_eq(n, 1, "%s", json_object_to_json_string(log));
    cr_assert_not_null(body, "no body logged: %s", json_object_to_json_string(log));
    json_object_put(log);
    regfree(&re);
    cr_assert(json_object_object_get_ex(body, "command", &cv), "%s",
              json_object_to_json_string(body));
    const char *line = json_object_get_string(cv);
    cr_assert_eq(regcomp(&re, "^\\{ :; \\( SBX_EXEC_ID=sbx-exec-[0-9a-f]{24} ",
                         REG_EXTENDED | REG_NOSUB), 0);
    cr_assert_eq(regexec(&re, line, 0, NULL, 0), 0, "%s", line);
    regfree(&re);
    cr_assert_str_eq(line + strlen("{ :; ( SBX_EXEC_ID=sbx-exec-") + 25,
                     "exec /bin/sh -c 'exec '\\''/tmp/ns'\\'' '\\''a b'\\''' sh ) 2>&3 3>&-; } "
                     "< '/dev/null' 3>&2 2>/dev/null");
    json_object_put(body);
    free(ex);

    static const char *const loop[] = { "/tmp/loop", NULL };
    req.argv = loop;
    req.timeout_secs = 1;
    r = sbx_sandbox_execute_command(g_sb, &req, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    sbx_result_free(r);
    r = tu_sh(g_sb, "kill -0 $(cat /tmp/loop.pid) 2>/dev/null; echo $?", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
}

/* Two commands at once on one handle run in two sessions (a session's
 * shell runs its commands in turn, so a busy one is never handed out):
 * the first waits on a FIFO the second writes. One session is made for
 * the second command; a third command, after both ended, makes none. */
Test(daytona_faults, commands_at_once_get_sessions_of_their_own)
{
    sbx_result *r = tu_sh(g_sb, "rm -f /tmp/f && mkfifo /tmp/f", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat /tmp/f";
    req.timeout_secs = 20;
    sbx_error *err = NULL;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    r = tu_sh(g_sb, "echo through > /tmp/f; echo sent", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "sent\n");
    sbx_result_free(r);
    int code = -1;
    sbx_result *pr = NULL;
    cr_assert_eq(sbx_process_wait(p, 20, &code, &pr, &err), 1, "wait: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(code, 0);
    tu_assert_stdout(pr, "through\n");
    sbx_result_free(pr);
    sbx_process_free(p);

    json_object *log = tu_fake_log();
    char *mk = tu_strdup_printf("/toolbox/%s/process/session", sb_id());
    char *ex = tu_strdup_printf("/toolbox/%s/process/session/[^/]+/exec", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", mk, NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "POST", ex, NULL, 0), 2);
    char *first = NULL, *second = NULL;
    regex_t rx;
    char *anch = tu_strdup_printf("^%s$", ex);
    cr_assert_eq(regcomp(&rx, anch, REG_EXTENDED | REG_NOSUB), 0);
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        if (strcmp(tu_json_str(e, "method"), "POST") != 0 || regexec(&rx, tu_json_str(e, "path"), 0, NULL, 0))
            continue;
        if (!first)
            first = session_of(e);
        else
            second = session_of(e);
    }
    regfree(&rx);
    cr_assert(first && second && strcmp(first, second) != 0,
              "both commands ran in session %s", first ? first : "(none)");
    json_object_put(log);

    tu_fake_reset();
    r = tu_sh(g_sb, "echo third", 10);
    tu_assert_stdout(r, "third\n");
    sbx_result_free(r);
    log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", mk, NULL, 0), 0);
    /* One request: the output comes with the answer (nothing streams it). */
    cr_assert_eq(json_object_array_length(log), 1, "%s", json_object_to_json_string(log));
    json_object_put(log);
    free(anch);
    free(first);
    free(second);
    free(mk);
    free(ex);
}

/* A handle freed while its sandbox lives on (here a second handle,
 * resumed from the first's session state on an in-process client, whose
 * free reaches the plugin at once; out of process the plugin host holds
 * a freed handle until it ends) deletes its idle session: one DELETE of
 * it and nothing else; the sandbox and the first handle work on. */
Test(daytona_faults, a_freed_handle_deletes_its_session)
{
    sbx_error *err = NULL;
    sbx_client *c2 = sbx_client_new_with_mode("daytona", SBX_PLUGIN_MODE_IN_PROCESS, &err);
    cr_assert_not_null(c2, "client: %s", err ? sbx_error_get0_message(err) : "");
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state, "session_state: %s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb2 = sbx_sandbox_resume(c2, state, &err);
    free(state);
    cr_assert_not_null(sb2, "resume: %s", err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb2, "echo two", 10);
    tu_assert_stdout(r, "two\n");
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    char *mk = tu_strdup_printf("/toolbox/%s/process/session", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", mk, NULL, 0), 1);
    char *sid = NULL;
    for (size_t i = 0; i < json_object_array_length(log) && !sid; i++)
        sid = session_of(json_object_array_get_idx(log, i));
    cr_assert_not_null(sid);
    json_object_put(log);
    tu_fake_reset();

    sbx_sandbox_free(sb2);
    log = tu_fake_log();
    char *del = tu_strdup_printf("/toolbox/%s/process/session/%s", sb_id(), sid);
    cr_assert_eq(tu_fake_count(log, "DELETE", del, NULL, 0), 1);
    cr_assert_eq(json_object_array_length(log), 1, "%s", json_object_to_json_string(log));
    json_object_put(log);
    sbx_client_free(c2);
    r = tu_sh(g_sb, "echo one", 10);
    tu_assert_stdout(r, "one\n");
    sbx_result_free(r);
    free(del);
    free(sid);
    free(mk);
}

/* ------------------------------------------------------------ CASE-36 */

/* The provider echoes the credential in its 401: the error the library
 * gives holds no trace of it; neither do the session state nor the fake's
 * log (where the header reads "Bearer <redacted>"; testutil.c). */
Test(daytona_faults, case36_the_credential_is_never_shown)
{
    tu_fake_assert_credential_scrubbed("daytona", "DAYTONA_API_KEY", g_client, g_sb,
                                       "/api/sandbox", "Authorization");
}

/* ------------------------------------------------------------ CASE-20 */

/* How many sandboxes the fake holds. */
static size_t fake_sandbox_count(void)
{
    return tu_fake_array_length("/_fake/sandboxes", NULL, NULL);
}

/* The create's answer comes 5 s after the client's create_timeout (1 s):
 * create fails with timeout and outcome unknown before the answer, after
 * one POST; the sandbox the fake then makes is found by its create token
 * (a labels query) and deleted, so the fake holds what it held before. */
Test(daytona_faults, case20_a_create_answered_too_late_leaves_nothing)
{
    size_t before = fake_sandbox_count();
    tu_fake_post("/_fake/faults", "{\"method\":\"POST\",\"path\":\"^/api/sandbox$\","
                               "\"action\":\"pass\",\"delay\":5}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"create_timeout\":1}", NULL), 0);
    sbx_error *err = NULL;
    double t0 = tu_now();
    cr_assert_null(sbx_sandbox_create(g_client, o, &err), "the late create succeeded");
    double dt = tu_now() - t0;
    sbx_options_free(o);
    /* CASE-20: the timeout within 1.5 s (create_timeout 1). */
    cr_assert(dt <= 1.5, "the create returned after %.2f s", dt);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    sbx_error_free(err);
    /* The fake makes the sandbox when it answers, 5 s after the POST; the
     * reaper looks once a second. */
    double end = tu_now() + 20.0;
    int deleted = 0;
    while (tu_now() < end && !deleted) {
        json_object *log = tu_fake_log();
        deleted = tu_fake_count(log, "DELETE", "/api/sandbox/[^/]+", NULL, 0) == 1;
        json_object_put(log);
        if (!deleted)
            usleep(200000);
    }
    cr_assert(deleted, "the late sandbox was not deleted");
    cr_assert_eq(fake_sandbox_count(), before);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/api/sandbox", NULL, 0), 1);
    cr_assert(tu_fake_count(log, "GET", "/api/sandbox", NULL, 0) >= 1, "no look-up by token");
    int by_token = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *q, *l;
        if (strcmp(tu_json_str(e, "path"), "/api/sandbox") == 0
            && strcmp(tu_json_str(e, "method"), "GET") == 0
            && json_object_object_get_ex(e, "query", &q) && json_object_object_get_ex(q, "labels", &l)
            && strstr(json_object_get_string(l), "\"sbx_create_token\":\"sbx-") != NULL)
            by_token = 1;
    }
    cr_assert(by_token, "no look-up by the create token label");
    json_object_put(log);
}

/* ------------------------------------------------------------ a create storm */

#define STORM_N 100
#define STORM_AT_ONCE 5
/* The client's defaults (cloud.h): a create refused with 429 is sent again
 * up to 8 times, after equal-jitter waits in [0.5, 1), [1, 2), [2, 4), then
 * [4, 8) s. */
#define STORM_RATE_LIMIT_RETRIES 8

typedef struct storm {
    sbx_sandbox *sb[STORM_N];
    int created, failed, destroyed;
    char first_error[512];
} storm;

static void storm_created(sbx_op *op, void *ud)
{
    storm *s = ud;
    sbx_sandbox *sb = sbx_op_steal_sandbox(op);
    if (sb) {
        s->sb[s->created++] = sb;
        return;
    }
    if (!s->failed++) {
        const sbx_error *e = sbx_op_get_error(op);
        snprintf(s->first_error, sizeof(s->first_error), "%s",
                 e ? sbx_error_get0_message(e) : "no error");
    }
}

static void storm_destroyed(sbx_op *op, void *ud)
{
    storm *s = ud;
    if (!sbx_op_get_error(op))
        s->destroyed++;
    else if (!s->failed++)
        snprintf(s->first_error, sizeof(s->first_error), "destroy: %s",
                 sbx_error_get0_message(sbx_op_get_error(op)));
}

/* The create token in the body of a logged create. */
static char *storm_token(json_object *entry)
{
    json_object *b = json_tokener_parse(tu_json_str(entry, "body"));
    json_object *labels, *t;
    cr_assert(b && json_object_object_get_ex(b, "labels", &labels)
              && json_object_object_get_ex(labels, "sbx_create_token", &t),
              "a create without a token: %s", tu_json_str(entry, "body"));
    char *s = strdup(json_object_get_string(t));
    json_object_put(b);
    return s;
}

/* 100 creates at once through the async API against a provider that takes
 * 5 at a time and answers 429 without Retry-After beyond that: every
 * create succeeds. At the fake's log, each create token was answered 200
 * exactly once, on its last attempt, after at most 8 refusals (the
 * client's rate_limit_retries): at most 900 creates in all, whatever the
 * timing, where a client that did not wait would have spent its 9 attempts
 * at once and failed. The re-sends spread out: across tokens, the mean gap
 * before the k-th re-send grows with k (equal jitter in [0.5, 1) s, then
 * [1, 2), [2, 4): means near 0.75, 1.5, 3 s, each plus the same request
 * latency; the waits before re-sends k and k + 1 do not even overlap),
 * compared while at least 10 tokens were
 * re-sent k times (k = 1 and 2 always have more: most tokens are refused
 * twice). And no gap, of any token, is below the fixed half of its step
 * (0.5, 1, 2, then 4 s): the floor of the backoff. Each admitted create
 * holds its slot 0.05 s longer than its real sandbox takes, so the fake
 * takes at most 100 a second however fast this machine is: the re-sends
 * of the first half second are refused again, a storm every time (without
 * the hold a quiet machine drained it before 10 tokens were refused
 * twice). The storm lasts some seconds. Then 100 destroys, and the fake
 * holds only the fixture's sandbox. */
Test(daytona_faults, storm_100_creates_5_at_a_time_slow, .timeout = 180)
{
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"^/api/sandbox$\","
                                  "\"concurrency\":%d,\"delay\":0.05}", STORM_AT_ONCE);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    storm *s = calloc(1, sizeof(*s));
    sbx_error *err = NULL;
    sbx_async *async = sbx_async_new(STORM_N, &err);
    cr_assert_not_null(async, "async: %s", err ? sbx_error_get0_message(err) : "");
    for (int i = 0; i < STORM_N; i++)
        cr_assert_not_null(sbx_sandbox_create_async(async, g_client, NULL, storm_created, s,
                                                    &err));
    while (sbx_async_pending(async) > 0)
        sbx_async_wait(async, -1);
    cr_assert_eq(s->failed, 0, "%d creates failed, the first: %s", s->failed, s->first_error);
    cr_assert_eq(s->created, STORM_N);

    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/faults", NULL, NULL, &body), 200);
    json_object *rules = json_tokener_parse(body);
    free(body);
    json_object *r0 = json_object_array_get_idx(rules, 0), *v;
    cr_assert(json_object_object_get_ex(r0, "admitted", &v));
    cr_assert_eq(json_object_get_int(v), STORM_N);
    cr_assert(json_object_object_get_ex(r0, "peak", &v));
    cr_assert_eq(json_object_get_int(v), STORM_AT_ONCE, "the fake never had 5 at once");
    cr_assert(json_object_object_get_ex(r0, "acted", &v));
    int refused = json_object_get_int(v);
    json_object_put(rules);

    /* Per token: its attempts' times and statuses, in log order. */
    json_object *log = tu_fake_log();
    size_t n = json_object_array_length(log);
    char *tokens[STORM_N];
    int ntok = 0, attempts[STORM_N] = { 0 }, ok[STORM_N] = { 0 }, posts = 0, n429 = 0;
    double times[STORM_N][STORM_RATE_LIMIT_RETRIES + 1];
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(log, i), *st, *tv;
        if (strcmp(tu_json_str(e, "method"), "POST") != 0 || strcmp(tu_json_str(e, "path"), "/api/sandbox"))
            continue;
        posts++;
        char *t = storm_token(e);
        int k = 0;
        while (k < ntok && strcmp(tokens[k], t) != 0)
            k++;
        if (k == ntok) {
            cr_assert_lt(ntok, STORM_N, "more than %d create tokens", STORM_N);
            tokens[ntok++] = t;
        } else {
            free(t);
        }
        cr_assert(json_object_object_get_ex(e, "status", &st));
        cr_assert(json_object_object_get_ex(e, "time", &tv));
        int status = json_object_get_int(st);
        cr_assert_eq(ok[k], 0, "token %s was sent again after its 200", tokens[k]);
        cr_assert(status == 200 || status == 429, "a create answered %d", status);
        cr_assert_lt(attempts[k], STORM_RATE_LIMIT_RETRIES + 1,
                     "token %s was sent more than 1 + %d times", tokens[k],
                     STORM_RATE_LIMIT_RETRIES);
        times[k][attempts[k]++] = json_object_get_double(tv);
        if (status == 200)
            ok[k] = 1;
        else
            n429++;
    }
    json_object_put(log);
    cr_assert_eq(ntok, STORM_N);
    for (int k = 0; k < ntok; k++)
        cr_assert_eq(ok[k], 1, "token %s never got its 200", tokens[k]);
    cr_assert_eq(n429, refused);
    cr_assert_eq(posts, STORM_N + n429);
    cr_assert_leq(posts, STORM_N * (1 + STORM_RATE_LIMIT_RETRIES));

    /* Every gap at least the fixed half of its step. */
    for (int i = 0; i < ntok; i++)
        for (int k = 1; k < attempts[i]; k++) {
            double floor_s = k >= 4 ? 4.0 : 0.5 * (1 << (k - 1));
            cr_assert_geq(times[i][k] - times[i][k - 1], floor_s,
                          "token %s: re-send %d came %.3f s after the 429 before it, below "
                          "%.1f s", tokens[i], k, times[i][k] - times[i][k - 1], floor_s);
        }

    /* The mean gap before the k-th re-send, over the tokens re-sent k
     * times, for k = 1..3 while at least 10 tokens were. */
    double mean[3] = { 0, 0, 0 };
    int nmean = 0;
    for (int k = 1; k <= 3; k++) {
        double sum = 0;
        int g = 0;
        for (int i = 0; i < ntok; i++)
            if (attempts[i] > k) {
                sum += times[i][k] - times[i][k - 1];
                g++;
            }
        if (g < 10)
            break;
        mean[nmean++] = sum / g;
    }
    cr_log_info("storm: %d creates, %d refused, mean gaps %.3f %.3f %.3f s", posts, n429,
                mean[0], mean[1], mean[2]);
    cr_assert_geq(nmean, 2, "fewer than 10 tokens were re-sent twice: no storm");
    for (int k = 1; k < nmean; k++)
        cr_assert_gt(mean[k], mean[k - 1], "the mean gap before re-send %d (%.3f s) is not "
                     "above the one before re-send %d (%.3f s)", k + 1, mean[k], k,
                     mean[k - 1]);
    for (int k = 0; k < ntok; k++)
        free(tokens[k]);

    /* 100 destroys; the fake holds the fixture's sandbox only. */
    tu_fake_reset();
    for (int i = 0; i < STORM_N; i++)
        cr_assert_not_null(sbx_sandbox_destroy_async(async, s->sb[i], storm_destroyed, s,
                                                     &err));
    while (sbx_async_pending(async) > 0)
        sbx_async_wait(async, -1);
    cr_assert_eq(s->failed, 0, "%s", s->first_error);
    cr_assert_eq(s->destroyed, STORM_N);
    sbx_async_free(async);
    for (int i = 0; i < STORM_N; i++)
        sbx_sandbox_free(s->sb[i]);
    free(s);
    char *ids = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/sandboxes", NULL, NULL, &ids), 200);
    char *want = tu_strdup_printf("[\"%s\"]", sb_id());
    cr_assert_str_eq(ids, want);
    free(want);
    free(ids);
    log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "DELETE", "/api/sandbox/[^/]+", NULL, 0), STORM_N);
    json_object_put(log);
}

/* Exposed ports resolve to the sandbox's preview link (GET
 * /sandbox/{id}/ports/{port}/preview-url); a port not exposed is
 * not_found without a call; with SBX_DEBUG=1 the link's token (the
 * x-daytona-preview-token) appears in no log line, address, session state
 * or error, a retried call included. */
Test(daytona_faults, exposed_ports_are_preview_links_without_their_token)
{
    tu_debug_log l;
    tu_debug_log_start(&l);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("daytona", &err);
    cr_assert_not_null(c);
    static const uint16_t ports[] = { 3000 };
    sbx_sandbox *sb = tu_create_with_ports(c, ports, 1);
    const char *id = sbx_sandbox_get0_id(sb);

    /* The first call for the link fails once with a 503 and is retried. */
    char *rule = tu_strdup_printf("{\"method\":\"GET\",\"path\":\"^/api/sandbox/%s/ports/\","
                                  "\"status\":503}", id);
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    char *want = tu_strdup_printf("https://3000-%s.proxy.daytona.works", id);
    tu_assert_port_url(sb, 3000, want);
    free(want);

    tu_assert_port_not_exposed(sb, "daytona", 8080);
    cr_assert_null(sbx_sandbox_resolve_port(sb, 8080, &err));
    char *errtext = sbx_error_to_string(err);
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_sandbox_expose_port(sb, 8080, &err), 0);
    want = tu_strdup_printf("https://8080-%s.proxy.daytona.works", id);
    tu_assert_port_url(sb, 8080, want);
    free(want);
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state);
    sbx_sandbox *again = sbx_sandbox_resume(c, state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_ports(again, "3000,8080");
    sbx_sandbox_free(again);
    cr_assert_eq(sbx_sandbox_unexpose_port(sb, 8080, &err), 0);
    tu_assert_port_not_exposed(sb, "daytona", 8080);

    /* The token, as the provider hands it out. */
    char *path = tu_strdup_printf("/api/sandbox/%s/ports/3000/preview-url", id), *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, "Authorization: Bearer sbx-test-dummy-key", NULL,
                              &body), 200);
    json_object *j = json_tokener_parse(body), *tv;
    cr_assert(json_object_object_get_ex(j, "token", &tv), "%s", body);
    const char *token = json_object_get_string(tv);
    cr_assert_geq(strlen(token), 16);

    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    char *logbuf = tu_debug_log_stop(&l);
    cr_assert_not_null(strstr(logbuf, "HTTP 503, retrying"), "no retry logged: %s", logbuf);
    cr_assert_null(strstr(logbuf, token), "the preview token is in the log");
    cr_assert_null(strstr(state, token), "the preview token is in the session state");
    cr_assert_null(strstr(errtext, token), "the preview token is in an error");
    json_object_put(j);
    free(body);
    free(path);
    free(state);
    free(errtext);
    free(logbuf);
}

/* ------------------------------------------------------------ create bodies */

/* The body of the one create the fake logged since the last reset, parsed
 * (json_object_put() it). Asserts that exactly one was logged. */
static json_object *the_create_body(void)
{
    json_object *log = tu_fake_log(), *body = NULL;
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        if (strcmp(tu_json_str(e, "method"), "POST") != 0
            || strcmp(tu_json_str(e, "path"), CREATE_RE) != 0)
            continue;
        n++;
        const char *text = tu_json_str(e, "body");
        cr_assert_not_null(text, "a create without a body: %s", json_object_to_json_string(e));
        json_object_put(body);
        body = json_tokener_parse(text);
        cr_assert(body && json_object_is_type(body, json_type_object), "%s", text);
    }
    cr_assert_eq(n, 1, "%d creates logged", n);
    json_object_put(log);
    return body;
}

/* A create on the fixture's client with @o, whose sandbox is destroyed at
 * once: the body it sent. */
static json_object *create_body_of(const sbx_options *o)
{
    sbx_sandbox *sb = tu_create(g_client, o);
    json_object *body = the_create_body();
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    return body;
}

/* The reference's TTL mapping (README, lifetimes): a lifetime the caller
 * set is ttlMinutes = max(1, ceil(timeout_secs / 60)), so 90 s is 2
 * minutes and 30 s is 1; the idle stop (15 minutes) goes with it. */
Test(daytona_faults, a_lifetime_set_is_ttl_minutes_rounded_up)
{
    static const struct { double secs; int64_t minutes; } want[] = {
        { 90, 2 }, { 30, 1 }, { 120, 2 }, { 120.5, 3 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tu_fake_reset();
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_timeout_secs(o, want[i].secs, NULL), 0);
        json_object *body = create_body_of(o);
        sbx_options_free(o);
        cr_assert_eq(jint(body, "ttlMinutes"), want[i].minutes, "timeout_secs %g: %s",
                     want[i].secs, json_object_to_json_string(body));
        cr_assert_eq(jint(body, "autoStopInterval"), 15, "%s", json_object_to_json_string(body));
        json_object_put(body);
    }
}

/* With no lifetime set by the caller no ttlMinutes is sent: the provider's
 * idle stop, autoStopInterval 15, bounds the sandbox. */
Test(daytona_faults, no_lifetime_set_sends_the_idle_stop_alone)
{
    json_object *body = create_body_of(NULL), *v;
    cr_assert_not(json_object_object_get_ex(body, "ttlMinutes", &v), "%s",
                  json_object_to_json_string(body));
    cr_assert_eq(jint(body, "autoStopInterval"), 15, "%s", json_object_to_json_string(body));
    json_object_put(body);
}

/* Daytona sets memory in whole GB: a multiple of 1024 MiB is sent in GB,
 * anything else is refused before any request, naming the option and the
 * step. */
Test(daytona_faults, memory_not_a_multiple_of_the_step_is_refused)
{
    static const int64_t bad[] = { 512, 1000, 1536, 3073 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_memory_mb(o, bad[i], NULL), 0);
        sbx_error *err = NULL;
        cr_assert_null(sbx_sandbox_create(g_client, o, &err), "memory_mb %lld accepted",
                       (long long)bad[i]);
        sbx_options_free(o);
        char *msg = tu_strdup_printf("daytona backend: memory_mb %lld: Daytona sets memory in "
                                     "whole GB: give a multiple of 1024 MiB (the smallest is "
                                     "1024)", (long long)bad[i]);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
        cr_assert_str_eq(sbx_error_get0_message(err), msg);
        cr_assert_str_eq(sbx_error_get0_op(err), "create");
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), "memory_mb");
        cr_assert_str_eq(sbx_error_get0_context(err, "step_mb"), "1024");
        cr_assert_str_eq(sbx_error_get0_context(err, "min_mb"), "1024");
        free(msg);
        sbx_error_free(err);
    }
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", CREATE_RE, NULL, 0), 0, "a refused create was sent");
    json_object_put(log);

    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, 2048, NULL), 0);
    json_object *body = create_body_of(o);
    sbx_options_free(o);
    cr_assert_eq(jint(body, "memory"), 2, "%s", json_object_to_json_string(body));
    json_object_put(body);
}

/* A number the create body's int32 cannot carry, or a cpu that is not a
 * whole number of cores, is refused before any request: configuration,
 * op create, naming the option and its value. */
static void refused_create(sbx_options *o, const char *option, const char *msg,
                           const char *key, const char *value)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err), "%s accepted", option);
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION, "%s: %s", option,
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), option);
    cr_assert_not_null(sbx_error_get0_context(err, key), "no %s", key);
    cr_assert_str_eq(sbx_error_get0_context(err, key), value);
    sbx_error_free(err);
}

Test(daytona_faults, numbers_the_body_cannot_carry_are_refused)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 1e10, NULL), 0);
    refused_create(o, "cpu", "daytona backend: cpu 10000000000: Daytona takes a whole number "
                   "of CPU cores, at most 2147483647", "max", "2147483647");
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 0.5, NULL), 0);
    refused_create(o, "cpu", "daytona backend: cpu 0.5: Daytona takes a whole number of CPU "
                   "cores, at most 2147483647", "step", "1");
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 2.5, NULL), 0);
    refused_create(o, "cpu", "daytona backend: cpu 2.5: Daytona takes a whole number of CPU "
                   "cores, at most 2147483647", "step", "1");
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, (int64_t)1 << 42, NULL), 0);
    refused_create(o, "memory_mb", "daytona backend: memory_mb 4398046511104: Daytona takes at "
                   "most 2147483647 GB of memory (2199023254528 MiB)", "max_mb",
                   "2199023254528");
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 1e12, NULL), 0);
    refused_create(o, "timeout_secs", "daytona backend: timeout_secs 1000000000000: Daytona "
                   "takes a lifetime of at most 2147483647 minutes (128849018820 s)", "max_s",
                   "128849018820");
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", CREATE_RE, NULL, 0), 0, "a refused create was sent");
    json_object_put(log);

    /* A whole cpu and the longest lifetime the body carries are sent as
     * they are (the fake, as Daytona, takes at most 4 cores and 8 GB). */
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 3, NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, (double)INT_MAX * 60, NULL), 0);
    json_object *body = create_body_of(o);
    sbx_options_free(o);
    cr_assert_eq(jint(body, "cpu"), 3, "%s", json_object_to_json_string(body));
    cr_assert_eq(jint(body, "ttlMinutes"), INT_MAX, "%s", json_object_to_json_string(body));
    json_object_put(body);
}

/* ------------------------------------------------------------ CASE-48 */

/* Canaries in this process's environment never reach the sandbox or the
 * provider; the create's env does. */
Test(daytona_faults, case48_creator_environment_never_reaches_the_sandbox)
{
    tu_fake_assert_env_canaries("daytona", "DAYTONA_API_KEY");
}

/* ------------------------------------------------------------ execute_code */

/* The languages the reference gives execute_code on Daytona (python,
 * javascript, typescript, ruby, go), and the shells, each running real code
 * through the fake's toolbox (this machine's interpreters, which
 * scripts/install-test-deps installs): stdout and stderr apart, the exit
 * code, stdin. @env (NULL: none) is the call's environment. */
static void code_runs_env(const char *language, const char *const *env, const char *code,
                          const char *in, const char *out, const char *errout, int exit_code)
{
    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.stdin_data = in;
    req.stdin_len = strlen(in);
    req.timeout_secs = 120;
    req.env = env;
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_code(g_sb, language, code, &req, &err);
    cr_assert_not_null(r, "%s: %s", language, err ? sbx_error_get0_message(err) : "");
    tu_assert_stdout(r, out);
    tu_assert_stderr(r, errout);
    tu_assert_exit(r, exit_code);
    sbx_result_free(r);
    /* It ran through the toolbox: one command started in a session. */
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("^/toolbox/%s/process/session/[^/]+/exec$", sb_id());
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1, "%s",
                 json_object_to_json_string(log));
    free(re);
    json_object_put(log);
}

/* As code_runs_env without an environment; @interpreter names the
 * program for the reader only. */
static void code_runs(const char *language, const char *interpreter, const char *code,
                      const char *in, const char *out, const char *errout, int exit_code)
{
    (void)interpreter;
    code_runs_env(language, NULL, code, in, out, errout, exit_code);
}

Test(daytona_faults, execute_code_python)
{
    code_runs(NULL, NULL,
              "import sys\nprint(sum(range(10)), sys.stdin.read().upper())\n"
              "print('e', file=sys.stderr)\nsys.exit(3)", "in", "45 IN\n", "e\n", 3);
}

Test(daytona_faults, execute_code_javascript)
{
    static const char js[] =
        "let s = ''; process.stdin.on('data', d => s += d).on('end', () => {"
        " console.log([1, 2, 3].map(x => x * 2).join(','), s.toUpperCase());"
        " console.error('e'); process.exit(4); });";
    code_runs("javascript", "node", js, "in", "2,4,6 IN\n", "e\n", 4);
    code_runs("js", "node", "console.log(typeof require)", "", "function\n", "", 0);
    code_runs("node", "node", "console.log(6 * 7)", "", "42\n", "", 0);
}

Test(daytona_faults, execute_code_typescript)
{
    /* Debian's ts-node: its modules are in /usr/share/nodejs, which a node
     * not from Debian does not search, and this machine has no type
     * definitions of node's (@types/node, which Daytona's image has): so it
     * compiles without checking types. The code is TypeScript all the same. */
    static const char *const env[] = { "NODE_PATH=/usr/share/nodejs",
                                       "TS_NODE_TRANSPILE_ONLY=true", NULL };
    code_runs_env("typescript", env,
                  "const n: number = 6 * 7; console.log(n, typeof require);"
                  " console.error('e'); process.exit(5);", "", "42 function\n", "e\n", 5);
}

Test(daytona_faults, execute_code_ruby)
{
    code_runs("ruby", "ruby", "puts [1, 2, 3].sum, STDIN.read.upcase; warn 'e'; exit 6", "in",
              "6\nIN\n", "e\n", 6);
}

Test(daytona_faults, execute_code_go)
{
    static const char go[] =
        "package main\n"
        "import (\"fmt\"; \"io\"; \"os\"; \"strings\")\n"
        "func main() {\n"
        "\tb, _ := io.ReadAll(os.Stdin)\n"
        "\tfmt.Println(6*7, strings.ToUpper(string(b)))\n"
        "\tfmt.Fprintln(os.Stderr, \"e\")\n"
        "\tos.Exit(7)\n"
        "}\n";
    code_runs("go", "go", go, "in", "42 IN\n", "e\n", 7);
}

Test(daytona_faults, execute_code_shells)
{
    code_runs("bash", "bash", "a=(x y); echo ${#a[@]} $(cat); echo e >&2; exit 8", "in",
              "2 in\n", "e\n", 8);
    code_runs("sh", NULL, "echo $((6*7)) $(cat); echo e >&2", "in", "42 in\n", "e\n", 0);
}

/* ------------------------------------------------------------ CASE-52 */

/* Daytona's contract streams a command's output only as its followed logs
 * (chunked, no keepalive frames of the provider's: CASE-52 B has nothing
 * to test here), and answers a command run at once only when it has ended:
 * both requests are quiet while the command is. */

typedef struct chunks {
    char out[64];
    size_t len;
    int n, empty, err;
} chunks;

static void count_chunks(sbx_stream stream, const void *data, size_t len, void *ud)
{
    chunks *c = ud;
    c->err += stream != SBX_STREAM_STDOUT;
    c->n++;
    c->empty += len == 0;
    if (c->len + len < sizeof c->out) {
        memcpy(c->out + c->len, data, len);
        c->len += len;
    }
}

/* The session exec requests (the command's starts) in the fake's log. */
static int command_starts(void)
{
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("^/toolbox/%s/process/session/[^/]+/exec$", sb_id());
    int n = tu_fake_count(log, "POST", re, NULL, 0);
    free(re);
    json_object_put(log);
    return n;
}

/* CASE-52's command as a request: `sleep 12; echo done`, timeout 60, run
 * at once (@c NULL) or streamed into @c (count_chunks). */
static sbx_exec_request quiet_request(chunks *c)
{
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 12; echo done";
    req.timeout_secs = 60;
    if (c) {
        req.on_output = count_chunks;
        req.user_data = c;
    }
    return req;
}

/* Runs CASE-52's command (quiet_request) on g_sb, at once or, with
 * @stream, streamed, and asserts how it ended: "done\n" on stdout, nothing
 * on stderr, exit 0, not timed out, after 12 s and less than @max_s; the
 * streamed output reached the callback as "done\n", in no empty chunk and
 * none on stderr. */
static void assert_quiet_command_done(int stream, double max_s)
{
    const char *how = stream ? "streamed" : "at once";
    chunks c = { .len = 0 };
    sbx_exec_request req = quiet_request(stream ? &c : NULL);
    double t0 = tu_now();
    sbx_result *r = tu_exec(g_sb, &req);
    double dt = tu_now() - t0;
    tu_assert_stdout(r, "done\n");
    tu_assert_stderr(r, "");
    tu_assert_exit(r, 0);
    cr_assert_eq(sbx_result_is_timed_out(r), 0);
    sbx_result_free(r);
    cr_assert(dt >= 12.0 && dt < max_s, "%s: the command took %.2f s", how, dt);
    if (stream) {
        tu_assert_bytes("the streamed output", c.out, c.len, "done\n", 5);
        cr_assert_eq(c.empty, 0, "%d empty chunks", c.empty);
        cr_assert_eq(c.err, 0, "%d chunks on stderr", c.err);
    }
}

/* C: a command that prints nothing for 12 s (longer than the transport's
 * one fixed limit, the 10 s to connect) is not cut, run at once (its one
 * request quiet for 12 s) or streamed (its followed logs quiet as long):
 * "done\n", exit 0, after one start of the command each time. The
 * streamed output reaches the callback as one chunk, never an empty one. */
Test(daytona_faults, case52_a_quiet_command_is_not_cut)
{
    for (int stream = 0; stream < 2; stream++) {
        tu_fake_reset();
        assert_quiet_command_done(stream, 20.0);
        cr_assert_eq(command_starts(), 1);
    }
}

/* C: the quiet command's bound is its own timeout: cut at 2 s (124, timed
 * out, nothing on stdout), run at once or streamed, not run to its end
 * (30 s); its process is gone after; its stderr is empty (the session's
 * shell's report of its killed child, "Terminated", is not the command's
 * output). */
Test(daytona_faults, case52_a_quiet_command_ends_at_its_own_timeout)
{
    for (int stream = 0; stream < 2; stream++) {
        chunks c = { .len = 0 };
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = stream ? "echo $$ > /tmp/q1.pid; exec sleep 30"
                           : "echo $$ > /tmp/q0.pid; exec sleep 30";
        req.timeout_secs = 2;
        if (stream) {
            req.on_output = count_chunks;
            req.user_data = &c;
        }
        double t0 = tu_now();
        sbx_result *r = tu_exec(g_sb, &req);
        double dt = tu_now() - t0;
        cr_assert_eq(sbx_result_get_exit_code(r), 124);
        cr_assert_eq(sbx_result_is_timed_out(r), 1);
        tu_assert_stdout(r, "");
        tu_assert_stderr(r, "");
        sbx_result_free(r);
        cr_assert(dt >= 2.0 && dt < 8.0, "the command took %.2f s", dt);
        cr_assert_eq(c.n - c.err, 0, "%d chunks on stdout: %.*s", c.n - c.err, (int)c.len,
                     c.out);
        char *check = tu_strdup_printf("kill -0 $(cat /tmp/q%d.pid) 2>/dev/null; echo $?", stream);
        r = tu_sh(g_sb, check, 10);
        free(check);
        tu_assert_stdout(r, "1\n");
        sbx_result_free(r);
    }
}

/* A command ended by a signal: its stderr is exactly what it wrote. The
 * session's shell reports a foreground child a signal ended on its own
 * stderr ("Terminated", "Killed"), which the daemon keeps as the
 * command's; that report is not the command's output. Each round writes
 * "before" to stderr first:
 *  0. then sleeps past its timeout (1 s), run at once: 124, timed out;
 *  1. the same with an output callback (its output followed);
 *  2. the same with stdin, which it copies to stdout first;
 *  3. ignoring SIGTERM (its sleep too), so that the timeout's SIGKILL
 *     ends it after the grace: 124, timed out;
 *  4. then signals its own shell with SIGTERM: 143 (128 + 15), not timed
 *     out.
 * Nothing else on stderr, stdout exactly what it wrote, each round within
 * its bound. */
Test(daytona_faults, a_command_ended_by_a_signal_has_only_its_own_stderr)
{
    static const struct {
        const char *shell, *in, *out;
        int stream, timeout, exit_code, timed_out;
    } rounds[] = {
        { "echo before >&2; sleep 30", NULL, "", 0, 1, 124, 1 },
        { "echo before >&2; sleep 30", NULL, "", 1, 1, 124, 1 },
        { "cat; echo before >&2; sleep 30", "in\n", "in\n", 0, 1, 124, 1 },
        { "trap '' TERM; echo before >&2; sleep 30", NULL, "", 0, 1, 124, 1 },
        { "echo before >&2; kill -TERM $$; echo after", NULL, "", 0, 10, 143, 0 },
    };
    for (size_t i = 0; i < sizeof rounds / sizeof rounds[0]; i++) {
        chunks c = { .len = 0 };
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = rounds[i].shell;
        req.timeout_secs = rounds[i].timeout;
        if (rounds[i].in) {
            req.stdin_data = rounds[i].in;
            req.stdin_len = strlen(rounds[i].in);
        }
        if (rounds[i].stream) {
            req.on_output = count_chunks;
            req.user_data = &c;
        }
        double t0 = tu_now();
        sbx_result *r = tu_exec(g_sb, &req);
        double dt = tu_now() - t0;
        cr_assert_eq(sbx_result_get_exit_code(r), rounds[i].exit_code, "round %zu: exit %d", i,
                     sbx_result_get_exit_code(r));
        cr_assert_eq(sbx_result_is_timed_out(r), rounds[i].timed_out, "round %zu", i);
        tu_assert_stdout(r, rounds[i].out);
        tu_assert_stderr(r, "before\n");
        sbx_result_free(r);
        double bound = rounds[i].timed_out ? rounds[i].timeout + SBX_KILL_GRACE_SECS + 3.0 : 5.0;
        cr_assert(dt >= (rounds[i].timed_out ? rounds[i].timeout - 0.05 : 0.0) && dt < bound,
                  "round %zu took %.2f s", i, dt);
        if (rounds[i].stream) {
            cr_assert_eq(c.err, 1, "round %zu: %d chunks on stderr", i, c.err);
            cr_assert_eq(c.n, 1, "round %zu: %d chunks", i, c.n);
            tu_assert_bytes("the streamed stderr", c.out, c.len, "before\n", 7);
        }
    }
}

/* ------------------------------------------------------------ CASE-52 A and D */

/* g_client becomes a client with the options @cfg (NULL: none), and g_sb a
 * new sandbox of it (the setup's destroyed); the fake's log emptied. */
static void fresh_sandbox(const char *cfg)
{
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_client_free(g_client);
    sbx_error *err = NULL;
    g_client = sbx_client_new_with_config("daytona", SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
    cr_assert_not_null(g_client, "%s: %s", cfg ? cfg : "no options",
                       err ? sbx_error_get0_message(err) : "");
    g_sb = tu_create(g_client, NULL);
    tu_fake_reset();
}

/* The fake stops g_sb @seconds after the start of the last request about
 * it (0: its autoStopInterval again). */
static void set_idle_stop(int seconds)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s/idle_stop", sb_id());
    char *body = tu_strdup_printf("{\"seconds\":%d}", seconds);
    tu_fake_post(path, body);
    free(body);
    free(path);
}

/* The followed-logs requests of g_sb's commands in the fake's log. */
static int log_follows(void)
{
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("^/toolbox/%s/process/session/[^/]+/command/[^/]+/logs$",
                                sb_id());
    int n = tu_fake_count(log, "GET", re, NULL, 0);
    free(re);
    json_object_put(log);
    return n;
}

/* A: the 5 s idle reaper in front of the toolbox (the sandbox's
 * toolboxProxyUrl points at it); the control plane stays direct. The
 * quiet command, run at once (its one request cut at 5 s: found in its
 * session by its mark) and streamed (its followed logs cut every 5 s),
 * gives "done\n", exit 0, in [12, 16) s, with exactly one start of the
 * command at the fake: the logs were followed again (at least twice in
 * all), the command never sent again. The streamed output reaches the
 * callback once, never empty. */
Test(daytona_faults, case52_a_a_cut_command_is_followed_again_never_run_again)
{
    int port = tu_reaper_start(g_port, 5);
    char *cfg = tu_strdup_printf("{\"toolbox_url\":\"http://127.0.0.1:%d/toolbox\"}", port);
    tu_fake_post("/_fake/config", cfg);
    free(cfg);
    fresh_sandbox(NULL);
    for (int stream = 0; stream < 2; stream++) {
        tu_fake_reset();
        assert_quiet_command_done(stream, 16.0);
        cr_assert_eq(command_starts(), 1, "%s", stream ? "streamed" : "at once");
        int follows = log_follows();
        cr_assert(follows >= 2, "%s: the logs were followed %d times",
                  stream ? "streamed" : "at once", follows);
    }
    int reaped = tu_reaper_stop();
    cr_assert(reaped >= 3, "the reaper closed %d connections", reaped);
}

/* The request that starts a command run at once is dropped (the
 * connection closed without an answer) before the daemon had it: the
 * session does not list the command, so it is sent again, once; it ran
 * once (its file has one line). */
Test(daytona_faults, case52_a_start_the_daemon_never_had_is_sent_again)
{
    sbx_result *r = tu_sh(g_sb, "echo warm", 10);
    tu_assert_stdout(r, "warm\n");
    sbx_result_free(r);
    tu_fake_reset();
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"^/toolbox/%s/process/"
                                  "session/[^/]+/exec$\",\"action\":\"drop\"}", sb_id());
    tu_fake_post("/_fake/faults", rule);
    free(rule);
    r = tu_sh(g_sb, "echo once >> /tmp/once; cat /tmp/once", 30);
    tu_assert_stdout(r, "once\n");
    tu_assert_stderr(r, "");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert_eq(command_starts(), 2);
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("^/toolbox/%s/process/session/[^/]+$", sb_id());
    cr_assert_eq(tu_fake_count(log, "GET", re, NULL, 0), 1);
    free(re);
    json_object_put(log);
}

/* D: the fake stops the sandbox 5 s after the start of the last request
 * about it; the client renews its activity every 2 s while a command
 * runs (refresh_activity_s 2). The quiet command, run at once and
 * streamed, gives "done\n", exit 0; the sandbox was never stopped, and
 * was renewed at least 5 times a command (12 s / 2 s). */
Test(daytona_faults, case52_d_activity_is_renewed_while_a_command_runs)
{
    fresh_sandbox("{\"refresh_activity_s\":2}");
    set_idle_stop(5);
    for (int stream = 0; stream < 2; stream++) {
        assert_quiet_command_done(stream, 16.0);
        json_object *fs = fake_sandbox();
        cr_assert_str_eq(tu_json_str(fs, "state"), "started");
        cr_assert_eq(jint(fs, "idle_stops"), 0);
        cr_assert(jint(fs, "activities") >= 5 * (stream + 1), "%lld renewals",
                  (long long)jint(fs, "activities"));
        json_object_put(fs);
    }
    set_idle_stop(0);
}

/* D, no renewal (refresh_activity_s 0): the fake stops the sandbox 5 s
 * into the command, which ends with it. Run at once or streamed, the exec
 * fails (never exit 0 with the output missing): execution_failed, its
 * message and context (state) saying stopped (CASE-53), well before the
 * command would have ended. The next exec starts the sandbox again. */
Test(daytona_faults, case52_d_a_command_whose_sandbox_is_stopped_says_stopped)
{
    fresh_sandbox("{\"refresh_activity_s\":0}");
    set_idle_stop(5);
    for (int stream = 0; stream < 2; stream++) {
        chunks c = { .len = 0 };
        sbx_exec_request req = quiet_request(stream ? &c : NULL);
        double t0 = tu_now();
        sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_EXECUTION_FAILED);
        double dt = tu_now() - t0;
        cr_assert(dt >= 4.5 && dt < 10.0, "the exec failed after %.2f s", dt);
        const char *msg = sbx_error_get0_message(err);
        cr_assert(strstr(msg, "was stopped while the command ran") != NULL, "%s", msg);
        const char *state = sbx_error_get0_context(err, "state");
        cr_assert_not_null(state, "no state: %s", msg);
        cr_assert_str_eq(state, "stopped");
        cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
        sbx_error_free(err);
        cr_assert_eq(c.len, 0, "output came: %.*s", (int)c.len, c.out);
        json_object *fs = fake_sandbox();
        cr_assert_str_eq(tu_json_str(fs, "state"), "stopped");
        cr_assert_eq(jint(fs, "idle_stops"), stream + 1);
        cr_assert_eq(jint(fs, "activities"), 0);
        json_object_put(fs);
    }
    set_idle_stop(0);
    sbx_result *r = tu_sh(g_sb, "echo again", 30);
    tu_assert_stdout(r, "again\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
}

/* refresh_activity_s must be a number of seconds, 0 (never) or from 1 to a
 * day (under a second would flood the provider with renewals): else a
 * configuration error naming it. */
Test(daytona_faults, bad_refresh_activity_s_is_a_configuration_error)
{
    static const char *const bad[] = { "-1", "\"2\"", "true", "86401", "0.0001", "0.999",
                                       "1e-320", NULL };
    tu_assert_bad_seconds_option("daytona", "refresh_activity_s", bad, "0, or from 1 to 86400");
}

/* ------------------------------------------------------------ connections */

/* Connection reuse (the base's pool, keep-alive): five warm execs one after
 * another take one request each (the session exec run at once), all on one
 * TCP connection at the fake. */
Test(daytona_faults, warm_execs_share_one_connection)
{
    tu_fake_assert_warm_execs_share_a_connection(g_sb, 5, 1);
}

/* ------------------------------------------------------------ files */

/* Files through the plugin (the toolbox's file endpoints and the base's
 * tar path): CASE-17, list_files, HOME, CASE-45, CASE-46 (testutil.c). */
/* Issue 16: what the toolbox's JSON cannot carry (a byte that is not UTF-8
 * in an argument, the shell command, an env value, the cwd; a path of
 * write_file, whose chmod is a command) is invalid_argument naming the
 * part, before anything is sent (testutil.c). */
Test(daytona_faults, text_json_cannot_carry_is_refused_before_sending)
{
    tu_json_text_refused("daytona", g_sb, TU_TEXT_WRITE);
}

Test(daytona_faults, files_case17_all_byte_values_round_trip)
{
    tu_files_case17(g_sb);
}

Test(daytona_faults, files_list_files_gives_exact_entries)
{
    tu_files_list_exact(g_sb);
}

Test(daytona_faults, files_home_is_a_writable_directory)
{
    tu_files_home_is_writable(g_sb);
}

Test(daytona_faults, files_case45_uploads_belong_to_the_exec_user)
{
    tu_files_case45(g_sb);
}

Test(daytona_faults, files_case46_cwd_holds_for_every_part)
{
    tu_files_case46(g_sb);
}

/* ------------------------------------------------------------ CASE-32, mid-command */

static void *vanish_later(void *ud)
{
    usleep(1000000);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", (const char *)ud);
    tu_fake_post(path, NULL);
    free(path);
    return NULL;
}

/* The sandbox vanishes while a command runs (1 s into a 10 s sleep), run
 * at once or streamed: the exec fails not_found "gone" with the sandbox's
 * id in its context (sandbox_id), well before the command would have
 * ended. */
Test(daytona_faults, case32_a_sandbox_vanishing_mid_command_is_gone_with_its_id)
{
    for (int stream = 1; stream >= 0; stream--) {
        sbx_sandbox *sb = stream ? tu_create(g_client, NULL) : g_sb;
        char *id = strdup(sbx_sandbox_get0_id(sb));
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, vanish_later, id), 0);
        chunks c = { .len = 0 };
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = "sleep 10; echo done";
        req.timeout_secs = 60;
        if (stream) {
            req.on_output = count_chunks;
            req.user_data = &c;
        }
        double t0 = tu_now();
        sbx_error *err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
        double dt = tu_now() - t0;
        pthread_join(t, NULL);
        cr_assert(dt < 8.0, "the exec failed after %.2f s", dt);
        cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone", "%s",
                         sbx_error_get0_message(err));
        const char *got = sbx_error_get0_context(err, "sandbox_id");
        cr_assert_not_null(got, "%s: no sandbox_id: %s", stream ? "streamed" : "at once",
                           sbx_error_get0_message(err));
        cr_assert_str_eq(got, id);
        sbx_error_free(err);
        if (stream) {
            sbx_sandbox_destroy(sb, NULL);
            sbx_sandbox_free(sb);
        }
        free(id);
    }
}
