/*
 * stream.c — streaming readers of the hosted-provider base (cloud.h):
 * Server-Sent Events (the WHATWG EventSource parsing rules), NDJSON, and
 * Connect's enveloped stream (connectrpc.com docs/protocol.md: a flags
 * byte, a 4-byte big-endian length, the message; flag 0x02 marks the
 * end-of-stream message). Each keeps what it has of a frame between feeds,
 * so any chunking gives the same frames.
 */
#include "cloud.h"

#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static int ended_early(const char *kind, const char *op, sbx_error **error)
{
    cl_fail(error, SBX_ERROR_CONNECTION, op,
            "the %s stream ended before its final frame (the connection was cut)", kind);
    return -1;
}

/* What a frame's handler gave (a line's parser, a reader's callback): -1
 * (its error stored) fails the stream, 1 ends it, 0 goes on. -1 when it
 * failed, else 0. */
static int frame_end(int rc, int *failed, int *done)
{
    if (rc < 0) {
        *failed = 1;
        return -1;
    }
    if (rc == 1)
        *done = 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Server-Sent Events                                                        */
/* ------------------------------------------------------------------------ */

void cl_sse_init(cl_sse *s, cl_sse_fn fn, void *ud)
{
    memset(s, 0, sizeof(*s));
    s->fn = fn;
    s->ud = ud;
}

void cl_sse_clear(cl_sse *s)
{
    cl_buf_clear(&s->line);
    cl_buf_clear(&s->data);
    free(s->event);
    free(s->id);
    s->event = s->id = NULL;
}

static int sse_dispatch(cl_sse *s)
{
    int rc = 0;
    if (s->has_data) {
        /* The data lines were joined with a trailing \n each: drop the last. */
        size_t n = s->data.len;
        if (n && s->data.data[n - 1] == '\n')
            s->data.data[--n] = '\0';
        rc = s->fn(s->ud, s->event && *s->event ? s->event : "message",
                   s->data.data ? s->data.data : "", n, s->id);
    }
    s->data.len = 0;
    if (s->data.data)
        s->data.data[0] = '\0';
    s->has_data = 0;
    free(s->event);
    s->event = NULL;
    return rc;
}

static int sse_line(cl_sse *s, const char *op, sbx_error **error)
{
    const char *l = s->line.data ? s->line.data : "";
    size_t n = s->line.len;
    int rc = 0;
    if (n == 0) {
        rc = sse_dispatch(s);
    } else if (l[0] == ':') {
        /* A comment: a keepalive, never an event. */
    } else {
        const char *colon = memchr(l, ':', n);
        size_t fl = colon ? (size_t)(colon - l) : n;
        const char *v = colon ? colon + 1 : l + n;
        if (colon && *v == ' ')
            v++;
        size_t vl = (size_t)(l + n - v);
        if (fl == 4 && memcmp(l, "data", 4) == 0) {
            if (cl_buf_append(&s->data, v, vl) < 0 || cl_buf_append(&s->data, "\n", 1) < 0)
                goto oom;
            s->has_data = 1;
        } else if (fl == 5 && memcmp(l, "event", 5) == 0) {
            free(s->event);
            if (!(s->event = strndup(v, vl)))
                goto oom;
        } else if (fl == 2 && memcmp(l, "id", 2) == 0) {
            free(s->id);
            if (!(s->id = strndup(v, vl)))
                goto oom;
        }
        /* "retry" and unknown fields are ignored. */
    }
    s->line.len = 0;
    return rc;
oom:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory reading an event stream");
    return -1;
}

int cl_sse_feed(cl_sse *s, const char *p, size_t n, const char *op, sbx_error **error)
{
    if (s->failed)
        return -1;
    for (size_t i = 0; i < n && !s->done; i++) {
        char ch = p[i];
        if (ch == '\n' && s->cr) {
            s->cr = 0;      /* the \n of a \r\n */
            continue;
        }
        s->cr = ch == '\r';
        if (ch == '\r' || ch == '\n') {
            if (frame_end(sse_line(s, op, error), &s->failed, &s->done) < 0)
                return -1;
        } else if (cl_buf_append(&s->line, &ch, 1) < 0) {
            s->failed = 1;
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory reading an event stream");
            return -1;
        }
    }
    return 0;
}

int cl_sse_end(cl_sse *s, const char *op, sbx_error **error)
{
    if (s->failed)
        return -1;
    /* An event not followed by its blank line is incomplete: dropped. */
    return s->done ? 0 : ended_early("event", op, error);
}

/* ------------------------------------------------------------------------ */
/* NDJSON                                                                    */
/* ------------------------------------------------------------------------ */

void cl_ndjson_init(cl_ndjson *s, cl_ndjson_fn fn, void *ud)
{
    memset(s, 0, sizeof(*s));
    s->fn = fn;
    s->ud = ud;
}

void cl_ndjson_clear(cl_ndjson *s)
{
    cl_buf_clear(&s->line);
}

static int ndjson_line(cl_ndjson *s, const char *op, sbx_error **error)
{
    const char *l = s->line.data ? s->line.data : "";
    size_t n = s->line.len;
    while (n && (l[n - 1] == '\r' || l[n - 1] == ' ' || l[n - 1] == '\t'))
        n--;
    size_t st = 0;
    while (st < n && (l[st] == ' ' || l[st] == '\t'))
        st++;
    if (st == n) {
        s->line.len = 0;
        return 0;       /* an empty line: a keepalive */
    }
    json_tokener *tok = json_tokener_new();
    json_object *j = tok ? json_tokener_parse_ex(tok, l + st, (int)(n - st)) : NULL;
    int complete = tok && json_tokener_get_error(tok) == json_tokener_success
                   && (size_t)json_tokener_get_parse_end(tok) == n - st;
    json_tokener_free(tok);
    if (!j || !complete) {
        json_object_put(j);
        cl_fail(error, SBX_ERROR_CONNECTION, op, "a line of the NDJSON stream is not JSON: %.60s",
                l + st);
        return -1;
    }
    int rc = s->fn(s->ud, j);
    json_object_put(j);
    s->line.len = 0;
    return rc;
}

int cl_ndjson_feed(cl_ndjson *s, const char *p, size_t n, const char *op, sbx_error **error)
{
    if (s->failed)
        return -1;
    while (n && !s->done) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        if (cl_buf_append(&s->line, p, take) < 0) {
            s->failed = 1;
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory reading an NDJSON stream");
            return -1;
        }
        if (!nl)
            break;
        if (frame_end(ndjson_line(s, op, error), &s->failed, &s->done) < 0)
            return -1;
        p += take + 1;
        n -= take + 1;
    }
    return 0;
}

int cl_ndjson_end(cl_ndjson *s, const char *op, sbx_error **error)
{
    if (s->failed)
        return -1;
    /* A last line without its newline still counts. */
    if (!s->done && s->line.len
        && frame_end(ndjson_line(s, op, error), &s->failed, &s->done) < 0)
        return -1;
    return s->done ? 0 : ended_early("NDJSON", op, error);
}

/* ------------------------------------------------------------------------ */
/* Connect envelopes                                                         */
/* ------------------------------------------------------------------------ */

void cl_connect_init(cl_connect *s, cl_connect_fn fn, void *ud)
{
    memset(s, 0, sizeof(*s));
    s->fn = fn;
    s->ud = ud;
    s->max_len = (size_t)16 << 20;
}

void cl_connect_clear(cl_connect *s)
{
    cl_buf_clear(&s->msg);
}

int cl_connect_feed(cl_connect *s, const char *p, size_t n, const char *op, sbx_error **error)
{
    if (s->failed)
        return -1;
    while (n && !s->done) {
        if (s->hdr_len < 5) {
            size_t take = 5 - s->hdr_len < n ? 5 - s->hdr_len : n;
            memcpy(s->hdr + s->hdr_len, p, take);
            s->hdr_len += take;
            p += take;
            n -= take;
            if (s->hdr_len < 5)
                break;
            s->want = (uint32_t)s->hdr[1] << 24 | (uint32_t)s->hdr[2] << 16
                      | (uint32_t)s->hdr[3] << 8 | s->hdr[4];
            if (s->hdr[0] & CL_CONNECT_COMPRESSED) {
                s->failed = 1;
                cl_fail(error, SBX_ERROR_CONNECTION, op,
                        "the Connect stream sent a compressed message (none was asked for)");
                return -1;
            }
            if (s->want > s->max_len) {
                s->failed = 1;
                cl_fail(error, SBX_ERROR_CONNECTION, op,
                        "the Connect stream sent a message of %u bytes (at most %zu)", s->want,
                        s->max_len);
                return -1;
            }
            s->msg.len = 0;
            if (cl_buf_append(&s->msg, "", 0) < 0)
                goto oom;
        }
        size_t need = s->want - s->msg.len;
        size_t take = need < n ? need : n;
        if (take && cl_buf_append(&s->msg, p, take) < 0)
            goto oom;
        p += take;
        n -= take;
        if (s->msg.len == s->want) {
            unsigned flags = s->hdr[0];
            s->hdr_len = 0;
            if (frame_end(s->fn(s->ud, flags, s->msg.data, s->msg.len), &s->failed, &s->done)
                < 0)
                return -1;
        }
    }
    return 0;
oom:
    s->failed = 1;
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory reading a Connect stream");
    return -1;
}

int cl_connect_end(cl_connect *s, const char *op, sbx_error **error)
{
    if (s->failed)
        return -1;
    return s->done ? 0 : ended_early("Connect", op, error);
}

int cl_connect_envelope(const void *p, size_t n, unsigned flags, cl_buf *out)
{
    unsigned char h[5] = { (unsigned char)flags, (unsigned char)(n >> 24),
                           (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n };
    if (cl_buf_append(out, h, 5) < 0 || cl_buf_append(out, p, n) < 0)
        return -1;
    return 0;
}

int cl_connect_error(cl_http *h, json_object *msg, const char *op, const char *what,
                     sbx_error **error)
{
    json_object *e = cl_json_path(msg, "error", NULL);
    if (!e || !json_object_is_type(e, json_type_object))
        e = msg;
    const char *code = cl_json_str(e, "code");
    if (!code)
        return 0;
    const char *m = cl_json_str(e, "message");
    sbx_error_code c =
        !strcmp(code, "unauthenticated") || !strcmp(code, "permission_denied")
            ? SBX_ERROR_AUTHENTICATION
        : !strcmp(code, "not_found") ? SBX_ERROR_NOT_FOUND
        : !strcmp(code, "deadline_exceeded") ? SBX_ERROR_TIMEOUT
        : !strcmp(code, "resource_exhausted") ? SBX_ERROR_RATE_LIMITED
        : !strcmp(code, "unavailable") ? SBX_ERROR_CONNECTION
        : !strcmp(code, "invalid_argument") || !strcmp(code, "failed_precondition")
                || !strcmp(code, "already_exists")
            ? SBX_ERROR_CONFIGURATION
            : SBX_ERROR_EXECUTION_FAILED;
    cl_resp fake = { 0 };
    if (m)
        cl_buf_append(&fake.body, m, strlen(m));
    char *clean = cl_resp_message(h, &fake);
    cl_buf_clear(&fake.body);
    sbx_error *err = cl_fail(error, c, op, "%s: %s (%s)", what, clean && *clean ? clean : "no message",
                             code);
    cl_context(err, "connect_code", code);
    free(clean);
    return 1;
}

int cl_sse_sink(void *ud, const char *p, size_t n)
{
    return cl_sse_feed(ud, p, n, "exec", NULL) < 0 ? -1 : 0;
}

int cl_ndjson_sink(void *ud, const char *p, size_t n)
{
    return cl_ndjson_feed(ud, p, n, "exec", NULL) < 0 ? -1 : 0;
}

int cl_connect_sink(void *ud, const char *p, size_t n)
{
    return cl_connect_feed(ud, p, n, "exec", NULL) < 0 ? -1 : 0;
}
