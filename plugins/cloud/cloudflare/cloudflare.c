/*
 * cloudflare.c — libsbx-cloudflare.so, the `cloudflare` backend: Cloudflare
 * Sandboxes through the Sandbox Bridge worker (the Worker of
 * cloudflare/sandbox-sdk's bridge/worker, which the user deploys with
 * `wrangler deploy`), over the hosted-provider base
 * (plugins/cloud/base/cloud.h).
 *
 * Contract: the Cloudflare section of the provider contracts
 * (packages/sandbox/src/bridge/{routes,helpers,types}.ts).
 *
 *  - Where: the client config's "worker_url", else
 *    CLOUDFLARE_SANDBOX_WORKER_URL (no default: the bridge is the user's
 *    own Worker; a missing URL is a configuration error naming both).
 *    Credential: CLOUDFLARE_SANDBOX_API_KEY (the worker's SANDBOX_API_KEY
 *    secret) as "Authorization: Bearer ..."; none when unset.
 *  - create: POST /v1/sandbox mints an id (the container starts lazily);
 *    the plugin then runs one command to start it (and to make the
 *    workdir, and to install the create's environment file). cpu,
 *    memory_mb, disk_mb, gpu, image, template, app_name,
 *    allow_internet=0 and backend_options are configuration errors naming
 *    the option: the instance type, image and network are the worker's
 *    settings (wrangler.jsonc), not per sandbox. The bridge has no
 *    lifetime per sandbox: timeout_secs is kept by a keeper process the
 *    first command starts in the container (cf_keeper), which at the
 *    expiry (and CF_LIFETIME_GRACE_S) ends every command of the sandbox
 *    and its files; calls from the expiry on are not_found naming it, and
 *    a resume then deletes the sandbox (DELETE; sbx_gc() reaps an expired
 *    row through a resume). A container that sleeps first (the worker's
 *    sleepAfter of idleness) takes the keeper with it, and its files: the
 *    sandbox is gone then.
 *  - exec: POST /v1/sandbox/{id}/exec {"argv": ["bash", "-c", SCRIPT]}: SSE
 *    with "stdout"/"stderr" events whose data is base64 of the output as
 *    UTF-8 text (the bridge decodes it as text first: bytes that are not
 *    UTF-8 come back as U+FFFD), streamed as they come, then "exit"
 *    {"exit_code"} (-1 when the bridge saw no code); an "error" event
 *    is the command's error (exec_error: execution_failed;
 *    exec_transport_error: connection, outcome unknown), never an exit 0,
 *    and a stream without either is an error. The script enters the cwd
 *    itself (cl_shell_script, CASE-46), so no shell session is needed for
 *    a per-call cwd, and the bridge's cwd field (inside /workspace only)
 *    is not sent. The bridge takes no environment and no stdin: both go
 *    as files staged under /workspace (PUT), which the script sources or
 *    redirects and removes at once; environment values never go in a
 *    command line. Every process of the command carries CL_EXEC_MARK, so
 *    exec_kill signals all of them (provider.h). The command runs under
 *    CL_OUTPUT_ENCODER (perl), which sends each output byte 0x80-0xFF as the UTF-8
 *    of U+0080-U+00FF, so any bytes come through the text-only bridge as
 *    they were and still live; the create checks the image has perl.
 *    The script is a JSON string: an argument, shell command or cwd that
 *    is not UTF-8 is invalid_argument naming it, before anything is sent
 *    (issue 16); env values go in the staged file, any byte kept.
 *  - terminal (tty_rows/tty_cols): the bridge's terminal WebSocket, GET
 *    /v1/sandbox/{id}/pty?cols=&rows=&shell=&session= (the SDK's
 *    terminal(), through the base's libwebsockets client, ws.h). Its
 *    program is `shell` (a path, run with no argument), in the session's
 *    terminal: so the command is staged as an executable script under
 *    /workspace (PUT, then chmod 700 by a command; the script removes
 *    itself at once, exports the mark and the per-call env, and execs
 *    /bin/sh -c with the create's env sourced and the command's script),
 *    and runs in a session of its own (POST .../session, deleted at the
 *    end), whose terminal is new. Server frames: binary output (to
 *    stdout), text {"type":"ready"|"exit"|"error"} (the exit's code, or
 *    128+N for its signal N, is the command's); client frames: binary
 *    typed bytes, text {"type":"resize","cols","rows"}. The end of the
 *    host's stdin hangs the terminal up (SIGHUP to the command's
 *    processes, by the mark).
 *  - exposed ports: a tunnel per port, POST /v1/sandbox/{id}/tunnel/{port}
 *    ({id, port, url, hostname, name, createdAt}; create's ports are
 *    opened after the first command), closed by DELETE on unexpose; the
 *    port resolves to the tunnel's url, kept in the session state
 *    ("tunnels": [{port, url}]: a public URL, no secret).
 *  - files: GET|PUT /v1/sandbox/{id}/file/<path> for paths under
 *    /workspace (raw bytes both ways); the bridge answers 403 outside it,
 *    so other paths are staged: a write is PUT under /workspace and moved
 *    into place by a command, a read is "base64" over the exec stream,
 *    decoded here (the bridge carries output as text, so bytes that are
 *    not UTF-8 do not come through "cat" as they are). A 403 that still comes is a configuration error naming
 *    the path. list_files is "find" over the exec stream. PUT bodies are
 *    limited to 32 MiB by the bridge (413: invalid_argument naming the
 *    path). A path that is not UTF-8 is invalid_argument, before anything
 *    is sent, where a command (a JSON string) names it: write_file (its
 *    chmod or move), list_files, and read_file outside /workspace; a read
 *    under /workspace (the URL carries any byte) is sent.
 *  - snapshot: POST …/persist gives a tar of /workspace (the bridge's
 *    snapshot mechanism); what changed elsewhere since the create (every
 *    file, link and directory whose inode changed, other mounts left out)
 *    is first archived into /workspace/.sbx-root.tar so persist carries
 *    it, and a restore puts it back in place (files deleted outside
 *    /workspace are not deleted in the copy). The bridge hands the archive
 *    to its client and does not keep it (a container's disk goes when it
 *    sleeps); it is kept as cfsnap-<32 hex>.tar (mode 0600) in the client's snapshot directory
 *    (client option "snapshot_dir", else SBX_CLOUDFLARE_SNAPSHOT_DIR, else
 *    $XDG_STATE_HOME/sbx/cloudflare-snapshots, else
 *    ~/.local/state/sbx/cloudflare-snapshots), and a create with that
 *    snapshot_id POSTs it to …/hydrate. So a snapshot is usable where its
 *    directory is; removing it is removing the file.
 *  - session_state: {"version":1,"sandbox_id","workdir"?,"tunnels"?,
 *    "lifetime"?,"expires_at"?}; resume refuses an expired sandbox (naming
 *    the expiry) and deletes it, else checks GET …/running.
 *  - A create whose answer is lost leaves nothing running (CASE-20): the
 *    bridge's create only mints an id, and the container starts with the
 *    plugin's first command, which a lost create never sends.
 *  - destroy: DELETE /v1/sandbox/{id} (204, also when never started).
 *    destroy_by_id is the same DELETE. The bridge has no list call, so
 *    list_owned is feature_not_supported (no SBX_CAP_LIST_OWNED): `sbx gc`
 *    cannot find a sandbox whose create answer was lost.
 *
 * Threading: slots may run at once on different sandboxes and on one; a
 * sandbox's mutable state (the gone flag, a cl_gone) has its own lock.
 */
#include "cloud.h"
#include "provider.h"
#ifdef SBX_HAVE_CLOUD_WS
#include "ws.h"     /* terminals: the base's WebSocket client */
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#define CF_BACKEND "cloudflare"
#define CF_STATE_VERSION 1
#define CF_SNAP_PREFIX "cfsnap-"
#define CF_WORKSPACE "/workspace"
/* The create's environment, sourced by every command (provider.h). */
#define CF_ENV_FILE "/var/lib/sbx/create.env"
/* Exit codes of the plugin's own file scripts. */
#define CF_EXIT_MISSING 2
#define CF_EXIT_ISDIR 3
#define CF_EXIT_NOTDIR 4
/* The file every command of a live sandbox finds: made by the create's
 * first command. The bridge starts a fresh container for any id it is
 * asked about, a deleted one too; such a container lacks it. */
#define CF_LIVE_FILE "/var/lib/sbx/live"
/* A command's exit status when CF_LIVE_FILE is missing (checked again
 * before it is taken for the sandbox's loss: the command may exit so). */
#define CF_GONE_EXIT 212
/* Where a snapshot keeps what changed outside /workspace, inside the
 * workspace persist archives (cf_snapshot). */
#define CF_ROOT_TAR CF_WORKSPACE "/.sbx-root.tar"
/* The create's first command's exit status when the image has no perl. */
#define CF_NO_PERL_EXIT 3


/* Terminals need the base's WebSocket client (libwebsockets). */
#ifdef SBX_HAVE_CLOUD_WS
#define CF_CAP_PTY SBX_CAP_PTY
#else
#define CF_CAP_PTY 0
#endif

#define CF_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_SNAPSHOT      \
                 | SBX_CAP_RESUME | SBX_CAP_ISOLATION | SBX_CAP_BACKGROUND | CF_CAP_PTY   \
                 | SBX_CAP_EXPOSED_PORTS | SBX_CAP_LIFETIME)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, the worker's URL (provider.h) */
    char *snap_dir;     /* where snapshots are kept (absolute) */
};

/* One tunnel the bridge opened to a port of the sandbox. */
typedef struct cf_tunnel {
    unsigned port;
    char *url;          /* the tunnel's public URL (no secret in it) */
} cf_tunnel;

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id and the gone flag (provider.h) */
    pthread_mutex_t tlock;      /* guards the tunnels */
    cf_tunnel *tunnels; /* the exposed ports, ascending */
    size_t n_tunnels;
    double lifetime;    /* timeout_secs, from the first command (0: none) */
    double expires_at;  /* UNIX seconds the lifetime ends (0: none) */
};

typedef struct cf_proc {
    cl_script_proc sp;  /* first member: script, env, stdin, tag (provider.h) */
    /* A command on a terminal (cf_pty_run); tty_rows 0 for none. */
    unsigned tty_rows, tty_cols;
    pthread_mutex_t tlock;      /* guards what follows */
    pthread_cond_t tcond;
    int tty_over;               /* its worker is done with the terminal */
    cl_ws *ws;                  /* the terminal's connection while connected */
    int tty_exit;               /* the "exit" control's code, or -1 */
    char tty_error[512];        /* an "error" control's message, or "" */
} cf_proc;

#define cf_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define cf_check(sb, op, error) cf_check_live((sb), (op), (error))
static int cf_check_live(struct sbx_plugin_sandbox *sb, const char *op, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

/* "{api}/v1/sandbox/{id}{suffix}". */
static char *cf_url(struct sbx_plugin_client *c, const char *id, const char *suffix)
{
    return cl_item_url(c->cl.api, "v1/sandbox", id, suffix);
}

/* The bridge's file route for the absolute @path (each segment escaped). */
static char *cf_file_suffix(const char *path)
{
    cl_buf b = { 0 };
    cl_buf_append(&b, "/file", 5);
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *seg = strndup(p, n);
        char *q = seg ? cl_url_escape(seg) : NULL;
        if (!q || cl_buf_append(&b, "/", 1) < 0 || cl_buf_append(&b, q, strlen(q)) < 0) {
            free(seg);
            free(q);
            cl_buf_clear(&b);
            return NULL;
        }
        free(seg);
        free(q);
        p += n;
    }
    return b.data;
}

/* 1 when the absolute @path is /workspace or under it (no "..", no "."). */
static int cf_in_workspace(const char *path)
{
    size_t n = strlen(CF_WORKSPACE);
    if (strncmp(path, CF_WORKSPACE, n) != 0 || (path[n] != '/' && path[n] != '\0'))
        return 0;
    return strstr(path, "/../") == NULL && strstr(path, "/./") == NULL
           && !(strlen(path) >= 3 && strcmp(path + strlen(path) - 3, "/..") == 0);
}

static int cf_delete(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                     const char *op, sbx_error **error)
{
    char *url = cf_url(c, id, "");
    int rc = cl_delete_url(c->cl.http, ctx, url, op, "delete the sandbox", error);
    free(url);
    return rc;
}

/* A call on sandbox @id's route @suffix: 0 with the answer in @r (any
 * status), -1 when none came. */
static int cf_call(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                   const char *suffix, cl_req *rq, cl_resp *r, const char *op, sbx_error **error)
{
    return cl_request_at(c->cl.http, ctx, rq, cf_url(c, id, suffix), r, op, error);
}

/* The error of a file route's answer @r for @path. */
static sbx_error *cf_file_fail(struct sbx_plugin_client *c, const cl_resp *r, const char *op,
                               const char *path, const char *what, sbx_error **error)
{
    sbx_error *err;
    if (r->status == 404)
        err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such file in the sandbox: %s", path);
    else if (r->status == 403)
        err = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                      "cloudflare bridge refused %s: the Sandbox Bridge serves files under "
                      CF_WORKSPACE " only", path);
    else if (r->status == 413)
        err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "%s is larger than the Sandbox Bridge's 32 MiB body limit", path);
    else
        err = cl_fail_status(c->cl.http, error, CL_CODE_BY_STATUS, r, op, what);
    cl_context(err, "path", path);
    return err;
}

/* PUT @rq (its body or source) to @path under /workspace: 0, or -1 with
 * the call's error or the file error of its answer (@shown names the file,
 * @rq->what the call). */
static int cf_put_req(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                      cl_req *rq, const char *shown, const char *op, sbx_error **error)
{
    char *sfx = cf_file_suffix(path);
    cl_resp r = { 0 };
    int rc = -1;
    if (!sfx)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cf_call(sb->s.c, ctx, sb->s.id, sfx, rq, &r, op, error) == 0) {
        if (r.status / 100 == 2)
            rc = 0;
        else
            cf_file_fail(sb->s.c, &r, op, shown, rq->what, error);
    }
    free(sfx);
    cl_resp_clear(&r);
    return rc;
}

/* PUT the bytes of @fd to the absolute @path under /workspace. */
static int cf_put(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                  int fd, const char *shown, const char *op, sbx_error **error)
{
    cl_req rq = { .method = "PUT", .content_type = "application/octet-stream",
                  .source = cl_fd_source, .source_ud = &fd, .source_len = -1,
                  .idempotent = CL_SAFE, .what = "write the file" };
    return cf_put_req(sb, ctx, path, &rq, shown, op, error);
}

/* PUT the string @text to @path under /workspace. */
static int cf_put_text(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                       const char *text, const char *op, sbx_error **error)
{
    cl_req rq = { .method = "PUT", .content_type = "application/octet-stream", .body = text,
                  .body_len = strlen(text), .idempotent = CL_SAFE, .what = "write a file" };
    return cf_put_req(sb, ctx, path, &rq, path, op, error);
}

/* ------------------------------------------------------------------------ */
/* The exec stream                                                           */
/* ------------------------------------------------------------------------ */

/* Where a stream's bytes go: a cl_proc, or a descriptor / buffer. */
typedef struct cf_stream {
    cl_proc *proc;      /* the command's, or NULL */
    int out_fd;         /* without a proc: stdout goes here (-1: dropped) */
    cl_buf *out_buf;    /* or here */
    cl_buf err_buf;     /* without a proc: stderr, kept for messages */
    cl_sse sse;
    cl_buf dec;
    int have_exit;
    int exit_code;
    int failed;         /* an error event came */
    int encoded;        /* the output is CL_OUTPUT_ENCODER's */
    cl_unencoder unenc[3];  /* per fd (1, 2) */
    char err_code[64];
    char err_msg[512];
} cf_stream;

static int cf_on_event(void *ud, const char *event, const char *data, size_t n, const char *id)
{
    cf_stream *s = ud;
    (void)id;
    if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
        int fd = event[3] == 'o' ? 1 : 2;
        s->dec.len = 0;
        if (cl_base64_decode(data, n, &s->dec) < 0) {
            cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "cloudflare: a %s event that is not "
                    "base64: %.80s", event, data);
            return -1;
        }
        const char *p = s->dec.data ? s->dec.data : "";
        if (s->encoded && cl_unencode(&s->unenc[fd], fd, &s->dec) < 0)
            return -1;
        if (s->proc)
            return cl_proc_output(s->proc, fd, p, s->dec.len);
        if (fd == 2)
            return s->err_buf.len < 4096 ? cl_buf_append(&s->err_buf, p, s->dec.len) : 0;
        if (s->out_buf)
            return cl_buf_append(s->out_buf, p, s->dec.len);
        return s->out_fd >= 0 ? cl_fd_sink(&s->out_fd, p, s->dec.len) : 0;
    }
    if (strcmp(event, "exit") == 0) {
        json_object *j = json_tokener_parse(data);
        int64_t x;
        if (!j || cl_json_int(j, "exit_code", &x) != 1) {
            json_object_put(j);
            cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "cloudflare: an exit event without "
                    "exit_code: %.80s", data);
            return -1;
        }
        json_object_put(j);
        s->have_exit = 1;
        s->exit_code = (int)(x & 0xff);
        return 1;
    }
    if (strcmp(event, "error") == 0) {
        json_object *j = json_tokener_parse(data);
        const char *m = j ? cl_json_str(j, "error") : NULL;
        const char *c = j ? cl_json_str(j, "code") : NULL;
        snprintf(s->err_msg, sizeof s->err_msg, "%s", m ? m : data);
        snprintf(s->err_code, sizeof s->err_code, "%s", c ? c : "exec_error");
        json_object_put(j);
        s->failed = 1;
        return 1;
    }
    return 0;   /* an event the contract does not name */
}

/* The error of an "error" event. */
static sbx_error *cf_event_error(cf_stream *s, const char *op, sbx_error **error)
{
    int transport = strcmp(s->err_code, "exec_transport_error") == 0;
    sbx_error *err = cl_fail(error, transport ? SBX_ERROR_CONNECTION
                                              : SBX_ERROR_EXECUTION_FAILED, op,
                             "cloudflare exec failed: %s (%s)", s->err_msg, s->err_code);
    cl_context(err, "code", s->err_code);
    if (transport)
        cl_outcome_unknown(err);
    return err;
}

/*
 * POST …/exec with "bash -c @script" and reads its stream into @s: 0 with
 * s->exit_code, or -1 with the error (an "error" event, a failed answer, a
 * cut stream). @mark: CL_EXEC_MARK's value for every process, or NULL.
 */
static int cf_exec_call(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                        const char *script, const char *mark, cf_stream *s, const char *op,
                        sbx_error **error)
{
    if (cl_gone_check(&sb->s.gone, op, CF_BACKEND, sb->s.id, error) < 0)
        return -1;
    char *full = mark ? cl_printf("export " CL_EXEC_MARK "=%s\n%s", mark, script)
                      : strdup(script);
    if (!full) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    json_object *b = json_object_new_object(), *argv = json_object_new_array();
    s->encoded = mark != NULL;
    if (s->encoded) {
        json_object_array_add(argv, json_object_new_string("perl"));
        json_object_array_add(argv, json_object_new_string("-e"));
        json_object_array_add(argv, json_object_new_string(CL_OUTPUT_ENCODER));
    }
    json_object_array_add(argv, json_object_new_string("bash"));
    json_object_array_add(argv, json_object_new_string("-c"));
    json_object_array_add(argv, json_object_new_string(full));
    json_object_object_add(b, "argv", argv);
    free(full);
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    static const char *const h[] = { "Accept: text/event-stream", NULL };
    cl_sse_init(&s->sse, cf_on_event, s);
    cl_req rq = { .method = "POST", .headers = h, .body = bs, .body_len = strlen(bs),
                  .sink = cl_sse_sink, .sink_ud = &s->sse, .idempotent = CL_UNSAFE,
                  .what = "run a command" };
    cl_resp r = { 0 };
    int rc = cf_call(sb->s.c, ctx, sb->s.id, "/exec", &rq, &r, op, error);
    if (rc == 0 && r.status / 100 != 2) {
        sbx_error *err = cl_fail_status(sb->s.c->cl.http, error,
                                        r.status == 403 || r.status == 400
                                        ? SBX_ERROR_CONFIGURATION : CL_CODE_BY_STATUS,
                                        &r, op, "run a command");
        cl_context(err, "sandbox_id", sb->s.id);
        rc = -1;
    }
    if (rc == 0 && cl_sse_end(&s->sse, op, error) < 0)
        rc = -1;
    if (rc == 0 && s->failed) {
        cf_event_error(s, op, error);
        rc = -1;
    }
    if (rc == 0 && (cl_unencode_end(&s->unenc[1], 1, op, error) < 0
                    || cl_unencode_end(&s->unenc[2], 2, op, error) < 0))
        rc = -1;
    cl_sse_clear(&s->sse);
    cl_buf_clear(&s->dec);
    json_object_put(b);
    cl_resp_clear(&r);
    return rc;
}

/* Runs the plugin's own @script: 0 with its exit status in *@code (stdout
 * to @out_fd or @out_buf, -1/NULL: dropped; stderr in @errmsg, up to 4 KiB,
 * when not NULL: a new string), or -1 with *@error set. */
static int cf_run(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                  int out_fd, cl_buf *out_buf, char **errmsg, int *code, const char *op,
                  sbx_error **error)
{
    cf_stream s = { 0 };
    s.out_fd = out_fd;
    s.out_buf = out_buf;
    int rc = cf_exec_call(sb, ctx, script, NULL, &s, op, error);
    if (rc == 0)
        *code = s.exit_code;
    if (errmsg)
        *errmsg = strdup(s.err_buf.data ? s.err_buf.data : "");
    cl_buf_clear(&s.err_buf);
    return rc;
}

static int cf_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    return cf_run(sb, ctx, cmd, -1, NULL, NULL, code, op, error);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

CL_SETUP(cf_setup, CF_BACKEND)

static void cf_client_clear(sbx_plugin_client *c)
{
    free(c->snap_dir);
}

static const char *const cf_key_envs[] = { "CLOUDFLARE_SANDBOX_API_KEY", NULL };

static const cl_client_spec cf_client_spec = {
    .provider = CF_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .url_key = "worker_url", .url_env = "CLOUDFLARE_SANDBOX_WORKER_URL",
    .url_missing = "cloudflare backend: no Sandbox Bridge worker URL (set "
                   "CLOUDFLARE_SANDBOX_WORKER_URL or the client option worker_url to the "
                   "deployed bridge, e.g. https://sandbox-bridge.NAME.workers.dev)",
    .key_envs = cf_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .clear = cf_client_clear,
};

static int cf_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&cf_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    /* The snapshot directory: the option, else $SBX_CLOUDFLARE_SNAPSHOT_DIR,
     * else $XDG_STATE_HOME/sbx/cloudflare-snapshots, else
     * $HOME/.local/state/sbx/cloudflare-snapshots. */
    const char *sd = cl_setting(cfg, "snapshot_dir", "SBX_CLOUDFLARE_SNAPSHOT_DIR", NULL);
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    if (sd)
        c->snap_dir = strdup(sd);
    else if (xdg && *xdg == '/')
        c->snap_dir = cl_printf("%s/sbx/cloudflare-snapshots", xdg);
    else
        c->snap_dir = cl_printf("%s/.local/state/sbx/cloudflare-snapshots",
                                home && *home ? home : "/tmp");
    if (!c->snap_dir) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    if (c->snap_dir[0] != '/') {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "cloudflare backend: "
                           "snapshot_dir %s is not an absolute path", c->snap_dir),
                   "option", "snapshot_dir");
        goto fail;
    }
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(cf_probe, CF_CAPS)

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

static struct sbx_plugin_sandbox *cf_sandbox_new(struct sbx_plugin_client *c, const char *id,
                                                 const char *workdir)
{
    struct sbx_plugin_sandbox *sb = cl_sandbox_new(sizeof(*sb), c, id, workdir);
    if (!sb)
        return NULL;
    pthread_mutex_init(&sb->tlock, NULL);
    return sb;
}

static void cf_sandbox_free(sbx_plugin_sandbox *sb)
{
    if (!sb)
        return;
    for (size_t i = 0; i < sb->n_tunnels; i++)
        free(sb->tunnels[i].url);
    free(sb->tunnels);
    pthread_mutex_destroy(&sb->tlock);
    cl_sandbox_free(sb);
}

/* ---- exposed ports: the bridge's tunnels (POST/DELETE …/tunnel/{port},
 * answering {id, port, url, hostname, name, createdAt}) ---- */

/** Records @url for @port (replacing one there): 0, or -1 on no memory. */
static int cf_tunnel_put(struct sbx_plugin_sandbox *sb, unsigned port, const char *url)
{
    char *u = strdup(url);
    if (!u)
        return -1;
    pthread_mutex_lock(&sb->tlock);
    size_t i = 0;
    while (i < sb->n_tunnels && sb->tunnels[i].port < port)
        i++;
    int rc = 0;
    if (i < sb->n_tunnels && sb->tunnels[i].port == port) {
        free(sb->tunnels[i].url);
        sb->tunnels[i].url = u;
    } else {
        cf_tunnel *t = realloc(sb->tunnels, (sb->n_tunnels + 1) * sizeof(*t));
        if (t) {
            memmove(t + i + 1, t + i, (sb->n_tunnels - i) * sizeof(*t));
            t[i].port = port;
            t[i].url = u;
            sb->tunnels = t;
            sb->n_tunnels++;
        } else {
            free(u);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&sb->tlock);
    return rc;
}

/** POST …/tunnel/@port: the tunnel's URL recorded. 0 or -1. */
static int cf_tunnel_open(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                          const char *op, sbx_error **error)
{
    char sfx[32];
    snprintf(sfx, sizeof(sfx), "/tunnel/%u", port);
    /* Opening a tunnel to a port twice gives the one tunnel: safe to repeat. */
    cl_req rq = { .method = "POST", .idempotent = CL_SAFE, .what = "open a tunnel" };
    cl_resp r = { 0 };
    int rc = -1;
    if (cf_call(sb->s.c, ctx, sb->s.id, sfx, &rq, &r, op, error) < 0)
        return -1;
    if (r.status / 100 != 2) {
        sbx_error *err = cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r, op,
                                        "open a tunnel to the port");
        snprintf(sfx, sizeof(sfx), "%u", port);
        cl_context(err, "port", sfx);
    } else {
        json_object *j = cl_resp_json(&r, op, "open a tunnel to the port", error);
        const char *url = j ? cl_json_str(j, "url") : NULL;
        if (j && (!url || strncmp(url, "https://", 8) != 0))
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                    "cloudflare: the tunnel to port %u came without an https url", port);
        else if (url && cf_tunnel_put(sb, port, url) < 0)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        else if (url)
            rc = 0;
        json_object_put(j);
    }
    cl_resp_clear(&r);
    return rc;
}

/* 1 when @port has a tunnel, else 0. */
static int cf_tunnel_has(struct sbx_plugin_sandbox *sb, unsigned port)
{
    pthread_mutex_lock(&sb->tlock);
    int have = 0;
    for (size_t i = 0; i < sb->n_tunnels; i++)
        have |= sb->tunnels[i].port == port;
    pthread_mutex_unlock(&sb->tlock);
    return have;
}

static int cf_expose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                          sbx_error **error)
{
    const char *op = "expose_port";
    if (cf_check(sb, op, error) < 0)
        return -1;
    return cf_tunnel_has(sb, port) ? 0 : cf_tunnel_open(sb, ctx, port, op, error);
}

static int cf_unexpose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                            sbx_error **error)
{
    const char *op = "unexpose_port";
    if (cf_check(sb, op, error) < 0)
        return -1;
    if (!cf_tunnel_has(sb, port))
        return 0;
    char sfx[32];
    snprintf(sfx, sizeof(sfx), "/tunnel/%u", port);
    cl_req rq = { .method = "DELETE", .idempotent = CL_SAFE, .what = "close the tunnel" };
    cl_resp r = { 0 };
    if (cf_call(sb->s.c, ctx, sb->s.id, sfx, &rq, &r, op, error) < 0)
        return -1;
    int rc = 0;
    if (r.status / 100 != 2 && r.status != 404) {
        cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r, op, "close the tunnel");
        rc = -1;
    }
    cl_resp_clear(&r);
    if (rc == 0) {
        pthread_mutex_lock(&sb->tlock);
        for (size_t i = 0; i < sb->n_tunnels; i++)
            if (sb->tunnels[i].port == port) {
                free(sb->tunnels[i].url);
                memmove(sb->tunnels + i, sb->tunnels + i + 1,
                        (sb->n_tunnels - i - 1) * sizeof(*sb->tunnels));
                sb->n_tunnels--;
                break;
            }
        pthread_mutex_unlock(&sb->tlock);
    }
    return rc;
}

static char *cf_resolve_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                             sbx_error **error)
{
    const char *op = "resolve_port";
    (void)ctx;
    if (cf_check(sb, op, error) < 0)
        return NULL;
    char *out = NULL;
    int have = 0;
    pthread_mutex_lock(&sb->tlock);
    for (size_t i = 0; i < sb->n_tunnels && !have; i++)
        if (sb->tunnels[i].port == port) {
            have = 1;
            out = cl_host_strdup(sb->tunnels[i].url, op, error);
        }
    pthread_mutex_unlock(&sb->tlock);
    if (!have)
        cl_port_not_exposed(error, &sb->s, CF_BACKEND, op, port);
    return out;
}

static char *cf_list_ports(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    if (cf_check(sb, "list_ports", error) < 0)
        return NULL;
    pthread_mutex_lock(&sb->tlock);
    char *out = cl_host->alloc(sb->n_tunnels * 6 + 1);
    if (out) {
        size_t len = 0;
        out[0] = '\0';
        for (size_t i = 0; i < sb->n_tunnels; i++)
            len += (size_t)sprintf(out + len, i ? " %u" : "%u", sb->tunnels[i].port);
    }
    pthread_mutex_unlock(&sb->tlock);
    if (!out)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "list_ports", "out of memory");
    return out;
}

#define cf_refuse(error, option, value, why) \
    cl_refuse((error), CF_BACKEND, (option), (value), (why))

/* The options the bridge cannot honour per sandbox. */
static int cf_check_options(const sbx_plugin_create_request *rq, sbx_error **error)
{
    static const cl_unsupported unsupported[] = {
        { "app_name", "the Sandbox Bridge has no apps" },
        { "cpu", "the container's instance type is the worker's setting "
                 "(wrangler.jsonc containers.instance_type), not per sandbox" },
        { "memory_mb", "the container's instance type is the worker's "
                       "setting (wrangler.jsonc containers.instance_type), not per sandbox" },
        { "disk_mb", "the disk comes with the worker's instance type" },
        { "gpu", "Cloudflare containers have no GPUs" },
        { "image", "the image is the worker's setting (wrangler.jsonc containers.image)" },
        { "template", "the Sandbox Bridge has no templates" },
        { "allow_internet", "the Sandbox Bridge has no per-sandbox network policy" },
        { NULL, NULL },
    };
    if (cl_workdir_check(CF_BACKEND, rq->workdir, error) < 0
        || cl_refuse_options(rq, CF_BACKEND, unsupported, error) < 0
        || cl_no_backend_options(rq, CF_BACKEND, error) < 0)
        return -1;
    return 0;
}

/* Stages @text at a new file under /workspace: its path (a new string),
 * or NULL with *@error set. */
static char *cf_stage_text(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           const char *text, const char *suffix, const char *op,
                           sbx_error **error)
{
    char tag[25];
    cl_random_hex(tag, 12);
    char *path = cl_printf(CF_WORKSPACE "/.sbx-%s.%s", tag, suffix);
    if (!path) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    if (cf_put_text(sb, ctx, path, text, op, error) < 0) {
        free(path);
        return NULL;
    }
    return path;
}

/* 1 when @id has the shape of this backend's snapshot ids. */
static int cf_snapshot_id_ok(const char *id)
{
    size_t n = strlen(CF_SNAP_PREFIX);
    return strncmp(id, CF_SNAP_PREFIX, n) == 0 && strlen(id) == n + 32
           && strspn(id + n, "0123456789abcdef") == 32;
}

/* Restores the snapshot @snap (a tar of /workspace in the client's
 * snapshot directory) into @sb's /workspace with POST …/hydrate. */
static int cf_hydrate(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *snap,
                      const char *op, sbx_error **error)
{
    char *path = cf_snapshot_id_ok(snap) ? cl_printf("%s/%s.tar", sb->s.c->snap_dir, snap) : NULL;
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) {
        sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                 "cloudflare snapshot %s is not in %s", snap, sb->s.c->snap_dir);
        cl_context(err, "snapshot_id", snap);
        cl_context(err, "path", sb->s.c->snap_dir);
        free(path);
        return -1;
    }
    free(path);
    int rc = -1;
    cl_req hq = { .method = "POST", .content_type = "application/x-tar", .source = cl_fd_source,
                  .source_ud = &fd, .source_len = -1, .idempotent = CL_SAFE,
                  .what = "hydrate the workspace" };
    cl_resp r = { 0 };
    if (cf_call(sb->s.c, ctx, sb->s.id, "/hydrate", &hq, &r, op, error) == 0) {
        if (r.status / 100 == 2)
            rc = 0;
        else
            cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r, op,
                           "hydrate the workspace");
    }
    cl_resp_clear(&r);
    close(fd);
    /* What the snapshot kept from outside /workspace goes back in place. */
    int code = -1;
    char *msg = NULL;
    if (rc == 0 && cf_run(sb, ctx, "[ -e " CF_ROOT_TAR " ] || exit 0\n"
                          "tar -xpf " CF_ROOT_TAR " -C /; rc=$?; rm -f " CF_ROOT_TAR
                          "; exit $rc\n", -1, NULL, &msg, &code, op, error) < 0)
        rc = -1;
    else if (rc == 0 && code != 0) {
        cl_context(cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "cloudflare: restoring "
                           "snapshot %s outside " CF_WORKSPACE " failed (exit %d): %s", snap,
                           code, msg ? msg : ""), "snapshot_id", snap);
        rc = -1;
    }
    free(msg);
    return rc;
}

/*
 * The lifetime's keeper (timeout_secs, from the first command): the bridge
 * has no lifetime per sandbox, so a process of the container's own, started
 * by the create's first command in the background (its output to
 * /dev/null, without the command mark, so no exec_kill ends it), sleeps
 * the lifetime and CF_LIFETIME_GRACE_S and then ends the sandbox as far as
 * a process inside it can: removes CF_LIVE_FILE (from then on every
 * command finds the sandbox gone) and the create's environment, kills
 * every process that carries the command mark (every command of the
 * sandbox; not the container's own control plane) and empties
 * /workspace. The container itself sleeps after the worker's sleepAfter,
 * or is deleted by destroy, or by a resume after the expiry (sbx_gc()).
 */
#define CF_LIFETIME_GRACE_S 1.0

static void cf_keeper(cl_buf *b, double lifetime)
{
    cl_buf k = { 0 };
    cl_buf_printf(&k, "sleep %.3f || exit 0\n"
                  "rm -f " CF_LIVE_FILE " " CF_ENV_FILE "\n"
                  "for d in /proc/[0-9]*; do [ \"${d#/proc/}\" = $$ ] && continue; "
                  "tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -q '^" CL_EXEC_MARK "=' "
                  "&& kill -9 ${d#/proc/} 2>/dev/null; done\n"
                  "find " CF_WORKSPACE " -mindepth 1 -delete 2>/dev/null\nexit 0\n",
                  lifetime + CF_LIFETIME_GRACE_S);
    char *q = k.data ? cl_shell_quote(k.data) : NULL;
    cl_buf_printf(b, "(env -u " CL_EXEC_MARK " nohup sh -c %s >/dev/null 2>&1 </dev/null &)\n",
                  q ? q : "'exit 0'");
    free(q);
    cl_buf_clear(&k);
}

/* The create's first command: starts the container, installs the
 * create's environment file (staged at @env_path), starts the lifetime's
 * keeper (@lifetime > 0) and makes the workdir. */
static int cf_first_command(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                            const char *env_path, double lifetime, const char *op,
                            sbx_error **error)
{
    cl_buf b = { 0 };
    cl_buf_printf(&b, "mkdir -p " CF_WORKSPACE " /var/lib/sbx && : >" CF_LIVE_FILE
                  " || exit 1\n");
    cl_buf_printf(&b, "command -v perl >/dev/null || exit %d\n", CF_NO_PERL_EXIT);
    if (env_path) {
        char *q = cl_shell_quote(env_path);
        cl_buf_printf(&b, "mkdir -p /var/lib/sbx && mv -f -- %s " CF_ENV_FILE
                      " && chmod 600 " CF_ENV_FILE " || exit 2\n", q ? q : "''");
        free(q);
    }
    if (lifetime > 0) {
        cf_keeper(&b, lifetime);
        /* Counted from here: the keeper sleeps from its start, a moment
         * later, so the expiry told to callers is never later. */
        sb->lifetime = lifetime;
        sb->expires_at = cl_wallclock() + lifetime;
    }
    int code = -1;
    char *msg = NULL;
    int rc = b.data ? cf_run(sb, ctx, b.data, -1, NULL, &msg, &code, op, error) : -1;
    if (!b.data)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    if (rc == 0 && code == CF_NO_PERL_EXIT) {
        cl_fail(error, SBX_ERROR_CONFIGURATION, op, "cloudflare: the sandbox's image has no "
                "perl, which carries commands' output through the bridge byte for byte "
                "(the bridge's default image has it)");
        rc = -1;
    } else if (rc == 0 && code != 0) {
        cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "cloudflare: the sandbox's setup command "
                "exited %d: %s", code, msg ? msg : "");
        rc = -1;
    }
    free(msg);
    cl_buf_clear(&b);
    if (rc == 0 && sb->s.workdir)
        rc = cl_make_workdir(sb, cf_run_short, ctx, CF_BACKEND, sb->s.workdir, op, error);
    return rc;
}

/* The create's ports: a tunnel each. */
static int cf_open_request_ports(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                                 const sbx_plugin_create_request *rq, const char *op,
                                 sbx_error **error)
{
    const uint16_t *ports;
    size_t n = cl_request_ports(rq, &ports);
    for (size_t i = 0; i < n; i++)
        if (cf_tunnel_open(sb, ctx, ports[i], op, error) < 0)
            return -1;
    return 0;
}

static int cf_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    if (cf_check_options(rq, error) < 0)
        return -1;
    char *envtext = NULL;
    if (rq->env && rq->env[0] && !(envtext = cl_env_file(rq->env))) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "cloudflare: an environment key is not "
                "a shell name");
        return -1;
    }
    char *url = cl_printf("%s/v1/sandbox", c->cl.api), *env_path = NULL;
    cl_resp r = { 0 };
    json_object *j = NULL;
    struct sbx_plugin_sandbox *sb = NULL;
    int rc = -1;
    if (!url || cl_request_json(c->cl.http, ctx, "POST", url, NULL, CL_UNSAFE, &r, op,
                                "create the sandbox", error) < 0)
        goto out;
    if (r.status / 100 != 2) {
        cl_fail_status(c->cl.http, error, CL_CODE_BY_STATUS, &r, op, "create the sandbox");
        goto out;
    }
    j = cl_resp_json(&r, op, "create the sandbox", error);
    const char *id = j ? cl_json_str(j, "id") : NULL;
    if (!id) {
        if (j)
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "cloudflare create answered without "
                    "an id");
        goto out;
    }
    sb = cf_sandbox_new(c, id, rq->workdir && *rq->workdir ? rq->workdir : NULL);
    if (!sb || (envtext && !(env_path = cf_stage_text(sb, ctx, envtext, "env", op, error)))
        || cf_first_command(sb, ctx, env_path, rq->timeout_secs > 0 ? rq->timeout_secs : 0,
                            op, error) < 0
        || (rq->snapshot_id && cf_hydrate(sb, ctx, rq->snapshot_id, op, error) < 0)
        || cf_open_request_ports(sb, ctx, rq, op, error) < 0) {
        sb = cl_create_undo(sb, c, cf_delete, id, sb != NULL, cf_sandbox_free, op, error);
        goto out;
    }
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(j);
    free(url);
    free(envtext);
    free(env_path);
    cl_resp_clear(&r);
    return rc;
}

CL_DESTROY(cf_destroy, cf_delete)

/* The first check of every slot the library calls on a sandbox:
 * not_found once its lifetime is over (naming the expiry) or once it is
 * gone. The plugin's own commands (a kill, a staged file's removal, the
 * end of a command that ran at the expiry) only check that it is not gone
 * (cf_exec_call). */
static int cf_check_live(struct sbx_plugin_sandbox *sb, const char *op, sbx_error **error)
{
    if (cl_lifetime_check(sb->expires_at, sb->lifetime, sb->s.id, op, error) < 0)
        return -1;
    return cl_gone_check(&sb->s.gone, op, CF_BACKEND, sb->s.id, error);
}

/* GET …/running: 1 or 0 in *@running, or -1. */
static int cf_running(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                      int *running, const char *op, sbx_error **error)
{
    char *url = cf_url(c, id, "/running");
    long st = 0;
    json_object *j = cl_get_json(c->cl.http, ctx, url, &st, op, "ask whether the sandbox runs",
                                 error);
    free(url);
    if (!j) {
        if (st == 404 || st == 400)
            cl_context(cl_fail(error, SBX_ERROR_NOT_FOUND, op, "cloudflare sandbox %s does not "
                               "exist", id), "sandbox_id", id);
        return -1;
    }
    *running = cl_json_bool(j, "running");
    json_object_put(j);
    return 0;
}

/* Alive while its container runs. The bridge cannot tell a sandbox whose
 * container slept after the worker's sleepAfter from a deleted one: both
 * answer running false. */
static int cf_is_alive(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (cf_is_gone(sb))
        return 0;
    int running = 0;
    if (cf_running(sb->s.c, ctx, sb->s.id, &running, "is_alive", error) < 0)
        return -1;
    return running;
}

/* {"version":1,"sandbox_id":ID[,"workdir":W]}: no credential, no env value
 * (the create's environment is a file in the sandbox). */
static char *cf_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, CF_BACKEND, CF_STATE_VERSION, "sandbox_id", error);
    if (!j)
        return NULL;
    pthread_mutex_lock(&sb->tlock);
    if (sb->n_tunnels) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < sb->n_tunnels; i++) {
            json_object *t = json_object_new_object();
            json_object_object_add(t, "port", json_object_new_int((int)sb->tunnels[i].port));
            json_object_object_add(t, "url", json_object_new_string(sb->tunnels[i].url));
            json_object_array_add(a, t);
        }
        json_object_object_add(j, "tunnels", a);
    }
    pthread_mutex_unlock(&sb->tlock);
    if (sb->expires_at > 0) {
        json_object_object_add(j, "lifetime", json_object_new_double(sb->lifetime));
        json_object_object_add(j, "expires_at", json_object_new_double(sb->expires_at));
    }
    return cl_state_end(j, error);
}

static int cf_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "resume";
    json_object *data, *tunnels;
    struct sbx_plugin_sandbox *sb = cl_resume_state(client, state_json, CF_BACKEND,
                                                    CF_STATE_VERSION, "sandbox_id", sizeof(*sb),
                                                    &data, error);
    if (!sb)
        return -1;
    pthread_mutex_init(&sb->tlock, NULL);
    json_object *lv = NULL;
    if (json_object_object_get_ex(data, "lifetime", &lv))
        sb->lifetime = json_object_get_double(lv);
    if (json_object_object_get_ex(data, "expires_at", &lv))
        sb->expires_at = json_object_get_double(lv);
    if (cl_lifetime_check(sb->expires_at, sb->lifetime, sb->s.id, op, error) < 0) {
        /* Deleted now (best effort): sbx_gc() reaps an expired row through
         * a resume. */
        cf_delete(client, ctx, sb->s.id, op, NULL);
        return cl_resume_end(-1, sb, sandbox, NULL, data, cf_sandbox_free);
    }
    int running = 0;
    if (cf_running(client, ctx, sb->s.id, &running, op, error) < 0)
        return cl_resume_end(-1, sb, sandbox, NULL, data, cf_sandbox_free);
    if (json_object_object_get_ex(data, "tunnels", &tunnels)
        && json_object_is_type(tunnels, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(tunnels); i++) {
            json_object *t = json_object_array_get_idx(tunnels, i), *pv;
            const char *u = cl_json_str(t, "url");
            int64_t port = json_object_object_get_ex(t, "port", &pv) ? json_object_get_int64(pv)
                                                                     : 0;
            if (port < 1 || port > 65535 || !u || strncmp(u, "https://", 8) != 0) {
                cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                        "cloudflare session state: bad \"tunnels\" entry %zu", i);
                return cl_resume_end(-1, sb, sandbox, NULL, data, cf_sandbox_free);
            }
            if (cf_tunnel_put(sb, (unsigned)port, u) < 0) {
                cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                return cl_resume_end(-1, sb, sandbox, NULL, data, cf_sandbox_free);
            }
        }
    }
    /* A container that slept: its files are gone with it (the bridge keeps
     * none), so it is the provider's loss (CASE-32). */
    if (!running)
        cl_gone_error(error, op, CF_BACKEND, sb->s.id);
    return cl_resume_end(running ? 0 : -1, sb, sandbox, NULL, data, cf_sandbox_free);
}

/* mkdir -p @dir with mode 0700 for what it makes: 0, or -1 (errno). */
static int cf_mkdirs(const char *dir)
{
    char *d = strdup(dir);
    if (!d)
        return -1;
    for (char *p = d + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(d, 0700) < 0 && errno != EEXIST) {
                free(d);
                return -1;
            }
            *p = c;
            if (!c)
                break;
        }
    }
    free(d);
    return 0;
}

/* persist's tar of /workspace, kept as SNAPSHOT_ID.tar (mode 0600) in the
 * client's snapshot directory: the bridge gives the archive to its client
 * and keeps none (a container's disk goes when it sleeps). */
static char *cf_snapshot(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "snapshot";
    if (cf_check(sb, op, error) < 0)
        return NULL;
    char id[sizeof CF_SNAP_PREFIX + 32];
    memcpy(id, CF_SNAP_PREFIX, strlen(CF_SNAP_PREFIX));
    cl_random_hex(id + strlen(CF_SNAP_PREFIX), 16);
    char *tmp = cl_printf("%s/.%s.part", sb->s.c->snap_dir, id);
    char *dst = cl_printf("%s/%s.tar", sb->s.c->snap_dir, id);
    char *out = NULL;
    int fd = -1;
    if (!tmp || !dst) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto done;
    }
    if (cf_mkdirs(sb->s.c->snap_dir) < 0
        || (fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "cloudflare: cannot write "
                           "snapshots in %s: %s", sb->s.c->snap_dir, strerror(errno)),
                   "path", sb->s.c->snap_dir);
        goto done;
    }
    /* What changed outside /workspace since the create (files, links and
     * directories whose inode changed after CF_LIVE_FILE was made; other
     * mounts, /workspace and the plugin's own /var/lib/sbx left out) goes
     * into CF_ROOT_TAR, so persist's archive of /workspace carries it. */
    int code = -1;
    char *msg = NULL;
    if (cf_run(sb, ctx, "cd / || exit 1\nset --\n"
               "while read -r _ _ _ _ m _; do [ \"$m\" = / ] || set -- \"$@\" -o -path \".$m\";"
               " done </proc/self/mountinfo\n"
               "find . \\( -path ./workspace -o -path ./var/lib/sbx \"$@\" \\) -prune -o ! -path . "
               "-cnewer " CF_LIVE_FILE " \\( -type f -o -type l -o -type d \\) -print0 "
               "| tar --null --no-recursion -cf " CF_ROOT_TAR " -T -\n"
               "[ $? -le 1 ]\n", -1, NULL, &msg, &code, op, error) < 0) {
        free(msg);
        unlink(tmp);
        goto done;
    }
    if (code != 0) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cloudflare: archiving what changed "
                "outside " CF_WORKSPACE " failed (exit %d): %s", code, msg ? msg : "");
        free(msg);
        cf_run_short(sb, ctx, "rm -f " CF_ROOT_TAR, &code, op, NULL);
        unlink(tmp);
        goto done;
    }
    free(msg);
    cl_req rq = { .method = "POST", .sink = cl_fd_sink, .sink_ud = &fd, .idempotent = CL_SAFE,
                  .what = "persist the workspace" };
    cl_resp r = { 0 };
    int rc = cf_call(sb->s.c, ctx, sb->s.id, "/persist", &rq, &r, op, error);
    cf_run_short(sb, ctx, "rm -f " CF_ROOT_TAR, &code, op, NULL);
    if (rc == 0 && r.status / 100 != 2) {
        cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r, op, "persist the workspace");
        rc = -1;
    }
    cl_resp_clear(&r);
    if (rc == 0 && (fsync(fd) < 0 || rename(tmp, dst) < 0)) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "cloudflare: cannot keep the "
                           "snapshot as %s: %s", dst, strerror(errno)), "path", dst);
        rc = -1;
    }
    if (rc < 0) {
        unlink(tmp);
        goto done;
    }
    out = cl_host_strdup(id, op, error);
done:
    if (fd >= 0)
        close(fd);
    free(tmp);
    free(dst);
    return out;
}

static int cf_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    (void)client;
    (void)ctx;
    (void)fn;
    (void)ud;
    cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, "list_owned",
            "backend \"%s\" cannot list the sandboxes this library made", CF_BACKEND);
    return -1;
}

/* Without a list call the library could not find what to destroy by id
 * (`sbx gc`), so destroy_by_id goes with list_owned. */
static int cf_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                            sbx_error **error)
{
    (void)client;
    (void)ctx;
    (void)id;
    cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, "destroy_by_id",
            "backend \"%s\" cannot destroy sandboxes by id", CF_BACKEND);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Files                                                                     */
/* ------------------------------------------------------------------------ */

/* The absolute path of @path: a relative one is taken from the workdir
 * (else /workspace, where the bridge starts commands). */
static char *cf_abs(struct sbx_plugin_sandbox *sb, const char *path)
{
    if (path[0] == '/')
        return strdup(path);
    return cl_printf("%s/%s", sb->s.workdir ? sb->s.workdir : CF_WORKSPACE, path);
}

/* The error of a file script's exit @code for @path (the caller's name). */
static int cf_script_fail(int code, const char *op, const char *path, const char *msg,
                          sbx_error **error)
{
    sbx_error *err;
    if (code == CF_EXIT_MISSING)
        err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such file in the sandbox: %s", path);
    else if (code == CF_EXIT_ISDIR)
        err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s is a directory", path);
    else if (code == CF_EXIT_NOTDIR)
        err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s is not a directory", path);
    else
        err = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cloudflare: %s on %s exited %d: "
                      "%s", op, path, code, msg ? msg : "");
    cl_context(err, "path", path);
    return -1;
}

static int cf_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    const char *op = "read_file";
    if (cf_check(sb, op, error) < 0)
        return -1;
    char *abs = cf_abs(sb, path);
    int rc = -1;
    if (!abs) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    if (!cf_in_workspace(abs) && cl_json_text_check(NULL, path, op, error) < 0) {
        free(abs);
        return -1;
    }
    if (cf_in_workspace(abs)) {
        char *sfx = cf_file_suffix(abs);
        cl_req rq = { .method = "GET", .sink = cl_fd_sink, .sink_ud = &fd,
                      .idempotent = CL_SAFE, .what = "read the file" };
        cl_resp r = { 0 };
        if (!sfx)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        else if (cf_call(sb->s.c, ctx, sb->s.id, sfx, &rq, &r, op, error) == 0) {
            if (r.status / 100 == 2)
                rc = 0;
            else
                cf_file_fail(sb->s.c, &r, op, path, "read the file", error);
        }
        free(sfx);
        cl_resp_clear(&r);
    } else {
        /* Outside /workspace: "base64" over the exec stream, decoded here
         * (the bridge carries a command's output as text: bytes that are
         * not UTF-8 would not come through as they are). */
        char *q = cl_shell_quote(abs);
        char *script = q ? cl_printf("[ -d %s ] && exit %d; [ -e %s ] || exit %d; "
                                     "exec base64 -w 0 -- %s",
                                     q, CF_EXIT_ISDIR, q, CF_EXIT_MISSING, q) : NULL;
        int code = 0;
        char *msg = NULL;
        cl_buf b64 = { 0 }, raw = { 0 };
        if (!script)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        else if (cf_run(sb, ctx, script, -1, &b64, &msg, &code, op, error) == 0) {
            if (code != 0) {
                rc = cf_script_fail(code, op, path, msg, error);
            } else if (b64.len && cl_base64_decode(b64.data, b64.len, &raw) < 0) {
                cl_context(cl_fail(error, SBX_ERROR_CONNECTION, op, "cloudflare: the base64 of "
                                   "%s did not decode", path), "path", path);
            } else if (raw.len && cl_fd_sink(&fd, raw.data, raw.len) < 0) {
                cl_context(cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot write %s to "
                                   "the caller: %s", path, strerror(errno)), "path", path);
            } else {
                rc = 0;
            }
        }
        cl_buf_clear(&b64);
        cl_buf_clear(&raw);
        free(msg);
        free(q);
        free(script);
    }
    free(abs);
    return rc;
}

static int cf_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                         uint32_t mode, sbx_error **error)
{
    const char *op = "write_file";
    /* The PUT carries any path, the command after it not: refused before
     * the PUT, so no file is left. */
    if (cf_check(sb, op, error) < 0 || cl_json_text_check(NULL, path, op, error) < 0)
        return -1;
    char *abs = cf_abs(sb, path), *staged = NULL, *q = NULL, *sq = NULL, *script = NULL;
    int rc = -1;
    if (!abs) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int direct = cf_in_workspace(abs);
    if (!direct) {
        char tag[25];
        cl_random_hex(tag, 12);
        staged = cl_printf(CF_WORKSPACE "/.sbx-%s.up", tag);
    }
    if ((!direct && !staged) || cf_put(sb, ctx, direct ? abs : staged, fd, path, op, error) < 0) {
        if (!direct && !staged)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    q = cl_shell_quote(abs);
    sq = staged ? cl_shell_quote(staged) : NULL;
    if (!q || (staged && !sq)) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (staged)
        script = cl_printf("[ -d %s ] && { rm -f -- %s; exit %d; }\n"
                           "mkdir -p -- \"$(dirname -- %s)\" && mv -f -- %s %s && "
                           "chmod %o -- %s || { rm -f -- %s; exit 1; }",
                           q, sq, CF_EXIT_ISDIR, q, sq, q, mode & 07777, q, sq);
    else
        script = cl_printf("chmod %o -- %s", mode & 07777, q);
    int code = 0;
    char *msg = NULL;
    if (!script)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cf_run(sb, ctx, script, -1, NULL, &msg, &code, op, error) == 0)
        rc = code == 0 ? 0 : cf_script_fail(code, op, path, msg, error);
    free(msg);
out:
    free(abs);
    free(staged);
    free(q);
    free(sq);
    free(script);
    return rc;
}

/* "find" over the exec stream: one "TYPE SIZE MODE NAME\0" per entry. */
static int cf_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    if (cf_check(sb, op, error) < 0 || cl_json_text_check(NULL, path, op, error) < 0)
        return -1;
    char *abs = cf_abs(sb, path);
    char *q = abs ? cl_shell_quote(abs) : NULL;
    char *script = q ? cl_printf("[ -e %s ] || exit %d; [ -d %s ] || exit %d; cd -- %s && "
                                 "exec find . -mindepth 1 -maxdepth 1 -printf '%%y %%s %%m %%P\\0'",
                                 q, CF_EXIT_MISSING, q, CF_EXIT_NOTDIR, q) : NULL;
    cl_buf out = { 0 };
    int code = 0, rc = -1;
    char *msg = NULL;
    if (!script)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cf_run(sb, ctx, script, -1, &out, &msg, &code, op, error) == 0) {
        if (code != 0) {
            cf_script_fail(code, op, path, msg, error);
        } else {
            rc = 0;
            size_t i = 0;
            while (i < out.len) {
                const char *e = out.data + i;
                size_t n = strlen(e);
                char type = 0;
                long long size = -1;
                unsigned m = 0;
                int off = 0;
                if (sscanf(e, "%c %lld %o %n", &type, &size, &m, &off) >= 3 && off > 0) {
                    sbx_plugin_file_info info = { sizeof(info), e + off, type == 'd',
                                                  type == 'd' ? -1 : size, m & 07777 };
                    if (fn(&info, ud) != 0)
                        break;
                }
                i += n + 1;
            }
        }
    }
    free(msg);
    cl_buf_clear(&out);
    free(abs);
    free(q);
    free(script);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

static int cf_exec_run(cl_proc *base)
{
    cf_proc *p = (cf_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sp.sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    char *src = cl_env_file_source(CF_ENV_FILE), *env_path = NULL;
    char *keys = cl_call_keys((const char *const *)p->sp.env);
    cl_buf s = { 0 };
    cf_stream st = { 0 };
    int code = -1;
    if (!src || !keys) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    /* The per-call environment as a staged file, sourced and removed. */
    if (p->sp.env && p->sp.env[0]) {
        cl_buf e = { 0 };
        char *kq = cl_shell_quote(keys);
        if (kq && cl_buf_env_exports(&e, (const char *const *)p->sp.env) == 0
            && cl_buf_printf(&e, "export " CL_CALL_KEYS "=%s\n", kq) == 0)
            env_path = cf_stage_text(sb, &ctx, e.data, "env", op, NULL);
        else
            cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        free(kq);
        cl_buf_clear(&e);
        if (!env_path)
            goto fail;
    }
    cl_buf_printf(&s, "[ -e " CF_LIVE_FILE " ] || exit %d\n", CF_GONE_EXIT);
    if (env_path)
        cl_buf_printf(&s, ". %s; rm -f %s\n", env_path, env_path);
    cl_buf_printf(&s, "%s", src);
    if (cl_script_stdin_prelude(&p->sp, &ctx, cf_put, CF_WORKSPACE, &s, op) < 0)
        goto fail;
    cl_buf_printf(&s, "%s", p->sp.script);
    if (!s.data) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    st.proc = base;
    st.out_fd = -1;
    if (cf_exec_call(sb, &ctx, s.data, p->sp.tag, &st, op, NULL) < 0) {
        cl_buf_clear(&st.err_buf);
        goto fail;
    }
    code = st.exit_code;
    if (code == CF_GONE_EXIT) {
        /* The container is a fresh one: the sandbox was deleted (or its
         * container slept and lost its files). The fresh one is deleted. */
        int c2 = 0;
        if (cf_run_short(sb, &ctx, "test -e " CF_LIVE_FILE, &c2, op, NULL) == 0 && c2 != 0) {
            cl_gone_set(&sb->s.gone);
            cf_delete(sb->s.c, NULL, sb->s.id, op, NULL);
            cl_gone_error(NULL, op, CF_BACKEND, sb->s.id);
            goto fail;
        }
    }
    goto out;
fail:
    cl_proc_fail_in(base, &sb->s);
    code = -1;
    if (st.failed && !cf_is_gone(sb))
        cl_proc_context(base, "code", st.err_code);
out:
    cl_buf_clear(&s);
    free(src);
    free(keys);
    free(env_path);
    return code;
}

#ifdef SBX_HAVE_CLOUD_WS
/* ------------------------------------------------------------------------ */
/* Terminals: the bridge's terminal WebSocket                                */
/* ------------------------------------------------------------------------ */

/* Output (binary) and the container's control messages (text). */
static int cf_pty_message(void *ud, int binary, const unsigned char *d, size_t n)
{
    cf_proc *p = ud;
    if (binary)
        return cl_proc_output(&p->sp.base, 1, d, n) < 0 ? -1 : 0;
    char *text = strndup((const char *)d, n);
    json_object *j = text ? json_tokener_parse(text) : NULL;
    free(text);
    const char *type = cl_json_str(j, "type");
    int64_t v;
    pthread_mutex_lock(&p->tlock);
    if (type && strcmp(type, "exit") == 0) {
        const char *sig = cl_json_str(j, "signal");
        int num = 0;
        for (int i = 1; sig && i < 65 && !num; i++) {
            const char *name = sigabbrev_np(i);
            if (name && (strcmp(sig + (strncmp(sig, "SIG", 3) == 0 ? 3 : 0), name) == 0))
                num = i;
        }
        if (num)
            p->tty_exit = 128 + num;
        else if (cl_json_int(j, "code", &v) == 1)
            p->tty_exit = v < 0 ? 255 : (int)(v & 0xff);
    } else if (type && strcmp(type, "error") == 0) {
        const char *m = cl_json_str(j, "message");
        snprintf(p->tty_error, sizeof p->tty_error, "%.500s", m ? m : "error");
    }
    pthread_mutex_unlock(&p->tlock);
    json_object_put(j);
    return 0;
}

/* The staged program of the terminal: removes itself, exports the mark
 * and the per-call env, and execs the create's env and the script. */
static char *cf_pty_program(cf_proc *p)
{
    char *src = cl_env_file_source(CF_ENV_FILE), *keys = cl_call_keys((const char *const *)p->sp.env);
    cl_buf inner = { 0 }, b = { 0 };
    int bad = !src || !keys;
    if (!bad)
        bad = cl_buf_printf(&inner, "%s%s", src, p->sp.script) < 0;
    char *qi = bad ? NULL : cl_shell_quote(inner.data), *qk = bad ? NULL : cl_shell_quote(keys);
    bad = bad || !qi || !qk;
    if (!bad)
        bad = cl_buf_printf(&b, "#!/bin/sh\nrm -f -- \"$0\"\n"
                                "[ -e " CF_LIVE_FILE " ] || exit %d\n"
                                "export " CL_EXEC_MARK "=%s\n", CF_GONE_EXIT, p->sp.tag) < 0;
    if (!bad)
        bad = cl_buf_env_exports(&b, (const char *const *)p->sp.env) < 0;
    if (!bad)
        bad = cl_buf_printf(&b, "export " CL_CALL_KEYS "=%s\nexec /bin/sh -c %s\n", qk, qi) < 0;
    free(qi);
    free(qk);
    free(src);
    free(keys);
    cl_buf_clear(&inner);
    return cl_buf_take(&b, bad);
}

/* The worker of a command on a terminal: the program staged, a session
 * made, the terminal's WebSocket serviced to the program's exit. */
static int cf_pty_run(cl_proc *base)
{
    cf_proc *p = (cf_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sp.sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    char *prog = cf_pty_program(p), *path = cl_printf(CF_WORKSPACE "/.%s.tty", p->sp.tag);
    char *cmd = NULL, *sid = NULL, *suffix = NULL, *http_url = NULL;
    char *qpath = NULL, *qsid = NULL;
    int code = -1, rc;
    cl_term term = { .lock = &p->tlock, .cond = &p->tcond, .slot = &p->ws, .proc = base,
                     .sb = sb, .run = cf_run_short, .tag = p->sp.tag, .stdin_fd = p->sp.stdin_fd };
    cl_ws *ws = NULL;
    if (!prog || !path || !(qpath = cl_shell_quote(path))
        || !(cmd = cl_printf("chmod 700 -- %s", qpath))) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (cf_put_text(sb, &ctx, path, prog, op, NULL) < 0)
        goto out;
    int c2 = 0;
    if (cf_run_short(sb, &ctx, cmd, &c2, op, NULL) < 0)
        goto out;
    if (c2 != 0) {
        cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "cloudflare: cannot make the terminal's "
                "program %s executable (chmod exited %d)", path, c2);
        goto out;
    }
    /* A session of its own: its terminal is a new one. */
    cl_req sq = { .method = "POST", .body = "{}", .body_len = 2, .idempotent = CL_UNSAFE,
                  .what = "create a session" };
    cl_resp sr = { 0 };
    rc = cf_call(sb->s.c, &ctx, sb->s.id, "/session", &sq, &sr, op, NULL);
    if (rc == 0 && sr.status / 100 != 2) {
        cl_fail_status(sb->s.c->cl.http, NULL, CL_CODE_BY_STATUS, &sr, op, "create a session");
        rc = -1;
    }
    json_object *sj = rc == 0 ? cl_resp_json(&sr, op, "create a session", NULL) : NULL;
    const char *s_id = cl_json_str(sj, "id");
    sid = s_id ? strdup(s_id) : NULL;
    json_object_put(sj);
    cl_resp_clear(&sr);
    if (rc < 0)
        goto out;
    if (!sid) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "cloudflare: the bridge's session answer has "
                "no id");
        goto out;
    }
    char *ep = cl_url_escape(path), *es = cl_url_escape(sid);
    suffix = ep && es ? cl_printf("/pty?cols=%u&rows=%u&shell=%s&session=%s", p->tty_cols,
                                  p->tty_rows, ep, es) : NULL;
    free(ep);
    free(es);
    http_url = suffix ? cf_url(sb->s.c, sb->s.id, suffix) : NULL;
    if (!http_url) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (cl_term_connect(&term, sb->s.c->cl.http, http_url, cf_pty_message, p, &ctx,
                        "connect to the sandbox's terminal", &ws, op, NULL) < 0)
        goto out;
    rc = cl_ws_run(ws, &ctx, op, NULL);
    pthread_mutex_lock(&p->tlock);
    p->ws = NULL;
    int exit_code = p->tty_exit;
    char terr[512];
    snprintf(terr, sizeof terr, "%s", p->tty_error);
    pthread_mutex_unlock(&p->tlock);
    if (exit_code >= 0) {
        code = exit_code;
    } else if (terr[0]) {
        cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "cloudflare: the terminal failed: %s",
                terr);
    } else if (rc == 0) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "cloudflare: the terminal closed without its "
                "program's exit");
        cl_outcome_unknown(NULL);
    } else if (!cl_proc_stopping(base)) {
        cl_outcome_unknown(NULL);
    }
out:
    cl_term_end(&term);
    if (code == CF_GONE_EXIT) {
        int c3 = 0;
        if (cf_run_short(sb, &ctx, "test -e " CF_LIVE_FILE, &c3, op, NULL) == 0 && c3 != 0) {
            cl_gone_set(&sb->s.gone);
            cf_delete(sb->s.c, NULL, sb->s.id, op, NULL);
            cl_gone_error(NULL, op, CF_BACKEND, sb->s.id);
            code = -1;
        }
    }
    cl_last_error l = *cl_last();
    if (code < 0 && !cf_is_gone(sb)) {
        /* Nothing of the command is left running after its error. */
        char *kill = cl_mark_kill_command(p->sp.tag, SIGKILL);
        int c4 = 0;
        sbx_call_ctx kc = { sizeof(kc), cl_now() + 10, -1, NULL };
        if (kill)
            cf_run_short(sb, &kc, kill, &c4, op, NULL);
        free(kill);
    }
    if (sid && !cf_is_gone(sb)) {
        char *ds = cl_url_escape(sid), *dsuf = ds ? cl_printf("/session/%s", ds) : NULL;
        cl_req dq = { .method = "DELETE", .idempotent = CL_SAFE, .what = "delete the session" };
        cl_resp dr = { 0 };
        sbx_call_ctx dc = { sizeof(dc), cl_now() + 10, -1, NULL };
        if (dsuf)
            cf_call(sb->s.c, &dc, sb->s.id, dsuf, &dq, &dr, op, NULL);
        cl_resp_clear(&dr);
        free(dsuf);
        free(ds);
    }
    if (code < 0) {
        cl_fail_from(NULL, &l, op);
        cl_proc_fail_in(base, &sb->s);
    }
    pthread_mutex_lock(&p->tlock);
    p->tty_over = 1;
    pthread_cond_broadcast(&p->tcond);
    pthread_mutex_unlock(&p->tlock);
    cl_ws_free(ws);
    free(http_url);
    free(suffix);
    free(sid);
    free(qsid);
    free(qpath);
    free(cmd);
    free(path);
    free(prog);
    return code;
}

/* A resize control on the terminal's WebSocket, once it is connected
 * (waited for within the call's bound); nothing once the program ended. */
static int cf_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx, unsigned rows,
                          unsigned cols, sbx_error **error)
{
    cf_proc *p = (cf_proc *)process;
    if (cl_resize_check(p->tty_rows, error) < 0)
        return -1;
    cl_bound bd = cl_bound_make(ctx, 0);
    char msg[96];
    snprintf(msg, sizeof msg, "{\"type\":\"resize\",\"cols\":%u,\"rows\":%u}", cols, rows);
    pthread_mutex_lock(&p->tlock);
    while (!p->ws && !p->tty_over)
        if (cl_resize_wait(&bd, &p->tcond, &p->tlock, "cloudflare: the terminal was not "
                           "resized: its connection was not made in time", error) < 0)
            return -1;
    /* Sent under the lock: the worker frees the connection only after it
     * took it back from p->ws under the same lock. */
    if (p->ws)
        cl_ws_send(p->ws, 0, msg, strlen(msg));
    pthread_mutex_unlock(&p->tlock);
    return 0;
}
#endif /* SBX_HAVE_CLOUD_WS */

/* Frees what a cf_proc adds to its cl_script_proc. */
static void cf_proc_fini(cl_script_proc *sp)
{
    cf_proc *p = (cf_proc *)sp;
    pthread_cond_destroy(&p->tcond);
    pthread_mutex_destroy(&p->tlock);
}

static int cf_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                         sbx_error **error)
{
    const char *op = "exec";
    (void)ctx;
    if (cf_check(sb, op, error) < 0)
        return -1;
#ifndef SBX_HAVE_CLOUD_WS
    if (rq->tty_rows || rq->tty_cols) {
        cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                "cloudflare backend: commands on a terminal are not supported");
        return -1;
    }
#endif
    if (rq->user) {
        cl_context(cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                           "cloudflare backend: user %s cannot be chosen per command",
                           rq->user), "user", rq->user);
        return -1;
    }
    /* Without a terminal the script goes in the exec's JSON; on one it is
     * a staged file's bytes. The env goes in a staged file either way. */
    if (!rq->tty_rows && !rq->tty_cols
        && cl_text_check(rq, NULL, "JSON", CL_TEXT_ENV_AS_BYTES, op, error) < 0)
        return -1;
    cf_proc *p = (cf_proc *)cl_script_proc_new(sizeof(cf_proc), sb, sb->s.workdir, rq,
                                               cf_run_short, op, error);
    if (!p)
        return -1;
    p->tty_rows = rq->tty_rows;
    p->tty_cols = rq->tty_cols;
    p->tty_exit = -1;
    pthread_mutex_init(&p->tlock, NULL);
    pthread_cond_init(&p->tcond, NULL);
    p->sp.fini = cf_proc_fini;
    cl_proc_run_fn run = cf_exec_run;
#ifdef SBX_HAVE_CLOUD_WS
    if (p->tty_rows)
        run = cf_pty_run;
#endif
    return cl_script_proc_launch(&p->sp, run, rq, op, process, error);
}

/* exec_kill (cl_script_exec_kill()); nothing once the sandbox is gone. */
static int cf_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                        sbx_error **error)
{
    cf_proc *p = (cf_proc *)process;
    if (cf_is_gone(p->sp.sb))
        return 0;
    return cl_script_exec_kill(process, ctx, sig, error);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin cf_plugin = {
    CL_PLUGIN_HEAD(CF_BACKEND),
    CL_PLUGIN_SLOTS(cf),
    .description = "Cloudflare Sandboxes through the user's Sandbox Bridge worker over libcurl "
                   "(CLOUDFLARE_SANDBOX_WORKER_URL); the instance type, image and network are "
                   "the worker's settings; snapshots hold /workspace only; no list call, so "
                   "no list_owned",
    .caps = CF_CAPS,
    .sandbox_free = cf_sandbox_free,
    .snapshot = cf_snapshot,
    .exec_wait = cl_script_exec_wait,
    .exec_kill = cf_exec_kill,
#ifdef SBX_HAVE_CLOUD_WS
    .exec_resize = cf_exec_resize,
#endif
    .exec_free = cl_script_exec_free,
    .expose_port = cf_expose_port,
    .unexpose_port = cf_unexpose_port,
    .resolve_port = cf_resolve_port,
    .list_ports = cf_list_ports,
};

CL_PLUGIN_EXPORT(&cf_plugin)
