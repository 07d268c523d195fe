/*
 * runpod.c — libsbx-runpod.so, the `runpod` backend: RunPod GPU pods over
 * RunPod's REST API v2 (lifecycle, on the hosted-provider base,
 * plugins/cloud/base/cloud.h) and the system's OpenSSH client (commands
 * and files, ssh.h).
 *
 * Contract: the RunPod section of the provider contracts (runpod/docs
 * api-reference-v2/openapi.json; REST v1 is retired).
 *
 *  - Credentials: RUNPOD_API_KEY, else api_key in ~/.runpod/config.toml,
 *    sent as "Authorization: Bearer KEY". Base URL: the client config's
 *    "api_url", else RUNPOD_API_BASE_URL, else https://api.runpod.io; the
 *    API is under /v2.
 *  - create: POST /v2/pods. A GPU is required: the option gpu
 *    ("TYPE[:COUNT]"), else the client config's "gpu", else SBX_RUNPOD_GPU;
 *    none is a configuration error naming the option gpu (context
 *    option=gpu). image -> "image" (default RP_DEFAULT_IMAGE, whose start
 *    script runs an SSH server for the PUBLIC_KEY in the pod's env),
 *    template -> "templateId"; disk_mb -> "disk" (GB, rounded up); the
 *    create's env -> "env", with PUBLIC_KEY (the public half of the SSH key)
 *    and the ownership labels SBX_BACKEND, SBX_CREATE_TOKEN and
 *    SBX_EXPIRES_AT; "ports" always holds "22/tcp". backend_options are
 *    RunPod's own camelCase members, merged into the body as given
 *    ("gpuTypeIds" and "gpuTypePriority" for capacity fallback, "cloud",
 *    "dataCenterIds", "ports" (22/tcp is added), ...), except the transport
 *    options, which the plugin takes and never sends: create_timeout_secs
 *    (default 600), api_timeout_secs (each API call; default 30),
 *    poll_interval_secs (default 2, the fastest 0.05), ssh_private_key_path
 *    (default SBX_RUNPOD_SSH_KEY, else ~/.ssh/id_ed25519), ssh_user (root),
 *    ssh_connect_timeout_secs (10), ssh_strict_host_key_checking
 *    (accept-new), ssh_known_hosts_file (default: one file per sandbox).
 *    Each may also be set in the client config. Refused, naming the
 *    option: allow_internet=false, snapshot_id, app_name, cpu and
 *    memory_mb (the GPU type decides them).
 *  - Readiness: GET the pod (pauses from 0.05 s doubling up to
 *    poll_interval_secs) until it is RUNNING with a public IP and a
 *    port mapping for 22 (runtime.ports), then an SSH probe (the control
 *    master connects); on failure or timeout the pod is deleted and the
 *    error carries the pod id (context sandbox_id) and any error of the
 *    cleanup (context cleanup_error).
 *  - Lifetime: RunPod has none. The expiry is recorded in the pod's env
 *    (SBX_EXPIRES_AT), where list_owned finds it, so `sbx gc` and the
 *    lifecycle record reap an expired pod; the plugin itself does not.
 *  - Commands and files: over ssh (ssh.h). The create's env is also
 *    written to $HOME/.sbx-env in the pod, which every command sources, so
 *    it holds after a resume; per-call values, exported after it, win.
 *    Every process of a command carries CL_EXEC_MARK=<tag>: exec_kill
 *    signals them all by it. Files and directories are ssh streams (cat,
 *    tar), binary-safe, never whole in memory.
 *  - Cost: a RUNNING pod's "cost" (USD per hour, the pod's live price) is
 *    logged and kept in the session state as "price_usd_per_hour", the
 *    API's number as written, where the library's usage takes it as the
 *    sandbox's price (sbx/plugin.h, session_state) in place of the price
 *    table's. A resume reads it from the API again.
 *  - destroy: the control master is closed, then DELETE /v2/pods/{id}; a
 *    pod the provider no longer has (404, TERMINATED) is not_found with
 *    reason "gone" (CASE-32).
 *
 * Threading: slots may run at once on different pods and on one; a pod's
 * mutable state (gone flag, ssh master) has its own locks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cloud.h"
#include "provider.h"
#include "ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <json-c/json.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define RP_BACKEND "runpod"
#define RP_DEFAULT_URL "https://api.runpod.io"
#define RP_DEFAULT_IMAGE "runpod/base:0.6.2-cuda12.2.0"
#define RP_STATE_VERSION 1
#define RP_ENV_FILE "$HOME/.sbx-env"
#define RP_RELAY_GRACE_S "1"    /* a background holder of the output: the relays' end */
#define RP_ENV_BACKEND "SBX_BACKEND"
#define RP_ENV_TOKEN "SBX_CREATE_TOKEN"
#define RP_ENV_EXPIRES "SBX_EXPIRES_AT"

#define RP_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_DIR_TRANSFER    \
                 | SBX_CAP_RESUME | SBX_CAP_ISOLATION | SBX_CAP_GPU | SBX_CAP_IMAGE         \
                 | SBX_CAP_DISK_LIMIT | SBX_CAP_LIST_OWNED | SBX_CAP_BACKGROUND)

/* The transport options: taken by the plugin, never sent to RunPod. */
typedef struct rp_opts {
    double create_timeout_s;
    double api_timeout_s;
    double poll_s;
    char *key_path;
    char *user;
    double ssh_connect_timeout_s;
    char *strict;
    char *known_hosts;
} rp_opts;

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, base URL + "/v2", reaper of
                         * the pods of creates whose outcome is unknown */
    char *gpu;          /* the default GPU ("TYPE[:COUNT]"), or NULL */
    rp_opts opts;       /* the client's defaults */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member (provider.h) */
    struct sbx_plugin_client *c;
    rp_opts opts;
    char *workdir;
    char *host;
    int port;
    double cost;        /* USD per hour; -1 when the API said none */
    char cost_text[40]; /* cost as the API wrote it ("0.69") */
    rp_ssh *ssh;
    char stat_name[4096];   /* stat_file's last name (borrowed by the host) */
};

typedef struct rp_proc {
    cl_proc base;       /* first member (cloud.h) */
    struct sbx_plugin_sandbox *sb;
    char *inner;        /* the command's script (cl_shell_script) */
    char *script;       /* what runs remotely */
    int stdin_fd;
    char tag[40];
    pthread_mutex_t pid_lock;
    pid_t pid;
    int pidfd;
    int killed;         /* the ssh process was killed here */
} rp_proc;

#define rp_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), RP_BACKEND, (sb)->s.id, \
                                              (error))
#define rp_refuse(error, option, value, why) \
    cl_refuse((error), RP_BACKEND, (option), (value), (why))

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

static void rp_opts_clear(rp_opts *o)
{
    free(o->key_path);
    free(o->user);
    free(o->strict);
    free(o->known_hosts);
    memset(o, 0, sizeof(*o));
}

static int rp_opts_copy(rp_opts *dst, const rp_opts *src)
{
    *dst = *src;
    dst->key_path = src->key_path ? strdup(src->key_path) : NULL;
    dst->user = src->user ? strdup(src->user) : NULL;
    dst->strict = src->strict ? strdup(src->strict) : NULL;
    dst->known_hosts = src->known_hosts ? strdup(src->known_hosts) : NULL;
    if ((src->key_path && !dst->key_path) || (src->user && !dst->user)
        || (src->strict && !dst->strict) || (src->known_hosts && !dst->known_hosts)) {
        rp_opts_clear(dst);
        return -1;
    }
    return 0;
}

static const char *const rp_transport_keys[] = {
    "create_timeout_secs", "api_timeout_secs", "poll_interval_secs", "ssh_private_key_path",
    "ssh_user", "ssh_connect_timeout_secs", "ssh_strict_host_key_checking",
    "ssh_known_hosts_file", NULL
};

/* RunPod's CreatePodRequest members a create may carry (REST v2, with the
 * capacity fallback members gpuTypeIds, gpuTypePriority and gpuCount). */
static const char *const rp_body_keys[] = {
    "name", "image", "templateId", "gpu", "cpu", "cloud", "env", "ports", "disk", "args",
    "registry", "mounts", "dataCenterIds", "startSsh", "startJupyter", "globalNetworking",
    "gpuTypeIds", "gpuTypePriority", "gpuCount", NULL
};

static int rp_is_transport_key(const char *k)
{
    for (int i = 0; rp_transport_keys[i]; i++)
        if (strcmp(k, rp_transport_keys[i]) == 0)
            return 1;
    return 0;
}

static sbx_error *rp_bad_option(sbx_error **error, const char *op, const char *key,
                                json_object *v, const char *want)
{
    sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op, "runpod option %s %s: %s", key,
                           v ? json_object_to_json_string(v) : "null", want);
    cl_context(e, "option", key);
    return e;
}

/* Reads the transport options of @o (a JSON object; NULL: none) into @out
 * (over what it holds). */
static int rp_opts_read(json_object *o, rp_opts *out, const char *op, sbx_error **error)
{
    if (!o)
        return 0;
    json_object_object_foreach(o, k, v) {
        if (!rp_is_transport_key(k))
            continue;
        if (strstr(k, "_secs")) {
            double d = json_object_is_type(v, json_type_int) || json_object_is_type(v,
                                                                                  json_type_double)
                           ? json_object_get_double(v) : -1;
            if (!(d > 0) || d > 86400) {
                rp_bad_option(error, op, k, v, "a number of seconds above 0 and at most 86400");
                return -1;
            }
            if (strcmp(k, "create_timeout_secs") == 0)
                out->create_timeout_s = d;
            else if (strcmp(k, "api_timeout_secs") == 0)
                out->api_timeout_s = d;
            else if (strcmp(k, "poll_interval_secs") == 0)
                out->poll_s = d < 0.05 ? 0.05 : d;
            else
                out->ssh_connect_timeout_s = d;
            continue;
        }
        if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0) {
            rp_bad_option(error, op, k, v, "a non-empty string");
            return -1;
        }
        const char *s = json_object_get_string(v);
        char **slot = strcmp(k, "ssh_private_key_path") == 0 ? &out->key_path
                      : strcmp(k, "ssh_user") == 0          ? &out->user
                      : strcmp(k, "ssh_strict_host_key_checking") == 0 ? &out->strict
                                                                       : &out->known_hosts;
        if (slot == &out->strict && strcmp(s, "yes") != 0 && strcmp(s, "no") != 0
            && strcmp(s, "accept-new") != 0) {
            rp_bad_option(error, op, k, v, "one of yes, no, accept-new");
            return -1;
        }
        if (slot == &out->user) {
            for (const char *p = s; *p; p++)
                if (!(*p == '_' || *p == '-' || *p == '.' || (*p >= '0' && *p <= '9')
                      || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) {
                    rp_bad_option(error, op, k, v, "a user name (letters, digits, . _ -)");
                    return -1;
                }
        }
        free(*slot);
        if (!(*slot = strdup(s))) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* The API key in ~/.runpod/config.toml (runpod-python's file):
 * api_key = "..." in its [default] table (or before any table). A new
 * string, or NULL. */
static char *rp_toml_key(void)
{
    const char *home = getenv("HOME");
    char *path = home && *home ? cl_printf("%s/.runpod/config.toml", home) : NULL;
    FILE *f = path ? fopen(path, "re") : NULL;
    free(path);
    if (!f)
        return NULL;
    char line[4096], *out = NULL;
    int in_default = 1;
    while (!out && fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '[') {
            in_default = strncmp(p, "[default]", 9) == 0;
            continue;
        }
        if (!in_default || strncmp(p, "api_key", 7) != 0)
            continue;
        p += 7;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p++ != '=')
            continue;
        while (*p == ' ' || *p == '\t')
            p++;
        char q = *p;
        if (q != '"' && q != '\'')
            continue;
        char *end = strchr(p + 1, q);
        if (end && end > p + 1)
            out = strndup(p + 1, (size_t)(end - p - 1));
    }
    fclose(f);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

static int rp_setup(const sbx_host_services *host, sbx_error **error)
{
    return cl_setup(host, RP_BACKEND, error);
}

static void rp_client_clear(sbx_plugin_client *c)
{
    free(c->gpu);
    rp_opts_clear(&c->opts);
}

static int rp_delete_pod(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                         const char *op, sbx_error **error)
{
    char *url = cl_item_url(c->cl.api, "pods", id, "");
    int rc = cl_delete_url(c->cl.http, ctx, url, op, "terminate the pod", error);
    free(url);
    return rc;
}

typedef int (*rp_each_fn)(void *ud, json_object *pod);

/* GET /v2/pods, calling @fn on each pod that is not TERMINATED. */
static int rp_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, rp_each_fn fn, void *ud,
                   const char *op, sbx_error **error)
{
    char *url = cl_printf("%s/pods", c->cl.api);
    long st = 0;
    json_object *j = url ? cl_get_json(c->cl.http, ctx, url, &st, op, "list pods", error) : NULL;
    free(url);
    if (!j) {
        if (st == 404)
            cl_fail(error, SBX_ERROR_NOT_FOUND, op, "runpod: no pod list at %s/pods", c->cl.api);
        else if (!url)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    json_object *pods = cl_json_path(j, "pods", NULL);
    if (!pods || !json_object_is_type(pods, json_type_array)) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "runpod list answered with no pods array");
        json_object_put(j);
        return -1;
    }
    size_t n = json_object_array_length(pods);
    for (size_t i = 0; i < n; i++) {
        json_object *it = json_object_array_get_idx(pods, i);
        const char *s = cl_json_str(it, "status");
        if (s && strcmp(s, "TERMINATED") == 0)
            continue;
        if (fn(ud, it))
            break;
    }
    json_object_put(j);
    return 0;
}

static int rp_id_one(void *ud, json_object *it)
{
    cl_token_ids_match(ud, cl_json_str(cl_json_path(it, "env", NULL), RP_ENV_TOKEN),
                       cl_json_str(it, "id"));
    return 0;
}

static int rp_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                         sbx_error **error)
{
    cl_token_ids s = { token, { 0 } };
    int rc = rp_list(ud, ctx, rp_id_one, &s, "create", error);
    return cl_ids_finish(&s.ids, rc, ids, "create", error);
}

static const char *const rp_key_envs[] = { "RUNPOD_API_KEY", NULL };

/* The base URL gets "/v2" and the key may come from runpod's config file:
 * both set by the plugin. */
static const cl_client_spec rp_client_spec = {
    .provider = RP_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .key_envs = rp_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .key_required = 1, .key_else = ", or api_key in ~/.runpod/config.toml",
    .find = rp_find_token, .del = rp_delete_pod, .clear = rp_client_clear,
};

static int rp_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&rp_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    char *base = NULL, *key = NULL;
    c->opts.create_timeout_s = 600;
    c->opts.api_timeout_s = 30;
    c->opts.poll_s = 2;
    c->opts.ssh_connect_timeout_s = 10;
    base = cl_base_url(cfg, "api_url", "RUNPOD_API_BASE_URL", RP_DEFAULT_URL, error);
    if (!base || rp_opts_read(cfg, &c->opts, op, error) < 0)
        goto fail;
    if (!(c->cl.api = cl_printf("%s/v2", base))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    /* RUNPOD_API_KEY's is set by the head; without it, the config file's. */
    const char *k = getenv("RUNPOD_API_KEY");
    key = k && *k ? NULL : rp_toml_key();
    if (key) {
        char *hv = cl_printf("Bearer %s", key);
        int bad = !hv || cl_http_set_auth(c->cl.http, "Authorization", hv) < 0
                  || cl_http_set_secret(c->cl.http, key) < 0;
        free(hv);
        if (bad) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto fail;
        }
    }
    const char *gpu = cl_json_str(cfg, "gpu");
    if (!gpu)
        gpu = getenv("SBX_RUNPOD_GPU");
    if (gpu && *gpu && !(c->gpu = strdup(gpu))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    if (!c->opts.key_path) {
        const char *kp = getenv("SBX_RUNPOD_SSH_KEY");
        c->opts.key_path = strdup(kp && *kp ? kp : "~/.ssh/id_ed25519");
    }
    free(base);
    free(key);
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    free(base);
    free(key);
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(rp_probe, RP_CAPS)

/* ------------------------------------------------------------------------ */
/* Commands (ssh)                                                            */
/* ------------------------------------------------------------------------ */

/* Runs @script in @sb: stdin from @in_fd (-1: none), stdout to @out_fd (-1:
 * discarded), stderr kept (its first 4 KiB) in @err (may be NULL). 0 with
 * the exit status in *@code, -1 with the transport's error. */
static int rp_run(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                  int in_fd, int out_fd, cl_buf *err, int *code, const char *op,
                  sbx_error **error)
{
    if (rp_ssh_master(sb->ssh, ctx, op, error) < 0)
        return -1;
    char tag[40];
    cl_random_hex(tag, 16);
    int devnull = -1;
    if (out_fd < 0 && (devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "/dev/null: %s", strerror(errno));
        return -1;
    }
    rp_ssh_cmd c = { .script = script, .tag = tag, .in_fd = in_fd,
                     .out_fd = out_fd >= 0 ? out_fd : devnull, .err_fd = -1, .err_buf = err,
                     .buf_max = 4096, .stop_fd = -1 };
    int rc = rp_ssh_run(sb->ssh, ctx, &c, code, op, error);
    if (devnull >= 0)
        close(devnull);
    return rc < 0 ? -1 : 0;
}

/* cl_run_fn over rp_run: the plugin's own short commands. */
static int rp_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    return rp_run(sb, ctx, cmd, -1, -1, NULL, code, op, error);
}

/* The error of a file script that exited @code (3: missing, 4: wrong
 * kind), with its stderr @err. Returns -1. */
static int rp_file_fail(int code, const char *shown, const cl_buf *err, const char *kind,
                        const char *op, sbx_error **error)
{
    sbx_error *e;
    if (code == 3)
        e = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "%s does not exist in the sandbox", shown);
    else if (code == 4)
        e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s is %s in the sandbox", shown,
                    kind);
    else
        e = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "%s: exited %d: %s", shown, code,
                    err && err->data ? err->data : "");
    cl_context(e, "path", shown);
    return -1;
}

static char *rp_path(struct sbx_plugin_sandbox *sb, const char *path)
{
    return cl_path_in(sb->workdir, path);
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

static struct sbx_plugin_sandbox *rp_sandbox_new(struct sbx_plugin_client *c, const char *id)
{
    struct sbx_plugin_sandbox *sb = cl_sandbox_alloc(sizeof(*sb), id);
    if (sb) {
        sb->c = c;
        sb->cost = -1;
    }
    return sb;
}

static void rp_sandbox_free(sbx_plugin_sandbox *sb)
{
    if (sb) {
        rp_ssh_free(sb->ssh);
        rp_opts_clear(&sb->opts);
        free(sb->workdir);
        free(sb->host);
    }
    cl_sandbox_free(sb);
}

/* Parses "TYPE[:COUNT]" into @type (a new string) and @count. */
static int rp_parse_gpu(const char *gpu, char **type, int *count, sbx_error **error)
{
    const char *colon = strrchr(gpu, ':');
    long n = 1;
    if (colon) {
        char *end = NULL;
        errno = 0;
        n = strtol(colon + 1, &end, 10);
        if (errno || !end || *end || end == colon + 1 || n < 1 || n > 16) {
            rp_refuse(error, "gpu", gpu, "the count after ':' must be a whole number from 1 "
                      "to 16");
            return -1;
        }
    }
    size_t len = colon ? (size_t)(colon - gpu) : strlen(gpu);
    if (len == 0) {
        rp_refuse(error, "gpu", gpu, "needs a GPU type id (\"NVIDIA GeForce RTX 4090[:N]\")");
        return -1;
    }
    *type = strndup(gpu, len);
    *count = (int)n;
    return *type ? 0 : -1;
}

/* The public half of the private key @key_path (KEY.pub), trimmed: a new
 * string, or NULL with a configuration error naming the option. */
static char *rp_public_key(const char *key_path, const char *op, sbx_error **error)
{
    const char *home = getenv("HOME");
    char *path = key_path[0] == '~' && key_path[1] == '/'
                     ? cl_printf("%s%s.pub", home ? home : "", key_path + 1)
                     : cl_printf("%s.pub", key_path);
    FILE *f = path ? fopen(path, "re") : NULL;
    char line[16384];
    char *out = NULL;
    if (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            line[--n] = '\0';
        if (n)
            out = strdup(line);
    }
    if (!out) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                               "ssh_private_key_path %s: cannot read its public key %s: %s",
                               key_path, path ? path : "", f ? "empty" : strerror(errno));
        cl_context(e, "option", "ssh_private_key_path");
        cl_context(e, "path", path ? path : key_path);
    }
    if (f)
        fclose(f);
    free(path);
    return out;
}

static json_object *rp_create_body(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                   const sbx_plugin_create_request *rq, rp_opts *opts,
                                   sbx_error **error)
{
    const char *op = "create";
    uint64_t set = rq->set_fields;
    char buf[64];
    json_object *bo = NULL, *b = NULL;
    char *gtype = NULL, *pub = NULL;
    if (cl_workdir_check(RP_BACKEND, rq->workdir, error) < 0)
        return NULL;
    if (rq->backend_options && *rq->backend_options) {
        bo = json_tokener_parse(rq->backend_options);
        if (!bo || !json_object_is_type(bo, json_type_object)) {
            sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                   "runpod backend_options: %s is not a JSON object",
                                   rq->backend_options);
            cl_context(e, "option", "backend_options");
            goto fail;
        }
        json_object_object_foreach(bo, k, v) {
            (void)v;
            int known = rp_is_transport_key(k);
            for (int i = 0; !known && rp_body_keys[i]; i++)
                known = strcmp(k, rp_body_keys[i]) == 0;
            if (!known) {
                cl_buf kb = { 0 };
                for (int i = 0; rp_body_keys[i]; i++)
                    cl_buf_printf(&kb, "%s\"%s\"", kb.len ? ", " : "", rp_body_keys[i]);
                for (int i = 0; rp_transport_keys[i]; i++)
                    cl_buf_printf(&kb, ", \"%s\"", rp_transport_keys[i]);
                sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                       "runpod backend_options: unknown key \"%s\" (known: %s)",
                                       k, kb.data ? kb.data : "");
                cl_context(e, "option", "backend_options");
                cl_context(e, "name", k);
                cl_context(e, "known", kb.data ? kb.data : "");
                cl_buf_clear(&kb);
                goto fail;
            }
        }
        if (rp_opts_read(bo, opts, op, error) < 0)
            goto fail;
    }
    if (!rq->allow_internet) {
        rp_refuse(error, "allow_internet", "false", "RunPod pods always reach the internet");
        goto fail;
    }
    if (rq->snapshot_id) {
        rp_refuse(error, "snapshot_id", rq->snapshot_id, "RunPod pods have no snapshots");
        goto fail;
    }
    if ((set & SBX_OPTION_APP_NAME) && rq->app_name) {
        rp_refuse(error, "app_name", rq->app_name, "RunPod has no apps");
        goto fail;
    }
    if (set & SBX_OPTION_CPU) {
        snprintf(buf, sizeof buf, "%g", rq->cpu);
        rp_refuse(error, "cpu", buf, "a RunPod GPU pod's vCPUs follow from its GPU type");
        goto fail;
    }
    if (set & SBX_OPTION_MEMORY_MB) {
        snprintf(buf, sizeof buf, "%lld", (long long)rq->memory_mb);
        rp_refuse(error, "memory_mb", buf, "a RunPod GPU pod's memory follows from its GPU "
                  "type");
        goto fail;
    }
    const char *gpu = rq->gpu && *rq->gpu ? rq->gpu : c->gpu;
    json_object *alt = bo ? cl_json_path(bo, "gpuTypeIds", NULL) : NULL;
    int count = 1;
    if (gpu) {
        if (rp_parse_gpu(gpu, &gtype, &count, error) < 0)
            goto fail;
    } else if (!alt || !json_object_is_type(alt, json_type_array)
               || json_object_array_length(alt) == 0) {
        cl_context(rp_refuse(error, "gpu", NULL, "RunPod pods need a GPU: set gpu "
                             "(\"TYPE[:COUNT]\"), or the backend option gpuTypeIds"),
                   "needs", "gpu");
        goto fail;
    }
    if (!(pub = rp_public_key(opts->key_path, op, error)))
        goto fail;
    b = json_object_new_object();
    /* RunPod's own members first: ours below replace theirs. */
    if (bo) {
        json_object_object_foreach(bo, k, v) {
            if (!rp_is_transport_key(k))
                json_object_object_add(b, k, json_object_get(v));
        }
    }
    const char *tok = ctx && ctx->create_token ? ctx->create_token : NULL;
    snprintf(buf, sizeof buf, "sbx-%.12s", tok ? tok + (strlen(tok) > 12 ? strlen(tok) - 12 : 0)
                                                 : "pod");
    if (!json_object_object_get_ex(b, "name", NULL))
        json_object_object_add(b, "name", json_object_new_string(buf));
    if (rq->template_name)
        json_object_object_add(b, "templateId", json_object_new_string(rq->template_name));
    if (rq->image)
        json_object_object_add(b, "image", json_object_new_string(rq->image));
    else if (!rq->template_name && !json_object_object_get_ex(b, "image", NULL))
        json_object_object_add(b, "image", json_object_new_string(RP_DEFAULT_IMAGE));
    if (gtype) {
        json_object *g = json_object_new_object();
        json_object_object_add(g, "id", json_object_new_string(gtype));
        json_object_object_add(g, "count", json_object_new_int(count));
        json_object_object_add(b, "gpu", g);
    }
    if ((set & SBX_OPTION_DISK_MB) && rq->disk_mb > 0)
        json_object_object_add(b, "disk", json_object_new_int64((rq->disk_mb + 1023) / 1024));
    /* 22/tcp is always published. */
    json_object *ports = cl_json_path(b, "ports", NULL);
    if (!ports || !json_object_is_type(ports, json_type_array)) {
        ports = json_object_new_array();
        json_object_object_add(b, "ports", ports);
    }
    int has22 = 0;
    for (size_t i = 0; i < json_object_array_length(ports); i++) {
        const char *p = json_object_get_string(json_object_array_get_idx(ports, i));
        has22 |= p && strcmp(p, "22/tcp") == 0;
    }
    if (!has22)
        json_object_array_add(ports, json_object_new_string("22/tcp"));
    json_object *env = cl_env_object(rq->env);
    json_object *given = cl_json_path(b, "env", NULL);
    if (given && json_object_is_type(given, json_type_object)) {
        json_object_object_foreach(given, k, v) {
            if (!json_object_object_get_ex(env, k, NULL))
                json_object_object_add(env, k, json_object_get(v));
        }
    }
    json_object_object_add(env, "PUBLIC_KEY", json_object_new_string(pub));
    json_object_object_add(env, RP_ENV_BACKEND, json_object_new_string(RP_BACKEND));
    if (tok)
        json_object_object_add(env, RP_ENV_TOKEN, json_object_new_string(tok));
    snprintf(buf, sizeof buf, "%.0f", rq->expires_at > 0 ? rq->expires_at
                                                        : cl_wallclock() + rq->timeout_secs);
    json_object_object_add(env, RP_ENV_EXPIRES, json_object_new_string(buf));
    json_object_object_add(b, "env", env);
    free(gtype);
    free(pub);
    json_object_put(bo);
    return b;
fail:
    free(gtype);
    free(pub);
    json_object_put(bo);
    json_object_put(b);
    return NULL;
}

/* Looks at the pod once: 1 when RUNNING with an address and port 22
 * mapped (sb->host, sb->port, sb->cost set), 0 not yet, -1 never. */
typedef struct rp_wait {
    struct sbx_plugin_sandbox *sb;
    const sbx_call_ctx *ctx;
    char state[64];
} rp_wait;

static int rp_ready_once(void *ud, const char **state, sbx_error **error)
{
    rp_wait *w = ud;
    struct sbx_plugin_sandbox *sb = w->sb;
    char *url = cl_item_url(sb->c->cl.api, "pods", sb->s.id, "");
    long st = 0;
    sbx_call_ctx one = { sizeof(one), 0, -1, NULL };
    if (w->ctx)
        one = *w->ctx;
    double cap = cl_now() + sb->opts.api_timeout_s;
    if (one.deadline <= 0 || one.deadline > cap)
        one.deadline = cap;
    json_object *j = cl_get_json(sb->c->cl.http, &one, url, &st, "create", "get the pod", error);
    free(url);
    if (!j) {
        if (st == 404) {
            cl_gone_set(&sb->s.gone);
            cl_gone_error(error, "create", RP_BACKEND, sb->s.id);
        }
        return -1;
    }
    const char *s = cl_json_str(j, "status");
    snprintf(w->state, sizeof w->state, "%s", s ? s : "unknown");
    *state = w->state;
    int rc = 0;
    if (s && (strcmp(s, "ERROR") == 0 || strcmp(s, "TERMINATED") == 0
              || strcmp(s, "EXITED") == 0)) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CREATION_FAILED, "create",
                               "runpod pod %s ended while starting (status %s)", sb->s.id, s);
        cl_context(e, "state", s);
        rc = -1;
    } else if (s && strcmp(s, "RUNNING") == 0) {
        json_object *ports = cl_json_path(j, "runtime", "ports", NULL);
        for (size_t i = 0; ports && json_object_is_type(ports, json_type_array)
                           && i < json_object_array_length(ports); i++) {
            json_object *p = json_object_array_get_idx(ports, i);
            int64_t priv = 0, pub = 0;
            const char *ip = cl_json_str(p, "ip");
            if (cl_json_int(p, "privatePort", &priv) != 1)
                cl_json_int(p, "private", &priv);
            if (cl_json_int(p, "publicPort", &pub) != 1)
                cl_json_int(p, "public", &pub);
            if (priv == 22 && pub > 0 && pub < 65536 && ip && *ip) {
                free(sb->host);
                sb->host = strdup(ip);
                sb->port = (int)pub;
                rc = sb->host ? 1 : -1;
                if (!sb->host)
                    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "create", "out of memory");
                break;
            }
        }
        if (rc == 0)
            snprintf(w->state, sizeof w->state, "RUNNING, without a public port for 22");
        json_object *cost = cl_json_path(j, "cost", NULL);
        const char *text = cost && (json_object_is_type(cost, json_type_double)
                                    || json_object_is_type(cost, json_type_int))
                               /* json-c keeps a number's text as written. */
                               ? json_object_to_json_string_ext(cost, JSON_C_TO_STRING_PLAIN)
                               : NULL;
        if (text && json_object_get_double(cost) >= 0 && strlen(text) < sizeof sb->cost_text) {
            sb->cost = json_object_get_double(cost);
            snprintf(sb->cost_text, sizeof sb->cost_text, "%s", text);
        }
    }
    json_object_put(j);
    return rc;
}

/* Polls the pod until it is ready (pauses from 0.05 s, doubling up to
 * poll_interval_secs), bounded by create_timeout_secs and the call's
 * deadline. */
static int rp_wait_ready(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, double until,
                         sbx_error **error)
{
    rp_wait w = { sb, ctx, "unknown" };
    double step = 0.05;
    for (;;) {
        const char *state = NULL;
        int r = rp_ready_once(&w, &state, error);
        if (r != 0)
            return r > 0 ? 0 : -1;
        double mine = until - cl_now();
        cl_bound b = cl_bound_make(ctx, mine > 0 ? mine : 0.001);
        double left = mine > 0 ? cl_bound_left(&b) : 0;
        if (left == 0 || cl_bound_cancelled(&b)) {
            sbx_error *e = cl_fail(error, cl_bound_cancelled(&b) ? SBX_ERROR_CANCELLED
                                                                 : SBX_ERROR_TIMEOUT, "create",
                                   "runpod pod %s was not ready for ssh in time (it is %s)",
                                   sb->s.id, w.state);
            cl_context(e, "state", w.state);
            return -1;
        }
        /* 0.05 s, doubling up to the poll interval: a pod that is quick
         * to run is seen soon, a slow one is not asked about too often. */
        double pause = step < sb->opts.poll_s ? step : sb->opts.poll_s;
        step *= 2;
        if (left > 0 && pause > left)
            pause = left;
        if (cl_sleep(pause, b.cancel_fd))
            continue;
    }
}

/* The ssh handle of @sb at its host and port; @known: a host key line to
 * trust (resume), or NULL. */
static int rp_ssh_open(struct sbx_plugin_sandbox *sb, const char *known, const char *op,
                       sbx_error **error)
{
    rp_ssh_conf conf = {
        .host = sb->host, .port = sb->port, .user = sb->opts.user, .key_path = sb->opts.key_path,
        .connect_timeout_s = sb->opts.ssh_connect_timeout_s, .keepalive_s = 5,
        .strict = sb->opts.strict, .known_hosts = sb->opts.known_hosts, .known_line = known,
    };
    rp_ssh_free(sb->ssh);
    sb->ssh = rp_ssh_new(&conf, op, error);
    return sb->ssh ? 0 : -1;
}

/* The SSH probe: the master connects, retried while the server is not up
 * yet (connection refused), until @until. */
static int rp_probe_ssh(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, double until,
                        sbx_error **error)
{
    for (;;) {
        if (rp_ssh_master(sb->ssh, ctx, "create", NULL) == 0)
            return 0;
        const char *reason = rp_ssh_last_reason();
        int again = (strcmp(reason, "connection_refused") == 0
                     || strcmp(reason, "connection_lost") == 0)
                    && cl_now() + sb->opts.poll_s < until;
        if (!again) {
            cl_last_error l = *cl_last();
            sbx_error *e = cl_fail(error, l.code, "create", "%s", l.msg);
            if (*reason)
                cl_context(e, "reason", reason);
            return -1;
        }
        double mine = until - cl_now();
        cl_bound b = cl_bound_make(ctx, mine > 0 ? mine : 0.001);
        if (mine <= 0 || cl_sleep(sb->opts.poll_s < 0.5 ? sb->opts.poll_s : 0.5, b.cancel_fd)
            || cl_bound_left(&b) == 0) {
            cl_fail(error, SBX_ERROR_TIMEOUT, "create", "runpod pod %s: its ssh server did not "
                    "answer in time", sb->s.id);
            return -1;
        }
    }
}



static int rp_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    rp_opts opts;
    if (rp_opts_copy(&opts, &c->opts) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    double until = cl_now();
    json_object *body = rp_create_body(c, ctx, rq, &opts, error), *j = NULL;
    if (!body) {
        rp_opts_clear(&opts);
        return -1;
    }
    until += opts.create_timeout_s;
    char *url = cl_printf("%s/pods", c->cl.api);
    cl_resp r = { 0 };
    int rc = -1;
    struct sbx_plugin_sandbox *sb = NULL;
    const char *id = NULL;
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (cl_request_json(c->cl.http, ctx, "POST", url, body, CL_UNSAFE, &r, op, "create the pod",
                        NULL) < 0) {
        cl_last_error l = *cl_last();
        sbx_error *err = cl_fail(error, l.code, op, "%s", l.msg);
        if (l.unknown)
            cl_outcome_unknown(err);
        if (ctx && ctx->create_token && l.unknown)
            cl_reap_lost(c->cl.reaper, ctx->create_token);
        goto out;
    }
    if (r.status / 100 != 2) {
        if (r.maybe_acted && ctx && ctx->create_token)
            cl_reap_lost(c->cl.reaper, ctx->create_token);
        cl_fail_status(c->cl.http, error, r.status / 100 == 4 && r.status != 401 && r.status != 403
                                       && r.status != 429 && r.status != 408
                                       ? SBX_ERROR_CONFIGURATION : CL_CODE_BY_STATUS,
                       &r, op, "create the pod");
        goto out;
    }
    j = cl_resp_json(&r, op, "create the pod", error);
    id = j ? cl_json_str(j, "id") : NULL;
    if (!id) {
        if (j)
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "runpod create answered without an id");
        if (ctx && ctx->create_token)
            cl_reap_now(c->cl.reaper, NULL, ctx->create_token, 5.0);
        goto out;
    }
    sb = rp_sandbox_new(c, id);
    if (!sb) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        rp_delete_pod(c, NULL, id, op, NULL);
        goto out;
    }
    sb->opts = opts;
    memset(&opts, 0, sizeof(opts));
    if (rp_wait_ready(sb, ctx, until, error) < 0 || rp_ssh_open(sb, NULL, op, error) < 0
        || rp_probe_ssh(sb, ctx, until, error) < 0)
        goto undo;
    if (sb->cost >= 0)
        CL_LOG(SBX_LOG_INFO, "pod %s runs at %s:%d, %.4f USD/h", id, sb->host, sb->port,
               sb->cost);
    if (rq->env && rq->env[0]) {
        /* The create's env, for every command (also after a resume). */
        char *content = cl_env_file(rq->env);
        int code = -1, fd[2] = { -1, -1 };
        if (!content || pipe2(fd, O_CLOEXEC) < 0) {
            free(content);
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto undo;
        }
        /* Small: fits the pipe. */
        ssize_t w = write(fd[1], content, strlen(content));
        close(fd[1]);
        free(content);
        int wrc = w < 0 ? -1
                        : rp_run(sb, ctx, "umask 077 && cat >\"$HOME/.sbx-env\"", fd[0], -1,
                                 NULL, &code, op, error);
        close(fd[0]);
        if (wrc < 0 || code != 0) {
            if (wrc == 0)
                cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "runpod pod %s: cannot write its "
                        "environment file (exit %d)", id, code);
            goto undo;
        }
    }
    if (cl_create_workdir(sb, &sb->workdir, rp_run_short, ctx, RP_BACKEND, rq->workdir, op,
                          error) < 0)
        goto undo;
    *sandbox = sb;
    rc = 0;
    goto out;
undo:
    {
        /* Nothing left running: the master closes, the pod goes. */
        rp_ssh_free(sb->ssh);
        sb->ssh = NULL;
        int drc = rp_delete_pod(c, NULL, id, op, NULL);
        if (error && *error) {
            cl_context(*error, "sandbox_id", id);
            if (drc < 0)
                cl_context(*error, "cleanup_error", cl_last()->msg);
        }
        rp_sandbox_free(sb);
    }
out:
    rp_opts_clear(&opts);
    json_object_put(body);
    json_object_put(j);
    free(url);
    cl_resp_clear(&r);
    return rc;
}

static int rp_delete(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                     const char *op, sbx_error **error)
{
    return rp_delete_pod(client, ctx, id, op, error);
}

static int rp_destroy(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    /* The master first: it would only see its server go. The handle stays
     * (a command's worker may still hold it) until sandbox_free. */
    rp_ssh_close(sb->ssh);
    return cl_sandbox_destroy(&sb->s, sb->c, rp_delete, ctx, error);
}

static int rp_is_alive(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    static const char *const dead[] = { "TERMINATED", "EXITED", "ERROR", NULL };
    char *url = cl_item_url(sb->c->cl.api, "pods", sb->s.id, "");
    int rc = cl_sandbox_is_alive(&sb->s, sb->c->cl.http, ctx, url, "status", dead, error);
    free(url);
    return rc;
}

/* {"version":1,"pod_id","workdir"?,"known_host"? (the pod's public host
 * key line),"price_usd_per_hour"?,"transport"}: no credential, no env value. */
static char *rp_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    if (rp_check(sb, "session_state", error) < 0)
        return NULL;
    json_object *j = json_object_new_object();
    json_object_object_add(j, "version", json_object_new_int(RP_STATE_VERSION));
    json_object_object_add(j, "pod_id", json_object_new_string(sb->s.id));
    if (sb->workdir)
        json_object_object_add(j, "workdir", json_object_new_string(sb->workdir));
    char *kl = sb->ssh ? rp_ssh_known_line(sb->ssh) : NULL;
    if (kl)
        json_object_object_add(j, "known_host", json_object_new_string(kl));
    free(kl);
    if (sb->cost >= 0)
        json_object_object_add(j, "price_usd_per_hour",
                               json_object_new_double_s(sb->cost, sb->cost_text));
    json_object *t = json_object_new_object();
    json_object_object_add(t, "api_timeout_secs", json_object_new_double(sb->opts.api_timeout_s));
    json_object_object_add(t, "poll_interval_secs", json_object_new_double(sb->opts.poll_s));
    json_object_object_add(t, "ssh_connect_timeout_secs",
                           json_object_new_double(sb->opts.ssh_connect_timeout_s));
    json_object_object_add(t, "create_timeout_secs",
                           json_object_new_double(sb->opts.create_timeout_s));
    /* The key's path and the host key checking are the resuming client's
     * (its config, SBX_RUNPOD_SSH_KEY): the state names no key. */
    if (sb->opts.user)
        json_object_object_add(t, "ssh_user", json_object_new_string(sb->opts.user));
    if (sb->opts.known_hosts)
        json_object_object_add(t, "ssh_known_hosts_file",
                               json_object_new_string(sb->opts.known_hosts));
    json_object_object_add(j, "transport", t);
    char *out = cl_state_out(j, "session_state", error);
    json_object_put(j);
    return out;
}

static int rp_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "resume";
    const char *id = NULL;
    json_object *data = cl_state_in(state_json, RP_STATE_VERSION, "pod_id", RP_BACKEND, op, &id,
                                    error);
    if (!data)
        return -1;
    struct sbx_plugin_client *c = client;
    struct sbx_plugin_sandbox *sb = rp_sandbox_new(c, id);
    int rc = -1;
    if (!sb || rp_opts_copy(&sb->opts, &c->opts) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (rp_opts_read(cl_json_path(data, "transport", NULL), &sb->opts, op, error) < 0)
        goto out;
    const char *wd = cl_json_str(data, "workdir");
    if (wd && (!cl_workdir_ok(wd) || !(sb->workdir = strdup(wd)))) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "runpod session state: bad workdir %s",
                wd);
        goto out;
    }
    rp_wait w = { sb, ctx, "unknown" };
    const char *state = NULL;
    int r = rp_ready_once(&w, &state, NULL);
    if (r != 1) {
        if (r == 0 || cl_gone_get(&sb->s.gone) || strcmp(w.state, "EXITED") == 0
            || strcmp(w.state, "TERMINATED") == 0) {
            cl_context(cl_gone_error(error, op, RP_BACKEND, id), "state", w.state);
        } else {
            cl_last_error l = *cl_last();
            sbx_error *e = cl_fail(error, l.code, op, "%s", l.msg);
            if (l.unknown)
                cl_outcome_unknown(e);
        }
        goto out;
    }
    if (rp_ssh_open(sb, cl_json_str(data, "known_host"), op, error) < 0)
        goto out;
    *sandbox = sb;
    sb = NULL;
    rc = 0;
out:
    rp_sandbox_free(sb);
    json_object_put(data);
    return rc;
}

typedef struct rp_owned {
    sbx_plugin_owned_fn fn;
    void *ud;
} rp_owned;

static int rp_owned_one(void *ud, json_object *it)
{
    rp_owned *o = ud;
    json_object *env = cl_json_path(it, "env", NULL);
    const char *be = cl_json_str(env, RP_ENV_BACKEND);
    const char *tok = cl_json_str(env, RP_ENV_TOKEN);
    const char *exp = cl_json_str(env, RP_ENV_EXPIRES);
    const char *id = cl_json_str(it, "id");
    if (!be || strcmp(be, RP_BACKEND) != 0 || !tok || !id)
        return 0;
    sbx_plugin_owned_info info = { sizeof(info), id, tok, 0, exp ? strtod(exp, NULL) : 0 };
    return o->fn(&info, o->ud);
}

/* The pods this backend made: env SBX_BACKEND=runpod. */
static int rp_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    rp_owned o = { fn, ud };
    return rp_list(client, ctx, rp_owned_one, &o, "list_owned", error);
}

static int rp_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                            sbx_error **error)
{
    return rp_delete_pod(client, ctx, id, "destroy_by_id", error);
}

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

/* The remote script of a command: the create's env file, the per-call
 * env, then @inner in a process marked with @tag. A new string. */
static char *rp_exec_script(const char *const *env, const char *inner, const char *tag)
{
    /* The command's output goes through two relays, so that a background
     * child that keeps it open holds the exec at most RP_RELAY_GRACE_S
     * after the command ended (as Docker's Engine does): the relays are
     * ended then. The environment is set in the command's own subshell
     * only, so that no relay carries it. */
    cl_buf b = { 0 };
    int bad = cl_buf_printf(&b,
                            "d=$1 && mkfifo \"$d/o\" \"$d/e\" || exit 212\n"
                            "cat \"$d/o\" & co=$!\n"
                            "cat \"$d/e\" >&2 & ce=$!\n"
                            "(\n"
                            "[ -r \"%s\" ] && . \"%s\"\n"
                            "export SANDBOX_ROOT=\n", RP_ENV_FILE, RP_ENV_FILE) < 0;
    for (size_t i = 0; env && env[i] && !bad; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq)
            continue;
        char *q = cl_shell_quote(eq + 1);
        bad = !q || cl_buf_printf(&b, "export %.*s=%s\n", (int)(eq - env[i]), env[i], q) < 0;
        free(q);
    }
    char *qi = bad ? NULL : cl_shell_quote(inner);
    bad = bad || !qi
          || cl_buf_printf(&b,
                           CL_EXEC_MARK "=%s exec /bin/sh -c %s\n"
                           ") >\"$d/o\" 2>\"$d/e\"\n"
                           "s=$?\n"
                           "{ sleep " RP_RELAY_GRACE_S "; kill $co $ce; } >/dev/null 2>&1 &\n"
                           "k=$!\n"
                           "wait $co $ce\n"
                           "kill $k 2>/dev/null\n"
                           "exit $s\n", tag, qi) < 0;
    free(qi);
    if (bad) {
        cl_buf_clear(&b);
        return NULL;
    }
    return b.data;
}

static int rp_exec_run(cl_proc *base)
{
    rp_proc *p = (rp_proc *)(void *)base;
    struct sbx_plugin_sandbox *sb = p->sb;
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    rp_ssh_cmd c = { .script = p->script, .tag = p->tag, .in_fd = p->stdin_fd,
                     .out_fd = base->stdout_fd, .err_fd = base->stderr_fd, .stop_fd = -1,
                     .pid_out = &p->pid, .pidfd_out = &p->pidfd, .pid_lock = &p->pid_lock };
    int code = 0;
    if (rp_ssh_run(sb->ssh, &ctx, &c, &code, "exec", NULL) < 0) {
        pthread_mutex_lock(&p->pid_lock);
        int killed = p->killed;
        pthread_mutex_unlock(&p->pid_lock);
        if (killed)
            return 128 + SIGKILL;
        cl_proc_fail_in(base, &sb->s);
        /* The transport's reason (connection_refused, host_key_mismatch,
         * ...), the one context pair exec_wait hands out. */
        if (!cl_gone_get(&sb->s.gone) && *rp_ssh_last_reason())
            cl_proc_context(base, "reason", rp_ssh_last_reason());
        return -1;
    }
    return code;
}

static void rp_proc_free(rp_proc *p)
{
    if (p->stdin_fd >= 0)
        close(p->stdin_fd);
    pthread_mutex_destroy(&p->pid_lock);
    free(p->inner);
    free(p->script);
    free(p);
}

static int rp_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                         sbx_error **error)
{
    const char *op = "exec";
    if (cl_exec_check(&sb->s, RP_BACKEND, rq, 0, error) < 0)
        return -1;
    if (!sb->ssh) {
        cl_gone_error(error, op, RP_BACKEND, sb->s.id);
        return -1;
    }
    if (rp_ssh_master(sb->ssh, ctx, op, error) < 0)
        return -1;
    rp_proc *p = calloc(1, sizeof(*p));
    if (!p) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    p->sb = sb;
    p->stdin_fd = -1;
    p->pidfd = -1;
    pthread_mutex_init(&p->pid_lock, NULL);
    cl_random_hex(p->tag, 16);
    const char *cwd = rq->cwd ? rq->cwd : sb->workdir;
    char *cwd_in = rq->cwd ? rp_path(sb, rq->cwd) : NULL;
    p->inner = cl_shell_script(rq->argv, rq->shell, cwd_in ? cwd_in : cwd);
    free(cwd_in);
    p->script = p->inner ? rp_exec_script(rq->env, p->inner, p->tag) : NULL;
    if (cl_exec_launch(&p->base, rp_exec_run, p, p->script != NULL, rq, &p->stdin_fd, op,
                       error) < 0) {
        rp_proc_free(p);
        return -1;
    }
    *process = (sbx_plugin_process *)p;
    return 0;
}

static int rp_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                        int *exit_code, sbx_error **error)
{
    (void)ctx;
    rp_proc *p = (rp_proc *)(void *)process;
    return cl_exec_wait_script(process, p->sb, p->inner, rp_run_short, timeout_ms, exit_code,
                               error);
}

static int rp_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                        sbx_error **error)
{
    rp_proc *p = (rp_proc *)(void *)process;
    int rc = cl_proc_mark_kill(&p->base, p->sb, rp_run_short, ctx, p->tag, sig, error);
    if (rc < 0 && sig == SIGKILL) {
        /* The remote cannot be reached: the local end goes, so that the
         * command ends here. */
        pthread_mutex_lock(&p->pid_lock);
        if (p->pidfd >= 0 && syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) == 0)
            p->killed = 1;
        pthread_mutex_unlock(&p->pid_lock);
    }
    return rc;
}

static void rp_exec_free(sbx_plugin_process *process)
{
    rp_proc *p = (rp_proc *)(void *)process;
    if (!p)
        return;
    pthread_mutex_lock(&p->base.lock);
    int ended = p->base.ended;
    pthread_mutex_unlock(&p->base.lock);
    if (!ended) {
        sbx_call_ctx ctx = { sizeof(ctx), cl_now() + 5, -1, NULL };
        cl_proc_mark_kill(&p->base, p->sb, rp_run_short, &ctx, p->tag, SIGKILL, NULL);
        pthread_mutex_lock(&p->pid_lock);
        p->killed = 1;
        pthread_mutex_unlock(&p->pid_lock);
    }
    cl_proc_clear(&p->base);
    rp_proc_free(p);
}

/* ------------------------------------------------------------------------ */
/* Files                                                                     */
/* ------------------------------------------------------------------------ */

/* Runs a file script @fmt (with the quoted path as its every %1$s) on @sb. */
static int rp_file_script(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                          const char *path, const char *script_fmt, int in_fd, int out_fd,
                          const char *kind, const char *op, sbx_error **error)
{
    if (rp_check(sb, op, error) < 0)
        return -1;
    if (!sb->ssh) {
        cl_gone_error(error, op, RP_BACKEND, sb->s.id);
        return -1;
    }
    char *full = rp_path(sb, path);
    char *q = full ? cl_shell_quote_path(full) : NULL;
    char *script = NULL;
    if (!q || asprintf(&script, script_fmt, q) < 0)
        script = NULL;
    cl_buf err = { 0 };
    int code = 0, rc = -1;
    if (!script)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (rp_run(sb, ctx, script, in_fd, out_fd, &err, &code, op, error) == 0)
        rc = code == 0 ? 0 : rp_file_fail(code, path, &err, kind, op, error);
    cl_buf_clear(&err);
    free(script);
    free(q);
    free(full);
    return rc;
}

static int rp_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    return rp_file_script(sb, ctx, path,
                          "p=%1$s; [ -d \"$p\" ] && exit 4; [ -e \"$p\" ] || exit 3; "
                          "exec cat -- \"$p\"",
                          -1, fd, "a directory", "read_file", error);
}

static int rp_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         int fd, uint32_t mode, sbx_error **error)
{
    char fmt[512];
    snprintf(fmt, sizeof fmt,
             "p=%%1$s; [ -d \"$p\" ] && exit 4; d=$(dirname -- \"$p\") && mkdir -p -- \"$d\" "
             "&& t=$(mktemp \"$d/.sbx-w.XXXXXX\") || exit 1; "
             "if cat >\"$t\" && chmod %o -- \"$t\" && mv -f -- \"$t\" \"$p\"; then exit 0; fi; "
             "rm -f -- \"$t\"; exit 1",
             (unsigned)(mode & 07777));
    return rp_file_script(sb, ctx, path, fmt, fd, -1, "a directory", "write_file", error);
}

static int rp_upload_tar(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         int fd, sbx_error **error)
{
    return rp_file_script(sb, ctx, path,
                          "p=%1$s; [ -e \"$p\" ] && ! [ -d \"$p\" ] && exit 4; "
                          "mkdir -p -- \"$p\" && exec tar -x -f - -C \"$p\" --no-same-owner",
                          fd, -1, "not a directory", "upload_tar", error);
}

static int rp_download_tar(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                           int fd, sbx_error **error)
{
    return rp_file_script(sb, ctx, path,
                          "p=%1$s; [ -e \"$p\" ] || exit 3; [ -d \"$p\" ] || exit 4; "
                          "cd -- \"$p\" && find . -mindepth 1 -maxdepth 1 -printf '%%P\\0' "
                          "| LC_ALL=C sort -z | exec tar -c -f - --null -T -",
                          -1, fd, "not a directory", "download_tar", error);
}

/* The listing: one record per entry, "TYPE SIZE MODE NAME\0". */
typedef struct rp_list_ctx {
    sbx_plugin_file_fn fn;
    void *ud;
    int stop;
} rp_list_ctx;

static int rp_parse_entries(const char *data, size_t len, sbx_plugin_file_fn fn, void *ud)
{
    size_t i = 0;
    while (i < len) {
        const char *rec = data + i;
        size_t n = strnlen(rec, len - i);
        char type = 0;
        long long size = -1;
        unsigned mode = 0;
        int off = 0;
        char tmp[64];
        size_t hl = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
        memcpy(tmp, rec, hl);
        tmp[hl] = '\0';
        if (sscanf(tmp, "%c %lld %o %n", &type, &size, &mode, &off) >= 3 && off > 0
            && (size_t)off <= n) {
            char *name = strndup(rec + off, n - (size_t)off);
            if (name) {
                sbx_plugin_file_info info = { sizeof(info), name, type == 'd', size, mode };
                int stop = fn(&info, ud);
                free(name);
                if (stop)
                    return 1;
            }
        }
        i += n + 1;
    }
    return 0;
}

static int rp_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    if (rp_check(sb, op, error) < 0)
        return -1;
    char *full = rp_path(sb, path && *path ? path : ".");
    char *q = full ? cl_shell_quote_path(full) : NULL;
    char *script = q ? cl_printf("p=%s; [ -e \"$p\" ] || exit 3; [ -d \"$p\" ] || exit 4; "
                                 "cd -- \"$p\" && exec find . -mindepth 1 -maxdepth 1 "
                                 "-printf '%%y %%s %%m %%P\\0'", q)
                     : NULL;
    free(q);
    free(full);
    if (!script) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int rc = -1, code = 0;
    cl_buf out = { 0 }, err = { 0 };
    if (rp_ssh_master(sb->ssh, ctx, op, error) == 0) {
        char tag[40];
        cl_random_hex(tag, 16);
        rp_ssh_cmd c = { .script = script, .tag = tag, .in_fd = -1, .out_fd = -1, .err_fd = -1,
                         .out_buf = &out, .err_buf = &err, .buf_max = 256u << 20,
                         .stop_fd = -1 };
        if (rp_ssh_run(sb->ssh, ctx, &c, &code, op, error) > 0) {
            if (code != 0) {
                rp_file_fail(code, path, &err, "not a directory", op, error);
            } else {
                rp_parse_entries(out.data ? out.data : "", out.len, fn, ud);
                rc = 0;
            }
        }
    }
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    free(script);
    return rc;
}

typedef struct rp_stat_one {
    sbx_plugin_file_info *info;
    int found;
    char name[4096];
} rp_stat_one;

static int rp_stat_cb(const sbx_plugin_file_info *fi, void *ud)
{
    rp_stat_one *s = ud;
    s->info->is_dir = fi->is_dir;
    s->info->size = fi->size;
    s->info->mode = fi->mode;
    snprintf(s->name, sizeof s->name, "%s", fi->name);
    s->found = 1;
    return 1;
}

static int rp_stat_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                        sbx_plugin_file_info *info, sbx_error **error)
{
    const char *op = "stat_file";
    if (rp_check(sb, op, error) < 0)
        return -1;
    char *full = rp_path(sb, path);
    char *q = full ? cl_shell_quote_path(full) : NULL;
    char *script = q ? cl_printf("p=%s; [ -e \"$p\" ] || [ -L \"$p\" ] || exit 3; "
                                 "exec find \"$p\" -maxdepth 0 -printf '%%y %%s %%m %%f\\0'", q)
                     : NULL;
    free(q);
    free(full);
    if (!script) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int rc = -1, code = 0;
    cl_buf out = { 0 }, err = { 0 };
    if (rp_ssh_master(sb->ssh, ctx, op, error) == 0) {
        char tag[40];
        cl_random_hex(tag, 16);
        rp_ssh_cmd c = { .script = script, .tag = tag, .in_fd = -1, .out_fd = -1, .err_fd = -1,
                         .out_buf = &out, .err_buf = &err, .stop_fd = -1 };
        if (rp_ssh_run(sb->ssh, ctx, &c, &code, op, error) > 0) {
            rp_stat_one s = { info, 0, "" };
            if (code == 0)
                rp_parse_entries(out.data ? out.data : "", out.len, rp_stat_cb, &s);
            if (code != 0 || !s.found) {
                rp_file_fail(code ? code : 3, path, &err, "", op, error);
            } else {
                snprintf(sb->stat_name, sizeof sb->stat_name, "%s", s.name);
                info->name = sb->stat_name;
                rc = 0;
            }
        }
    }
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    free(script);
    return rc;
}

/* ------------------------------------------------------------------------ */

static const sbx_plugin rp_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .name = RP_BACKEND,
    .version = PACKAGE_VERSION,
    .description = "RunPod GPU pods: lifecycle over REST v2 (libcurl), commands and files "
                   "over the system's OpenSSH client (one control master per pod)",
    .caps = RP_CAPS,
    .setup = rp_setup,
    .client_new = rp_client_new,
    .client_free = cl_client_free_slot,
    .probe = rp_probe,
    .create = rp_create,
    .resume = rp_resume,
    .session_state = rp_session_state,
    .destroy = rp_destroy,
    .is_alive = rp_is_alive,
    .sandbox_free = rp_sandbox_free,
    .sandbox_id = cl_sandbox_id,
    .sandbox_root = cl_sandbox_root,
    .exec_start = rp_exec_start,
    .exec_wait = rp_exec_wait,
    .exec_event_fd = cl_exec_event_fd,
    .exec_kill = rp_exec_kill,
    .exec_free = rp_exec_free,
    .list_files = rp_list_files,
    .read_file = rp_read_file,
    .write_file = rp_write_file,
    .upload_tar = rp_upload_tar,
    .download_tar = rp_download_tar,
    .stat_file = rp_stat_file,
    .list_owned = rp_list_owned,
    .destroy_by_id = rp_destroy_by_id,
};

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
    return &rp_plugin;
}
