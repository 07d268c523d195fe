/*
 * host/direct.c — direct exec: out of process, a command of a `local`
 * sandbox goes from the caller straight to the sandbox's supervisor,
 * without the plugin host in between.
 *
 * Out of process every exec crossed the plugin host: the caller woke the
 * host, the host the supervisor, the supervisor a reaper. On a machine
 * whose cores are busy each wake-up waits for a CPU, and the host's added
 * about 0.1 of a raw spawn's time to an exec (bench/exec_overhead's +load
 * rows, 1.14 to 1.16 out of process against 1.02 to 1.04 in process).
 * A plugin whose sandboxes are served by a process of their own may name
 * that process's exec endpoint in its session state ("exec_endpoint",
 * <sbx/plugin.h>); the library then sends a command that runs to its end
 * (no terminal, no interactive stdin, the default working directory and
 * user) there itself, in the endpoint's protocol, and everything else to
 * the plugin host as before. Nothing of the plugin runs in the caller:
 * it speaks a documented protocol over a socket, checking who serves it.
 *
 * Destroy goes the same way (sbx_direct_destroy): DESTROY, answered by
 * DESTROYED, then the plugin host's destroy is sent without waiting for
 * its answer (sbx_proxy_destroy_unwaited), for what the plugin keeps of
 * the sandbox; out of process that took about 0.1 ms off a destroy
 * (bench/lifecycle). An endpoint that says "destroy": false (bubblewrap's
 * in a caller's root_dir, whose plugin waits for the namespace's end and
 * cleans up after it) takes commands only: destroy goes through the plugin
 * host. An endpoint with "meta" (bubblewrap's with a root of its own,
 * whose supervisor, pid 1 of the sandbox's namespaces, cannot rename the
 * directory it is mounted from) has the destroyer rename that directory to
 * its trash name (proto_trash_path) once DESTROYED came, holding an
 * exclusive flock(2) on it from before DESTROY until then, as the plugin's
 * destroy does; the sandbox's keeper outside the namespace removes the
 * trash once the namespace ended (and the directory itself, should the
 * destroyer die between the two). Out of process that takes the plugin
 * host's wake-ups out of bubblewrap's destroy as of local's.
 *
 * The endpoint's "cwd" is the path commands start in as the process that
 * serves it sees it: the local supervisor's host path of the root; inside
 * bubblewrap's namespaces, the sandbox's workdir. Its "pid", "start" and
 * "uid" are as this process sees them (bubblewrap's supervisor, pid 1 of
 * its namespace, under its host pid): SO_PEERCRED gives them so here.
 *
 * The protocol is the local supervisor's (plugins/local/proto.h), version
 * PROTO_VERSION: one connection per command; EXEC_QUIET with stdin,
 * stdout and stderr as SCM_RIGHTS; EXIT i32 code at the end, or ERROR
 * when nothing could start; KILL i32 signal answered by KILLED once the
 * signal went to the command's whole tree; closing the connection before
 * EXIT kills the tree. An endpoint of another protocol or version, a
 * socket served by another process than the one named, or a connection or
 * send that fails before the request went out sends the command through
 * the plugin host instead, whose plugin then reports what is wrong in its
 * own words.
 *
 * A supervisor that does not answer (stopped by SIGSTOP, hung): EXEC_QUIET
 * carries start_by, the end of the command's timeout (or the call's
 * deadline), and the supervisor starts nothing it reads whole only after
 * it. At the timeout the library's KILL goes out; when it is not answered
 * within PROTO_ANSWER_SECS while the supervisor is stopped (or stays unread
 * for DIRECT_KILL_ACK_SECS: hung), the kill and the wait fail with a
 * timeout error naming the sandbox and its supervisor, and the connection
 * is closed without waiting further: an exec with a timeout of T seconds
 * returns within about T + PROTO_ANSWER_SECS. When the request
 * itself was still unread at start_by (SIOCOUTQ, proto_unread_bytes), the
 * command never starts: outcome failed, context started=no; otherwise it
 * may have started (outcome unknown, started=unknown), and the
 * supervisor, once it runs again, reads the close and ends its tree.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "internal.h"
#include "../plugins/local/proto.h"

/** The endpoint's protocol name in the session state. */
#define DIRECT_PROTOCOL "sbx-local"
/** Seconds a KILL may take to be acknowledged (the plugin's bound). */
#define DIRECT_KILL_ACK_SECS 10.0
/** Seconds connect and the request's send may take at most. */
#define DIRECT_SEND_SECS 10.0
/** Seconds the rest of a frame may take once its header came. */
#define DIRECT_FRAME_SECS 10.0
/** Seconds a DESTROY may take to be answered before the plugin host is
 *  asked (the plugin's own bound for it). */
#define DIRECT_DESTROY_SECS 15.0

struct sbx_direct_ep {
    char *sock;                 /* the endpoint's unix socket */
    char *cwd;                  /* host path the commands start in */
    char *sandbox_id;
    pid_t pid;                  /* who must serve the socket */
    unsigned long long start;   /* its start time (clock ticks) */
    uid_t uid;                  /* as whom */
    double expires_at;          /* UNIX time the lifetime ends; 0 none */
    double lifetime;            /* seconds, for messages */
    int destroy;                /* DESTROY may go there ("destroy", default
                                 * true); else the plugin host destroys */
    char *meta;                 /* the directory to rename to its trash name
                                 * after DESTROYED ("meta"); NULL: none */
};

/* A command started here. */
struct sbx_plugin_process {
    int fd;                     /* the connection */
    pthread_mutex_t lock;       /* the fields below */
    pthread_mutex_t wlock;      /* sends */
    int exited, code, lost, start_failed;
    uint32_t err_kind;
    int err_no;
    char *err_msg;
    unsigned kills_sent, kills_acked;
    char *sandbox_id, *cwd;
    double expires_at, lifetime;
    pid_t sup_pid;              /* the supervisor (for messages) */
    double start_by;            /* CLOCK_MONOTONIC; 0 none (proto.h, EXEC) */
    int not_started;            /* the request was unread at start_by */
    int stalled;                /* the supervisor did not answer a KILL */
    double stall_secs;          /* for how long */
};

/* IO_STALL: the supervisor did not answer (send_kill). */
enum { IO_OK = 0, IO_TIMEOUT, IO_CANCEL, IO_EOF, IO_ERR, IO_STALL };

void
sbx_direct_ep_free(sbx_direct_ep *ep)
{
    if (!ep)
        return;
    free(ep->sock);
    free(ep->cwd);
    free(ep->sandbox_id);
    free(ep->meta);
    free(ep);
}

/* A member of @o as an integer (0 when absent or not one). */
static int64_t member_int(json_object *o, const char *key)
{
    json_object *v;

    return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int)
           ? json_object_get_int64(v) : 0;
}

/* A member of @o as an absolute path (NULL when not one). */
static const char *member_path(json_object *o, const char *key)
{
    json_object *v;
    const char *s;

    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    s = json_object_get_string(v);
    return s[0] == '/' && strlen(s) == (size_t)json_object_get_string_len(v) ? s : NULL;
}

void
sbx_direct_from_state(sbx_sandbox *sandbox, json_object *doc, int check_start)
{
    json_object *data = NULL, *ep = NULL, *v = NULL;
    const char *sock, *cwd;
    sbx_direct_ep *d;
    struct sockaddr_un sa;

    if (sandbox->client->mode != SBX_PLUGIN_MODE_OUT_OF_PROCESS || sandbox->direct || !doc
        || !json_object_object_get_ex(doc, "data", &data)
        || !json_object_object_get_ex(data, "exec_endpoint", &ep)
        || !json_object_object_get_ex(ep, "protocol", &v) || !json_object_is_type(v, json_type_string)
        || strcmp(json_object_get_string(v), DIRECT_PROTOCOL) != 0
        || member_int(ep, "version") != PROTO_VERSION
        || !(sock = member_path(ep, "socket")) || strlen(sock) >= sizeof(sa.sun_path)
        || !(cwd = member_path(ep, "cwd")) || member_int(ep, "pid") <= 0
        || member_int(ep, "uid") < 0 || !sandbox->id[0])
        return;
    d = calloc(1, sizeof(*d));
    if (!d)
        return;
    d->sock = strdup(sock);
    d->cwd = strdup(cwd);
    d->sandbox_id = strdup(sandbox->id);
    d->pid = (pid_t)member_int(ep, "pid");
    d->start = (unsigned long long)member_int(ep, "start");
    /* The process named is the one running now (connect_ep). */
    if (check_start && !sbx_process_is(d->pid, d->start)) {
        sbx_direct_ep_free(d);
        return;
    }
    d->uid = (uid_t)member_int(ep, "uid");
    if (json_object_object_get_ex(ep, "expires_at", &v))
        d->expires_at = json_object_get_double(v);
    if (json_object_object_get_ex(ep, "lifetime", &v))
        d->lifetime = json_object_get_double(v);
    d->destroy = !json_object_object_get_ex(ep, "destroy", &v)
                 || (json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v));
    if (d->destroy && (cwd = member_path(ep, "meta")) && !(d->meta = strdup(cwd)))
        d->destroy = 0;
    if (!d->sock || !d->cwd || !d->sandbox_id) {
        sbx_direct_ep_free(d);
        return;
    }
    sandbox->direct = d;
}

/* The end of a wait: the sooner of @secs from now (< 0: none) and the
 * call's deadline (CLOCK_MONOTONIC, 0: none). */
static double until_of(const sbx_call_ctx *ctx, double secs)
{
    double until = secs < 0 ? 0 : sbx_monotonic_now() + secs;

    if (ctx && ctx->deadline > 0 && (until == 0 || ctx->deadline < until))
        until = ctx->deadline;
    return until;
}

/* Waits until @fd is ready for @events, @until passes (IO_TIMEOUT) or the
 * call's cancel descriptor fires (IO_CANCEL). */
static int wait_io(int fd, short events, double until, int cancel_fd)
{
    for (;;) {
        struct pollfd p[2] = { { fd, events, 0 }, { cancel_fd, POLLIN, 0 } };
        int ms = -1, n;

        if (until > 0) {
            double left = until - sbx_monotonic_now();
            ms = left <= 0 ? 0 : left * 1000.0 > 3600e3 ? 3600000 : (int)(left * 1000.0) + 1;
        }
        n = poll(p, cancel_fd >= 0 ? 2 : 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return IO_ERR;
        if (n == 0 && ms == 0)
            return IO_TIMEOUT;
        if (cancel_fd >= 0 && p[1].revents)
            return IO_CANCEL;
        if (p[0].revents)
            return IO_OK;
    }
}

/* Sends the frame @b, with @nfds descriptors @fds riding on its first
 * byte, whole, within @until. */
static int send_frame(int fd, proto_buf *b, const int *fds, int nfds, double until)
{
    size_t off = 0;

    if (proto_buf_finish(b) < 0) {
        errno = E2BIG;
        return IO_ERR;
    }
    while (off < b->len) {
        struct iovec iov = { b->data + off, b->len - off };
        union {
            char buf[CMSG_SPACE(sizeof(int) * PROTO_EXEC_FDS_MAX)];
            struct cmsghdr align;
        } cm;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        if (off == 0 && nfds > 0) {
            struct cmsghdr *c;

            memset(&cm, 0, sizeof(cm));
            mh.msg_control = cm.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
            c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
            memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
        }
        n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_io(fd, POLLOUT, until, -1);
            if (r != IO_OK)
                return r;
            continue;
        }
        return n < 0 && (errno == EPIPE || errno == ECONNRESET) ? IO_EOF : IO_ERR;
    }
    return IO_OK;
}

/* Reads exactly @len bytes within @until. */
static int recv_exact(int fd, void *buf, size_t len, double until)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return IO_EOF;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return IO_ERR;
        int r = wait_io(fd, POLLIN, until, -1);
        if (r != IO_OK)
            return r;
    }
    return IO_OK;
}

/* Connects to @ep's socket within @until and checks that its supervisor
 * serves it: the listener's pid and uid (SO_PEERCRED: those of the process
 * that called listen(), which the supervisor does itself). Its start time
 * was checked when the endpoint was read (sbx_direct_from_state): another
 * process serving the socket would have to hold the supervisor's pid, so
 * the supervisor would have ended, its pid been reused, and that process
 * have bound this path in a directory of the sandbox's user (mode 0700).
 * Checking the start time at each command as well cost about 0.03 of a
 * raw spawn (bench/README.md). 0 with *@fd, or -1 (the plugin host is to
 * be asked). */
static int connect_ep(const sbx_direct_ep *ep, double until, int *fd)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
    socklen_t cl = sizeof(cred);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (s < 0)
        return -1;
    memcpy(sa.sun_path, ep->sock, strlen(ep->sock) + 1);
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        socklen_t el = sizeof(e);
        if ((e != EINPROGRESS && e != EAGAIN) || wait_io(s, POLLOUT, until, -1) != IO_OK
            || getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e != 0) {
            close(s);
            return -1;
        }
    }
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.pid != ep->pid
        || cred.uid != ep->uid) {
        close(s);
        return -1;
    }
    *fd = s;
    return 0;
}

int
sbx_direct_usable(const sbx_sandbox *sandbox)
{
    const sbx_direct_ep *ep = sandbox->direct;

    /* Near its lifetime's end the plugin says what it is (expired, or
     * ended while the command ran) in its own words. */
    return ep && (ep->expires_at <= 0 || sbx_wallclock_now() < ep->expires_at - 1.0);
}

int
sbx_direct_exec_start(sbx_sandbox *sandbox, const sbx_call_ctx *ctx,
                      const sbx_plugin_exec_request *rq, sbx_plugin_process **process)
{
    const sbx_direct_ep *ep = sandbox->direct;
    double until = until_of(ctx, DIRECT_SEND_SECS);
    int fds[PROTO_EXEC_FDS] = { rq->stdin_fd, rq->stdout_fd, rq->stderr_fd };
    int own[PROTO_EXEC_FDS] = { -1, -1, -1 };
    struct sbx_plugin_process *p = NULL;
    uint32_t argc = 3, envc = 0;
    proto_buf b;
    int fd = -1, rc = 1;

    proto_buf_init(&b, PROTO_EXEC_QUIET);
    if (!rq->shell)
        for (argc = 0; rq->argv[argc]; argc++)
            ;
    proto_put_u32(&b, argc);
    if (rq->shell) {
        proto_put_str(&b, "/bin/sh");
        proto_put_str(&b, "-c");
        proto_put_str(&b, rq->shell);
    } else {
        for (uint32_t i = 0; i < argc; i++)
            proto_put_str(&b, rq->argv[i]);
    }
    while (rq->env && rq->env[envc])
        envc++;
    proto_put_u32(&b, envc);
    for (uint32_t i = 0; i < envc; i++)
        proto_put_str(&b, rq->env[i]);
    proto_put_str(&b, ep->cwd);
    /* Nothing starts after the caller stops waiting for it. */
    double start_by = rq->struct_size >= offsetof(sbx_plugin_exec_request, start_deadline)
                                         + sizeof(rq->start_deadline) ? rq->start_deadline : 0;
    if (ctx && ctx->deadline > 0 && (start_by <= 0 || ctx->deadline < start_by))
        start_by = ctx->deadline;
    if (start_by > 0)
        proto_put_u64(&b, (uint64_t)(start_by * 1e9));
    for (int i = 0; i < PROTO_EXEC_FDS; i++) {
        if (fds[i] >= 0)
            continue;
        own[i] = open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
        if (own[i] < 0)
            goto out;
        fds[i] = own[i];
    }
    p = calloc(1, sizeof(*p));
    if (b.failed || !p || !(p->sandbox_id = strdup(ep->sandbox_id))
        || !(p->cwd = strdup(ep->cwd)) || connect_ep(ep, until, &fd) < 0)
        goto out;
    /* Refused before it went out: nothing runs, the plugin host is asked. */
    if (send_frame(fd, &b, fds, PROTO_EXEC_FDS, until) != IO_OK)
        goto out;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->wlock, NULL);
    p->fd = fd;
    p->expires_at = ep->expires_at;
    p->lifetime = ep->lifetime;
    p->sup_pid = ep->pid;
    p->start_by = start_by > 0 ? start_by : 0;
    fd = -1;
    *process = p;
    p = NULL;
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (p) {
        free(p->sandbox_id);
        free(p->cwd);
        free(p);
    }
    for (int i = 0; i < PROTO_EXEC_FDS; i++)
        if (own[i] >= 0)
            close(own[i]);
    proto_buf_free(&b);
    return rc;
}

static void io_fail(sbx_error **err, int r, const char *op, const char *id, const char *what);

int
sbx_direct_destroy(sbx_sandbox *sandbox, const sbx_call_ctx *ctx, sbx_error **err)
{
    const sbx_direct_ep *ep = sandbox->direct;
    unsigned char hdr[PROTO_HEADER_SIZE], *payload = NULL;
    uint32_t type = 0, len = 0;
    proto_buf b;
    int fd = -1, r, meta_lock = -1;

    if (!ep || !ep->destroy)
        return 0;
    if (ep->meta) {
        /* Held until the directory has its trash name: should this process
         * die before, the keeper, which takes this lock once the sandbox
         * ended, removes the directory as it is. Taken by another (a
         * destroy in the plugin host): that one goes on alone. */
        meta_lock = proto_meta_lock(ep->meta);
        if (meta_lock < 0)
            return 0;
    }
    proto_buf_init(&b, PROTO_DESTROY);
    if (b.failed || connect_ep(ep, until_of(ctx, DIRECT_SEND_SECS), &fd) < 0
        || send_frame(fd, &b, NULL, 0, until_of(ctx, DIRECT_SEND_SECS)) != IO_OK) {
        /* Not sent: the plugin host destroys it, or says why not. */
        proto_buf_free(&b);
        if (fd >= 0)
            close(fd);
        if (meta_lock >= 0)
            close(meta_lock);
        return 0;
    }
    proto_buf_free(&b);
    /* DESTROYED once every process of the sandbox has ended and its
     * directory is its trash (plugins/local/proto.h). */
    r = wait_io(fd, POLLIN, until_of(ctx, DIRECT_DESTROY_SECS), ctx ? ctx->cancel_fd : -1);
    if (r == IO_OK)
        r = recv_exact(fd, hdr, sizeof(hdr), sbx_monotonic_now() + DIRECT_FRAME_SECS);
    if (r == IO_OK && (proto_parse_header(hdr, &type, &len) < 0 || !(payload = malloc(len + 1))))
        r = IO_ERR;
    if (r == IO_OK)
        r = recv_exact(fd, payload, len, sbx_monotonic_now() + DIRECT_FRAME_SECS);
    free(payload);
    close(fd);
    if (r == IO_OK && type == PROTO_DESTROYED && ep->meta) {
        /* Every process of the sandbox but its init has ended; the init
         * ends next, and the namespace with it. Renamed, the directory is
         * the keeper's; not renamed, the plugin host's destroy removes it
         * (it finds the supervisor gone). */
        proto_meta_to_trash(ep->meta);
    }
    if (meta_lock >= 0)
        close(meta_lock);
    if (r == IO_OK && type == PROTO_DESTROYED)
        return 1;
    if (r == IO_CANCEL || (r == IO_TIMEOUT && ctx && ctx->deadline > 0
                           && sbx_monotonic_now() >= ctx->deadline)) {
        io_fail(err, r, "destroy", ep->sandbox_id, "destroy");
        return -1;
    }
    /* No answer (the supervisor died, refused or stalls): the plugin host
     * makes sure, ending it by pid if it must. */
    return 0;
}

/* Waits (until @until, or the call's cancellation @cancel_fd) for one
 * frame and takes it in. IO_OK after a frame, or when another thread took
 * it first; IO_EOF when the connection is lost. */
static int pump(struct sbx_plugin_process *p, double until, int cancel_fd)
{
    unsigned char hdr[PROTO_HEADER_SIZE], *payload = NULL;
    uint32_t type, len;
    int r = wait_io(p->fd, POLLIN, until, cancel_fd);
    struct pollfd pf = { .fd = p->fd, .events = POLLIN };

    if (r != IO_OK)
        return r;
    pthread_mutex_lock(&p->lock);
    if (p->lost) {
        pthread_mutex_unlock(&p->lock);
        return IO_EOF;
    }
    if (poll(&pf, 1, 0) <= 0) {
        pthread_mutex_unlock(&p->lock);
        return IO_OK;
    }
    double frame_until = sbx_monotonic_now() + DIRECT_FRAME_SECS;
    r = recv_exact(p->fd, hdr, sizeof(hdr), frame_until);
    if (r == IO_OK && proto_parse_header(hdr, &type, &len) < 0)
        r = IO_ERR;
    if (r == IO_OK && !(payload = malloc((size_t)len + 1)))
        r = IO_ERR;
    if (r == IO_OK)
        r = recv_exact(p->fd, payload, len, frame_until);
    if (r == IO_OK) {
        proto_reader rd;

        payload[len] = '\0';
        proto_reader_init(&rd, payload, len);
        if (type == PROTO_EXIT) {
            int code = proto_get_i32(&rd);
            if (!rd.failed) {
                p->exited = 1;
                p->code = code;
            }
        } else if (type == PROTO_KILLED) {
            p->kills_acked++;
        } else if (type == PROTO_ERROR && !p->exited) {
            /* Nothing could start: nothing runs. */
            const char *msg;

            p->err_kind = proto_get_u32(&rd);
            p->err_no = proto_get_i32(&rd);
            msg = proto_get_str(&rd);
            p->err_msg = msg ? strdup(msg) : NULL;
            p->start_failed = 1;
            p->lost = 1;
        }
    } else {
        /* A torn or refused frame leaves the stream unusable. */
        p->lost = 1;
        r = IO_EOF;
    }
    free(payload);
    pthread_mutex_unlock(&p->lock);
    return r;
}

/* The error of a wait or a kill that failed with @r (words of the plugin's
 * own, plugins/local/local.c). */
static void io_fail(sbx_error **err, int r, const char *op, const char *id, const char *what)
{
    sbx_error *e;

    switch (r) {
    case IO_TIMEOUT:
        e = sbx_set_error(err, SBX_ERROR_TIMEOUT, op,
                          "timed out waiting for the supervisor of sandbox %s (%s)", id, what);
        break;
    case IO_CANCEL:
        e = sbx_set_error(err, SBX_ERROR_TIMEOUT, op, "call cancelled (%s, sandbox %s)",
                          what, id);
        break;
    case IO_EOF:
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, op, "sandbox %s is gone (its supervisor "
                          "closed the connection during %s)", id, what);
        break;
    default:
        e = sbx_set_error(err, sbx_errno_code(errno, SBX_ERROR_CONNECTION), op,
                          "cannot talk to the supervisor of sandbox %s (%s): %s", id, what,
                          strerror(errno));
        break;
    }
    if (r == IO_TIMEOUT || r == IO_CANCEL)
        sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
}

/* The error of a command that could not start (the supervisor's ERROR). */
static void start_fail(sbx_error **err, const struct sbx_plugin_process *p)
{
    sbx_error *e;

    if (p->err_kind == PROTO_ERR_CWD) {
        if (p->err_no == ENOENT || p->err_no == ENOTDIR)
            e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, "exec", "working directory \"%s\" "
                              "does not exist in sandbox %s", p->cwd, p->sandbox_id);
        else
            e = sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, "exec", "working directory "
                              "\"%s\" cannot be used in sandbox %s: %s", p->cwd,
                              p->sandbox_id, strerror(p->err_no));
        sbx_error_add_context(e, "path", p->cwd);
    } else if (p->err_kind == PROTO_ERR_DEADLINE) {
        /* Read only after its timeout's end: it never ran. */
        e = sbx_set_error(err, SBX_ERROR_TIMEOUT, "exec", "the supervisor of sandbox %s took "
                          "the command in only after its timeout: it did not start (%s)",
                          p->sandbox_id, p->err_msg ? p->err_msg : "refused");
        sbx_error_add_context(e, "started", "no");
        sbx_error_add_context(e, "reason", "start_deadline");
    } else {
        sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, "exec", "supervisor of sandbox %s: %s",
                      p->sandbox_id, p->err_msg ? p->err_msg : "request refused");
    }
}

/* The error of a command whose supervisor did not answer a KILL (stopped,
 * hung): whether it started, as far as known. */
static void stall_fail(sbx_error **err, const struct sbx_plugin_process *p, const char *op)
{
    char msg[512];
    sbx_error *e;

    proto_stall_message(msg, sizeof(msg), p->sandbox_id, p->sup_pid, p->stall_secs,
                        p->not_started);
    e = sbx_set_error(err, SBX_ERROR_TIMEOUT, op, "%s", msg);
    sbx_error_add_context(e, "started", p->not_started ? "no" : "unknown");
    sbx_error_add_contextf(e, "supervisor_pid", "%d", (int)p->sup_pid);
    if (!p->not_started)
        sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
}

/* The error of a command whose connection was lost before its end. */
static void lost_fail(sbx_error **err, const struct sbx_plugin_process *p)
{
    sbx_error *e;

    if (p->expires_at > 0 && sbx_wallclock_now() >= p->expires_at) {
        char when[32] = "?";
        struct tm tm;
        time_t t = (time_t)p->expires_at;

        if (gmtime_r(&t, &tm))
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, "exec_wait", "sandbox %s expired at %s "
                          "(lifetime %g s) while the command ran", p->sandbox_id, when,
                          p->lifetime);
        sbx_error_add_context(e, "expires_at", when);
    } else {
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, "exec_wait",
                          "sandbox %s ended while the command ran", p->sandbox_id);
    }
    sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
}

static int direct_exec_wait(sbx_plugin_process *p, const sbx_call_ctx *ctx, int timeout_ms,
                            int *exit_code, sbx_error **error)
{
    double until = until_of(ctx, timeout_ms < 0 ? -1.0 : timeout_ms / 1000.0);
    int cancel_fd = ctx ? ctx->cancel_fd : -1;

    for (;;) {
        pthread_mutex_lock(&p->lock);
        int exited = p->exited, lost = p->lost, code = p->code, start_failed = p->start_failed;
        int stalled = p->stalled;
        pthread_mutex_unlock(&p->lock);
        if (exited) {
            if (exit_code)
                *exit_code = code;
            return 1;
        }
        if (start_failed) {
            start_fail(error, p);
            return -1;
        }
        if (stalled) {
            stall_fail(error, p, "exec_wait");
            return -1;
        }
        if (lost) {
            lost_fail(error, p);
            return -1;
        }
        int r = pump(p, until, cancel_fd);
        if (r == IO_OK || r == IO_EOF)
            continue;
        if (r == IO_TIMEOUT && !(ctx && ctx->deadline > 0 && sbx_monotonic_now() >= ctx->deadline))
            return 0;
        io_fail(error, r, "exec_wait", p->sandbox_id, "wait");
        return -1;
    }
}

static int direct_exec_event_fd(sbx_plugin_process *p)
{
    return p->fd;
}

/* Records that the supervisor did not answer what was sent at @sent_at. */
static int stall(struct sbx_plugin_process *p, double sent_at)
{
    pthread_mutex_lock(&p->lock);
    p->stalled = 1;
    p->stall_secs = round((sbx_monotonic_now() - sent_at) * 10.0) / 10.0;
    pthread_mutex_unlock(&p->lock);
    return IO_STALL;
}

/* Sends KILL(@sig) and waits (until @until) for its acknowledgement;
 * IO_STALL when the supervisor does not answer: stopped PROTO_ANSWER_SECS
 * after the send (it cannot until continued), or the frame still unread
 * at @until (hung: a serving supervisor reads it at once, however long the
 * kill then takes). */
static int send_kill(struct sbx_plugin_process *p, int sig, double until)
{
    proto_buf b;
    unsigned target;
    int lost, stalled, r;
    double sent_at, stall_at;

    proto_buf_init(&b, PROTO_KILL);
    proto_put_i32(&b, sig);
    pthread_mutex_lock(&p->wlock);
    pthread_mutex_lock(&p->lock);
    lost = p->lost;
    stalled = p->stalled;
    /* The request, alone on the connection so far, still unread at its
     * start_by: the supervisor will refuse it (proto.h, EXEC). */
    if (!lost && !stalled && p->kills_sent == 0 && p->start_by > 0
        && sbx_monotonic_now() >= p->start_by && proto_unread_bytes(p->fd) > 0)
        p->not_started = 1;
    target = ++p->kills_sent;
    pthread_mutex_unlock(&p->lock);
    r = lost ? IO_EOF : stalled ? IO_STALL : send_frame(p->fd, &b, NULL, 0, until);
    pthread_mutex_unlock(&p->wlock);
    proto_buf_free(&b);
    sent_at = sbx_monotonic_now();
    stall_at = sent_at + PROTO_ANSWER_SECS;
    while (r == IO_OK) {
        pthread_mutex_lock(&p->lock);
        int done = p->kills_acked >= target;
        lost = p->lost;
        pthread_mutex_unlock(&p->lock);
        if (done)
            return IO_OK;
        if (lost)
            return IO_EOF;
        r = pump(p, stall_at > 0 && stall_at < until ? stall_at : until, -1);
        if (r == IO_EOF)
            r = IO_OK;
        if (r == IO_TIMEOUT && stall_at > 0 && stall_at < until) {
            stall_at = 0;
            r = proto_proc_stopped(p->sup_pid) ? stall(p, sent_at) : IO_OK;
        } else if (r == IO_TIMEOUT && proto_unread_bytes(p->fd) > 0) {
            r = stall(p, sent_at);
        }
    }
    return r;
}

static int direct_exec_kill(sbx_plugin_process *p, const sbx_call_ctx *ctx, int sig,
                            sbx_error **error)
{
    int r;

    if (sig <= 0 || sig >= NSIG) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "exec_kill",
                                     "invalid signal %d", sig);
        sbx_error_add_contextf(e, "signal", "%d", sig);
        return -1;
    }
    r = send_kill(p, sig, until_of(ctx, DIRECT_KILL_ACK_SECS));
    /* A connection that is gone means the supervisor ended the tree. */
    if (r == IO_OK || r == IO_EOF)
        return 0;
    if (r == IO_STALL)
        stall_fail(error, p, "exec_kill");
    else
        io_fail(error, r, "exec_kill", p->sandbox_id, "kill");
    return -1;
}

static void direct_exec_free(sbx_plugin_process *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    /* A supervisor that does not answer gets the close only: it ends the
     * tree once it runs again, and nothing waits for it meanwhile. */
    int running = !p->exited && !p->lost && !p->stalled;
    pthread_mutex_unlock(&p->lock);
    /* As the plugin's free (plugins/local/local.c): an EXIT that came and
     * was not read yet ends it; one still running has its whole tree ended
     * before the close (the close alone would too, without the wait). */
    while (running && pump(p, sbx_monotonic_now(), -1) == IO_OK) {
        pthread_mutex_lock(&p->lock);
        running = !p->exited && !p->lost;
        pthread_mutex_unlock(&p->lock);
    }
    if (running)
        send_kill(p, SIGKILL, sbx_monotonic_now() + DIRECT_KILL_ACK_SECS);
    close(p->fd);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->wlock);
    free(p->sandbox_id);
    free(p->cwd);
    free(p->err_msg);
    free(p);
}

static const sbx_plugin direct_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = 4,         /* its end is read from the connection */
    .name = "direct",
    .exec_wait = direct_exec_wait,
    .exec_event_fd = direct_exec_event_fd,
    .exec_kill = direct_exec_kill,
    .exec_free = direct_exec_free,
};

const sbx_plugin *
sbx_direct_plugin(void)
{
    return &direct_plugin;
}
