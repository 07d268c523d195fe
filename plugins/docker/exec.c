/*
 * exec.c — commands in a Docker sandbox: the process-handle slots.
 *
 * exec_start: POST /containers/{id}/exec (AttachStdout/Err, AttachStdin when
 * the host gives a stdin descriptor, Tty from the request, Env, WorkingDir,
 * User, Cmd = argv or ["/bin/sh","-c",SCRIPT]), then POST /exec/{id}/start
 * on a connection of its own, hijacked with "Connection: Upgrade" (the
 * Engine answers 101 and the raw stream follows). A missing cwd is found
 * before anything runs (HEAD of the archive endpoint: not_found naming it).
 *
 * A relay thread per exec then:
 *  - demultiplexes the stream byte-exactly (demux.c; by the exec's Tty flag)
 *    into the host's stdout / stderr descriptors;
 *  - forwards the host's stdin descriptor to the connection and half-closes
 *    it (shutdown SHUT_WR) at EOF, which the command sees as EOF (on a
 *    terminal, Tty: its tree gets SIGHUP, a hang-up, instead);
 *  - after the stream's EOF (never before: CASE-26), polls exec inspect
 *    until Running is false with a non-null ExitCode, then signals the
 *    event descriptor. Running:false with a null ExitCode that persists, or
 *    Running:true after a kill found no process left, is an error
 *    ("exit status unknown"), never exit code 0.
 * Docker reports a command killed by signal N as 128+N already.
 *
 * Process trees. Every exec carries SBX_EXEC_ID=<random id> in its
 * environment, inherited by its descendants; runc makes each exec the leader
 * of a new session. exec_kill runs a second exec, a small POSIX sh script,
 * that signals every process carrying the marker and every process in a
 * session led by one (so children that cleared their environment, and
 * those that called setsid but kept it, are both found), and prints how
 * many it signalled. The container's init (Init: true) reaps them.
 *
 * Note: the Engine closes an exec's stream up to 2 s after the command's
 * main process ended when a background child still holds its output open.
 */
#include "docker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <json-c/json.h>

#define CREATE_SECS 30.0        /* exec create / start / inspect answers */
#define INSPECT_SECS 10.0
#define NULL_CODE_SECS 2.0      /* Running:false + ExitCode:null for this long: unknown */
#define GONE_GRACE_SECS 1.5     /* Running:true this long after a kill found nothing */
#define KILL_SECS 15.0
#define FREE_KILL_SECS 5.0
#define CHUNK 65536

enum { P_RUNNING = 0, P_DONE = 1, P_FAILED = 2 };

struct sbx_plugin_process {
    struct sbx_plugin_client *client;
    struct sbx_plugin_sandbox *sb;      /* outlives the exec call */
    char *cid;                  /* container id */
    char *eid;                  /* exec id */
    char marker[33];
    int tty;
    dk_conn conn;
    int out_fd, err_fd, in_fd;  /* our duplicates; -1 when none / closed */
    int stop_fd;                /* eventfd: exec_free stops the thread */
    int event_fd;               /* eventfd: written once the exec ended or failed */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;       /* guards what follows */
    int state;
    int exit_code;
    sbx_error_code err_code;
    int err_unknown;            /* the failure leaves the outcome unknown */
    char err_msg[1024];
    double kill_empty_at;       /* when a kill found no process (0 = never) */
    cl_buf syserr;              /* stream 3: the Engine's own error text */
    char user[257];             /* the exec's User, "" for the default */
};

/* ------------------------------------------------------------------------ */
/* Exec create and inspect                                                   */
/* ------------------------------------------------------------------------ */

/* POST /containers/{cid}/exec with @body; stores the exec id (malloc). */
static int exec_create(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                       json_object *body, char **eid, const char *op, sbx_error **error)
{
    const char *js = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN
                                                          | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *path;
    if (asprintf(&path, "/containers/%s/exec", sb->id) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "POST", .path = path, .body = js, .body_len = strlen(js),
                   .secs = CREATE_SECS };
    dk_resp r;
    int rc = dk_request(sb->client, ctx, &req, &r, op, error);
    free(path);
    if (rc < 0)
        return -1;
    rc = -1;
    if (r.status != 201) {
        dk_fail_container(error, sb, &r, SBX_ERROR_EXECUTION_FAILED, op, "exec create");
        goto out;
    }
    json_object *j = dk_resp_json(&r, op, error), *id;
    if (!j)
        goto out;
    if (json_object_object_get_ex(j, "Id", &id) && json_object_is_type(id, json_type_string)
        && json_object_get_string_len(id) > 0) {
        *eid = strdup(json_object_get_string(id));
        rc = *eid ? 0 : -1;
        if (rc < 0)
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    } else {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "exec create answered without an Id");
    }
    json_object_put(j);
out:
    dk_resp_clear(&r);
    return rc;
}

enum { INSPECT_RUNNING = 0, INSPECT_DONE = 1, INSPECT_NULL = 2 };

/* GET /exec/{eid}/json. Returns INSPECT_DONE with *@code, INSPECT_RUNNING,
 * INSPECT_NULL (not running, no exit code), or -1 with *@error. */
static int exec_inspect(struct sbx_plugin_client *c, const char *eid, int *code,
                        int64_t *pid, const char *op, sbx_error **error)
{
    if (pid)
        *pid = -1;
    char *path;
    if (asprintf(&path, "/exec/%s/json", eid) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "GET", .path = path, .secs = INSPECT_SECS };
    dk_resp r;
    int rc = dk_request(c, NULL, &req, &r, op, error);
    free(path);
    if (rc < 0)
        return -1;
    rc = -1;
    if (r.status == 404) {
        dk_fail_resp(error, SBX_ERROR_NOT_FOUND, &r, op,
                     "the exec vanished before its exit status was read (sandbox destroyed?)");
        goto out;
    }
    if (r.status != 200) {
        dk_fail_resp(error, SBX_ERROR_EXECUTION_FAILED, &r, op, "exec inspect");
        goto out;
    }
    json_object *j = dk_resp_json(&r, op, error), *running, *ec, *pv;
    if (!j)
        goto out;
    if (pid && json_object_object_get_ex(j, "Pid", &pv) && json_object_is_type(pv, json_type_int))
        *pid = json_object_get_int64(pv);
    if (!json_object_object_get_ex(j, "Running", &running)
        || !json_object_is_type(running, json_type_boolean)) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "exec inspect answered without Running");
    } else if (json_object_get_boolean(running)) {
        rc = INSPECT_RUNNING;
    } else if (!json_object_object_get_ex(j, "ExitCode", &ec) || ec == NULL) {
        rc = INSPECT_NULL;
    } else if (!json_object_is_type(ec, json_type_int)) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                "exec inspect answered an ExitCode that is not an integer");
    } else {
        int64_t v = json_object_get_int64(ec);
        if (v < 0 || v > 255) {
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                    "exec inspect answered ExitCode %lld, outside 0..255", (long long)v);
        } else {
            *code = (int)v;
            rc = INSPECT_DONE;
        }
    }
    json_object_put(j);
out:
    dk_resp_clear(&r);
    return rc;
}

/*
 * "Cmd" from argv or shell. An argv command runs through `exec "$@"` in
 * /bin/sh: the shell looks the program up in PATH and reports what cannot
 * run as POSIX shells do (127 and "not found", 126 and "Permission
 * denied"), where runc would print its own message on stdout and exit 126
 * for both. The program replaces the shell (same pid, same session); the
 * arguments stay literal. @wrap 0: argv as is (internal execs).
 */
/* @pre: shell commands run before the command (a wrapped or shell one), or
 * NULL. */
static json_object *make_cmd(const char *const *argv, const char *shell, int wrap,
                             const char *pre)
{
    json_object *a = json_object_new_array();
    char *script = NULL;
    if (!a)
        return NULL;
    if (shell) {
        json_object_array_add(a, json_object_new_string("/bin/sh"));
        json_object_array_add(a, json_object_new_string("-c"));
        if (pre && asprintf(&script, "%s%s", pre, shell) < 0)
            script = NULL;
        json_object_array_add(a, json_object_new_string(script ? script : shell));
        free(script);
        return a;
    }
    if (wrap) {
        json_object_array_add(a, json_object_new_string("/bin/sh"));
        json_object_array_add(a, json_object_new_string("-c"));
        if (pre && asprintf(&script, "%sexec \"$@\"", pre) < 0)
            script = NULL;
        json_object_array_add(a, json_object_new_string(script ? script : "exec \"$@\""));
        free(script);
        json_object_array_add(a, json_object_new_string("sh"));
    }
    for (size_t i = 0; argv[i]; i++)
        json_object_array_add(a, json_object_new_string(argv[i]));
    return a;
}

/* ------------------------------------------------------------------------ */
/* Internal execs (captured)                                                 */
/* ------------------------------------------------------------------------ */

typedef struct capture {
    cl_buf *out, *err;
    cl_buf sys;
    size_t cap;
    int over;
} capture;

static int capture_fn(void *ud, int stream, const unsigned char *p, size_t n)
{
    capture *c = ud;
    cl_buf *b = stream == 1 ? c->out : stream == 2 ? c->err : &c->sys;
    if (b->len + n > c->cap) {
        c->over = 1;
        return -1;
    }
    return cl_buf_append(b, p, n);
}

int dk_exec_capture(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                    const char *const *argv, double secs, size_t cap, cl_buf *out,
                    cl_buf *err, int *exit_code, const char *op, sbx_error **error)
{
    return dk_exec_capture_as(sb, ctx, NULL, argv, secs, cap, out, err, exit_code, op, error);
}

int dk_exec_capture_as(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *user,
                       const char *const *argv, double secs, size_t cap, cl_buf *out,
                       cl_buf *err, int *exit_code, const char *op, sbx_error **error)
{
    dk_bound b = dk_bound_make(ctx, secs);
    json_object *body = json_object_new_object();
    char *eid = NULL, *path = NULL;
    dk_conn conn = { .fd = -1 };
    capture c = { .out = out, .err = err, .cap = cap };
    int rc = -1;
    if (!body)
        goto nomem;
    json_object_object_add(body, "AttachStdout", json_object_new_boolean(1));
    json_object_object_add(body, "AttachStderr", json_object_new_boolean(1));
    json_object_object_add(body, "Tty", json_object_new_boolean(0));
    json_object_object_add(body, "Cmd", make_cmd(argv, NULL, 0, NULL));
    if (user)
        json_object_object_add(body, "User", json_object_new_string(user));
    if (exec_create(sb, ctx, body, &eid, op, error) < 0)
        goto out;
    if (asprintf(&path, "/exec/%s/start", eid) < 0) {
        path = NULL;
        goto nomem;
    }
    if (dk_hijack(sb->client, ctx, path, "{\"Detach\":false,\"Tty\":false}", &conn, op,
                  error) < 0)
        goto out;
    dk_demux d;
    dk_demux_init(&d, 0);
    if (conn.pre_len && dk_demux_feed(&d, conn.pre, conn.pre_len, capture_fn, &c) < 0)
        goto bad_stream;
    for (;;) {
        unsigned char buf[CHUNK];
        ssize_t n = recv(conn.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            if (dk_demux_feed(&d, buf, (size_t)n, capture_fn, &c) < 0)
                goto bad_stream;
            continue;
        }
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            break;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            cl_fail(error, SBX_ERROR_CONNECTION, op, "reading an exec stream: %s",
                    strerror(errno));
            goto out;
        }
        struct pollfd pf[2] = { { .fd = conn.fd, .events = POLLIN },
                                { .fd = b.cancel_fd, .events = POLLIN } };
        int pr = poll(pf, b.cancel_fd >= 0 ? 2 : 1, dk_bound_ms(&b, -1));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0 || (b.cancel_fd >= 0 && pf[1].revents)) {
            dk_fail_bound(error, &b, op, argv[0]);
            goto out;
        }
    }
    if (!dk_demux_at_boundary(&d)) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "an exec stream ended inside a frame");
        goto out;
    }
    if (c.sys.len) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "the Docker Engine: %s", c.sys.data);
        goto out;
    }
    /* The stream is at EOF: the exit status follows. */
    double null_since = 0;
    long delay = 1;
    for (;;) {
        int code = 0, s = exec_inspect(sb->client, eid, &code, NULL, op, error);
        if (s < 0)
            goto out;
        if (s == INSPECT_DONE) {
            *exit_code = code;
            rc = 0;
            goto out;
        }
        if (s == INSPECT_NULL) {
            if (!null_since)
                null_since = cl_now();
            else if (cl_now() - null_since > NULL_CODE_SECS) {
                cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                        "exit status unknown: exec of %s is not running and has no exit code",
                        argv[0]);
                goto out;
            }
        }
        if (dk_bound_ms(&b, -1) == 0 || dk_bound_cancelled(&b)) {
            dk_fail_bound(error, &b, op, argv[0]);
            goto out;
        }
        dk_sleep_ms(delay);
        delay = delay * 2 > 100 ? 100 : delay * 2;
    }

bad_stream:
    if (c.over)
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                "output of %s exceeds %zu bytes", argv[0], cap);
    else if (d.bad)
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                "malformed exec stream: frame header %02x %02x %02x %02x", d.bad_hdr[0],
                d.bad_hdr[1], d.bad_hdr[2], d.bad_hdr[3]);
    else
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    goto out;
nomem:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
out:
    dk_conn_close(&conn);
    cl_buf_clear(&c.sys);
    json_object_put(body);
    free(eid);
    free(path);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The relay thread                                                          */
/* ------------------------------------------------------------------------ */

static void proc_finish(struct sbx_plugin_process *p, int state, int code,
                        sbx_error_code ecode, int unknown, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void proc_finish(struct sbx_plugin_process *p, int state, int code,
                        sbx_error_code ecode, int unknown, const char *fmt, ...)
{
    pthread_mutex_lock(&p->lock);
    if (p->state == P_RUNNING) {
        p->state = state;
        p->exit_code = code;
        p->err_code = ecode;
        p->err_unknown = unknown;
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err_msg, sizeof(p->err_msg), fmt, ap);
            va_end(ap);
        }
    }
    pthread_mutex_unlock(&p->lock);
    uint64_t one = 1;
    ssize_t w = write(p->event_fd, &one, sizeof(one));
    (void)w;
}

/* Fails @p with the last error made on this thread. */
static void proc_fail_last(struct sbx_plugin_process *p, const char *what)
{
    const cl_last_error *e = cl_last();
    proc_finish(p, P_FAILED, 0, e->code, e->unknown, "%s: %s", what, e->msg);
}

static int stopped(struct sbx_plugin_process *p)
{
    struct pollfd pf = { .fd = p->stop_fd, .events = POLLIN };
    return poll(&pf, 1, 0) > 0;
}

static int relay_out(void *ud, int stream, const unsigned char *buf, size_t n)
{
    struct sbx_plugin_process *p = ud;
    if (stream == 3) {
        pthread_mutex_lock(&p->lock);
        int r = p->syserr.len < 4096 ? cl_buf_append(&p->syserr, buf, n) : 0;
        pthread_mutex_unlock(&p->lock);
        return r;
    }
    int fd = stream == 2 ? p->err_fd : p->out_fd;
    if (fd < 0)
        return 0;
    if (dk_write_all(fd, buf, n, p->stop_fd, NULL) < 0) {
        if (errno == ECANCELED)
            return -1;
        /* The reader went away: keep reading the stream, drop the bytes. */
        close(fd);
        if (stream == 2)
            p->err_fd = -1;
        else
            p->out_fd = -1;
    }
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Moves the stream to the host's descriptors until EOF. 0, or -1 when the
 * exec failed (already finished) or the thread was stopped. */
static int relay_stream(struct sbx_plugin_process *p)
{
    dk_demux d;
    dk_demux_init(&d, p->tty);
    unsigned char *in_buf = NULL, *buf = malloc(CHUNK);
    size_t in_len = 0, in_off = 0;
    int stdin_open = p->in_fd >= 0, rc = -1;
    if (!buf || (stdin_open && !(in_buf = malloc(CHUNK)))) {
        proc_finish(p, P_FAILED, 0, SBX_ERROR_RESOURCE_EXHAUSTED, 1, "out of memory");
        goto out;
    }
    if (p->conn.pre_len && dk_demux_feed(&d, p->conn.pre, p->conn.pre_len, relay_out, p) < 0)
        goto bad;
    for (;;) {
        struct pollfd pf[3];
        int np = 0, isock = np++, iin = -1, istop;
        pf[isock] = (struct pollfd){ .fd = p->conn.fd, .events = POLLIN };
        if (in_off < in_len)
            pf[isock].events |= POLLOUT;
        else if (stdin_open) {
            iin = np++;
            pf[iin] = (struct pollfd){ .fd = p->in_fd, .events = POLLIN };
        }
        istop = np++;
        pf[istop] = (struct pollfd){ .fd = p->stop_fd, .events = POLLIN };
        if (poll(pf, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            proc_finish(p, P_FAILED, 0, SBX_ERROR_EXECUTION_FAILED, 1, "poll: %s",
                        strerror(errno));
            goto out;
        }
        if (pf[istop].revents)
            goto out;
        if (iin >= 0 && pf[iin].revents) {
            ssize_t n = read(p->in_fd, in_buf, CHUNK);
            if (n > 0) {
                in_len = (size_t)n;
                in_off = 0;
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                /* EOF (or a broken source): the command sees EOF. On a
                 * terminal the Engine does not hang up at the half-close:
                 * the command's tree gets SIGHUP, as from a terminal that
                 * closed (its EOF character is the user's to type). */
                stdin_open = 0;
                close_fd(&p->in_fd);
                shutdown(p->conn.fd, SHUT_WR);
                if (p->tty) {
                    sbx_call_ctx kctx = { .struct_size = sizeof(kctx),
                                          .deadline = cl_now() + KILL_SECS, .cancel_fd = -1 };
                    dk_exec_kill(p, &kctx, SIGHUP, NULL);
                }
            }
        }
        if (in_off < in_len && (pf[isock].revents & POLLOUT)) {
            ssize_t w = send(p->conn.fd, in_buf + in_off, in_len - in_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                in_off += (size_t)w;
            } else if (w < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
                /* The command's stdin is gone; its output may still come. */
                in_off = in_len = 0;
                stdin_open = 0;
                close_fd(&p->in_fd);
            }
        }
        if (pf[isock].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = recv(p->conn.fd, buf, CHUNK, MSG_DONTWAIT);
            if (n > 0) {
                if (dk_demux_feed(&d, buf, (size_t)n, relay_out, p) < 0)
                    goto bad;
                continue;
            }
            if (n == 0 || errno == ECONNRESET)
                break;
            if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
                proc_finish(p, P_FAILED, 0, SBX_ERROR_CONNECTION, 1,
                            "reading the exec stream: %s", strerror(errno));
                goto out;
            }
        }
    }
    if (!dk_demux_at_boundary(&d)) {
        proc_finish(p, P_FAILED, 0, SBX_ERROR_EXECUTION_FAILED, 1,
                    "the exec stream ended inside a frame (output incomplete)");
        goto out;
    }
    rc = 0;
    goto out;
bad:
    if (!stopped(p)) {
        if (d.bad)
            proc_finish(p, P_FAILED, 0, SBX_ERROR_EXECUTION_FAILED, 1,
                        "malformed exec stream: frame header %02x %02x %02x %02x",
                        d.bad_hdr[0], d.bad_hdr[1], d.bad_hdr[2], d.bad_hdr[3]);
        else
            proc_finish(p, P_FAILED, 0, SBX_ERROR_RESOURCE_EXHAUSTED, 1, "out of memory");
    }
out:
    /* The host sees EOF on its pipes as soon as the stream is over. */
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
    close_fd(&p->in_fd);
    free(buf);
    free(in_buf);
    return rc;
}

static void *relay_main(void *arg)
{
    struct sbx_plugin_process *p = arg;
    sigset_t old;
    dk_sigpipe_block(&old);     /* a host pipe closed early is EPIPE (thread-wide) */
    if (relay_stream(p) < 0)
        return NULL;

    pthread_mutex_lock(&p->lock);
    int has_sys = p->syserr.len > 0;
    pthread_mutex_unlock(&p->lock);
    if (has_sys) {
        proc_finish(p, P_FAILED, 0, SBX_ERROR_EXECUTION_FAILED, 1, "the Docker Engine: %s",
                    p->syserr.data);
        return NULL;
    }

    /* Stream at EOF: now (and only now) the exit status. */
    double null_since = 0;
    int delay = 0;
    for (;;) {
        int code = 0;
        int64_t pid = -1;
        int s = exec_inspect(p->client, p->eid, &code, &pid, "exec_wait", NULL);
        if (s < 0) {
            if (cl_last()->code == SBX_ERROR_NOT_FOUND)
                proc_fail_last(p, "exit status unknown");
            else
                proc_fail_last(p, "exit status unknown (exec inspect failed)");
            return NULL;
        }
        if (s == INSPECT_DONE && code == 126 && pid == 0) {
            /* runc failed before any process ran (commands go through
             * /bin/sh, which reports its own 126 from a running process):
             * e.g. a user the container's passwd lacks. Its message came
             * on the output stream. */
            proc_finish(p, P_FAILED, 0, SBX_ERROR_EXECUTION_FAILED, 0,
                        "the Docker Engine could not start the command%s%s%s (exit 126 "
                        "before any process ran; the Engine says it on the output)",
                        p->user[0] ? " as user \"" : "", p->user, p->user[0] ? "\"" : "");
            return NULL;
        }
        if (s == INSPECT_DONE) {
            proc_finish(p, P_DONE, code, SBX_ERROR_EXECUTION_FAILED /* unused: no error */, 0, NULL);
            return NULL;
        }
        double now = cl_now();
        if (s == INSPECT_NULL) {
            if (!null_since)
                null_since = now;
            else if (now - null_since > NULL_CODE_SECS) {
                proc_finish(p, P_FAILED, 0, SBX_ERROR_EXECUTION_FAILED, 1,
                            "exit status unknown: the Docker Engine reports exec %.12s as "
                            "not running with no exit code (it never started?)", p->eid);
                return NULL;
            }
        } else {
            null_since = 0;
            pthread_mutex_lock(&p->lock);
            double empty_at = p->kill_empty_at;
            pthread_mutex_unlock(&p->lock);
            if (empty_at && now - empty_at > GONE_GRACE_SECS) {
                proc_finish(p, P_FAILED, 0, SBX_ERROR_EXECUTION_FAILED, 1,
                            "exit status unknown: no process of exec %.12s is left in the "
                            "container, but the Docker Engine still reports it running",
                            p->eid);
                return NULL;
            }
        }
        struct pollfd pf = { .fd = p->stop_fd, .events = POLLIN };
        if (poll(&pf, 1, delay) > 0)
            return NULL;
        delay = delay ? (delay * 2 > 100 ? 100 : delay * 2) : 1;
    }
}

/* ------------------------------------------------------------------------ */
/* Slots                                                                     */
/* ------------------------------------------------------------------------ */

static void proc_free(struct sbx_plugin_process *p)
{
    dk_conn_close(&p->conn);
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
    close_fd(&p->in_fd);
    close_fd(&p->stop_fd);
    close_fd(&p->event_fd);
    pthread_mutex_destroy(&p->lock);
    cl_buf_clear(&p->syserr);
    free(p->cid);
    free(p->eid);
    free(p);
}

static int random_hex(char *out, size_t nbytes)
{
    unsigned char raw[32];
    if (nbytes > sizeof(raw))
        return -1;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < nbytes) {
        ssize_t n = read(fd, raw + got, nbytes - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            return -1;
        }
        got += (size_t)n;
    }
    close(fd);
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

/* Checks that the working directory @abs exists and is a directory
 * (following symlinks a few times). 0, or -1 with not_found naming @shown. */
static int check_cwd(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *abs,
                     const char *shown, const char *op, sbx_error **error)
{
    char *cur = strdup(abs);
    int rc = -1;
    for (int depth = 0; cur && depth < 8; depth++) {
        uint32_t mode = 0;
        char *target = NULL;
        int r = dk_path_stat(sb, ctx, cur, &mode, NULL, NULL, &target, op, error);
        if (r < 0) {
            free(target);
            break;
        }
        if (r == 0 || (!(mode & DK_MODE_DIR) && !(mode & DK_MODE_SYMLINK))) {
            sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                     r == 0 ? "working directory \"%s\" does not exist in "
                                              "sandbox %.12s"
                                            : "working directory \"%s\" is not a directory "
                                              "in sandbox %.12s", shown, sb->id);
            cl_context(err, "path", shown);
            free(target);
            break;
        }
        if (mode & DK_MODE_DIR) {
            free(target);
            rc = 0;
            break;
        }
        /* A symlink: the Engine gives its target resolved in the container. */
        free(cur);
        cur = target && target[0] == '/' ? target : NULL;
        if (!cur)
            free(target);
    }
    if (rc < 0 && !cur && error && !*error)
        cl_fail(error, SBX_ERROR_NOT_FOUND, op, "working directory \"%s\" cannot be resolved",
                shown);
    free(cur);
    return rc;
}

int dk_exec_start(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                  const sbx_plugin_exec_request *request, sbx_plugin_process **process,
                  sbx_error **error)
{
    const char *op = "exec";
    struct sbx_plugin_sandbox *sb = sandbox;
    struct sbx_plugin_process *p = NULL;
    json_object *body = NULL, *env = NULL;
    char *abs_cwd = NULL, *path = NULL, *start = NULL;

    if (!request || request->struct_size < offsetof(sbx_plugin_exec_request, stderr_fd)
                                           + sizeof(int)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "exec request missing or too short");
        return -1;
    }
    if (!request->shell == !(request->argv && request->argv[0])) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                "exactly one of argv (non-empty) and shell must be set");
        return -1;
    }
    if (request->stdin_fd < -1) {
        cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                "the docker backend does not take interactive stdin in this version");
        return -1;
    }
    if (dk_sandbox_check(sb, op, error) < 0)
        return -1;
    if (request->cwd) {
        abs_cwd = dk_sandbox_path(sb, request->cwd, op, error);
        if (!abs_cwd || check_cwd(sb, ctx, abs_cwd, request->cwd, op, error) < 0)
            goto fail;
    }

    p = calloc(1, sizeof(*p));
    if (!p)
        goto nomem;
    p->out_fd = p->err_fd = p->in_fd = p->stop_fd = p->event_fd = -1;
    p->conn.fd = -1;
    pthread_mutex_init(&p->lock, NULL);
    p->client = sb->client;
    p->sb = sb;
    p->tty = request->tty_rows > 0 || request->tty_cols > 0;
    if (!(p->cid = strdup(sb->id)))
        goto nomem;
    if (random_hex(p->marker, 16) < 0) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot read /dev/urandom: %s",
                strerror(errno));
        goto fail;
    }
    p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    p->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->stop_fd < 0 || p->event_fd < 0) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "eventfd: %s", strerror(errno));
        goto fail;
    }
    int fds[3] = { request->stdin_fd, request->stdout_fd, request->stderr_fd };
    int *mine[3] = { &p->in_fd, &p->out_fd, &p->err_fd };
    for (int i = 0; i < 3; i++) {
        if (fds[i] < 0)
            continue;
        *mine[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        if (*mine[i] < 0) {
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "dup: %s", strerror(errno));
            goto fail;
        }
    }

    body = json_object_new_object();
    env = json_object_new_array();
    if (!body || !env)
        goto nomem;
    for (size_t i = 0; request->env && request->env[i]; i++)
        json_object_array_add(env, json_object_new_string(request->env[i]));
    char mk[64];
    snprintf(mk, sizeof(mk), DK_EXEC_MARKER "=%s", p->marker);
    json_object_array_add(env, json_object_new_string(mk));
    json_object_object_add(body, "AttachStdin", json_object_new_boolean(p->in_fd >= 0));
    json_object_object_add(body, "AttachStdout", json_object_new_boolean(1));
    json_object_object_add(body, "AttachStderr", json_object_new_boolean(1));
    json_object_object_add(body, "Tty", json_object_new_boolean(p->tty));
    json_object_object_add(body, "Env", env);
    env = NULL;
    if (abs_cwd)
        json_object_object_add(body, "WorkingDir", json_object_new_string(abs_cwd));
    if (request->user) {
        json_object_object_add(body, "User", json_object_new_string(request->user));
        snprintf(p->user, sizeof(p->user), "%s", request->user);
    }
    /* A Tty exec starts at 0x0 until the resize call lands (API 1.41 has no
     * ConsoleSize): the command's first step sets the size the request
     * asked for, so it is there before the command runs. */
    char pre[96];
    snprintf(pre, sizeof(pre), "stty rows %u cols %u 2>/dev/null; ", request->tty_rows,
             request->tty_cols);
    json_object_object_add(body, "Cmd", make_cmd(request->argv, request->shell, 1,
                                                 p->tty && request->tty_rows ? pre : NULL));
    if (exec_create(sb, ctx, body, &p->eid, op, error) < 0)
        goto fail;

    if (asprintf(&path, "/exec/%s/start", p->eid) < 0) {
        path = NULL;
        goto nomem;
    }
    if (asprintf(&start, "{\"Detach\":false,\"Tty\":%s}", p->tty ? "true" : "false") < 0) {
        start = NULL;
        goto nomem;
    }
    if (dk_hijack(sb->client, ctx, path, start, &p->conn, op, error) < 0) {
        /* The start request may have reached the Engine: make sure nothing
         * of it runs on. */
        if (cl_last()->code != SBX_ERROR_NOT_FOUND) {
            sbx_call_ctx kctx = { .struct_size = sizeof(kctx),
                                  .deadline = cl_now() + FREE_KILL_SECS, .cancel_fd = -1 };
            dk_exec_kill(p, &kctx, SIGKILL, NULL);
        }
        goto fail;
    }
    if (p->tty && request->tty_rows && request->tty_cols)
        dk_exec_resize(p, ctx, request->tty_rows, request->tty_cols, NULL);
    int e = pthread_create(&p->thread, NULL, relay_main, p);
    if (e) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "pthread_create: %s", strerror(e));
        /* The command runs: end it before giving up. */
        dk_exec_kill(p, NULL, SIGKILL, NULL);
        goto fail;
    }
    p->thread_started = 1;
    json_object_put(body);
    free(abs_cwd);
    free(path);
    free(start);
    *process = p;
    return 0;

nomem:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    json_object_put(body);
    json_object_put(env);
    free(abs_cwd);
    free(path);
    free(start);
    if (p)
        proc_free(p);
    return -1;
}

int dk_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                 int *exit_code, sbx_error **error)
{
    struct sbx_plugin_process *p = process;
    dk_bound b = dk_bound_make(ctx, timeout_ms < 0 ? 0 : timeout_ms / 1000.0);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int state = p->state, code = p->exit_code, unknown = p->err_unknown;
        sbx_error_code ec = p->err_code;
        char msg[sizeof(p->err_msg)];
        memcpy(msg, p->err_msg, sizeof(msg));
        pthread_mutex_unlock(&p->lock);
        if (state == P_DONE) {
            if (exit_code)
                *exit_code = code;
            return 1;
        }
        if (state == P_FAILED) {
            sbx_error *err = cl_fail(error, ec, "exec_wait", "%s", msg);
            if (unknown)
                cl_outcome_unknown(err);
            return -1;
        }
        if (timeout_ms == 0)
            return 0;
        struct pollfd pf[2] = { { .fd = p->event_fd, .events = POLLIN },
                                { .fd = b.cancel_fd, .events = POLLIN } };
        int ms = dk_bound_ms(&b, -1);
        int r = poll(pf, b.cancel_fd >= 0 ? 2 : 1, ms);
        if (r < 0 && errno != EINTR) {
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, "exec_wait", "poll: %s",
                    strerror(errno));
            return -1;
        }
        if (r > 0 && b.cancel_fd >= 0 && pf[1].revents) {
            dk_fail_bound(error, &b, "exec_wait", "wait");
            return -1;
        }
        if (r == 0) {
            if (b.deadline && cl_now() >= b.deadline) {
                dk_fail_bound(error, &b, "exec_wait", "wait");
                return -1;
            }
            timeout_ms = 0;     /* one last look */
        }
    }
}

int dk_exec_ended(sbx_plugin_process *process, struct sbx_plugin_sandbox **sb, int *code)
{
    pthread_mutex_lock(&process->lock);
    int done = process->state == P_DONE;
    *code = process->exit_code;
    pthread_mutex_unlock(&process->lock);
    *sb = process->sb;
    return done;
}

int dk_exec_event_fd(sbx_plugin_process *process)
{
    return process->event_fd;
}

/*
 * The tree kill, run inside the container as
 *   sh -c SCRIPT sbx-kill SIGNAL MARKER
 * Finds the processes whose environment holds SBX_EXEC_ID=MARKER (grep -z
 * when grep has it, else tr), the sessions they lead (a session whose
 * leader is alive without the marker is not ours: the container's init,
 * another exec), signals all of them and prints how many it signalled.
 */
static const char kill_script[] =
    "sig=$1; id=$2; me=$$\n"
    "if printf 'a\\0' | grep -qzx a 2>/dev/null; then\n"
    "  pids=$(grep -lzx \"" DK_EXEC_MARKER "=$id\" /proc/[0-9]*/environ 2>/dev/null"
    " | sed 's|^/proc/||; s|/environ$||')\n"
    "else\n"
    "  pids=\n"
    "  for f in /proc/[0-9]*/environ; do\n"
    "    if tr '\\0' '\\n' 2>/dev/null < \"$f\" | grep -qx \"" DK_EXEC_MARKER "=$id\"; then\n"
    "      p=${f#/proc/}; pids=\"$pids ${p%/environ}\"\n"
    "    fi\n"
    "  done\n"
    "fi\n"
    "sids=\n"
    "for p in $pids; do\n"
    "  read -r st 2>/dev/null < \"/proc/$p/stat\" || continue\n"
    "  set -- ${st##*) }\n"
    "  s=$4\n"
    "  [ \"$s\" -gt 1 ] 2>/dev/null || continue\n"
    "  case \" $pids \" in *\" $s \"*) ;; *) [ -d \"/proc/$s\" ] && continue ;; esac\n"
    "  case \" $sids \" in *\" $s \"*) ;; *) sids=\"$sids $s\" ;; esac\n"
    "done\n"
    "targets=$pids\n"
    "if [ -n \"$sids\" ]; then\n"
    "  for f in /proc/[0-9]*/stat; do\n"
    "    read -r st 2>/dev/null < \"$f\" || continue\n"
    "    set -- ${st##*) }\n"
    "    case \" $sids \" in *\" $4 \"*) p=${f#/proc/}; p=${p%/stat}\n"
    "      case \" $targets \" in *\" $p \"*) ;; *) targets=\"$targets $p\" ;; esac ;; esac\n"
    "  done\n"
    "fi\n"
    "n=0\n"
    "for p in $targets; do\n"
    "  [ \"$p\" = \"$me\" ] && continue\n"
    "  kill -$sig $p 2>/dev/null && n=$((n+1))\n"
    "done\n"
    "echo $n\n";

int dk_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int signal,
                 sbx_error **error)
{
    struct sbx_plugin_process *p = process;
    const char *op = "exec_kill";
    char sig[16];
    if (signal <= 0 || signal >= NSIG) {
        snprintf(sig, sizeof(sig), "%d", signal);
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "invalid signal %d",
                                 signal);
        cl_context(err, "signal", sig);
        return -1;
    }
    pthread_mutex_lock(&p->lock);
    int state = p->state;
    pthread_mutex_unlock(&p->lock);
    if (state != P_RUNNING)
        return 0;
    snprintf(sig, sizeof(sig), "%d", signal);
    const char *argv[] = { "/bin/sh", "-c", kill_script, "sbx-kill", sig, p->marker, NULL };
    struct sbx_plugin_sandbox tmp = { .client = p->client, .id = p->cid, .workdir = "/" };
    cl_buf out = { 0 }, err = { 0 };
    int code = -1;
    int r = dk_exec_capture(&tmp, ctx, argv, KILL_SECS, 4096, &out, &err, &code, op, NULL);
    if (r < 0) {
        const cl_last_error *e = cl_last();
        cl_buf_clear(&out);
        cl_buf_clear(&err);
        if (e->code == SBX_ERROR_NOT_FOUND) {
            /* The container is gone or stopped: so is the command. */
            pthread_mutex_lock(&p->lock);
            if (!p->kill_empty_at)
                p->kill_empty_at = cl_now();
            pthread_mutex_unlock(&p->lock);
            return 0;
        }
        sbx_error *ee = cl_fail(error, e->code, op, "signal %d to exec %.12s: %s", signal,
                                p->eid, e->msg);
        if (e->unknown)
            cl_outcome_unknown(ee);
        return -1;
    }
    long n = out.data ? strtol(out.data, NULL, 10) : -1;
    if (code != 0 || n < 0) {
        sbx_error *ee = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                                "the kill helper for exec %.12s failed (exit %d): %s", p->eid,
                                code, err.data ? err.data : "");
        cl_outcome_unknown(ee);
        cl_buf_clear(&out);
        cl_buf_clear(&err);
        return -1;
    }
    CL_LOG(SBX_LOG_DEBUG, "signal %d to exec %.12s: %ld processes", signal, p->eid, n);
    if (n == 0) {
        pthread_mutex_lock(&p->lock);
        if (!p->kill_empty_at)
            p->kill_empty_at = cl_now();
        pthread_mutex_unlock(&p->lock);
    }
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    return 0;
}

int dk_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx, unsigned rows,
                   unsigned cols, sbx_error **error)
{
    struct sbx_plugin_process *p = process;
    const char *op = "exec_resize";
    if (!p->tty) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "exec %.12s has no terminal", p->eid);
        return -1;
    }
    char *path;
    if (asprintf(&path, "/exec/%s/resize?h=%u&w=%u", p->eid, rows, cols) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "POST", .path = path, .secs = INSPECT_SECS };
    dk_resp r;
    int rc = dk_request(p->client, ctx, &req, &r, op, error);
    free(path);
    if (rc == 0 && r.status != 200 && r.status != 201) {
        dk_fail_resp(error, SBX_ERROR_EXECUTION_FAILED, &r, op, "exec resize");
        rc = -1;
    }
    dk_resp_clear(&r);
    return rc;
}

void dk_exec_free(sbx_plugin_process *process)
{
    struct sbx_plugin_process *p = process;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int running = p->state == P_RUNNING;
    pthread_mutex_unlock(&p->lock);
    if (running && p->thread_started) {
        sbx_call_ctx kctx = { .struct_size = sizeof(kctx), .deadline = cl_now() + FREE_KILL_SECS,
                              .cancel_fd = -1 };
        dk_exec_kill(p, &kctx, SIGKILL, NULL);
    }
    if (p->thread_started) {
        uint64_t one = 1;
        ssize_t w = write(p->stop_fd, &one, sizeof(one));
        (void)w;
        pthread_join(p->thread, NULL);
    }
    proc_free(p);
}
