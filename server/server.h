/*
 * server/server.h — sbx-server's shared types: settings, the HTTP request
 * and response as the handlers see them, the principal, and the runtimes
 * (libsbx clients and sandbox handles).
 *
 * Layout: main.c (settings, start, signals), http.c (libmicrohttpd, a
 * thread per connection, security headers, the request log), api.c
 * (routing and the sandbox endpoints), auth.c (product keys, scopes, organisations, API
 * keys, the session), lax.c (body values coerced as pydantic's lax mode
 * does), meter.c (pricing, usage, ledgers, costs), runtime.c
 * (one sbx_client per enabled backend, sandbox handles), util.c (time
 * stamps, ids, encodings, HMAC, the sealing of session state), store*.c
 * (server/store.h).
 */
#ifndef SBX_SERVER_SERVER_H
#define SBX_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>
#include <sbx/sbx.h>

#include "store.h"

/* Settings from the environment (the reference's names; main.c). */
typedef struct cp_settings {
    char *pepper;                 /* BESPOKE_API_KEY_PEPPER (required) */
    char *admin_token;            /* BESPOKE_CONTROL_PLANE_ADMIN_TOKEN (required) */
    char *db;                     /* BESPOKE_CONTROL_PLANE_DB */
    int db_sync_full;             /* BESPOKE_DB_SYNCHRONOUS=full (default normal) */
    char **backends;              /* BESPOKE_ALLOWED_BACKENDS, lowercased; NULL = all */
    size_t nbackends;
    int64_t markup_pusd;          /* BESPOKE_CUSTOMER_MARKUP × 10^12 (default 1) */
    char *markup_text;
    int cookie_secure;            /* BESPOKE_SESSION_COOKIE_SECURE != "0" */
    char *host;                   /* HOST (127.0.0.1) */
    unsigned port;                /* PORT (8000; 0 = any free port) */
    unsigned connections;         /* SBX_SERVER_CONNECTIONS (default 256) */
    double meter_sweep_secs;      /* SBX_SERVER_METER_SWEEP_SECS (default 30) */
    double execute_grace_secs;    /* SBX_SERVER_EXECUTE_GRACE_SECS (default 60): how long
                                   * past its deadline a running execution's claim holds */
    double stop_grace_secs;       /* SBX_SERVER_STOP_GRACE_SECS (default 30): how long a stop
                                   * waits for the requests in flight */
    double provider_timeout_secs; /* BESPOKE_PROVIDER_TIMEOUT_SECS (default 120): the deadline
                                   * of each provider call (runtime.c) */
    double execute_timeout_secs;  /* BESPOKE_EXECUTE_TIMEOUT_SECS (default 3600): the timeout
                                   * of a command that has none of its own (api.c) */
} cp_settings;

/* The server: settings, store, runtimes. One per process. */
typedef struct cp_server cp_server;
/* The execution outbox's thread (meter.c). */
typedef struct cp_meter cp_meter;

/* The principal a request authenticated as. */
typedef struct cp_principal {
    char org_id[64];
    char key_id[64];
    char key_name[256];
    json_object *scopes;          /* array of strings (owned) */
} cp_principal;

/* A request as the handlers see it. */
typedef struct cp_request {
    const char *method;
    const char *path;             /* without the query */
    const char *route;            /* the route template, for the log */
    void *owner;                  /* http.c's request context (headers) */
    const char *body;
    size_t body_len;
    const char *params[4];        /* path parameters ({id}) */
    cp_principal who;
    int authed;
    char key_digest[65];          /* for a route that authenticates in its
                                   * own first read (api.c's routes) */
} cp_request;

/* A response: status and JSON body (or none for 204). */
typedef struct cp_response {
    int status;
    json_object *body;            /* owned; NULL = empty body */
    char *raw;                    /* owned; a body already serialised */
    int outbox;                   /* the answer left its metering to the
                                   * execution outbox (meter.c): wake it
                                   * once the answer is sent */
    int echo;                     /* @body may hold bytes not known to be
                                   * UTF-8 (cp_reply_echo()) */
} cp_response;

/* http.c: the header @name of the request (NULL when absent); borrowed. */
const char *cp_header(const cp_request *req, const char *name);
/* http.c: the query argument @name (its last value when repeated, as
 * Starlette reads it); borrowed. */
const char *cp_query(const cp_request *req, const char *name);

/* Response helpers (api.c). */
void cp_reply_json(cp_response *res, int status, json_object *body);
void cp_reply_detail(cp_response *res, int status, const char *message);
/* Marks the answer in @res as one that may hold bytes not known to be
 * UTF-8: a value of the request echoed (a validation error's input, a
 * query argument, a command's bytes), or text read from the store that a
 * server of an earlier version kept as it was sent, before bodies and
 * Idempotency-Keys had to be UTF-8 (a record's config or idempotency key,
 * a key's name or scopes, an execution's request id). server/http.c
 * makes such a body valid UTF-8 (U+FFFD for each invalid sequence) before
 * it is sent; every other answer is sent as serialised, unchecked: its
 * strings are the server's own, or were checked as they came in. */
void cp_reply_echo(cp_response *res);

/* The routes (api.c); @res is filled. Thread-safe. */
void cp_dispatch(cp_server *srv, cp_request *req, cp_response *res);

/* main.c. */
const cp_settings *cp_server_settings(const cp_server *srv);
store *cp_server_store(const cp_server *srv);
/* main.c: called on the connection's thread once a response whose
 * @res->outbox is set has been sent: wakes the execution outbox (or, with
 * the test hook SBX_SERVER_TEST_CRASH_AFTER_ANSWER, SIGKILLs the server
 * before its metering). */
void cp_server_answered(cp_server *srv);

/* ---------------------------------------------------------------- runtime.c */

typedef struct cp_runtimes cp_runtimes;

cp_runtimes *cp_runtimes_new(const cp_settings *settings);
void cp_runtimes_free(cp_runtimes *rt);
/* 1 when @backend is enabled. */
int cp_backend_enabled(const cp_runtimes *rt, const char *backend);
/* The client of @backend (made on first use, then shared), every call of
 * which has the deadline BESPOKE_PROVIDER_TIMEOUT_SECS
 * (sbx_client_set_call_timeout()); NULL with *@error. */
sbx_client *cp_runtime_client(cp_runtimes *rt, const char *backend, sbx_error **error);
/* Remembers @sandbox as the runtime of @id (takes it). */
void cp_runtime_put(cp_runtimes *rt, const char *id, sbx_sandbox *sandbox);
/* The runtime of @id, with a reference the caller gives back with
 * cp_runtime_unref(); NULL when none is attached. */
sbx_sandbox *cp_runtime_get(cp_runtimes *rt, const char *id);
void cp_runtime_unref(cp_runtimes *rt, sbx_sandbox *sandbox);
/* Forgets the runtime of @id (freed when its last reference goes). */
void cp_runtime_drop(cp_runtimes *rt, const char *id);

/* The pool (the library's asynchronous API) the hosted executes run on,
 * so that one answered at its deadline is cancelled (server/api.c): made
 * on first use, with at most SBX_SERVER_CONNECTIONS worker threads (which
 * stay, idle, once started) and one thread of its own that runs the
 * operations' callbacks (never one of the request threads'); both end in
 * cp_runtimes_free(). Borrowed. NULL when it cannot be made (the next
 * call tries again), with, when @why is not NULL, *@why (free()) naming
 * the step that failed and why: "the pool: <libsbx's message>",
 * "eventfd: <errno text>" or "the dispatching thread: <errno text>".
 * Else *@why is NULL. Thread-safe. */
sbx_async *cp_runtime_async(cp_runtimes *rt, char **why);

/* A provider call running on the pool begins (submitted) and ends (its
 * callback ran); cp_runtimes_busy() counts those running, whose handles
 * and clients must not be freed. Thread-safe. */
void cp_runtime_worker_begin(cp_runtimes *rt);
void cp_runtime_worker_end(cp_runtimes *rt);
unsigned cp_runtimes_busy(cp_runtimes *rt);

/* cp_server's runtimes (main.c). */
cp_runtimes *cp_server_runtimes(const cp_server *srv);

#endif
