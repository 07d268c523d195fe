/*
 * remote.c — libsbx-remote.so, the `remote` backend: a control plane's HTTP
 * API (sbx-server, or the reference control plane) as a backend, over the
 * hosted-provider base (plugins/cloud/base/cloud.h). The control plane runs
 * the sandbox on its own upstream backend with its own credentials; this
 * side holds only a product key.
 *
 * Contract: the control-plane wire contract (CONTROL-PLANE.md §0-§3, §10:
 * the reference's remote.py and api.py).
 *
 *  - Configuration (client options, then the environment): "url" or
 *    BESPOKE_SANDBOX_URL, the control plane's base URL (http:// or
 *    https://; trailing slashes dropped); "api_key" or BESPOKE_SANDBOX_KEY,
 *    the product key (bsk_live_...), sent as "Authorization: Bearer KEY" and
 *    scrubbed from every message (CASE-36); "backend" or
 *    BESPOKE_SANDBOX_BACKEND, the upstream backend the control plane runs
 *    sandboxes on (a create's backend option "backend" wins); "retries" and
 *    "max_retry_wait_s" as for every hosted plugin. A missing URL, key or
 *    upstream backend is a configuration error naming the option and the
 *    variable, at the first call that needs it (client_new does no I/O and
 *    does not fail for them, so `sbx backends` lists the backend).
 *  - create: POST /v1/sandboxes {"backend", cpu, memory_mb, disk_mb,
 *    timeout_secs (whole seconds, rounded up), gpu, image, template,
 *    snapshot_id, app_name, workdir, allow_internet, env_vars} with
 *    "Idempotency-Key": the create's backend option "idempotency_key"
 *    (1 to 255 characters), else the call's create token, so that sending
 *    it again after a transport failure never makes a second sandbox (the
 *    server returns the record it made). 201 with status running is the
 *    sandbox; a record that is failed (a replay of a failed create) is its
 *    latest_error; creating (a replay while the first is in flight) is
 *    polled until it is running.
 *  - exec: POST /v1/sandboxes/{id}/execute with "Idempotency-Key: req_" +
 *    32 hex digits, made per command. On sbx-server (its records show
 *    "idempotency_key"), a command goes as the execute's own fields: the
 *    argv as "command" and "args" (a shell command with "args" null), the
 *    per-call environment and CL_EXEC_MARK as "env", the cwd as "cwd" (the
 *    upstream backend's not_found or invalid_argument for it is the cwd
 *    error below, naming it), its stdin,
 *    read to its end first, as "stdin_b64" when it ends within
 *    RM_FIELDS_STDIN bytes (the server's bodies hold 8 MiB at most): one
 *    request, no shell of this plugin around the command. A longer stdin,
 *    and every command on a server whose records do not show the key (the
 *    reference, which drops unknown fields silently), go as
 *    {"command":"/bin/sh","args":["-c", SCRIPT]}, the script doing what
 *    the contract's execute cannot carry: per-call values exported
 *    (shell-quoted), CL_EXEC_MARK exported for exec_kill, stdin from a
 *    file written first through execute (else /dev/null), the cwd entered
 *    as "$SANDBOX_ROOT" + cwd (local sandboxes resolve paths beneath their
 *    root; isolated ones have SANDBOX_ROOT empty). The answer's stdout_b64
 *    / stderr_b64 (binary-safe, CASE-07) are used when present, else
 *    stdout / stderr as text. Output therefore arrives when the command
 *    ends. A transport failure re-sends the same key (the server replays
 *    the stored result); a 409 "execution is already in progress" for the
 *    command's own request id (an earlier send of it) is waited out.
 *  - Capabilities: exec, stdin, files, resume, background processes,
 *    lifetime and list_owned; isolation unless the upstream backend is
 *    local or safehouse (whose commands see the host). No snapshot, no
 *    terminal.
 *  - list_owned: GET /v1/sandboxes, the organization's records; those
 *    whose "idempotency_key" is a create token ("sbx-" + 32 hex digits:
 *    the key this plugin sends when the caller gives none) and whose status
 *    is creating, running or stopping are reported, with created_at and
 *    expires_at. The contract's create carries no labels (unknown fields
 *    are dropped), so the key is the label: sbx-server shows it on records
 *    made with one (beyond the reference, whose records carry no key, so
 *    nothing of a reference server is ever listed). A create made with the
 *    caller's own idempotency_key is not listed. destroy_by_id: GET the
 *    record first and refuse (invalid_argument naming the id) one whose key
 *    is no create token; then DELETE; a record already gone (404) or
 *    destroyed is success.
 *  - exec_kill: a command of its own that signals every process carrying
 *    the command's mark (provider.h), found with one grep over
 *    /proc/N/environ, so timeouts end the whole tree. A command not sent
 *    yet (its stdin still open, read before it goes) is never sent: it
 *    ends at once with the signal's code (128 + N).
 *  - files: through execute, byte-exact: data travels base64-encoded in
 *    the script (64 KiB per request, into a temporary file renamed into
 *    place) and back base64-encoded in stdout (4 MiB per request); listing
 *    and stat through GNU find's -printf, NUL-separated.
 *  - destroy: DELETE /v1/sandboxes/{id} (200 with the record, also when it
 *    was destroyed already; 404: gone already). is_alive: GET, status
 *    running. sandbox_root: SANDBOX_ROOT as the sandbox's commands see it,
 *    asked with one command at create. session_state: {"version":1,
 *    "sandbox_id","url","backend","root"} (no key); resume GETs the record
 *    (a client without a URL uses the state's).
 *  - Errors (§0, §10): the answer's {"detail": X} mapped onto sbx codes
 *    (rm_fail below); a server that does not answer is connection. The
 *    contract's provider payload has a fixed message per code and no
 *    option name, so a refused create's message names the options the
 *    request set ("create the sandbox (memory_mb 64): ..."), and, when it
 *    set only one, context option names it.
 *
 * Threading: slots may run at once; a sandbox's gone flag has its lock;
 * the error context kept for exec_wait (rm_last_ctx) is per thread.
 *
 * A create whose answer never came after its re-sends (the control plane
 * may have made the sandbox) fails with outcome unknown, and the client's
 * reaper sends the same create again with its key, at once and then once a
 * second for 30 s (cl_reap_lost): the control plane answers with the
 * record it made, or makes it, and the reaper deletes it (CASE-20). The
 * contract has no other way to find a sandbox by its idempotency key.
 */
#include "cloud.h"
#include "provider.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define RM_BACKEND "remote"
#define RM_STATE_VERSION 1
#define RM_WAIT_S 300.0             /* bound on waiting for a replayed create */
#define RM_WRITE_CHUNK 65536        /* file bytes per request (base64 in argv) */
#define RM_READ_CHUNK 4194304       /* file bytes per request (base64 in stdout) */
#define RM_FIELDS_STDIN (4 * 1048576) /* stdin bytes sent as stdin_b64 (sbx-server's
                                       * bodies: at most 8 MiB) */
/* Exit statuses of the file scripts. */
#define RM_EXIT_MISSING 3
#define RM_EXIT_ISDIR 4
#define RM_EXIT_NOTDIR 5

#define RM_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_RESUME         \
                 | SBX_CAP_BACKGROUND | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED)
/* Upstream backends whose commands see the host (no isolation). */
static const char *const rm_host_backends[] = { "local", "safehouse", NULL };

/* A create whose outcome is unknown: what the reaper sends again. */
typedef struct rm_lost {
    char *key;          /* its Idempotency-Key */
    char *api;
    char *body;         /* its JSON body */
    struct rm_lost *next;
} rm_lost;

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, base URL (NULL when none was
                         * configured), reaper of creates whose outcome is
                         * unknown (CASE-20) */
    char *backend;      /* the upstream backend, or NULL */
    int has_key;
    char *url_error;    /* the bad URL's message, when one was given */
    pthread_mutex_t lost_lock;
    rm_lost *lost;      /* guarded by lost_lock */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the server's id and the gone flag */
    struct sbx_plugin_client *c;
    char *api;          /* the control plane it lives on */
    char *backend;      /* its upstream backend, or NULL when not known */
    char *root;         /* its SANDBOX_ROOT ("" where it owns /) */
    int fields;         /* the server takes execute's env and cwd fields */
};

typedef struct rm_proc {
    cl_script_proc sp;  /* first member (provider.h) */
    char *cwd;          /* the caller's cwd, or NULL */
    struct rm_ctx_list *fail_ctx; /* the failure's context (rm_exec_wait), or NULL */
    int fields;         /* sent as execute's fields, not as a script */
    sbx_error_code cwd_refused; /* with fields: the upstream backend's refusal of
                                 * the cwd (not_found, invalid_argument), or 0 */
    char **argv;        /* with fields: the caller's argv, or NULL */
    char *shell;        /* the caller's shell command, or NULL */
    int sent;           /* the command's execute is on its way (sp.base.lock) */
    int killed;         /* exec_kill's signal before that: it never goes */
} rm_proc;

/* ------------------------------------------------------------------------ */
/* Errors: the control plane's {"detail": X} (§0, §10)                       */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *name;
    sbx_error_code code;
} rm_codes[] = {
    { "backend_not_installed", SBX_ERROR_BACKEND_NOT_INSTALLED },
    { "configuration", SBX_ERROR_CONFIGURATION },
    { "creation_failed", SBX_ERROR_CREATION_FAILED },
    { "execution_failed", SBX_ERROR_EXECUTION_FAILED },
    { "command_failed", SBX_ERROR_COMMAND_FAILED },
    { "timeout", SBX_ERROR_TIMEOUT },
    { "connection", SBX_ERROR_CONNECTION },
    { "authentication", SBX_ERROR_AUTHENTICATION },
    { "not_found", SBX_ERROR_NOT_FOUND },
    { "feature_not_supported", SBX_ERROR_FEATURE_NOT_SUPPORTED },
    { "workspace", SBX_ERROR_WORKSPACE },
    { "rate_limited", SBX_ERROR_RATE_LIMITED },
    { "invalid_argument", SBX_ERROR_INVALID_ARGUMENT },
    { "cancelled", SBX_ERROR_CANCELLED },
    { "resource_exhausted", SBX_ERROR_RESOURCE_EXHAUSTED },
};

/* What a failure of @op is when its code says nothing ("unknown"). */
static sbx_error_code rm_op_code(const char *op)
{
    return strcmp(op, "create") == 0 ? SBX_ERROR_CREATION_FAILED : SBX_ERROR_EXECUTION_FAILED;
}

/* The code of a status whose detail is a string. */
static sbx_error_code rm_status_code(long status, const char *op)
{
    switch (status) {
    case 400: case 422: return SBX_ERROR_INVALID_ARGUMENT;
    case 401: case 403: return SBX_ERROR_AUTHENTICATION;
    case 404: case 410: return SBX_ERROR_NOT_FOUND;
    case 405: case 501: return SBX_ERROR_FEATURE_NOT_SUPPORTED;
    case 408: case 504: return SBX_ERROR_TIMEOUT;
    case 409: return SBX_ERROR_CONFIGURATION;
    case 429: return SBX_ERROR_RATE_LIMITED;
    default: break;
    }
    if (status >= 500)
        return SBX_ERROR_CONNECTION;
    return rm_op_code(op);
}

/* @v as context text: a string as it is, anything else as JSON. */
static const char *rm_ctx_text(json_object *v)
{
    return json_object_is_type(v, json_type_string)
               ? json_object_get_string(v)
               : json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

/* The context pairs of the last error made on this thread by the
 * functions below, kept apart from the error itself: a command's worker
 * fails through cl_proc, which hands exec_wait one pair only, so
 * rm_exec_wait adds these back to the error it returns. */
#define RM_CTX_MAX 16
typedef struct rm_ctx_list {
    int n;
    char key[RM_CTX_MAX][32];
    char value[RM_CTX_MAX][256];
} rm_ctx_list;
static __thread rm_ctx_list rm_last_ctx;

/* cl_context(), also recorded in rm_last_ctx. */
static void rm_ctx(sbx_error *err, const char *key, const char *value)
{
    cl_context(err, key, value);
    rm_ctx_list *l = &rm_last_ctx;
    if (!value || l->n >= RM_CTX_MAX)
        return;
    snprintf(l->key[l->n], sizeof l->key[0], "%s", key);
    snprintf(l->value[l->n], sizeof l->value[0], "%s", value);
    l->n++;
}

static void rm_num_context(sbx_error *err, const char *key, long v)
{
    char b[32];
    snprintf(b, sizeof b, "%ld", v);
    rm_ctx(err, key, b);
}

/* The error of a provider payload @d ({"message","code","backend","op",
 * "retryable","outcome","context"}, §0) or a policy denial ({"message",
 * "code":"policy_denied","policy","current","limit"}, §4). */
static sbx_error *rm_fail_payload(cl_http *h, sbx_error **error, long status, json_object *d,
                                  const char *op, const char *what)
{
    const char *code_s = cl_json_str(d, "code");
    const char *msg = cl_json_str(d, "message");
    sbx_error_code code = (sbx_error_code)-1;
    for (size_t i = 0; code_s && i < sizeof rm_codes / sizeof rm_codes[0]; i++)
        if (strcmp(code_s, rm_codes[i].name) == 0)
            code = rm_codes[i].code;
    int denial = code_s && strcmp(code_s, "policy_denied") == 0;
    if (denial)
        code = SBX_ERROR_CONFIGURATION;
    if (code == (sbx_error_code)-1)
        code = status >= 400 && status < 500 && status != 422 ? rm_status_code(status, op)
                                                             : rm_op_code(op);
    const char *ub = cl_json_str(d, "backend");
    char text[1200];
    snprintf(text, sizeof text, "%s: %s (HTTP %ld%s%s%s)", what,
             msg ? msg : "Provider operation failed.", status, ub ? ", backend " : "",
             ub ? ub : "", denial ? ", organization policy" : "");
    cl_http_scrub(h, text);
    sbx_error *err = cl_fail(error, code, op, "%s", text);
    rm_num_context(err, "http_status", status);
    if (code_s)
        rm_ctx(err, "remote_code", code_s);
    if (ub)
        rm_ctx(err, "upstream_backend", ub);
    const char *uop = cl_json_str(d, "op");
    if (uop)
        rm_ctx(err, "upstream_op", uop);
    json_object *v;
    if (json_object_object_get_ex(d, "retryable", &v))
        rm_ctx(err, "remote_retryable", json_object_get_boolean(v) ? "true" : "false");
    const char *outcome = cl_json_str(d, "outcome");
    if (outcome && strcmp(outcome, "unknown") == 0)
        cl_outcome_unknown(err);
    if (denial) {
        const char *pol = cl_json_str(d, "policy");
        if (pol)
            rm_ctx(err, "policy", pol);
        if (json_object_object_get_ex(d, "current", &v) && v)
            rm_ctx(err, "current", rm_ctx_text(v));
        if (json_object_object_get_ex(d, "limit", &v) && v)
            rm_ctx(err, "limit", rm_ctx_text(v));
    }
    json_object *ctx = cl_json_path(d, "context", NULL);
    if (ctx && json_object_is_type(ctx, json_type_object)) {
        json_object_object_foreach(ctx, k, cv) {
            if (cv && !json_object_is_type(cv, json_type_object)
                && !json_object_is_type(cv, json_type_array))
                rm_ctx(err, k, rm_ctx_text(cv));
        }
    }
    return err;
}

/*
 * The error of a control-plane answer @r that is not a 2xx (@what names the
 * call): {"detail": X} with X a string (its text; 409s told apart by it), an
 * object (a provider payload or a policy denial), or a list (validation
 * errors: "LOC: MSG" for each, joined with "; ", context field = the first's
 * location without "body"/"query"); any other body by its status, its text
 * quoted. Codes: a payload's own code ("unknown": creation_failed on
 * create, else execution_failed); 401 and 403 authentication (context
 * scope for "API key requires scope: S"); 404 not_found; 409 "idempotency
 * key was already used with a different request" invalid_argument (reason
 * idempotency_key_reused), "sandbox is destroyed" not_found (reason gone),
 * other "sandbox is S" and "execution is already in progress"
 * execution_failed (context status / reason in_progress), a stored failed
 * execution's payload (a string holding JSON) as that payload, others
 * configuration; 422 "backend is not enabled: B" configuration, other 422s
 * invalid_argument; 429 rate_limited; 504 timeout; other 5xx connection;
 * never unknown. Context http_status always. Scrubbed of the key.
 */
static sbx_error *rm_fail(cl_http *h, sbx_error **error, const cl_resp *r, const char *op,
                          const char *what)
{
    json_object *j = r->body.data ? json_tokener_parse(r->body.data) : NULL;
    json_object *d = NULL;
    sbx_error *err = NULL;
    char text[1200];
    if (j && json_object_is_type(j, json_type_object))
        json_object_object_get_ex(j, "detail", &d);
    if (d && json_object_is_type(d, json_type_object)) {
        err = rm_fail_payload(h, error, r->status, d, op, what);
        goto out;
    }
    if (d && json_object_is_type(d, json_type_array)) {
        cl_buf b = { 0 };
        const char *field = NULL;
        size_t n = json_object_array_length(d);
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(d, i), *loc = cl_json_path(e, "loc", NULL);
            const char *m = cl_json_str(e, "msg");
            cl_buf l = { 0 };
            size_t ln = loc && json_object_is_type(loc, json_type_array)
                            ? json_object_array_length(loc) : 0;
            for (size_t k = 0; k < ln; k++) {
                json_object *p = json_object_array_get_idx(loc, k);
                const char *ps = rm_ctx_text(p);
                if (k == 0 && (strcmp(ps, "body") == 0 || strcmp(ps, "query") == 0) && ln > 1)
                    continue;
                cl_buf_printf(&l, "%s%s", l.len ? "." : "", ps);
            }
            cl_buf_printf(&b, "%s%s%s%s", i ? "; " : "", l.len ? l.data : "",
                          l.len ? ": " : "", m ? m : "invalid value");
            if (i == 0 && l.len)
                field = strdup(l.data);
            cl_buf_clear(&l);
        }
        snprintf(text, sizeof text, "%s: %s (HTTP %ld)", what, b.len ? b.data : "invalid request",
                 r->status);
        cl_buf_clear(&b);
        cl_http_scrub(h, text);
        err = cl_fail(error, r->status == 422 || r->status == 400 ? SBX_ERROR_INVALID_ARGUMENT
                                                                  : rm_status_code(r->status, op),
                      op, "%s", text);
        if (field)
            rm_ctx(err, "field", field);
        free((void *)field);
        rm_num_context(err, "http_status", r->status);
        goto out;
    }
    if (d && json_object_is_type(d, json_type_string)) {
        const char *s = json_object_get_string(d);
        /* A failed execution's stored payload comes back as JSON text. */
        json_object *inner = s[0] == '{' ? json_tokener_parse(s) : NULL;
        if (inner && json_object_is_type(inner, json_type_object)
            && cl_json_str(inner, "code")) {
            err = rm_fail_payload(h, error, r->status, inner, op, what);
            json_object_put(inner);
            goto out;
        }
        json_object_put(inner);
        sbx_error_code code = rm_status_code(r->status, op);
        const char *reason = NULL, *status = NULL, *scope = NULL, *ub = NULL;
        if (r->status == 409) {
            if (strstr(s, "idempotency key was already used")) {
                code = SBX_ERROR_INVALID_ARGUMENT;
                reason = "idempotency_key_reused";
            } else if (strcmp(s, "sandbox is destroyed") == 0) {
                code = SBX_ERROR_NOT_FOUND;
                reason = "gone";
            } else if (strncmp(s, "sandbox is ", 11) == 0) {
                code = SBX_ERROR_EXECUTION_FAILED;
                status = s + 11;
            } else if (strcmp(s, "execution is already in progress") == 0) {
                code = SBX_ERROR_EXECUTION_FAILED;
                reason = "in_progress";
            } else if (strstr(s, "runtime is unavailable") || strstr(s, "not attached")) {
                code = SBX_ERROR_EXECUTION_FAILED;
                reason = "runtime_unavailable";
            } else if (strstr(s, "termination is already in progress")) {
                code = SBX_ERROR_EXECUTION_FAILED;
                reason = "terminating";
            }
        } else if (r->status == 403 && strncmp(s, "API key requires scope: ", 24) == 0) {
            scope = s + 24;
        } else if (r->status == 422 && strncmp(s, "backend is not enabled: ", 24) == 0) {
            code = SBX_ERROR_CONFIGURATION;
            ub = s + 24;
        }
        snprintf(text, sizeof text, "%s: %s (HTTP %ld)", what, s, r->status);
        cl_http_scrub(h, text);
        err = cl_fail(error, code, op, "%s", text);
        rm_num_context(err, "http_status", r->status);
        if (reason)
            rm_ctx(err, "reason", reason);
        if (status)
            rm_ctx(err, "status", status);
        if (scope)
            rm_ctx(err, "scope", scope);
        if (ub)
            rm_ctx(err, "upstream_backend", ub);
        goto out;
    }
    /* Not the contract's error body: the status and the text. */
    err = cl_fail_status(h, error, rm_status_code(r->status, op), r, op, what);
out:
    /* Also without an error to fill (a command's worker passes none): the
     * thread's last error carries the outcome to exec_wait. */
    if (r->status >= 500 && r->status != 502 && r->status != 504
        && (strcmp(op, "create") == 0 || strcmp(op, "exec") == 0))
        cl_outcome_unknown(err);
    json_object_put(j);
    return err;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

/* One call on the control plane: @method @api@path with @body (or none)
 * and the Idempotency-Key @key (or none). With a key (or for GET and
 * DELETE) a transport failure re-sends it; an answer is never re-sent.
 * 0 with the answer in @r (any status), -1 with the transport's error. */
static int rm_call(cl_http *h, const sbx_call_ctx *ctx, const char *method, const char *api,
                   const char *path, json_object *body, const char *key, cl_resp *r,
                   const char *op, const char *what, sbx_error **error)
{
    char *url = cl_printf("%s%s", api, path);
    char hk[300];
    const char *hdrs[3] = { "Accept: application/json", NULL, NULL };
    if (key) {
        snprintf(hk, sizeof hk, "Idempotency-Key: %s", key);
        hdrs[1] = hk;
    }
    const char *b = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL;
    int safe = key || strcmp(method, "GET") == 0 || strcmp(method, "DELETE") == 0;
    cl_req rq = { .method = method, .url = url, .headers = hdrs, .body = b,
                  .body_len = b ? strlen(b) : 0, .idempotent = safe ? CL_SAFE : CL_UNSAFE,
                  .answers_final = 1, .what = what };
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int rc = cl_request(h, ctx, &rq, r, op, error);
    free(url);
    return rc;
}

/* The sandbox's path "/v1/sandboxes/ID@suffix", a new string. */
static char *rm_path(const char *id, const char *suffix)
{
    char *e = cl_url_escape(id);
    char *p = e ? cl_printf("/v1/sandboxes/%s%s", e, suffix) : NULL;
    free(e);
    return p;
}

/* A 2xx answer's JSON object, or NULL with a connection error. */
static json_object *rm_json(const cl_resp *r, const char *op, const char *what, sbx_error **error)
{
    json_object *j = cl_resp_json(r, op, what, error);
    if (j && !json_object_is_type(j, json_type_object)) {
        json_object_put(j);
        cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: the control plane's answer is not a "
                "JSON object", what);
        return NULL;
    }
    return j;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

static int rm_setup(const sbx_host_services *host, sbx_error **error)
{
    return cl_setup(host, RM_BACKEND, error);
}

static void rm_client_clear(sbx_plugin_client *c)
{
    while (c->lost) {
        rm_lost *l = c->lost;
        c->lost = l->next;
        free(l->key);
        free(l->api);
        free(l->body);
        free(l);
    }
    pthread_mutex_destroy(&c->lost_lock);
    free(c->backend);
    free(c->url_error);
}

/* A string option @key of @cfg, else the variable @env; NULL when neither
 * is set (or empty). -1 when the option is not a string. */
static int rm_opt(json_object *cfg, const char *key, const char *env, const char **out,
                  sbx_error **error)
{
    json_object *v;
    *out = NULL;
    if (cfg && json_object_object_get_ex(cfg, key, &v) && v) {
        if (!json_object_is_type(v, json_type_string)) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                               "remote client option %s is not a string", key), "option", key);
            return -1;
        }
        *out = json_object_get_string(v);
    } else if (getenv(env)) {
        *out = getenv(env);
    }
    if (*out && !**out)
        *out = NULL;
    return 0;
}

static const char *rm_status(json_object *rec);
static int rm_delete_on(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *api,
                        const char *id, const char *op, sbx_error **error);

/*
 * The reaper's look for the create sent with Idempotency-Key @token whose
 * outcome was unknown (CASE-20): the same create sent again with that key.
 * The control plane answers with the record it made (a replay: nothing is
 * made twice) or, when the first never reached it, makes it now; either
 * way a sandbox that is not destroyed is what the reaper deletes. One id,
 * or none.
 */
static int rm_reap_find(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                        sbx_error **error)
{
    struct sbx_plugin_client *c = ud;
    char *api = NULL, *body = NULL;
    pthread_mutex_lock(&c->lost_lock);
    for (rm_lost *l = c->lost; l; l = l->next)
        if (strcmp(l->key, token) == 0) {
            api = strdup(l->api);
            body = strdup(l->body);
            break;
        }
    pthread_mutex_unlock(&c->lost_lock);
    cl_ids found = { 0 };
    int rc = 0;
    json_object *b = body ? json_tokener_parse(body) : NULL;
    if (api && b) {
        cl_resp r = { 0 };
        rc = rm_call(c->cl.http, ctx, "POST", api, "/v1/sandboxes", b, token, &r, "create",
                     "send the lost create again", error);
        if (rc == 0 && r.status / 100 == 2) {
            json_object *j = cl_resp_json(&r, "create", "send the lost create again", NULL);
            const char *id = cl_json_str(j, "id");
            if (id && strcmp(rm_status(j), "destroyed") != 0)
                rc = cl_ids_add(&found, id);
            json_object_put(j);
        } else if (rc == 0) {
            rc = -1;
        }
        cl_resp_clear(&r);
    }
    json_object_put(b);
    free(api);
    free(body);
    return cl_ids_finish(&found, rc, ids, "create", error);
}

static int rm_reap_delete(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                          const char *op, sbx_error **error)
{
    return c->cl.api ? rm_delete_on(c, ctx, c->cl.api, id, op, error) : -1;
}

/* The base URL is checked by the plugin, the key set by it: a bad URL is
 * said at once, a missing one or key at the first call. */
static const cl_client_spec rm_client_spec = {
    .provider = RM_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .find = rm_reap_find, .del = rm_reap_delete, .clear = rm_client_clear,
};

/* Keeps what the reaper needs to send create @key again, and starts
 * looking (cl_reap_lost). */
static void rm_create_lost(struct sbx_plugin_client *c, const char *api, const char *key,
                           json_object *body)
{
    rm_lost *l = calloc(1, sizeof(*l));
    const char *b = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    if (!l || !(l->key = strdup(key)) || !(l->api = strdup(api)) || !(l->body = strdup(b))) {
        if (l) {
            free(l->key);
            free(l->api);
            free(l->body);
        }
        free(l);
        return;
    }
    pthread_mutex_lock(&c->lost_lock);
    l->next = c->lost;
    c->lost = l;
    pthread_mutex_unlock(&c->lost_lock);
    cl_reap_lost(c->cl.reaper, key);
}

static int rm_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&rm_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    pthread_mutex_init(&c->lost_lock, NULL);
    static const char *const known[] = { "url", "api_key", "backend", "retries",
                                         "rate_limit_retries", "max_retry_wait_s", NULL };
    if (cfg) {
        json_object_object_foreach(cfg, k, v) {
            (void)v;
            size_t i = 0;
            while (known[i] && strcmp(known[i], k) != 0)
                i++;
            if (!known[i]) {
                sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                       "remote client options: unknown key \"%s\" (known: url, "
                                       "api_key, backend, retries, rate_limit_retries, "
                                       "max_retry_wait_s)", k);
                cl_context(e, "option", k);
                goto fail;
            }
        }
    }
    const char *url, *key, *backend;
    if (rm_opt(cfg, "url", "BESPOKE_SANDBOX_URL", &url, error) < 0
        || rm_opt(cfg, "api_key", "BESPOKE_SANDBOX_KEY", &key, error) < 0
        || rm_opt(cfg, "backend", "BESPOKE_SANDBOX_BACKEND", &backend, error) < 0)
        goto fail;
    if (url) {
        /* A bad URL is said at once: it was given. */
        json_object *u = json_object_new_object();
        json_object_object_add(u, "url", json_object_new_string(url));
        c->cl.api = cl_base_url(u, "url", NULL, NULL, error);
        json_object_put(u);
        if (!c->cl.api)
            goto fail;
    }
    if (backend && !(c->backend = strdup(backend))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    if (key) {
        char *auth = cl_printf("Bearer %s", key);
        int bad = !auth || cl_http_set_auth(c->cl.http, "Authorization", auth) < 0
                  || cl_http_set_secret(c->cl.http, key) < 0;
        free(auth);
        if (bad) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto fail;
        }
        c->has_key = 1;
    }
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

/* The control plane's URL for a call: @api (a sandbox's), else the
 * client's; and the key. -1 with a configuration error naming what is
 * missing. */
static const char *rm_ready(struct sbx_plugin_client *c, const char *api, const char *op,
                            sbx_error **error)
{
    if (!api)
        api = c->cl.api;
    if (!api) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                               "remote backend: no control-plane URL (set the client option "
                               "url or BESPOKE_SANDBOX_URL)");
        cl_context(e, "option", "url");
        return NULL;
    }
    if (!c->has_key) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                               "remote backend: no product key (set the client option api_key "
                               "or BESPOKE_SANDBOX_KEY)");
        cl_context(e, "option", "api_key");
        return NULL;
    }
    return api;
}

static int rm_isolated(const char *backend)
{
    if (!backend)
        return 0;
    for (size_t i = 0; rm_host_backends[i]; i++)
        if (strcmp(rm_host_backends[i], backend) == 0)
            return 0;
    return 1;
}

static int rm_probe(sbx_plugin_client *client, const sbx_call_ctx *ctx, uint64_t *caps,
                    sbx_error **error)
{
    (void)ctx;
    /* Without a control plane's URL and a product key nothing can be
     * made: listed unavailable, saying which is missing. */
    if (!rm_ready(client, NULL, "probe", error))
        return -1;
    *caps = RM_CAPS | (rm_isolated(client->backend) ? SBX_CAP_ISOLATION : 0);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Execute: one command through the control plane                            */
/* ------------------------------------------------------------------------ */

/* What one execute gave: the exit code and the output (binary-safe). */
typedef struct rm_result {
    int exit_code;
    cl_buf out, err;
} rm_result;

static void rm_result_clear(rm_result *x)
{
    cl_buf_clear(&x->out);
    cl_buf_clear(&x->err);
}

/* Member @b64 (base64) of @j into @buf, else member @text. */
static int rm_output(json_object *j, const char *b64, const char *text, cl_buf *buf)
{
    json_object *v;
    if (json_object_object_get_ex(j, b64, &v) && json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        return cl_base64_decode(s, strlen(s), buf);
    }
    if (json_object_object_get_ex(j, text, &v) && json_object_is_type(v, json_type_string))
        return cl_buf_append(buf, json_object_get_string(v),
                             (size_t)json_object_get_string_len(v));
    return 0;
}

/*
 * POST /v1/sandboxes/{id}/execute with the body @b (taken: freed here) and
 * a new request id as the Idempotency-Key; rm_execute() sends
 * {"command":"/bin/sh","args":["-c", @script]}. A transport
 * failure re-sends the same key (cl_request); when the re-sent one finds
 * the first still running (409 "execution is already in progress") it asks
 * again, pausing 0.05 s doubling to 0.5 s, until the stored result comes
 * back. 0 with @x filled, -1 with *@error (a 404 or a destroyed sandbox sets
 * the gone flag: not_found, reason gone).
 */
static int rm_execute_body(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           json_object *b, rm_result *x, const char *op, sbx_error **error)
{
    rm_last_ctx.n = 0;
    if (cl_gone_check(&sb->s.gone, op, RM_BACKEND, sb->s.id, error) < 0) {
        json_object_put(b);
        return -1;
    }
    char key[40];
    memcpy(key, "req_", 4);
    cl_random_hex(key + 4, 16);
    json_object *j = NULL;
    char *path = rm_path(sb->s.id, "/execute");
    cl_resp r = { 0 };
    int rc = -1;
    double pause = 0.05;
    cl_bound bd = cl_bound_make(ctx, 0);
    if (!path) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    for (;;) {
        cl_resp_clear(&r);
        if (rm_call(sb->c->cl.http, ctx, "POST", sb->api, path, b, key, &r, op, "run the command",
                    error) < 0)
            goto out;
        /* The request id is ours alone (random, made for this call): a
         * 409 "in progress" is our own earlier send, re-sent after a
         * transport failure (by cl_request, or by libcurl itself on a
         * reused connection that died). */
        if (r.status == 409 && r.body.data
            && strstr(r.body.data, "execution is already in progress")) {
            if (cl_bound_left(&bd) == 0 || cl_sleep(pause, bd.cancel_fd)) {
                cl_fail(error, cl_bound_left(&bd) == 0 ? SBX_ERROR_TIMEOUT : SBX_ERROR_CANCELLED,
                        op, "run the command: the control plane still runs request %s", key);
                goto out;
            }
            pause = pause < 0.5 ? pause * 2 : pause;
            continue;
        }
        break;
    }
    if (r.status / 100 != 2) {
        sbx_error *e = rm_fail(sb->c->cl.http, error, &r, op, "run the command");
        if (r.status == 404 || (r.status == 409 && r.body.data
                                && strstr(r.body.data, "\"sandbox is destroyed\""))) {
            cl_gone_set(&sb->s.gone);
            rm_ctx(e, "sandbox_id", sb->s.id);
            if (r.status == 404)
                rm_ctx(e, "reason", "gone");
        }
        goto out;
    }
    if (!(j = rm_json(&r, op, "run the command", error)))
        goto out;
    int64_t code;
    if (cl_json_int(j, "exit_code", &code) != 1) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "run the command: the answer has no exit_code");
        goto out;
    }
    if (rm_output(j, "stdout_b64", "stdout", &x->out) < 0
        || rm_output(j, "stderr_b64", "stderr", &x->err) < 0) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "run the command: the answer's output is not "
                "base64");
        goto out;
    }
    /* 128+N for signal N; a negative code (a signal, as Python gives it)
     * too. */
    x->exit_code = code < 0 ? (int)((128 - code) & 0xff) : (int)(code & 0xff);
    rc = 0;
out:
    json_object_put(b);
    json_object_put(j);
    free(path);
    cl_resp_clear(&r);
    return rc;
}

static int rm_execute(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                      rm_result *x, const char *op, sbx_error **error)
{
    json_object *b = json_object_new_object(), *args = json_object_new_array();
    json_object_object_add(b, "command", json_object_new_string("/bin/sh"));
    json_object_array_add(args, json_object_new_string("-c"));
    json_object_array_add(args, json_object_new_string(script));
    json_object_object_add(b, "args", args);
    return rm_execute_body(sb, ctx, b, x, op, error);
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/* Whether the server of the sandbox record @rec takes execute's fields
 * beyond the reference ("env", "cwd"): sbx-server shows a record's
 * "idempotency_key" (and this plugin always sends one), a reference server
 * neither shows it nor reads those fields (it drops unknown ones), so a
 * record without it keeps every command in the portable script. */
static int rm_takes_fields(json_object *rec)
{
    return rec && json_object_object_get_ex(rec, "idempotency_key", NULL);
}

static void rm_sandbox_free(sbx_plugin_sandbox *sb)
{
    if (sb) {
        free(sb->api);
        free(sb->backend);
        free(sb->root);
    }
    cl_sandbox_free(sb);
}

static struct sbx_plugin_sandbox *rm_sandbox_new(struct sbx_plugin_client *c, const char *id,
                                                 const char *api, const char *backend,
                                                 const char *root)
{
    struct sbx_plugin_sandbox *sb = cl_sandbox_alloc(sizeof(*sb), id);
    if (!sb)
        return NULL;
    sb->c = c;
    if (cl_dup(&sb->api, api) < 0 || cl_dup(&sb->backend, backend) < 0
        || cl_dup(&sb->root, root ? root : "") < 0) {
        rm_sandbox_free(sb);
        return NULL;
    }
    return sb;
}

/* The sandbox_root slot: what the sandbox's commands see as SANDBOX_ROOT
 * (asked once at create, kept in the session state). */
static const char *rm_sandbox_root(sbx_plugin_sandbox *sb)
{
    return sb->root;
}

#define rm_refuse(error, option, value, why) \
    cl_refuse((error), RM_BACKEND, (option), (value), (why))

#define RM_NOT_UTF8 "is not UTF-8 text (the control plane's JSON carries nothing else)"

/* The create's body; the upstream backend and the idempotency key in
 * *@backend and *@key (borrowed from the request, the client or the
 * returned body's backend_options object kept in *@bo). */
static json_object *rm_create_body(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                   const sbx_plugin_create_request *rq, json_object **bo,
                                   const char **backend, const char **key, sbx_error **error)
{
    json_object *b = json_object_new_object();
    uint64_t set = rq->set_fields;
    char buf[64];
    *backend = c->backend;
    *key = ctx ? ctx->create_token : NULL;
    *bo = NULL;
    if (rq->backend_options && *rq->backend_options) {
        json_object *o = json_tokener_parse(rq->backend_options);
        sbx_error *err = NULL;
        if (!o || !json_object_is_type(o, json_type_object)) {
            err = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                          "remote backend_options: %s is not a JSON object", rq->backend_options);
        } else {
            json_object_object_foreach(o, k, v) {
                if (strcmp(k, "backend") != 0 && strcmp(k, "idempotency_key") != 0) {
                    err = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                  "remote backend_options: unknown key \"%s\" (known: "
                                  "\"backend\", \"idempotency_key\")", k);
                    cl_context(err, "name", k);
                    cl_context(err, "known", "\"backend\", \"idempotency_key\"");
                    break;
                }
                size_t n = json_object_is_type(v, json_type_string)
                               ? strlen(json_object_get_string(v)) : 0;
                if (n < 1 || n > 255) {
                    err = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                  "remote backend_options: %s %s is not a string of 1 to 255 "
                                  "characters", k, json_object_to_json_string(v));
                    cl_context(err, "name", k);
                    break;
                }
                if (strcmp(k, "backend") == 0)
                    *backend = json_object_get_string(v);
                else
                    *key = json_object_get_string(v);
            }
        }
        if (err) {
            json_object_put(o);
            cl_context(err, "option", "backend_options");
            goto fail;
        }
        *bo = o;
    }
    if (!*backend) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                           "remote backend: no upstream backend (set the client option backend, "
                           "the backend option backend or BESPOKE_SANDBOX_BACKEND)"),
                   "option", "backend");
        goto fail;
    }
    json_object_object_add(b, "backend", json_object_new_string(*backend));
    if (set & SBX_OPTION_CPU) {
        if (!(rq->cpu > 0)) {
            snprintf(buf, sizeof buf, "%g", rq->cpu);
            rm_refuse(error, "cpu", buf, "must be more than 0");
            goto fail;
        }
        json_object_object_add(b, "cpu", json_object_new_double(rq->cpu));
    }
    if (set & SBX_OPTION_MEMORY_MB)
        json_object_object_add(b, "memory_mb", json_object_new_int64(rq->memory_mb));
    if ((set & SBX_OPTION_DISK_MB) && rq->disk_mb > 0)
        json_object_object_add(b, "disk_mb", json_object_new_int64(rq->disk_mb));
    if (set & SBX_OPTION_TIMEOUT_SECS) {
        if (!(rq->timeout_secs > 0)) {
            snprintf(buf, sizeof buf, "%g", rq->timeout_secs);
            rm_refuse(error, "timeout_secs", buf, "must be more than 0");
            goto fail;
        }
        json_object_object_add(b, "timeout_secs",
                               json_object_new_int64((int64_t)ceil(rq->timeout_secs)));
    }
    if ((set & SBX_OPTION_GPU) && rq->gpu)
        json_object_object_add(b, "gpu", json_object_new_string(rq->gpu));
    if (rq->image)
        json_object_object_add(b, "image", json_object_new_string(rq->image));
    if (rq->template_name)
        json_object_object_add(b, "template", json_object_new_string(rq->template_name));
    if (rq->snapshot_id)
        json_object_object_add(b, "snapshot_id", json_object_new_string(rq->snapshot_id));
    if (rq->app_name)
        json_object_object_add(b, "app_name", json_object_new_string(rq->app_name));
    if (rq->workdir && *rq->workdir)
        json_object_object_add(b, "workdir", json_object_new_string(rq->workdir));
    if (set & SBX_OPTION_ALLOW_INTERNET)
        json_object_object_add(b, "allow_internet", json_object_new_boolean(rq->allow_internet));
    if (rq->env && rq->env[0])
        json_object_object_add(b, "env_vars", cl_env_object(rq->env));
    /* Refused here, naming the option, rather than by the server as a body
     * it cannot read (json_invalid at a byte offset). */
    json_object_object_foreach(b, opt, val) {
        if (json_object_is_type(val, json_type_string)
            && !cl_utf8_valid(json_object_get_string(val))) {
            rm_refuse(error, opt, NULL, RM_NOT_UTF8);
            goto fail;
        }
        if (json_object_is_type(val, json_type_object)) {
            json_object_object_foreach(val, name, ev) {
                if (!cl_utf8_valid(name)) {
                    rm_refuse(error, "env", NULL, "a variable's name " RM_NOT_UTF8);
                    goto fail;
                }
                if (!cl_utf8_valid(json_object_get_string(ev))) {
                    char *why = cl_printf("the value of %s " RM_NOT_UTF8, name);
                    rm_refuse(error, "env", NULL, why ? why : RM_NOT_UTF8);
                    free(why);
                    goto fail;
                }
            }
        }
    }
    return b;
fail:
    json_object_put(*bo);
    *bo = NULL;
    json_object_put(b);
    return NULL;
}

/* A sandbox record's status, "unknown" when it has none. */
static const char *rm_status(json_object *rec)
{
    const char *s = cl_json_str(rec, "status");
    return s ? s : "unknown";
}

/* The error of a record whose status is failed: its latest_error (a
 * provider payload), else "the sandbox failed". */
static sbx_error *rm_record_error(cl_http *h, sbx_error **error, json_object *rec,
                                  const char *op, const char *what)
{
    json_object *le = cl_json_path(rec, "latest_error", NULL);
    sbx_error *err;
    if (le && json_object_is_type(le, json_type_object))
        err = rm_fail_payload(h, error, 0, le, op, what);
    else
        err = cl_fail(error, rm_op_code(op), op, "%s: the control plane's sandbox %s is %s",
                      what, cl_json_str(rec, "id") ? cl_json_str(rec, "id") : "?",
                      rm_status(rec));
    cl_context(err, "status", rm_status(rec));
    return err;
}

/* GET the record of sandbox @id on @api: the object, or NULL with
 * *@status (0 when no answer) and, unless 404, the error. */
static json_object *rm_get(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *api,
                           const char *id, long *status, const char *op, sbx_error **error)
{
    char *path = rm_path(id, "");
    cl_resp r = { 0 };
    json_object *j = NULL;
    *status = 0;
    if (!path) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    if (rm_call(c->cl.http, ctx, "GET", api, path, NULL, NULL, &r, op, "get the sandbox",
                error) == 0) {
        *status = r.status;
        if (r.status == 200)
            j = rm_json(&r, op, "get the sandbox", error);
        else if (r.status != 404)
            rm_fail(c->cl.http, error, &r, op, "get the sandbox");
    }
    free(path);
    cl_resp_clear(&r);
    return j;
}

typedef struct rm_waiting {
    struct sbx_plugin_client *c;
    const sbx_call_ctx *ctx;
    const char *api;
    const char *id;
    char state[32];
} rm_waiting;

/* One look at a replayed create's record: running 1, creating 0, else -1. */
static int rm_create_look(void *ud, const char **state, sbx_error **error)
{
    rm_waiting *w = ud;
    long st;
    json_object *j = rm_get(w->c, w->ctx, w->api, w->id, &st, "create", error);
    if (!j) {
        if (st == 404)
            cl_fail(error, SBX_ERROR_CREATION_FAILED, "create",
                    "create the sandbox: the control plane no longer has sandbox %s", w->id);
        return -1;
    }
    snprintf(w->state, sizeof w->state, "%s", rm_status(j));
    *state = w->state;
    int rc = 0;
    if (strcmp(w->state, "running") == 0)
        rc = 1;
    else if (strcmp(w->state, "creating") != 0) {
        rm_record_error(w->c->cl.http, error, j, "create", "create the sandbox");
        rc = -1;
    }
    json_object_put(j);
    return rc;
}

static int rm_delete(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                     const char *op, sbx_error **error);

/*
 * "create the sandbox" and, when the request set any, " (NAME VALUE, ...)"
 * for the options it set (never an env value) into @buf: what a refused
 * create's message names. Returns how many were set, the first's name in
 * *@one.
 */
static int rm_request_options(const sbx_plugin_create_request *rq, char *buf, size_t cap,
                              const char **one)
{
    uint64_t set = rq->set_fields;
    int n = 0;
    size_t len = (size_t)snprintf(buf, cap, "create the sandbox");
    *one = NULL;
#define RM_ADD(name, fmt, ...)                                                                 do {                                                                                           if (len < cap)                                                                                 len += (size_t)snprintf(buf + len, cap - len, "%s" name " " fmt,                                                   n ? ", " : " (", __VA_ARGS__);                                 if (!n++)                                                                                      *one = name;                                                                       } while (0)
    if (set & SBX_OPTION_CPU)
        RM_ADD("cpu", "%g", rq->cpu);
    if (set & SBX_OPTION_MEMORY_MB)
        RM_ADD("memory_mb", "%lld", (long long)rq->memory_mb);
    if ((set & SBX_OPTION_DISK_MB) && rq->disk_mb > 0)
        RM_ADD("disk_mb", "%lld", (long long)rq->disk_mb);
    if ((set & SBX_OPTION_GPU) && rq->gpu)
        RM_ADD("gpu", "%s", rq->gpu);
    if (rq->image)
        RM_ADD("image", "%s", rq->image);
    if (rq->template_name)
        RM_ADD("template", "%s", rq->template_name);
    if (rq->snapshot_id)
        RM_ADD("snapshot_id", "%s", rq->snapshot_id);
    if (rq->app_name)
        RM_ADD("app_name", "%s", rq->app_name);
    if (rq->workdir && *rq->workdir)
        RM_ADD("workdir", "%s", rq->workdir);
    if (set & SBX_OPTION_ALLOW_INTERNET)
        RM_ADD("allow_internet", "%s", rq->allow_internet ? "true" : "false");
#undef RM_ADD
    if (n && len < cap)
        snprintf(buf + len, cap - len, ")");
    return n;
}

static int rm_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    const char *api = rm_ready(c, NULL, op, error);
    if (!api || cl_workdir_check(RM_BACKEND, rq->workdir, error) < 0)
        return -1;
    const char *backend = NULL, *key = NULL;
    json_object *bo = NULL;
    json_object *body = rm_create_body(c, ctx, rq, &bo, &backend, &key, error), *j = NULL;
    if (!body)
        return -1;
    cl_resp r = { 0 };
    int rc = -1;
    char key_buf[40];
    if (!key) {
        /* No create token (a caller of the plugin alone): a key of our own. */
        memcpy(key_buf, "sbx-", 4);
        cl_random_hex(key_buf + 4, 16);
        key = key_buf;
    }
    if (rm_call(c->cl.http, ctx, "POST", api, "/v1/sandboxes", body, key, &r, op,
                "create the sandbox", error) < 0) {
        if (r.lost) {
            /* It may have made the sandbox: said so, and the reaper
             * sends the same create again to find and delete it. */
            if (error && *error)
                cl_outcome_unknown(*error);
            rm_create_lost(c, api, key, body);
        }
        goto out;
    }
    if (r.status / 100 != 2) {
        /* The contract's payload carries a fixed message per code and no
         * option name: the message names what the request set instead. */
        char what[1024];
        const char *one = NULL;
        int nset = rm_request_options(rq, what, sizeof what, &one);
        sbx_error *e = rm_fail(c->cl.http, error, &r, op, what);
        if (nset == 1 && r.status >= 400 && r.status < 500 && r.status != 401
            && r.status != 403 && r.status != 404 && r.status != 409)
            cl_context(e, "option", one);
        goto out;
    }
    j = rm_json(&r, op, "create the sandbox", error);
    const char *id = j ? cl_json_str(j, "id") : NULL;
    if (!id) {
        if (j)
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op,
                    "create the sandbox: the control plane answered without an id");
        goto out;
    }
    const char *st = rm_status(j);
    if (strcmp(st, "creating") == 0) {
        /* A replay while the first create is still at the provider. */
        rm_waiting w = { c, ctx, api, id, "" };
        char what[160];
        snprintf(what, sizeof what, "control-plane sandbox %s reaching status running", id);
        if (cl_wait_until(ctx, RM_WAIT_S, rm_create_look, &w, op, what, error) < 0)
            goto out;
    } else if (strcmp(st, "running") != 0) {
        sbx_error *e = rm_record_error(c->cl.http, error, j, op, "create the sandbox");
        cl_context(e, "sandbox_id", id);
        goto out;
    }
    const char *rb = cl_json_str(j, "backend");
    struct sbx_plugin_sandbox *sb = rm_sandbox_new(c, id, api, rb ? rb : backend, NULL);
    if (!sb) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        rm_delete(c, NULL, id, op, NULL);
        goto out;
    }
    sb->fields = rm_takes_fields(j);
    /* Its SANDBOX_ROOT, as its commands see it: the sandbox_root slot. */
    rm_result x = { 0 };
    if (rm_execute(sb, ctx, "printf %s \"$SANDBOX_ROOT\"", &x, op, error) < 0
        || x.exit_code != 0) {
        if (x.exit_code != 0)
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "create the sandbox: the first "
                    "command in control-plane sandbox %s exited %d", id, x.exit_code);
        rm_result_clear(&x);
        rm_delete(c, NULL, id, op, NULL);
        rm_sandbox_free(sb);
        goto out;
    }
    free(sb->root);
    sb->root = strndup(x.out.data ? x.out.data : "", x.out.len);
    rm_result_clear(&x);
    if (!sb->root) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        rm_delete(c, NULL, id, op, NULL);
        sb->root = NULL;
        rm_sandbox_free(sb);
        goto out;
    }
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(body);
    json_object_put(bo);
    json_object_put(j);
    cl_resp_clear(&r);
    return rc;
}

/* DELETE the sandbox @id on the client's control plane: 0 on 2xx or 404. */
static int rm_delete_on(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *api,
                        const char *id, const char *op, sbx_error **error)
{
    char *path = rm_path(id, "");
    cl_resp r = { 0 };
    int rc = -1;
    if (!path)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (rm_call(c->cl.http, ctx, "DELETE", api, path, NULL, NULL, &r, op,
                     "terminate the sandbox", error) == 0) {
        if (r.status / 100 == 2 || r.status == 404)
            rc = 0;
        else
            rm_fail(c->cl.http, error, &r, op, "terminate the sandbox");
    }
    free(path);
    cl_resp_clear(&r);
    return rc;
}

static int rm_delete(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                     const char *op, sbx_error **error)
{
    const char *api = rm_ready(client, NULL, op, error);
    return api ? rm_delete_on(client, ctx, api, id, op, error) : -1;
}

static int rm_destroy(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "destroy";
    if (cl_gone_get(&sb->s.gone))
        return 0;
    if (rm_delete_on(sb->c, ctx, sb->api, sb->s.id, op, error) < 0)
        return -1;
    cl_gone_set(&sb->s.gone);
    return 0;
}

static int rm_is_alive(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (cl_gone_get(&sb->s.gone))
        return 0;
    long st;
    json_object *j = rm_get(sb->c, ctx, sb->api, sb->s.id, &st, "is_alive", error);
    if (!j) {
        if (st == 404) {
            cl_gone_set(&sb->s.gone);
            return 0;
        }
        return -1;
    }
    const char *s = rm_status(j);
    int alive = strcmp(s, "running") == 0 || strcmp(s, "creating") == 0;
    if (strcmp(s, "destroyed") == 0 || strcmp(s, "failed") == 0)
        cl_gone_set(&sb->s.gone);
    json_object_put(j);
    return alive;
}

/* {"version":1,"sandbox_id":ID,"url":URL[,"backend":B],"root":R}: no key. */
static char *rm_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, RM_BACKEND, RM_STATE_VERSION, "sandbox_id", error);
    if (!j)
        return NULL;
    json_object_object_add(j, "url", json_object_new_string(sb->api));
    if (sb->backend)
        json_object_object_add(j, "backend", json_object_new_string(sb->backend));
    json_object_object_add(j, "root", json_object_new_string(sb->root));
    return cl_state_end(j, error);
}

static int rm_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "resume";
    const char *id = NULL;
    json_object *data = cl_state_in(state_json, RM_STATE_VERSION, "sandbox_id", RM_BACKEND, op,
                                    &id, error), *j = NULL;
    int rc = -1;
    if (!data)
        return -1;
    const char *surl = cl_json_str(data, "url");
    char *api = surl ? cl_trim_slash(surl) : NULL;
    const char *use = client->cl.api ? client->cl.api : api;
    if (use && strncmp(use, "http://", 7) != 0 && strncmp(use, "https://", 8) != 0) {
        cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                           "remote session state: url \"%s\" is not an http:// or https:// URL",
                           use), "url", use);
        goto out;
    }
    if (!(use = rm_ready(client, use, op, error)))
        goto out;
    long st;
    j = rm_get(client, ctx, use, id, &st, op, error);
    if (!j) {
        if (st == 404)
            cl_gone_error(error, op, RM_BACKEND, id);
        goto out;
    }
    const char *s = rm_status(j);
    if (strcmp(s, "destroyed") == 0 || strcmp(s, "failed") == 0) {
        cl_context(cl_gone_error(error, op, RM_BACKEND, id), "status", s);
        goto out;
    }
    const char *b = cl_json_str(j, "backend");
    struct sbx_plugin_sandbox *sb = rm_sandbox_new(client, id, use,
                                                   b ? b : cl_json_str(data, "backend"),
                                                   cl_json_str(data, "root"));
    if (!sb) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    sb->fields = rm_takes_fields(j);
    *sandbox = sb;
    rc = 0;
out:
    free(api);
    json_object_put(j);
    json_object_put(data);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Execute                                                                   */
/* ------------------------------------------------------------------------ */

/* The plugin's own short command (output dropped): the cl_run_fn. */
static int rm_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    rm_result x = { 0 };
    int rc = rm_execute(sb, ctx, cmd, &x, op, error);
    if (rc == 0)
        *code = x.exit_code;
    rm_result_clear(&x);
    return rc;
}

/* "$SANDBOX_ROOT"'PATH' for an absolute sandbox path (the sandbox's root
 * where it is a host directory, nothing where the sandbox owns /), 'PATH'
 * for a relative one ('./PATH' when it starts with '-', never an option of
 * the command that gets it): a new string, NULL on no memory. */
static char *rm_quote_path(const char *path)
{
    char *q = cl_shell_quote_path(path);
    if (!q || path[0] != '/')
        return q;
    char *s = cl_printf("\"$SANDBOX_ROOT\"%s", q);
    free(q);
    return s;
}

/* read() of @fd that gives up when @cancel_fd (-1: none) polls readable:
 * -1 with errno ECANCELED then (a command's stdin, read before anything is
 * sent, ends with an exec_kill or a free, not only at its EOF). */
static ssize_t rm_read_or_cancel(int fd, void *buf, size_t n, int cancel_fd)
{
    for (;;) {
        struct pollfd pf[2] = { { .fd = fd, .events = POLLIN },
                                { .fd = cancel_fd, .events = POLLIN } };
        int r = poll(pf, cancel_fd >= 0 ? 2 : 1, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (cancel_fd >= 0 && pf[1].revents) {
            errno = ECANCELED;
            return -1;
        }
        ssize_t k = read(fd, buf, n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        return k;
    }
}

/* Writes the bytes of @fd (up to @max, else -2) as the sandbox file @qpath
 * (rm_quote_path()) through execute, RM_WRITE_CHUNK bytes per request, into
 * "@qpath.sbx-TAG" renamed into place at the end with @mode (-1: none
 * set), parent directories made; rm_put_pre() writes the bytes of @pre
 * (borrowed; NULL: none) before those of @fd. 0, or -1 with *@error. */
static int rm_put_pre(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *qpath,
                      const char *shown, const cl_buf *pre, int fd, long mode, const char *op,
                      sbx_error **error)
{
    size_t pre_off = 0;
    char tag[33];
    cl_random_hex(tag, 16);
    char *buf = malloc(RM_WRITE_CHUNK);
    int rc = -1;
    if (!buf) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    for (int first = 1;; first = 0) {
        size_t n = 0;
        int eof = 0;
        if (pre && pre_off < pre->len) {
            n = pre->len - pre_off < RM_WRITE_CHUNK ? pre->len - pre_off : RM_WRITE_CHUNK;
            memcpy(buf, pre->data + pre_off, n);
            pre_off += n;
        }
        while (n < RM_WRITE_CHUNK) {
            ssize_t k = rm_read_or_cancel(fd, buf + n, RM_WRITE_CHUNK - n,
                                          ctx ? ctx->cancel_fd : -1);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && errno == ECANCELED) {
                cl_fail(error, SBX_ERROR_CANCELLED, op, "cancelled while reading the data for %s",
                        shown);
                goto out;
            }
            if (k < 0) {
                cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                   "cannot read the data for %s: %s", shown, strerror(errno)),
                           "path", shown);
                goto out;
            }
            if (k == 0) {
                eof = 1;
                break;
            }
            n += (size_t)k;
        }
        char *b64 = cl_base64_encode(buf, n);
        char modes[32] = "";
        if (eof && mode >= 0)
            snprintf(modes, sizeof modes, "chmod %lo -- \"$t\" || exit 6; ", mode & 07777);
        /* The first request makes the parents and truncates; the last
         * renames into place. */
        char *script = b64 ? cl_printf(
            "f=%s; t=\"$f.sbx-%s\"; %s"
            "printf %%s '%s' | base64 -d %s \"$t\" || exit 7; %s%s",
            qpath, tag,
            first ? "case $f in */*) d=${f%/*}; [ -z \"$d\" ] || mkdir -p -- \"$d\" "
                    "2>/dev/null || exit 5;; esac; [ -d \"$f\" ] && exit 4; "
                  : "",
            b64, first ? ">" : ">>", modes,
            eof ? "mv -f -- \"$t\" \"$f\" || exit 7" : "") : NULL;
        free(b64);
        if (!script) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto out;
        }
        int code = 0;
        int r = rm_run_short(sb, ctx, script, &code, op, error);
        free(script);
        if (r < 0 && !first)
            code = -1;      /* a part may be there: removed below */
        else if (r < 0)
            goto out;
        if (code != 0) {
            sbx_error *e = NULL;
            if (code == -1)
                ;           /* the call's own error stands */
            else if (code == RM_EXIT_ISDIR)
                e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                            "%s is a directory in the sandbox", shown);
            else if (code == RM_EXIT_NOTDIR)
                e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                            "cannot make the directory of %s in the sandbox", shown);
            else
                e = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                            "cannot write %s in the sandbox (exit %d)", shown, code);
            cl_context(e, "path", shown);
            /* qpath is quoted: the suffix follows its closing quote. */
            char *clean = cl_printf("rm -f -- %s'.sbx-%s'", qpath, tag);
            int ignore;
            if (clean)
                rm_run_short(sb, ctx, clean, &ignore, op, NULL);
            free(clean);
            goto out;
        }
        if (eof)
            break;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

static int rm_put(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *qpath,
                  const char *shown, int fd, long mode, const char *op, sbx_error **error)
{
    return rm_put_pre(sb, ctx, qpath, shown, NULL, fd, mode, op, error);
}

/* ------------------------------------------------------------------------ */
/* Exec as a process handle                                                  */
/* ------------------------------------------------------------------------ */

/*
 * A command as execute's own fields, where the server takes them
 * (rm_takes_fields()): the caller's argv as "command" and "args" (no
 * shell), or its shell command with "args" null (the server's /bin/sh -c);
 * the per-call environment and the command's mark (exec_kill) as "env",
 * laid over the sandbox's; the caller's cwd as "cwd", which the upstream
 * backend resolves as its own exec does. One request, and no shell of this
 * plugin started around the command. The body, or NULL on no memory.
 */
static json_object *rm_fields_body(const rm_proc *p, const cl_buf *in)
{
    json_object *b = json_object_new_object(), *env = json_object_new_object();
    if (!b || !env) {
        json_object_put(b);
        json_object_put(env);
        return NULL;
    }
    if (p->shell) {
        json_object_object_add(b, "command", json_object_new_string(p->shell));
        json_object_object_add(b, "args", NULL);
    } else {
        json_object *args = json_object_new_array();
        json_object_object_add(b, "command", json_object_new_string(p->argv[0]));
        for (size_t i = 1; p->argv[i]; i++)
            json_object_array_add(args, json_object_new_string(p->argv[i]));
        json_object_object_add(b, "args", args);
    }
    for (size_t i = 0; p->sp.env && p->sp.env[i]; i++) {
        const char *eq = strchr(p->sp.env[i], '=');
        char *name = eq ? strndup(p->sp.env[i], (size_t)(eq - p->sp.env[i])) : NULL;
        if (name)
            json_object_object_add(env, name, json_object_new_string(eq + 1));
        free(name);
    }
    json_object_object_add(env, CL_EXEC_MARK, json_object_new_string(p->sp.tag));
    json_object_object_add(b, "env", env);
    if (p->cwd)
        json_object_object_add(b, "cwd", json_object_new_string(p->cwd));
    if (in) {
        char *b64 = cl_base64_encode(in->data ? in->data : "", in->len);
        if (!b64) {
            json_object_put(b);
            return NULL;
        }
        json_object_object_add(b, "stdin_b64", json_object_new_string(b64));
        free(b64);
    }
    return b;
}

/* Reads @fd into @in until its end or more than @max bytes: 1 at the end,
 * 0 with more to come (@in holds the first @max + 1), -1 on a read error
 * (errno; ECANCELED once @cancel_fd polls readable). */
static int rm_read_upto(int fd, cl_buf *in, size_t max, int cancel_fd)
{
    char chunk[65536];
    while (in->len <= max) {
        size_t want = max + 1 - in->len < sizeof chunk ? max + 1 - in->len : sizeof chunk;
        ssize_t k = rm_read_or_cancel(fd, chunk, want, cancel_fd);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            return 1;
        if (cl_buf_append(in, chunk, (size_t)k) < 0) {
            errno = ENOMEM;
            return -1;
        }
    }
    return 0;
}

/* Whether the command of @p may go now: 1 (marked sent, so that an
 * exec_kill from here on goes through its mark), 0 when an exec_kill came
 * first (it never runs). */
static int rm_may_send(rm_proc *p)
{
    pthread_mutex_lock(&p->sp.base.lock);
    int ok = !p->killed;
    p->sent = ok;
    pthread_mutex_unlock(&p->sp.base.lock);
    return ok;
}

static int rm_exec_run(cl_proc *base)
{
    rm_proc *p = (rm_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sp.sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    cl_buf s = { 0 };
    char *in_q = NULL;
    int code = -1;
    rm_result x = { 0 };
    cl_buf in = { 0 };
    int in_whole = 0;
    if (p->fields && p->sp.stdin_fd >= 0) {
        /* Stdin as the execute's stdin_b64 when it ends within
         * RM_FIELDS_STDIN bytes; more goes the script's way, what was read
         * written first. */
        int r = rm_read_upto(p->sp.stdin_fd, &in, RM_FIELDS_STDIN, base->stop_fd);
        if (r < 0 && errno == ECANCELED)
            goto killed;
        if (r < 0) {
            cl_fail(NULL, errno == ENOMEM ? SBX_ERROR_RESOURCE_EXHAUSTED
                                          : SBX_ERROR_INVALID_ARGUMENT,
                    op, "cannot read the command's stdin: %s", strerror(errno));
            goto fail;
        }
        in_whole = r == 1;
    }
    if (p->fields && (p->sp.stdin_fd < 0 || in_whole)) {
        json_object *b = rm_fields_body(p, p->sp.stdin_fd >= 0 ? &in : NULL);
        if (!b) {
            cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto fail;
        }
        if (!rm_may_send(p)) {
            json_object_put(b);
            goto killed;
        }
        if (rm_execute_body(sb, &ctx, b, &x, op, NULL) < 0) {
            /* A cwd the upstream backend could not enter is its not_found
             * (HTTP 502), or its invalid_argument (HTTP 422: a file, or a
             * path leading out of its root) in the provider's payload
             * (upstream_op; the body's own fields passed the library's
             * checks); a sandbox gone is 404 or destroyed, the gone flag.
             * Answered as the script's cd would be, so that rm_exec_wait()
             * names the directory. */
            const cl_last_error *l = cl_last();
            int upstream = 0;
            for (int i = 0; i < rm_last_ctx.n; i++)
                upstream |= strcmp(rm_last_ctx.key[i], "upstream_op") == 0;
            if (!p->cwd || cl_gone_get(&sb->s.gone)
                || (l->code != SBX_ERROR_NOT_FOUND
                    && !(l->code == SBX_ERROR_INVALID_ARGUMENT && upstream)))
                goto fail;
            p->cwd_refused = l->code;
            x.exit_code = CL_CWD_MISSING_EXIT;
        }
        goto answered;
    }
    int bad = cl_buf_printf(&s, "export %s=%s\n", CL_EXEC_MARK, p->sp.tag) < 0;
    for (size_t i = 0; p->sp.env && p->sp.env[i] && !bad; i++) {
        const char *eq = strchr(p->sp.env[i], '=');
        if (!eq)
            continue;
        char *q = cl_shell_quote(eq + 1);
        bad |= !q || cl_buf_printf(&s, "export %.*s=%s\n", (int)(eq - p->sp.env[i]),
                                   p->sp.env[i], q) < 0;
        free(q);
    }
    if (p->sp.stdin_fd >= 0) {
        /* stdin: into a file in the sandbox first, then redirected. */
        char *name = cl_printf("${TMPDIR:-/tmp}/.%s.in", p->sp.tag);
        in_q = name ? cl_printf("\"${TMPDIR:-/tmp}\"/'.%s.in'", p->sp.tag) : NULL;
        free(name);
        if (!in_q || rm_put_pre(sb, &ctx, in_q, "stdin", &in, p->sp.stdin_fd, -1, op, NULL) < 0) {
            if (in_q && cl_last()->code == SBX_ERROR_CANCELLED && !rm_may_send(p))
                goto killed;
            if (!in_q)
                cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto fail;
        }
        bad |= cl_buf_printf(&s, "exec <%s; rm -f -- %s\n", in_q, in_q) < 0;
    } else {
        bad |= cl_buf_printf(&s, "exec </dev/null\n") < 0;
    }
    if (p->cwd) {
        char *q = rm_quote_path(p->cwd);
        bad |= !q || cl_buf_printf(&s, "cd -- %s || exit %d\n", q, CL_CWD_MISSING_EXIT) < 0;
        free(q);
    }
    if (p->shell) {
        /* A shell of its own, exec'd: its environment (/proc/N/environ)
         * holds the mark, so that exec_kill ends it too, not only its
         * children (the script's shell exported the mark after it
         * started). */
        char *q = cl_shell_quote(p->shell);
        bad |= !q || cl_buf_printf(&s, "exec /bin/sh -c %s", q) < 0;
        free(q);
    } else {
        bad |= cl_buf_append(&s, p->sp.script, strlen(p->sp.script)) < 0;
    }
    if (bad) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    if (!rm_may_send(p))
        goto killed;
    if (rm_execute(sb, &ctx, s.data, &x, op, NULL) < 0)
        goto fail;
answered:
    if (cl_proc_output(base, 1, x.out.data, x.out.len) < 0
        || cl_proc_output(base, 2, x.err.data, x.err.len) < 0) {
        /* The host closed its descriptor or stopped the command. */
        code = x.exit_code;
        goto out;
    }
    code = x.exit_code;
    goto out;
killed:
    /* exec_kill came before the command went: it never runs, and ends as
     * that signal would have ended it. */
    pthread_mutex_lock(&base->lock);
    code = 128 + (p->killed > 0 && p->killed < 128 ? p->killed : SIGKILL);
    pthread_mutex_unlock(&base->lock);
    goto out;
fail:
    cl_proc_fail_in(base, &sb->s);
    if (rm_last_ctx.n && (p->fail_ctx = malloc(sizeof *p->fail_ctx)) != NULL)
        *p->fail_ctx = rm_last_ctx;
    code = -1;
out:
    rm_result_clear(&x);
    cl_buf_clear(&s);
    cl_buf_clear(&in);
    free(in_q);
    return code;
}

static void rm_proc_fini(cl_script_proc *sp)
{
    free(((rm_proc *)sp)->cwd);
    free(((rm_proc *)sp)->fail_ctx);
    cl_strv_free(((rm_proc *)sp)->argv);
    free(((rm_proc *)sp)->shell);
}

/* exec_wait: the command's end; a missing cwd (the script's cd exited
 * CL_CWD_MISSING_EXIT and the sandbox has nothing there) is not_found
 * naming it, one that is not a directory invalid_argument naming it, as on
 * local. */
static int rm_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                        int *exit_code, sbx_error **error)
{
    (void)ctx;
    rm_proc *p = (rm_proc *)(void *)process;
    int rc = cl_proc_wait(&p->sp.base, timeout_ms, exit_code, "exec_wait", error);
    if (rc < 0 && error && *error && p->fail_ctx) {
        /* The worker's error came through cl_proc with its http_status (and
         * reason and sandbox_id when the sandbox is gone): the rest of it
         * (remote_code, upstream_backend ...). */
        for (int i = 0; i < p->fail_ctx->n; i++)
            if (strcmp(p->fail_ctx->key[i], "reason") != 0
                || p->sp.base.err_nctx == 0)
                cl_context(*error, p->fail_ctx->key[i], p->fail_ctx->value[i]);
    }
    if (rc == 1 && *exit_code == CL_CWD_MISSING_EXIT && p->cwd) {
        char *q = rm_quote_path(p->cwd);
        char *cmd = q ? cl_printf("test -d %s && exit 0; test -e %s && exit %d; exit %d", q, q,
                                  RM_EXIT_NOTDIR, RM_EXIT_MISSING) : NULL;
        int code = 0;
        sbx_call_ctx c2 = { sizeof(c2), cl_now() + 30, -1, NULL };
        if (cmd && rm_run_short(p->sp.sb, &c2, cmd, &code, "exec", NULL) == 0
            && (code == RM_EXIT_MISSING || code == RM_EXIT_NOTDIR)) {
            sbx_error *e = code == RM_EXIT_NOTDIR
                ? cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, "exec",
                          "the working directory %s is not a directory in the sandbox", p->cwd)
                : cl_fail(error, SBX_ERROR_NOT_FOUND, "exec",
                          "the working directory %s does not exist in the sandbox", p->cwd);
            cl_context(e, "path", p->cwd);
            rc = -1;
        } else if (p->cwd_refused) {
            /* The upstream backend refused it; the directory is there now,
             * or could not be looked at: its refusal, naming the cwd. */
            sbx_error *e = cl_fail(error, p->cwd_refused, "exec",
                                   "the control plane's backend refused the working directory "
                                   "%s (%s)", p->cwd,
                                   p->cwd_refused == SBX_ERROR_NOT_FOUND ? "not_found"
                                                                         : "invalid_argument");
            cl_context(e, "path", p->cwd);
            rc = -1;
        }
        free(cmd);
        free(q);
    }
    return rc;
}

/*
 * exec_kill: signal @sig to every process carrying the command's mark,
 * found by one grep over /proc/N/environ (a sandbox over local shares the
 * host's process table, where a tr and a grep per process, as
 * cl_mark_kill_command() does, takes seconds on a busy host); where grep
 * has no -z, that per-process scan. 0 at once when the command ended.
 */
static int rm_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                        sbx_error **error)
{
    rm_proc *p = (rm_proc *)(void *)process;
    pthread_mutex_lock(&p->sp.base.lock);
    int ended = p->sp.base.ended, unsent = !ended && !p->sent;
    if (unsent && !p->killed)
        p->killed = sig;
    pthread_mutex_unlock(&p->sp.base.lock);
    if (ended)
        return 0;
    if (unsent) {
        /* Not sent yet (its stdin still being read): it never goes; the
         * worker stops reading and ends. */
        cl_proc_stop(&p->sp.base);
        return 0;
    }
    char *slow = cl_mark_kill_command(p->sp.tag, sig);
    char *cmd = slow ? cl_printf(
        "if printf 'a\\0' | grep -qzx a 2>/dev/null; then "
        "for f in $(grep -lszx '%s=%s' /proc/[0-9]*/environ); do f=${f#/proc/}; "
        "kill -%d ${f%%/environ} 2>/dev/null; done; exit 0; else %s; fi",
        CL_EXEC_MARK, p->sp.tag, sig, slow) : NULL;
    free(slow);
    int code = 0;
    int rc = cmd ? rm_run_short(p->sp.sb, ctx, cmd, &code, "exec_kill", error) : -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "exec_kill", "out of memory");
    free(cmd);
    return rc;
}

static int rm_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                         sbx_error **error)
{
    (void)ctx;
    if (cl_exec_check(&sb->s, RM_BACKEND, rq, 0, error) < 0)
        return -1;
    /* The script's own cwd line is ours ("$SANDBOX_ROOT" + cwd). */
    sbx_plugin_exec_request r2 = *rq;
    r2.cwd = NULL;
    rm_proc *p = (rm_proc *)cl_script_proc_new(sizeof(rm_proc), sb, NULL, &r2, rm_run_short,
                                               "exec", error);
    if (!p)
        return -1;
    p->sp.fini = rm_proc_fini;
    p->fields = sb->fields;
    if ((rq->cwd && !(p->cwd = strdup(rq->cwd)))
        || (rq->shell && !(p->shell = strdup(rq->shell)))
        || (p->fields && !rq->shell && !(p->argv = cl_strv_dup(rq->argv)))) {
        cl_script_proc_free(&p->sp);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "exec", "out of memory");
        return -1;
    }
    return cl_script_proc_launch(&p->sp, rm_exec_run, rq, "exec", process, error);
}

/* ------------------------------------------------------------------------ */
/* Files, through execute (base64 both ways: byte-exact, CASE-17)            */
/* ------------------------------------------------------------------------ */

static sbx_error *rm_file_error(sbx_error **error, int code, const char *op, const char *path,
                                const char *what)
{
    sbx_error *e;
    if (code == RM_EXIT_MISSING)
        e = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such %s in the sandbox: %s", what, path);
    else if (code == RM_EXIT_ISDIR)
        e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s is a directory in the sandbox",
                    path);
    else if (code == RM_EXIT_NOTDIR)
        e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s is not a directory in the sandbox",
                    path);
    else
        e = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot read %s in the sandbox "
                    "(exit %d)", path, code);
    cl_context(e, "path", path);
    return e;
}

static int rm_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    const char *op = "read_file";
    char *q = rm_quote_path(path);
    int rc = -1;
    if (!q) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    for (long long k = 0;; k++) {
        char *script = cl_printf("f=%s; [ -e \"$f\" ] || exit 3; [ -d \"$f\" ] && exit 4; "
                                 "dd if=\"$f\" bs=%d skip=%lld count=1 2>/dev/null | base64 || "
                                 "exit 7", q, RM_READ_CHUNK, k);
        rm_result x = { 0 };
        int r = script ? rm_execute(sb, ctx, script, &x, op, error) : -1;
        if (!script)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        free(script);
        if (r < 0) {
            rm_result_clear(&x);
            goto out;
        }
        if (x.exit_code != 0) {
            rm_file_error(error, x.exit_code, op, path, "file");
            rm_result_clear(&x);
            goto out;
        }
        cl_buf data = { 0 };
        int bad = cl_base64_decode(x.out.data ? x.out.data : "", x.out.len, &data) < 0;
        rm_result_clear(&x);
        if (bad || (data.len && cl_fd_sink(&fd, data.data, data.len) < 0)) {
            cl_context(cl_fail(error, bad ? SBX_ERROR_CONNECTION : SBX_ERROR_INVALID_ARGUMENT, op,
                               bad ? "read %s: the sandbox's answer is not base64"
                                   : "read %s: cannot write to the caller's descriptor", path),
                       "path", path);
            cl_buf_clear(&data);
            goto out;
        }
        size_t n = data.len;
        cl_buf_clear(&data);
        if (n < RM_READ_CHUNK)
            break;
    }
    rc = 0;
out:
    free(q);
    return rc;
}

static int rm_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                         uint32_t mode, sbx_error **error)
{
    char *q = rm_quote_path(path);
    if (!q) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "write_file", "out of memory");
        return -1;
    }
    int rc = rm_put(sb, ctx, q, path, fd, (long)mode, "write_file", error);
    free(q);
    return rc;
}

/* Entries as find -printf gives them, NUL-ended: "TYPE SIZE MODE NAME". */
static int rm_find(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                   int list, sbx_plugin_file_fn fn, void *ud, sbx_plugin_file_info *one,
                   char **one_name, const char *op, sbx_error **error)
{
    char *q = rm_quote_path(path);
    char *script = q ? cl_printf("f=%s; [ -e \"$f\" ] || [ -L \"$f\" ] || exit 3; %s"
                                 "find \"$f\" %s -printf '%%y %%s %%m %%%s\\0' | base64 || exit 7",
                                 q, list ? "[ -d \"$f\" ] || exit 5; " : "",
                                 list ? "-mindepth 1 -maxdepth 1" : "-maxdepth 0",
                                 list ? "P" : "f") : NULL;
    free(q);
    if (!script) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    rm_result x = { 0 };
    int rc = rm_execute(sb, ctx, script, &x, op, error);
    free(script);
    if (rc == 0 && x.exit_code != 0) {
        rm_file_error(error, x.exit_code, op, path, list ? "directory" : "file");
        rc = -1;
    }
    cl_buf data = { 0 };
    if (rc == 0 && cl_base64_decode(x.out.data ? x.out.data : "", x.out.len, &data) < 0) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "list %s: the sandbox's answer is not base64",
                path);
        rc = -1;
    }
    rm_result_clear(&x);
    for (size_t i = 0; rc == 0 && i < data.len;) {
        const char *e = data.data + i;
        size_t n = strnlen(e, data.len - i);
        i += n + 1;
        char type = 0;
        long long size = -1;
        unsigned mode = 0;
        int off = 0;
        if (sscanf(e, "%c %lld %o %n", &type, &size, &mode, &off) < 3 || off <= 0)
            continue;
        sbx_plugin_file_info info = { sizeof(info), e + off, type == 'd', type == 'd' ? -1 : size,
                                      mode };
        if (!list) {
            *one = info;
            free(*one_name);
            *one_name = strdup(e + off);
            one->name = *one_name;
            break;
        }
        if (fn(&info, ud) != 0)
            break;
    }
    cl_buf_clear(&data);
    return rc;
}

static int rm_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    return rm_find(sb, ctx, path, 1, fn, ud, NULL, NULL, "list_files", error);
}

/* stat_file's name lives until the next call on the sandbox: kept per
 * thread (slots on one sandbox may run at once). */
static __thread char *rm_stat_name;

static int rm_stat_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                        sbx_plugin_file_info *info, sbx_error **error)
{
    sbx_plugin_file_info one = { sizeof(one), NULL, 0, -1, 0 };
    if (rm_find(sb, ctx, path, 0, NULL, NULL, &one, &rm_stat_name, "stat_file", error) < 0)
        return -1;
    if (!one.name) {
        cl_context(cl_fail(error, SBX_ERROR_NOT_FOUND, "stat_file", "no such file in the "
                           "sandbox: %s", path), "path", path);
        return -1;
    }
    const char *slash = strrchr(one.name, '/');
    if (slash && slash[1])
        one.name = slash + 1;
    size_t sz = info->struct_size;
    *info = one;
    info->struct_size = sz;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Owned sandboxes                                                           */
/* ------------------------------------------------------------------------ */

/* 1 when @key is a create token: "sbx-" + 32 lowercase hex digits. */
static int rm_is_token(const char *key)
{
    if (!key || strncmp(key, "sbx-", 4) != 0 || strlen(key) != 36)
        return 0;
    for (const char *p = key + 4; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* A record's ISO 8601 time ("2026-09-04T12:00:00[.ffffff]+00:00", or Z, or
 * another offset) as UNIX seconds; 0 when absent or not that shape. */
static double rm_iso_time(const char *s)
{
    struct tm tm = { 0 };
    int n = 0;
    double sec = 0;
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%lf%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &sec, &n) != 6)
        return 0;
    const char *z = s + n;
    double off = 0;
    if (*z == '+' || *z == '-') {
        int oh = 0, om = 0;
        if (sscanf(z + 1, "%2d:%2d", &oh, &om) != 2)
            return 0;
        off = (*z == '-' ? -1 : 1) * (oh * 3600.0 + om * 60.0);
    } else if (*z != 'Z' && *z != '\0') {
        return 0;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = 0;
    return (double)timegm(&tm) + sec - off;
}

static int rm_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_owned";
    const char *api = rm_ready(client, NULL, op, error);
    cl_resp r = { 0 };
    json_object *j = NULL;
    int rc = -1;
    if (!api)
        return -1;
    if (rm_call(client->cl.http, ctx, "GET", api, "/v1/sandboxes", NULL, NULL, &r, op,
                "list the sandboxes", error) < 0)
        goto out;
    if (r.status != 200) {
        rm_fail(client->cl.http, error, &r, op, "list the sandboxes");
        goto out;
    }
    j = r.body.data ? json_tokener_parse(r.body.data) : NULL;
    if (!json_object_is_type(j, json_type_array)) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                "list the sandboxes: the control plane answered no list");
        goto out;
    }
    rc = 0;
    for (size_t i = 0; i < json_object_array_length(j); i++) {
        json_object *rec = json_object_array_get_idx(j, i);
        const char *id = cl_json_str(rec, "id"), *key = cl_json_str(rec, "idempotency_key");
        const char *st = rm_status(rec);
        if (!id || !rm_is_token(key)
            || (strcmp(st, "creating") != 0 && strcmp(st, "running") != 0
                && strcmp(st, "stopping") != 0))
            continue;
        sbx_plugin_owned_info info = { sizeof(info), id, key,
                                       rm_iso_time(cl_json_str(rec, "created_at")),
                                       rm_iso_time(cl_json_str(rec, "expires_at")) };
        if (fn && fn(&info, ud) != 0)
            break;
    }
out:
    json_object_put(j);
    cl_resp_clear(&r);
    return rc;
}

static int rm_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                            sbx_error **error)
{
    const char *op = "destroy_by_id";
    const char *api = rm_ready(client, NULL, op, error);
    long status = 0;
    if (!api)
        return -1;
    json_object *rec = rm_get(client, ctx, api, id, &status, op, error);
    if (!rec)
        return status == 404 ? 0 : -1;     /* gone already */
    int ours = rm_is_token(cl_json_str(rec, "idempotency_key"));
    int gone = strcmp(rm_status(rec), "destroyed") == 0;
    json_object_put(rec);
    if (!ours) {
        sbx_error *e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "the control plane's sandbox %s was not made by libsbx (its "
                               "record carries no create token)", id);
        cl_context(e, "sandbox_id", id);
        return -1;
    }
    return gone ? 0 : rm_delete_on(client, ctx, api, id, op, error);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin rm_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .name = RM_BACKEND,
    .version = PACKAGE_VERSION,
    .description = "a control plane (sbx-server) as a backend: one product key, the control "
                   "plane's upstream backend (option backend); output arrives when a command "
                   "ends; files travel through execute",
    .caps = RM_CAPS | SBX_CAP_ISOLATION,
    .setup = rm_setup,
    .client_new = rm_client_new,
    .client_free = cl_client_free_slot,
    .probe = rm_probe,
    .create = rm_create,
    .resume = rm_resume,
    .session_state = rm_session_state,
    .destroy = rm_destroy,
    .is_alive = rm_is_alive,
    .sandbox_free = rm_sandbox_free,
    .sandbox_id = cl_sandbox_id,
    .sandbox_root = rm_sandbox_root,
    .exec_start = rm_exec_start,
    .exec_wait = rm_exec_wait,
    .exec_event_fd = cl_exec_event_fd,
    .exec_kill = rm_exec_kill,
    .exec_free = cl_script_exec_free,
    .list_files = rm_list_files,
    .read_file = rm_read_file,
    .write_file = rm_write_file,
    .stat_file = rm_stat_file,
    .list_owned = rm_list_owned,
    .destroy_by_id = rm_destroy_by_id,
};

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
    return &rm_plugin;
}
