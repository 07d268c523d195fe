/*
 * server/http.c — sbx-server's HTTP layer over libmicrohttpd: the daemon
 * (a pool of polling threads, HTTP/1.1 keep-alive), request bodies, the
 * contract's security headers on every response (CONTROL-PLANE.md §8), and
 * one log line per request on stderr:
 *
 *   sbx-server: method=POST route=/v1/sandboxes status=201 duration_ms=12.345 organization=org_…
 *
 * The log names the route template (never the query, a header or a body),
 * so no key, token or other secret reaches it (CASE-36).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "http.h"
#include "server.h"
#include "util.h"

/* Bodies above this are refused with 413. */
#define CP_MAX_BODY (8u << 20)

struct cp_http {
    struct MHD_Daemon *d;
    cp_server *srv;
    unsigned port;
};

typedef struct req_ctx {
    char *body;
    size_t len, cap;
    int too_large;
    double start;
} req_ctx;

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

const char *
cp_header(const cp_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->mhd_conn, MHD_HEADER_KIND, name);
}

const char *
cp_query(const cp_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->mhd_conn, MHD_GET_ARGUMENT_KIND, name);
}

static void
request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                  enum MHD_RequestTerminationCode toe)
{
    req_ctx *ctx = *con_cls;

    (void)cls;
    (void)c;
    (void)toe;
    if (ctx) {
        free(ctx->body);
        free(ctx);
        *con_cls = NULL;
    }
}

static enum MHD_Result
send_response(struct MHD_Connection *c, const cp_request *req, cp_response *res, double start)
{
    const char *text = "";
    size_t len = 0;
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (res->raw) {
        text = res->raw;
        len = strlen(text);
    } else if (res->body) {
        text = json_object_to_json_string_ext(res->body, JSON_C_TO_STRING_PLAIN |
                                                             JSON_C_TO_STRING_NOSLASHESCAPE);
        len = strlen(text);
    }
    r = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    for (size_t i = 0; i < sizeof security_headers / sizeof security_headers[0]; i++)
        MHD_add_response_header(r, security_headers[i][0], security_headers[i][1]);
    if (res->body || res->raw)
        MHD_add_response_header(r, "Content-Type", "application/json");
    ret = MHD_queue_response(c, (unsigned)res->status, r);
    MHD_destroy_response(r);
    fprintf(stderr, "sbx-server: method=%s route=%s status=%d duration_ms=%.3f organization=%s\n",
            req->method, req->route ? req->route : "-", res->status,
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
    cp_request req;
    cp_response res = { 0 };
    enum MHD_Result ret;

    (void)version;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return MHD_NO;
        ctx->start = cp_mono();
        *con_cls = ctx;
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
    memset(&req, 0, sizeof req);
    req.method = method;
    req.path = url;
    req.mhd_conn = c;
    req.body = ctx->body ? ctx->body : "";
    req.body_len = ctx->len;
    if (ctx->too_large) {
        req.route = "-";
        cp_reply_detail(&res, 413, "Request body is too large");
    } else {
        cp_dispatch(h->srv, &req, &res);
    }
    ret = send_response(c, &req, &res, ctx->start);
    json_object_put(req.who.scopes);
    return ret;
}

cp_http *
cp_http_start(cp_server *srv, const char *host, unsigned port, unsigned threads, char **err)
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
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG,
                            (uint16_t)port, NULL, NULL, handler, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, threads ? threads : 8u,
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

void
cp_http_stop(cp_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
