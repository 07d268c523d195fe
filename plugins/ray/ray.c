/*
 * ray.c — libsbx-ray.so, the `ray` backend: a sandbox's work runs on a Ray
 * cluster through the Jobs REST API of its dashboard, on the hosted-provider
 * base (plugins/cloud/base/cloud.h: HTTP, retries, process handles, the
 * command script).
 *
 * Contract: the Ray section of the provider contracts (ray-project/ray
 * python/ray/dashboard/modules/job/{job_head,common,pydantic_models}.py;
 * API version "5").
 *
 *  - Where: the client config's "address", else RAY_ADDRESS, else
 *    http://127.0.0.1:8265 (the dashboard; "host:port" gets http://; a Ray
 *    Client address, ray://, is a configuration error naming it). Token
 *    auth (RAY_AUTH_MODE=token clusters): the first of RAY_AUTH_TOKEN, the
 *    file named by RAY_AUTH_TOKEN_PATH and ~/.ray/auth_token is sent as
 *    "Authorization: Bearer ..." on every request; none found, none sent
 *    (a cluster that asks for one answers 401, an authentication error).
 *  - A sandbox is a directory on the cluster: the caller's workdir (made
 *    when missing, kept at destroy), else ROOT_DIR/ID (made at create,
 *    removed at destroy), ROOT_DIR being the client config's "root_dir"
 *    (default /tmp/sbx-ray). Its own files (the create's environment, for
 *    commands to source) are in ROOT_DIR/ID.sbx beside it. It is the
 *    sandbox's root (sandbox_root): SANDBOX_ROOT, HOME and the default cwd
 *    of every command, TMPDIR its tmp/; sandbox paths of file calls and per
 *    call cwds are taken under it. Sandboxes on one cluster see the node's
 *    filesystem and each other's processes: the isolation is the
 *    cluster's, from the caller's machine.
 *  - Each command is one job: POST /api/jobs/ with a submission_id of the
 *    plugin's own ("sbx-" and 24 hex digits; a re-sent submit that finds
 *    it in use found its own job), entrypoint_num_cpus, _num_gpus and
 *    entrypoint_resources from the create's cpu and gpu, entrypoint_memory
 *    (bytes) from its memory_mb, else from the backend option
 *    "entrypoint_memory_mb" (a reservation only; refused beside
 *    memory_mb), the per-call env
 *    in runtime_env.env_vars as one variable (RAY_CALL_ENV, base64 of its
 *    JSON) that the driver lays over the command's environment only (a
 *    call's PATH never changes how the driver is found), stdin (read to
 *    its end first) as a working_dir package (a zip PUT to
 *    /api/packages/gcs/_ray_pkg_HEX.zip).
 *    The entrypoint is a small Python driver (Ray runs Python on every
 *    node; the client config's "python", default python3) that starts
 *    "bash -c SCRIPT" in a session of its own with the sandbox's variables
 *    and CL_EXEC_MARK, reads its stdout and stderr apart and prints each
 *    chunk as a line "@@sbx TAG o|e BASE64" (one write per line, so Ray's
 *    merged, text-only job log keeps both streams apart and every byte),
 *    then "@@sbx TAG x CODE" (128+N for death by signal N) and exits with
 *    that code. memory_mb is a limit the driver enforces, Ray's
 *    entrypoint_memory only reserving it for scheduling: every
 *    RAY_MEM_SAMPLE_MS it sums the resident memory (VmRSS of
 *    /proc/PID/status) of the processes of the command's session, taking
 *    the largest single peak (VmHWM) when higher, and past the limit
 *    kills them all with SIGKILL and prints "@@sbx TAG m LIMIT" before the
 *    end line (exit 137): the command's result carries the OOM flag
 *    (CASE-49). Memory a process takes and gives back between two samples
 *    escapes the sum unless it is that process's peak, and a process that
 *    leaves the session (setsid) escapes the limit. The plugin follows a command's job log through its tail
 *    (its own short jobs are polled: they print little), GET
 *    .../logs/tail, a WebSocket whose text messages carry the log as it
 *    grows and which the dashboard closes once the job is terminal (built
 *    with the base's WebSocket client; closed by the plugin once the end
 *    line is in); without it, or when the tail cannot be opened or is cut,
 *    it polls GET .../logs (the whole log) from where it got to. Only
 *    lines not seen yet are decoded; each chunk goes to the host's
 *    descriptors as it arrives. Then the job's status is polled, and the
 *    command ends only once the end line was read: a job that is terminal
 *    while its log lacks it has its log read again (up to
 *    RAY_LOG_SETTLE_S), so the last line is never lost (CASE-24,
 *    ray-project/ray#46413). The exit code is the
 *    job's driver_exit_code (newer Rays report it), else the end line's. The
 *    job's record is deleted (DELETE, API v4) once read. A script over
 *    RAY_INLINE_SCRIPT bytes travels in the package too.
 *  - Kill and timeouts: exec_kill runs a job that signals every process
 *    carrying the command's CL_EXEC_MARK; SIGKILL first stops the job
 *    (POST .../stop). The plugin's own jobs carry none of the sandbox's
 *    resources. A process freed while it runs has its job stopped and its
 *    record deleted, within the client's call timeout when one was set at
 *    the start (else 30 s for the kill, RAY_REAP_S for the rest); a job
 *    whose submit was in flight (its answer not come) is looked for by its
 *    id, ours, for RAY_SUBMIT_LOOK_S more on the client's reaper thread; what
 *    is left is logged (info) and stays, its metadata naming the sandbox
 *    (sbx_sandbox). Destroy runs a job that kills every process of the
 *    sandbox (SBX_RAY_SANDBOX=ID in its environment), removes what create
 *    made and deletes the sandbox's label.
 *  - Lifetime (timeout_secs, from readiness): Ray has none for a job's
 *    directory, so a job of the plugin's own is it: ID-lifetime (metadata
 *    sbx_kind=lifetime), submitted once the sandbox is made and never
 *    followed, a shell that sleeps the lifetime plus RAY_LIFETIME_GRACE_S
 *    and then does what destroy's job does (kills the sandbox's processes,
 *    removes what create made; the label stays for sbx_gc()). From the
 *    expiry on, commands (and so the file calls) are not_found "sandbox ID
 *    expired at T (lifetime N s)"; a resume that finds the sandbox gone
 *    after it says the same (the expiry is in the session state) and
 *    deletes the label and the lifetime job's record (so sbx_gc(), which
 *    reaps an expired row through a resume, leaves nothing). Destroy stops
 *    the lifetime job and deletes its record first.
 *  - Files go through the host's generic fallbacks over exec (cat, tar),
 *    that is through jobs: writes carry the bytes as the job's stdin
 *    package, reads come back through the log.
 *  - Ownership: the job that makes a sandbox (submission_id = the sandbox's
 *    id) is its label, kept until destroy: metadata sbx_backend=ray,
 *    sbx_kind=sandbox, the create token, the expiry, sbx_dir, sbx_meta and
 *    sbx_made, read by list_owned (GET /api/jobs/) and destroy_by_id. The
 *    create's env goes by a second job whose record is deleted at once (a
 *    record holds its runtime environment).
 *  - session_state {"version":1,"sandbox_id","dir","meta","made"
 *    [,"resources"][,"memory_limit" (bytes)][,"lifetime","expires_at"]} (no
 *    credential, no env value: the create's env stays in the sandbox's
 *    files on the cluster); resume checks that the sandbox's files are
 *    still there (a job), else not_found with reason "gone".
 *
 * Threading: slots may run at once on different sandboxes and on one; a
 * sandbox's mutable state (the gone flag) has its own lock.
 */
#include "cloud.h"
#include "provider.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#ifdef SBX_HAVE_CLOUD_WS
#include "ws.h"
#endif

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define RAY_BACKEND "ray"
#define RAY_DEFAULT_URL "http://127.0.0.1:8265"
#define RAY_DEFAULT_ROOT "/tmp/sbx-ray"
#define RAY_STATE_VERSION 1
#define RAY_LOG_SETTLE_S 10.0       /* a terminal job's log is read again this long */
#define RAY_TAIL_CONNECT_S 10.0     /* the log tail's opening handshake, at most */
#define RAY_SHORT_S 60.0            /* bound on the plugin's own jobs */
#define RAY_REAP_S 30.0             /* bound on stopping and deleting a freed job */
#define RAY_SUBMIT_LOOK_S 30.0      /* how long a job whose submit went unanswered
                                     * is looked for after its process's free */
#define RAY_SANDBOX_MARK "SBX_RAY_SANDBOX"
#define RAY_LIFETIME_SUFFIX "-lifetime" /* the lifetime job: the sandbox's id and this */
#define RAY_LIFETIME_GRACE_S 1.0    /* how long after its expiry the lifetime job
                                     * ends the sandbox (calls are refused from the
                                     * expiry on) */
#define RAY_CALL_ENV "SBX_RAY_CALL_ENV" /* the call's env, for the command only */
#define RAY_MEM_SAMPLE_MS 50        /* the driver's memory samples (memory_mb) */
#define RAY_CHUNK 3072              /* output bytes per log line (4096 in base64) */
#define RAY_INLINE_SCRIPT 65536     /* a longer script goes in the package and
                                     * the command's shell sources it: an
                                     * argument holds at most 128 KiB (Linux's
                                     * MAX_ARG_STRLEN), and both Ray's "sh -c
                                     * ENTRYPOINT" and "bash -c SCRIPT" take
                                     * one */
#define RAY_STR_(x) #x
#define RAY_STR(x) RAY_STR_(x)

#define RAY_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_RESUME       \
                  | SBX_CAP_ISOLATION | SBX_CAP_CPU_LIMIT | SBX_CAP_GPU                      \
                  | SBX_CAP_BACKGROUND | SBX_CAP_LIST_OWNED | SBX_CAP_MEMORY_LIMIT           \
                  | SBX_CAP_LIFETIME)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, the dashboard's URL
                         * (provider.h) */
    char *python;       /* the driver's interpreter on the cluster */
    char *root_dir;     /* where sandboxes' directories go */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the id and the gone flag (provider.h) */
    struct sbx_plugin_client *c;
    char *dir;          /* the sandbox's directory on the cluster (its root) */
    char *meta;         /* the sandbox's own files: ROOT_DIR/ID.sbx */
    int made;           /* create made dir (destroy removes it) */
    json_object *res;   /* entrypoint_* members every job carries (an object) */
    int64_t mem_limit;  /* memory_mb in bytes, the driver's limit on a
                         * command's processes (0: none) */
    double lifetime;    /* timeout_secs, from readiness (0: none) */
    double expires_at;  /* UNIX seconds the lifetime ends (0: none) */
};

/* One job's run: its submission id and what its log gave so far. */
typedef struct ray_run {
    char sid[32];               /* "sbx-" and 24 hex digits: also the tag */
    size_t seen;                /* log characters consumed (whole lines) */
    int ended;                  /* the end line was read */
    int end_code;
    int gone;                   /* the driver found no sandbox directory */
    int oom;                    /* the driver killed the command past the
                                 * sandbox's memory limit */
    int (*out)(void *ud, int stream, const char *p, size_t n);
    void *ud;
} ray_run;

typedef struct ray_proc {
    cl_proc base;       /* first member (cloud.h) */
    struct sbx_plugin_sandbox *sb;
    char *script;       /* cl_shell_script(): the command in its cwd */
    char **env;         /* "K=V" of the call, copied */
    int stdin_fd;
    ray_run run;
    int submitted;      /* the job was sent (exec_kill may stop it) */
    int submit_lost;    /* the submit was sent and no answer came (cancelled,
                         * timed out, cut): the cluster may have the job, or
                         * may make it yet */
    int deleted;        /* the worker deleted the job's record */
    double call_s;      /* the start call's span (its deadline less the time
                         * it came: the client's call timeout, or the
                         * caller's nearer deadline): the free's bound;
                         * 0 = none (the plugin's own bounds) */
} ray_proc;

#define ray_check(sb, op, error) cl_gone_check(&(sb)->s.gone, (op), RAY_BACKEND, (sb)->s.id, \
                                               (error))
#define ray_refuse(error, option, value, why) \
    cl_refuse((error), RAY_BACKEND, (option), (value), (why))

/* ------------------------------------------------------------------------ */
/* The driver                                                                */
/* ------------------------------------------------------------------------ */

/* The entrypoint's Python (argv after itself: script in base64, root, tag, sandbox id or
 * "-", stdin file or "-"). It waits for the command's main process (woken
 * by SIGCHLD through a wakeup descriptor), then takes what is already in
 * the pipes without waiting for EOF (a background child may hold them). */
static const char ray_driver[] =
    "import base64,json,os,select,shlex,signal,subprocess,sys,time\n"
    "a=sys.argv[1:]\n"
    "t=a[3].encode()\n"
    "def w(k,d):\n"
    " os.write(1,b'@@sbx '+t+b' '+k+b' '+d+b'\\n')\n"
    "if not os.path.isdir(a[2]):\n"
    " w(b'g',b'0');sys.exit(1)\n"
    "e=dict(os.environ)\n"
    "e.update(SANDBOX_ROOT=a[2],HOME=a[2],TMPDIR=a[2].rstrip('/')+'/tmp'," CL_EXEC_MARK "=a[3])\n"
    "if a[4]!='-':e['" RAY_SANDBOX_MARK "']=a[4]\n"
    "for k in ('RAY_JOB_ID','RAY_SUBMISSION_ID','RAY_ADDRESS','" RAY_CALL_ENV "'):e.pop(k,None)\n"
    "e.update(json.loads(base64.b64decode(os.environ.get('" RAY_CALL_ENV "','e30='))))\n"
    "i=open(a[5],'rb') if a[5]!='-' else subprocess.DEVNULL\n"
    "r,wf=os.pipe();os.set_blocking(wf,False)\n"
    "signal.set_wakeup_fd(wf);signal.signal(signal.SIGCHLD,lambda n,f:None)\n"
    "s=b'. '+shlex.quote(os.path.abspath('script')).encode() if a[1]=='-' else base64.b64decode(a[1])\n"
    "p=subprocess.Popen([b'bash',b'-c',s,b'sbx'],stdin=i,"
    "stdout=subprocess.PIPE,stderr=subprocess.PIPE,env=e,cwd=a[2],start_new_session=True)\n"
    "if i!=subprocess.DEVNULL:i.close()\n"
    "def term(n,f):\n"
    " try:os.killpg(p.pid,signal.SIGKILL)\n"
    " except OSError:pass\n"
    "signal.signal(signal.SIGTERM,term)\n"
    "m=int(a[6]);om=False;nx=0\n"
    "def tree():\n"
    " q=[];u=0;h=0\n"
    " for d in os.listdir('/proc'):\n"
    "  if not d.isdigit():continue\n"
    "  try:\n"
    "   x=open('/proc/'+d+'/stat','rb').read();x=x[x.rindex(b')')+2:].split()\n"
    "   if int(x[3])!=p.pid:continue\n"
    "   q.append(int(d))\n"
    "   v=dict(l.split(b':',1) for l in open('/proc/'+d+'/status','rb').read().splitlines() if b':' in l)\n"
    "   u+=int(v.get(b'VmRSS',b'0 kB').split()[0])*1024\n"
    "   h=max(h,int(v.get(b'VmHWM',b'0 kB').split()[0])*1024)\n"
    "  except (OSError,ValueError,IndexError):pass\n"
    " return q,max(u,h)\n"
    "fs={p.stdout.fileno():b'o',p.stderr.fileno():b'e'}\n"
    "done=False\n"
    "while fs:\n"
    " rs,_,_=select.select(list(fs)+[r],[],[],0 if done else (" RAY_STR(RAY_MEM_SAMPLE_MS) "/1000 if m else None))\n"
    " if m and not done and not om and time.monotonic()>=nx:\n"
    "  nx=time.monotonic()+" RAY_STR(RAY_MEM_SAMPLE_MS) "/1000;q,u=tree()\n"
    "  if u>m:\n"
    "   om=True\n"
    "   for k in [-p.pid]+q:\n"
    "    try:os.kill(k,signal.SIGKILL)\n"
    "    except OSError:pass\n"
    " if r in rs:\n"
    "  os.read(r,512)\n"
    " if not done and p.poll() is not None:\n"
    "  done=True;continue\n"
    " rs=[f for f in rs if f!=r]\n"
    " if done and not rs:break\n"
    " for f in rs:\n"
    "  d=os.read(f," RAY_STR(RAY_CHUNK) ")\n"
    "  if d:w(fs[f],base64.b64encode(d))\n"
    "  else:del fs[f]\n"
    "c=p.wait()\n"
    "c=c if c>=0 else 128-c\n"
    "if om:w(b'm',str(m).encode())\n"
    "w(b'x',str(c).encode())\n"
    "sys.exit(c)\n";

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* The job's details: GET /api/jobs/{sid}; NULL with *@status 404 when the
 * cluster has no such job. */
static json_object *ray_job_get(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                const char *sid, long *status, const char *op,
                                sbx_error **error)
{
    char *url = cl_item_url(c->cl.api, "api/jobs", sid, "");
    json_object *j = cl_get_json(c->cl.http, ctx, url, status, op, "get the job", error);
    free(url);
    return j;
}

static int ray_terminal(const char *status)
{
    return status && (strcmp(status, "SUCCEEDED") == 0 || strcmp(status, "FAILED") == 0
                      || strcmp(status, "STOPPED") == 0);
}

/* POST /api/jobs/{sid}/stop: 0 also when the job ended or is unknown. */
static int ray_job_stop(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *sid,
                        const char *op, sbx_error **error)
{
    cl_resp r = { 0 };
    int rc = cl_item_request(c->cl.http, ctx, "POST", c->cl.api, "api/jobs", sid, "/stop", NULL,
                             CL_SAFE, &r, op, "stop the job", error);
    if (rc == 0 && r.status / 100 != 2 && r.status != 404) {
        cl_fail_status(c->cl.http, error, CL_CODE_BY_STATUS, &r, op, "stop the job");
        rc = -1;
    }
    cl_resp_clear(&r);
    return rc;
}

/* DELETE /api/jobs/{sid} (a terminal job's record; Ray refuses a running
 * job's), bounded by @bound (NULL: 10 s): 0 when the record is gone (a 404
 * too), -1 when it stays (logged). */
static int ray_job_delete(struct sbx_plugin_client *c, const char *sid,
                          const sbx_call_ctx *bound)
{
    sbx_call_ctx own = { sizeof(own), cl_now() + 10, -1, NULL };
    const sbx_call_ctx *ctx = bound ? bound : &own;
    char *url = cl_item_url(c->cl.api, "api/jobs", sid, "");
    int rc = url ? cl_delete_url(c->cl.http, ctx, url, "exec", "delete the job", NULL) : -1;
    if (rc < 0)
        CL_LOG(SBX_LOG_INFO, "the record of job %s stays on the cluster: %s", sid,
               url ? cl_last()->msg : "out of memory");
    free(url);
    return rc < 0 ? -1 : 0;
}

/* The end of a job whose follower stopped early (a process freed while it
 * ran, or a follow that failed): stops it (it may have been sent as the
 * follower stopped, so whatever the follower knew) and, once it is
 * terminal, deletes its record; each step tried again on a failure (a busy
 * cluster's timeout, a dropped connection) until RAY_REAP_S pass. @call
 * (NULL for none): the call the reap is part of (or the bound of a free:
 * ray_exec_free), whose deadline (passed already when the follow timed
 * out) bounds it to CL_LOST_LOOK_S past it, so a call with a timeout is
 * not held up to RAY_REAP_S longer by a cluster that is not answering; its
 * cancel is not taken (out of process the deadline fires it). Best
 * effort: what is left then is logged. RAY_REAP_GONE when the cluster has
 * no record of the job (any more), RAY_REAP_NONE when it never had one
 * (as far as the reap saw: the first look found none), RAY_REAP_LEFT when
 * the record stays. */
enum { RAY_REAP_GONE, RAY_REAP_NONE, RAY_REAP_LEFT };

static int ray_job_reap(struct sbx_plugin_client *c, const char *sid,
                        const sbx_call_ctx *call)
{
    double now = cl_now();
    sbx_call_ctx ctx = { sizeof(ctx), now + RAY_REAP_S, -1, NULL };
    if (call && call->deadline > 0) {
        double late = (call->deadline > now ? call->deadline : now) + CL_LOST_LOOK_S;
        if (late < ctx.deadline)
            ctx.deadline = late;
    }
    int stopped = 0, seen = 0;
    for (double pause = 0.02;; pause = pause < 0.5 ? pause * 2 : pause) {
        if (!stopped)
            stopped = ray_job_stop(c, &ctx, sid, "exec", NULL) == 0;
        if (stopped) {
            long st = 0;
            json_object *j = ray_job_get(c, &ctx, sid, &st, "exec", NULL);
            int term = j && ray_terminal(cl_json_str(j, "status"));
            json_object_put(j);
            if (!j && st == 404)
                return seen ? RAY_REAP_GONE : RAY_REAP_NONE;    /* no record */
            seen |= j != NULL;
            if (term && ray_job_delete(c, sid, &ctx) == 0)
                return RAY_REAP_GONE;
        }
        if (cl_now() + pause >= ctx.deadline) {
            CL_LOG(SBX_LOG_INFO, "job %s was not %s in time; its record stays on the cluster "
                   "(metadata sbx_backend=" RAY_BACKEND ")", sid,
                   stopped ? "deleted" : "stopped");
            return RAY_REAP_LEFT;
        }
        cl_sleep(pause, -1);
    }
}

/* The reaper's look-up (cl_reap_find_fn) of a command's job whose submit
 * went unanswered (ray_exec_free): job @sid when the cluster has it. */
static int ray_reap_find(void *ud, const sbx_call_ctx *ctx, const char *sid, char ***ids,
                         sbx_error **error)
{
    long st = 0;
    json_object *j = ray_job_get(ud, ctx, sid, &st, "exec", error);
    if (!j)
        return st == 404 ? 0 : -1;
    json_object_put(j);
    char **v = calloc(2, sizeof(*v));
    if (!v || !(v[0] = strdup(sid))) {
        free(v);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "exec", "out of memory");
        return -1;
    }
    *ids = v;
    return 0;
}

/* The reaper's delete (cl_reap_delete_op_fn): stops job @sid and deletes
 * its record (ray_job_reap, bounded by @ctx); 0 once it is gone. */
static int ray_reap_delete(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                           const char *sid, const char *op, sbx_error **error)
{
    (void)op;
    if (ray_job_reap(c, sid, ctx) != RAY_REAP_LEFT) {
        CL_LOG(SBX_LOG_INFO, "exec: stopped job %s, submitted by a process freed before the "
               "cluster answered its submit, and deleted its record", sid);
        return 0;
    }
    cl_fail(error, SBX_ERROR_TIMEOUT, "exec", "ray: job %s stays on the cluster", sid);
    return -1;
}

/* @a joined under the sandbox directory @dir (one slash between). */
static char *ray_join(const char *dir, const char *a)
{
    while (*a == '/')
        a++;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return *a ? cl_printf("%.*s/%s", (int)n, dir, a) : cl_printf("%.*s", (int)n, dir);
}

/* ------------------------------------------------------------------------ */
/* Stdin as a working_dir package                                            */
/* ------------------------------------------------------------------------ */

/* A temporary file nobody else sees (O_TMPFILE, else made and unlinked at
 * once): nothing stays on disk whatever happens. -1 with errno. */
static int ray_tmpfile(void)
{
    const char *t = getenv("TMPDIR");
    const char *dir = t && *t ? t : "/tmp";
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT))
        return fd;
    char *p = cl_printf("%s/sbx-ray-XXXXXX", dir);
    if (!p)
        return -1;
    fd = mkostemp(p, O_CLOEXEC);
    if (fd >= 0)
        unlink(p);
    free(p);
    return fd;
}

/* A zip (stored) in a temporary file holding the entry "stdin", what @in
 * holds to its end (@in -1: none), and the entry "script", @script (NULL:
 * none): its descriptor (at offset 0) and length, or -1 with *@error. The
 * read of @in ends at its end: the library closes a process's stdin before
 * the plugin's free, so a free does not wait for it. */
static int ray_zip(int in, const char *script, int64_t *len, const char *op, sbx_error **error)
{
    int data = ray_tmpfile(), zip = -1;
    char buf[65536];
    struct archive *a = NULL;
    struct archive_entry *e = NULL;
    if (data < 0)
        goto sys;
    for (; in >= 0;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto sys;
        if (n == 0)
            break;
        if (cl_fd_sink(&data, buf, (size_t)n) < 0)
            goto sys;
    }
    struct stat st;
    if (fstat(data, &st) < 0 || lseek(data, 0, SEEK_SET) < 0 || (zip = ray_tmpfile()) < 0)
        goto sys;
    a = archive_write_new();
    e = archive_entry_new();
    if (!a || !e || archive_write_set_format_zip(a) != ARCHIVE_OK
        || archive_write_zip_set_compression_store(a) != ARCHIVE_OK
        || archive_write_open_fd(a, zip) != ARCHIVE_OK)
        goto arc;
    if (script) {
        size_t sl = strlen(script);
        archive_entry_set_pathname(e, "script");
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0600);
        archive_entry_set_size(e, (int64_t)sl);
        if (archive_write_header(a, e) != ARCHIVE_OK
            || archive_write_data(a, script, sl) != (ssize_t)sl)
            goto arc;
        archive_entry_clear(e);
    }
    if (in < 0)
        goto closed;
    archive_entry_set_pathname(e, "stdin");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0600);
    archive_entry_set_size(e, st.st_size);
    if (archive_write_header(a, e) != ARCHIVE_OK)
        goto arc;
    for (;;) {
        ssize_t n = read(data, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto sys;
        if (n == 0)
            break;
        if (archive_write_data(a, buf, (size_t)n) != n)
            goto arc;
    }
closed:
    if (archive_write_close(a) != ARCHIVE_OK)
        goto arc;
    archive_write_free(a);
    archive_entry_free(e);
    close(data);
    off_t end = lseek(zip, 0, SEEK_END);
    if (end < 0 || lseek(zip, 0, SEEK_SET) < 0) {
        data = -1;
        a = NULL;
        e = NULL;
        goto sys;
    }
    *len = end;
    return zip;
arc:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot make the package: %s",
            a && archive_error_string(a) ? archive_error_string(a) : "out of memory");
    goto out;
sys:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot keep the command's stdin: %s",
            strerror(errno));
out:
    if (a)
        archive_write_free(a);
    archive_entry_free(e);
    if (data >= 0)
        close(data);
    if (zip >= 0)
        close(zip);
    return -1;
}

/* Uploads ray_zip(@in, @script) as a working_dir package: 0 with its URI
 * ("gcs://_ray_pkg_HEX.zip") in @uri (64 bytes), or -1. */
static int ray_put_package(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, int in,
                           const char *script, char uri[64], const char *op, sbx_error **error)
{
    int64_t len = 0;
    int zip = ray_zip(in, script, &len, op, error);
    if (zip < 0)
        return -1;
    char hex[33];
    cl_random_hex(hex, 16);
    snprintf(uri, 64, "gcs://_ray_pkg_%s.zip", hex);
    char *url = cl_printf("%s/api/packages/gcs/_ray_pkg_%s.zip", c->cl.api, hex);
    cl_req rq = { .method = "PUT", .url = url, .content_type = "application/zip",
                  .source = cl_fd_source, .source_ud = &zip, .source_len = len,
                  .idempotent = CL_SAFE, .what = "upload the package" };
    cl_resp r = { 0 };
    int rc = -1;
    if (!url)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cl_request(c->cl.http, ctx, &rq, &r, op, error) == 0) {
        if (r.status / 100 == 2)
            rc = 0;
        else
            cl_fail_status(c->cl.http, error, CL_CODE_BY_STATUS, &r, op, "upload the package");
    }
    cl_resp_clear(&r);
    free(url);
    close(zip);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Running one job                                                           */
/* ------------------------------------------------------------------------ */

/* The lines of @logs past run->seen (whole lines only): the run's own
 * output lines are decoded and handed to run->out, its end line recorded;
 * other lines (Ray's own) are skipped. 0, or -1 when the output's sink
 * refused (the host closed its descriptors) or a line is malformed. */
static int ray_take_lines(ray_run *run, const char *logs, size_t n, const char *op)
{
    char prefix[48];
    int pn = snprintf(prefix, sizeof prefix, "@@sbx %s ", run->sid);
    while (run->seen < n && !run->ended) {
        const char *line = logs + run->seen;
        const char *nl = memchr(line, '\n', n - run->seen);
        if (!nl)
            break;
        size_t len = (size_t)(nl - line);
        run->seen += len + 1;
        if (len < (size_t)pn + 2 || memcmp(line, prefix, (size_t)pn) != 0 || line[pn + 1] != ' ')
            continue;
        char kind = line[pn];
        const char *p = line + pn + 2;
        size_t pl = len - (size_t)pn - 2;
        if (kind == 'o' || kind == 'e') {
            cl_buf b = { 0 };
            if (cl_base64_decode(p, pl, &b) < 0) {
                cl_fail(NULL, SBX_ERROR_CONNECTION, op, "ray: a line of job %s's log is not "
                        "base64", run->sid);
                cl_buf_clear(&b);
                return -1;
            }
            int rc = run->out && b.len ? run->out(run->ud, kind == 'o' ? 1 : 2, b.data, b.len)
                                       : 0;
            cl_buf_clear(&b);
            if (rc < 0) {
                cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "the command's output could not "
                        "be written");
                return -1;
            }
        } else if (kind == 'x') {
            run->ended = 1;
            run->end_code = atoi(p) & 0xff;
        } else if (kind == 'm') {
            run->oom = 1;
        } else if (kind == 'g') {
            run->ended = 1;
            run->gone = 1;
        }
    }
    return 0;
}

/* GET the job's log and takes its new lines. 0, or -1 (a 404: *@missing
 * set). */
static int ray_read_log(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, ray_run *run,
                        int *missing, const char *op)
{
    long st = 0;
    char *url = cl_item_url(c->cl.api, "api/jobs", run->sid, "/logs");
    json_object *j = cl_get_json(c->cl.http, ctx, url, &st, op, "read the job's log", NULL);
    free(url);
    if (!j) {
        if (st == 404) {
            *missing = 1;
            cl_fail(NULL, SBX_ERROR_NOT_FOUND, op, "ray: job %s does not exist", run->sid);
        }
        return -1;
    }
    json_object *lj = NULL;
    int rc = 0;
    if (!json_object_object_get_ex(j, "logs", &lj) || !json_object_is_type(lj, json_type_string)) {
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "ray: the log of job %s came without \"logs\"",
                run->sid);
        rc = -1;
    } else {
        rc = ray_take_lines(run, json_object_get_string(lj),
                            (size_t)json_object_get_string_len(lj), op);
    }
    json_object_put(j);
    return rc;
}

/* 1 when job @sid exists and carries this backend's metadata (a submit of
 * ours made it), else 0. */
static int ray_is_ours(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *sid,
                       const char *op)
{
    long st = 0;
    json_object *j = ray_job_get(c, ctx, sid, &st, op, NULL);
    const char *be = j ? cl_json_str(cl_json_path(j, "metadata", NULL), CL_META_BACKEND) : NULL;
    int ours = be && strcmp(be, RAY_BACKEND) == 0;
    json_object_put(j);
    return ours;
}

/* Submits job @run->sid running @script (a shell script; NULL: the
 * package's "script") under the sandbox directory @root (the driver reports
 * "gone" when it is missing), with @env ("K=V" per call; may be NULL) in its
 * runtime environment, the package @pkg_uri (NULL: none; @pkg_stdin: it
 * holds the command's stdin) as its working_dir. @mark: a command of the
 * caller's: its processes are marked as the sandbox's, and the job carries
 * the sandbox's entrypoint resources. @labels (borrowed; NULL: none): more metadata members. 0, or
 * -1 with the thread's last error set. */
static int ray_submit(struct sbx_plugin_sandbox *sb, struct sbx_plugin_client *c,
                      const sbx_call_ctx *ctx, ray_run *run, const char *root,
                      const char *script, const char *const *env, const char *pkg_uri,
                      int pkg_stdin, int mark, json_object *labels, const char *op)
{
    /* A script that would make the entrypoint too long is in the package. */
    char *s64 = script ? cl_base64_encode(script, strlen(script)) : strdup("-");
    char *d64 = cl_base64_encode(ray_driver, strlen(ray_driver));
    char *qroot = cl_shell_quote(root), *qpy = cl_shell_quote(c->python);
    char *entry = s64 && d64 && qroot && qpy
                  ? cl_printf("%s -c 'import base64,sys;exec(base64.b64decode(sys.argv[1]))' "
                              "%s %s %s %s %s %s %lld", qpy, d64, s64, qroot, run->sid,
                              mark && sb ? sb->s.id : "-", pkg_stdin ? "stdin" : "-",
                              mark && sb ? (long long)sb->mem_limit : 0LL)
                  : NULL;
    free(s64);
    free(d64);
    free(qroot);
    free(qpy);
    if (!entry) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    json_object *b = json_object_new_object(), *renv = json_object_new_object();
    json_object *meta = json_object_new_object();
    json_object_object_add(b, "entrypoint", json_object_new_string(entry));
    free(entry);
    json_object_object_add(b, "submission_id", json_object_new_string(run->sid));
    /* The call's variables reach the command only (a PATH of the call
     * must not change how the driver itself is found): one variable of
     * the runtime environment, base64 of their JSON, that the driver
     * applies to the command. */
    json_object *ev = json_object_new_object(), *call = cl_env_object(env);
    char *keys = cl_call_keys(env);
    if (keys && *keys)
        json_object_object_add(call, CL_CALL_KEYS, json_object_new_string(keys));
    free(keys);
    const char *cs = json_object_to_json_string_ext(call, JSON_C_TO_STRING_PLAIN);
    char *c64 = cl_base64_encode(cs, strlen(cs));
    json_object_put(call);
    if (!c64) {
        json_object_put(ev);
        json_object_put(renv);
        json_object_put(meta);
        json_object_put(b);
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    json_object_object_add(ev, RAY_CALL_ENV, json_object_new_string(c64));
    free(c64);
    json_object_object_add(renv, "env_vars", ev);
    if (pkg_uri)
        json_object_object_add(renv, "working_dir", json_object_new_string(pkg_uri));
    json_object_object_add(b, "runtime_env", renv);
    json_object_object_add(meta, CL_META_BACKEND, json_object_new_string(RAY_BACKEND));
    if (sb)
        json_object_object_add(meta, "sbx_sandbox", json_object_new_string(sb->s.id));
    if (labels) {
        json_object_object_foreach(labels, lk, lv)
            json_object_object_add(meta, lk, json_object_get(lv));
    }
    json_object_object_add(b, "metadata", meta);
    /* The sandbox's resources go with its commands only: a job of the
     * plugin's own (a kill, a look) must never wait for the CPUs the
     * command it is about holds. */
    if (mark && sb && sb->res) {
        json_object_object_foreach(sb->res, k, v)
            json_object_object_add(b, k, json_object_get(v));
    }
    char *url = cl_printf("%s/api/jobs/", c->cl.api);
    cl_resp r = { 0 };
    int rc = -1;
    if (!url)
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cl_request_json(c->cl.http, ctx, "POST", url, b, CL_SAFE, &r, op, "submit the job",
                             NULL) == 0) {
        if (r.status / 100 == 2) {
            rc = 0;
        } else if (r.status == 400 && ray_is_ours(c, ctx, run->sid, op)) {
            /* A re-sent submit whose first reached the cluster (its answer
             * lost): the id, 96 random bits of this plugin, is in use by
             * the job that submit made. */
            rc = 0;
        } else {
            cl_fail_status(c->cl.http, NULL, r.status == 400 ? SBX_ERROR_CONFIGURATION
                                                          : CL_CODE_BY_STATUS,
                           &r, op, "submit the job");
        }
    }
    cl_resp_clear(&r);
    free(url);
    json_object_put(b);
    return rc;
}

#ifdef SBX_HAVE_CLOUD_WS
/* The log's tail (GET /api/jobs/{id}/logs/tail, a WebSocket whose text
 * messages carry the log as it grows; the dashboard closes it once the job
 * is terminal): the bytes not yet taken as whole lines, from log offset
 * base. */
typedef struct ray_tail_state {
    ray_run *run;
    cl_ws *ws;
    cl_buf acc;
    size_t base;
    int failed;     /* the output could not be written: the run's error */
    int closing;
} ray_tail_state;

static int ray_tail_message(void *ud, int binary, const unsigned char *p, size_t n)
{
    ray_tail_state *t = ud;
    (void)binary;
    if (t->run->ended)
        return 0;
    if (cl_buf_append(&t->acc, p, n) < 0) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, "exec", "out of memory");
        t->failed = 1;
        return -1;
    }
    /* ray_take_lines() counts run->seen from the log's start. */
    t->run->seen -= t->base;
    int rc = ray_take_lines(t->run, t->acc.data, t->acc.len, "exec");
    size_t used = t->run->seen;
    t->run->seen += t->base;
    if (rc < 0) {
        t->failed = 1;
        return -1;
    }
    memmove(t->acc.data, t->acc.data + used, t->acc.len - used);
    t->acc.len -= used;
    t->base += used;
    if (t->run->ended && !t->closing && t->ws) {
        /* The end line is in: nothing more to wait for. (A message that
         * comes with the handshake comes before t->ws is set: ray_tail
         * closes then.) */
        t->closing = 1;
        cl_ws_close(t->ws);
    }
    return 0;
}

/* Follows job @run->sid's log through its tail WebSocket until the
 * dashboard closes it (the job is terminal) or the end line is read. 0
 * when it was followed to its end; 1 when the tail could not be followed
 * (no WebSocket, refused, cut: the caller polls GET .../logs from
 * run->seen on, which counts the same characters); -1 with the thread's
 * last error when the output could not be written or @ctx ended. */
static int ray_tail(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, ray_run *run,
                    const char *op)
{
    char *http_url = cl_item_url(c->cl.api, "api/jobs", run->sid, "/logs/tail");
    char *url = http_url ? cl_ws_url(http_url) : NULL;
    char **hdrs = cl_http_auth_headers(c->cl.http);
    ray_tail_state t = { .run = run, .base = run->seen };
    int rc = 1;
    free(http_url);
    if (url && hdrs) {
        cl_ws_opts wo = { .url = url, .headers = (const char *const *)hdrs,
                          .on_message = ray_tail_message, .ud = &t,
                          .what = "follow the job's log" };
        long st = 0;
        cl_ws *ws = NULL;
        if (cl_ws_connect(&wo, ctx, RAY_TAIL_CONNECT_S, &ws, &st, op, NULL) == 0) {
            t.ws = ws;
            if (run->ended && !t.closing) {
                t.closing = 1;
                cl_ws_close(t.ws);
            }
            int r = t.failed ? -1 : cl_ws_run(t.ws, ctx, op, NULL);
            sbx_error_code code = cl_last()->code;
            if (t.failed)
                rc = -1;
            else if (r < 0 && (code == SBX_ERROR_TIMEOUT || code == SBX_ERROR_CANCELLED))
                rc = -1;
            else
                rc = r == 0 ? 0 : 1;
            cl_ws_free(t.ws);
        }
        if (rc == 1)
            CL_LOG(SBX_LOG_DEBUG, "ray: the log tail of job %s could not be followed (%s); "
                   "polling its log", run->sid, cl_last()->msg);
    }
    cl_buf_clear(&t.acc);
    cl_strv_free(hdrs);
    free(url);
    return rc;
}
#endif

/* Follows job @run->sid to its end: its log's new lines as they come
 * (with @tail, through the log's tail WebSocket first: ray_tail), its
 * status between reads, pausing from 10 ms up to 200 ms, until the end line
 * is read (a terminal job's log is read again up to RAY_LOG_SETTLE_S for
 * it) and the job is terminal. 0 with the exit code in *@code (the
 * driver's exit code when the job reports one), or -1 with the thread's
 * last error (a cancelled @ctx: cancelled). *@driver_status gets the job's
 * last status (a new string, NULL when none) when not NULL. */
static int ray_follow(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, ray_run *run,
                      int tail, int *code, const char *op)
{
    cl_bound bd = cl_bound_make(ctx, 0);
    double pause = 0.01, settle_until = 0;
    char status[16] = "";
    int64_t driver = 0;
    int have_driver = 0;
#ifdef SBX_HAVE_CLOUD_WS
    /* The log as it grows through its tail; then the status (and, when the
     * tail ended without the end line, the log by polling: CASE-24). */
    if (tail && ray_tail(c, ctx, run, op) < 0)
        return -1;
#else
    (void)tail;
#endif
    for (;;) {
        int missing = 0;
        if (!run->ended && ray_read_log(c, ctx, run, &missing, op) < 0)
            return -1;
        long st = 0;
        json_object *j = ray_job_get(c, ctx, run->sid, &st, op, NULL);
        if (!j) {
            if (st == 404)
                cl_fail(NULL, SBX_ERROR_NOT_FOUND, op, "ray: job %s does not exist (deleted "
                        "by someone else?)", run->sid);
            return -1;
        }
        const char *s = cl_json_str(j, "status");
        snprintf(status, sizeof status, "%s", s ? s : "");
        have_driver = cl_json_int(j, "driver_exit_code", &driver) == 1;
        int term = ray_terminal(s);
        char msg[512];
        const char *m = cl_json_str(j, "message");
        snprintf(msg, sizeof msg, "%s", m ? m : "");
        json_object_put(j);
        if (term && !run->ended) {
            /* Lines written just before the end may reach the log after the
             * status (CASE-24): read it once more at once. */
            if (ray_read_log(c, ctx, run, &missing, op) < 0)
                return -1;
        }
        if (run->ended && term)
            break;
        if (term && !run->ended) {
            if (settle_until == 0)
                settle_until = cl_now() + RAY_LOG_SETTLE_S;
            else if (cl_now() >= settle_until) {
                if (strcmp(status, "STOPPED") == 0) {
                    /* The driver itself was killed (a stop): its own code. */
                    int64_t x = have_driver ? driver : 128 + SIGKILL;
                    *code = x < 0 ? (int)(128 - x) & 0xff : (int)(x & 0xff);
                    return 0;
                }
                cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "ray job %s ended %s without its "
                        "exit code: %s", run->sid, status, msg);
                return -1;
            }
        }
        double left = cl_bound_left(&bd);
        if (left == 0) {
            cl_fail(NULL, SBX_ERROR_TIMEOUT, op, "ray job %s did not end in time (it is %s%s%s)",
                    run->sid, status, msg[0] ? ": " : "", msg);
            return -1;
        }
        double p = left > 0 && left < pause ? left : pause;
        if (cl_sleep(p, bd.cancel_fd)) {
            cl_fail(NULL, SBX_ERROR_CANCELLED, op, "cancelled while following ray job %s",
                    run->sid);
            return -1;
        }
        pause = pause < 0.2 ? pause * 2 : 0.2;
    }
    if (have_driver && !run->gone)
        *code = driver < 0 ? (int)(128 - driver) & 0xff : (int)(driver & 0xff);
    else
        *code = run->end_code;
    return 0;
}

static void ray_new_sid(ray_run *run)
{
    memcpy(run->sid, "sbx-", 4);
    cl_random_hex(run->sid + 4, 12);
}

/* Runs the plugin's own script @script under @root as one job and follows
 * it (bounded by RAY_SHORT_S and @ctx): 0 with its exit code in *@code, or
 * -1 with *@error set. @sb may be NULL (no sandbox's resources). The
 * sandbox is gone (reason gone) when the driver finds no @root. @sid (NULL:
 * one made here): the job's submission_id, and then its record is kept
 * (the sandbox's label); @labels: more metadata (ray_submit()). */
static int ray_run_script(struct sbx_plugin_sandbox *sb, struct sbx_plugin_client *c,
                          const sbx_call_ctx *ctx, const char *root, const char *script,
                          const char *const *env, const char *sid, json_object *labels,
                          int *code, const char *op, sbx_error **error)
{
    ray_run run = { 0 };
    ray_new_sid(&run);
    cl_bound bd = cl_bound_make(ctx, RAY_SHORT_S);
    sbx_call_ctx c2 = { sizeof(c2), bd.until, ctx ? ctx->cancel_fd : -1,
                        ctx ? ctx->create_token : NULL };
    if (sid)
        snprintf(run.sid, sizeof run.sid, "%s", sid);
    int rc = ray_submit(sb, c, &c2, &run, root, script, env, NULL, 0, 0, labels, op);
    cl_last_error l = *cl_last();       /* what follows writes over it */
    if (rc == 0) {
        /* Polled: the plugin's own jobs print little and end at once. */
        rc = ray_follow(c, &c2, &run, 0, code, op);
        l = *cl_last();
        /* Its record goes; one that did not end in time is stopped first. */
        if (!sid && rc == 0)
            ray_job_delete(c, run.sid, NULL);
        else if (!sid)
            ray_job_reap(c, run.sid, ctx);
    }
    if (rc < 0) {
        sbx_error *e = cl_fail(error, l.code, op, "%s", l.msg);
        if (l.http_status) {
            char st[32];
            snprintf(st, sizeof st, "%ld", l.http_status);
            cl_context(e, "http_status", st);
        }
        if (l.unknown)
            cl_outcome_unknown(e);
        return -1;
    }
    if (run.gone) {
        if (sb) {
            cl_gone_set(&sb->s.gone);
            cl_gone_error(error, op, RAY_BACKEND, sb->s.id);
        } else {
            cl_fail(error, SBX_ERROR_NOT_FOUND, op, "ray: %s does not exist on the cluster", root);
        }
        return -1;
    }
    return 0;
}

/* The run_short of provider.h: @cmd in the sandbox's directory. */
static int ray_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                         int *code, const char *op, sbx_error **error)
{
    if (ray_check(sb, op, error) < 0)
        return -1;
    return ray_run_script(sb, sb->c, ctx, sb->dir, cmd, NULL, NULL, NULL, code, op, error);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

static int ray_setup(const sbx_host_services *host, sbx_error **error)
{
    return cl_setup(host, RAY_BACKEND, error);
}

static void ray_client_clear(sbx_plugin_client *c)
{
    free(c->python);
    free(c->root_dir);
}

/* The token file's first line, blanks trimmed, or NULL (errno set when the
 * file could not be read, 0 when it holds no token). */
static char *ray_token_file(const char *path)
{
    errno = 0;
    FILE *f = path && *path ? fopen(path, "re") : NULL;
    if (!f)
        return NULL;
    errno = 0;
    char buf[4096];
    char *t = fgets(buf, sizeof buf, f) ? buf : NULL;
    fclose(f);
    if (!t)
        return NULL;
    t[strcspn(t, "\r\n")] = '\0';
    while (*t == ' ' || *t == '\t')
        t++;
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
        t[--n] = '\0';
    char *out = *t ? strdup(t) : NULL;
    errno = 0;
    return out;
}

/* The dashboard's URL: config "address", RAY_ADDRESS, or the default;
 * "host:port" gets http://. */
static char *ray_address(json_object *cfg, sbx_error **error)
{
    const char *v = cl_json_str(cfg, "address");
    const char *from = "the client option address";
    if (!v) {
        v = getenv("RAY_ADDRESS");
        from = "RAY_ADDRESS";
    }
    if (!v || !*v)
        return cl_trim_slash(RAY_DEFAULT_URL);
    if (strncmp(v, "ray://", 6) == 0 || strcmp(v, "auto") == 0) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                               "ray: %s is %s, not the dashboard's URL: the Jobs API needs "
                               "http://HOST:8265", from, v);
        cl_context(e, "address", v);
        return NULL;
    }
    char *u = strstr(v, "://") ? strdup(v) : cl_printf("http://%s", v);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "address", json_object_new_string(u ? u : ""));
    char *out = u ? cl_base_url(o, "address", NULL, NULL, error) : NULL;
    json_object_put(o);
    free(u);
    return out;
}

static const char *const ray_key_envs[] = { "RAY_AUTH_TOKEN", NULL };

/* The dashboard's URL is ray_address()'s, set by the plugin. */
static const cl_client_spec ray_client_spec = {
    .provider = RAY_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .key_envs = ray_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .clear = ray_client_clear, .find = ray_reap_find, .del = ray_reap_delete,
};

static int ray_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&ray_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    if (!(c->cl.api = ray_address(cfg, error)))
        goto fail;
    const char *t = getenv("RAY_AUTH_TOKEN");
    if (!t || !*t) {
        const char *tp = getenv("RAY_AUTH_TOKEN_PATH");
        char *tok = ray_token_file(tp);
        if (!tok && tp && *tp) {
            /* A file named and not read is a mistake, not "no token". */
            sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op, "ray: cannot read a "
                                   "token from %s (RAY_AUTH_TOKEN_PATH): %s", tp,
                                   errno ? strerror(errno) : "it is empty");
            cl_context(e, "path", tp);
            goto fail;
        }
        if (!tok && getenv("HOME")) {
            char *p = cl_printf("%s/.ray/auth_token", getenv("HOME"));
            tok = ray_token_file(p);
            free(p);
        }
        if (tok) {
            char *h = cl_printf("Bearer %s", tok);
            int bad = !h || cl_http_set_auth(c->cl.http, "Authorization", h) < 0
                      || cl_http_set_secret(c->cl.http, tok) < 0;
            free(h);
            free(tok);
            if (bad) {
                cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                goto fail;
            }
        }
    }
    const char *py = cl_json_str(cfg, "python");
    const char *rd = cl_json_str(cfg, "root_dir");
    if (rd && !cl_workdir_ok(rd)) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "ray: root_dir %s is not an "
                           "absolute path without \"..\"", rd), "option", "root_dir");
        goto fail;
    }
    if (!(c->python = strdup(py && *py ? py : "python3"))
        || !(c->root_dir = cl_trim_slash(rd ? rd : RAY_DEFAULT_ROOT))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

/* The dashboard answers its version (GET /api/version), once, within 5 s:
 * else the backend is unavailable with the reason (`sbx backends`). */
static int ray_probe(sbx_plugin_client *client, const sbx_call_ctx *ctx, uint64_t *caps,
                     sbx_error **error)
{
    const char *op = "probe";
    char *url = cl_printf("%s/api/version", client->cl.api);
    cl_req rq = { .method = "GET", .url = url, .idempotent = CL_SAFE, .once = 1, .secs = 5,
                  .what = "reach the Ray dashboard" };
    cl_resp r = { 0 };
    int rc = -1;
    if (!url)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (cl_request(client->cl.http, ctx, &rq, &r, op, error) == 0) {
        if (r.status == 200)
            rc = 0;
        else
            cl_fail_status(client->cl.http, error, CL_CODE_BY_STATUS, &r, op,
                           "reach the Ray dashboard");
    }
    cl_resp_clear(&r);
    free(url);
    if (rc == 0)
        *caps = RAY_CAPS;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

static void ray_sandbox_free(sbx_plugin_sandbox *sb)
{
    if (sb) {
        free(sb->dir);
        free(sb->meta);
        json_object_put(sb->res);
    }
    cl_sandbox_free(sb);
}

static struct sbx_plugin_sandbox *ray_sandbox_new(struct sbx_plugin_client *c, const char *id,
                                                  const char *dir, const char *meta, int made)
{
    struct sbx_plugin_sandbox *sb = cl_sandbox_alloc(sizeof(*sb), id);
    if (!sb)
        return NULL;
    sb->c = c;
    sb->made = made;
    if (cl_dup(&sb->dir, dir) < 0 || cl_dup(&sb->meta, meta) < 0) {
        ray_sandbox_free(sb);
        return NULL;
    }
    return sb;
}

/* The entrypoint resources of the create's cpu, gpu and memory_mb (its
 * bytes also in *@mem_limit, 0 when unset), or of the backend option
 * entrypoint_memory_mb (a reservation only; refused beside memory_mb): a
 * new object, or NULL with *@error. */
static json_object *ray_resources(const sbx_plugin_create_request *rq, int64_t *mem_limit,
                                  sbx_error **error)
{
    uint64_t set = rq->set_fields;
    char buf[64];
    json_object *res = json_object_new_object(), *bo = NULL;
    if (set & SBX_OPTION_CPU) {
        if (!(rq->cpu > 0) || !isfinite(rq->cpu)) {
            snprintf(buf, sizeof buf, "%g", rq->cpu);
            ray_refuse(error, "cpu", buf, "must be more than 0 (Ray's logical CPUs)");
            goto fail;
        }
        json_object_object_add(res, "entrypoint_num_cpus", json_object_new_double(rq->cpu));
    }
    if ((set & SBX_OPTION_GPU) && rq->gpu && *rq->gpu) {
        /* "N", "TYPE" or "TYPE:N". */
        const char *colon = strrchr(rq->gpu, ':');
        const char *num = colon ? colon + 1 : rq->gpu;
        char *end = NULL;
        double n = strtod(num, &end);
        int has_num = end && end != num && *end == '\0';
        if (!has_num && colon) {
            ray_refuse(error, "gpu", rq->gpu, "give N, TYPE or TYPE:N (N a number of GPUs)");
            goto fail;
        }
        if (!has_num)
            n = 1;
        if (!(n > 0) || !isfinite(n)) {
            ray_refuse(error, "gpu", rq->gpu, "the number of GPUs must be more than 0");
            goto fail;
        }
        json_object_object_add(res, "entrypoint_num_gpus", json_object_new_double(n));
        if (colon || !has_num) {
            size_t tl = colon ? (size_t)(colon - rq->gpu) : strlen(rq->gpu);
            char *key = cl_printf("accelerator_type:%.*s", (int)tl, rq->gpu);
            json_object *er = json_object_new_object();
            json_object_object_add(er, key ? key : "", json_object_new_double(0.001));
            free(key);
            json_object_object_add(res, "entrypoint_resources", er);
        }
    }
    *mem_limit = 0;
    if (set & SBX_OPTION_MEMORY_MB) {
        if (rq->memory_mb <= 0 || rq->memory_mb > INT64_MAX / (1024 * 1024)) {
            snprintf(buf, sizeof buf, "%lld", (long long)rq->memory_mb);
            ray_refuse(error, "memory_mb", buf, "must be a whole number of MiB above 0");
            goto fail;
        }
        /* Ray's entrypoint_memory reserves it for scheduling; the driver
         * enforces it as a limit on the command's processes. */
        *mem_limit = rq->memory_mb * 1024 * 1024;
        json_object_object_add(res, "entrypoint_memory", json_object_new_int64(*mem_limit));
    }
    if (rq->backend_options && *rq->backend_options) {
        bo = json_tokener_parse(rq->backend_options);
        if (!bo || !json_object_is_type(bo, json_type_object)) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                               "ray backend_options: %s is not a JSON object",
                               rq->backend_options), "option", "backend_options");
            goto fail;
        }
        json_object_object_foreach(bo, k, v) {
            int64_t mb = 0;
            if (strcmp(k, "entrypoint_memory_mb") != 0) {
                sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                       "ray backend_options: unknown key \"%s\" (known: "
                                       "\"entrypoint_memory_mb\")", k);
                cl_context(e, "option", "backend_options");
                cl_context(e, "name", k);
                cl_context(e, "known", "\"entrypoint_memory_mb\"");
                goto fail;
            }
            if (*mem_limit) {
                sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                       "ray backend_options: entrypoint_memory_mb %s beside "
                                       "memory_mb %lld: give one (memory_mb reserves the "
                                       "memory and limits the command to it)",
                                       json_object_to_json_string(v),
                                       (long long)rq->memory_mb);
                cl_context(e, "option", "backend_options");
                cl_context(e, "name", k);
                goto fail;
            }
            if (!json_object_is_type(v, json_type_int) || (mb = json_object_get_int64(v)) <= 0
                || mb > INT64_MAX / (1024 * 1024)) {
                sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                       "ray backend_options: entrypoint_memory_mb %s is not a "
                                       "whole number of MiB above 0",
                                       json_object_to_json_string(v));
                cl_context(e, "option", "backend_options");
                cl_context(e, "name", k);
                goto fail;
            }
            json_object_object_add(res, "entrypoint_memory",
                                   json_object_new_int64(mb * 1024 * 1024));
        }
    }
    json_object_put(bo);
    return res;
fail:
    json_object_put(bo);
    json_object_put(res);
    return NULL;
}

/* The options Ray has no notion of, refused when the caller set them. */
static int ray_refusals(const sbx_plugin_create_request *rq, sbx_error **error)
{
    uint64_t set = rq->set_fields;
    char buf[64];
    if (rq->image) {
        ray_refuse(error, "image", rq->image, "Ray runs jobs on the cluster's nodes");
        return -1;
    }
    if (rq->template_name) {
        ray_refuse(error, "template", rq->template_name, "Ray has no templates");
        return -1;
    }
    if (rq->snapshot_id) {
        ray_refuse(error, "snapshot_id", rq->snapshot_id, "Ray has no snapshots");
        return -1;
    }
    if ((set & SBX_OPTION_APP_NAME) && rq->app_name) {
        ray_refuse(error, "app_name", rq->app_name, "Ray has no apps");
        return -1;
    }
    if ((set & SBX_OPTION_DISK_MB) && rq->disk_mb > 0) {
        snprintf(buf, sizeof buf, "%lld", (long long)rq->disk_mb);
        ray_refuse(error, "disk_mb", buf, "Ray does not limit a job's disk");
        return -1;
    }
    if (!rq->allow_internet) {
        ray_refuse(error, "allow_internet", "false", "Ray has no network policy for jobs");
        return -1;
    }
    if ((set & SBX_OPTION_TIMEOUT_SECS) && !(rq->timeout_secs > 0)) {
        snprintf(buf, sizeof buf, "%g", rq->timeout_secs);
        ray_refuse(error, "timeout_secs", buf, "must be more than 0");
        return -1;
    }
    return 0;
}

/* The script that ends sandbox @sb: kills every process marked as its own,
 * removes its own files and, when create made it, its directory. */
static char *ray_destroy_script(const char *id, const char *dir, const char *meta, int made)
{
    char *qd = cl_shell_quote(dir), *qm = cl_shell_quote(meta);
    char *kill = cl_mark_kill_command_var(RAY_SANDBOX_MARK, id, SIGKILL);
    /* The scan ends with "exit 0": a subshell of its own. */
    char *s = qd && qm && kill
              ? cl_printf("(%s)\nrm -rf -- %s%s%s\n", kill, qm, made ? " " : "",
                          made ? qd : "")
              : NULL;
    free(qd);
    free(qm);
    free(kill);
    return s;
}

/* The lifetime job of sandbox @id: its id and RAY_LIFETIME_SUFFIX. */
static void ray_lifetime_sid(const char *id, char *sid, size_t size)
{
    snprintf(sid, size, "%s%s", id, RAY_LIFETIME_SUFFIX);
}

static int ray_remove(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *id,
                      const char *dir, const char *meta, int made, const char *op,
                      sbx_error **error)
{
    char *s = ray_destroy_script(id, dir, meta, made);
    char life[64];
    int code = 0;
    if (!s) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    /* The lifetime job first (stopped, its record deleted; none, or one
     * that ended at the expiry, is fine): it must not outlive the sandbox. */
    ray_lifetime_sid(id, life, sizeof life);
    ray_job_reap(c, life, ctx);
    int rc = ray_run_script(NULL, c, ctx, "/", s, NULL, NULL, NULL, &code, op, error);
    free(s);
    if (rc == 0 && code != 0) {
        cl_context(cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "ray: cannot remove sandbox "
                           "%s (%s): the job exited %d", id, dir, code), "sandbox_id", id);
        return -1;
    }
    if (rc < 0)
        return -1;
    /* Then its label: the record of the job that made it (id). */
    char *url = cl_item_url(c->cl.api, "api/jobs", id, "");
    rc = cl_delete_url(c->cl.http, ctx, url, op, "delete the sandbox's job record", error);
    free(url);
    return rc;
}

/*
 * The sandbox's lifetime, from readiness: a job of its own (submission_id
 * ID-lifetime, metadata sbx_kind=lifetime), submitted once the sandbox is
 * made and not followed, whose entrypoint, a shell without the driver (a
 * stop's SIGTERM to its process group ends it), sleeps the lifetime and
 * RAY_LIFETIME_GRACE_S and then does what destroy's job does: kills every
 * process of the sandbox and removes what create made (the label stays
 * for sbx_gc()). Destroy stops it and deletes its record. Sets
 * @sb->expires_at. 0, or -1 with *@error.
 */
static int ray_lifetime_start(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                              const char *op, sbx_error **error)
{
    struct sbx_plugin_client *c = sb->c;
    char sid[64], secs[32];
    ray_lifetime_sid(sb->s.id, sid, sizeof sid);
    snprintf(secs, sizeof secs, "%.3f", sb->lifetime + RAY_LIFETIME_GRACE_S);
    char *end = ray_destroy_script(sb->s.id, sb->dir, sb->meta, sb->made);
    char *script = end ? cl_printf("sleep %s || exit 0\n%s", secs, end) : NULL;
    char *q = script ? cl_shell_quote(script) : NULL;
    char *entry = q ? cl_printf("sh -c %s", q) : NULL;
    char *url = cl_printf("%s/api/jobs/", c->cl.api);
    json_object *b = json_object_new_object(), *meta = json_object_new_object();
    cl_resp r = { 0 };
    int rc = -1;
    free(end);
    free(script);
    free(q);
    if (!entry || !url || !b || !meta) {
        json_object_put(meta);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    json_object_object_add(b, "entrypoint", json_object_new_string(entry));
    json_object_object_add(b, "submission_id", json_object_new_string(sid));
    json_object_object_add(meta, CL_META_BACKEND, json_object_new_string(RAY_BACKEND));
    json_object_object_add(meta, "sbx_kind", json_object_new_string("lifetime"));
    json_object_object_add(meta, "sbx_sandbox", json_object_new_string(sb->s.id));
    json_object_object_add(b, "metadata", meta);
    /* Counted from here: the job sleeps from its start, a moment later, so
     * the expiry told to callers is never later than the real end. */
    sb->expires_at = cl_wallclock() + sb->lifetime;
    if (cl_request_json(c->cl.http, ctx, "POST", url, b, CL_SAFE, &r, op,
                        "submit the lifetime job", error) < 0)
        goto out;
    if (r.status / 100 == 2 || (r.status == 400 && ray_is_ours(c, ctx, sid, op)))
        rc = 0;
    else
        cl_fail_status(c->cl.http, error, r.status == 400 ? SBX_ERROR_CONFIGURATION
                                                        : CL_CODE_BY_STATUS,
                       &r, op, "submit the lifetime job");
out:
    cl_resp_clear(&r);
    json_object_put(b);
    free(entry);
    free(url);
    return rc;
}

static int ray_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                      const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                      sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    if (cl_workdir_check(RAY_BACKEND, rq->workdir, error) < 0 || ray_refusals(rq, error) < 0)
        return -1;
    int64_t mem_limit = 0;
    json_object *res = ray_resources(rq, &mem_limit, error);
    if (!res)
        return -1;
    char id[32] = "sbx-ray-";
    cl_random_hex(id + 8, 8);
    int made = !(rq->workdir && *rq->workdir);
    char *dir = made ? cl_printf("%s/%s", c->root_dir, id) : cl_trim_slash(rq->workdir);
    char *meta = cl_printf("%s/%s.sbx", c->root_dir, id);
    char *envf = cl_env_file(rq->env);
    struct sbx_plugin_sandbox *sb = dir && meta ? ray_sandbox_new(c, id, dir, meta, made) : NULL;
    char *qd = dir ? cl_shell_quote(dir) : NULL, *qm = meta ? cl_shell_quote(meta) : NULL;
    char *tmp = dir ? ray_join(dir, "tmp") : NULL, *qt = tmp ? cl_shell_quote(tmp) : NULL;
    /* The job that makes the sandbox is its label: its record (id = the
     * sandbox's) stays until destroy, with the ownership metadata that
     * list_owned, destroy_by_id and `sbx gc` read. The create's env goes
     * to the sandbox's files by a job of its own, whose record goes at once
     * (a record holds its runtime environment). */
    char *script = qd && qm && qt
                   ? cl_printf("mkdir -p -- %s 2>/dev/null || exit 3\n"
                               "mkdir -p -- %s %s || exit 4\n", qd, qt, qm)
                   : NULL;
    char *env_script = qm ? cl_printf("printf '%%s' \"$SBX_RAY_ENV_FILE\" > %s/env", qm) : NULL;
    char *ev[2] = { NULL, NULL };
    ev[0] = envf ? cl_printf("SBX_RAY_ENV_FILE=%s", envf) : NULL;
    char exp[32];
    snprintf(exp, sizeof exp, "%.0f", rq->expires_at > 0 ? rq->expires_at : 0.0);
    json_object *labels = json_object_new_object();
    json_object_object_add(labels, "sbx_kind", json_object_new_string("sandbox"));
    json_object_object_add(labels, CL_META_TOKEN, json_object_new_string(
                               ctx && ctx->create_token ? ctx->create_token : ""));
    json_object_object_add(labels, CL_META_EXPIRES, json_object_new_string(exp));
    json_object_object_add(labels, "sbx_dir", json_object_new_string(dir ? dir : ""));
    json_object_object_add(labels, "sbx_meta", json_object_new_string(meta ? meta : ""));
    json_object_object_add(labels, "sbx_made", json_object_new_string(made ? "1" : "0"));
    int rc = -1, code = 0;
    if (!envf) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "ray: an env key of the create is not a "
                "shell variable name");
        goto out;
    }
    if (!sb || !script || !env_script || !ev[0]) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    sb->res = res;
    sb->mem_limit = mem_limit;
    res = NULL;
    if (ray_run_script(sb, c, ctx, "/", script, NULL, id, labels, &code, op, error) < 0
        || (code == 0 && *envf
            && ray_run_script(sb, c, ctx, "/", env_script, (const char *const *)ev, NULL,
                              NULL, &code, op, error) < 0)) {
        if (error && *error)
            cl_context(*error, "sandbox_id", id);
        /* The jobs may have made something before they failed. */
        ray_remove(c, NULL, id, dir, meta, made, op, NULL);
        goto out;
    }
    if (code != 0) {
        if (code == 3)
            cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "ray: cannot make the "
                               "working directory %s on the cluster", dir), "path", dir);
        else
            cl_context(cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "ray: cannot make the "
                               "sandbox's files in %s (the job exited %d)", meta, code),
                       "path", meta);
        ray_remove(c, NULL, id, dir, meta, made, op, NULL);
        goto out;
    }
    sb->lifetime = rq->timeout_secs > 0 ? rq->timeout_secs : 0;
    if (sb->lifetime > 0 && ray_lifetime_start(sb, ctx, op, error) < 0) {
        if (error && *error)
            cl_context(*error, "sandbox_id", id);
        ray_remove(c, NULL, id, dir, meta, made, op, NULL);
        goto out;
    }
    CL_LOG(SBX_LOG_INFO, "create: sandbox %s in %s on %s", id, dir, c->cl.api);
    *sandbox = sb;
    sb = NULL;
    rc = 0;
out:
    ray_sandbox_free(sb);
    json_object_put(res);
    free(dir);
    free(meta);
    free(envf);
    free(qd);
    free(qm);
    free(tmp);
    free(qt);
    free(script);
    free(env_script);
    free(ev[0]);
    json_object_put(labels);
    return rc;
}

static int ray_destroy(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (cl_gone_get(&sb->s.gone))
        return 0;
    if (ray_remove(sb->c, ctx, sb->s.id, sb->dir, sb->meta, sb->made, "destroy", error) < 0)
        return -1;
    cl_gone_set(&sb->s.gone);
    return 0;
}

/* 1 when the sandbox's own files are on the cluster, 0 when not (gone),
 * -1 with *@error. */
static int ray_exists(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *meta,
                      const char *op, sbx_error **error)
{
    char *q = cl_shell_quote(meta), *s = q ? cl_printf("test -d %s", q) : NULL;
    int code = 0, rc = -1;
    if (!s)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (ray_run_script(NULL, c, ctx, "/", s, NULL, NULL, NULL, &code, op, error) == 0)
        rc = code == 0;
    free(q);
    free(s);
    return rc;
}

static int ray_is_alive(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    if (cl_gone_get(&sb->s.gone))
        return 0;
    int rc = ray_exists(sb->c, ctx, sb->meta, "is_alive", error);
    if (rc == 0)
        cl_gone_set(&sb->s.gone);
    return rc;
}

static const char *ray_sandbox_root(sbx_plugin_sandbox *sb)
{
    return sb->dir;
}

/* {"version":1,"sandbox_id","dir","meta","made"[,"resources"][,"memory_limit"]}: no
 * credential, no env value. */
static char *ray_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, RAY_BACKEND, RAY_STATE_VERSION, "sandbox_id", error);
    if (!j)
        return NULL;
    json_object_object_add(j, "dir", json_object_new_string(sb->dir));
    json_object_object_add(j, "meta", json_object_new_string(sb->meta));
    json_object_object_add(j, "made", json_object_new_boolean(sb->made));
    if (sb->res && json_object_object_length(sb->res) > 0)
        json_object_object_add(j, "resources", json_object_get(sb->res));
    if (sb->mem_limit > 0)
        json_object_object_add(j, "memory_limit", json_object_new_int64(sb->mem_limit));
    if (sb->expires_at > 0) {
        json_object_object_add(j, "lifetime", json_object_new_double(sb->lifetime));
        json_object_object_add(j, "expires_at", json_object_new_double(sb->expires_at));
    }
    return cl_state_end(j, error);
}

static int ray_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                      sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "resume";
    const char *id = NULL;
    json_object *data = cl_state_in(state_json, RAY_STATE_VERSION, "sandbox_id", RAY_BACKEND,
                                    op, &id, error);
    if (!data)
        return -1;
    const char *dir = cl_json_str(data, "dir"), *meta = cl_json_str(data, "meta");
    json_object *mv = NULL, *res = NULL;
    int rc = -1;
    if (!cl_workdir_ok(dir) || !cl_workdir_ok(meta)
        || !json_object_object_get_ex(data, "made", &mv)
        || !json_object_is_type(mv, json_type_boolean)
        || strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(id)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "ray session state: needs absolute "
                "\"dir\" and \"meta\", a boolean \"made\" and a plain \"sandbox_id\"");
        goto out;
    }
    json_object *lv = NULL;
    double lifetime = 0, expires_at = 0;
    if (json_object_object_get_ex(data, "lifetime", &lv))
        lifetime = json_object_get_double(lv);
    if (json_object_object_get_ex(data, "expires_at", &lv))
        expires_at = json_object_get_double(lv);
    int there = ray_exists(client, ctx, meta, op, error);
    if (there < 0)
        goto out;
    if (!there) {
        /* Ended by its lifetime job: say so, and remove what is left of it
         * on the cluster (its label and the lifetime job's record; best
         * effort), as sbx_gc() reaps it through a resume. */
        if (cl_lifetime_check(expires_at, lifetime, id, op, error) == 0)
            cl_gone_error(error, op, RAY_BACKEND, id);
        else
            ray_remove(client, ctx, id, dir, meta, json_object_get_boolean(mv), op, NULL);
        goto out;
    }
    struct sbx_plugin_sandbox *sb = ray_sandbox_new(client, id, dir, meta,
                                                    json_object_get_boolean(mv));
    if (!sb) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (json_object_object_get_ex(data, "resources", &res)
        && json_object_is_type(res, json_type_object))
        sb->res = json_object_get(res);
    int64_t lim = 0;
    if (cl_json_int(data, "memory_limit", &lim) == 1 && lim > 0)
        sb->mem_limit = lim;
    sb->lifetime = lifetime > 0 ? lifetime : 0;
    sb->expires_at = expires_at > 0 ? expires_at : 0;
    *sandbox = sb;
    rc = 0;
out:
    json_object_put(data);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The sandboxes this library made: their create jobs' records               */
/* ------------------------------------------------------------------------ */

/* Every sandbox label on the cluster (GET /api/jobs/, one answer: Ray's
 * list has no pages): the jobs with metadata sbx_backend=ray and
 * sbx_kind=sandbox. */
static int ray_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                          sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_owned";
    long st = 0;
    char *url = cl_printf("%s/api/jobs/", client->cl.api);
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    json_object *j = cl_get_json(client->cl.http, ctx, url, &st, op, "list jobs", error);
    free(url);
    if (!j) {
        if (st == 404)
            cl_fail(error, SBX_ERROR_NOT_FOUND, op, "ray: no job list at %s", client->cl.api);
        return -1;
    }
    if (!json_object_is_type(j, json_type_array)) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "ray: the job list is not an array");
        json_object_put(j);
        return -1;
    }
    for (size_t i = 0; i < json_object_array_length(j); i++) {
        json_object *it = json_object_array_get_idx(j, i);
        json_object *meta = cl_json_path(it, "metadata", NULL);
        const char *be = cl_json_str(meta, CL_META_BACKEND), *kind = cl_json_str(meta, "sbx_kind");
        const char *tok = cl_json_str(meta, CL_META_TOKEN), *exp = cl_json_str(meta, CL_META_EXPIRES);
        const char *id = cl_json_str(it, "submission_id");
        if (!be || strcmp(be, RAY_BACKEND) != 0 || !kind || strcmp(kind, "sandbox") != 0 || !id)
            continue;
        int64_t started = 0;
        cl_json_int(it, "start_time", &started);
        sbx_plugin_owned_info info = { sizeof(info), id, tok ? tok : "",
                                       (double)started / 1000.0, exp ? strtod(exp, NULL) : 0 };
        if (fn(&info, ud) != 0)
            break;
    }
    json_object_put(j);
    return 0;
}

/* Reads sandbox @id's label (its create job) and removes the sandbox as
 * destroy does; 0 also when there is no label any more. */
static int ray_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                             sbx_error **error)
{
    const char *op = "destroy_by_id";
    long st = 0;
    json_object *j = ray_job_get(client, ctx, id, &st, op, error);
    if (!j)
        return st == 404 ? 0 : -1;
    json_object *meta = cl_json_path(j, "metadata", NULL);
    const char *be = cl_json_str(meta, CL_META_BACKEND), *kind = cl_json_str(meta, "sbx_kind");
    const char *dir = cl_json_str(meta, "sbx_dir"), *m = cl_json_str(meta, "sbx_meta");
    const char *made = cl_json_str(meta, "sbx_made");
    int rc = -1;
    if (!be || strcmp(be, RAY_BACKEND) != 0 || !kind || strcmp(kind, "sandbox") != 0
        || !cl_workdir_ok(dir) || !cl_workdir_ok(m) || !made) {
        cl_context(cl_fail(error, SBX_ERROR_NOT_FOUND, op, "ray: job %s is no sandbox of this "
                           "library (its metadata has no sandbox labels)", id), "sandbox_id", id);
    } else {
        rc = ray_remove(client, ctx, id, dir, m, strcmp(made, "1") == 0, op, error);
    }
    json_object_put(j);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

static int ray_out(void *ud, int stream, const char *p, size_t n)
{
    ray_proc *rp = ud;
    return cl_proc_output(&rp->base, stream, p, n);
}

static int ray_exec_run(cl_proc *base)
{
    ray_proc *p = (ray_proc *)base;
    struct sbx_plugin_sandbox *sb = p->sb;
    struct sbx_plugin_client *c = sb->c;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    char uri[64];
    int code = -1, have_pkg = 0;
    char *envf = cl_printf("%s/env", sb->meta);
    char *src = envf ? cl_env_file_source(envf) : NULL;
    char *script = src ? cl_printf("%s%s", src, p->script) : NULL;
    free(envf);
    free(src);
    if (!script) {
        cl_proc_fail(base, SBX_ERROR_RESOURCE_EXHAUSTED, 0, NULL, NULL, "out of memory");
        return -1;
    }
    int big = strlen(script) > RAY_INLINE_SCRIPT;
    if (p->stdin_fd >= 0 || big) {
        if (ray_put_package(c, &ctx, p->stdin_fd, big ? script : NULL, uri, op, NULL) < 0)
            goto fail;
        have_pkg = 1;
    }
    if (ray_submit(sb, c, &ctx, &p->run, sb->dir, big ? NULL : script,
                   (const char *const *)p->env, have_pkg ? uri : NULL, p->stdin_fd >= 0, 1,
                   NULL, op) < 0) {
        /* No answer: the POST may have reached the cluster (the free
         * looks for the job by its id, ours). */
        if (cl_last()->http_status == 0) {
            pthread_mutex_lock(&base->lock);
            p->submit_lost = 1;
            pthread_mutex_unlock(&base->lock);
        }
        goto fail;
    }
    pthread_mutex_lock(&base->lock);
    p->submitted = 1;
    pthread_mutex_unlock(&base->lock);
    int rc = ray_follow(c, &ctx, &p->run, 1, &code, op);
    /* A job that ended has its record deleted here; one whose follow
     * failed (the cluster not answering, a stop) may run on: the free
     * stops it and deletes its record (ray_job_reap). */
    if (rc == 0 && ray_job_delete(c, p->run.sid, NULL) == 0) {
        pthread_mutex_lock(&base->lock);
        p->deleted = 1;
        pthread_mutex_unlock(&base->lock);
    }
    if (rc < 0)
        goto fail;
    if (p->run.gone) {
        cl_gone_set(&sb->s.gone);
        cl_gone_error(NULL, op, RAY_BACKEND, sb->s.id);
        goto fail;
    }
    free(script);
    return code;
fail:
    free(script);
    cl_proc_fail_in(base, &sb->s);
    return -1;
}

static void ray_proc_free_fields(ray_proc *p)
{
    if (p->stdin_fd >= 0)
        close(p->stdin_fd);
    cl_strv_free(p->env);
    free(p->script);
}

static int ray_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                          const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                          sbx_error **error)
{
    const char *op = "exec";
    if (cl_exec_check(&sb->s, RAY_BACKEND, rq, 0, error) < 0
        || cl_lifetime_check(sb->expires_at, sb->lifetime, sb->s.id, op, error) < 0)
        return -1;
    ray_proc *p = calloc(1, sizeof(*p));
    if (!p) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    p->sb = sb;
    p->stdin_fd = -1;
    if (ctx && ctx->deadline > 0) {
        double left = ctx->deadline - cl_now();
        p->call_s = left > 0.001 ? left : 0.001;
    }
    ray_new_sid(&p->run);
    p->run.out = ray_out;
    p->run.ud = p;
    char *cwd = rq->cwd && *rq->cwd ? ray_join(sb->dir, rq->cwd) : strdup(sb->dir);
    p->script = cwd ? cl_shell_script(rq->argv, rq->shell, cwd) : NULL;
    free(cwd);
    p->env = cl_strv_dup(rq->env);
    if (cl_exec_launch(&p->base, ray_exec_run, p, p->script && p->env, rq, &p->stdin_fd, op,
                       error) < 0) {
        ray_proc_free_fields(p);
        free(p);
        return -1;
    }
    *process = (sbx_plugin_process *)p;
    return 0;
}

static int ray_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                         int *exit_code, sbx_error **error)
{
    (void)ctx;
    ray_proc *p = (ray_proc *)process;
    return cl_exec_wait_script(process, p->sb, p->script, ray_run_short, timeout_ms, exit_code,
                               error);
}

/* SBX_PLUGIN_EXEC_OOM_KILLED when the driver killed the command for going
 * past the sandbox's memory_mb (its "m" line); read after exec_wait
 * returned 1, once the worker is done with the run. */
static int ray_exec_end_info(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                             uint64_t *flags, sbx_error **error)
{
    (void)ctx;
    (void)error;
    ray_proc *p = (ray_proc *)process;
    pthread_mutex_lock(&p->base.lock);
    *flags = p->run.oom ? SBX_PLUGIN_EXEC_OOM_KILLED : 0;
    pthread_mutex_unlock(&p->base.lock);
    return 0;
}

/* SIGKILL first stops the command's job (POST .../stop: Ray sends the
 * driver SIGTERM, on which it kills the command's session and reports);
 * then every process of the command (each carries CL_EXEC_MARK=<its job's
 * id>, setsid'd ones included) gets @sig from a job of its own. */
static int ray_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                         sbx_error **error)
{
    ray_proc *p = (ray_proc *)process;
    pthread_mutex_lock(&p->base.lock);
    int stop = sig == SIGKILL && p->submitted && !p->base.ended;
    pthread_mutex_unlock(&p->base.lock);
    if (stop && ray_job_stop(p->sb->c, ctx, p->run.sid, "exec_kill", error) < 0)
        return -1;
    return cl_proc_mark_kill(&p->base, p->sb, ray_run_short, ctx, p->run.sid, sig, error);
}

/* A process freed while it runs has its command killed, its job stopped
 * and its record deleted, all within the start call's span (p->call_s:
 * the client's call timeout) when it had one, else the plugin's own
 * bounds (30 s for the kill, RAY_REAP_S for the reap): a free on a
 * cluster that stopped answering does not hold the caller much past its
 * call timeout. A job whose submit went unanswered (the free cancelled the
 * wait for it) may reach the cluster after the reap looked: the client's
 * reaper looks for it by its id for RAY_SUBMIT_LOOK_S more. What is left
 * is logged (info) and stays on the cluster, its metadata naming the
 * sandbox. */
static void ray_exec_free(sbx_plugin_process *process)
{
    ray_proc *p = (ray_proc *)process;
    if (!p)
        return;
    struct sbx_plugin_client *c = p->sb->c;
    double now = cl_now();
    sbx_call_ctx bound = { sizeof(bound), p->call_s > 0 ? now + p->call_s : 0, -1, NULL };
    pthread_mutex_lock(&p->base.lock);
    int running = p->base.started && !p->base.ended;
    pthread_mutex_unlock(&p->base.lock);
    if (running && !cl_gone_get(&p->sb->s.gone)) {
        sbx_call_ctx c2 = { sizeof(c2), now + 30, -1, NULL };
        if (bound.deadline > 0 && bound.deadline < c2.deadline)
            c2.deadline = bound.deadline;
        ray_exec_kill(process, &c2, SIGKILL, NULL);
    }
    cl_proc_clear(&p->base);
    /* The worker is done: its flags are final. */
    int deleted = p->deleted, lost = p->submit_lost;
    if (!deleted && !cl_gone_get(&p->sb->s.gone)) {
        int r = ray_job_reap(c, p->run.sid, bound.deadline > 0 ? &bound : NULL);
        if (r == RAY_REAP_NONE && lost && c->cl.reaper)
            cl_reaper_add(c->cl.reaper, p->run.sid, RAY_SUBMIT_LOOK_S);
        else if (r == RAY_REAP_LEFT)
            CL_LOG(SBX_LOG_INFO, "exec: the job %s of a process freed in sandbox %s stays on "
                   "the cluster (not stopped and deleted within %s%.3g s)", p->run.sid,
                   p->sb->s.id, bound.deadline > 0 ? "the call timeout, " : "",
                   bound.deadline > 0 ? p->call_s : RAY_REAP_S);
    }
    ray_proc_free_fields(p);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin ray_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .name = RAY_BACKEND,
    .version = PACKAGE_VERSION,
    .description = "Ray clusters through the Jobs REST API over libcurl: a sandbox is a "
                   "directory on the cluster, each command a job (stdout and stderr framed "
                   "apart in the job's log); cpu and gpu are entrypoint resources; files move "
                   "through jobs; client options \"address\" (else RAY_ADDRESS), "
                   "\"root_dir\", \"python\"; backend option \"entrypoint_memory_mb\"",
    .caps = RAY_CAPS,
    .setup = ray_setup,
    .client_new = ray_client_new,
    .client_free = cl_client_free_slot,
    .probe = ray_probe,
    .create = ray_create,
    .resume = ray_resume,
    .session_state = ray_session_state,
    .destroy = ray_destroy,
    .is_alive = ray_is_alive,
    .sandbox_free = ray_sandbox_free,
    .sandbox_id = cl_sandbox_id,
    .sandbox_root = ray_sandbox_root,
    .exec_start = ray_exec_start,
    .exec_wait = ray_exec_wait,
    .exec_event_fd = cl_exec_event_fd,
    .exec_kill = ray_exec_kill,
    .exec_end_info = ray_exec_end_info,
    .exec_free = ray_exec_free,
    .list_owned = ray_list_owned,
    .destroy_by_id = ray_destroy_by_id,
};

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
    return &ray_plugin;
}
