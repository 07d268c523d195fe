/*
 * grpc.c — the hosted-provider base's gRPC client (cloud.h): unary calls
 * and server streams over HTTP/2 through libcurl, for providers that have
 * no REST API (Modal). The gRPC over HTTP/2 wire form is grpc/grpc
 * doc/PROTOCOL-HTTP2.md: a POST to /SERVICE/METHOD, "content-type:
 * application/grpc", "te: trailers", length-prefixed messages, and the
 * call's status in the grpc-status / grpc-message trailers.
 */
#include "cloud.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#define GRPC_METADATA_MAX 8
#define GRPC_MSG_MAX ((size_t)64 << 20)
#define GRPC_CONNECT_SECS 10.0
#define GRPC_IDLE_MAX 8         /* easy handles kept for reuse per channel */

struct cl_grpc {
    cl_http *http;
    char *url;
    char *failover;
    int failed_over;
    pthread_mutex_t lock;       /* guards failed_over, idle and nidle */
    /* DNS and TLS sessions are shared by the channel's calls; connections
     * are not shared between easy handles: libcurl 7.88 breaks an h2c
     * (prior knowledge) connection taken from a shared cache by another
     * easy handle ("Error in the HTTP2 framing layer"). Connections are
     * reused through the easy handles instead: a call takes an idle handle
     * of the channel (curl_easy_reset keeps its live connection), and a
     * call that ended cleanly gives it back, so sequential calls go over
     * one connection and only calls at once open more (at most
     * GRPC_IDLE_MAX are kept). Over TLS only (https://, HTTP/2 by ALPN):
     * libcurl 7.88.1 (Debian 12's) sends nothing at all on an h2c
     * connection it re-uses, even from the same easy handle (curl
     * --http2-prior-knowledge URL --next --http2-prior-knowledge URL: the
     * second transfer logs "Re-using existing connection" and ends with no
     * request sent), so an http:// channel opens a connection per call. */
    CURL *idle[GRPC_IDLE_MAX];
    int nidle;
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    char *md[GRPC_METADATA_MAX];
    int nmd;
};

static char *trimmed_url(const char *u)
{
    if (!u || (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0))
        return NULL;
    char *s = strdup(u);
    if (s) {
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/')
            s[--n] = '\0';
    }
    return s;
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    cl_grpc *g = ud;
    (void)h;
    (void)access;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&g->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    cl_grpc *g = ud;
    (void)h;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&g->share_locks[data]);
}

/* An easy handle for one call: an idle one of @g's (its options reset,
 * its live connection kept), else a new one. NULL on no memory. */
static CURL *handle_take(cl_grpc *g)
{
    CURL *h = NULL;
    pthread_mutex_lock(&g->lock);
    if (g->nidle > 0)
        h = g->idle[--g->nidle];
    pthread_mutex_unlock(&g->lock);
    if (h)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    return h;
}

/* Gives @h back after a call: kept for the next call (with its connection)
 * when @reuse and there is room, else cleaned up. */
static void handle_give(cl_grpc *g, CURL *h, int reuse)
{
    if (reuse) {
        pthread_mutex_lock(&g->lock);
        if (g->nidle < GRPC_IDLE_MAX) {
            g->idle[g->nidle++] = h;
            h = NULL;
        }
        pthread_mutex_unlock(&g->lock);
    }
    if (h)
        curl_easy_cleanup(h);
}

cl_grpc *cl_grpc_new(cl_http *http, const char *url, const char *failover_url)
{
    cl_grpc *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->http = http;
    g->url = trimmed_url(url);
    if (failover_url && *failover_url)
        g->failover = trimmed_url(failover_url);
    if (!g->url || (failover_url && *failover_url && !g->failover)) {
        free(g->url);
        free(g->failover);
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->lock, NULL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&g->share_locks[i], NULL);
    if ((g->share = curl_share_init()) != NULL) {
        curl_share_setopt(g->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(g->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(g->share, CURLSHOPT_USERDATA, g);
        curl_share_setopt(g->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(g->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    return g;
}

void cl_grpc_free(cl_grpc *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->nmd; i++) {
        memset(g->md[i], 0, strlen(g->md[i]));
        free(g->md[i]);
    }
    for (int i = 0; i < g->nidle; i++)
        curl_easy_cleanup(g->idle[i]);
    if (g->share)
        curl_share_cleanup(g->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&g->share_locks[i]);
    pthread_mutex_destroy(&g->lock);
    free(g->url);
    free(g->failover);
    free(g);
}

int cl_grpc_add_metadata(cl_grpc *g, const char *name, const char *value)
{
    if (g->nmd == GRPC_METADATA_MAX)
        return -1;
    if (asprintf(&g->md[g->nmd], "%s: %s", name, value) < 0) {
        g->md[g->nmd] = NULL;
        return -1;
    }
    g->nmd++;
    return 0;
}

const char *cl_grpc_url(cl_grpc *g)
{
    pthread_mutex_lock(&g->lock);
    const char *u = g->failed_over ? g->failover : g->url;
    pthread_mutex_unlock(&g->lock);
    return u;
}

void cl_grpc_resp_clear(cl_grpc_resp *r)
{
    free(r->message);
    cl_buf_clear(&r->msg);
    memset(r, 0, sizeof(*r));
}

sbx_error_code cl_grpc_code(int s)
{
    switch (s) {
    case CL_GRPC_UNAUTHENTICATED:
    case CL_GRPC_PERMISSION_DENIED:
        return SBX_ERROR_AUTHENTICATION;
    case CL_GRPC_NOT_FOUND:
        return SBX_ERROR_NOT_FOUND;
    case CL_GRPC_RESOURCE_EXHAUSTED:
        return SBX_ERROR_RATE_LIMITED;
    case CL_GRPC_DEADLINE_EXCEEDED:
        return SBX_ERROR_TIMEOUT;
    case CL_GRPC_UNAVAILABLE:
    case CL_GRPC_CANCELLED:
    case CL_GRPC_INTERNAL:
    case CL_GRPC_UNKNOWN:
    case CL_GRPC_DATA_LOSS:
        return SBX_ERROR_CONNECTION;
    case CL_GRPC_INVALID_ARGUMENT:
    case CL_GRPC_FAILED_PRECONDITION:
    case CL_GRPC_ALREADY_EXISTS:
    case CL_GRPC_OUT_OF_RANGE:
        return SBX_ERROR_CONFIGURATION;
    default:
        return SBX_ERROR_EXECUTION_FAILED;
    }
}

const char *cl_grpc_status_name(int s)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"
    };
    return s >= 0 && s <= 16 ? names[s] : "(unknown status)";
}

/* ------------------------------------------------------------------------ */
/* One attempt                                                               */
/* ------------------------------------------------------------------------ */

typedef struct gx {
    const cl_grpc_call *call;
    cl_grpc_resp *resp;
    cl_grpc *g;
    cl_bound bound;
    unsigned char hdr[5];
    size_t hdr_len;
    cl_buf cur;             /* the message being read */
    uint32_t want;
    int in_msg;
    int bad_frame;          /* compressed or too long */
    int cancelled;
    long http_status;
    int got_status;
} gx;

static int deliver(gx *x)
{
    x->resp->messages++;
    if (x->call->on_msg) {
        if (x->call->on_msg(x->call->ud, (const uint8_t *)(x->cur.data ? x->cur.data : ""),
                            x->cur.len) < 0) {
            x->resp->aborted = 1;
            return -1;
        }
    } else {
        cl_buf_clear(&x->resp->msg);
        if (x->cur.len && cl_buf_append(&x->resp->msg, x->cur.data, x->cur.len) < 0)
            return -1;
    }
    x->cur.len = 0;
    if (x->cur.data)
        x->cur.data[0] = '\0';
    return 0;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    gx *x = ud;
    size_t n = size * nmemb, i = 0;
    while (i < n) {
        if (!x->in_msg) {
            size_t take = 5 - x->hdr_len;
            if (take > n - i)
                take = n - i;
            memcpy(x->hdr + x->hdr_len, p + i, take);
            x->hdr_len += take;
            i += take;
            if (x->hdr_len < 5)
                break;
            x->want = (uint32_t)x->hdr[1] << 24 | (uint32_t)x->hdr[2] << 16
                      | (uint32_t)x->hdr[3] << 8 | (uint32_t)x->hdr[4];
            if ((x->hdr[0] & 1u) || x->want > GRPC_MSG_MAX) {
                x->bad_frame = 1;
                return 0;
            }
            x->in_msg = 1;
            x->cur.len = 0;
        }
        size_t take = x->want - x->cur.len;
        if (take > n - i)
            take = n - i;
        if (take && cl_buf_append(&x->cur, p + i, take) < 0)
            return 0;
        i += take;
        if (x->cur.len == x->want) {
            x->in_msg = 0;
            x->hdr_len = 0;
            if (deliver(x) < 0)
                return 0;
        }
    }
    return n;
}

/* grpc-message is percent-encoded (PROTOCOL-HTTP2.md). */
static char *pct_decode(const char *s)
{
    char *o = malloc(strlen(s) + 1), *q = o;
    if (!o)
        return NULL;
    for (; *s; s++) {
        if (s[0] == '%' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2])) {
            char h[3] = { s[1], s[2], 0 };
            *q++ = (char)strtol(h, NULL, 16);
            s += 2;
        } else {
            *q++ = *s;
        }
    }
    *q = '\0';
    return o;
}

static size_t on_head(char *p, size_t size, size_t nmemb, void *ud)
{
    gx *x = ud;
    size_t n = size * nmemb;
    char *v;
    if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', n);
        x->http_status = sp ? strtol(sp + 1, NULL, 10) : 0;
    } else if ((v = cl_header_value(p, n, "grpc-status")) != NULL) {
        x->resp->status = atoi(v);
        x->got_status = 1;
        free(v);
    } else if ((v = cl_header_value(p, n, "grpc-message")) != NULL) {
        free(x->resp->message);
        x->resp->message = pct_decode(v);
        free(v);
        cl_http_scrub(x->g->http, x->resp->message);
    }
    return n;
}

static int on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    gx *x = ud;
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    if (cl_bound_cancelled(&x->bound)) {
        x->cancelled = 1;
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The call                                                                  */
/* ------------------------------------------------------------------------ */

/* Before the @k-th re-send of one kind (@why: what the last attempt got):
 * sleeps the client's k-th backoff when it fits in @bound, adding it to
 * *@waited: 1 (send again); 0 when it does not fit (the last answer
 * stands); -1 with a cancelled error when the call was cancelled during
 * the sleep. */
static int grpc_pause(cl_grpc *g, const cl_bound *bound, int k, double *waited,
                      const char *what, const char *why, const char *op, sbx_error **error)
{
    double wait = cl_http_backoff(g->http, k);
    double l = cl_bound_left(bound);
    if (l >= 0 && wait >= l)
        return 0;
    CL_LOG(SBX_LOG_DEBUG, "%s: %s, retrying in %.2f s", what, why, wait);
    if (cl_sleep(wait, bound->cancel_fd)) {
        cl_fail(error, cl_bound_cancel_code(bound), op, "%s: cancelled", what);
        return -1;
    }
    *waited += wait;
    return 1;
}

int cl_grpc_invoke(cl_grpc *g, const sbx_call_ctx *ctx, const cl_grpc_call *call,
                   cl_grpc_resp *resp, const char *op, sbx_error **error)
{
    memset(resp, 0, sizeof(*resp));
    resp->status = -1;
    if (cl_http_missing_credential(g->http, op, error) < 0)
        return -1;
    const char *what = call->what ? call->what : call->method;
    cl_retry_policy pol = cl_http_retry_policy(g->http);
    cl_bound bound = cl_bound_make(ctx, call->secs);
    int rl = 0, other = 0;
    double waited = 0;
    cl_buf body = { 0 };
    unsigned char pre[5] = { 0, (unsigned char)(call->req_len >> 24),
                             (unsigned char)(call->req_len >> 16),
                             (unsigned char)(call->req_len >> 8), (unsigned char)call->req_len };
    if (cl_buf_append(&body, pre, 5) < 0
        || (call->req_len && cl_buf_append(&body, call->req, call->req_len) < 0)) {
        cl_buf_clear(&body);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "%s: out of memory", what);
        return -1;
    }
    int rc = -1;
    for (int attempt = 0;; attempt++) {
        if (bound.until && cl_bound_left(&bound) == 0) {
            sbx_error *e = cl_fail(error, SBX_ERROR_TIMEOUT, op, "%s: the call's time ran out%s",
                                   what, attempt ? " while waiting to retry" : "");
            if (attempt && !call->idempotent)
                cl_outcome_unknown(e);
            break;
        }
        if (cl_bound_cancelled(&bound)) {
            sbx_error *e = cl_fail(error, cl_bound_cancel_code(&bound), op, "%s: cancelled", what);
            if (attempt && !call->idempotent)
                cl_outcome_unknown(e);
            break;
        }
        const char *base = cl_grpc_url(g);
        char *url = NULL;
        if (asprintf(&url, "%s%s", base, call->method) < 0)
            url = NULL;
        CURL *h = url ? handle_take(g) : NULL;
        if (!h) {
            free(url);
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "%s: cannot make a curl handle",
                    what);
            break;
        }
        free(resp->message);
        resp->message = NULL;
        cl_buf_clear(&resp->msg);
        resp->status = -1;
        resp->messages = 0;
        resp->cut = 0;
        resp->attempts = attempt + 1;
        resp->waited_s = waited;
        gx x = { .call = call, .resp = resp, .g = g, .bound = bound };
        struct curl_slist *hl = NULL;
        char tbuf[64];
        hl = curl_slist_append(hl, "Content-Type: application/grpc");
        hl = curl_slist_append(hl, "TE: trailers");
        hl = curl_slist_append(hl, "Expect:");
        hl = curl_slist_append(hl, "User-Agent: libsbx-grpc/" PACKAGE_VERSION);
        double left = cl_bound_left(&bound);
        if (left > 0) {
            snprintf(tbuf, sizeof tbuf, "grpc-timeout: %ldm", (long)(left * 1000) + 1);
            hl = curl_slist_append(hl, tbuf);
        }
        for (int i = 0; i < g->nmd; i++)
            hl = curl_slist_append(hl, g->md[i]);
        for (size_t i = 0; call->headers && call->headers[i]; i++)
            hl = curl_slist_append(hl, call->headers[i]);
        curl_easy_setopt(h, CURLOPT_URL, url);
        if (g->share)
            curl_easy_setopt(h, CURLOPT_SHARE, g->share);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, strncmp(base, "http://", 7) == 0
                         ? (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE
                         : (long)CURL_HTTP_VERSION_2TLS);
        cl_http_tls_apply(g->http, h);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 15L);
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body.len);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        /* curl's own re-send on a new connection: kept for a call safe to
         * repeat, refused for another (it may have reached the server). */
        cl_resend_guard guard = { 0, 0 };
        if (!call->idempotent)
            cl_refuse_resend(h, &guard);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_head);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xfer);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
        double cto = GRPC_CONNECT_SECS;
        if (left >= 0 && left < cto)
            cto = left;
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(cto * 1000) + 1);
        if (left >= 0)
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(left * 1000) + 50);
        CURLcode cc = curl_easy_perform(h);
        curl_slist_free_all(hl);
        /* Only a call that ended with its status leaves the connection as
         * it should be for the next one. */
        handle_give(g, h, cc == CURLE_OK && x.got_status && !resp->aborted && !x.cancelled
                          && strncmp(base, "https://", 8) == 0);
        free(url);
        cl_buf_clear(&x.cur);

        if (resp->aborted) {
            rc = -1;
            break;
        }
        if (x.cancelled) {
            sbx_error *e = cl_fail(error, cl_bound_cancel_code(&bound), op, "%s: cancelled", what);
            if (!call->idempotent)
                cl_outcome_unknown(e);
            break;
        }
        if (x.bad_frame) {
            cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: a gRPC message that is compressed or "
                    "longer than %zu bytes", what, GRPC_MSG_MAX);
            break;
        }
        int not_sent = (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST)
                       && guard.sends == 0;
        if (not_sent && g->failover) {
            pthread_mutex_lock(&g->lock);
            int first = !g->failed_over;
            g->failed_over = 1;
            pthread_mutex_unlock(&g->lock);
            if (first) {
                CL_LOG(SBX_LOG_WARNING, "%s: %s did not answer (%s); failing over to %s", what,
                       base, curl_easy_strerror(cc), g->failover);
                continue;
            }
        }
        if (cc == CURLE_OK && x.got_status) {
            int s = resp->status;
            if (s == CL_GRPC_OK) {
                rc = 0;
                break;
            }
            int rate = s == CL_GRPC_RESOURCE_EXHAUSTED && resp->messages == 0;
            int again = rate || (s == CL_GRPC_UNAVAILABLE && call->idempotent
                                 && resp->messages == 0);
            int limit = rate ? pol.rate_limit_retries : pol.retries;
            int k = rate ? rl : other;
            if (again && k < limit) {
                char why[96];
                snprintf(why, sizeof why, "gRPC %s (re-send %d of %d)", cl_grpc_status_name(s),
                         k + 1, limit);
                int p = grpc_pause(g, &bound, k, &waited, what, why, op, error);
                if (p < 0)
                    break;
                if (p > 0) {
                    if (rate)
                        rl++;
                    else
                        other++;
                    continue;
                }
            }
            sbx_error *e = cl_fail(error, cl_grpc_code(s), op, "%s: %s (gRPC %s)", what,
                                   resp->message && *resp->message ? resp->message
                                                                   : "no message",
                                   cl_grpc_status_name(s));
            char num[32];
            snprintf(num, sizeof num, "%d", s);
            cl_context(e, "grpc_status", num);
            if (resp->attempts > 1) {
                snprintf(num, sizeof num, "%d", resp->attempts);
                cl_context(e, "attempts", num);
                snprintf(num, sizeof num, "%.3f", waited);
                cl_context(e, "waited_s", num);
            }
            if (!call->idempotent && (s == CL_GRPC_DEADLINE_EXCEEDED || s == CL_GRPC_UNAVAILABLE
                                      || s == CL_GRPC_UNKNOWN || s == CL_GRPC_INTERNAL
                                      || s == CL_GRPC_CANCELLED))
                cl_outcome_unknown(e);
            break;
        }
        if (cc == CURLE_OK && x.http_status && x.http_status != 200) {
            /* Not a gRPC answer (a proxy's): its HTTP status. */
            sbx_error_code code = cl_code_of_status(x.http_status);
            if (code == SBX_ERROR_CONNECTION && call->idempotent && other < pol.retries) {
                char why[64];
                snprintf(why, sizeof why, "HTTP %ld", x.http_status);
                int p = grpc_pause(g, &bound, other, &waited, what, why, op, error);
                if (p < 0)
                    break;
                if (p > 0) {
                    other++;
                    continue;
                }
            }
            sbx_error *e = cl_fail(error, code, op, "%s: HTTP %ld with no gRPC status", what,
                                   x.http_status);
            if (!call->idempotent && x.http_status >= 500)
                cl_outcome_unknown(e);
            break;
        }
        /* No status: the transport failed, or the answer ended without its
         * trailers (a cut stream). */
        resp->cut = x.http_status == 200;
        int may_repeat = not_sent || (call->idempotent && resp->messages == 0);
        if (cc == CURLE_OPERATION_TIMEDOUT && bound.until && cl_bound_left(&bound) < 0.01)
            may_repeat = 0;
        if (may_repeat && other < pol.retries) {
            int p = grpc_pause(g, &bound, other, &waited, what,
                               cc == CURLE_OK ? "no gRPC status" : curl_easy_strerror(cc), op,
                               error);
            if (p < 0)
                break;
            if (p > 0) {
                other++;
                continue;
            }
        }
        sbx_error *e;
        if (cc == CURLE_OPERATION_TIMEDOUT)
            e = cl_fail(error, SBX_ERROR_TIMEOUT, op, "%s: no answer in time", what);
        else if (cc == CURLE_OK)
            e = cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: the answer ended without a gRPC "
                        "status", what);
        else
            e = cl_fail(error, SBX_ERROR_CONNECTION, op, "%s on %s: %s", what, base,
                        guard.refused ? "the connection was lost before an answer came"
                                      : curl_easy_strerror(cc));
        if (!not_sent && !call->idempotent)
            cl_outcome_unknown(e);
        break;
    }
    cl_buf_clear(&body);
    return rc;
}
