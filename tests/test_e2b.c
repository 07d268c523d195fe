/*
 * test_e2b.c — what the e2b backend does beyond the backend-neutral suites,
 * through the E2B contract fake (tests/fakes/e2b.py, started by
 * tests/e2b.sh, which sets E2B_API_URL): a sandbox that vanished is a
 * distinct "gone" error (CASE-32); resume never shortens the provider's
 * lifetime (CASE-33); a paused sandbox is woken by the next call, its files
 * kept (CASE-53 F); stop pauses and start resumes; a 429 waits what its
 * Retry-After asks (seconds or an HTTP-date), backs off without one, and
 * past the wait cap is rate_limited at once (CASE-19); a command quiet for
 * longer than any fixed limit of the transport is not cut, its bound is its
 * own timeout, and envd's keepalive messages never reach its output
 * (CASE-52 B, C); behind an idle reaper (tests/fakes/idlereaper.py, a
 * proxy that closes a connection quiet for 5 s) in front of envd, a quiet
 * command is kept alive by the client option keepalive_s, or, with the
 * default interval, re-attached by its pid (process.Process/Connect) each
 * time the path cuts its stream, and never started again (CASE-52 A); a bad
 * keepalive_s is a configuration error naming it; the create options E2B
 * cannot honour (cpu, memory_mb, disk_mb, gpu, image, snapshot_id,
 * app_name) are configuration errors naming the first given, before any
 * request; CASE-36 (a key the provider echoes is [redacted] in the error,
 * and never in its context, a session state or the fake's log) and CASE-48
 * (this process's environment never reaches the sandbox or the provider);
 * warm execs one after another share one TCP connection at the fake;
 * files through the plugin (CASE-17, list_files, HOME, CASE-45, CASE-46:
 * the tu_files_* helpers of testutil.c); sbx_op_cancel() of an
 * asynchronous execute ends its command at the provider and the plugin's
 * thread of it within 0.5 s, also after its SIGKILL when envd never named
 * it.
 * The fake's test routes (/_fake/sandbox/{id}, .../vanish,
 * /_fake/keepalive) show and change the provider's side; its fault rules and
 * request log (/_fake/faults, /_fake/log) script and count requests.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* memmem */
#endif
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static sbx_client *g_client;
static sbx_sandbox *g_sb;


static void setup(void)
{
    tu_fake_use("E2B_API_URL");
    tu_fake_reset();
    sbx_error *err = NULL;
    g_client = sbx_client_new("e2b", &err);
    cr_assert_not_null(g_client, "%s", err ? sbx_error_get0_message(err) : "");
    g_sb = NULL;
}

static void teardown(void)
{
    tu_reaper_stop();
    tu_fake_reset();
    tu_fake_post("/_fake/keepalive", "{\"seconds\":0}");
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
    }
    sbx_client_free(g_client);
}

TestSuite(e2b, .init = setup, .fini = teardown, .timeout = 90);

/* A request to the fake with the API key (its control plane's routes need
 * it; its test routes take it): the status, the body in *@body (or freed
 * when @body is NULL). */
static long fake_call_body(const char *method, const char *path, const char *data,
                           char **body)
{
    const char *key = getenv("E2B_API_KEY");
    char *h = tu_strdup_printf("X-API-Key: %s", key ? key : "");
    long status = tu_fake_http(method, path, h, data, body);
    free(h);
    return status;
}

static long fake_call(const char *method, const char *path, char **body)
{
    return fake_call_body(method, path, NULL, body);
}

/* The fake's record of sandbox @id: its "state" (copied into @state) and
 * "end_at" (UNIX seconds). */
static double fake_sandbox(const char *id, char *state, size_t cap)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id), *body = NULL;
    cr_assert_eq(fake_call("GET", path, &body), 200, "GET %s: %s", path, body ? body : "");
    json_object *j = json_tokener_parse(body), *v;
    cr_assert_not_null(j, "%s", body);
    cr_assert(json_object_object_get_ex(j, "state", &v));
    snprintf(state, cap, "%s", json_object_get_string(v));
    cr_assert(json_object_object_get_ex(j, "end_at", &v));
    double end_at = json_object_get_double(v);
    json_object_put(j);
    free(body);
    free(path);
    return end_at;
}

static sbx_sandbox *create_with_lifetime(double secs)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, secs, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

/* CASE-32: the provider dropped the sandbox: not_found, reason "gone" and
 * the sandbox's id (sandbox_id) in the context, not retryable, at once for
 * the next call too; destroy succeeds. */
Test(e2b, vanished_sandbox_is_gone)
{
    g_sb = create_with_lifetime(600);
    sbx_result *r = tu_sh(g_sb, "echo hi", 10);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(fake_call("POST", path, NULL), 204);
    free(path);
    for (int i = 0; i < 2; i++) {
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = i ? "echo third" : "echo again";
        sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
        cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
        const char *id = sbx_error_get0_context(err, "sandbox_id");
        cr_assert_not_null(id, "no sandbox_id: %s", sbx_error_get0_message(err));
        cr_assert_str_eq(id, sbx_sandbox_get0_id(g_sb));
        cr_assert_str_eq(sbx_error_get0_backend(err), "e2b");
        cr_assert_eq(sbx_error_is_retryable(err), 0);
        sbx_error_free(err);
    }
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
}

/* CASE-33: a resume (connect) carries the lifetime that is left, so the
 * provider's end never moves earlier. */
Test(e2b, resume_never_shortens_the_lifetime)
{
    double t0 = (double)time(NULL);
    g_sb = create_with_lifetime(3600);
    char state[32];
    double end0 = fake_sandbox(sbx_sandbox_get0_id(g_sb), state, sizeof state);
    cr_assert_str_eq(state, "running");
    cr_assert(end0 >= t0 + 3599.0, "end_at %.0f is before %.0f", end0, t0 + 3600);
    char *json = sbx_sandbox_session_state(g_sb, NULL);
    cr_assert_not_null(json);
    sbx_error *err = NULL;
    sbx_sandbox *sb2 = sbx_sandbox_resume(g_client, json, &err);
    cr_assert_not_null(sb2, "%s", err ? sbx_error_get0_message(err) : "");
    double end1 = fake_sandbox(sbx_sandbox_get0_id(g_sb), state, sizeof state);
    cr_assert(end1 >= end0 - 0.001, "resume moved end_at from %.3f to %.3f", end0, end1);
    sbx_result *r = tu_sh(sb2, "echo resumed", 10);
    tu_assert_stdout(r, "resumed\n");
    sbx_result_free(r);
    sbx_sandbox_free(sb2);
    free(json);
}

/* CASE-53 F and stop/start: a paused sandbox keeps its files; the next
 * exec finds it paused, connects and runs once; start after stop resumes. */
Test(e2b, paused_sandbox_is_woken_with_its_files)
{
    g_sb = create_with_lifetime(600);
    sbx_result *r = tu_sh(g_sb, "mkdir -p /work && echo kept > /work/keep.txt", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    const char *id = sbx_sandbox_get0_id(g_sb);
    char state[32];
    double end0 = fake_sandbox(id, state, sizeof state);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_stop(g_sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    fake_sandbox(id, state, sizeof state);
    cr_assert_str_eq(state, "paused");
    cr_assert_eq(sbx_sandbox_stop(g_sb, NULL), 0, "stopping a stopped sandbox");
    r = tu_sh(g_sb, "cat /work/keep.txt", 10);
    tu_assert_stdout(r, "kept\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    double end1 = fake_sandbox(id, state, sizeof state);
    cr_assert_str_eq(state, "running");
    cr_assert(end1 >= end0 - 1.0, "waking moved end_at from %.0f to %.0f", end0, end1);

    cr_assert_eq(sbx_sandbox_stop(g_sb, NULL), 0);
    cr_assert_eq(sbx_sandbox_start(g_sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    fake_sandbox(id, state, sizeof state);
    cr_assert_str_eq(state, "running");
    cr_assert_eq(sbx_sandbox_start(g_sb, NULL), 0, "starting a running sandbox");
    r = tu_sh(g_sb, "cat /work/keep.txt", 10);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
}

/* The number of sandboxes the fake's control plane lists. */
static size_t fake_live(void)
{
    const char *key = getenv("E2B_API_KEY");
    char *h = tu_strdup_printf("X-API-Key: %s", key ? key : "");
    size_t n = tu_fake_array_length("/v2/sandboxes", h, NULL);
    free(h);
    return n;
}

/* CASE-20: a create answered after the call's deadline made a sandbox; the
 * plugin finds it by its create token and deletes it. The call timeout
 * (sbx_client_set_call_timeout) bounds the create in both plugin modes. */
Test(e2b, late_create_is_deleted)
{
    size_t n0 = fake_live();
    cr_assert_eq(fake_call_body("POST", "/_fake/hold_create", "{\"seconds\":4}", NULL), 204);
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    double t0 = tu_now();
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    double dt = tu_now() - t0;
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    /* CASE-20: a timeout within 1.5 s, and within 10 s the sandbox the
     * provider made meanwhile is found by its create token and deleted
     * (by the create's own look, or the reaper's after it). */
    cr_assert(dt <= 1.5, "the create returned after %.2f s", dt);
    sbx_error_free(err);
    cr_assert_eq(tu_wait_count(fake_live, n0, 10.0), n0,
                 "the late sandbox was not deleted within 10 s");
}

/* ------------------------------------------------------------ CASE-19 */

/* A 429 on is_alive's read, GET /sandboxes/{id}, of a fresh sandbox
 * (testutil.c). A: Retry-After: 2 twice: the read is sent three times,
 * each after the wait the provider asked for, and succeeds. */
Test(e2b, case19_retry_after_seconds_is_waited_each_time)
{
    g_sb = create_with_lifetime(600);
    tu_fake_assert_retry_after_seconds_waited(g_sb, "/sandboxes/");
}

/* B: Retry-After as the HTTP-date 3 s after the answer's Date: the retry
 * waits for it (0.5 s allowed for skew). */
Test(e2b, case19_retry_after_date_is_waited)
{
    g_sb = create_with_lifetime(600);
    tu_fake_assert_retry_after_date_waited(g_sb, "/sandboxes/");
}

/* D: Retry-After: 3600 passes the wait cap (60 s): rate_limited at once,
 * retryable, the wait in the context, after one request. */
Test(e2b, case19_retry_after_past_the_cap_is_rate_limited_at_once)
{
    g_sb = create_with_lifetime(600);
    tu_fake_assert_retry_after_past_the_cap_rate_limited("e2b", g_sb, "/sandboxes/");
}

/* E: no Retry-After: the first backoff is at least 0.5 s (no tight loop). */
Test(e2b, case19_without_retry_after_backs_off)
{
    g_sb = create_with_lifetime(600);
    tu_fake_assert_backoff_without_retry_after(g_sb, "/sandboxes/");
}

/* ------------------------------------------------------------ CASE-52 */

/* The keepalive messages the fake's process streams sent since the last
 * POST /_fake/keepalive. */
static int keepalives_sent(void)
{
    char *body = NULL;
    cr_assert_eq(fake_call("GET", "/_fake/keepalive", &body), 200);
    json_object *j = json_tokener_parse(body), *v;
    cr_assert(j && json_object_object_get_ex(j, "sent", &v), "%s", body);
    int n = json_object_get_int(v);
    json_object_put(j);
    free(body);
    return n;
}

/* C: a command that prints nothing for 12 s, longer than the transport's
 * one fixed limit (the 10 s to connect) and, with the plugin's keepalive
 * interval of 20 s, with no byte on its stream meanwhile: it is not cut; it
 * ends with its output after one start of the command. The stream has no
 * read timeout of its own: the command's timeout bounds it. */
Test(e2b, case52_a_quiet_command_is_not_cut)
{
    g_sb = create_with_lifetime(600);
    tu_fake_reset();
    tu_fake_post("/_fake/keepalive", "{\"seconds\":0}");
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "sleep 12; echo done", 60);
    double dt = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "done\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
    cr_assert(dt >= 12.0, "the command took %.2f s", dt);
    cr_assert_eq(keepalives_sent(), 0, "the stream was not quiet");
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/process.Process/Start", NULL, 0), 1);
    json_object *start = NULL;
    for (size_t i = 0; i < json_object_array_length(log) && !start; i++) {
        json_object *e = json_object_array_get_idx(log, i);
        if (strcmp(tu_json_str(e, "path"), "/process.Process/Start") == 0)
            start = e;
    }
    json_object *h = NULL, *v;
    cr_assert(json_object_object_get_ex(start, "headers", &h));
    cr_assert_str_eq(tu_json_str(h, "Keepalive-Ping-Interval"), "20");
    cr_assert(!json_object_object_get_ex(h, "Connect-Timeout-Ms", &v),
              "the start asked envd for a deadline of its own");
    json_object_put(log);
}

/* C: the quiet command's bound is its own timeout: cut at 2 s (124, timed
 * out), not run to its end. */
Test(e2b, case52_a_quiet_command_ends_at_its_own_timeout)
{
    g_sb = create_with_lifetime(600);
    sbx_result *r = tu_sh(g_sb, "sleep 30; echo done", 2);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    tu_assert_stdout(r, "");
    sbx_result_free(r);
}

typedef struct chunks {
    char out[64];
    size_t len;
    int n, empty;
} chunks;

static void on_output(sbx_stream stream, const void *data, size_t len, void *ud)
{
    chunks *c = ud;
    cr_assert_eq(stream, SBX_STREAM_STDOUT);
    c->n++;
    c->empty += len == 0;
    cr_assert(c->len + len < sizeof c->out, "%zu bytes of output", c->len + len);
    memcpy(c->out + c->len, data, len);
    c->len += len;
}

/* B: envd sends keepalive messages every 0.5 s while the command is quiet;
 * none reaches the output callback, empty or not: it gets "done\n" and
 * nothing else. */
Test(e2b, case52_keepalives_never_reach_the_output)
{
    g_sb = create_with_lifetime(600);
    tu_fake_post("/_fake/keepalive", "{\"seconds\":0.5}");
    chunks c = { .len = 0 };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 3; echo done";
    req.timeout_secs = 30;
    req.on_output = on_output;
    req.user_data = &c;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "done\n");
    sbx_result_free(r);
    cr_assert(keepalives_sent() >= 2, "the fake sent %d keepalive messages", keepalives_sent());
    tu_assert_bytes("the streamed output", c.out, c.len, "done\n", 5);
    cr_assert_eq(c.empty, 0, "%d empty chunks", c.empty);
}

/* ------------------------------------------------------------ CASE-52 A */

/* g_client becomes a client whose envd requests go to 127.0.0.1:@port
 * (the control plane stays direct), with @extra client options
 * (",\"keepalive_s\":2" or ""). */
static void client_through(int port, const char *extra)
{
    sbx_client_free(g_client);
    char *cfg = tu_strdup_printf("{\"sandbox_url\":\"http://127.0.0.1:%d\"%s}", port, extra);
    sbx_error *err = NULL;
    g_client = sbx_client_new_with_config("e2b", SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
    cr_assert_not_null(g_client, "%s: %s", cfg, err ? sbx_error_get0_message(err) : "");
    free(cfg);
}

/* Runs CASE-52 A's command behind a 5 s idle reaper: done, exit 0, in
 * [12, 16) s; the fake's request log (json_object_put() it) in *@log and
 * the reaped connections returned. */
static int quiet_command_behind_reaper(const char *extra, json_object **log)
{
    int envd = tu_reaper_start(tu_fake_use("E2B_API_URL"), 5);
    client_through(envd, extra);
    g_sb = create_with_lifetime(600);
    tu_fake_reset();
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "sleep 12; echo done", 60);
    double dt = tu_now() - t0;
    tu_assert_stdout(r, "done\n");
    tu_assert_stderr(r, "");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    cr_assert(dt >= 12.0 && dt < 16.0, "the command took %.2f s", dt);
    *log = tu_fake_log();
    return tu_reaper_stop();
}

/* The Keepalive-Ping-Interval of the first @path request in @log. */
static const char *keepalive_header(json_object *log, const char *path)
{
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *h;
        if (strcmp(tu_json_str(e, "path"), path) == 0
            && json_object_object_get_ex(e, "headers", &h))
            return tu_json_str(h, "Keepalive-Ping-Interval");
    }
    return NULL;
}

/* A, keepalive_s = 2: envd's keepalive messages every 2 s keep the path
 * busy: nothing is reaped, one Start, no re-attach. */
Test(e2b, case52_keepalive_s_keeps_an_idle_path_busy)
{
    json_object *log = NULL;
    int reaped = quiet_command_behind_reaper(",\"keepalive_s\":2", &log);
    cr_assert_eq(reaped, 0, "the reaper closed %d connections", reaped);
    cr_assert_eq(tu_fake_count(log, "POST", "/process.Process/Start", NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "POST", "/process.Process/Connect", NULL, 0), 0);
    const char *ka = keepalive_header(log, "/process.Process/Start");
    cr_assert_not_null(ka);
    cr_assert_str_eq(ka, "2");
    json_object_put(log);
}

/* A, the default keepalive (20 s): the reaper cuts the quiet stream; the
 * plugin re-attaches to the same process by its pid, as often as it is
 * cut, and the command runs once. */
Test(e2b, case52_a_cut_stream_is_reattached_by_pid)
{
    json_object *log = NULL;
    int reaped = quiet_command_behind_reaper("", &log);
    cr_assert(reaped >= 1, "the reaper closed no connection");
    cr_assert_eq(tu_fake_count(log, "POST", "/process.Process/Start", NULL, 0), 1);
    int connects = tu_fake_count(log, "POST", "/process.Process/Connect", NULL, 0);
    cr_assert(connects >= 1, "no re-attach");
    const char *ka = keepalive_header(log, "/process.Process/Connect");
    cr_assert_not_null(ka);
    cr_assert_str_eq(ka, "20");
    json_object_put(log);
}

/* keepalive_s must be a number of seconds above 0 (at most a day): else a
 * configuration error naming it. */
Test(e2b, bad_keepalive_s_is_a_configuration_error)
{
    static const char *const bad[] = { "0", "-2.5", "\"20\"", "true", "86401", NULL };
    tu_assert_bad_seconds_option("e2b", "keepalive_s", bad, "above 0 and at most 86400");
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_config("e2b", SBX_PLUGIN_MODE_DEFAULT,
                                               "{\"keepalive_s\":0.5}", &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_client_free(c);
}

/* The Start requests in @log whose body (a Connect envelope: NUL bytes
 * first) holds @script. */
static int starts_of(json_object *log, const char *script)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *b;
        if (strcmp(tu_json_str(e, "path"), "/process.Process/Start") != 0
            || !json_object_object_get_ex(e, "body", &b))
            continue;
        n += memmem(json_object_get_string(b), (size_t)json_object_get_string_len(b), script,
                    strlen(script)) != NULL;
    }
    return n;
}

/* A, re-attach refused (envd answers Connect not_found): the exec fails
 * with a connection error whose outcome is unknown, never exit 0 with the
 * output missing; the command was started once and is not left running. */
Test(e2b, case52_a_failed_reattach_is_a_connection_error_of_unknown_outcome)
{
    int envd = tu_reaper_start(tu_fake_use("E2B_API_URL"), 3);
    client_through(envd, "");
    g_sb = create_with_lifetime(600);
    tu_fake_reset();
    tu_fake_post("/_fake/faults", "{\"method\":\"POST\",\"path\":\"^/process\\\\.Process/"
                                  "Connect$\",\"status\":404,\"times\":-1,"
                                  "\"message\":\"process with pid 1000 not found\"}");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 8; echo done";
    req.timeout_secs = 60;
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_CONNECTION);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    const char *m = sbx_error_get0_message(err);
    cr_assert(strstr(m, "e2b: the command's stream was cut (") == m, "%s", m);
    cr_assert(strstr(m, ") and re-attaching to its process 1000 failed (re-attach to the "
                        "command: process with pid 1000 not found"), "%s", m);
    cr_assert(strstr(m, "): its outcome is unknown"), "%s", m);
    sbx_error_free(err);
    cr_assert(tu_reaper_stop() >= 1);
    /* The fake logs a request's body (and body_len) once it has finished
     * answering it: its cut Start stream ends when it next writes to the
     * closed connection. */
    json_object *log = NULL;
    for (int i = 0; i < 100; i++) {
        json_object_put(log);
        log = tu_fake_log();
        int open = 0;
        for (size_t k = 0; k < json_object_array_length(log); k++)
            open |= !json_object_object_get_ex(json_object_array_get_idx(log, k), "body_len",
                                               NULL);
        if (!open)
            break;
        usleep(100000);
    }
    cr_assert_eq(starts_of(log, "sleep 8; echo done"), 1, "%s",
                 json_object_to_json_string(log));
    cr_assert(tu_fake_count(log, "POST", "/process.Process/Connect", NULL, 0) >= 1);
    json_object_put(log);
    /* Killed after the error: the fake runs none of its processes. */
    char *path = tu_strdup_printf("/_fake/sandbox/%s", sbx_sandbox_get0_id(g_sb)), *body = NULL;
    cr_assert_eq(fake_call("GET", path, &body), 200);
    json_object *j = json_tokener_parse(body), *v;
    cr_assert(j && json_object_object_get_ex(j, "processes", &v), "%s", body);
    cr_assert_eq(json_object_array_length(v), 0, "still running: %s", body);
    json_object_put(j);
    free(body);
    free(path);
}

/* Exposed ports: each maps to E2B's preview address https://PORT-ID.DOMAIN
 * (DOMAIN e2b.app: the fake answers "domain": null and E2B_DOMAIN is
 * unset); a port not exposed is not_found; expose/unexpose change the
 * mapping; a resumed handle has the create's ports; with SBX_DEBUG=1
 * neither the sandbox's access token nor the API key appears in the log,
 * an address or an error. */
Test(e2b, exposed_ports_are_preview_addresses_without_a_token)
{
    tu_debug_log l;
    tu_debug_log_start(&l);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("e2b", &err);
    cr_assert_not_null(c);
    static const uint16_t ports[] = { 8080, 3000 };
    sbx_sandbox *sb = tu_create_with_ports(c, ports, 2);
    const char *id = sbx_sandbox_get0_id(sb);

    char *want = tu_strdup_printf("https://8080-%s.e2b.app", id);
    tu_assert_port_url(sb, 8080, want);
    free(want);

    tu_assert_port_not_exposed(sb, "e2b", 9999);
    cr_assert_null(sbx_sandbox_resolve_port(sb, 9999, &err));
    char *errtext = sbx_error_to_string(err);
    sbx_error_free(err);
    err = NULL;

    tu_assert_ports(sb, "3000,8080");

    cr_assert_eq(sbx_sandbox_expose_port(sb, 5000, &err), 0);
    want = tu_strdup_printf("https://5000-%s.e2b.app", id);
    tu_assert_port_url(sb, 5000, want);
    free(want);
    cr_assert_eq(sbx_sandbox_unexpose_port(sb, 5000, &err), 0);
    tu_assert_port_not_exposed(sb, "e2b", 5000);

    /* The session state carries the ports, not the token. */
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state);
    sbx_sandbox *again = sbx_sandbox_resume(c, state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    want = tu_strdup_printf("https://3000-%s.e2b.app", id);
    tu_assert_port_url(again, 3000, want);
    free(want);
    sbx_sandbox_free(again);

    /* The envd access token, as the provider hands it out. */
    char *path = tu_strdup_printf("/sandboxes/%s/connect", id);
    char *body = NULL;
    int st = tu_fake_http("POST", path, "X-API-Key: sbx-test-dummy-key", "{\"timeout\":60}",
                          &body);
    cr_assert(st == 200 || st == 201, "connect: %d", st);
    json_object *j = json_tokener_parse(body);
    const char *token = tu_json_str(j, "envdAccessToken");
    cr_assert(token && strlen(token) >= 16, "no envdAccessToken in %s", body);

    /* Calls that carry the token: one retried (a log line), one refused
     * (an error). */
    cr_assert_eq(sbx_sandbox_write_file(sb, "/tmp/p.txt", "p\n", 2, &err), 0);
    tu_fake_post("/_fake/faults", "{\"method\":\"GET\",\"path\":\"^/files\",\"status\":503}");
    char *data = NULL;
    size_t dlen = 0;
    cr_assert_eq(sbx_sandbox_read_file(sb, "/tmp/p.txt", &data, &dlen, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    tu_assert_bytes("read after a 503", data, dlen, "p\n", 2);
    free(data);
    tu_fake_post("/_fake/faults", "{\"method\":\"GET\",\"path\":\"^/files\",\"status\":401}");
    cr_assert_eq(sbx_sandbox_read_file(sb, "/tmp/p.txt", &data, &dlen, &err), -1);
    char *errtext2 = sbx_error_to_string(err);
    sbx_error_free(err);
    err = NULL;

    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    char *logbuf = tu_debug_log_stop(&l);
    cr_assert_not_null(strstr(logbuf, "HTTP 503, retrying"), "no retry logged: %s", logbuf);
    cr_assert_null(strstr(logbuf, token), "the access token is in the log");
    cr_assert_null(strstr(logbuf, "sbx-test-dummy-key"), "the API key is in the log");
    cr_assert_null(strstr(state, token), "the access token is in the session state");
    cr_assert_null(strstr(errtext, token), "the access token is in an error");
    cr_assert_null(strstr(errtext2, token), "the access token is in an error: %s", errtext2);
    cr_assert_null(strstr(errtext2, "sbx-test-dummy-key"), "the API key is in an error");
    free(errtext2);
    json_object_put(j);
    free(body);
    free(path);
    free(state);
    free(errtext);
    free(logbuf);
}

/* A create-time user is envd's user of every call that names none: the
 * command's USER and HOME, and the home a relative file path starts from;
 * the session state keeps it; a call naming "user" runs as that one. */
Test(e2b, a_create_time_user_is_envds_user_of_exec_and_files)
{
    sbx_error *err = NULL;
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_user(o, "root", &err), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    sbx_result *r = tu_sh(g_sb, "echo \"$USER $HOME\"", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "root /root\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "rel.txt", "r\n", 2, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    r = tu_sh(g_sb, "cat /root/rel.txt; test -e /home/user/rel.txt || echo not-in-user", 30);
    tu_assert_stdout(r, "r\nnot-in-user\n");
    sbx_result_free(r);
    /* The call's own user wins, for commands and files alike. */
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "echo \"$USER $HOME\"";
    rq.user = "user";
    r = tu_exec(g_sb, &rq);
    tu_assert_stdout(r, "user /home/user\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_write_file_as(g_sb, "/home/user/u.txt", "user", "u\n", 2, &err), 0,
                 "%s", err ? sbx_error_get0_message(err) : "");
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file_as(g_sb, "/home/user/u.txt", "user", &data, &len, &err),
                 0, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_bytes("u.txt", data, len, "u\n", 2);
    free(data);
    /* Resumed from its state: still root's. */
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state);
    cr_assert(strstr(state, "\"user\":\"root\"") != NULL, "%s", state);
    sbx_sandbox *again = sbx_resume(state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    r = tu_sh(again, "echo \"$USER\"", 30);
    tu_assert_stdout(r, "root\n");
    sbx_result_free(r);
    sbx_sandbox_free(again);
    free(state);
}

/* Without E2B_API_KEY the client is made (the backend is listed), and a
 * create fails at once with authentication naming the variable: nothing
 * reaches the provider (a DNS or connection error would hide what is
 * missing). */
Test(e2b, a_missing_api_key_is_said_before_any_request)
{
    char *key = strdup(getenv("E2B_API_KEY"));
    unsetenv("E2B_API_KEY");
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("e2b", &err);
    setenv("E2B_API_KEY", key, 1);
    free(key);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    tu_fake_reset();
    cr_assert_null(sbx_sandbox_create(c, NULL, &err));
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, NULL);
    cr_assert_str_eq(sbx_error_get0_message(err), "e2b backend: no credential (set E2B_API_KEY)");
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 0, "%s", json_object_to_json_string(log));
    json_object_put(log);
    sbx_client_free(c);
}

/* Options E2B cannot honour (size comes from the template; no GPUs,
 * images, snapshots or apps) are configuration errors naming the option and
 * its value, before any request; with several, the first in the order
 * cpu, memory_mb, disk_mb, gpu, image, snapshot_id, app_name is named. */
Test(e2b, options_it_cannot_honour_are_refused_naming_them)
{
    static const struct {
        const char *option, *message;
    } want[] = {
        { "cpu", "e2b backend: cpu 2: E2B takes the vCPU count from the template" },
        { "memory_mb", "e2b backend: memory_mb 2048: E2B takes the memory size from the template" },
        { "disk_mb", "e2b backend: disk_mb 4096: E2B takes the disk size from the template" },
        { "gpu", "e2b backend: gpu H100:1: E2B has no GPUs" },
        { "image", "e2b backend: image python:3.12: E2B runs templates, not images "
                   "(use template)" },
        { "snapshot_id", "e2b backend: snapshot_id snap-1: the e2b backend has no snapshots" },
        { "app_name", "e2b backend: app_name my-app: E2B has no apps" },
    };
    size_t n = sizeof want / sizeof want[0];
    for (size_t i = 0; i < n; i++) {
        /* Option i, and every one after it in the order: i is named. */
        sbx_options *o = sbx_options_new();
        for (size_t k = i; k < n; k++) {
            const char *opt = want[k].option;
            int rc = strcmp(opt, "cpu") == 0         ? sbx_options_set_cpu(o, 2, NULL)
                     : strcmp(opt, "memory_mb") == 0 ? sbx_options_set_memory_mb(o, 2048, NULL)
                     : strcmp(opt, "disk_mb") == 0   ? sbx_options_set_disk_mb(o, 4096, NULL)
                     : strcmp(opt, "gpu") == 0       ? sbx_options_set_gpu(o, "H100:1", NULL)
                     : strcmp(opt, "image") == 0     ? sbx_options_set_image(o, "python:3.12", NULL)
                     : strcmp(opt, "snapshot_id") == 0
                         ? sbx_options_set_snapshot_id(o, "snap-1", NULL)
                         : sbx_options_set_app_name(o, "my-app", NULL);
            cr_assert_eq(rc, 0, "set %s", opt);
        }
        sbx_error *err = NULL;
        cr_assert_null(sbx_sandbox_create(g_client, o, &err), "%s accepted", want[i].option);
        sbx_options_free(o);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION, "%s",
                     sbx_error_get0_message(err));
        cr_assert_str_eq(sbx_error_get0_message(err), want[i].message);
        cr_assert_str_eq(sbx_error_get0_op(err), "create");
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), want[i].option);
        sbx_error_free(err);
    }
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/sandboxes", NULL, 0), 0, "a refused create was sent");
    json_object_put(log);
}

/* ------------------------------------------------------------ CASE-36 */

/* The provider answers the create 401 with the key in its message: the
 * error names it [redacted], and neither it, its context, the session state
 * of a sandbox nor any request the fake logged holds the key (outside the
 * X-API-Key header itself, which the fake's log redacts; testutil.c). */
Test(e2b, case36_the_credential_is_never_shown)
{
    g_sb = create_with_lifetime(600);
    tu_fake_assert_credential_scrubbed("e2b", "E2B_API_KEY", g_client, g_sb, "/sandboxes",
                                       "X-API-Key");
}

/* ------------------------------------------------------------ CASE-48 */

/* Canaries in this process's environment never reach the sandbox or the
 * provider; the create's env does. */
Test(e2b, case48_creator_environment_never_reaches_the_sandbox)
{
    tu_fake_assert_env_canaries("e2b", "E2B_API_KEY");
}

/* ------------------------------------------------------------ connections */

/* Connection reuse (the base's pool, keep-alive): five warm execs one after
 * another take one request each (process.Process/Start), all on one TCP
 * connection at the fake. */
Test(e2b, warm_execs_share_one_connection)
{
    g_sb = create_with_lifetime(600);
    tu_fake_assert_warm_execs_share_a_connection(g_sb, 5, 1);
}

/* ------------------------------------------------------------ files */

/* Files through the plugin (envd's file endpoints and the base's tar
 * path): CASE-17, list_files, HOME, CASE-45, CASE-46 (testutil.c). */
/* Issue 16: what envd's JSON cannot carry (a byte that is not UTF-8 in an
 * argument, the shell command, an env value, the cwd; a path of write_file,
 * whose chmod is a command, or of list_files, a JSON request) is
 * invalid_argument naming the part, before anything is sent (testutil.c). */
Test(e2b, text_json_cannot_carry_is_refused_before_sending)
{
    g_sb = create_with_lifetime(600);
    tu_json_text_refused("e2b", g_sb, TU_TEXT_WRITE | TU_TEXT_LIST);
}

Test(e2b, files_case17_all_byte_values_round_trip)
{
    g_sb = create_with_lifetime(600);
    tu_files_case17(g_sb);
}

Test(e2b, files_list_files_gives_exact_entries)
{
    g_sb = create_with_lifetime(600);
    tu_files_list_exact(g_sb);
}

Test(e2b, files_home_is_a_writable_directory)
{
    g_sb = create_with_lifetime(600);
    tu_files_home_is_writable(g_sb);
}

Test(e2b, files_case45_uploads_belong_to_the_exec_user)
{
    g_sb = create_with_lifetime(600);
    tu_files_case45(g_sb);
}

Test(e2b, files_case46_cwd_holds_for_every_part)
{
    g_sb = create_with_lifetime(600);
    tu_files_case46(g_sb);
}

typedef struct vanish_at {
    const char *id;
    double t;           /* when its delete was asked (tu_now) */
} vanish_at;

static void *vanish_later(void *ud)
{
    vanish_at *v = ud;
    usleep(1000000);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", v->id);
    v->t = tu_now();
    cr_assert_eq(fake_call("POST", path, NULL), 204);
    free(path);
    return NULL;
}

/* CASE-32 mid-command: the sandbox vanishes 1 s into a 10 s command (envd
 * goes with it: the stream is cut without its end): the exec fails
 * not_found "gone", not retryable, with reason "gone" and sandbox_id in its
 * context, not a result of the killed command, within 2 s of the delete:
 * its re-attach (process.Process/Connect) meets the proxy's 502 "The
 * sandbox was not found", which is not sent again before the control plane
 * is asked (GET /sandboxes/ID: 404). One Connect, one GET of the sandbox
 * after the delete. */
Test(e2b, a_sandbox_vanishing_mid_command_is_gone_with_its_id)
{
    g_sb = create_with_lifetime(600);
    char *id = strdup(sbx_sandbox_get0_id(g_sb));
    vanish_at v = { id, 0 };
    pthread_t t;
    tu_fake_reset();
    cr_assert_eq(pthread_create(&t, NULL, vanish_later, &v), 0);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 10; echo done";
    req.timeout_secs = 60;
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    double t1 = tu_now();
    pthread_join(t, NULL);
    cr_assert(v.t > 0 && t1 - v.t < 2.0, "the exec failed %.2f s after the delete", t1 - v.t);
    cr_assert_str_eq(sbx_error_get0_backend(err), "e2b");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone", "%s",
                     sbx_error_get0_message(err));
    const char *got = sbx_error_get0_context(err, "sandbox_id");
    cr_assert_not_null(got, "no sandbox_id: %s", sbx_error_get0_message(err));
    cr_assert_str_eq(got, id);
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    char *get_re = tu_strdup_printf("^/sandboxes/%s$", id);
    int gets = tu_fake_count(log, "GET", get_re, NULL, 0);
    cr_assert_eq(tu_fake_count(log, "POST", "^/process\\.Process/Connect$", NULL, 0), 1, "%s",
                 json_object_to_json_string(log));
    cr_assert_eq(gets, 1, "%s", json_object_to_json_string(log));
    json_object_put(log);
    free(get_re);
    free(id);
}

/* ------------------------------------------------------------------------ */
/* A cancelled asynchronous execute                                          */
/* ------------------------------------------------------------------------ */

/* The threads of this process. */
static int own_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;
    int n = 0;
    cr_assert_not_null(d);
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Waits at most @secs for this process to have at most @want threads; how
 * long that took (>= @secs: it did not). */
static double threads_back_to(int want, double secs)
{
    double t0 = tu_now();
    while (own_threads() > want && tu_now() - t0 < secs)
        usleep(10000);
    return tu_now() - t0;
}

/* The processes the fake runs for sandbox @id (its pids, as JSON text). */
static char *fake_processes(const char *id)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id), *body = NULL;
    cr_assert_eq(fake_call("GET", path, &body), 200, "GET %s: %s", path, body ? body : "");
    json_object *j = json_tokener_parse(body), *v;
    cr_assert(json_object_object_get_ex(j, "processes", &v), "%s", body);
    char *s = strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    json_object_put(j);
    free(body);
    free(path);
    return s;
}

typedef struct op_end {
    int ran;
    double at;
    sbx_error_code code;
    int has_error;
} op_end;

static void on_op_end(sbx_op *op, void *ud)
{
    op_end *e = ud;
    const sbx_error *err = sbx_op_get_error(op);
    e->has_error = err != NULL;
    e->code = err ? sbx_error_get_code(err) : 0;
    e->at = tu_now();
    e->ran = 1;
}

/* A pool with its worker started (one execute run through it), so that
 * the threads counted after are the baseline. */
static sbx_async *warm_pool(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    sbx_async *a = sbx_async_new(1, &err);
    cr_assert_not_null(a, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "true";
    req.timeout_secs = 30;
    op_end e = { 0 };
    cr_assert_not_null(sbx_sandbox_execute_async(a, sb, &req, on_op_end, &e, &err), "%s",
                       err ? sbx_error_get0_message(err) : "");
    while (!e.ran)
        cr_assert(sbx_async_wait(a, 30) >= 0);
    cr_assert_eq(e.has_error, 0);
    usleep(200000);
    return a;
}

/* Cancels @op of pool @a, whose callback fills @e: the callback runs with
 * the cancellation, and the threads are back to @base, within 0.5 s of
 * the cancel. */
static void cancel_ends_at_once(sbx_async *a, sbx_op *op, op_end *e, int base)
{
    double t0 = tu_now();
    cr_assert_eq(sbx_op_cancel(op), 1);
    while (!e->ran && tu_now() - t0 < 15)
        sbx_async_wait(a, 0.01);
    cr_assert(e->ran && e->at - t0 < 0.5, "the callback ran %.2f s after the cancel",
              e->at - t0);
    cr_assert_eq(e->code, SBX_ERROR_CANCELLED, "%s", sbx_error_code_name(e->code));
    threads_back_to(base, 0.5 - (tu_now() - t0));
    cr_assert(own_threads() <= base, "%d threads %.2f s after the cancel (%d before)",
              own_threads(), tu_now() - t0, base);
}

/* sbx_op_cancel() of an execute whose command runs: the command is gone at
 * the provider (SIGTERM through envd, its tree by its mark), the callback
 * runs with the cancellation, and the plugin's thread of the command has
 * ended, all within 0.5 s of the cancel. */
Test(e2b, a_cancelled_execute_ends_its_command_and_its_thread)
{
    g_sb = create_with_lifetime(600);
    const char *id = sbx_sandbox_get0_id(g_sb);
    sbx_async *a = warm_pool(g_sb);
    int base = own_threads();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 60";
    req.timeout_secs = 120;
    op_end e = { 0 };
    sbx_error *err = NULL;
    sbx_op *op = sbx_sandbox_execute_async(a, g_sb, &req, on_op_end, &e, &err);
    cr_assert_not_null(op, "%s", err ? sbx_error_get0_message(err) : "");
    char *procs = NULL;
    for (int i = 0; i < 400; i++) {
        free(procs);
        procs = fake_processes(id);
        if (strcmp(procs, "[]") != 0)
            break;
        usleep(50000);
    }
    cr_assert_str_neq(procs, "[]", "the command never ran");
    free(procs);
    cancel_ends_at_once(a, op, &e, base);
    procs = fake_processes(id);
    cr_assert_str_eq(procs, "[]");
    free(procs);
    sbx_async_free(a);
}

/* A timeout whose SIGTERM comes before envd named the command (its Start
 * answered 1 s late, the process started then): the signal is sent by pid
 * once the start event names it, so the command ends then (124), not at
 * the grace's SIGKILL (0.3 + SBX_KILL_GRACE_SECS s). */
Test(e2b, a_signal_before_the_start_event_reaches_the_command)
{
    g_sb = create_with_lifetime(600);
    const char *id = sbx_sandbox_get0_id(g_sb);
    tu_fake_post("/_fake/faults", "{\"method\":\"POST\",\"path\":\"^/process\\\\.Process/Start$\","
                                  "\"action\":\"pass\",\"delay\":1}");
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "sleep 60", 0.3);
    double took = tu_now() - t0;
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(took >= 1.0 && took < 0.3 + SBX_KILL_GRACE_SECS - 0.3,
              "ended %.2f s after the exec began", took);
    sbx_result_free(r);
    char *procs = fake_processes(id);
    cr_assert_str_eq(procs, "[]");
    free(procs);
}

/* A cancel that comes after the command's SIGKILL (a timed-out command,
 * cancelled as sbx-server cancels an execute it answered 504) while envd
 * has not named the command (its Start hangs, so no signal can reach it):
 * the callback runs and the plugin's thread of the command ends within
 * 0.5 s of the cancel, not when the library would give up waiting for the
 * end (5 s after SIGKILL). */
Test(e2b, a_cancel_after_sigkill_ends_a_command_envd_never_named_at_once)
{
    g_sb = create_with_lifetime(600);
    sbx_async *a = warm_pool(g_sb);
    int base = own_threads();
    tu_fake_post("/_fake/faults", "{\"method\":\"POST\",\"path\":\"^/process\\\\.Process/Start$\","
                                  "\"action\":\"hang\",\"delay\":20}");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo hi";
    req.timeout_secs = 1;
    op_end e = { 0 };
    sbx_error *err = NULL;
    double t_sub = tu_now();
    sbx_op *op = sbx_sandbox_execute_async(a, g_sb, &req, on_op_end, &e, &err);
    cr_assert_not_null(op, "%s", err ? sbx_error_get0_message(err) : "");
    /* SIGTERM at 1 s, SIGKILL SBX_KILL_GRACE_SECS later. */
    while (tu_now() - t_sub < 1 + SBX_KILL_GRACE_SECS + 0.5) {
        sbx_async_wait(a, 0.05);
        cr_assert_eq(e.ran, 0, "the execute ended before the cancel");
    }
    cancel_ends_at_once(a, op, &e, base);
    sbx_async_free(a);
}
