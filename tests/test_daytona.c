/*
 * test_daytona.c — the daytona backend against scripted faults of its
 * contract fake (tests/fakes/daytona.py): CASE-19 (429 with and without
 * Retry-After), 5xx bursts on a read (retried) and on an unsafe call
 * (never re-sent, outcome unknown), CASE-32 (a sandbox deleted behind the
 * library's back is not_found "gone"), CASE-53 (a stopped sandbox is
 * started on use; an errored one names its state), CASE-36 (the
 * credential is never in an error, the session state or the fake's log
 * outside the header), CASE-20 (a create answered after the client's
 * timeout leaves no sandbox: found by its create token and deleted) and a
 * storm of 100 async creates against a provider that takes 5 at a time
 * (the fake's "concurrency" rule): all succeed, with backoff that grows.
 *
 * Run by tests/daytona.sh, which starts the fake and sets DAYTONA_API_URL
 * (http://127.0.0.1:PORT/api) and DAYTONA_API_KEY. The fake's control
 * routes (/_fake/...) are on the same port. Each test clears the fake's
 * request log and faults first and reads the log to count requests.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sbx/sbx.h>

#include "testutil.h"

static sbx_client *g_client;
static sbx_sandbox *g_sb;
static int g_port;

/* ------------------------------------------------------------ the fake */

/* One HTTP/1.1 request to the fake's port (Connection: close): the status,
 * and the body in *@out (malloc()ed, NUL-terminated; may be NULL). */
static int fake_http(const char *method, const char *path, const char *body, char **out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g_port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect to the fake: %s",
                 strerror(errno));
    char *req = tu_strdup_printf("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                 method, path, body ? strlen(body) : 0, body ? body : "");
    size_t len = strlen(req), off = 0;
    while (off < len) {
        ssize_t w = write(fd, req + off, len - off);
        cr_assert(w > 0, "write to the fake: %s", strerror(errno));
        off += (size_t)w;
    }
    free(req);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + n, cap - n - 1);
        cr_assert(r >= 0, "read from the fake: %s", strerror(errno));
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    int status = 0;
    cr_assert_eq(sscanf(buf, "HTTP/1.%*d %d", &status), 1, "not HTTP: %.80s", buf);
    char *b = strstr(buf, "\r\n\r\n");
    if (out)
        *out = b ? strdup(b + 4) : NULL;
    free(buf);
    return status;
}

static void fake_post(const char *path, const char *body)
{
    int st = fake_http("POST", path, body, NULL);
    cr_assert(st == 204 || st == 200, "POST %s: %d", path, st);
}

static void fake_reset(void)
{
    cr_assert_eq(fake_http("DELETE", "/_fake/faults", NULL, NULL), 204);
    cr_assert_eq(fake_http("DELETE", "/_fake/log", NULL, NULL), 204);
}

/* The fake's request log, parsed (json_object_put() it). */
static json_object *fake_log(void)
{
    char *body = NULL;
    cr_assert_eq(fake_http("GET", "/_fake/log", NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    cr_assert(j && json_object_is_type(j, json_type_array), "log: %s", body);
    free(body);
    return j;
}

static const char *jstr(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : NULL;
}

/* The entries of @log with @method whose path matches @re (extended, whole
 * path): how many, and the times of the first two in @t (may be NULL). */
static int log_count(json_object *log, const char *method, const char *re, double *t)
{
    regex_t rx;
    char *anchored = tu_strdup_printf("^%s$", re);
    cr_assert_eq(regcomp(&rx, anchored, REG_EXTENDED | REG_NOSUB), 0, "regex %s", anchored);
    free(anchored);
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i);
        if (strcmp(jstr(e, "method"), method) != 0 || regexec(&rx, jstr(e, "path"), 0, NULL, 0))
            continue;
        json_object *tv;
        if (t && n < 2 && json_object_object_get_ex(e, "time", &tv))
            t[n] = json_object_get_double(tv);
        n++;
    }
    regfree(&rx);
    return n;
}

/* ------------------------------------------------------------ fixtures */

static void setup(void)
{
    const char *url = getenv("DAYTONA_API_URL");
    cr_assert(url && sscanf(url, "http://127.0.0.1:%d/api", &g_port) == 1,
              "DAYTONA_API_URL (%s) is not the fake's http://127.0.0.1:PORT/api: run "
              "tests/daytona.sh", url ? url : "unset");
    cr_assert_str_eq(tu_backend(), "daytona");
    sbx_error *err = NULL;
    g_client = sbx_client_new("daytona", &err);
    cr_assert_not_null(g_client, "client: %s", err ? sbx_error_get0_message(err) : "");
    g_sb = tu_create(g_client, NULL);
    fake_reset();
}

static void teardown(void)
{
    if (g_port)
        fake_reset();
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

/* A 429 on a read waits the Retry-After it names, then the read is sent
 * again and succeeds: two GETs, at least 1 s apart as the fake saw them. */
Test(daytona_faults, case19_429_with_retry_after_is_honoured)
{
    char *rule = tu_strdup_printf("{\"method\":\"GET\",\"path\":\"^/api/sandbox/%s$\","
                                  "\"status\":429,\"retry_after\":\"1\"}", sb_id());
    fake_post("/_fake/faults", rule);
    free(rule);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1, "is_alive: %s",
                 err ? sbx_error_get0_message(err) : "");
    json_object *log = fake_log();
    char *re = tu_strdup_printf("/api/sandbox/%s", sb_id());
    double t[2] = { 0, 0 };
    cr_assert_eq(log_count(log, "GET", re, t), 2);
    cr_assert(t[1] - t[0] >= 1.0, "the retry came %.3f s after the 429", t[1] - t[0]);
    free(re);
    json_object_put(log);
}

/* Without Retry-After the first backoff is at least 0.5 s (no tight loop). */
Test(daytona_faults, case19_429_without_retry_after_backs_off)
{
    char *rule = tu_strdup_printf("{\"method\":\"GET\",\"path\":\"^/api/sandbox/%s$\","
                                  "\"status\":429}", sb_id());
    fake_post("/_fake/faults", rule);
    free(rule);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
    json_object *log = fake_log();
    char *re = tu_strdup_printf("/api/sandbox/%s", sb_id());
    double t[2] = { 0, 0 };
    cr_assert_eq(log_count(log, "GET", re, t), 2);
    cr_assert(t[1] - t[0] >= 0.5, "the retry came %.3f s after the 429", t[1] - t[0]);
    free(re);
    json_object_put(log);
}

/* A Retry-After past the wait cap (60 s) fails at once: rate_limited,
 * retryable, retry_after_s in the context, one request. */
Test(daytona_faults, case19_429_with_an_hour_is_rate_limited_at_once)
{
    char *rule = tu_strdup_printf("{\"method\":\"GET\",\"path\":\"^/api/sandbox/%s$\","
                                  "\"status\":429,\"retry_after\":\"3600\"}", sb_id());
    fake_post("/_fake/faults", rule);
    free(rule);
    sbx_error *err = NULL;
    double t0 = tu_now();
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), -1);
    cr_assert(tu_now() - t0 < 30.0, "it waited");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_RATE_LIMITED);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_str_eq(sbx_error_get0_backend(err), "daytona");
    cr_assert_str_eq(sbx_error_get0_op(err), "is_alive");
    const char *ra = sbx_error_get0_context(err, "retry_after_s");
    cr_assert(ra && atof(ra) == 3600.0, "retry_after_s: %s", ra ? ra : "(none)");
    sbx_error_free(err);
    json_object *log = fake_log();
    char *re = tu_strdup_printf("/api/sandbox/%s", sb_id());
    cr_assert_eq(log_count(log, "GET", re, NULL), 1);
    free(re);
    json_object_put(log);
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
    fake_post("/_fake/faults", rule);
    free(rule);
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/work/r.txt", &data, &len, &err), 0,
                 "read_file: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 8);
    cr_assert_eq(memcmp(data, "read me\n", 8), 0);
    free(data);
    json_object *log = fake_log();
    cr_assert_eq(log_count(log, "GET", re, NULL), 3);
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
    fake_post("/_fake/faults", rule);
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
    json_object *log = fake_log();
    cr_assert_eq(log_count(log, "POST", re, NULL), 1);
    free(re);
    json_object_put(log);
    /* The sandbox works on. */
    r = tu_sh(g_sb, "echo after", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "after\n");
    sbx_result_free(r);
}

/* ------------------------------------------------------------ CASE-32 */

/* Deleted behind the library's back: the next exec is not_found "gone",
 * not retryable, after one request; the one after fails at once with no
 * request; destroy succeeds without one. */
Test(daytona_faults, case32_a_vanished_sandbox_is_gone)
{
    sbx_result *r = tu_sh(g_sb, "echo hi", 10);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/vanish", sb_id());
    fake_post(path, NULL);
    free(path);
    fake_reset();

    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo again";
    sbx_error *err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    char *want = tu_strdup_printf("daytona sandbox %s is gone (the provider no longer has it)",
                                  sb_id());
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    free(want);
    sbx_error_free(err);
    json_object *log = fake_log();
    cr_assert_eq(json_object_array_length(log), 1, "%s",
                 json_object_to_json_string(log));
    json_object_put(log);

    req.shell = "echo third";
    err = tu_exec_fail(g_sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "gone");
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(g_sb, &err), 0);
    cr_assert_null(err);
    log = fake_log();
    cr_assert_eq(json_object_array_length(log), 1, "%s", json_object_to_json_string(log));
    json_object_put(log);
}

/* ------------------------------------------------------------ CASE-53 */

/* Stopped by the provider: is_alive still says it exists; the exec starts
 * it (one start request, no create, no delete) and sees its file. */
Test(daytona_faults, case53_a_stopped_sandbox_is_started_on_use)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/work/keep.txt", "kept\n", 5, &err), 0);
    char *path = tu_strdup_printf("/_fake/sandbox/%s/state", sb_id());
    fake_post(path, "{\"state\":\"stopped\"}");
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, &err), 1);
    fake_reset();
    sbx_result *r = tu_sh(g_sb, "cat /work/keep.txt", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    json_object *log = fake_log();
    char *re = tu_strdup_printf("/api/sandbox/%s/start", sb_id());
    cr_assert_eq(log_count(log, "POST", re, NULL), 1);
    cr_assert_eq(log_count(log, "POST", "/api/sandbox", NULL), 0);
    cr_assert_eq(log_count(log, "DELETE", "/api/sandbox/.*", NULL), 0);
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
    fake_post(path, "{\"state\":\"starting\",\"after\":1}");
    free(path);
    fake_reset();
    sbx_result *r = tu_sh(g_sb, "cat /work/keep.txt", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    json_object *log = fake_log();
    cr_assert_eq(log_count(log, "POST", "/api/sandbox/.*/start", NULL), 0);
    cr_assert(log_count(log, "GET", "/api/sandbox/[^/]+", NULL) >= 1, "the state was not read");
    json_object_put(log);
}

/* In state error: no start request, and an error carrying the state (in
 * its context) and the provider's errorReason (in its message); not
 * not_found. */
Test(daytona_faults, case53_an_errored_sandbox_names_its_state)
{
    char *path = tu_strdup_printf("/_fake/sandbox/%s/state", sb_id());
    fake_post(path, "{\"state\":\"error\",\"errorReason\":\"disk quota exceeded\"}");
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
    json_object *log = fake_log();
    cr_assert_eq(log_count(log, "POST", "/api/sandbox/.*/start", NULL), 0);
    json_object_put(log);
    cr_assert_eq(sbx_sandbox_is_alive(g_sb, NULL), 1);
}

/* ------------------------------------------------------------ CASE-36 */

/* The provider echoes the credential in its 401: the error the library
 * gives holds no trace of it; neither do the session state nor the fake's
 * log (where the header reads "Bearer <redacted>"). */
Test(daytona_faults, case36_the_credential_is_never_shown)
{
    const char *key = getenv("DAYTONA_API_KEY");
    cr_assert(key && strlen(key) >= 8);
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"^/api/sandbox$\",\"status\":401,"
                                  "\"body\":{\"statusCode\":401,\"message\":\"invalid key %s\"}}",
                                  key);
    fake_post("/_fake/faults", rule);
    free(rule);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, NULL, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_AUTHENTICATION, "%s",
                 sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "create the sandbox: invalid key [redacted] (HTTP 401)");
    char *s = sbx_error_to_string(err);
    cr_assert(strstr(s, key) == NULL, "the error shows the key: %s", s);
    for (size_t i = 0; i < sbx_error_get_context_count(err); i++) {
        const char *k, *v;
        cr_assert_eq(sbx_error_get0_context_at(err, i, &k, &v), 0);
        cr_assert(strstr(v, key) == NULL, "context %s shows the key", k);
    }
    free(s);
    sbx_error_free(err);
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state);
    cr_assert(strstr(state, key) == NULL, "the session state holds the key: %s", state);
    free(state);
    sbx_result *r = tu_sh(g_sb, "echo fine", 10);
    tu_assert_stdout(r, "fine\n");
    sbx_result_free(r);
    json_object *log = fake_log();
    const char *text = json_object_to_json_string(log);
    cr_assert(strstr(text, key) == NULL, "the fake's log holds the key");
    cr_assert(json_object_array_length(log) >= 2);
    json_object *first = json_object_array_get_idx(log, 0);
    cr_assert_str_eq(jstr(first, "auth"), "Bearer <redacted>");
    json_object_put(log);
}

/* ------------------------------------------------------------ CASE-20 */

/* How many sandboxes the fake holds. */
static size_t fake_sandbox_count(void)
{
    char *body = NULL;
    cr_assert_eq(fake_http("GET", "/_fake/sandboxes", NULL, &body), 200);
    json_object *j = json_tokener_parse(body);
    cr_assert(j && json_object_is_type(j, json_type_array), "%s", body);
    size_t n = json_object_array_length(j);
    json_object_put(j);
    free(body);
    return n;
}

/* The create's answer comes 5 s after the client's create_timeout (1 s):
 * create fails with timeout and outcome unknown before the answer, after
 * one POST; the sandbox the fake then makes is found by its create token
 * (a labels query) and deleted, so the fake holds what it held before. */
Test(daytona_faults, case20_a_create_answered_too_late_leaves_nothing)
{
    size_t before = fake_sandbox_count();
    fake_post("/_fake/faults", "{\"method\":\"POST\",\"path\":\"^/api/sandbox$\","
                               "\"action\":\"pass\",\"delay\":5}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"create_timeout\":1}", NULL), 0);
    sbx_error *err = NULL;
    double t0 = tu_now();
    cr_assert_null(sbx_sandbox_create(g_client, o, &err), "the late create succeeded");
    double dt = tu_now() - t0;
    sbx_options_free(o);
    cr_assert(dt < 5.0, "create waited %.2f s, past the provider's answer", dt);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_TIMEOUT, "%s", sbx_error_get0_message(err));
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    sbx_error_free(err);
    /* The fake makes the sandbox when it answers, 5 s after the POST; the
     * reaper looks once a second. */
    double end = tu_now() + 20.0;
    int deleted = 0;
    while (tu_now() < end && !deleted) {
        json_object *log = fake_log();
        deleted = log_count(log, "DELETE", "/api/sandbox/[^/]+", NULL) == 1;
        json_object_put(log);
        if (!deleted)
            usleep(200000);
    }
    cr_assert(deleted, "the late sandbox was not deleted");
    cr_assert_eq(fake_sandbox_count(), before);
    json_object *log = fake_log();
    cr_assert_eq(log_count(log, "POST", "/api/sandbox", NULL), 1);
    cr_assert(log_count(log, "GET", "/api/sandbox", NULL) >= 1, "no look-up by token");
    int by_token = 0;
    for (size_t i = 0; i < json_object_array_length(log); i++) {
        json_object *e = json_object_array_get_idx(log, i), *q, *l;
        if (strcmp(jstr(e, "path"), "/api/sandbox") == 0 && strcmp(jstr(e, "method"), "GET") == 0
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
 * up to 8 times, after full-jitter waits below 0.5, 1, 2, 4, 8, 8, 8, 8 s. */
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
    json_object *b = json_tokener_parse(jstr(entry, "body"));
    json_object *labels, *t;
    cr_assert(b && json_object_object_get_ex(b, "labels", &labels)
              && json_object_object_get_ex(labels, "sbx_create_token", &t),
              "a create without a token: %s", jstr(entry, "body"));
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
 * before the k-th re-send grows with k (full jitter below 0.5 s, then
 * below 1 s, 2 s: means near 0.25, 0.5, 1 s, each plus the same request
 * latency), compared while at least 10 tokens were re-sent k times (the
 * standard deviation of such a mean is then at most a quarter of the step
 * to the next; k = 1 and 2 always have more: most tokens are refused
 * twice). The fake's creates take as long as they take (a real sandbox
 * each), so the storm lasts some seconds. Then 100 destroys, and the fake
 * holds only the fixture's sandbox. */
Test(daytona_faults, storm_100_creates_5_at_a_time_slow, .timeout = 180)
{
    char *rule = tu_strdup_printf("{\"method\":\"POST\",\"path\":\"^/api/sandbox$\","
                                  "\"concurrency\":%d}", STORM_AT_ONCE);
    fake_post("/_fake/faults", rule);
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
    cr_assert_eq(fake_http("GET", "/_fake/faults", NULL, &body), 200);
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
    json_object *log = fake_log();
    size_t n = json_object_array_length(log);
    char *tokens[STORM_N];
    int ntok = 0, attempts[STORM_N] = { 0 }, ok[STORM_N] = { 0 }, posts = 0, n429 = 0;
    double times[STORM_N][STORM_RATE_LIMIT_RETRIES + 1];
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(log, i), *st, *tv;
        if (strcmp(jstr(e, "method"), "POST") != 0 || strcmp(jstr(e, "path"), "/api/sandbox"))
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
    fake_reset();
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
    cr_assert_eq(fake_http("GET", "/_fake/sandboxes", NULL, &ids), 200);
    char *want = tu_strdup_printf("[\"%s\"]", sb_id());
    cr_assert_str_eq(ids, want);
    free(want);
    free(ids);
    log = fake_log();
    cr_assert_eq(log_count(log, "DELETE", "/api/sandbox/[^/]+", NULL), STORM_N);
    json_object_put(log);
}
