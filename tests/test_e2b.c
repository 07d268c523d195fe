/*
 * test_e2b.c — what the e2b backend does beyond the backend-neutral suites,
 * through the E2B contract fake (tests/fakes/e2b.py, started by
 * tests/e2b.sh, which sets E2B_API_URL): a sandbox that vanished is a
 * distinct "gone" error (CASE-32); resume never shortens the provider's
 * lifetime (CASE-33); a paused sandbox is woken by the next call, its files
 * kept (CASE-53 F); stop pauses and start resumes. The fake's test routes
 * (/_fake/sandbox/{id}, .../vanish) show and change the provider's side.
 */
#include <criterion/criterion.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    sbx_error *err = NULL;
    g_client = sbx_client_new("e2b", &err);
    cr_assert_not_null(g_client, "%s", err ? sbx_error_get0_message(err) : "");
    g_sb = NULL;
}

static void teardown(void)
{
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
    }
    sbx_client_free(g_client);
}

TestSuite(e2b, .init = setup, .fini = teardown, .timeout = 90);

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    char **buf = ud;
    size_t old = *buf ? strlen(*buf) : 0;
    char *nb = realloc(*buf, old + size * n + 1);
    cr_assert_not_null(nb);
    memcpy(nb + old, p, size * n);
    nb[old + size * n] = '\0';
    *buf = nb;
    return size * n;
}

/* A request to the fake's test route @path: its status, the body in *@body
 * (or freed when @body is NULL). */
static long fake_call_body(const char *method, const char *path, const char *data,
                           char **body)
{
    const char *api = getenv("E2B_API_URL");
    cr_assert_not_null(api, "E2B_API_URL is not set (run through tests/e2b.sh)");
    char *url = tu_strdup_printf("%s%s", api, path);
    char *buf = NULL;
    CURL *h = curl_easy_init();
    cr_assert_not_null(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    struct curl_slist *hdrs = NULL;
    char *key = tu_strdup_printf("X-API-Key: %s", getenv("E2B_API_KEY") ? getenv("E2B_API_KEY")
                                                                        : "");
    hdrs = curl_slist_append(hdrs, key);
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (strcmp(method, "POST") == 0)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, data ? data : "");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    cr_assert_eq(curl_easy_perform(h), CURLE_OK, "%s %s", method, url);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    free(key);
    free(url);
    if (body)
        *body = buf;
    else
        free(buf);
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

/* CASE-32: the provider dropped the sandbox: not_found, reason "gone", not
 * retryable, at once for the next call too; destroy succeeds. */
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
    char *body = NULL;
    cr_assert_eq(fake_call("GET", "/v2/sandboxes", &body), 200, "%s", body ? body : "");
    json_object *j = json_tokener_parse(body);
    cr_assert(j && json_object_is_type(j, json_type_array), "%s", body);
    size_t n = json_object_array_length(j);
    json_object_put(j);
    free(body);
    return n;
}

/* CASE-20: a create answered after the call's deadline made a sandbox; the
 * plugin finds it by its create token and deletes it. In process, calls are
 * not bounded (sbx_client_set_call_timeout): the create waits for the late
 * answer and succeeds. */
Test(e2b, late_create_is_deleted)
{
    size_t n0 = fake_live();
    cr_assert_eq(fake_call_body("POST", "/_fake/hold_create", "{\"seconds\":4}", NULL), 204);
    cr_assert_eq(sbx_client_set_call_timeout(g_client, 1.0, NULL), 0);
    const char *mode = getenv("SBX_PLUGIN_MODE");
    int inprocess = mode && strcmp(mode, "inprocess") == 0;
    double t0 = tu_now();
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, NULL, &err);
    double dt = tu_now() - t0;
    if (inprocess) {
        cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
        cr_assert(dt >= 4.0, "the create returned after %.2f s", dt);
        cr_assert_eq(fake_live(), n0 + 1);
        cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
        sbx_sandbox_free(sb);
        cr_assert_eq(fake_live(), n0);
        return;
    }
    cr_assert_null(sb);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    cr_assert(dt < 4.0, "the create returned after %.2f s", dt);
    sbx_error_free(err);
    size_t live = n0 + 1;
    for (int i = 0; i < 100 && (live = fake_live()) != n0; i++)
        usleep(100000);
    cr_assert_eq(live, n0, "the late sandbox was not deleted within 10 s");
}
