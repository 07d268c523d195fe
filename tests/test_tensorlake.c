/*
 * test_tensorlake.c — what only the tensorlake backend does, through its
 * contract fake (tests/tensorlake.sh starts it and runs this program with
 * SBX_TEST_BACKEND=tensorlake): every sandbox is named by its create token,
 * so stop suspends and start resumes the same sandbox with its files, and
 * list_owned and destroy_by_id find it; a warm exec is one request whose
 * output is exact (small outputs in its report, percent-encoded by the
 * shell or in base64, large ones downloaded and removed, a killed
 * command's output kept), no finished command leaves a file, and a job the
 * command leaves in the background does not hold the exec; with an output
 * callback the output streams in chunks while the command runs, in the
 * same one request ("a\n" reaches the callback a second before the command
 * ends; every byte value exact and apart on both streams, stdin too), and
 * a command killed at its timeout keeps what it streamed, read back from
 * the files past the chunks when the kill ended the wrapper, and a process
 * handle's command takes SIGINT (130); a quiet
 * command is not cut (12 s without a byte on the stream, with and without
 * a callback), ends at its own timeout, and the daemon's keepalive
 * comments never reach the output (CASE-52); a create whose
 * answer comes after
 * the call's deadline is outcome unknown and the sandbox the provider made
 * meanwhile is found by that name and deleted (CASE-20); with
 * {"suspendable": false} the sandbox is unnamed, and stop names the option
 * (a client made so refuses list_owned naming it); a bad value of the
 * option and a memory_mb under the provider's 256 MB minimum are
 * configuration errors naming them; timeout_secs is always sent (the
 * lifetime rounded up plus 5 s, 3600 s when none was set); a sandbox the
 * provider lost is not_found "gone" at once and for every later call
 * (CASE-32); one it suspended is woken by the next exec, or by start, with
 * its files, and is_alive does not call it gone (CASE-53); a 429 waits what
 * its Retry-After asks, backs off without one and past the wait cap is
 * rate_limited at once (CASE-19); a key the provider echoes is [redacted]
 * and never in a context, a session state or the fake's log (CASE-36); this
 * process's environment never reaches the sandbox or the provider
 * (CASE-48).
 */
#include "testutil.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "tensorlake", "run by tests/tensorlake.sh");
    tu_fake_use("TENSORLAKE_API_URL");
    g_client = sbx_client_new("tensorlake", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    tu_fake_reset();
    tu_fake_post("/_fake/keepalive", "{\"seconds\":0}");
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
}

TestSuite(tensorlake, .init = setup, .fini = teardown, .timeout = 60);

static sbx_sandbox *create_with(const char *backend_options)
{
    sbx_options *o = sbx_options_new();
    if (backend_options)
        cr_assert_eq(sbx_options_set_backend_options(o, backend_options, NULL), 0);
    sbx_sandbox *sb = tu_create(g_client, o);
    sbx_options_free(o);
    return sb;
}

Test(tensorlake, an_unnamed_sandbox_cannot_stop_and_names_the_option)
{
    g_sb = create_with("{\"suspendable\": false}");
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_stop(g_sb, &err), -1);
    char *msg = tu_strdup_printf("tensorlake sandbox %s cannot be suspended: it is unnamed "
                                 "(create it with the backend option or client option "
                                 "\"suspendable\": true)", sbx_sandbox_get0_id(g_sb));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
    cr_assert_str_eq(sbx_error_get0_message(err), msg);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "suspendable");
    cr_assert_str_eq(sbx_error_get0_op(err), "stop");
    free(msg);
    sbx_error_free(err);
    /* It runs on. */
    sbx_result *r = tu_sh(g_sb, "echo still", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "still\n");
    sbx_result_free(r);
}

/* 1 when @name is a create token: "sbx-" and 32 lowercase hex digits. */
static int is_token(const char *name)
{
    return name && strlen(name) == 36 && strncmp(name, "sbx-", 4) == 0
           && strspn(name + 4, "0123456789abcdef") == 32;
}

/* The fake's own view of sandbox @id: {"status", "name", ...}. */
static json_object *fake_sandbox(const char *id)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id), *body = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &body), 200, "%s", body ? body : "");
    json_object *j = json_tokener_parse(body);
    cr_assert_not_null(j, "%s", body);
    free(body);
    free(path);
    return j;
}

Test(tensorlake, a_sandbox_named_by_its_create_token_stops_and_starts_with_its_files)
{
    g_sb = create_with(NULL);
    json_object *fs = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    const char *name = tu_json_str(fs, "name");
    cr_assert(is_token(name), "not named by a create token: %s", name ? name : "(none)");
    json_object_put(fs);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/keep.txt", "kept\n", 5, &err), 0,
                 "write_file: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_stop(g_sb, &err), 0, "stop: %s",
                 err ? sbx_error_get0_message(err) : "");
    /* Stopping a stopped sandbox succeeds. */
    cr_assert_eq(sbx_sandbox_stop(g_sb, &err), 0, "second stop: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_start(g_sb, &err), 0, "start: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(g_sb, "cat /work/keep.txt", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
}

/* timeout_secs is always sent (CASE-33): the caller's lifetime rounded up
 * to whole seconds plus 5 (so a command cut at the lifetime's end reports
 * its timeout), and 3600 when the caller set none. */
Test(tensorlake, timeout_secs_is_always_sent)
{
    static const struct { double secs; int64_t sent; } want[] = {
        { 90, 95 }, { 90.5, 96 }, { 1, 6 }, { -1, 3600 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tu_fake_reset();
        sbx_options *o = sbx_options_new();
        if (want[i].secs > 0)
            cr_assert_eq(sbx_options_set_timeout_secs(o, want[i].secs, NULL), 0);
        sbx_sandbox *sb = tu_create(g_client, o);
        sbx_options_free(o);
        json_object *log = tu_fake_log(), *body = NULL, *v;
        for (size_t k = 0; k < json_object_array_length(log); k++) {
            json_object *e = json_object_array_get_idx(log, k);
            if (strcmp(tu_json_str(e, "method"), "POST") == 0
                && strcmp(tu_json_str(e, "path"), "/sandboxes") == 0) {
                cr_assert_null(body, "two creates: %s", json_object_to_json_string(log));
                body = json_tokener_parse(tu_json_str(e, "body"));
            }
        }
        cr_assert_not_null(body, "no create body: %s", json_object_to_json_string(log));
        cr_assert(json_object_object_get_ex(body, "timeout_secs", &v), "lifetime %g: %s",
                  want[i].secs, json_object_to_json_string(body));
        cr_assert(json_object_is_type(v, json_type_int), "%s", json_object_to_json_string(body));
        cr_assert_eq(json_object_get_int64(v), want[i].sent, "lifetime %g: %s", want[i].secs,
                     json_object_to_json_string(body));
        json_object *fs = fake_sandbox(sbx_sandbox_get0_id(sb));
        cr_assert(json_object_object_get_ex(fs, "timeout_secs", &v));
        cr_assert_eq(json_object_get_int64(v), want[i].sent);
        json_object_put(fs);
        json_object_put(body);
        json_object_put(log);
        cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
        sbx_sandbox_free(sb);
    }
}

Test(tensorlake, suspendable_must_be_a_boolean)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"suspendable\": \"yes\"}", NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "tensorlake backend_options: suspendable \"yes\" is not true or false");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "backend_options");
    sbx_error_free(err);
}

Test(tensorlake, memory_under_the_minimum_names_it)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, 255, NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "tensorlake backend: memory_mb 255: below Tensorlake's minimum of 256 MB");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "memory_mb");
    cr_assert_str_eq(sbx_error_get0_context(err, "min_mb"), "256");
    sbx_error_free(err);
}

static int count_token(const sbx_owned_sandbox *o, void *ud)
{
    const char **want = ud;
    if (strcmp(o->id, want[0]) == 0)
        want[1] = "found";
    return 0;
}

Test(tensorlake, every_sandbox_is_named_so_it_can_be_listed_and_reaped)
{
    sbx_error *err = NULL;
    uint64_t caps = 0;

    /* A client made with {"suspendable": false}: no list_owned, and the
     * call names the option. */
    sbx_client *unnamed = sbx_client_new_with_config("tensorlake", SBX_PLUGIN_MODE_DEFAULT,
                                                     "{\"suspendable\": false}", &err);
    cr_assert_not_null(unnamed, "client: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_client_probe(unnamed, &caps, &err), 0);
    cr_assert_eq(caps & SBX_CAP_LIST_OWNED, 0);
    cr_assert_eq(sbx_client_list_owned(unnamed, NULL, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_FEATURE_NOT_SUPPORTED);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "suspendable");
    sbx_error_free(err);
    err = NULL;
    sbx_client_free(unnamed);

    sbx_client *named = g_client;
    cr_assert_eq(sbx_client_probe(named, &caps, &err), 0);
    cr_assert_eq(caps & SBX_CAP_LIST_OWNED, SBX_CAP_LIST_OWNED);

    sbx_sandbox *sb = tu_create(named, NULL);
    char *id = strdup(sbx_sandbox_get0_id(sb));
    const char *want[2] = { id, NULL };
    cr_assert_geq(sbx_client_list_owned(named, count_token, want, &err), 1, "list_owned: %s",
                  err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(want[1] ? want[1] : "missing", "found");

    /* Reaped by id, as sbx gc would: then it is listed no more. */
    cr_assert_eq(sbx_client_destroy_by_id(named, id, &err), 0, "destroy_by_id: %s",
                 err ? sbx_error_get0_message(err) : "");
    want[1] = NULL;
    cr_assert_geq(sbx_client_list_owned(named, count_token, want, &err), 0);
    cr_assert_null(want[1]);
    /* A second destroy is a no-op. */
    cr_assert_eq(sbx_client_destroy_by_id(named, id, &err), 0);
    cr_assert_eq(sbx_sandbox_is_alive(sb, &err), 0);
    sbx_error_free(err);
    sbx_sandbox_free(sb);
    free(id);
}

/* A create answered 408 (the provider's own time ran out) is a timeout,
 * never the caller's configuration; the create is sent once. */
Test(tensorlake, a_create_answered_408_is_a_timeout)
{
    tu_fake_assert_create_answered(g_client, "^/sandboxes$", 408, SBX_ERROR_TIMEOUT);
}

/* CASE-20 on a provider without labels: the create's answer comes 3 s
 * after the call's deadline (1 s). create fails with timeout and outcome
 * unknown after one POST; the sandbox the fake makes when it answers is
 * found by its name, the create token, in the list, and deleted by the
 * client's reaper (it looks once a second): one DELETE, of the sandbox so
 * named, which the fake then holds terminated. */
Test(tensorlake, case20_a_create_answered_too_late_is_found_by_its_name_and_deleted_slow)
{
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    tu_fake_post("/_fake/faults", "{\"method\":\"POST\",\"path\":\"^/sandboxes$\","
                                  "\"action\":\"pass\",\"delay\":3}");
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    sbx_error *err = NULL;
    double t0 = tu_now();
    cr_assert_null(sbx_sandbox_create(g_client, NULL, &err), "the late create succeeded");
    double dt = tu_now() - t0;
    /* CASE-20: the timeout within 1.5 s. */
    cr_assert(dt <= 1.5, "the create returned after %.2f s", dt);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    sbx_error_free(err);
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 0, NULL), 0);

    double end = tu_now() + 15.0;
    json_object *log = NULL;
    int deletes = 0;
    while (tu_now() < end) {
        json_object_put(log);
        log = tu_fake_log();
        deletes = tu_fake_count(log, "DELETE", "^/sandboxes/[^/]+$", NULL, 0);
        if (deletes)
            break;
        usleep(200000);
    }
    cr_assert_eq(deletes, 1, "the late sandbox was not deleted within 15 s");
    cr_assert_eq(tu_fake_count(log, "POST", "^/sandboxes$", NULL, 0), 1);
    cr_assert_geq(tu_fake_count(log, "GET", "^/sandboxes$", NULL, 0), 1, "no look-up");
    const char *deleted = NULL;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        if (strcmp(tu_json_str(e, "method"), "DELETE") == 0)
            deleted = tu_json_str(e, "path") + strlen("/sandboxes/");
    }
    cr_assert_not_null(deleted);
    json_object *fs = fake_sandbox(deleted);
    const char *name = tu_json_str(fs, "name");
    cr_assert(is_token(name), "not named by a create token: %s", name ? name : "(none)");
    cr_assert_str_eq(tu_json_str(fs, "status"), "terminated");
    json_object_put(fs);
    json_object_put(log);
}

Test(tensorlake, a_client_option_of_the_wrong_type_names_it)
{
    sbx_error *err = NULL;
    cr_assert_null(sbx_client_new_with_config("tensorlake", SBX_PLUGIN_MODE_DEFAULT,
                                              "{\"suspendable\": 1}", &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "tensorlake client option suspendable 1 is not true or false");
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "suspendable");
    cr_assert_str_eq(sbx_error_get0_backend(err), "tensorlake");
    cr_assert_str_eq(sbx_error_get0_op(err), "client_new");
    sbx_error_free(err);
}

/* The exposed_ports of the provider's SandboxInfo of @id, as "N,N,...". */
static char *provider_ports(const char *id)
{
    char *path = tu_strdup_printf("/sandboxes/%s", id);
    char *out = tu_fake_ints(path, "Authorization: Bearer sbx-test-dummy-key", "exposed_ports");
    free(path);
    return out;
}

/* Exposed ports live at the provider: create sends exposed_ports, expose
 * and unexpose PATCH the whole set, resume reads it back; each resolves to
 * https://PORT-ID.sandbox.tensorlake.ai, and a port not exposed is
 * not_found. */
Test(tensorlake, exposed_ports_follow_the_provider)
{
    static const uint16_t ports[] = { 8080 };
    g_sb = tu_create_with_ports(g_client, ports, 1);
    const char *id = sbx_sandbox_get0_id(g_sb);
    char *p = provider_ports(id);
    cr_assert_str_eq(p, "8080");
    free(p);
    sbx_error *err = NULL;
    char *want = tu_strdup_printf("https://8080-%s.sandbox.tensorlake.ai", id);
    tu_assert_port_url(g_sb, 8080, want);
    free(want);

    cr_assert_eq(sbx_sandbox_expose_port(g_sb, 3000, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    p = provider_ports(id);
    cr_assert_str_eq(p, "3000,8080");
    free(p);
    cr_assert_eq(sbx_sandbox_unexpose_port(g_sb, 8080, &err), 0);
    p = provider_ports(id);
    cr_assert_str_eq(p, "3000");
    free(p);
    tu_assert_port_not_exposed(g_sb, "tensorlake", 8080);

    /* A handle resumed from the session state takes the provider's set. */
    char *state = sbx_sandbox_session_state(g_sb, &err);
    sbx_sandbox *again = sbx_sandbox_resume(g_client, state, &err);
    cr_assert_not_null(again, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_ports(again, "3000");
    sbx_sandbox_free(again);
    free(state);
}

/* The fake's requests since the last reset of its log, on the sandbox's
 * data plane: how many with @method on @route (after /api/v1). */
static int data_plane_count(json_object *log, const char *method, const char *route)
{
    char *re = tu_strdup_printf("^/sandbox/[^/]+/api/v1%s$", route);
    int n = tu_fake_count(log, method, re, NULL, 0);
    free(re);
    return n;
}

/* A warm exec is one request, the run (its SSE stream carries lines of
 * text, so the command's wrapper reports both outputs percent-encoded or in
 * base64), and the bytes come back exact and apart: a \r before a \n, a
 * NUL, bytes that are not UTF-8, no newline at the end (percent-encoded),
 * and 8893 bytes of stdout with 2000 of stderr (base64: more than the
 * shell encodes). */
Test(tensorlake, a_warm_exec_is_one_request_and_its_bytes_are_exact)
{
    g_sb = create_with(NULL);
    sbx_result *r = tu_sh(g_sb, "true", 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);

    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    r = tu_sh(g_sb, "printf 'a\\r\\nb\\0c\\377'; printf 'e\\200' >&2; exit 3", 30);
    tu_assert_exit(r, 3);
    tu_assert_stdout_bytes(r, "a\r\nb\0c\377", 7);
    tu_assert_stderr_bytes(r, "e\200", 2);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 1, "requests: %s",
                 json_object_to_json_string(log));
    cr_assert_eq(data_plane_count(log, "POST", "/processes/run"), 1);
    json_object_put(log);

    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    r = tu_sh(g_sb, "seq 1 2000; head -c 2000 /dev/zero | tr '\\0' e >&2", 30);
    tu_assert_exit(r, 0);
    char *want = NULL, *e = malloc(2000);
    size_t wn = 0;
    FILE *f = open_memstream(&want, &wn);
    for (int i = 1; i <= 2000; i++)
        fprintf(f, "%d\n", i);
    fclose(f);
    memset(e, 'e', 2000);
    cr_assert_eq(wn, 8893);
    tu_assert_stdout_bytes(r, want, wn);
    tu_assert_stderr_bytes(r, e, 2000);
    free(want);
    free(e);
    sbx_result_free(r);
    log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 1, "requests: %s",
                 json_object_to_json_string(log));
    json_object_put(log);
}

/* Each way the wrapper reports an output, one request each, exact: text
 * of 8192 bytes with spaces, tabs, "%" and newlines (percent-encoded: the
 * most the shell encodes), 8193 bytes (base64), every byte value once
 * (base64: more than 16 distinct bytes to encode), 17 NULs (base64: more
 * than 16 NULs) and 16 (percent-encoded), and an empty output. */
Test(tensorlake, every_way_of_reporting_an_output_is_exact)
{
    g_sb = create_with(NULL);
    static const struct {
        const char *script;
        size_t len;
    } cases[] = {
        { "i=0; while [ $i -lt 1024 ]; do printf '%%\\t 3456\\n'; i=$((i+1)); done", 8192 },
        { "i=0; while [ $i -lt 1024 ]; do printf '%%\\t 3456\\n'; i=$((i+1)); done; echo", 8193 },
        { "i=0; while [ $i -lt 256 ]; do printf \"\\\\$(printf %o $i)\"; i=$((i+1)); done", 256 },
        { "head -c 17 /dev/zero", 17 },
        { "head -c 16 /dev/zero", 16 },
        { "true", 0 },
    };
    sbx_result *r = tu_sh(g_sb, "true", 30);
    sbx_result_free(r);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *want = malloc(cases[i].len + 1);
        size_t n = 0;
        if (i < 2) {
            for (int k = 0; k < 1024; k++, n += 8)
                memcpy(want + n, "%\t 3456\n", 8);
            if (i == 1)
                want[n++] = '\n';
        } else if (i == 2) {
            for (; n < 256; n++)
                want[n] = (char)n;
        } else {
            memset(want, 0, cases[i].len);
            n = cases[i].len;
        }
        cr_assert_eq(n, cases[i].len);
        cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
        r = tu_sh(g_sb, cases[i].script, 30);
        tu_assert_exit(r, 0);
        tu_assert_stdout_bytes(r, want, n);
        tu_assert_stderr(r, "");
        sbx_result_free(r);
        free(want);
        json_object *log = tu_fake_log();
        cr_assert_eq(json_object_array_length(log), 1, "case %zu: requests: %s", i,
                     json_object_to_json_string(log));
        json_object_put(log);
    }
}

/* Output above 64 KiB a stream is downloaded as raw bytes and deleted:
 * the run, then one GET and one DELETE of stdout's file; stderr (small)
 * comes in the report, and the command's other files are gone. */
Test(tensorlake, a_large_output_is_downloaded_and_removed)
{
    g_sb = create_with(NULL);
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    sbx_result *r = tu_sh(g_sb, "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2", 30);
    tu_assert_exit(r, 0);
    char *a = malloc(100000);
    memset(a, 'a', 100000);
    tu_assert_stdout_bytes(r, a, 100000);
    tu_assert_stderr(r, "done\n");
    free(a);
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 3, "requests: %s",
                 json_object_to_json_string(log));
    cr_assert_eq(data_plane_count(log, "POST", "/processes/run"), 1);
    cr_assert_eq(data_plane_count(log, "GET", "/files"), 1);
    cr_assert_eq(data_plane_count(log, "DELETE", "/files"), 1);
    json_object_put(log);
    /* Only the files of the command that looks. */
    r = tu_sh(g_sb, "ls -a /dev/shm /tmp | grep -c '^\\.sbx-exec-'", 30);
    tu_assert_stdout(r, "2\n");
    sbx_result_free(r);
}

/* The sandbox's files named for commands (".sbx-exec-*" in /dev/shm and
 * /tmp), one per line, sorted, as a command sees them: its own stdout and
 * stderr files are there while it runs. */
static char *command_files(void)
{
    sbx_result *r = tu_sh(g_sb, "cd /dev/shm && ls -a | grep '^\\.sbx-exec-'; "
                          "cd /tmp && ls -a | grep '^\\.sbx-exec-'; true", 30);
    tu_assert_exit(r, 0);
    size_t n = 0;
    const char *o = sbx_result_get0_stdout(r, &n);
    char *s = strndup(o, n);
    sbx_result_free(r);
    return s;
}

/* The looking command's own two files, in /dev/shm (the fake's sandboxes
 * have a writable one), and nothing else. */
static void assert_only_own_files(const char *files)
{
    char *tag = NULL;
    size_t n = strcspn(files, "\n");
    cr_assert(n > 5 && strncmp(files + n - 4, ".err", 4) == 0, "files: %s", files);
    tag = strndup(files, n - 4);
    char *want = tu_strdup_printf("%s.err\n%s.out\n", tag, tag);
    cr_assert_str_eq(files, want);
    free(want);
    free(tag);
}

/* Every command removes its own files once it has reported: after eight
 * commands (small output, output of each size class, stdin, a failing
 * one), a command sees its own two files and nothing else, in /dev/shm
 * and /tmp. */
Test(tensorlake, a_finished_command_leaves_no_file)
{
    g_sb = create_with(NULL);
    static const char *const cmds[] = {
        "true", "echo hi", "exit 3", "seq 1 2000",
        "head -c 3000 /dev/urandom", "head -c 100000 /dev/zero", "printf 'a\\0b' >&2", "cat",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
        req.shell = cmds[i];
        req.timeout_secs = 30;
        if (strcmp(cmds[i], "cat") == 0) {
            req.stdin_data = "in\n";
            req.stdin_len = 3;
        }
        sbx_result *r = tu_exec(g_sb, &req);
        tu_assert_exit(r, strcmp(cmds[i], "exit 3") == 0 ? 3 : 0);
        sbx_result_free(r);
    }
    char *files = command_files();
    assert_only_own_files(files);
    free(files);
}

/* What the command puts in the background does not hold the exec: the
 * exec ends with the command's shell, its output is what that wrote. */
Test(tensorlake, a_background_job_does_not_hold_the_exec)
{
    g_sb = create_with(NULL);
    double t0 = tu_now();
    sbx_result *r = tu_sh(g_sb, "{ sleep 5; echo late; } & (sleep 5) & echo now", 30);
    double dt = tu_now() - t0;
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "now\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
    cr_assert(dt < 2.5, "the exec took %.2f s", dt);
}

/* A command killed at its timeout (SIGTERM to its processes) keeps what it
 * wrote: its wrapper ignores the signal and still reports, so no file is
 * read back. One that ignores SIGTERM too is ended by SIGKILL after the
 * grace, its wrapper with it: its output is then downloaded from the
 * files, which are removed. */
Test(tensorlake, a_killed_command_keeps_its_output)
{
    g_sb = create_with(NULL);
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    sbx_result *r = tu_sh(g_sb, "echo before; echo oops >&2; sleep 30", 1);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    tu_assert_stdout(r, "before\n");
    tu_assert_stderr(r, "oops\n");
    sbx_result_free(r);
    json_object *log = tu_fake_log();
    cr_assert_eq(data_plane_count(log, "GET", "/files"), 0, "requests: %s",
                 json_object_to_json_string(log));
    json_object_put(log);

    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    r = tu_sh(g_sb, "trap '' TERM; echo before; while :; do sleep 0.2; done", 1);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    tu_assert_stdout(r, "before\n");
    sbx_result_free(r);
    log = tu_fake_log();
    cr_assert_eq(data_plane_count(log, "GET", "/files"), 2, "requests: %s",
                 json_object_to_json_string(log));
    cr_assert_eq(data_plane_count(log, "DELETE", "/files"), 2);
    json_object_put(log);
    /* The looking command's own two files; none of the two killed ones'. */
    char *files = command_files();
    assert_only_own_files(files);
    free(files);
}

/* ------------------------------------------------------------ streaming */

/* What an output callback got: each stream's bytes, the number of calls
 * and of empty ones, and when stdout's first chunk came (tu_now()) with
 * its length. */
typedef struct got {
    char *out, *err;
    size_t outn, errn, outcap, errcap;
    int calls, empty;
    double first_at;
    size_t first_len;
} got;

static void got_add(char **buf, size_t *n, size_t *cap, const void *data, size_t len)
{
    if (*n + len + 1 > *cap) {
        *cap = (*n + len + 1) * 2;
        *buf = realloc(*buf, *cap);
        cr_assert_not_null(*buf);
    }
    memcpy(*buf + *n, data, len);
    *n += len;
}

static void on_output(sbx_stream stream, const void *data, size_t len, void *ud)
{
    got *g = ud;
    g->calls++;
    g->empty += len == 0;
    if (stream == SBX_STREAM_STDOUT) {
        if (!g->outn && len) {
            g->first_at = tu_now();
            g->first_len = len;
        }
        got_add(&g->out, &g->outn, &g->outcap, data, len);
    } else {
        cr_assert_eq(stream, SBX_STREAM_STDERR);
        got_add(&g->err, &g->errn, &g->errcap, data, len);
    }
}

static void got_free(got *g)
{
    free(g->out);
    free(g->err);
}

/* Runs @script with the output callback into @g (timeout @timeout s). */
static sbx_result *run_streamed(const char *script, double timeout, got *g)
{
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = script;
    req.timeout_secs = timeout;
    req.on_output = on_output;
    req.user_data = g;
    return tu_exec(g_sb, &req);
}

/* Where sandbox file @inside is on this host (the fake's sandboxes are
 * directories of it). */
static char *host_path(const char *inside)
{
    json_object *fs = fake_sandbox(sbx_sandbox_get0_id(g_sb));
    char *out = tu_strdup_printf("%s%s", tu_json_str(fs, "root"), inside);
    json_object_put(fs);
    return out;
}

/* The command prints a line, then waits (up to 10 s) for a file that only
 * the output callback makes, on seeing that line: "second" shows the line
 * reached the callback while the command ran ("never" when output came
 * only at its end). */
Test(tensorlake, output_reaches_the_callback_while_the_command_runs)
{
    g_sb = create_with(NULL);
    char *go = host_path("/tmp/go");
    tu_assert_output_is_live(g_sb, go, "/tmp/go");
    free(go);
}

/* "a\n", a second of sleep, then "b" without a newline: "a\n" reaches the
 * callback as a chunk of its own at least 0.8 s before the exec returns,
 * "b" after it; the result holds the same bytes; one request, the run. */
Test(tensorlake, a_streamed_chunk_arrives_before_the_command_ends)
{
    g_sb = create_with(NULL);
    sbx_result *r = tu_sh(g_sb, "true", 30);
    sbx_result_free(r);
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    got g = { 0 };
    r = run_streamed("printf 'a\\n'; sleep 1; printf b", 30, &g);
    double end = tu_now();
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "a\nb");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
    tu_assert_bytes("the streamed stdout", g.out, g.outn, "a\nb", 3);
    cr_assert_eq(g.errn, 0);
    cr_assert_eq(g.first_len, 2, "the first chunk was %zu bytes", g.first_len);
    cr_assert(end - g.first_at >= 0.8, "\"a\\n\" came %.3f s before the end",
              end - g.first_at);
    cr_assert_eq(g.empty, 0);
    json_object *log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 1, "requests: %s",
                 json_object_to_json_string(log));
    cr_assert_eq(data_plane_count(log, "POST", "/processes/run"), 1);
    json_object_put(log);
    got_free(&g);
}

/* Every byte value, 0 to 255 on stdout and 255 to 0 on stderr, streams
 * exact and apart (a NUL, a \r, bytes that are not UTF-8, no newline at
 * the end), with the command's exit code; and stdin's 256 bytes come back
 * exact through cat. */
Test(tensorlake, every_byte_value_streams_exact_and_apart)
{
    g_sb = create_with(NULL);
    char up[256], down[256];
    char *fo = malloc(256 * 4 + 1), *fe = malloc(256 * 4 + 1);
    for (int i = 0; i < 256; i++) {
        up[i] = (char)i;
        down[i] = (char)(255 - i);
        snprintf(fo + 4 * i, 5, "\\%03o", i);
        snprintf(fe + 4 * i, 5, "\\%03o", 255 - i);
    }
    char *script = tu_strdup_printf("printf '%s'; printf '%s' >&2; exit 9", fo, fe);
    got g = { 0 };
    sbx_result *r = run_streamed(script, 30, &g);
    tu_assert_exit(r, 9);
    tu_assert_stdout_bytes(r, up, 256);
    tu_assert_stderr_bytes(r, down, 256);
    sbx_result_free(r);
    tu_assert_bytes("the streamed stdout", g.out, g.outn, up, 256);
    tu_assert_bytes("the streamed stderr", g.err, g.errn, down, 256);
    cr_assert_eq(g.empty, 0);
    got_free(&g);

    got g2 = { 0 };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "cat; printf e >&2";
    req.timeout_secs = 30;
    req.stdin_data = up;
    req.stdin_len = 256;
    req.on_output = on_output;
    req.user_data = &g2;
    r = tu_exec(g_sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, up, 256);
    tu_assert_stderr(r, "e");
    sbx_result_free(r);
    tu_assert_bytes("the streamed stdout", g2.out, g2.outn, up, 256);
    tu_assert_bytes("the streamed stderr", g2.err, g2.errn, "e", 1);
    got_free(&g2);
    free(script);
    free(fo);
    free(fe);
}

/* A streamed command killed at its timeout: what it wrote before reached
 * the callback and the result, once, with no file read back (its wrapper
 * traps the signal and reports). One that ignores SIGTERM is ended by
 * SIGKILL after the grace, its wrapper with it: what the chunks carried is
 * not sent again, the rest is read from the files, which are removed. */
Test(tensorlake, a_streamed_command_killed_at_its_timeout_keeps_its_output)
{
    g_sb = create_with(NULL);
    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    got g = { 0 };
    sbx_result *r = run_streamed("echo before; echo oops >&2; sleep 30", 1, &g);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    tu_assert_stdout(r, "before\n");
    tu_assert_stderr(r, "oops\n");
    sbx_result_free(r);
    tu_assert_bytes("the streamed stdout", g.out, g.outn, "before\n", 7);
    tu_assert_bytes("the streamed stderr", g.err, g.errn, "oops\n", 5);
    got_free(&g);
    json_object *log = tu_fake_log();
    cr_assert_eq(data_plane_count(log, "GET", "/files"), 0, "requests: %s",
                 json_object_to_json_string(log));
    json_object_put(log);

    cr_assert_eq(tu_fake_http("DELETE", "/_fake/log", NULL, NULL, NULL), 204);
    got g2 = { 0 };
    r = run_streamed("trap '' TERM; echo before; while :; do sleep 0.2; done", 1, &g2);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    tu_assert_stdout(r, "before\n");
    /* Its stderr may hold its bash's word on a child the SIGKILL ended
     * first: the same bytes as the chunks and the files carried. */
    size_t en = 0;
    const char *e = sbx_result_get0_stderr(r, &en);
    tu_assert_bytes("the streamed stderr", g2.err, g2.errn, e, en);
    sbx_result_free(r);
    tu_assert_bytes("the streamed stdout", g2.out, g2.outn, "before\n", 7);
    got_free(&g2);
    log = tu_fake_log();
    cr_assert_eq(data_plane_count(log, "GET", "/files"), 2, "requests: %s",
                 json_object_to_json_string(log));
    cr_assert_eq(data_plane_count(log, "DELETE", "/files"), 2);
    json_object_put(log);
    char *files = command_files();
    assert_only_own_files(files);
    free(files);
}

/* A process handle's output streams too, and a signal reaches the
 * command as in a plain bash -c (its bash runs in the wrapper's background
 * with SIGINT and SIGQUIT at their defaults again): once "ready" came
 * through the callback, SIGINT ends it (one process: the shell execs
 * sleep) with 130; the output came once. */
Test(tensorlake, a_streamed_process_takes_sigint)
{
    g_sb = create_with(NULL);
    got g = { 0 };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    sbx_error *err = NULL;
    req.shell = "echo ready; exec sleep 30";
    req.timeout_secs = 60;
    req.on_output = on_output;
    req.user_data = &g;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &req, &err);
    cr_assert_not_null(p, "start_process: %s", err ? sbx_error_get0_message(err) : "");
    double end = tu_now() + 15;
    while (g.outn < 6) {
        cr_assert_eq(sbx_process_wait(p, 0.05, NULL, NULL, &err), 0, "ended early");
        cr_assert(tu_now() < end, "\"ready\" did not come within 15 s");
    }
    tu_assert_bytes("the streamed stdout", g.out, g.outn, "ready\n", 6);
    double t0 = tu_now();
    cr_assert_eq(sbx_process_kill(p, SIGINT, &err), 0, "kill: %s",
                 err ? sbx_error_get0_message(err) : "");
    int code = -1;
    cr_assert_eq(sbx_process_wait(p, 20, &code, NULL, &err), 1);
    cr_assert_eq(code, 130, "exit code %d; stdout \"%.*s\"", code, (int)g.outn, g.out);
    cr_assert(tu_now() - t0 < 10, "SIGINT took %.2f s to end it", tu_now() - t0);
    tu_assert_bytes("the streamed stdout", g.out, g.outn, "ready\n", 6);
    cr_assert_eq(g.errn, 0);
    sbx_process_free(p);
    got_free(&g);
}

/* ------------------------------------------------------------ CASE-52 */

/* The keepalive comments the fake's SSE streams sent since the last
 * POST /_fake/keepalive. */
static int keepalives_sent(void)
{
    char *body = NULL;
    cr_assert_eq(tu_fake_http("GET", "/_fake/keepalive", NULL, NULL, &body), 200);
    json_object *j = json_tokener_parse(body), *v;
    cr_assert(j && json_object_object_get_ex(j, "sent", &v), "%s", body);
    int n = json_object_get_int(v);
    json_object_put(j);
    free(body);
    return n;
}

/* C: a command that prints nothing for 12 s, longer than the transport's
 * one fixed limit (the 10 s to connect) and, with the daemon's keepalive
 * interval of 15 s, with no byte on its stream meanwhile: it is not cut,
 * with its output at the end and with an output callback (chunks); each
 * ends with its output after one run of the command. The stream has no
 * read timeout of its own: the command's timeout bounds it. */
Test(tensorlake, case52_a_quiet_command_is_not_cut_slow, .timeout = 90)
{
    g_sb = create_with(NULL);
    for (int streamed = 0; streamed < 2; streamed++) {
        tu_fake_reset();
        tu_fake_post("/_fake/keepalive", "{\"seconds\":0}");
        got g = { 0 };
        double t0 = tu_now();
        sbx_result *r = streamed ? run_streamed("sleep 12; echo done", 60, &g)
                                 : tu_sh(g_sb, "sleep 12; echo done", 60);
        double dt = tu_now() - t0;
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "done\n");
        tu_assert_stderr(r, "");
        sbx_result_free(r);
        if (streamed)
            tu_assert_bytes("the streamed stdout", g.out, g.outn, "done\n", 5);
        got_free(&g);
        cr_assert(dt >= 12.0 && dt < 16.0, "the command took %.2f s", dt);
        cr_assert_eq(keepalives_sent(), 0, "the stream was not quiet");
        json_object *log = tu_fake_log();
        cr_assert_eq(json_object_array_length(log), 1, "requests: %s",
                     json_object_to_json_string(log));
        cr_assert_eq(data_plane_count(log, "POST", "/processes/run"), 1);
        json_object_put(log);
    }
}

/* C: the quiet command's bound is its own timeout: cut at 2 s (124, timed
 * out), not run to its end, with and without an output callback. */
Test(tensorlake, case52_a_quiet_command_ends_at_its_own_timeout)
{
    g_sb = create_with(NULL);
    for (int streamed = 0; streamed < 2; streamed++) {
        got g = { 0 };
        double t0 = tu_now();
        sbx_result *r = streamed ? run_streamed("sleep 30; echo done", 2, &g)
                                 : tu_sh(g_sb, "sleep 30; echo done", 2);
        double dt = tu_now() - t0;
        cr_assert_eq(sbx_result_get_exit_code(r), 124);
        cr_assert_eq(sbx_result_is_timed_out(r), 1);
        tu_assert_stdout(r, "");
        tu_assert_stderr(r, "");
        sbx_result_free(r);
        cr_assert_eq(g.calls, 0);
        got_free(&g);
        cr_assert(dt >= 2.0 && dt < 10.0, "the command took %.2f s", dt);
    }
}

/* B: the daemon's keepalive comments every 0.5 s while the command is
 * quiet: none reaches the output, empty or not: the callback gets
 * "done\n" and nothing else, and the result too (with and without the
 * callback). */
Test(tensorlake, case52_keepalives_never_reach_the_output)
{
    g_sb = create_with(NULL);
    for (int streamed = 0; streamed < 2; streamed++) {
        tu_fake_post("/_fake/keepalive", "{\"seconds\":0.5}");
        got g = { 0 };
        sbx_result *r = streamed ? run_streamed("sleep 3; echo done", 30, &g)
                                 : tu_sh(g_sb, "sleep 3; echo done", 30);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "done\n");
        tu_assert_stderr(r, "");
        sbx_result_free(r);
        int sent = keepalives_sent();
        cr_assert(sent >= 4, "the fake sent %d keepalive comments", sent);
        if (streamed)
            tu_assert_bytes("the streamed stdout", g.out, g.outn, "done\n", 5);
        cr_assert_eq(g.errn, 0);
        cr_assert_eq(g.empty, 0, "%d empty chunks", g.empty);
        got_free(&g);
    }
}

/* The fake's "runs" of sandbox @id: how many commands it was asked to run. */
static int64_t fake_runs(const char *id)
{
    json_object *fs = fake_sandbox(id), *v;
    cr_assert(json_object_object_get_ex(fs, "runs", &v), "%s", json_object_to_json_string(fs));
    int64_t n = json_object_get_int64(v);
    json_object_put(fs);
    return n;
}

/* The fake's status of sandbox @id, copied into @buf. */
static const char *fake_status(const char *id, char *buf, size_t cap)
{
    json_object *fs = fake_sandbox(id);
    const char *s = tu_json_str(fs, "status");
    cr_assert_not_null(s, "%s", json_object_to_json_string(fs));
    snprintf(buf, cap, "%s", s);
    json_object_put(fs);
    return buf;
}

/* CASE-32: the provider lost the sandbox (404 everywhere): the next exec is
 * not_found, reason "gone", not retryable, after at most two requests (the
 * run and one confirming look); the one after fails at once with no
 * request; destroy succeeds (the provider has nothing to delete). */
Test(tensorlake, case32_a_vanished_sandbox_is_gone)
{
    g_sb = create_with(NULL);
    const char *id = sbx_sandbox_get0_id(g_sb);
    sbx_result *r = tu_sh(g_sb, "echo hi", 30);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", id);
    tu_fake_post(path, NULL);
    free(path);
    tu_fake_reset();

    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo again";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    char *want = tu_strdup_printf("tensorlake sandbox %s is gone (the provider no longer has it)",
                                  id);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    free(want);
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    size_t n = json_object_array_length(log);
    cr_assert(n >= 1 && n <= 2, "%zu requests: %s", n, json_object_to_json_string(log));
    cr_assert_eq(data_plane_count(log, "POST", "/processes/run"), 1);
    cr_assert_eq(tu_fake_count(log, "POST", "/sandboxes", NULL, 0), 0, "a new sandbox was made");
    json_object_put(log);

    tu_fake_reset();
    req.shell = "echo third";
    err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    sbx_error_free(err);
    log = tu_fake_log();
    cr_assert_eq(json_object_array_length(log), 0, "%s", json_object_to_json_string(log));
    json_object_put(log);

    err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_null(err);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
}

/* A 404 from the sandbox's own host (every /processes call) says nothing
 * of the sandbox itself: the exec fails with that 404 (not_found, not
 * "gone") after the control plane's look (a GET of the sandbox, which
 * answers running); the host's is_alive on the not_found (a second GET)
 * and the caller's say 1 (the sandbox's record is kept); destroy sends
 * its DELETE, and the fake's sandbox is terminated. */
Test(tensorlake, a_data_plane_404_is_not_gone_until_the_control_plane_says_so)
{
    g_sb = create_with(NULL);
    char *id = tu_strdup_printf("%s", sbx_sandbox_get0_id(g_sb));
    tu_fake_reset();
    tu_fake_post("/_fake/faults", "{\"path\":\"/processes\",\"status\":404,\"times\":-1,"
                 "\"body\":{\"message\":\"provider says 404\"}}");
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo hi";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_null(sbx_error_get0_context(err, "reason"), "reason %s: %s",
                   sbx_error_get0_context(err, "reason"), sbx_error_get0_message(err));
    cr_assert_not_null(strstr(sbx_error_get0_message(err), "provider says 404"), "%s",
                       sbx_error_get0_message(err));
    sbx_error_free(err);
    json_object *log = tu_fake_log();
    char *item = tu_strdup_printf("^/sandboxes/%s$", id);
    cr_assert_eq(tu_fake_count(log, "GET", item, NULL, 0), 2, "%s",
                 json_object_to_json_string(log));
    json_object_put(log);
    err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1, "is_alive: %s",
                 err ? sbx_error_get0_message(err) : "");

    tu_fake_reset();
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_null(err);
    log = tu_fake_log();
    cr_assert_eq(tu_fake_count(log, "DELETE", item, NULL, 0), 1, "%s",
                 json_object_to_json_string(log));
    json_object_put(log);
    free(item);
    char *path = tu_strdup_printf("/_fake/sandbox/%s", id);
    char *out = NULL;
    cr_assert_eq(tu_fake_http("GET", path, NULL, NULL, &out), 200);
    json_object *fs = json_tokener_parse(out ? out : "");
    cr_assert_str_eq(tu_json_str(fs, "status"), "terminated", "%s", out);
    json_object_put(fs);
    free(out);
    free(path);
    free(id);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
}

/* CASE-53: suspended by the provider (its idle timeout), the sandbox is
 * not gone: is_alive says it exists without waking it, and the next exec
 * wakes it (the provider resumes a sandbox on its data plane's traffic) and
 * sees the file written before: one run, the same sandbox, no create, no
 * delete, no resume call of the library's own. */
Test(tensorlake, case53_a_suspended_sandbox_is_woken_on_use)
{
    g_sb = create_with(NULL);
    const char *id = sbx_sandbox_get0_id(g_sb);
    char st[32];
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/keep.txt", "kept\n", 5, &err), 0,
                 "write_file: %s", err ? sbx_error_get0_message(err) : "");
    char *path = tu_strdup_printf("/_fake/sandbox/%s/suspend", id);
    tu_fake_post(path, NULL);
    free(path);
    cr_assert_str_eq(fake_status(id, st, sizeof st), "suspended");
    int64_t runs = fake_runs(id);
    tu_fake_reset();

    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1, "is_alive: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(fake_status(id, st, sizeof st), "suspended", "is_alive woke it");

    sbx_result *r = tu_sh(g_sb, "cat /work/keep.txt", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    cr_assert_str_eq(sbx_sandbox_get0_id(g_sb), id);
    cr_assert_str_eq(fake_status(id, st, sizeof st), "running");
    cr_assert_eq(fake_runs(id), runs + 1, "the command ran %lld times",
                 (long long)(fake_runs(id) - runs));
    json_object *log = tu_fake_log();
    cr_assert_eq(data_plane_count(log, "POST", "/processes/run"), 1, "%s",
                 json_object_to_json_string(log));
    cr_assert_eq(tu_fake_count(log, "POST", "/sandboxes", NULL, 0), 0);
    cr_assert_eq(tu_fake_count(log, "POST", "/sandboxes/[^/]+/resume", NULL, 0), 0);
    cr_assert_eq(tu_fake_count(log, "DELETE", "/sandboxes/.*", NULL, 0), 0);
    json_object_put(log);
}

/* CASE-53 with an explicit start: suspended by the provider, start sends
 * exactly one resume, waits for "running", and the file is kept; a start of
 * the running sandbox sends none. */
Test(tensorlake, case53_a_suspended_sandbox_is_resumed_by_start)
{
    g_sb = create_with(NULL);
    const char *id = sbx_sandbox_get0_id(g_sb);
    char st[32];
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/keep.txt", "kept\n", 5, &err), 0);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/suspend", id);
    tu_fake_post(path, NULL);
    free(path);
    tu_fake_reset();
    cr_assert_eq(sbx_sandbox_start(g_sb, &err), 0, "start: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(fake_status(id, st, sizeof st), "running");
    cr_assert_eq(sbx_sandbox_start(g_sb, &err), 0, "second start: %s",
                 err ? sbx_error_get0_message(err) : "");
    json_object *log = tu_fake_log();
    char *re = tu_strdup_printf("/sandboxes/%s/resume", id);
    cr_assert_eq(tu_fake_count(log, "POST", re, NULL, 0), 1, "%s",
                 json_object_to_json_string(log));
    cr_assert_eq(tu_fake_count(log, "POST", "/sandboxes", NULL, 0), 0);
    cr_assert_eq(tu_fake_count(log, "DELETE", "/sandboxes/.*", NULL, 0), 0);
    free(re);
    json_object_put(log);
    sbx_result *r = tu_sh(g_sb, "cat /work/keep.txt", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
}

/* ------------------------------------------------------------ CASE-19 */

/* A 429 on is_alive's read, GET /sandboxes/{id}, of a fresh sandbox
 * (testutil.c). A: Retry-After: 2 twice: the read is sent three times,
 * each after the wait the provider asked for, and succeeds. */
Test(tensorlake, case19_retry_after_seconds_is_waited_each_time)
{
    g_sb = create_with(NULL);
    tu_fake_assert_retry_after_seconds_waited(g_sb, "/sandboxes/");
}

/* B: Retry-After as the HTTP-date 3 s after the answer's Date: the retry
 * waits for it (0.5 s allowed for skew). */
Test(tensorlake, case19_retry_after_date_is_waited)
{
    g_sb = create_with(NULL);
    tu_fake_assert_retry_after_date_waited(g_sb, "/sandboxes/");
}

/* D: Retry-After: 3600 passes the wait cap (60 s): rate_limited at once,
 * retryable, the wait in the context, after one request. */
Test(tensorlake, case19_retry_after_past_the_cap_is_rate_limited_at_once)
{
    g_sb = create_with(NULL);
    tu_fake_assert_retry_after_past_the_cap_rate_limited("tensorlake", g_sb, "/sandboxes/");
}

/* E: no Retry-After: the first backoff is at least 0.5 s (no tight loop). */
Test(tensorlake, case19_without_retry_after_backs_off)
{
    g_sb = create_with(NULL);
    tu_fake_assert_backoff_without_retry_after(g_sb, "/sandboxes/");
}

/* ------------------------------------------------------------ CASE-36 */

/* The provider answers the create 401 with the key in its message: the
 * error names it [redacted], and neither it, its context, the session state
 * of a sandbox nor any request the fake logged holds the key (outside the
 * Authorization header itself, which the fake's log redacts; testutil.c). */
Test(tensorlake, case36_the_credential_is_never_shown)
{
    g_sb = create_with(NULL);
    tu_fake_assert_credential_scrubbed("tensorlake", "TENSORLAKE_API_KEY", g_client, g_sb,
                                       "/sandboxes", "Authorization");
}

/* ------------------------------------------------------------ CASE-48 */

/* Canaries in this process's environment never reach the sandbox or the
 * provider; the create's env does. */
Test(tensorlake, case48_creator_environment_never_reaches_the_sandbox)
{
    tu_fake_assert_env_canaries("tensorlake", "TENSORLAKE_API_KEY");
}

/* A relative path is under the workdir for every part of write_file: with
 * workdir /wd, rel/x is written, its mode set (644, not a chmod of rel/x
 * in another directory) and read back byte-exact, at /wd/rel/x. */
Test(tensorlake, write_file_with_a_relative_path_under_the_workdir)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, "/wd", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    static const char bytes[] = "one\0two\r\n\xff";
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "rel/x", bytes, sizeof bytes - 1, &err), 0,
                 "write_file: %s", err ? sbx_error_get0_message(err) : "");
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "rel/x", &data, &len, &err), 0, "read_file: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, sizeof bytes - 1);
    cr_assert_eq(memcmp(data, bytes, len), 0);
    free(data);
    sbx_result *r = tu_sh(g_sb, "stat -c '%a %s' /wd/rel/x", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "644 10\n");
    sbx_result_free(r);
}

/* Files through the plugin (the sandbox host's raw-byte file endpoints and
 * the base's tar path): CASE-17, list_files, HOME, CASE-45, CASE-46
 * (testutil.c). */
/* Issue 16: what the sandbox host's JSON cannot carry (a byte that is not
 * UTF-8 in an argument, the shell command, an env value, the cwd; a path
 * of write_file, whose chmod is a command) is invalid_argument naming the
 * part, before anything is sent (testutil.c). */
Test(tensorlake, text_json_cannot_carry_is_refused_before_sending)
{
    g_sb = create_with(NULL);
    tu_json_text_refused("tensorlake", g_sb, TU_TEXT_WRITE);
}

Test(tensorlake, files_case17_all_byte_values_round_trip)
{
    g_sb = create_with(NULL);
    tu_files_case17(g_sb);
}

Test(tensorlake, files_list_files_gives_exact_entries)
{
    g_sb = create_with(NULL);
    tu_files_list_exact(g_sb);
}

Test(tensorlake, files_home_is_a_writable_directory)
{
    g_sb = create_with(NULL);
    tu_files_home_is_writable(g_sb);
}

Test(tensorlake, files_case45_uploads_belong_to_the_exec_user)
{
    g_sb = create_with(NULL);
    tu_files_case45(g_sb);
}

Test(tensorlake, files_case46_cwd_holds_for_every_part)
{
    g_sb = create_with(NULL);
    tu_files_case46(g_sb);
}
