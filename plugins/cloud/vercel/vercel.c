/*
 * vercel.c — libsbx-vercel.so, the `vercel` backend: Vercel Sandbox
 * (Firecracker microVMs) over its v1 REST API, on the hosted-provider base
 * (plugins/cloud/base/cloud.h).
 *
 * Contract: the Vercel section of the provider contracts (vercel/sandbox
 * tag @vercel/sandbox@1.10.2, packages/vercel-sandbox/src/api-client/).
 *
 *  - Credentials: VERCEL_OIDC_TOKEN (a JWT whose payload, read unverified,
 *    names the team as owner_id and the project as project_id), else
 *    VERCEL_TOKEN with VERCEL_TEAM_ID and VERCEL_PROJECT_ID (the client
 *    config's "team_id" and "project_id" before them). Sent as
 *    "Authorization: Bearer ..."; every request carries ?teamId=. Base URL:
 *    the client config's "api_url", else VERCEL_API_URL, else
 *    https://vercel.com/api.
 *  - create: POST /v1/sandboxes with projectId. cpu and memory_mb pick
 *    resources.vcpus: the fewest of 1, 2, 4, 8 that hold both (Vercel gives
 *    2048 MB per vCPU; the vCPUs chosen are logged); more than 8 vCPUs, or
 *    memory_mb outside 1024 to 16384 MB, is a configuration error naming
 *    the value (with min_mb 1024, CASE-49: a request below half of one
 *    vCPU's memory is refused, not given a limit many times larger);
 *    disk_mb, gpu, image and app_name are configuration errors; template
 *    is the runtime (node22, node24, node26, python3.13); snapshot_id → source {type: snapshot};
 *    allow_internet=0 → networkPolicy {mode: deny-all}. The create's env is
 *    the sandbox's env (the provider keeps it). The provider-side lifetime
 *    is always set: timeout (ms) is the caller's lifetime plus
 *    VC_LIFETIME_MARGIN_S, else VC_DEFAULT_LIFETIME_S; a lifetime past what
 *    a create takes (VC_MAX_CREATE_S) is created at that and extended by
 *    extend-timeout for the rest. Readiness: GET until status running.
 *  - Ownership: v1 sandboxes carry no labels, so the plugin writes its
 *    labels (CL_META_*) as JSON into VC_OWNER_FILE in the sandbox right
 *    after create; list_owned, destroy_by_id and the reaper of lost creates
 *    list the project's sandboxes (every page, CASE-35) and read that file
 *    in each running one. The create token is also in the sandbox's env
 *    (VC_TOKEN_ENV): the reaper of lost creates (CASE-20) asks a running
 *    sandbox without the file for it by a command.
 *  - exec: POST /v1/sandboxes/{id}/cmd {"command": "perl", "args": ["-e",
 *    CL_OUTPUT_ENCODER, "bash", "-c", SCRIPT], "wait": false} gives the
 *    command's id; GET …/cmd/{cmdId}/logs streams its output as it comes
 *    ({"stream", "data"} lines, text: the encoder makes any bytes text and
 *    the plugin undoes it, so output is exact and live) and ends with the
 *    command, an {"stream":"error"} line meaning the sandbox stopped
 *    (gone); a cut stream is read again with the bytes already delivered
 *    skipped (as long as the command runs, when the stream was held a
 *    while first: a quiet command behind a proxy that ends idle
 *    connections completes, CASE-52); GET …/cmd/{cmdId}?wait=true gives the exit code. Three
 *    requests per exec; two when nobody reads the output before the end
 *    (SBX_PLUGIN_EXEC_OUTPUT_AT_END): the cmd is run with "wait": true, its
 *    NDJSON answer ending with the exit code, then the logs read whole (an
 *    answer cut after its start goes on as above).
 *    Per-call env values and stdin are written as files first (never in
 *    the command line); every process of the command carries
 *    CL_EXEC_MARK=<its tag>, so exec_kill signals all of them. The
 *    script is a JSON string: an argument, shell command or cwd that is
 *    not UTF-8 is invalid_argument naming it, before anything is sent
 *    (issue 16); env values go as a file's bytes, any byte kept.
 *  - files: fs/write takes a gzipped tar (written here: ustar entries,
 *    GNU long names, deflate stored blocks), fs/read answers raw bytes or
 *    404; listings by a command (v1 has no list-dir). Relative paths are
 *    taken from the workdir, else from /vercel/sandbox (Vercel's cwd).
 *    fs/read's path is in a JSON body, and the write's chmod and the
 *    listing are commands: a path that is not UTF-8 is invalid_argument
 *    for read_file, write_file and list_files, before anything is sent.
 *  - destroy: POST stop (v1 has no delete; stop is terminal); a sandbox
 *    stopped already is destroyed. snapshot: POST snapshot, which stops the
 *    sandbox (Vercel says so): the sandbox is gone afterwards; a create
 *    with the snapshot's id starts from it.
 *  - A sandbox the provider no longer has (404, or status stopping,
 *    stopped, failed or aborted) is not_found with reason "gone" (CASE-32),
 *    its status in the context; every later call fails at once.
 *  - v2's named, persistent sandboxes (see the README) are not used here.
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
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#define VC_BACKEND "vercel"
#define VC_DEFAULT_URL "https://vercel.com/api"
#define VC_CWD "/vercel/sandbox"            /* Vercel's default cwd */
#define VC_OWNER_FILE "/tmp/.sbx-owner.json" /* the plugin's labels in the sandbox */
#define VC_TOKEN_ENV "SBX_CREATE_TOKEN"     /* the create token in the sandbox's env */
#define VC_STATE_VERSION 1
#define VC_LOGS_TRIES 4     /* readings of a logs stream cut within VC_LOGS_HELD_S */
#define VC_LOGS_HELD_S 1.0  /* a logs stream held this long and cut is read again */
#define VC_WAIT_S 300.0                     /* bound on waiting for running */
#define VC_DEFAULT_LIFETIME_S 3600          /* timeout when none was set */
#define VC_LIFETIME_MARGIN_S 5              /* provider end after the caller's lifetime */
#define VC_MAX_CREATE_S 2700                /* the longest create timeout (45 min) */
#define VC_MAX_LIFETIME_S 18000             /* the longest lifetime (5 h, Pro) */
#define VC_MB_PER_VCPU 2048
#define VC_MIN_MEMORY_MB 1024               /* the least memory_mb taken (1 vCPU) */

#define VC_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_SNAPSHOT      \
                 | SBX_CAP_RESUME | SBX_CAP_ISOLATION | SBX_CAP_NETWORK_POLICY            \
                 | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT | SBX_CAP_IMAGE               \
                 | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED | SBX_CAP_BACKGROUND)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, base URL, reaper (provider.h) */
    char *team;         /* teamId, percent-encoded */
    char *project;      /* projectId */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id and the gone flag (provider.h) */
};

typedef cl_script_proc vc_proc;  /* provider.h */

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define vc_is_gone(sb) cl_gone_get(&(sb)->s.gone)
#define vc_mark_gone(sb) cl_gone_set(&(sb)->s.gone)
#define vc_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), VC_BACKEND, (sb)->s.id, \
                                              (error))
#define vc_refuse(error, option, value, why) \
    cl_refuse((error), VC_BACKEND, (option), (value), (why))

#define vc_status(j) cl_json_str_or((j), "status", "unknown")

/* Ended, or ending: nothing more runs in it. */
static const char *const vc_dead[] = { "stopped", "failed", "aborted", "stopping", NULL };

static int vc_terminal(const char *status)
{
    return cl_str_in(status, vc_dead);
}

/* The gone error of sandbox @id, with its status from @sandbox (may be
 * NULL). */
static sbx_error *vc_gone_error(sbx_error **error, const char *op, const char *id,
                                json_object *sandbox)
{
    static const char *const keys[] = { "status", NULL };
    return cl_gone_error_view(error, op, VC_BACKEND, id, sandbox, keys);
}

/* "@api/v1/sandboxes[/ID]@suffix" with ?teamId= (or &teamId= when @suffix
 * holds a query): a new string, NULL on no memory. @id NULL: the
 * collection. */
static char *vc_url(struct sbx_plugin_client *c, const char *id, const char *suffix)
{
    char *u = id ? cl_item_url(c->cl.api, "v1/sandboxes", id, suffix)
                 : cl_printf("%s/v1/sandboxes%s", c->cl.api, suffix);
    if (!u)
        return NULL;
    char *out = cl_printf("%s%cteamId=%s", u, strchr(u, '?') ? '&' : '?', c->team);
    free(u);
    return out;
}

/* GET /v1/sandboxes/{id}: its "sandbox" object (a new reference), or NULL
 * (*@status: 0 when no answer, 404 when the provider has no such sandbox). */
static json_object *vc_get(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                           long *status, const char *op, sbx_error **error)
{
    char *url = vc_url(c, id, "");
    json_object *j = cl_get_json(c->cl.http, ctx, url, status, op, "get the sandbox", error);
    free(url);
    json_object *s = j ? cl_json_path(j, "sandbox", NULL) : NULL;
    if (j && !s) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "vercel get answered without a sandbox");
        *status = 0;
    }
    if (s)
        json_object_get(s);
    json_object_put(j);
    return s;
}

/* POST @id@suffix with @body (NULL: {}): 0 with the answer in @r (any
 * status), -1 when none came. */
static int vc_post(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                   const char *suffix, json_object *body, cl_idempotency idem, cl_resp *r,
                   const char *op, const char *what, sbx_error **error)
{
    return cl_post_json(c->cl.http, ctx, vc_url(c, id, suffix), body, idem, r, op, what, error);
}

/* How the provider's view of a sandbox is got and read: resume, and the
 * look at a sandbox whose call was refused (provider.h). */
static const cl_resume_spec vc_spec = { VC_BACKEND, VC_STATE_VERSION, "sandbox_id", vc_get,
                                        "status", vc_dead, vc_gone_error };

/* How a refused call on a sandbox is read: every refusal is looked into
 * (an ended sandbox refuses with 404 or 410, or another status). */
static const cl_call_spec vc_calls = { &vc_spec, CL_CALLS_LOOK_ANY | CL_CALLS_FILE_400 };

/* A call on sandbox @sb (the request @rq, its url made here from @suffix):
 * 0 with a 2xx answer in @r, -1 otherwise. A 404 or 400 with @file_call
 * set is a file's, unless the sandbox itself is gone: then no error is
 * stored (the caller names the file). */
static int vc_call(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, cl_req *rq,
                   const char *suffix, cl_resp *r, int file_call, const char *op,
                   sbx_error **error)
{
    return cl_sandbox_request(&sb->s, sb->s.c->cl.http, &vc_calls, ctx, rq,
                              vc_url(sb->s.c, sb->s.id, suffix), file_call ? CL_CALL_FILE : 0, r,
                              op, error);
}

/* ------------------------------------------------------------------------ */
/* Waiting for running                                                       */
/* ------------------------------------------------------------------------ */

/* GET until the sandbox runs (cl_sandbox_wake()), within VC_WAIT_S and the
 * call's deadline. A terminal sandbox is gone (with its status). */
static const cl_wake_spec vc_running = { &vc_spec, "status", "unknown", "running", NULL,
                                         VC_WAIT_S, NULL, NULL };
#define vc_wait_running(sb, ctx, op, error) cl_sandbox_wake(&(sb)->s, (ctx), &vc_running, (op), \
                                                            (error))

/* ------------------------------------------------------------------------ */
/* Running a command                                                         */
/* ------------------------------------------------------------------------ */

typedef struct vc_cmd_lines {
    int64_t code;
    int have_code;
    int stopped;        /* an {"error"} line: the sandbox stopped */
    char *id;           /* the command's id */
} vc_cmd_lines;

static int vc_cmd_line(void *ud, json_object *o)
{
    vc_cmd_lines *l = ud;
    json_object *cmd = cl_json_path(o, "command", NULL);
    if (cl_json_path(o, "error", NULL)) {
        l->stopped = 1;
        return 1;
    }
    if (!cmd)
        return 0;
    const char *id = cl_json_str(cmd, "id");
    if (id && !l->id)
        l->id = strdup(id);
    if (cl_json_int(cmd, "exitCode", &l->code) == 1) {
        l->have_code = 1;
        return 1;   /* the final line */
    }
    return 0;
}

/* A logs line: its stdout text appended to @ud (a cl_buf). */
static int vc_log_line(void *ud, json_object *o)
{
    cl_buf *out = ud;
    const char *s = cl_json_str(o, "stream");
    const char *d = cl_json_str(o, "data");
    if (s && d && strcmp(s, "stdout") == 0)
        return cl_buf_append(out, d, strlen(d)) < 0 ? -1 : 0;
    return 0;
}

/* Runs @script with bash -c on @sb (POST cmd, wait true) until @ctx's
 * deadline or cancel. 0 with its exit status in *@code (and its stdout
 * text in *@out, a new string, when @out is not NULL), or -1 with *@error
 * set. */
static int vc_execute(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                      int *code, char **out, const char *op, sbx_error **error)
{
    json_object *b = json_object_new_object(), *args = json_object_new_array();
    json_object_array_add(args, json_object_new_string("-c"));
    json_object_array_add(args, json_object_new_string(script));
    json_object_object_add(b, "command", json_object_new_string("bash"));
    json_object_object_add(b, "args", args);
    json_object_object_add(b, "cwd", json_object_new_string(VC_CWD));
    json_object_object_add(b, "wait", json_object_new_boolean(1));
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    vc_cmd_lines l = { 0 };
    cl_ndjson nd;
    cl_ndjson_init(&nd, vc_cmd_line, &l);
    cl_req rq = { .method = "POST", .body = bs, .body_len = strlen(bs), .sink = cl_ndjson_sink,
                  .sink_ud = &nd, .idempotent = CL_UNSAFE, .what = "run the command" };
    cl_resp r = { 0 };
    int rc = vc_call(sb, ctx, &rq, "/cmd", &r, 0, op, error);
    if (rc == 0 && cl_ndjson_end(&nd, op, error) < 0)
        rc = -1;
    if (rc == 0 && (l.stopped || !l.have_code)) {
        json_object *j = NULL;
        if (cl_sandbox_ended(sb->s.c, ctx, &vc_spec, sb->s.id, op, &j) || l.stopped) {
            vc_mark_gone(sb);
            vc_gone_error(error, op, sb->s.id, j);
        } else {
            cl_fail(error, SBX_ERROR_CONNECTION, op, "vercel command ended without an "
                    "exitCode");
        }
        json_object_put(j);
        rc = -1;
    }
    if (rc == 0)
        *code = (int)(l.code & 0xff);
    if (rc == 0 && out) {
        cl_buf text = { 0 };
        char *e = l.id ? cl_url_escape(l.id) : NULL;
        char *suffix = e ? cl_printf("/cmd/%s/logs", e) : NULL;
        cl_ndjson lg;
        cl_ndjson_init(&lg, vc_log_line, &text);
        cl_req lq = { .method = "GET", .sink = cl_ndjson_sink, .sink_ud = &lg,
                      .idempotent = CL_SAFE, .what = "read the command's logs" };
        cl_resp r2 = { 0 };
        rc = suffix ? vc_call(sb, ctx, &lq, suffix, &r2, 0, op, error) : -1;
        if (!suffix)
            cl_fail(error, SBX_ERROR_CONNECTION, op, "vercel command has no id");
        /* The logs stream has no final line: it ends with the command. */
        if (rc == 0 && lg.line.len)
            cl_ndjson_feed(&lg, "\n", 1, op, NULL);
        if (rc == 0 && cl_buf_append(&text, "", 1) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            rc = -1;
        }
        if (rc == 0)
            *out = text.data;
        else
            cl_buf_clear(&text);
        cl_ndjson_clear(&lg);
        cl_resp_clear(&r2);
        free(suffix);
        free(e);
    }
    cl_ndjson_clear(&nd);
    free(l.id);
    json_object_put(b);
    cl_resp_clear(&r);
    return rc;
}

static int vc_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    return vc_execute(sb, ctx, cmd, code, NULL, op, error);
}

/* ------------------------------------------------------------------------ */
/* Files: fs/write (a gzipped tar) and fs/read (raw bytes, CASE-17)          */
/* ------------------------------------------------------------------------ */

/* The error of a file call's answer @r (provider.h). */
#define vc_file_fail(sb, r, op, path, what, error) \
    cl_file_fail(&(sb)->s, (sb)->s.c->cl.http, (r), 0, (op), (path), (what), (error))

static int vc_download(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                       cl_sink_fn sink, void *ud, cl_resp *r, const char *op, sbx_error **error)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "path", json_object_new_string(path));
    json_object_object_add(b, "cwd", json_object_new_string("/"));
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = bs, .body_len = strlen(bs), .sink = sink,
                  .sink_ud = ud, .idempotent = CL_SAFE, .what = "read the file" };
    int rc = vc_call(sb, ctx, &rq, "/fs/read", r, 1, op, error);
    json_object_put(b);
    return rc;
}

/* Relative paths from the workdir, else from Vercel's cwd. */
static int vc_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    if (cl_json_text_check(NULL, path, "read_file", error) < 0)
        return -1;
    return cl_read_file_by(sb, sb->s.c->cl.http, ctx, sb->s.workdir ? sb->s.workdir : VC_CWD, path,
                           vc_download, fd, error);
}

static uint32_t vc_crc_table[256];
static pthread_once_t vc_crc_once = PTHREAD_ONCE_INIT;

static void vc_crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        vc_crc_table[i] = c;
    }
}

/* The CRC-32 (IEEE) of gzip, updated over @n bytes. Thread-safe. */
static uint32_t vc_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
    pthread_once(&vc_crc_once, vc_crc_init);
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = vc_crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* One 512-byte tar header: @name (at most 100 bytes), @size, @mode,
 * @type ('0' file, 'L' GNU long name). */
static void vc_tar_header(unsigned char h[512], const char *name, size_t size, uint32_t mode,
                          char type)
{
    memset(h, 0, 512);
    memcpy(h, name, strlen(name) > 100 ? 100 : strlen(name));
    snprintf((char *)h + 100, 8, "%07o", mode & 07777);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)time(NULL));
    memset(h + 148, ' ', 8);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar  ", 8);      /* GNU magic and version */
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* The tar of one file @name (relative to /) holding @data, gzipped with
 * stored deflate blocks, appended to @out. */
static int vc_targz(cl_buf *out, const char *name, const cl_buf *data, uint32_t mode)
{
    cl_buf tar = { 0 };
    unsigned char h[512], zero[1024] = { 0 };
    size_t nl = strlen(name);
    int bad = 0;
    if (nl > 100) {
        vc_tar_header(h, "././@LongLink", nl + 1, 0644, 'L');
        bad = cl_buf_append(&tar, h, 512) < 0 || cl_buf_append(&tar, name, nl + 1) < 0
              || cl_buf_append(&tar, zero, (512 - (nl + 1) % 512) % 512) < 0;
    }
    vc_tar_header(h, name, data->len, mode, '0');
    bad = bad || cl_buf_append(&tar, h, 512) < 0
          || (data->len && cl_buf_append(&tar, data->data, data->len) < 0)
          || cl_buf_append(&tar, zero, (512 - data->len % 512) % 512) < 0
          || cl_buf_append(&tar, zero, 1024) < 0;
    static const unsigned char gz[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255 };
    bad = bad || cl_buf_append(out, gz, sizeof gz) < 0;
    const unsigned char *p = (const unsigned char *)tar.data;
    size_t left = tar.len;
    while (!bad) {
        size_t n = left > 65535 ? 65535 : left;
        unsigned char bh[5] = { left == n ? 1 : 0, (unsigned char)(n & 0xff),
                                (unsigned char)(n >> 8), (unsigned char)(~n & 0xff),
                                (unsigned char)((~n >> 8) & 0xff) };
        bad = cl_buf_append(out, bh, 5) < 0 || cl_buf_append(out, p, n) < 0;
        p += n;
        left -= n;
        if (left == 0)
            break;
    }
    uint32_t crc = vc_crc32(0, (const unsigned char *)tar.data, tar.len);
    uint32_t isize = (uint32_t)tar.len;
    unsigned char tail[8] = { crc & 0xff, (crc >> 8) & 0xff, (crc >> 16) & 0xff, crc >> 24,
                              isize & 0xff, (isize >> 8) & 0xff, (isize >> 16) & 0xff,
                              isize >> 24 };
    bad = bad || cl_buf_append(out, tail, 8) < 0;
    cl_buf_clear(&tar);
    return bad ? -1 : 0;
}

/* Writes @data as @path (provider form, absolute) with @mode by fs/write. */
static int vc_upload_buf(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         const cl_buf *data, uint32_t mode, const char *shown, const char *op,
                         sbx_error **error)
{
    cl_buf body = { 0 };
    while (*path == '/')
        path++;
    if (vc_targz(&body, path, data, mode ? mode : 0644) < 0) {
        cl_buf_clear(&body);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    static const char *const hdrs[] = { "x-cwd: /", NULL };
    cl_req rq = { .method = "POST", .headers = hdrs, .content_type = "application/gzip",
                  .body = body.data, .body_len = body.len, .idempotent = CL_SAFE,
                  .what = "write the file" };
    cl_resp r = { 0 };
    int rc = vc_call(sb, ctx, &rq, "/fs/write", &r, 1, op, error);
    if (rc < 0 && r.status)
        vc_file_fail(sb, &r, op, shown, "directory for file", error);
    cl_resp_clear(&r);
    cl_buf_clear(&body);
    return rc;
}

/* Reads @fd to its end into @out. */
static int vc_slurp(int fd, cl_buf *out, const char *shown, const char *op, sbx_error **error)
{
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "cannot read the data for %s: %s",
                    shown, strerror(errno));
            return -1;
        }
        if (n == 0)
            return 0;
        if (cl_buf_append(out, chunk, (size_t)n) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
    }
}

/* What @fd holds, read to its end, uploaded to @path with @mode. */
static int vc_upload_mode(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                          const char *path, int fd, uint32_t mode, const char *shown,
                          const char *op, sbx_error **error)
{
    cl_buf data = { 0 };
    int rc = vc_slurp(fd, &data, shown, op, error);
    if (rc == 0)
        rc = vc_upload_buf(sb, ctx, path, &data, mode, shown, op, error);
    cl_buf_clear(&data);
    return rc;
}

/* vc_upload_mode() private to its owner (0600): a command's stdin. */
static int vc_upload(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                     int fd, const char *shown, const char *op, sbx_error **error)
{
    return vc_upload_mode(sb, ctx, path, fd, 0600, shown, op, error);
}

static int vc_upload_bytes(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           const char *path, const char *data, size_t n, const char *op,
                           sbx_error **error)
{
    cl_buf b = { 0 };
    int rc = -1;
    if (cl_buf_append(&b, data, n) < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else
        rc = vc_upload_buf(sb, ctx, path, &b, 0600, path, op, error);
    cl_buf_clear(&b);
    return rc;
}

/* vc_upload_mode() readable by all (0644), its mode set after: a file
 * write_file writes. */
static int vc_upload_file(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                          const char *path, int fd, const char *shown, const char *op,
                          sbx_error **error)
{
    return vc_upload_mode(sb, ctx, path, fd, 0644, shown, op, error);
}

static int vc_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                         uint32_t mode, sbx_error **error)
{
    /* The tar carries any path, the chmod after it (a command) not:
     * refused before the upload, so no file is left. */
    if (cl_json_text_check(NULL, path, "write_file", error) < 0)
        return -1;
    return cl_write_file(sb, ctx, sb->s.workdir ? sb->s.workdir : VC_CWD, path, fd, mode,
                         vc_upload_file, vc_run_short, error);
}

/* The listing by a command: "TYPE SIZE NAME" lines of find -printf;
 * relative paths as vc_read_file() takes them. */
static int vc_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    if (cl_json_text_check(NULL, path, "list_files", error) < 0)
        return -1;
    return cl_list_files_run(sb, ctx, sb->s.workdir ? sb->s.workdir : VC_CWD, path, vc_execute, fn,
                             ud, error);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

/* POST stop: 0 when stopped, stopping or gone already. */
static int vc_stop_id(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                      const char *op, sbx_error **error)
{
    cl_resp r = { 0 };
    int rc = vc_post(c, ctx, id, "/stop", NULL, CL_SAFE, &r, op, "stop the sandbox", error);
    return cl_stop_answer(c, ctx, &vc_spec, id, rc, &r, 410, op, "stop the sandbox", error);
}

/* Walks every page of GET /v1/sandboxes?project= (until= the page's
 * pagination.next while it is set, CASE-35), calling @fn on each sandbox
 * that is not ended; @fn returns non-zero to stop. */
typedef int (*vc_each_fn)(void *ud, json_object *sandbox);

static int vc_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, vc_each_fn fn, void *ud,
                   const char *op, sbx_error **error)
{
    int64_t until = -1;
    int rc = 0;
    char *proj = cl_url_escape(c->project);
    for (int page = 0; proj && page < 100000; page++) {
        char *q = until >= 0 ? cl_printf("?project=%s&limit=100&until=%lld", proj,
                                         (long long)until)
                             : cl_printf("?project=%s&limit=100", proj);
        char *url = q ? vc_url(c, NULL, q) : NULL;
        free(q);
        json_object *items, *j = cl_list_page(c->cl.http, ctx, url, c->cl.api, "sandbox",
                                              "sandboxes", &items, op, "list sandboxes", error);
        if (!j) {
            rc = -1;
            break;
        }
        size_t n = json_object_array_length(items);
        int stop = 0;
        for (size_t i = 0; i < n && !stop; i++) {
            json_object *it = json_object_array_get_idx(items, i);
            if (cl_json_str(it, "id") && !vc_terminal(vc_status(it)))
                stop = fn(ud, it) != 0;
        }
        int64_t next = -1;
        int more = cl_json_int(cl_json_path(j, "pagination", NULL), "next", &next) == 1 && n > 0;
        json_object_put(j);
        if (stop || !more || (until >= 0 && next >= until))
            break;
        until = next;
    }
    if (!proj) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        rc = -1;
    }
    free(proj);
    return rc;
}

static int vc_buf_sink(void *ud, const char *p, size_t n)
{
    return cl_buf_append(ud, p, n) < 0 ? -1 : 0;
}

/* The labels in VC_OWNER_FILE of running sandbox @id: a new object, or
 * NULL when it has none (or cannot be read). */
static json_object *vc_owner(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                             const char *op)
{
    struct sbx_plugin_sandbox tmp;
    if (cl_sandbox_init(&tmp.s, id) < 0)
        return NULL;
    tmp.s.c = c;
    cl_buf b = { 0 };
    cl_resp r = { 0 };
    json_object *j = NULL;
    if (vc_download(&tmp, ctx, VC_OWNER_FILE, vc_buf_sink, &b, &r, op, NULL) == 0
        && cl_buf_append(&b, "", 1) == 0)
        j = json_tokener_parse(b.data);
    if (j && !json_object_is_type(j, json_type_object)) {
        json_object_put(j);
        j = NULL;
    }
    cl_buf_clear(&b);
    cl_resp_clear(&r);
    cl_sandbox_clear(&tmp.s);
    return j;
}

typedef struct vc_ids {
    cl_token_ids t;     /* first member */
    struct sbx_plugin_client *c;
    const sbx_call_ctx *ctx;
} vc_ids;

/* The create token in running sandbox @id's env (VC_TOKEN_ENV), for a
 * sandbox whose create was not answered (no label file): a new string, or
 * NULL. */
static char *vc_env_token(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id)
{
    struct sbx_plugin_sandbox tmp;
    if (cl_sandbox_init(&tmp.s, id) < 0)
        return NULL;
    tmp.s.c = c;
    char *out = NULL;
    int code = -1;
    if (vc_execute(&tmp, ctx, "printf %s \"$" VC_TOKEN_ENV "\"", &code, &out, "create", NULL) < 0
        || code != 0) {
        free(out);
        out = NULL;
    }
    cl_sandbox_clear(&tmp.s);
    return out;
}

static int vc_id_one(void *ud, json_object *it)
{
    vc_ids *s = ud;
    const char *id = cl_json_str(it, "id");
    int running = strcmp(vc_status(it), "running") == 0;
    json_object *own = running ? vc_owner(s->c, s->ctx, id, "create") : NULL;
    char *etok = running && !own ? vc_env_token(s->c, s->ctx, id) : NULL;
    cl_token_ids_match(&s->t, own ? cl_json_str(own, CL_META_TOKEN) : etok, id);
    json_object_put(own);
    free(etok);
    return 0;
}

/* The reaper's look-up: the sandboxes whose labels carry create token
 * @token. */
static int vc_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                         sbx_error **error)
{
    vc_ids s = { { token, { 0 } }, ud, ctx };
    int rc = vc_list(ud, ctx, vc_id_one, &s, "create", error);
    return cl_ids_finish(&s.t.ids, rc, ids, "create", error);
}

CL_SETUP(vc_setup, VC_BACKEND)

static void vc_client_clear(sbx_plugin_client *c)
{
    free(c->team);
    free(c->project);
}

/* The payload of JWT @tok (unverified): a new object, or NULL. */
static json_object *vc_jwt_payload(const char *tok)
{
    const char *a = strchr(tok, '.');
    const char *b = a ? strchr(a + 1, '.') : NULL;
    if (!b)
        return NULL;
    cl_buf out = { 0 };
    json_object *j = NULL;
    if (cl_base64_decode(a + 1, (size_t)(b - a - 1), &out) == 0
        && cl_buf_append(&out, "", 1) == 0)
        j = json_tokener_parse(out.data);
    cl_buf_clear(&out);
    if (j && !json_object_is_type(j, json_type_object)) {
        json_object_put(j);
        j = NULL;
    }
    return j;
}

static const char *const vc_key_envs[] = { "VERCEL_OIDC_TOKEN", "VERCEL_TOKEN", NULL };

static const cl_client_spec vc_client_spec = {
    .provider = VC_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .url_key = "api_url", .url_env = "VERCEL_API_URL", .url_default = VC_DEFAULT_URL,
    .key_envs = vc_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .key_required = 1,
    .find = vc_find_token, .del = vc_stop_id, .clear = vc_client_clear,
};

static int vc_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg, *jwt = NULL;
    struct sbx_plugin_client *c = cl_client_new(&vc_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    /* team_id and project_id, when given, are non-empty strings (read by
     * cl_setting below). */
    static const cl_option str_opts[] = { { "team_id", CL_OPTION_STRING, 0, NULL },
                                          { "project_id", CL_OPTION_STRING, 0, NULL },
                                          { NULL, 0, 0, NULL } };
    if (cl_client_options(cfg, str_opts, error) < 0)
        goto fail;
    /* The OIDC token names its team and project; an access token needs them
     * given. */
    const char *oidc = getenv("VERCEL_OIDC_TOKEN");
    const char *team = NULL, *project = NULL;
    if (oidc && *oidc) {
        jwt = vc_jwt_payload(oidc);
        if (!jwt) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "vercel backend: "
                               "VERCEL_OIDC_TOKEN is not a JWT"), "option",
                       "VERCEL_OIDC_TOKEN");
            goto fail;
        }
        team = cl_setting(cfg, "team_id", NULL, cl_json_str(jwt, "owner_id"));
        project = cl_setting(cfg, "project_id", NULL, cl_json_str(jwt, "project_id"));
    } else {
        team = cl_setting(cfg, "team_id", "VERCEL_TEAM_ID", NULL);
        project = cl_setting(cfg, "project_id", "VERCEL_PROJECT_ID", NULL);
    }
    if (!team || !project) {
        const char *missing = !team ? "team_id" : "project_id";
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "vercel backend: no %s: set "
                           "VERCEL_OIDC_TOKEN, or VERCEL_TOKEN with VERCEL_TEAM_ID and "
                           "VERCEL_PROJECT_ID (or the client config's team_id and "
                           "project_id)", missing), "option", missing);
        goto fail;
    }
    if (!(c->team = cl_url_escape(team)) || !(c->project = strdup(project))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    json_object_put(jwt);
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    json_object_put(jwt);
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(vc_probe, VC_CAPS)

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

static const char *const vc_runtimes[] = { "node22", "node24", "node26", "python3.13", NULL };

/* The create body; *@extend_s: seconds of lifetime to add by extend-timeout
 * once it runs (0: none); @labels: the labels to write into VC_OWNER_FILE. */
static json_object *vc_create_body(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                   const sbx_plugin_create_request *rq, long long *extend_s,
                                   json_object **labels, sbx_error **error)
{
    uint64_t set = rq->set_fields;
    *extend_s = 0;
    *labels = NULL;
    if (cl_workdir_check(VC_BACKEND, rq->workdir, error) < 0)
        return NULL;
    /* No backend options: any key is unknown (its "known" list empty). */
    static const cl_option none[] = { { NULL, 0, 0, NULL } };
    if (cl_backend_options(rq, VC_BACKEND, none, error) < 0)
        return NULL;
    json_object *b = json_object_new_object();
    json_object_object_add(b, "projectId", json_object_new_string(c->project));
    static const cl_unsupported unsupported[] = {
        { "app_name", "Vercel has no apps" },
        { "gpu", "Vercel sandboxes have no GPUs" },
        { "disk_mb", "Vercel sandboxes have a fixed disk" },
        { "image", "Vercel starts sandboxes from a runtime: give node22, node24, node26 or "
                   "python3.13 as the template" },
        { NULL, NULL },
    };
    if (cl_refuse_options(rq, VC_BACKEND, unsupported, error) < 0)
        goto fail;
    if (rq->template_name && rq->snapshot_id) {
        vc_refuse(error, "template", rq->template_name, "give a runtime or a snapshot, not "
                  "both");
        goto fail;
    }
    if (rq->template_name) {
        int ok = 0;
        for (int i = 0; vc_runtimes[i]; i++)
            ok = ok || strcmp(vc_runtimes[i], rq->template_name) == 0;
        if (!ok) {
            vc_refuse(error, "template", rq->template_name, "Vercel's runtimes are node22, "
                      "node24, node26 and python3.13");
            goto fail;
        }
        json_object_object_add(b, "runtime", json_object_new_string(rq->template_name));
    }
    if (rq->snapshot_id) {
        json_object *src = json_object_new_object();
        json_object_object_add(src, "type", json_object_new_string("snapshot"));
        json_object_object_add(src, "snapshotId", json_object_new_string(rq->snapshot_id));
        json_object_object_add(b, "source", src);
    }
    static const cl_limit limits[] = {
        { "cpu", 0, 8, 0, CL_LIMIT_ABOVE, "Vercel takes more than 0 and at most 8 vCPUs", NULL,
          "max", NULL },
        { "memory_mb", VC_MIN_MEMORY_MB, 8 * VC_MB_PER_VCPU, 0, 0, "Vercel gives 2048 MB per "
          "vCPU: from 1024 MB (1 vCPU) to 16384 MB (8 vCPUs)", "min_mb", "max_mb", NULL },
        { "timeout_secs", 0, VC_MAX_LIFETIME_S, 0, CL_LIMIT_ABOVE, "Vercel sandboxes live more "
          "than 0 and at most 18000 s (5 h)", NULL, NULL, NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    if (cl_limits_check(rq, VC_BACKEND, limits, error) < 0)
        goto fail;
    double cpu = set & SBX_OPTION_CPU ? rq->cpu : 0;
    long long mem = set & SBX_OPTION_MEMORY_MB ? rq->memory_mb : 0;
    /* vCPUs: the fewest of 1, 2, 4, 8 that hold cpu and memory. */
    if (cpu > 0 || mem > 0) {
        int v = 1;
        while (v < 8 && (v < cpu || (long long)v * VC_MB_PER_VCPU < mem))
            v *= 2;
        json_object *res = json_object_new_object();
        json_object_object_add(res, "vcpus", json_object_new_int(v));
        json_object_object_add(b, "resources", res);
        CL_LOG(SBX_LOG_INFO, "create: cpu %g, memory %lld MB: %d vCPUs (%d MB)", cpu, mem, v,
               v * VC_MB_PER_VCPU);
    }
    if (!rq->allow_internet) {
        json_object *pol = json_object_new_object();
        json_object_object_add(pol, "mode", json_object_new_string("deny-all"));
        json_object_object_add(b, "networkPolicy", pol);
    }
    /* The provider-side lifetime, always (CASE-33): ms. */
    long long t = VC_DEFAULT_LIFETIME_S;
    if (set & SBX_OPTION_TIMEOUT_SECS)
        t = (long long)ceil(rq->timeout_secs) + VC_LIFETIME_MARGIN_S;
    if (t > VC_MAX_CREATE_S) {
        *extend_s = t - VC_MAX_CREATE_S;
        t = VC_MAX_CREATE_S;
    }
    json_object_object_add(b, "timeout", json_object_new_int64(t * 1000));
    json_object *env = cl_env_object(rq->env);
    if (ctx && ctx->create_token)
        json_object_object_add(env, VC_TOKEN_ENV, json_object_new_string(ctx->create_token));
    json_object_object_add(b, "env", env);
    *labels = cl_meta_labels(ctx, VC_BACKEND, rq->expires_at > 0
                                              ? rq->expires_at
                                              : cl_wallclock() + (double)(t + *extend_s));
    return b;
fail:
    json_object_put(b);
    return NULL;
}

static int vc_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    long long extend_s = 0;
    json_object *labels = NULL;
    json_object *body = vc_create_body(c, ctx, rq, &extend_s, &labels, error), *j = NULL;
    if (!body)
        return -1;
    char *url = vc_url(c, NULL, "");
    int rc = -1;
    struct sbx_plugin_sandbox *sb = NULL;
    const char *id = NULL;
    if (!(j = cl_create_post(c->cl.http, c->cl.reaper, ctx, url, body, "sandbox.id", "a sandbox id",
                             "create the sandbox", &id, error)))
        goto out;
    sb = cl_sandbox_new(sizeof(*sb), c, id, NULL);
    if (!sb || vc_wait_running(sb, ctx, op, error) < 0) {
        cl_create_undo(sb, c, vc_stop_id, id, sb != NULL, NULL, op, error);
        goto out;
    }
    const char *ls = json_object_to_json_string_ext(labels, JSON_C_TO_STRING_PLAIN);
    if (vc_upload_bytes(sb, ctx, VC_OWNER_FILE, ls, strlen(ls), op, error) < 0)
        goto undo;
    if (extend_s > 0) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "duration", json_object_new_int64(extend_s * 1000));
        cl_resp r2 = { 0 };
        const char *es = json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN);
        cl_req xq = { .method = "POST", .body = es, .body_len = strlen(es),
                      .idempotent = CL_UNSAFE, .what = "extend the sandbox's timeout" };
        int xr = vc_call(sb, ctx, &xq, "/extend-timeout", &r2, 0, op, error);
        cl_resp_clear(&r2);
        json_object_put(e);
        if (xr < 0)
            goto undo;
    }
    if (cl_create_workdir(sb, &sb->s.workdir, vc_run_short, ctx, VC_BACKEND, rq->workdir, op,
                          error) < 0)
        goto undo;
    *sandbox = sb;
    rc = 0;
    goto out;
undo:
    cl_create_undo(sb, c, vc_stop_id, id, 0, NULL, op, error);
out:
    json_object_put(body);
    json_object_put(labels);
    json_object_put(j);
    free(url);
    return rc;
}

CL_DESTROY(vc_destroy, vc_stop_id)

/* Alive while the provider has it and it is not ending (vc_dead). */
CL_SPEC_IS_ALIVE(vc_is_alive, &vc_spec)

/* {"version":1,"sandbox_id":ID[,"workdir":W]}: no credential, no env value
 * (the sandbox keeps its env). */
CL_ID_SESSION_STATE(vc_session_state, VC_BACKEND, VC_STATE_VERSION, "sandbox_id")

static int vc_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    json_object *j, *data;
    struct sbx_plugin_sandbox *sb = cl_resume_new(client, ctx, state_json, &vc_spec, sizeof(*sb),
                                                  &j, &data, error);
    if (!sb)
        return -1;
    return cl_resume_end(vc_wait_running(sb, ctx, "resume", error), sb, sandbox, j, data, NULL);
}

/* snapshot: POST snapshot; the snapshot's id, restored by a create with
 * source {type: snapshot}. Vercel stops the sandbox to snapshot it: it is
 * gone afterwards. */
static char *vc_snapshot(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "snapshot";
    json_object *b = json_object_new_object(), *j = NULL;
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = bs, .body_len = strlen(bs),
                  .idempotent = CL_UNSAFE, .what = "snapshot the sandbox" };
    cl_resp r = { 0 };
    char *out = NULL;
    if (vc_call(sb, ctx, &rq, "/snapshot", &r, 0, op, error) == 0
        && (j = cl_resp_json(&r, op, "snapshot the sandbox", error))) {
        const char *sid = cl_json_str(cl_json_path(j, "snapshot", NULL), "id");
        vc_mark_gone(sb);
        if (!sid)
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "vercel snapshot gave no id");
        else
            out = cl_host_strdup(sid, op, error);
    }
    json_object_put(b);
    json_object_put(j);
    cl_resp_clear(&r);
    return out;
}

typedef struct vc_owned {
    struct sbx_plugin_client *c;
    const sbx_call_ctx *ctx;
    sbx_plugin_owned_fn fn;
    void *ud;
} vc_owned;

static int vc_owned_one(void *ud, json_object *it)
{
    vc_owned *o = ud;
    const char *id = cl_json_str(it, "id");
    if (strcmp(vc_status(it), "running") != 0)
        return 0;
    json_object *own = vc_owner(o->c, o->ctx, id, "list_owned");
    int64_t created = 0;
    cl_json_int(it, "createdAt", &created);
    int rc = cl_owned_report(o->fn, o->ud, id, own, (double)created / 1000.0, VC_BACKEND);
    json_object_put(own);
    return rc;
}

/* The sandboxes this backend made: labels sbx_backend=vercel in their
 * VC_OWNER_FILE. */
static int vc_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    vc_owned o = { client, ctx, fn, ud };
    return vc_list(client, ctx, vc_owned_one, &o, "list_owned", error);
}

CL_DESTROY_BY_ID(vc_destroy_by_id, vc_stop_id)

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

/* A command's logs stream, read as it comes: each line's text, undone from
 * CL_OUTPUT_ENCODER, goes to the command's stdout or stderr. A re-read
 * stream (after a cut) starts again from the command's first line, so the
 * bytes already delivered of each stream (@sent) are skipped. */
typedef struct vc_logs {
    vc_proc *p;
    cl_unencoder unenc[3];  /* per fd (1, 2) */
    uint64_t sent[3];       /* bytes delivered so far, per fd */
    uint64_t seen[3];       /* bytes of this reading so far, per fd */
    cl_buf dec;
    int stopped;            /* an error line: the sandbox stopped */
} vc_logs;

static int vc_logs_line(void *ud, json_object *o)
{
    vc_logs *l = ud;
    const char *s = cl_json_str(o, "stream");
    if (s && strcmp(s, "error") == 0) {
        l->stopped = 1;
        return 1;
    }
    json_object *d = NULL;
    int fd = s && strcmp(s, "stdout") == 0 ? 1 : s && strcmp(s, "stderr") == 0 ? 2 : 0;
    if (!fd || !json_object_object_get_ex(o, "data", &d)
        || !json_object_is_type(d, json_type_string))
        return 0;   /* a line the contract does not name */
    l->dec.len = 0;
    if (cl_buf_append(&l->dec, json_object_get_string(d), (size_t)json_object_get_string_len(d))
        < 0) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, "exec", "out of memory");
        return -1;
    }
    if (cl_unencode(&l->unenc[fd], fd, &l->dec) < 0)
        return -1;
    const char *p = l->dec.data ? l->dec.data : "";
    size_t n = l->dec.len, skip = 0;
    if (l->seen[fd] < l->sent[fd])
        skip = (size_t)(l->sent[fd] - l->seen[fd]) < n ? (size_t)(l->sent[fd] - l->seen[fd]) : n;
    l->seen[fd] += n;
    if (n > skip) {
        l->sent[fd] += n - skip;
        return cl_proc_output(&l->p->base, fd, p + skip, n - skip);
    }
    return 0;
}

/*
 * Runs the command: POST cmd (wait false) with "perl -e CL_OUTPUT_ENCODER
 * bash -c SCRIPT", where SCRIPT exports the mark, sources the per-call
 * environment file and takes stdin from its file (both uploaded first and
 * removed as the command starts); then GET its logs, which stream the
 * output as it comes and end with the command (a cut stream is read again,
 * at most VC_LOGS_TRIES times, the bytes already delivered skipped); then
 * GET cmd?wait=true for the exit code. Three requests, output live; two
 * when nobody reads the output before the end (see the header).
 */
/* The answer @wb of a cmd run with wait (NDJSON): its first line's object
 * ({"command": {id...}}, a new reference), or NULL when it has none; *@have
 * set, with the code in *@code, when a later line is the command with its
 * exitCode. An "error" line (the sandbox stopped) gives no code: the logs
 * say why. */
static json_object *vc_wait_answer(const cl_buf *wb, int *have, int64_t *code)
{
    json_object *first = NULL;
    *have = 0;
    const char *at = wb->data, *end = wb->data ? wb->data + wb->len : NULL;
    while (at && at < end) {
        const char *nl = memchr(at, '\n', (size_t)(end - at));
        if (!nl)
            break;      /* a line cut off */
        char *line = strndup(at, (size_t)(nl - at));
        json_object *l = line ? json_tokener_parse(line) : NULL;
        free(line);
        at = nl + 1;
        json_object *c = l ? cl_json_path(l, "command", NULL) : NULL;
        if (!first && c && cl_json_str(c, "id")) {
            first = l;
            l = NULL;
        } else if (first && c && cl_json_int(c, "exitCode", code) == 1) {
            *have = 1;
        }
        json_object_put(l);
    }
    return first;
}

static int vc_exec_run(cl_proc *base)
{
    vc_proc *p = (vc_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    cl_buf pre = { 0 };
    char *id = NULL, *esc = NULL, *suffix = NULL;
    json_object *b = NULL, *j = NULL;
    vc_logs lg = { .p = p };
    int code = -1, rc = -1;
    int bad = cl_buf_printf(&pre, "export " CL_EXEC_MARK "=%s\n", p->tag) < 0;
    if (!bad && cl_script_env_prelude(p, &ctx, vc_upload_bytes, &pre, op) < 0)
        goto fail;
    if (!bad && cl_script_stdin_prelude(p, &ctx, vc_upload, "/tmp", &pre, op) < 0)
        goto fail;
    bad = bad || cl_buf_printf(&pre, "%s", p->script) < 0;
    b = json_object_new_object();
    json_object *args = json_object_new_array();
    if (bad || !b || !args) {
        json_object_put(args);
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    json_object_array_add(args, json_object_new_string("-e"));
    json_object_array_add(args, json_object_new_string(CL_OUTPUT_ENCODER));
    json_object_array_add(args, json_object_new_string("bash"));
    json_object_array_add(args, json_object_new_string("-c"));
    json_object_array_add(args, json_object_new_string(pre.data));
    json_object_object_add(b, "command", json_object_new_string("perl"));
    json_object_object_add(b, "args", args);
    json_object_object_add(b, "cwd", json_object_new_string(VC_CWD));
    /* When nothing reads the output before the end
     * (SBX_PLUGIN_EXEC_OUTPUT_AT_END), the command is run with wait: its
     * answer (NDJSON: the command, then the command with its exitCode)
     * ends with it, and the logs, read once then, are whole: two requests.
     * An answer cut after its first line (a proxy that ends quiet
     * connections, CASE-52) goes on as without wait: the logs followed,
     * then the exit code asked. */
    int at_end = (p->flags & SBX_PLUGIN_EXEC_OUTPUT_AT_END) != 0, have_code = 0;
    int64_t x = 0;
    cl_buf wb = { 0 };
    json_object_object_add(b, "wait", json_object_new_boolean(at_end));
    const char *bs = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    cl_req rq = { .method = "POST", .body = bs, .body_len = strlen(bs),
                  .sink = at_end ? vc_buf_sink : NULL, .sink_ud = &wb,
                  .idempotent = CL_UNSAFE, .what = "run the command" };
    cl_resp r = { 0 };
    rc = vc_call(sb, &ctx, &rq, "/cmd", &r, 0, op, NULL);
    if (at_end) {
        j = vc_wait_answer(&wb, &have_code, &x);
        if (rc < 0 && j && !have_code && (r.status == 0 || r.status / 100 == 2)
            && !vc_is_gone(sb) && !cl_proc_stopping(base))
            rc = 0;     /* cut after the start: followed below */
        else if (rc == 0 && !j)
            cl_fail(NULL, SBX_ERROR_CONNECTION, op, "vercel command answered without its "
                    "start: %.80s", wb.data ? wb.data : "");
        if (rc == 0 && !j)
            rc = -1;
    } else if (rc == 0 && !(j = cl_resp_json(&r, op, "run the command", NULL))) {
        rc = -1;
    }
    cl_buf_clear(&wb);
    cl_resp_clear(&r);
    const char *cid = j ? cl_json_str(cl_json_path(j, "command", NULL), "id") : NULL;
    if (rc == 0 && !cid) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "vercel command answered without an id");
        rc = -1;
    }
    if (rc < 0 || !(id = strdup(cid)) || !(esc = cl_url_escape(id))
        || !(suffix = cl_printf("/cmd/%s/logs", esc))) {
        if (rc == 0)
            cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    /* The logs, as they come, to the command's end. A stream cut after
     * VC_LOGS_HELD_S or more (a proxy that ends quiet connections: a quiet
     * command, CASE-52) is read again as long as the command runs; one cut
     * sooner counts as a failed try. */
    for (int tries = 0;;) {
        double t0 = cl_now();
        cl_ndjson nd;
        cl_ndjson_init(&nd, vc_logs_line, &lg);
        memset(lg.seen, 0, sizeof lg.seen);
        memset(lg.unenc, 0, sizeof lg.unenc);
        cl_req lq = { .method = "GET", .sink = cl_ndjson_sink, .sink_ud = &nd,
                      .idempotent = CL_SAFE, .what = "read the command's logs" };
        cl_resp r2 = { 0 };
        rc = vc_call(sb, &ctx, &lq, suffix, &r2, 0, op, NULL);
        /* The stream has no final line: it ends with the command. */
        if (rc == 0 && nd.line.len && cl_ndjson_feed(&nd, "\n", 1, op, NULL) < 0)
            rc = -1;
        if (rc == 0 && (cl_unencode_end(&lg.unenc[1], 1, op, NULL) < 0
                        || cl_unencode_end(&lg.unenc[2], 2, op, NULL) < 0))
            rc = -1;
        int cut = rc < 0 && (r2.status == 0 || r2.status / 100 == 2)
                  && cl_last()->code == SBX_ERROR_CONNECTION
                  && !vc_is_gone(sb) && !cl_proc_stopping(base);
        cl_ndjson_clear(&nd);
        cl_resp_clear(&r2);
        if (cut && cl_now() - t0 < VC_LOGS_HELD_S)
            tries++;
        if (!cut || tries >= VC_LOGS_TRIES)
            break;
    }
    if (rc == 0 && lg.stopped) {
        vc_mark_gone(sb);
        vc_gone_error(NULL, op, sb->s.id, NULL);
        rc = -1;
    }
    if (rc < 0)
        goto fail;
    if (have_code)
        goto done;
    /* The exit code (the command has ended: the logs did). */
    free(suffix);
    suffix = cl_printf("/cmd/%s?wait=true", esc);
    json_object_put(j);
    j = NULL;
    cl_req wq = { .method = "GET", .idempotent = CL_SAFE, .what = "wait for the command" };
    cl_resp r3 = { 0 };
    rc = suffix ? vc_call(sb, &ctx, &wq, suffix, &r3, 0, op, NULL) : -1;
    if (rc == 0 && !(j = cl_resp_json(&r3, op, "wait for the command", NULL)))
        rc = -1;
    cl_resp_clear(&r3);
    if (rc == 0 && cl_json_int(cl_json_path(j, "command", NULL), "exitCode", &x) != 1) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "vercel command %s ended without an exitCode",
                id);
        rc = -1;
    }
    if (rc < 0)
        goto fail;
done:
    code = (int)(x & 0xff);
    goto out;
fail:
    cl_proc_fail_in(base, &sb->s);
    code = -1;
out:
    json_object_put(b);
    json_object_put(j);
    cl_buf_clear(&lg.dec);
    free(id);
    free(esc);
    free(suffix);
    cl_buf_clear(&pre);
    return code;
}

/* The script (argv or shell text, the cwd) is a JSON string; the env goes
 * as a file's bytes (issue 16). */
static int vc_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                         sbx_error **error)
{
    (void)ctx;
    if (cl_exec_check(&sb->s, VC_BACKEND, rq, 0, error) < 0
        || cl_text_check(rq, NULL, "JSON", CL_TEXT_ENV_AS_BYTES, "exec", error) < 0)
        return -1;
    return cl_script_exec_start(sb, VC_BACKEND, sb->s.workdir, rq, vc_run_short, vc_exec_run,
                                process, error);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin vc_plugin = {
    CL_PLUGIN_HEAD(VC_BACKEND),
    CL_PLUGIN_SLOTS(vc),
    .description = "Vercel Sandbox microVMs (v1 REST API) over libcurl; cpu/memory pick "
                   "1, 2, 4 or 8 vCPUs (2048 MB each); destroy stops the sandbox; snapshot "
                   "stops it too; output streams as it comes; relative paths are "
                   "taken from the workdir, else /vercel/sandbox",
    .caps = VC_CAPS,
    .sandbox_free = cl_sandbox_free_slot,
    .snapshot = vc_snapshot,
    CL_SCRIPT_PROC_SLOTS,
};

CL_PLUGIN_EXPORT(&vc_plugin)
