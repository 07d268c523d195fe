/*
 * engine.c — the Docker Engine API client of libsbx-docker.so.
 *
 * Transport: libcurl over the unix socket (CURLOPT_UNIX_SOCKET_PATH) or
 * plain TCP, from DOCKER_HOST ("unix:///var/run/docker.sock" when unset;
 * TLS is not supported). Every path carries the version prefix /v1.NN,
 * where NN is the lower of DK_API_MAX_MINOR and the Api-Version the Engine
 * reports in GET /_ping (asked once per client).
 *
 * Connections: each client keeps a small pool of idle curl easy handles
 * (and so their live keep-alive connections) under its mutex; a request
 * takes one, resets its options and gives it back. Exec streams use their
 * own connection, hijacked with "Connection: Upgrade" (dk_hijack).
 *
 * Every request is bounded by the call's deadline and our own limit, and
 * polls the call's cancel descriptor from curl's progress callback.
 */
#include "docker.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <json-c/json.h>

/* Bounds of our own, in seconds. */
#define PING_SECS 10.0
#define CONNECT_SECS 10.0
#define HEADER_SECS 30.0

/* A kept (non-sunk) body is capped: JSON answers are small. */
#define KEEP_MAX ((size_t)64 << 20)
#define HEADER_MAX 65536

/* ------------------------------------------------------------------------ */
/* Time and bounds                                                           */
/* ------------------------------------------------------------------------ */

void dk_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

dk_bound dk_bound_make(const sbx_call_ctx *ctx, double secs)
{
    dk_bound b = { .until = secs > 0 ? cl_now() + secs : 0, .cancel_fd = -1 };
    if (ctx && ctx->struct_size >= offsetof(sbx_call_ctx, cancel_fd) + sizeof(int)) {
        if (ctx->deadline > 0) {
            b.deadline = ctx->deadline;
            if (!b.until || ctx->deadline < b.until)
                b.until = ctx->deadline;
        }
        b.cancel_fd = ctx->cancel_fd;
    }
    return b;
}

int dk_bound_ms(const dk_bound *b, int cap_ms)
{
    if (!b || !b->until)
        return cap_ms;
    double left = (b->until - cl_now()) * 1000.0;
    int ms = left <= 0 ? 0 : left >= INT_MAX - 1 ? INT_MAX - 1 : (int)left + 1;
    return cap_ms >= 0 && ms > cap_ms ? cap_ms : ms;
}

int dk_bound_cancelled(const dk_bound *b)
{
    if (!b || b->cancel_fd < 0)
        return 0;
    struct pollfd p = { .fd = b->cancel_fd, .events = POLLIN };
    return poll(&p, 1, 0) > 0;
}

sbx_error *dk_fail_bound(sbx_error **error, const dk_bound *b, const char *op,
                         const char *what)
{
    sbx_error *err;
    if (dk_bound_cancelled(b))
        err = cl_fail(error, SBX_ERROR_TIMEOUT, op, "call cancelled during %s", what);
    else
        err = cl_fail(error, SBX_ERROR_TIMEOUT, op, "timed out during %s", what);
    cl_outcome_unknown(err);
    return err;
}

int dk_write_all(int fd, const void *p, size_t n, int stop_fd, const dk_bound *b)
{
    const char *s = p;
    struct stat st;
    size_t chunk = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) ? PIPE_BUF : (size_t)1 << 16;
    while (n > 0) {
        struct pollfd pf[3] = { { .fd = fd, .events = POLLOUT } };
        int np = 1;
        if (stop_fd >= 0)
            pf[np++] = (struct pollfd){ .fd = stop_fd, .events = POLLIN };
        int ci = -1;
        if (b && b->cancel_fd >= 0) {
            ci = np;
            pf[np++] = (struct pollfd){ .fd = b->cancel_fd, .events = POLLIN };
        }
        int ms = dk_bound_ms(b, -1);
        int r = poll(pf, (nfds_t)np, ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if ((stop_fd >= 0 && pf[1].revents) || (ci >= 0 && pf[ci].revents)) {
            errno = ECANCELED;
            return -1;
        }
        if (r == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (pf[0].revents & (POLLERR | POLLNVAL)) {
            errno = EPIPE;
            return -1;
        }
        ssize_t w = write(fd, s, n < chunk ? n : chunk);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

void dk_sigpipe_block(sigset_t *old)
{
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, old);
}

void dk_sigpipe_restore(const sigset_t *old)
{
    if (!sigismember(old, SIGPIPE)) {
        sigset_t pending, pipe_only;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
            struct timespec zero = { 0, 0 };
            sigtimedwait(&pipe_only, NULL, &zero);
        }
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}


/* ------------------------------------------------------------------------ */
/* Transport                                                                 */
/* ------------------------------------------------------------------------ */

int dk_engine_init(struct sbx_plugin_client *c, const char *docker_host, sbx_error **error)
{
    const char *h = docker_host && *docker_host ? docker_host : "unix:///var/run/docker.sock";
    c->host_shown = strdup(h);
    if (!c->host_shown)
        goto nomem;
    if (strncmp(h, "unix://", 7) == 0) {
        const char *path = h + 7;
        if (path[0] != '/') {
            sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                     "DOCKER_HOST \"%s\": the socket path must be absolute", h);
            cl_context(err, "docker_host", h);
            return -1;
        }
        c->sock = strdup(path);
        c->base = strdup("http://localhost");
        c->host_header = strdup("localhost");
    } else if (strncmp(h, "tcp://", 6) == 0) {
        const char *hp = h + 6;
        size_t n = strcspn(hp, "/");
        if (n == 0 || !memchr(hp, ':', n)) {
            sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                     "DOCKER_HOST \"%s\": expected tcp://HOST:PORT", h);
            cl_context(err, "docker_host", h);
            return -1;
        }
        const char *tls = getenv("DOCKER_TLS_VERIFY");
        if (tls && *tls) {
            sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                     "DOCKER_HOST \"%s\" with DOCKER_TLS_VERIFY: TLS to the "
                                     "Docker Engine is not supported by this backend", h);
            cl_context(err, "docker_host", h);
            return -1;
        }
        if (asprintf(&c->base, "http://%.*s", (int)n, hp) < 0)
            c->base = NULL;
        c->host_header = strndup(hp, n);
    } else {
        sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                 "DOCKER_HOST \"%s\" is not supported (use unix:///PATH or "
                                 "tcp://HOST:PORT)", h);
        cl_context(err, "docker_host", h);
        return -1;
    }
    if (!c->base || !c->host_header || (strncmp(h, "unix://", 7) == 0 && !c->sock))
        goto nomem;
    pthread_mutex_init(&c->lock, NULL);
    return 0;
nomem:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
    return -1;
}

void dk_engine_free(struct sbx_plugin_client *c)
{
    for (int i = 0; i < c->nidle; i++)
        curl_easy_cleanup(c->idle[i]);
    c->nidle = 0;
    pthread_mutex_destroy(&c->lock);
    free(c->host_shown);
    free(c->sock);
    free(c->base);
    free(c->host_header);
}

static CURL *pool_take(struct sbx_plugin_client *c)
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

static void pool_give(struct sbx_plugin_client *c, CURL *h, int reusable)
{
    if (!h)
        return;
    if (reusable) {
        pthread_mutex_lock(&c->lock);
        if (c->nidle < DK_POOL_MAX) {
            c->idle[c->nidle++] = h;
            h = NULL;
        }
        pthread_mutex_unlock(&c->lock);
    }
    if (h)
        curl_easy_cleanup(h);
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct xfer {
    const dk_req *req;
    dk_resp *resp;
    CURL *h;
    dk_bound bound;
    int sink_failed;
    int source_failed;
    int cancelled;
    int got_status;
    long status;
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



static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    char *v;
    if ((v = cl_header_value(p, n, "Api-Version")) != NULL) {
        free(x->resp->api_version);
        x->resp->api_version = v;
    } else if ((v = cl_header_value(p, n, "X-Docker-Container-Path-Stat")) != NULL) {
        free(x->resp->path_stat);
        cl_buf stat = { 0 };
        if (cl_base64_decode(v, strlen(v), &stat) < 0)
            cl_buf_clear(&stat);
        x->resp->path_stat = stat.data;
        free(v);
    }
    return n;
}

static size_t on_source(char *buf, size_t size, size_t nitems, void *ud)
{
    xfer *x = ud;
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
    if (dk_bound_cancelled(&x->bound)) {
        x->cancelled = 1;
        return 1;
    }
    return 0;
}

void dk_resp_clear(dk_resp *r)
{
    cl_buf_clear(&r->body);
    free(r->path_stat);
    free(r->api_version);
    memset(r, 0, sizeof(*r));
}

int dk_request(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const dk_req *req,
               dk_resp *resp, const char *op, sbx_error **error)
{
    memset(resp, 0, sizeof(*resp));
    if (!req->unversioned && dk_engine_ready(c, ctx, op, error) < 0)
        return -1;

    xfer x = { .req = req, .resp = resp, .bound = dk_bound_make(ctx, req->secs) };
    if (x.bound.until && dk_bound_ms(&x.bound, -1) == 0) {
        dk_fail_bound(error, &x.bound, op, req->path);
        return -1;
    }
    CURL *h = pool_take(c);
    if (!h) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot make a curl handle");
        return -1;
    }
    x.h = h;
    char *url;
    int minor;
    pthread_mutex_lock(&c->lock);
    minor = c->api_minor;
    pthread_mutex_unlock(&c->lock);
    if ((req->unversioned ? asprintf(&url, "%s%s", c->base, req->path)
                          : asprintf(&url, "%s/v1.%d%s", c->base, minor, req->path)) < 0) {
        pool_give(c, h, 0);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    struct curl_slist *hdrs = NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (c->sock)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->sock);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(CONNECT_SECS * 1000));
    int ms = dk_bound_ms(&x.bound, -1);
    if (ms >= 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(ms ? ms : 1));
    /* No "Expect: 100-continue" round trip on uploads. */
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (req->source) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_source);
        curl_easy_setopt(h, CURLOPT_READDATA, &x);
        if (req->source_len >= 0)
            curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->source_len);
        hdrs = curl_slist_append(hdrs, "Content-Type: application/x-tar");
    } else if (req->body) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        if (strcmp(req->method, "POST") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    } else if (strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    } else if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_slist_free_all(hdrs);
    free(url);
    pool_give(c, h, rc == CURLE_OK);
    if (rc == CURLE_OK)
        return 0;

    sbx_error *err = NULL;
    if (x.sink_failed || x.source_failed) {
        /* The sink or source stored its own error; else a generic one. */
        err = cl_fail(error, SBX_ERROR_CONNECTION, op, "%s %s: transfer aborted", req->method,
                      req->path);
    } else if (x.cancelled || rc == CURLE_OPERATION_TIMEDOUT) {
        err = dk_fail_bound(error, &x.bound, op, req->path);
    } else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) {
        err = cl_fail(error, SBX_ERROR_CONNECTION, op,
                      "cannot reach the Docker Engine at %s: %s (is dockerd running?)",
                      c->host_shown, curl_easy_strerror(rc));
        cl_context(err, "docker_host", c->host_shown);
    } else {
        err = cl_fail(error, SBX_ERROR_CONNECTION, op, "%s %s on the Docker Engine at %s: %s",
                      req->method, req->path, c->host_shown, curl_easy_strerror(rc));
        cl_context(err, "docker_host", c->host_shown);
        if (req->outcome_unknown_on_fail)
            cl_outcome_unknown(err);
    }
    return -1;
}

char *dk_resp_message(const dk_resp *r)
{
    const char *text = r->body.data ? r->body.data : "";
    json_object *j = r->body.len ? json_tokener_parse(text) : NULL, *m;
    char *msg;
    if (j && json_object_is_type(j, json_type_object) && json_object_object_get_ex(j, "message", &m)
        && json_object_is_type(m, json_type_string))
        msg = strdup(json_object_get_string(m));
    else
        msg = strdup(text);
    json_object_put(j);
    if (!msg)
        return NULL;
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    if (n > 1024)
        strcpy(msg + 1021, "...");
    return msg;
}

sbx_error *dk_fail_resp(sbx_error **error, sbx_error_code code, const dk_resp *r,
                        const char *op, const char *what)
{
    char *msg = dk_resp_message(r);
    if (code == DK_CODE_BY_STATUS) {
        long s = r->status;
        code = s == 400 || s == 409 || s == 422 ? SBX_ERROR_CONFIGURATION
             : s == 401 || s == 403 ? SBX_ERROR_AUTHENTICATION
             : s == 404 ? SBX_ERROR_NOT_FOUND
             : s == 408 || s == 504 ? SBX_ERROR_TIMEOUT
             : s == 429 ? SBX_ERROR_RATE_LIMITED
             : s >= 500 && s <= 599 ? SBX_ERROR_CONNECTION
             : SBX_ERROR_EXECUTION_FAILED;
    }
    sbx_error *err = cl_fail(error, code, op, "%s: %s (HTTP %ld)", what,
                             msg && *msg ? msg : "no message", r->status);
    char st[32];
    snprintf(st, sizeof(st), "%ld", r->status);
    cl_context(err, "http_status", st);
    free(msg);
    return err;
}

json_object *dk_resp_json(const dk_resp *r, const char *op, sbx_error **error)
{
    json_object *j = r->body.len ? json_tokener_parse(r->body.data) : NULL;
    if (!j)
        cl_fail(error, SBX_ERROR_CONNECTION, op,
                "the Docker Engine answered HTTP %ld with a body that is not JSON", r->status);
    return j;
}

int dk_engine_ready(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *op,
                    sbx_error **error)
{
    pthread_mutex_lock(&c->lock);
    int minor = c->api_minor;
    pthread_mutex_unlock(&c->lock);
    if (minor > 0)
        return 0;
    dk_req req = { .method = "GET", .path = "/_ping", .unversioned = 1, .secs = PING_SECS };
    dk_resp r;
    if (dk_request(c, ctx, &req, &r, op, error) < 0)
        return -1;
    if (r.status != 200) {
        sbx_error *err = dk_fail_resp(error, SBX_ERROR_CONNECTION, &r, op,
                                      "the Docker Engine did not answer /_ping");
        cl_context(err, "docker_host", c->host_shown);
        dk_resp_clear(&r);
        return -1;
    }
    minor = DK_API_MAX_MINOR;
    if (r.api_version) {
        unsigned maj = 0, min = 0;
        if (sscanf(r.api_version, "%u.%u", &maj, &min) != 2 || maj != 1) {
            sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                     "the Docker Engine at %s reports API version \"%s\", "
                                     "which this backend does not understand",
                                     c->host_shown, r.api_version);
            cl_context(err, "api_version", r.api_version);
            dk_resp_clear(&r);
            return -1;
        }
        if ((int)min < DK_API_MIN_MINOR) {
            sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                     "the Docker Engine at %s speaks API %s; this backend "
                                     "needs 1.%d or newer", c->host_shown, r.api_version,
                                     DK_API_MIN_MINOR);
            cl_context(err, "api_version", r.api_version);
            dk_resp_clear(&r);
            return -1;
        }
        if ((int)min < minor)
            minor = (int)min;
    }
    dk_resp_clear(&r);
    pthread_mutex_lock(&c->lock);
    c->api_minor = minor;
    pthread_mutex_unlock(&c->lock);
    CL_LOG(SBX_LOG_DEBUG, "Docker Engine at %s: using API 1.%d", c->host_shown, minor);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Hijacked connections                                                      */
/* ------------------------------------------------------------------------ */

/* Waits for @events on @fd within @b. 1 ready, 0 expired, -1 cancelled. */
static int wait_fd(int fd, short events, const dk_bound *b)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = events },
                               { .fd = b->cancel_fd, .events = POLLIN } };
        int r = poll(p, b->cancel_fd >= 0 ? 2 : 1, dk_bound_ms(b, -1));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (b->cancel_fd >= 0 && p[1].revents)
            return -1;
        if (r == 0)
            return 0;
        return 1;
    }
}

void dk_conn_close(dk_conn *conn)
{
    if (conn->h)
        curl_easy_cleanup(conn->h);    /* closes the socket */
    free(conn->pre);
    memset(conn, 0, sizeof(*conn));
    conn->fd = -1;
}

int dk_hijack(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *path,
              const char *json, dk_conn *conn, const char *op, sbx_error **error)
{
    memset(conn, 0, sizeof(*conn));
    conn->fd = -1;
    if (dk_engine_ready(c, ctx, op, error) < 0)
        return -1;
    dk_bound b = dk_bound_make(ctx, HEADER_SECS);
    char *url = NULL, *reqtext = NULL;
    cl_buf in = { 0 };
    int rc = -1;
    pthread_mutex_lock(&c->lock);
    int minor = c->api_minor;
    pthread_mutex_unlock(&c->lock);

    CURL *h = curl_easy_init();
    if (!h || asprintf(&url, "%s/", c->base) < 0) {
        url = NULL;
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    conn->h = h;
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (c->sock)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->sock);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    int ms = dk_bound_ms(&b, (int)(CONNECT_SECS * 1000));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(ms ? ms : 1));
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        sbx_error *err = cl_fail(error, SBX_ERROR_CONNECTION, op,
                                 "cannot reach the Docker Engine at %s: %s",
                                 c->host_shown, curl_easy_strerror(cc));
        cl_context(err, "docker_host", c->host_shown);
        goto out;
    }
    curl_socket_t s = CURL_SOCKET_BAD;
    if (curl_easy_getinfo(h, CURLINFO_ACTIVESOCKET, &s) != CURLE_OK || s == CURL_SOCKET_BAD) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "no socket to the Docker Engine");
        goto out;
    }
    conn->fd = (int)s;

    size_t jl = strlen(json);
    int n = asprintf(&reqtext,
                     "POST /v1.%d%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: libsbx-docker\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n%s",
                     minor, path, c->host_header, jl, json);
    if (n < 0) {
        reqtext = NULL;
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    size_t off = 0;
    while (off < (size_t)n) {
        ssize_t w = send(conn->fd, reqtext + off, (size_t)n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int wr = wait_fd(conn->fd, POLLOUT, &b);
            if (wr <= 0) {
                dk_fail_bound(error, &b, op, "exec start");
                goto out;
            }
            continue;
        }
        cl_fail(error, SBX_ERROR_CONNECTION, op, "sending to the Docker Engine: %s",
                strerror(errno));
        goto out;
    }

    /* The answer's headers. */
    char *end = NULL;
    while (!end) {
        char tmp[4096];
        ssize_t r = recv(conn->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
        if (r > 0) {
            if (cl_buf_append(&in, tmp, (size_t)r) < 0) {
                cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                goto out;
            }
            end = strstr(in.data, "\r\n\r\n");
            if (!end && in.len > HEADER_MAX) {
                cl_fail(error, SBX_ERROR_CONNECTION, op,
                        "the Docker Engine sent more than %d bytes of headers", HEADER_MAX);
                goto out;
            }
            continue;
        }
        if (r == 0) {
            cl_fail(error, SBX_ERROR_CONNECTION, op,
                    "the Docker Engine closed the connection before answering exec start");
            goto out;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            cl_fail(error, SBX_ERROR_CONNECTION, op, "reading from the Docker Engine: %s",
                    strerror(errno));
            goto out;
        }
        int wr = wait_fd(conn->fd, POLLIN, &b);
        if (wr <= 0) {
            dk_fail_bound(error, &b, op, "exec start");
            goto out;
        }
    }
    int status = 0;
    if (sscanf(in.data, "HTTP/1.%*d %d", &status) != 1) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "the Docker Engine answered \"%.40s\"",
                in.data);
        goto out;
    }
    size_t hdr_len = (size_t)(end - in.data) + 4;
    if (status == 101 || status == 200) {
        conn->pre_len = in.len - hdr_len;
        if (conn->pre_len) {
            conn->pre = malloc(conn->pre_len);
            if (!conn->pre) {
                cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                goto out;
            }
            memcpy(conn->pre, in.data + hdr_len, conn->pre_len);
        }
        rc = 0;
        goto out;
    }

    /* An error answer: read its body (Content-Length, or to EOF). */
    long clen = -1;
    for (char *l = strstr(in.data, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, "Content-Length:", 15) == 0)
            clen = strtol(l + 17, NULL, 10);
    }
    dk_resp r = { .status = status };
    cl_buf_append(&r.body, in.data + hdr_len, in.len - hdr_len);
    while (clen < 0 || (long)r.body.len < clen) {
        char tmp[4096];
        if (r.body.len > HEADER_MAX)
            break;
        ssize_t got = recv(conn->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
        if (got > 0) {
            cl_buf_append(&r.body, tmp, (size_t)got);
            continue;
        }
        if (got == 0)
            break;
        if (errno == EINTR)
            continue;
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || wait_fd(conn->fd, POLLIN, &b) <= 0)
            break;
    }
    dk_fail_resp(error, status == 404 || status == 409 ? SBX_ERROR_NOT_FOUND
                        : SBX_ERROR_EXECUTION_FAILED, &r, op, "exec start");
    dk_resp_clear(&r);
out:
    if (rc < 0)
        dk_conn_close(conn);
    cl_buf_clear(&in);
    free(url);
    free(reqtext);
    return rc;
}
