/*
 * server/http.c — sbx-server's HTTP layer over libmicrohttpd: the daemon
 * (a thread per connection, HTTP/1.1 keep-alive), request bodies, the
 * contract's security headers on every response (CONTROL-PLANE.md §8), and
 * one log line per request on stderr:
 *
 *   sbx-server: method=POST route=/v1/sandboxes status=201 duration_ms=12.345 organization=org_…
 *
 * The log names the route template (never the query, a header or a body),
 * so no key, token or other secret reaches it (CASE-36).
 *
 * Each connection is served by its own thread (libmicrohttpd's thread per
 * connection, at most SBX_SERVER_CONNECTIONS at once, default 256), which
 * runs every request of that connection inline, those that wait on a
 * provider (create, execute, terminate) included: a slow command stalls
 * only its own connection, which waits for that answer anyway (HTTP/1.1
 * without pipelining), and no request crosses threads. Handing a request
 * from a polling thread to a worker pool and back costs two thread
 * wake-ups per request (about 60 us at p50 on a busy 2-core machine,
 * bench/cp_exec), which this avoids.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "http.h"
#include "server.h"
#include "util.h"

/* Bodies above this are refused with 413. */
#define CP_MAX_BODY (8u << 20)

typedef struct req_ctx req_ctx;


struct cp_http {
    struct MHD_Daemon *d;
    cp_server *srv;
    unsigned port;
    unsigned active;            /* requests begun and not completed (atomic) */
};

/* One request: its body as it arrives, then its method, path, headers and
 * query arguments (libmicrohttpd's strings, borrowed: they live in the
 * connection's memory until the request completes, and every use of them
 * is inside the handler's last call), then its response. */
struct req_ctx {
    char *body;
    size_t len, cap;
    int too_large;
    double start;
    struct req_value {
        const char *name, *value;
        char kind;                /* 'h' a header, 'a' a query argument */
    } *values;
    size_t n, ncap;
    cp_request req;
    cp_response res;
};

static const char *const security_headers[][2] = {
    { "Content-Security-Policy",
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
      "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
      "frame-ancestors 'none'; object-src 'none'" },
    { "X-Content-Type-Options", "nosniff" },
    { "X-Frame-Options", "DENY" },
    { "Referrer-Policy", "no-referrer" },
    { "Permissions-Policy", "camera=(), microphone=(), geolocation=()" },
    { "Cross-Origin-Opener-Policy", "same-origin" },
    { "Strict-Transport-Security", "max-age=63072000; includeSubDomains" },
};

/* The value of @name of @kind ('h' a header, its first; 'a' a query
 * argument, its last, as Starlette reads a repeated one), or NULL. */
static const char *
lookup(const cp_request *req, char kind, const char *name)
{
    const req_ctx *ctx = req->owner;
    const char *found = NULL;

    for (size_t i = 0; i < ctx->n; i++)
        if (ctx->values[i].kind == kind &&
            (kind == 'h' ? !strcasecmp(ctx->values[i].name, name)
                         : !strcmp(ctx->values[i].name, name))) {
            found = ctx->values[i].value;
            if (kind == 'h')
                break;
        }
    return found;
}

const char *
cp_header(const cp_request *req, const char *name)
{
    return lookup(req, 'h', name);
}

const char *
cp_query(const cp_request *req, const char *name)
{
    return lookup(req, 'a', name);
}

static enum MHD_Result
copy_value(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    req_ctx *ctx = cls;

    if (!key)
        return MHD_YES;
    if (ctx->n == ctx->ncap) {
        size_t ncap = ctx->ncap ? ctx->ncap * 2 : 16;
        struct req_value *v = realloc(ctx->values, ncap * sizeof *v);
        if (!v)
            return MHD_NO;         /* stops the iteration: the rest is not seen */
        ctx->values = v;
        ctx->ncap = ncap;
    }
    ctx->values[ctx->n].name = key;
    ctx->values[ctx->n].value = value ? value : "";
    ctx->values[ctx->n].kind = kind == MHD_HEADER_KIND ? 'h' : 'a';
    ctx->n++;
    return MHD_YES;
}

static void
ctx_free(req_ctx *ctx)
{
    free(ctx->values);
    free(ctx->body);
    json_object_put(ctx->req.who.scopes);
    json_object_put(ctx->res.body);
    free(ctx->res.raw);
    free(ctx);
}

/* After the response was sent (or the connection failed): an execute's
 * metering, left to the outbox, is started now, off the answer's path. */
static void
request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                  enum MHD_RequestTerminationCode toe)
{
    struct cp_http *h = cls;
    req_ctx *ctx = *con_cls;

    (void)c;
    (void)toe;
    if (ctx) {
        if (ctx->res.outbox)
            cp_server_answered(h->srv);
        ctx_free(ctx);
        *con_cls = NULL;
        __atomic_sub_fetch(&h->active, 1, __ATOMIC_RELEASE);
    }
}

static enum MHD_Result
send_response(struct MHD_Connection *c, const cp_request *req, cp_response *res, double start)
{
    struct MHD_Response *r;
    enum MHD_Result ret = MHD_NO;
    int json = res->body || res->raw;

    if (res->raw) {
        /* A body already serialised (an execute's answer) is handed over,
         * not copied: libmicrohttpd frees it with the response. */
        r = MHD_create_response_from_buffer(strlen(res->raw), res->raw, MHD_RESPMEM_MUST_FREE);
        if (r)
            res->raw = NULL;
    } else {
        const char *text = res->body ? json_object_to_json_string_ext(
                                           res->body, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE)
                                     : "";
        size_t len = strlen(text), n = 0;
        char *lossy;

        /* json-c writes a string's bytes as they are: one that is not
         * UTF-8 (an execute's command echoed in a 422, which may hold any
         * bytes) would make the answer invalid JSON. Outside strings the
         * text is ASCII, so replacing each invalid sequence by U+FFFD
         * keeps it JSON. Only an answer that may hold such bytes is
         * checked (cp_reply_echo()): the others' strings are the
         * server's own or were checked as they came in, and a pass over
         * every body would be one more on each request. */
        if (res->echo && !cp_utf8_valid(text, len) &&
            (lossy = cp_utf8_lossy(text, len, &n)) != NULL) {
            r = MHD_create_response_from_buffer(n, lossy, MHD_RESPMEM_MUST_FREE);
            if (!r)
                free(lossy);
        } else {
            r = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
        }
    }
    if (r) {
        for (size_t i = 0; i < sizeof security_headers / sizeof security_headers[0]; i++)
            MHD_add_response_header(r, security_headers[i][0], security_headers[i][1]);
        if (json)
            MHD_add_response_header(r, "Content-Type", "application/json");
        ret = MHD_queue_response(c, (unsigned)res->status, r);
        MHD_destroy_response(r);
    }
    fprintf(stderr, "sbx-server: method=%s route=%s status=%d duration_ms=%.3f organization=%s\n",
            req->method, req->route ? req->route : "-", r ? res->status : 500,
            (cp_mono() - start) * 1000.0, req->authed ? req->who.org_id : "-");
    json_object_put(res->body);
    free(res->raw);
    res->body = NULL;
    res->raw = NULL;
    return ret;
}

static enum MHD_Result
handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
        const char *version, const char *upload_data, size_t *upload_data_size,
        void **con_cls)
{
    struct cp_http *h = cls;
    req_ctx *ctx = *con_cls;

    (void)version;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return MHD_NO;
        ctx->start = cp_mono();
        *con_cls = ctx;
        __atomic_add_fetch(&h->active, 1, __ATOMIC_RELEASE);
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (ctx->len + *upload_data_size > CP_MAX_BODY) {
            ctx->too_large = 1;
        } else {
            if (ctx->len + *upload_data_size + 1 > ctx->cap) {
                size_t ncap = (ctx->len + *upload_data_size + 1) * 2;
                char *n = realloc(ctx->body, ncap);
                if (!n)
                    return MHD_NO;
                ctx->body = n;
                ctx->cap = ncap;
            }
            memcpy(ctx->body + ctx->len, upload_data, *upload_data_size);
            ctx->len += *upload_data_size;
            ctx->body[ctx->len] = 0;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    MHD_get_connection_values(c, MHD_HEADER_KIND, copy_value, ctx);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, copy_value, ctx);
    memset(&ctx->req, 0, sizeof ctx->req);
    ctx->req.method = method;
    ctx->req.path = url;
    ctx->req.owner = ctx;
    ctx->req.body = ctx->body ? ctx->body : "";
    ctx->req.body_len = ctx->len;
    if (ctx->too_large) {
        ctx->req.route = "-";
        cp_reply_detail(&ctx->res, 413, "Request body is too large");
    } else {
        cp_dispatch(h->srv, &ctx->req, &ctx->res);
    }
    return send_response(c, &ctx->req, &ctx->res, ctx->start);
}

cp_http *
cp_http_start(cp_server *srv, const char *host, unsigned port, unsigned connections,
              char **err)
{
    struct cp_http *h = calloc(1, sizeof *h);
    struct sockaddr_in sa;
    const union MHD_DaemonInfo *info;

    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        *err = cp_printf("HOST is not an IPv4 address: %s", host);
        free(h);
        return NULL;
    }
    h->srv = srv;
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG,
                            (uint16_t)port, NULL, NULL, handler, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_LIMIT, connections ? connections : 1u,
                            MHD_OPTION_CONNECTION_TIMEOUT, 120u,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                            MHD_OPTION_NOTIFY_COMPLETED, request_completed, h,
                            MHD_OPTION_END);
    if (!h->d) {
        *err = cp_printf("cannot listen on %s:%u", host, port);
        free(h);
        return NULL;
    }
    info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : port;
    return h;
}

unsigned
cp_http_port(const cp_http *h)
{
    return h->port;
}

unsigned
cp_http_stop(cp_http *h, double grace_secs)
{
    unsigned running;

    if (!h)
        return 0;
    /* No new connections; the requests in flight (an execute's command
     * running) finish and are answered, for @grace_secs at most; then the
     * daemon stops, closing the idle connections and joining each
     * connection's thread. */
    MHD_quiesce_daemon(h->d);
    for (double end = cp_mono() + grace_secs;
         __atomic_load_n(&h->active, __ATOMIC_ACQUIRE) > 0 && cp_mono() < end;) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    /* A thread still in a request would hold the join for as long as its
     * command or provider call runs: the process ends without it. */
    running = __atomic_load_n(&h->active, __ATOMIC_ACQUIRE);
    if (running > 0)
        return running;
    MHD_stop_daemon(h->d);
    free(h);
    return 0;
}
