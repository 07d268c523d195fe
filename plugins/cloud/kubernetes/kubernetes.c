/*
 * kubernetes.c — libsbx-kubernetes.so, the `kubernetes` backend: one pod
 * per sandbox through the API server (libcurl, the hosted base's HTTP
 * pool, retries and error mapping), commands over the pod's exec
 * subresource as a WebSocket (the base's cl_ws over libwebsockets).
 *
 * Contract: the Kubernetes section of the provider contracts (section 7).
 *
 *  - Credentials and namespace: kubeconfig.h (KUBECONFIG, its current
 *    context, tokens, client certificates; in-cluster service account; exec
 *    plugins refused). Client options (JSON): "kubeconfig", "context",
 *    "namespace" (else the context's, else the service account's, else
 *    "default"), "in_cluster", "image" (default K8_DEFAULT_IMAGE),
 *    "grace_period_s" (delete, default 2), retries as in cloud.h.
 *  - create: a NetworkPolicy "<pod>-deny-egress" (policyTypes [Egress], no
 *    rule: nothing leaves the pod, DNS included) first when allow_internet
 *    is 0; then POST the pod "sbx-<12 hex>": one container "sandbox" that
 *    sleeps, restartPolicy Never, the restricted Pod Security Standard on
 *    pod and container (runAsNonRoot, runAsUser/runAsGroup/fsGroup 1000,
 *    seccompProfile RuntimeDefault, allowPrivilegeEscalation false,
 *    capabilities drop ALL, no service account token), emptyDir volumes at
 *    /work, /tmp and /home/sandbox (HOME), resources requests = limits from
 *    cpu (millicores), memory_mb (Mi), disk_mb (ephemeral-storage) and gpu
 *    ("RESOURCE:N" with a '/' in RESOURCE: that extended resource; "TYPE:N"
 *    otherwise: nvidia.com/gpu N on a node labelled
 *    nvidia.com/gpu.product=TYPE), activeDeadlineSeconds = the lifetime
 *    plus K8_START_BOUND_S (the kubelet counts it from status.startTime,
 *    before the image is pulled; k8_set_deadline() lowers it once the pod
 *    is ready, so that the lifetime counts from readiness), and the labels
 *    sbx_backend, sbx_create_token, sbx_expires_at and sandbox (list_owned,
 *    destroy_by_id and `sbx gc` find pods by them).
 *    Ready (CASE-54): the container's state is running (not only phase
 *    Running), then an exec of `true` is accepted; upgrades refused before
 *    the 101 (the kubelet's "container not found") are retried with
 *    backoff for up to K8_EXEC_RETRY_S. A container waiting with
 *    ImagePullBackOff, ErrImagePull, CrashLoopBackOff, InvalidImageName or
 *    CreateContainer(Config)Error, and a pod that failed, fail create with
 *    the reason and message (creation_failed), and the pod and its policy
 *    are deleted.
 *  - exec: GET .../pods/NAME/exec?container=sandbox&command=sh&command=-c
 *    &command=SCRIPT (the script exports the command's mark and per-call
 *    env, then runs cl_shell_script()) as a WebSocket offering
 *    v5.channel.k8s.io then v4.channel.k8s.io. Channels 1 and 2 go to the
 *    host's descriptors as they come; the exit code is the Status on
 *    channel 3 (Success 0; NonZeroExitCode: details.causes ExitCode; other
 *    failures: execution_failed with its message). A stream that ends
 *    without a Status is a connection error, never exit 0 (CASE-43).
 *    stdin streams as it comes: v5 sends [255, 0] after the last byte
 *    (half-close). A v4 server cannot be told that stdin ended: the plugin
 *    sends stdin as length-prefixed chunks ended by "0\n", decoded in the
 *    pod into a FIFO the command reads (k8_v4_stdin_wrap()), so the command
 *    reads its stdin as it comes and sees EOF (CASE-43 step 4). A terminal
 *    (tty_rows/tty_cols): tty=true, stdout only, resize as {"Width","Height"} on channel 4. The
 *    protocol a server speaks is learnt by the readiness exec.
 *  - files, directories: tar and cat over exec (tar xf - / tar cf -).
 *  - destroy: DELETE the pod with gracePeriodSeconds, then its policy.
 *    resume: by pod name from the session state.
 *  - No snapshot (feature_not_supported, SBX_CAP_SNAPSHOT not declared): a
 *    VolumeSnapshot copies a PersistentVolumeClaim through a CSI driver, and
 *    a sandbox's state is in emptyDirs and the container's root filesystem
 *    (README, "Snapshots: none"); commands run as the pod's user
 *    (a per-command user is refused).
 */
#include "cloud.h"
#include "provider.h"
#include "ws.h"
#include "kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#define K8_BACKEND "kubernetes"
#define K8_DEFAULT_IMAGE "debian:bookworm-slim"
#define K8_CONTAINER "sandbox"
#define K8_HOME "/home/sandbox"
#define K8_UID 1000
#define K8_STATE_VERSION 1
#define K8_READY_S 300.0            /* bound on waiting for the container */
#define K8_EXEC_RETRY_S 30.0        /* refused upgrades retried this long */
#define K8_START_BOUND_S 360        /* activeDeadlineSeconds past the lifetime at
                                     * create: more than a create waits for the
                                     * container (K8_READY_S + K8_EXEC_RETRY_S) */
#define K8_DEFAULT_GRACE_S 2
#define K8_PROTOCOLS "v5.channel.k8s.io,v4.channel.k8s.io"
#define K8_CHUNK 32768
/* The container's OOM-kill counter (cgroup v2 memory.events, else v1
 * memory.oom_control, as the container sees its own cgroup), and the marker
 * of a command whose run saw it rise (%s: the command's tag). */
#define K8_OOM_FN                                                                  \
    "__sbx_oom() { for f in /sys/fs/cgroup/memory.events "                         \
    "/sys/fs/cgroup/memory/memory.oom_control; do [ -r \"$f\" ] || continue; "     \
    "while read -r k v; do [ \"$k\" = oom_kill ] && { echo \"$v\"; return; }; "    \
    "done < \"$f\"; done; echo 0; }\n"
#define K8_OOM_MARK "/tmp/.sbx-oom-%s"
#define K8_SCRIPT_INLINE_MAX 2048   /* longer scripts are staged as a file (the URL
                                     * holds the script percent-encoded) */
#define K8_BACKEND_OPTIONS "\"image_pull_policy\", \"node_selector\", \"service_account\""

#define K8_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_FILES | SBX_CAP_DIR_TRANSFER     \
                 | SBX_CAP_RESUME | SBX_CAP_PTY | SBX_CAP_ISOLATION | SBX_CAP_NETWORK_POLICY \
                 | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT | SBX_CAP_DISK_LIMIT            \
                 | SBX_CAP_GPU | SBX_CAP_IMAGE | SBX_CAP_LIFETIME | SBX_CAP_LIST_OWNED      \
                 | SBX_CAP_BACKGROUND | SBX_CAP_EXEC_STDIN_STREAM)

struct sbx_plugin_client {
    cl_client cl;       /* first member: http, the base URL
                         * SERVER/api/v1/namespaces/NS, reaper (provider.h) */
    k8_conf conf;
    char *ns;           /* namespace */
    char *netapi;       /* SERVER/apis/networking.k8s.io/v1/namespaces/NS */
    char *image;
    char *auth_header;  /* "Authorization: Bearer ..." for the WebSocket, or NULL */
    int grace_s;
    pthread_mutex_t lock;
    int v4_only;        /* a server that answered v4 to our offer */
};

struct sbx_plugin_sandbox {
    cl_sandbox s;       /* first member: the pod's name and the gone flag */
    int policy;         /* a deny-egress policy goes with the pod */
    time_t started;     /* the pod's status.startTime (s since the epoch), or 0 */
};

/* ------------------------------------------------------------------------ */
/* API helpers                                                               */
/* ------------------------------------------------------------------------ */

static char *k8_pod_url(struct sbx_plugin_client *c, const char *name, const char *suffix)
{
    return cl_item_url(c->cl.api, "pods", name, suffix);
}

static char *k8_policy_name(const char *pod)
{
    return cl_printf("%s-deny-egress", pod);
}

/* The message of a Status answer (scrubbed). */
static sbx_error *k8_fail_resp(struct sbx_plugin_client *c, sbx_error **error,
                               sbx_error_code code, const cl_resp *r, const char *op,
                               const char *what)
{
    return cl_fail_status(c->cl.http, error, code, r, op, what);
}

static int k8_delete_policy(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                            const char *pod, const char *op, sbx_error **error)
{
    char *pn = k8_policy_name(pod);
    char *url = pn ? cl_item_url(c->netapi, "networkpolicies", pn, "") : NULL;
    int rc = cl_delete_url(c->cl.http, ctx, url, op, "delete the pod's NetworkPolicy", error);
    free(url);
    free(pn);
    return rc;
}

/* DELETE the pod with the client's grace period, then its policy (which
 * may not exist: 404 is fine). */
static int k8_delete(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                     const char *op, sbx_error **error)
{
    struct sbx_plugin_client *c = client;
    char sfx[64];
    snprintf(sfx, sizeof sfx, "?gracePeriodSeconds=%d", c->grace_s);
    char *url = k8_pod_url(c, id, sfx);
    int rc = cl_delete_url(c->cl.http, ctx, url, op, "delete the pod", error);
    free(url);
    if (k8_delete_policy(c, ctx, id, op, rc == 0 ? error : NULL) < 0)
        rc = -1;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The exec stream                                                           */
/* ------------------------------------------------------------------------ */

/* Where a stream's output goes: channel 1 or 2, @n bytes. 0, or -1 to end
 * the stream (its error stored). */
typedef int (*k8_out_fn)(void *ud, int ch, const unsigned char *p, size_t n);

typedef struct k8_stream {
    struct sbx_plugin_sandbox *sb;
    const char *script;         /* for sh -c */
    int tty;
    unsigned rows, cols;
    int in_fd;                  /* stdin from here (to its end), or -1 */
    const cl_buf *in_buf;       /* or from here (a staged script), or NULL */
    int chunked;                /* v4: in_fd's bytes go as chunks "LEN\n" DATA,
                                 * ended by "0\n" (k8_v4_stdin_wrap()) */
    k8_out_fn out;
    void *out_ud;
    /* results */
    int have_status;
    int exit_code;
    int failed_status;          /* a Failure that is not NonZeroExitCode */
    char status_msg[512];
    int v5;
    /* live */
    pthread_mutex_t lock;
    cl_ws *ws;
    int quit_fd;                /* eventfd: the stdin pump stops */
    const char *hup_cmd;        /* a terminal's hangup at the end of stdin: the
                                 * command that sends SIGHUP to the command's
                                 * processes, or NULL */
} k8_stream;

static int k8_on_msg(void *ud, int binary, const unsigned char *p, size_t n)
{
    k8_stream *s = ud;
    (void)binary;
    if (n == 0)
        return 0;
    int ch = p[0];
    p++;
    n--;
    if (ch == 1 || ch == 2) {
        if (n && s->out && s->out(s->out_ud, ch, p, n) < 0)
            return -1;
        return 0;
    }
    if (ch == 3) {
        if (n == 0)
            return 0;   /* the initial empty frame of a stream without stdout */
        char *txt = strndup((const char *)p, n);
        json_object *st = txt ? json_tokener_parse(txt) : NULL;
        free(txt);
        const char *status = cl_json_str(st, "status");
        s->have_status = 1;
        if (status && strcmp(status, "Success") == 0) {
            s->exit_code = 0;
        } else {
            const char *reason = cl_json_str(st, "reason");
            const char *msg = cl_json_str(st, "message");
            json_object *causes = cl_json_path(st, "details", "causes", NULL);
            int found = 0;
            if (reason && strcmp(reason, "NonZeroExitCode") == 0 && causes
                && json_object_is_type(causes, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(causes); i++) {
                    json_object *cz = json_object_array_get_idx(causes, i);
                    const char *r = cl_json_str(cz, "reason"), *m = cl_json_str(cz, "message");
                    if (r && m && strcmp(r, "ExitCode") == 0) {
                        char *e;
                        long v = strtol(m, &e, 10);
                        if (*e == '\0' && v >= 0 && v <= 255) {
                            s->exit_code = (int)v;
                            found = 1;
                        }
                    }
                }
            }
            if (!found) {
                s->failed_status = 1;
                snprintf(s->status_msg, sizeof s->status_msg, "%s%s%s",
                         msg ? msg : (st ? "the exec failed" : "an unreadable Status"),
                         reason ? ": " : "", reason ? reason : "");
            }
        }
        json_object_put(st);
        return 0;
    }
    return 0;   /* other channels: nothing for a client */
}

/* The stdin pump: the request's stdin (descriptor or buffer) as channel-0
 * frames as it comes, then the end of stdin: v5's close of channel 0, or
 * (chunked, v4) the chunk "0\n". */
static int k8_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error);

#define K8_HDR 24   /* room for the channel byte and a chunk's "LEN\n" */

static void *k8_pump(void *arg)
{
    k8_stream *s = arg;
    unsigned char buf[K8_HDR + K8_CHUNK];
    buf[0] = 0;
    if (s->in_buf) {
        for (size_t off = 0; off < s->in_buf->len; off += K8_CHUNK) {
            size_t n = s->in_buf->len - off < K8_CHUNK ? s->in_buf->len - off : K8_CHUNK;
            memcpy(buf + 1, s->in_buf->data + off, n);
            if (cl_ws_send(s->ws, 1, buf, n + 1) < 0)
                return NULL;
        }
        goto eof;
    }
    for (;;) {
        struct pollfd pf[2] = { { s->in_fd, POLLIN, 0 }, { s->quit_fd, POLLIN, 0 } };
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents)
            return NULL;
        ssize_t n = read(s->in_fd, buf + K8_HDR, K8_CHUNK);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        /* The frame: channel 0, the chunk's length line when chunked,
         * then the bytes, built in place before them. */
        char hdr[K8_HDR];
        size_t h = s->chunked ? (size_t)snprintf(hdr, sizeof hdr, "%zd\n", n) : 0;
        unsigned char *f = buf + K8_HDR - h - 1;
        f[0] = 0;
        memcpy(f + 1, hdr, h);
        if (cl_ws_send(s->ws, 1, f, (size_t)n + h + 1) < 0)
            return NULL;
    }
    if (s->chunked) {
        unsigned char end[3] = { 0, '0', '\n' };
        cl_ws_send(s->ws, 1, end, sizeof end);
        return NULL;
    }
eof:
    if (s->tty && s->hup_cmd) {
        /* Closing a terminal's stdin hangs it up: SIGHUP to the command's
         * processes (the exec API has no hangup of its own). */
        sbx_call_ctx hctx = { sizeof(hctx), cl_now() + 30, s->quit_fd, NULL };
        int code = 0;
        k8_run_short(s->sb, &hctx, s->hup_cmd, &code, "exec", NULL);
    } else if (s->v5) {
        unsigned char close0[2] = { 255, 0 };
        cl_ws_send(s->ws, 1, close0, 2);
    } else if (s->tty) {
        unsigned char eot[2] = { 0, 4 };  /* ^D on the terminal */
        cl_ws_send(s->ws, 1, eot, 2);
    }
    return NULL;
}

static int k8_send_resize(cl_ws *ws, unsigned rows, unsigned cols)
{
    char msg[96];
    int n = snprintf(msg + 1, sizeof msg - 1, "{\"Width\":%u,\"Height\":%u}", cols, rows);
    msg[0] = 4;
    return cl_ws_send(ws, 1, msg, (size_t)n + 1);
}

/* The exec URL of @script. A new string. */
static char *k8_exec_url(struct sbx_plugin_sandbox *sb, const char *script, int want_in, int tty)
{
    char *q = cl_url_escape(script);
    char *base = cl_ws_url(sb->s.c->cl.api);
    char *name = cl_url_escape(sb->s.id);
    char *url = q && base && name
                ? cl_printf("%s/pods/%s/exec?container=" K8_CONTAINER "&command=sh&command=-c"
                            "&command=%s&stdin=%s&stdout=true&stderr=%s&tty=%s", base, name, q,
                            want_in ? "true" : "false", tty ? "false" : "true",
                            tty ? "true" : "false")
                : NULL;
    free(q);
    free(base);
    free(name);
    return url;
}

/* Opens the exec stream of @s's script, retrying upgrades refused before
 * the 101 (400 "container not found", 5xx) with backoff for up to
 * K8_EXEC_RETRY_S, as long as the pod is there. 0 with s->ws set. */
static int k8_open(k8_stream *s, const sbx_call_ctx *ctx, const char *op, sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = s->sb;
    struct sbx_plugin_client *c = sb->s.c;
    int want_in = s->in_fd >= 0 || s->in_buf != NULL || s->tty;
    char *url = k8_exec_url(sb, s->script, want_in, s->tty);
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    const char *hdrs[2] = { c->auth_header, NULL };
    cl_ws_tls tls = { c->conf.ca.len ? c->conf.ca.data : NULL, c->conf.ca.len,
                      c->conf.cert.len ? c->conf.cert.data : NULL, c->conf.cert.len,
                      c->conf.key.len ? c->conf.key.data : NULL, c->conf.key.len,
                      c->conf.insecure };
    cl_ws_opts o = { .url = url, .protocols = K8_PROTOCOLS,
                     .headers = c->auth_header ? hdrs : NULL, .tls = &tls,
                     .on_message = k8_on_msg, .ud = s, .what = "open the exec stream" };
    double t0 = cl_now();
    int rc = -1;
    for (int k = 0;; k++) {
        long st = 0;
        cl_ws *ws = NULL;
        if (cl_ws_connect(&o, ctx, 30, &ws, &st, op, NULL) == 0) {
            pthread_mutex_lock(&s->lock);
            s->ws = ws;
            pthread_mutex_unlock(&s->lock);
            s->v5 = strcmp(cl_ws_protocol(ws), "v5.channel.k8s.io") == 0;
            pthread_mutex_lock(&c->lock);
            c->v4_only = !s->v5;
            pthread_mutex_unlock(&c->lock);
            rc = 0;
            break;
        }
        int retry = (st == 400 || st == 500 || st == 502 || st == 503 || st == 504)
                    && cl_now() - t0 < K8_EXEC_RETRY_S;
        if (st == 404) {
            /* The pod is gone. */
            cl_gone_set(&sb->s.gone);
        }
        if (!retry) {
            if (st == 404) {
                cl_gone_error(error, op, K8_BACKEND, sb->s.id);
            } else {
                cl_last_error l = *cl_last();
                sbx_error *e = cl_fail(error, l.code, op, "%s", l.msg);
                if (st) {
                    char sts[16];
                    snprintf(sts, sizeof sts, "%ld", st);
                    cl_context(e, "http_status", sts);
                }
            }
            break;
        }
        double wait = cl_http_backoff(c->cl.http, k < 4 ? k : 4);
        if (wait > 2)
            wait = 2;
        cl_bound b = cl_bound_make(ctx, 0);
        if (cl_bound_left(&b) == 0 || cl_sleep(wait, ctx ? ctx->cancel_fd : -1)) {
            cl_fail(error, SBX_ERROR_TIMEOUT, op, "the exec stream was refused until the "
                    "call's time ran out (HTTP %ld)", st);
            break;
        }
    }
    free(url);
    return rc;
}

/*
 * Runs @s to its end on this thread: opens the stream, pumps stdin on a
 * thread of its own, reads to the close. Returns the exit code, or -1
 * with *@error set.
 */
static int k8_stream_run(k8_stream *s, const sbx_call_ctx *ctx, const char *op,
                         sbx_error **error);
static int k8_v4(struct sbx_plugin_client *c);

/* A script too long for the exec URL (K8_SCRIPT_INLINE_MAX) is written to
 * a file in the pod first (over stdin) and run from it; its first line
 * removes it. A new string (the short script), or NULL with an error. */
static char *k8_stage_script(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                             const char *script, const char *op, sbx_error **error)
{
    char tag[25], path[64];
    cl_random_hex(tag, 12);
    snprintf(path, sizeof path, "/tmp/.sbx-script-%s", tag);
    cl_buf body = { 0 };
    char *put = NULL, *run = cl_printf("exec sh %s", path);
    if (cl_buf_printf(&body, "rm -f -- %s\n%s", path, script) == 0)
        /* A v4 server cannot be told where stdin ends: head stops there. */
        put = k8_v4(sb->s.c) ? cl_printf("head -c %zu > %s", body.len, path)
                           : cl_printf("cat > %s", path);
    if (!put || !run) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    k8_stream st = { .sb = sb, .script = put, .in_fd = -1, .in_buf = &body };
    pthread_mutex_init(&st.lock, NULL);
    int code = k8_stream_run(&st, ctx, op, error);
    pthread_mutex_destroy(&st.lock);
    if (code != 0) {
        if (code > 0)
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot write the command's script "
                    "to %s in pod %s (exit %d)", path, sb->s.id, code);
        goto fail;
    }
    cl_buf_clear(&body);
    free(put);
    return run;
fail:
    cl_buf_clear(&body);
    free(put);
    free(run);
    return NULL;
}

static int k8_stream_run(k8_stream *s, const sbx_call_ctx *ctx, const char *op,
                         sbx_error **error)
{
    pthread_t pump;
    int pumping = 0, code = -1;
    char *staged = NULL;
    s->quit_fd = -1;
    if (strlen(s->script) > K8_SCRIPT_INLINE_MAX) {
        if (!(staged = k8_stage_script(s->sb, ctx, s->script, op, error)))
            return -1;
        s->script = staged;
    }
    int orc = k8_open(s, ctx, op, error);
    if (staged) {
        s->script = NULL;
        free(staged);
    }
    if (orc < 0)
        return -1;
    if (s->tty && s->rows && s->cols)
        k8_send_resize(s->ws, s->rows, s->cols);
    if (s->in_fd >= 0 || s->in_buf) {
        s->quit_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->quit_fd < 0 || pthread_create(&pump, NULL, k8_pump, s) != 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot start the stdin pump");
            goto out;
        }
        pumping = 1;
    }
    int rc = cl_ws_run(s->ws, ctx, op, NULL);
    if (rc < 0 && !s->have_status) {
        cl_last_error l = *cl_last();
        cl_fail(error, l.code, op, "%s", l.msg);
        goto out;
    }
    if (!s->have_status) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "the exec stream of pod %s closed without a "
                "status: the command's exit code is unknown", s->sb->s.id);
        goto out;
    }
    if (s->failed_status) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "the exec in pod %s failed: %s",
                s->sb->s.id, s->status_msg);
        goto out;
    }
    code = s->exit_code;
out:
    if (pumping) {
        uint64_t one = 1;
        cl_ws_close(s->ws);
        if (write(s->quit_fd, &one, sizeof one) < 0) {
            /* the pump also ends when the connection does */
        }
        pthread_join(pump, NULL);
    }
    if (s->quit_fd >= 0)
        close(s->quit_fd);
    pthread_mutex_lock(&s->lock);
    cl_ws *ws = s->ws;
    s->ws = NULL;
    pthread_mutex_unlock(&s->lock);
    cl_ws_free(ws);
    return code;
}

/* Output into a buffer (stdout) and a capped buffer (stderr). */
typedef struct k8_collect {
    cl_buf out, err;
    int out_fd;     /* stdout to this descriptor instead, or -1 */
} k8_collect;

static int k8_collect_out(void *ud, int ch, const unsigned char *p, size_t n)
{
    k8_collect *k = ud;
    if (ch == 1 && k->out_fd >= 0) {
        int fd = k->out_fd;
        return cl_fd_sink(&fd, (const char *)p, n);
    }
    cl_buf *b = ch == 1 ? &k->out : &k->err;
    if (ch == 2 && b->len > 65536)
        return 0;
    return cl_buf_append(b, p, n);
}

static int k8_v4(struct sbx_plugin_client *c)
{
    pthread_mutex_lock(&c->lock);
    int v = c->v4_only;
    pthread_mutex_unlock(&c->lock);
    return v;
}

/*
 * A v4 server cannot be told that stdin ended (v4 has no half-close; the
 * only end it knows is the end of the connection, which loses the
 * command's output and status: kubectl, whose WebSocket executor needs v5
 * for this, leaves such a command waiting). The plugin ends stdin in band:
 * the pump sends it as chunks, each a decimal length line "LEN\n" and LEN
 * bytes, and the chunk "0\n" at its end; in the pod, a decoder in the
 * background copies the chunks' bytes into a FIFO (the shell's read for
 * the length line, which reads no further than the newline; head -c LEN for
 * the bytes, which reads no further than LEN: GNU coreutils' head), and the
 * command reads the FIFO, so it sees its stdin as it comes and EOF at the
 * chunk "0\n". The decoder ends at that chunk, when the command has ended
 * (head's write to the FIFO fails), or is killed when the command exits.
 * The script @script wrapped so (the FIFO /tmp/.sbx-stdin-TAG, TAG random,
 * is removed once both its ends are open). A new string, NULL on no
 * memory.
 */
static char *k8_v4_stdin_wrap(const char *script)
{
    char tag[25];
    cl_random_hex(tag, 12);
    char *q = cl_shell_quote(script);
    char *out = q ? cl_printf(
        "__sbx_f=/tmp/.sbx-stdin-%s\n"
        "mkfifo -m 600 \"$__sbx_f\" || exit 126\n"
        "exec 3<&0\n"
        "(while IFS= read -r __sbx_n; do [ \"$__sbx_n\" -gt 0 ] 2>/dev/null || exit 0; "
        "head -c \"$__sbx_n\" || exit 0; done) <&3 >\"$__sbx_f\" 2>/dev/null 3<&- &\n"
        "__sbx_p=$!\n"
        "exec 3<&-\n"
        "{ rm -f \"$__sbx_f\"; sh -c %s; } <\"$__sbx_f\"\n"
        "__sbx_rc=$?\n"
        "kill \"$__sbx_p\" 2>/dev/null\n"
        "exit $__sbx_rc\n", tag, q) : NULL;
    free(q);
    return out;
}

/*
 * Runs the plugin's own command @script in @sb with stdin from @in_fd (or
 * -1), stdout to @out_fd (or collected into *@out when @out is not NULL),
 * stderr collected: 0 with the exit code in *@code, or -1.
 */
static int k8_run(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                  int in_fd, int out_fd, int *code, char **out, char **err_text, const char *op,
                  sbx_error **error)
{
    k8_collect k = { .out_fd = out_fd };
    char *wrapped = NULL;
    k8_stream s = { .sb = sb, .script = script, .in_fd = in_fd, .out = k8_collect_out,
                    .out_ud = &k };
    pthread_mutex_init(&s.lock, NULL);
    int rc = -1;
    if (in_fd >= 0 && k8_v4(sb->s.c)) {
        if (!(wrapped = k8_v4_stdin_wrap(script))) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto out;
        }
        s.script = wrapped;
        s.chunked = 1;
    }
    int c = k8_stream_run(&s, ctx, op, error);
    if (c >= 0) {
        *code = c;
        rc = 0;
        if (out) {
            *out = k.out.data ? k.out.data : strdup("");
            k.out.data = NULL;
        }
        if (err_text) {
            *err_text = k.err.data ? k.err.data : strdup("");
            k.err.data = NULL;
        }
    }
out:
    pthread_mutex_destroy(&s.lock);
    cl_buf_clear(&k.out);
    cl_buf_clear(&k.err);
    free(wrapped);
    return rc;
}

static int k8_run_short(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd,
                        int *code, const char *op, sbx_error **error)
{
    return k8_run(sb, ctx, cmd, -1, -1, code, NULL, NULL, op, error);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

static int k8_setup(const sbx_host_services *host, sbx_error **error)
{
    return cl_setup(host, K8_BACKEND, error);
}

static void k8_client_clear(sbx_plugin_client *c)
{
    k8_conf_clear(&c->conf);
    free(c->ns);
    free(c->netapi);
    free(c->image);
    if (c->auth_header) {
        memset(c->auth_header, 0, strlen(c->auth_header));
        free(c->auth_header);
    }
    pthread_mutex_destroy(&c->lock);
}

static int k8_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                         sbx_error **error);
/* A DNS-1123 label (a namespace's name). */
static int k8_label_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (ch == '-' && i && i < n - 1)))
            return 0;
    }
    return 1;
}

/* The base URL follows the kubeconfig's server and the namespace, and the
 * credential comes with the kubeconfig: both set by the plugin. */
static const cl_client_spec k8_client_spec = {
    .provider = K8_BACKEND, .size = sizeof(struct sbx_plugin_client),
    .find = k8_find_token, .del = k8_delete, .clear = k8_client_clear,
};

static int k8_client_new(const char *config_json, sbx_plugin_client **client, sbx_error **error)
{
    const char *op = "client_new";
    json_object *cfg;
    struct sbx_plugin_client *c = cl_client_new(&k8_client_spec, config_json, &cfg, error);
    if (!c)
        return -1;
    pthread_mutex_init(&c->lock, NULL);
    c->grace_s = K8_DEFAULT_GRACE_S;
    if (k8_conf_load(cfg, &c->conf, error) < 0)
        goto fail;
    const char *ns = cl_json_str(cfg, "namespace");
    if (!ns || !*ns)
        ns = c->conf.namespace_;
    if (!ns || !*ns)
        ns = "default";
    if (!k8_label_ok(ns)) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: namespace "
                           "\"%s\" is not a valid namespace name", ns), "option", "namespace");
        goto fail;
    }
    json_object *g = NULL;
    if (cfg && json_object_object_get_ex(cfg, "grace_period_s", &g)) {
        int64_t v = json_object_get_int64(g);
        if (!json_object_is_type(g, json_type_int) || v < 0 || v > 3600) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: "
                               "grace_period_s %s is not an integer from 0 to 3600",
                               json_object_to_json_string(g)), "option", "grace_period_s");
            goto fail;
        }
        c->grace_s = (int)v;
    }
    const char *img = cl_json_str(cfg, "image");
    c->ns = strdup(ns);
    c->image = strdup(img && *img ? img : K8_DEFAULT_IMAGE);
    c->cl.api = cl_printf("%s/api/v1/namespaces/%s", c->conf.server, ns);
    c->netapi = cl_printf("%s/apis/networking.k8s.io/v1/namespaces/%s", c->conf.server, ns);
    if (!c->ns || !c->image || !c->cl.api || !c->netapi) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    if (c->conf.ca.len || c->conf.cert.len || c->conf.insecure) {
        if (cl_http_set_tls(c->cl.http, c->conf.ca.len ? c->conf.ca.data : NULL, c->conf.ca.len,
                            c->conf.cert.len ? c->conf.cert.data : NULL, c->conf.cert.len,
                            c->conf.key.len ? c->conf.key.data : NULL, c->conf.key.len,
                            c->conf.insecure) < 0) {
            cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: this libcurl "
                    "cannot take in-memory certificates (7.77 or newer needed)");
            goto fail;
        }
    }
    if (c->conf.token) {
        char *v = cl_printf("Bearer %s", c->conf.token);
        c->auth_header = cl_printf("Authorization: Bearer %s", c->conf.token);
        if (!v || !c->auth_header || cl_http_set_auth(c->cl.http, "Authorization", v) < 0
            || cl_http_set_secret(c->cl.http, c->conf.token) < 0) {
            free(v);
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto fail;
        }
        memset(v, 0, strlen(v));
        free(v);
    }
    CL_LOG(SBX_LOG_INFO, "API server %s, namespace %s, credentials from %s", c->conf.server,
           c->ns, c->conf.source ? c->conf.source : "?");
    return cl_client_end(0, c, client, cfg, cl_client_free_slot);
fail:
    return cl_client_end(-1, c, client, cfg, cl_client_free_slot);
}

CL_PROBE_CAPS(k8_probe, K8_CAPS)

/* ------------------------------------------------------------------------ */
/* Listing by labels                                                         */
/* ------------------------------------------------------------------------ */

typedef int (*k8_each_fn)(void *ud, json_object *pod);

/* Every pod carrying the label selector @sel (every page). */
static int k8_list(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *sel,
                   k8_each_fn fn, void *ud, const char *op, sbx_error **error)
{
    char *cont = NULL;
    int rc = 0;
    for (;;) {
        char *qs = cl_url_escape(sel), *qc = cont ? cl_url_escape(cont) : NULL;
        char *url = qs ? cl_printf("%s/pods?labelSelector=%s&limit=500%s%s", c->cl.api, qs,
                                   qc ? "&continue=" : "", qc ? qc : "") : NULL;
        free(qs);
        free(qc);
        long st = 0;
        json_object *j = cl_get_json(c->cl.http, ctx, url, &st, op, "list the pods", error);
        free(url);
        if (!j) {
            if (st == 404)
                cl_fail(error, SBX_ERROR_NOT_FOUND, op, "namespace %s not found", c->ns);
            rc = -1;
            break;
        }
        json_object *items = NULL;
        json_object_object_get_ex(j, "items", &items);
        for (size_t i = 0; rc == 0 && items && i < json_object_array_length(items); i++)
            if (fn(ud, json_object_array_get_idx(items, i)) != 0)
                rc = 1;
        const char *next = cl_json_str(cl_json_path(j, "metadata", NULL), "continue");
        free(cont);
        cont = next && *next && rc == 0 ? strdup(next) : NULL;
        json_object_put(j);
        if (!cont)
            break;
    }
    free(cont);
    return rc < 0 ? -1 : 0;
}

static int k8_id_one(void *ud, json_object *pod)
{
    return cl_ids_add(ud, cl_json_str(cl_json_path(pod, "metadata", NULL), "name")) < 0 ? -1 : 0;
}

static int k8_find_token(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                         sbx_error **error)
{
    cl_ids s = { 0 };
    char *sel = cl_printf(CL_META_TOKEN "=%s", token);
    int rc = sel ? k8_list(ud, ctx, sel, k8_id_one, &s, "create", error) : -1;
    free(sel);
    return cl_ids_finish(&s, rc, ids, "create", error);
}

static int k8_owned_one(void *ud, json_object *pod)
{
    cl_owned *o = ud;
    json_object *md = cl_json_path(pod, "metadata", NULL);
    const char *created = cl_json_str(md, "creationTimestamp");
    double ct = 0;
    if (created) {
        struct tm tm = { 0 };
        if (strptime(created, "%Y-%m-%dT%H:%M:%SZ", &tm))
            ct = (double)timegm(&tm);
    }
    /* A pod being deleted is on its way out: not listed. */
    if (cl_json_str(md, "deletionTimestamp"))
        return 0;
    return cl_owned_report(o->fn, o->ud, cl_json_str(md, "name"), cl_json_path(md, "labels", NULL),
                           ct, NULL);
}

/* The pods this backend made, then the deny-egress policies whose pod is
 * gone (a create that ended between the two), reported by their pod's name
 * (destroy_by_id deletes both). */
static int k8_list_owned(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         sbx_plugin_owned_fn fn, void *ud, sbx_error **error)
{
    struct sbx_plugin_client *c = client;
    const char *op = "list_owned";
    cl_owned o = { .fn = fn, .ud = ud };
    cl_ids pods = { 0 };
    if (k8_list(c, ctx, CL_META_BACKEND "=" K8_BACKEND, k8_id_one, &pods, op, error) < 0
        || k8_list(c, ctx, CL_META_BACKEND "=" K8_BACKEND, k8_owned_one, &o, op, error) < 0) {
        cl_strv_free(pods.v);
        return -1;
    }
    char *qs = cl_url_escape(CL_META_BACKEND "=" K8_BACKEND);
    char *url = qs ? cl_printf("%s/networkpolicies?labelSelector=%s", c->netapi, qs) : NULL;
    free(qs);
    long st = 0;
    json_object *j = cl_get_json(c->cl.http, ctx, url, &st, op, "list the NetworkPolicies", error);
    free(url);
    int rc = j ? 0 : -1;
    json_object *items = j ? cl_json_path(j, "items", NULL) : NULL;
    for (size_t i = 0; items && i < json_object_array_length(items); i++) {
        json_object *md = cl_json_path(json_object_array_get_idx(items, i), "metadata", NULL);
        json_object *labels = cl_json_path(md, "labels", NULL);
        const char *pod = cl_json_str(labels, "sandbox");
        int live = 0;
        for (size_t k = 0; pod && k < pods.n; k++)
            if (strcmp(pods.v[k], pod) == 0)
                live = 1;
        if (live || cl_json_str(md, "deletionTimestamp"))
            continue;
        if (cl_owned_report(fn, ud, pod, labels, 0, NULL) != 0)
            break;
    }
    json_object_put(j);
    cl_strv_free(pods.v);
    return rc;
}

/* 1 when object @o carries this backend's label. */
static int k8_ours(json_object *o)
{
    const char *be = cl_json_str(cl_json_path(o, "metadata", "labels", NULL), CL_META_BACKEND);
    return be && strcmp(be, K8_BACKEND) == 0;
}

/* Deletes pod @id and its policy, only when they carry this library's
 * labels (a pod or policy without them is never touched). */
static int k8_destroy_by_id(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                            sbx_error **error)
{
    const char *op = "destroy_by_id";
    struct sbx_plugin_client *c = client;
    if (!id || !k8_label_ok(id)) {
        cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "kubernetes backend: %s is "
                           "not a pod name", id ? id : "(null)"), "id", id ? id : "");
        return -1;
    }
    long st = 0;
    char *url = k8_pod_url(c, id, "");
    json_object *pod = cl_get_json(c->cl.http, ctx, url, &st, op, "get the pod", error);
    free(url);
    if (!pod && st != 404)
        return -1;
    char *pn = k8_policy_name(id);
    char *purl = pn ? cl_item_url(c->netapi, "networkpolicies", pn, "") : NULL;
    long pst = 0;
    json_object *pol = cl_get_json(c->cl.http, ctx, purl, &pst, op, "get the pod's NetworkPolicy",
                                   error);
    int rc = 0;
    if ((!pol && pst != 404) || (pod && !k8_ours(pod)) || (pol && !k8_ours(pol))) {
        if (pod || pol)
            cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "kubernetes backend: "
                               "%s %s does not carry this library's labels", pod ? "pod"
                               : "NetworkPolicy", pod ? id : pn), "id", id);
        rc = -1;
    } else {
        char sfx[64];
        snprintf(sfx, sizeof sfx, "?gracePeriodSeconds=%d", c->grace_s);
        char *durl = pod ? k8_pod_url(c, id, sfx) : NULL;
        if (pod)
            rc = cl_delete_url(c->cl.http, ctx, durl, op, "delete the pod", error);
        free(durl);
        if (rc == 0 && pol)
            rc = cl_delete_url(c->cl.http, ctx, purl, op, "delete the pod's NetworkPolicy", error);
    }
    json_object_put(pod);
    json_object_put(pol);
    free(purl);
    free(pn);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

static void k8_labels(json_object *labels, const char *name, const sbx_call_ctx *ctx,
                      double expires_at)
{
    char exp[32];
    json_object_object_add(labels, CL_META_BACKEND, json_object_new_string(K8_BACKEND));
    if (ctx && ctx->create_token)
        json_object_object_add(labels, CL_META_TOKEN, json_object_new_string(ctx->create_token));
    if (expires_at > 0) {
        snprintf(exp, sizeof exp, "%.0f", ceil(expires_at));
        json_object_object_add(labels, CL_META_EXPIRES, json_object_new_string(exp));
    }
    json_object_object_add(labels, "sandbox", json_object_new_string(name));
    json_object_object_add(labels, "app.kubernetes.io/managed-by",
                           json_object_new_string("libsbx"));
}

/* 1 when @path is @dir or under it. */
static int k8_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static json_object *k8_volume(const char *name)
{
    json_object *v = json_object_new_object();
    json_object_object_add(v, "name", json_object_new_string(name));
    json_object_object_add(v, "emptyDir", json_object_new_object());
    return v;
}

static json_object *k8_mount(const char *name, const char *path)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "name", json_object_new_string(name));
    json_object_object_add(m, "mountPath", json_object_new_string(path));
    return m;
}

static json_object *k8_envvar(const char *k, size_t kn, const char *v)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "name", json_object_new_string_len(k, (int)kn));
    json_object_object_add(e, "value", json_object_new_string(v));
    return e;
}

/* The pod's body, or NULL with a configuration error for an option it
 * cannot honour. */
static json_object *k8_pod_body(struct sbx_plugin_client *c, const sbx_call_ctx *ctx,
                                const sbx_plugin_create_request *rq, const char *name,
                                sbx_error **error)
{
    uint64_t set = rq->set_fields;
    if (rq->snapshot_id)
        return cl_refuse(error, K8_BACKEND, "snapshot_id", rq->snapshot_id,
                         "the kubernetes backend has no snapshots"), NULL;
    if (rq->template_name)
        return cl_refuse(error, K8_BACKEND, "template", rq->template_name,
                         "the kubernetes backend takes an image, not a template"), NULL;
    if (cl_workdir_check(K8_BACKEND, rq->workdir, error) < 0)
        return NULL;
    (void)set;
    json_object *bo = NULL;
    if (rq->backend_options && *rq->backend_options) {
        bo = json_tokener_parse(rq->backend_options);
        if (!bo || !json_object_is_type(bo, json_type_object)) {
            json_object_put(bo);
            return cl_refuse(error, K8_BACKEND, "backend_options", rq->backend_options,
                             "not a JSON object"), NULL;
        }
        json_object_object_foreach(bo, key, val) {
            int ok = (strcmp(key, "node_selector") == 0
                      && json_object_is_type(val, json_type_object))
                     || ((strcmp(key, "service_account") == 0
                          || strcmp(key, "image_pull_policy") == 0)
                         && json_object_is_type(val, json_type_string));
            if (strcmp(key, "node_selector") != 0 && strcmp(key, "service_account") != 0
                && strcmp(key, "image_pull_policy") != 0) {
                sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                       "kubernetes backend_options: unknown key \"%s\" "
                                       "(known: %s)", key, K8_BACKEND_OPTIONS);
                cl_context(e, "option", "backend_options");
                cl_context(e, "name", key);
                cl_context(e, "known", K8_BACKEND_OPTIONS);
                json_object_put(bo);
                return NULL;
            }
            if (!ok) {
                sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "create",
                                       "kubernetes backend_options: \"%s\" must be %s", key,
                                       strcmp(key, "node_selector") == 0 ? "an object of "
                                       "label values" : "a string");
                cl_context(e, "option", "backend_options");
                cl_context(e, "name", key);
                json_object_put(bo);
                return NULL;
            }
        }
    }
    json_object *pod = json_object_new_object();
    json_object_object_add(pod, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(pod, "kind", json_object_new_string("Pod"));
    json_object *md = json_object_new_object(), *labels = json_object_new_object();
    json_object_object_add(md, "name", json_object_new_string(name));
    k8_labels(labels, name, ctx, rq->expires_at);
    json_object_object_add(md, "labels", labels);
    json_object_object_add(pod, "metadata", md);

    json_object *spec = json_object_new_object();
    json_object_object_add(spec, "restartPolicy", json_object_new_string("Never"));
    json_object_object_add(spec, "automountServiceAccountToken", json_object_new_boolean(0));
    json_object_object_add(spec, "enableServiceLinks", json_object_new_boolean(0));
    json_object_object_add(spec, "terminationGracePeriodSeconds",
                           json_object_new_int(c->grace_s));
    if (rq->timeout_secs > 0)
        json_object_object_add(spec, "activeDeadlineSeconds",
                               json_object_new_int64((int64_t)ceil(rq->timeout_secs)
                                                     + K8_START_BOUND_S));
    json_object *psc = json_object_new_object(), *seccomp = json_object_new_object();
    json_object_object_add(psc, "runAsNonRoot", json_object_new_boolean(1));
    json_object_object_add(psc, "runAsUser", json_object_new_int(K8_UID));
    json_object_object_add(psc, "runAsGroup", json_object_new_int(K8_UID));
    json_object_object_add(psc, "fsGroup", json_object_new_int(K8_UID));
    json_object_object_add(seccomp, "type", json_object_new_string("RuntimeDefault"));
    json_object_object_add(psc, "seccompProfile", seccomp);
    json_object_object_add(spec, "securityContext", psc);
    json_object *bv = NULL;
    if (bo && json_object_object_get_ex(bo, "node_selector", &bv))
        json_object_object_add(spec, "nodeSelector", json_object_get(bv));
    if (bo && json_object_object_get_ex(bo, "service_account", &bv))
        json_object_object_add(spec, "serviceAccountName", json_object_get(bv));

    json_object *ctr = json_object_new_object();
    json_object_object_add(ctr, "name", json_object_new_string(K8_CONTAINER));
    json_object_object_add(ctr, "image", json_object_new_string(rq->image ? rq->image
                                                                          : c->image));
    json_object *cmd = json_object_new_array();
    json_object_array_add(cmd, json_object_new_string("/bin/sh"));
    json_object_array_add(cmd, json_object_new_string("-c"));
    json_object_array_add(cmd, json_object_new_string(
        "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"));
    json_object_object_add(ctr, "command", cmd);
    if (bo && json_object_object_get_ex(bo, "image_pull_policy", &bv))
        json_object_object_add(ctr, "imagePullPolicy", json_object_get(bv));
    json_object_put(bo);
    json_object_object_add(ctr, "workingDir", json_object_new_string(
        rq->workdir && *rq->workdir ? rq->workdir : "/work"));
    json_object *csc = json_object_new_object(), *caps = json_object_new_object(),
                *drop = json_object_new_array();
    json_object_object_add(csc, "allowPrivilegeEscalation", json_object_new_boolean(0));
    json_object_array_add(drop, json_object_new_string("ALL"));
    json_object_object_add(caps, "drop", drop);
    json_object_object_add(csc, "capabilities", caps);
    json_object_object_add(ctr, "securityContext", csc);
    json_object *env = json_object_new_array();
    json_object_array_add(env, k8_envvar("HOME", 4, K8_HOME));
    json_object_array_add(env, k8_envvar("SANDBOX_ROOT", 12, ""));
    for (size_t i = 0; rq->env && rq->env[i]; i++) {
        const char *eq = strchr(rq->env[i], '=');
        if (eq)
            json_object_array_add(env, k8_envvar(rq->env[i], (size_t)(eq - rq->env[i]), eq + 1));
    }
    json_object_object_add(ctr, "env", env);
    json_object *mounts = json_object_new_array(), *vols = json_object_new_array();
    json_object_array_add(mounts, k8_mount("work", "/work"));
    json_object_array_add(mounts, k8_mount("tmp", "/tmp"));
    json_object_array_add(mounts, k8_mount("home", K8_HOME));
    json_object_array_add(vols, k8_volume("work"));
    json_object_array_add(vols, k8_volume("tmp"));
    json_object_array_add(vols, k8_volume("home"));
    /* A workdir outside those is a volume of its own, so the pod's
     * non-root user can write it (the kubelet makes the mount point). */
    if (rq->workdir && *rq->workdir && !k8_under(rq->workdir, "/work")
        && !k8_under(rq->workdir, "/tmp") && !k8_under(rq->workdir, K8_HOME)) {
        json_object_array_add(mounts, k8_mount("workdir", rq->workdir));
        json_object_array_add(vols, k8_volume("workdir"));
    }
    json_object_object_add(ctr, "volumeMounts", mounts);
    json_object_object_add(spec, "volumes", vols);

    json_object *res = json_object_new_object(), *lim = json_object_new_object();
    char v[64];
    if (rq->cpu > 0) {
        snprintf(v, sizeof v, "%lldm", (long long)ceil(rq->cpu * 1000));
        json_object_object_add(lim, "cpu", json_object_new_string(v));
    }
    if (rq->memory_mb > 0) {
        snprintf(v, sizeof v, "%lldMi", (long long)rq->memory_mb);
        json_object_object_add(lim, "memory", json_object_new_string(v));
    }
    if (rq->disk_mb > 0) {
        snprintf(v, sizeof v, "%lldMi", (long long)rq->disk_mb);
        json_object_object_add(lim, "ephemeral-storage", json_object_new_string(v));
    }
    if (rq->gpu && *rq->gpu) {
        const char *colon = strrchr(rq->gpu, ':');
        long n = 1;
        if (colon) {
            char *e;
            n = strtol(colon + 1, &e, 10);
            if (*e || n <= 0 || n > 64) {
                json_object_put(lim);
                json_object_put(res);
                json_object_put(ctr);
                json_object_put(spec);
                json_object_put(pod);
                return cl_refuse(error, K8_BACKEND, "gpu", rq->gpu,
                                 "expected TYPE[:COUNT] with COUNT from 1 to 64"), NULL;
            }
        }
        size_t tl = colon ? (size_t)(colon - rq->gpu) : strlen(rq->gpu);
        char type[128];
        snprintf(type, sizeof type, "%.*s", (int)(tl < sizeof type - 1 ? tl : sizeof type - 1),
                 rq->gpu);
        if (strchr(type, '/')) {
            json_object_object_add(lim, type, json_object_new_int64(n));
        } else {
            json_object_object_add(lim, "nvidia.com/gpu", json_object_new_int64(n));
            if (*type) {
                json_object *sel = json_object_new_object();
                json_object_object_add(sel, "nvidia.com/gpu.product",
                                       json_object_new_string(type));
                json_object_object_add(spec, "nodeSelector", sel);
            }
        }
    }
    json_object_object_add(res, "requests", json_object_get(lim));
    json_object_object_add(res, "limits", lim);
    json_object_object_add(ctr, "resources", res);
    json_object *ctrs = json_object_new_array();
    json_object_array_add(ctrs, ctr);
    json_object_object_add(spec, "containers", ctrs);
    json_object_object_add(pod, "spec", spec);
    return pod;
}

static json_object *k8_policy_body(const char *pod, const sbx_call_ctx *ctx, double expires_at)
{
    char *pn = k8_policy_name(pod);
    json_object *p = json_object_new_object(), *md = json_object_new_object(),
                *labels = json_object_new_object(), *spec = json_object_new_object(),
                *psel = json_object_new_object(), *ml = json_object_new_object(),
                *types = json_object_new_array();
    json_object_object_add(p, "apiVersion", json_object_new_string("networking.k8s.io/v1"));
    json_object_object_add(p, "kind", json_object_new_string("NetworkPolicy"));
    json_object_object_add(md, "name", json_object_new_string(pn ? pn : ""));
    k8_labels(labels, pod, ctx, expires_at);
    json_object_object_add(md, "labels", labels);
    json_object_object_add(p, "metadata", md);
    json_object_object_add(ml, "sandbox", json_object_new_string(pod));
    json_object_object_add(psel, "matchLabels", ml);
    json_object_object_add(spec, "podSelector", psel);
    json_object_array_add(types, json_object_new_string("Egress"));
    json_object_object_add(spec, "policyTypes", types);
    json_object_object_add(p, "spec", spec);
    free(pn);
    return p;
}

/* An RFC 3339 time as the API writes it ("2026-12-05T01:47:00Z", an
 * optional fraction): seconds since the epoch, or 0 when @s is NULL or
 * not such a time. */
static time_t k8_time(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *e = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!e)
        return 0;
    if (*e == '.')
        for (e++; *e >= '0' && *e <= '9'; e++)
            ;
    if (strcmp(e, "Z") != 0)
        return 0;
    time_t t = timegm(&tm);
    return t > 0 ? t : 0;
}

/* One look at the pod for the readiness wait (it also notes the pod's
 * status.startTime in sb->started). */
typedef struct k8_ready {
    struct sbx_plugin_sandbox *sb;
    const sbx_call_ctx *ctx;
    char state[256];
} k8_ready;

static int k8_ready_look(void *ud, const char **state, sbx_error **error)
{
    k8_ready *w = ud;
    const char *op = "create";
    long st = 0;
    char *url = k8_pod_url(w->sb->s.c, w->sb->s.id, "");
    json_object *j = cl_get_json(w->sb->s.c->cl.http, w->ctx, url, &st, op, "get the pod", error);
    free(url);
    if (!j) {
        if (st == 404) {
            cl_gone_set(&w->sb->s.gone);
            cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "pod %s disappeared while it "
                    "started", w->sb->s.id);
        }
        return -1;
    }
    const char *phase = cl_json_str(cl_json_path(j, "status", NULL), "phase");
    json_object *css = cl_json_path(j, "status", "containerStatuses", NULL);
    time_t start_time = k8_time(cl_json_str(cl_json_path(j, "status", NULL), "startTime"));
    if (start_time)
        w->sb->started = start_time;
    if (cl_json_str(cl_json_path(j, "metadata", NULL), "deletionTimestamp")) {
        /* Being deleted: it will not be ready again. */
        cl_gone_set(&w->sb->s.gone);
        cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "pod %s is being deleted", w->sb->s.id);
        json_object_put(j);
        return -1;
    }
    json_object *cs = NULL;
    for (size_t i = 0; css && json_object_is_type(css, json_type_array)
                       && i < json_object_array_length(css); i++) {
        json_object *x = json_object_array_get_idx(css, i);
        const char *n = cl_json_str(x, "name");
        if (n && strcmp(n, K8_CONTAINER) == 0)
            cs = x;
    }
    int rc = 0;
    snprintf(w->state, sizeof w->state, "phase %s", phase ? phase : "unknown");
    if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
        const char *reason = cl_json_str(cl_json_path(j, "status", NULL), "reason");
        const char *msg = cl_json_str(cl_json_path(j, "status", NULL), "message");
        cl_context(cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "pod %s ended while it "
                           "started: phase %s%s%s%s%s", w->sb->s.id, phase,
                           reason ? ", " : "", reason ? reason : "", msg ? ": " : "",
                           msg ? msg : ""), "reason", reason ? reason : phase);
        rc = -1;
    } else if (cs) {
        json_object *waiting = cl_json_path(cs, "state", "waiting", NULL);
        json_object *running = cl_json_path(cs, "state", "running", NULL);
        json_object *term = cl_json_path(cs, "state", "terminated", NULL);
        json_object *started = NULL;
        int started_false = json_object_object_get_ex(cs, "started", &started)
                            && !json_object_get_boolean(started);
        if (running && !started_false) {
            rc = 1;
        } else if (waiting) {
            const char *reason = cl_json_str(waiting, "reason");
            const char *msg = cl_json_str(waiting, "message");
            static const char *const fatal[] = { "ImagePullBackOff", "ErrImagePull",
                                                 "CrashLoopBackOff", "InvalidImageName",
                                                 "CreateContainerConfigError",
                                                 "CreateContainerError", "ErrImageNeverPull",
                                                 NULL };
            snprintf(w->state, sizeof w->state, "phase %s, container waiting: %s",
                     phase ? phase : "unknown", reason ? reason : "?");
            for (int i = 0; reason && fatal[i]; i++) {
                if (strcmp(reason, fatal[i]) != 0)
                    continue;
                int64_t code = 0;
                int has_code = cl_json_int(cl_json_path(cs, "lastState", "terminated", NULL),
                                           "exitCode", &code) == 1;
                char extra[64] = "";
                if (has_code)
                    snprintf(extra, sizeof extra, " (last exit code %lld)", (long long)code);
                cl_context(cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "pod %s cannot start: "
                                   "%s%s%s%s", w->sb->s.id, reason, msg ? ": " : "",
                                   msg ? msg : "", extra), "reason", reason);
                rc = -1;
                break;
            }
        } else if (term) {
            int64_t code = 0;
            cl_json_int(term, "exitCode", &code);
            cl_context(cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "the container of pod %s "
                               "exited with code %lld while it started", w->sb->s.id,
                               (long long)code), "reason", "Terminated");
            rc = -1;
        }
    }
    json_object_put(j);
    *state = w->state;
    return rc;
}

/* Waits until the container runs and takes an exec (CASE-54). */
static int k8_wait_ready(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *op,
                         sbx_error **error)
{
    k8_ready w = { .sb = sb, .ctx = ctx };
    char what[128];
    snprintf(what, sizeof what, "pod %s running", sb->s.id);
    if (cl_wait_until(ctx, K8_READY_S, k8_ready_look, &w, op, what, error) < 0)
        return -1;
    int code = -1;
    if (k8_run_short(sb, ctx, "true", &code, op, error) < 0)
        return -1;
    if (code != 0) {
        cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "pod %s: `true` exited %d in the "
                "container", sb->s.id, code);
        return -1;
    }
    return 0;
}

/*
 * The lifetime counts from readiness (as on every backend), but the
 * kubelet counts activeDeadlineSeconds from the pod's status.startTime,
 * before the image is pulled. The pod is made with the lifetime plus
 * K8_START_BOUND_S; once it is ready, this PATCHes (JSON merge patch)
 * activeDeadlineSeconds down to ceil(now - startTime) + ceil(@lifetime),
 * so the pod ends @lifetime seconds after readiness: never before, and at
 * most 2 s after (startTime has whole seconds), given that this host's
 * clock and the node's agree. The API server lets activeDeadlineSeconds
 * be lowered on a running pod, never raised. 0, or -1 with an error
 * (RBAC must grant patch on pods).
 */
static int k8_set_deadline(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                           double lifetime, const char *op, sbx_error **error)
{
    struct sbx_plugin_client *c = sb->s.c;
    if (!sb->started) {
        cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "pod %s is running but has no "
                "status.startTime: its lifetime cannot be counted", sb->s.id);
        return -1;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double since = (double)now.tv_sec + now.tv_nsec / 1e9 - (double)sb->started;
    int64_t d = (int64_t)ceil(since < 0 ? 0 : since) + (int64_t)ceil(lifetime);
    if (d < 1)
        d = 1;
    char body[96];
    snprintf(body, sizeof body, "{\"spec\":{\"activeDeadlineSeconds\":%lld}}", (long long)d);
    char *url = k8_pod_url(c, sb->s.id, "");
    cl_req req = { .method = "PATCH", .url = url, .content_type = "application/merge-patch+json",
                   .body = body, .body_len = strlen(body), .idempotent = CL_SAFE,
                   .what = "set the pod's activeDeadlineSeconds" };
    cl_resp r = { 0 };
    int rc = url ? cl_request(c->cl.http, ctx, &req, &r, op, error) : -1;
    free(url);
    if (rc == 0 && r.status / 100 != 2) {
        sbx_error *e = k8_fail_resp(c, error, r.status == 403 || r.status == 401
                                              ? SBX_ERROR_AUTHENTICATION
                                              : r.status == 429 || r.status >= 500
                                                ? CL_CODE_BY_STATUS
                                                : SBX_ERROR_CREATION_FAILED,
                                    &r, op, "set the pod's activeDeadlineSeconds (RBAC: patch "
                                            "pods)");
        cl_context(e, "sandbox_id", sb->s.id);
        rc = -1;
    }
    if (rc == 0)
        CL_LOG(SBX_LOG_DEBUG, "pod %s: activeDeadlineSeconds %lld (lifetime %.3f s from "
               "readiness)", sb->s.id, (long long)d, lifetime);
    cl_resp_clear(&r);
    return rc;
}

static int k8_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                     const sbx_plugin_create_request *rq, sbx_plugin_sandbox **sandbox,
                     sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_client *c = client;
    char name[32] = "sbx-";
    cl_random_hex(name + 4, 6);
    json_object *body = k8_pod_body(c, ctx, rq, name, error), *pol = NULL;
    if (!body)
        return -1;
    struct sbx_plugin_sandbox *sb = cl_sandbox_new(sizeof(*sb), c, name, NULL);
    cl_resp r = { 0 };
    int rc = -1, made_policy = 0;
    if (!sb) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (!rq->allow_internet) {
        pol = k8_policy_body(name, ctx, rq->expires_at);
        char *url = cl_printf("%s/networkpolicies", c->netapi);
        int prc = url ? cl_request_json(c->cl.http, ctx, "POST", url, pol, CL_UNSAFE, &r, op,
                                        "create the deny-egress NetworkPolicy", error) : -1;
        free(url);
        if (prc < 0) {
            if (cl_last()->unknown)
                k8_delete_policy(c, NULL, name, op, NULL);
            goto out;
        }
        if (r.status / 100 != 2) {
            k8_fail_resp(c, error, r.status == 403 ? SBX_ERROR_AUTHENTICATION
                                                   : SBX_ERROR_CONFIGURATION,
                         &r, op, "create the deny-egress NetworkPolicy");
            goto out;
        }
        made_policy = 1;
        sb->policy = 1;
        cl_resp_clear(&r);
    }
    char *purl = cl_printf("%s/pods", c->cl.api);
    int prc = purl ? cl_request_json(c->cl.http, ctx, "POST", purl, body, CL_UNSAFE, &r, op,
                                     "create the pod", NULL) : -1;
    free(purl);
    if (prc < 0) {
        int unknown = cl_last()->unknown;
        cl_create_unanswered(c->cl.reaper, ctx, ctx ? ctx->create_token : NULL, op, error);
        /* The name is ours: delete it whether or not it was made. */
        if (unknown)
            k8_delete(c, NULL, name, op, NULL);
        goto undo_policy;
    }
    if (r.status / 100 != 2) {
        if (r.maybe_acted)
            k8_delete(c, NULL, name, op, NULL);
        /* 403 is RBAC (authentication), unless it is the namespace's Pod
         * Security admission refusing the pod (configuration). */
        int pss = r.status == 403 && r.body.data
                  && strstr(r.body.data, "violates PodSecurity") != NULL;
        k8_fail_resp(c, error, pss ? SBX_ERROR_CONFIGURATION
                               : r.status == 403 || r.status == 401 ? SBX_ERROR_AUTHENTICATION
                               : r.status == 429 || r.status >= 500 ? CL_CODE_BY_STATUS
                                                                    : SBX_ERROR_CONFIGURATION,
                     &r, op, "create the pod");
        goto undo_policy;
    }
    CL_LOG(SBX_LOG_DEBUG, "pod %s created in namespace %s", name, c->ns);
    if (k8_wait_ready(sb, ctx, op, error) < 0) {
        if (error && *error)
            cl_context(*error, "sandbox_id", name);
        goto undo;
    }
    if (rq->timeout_secs > 0 && k8_set_deadline(sb, ctx, rq->timeout_secs, op, error) < 0)
        goto undo;
    if (cl_create_workdir(sb, &sb->s.workdir, k8_run_short, ctx, K8_BACKEND, rq->workdir, op,
                          error) < 0)
        goto undo;
    *sandbox = sb;
    sb = NULL;
    rc = 0;
    goto out;
undo:
    k8_delete(c, NULL, name, op, NULL);
    made_policy = 0;
undo_policy:
    if (made_policy)
        k8_delete_policy(c, NULL, name, op, NULL);
out:
    cl_sandbox_free(sb);
    json_object_put(body);
    json_object_put(pol);
    cl_resp_clear(&r);
    return rc;
}

CL_DESTROY(k8_destroy, k8_delete)

static int k8_is_alive(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    static const char *const dead[] = { "Failed", "Succeeded", NULL };
    if (cl_gone_get(&sb->s.gone))
        return 0;
    char *url = k8_pod_url(sb->s.c, sb->s.id, "");
    long st = 0;
    json_object *j = cl_get_json(sb->s.c->cl.http, ctx, url, &st, "is_alive", "get the pod", error);
    free(url);
    if (!j) {
        if (st == 404) {
            cl_gone_set(&sb->s.gone);
            return 0;
        }
        return -1;
    }
    const char *phase = cl_json_str(cl_json_path(j, "status", NULL), "phase");
    int alive = !cl_json_str(cl_json_path(j, "metadata", NULL), "deletionTimestamp");
    for (int i = 0; phase && dead[i]; i++)
        if (strcmp(phase, dead[i]) == 0)
            alive = 0;
    json_object_put(j);
    if (!alive)
        cl_gone_set(&sb->s.gone);
    return alive;
}

/* {"version":1,"pod":NAME,"namespace":NS[,"workdir":W]}: no credential
 * (the client's kubeconfig has them), no env value (the pod keeps it). */
static char *k8_session_state(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    (void)ctx;
    json_object *j = cl_state_new(&sb->s, K8_BACKEND, K8_STATE_VERSION, "pod", error);
    if (!j)
        return NULL;
    json_object_object_add(j, "namespace", json_object_new_string(sb->s.c->ns));
    return cl_state_end(j, error);
}

static int k8_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                     sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "resume";
    json_object *data;
    struct sbx_plugin_sandbox *sb = cl_resume_state(client, state_json, K8_BACKEND,
                                                    K8_STATE_VERSION, "pod", sizeof(*sb), &data,
                                                    error);
    if (!sb)
        return -1;
    const char *ns = cl_json_str(data, "namespace"), *id = sb->s.id;
    int rc = -1;
    if (ns && strcmp(ns, client->ns) != 0) {
        cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "kubernetes session state: "
                           "pod %s is in namespace %s, this client uses %s", id, ns,
                           client->ns), "namespace", ns);
    } else if (k8_wait_ready(sb, ctx, op, NULL) < 0) {
        cl_last_error l = *cl_last();
        if (cl_gone_get(&sb->s.gone) || l.code == SBX_ERROR_CREATION_FAILED)
            cl_gone_error(error, op, K8_BACKEND, id);
        else
            cl_fail(error, l.code, op, "%s", l.msg);
    } else {
        rc = 0;
    }
    return cl_resume_end(rc, sb, sandbox, NULL, data, NULL);
}

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct k8_proc {
    cl_script_proc base;        /* first member (provider.h) */
    k8_stream st;
    int tty;
    unsigned rows, cols;
} k8_proc;

static int k8_proc_out(void *ud, int ch, const unsigned char *p, size_t n)
{
    k8_proc *p8 = ud;
    return cl_proc_output(&p8->base.base, ch, p, n);
}

static void k8_proc_fini(cl_script_proc *p)
{
    k8_proc *k = (k8_proc *)p;
    pthread_mutex_destroy(&k->st.lock);
}

static int k8_exec_run(cl_proc *base)
{
    k8_proc *p = (k8_proc *)base;
    struct sbx_plugin_sandbox *sb = p->base.sb;
    const char *op = "exec";
    sbx_call_ctx ctx = { sizeof(ctx), 0, base->stop_fd, NULL };
    cl_buf pre = { 0 };
    char *wrapped = NULL, *hup = NULL;
    int code = -1;
    int bad = 0;
    /* A terminal has its size before the command runs (the resize message
     * on channel 4 may come after the command's first look at it). */
    if (!bad && p->tty && p->rows && p->cols)
        bad = cl_buf_printf(&pre, "stty rows %u cols %u 2>/dev/null\n", p->rows, p->cols) < 0;
    for (size_t i = 0; !bad && p->base.env[i]; i++) {
        const char *eq = strchr(p->base.env[i], '=');
        if (!eq)
            continue;
        char *q = cl_shell_quote(eq + 1);
        bad = !q || cl_buf_printf(&pre, "export %.*s=%s\n", (int)(eq - p->base.env[i]),
                                  p->base.env[i], q) < 0;
        free(q);
    }
    /* The command runs in a shell of its own (its $$ is its own), the only
     * one carrying the command's mark (the wrapper outlives a signal sent
     * to the command and exits as it did), between two readings of the
     * container's OOM-kill counter: a rise leaves a marker file that the
     * worker looks for when the command died by SIGKILL (CASE-49). */
    char *qs = cl_shell_quote(p->base.script);
    bad = bad || !qs
          || cl_buf_printf(&pre, K8_OOM_FN "__sbx_o0=$(__sbx_oom)\ntrap : INT QUIT HUP\n"
                                 CL_EXEC_MARK "=%s sh -c %s\n"
                                 "__sbx_rc=$?\n[ \"$(__sbx_oom)\" = \"$__sbx_o0\" ] || "
                                 ": > " K8_OOM_MARK "\nexit $__sbx_rc\n", p->base.tag, qs,
                           p->base.tag) < 0;
    free(qs);
    if (bad) {
        cl_proc_fail(base, SBX_ERROR_RESOURCE_EXHAUSTED, 0, NULL, NULL, "out of memory");
        goto out;
    }
    p->st.sb = sb;
    p->st.script = pre.data;
    p->st.tty = p->tty;
    p->st.rows = p->rows;
    p->st.cols = p->cols;
    p->st.in_fd = p->base.stdin_fd;
    p->st.out = k8_proc_out;
    p->st.out_ud = p;
    if (p->tty && !(hup = cl_mark_kill_command(p->base.tag, SIGHUP))) {
        cl_proc_fail(base, SBX_ERROR_RESOURCE_EXHAUSTED, 0, NULL, NULL, "out of memory");
        goto out;
    }
    p->st.hup_cmd = hup;
    if (p->base.stdin_fd >= 0 && !p->tty && k8_v4(sb->s.c)) {
        if (!(wrapped = k8_v4_stdin_wrap(pre.data))) {
            cl_proc_fail(base, SBX_ERROR_RESOURCE_EXHAUSTED, 0, NULL, NULL, "out of memory");
            goto out;
        }
        p->st.script = wrapped;
        p->st.chunked = 1;
    }
    code = k8_stream_run(&p->st, &ctx, op, NULL);
    if (code < 0) {
        cl_proc_fail_in(base, &sb->s);
    } else if (code == 137) {
        /* SIGKILL: by the memory limit when the marker is there. */
        char *chk = cl_printf("[ -e " K8_OOM_MARK " ] || exit 1; rm -f " K8_OOM_MARK,
                              p->base.tag, p->base.tag);
        int c2 = -1;
        if (chk && k8_run_short(sb, &ctx, chk, &c2, op, NULL) == 0 && c2 == 0)
            p->base.oom_killed = 1;
        free(chk);
    }
out:
    free(wrapped);
    free(hup);
    cl_buf_clear(&pre);
    return code;
}

static int k8_exec_start(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                         const sbx_plugin_exec_request *rq, sbx_plugin_process **process,
                         sbx_error **error)
{
    (void)ctx;
    const char *op = "exec";
    if (cl_gone_check(&sb->s.gone, op, K8_BACKEND, sb->s.id, error) < 0)
        return -1;
    if (rq->stdin_fd < -1) {
        cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op, "the kubernetes backend takes "
                "stdin from a descriptor, not interactively");
        return -1;
    }
    if (rq->user) {
        cl_context(cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op, "kubernetes backend: "
                           "commands run as the pod's user (uid %d); user %s cannot be chosen "
                           "per command (the exec API has no user)", K8_UID, rq->user), "user",
                   rq->user);
        return -1;
    }
    k8_proc *p = (k8_proc *)cl_script_proc_new(sizeof(k8_proc), sb, sb->s.workdir, rq,
                                               k8_run_short, op, error);
    if (!p)
        return -1;
    pthread_mutex_init(&p->st.lock, NULL);
    p->base.fini = k8_proc_fini;
    p->tty = rq->tty_rows > 0 || rq->tty_cols > 0;
    p->rows = rq->tty_rows;
    p->cols = rq->tty_cols;
    return cl_script_proc_launch(&p->base, k8_exec_run, rq, op, process, error);
}

static int k8_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx, unsigned rows,
                          unsigned cols, sbx_error **error)
{
    (void)ctx;
    k8_proc *p = (k8_proc *)process;
    if (!p->tty) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, "exec_resize", "the command has no "
                "terminal");
        return -1;
    }
    pthread_mutex_lock(&p->st.lock);
    p->rows = rows;
    p->cols = cols;
    p->st.rows = rows;
    p->st.cols = cols;
    if (p->st.ws)
        k8_send_resize(p->st.ws, rows, cols);
    pthread_mutex_unlock(&p->st.lock);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Files over exec                                                           */
/* ------------------------------------------------------------------------ */

static char *k8_abs(struct sbx_plugin_sandbox *sb, const char *path)
{
    return cl_path_in(sb->s.workdir ? sb->s.workdir : "/work", path);
}

/* Runs @script of a file call on @path (shown as the caller named it):
 * 3 not_found, other non-zero codes execution_failed with stderr. */
static int k8_file_cmd(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                       int in_fd, int out_fd, char **out, const char *shown, const char *what,
                       const char *op, sbx_error **error)
{
    int code = 0;
    char *err = NULL;
    if (cl_gone_check(&sb->s.gone, op, K8_BACKEND, sb->s.id, error) < 0)
        return -1;
    if (k8_run(sb, ctx, script, in_fd, out_fd, &code, out, &err, op, error) < 0)
        return -1;
    int rc = 0;
    if (code == 3) {
        cl_context(cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such %s in the sandbox: %s",
                           what, shown), "path", shown);
        rc = -1;
    } else if (code != 0) {
        size_t n = err ? strlen(err) : 0;
        while (n && (err[n - 1] == '\n' || err[n - 1] == ' '))
            err[--n] = '\0';
        cl_context(cl_fail(error, code == 4 ? SBX_ERROR_INVALID_ARGUMENT
                                            : SBX_ERROR_EXECUTION_FAILED, op,
                           "cannot %s %s (exit %d)%s%s", op, shown, code, n ? ": " : "",
                           n ? err : ""), "path", shown);
        rc = -1;
    }
    free(err);
    return rc;
}

static int k8_read_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                        sbx_error **error)
{
    char *p = k8_abs(sb, path), *q = p ? cl_shell_quote(p) : NULL;
    char *cmd = q ? cl_printf("[ -e %s ] || exit 3; [ -d %s ] && { echo 'is a directory' >&2; "
                              "exit 4; }; exec cat -- %s", q, q, q) : NULL;
    int rc = cmd ? k8_file_cmd(sb, ctx, cmd, -1, fd, NULL, path, "file", "read_file", error)
                 : (cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "read_file", "out of memory"), -1);
    free(cmd);
    free(q);
    free(p);
    return rc;
}

static int k8_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         int fd, uint32_t mode, sbx_error **error)
{
    char *p = k8_abs(sb, path), *q = p ? cl_shell_quote(p) : NULL;
    char *cmd = q ? cl_printf("set -e; d=$(dirname -- %s); mkdir -p -- \"$d\"; "
                              "[ -d %s ] && { echo 'is a directory' >&2; exit 4; }; "
                              "cat > %s; chmod %o -- %s", q, q, q,
                              (unsigned)(mode ? mode & 07777 : 0644), q) : NULL;
    int rc = cmd ? k8_file_cmd(sb, ctx, cmd, fd, -1, NULL, path, "file", "write_file", error)
                 : (cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "write_file", "out of memory"),
                    -1);
    free(cmd);
    free(q);
    free(p);
    return rc;
}

static int k8_list_files(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         sbx_plugin_file_fn fn, void *ud, sbx_error **error)
{
    const char *op = "list_files";
    char *p = k8_abs(sb, path), *q = p ? cl_shell_quote(p) : NULL;
    char *cmd = q ? cl_printf("test -d %s || exit 3; find %s -mindepth 1 -maxdepth 1 "
                              "-printf '%%y %%s %%m %%f\\0'", q, q) : NULL;
    char *out = NULL;
    int rc = -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else {
        /* NUL-separated: names may hold newlines. */
        k8_collect k = { .out_fd = -1 };
        int code = 0;
        char *err = NULL;
        if (cl_gone_check(&sb->s.gone, op, K8_BACKEND, sb->s.id, error) == 0) {
            k8_stream s = { .sb = sb, .script = cmd, .in_fd = -1, .out = k8_collect_out,
                            .out_ud = &k };
            pthread_mutex_init(&s.lock, NULL);
            code = k8_stream_run(&s, ctx, op, error);
            pthread_mutex_destroy(&s.lock);
            if (code == 3)
                cl_context(cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such directory in the "
                                   "sandbox: %s", path), "path", path);
            else if (code > 0)
                cl_context(cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot list %s "
                                   "(find exited %d)", path, code), "path", path);
            else if (code == 0) {
                rc = 0;
                for (size_t off = 0; off < k.out.len;) {
                    char *line = k.out.data + off;
                    size_t n = strnlen(line, k.out.len - off);
                    off += n + 1;
                    char *sp = strchr(line, ' '), *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
                    char *sp3 = sp2 ? strchr(sp2 + 1, ' ') : NULL;
                    if (!sp3)
                        continue;
                    int is_dir = line[0] == 'd';
                    sbx_plugin_file_info info = { sizeof(info), sp3 + 1, is_dir,
                                                  is_dir ? -1 : strtoll(sp + 1, NULL, 10),
                                                  (uint32_t)strtoul(sp2 + 1, NULL, 8) };
                    if (fn(&info, ud) != 0)
                        break;
                }
            }
        }
        cl_buf_clear(&k.out);
        cl_buf_clear(&k.err);
        free(err);
    }
    free(out);
    free(cmd);
    free(q);
    free(p);
    return rc;
}

static int k8_upload_tar(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                         int fd, sbx_error **error)
{
    char *p = k8_abs(sb, path), *q = p ? cl_shell_quote(p) : NULL;
    char *cmd = q ? cl_printf("mkdir -p -- %s && exec tar xf - --no-same-owner -C %s", q, q)
                  : NULL;
    int rc = cmd ? k8_file_cmd(sb, ctx, cmd, fd, -1, NULL, path, "directory", "upload_tar",
                               error)
                 : (cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "upload_tar", "out of memory"),
                    -1);
    free(cmd);
    free(q);
    free(p);
    return rc;
}

static int k8_download_tar(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                           int fd, sbx_error **error)
{
    char *p = k8_abs(sb, path), *q = p ? cl_shell_quote(p) : NULL;
    char *cmd = q ? cl_printf("test -d %s || exit 3; exec tar cf - --format=pax -C %s .", q, q)
                  : NULL;
    int rc = cmd ? k8_file_cmd(sb, ctx, cmd, -1, fd, NULL, path, "directory", "download_tar",
                               error)
                 : (cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "download_tar",
                            "out of memory"), -1);
    free(cmd);
    free(q);
    free(p);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin k8_plugin = {
    CL_PLUGIN_HEAD(K8_BACKEND),
    CL_PLUGIN_SLOTS(k8),
    .description = "Kubernetes pods through the API server (kubeconfig or in-cluster); "
                   "restricted Pod Security; deny-egress NetworkPolicy; exec over the "
                   "WebSocket exec subresource (v5, v4); files as tar over exec",
    .caps = K8_CAPS,
    .sandbox_free = cl_sandbox_free_slot,
    CL_SCRIPT_PROC_SLOTS,
    .exec_end_info = cl_script_exec_end_info,
    .exec_resize = k8_exec_resize,
    .upload_tar = k8_upload_tar,
    .download_tar = k8_download_tar,
};

CL_PLUGIN_EXPORT(&k8_plugin)
