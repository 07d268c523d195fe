/*
 * modal.c — libsbx-modal.so, the `modal` backend: Modal's own gRPC API,
 * spoken directly (no sidecar to deploy), over the hosted-provider base's
 * gRPC layer (plugins/cloud/base/cloud.h, grpc.c). The messages are this
 * plugin's own subset of Modal's protos (api.proto, task_command_router.proto
 * beside this file, compiled with protoc-c at build time).
 *
 * Contract: the Modal section of the provider contracts (modal-labs/
 * modal-client modal_proto/api.proto, modal_proto/task_command_router.proto,
 * go/sandbox.go, go/sandbox_fs.go, go/task_command_router_client.go,
 * py/modal/sandbox.py, py/modal/config.py). Verified against the contract
 * fake (tests/fakes/modal.py) built from the same protos, not against
 * Modal's service.
 *
 *  - Credentials: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, else the profile
 *    of the TOML file MODAL_CONFIG_PATH (default ~/.modal.toml) named by
 *    MODAL_PROFILE, else the one marked active = true, else the first;
 *    sent as the metadata x-modal-token-id / x-modal-token-secret on every
 *    control call (the secret is scrubbed from every message, CASE-36, and
 *    is never in a session state); with neither, every call fails at
 *    once with authentication naming them, nothing sent. Server: the client option "server_url",
 *    else MODAL_SERVER_URL, else the profile's server_url, else
 *    https://api.modal.com with https://api.modal2.com as the failover
 *    host when the first does not answer (as the Python SDK does). The
 *    environment: "environment", else MODAL_ENVIRONMENT, else the
 *    profile's environment, else the workspace's default. Every unary
 *    control call but AuthTokenGet carries x-modal-auth-token, the token
 *    AuthTokenGet gives, kept in memory and fetched again within 5 minutes
 *    of its exp (go/auth_token_manager.go, go/client.go).
 *  - Client options: "server_url", "failover_url", "environment", "app_name"
 *    (the default app, "libsbx"), "ca_file" (a PEM file of the CAs trusted
 *    instead of the system's, for both channels), and the base's "retries",
 *    "rate_limit_retries", "max_retry_wait_s".
 *  - create: AppGetOrCreate (app_name, else the default app), the image:
 *    snapshot_id is an image id (from snapshot) taken as it is, else
 *    ImageGetOrCreate of "FROM <image>" (image, else Modal's default
 *    debian_slim base, python:3.11-slim-bookworm) joined with
 *    ImageJoinStreaming until it is built; env becomes an ephemeral Secret
 *    (SecretGetOrCreate, env_dict) the sandbox mounts (secret_ids), as the
 *    official SDKs do, so no value travels in a command line (CASE-48);
 *    then SandboxCreate with resources as the Go SDK's SandboxCreateParams
 *    sends a request with its limit (cpu, in vCPUs, as thousandths of a
 *    physical core, 2 vCPUs a core, in milli_cpu and milli_cpu_max;
 *    memory_mb in memory_mb and memory_mb_max; disk_mb as
 *    ephemeral_disk_mb, gpu "TYPE[:COUNT]" as GPUConfig gpu_type/count),
 *    the ports as open_ports (TLS tunnels), timeout_secs (the lifetime
 *    plus MODAL_LIFETIME_MARGIN_S, at most 24 h), the backend option idle_timeout_secs, workdir,
 *    network_access BLOCKED when allow_internet is false, and the tags
 *    sbx_backend, sbx_create_token and sbx_expires_at, by which a create
 *    whose answer was lost is found and terminated (CASE-20). Readiness:
 *    SandboxGetTaskId with wait_until_ready, until it names the task.
 *  - exec: TaskGetCommandRouterAccess gives the task's command router (URL)
 *    and a JWT for it, kept in memory only and fetched again when the
 *    router answers UNAUTHENTICATED (an expired JWT); TaskExecStart with a
 *    client-made exec id (a start sent twice is one command) runs
 *    /bin/bash -c SCRIPT, the per-call env as one more Secret; stdout and
 *    stderr are read as two server streams (TaskExecStdioRead) from their
 *    offsets, so a stream the path cuts is read on from where it stopped and
 *    the command is never started again; there is no read timeout of our
 *    own (a quiet command longer than any fixed limit completes, CASE-52);
 *    stdin goes by TaskExecStdinWrite at its offset, then eof (at once when
 *    the request has none); TaskExecWait gives the code, or the signal N as
 *    128+N. The script cds into the call's cwd itself (CASE-46); exec_kill
 *    signals every process carrying SBX_EXEC_ID=<tag> (provider.h).
 *  - terminal (tty_rows/tty_cols): TaskExecStart carries pty_info
 *    (PTYInfo enabled, winsz_rows, winsz_cols, as py/modal/_pty.py's
 *    get_pty_info() fills it) and runs the script with /bin/sh -c (a
 *    non-interactive bash drops PS1 from what it passes on); the
 *    terminal's output (both streams, merged by it) is the stdout stream.
 *    Typed bytes go by TaskExecStdinWrite as stdin does; the end of the
 *    host's stdin hangs the terminal up (SIGHUP to the command's
 *    processes, by the mark) instead of an eof. Modal has no call that
 *    resizes a running command's terminal: a resize runs stty on the
 *    terminal of the command's processes (found by the mark) in the
 *    sandbox (cl_mark_resize_command), which is TIOCSWINSZ and SIGWINCH
 *    as on a local terminal.
 *  - files: run an in-sandbox helper (the image's sh, cat and find) through
 *    the same exec RPCs, as Go's SandboxFilesystem does: bytes stream
 *    through stdin and stdout, binary-safe, never held whole in memory.
 *  - text: command_args, workdir and a Secret's env_dict are proto3
 *    string fields, UTF-8 only: an exec's argument, shell command, env
 *    value or cwd, and a file call's path (in its helper's command), that
 *    is not UTF-8 is invalid_argument naming it, before anything is sent
 *    (issue 16).
 *  - memory limit: a command runs between two readings of the sandbox's
 *    OOM-kill counter (its cgroup's memory.events or memory.oom_control);
 *    one killed by SIGKILL while it rose has the OOM flag (exec_end_info,
 *    CASE-49).
 *  - list_owned: SandboxList by the tag sbx_backend=modal, page by page,
 *    each sandbox's tags (SandboxInfo.tags, else SandboxTagsGet); those
 *    with a create token are reported. destroy_by_id: SandboxTagsGet, then
 *    SandboxTerminate only when the tags show this library made it.
 *  - exposed ports: the create's ports are Modal's tunnels; resolve_port is
 *    the tunnel's URL (SandboxGetTunnels, as Tunnel.URL()), list_ports
 *    their container ports. Modal opens tunnels at create only: no
 *    expose_port or unexpose_port.
 *  - snapshot: SandboxSnapshotFs gives an image id; a create with it as
 *    snapshot_id starts from it. destroy: SandboxTerminate (NOT_FOUND: gone
 *    already). A sandbox the provider no longer has (NOT_FOUND, or ended)
 *    is not_found with reason "gone" (CASE-32), and every later call on it
 *    fails at once. session_state holds the sandbox id only.
 *  - Errors: gRPC statuses map as cloud.h says (RESOURCE_EXHAUSTED
 *    rate_limited after the retries, UNAUTHENTICATED authentication,
 *    NOT_FOUND not_found, UNAVAILABLE connection, retried where safe).
 *
 * Threading: slots may run at once on different sandboxes and on one; a
 * sandbox's router access (task id, URL, JWT) is guarded by its lock.
 */
#include "provider.h"

#include "api.pb-c.h"
#include "task_command_router.pb-c.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#define MODAL_BACKEND "modal"
#define MODAL_API "protobuf"     /* what carries text: proto3 strings (UTF-8 only) */
#define MODAL_SERVER "https://api.modal.com"
#define MODAL_FAILOVER "https://api.modal2.com"
#define MODAL_DEFAULT_APP "libsbx"
#define MODAL_DEFAULT_IMAGE "python:3.11-slim-bookworm"
#define MODAL_BUILDER_VERSION "2024.10"
#define MODAL_LIFETIME_MARGIN_S 5
#define MODAL_MAX_TIMEOUT_S 86400
#define MODAL_STATE_VERSION 1
#define MODAL_STDIN_CHUNK (1 << 20)
#define MODAL_POLL_S 55.0           /* one long poll (SandboxGetTaskId, joins) */
#define MODAL_CTL "/modal.client.ModalClient/"
#define MODAL_ROUTER "/modal.task_command_router.TaskCommandRouter/"
#define MODAL_RESUMES 5             /* re-reads of a stream in a row with no byte */

#define MODAL_AUTH_REFRESH_S 300    /* the auth token is fetched again this long
                                     * before its exp (go/auth_token_manager.go) */
#define MODAL_AUTH_DEFAULT_S 1200   /* its lifetime when it carries no exp */
#define MODAL_TUNNEL_WAIT_S 50.0    /* SandboxGetTunnels' wait for the tunnels */
#define MODAL_LIST_PAGES 1000       /* SandboxList pages followed at most */
/* The sandbox's OOM-kill counter (cgroup v2 memory.events, else v1
 * memory.oom_control, as the sandbox sees its own cgroup), and the marker
 * of a command whose run saw it rise (%s: the command's tag). */
#define MODAL_OOM_FN                                                               \
    "__sbx_oom() { for f in /sys/fs/cgroup/memory.events "                         \
    "/sys/fs/cgroup/memory/memory.oom_control; do [ -r \"$f\" ] || continue; "     \
    "while read -r k v; do [ \"$k\" = oom_kill ] && { echo \"$v\"; return; }; "    \
    "done < \"$f\"; done; echo 0; }\n"
#define MODAL_OOM_MARK "/tmp/.sbx-oom-%s"

#define MODAL_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_RESUME         \
                    | SBX_CAP_ISOLATION | SBX_CAP_NETWORK_POLICY | SBX_CAP_IMAGE | SBX_CAP_GPU \
                    | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT | SBX_CAP_LIST_OWNED          \
                    | SBX_CAP_EXPOSED_PORTS | SBX_CAP_LIFETIME | SBX_CAP_BACKGROUND          \
                    | SBX_CAP_SNAPSHOT | SBX_CAP_PTY | SBX_CAP_EXEC_STDIN_STREAM)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, reaper (provider.h) */
    cl_grpc *ctl;
    char *environment;  /* or NULL: the workspace's default */
    char *app_name;     /* the default app */
    pthread_mutex_t lock;   /* guards app_id, auth_token, auth_exp */
    char *app_id;       /* the default app's id, once known */
    char *auth_token;   /* AuthTokenGet's token (a secret: memory only), or NULL */
    double auth_exp;    /* its exp claim (UNIX seconds) */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id and the gone flag (provider.h) */
    pthread_mutex_t lock;   /* guards what follows */
    char *app_id;       /* its app, or NULL (resumed: the default app's) */
    char *task_id;
    cl_grpc *router;
    cl_grpc *retired[4];    /* earlier routers (another thread's call may use
                             * one), freed with the sandbox */
    char *router_url;
    char *jwt;          /* a secret: memory only */
    unsigned jwt_gen;
    /* The tunnels (SandboxGetTunnels), once read: container port and URL. */
    int tunnels_read;
    size_t n_tunnels;
    unsigned *tunnel_ports;
    char **tunnel_urls;
};

/* Where a stream's bytes go. */
typedef struct modal_sink {
    int mode;           /* 0 discard, 1 the host's descriptor via cl_proc, 2 fd, 3 buffer */
    int stream;         /* 1 stdout, 2 stderr */
    int fd;
    cl_buf *buf;
    size_t cap;         /* buffer: at most this much is kept */
} modal_sink;

typedef struct modal_proc {
    cl_proc base;       /* first member (cloud.h) */
    struct sbx_plugin_sandbox *sb;
    char *script;       /* the command's script (cl_shell_script) */
    char **env;         /* the per-call env */
    char exec_id[40];
    char tag[32];       /* CL_EXEC_MARK of its processes */
    int stdin_fd;       /* -1: none */
    unsigned tty_rows;  /* the terminal's size at the start; 0 = none */
    unsigned tty_cols;
    modal_sink out, err;
    pthread_mutex_t plock;
    int started;        /* TaskExecStart answered */
    int over;
    int oom_killed;     /* it died by SIGKILL while the sandbox's OOM-kill counter rose */
} modal_proc;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define modal_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define modal_mark_gone(sb) cl_gone_set(&(sb)->s.gone)
#define modal_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), MODAL_BACKEND, \
                                                 (sb)->s.id, (error))
#define modal_refuse(error, option, value, why) \
    cl_refuse((error), MODAL_BACKEND, (option), (value), (why))

/* This thread's last error stored in @error (cl_fail_from()), for a call
 * on sandbox @sb: the gone error (context reason=gone, CASE-32) when the
 * call found it gone. */
static void modal_relay_in(struct sbx_plugin_sandbox *sb, sbx_error **error, const char *op)
{
    if (modal_is_gone(sb))
        cl_gone_error(error, op, MODAL_BACKEND, sb->s.id);
    else
        cl_fail_from(error, cl_last(), op);
}

/* A unary call on @g: @req packed, the answer unpacked into *@out (with
 * @rd; free with protobuf_c_message_free_unpacked) when @out. 0, or -1 with
 * the error (cl_grpc_invoke); *@status gets the gRPC status (-1: none). */
static int modal_unary(cl_grpc *g, const sbx_call_ctx *ctx, const char *method,
                       const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rd,
                       ProtobufCMessage **out, cl_idempotency idem, double secs,
                       const char *const *headers, int *status, const char *op,
                       const char *what, sbx_error **error)
{
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    if (out)
        *out = NULL;
    if (status)
        *status = -1;
    if (!buf) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    protobuf_c_message_pack(req, buf);
    cl_grpc_call call = { .method = method, .req = buf, .req_len = n, .idempotent = idem,
                          .secs = secs, .headers = headers, .what = what };
    cl_grpc_resp r;
    int rc = cl_grpc_invoke(g, ctx, &call, &r, op, error);
    free(buf);
    if (status)
        *status = r.status;
    if (rc == 0 && out && rd) {
        *out = protobuf_c_message_unpack(rd, NULL, r.msg.len,
                                         (const uint8_t *)(r.msg.data ? r.msg.data : ""));
        if (!*out) {
            cl_fail(error, SBX_ERROR_CONNECTION, op, "%s: an answer that is not a %s message",
                    what, rd->name);
            rc = -1;
        }
    }
    cl_grpc_resp_clear(&r);
    return rc;
}

/* The exp claim (UNIX seconds) of JWT @t, or 0 when it has none. */
static double modal_jwt_exp(const char *t)
{
    const char *a = strchr(t, '.');
    const char *b = a ? strchr(a + 1, '.') : NULL;
    cl_buf raw = { 0 };
    double exp = 0;
    if (b && cl_base64_decode(a + 1, (size_t)(b - a - 1), &raw) == 0 && raw.data) {
        json_object *j = json_tokener_parse(raw.data);
        json_object *e = NULL;
        if (j && json_object_object_get_ex(j, "exp", &e)
            && (json_object_is_type(e, json_type_int) || json_object_is_type(e, json_type_double)))
            exp = json_object_get_double(e);
        json_object_put(j);
    }
    cl_buf_clear(&raw);
    return exp;
}

/*
 * The auth token every control call but AuthTokenGet carries as the
 * metadata x-modal-auth-token, as go/auth_token_manager.go keeps it: fetched
 * by AuthTokenGet when there is none or it is within MODAL_AUTH_REFRESH_S of
 * its exp (MODAL_AUTH_DEFAULT_S from now when it has no exp), kept in memory
 * only; when that fetch fails while the old token has not expired, the old
 * one is sent (as GetToken does). A new "x-modal-auth-token: TOKEN" line,
 * or NULL with *@error.
 */
static char *modal_auth_line(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                             const char *op, sbx_error **error)
{
    char *line = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->auth_token && cl_wallclock() < c->auth_exp - MODAL_AUTH_REFRESH_S)
        line = cl_printf("x-modal-auth-token: %s", c->auth_token);
    pthread_mutex_unlock(&c->lock);
    if (line)
        return line;
    Modal__Client__AuthTokenGetRequest rq = MODAL__CLIENT__AUTH_TOKEN_GET_REQUEST__INIT;
    Modal__Client__AuthTokenGetResponse *r = NULL;
    if (modal_unary(c->ctl, ctx, MODAL_CTL "AuthTokenGet", &rq.base,
                    &modal__client__auth_token_get_response__descriptor,
                    (ProtobufCMessage **)&r, CL_SAFE, 0, NULL, NULL, op, "get an auth token",
                    NULL) < 0) {
        pthread_mutex_lock(&c->lock);
        if (c->auth_token && cl_wallclock() < c->auth_exp)
            line = cl_printf("x-modal-auth-token: %s", c->auth_token);
        pthread_mutex_unlock(&c->lock);
        if (!line)
            cl_fail_from(error, cl_last(), op);
        return line;
    }
    if (!r->token || !*r->token) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        cl_fail(error, SBX_ERROR_CONNECTION, op, "modal AuthTokenGet answered without a token");
        return NULL;
    }
    double exp = modal_jwt_exp(r->token);
    if (exp <= 0)
        exp = cl_wallclock() + MODAL_AUTH_DEFAULT_S;
    char *tok = strdup(r->token);
    line = cl_printf("x-modal-auth-token: %s", r->token);
    memset(r->token, 0, strlen(r->token));
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (!tok || !line) {
        free(tok);
        free(line);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    if (c->auth_token) {
        memset(c->auth_token, 0, strlen(c->auth_token));
        free(c->auth_token);
    }
    c->auth_token = tok;
    c->auth_exp = exp;
    pthread_mutex_unlock(&c->lock);
    return line;
}

/* A control-plane call (method name without the service), carrying the
 * auth token (modal_auth_line). */
static int modal_ctl(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *name,
                     const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rd,
                     ProtobufCMessage **out, cl_idempotency idem, double secs, int *status,
                     const char *op, const char *what, sbx_error **error)
{
    char method[128];
    snprintf(method, sizeof method, MODAL_CTL "%s", name);
    if (status)
        *status = -1;
    if (out)
        *out = NULL;
    char *auth = modal_auth_line(c, ctx, op, error);
    if (!auth)
        return -1;
    const char *headers[] = { auth, NULL };
    int rc = modal_unary(c->ctl, ctx, method, req, rd, out, idem, secs, headers, status, op,
                         what, error);
    memset(auth, 0, strlen(auth));
    free(auth);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Configuration: ~/.modal.toml                                              */
/* ------------------------------------------------------------------------ */

typedef struct modal_profile {
    char name[128];
    char *token_id, *token_secret, *server_url, *environment;
    int active;
} modal_profile;

static void modal_profile_clear(modal_profile *p)
{
    if (p->token_secret)
        memset(p->token_secret, 0, strlen(p->token_secret));
    free(p->token_id);
    free(p->token_secret);
    free(p->server_url);
    free(p->environment);
    memset(p, 0, sizeof(*p));
}

/* A TOML basic or literal string value ("..." or '...'), or true/false as
 * "true"/"false": a new string, NULL when it is neither. */
static char *modal_toml_value(const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v == '"' || *v == '\'') {
        char q = *v++;
        const char *e = strchr(v, q);
        return e ? strndup(v, (size_t)(e - v)) : NULL;
    }
    if (strncmp(v, "true", 4) == 0)
        return strdup("true");
    if (strncmp(v, "false", 5) == 0)
        return strdup("false");
    return NULL;
}

/*
 * Reads the profile to use from the Modal config file (MODAL_CONFIG_PATH,
 * else ~/.modal.toml): MODAL_PROFILE's, else the one with active = true,
 * else the first. 0 with *@out filled (empty when there is no file or no
 * profile); the file's values are never logged.
 */
static int modal_read_profile(modal_profile *out)
{
    memset(out, 0, sizeof(*out));
    const char *path = getenv("MODAL_CONFIG_PATH");
    char *own = NULL;
    if (!path || !*path) {
        const char *home = getenv("HOME");
        if (!home || !*home)
            return 0;
        own = cl_printf("%s/.modal.toml", home);
        path = own;
    }
    FILE *f = path ? fopen(path, "re") : NULL;
    free(own);
    if (!f)
        return 0;
    const char *want = getenv("MODAL_PROFILE");
    modal_profile cur = { 0 }, first = { 0 }, active = { 0 }, named = { 0 };
    int have_cur = 0;
    char line[4096];
    for (int more = 1; more;) {
        more = fgets(line, sizeof line, f) != NULL;
        char *s = line;
        while (more && (*s == ' ' || *s == '\t'))
            s++;
        int section = more && *s == '[';
        if ((!more || section) && have_cur) {
            if (want && *want && strcmp(cur.name, want) == 0 && !named.name[0])
                named = cur;
            else if (cur.active && !active.name[0])
                active = cur;
            else if (!first.name[0])
                first = cur;
            else
                modal_profile_clear(&cur);
            memset(&cur, 0, sizeof(cur));
            have_cur = 0;
        }
        if (!more)
            break;
        if (section) {
            char *e = strchr(s, ']');
            if (e) {
                *e = '\0';
                char *nm = s + 1;
                if (*nm == '"' && e > nm + 1 && e[-1] == '"') {
                    nm++;
                    e[-1] = '\0';
                }
                snprintf(cur.name, sizeof cur.name, "%s", nm);
                have_cur = 1;
            }
            continue;
        }
        char *eq = strchr(s, '=');
        if (!have_cur || !eq)
            continue;
        char *k = s, *ke = eq;
        while (ke > k && (ke[-1] == ' ' || ke[-1] == '\t'))
            ke--;
        *ke = '\0';
        char *v = modal_toml_value(eq + 1);
        char **slot = strcmp(k, "token_id") == 0 ? &cur.token_id
                    : strcmp(k, "token_secret") == 0 ? &cur.token_secret
                    : strcmp(k, "server_url") == 0 ? &cur.server_url
                    : strcmp(k, "environment") == 0 ? &cur.environment : NULL;
        if (strcmp(k, "active") == 0)
            cur.active = v && strcmp(v, "true") == 0;
        if (slot) {
            free(*slot);
            *slot = v;
            v = NULL;
        }
        if (v) {
            memset(v, 0, strlen(v));
            free(v);
        }
    }
    fclose(f);
    modal_profile *pick = named.name[0] ? &named : active.name[0] ? &active : &first;
    *out = *pick;
    memset(pick, 0, sizeof(*pick));
    modal_profile_clear(&named);
    modal_profile_clear(&active);
    modal_profile_clear(&first);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

static int modal_setup(const sbx_host_services *host, sbx_error **error)
{
    return cl_setup(host, MODAL_BACKEND, error);
}

static void modal_client_clear(sbx_plugin_client *c)
{
    cl_grpc_free(c->ctl);
    pthread_mutex_destroy(&c->lock);
    free(c->environment);
    free(c->app_name);
    free(c->app_id);
    if (c->auth_token) {
        memset(c->auth_token, 0, strlen(c->auth_token));
        free(c->auth_token);
    }
}

static int modal_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                            sbx_error **error);
static int modal_terminate(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                           const char *op, sbx_error **error);

/* Trusts the CAs of PEM file @path (client option "ca_file") instead of
 * the system's. 0, or -1 with a configuration error naming the file. */
static int modal_ca_file(struct sbx_plugin_client *c, const char *path, sbx_error **error)
{
    const char *op = "client_new";
    FILE *f = fopen(path, "rb");
    cl_buf pem = { 0 };
    char chunk[4096];
    size_t n;
    int err = !f;
    while (!err && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        err = cl_buf_append(&pem, chunk, n) < 0 || pem.len > (1u << 20);
    if (f) {
        err |= ferror(f);
        fclose(f);
    }
    if (err || !pem.len || !strstr(pem.data, "-----BEGIN CERTIFICATE-----")) {
        int e = errno;
        cl_buf_clear(&pem);
        sbx_error *x = cl_fail(error, SBX_ERROR_CONFIGURATION, op, "modal ca_file %s: %s", path,
                               !f ? strerror(e) : "not a PEM file of certificates");
        cl_context(x, "option", "ca_file");
        return -1;
    }
    int rc = cl_http_set_tls(c->cl.http, pem.data, pem.len, NULL, 0, NULL, 0, 0);
    cl_buf_clear(&pem);
    if (rc < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return rc;
}

/* The first non-empty of config member @key, env @env, @prof: borrowed. */
static const char *modal_pick(json_object *cfg, const char *key, const char *env,
                              const char *prof)
{
    return cl_setting(cfg, key, env, prof && *prof ? prof : NULL);
}

/* No base URL nor key here: the server URLs are the gRPC channel's, the
 * token pair is its metadata. */
static const cl_client_spec modal_client_spec = {
    .provider = MODAL_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .find = modal_find_token, .del = modal_terminate, .clear = modal_client_clear,
};

static int modal_client_new(const char *config_json, sbx_plugin_client **client,
                            sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&modal_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    pthread_mutex_init(&c->lock, NULL);
    modal_profile prof;
    modal_read_profile(&prof);
    const char *ca = cl_json_str(cfg, "ca_file");
    if (ca && *ca && modal_ca_file(c, ca, error) < 0)
        goto fail;
    const char *url = modal_pick(cfg, "server_url", "MODAL_SERVER_URL", prof.server_url);
    const char *fo = cl_json_str(cfg, "failover_url");
    if (!url) {
        url = MODAL_SERVER;
        if (!fo)
            fo = MODAL_FAILOVER;
    }
    if (!(c->ctl = cl_grpc_new(c->cl.http, url, fo))) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "modal server URL %s is not an "
                           "http:// or https:// URL%s%s", url, fo ? " (or failover_url " : "",
                           fo ? fo : ""), "option", "server_url");
        if (fo)
            cl_context(error ? *error : NULL, "failover_url", fo);
        goto fail;
    }
    const char *tid = modal_pick(NULL, NULL, "MODAL_TOKEN_ID", prof.token_id);
    const char *tsec = modal_pick(NULL, NULL, "MODAL_TOKEN_SECRET", prof.token_secret);
    const char *env = modal_pick(cfg, "environment", "MODAL_ENVIRONMENT", prof.environment);
    const char *app = cl_json_str(cfg, "app_name");
    int bad = 0;
    if (tid && tsec)
        bad |= cl_grpc_add_metadata(c->ctl, "x-modal-token-id", tid) < 0
               || cl_grpc_add_metadata(c->ctl, "x-modal-token-secret", tsec) < 0
               || cl_http_set_secret(c->cl.http, tsec) < 0;
    else
        bad |= cl_http_set_missing_credential(c->cl.http, "modal backend: no credential (set "
                                              "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or a "
                                              "profile's token_id and token_secret in "
                                              "~/.modal.toml or MODAL_CONFIG_PATH)") < 0;
    bad |= cl_grpc_add_metadata(c->ctl, "x-modal-client-type", "1") < 0
           || cl_grpc_add_metadata(c->ctl, "x-modal-client-version", PACKAGE_VERSION) < 0;
    bad |= env && !(c->environment = strdup(env));
    bad |= !(c->app_name = strdup(app && *app ? app : MODAL_DEFAULT_APP));
    if (bad) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    modal_profile_clear(&prof);
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    modal_profile_clear(&prof);
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(modal_probe, MODAL_CAPS)

/* The id of app @name (NULL: the client's default app, cached):
 * AppGetOrCreate. A new string, or NULL with *@error. */
static char *modal_app(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *name,
                       const char *op, sbx_error **error)
{
    if (!name) {
        pthread_mutex_lock(&c->lock);
        char *id = c->app_id ? strdup(c->app_id) : NULL;
        pthread_mutex_unlock(&c->lock);
        if (id)
            return id;
    }
    Modal__Client__AppGetOrCreateRequest rq = MODAL__CLIENT__APP_GET_OR_CREATE_REQUEST__INIT;
    rq.app_name = (char *)(name ? name : c->app_name);
    rq.environment_name = c->environment ? c->environment : "";
    rq.object_creation_type = MODAL__CLIENT__OBJECT_CREATION_TYPE__OBJECT_CREATION_TYPE_CREATE_IF_MISSING;
    Modal__Client__AppGetOrCreateResponse *a = NULL;
    if (modal_ctl(c, ctx, "AppGetOrCreate", &rq.base,
                  &modal__client__app_get_or_create_response__descriptor,
                  (ProtobufCMessage **)&a, CL_SAFE, 0, NULL, op, "get the app", error) < 0)
        return NULL;
    char *id = a->app_id && *a->app_id ? strdup(a->app_id) : NULL;
    protobuf_c_message_free_unpacked(&a->base, NULL);
    if (!id) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "modal AppGetOrCreate answered without an "
                "app_id");
        return NULL;
    }
    if (!name) {
        pthread_mutex_lock(&c->lock);
        if (!c->app_id)
            c->app_id = strdup(id);
        pthread_mutex_unlock(&c->lock);
    }
    return id;
}

/* An ephemeral Secret holding @env ("K=V" strings) for app @app_id: its id
 * (a new string), or NULL with *@error. */
static char *modal_secret(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                          const char *app_id, const char *const *env, const char *op,
                          sbx_error **error)
{
    size_t n = 0;
    while (env && env[n])
        n++;
    Modal__Client__SecretGetOrCreateRequest__EnvDictEntry *ents = calloc(n + 1, sizeof(*ents));
    Modal__Client__SecretGetOrCreateRequest__EnvDictEntry **pe = calloc(n + 1, sizeof(*pe));
    char **keys = calloc(n + 1, sizeof(*keys));
    char *id = NULL;
    if (!ents || !pe || !keys) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq)
            continue;
        modal__client__secret_get_or_create_request__env_dict_entry__init(&ents[k]);
        if (!(keys[k] = strndup(env[i], (size_t)(eq - env[i])))) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto out;
        }
        ents[k].key = keys[k];
        ents[k].value = (char *)eq + 1;
        pe[k] = &ents[k];
        k++;
    }
    Modal__Client__SecretGetOrCreateRequest rq = MODAL__CLIENT__SECRET_GET_OR_CREATE_REQUEST__INIT;
    rq.n_env_dict = k;
    rq.env_dict = pe;
    rq.app_id = (char *)(app_id ? app_id : "");
    rq.environment_name = c->environment ? c->environment : "";
    rq.object_creation_type = MODAL__CLIENT__OBJECT_CREATION_TYPE__OBJECT_CREATION_TYPE_EPHEMERAL;
    Modal__Client__SecretGetOrCreateResponse *s = NULL;
    if (modal_ctl(c, ctx, "SecretGetOrCreate", &rq.base,
                  &modal__client__secret_get_or_create_response__descriptor,
                  (ProtobufCMessage **)&s, CL_SAFE, 0, NULL, op, "make the environment's secret",
                  error) < 0)
        goto out;
    if (s->secret_id && *s->secret_id)
        id = strdup(s->secret_id);
    else
        cl_fail(error, SBX_ERROR_CONNECTION, op, "modal SecretGetOrCreate answered without a "
                "secret_id");
    protobuf_c_message_free_unpacked(&s->base, NULL);
out:
    for (size_t i = 0; keys && i < n; i++)
        free(keys[i]);
    free(keys);
    free(pe);
    free(ents);
    return id;
}

/* ------------------------------------------------------------------------ */
/* Sandboxes                                                                 */
/* ------------------------------------------------------------------------ */

static struct sbx_plugin_sandbox *modal_sandbox_new(struct sbx_plugin_client *c, const char *id)
{
    struct sbx_plugin_sandbox *sb = cl_sandbox_new(sizeof(*sb), c, id, NULL);
    if (sb)
        pthread_mutex_init(&sb->lock, NULL);
    return sb;
}

static void modal_sandbox_free(sbx_plugin_sandbox *sb)
{
    if (!sb)
        return;
    pthread_mutex_destroy(&sb->lock);
    cl_grpc_free(sb->router);
    for (size_t i = 0; i < sizeof sb->retired / sizeof sb->retired[0]; i++)
        cl_grpc_free(sb->retired[i]);
    free(sb->app_id);
    free(sb->task_id);
    free(sb->router_url);
    if (sb->jwt) {
        memset(sb->jwt, 0, strlen(sb->jwt));
        free(sb->jwt);
    }
    for (size_t i = 0; i < sb->n_tunnels; i++)
        free(sb->tunnel_urls[i]);
    free(sb->tunnel_urls);
    free(sb->tunnel_ports);
    cl_sandbox_free(sb);
}

/* SandboxTerminate @id; NOT_FOUND: gone already (0). */
static int modal_terminate(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                           const char *op, sbx_error **error)
{
    Modal__Client__SandboxTerminateRequest rq = MODAL__CLIENT__SANDBOX_TERMINATE_REQUEST__INIT;
    rq.sandbox_id = (char *)id;
    int st;
    if (modal_ctl(c, ctx, "SandboxTerminate", &rq.base, NULL, NULL, CL_SAFE, 0, &st, op,
                  "terminate the sandbox", NULL) == 0 || st == CL_GRPC_NOT_FOUND)
        return 0;
    cl_fail_from(error, cl_last(), op);
    return -1;
}

static int modal_delete(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                        const char *op, sbx_error **error)
{
    return modal_terminate(client, ctx, id, op, error);
}

/*
 * The sandbox's task id, once it runs: SandboxGetTaskId with
 * wait_until_ready, long-polled until it names the task (bounded by
 * @ctx's deadline and @secs). A sandbox that ended (or that the provider
 * does not have) is marked gone: -1 with the gone error.
 */
static int modal_task_look(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, double secs,
                           int recheck, const char *op, sbx_error **error);

static int modal_task(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, double secs,
                      const char *op, sbx_error **error)
{
    return modal_task_look(sb, ctx, secs, 0, op, error);
}

/* As modal_task(), but asking the control plane even when the task id is
 * known (@recheck): whether the sandbox still runs. The task id, once
 * known, never changes (commands of other threads use it unlocked). */
static int modal_task_look(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, double secs,
                           int recheck, const char *op, sbx_error **error)
{
    pthread_mutex_lock(&sb->lock);
    int have = sb->task_id != NULL;
    pthread_mutex_unlock(&sb->lock);
    if (have && !recheck)
        return 0;
    cl_bound b = cl_bound_make(ctx, secs);
    for (;;) {
        double left = cl_bound_left(&b);
        if (left == 0) {
            cl_fail(error, SBX_ERROR_TIMEOUT, op, "modal sandbox %s did not start in time",
                    sb->s.id);
            return -1;
        }
        Modal__Client__SandboxGetTaskIdRequest rq = MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
        rq.sandbox_id = sb->s.id;
        rq.wait_until_ready = !have;
        rq.timeout = (float)(left < 0 || left > MODAL_POLL_S ? MODAL_POLL_S : left);
        Modal__Client__SandboxGetTaskIdResponse *r = NULL;
        int st;
        sbx_call_ctx c2 = { sizeof(c2), b.until, b.cancel_fd, NULL };
        if (modal_ctl(sb->s.c, &c2, "SandboxGetTaskId", &rq.base,
                      &modal__client__sandbox_get_task_id_response__descriptor,
                      (ProtobufCMessage **)&r, CL_SAFE, rq.timeout + 10.0, &st, op,
                      "wait for the sandbox's task", NULL) < 0) {
            if (st == CL_GRPC_NOT_FOUND) {
                cl_gone_mark(&sb->s.gone, error, op, MODAL_BACKEND, sb->s.id);
            } else {
                cl_fail_from(error, cl_last(), op);
            }
            return -1;
        }
        if (r->task_id && *r->task_id) {
            char *t = strdup(r->task_id);
            protobuf_c_message_free_unpacked(&r->base, NULL);
            if (!t) {
                cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                return -1;
            }
            pthread_mutex_lock(&sb->lock);
            if (!sb->task_id)
                sb->task_id = t;
            else
                free(t);
            pthread_mutex_unlock(&sb->lock);
            return 0;
        }
        int ended = r->task_result && r->task_result->status
                    != MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_UNSPECIFIED;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        if (ended) {
            cl_gone_mark(&sb->s.gone, error, op, MODAL_BACKEND, sb->s.id);
            return -1;
        }
    }
}

/*
 * The end of a control call about @sb that failed with gRPC status @st:
 * NOT_FOUND (and FAILED_PRECONDITION when @precondition_is_gone: a task
 * that has ended) marks the sandbox gone and says so in *@error; any other
 * status relays the call's own error.
 */
static void modal_sb_call_failed(struct sbx_plugin_sandbox *sb, int st, int precondition_is_gone,
                                 const char *op, sbx_error **error)
{
    if (st == CL_GRPC_NOT_FOUND || (precondition_is_gone && st == CL_GRPC_FAILED_PRECONDITION)) {
        cl_gone_mark(&sb->s.gone, error, op, MODAL_BACKEND, sb->s.id);
    } else {
        cl_fail_from(error, cl_last(), op);
    }
}

/*
 * The command router of @sb's task: its channel and a JWT (fetched with
 * TaskGetCommandRouterAccess when there is none, or when @stale_gen is the
 * generation of the JWT the router refused). 0, or -1 with *@error.
 */
static int modal_router_access(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                               int refresh, unsigned stale_gen, const char *op,
                               sbx_error **error)
{
    if (modal_task(sb, ctx, 0, op, error) < 0)
        return -1;
    pthread_mutex_lock(&sb->lock);
    int fresh = sb->jwt && sb->router && (!refresh || sb->jwt_gen != stale_gen);
    char *task = strdup(sb->task_id);
    pthread_mutex_unlock(&sb->lock);
    if (fresh || !task) {
        free(task);
        if (!fresh)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return fresh ? 0 : -1;
    }
    Modal__Client__TaskGetCommandRouterAccessRequest rq =
        MODAL__CLIENT__TASK_GET_COMMAND_ROUTER_ACCESS_REQUEST__INIT;
    rq.task_id = task;
    Modal__Client__TaskGetCommandRouterAccessResponse *a = NULL;
    int st;
    int rc = modal_ctl(sb->s.c, ctx, "TaskGetCommandRouterAccess", &rq.base,
                       &modal__client__task_get_command_router_access_response__descriptor,
                       (ProtobufCMessage **)&a, CL_SAFE, 0, &st, op,
                       "get the task's command router", NULL);
    free(task);
    if (rc < 0) {
        modal_sb_call_failed(sb, st, 1, op, error);
        return -1;
    }
    if (!a->jwt || !*a->jwt || !a->url || !*a->url) {
        protobuf_c_message_free_unpacked(&a->base, NULL);
        cl_fail(error, SBX_ERROR_CONNECTION, op, "modal TaskGetCommandRouterAccess answered "
                "without a url and a jwt");
        return -1;
    }
    pthread_mutex_lock(&sb->lock);
    rc = 0;
    if (!sb->router_url || strcmp(sb->router_url, a->url) != 0) {
        cl_grpc *g = cl_grpc_new(sb->s.c->cl.http, a->url, NULL);
        char *u = strdup(a->url);
        size_t slot = 0, nslots = sizeof sb->retired / sizeof sb->retired[0];
        while (sb->router && slot < nslots && sb->retired[slot])
            slot++;
        if (!g || !u || slot == nslots) {
            cl_grpc_free(g);
            free(u);
            rc = slot == nslots ? -2 : -1;
        } else {
            /* The old channel may be in use by another thread's call: it
             * is retired, freed with the sandbox. */
            if (sb->router)
                sb->retired[slot] = sb->router;
            sb->router = g;
            free(sb->router_url);
            sb->router_url = u;
        }
    }
    char *j = rc == 0 ? strdup(a->jwt) : NULL;
    if (rc == -2) {
        /* keeps its error below */
    } else if (j) {
        if (sb->jwt) {
            memset(sb->jwt, 0, strlen(sb->jwt));
            free(sb->jwt);
        }
        sb->jwt = j;
        sb->jwt_gen++;
    } else {
        rc = -1;
    }
    pthread_mutex_unlock(&sb->lock);
    memset(a->jwt, 0, strlen(a->jwt));
    protobuf_c_message_free_unpacked(&a->base, NULL);
    if (rc == -2)
        cl_fail(error, SBX_ERROR_CONNECTION, op, "modal: the command router of sandbox %s "
                "moved more than %zu times", sb->s.id, sizeof sb->retired / sizeof sb->retired[0]);
    else if (rc < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return rc < 0 ? -1 : 0;
}

/*
 * A call to @sb's command router with its JWT: fetched first when there is
 * none, and once more when the router answers UNAUTHENTICATED (it expired),
 * the call then sent again. @on_msg (or NULL: unary, answer unpacked with
 * @rd into *@out) as cl_grpc_invoke. A NOT_FOUND answer marks @sb gone
 * when the control plane no longer has the task's sandbox. 0, or -1 with
 * the error in cl_last() (and *@error); *@resp (may be NULL) the last
 * attempt's answer details.
 */
static int modal_router_call(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                             const char *name, const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *rd, ProtobufCMessage **out,
                             cl_grpc_msg_fn on_msg, void *ud, cl_idempotency idem,
                             cl_grpc_resp *resp_out, const char *op, const char *what,
                             sbx_error **error)
{
    char method[128];
    snprintf(method, sizeof method, MODAL_ROUTER "%s", name);
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    if (out)
        *out = NULL;
    if (!buf) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    protobuf_c_message_pack(req, buf);
    int rc = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (modal_check(sb, op, NULL) < 0)
            break;
        if (modal_router_access(sb, ctx, attempt > 0, 0, op, NULL) < 0)
            break;
        pthread_mutex_lock(&sb->lock);
        char *auth = cl_printf("authorization: Bearer %s", sb->jwt);
        unsigned gen = sb->jwt_gen;
        cl_grpc *g = sb->router;
        pthread_mutex_unlock(&sb->lock);
        if (!auth) {
            cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            break;
        }
        const char *hdrs[] = { auth, NULL };
        cl_grpc_call call = { .method = method, .req = buf, .req_len = n, .idempotent = idem,
                              .on_msg = on_msg, .ud = ud, .headers = hdrs, .what = what };
        cl_grpc_resp r;
        rc = cl_grpc_invoke(g, ctx, &call, &r, op, NULL);
        memset(auth, 0, strlen(auth));
        free(auth);
        if (rc == 0 && out && rd) {
            *out = protobuf_c_message_unpack(rd, NULL, r.msg.len,
                                             (const uint8_t *)(r.msg.data ? r.msg.data : ""));
            if (!*out) {
                cl_fail(NULL, SBX_ERROR_CONNECTION, op, "%s: an answer that is not a %s "
                        "message", what, rd->name);
                rc = -1;
            }
        }
        int st = r.status;
        if (resp_out) {
            cl_grpc_resp_clear(resp_out);
            *resp_out = r;
        } else {
            cl_grpc_resp_clear(&r);
        }
        if (rc == 0 || st != CL_GRPC_UNAUTHENTICATED || attempt > 0) {
            if (rc < 0 && st == CL_GRPC_NOT_FOUND) {
                /* The task or the sandbox is no more: gone when the control
                 * plane says it ended or does not know it. */
                cl_last_error l = *cl_last();
                sbx_call_ctx c2 = { sizeof(c2), cl_now() + 10, -1, NULL };
                if (modal_task_look(sb, &c2, 10, 1, op, NULL) < 0 && modal_is_gone(sb))
                    cl_gone_error(NULL, op, MODAL_BACKEND, sb->s.id);
                else
                    cl_fail(NULL, l.code, op, "%s", l.msg);
            }
            break;
        }
        CL_LOG(SBX_LOG_DEBUG, "%s: the command router refused its JWT; fetching a new one", what);
        if (modal_router_access(sb, ctx, 1, gen, op, NULL) < 0)
            break;
    }
    free(buf);
    if (rc < 0)
        modal_relay_in(sb, error, op);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

static int modal_sink_put(modal_proc *p, modal_sink *k, const void *data, size_t n)
{
    switch (k->mode) {
    case 1:
        return cl_proc_output(&p->base, k->stream, data, n);
    case 2:
        return cl_fd_sink(&k->fd, data, n);
    case 3: {
        size_t room = k->buf->len < k->cap ? k->cap - k->buf->len : 0;
        return room ? cl_buf_append(k->buf, data, n < room ? n : room) : 0;
    }
    default:
        return cl_proc_stopping(&p->base) ? -1 : 0;
    }
}

typedef struct modal_reader {
    modal_proc *p;
    modal_sink *sink;
    int fd;             /* TASK_EXEC_STDIO_FILE_DESCRIPTOR_* */
    uint64_t off;
    const sbx_call_ctx *ctx;
    int rc;
    cl_last_error err;
    pthread_t thread;
    int started;
} modal_reader;

static int modal_on_stdio(void *ud, const uint8_t *p, size_t n)
{
    modal_reader *r = ud;
    Modal__TaskCommandRouter__TaskExecStdioReadResponse *m =
        modal__task_command_router__task_exec_stdio_read_response__unpack(NULL, n, p);
    if (!m) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "modal: a stdio message that is not a "
                "TaskExecStdioReadResponse");
        return -1;
    }
    int rc = 0;
    if (m->data.len) {
        if (modal_sink_put(r->p, r->sink, m->data.data, m->data.len) < 0) {
            cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "modal: the command's output could not "
                    "be written");
            rc = -1;
        } else {
            r->off += m->data.len;
        }
    }
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return rc;
}

/*
 * Reads one of the command's streams to its end (TaskExecStdioRead from
 * r->off), reading on from the offset it reached when the stream is cut
 * (no status, UNAVAILABLE, CANCELLED, INTERNAL): the command runs once
 * whatever happens to its streams. Gives up after MODAL_RESUMES cuts in a
 * row that carried no byte. 0, or -1 with the error in r->err.
 */
static int modal_read_stream(modal_reader *r)
{
    struct sbx_plugin_sandbox *sb = r->p->sb;
    int empty = 0;
    for (;;) {
        Modal__TaskCommandRouter__TaskExecStdioReadRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIO_READ_REQUEST__INIT;
        rq.task_id = sb->task_id;
        rq.exec_id = r->p->exec_id;
        rq.offset = r->off;
        rq.file_descriptor = r->fd;
        uint64_t before = r->off;
        cl_grpc_resp resp = { 0 };
        int rc = modal_router_call(sb, r->ctx, "TaskExecStdioRead", &rq.base, NULL, NULL,
                                   modal_on_stdio, r, CL_SAFE, &resp, "exec",
                                   r->fd ? "read the command's stderr"
                                         : "read the command's stdout", NULL);
        int st = resp.status, cut = resp.cut, aborted = resp.aborted;
        cl_grpc_resp_clear(&resp);
        if (rc == 0)
            return 0;
        r->err = *cl_last();
        if (aborted || cl_proc_stopping(&r->p->base) || modal_is_gone(sb)
            || r->err.code == SBX_ERROR_CANCELLED)
            return -1;
        int resumable = cut || st == CL_GRPC_UNAVAILABLE || st == CL_GRPC_CANCELLED
                        || st == CL_GRPC_INTERNAL
                        || (st < 0 && r->err.code == SBX_ERROR_CONNECTION);
        if (!resumable)
            return -1;
        empty = r->off > before ? 0 : empty + 1;
        if (empty > MODAL_RESUMES) {
            cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "modal: the command's %s stream was cut "
                    "%d times in a row with no output (%s)", r->fd ? "stderr" : "stdout",
                    empty, r->err.msg);
            cl_outcome_unknown(NULL);
            r->err = *cl_last();
            return -1;
        }
        CL_LOG(SBX_LOG_DEBUG, "modal: the command's %s stream was cut at byte %llu (%s): "
               "reading on from there", r->fd ? "stderr" : "stdout",
               (unsigned long long)r->off, r->err.msg);
        if (empty && cl_sleep(0.1 * empty, r->p->base.stop_fd))
            return -1;
    }
}

static void *modal_reader_main(void *arg)
{
    modal_reader *r = arg;
    r->rc = modal_read_stream(r);
    return NULL;
}

typedef struct modal_writer {
    modal_proc *p;
    const sbx_call_ctx *ctx;
    pthread_t thread;
    int started;
} modal_writer;

/* One TaskExecStdinWrite of @n bytes at @off (and eof). */
static int modal_stdin_write(modal_proc *p, const sbx_call_ctx *ctx, const void *data, size_t n,
                             uint64_t off, int eof)
{
    Modal__TaskCommandRouter__TaskExecStdinWriteRequest rq =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIN_WRITE_REQUEST__INIT;
    rq.task_id = p->sb->task_id;
    rq.exec_id = p->exec_id;
    rq.offset = off;
    rq.data.data = (uint8_t *)data;
    rq.data.len = n;
    rq.eof = eof;
    return modal_router_call(p->sb, ctx, "TaskExecStdinWrite", &rq.base, NULL, NULL, NULL, NULL,
                             CL_SAFE, NULL, "exec", "write the command's stdin", NULL);
}

static int modal_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                           int *code, const char *op, sbx_error **error);

/* stdin: chunks of the host's descriptor at their offsets, then eof (on a
 * terminal: the hang-up). */
static void *modal_writer_main(void *arg)
{
    modal_writer *w = arg;
    modal_proc *p = w->p;
    char *buf = malloc(MODAL_STDIN_CHUNK);
    uint64_t off = 0;
    for (int eof = 0; buf && !eof;) {
        struct pollfd pf[2] = { { .fd = p->stdin_fd, .events = POLLIN },
                                { .fd = p->base.stop_fd, .events = POLLIN } };
        int pr = poll(pf, p->base.stop_fd >= 0 ? 2 : 1, 200);
        if (pr < 0 && errno == EINTR)
            continue;
        pthread_mutex_lock(&p->plock);
        int over = p->over;
        pthread_mutex_unlock(&p->plock);
        if (pr < 0 || (p->base.stop_fd >= 0 && pf[1].revents) || over)
            break;
        if (pr == 0)
            continue;
        ssize_t n = read(p->stdin_fd, buf, MODAL_STDIN_CHUNK);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        eof = n <= 0;
        if (eof && p->tty_rows) {
            /* A terminal is hung up, not closed. */
            cl_proc_mark_kill(&p->base, (sbx_plugin_sandbox *)p->sb, modal_run_short, w->ctx,
                              p->tag, SIGHUP, NULL);
            break;
        }
        if (modal_stdin_write(p, w->ctx, buf, n > 0 ? (size_t)n : 0, off, eof) < 0)
            break;
        if (n > 0)
            off += (uint64_t)n;
    }
    free(buf);
    return NULL;
}

/*
 * Runs @p's command to its end on the calling thread: TaskExecStart, the
 * two output streams (stderr on a thread of its own), stdin, TaskExecWait.
 * The exit code (128+N for signal N), or -1 with the error in cl_last().
 */
static int modal_run(modal_proc *p, const sbx_call_ctx *ctx)
{
    struct sbx_plugin_sandbox *sb = p->sb;
    const char *op = "exec";
    char *secret = NULL;
    int code = -1;
    if (modal_router_access(sb, ctx, 0, 0, op, NULL) < 0)
        goto out;
    if (p->env && p->env[0]) {
        pthread_mutex_lock(&sb->lock);
        char *app = sb->app_id ? strdup(sb->app_id) : NULL;
        pthread_mutex_unlock(&sb->lock);
        if (!app && !(app = modal_app(sb->s.c, ctx, NULL, op, NULL)))
            goto out;
        secret = modal_secret(sb->s.c, ctx, app, (const char *const *)p->env, op, NULL);
        free(app);
        if (!secret)
            goto out;
    }
    /* On a terminal the shell itself must carry the mark in its
     * environment (a resize and a hang-up find the terminal's processes by
     * it): exported, then a new shell exec'd for the script. */
    /* Otherwise the script runs in a shell of its own (its $$ its own), the
     * only one carrying the mark (the wrapper outlives a signal sent to the
     * command and exits as it did), between two readings of the sandbox's
     * OOM-kill counter: a SIGKILL while it rose leaves a marker file that
     * modal_exec_run() looks for (CASE-49). */
    char *quoted = cl_shell_quote(p->script);
    char *full = !quoted ? NULL
                 : p->tty_rows
                 ? cl_printf("export " CL_EXEC_MARK "=%s\nexec /bin/sh -c %s", p->tag, quoted)
                 : cl_printf(MODAL_OOM_FN "__sbx_o0=$(__sbx_oom)\ntrap : INT QUIT HUP\n"
                             CL_EXEC_MARK "=%s /bin/bash -c %s\n__sbx_rc=$?\n"
                             "[ $__sbx_rc = 137 ] && [ \"$(__sbx_oom)\" != \"$__sbx_o0\" ] && "
                             ": > " MODAL_OOM_MARK "\nexit $__sbx_rc\n", p->tag, quoted, p->tag);
    free(quoted);
    if (!full) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    char *args[] = { p->tty_rows ? "/bin/sh" : "/bin/bash", "-c", full };
    Modal__Client__PTYInfo pty = MODAL__CLIENT__PTYINFO__INIT;
    Modal__TaskCommandRouter__TaskExecStartRequest rq =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST__INIT;
    rq.task_id = sb->task_id;
    rq.exec_id = p->exec_id;
    rq.n_command_args = 3;
    rq.command_args = args;
    rq.stdout_config = MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDOUT_CONFIG__TASK_EXEC_STDOUT_CONFIG_PIPE;
    rq.stderr_config = MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDERR_CONFIG__TASK_EXEC_STDERR_CONFIG_PIPE;
    if (secret) {
        rq.n_secret_ids = 1;
        rq.secret_ids = &secret;
    }
    if (p->tty_rows) {
        pty.enabled = 1;
        pty.winsz_rows = p->tty_rows;
        pty.winsz_cols = p->tty_cols;
        rq.pty_info = &pty;
    }
    /* The exec id makes a repeated start the same command: safe to send
     * again. */
    int rc = modal_router_call(sb, ctx, "TaskExecStart", &rq.base, NULL, NULL, NULL, NULL,
                               CL_SAFE, NULL, op, "start the command", NULL);
    free(full);
    if (rc < 0)
        goto out;
    pthread_mutex_lock(&p->plock);
    p->started = 1;
    pthread_mutex_unlock(&p->plock);

    modal_writer w = { .p = p, .ctx = ctx };
    if (p->stdin_fd >= 0)
        w.started = pthread_create(&w.thread, NULL, modal_writer_main, &w) == 0;
    else if (!p->tty_rows && modal_stdin_write(p, ctx, NULL, 0, 0, 1) < 0)
        goto out;
    modal_reader ro = { .p = p, .sink = &p->out, .fd = 0, .ctx = ctx };
    modal_reader re = { .p = p, .sink = &p->err, .fd = 1, .ctx = ctx };
    re.started = pthread_create(&re.thread, NULL, modal_reader_main, &re) == 0;
    if (!re.started)
        re.rc = modal_read_stream(&re);
    ro.rc = modal_read_stream(&ro);
    if (ro.rc < 0)
        cl_proc_stop(&p->base);     /* ends the other reader too */
    if (re.started)
        pthread_join(re.thread, NULL);
    if (ro.rc == 0 && re.rc == 0) {
        Modal__TaskCommandRouter__TaskExecWaitRequest wq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_REQUEST__INIT;
        wq.task_id = sb->task_id;
        wq.exec_id = p->exec_id;
        Modal__TaskCommandRouter__TaskExecWaitResponse *wr = NULL;
        if (modal_router_call(sb, ctx, "TaskExecWait", &wq.base,
                              &modal__task_command_router__task_exec_wait_response__descriptor,
                              (ProtobufCMessage **)&wr, NULL, NULL, CL_SAFE, NULL, op,
                              "wait for the command", NULL) == 0) {
            if (wr->exit_status_case
                == MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_RESPONSE__EXIT_STATUS_SIGNAL)
                code = 128 + (wr->signal & 0x7f);
            else if (wr->exit_status_case
                     == MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_RESPONSE__EXIT_STATUS_CODE)
                code = wr->code < 0 ? 255 : wr->code & 0xff;
            else
                cl_fail(NULL, SBX_ERROR_CONNECTION, op, "modal TaskExecWait answered with "
                        "neither a code nor a signal");
            protobuf_c_message_free_unpacked(&wr->base, NULL);
        }
    } else {
        cl_fail_from(NULL, ro.rc < 0 ? &ro.err : &re.err, op);
    }
    pthread_mutex_lock(&p->plock);
    p->over = 1;
    pthread_mutex_unlock(&p->plock);
    if (w.started) {
        cl_last_error l = *cl_last();
        pthread_join(w.thread, NULL);
        if (code < 0)
            cl_fail_from(NULL, &l, op);
    }
out:
    free(secret);
    return code;
}

static void modal_proc_init(modal_proc *p, struct sbx_plugin_sandbox *sb)
{
    p->sb = sb;
    p->stdin_fd = -1;
    p->base.stdout_fd = p->base.stderr_fd = p->base.stop_fd = p->base.stop_wr = -1;
    p->base.event_rd = p->base.event_wr = -1;
    pthread_mutex_init(&p->plock, NULL);
    cl_random_hex(p->tag, 12);
    char h[33];
    cl_random_hex(h, 16);
    snprintf(p->exec_id, sizeof p->exec_id, "%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12,
             h + 16, h + 20);
    p->out = (modal_sink){ .stream = 1, .fd = -1 };
    p->err = (modal_sink){ .stream = 2, .fd = -1 };
}

/*
 * One of the plugin's own commands, run to its end on this thread:
 * @script, stdin from @in_fd (-1: none), stdout to @out_fd (-1: into
 * @out, at most @out_cap bytes; @out NULL: discarded), stderr into @err (at
 * most 4 KiB; may be NULL). 0 with the exit status in *@code, or -1 with
 * *@error.
 */
static int modal_run_own(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const char *script, int in_fd, int out_fd, cl_buf *out, size_t out_cap,
                         cl_buf *err, int *code, const char *op, sbx_error **error)
{
    modal_proc p;
    memset(&p, 0, sizeof(p));
    modal_proc_init(&p, sb);
    p.script = (char *)script;
    p.stdin_fd = in_fd;
    if (out_fd >= 0)
        p.out = (modal_sink){ .mode = 2, .stream = 1, .fd = out_fd };
    else if (out)
        p.out = (modal_sink){ .mode = 3, .stream = 1, .fd = -1, .buf = out, .cap = out_cap };
    if (err)
        p.err = (modal_sink){ .mode = 3, .stream = 2, .fd = -1, .buf = err, .cap = 4096 };
    *code = modal_run(&p, ctx);
    pthread_mutex_destroy(&p.plock);
    if (*code < 0) {
        modal_relay_in(sb, error, op);
        return -1;
    }
    return 0;
}

/* cl_run_fn (provider.h): a short command, output discarded. */
static int modal_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                           int *code, const char *op, sbx_error **error)
{
    return modal_run_own(sb, ctx, cmd, -1, -1, NULL, 0, NULL, code, op, error);
}

static int modal_exec_run(cl_proc *base)
{
    modal_proc *p = (modal_proc *)base;
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    int code = modal_run(p, &ctx);
    if (code < 0) {
        cl_proc_fail_in(base, &p->sb->s);
    } else if (code == 137 && !p->tty_rows) {
        /* SIGKILL: by the memory limit when the marker is there. */
        char *chk = cl_printf("[ -e " MODAL_OOM_MARK " ] || exit 1; rm -f " MODAL_OOM_MARK,
                              p->tag, p->tag);
        int c2 = -1;
        if (chk && modal_run_short(p->sb, &ctx, chk, &c2, "exec", NULL) == 0 && c2 == 0)
            p->oom_killed = 1;
        free(chk);
    }
    return code;
}

/* SBX_PLUGIN_EXEC_OOM_KILLED when the memory limit killed the command. */
static int modal_exec_end_info(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                               uint64_t *flags, sbx_error **error)
{
    (void)ctx;
    (void)error;
    modal_proc *p = (modal_proc *)process;
    *flags = p->oom_killed ? SBX_PLUGIN_EXEC_OOM_KILLED : 0;
    return 0;
}

static void modal_proc_free_fields(modal_proc *p)
{
    if (p->stdin_fd >= 0)
        close(p->stdin_fd);
    cl_strv_free(p->env);
    free(p->script);
    pthread_mutex_destroy(&p->plock);
}

static int modal_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                            const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                            sbx_error **error)
{
    const char *op = "exec";
    (void)ctx;
    /* The script (argv or shell text, the cwd) goes in command_args and the
     * env in a Secret's env_dict: protobuf strings, UTF-8 only. */
    if (cl_exec_check_pty(&sb->s, MODAL_BACKEND, rq, 0, error) < 0
        || cl_text_check(rq, NULL, MODAL_API, 0, op, error) < 0)
        return -1;
    modal_proc *p = calloc(1, sizeof(*p));
    if (!p) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    modal_proc_init(p, sb);
    p->tty_rows = rq->tty_rows;
    p->tty_cols = rq->tty_cols;
    p->out.mode = p->err.mode = 1;
    p->script = cl_shell_script(rq->argv, rq->shell, rq->cwd);
    p->env = cl_strv_dup(rq->env);
    int made = p->script && p->env;
    if (cl_exec_launch(&p->base, modal_exec_run, p, made, rq, &p->stdin_fd, op, error) < 0) {
        modal_proc_free_fields(p);
        free(p);
        return -1;
    }
    *process = (sbx_plugin_process *)p;
    return 0;
}

static int modal_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                           int *exit_code, sbx_error **error)
{
    modal_proc *p = (modal_proc *)process;
    (void)ctx;
    return cl_exec_wait_script(process, p->sb, p->script, modal_run_short, timeout_ms,
                               exit_code, error);
}

static int modal_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                           sbx_error **error)
{
    modal_proc *p = (modal_proc *)process;
    pthread_mutex_lock(&p->plock);
    int started = p->started;
    pthread_mutex_unlock(&p->plock);
    if (!started)
        return 0;
    return cl_proc_mark_kill(&p->base, p->sb, modal_run_short, ctx, p->tag, sig, error);
}

/* No resize call in Modal's API: stty on the command's terminal, in the
 * sandbox (cl_proc_mark_resize). */
static int modal_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                             unsigned rows, unsigned cols, sbx_error **error)
{
    modal_proc *p = (modal_proc *)process;
    if (cl_resize_check(p->tty_rows, error) < 0)
        return -1;
    return cl_proc_mark_resize(&p->base, (sbx_plugin_sandbox *)p->sb, modal_run_short, ctx,
                               p->tag, rows, cols, error);
}

static void modal_exec_free(sbx_plugin_process *process)
{
    modal_proc *p = (modal_proc *)process;
    if (!p)
        return;
    sbx_call_ctx c2 = { sizeof(c2), cl_now() + 10, -1, NULL };
    modal_exec_kill(process, &c2, SIGKILL, NULL);
    cl_proc_stop(&p->base);
    cl_proc_clear(&p->base);
    modal_proc_free_fields(p);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/* "TYPE[:COUNT]" into @cfg (gpu_type upper-cased into @type). 0, or -1
 * with a configuration error naming it. */
static int modal_gpu(const char *gpu, Modal__Client__GPUConfig *cfg, char *type, size_t cap,
                     sbx_error **error)
{
    size_t n;
    long count;
    if (cl_gpu_parse(gpu, NULL, 64, &n, &count) < 0 || n >= cap) {
        modal_refuse(error, "gpu", gpu, "not a GPU as TYPE or TYPE:COUNT (e.g. A100, T4:2, "
                     "A100-80GB:4)");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        type[i] = (char)toupper((unsigned char)gpu[i]);
    type[n] = '\0';
    cfg->gpu_type = type;
    cfg->count = (uint32_t)count;
    return 0;
}

typedef struct modal_join {
    char last[128];     /* the last entry id, to read on from */
    int status;         /* GenericStatus of the result; 0 until one came */
    char exc[512];
} modal_join;

static int modal_on_join(void *ud, const uint8_t *p, size_t n)
{
    modal_join *j = ud;
    Modal__Client__ImageJoinStreamingResponse *m =
        modal__client__image_join_streaming_response__unpack(NULL, n, p);
    if (!m) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "create", "modal: an image build message that is "
                "not an ImageJoinStreamingResponse");
        return -1;
    }
    if (m->entry_id && *m->entry_id)
        snprintf(j->last, sizeof j->last, "%s", m->entry_id);
    if (m->result && m->result->status) {
        j->status = (int)m->result->status;
        snprintf(j->exc, sizeof j->exc, "%s", m->result->exception ? m->result->exception : "");
    }
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return 0;
}

/* The image id for @rq: snapshot_id as it is, else ImageGetOrCreate of
 * "FROM <image>" joined until built. A new string or NULL with *@error. */
static char *modal_image(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                         const sbx_plugin_create_request *rq, const char *app_id,
                         sbx_error **error)
{
    const char *op = "create";
    if (rq->snapshot_id) {
        char *s = strdup(rq->snapshot_id);
        if (!s)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return s;
    }
    const char *from = rq->image ? rq->image : MODAL_DEFAULT_IMAGE;
    char *line = cl_printf("FROM %s", from);
    char *cmds[] = { line };
    Modal__Client__Image img = MODAL__CLIENT__IMAGE__INIT;
    img.n_dockerfile_commands = 1;
    img.dockerfile_commands = cmds;
    Modal__Client__ImageGetOrCreateRequest gq = MODAL__CLIENT__IMAGE_GET_OR_CREATE_REQUEST__INIT;
    gq.image = &img;
    gq.app_id = (char *)app_id;
    gq.builder_version = MODAL_BUILDER_VERSION;
    Modal__Client__ImageGetOrCreateResponse *g = NULL;
    int rc = line ? modal_ctl(c, ctx, "ImageGetOrCreate", &gq.base,
                              &modal__client__image_get_or_create_response__descriptor,
                              (ProtobufCMessage **)&g, CL_SAFE, 0, NULL, op, "get the image",
                              error) : -1;
    free(line);
    if (!line)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    if (rc < 0)
        return NULL;
    char *id = g->image_id && *g->image_id ? strdup(g->image_id) : NULL;
    int built = g->result && g->result->status
                == MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_SUCCESS;
    protobuf_c_message_free_unpacked(&g->base, NULL);
    if (!id) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "modal ImageGetOrCreate answered without an "
                "image_id");
        return NULL;
    }
    /* ImageJoinStreaming until a result: the image is built. */
    modal_join jn = { "", built ? MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_SUCCESS
                                : 0, "" };
    while (!jn.status) {
        if (ctx && ctx->deadline > 0 && cl_now() >= ctx->deadline) {
            cl_fail(error, SBX_ERROR_TIMEOUT, op, "modal image %s was not built in time", id);
            free(id);
            return NULL;
        }
        Modal__Client__ImageJoinStreamingRequest jq =
            MODAL__CLIENT__IMAGE_JOIN_STREAMING_REQUEST__INIT;
        jq.image_id = id;
        jq.timeout = (float)MODAL_POLL_S;
        jq.last_entry_id = jn.last;
        size_t n = protobuf_c_message_get_packed_size(&jq.base);
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            free(id);
            return NULL;
        }
        protobuf_c_message_pack(&jq.base, buf);
        cl_grpc_call call = { .method = MODAL_CTL "ImageJoinStreaming", .req = buf, .req_len = n,
                              .idempotent = CL_SAFE, .secs = MODAL_POLL_S + 10,
                              .on_msg = modal_on_join, .ud = &jn,
                              .what = "wait for the image's build" };
        cl_grpc_resp r;
        rc = cl_grpc_invoke(c->ctl, ctx, &call, &r, op, NULL);
        int progressed = r.messages > 0;
        cl_grpc_resp_clear(&r);
        free(buf);
        if (rc < 0 && !(progressed && cl_last()->code == SBX_ERROR_CONNECTION)) {
            cl_fail_from(error, cl_last(), op);
            free(id);
            return NULL;
        }
    }
    if (jn.status != MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_SUCCESS) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "modal could not build the "
                               "image %s: %s", from, jn.exc[0] ? jn.exc : "no reason given");
        cl_context(e, "image", from);
        free(id);
        return NULL;
    }
    return id;
}

static int modal_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                        const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                        sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    uint64_t set = rq->set_fields;
    char buf[64], gtype[64], expires[32];
    long long idle = 0, memory = 0;
    if (cl_workdir_check(MODAL_BACKEND, rq->workdir, error) < 0)
        return -1;
    if (rq->template_name) {
        modal_refuse(error, "template", rq->template_name, "Modal runs images, not templates "
                     "(use image)");
        return -1;
    }
    if (rq->snapshot_id && rq->image) {
        modal_refuse(error, "image", rq->image, "give an image or a snapshot_id, not both");
        return -1;
    }
    static const cl_limit sizes[] = {
        { "cpu", 0, 2048, 0, CL_LIMIT_ABOVE, "must be more than 0 vCPUs (at most 2048)", NULL,
          NULL, NULL },
        { "memory_mb", 1, UINT32_MAX, 0, 0, "must be from 1 to 4294967295 MiB", NULL, NULL,
          NULL },
        { "disk_mb", 1, UINT32_MAX, 0, CL_LIMIT_ZERO_NONE, "must be more than 0 MiB", NULL, NULL,
          NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    }, lifetime[] = {
        { "timeout_secs", 0, MODAL_MAX_TIMEOUT_S, 0, CL_LIMIT_ABOVE | CL_LIMIT_ALWAYS,
          "Modal takes 1 to 86400 seconds", NULL, NULL, NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    if (cl_limits_check(rq, MODAL_BACKEND, sizes, error) < 0)
        return -1;
    Modal__Client__GPUConfig gpu = MODAL__CLIENT__GPUCONFIG__INIT;
    if (rq->gpu && modal_gpu(rq->gpu, &gpu, gtype, sizeof gtype, error) < 0)
        return -1;
    if (cl_limits_check(rq, MODAL_BACKEND, lifetime, error) < 0)
        return -1;
    double ts = rq->timeout_secs;
    /* The backend options: {"idle_timeout_secs": N, "memory_mb": N}, whole
     * numbers from 1 (seconds up to a day; MiB up to 2^32 - 1). */
    const cl_option options[] = {
        { "idle_timeout_secs", CL_OPTION_COUNT, MODAL_MAX_TIMEOUT_S, &idle },
        { "memory_mb", CL_OPTION_COUNT, UINT32_MAX, &memory },
        { NULL, 0, 0, NULL },
    };
    if (cl_backend_options(rq, MODAL_BACKEND, options, error) < 0)
        return -1;
    if ((set & SBX_OPTION_MEMORY_MB) && memory) {
        snprintf(buf, sizeof buf, "%lld", (long long)rq->memory_mb);
        modal_refuse(error, "memory_mb", buf, "give memory_mb (a request and a limit) or the "
                     "backend option memory_mb (a request only), not both");
        return -1;
    }
    const uint16_t *ports = NULL;
    size_t n_ports = cl_request_ports(rq, &ports);
    long long timeout = (long long)ceil(ts) + MODAL_LIFETIME_MARGIN_S;
    if (timeout > MODAL_MAX_TIMEOUT_S)
        timeout = MODAL_MAX_TIMEOUT_S;

    int rc = -1;
    char *app_id = NULL, *image_id = NULL, *secret = NULL, *id = NULL;
    struct sbx_plugin_sandbox *sb = NULL;
    if (!(app_id = modal_app(c, ctx, rq->app_name, op, error)))
        goto out;
    if (!(image_id = modal_image(c, ctx, rq, app_id, error)))
        goto out;
    if (rq->env && rq->env[0] && !(secret = modal_secret(c, ctx, app_id, rq->env, op, error)))
        goto out;

    /* As the Go SDK's SandboxCreateParams: the cpu request and limit in
     * thousandths of a physical core (Modal's cpu counts physical cores; a
     * core is 2 vCPUs, so 1 vCPU is 500), the memory request and limit in
     * MiB (memory_mb_max, over which the sandbox's processes are OOM-killed). */
    Modal__Client__Resources res = MODAL__CLIENT__RESOURCES__INIT;
    if (set & SBX_OPTION_CPU)
        res.milli_cpu = res.milli_cpu_max = (uint32_t)ceil(rq->cpu * 500);
    res.memory_mb = (uint32_t)memory;
    if (set & SBX_OPTION_MEMORY_MB)
        res.memory_mb = res.memory_mb_max = (uint32_t)rq->memory_mb;
    if ((set & SBX_OPTION_DISK_MB) && rq->disk_mb)
        res.ephemeral_disk_mb = (uint32_t)rq->disk_mb;
    if (rq->gpu)
        res.gpu_config = &gpu;
    Modal__Client__NetworkAccess net = MODAL__CLIENT__NETWORK_ACCESS__INIT;
    net.network_access_type = rq->allow_internet
        ? MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__OPEN
        : MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__BLOCKED;
    char *entry[] = { "sleep", "48h" };
    Modal__Client__Sandbox def = MODAL__CLIENT__SANDBOX__INIT;
    def.n_entrypoint_args = 2;
    def.entrypoint_args = entry;
    def.image_id = image_id;
    if (secret) {
        def.n_secret_ids = 1;
        def.secret_ids = &secret;
    }
    def.resources = &res;
    def.timeout_secs = (uint32_t)timeout;
    def.workdir = (char *)(rq->workdir && *rq->workdir ? rq->workdir : "");
    def.network_access = &net;
    def.idle_timeout_secs = (uint32_t)idle;
    /* The ports, tunnelled over TLS (the SDKs' encrypted_ports). */
    Modal__Client__PortSpecs pspecs = MODAL__CLIENT__PORT_SPECS__INIT;
    Modal__Client__PortSpec *pspec = n_ports ? calloc(n_ports, sizeof(*pspec)) : NULL;
    Modal__Client__PortSpec **ppspec = n_ports ? calloc(n_ports, sizeof(*ppspec)) : NULL;
    if (n_ports && (!pspec || !ppspec)) {
        free(pspec);
        free(ppspec);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_ports; i++) {
        modal__client__port_spec__init(&pspec[i]);
        pspec[i].port = ports[i];
        ppspec[i] = &pspec[i];
    }
    if (n_ports) {
        pspecs.n_ports = n_ports;
        pspecs.ports = ppspec;
        def.open_ports = &pspecs;
    }
    snprintf(expires, sizeof expires, "%.0f", rq->expires_at > 0 ? rq->expires_at
                                                                 : cl_wallclock() + (double)timeout);
    Modal__Client__SandboxTag tags[3] = { MODAL__CLIENT__SANDBOX_TAG__INIT,
                                        MODAL__CLIENT__SANDBOX_TAG__INIT,
                                        MODAL__CLIENT__SANDBOX_TAG__INIT };
    Modal__Client__SandboxTag *ptags[3] = { &tags[0], &tags[1], &tags[2] };
    size_t ntags = 0;
    tags[ntags].tag_name = CL_META_BACKEND;
    tags[ntags++].tag_value = MODAL_BACKEND;
    if (ctx && ctx->create_token) {
        tags[ntags].tag_name = CL_META_TOKEN;
        tags[ntags++].tag_value = (char *)ctx->create_token;
    }
    tags[ntags].tag_name = CL_META_EXPIRES;
    tags[ntags++].tag_value = expires;
    Modal__Client__SandboxCreateRequest cq = MODAL__CLIENT__SANDBOX_CREATE_REQUEST__INIT;
    cq.app_id = app_id;
    cq.definition = &def;
    cq.environment_name = c->environment ? c->environment : "";
    cq.n_tags = ntags;
    cq.tags = ptags;
    Modal__Client__SandboxCreateResponse *cr = NULL;
    int st;
    int crc = modal_ctl(c, ctx, "SandboxCreate", &cq.base,
                        &modal__client__sandbox_create_response__descriptor,
                        (ProtobufCMessage **)&cr, CL_UNSAFE, 0, &st, op, "create the sandbox",
                        NULL);
    free(pspec);
    free(ppspec);
    if (crc < 0) {
        sbx_error *err = cl_create_unanswered(c->cl.reaper, ctx, ctx ? ctx->create_token : NULL,
                                              op, error);
        if (st > 0) {
            char num[16];
            snprintf(num, sizeof num, "%d", st);
            cl_context(err, "grpc_status", num);
        }
        goto out;
    }
    if (cr->sandbox_id && *cr->sandbox_id)
        id = strdup(cr->sandbox_id);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
    if (!id) {
        cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "modal SandboxCreate answered without a "
                "sandbox_id");
        if (ctx && ctx->create_token)
            cl_reap_now(c->cl.reaper, NULL, ctx->create_token, 5.0);
        goto out;
    }
    if (!(sb = modal_sandbox_new(c, id))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto undo;
    }
    sb->app_id = app_id;
    app_id = NULL;
    /* Ready once it names its task. */
    if (modal_task(sb, ctx, 0, op, error) < 0)
        goto undo;
    *sandbox = sb;
    sb = NULL;
    rc = 0;
    goto out;
undo:
    if (error && *error)
        cl_context(*error, "sandbox_id", id);
    modal_terminate(c, NULL, id, op, NULL);
out:
    modal_sandbox_free(sb);
    free(app_id);
    free(image_id);
    free(secret);
    free(id);
    return rc;
}

CL_DESTROY(modal_destroy, modal_delete)

/* SandboxWait with no wait: a result means it ended (gone). */
static int modal_is_alive(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "is_alive";
    if (modal_is_gone(sb))
        return 0;
    Modal__Client__SandboxWaitRequest rq = MODAL__CLIENT__SANDBOX_WAIT_REQUEST__INIT;
    rq.sandbox_id = sb->s.id;
    rq.timeout = 0;
    Modal__Client__SandboxWaitResponse *r = NULL;
    int st;
    if (modal_ctl(sb->s.c, ctx, "SandboxWait", &rq.base,
                  &modal__client__sandbox_wait_response__descriptor, (ProtobufCMessage **)&r,
                  CL_SAFE, 0, &st, op, "look at the sandbox", NULL) < 0) {
        if (st == CL_GRPC_NOT_FOUND) {
            modal_mark_gone(sb);
            return 0;
        }
        cl_fail_from(error, cl_last(), op);
        return -1;
    }
    int ended = r->result && r->result->status
                != MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_UNSPECIFIED;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (ended)
        modal_mark_gone(sb);
    return ended ? 0 : 1;
}

/* {"version":1,"sandbox_id"}: the id only (no token, no JWT, no env). */
static char *modal_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                                 sbx_error **error)
{
    (void)ctx;
    if (modal_check(sb, "session_state", error) < 0)
        return NULL;
    json_object *j = json_object_new_object();
    json_object_object_add(j, "version", json_object_new_int(MODAL_STATE_VERSION));
    json_object_object_add(j, "sandbox_id", json_object_new_string(sb->s.id));
    char *out = cl_state_out(j, "session_state", error);
    json_object_put(j);
    return out;
}

static int modal_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                        const char *state_json, sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    json_object *data;
    struct sbx_plugin_sandbox *sb = cl_resume_state(client, state_json, MODAL_BACKEND,
                                                    MODAL_STATE_VERSION, "sandbox_id",
                                                    sizeof(*sb), &data, error);
    if (!sb)
        return -1;
    pthread_mutex_init(&sb->lock, NULL);
    return cl_resume_end(modal_task(sb, ctx, 0, "resume", error), sb, sandbox, NULL, data,
                         modal_sandbox_free);
}

/* SandboxSnapshotFs: the image id, which a create takes as snapshot_id. */
static char *modal_snapshot(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "snapshot";
    if (modal_check(sb, op, error) < 0)
        return NULL;
    Modal__Client__SandboxSnapshotFsRequest rq = MODAL__CLIENT__SANDBOX_SNAPSHOT_FS_REQUEST__INIT;
    rq.sandbox_id = sb->s.id;
    rq.timeout = (float)MODAL_POLL_S;
    Modal__Client__SandboxSnapshotFsResponse *r = NULL;
    int st;
    if (modal_ctl(sb->s.c, ctx, "SandboxSnapshotFs", &rq.base,
                  &modal__client__sandbox_snapshot_fs_response__descriptor,
                  (ProtobufCMessage **)&r, CL_SAFE, MODAL_POLL_S + 10, &st, op,
                  "snapshot the sandbox's filesystem", NULL) < 0) {
        modal_sb_call_failed(sb, st, 0, op, error);
        return NULL;
    }
    char *out = NULL;
    if (r->result && r->result->status
        != MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_SUCCESS) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "modal could not snapshot sandbox %s: %s",
                sb->s.id, r->result->exception && *r->result->exception
                          ? r->result->exception : "no reason given");
    } else if (!r->image_id || !*r->image_id) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "modal SandboxSnapshotFs answered without an "
                "image_id");
    } else {
        out = cl_host_strdup(r->image_id, op, error);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return out;
}

/* The reaper's look-up: SandboxList of the running sandboxes tagged with
 * create token @token. */
static int modal_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                            sbx_error **error)
{
    struct sbx_plugin_client *c = ud;
    Modal__Client__SandboxTag tag = MODAL__CLIENT__SANDBOX_TAG__INIT;
    Modal__Client__SandboxTag *ptag = &tag;
    tag.tag_name = CL_META_TOKEN;
    tag.tag_value = (char *)token;
    Modal__Client__SandboxListRequest rq = MODAL__CLIENT__SANDBOX_LIST_REQUEST__INIT;
    rq.environment_name = c->environment ? c->environment : "";
    rq.n_tags = 1;
    rq.tags = &ptag;
    Modal__Client__SandboxListResponse *r = NULL;
    cl_ids s = { 0 };
    int rc = modal_ctl(c, ctx, "SandboxList", &rq.base,
                       &modal__client__sandbox_list_response__descriptor, (ProtobufCMessage **)&r,
                       CL_SAFE, 0, NULL, "create", "list sandboxes", error);
    for (size_t i = 0; rc == 0 && i < r->n_sandboxes; i++)
        cl_ids_add(&s, r->sandboxes[i]->id);
    if (r)
        protobuf_c_message_free_unpacked(&r->base, NULL);
    return cl_ids_finish(&s, rc, ids, "create", error);
}

/* The value of tag @name among @tags, or NULL (borrowed). */
static const char *modal_tag(Modal__Client__SandboxTag **tags, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (tags[i]->tag_name && strcmp(tags[i]->tag_name, name) == 0)
            return tags[i]->tag_value;
    return NULL;
}

/* SandboxTagsGet of @id: the answer (free with
 * protobuf_c_message_free_unpacked), or NULL with the thread's last error
 * (cl_fail_from(); NOT_FOUND: *@status 5). */
static Modal__Client__SandboxTagsGetResponse *
modal_tags_get(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id, int *status,
               const char *op)
{
    Modal__Client__SandboxTagsGetRequest rq = MODAL__CLIENT__SANDBOX_TAGS_GET_REQUEST__INIT;
    rq.sandbox_id = (char *)id;
    Modal__Client__SandboxTagsGetResponse *r = NULL;
    if (modal_ctl(c, ctx, "SandboxTagsGet", &rq.base,
                  &modal__client__sandbox_tags_get_response__descriptor, (ProtobufCMessage **)&r,
                  CL_SAFE, 0, status, op, "read the sandbox's tags", NULL) < 0)
        return NULL;
    return r;
}

/*
 * list_owned: the running sandboxes of the workspace's environment tagged
 * sbx_backend=modal, by SandboxList with that tag filter, page by page
 * (before_timestamp: the oldest created_at of the page before, as the SDKs
 * page), each with its tags (SandboxInfo.tags; SandboxTagsGet for one that
 * came without them). A sandbox without a create token tag was not made by
 * this library and is not reported.
 */
static int modal_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                            sbx_plugin_owned_fn fn, void *user_data, sbx_error **error)
{
    const char *op = "list_owned";
    struct sbx_plugin_client *c = client;
    Modal__Client__SandboxTag tag = MODAL__CLIENT__SANDBOX_TAG__INIT;
    Modal__Client__SandboxTag *ptag = &tag;
    tag.tag_name = CL_META_BACKEND;
    tag.tag_value = MODAL_BACKEND;
    double before = 0;
    for (int page = 0; page < MODAL_LIST_PAGES; page++) {
        Modal__Client__SandboxListRequest rq = MODAL__CLIENT__SANDBOX_LIST_REQUEST__INIT;
        rq.environment_name = c->environment ? c->environment : "";
        rq.before_timestamp = before;
        rq.n_tags = 1;
        rq.tags = &ptag;
        Modal__Client__SandboxListResponse *r = NULL;
        if (modal_ctl(c, ctx, "SandboxList", &rq.base,
                      &modal__client__sandbox_list_response__descriptor,
                      (ProtobufCMessage **)&r, CL_SAFE, 0, NULL, op, "list sandboxes",
                      error) < 0)
            return -1;
        if (r->n_sandboxes == 0) {
            protobuf_c_message_free_unpacked(&r->base, NULL);
            return 0;
        }
        double oldest = 0;
        int stop = 0, rc = 0;
        for (size_t i = 0; i < r->n_sandboxes && !stop; i++) {
            Modal__Client__SandboxInfo *si = r->sandboxes[i];
            if (!oldest || si->created_at < oldest)
                oldest = si->created_at;
            if (!si->id || !*si->id)
                continue;
            Modal__Client__SandboxTagsGetResponse *tg = NULL;
            Modal__Client__SandboxTag **tags = si->tags;
            size_t nt = si->n_tags;
            if (nt == 0) {
                int st;
                tg = modal_tags_get(c, ctx, si->id, &st, op);
                if (!tg) {
                    if (st == CL_GRPC_NOT_FOUND)
                        continue;       /* ended since the list */
                    cl_fail_from(error, cl_last(), op);
                    rc = -1;
                    break;
                }
                tags = tg->tags;
                nt = tg->n_tags;
            }
            const char *token = modal_tag(tags, nt, CL_META_TOKEN);
            const char *backend = modal_tag(tags, nt, CL_META_BACKEND);
            const char *exp = modal_tag(tags, nt, CL_META_EXPIRES);
            if (token && *token && backend && strcmp(backend, MODAL_BACKEND) == 0) {
                sbx_plugin_owned_info info = { sizeof(info), si->id, token, si->created_at,
                                               exp ? strtod(exp, NULL) : 0 };
                stop = fn(&info, user_data) != 0;
            }
            if (tg)
                protobuf_c_message_free_unpacked(&tg->base, NULL);
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
        if (rc < 0)
            return -1;
        if (stop || !(oldest > 0) || (before > 0 && oldest >= before))
            return 0;
        before = oldest;
    }
    return 0;
}

/* destroy_by_id: SandboxTerminate of @id, once its tags (SandboxTagsGet)
 * show this library made it (sbx_backend=modal and a create token); a
 * sandbox it did not make is refused (invalid_argument), one already gone
 * is done. */
static int modal_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                               const char *id, sbx_error **error)
{
    const char *op = "destroy_by_id";
    int st;
    Modal__Client__SandboxTagsGetResponse *tg = modal_tags_get(client, ctx, id, &st, op);
    if (!tg) {
        if (st != CL_GRPC_NOT_FOUND) {
            cl_fail_from(error, cl_last(), op);
            return -1;
        }
        return 0;
    }
    const char *token = modal_tag(tg->tags, tg->n_tags, CL_META_TOKEN);
    const char *backend = modal_tag(tg->tags, tg->n_tags, CL_META_BACKEND);
    int ours = token && *token && backend && strcmp(backend, MODAL_BACKEND) == 0;
    protobuf_c_message_free_unpacked(&tg->base, NULL);
    if (!ours) {
        sbx_error *e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "modal sandbox %s was not "
                               "made by this library (no " CL_META_TOKEN " tag): not "
                               "terminated", id);
        cl_context(e, "sandbox_id", id);
        return -1;
    }
    return modal_terminate(client, ctx, id, op, error);
}

/* ------------------------------------------------------------------------ */
/* Exposed ports: Modal's tunnels                                            */
/* ------------------------------------------------------------------------ */

/*
 * The sandbox's tunnels, read once (SandboxGetTunnels, waiting up to
 * MODAL_TUNNEL_WAIT_S for them): Modal opens them at create only (the
 * create's ports), so they do not change while the sandbox runs. Each is
 * kept as the URL the SDKs' Tunnel.URL() gives: "https://HOST" for port
 * 443, else "https://HOST:PORT". 0, or -1 with *@error.
 */
static int modal_tunnels(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *op,
                         sbx_error **error)
{
    pthread_mutex_lock(&sb->lock);
    int done = sb->tunnels_read;
    pthread_mutex_unlock(&sb->lock);
    if (done)
        return 0;
    Modal__Client__SandboxGetTunnelsRequest rq = MODAL__CLIENT__SANDBOX_GET_TUNNELS_REQUEST__INIT;
    rq.sandbox_id = sb->s.id;
    rq.timeout = (float)MODAL_TUNNEL_WAIT_S;
    Modal__Client__SandboxGetTunnelsResponse *r = NULL;
    int st;
    if (modal_ctl(sb->s.c, ctx, "SandboxGetTunnels", &rq.base,
                  &modal__client__sandbox_get_tunnels_response__descriptor,
                  (ProtobufCMessage **)&r, CL_SAFE, MODAL_TUNNEL_WAIT_S + 10, &st, op,
                  "read the sandbox's tunnels", NULL) < 0) {
        modal_sb_call_failed(sb, st, 0, op, error);
        return -1;
    }
    if (r->result && r->result->status
        == MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_TIMEOUT) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        cl_fail(error, SBX_ERROR_TIMEOUT, op, "modal sandbox %s: its tunnels were not ready in "
                "%.0f s", sb->s.id, MODAL_TUNNEL_WAIT_S);
        return -1;
    }
    size_t n = r->n_tunnels;
    unsigned *ports = calloc(n + 1, sizeof(*ports));
    char **urls = calloc(n + 1, sizeof(*urls));
    int bad = !ports || !urls;
    for (size_t i = 0; !bad && i < n; i++) {
        Modal__Client__TunnelData *t = r->tunnels[i];
        ports[i] = t->container_port;
        if (!t->host || !*t->host)
            urls[i] = NULL;
        else if (t->port == 443 || t->port == 0)
            bad = !(urls[i] = cl_printf("https://%s", t->host));
        else
            bad = !(urls[i] = cl_printf("https://%s:%u", t->host, t->port));
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (bad) {
        for (size_t i = 0; urls && i < n; i++)
            free(urls[i]);
        free(urls);
        free(ports);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&sb->lock);
    if (!sb->tunnels_read) {
        sb->tunnels_read = 1;
        sb->n_tunnels = n;
        sb->tunnel_ports = ports;
        sb->tunnel_urls = urls;
        ports = NULL;
        urls = NULL;
    }
    pthread_mutex_unlock(&sb->lock);
    for (size_t i = 0; urls && i < n; i++)
        free(urls[i]);
    free(urls);
    free(ports);
    return 0;
}

/* resolve_port: the tunnel's URL for container port @port; not_found (context
 * port) for a port the create did not open. */
static char *modal_resolve_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                                sbx_error **error)
{
    const char *op = "resolve_port";
    if (modal_check(sb, op, error) < 0 || modal_tunnels(sb, ctx, op, error) < 0)
        return NULL;
    char *out = NULL;
    int found = 0;
    pthread_mutex_lock(&sb->lock);
    for (size_t i = 0; i < sb->n_tunnels; i++) {
        if (sb->tunnel_ports[i] == port && sb->tunnel_urls[i]) {
            found = 1;
            out = cl_host_strdup(sb->tunnel_urls[i], op, error);
            break;
        }
    }
    pthread_mutex_unlock(&sb->lock);
    if (!found)
        cl_port_not_exposed(error, &sb->s, MODAL_BACKEND, op, port);
    return out;
}

static int modal_port_cmp(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

/* list_ports: the container ports of the tunnels, ascending. */
static char *modal_list_ports(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "list_ports";
    if (modal_check(sb, op, error) < 0 || modal_tunnels(sb, ctx, op, error) < 0)
        return NULL;
    pthread_mutex_lock(&sb->lock);
    size_t n = sb->n_tunnels;
    unsigned *ports = calloc(n + 1, sizeof(*ports));
    if (ports)
        memcpy(ports, sb->tunnel_ports, n * sizeof(*ports));
    pthread_mutex_unlock(&sb->lock);
    char *out = ports ? cl_host->alloc(n * 6 + 1) : NULL;
    if (!out) {
        free(ports);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    qsort(ports, n, sizeof(*ports), modal_port_cmp);
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(out + len, "%s%u", len ? " " : "", ports[i]);
    free(ports);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Files: an in-sandbox helper run through the exec RPCs                     */
/* ------------------------------------------------------------------------ */

#define MODAL_FILE_MISSING 2
#define MODAL_FILE_IS_DIR 3

/* The error of a file helper that exited @code (@err: its stderr). */
static int modal_file_fail(int code, const cl_buf *err, const char *path, const char *op,
                           const char *what, sbx_error **error)
{
    sbx_error *e;
    if (code == MODAL_FILE_MISSING)
        e = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "%s: no such file or directory in the "
                    "sandbox: %s", what, path);
    else if (code == MODAL_FILE_IS_DIR)
        e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s: %s is a directory", what, path);
    else
        e = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "%s: %s: %.300s (exit %d)", what,
                    path, err && err->data ? err->data : "", code);
    cl_context(e, "path", path);
    return -1;
}

static int modal_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                           int fd, sbx_error **error)
{
    const char *op = "read_file";
    if (modal_check(sb, op, error) < 0 || cl_text_check(NULL, path, MODAL_API, 0, op, error) < 0)
        return -1;
    char *q = cl_shell_quote_path(path);
    char *script = q ? cl_printf("p=%s; [ -d \"$p\" ] && exit %d; [ -e \"$p\" ] || exit %d; "
                                 "exec cat -- \"$p\"", q, MODAL_FILE_IS_DIR,
                                 MODAL_FILE_MISSING) : NULL;
    free(q);
    cl_buf err = { 0 };
    int code = 0, rc = -1;
    if (!script)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (modal_run_own(sb, ctx, script, -1, fd, NULL, 0, &err, &code, op, error) == 0)
        rc = code == 0 ? 0 : modal_file_fail(code, &err, path, op, "read the file", error);
    free(script);
    cl_buf_clear(&err);
    return rc;
}

static int modal_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                            int fd, uint32_t mode, sbx_error **error)
{
    const char *op = "write_file";
    if (modal_check(sb, op, error) < 0 || cl_text_check(NULL, path, MODAL_API, 0, op, error) < 0)
        return -1;
    char tag[17];
    cl_random_hex(tag, 8);
    char *q = cl_shell_quote_path(path);
    /* Into a temporary file beside it, then renamed: a cut upload never
     * leaves half a file under the name. */
    char *script = q ? cl_printf("p=%s; t=\"$p.sbx-%s\"; [ -d \"$p\" ] && exit %d; "
                                 "d=$(dirname -- \"$p\") && mkdir -p -- \"$d\" && "
                                 "cat > \"$t\" && chmod %o -- \"$t\" && mv -f -- \"$t\" "
                                 "\"$p\" || { rc=$?; rm -f -- \"$t\"; exit $rc; }", q, tag,
                                 MODAL_FILE_IS_DIR, mode & 07777) : NULL;
    free(q);
    cl_buf err = { 0 };
    int code = 0, rc = -1;
    if (!script)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (modal_run_own(sb, ctx, script, fd, -1, NULL, 0, &err, &code, op, error) == 0)
        rc = code == 0 ? 0 : modal_file_fail(code, &err, path, op, "write the file", error);
    free(script);
    cl_buf_clear(&err);
    return rc;
}

/* Parses "TYPE SIZE MODE NAME\0" records of find -printf '%y %s %m %P\0'
 * (or %f); calls @fn per record. */
static void modal_parse_entries(const cl_buf *b, sbx_plugin_file_fn fn, void *ud,
                                sbx_plugin_file_info *one)
{
    size_t i = 0;
    while (b->data && i < b->len) {
        const char *rec = b->data + i;
        size_t n = strnlen(rec, b->len - i);
        i += n + 1;
        char type = rec[0];
        char *end = NULL;
        long long size = strtoll(rec + 1, &end, 10);
        if (!end || *end != ' ')
            continue;
        unsigned long m = strtoul(end + 1, &end, 8);
        if (!end || *end != ' ')
            continue;
        const char *name = end + 1;
        sbx_plugin_file_info info = { sizeof(info), name, type == 'd', type == 'd' ? -1 : size,
                                      (uint32_t)(m & 07777) };
        if (one) {
            *one = info;
            return;
        }
        if (*name && fn(&info, ud) != 0)
            break;
    }
}

static int modal_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                            sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    if (modal_check(sb, op, error) < 0 || cl_text_check(NULL, path, MODAL_API, 0, op, error) < 0)
        return -1;
    char *q = cl_shell_quote_path(path);
    char *script = q ? cl_printf("p=%s; [ -e \"$p\" ] || exit %d; cd -- \"$p\" || exit 4; "
                                 "exec find . -mindepth 1 -maxdepth 1 -printf '%%y %%s %%m %%P\\0'",
                                 q, MODAL_FILE_MISSING) : NULL;
    free(q);
    cl_buf out = { 0 }, err = { 0 };
    int code = 0, rc = -1;
    if (!script)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (modal_run_own(sb, ctx, script, -1, -1, &out, (size_t)64 << 20, &err, &code, op,
                           error) == 0) {
        if (code == 0) {
            modal_parse_entries(&out, fn, ud, NULL);
            rc = 0;
        } else {
            rc = modal_file_fail(code, &err, path, op, "list the directory", error);
        }
    }
    free(script);
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    return rc;
}

static int modal_stat_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                           sbx_plugin_file_info *info, sbx_error **error)
{
    const char *op = "stat_file";
    if (modal_check(sb, op, error) < 0 || cl_text_check(NULL, path, MODAL_API, 0, op, error) < 0)
        return -1;
    char *q = cl_shell_quote_path(path);
    char *script = q ? cl_printf("p=%s; [ -e \"$p\" ] || [ -L \"$p\" ] || exit %d; "
                                 "exec find \"$p\" -maxdepth 0 -printf '%%y %%s %%m %%f\\0'", q,
                                 MODAL_FILE_MISSING) : NULL;
    free(q);
    cl_buf out = { 0 }, err = { 0 };
    int code = 0, rc = -1;
    if (!script)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (modal_run_own(sb, ctx, script, -1, -1, &out, 8192, &err, &code, op, error) == 0) {
        if (code == 0) {
            sbx_plugin_file_info one = { sizeof(one), NULL, 0, -1, 0 };
            modal_parse_entries(&out, NULL, NULL, &one);
            if (one.name) {
                one.name = cl_stat_name(one.name);
                *info = one;
                rc = 0;
            } else {
                cl_fail(error, SBX_ERROR_CONNECTION, op, "modal: no entry for %s came back",
                        path);
            }
        } else {
            rc = modal_file_fail(code, &err, path, op, "look up the file", error);
        }
    }
    free(script);
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin modal_plugin = {
    CL_PLUGIN_HEAD(MODAL_BACKEND),
    CL_PLUGIN_SLOTS(modal),
    .description = "Modal sandboxes over Modal's own gRPC API (HTTP/2 through libcurl, "
                   "messages with protobuf-c): commands through the task's command router, "
                   "their output streams read on from their offsets when the path cuts them; "
                   "files through an in-sandbox helper; snapshots as images",
    .caps = MODAL_CAPS,
    .sandbox_free = modal_sandbox_free,
    .snapshot = modal_snapshot,
    .exec_wait = modal_exec_wait,
    .exec_kill = modal_exec_kill,
    .exec_end_info = modal_exec_end_info,
    .exec_resize = modal_exec_resize,
    .exec_free = modal_exec_free,
    .stat_file = modal_stat_file,
    .resolve_port = modal_resolve_port,
    .list_ports = modal_list_ports,
};

CL_PLUGIN_EXPORT(&modal_plugin)
