/*
 * tensorlake.c — libsbx-tensorlake.so, the `tensorlake` backend: Tensorlake
 * Sandboxes' control plane (REST) for the lifecycle and each sandbox's own
 * host (its sandbox_url) for processes and files, over the hosted-provider
 * base (plugins/cloud/base/cloud.h).
 *
 * Contract: the Tensorlake section of the provider contracts
 * (tensorlakeai/tensorlake src/tensorlake/sandbox/_defaults.py,
 * crates/cloud-sdk/src/sandboxes/; docs.tensorlake.ai/api-reference/v2).
 *
 *  - Credentials: TENSORLAKE_API_KEY, as "Authorization: Bearer ..." on
 *    both planes. Base URL: the client config's "api_url", else
 *    TENSORLAKE_API_URL, else https://api.tensorlake.ai.
 *  - create: POST /sandboxes. cpu → resources.cpus; memory_mb →
 *    resources.memory_mb; disk_mb → resources.disk_mb; gpu "MODEL[:N]" →
 *    resources.gpus [{model, count}]; image → image; snapshot_id →
 *    snapshot_id; template → template_id; allow_internet=0 →
 *    network.allow_internet_access false. memory_mb under 256 (the
 *    provider's minimum) is a configuration error with context
 *    min_mb=256. timeout_secs is always sent (the caller's lifetime plus
 *    TL_LIFETIME_MARGIN_S, so that a command the library times out at the
 *    lifetime's end is reported timed out; else TL_DEFAULT_LIFETIME_S).
 *  - Named by its create token (CASE-20, CASE-33): Tensorlake takes no
 *    labels or metadata; the one client-chosen field of a create that its
 *    list returns is "name" (SandboxInfo.name, crates/cloud-sdk
 *    sandboxes/models.rs), so every sandbox is named with the create token
 *    ("sbx-" + 32 hex digits). A create whose answer was lost (sent, no
 *    answer in time, or a 5xx after it may have acted) is outcome unknown,
 *    and the sandbox it may have made is looked for by that name in the
 *    list and deleted, now and for 30 s on the client's reaper thread
 *    (cl_reap_lost); list_owned and destroy_by_id find every sandbox so
 *    named. A named sandbox suspends after timeout_secs without traffic
 *    instead of ending (it runs no longer than its lifetime; gc finds
 *    it); stop suspends it and start resumes it. The backend option
 *    {"suspendable": false} (or the client option of that name) leaves it
 *    unnamed, ephemeral: the provider ends it at its lifetime, stop is
 *    feature_not_supported naming the option, a lost create answer leaves
 *    it to that lifetime, and (client option) list_owned and destroy_by_id
 *    are not offered. app_name is refused (a configuration error naming
 *    it). The sandbox is polled until "running".
 *  - Environment values are per process at Tensorlake: the create's env is
 *    written to TL_ENV_FILE (mode 0600) in the sandbox, in the upload's
 *    body, and every command sources it, leaving alone the keys the call
 *    sets itself (provider.h); so it holds after a resume in another
 *    process, and the session state holds no env value.
 *  - exec: one request, POST {sandbox_url}/api/v1/processes/run (SSE):
 *    "bash -c WRAPPER bash SCRIPT" (SCRIPT: cl_shell_script, the cwd on a
 *    line of its own, CASE-46; the create's workdir when the call names
 *    no cwd), env in the env field; {"pid"} first, then {"exit_code"|
 *    "signal"}. A stream without its exit event is an error. Why one
 *    request and a wrapper: the run stream's output is lines of text (the
 *    daemon splits at "\n" and drops it and a "\r" before it, so a last
 *    line's missing newline is lost, and bytes that are not UTF-8 are
 *    replaced or end the stream), and the contract has no call that runs
 *    a command and returns its bytes. So the wrapper runs SCRIPT in a
 *    bash of its own with stdout and stderr on two files of the sandbox
 *    and, when it ends, prints a report line that carries the command's
 *    status and both outputs percent-encoded or in base64 (text-safe,
 *    kept apart, exact: CASE-07), then removes the files (tl_exec_script);
 *    the result's exit code is the report's. Nothing else is asked of the
 *    provider: a warm exec is one request, where reading the files back
 *    and deleting them was four more, and no command leaves a file behind
 *    once it has reported. Output larger than TL_INLINE_MAX a stream, or a
 *    wrapper ended by SIGKILL (no report: its exit code is the run's), is
 *    downloaded as raw bytes (GET /api/v1/files) and deleted (DELETE), as
 *    before. That output arrives when the command ends: so it is when
 *    nothing reads it before the end (SBX_PLUGIN_EXEC_OUTPUT_AT_END: no
 *    output callback, no caller descriptor, no process handle). Else it
 *    streams while the command runs, in the same one request
 *    (tl_stream_script): a tail follows each file into a subshell that
 *    prints each read of it as a line, "O" or "E" and the bytes in base64, on the
 *    run's stdout or stderr; the plugin decodes each as it comes (exact,
 *    apart) and the report carries the status only. A wrapper killed
 *    (SIGKILL) leaves the rest in the files, downloaded past what the
 *    chunks carried. The programs the streaming wrapper starts (two
 *    tails, a dd and a base64 per chunk and per stream's end) and the
 *    tail's poll for the command's end cost time: measured against the
 *    contract fake on a shared 2-core host, the p50 of a warm exec of
 *    "echo hi" was 22 ms with the end report and 35 ms streamed (out of
 *    process; 27 / 44 ms in process), and of "seq 1 20000" (108894
 *    bytes) 58 / 92 ms: about 1.6 times. The daemon's keepalive comments
 *    (":" after 15 s without an event) never reach the output (the
 *    base's SSE reader drops comments), and the run has no read timeout
 *    of its own: the command's timeout bounds it (CASE-52).
 *    What the command leaves running in the background
 *    writes to the files, never to the run stream, so it does not hold
 *    the exec (its output after the report is not returned).
 *    stdin: uploaded as a file first (one request more) and redirected.
 *    Why a second bash: SCRIPT run by eval in the run's own bash (its
 *    stdout and stderr then files) lets a background subshell of the
 *    command inherit the shell's saved copy of the run's stdout, which
 *    holds the exec until it ends; run by eval in a subshell of the
 *    wrapper (a fork, no exec: about 1.2 ms less in the sandbox), $$ is
 *    the wrapper, not the command's shell, so "kill -TERM $$" or
 *    "kill -SEGV $$" in the command no longer ends it (the conformance
 *    suite's exec::death_by_signal_is_128_plus_n). The second bash keeps
 *    $$, $!, $0, $#, traps, line numbers and signals those of a plain
 *    "bash -c SCRIPT".
 *    Every process of the command carries CL_EXEC_MARK=<its tag> in its
 *    environment, so exec_kill (a scan run as a command of its own)
 *    signals all of them, setsid'd and orphaned descendants included; the
 *    wrapper traps the catchable signals, so it still reports. The end
 *    event's oom_killed is the result's OOM flag (exec_end_info, CASE-49).
 *  - files: GET|PUT /api/v1/files?path= (raw bytes both ways, never text,
 *    CASE-17), GET /api/v1/files/list?path=; a relative path is taken from
 *    the workdir (else /).
 *  - snapshot: POST /sandboxes/{id}/snapshot {"snapshot_type":"filesystem"},
 *    polled at GET /snapshots/{id} until "completed"; restore is a create
 *    with snapshot_id.
 *  - exposed ports: create's ports → exposed_ports; expose_port and
 *    unexpose_port send PATCH /sandboxes/{id} {"exposed_ports": the whole
 *    new set}; resume takes the set from the SandboxInfo. resolve_port:
 *    https://PORT-ID.sandbox.tensorlake.ai (the host of the sandbox_url
 *    when it is ID.HOST, else of TENSORLAKE_SANDBOX_PROXY_URL), which asks
 *    for the caller's own Bearer API key (never part of the address).
 *  - A sandbox the provider no longer has (404, or status terminated) is
 *    not_found with reason "gone" (CASE-32); every later call fails at once.
 *
 * Threading: slots may run at once on different sandboxes and on one; a
 * sandbox's mutable state (the gone flag, a cl_gone) has its own lock.
 */
#include "cloud.h"
#include "provider.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#define TL_BACKEND "tensorlake"
#define TL_DEFAULT_URL "https://api.tensorlake.ai"
#define TL_STATE_VERSION 1
#define TL_WAIT_S 300.0                 /* bound on waiting for running / a snapshot */
#define TL_DEFAULT_LIFETIME_S 3600      /* timeout_secs when the caller set none */
#define TL_MIN_MEMORY_MB 256           /* the provider's smallest resources.memory_mb */
#define TL_STR_(x) #x
#define TL_STR(x) TL_STR_(x)
#define TL_LIFETIME_MARGIN_S 5          /* provider end after the caller's lifetime */
/* A command's report (tl_exec_script): its first line of stdout starting
 * with this and the command's tag. */
#define TL_REPORT_MARK "SBX-OUT-"
#define TL_INLINE_MAX 65536             /* output bytes reported in base64; more: downloaded */
/* The create's environment, sourced by every command (provider.h). */
#define TL_ENV_FILE "/var/lib/sbx/create.env"

#define TL_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_SNAPSHOT      \
                 | SBX_CAP_RESUME | SBX_CAP_ISOLATION | SBX_CAP_NETWORK_POLICY            \
                 | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT | SBX_CAP_DISK_LIMIT          \
                 | SBX_CAP_GPU | SBX_CAP_IMAGE | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED    \
                 | SBX_CAP_BACKGROUND | SBX_CAP_EXPOSED_PORTS)
/* A client with "suspendable": false: list_owned (and destroy_by_id) only
 * find named sandboxes, which it does not make. */
#define TL_CAPS_UNNAMED (TL_CAPS & ~SBX_CAP_LIST_OWNED)

static const char *const tl_gpu_models[] = { "A100-40GB", "A100-80GB", "H100", "T4", "A6000",
                                             "A10", NULL };

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, base URL, reaper (provider.h) */
    int suspendable;    /* client option (default 1): its sandboxes are named */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id, the gone flag and the data
                         * plane, its sandbox_url (provider.h) */
    int named;          /* named by its create token: suspendable, listed */
};

typedef struct tl_proc {
    cl_script_proc sp;  /* first member: script, env, stdin, tag (provider.h) */
    pthread_mutex_t pid_lock;
    int64_t pid;        /* the provider's pid; 0 until the stream names it */
} tl_proc;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define tl_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define tl_gone_error(error, op, id) cl_gone_error((error), (op), TL_BACKEND, (id))
#define tl_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), TL_BACKEND, (sb)->s.id, \
                                              (error))

/* GET /sandboxes/{id}: SandboxInfo, or NULL (*@status: 0 when no answer). */
CL_ITEM_GET(tl_get, "sandboxes", "get the sandbox")

#define tl_status(j) cl_json_str_or((j), "status", "unknown")

CL_ITEM_DELETE(tl_delete, "sandboxes", "delete the sandbox")

static int tl_token_one(void *ud, const char *id, const char *name)
{
    cl_token_ids_match(ud, name, id);
    return 0;
}

static int tl_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                   int (*fn)(void *ud, const char *id, const char *name), void *ud,
                   const char *op, sbx_error **error);

/* The reaper's look-up (cloud.h): the sandboxes named @token. */
CL_FIND_TOKEN(tl_find_token, tl_list, tl_token_one)

/* The gone error of sandbox @id, with its status and termination reason
 * from @view (may be NULL). */
static sbx_error *tl_gone_keys(sbx_error **error, const char *op, const char *id,
                               json_object *view)
{
    static const char *const keys[] = { "status", "termination_reason", NULL };
    return cl_gone_error_view(error, op, TL_BACKEND, id, view, keys);
}

/* Resumes a suspended sandbox (CASE-53). */
static int tl_resume_call(cl_sandbox *s, const sbx_call_ctx *ctx, const char *state,
                          const char *op, sbx_error **error)
{
    cl_resp r = { 0 };
    int rc = cl_item_request(s->c->cl.http, ctx, "POST", s->c->cl.api, "sandboxes", s->id,
                             "/resume", NULL, CL_SAFE, &r, op, "resume the sandbox", error);
    if (rc == 0 && r.status / 100 != 2) {
        cl_context(cl_fail_status(s->c->cl.http, error, CL_CODE_BY_STATUS, &r, op,
                                  "resume the sandbox"), "state", state);
        rc = -1;
    }
    cl_resp_clear(&r);
    return rc;
}

/* Running: polled until "running", a suspended sandbox resumed once; a
 * terminated or timed-out one is gone. */
static const char *const tl_over[] = { "terminated", "timeout", NULL };
static const char *const tl_asleep[] = { "suspended", NULL };
static const cl_resume_spec tl_wake_look = { TL_BACKEND, TL_STATE_VERSION, "sandbox_id", tl_get,
                                             "status", tl_over, tl_gone_keys };
static const cl_wake_spec tl_waking = { &tl_wake_look, "status", "unknown", "running", tl_asleep,
                                        TL_WAIT_S, NULL, tl_resume_call };
#define tl_wake(sb, ctx, op, error) cl_sandbox_wake(&(sb)->s, (ctx), &tl_waking, (op), (error))

/* The gone error of sandbox @id, whatever the provider's view says. */
static sbx_error *tl_gone_view(sbx_error **error, const char *op, const char *id,
                               json_object *view)
{
    (void)view;
    return tl_gone_error(error, op, id);
}

/* How a refused data-plane call is read: a 404 is looked into (only the
 * control plane's 404 or "terminated" makes the sandbox gone: the
 * sandbox's own host answering 404 does not say the provider dropped it). */
static const char *const tl_ended[] = { "terminated", NULL };
static const cl_resume_spec tl_look = { TL_BACKEND, TL_STATE_VERSION, "sandbox_id", tl_get,
                                        "status", tl_ended, tl_gone_view };
static const cl_call_spec tl_calls = { &tl_look, 0 };

/* A data-plane call on @sb: 0 with a 2xx answer in @r, -1 otherwise; a 404
 * that the control plane confirms (tl_look) marks it gone. */
CL_PLANE_CALL(tl_host, &tl_calls)

static int tl_run_short(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

CL_SETUP(tl_setup, TL_BACKEND)

static const char *const tl_key_envs[] = { "TENSORLAKE_API_KEY", NULL };

static const cl_client_spec tl_client_spec = {
    .provider = TL_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .url_key = "api_url", .url_env = "TENSORLAKE_API_URL", .url_default = TL_DEFAULT_URL,
    .key_envs = tl_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .key_required = 1,
    .find = tl_find_token, .del = tl_delete,
};

static int tl_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&tl_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    c->suspendable = 1;
    const cl_option opts[] = { { "suspendable", CL_OPTION_BOOL, 0, &c->suspendable },
                               { NULL, 0, 0, NULL } };
    return cl_client_end(cl_client_options(cfg, opts, error), c, client, cfg,
                         cl_client_free_slot);
}

static int tl_probe(sbx_plugin_client *client, const sbx_call_ctx *ctx, uint64_t *caps,
                    sbx_error **error)
{
    (void)ctx;
    if (cl_http_missing_credential(client->cl.http, "probe", error) < 0)
        return -1;
    *caps = client->suspendable ? TL_CAPS : TL_CAPS_UNNAMED;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

#define tl_refuse(error, option, value, why) \
    cl_refuse((error), TL_BACKEND, (option), (value), (why))

static json_object *tl_create_body(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                   const sbx_plugin_create_request *rq, int *named,
                                   sbx_error **error)
{
    json_object *b = json_object_new_object(), *res = json_object_new_object();
    uint64_t set = rq->set_fields;
    json_object_object_add(b, "resources", res);
    if (cl_workdir_check(TL_BACKEND, rq->workdir, error) < 0)
        goto fail;
    if (set & SBX_OPTION_APP_NAME) {
        tl_refuse(error, "app_name", rq->app_name, "Tensorlake has no apps");
        goto fail;
    }
    static const cl_limit limits[] = {
        { "cpu", 0, 0, 0, CL_LIMIT_ABOVE, "must be more than 0", NULL, NULL, NULL },
        { "memory_mb", TL_MIN_MEMORY_MB, 0, 0, 0, "below Tensorlake's minimum of "
          TL_STR(TL_MIN_MEMORY_MB) " MB", "min_mb", NULL, NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    if (cl_limits_check(rq, TL_BACKEND, limits, error) < 0)
        goto fail;
    if (set & SBX_OPTION_CPU)
        json_object_object_add(res, "cpus", json_object_new_double(rq->cpu));
    if (set & SBX_OPTION_MEMORY_MB)
        json_object_object_add(res, "memory_mb", json_object_new_int64(rq->memory_mb));
    if ((set & SBX_OPTION_DISK_MB) && rq->disk_mb > 0)
        json_object_object_add(res, "disk_mb", json_object_new_int64(rq->disk_mb));
    if ((set & SBX_OPTION_GPU) && rq->gpu) {
        size_t ml;
        long count;
        if (cl_gpu_parse(rq->gpu, tl_gpu_models, 8, &ml, &count) < 0) {
            tl_refuse(error, "gpu", rq->gpu, "Tensorlake offers A100-40GB, A100-80GB, H100, T4, "
                                             "A6000, A10 (MODEL[:COUNT])");
            goto fail;
        }
        json_object *g = json_object_new_object(), *gs = json_object_new_array();
        json_object_object_add(g, "model", json_object_new_string_len(rq->gpu, (int)ml));
        json_object_object_add(g, "count", json_object_new_int((int)count));
        json_object_array_add(gs, g);
        json_object_object_add(res, "gpus", gs);
    }
    if (rq->image && (rq->snapshot_id || rq->template_name)) {
        tl_refuse(error, "image", rq->image, "give an image or a template/snapshot, not both");
        goto fail;
    }
    if (rq->image)
        json_object_object_add(b, "image", json_object_new_string(rq->image));
    if (rq->snapshot_id)
        json_object_object_add(b, "snapshot_id", json_object_new_string(rq->snapshot_id));
    if (rq->template_name)
        json_object_object_add(b, "template_id", json_object_new_string(rq->template_name));
    if (!rq->allow_internet) {
        json_object *n = json_object_new_object();
        json_object_object_add(n, "allow_internet_access", json_object_new_boolean(0));
        json_object_object_add(b, "network", n);
    }
    /* The provider-side lifetime, always (CASE-33): whole seconds. */
    /* The library times commands out at the lifetime's end; the provider
     * ends the sandbox TL_LIFETIME_MARGIN_S later, so that such a command
     * is reported timed out (124), not lost with it. */
    long long t = cl_lifetime_s(rq, TL_BACKEND, TL_DEFAULT_LIFETIME_S, TL_LIFETIME_MARGIN_S,
                                error);
    if (t < 0)
        goto fail;
    json_object_object_add(b, "timeout_secs", json_object_new_int64(t));
    const uint16_t *ports;
    size_t n_ports = cl_request_ports(rq, &ports);
    if (n_ports) {
        json_object *ep = json_object_new_array();
        for (size_t i = 0; i < n_ports; i++)
            json_object_array_add(ep, json_object_new_int(ports[i]));
        json_object_object_add(b, "exposed_ports", ep);
    }
    /* Named by the create token (listed, found after a lost answer,
     * suspendable) unless the client or the create's backend option
     * "suspendable" says false: then unnamed, ended at its lifetime. */
    *named = c->suspendable;
    const cl_option options[] = { { "suspendable", CL_OPTION_BOOL, 0, named },
                                  { NULL, 0, 0, NULL } };
    if (cl_backend_options(rq, TL_BACKEND, options, error) < 0)
        goto fail;
    if (*named && ctx && ctx->create_token)
        json_object_object_add(b, "name", json_object_new_string(ctx->create_token));
    return b;
fail:
    json_object_put(b);
    return NULL;
}

static int tl_upload(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                     int fd, const char *shown, const char *op, sbx_error **error);

/* The create's environment as TL_ENV_FILE (mode 0600), which every
 * command sources (Tensorlake takes environment values per process only,
 * and the session state holds none). The values travel in the upload's
 * body, never in a command line. */
static int tl_write_env(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                        const char *const *env, const char *op, sbx_error **error)
{
    char *text = cl_env_file(env);
    if (!text) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "tensorlake: an environment key is not "
                "a shell name");
        return -1;
    }
    int fds[2] = { -1, -1 };
    int rc = -1;
    if (pipe2(fds, O_CLOEXEC) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "pipe: %s", strerror(errno));
        free(text);
        return -1;
    }
    /* The file is small (the create's env): it fits the pipe, else fails. */
    size_t n = strlen(text);
    ssize_t w = n < 65536 ? write(fds[1], text, n) : -1;
    close(fds[1]);
    free(text);
    if (w != (ssize_t)n) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "tensorlake: the create's environment "
                "is larger than 64 KiB");
    } else if (tl_upload(sb, ctx, TL_ENV_FILE, fds[0], TL_ENV_FILE, op, error) == 0) {
        int code = 0;
        rc = tl_run_short(sb, ctx, "chmod 600 " TL_ENV_FILE, &code, op, error);
        if (rc == 0 && code != 0) {
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "tensorlake: chmod of %s exited %d",
                    TL_ENV_FILE, code);
            rc = -1;
        }
    }
    close(fds[0]);
    return rc;
}

/* Exposed ports: the provider keeps them (SandboxInfo "exposed_ports",
 * set at create and by PATCH) and routes each to
 * https://PORT-ID.sandbox.tensorlake.ai, which asks for the same Bearer
 * API key unless the sandbox allows unauthenticated access. */

/** Takes "exposed_ports" of a SandboxInfo @j into @sb: 0, or -1 on no
 *  memory. */
static int tl_take_ports(struct sbx_plugin_sandbox *sb, json_object *j)
{
    json_object *a;
    if (!j || !json_object_object_get_ex(j, "exposed_ports", &a)
        || !json_object_is_type(a, json_type_array))
        return 0;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        int64_t v = json_object_get_int64(json_object_array_get_idx(a, i));
        if (v >= 1 && v <= 65535 && cl_ports_add(&sb->s, (unsigned)v) < 0)
            return -1;
    }
    return 0;
}

/** PATCH /sandboxes/{id} {"exposed_ports": the set with @port added
 *  (@add) or removed}; on success the set changed here too. */
static int tl_ports_change(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           unsigned port, int add, const char *op, sbx_error **error)
{
    if (tl_check(sb, op, error) < 0)
        return -1;
    if (cl_ports_has(&sb->s, port) == add)
        return 0;
    json_object *b = json_object_new_object(), *ep = json_object_new_array();
    json_object_object_add(b, "exposed_ports", ep);
    pthread_mutex_lock(&sb->s.gone.lock);
    int placed = !add;
    for (size_t i = 0; i < sb->s.n_ports; i++) {
        if (!placed && sb->s.ports[i] > port) {
            json_object_array_add(ep, json_object_new_int((int)port));
            placed = 1;
        }
        if (add || sb->s.ports[i] != port)
            json_object_array_add(ep, json_object_new_int(sb->s.ports[i]));
    }
    if (!placed)
        json_object_array_add(ep, json_object_new_int((int)port));
    pthread_mutex_unlock(&sb->s.gone.lock);
    char *url = cl_item_url(sb->s.c->cl.api, "sandboxes", sb->s.id, "");
    cl_resp r = { 0 };
    int rc = -1;
    if (!url)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cl_request_json(sb->s.c->cl.http, ctx, "PATCH", url, b, CL_SAFE, &r, op,
                             "change the exposed ports", error) == 0
             && cl_sandbox_answer(&sb->s, sb->s.c->cl.http, &r, TL_BACKEND, op,
                                  "change the exposed ports", error) == 0) {
        rc = 0;
        if (!add) {
            cl_ports_remove(&sb->s, port);
        } else if (cl_ports_add(&sb->s, port) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            rc = -1;
        }
    }
    cl_resp_clear(&r);
    free(url);
    json_object_put(b);
    return rc;
}

static int tl_expose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                          sbx_error **error)
{
    return tl_ports_change(sb, ctx, port, 1, "expose_port", error);
}

static int tl_unexpose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                            sbx_error **error)
{
    return tl_ports_change(sb, ctx, port, 0, "unexpose_port", error);
}

/* https://PORT-ID.HOST: HOST from the sandbox_url when it is ID.HOST (the
 * provider's own), else from TENSORLAKE_SANDBOX_PROXY_URL (default
 * https://sandbox.tensorlake.ai). */
static char *tl_resolve_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                             sbx_error **error)
{
    const char *op = "resolve_port";
    (void)ctx;
    if (tl_check(sb, op, error) < 0)
        return NULL;
    if (!cl_ports_has(&sb->s, port)) {
        cl_port_not_exposed(error, &sb->s, TL_BACKEND, op, port);
        return NULL;
    }
    const char *base = sb->s.plane;
    const char *host = strstr(base, "://");
    size_t idl = strlen(sb->s.id);
    char *url = NULL;
    if (host && strncmp(host + 3, sb->s.id, idl) == 0 && host[3 + idl] == '.') {
        url = cl_printf("https://%u-%s", port, host + 3);
    } else {
        const char *proxy = cl_setting(NULL, NULL, "TENSORLAKE_SANDBOX_PROXY_URL",
                                       "https://sandbox.tensorlake.ai");
        const char *ph = strstr(proxy, "://");
        ph = ph ? ph + 3 : proxy;
        size_t hl = strcspn(ph, "/");
        url = cl_printf("https://%u-%s.%.*s", port, sb->s.id, (int)hl, ph);
    }
    char *out = cl_host_strdup(url, op, error);
    free(url);
    return out;
}

static char *tl_list_ports(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    if (tl_check(sb, "list_ports", error) < 0)
        return NULL;
    return cl_ports_list(&sb->s, "list_ports", error);
}

static int tl_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    int named = 0;
    json_object *body = tl_create_body(c, ctx, rq, &named, error), *j = NULL;
    if (!body)
        return -1;
    char *url = cl_printf("%s/sandboxes", c->cl.api);
    cl_resp r = { 0 };
    int rc = -1;
    struct sbx_plugin_sandbox *sb = NULL;
    /* The token names the sandbox: a create whose outcome is unknown (no
     * answer in time, or a 5xx after it may have acted) is sent once, and
     * the sandbox it may have made is looked for by that name and deleted
     * (CASE-20). */
    const char *token = named && ctx ? ctx->create_token : NULL;
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (cl_request_json(c->cl.http, ctx, "POST", url, body, CL_UNSAFE, &r, op,
                        "create the sandbox", NULL) < 0) {
        cl_create_unanswered(c->cl.reaper, ctx, token, op, error);
        goto out;
    }
    if (r.maybe_acted && token)
        cl_reap_lost(c->cl.reaper, token);
    if (r.status / 100 != 2) {
        cl_fail_status(c->cl.http, error, cl_create_refused_code(r.status), &r, op,
                       "create the sandbox");
        goto out;
    }
    j = cl_resp_json(&r, op, "create the sandbox", error);
    const char *id = j ? cl_json_str(j, "sandbox_id") : NULL;
    const char *su = j ? cl_json_str(j, "sandbox_url") : NULL;
    if (!id || !su) {
        if (j)
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op,
                    "tensorlake create answered without a sandbox_id or a sandbox_url");
        if (id)
            tl_delete(c, NULL, id, op, NULL);
        goto out;
    }
    if ((sb = cl_sandbox_new_at(sizeof(*sb), c, id, NULL, su)))
        sb->named = named;
    if (!sb || cl_ports_from_request(&sb->s, rq, op, error) < 0 || tl_take_ports(sb, j) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        sb = cl_create_undo(sb, c, tl_delete, id, 0, NULL, op, error);
        goto out;
    }
    if (tl_wake(sb, ctx, op, error) < 0) {
        sb = cl_create_undo(sb, c, tl_delete, id, 1, NULL, op, error);
        goto out;
    }
    if ((rq->env && rq->env[0] && tl_write_env(sb, ctx, rq->env, op, error) < 0)
        || cl_create_workdir(sb, &sb->s.workdir, tl_run_short, ctx, TL_BACKEND, rq->workdir, op,
                             error) < 0) {
        sb = cl_create_undo(sb, c, tl_delete, id, 0, NULL, op, error);
        goto out;
    }
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(body);
    json_object_put(j);
    free(url);
    cl_resp_clear(&r);
    return rc;
}

CL_DESTROY(tl_destroy, tl_delete)

CL_ITEM_IS_ALIVE(tl_is_alive, "sandboxes", "status", tl_over)

/* {"version":1,"sandbox_id":ID,"sandbox_url":URL,"named":B[,"workdir":W]}:
 * no credential, no env value (the create's environment is a file in the
 * sandbox). */
static char *tl_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, TL_BACKEND, TL_STATE_VERSION, "sandbox_id", error);
    if (!j)
        return NULL;
    json_object_object_add(j, "sandbox_url", json_object_new_string(sb->s.plane));
    json_object_object_add(j, "named", json_object_new_boolean(sb->named));
    return cl_state_end(j, error);
}

static int tl_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    static const cl_resume_spec spec = { TL_BACKEND, TL_STATE_VERSION, "sandbox_id", tl_get,
                                         NULL, NULL, NULL };
    json_object *j, *data;
    struct sbx_plugin_sandbox *sb = cl_resume_new(client, ctx, state_json, &spec, sizeof(*sb),
                                                  &j, &data, error);
    if (!sb)
        return -1;
    const char *su = cl_json_str(j, "sandbox_url");
    if (!su)
        su = cl_json_str(data, "sandbox_url");
    sb->named = cl_json_bool(data, "named");
    int rc = cl_sandbox_set_plane(&sb->s, su) == 0 && tl_take_ports(sb, j) == 0 ? 0 : -1;
    if (rc < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "resume", "out of memory");
    else
        rc = tl_wake(sb, ctx, "resume", error);
    return cl_resume_end(rc, sb, sandbox, j, data, NULL);
}

static char *tl_snapshot(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "snapshot";
    if (tl_check(sb, op, error) < 0)
        return NULL;
    json_object *b = json_object_new_object(), *j = NULL;
    json_object_object_add(b, "snapshot_type", json_object_new_string("filesystem"));
    char *url = NULL, *snap = NULL;
    char *out = NULL;
    cl_resp r = { 0 };
    if (cl_item_request(sb->s.c->cl.http, ctx, "POST", sb->s.c->cl.api, "sandboxes", sb->s.id,
                        "/snapshot", b, CL_UNSAFE, &r, op, "snapshot the sandbox", error) < 0)
        goto done;
    if (cl_sandbox_answer(&sb->s, sb->s.c->cl.http, &r, TL_BACKEND, op, "snapshot the sandbox",
                          error) < 0)
        goto done;
    j = cl_resp_json(&r, op, "snapshot the sandbox", error);
    const char *sid = j ? cl_json_str(j, "snapshot_id") : NULL;
    if (!sid) {
        if (j)
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "tensorlake snapshot gave no id");
        goto done;
    }
    snap = strdup(sid);
    free(url);
    url = snap ? cl_printf("%s/snapshots/%s", sb->s.c->cl.api, snap) : NULL;
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto done;
    }
    cl_bound bd = cl_bound_make(ctx, TL_WAIT_S);
    for (double pause = 0.05; url; pause = pause < 0.5 ? pause * 2 : pause) {
        json_object_put(j);
        j = NULL;
        cl_resp_clear(&r);
        memset(&r, 0, sizeof r);
        if (cl_request_json(sb->s.c->cl.http, ctx, "GET", url, NULL, CL_SAFE, &r, op,
                            "get the snapshot", error) < 0)
            goto done;
        if (r.status != 200) {
            cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r, op, "get the snapshot");
            goto done;
        }
        if (!(j = cl_resp_json(&r, op, "get the snapshot", error)))
            goto done;
        const char *s = tl_status(j);
        if (strcmp(s, "completed") == 0) {
            out = cl_host_strdup(snap, op, error);
            break;
        }
        if (strcmp(s, "failed") == 0 || cl_bound_left(&bd) == 0) {
            cl_context(cl_fail(error, s[0] == 'f' ? SBX_ERROR_EXECUTION_FAILED : SBX_ERROR_TIMEOUT,
                               op, "tensorlake snapshot %s is %s", snap, s), "state", s);
            break;
        }
        if (cl_sleep(pause, bd.cancel_fd)) {
            cl_fail(error, SBX_ERROR_TIMEOUT, op, "cancelled while waiting for snapshot %s", snap);
            break;
        }
    }
done:
    json_object_put(b);
    json_object_put(j);
    free(url);
    free(snap);
    cl_resp_clear(&r);
    return out;
}

typedef struct tl_suspending {
    struct sbx_plugin_sandbox *sb;
    const sbx_call_ctx *ctx;
    char state[32];
} tl_suspending;

static int tl_suspend_look(void *ud, const char **state, sbx_error **error)
{
    tl_suspending *w = ud;
    long st;
    json_object *j = tl_get(w->sb->s.c, w->ctx, w->sb->s.id, &st, "stop", error);
    if (!j) {
        if (st == 404) {
            cl_gone_mark(&w->sb->s.gone, error, "stop", TL_BACKEND, w->sb->s.id);
        }
        return -1;
    }
    snprintf(w->state, sizeof w->state, "%s", tl_status(j));
    json_object_put(j);
    *state = w->state;
    return strcmp(w->state, "suspended") == 0;
}

/* stop: POST /sandboxes/{id}/suspend (202 started, 200 already), then
 * polled until "suspended". Only a named sandbox can be suspended
 * (Tensorlake answers 400 for an ephemeral one): an unnamed one is
 * feature_not_supported naming the option that makes it named. */
static int tl_stop(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "stop";
    if (tl_check(sb, op, error) < 0)
        return -1;
    if (!sb->named) {
        cl_context(cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                           "tensorlake sandbox %s cannot be suspended: it is unnamed (create it "
                           "with the backend option or client option \"suspendable\": true)",
                           sb->s.id), "option", "suspendable");
        return -1;
    }
    cl_resp r = { 0 };
    int rc = cl_item_request(sb->s.c->cl.http, ctx, "POST", sb->s.c->cl.api, "sandboxes", sb->s.id,
                             "/suspend", NULL, CL_SAFE, &r, op, "suspend the sandbox", error);
    if (rc == 0)
        rc = cl_sandbox_answer(&sb->s, sb->s.c->cl.http, &r, TL_BACKEND, op, "suspend the sandbox",
                               error);
    cl_resp_clear(&r);
    if (rc < 0)
        return -1;
    tl_suspending w = { sb, ctx, "" };
    char what[160];
    snprintf(what, sizeof what, "tensorlake sandbox %s reaching status suspended", sb->s.id);
    return cl_wait_until(ctx, TL_WAIT_S, tl_suspend_look, &w, op, what, error);
}

/* start: resumes a suspended sandbox and waits for "running". */
static int tl_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (tl_check(sb, "start", error) < 0)
        return -1;
    return tl_wake(sb, ctx, "start", error);
}

/* Calls @fn for each sandbox of the list that is not terminated and is
 * named by a create token ("sbx-..."), page by page, until @fn returns
 * non-zero: 0, or -1 with *@error set. */
typedef struct tl_listing {
    int (*fn)(void *ud, const char *id, const char *name);
    void *ud;
} tl_listing;

/* One listed sandbox: its id and name to the listing's callback when it
 * is named by a create token and not terminated. */
static int tl_listed(void *ud, json_object *it)
{
    tl_listing *l = ud;
    const char *id = cl_json_str(it, "id");
    const char *name = cl_json_str(it, "name");
    if (!id)
        id = cl_json_str(it, "sandbox_id");
    if (!id || !name || strncmp(name, "sbx-", 4) != 0 || strcmp(tl_status(it), "terminated") == 0)
        return 0;
    return l->fn(l->ud, id, name);
}

static int tl_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                   int (*fn)(void *ud, const char *id, const char *name), void *ud,
                   const char *op, sbx_error **error)
{
    char *url = cl_printf("%s/sandboxes?limit=100", c->cl.api);
    cl_pages pg = { url, "cursor", NULL, "next_cursor", "sandboxes", "list sandboxes", 0 };
    tl_listing l = { fn, ud };
    int rc = cl_list_pages(c->cl.http, ctx, &pg, tl_listed, &l, op, error);
    free(url);
    return rc;
}

static int tl_owned_one(void *ud, const char *id, const char *name)
{
    cl_owned *o = ud;
    sbx_plugin_owned_info info = { sizeof(info), id, name, 0, 0 };
    return o->fn(&info, o->ud);
}

/* The sandboxes this backend made: the ones named by a create token. */
static int tl_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_owned";
    if (!client->suspendable) {
        cl_context(cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                           "backend \"%s\" cannot list the sandboxes this library made",
                           TL_BACKEND), "option", "suspendable");
        return -1;
    }
    cl_owned o = { .fn = fn, .ud = ud };
    return tl_list(client, ctx, tl_owned_one, &o, op, error);
}

static int tl_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                            sbx_error **error)
{
    if (!client->suspendable) {
        cl_context(cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, "destroy_by_id",
                           "backend \"%s\" cannot destroy sandboxes by id", TL_BACKEND),
                   "option", "suspendable");
        return -1;
    }
    return tl_delete(client, ctx, id, "destroy_by_id", error);
}

/* ------------------------------------------------------------------------ */
/* Files: raw bytes both ways (CASE-17)                                      */
/* ------------------------------------------------------------------------ */

/* The files route for @path; a relative path is taken from the sandbox's
 * working directory (its workdir, else /), as a command would take it. */
#define tl_files_path_in(sb, route, path)                                                   \
    cl_path_query("/api/v1/files" route "?path=", (sb)->s.workdir ? (sb)->s.workdir : "/", \
                  (path))
/* The files route for @path, absolute. */
#define tl_files_path(route, path) cl_path_query("/api/v1/files" route "?path=", NULL, (path))

static int tl_file_fail(struct sbx_plugin_sandbox *sb, const cl_resp *r, const char *op,
                        const char *path, const char *what, sbx_error **error)
{
    if (tl_is_gone(sb))
        return -1;
    sbx_error *err = error ? *error : NULL;
    if (r->status == 404)
        err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such %s in the sandbox: %s", what, path);
    else if (r->status == 400 || r->status == 403)
        err = cl_fail_status(sb->s.c->cl.http, error, SBX_ERROR_INVALID_ARGUMENT, r, op, what);
    if (err)
        cl_context(err, "path", path);
    return -1;
}

static int tl_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    const char *op = "read_file";
    char *q = tl_files_path_in(sb, "", path);
    cl_req rq = { .method = "GET", .sink = cl_fd_sink, .sink_ud = &fd, .idempotent = CL_SAFE,
                  .what = "download the file" };
    cl_resp r = { 0 };
    int rc = q ? tl_host(sb, ctx, &rq, q, &r, 1, op, error) : -1;
    if (rc < 0 && r.status)
        tl_file_fail(sb, &r, op, path, "file", error);
    free(q);
    cl_resp_clear(&r);
    return rc;
}

static int tl_upload(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                     int fd, const char *shown, const char *op, sbx_error **error)
{
    char *q = tl_files_path_in(sb, "", path);
    cl_req rq = { .method = "PUT", .content_type = "application/octet-stream",
                  .source = cl_fd_source, .source_ud = &fd, .source_len = -1,
                  .idempotent = CL_SAFE, .what = "upload the file" };
    cl_resp r = { 0 };
    int rc = q ? tl_host(sb, ctx, &rq, q, &r, 1, op, error) : -1;
    if (rc < 0 && r.status)
        tl_file_fail(sb, &r, op, shown, "directory for file", error);
    free(q);
    cl_resp_clear(&r);
    return rc;
}

static int tl_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                         uint32_t mode, sbx_error **error)
{
    const char *op = "write_file";
    /* The upload carries any path, the chmod after it (a command) not. */
    if (cl_json_text_check(NULL, path, op, error) < 0)
        return -1;
    if (tl_upload(sb, ctx, path, fd, path, op, error) < 0)
        return -1;
    /* The mode is set on the file the upload wrote: a relative @path is
     * under the workdir (else /), as the files routes take it, whatever
     * directory chmod's command starts in. */
    char *abs = cl_path_in(sb->s.workdir ? sb->s.workdir : "/", path);
    int rc = abs ? cl_set_mode(sb, tl_run_short, ctx, abs, path, mode, op, error) : -1;
    if (!abs)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    free(abs);
    return rc;
}

static int tl_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    char *q = tl_files_path_in(sb, "/list", path);
    cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "list the directory" };
    cl_resp r = { 0 };
    int rc = q ? tl_host(sb, ctx, &rq, q, &r, 1, op, error) : -1;
    free(q);
    if (rc < 0) {
        if (r.status)
            tl_file_fail(sb, &r, op, path, "directory", error);
        cl_resp_clear(&r);
        return -1;
    }
    json_object *j = cl_resp_json(&r, op, "list the directory", error);
    cl_resp_clear(&r);
    if (!j)
        return -1;
    cl_file_infos_json(cl_json_path(j, "entries", NULL), "is_dir", 0, NULL, fn, ud);
    json_object_put(j);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Exec: POST /api/v1/processes/run, SSE                                     */
/* ------------------------------------------------------------------------ */

typedef struct tl_stream {
    tl_proc *p;
    cl_sse sse;
    int have_exit;
    int exit_code;
    const char *marker;     /* a command's report starts with it (NULL: none) */
    char *report;           /* the report's fields, after the marker */
    int chunks;             /* the output comes as chunks (tl_stream_script) */
    int drop;               /* the output is dropped (the plugin's own commands) */
    cl_live live[3];        /* with chunks: what went to stdout [1] and stderr [2] */
} tl_stream;

/* A chunk line of tl_stream_script() on @fd (1: stdout, 2: stderr): its
 * tag ("O" on stdout, "E" on stderr) and the bytes in base64, decoded and
 * sent to the host. 0, or -1 with the failure recorded. */
static int tl_chunk(tl_stream *s, int fd, const char *line)
{
    if (line[0] != (fd == 1 ? 'O' : 'E')) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "tensorlake: a line of the command's %s "
                "that is not an output chunk: %.40s", fd == 1 ? "stdout" : "stderr", line);
        return -1;
    }
    cl_buf b = { 0 };
    size_t n = strlen(line + 1);
    if (n == 0 || cl_base64_decode(line + 1, n, &b) < 0) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "tensorlake: an output chunk of the "
                "command's %s that is not base64: %.40s", fd == 1 ? "stdout" : "stderr", line);
        cl_buf_clear(&b);
        return -1;
    }
    int rc = cl_live_emit(&s->live[fd], &s->p->sp.base, fd, b.data, b.len);
    cl_buf_clear(&b);
    return rc;
}

static int tl_on_event(void *ud, const char *event, const char *data, size_t n, const char *id)
{
    tl_stream *s = ud;
    (void)event;
    (void)id;
    json_object *j = json_tokener_parse(data);
    if (!j) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "tensorlake: an event that is not JSON: "
                "%.80s", data);
        (void)n;
        return -1;
    }
    int rc = 0;
    json_object *v;
    int64_t x;
    if (json_object_object_get_ex(j, "line", &v)) {
        const char *st = cl_json_str(j, "stream");
        const char *line = json_object_get_string(v);
        int fd = st && strcmp(st, "stderr") == 0 ? 2 : 1;
        size_t ml = s->marker ? strlen(s->marker) : 0;
        if (s->drop) {
            /* Only the status of the plugin's own commands counts: what
             * they print (a kill scan's word on a process that ended
             * meanwhile) is not the caller's. */
        } else if (fd == 1 && ml && !s->report && strncmp(line, s->marker, ml) == 0) {
            if (!(s->report = strdup(line + ml)))
                rc = -1;
        } else if (s->chunks) {
            rc = tl_chunk(s, fd, line);
        } else if (cl_proc_output(&s->p->sp.base, fd, line, strlen(line)) < 0
                   || cl_proc_output(&s->p->sp.base, fd, "\n", 1) < 0) {
            rc = -1;
        }
    } else if (json_object_object_get_ex(j, "exit_code", NULL)
               || json_object_object_get_ex(j, "signal", NULL)
               || json_object_object_get_ex(j, "oom_killed", NULL)) {
        /* The end: {"exit_code"?, "signal"?, "oom_killed"}. */
        s->have_exit = 1;
        s->exit_code = 137;
        if (cl_json_int(j, "exit_code", &x) == 1)
            s->exit_code = (int)(x & 0xff);
        else if (cl_json_int(j, "signal", &x) == 1)
            s->exit_code = (int)((128 + x) & 0xff);
        if (cl_json_bool(j, "oom_killed"))
            s->p->sp.oom_killed = 1;
        rc = 1;
    } else if (cl_json_int(j, "pid", &x) == 1) {
        pthread_mutex_lock(&s->p->pid_lock);
        s->p->pid = x;
        pthread_mutex_unlock(&s->p->pid_lock);
    }
    json_object_put(j);
    return rc;
}

/* The run request: "bash -c @script" with the per-call @env, the keys of
 * @env in CL_CALL_KEYS (the create's file leaves them alone) and, when
 * @mark is given, CL_EXEC_MARK=@mark on every process of the command. */
static json_object *tl_run_body(const char *script, const char *const *env, const char *mark)
{
    json_object *b = json_object_new_object(), *args = json_object_new_array();
    json_object *e = cl_env_object(env);
    json_object_object_add(b, "command", json_object_new_string("bash"));
    json_object_array_add(args, json_object_new_string("-c"));
    json_object_array_add(args, json_object_new_string(script));
    json_object_object_add(b, "args", args);
    char *keys = cl_call_keys(env);
    json_object_object_add(e, CL_CALL_KEYS, json_object_new_string(keys ? keys : ""));
    free(keys);
    if (mark)
        json_object_object_add(e, CL_EXEC_MARK, json_object_new_string(mark));
    json_object_object_add(b, "env", e);
    return b;
}

static int tl_run_short(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    tl_proc p = { 0 };
    p.sp.sb = sb;
    pthread_mutex_init(&p.pid_lock, NULL);
    p.sp.base.stdout_fd = p.sp.base.stderr_fd = -1;
    tl_stream s = { .p = &p, .drop = 1 };
    cl_sse_init(&s.sse, tl_on_event, &s);
    json_object *b = tl_run_body(cmd, NULL, NULL);
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    static const char *const h[] = { "Accept: text/event-stream", NULL };
    cl_req rq = { .method = "POST", .headers = h, .body = bs, .body_len = strlen(bs),
                  .sink = cl_sse_sink, .sink_ud = &s.sse, .idempotent = CL_UNSAFE,
                  .what = "run a command" };
    cl_resp r = { 0 };
    int rc = tl_host(sb, ctx, &rq, "/api/v1/processes/run", &r, 0, op, error);
    if (rc == 0 && cl_sse_end(&s.sse, op, error) < 0)
        rc = -1;
    if (rc == 0)
        *code = s.exit_code;
    cl_sse_clear(&s.sse);
    json_object_put(b);
    cl_resp_clear(&r);
    pthread_mutex_destroy(&p.pid_lock);
    return rc;
}

typedef struct tl_out {
    tl_proc *p;
    int fd;
} tl_out;

static int tl_out_sink(void *ud, const char *data, size_t n)
{
    tl_out *o = ud;
    return cl_proc_output(&o->p->sp.base, o->fd, data, n);
}

/* Removes file @path of the sandbox (DELETE /api/v1/files); what it
 * answers is not looked at (a file left in /tmp is no failure). */
static void tl_remove(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path)
{
    char *q = tl_files_path("", path);
    cl_req rd = { .method = "DELETE", .idempotent = CL_SAFE, .what = "remove the output" };
    cl_resp r = { 0 };
    if (q)
        tl_host(sb, ctx, &rd, q, &r, 1, "exec", NULL);
    cl_resp_clear(&r);
    free(q);
}

/* Downloads the command's output file for @fd (1 or 2), in /tmp, as raw
 * bytes into the output, then removes it: 0, or -1 with the failure
 * recorded (cl_proc_fail_last). A missing file is no output unless @must
 * (the report said it is there): then it is an error. With @live (what
 * went to the host as chunks already), only the rest of the file is sent,
 * its start checked against what went. */
static int tl_exec_fetch(tl_proc *p, const sbx_call_ctx *ctx, int fd, int must,
                         const cl_live *live)
{
    struct sbx_plugin_sandbox *sb = p->sp.sb;
    char path[64];
    snprintf(path, sizeof path, "/tmp/.%s.%s", p->sp.tag, fd == 1 ? "out" : "err");
    char *q = tl_files_path("", path);
    if (!q) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, "exec", "out of memory");
        return -1;
    }
    tl_out o = { p, fd };
    cl_live_rest lr;
    if (live)
        cl_live_rest_init(&lr, &p->sp.base, fd, live);
    cl_req rg = { .method = "GET", .sink = live ? cl_live_rest_sink : tl_out_sink,
                  .sink_ud = live ? (void *)&lr : (void *)&o, .idempotent = CL_SAFE,
                  .what = "read the command's output" };
    cl_resp r = { 0 };
    int rc = tl_host(sb, ctx, &rg, q, &r, 1, "exec", NULL);
    if (live && (rc == 0 || lr.differs))
        rc = cl_live_rest_end(&lr, TL_BACKEND, "exec") < 0 ? -1 : rc;
    if (rc == 0)
        tl_remove(sb, ctx, path);
    else if (r.status == 404 && !tl_is_gone(sb) && !must)
        rc = 0;
    else if (r.status == 404 && !tl_is_gone(sb))
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "tensorlake: the command's %s file %s is "
                "missing", fd == 1 ? "stdout" : "stderr", path);
    cl_resp_clear(&r);
    free(q);
    return rc;
}

/* One field of the command's report (tl_exec_script) into the output for
 * @fd: "p" and the bytes percent-encoded, "b" and base64, or "-" (the file
 * is in /tmp, to be downloaded). 0, or -1 with the failure recorded. */
static int tl_exec_field(tl_proc *p, const sbx_call_ctx *ctx, int fd, const char *f, size_t n)
{
    cl_buf b = { 0 };
    int d = cl_report_field_decode(f, n, &b);
    if (d == 1)
        return tl_exec_fetch(p, ctx, fd, 1, NULL);
    if (d < 0) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "tensorlake: the command's report of its %s "
                "is not percent-encoded or base64: %.40s", fd == 1 ? "stdout" : "stderr", f);
        cl_buf_clear(&b);
        return -1;
    }
    int rc = b.len ? cl_proc_output(&p->sp.base, fd, b.data, b.len) : 0;
    cl_buf_clear(&b);
    return rc < 0 ? -1 : 0;
}

/* The command's report (tl_exec_script) after its marker, "CODE LEN
 * OUTERR" (OUT: LEN characters), into the output and *@code (the
 * command's status). 0, or -1 with the failure recorded. */
static int tl_exec_report(tl_proc *p, const sbx_call_ctx *ctx, const char *r, int *code)
{
    char *end;
    errno = 0;
    long c = strtol(r, &end, 10);
    int ok = end != r && *end == ' ' && errno == 0 && c >= 0 && c <= 255;
    unsigned long len = 0;
    const char *f = end + 1;
    if (ok) {
        errno = 0;
        len = strtoul(f, &end, 10);
        ok = end != f && *end == ' ' && errno == 0 && len >= 1 && len < strlen(end + 1);
        f = end + 1;
    }
    if (!ok) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "tensorlake: the command's report is cut: "
                "%.80s", r);
        return -1;
    }
    if (tl_exec_field(p, ctx, 1, f, len) < 0
        || tl_exec_field(p, ctx, 2, f + len, strlen(f + len)) < 0)
        return -1;
    *code = (int)c;
    return 0;
}

/*
 * The script of a command @tag (see the header), stdin from @in (a file
 * uploaded for it, removed with its outputs, or /dev/null): the create's
 * environment (@src), then the caller's script, $1, run by a bash of its
 * own (so that $$ is the command's shell, as under bash -c, a signal sent
 * to it ends the command, and it sees none of the wrapper's variables,
 * functions or traps) with its stdout and stderr on two files, in /dev/shm
 * (memory: creating files there costs less than on the disk) when it is a
 * writable directory, else in /tmp: the run stream's output is lines of
 * text, so the bytes go by the files.
 *
 * Then the report, one line on stdout: TL_REPORT_MARK, the tag, a space,
 * the command's status, a space, the length of stdout's field, a space,
 * stdout's field and stderr's field. A field is "p" and the bytes
 * percent-encoded (every byte outside 0x20..0x7e, and "%", as %XX) when
 * there are at most CL_REPORT_SHELL_MAX of them with at most CL_REPORT_SHELL_ODD
 * NULs and distinct other bytes to encode: the shell reads and encodes
 * them itself (one substitution per distinct byte; an empty file is not
 * read), no program started; else "b" and base64 when at most
 * TL_INLINE_MAX (stat and base64 started; the base's cl_buf_report_encoder());
 * else "-": the file is moved to
 * /tmp, to be downloaded and removed by the plugin.
 *
 * The command's files (and its stdin file) go once the report is printed:
 * when its status is under 128 the wrapper's last act is "exec rm" on them
 * (in the C locale, which rm sets up fastest), the one program it starts
 * for a small output, in place of its own exit; the run's exit status is
 * then rm's, the report's is the command's. Else (a signal's status, as
 * 137 for a SIGKILL, which the provider's OOM flag goes by) rm runs and
 * the wrapper exits with the command's status.
 *
 * The wrapper traps the signals a kill sends (the command's bash has them
 * at their defaults), so that it reports what a command killed by
 * exec_kill wrote, and its own stderr is /dev/null (so no "Terminated"
 * line); a SIGKILL ends it too, and then no report comes: the files stay,
 * and the plugin downloads and removes them (tl_exec_run).
 *
 * The wrapper assigns no variable before the command's bash starts (the
 * files' stem is its $2): the caller's environment is the wrapper's, so a
 * key named like one of its variables (t, c, ...) would otherwise reach
 * the command with the wrapper's value.
 */
static char *tl_exec_script(const char *src, const char *tag, const char *in)
{
    const char *rmin = strcmp(in, "/dev/null") == 0 ? "" : in;
    cl_buf b = { 0 };
    int bad = cl_buf_printf(
        &b,
        "%1$s"
        "exec 2>/dev/null; trap : HUP INT QUIT TERM USR1 USR2 ALRM; set -- \"$1\" /tmp/.%2$s\n"
        "[ -d /dev/shm ] && [ -w /dev/shm ] && set -- \"$1\" /dev/shm/.%2$s\n"
        "bash -c \"$1\" <%3$s >$2.out 2>$2.err\n"
        "c=$? t=$2 LC_ALL=C f= k= m=\n", src, tag, in) < 0;
    bad = bad || cl_buf_report_encoder(&b, TL_INLINE_MAX) < 0;
    bad = bad || cl_buf_printf(
        &b,
        "e $t.out; o=$f; e $t.err\n"
        "printf '%%s %%d %%d %%s%%s\\n' %1$s%2$s $c ${#o} \"$o\" \"$f\"\n"
        "if [ -n \"$m\" ]; then rm -f $k %3$s; [ $t = /tmp/.%2$s ] || mv -f $m /tmp/; exit $c; fi\n"
        "[ $c -lt 128 ] && LC_ALL=C exec rm -f $k %3$s\n"
        "rm -f $k %3$s; exit $c\n",
        TL_REPORT_MARK, tag, rmin) < 0;
    return cl_buf_take(&b, bad);
}

/*
 * The script of a command @tag whose output is read while it runs (no
 * SBX_PLUGIN_EXEC_OUTPUT_AT_END: an output callback, the caller's
 * descriptors, a process handle): as tl_exec_script's, the create's
 * environment (@src), then the caller's script, $1, run by a bash of its
 * own with stdin from @in and its stdout and stderr on two files (in
 * /dev/shm when it is a writable directory, else in /tmp). The command's
 * bash runs in the background of the wrapper, from a subshell that puts
 * SIGINT and SIGQUIT back to their defaults (a background job of a shell
 * without job control ignores them) and execs it, so $! is the command's
 * shell.
 *
 * A tail (GNU coreutils, --pid: it reads to the end of its file once the
 * command's bash has ended, polling for that every 0.01 s) follows each
 * file into a subshell of the wrapper that cuts what arrives into chunks,
 * one read of the pipe each (dd: at most 64 KiB), and prints each chunk
 * as a line, its tag and the bytes in base64 (base64 -w0): "O..." on the
 * run's stdout for the command's stdout, "E..." on the run's stderr for
 * its stderr. The run's output is lines of text; these lines are text,
 * and exact bytes once decoded (CASE-07), each stream with one writer, so
 * lines never mix. The programs that carry the output (tail, dd, base64)
 * have the mark <tag>-io, not the command's, and the chunkers ignore the
 * catchable signals: a signal exec_kill sends reaches the command's
 * processes and the wrapper (which traps it), and the output the command
 * wrote before it still streams. A SIGKILL ends the chunkers too.
 *
 * Once the command's bash has ended and both chunkers have (the wrapper
 * waits again when a trapped signal cut a wait short), the report: one
 * line on stdout, TL_REPORT_MARK, the tag, a space and the command's
 * status; then the files (and the stdin file) are removed, as in
 * tl_exec_script, and the wrapper exits with that status when it is 128
 * or more (a signal's: the provider's OOM flag goes by it). A wrapper
 * ended by SIGKILL reports nothing: what the chunks did not carry is then
 * downloaded from the files (tl_exec_run). What the command leaves in the
 * background writes to the files only, so it holds neither the stream nor
 * the exec. As in tl_exec_script, no variable is assigned before the
 * command's bash is forked (a signal in that moment sets i, the one
 * exception), so the caller's keys reach it unchanged.
 */
static char *tl_stream_script(const char *src, const char *tag, const char *in)
{
    const char *rmin = strcmp(in, "/dev/null") == 0 ? "" : in;
    return cl_printf(
        "exec 4>&2 2>/dev/null\n"
        "%1$s"
        "trap i=1 HUP INT QUIT TERM USR1 USR2 ALRM; set -- \"$1\" /tmp/.%2$s\n"
        "[ -d /dev/shm ] && [ -w /dev/shm ] && set -- \"$1\" /dev/shm/.%2$s\n"
        ": >$2.out; : >$2.err\n"
        "(trap - INT QUIT; exec bash -c \"$1\" <%3$s >$2.out 2>$2.err 4>&-) & c=$! t=$2 i=0\n"
        "export " CL_EXEC_MARK "=%2$s-io\n"
        "o() { trap '' HUP INT QUIT TERM USR1 USR2 ALRM; while x=$(dd bs=65536 count=1 "
        "status=none | base64 -w0) && [ -n \"$x\" ]; do printf \"$1%%s\\n\" \"$x\"; done; }\n"
        "tail -c +1 -s 0.01 --pid=$c -f $t.out 4>&- | o O 4>&- &\n"
        "tail -c +1 -s 0.01 --pid=$c -f $t.err 4>&- | o E >&4 4>&- &\n"
        "wait $c; s=$?; while [ $i = 1 ]; do i=0; wait $c; s=$?; done\n"
        "i=1; while [ $i = 1 ]; do i=0; wait; done\n"
        "printf '%%s%%s %%d\\n' %4$s %2$s $s\n"
        "[ $s -lt 128 ] && LC_ALL=C exec rm -f $t.out $t.err %5$s\n"
        "rm -f $t.out $t.err %5$s; exit $s\n",
        src, tag, in, TL_REPORT_MARK, rmin);
}

static int tl_exec_run(cl_proc *base)
{
    tl_proc *p = (tl_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sp.sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    char in[CL_STDIN_PATH_MAX], marker[64];
    char *script = NULL, *src = cl_env_file_source(TL_ENV_FILE);
    int code = -1, rc = -1;
    tl_stream s = { .p = p, .marker = marker };
    json_object *b = NULL, *args = NULL;
    cl_resp r = { 0 };
    snprintf(marker, sizeof marker, "%s%s ", TL_REPORT_MARK, p->sp.tag);
    /* Output read while the command runs comes in chunks (tl_stream_script);
     * else in the report at the end (tl_exec_script: faster). */
    s.chunks = !(p->sp.flags & SBX_PLUGIN_EXEC_OUTPUT_AT_END);
    cl_live_init(&s.live[1]);
    cl_live_init(&s.live[2]);
    if (cl_script_stdin_file(&p->sp, &ctx, tl_upload, "/tmp", in, op) < 0)
        goto fail;
    /* bash -c WRAPPER bash SCRIPT: the caller's script is the wrapper's $1. */
    if (!src || !(script = s.chunks ? tl_stream_script(src, p->sp.tag, in)
                                    : tl_exec_script(src, p->sp.tag, in))
        || !(b = tl_run_body(script, (const char *const *)p->sp.env, p->sp.tag))
        || !json_object_object_get_ex(b, "args", &args)
        || json_object_array_add(args, json_object_new_string("bash")) < 0
        || json_object_array_add(args, json_object_new_string(p->sp.script)) < 0) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    cl_sse_init(&s.sse, tl_on_event, &s);
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    static const char *const h[] = { "Accept: text/event-stream", NULL };
    cl_req rq = { .method = "POST", .headers = h, .body = bs, .body_len = strlen(bs),
                  .sink = cl_sse_sink, .sink_ud = &s.sse, .idempotent = CL_UNSAFE,
                  .what = "run the command" };
    rc = tl_host(sb, &ctx, &rq, "/api/v1/processes/run", &r, 0, op, NULL);
    if (rc == 0 && cl_sse_end(&s.sse, op, NULL) < 0)
        rc = -1;
    cl_sse_clear(&s.sse);
    if (rc < 0)
        goto fail;
    code = s.exit_code;
    if (s.report && s.chunks) {
        /* The command's status: the output came in chunks. */
        char *end;
        errno = 0;
        long c = strtol(s.report, &end, 10);
        if (end == s.report || *end || errno || c < 0 || c > 255) {
            cl_fail(NULL, SBX_ERROR_CONNECTION, op, "tensorlake: the command's report is not "
                    "its status: %.80s", s.report);
            goto fail;
        }
        code = (int)c;
    } else if (s.report) {
        if (tl_exec_report(p, &ctx, s.report, &code) < 0)
            goto fail;
    } else {
        /* No report: the wrapper was killed (SIGKILL). The files hold the
         * output as raw bytes; those in /dev/shm are moved to /tmp first,
         * where the files API reaches on any host. */
        char *mv = cl_printf("for f in /dev/shm/.%s.out /dev/shm/.%s.err; do "
                             "[ -f $f ] && mv -f $f /tmp/; done; exit 0", p->sp.tag, p->sp.tag);
        int c2 = 0;
        if (!mv || tl_run_short(sb, &ctx, mv, &c2, op, NULL) < 0) {
            free(mv);
            goto fail;
        }
        free(mv);
        if (tl_exec_fetch(p, &ctx, 1, 0, s.chunks ? &s.live[1] : NULL) < 0
            || tl_exec_fetch(p, &ctx, 2, 0, s.chunks ? &s.live[2] : NULL) < 0)
            goto fail;
        if (p->sp.stdin_fd >= 0)
            tl_remove(sb, &ctx, in);
    }
    goto out;
fail:
    cl_proc_fail_in(base, &sb->s);
    code = -1;
out:
    free(s.report);
    json_object_put(b);
    cl_resp_clear(&r);
    free(script);
    free(src);
    return code;
}

/* Frees what a tl_proc adds to its cl_script_proc. */
static void tl_proc_fini(cl_script_proc *sp)
{
    tl_proc *p = (tl_proc *)sp;
    pthread_mutex_destroy(&p->pid_lock);
}

static int tl_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                         sbx_error **error)
{
    (void)ctx;
    if (cl_exec_check(&sb->s, TL_BACKEND, rq, 0, error) < 0
        || cl_json_text_check(rq, NULL, "exec", error) < 0)
        return -1;
    tl_proc *p = (tl_proc *)cl_script_proc_new(sizeof(tl_proc), sb, sb->s.workdir, rq,
                                               tl_run_short, "exec", error);
    if (!p)
        return -1;
    pthread_mutex_init(&p->pid_lock, NULL);
    p->sp.fini = tl_proc_fini;
    return cl_script_proc_launch(&p->sp, tl_exec_run, rq, "exec", process, error);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin tl_plugin = {
    CL_PLUGIN_HEAD(TL_BACKEND),
    CL_PLUGIN_SLOTS(tl),
    .description = "Tensorlake sandboxes (control plane and sandbox host APIs) over libcurl; "
                   "sandboxes named by their create token (stop/start suspend and resume, "
                   "list_owned and lost creates find them) unless the option \"suspendable\": "
                   "false leaves them unnamed, ended at their lifetime; one request per exec, "
                   "its output streaming while the command runs when something reads it then, "
                   "else arriving when the command ends; relative paths are taken from the "
                   "workdir",
    .caps = TL_CAPS,
    .sandbox_free = cl_sandbox_free_slot,
    .snapshot = tl_snapshot,
    CL_SCRIPT_PROC_SLOTS,
    .exec_end_info = cl_script_exec_end_info,
    .stop = tl_stop,
    .start = tl_start,
    .expose_port = tl_expose_port,
    .unexpose_port = tl_unexpose_port,
    .resolve_port = tl_resolve_port,
    .list_ports = tl_list_ports,
};

CL_PLUGIN_EXPORT(&tl_plugin)
