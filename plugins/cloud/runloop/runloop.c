/*
 * runloop.c — libsbx-runloop.so, the `runloop` backend: Runloop devboxes
 * over their REST API, on the hosted-provider base
 * (plugins/cloud/base/cloud.h).
 *
 * Contract: the Runloop section of the provider contracts
 * (runloopai/api-client-python src/runloop_api_client/_client.py,
 * resources/devboxes/, types/).
 *
 *  - Credentials: RUNLOOP_API_KEY, as "Authorization: Bearer ...". Base
 *    URL: the client config's "api_url", else RUNLOOP_BASE_URL, else
 *    https://api.runloop.ai.
 *  - create: POST /v1/devboxes. cpu and memory_mb pick
 *    launch_parameters.resource_size_request: the smallest of Runloop's
 *    sizes that fits both (X_SMALL 0.5 vCPU / 1 GiB, SMALL 1/2, MEDIUM 2/4,
 *    LARGE 2/8, X_LARGE 4/16, XX_LARGE 8/32), else CUSTOM_SIZE with
 *    custom_cpu_cores and custom_gb_memory rounded up; disk_mb always makes
 *    it CUSTOM_SIZE (custom_disk_size, GiB rounded up); memory_mb under
 *    1024 (X_SMALL's, the least Runloop gives) is a configuration error
 *    with context min_mb=1024, not a silently larger limit; the backend option
 *    {"custom_size": true} asks for CUSTOM_SIZE with the exact request. The
 *    size chosen is logged. template → blueprint_name (blueprint_id when it
 *    starts with "bpt_"); snapshot_id → snapshot_id; image, gpu and
 *    app_name are configuration errors naming them; allow_internet=0 needs
 *    the backend option "network_policy_id" (a deny-egress policy made at
 *    Runloop), else it is a configuration error naming that option. The
 *    create's env is the devbox's environment_variables (the provider keeps
 *    it: it holds after a resume, and the session state holds none).
 *    launch_parameters.keep_alive_time_seconds is always sent (the caller's
 *    lifetime plus RL_LIFETIME_MARGIN_S, else RL_DEFAULT_LIFETIME_S), so
 *    the provider ends a devbox that is lost. metadata carries the
 *    ownership labels (CL_META_*), by which list_owned, destroy_by_id and
 *    the reaper of lost creates find it (CASE-20). Readiness: POST
 *    wait_for_status {"statuses":["running"]}, re-polled on 408.
 *  - exec: POST /v1/devboxes/{id}/execute with a command_id made here (a
 *    UUIDv7), so a re-sent execute never runs the command twice, then
 *    executions/{eid}/wait_for_status re-polled on 408 (holds of at most
 *    25 s; the first one RL_LIVE_FIRST_HOLD_S). The execution's stdout
 *    and stderr are text and may be cut, so the command runs in a shell of
 *    its own with its output in two files, which (unless nobody reads the
 *    output before the end: SBX_PLUGIN_EXEC_OUTPUT_AT_END, one hold to the
 *    end, no tail) tail follows into the
 *    execution's stdout and stderr while it runs: past the first hold,
 *    two threads read them through the update streams (see "Live output"
 *    below), so output streams as it comes. The wrapper around it then
 *    prints a marker with its exit code and, up to RL_INLINE_MAX bytes,
 *    both outputs percent-encoded or in base64 (one line each: the base's
 *    cl_buf_report_encoder) and removes the files, so a
 *    quick small command is one request; larger output, or a wrapper
 *    killed, is downloaded as raw bytes and removed. Output stays apart
 *    and exact. Per-call env values and stdin are uploaded as
 *    files first (never in the command line); every process of the
 *    command carries CL_EXEC_MARK=<its tag>, so exec_kill signals all of
 *    them. A devbox that fails with failure_reason out_of_memory while a
 *    command runs ends the command with 137 and the OOM flag (CASE-49).
 *    The command line is a JSON string: an argument, shell command or cwd
 *    that is not UTF-8 is invalid_argument naming it, before anything is
 *    sent (issue 16); env values go as a file's bytes, any byte kept.
 *  - files: upload_file (multipart) and download_file (raw bytes both
 *    ways, CASE-17); listings by a command. Relative paths are taken from
 *    the workdir, else from the devbox's home directory (as Runloop does).
 *    download_file's path is in a JSON body, and the write's chmod and the
 *    listing are commands: a path that is not UTF-8 is invalid_argument
 *    for read_file, write_file and list_files, before anything is sent.
 *  - destroy: POST shutdown (Runloop has no DELETE); stop / start: suspend
 *    and resume; snapshot: snapshot_disk, restored by a create with
 *    snapshot_id.
 *  - A devbox the provider no longer has (404, or status shutdown or
 *    failure) is not_found with reason "gone" (CASE-32), with its
 *    failure_reason and shutdown_reason in the context; every later call
 *    fails at once.
 *
 * Threading: slots may run at once on different devboxes and on one; a
 * devbox's mutable state (the gone flag) has its own lock.
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

#define RL_BACKEND "runloop"
#define RL_DEFAULT_URL "https://api.runloop.ai"
#define RL_STATE_VERSION 1
#define RL_WAIT_S 300.0                 /* bound on waiting for running */
#define RL_DEFAULT_LIFETIME_S 3600      /* keep_alive_time_seconds when none was set */
#define RL_LIFETIME_MARGIN_S 5          /* provider end after the caller's lifetime */
#define RL_EXEC_HOLD_S 25               /* the longest execution hold */
#define RL_STATUS_HOLD_S 30             /* the longest devbox status hold */
#define RL_INLINE_MAX 32768            /* output bytes a command's report carries */
#define RL_LIVE_FIRST_HOLD_S 1          /* a command's first hold; then its output streams */
#define RL_LIVE_RETRIES 5               /* reconnects of an output stream without progress */
#define RL_LIVE_GRACE_S 2.0             /* for the streams to end after the command */
#define RL_MIN_MEMORY_MB 1024           /* the smallest size's memory (X_SMALL) */
#define RL_STR_(x) #x
#define RL_STR(x) RL_STR_(x)

#define RL_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_SNAPSHOT      \
                 | SBX_CAP_RESUME | SBX_CAP_ISOLATION | SBX_CAP_CPU_LIMIT                 \
                 | SBX_CAP_MEMORY_LIMIT | SBX_CAP_DISK_LIMIT | SBX_CAP_IMAGE              \
                 | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED | SBX_CAP_BACKGROUND)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, base URL, reaper (provider.h) */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id and the gone flag (provider.h) */
};

typedef cl_script_proc rl_proc;  /* provider.h */

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define rl_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define rl_mark_gone(sb) cl_gone_set(&(sb)->s.gone)
#define rl_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), RL_BACKEND, (sb)->s.id, \
                                              (error))
#define rl_refuse(error, option, value, why) \
    cl_refuse((error), RL_BACKEND, (option), (value), (why))

#define rl_status(j) cl_json_str_or((j), "status", "unknown")

/* Ended: nothing more runs in it. */
static const char *const rl_dead[] = { "shutdown", "failure", NULL };

static int rl_terminal(const char *status)
{
    return cl_str_in(status, rl_dead);
}

/* The gone error of devbox @id, with its state and reasons from @view (may
 * be NULL). */
static sbx_error *rl_gone_error(sbx_error **error, const char *op, const char *id,
                                json_object *view)
{
    static const char *const keys[] = { "status", "failure_reason", "shutdown_reason", NULL };
    return cl_gone_error_view(error, op, RL_BACKEND, id, view, keys);
}

/* GET /v1/devboxes/{id}: the DevboxView, or NULL (*@status: 0 when no
 * answer, 404 when the provider has no such devbox). */
CL_ITEM_GET(rl_get, "v1/devboxes", "get the devbox")

/* POST @api/v1/devboxes/@id@suffix with @body (NULL: {}) as a safe or
 * unsafe call: 0 with the answer in @r (any status), -1 when none came. */
static int rl_post(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                   const char *suffix, json_object *body, cl_idempotency idem, cl_resp *r,
                   const char *op, const char *what, sbx_error **error)
{
    return cl_post_json(c->cl.http, ctx, cl_item_url(c->cl.api, "v1/devboxes", id, suffix), body,
                        idem, r, op, what, error);
}

/* How the provider's view of a sandbox is got and read: resume, and the
 * look at a sandbox whose call was refused (provider.h). */
static const cl_resume_spec rl_spec = { RL_BACKEND, RL_STATE_VERSION, "devbox_id", rl_get,
                                        "status", rl_dead, rl_gone_error };

/* How a refused call on a devbox is read: a 404 is its own unless a file
 * call's, and every refusal is looked into (a terminal devbox refuses). */
static const cl_call_spec rl_calls = { &rl_spec, CL_CALLS_404_GONE | CL_CALLS_LOOK_ANY
                                                  | CL_CALLS_FILE_400 };

/* A call on devbox @sb (the request @rq, its url made here from @suffix):
 * 0 with a 2xx answer in @r (or a 408 when @ok408), -1 otherwise. A 404
 * with @file_call set is a file's, unless the devbox itself is gone: then
 * no error is stored (the caller names the file). */
static int rl_call(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, cl_req *rq,
                   const char *suffix, cl_resp *r, int ok408, int file_call, const char *op,
                   sbx_error **error)
{
    return cl_sandbox_request(&sb->s, sb->s.c->cl.http, &rl_calls, ctx, rq,
                              cl_item_url(sb->s.c->cl.api, "v1/devboxes", sb->s.id, suffix),
                              (ok408 ? CL_CALL_OK_408 : 0) | (file_call ? CL_CALL_FILE : 0), r,
                              op, error);
}

/* rl_call() with the JSON object @body. */
static int rl_call_json(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                        const char *suffix, json_object *body, cl_idempotency idem, cl_resp *r,
                        int ok408, const char *op, const char *what, sbx_error **error)
{
    const char *bs = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = bs, .body_len = strlen(bs), .idempotent = idem,
                  .what = what };
    return rl_call(sb, ctx, &rq, suffix, r, ok408, 0, op, error);
}

/* A UUIDv7 (RFC 9562): 48 bits of UNIX milliseconds, version 7, random
 * bits, variant 10: the client's command_id. @out holds 37 bytes. */
static void rl_uuid7(char out[37])
{
    char hex[33];
    cl_random_hex(hex, 16);
    unsigned long long msec = (unsigned long long)(cl_wallclock() * 1000.0);
    char ts[13];
    snprintf(ts, sizeof ts, "%012llx", msec & 0xffffffffffffULL);
    memcpy(hex, ts, 12);
    hex[12] = '7';
    static const char variant[] = "89ab";
    hex[16] = variant[(unsigned char)hex[17] % 4];
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

/* ------------------------------------------------------------------------ */
/* Waiting for running                                                       */
/* ------------------------------------------------------------------------ */

/* Holds wait_for_status {"statuses":["running"]} until the devbox runs,
 * re-polling on 408, resuming a suspended devbox once, within RL_WAIT_S
 * and the call's deadline. A terminal devbox is gone (with its reasons). */
static int rl_wait_running(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           const char *op, sbx_error **error)
{
    cl_bound bd = cl_bound_make(ctx, RL_WAIT_S);
    int resumed = 0, looked = 0;
    for (;;) {
        double left = cl_bound_left(&bd);
        if (left == 0) {
            cl_context(cl_fail(error, SBX_ERROR_TIMEOUT, op, "runloop devbox %s did not reach "
                               "status running", sb->s.id), "sandbox_id", sb->s.id);
            return -1;
        }
        int hold = left < 0 || left > RL_STATUS_HOLD_S ? RL_STATUS_HOLD_S : (int)left;
        json_object *b = json_object_new_object(), *st = json_object_new_array();
        json_object_array_add(st, json_object_new_string("running"));
        json_object_object_add(b, "statuses", st);
        json_object_object_add(b, "timeout_seconds", json_object_new_int(hold));
        cl_resp r = { 0 };
        int rc = rl_post(sb->s.c, ctx, sb->s.id, "/wait_for_status", b, CL_SAFE, &r, op,
                         "wait for the devbox to run", error);
        json_object_put(b);
        if (rc < 0) {
            cl_resp_clear(&r);
            return -1;
        }
        if (r.status == 200) {
            cl_resp_clear(&r);
            return 0;
        }
        if (r.status == 408 && looked) {
            cl_resp_clear(&r);
            continue;
        }
        /* Another answer, or the first hold that ended: look at the devbox
         * (a suspended one holds until it is resumed). */
        looked = 1;
        long gs = 0;
        json_object *j = rl_get(sb->s.c, ctx, sb->s.id, &gs, op, NULL);
        const char *s = j ? rl_status(j) : NULL;
        if (gs == 404 || (s && rl_terminal(s))) {
            rl_mark_gone(sb);
            rl_gone_error(error, op, sb->s.id, j);
            json_object_put(j);
            cl_resp_clear(&r);
            return -1;
        }
        if (s && strcmp(s, "suspended") == 0 && !resumed) {
            cl_resp r2 = { 0 };
            resumed = 1;
            rc = rl_post(sb->s.c, ctx, sb->s.id, "/resume", NULL, CL_SAFE, &r2, op,
                         "resume the devbox", error);
            if (rc == 0 && r2.status / 100 != 2) {
                cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r2, op,
                               "resume the devbox");
                rc = -1;
            }
            cl_resp_clear(&r2);
            json_object_put(j);
            cl_resp_clear(&r);
            if (rc < 0)
                return -1;
            continue;
        }
        json_object_put(j);
        if (r.status == 408 || (s && strcmp(s, "suspended") != 0)) {
            cl_resp_clear(&r);
            continue;       /* on its way: hold again */
        }
        cl_fail_status(sb->s.c->cl.http, error, CL_CODE_BY_STATUS, &r, op,
                       "wait for the devbox to run");
        cl_resp_clear(&r);
        return -1;
    }
}

/* ------------------------------------------------------------------------ */
/* Running a command                                                         */
/* ------------------------------------------------------------------------ */

/* 1 when @sb is gone because it failed with failure_reason out_of_memory
 * (the provider's memory limit ended it), else 0. */
static int rl_oom_gone(struct sbx_plugin_sandbox *sb)
{
    if (!rl_is_gone(sb))
        return 0;
    long gs = 0;
    sbx_call_ctx c2 = { sizeof(c2), cl_now() + 10, -1, NULL };
    json_object *v = rl_get(sb->s.c, &c2, sb->s.id, &gs, "exec", NULL);
    const char *fr = v ? cl_json_str(v, "failure_reason") : NULL;
    int oom = fr && strcmp(fr, "out_of_memory") == 0;
    json_object_put(v);
    return oom;
}

/* Runs @command on @sb through execute with a command_id of its own, then
 * waits for its execution to complete (re-polling on 408) until @ctx's
 * deadline or cancel. 0 with its exit status in *@code (and its stdout
 * text in *@out, a new string, when @out is not NULL), or -1 with *@error
 * set. When the devbox failed with out_of_memory meanwhile, 0 with 137 and
 * *@oom set (when @oom is not NULL). */
struct rl_live;
static void rl_live_start(struct rl_live *lv, const char *eid);

static int rl_execute(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *command,
                      int *code, char **out, int *oom, struct rl_live *live, const char *op,
                      sbx_error **error)
{
    char cid[37];
    rl_uuid7(cid);
    cl_bound bd = cl_bound_make(ctx, 0);
    double left = cl_bound_left(&bd);
    int hold = left < 0 || left > RL_EXEC_HOLD_S ? RL_EXEC_HOLD_S : (int)left;
    if (live && hold > RL_LIVE_FIRST_HOLD_S)
        hold = RL_LIVE_FIRST_HOLD_S;    /* past it, the output streams */
    json_object *b = json_object_new_object(), *j = NULL;
    json_object_object_add(b, "command", json_object_new_string(command));
    json_object_object_add(b, "command_id", json_object_new_string(cid));
    json_object_object_add(b, "optimistic_timeout", json_object_new_int(hold));
    cl_resp r = { 0 };
    int rc = rl_call_json(sb, ctx, "/execute", b, CL_SAFE, &r, 0, op, "execute the command",
                          error);
    json_object_put(b);
    char *suffix = NULL;
    while (rc == 0) {
        int held = r.status == 408;    /* the hold ended: look again */
        json_object_put(j);
        j = held ? NULL : cl_resp_json(&r, op, "execute the command", error);
        cl_resp_clear(&r);
        memset(&r, 0, sizeof r);
        if (!held && !j) {
            rc = -1;
            break;
        }
        if (j && strcmp(rl_status(j), "completed") == 0) {
            int64_t x = 0;
            if (cl_json_int(j, "exit_status", &x) != 1) {
                cl_fail(error, SBX_ERROR_CONNECTION, op, "runloop execution completed without "
                        "an exit_status");
                rc = -1;
                break;
            }
            *code = (int)(x & 0xff);
            if (out) {
                /* With @live, the live copy of the output comes before the
                 * wrapper's report: its NUL bytes become spaces, so the
                 * report is found in the string. */
                json_object *so = NULL;
                json_object_object_get_ex(j, "stdout", &so);
                const char *t = so ? json_object_get_string(so) : "";
                size_t n = so ? (size_t)json_object_get_string_len(so) : 0;
                if (!(*out = malloc(n + 1))) {
                    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                    rc = -1;
                } else {
                    memcpy(*out, t ? t : "", n);
                    (*out)[n] = '\0';
                    for (size_t i = 0; live && i < n; i++)
                        if (!(*out)[i])
                            (*out)[i] = ' ';
                }
            }
            break;
        }
        if (!suffix) {
            const char *eid = j ? cl_json_str(j, "execution_id") : NULL;
            char *e = eid ? cl_url_escape(eid) : NULL;
            suffix = e ? cl_printf("/executions/%s/wait_for_status", e) : NULL;
            if (suffix && live)
                rl_live_start(live, e);
            free(e);
            if (!suffix) {
                if (eid)
                    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                else
                    cl_fail(error, SBX_ERROR_CONNECTION, op, "runloop execute answered without "
                            "an execution_id");
                rc = -1;
                break;
            }
        }
        left = cl_bound_left(&bd);
        if (left == 0) {
            cl_fail(error, SBX_ERROR_TIMEOUT, op, "runloop execution did not complete in time");
            rc = -1;
            break;
        }
        hold = left < 0 || left > RL_EXEC_HOLD_S ? RL_EXEC_HOLD_S : (int)left;
        json_object *w = json_object_new_object(), *st = json_object_new_array();
        json_object_array_add(st, json_object_new_string("completed"));
        json_object_object_add(w, "statuses", st);
        json_object_object_add(w, "timeout_seconds", json_object_new_int(hold));
        rc = rl_call_json(sb, ctx, suffix, w, CL_SAFE, &r, 1, op, "wait for the command",
                          error);
        json_object_put(w);
    }
    if (rc < 0 && oom && rl_oom_gone(sb)) {
        *oom = 1;
        *code = 137;
        rc = 0;
    }
    json_object_put(j);
    free(suffix);
    cl_resp_clear(&r);
    return rc;
}

static int rl_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    return rl_execute(sb, ctx, cmd, code, NULL, NULL, NULL, op, error);
}

/* ------------------------------------------------------------------------ */
/* Files: upload_file (multipart) and download_file, raw bytes (CASE-17)      */
/* ------------------------------------------------------------------------ */

/* The error of a file call's answer @r (provider.h). */
#define rl_file_fail(sb, r, op, path, what, error) \
    cl_file_fail(&(sb)->s, (sb)->s.c->cl.http, (r), 0, (op), (path), (what), (error))

static int rl_download(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                       cl_sink_fn sink, void *ud, cl_resp *r, const char *op, sbx_error **error)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "path", json_object_new_string(path));
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = bs, .body_len = strlen(bs), .sink = sink,
                  .sink_ud = ud, .idempotent = CL_SAFE, .what = "download the file" };
    int rc = rl_call(sb, ctx, &rq, "/download_file", r, 0, 1, op, error);
    json_object_put(b);
    return rc;
}

/* Relative paths from the workdir, else as given (Runloop takes them
 * from the home directory). */
static int rl_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    if (cl_json_text_check(NULL, path, "read_file", error) < 0)
        return -1;
    return cl_read_file_by(sb, sb->s.c->cl.http, ctx, sb->s.workdir, path, rl_download, fd, error);
}

/* Uploads what @fd holds (to its end) as @path (provider form): multipart
 * fields "path" and "file". */
static int rl_upload(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                     int fd, const char *shown, const char *op, sbx_error **error)
{
    const char *const fields[] = { "path", path, NULL };
    cl_buf body = { 0 };
    char ctype[80];
    if (cl_multipart_body(&body, ctype, sizeof ctype, fields, "file", "file", fd, shown, op,
                          error) < 0) {
        cl_buf_clear(&body);
        return -1;
    }
    cl_req rq = { .method = "POST", .content_type = ctype, .body = body.data,
                  .body_len = body.len, .idempotent = CL_SAFE, .what = "upload the file" };
    cl_resp r = { 0 };
    int rc = rl_call(sb, ctx, &rq, "/upload_file", &r, 0, 1, op, error);
    if (rc < 0 && r.status)
        rl_file_fail(sb, &r, op, shown, "directory for file", error);
    cl_resp_clear(&r);
    cl_buf_clear(&body);
    return rc;
}

/* Uploads the @n bytes of @data as @path (small files the plugin makes). */
static int rl_upload_bytes(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           const char *path, const char *data, size_t n, const char *op,
                           sbx_error **error)
{
    int fds[2];
    if (n >= 65536) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "runloop: %s would be larger than 64 KiB",
                path);
        return -1;
    }
    if (pipe2(fds, O_CLOEXEC) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "pipe: %s", strerror(errno));
        return -1;
    }
    ssize_t w = n ? write(fds[1], data, n) : 0;
    close(fds[1]);
    int rc = -1;
    if (w != (ssize_t)n)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "pipe write: %s", strerror(errno));
    else
        rc = rl_upload(sb, ctx, path, fds[0], path, op, error);
    close(fds[0]);
    return rc;
}

static int rl_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                         uint32_t mode, sbx_error **error)
{
    /* The upload's form carries the path, the chmod after it (a command)
     * not: refused before the upload, so no file is left. */
    if (cl_json_text_check(NULL, path, "write_file", error) < 0)
        return -1;
    return cl_write_file(sb, ctx, sb->s.workdir, path, fd, mode, rl_upload, rl_run_short, error);
}

/* rl_execute() without live output: a cl_run_out_fn. */
static int rl_run_out(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd, int *code,
                      char **out, const char *op, sbx_error **error)
{
    return rl_execute(sb, ctx, cmd, code, out, NULL, NULL, op, error);
}

/* The listing by a command: "TYPE SIZE NAME" lines of find -printf;
 * relative paths as rl_read_file() takes them. */
static int rl_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    if (cl_json_text_check(NULL, path, "list_files", error) < 0)
        return -1;
    return cl_list_files_run(sb, ctx, sb->s.workdir, path, rl_run_out, fn, ud, error);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

/* POST shutdown: 0 when shut down, or shut down already (a terminal devbox
 * refuses more calls), or gone. */
static int rl_shutdown(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                       const char *op, sbx_error **error)
{
    cl_resp r = { 0 };
    int rc = rl_post(c, ctx, id, "/shutdown", NULL, CL_SAFE, &r, op, "shut the devbox down",
                     error);
    return cl_stop_answer(c, ctx, &rl_spec, id, rc, &r, 0, op, "shut the devbox down", error);
}

/* Walks every page of GET /v1/devboxes (starting_after the last id while
 * has_more, CASE-35), calling @fn on each live devbox; @fn returns
 * non-zero to stop. */
typedef int (*rl_each_fn)(void *ud, json_object *devbox);

static int rl_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, rl_each_fn fn, void *ud,
                   const char *op, sbx_error **error)
{
    char *after = NULL;
    int rc = 0;
    for (int page = 0; page < 100000; page++) {
        char *e = after ? cl_url_escape(after) : NULL;
        char *url = cl_printf("%s/v1/devboxes?limit=100%s%s", c->cl.api,
                              e ? "&starting_after=" : "", e ? e : "");
        free(e);
        json_object *items, *j = cl_list_page(c->cl.http, ctx, url, c->cl.api, "devbox",
                                              "devboxes", &items, op, "list devboxes", error);
        if (!j) {
            rc = -1;
            break;
        }
        size_t n = json_object_array_length(items);
        int stop = 0;
        const char *last = NULL;
        for (size_t i = 0; i < n && !stop; i++) {
            json_object *it = json_object_array_get_idx(items, i);
            last = cl_json_str(it, "id");
            if (last && !rl_terminal(rl_status(it)))
                stop = fn(ud, it) != 0;
        }
        int more = cl_json_bool(j, "has_more");
        free(after);
        after = more && !stop && last ? strdup(last) : NULL;
        json_object_put(j);
        if (!after)
            break;
    }
    free(after);
    return rc;
}

static int rl_id_one(void *ud, json_object *it)
{
    cl_token_ids_match(ud, cl_json_str(cl_json_path(it, "metadata", NULL), CL_META_TOKEN),
                       cl_json_str(it, "id"));
    return 0;
}

/* The reaper's look-up: the devboxes carrying create token @token. */
CL_FIND_TOKEN(rl_find_token, rl_list, rl_id_one)

CL_SETUP(rl_setup, RL_BACKEND)

static const char *const rl_key_envs[] = { "RUNLOOP_API_KEY", NULL };

static const cl_client_spec rl_client_spec = {
    .provider = RL_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .url_key = "api_url", .url_env = "RUNLOOP_BASE_URL", .url_default = RL_DEFAULT_URL,
    .key_envs = rl_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .key_required = 1,
    .find = rl_find_token, .del = rl_shutdown,
};

static int rl_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&rl_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(rl_probe, RL_CAPS)

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

/* Runloop's named sizes: vCPUs and GiB. */
static const struct {
    const char *name;
    double cpu;
    double gb;
} rl_sizes[] = {
    { "X_SMALL", 0.5, 1 }, { "SMALL", 1, 2 }, { "MEDIUM", 2, 4 }, { "LARGE", 2, 8 },
    { "X_LARGE", 4, 16 }, { "XX_LARGE", 8, 32 },
};

static json_object *rl_create_body(const sbx_call_ctx *ctx, const sbx_plugin_create_request *rq,
                                   sbx_error **error)
{
    uint64_t set = rq->set_fields;
    char *policy = NULL;
    int custom = 0;
    /* The backend options: {"network_policy_id": "...", "custom_size": bool}. */
    const cl_option options[] = {
        { "network_policy_id", CL_OPTION_STRING, 0, &policy },
        { "custom_size", CL_OPTION_BOOL, 0, &custom },
        { NULL, 0, 0, NULL },
    };
    if (cl_workdir_check(RL_BACKEND, rq->workdir, error) < 0
        || cl_backend_options(rq, RL_BACKEND, options, error) < 0)
        return NULL;
    json_object *b = json_object_new_object(), *lp = json_object_new_object();
    json_object_object_add(b, "launch_parameters", lp);
    static const cl_unsupported unsupported[] = {
        { "app_name", "Runloop has no apps" },
        { "gpu", "Runloop devboxes have no GPUs" },
        { "image", "Runloop starts devboxes from blueprints: give the blueprint as the "
                   "template" },
        { NULL, NULL },
    };
    if (cl_refuse_options(rq, RL_BACKEND, unsupported, error) < 0)
        goto fail;
    if (rq->template_name && rq->snapshot_id) {
        rl_refuse(error, "template", rq->template_name, "give a blueprint or a snapshot, not "
                  "both");
        goto fail;
    }
    if (rq->template_name)
        json_object_object_add(b, strncmp(rq->template_name, "bpt_", 4) == 0 ? "blueprint_id"
                                                                          : "blueprint_name",
                               json_object_new_string(rq->template_name));
    if (rq->snapshot_id)
        json_object_object_add(b, "snapshot_id", json_object_new_string(rq->snapshot_id));
    /* Size: the smallest named size that fits cpu and memory, else custom. */
    static const cl_limit limits[] = {
        { "cpu", 0, 64, 0, CL_LIMIT_ABOVE, "Runloop takes more than 0 and at most 64 vCPUs",
          NULL, NULL, NULL },
        { "memory_mb", RL_MIN_MEMORY_MB, 256 * 1024, 0, 0, "Runloop devboxes have "
          RL_STR(RL_MIN_MEMORY_MB) " MB (X_SMALL) to 256 GiB", "min_mb", NULL, NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    if (cl_limits_check(rq, RL_BACKEND, limits, error) < 0)
        goto fail;
    double cpu = set & SBX_OPTION_CPU ? rq->cpu : 0;
    double gb = set & SBX_OPTION_MEMORY_MB ? (double)rq->memory_mb / 1024.0 : 0;
    int want_disk = (set & SBX_OPTION_DISK_MB) && rq->disk_mb > 0;
    if (cpu > 0 || gb > 0 || want_disk || custom) {
        const char *size = NULL;
        for (size_t i = 0; !custom && !want_disk && i < sizeof rl_sizes / sizeof rl_sizes[0];
             i++)
            if (rl_sizes[i].cpu >= cpu && rl_sizes[i].gb >= gb) {
                size = rl_sizes[i].name;
                break;
            }
        if (size) {
            json_object_object_add(lp, "resource_size_request", json_object_new_string(size));
        } else {
            long long cc = cpu > 0 ? (long long)ceil(cpu) : 1;
            long long gg = gb > 0 ? (long long)ceil(gb) : 2 * cc;
            json_object_object_add(lp, "resource_size_request",
                                   json_object_new_string("CUSTOM_SIZE"));
            json_object_object_add(lp, "custom_cpu_cores", json_object_new_int64(cc));
            json_object_object_add(lp, "custom_gb_memory", json_object_new_int64(gg));
            if (want_disk)
                json_object_object_add(lp, "custom_disk_size",
                                       json_object_new_int64((rq->disk_mb + 1023) / 1024));
            size = "CUSTOM_SIZE";
        }
        CL_LOG(SBX_LOG_INFO, "create: cpu %g, memory %g GiB: resource_size_request %s", cpu, gb,
               size);
    }
    if (!rq->allow_internet) {
        if (!policy) {
            cl_context(rl_refuse(error, "allow_internet", "false", "Runloop limits egress by a "
                                 "network policy: give its id as the backend option "
                                 "network_policy_id"), "needs", "network_policy_id");
            goto fail;
        }
        json_object_object_add(lp, "network_policy_id", json_object_new_string(policy));
    }
    /* The provider-side lifetime, always (CASE-33): whole seconds. */
    long long t = cl_lifetime_s(rq, RL_BACKEND, RL_DEFAULT_LIFETIME_S, RL_LIFETIME_MARGIN_S,
                                error);
    if (t < 0)
        goto fail;
    json_object_object_add(lp, "keep_alive_time_seconds", json_object_new_int64(t));
    json_object_object_add(b, "metadata", cl_meta_labels(ctx, RL_BACKEND, rq->expires_at > 0
                                                         ? rq->expires_at
                                                         : cl_wallclock() + (double)t));
    json_object_object_add(b, "environment_variables", cl_env_object(rq->env));
    free(policy);
    return b;
fail:
    free(policy);
    json_object_put(b);
    return NULL;
}

static int rl_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    json_object *body = rl_create_body(ctx, rq, error), *j = NULL;
    if (!body)
        return -1;
    char *url = cl_printf("%s/v1/devboxes", c->cl.api);
    int rc = -1;
    struct sbx_plugin_sandbox *sb = NULL;
    const char *id = NULL;
    if (!(j = cl_create_post(c->cl.http, c->cl.reaper, ctx, url, body, "id", "an id",
                             "create the devbox", &id, error)))
        goto out;
    sb = cl_sandbox_new(sizeof(*sb), c, id, NULL);
    if (!sb || rl_wait_running(sb, ctx, op, error) < 0) {
        cl_create_undo(sb, c, rl_shutdown, id, sb != NULL, NULL, op, error);
        goto out;
    }
    if (cl_create_workdir(sb, &sb->s.workdir, rl_run_short, ctx, RL_BACKEND, rq->workdir, op,
                          error) < 0) {
        cl_create_undo(sb, c, rl_shutdown, id, 0, NULL, op, error);
        goto out;
    }
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(body);
    json_object_put(j);
    free(url);
    return rc;
}

CL_DESTROY(rl_destroy, rl_shutdown)

CL_ITEM_IS_ALIVE(rl_is_alive, "v1/devboxes", "status", rl_dead)

/* {"version":1,"devbox_id":ID[,"workdir":W]}: no credential, no env value
 * (the devbox keeps its environment_variables). */
CL_ID_SESSION_STATE(rl_session_state, RL_BACKEND, RL_STATE_VERSION, "devbox_id")

static int rl_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    json_object *j, *data;
    struct sbx_plugin_sandbox *sb = cl_resume_new(client, ctx, state_json, &rl_spec, sizeof(*sb),
                                                  &j, &data, error);
    if (!sb)
        return -1;
    int rc = 0;
    if (strcmp(rl_status(j), "suspended") == 0) {
        /* Woken on use (CASE-53). */
        cl_resp r = { 0 };
        rc = rl_post(client, ctx, sb->s.id, "/resume", NULL, CL_SAFE, &r, "resume",
                     "resume the devbox", error);
        cl_resp_clear(&r);
    }
    if (rc == 0)
        rc = rl_wait_running(sb, ctx, "resume", error);
    return cl_resume_end(rc, sb, sandbox, j, data, NULL);
}

/* snapshot: POST snapshot_disk; the snapshot's id, restored by a create
 * with snapshot_id. */
static char *rl_snapshot(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "snapshot";
    json_object *b = json_object_new_object(), *meta = json_object_new_object(), *j = NULL;
    json_object_object_add(meta, CL_META_BACKEND, json_object_new_string(RL_BACKEND));
    json_object_object_add(b, "metadata", meta);
    cl_resp r = { 0 };
    char *out = NULL;
    if (rl_call_json(sb, ctx, "/snapshot_disk", b, CL_UNSAFE, &r, 0, op, "snapshot the disk",
                     error) == 0
        && (j = cl_resp_json(&r, op, "snapshot the disk", error))) {
        const char *sid = cl_json_str(j, "id");
        if (!sid)
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "runloop snapshot_disk gave no id");
        else
            out = cl_host_strdup(sid, op, error);
    }
    json_object_put(b);
    json_object_put(j);
    cl_resp_clear(&r);
    return out;
}

/* stop: suspend (a suspended devbox accrues no compute); a devbox
 * suspended already stays so (0). */
static int rl_stop(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "stop";
    if (rl_check(sb, op, error) < 0)
        return -1;
    cl_resp r = { 0 };
    int rc = rl_post(sb->s.c, ctx, sb->s.id, "/suspend", NULL, CL_SAFE, &r, op,
                     "suspend the devbox", error);
    if (rc == 0 && r.status / 100 != 2) {
        long st = 0;
        json_object *j = r.status == 404 ? NULL : rl_get(sb->s.c, ctx, sb->s.id, &st, op, NULL);
        const char *s = j ? rl_status(j) : "";
        if (strcmp(s, "suspended") != 0 && strcmp(s, "suspending") != 0)
            rc = cl_sandbox_refused(&sb->s, sb->s.c->cl.http, &rl_calls, ctx, &r, 0, op,
                                    "suspend the devbox", error);
        json_object_put(j);
    }
    cl_resp_clear(&r);
    return rc;
}

/* start: resumes a suspended devbox and waits until it runs. */
static int rl_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (rl_check(sb, "start", error) < 0)
        return -1;
    /* Resumed at once (a devbox that is not suspended refuses it, and is
     * then waited for as it is). */
    cl_resp r = { 0 };
    int rc = rl_post(sb->s.c, ctx, sb->s.id, "/resume", NULL, CL_SAFE, &r, "start",
                     "resume the devbox", error);
    cl_resp_clear(&r);
    if (rc < 0)
        return -1;
    return rl_wait_running(sb, ctx, "start", error);
}

static int rl_owned_one(void *ud, json_object *it)
{
    cl_owned *o = ud;
    int64_t created = 0;
    cl_json_int(it, "create_time_ms", &created);
    return cl_owned_report(o->fn, o->ud, cl_json_str(it, "id"), cl_json_path(it, "metadata", NULL),
                           (double)created / 1000.0, RL_BACKEND);
}

/* The devboxes this backend made: metadata sbx_backend=runloop. */
static int rl_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    cl_owned o = { .fn = fn, .ud = ud };
    return rl_list(client, ctx, rl_owned_one, &o, "list_owned", error);
}

CL_DESTROY_BY_ID(rl_destroy_by_id, rl_shutdown)

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Live output: the execution's stdout / stderr update streams (SSE)          */
/* ------------------------------------------------------------------------ */

/*
 * While a command runs, tail copies its output files into the execution's
 * stdout and stderr, which two threads read from Runloop's update streams
 * (GET executions/{eid}/stream_{stdout,stderr}_updates?offset=N, SSE events
 * {"output", "offset"}), passing each chunk to the host while it is exact:
 * the stream is text, and a chunk holding U+FFFD (what the provider puts
 * for bytes that are not UTF-8) or one that does not start where the last
 * ended ends that for its stream. A stream cut off is reopened at the next
 * offset (RL_LIVE_RETRIES times without progress). stdout ends with the
 * wrapper's report, after its marker "SBX-OUT-<tag> ": bytes that may
 * begin the marker are held back, and nothing from it on is output. When
 * the command has ended, the rest of each stream (all of it when nothing
 * went live) comes from the report or the output files, as raw bytes, its
 * first bytes checked against those sent live (cl_live, cl_live_rest of
 * the base).
 */

struct rl_live;

typedef struct rl_reader {
    struct rl_live *lv;
    int fd;                 /* 1 stdout, 2 stderr */
    pthread_t thread;
    int started;
    int done;               /* stdout: the marker was seen */
    int64_t next;           /* the stream's byte offset to read from */
    cl_live live;           /* what went live (live.off: no more) */
    cl_buf hold;            /* stdout: bytes that may begin the marker */
    cl_sse sse;
} rl_reader;

typedef struct rl_live {
    rl_proc *p;
    struct sbx_plugin_sandbox *sb;
    char marker[96];        /* "SBX-OUT-<tag> " */
    char eid[256];          /* the execution's id, URL-escaped */
    int cancel[2];          /* a pipe: readable once the readers are to stop */
    rl_reader r[3];         /* [1] stdout, [2] stderr */
} rl_live;

static int rl_emit(rl_reader *rd, const char *data, size_t n)
{
    return cl_live_emit(&rd->live, &rd->lv->p->base, rd->fd, data, n);
}

/* A chunk of exact output: stderr goes out; stdout up to the marker, the
 * bytes that may begin it held back. 1 once the marker was seen. */
static int rl_deliver(rl_reader *rd, const char *data, size_t n)
{
    if (rd->fd == 2)
        return rl_emit(rd, data, n) < 0 ? 1 : 0;
    if (cl_buf_append(&rd->hold, data, n) < 0) {
        rd->live.off = 1;
        return 1;
    }
    const char *m = rd->lv->marker;
    size_t ml = strlen(m);
    const char *at = memmem(rd->hold.data, rd->hold.len, m, ml);
    if (at) {
        rl_emit(rd, rd->hold.data, (size_t)(at - rd->hold.data));
        rd->done = 1;
        return 1;
    }
    /* Held back: the longest end of what came that begins the marker. */
    size_t keep = rd->hold.len < ml - 1 ? rd->hold.len : ml - 1;
    while (keep && memcmp(rd->hold.data + rd->hold.len - keep, m, keep) != 0)
        keep--;
    size_t out = rd->hold.len - keep;
    if (rl_emit(rd, rd->hold.data, out) < 0)
        return 1;
    memmove(rd->hold.data, rd->hold.data + out, keep);
    rd->hold.len = keep;
    return 0;
}

static int rl_on_update(void *ud, const char *event, const char *data, size_t len,
                        const char *id)
{
    rl_reader *rd = ud;
    (void)event;
    (void)id;
    json_object *j = json_tokener_parse(data && len ? data : "");
    json_object *o = NULL;
    int64_t offset = -1;
    int stop = 0;
    if (!j || !json_object_object_get_ex(j, "output", &o)
        || !json_object_is_type(o, json_type_string)) {
        stop = 1;       /* not an update: the files give the rest */
        rd->live.off = 1;
    } else {
        const char *out = json_object_get_string(o);
        size_t n = (size_t)json_object_get_string_len(o);
        if (cl_json_int(j, "offset", &offset) == 1 && offset != rd->next) {
            rd->live.off = 1;        /* not where the last chunk ended */
            stop = 1;
        } else if (cl_live_suspect(out, n)) {
            rd->live.off = 1;        /* maybe not the command's bytes */
            stop = 1;
        } else {
            rd->next += (int64_t)n;
            stop = rl_deliver(rd, out, n);
        }
    }
    json_object_put(j);
    return stop || rd->live.off ? 1 : 0;
}

static int rl_update_sink(void *ud, const char *p, size_t n)
{
    rl_reader *rd = ud;
    if (rd->live.off || rd->done)
        return -1;
    return cl_sse_feed(&rd->sse, p, n, "exec", NULL) < 0 || rd->live.off || rd->done ? -1 : 0;
}

static int rl_cancelled(const rl_live *lv)
{
    struct pollfd pf = { .fd = lv->cancel[0], .events = POLLIN };
    return poll(&pf, 1, 0) > 0;
}

static void *rl_reader_main(void *ud)
{
    rl_reader *rd = ud;
    rl_live *lv = rd->lv;
    static const char *const h[] = { "Accept: text/event-stream", NULL };
    int tries = 0;
    while (!rd->live.off && !rd->done && !rl_cancelled(lv)) {
        char *suffix = cl_printf("/executions/%s/stream_%s_updates?offset=%lld", lv->eid,
                                 rd->fd == 1 ? "stdout" : "stderr", (long long)rd->next);
        if (!suffix) {
            rd->live.off = 1;
            break;
        }
        sbx_call_ctx ctx = { sizeof(ctx), 0, lv->cancel[0], NULL };
        cl_req rq = { .method = "GET", .headers = h, .sink = rl_update_sink, .sink_ud = rd,
                      .idempotent = CL_SAFE, .what = "follow the command's output" };
        cl_resp r = { 0 };
        int64_t before = rd->next;
        cl_sse_init(&rd->sse, rl_on_update, rd);
        int rc = rl_call(lv->sb, &ctx, &rq, suffix, &r, 0, 0, "exec", NULL);
        cl_sse_clear(&rd->sse);
        free(suffix);
        long st = r.status;
        cl_resp_clear(&r);
        if (rc == 0 || rd->live.off || rd->done)
            break;              /* the stream's end: the command ended */
        if (st != 200 && st != 0) {
            rd->live.off = 1;        /* no update stream here: the files give all */
            break;
        }
        tries = rd->next > before ? 0 : tries + 1;
        if (tries > RL_LIVE_RETRIES) {
            rd->live.off = 1;
            break;
        }
        CL_LOG(SBX_LOG_INFO, "runloop: the %s stream of execution %s broke off at %lld; "
               "reopening it", rd->fd == 1 ? "stdout" : "stderr", lv->eid, (long long)rd->next);
        cl_sleep(0.05 * tries, lv->cancel[0]);
    }
    return NULL;
}

/* The execution @eid (URL-escaped) runs on: its update streams are read. */
static void rl_live_start(rl_live *lv, const char *eid)
{
    if (lv->r[1].started || lv->r[2].started || strlen(eid) >= sizeof lv->eid)
        return;
    snprintf(lv->eid, sizeof lv->eid, "%s", eid);
    for (int fd = 1; fd <= 2; fd++)
        lv->r[fd].started = pthread_create(&lv->r[fd].thread, NULL, rl_reader_main,
                                           &lv->r[fd]) == 0;
}

static int rl_live_init(rl_live *lv, rl_proc *p)
{
    memset(lv, 0, sizeof(*lv));
    lv->p = p;
    lv->sb = p->sb;
    snprintf(lv->marker, sizeof lv->marker, "SBX-OUT-%s ", p->tag);
    for (int fd = 1; fd <= 2; fd++) {
        lv->r[fd].lv = lv;
        lv->r[fd].fd = fd;
        cl_live_init(&lv->r[fd].live);
    }
    return pipe2(lv->cancel, O_CLOEXEC);
}

/* The command ended (or the exec ends): the readers get RL_LIVE_GRACE_S to
 * reach their streams' end, then are stopped; joined. */
static void rl_live_stop(rl_live *lv)
{
    if (lv->cancel[0] < 0)
        return;     /* stopped already */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)RL_LIVE_GRACE_S;
    for (int fd = 1; fd <= 2; fd++) {
        rl_reader *rd = &lv->r[fd];
        if (rd->started && pthread_timedjoin_np(rd->thread, NULL, &until) == 0)
            rd->started = 0;
    }
    if (write(lv->cancel[1], "x", 1) < 0) {
        /* the pipe is ours and empty: cannot fail */
    }
    for (int fd = 1; fd <= 2; fd++) {
        rl_reader *rd = &lv->r[fd];
        if (rd->started)
            pthread_join(rd->thread, NULL);
        rd->started = 0;
        cl_buf_clear(&rd->hold);
    }
    close(lv->cancel[0]);
    close(lv->cancel[1]);
    lv->cancel[0] = lv->cancel[1] = -1;
}

/* The wrapper's report @so ("SBX-OUT CODE", then stdout's and stderr's
 * fields of cl_buf_report_encoder(), a line each): 1 with both written out and the code in *@code, 0
 * when @so is no report (the files are to be read), -1 when the host
 * closed its descriptors or the report is malformed. */
static int rl_inline_output(rl_proc *p, rl_live *lv, const char *so, int *code)
{
    /* The report follows the last marker (the live copy of stdout comes
     * before it); none: the wrapper was killed. */
    const char *at = NULL, *m = lv->marker;
    for (const char *q = so; (q = strstr(q, m)); q++)
        at = q;
    if (!at)
        return 0;
    char *end = NULL;
    long rc = strtol(at + strlen(m), &end, 10);
    const char *l1 = end && *end == '\n' ? end + 1 : NULL;
    if (l1 && !*l1)
        return 0;       /* a report without the output: it is in the files */
    const char *l2 = l1 ? strchr(l1, '\n') : NULL;
    const char *l3 = l2 ? strchr(l2 + 1, '\n') : NULL;
    if (!l3) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "runloop: the command's report is cut");
        return -1;
    }
    cl_buf o = { 0 }, e = { 0 };
    int ok = cl_report_field_decode(l1, (size_t)(l2 - l1), &o) == 0
             && cl_report_field_decode(l2 + 1, (size_t)(l3 - l2 - 1), &e) == 0;
    if (!ok)
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "runloop: the command's report is not "
                "percent-encoded or base64");
    else {
        for (int fd = 1; ok && fd <= 2; fd++) {
            cl_buf *b = fd == 1 ? &o : &e;
            cl_live_rest w;
            cl_live_rest_init(&w, &p->base, fd, &lv->r[fd].live);
            if (cl_live_rest_sink(&w, b->data ? b->data : "", b->len) < 0 && !w.differs)
                ok = 0;
            else if (cl_live_rest_end(&w, "runloop", "exec") < 0)
                ok = 0;
        }
    }
    cl_buf_clear(&o);
    cl_buf_clear(&e);
    if (!ok)
        return -1;
    *code = (int)(rc & 0xff);
    return 1;
}

static int rl_exec_run(cl_proc *base)
{
    rl_proc *p = (rl_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    cl_buf pre = { 0 };
    char *script = NULL;
    int code = -1, rc = -1;
    rl_live lv;
    if (rl_live_init(&lv, p) < 0) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot start the command: %s",
                strerror(errno));
        cl_proc_fail_last(base);
        return -1;
    }
    /* The wrapper and its tails carry another mark than the command's, so
     * exec_kill signals the command's processes only. */
    int bad = cl_buf_printf(&pre, "export " CL_EXEC_MARK "=%s-io\n", p->tag) < 0;
    if (!bad && cl_script_env_prelude(p, &ctx, rl_upload_bytes, &pre, op) < 0)
        goto fail;
    char in[CL_STDIN_PATH_MAX] = "/dev/null";
    if (!bad && cl_script_stdin_file(p, &ctx, rl_upload, "/tmp", in, op) < 0)
        goto fail;
    /* The command runs in a shell of its own with its output in two files,
     * which tail follows into the execution's stdout and stderr while it
     * runs (the update streams, rl_reader_main; the wrapper's own messages
     * go to /dev/null). Then the wrapper prints its marker and the exit
     * code and, when small, both outputs as cl_buf_report_encoder()'s
     * fields (text-safe, one line each; a small output encoded by the shell
     * itself, no program started), and removes the files: a quick command
     * is one request in all. Large, only the exit code: the files are
     * downloaded. */
    /* When nothing reads the output before the end
     * (SBX_PLUGIN_EXEC_OUTPUT_AT_END), no tail follows the files: the
     * command runs in the foreground, and the wrapper goes on the moment
     * it ends (a tail notices the end of its --pid only at its next poll,
     * up to 50 ms later). */
    int at_end = (p->flags & SBX_PLUGIN_EXEC_OUTPUT_AT_END) != 0;
    char *q = bad ? NULL : cl_shell_quote(p->script);
    bad = bad || !q
          || cl_buf_printf(&pre, ": >/tmp/.%1$s.out; : >/tmp/.%1$s.err\n"
                           "exec 4>&2 2>/dev/null\n", p->tag) < 0;
    /* No variable is assigned before the command starts (the files are
     * named in full): the caller's environment is the wrapper's, and a key
     * named like one of its variables would reach the command changed. */
    if (!bad && at_end)
        bad = cl_buf_printf(&pre, CL_EXEC_MARK "=%1$s bash -c %2$s sbx <%3$s >/tmp/.%1$s.out "
                            "2>/tmp/.%1$s.err 4>&-; rc=$? o=/tmp/.%1$s.out e=/tmp/.%1$s.err\n",
                            p->tag, q, in) < 0;
    else if (!bad)
        bad = cl_buf_printf(&pre, CL_EXEC_MARK "=%1$s bash -c %2$s sbx <%3$s >/tmp/.%1$s.out "
                            "2>/tmp/.%1$s.err 4>&- & c=$! o=/tmp/.%1$s.out e=/tmp/.%1$s.err\n"
                            "tail -c +1 -s 0.05 --pid=$c -f $o 4>&- & t1=$!\n"
                            "tail -c +1 -s 0.05 --pid=$c -f $e >&4 4>&- & t2=$!\n"
                            "wait $c; rc=$?; wait $t1 $t2\n", p->tag, q, in) < 0;
    bad = bad
          || cl_buf_printf(&pre, "%s%s%sLC_ALL=C f= k= m=\n",
                           p->stdin_fd >= 0 ? "rm -f " : "", p->stdin_fd >= 0 ? in : "",
                           p->stdin_fd >= 0 ? "\n" : "") < 0
          || cl_buf_report_encoder(&pre, RL_INLINE_MAX) < 0
          || cl_buf_printf(&pre, "e $o; x=$f; e $e\n"
                           "if [ -z \"$m\" ]; then printf 'SBX-OUT-%%s %%d\\n%%s\\n%%s\\n' %s $rc "
                           "\"$x\" \"$f\"; exec rm -f $o $e\n"
                           "else printf 'SBX-OUT-%%s %%d\\n' %s $rc; fi\nexit $rc\n",
                           p->tag, p->tag) < 0;
    free(q);
    if (bad || !(script = strdup(pre.data))) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    int oom = 0;
    char *so = NULL;
    /* Without live output, no update stream is read: one hold up to the end. */
    rc = rl_execute(sb, &ctx, script, &code, &so, &oom, at_end ? NULL : &lv, op, NULL);
    rl_live_stop(&lv);
    if (rc == 0 && oom) {
        pthread_mutex_lock(&base->lock);
        p->oom_killed = 1;
        pthread_mutex_unlock(&base->lock);
        free(so);
        goto out;
    }
    int inl = rc == 0 && so ? rl_inline_output(p, &lv, so, &code) : 0;
    free(so);
    if (inl < 0) {
        rc = -1;
        goto fail;
    }
    if (inl)
        goto out;
    /* The output, as raw bytes (the execution's fields are text). */
    for (int fd = 1; rc == 0 && fd <= 2; fd++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/.%s.%s", p->tag, fd == 1 ? "out" : "err");
        cl_live_rest o;
        cl_live_rest_init(&o, &p->base, fd, &lv.r[fd].live);
        cl_resp r = { 0 };
        rc = rl_download(sb, &ctx, path, cl_live_rest_sink, &o, &r, op, NULL);
        if (rc < 0 && r.status == 404 && !rl_is_gone(sb))
            rc = 0;     /* the command removed it */
        else if (rc == 0 || o.differs)
            rc = cl_live_rest_end(&o, "runloop", op);
        cl_resp_clear(&r);
    }
    if (rc == 0) {
        char *rm = cl_printf("rm -f /tmp/.%s.out /tmp/.%s.err", p->tag, p->tag);
        int c2 = 0;
        if (rm)
            rl_execute(sb, &ctx, rm, &c2, NULL, NULL, NULL, op, NULL);
        free(rm);
    }
    if (rc < 0)
        goto fail;
    goto out;
fail:
    if (rl_oom_gone(sb)) {
        /* Ended by the memory limit after it completed or while its output
         * was read: 137 with the OOM flag (CASE-49). */
        pthread_mutex_lock(&base->lock);
        p->oom_killed = 1;
        pthread_mutex_unlock(&base->lock);
        code = 137;
        goto out;
    }
    cl_proc_fail_in(base, &sb->s);
    code = -1;
out:
    rl_live_stop(&lv);
    free(script);
    cl_buf_clear(&pre);
    return code;
}

/* The command line (argv or shell text, the cwd) is a JSON string; the
 * env goes as a file's bytes (issue 16). */
CL_SCRIPT_EXEC_START(rl_exec_start, RL_BACKEND, rl_run_short, rl_exec_run, CL_TEXT_ENV_AS_BYTES)

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin rl_plugin = {
    CL_PLUGIN_HEAD(RL_BACKEND),
    CL_PLUGIN_SLOTS(rl),
    .description = "Runloop devboxes (REST) over libcurl; cpu/memory pick the smallest named "
                   "size that fits, else CUSTOM_SIZE; destroy shuts the devbox down, stop/start "
                   "suspend and resume; output streams as it comes; relative paths are "
                   "taken from the workdir, else the home directory",
    .caps = RL_CAPS,
    .sandbox_free = cl_sandbox_free_slot,
    .snapshot = rl_snapshot,
    CL_SCRIPT_PROC_SLOTS,
    .exec_end_info = cl_script_exec_end_info,
    .stop = rl_stop,
    .start = rl_start,
};

CL_PLUGIN_EXPORT(&rl_plugin)
