/*
 * test_cloud_base.c — the hosted-provider base (plugins/cloud/base/), linked
 * in: the streaming readers fed sample streams split at every point (and
 * byte by byte), Retry-After in both forms, the status mapping, the shell
 * script of a command with a cwd (CASE-46), base64 and JSON helpers.
 * Errors are looked at through cl_last() (no host is loaded here).
 */
#include "cloud.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

/* ------------------------------------------------------------------------ */
/* SSE                                                                       */
/* ------------------------------------------------------------------------ */

typedef struct rec {
    char log[4096];     /* what the callback saw, one record per frame */
    int frames;
} rec;

static int sse_cb(void *ud, const char *event, const char *data, size_t n, const char *id)
{
    rec *r = ud;
    size_t l = strlen(r->log);
    snprintf(r->log + l, sizeof(r->log) - l, "[%s|%.*s|%s]", event, (int)n, data,
             id ? id : "-");
    r->frames++;
    return strcmp(event, "exit") == 0 ? 1 : 0;
}

/* Feeds @s split at @cut (and byte by byte when @cut < 0). */
static int feed_sse(const char *s, size_t n, long cut, rec *r, int *end_rc)
{
    cl_sse p;
    memset(r, 0, sizeof(*r));
    cl_sse_init(&p, sse_cb, r);
    int rc = 0;
    if (cut < 0) {
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = cl_sse_feed(&p, s + i, 1, "exec", NULL);
    } else {
        rc = cl_sse_feed(&p, s, (size_t)cut, "exec", NULL);
        if (rc == 0)
            rc = cl_sse_feed(&p, s + cut, n - (size_t)cut, "exec", NULL);
    }
    *end_rc = cl_sse_end(&p, "exec", NULL);
    cl_sse_clear(&p);
    return rc;
}

static const char sse_sample[] =
    ": keepalive\r\n"
    "\r\n"
    "event: stdout\n"
    "data: hel\n"
    "data: lo\n"
    "id: 7\n"
    "\n"
    ":ping\n"
    "\n"
    "retry: 100\n"
    "data:no space\r"
    "\r"
    "event: stderr\r\n"
    "data: x: y\r\n"
    "\r\n"
    "event: exit\n"
    "data: {\"exit_code\":3}\n"
    "\n"
    "event: stdout\n"
    "data: after the end\n"
    "\n";

static const char sse_expect[] =
    "[stdout|hel\nlo|7][message|no space|7][stderr|x: y|7][exit|{\"exit_code\":3}|7]";

Test(sse, every_split_point)
{
    size_t n = strlen(sse_sample);
    for (long cut = -1; cut <= (long)n; cut++) {
        rec r;
        int end_rc;
        cr_assert_eq(feed_sse(sse_sample, n, cut, &r, &end_rc), 0, "cut %ld", cut);
        cr_assert_str_eq(r.log, sse_expect, "cut %ld", cut);
        cr_assert_eq(r.frames, 4, "cut %ld", cut);
        cr_assert_eq(end_rc, 0, "cut %ld", cut);
    }
}

Test(sse, cut_before_final_frame_is_an_error)
{
    /* Every prefix that stops before the exit event's blank line. */
    const char *final = strstr(sse_sample, "event: exit");
    size_t upto = (size_t)(final - sse_sample) + strlen("event: exit\ndata: {\"exit_code\":3}\n");
    for (size_t n = 0; n < upto; n++) {
        rec r;
        int end_rc;
        cr_assert_eq(feed_sse(sse_sample, n, -1, &r, &end_rc), 0);
        cr_assert_eq(end_rc, -1, "a stream cut at %zu passed for complete", n);
        cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
        cr_assert(strstr(cl_last()->msg, "ended before its final frame"), "%s", cl_last()->msg);
    }
}

Test(sse, keepalives_only_reach_nothing)
{
    const char s[] = ":a\n\n: b\r\n\r\n\n\n";
    rec r;
    int end_rc;
    cr_assert_eq(feed_sse(s, strlen(s), -1, &r, &end_rc), 0);
    cr_assert_eq(r.frames, 0);
    cr_assert_str_eq(r.log, "");
    cr_assert_eq(end_rc, -1);
}

/* ------------------------------------------------------------------------ */
/* NDJSON                                                                    */
/* ------------------------------------------------------------------------ */

static int nd_cb(void *ud, json_object *o)
{
    rec *r = ud;
    size_t l = strlen(r->log);
    snprintf(r->log + l, sizeof(r->log) - l, "[%s]",
             json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    r->frames++;
    return cl_json_str(o, "exit") ? 1 : 0;
}

static const char nd_sample[] =
    "{\"out\":\"a\\nb\"}\n"
    "\n"
    "   \r\n"
    "{\"err\":\"\\u00e9\",\"n\":12345678901}\r\n"
    "[1,2]\n"
    "{\"exit\":\"0\"}\n"
    "{\"out\":\"late\"}\n";

static const char nd_expect[] =
    "[{\"out\":\"a\\nb\"}][{\"err\":\"\xc3\xa9\",\"n\":12345678901}][[1,2]][{\"exit\":\"0\"}]";

Test(ndjson, every_split_point)
{
    size_t n = strlen(nd_sample);
    for (long cut = -1; cut <= (long)n; cut++) {
        cl_ndjson p;
        rec r;
        memset(&r, 0, sizeof(r));
        cl_ndjson_init(&p, nd_cb, &r);
        int rc = 0;
        if (cut < 0) {
            for (size_t i = 0; i < n && rc == 0; i++)
                rc = cl_ndjson_feed(&p, nd_sample + i, 1, "exec", NULL);
        } else {
            rc = cl_ndjson_feed(&p, nd_sample, (size_t)cut, "exec", NULL);
            if (rc == 0)
                rc = cl_ndjson_feed(&p, nd_sample + cut, n - (size_t)cut, "exec", NULL);
        }
        cr_assert_eq(rc, 0, "cut %ld: %s", cut, cl_last()->msg);
        cr_assert_eq(cl_ndjson_end(&p, "exec", NULL), 0, "cut %ld", cut);
        cr_assert_str_eq(r.log, nd_expect, "cut %ld: %s", cut, r.log);
        cl_ndjson_clear(&p);
    }
}

Test(ndjson, bad_line_and_cut_stream)
{
    cl_ndjson p;
    rec r = { .frames = 0 };
    memset(&r, 0, sizeof(r));
    cl_ndjson_init(&p, nd_cb, &r);
    cr_assert_eq(cl_ndjson_feed(&p, "{\"a\":1}\n{\"b\":", 13, "exec", NULL), 0);
    cr_assert_eq(cl_ndjson_feed(&p, " tru}\n", 6, "exec", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert(strstr(cl_last()->msg, "not JSON: {\"b\": tru}"), "%s", cl_last()->msg);
    cl_ndjson_clear(&p);

    /* No final frame: an error, also when the last line is complete. */
    memset(&r, 0, sizeof(r));
    cl_ndjson_init(&p, nd_cb, &r);
    cr_assert_eq(cl_ndjson_feed(&p, "{\"out\":\"x\"}\n{\"out\":\"y\"}", 23, "exec", NULL), 0);
    cr_assert_eq(cl_ndjson_end(&p, "exec", NULL), -1);
    cr_assert_eq(r.frames, 2);
    cl_ndjson_clear(&p);

    /* A final line without its newline counts. */
    memset(&r, 0, sizeof(r));
    cl_ndjson_init(&p, nd_cb, &r);
    cr_assert_eq(cl_ndjson_feed(&p, "{\"exit\":\"1\"}", 12, "exec", NULL), 0);
    cr_assert_eq(cl_ndjson_end(&p, "exec", NULL), 0);
    cr_assert_eq(r.frames, 1);
    cl_ndjson_clear(&p);
}

/* ------------------------------------------------------------------------ */
/* Connect envelopes                                                         */
/* ------------------------------------------------------------------------ */

static int cn_cb(void *ud, unsigned flags, const char *p, size_t n)
{
    rec *r = ud;
    size_t l = strlen(r->log);
    cr_assert_eq(p[n], '\0', "message not NUL-terminated");
    snprintf(r->log + l, sizeof(r->log) - l, "[%u|%zu|%s]", flags, n, p);
    r->frames++;
    return flags & CL_CONNECT_END_STREAM ? 1 : 0;
}

static void connect_sample(cl_buf *b)
{
    const char *msgs[] = {
        "{\"event\":{\"start\":{\"pid\":\"42\"}}}",
        "{\"event\":{\"keepalive\":{}}}",
        "{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}",
        "",
        "{\"event\":{\"end\":{\"exited\":true,\"status\":\"exit status 0\"}}}",
    };
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(cl_connect_envelope(msgs[i], strlen(msgs[i]), 0, b), 0);
    cr_assert_eq(cl_connect_envelope("{}", 2, CL_CONNECT_END_STREAM, b), 0);
    cr_assert_eq(cl_connect_envelope("{\"x\":1}", 7, 0, b), 0);    /* after the end */
}

static const char cn_expect[] =
    "[0|32|{\"event\":{\"start\":{\"pid\":\"42\"}}}]"
    "[0|26|{\"event\":{\"keepalive\":{}}}]"
    "[0|36|{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}]"
    "[0|0|]"
    "[0|58|{\"event\":{\"end\":{\"exited\":true,\"status\":\"exit status 0\"}}}]"
    "[2|2|{}]";

Test(connect, every_split_point)
{
    cl_buf s = { 0 };
    connect_sample(&s);
    for (long cut = -1; cut <= (long)s.len; cut++) {
        cl_connect p;
        rec r;
        memset(&r, 0, sizeof(r));
        cl_connect_init(&p, cn_cb, &r);
        int rc = 0;
        if (cut < 0) {
            for (size_t i = 0; i < s.len && rc == 0; i++)
                rc = cl_connect_feed(&p, s.data + i, 1, "exec", NULL);
        } else {
            rc = cl_connect_feed(&p, s.data, (size_t)cut, "exec", NULL);
            if (rc == 0)
                rc = cl_connect_feed(&p, s.data + cut, s.len - (size_t)cut, "exec", NULL);
        }
        cr_assert_eq(rc, 0, "cut %ld", cut);
        cr_assert_eq(cl_connect_end(&p, "exec", NULL), 0, "cut %ld", cut);
        cr_assert_str_eq(r.log, cn_expect, "cut %ld: %s", cut, r.log);
        cl_connect_clear(&p);
    }
    cl_buf_clear(&s);
}

Test(connect, cut_before_end_stream_is_an_error)
{
    cl_buf s = { 0 };
    connect_sample(&s);
    size_t end_at = s.len - (5 + 7);    /* through the end-of-stream envelope */
    for (size_t n = 0; n < end_at; n++) {
        cl_connect p;
        rec r;
        memset(&r, 0, sizeof(r));
        cl_connect_init(&p, cn_cb, &r);
        cr_assert_eq(cl_connect_feed(&p, s.data, n, "exec", NULL), 0);
        cr_assert_eq(cl_connect_end(&p, "exec", NULL), -1, "cut at %zu passed", n);
        cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
        cl_connect_clear(&p);
    }
    cl_buf_clear(&s);
}

Test(connect, compressed_and_oversized_refused)
{
    cl_connect p;
    rec r;
    memset(&r, 0, sizeof(r));
    cl_connect_init(&p, cn_cb, &r);
    cr_assert_eq(cl_connect_feed(&p, "\x01\0\0\0\x01x", 6, "exec", NULL), -1);
    cr_assert(strstr(cl_last()->msg, "compressed"), "%s", cl_last()->msg);
    cl_connect_clear(&p);
    cl_connect_init(&p, cn_cb, &r);
    p.max_len = 10;
    cr_assert_eq(cl_connect_feed(&p, "\0\0\0\0\x0b", 5, "exec", NULL), -1);
    cr_assert(strstr(cl_last()->msg, "11 bytes (at most 10)"), "%s", cl_last()->msg);
    cl_connect_clear(&p);
    cr_assert_eq(r.frames, 0);
}

Test(connect, end_stream_errors_map_to_codes)
{
    cl_http *h = cl_http_new();
    cr_assert_eq(cl_http_set_auth(h, "X-API-Key", "e2b_TESTSECRET_0123456789abcdef"), 0);
    struct { const char *json; sbx_error_code code; } cases[] = {
        { "{\"error\":{\"code\":\"deadline_exceeded\",\"message\":\"too slow\"}}", SBX_ERROR_TIMEOUT },
        { "{\"code\":\"not_found\",\"message\":\"no process\"}", SBX_ERROR_NOT_FOUND },
        { "{\"code\":\"unauthenticated\",\"message\":\"key e2b_TESTSECRET_0123456789abcdef\"}",
          SBX_ERROR_AUTHENTICATION },
        { "{\"code\":\"resource_exhausted\"}", SBX_ERROR_RATE_LIMITED },
        { "{\"code\":\"unavailable\"}", SBX_ERROR_CONNECTION },
        { "{\"code\":\"invalid_argument\"}", SBX_ERROR_CONFIGURATION },
        { "{\"code\":\"internal\"}", SBX_ERROR_EXECUTION_FAILED },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_object *j = json_tokener_parse(cases[i].json);
        cr_assert_eq(cl_connect_error(h, j, "exec", "run", NULL), 1, "%s", cases[i].json);
        cr_assert_eq(cl_last()->code, cases[i].code, "%s", cases[i].json);
        cr_assert_null(strstr(cl_last()->msg, "TESTSECRET"), "%s", cl_last()->msg);
        json_object_put(j);
    }
    json_object *ok = json_tokener_parse("{}");
    cr_assert_eq(cl_connect_error(h, ok, "exec", "run", NULL), 0);
    json_object_put(ok);
    cl_http_free(h);
}

/* ------------------------------------------------------------------------ */
/* HTTP helpers                                                              */
/* ------------------------------------------------------------------------ */

Test(http, retry_after_both_forms)
{
    double now = 784111777.0;   /* Sun, 06 Nov 1994 08:49:37 GMT */
    cr_assert_float_eq(cl_parse_retry_after("2", now), 2.0, 1e-9);
    cr_assert_float_eq(cl_parse_retry_after(" 3600 ", now), 3600.0, 1e-9);
    cr_assert_float_eq(cl_parse_retry_after("Sun, 06 Nov 1994 08:49:40 GMT", now), 3.0, 1e-9);
    cr_assert_float_eq(cl_parse_retry_after("Sunday, 06-Nov-94 08:49:47 GMT", now), 10.0, 1e-9);
    cr_assert_float_eq(cl_parse_retry_after("Sun Nov  6 08:49:38 1994", now), 1.0, 1e-9);
    /* In the past: no wait. */
    cr_assert_float_eq(cl_parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now), 0.0, 1e-9);
    cr_assert_eq(cl_parse_retry_after("soon", now), -1);
    cr_assert_eq(cl_parse_retry_after("-1", now), -1);
    cr_assert_eq(cl_parse_retry_after("2s", now), -1);
    cr_assert_eq(cl_parse_retry_after(NULL, now), -1);
}

Test(http, status_codes)
{
    long st[] = { 400, 401, 403, 404, 408, 409, 410, 422, 429, 500, 502, 503, 504, 418 };
    sbx_error_code want[] = {
        SBX_ERROR_CONFIGURATION, SBX_ERROR_AUTHENTICATION, SBX_ERROR_AUTHENTICATION,
        SBX_ERROR_NOT_FOUND, SBX_ERROR_TIMEOUT, SBX_ERROR_CONFIGURATION, SBX_ERROR_NOT_FOUND,
        SBX_ERROR_CONFIGURATION, SBX_ERROR_RATE_LIMITED, SBX_ERROR_CONNECTION,
        SBX_ERROR_CONNECTION, SBX_ERROR_CONNECTION, SBX_ERROR_TIMEOUT,
        SBX_ERROR_EXECUTION_FAILED,
    };
    for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++)
        cr_assert_eq(cl_code_of_status(st[i]), want[i], "HTTP %ld", st[i]);
}

Test(http, messages_are_scrubbed)
{
    cl_http *h = cl_http_new();
    cr_assert_eq(cl_http_set_auth(h, "Authorization", "Bearer dtn_TESTSECRET_42"), 0);
    cl_resp r = { .status = 401 };
    const char *body = "{\"message\":\"invalid key dtn_TESTSECRET_42 (Bearer dtn_TESTSECRET_42)\"}";
    cl_buf_append(&r.body, body, strlen(body));
    char *m = cl_resp_message(h, &r);
    cr_assert_str_eq(m, "invalid key [redacted] (Bearer [redacted])");
    free(m);
    cl_fail_status(h, NULL, CL_CODE_BY_STATUS, &r, "create", "create the sandbox");
    cr_assert_eq(cl_last()->code, SBX_ERROR_AUTHENTICATION);
    cr_assert_str_eq(cl_last()->msg,
                     "create the sandbox: invalid key [redacted] (Bearer [redacted]) (HTTP 401)");
    cl_resp_clear(&r);

    /* Other shapes of error bodies. */
    const char *bodies[][2] = {
        { "{\"error\":{\"message\":\"nested\"}}", "nested" },
        { "{\"error\":\"flat\"}", "flat" },
        { "plain\ntext\n", "plain text" },
        { "", "" },
    };
    for (size_t i = 0; i < 4; i++) {
        cl_resp x = { .status = 500 };
        cl_buf_append(&x.body, bodies[i][0], strlen(bodies[i][0]));
        m = cl_resp_message(h, &x);
        cr_assert_str_eq(m, bodies[i][1]);
        free(m);
        cl_resp_clear(&x);
    }
    cl_http_free(h);
}

/* ------------------------------------------------------------------------ */
/* Encodings, JSON, shell                                                    */
/* ------------------------------------------------------------------------ */

Test(util, base64_round_trip_all_bytes)
{
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    for (size_t n = 0; n <= 256; n++) {
        char *e = cl_base64_encode(all, n);
        cr_assert_eq(strlen(e), (n + 2) / 3 * 4);
        cl_buf d = { 0 };
        cr_assert_eq(cl_base64_decode(e, strlen(e), &d), 0);
        cr_assert_eq(d.len, n);
        cr_assert_eq(memcmp(d.data, all, n), 0);
        cl_buf_clear(&d);
        free(e);
    }
    char *e = cl_base64_encode("hi\n", 3);
    cr_assert_str_eq(e, "aGkK");
    free(e);
    cl_buf d = { 0 };
    cr_assert_eq(cl_base64_decode("aGk*", 4, &d), -1);
    cl_buf_clear(&d);
}

Test(util, json_int64_as_string)
{
    json_object *j = json_tokener_parse(
        "{\"a\":\"9007199254740993\",\"b\":-5,\"c\":\"x\",\"d\":null,\"e\":1.5}");
    int64_t v = 0;
    cr_assert_eq(cl_json_int(j, "a", &v), 1);
    cr_assert_eq(v, INT64_C(9007199254740993));
    cr_assert_eq(cl_json_int(j, "b", &v), 1);
    cr_assert_eq(v, -5);
    cr_assert_eq(cl_json_int(j, "c", &v), -1);
    cr_assert_eq(cl_json_int(j, "d", &v), 0);
    cr_assert_eq(cl_json_int(j, "missing", &v), 0);
    cr_assert_eq(cl_json_int(j, "e", &v), -1);
    json_object_put(j);
}

/* Runs @script with /bin/sh -c; stdout into @out. Returns the exit code. */
static int run_sh(const char *script, char *out, size_t cap)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl("/bin/sh", "sh", "-c", script, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(p[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(util, shell_script_cwd_holds_for_every_part)
{
    char dir[] = "/tmp/sbx-cloud-test-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char sub[64];
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    char want[80], want_sub[80];
    snprintf(want, sizeof(want), "%s\n", dir);
    snprintf(want_sub, sizeof(want_sub), "%s/sub\n", dir);
    struct { const char *cmd; const char *out; int code; } cases[] = {
        { "true & wait; pwd", want, 0 },
        { "sleep 0 &\npwd", want, 0 },
        { "pwd # trailing comment", want, 0 },
        { "pwd; sleep 0 &", want, 0 },
        { "cat <<EOF\nhi\nEOF", "hi\n", 0 },
        { "cd sub && pwd", want_sub, 0 },
        { "pwd; exit 7", want, 7 },
    };
    char out[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *s = cl_shell_script(NULL, cases[i].cmd, dir);
        cr_assert_eq(run_sh(s, out, sizeof(out)), cases[i].code, "C%zu: %s", i + 1, s);
        cr_assert_str_eq(out, cases[i].out, "C%zu", i + 1);
        free(s);
    }
    /* A missing cwd: nothing of the command runs. */
    char marker[96];
    snprintf(marker, sizeof(marker), "%s/m1", dir);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "true & touch %s; touch %s2", marker, marker);
    char *s = cl_shell_script(NULL, cmd, "/definitely/missing");
    cr_assert_eq(run_sh(s, out, sizeof(out)), CL_CWD_MISSING_EXIT);
    free(s);
    cr_assert_neq(access(marker, F_OK), 0);
    /* argv words are passed literally. */
    const char *argv[] = { "printf", "%s|", "a b", "it's", "$(id)", ";", NULL };
    s = cl_shell_script(argv, NULL, dir);
    cr_assert_eq(run_sh(s, out, sizeof(out)), 0);
    cr_assert_str_eq(out, "a b|it's|$(id)|;|");
    free(s);
    rmdir(sub);
    rmdir(dir);
}
