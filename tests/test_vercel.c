/*
 * test_vercel.c — what only the vercel backend does, through its contract
 * fake (tests/vercel.sh starts it and runs this program with
 * SBX_TEST_BACKEND=vercel): cpu and memory pick 1, 2, 4 or 8 vCPUs, and
 * what does not fit is a configuration error naming it; the create's
 * timeout is always sent, and a lifetime past what a create takes is
 * extended by extend-timeout; allow_internet=0 is networkPolicy deny-all;
 * every request carries ?teamId= and the project is the create's
 * projectId; destroy stops the sandbox once; a snapshot stops the sandbox
 * (gone afterwards) and a create from it has its files; a sandbox the
 * provider stops during a command is gone; list_owned follows every page
 * of the list (CASE-35); a VERCEL_OIDC_TOKEN that is not a JWT is a
 * configuration error; the client options team_id and project_id come
 * before the variables and must be strings; a create answered after its
 * deadline is found by the token in its env and stopped (CASE-20); text
 * the API's JSON cannot carry is refused before anything is sent (issue
 * 16).
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
    cr_assert_str_eq(tu_backend(), "vercel", "run by tests/vercel.sh");
    tu_fake_use("VERCEL_API_URL");
    tu_fake_reset();
    tu_fake_post("/_fake/config",
                 "{\"page_cap\": 100, \"create_pending\": 0, \"hold_create\": 0}");
    g_client = sbx_client_new("vercel", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
    g_sb = NULL;
}

static void teardown(void)
{
    tu_fake_post("/_fake/config",
                 "{\"page_cap\": 100, \"create_pending\": 0, \"hold_create\": 0}");
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    tu_reaper_stop();
    sbx_client_free(g_client);
}

TestSuite(vercel, .init = setup, .fini = teardown, .timeout = 90);

/* The fake's view of sandbox @id (GET /_fake/sandbox/ID), parsed. */
static json_object *fake_sandbox(const char *id)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id), *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    cr_assert_not_null(j);
    free(path);
    free(body);
    return j;
}

static long long jint(json_object *o, const char *key)
{
    json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, key, &v), "no %s", key);
    return (long long)json_object_get_int64(v);
}

/* Member @key of the create body the fake got for @sb (a new reference),
 * or NULL when the body had none. */
static json_object *create_field(sbx_sandbox *sb, const char *key)
{
    json_object *j = fake_sandbox(sbx_sandbox_get0_id(sb)), *body = NULL, *v = NULL;
    cr_assert(json_object_object_get_ex(j, "body", &body));
    if (json_object_object_get_ex(body, key, &v))
        json_object_get(v);
    else
        v = NULL;
    json_object_put(j);
    return v;
}

static sbx_sandbox *create_with(double cpu, long long memory_mb, double timeout, int net)
{
    sbx_options *o = sbx_options_new();
    if (cpu > 0)
        cr_assert_eq(sbx_options_set_cpu(o, cpu, NULL), 0);
    if (memory_mb > 0)
        cr_assert_eq(sbx_options_set_memory_mb(o, memory_mb, NULL), 0);
    if (timeout > 0)
        cr_assert_eq(sbx_options_set_timeout_secs(o, timeout, NULL), 0);
    if (!net)
        cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

static long long vcpus_of(double cpu, long long memory_mb)
{
    sbx_sandbox *sb = create_with(cpu, memory_mb, 0, 1);
    json_object *res = create_field(sb, "resources");
    cr_assert_not_null(res);
    long long v = jint(res, "vcpus");
    json_object_put(res);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    return v;
}

/* Issue 16: what the API's JSON cannot carry (a byte that is not UTF-8 in
 * an argument, the shell command, the cwd; a path of read_file, whose
 * fs/read names it in JSON, of write_file, whose chmod is a command, or
 * of list_files, a command) is invalid_argument naming the part, before
 * anything is sent; an env value goes as a file's bytes and arrives
 * exact (testutil.c). */
Test(vercel, text_json_cannot_carry_is_refused_before_sending)
{
    g_sb = create_with(0, 0, 0, 1);
    tu_json_text_refused("vercel", g_sb, TU_TEXT_WRITE | TU_TEXT_READ | TU_TEXT_LIST
                                         | TU_TEXT_ENV_AS_BYTES);
}

Test(vercel, cpu_and_memory_pick_the_fewest_vcpus_that_hold_both)
{
    cr_assert_eq(vcpus_of(1, 0), 1);
    cr_assert_eq(vcpus_of(0.5, 1024), 1);
    cr_assert_eq(vcpus_of(3, 0), 4);
    cr_assert_eq(vcpus_of(1, 5000), 4);
    cr_assert_eq(vcpus_of(2, 16384), 8);
    g_sb = create_with(0, 0, 0, 1);
    cr_assert_null(create_field(g_sb, "resources"));
}

static void refused(double cpu, long long memory_mb, const char *option, const char *ctx_key,
                    const char *ctx_val)
{
    sbx_options *o = sbx_options_new();
    if (cpu > 0)
        cr_assert_eq(sbx_options_set_cpu(o, cpu, NULL), 0);
    if (memory_mb > 0)
        cr_assert_eq(sbx_options_set_memory_mb(o, memory_mb, NULL), 0);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
    sbx_options_free(o);
    cr_assert_null(sb);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, option, NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), option);
    cr_assert_str_eq(sbx_error_get0_context(err, ctx_key), ctx_val);
    sbx_error_free(err);
}

Test(vercel, what_no_vcpu_count_holds_is_a_configuration_error)
{
    tu_fake_reset();
    refused(9, 0, "cpu", "max", "8");
    refused(0, 512, "memory_mb", "min_mb", "1024");
    refused(0, 16385, "memory_mb", "max_mb", "16384");
    /* Nothing reached the provider. */
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/v1/sandboxes", NULL, 0), 0);
    json_object_put(log);
}

Test(vercel, the_timeout_is_always_sent_and_extended_past_a_creates)
{
    g_sb = create_with(0, 0, 60, 1);
    json_object *t = create_field(g_sb, "timeout");
    cr_assert_eq(json_object_get_int64(t), 65000);
    json_object_put(t);
    json_object *j = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(jint(j, "timeout"), 65000);
    json_object_put(j);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    /* No lifetime given: an hour, 45 min by the create and the rest by
     * extend-timeout. */
    tu_fake_reset();
    g_sb = create_with(0, 0, 0, 1);
    t = create_field(g_sb, "timeout");
    cr_assert_eq(json_object_get_int64(t), 2700000);
    json_object_put(t);
    j = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(jint(j, "timeout"), 3600000);
    json_object_put(j);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/v1/sandboxes/[^/]+/extend-timeout", NULL, 0), 1);
    json_object_put(log);
}

Test(vercel, allow_internet_off_is_deny_all)
{
    g_sb = create_with(0, 0, 0, 0);
    json_object *p = create_field(g_sb, "networkPolicy");
    cr_assert_not_null(p);
    cr_assert_str_eq(tu_json_str(p, "mode"), "deny-all");
    json_object_put(p);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = create_with(0, 0, 0, 1);
    cr_assert_null(create_field(g_sb, "networkPolicy"));
}

Test(vercel, every_request_carries_the_team_and_the_create_the_project)
{
    tu_fake_reset();
    g_sb = create_with(0, 0, 0, 1);
    sbx_result *r = tu_sh(g_sb, "echo hi", 30);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    json_object *pid = create_field(g_sb, "projectId");
    cr_assert_str_eq(json_object_get_string(pid), "prj_fake");
    json_object_put(pid);
    json_object *log = tu_fake_log();
    size_t n = json_object_array_length(log);
    cr_assert_gt(n, 2);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(log, i), *q = NULL;
        cr_assert(json_object_object_get_ex(e, "query", &q));
        cr_assert_str_eq(tu_json_str(q, "teamId"), "team_fake", "%s has no teamId",
                         tu_json_str(e, "path"));
        cr_assert_str_eq(tu_json_str(e, "auth"), "Bearer <redacted>");
    }
    json_object_put(log);
}

Test(vercel, destroy_stops_the_sandbox_once)
{
    g_sb = create_with(0, 0, 0, 1);
    char *id = strdup(sbx_sandbox_get0_id(g_sb));
    tu_fake_reset();
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    json_object *j = fake_sandbox(id);
    cr_assert_str_eq(tu_json_str(j, "status"), "stopped");
    json_object_put(j);
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/v1/sandboxes/%s/stop", id);
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1);
    json_object_put(log);
    free(re);
    free(id);
}

Test(vercel, a_snapshot_stops_the_sandbox_and_a_create_from_it_has_its_files)
{
    g_sb = create_with(0, 0, 0, 1);
    sbx_result *r = tu_sh(g_sb, "echo kept > /tmp/snap.txt", 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    sbx_error *err = NULL;
    char *snap = sbx_sandbox_snapshot(g_sb, &err);
    cr_assert_not_null(snap, "%s", err ? sbx_error_get0_message(err) : "");
    json_object *j = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    cr_assert_str_eq(tu_json_str(j, "status"), "stopped");
    json_object_put(j);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_snapshot_id(o, snap, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    json_object *src = create_field(g_sb, "source");
    cr_assert_str_eq(tu_json_str(src, "type"), "snapshot");
    cr_assert_str_eq(tu_json_str(src, "snapshotId"), snap);
    json_object_put(src);
    r = tu_sh(g_sb, "cat /tmp/snap.txt", 30);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    free(snap);
}

Test(vercel, a_sandbox_stopped_during_a_command_is_gone)
{
    g_sb = create_with(0, 0, 0, 1);
    const char *url = getenv("VERCEL_API_URL");
    char *s = tu_strdup_printf("python3 -c 'import urllib.request as u; u.urlopen(u.Request("
                               "\"%s/_fake/sandbox/%s/stop\", data=b\"{}\", method=\"POST\"))'; "
                               "sleep 20", url, sbx_sandbox_get0_id(g_sb));
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_shell(g_sb, s, &err);
    cr_assert_null(r);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s",
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    sbx_error_free(err);
    free(s);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 0);
}

Test(vercel, list_owned_follows_every_page)
{
    sbx_sandbox *sbs[3];
    for (int i = 0; i < 3; i++)
        sbs[i] = create_with(0, 0, 0, 1);
    /* One sandbox a page: at least a page for each of the three. */
    tu_fake_assert_list_owned_pages(g_client, sbs, "/v1/sandboxes");
}

Test(vercel, an_oidc_token_that_is_not_a_jwt_is_a_configuration_error)
{
    setenv("VERCEL_OIDC_TOKEN", "not-a-jwt", 1);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("vercel", &err);
    unsetenv("VERCEL_OIDC_TOKEN");
    cr_assert_null(c);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "VERCEL_OIDC_TOKEN", NULL);
    sbx_error_free(err);
}

Test(vercel, the_client_options_team_and_project_come_first_and_must_be_strings)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_config("vercel", SBX_PLUGIN_MODE_DEFAULT,
                                               "{\"team_id\": 7}", &err);
    cr_assert_null(c);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "team_id", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "team_id");
    sbx_error_free(err);
    err = NULL;
    /* A team the fake does not know: the provider's 403 names it. */
    c = sbx_client_new_with_config("vercel", SBX_PLUGIN_MODE_DEFAULT,
                                   "{\"team_id\": \"team_other\"}", &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_null(sb);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, "team_other", NULL);
    sbx_error_free(err);
    sbx_client_free(c);
}

/* The running sandboxes at the fake, through its list route. */
static size_t fake_running(void)
{
    const char *key = getenv("VERCEL_TOKEN");
    char *h = tu_strdup_printf("Authorization: Bearer %s", key ? key : "");
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/v1/sandboxes?teamId=team_fake&limit=100", h, NULL, &body),
                 200, "%s", body ? body : "");
    json_object *j = json_tokener_parse(body), *a = NULL;
    cr_assert(j && json_object_object_get_ex(j, "sandboxes", &a), "%s", body);
    size_t n = 0;
    for (size_t i = 0; i < json_object_array_length(a); i++)
        n += strcmp(tu_json_str(json_object_array_get_idx(a, i), "status"), "running") == 0;
    json_object_put(j);
    free(body);
    free(h);
    return n;
}

/* CASE-20: a create answered after the call's deadline made a sandbox that
 * has no label file yet; the plugin finds it by the create token in its env
 * and stops it before the timeout is returned, in both plugin modes (the
 * call timeout bounds the create in each). */
Test(vercel, late_create_is_stopped)
{
    size_t n0 = fake_running();
    tu_fake_post("/_fake/config", "{\"hold_create\": 4}");
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    sbx_error *err = NULL;
    double t0 = tu_now();
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    double dt = tu_now() - t0;
    tu_fake_post("/_fake/config", "{\"hold_create\": 0}");
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    /* CASE-20: the timeout within 1.5 s; within 10 s the late sandbox is stopped
     * (by the create's own look, or the reaper's after it). */
    cr_assert(dt <= 1.5, "the create returned after %.2f s", dt);
    sbx_error_free(err);
    cr_assert_eq(tu_wait_count(fake_running, n0, 10.0), n0, "the late sandbox was not stopped "
                 "within 10 s");
}

typedef struct live {
    char go[512];       /* the host path of the sandbox's /tmp/go */
    char out[64];
    size_t len;
    int made;           /* /tmp/go made on seeing "first\n" */
} live;

static void live_output(sbx_stream stream, const void *data, size_t len, void *ud)
{
    live *l = ud;
    if (stream != SBX_STREAM_STDOUT)
        return;
    cr_assert(l->len + len < sizeof l->out, "%zu bytes of output", l->len + len);
    memcpy(l->out + l->len, data, len);
    l->len += len;
    if (!l->made && l->len >= 6 && memcmp(l->out, "first\n", 6) == 0) {
        tu_write_file(l->go, "", 0, 0644);
        l->made = 1;
    }
}

/* Output arrives as the command writes it: the command waits (up to 20 s,
 * then exits 9) for /tmp/go, which the test makes only once "first\n" has
 * reached the output callback. The bytes come exact (0xff and NUL through
 * the text logs stream), in three requests (cmd, its logs, its exit code);
 * large output too; nothing is left in /tmp but the label file. */
Test(vercel, output_arrives_as_the_command_writes_it)
{
    g_sb = create_with(0, 0, 0, 1);
    json_object *fs = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    live l = { .len = 0 };
    snprintf(l.go, sizeof l.go, "%s/tmp/go", tu_json_str(fs, "root"));
    json_object_put(fs);
    tu_fake_reset();
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "printf 'first\\n'; i=0; while [ ! -e /tmp/go ]; do sleep 0.05; "
                "i=$((i+1)); [ $i -lt 400 ] || exit 9; done; printf '\\377\\000second\\n'; "
                "printf e >&2; exit 4";
    req.timeout_secs = 60;
    req.on_output = live_output;
    req.user_data = &l;
    sbx_result *r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 4);
    sbx_result_free(r);
    cr_assert_eq(l.made, 1);
    tu_assert_bytes("the streamed output", l.out, l.len, "first\n\377\000second\n", 15);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 3, "%s", json_object_to_json_string(log));
    cr_assert_eq(tu_fake_count(log, "POST", "/v1/sandboxes/[^/]+/cmd", NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "GET", "/v1/sandboxes/[^/]+/cmd/[^/]+/logs", NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "GET", "/v1/sandboxes/[^/]+/cmd/[^/]+", NULL, 0), 1);
    json_object_put(log);
    r = tu_sh(g_sb, "head -c 200000 /dev/zero | tr '\\000' '\\351'; echo", 30);
    tu_assert_exit(r, 0);
    size_t n = 0;
    const char *out = sbx_result_get0_stdout(r, &n);
    cr_assert_eq(n, 200001);
    cr_assert_eq((unsigned char)out[0], 0xe9);
    cr_assert_eq((unsigned char)out[199999], 0xe9);
    cr_assert_eq(out[200000], '\n');
    sbx_result_free(r);
    r = tu_sh(g_sb, "ls -A /tmp", 30);
    tu_assert_stdout(r, ".sbx-owner.json\ngo\n");
    sbx_result_free(r);
}

/* CASE-52 behind a proxy that ends a connection quiet for 2 s: a command
 * quiet for 5 s completes with its output and exit code; its logs stream,
 * cut while it was quiet, is read again (at least twice in all), and the
 * command is started once. */
Test(vercel, case52_a_quiet_command_outlives_an_idle_proxy)
{
    int port = tu_reaper_start(tu_fake_use("VERCEL_API_URL"), 2);
    sbx_client_free(g_client);
    char *cfg = tu_strdup_printf("{\"api_url\":\"http://127.0.0.1:%d\"}", port);
    sbx_error *err = NULL;
    g_client = sbx_client_new_with_config("vercel", SBX_PLUGIN_MODE_DEFAULT, cfg, &err);
    cr_assert_not_null(g_client, "%s: %s", cfg, err ? sbx_error_get0_message(err) : "");
    free(cfg);
    g_sb = create_with(0, 0, 0, 1);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "printf 'a\\377'; sleep 5; echo done", 60);
    tu_assert_stdout_bytes(r, "a\377done\n", 7);
    tu_assert_stderr(r, "");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "POST", "/v1/sandboxes/[^/]+/cmd", NULL, 0), 1);
    int reads = tu_fake_count(log, "GET", "/v1/sandboxes/[^/]+/cmd/[^/]+/logs", NULL, 0);
    cr_assert(reads >= 2, "the logs were read %d times", reads);
    json_object_put(log);
    /* Destroyed through the proxy, before it stops. */
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert(tu_reaper_stop() >= 1);
}

/* A command whose output nobody follows is two requests: the cmd run with
 * wait (its answer ends with the exit code), then its logs, whole; the
 * output exact (bytes that are not UTF-8 and a NUL through the encoder). */
Test(vercel, a_command_nobody_follows_is_two_requests)
{
    g_sb = create_with(0, 0, 0, 0);
    tu_fake_reset();
    sbx_result *r = tu_sh(g_sb, "printf 'a\\377\\000b'; printf 'e\\351' >&2; exit 6", 30);
    tu_assert_exit(r, 6);
    tu_assert_stdout_bytes(r, "a\377\000b", 4);
    tu_assert_stderr_bytes(r, "e\351", 2);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 2, "%s", json_object_to_json_string(log));
    cr_assert_eq(tu_fake_count(log, "POST", "/v1/sandboxes/[^/]+/cmd", NULL, 0), 1);
    cr_assert_eq(tu_fake_count(log, "GET", "/v1/sandboxes/[^/]+/cmd/[^/]+/logs", NULL, 0), 1);
    json_object_put(log);
}
