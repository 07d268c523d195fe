/*
 * ws.c — the WebSocket client of the hosted-provider base over
 * libwebsockets (ws.h says what it does and why).
 *
 * Each connection has a libwebsockets context of its own whose user
 * pointer is the cl_ws: the context's service loop runs on the thread in
 * cl_ws_connect() / cl_ws_run(); other threads queue messages under the
 * connection's lock and wake the loop with lws_cancel_service(), whose
 * LWS_CALLBACK_EVENT_WAIT_CANCELLED asks for a writeable callback. A timer
 * (lws_sul) wakes the loop every CL_WS_TICK_US so the call's deadline and
 * cancel descriptor are looked at while the connection is quiet.
 */
#include "ws.h"
#include "provider.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libwebsockets.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#define CL_WS_TICK_US (50 * LWS_US_PER_MS)

typedef struct ws_msg {
    struct ws_msg *next;
    int binary;
    size_t n;
    unsigned char data[];   /* LWS_PRE bytes of room, then the payload */
} ws_msg;

struct cl_ws {
    struct lws_context *cx;
    SSL_CTX *ssl_ctx;           /* wss://: the client TLS context, ours to free */
    struct lws *wsi;
    pthread_mutex_t lock;
    pthread_cond_t drained;
    ws_msg *head, *tail;
    size_t queued;              /* payload bytes waiting */
    int close_queued;
    int established;
    int conn_error;             /* the handshake failed */
    long status;                /* HTTP status of a refused upgrade */
    char err[256];              /* libwebsockets' reason for a failure */
    int closed;                 /* the connection ended (either way) */
    int peer_closed;            /* a close frame came from the server */
    int close_sent;             /* our close frame went out */
    int close_code;
    char close_reason[124];     /* its reason (at most 123 bytes, RFC 6455 5.5) */
    cl_buf rx;                  /* the message being assembled */
    int cb_failed;              /* on_message returned -1 */
    cl_ws_msg_fn fn;
    void *ud;
    char protocol[64];
    char **headers;             /* copies of opts->headers */
    const char *what;
    cl_bound bound;             /* of the call being serviced */
    int bound_hit;              /* 1 expired, 2 cancelled */
    lws_sorted_usec_list_t tick;
};

static pthread_once_t ws_log_once = PTHREAD_ONCE_INIT;
static pthread_rwlock_t ws_tls_lock = PTHREAD_RWLOCK_INITIALIZER;

static void ws_log_emit(int level, const char *line)
{
    (void)level;
    CL_LOG(SBX_LOG_DEBUG, "libwebsockets: %s", line);
}

static void ws_log_init(void)
{
    lws_set_log_level(LLL_ERR | LLL_WARN, ws_log_emit);
}

/* Adds the PEM certificates of @pem (@len bytes) to @store: how many, or
 * -1 when one cannot be read. */
static int ws_add_ca(X509_STORE *store, const char *pem, size_t len)
{
    BIO *b = BIO_new_mem_buf(pem, (int)len);
    if (!b)
        return -1;
    int n = 0;
    X509 *x;
    while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL))) {
        int ok = X509_STORE_add_cert(store, x);
        X509_free(x);
        if (!ok) {
            BIO_free(b);
            return -1;
        }
        n++;
    }
    /* The end of the input ends the loop with "no start line": not an error. */
    unsigned long e = ERR_peek_last_error();
    if (e && ERR_GET_REASON(e) != PEM_R_NO_START_LINE)
        n = -1;
    BIO_free(b);
    return n;
}

/* The client TLS context of a wss:// connection, as libwebsockets 4.1
 * makes it (lws_ssl_client_init: TLS_client_method, no compression,
 * moving write buffers; the CAs given, else the system's), with the client
 * certificate and key of @t if any. A new SSL_CTX (SSL_CTX_free), or NULL
 * with *@why set to what was wrong. Leaves OpenSSL's error queue empty. */
static SSL_CTX *ws_ssl_ctx(const cl_ws_tls *t, const char **why)
{
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    if (!c) {
        *why = "cannot make the TLS context";
        ERR_clear_error();
        return NULL;
    }
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_mode(c, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    if (t && t->ca_pem) {
        if (ws_add_ca(SSL_CTX_get_cert_store(c), t->ca_pem, t->ca_len) <= 0) {
            *why = "the CA certificates cannot be read (PEM)";
            goto fail;
        }
    } else if (!SSL_CTX_set_default_verify_paths(c)) {
        *why = "the system's CA certificates cannot be loaded";
        goto fail;
    }
    if (t && t->cert_pem) {
        BIO *b = BIO_new_mem_buf(t->cert_pem, (int)t->cert_len);
        X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
        int ok = x && SSL_CTX_use_certificate(c, x) == 1;
        X509_free(x);
        BIO_free(b);
        if (!ok) {
            *why = "the client certificate cannot be read (PEM)";
            goto fail;
        }
    }
    if (t && t->key_pem) {
        BIO *b = BIO_new_mem_buf(t->key_pem, (int)t->key_len);
        EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
        int ok = k && SSL_CTX_use_PrivateKey(c, k) == 1;
        EVP_PKEY_free(k);
        BIO_free(b);
        if (!ok || (t->cert_pem && SSL_CTX_check_private_key(c) != 1)) {
            *why = "the client key cannot be read (PEM) or does not match the certificate";
            goto fail;
        }
    }
    ERR_clear_error();
    return c;
fail:
    ERR_clear_error();
    SSL_CTX_free(c);
    return NULL;
}

static void ws_tick(lws_sorted_usec_list_t *sul)
{
    cl_ws *w = lws_container_of(sul, cl_ws, tick);
    if (cl_bound_cancelled(&w->bound))
        w->bound_hit = 2;
    else if (cl_bound_left(&w->bound) == 0)
        w->bound_hit = 1;
    lws_sul_schedule(w->cx, 0, &w->tick, ws_tick, CL_WS_TICK_US);
}

static void ws_fail_conn(cl_ws *w, const char *why)
{
    pthread_mutex_lock(&w->lock);
    if (!w->err[0] && why)
        snprintf(w->err, sizeof w->err, "%s", why);
    w->closed = 1;
    w->wsi = NULL;
    pthread_cond_broadcast(&w->drained);
    pthread_mutex_unlock(&w->lock);
}

static int ws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
    (void)user;
    struct lws_context *cx = lws_get_context(wsi);
    cl_ws *w = cx ? lws_context_user(cx) : NULL;
    if (!w)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        unsigned char **p = in, *end = *p + len;
        for (size_t i = 0; w->headers && w->headers[i]; i++) {
            size_t n = strlen(w->headers[i]);
            if ((size_t)(end - *p) < n + 3)
                return -1;
            memcpy(*p, w->headers[i], n);
            *p += n;
            *(*p)++ = '\r';
            *(*p)++ = '\n';
        }
        break;
    }
    case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH: {
        /* The answer's headers are still there: the chosen subprotocol. */
        char proto[64] = "";
        if (lws_hdr_copy(wsi, proto, sizeof proto, WSI_TOKEN_PROTOCOL) < 0)
            proto[0] = '\0';
        pthread_mutex_lock(&w->lock);
        snprintf(w->protocol, sizeof w->protocol, "%s", proto);
        pthread_mutex_unlock(&w->lock);
        break;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED: {
        pthread_mutex_lock(&w->lock);
        w->established = 1;
        if (w->head || w->close_queued)
            lws_callback_on_writable(wsi);
        pthread_mutex_unlock(&w->lock);
        break;
    }
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        unsigned int st = lws_http_client_http_response(wsi);
        const char *why = in && len ? (const char *)in : "connection failed";
        /* libwebsockets 4.1 keeps the refused upgrade's status line only
         * in its reason ("HS: ws upgrade response not 101" after logging
         * "got bad HTTP response 'NNN'"): take the status it recorded. */
        w->status = st >= 100 && st < 600 && st != 101 ? (long)st : 0;
        w->conn_error = 1;
        ws_fail_conn(w, why);
        break;
    }
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        if (lws_is_first_fragment(wsi))
            w->rx.len = 0;
        if (cl_buf_append(&w->rx, in, len) < 0) {
            cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, "exec", "out of memory");
            w->cb_failed = 1;
            return -1;
        }
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            int binary = lws_frame_is_binary(wsi);
            if (w->fn && w->fn(w->ud, binary, (const unsigned char *)(w->rx.data ? w->rx.data
                                                                               : ""),
                               w->rx.len) < 0) {
                w->cb_failed = 1;
                return -1;
            }
            w->rx.len = 0;
        }
        break;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
        pthread_mutex_lock(&w->lock);
        ws_msg *m = w->head;
        if (m) {
            w->head = m->next;
            if (!w->head)
                w->tail = NULL;
        }
        int more = w->head != NULL;
        int close_now = !m && w->close_queued && !w->close_sent;
        if (close_now)
            w->close_sent = 1;
        pthread_mutex_unlock(&w->lock);
        if (m) {
            int n = lws_write(wsi, m->data + LWS_PRE, m->n,
                              m->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
            pthread_mutex_lock(&w->lock);
            w->queued -= m->n;
            pthread_cond_broadcast(&w->drained);
            pthread_mutex_unlock(&w->lock);
            size_t sent = m->n;
            free(m);
            if (n < (int)sent)
                return -1;
            if (more || w->close_queued)
                lws_callback_on_writable(wsi);
        } else if (close_now) {
            lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
            return -1;
        }
        break;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: {
        const unsigned char *p = in;
        w->peer_closed = 1;
        w->close_code = len >= 2 ? (p[0] << 8) | p[1] : 1005;
        if (len > 2) {
            size_t n = len - 2 < sizeof w->close_reason - 1 ? len - 2
                                                             : sizeof w->close_reason - 1;
            memcpy(w->close_reason, p + 2, n);
            w->close_reason[n] = '\0';
        }
        break;
    }
    case LWS_CALLBACK_CLIENT_CLOSED:
        ws_fail_conn(w, NULL);
        break;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        pthread_mutex_lock(&w->lock);
        if (w->wsi && w->established && (w->head || (w->close_queued && !w->close_sent)))
            lws_callback_on_writable(w->wsi);
        pthread_mutex_unlock(&w->lock);
        break;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols ws_protocols[] = {
    { "sbx-ws", ws_cb, 0, 65536, 0, NULL, 0 },
    { NULL, NULL, 0, 0, 0, NULL, 0 }
};

char *cl_ws_url(const char *url)
{
    if (!url)
        return NULL;
    if (strncmp(url, "https://", 8) == 0)
        return cl_printf("wss://%s", url + 8);
    if (strncmp(url, "http://", 7) == 0)
        return cl_printf("ws://%s", url + 7);
    if (strncmp(url, "wss://", 6) == 0 || strncmp(url, "ws://", 5) == 0)
        return strdup(url);
    return NULL;
}

/* Splits @url (ws:// or wss://) into its parts: new strings in *@host
 * (without brackets), *@path (with the query; "/" when none); *@port and
 * *@tls. 0, or -1 when it is not such a URL. */
static int ws_split(const char *url, char **host, int *port, char **path, int *tls)
{
    const char *p;
    *host = *path = NULL;
    if (strncmp(url, "wss://", 6) == 0) {
        *tls = 1;
        p = url + 6;
    } else if (strncmp(url, "ws://", 5) == 0) {
        *tls = 0;
        p = url + 5;
    } else {
        return -1;
    }
    const char *slash = strchr(p, '/');
    const char *hend = slash ? slash : p + strlen(p);
    const char *colon = NULL;
    const char *hstart = p;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(hend - p));
        if (!rb)
            return -1;
        hstart = p + 1;
        colon = rb[1] == ':' ? rb + 1 : NULL;
        *host = strndup(hstart, (size_t)(rb - hstart));
    } else {
        colon = memchr(p, ':', (size_t)(hend - p));
        *host = strndup(p, (size_t)((colon ? colon : hend) - p));
    }
    *port = *tls ? 443 : 80;
    if (colon) {
        char *e;
        long v = strtol(colon + 1, &e, 10);
        if (e != hend || v <= 0 || v > 65535) {
            free(*host);
            *host = NULL;
            return -1;
        }
        *port = (int)v;
    }
    *path = strdup(slash ? slash : "/");
    if (!*host || !**host || !*path) {
        free(*host);
        free(*path);
        *host = *path = NULL;
        return -1;
    }
    return 0;
}

static void ws_free_msgs(cl_ws *w)
{
    while (w->head) {
        ws_msg *m = w->head;
        w->head = m->next;
        free(m);
    }
    w->tail = NULL;
    w->queued = 0;
}

void cl_ws_free(cl_ws *w)
{
    if (!w)
        return;
    if (w->cx) {
        lws_sul_cancel(&w->tick);
        /* A connection still open (its run was cancelled or timed out) is
         * closed first, at once: destroying the context with it open left
         * the context's client TLS state behind. */
        if (w->wsi && !w->closed)
            lws_set_timeout(w->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_SYNC);
        lws_context_destroy(w->cx);
    }
    /* After the context: its SSL objects held references to it. */
    SSL_CTX_free(w->ssl_ctx);
    ws_free_msgs(w);
    cl_strv_free(w->headers);
    cl_buf_clear(&w->rx);
    pthread_cond_destroy(&w->drained);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* The error of a bound that was hit while @doing. */
static int ws_bound_fail(cl_ws *w, const char *op, const char *doing, sbx_error **error)
{
    if (w->bound_hit == 2)
        cl_fail(error, SBX_ERROR_CANCELLED, op, "cancelled while %s: %s", doing, w->what);
    else
        cl_fail(error, SBX_ERROR_TIMEOUT, op, "timed out while %s: %s", doing, w->what);
    return -1;
}

int cl_ws_connect(const cl_ws_opts *o, const sbx_call_ctx *ctx, double secs, cl_ws **out,
                  long *status, const char *op, sbx_error **error)
{
    char *host = NULL, *path = NULL, *hosthdr = NULL;
    int port = 0, tls = 0;
    if (status)
        *status = 0;
    *out = NULL;
    if (!o || !o->url || ws_split(o->url, &host, &port, &path, &tls) < 0) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "not a WebSocket URL: %s",
                o && o->url ? o->url : "(null)");
        return -1;
    }
    pthread_once(&ws_log_once, ws_log_init);
    cl_ws *w = calloc(1, sizeof(*w));
    if (!w) {
        free(host);
        free(path);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->drained, NULL);
    w->fn = o->on_message;
    w->ud = o->ud;
    w->what = o->what ? o->what : "the WebSocket connection";
    w->bound = cl_bound_make(ctx, secs);
    if (o->headers && !(w->headers = cl_strv_dup(o->headers)))
        goto nomem;
    int default_port = port == (tls ? 443 : 80);
    hosthdr = strchr(host, ':') ? (default_port ? cl_printf("[%s]", host)
                                                : cl_printf("[%s]:%d", host, port))
                                : (default_port ? strdup(host) : cl_printf("%s:%d", host, port));
    if (!hosthdr)
        goto nomem;

    struct lws_context_creation_info ci;
    memset(&ci, 0, sizeof ci);
    ci.port = CONTEXT_PORT_NO_LISTEN;
    ci.protocols = ws_protocols;
    ci.user = w;
    ci.fd_limit_per_thread = 8;
    /* The opening handshake is built in this buffer: room for long URLs
     * (a command in the query) and headers. */
    ci.pt_serv_buf_size = 32768;
    ci.count_threads = 1;
    ci.gid = -1;
    ci.uid = -1;
    /*
     * TLS state. libwebsockets 4.1 gives a context client TLS only with
     * LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT, and that option also makes its
     * two OpenSSL ex-data indexes anew, in process-wide variables: the
     * index of an SSL's wsi, which its certificate verify callback reads,
     * and the index of an SSL_CTX's client-context cache entry, which
     * context destruction reads to free the SSL_CTX it made. So:
     *  - a wss:// context is handed an SSL_CTX of ours
     *    (provided_client_ssl_ctx), which libwebsockets uses and never
     *    frees; cl_ws_free() frees it after the context. (An SSL_CTX that
     *    libwebsockets made leaked whenever another context was made
     *    during its life: its destruction looked for the cache entry at the
     *    moved index, found none and kept it, the system CA store and all,
     *    about 700 KB a connection.)
     *  - a ws:// context is made without the option: no TLS state at all.
     *  - wss:// contexts are made under the write side of ws_tls_lock and
     *    their handshakes run under its read side, so that no index moves
     *    while a handshake's verify callback may read it.
     */
    int tls_locked = 0;
    if (tls) {
        const char *why = NULL;
        if (!(w->ssl_ctx = ws_ssl_ctx(o->tls, &why))) {
            cl_fail(error, SBX_ERROR_CONFIGURATION, op, "%s: %s", w->what, why);
            goto fail;
        }
        ci.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        ci.provided_client_ssl_ctx = w->ssl_ctx;
        pthread_rwlock_wrlock(&ws_tls_lock);
    }
    w->cx = lws_create_context(&ci);
    if (tls)
        pthread_rwlock_unlock(&ws_tls_lock);
    if (!w->cx) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: cannot set up the WebSocket client "
                "(libwebsockets context)", w->what);
        goto fail;
    }
    lws_sul_schedule(w->cx, 0, &w->tick, ws_tick, CL_WS_TICK_US);

    struct lws_client_connect_info ii;
    memset(&ii, 0, sizeof ii);
    ii.context = w->cx;
    ii.address = host;
    ii.port = port;
    ii.path = path;
    ii.host = hosthdr;
    ii.origin = hosthdr;
    ii.protocol = o->protocols;
    ii.local_protocol_name = "sbx-ws";
    ii.ietf_version_or_minus_one = -1;
    ii.pwsi = &w->wsi;
    if (tls) {
        ii.ssl_connection = LCCSCF_USE_SSL;
        if (o->tls && o->tls->insecure)
            ii.ssl_connection |= LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK
                                 | LCCSCF_ALLOW_EXPIRED | LCCSCF_ALLOW_INSECURE;
    }
    if (tls) {
        pthread_rwlock_rdlock(&ws_tls_lock);
        tls_locked = 1;
    }
    if (!lws_client_connect_via_info(&ii) && !w->conn_error) {
        if (tls_locked)
            pthread_rwlock_unlock(&ws_tls_lock);
        cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: cannot connect to %s", w->what, hosthdr);
        goto fail;
    }
    while (!w->established && !w->closed && !w->bound_hit)
        lws_service(w->cx, 0);
    if (tls_locked)
        pthread_rwlock_unlock(&ws_tls_lock);
    if (w->established && !w->closed) {
        free(host);
        free(path);
        free(hosthdr);
        *out = w;
        return 0;
    }
    if (w->bound_hit) {
        ws_bound_fail(w, op, "opening the WebSocket", error);
        goto fail;
    }
    if (w->status) {
        if (status)
            *status = w->status;
        sbx_error *e = cl_fail(error, cl_code_of_status(w->status), op,
                               "%s: the server refused the WebSocket upgrade (HTTP %ld)",
                               w->what, w->status);
        char st[16];
        snprintf(st, sizeof st, "%ld", w->status);
        cl_context(e, "http_status", st);
    } else {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: %s (%s)", w->what,
                w->err[0] ? w->err : "the connection ended during the handshake", hosthdr);
    }
    goto fail;
nomem:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    free(host);
    free(path);
    free(hosthdr);
    cl_ws_free(w);
    return -1;
}

const char *cl_ws_protocol(const cl_ws *w)
{
    return w->protocol;
}

int cl_ws_send(cl_ws *w, int binary, const void *p, size_t n)
{
    ws_msg *m = malloc(sizeof(*m) + LWS_PRE + n);
    if (!m)
        return -1;
    m->next = NULL;
    m->binary = binary;
    m->n = n;
    if (n)
        memcpy(m->data + LWS_PRE, p, n);
    pthread_mutex_lock(&w->lock);
    while (!w->closed && !w->close_queued && w->queued > CL_WS_SEND_QUEUE_MAX)
        pthread_cond_wait(&w->drained, &w->lock);
    if (w->closed || w->close_queued) {
        pthread_mutex_unlock(&w->lock);
        free(m);
        return -1;
    }
    if (w->tail)
        w->tail->next = m;
    else
        w->head = m;
    w->tail = m;
    w->queued += n;
    pthread_mutex_unlock(&w->lock);
    lws_cancel_service(w->cx);
    return 0;
}

void cl_ws_close(cl_ws *w)
{
    pthread_mutex_lock(&w->lock);
    w->close_queued = 1;
    pthread_cond_broadcast(&w->drained);
    pthread_mutex_unlock(&w->lock);
    lws_cancel_service(w->cx);
}

int cl_ws_run(cl_ws *w, const sbx_call_ctx *ctx, const char *op, sbx_error **error)
{
    w->bound = cl_bound_make(ctx, 0);
    w->bound_hit = 0;
    while (!w->closed && !w->bound_hit)
        lws_service(w->cx, 0);
    if (w->cb_failed) {
        const cl_last_error *l = cl_last();
        cl_fail(error, l->code ? l->code : SBX_ERROR_CONNECTION, op, "%s",
                l->msg[0] ? l->msg : "the WebSocket message could not be taken");
        return -1;
    }
    if (!w->closed)
        return ws_bound_fail(w, op, "reading the WebSocket", error);
    if (!w->peer_closed && !w->close_sent) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: the connection ended without a close "
                "frame", w->what);
        return -1;
    }
    return 0;
}

int cl_ws_close_code(const cl_ws *w)
{
    return w->close_code;
}

const char *cl_ws_close_reason(const cl_ws *w)
{
    return w->close_reason;
}

/* ------------------------------------------------------------------------ */
/* A command's terminal                                                      */
/* ------------------------------------------------------------------------ */

/* The pump: the host's stdin typed at the terminal until it ends (then the
 * terminal is hung up) or the worker wakes it. */
static void *term_stdin_main(void *arg)
{
    cl_term *t = arg;
    char buf[16384];
    for (;;) {
        struct pollfd pf[2] = { { .fd = t->stdin_fd, .events = POLLIN },
                                { .fd = t->wake[0], .events = POLLIN } };
        int r = poll(pf, 2, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || pf[1].revents)
            break;
        ssize_t n = read(t->stdin_fd, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            sbx_call_ctx kc = { sizeof(kc), cl_now() + 30, t->wake[0], NULL };
            cl_proc_mark_kill(t->proc, t->sb, t->run, &kc, t->tag, SIGHUP, NULL);
            break;
        }
        pthread_mutex_lock(t->lock);
        cl_ws *ws = *t->slot;
        pthread_mutex_unlock(t->lock);
        if (!ws || cl_ws_send(ws, 1, buf, (size_t)n) < 0)
            break;
    }
    return NULL;
}

int cl_term_connect(cl_term *t, cl_http *h, const char *http_url, cl_ws_msg_fn on_message,
                    void *ud, const sbx_call_ctx *ctx, const char *what, cl_ws **ws,
                    const char *op, sbx_error **error)
{
    *ws = NULL;
    /* As every request that carries the credential: none sent without it. */
    if (cl_http_missing_credential(h, op, error) < 0)
        return -1;
    char *url = cl_ws_url(http_url), **hdrs = cl_http_auth_headers(h);
    int rc = -1;
    if (!url || !hdrs) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    cl_ws_opts wo = { .url = url, .headers = (const char *const *)hdrs,
                      .on_message = on_message, .ud = ud, .what = what };
    if (cl_ws_connect(&wo, ctx, 60, ws, NULL, op, error) < 0)
        goto out;
    pthread_mutex_lock(t->lock);
    *t->slot = *ws;
    if (t->cond)
        pthread_cond_broadcast(t->cond);
    pthread_mutex_unlock(t->lock);
    if (t->stdin_fd >= 0 && pipe2(t->wake, O_CLOEXEC) == 0) {
        t->piped = 1;
        t->started = pthread_create(&t->thread, NULL, term_stdin_main, t) == 0;
    }
    rc = 0;
out:
    cl_strv_free(hdrs);
    free(url);
    return rc;
}

void cl_term_end(cl_term *t)
{
    if (t->piped)
        close(t->wake[1]);
    if (t->started)
        pthread_join(t->thread, NULL);
    if (t->piped)
        close(t->wake[0]);
    t->piped = t->started = 0;
}
