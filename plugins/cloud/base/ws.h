/*
 * ws.h — a WebSocket client (RFC 6455) for the hosted-provider plugins,
 * over libwebsockets (Debian libwebsockets-dev, 4.1): the Kubernetes exec
 * subresource, and the terminals of providers whose PTY is a WebSocket.
 * libsbx does no framing of its own: the handshake, masking, fragmentation,
 * ping/pong and the close handshake are libwebsockets'. (libcurl 7.88, the
 * one this project builds on, has no WebSocket support.)
 *
 * ws.c is its own static convenience library (libsbx-cloud-ws.la), linked
 * only by the plugins that use it, so that the others do not depend on
 * libwebsockets. It takes errors, clocks and buffers from cloud.h.
 *
 * Shape. One cl_ws is one connection with a libwebsockets context of its
 * own (no state shared between connections, so several run at once on
 * their own threads). cl_ws_connect() performs the opening handshake and
 * returns once the server answered 101 (or refused); cl_ws_run() then
 * services the connection on the calling thread, handing each whole
 * message to the on_message callback, until the connection closes. Any
 * thread may queue messages with cl_ws_send() (which blocks while more than
 * CL_WS_SEND_QUEUE_MAX bytes wait: flow control for a stdin pump) and the
 * close with cl_ws_close().
 *
 * TLS state. A wss:// connection has an OpenSSL client context (SSL_CTX) of
 * its own, made by cl_ws_connect() from cl_ws_tls (or the system's CAs)
 * and freed by cl_ws_free() after the libwebsockets context; a ws://
 * connection has none. libwebsockets 4.1 is never left to make or free
 * one: its own were freed through a process-wide OpenSSL ex-data index
 * that every new context remakes, so one made while another connection was
 * open (about 700 KB: the system CA store) was never freed. Nothing
 * outlives cl_ws_free().
 *
 * Errors (cloud.h conventions: -1 with *error set, op named):
 *  - no TCP connection, TLS failure, a cut stream: connection (retryable);
 *  - TLS material of cl_ws_tls that cannot be read (not PEM, a key that
 *    does not match its certificate): configuration, naming which;
 *  - the server answered the upgrade with an HTTP status other than 101:
 *    the code of that status (cl_code_of_status: 400 configuration, 401/403
 *    authentication, 404 not_found, 5xx connection), message "@what: the
 *    server refused the WebSocket upgrade (HTTP N)", context http_status;
 *    cl_ws_connect() also gives the status in *status, so a caller can tell
 *    a refusal (which comes before anything ran: safe to retry) from a
 *    transport failure;
 *  - the bound of the call (deadline, cancel descriptor): timeout, or
 *    cancelled.
 *
 * Credentials: header values given in opts->headers are never logged and
 * never put in an error.
 *
 * Threading: cl_ws_send(), cl_ws_close() and cl_ws_wake() are thread-safe;
 * cl_ws_run() runs on one thread at a time; cl_ws_free() once nothing else
 * uses the connection.
 */
#ifndef SBX_CLOUD_WS_H
#define SBX_CLOUD_WS_H

#include "cloud.h"
#include "provider.h"

#include <pthread.h>
#include <stddef.h>

/** What cl_ws_send() lets wait before it blocks: 4 MiB. */
#define CL_WS_SEND_QUEUE_MAX (4u << 20)

typedef struct cl_ws cl_ws;

/** TLS material for wss:// (all PEM bytes, borrowed for cl_ws_connect();
 *  NULL / 0 for none). */
typedef struct cl_ws_tls {
    const char *ca_pem;     /* trusted CAs; NULL: the system's */
    size_t ca_len;
    const char *cert_pem;   /* client certificate (mutual TLS), or NULL */
    size_t cert_len;
    const char *key_pem;    /* its private key, or NULL */
    size_t key_len;
    int insecure;           /* 1: the server's certificate is not checked */
} cl_ws_tls;

/**
 * One whole message from the server: @binary (1) or text (0), @n bytes at
 * @p (borrowed for the call; fragments are joined first). Return 0 to go
 * on, -1 to end the connection (cl_ws_run() then fails with the error the
 * callback stored through cl_fail, or a connection error).
 */
typedef int (*cl_ws_msg_fn)(void *ud, int binary, const unsigned char *p, size_t n);

typedef struct cl_ws_opts {
    const char *url;                /* ws://, wss://, http:// or https://
                                     * (the last two as ws:// and wss://),
                                     * host, optional port, path and query */
    const char *protocols;          /* Sec-WebSocket-Protocol offered, comma-
                                     * separated, most wanted first; NULL:
                                     * none */
    const char *const *headers;     /* more request headers "Name: value",
                                     * NULL-terminated; may be NULL */
    const cl_ws_tls *tls;           /* NULL: system CAs, no client cert */
    cl_ws_msg_fn on_message;
    void *ud;
    const char *what;               /* for messages ("open the exec stream") */
} cl_ws_opts;

/**
 * Opens a connection to @o->url and waits for the server's answer to the
 * upgrade, bounded by @ctx (deadline, cancel descriptor; NULL: unbounded)
 * and @secs (<= 0: only @ctx). 0 with *@ws set once the server switched
 * protocols; -1 with *@error set otherwise, and *@status (when not NULL)
 * the HTTP status of a refusal, 0 when no answer came. Thread-safe.
 */
int cl_ws_connect(const cl_ws_opts *o, const sbx_call_ctx *ctx, double secs, cl_ws **ws,
                  long *status, const char *op, sbx_error **error);

/** The subprotocol the server chose (borrowed, lives as long as @ws), or
 *  "" when it chose none. */
const char *cl_ws_protocol(const cl_ws *ws);

/**
 * Queues one message (@binary or text, @n bytes copied) to be sent in
 * order. Blocks while more than CL_WS_SEND_QUEUE_MAX bytes wait to go out,
 * until they drain or the connection ends. 0, or -1 (no error stored) when
 * the connection has ended or the close was queued already, or on no
 * memory. Thread-safe.
 */
int cl_ws_send(cl_ws *ws, int binary, const void *p, size_t n);

/** Queues the close handshake (status 1000) after what is queued; later
 *  sends fail. Thread-safe. */
void cl_ws_close(cl_ws *ws);

/**
 * Services @ws on this thread, handing messages to on_message, until the
 * connection closes (the server's close, the close handshake of
 * cl_ws_close(), or the transport's end), @ctx's deadline passes or its
 * cancel descriptor becomes readable. 0 after a close handshake (either
 * side's); -1 with *@error set: connection "@what: the connection ended
 * without a close frame" when the transport ended first, timeout or
 * cancelled for @ctx, or on_message's error.
 */
int cl_ws_run(cl_ws *ws, const sbx_call_ctx *ctx, const char *op, sbx_error **error);

/** The status code of the server's close frame (1000 normal), or 0 when
 *  none came. After cl_ws_run(). */
int cl_ws_close_code(const cl_ws *ws);

/** The reason text of the server's close frame (at most 123 bytes, as the
 *  server sent them, NUL-terminated; borrowed, lives as long as @ws), ""
 *  when none came or it had none. After cl_ws_run(). Providers put data
 *  there (Daytona's PTY sessions: {"exitCode": N}). */
const char *cl_ws_close_reason(const cl_ws *ws);

/** Ends the connection at once (no close handshake) and frees it. NULL:
 *  nothing. */
void cl_ws_free(cl_ws *ws);

/**
 * The URL @url (http:// or https://, as an API server's base URL is) with
 * its scheme made ws:// or wss://: a new string, NULL on no memory or
 * another scheme. Thread-safe.
 */
char *cl_ws_url(const char *url);

/* ------------------------------------------------------------------------ */
/* A command's terminal over a WebSocket                                     */
/* ------------------------------------------------------------------------ */

/**
 * The connection of a command whose terminal is a WebSocket (Daytona's PTY
 * sessions, the Cloudflare bridge's /pty): what those plugins' workers do
 * alike between making the provider's session and servicing it. The
 * caller fills in the fields above "the helper's" (a zeroed struct
 * otherwise: cl_term_end() on it does nothing), calls cl_term_connect(),
 * services the connection with cl_ws_run(), clears *slot under *lock, then
 * calls cl_term_end() before cl_ws_free(). One worker thread at a time;
 * the pump reads *slot under *lock.
 */
typedef struct cl_term {
    pthread_mutex_t *lock;      /* the plugin's lock guarding *slot */
    pthread_cond_t *cond;       /* broadcast once *slot is set; NULL: none */
    cl_ws **slot;               /* where the connection is published */
    cl_proc *proc;              /* the command (its processes carry @tag) */
    sbx_plugin_sandbox *sb;     /* its sandbox */
    cl_run_fn run;              /* the plugin's runner of its own commands */
    const char *tag;            /* the command's CL_EXEC_MARK value */
    int stdin_fd;               /* the host's stdin for the terminal, or -1 */
    /* the helper's */
    int piped;                  /* wake[] is open */
    int wake[2];                /* written end closed: the pump stops */
    int started;                /* the pump thread runs */
    pthread_t thread;
} cl_term;

/**
 * Connects to the terminal at @http_url (http:// or https://, made ws://
 * or wss:// with cl_ws_url()) with @h's credential headers
 * (cl_http_auth_headers()), messages to @on_message with @ud, bounded by
 * @ctx and 60 s (cl_ws_connect(); @what names the call in errors); then
 * publishes the connection in *@t->slot under *@t->lock (broadcasting
 * @t->cond) and, when @t->stdin_fd >= 0, starts the pump: a thread that
 * sends what the host writes there as binary messages and, at its end,
 * hangs the terminal up (SIGHUP to every process of the command by its
 * mark: cl_proc_mark_kill() through @t->run, bounded by 30 s). 0 with
 * *@ws set (the caller frees it, after cl_term_end()); -1 with *@error
 * set (authentication when @h lacks the credential its provider requires,
 * as cl_http_missing_credential() gives it, with nothing sent;
 * resource_exhausted on no memory; or cl_ws_connect()'s error) and
 * nothing published or started.
 */
int cl_term_connect(cl_term *t, cl_http *h, const char *http_url, cl_ws_msg_fn on_message,
                    void *ud, const sbx_call_ctx *ctx, const char *what, cl_ws **ws,
                    const char *op, sbx_error **error);

/** Stops the pump of @t (if any) and joins it; @t is then as zeroed.
 *  Call after *slot was cleared and before the connection is freed. */
void cl_term_end(cl_term *t);

#endif /* SBX_CLOUD_WS_H */
