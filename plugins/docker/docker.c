/*
 * docker.c — libsbx-docker.so, the `docker` backend: a sandbox is a
 * container on a Docker Engine (engine.c says how the plugin talks to it).
 *
 * create:
 *  - the image: the request's image, else a snapshot id, else
 *    $SBX_DOCKER_IMAGE (or the client config's "image"), else
 *    python:3.12-slim. A missing image is pulled (POST /images/create); the
 *    pull's NDJSON body is read line by line and an error line in it fails
 *    the create with the Engine's text (CASE-28), before any container is
 *    made. When stderr is a terminal, one progress line there shows the
 *    layers done and the bytes downloaded (progress.c), rewritten as they
 *    move.
 *  - POST /containers/create?name=<create token>: Entrypoint ["sleep"],
 *    Cmd [ceil(timeout_secs) + 30], so that the container ends by itself
 *    30 s after the sandbox's lifetime ran out (the grace lets an exec that
 *    used the whole default timeout end as timed out), and AutoRemove
 *    removes it then: a lost client cannot leak it. Init: true (the Engine's init
 *    reaps orphans). cpu -> NanoCpus, memory_mb -> Memory = MemorySwap,
 *    PidsLimit 4096, allow_internet=0 -> NetworkMode none (else the client's
 *    network mode, or the Engine's default), env (plus SANDBOX_ROOT=""),
 *    workdir (absolute; the Engine creates it when missing), disk_mb ->
 *    StorageOpt size (only some storage drivers allow it: a refusal is a
 *    configuration error naming disk_mb), labels sbx.backend=docker,
 *    sbx.create_token, sbx.expires_at (UNIX seconds: the time the body is
 *    made, after any pull, plus timeout_secs; the lifetime counts from when
 *    the sandbox is usable), and backend_options merged into the
 *    body last (objects merged key by key; the sbx.* labels stay); a key
 *    of backend_options that is not a member of the Engine's create body
 *    (dk_option_keys) is a configuration error naming it.
 *  - ports (sbx_options_add_port) -> ExposedPorts and HostConfig.PortBindings
 *    {"PORT/tcp":[{"HostIp":"127.0.0.1","HostPort":""}]}: published on the
 *    loopback address only, on a host port the Engine picks; a binding on
 *    any other address (backend_options included; an empty HostIp is every
 *    interface) is a configuration error; with allow_internet=0 (no
 *    network) ports are feature_not_supported. resolve_port / list_ports
 *    read NetworkSettings.Ports of the container; ports are fixed at
 *    create (no expose_port / unexpose_port: the Engine cannot publish or
 *    withdraw a port of a running container).
 *  - POST /containers/{id}/start. Any failure after the container exists
 *    removes it; a create whose answer was lost removes it by name.
 *
 * session_state: {"container":ID,"workdir":DIR} (no env values: the
 * container keeps them). resume: inspect (labels checked, must run).
 * snapshot: POST /commit (pause) -> the image id ("sha256:..."), usable as
 * snapshot_id or image; the image is tagged sbx-snapshot:<id>-<ms> and
 * labelled sbx.backend=docker, sbx.snapshot_of=<container id>; it keeps the
 * container's configuration (environment included). destroy: DELETE
 * ?force=1&v=1. list_owned: containers with the sbx labels, any state.
 */
#include "docker.h"
#include "progress.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define DOCKER_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_DIR_TRANSFER \
                     | SBX_CAP_SNAPSHOT | SBX_CAP_RESUME | SBX_CAP_ISOLATION               \
                     | SBX_CAP_NETWORK_POLICY | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT     \
                     | SBX_CAP_IMAGE | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED                \
                     | SBX_CAP_BACKGROUND | SBX_CAP_PTY | SBX_CAP_EXPOSED_PORTS             \
                     | SBX_CAP_EXEC_STDIN_STREAM | SBX_CAP_USER)

/* The keys backend_options may have: the members of the Engine's
 * POST /containers/create body (ContainerConfig, HostConfig and
 * NetworkingConfig), merged into the body sbx makes. */
static const char *const dk_option_keys[] = {
    "Hostname", "Domainname", "User", "AttachStdin", "AttachStdout", "AttachStderr",
    "ExposedPorts", "Tty", "OpenStdin", "StdinOnce", "Env", "Cmd", "Healthcheck",
    "ArgsEscaped", "Image", "Volumes", "WorkingDir", "Entrypoint", "NetworkDisabled",
    "MacAddress", "OnBuild", "Labels", "StopSignal", "StopTimeout", "Shell", "HostConfig",
    "NetworkingConfig", NULL
};

#define PIDS_LIMIT 4096
/* The container's main process ends this long after the sandbox's lifetime:
 * an exec that used the whole default timeout (= timeout_secs) is then
 * timed out by the library (124, its tree killed), not cut short by the
 * container's end. */
#define LIFETIME_GRACE_SECS 30
#define API_SECS 60.0           /* ordinary calls */
#define CREATE_SECS 120.0       /* container create + start */
#define PULL_SECS 1800.0
#define COMMIT_SECS 600.0
#define DESTROY_SECS 60.0
#define CLEANUP_SECS 30.0

/* ------------------------------------------------------------------------ */
/* Sandbox helpers shared with exec.c and files.c                            */
/* ------------------------------------------------------------------------ */

int dk_sandbox_check(struct sbx_plugin_sandbox *sb, const char *op, sbx_error **error)
{
    char ended[512] = "";
    pthread_mutex_lock(&sb->lock);
    int d = sb->destroyed;
    if (sb->ended)
        snprintf(ended, sizeof(ended), "%s", sb->ended);
    pthread_mutex_unlock(&sb->lock);
    if (!d && !ended[0])
        return 0;
    if (ended[0]) {
        /* It ended by itself (its memory limit): every later call says so. */
        sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "%s", ended);
        cl_context(err, "sandbox_id", sb->id);
        cl_context(err, "reason", "oom_killed");
        return -1;
    }
    sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %.12s was destroyed",
                             sb->id);
    cl_context(err, "sandbox_id", sb->id);
    return -1;
}

char *dk_sandbox_path(struct sbx_plugin_sandbox *sb, const char *path, const char *op,
                      sbx_error **error)
{
    if (!path || !*path) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "empty path");
        return NULL;
    }
    char *s;
    if (path[0] == '/')
        s = strdup(path);
    else if (asprintf(&s, "%s%s%s", sb->workdir,
                      sb->workdir[strlen(sb->workdir) - 1] == '/' ? "" : "/", path) < 0)
        s = NULL;
    if (!s)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return s;
}

sbx_error *dk_fail_container(sbx_error **error, struct sbx_plugin_sandbox *sb,
                             const dk_resp *r, sbx_error_code code, const char *op,
                             const char *what)
{
    char *msg = dk_resp_message(r);
    sbx_error *err = NULL;
    if (r->status == 404 && msg && strstr(msg, "No such container")) {
        err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %.12s no longer exists (%s)",
                      sb->id, msg);
    } else if (r->status == 409 && msg && strstr(msg, "is not running")) {
        err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                      "sandbox %.12s is not running (its lifetime ended?): %s", sb->id, msg);
    } else {
        free(msg);
        return dk_fail_resp(error, code, r, op, what);
    }
    cl_context(err, "sandbox_id", sb->id);
    free(msg);
    return err;
}

/* ------------------------------------------------------------------------ */
/* Plugin and client                                                         */
/* ------------------------------------------------------------------------ */

static int docker_setup(const sbx_host_services *services, sbx_error **error)
{
    if (!services || services->struct_size < offsetof(sbx_host_services, free) + sizeof(void *)
        || !services->set_error)
        return -1;
    return cl_setup(services, DK_BACKEND, error);
}

/* A string member of the client config, or NULL; -1 when of another type. */
static int config_string(json_object *cfg, const char *key, const char **out,
                         sbx_error **error)
{
    json_object *v;
    *out = NULL;
    if (!cfg || !json_object_object_get_ex(cfg, key, &v))
        return 0;
    if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0) {
        sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                                 "docker backend config: \"%s\" must be a non-empty string",
                                 key);
        cl_context(err, "option", key);
        return -1;
    }
    *out = json_object_get_string(v);
    return 0;
}

static void client_release(struct sbx_plugin_client *c)
{
    if (!c)
        return;
    if (c->base)
        dk_engine_free(c);
    free(c->image);
    free(c->network);
    free(c);
}

static int docker_client_new(const char *config_json, sbx_plugin_client **client,
                             sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg = NULL;
    const char *host = NULL, *image = NULL, *network = NULL;
    struct sbx_plugin_client *c = NULL;
    if (config_json && *config_json) {
        cfg = json_tokener_parse(config_json);
        if (!cfg || !json_object_is_type(cfg, json_type_object)) {
            cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                    "docker backend config is not a JSON object");
            goto fail;
        }
        json_object_object_foreach(cfg, key, val) {
            (void)val;
            if (strcmp(key, "host") && strcmp(key, "image") && strcmp(key, "network_mode")) {
                sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                         "docker backend config: unknown key \"%s\" (known: "
                                         "host, image, network_mode)", key);
                cl_context(err, "option", key);
                goto fail;
            }
        }
        if (config_string(cfg, "host", &host, error) < 0
            || config_string(cfg, "image", &image, error) < 0
            || config_string(cfg, "network_mode", &network, error) < 0)
            goto fail;
    }
    if (!host)
        host = getenv("DOCKER_HOST");
    if (!image || !*image)
        image = getenv("SBX_DOCKER_IMAGE");
    if (!image || !*image)
        image = DK_DEFAULT_IMAGE;
    if (!network || !*network)
        network = getenv("SBX_DOCKER_NETWORK");
    c = calloc(1, sizeof(*c));
    if (!c)
        goto nomem;
    if (dk_engine_init(c, host, error) < 0) {
        free(c->host_shown);
        free(c->sock);
        free(c->base);
        free(c->host_header);
        c->base = NULL;
        goto fail;
    }
    c->image = strdup(image);
    if (!c->image || (network && *network && !(c->network = strdup(network))))
        goto nomem;
    json_object_put(cfg);
    *client = c;
    return 0;
nomem:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    client_release(c);
    json_object_put(cfg);
    return -1;
}

static void docker_client_free(sbx_plugin_client *client)
{
    client_release(client);
}

static int docker_probe(sbx_plugin_client *client, const sbx_call_ctx *ctx, uint64_t *caps,
                        sbx_error **error)
{
    dk_req req = { .method = "GET", .path = "/_ping", .unversioned = 1, .secs = 10.0 };
    dk_resp r;
    if (dk_request(client, ctx, &req, &r, "probe", error) < 0)
        return -1;
    int ok = r.status == 200;
    if (!ok)
        dk_fail_resp(error, SBX_ERROR_CONNECTION, &r, "probe",
                     "the Docker Engine did not answer /_ping");
    dk_resp_clear(&r);
    if (!ok || dk_engine_ready(client, ctx, "probe", error) < 0)
        return -1;
    *caps = DOCKER_CAPS;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Images                                                                    */
/* ------------------------------------------------------------------------ */

/* An image reference or id: [A-Za-z0-9._/:@-], not starting with '-'. */
static int image_ref_ok(const char *s)
{
    if (!s || !*s || *s == '-' || strlen(s) > 512)
        return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._/:@-", *p))
            return 0;
    return 1;
}

/* GET /images/{ref}/json: 1 present (WorkingDir stored), 0 missing, -1. */
static int image_inspect(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                         const char *ref, char **workdir, const char *op, sbx_error **error)
{
    char *path;
    if (asprintf(&path, "/images/%s/json", ref) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "GET", .path = path, .secs = API_SECS };
    dk_resp r;
    int rc = dk_request(c, ctx, &req, &r, op, error);
    free(path);
    if (rc < 0)
        return -1;
    if (r.status == 404) {
        dk_resp_clear(&r);
        return 0;
    }
    if (r.status != 200) {
        sbx_error *err = dk_fail_resp(error, SBX_ERROR_CREATION_FAILED, &r, op,
                                      "cannot inspect the image");
        cl_context(err, "image", ref);
        dk_resp_clear(&r);
        return -1;
    }
    json_object *j = dk_resp_json(&r, op, error), *cfg, *wd;
    dk_resp_clear(&r);
    if (!j)
        return -1;
    if (workdir && json_object_object_get_ex(j, "Config", &cfg)
        && json_object_object_get_ex(cfg, "WorkingDir", &wd)
        && json_object_is_type(wd, json_type_string) && json_object_get_string(wd)[0] == '/')
        *workdir = strdup(json_object_get_string(wd));
    json_object_put(j);
    return 1;
}

typedef struct pull_state {
    const char *image;
    cl_buf line;
    char *error;            /* the first error line's message */
    char *last_status;
    int tty;
    dk_pull_progress progress;  /* the summary line shown on a terminal */
    int shown;              /* a summary line is on the terminal */
} pull_state;

static void pull_line(pull_state *ps, const char *text)
{
    json_object *j = json_tokener_parse(text), *v, *d;
    if (!j)
        return;
    if (!ps->error) {
        const char *msg = NULL;
        if (json_object_object_get_ex(j, "errorDetail", &d)
            && json_object_object_get_ex(d, "message", &v)
            && json_object_is_type(v, json_type_string))
            msg = json_object_get_string(v);
        else if (json_object_object_get_ex(j, "error", &v)
                 && json_object_is_type(v, json_type_string))
            msg = json_object_get_string(v);
        if (msg)
            ps->error = strdup(msg);
    }
    /* On a terminal: one line, rewritten as layers and bytes move. */
    if (ps->tty && dk_pull_progress_feed(&ps->progress, text) == 1) {
        fprintf(stderr, "\rdocker: %s\033[K", ps->progress.line);
        fflush(stderr);
        ps->shown = 1;
    }
    if (json_object_object_get_ex(j, "status", &v) && json_object_is_type(v, json_type_string)) {
        const char *st = json_object_get_string(v), *id = "";
        json_object *idv;
        if (json_object_object_get_ex(j, "id", &idv) && json_object_is_type(idv, json_type_string))
            id = json_object_get_string(idv);
        char *key;
        if (asprintf(&key, "%s %s", id, st) >= 0) {
            if (!ps->last_status || strcmp(ps->last_status, key) != 0) {
                CL_LOG(SBX_LOG_DEBUG, "pull %s: %s", ps->image, key);
                free(ps->last_status);
                ps->last_status = key;
            } else {
                free(key);
            }
        }
    }
    json_object_put(j);
}

static int pull_sink(void *ud, const char *p, size_t n)
{
    pull_state *ps = ud;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (ps->line.len)
                pull_line(ps, ps->line.data);
            ps->line.len = 0;
            if (ps->line.data)
                ps->line.data[0] = '\0';
        } else if (ps->line.len < ((size_t)1 << 20)) {
            if (cl_buf_append(&ps->line, p + i, 1) < 0)
                return -1;
        }
    }
    return 0;
}

/* Pulls @ref (POST /images/create), reading every NDJSON line for errors. */
static int image_pull(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *ref,
                      const char *op, sbx_error **error)
{
    char *repo = NULL, *tag = NULL, *erepo = NULL, *etag = NULL, *path = NULL;
    pull_state ps = { .image = ref, .tty = isatty(STDERR_FILENO) };
    ps.progress.image = ref;
    int rc = -1;
    const char *at = strchr(ref, '@'), *slash = strrchr(ref, '/');
    const char *colon = strrchr(ref, ':');
    if (at) {
        repo = strndup(ref, (size_t)(at - ref));
        tag = strdup(at + 1);
    } else if (colon && (!slash || colon > slash)) {
        repo = strndup(ref, (size_t)(colon - ref));
        tag = strdup(colon + 1);
    } else {
        repo = strdup(ref);
        tag = strdup("latest");
    }
    if (!repo || !tag || !(erepo = cl_url_escape(repo)) || !(etag = cl_url_escape(tag))
        || asprintf(&path, "/images/create?fromImage=%s&tag=%s", erepo, etag) < 0) {
        path = NULL;
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    CL_LOG(SBX_LOG_INFO, "pulling image %s", ref);
    if (ps.tty)
        fprintf(stderr, "docker: image %s is not here; pulling it\n", ref);
    dk_req req = { .method = "POST", .path = path, .sink = pull_sink, .sink_ud = &ps,
                   .secs = PULL_SECS };
    dk_resp r;
    if (dk_request(c, ctx, &req, &r, op, error) < 0)
        goto out;
    if (ps.line.len)
        pull_line(&ps, ps.line.data);
    if (r.status != 200) {
        char *msg = dk_resp_message(&r);
        sbx_error *err = cl_fail(error, SBX_ERROR_CREATION_FAILED, op,
                                 "cannot pull image \"%s\": %s (HTTP %ld)", ref,
                                 msg && *msg ? msg : "no message", r.status);
        cl_context(err, "image", ref);
        cl_context(err, "step", "image_pull");
        free(msg);
    } else if (ps.error) {
        sbx_error *err = cl_fail(error, SBX_ERROR_CREATION_FAILED, op,
                                 "cannot pull image \"%s\": %s", ref, ps.error);
        cl_context(err, "image", ref);
        cl_context(err, "step", "image_pull");
    } else {
        rc = 0;
    }
    dk_resp_clear(&r);
out:
    free(repo);
    free(tag);
    free(erepo);
    free(etag);
    free(path);
    if (ps.shown)
        fputc('\n', stderr);   /* the summary line stays, finished */
    dk_pull_progress_clear(&ps.progress);
    cl_buf_clear(&ps.line);
    free(ps.error);
    free(ps.last_status);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

static struct sbx_plugin_sandbox *sandbox_new(struct sbx_plugin_client *c, const char *id,
                                              const char *workdir)
{
    struct sbx_plugin_sandbox *sb = calloc(1, sizeof(*sb));
    if (!sb)
        return NULL;
    sb->client = c;
    sb->id = strdup(id);
    sb->workdir = strdup(workdir && *workdir ? workdir : "/");
    pthread_mutex_init(&sb->lock, NULL);
    if (!sb->id || !sb->workdir) {
        free(sb->id);
        free(sb->workdir);
        pthread_mutex_destroy(&sb->lock);
        free(sb);
        return NULL;
    }
    return sb;
}

static void docker_sandbox_free(sbx_plugin_sandbox *sandbox)
{
    if (!sandbox)
        return;
    pthread_mutex_destroy(&sandbox->lock);
    free(sandbox->id);
    free(sandbox->workdir);
    free(sandbox->stat_name);
    free(sandbox->ended);
    free(sandbox);
}

/* DELETE /containers/{id}?force=1&v=1; waits out a removal in progress.
 * 0 when the container is gone. */
static int remove_container(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                            const char *id, const char *op, sbx_error **error)
{
    char *path, *epath;
    if (asprintf(&path, "/containers/%s?force=1&v=1", id) < 0
        || asprintf(&epath, "/containers/%s/json", id) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_bound b = dk_bound_make(ctx, DESTROY_SECS);
    int rc = -1;
    dk_req req = { .method = "DELETE", .path = path, .secs = DESTROY_SECS,
                   .outcome_unknown_on_fail = 1 };
    dk_resp r;
    if (dk_request(c, ctx, &req, &r, op, error) < 0)
        goto out;
    if (r.status == 204 || r.status == 200 || r.status == 404) {
        rc = 0;
    } else if (r.status == 409) {
        /* "removal of container ... is already in progress" (AutoRemove). */
        for (;;) {
            dk_resp ir;
            dk_req ireq = { .method = "GET", .path = epath, .secs = 10.0 };
            if (dk_request(c, ctx, &ireq, &ir, op, error) < 0)
                break;
            long st = ir.status;
            dk_resp_clear(&ir);
            if (st == 404) {
                rc = 0;
                break;
            }
            if (dk_bound_ms(&b, -1) == 0) {
                sbx_error *err = dk_fail_resp(error, SBX_ERROR_TIMEOUT, &r, op,
                                              "the container is still being removed");
                cl_outcome_unknown(err);
                break;
            }
            dk_sleep_ms(50);
        }
    } else {
        sbx_error *err = dk_fail_resp(error, DK_CODE_BY_STATUS, &r, op,
                                      "cannot remove the container");
        cl_context(err, "sandbox_id", id);
    }
    dk_resp_clear(&r);
out:
    free(path);
    free(epath);
    return rc;
}

/* Best-effort removal after a failed create (its own time bound). */
static void cleanup_container(struct sbx_plugin_client *c, const char *id_or_name)
{
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .deadline = cl_now() + CLEANUP_SECS,
                         .cancel_fd = -1 };
    if (remove_container(c, &ctx, id_or_name, "create", NULL) < 0)
        CL_LOG(SBX_LOG_WARNING, "could not remove container %s after a failed create: %s",
               id_or_name, cl_last()->msg);
}

/* Merges object @over into object @base, key by key (objects recursively). */
static void json_merge(json_object *base, json_object *over)
{
    json_object_object_foreach(over, key, val) {
        json_object *cur;
        if (json_object_is_type(val, json_type_object)
            && json_object_object_get_ex(base, key, &cur)
            && json_object_is_type(cur, json_type_object)) {
            json_merge(cur, val);
        } else {
            json_object_object_add(base, key, json_object_get(val));
        }
    }
}

/* Which option an Engine refusal of the create body is about. */
static const char *refused_option(const char *msg)
{
    if (!msg)
        return NULL;
    if (strstr(msg, "storage-opt") || strstr(msg, "StorageOpt") || strstr(msg, "storage opt"))
        return "disk_mb";
    if (strstr(msg, "emory"))
        return "memory_mb";
    if (strstr(msg, "CPU") || strstr(msg, "cpu") || strstr(msg, "Cpu"))
        return "cpu";
    if (strstr(msg, "etwork"))
        return "allow_internet";
    return NULL;
}

/* Refuses a body whose HostConfig.PortBindings (backend_options may set
 * them) publish a port on an address other than 127.0.0.1: an empty HostIp
 * is every interface, 0.0.0.0 too. 0, or -1 with a configuration error
 * naming the binding. */
static int check_port_bindings(json_object *body, const char *op, sbx_error **error)
{
    json_object *hc, *pb;
    if (!json_object_object_get_ex(body, "HostConfig", &hc)
        || !json_object_object_get_ex(hc, "PortBindings", &pb) || !pb)
        return 0;
    if (!json_object_is_type(pb, json_type_object))
        goto bad_shape;
    json_object_object_foreach(pb, key, arr) {
        if (!arr)
            continue;
        if (!json_object_is_type(arr, json_type_array))
            goto bad_shape;
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
            json_object *b = json_object_array_get_idx(arr, i), *ip = NULL;
            const char *addr = b && json_object_object_get_ex(b, "HostIp", &ip)
                               && json_object_is_type(ip, json_type_string)
                               ? json_object_get_string(ip) : "";
            if (strcmp(addr, "127.0.0.1") == 0)
                continue;
            sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                     "docker backend: port %s would be published on \"%s\" "
                                     "(every interface when empty); sandbox ports are "
                                     "published on 127.0.0.1 only", key, addr);
            cl_context(err, "option", "backend_options");
            cl_context(err, "port", key);
            return -1;
        }
    }
    return 0;
bad_shape:
    cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                       "docker backend: HostConfig.PortBindings is not an object of arrays"),
               "option", "backend_options");
    return -1;
}

static int docker_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         const sbx_plugin_create_request *request,
                         sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    json_object *body = NULL, *hc = NULL, *labels = NULL, *env = NULL, *extra = NULL;
    char *image_wd = NULL, *path = NULL, *id = NULL, *name = NULL;
    int made = 0, rc = -1;
    char num[64];

    if (!request || request->struct_size < offsetof(sbx_plugin_create_request, expires_at)
                                           + sizeof(request->expires_at)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "create request missing or too short");
        return -1;
    }
    int v2 = request->struct_size >= offsetof(sbx_plugin_create_request, backend_options)
                                     + sizeof(request->backend_options);
    const char *image = v2 && request->image ? request->image : NULL;
    const char *snapshot = v2 ? request->snapshot_id : NULL;
    if (image && snapshot) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "set image (\"%s\") or snapshot_id (\"%s\"), not both", image,
                                 snapshot);
        cl_context(err, "option", "snapshot_id");
        return -1;
    }
    if (!image)
        image = snapshot ? snapshot : c->image;
    if (!image_ref_ok(image)) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "\"%s\" is not a Docker image reference",
                                 image ? image : "");
        cl_context(err, "option", snapshot ? "snapshot_id" : "image");
        cl_context(err, "value", image ? image : "");
        return -1;
    }
    if (v2) {
        static const struct { uint64_t bit; const char *name; const char *why; } refused[] = {
            { SBX_OPTION_TEMPLATE, "template", "Docker has images, not templates; set image" },
            { SBX_OPTION_APP_NAME, "app_name", "Docker has no application grouping" },
            { SBX_OPTION_GPU, "gpu", "GPUs are not supported by the docker backend" },
        };
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
            if (!(request->set_fields & refused[i].bit))
                continue;
            sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                     "docker backend: option %s is not supported (%s)",
                                     refused[i].name, refused[i].why);
            cl_context(err, "option", refused[i].name);
            return -1;
        }
        if (request->backend_options) {
            extra = json_tokener_parse(request->backend_options);
            if (!extra || !json_object_is_type(extra, json_type_object)) {
                sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                         "backend_options is not a JSON object");
                cl_context(err, "option", "backend_options");
                goto out;
            }
            /* Only keys of the Engine's container-create body. */
            json_object_object_foreach(extra, key, val) {
                (void)val;
                size_t i = 0;
                while (dk_option_keys[i] && strcmp(dk_option_keys[i], key) != 0)
                    i++;
                if (dk_option_keys[i])
                    continue;
                sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                                         "docker backend_options: unknown key \"%s\" (known: "
                                         "the members of the Docker Engine's container "
                                         "create body, e.g. \"HostConfig\", \"User\", "
                                         "\"Labels\")", key);
                cl_context(err, "option", "backend_options");
                cl_context(err, "name", key);
                goto out;
            }
        }
    }
    if (request->workdir && request->workdir[0] != '/') {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "workdir \"%s\" must be an absolute path in the container",
                                 request->workdir);
        cl_context(err, "path", request->workdir);
        goto out;
    }
    if (!(request->cpu > 0) || request->cpu > 1e6 || request->memory_mb <= 0
        || request->memory_mb > ((int64_t)1 << 40) || !(request->timeout_secs > 0)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                "cpu %g, memory_mb %lld or timeout_secs %g out of range", request->cpu,
                (long long)request->memory_mb, request->timeout_secs);
        goto out;
    }
    const char *token = ctx && ctx->struct_size >= offsetof(sbx_call_ctx, create_token)
                                                   + sizeof(ctx->create_token)
                        ? ctx->create_token : NULL;
    if (!token || !*token) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "create without a create token");
        goto out;
    }
    if (!(name = strdup(token)))
        goto nomem;
    for (char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            *p = '-';

    /* The image, pulled when missing. */
    int have = image_inspect(c, ctx, image, &image_wd, op, error);
    if (have < 0)
        goto out;
    if (have == 0) {
        if (snapshot) {
            sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                     "snapshot \"%s\" does not exist on the Docker Engine",
                                     snapshot);
            cl_context(err, "snapshot_id", snapshot);
            goto out;
        }
        if (image_pull(c, ctx, image, op, error) < 0)
            goto out;
        have = image_inspect(c, ctx, image, &image_wd, op, error);
        if (have < 0)
            goto out;
        if (have == 0) {
            sbx_error *err = cl_fail(error, SBX_ERROR_CREATION_FAILED, op,
                                     "the pull of image \"%s\" reported no error, but the "
                                     "image is not there", image);
            cl_context(err, "image", image);
            cl_context(err, "step", "image_pull");
            goto out;
        }
    }

    /* The create body. */
    body = json_object_new_object();
    hc = json_object_new_object();
    labels = json_object_new_object();
    env = json_object_new_array();
    if (!body || !hc || !labels || !env)
        goto nomem;
    json_object_object_add(body, "Image", json_object_new_string(image));
    json_object *ep = json_object_new_array(), *cmd = json_object_new_array();
    json_object_array_add(ep, json_object_new_string("sleep"));
    double life = ceil(request->timeout_secs) + LIFETIME_GRACE_SECS;
    snprintf(num, sizeof(num), "%.0f", life);
    json_object_array_add(cmd, json_object_new_string(num));
    json_object_object_add(body, "Entrypoint", ep);
    json_object_object_add(body, "Cmd", cmd);
    json_object_array_add(env, json_object_new_string("SANDBOX_ROOT="));
    for (size_t i = 0; request->env && request->env[i]; i++)
        json_object_array_add(env, json_object_new_string(request->env[i]));
    json_object_object_add(body, "Env", env);
    env = NULL;
    if (request->workdir)
        json_object_object_add(body, "WorkingDir", json_object_new_string(request->workdir));
    json_object_object_add(body, "Tty", json_object_new_boolean(0));
    json_object_object_add(body, "OpenStdin", json_object_new_boolean(0));
    /* The default user (ABI 1.4): the container's User, which every exec
     * without a User of its own and the file calls' owner (files.c) follow. */
    if (request->struct_size >= offsetof(sbx_plugin_create_request, user) + sizeof(request->user)
        && request->user)
        json_object_object_add(body, "User", json_object_new_string(request->user));
    json_object_object_add(labels, DK_LABEL_BACKEND, json_object_new_string(DK_BACKEND));
    json_object_object_add(labels, DK_LABEL_TOKEN, json_object_new_string(token));
    /* Counted from now, after the pull: the container's sleep counts from
     * its start, a moment later, and the library's record from the create's
     * return. */
    snprintf(num, sizeof(num), "%.0f", ceil(cl_wallclock() + request->timeout_secs));
    json_object_object_add(labels, DK_LABEL_EXPIRES, json_object_new_string(num));
    json_object *body_labels = NULL;
    if (json_object_deep_copy(labels, &body_labels, NULL) != 0)
        goto nomem;
    json_object_object_add(body, "Labels", body_labels);
    json_object_object_add(hc, "NanoCpus", json_object_new_int64(llround(request->cpu * 1e9)));
    json_object_object_add(hc, "Memory", json_object_new_int64(request->memory_mb << 20));
    json_object_object_add(hc, "MemorySwap", json_object_new_int64(request->memory_mb << 20));
    json_object_object_add(hc, "PidsLimit", json_object_new_int64(PIDS_LIMIT));
    json_object_object_add(hc, "Init", json_object_new_boolean(1));
    json_object_object_add(hc, "AutoRemove", json_object_new_boolean(1));
    if (v2 && !request->allow_internet)
        json_object_object_add(hc, "NetworkMode", json_object_new_string("none"));
    else if (c->network)
        json_object_object_add(hc, "NetworkMode", json_object_new_string(c->network));
    if (v2 && (request->set_fields & SBX_OPTION_DISK_MB) && request->disk_mb > 0) {
        json_object *so = json_object_new_object();
        snprintf(num, sizeof(num), "%lldM", (long long)request->disk_mb);
        json_object_object_add(so, "size", json_object_new_string(num));
        json_object_object_add(hc, "StorageOpt", so);
    }
    if (request->struct_size >= offsetof(sbx_plugin_create_request, n_ports)
                                + sizeof(request->n_ports)
        && request->n_ports && request->ports) {
        if (!request->allow_internet) {
            sbx_error *err = cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                                     "docker backend: a container with allow_internet=0 "
                                     "has no network, so port %u cannot be published",
                                     (unsigned)request->ports[0]);
            snprintf(num, sizeof(num), "%u", (unsigned)request->ports[0]);
            cl_context(err, "port", num);
            goto out;
        }
        /* Published on the loopback address only: nothing beyond this
         * host reaches a sandbox's port. */
        json_object *pb = json_object_new_object(), *ex = json_object_new_object();
        for (size_t i = 0; i < request->n_ports; i++) {
            json_object *bind = json_object_new_object(), *arr = json_object_new_array();
            snprintf(num, sizeof(num), "%u/tcp", (unsigned)request->ports[i]);
            json_object_object_add(bind, "HostIp", json_object_new_string("127.0.0.1"));
            json_object_object_add(bind, "HostPort", json_object_new_string(""));
            json_object_array_add(arr, bind);
            json_object_object_add(pb, num, arr);
            json_object_object_add(ex, num, json_object_new_object());
        }
        json_object_object_add(hc, "PortBindings", pb);
        json_object_object_add(body, "ExposedPorts", ex);
    }
    json_object_object_add(body, "HostConfig", hc);
    hc = NULL;
    if (extra) {
        json_merge(body, extra);
        /* The ownership labels stay whatever backend_options said. */
        json_object *l;
        if (!json_object_object_get_ex(body, "Labels", &l)
            || !json_object_is_type(l, json_type_object)) {
            json_object *copy = NULL;
            if (json_object_deep_copy(labels, &copy, NULL) != 0)
                goto nomem;
            json_object_object_add(body, "Labels", copy);
        } else {
            json_merge(l, labels);
        }
    }

    if (check_port_bindings(body, op, error) < 0)
        goto out;

    char *ename = cl_url_escape(name);
    if (!ename || asprintf(&path, "/containers/create?name=%s", ename) < 0) {
        free(ename);
        path = NULL;
        goto nomem;
    }
    free(ename);
    const char *js = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN
                                                          | JSON_C_TO_STRING_NOSLASHESCAPE);
    dk_req req = { .method = "POST", .path = path, .body = js, .body_len = strlen(js),
                   .secs = CREATE_SECS, .outcome_unknown_on_fail = 1 };
    dk_resp r;
    if (dk_request(c, ctx, &req, &r, op, error) < 0) {
        /* The container may exist: remove it by name. */
        cleanup_container(c, name);
        goto out;
    }
    if (r.status != 201) {
        char *msg = dk_resp_message(&r);
        const char *opt = r.status == 400 || r.status == 500 ? refused_option(msg) : NULL;
        sbx_error *err;
        if (opt) {
            err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                          "the Docker Engine refused %s: %s (HTTP %ld)", opt, msg, r.status);
            cl_context(err, "option", opt);
        } else {
            err = dk_fail_resp(error, SBX_ERROR_CREATION_FAILED, &r, op,
                               "cannot create the container");
            cl_context(err, "image", image);
        }
        free(msg);
        dk_resp_clear(&r);
        goto out;
    }
    json_object *j = dk_resp_json(&r, op, error), *idv, *warn;
    dk_resp_clear(&r);
    if (!j) {
        cleanup_container(c, name);
        goto out;
    }
    if (json_object_object_get_ex(j, "Id", &idv) && json_object_is_type(idv, json_type_string))
        id = strdup(json_object_get_string(idv));
    if (json_object_object_get_ex(j, "Warnings", &warn)
        && json_object_is_type(warn, json_type_array))
        for (size_t i = 0; i < json_object_array_length(warn); i++)
            CL_LOG(SBX_LOG_WARNING, "create: %s",
                   json_object_get_string(json_object_array_get_idx(warn, i)));
    json_object_put(j);
    if (!id) {
        cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "container create answered without an Id");
        cleanup_container(c, name);
        goto out;
    }
    made = 1;

    free(path);
    if (asprintf(&path, "/containers/%s/start", id) < 0) {
        path = NULL;
        goto nomem;
    }
    dk_req sreq = { .method = "POST", .path = path, .secs = CREATE_SECS };
    if (dk_request(c, ctx, &sreq, &r, op, error) < 0)
        goto out;
    if (r.status != 204 && r.status != 304) {
        sbx_error *err = dk_fail_resp(error, SBX_ERROR_CREATION_FAILED, &r, op,
                                      "cannot start the container");
        cl_context(err, "image", image);
        dk_resp_clear(&r);
        goto out;
    }
    dk_resp_clear(&r);

    struct sbx_plugin_sandbox *sb = sandbox_new(c, id, request->workdir ? request->workdir
                                                        : image_wd);
    if (!sb)
        goto nomem;
    sb->oom_known = 1;          /* a new container: its counter starts at 0 */
    CL_LOG(SBX_LOG_DEBUG, "created container %.12s from %s", id, image);
    *sandbox = sb;
    rc = 0;
    goto out;

nomem:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
out:
    if (rc < 0 && made)
        cleanup_container(c, id);
    json_object_put(body);
    json_object_put(hc);
    json_object_put(labels);
    json_object_put(env);
    json_object_put(extra);
    free(image_wd);
    free(path);
    free(id);
    free(name);
    return rc;
}

static int docker_destroy(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                          sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = sandbox;
    pthread_mutex_lock(&sb->lock);
    int rc = 0;
    if (!sb->destroyed) {
        rc = remove_container(sb->client, ctx, sb->id, "destroy", error);
        if (rc == 0) {
            sb->destroyed = 1;
            CL_LOG(SBX_LOG_DEBUG, "removed container %.12s", sb->id);
        }
    }
    pthread_mutex_unlock(&sb->lock);
    return rc;
}

/* GET /containers/{id}/json: the parsed answer, or NULL with *@status 404
 * (no error) or an error. */
static json_object *container_inspect(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                      const char *id, long *status, const char *op,
                                      sbx_error **error)
{
    char *path;
    *status = 0;
    if (asprintf(&path, "/containers/%s/json", id) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    dk_req req = { .method = "GET", .path = path, .secs = API_SECS };
    dk_resp r;
    int rc = dk_request(c, ctx, &req, &r, op, error);
    free(path);
    if (rc < 0)
        return NULL;
    *status = r.status;
    json_object *j = NULL;
    if (r.status == 200)
        j = dk_resp_json(&r, op, error);
    else if (r.status != 404)
        dk_fail_resp(error, DK_CODE_BY_STATUS, &r, op, "cannot inspect the container");
    dk_resp_clear(&r);
    return j;
}

static int state_running(json_object *j)
{
    json_object *st, *run;
    return json_object_object_get_ex(j, "State", &st)
           && json_object_object_get_ex(st, "Running", &run) && json_object_get_boolean(run);
}

static const char *label_of(json_object *labels, const char *key)
{
    json_object *v;
    if (labels && json_object_is_type(labels, json_type_object)
        && json_object_object_get_ex(labels, key, &v) && json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    return NULL;
}

static json_object *config_labels(json_object *j)
{
    json_object *cfg, *labels;
    if (json_object_object_get_ex(j, "Config", &cfg)
        && json_object_object_get_ex(cfg, "Labels", &labels))
        return labels;
    return NULL;
}

static int docker_is_alive(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                           sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = sandbox;
    pthread_mutex_lock(&sb->lock);
    int d = sb->destroyed;
    pthread_mutex_unlock(&sb->lock);
    if (d)
        return 0;
    long st;
    json_object *j = container_inspect(sb->client, ctx, sb->id, &st, "is_alive", error);
    if (!j)
        return st == 404 ? 0 : -1;
    int alive = state_running(j);
    json_object_put(j);
    return alive;
}

/* ------------------------------------------------------------------------ */
/* How a command ended: the memory limit (CASE-49)                            */
/* ------------------------------------------------------------------------ */

/* The container cgroup's OOM-kill counter, read inside the container (v2
 * memory.events, v1 memory.oom_control: "oom_kill N"). 0, or -1 with
 * *@error (the container no longer runs, or no such file). */
static int read_oom_kills(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                          uint64_t *count, sbx_error **error)
{
    static const char *const argv[] = {
        "/bin/sh", "-c", "cat /sys/fs/cgroup/memory.events 2>/dev/null || "
                         "cat /sys/fs/cgroup/memory/memory.oom_control", NULL
    };
    cl_buf out = { 0 }, err = { 0 };
    int code = -1, rc = -1;
    if (dk_exec_capture(sb, ctx, argv, API_SECS, 4096, &out, &err, &code, "exec_wait",
                        error) < 0)
        goto done;
    for (const char *line = out.data; code == 0 && line && *line;) {
        unsigned long long v;
        if (strncmp(line, "oom_kill ", 9) == 0 && sscanf(line + 9, "%llu", &v) == 1) {
            *count = v;
            rc = 0;
            break;
        }
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    if (rc < 0)
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, "exec_wait",
                "no oom_kill counter in the container's cgroup (exit code %d)", code);
done:
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    return rc;
}

/*
 * After a command that ended by a signal (exit code 128 or more: an OOM
 * kill is a SIGKILL), reads the container cgroup's OOM-kill counter: a
 * rise since the last read is this command's (OOM_KILLED). Commands that
 * exit below 128 are not looked at, so a later read counts the kills of
 * their children too. When the counter cannot be read because the
 * container itself ended, the container's state says why: killed by its
 * memory limit (State.OOMKilled) fails the exec and every later call with
 * not_found, reason=oom_killed, naming the limit.
 */
static int docker_exec_end_info(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                                uint64_t *flags, sbx_error **error)
{
    struct sbx_plugin_sandbox *sb;
    uint64_t n = 0;
    int code;
    *flags = 0;
    if (!dk_exec_ended(process, &sb, &code) || code < 128)
        return 0;
    if (read_oom_kills(sb, ctx, &n, NULL) == 0) {
        pthread_mutex_lock(&sb->lock);
        if (sb->oom_known && n > sb->oom_kills)
            *flags |= SBX_PLUGIN_EXEC_OOM_KILLED;
        sb->oom_kills = n;
        sb->oom_known = 1;
        pthread_mutex_unlock(&sb->lock);
        return 0;
    }
    long st;
    json_object *j = container_inspect(sb->client, ctx, sb->id, &st, "exec_wait", NULL), *s,
                *v, *hc;
    if (!j || state_running(j)) {
        CL_LOG(SBX_LOG_WARNING, "container %.12s: the OOM-kill counter could not be read",
               sb->id);
        json_object_put(j);
        return 0;
    }
    int oom = json_object_object_get_ex(j, "State", &s)
              && json_object_object_get_ex(s, "OOMKilled", &v) && json_object_get_boolean(v);
    long long mib = json_object_object_get_ex(j, "HostConfig", &hc)
                    && json_object_object_get_ex(hc, "Memory", &v)
                    ? (long long)(json_object_get_int64(v) >> 20) : 0;
    json_object_put(j);
    if (!oom)
        return 0;
    char *msg = NULL;
    if ((mib > 0 ? asprintf(&msg, "sandbox %.12s ended: its memory limit (%lld MiB) killed the "
                            "container's main process (out of memory); the command ended with "
                            "exit code %d", sb->id, mib, code)
                 : asprintf(&msg, "sandbox %.12s ended: its memory limit killed the "
                            "container's main process (out of memory); the command ended with "
                            "exit code %d", sb->id, code)) < 0)
        msg = NULL;
    pthread_mutex_lock(&sb->lock);
    if (!sb->ended) {
        sb->ended = msg;
        msg = NULL;
    }
    pthread_mutex_unlock(&sb->lock);
    free(msg);
    dk_sandbox_check(sb, "exec_wait", error);
    if (error && *error && mib > 0) {
        char num[32];
        snprintf(num, sizeof(num), "%lld", mib);
        cl_context(*error, "memory_mb", num);
    }
    return -1;
}

/*
 * The stop and start slots: POST /containers/{id}/pause and /unpause. The
 * container cannot be stopped for real: AutoRemove (see the top) removes
 * it when its main process ends, which is what keeps a lost client from
 * leaking it. Pausing freezes every process in it (the cgroup freezer)
 * and keeps its files; unpausing lets them go on. Already in the state
 * asked for: success. 404 is not_found.
 */
static int container_stop_start(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                                const char *op, sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = sandbox;
    int stop = strcmp(op, "stop") == 0, rc = -1;
    json_object *j, *st, *paused;
    char *path;
    long status;
    dk_resp r;

    j = container_inspect(sb->client, ctx, sb->id, &status, op, error);
    if (!j) {
        if (status == 404) {
            sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                     "sandbox %.12s no longer exists", sb->id);
            cl_context(err, "sandbox_id", sb->id);
        }
        return -1;
    }
    int is_paused = json_object_object_get_ex(j, "State", &st) &&
                    json_object_object_get_ex(st, "Paused", &paused) &&
                    json_object_get_boolean(paused);
    json_object_put(j);
    if (is_paused == stop)
        return 0;
    if (asprintf(&path, "/containers/%s/%s", sb->id, stop ? "pause" : "unpause") < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "POST", .path = path, .secs = API_SECS };
    if (dk_request(sb->client, ctx, &req, &r, op, error) < 0) {
        free(path);
        return -1;
    }
    free(path);
    if (r.status == 204) {
        CL_LOG(SBX_LOG_DEBUG, "%s container %.12s", stop ? "paused" : "unpaused", sb->id);
        rc = 0;
    } else if (r.status == 404) {
        sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                 "sandbox %.12s no longer exists", sb->id);
        cl_context(err, "sandbox_id", sb->id);
    } else {
        dk_fail_resp(error, DK_CODE_BY_STATUS, &r, op, stop ? "cannot pause the container"
                                                            : "cannot unpause the container");
    }
    dk_resp_clear(&r);
    return rc;
}

static int docker_stop(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                       sbx_error **error)
{
    return container_stop_start(sandbox, ctx, "stop", error);
}

static int docker_start(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                        sbx_error **error)
{
    return container_stop_start(sandbox, ctx, "start", error);
}

static const char *docker_sandbox_id(sbx_plugin_sandbox *sandbox)
{
    return sandbox->id;
}

static const char *docker_sandbox_root(sbx_plugin_sandbox *sandbox)
{
    return "";
}

/* ---- exposed ports: the container's published ports (fixed at create) ---- */

/* The host port published on 127.0.0.1 for "PORT/tcp" member @bindings of
 * NetworkSettings.Ports, or NULL (not published there). Borrowed. */
static const char *loopback_binding(json_object *bindings)
{
    if (!bindings || !json_object_is_type(bindings, json_type_array))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(bindings); i++) {
        json_object *b = json_object_array_get_idx(bindings, i), *ip, *hp;
        if (b && json_object_object_get_ex(b, "HostIp", &ip)
            && strcmp(json_object_get_string(ip), "127.0.0.1") == 0
            && json_object_object_get_ex(b, "HostPort", &hp)
            && json_object_is_type(hp, json_type_string) && *json_object_get_string(hp))
            return json_object_get_string(hp);
    }
    return NULL;
}

/* Stores NetworkSettings.Ports of the container in *@ports (borrowed from
 * *@doc, which the caller frees; NULL when it has none): 0, or -1 with an
 * error (not_found when the container is gone). */
static int published_ports(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           json_object **doc, json_object **ports, const char *op,
                           sbx_error **error)
{
    long status = 0;
    *doc = NULL;
    *ports = NULL;
    if (dk_sandbox_check(sb, op, error) < 0)
        return -1;
    json_object *j = container_inspect(sb->client, ctx, sb->id, &status, op, error), *ns, *p;
    if (!j) {
        if (status == 404) {
            sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                     "container %.12s no longer exists", sb->id);
            cl_context(err, "sandbox_id", sb->id);
        }
        return -1;
    }
    *doc = j;
    if (json_object_object_get_ex(j, "NetworkSettings", &ns)
        && json_object_object_get_ex(ns, "Ports", &p) && json_object_is_type(p, json_type_object))
        *ports = p;
    return 0;
}

static char *docker_resolve_port(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                                 unsigned port, sbx_error **error)
{
    const char *op = "resolve_port";
    struct sbx_plugin_sandbox *sb = sandbox;
    json_object *doc = NULL, *ports = NULL;
    char key[16], *out = NULL;
    if (published_ports(sb, ctx, &doc, &ports, op, error) < 0)
        return NULL;
    snprintf(key, sizeof(key), "%u/tcp", port);
    json_object *b = NULL;
    const char *hp = ports && json_object_object_get_ex(ports, key, &b)
                     ? loopback_binding(b) : NULL;
    if (!hp) {
        snprintf(key, sizeof(key), "%u", port);
        sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                 "port %u of container %.12s is not exposed (docker publishes "
                                 "ports at create: sbx_options_add_port)", port, sb->id);
        cl_context(err, "port", key);
    } else {
        size_t n = strlen("127.0.0.1:") + strlen(hp);
        out = cl_host->alloc(n + 1);
        if (out)
            snprintf(out, n + 1, "127.0.0.1:%s", hp);
        else
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    }
    json_object_put(doc);
    return out;
}

static int port_cmp(const void *a, const void *b)
{
    return (int)*(const unsigned *)a - (int)*(const unsigned *)b;
}

static char *docker_list_ports(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                               sbx_error **error)
{
    const char *op = "list_ports";
    struct sbx_plugin_sandbox *sb = sandbox;
    json_object *doc = NULL, *ports = NULL;
    if (published_ports(sb, ctx, &doc, &ports, op, error) < 0)
        return NULL;
    unsigned list[256];
    size_t n = 0;
    if (ports) {
        json_object_object_foreach(ports, key, val) {
            char *end;
            unsigned long v = strtoul(key, &end, 10);
            if (strcmp(end, "/tcp") == 0 && v >= 1 && v <= 65535 && loopback_binding(val)
                && n < sizeof(list) / sizeof(list[0]))
                list[n++] = (unsigned)v;
        }
    }
    json_object_put(doc);
    qsort(list, n, sizeof(list[0]), port_cmp);
    char *out = cl_host->alloc(n * 6 + 1);
    if (!out) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(out + len, i ? " %u" : "%u", list[i]);
    return out;
}

static char *docker_session_state(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                                  sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = sandbox;
    if (dk_sandbox_check(sb, "session_state", error) < 0)
        return NULL;
    json_object *j = json_object_new_object();
    if (!j) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "session_state", "out of memory");
        return NULL;
    }
    json_object_object_add(j, "container", json_object_new_string(sb->id));
    json_object_object_add(j, "workdir", json_object_new_string(sb->workdir));
    const char *s = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN
                                                      | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = strlen(s);
    char *out = cl_host->alloc(n + 1);
    if (out)
        memcpy(out, s, n + 1);
    else
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "session_state", "out of memory");
    json_object_put(j);
    return out;
}

static int hex_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 12 || n > 64)
        return 0;
    for (const char *p = s; *p; p++)
        if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
            return 0;
    return 1;
}

static int docker_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         const char *state_json, sbx_plugin_sandbox **sandbox,
                         sbx_error **error)
{
    const char *op = "resume";
    json_object *data = state_json ? json_tokener_parse(state_json) : NULL, *v, *j = NULL;
    const char *cid = NULL, *wd = NULL;
    char *image_wd = NULL;
    int rc = -1;
    if (!data || !json_object_is_type(data, json_type_object)
        || !json_object_object_get_ex(data, "container", &v)
        || !json_object_is_type(v, json_type_string) || !hex_id_ok(json_object_get_string(v))) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                "docker session state: \"container\" must be a container id");
        goto out;
    }
    cid = json_object_get_string(v);
    if (json_object_object_get_ex(data, "workdir", &v) && json_object_is_type(v, json_type_string)
        && json_object_get_string(v)[0] == '/')
        wd = json_object_get_string(v);
    long st;
    j = container_inspect(client, ctx, cid, &st, op, error);
    if (!j) {
        if (st == 404) {
            sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                     "sandbox %.12s no longer exists", cid);
            cl_context(err, "sandbox_id", cid);
        }
        goto out;
    }
    const char *backend = label_of(config_labels(j), DK_LABEL_BACKEND);
    if (!backend || strcmp(backend, DK_BACKEND) != 0) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "container %.12s was not made by libsbx (no %s=%s label)",
                                 cid, DK_LABEL_BACKEND, DK_BACKEND);
        cl_context(err, "sandbox_id", cid);
        goto out;
    }
    if (!state_running(j)) {
        sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                 "sandbox %.12s is not running (its lifetime ended?)", cid);
        cl_context(err, "sandbox_id", cid);
        goto out;
    }
    json_object *cfg, *w, *idv;
    if (!wd && json_object_object_get_ex(j, "Config", &cfg)
        && json_object_object_get_ex(cfg, "WorkingDir", &w) && json_object_is_type(w, json_type_string)
        && json_object_get_string(w)[0] == '/')
        wd = json_object_get_string(w);
    const char *full = json_object_object_get_ex(j, "Id", &idv)
                       && json_object_is_type(idv, json_type_string)
                       ? json_object_get_string(idv) : cid;
    struct sbx_plugin_sandbox *sb = sandbox_new(client, full, wd);
    if (!sb) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(data);
    json_object_put(j);
    free(image_wd);
    return rc;
}

static char *docker_snapshot(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                             sbx_error **error)
{
    const char *op = "snapshot";
    struct sbx_plugin_sandbox *sb = sandbox;
    char *path = NULL, *out = NULL;
    if (dk_sandbox_check(sb, op, error) < 0)
        return NULL;
    char tag[64];
    snprintf(tag, sizeof(tag), "%.12s-%.0f", sb->id, floor(cl_wallclock() * 1000.0));
    if (asprintf(&path, "/commit?container=%s&repo=sbx-snapshot&tag=%s&pause=1"
                        "&comment=libsbx%%20snapshot", sb->id, tag) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    json_object *body = json_object_new_object(), *labels = json_object_new_object();
    json_object_object_add(labels, DK_LABEL_BACKEND, json_object_new_string(DK_BACKEND));
    json_object_object_add(labels, DK_LABEL_SNAPSHOT_OF, json_object_new_string(sb->id));
    json_object_object_add(body, "Labels", labels);
    const char *js = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    dk_req req = { .method = "POST", .path = path, .body = js, .body_len = strlen(js),
                   .secs = COMMIT_SECS };
    dk_resp r;
    if (dk_request(sb->client, ctx, &req, &r, op, error) < 0)
        goto done;
    if (r.status != 201 && r.status != 200) {
        dk_fail_container(error, sb, &r, DK_CODE_BY_STATUS, op, "commit");
        dk_resp_clear(&r);
        goto done;
    }
    json_object *j = dk_resp_json(&r, op, error), *idv;
    dk_resp_clear(&r);
    if (!j)
        goto done;
    if (json_object_object_get_ex(j, "Id", &idv) && json_object_is_type(idv, json_type_string)) {
        const char *s = json_object_get_string(idv);
        size_t n = strlen(s);
        out = cl_host->alloc(n + 1);
        if (out)
            memcpy(out, s, n + 1);
        else
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    } else {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "commit answered without an Id");
    }
    json_object_put(j);
done:
    json_object_put(body);
    free(path);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Ownership                                                                 */
/* ------------------------------------------------------------------------ */

static int docker_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                             sbx_plugin_owned_fn fn, void *user_data, sbx_error **error)
{
    const char *op = "list_owned";
    char *filter = cl_url_escape("{\"label\":[\"" DK_LABEL_BACKEND "=" DK_BACKEND "\",\""
                             DK_LABEL_TOKEN "\"]}"), *path = NULL;
    int rc = -1;
    if (!filter || asprintf(&path, "/containers/json?all=1&filters=%s", filter) < 0) {
        path = NULL;
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    dk_req req = { .method = "GET", .path = path, .secs = API_SECS };
    dk_resp r;
    if (dk_request(client, ctx, &req, &r, op, error) < 0)
        goto out;
    if (r.status != 200) {
        dk_fail_resp(error, DK_CODE_BY_STATUS, &r, op, "cannot list containers");
        dk_resp_clear(&r);
        goto out;
    }
    json_object *j = dk_resp_json(&r, op, error);
    dk_resp_clear(&r);
    if (!j)
        goto out;
    if (!json_object_is_type(j, json_type_array)) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "container list is not an array");
        json_object_put(j);
        goto out;
    }
    rc = 0;
    for (size_t i = 0; i < json_object_array_length(j); i++) {
        json_object *e = json_object_array_get_idx(j, i), *idv, *lab, *cr;
        if (!json_object_object_get_ex(e, "Id", &idv) || !json_object_object_get_ex(e, "Labels", &lab))
            continue;
        const char *tok = label_of(lab, DK_LABEL_TOKEN), *exp = label_of(lab, DK_LABEL_EXPIRES);
        sbx_plugin_owned_info info = { .struct_size = sizeof(info),
                                       .id = json_object_get_string(idv),
                                       .create_token = tok ? tok : "" };
        if (json_object_object_get_ex(e, "Created", &cr))
            info.created_at = json_object_get_double(cr);
        if (exp)
            info.expires_at = strtod(exp, NULL);
        if (fn(&info, user_data) != 0)
            break;
    }
    json_object_put(j);
out:
    free(filter);
    free(path);
    return rc;
}

static int docker_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                                const char *id, sbx_error **error)
{
    const char *op = "destroy_by_id";
    if (!id || !hex_id_ok(id)) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "\"%s\" is not a container id", id ? id : "(null)");
        cl_context(err, "sandbox_id", id);
        return -1;
    }
    long st;
    json_object *j = container_inspect(client, ctx, id, &st, op, error);
    if (!j)
        return st == 404 ? 0 : -1;
    const char *backend = label_of(config_labels(j), DK_LABEL_BACKEND);
    int ours = backend && strcmp(backend, DK_BACKEND) == 0;
    json_object_put(j);
    if (!ours) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "container %.12s was not made by libsbx (no %s=%s label); "
                                 "not removed", id, DK_LABEL_BACKEND, DK_BACKEND);
        cl_context(err, "sandbox_id", id);
        return -1;
    }
    return remove_container(client, ctx, id, op, error);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin docker_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .name = DK_BACKEND,
    .version = PACKAGE_VERSION,
    .description = "containers on a Docker Engine (API over its unix socket or TCP)",
    .caps = DOCKER_CAPS,
    .setup = docker_setup,
    .client_new = docker_client_new,
    .client_free = docker_client_free,
    .probe = docker_probe,
    .create = docker_create,
    .resume = docker_resume,
    .session_state = docker_session_state,
    .destroy = docker_destroy,
    .is_alive = docker_is_alive,
    .sandbox_free = docker_sandbox_free,
    .sandbox_id = docker_sandbox_id,
    .sandbox_root = docker_sandbox_root,
    .snapshot = docker_snapshot,
    .exec_start = dk_exec_start,
    .exec_wait = dk_exec_wait,
    .exec_event_fd = dk_exec_event_fd,
    .exec_kill = dk_exec_kill,
    .exec_resize = dk_exec_resize,
    .exec_free = dk_exec_free,
    .exec_end_info = docker_exec_end_info,
    .list_files = dk_list_files,
    .read_file = dk_read_file,
    .write_file = dk_write_file,
    .upload_tar = dk_upload_tar,
    .download_tar = dk_download_tar,
    .stat_file = dk_stat_file,
    .list_owned = docker_list_owned,
    .destroy_by_id = docker_destroy_by_id,
    .stop = docker_stop,
    .start = docker_start,
    .resolve_port = docker_resolve_port,
    .list_ports = docker_list_ports,
};

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
    return &docker_plugin;
}
