/*
 * e2b.c — libsbx-e2b.so, the `e2b` backend: E2B's control plane (REST) for
 * the lifecycle and each sandbox's daemon, envd, for processes (Connect
 * protocol, JSON codec) and files, over the hosted-provider base
 * (plugins/cloud/base/cloud.h).
 *
 * Contract: the E2B section of the provider contracts (e2b-dev/E2B
 * spec/openapi.yml, spec/envd/process/process.proto,
 * spec/envd/filesystem/filesystem.proto, spec/envd/envd.yaml,
 * packages/python-sdk/e2b/).
 *
 *  - Client options (sbx_client_new_with_config): "api_url", "domain",
 *    "sandbox_url", "keepalive_s" (see exec), and the base's "retries",
 *    "rate_limit_retries" and "max_retry_wait_s"; a bad keepalive_s is a
 *    configuration error with context option=keepalive_s.
 *  - Credentials: E2B_API_KEY, as "X-API-Key" on the control plane only.
 *    Control plane: the client config's "api_url", else E2B_API_URL, else
 *    https://api.<domain>; the domain is "domain", else E2B_DOMAIN, else
 *    e2b.app. envd: "sandbox_url", else E2B_SANDBOX_URL, with the headers
 *    E2b-Sandbox-Id and E2b-Sandbox-Port: 49983 (as the SDK does for
 *    https://sandbox.<domain> on E2B's own domains); for other domains
 *    https://49983-<id>.<domain>. envd requests carry X-Access-Token (the
 *    sandbox's envdAccessToken: sandboxes are made with "secure": true; the
 *    token is kept in memory only and fetched again by resume) and
 *    "Authorization: Basic base64(USER:)" (default user "user").
 *  - create: POST /sandboxes. template → templateID (default "base");
 *    timeout_secs → timeout, plus E2B_LIFETIME_MARGIN_S (5 s: a command
 *    the library times out at the lifetime's end reports 124, not a lost
 *    sandbox), always sent, so the provider bounds every sandbox (CASE-33); env → envVars; allow_internet=0 →
 *    allow_internet_access false; the create token, backend and expiry →
 *    metadata (CL_META_*), which is how list_owned, destroy_by_id and the
 *    reaper of lost creates find it (CASE-20). Size comes from the template:
 *    cpu, memory_mb, disk_mb, gpu, image, snapshot_id and app_name are
 *    configuration errors naming the option, and so is any backend option.
 *  - exec: POST {envd}/process.Process/Start, one envelope
 *    {"process":{"cmd":"/bin/bash","args":["-c",SCRIPT],"envs",
 *    "cwd"},"stdin"}; the answer is a stream of envelopes: start {pid},
 *    data {stdout|stderr: base64} written to the host's descriptors as raw
 *    bytes as they arrive, keepalive (never output), end {exitCode (left
 *    out when 0), exited, status}, then the end-of-stream frame. The
 *    working directory is envd's native cwd, so it holds for every part of
 *    a command list (CASE-46); a missing one is not_found naming it. stdin:
 *    SendInput (base64 chunks) then CloseStdin, by pid. exec_kill:
 *    SendSignal (SIGTERM as SIGNAL_SIGTERM, any other signal as
 *    SIGNAL_SIGKILL: envd has no others), which reaches the one process;
 *    the rest of its tree (background and setsid'd descendants) is found by
 *    the variable SBX_EXEC_ID=<random> every command carries in its
 *    environment, and signalled by a short command in the sandbox. A
 *    signal asked for before the start event named the process is sent to
 *    it by its pid when the start event comes.
 *    Every process stream asks envd for a keepalive message after each
 *    Keepalive-Ping-Interval seconds of quiet: the client option
 *    "keepalive_s" (a number > 0, at most 86400, rounded up to whole
 *    seconds as envd counts them; default 20), so that a path that closes
 *    idle connections sooner can be kept busy; there is no read timeout of
 *    our own (CASE-52). A stream the path cuts (closed or reset) before its
 *    end-of-stream frame is re-attached to the same process by its pid with
 *    process.Process/Connect ({"process":{"pid"}}; the same events from
 *    then on, output sent while it was cut is not sent again), as often as
 *    it is cut; the command is never started again. When that fails (no
 *    pid yet, envd no longer has the process, no stream comes back) the
 *    exec fails with a connection error whose outcome is unknown.
 *  - terminal (tty_rows/tty_cols): Start carries "pty":{"size":{"rows",
 *    "cols"}} (process.proto's PTY, as the SDK's commands.pty.create sends
 *    it) and runs the script with /bin/sh -c (a bash that is not
 *    interactive drops PS1 from the environment of the shell the caller
 *    starts on the terminal), so envd runs it on a pseudo-terminal of its own with
 *    the command as its session's leader; its output comes as data {pty}
 *    events (written to stdout), typed bytes go with SendInput
 *    {"input":{"pty"}}, a resize is process.Process/Update with the same
 *    "pty" member. envd closes no terminal's stdin (CloseStdin is for
 *    pipes only), so the end of the host's stdin hangs the terminal up as
 *    local terminals do: SIGHUP to every process of the command (found by
 *    its mark, as exec_kill finds them).
 *  - user: envd's user of each call is its Authorization (Basic "USER:")
 *    and /files' username: the exec's user, else the create-time user
 *    (sbx_options_set_user; kept in the session state), else "user".
 *  - files: GET|POST {envd}/files?path=&username= as raw bytes both ways
 *    (never text, CASE-17); then the mode with chmod. list_files and
 *    stat_file: filesystem.Filesystem/ListDir and Stat. A relative path is
 *    taken from the sandbox's working directory (else the user's home, as
 *    envd takes it).
 *  - exposed ports: E2B routes every port of a sandbox to its preview
 *    address https://PORT-ID.DOMAIN (DOMAIN: the create answer's "domain",
 *    else the client's); the library maps the ports exposed (create's
 *    ports, expose_port), kept in the session state, with no provider
 *    call; unexposing ends the mapping, not E2B's routing. No access token
 *    is part of the address.
 *  - lifetime: resume and start send POST /sandboxes/{id}/connect with
 *    {"timeout": the remaining lifetime} read from endAt, never a shorter
 *    one (CASE-33). stop pauses (POST /pause). An envd 502 "not found" is
 *    looked up on the control plane at once, before any re-send: a paused
 *    sandbox is connected and the call sent once more (it cannot have run,
 *    CASE-53); a sandbox the control plane no longer has is not_found with
 *    reason "gone" (CASE-32; a command's re-attach meets it as soon as its
 *    sandbox is deleted), and every later call fails at once; a running
 *    one's safe call is sent again with the client's retries.
 *
 * Threading: slots may run at once on different sandboxes and on one; a
 * sandbox's mutable state (gone flag, access token) is guarded by its lock.
 */
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

#define E2B_BACKEND "e2b"
#define E2B_DEFAULT_DOMAIN "e2b.app"
#define E2B_ENVD_PORT "49983"
#define E2B_DEFAULT_TEMPLATE "base"
#define E2B_DEFAULT_USER "user"
#define E2B_LIFETIME_MARGIN_S 5    /* provider end after the caller's lifetime */
#define E2B_MAX_TIMEOUT_S 86400         /* the API's bound on timeout */
#define E2B_STATE_VERSION 1
#define E2B_STDIN_CHUNK 49152           /* bytes per SendInput */
#define E2B_KEEPALIVE_S 20              /* Keepalive-Ping-Interval by default */
#define E2B_MAX_KEEPALIVE_S 86400

#define E2B_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_RESUME        \
                  | SBX_CAP_ISOLATION | SBX_CAP_NETWORK_POLICY | SBX_CAP_IMAGE               \
                  | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED | SBX_CAP_BACKGROUND | SBX_CAP_PTY \
                  | SBX_CAP_EXPOSED_PORTS | SBX_CAP_EXEC_STDIN_STREAM | SBX_CAP_USER)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, control plane URL, reaper
                         * (provider.h) */
    char *domain;
    char *sandbox_url;  /* envd through one URL and headers, or NULL */
    long keepalive_s;   /* Keepalive-Ping-Interval of the process streams */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id and the gone flag (provider.h) */
    char *envd;         /* envd base URL */
    int by_header;      /* E2b-Sandbox-Id / -Port headers choose the sandbox */
    char *domain;       /* the sandbox's domain, for preview addresses */
    double lifetime_s;  /* the create's timeout, for a sandbox resumed past its end */
    pthread_mutex_t lock;   /* guards envd and token */
    char *token;        /* envdAccessToken (a secret), or NULL */
    char *user;         /* the default user (sbx_options_set_user), or NULL:
                         * E2B_DEFAULT_USER */
};

typedef struct e2b_proc {
    cl_proc base;       /* first member (cloud.h) */
    struct sbx_plugin_sandbox *sb;
    char *script;
    char *cwd;          /* as asked, or NULL */
    char *user;
    char **env;
    int stdin_fd;       /* -1: no stdin */
    pthread_t stdin_thread;
    int stdin_started;
    pthread_mutex_t plock;
    pthread_cond_t pcond;
    unsigned tty_rows;  /* the terminal's size at the start; 0 = none */
    unsigned tty_cols;
    int64_t pid;        /* envd's pid; 0 until the start event */
    char tag[32];       /* CL_EXEC_MARK of the command's processes; "" for none */
    int over;           /* the stream is over */
    int lost;           /* its stream was cut and could not be re-attached */
    int pending_sig;    /* a signal asked for before the start event: sent once it comes */
} e2b_proc;

static int e2b_signal_pid(e2b_proc *p, const sbx_call_ctx *ctx, int64_t pid, int sig);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define e2b_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define e2b_mark_gone(sb) cl_gone_set(&(sb)->s.gone)
#define e2b_gone_error(error, op, id) cl_gone_error((error), (op), E2B_BACKEND, (id))
#define e2b_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), E2B_BACKEND, (sb)->s.id, \
                                               (error))

/* A control-plane call on /sandboxes/{id}@suffix (provider.h). */
#define e2b_sbcall(c, ctx, method, id, suffix, body, idem, r, op, what, error)               \
    cl_item_request((c)->cl.http, (ctx), (method), (c)->cl.api, "sandboxes", (id), (suffix),  \
                    (body), (idem), (r), (op), (what), (error))

/* GET /sandboxes/{id}: SandboxDetail, or NULL (*@status 404 when gone, 0
 * when no answer came; other statuses store an error). */
CL_ITEM_GET(e2b_get, "sandboxes", "get the sandbox")

/* DELETE /sandboxes/{id}; 404: already gone. */
CL_ITEM_DELETE(e2b_delete, "sandboxes", "kill the sandbox")

/* Takes envd's address and access token from a Sandbox answer. */
static int e2b_take_sandbox(struct sbx_plugin_sandbox *sb, json_object *j)
{
    struct sbx_plugin_client *c = sb->s.c;
    const char *dom = cl_json_str(j, "domain");
    char *envd;
    char *pdom = strdup(dom && *dom ? dom : c->domain);
    if (!pdom)
        return -1;
    free(sb->domain);
    sb->domain = pdom;
    if (c->sandbox_url) {
        envd = strdup(c->sandbox_url);
        sb->by_header = 1;
    } else {
        if (!dom || !*dom)
            dom = c->domain;
        static const char *const own[] = { "e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev",
                                           NULL };
        int mine = 0;
        for (size_t i = 0; own[i]; i++)
            mine |= strcmp(dom, own[i]) == 0;
        envd = mine ? cl_printf("https://sandbox.%s", dom)
                    : cl_printf("https://" E2B_ENVD_PORT "-%s.%s", sb->s.id, dom);
        sb->by_header = mine;
    }
    const char *tok = cl_json_str(j, "envdAccessToken");
    char *t = tok && *tok ? strdup(tok) : NULL;
    if (!envd || (tok && *tok && !t)) {
        free(envd);
        free(t);
        return -1;
    }
    pthread_mutex_lock(&sb->lock);
    free(sb->envd);
    sb->envd = envd;
    free(sb->token);
    sb->token = t;
    pthread_mutex_unlock(&sb->lock);
    return 0;
}

static struct sbx_plugin_sandbox *e2b_sandbox_new(struct sbx_plugin_client *c, const char *id)
{
    struct sbx_plugin_sandbox *sb = cl_sandbox_new(sizeof(*sb), c, id, NULL);
    if (!sb)
        return NULL;
    pthread_mutex_init(&sb->lock, NULL);
    return sb;
}

static void e2b_sandbox_free(sbx_plugin_sandbox *sb)
{
    if (!sb)
        return;
    pthread_mutex_destroy(&sb->lock);
    free(sb->envd);
    free(sb->domain);
    free(sb->token);
    free(sb->user);
    cl_sandbox_free(sb);
}

/*
 * Makes @sb run: GET, and when it is paused, POST /connect with the lifetime
 * it has left (its create's when none is left), never a shorter one
 * (CASE-33, CASE-53). When @always, a running sandbox is connected too (to
 * get its access token). 0 or -1; 404 marks it gone.
 */
static int e2b_wake(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, int always,
                    const char *op, sbx_error **error)
{
    long st;
    json_object *d = e2b_get(sb->s.c, ctx, sb->s.id, &st, op, error);
    if (!d) {
        if (st == 404) {
            e2b_mark_gone(sb);
            e2b_gone_error(error, op, sb->s.id);
        }
        return -1;
    }
    const char *state = cl_json_str(d, "state");
    int paused = state && strcmp(state, "paused") == 0;
    if (!paused && !always) {
        json_object_put(d);
        return 0;
    }
    double left = cl_rfc3339(cl_json_str(d, "endAt")) - cl_wallclock();
    long long t = left >= 1 ? (long long)ceil(left) : (long long)ceil(sb->lifetime_s);
    if (t < 1)
        t = 300;
    if (t > E2B_MAX_TIMEOUT_S)
        t = E2B_MAX_TIMEOUT_S;
    json_object_put(d);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "timeout", json_object_new_int64(t));
    cl_resp r = { 0 };
    int rc = e2b_sbcall(sb->s.c, ctx, "POST", sb->s.id, "/connect", b, CL_SAFE, &r, op,
                        "connect to the sandbox", error);
    json_object_put(b);
    if (rc == 0) {
        if (r.status == 404) {
            e2b_mark_gone(sb);
            e2b_gone_error(error, op, sb->s.id);
            rc = -1;
        } else if (r.status / 100 != 2) {
            cl_context(cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r, op,
                                      "connect to the sandbox"), "state", state ? "paused" : "");
            rc = -1;
        } else {
            json_object *j = cl_resp_json(&r, op, "connect to the sandbox", error);
            if (!j || e2b_take_sandbox(sb, j) < 0) {
                if (j)
                    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                rc = -1;
            }
            json_object_put(j);
        }
    }
    cl_resp_clear(&r);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* envd requests                                                             */
/* ------------------------------------------------------------------------ */

typedef struct e2b_hdrs {
    char *v[8];
    const char *list[9];
} e2b_hdrs;

static void e2b_hdrs_clear(e2b_hdrs *h)
{
    for (size_t i = 0; i < 8; i++)
        free(h->v[i]);
}

static const char *const *e2b_hdrs_make(struct sbx_plugin_sandbox *sb, e2b_hdrs *h,
                                        const char *user, const char *extra)
{
    size_t n = 0;
    memset(h, 0, sizeof(*h));
    pthread_mutex_lock(&sb->lock);
    if (sb->token)
        h->v[n++] = cl_printf("X-Access-Token: %s", sb->token);
    pthread_mutex_unlock(&sb->lock);
    if (sb->by_header) {
        h->v[n++] = cl_printf("E2b-Sandbox-Id: %s", sb->s.id);
        h->v[n++] = strdup("E2b-Sandbox-Port: " E2B_ENVD_PORT);
    }
    char *up = cl_printf("%s:", user ? user : sb->user ? sb->user : E2B_DEFAULT_USER);
    char *b64 = up ? cl_base64_encode(up, strlen(up)) : NULL;
    h->v[n++] = b64 ? cl_printf("Authorization: Basic %s", b64) : NULL;
    free(up);
    free(b64);
    h->v[n++] = strdup("Connect-Protocol-Version: 1");
    if (extra)
        h->v[n++] = strdup(extra);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (h->v[i])
            h->list[k++] = h->v[i];
    h->list[k] = NULL;
    return h->list;
}

/*
 * A request to @sb's envd at @path: 0 with a 2xx answer in @r; -1 with an
 * error stored when no answer came or the sandbox is gone; -1 with no error
 * stored and r->status set for another answer (the caller names it, with
 * e2b_envd_fail). An envd 502 (the sandbox is not running there) is not
 * sent again by itself: it is looked up on the control plane at once
 * (GET /sandboxes/{id}, once): gone (404) fails at once with the gone
 * error (CASE-32: a sandbox deleted under a command is reported gone
 * within the GET's time, not after the client's retries); paused, it is
 * connected and the request sent once more when its body can be (no
 * streamed source; CASE-53); running (or the GET gave no answer), a
 * CL_SAFE request is sent again with the client's retries, as any 5xx
 * is, and a last 502 looked up once more (a CL_UNSAFE one fails).
 */
static int e2b_envd(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, cl_req *rq,
                    const char *path, const char *user, const char *extra, cl_resp *r,
                    const char *op, sbx_error **error)
{
    int woken = 0, retried = 0;
    for (;;) {
        if (e2b_check(sb, op, error) < 0)
            return -1;
        pthread_mutex_lock(&sb->lock);
        char *url = cl_printf("%s%s", sb->envd, path);
        pthread_mutex_unlock(&sb->lock);
        e2b_hdrs h;
        rq->headers = e2b_hdrs_make(sb, &h, user, extra);
        rq->url = url;
        rq->no_auth = 1;
        rq->final_status = retried ? 0 : 502;
        int rc = url ? cl_request(sb->s.c->cl.http, ctx, rq, r, op, error) : -1;
        if (!url)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        free(url);
        e2b_hdrs_clear(&h);
        rq->url = NULL;
        rq->headers = NULL;
        rq->final_status = 0;
        if (rc < 0)
            return -1;
        if (r->status / 100 == 2)
            return 0;
        if (r->status != 502)
            return -1;
        /* Not running at envd: gone, paused or running (CASE-32, CASE-53). */
        long st;
        json_object *d = e2b_get(sb->s.c, ctx, sb->s.id, &st, op, NULL);
        const char *state = d ? cl_json_str(d, "state") : NULL;
        int paused = state && strcmp(state, "paused") == 0;
        json_object_put(d);
        if (st == 404) {
            e2b_mark_gone(sb);
            e2b_gone_error(error, op, sb->s.id);
            return -1;
        }
        int again = paused ? !woken : !retried && rq->idempotent == CL_SAFE;
        if (!again || (rq->source && !paused)) {
            cl_fail_status(sb->s.c->cl.http, error, SBX_ERROR_CONNECTION, r, op, rq->what);
            return -1;
        }
        if (paused) {
            woken = 1;
            if (e2b_wake(sb, ctx, 0, op, error) < 0)
                return -1;
            if (rq->source) {
                cl_context(cl_fail(error, SBX_ERROR_CONNECTION, op,
                                   "%s: e2b sandbox %s was paused and has been resumed; the "
                                   "data was not sent", rq->what, sb->s.id), "state", "paused");
                return -1;
            }
        } else {
            retried = 1;    /* running: the client's retries, as for any 5xx */
        }
        cl_resp_clear(r);
        memset(r, 0, sizeof(*r));
    }
}

/* The error of an envd answer @r to a call on @path (NULL: none). */
static sbx_error *e2b_envd_fail(struct sbx_plugin_sandbox *sb, const cl_resp *r, const char *op,
                                const char *what, const char *path, sbx_error **error)
{
    sbx_error *err = NULL;
    json_object *j = r->body.data ? json_tokener_parse(r->body.data) : NULL;
    const char *code = cl_json_str(j, "code");
    if (r->status == 404 || (code && strcmp(code, "not_found") == 0)) {
        err = path ? cl_fail(error, SBX_ERROR_NOT_FOUND, op, "%s: no such file or directory in "
                             "the sandbox: %s", what, path)
                   : cl_fail_status(sb->s.c->cl.http, error, SBX_ERROR_NOT_FOUND, r, op, what);
    } else if (code && cl_connect_error(sb->s.c->cl.http, j, op, what, error) == 1) {
        err = error ? *error : NULL;
    } else if (r->status == 400) {
        err = cl_fail_status(sb->s.c->cl.http, error, SBX_ERROR_INVALID_ARGUMENT, r, op, what);
    } else {
        err = cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, r, op, what);
    }
    if (path)
        cl_context(err, "path", path);
    json_object_put(j);
    return err;
}

/* A unary Connect call: @body (JSON) to /SERVICE/METHOD; the answer JSON
 * in *@out when @out. @path_arg names the file for errors (or NULL). */
static int e2b_unary(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *rpc,
                     json_object *body, json_object **out, const char *path_arg, const char *op,
                     const char *what, sbx_error **error)
{
    const char *b = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .content_type = "application/json", .body = b,
                  .body_len = strlen(b), .idempotent = CL_SAFE, .what = what };
    cl_resp r = { 0 };
    int rc = e2b_envd(sb, ctx, &rq, rpc, NULL, NULL, &r, op, error);
    if (rc < 0 && r.status && !(error && *error) && !e2b_is_gone(sb))
        e2b_envd_fail(sb, &r, op, what, path_arg, error);
    if (rc == 0 && out && !(*out = cl_resp_json(&r, op, what, error)))
        rc = -1;
    cl_resp_clear(&r);
    return rc;
}

/* An absolute sandbox path for @path: a relative one from the working
 * directory (else left to envd, which takes it from the user's home). */
static char *e2b_abs(struct sbx_plugin_sandbox *sb, const char *path)
{
    return cl_path_in(sb->s.workdir, path);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

CL_SETUP(e2b_setup, E2B_BACKEND)

static void e2b_client_clear(sbx_plugin_client *c)
{
    free(c->domain);
    free(c->sandbox_url);
}

static int e2b_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                          sbx_error **error);

static const char *const e2b_key_envs[] = { "E2B_API_KEY", NULL };

/* The control plane's default URL follows the domain: set by the plugin. */
static const cl_client_spec e2b_client_spec = {
    .provider = E2B_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .key_envs = e2b_key_envs, .auth_header = "X-API-Key",
    .key_required = 1,
    .find = e2b_find_token, .del = e2b_delete, .clear = e2b_client_clear,
};

static int e2b_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&e2b_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    c->domain = strdup(cl_setting(cfg, "domain", "E2B_DOMAIN", E2B_DEFAULT_DOMAIN));
    char *dflt = c->domain ? cl_printf("https://api.%s", c->domain) : NULL;
    if (!dflt) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        goto fail;
    }
    c->cl.api = cl_base_url(cfg, "api_url", "E2B_API_URL", dflt, error);
    free(dflt);
    if (!c->cl.api)
        goto fail;
    const char *su = cl_json_str(cfg, "sandbox_url");
    if ((su && *su) || (getenv("E2B_SANDBOX_URL") && *getenv("E2B_SANDBOX_URL"))) {
        c->sandbox_url = cl_base_url(cfg, "sandbox_url", "E2B_SANDBOX_URL", "", error);
        if (!c->sandbox_url)
            goto fail;
    }
    /* keepalive_s: seconds above 0 (at most a day), rounded up to whole
     * seconds as envd counts them; E2B_KEEPALIVE_S when absent. */
    double ka = E2B_KEEPALIVE_S;
    if (cl_seconds_option(cfg, "keepalive_s", 0, E2B_MAX_KEEPALIVE_S, &ka, error) < 0)
        goto fail;
    c->keepalive_s = (long)ceil(ka);
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(e2b_probe, E2B_CAPS)

/* ------------------------------------------------------------------------ */
/* Exec: process.Process/Start, a Connect server stream                      */
/* ------------------------------------------------------------------------ */

typedef struct e2b_stream {
    e2b_proc *p;
    cl_connect cs;
    int discard;        /* output is not wanted (the plugin's own commands) */
    int have_end;
    int exit_code;
    int failed;
    int frames;         /* frames of the current stream */
    cl_last_error saved;        /* the frame callback's error */
} e2b_stream;

/* A Go os.ProcessState signal text ("killed") or a name ("SIGKILL"). */
static int e2b_signal_number(const char *s)
{
    static const char *const go[] = { NULL, "hangup", "interrupt", "quit", "illegal instruction",
                                      "trace/breakpoint trap", "aborted", "bus error",
                                      "floating point exception", "killed",
                                      "user defined signal 1", "segmentation fault",
                                      "user defined signal 2", "broken pipe", "alarm clock",
                                      "terminated" };
    static const char *const names[] = { NULL, "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL",
                                         "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGKILL",
                                         "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM",
                                         "SIGTERM" };
    for (int i = 1; i < 16; i++)
        if (strcmp(s, go[i]) == 0 || strcmp(s, names[i]) == 0)
            return i;
    if (strncmp(s, "signal ", 7) == 0)
        return atoi(s + 7);
    return 0;
}

static int e2b_stream_fail(e2b_stream *s, sbx_error_code code, const char *fmt, const char *arg)
{
    cl_fail(NULL, code, "exec", fmt, arg);
    s->saved = *cl_last();
    s->failed = 1;
    return -1;
}

static int e2b_on_frame(void *ud, unsigned flags, const char *p, size_t n)
{
    e2b_stream *s = ud;
    (void)n;
    s->frames++;
    json_object *j = json_tokener_parse(p);
    if (!j)
        return e2b_stream_fail(s, SBX_ERROR_CONNECTION, "e2b: a stream message that is not JSON: "
                               "%.80s", p);
    int rc = 0;
    if (flags & CL_CONNECT_END_STREAM) {
        if (cl_connect_error(s->p->sb->s.c->cl.http, j, "exec", "run the command", NULL) == 1) {
            s->saved = *cl_last();
            s->failed = 1;
            rc = -1;
        } else if (!s->have_end) {
            rc = e2b_stream_fail(s, SBX_ERROR_CONNECTION, "e2b: %s", "the process stream ended "
                                 "without the process's end event");
        } else {
            rc = 1;
        }
        json_object_put(j);
        return rc;
    }
    json_object *ev = cl_json_path(j, "event", NULL), *x;
    int64_t v;
    if ((x = cl_json_path(ev, "start", NULL))) {
        if (cl_json_int(x, "pid", &v) == 1) {
            pthread_mutex_lock(&s->p->plock);
            s->p->pid = v;
            int sig = s->p->pending_sig;
            s->p->pending_sig = 0;      /* sent once: a re-attached stream names it again */
            pthread_cond_broadcast(&s->p->pcond);
            pthread_mutex_unlock(&s->p->plock);
            if (sig) {
                /* A kill asked for before envd named the process. */
                sbx_call_ctx kc = { sizeof(kc), cl_now() + 10, -1, NULL };
                e2b_signal_pid(s->p, &kc, v, sig);
            }
        }
    } else if ((x = cl_json_path(ev, "data", NULL))) {
        static const char *const keys[] = { "stdout", "stderr", "pty" };
        for (int k = 0; k < 3 && rc == 0; k++) {
            const char *b = cl_json_str(x, keys[k]);
            if (!b || s->discard)
                continue;
            cl_buf out = { 0 };
            if (cl_base64_decode(b, strlen(b), &out) < 0)
                rc = e2b_stream_fail(s, SBX_ERROR_CONNECTION, "e2b: %s output that is not base64",
                                     keys[k]);
            else if (cl_proc_output(&s->p->base, k == 1 ? 2 : 1, out.data, out.len) < 0)
                rc = -1;
            cl_buf_clear(&out);
        }
    } else if ((x = cl_json_path(ev, "end", NULL))) {
        v = 0;
        cl_json_int(x, "exitCode", &v);    /* left out when 0 (proto3 JSON) */
        const char *status = cl_json_str(x, "status");
        int sig = status && strncmp(status, "signal: ", 8) == 0
                  ? e2b_signal_number(status + 8) : 0;
        s->exit_code = sig > 0 ? 128 + sig : v < 0 ? 255 : (int)(v & 0xff);
        s->have_end = 1;
    }
    /* keepalive: nothing */
    json_object_put(j);
    return rc;
}

/* process.proto's PTY message: {"size":{"rows","cols"}}. */
static json_object *e2b_pty_size(unsigned rows, unsigned cols)
{
    json_object *pty = json_object_new_object(), *size = json_object_new_object();
    json_object_object_add(size, "rows", json_object_new_int64(rows));
    json_object_object_add(size, "cols", json_object_new_int64(cols));
    json_object_object_add(pty, "size", size);
    return pty;
}

static json_object *e2b_start_body(struct sbx_plugin_sandbox *sb, const char *script,
                                   char *const *env, const char *cwd, const char *tag,
                                   int want_stdin, unsigned rows, unsigned cols)
{
    json_object *b = json_object_new_object(), *pr = json_object_new_object();
    json_object *args = json_object_new_array(), *e = cl_env_object((const char *const *)env);
    /* On a terminal, /bin/sh as on the local and docker backends: a
     * non-interactive bash drops PS1 and PS2 from the environment it
     * passes on, so an interactive shell started on the terminal would not
     * get the prompt it was given. */
    json_object_object_add(pr, "cmd", json_object_new_string(rows ? "/bin/sh" : "/bin/bash"));
    json_object_array_add(args, json_object_new_string("-c"));
    json_object_array_add(args, json_object_new_string(script));
    json_object_object_add(pr, "args", args);
    if (tag && *tag)
        json_object_object_add(e, CL_EXEC_MARK, json_object_new_string(tag));
    json_object_object_add(pr, "envs", e);
    if (cwd || sb->s.workdir)
        json_object_object_add(pr, "cwd", json_object_new_string(cwd ? cwd : sb->s.workdir));
    json_object_object_add(b, "process", pr);
    if (rows && cols)
        json_object_object_add(b, "pty", e2b_pty_size(rows, cols));
    else
        json_object_object_add(b, "stdin", json_object_new_boolean(want_stdin));
    return b;
}

static int e2b_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                         sbx_error **error);

/* One process stream of @p fed to @s: @rpc ("/process.Process/Start" or
 * ".../Connect") with @msg as its one request envelope, and the client's
 * Keepalive-Ping-Interval. As e2b_envd(); @r holds the answer. */
static int e2b_stream_call(e2b_proc *p, const sbx_call_ctx *ctx, e2b_stream *s, const char *rpc,
                           json_object *msg, cl_idempotency idem, cl_resp *r, sbx_error **error)
{
    const char *op = "exec";
    const char *js = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN);
    cl_buf env = { 0 };
    char *ka = cl_printf("Keepalive-Ping-Interval: %ld", p->sb->s.c->keepalive_s);
    memset(r, 0, sizeof(*r));
    if (!ka || cl_connect_envelope(js, strlen(js), 0, &env) < 0) {
        free(ka);
        cl_buf_clear(&env);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    cl_req rq = { .method = "POST", .content_type = "application/connect+json",
                  .body = env.data, .body_len = env.len, .sink = cl_connect_sink,
                  .sink_ud = &s->cs, .idempotent = idem, .what = "run the command" };
    int rc = e2b_envd(p->sb, ctx, &rq, rpc, p->user, ka, r, op, error);
    free(ka);
    cl_buf_clear(&env);
    return rc;
}

/* 1 when a stream call that gave @rc and @r was cut by the path before its
 * end-of-stream frame (the connection closed or reset after a 2xx began):
 * not a refusal, not the stream's own error, not a cancellation. */
static int e2b_stream_cut(const e2b_stream *s, int rc, const cl_resp *r)
{
    if (s->failed || r->status / 100 != 2)
        return 0;
    if (rc == 0)
        return !s->cs.done;
    return cl_last()->code == SBX_ERROR_CONNECTION;
}

/* The stream of @p was cut: re-attaches to the same process by its pid with
 * process.Process/Connect, as many times as the path cuts it, and reads on
 * (its output and its end) into @s; never starts the command again. 0 when
 * the end-of-stream frame came; -1 with the error in cl_last() (and
 * *@error): the stream's own error, or a connection error with outcome
 * unknown when the process cannot be re-attached (its pid never came,
 * envd no longer has it, or no stream came back). @why: how it was cut. */
static int e2b_reattach(e2b_proc *p, const sbx_call_ctx *ctx, e2b_stream *s, const char *why,
                        sbx_error **error)
{
    const char *op = "exec";
    char cut[256];
    snprintf(cut, sizeof cut, "%.250s", why);
    pthread_mutex_lock(&p->plock);
    int64_t pid = p->pid;
    pthread_mutex_unlock(&p->plock);
    p->lost = 1;        /* until it is re-attached */
    if (pid <= 0) {
        cl_outcome_unknown(cl_fail(error, SBX_ERROR_CONNECTION, op, "e2b: the command's stream "
                                   "was cut before envd named its process (%s): its outcome is "
                                   "unknown", cut));
        return -1;
    }
    for (int empty = 0;;) {
        if (e2b_is_gone(p->sb))
            return e2b_check(p->sb, op, error);
        CL_LOG(SBX_LOG_DEBUG, "e2b: the stream of process %lld was cut (%s): re-attaching",
               (long long)pid, cut);
        cl_connect_clear(&s->cs);
        cl_connect_init(&s->cs, e2b_on_frame, s);
        s->frames = 0;
        json_object *b = json_object_new_object(), *sel = json_object_new_object();
        json_object_object_add(sel, "pid", json_object_new_int64(pid));
        json_object_object_add(b, "process", sel);
        cl_resp r = { 0 };
        int rc = e2b_stream_call(p, ctx, s, "/process.Process/Connect", b, CL_SAFE, &r, NULL);
        json_object_put(b);
        int again = e2b_stream_cut(s, rc, &r);
        if (rc == 0 && !again && s->cs.done) {
            cl_resp_clear(&r);
            p->lost = 0;
            return 0;
        }
        /* The stream's own error once it re-attached (past its start
         * event); an error frame at once is a refusal (not_found: envd no
         * longer has the process). */
        if (s->failed && s->frames > 1) {
            cl_resp_clear(&r);
            p->lost = 0;
            cl_fail(error, s->saved.code, op, "%s", s->saved.msg);
            return -1;
        }
        /* A stream came back and was cut again: once more, unless it
         * carried no frame three times in a row. */
        if (again && (s->frames > 0 || ++empty < 3)) {
            if (s->frames > 0)
                empty = 0;
            snprintf(cut, sizeof cut, "%.250s", rc == 0 ? "it ended early" : cl_last()->msg);
            cl_resp_clear(&r);
            continue;
        }
        /* Not re-attached: envd's answer, or the transport's error. */
        char why2[1024];
        if (e2b_is_gone(p->sb)) {
            cl_resp_clear(&r);
            return e2b_check(p->sb, op, error);
        }
        if (s->failed) {
            snprintf(why2, sizeof why2, "%.1000s", s->saved.msg);
        } else if (rc == 0 || (r.status && r.status / 100 != 2)) {
            if (r.status / 100 == 2) {
                snprintf(why2, sizeof why2, "the stream came back with no frame");
            } else {
                e2b_envd_fail(p->sb, &r, op, "re-attach to the command", NULL, NULL);
                snprintf(why2, sizeof why2, "%.1000s", cl_last()->msg);
            }
        } else {
            snprintf(why2, sizeof why2, "%.1000s", cl_last()->msg);
        }
        cl_resp_clear(&r);
        sbx_error *err = cl_fail(error, SBX_ERROR_CONNECTION, op, "e2b: the command's stream was "
                                 "cut (%s) and re-attaching to its process %lld failed (%s): "
                                 "its outcome is unknown", cut, (long long)pid, why2);
        cl_outcome_unknown(err);
        return -1;
    }
}

/* Runs the Start stream of @p (on the calling thread), re-attached by
 * e2b_reattach() when the path cuts it: the exit code, or -1 with the error
 * in cl_last() (or with @p stopped). */
static int e2b_run_stream(e2b_proc *p, const sbx_call_ctx *ctx, int discard, int want_stdin,
                          sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = p->sb;
    const char *op = "exec";
    e2b_stream s = { .p = p, .discard = discard };
    cl_connect_init(&s.cs, e2b_on_frame, &s);
    json_object *b = e2b_start_body(sb, p->script, p->env, p->cwd, p->tag, want_stdin,
                                    p->tty_rows, p->tty_cols);
    int code = -1;
    cl_resp r = { 0 };
    /* Its error is made here (a cut stream is no error yet). */
    int rc = e2b_stream_call(p, ctx, &s, "/process.Process/Start", b, CL_UNSAFE, &r, NULL);
    if (e2b_stream_cut(&s, rc, &r)) {
        /* The path closed the stream before its end: the command runs on. */
        char why[256];
        snprintf(why, sizeof why, "%.250s", rc == 0 ? "it ended early" : cl_last()->msg);
        rc = e2b_reattach(p, ctx, &s, why, error);
    } else if (rc < 0 && s.failed) {
        cl_fail(NULL, s.saved.code, op, "%s", s.saved.msg);
        if (error && !*error)
            cl_fail(error, s.saved.code, op, "%s", s.saved.msg);
    } else if (rc < 0 && e2b_is_gone(sb)) {
        e2b_check(sb, op, error);
    } else if (rc < 0 && r.status && r.status / 100 != 2) {
        /* Refused before it ran: a missing working directory is not_found. */
        const char *cwd = p->cwd ? p->cwd : sb->s.workdir;
        json_object *sb_ = json_object_new_object(), *st = NULL;
        json_object_object_add(sb_, "path", json_object_new_string(cwd ? cwd : "/"));
        if (cwd && e2b_unary(sb, ctx, "/filesystem.Filesystem/Stat", sb_, &st, cwd, op,
                             "look up the working directory", NULL) < 0
            && cl_last()->code == SBX_ERROR_NOT_FOUND) {
            cl_cwd_missing_error(error, op, cwd);
        } else {
            e2b_envd_fail(sb, &r, op, "run the command", NULL, error);
        }
        json_object_put(st);
        json_object_put(sb_);
    } else if (rc < 0) {
        cl_fail_from(error, cl_last(), op);   /* no answer: the transport's error */
    }
    if (rc == 0)
        code = s.exit_code;
    cl_resp_clear(&r);
    if (rc < 0 && p->lost && !discard) {
        /* Its outcome is unknown and it may run on: killed (best effort,
         * 10 s) so that nothing of it is left running after the error. */
        cl_last_error l = *cl_last();
        sbx_call_ctx kc = { sizeof(kc), cl_now() + 10, -1, NULL };
        e2b_exec_kill((sbx_plugin_process *)p, &kc, SIGKILL, NULL);
        cl_fail_from(NULL, &l, op);
    }
    pthread_mutex_lock(&p->plock);
    p->over = 1;
    pthread_cond_broadcast(&p->pcond);
    pthread_mutex_unlock(&p->plock);
    cl_connect_clear(&s.cs);
    json_object_put(b);
    return code;
}

/* One of the plugin's own commands (mkdir, chmod), output discarded:
 * 0 and *@code, or -1. */
static int e2b_run_short(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const char *script, int *code, const char *op, sbx_error **error)
{
    e2b_proc p = { 0 };
    p.sb = sb;
    p.script = (char *)script;
    p.base.stdout_fd = p.base.stderr_fd = p.base.stop_fd = -1;
    pthread_mutex_init(&p.plock, NULL);
    pthread_cond_init(&p.pcond, NULL);
    *code = e2b_run_stream(&p, ctx, 1, 0, error);
    if (*code < 0 && error && !*error)
        cl_fail_from(error, cl_last(), op);
    pthread_cond_destroy(&p.pcond);
    pthread_mutex_destroy(&p.plock);
    return *code < 0 ? -1 : 0;
}

/* stdin: SendInput chunks once the pid is known, then CloseStdin. */
static void *e2b_stdin_main(void *arg)
{
    e2b_proc *p = arg;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, p->base.stop_fd, NULL };
    pthread_mutex_lock(&p->plock);
    while (p->pid <= 0 && !p->over)
        pthread_cond_wait(&p->pcond, &p->plock);
    int64_t pid = p->pid;
    int over = p->over;
    pthread_mutex_unlock(&p->plock);
    if (over && pid <= 0)
        return NULL;
    char *buf = malloc(E2B_STDIN_CHUNK);
    for (int eof = 0; buf && !eof;) {
        struct pollfd pf[2] = { { .fd = p->stdin_fd, .events = POLLIN },
                                { .fd = p->base.stop_fd, .events = POLLIN } };
        int r = poll(pf, 2, 200);
        if (r < 0 && errno == EINTR)
            continue;
        pthread_mutex_lock(&p->plock);
        over = p->over;
        pthread_mutex_unlock(&p->plock);
        if (r < 0 || pf[1].revents || over)
            break;
        if (r == 0)
            continue;
        ssize_t n = read(p->stdin_fd, buf, E2B_STDIN_CHUNK);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        json_object *b = json_object_new_object(), *sel = json_object_new_object();
        json_object_object_add(sel, "pid", json_object_new_int64(pid));
        json_object_object_add(b, "process", sel);
        const char *rpc = "/process.Process/CloseStdin";
        int tty = p->tty_rows > 0;
        if (n > 0) {
            char *b64 = cl_base64_encode(buf, (size_t)n);
            json_object *in = json_object_new_object();
            json_object_object_add(in, tty ? "pty" : "stdin",
                                   json_object_new_string(b64 ? b64 : ""));
            json_object_object_add(b, "input", in);
            free(b64);
            rpc = "/process.Process/SendInput";
        } else {
            eof = 1;
        }
        int rc;
        if (eof && tty) {
            /* A terminal is hung up, not closed: SIGHUP to the command's
             * processes (envd has no hang-up of its own). */
            char *cmd = cl_mark_kill_command(p->tag, SIGHUP);
            int code = 0;
            rc = cmd ? e2b_run_short(p->sb, &ctx, cmd, &code, op, NULL) : -1;
            free(cmd);
        } else {
            rc = e2b_unary(p->sb, &ctx, rpc, b, NULL, NULL, op, "send the command's stdin",
                           NULL);
        }
        json_object_put(b);
        if (rc < 0)
            break;
    }
    free(buf);
    return NULL;
}

static int e2b_exec_run(cl_proc *base)
{
    e2b_proc *p = (e2b_proc *)base;
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    int code = e2b_run_stream(p, &ctx, 0, p->stdin_fd >= 0, NULL);
    if (code < 0) {
        cl_proc_fail_in(base, &p->sb->s);
        if (!e2b_is_gone(p->sb) && cl_last()->code == SBX_ERROR_NOT_FOUND
            && (p->cwd || p->sb->s.workdir))
            cl_proc_context(base, "path", p->cwd ? p->cwd : p->sb->s.workdir);
    }
    return code;
}

static void e2b_proc_free_fields(e2b_proc *p)
{
    if (p->stdin_fd >= 0)
        close(p->stdin_fd);
    cl_strv_free(p->env);
    free(p->script);
    free(p->cwd);
    free(p->user);
    pthread_cond_destroy(&p->pcond);
    pthread_mutex_destroy(&p->plock);
}

static int e2b_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                          const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                          sbx_error **error)
{
    const char *op = "exec";
    (void)ctx;
    if (cl_exec_check_pty(&sb->s, E2B_BACKEND, rq, 1, error) < 0
        || cl_json_text_check(rq, NULL, op, error) < 0)
        return -1;
    e2b_proc *p = calloc(1, sizeof(*p));
    if (!p) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    p->sb = sb;
    p->stdin_fd = -1;
    p->tty_rows = rq->tty_rows;
    p->tty_cols = rq->tty_cols;
    pthread_mutex_init(&p->plock, NULL);
    pthread_cond_init(&p->pcond, NULL);
    cl_random_hex(p->tag, 12);
    p->script = cl_shell_script(rq->argv, rq->shell, NULL);
    p->env = cl_strv_dup(rq->env);
    int bad = !p->script || !p->env;
    if (!bad && rq->cwd)
        bad = !(p->cwd = e2b_abs(sb, rq->cwd));
    if (!bad && rq->user)
        bad = !(p->user = strdup(rq->user));
    if (cl_exec_launch(&p->base, e2b_exec_run, p, !bad, rq, &p->stdin_fd, op, error) < 0) {
        e2b_proc_free_fields(p);
        free(p);
        return -1;
    }
    if (p->stdin_fd >= 0)
        p->stdin_started = pthread_create(&p->stdin_thread, NULL, e2b_stdin_main, p) == 0;
    *process = (sbx_plugin_process *)p;
    return 0;
}

/* process.Process/SendSignal to envd's process @pid: SIGTERM as
 * SIGNAL_SIGTERM, any other signal as SIGNAL_SIGKILL. 0 (also when it ended
 * meanwhile), or -1 with cl_last(). */
static int e2b_signal_pid(e2b_proc *p, const sbx_call_ctx *ctx, int64_t pid, int sig)
{
    json_object *b = json_object_new_object(), *sel = json_object_new_object();
    json_object_object_add(sel, "pid", json_object_new_int64(pid));
    json_object_object_add(b, "process", sel);
    json_object_object_add(b, "signal", json_object_new_string(sig == SIGTERM ? "SIGNAL_SIGTERM"
                                                                              : "SIGNAL_SIGKILL"));
    int rc = e2b_unary(p->sb, ctx, "/process.Process/SendSignal", b, NULL, NULL, "exec_kill",
                       "signal the command", NULL);
    json_object_put(b);
    if (rc < 0 && cl_last()->code == SBX_ERROR_NOT_FOUND && !e2b_is_gone(p->sb))
        rc = 0;     /* it ended meanwhile */
    return rc;
}

static int e2b_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                         sbx_error **error)
{
    e2b_proc *p = (e2b_proc *)process;
    pthread_mutex_lock(&p->plock);
    int64_t pid = p->pid;
    int over = p->over;
    /* Not named yet (its start event still on its way, or envd has not
     * answered the Start): the signal goes to it by its pid once the start
     * event names it. Nothing else is asked of envd meanwhile: an envd
     * that does not answer the Start would not answer a command of ours
     * either, and a process it started has no tree yet. */
    if (!over && pid <= 0 && (p->pending_sig == 0 || sig == SIGKILL))
        p->pending_sig = sig;
    pthread_mutex_unlock(&p->plock);
    if (over || pid <= 0)
        return 0;
    if (e2b_signal_pid(p, ctx, pid, sig) < 0) {
        cl_fail_from(error, cl_last(), "exec_kill");
        return -1;
    }
    int rc;
    /* envd signals the one process: the rest of its tree (background and
     * setsid'd descendants included) is found by the mark in its
     * environment. */
    char *cmd = cl_mark_kill_command(p->tag, sig == SIGTERM ? SIGTERM : SIGKILL);
    int code = 0;
    rc = cmd ? e2b_run_short(p->sb, ctx, cmd, &code, "exec_kill", error) : -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "exec_kill", "out of memory");
    free(cmd);
    return rc;
}

/* process.Process/Update {"process":{"pid"},"pty":{"size"}} once envd
 * named the process (waited for within the call's bound). */
static int e2b_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx, unsigned rows,
                           unsigned cols, sbx_error **error)
{
    const char *op = "exec_resize";
    e2b_proc *p = (e2b_proc *)process;
    if (cl_resize_check(p->tty_rows, error) < 0)
        return -1;
    cl_bound bd = cl_bound_make(ctx, 0);
    pthread_mutex_lock(&p->plock);
    while (p->pid <= 0 && !p->over)
        if (cl_resize_wait(&bd, &p->pcond, &p->plock, "e2b: the terminal was not resized: "
                           "envd did not name the command's process in time", error) < 0)
            return -1;
    int64_t pid = p->pid;
    int over = p->over;
    pthread_mutex_unlock(&p->plock);
    if (over)
        return 0;       /* it ended: nothing to resize */
    json_object *b = json_object_new_object(), *sel = json_object_new_object();
    json_object_object_add(sel, "pid", json_object_new_int64(pid));
    json_object_object_add(b, "process", sel);
    json_object_object_add(b, "pty", e2b_pty_size(rows, cols));
    int rc = e2b_unary(p->sb, ctx, "/process.Process/Update", b, NULL, NULL, op,
                       "resize the terminal", NULL);
    json_object_put(b);
    if (rc < 0 && cl_last()->code == SBX_ERROR_NOT_FOUND && !e2b_is_gone(p->sb))
        rc = 0;     /* it ended meanwhile */
    if (rc < 0) {
        cl_fail_from(error, cl_last(), op);
        return -1;
    }
    return 0;
}

static void e2b_exec_free(sbx_plugin_process *process)
{
    e2b_proc *p = (e2b_proc *)process;
    if (!p)
        return;
    sbx_call_ctx c2 = { sizeof(c2), cl_now() + 10, -1, NULL };
    e2b_exec_kill(process, &c2, SIGKILL, NULL);
    cl_proc_stop(&p->base);
    if (p->stdin_started)
        pthread_join(p->stdin_thread, NULL);
    cl_proc_clear(&p->base);
    e2b_proc_free_fields(p);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/* Size comes from the template; E2B has no GPUs, images, snapshots or
 * apps (provider.h: refused in this order). */
static const cl_unsupported e2b_unsupported[] = {
    { "cpu", "E2B takes the vCPU count from the template" },
    { "memory_mb", "E2B takes the memory size from the template" },
    { "disk_mb", "E2B takes the disk size from the template" },
    { "gpu", "E2B has no GPUs" },
    { "image", "E2B runs templates, not images (use template)" },
    { "snapshot_id", "the e2b backend has no snapshots" },
    { "app_name", "E2B has no apps" },
    { NULL, NULL },
};

static json_object *e2b_create_body(const sbx_call_ctx *ctx, const sbx_plugin_create_request *rq,
                                    long long *timeout, sbx_error **error)
{
    /* The provider-side lifetime, always (CASE-33): whole seconds. */
    static const cl_limit lifetime[] = {
        { "timeout_secs", 0, E2B_MAX_TIMEOUT_S, 0, CL_LIMIT_ABOVE | CL_LIMIT_ALWAYS,
          "E2B takes 1 to 86400 seconds", NULL, NULL, NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    if (cl_workdir_check(E2B_BACKEND, rq->workdir, error) < 0)
        return NULL;
    if (cl_refuse_options(rq, E2B_BACKEND, e2b_unsupported, error) < 0
        || cl_no_backend_options(rq, E2B_BACKEND, error) < 0
        || cl_limits_check(rq, E2B_BACKEND, lifetime, error) < 0)
        return NULL;
    double ts = rq->timeout_secs;
    /* The library times commands out at the lifetime's end; the provider
     * ends the sandbox E2B_LIFETIME_MARGIN_S later, so that such a command
     * is reported timed out (124), not lost with its sandbox. */
    *timeout = (long long)ceil(ts) + E2B_LIFETIME_MARGIN_S;
    if (*timeout > E2B_MAX_TIMEOUT_S)
        *timeout = E2B_MAX_TIMEOUT_S;
    json_object *b = json_object_new_object();
    json_object_object_add(b, "templateID", json_object_new_string(
                               rq->template_name ? rq->template_name : E2B_DEFAULT_TEMPLATE));
    json_object_object_add(b, "timeout", json_object_new_int64(*timeout));
    json_object_object_add(b, "secure", json_object_new_boolean(1));
    if (!rq->allow_internet)
        json_object_object_add(b, "allow_internet_access", json_object_new_boolean(0));
    json_object_object_add(b, "metadata", cl_meta_labels(ctx, E2B_BACKEND, rq->expires_at > 0
                                                         ? rq->expires_at
                                                         : cl_wallclock() + (double)*timeout));
    json_object_object_add(b, "envVars", cl_env_object(rq->env));
    return b;
}

static int e2b_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                      const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                      sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    long long timeout = 0;
    json_object *body = e2b_create_body(ctx, rq, &timeout, error), *j = NULL;
    if (!body)
        return -1;
    char *url = cl_printf("%s/sandboxes", c->cl.api);
    int rc = -1;
    struct sbx_plugin_sandbox *sb = NULL;
    const char *id = NULL;
    if (!(j = cl_create_post(c->cl.http, c->cl.reaper, ctx, url, body, "sandboxID", "a sandboxID",
                             "create the sandbox", &id, error)))
        goto out;
    sb = e2b_sandbox_new(c, id);
    if (!sb || e2b_take_sandbox(sb, j) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto undo;
    }
    sb->lifetime_s = (double)timeout;
    /* The default user (ABI 1.4): envd's user of every call that names
     * none, the workdir's making included. */
    if (rq->struct_size >= offsetof(sbx_plugin_create_request, user) + sizeof(rq->user)
        && rq->user && !(sb->user = strdup(rq->user))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto undo;
    }
    if (cl_ports_from_request(&sb->s, rq, op, error) < 0)
        goto undo;
    if (cl_create_workdir(sb, &sb->s.workdir, e2b_run_short, ctx, E2B_BACKEND, rq->workdir, op,
                          error) < 0)
        goto undo;
    *sandbox = sb;
    rc = 0;
    goto out;
undo:
    cl_create_undo(sb, c, e2b_delete, id, 1, e2b_sandbox_free, op, error);
out:
    json_object_put(body);
    json_object_put(j);
    free(url);
    return rc;
}

CL_DESTROY(e2b_destroy, e2b_delete)

/* Running or paused: it exists. */
CL_ITEM_IS_ALIVE(e2b_is_alive, "sandboxes", NULL, NULL)

/* {"version":1,"sandbox_id","workdir"?,"user"?,"lifetime_s"}: no access
 * token, no credential, no env value. */
static char *e2b_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, E2B_BACKEND, E2B_STATE_VERSION, "sandbox_id", error);
    if (!j)
        return NULL;
    if (sb->user)
        json_object_object_add(j, "user", json_object_new_string(sb->user));
    json_object_object_add(j, "lifetime_s", json_object_new_int64((int64_t)sb->lifetime_s));
    cl_ports_to_state(&sb->s, j);
    return cl_state_end(j, error);
}

static int e2b_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                      sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "resume";
    json_object *data;
    struct sbx_plugin_sandbox *sb = cl_resume_state(client, state_json, E2B_BACKEND,
                                                    E2B_STATE_VERSION, "sandbox_id",
                                                    sizeof(*sb), &data, error);
    if (!sb)
        return -1;
    pthread_mutex_init(&sb->lock, NULL);
    int64_t life = 0;
    cl_json_int(data, "lifetime_s", &life);
    sb->lifetime_s = (double)life;
    int rc = -1;
    /* Then connect with the lifetime it has left: its access token, and a
     * paused sandbox resumed (CASE-33, CASE-53). */
    if (cl_dup(&sb->user, cl_json_str(data, "user")) < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cl_ports_from_state(&sb->s, data, E2B_BACKEND, op, error) == 0)
        rc = e2b_wake(sb, ctx, 1, op, error);
    return cl_resume_end(rc, sb, sandbox, NULL, data, e2b_sandbox_free);
}

/* Exposed ports: every port of a sandbox answers at its preview address
 * https://PORT-ID.DOMAIN (E2B's own routing; no call is made); the library
 * maps the ports exposed. Nothing of the sandbox's access tokens is in it. */
static char *e2b_resolve_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                              sbx_error **error)
{
    const char *op = "resolve_port";
    (void)ctx;
    if (cl_port_resolvable(&sb->s, port, error) < 0)
        return NULL;
    char *url = cl_printf("https://%u-%s.%s", port, sb->s.id,
                          sb->domain ? sb->domain : sb->s.c->domain);
    char *out = cl_host_strdup(url, op, error);
    free(url);
    return out;
}

/* stop pauses the sandbox (its files and memory kept); start connects. */
static int e2b_stop(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    /* 409: it is paused already */
    return cl_sandbox_call(&sb->s, sb->s.c->cl.http, ctx, "POST", sb->s.c->cl.api, "sandboxes",
                           "/pause", NULL, CL_SAFE, 409, "stop", "pause the sandbox", error);
}

static int e2b_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (e2b_check(sb, "start", error) < 0)
        return -1;
    return e2b_wake(sb, ctx, 0, "start", error);
}

/* GET /v2/sandboxes?metadata=K%3DV, every page (X-Next-Token): @fn per
 * listed sandbox. */
static int e2b_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *key,
                    const char *value, cl_listed_fn fn, void *ud, const char *op,
                    sbx_error **error)
{
    char *kv = cl_printf("%s=%s", key, value);
    char *meta = kv ? cl_url_escape(kv) : NULL;
    char *url = meta ? cl_printf("%s/v2/sandboxes?state=running,paused&metadata=%s&limit=100",
                                 c->cl.api, meta) : NULL;
    cl_pages pg = { url, "nextToken", "X-Next-Token", NULL, NULL, "list sandboxes", 0 };
    int rc = cl_list_pages(c->cl.http, ctx, &pg, fn, ud, op, error);
    free(url);
    free(meta);
    free(kv);
    return rc;
}

/* The sandboxes this backend made (metadata sbx_backend=e2b), and the
 * reaper's look-up: the sandboxes carrying a create token. */
CL_LABEL_LISTING(e2b, e2b_list, E2B_BACKEND, "sandboxID", "metadata", "startedAt")

CL_DESTROY_BY_ID(e2b_destroy_by_id, e2b_delete)

/* ------------------------------------------------------------------------ */
/* Files: envd's /files as raw bytes (CASE-17), Filesystem for listings      */
/* ------------------------------------------------------------------------ */

static char *e2b_files_path(struct sbx_plugin_sandbox *sb, const char *path)
{
    char *q = cl_path_query("/files?path=", sb->s.workdir, path);
    char *u = cl_url_escape(sb->user ? sb->user : E2B_DEFAULT_USER);
    char *s = q && u ? cl_printf("%s&username=%s", q, u) : NULL;
    free(u);
    free(q);
    return s;
}

static int e2b_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         int fd, sbx_error **error)
{
    const char *op = "read_file";
    char *q = e2b_files_path(sb, path);
    cl_req rq = { .method = "GET", .sink = cl_fd_sink, .sink_ud = &fd, .idempotent = CL_SAFE,
                  .what = "download the file" };
    cl_resp r = { 0 };
    int rc = q ? e2b_envd(sb, ctx, &rq, q, NULL, NULL, &r, op, error) : -1;
    if (!q)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (rc < 0 && r.status && !(error && *error) && !e2b_is_gone(sb))
        e2b_envd_fail(sb, &r, op, "download the file", path, error);
    free(q);
    cl_resp_clear(&r);
    return rc;
}

static int e2b_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                          int fd, uint32_t mode, sbx_error **error)
{
    const char *op = "write_file";
    /* The upload carries any path, the chmod after it (a command) not. */
    if (cl_json_text_check(NULL, path, op, error) < 0)
        return -1;
    char *q = e2b_files_path(sb, path);
    cl_req rq = { .method = "POST", .content_type = "application/octet-stream",
                  .source = cl_fd_source, .source_ud = &fd, .source_len = -1,
                  .idempotent = CL_SAFE, .what = "upload the file" };
    cl_resp r = { 0 };
    int rc = q ? e2b_envd(sb, ctx, &rq, q, NULL, NULL, &r, op, error) : -1;
    if (!q)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (rc < 0 && r.status && !(error && *error) && !e2b_is_gone(sb))
        e2b_envd_fail(sb, &r, op, "upload the file", path, error);
    free(q);
    cl_resp_clear(&r);
    if (rc < 0)
        return -1;
    /* envd's upload has no mode: set it. */
    char *abs = e2b_abs(sb, path);
    rc = abs ? cl_set_mode(sb, e2b_run_short, ctx, abs, path, mode, op, error) : -1;
    if (!abs)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    free(abs);
    return rc;
}

/* A Filesystem EntryInfo to a file info (name borrowed from @e). */
static void e2b_entry(json_object *e, sbx_plugin_file_info *info)
{
    int64_t size = -1, mode = 0;
    cl_json_int(e, "size", &size);
    cl_json_int(e, "mode", &mode);
    const char *type = cl_json_str(e, "type");
    int is_dir = type && strcmp(type, "FILE_TYPE_DIRECTORY") == 0;
    *info = (sbx_plugin_file_info){ sizeof(*info), cl_json_str(e, "name"), is_dir,
                                    is_dir ? -1 : size, (uint32_t)(mode & 07777) };
}

static int e2b_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                          sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    if (cl_json_text_check(NULL, path, op, error) < 0)
        return -1;
    char *abs = e2b_abs(sb, path);
    json_object *b = json_object_new_object(), *j = NULL;
    json_object_object_add(b, "path", json_object_new_string(abs ? abs : path));
    json_object_object_add(b, "depth", json_object_new_int(1));
    free(abs);
    int rc = e2b_unary(sb, ctx, "/filesystem.Filesystem/ListDir", b, &j, path, op,
                       "list the directory", error);
    json_object_put(b);
    if (rc < 0)
        return -1;
    json_object *es = cl_json_path(j, "entries", NULL);
    size_t n = es && json_object_is_type(es, json_type_array) ? json_object_array_length(es) : 0;
    for (size_t i = 0; i < n; i++) {
        sbx_plugin_file_info info;
        e2b_entry(json_object_array_get_idx(es, i), &info);
        if (info.name && fn(&info, ud) != 0)
            break;
    }
    json_object_put(j);
    return 0;
}

static int e2b_stat_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_info *info, sbx_error **error)
{
    const char *op = "stat_file";
    if (cl_json_text_check(NULL, path, op, error) < 0)
        return -1;
    char *abs = e2b_abs(sb, path);
    json_object *b = json_object_new_object(), *j = NULL;
    json_object_object_add(b, "path", json_object_new_string(abs ? abs : path));
    free(abs);
    int rc = e2b_unary(sb, ctx, "/filesystem.Filesystem/Stat", b, &j, path, op,
                       "look up the file", error);
    json_object_put(b);
    if (rc < 0)
        return -1;
    e2b_entry(cl_json_path(j, "entry", NULL), info);
    info->name = cl_stat_name(info->name);
    json_object_put(j);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin e2b_plugin = {
    CL_PLUGIN_HEAD(E2B_BACKEND),
    CL_PLUGIN_SLOTS(e2b),
    .description = "E2B sandboxes (REST API; envd's Connect process stream and raw-byte files) "
                   "over libcurl; the client option keepalive_s (seconds, default 20) is how "
                   "long a command's stream may be quiet before envd sends a keepalive, and a "
                   "stream the path cuts is re-attached to the same process by its pid",
    .caps = E2B_CAPS,
    .sandbox_free = e2b_sandbox_free,
    .exec_wait = cl_exec_wait,
    .exec_kill = e2b_exec_kill,
    .exec_resize = e2b_exec_resize,
    .exec_free = e2b_exec_free,
    .stat_file = e2b_stat_file,
    .stop = e2b_stop,
    .start = e2b_start,
    CL_PORT_SLOTS(e2b_resolve_port),
};

CL_PLUGIN_EXPORT(&e2b_plugin)
