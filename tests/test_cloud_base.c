/*
 * test_cloud_base.c — the hosted-provider base (plugins/cloud/base/), linked
 * in: the streaming readers fed sample streams split at every point (and
 * byte by byte), Retry-After in both forms, the status mapping, the shell
 * script of a command with a cwd (CASE-46), base64 and JSON helpers, a
 * client's string setting (config, else environment, else default), and
 * the retry of a rate-limited create (cl_request against a scripted HTTP
 * server on 127.0.0.1, counting requests), and of a transport error: re-sent
 * when the connection was refused (nothing sent) for any call, and after a
 * connection dropped with the request sent only for a safe call (an unsafe
 * one is outcome unknown). Errors are looked at through
 * cl_last() (no host is loaded here), or, for the context of cl_request's
 * errors, through a stand-in host whose errors this file defines; the gRPC
 * layer's status mapping, channel URLs, failover and deadlines; is_alive
 * through a provider's own GET (a stand-in).
 */
#include "cloud.h"
#include "provider.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
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
/* Rate-limited creates (cl_request)                                         */
/* ------------------------------------------------------------------------ */

/* A stand-in host: errors with their context, so that what cl_request and
 * cl_fail_status put in an error's context can be read back. */
struct sbx_error {
    sbx_error_code code;
    char msg[2048];
    char keys[16][64], vals[16][256];
    int nctx;
    int unknown;        /* the outcome was set unknown */
};

static void th_set_error(sbx_error **error, sbx_error_code code, const char *op,
                         const char *fmt, ...)
{
    sbx_error *e = calloc(1, sizeof(*e));
    cr_assert_not_null(e);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->code = code;
    *error = e;
}

static void th_add_context(sbx_error *e, const char *key, const char *value)
{
    if (e->nctx == 16)
        return;
    snprintf(e->keys[e->nctx], sizeof(e->keys[0]), "%s", key);
    snprintf(e->vals[e->nctx], sizeof(e->vals[0]), "%s", value);
    e->nctx++;
}

static void th_set_outcome(sbx_error *e, sbx_error_outcome o)
{
    e->unknown = o == SBX_ERROR_OUTCOME_UNKNOWN;
}

static const sbx_host_services test_host = {
    .struct_size = sizeof(sbx_host_services),
    .set_error = th_set_error,
    .error_add_context = th_add_context,
    .error_set_outcome = th_set_outcome,
};

/* The value of context @key of @e, or NULL. */
static const char *ctx_of(const sbx_error *e, const char *key)
{
    for (int i = 0; i < e->nctx; i++)
        if (strcmp(e->keys[i], key) == 0)
            return e->vals[i];
    return NULL;
}

/* One scripted answer: a status and a Retry-After header ("" = none; "+N":
 * the HTTP-date N seconds after the answer's Date header). Status 0: the
 * request is read whole and the connection closed without an answer. */
typedef struct answer {
    int status;
    const char *retry_after;
} answer;

/* A server on 127.0.0.1 that answers request i (from 0) with script[i], or
 * with the last entry once the script is spent, each on a connection of its
 * own (Connection: close), and counts the requests it read and the bodies
 * that carried @needle. */
typedef struct script_server {
    int fd, port;
    const answer *script;
    int n;
    pthread_t thread;
    pthread_mutex_t lock;
    int requests;
    int stop;
    double listen_after;    /* seconds before listen() (0: at once); until
                             * then a connection to the port is refused */
    char head[4096];    /* the last request's line and headers */
} script_server;

static void *serve_script(void *ud)
{
    script_server *sv = ud;
    if (sv->listen_after > 0) {
        struct timespec ts = { (time_t)sv->listen_after,
                               (long)((sv->listen_after - (double)(time_t)sv->listen_after) * 1e9) };
        nanosleep(&ts, NULL);
        cr_assert_eq(listen(sv->fd, 16), 0);
    }
    for (;;) {
        int c = accept(sv->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        pthread_mutex_lock(&sv->lock);
        int stop = sv->stop;
        pthread_mutex_unlock(&sv->lock);
        if (stop) {
            close(c);
            return NULL;
        }
        char buf[65536];
        size_t len = 0;
        char *end = NULL;
        while (!end && len < sizeof(buf) - 1) {
            ssize_t r = read(c, buf + len, sizeof(buf) - 1 - len);
            if (r <= 0)
                break;
            len += (size_t)r;
            buf[len] = '\0';
            end = strstr(buf, "\r\n\r\n");
        }
        if (!end) {
            close(c);
            continue;
        }
        const char *cl = strcasestr(buf, "\r\nContent-Length:");
        size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
        size_t have = len - (size_t)(end + 4 - buf);
        while (have < want) {
            ssize_t r = read(c, buf, sizeof(buf) < want - have ? sizeof(buf) : want - have);
            if (r <= 0)
                break;
            have += (size_t)r;
        }
        pthread_mutex_lock(&sv->lock);
        snprintf(sv->head, sizeof sv->head, "%.*s", (int)(end + 2 - buf), buf);
        const answer *a = &sv->script[sv->requests < sv->n ? sv->requests : sv->n - 1];
        sv->requests++;
        pthread_mutex_unlock(&sv->lock);
        if (a->status == 0) {
            close(c);
            continue;
        }
        time_t now = time(NULL);
        char date[64], ra[128] = "";
        struct tm tm;
        strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
        if (a->retry_after[0] == '+') {
            time_t t = now + atoi(a->retry_after + 1);
            strftime(ra, sizeof(ra), "Retry-After: %a, %d %b %Y %H:%M:%S GMT\r\n",
                     gmtime_r(&t, &tm));
        } else if (a->retry_after[0]) {
            snprintf(ra, sizeof(ra), "Retry-After: %s\r\n", a->retry_after);
        }
        const char *body = "{\"message\":\"too many requests\"}";
        char out[1024];
        int n = snprintf(out, sizeof(out),
                         "HTTP/1.1 %d Scripted\r\nDate: %s\r\n%sContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         a->status, date, ra, strlen(body), body);
        ssize_t w = write(c, out, (size_t)n);
        (void)w;
        close(c);
    }
}

/* Starts the server; with @listen_after > 0 its port is bound at once but
 * listens only that many seconds later (refused until then). */
static void server_start_later(script_server *sv, const answer *script, int n,
                               double listen_after)
{
    memset(sv, 0, sizeof(*sv));
    sv->listen_after = listen_after;
    sv->script = script;
    sv->n = n;
    pthread_mutex_init(&sv->lock, NULL);
    sv->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(sv->fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    cr_assert_eq(bind(sv->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    if (listen_after <= 0)
        cr_assert_eq(listen(sv->fd, 16), 0);
    cr_assert_eq(getsockname(sv->fd, (struct sockaddr *)&a, &al), 0);
    sv->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&sv->thread, NULL, serve_script, sv), 0);
}

static void server_start(script_server *sv, const answer *script, int n)
{
    server_start_later(sv, script, n, 0);
}

/* Stops the server (a last connection wakes its accept) and returns how
 * many requests it answered. */
static int server_stop(script_server *sv)
{
    pthread_mutex_lock(&sv->lock);
    sv->stop = 1;
    pthread_mutex_unlock(&sv->lock);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)sv->port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    close(fd);
    pthread_join(sv->thread, NULL);
    close(sv->fd);
    pthread_mutex_destroy(&sv->lock);
    return sv->requests;
}

#define TOKEN "sbx-0123456789abcdef0123456789abcdef"

/* A client with a quick schedule: every backoff is equal jitter over a
 * step of 20 ms (base 10 ms doubled, capped at 20 ms): in [10, 20) ms. */
static cl_http *quick_client(int retries, int rate_limit_retries)
{
    cr_assert_eq(cl_setup(&test_host, "test", NULL), 0);
    cl_http *h = cl_http_new();
    cr_assert_not_null(h);
    cl_retry_policy p = CL_RETRY_POLICY_DEFAULT;
    p.retries = retries;
    p.base_s = 0.01;
    p.max_backoff_s = 0.02;
    p.rate_limit_retries = rate_limit_retries;
    cl_http_set_retry(h, &p);
    return h;
}

/* Sends a create POST to @sv (its body holds @body) with @ctx_token as the
 * call's create token; returns cl_request's value. */
static int post_create(cl_http *h, script_server *sv, const char *ctx_token, const char *body,
                       cl_idempotency idem, cl_resp *r, sbx_error **err)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/sandbox", sv->port);
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1,
                         .create_token = ctx_token };
    cl_req rq = { .method = "POST", .url = url, .body = body, .body_len = strlen(body),
                  .idempotent = idem, .secs = 30, .what = "create the sandbox" };
    return cl_request(h, &ctx, &rq, r, "create", err);
}

static const char token_body[] = "{\"labels\":{\"sbx_create_token\":\"" TOKEN "\"}}";

/* Three 429s without Retry-After, then 201: four requests, the three
 * waits each in [10, 20) ms, so in all in [30, 60) ms. */
Test(rate_limit, token_create_is_resent_after_429)
{
    static const answer script[] = { { 429, "" }, { 429, "" }, { 429, "" }, { 201, "" } };
    script_server sv;
    server_start(&sv, script, 4);
    cl_http *h = quick_client(0, 8);
    cl_resp r;
    sbx_error *err = NULL;
    cr_assert_eq(post_create(h, &sv, TOKEN, token_body, CL_UNSAFE, &r, &err), 0);
    cr_assert_null(err);
    cr_assert_eq(r.status, 201);
    cr_assert_eq(r.attempts, 4);
    cr_assert(r.waited_s >= 0.03 && r.waited_s < 0.06, "waited %.4f s", r.waited_s);
    cr_assert_eq(server_stop(&sv), 4);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* Always 429: 1 + rate_limit_retries (3) requests, then rate_limited with
 * the attempts and the wait in the context; retries (0) does not count. */
Test(rate_limit, spent_retries_are_rate_limited_with_the_wait)
{
    static const answer script[] = { { 429, "" } };
    script_server sv;
    server_start(&sv, script, 1);
    cl_http *h = quick_client(0, 3);
    cl_resp r;
    sbx_error *err = NULL;
    cr_assert_eq(post_create(h, &sv, TOKEN, token_body, CL_UNSAFE, &r, &err), 0);
    cr_assert_eq(r.status, 429);
    cr_assert_eq(r.attempts, 4);
    cr_assert_eq(server_stop(&sv), 4);
    cl_fail_status(h, &err, CL_CODE_BY_STATUS, &r, "create", "create the sandbox");
    cr_assert_not_null(err);
    cr_assert_eq(err->code, SBX_ERROR_RATE_LIMITED);
    cr_assert_str_eq(err->msg, "create the sandbox: too many requests (HTTP 429)");
    cr_assert_str_eq(ctx_of(err, "http_status"), "429");
    cr_assert_str_eq(ctx_of(err, "retry_after_s"), "0");
    cr_assert_str_eq(ctx_of(err, "attempts"), "4");
    char want[32];
    snprintf(want, sizeof(want), "%.3f", r.waited_s);
    cr_assert_str_eq(ctx_of(err, "waited_s"), want);
    cr_assert(r.waited_s >= 0.03 && r.waited_s < 0.06, "waited %.4f s", r.waited_s);
    free(err);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* Retry-After is honoured in both forms: 0.2 s twice, then an HTTP-date 1 s
 * after the answer's Date: the waits add up to exactly 1.4 s. */
Test(rate_limit, retry_after_in_both_forms_is_the_wait)
{
    static const answer script[] = {
        { 429, "0.2" }, { 429, "0.2" }, { 429, "+1" }, { 201, "" },
    };
    script_server sv;
    server_start(&sv, script, 4);
    cl_http *h = quick_client(0, 8);
    cl_resp r;
    cr_assert_eq(post_create(h, &sv, TOKEN, token_body, CL_UNSAFE, &r, NULL), 0);
    cr_assert_eq(r.status, 201);
    cr_assert_eq(r.attempts, 4);
    cr_assert_float_eq(r.waited_s, 1.4, 1e-9);
    cr_assert_eq(server_stop(&sv), 4);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* A read (GET, CL_SAFE) answered 503, 429, 503 without Retry-After, then
 * 200, waits as a create's re-sends do: four requests, the three waits each
 * in [10, 20) ms (the floor holds for reads too), in all in [30, 60) ms. */
Test(rate_limit, a_read_backs_off_as_a_create_does)
{
    static const answer script[] = { { 503, "" }, { 429, "" }, { 503, "" }, { 200, "" } };
    script_server sv;
    server_start(&sv, script, 4);
    cl_http *h = quick_client(3, 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/sandbox/sb-1", sv.port);
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1 };
    cl_req rq = { .method = "GET", .url = url, .idempotent = CL_SAFE, .secs = 30,
                  .what = "get the sandbox" };
    cl_resp r;
    cr_assert_eq(cl_request(h, &ctx, &rq, &r, "is_alive", NULL), 0);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.attempts, 4);
    cr_assert(r.waited_s >= 0.03 && r.waited_s < 0.06, "waited %.4f s", r.waited_s);
    cr_assert_eq(server_stop(&sv), 4);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* A request sent once (a probe) is never re-sent: a 503 is its answer
 * after one request, and nothing listening is a connection error at once,
 * with no wait. */
Test(rate_limit, a_request_sent_once_is_not_resent)
{
    static const answer script[] = { { 503, "" }, { 200, "" } };
    script_server sv;
    server_start(&sv, script, 2);
    cl_http *h = quick_client(3, 3);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/version", sv.port);
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1 };
    cl_req rq = { .method = "GET", .url = url, .idempotent = CL_SAFE, .once = 1, .secs = 30,
                  .what = "reach it" };
    cl_resp r;
    cr_assert_eq(cl_request(h, &ctx, &rq, &r, "probe", NULL), 0);
    cr_assert_eq(r.status, 503);
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(r.waited_s, 0);
    cr_assert_eq(server_stop(&sv), 1);
    cl_resp_clear(&r);
    /* The server is gone: its port refuses, once. */
    sbx_error *err = NULL;
    cr_assert_eq(cl_request(h, &ctx, &rq, &r, "probe", &err), -1);
    cr_assert_eq(err->code, SBX_ERROR_CONNECTION);
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(r.waited_s, 0);
    free(err);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* A read (CL_SAFE) whose final_status is 502: a 502 is its answer at once
 * (one request, no wait), which the caller looks into before anything is
 * sent again; a 503 before it is retried as for any read (two requests,
 * the 502 the answer); without final_status the 502 is retried too (three
 * requests, the 200 the answer). */
Test(rate_limit, a_final_status_is_answered_at_once)
{
    static const answer first[] = { { 502, "" }, { 200, "" } };
    static const answer second[] = { { 503, "" }, { 502, "" }, { 200, "" } };
    static const struct {
        const answer *script;
        size_t n;
        long final_status, status;
        int attempts;
    } rounds[] = {
        { first, 2, 502, 502, 1 },
        { second, 3, 502, 502, 2 },
        { second, 3, 0, 200, 3 },
    };
    for (size_t i = 0; i < sizeof rounds / sizeof rounds[0]; i++) {
        script_server sv;
        server_start(&sv, rounds[i].script, rounds[i].n);
        cl_http *h = quick_client(3, 0);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/process.Process/Connect", sv.port);
        sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1 };
        cl_req rq = { .method = "GET", .url = url, .idempotent = CL_SAFE, .secs = 30,
                      .final_status = rounds[i].final_status, .what = "re-attach" };
        cl_resp r;
        cr_assert_eq(cl_request(h, &ctx, &rq, &r, "exec", NULL), 0, "round %zu", i);
        cr_assert_eq(r.status, rounds[i].status, "round %zu: %ld", i, r.status);
        cr_assert_eq(r.attempts, rounds[i].attempts, "round %zu: %d", i, r.attempts);
        if (rounds[i].attempts == 1)
            cr_assert_eq(r.waited_s, 0);
        cr_assert_eq(server_stop(&sv), rounds[i].attempts, "round %zu", i);
        cl_resp_clear(&r);
        cl_http_free(h);
    }
}

/* A request to 127.0.0.1:@port/sandbox/sb-1: GET (CL_SAFE, a read) or, with
 * @unsafe, POST (CL_UNSAFE, a command's start); cl_request's value. */
static int send_one(cl_http *h, int port, int unsafe, cl_resp *r, sbx_error **err)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/sandbox/sb-1", port);
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1 };
    cl_req rq = { .method = unsafe ? "POST" : "GET", .url = url,
                  .body = unsafe ? "{\"command\":\"echo once\"}" : NULL,
                  .body_len = unsafe ? 24 : 0, .idempotent = unsafe ? CL_UNSAFE : CL_SAFE,
                  .secs = 30, .what = unsafe ? "start the command" : "get the sandbox" };
    return cl_request(h, &ctx, &rq, r, unsafe ? "exec" : "is_alive", err);
}

/* A transport error before the request was sent (the connection refused:
 * the port is bound and listens only 0.1 s later) is re-sent, for a safe
 * call and an unsafe one alike, since nothing reached the server: each
 * succeeds with the one request the server read, after at least one
 * backoff. */
Test(transport, refused_at_connect_is_retried_for_any_call)
{
    static const answer script[] = { { 200, "" } };
    for (int unsafe = 0; unsafe < 2; unsafe++) {
        script_server sv;
        server_start_later(&sv, script, 1, 0.1);
        cl_http *h = quick_client(30, 0);
        cl_resp r;
        sbx_error *err = NULL;
        cr_assert_eq(send_one(h, sv.port, unsafe, &r, &err), 0, "%s: %s",
                     unsafe ? "unsafe" : "safe", err ? err->msg : "");
        cr_assert_null(err);
        cr_assert_eq(r.status, 200);
        cr_assert(r.attempts >= 2, "%d attempts", r.attempts);
        cr_assert(r.waited_s >= 0.01 * (r.attempts - 1), "waited %.4f s in %d attempts",
                  r.waited_s, r.attempts);
        cr_assert_eq(server_stop(&sv), 1);
        cl_resp_clear(&r);
        cl_http_free(h);
    }
}

/* Nothing ever listens: retries (2) re-sends, then a connection error
 * naming the host, whose outcome is not unknown (nothing was sent), for a
 * safe call and an unsafe one alike. */
Test(transport, refused_every_time_is_a_connection_error_of_known_outcome)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    int port = ntohs(a.sin_port);
    for (int unsafe = 0; unsafe < 2; unsafe++) {
        cl_http *h = quick_client(2, 0);
        cl_resp r;
        sbx_error *err = NULL;
        cr_assert_eq(send_one(h, port, unsafe, &r, &err), -1);
        cr_assert_not_null(err);
        cr_assert_eq(err->code, SBX_ERROR_CONNECTION, "%s", err->msg);
        cr_assert_eq(r.attempts, 3);
        cr_assert_eq(err->unknown, 0, "outcome unknown for a request never sent");
        char host[32];
        snprintf(host, sizeof(host), "127.0.0.1:%d", port);
        cr_assert_str_eq(ctx_of(err, "host"), host);
        free(err);
        cl_resp_clear(&r);
        cl_http_free(h);
    }
    close(fd);
}

/* The connection dropped after the request was sent (read whole, closed
 * without an answer): a safe call is re-sent and gets the second answer
 * (two requests); an unsafe one is never re-sent: one request, a connection
 * error of outcome unknown (the server may have acted on it). */
Test(transport, dropped_after_sending_is_resent_only_when_safe)
{
    static const answer script[] = { { 0, "" }, { 200, "" } };
    for (int unsafe = 0; unsafe < 2; unsafe++) {
        script_server sv;
        server_start(&sv, script, 2);
        cl_http *h = quick_client(3, 0);
        cl_resp r;
        sbx_error *err = NULL;
        int rc = send_one(h, sv.port, unsafe, &r, &err);
        if (!unsafe) {
            cr_assert_eq(rc, 0, "%s", err ? err->msg : "");
            cr_assert_eq(r.status, 200);
            cr_assert_eq(r.attempts, 2);
            cr_assert_eq(server_stop(&sv), 2);
        } else {
            cr_assert_eq(rc, -1);
            cr_assert_not_null(err);
            cr_assert_eq(err->code, SBX_ERROR_CONNECTION, "%s", err->msg);
            cr_assert_eq(err->unknown, 1, "the outcome of %s", err->msg);
            cr_assert_eq(r.attempts, 1);
            cr_assert_eq(server_stop(&sv), 1);
        }
        free(err);
        cl_resp_clear(&r);
        cl_http_free(h);
    }
}

/* A kept-alive host: on each connection it answers the first request 200
 * (kept alive), reads the second one whole and closes the connection
 * without an answer (a connection that died under a request). It counts
 * the requests it read, and those of each method. */
typedef struct ka_server {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t lock;
    int requests, posts, deletes, stop;
} ka_server;

/* Reads one request whole from @c (headers, then Content-Length bytes):
 * 1 with its method's first letter in *@m, 0 at the end of the
 * connection. */
static int ka_read(int c, char *m)
{
    char buf[8192];
    size_t len = 0;
    char *end = NULL;
    while (!end && len < sizeof(buf) - 1) {
        ssize_t r = read(c, buf + len, 1);  /* byte by byte: no read past it */
        if (r <= 0)
            return 0;
        len += (size_t)r;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (!end)
        return 0;
    *m = buf[0];
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
    while (want > 0) {
        ssize_t r = read(c, buf, want < sizeof(buf) ? want : sizeof(buf));
        if (r <= 0)
            return 0;
        want -= (size_t)r;
    }
    return 1;
}

static void *serve_keepalive(void *ud)
{
    ka_server *sv = ud;
    for (;;) {
        int c = accept(sv->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        pthread_mutex_lock(&sv->lock);
        int stop = sv->stop;
        pthread_mutex_unlock(&sv->lock);
        if (stop) {
            close(c);
            return NULL;
        }
        char m;
        for (int k = 0; k < 2 && ka_read(c, &m); k++) {
            pthread_mutex_lock(&sv->lock);
            sv->requests++;
            sv->posts += m == 'P';
            sv->deletes += m == 'D';
            pthread_mutex_unlock(&sv->lock);
            if (k == 0) {
                static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                         "Content-Length: 2\r\n\r\n{}";
                ssize_t w = write(c, ok, sizeof(ok) - 1);
                (void)w;
            }
        }
        close(c);
    }
}

static void ka_start(ka_server *sv)
{
    memset(sv, 0, sizeof(*sv));
    pthread_mutex_init(&sv->lock, NULL);
    sv->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(sv->fd, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    cr_assert_eq(bind(sv->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(sv->fd, 16), 0);
    cr_assert_eq(getsockname(sv->fd, (struct sockaddr *)&a, &al), 0);
    sv->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&sv->thread, NULL, serve_keepalive, sv), 0);
}

/* Stops the server (a last connection wakes its accept). */
static void ka_stop(ka_server *sv)
{
    pthread_mutex_lock(&sv->lock);
    sv->stop = 1;
    pthread_mutex_unlock(&sv->lock);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)sv->port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    close(fd);
    pthread_join(sv->thread, NULL);
    close(sv->fd);
    pthread_mutex_destroy(&sv->lock);
}

/* The second call of a client to a kept-alive host that closes the
 * connection under it (see ka_server): a GET first (answered, its
 * connection kept), then @method with @body (NULL: none) and @idem. */
static int second_on_a_dying_connection(ka_server *sv, const char *method, const char *body,
                                        cl_idempotency idem, cl_resp *r, sbx_error **err)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/sandbox/sb-1", sv->port);
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1 };
    cl_http *h = quick_client(3, 0);
    cl_req first = { .method = "GET", .url = url, .idempotent = CL_SAFE, .secs = 30 };
    cr_assert_eq(cl_request(h, &ctx, &first, r, "is_alive", err), 0, "%s",
                 *err ? (*err)->msg : "");
    cr_assert_eq(r->status, 200);
    cl_resp_clear(r);
    cl_req rq = { .method = method, .url = url, .body = body, .body_len = body ? strlen(body) : 0,
                  .idempotent = idem, .secs = 30, .what = "start the command" };
    int rc = cl_request(h, &ctx, &rq, r, "exec", err);
    cl_http_free(h);
    return rc;
}

/* libcurl re-sends by itself a request whose kept-alive connection died
 * before any byte of the answer: a CL_UNSAFE one (a POST with a body, a
 * POST without one, a DELETE) is never sent again: the server read one
 * copy of it and the call is a connection error of outcome unknown, named
 * for the lost connection. */
Test(transport, unsafe_is_not_resent_when_a_kept_alive_connection_dies)
{
    static const struct { const char *method, *body; } cases[] = {
        { "POST", "{\"command\":\"echo once\"}" }, { "POST", NULL }, { "DELETE", NULL },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ka_server sv;
        ka_start(&sv);
        cl_resp r;
        sbx_error *err = NULL;
        int rc = second_on_a_dying_connection(&sv, cases[i].method, cases[i].body, CL_UNSAFE,
                                              &r, &err);
        ka_stop(&sv);
        const char *what = cases[i].body ? "POST with a body" : cases[i].method;
#if LIBCURL_VERSION_NUM >= 0x075000 /* 7.80.0: see on_prereq in http.c */
        cr_assert_eq(rc, -1, "%s: %d, HTTP %ld", what, rc, r.status);
        cr_assert_not_null(err);
        cr_assert_eq(err->code, SBX_ERROR_CONNECTION, "%s: %s", what, err->msg);
        cr_assert_eq(err->unknown, 1, "%s: the outcome of %s", what, err->msg);
        cr_assert(strstr(err->msg, "the connection was lost before an answer came") != NULL,
                  "%s: %s", what, err->msg);
        cr_assert_eq(r.lost, 1, "%s", what);
        cr_assert_eq(r.attempts, 1, "%s", what);
        cr_assert_eq(sv.requests, 2, "%s: %d requests", what, sv.requests);
#else
        /* (Before libcurl 7.80 the request takes a new connection.) */
        cr_assert_eq(rc, 0, "%s: %s", what, err ? err->msg : "");
        cr_assert_eq(r.status, 200);
#endif
        cr_assert_eq(sv.posts + sv.deletes, 1, "%s: sent %d times", what,
                     sv.posts + sv.deletes);
        free(err);
        cl_resp_clear(&r);
    }
}

/* The same for a CL_SAFE call (a read, a POST with a body): libcurl sends
 * it again on a new connection, answered there: 200, three requests in all
 * (the GET, the one the connection died under, its copy). */
Test(transport, safe_is_resent_when_a_kept_alive_connection_dies)
{
    static const struct { const char *method, *body; } cases[] = {
        { "GET", NULL }, { "POST", "{\"name\":\"sbx-1\"}" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ka_server sv;
        ka_start(&sv);
        cl_resp r;
        sbx_error *err = NULL;
        int rc = second_on_a_dying_connection(&sv, cases[i].method, cases[i].body, CL_SAFE, &r,
                                              &err);
        ka_stop(&sv);
        cr_assert_eq(rc, 0, "%s: %s", cases[i].method, err ? err->msg : "");
        cr_assert_null(err);
        cr_assert_eq(r.status, 200);
        cr_assert_eq(sv.requests, 3, "%s: %d requests", cases[i].method, sv.requests);
        cr_assert_eq(sv.posts, cases[i].body ? 2 : 0);
        cl_resp_clear(&r);
    }
}

/* A Retry-After past max_wait_s (60 s) fails at once: one request. */
Test(rate_limit, retry_after_past_the_cap_fails_at_once)
{
    static const answer script[] = { { 429, "3600" } };
    script_server sv;
    server_start(&sv, script, 1);
    cl_http *h = quick_client(0, 8);
    cl_resp r;
    sbx_error *err = NULL;
    cr_assert_eq(post_create(h, &sv, TOKEN, token_body, CL_UNSAFE, &r, &err), -1);
    cr_assert_eq(err->code, SBX_ERROR_RATE_LIMITED);
    cr_assert_str_eq(ctx_of(err, "retry_after_s"), "3600");
    cr_assert_eq(server_stop(&sv), 1);
    free(err);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* A read answered @script within @secs (0: no bound of its own). */
static int get_scripted(cl_http *h, script_server *sv, double secs, cl_resp *r, sbx_error **err)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/sandbox/sb-1", sv->port);
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1 };
    cl_req rq = { .method = "GET", .url = url, .idempotent = CL_SAFE, .secs = secs,
                  .what = "get the sandbox" };
    return cl_request(h, &ctx, &rq, r, "is_alive", err);
}

/* A 503 whose Retry-After (120 s) passes max_wait_s (60 s) fails at once
 * with its own code (connection), the wait in the message and the context:
 * one request, no sleep (it waited 3 x 120 s before). */
Test(rate_limit, a_5xx_retry_after_past_the_cap_fails_at_once)
{
    static const answer script[] = { { 503, "120" } };
    script_server sv;
    server_start(&sv, script, 1);
    cl_http *h = quick_client(3, 0);
    cl_resp r;
    sbx_error *err = NULL;
    double t0 = cl_now();
    cr_assert_eq(get_scripted(h, &sv, 0, &r, &err), -1);
    double dt = cl_now() - t0;
    cr_assert(dt < 1.0, "failed after %.3f s", dt);
    cr_assert_eq(err->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(err->msg, "get the sandbox: too many requests "
                               "(HTTP 503; the provider asks to wait 120 s)");
    cr_assert_str_eq(ctx_of(err, "http_status"), "503");
    cr_assert_str_eq(ctx_of(err, "retry_after_s"), "120");
    cr_assert_null(ctx_of(err, "attempts"));
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(server_stop(&sv), 1);
    free(err);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* A 503 whose Retry-After (1 s) is under the cap is waited, then re-sent:
 * two requests, exactly 1 s slept, the 200 stands. */
Test(rate_limit, a_5xx_retry_after_under_the_cap_is_waited)
{
    static const answer script[] = { { 503, "1" }, { 200, "" } };
    script_server sv;
    server_start(&sv, script, 2);
    cl_http *h = quick_client(3, 0);
    cl_resp r;
    sbx_error *err = NULL;
    cr_assert_eq(get_scripted(h, &sv, 0, &r, &err), 0, "%s", err ? err->msg : "");
    cr_assert_null(err);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.attempts, 2);
    cr_assert_float_eq(r.waited_s, 1.0, 1e-9);
    cr_assert_eq(server_stop(&sv), 2);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* A Retry-After under the cap (30 s) but past the call's bound (2 s) is
 * not slept: the 503 stands after one request, at once. */
Test(rate_limit, a_wait_past_the_bound_is_not_slept)
{
    static const answer script[] = { { 503, "30" }, { 200, "" } };
    script_server sv;
    server_start(&sv, script, 2);
    cl_http *h = quick_client(3, 0);
    cl_resp r;
    sbx_error *err = NULL;
    double t0 = cl_now();
    cr_assert_eq(get_scripted(h, &sv, 2.0, &r, &err), 0, "%s", err ? err->msg : "");
    double dt = cl_now() - t0;
    cr_assert(dt < 1.0, "answered after %.3f s", dt);
    cr_assert_null(err);
    cr_assert_eq(r.status, 503);
    cr_assert_eq(r.attempts, 1);
    cr_assert_float_eq(r.waited_s, 0.0, 1e-9);
    cr_assert_float_eq(r.retry_after_s, 30.0, 1e-9);
    cr_assert_eq(server_stop(&sv), 1);
    cl_resp_clear(&r);
    cl_http_free(h);
}

/* Only a POST whose body carries the call's token is re-sent after a 429:
 * a body without it, or a call without a token, is sent once; a 5xx to the
 * token create is never re-sent (the provider may have acted). */
Test(rate_limit, only_the_token_create_is_resent)
{
    static const answer too_many[] = { { 429, "" } };
    static const answer broken[] = { { 503, "" } };
    struct {
        const answer *script;
        const char *ctx_token, *body;
        long status;
        int maybe_acted;
    } cases[] = {
        { too_many, TOKEN, "{\"labels\":{}}", 429, 0 },
        { too_many, NULL, token_body, 429, 0 },
        { too_many, "", token_body, 429, 0 },
        { broken, TOKEN, token_body, 503, 1 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        script_server sv;
        server_start(&sv, cases[i].script, 1);
        cl_http *h = quick_client(3, 8);
        cl_resp r;
        cr_assert_eq(post_create(h, &sv, cases[i].ctx_token, cases[i].body, CL_UNSAFE, &r,
                                 NULL), 0);
        cr_assert_eq(r.status, cases[i].status, "case %zu", i);
        cr_assert_eq(r.attempts, 1, "case %zu", i);
        cr_assert_eq(r.maybe_acted, cases[i].maybe_acted, "case %zu", i);
        cr_assert_eq(server_stop(&sv), 1, "case %zu", i);
        cl_resp_clear(&r);
        cl_http_free(h);
    }
}

/* A CL_SAFE token create: its 429s count against rate_limit_retries (2),
 * its 5xx against retries (1), each apart: 503 (re-sent), 429, 429 (both
 * re-sent), then the second 503 is past retries: four requests. */
Test(rate_limit, the_two_counts_are_apart)
{
    static const answer script[] = {
        { 503, "" }, { 429, "" }, { 429, "" }, { 503, "" }, { 429, "" }, { 201, "" },
    };
    script_server sv;
    server_start(&sv, script, 6);
    cl_http *h = quick_client(1, 2);
    cl_resp r;
    cr_assert_eq(post_create(h, &sv, TOKEN, token_body, CL_SAFE, &r, NULL), 0);
    cr_assert_eq(r.status, 503);
    cr_assert_eq(r.attempts, 4);
    cr_assert_eq(server_stop(&sv), 4);
    cl_resp_clear(&r);
    cl_http_free(h);
}

Test(rate_limit, policy_from_config)
{
    cr_assert_eq(cl_setup(&test_host, "test", NULL), 0);
    cl_retry_policy p = CL_RETRY_POLICY_DEFAULT;
    cr_assert_eq(p.rate_limit_retries, 8);
    json_object *cfg = json_tokener_parse("{\"rate_limit_retries\":2,\"retries\":1}");
    cr_assert_eq(cl_retry_policy_from_config(cfg, &p, NULL), 0);
    cr_assert_eq(p.rate_limit_retries, 2);
    cr_assert_eq(p.retries, 1);
    json_object_put(cfg);
    /* retries alone sets both: 0 is no re-send at all (CASE-19 C). */
    cfg = json_tokener_parse("{\"retries\":0}");
    cr_assert_eq(cl_retry_policy_from_config(cfg, &p, NULL), 0);
    cr_assert_eq(p.rate_limit_retries, 0);
    cr_assert_eq(p.retries, 0);
    json_object_put(cfg);
    const char *bad[] = { "{\"rate_limit_retries\":-1}", "{\"rate_limit_retries\":101}",
                          "{\"rate_limit_retries\":\"3\"}" };
    const char *msg[] = { "rate_limit_retries: \"-1\" is not an integer from 0 to 100",
                          "rate_limit_retries: \"101\" is not an integer from 0 to 100",
                          "rate_limit_retries: \"\"3\"\" is not an integer from 0 to 100" };
    for (size_t i = 0; i < 3; i++) {
        sbx_error *err = NULL;
        cfg = json_tokener_parse(bad[i]);
        cr_assert_eq(cl_retry_policy_from_config(cfg, &p, &err), -1);
        cr_assert_eq(err->code, SBX_ERROR_CONFIGURATION);
        cr_assert_str_eq(err->msg, msg[i]);
        cr_assert_str_eq(ctx_of(err, "option"), "rate_limit_retries");
        free(err);
        json_object_put(cfg);
    }
}

/* A client option in seconds: absent leaves the default, the bounds are
 * kept (0 only where allowed, and then nothing between 0 and 1 s: an
 * interval, not a flood), anything else is a configuration error naming
 * the option, in the words of its range. */
Test(util, seconds_option_bounds_and_messages)
{
    cr_assert_eq(cl_setup(&test_host, "test", NULL), 0);
    json_object *cfg = json_tokener_parse("{\"a\":0,\"b\":86400,\"c\":0.25,\"d\":86400.5,"
                                          "\"e\":\"5\",\"f\":-1,\"g\":null}");
    double v = 7;
    cr_assert_eq(cl_seconds_option(NULL, "a", 1, 86400, &v, NULL), 0);
    cr_assert_eq(cl_seconds_option(cfg, "missing", 1, 86400, &v, NULL), 0);
    cr_assert_eq(v, 7);
    cr_assert_eq(cl_seconds_option(cfg, "a", 1, 86400, &v, NULL), 1);
    cr_assert_eq(v, 0);
    cr_assert_eq(cl_seconds_option(cfg, "b", 0, 86400, &v, NULL), 1);
    cr_assert_eq(v, 86400);
    cr_assert_eq(cl_seconds_option(cfg, "c", 0, 86400, &v, NULL), 1);
    cr_assert_eq(v, 0.25);
    static const struct {
        const char *key;
        int zero_ok;
        const char *msg;
    } bad[] = {
        { "a", 0, "test client option a 0 is not a number of seconds above 0 and at most 86400" },
        { "c", 1, "test client option c 0.25 is not a number of seconds 0, or from 1 to "
                  "86400" },
        { "d", 1, "test client option d 86400.5 is not a number of seconds 0, or from 1 to "
                  "86400" },
        { "e", 1, "test client option e \"5\" is not a number of seconds 0, or from 1 to 86400" },
        { "f", 1, "test client option f -1 is not a number of seconds 0, or from 1 to 86400" },
        { "g", 0, "test client option g null is not a number of seconds above 0 and at most "
                  "86400" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sbx_error *err = NULL;
        v = 7;
        cr_assert_eq(cl_seconds_option(cfg, bad[i].key, bad[i].zero_ok, 86400, &v, &err), -1);
        cr_assert_eq(v, 7);
        cr_assert_eq(err->code, SBX_ERROR_CONFIGURATION);
        cr_assert_str_eq(err->msg, bad[i].msg);
        cr_assert_str_eq(ctx_of(err, "option"), bad[i].key);
        free(err);
    }
    json_object_put(cfg);
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

/* A built string handed over, or dropped when a step failed. */
Test(util, buf_take)
{
    cl_buf b = { 0 };
    cr_assert_eq(cl_buf_printf(&b, "ab%d", 1), 0);
    char *s = cl_buf_take(&b, 0);
    cr_assert_str_eq(s, "ab1");
    free(s);
    cl_buf c = { 0 };
    cr_assert_eq(cl_buf_printf(&c, "x"), 0);
    cr_assert_null(cl_buf_take(&c, 1));
    cr_assert_null(c.data);
    cr_assert_eq(c.len, 0);
}

/* What a provider's API cannot carry as text: the part named, the API in
 * the words; an environment that travels as bytes is not looked at, and
 * what the JSON check finds the same. */
Test(util, text_check_names_the_part_and_the_api)
{
    static const char *const argv[] = { "printf", "%s", "\xff", NULL };
    static const char *const env[] = { "C=\xc3\x28", NULL };
    sbx_plugin_exec_request rq = { .struct_size = sizeof(rq), .argv = argv };
    cr_assert_eq(cl_text_check(&rq, NULL, "protobuf", 0, "exec", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "argument 2 is not valid UTF-8: the provider's API "
                     "(protobuf) cannot carry it");
    rq.argv = NULL;
    rq.shell = "echo hi";
    rq.env = env;
    cr_assert_eq(cl_text_check(&rq, NULL, "protobuf", 0, "exec", NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "environment variable C is not valid UTF-8: the "
                     "provider's API (protobuf) cannot carry it");
    cr_assert_eq(cl_json_text_check(&rq, NULL, "exec", NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "environment variable C is not valid UTF-8: the "
                     "provider's API (JSON) cannot carry it");
    cr_assert_eq(cl_text_check(&rq, NULL, "JSON", CL_TEXT_ENV_AS_BYTES, "exec", NULL), 0);
    rq.cwd = "/tmp/\xff";
    cr_assert_eq(cl_text_check(&rq, NULL, "JSON", CL_TEXT_ENV_AS_BYTES, "exec", NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "the working directory is not valid UTF-8: the "
                     "provider's API (JSON) cannot carry it");
    cr_assert_eq(cl_text_check(NULL, "/tmp/\xfe", "protobuf", 0, "write_file", NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "the path is not valid UTF-8: the provider's API "
                     "(protobuf) cannot carry it");
    cr_assert_eq(cl_text_check(NULL, "/tmp/\xc3\xa9", "protobuf", 0, "write_file", NULL), 0);
}

/* A client's string setting: the config's non-empty string member, else
 * the environment variable when set and not empty, else the default as
 * given (NULL and "" too). */
Test(util, setting_is_the_config_else_the_environment_else_the_default)
{
    json_object *cfg = json_tokener_parse("{\"a\":\"from-config\",\"empty\":\"\",\"n\":3}");
    cr_assert_not_null(cfg);
    cr_assert_eq(setenv("SBX_TEST_SETTING", "from-env", 1), 0);
    cr_assert_str_eq(cl_setting(cfg, "a", "SBX_TEST_SETTING", "dflt"), "from-config");
    cr_assert_str_eq(cl_setting(cfg, "empty", "SBX_TEST_SETTING", "dflt"), "from-env");
    cr_assert_str_eq(cl_setting(cfg, "n", "SBX_TEST_SETTING", "dflt"), "from-env");
    cr_assert_str_eq(cl_setting(cfg, "missing", "SBX_TEST_SETTING", "dflt"), "from-env");
    cr_assert_str_eq(cl_setting(NULL, NULL, "SBX_TEST_SETTING", "dflt"), "from-env");
    cr_assert_str_eq(cl_setting(cfg, "empty", NULL, "dflt"), "dflt");
    cr_assert_eq(setenv("SBX_TEST_SETTING", "", 1), 0);
    cr_assert_str_eq(cl_setting(cfg, "empty", "SBX_TEST_SETTING", "dflt"), "dflt");
    cr_assert_eq(unsetenv("SBX_TEST_SETTING"), 0);
    cr_assert_str_eq(cl_setting(cfg, "missing", "SBX_TEST_SETTING", ""), "");
    cr_assert_null(cl_setting(cfg, "missing", "SBX_TEST_SETTING", NULL));
    cr_assert_null(cl_setting(NULL, NULL, NULL, NULL));
    json_object_put(cfg);
}

Test(util, json_bool_as_json_c_reads_it)
{
    json_object *j = json_tokener_parse(
        "{\"t\":true,\"f\":false,\"n\":null,\"one\":1,\"zero\":0,\"s\":\"x\","
        "\"empty\":\"\"}");
    cr_assert_eq(cl_json_bool(j, "t"), 1);
    cr_assert_eq(cl_json_bool(j, "f"), 0);
    cr_assert_eq(cl_json_bool(j, "n"), 0);
    cr_assert_eq(cl_json_bool(j, "one"), 1);
    cr_assert_eq(cl_json_bool(j, "zero"), 0);
    cr_assert_eq(cl_json_bool(j, "s"), 1);
    cr_assert_eq(cl_json_bool(j, "empty"), 0);
    cr_assert_eq(cl_json_bool(j, "missing"), 0);
    cr_assert_eq(cl_json_bool(NULL, "t"), 0);
    json_object *a = json_tokener_parse("[true]");
    cr_assert_eq(cl_json_bool(a, "t"), 0);
    json_object_put(a);
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

/* The headers added to a client go with its credential on every request,
 * and are left out with it (no_auth). */
Test(http, added_headers_go_with_the_credential)
{
    static const answer script[] = { { 200, "" } };
    script_server sv;
    server_start(&sv, script, 1);
    cl_http *h = quick_client(0, 0);
    cr_assert_eq(cl_http_set_auth(h, "Authorization", "Bearer k-secret-1"), 0);
    cr_assert_eq(cl_http_add_header(h, "X-Org-Id", "org-7"), 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/sandbox", sv.port);
    for (int no_auth = 0; no_auth <= 1; no_auth++) {
        cl_req rq = { .method = "GET", .url = url, .idempotent = CL_SAFE, .secs = 30,
                      .no_auth = no_auth, .what = "get the sandbox" };
        cl_resp r = { 0 };
        cr_assert_eq(cl_request(h, NULL, &rq, &r, "is_alive", NULL), 0);
        cr_assert_eq(r.status, 200);
        cl_resp_clear(&r);
        pthread_mutex_lock(&sv.lock);
        int has_org = strstr(sv.head, "\r\nX-Org-Id: org-7\r\n") != NULL;
        int has_auth = strstr(sv.head, "\r\nAuthorization: Bearer k-secret-1\r\n") != NULL;
        pthread_mutex_unlock(&sv.lock);
        cr_assert_eq(has_org, !no_auth, "no_auth %d: %s", no_auth, sv.head);
        cr_assert_eq(has_auth, !no_auth, "no_auth %d: %s", no_auth, sv.head);
    }
    for (int i = 1; i < 4; i++)
        cr_assert_eq(cl_http_add_header(h, "X-More", "v"), 0);
    cr_assert_eq(cl_http_add_header(h, "X-Fifth", "v"), -1);
    cl_http_free(h);
    cr_assert_eq(server_stop(&sv), 2);
}

/* Runs "perl -e CL_OUTPUT_ENCODER sh -c @script": its stdout and stderr
 * (each under 64 KiB) into @out and @err, its wait status returned. */
static int run_encoder(const char *script, cl_buf *out, cl_buf *err)
{
    int po[2], pe[2];
    cr_assert_eq(pipe(po), 0);
    cr_assert_eq(pipe(pe), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        execlp("perl", "perl", "-e", CL_OUTPUT_ENCODER, "sh", "-c", script, (char *)NULL);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    int fds[2] = { po[0], pe[0] };
    cl_buf *bufs[2] = { out, err };
    for (int i = 0; i < 2; i++) {
        char tmp[4096];
        ssize_t n;
        while ((n = read(fds[i], tmp, sizeof tmp)) > 0)
            cr_assert_eq(cl_buf_append(bufs[i], tmp, (size_t)n), 0);
        close(fds[i]);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return st;
}

/* CL_OUTPUT_ENCODER sends bytes 0x80-0xFF as the UTF-8 of U+0080-U+00FF
 * (NUL and ASCII as they are), keeps stdout and stderr apart and ends with
 * the command's exit status; cl_unencode gives back the bytes, a character
 * split between two pieces too. */
Test(util, output_encoder_round_trip)
{
    cl_buf out = { 0 }, err = { 0 };
    int st = run_encoder("printf 'a\\377\\000\\303x'; printf 'e\\200' >&2; exit 5", &out, &err);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 5, "status %#x", st);
    cr_assert_eq(out.len, 7);
    cr_assert_eq(memcmp(out.data, "a\xc3\xbf\0\xc3\x83x", 7), 0);
    cr_assert_eq(err.len, 3);
    cr_assert_eq(memcmp(err.data, "e\xc2\x80", 3), 0);
    /* stdout in two pieces, split inside the first character */
    cl_unencoder u = { 0 };
    cl_buf a = { 0 }, b = { 0 };
    cr_assert_eq(cl_buf_append(&a, out.data, 2), 0);
    cr_assert_eq(cl_buf_append(&b, out.data + 2, 5), 0);
    cr_assert_eq(cl_unencode(&u, 1, &a), 0);
    cr_assert_eq(a.len, 1);
    cr_assert_eq(a.data[0], 'a');
    cr_assert_eq(cl_unencode_end(&u, 1, "exec", NULL), -1);
    cr_assert_eq(cl_unencode(&u, 1, &b), 0);
    cr_assert_eq(b.len, 4);
    cr_assert_eq(memcmp(b.data, "\xff\0\xc3x", 4), 0);
    cr_assert_eq(cl_unencode_end(&u, 1, "exec", NULL), 0);
    cl_unencoder ue = { 0 };
    cr_assert_eq(cl_unencode(&ue, 2, &err), 0);
    cr_assert_eq(err.len, 2);
    cr_assert_eq(memcmp(err.data, "e\x80", 2), 0);
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    cl_buf_clear(&a);
    cl_buf_clear(&b);
}

/* A command killed by a signal: the encoder dies of the same signal. Text
 * the encoder does not write (U+FFFD, a server's replacement) is a
 * connection error naming the stream and the byte. */
Test(util, output_encoder_signal_and_foreign_text)
{
    cl_buf out = { 0 }, err = { 0 };
    int st = run_encoder("echo x; kill -TERM $$", &out, &err);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status %#x", st);
    cr_assert_eq(out.len, 2);
    cr_assert_eq(memcmp(out.data, "x\n", 2), 0);
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    cl_unencoder u = { 0 };
    cl_buf r = { 0 };
    cr_assert_eq(cl_buf_append(&r, "ok\xef\xbf\xbd", 5), 0);
    cr_assert_eq(cl_unencode(&u, 2, &r), -1);
    const cl_last_error *e = cl_last();
    cr_assert_eq(e->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(e->msg, "the command's stderr came through the provider changed (byte "
                     "0xef at offset 2 of a piece)");
    cl_buf_clear(&r);
}

/* ------------------------------------------------------------------------ */
/* gRPC (grpc.c)                                                             */
/* ------------------------------------------------------------------------ */

Test(grpc, status_codes_and_names)
{
    sbx_error_code want[17] = {
        SBX_ERROR_EXECUTION_FAILED,     /* OK: never an error; not mapped */
        SBX_ERROR_CONNECTION,           /* CANCELLED */
        SBX_ERROR_CONNECTION,           /* UNKNOWN */
        SBX_ERROR_CONFIGURATION,        /* INVALID_ARGUMENT */
        SBX_ERROR_TIMEOUT,              /* DEADLINE_EXCEEDED */
        SBX_ERROR_NOT_FOUND,            /* NOT_FOUND */
        SBX_ERROR_CONFIGURATION,        /* ALREADY_EXISTS */
        SBX_ERROR_AUTHENTICATION,       /* PERMISSION_DENIED */
        SBX_ERROR_RATE_LIMITED,         /* RESOURCE_EXHAUSTED */
        SBX_ERROR_CONFIGURATION,        /* FAILED_PRECONDITION */
        SBX_ERROR_EXECUTION_FAILED,     /* ABORTED */
        SBX_ERROR_CONFIGURATION,        /* OUT_OF_RANGE */
        SBX_ERROR_EXECUTION_FAILED,     /* UNIMPLEMENTED */
        SBX_ERROR_CONNECTION,           /* INTERNAL */
        SBX_ERROR_CONNECTION,           /* UNAVAILABLE */
        SBX_ERROR_CONNECTION,           /* DATA_LOSS */
        SBX_ERROR_AUTHENTICATION,       /* UNAUTHENTICATED */
    };
    for (int s = 1; s <= 16; s++)
        cr_assert_eq(cl_grpc_code(s), want[s], "gRPC status %d", s);
    cr_assert_eq(cl_grpc_code(17), SBX_ERROR_EXECUTION_FAILED);
    cr_assert_str_eq(cl_grpc_status_name(CL_GRPC_OK), "OK");
    cr_assert_str_eq(cl_grpc_status_name(CL_GRPC_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    cr_assert_str_eq(cl_grpc_status_name(CL_GRPC_UNAUTHENTICATED), "UNAUTHENTICATED");
    cr_assert_str_eq(cl_grpc_status_name(17), "(unknown status)");
    cr_assert_str_eq(cl_grpc_status_name(-1), "(unknown status)");
}

Test(grpc, channel_urls)
{
    cl_http *h = cl_http_new();
    cr_assert_not_null(h);
    cr_assert_null(cl_grpc_new(h, "ftp://127.0.0.1:1", NULL));
    cr_assert_null(cl_grpc_new(h, "127.0.0.1:1", NULL));
    cr_assert_null(cl_grpc_new(h, "http://127.0.0.1:1", "grpc://127.0.0.1:2"));
    cl_grpc *g = cl_grpc_new(h, "https://api.example.test///", "");
    cr_assert_not_null(g);
    cr_assert_str_eq(cl_grpc_url(g), "https://api.example.test");
    for (int i = 0; i < 8; i++)
        cr_assert_eq(cl_grpc_add_metadata(g, "x-test", "v"), 0);
    cr_assert_eq(cl_grpc_add_metadata(g, "x-test", "ninth"), -1);
    cl_grpc_free(g);
    cl_http_free(h);
}

/* A 127.0.0.1 port nothing listens on (bound, then closed). */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* No server: a connection error naming the host, sent once with retries 0,
 * and not of unknown outcome (nothing was sent). */
Test(grpc, no_server_is_a_connection_error)
{
    cl_http *h = cl_http_new();
    cl_retry_policy p = CL_RETRY_POLICY_DEFAULT;
    p.retries = p.rate_limit_retries = 0;
    cl_http_set_retry(h, &p);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", dead_port());
    cl_grpc *g = cl_grpc_new(h, url, NULL);
    cr_assert_not_null(g);
    cl_grpc_call call = { .method = "/pkg.Svc/Do", .req = "", .req_len = 0,
                          .idempotent = CL_UNSAFE, .what = "do it" };
    cl_grpc_resp r;
    cr_assert_eq(cl_grpc_invoke(g, NULL, &call, &r, "create", NULL), -1);
    cr_assert_eq(r.attempts, 1);
    cr_assert_eq(r.status, -1);
    cr_assert_eq(r.cut, 0);
    const cl_last_error *l = cl_last();
    cr_assert_eq(l->code, SBX_ERROR_CONNECTION, "%s", l->msg);
    cr_assert_eq(l->unknown, 0);
    char *want = NULL;
    cr_assert(asprintf(&want, "do it on %s: ", url) > 0);
    cr_assert_eq(strncmp(l->msg, want, strlen(want)), 0, "%s", l->msg);
    free(want);
    cl_grpc_resp_clear(&r);
    cl_grpc_free(g);
    cl_http_free(h);
}

/* The first URL does not answer: the call goes to the failover URL at once
 * (no backoff), and the channel stays there. */
Test(grpc, failover_is_taken_and_kept)
{
    cl_http *h = cl_http_new();
    cl_retry_policy p = CL_RETRY_POLICY_DEFAULT;
    p.retries = p.rate_limit_retries = 0;
    cl_http_set_retry(h, &p);
    char first[64], second[64];
    snprintf(first, sizeof first, "http://127.0.0.1:%d", dead_port());
    snprintf(second, sizeof second, "http://127.0.0.1:%d", dead_port());
    cl_grpc *g = cl_grpc_new(h, first, second);
    cr_assert_str_eq(cl_grpc_url(g), first);
    cl_grpc_call call = { .method = "/pkg.Svc/Do", .idempotent = CL_SAFE, .what = "do it" };
    cl_grpc_resp r;
    cr_assert_eq(cl_grpc_invoke(g, NULL, &call, &r, "op", NULL), -1);
    cr_assert_eq(r.attempts, 2);
    cr_assert_float_eq(r.waited_s, 0.0, 1e-9);
    cr_assert_str_eq(cl_grpc_url(g), second);
    cl_grpc_resp_clear(&r);
    cr_assert_eq(cl_grpc_invoke(g, NULL, &call, &r, "op", NULL), -1);
    cr_assert_eq(r.attempts, 1);
    cr_assert_str_eq(cl_grpc_url(g), second);
    cl_grpc_resp_clear(&r);
    cl_grpc_free(g);
    cl_http_free(h);
}

/* A call whose deadline has passed sends nothing: a timeout. */
Test(grpc, a_passed_deadline_sends_nothing)
{
    cl_http *h = cl_http_new();
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", dead_port());
    cl_grpc *g = cl_grpc_new(h, url, NULL);
    sbx_call_ctx ctx = { sizeof(ctx), cl_now() - 1.0, -1, NULL };
    cl_grpc_call call = { .method = "/pkg.Svc/Do", .idempotent = CL_SAFE, .what = "do it" };
    cl_grpc_resp r;
    cr_assert_eq(cl_grpc_invoke(g, &ctx, &call, &r, "op", NULL), -1);
    cr_assert_eq(r.attempts, 0);
    cr_assert_eq(cl_last()->code, SBX_ERROR_TIMEOUT);
    cr_assert_str_eq(cl_last()->msg, "do it: the call's time ran out");
    cl_grpc_resp_clear(&r);
    cl_grpc_free(g);
    cl_http_free(h);
}

/* An error made where nothing could take it, stored later: the same code
 * and message, the outcome unknown kept; a saved copy outlives the errors
 * made after it. */
Test(util, fail_from_the_last_error)
{
    cr_assert_eq(cl_setup(&test_host, "test", NULL), 0);
    cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "envd: connection reset");
    cl_outcome_unknown(NULL);
    sbx_error *err = NULL;
    cr_assert_eq(cl_fail_from(&err, cl_last(), "exec_kill"), err);
    cr_assert_not_null(err);
    cr_assert_eq(err->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(err->msg, "envd: connection reset");
    cr_assert_eq(cl_last()->unknown, 1);
    free(err);

    cl_last_error saved = *cl_last();
    cl_fail(NULL, SBX_ERROR_NOT_FOUND, "exec", "no such process");
    cr_assert_eq(cl_last()->unknown, 0);
    cr_assert_null(cl_fail_from(NULL, &saved, "exec"));
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "envd: connection reset");
    cr_assert_eq(cl_last()->unknown, 1);

    cl_fail(NULL, SBX_ERROR_TIMEOUT, "exec", "too slow");
    err = NULL;
    cl_fail_from(&err, cl_last(), "exec");
    cr_assert_eq(err->code, SBX_ERROR_TIMEOUT);
    cr_assert_eq(cl_last()->unknown, 0);
    free(err);
    cl_host = NULL;
}

/* ------------------------------------------------------------------------ */
/* is_alive through the provider's own GET (provider.h)                      */
/* ------------------------------------------------------------------------ */

static long alive_status;          /* the stand-in GET's answer status */
static const char *alive_answer;   /* its JSON, NULL: none */
static int alive_gets;             /* how often it was called */

static json_object *alive_get(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                              long *status, const char *op, sbx_error **error)
{
    (void)client;
    (void)ctx;
    (void)error;
    alive_gets++;
    cr_assert_str_eq(id, "sb-1");
    cr_assert_str_eq(op, "is_alive");
    *status = alive_status;
    return alive_answer ? json_tokener_parse(alive_answer) : NULL;
}

/* Alive for a running state and a state not given; an ended state or a
 * 404 is gone, set on the sandbox, and no GET is sent once it is; a GET
 * without an answer is -1 with the flag left alone. */
Test(provider, is_alive_by_spec_reads_the_state_and_a_404)
{
    static const char *const dead[] = { "stopped", "failed", NULL };
    static const cl_resume_spec spec = { "test", 1, "sandbox_id", alive_get, "status", dead,
                                         NULL };
    cl_sandbox *s = cl_sandbox_alloc(sizeof(*s), "sb-1");
    cr_assert_not_null(s);
    alive_status = 200;
    alive_answer = "{\"status\":\"running\"}";
    cr_assert_eq(cl_spec_is_alive(s, &spec, NULL, NULL), 1);
    alive_answer = "{\"id\":\"sb-1\"}";
    cr_assert_eq(cl_spec_is_alive(s, &spec, NULL, NULL), 1);
    alive_status = 0;
    alive_answer = NULL;
    cr_assert_eq(cl_spec_is_alive(s, &spec, NULL, NULL), -1);
    cr_assert_eq(cl_gone_get(&s->gone), 0);
    alive_status = 200;
    alive_answer = "{\"status\":\"stopped\"}";
    cr_assert_eq(cl_spec_is_alive(s, &spec, NULL, NULL), 0);
    cr_assert_eq(cl_gone_get(&s->gone), 1);
    cr_assert_eq(alive_gets, 4);
    cr_assert_eq(cl_spec_is_alive(s, &spec, NULL, NULL), 0);
    cr_assert_eq(alive_gets, 4);
    cl_sandbox_free(s);

    s = cl_sandbox_alloc(sizeof(*s), "sb-1");
    cr_assert_not_null(s);
    alive_status = 404;
    alive_answer = NULL;
    cr_assert_eq(cl_spec_is_alive(s, &spec, NULL, NULL), 0);
    cr_assert_eq(cl_gone_get(&s->gone), 1);
    cr_assert_eq(alive_gets, 5);
    cl_sandbox_free(s);
}
