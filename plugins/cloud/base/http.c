/*
 * http.c — the hosted-provider base's HTTP client (cloud.h): one libcurl
 * pool per client, requests bounded by the call context, the retry policy,
 * the mapping of statuses to error codes, and the scrubbing of secrets.
 *
 * Pool: the client's idle easy handles are kept for reuse (up to POOL_MAX,
 * the last one given back taken first), each with its own live connections
 * (curl_easy_reset keeps them), so requests one after another reuse a
 * connection (keep-alive). A curl share handle holds the DNS cache and TLS
 * sessions; not the connection cache, which libcurl does not support
 * sharing between threads that use it at once (CURLSHOPT_SHARE: under
 * twenty threads creating at once, a shared one corrupted the heap now and
 * then). HTTP/2 is asked for over TLS (ALPN; CURL_HTTP_VERSION_2TLS),
 * HTTP/1.1 otherwise.
 *
 * Retries (CASE-19): an attempt is repeated when it got 429 or 5xx, or a
 * transport error, and the request is CL_SAFE; a transport error before
 * the request could reach the server (no connection) is repeated for any
 * request. libcurl's own re-send on a new connection, when a kept-alive
 * one died under a request before any byte of its answer, is kept for
 * CL_SAFE requests and refused for CL_UNSAFE ones (cl_refuse_resend), whatever
 * their body. The wait is the answer's Retry-After (seconds or an HTTP-date,
 * taken against the answer's Date header when it has one), else the k-th
 * backoff (k from 0): equal jitter over the step
 * s = min(max_backoff_s, base_s * 2^(k+1)), half of it fixed and half
 * random, uniform in [s/2, s): [0.5, 1), [1, 2), [2, 4), then [4, 8) s
 * with the defaults. The fixed half is the floor (the first wait is never
 * below base_s: no tight loop, CASE-19 E); the random half spreads out
 * many clients refused at once. A Retry-After above max_wait_s fails at
 * once, with retry_after_s in the context: rate_limited for a 429, the
 * status's own code (connection; timeout for 504) for a 5xx that would
 * have been re-sent. A wait that passes the call's bound is never slept:
 * it ends the retries with the last answer.
 *
 * The same loop, with the same waits, re-sends a create POST carrying the
 * call's create token (token_create) after a 429, CL_UNSAFE or not,
 * counting those re-sends against rate_limit_retries apart from the
 * others (k counts each kind apart too).
 */
#include "cloud.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <json-c/json.h>

#define KEEP_MAX ((size_t)64 << 20)
#define POOL_MAX 8
#define SECRETS_MAX 8
#define EXTRA_HEADERS_MAX 4
#define CONNECT_SECS 10.0

void cl_last_set_http(long status, double retry_after_s);

struct cl_http {
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    pthread_mutex_t lock;           /* guards the idle pool and the jitter seed */
    CURL *idle[POOL_MAX];
    int nidle;
    char *auth_header;              /* "Name: value" */
    char *extra_headers[EXTRA_HEADERS_MAX]; /* "Name: value", sent with auth_header */
    int nextra;
    char *secrets[SECRETS_MAX];
    int nsecrets;
    cl_retry_policy retry;
    unsigned seed;
    cl_buf tls_ca, tls_cert, tls_key;   /* PEM blobs; empty: none */
    int tls_insecure;
    char *missing;                  /* cl_http_set_missing_credential()'s
                                     * message, or NULL */
};

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    cl_http *c = ud;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&c->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    cl_http *c = ud;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&c->share_locks[data]);
}

char **cl_http_auth_headers(const cl_http *h)
{
    char **v = calloc((size_t)h->nextra + 2, sizeof(char *));
    size_t n = 0;
    if (!v)
        return NULL;
    if (h->auth_header && !(v[n++] = strdup(h->auth_header)))
        goto fail;
    for (int i = 0; i < h->nextra; i++)
        if (!(v[n++] = strdup(h->extra_headers[i])))
            goto fail;
    return v;
fail:
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    return NULL;
}

cl_http *cl_http_new(void)
{
    cl_http *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_locks[i], NULL);
    pthread_mutex_init(&c->lock, NULL);
    c->retry = (cl_retry_policy)CL_RETRY_POLICY_DEFAULT;
    c->seed = (unsigned)(cl_now() * 1e6) ^ (unsigned)(uintptr_t)c;
    c->share = curl_share_init();
    if (c->share) {
        curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    return c;
}

void cl_http_free(cl_http *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nidle; i++)
        curl_easy_cleanup(c->idle[i]);
    if (c->share)
        curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_locks[i]);
    pthread_mutex_destroy(&c->lock);
    if (c->auth_header) {
        memset(c->auth_header, 0, strlen(c->auth_header));
        free(c->auth_header);
    }
    for (int i = 0; i < c->nsecrets; i++) {
        memset(c->secrets[i], 0, strlen(c->secrets[i]));
        free(c->secrets[i]);
    }
    for (int i = 0; i < c->nextra; i++)
        free(c->extra_headers[i]);
    if (c->tls_key.data)
        memset(c->tls_key.data, 0, c->tls_key.len);
    cl_buf_clear(&c->tls_ca);
    cl_buf_clear(&c->tls_cert);
    cl_buf_clear(&c->tls_key);
    free(c->missing);
    free(c);
}

int cl_http_set_secret(cl_http *c, const char *secret)
{
    if (!secret || strlen(secret) < 4)
        return 0;           /* too short to scrub without mangling text */
    for (int i = 0; i < c->nsecrets; i++)
        if (strcmp(c->secrets[i], secret) == 0)
            return 0;
    if (c->nsecrets == SECRETS_MAX)
        return -1;
    if (!(c->secrets[c->nsecrets] = strdup(secret)))
        return -1;
    c->nsecrets++;
    return 0;
}

int cl_http_set_missing_credential(cl_http *c, const char *message)
{
    free(c->missing);
    c->missing = message ? strdup(message) : NULL;
    return message && !c->missing ? -1 : 0;
}

int cl_http_missing_credential(const cl_http *c, const char *op, sbx_error **error)
{
    if (!c->missing)
        return 0;
    cl_fail(error, SBX_ERROR_AUTHENTICATION, op, "%s", c->missing);
    return -1;
}

int cl_http_has_auth(const cl_http *c)
{
    return c->auth_header != NULL;
}

int cl_http_set_auth(cl_http *c, const char *header, const char *value)
{
    free(c->auth_header);
    c->auth_header = NULL;
    if (!header || !value)
        return 0;
    cl_http_set_missing_credential(c, NULL);
    if (asprintf(&c->auth_header, "%s: %s", header, value) < 0) {
        c->auth_header = NULL;
        return -1;
    }
    /* "Bearer KEY": the key alone is scrubbed too. */
    const char *sp = strrchr(value, ' ');
    if (sp && cl_http_set_secret(c, sp + 1) < 0)
        return -1;
    return cl_http_set_secret(c, value);
}

/* What grpc.c takes from here: the TLS settings of cl_http_set_tls() on
 * easy handle @easy. */
void cl_http_tls_apply(cl_http *c, void *easy)
{
    CURL *h = easy;
#if LIBCURL_VERSION_NUM >= 0x074d00
    if (c->tls_ca.len) {
        struct curl_blob b = { c->tls_ca.data, c->tls_ca.len, CURL_BLOB_NOCOPY };
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    }
    if (c->tls_cert.len) {
        struct curl_blob b = { c->tls_cert.data, c->tls_cert.len, CURL_BLOB_NOCOPY };
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (c->tls_key.len) {
        struct curl_blob b = { c->tls_key.data, c->tls_key.len, CURL_BLOB_NOCOPY };
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
#endif
    if (c->tls_insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

int cl_http_set_tls(cl_http *c, const char *ca_pem, size_t ca_len, const char *cert_pem,
                    size_t cert_len, const char *key_pem, size_t key_len, int insecure)
{
#if LIBCURL_VERSION_NUM < 0x074d00
    if (ca_pem || cert_pem || key_pem)
        return -1;
#endif
    c->tls_insecure = insecure;
    if ((ca_pem && cl_buf_append(&c->tls_ca, ca_pem, ca_len) < 0)
        || (cert_pem && cl_buf_append(&c->tls_cert, cert_pem, cert_len) < 0)
        || (key_pem && cl_buf_append(&c->tls_key, key_pem, key_len) < 0))
        return -1;
    return 0;
}

int cl_http_add_header(cl_http *c, const char *header, const char *value)
{
    if (c->nextra == EXTRA_HEADERS_MAX)
        return -1;
    if (asprintf(&c->extra_headers[c->nextra], "%s: %s", header, value) < 0) {
        c->extra_headers[c->nextra] = NULL;
        return -1;
    }
    c->nextra++;
    return 0;
}

void cl_http_set_retry(cl_http *c, const cl_retry_policy *p)
{
    c->retry = *p;
}

int cl_retry_policy_from_config(json_object *config, cl_retry_policy *p, sbx_error **error)
{
    json_object *v;
    if (config && json_object_object_get_ex(config, "retries", &v)) {
        int64_t n = -1;
        if (!json_object_is_type(v, json_type_int) || (n = json_object_get_int64(v)) < 0
            || n > 100) {
            sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                   "retries: \"%s\" is not an integer from 0 to 100",
                                   json_object_to_json_string(v));
            cl_context(e, "option", "retries");
            return -1;
        }
        p->retries = (int)n;
        /* "retries": 0 is no re-send at all (CASE-19 C), a create's 429
         * included, unless rate_limit_retries says otherwise. */
        p->rate_limit_retries = (int)n;
    }
    if (config && json_object_object_get_ex(config, "rate_limit_retries", &v)) {
        int64_t n = -1;
        if (!json_object_is_type(v, json_type_int) || (n = json_object_get_int64(v)) < 0
            || n > 100) {
            sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                   "rate_limit_retries: \"%s\" is not an integer from 0 to 100",
                                   json_object_to_json_string(v));
            cl_context(e, "option", "rate_limit_retries");
            return -1;
        }
        p->rate_limit_retries = (int)n;
    }
    if (config && json_object_object_get_ex(config, "max_retry_wait_s", &v)) {
        double d = -1;
        if ((!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
            || (d = json_object_get_double(v)) < 0 || !isfinite(d)) {
            sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                   "max_retry_wait_s: \"%s\" is not a number of seconds >= 0",
                                   json_object_to_json_string(v));
            cl_context(e, "option", "max_retry_wait_s");
            return -1;
        }
        p->max_wait_s = d;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Scrubbing                                                                 */
/* ------------------------------------------------------------------------ */

/* Replaces every secret of @c in @s (in place: "[redacted]" is written only
 * where it fits, else the secret's bytes become '*'). */
static void scrub(const cl_http *c, char *s)
{
    if (!c || !s)
        return;
    for (int i = 0; i < c->nsecrets; i++) {
        size_t n = strlen(c->secrets[i]);
        char *p;
        while ((p = strstr(s, c->secrets[i])) != NULL) {
            static const char red[] = "[redacted]";
            if (n >= sizeof(red) - 1) {
                memcpy(p, red, sizeof(red) - 1);
                memmove(p + sizeof(red) - 1, p + n, strlen(p + n) + 1);
            } else {
                memset(p, '*', n);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

static CURL *pool_take(cl_http *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->nidle > 0)
        h = c->idle[--c->nidle];
    pthread_mutex_unlock(&c->lock);
    if (h)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    return h;
}

static void pool_give(cl_http *c, CURL *h, int reusable)
{
    if (!h)
        return;
    if (reusable) {
        pthread_mutex_lock(&c->lock);
        if (c->nidle < POOL_MAX) {
            c->idle[c->nidle++] = h;
            h = NULL;
        }
        pthread_mutex_unlock(&c->lock);
    }
    if (h)
        curl_easy_cleanup(h);
}

typedef struct xfer {
    const cl_req *req;
    cl_resp *resp;
    CURL *h;
    cl_bound bound;
    int got_status;
    long status;
    int sunk;           /* bytes went to the sink: the attempt cannot be repeated */
    int sink_failed;
    int source_started;
    int source_failed;
    int cancelled;
    cl_resend_guard guard; /* CL_UNSAFE: curl's own re-send refused */
    char *retry_after;
    char *date;
} xfer;

static long xfer_status(xfer *x)
{
    if (!x->got_status) {
        long st = 0;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &st);
        x->status = st;
        x->got_status = 1;
    }
    return x->status;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    long st = xfer_status(x);
    if (x->req->sink && st >= 200 && st < 300) {
        x->sunk = 1;
        if (x->req->sink(x->req->sink_ud, p, n) < 0) {
            x->sink_failed = 1;
            return 0;
        }
        return n;
    }
    if (x->resp->body.len + n > KEEP_MAX)
        return 0;
    if (cl_buf_append(&x->resp->body, p, n) < 0)
        return 0;
    return n;
}

char *cl_header_value(const char *line, size_t n, const char *name)
{
    size_t nl = strlen(name);
    if (n <= nl + 1 || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return NULL;
    const char *v = line + nl + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    return strndup(v, (size_t)(end - v));
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    char *v;
    if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        /* A new answer (after a 100 Continue, say): forget the last one's. */
        free(x->retry_after);
        free(x->date);
        x->retry_after = x->date = NULL;
    } else if ((v = cl_header_value(p, n, "Retry-After")) != NULL) {
        free(x->retry_after);
        x->retry_after = v;
    } else if ((v = cl_header_value(p, n, "Date")) != NULL) {
        free(x->date);
        x->date = v;
    } else if ((v = cl_header_value(p, n, "Content-Type")) != NULL) {
        free(x->resp->content_type);
        x->resp->content_type = v;
    } else if (x->req->keep_header
               && (v = cl_header_value(p, n, x->req->keep_header)) != NULL) {
        free(x->resp->kept_header);
        x->resp->kept_header = v;
    }
    return n;
}

static size_t on_source(char *buf, size_t size, size_t nitems, void *ud)
{
    xfer *x = ud;
    x->source_started = 1;
    ssize_t r = x->req->source(x->req->source_ud, buf, size * nitems);
    if (r < 0) {
        x->source_failed = 1;
        return CURL_READFUNC_ABORT;
    }
    return (size_t)r;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    xfer *x = ud;
    if (cl_bound_cancelled(&x->bound)) {
        x->cancelled = 1;
        return 1;
    }
    return 0;
}

/* The guard of cl_refuse_resend (cloud.h): the second request curl
 * begins in one perform is its own re-send, aborted before a byte goes. */
#if LIBCURL_VERSION_NUM >= 0x075000
static int on_prereq(void *ud, char *ip, char *local_ip, int port, int local_port)
{
    cl_resend_guard *g = ud;
    (void)ip;
    (void)local_ip;
    (void)port;
    (void)local_port;
    if (g->sends++ > 0) {
        g->refused = 1;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}
#endif

void cl_refuse_resend(void *curl, cl_resend_guard *g)
{
#if LIBCURL_VERSION_NUM >= 0x075000
    curl_easy_setopt(curl, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(curl, CURLOPT_PREREQDATA, g);
#else
    (void)g;
    curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
#endif
}

void cl_resp_clear(cl_resp *r)
{
    cl_buf_clear(&r->body);
    free(r->content_type);
    free(r->kept_header);
    memset(r, 0, sizeof(*r));
}

/* Parses an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"); -1 when not. */
static double parse_http_date(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!end) {
        memset(&tm, 0, sizeof(tm));
        end = strptime(s, "%A, %d-%b-%y %H:%M:%S GMT", &tm);   /* RFC 850 */
    }
    if (!end) {
        memset(&tm, 0, sizeof(tm));
        end = strptime(s, "%a %b %e %H:%M:%S %Y", &tm);       /* asctime */
    }
    if (!end)
        return -1;
    while (*end == ' ')
        end++;
    if (*end)
        return -1;
    return (double)timegm(&tm);
}

double cl_parse_retry_after(const char *value, double now_wall)
{
    if (!value)
        return -1;
    while (*value == ' ')
        value++;
    if (isdigit((unsigned char)*value)) {
        char *end;
        errno = 0;
        double d = strtod(value, &end);
        while (*end == ' ')
            end++;
        if (*end || errno || d < 0 || !isfinite(d))
            return -1;
        return d;
    }
    double t = parse_http_date(value);
    if (t < 0)
        return -1;
    return t > now_wall ? t - now_wall : 0;
}

sbx_error_code cl_code_of_status(long s)
{
    return s == 400 || s == 409 || s == 422 ? SBX_ERROR_CONFIGURATION
         : s == 401 || s == 403 ? SBX_ERROR_AUTHENTICATION
         : s == 404 || s == 410 ? SBX_ERROR_NOT_FOUND
         : s == 408 || s == 504 ? SBX_ERROR_TIMEOUT
         : s == 429 ? SBX_ERROR_RATE_LIMITED
         : s >= 500 && s <= 599 ? SBX_ERROR_CONNECTION
         : SBX_ERROR_EXECUTION_FAILED;
}

/* The path of @url without its query, for messages. */
static void url_path(const char *url, char *out, size_t cap)
{
    const char *p = strstr(url, "://");
    p = p ? strchr(p + 3, '/') : NULL;
    if (!p)
        p = "/";
    size_t n = strcspn(p, "?");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

/* The k-th backoff in seconds (k from 0), for every retry without a
 * Retry-After: equal jitter, uniform in [s/2, s) for the step
 * s = min(max_backoff_s, base_s * 2^(k+1)); so never below
 * min(base_s * 2^k, max_backoff_s / 2) and always below max_backoff_s.
 * Thread-safe (the seed is taken under c->lock). */
static double backoff(cl_http *c, int k)
{
    double s = c->retry.base_s * pow(2.0, k > 60 ? 61 : k + 1);
    if (s > c->retry.max_backoff_s)
        s = c->retry.max_backoff_s;
    pthread_mutex_lock(&c->lock);
    double r = (double)rand_r(&c->seed) / ((double)RAND_MAX + 1.0);
    pthread_mutex_unlock(&c->lock);
    return s * 0.5 + s * 0.5 * r;
}

/* What the gRPC layer (grpc.c) shares with a client's HTTP pool: the
 * retry policy, the scrubbing of secrets and the backoff (cloud.h). */
cl_retry_policy cl_http_retry_policy(cl_http *c)
{
    return c->retry;
}

void cl_http_scrub(const cl_http *c, char *s)
{
    scrub(c, s);
}

double cl_http_backoff(cl_http *c, int k)
{
    return backoff(c, k);
}

/* 1 when @req is a create POST whose body carries @ctx's create token (a
 * 429 to it is re-sent, see cloud.h). */
static int token_create(const sbx_call_ctx *ctx, const cl_req *req)
{
    const char *t = ctx ? ctx->create_token : NULL;
    size_t n = t ? strlen(t) : 0;
    return n && strcmp(req->method, "POST") == 0 && req->body && !req->source
           && req->body_len >= n && memmem(req->body, req->body_len, t, n) != NULL;
}

int cl_request(cl_http *c, const sbx_call_ctx *ctx, const cl_req *req, cl_resp *resp,
               const char *op, sbx_error **error)
{
    memset(resp, 0, sizeof(*resp));
    char path[512];
    url_path(req->url, path, sizeof(path));
    char whatbuf[600];
    const char *what = req->what;
    if (!what) {
        snprintf(whatbuf, sizeof(whatbuf), "%s %s", req->method, path);
        what = whatbuf;
    }
    if (!req->no_auth && cl_http_missing_credential(c, op, error) < 0)
        return -1;
    cl_bound bound = cl_bound_make(ctx, req->secs);
    int tc = token_create(ctx, req);
    int rl = 0;             /* 429s of a token create re-sent so far */
    double waited = 0;

    for (int attempt = 0;; attempt++) {
        if (bound.until && cl_bound_left(&bound) == 0) {
            sbx_error *e = cl_fail(error, SBX_ERROR_TIMEOUT, op, "%s: the call's time ran out%s",
                                   what, attempt ? " while waiting to retry" : "");
            if (attempt && !req->idempotent)
                cl_outcome_unknown(e);
            return -1;
        }
        if (cl_bound_cancelled(&bound)) {
            sbx_error *e = cl_fail(error, cl_bound_cancel_code(&bound), op, "%s: cancelled", what);
            if (attempt && !req->idempotent)
                cl_outcome_unknown(e);
            return -1;
        }
        CURL *h = pool_take(c);
        if (!h) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "%s: cannot make a curl handle", what);
            return -1;
        }
        cl_buf_clear(&resp->body);
        free(resp->content_type);
        resp->content_type = NULL;
        free(resp->kept_header);
        resp->kept_header = NULL;
        resp->status = 0;
        resp->retry_after_s = 0;
        resp->waited_s = waited;
        xfer x = { .req = req, .resp = resp, .h = h, .bound = bound };
        struct curl_slist *hdrs = NULL;
        char ctype[256];

        curl_easy_setopt(h, CURLOPT_URL, req->url);
        if (c->share)
            curl_easy_setopt(h, CURLOPT_SHARE, c->share);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 15L);
        cl_http_tls_apply(c, h);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
        double left = cl_bound_left(&bound);
        double cto = CONNECT_SECS;
        if (left >= 0 && left < cto)
            cto = left;
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(cto * 1000) + 1);
        if (left >= 0)
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(left * 1000) + 1);
        if (req->idle_secs > 0) {
            curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
            curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)ceil(req->idle_secs));
        }
        hdrs = curl_slist_append(hdrs, "Expect:");
        if (c->auth_header && !req->no_auth)
            hdrs = curl_slist_append(hdrs, c->auth_header);
        for (int i = 0; i < c->nextra && !req->no_auth; i++)
            hdrs = curl_slist_append(hdrs, c->extra_headers[i]);
        for (size_t i = 0; req->headers && req->headers[i]; i++)
            hdrs = curl_slist_append(hdrs, req->headers[i]);
        const char *ct = req->content_type;
        if (!ct && req->body)
            ct = "application/json";
        if (ct) {
            snprintf(ctype, sizeof(ctype), "Content-Type: %s", ct);
            hdrs = curl_slist_append(hdrs, ctype);
        }
        if (req->source) {
            curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
            curl_easy_setopt(h, CURLOPT_READFUNCTION, on_source);
            curl_easy_setopt(h, CURLOPT_READDATA, &x);
            if (req->source_len >= 0)
                curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->source_len);
        } else if (req->body || strcmp(req->method, "POST") == 0
                   || strcmp(req->method, "PUT") == 0 || strcmp(req->method, "PATCH") == 0) {
            curl_easy_setopt(h, CURLOPT_POST, 1L);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body ? (const char *)req->body : "");
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                             (curl_off_t)(req->body ? req->body_len : 0));
            if (strcmp(req->method, "POST") != 0)
                curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
        } else if (strcmp(req->method, "GET") != 0) {
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
        }
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        if (!req->idempotent)
            cl_refuse_resend(h, &x.guard);

        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
        long connects = 0;
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
        curl_off_t sent = 0;
        curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &sent);
        curl_slist_free_all(hdrs);
        pool_give(c, h, rc == CURLE_OK);
        resp->attempts = attempt + 1;
        double now_wall = x.date ? parse_http_date(x.date) : -1;
        if (now_wall < 0)
            now_wall = cl_wallclock();
        double ra = cl_parse_retry_after(x.retry_after, now_wall);
        free(x.retry_after);
        free(x.date);
        resp->retry_after_s = ra > 0 ? ra : 0;

        if (rc == CURLE_OK) {
            long s = resp->status;
            /* A token create's 429: a refusal, re-sent on a count of its own. */
            int rate = s == 429 && tc && !x.sunk;
            int retryable = rate || ((s == 429 || (s >= 500 && s <= 599 && !req->answers_final))
                                     && req->idempotent && !x.sunk && !x.source_started
                                     && s != req->final_status);
            if (s == 429 && ra > c->retry.max_wait_s) {
                cl_fail_status(c, error, SBX_ERROR_RATE_LIMITED, resp, op, what);
                return -1;
            }
            /* A 5xx that would be re-sent after a wait past the cap: its
             * own code at once (connection; timeout for 504), the wait in
             * the context, rather than sleeping it out on every re-send. */
            if (s >= 500 && retryable && !rate && ra > c->retry.max_wait_s) {
                cl_fail_status(c, error, CL_CODE_BY_STATUS, resp, op, what);
                return -1;
            }
            if (!req->idempotent && (s >= 500 || s == 408))
                resp->maybe_acted = 1;
            int limit = req->once ? 0 : rate ? c->retry.rate_limit_retries : c->retry.retries;
            if (!retryable || (rate ? rl : attempt - rl) >= limit)
                return 0;
            double wait = ra >= 0 && (s == 429 || ra > 0) ? ra
                        : backoff(c, rate ? rl : attempt - rl);
            double l = cl_bound_left(&bound);
            if (l >= 0 && wait >= l)
                return 0;       /* no time to wait: the last answer stands */
            CL_LOG(SBX_LOG_DEBUG, "%s: HTTP %ld, retrying in %.2f s (re-send %d of %d)", what, s,
                   wait, (rate ? rl : attempt - rl) + 1, limit);
            if (rate)
                rl++;
            if (cl_sleep(wait, bound.cancel_fd)) {
                cl_fail(error, cl_bound_cancel_code(&bound), op, "%s: cancelled", what);
                return -1;
            }
            waited += wait;
            continue;
        }

        /* No usable answer. */
        /* (A connect that failed when curl was re-sending by itself came
         * after a first send: x.guard.sends counts them for CL_UNSAFE requests.) */
        int not_sent = (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST
                        || rc == CURLE_COULDNT_RESOLVE_PROXY) && x.guard.sends == 0;
        if (x.sink_failed || x.source_failed) {
            sbx_error *e = cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: transfer aborted", what);
            if (!req->idempotent)
                cl_outcome_unknown(e);
            return -1;
        }
        if (x.cancelled) {
            sbx_error *e = cl_fail(error, cl_bound_cancel_code(&bound), op, "%s: cancelled", what);
            if (!req->idempotent)
                cl_outcome_unknown(e);
            return -1;
        }
        int may_repeat = not_sent || (req->idempotent && !x.sunk && !x.source_started);
        if (rc == CURLE_OPERATION_TIMEDOUT && bound.until && cl_bound_left(&bound) < 0.01)
            may_repeat = 0;
        if (may_repeat && !req->once && attempt - rl < c->retry.retries) {
            double wait = backoff(c, attempt - rl);
            double l = cl_bound_left(&bound);
            if (l < 0 || wait < l) {
                CL_LOG(SBX_LOG_DEBUG, "%s: %s, retrying in %.2f s", what, curl_easy_strerror(rc),
                       wait);
                if (cl_sleep(wait, bound.cancel_fd)) {
                    cl_fail(error, cl_bound_cancel_code(&bound), op, "%s: cancelled", what);
                    return -1;
                }
                waited += wait;
                continue;
            }
        }
        sbx_error *e;
        if (rc == CURLE_OPERATION_TIMEDOUT) {
            double idle = req->idle_secs;
            if (idle > 0 && (!bound.until || cl_bound_left(&bound) > 0.01))
                e = cl_fail(error, SBX_ERROR_TIMEOUT, op,
                            "%s: no byte came for %.0f s", what, idle);
            else
                e = cl_fail(error, SBX_ERROR_TIMEOUT, op, "%s: no answer in time", what);
        } else {
            char host[256];
            const char *p = strstr(req->url, "://");
            p = p ? p + 3 : req->url;
            size_t n = strcspn(p, "/");
            if (n >= sizeof(host))
                n = sizeof(host) - 1;
            memcpy(host, p, n);
            host[n] = '\0';
            /* The connection lost before an answer, and a request curl
             * would have sent again (unsafe) or could not (a streamed
             * body): the cut is what is reported. */
            const char *why = x.guard.refused || rc == CURLE_SEND_FAIL_REWIND
                            ? "the connection was lost before an answer came"
                            : curl_easy_strerror(rc);
            e = cl_fail(error, SBX_ERROR_CONNECTION, op, "%s on %s: %s", what, host, why);
            cl_context(e, "host", host);
        }
        if (!not_sent && !req->idempotent)
            cl_outcome_unknown(e);
        resp->lost = !not_sent;
        (void)connects;
        (void)sent;
        return -1;
    }
}

char *cl_resp_message(cl_http *c, const cl_resp *r)
{
    const char *text = r->body.data ? r->body.data : "";
    json_object *j = r->body.len ? json_tokener_parse(text) : NULL;
    const char *m = cl_json_str(j, "message");
    if (!m)
        m = cl_json_str(j, "error");
    if (!m)
        m = cl_json_str(cl_json_path(j, "error", NULL), "message");
    if (!m)
        m = cl_json_str(j, "detail");
    char *msg = strdup(m ? m : text);
    json_object_put(j);
    if (!msg)
        return NULL;
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == ' ')
        msg[--n] = '\0';
    if (n > 1024)
        strcpy(msg + 1021, "...");
    scrub(c, msg);
    return msg;
}

sbx_error *cl_fail_status(cl_http *c, sbx_error **error, sbx_error_code code, const cl_resp *r,
                          const char *op, const char *what)
{
    char *msg = cl_resp_message(c, r);
    if (code == CL_CODE_BY_STATUS)
        code = cl_code_of_status(r->status);
    sbx_error *err;
    if (r->retry_after_s > 0)
        err = cl_fail(error, code, op, "%s: %s (HTTP %ld; the provider asks to wait %.0f s)",
                      what, msg && *msg ? msg : "no message", r->status, r->retry_after_s);
    else
        err = cl_fail(error, code, op, "%s: %s (HTTP %ld)", what,
                      msg && *msg ? msg : "no message", r->status);
    cl_last_set_http(r->status, r->retry_after_s);
    char st[32];
    snprintf(st, sizeof(st), "%ld", r->status);
    cl_context(err, "http_status", st);
    if (r->retry_after_s > 0 || code == SBX_ERROR_RATE_LIMITED) {
        snprintf(st, sizeof(st), "%g", r->retry_after_s);
        cl_context(err, "retry_after_s", st);
    }
    if (r->attempts > 1) {
        snprintf(st, sizeof(st), "%d", r->attempts);
        cl_context(err, "attempts", st);
        snprintf(st, sizeof(st), "%.3f", r->waited_s);
        cl_context(err, "waited_s", st);
    }
    if (r->maybe_acted)
        cl_outcome_unknown(err);
    free(msg);
    return err;
}

json_object *cl_resp_json(const cl_resp *r, const char *op, const char *what, sbx_error **error)
{
    json_object *j = r->body.len ? json_tokener_parse(r->body.data) : NULL;
    if (!j)
        cl_fail(error, SBX_ERROR_CONNECTION, op,
                "%s: the provider answered HTTP %ld with a body that is not JSON", what,
                r->status);
    return j;
}
