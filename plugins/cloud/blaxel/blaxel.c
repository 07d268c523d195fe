/*
 * blaxel.c — libsbx-blaxel.so, the `blaxel` backend: Blaxel sandboxes'
 * control API for the lifecycle and each sandbox's own data plane (its
 * metadata.url) for processes and files, over the hosted-provider base
 * (plugins/cloud/base/cloud.h, provider.h).
 *
 * Contract: the Blaxel section of the provider contracts
 * (blaxel-ai/sdk-typescript @blaxel/core src/common/settings.ts,
 * src/client/{sdk,types}.gen.ts, src/sandbox/{process,filesystem};
 * blaxel-ai/sandbox sandbox-api).
 *
 *  - Credentials: BL_API_KEY as "X-Blaxel-Authorization: Bearer KEY", the
 *    workspace (client option "workspace", else BL_WORKSPACE; required) as
 *    "X-Blaxel-Workspace", and "Blaxel-Version: BL_API_VERSION", on every
 *    call of both planes. Control plane: the client option "api_url", else
 *    BL_API_URL, else https://api.blaxel.ai/v0. Data plane: the sandbox's
 *    metadata.url, else "run_url" / BL_RUN_URL (default
 *    https://run.blaxel.ai) + /{workspace}/sandboxes/{name}. The client
 *    option "region" (else BL_REGION) goes to spec.region.
 *  - create: POST /sandboxes with metadata.name = the call's create token
 *    (so a retried create that meets 409 finds its own sandbox, and the
 *    create is safe to re-send), labels sbx_backend=blaxel and
 *    sbx_create_token=TOKEN (list_owned and the gc find it by them);
 *    image → spec.runtime.image; env → spec.runtime.envs (held by the
 *    provider, so it holds after a resume and the session state holds no
 *    env value; the call's own env wins). Memory decides vCPU at Blaxel
 *    (vCPU = memory / 2048): memory_mb must be a multiple of 1024; cpu
 *    alone asks for cpu * 2048 MB; a cpu that is not memory / 2048 is a
 *    configuration error naming both. disk_mb, gpu, snapshot_id,
 *    template, app_name and allow_internet=false are configuration errors
 *    (Blaxel has no such option). The provider-side lifetime is always
 *    set: spec.runtime.ttl = the caller's lifetime plus BL_LIFETIME_MARGIN_S
 *    (so that a command the library times out at the lifetime's end is
 *    reported timed out), else BL_DEFAULT_LIFETIME_S. The sandbox is polled
 *    until status DEPLOYED; FAILED, TERMINATED, DELETING are errors.
 *  - Standby: Blaxel puts an idle sandbox on standby (state STANDBY) and
 *    any data-plane call wakes it; is_alive counts it alive, and nothing
 *    else needs to be done.
 *  - exec: POST {url}/process {command: "exec bash -c SCRIPT", env,
 *    waitForCompletion: true, timeout: 0} with "Accept: text/event-stream",
 *    read as the NDJSON stream (keepalive lines dropped; "result" carries
 *    the ProcessResponse as a JSON string: exitCode; "error" is an error;
 *    a stream without a result is an error). The process is named by the
 *    command's tag. The command's stdout and stderr go to files in the
 *    sandbox, which tail (GNU coreutils: --pid) follows into the stream
 *    until the command's bash has ended. The stream's output is text:
 *    its chunks go to the host as they come while they are exact (a chunk
 *    holding U+FFFD, which the provider puts for bytes that are not
 *    UTF-8, ends that for its stream); when the command ends, each file is
 *    read back as raw bytes, its first bytes checked against those sent
 *    live (FNV-1a) and the rest sent, so the result is exact. The exit
 *    status goes through a file too. A stream that breaks off before its
 *    result (its end, or the connection lost mid-answer) is followed by
 *    GET /process/{name} until the process no longer runs. stdin:
 *    uploaded as a file first and redirected; the files are in a
 *    directory of the command's own, removed in one request. A command
 *    whose output nobody reads before its end (SBX_PLUGIN_EXEC_OUTPUT_AT_END)
 *    runs with no tail: when its output is small the shell around it
 *    prints a report on its stdout (a marker, the status and both outputs
 *    as the base's cl_buf_report_encoder() fields; the process's stdout
 *    from GET /process/{name} when the stream broke off) and removes the
 *    files itself: one request in all (without stdin the files are
 *    /tmp/.TAG.out and .err, no directory made). Every process of the
 *    command carries CL_EXEC_MARK=<its tag> (the shell around it and the
 *    tails carry <tag>-io), so exec_kill (a command of its own) signals
 *    all of them, setsid'd and orphaned ones included. An argument, shell
 *    command, env value or cwd that is not UTF-8 (a JSON string cannot
 *    carry it) is invalid_argument naming it, before anything is sent
 *    (issue 16).
 *  - files: GET {url}/filesystem/{path} ("Accept: application/octet-stream":
 *    raw bytes; else a directory's listing), PUT as multipart/form-data
 *    (file, permissions) up to BL_PART_BYTES, past that the multipart
 *    upload (initiate, parts of BL_PART_BYTES, complete with the parts'
 *    etags; abort on failure). A relative path is taken from the workdir
 *    (else /). At most BL_PART_BYTES of a file are in memory at once.
 *    Paths go percent-encoded in the URL, which carries any byte.
 *  - A sandbox the provider no longer has (404, or status TERMINATED,
 *    DELETING, FAILED) is not_found with reason "gone" (CASE-32); every
 *    later call fails at once.
 *  - list_owned: GET /sandboxes?limit=&cursor= followed to the end
 *    ({data, meta.nextCursor}, or a bare array from older API versions),
 *    keeping the ones labelled by this backend.
 *
 * Threading: slots may run at once on different sandboxes and on one; a
 * sandbox's mutable state (the gone flag) has its own lock.
 */
#include "cloud.h"
#include "provider.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#define BL_BACKEND "blaxel"
#define BL_DEFAULT_API "https://api.blaxel.ai/v0"
#define BL_DEFAULT_RUN "https://run.blaxel.ai"
#define BL_API_VERSION "2026-04-28"
#define BL_REPORT_MARK "SBX-OUT-"            /* a command's report (bl_exec_run) */
#define BL_INLINE_MAX 65536                  /* output bytes reported in base64; more: read */
#define BL_STATE_VERSION 1
#define BL_WAIT_S 300.0                 /* bound on waiting for DEPLOYED */
#define BL_DEFAULT_LIFETIME_S 3600      /* ttl when the caller set none */
#define BL_LIFETIME_MARGIN_S 5          /* provider end after the caller's lifetime */
#define BL_MB_PER_VCPU 2048             /* memory decides vCPU */
#define BL_MEMORY_STEP_MB 1024
#define BL_PART_BYTES ((size_t)5 << 20) /* one request's file bytes; past it, parts */
#define BL_LABEL_BACKEND CL_META_BACKEND
#define BL_LABEL_TOKEN CL_META_TOKEN

#define BL_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_RESUME          \
                 | SBX_CAP_ISOLATION | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT              \
                 | SBX_CAP_IMAGE | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED | SBX_CAP_BACKGROUND)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, control plane URL, reaper of
                         * creates whose answer was lost (CASE-20) */
    char *run;          /* data plane base, no trailing slash */
    char *workspace;
    char *region;       /* or NULL */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the name, the gone flag and the data
                         * plane (provider.h) */
};

typedef cl_script_proc bl_proc;  /* provider.h */

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define bl_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define bl_mark_gone(sb) cl_gone_set(&(sb)->s.gone)
#define bl_gone_error(error, op, id) cl_gone_error((error), (op), BL_BACKEND, (id))
#define bl_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), BL_BACKEND, (sb)->s.id, \
                                              (error))
#define bl_refuse(error, option, value, why) \
    cl_refuse((error), BL_BACKEND, (option), (value), (why))

/* @path percent-encoded for a URL path, its slashes kept. A new string. */
static char *bl_path_escape(const char *path)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(path);
    char *o = malloc(3 * n + 1), *w = o;
    if (!o)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')
            || strchr("-._~/", *p)) {
            *w++ = (char)*p;
        } else {
            *w++ = '%';
            *w++ = hex[*p >> 4];
            *w++ = hex[*p & 15];
        }
    }
    *w = '\0';
    return o;
}

/* 1 when status @s means the sandbox is gone for good. */
static const char *const bl_dead[] = { "TERMINATED", "DELETING", "FAILED", "DEACTIVATED",
                                        "DEACTIVATING", NULL };

static int bl_terminal(const char *s)
{
    return cl_str_in(s, bl_dead);
}

#define bl_status(j) cl_json_str_or((j), "status", "UNKNOWN")

/* GET /sandboxes/{name}: the Sandbox, or NULL (*@status: 0 when no answer). */
CL_ITEM_GET(bl_get, "sandboxes", "get the sandbox")

CL_ITEM_DELETE(bl_delete, "sandboxes", "delete the sandbox")

/* How the provider's view of a sandbox is got and read: resume, and the
 * look at a sandbox whose call was refused (provider.h). */
static const cl_resume_spec bl_spec = { BL_BACKEND, BL_STATE_VERSION, "name", bl_get,
                                        "status", bl_dead, NULL };

/* Asks the control plane whether @sb still exists: 1 when it is gone (the
 * gone flag set and its error stored), 0 otherwise (nothing stored). */
static int bl_confirm_gone(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           const char *op, sbx_error **error)
{
    return cl_sandbox_confirm_gone(&sb->s, sb->s.c, ctx, &bl_spec, op, error);
}

/* A sandbox whose deploy FAILED never runs: creation_failed. */
static int bl_deploy_failed(cl_sandbox *s, json_object *view, const char *state, const char *op,
                            sbx_error **error)
{
    (void)view;
    if (strcmp(state, "FAILED") != 0)
        return 0;
    sbx_error *err = cl_fail(error, SBX_ERROR_CREATION_FAILED, op,
                             "blaxel sandbox %s failed to deploy", s->id);
    cl_context(err, "status", state);
    cl_context(err, "sandbox_id", s->id);
    return -1;
}

/* Deployed: polled until DEPLOYED; a terminal sandbox is gone. */
static const cl_wake_spec bl_deploy = { &bl_spec, "status", "UNKNOWN", "DEPLOYED", NULL,
                                        BL_WAIT_S, bl_deploy_failed, NULL };
#define bl_wait_deployed(sb, ctx, op, error) cl_sandbox_wake(&(sb)->s, (ctx), &bl_deploy, (op), \
                                                             (error))

/* How a refused data-plane call is read: a 404 is looked into. */
static const cl_call_spec bl_calls = { &bl_spec, 0 };

/* A data-plane call on @sb: 0 with a 2xx answer in @r, -1 otherwise. A 404
 * is looked into: when the sandbox is gone, its gone error; else, for a
 * file call, -1 with no error stored (the caller names the file), and for
 * another call the answer's error. */
CL_PLANE_CALL(bl_host, &bl_calls)

static int bl_run_short(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

CL_SETUP(bl_setup, BL_BACKEND)

static void bl_client_clear(sbx_plugin_client *c)
{
    free(c->run);
    free(c->workspace);
    free(c->region);
}

/* *@out when no client option set it: environment variable @env as a new
 * string (unset or empty: NULL). 0, or -1 on no memory. */
static int bl_env(char **out, const char *env, sbx_error **error)
{
    const char *v = getenv(env);
    if (*out || !v || !*v)
        return 0;
    if (!(*out = strdup(v))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return -1;
    }
    return 0;
}

static void bl_name(const sbx_call_ctx *ctx, char *out, size_t cap);

/* The reaper's look-up: the sandbox named by @token when it carries
 * @token in its labels (a create names its sandbox by its token). */
static int bl_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                         sbx_error **error)
{
    struct sbx_plugin_client *c = ud;
    sbx_call_ctx tc = { sizeof(tc), ctx ? ctx->deadline : 0, ctx ? ctx->cancel_fd : -1,
                        token };
    char name[64];
    bl_name(&tc, name, sizeof name);
    long st;
    json_object *j = bl_get(c, ctx, name, &st, "create", error);
    if (!j && st != 404)
        return -1;
    const char *lt = j ? cl_json_str(cl_json_path(j, "metadata", "labels", NULL),
                                     BL_LABEL_TOKEN) : NULL;
    int ours = lt && strcmp(lt, token) == 0;
    *ids = calloc(2, sizeof(char *));
    if (*ids && ours)
        (*ids)[0] = strdup(name);
    json_object_put(j);
    return *ids ? 0 : -1;
}

static const char *const bl_key_envs[] = { "BL_API_KEY", NULL };

static const cl_client_spec bl_client_spec = {
    .provider = BL_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .url_key = "api_url", .url_env = "BL_API_URL", .url_default = BL_DEFAULT_API,
    .key_envs = bl_key_envs, .auth_header = "X-Blaxel-Authorization", .auth_prefix = "Bearer ",
    .key_required = 1,
    .find = bl_find_token, .del = bl_delete, .clear = bl_client_clear,
};

static int bl_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&bl_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    /* The options, else BL_WORKSPACE and BL_REGION. */
    const cl_option opts[] = { { "workspace", CL_OPTION_STRING, 0, &c->workspace },
                               { "region", CL_OPTION_STRING, 0, &c->region },
                               { NULL, 0, 0, NULL } };
    if (!(c->run = cl_base_url(cfg, "run_url", "BL_RUN_URL", BL_DEFAULT_RUN, error))
        || cl_client_options(cfg, opts, error) < 0
        || bl_env(&c->workspace, "BL_WORKSPACE", error) < 0
        || bl_env(&c->region, "BL_REGION", error) < 0)
        goto fail;
    if (!c->workspace) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                           "blaxel backend: no workspace (set BL_WORKSPACE or the client "
                           "option workspace)"), "option", "workspace");
        goto fail;
    }
    if (cl_http_add_header(c->cl.http, "X-Blaxel-Workspace", c->workspace) < 0
        || cl_http_add_header(c->cl.http, "Blaxel-Version", BL_API_VERSION) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(bl_probe, BL_CAPS)

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/* The data plane of sandbox @j (metadata.url, else the run URL's). */
static char *bl_data_url(struct sbx_plugin_client *c, json_object *j, const char *name)
{
    const char *u = cl_json_str(cl_json_path(j, "metadata", NULL), "url");
    if (u && *u)
        return strdup(u);
    char *ws = cl_url_escape(c->workspace), *nm = cl_url_escape(name);
    char *out = ws && nm ? cl_printf("%s/%s/sandboxes/%s", c->run, ws, nm) : NULL;
    free(ws);
    free(nm);
    return out;
}

/* cpu and memory: memory decides vCPU (memory / BL_MB_PER_VCPU). */
static int bl_size(const sbx_plugin_create_request *rq, int64_t *memory, sbx_error **error)
{
    char buf[64];
    uint64_t set = rq->set_fields;
    *memory = -1;
    static const cl_limit limits[] = {
        { "memory_mb", BL_MEMORY_STEP_MB, 0, BL_MEMORY_STEP_MB, 0, "Blaxel takes memory in "
          "multiples of 1024 MB, from 1024 MB", "min_mb", NULL, "step_mb" },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    if (cl_limits_check(rq, BL_BACKEND, limits, error) < 0)
        return -1;
    if (set & SBX_OPTION_MEMORY_MB)
        *memory = rq->memory_mb;
    if (set & SBX_OPTION_CPU) {
        double want = rq->cpu * BL_MB_PER_VCPU;
        snprintf(buf, sizeof buf, "%g", rq->cpu);
        if (!(rq->cpu > 0) || want != floor(want) || (int64_t)want % BL_MEMORY_STEP_MB) {
            bl_refuse(error, "cpu", buf, "Blaxel gives one vCPU per 2048 MB of memory, so cpu "
                                         "must be a multiple of 0.5");
            return -1;
        }
        if (*memory >= 0 && (int64_t)want != *memory) {
            char why[160];
            snprintf(why, sizeof why, "Blaxel gives one vCPU per 2048 MB of memory: memory_mb "
                     "%lld means cpu %g", (long long)*memory, (double)*memory / BL_MB_PER_VCPU);
            sbx_error *err = bl_refuse(error, "cpu", buf, why);
            snprintf(buf, sizeof buf, "%lld", (long long)*memory);
            cl_context(err, "memory_mb", buf);
            return -1;
        }
        *memory = (int64_t)want;
    }
    return 0;
}

static json_object *bl_create_body(struct sbx_plugin_client *c, const char *name,
                                   const char *token, const sbx_plugin_create_request *rq,
                                   sbx_error **error)
{
    json_object *b = json_object_new_object(), *meta = json_object_new_object();
    json_object *labels = json_object_new_object(), *spec = json_object_new_object();
    json_object *rt = json_object_new_object();
    char buf[64];
    json_object_object_add(b, "metadata", meta);
    json_object_object_add(b, "spec", spec);
    json_object_object_add(spec, "runtime", rt);
    json_object_object_add(meta, "name", json_object_new_string(name));
    json_object_object_add(meta, "labels", labels);
    json_object_object_add(labels, BL_LABEL_BACKEND, json_object_new_string(BL_BACKEND));
    if (token)
        json_object_object_add(labels, BL_LABEL_TOKEN, json_object_new_string(token));
    if (cl_workdir_check(BL_BACKEND, rq->workdir, error) < 0)
        goto fail;
    static const cl_unsupported unsupported[] = {
        { "app_name", "Blaxel has no apps" },
        { "disk_mb", "Blaxel sandboxes take no disk size" },
        { "gpu", "Blaxel sandboxes have no GPUs" },
        { "snapshot_id", "Blaxel sandbox snapshots are not offered by this backend" },
        { "template", "Blaxel has no templates (give an image)" },
        { "allow_internet", "this backend cannot cut a Blaxel sandbox off the internet" },
        { NULL, NULL },
    };
    if (cl_refuse_options(rq, BL_BACKEND, unsupported, error) < 0)
        goto fail;
    int64_t memory;
    if (bl_size(rq, &memory, error) < 0)
        goto fail;
    if (memory > 0)
        json_object_object_add(rt, "memory", json_object_new_int64(memory));
    if (rq->image)
        json_object_object_add(rt, "image", json_object_new_string(rq->image));
    if (rq->env && rq->env[0]) {
        json_object *envs = json_object_new_array();
        for (size_t i = 0; rq->env[i]; i++) {
            const char *eq = strchr(rq->env[i], '=');
            if (!eq)
                continue;
            json_object *e = json_object_new_object();
            json_object_object_add(e, "name", json_object_new_string_len(
                                                  rq->env[i], (int)(eq - rq->env[i])));
            json_object_object_add(e, "value", json_object_new_string(eq + 1));
            json_object_array_add(envs, e);
        }
        json_object_object_add(rt, "envs", envs);
    }
    /* The provider-side lifetime, always (CASE-33): whole seconds. */
    long long t = cl_lifetime_s(rq, BL_BACKEND, BL_DEFAULT_LIFETIME_S, BL_LIFETIME_MARGIN_S,
                                error);
    if (t < 0)
        goto fail;
    snprintf(buf, sizeof buf, "%llds", t);
    json_object_object_add(rt, "ttl", json_object_new_string(buf));
    if (c->region)
        json_object_object_add(spec, "region", json_object_new_string(c->region));
    if (cl_no_backend_options(rq, BL_BACKEND, error) < 0)
        goto fail;
    return b;
fail:
    json_object_put(b);
    return NULL;
}

/* The sandbox's name: the create token (lowercase letters, digits and
 * '-', as Blaxel names are), else a random one. */
static void bl_name(const sbx_call_ctx *ctx, char *out, size_t cap)
{
    const char *t = ctx ? ctx->create_token : NULL;
    int ok = t && *t && strlen(t) < cap && strlen(t) <= 48;
    for (const char *p = t; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-';
    if (ok) {
        snprintf(out, cap, "%s", t);
    } else {
        char hex[33];
        cl_random_hex(hex, 16);
        snprintf(out, cap, "sbx-%s", hex);
    }
}

static int bl_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    char name[64];
    bl_name(ctx, name, sizeof name);
    const char *token = ctx && ctx->create_token && *ctx->create_token ? ctx->create_token
                                                                        : NULL;
    json_object *body = bl_create_body(c, name, token, rq, error), *j = NULL;
    if (!body)
        return -1;
    char *url = cl_printf("%s/sandboxes", c->cl.api), *du = NULL;
    cl_resp r = { 0 };
    int rc = -1;
    struct sbx_plugin_sandbox *sb = NULL;
    /* Safe to re-send: the name is this call's, and a 409 is looked into. */
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (cl_request_json(c->cl.http, ctx, "POST", url, body, CL_SAFE, &r, op,
                        "create the sandbox", NULL) < 0) {
        cl_last_error l = *cl_last();
        cl_create_unanswered(c->cl.reaper, ctx, token, op, error);
        /* Its name is this call's: whatever the provider made of it is
         * looked for now (briefly: the call is over) and for a while,
         * whatever the outcome (an unknown one was reaped above). */
        if (token && !l.unknown)
            cl_reap_lost(c->cl.reaper, token);
        goto out;
    }
    if (r.status == 409 && r.attempts > 1) {
        /* An earlier attempt made it: ours when it carries our token. */
        long st;
        j = bl_get(c, ctx, name, &st, op, error);
        const char *lt = j ? cl_json_str(cl_json_path(j, "metadata", "labels", NULL),
                                         BL_LABEL_TOKEN) : NULL;
        if (!j)
            goto out;
        if (!token || !lt || strcmp(lt, token) != 0) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                               "blaxel: a sandbox named %s exists and is not this call's",
                               name), "name", name);
            goto out;
        }
    } else if (r.status / 100 != 2) {
        if (token && (r.status / 100 == 5 || r.status == 408))
            cl_reap_lost(c->cl.reaper, token);
        sbx_error *err = cl_fail_status(c->cl.http, error, cl_create_refused_code(r.status), &r,
                                        op, "create the sandbox");
        json_object *e = cl_resp_json(&r, op, "create the sandbox", NULL);
        const char *code = e ? cl_json_str(e, "code") : NULL;
        if (code)
            cl_context(err, "provider_code", code);
        json_object_put(e);
        goto out;
    } else {
        j = cl_resp_json(&r, op, "create the sandbox", error);
        if (!j)
            goto out;
    }
    du = bl_data_url(c, j, name);
    sb = cl_sandbox_new_at(sizeof(*sb), c, name, NULL, du);
    if (!sb || (strcmp(bl_status(j), "DEPLOYED") != 0
                && bl_wait_deployed(sb, ctx, op, error) < 0)) {
        cl_create_undo(sb, c, bl_delete, name, sb != NULL, NULL, op, error);
        goto out;
    }
    if (cl_create_workdir(sb, &sb->s.workdir, bl_run_short, ctx, BL_BACKEND, rq->workdir, op,
                          error) < 0) {
        cl_create_undo(sb, c, bl_delete, name, 0, NULL, op, error);
        goto out;
    }
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(body);
    json_object_put(j);
    free(url);
    free(du);
    cl_resp_clear(&r);
    return rc;
}

CL_DESTROY(bl_destroy, bl_delete)

/* Alive while the provider has it and it is not ending: DEPLOYED (on
 * standby or running) or still deploying. */
CL_ITEM_IS_ALIVE(bl_is_alive, "sandboxes", "status", bl_dead)

/* {"version":1,"name":NAME,"url":URL[,"workdir":W]}: no credential, no
 * workspace key, no env value (the provider holds the create's env). */
static char *bl_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, BL_BACKEND, BL_STATE_VERSION, "name", error);
    if (!j)
        return NULL;
    json_object_object_add(j, "url", json_object_new_string(sb->s.plane));
    return cl_state_end(j, error);
}

static int bl_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    json_object *j, *data;
    struct sbx_plugin_sandbox *sb = cl_resume_new(client, ctx, state_json, &bl_spec, sizeof(*sb),
                                                  &j, &data, error);
    if (!sb)
        return -1;
    const char *su = cl_json_str(data, "url");
    char *du = cl_json_str(cl_json_path(j, "metadata", NULL), "url") || !su
               ? bl_data_url(client, j, sb->s.id) : strdup(su);
    int rc = cl_sandbox_set_plane(&sb->s, du);
    free(du);
    if (rc < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "resume", "out of memory");
    else if (strcmp(bl_status(j), "DEPLOYED") != 0)
        rc = bl_wait_deployed(sb, ctx, "resume", error);
    return cl_resume_end(rc, sb, sandbox, j, data, NULL);
}

/* One listed sandbox, to the host's callback when this backend made it
 * (its labels) and it is not ending. */
static int bl_owned_one(void *ud, json_object *it)
{
    cl_owned *o = ud;
    json_object *labels = cl_json_path(it, "metadata", "labels", NULL);
    const char *id = cl_json_str(cl_json_path(it, "metadata", NULL), "name");
    const char *be = cl_json_str(labels, BL_LABEL_BACKEND);
    const char *tok = cl_json_str(labels, BL_LABEL_TOKEN);
    if (!id || !be || strcmp(be, BL_BACKEND) != 0 || !tok || strncmp(tok, "sbx-", 4)
        || bl_terminal(bl_status(it)))
        return 0;
    sbx_plugin_owned_info info = { sizeof(info), id, tok, 0, 0 };
    return o->fn(&info, o->ud);
}

/* The sandboxes this backend made: labelled sbx_backend=blaxel with a
 * create token. Every page is read (CASE-35). */
static int bl_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_owned";
    struct sbx_plugin_client *c = client;
    char *url = cl_printf("%s/sandboxes?limit=100", c->cl.api);
    cl_pages pg = { url, "cursor", NULL, "meta.nextCursor", "data", "list sandboxes",
                    CL_PAGES_ARRAY_TOO | CL_PAGES_EMPTY_ENDS };
    cl_owned o = { .fn = fn, .ud = ud };
    int rc = cl_list_pages(c->cl.http, ctx, &pg, bl_owned_one, &o, op, error);
    free(url);
    return rc;
}

CL_DESTROY_BY_ID(bl_destroy_by_id, bl_delete)

/* ------------------------------------------------------------------------ */
/* Files: raw bytes both ways (CASE-17)                                      */
/* ------------------------------------------------------------------------ */

/* "@route" + the absolute path of @path (a relative one from the workdir,
 * else /), percent-encoded. A new string. */
static char *bl_files_path(struct sbx_plugin_sandbox *sb, const char *route, const char *path)
{
    char *abs = NULL;
    if (path[0] != '/')
        abs = cl_printf("%s/%s", sb->s.workdir ? sb->s.workdir : "", path);
    char *e = bl_path_escape(abs ? abs : path);
    char *s = e ? cl_printf("%s%s", route, e) : NULL;
    free(e);
    free(abs);
    return s;
}

/* The error of a file call's answer @r (provider.h). */
#define bl_file_fail(sb, r, op, path, what, error) \
    cl_file_fail(&(sb)->s, (sb)->s.c->cl.http, (r), 1, (op), (path), (what), (error))

/* The sink of a raw read: the answer's bytes to @fd, unless the answer is
 * a directory's JSON listing (the data plane answers a directory so
 * whatever the Accept header asks): then nothing is written and the read
 * stops. The answer's headers (in @r) are in before its first byte. */
typedef struct bl_raw {
    int fd;
    const cl_resp *r;
    int is_dir;
} bl_raw;

static int bl_raw_sink(void *ud, const char *p, size_t n)
{
    bl_raw *w = ud;
    const char *ct = w->r->content_type;
    if (ct && strncmp(ct, "application/json", 16) == 0) {
        w->is_dir = 1;
        return -1;
    }
    return cl_fd_sink(&w->fd, p, n);
}

static int bl_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    const char *op = "read_file";
    char *q = bl_files_path(sb, "/filesystem", path);
    static const char *const h[] = { "Accept: application/octet-stream", NULL };
    cl_resp r = { 0 };
    bl_raw w = { fd, &r, 0 };
    cl_req rq = { .method = "GET", .headers = h, .sink = bl_raw_sink, .sink_ud = &w,
                  .idempotent = CL_SAFE, .what = "download the file" };
    int rc = q ? bl_host(sb, ctx, &rq, q, &r, 1, op, NULL) : -1;
    if (!q) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    } else if (rc < 0 && w.is_dir) {
        cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s is a directory in the "
                           "sandbox, not a file", path), "path", path);
    } else if (rc < 0 && bl_is_gone(sb)) {
        bl_gone_error(error, op, sb->s.id);
    } else if (rc < 0 && r.status / 100 > 2) {
        bl_file_fail(sb, &r, op, path, "file", error);
    } else if (rc < 0) {
        cl_fail_from(error, cl_last(), op);
    }
    free(q);
    cl_resp_clear(&r);
    return rc;
}

/* Reads up to @cap bytes of @fd into @b (cleared first): the count, or -1
 * with errno. */
static ssize_t bl_read_chunk(int fd, cl_buf *b, size_t cap)
{
    b->len = 0;
    if (b->cap < cap + 1) {
        char *n = realloc(b->data, cap + 1);
        if (!n) {
            errno = ENOMEM;
            return -1;
        }
        b->data = n;
        b->cap = cap + 1;
    }
    while (b->len < cap) {
        ssize_t k = read(fd, b->data + b->len, cap - b->len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        b->len += (size_t)k;
    }
    b->data[b->len] = '\0';
    return (ssize_t)b->len;
}

/* A multipart/form-data body: the field "permissions" (when @mode is
 * not 0) and the file part "file" holding @data. */
static int bl_form(cl_buf *out, char *ctype, size_t ctype_cap, const char *data, size_t n,
                   uint32_t mode)
{
    char perm[8];
    snprintf(perm, sizeof perm, "%04o", (unsigned)(mode & 07777));
    const char *const fields[] = { "permissions", perm, NULL };
    cl_form f = { 0 };
    out->len = 0;
    int rc = cl_form_begin(&f, mode ? fields : NULL, "file", "file") < 0
                     || cl_buf_append(out, f.head.data, f.head.len) < 0
                     || cl_buf_append(out, data, n) < 0
                     || cl_buf_append(out, f.tail, f.tail_len) < 0
                 ? -1
                 : 0;
    snprintf(ctype, ctype_cap, "%s", f.ctype);
    cl_form_clear(&f);
    return rc;
}

/* Sends @body (a form) with @method to @route on @sb: 0, or -1. */
static int bl_send_form(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                        const char *method, const char *route, const cl_buf *body,
                        const char *ctype, cl_resp *r, const char *op, const char *path,
                        sbx_error **error)
{
    cl_req rq = { .method = method, .content_type = ctype, .body = body->data,
                  .body_len = body->len, .idempotent = CL_SAFE, .what = "upload the file" };
    int rc = bl_host(sb, ctx, &rq, route, r, 1, op, error);
    if (rc < 0)
        bl_file_fail(sb, r, op, path, "directory for file", error);
    return rc;
}

/* The multipart upload of a file larger than one request: @first (its
 * first BL_PART_BYTES, already read) and the rest of @fd. */
static int bl_upload_parts(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           const char *path, int fd, cl_buf *first, uint32_t mode,
                           const char *op, sbx_error **error)
{
    char *q = bl_files_path(sb, "/filesystem-multipart/initiate", path);
    json_object *ib = json_object_new_object(), *parts = json_object_new_array(), *j = NULL;
    char perm[16];
    snprintf(perm, sizeof perm, "%04o", (unsigned)((mode ? mode : 0644) & 07777));
    json_object_object_add(ib, "permissions", json_object_new_string(perm));
    const char *ibs = json_object_to_json_string_ext(ib, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = ibs, .body_len = strlen(ibs), .idempotent = CL_SAFE,
                  .what = "start the multipart upload" };
    cl_resp r = { 0 };
    char *uid = NULL;
    int rc = q ? bl_host(sb, ctx, &rq, q, &r, 1, op, error) : -1;
    if (!q)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (rc < 0)
        bl_file_fail(sb, &r, op, path, "directory for file", error);
    if (rc == 0) {
        j = cl_resp_json(&r, op, "start the multipart upload", error);
        const char *u = j ? cl_json_str(j, "uploadId") : NULL;
        if (u)
            uid = strdup(u);
        else if (j)
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "blaxel: the multipart upload of "
                    "%s gave no uploadId", path);
        if (!uid)
            rc = -1;
        json_object_put(j);
        j = NULL;
    }
    cl_resp_clear(&r);
    cl_buf form = { 0 };
    cl_buf chunk = { 0 };
    char ctype[96];
    for (int n = 1; rc == 0; n++) {
        cl_buf *data = n == 1 ? first : &chunk;
        if (n > 1) {
            ssize_t k = bl_read_chunk(fd, &chunk, BL_PART_BYTES);
            if (k < 0) {
                cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "cannot read the file's bytes: %s",
                        strerror(errno));
                rc = -1;
                break;
            }
            if (k == 0)
                break;
        }
        char *pr = cl_printf("/filesystem-multipart/%s/part?partNumber=%d", uid, n);
        memset(&r, 0, sizeof r);
        if (!pr || bl_form(&form, ctype, sizeof ctype, data->data, data->len, 0) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            rc = -1;
        } else {
            rc = bl_send_form(sb, ctx, "PUT", pr, &form, ctype, &r, op, path, error);
        }
        free(pr);
        if (rc == 0) {
            j = cl_resp_json(&r, op, "upload a part", error);
            const char *etag = j ? cl_json_str(j, "etag") : NULL;
            if (etag) {
                json_object *p = json_object_new_object();
                json_object_object_add(p, "partNumber", json_object_new_int(n));
                json_object_object_add(p, "etag", json_object_new_string(etag));
                json_object_array_add(parts, p);
            } else {
                if (j)
                    cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "blaxel: part %d of %s "
                            "gave no etag", n, path);
                rc = -1;
            }
            json_object_put(j);
            j = NULL;
        }
        cl_resp_clear(&r);
        if (n == 1 && first->len < BL_PART_BYTES)
            break;
    }
    if (rc == 0) {
        json_object *cb = json_object_new_object();
        json_object_object_add(cb, "parts", json_object_get(parts));
        const char *cbs = json_object_to_json_string_ext(cb, JSON_C_TO_STRING_PLAIN);
        char *cr = cl_printf("/filesystem-multipart/%s/complete", uid);
        cl_req rc2 = { .method = "POST", .body = cbs, .body_len = strlen(cbs),
                       .idempotent = CL_SAFE, .what = "complete the multipart upload" };
        memset(&r, 0, sizeof r);
        rc = cr ? bl_host(sb, ctx, &rc2, cr, &r, 1, op, error) : -1;
        if (rc < 0)
            bl_file_fail(sb, &r, op, path, "directory for file", error);
        cl_resp_clear(&r);
        free(cr);
        json_object_put(cb);
    }
    if (rc < 0 && uid) {
        /* Nothing is left behind: the parts are dropped. */
        char *ar = cl_printf("/filesystem-multipart/%s/abort", uid);
        cl_req ra = { .method = "DELETE", .idempotent = CL_SAFE, .what = "abort the upload" };
        memset(&r, 0, sizeof r);
        sbx_call_ctx c2 = { sizeof(c2), cl_now() + 10, -1, NULL };
        if (ar)
            bl_host(sb, &c2, &ra, ar, &r, 1, op, NULL);
        cl_resp_clear(&r);
        free(ar);
    }
    cl_buf_clear(&form);
    cl_buf_clear(&chunk);
    json_object_put(ib);
    json_object_put(parts);
    free(uid);
    free(q);
    return rc;
}

/* Writes @fd's bytes to @path with @mode (0: the provider's default): one
 * multipart/form-data PUT up to BL_PART_BYTES, else the multipart upload. */
static int bl_upload(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                     int fd, uint32_t mode, const char *op, sbx_error **error)
{
    if (bl_check(sb, op, error) < 0)
        return -1;
    cl_buf first = { 0 }, form = { 0 };
    ssize_t k = bl_read_chunk(fd, &first, BL_PART_BYTES);
    int rc = -1;
    if (k < 0) {
        cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                           "cannot read the bytes for %s: %s", path, strerror(errno)),
                   "path", path);
    } else if ((size_t)k == BL_PART_BYTES) {
        rc = bl_upload_parts(sb, ctx, path, fd, &first, mode, op, error);
    } else {
        char ctype[96];
        char *q = bl_files_path(sb, "/filesystem", path);
        cl_resp r = { 0 };
        if (!q || bl_form(&form, ctype, sizeof ctype, first.data ? first.data : "", first.len,
                          mode) < 0)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        else
            rc = bl_send_form(sb, ctx, "PUT", q, &form, ctype, &r, op, path, error);
        cl_resp_clear(&r);
        free(q);
    }
    cl_buf_clear(&first);
    cl_buf_clear(&form);
    return rc;
}

static int bl_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                         uint32_t mode, sbx_error **error)
{
    return bl_upload(sb, ctx, path, fd, mode, "write_file", error);
}

static int bl_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    char *q = bl_files_path(sb, "/filesystem", path);
    cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "list the directory" };
    cl_resp r = { 0 };
    int rc = q ? bl_host(sb, ctx, &rq, q, &r, 1, op, error) : -1;
    free(q);
    if (rc < 0) {
        bl_file_fail(sb, &r, op, path, "directory", error);
        cl_resp_clear(&r);
        return -1;
    }
    json_object *j = cl_resp_json(&r, op, "list the directory", error);
    cl_resp_clear(&r);
    if (!j)
        return -1;
    json_object *subs = cl_json_path(j, "subdirectories", NULL);
    json_object *files = cl_json_path(j, "files", NULL);
    if (!json_object_is_type(subs, json_type_array) && !json_object_is_type(files,
                                                                            json_type_array)) {
        /* A file's answer, not a directory's. */
        cl_context(cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such directory in the sandbox: "
                           "%s (it is a file)", path), "path", path);
        json_object_put(j);
        return -1;
    }
    /* The subdirectories first, then the files. */
    if (!cl_file_infos_json(subs, NULL, 1, "permissions", fn, ud))
        cl_file_infos_json(files, NULL, 0, "permissions", fn, ud);
    json_object_put(j);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Exec: POST /process, NDJSON                                               */
/* ------------------------------------------------------------------------ */

typedef struct bl_stream {
    cl_ndjson nd;
    int have_result;
    int exit_code;
    char err[256];
    bl_proc *p;         /* the command's (live output), NULL for the plugin's own */
    cl_live live[3];    /* [1] stdout, [2] stderr (cloud.h) */
    int report;         /* the stream's stdout is the wrapper's report, kept in rep */
    cl_buf rep;
} bl_stream;

/* A chunk of the stream's stdout or stderr: to the host while it is exact
 * (cl_live_text; past that, the file has the bytes). */
static void bl_live_chunk(bl_stream *s, int fd, json_object *j)
{
    json_object *d = NULL;
    if (!s->p || !json_object_object_get_ex(j, "data", &d)
        || !json_object_is_type(d, json_type_string))
        return;
    cl_live_text(&s->live[fd], &s->p->base, fd, json_object_get_string(d),
                 (size_t)json_object_get_string_len(d));
}

static int bl_on_line(void *ud, json_object *j)
{
    bl_stream *s = ud;
    const char *type = cl_json_str(j, "type");
    const char *data = cl_json_str(j, "data");
    if (type && (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0)) {
        if (!s->report)
            bl_live_chunk(s, type[3] == 'o' ? 1 : 2, j);
        else if (type[3] == 'o' && data && cl_buf_append(&s->rep, data, strlen(data)) < 0)
            return -1;
        return 0;
    }
    if (!type || strcmp(type, "keepalive") == 0)
        return 0;
    if (strcmp(type, "error") == 0) {
        snprintf(s->err, sizeof s->err, "%s", data ? data : "(no message)");
        return 1;
    }
    if (strcmp(type, "result") != 0)
        return 0;
    json_object *res = data ? json_tokener_parse(data) : NULL;
    int64_t code = 0;
    if (!res || cl_json_int(res, "exitCode", &code) != 1) {
        snprintf(s->err, sizeof s->err, "a result without an exitCode: %.120s",
                 data ? data : "(none)");
    } else {
        s->have_result = 1;
        s->exit_code = (int)(code & 0xff);
        const char *st = cl_json_str(res, "status");
        if (st && strcmp(st, "killed") == 0 && code == 0)
            s->exit_code = 128 + SIGKILL;
    }
    json_object_put(res);
    return 1;
}

/* The exit code of a process whose status is not running, from its
 * ProcessResponse @res: 1 and *@code, or 0 while it runs. */
static int bl_process_done(json_object *res, int *code)
{
    int64_t c = 0;
    const char *st = cl_json_str(res, "status");
    if (!st || strcmp(st, "running") == 0 || cl_json_int(res, "exitCode", &c) != 1)
        return 0;
    *code = (int)(c & 0xff);
    if (strcmp(st, "killed") == 0 && c == 0)
        *code = 128 + SIGKILL;
    return 1;
}

/* The command's stream broke off before its result: follows its process
 * (GET /process/{name}) until it is no longer running, pausing 0.1 s,
 * doubling up to 1 s, within the call's deadline. 0 with its exit code in
 * *@code, or -1 with *@error set (the process gone from the sandbox, the
 * sandbox gone, the call's end). With @out, the process's stdout (its
 * ProcessResponse's, text) replaces what @out holds once it has ended. */
static int bl_follow(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *name,
                     int *code, cl_buf *out, const char *op, sbx_error **error)
{
    char *path = cl_printf("/process/%s", name);
    double pause = 0.1;
    int rc = -1;
    CL_LOG(SBX_LOG_INFO, "blaxel: the stream of process %s broke off; following it", name);
    while (path) {
        cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "follow the command" };
        cl_resp r = { 0 };
        if (bl_host(sb, ctx, &rq, path, &r, 0, op, NULL) < 0) {
            char why[sizeof cl_last()->msg];
            snprintf(why, sizeof why, "%s", cl_last()->msg);
            sbx_error *f = cl_fail(error, bl_is_gone(sb) ? SBX_ERROR_NOT_FOUND
                                                        : SBX_ERROR_CONNECTION, op,
                                   "blaxel: the command's stream broke off and its process "
                                   "%s could not be followed: %s", name, why);
            cl_context(f, "process", name);
            if (bl_is_gone(sb))
                cl_context(f, "reason", "gone");
            cl_resp_clear(&r);
            break;
        }
        json_object *res = json_tokener_parse(r.body.data ? r.body.data : "");
        int done = res && bl_process_done(res, code);
        const char *so = done && out ? cl_json_str(res, "stdout") : NULL;
        if (so) {
            /* The process's whole stdout (its report) in place of the
             * part the stream carried. */
            out->len = 0;
            if (cl_buf_append(out, so, strlen(so)) < 0) {
                cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                json_object_put(res);
                cl_resp_clear(&r);
                break;
            }
        }
        json_object_put(res);
        cl_resp_clear(&r);
        if (done) {
            rc = 0;
            break;
        }
        double left = ctx && ctx->deadline > 0 ? ctx->deadline - cl_now() : pause;
        if (left <= 0 || cl_sleep(pause < left ? pause : left, ctx ? ctx->cancel_fd : -1)) {
            cl_context(cl_fail(error, left <= 0 ? SBX_ERROR_TIMEOUT : SBX_ERROR_CANCELLED, op,
                               "blaxel: the command's stream broke off and its process %s "
                               "was still running at the call's end", name),
                       "process", name);
            break;
        }
        pause = pause * 2 < 1 ? pause * 2 : 1;
    }
    if (!path)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    free(path);
    return rc;
}

/* Runs "bash -c @script" with @env (and CL_EXEC_MARK=@mark when given) to
 * its end: 0 with its exit status in *@code, or -1 with *@error set. With
 * @s (its p set), the process is named @mark, its stream's output goes to
 * the host live (bl_live_chunk), and a stream that breaks off before its
 * result is followed to the process's end (bl_follow). */
static int bl_run(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                  const char *const *env, const char *mark, bl_stream *live, int *code,
                  const char *op, sbx_error **error)
{
    json_object *b = json_object_new_object(), *e = cl_env_object(env);
    char *q = cl_shell_quote(script);
    /* exec: the provider's shell becomes bash, so that no process of the
     * provider's own stands between the command and its signals. */
    char *cmd = q ? cl_printf("exec bash -c %s", q) : NULL;
    free(q);
    if (!cmd) {
        json_object_put(b);
        json_object_put(e);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    if (mark) {
        /* With @live, the mark is the command's own (the script sets it):
         * the shell around it and its tails carry another, so exec_kill
         * signals the command's processes only. */
        char *m = live ? cl_printf("%s-io", mark) : NULL;
        json_object_object_add(e, CL_EXEC_MARK, json_object_new_string(m ? m : mark));
        free(m);
    }
    json_object_object_add(b, "command", json_object_new_string(cmd));
    if (live && mark)
        json_object_object_add(b, "name", json_object_new_string(mark));
    json_object_object_add(b, "env", e);
    json_object_object_add(b, "waitForCompletion", json_object_new_boolean(1));
    json_object_object_add(b, "timeout", json_object_new_int(0));
    free(cmd);
    bl_stream own = { .have_result = 0 };
    bl_stream *sp = live ? live : &own;
    cl_ndjson_init(&sp->nd, bl_on_line, sp);
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    static const char *const h[] = { "Accept: text/event-stream", NULL };
    cl_req rq = { .method = "POST", .headers = h, .body = bs, .body_len = strlen(bs),
                  .sink = cl_ndjson_sink, .sink_ud = &sp->nd, .idempotent = CL_UNSAFE,
                  .what = "run the command" };
    cl_resp r = { 0 };
    int rc = bl_host(sb, ctx, &rq, "/process", &r, 0, op, error);
    if (live && mark && !sp->err[0] && !sp->have_result && !bl_is_gone(sb)
        && (rc == 0 || r.status == 200)) {
        /* The stream broke off (its end without a result, or the
         * connection lost mid-answer): the process runs on. */
        if (bl_follow(sb, ctx, mark, &sp->exit_code, sp->report ? &sp->rep : NULL, op,
                      error) == 0) {
            sp->have_result = 1;
            rc = 0;
        } else {
            rc = -1;
        }
    }
    if (rc == 0 && !sp->err[0] && !sp->have_result && cl_ndjson_end(&sp->nd, op, error) < 0)
        rc = -1;
    if (rc == 0 && sp->err[0]) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "blaxel: the command's stream said: %s",
                sp->err);
        rc = -1;
    } else if (rc == 0 && !sp->have_result) {
        if (!bl_confirm_gone(sb, ctx, op, error))
            cl_fail(error, SBX_ERROR_CONNECTION, op, "blaxel: the command's stream ended "
                    "without its result");
        rc = -1;
    }
    if (rc == 0)
        *code = sp->exit_code;
    cl_ndjson_clear(&sp->nd);
    json_object_put(b);
    cl_resp_clear(&r);
    return rc;
}

static int bl_run_short(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    return bl_run(sb, ctx, cmd, NULL, NULL, NULL, code, op, error);
}

/* The wrapper's report @rep (the stream's stdout: BL_REPORT_MARK, the tag,
 * the command's status, then stdout's and stderr's fields of
 * cl_buf_report_encoder(), a line each): 1 with both written out and the
 * status in *@code, 0 when there is none (the output is in the files),
 * -1 when it is malformed or the host closed its descriptors. */
static int bl_report(bl_proc *p, const cl_buf *rep, int *code)
{
    char mark[80];
    snprintf(mark, sizeof mark, BL_REPORT_MARK "%s ", p->tag);
    cl_buf o = { 0 }, e = { 0 };
    int r = cl_report_parse(rep->data, rep->len, mark, &o, &e, code);
    if (r < 0)
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "blaxel: the command's report is cut or "
                "not percent-encoded or base64: %.80s", rep->data);
    else if (r > 0 && ((o.len && cl_proc_output(&p->base, 1, o.data, o.len) < 0)
                       || (e.len && cl_proc_output(&p->base, 2, e.data, e.len) < 0)))
        r = -1;
    cl_buf_clear(&o);
    cl_buf_clear(&e);
    return r;
}

static int bl_exec_run(cl_proc *base)
{
    bl_proc *p = (bl_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    char *stdin_path = NULL, *script = NULL, *inner = NULL;
    char dir[64], fo[80], fe[80];
    int code = -1, rc = -1, reported = 0;
    bl_stream st = { .p = p };
    cl_live_init(&st.live[1]);
    cl_live_init(&st.live[2]);
    /* The command's files: its stdin, stdout and stderr, in a directory of
     * its own, removed in one request at the end. A command that reports
     * its output (below) without stdin has no directory (mkdir would be a
     * program more): its files are /tmp/.TAG.out and /tmp/.TAG.err. */
    snprintf(dir, sizeof dir, "/tmp/.%s", p->tag);
    st.report = (p->flags & SBX_PLUGIN_EXEC_OUTPUT_AT_END) != 0;
    int flat = st.report && p->stdin_fd < 0;
    snprintf(fo, sizeof fo, "%s%sout", dir, flat ? "." : "/");
    snprintf(fe, sizeof fe, "%s%serr", dir, flat ? "." : "/");
    if (p->stdin_fd >= 0) {
        stdin_path = cl_printf("%s/in", dir);
        if (!stdin_path || bl_upload(sb, &ctx, stdin_path, p->stdin_fd, 0600, op, NULL) < 0)
            goto fail;
    }
    /* The command runs in a bash of its own, its stdout and stderr into
     * files (the exact bytes, read at the end), which tail follows into the
     * provider's stream (text, delivered live while exact: bl_live_chunk)
     * until the command's bash has ended; background children keep only
     * the files open, so they hold neither the stream nor the exec. The
     * shell around it (its own messages to /dev/null) exits with the
     * command's status. Only the command's processes carry its mark. */
    inner = cl_shell_quote(p->script);
    char *pro = p->stdin_fd >= 0 ? cl_printf("exec 3<%s/in; rm -f %s/in", dir, dir)
                                 : flat ? strdup("exec 3</dev/null")
                                 : cl_printf("mkdir -p %s; exec 3</dev/null", dir);
    /* When nothing reads the output before the end
     * (SBX_PLUGIN_EXEC_OUTPUT_AT_END), no tail follows the files: the
     * command's bash runs in the foreground and the shell around it ends
     * the moment it does (a tail notices the end of its --pid only at its
     * next poll, up to 50 ms later); the output is read from the files. */
    /* Then, when the output is small, the shell around it reports it on
     * its stdout (cl_buf_report_encoder(): text-safe) after a marker line
     * with the command's status, and removes the command's directory by
     * its last act: one request in all. */
    if (inner && pro && st.report) {
        cl_buf w = { 0 };
        int bad = cl_buf_printf(&w, "%s\n"
                                "exec 4>&2 2>/dev/null </dev/null\n"
                                CL_EXEC_MARK "=%s bash -c %s <&3 3<&- 4>&- >%s 2>%s\n"
                                "rc=$? LC_ALL=C f= k= m=\n",
                                pro, p->tag, inner, fo, fe) < 0
                  || cl_buf_report_encoder(&w, BL_INLINE_MAX) < 0
                  || cl_buf_printf(&w, "e %s; x=$f; e %s\n"
                                   "[ -n \"$m\" ] && exit $rc\n"
                                   "printf '" BL_REPORT_MARK "%%s %%d\\n%%s\\n%%s\\n' %s $rc "
                                   "\"$x\" \"$f\"\nexec rm -rf %s %s%s",
                                   fo, fe, p->tag, fo, fe, flat ? "" : dir) < 0;
        if (bad)
            cl_buf_clear(&w);
        script = w.data;
    } else if (inner && pro)
        script = cl_printf("%s\n"
                           "exec 4>&2 2>/dev/null </dev/null; : >%s/out; : >%s/err\n"
                           CL_EXEC_MARK "=%s bash -c %s <&3 3<&- 4>&- >%s/out 2>%s/err & c=$!\n"
                           "exec 3<&-\n"
                           "tail -c +1 -s 0.05 --pid=$c -f %s/out 4>&- & t1=$!\n"
                           "tail -c +1 -s 0.05 --pid=$c -f %s/err >&4 4>&- & t2=$!\n"
                           "wait $c; rc=$?\nwait $t1 $t2\nexit $rc",
                           pro, dir, dir, p->tag, inner, dir, dir, dir, dir);
    free(pro);
    if (!script) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    rc = bl_run(sb, &ctx, script, (const char *const *)p->env, p->tag, &st, &code, op, NULL);
    if (rc == 0 && st.report) {
        int r = bl_report(p, &st.rep, &code);
        if (r < 0)
            goto fail;
        if (r > 0) {
            reported = 1;
            goto out;
        }
    }
    /* The rest of the output, as raw bytes (the stream's output is text). */
    static const char *const h[] = { "Accept: application/octet-stream", NULL };
    for (int fd = 1; rc == 0 && fd <= 2; fd++) {
        char *q = bl_files_path(sb, "/filesystem", fd == 1 ? fo : fe);
        cl_live_rest o;
        cl_live_rest_init(&o, &p->base, fd, &st.live[fd]);
        cl_req rg = { .method = "GET", .headers = h, .sink = cl_live_rest_sink, .sink_ud = &o,
                      .idempotent = CL_SAFE, .what = "read the command's output" };
        cl_resp r2 = { 0 };
        rc = q ? bl_host(sb, &ctx, &rg, q, &r2, 1, op, NULL) : -1;
        if (rc < 0 && r2.status == 404 && !bl_is_gone(sb))
            rc = 0;     /* the command removed it */
        else if (rc == 0 || o.differs)
            rc = cl_live_rest_end(&o, "blaxel", op);
        cl_resp_clear(&r2);
        free(q);
    }
    if (rc < 0)
        goto fail;
    goto out;
fail:
    cl_proc_fail_in(base, &sb->s);
    code = -1;
out:
    cl_buf_clear(&st.rep);
    /* The directory in one request; without one, each file. */
    for (int i = 0; !reported && !bl_is_gone(sb) && i < (flat ? 2 : 1); i++) {
        /* With a bound of its own: the call may have been cancelled. */
        sbx_call_ctx c2 = { sizeof(c2), cl_now() + 10, -1, NULL };
        char *q = bl_files_path(sb, "/filesystem", flat ? (i ? fe : fo) : dir);
        char *qr = q && !flat ? cl_printf("%s?recursive=true", q) : q ? strdup(q) : NULL;
        cl_req rd = { .method = "DELETE", .idempotent = CL_SAFE,
                      .what = "remove the command's files" };
        cl_resp r3 = { 0 };
        if (qr)
            bl_host(sb, &c2, &rd, qr, &r3, 1, op, NULL);
        cl_resp_clear(&r3);
        free(qr);
        free(q);
    }
    free(script);
    free(inner);
    free(stdin_path);
    return code;
}

/* The command (its script holds the argv or shell text and the cwd) and
 * its env go as POST /process's JSON: text that is not UTF-8 is refused
 * before anything is sent (issue 16). */
CL_SCRIPT_EXEC_START(bl_exec_start, BL_BACKEND, bl_run_short, bl_exec_run, 0)

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin bl_plugin = {
    CL_PLUGIN_HEAD(BL_BACKEND),
    CL_PLUGIN_SLOTS(bl),
    .description = "Blaxel sandboxes (control API and each sandbox's data plane) over "
                   "libcurl; memory decides vCPU; the provider ends a sandbox at its ttl and "
                   "wakes one on standby at use; output streams as it comes; "
                   "relative paths are taken from the workdir",
    .caps = BL_CAPS,
    .sandbox_free = cl_sandbox_free_slot,
    CL_SCRIPT_PROC_SLOTS,
};

CL_PLUGIN_EXPORT(&bl_plugin)
