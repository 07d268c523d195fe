/*
 * daytona.c — libsbx-daytona.so, the `daytona` backend: Daytona's v0 REST
 * API for the lifecycle and its Toolbox API for commands and files, over
 * the hosted-provider base (plugins/cloud/base/cloud.h).
 *
 * Contract: the Daytona section of the provider contracts (daytona/clients
 * openapi-specs api.json and toolbox.json; daytonaio/daytona v0.190.0).
 *
 *  - Credentials: DAYTONA_API_KEY, else DAYTONA_JWT_TOKEN with
 *    DAYTONA_ORGANIZATION_ID (sent as X-Daytona-Organization-ID); always as
 *    "Authorization: Bearer ...". Base URL: the client config's "api_url",
 *    else DAYTONA_API_URL, else https://app.daytona.io/api. Region: config
 *    "target", else DAYTONA_TARGET. Client option "refresh_activity_s"
 *    (see exec; a bad one is a configuration error with context
 *    option=refresh_activity_s), and the base's "retries",
 *    "rate_limit_retries" and "max_retry_wait_s".
 *  - create: POST /sandbox. cpu → integer cores, refused (configuration,
 *    context max and step) unless a whole number; memory_mb → GB, refused
 *    (configuration, context min_mb and step_mb) unless a multiple of
 *    1024, as Daytona could not enforce it; disk_mb → GB (ceil); gpu
 *    "TYPE[:N]" → gpuType [TYPE], gpu N; cpu, memory, disk and ttlMinutes
 *    that the body's int32 cannot carry (above 2147483647 cores, GB, GB or
 *    minutes) are refused naming the option and its value (context max,
 *    max_mb or max_s);
 *    image → buildInfo with a "FROM image" Dockerfile; template or
 *    snapshot_id → snapshot; allow_internet=0 → networkBlockAll; env → env;
 *    the create token, backend and expiry → labels. Lifetime (the
 *    reference's mapping): ttlMinutes = max(1, ceil(timeout_secs / 60))
 *    only when the caller set timeout_secs; otherwise Daytona's idle stop
 *    (autoStopInterval 15 minutes) is the provider-side bound, and is sent
 *    explicitly. app_name is refused (a configuration error naming it).
 *    The sandbox is polled until "started"; "error"/"build_failed" fail the
 *    create with its errorReason, and the sandbox is deleted.
 *  - exec: in a toolbox session, never the merged `result` of
 *    /process/execute. A sandbox handle keeps the sessions whose commands
 *    have ended and reuses them (made with POST /process/session when it
 *    has none idle, so one session while commands run one at a time, more
 *    only for commands that run at once, as a session's shell runs its
 *    commands in turn; deleted when the handle is freed with the sandbox
 *    still there, and with the sandbox at destroy). A command is
 *    POST /process/session/{sid}/exec {"command", "runAsync": true}, then
 *    its logs followed (GET .../command/{cmdId}/logs?follow=true; each
 *    chunk prefixed by \x01\x01\x01 for stdout or \x02\x02\x02 for
 *    stderr) to its end, then GET .../command/{cmdId} for its exitCode:
 *    three requests (the contract gives the exit code only there), plus
 *    the upload of stdin when given. When nothing reads the output before
 *    the command ends (SBX_PLUGIN_EXEC_OUTPUT_AT_END: no output callback)
 *    and there is no stdin, one request: "runAsync": false, answered with
 *    stdout, stderr and exitCode once the command ends. The daemon's JSON
 *    has U+FFFD in place of each byte that is not UTF-8, so an answer
 *    whose stdout or stderr holds U+FFFD is followed by one read of the
 *    command's logs (GET .../command/{cmdId}/logs: the raw bytes, with
 *    the markers above), which give the output byte for byte (CASE-07):
 *    two requests for such output only. A session the daemon no longer has
 *    (404 about the session: a started sandbox's daemon is a new one) is
 *    dropped and the command sent to another. The exec request is
 *    CL_UNSAFE: libcurl never re-sends it by itself (cl_request), so a
 *    command never runs twice.
 *    Quiet commands (CASE-52): no read timeout of our own; a request the
 *    path cuts (a proxy or NAT closing an idle connection: a connection
 *    error without an answer) while the command runs never sends the
 *    command again: the sandbox's state is read first (GET /sandbox/{id};
 *    anything but "started": the exec fails, see below); the exec run at
 *    once is then found in its session (GET /process/session/{sid}: its
 *    command whose line carries the command's SBX_EXEC_ID mark; not
 *    listed, the daemon never had the request, as when a kept-alive
 *    connection had died: sent again, twice at most, then a connection
 *    error, outcome unknown) and its logs followed
 *    as a streamed one's are; followed logs that are cut are followed
 *    again from their start, the bytes already read skipped, as often as
 *    they are cut (three cuts in a row within 1 s of their start with no
 *    new byte fail it, outcome unknown). The contract has no keepalive
 *    frames of the provider's on the followed logs (CASE-52 B: nothing to
 *    filter). Daytona stops a sandbox autoStopInterval minutes after the
 *    start of the last request about it, and a quiet command is one long
 *    request: while commands of a handle run, a thread of the handle's
 *    renews its activity (POST /sandbox/{id}/last-activity, the SDK's
 *    refresh_activity) every "refresh_activity_s" seconds (client option,
 *    0 to 86400; 0: never), by default 60 s, or a quarter of the
 *    sandbox's autoStopInterval when that is shorter, or never when it is
 *    0; the first renewal comes that long after the command's start. The
 *    calls about a running command never wake the sandbox: a sandbox
 *    stopped under it (not "started" after a cut, or a "not started"
 *    answer) fails the exec with execution_failed "... was stopped while
 *    the command ran ...", outcome unknown, context state (CASE-53).
 *    The command runs as
 *    "sh -c SCRIPT" (cl_shell_script: the cwd on a line of its own,
 *    CASE-46) with its environment as assignments in front of it, exec'd
 *    in a subshell, so that nothing stays in the session's shell; that
 *    shell's own stderr is /dev/null for the line, so its report of a
 *    command a signal ended ("Terminated") is not in the command's stderr
 *    (dt_command_line). A command given as an argv
 *    does too, though its line could name the program bare: the session's
 *    shell is the daemon's pick (GetShell: zsh or bash when /etc/shells
 *    lists one, else $SHELL, else sh), and where it is bash, a program
 *    the kernel will not run (a script with no #! line: ENOEXEC) is read
 *    as a script by the forked session shell itself, not by /bin/sh, in a
 *    process whose /proc environ lacks the marker, which exec_kill then
 *    cannot find; the session shell's builtins, functions and remembered
 *    command paths would also come before the program that "exec" under
 *    sh -c finds in PATH each time. Its stdin a file uploaded first
 *    (kept in an unlinked host file while it is sent, to be sent again
 *    when the sandbox had to be started first) and removed by the command
 *    once open, or /dev/null. Every process of the command
 *    carries SBX_EXEC_ID=<its tag> in its environment, so exec_kill
 *    (through /process/execute) signals all of them, setsid'd and orphaned
 *    descendants included. The default cwd is the caller's workdir (made
 *    with mkdir -p at create; it must be absolute) or, unset, the
 *    toolbox's working directory; relative file paths resolve the same
 *    way.
 *  - terminal (tty_rows/tty_cols): a PTY session of the toolbox daemon
 *    (toolbox process/pty): POST /process/pty {"id": "sbx-pty-<tag>",
 *    "cols", "rows", "lazyStart": true, "envs"}, then its WebSocket, GET
 *    /process/pty/{id}/connect (the client's Authorization header; the
 *    base's libwebsockets client, ws.h): a text frame {"type":"control",
 *    "status":"connected"|"error"} first, the terminal's output as binary
 *    frames (to stdout), typed bytes sent as binary frames, and at the
 *    shell's end the close frame whose reason is {"exitCode": N}. The
 *    daemon starts the user's shell with no argument (an interactive bash),
 *    so the command rides in its envs: PROMPT_COMMAND, run by bash before
 *    its first prompt (nothing is typed, nothing echoed), exports again the
 *    environment bash was given (/proc/$$/environ: its rc files may have
 *    changed PS1 and the like), unsets itself and execs /bin/sh -c with
 *    the script held in SBX_TTY_SCRIPT (the per-call env as exports, then
 *    the command's script), so the command is the terminal's program and
 *    its exit code the session's. A resize is POST
 *    /process/pty/{id}/resize {"cols", "rows"}. The end of the host's stdin
 *    hangs the terminal up (SIGHUP to the command's processes, by the
 *    mark). A shell killed by a signal is reported by the daemon as
 *    exitCode -1, which names no signal: 128+N when exec_kill sent signal
 *    N last, else an execution_failed error.
 *  - A stopped or archived sandbox is started on use (CASE-53): a toolbox
 *    answer 400 "... Is the Sandbox started?" makes the plugin look at the
 *    sandbox's state; stopped/archived → POST /sandbox/{id}/start and wait
 *    for "started"; starting/restoring/creating → wait; error → an error
 *    carrying state and errorReason; 404 → not_found "gone" (CASE-32),
 *    after which every call fails at once.
 *  - files: GET /files/download (raw bytes to the host's descriptor),
 *    POST /files/upload (multipart, streamed from the descriptor), then the
 *    mode set with chmod; GET /files (list), GET /files/info (stat).
 *  - snapshot: POST /sandbox/{id}/snapshot {"name"}: the name is the
 *    snapshot id, given back as `snapshot` at create.
 *  - list_owned / destroy_by_id: GET /sandbox?labels={"sbx_backend":"daytona"}.
 *  - A create whose outcome is unknown (no answer within the backend
 *    option "create_timeout" seconds or the call's deadline, or a 5xx)
 *    fails with outcome unknown; the sandbox it may have made is found by
 *    its create token label and deleted, at once and then once a second
 *    for DT_REAP_WINDOW_S on the client's reaper thread (CASE-20).
 *
 * What the hosted plugins write alike is the base's (provider.h): the
 * sandbox head (id, gone flag) and its id, root and destroy slots, the wait
 * for a state, the session state, the client's config and credential (the
 * organization header rides with it), the workdir check and mkdir, the
 * chmod after an upload, the refusal of an option, the item GET and
 * DELETE, the missing-cwd error, descriptors as bodies and sinks, the
 * kill of every marked process, the port slots, the ownership labels, and
 * the paged listing and its owned items.
 *  - exposed ports: the create's ports and expose_port's are mapped here
 *    (session state "ports"); resolve_port asks GET
 *    /sandbox/{id}/ports/{port}/preview-url and answers its url; the
 *    token beside it is dropped unread (never logged, stored or in an
 *    error).
 *
 * Threading: slots may run at once on different sandboxes and on one; a
 * sandbox's mutable state (the gone flag, a cl_gone) has its own lock.
 */
#include "provider.h"
#ifdef SBX_HAVE_CLOUD_WS
#include "ws.h"     /* terminals: the base's WebSocket client */
#endif

#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#define DT_BACKEND "daytona"
#define DT_DEFAULT_URL "https://app.daytona.io/api"
#define DT_STATE_VERSION 1
#define DT_START_WAIT_S 300.0   /* bound on waiting for "started" */
#define DT_IDLE_STOP_MIN 15     /* autoStopInterval when no lifetime was set */
#define DT_REAP_WINDOW_S 60.0   /* how long a lost create's sandbox is looked for */
#define DT_REFRESH_S 60.0       /* default seconds between activity renewals */
#define DT_MAX_REFRESH_S 86400  /* the largest refresh_activity_s */

/* Terminals need the base's WebSocket client (libwebsockets). */
#ifdef SBX_HAVE_CLOUD_WS
#define DT_CAP_PTY SBX_CAP_PTY
#else
#define DT_CAP_PTY 0
#endif

#define DT_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_SNAPSHOT      \
                 | SBX_CAP_RESUME | SBX_CAP_ISOLATION | SBX_CAP_NETWORK_POLICY            \
                 | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT | SBX_CAP_DISK_LIMIT          \
                 | SBX_CAP_GPU | SBX_CAP_IMAGE | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED    \
                 | SBX_CAP_BACKGROUND | DT_CAP_PTY | SBX_CAP_EXPOSED_PORTS)

static const char *const dt_gpu_types[] = { "H100", "H200", "RTX-PRO-6000", "RTX-4090",
                                            "RTX-5090", NULL };

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, base URL, reaper of the
                         * orphans of creates whose answer was lost */
    char *target;       /* region, or NULL */
    double refresh_s;   /* client option refresh_activity_s; -1 when not
                         * set (the default: dt_refresh_every) */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id, the gone flag and the data
                         * plane, toolboxProxyUrl + "/" + id (provider.h) */
    pthread_mutex_t lock;   /* guards idle and the activity renewal's
                             * fields below */
    struct dt_session *idle;    /* toolbox sessions no command of ours runs
                                 * in, made by this handle, reused by the
                                 * next exec */
    int auto_stop_min;      /* the sandbox's autoStopInterval, -1 unknown */
    /* The activity renewal (dt_activity_begin): while running > 0, POST
     * /sandbox/{id}/last-activity each refresh_every seconds on thread. */
    pthread_cond_t cond;    /* signalled when running becomes > 0 while the
                             * thread waits untimed, and when quit is set */
    int running;            /* commands of this handle running */
    int quit;               /* the handle is being freed */
    double refresh_every;   /* seconds; 0 never; -1 not yet worked out */
    double next_refresh;    /* CLOCK_MONOTONIC seconds */
    int thread_started;
    int idle_wait;          /* the thread waits for running > 0, untimed */
    pthread_t thread;
    int cancel[2];          /* a pipe: written at free, cancels a renewal */
};

/* A toolbox session of one sandbox handle: "sbx-session-" and 24 hex digits. */
typedef struct dt_session {
    struct dt_session *next;
    char id[40];
} dt_session;

typedef cl_script_proc dt_proc;  /* provider.h */

static dt_session *dt_pool_take(struct sbx_plugin_sandbox *sb);
static void dt_pool_drop(struct sbx_plugin_sandbox *sb);
static void dt_session_delete(struct sbx_plugin_sandbox *sb, const char *sid);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* The gone flag (provider.h): set on a 404 about the sandbox. */
#define dt_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define dt_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), DT_BACKEND, (sb)->s.id, \
                                              (error))

/* Marks @sb gone and gives the error of a call on it (provider.h). */
static sbx_error *dt_fail_gone(struct sbx_plugin_sandbox *sb, sbx_error **error, const char *op)
{
    return cl_gone_mark(&sb->s.gone, error, op, DT_BACKEND, sb->s.id);
}

/* A control-plane call on /sandbox/{id}@suffix (provider.h). */
#define dt_sbcall(c, ctx, method, id, suffix, body, idem, r, op, what, error)                 \
    cl_item_request((c)->cl.http, (ctx), (method), (c)->cl.api, "sandbox", (id), (suffix),     \
                    (body), (idem), (r), (op), (what), (error))

/* GET /sandbox/{id}: the parsed Sandbox, or NULL (*@status: the HTTP
 * status, 0 when none came). */
CL_ITEM_GET(dt_get, "sandbox", "get the sandbox")

static const char *dt_state(json_object *j)
{
    const char *s = cl_json_str(j, "state");
    return s ? s : "unknown";
}

CL_ITEM_DELETE(dt_delete, "sandbox", "delete the sandbox")

/* The state named by this thread's last dt_wake failure ("" when none), so
 * that an exec's worker can hand it on as the error's context. */
static __thread char dt_wake_state[32];

/* Calls @fn on each sandbox listed (GET /sandbox?labels=@labels, every
 * page), until it gives non-zero. 0, or -1 with *@error set. */
static int dt_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *key,
                   const char *value, cl_listed_fn fn, void *ud, const char *op,
                   sbx_error **error)
{
    json_object *want = json_object_new_object();
    json_object_object_add(want, key, json_object_new_string(value));
    char *labels = cl_url_escape(json_object_to_json_string_ext(want, JSON_C_TO_STRING_PLAIN));
    json_object_put(want);
    char *url = labels ? cl_printf("%s/sandbox?limit=200&labels=%s", c->cl.api, labels) : NULL;
    cl_pages pg = { url, "cursor", NULL, "nextCursor", "items", "list sandboxes", 0 };
    int rc = cl_list_pages(c->cl.http, ctx, &pg, fn, ud, op, error);
    free(url);
    free(labels);
    return rc;
}

/* The reaper's look-up (cloud.h): the sandboxes labelled with a create
 * token; and the sandboxes this backend made: label sbx_backend=daytona. */
CL_LABEL_LISTING(dt, dt_list, DT_BACKEND, "id", "labels", NULL)

/* A sandbox in error or build_failed never starts (an execution failure
 * with the state and errorReason); a destroyed or destroying one is gone
 * (with the same context). */
static int dt_wake_failed(cl_sandbox *s, json_object *j, const char *state, const char *op,
                          sbx_error **error)
{
    if (strcmp(state, "error") != 0 && strcmp(state, "build_failed") != 0
        && strcmp(state, "destroyed") != 0 && strcmp(state, "destroying") != 0)
        return 0;
    const char *why = cl_json_str(j, "errorReason");
    sbx_error *err = strncmp(state, "destr", 5) == 0
        ? dt_fail_gone((struct sbx_plugin_sandbox *)s, error, op)
        : cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                  "daytona sandbox %s is in state %s%s%s", s->id, state,
                  why ? ": " : "", why ? why : "");
    cl_context(err, "state", state);
    snprintf(dt_wake_state, sizeof dt_wake_state, "%s", state);
    if (why)
        cl_context(err, "error_reason", why);
    return -1;
}

/* Starts a stopped or archived sandbox (CASE-53). */
static int dt_start_call(cl_sandbox *s, const sbx_call_ctx *ctx, const char *state,
                         const char *op, sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = (struct sbx_plugin_sandbox *)s;
    cl_resp r = { 0 };
    int rc = dt_sbcall(s->c, ctx, "POST", s->id, "/start", NULL, CL_SAFE, &r, op,
                       "start the sandbox", error);
    if (rc == 0 && r.status / 100 != 2) {
        if (r.status == 404)
            dt_fail_gone(sb, error, op);
        else
            cl_context(cl_fail_status(s->c->cl.http, error, CL_CODE_BY_STATUS, &r, op,
                                      "start the sandbox"), "state", state);
        rc = -1;
    }
    cl_resp_clear(&r);
    if (rc == 0) {
        dt_pool_drop(sb);   /* the daemon starts anew, without them */
        CL_LOG(SBX_LOG_INFO, "sandbox %s was %s: started it", s->id, state);
    }
    return rc;
}

/*
 * Waits until the sandbox is "started", starting it when it is stopped or
 * archived (CASE-53). Returns 0, or -1: not_found (gone), or an error
 * carrying the state (and errorReason), or a timeout naming the state.
 */
static const cl_resume_spec dt_spec = { DT_BACKEND, DT_STATE_VERSION, "sandbox_id", dt_get,
                                        "state", NULL, NULL };
static const char *const dt_asleep[] = { "stopped", "archived", NULL };
static const cl_wake_spec dt_waking = { &dt_spec, "state", "unknown", "started", dt_asleep,
                                        DT_START_WAIT_S, dt_wake_failed, dt_start_call };
#define dt_wake(sb, ctx, op, error) cl_sandbox_wake(&(sb)->s, (ctx), &dt_waking, (op), (error))

/* 1 for every state but destroyed (a stopped, archived or errored sandbox
 * still exists: exec starts it or names its state), 0 when gone. */
static const char *const dt_destroyed[] = { "destroyed", "destroying", NULL };

/* How a toolbox 404 about the sandbox is looked into: the toolbox is not
 * the sandbox's owner, so only the control plane's answer about the
 * sandbox (a 404, or destroyed) makes it gone. */
static const cl_resume_spec dt_look = { DT_BACKEND, DT_STATE_VERSION, "sandbox_id", dt_get,
                                        "state", dt_destroyed, NULL };

static int dt_not_started(cl_http *h, const cl_resp *r)
{
    if (r->status != 400)
        return 0;
    char *m = cl_resp_message(h, r);
    int yes = m && strstr(m, "Is the Sandbox started?") != NULL;
    free(m);
    return yes;
}

/* 1 when @r is the daemon's 404 about a toolbox session it does not have
 * (it keeps its sessions in memory: a stopped sandbox's are gone), which
 * says nothing of the sandbox itself. */
static int dt_session_lost(cl_http *h, const cl_resp *r)
{
    if (r->status != 404)
        return 0;
    char *m = cl_resp_message(h, r);
    int yes = m && strstr(m, "session") != NULL;
    free(m);
    return yes;
}

/*
 * A toolbox call: wakes the sandbox and sends it again when the toolbox
 * says the sandbox is not started (the first request did not reach a
 * running sandbox, so it cannot have acted; a streamed body is sent again
 * only when @rewind puts its source back at its start); a 404 marks the
 * sandbox gone when the control plane confirms it (dt_look: its GET
 * answers 404 or destroyed; else the 404 is the call's error), unless it
 * is about a file or a directory (a call on the toolbox's /files
 * endpoints, or one whose @rq->what names a file) or a session
 * (dt_session_lost: then @r keeps the 404). With @wake 0 the
 * sandbox is never woken: a "not started" answer is an error (@r keeps
 * it; dt_not_started), for the calls about a command already running,
 * which a stop ended. Returns 0 with a 2xx answer in @r, -1 otherwise
 * (error stored).
 */
static int dt_toolbox_rw(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, cl_req *rq,
                         const char *path, cl_resp *r, int (*rewind)(void *), void *rewind_ud,
                         int wake, const char *op, sbx_error **error)
{
    if (dt_check(sb, op, error) < 0)
        return -1;
    char *url = cl_printf("%s%s", sb->s.plane, path);
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    rq->url = url;
    int rc = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        cl_resp_clear(r);
        memset(r, 0, sizeof(*r));
        if (cl_request(sb->s.c->cl.http, ctx, rq, r, op, error) < 0)
            break;
        if (r->status / 100 == 2) {
            rc = 0;
            break;
        }
        if (attempt == 0 && wake && dt_not_started(sb->s.c->cl.http, r)
            && (!rq->source || (rewind && rewind(rewind_ud) == 0))) {
            if (dt_wake(sb, ctx, op, error) < 0)
                break;
            continue;
        }
        if (r->status == 404 && rq->what && strstr(rq->what, "file") == NULL
            && strncmp(path, "/files", 6) != 0 && !dt_session_lost(sb->s.c->cl.http, r)
            && cl_sandbox_confirm_gone(&sb->s, sb->s.c, ctx, &dt_look, op, error))
            break;
        cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, r, op, rq->what);
        break;
    }
    free(url);
    return rc;
}

static int dt_toolbox(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, cl_req *rq,
                      const char *path, cl_resp *r, const char *op, sbx_error **error)
{
    return dt_toolbox_rw(sb, ctx, rq, path, r, NULL, NULL, 1, op, error);
}

/* dt_toolbox() that never wakes the sandbox (see dt_toolbox_rw). */
static int dt_toolbox_nowake(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, cl_req *rq,
                             const char *path, cl_resp *r, const char *op, sbx_error **error)
{
    return dt_toolbox_rw(sb, ctx, rq, path, r, NULL, NULL, 0, op, error);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

CL_SETUP(dt_setup, DT_BACKEND)

static void dt_client_clear(sbx_plugin_client *c)
{
    free(c->target);
}

/* The API key, else a JWT, which acts for the organization named. */
static const char *const dt_key_envs[] = { "DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", NULL };

static const cl_client_spec dt_client_spec = {
    .provider = DT_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .url_key = "api_url", .url_env = "DAYTONA_API_URL", .url_default = DT_DEFAULT_URL,
    .key_envs = dt_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .key_required = 1,
    .find = dt_find_token, .del = dt_delete, .clear = dt_client_clear,
};

static int dt_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&dt_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    const char *key = getenv("DAYTONA_API_KEY"), *jwt = getenv("DAYTONA_JWT_TOKEN");
    const char *org = getenv("DAYTONA_ORGANIZATION_ID");
    if (!(key && *key) && jwt && *jwt && org && *org
        && cl_http_add_header(c->cl.http, "X-Daytona-Organization-ID", org) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    /* Without an SDK version the daemon merges a session command's stdout
     * and stderr unless asked for them apart (its pkg/session/common.go). */
    if (cl_http_add_header(c->cl.http, "X-Daytona-Split-Output", "true") < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    /* refresh_activity_s: seconds, 0 (the activity is never renewed) or
     * from 1 to a day; -1 when absent. */
    c->refresh_s = -1;
    if (cl_seconds_option(cfg, "refresh_activity_s", 1, DT_MAX_REFRESH_S, &c->refresh_s,
                          error) < 0)
        goto fail;
    const char *t = cl_json_str(cfg, "target");
    if (!t)
        t = getenv("DAYTONA_TARGET");
    if (t && *t)
        c->target = strdup(t);
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(dt_probe, DT_CAPS)

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/* A handle on sandbox @id, whose toolbox is at @toolbox_base (a trailing
 * slash is dropped) + "/" + @id; @workdir may be NULL. NULL on no memory. */
static struct sbx_plugin_sandbox *dt_sandbox_new(struct sbx_plugin_client *c, const char *id,
                                                 const char *toolbox_base, const char *workdir)
{
    char *base = toolbox_base ? cl_trim_slash(toolbox_base) : NULL;
    char *tb = base ? cl_printf("%s/%s", base, id) : NULL;
    struct sbx_plugin_sandbox *sb = cl_sandbox_new_at(sizeof(*sb), c, id, workdir, tb);
    if (sb) {
        pthread_mutex_init(&sb->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&sb->cond, &ca);
        pthread_condattr_destroy(&ca);
        sb->auto_stop_min = -1;
        sb->refresh_every = -1;
        sb->cancel[0] = sb->cancel[1] = -1;
    }
    free(base);
    free(tb);
    return sb;
}

/* ------------------------------------------------------------------------ */
/* Activity renewal (CASE-52 D)                                              */
/* ------------------------------------------------------------------------ */

/* Daytona stops a sandbox autoStopInterval minutes after the start of the
 * last request about it; a command that runs longer in one quiet request
 * (run at once, or its followed logs) would be stopped under it. So while
 * commands of a handle run, its sandbox's activity is renewed (POST
 * /sandbox/{id}/last-activity, the SDK's refresh_activity) every
 * dt_refresh_every() seconds, on a thread of the handle's. */

/* The seconds between renewals: the client option refresh_activity_s when
 * set (0: never), else DT_REFRESH_S, or a quarter of the sandbox's
 * autoStopInterval when that is shorter, or never when it is 0 (no idle
 * stop). */
static double dt_refresh_every(struct sbx_plugin_sandbox *sb)
{
    double set = sb->s.c->refresh_s;
    if (set >= 0)
        return set;
    if (sb->auto_stop_min == 0)
        return 0;
    if (sb->auto_stop_min > 0 && sb->auto_stop_min * 60.0 / 4 < DT_REFRESH_S)
        return sb->auto_stop_min * 60.0 / 4;
    return DT_REFRESH_S;
}

/* The renewal thread: a POST each refresh_every seconds while running > 0;
 * a failed one is logged (the next one may pass). */
static void *dt_activity_main(void *ud)
{
    struct sbx_plugin_sandbox *sb = ud;
    pthread_mutex_lock(&sb->lock);
    while (!sb->quit) {
        double now = cl_now();
        if (!sb->running) {
            sb->idle_wait = 1;
            pthread_cond_wait(&sb->cond, &sb->lock);
            sb->idle_wait = 0;
            continue;
        }
        if (now < sb->next_refresh) {
            struct timespec ts;
            double at = sb->next_refresh;
            ts.tv_sec = (time_t)at;
            ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&sb->cond, &sb->lock, &ts);
            continue;
        }
        pthread_mutex_unlock(&sb->lock);
        sbx_call_ctx ctx = { sizeof(ctx), cl_now() + 30, sb->cancel[0], NULL };
        cl_resp r = { 0 };
        int rc = dt_sbcall(sb->s.c, &ctx, "POST", sb->s.id, "/last-activity", NULL, CL_SAFE, &r,
                           "exec", "renew the sandbox's activity", NULL);
        if (rc < 0 || r.status / 100 != 2)
            CL_LOG(SBX_LOG_WARNING, "sandbox %s: the renewal of its activity failed (%s)",
                   sb->s.id, rc < 0 ? cl_last()->msg : "an error answer");
        cl_resp_clear(&r);
        pthread_mutex_lock(&sb->lock);
        sb->next_refresh = cl_now() + sb->refresh_every;
    }
    pthread_mutex_unlock(&sb->lock);
    return NULL;
}

/* A command of @sb's starts: the renewal runs from now on (its first POST
 * dt_refresh_every() seconds from now: the command's first request is
 * activity too). The thread is started at the first command; when it
 * cannot be, a warning, and no renewal. The thread is woken only when it
 * waits untimed (no command ran at its last look): one in a timed wait
 * finds the later next_refresh when it wakes, so commands back to back
 * wake it never. */
static void dt_activity_begin(struct sbx_plugin_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    if (sb->refresh_every < 0)
        sb->refresh_every = dt_refresh_every(sb);
    if (sb->refresh_every > 0 && sb->running++ == 0) {
        sb->next_refresh = cl_now() + sb->refresh_every;
        if (!sb->thread_started) {
            int e = pipe2(sb->cancel, O_CLOEXEC) < 0 ? errno
                    : pthread_create(&sb->thread, NULL, dt_activity_main, sb);
            if (e == 0) {
                sb->thread_started = 1;
            } else {
                CL_LOG(SBX_LOG_WARNING, "sandbox %s: no renewal of its activity while "
                       "commands run (%s): Daytona may stop it after its idle time", sb->s.id,
                       strerror(e));
                if (sb->cancel[0] >= 0) {
                    close(sb->cancel[0]);
                    close(sb->cancel[1]);
                    sb->cancel[0] = sb->cancel[1] = -1;
                }
                sb->refresh_every = 0;
                sb->running = 0;
            }
        }
        if (sb->idle_wait)
            pthread_cond_broadcast(&sb->cond);
    }
    pthread_mutex_unlock(&sb->lock);
}

/* A command of @sb's has ended (each dt_activity_begin has one). The
 * thread is not woken: at its next_refresh it finds no command running and
 * makes no renewal. */
static void dt_activity_end(struct sbx_plugin_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    if (sb->refresh_every > 0 && sb->running > 0)
        sb->running--;
    pthread_mutex_unlock(&sb->lock);
}

/* The sandbox's autoStopInterval from its Sandbox answer @j, when there. */
static void dt_auto_stop_of(struct sbx_plugin_sandbox *sb, json_object *j)
{
    int64_t m;
    if (cl_json_int(j, "autoStopInterval", &m) == 1 && m >= 0 && m < 1000000)
        sb->auto_stop_min = (int)m;
}

/* Ends the renewal thread (a renewal under way is cancelled). */
static void dt_activity_stop(struct sbx_plugin_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    sb->quit = 1;
    pthread_cond_broadcast(&sb->cond);
    int started = sb->thread_started;
    pthread_mutex_unlock(&sb->lock);
    if (!started)
        return;
    ssize_t w = write(sb->cancel[1], "x", 1);
    (void)w;
    pthread_join(sb->thread, NULL);
    close(sb->cancel[0]);
    close(sb->cancel[1]);
    sb->cancel[0] = sb->cancel[1] = -1;
    sb->thread_started = 0;
}

/* @path as the toolbox gets it (provider.h): a relative one under the
 * caller's workdir when one was set, else as it is (the toolbox resolves
 * it against its own working directory, as the sandbox's commands do). */
#define dt_abs(sb, path) cl_path_in((sb)->s.workdir, (path))

static void dt_sandbox_free(sbx_plugin_sandbox *sb)
{
    if (!sb)
        return;
    dt_activity_stop(sb);
    /* The sandbox lives on (not destroyed, not gone): the handle's idle
     * sessions are deleted, so that no shell of ours stays in it. */
    for (dt_session *s; !cl_gone_get(&sb->s.gone) && (s = dt_pool_take(sb)) != NULL; free(s))
        dt_session_delete(sb, s->id);
    dt_pool_drop(sb);
    pthread_cond_destroy(&sb->cond);
    pthread_mutex_destroy(&sb->lock);
    cl_sandbox_free(sb);
}

#define dt_refuse(error, option, value, why) \
    cl_refuse((error), DT_BACKEND, (option), (value), (why))

/* The create body (a new JSON object), or NULL with a configuration error.
 * *@create_timeout: backend option "create_timeout" (seconds; 0 = none). */
static json_object *dt_create_body(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                   const sbx_plugin_create_request *rq, double *create_timeout,
                                   sbx_error **error)
{
    *create_timeout = 0;
    static const cl_unsupported unsupported[] = { { "app_name", "Daytona has no apps" },
                                                  { NULL, NULL } };
    json_object *b = json_object_new_object();
    uint64_t set = rq->set_fields;
    /* Daytona's memory is whole GB: a limit it cannot enforce exactly (a
     * smaller or fractional one would be rounded up) is refused. */
    static const cl_limit limits[] = {
        { "cpu", 0, 0, 0, CL_LIMIT_ABOVE, "must be more than 0", NULL, NULL, NULL },
        { "memory_mb", 1024, 0, 1024, 0, "Daytona sets memory in whole GB: give a multiple of "
          "1024 MiB (the smallest is 1024)", "min_mb", NULL, "step_mb" },
        /* What the body's integers (JSON int32: cores, GB, GB, minutes)
         * can carry, the provider's own limits aside. */
        { "cpu", 1, INT_MAX, 1, 0, "Daytona takes a whole number of CPU cores, at most "
          "2147483647", NULL, "max", "step" },
        { "memory_mb", 0, INT_MAX * 1024.0, 0, 0, "Daytona takes at most 2147483647 GB of memory "
          "(2199023254528 MiB)", NULL, "max_mb", NULL },
        { "disk_mb", -DBL_MAX, INT_MAX * 1024.0, 0, 0, "Daytona takes at most 2147483647 GB of "
          "disk (2199023254528 MiB)", NULL, "max_mb", NULL },
        { "timeout_secs", -DBL_MAX, INT_MAX * 60.0, 0, 0, "Daytona takes a lifetime of at most "
          "2147483647 minutes (128849018820 s)", NULL, "max_s", NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    if (cl_refuse_options(rq, DT_BACKEND, unsupported, error) < 0
        || cl_limits_check(rq, DT_BACKEND, limits, error) < 0)
        goto fail;
    if (set & SBX_OPTION_CPU)
        json_object_object_add(b, "cpu", json_object_new_int((int)rq->cpu));
    if (set & SBX_OPTION_MEMORY_MB)
        json_object_object_add(b, "memory", json_object_new_int((int)(rq->memory_mb / 1024)));
    if ((set & SBX_OPTION_DISK_MB) && rq->disk_mb > 0)
        json_object_object_add(b, "disk", json_object_new_int((int)((rq->disk_mb + 1023) / 1024)));
    if ((set & SBX_OPTION_GPU) && rq->gpu) {
        size_t tl;
        long count;
        if (cl_gpu_parse(rq->gpu, dt_gpu_types, 8, &tl, &count) < 0) {
            dt_refuse(error, "gpu", rq->gpu,
                      "Daytona offers H100, H200, RTX-PRO-6000, RTX-4090, RTX-5090 (TYPE[:COUNT])");
            goto fail;
        }
        json_object *types = json_object_new_array();
        json_object_array_add(types, json_object_new_string_len(rq->gpu, (int)tl));
        json_object_object_add(b, "gpuType", types);
        json_object_object_add(b, "gpu", json_object_new_int((int)count));
    }
    if (rq->image) {
        json_object *bi = json_object_new_object();
        char *df = cl_printf("FROM %s\n", rq->image);
        json_object_object_add(bi, "dockerfileContent", json_object_new_string(df ? df : ""));
        json_object_object_add(bi, "contextHashes", json_object_new_array());
        json_object_object_add(b, "buildInfo", bi);
        free(df);
        if (rq->template_name || rq->snapshot_id) {
            dt_refuse(error, "image", rq->image, "give an image or a template/snapshot, not both");
            goto fail;
        }
    }
    if (rq->template_name && rq->snapshot_id) {
        dt_refuse(error, "template", rq->template_name,
                  "a template and a snapshot_id cannot both be given");
        goto fail;
    }
    if (rq->snapshot_id || rq->template_name)
        json_object_object_add(b, "snapshot",
                               json_object_new_string(rq->snapshot_id ? rq->snapshot_id
                                                                      : rq->template_name));
    if (!rq->allow_internet)
        json_object_object_add(b, "networkBlockAll", json_object_new_boolean(1));
    if (c->target)
        json_object_object_add(b, "target", json_object_new_string(c->target));
    json_object_object_add(b, "env", cl_env_object(rq->env));
    json_object_object_add(b, "labels", cl_meta_labels(ctx, DT_BACKEND, rq->expires_at));
    /* The reference's TTL mapping: only a lifetime the caller set becomes
     * ttlMinutes; otherwise the provider's idle stop bounds the sandbox. */
    if (set & SBX_OPTION_TIMEOUT_SECS) {
        double m = ceil(rq->timeout_secs / 60.0);
        json_object_object_add(b, "ttlMinutes", json_object_new_int(m < 1 ? 1 : (int)m));
    }
    json_object_object_add(b, "autoStopInterval", json_object_new_int(DT_IDLE_STOP_MIN));
    if (rq->backend_options && *rq->backend_options) {
        json_object *bo = json_tokener_parse(rq->backend_options);
        if (!bo || !json_object_is_type(bo, json_type_object)) {
            json_object_put(bo);
            dt_refuse(error, "backend_options", rq->backend_options, "must be a JSON object");
            goto fail;
        }
        json_object_object_foreach(bo, k, v) {
            if (strcmp(k, "create_timeout") == 0) {
                double t = json_object_is_type(v, json_type_int)
                               || json_object_is_type(v, json_type_double)
                           ? json_object_get_double(v) : -1;
                if (!(t > 0) || t > 86400) {
                    sbx_error *err = dt_refuse(error, "backend_options",
                                               json_object_to_json_string(v),
                                               "create_timeout must be a number of seconds "
                                               "in (0, 86400]");
                    cl_context(err, "name", "create_timeout");
                    json_object_put(bo);
                    goto fail;
                }
                *create_timeout = t;
                continue;
            }
            static const char *const allowed[] = { "name", "user", "public", "target",
                                                   "autoStopInterval", "autoArchiveInterval",
                                                   "autoDeleteInterval", "networkAllowList",
                                                   "domainAllowList", "spot", NULL };
            int ok = 0;
            for (size_t i = 0; allowed[i]; i++)
                ok |= strcmp(allowed[i], k) == 0;
            if (!ok) {
                static const char known[] = "\"create_timeout\", \"name\", \"user\", "
                                            "\"public\", \"target\", "
                                            "\"autoStopInterval\", \"autoArchiveInterval\", "
                                            "\"autoDeleteInterval\", \"networkAllowList\", "
                                            "\"domainAllowList\", \"spot\"";
                sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                         "daytona backend_options: unknown key \"%s\" (known: "
                                         "%s)", k, known);
                cl_context(err, "option", "backend_options");
                cl_context(err, "name", k);
                cl_context(err, "known", known);
                json_object_put(bo);
                goto fail;
            }
            json_object_object_add(b, k, json_object_get(v));
        }
        json_object_put(bo);
    }
    return b;
fail:
    json_object_put(b);
    return NULL;
}

static int dt_run_short(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *exit_code, const char *op, sbx_error **error);

/* A create whose outcome is unknown: its sandbox, if the provider made
 * one, is deleted once now and looked for on the reaper's thread. */
static void dt_reap_lost(struct sbx_plugin_client *c, const char *token)
{
    sbx_call_ctx now = { sizeof(now), 0, -1, NULL };
    int n = cl_reap_now(c->cl.reaper, &now, token, CL_LOST_LOOK_S);
    CL_LOG(SBX_LOG_WARNING, "create %s had no usable answer: %d sandbox(es) deleted so far, "
           "looking for %.0f s more", token, n < 0 ? 0 : n, DT_REAP_WINDOW_S);
    cl_reaper_add(c->cl.reaper, token, DT_REAP_WINDOW_S);
}

static int dt_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    if (cl_workdir_check(DT_BACKEND, rq->workdir, error) < 0)
        return -1;
    double create_timeout = 0;
    json_object *body = dt_create_body(c, ctx, rq, &create_timeout, error), *j = NULL;
    if (!body)
        return -1;
    char *url = cl_printf("%s/sandbox", c->cl.api);
    cl_resp r = { 0 };
    int rc = -1;
    struct sbx_plugin_sandbox *sb = NULL;
    /* A create carries the create token in its labels: safe to repeat
     * only in the sense that an orphan can be found; send it once. When
     * its outcome is unknown (no answer in time, or a 5xx), the sandbox it
     * may have made is looked for by the token and deleted, now and for a
     * while on the reaper's thread (CASE-20). */
    const char *bs = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    cl_req crq = { .method = "POST", .url = url, .body = bs,
                   .body_len = strlen(bs), .idempotent = CL_UNSAFE, .secs = create_timeout,
                   .what = "create the sandbox" };
    if (!url || cl_request(c->cl.http, ctx, &crq, &r, op, error) < 0) {
        if (url && ctx && ctx->create_token)
            dt_reap_lost(c, ctx->create_token);
        goto out;
    }
    if (r.maybe_acted && ctx && ctx->create_token)
        dt_reap_lost(c, ctx->create_token);
    if (r.status != 200 && r.status != 201) {
        /* A 404 names a snapshot that is not there: a bad option. */
        cl_fail_status(c->cl.http, error, r.status == 404 ? SBX_ERROR_CONFIGURATION
                                                       : CL_CODE_BY_STATUS,
                       &r, op, "create the sandbox");
        goto out;
    }
    j = cl_resp_json(&r, op, "create the sandbox", error);
    const char *id = j ? cl_json_str(j, "id") : NULL;
    const char *tb = j ? cl_json_str(j, "toolboxProxyUrl") : NULL;
    if (!id || !tb) {
        if (j)
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op,
                    "daytona create answered without an id or a toolboxProxyUrl");
        goto out;
    }
    sb = dt_sandbox_new(c, id, tb, rq->workdir && *rq->workdir ? rq->workdir : NULL);
    if (!sb || cl_ports_from_request(&sb->s, rq, op, error) < 0) {
        sb = cl_create_undo(sb, c, dt_delete, id, 0, dt_sandbox_free, op, error);
        goto out;
    }
    dt_auto_stop_of(sb, j);
    if ((strcmp(dt_state(j), "started") != 0 && dt_wake(sb, ctx, op, error) < 0)
        || (sb->s.workdir && cl_make_workdir(sb, dt_run_short, ctx, DT_BACKEND, sb->s.workdir, op,
                                           error) < 0)) {
        sb = cl_create_undo(sb, c, dt_delete, id, 1, dt_sandbox_free, op, error);
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

static int dt_destroy(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (cl_sandbox_destroy(&sb->s, sb->s.c, dt_delete, ctx, error) < 0)
        return -1;
    dt_pool_drop(sb);   /* deleted with the sandbox */
    return 0;
}

CL_ITEM_IS_ALIVE(dt_is_alive, "sandbox", "state", dt_destroyed)

/* {"version":1,"sandbox_id":ID[,"workdir":DIR],"toolbox":URL}: no
 * credential, no env. */
static char *dt_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, DT_BACKEND, DT_STATE_VERSION, "sandbox_id", error);
    if (!j)
        return NULL;
    size_t tl = strlen(sb->s.plane) - strlen(sb->s.id) - 1;
    json_object_object_add(j, "toolbox", json_object_new_string_len(sb->s.plane, (int)tl));
    cl_ports_to_state(&sb->s, j);
    return cl_state_end(j, error);
}

static int dt_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    static const cl_resume_spec spec = { DT_BACKEND, DT_STATE_VERSION, "sandbox_id", dt_get,
                                         NULL, NULL, NULL };  /* any state: woken on use */
    const char *op = "resume";
    const char *id = NULL;
    json_object *data = NULL;
    json_object *j = cl_resume_get(client, ctx, state_json, &spec, &data, &id, error);
    int rc = -1;
    if (!j)
        return -1;
    json_object *labels = cl_json_path(j, "labels", NULL);
    const char *be = cl_json_str(labels, CL_META_BACKEND);
    const char *tb = cl_json_str(j, "toolboxProxyUrl");
    if (!be || strcmp(be, DT_BACKEND) != 0) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "daytona sandbox %s was not made by libsbx (no %s=%s label)",
                                 id, CL_META_BACKEND, DT_BACKEND);
        cl_context(err, "sandbox_id", id);
        goto out;
    }
    if (!tb)
        tb = cl_json_str(data, "toolbox");
    const char *wd = cl_json_str(data, "workdir");
    struct sbx_plugin_sandbox *sb = tb ? dt_sandbox_new(client, id, tb,
                                                        cl_workdir_ok(wd) ? wd : NULL)
                                       : NULL;
    if (!sb) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (cl_ports_from_state(&sb->s, data, DT_BACKEND, op, error) < 0) {
        dt_sandbox_free(sb);
        goto out;
    }
    dt_auto_stop_of(sb, j);
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(j);
    json_object_put(data);
    return rc;
}

/* Exposed ports: Daytona serves every port of a sandbox at its preview
 * link, GET /sandbox/{id}/ports/{port}/preview-url -> {sandboxId, url,
 * token}; the library maps the ports exposed and asks for the link when
 * one is resolved. The token (the x-daytona-preview-token a private
 * sandbox's link asks for) is a secret: it is dropped at once, never
 * logged, stored or put in an error. */
static char *dt_resolve_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                             sbx_error **error)
{
    const char *op = "resolve_port";
    if (cl_port_resolvable(&sb->s, port, error) < 0)
        return NULL;
    char sfx[48];
    snprintf(sfx, sizeof(sfx), "/ports/%u/preview-url", port);
    char *url = cl_item_url(sb->s.c->cl.api, "sandbox", sb->s.id, sfx);
    long st = 0;
    json_object *j = url ? cl_get_json(sb->s.c->cl.http, ctx, url, &st, op, "get the preview link",
                                       error) : NULL;
    free(url);
    char *out = NULL;
    if (!j) {
        if (st == 404) {
            dt_fail_gone(sb, error, op);
        } else if (error && !*error) {
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                    "daytona: the preview link of port %u could not be read (HTTP %ld)", port,
                    st);
        }
        return NULL;
    }
    const char *link = cl_json_str(j, "url");
    if (!link || (strncmp(link, "https://", 8) != 0 && strncmp(link, "http://", 7) != 0)) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                "daytona answered the preview link of port %u without a url", port);
    } else {
        out = cl_host_strdup(link, op, error);
    }
    json_object_put(j);     /* the token goes with it */
    return out;
}

static int dt_stop(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    return cl_sandbox_call(&sb->s, sb->s.c->cl.http, ctx, "POST", sb->s.c->cl.api, "sandbox",
                           "/stop", NULL, CL_SAFE, 0, "stop", "stop the sandbox", error);
}

static int dt_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (dt_check(sb, "start", error) < 0)
        return -1;
    return dt_wake(sb, ctx, "start", error);
}

static char *dt_snapshot(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "snapshot";
    char name[48] = "sbx-snap-";
    cl_random_hex(name + 9, 12);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "name", json_object_new_string(name));
    json_object_object_add(b, "includeMemory", json_object_new_boolean(0));
    char *out = NULL;
    if (cl_sandbox_call(&sb->s, sb->s.c->cl.http, ctx, "POST", sb->s.c->cl.api, "sandbox",
                        "/snapshot", b, CL_UNSAFE, 0, op, "snapshot the sandbox", error) == 0)
        out = cl_host_strdup(name, op, error);
    json_object_put(b);
    return out;
}

CL_DESTROY_BY_ID(dt_destroy_by_id, dt_delete)

/* ------------------------------------------------------------------------ */
/* Files                                                                     */
/* ------------------------------------------------------------------------ */

static sbx_error *dt_path_error(sbx_error **error, const char *op, const char *path)
{
    sbx_error *err = error ? *error : NULL;
    if (err)
        cl_context(err, "path", path);
    return err;
}

/* A GET of the toolbox's files route @route ("/files/download?path=") on
 * @path (dt_abs): 0 with the 2xx answer in @r (or sunk by @rq), else -1
 * with the error naming @path, not_found "no such @missing in the sandbox:
 * PATH" for a 404. */
static int dt_files_get(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                        const char *route, const char *path, cl_req *rq, cl_resp *r,
                        const char *missing, const char *op, sbx_error **error)
{
    char *q = cl_path_query(route, sb->s.workdir, path);
    if (!q) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int rc = dt_toolbox(sb, ctx, rq, q, r, op, error);
    free(q);
    if (rc < 0 && r->status == 404)
        cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such %s in the sandbox: %s", missing, path);
    if (rc < 0)
        dt_path_error(error, op, path);
    return rc;
}

static int dt_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    cl_req rq = { .method = "GET", .sink = cl_fd_sink, .sink_ud = &fd, .idempotent = CL_SAFE,
                  .what = "download the file" };
    cl_resp r = { 0 };
    int rc = dt_files_get(sb, ctx, "/files/download?path=", path, &rq, &r, "file", "read_file",
                          error);
    cl_resp_clear(&r);
    return rc;
}

/* Uploads the bytes of @fd to @path (multipart field "file"). With @spool
 * set, the bytes are also kept in an unlinked host file (tmpfile(3)) while
 * they are sent, so that the upload is sent again after the sandbox was
 * started (a stopped sandbox answers before it reads the body); without
 * it (or when the host file cannot be made or written: a warning), a
 * stopped sandbox fails the upload. Only a command's stdin is spooled. */
static int dt_upload(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                     int fd, int spool, const char *op, sbx_error **error)
{
    cl_form f = { 0 };
    char *q = cl_path_query("/files/upload?path=", NULL, path);
    int rc = -1;
    if (q && cl_form_begin(&f, NULL, "file", "upload") == 0) {
        cl_fd_body m;
        cl_fd_body_init(&m, f.head.data, f.head.len, f.tail, f.tail_len, fd, spool, "stdin", op);
        cl_req rq = { .method = "POST", .content_type = f.ctype, .source = cl_fd_body_read,
                      .source_ud = &m, .source_len = -1, .idempotent = CL_UNSAFE,
                      .what = "upload the file" };
        cl_resp r = { 0 };
        rc = dt_toolbox_rw(sb, ctx, &rq, q, &r, m.spool ? cl_fd_body_rewind : NULL, &m, 1, op,
                           error);
        if (rc < 0)
            dt_path_error(error, op, path);
        cl_resp_clear(&r);
        cl_fd_body_clear(&m);
    } else {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    }
    cl_form_clear(&f);
    free(q);
    return rc;
}

/* Runs @cmd through /process/execute (short housekeeping commands: chmod,
 * kill, rm); *@exit_code gets its exit code. */
static int dt_run_short(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *exit_code, const char *op, sbx_error **error)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "command", json_object_new_string(cmd));
    json_object_object_add(b, "timeout", json_object_new_int(60));
    const char *body = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = body, .body_len = strlen(body),
                  .idempotent = CL_SAFE, .what = "run a command" };
    cl_resp r = { 0 };
    int rc = dt_toolbox(sb, ctx, &rq, "/process/execute", &r, op, error);
    json_object *j = rc == 0 ? cl_resp_json(&r, op, "run a command", error) : NULL;
    int64_t code = -1;
    if (rc == 0 && (!j || cl_json_int(j, "exitCode", &code) != 1)) {
        if (j)
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "daytona execute answered no exitCode");
        rc = -1;
    }
    if (rc == 0)
        *exit_code = (int)code;
    json_object_put(j);
    json_object_put(b);
    cl_resp_clear(&r);
    return rc;
}

/* dt_upload() unspooled, as a cl_upload_fn. */
static int dt_upload_direct(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                            const char *path, int fd, const char *shown, const char *op,
                            sbx_error **error)
{
    (void)shown;
    return dt_upload(sb, ctx, path, fd, 0, op, error);
}

static int dt_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                         uint32_t mode, sbx_error **error)
{
    /* The upload takes no mode: it is set after, by a command, whose JSON
     * request cannot carry a path that is not UTF-8 text. */
    if (cl_json_text_check(NULL, path, "write_file", error) < 0)
        return -1;
    return cl_write_file(sb, ctx, sb->s.workdir, path, fd, mode, dt_upload_direct, dt_run_short,
                         error);
}

static int dt_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "list the directory" };
    cl_resp r = { 0 };
    if (dt_files_get(sb, ctx, "/files?path=", path, &rq, &r, "directory", op, error) < 0) {
        cl_resp_clear(&r);
        return -1;
    }
    json_object *j = cl_resp_json(&r, op, "list the directory", error);
    cl_resp_clear(&r);
    if (!j)
        return -1;
    cl_file_infos_json(j, "isDir", 0, "permissions", fn, ud);
    json_object_put(j);
    return 0;
}

static int dt_stat_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                        sbx_plugin_file_info *info, sbx_error **error)
{
    const char *op = "stat_file";
    cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "look at the file" };
    cl_resp r = { 0 };
    if (dt_files_get(sb, ctx, "/files/info?path=", path, &rq, &r, "file", op, error) < 0) {
        cl_resp_clear(&r);
        return -1;
    }
    json_object *j = cl_resp_json(&r, op, "look at the file", error);
    cl_resp_clear(&r);
    if (!j)
        return -1;
    *info = cl_file_info_json(j, "isDir", 0, "permissions");
    info->name = cl_stat_name(info->name);
    json_object_put(j);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

/* Demultiplexes the followed logs: \x01\x01\x01 switches to stdout,
 * \x02\x02\x02 to stderr; up to two bytes of a possible marker are held
 * back across chunks. */
typedef struct dt_demux {
    dt_proc *p;
    int stream;             /* 1 or 2 */
    char held[2];
    size_t nheld;
} dt_demux;

static int dt_demux_emit(dt_demux *d, const char *s, size_t n)
{
    return n ? cl_proc_output(&d->p->base, d->stream, s, n) : 0;
}

static int dt_demux_sink(void *ud, const char *p, size_t n)
{
    dt_demux *d = ud;
    char tmp[65536 + 2];
    while (n) {
        size_t take = n > 65536 ? 65536 : n;
        memcpy(tmp, d->held, d->nheld);
        memcpy(tmp + d->nheld, p, take);
        size_t len = d->nheld + take, start = 0, i = 0;
        p += take;
        n -= take;
        d->nheld = 0;
        while (i + 3 <= len) {
            char ch = tmp[i];
            if ((ch == 1 || ch == 2) && tmp[i + 1] == ch && tmp[i + 2] == ch) {
                if (dt_demux_emit(d, tmp + start, i - start) < 0)
                    return -1;
                d->stream = ch;
                i += 3;
                start = i;
            } else {
                i++;
            }
        }
        /* The last one or two bytes may begin a marker. */
        size_t keep = 0;
        if (len - start >= 1 && (tmp[len - 1] == 1 || tmp[len - 1] == 2)) {
            keep = 1;
            if (len - start >= 2 && tmp[len - 2] == tmp[len - 1])
                keep = 2;
        }
        if (dt_demux_emit(d, tmp + start, len - start - keep) < 0)
            return -1;
        memcpy(d->held, tmp + len - keep, keep);
        d->nheld = keep;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Toolbox sessions                                                          */
/* ------------------------------------------------------------------------ */

/* Deletes the toolbox session @sid (with any command of ours still running
 * in it), without waking a stopped sandbox: best effort, 5 s at most. */
static void dt_session_delete(struct sbx_plugin_sandbox *sb, const char *sid)
{
    char *url = cl_printf("%s/process/session/%s", sb->s.plane, sid);
    cl_req rq = { .method = "DELETE", .url = url, .idempotent = CL_SAFE,
                  .secs = 5, .what = "delete the session" };
    cl_resp r = { 0 };
    if (url)
        cl_request(sb->s.c->cl.http, NULL, &rq, &r, "exec", NULL);
    free(url);
    cl_resp_clear(&r);
}

/* An idle session of the handle's, or NULL when it has none. */
static dt_session *dt_pool_take(struct sbx_plugin_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    dt_session *s = sb->idle;
    if (s)
        sb->idle = s->next;
    pthread_mutex_unlock(&sb->lock);
    return s;
}

/* Gives back a session whose command has ended. */
static void dt_pool_put(struct sbx_plugin_sandbox *sb, dt_session *s)
{
    pthread_mutex_lock(&sb->lock);
    s->next = sb->idle;
    sb->idle = s;
    pthread_mutex_unlock(&sb->lock);
}

/* Forgets the idle sessions (no request): the sandbox was started again,
 * so its daemon, which held them, is a new one. */
static void dt_pool_drop(struct sbx_plugin_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    dt_session *s = sb->idle;
    sb->idle = NULL;
    pthread_mutex_unlock(&sb->lock);
    while (s) {
        dt_session *next = s->next;
        free(s);
        s = next;
    }
}

/* A new toolbox session (POST /process/session), or NULL with this
 * thread's last error set. */
static dt_session *dt_session_open(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                                   const char *op)
{
    dt_session *s = calloc(1, sizeof(*s));
    if (!s) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    memcpy(s->id, "sbx-session-", 12);
    cl_random_hex(s->id + 12, 12);
    json_object *body = json_object_new_object();
    json_object_object_add(body, "sessionId", json_object_new_string(s->id));
    const char *bs = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = bs, .body_len = strlen(bs),
                  .idempotent = CL_SAFE, .what = "create a session" };
    cl_resp r = { 0 };
    int rc = dt_toolbox(sb, ctx, &rq, "/process/session", &r, op, NULL);
    json_object_put(body);
    cl_resp_clear(&r);
    if (rc < 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */
/* ------------------------------------------------------------------------ */

/* The command line the session's shell runs: the command's environment
 * (the marker, then the per-call overlay) as assignments in front of
 * "exec /bin/sh -c SCRIPT" in a subshell, so that none of it stays in the
 * session's shell, which later commands reuse; its stdin the uploaded
 * file, removed as soon as it is open, or /dev/null:
 *
 *   { :; ( SBX_EXEC_ID=TAG K='V' exec /bin/sh -c 'SCRIPT' sh ) 2>&3 3>&-; }
 *     < /dev/null 3>&2 2>/dev/null
 *
 * (one line; "rm -f -- 'FILE';" in place of ":" and that file as the
 * stdin with stdin). The sh is what keeps the command out of the
 * session's shell: the daemon runs the line in that shell itself (it
 * sources it), where the script's exit, cd or assignments would end or
 * change the session; and, exec'd with the marker in its environment, it
 * is a process exec_kill finds (the subshell's fork alone would lack the
 * marker in its /proc environ, and $$ would name the session's shell: a
 * timeout would kill the command's children and leave the rest of its
 * script running). The subshell is the fork the session's shell makes for
 * any program it runs, and its exec is the sh: one process, as a bare
 * "/bin/sh -c" would be (bash forks for either; dash vforks a bare
 * program and forks a subshell, a few tenths of a millisecond: see
 * bench/README.md). The session's shell's own stderr is /dev/null
 * for the line, the command's is the session's (fd 3, moved back to 2 in
 * the subshell and closed there): a shell reports a foreground child
 * that a signal ended ("Terminated", "Killed") on its stderr, which the
 * daemon keeps as the command's, and dash writes it with the child's
 * redirections in place, so only a redirection made in the child (the
 * subshell's) gives the command its stderr and leaves the report
 * elsewhere. The ":" (or the rm) keeps the braces' body from being the
 * subshell alone: dash's parser makes "{ ( ... ) R1; } R2" the subshell
 * "( ... ) R2", dropping R1. An argv command keeps the sh -c as well (see
 * the top of the file: a bare program in the session's bash is not the
 * program sh's "exec" runs, and a script without #! would run unmarked).
 * A new string. */
static char *dt_command_line(dt_proc *p, const char *stdin_path)
{
    cl_buf b = { 0 };
    char *qi = cl_shell_quote(stdin_path ? stdin_path : "/dev/null");
    int bad = !qi || (stdin_path ? cl_buf_printf(&b, "{ rm -f -- %s; ( ", qi)
                                 : cl_buf_printf(&b, "{ :; ( ")) < 0;
    bad |= cl_buf_printf(&b, CL_EXEC_MARK "=%s ", p->tag) < 0;
    for (size_t i = 0; p->env && p->env[i] && !bad; i++) {
        const char *eq = strchr(p->env[i], '=');
        if (!eq)
            continue;
        char *q = cl_shell_quote(eq + 1);
        bad |= !q || cl_buf_printf(&b, "%.*s=%s ", (int)(eq - p->env[i]), p->env[i], q) < 0;
        free(q);
    }
    char *qs = cl_shell_quote(p->script);
    bad |= !qs || cl_buf_printf(&b, "exec /bin/sh -c %s sh ) 2>&3 3>&-; } < %s 3>&2 2>/dev/null",
                                qs, qi) < 0;
    free(qs);
    free(qi);
    return cl_buf_take(&b, bad);
}

/* U+FFFD in UTF-8: what the daemon's JSON has in place of every byte that
 * is not UTF-8 (Go's encoding/json), and also what a command may write. */
#define DT_REPLACEMENT "\xef\xbf\xbd"

/* The answer of a synchronous session exec: its exitCode in *@code and,
 * when neither stdout nor stderr holds U+FFFD (so each is the command's
 * bytes exactly), both to the host. 1 when one of them holds U+FFFD (a
 * byte that is not UTF-8 may have been replaced: the output is to be read
 * from the command's logs instead, nothing was written), 0, or -1 with
 * the thread's last error set. */
static int dt_exec_answer(dt_proc *p, json_object *j, int *code)
{
    const char *op = "exec";
    int64_t ec;
    json_object *streams[3] = { NULL, cl_json_path(j, "stdout", NULL),
                                cl_json_path(j, "stderr", NULL) };
    if (cl_json_int(j, "exitCode", &ec) != 1 || !json_object_is_type(streams[1], json_type_string)
        || !json_object_is_type(streams[2], json_type_string)) {
        cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "daytona session exec gave no exitCode, "
                "stdout and stderr");
        return -1;
    }
    *code = (int)ec;
    for (int fd = 1; fd <= 2; fd++)
        if (memmem(json_object_get_string(streams[fd]),
                   (size_t)json_object_get_string_len(streams[fd]), DT_REPLACEMENT, 3))
            return 1;
    for (int fd = 1; fd <= 2; fd++) {
        size_t n = (size_t)json_object_get_string_len(streams[fd]);
        if (n)
            cl_proc_output(&p->base, fd, json_object_get_string(streams[fd]), n);
    }
    return 0;
}

/*
 * After a request of a command's failed with its connection cut (no HTTP
 * status), which says nothing of why: the sandbox may have been deleted
 * or stopped under the command (the daemon that held the request dies
 * with it). Its state is read: gone (404) makes @base's failure the gone
 * error (reason=gone, sandbox_id; its outcome unknown when the cut one's
 * was: the command ran for a while); a state other than "started" is added
 * to the failure's context as "state" (CASE-53: it says stopped).
 */
static void dt_exec_cut(struct sbx_plugin_sandbox *sb, cl_proc *base, const char *op)
{
    const cl_last_error *l = cl_last();
    if (l->code != SBX_ERROR_CONNECTION || l->http_status != 0 || dt_is_gone(sb) || !sb->s.c)
        return;
    int unknown = l->unknown;
    sbx_call_ctx c2 = { sizeof(c2), cl_now() + 30, -1, NULL };
    long status = 0;
    json_object *v = dt_get(sb->s.c, &c2, sb->s.id, &status, op, NULL);
    if (!v && status == 404) {
        dt_fail_gone(sb, NULL, op);
        if (unknown)
            cl_outcome_unknown(NULL);
        cl_proc_fail_last(base);
    } else if (v && strcmp(dt_state(v), "started") != 0) {
        cl_proc_context(base, "state", dt_state(v));
    }
    json_object_put(v);
}

/* A command's followed logs, read again from their start after a cut: the
 * first @consumed bytes were demultiplexed already, and are skipped. */
typedef struct dt_follow {
    dt_demux d;
    uint64_t consumed;      /* log bytes demultiplexed so far */
    uint64_t pos;           /* log bytes of this reading so far */
    int failed;             /* the host took no more output (no cut) */
} dt_follow;

static int dt_follow_sink(void *ud, const char *data, size_t n)
{
    dt_follow *f = ud;
    if (f->pos < f->consumed) {
        uint64_t skip = f->consumed - f->pos;
        if (skip > n)
            skip = n;
        f->pos += skip;
        data += skip;
        n -= (size_t)skip;
    }
    if (!n)
        return 0;
    f->pos += n;
    f->consumed += n;
    if (dt_demux_sink(&f->d, data, n) < 0) {
        f->failed = 1;
        return -1;
    }
    return 0;
}

/* 1 when the request that just failed (@r) was cut on the path: a
 * connection error without an answer after it may have reached the
 * daemon, not a cancel of ours nor a refused connection. */
static int dt_was_cut(cl_proc *base, const cl_resp *r)
{
    const cl_last_error *l = cl_last();
    return l->code == SBX_ERROR_CONNECTION && l->http_status == 0 && r->lost
           && !cl_proc_stopping(base);
}

/*
 * A request about a running command was cut, or answered "not started":
 * the sandbox's state says which. 0 when it is "started" (the path cut
 * the request; the command runs on and is followed again). Otherwise -1
 * with the error as this thread's last: gone (404), or, any other state,
 * an execution failure "stopped while the command ran" whose outcome is
 * unknown (the command ended with the sandbox; CASE-52 D, CASE-53), the
 * state in dt_wake_state (the failure's context "state"); or the GET's
 * own error.
 */
static int dt_exec_lost(struct sbx_plugin_sandbox *sb, const char *op)
{
    sbx_call_ctx c2 = { sizeof(c2), cl_now() + 30, -1, NULL };
    long status = 0;
    json_object *v = dt_get(sb->s.c, &c2, sb->s.id, &status, op, NULL);
    if (!v) {
        if (status == 404) {
            dt_fail_gone(sb, NULL, op);
            cl_outcome_unknown(NULL);
        }
        return -1;
    }
    const char *state = dt_state(v);
    int rc = 0;
    if (strcmp(state, "started") != 0) {
        cl_outcome_unknown(cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op,
                                   "daytona sandbox %s was stopped while the command ran (its "
                                   "state is now %s): the command ended with it and its result "
                                   "is lost", sb->s.id, state));
        snprintf(dt_wake_state, sizeof dt_wake_state, "%s", state);
        rc = -1;
    }
    json_object_put(v);
    return rc;
}

/* The id of @p's command in the session @sid, after the request that
 * started it was cut (@cut: how): GET /process/session/{sid} lists the
 * session's commands, and the one whose line carries @p's mark is it. A
 * new string; NULL with the error as this thread's last when the GET
 * failed, or, *@unlisted set, when the session does not list it (the
 * daemon never had the request: a connection error, outcome unknown). */
static char *dt_find_command(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, dt_proc *p,
                             const char *sid, const char *cut, int *unlisted, const char *op)
{
    *unlisted = 0;
    char *path = cl_printf("/process/session/%s", sid);
    char *mark = cl_printf(CL_EXEC_MARK "=%s ", p->tag);
    cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "list the session's commands" };
    cl_resp r = { 0 };
    char *id = NULL;
    if (!path || !mark) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    } else if (dt_toolbox_nowake(sb, ctx, &rq, path, &r, op, NULL) == 0) {
        json_object *j = cl_resp_json(&r, op, "list the session's commands", NULL);
        json_object *cmds = j ? cl_json_path(j, "commands", NULL) : NULL;
        size_t n = json_object_is_type(cmds, json_type_array) ? json_object_array_length(cmds)
                                                              : 0;
        for (size_t i = 0; i < n && !id; i++) {
            json_object *e = json_object_array_get_idx(cmds, i);
            const char *line = cl_json_str(e, "command"), *cid = cl_json_str(e, "id");
            if (line && cid && strstr(line, mark))
                id = strdup(cid);
        }
        if (j && !id) {
            *unlisted = 1;
            cl_outcome_unknown(cl_fail(NULL, SBX_ERROR_CONNECTION, op, "daytona: the request "
                                       "that started the command was cut (%s) and its session "
                                       "does not list it: its outcome is unknown", cut));
        }
        json_object_put(j);
    }
    cl_resp_clear(&r);
    free(path);
    free(mark);
    return id;
}

/*
 * The command's worker: its stdin uploaded (when given), then
 * POST /process/session/{sid}/exec {"command", "runAsync": true} in an
 * idle session of the handle's (or a new one), the logs followed to the
 * command's end, and GET .../command/{cmdId} for its exitCode: three
 * requests for a command without stdin once the handle has a session.
 * When nothing reads the output before the command ends
 * (SBX_PLUGIN_EXEC_OUTPUT_AT_END) and there is no stdin, one request
 * instead: the exec with "runAsync": false, whose answer carries stdout,
 * stderr and exitCode once the command has ended. That answer is JSON
 * text, in which the daemon (Go's encoding/json) has put U+FFFD in place
 * of each byte that is not UTF-8: when neither stream holds U+FFFD it is
 * the command's output exactly; when one does, the output is read once
 * from the command's logs (GET .../command/{cmdId}/logs: the log's raw
 * bytes, each piece prefixed by its stream's marker), a second request
 * for such output only. The session goes back to the handle's pool when
 * its command has ended, and is deleted when that is not known.
 * A request the path cuts while the command runs (CASE-52: a proxy or NAT
 * that closes a quiet connection) never sends the command again: the exec
 * run at once is found in its session by its mark (dt_find_command), and
 * then, as a streamed one, its logs are followed again from where they
 * were cut, as often as they are cut, once its sandbox is seen "started"
 * (a command its session does not list never reached the daemon: it is
 * sent again, twice at most);
 * a sandbox stopped under it fails the exec (dt_exec_lost).
 */
static int dt_exec_run(cl_proc *base)
{
    dt_proc *p = (dt_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    char *stdin_path = NULL, *cmd = NULL, *path = NULL, *cmd_id = NULL;
    dt_wake_state[0] = '\0';
    json_object *j = NULL, *eb = NULL;
    int code = -1;
    dt_session *s = NULL;       /* the session a command of ours may run in */
    cl_resp r = { 0 };
    dt_activity_begin(sb);

    /* Its stdin, uploaded first (spooled, so that it can be sent again
     * after a wake). */
    if (p->stdin_fd >= 0) {
        stdin_path = cl_printf("/tmp/.%s.in", p->tag);
        if (!stdin_path || dt_upload(sb, &ctx, stdin_path, p->stdin_fd, 1, op, NULL) < 0)
            goto fail;
    }
    int at_end = (p->flags & SBX_PLUGIN_EXEC_OUTPUT_AT_END) && !stdin_path;
    cmd = dt_command_line(p, stdin_path);
    if (!cmd) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    eb = json_object_new_object();
    json_object_object_add(eb, "command", json_object_new_string(cmd));
    json_object_object_add(eb, "runAsync", json_object_new_boolean(!at_end));
    const char *ebs = json_object_to_json_string_ext(eb, JSON_C_TO_STRING_PLAIN);
    /* The command, in an idle session or a new one; a pooled session the
     * daemon no longer has (a 404 about it: the command did not run) is
     * dropped and the next one tried. */
    for (int resent = 0;;) {
        s = dt_pool_take(sb);
        int pooled = s != NULL;
        if (!s && !(s = dt_session_open(sb, &ctx, op)))
            goto fail;
        path = cl_printf("/process/session/%s/exec", s->id);
        cl_req rq = { .method = "POST", .body = ebs, .body_len = strlen(ebs),
                      .idempotent = CL_UNSAFE, .what = "start the command" };
        int rc = path ? dt_toolbox(sb, &ctx, &rq, path, &r, op, NULL) : -1;
        free(path);
        path = NULL;
        if (rc == 0)
            break;
        if (r.status == 404 && !dt_is_gone(sb) && dt_session_lost(sb->s.c->cl.http, &r)) {
            free(s);
            s = NULL;
            if (pooled)
                continue;
        }
        if (rc < 0 && dt_was_cut(base, &r)) {
            /* Cut on the path (a quiet command run at once): the command
             * may run on. It is looked for in its session and followed;
             * it is never sent again. Only a request the daemon never had
             * (its session does not list the command: a kept-alive
             * connection that had died, which libcurl would have re-sent
             * by itself) is sent again, twice at most. */
            char why[256];
            snprintf(why, sizeof why, "%.250s", cl_last()->msg);
            CL_LOG(SBX_LOG_DEBUG, "daytona: the request running command %s was cut (%s): "
                   "looking for it in session %s", p->tag, why, s->id);
            int unlisted = 0;
            if (dt_exec_lost(sb, op) < 0)
                goto fail;
            cmd_id = dt_find_command(sb, &ctx, p, s->id, why, &unlisted, op);
            if (cmd_id)
                goto follow;
            if (unlisted && resent++ < 2) {
                CL_LOG(SBX_LOG_DEBUG, "daytona: session %s never had command %s: sending it "
                       "again", s->id, p->tag);
                dt_pool_put(sb, s);
                s = NULL;
                continue;
            }
        }
        goto fail;
    }
    j = cl_resp_json(&r, op, "start the command", NULL);
    if (j && at_end) {
        int rc = dt_exec_answer(p, j, &code);
        const char *id = rc == 1 ? cl_json_str(j, "cmdId") : NULL;
        if (rc == 1 && !id)
            cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "daytona session exec gave no cmdId");
        if (rc == 1 && id) {
            /* The output as bytes: the command's log (it has ended). */
            path = cl_printf("/process/session/%s/command/%s/logs", s->id, id);
            cl_req rq2 = { .method = "GET", .idempotent = CL_SAFE,
                           .what = "get the command's output" };
            dt_demux d = { p, 1, { 0, 0 }, 0 };
            if (!path)
                cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            else if (dt_toolbox(sb, &ctx, &rq2, path, &r, op, NULL) == 0
                     && dt_demux_sink(&d, r.body.data ? r.body.data : "", r.body.len) == 0) {
                if (d.nheld)
                    cl_proc_output(&p->base, d.stream, d.held, d.nheld);
                rc = 0;
            }
        }
        if (rc != 0)
            goto fail;
        dt_pool_put(sb, s);
        s = NULL;
        goto ended;
    }
    const char *id = j ? cl_json_str(j, "cmdId") : NULL;
    if (!id) {
        if (j)
            cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "daytona session exec gave no cmdId");
        goto fail;
    }
    cmd_id = strdup(id);
follow:
    /* Output as it comes; the logs followed again from where they were
     * when the path cuts them (its sandbox still "started"), never the
     * command sent again. Three cuts in a row within 1 s of their start
     * and with no new byte fail the exec (outcome unknown). Nothing here
     * wakes the sandbox: one that was stopped ended the command. */
    path = cmd_id ? cl_printf("/process/session/%s/command/%s/logs?follow=true", s->id, cmd_id)
                  : NULL;
    if (!path) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    dt_follow f = { { p, 1, { 0, 0 }, 0 }, 0, 0, 0 };
    for (int quick = 0;;) {
        cl_req rq3 = { .method = "GET", .sink = dt_follow_sink, .sink_ud = &f,
                       .idempotent = CL_UNSAFE, .what = "follow the command's output" };
        uint64_t before = f.consumed;
        double t0 = cl_now();
        f.pos = 0;
        if (dt_toolbox_nowake(sb, &ctx, &rq3, path, &r, op, NULL) == 0)
            break;
        if (dt_not_started(sb->s.c->cl.http, &r)) {
            dt_exec_lost(sb, op);
            goto fail;
        }
        if (f.failed || !dt_was_cut(base, &r))
            goto fail;
        if (f.consumed > before || cl_now() - t0 >= 1.0) {
            quick = 0;
        } else if (++quick >= 3) {
            cl_outcome_unknown(NULL);
            goto fail;
        }
        char why[256];
        snprintf(why, sizeof why, "%.250s", cl_last()->msg);
        if (dt_exec_lost(sb, op) < 0)
            goto fail;
        CL_LOG(SBX_LOG_DEBUG, "daytona: the output of command %s was cut (%s): following it "
               "again", cmd_id, why);
    }
    if (f.d.nheld)
        cl_proc_output(&p->base, f.d.stream, f.d.held, f.d.nheld);
    /* Its exit code (the logs end with the command). */
    free(path);
    path = cl_printf("/process/session/%s/command/%s", s->id, cmd_id);
    for (double pause = 0.02;; pause = pause < 0.5 ? pause * 2 : pause) {
        cl_req rq4 = { .method = "GET", .idempotent = CL_SAFE, .what = "get the command" };
        json_object_put(j);
        j = NULL;
        if (!path || dt_toolbox_nowake(sb, &ctx, &rq4, path, &r, op, NULL) < 0) {
            if (path && dt_not_started(sb->s.c->cl.http, &r))
                dt_exec_lost(sb, op);
            goto fail;
        }
        j = cl_resp_json(&r, op, "get the command", NULL);
        if (!j)
            goto fail;
        int64_t ec;
        if (cl_json_int(j, "exitCode", &ec) == 1) {
            code = (int)ec;
            break;
        }
        if (cl_sleep(pause, base->stop_fd))
            goto fail;
    }
    /* The command has ended: its session is free for the next one. */
    dt_pool_put(sb, s);
    s = NULL;
ended:
    if (code < 0 || code > 255)
        code = code < 0 ? 255 : code & 0xff;
    goto out;
fail:
    /* The error of the call that failed is this thread's last (cloud.h);
     * a sandbox in a state that cannot run commands names it. */
    cl_proc_fail_last(base);
    if (dt_wake_state[0])
        cl_proc_context(base, "state", dt_wake_state);
    dt_exec_cut(sb, base, op);
    code = -1;
    if (stdin_path && !dt_is_gone(sb)) {
        /* The command may not have run to remove its stdin file. */
        char *rm = cl_printf("rm -f /tmp/.%s.in", p->tag);
        int ignored;
        sbx_call_ctx c2 = { sizeof(c2), cl_now() + 30, -1, NULL };
        if (rm)
            dt_run_short(sb, &c2, rm, &ignored, op, NULL);
        free(rm);
    }
out:
    if (s) {
        /* A command of ours may still run in it. */
        if (!dt_is_gone(sb))
            dt_session_delete(sb, s->id);
        free(s);
    }
    if (code < 0 && dt_is_gone(sb))
        cl_proc_gone(base, sb->s.id);
    dt_activity_end(sb);
    json_object_put(j);
    json_object_put(eb);
    free(stdin_path);
    free(cmd);
    free(path);
    free(cmd_id);
    cl_resp_clear(&r);
    return code;
}

/* ------------------------------------------------------------------------ */
/* Terminals: the toolbox daemon's PTY sessions                              */
/* ------------------------------------------------------------------------ */

#ifdef SBX_HAVE_CLOUD_WS

/* What bash runs before its first prompt: the command in its place, with
 * the environment bash was given (read back from /proc/$$/environ: the rc
 * files bash read may have changed exported values, such as PS1). */
#define DT_PTY_PROMPT_COMMAND                                                  \
    "while IFS= read -r -d '' sbx_kv; do export \"$sbx_kv\" 2>/dev/null; "     \
    "done < /proc/$$/environ; unset PROMPT_COMMAND sbx_kv; "                    \
    "sbx_s=$SBX_TTY_SCRIPT; unset SBX_TTY_SCRIPT; exec /bin/sh -c \"$sbx_s\""

typedef struct dt_pty {
    cl_script_proc sp;          /* first member (provider.h) */
    unsigned rows, cols;        /* the size at the start */
    char id[48];                /* the PTY session's: "sbx-pty-" + the tag's hex */
    pthread_mutex_t lock;       /* guards what follows */
    pthread_cond_t cond;
    int created;                /* the session exists (resize may go) */
    int over;                   /* the worker is done with it */
    cl_ws *ws;                  /* while connected */
    int signalled;              /* the last signal exec_kill sent, or 0 */
    int connected;              /* the daemon's "connected" control came */
    char ctl_error[512];        /* its "error" control, or "" */
} dt_pty;

/* The daemon's control frames (text) and the terminal's output (binary). */
static int dt_pty_message(void *ud, int binary, const unsigned char *d, size_t n)
{
    dt_pty *p = ud;
    if (binary)
        return cl_proc_output(&p->sp.base, 1, d, n) < 0 ? -1 : 0;
    char *text = strndup((const char *)d, n);
    json_object *j = text ? json_tokener_parse(text) : NULL;
    free(text);
    const char *type = cl_json_str(j, "type"), *status = cl_json_str(j, "status");
    if (type && strcmp(type, "control") == 0 && status) {
        pthread_mutex_lock(&p->lock);
        if (strcmp(status, "connected") == 0) {
            p->connected = 1;
        } else {
            const char *e = cl_json_str(j, "error");
            snprintf(p->ctl_error, sizeof p->ctl_error, "%.500s", e ? e : status);
        }
        pthread_mutex_unlock(&p->lock);
    }
    json_object_put(j);
    return 0;
}

/* The script the terminal's shell execs: the per-call env exported (keys
 * checked as shell names by dt_exec_start), then the command's script. */
static char *dt_pty_script(dt_pty *p)
{
    cl_buf b = { 0 };
    return cl_buf_take(&b, cl_buf_env_exports(&b, (const char *const *)p->sp.env) < 0
                               || cl_buf_printf(&b, "%s", p->sp.script) < 0);
}

/* The exit code in the daemon's close reason {"exitCode": N}: 0..255, or
 * -1 with the error in cl_last(). */
static int dt_pty_exit_code(dt_pty *p, const char *reason, int code)
{
    const char *op = "exec";
    json_object *j = reason && *reason ? json_tokener_parse(reason) : NULL;
    int64_t v = 0;
    int have = cl_json_int(j, "exitCode", &v) == 1;
    const char *err = cl_json_str(j, "error");
    int rc;
    pthread_mutex_lock(&p->lock);
    int sig = p->signalled;
    pthread_mutex_unlock(&p->lock);
    if (have && v >= 0) {
        rc = (int)(v & 0xff);
    } else if (have && sig > 0) {
        rc = 128 + sig;     /* the signal exec_kill sent ended it */
    } else if (have) {
        cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "daytona: the terminal's command was "
                "ended by a signal the daemon does not name (exitCode %lld)", (long long)v);
        rc = -1;
    } else if (err) {
        cl_fail(NULL, SBX_ERROR_NOT_FOUND, op, "daytona: PTY session %s: %s", p->id, err);
        rc = -1;
    } else {
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "daytona: the terminal's connection closed "
                "(code %d) without the command's exit code", code);
        cl_outcome_unknown(NULL);
        rc = -1;
    }
    json_object_put(j);
    return rc;
}

/* The worker of a command on a terminal: the PTY session made, its
 * WebSocket serviced to the shell's end, the exit code from the close. */
static int dt_pty_run(cl_proc *base)
{
    dt_pty *p = (dt_pty *)base;
    struct sbx_plugin_sandbox *sb = (struct sbx_plugin_sandbox *)p->sp.sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    int code = -1;
    char *script = dt_pty_script(p), *path = NULL;
    cl_term term = { .lock = &p->lock, .slot = &p->ws, .proc = base, .sb = p->sp.sb,
                     .run = p->sp.run_short, .tag = p->sp.tag, .stdin_fd = p->sp.stdin_fd };
    json_object *body = json_object_new_object(), *envs = json_object_new_object();
    cl_ws *ws = NULL;
    dt_activity_begin(sb);
    if (!script || !body || !envs) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        json_object_put(envs);
        goto out;
    }
    json_object_object_add(envs, CL_EXEC_MARK, json_object_new_string(p->sp.tag));
    json_object_object_add(envs, "SBX_TTY_SCRIPT", json_object_new_string(script));
    json_object_object_add(envs, "PROMPT_COMMAND", json_object_new_string(DT_PTY_PROMPT_COMMAND));
    json_object_object_add(body, "id", json_object_new_string(p->id));
    json_object_object_add(body, "cols", json_object_new_int64(p->cols));
    json_object_object_add(body, "rows", json_object_new_int64(p->rows));
    json_object_object_add(body, "lazyStart", json_object_new_boolean(1));
    json_object_object_add(body, "envs", envs);
    const char *js = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = js, .body_len = strlen(js),
                  .idempotent = CL_SAFE, .what = "create the PTY session" };
    cl_resp r = { 0 };
    int rc = dt_toolbox(sb, &ctx, &rq, "/process/pty", &r, op, NULL);
    /* Sent again after an answer was lost: the id is ours, so a 409 means
     * the first one made it. */
    if (rc < 0 && r.status == 409 && r.attempts > 1)
        rc = 0;
    cl_resp_clear(&r);
    if (rc < 0)
        goto out;
    pthread_mutex_lock(&p->lock);
    p->created = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);

    path = cl_printf("%s/process/pty/%s/connect", sb->s.plane, p->id);
    if (!path) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (cl_term_connect(&term, sb->s.c->cl.http, path, dt_pty_message, p, &ctx,
                        "connect to the PTY session", &ws, op, NULL) < 0)
        goto out;
    rc = cl_ws_run(ws, &ctx, op, NULL);
    pthread_mutex_lock(&p->lock);
    char ctl[512];
    snprintf(ctl, sizeof ctl, "%s", p->ctl_error);
    p->ws = NULL;
    pthread_mutex_unlock(&p->lock);
    if (ctl[0]) {
        cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "daytona: PTY session %s: %s", p->id, ctl);
    } else if (rc == 0 || cl_ws_close_code(ws) != 0) {
        code = dt_pty_exit_code(p, cl_ws_close_reason(ws), cl_ws_close_code(ws));
    } else if (!cl_proc_stopping(base)) {
        /* Cut without the shell's end: its outcome is unknown; the
         * session goes (with its shell) so that nothing runs on. */
        cl_outcome_unknown(NULL);
    }
out:
    cl_term_end(&term);
    if (code < 0) {
        cl_last_error l = *cl_last();
        pthread_mutex_lock(&p->lock);
        int created = p->created;
        pthread_mutex_unlock(&p->lock);
        if (created && !dt_is_gone(sb)) {
            /* The session and its shell are deleted: nothing is left
             * running after the error. */
            char *dp = cl_printf("/process/pty/%s", p->id);
            sbx_call_ctx dc = { sizeof(dc), cl_now() + 10, -1, NULL };
            cl_req dq = { .method = "DELETE", .idempotent = CL_SAFE,
                          .what = "delete the PTY session" };
            cl_resp dr = { 0 };
            if (dp)
                dt_toolbox(sb, &dc, &dq, dp, &dr, op, NULL);
            cl_resp_clear(&dr);
            free(dp);
        }
        cl_fail_from(NULL, &l, op);
        cl_proc_fail_in(base, &sb->s);
    }
    pthread_mutex_lock(&p->lock);
    p->over = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    dt_activity_end(sb);
    cl_ws_free(ws);
    free(path);
    free(script);
    json_object_put(body);
    return code;
}

static void dt_pty_fini(cl_script_proc *sp)
{
    dt_pty *p = (dt_pty *)sp;
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
}

/* exec_kill: cl_script_exec_kill(), the signal remembered for a terminal's
 * command (the daemon names none when its shell dies by one). */
static int dt_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                        sbx_error **error)
{
    cl_script_proc *sp = (cl_script_proc *)process;
    if (sp->fini == dt_pty_fini) {
        dt_pty *p = (dt_pty *)sp;
        pthread_mutex_lock(&p->lock);
        p->signalled = sig;
        pthread_mutex_unlock(&p->lock);
    }
    return cl_script_exec_kill(process, ctx, sig, error);
}

/* POST /process/pty/{id}/resize once the session exists (waited for within
 * the call's bound); 410 (it ended) is no error. Called by the host only
 * for commands started on a terminal, which are dt_pty. */
static int dt_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx, unsigned rows,
                          unsigned cols, sbx_error **error)
{
    const char *op = "exec_resize";
    dt_pty *p = (dt_pty *)process;
    struct sbx_plugin_sandbox *sb = (struct sbx_plugin_sandbox *)p->sp.sb;
    cl_bound bd = cl_bound_make(ctx, 0);
    pthread_mutex_lock(&p->lock);
    while (!p->created && !p->over)
        if (cl_resize_wait(&bd, &p->cond, &p->lock, "daytona: the terminal was not resized: "
                           "its PTY session was not made in time", error) < 0)
            return -1;
    int over = p->over;
    pthread_mutex_unlock(&p->lock);
    if (over)
        return 0;
    char *path = cl_printf("/process/pty/%s/resize", p->id);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "cols", json_object_new_int64(cols));
    json_object_object_add(b, "rows", json_object_new_int64(rows));
    const char *js = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = js, .body_len = strlen(js), .idempotent = CL_SAFE,
                  .what = "resize the terminal" };
    cl_resp r = { 0 };
    int rc = path ? dt_toolbox(sb, ctx, &rq, path, &r, op, NULL) : -1;
    if (rc < 0 && r.status == 410)
        rc = 0;     /* the shell ended meanwhile */
    if (rc < 0 && !path) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    } else if (rc < 0) {
        cl_fail_from(error, cl_last(), op);
    }
    cl_resp_clear(&r);
    json_object_put(b);
    free(path);
    return rc;
}

#endif /* SBX_HAVE_CLOUD_WS */

static int dt_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                         sbx_error **error)
{
    const char *op = "exec";
    (void)ctx;
#ifdef SBX_HAVE_CLOUD_WS
    if (cl_exec_check_pty(&sb->s, DT_BACKEND, rq, 0, error) < 0)
        return -1;
#else
    if (cl_exec_check(&sb->s, DT_BACKEND, rq, 0, error) < 0)
        return -1;
#endif
    if (cl_json_text_check(rq, NULL, op, error) < 0)
        return -1;
    /* The overlay becomes shell assignments (dt_command_line, or the
     * terminal's exports): each key must be a shell name. */
    if (cl_env_names_check(rq->env, op, error) < 0)
        return -1;
#ifdef SBX_HAVE_CLOUD_WS
    int tty = rq->tty_rows > 0;
    size_t size = tty ? sizeof(dt_pty) : sizeof(cl_script_proc);
#else
    size_t size = sizeof(cl_script_proc);
#endif
    cl_script_proc *p = cl_script_proc_new(size, sb, NULL, rq, dt_run_short, op, error);
    if (!p)
        return -1;
#ifdef SBX_HAVE_CLOUD_WS
    if (tty) {
        dt_pty *t = (dt_pty *)p;
        t->rows = rq->tty_rows;
        t->cols = rq->tty_cols;
        snprintf(t->id, sizeof t->id, "sbx-pty-%s", p->tag + 9);
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->cond, NULL);
        p->fini = dt_pty_fini;
    }
#endif
    /* A relative cwd is taken from the sandbox's root (dt_abs). */
    char *cwd = rq->cwd ? dt_abs(sb, rq->cwd) : sb->s.workdir ? strdup(sb->s.workdir) : NULL;
    free(p->script);
    p->script = (cwd || (!rq->cwd && !sb->s.workdir)) ? cl_shell_script(rq->argv, rq->shell, cwd)
                                                    : NULL;
    free(cwd);
    if (!p->script) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        cl_script_proc_free(p);
        return -1;
    }
#ifdef SBX_HAVE_CLOUD_WS
    if (tty)
        return cl_script_proc_launch(p, dt_pty_run, rq, op, process, error);
#endif
    return cl_script_proc_launch(p, dt_exec_run, rq, op, process, error);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin dt_plugin = {
    CL_PLUGIN_HEAD(DT_BACKEND),
    CL_PLUGIN_SLOTS(dt),
    .description = "Daytona sandboxes (REST API and Toolbox API) over libcurl; the client "
                   "option refresh_activity_s (seconds, default 60; 0: never) is how often "
                   "the sandbox's activity is renewed while commands run, so that its idle "
                   "stop does not stop it under a quiet one",
    .caps = DT_CAPS,
    .sandbox_free = dt_sandbox_free,
    .snapshot = dt_snapshot,
    .exec_wait = cl_script_exec_wait,
#ifdef SBX_HAVE_CLOUD_WS
    .exec_kill = dt_exec_kill,
#else
    .exec_kill = cl_script_exec_kill,
#endif
#ifdef SBX_HAVE_CLOUD_WS
    .exec_resize = dt_exec_resize,
#endif
    .exec_free = cl_script_exec_free,
    .stat_file = dt_stat_file,
    .stop = dt_stop,
    .start = dt_start,
    CL_PORT_SLOTS(dt_resolve_port),
};

CL_PLUGIN_EXPORT(&dt_plugin)
