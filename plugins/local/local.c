/*
 * local.c — libsbx-local.so, the `local` backend.
 *
 * A local sandbox is a root directory plus an sbx-supervisor process
 * started at create (supervisor.c). Its state lives in a meta directory
 * "${TMPDIR:-/tmp}/sbx-local-XXXXXX" (mode 0700), whose basename is the
 * sandbox id (made ahead by the client's warm supervisor as
 * ".sbx-spare-XXXXXX" with its root/, tmp/ and sock, and renamed at
 * create; proto.h; bubblewrap's warm sandbox likewise, bw_spare_make):
 *
 *     sock        the supervisor's unix socket (bound here, listened on by
 *                 the supervisor; bubblewrap: never in the sandbox's view)
 *     record      what create made, as JSON (mode 0600):
 *                 {"supervisor_pid":P,"supervisor_start":S,"supervisor_uid":U,
 *                  "root":"/...","owns_root":B,"made_tmp":B,["cwd":"/...",]
 *                  "lifetime":L,"expires_at":E}
 *                 (S: field 22 of /proc/P/stat; U: the supervisor's uid as
 *                 SO_PEERCRED reports it; L: the lifetime in seconds, 0 =
 *                 none; E: when it ends, UNIX seconds, 0 = never; cwd, on
 *                 bubblewrap: the sandbox path commands start in)
 *     root/       the sandbox root, unless the caller gave a workdir
 *                 (bubblewrap: a root_dir; its workdir is a path inside)
 *
 * Only the library writes there. Resume takes the meta directory only when
 * it is a directory of this user that nobody else may write (create makes
 * it 0700) holding a record of this user that nobody else may write, and
 * takes root, owns_root and made_tmp from that record, never from the
 * session state: a planted state can
 * neither choose what destroy removes nor which process it trusts. Every
 * connection to the supervisor checks its peer (SO_PEERCRED: the recorded
 * pid, start time and uid) and refuses anything else with an
 * authentication error; destroy then ends the supervisor by pid.
 *
 * Commands run as the calling user with the host's filesystem in view (no
 * isolation), in an environment made only of PATH, LANG, HOME, TMPDIR,
 * SANDBOX_ROOT, NPM_CONFIG_PREFIX and the caller's variables. Every exec is
 * one connection to the supervisor carrying the caller's descriptors
 * (proto.h), so output never passes through this process.
 *
 * Lifetime and owners. timeout_secs is the sandbox's lifetime, counted
 * from readiness: the supervisor ends the sandbox at its end, and when the
 * last process owning an attached sandbox has ended (the application that
 * created it and each that resumed it, in process or out: the host
 * services' owner_pidfd; a pidfd the supervisor polls). A detached one (create's
 * detached, or the detach slot) ends only by its lifetime or destroy. The
 * supervisor's keeper then removes the meta directory (proto.h). A call on
 * a sandbox whose lifetime is over is not_found naming the expiry.
 *
 * The plugin never forks the application and never waits for anything but
 * its own direct child, by pid; it installs no signal handler.
 */
#include "local.h"
#include "proto.h"

#include <sbx/plugin.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pwd.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <json-c/json.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif
#ifndef SBX_LIBEXEC_DIR
#define SBX_LIBEXEC_DIR "/usr/local/libexec/libsbx"
#endif

/* Built a second time with SBX_LOCAL_EXEC_ONLY as the test-only backend
 * "localexec": no file slots, so the host's exec-based fallbacks serve it.
 * Built a third time with SBX_LOCAL_BUBBLEWRAP as libsbx-bubblewrap.so
 * (bwrap.c describes what differs). */
#if defined(SBX_LOCAL_SAFEHOUSE)
/* libsbx-safehouse.so: as local, every command wrapped by the safehouse
 * CLI (macOS sandbox-exec): `safehouse --workdir=ROOT --env -- COMMAND`
 * (safehouse.c). */
#define BACKEND "safehouse"
#define LOCAL_FILE_CAPS (SBX_CAP_FILES | SBX_CAP_DIR_TRANSFER)
#define ID_PREFIX "sbx-safehouse-"
#define ISOLATION_CAPS 0
#elif defined(SBX_LOCAL_BUBBLEWRAP)
#define BACKEND "bubblewrap"
#define LOCAL_FILE_CAPS (SBX_CAP_FILES | SBX_CAP_DIR_TRANSFER)
#define ID_PREFIX "sbx-bwrap-"
#define ISOLATION_CAPS (SBX_CAP_ISOLATION | SBX_CAP_NETWORK_POLICY)
#elif defined(SBX_LOCAL_FAULTY)
/* Test-only "faulty": local, with faults on purpose chosen by the command
 * (tests/plugins/faults.c). */
#define BACKEND "faulty"
#define LOCAL_FILE_CAPS (SBX_CAP_FILES | SBX_CAP_DIR_TRANSFER)
#define ID_PREFIX "sbx-local-"
#define ISOLATION_CAPS 0
int sbx_fault_exec(const sbx_plugin_exec_request *request, const sbx_call_ctx *ctx);
void sbx_fault_init(void);
int sbx_fault_create(const char *id, const sbx_call_ctx *ctx);
void sbx_fault_destroy(const char *id);
void sbx_fault_destroyed(void);
/* Code 0, "unknown", on purpose: the fault of a plugin that gives no code. */
#define FAULT_NO_CODE ((sbx_error_code)0)
#elif defined(SBX_LOCAL_EXEC_ONLY)
#define BACKEND "localexec"
#define LOCAL_FILE_CAPS 0
#define ID_PREFIX "sbx-local-"
#define ISOLATION_CAPS 0
#else
#define BACKEND "local"
#define LOCAL_FILE_CAPS (SBX_CAP_FILES | SBX_CAP_DIR_TRANSFER)
#define ID_PREFIX "sbx-local-"
#define ISOLATION_CAPS 0
#endif
/* SBX_CAP_LIFETIME: the supervisor ends the sandbox at its lifetime's end. */
/* SBX_CAP_OWNER_WATCH: the supervisor holds a pidfd of each owner of an
 * attached sandbox (the application in both plugin modes: the host's
 * owner_pidfd) and ends the sandbox when the last has ended, SIGKILL
 * included; create fails without one. So an attached sandbox may have no
 * lifetime (timeout_secs <= 0: CONFIG's lifetime 0). */
/* SBX_CAP_PTY: the supervisor makes a pseudo-terminal for an exec that
 * asks for one (proto.h, EXEC). */
/* SBX_CAP_EXPOSED_PORTS: the sandbox shares the host's network (bubblewrap
 * only with allow_internet), so its ports are this host's. */
/* SBX_CAP_USER (bubblewrap): a create-time user is the one uid of the
 * sandbox's user namespace (bwrap --uid/--gid). */
#ifdef SBX_LOCAL_BUBBLEWRAP
#define USER_CAPS SBX_CAP_USER
#else
#define USER_CAPS 0
#endif
#define LOCAL_CAPS (SBX_CAP_EXEC | SBX_CAP_EXEC_STDIN | SBX_CAP_BACKGROUND | SBX_CAP_RESUME \
                    | SBX_CAP_LIFETIME | SBX_CAP_PTY | SBX_CAP_EXPOSED_PORTS | ISOLATION_CAPS \
                    | SBX_CAP_EXEC_STDIN_STREAM | USER_CAPS | SBX_CAP_OWNER_WATCH)

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define DEFAULT_LANG "C.UTF-8"

/* Bounds, in seconds, of every wait on the supervisor. */
#define HANDSHAKE_SECS 10.0    /* start-up until READY */
#define REPLY_SECS 30.0        /* an answer to EXEC */
#define FRAME_SECS 5.0         /* the rest of a frame once it began */
#define PING_SECS 5.0
#define KILL_ACK_SECS 10.0
#define FREE_KILL_SECS 5.0
#define DESTROY_SECS 15.0
#define GONE_SECS 5.0
#define WARM_WAIT_SECS 2       /* a create waits for a warm supervisor on its way */
#define WARM_DEFER_SECS 1.0    /* a fill waits at most this for its gate */

static const sbx_host_services *host;

/* A warm supervisor (plain local only): one started ahead, waiting for
 * CLAIM, so that a create costs what is left of the handshake instead of
 * a spawn. */
#if !defined(SBX_LOCAL_BUBBLEWRAP) && !defined(SBX_LOCAL_SAFEHOUSE)
#define LOCAL_WARM 1
#else
#define LOCAL_WARM 0
#endif
/* A spare made ahead by the client: plain local's warm supervisor, or
 * bubblewrap's warm sandbox (bw_spare_make). */
#if LOCAL_WARM || defined(SBX_LOCAL_BUBBLEWRAP)
#define LOCAL_SPARES 1
#else
#define LOCAL_SPARES 0
#endif

/*
 * The gate of a warm fill. The fill started by a create would run while
 * the new sandbox's first exec does, and take the CPU from it (forks,
 * page-table copies and their TLB flushes; measured: the first exec after
 * a create ran 5-6 ms slower than raw with the fill beside it, 1-2 ms with
 * the fill put off); so it waits at this gate, which opens when that
 * sandbox's destroy has its answer (opened as destroy began, the fill took
 * the CPU and the temporary directory from the supervisor ending the
 * sandbox) or at its free, at the
 * client's next create that finds no spare ready (which then waits for
 * the fill, as for one on its way) or client_free, and at the latest
 * WARM_DEFER_SECS after the create. Shared, by reference count, by the
 * client's request (fill_req), the fill thread and the sandbox;
 * thread-safe.
 */
typedef struct fill_gate {
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int open;
    int refs;
} fill_gate;

#if LOCAL_SPARES
/** A new closed gate with one reference; NULL when out of memory (a fill
 *  without a gate does not wait). */
static fill_gate *gate_new(void)
{
    fill_gate *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->opened, &ca);
    pthread_condattr_destroy(&ca);
    g->refs = 1;
    return g;
}


/** Another reference to @g (NULL: none); returns @g. */
static fill_gate *gate_ref(fill_gate *g)
{
    if (g) {
        pthread_mutex_lock(&g->lock);
        g->refs++;
        pthread_mutex_unlock(&g->lock);
    }
    return g;
}
#endif

/** Opens @g (NULL: nothing); opening an open gate does nothing. */
static void gate_open(fill_gate *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_broadcast(&g->opened);
    pthread_mutex_unlock(&g->lock);
}

/** Drops a reference to @g (NULL: nothing), freeing it with the last. */
static void gate_unref(fill_gate *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->lock);
    if (last) {
        pthread_cond_destroy(&g->opened);
        pthread_mutex_destroy(&g->lock);
        free(g);
    }
}

#if LOCAL_SPARES
/** Waits until @g opens, at most @secs seconds (NULL: returns at once). */
static void gate_wait(fill_gate *g, double secs)
{
    if (!g)
        return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = (long long)until.tv_nsec + (long long)((secs - (double)(long long)secs) * 1e9);
    until.tv_sec += (time_t)secs + (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&g->lock);
    while (!g->open && pthread_cond_timedwait(&g->opened, &g->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&g->lock);
}
#endif

/** A warm supervisor (a spare), ready for a sandbox: what its HELLO said
 *  and the check of its socket found. */
typedef struct warm_sup {
    int ctl;                    /* its control socket; -1: none */
    pid_t pid;                  /* its pid and start time (HELLO) */
    unsigned long long start;
    uid_t uid;                  /* the uid its socket's listener has */
    char *dir;                  /* its directory, BASE/PROTO_SPARE_PREFIX
                                 * XXXXXX, with root/, root/tmp/ and sock */
    int dirfd;                  /* that directory, open (O_DIRECTORY) */
    /* bubblewrap's warm sandbox (pid is 1, start and uid unknown until
     * READY): */
    int has_socks;              /* socks[] are open */
    int socks[2];               /* its socket DIR/sock, bound and listening,
                                 * and an O_PATH descriptor of its file (they
                                 * go with CONFIG) */
    pid_t host_pid;             /* bubblewrap: its init's host pid, from its
                                 * HELLO's credentials (SCM_CREDENTIALS), with
                                 * start and uid; 0 when they did not come */
    char *bwrap;                /* the bwrap program it runs */
    char *exe;                  /* the supervisor program it runs, and the */
    char *base;                 /* directory its directory is in */
} warm_sup;

/* Spares a client keeps ready or on their way at most. bubblewrap: two,
 * so that a loop creating right after each destroy on one client takes a
 * ready one every time (the one made for the create before it is still on
 * its way then, its fill gated until that create's destroy). Plain local:
 * one, its spawner keeping the second (spawner_fork). */
#ifdef SBX_LOCAL_BUBBLEWRAP
#define SPARES_MAX 2
#else
#define SPARES_MAX 1
#endif

/* A spare asked for by a create: what it is to run, and the gate its fill
 * waits at (a reference). */
typedef struct fill_req {
    char *exe;
    char *base;
    fill_gate *gate;
} fill_req;

struct sbx_plugin_client {
    pthread_mutex_t lock;
    int userns_ok;              /* bubblewrap: the user namespace check passed */
    /* The warm supervisors (spares), under lock: */
    warm_sup warm[SPARES_MAX];  /* ready, oldest first */
    int n_warm;
    fill_req reqs[SPARES_MAX];  /* asked for, not begun, oldest first */
    int n_reqs;
    fill_gate *wait_gate;       /* the gate the filling thread waits at */
    int making;                 /* the filling thread took one of reqs (at
                                 * its gate or making it) */
    int filling;                /* the filling thread runs */
    int fill_late;              /* bubblewrap: and its bwrap runs already */
    int fill_joinable;          /* fill_thread is to be joined */
    int closing;                /* client_free began: start no more */
    pthread_t fill_thread;
    pthread_cond_t filled;      /* signalled when one is made or given up */
    /* The warm spawner, which forks the warm supervisors; used by the
     * filling thread only (and by client_free once that is joined): */
    int spawner_ctl;            /* its control socket; -1 none */
    char *spawner_exe;          /* the program it runs */
};

struct sbx_plugin_process {
    int fd;                     /* connection to the supervisor */
    pid_t pid;
    char *sandbox_id;
    pthread_mutex_t lock;       /* guards the state below and reading */
    pthread_mutex_t wlock;      /* serialises writing */
    int exited;
    int code;
    int lost;                   /* connection gone without EXIT */
    unsigned kills_sent;
    unsigned kills_acked;
    int tty;                    /* the exec has a terminal (RESIZE applies) */
    unsigned resizes_sent;
    unsigned resizes_acked;
    int resize_errno;           /* of the last RESIZED */
    double expires_at;          /* the sandbox's, for the error of a lost exec */
    double lifetime;
    int oom_known;              /* bubblewrap: oom_before was read at the start */
    uint64_t oom_before;        /* the sandbox's OOM-kill counter then */
    /* An exec sent as EXEC_QUIET (SBX_PLUGIN_EXEC_START_UNCONFIRMED): its
     * ERROR, when nothing could start, comes in place of EXIT. */
    int start_failed;           /* an ERROR came (lost is set too) */
    uint32_t err_kind;          /* its PROTO_ERR_* */
    int err_no;                 /* its errno */
    char *err_msg;              /* its message; NULL when none */
    char *cwd_shown;            /* the cwd as the caller gave it (or the root) */
    int exit_fd_given;          /* the caller's exit socket went along: the
                                 * end may be known to it and not yet to us */
    pid_t sup_pid;              /* the supervisor (host pid), for messages */
    double start_by;            /* CLOCK_MONOTONIC; 0 none (proto.h, EXEC) */
    int not_started;            /* the request was unread at start_by */
    int stalled;                /* the supervisor did not answer a request */
    double stall_secs;          /* for how long */
};

/* ------------------------------------------------------------------------ */
/* Errors and logging                                                        */
/* ------------------------------------------------------------------------ */

/** Stores a new error; returns it (for context) or NULL when none was made. */
static sbx_error *fail(sbx_error **error, sbx_error_code code, const char *op,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static sbx_error *fail(sbx_error **error, sbx_error_code code, const char *op,
                       const char *fmt, ...)
{
    if (!error || *error || !host)
        return NULL;
    char msg[2 * PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host->set_error(error, code, op, "%s", msg);
    return *error;
}

static void add_context(sbx_error *err, const char *key, const char *value)
{
    if (err && host && host->error_add_context)
        host->error_add_context(err, key, value);
}

static void set_outcome_unknown(sbx_error *err)
{
    if (err && host && host->error_set_outcome)
        host->error_set_outcome(err, SBX_ERROR_OUTCOME_UNKNOWN);
}

#define LOG(level, ...)                                                     \
    do {                                                                    \
        if (host && host->log)                                              \
            host->log(level, BACKEND, __VA_ARGS__);                         \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Time bounds and I/O                                                       */
/* ------------------------------------------------------------------------ */

/** A wait bound: the earlier of our own limit and the call's deadline, plus
 *  the call's cancel descriptor. */
typedef struct bound {
    double until;               /* CLOCK_MONOTONIC seconds; INFINITY = none */
    double deadline;            /* the call's deadline; 0 = none */
    int cancel_fd;
} bound;

/* IO_STALL: the supervisor did not answer (proc_request). */
enum { IO_OK = 0, IO_EOF = -1, IO_TIMEOUT = -2, IO_CANCEL = -3, IO_ERR = -4, IO_STALL = -5 };

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/** @secs < 0: no limit of our own. */
static bound make_bound(const sbx_call_ctx *ctx, double secs)
{
    bound b = { .until = secs < 0 ? INFINITY : mono_now() + secs, .cancel_fd = -1 };
    if (ctx && ctx->struct_size >= offsetof(sbx_call_ctx, cancel_fd) + sizeof(int)) {
        b.deadline = ctx->deadline;
        b.cancel_fd = ctx->cancel_fd;
        if (ctx->deadline > 0 && ctx->deadline < b.until)
            b.until = ctx->deadline;
    }
    return b;
}

static int bound_ms(const bound *b)
{
    if (isinf(b->until))
        return -1;
    double left = (b->until - mono_now()) * 1000.0;
    if (left <= 0)
        return 0;
    return left >= INT_MAX - 1 ? INT_MAX : (int)left + 1;
}

static int deadline_passed(const bound *b)
{
    return b->deadline > 0 && mono_now() >= b->deadline;
}

/** Waits for @events on @fd within @b (always polls at least once). */
static int wait_io(int fd, short events, const bound *b)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = events },
                               { .fd = b->cancel_fd, .events = POLLIN } };
        int ms = bound_ms(b);
        int r = poll(p, b->cancel_fd >= 0 ? 2 : 1, ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return IO_ERR;
        }
        if (b->cancel_fd >= 0 && p[1].revents)
            return IO_CANCEL;
        if (r > 0 && p[0].revents)
            return IO_OK;
        if (ms == 0 || bound_ms(b) == 0)
            return IO_TIMEOUT;
    }
}

#ifdef SBX_LOCAL_BUBBLEWRAP
/**
 * The credentials the kernel attached to the next bytes waiting on @fd
 * (a unix socket with SO_PASSCRED set before its peer sent them: the
 * sender's pid and uid translated into this process's namespaces), read
 * without taking the bytes (MSG_PEEK) into *@cred; left zero when none
 * came. Does not block when nothing waits.
 */
static void peek_credentials(int fd, struct ucred *cred)
{
    char byte;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = { &byte, 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf) };
    *cred = (struct ucred){ 0 };
    ssize_t n;
    while ((n = recvmsg(fd, &mh, MSG_PEEK | MSG_DONTWAIT)) < 0 && errno == EINTR)
        ;
    if (n <= 0)
        return;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS
            && c->cmsg_len == CMSG_LEN(sizeof(struct ucred)))
            memcpy(cred, CMSG_DATA(c), sizeof(*cred));
}
#endif

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/** 1 when the lifetime of a sandbox that ends at @expires_at (UNIX
 *  seconds; 0 = never) is over. */
static int lifetime_over(double expires_at)
{
    return expires_at > 0 && wall_now() >= expires_at;
}

/**
 * The not_found error of a call on sandbox @id whose lifetime (@lifetime
 * seconds, ending at UNIX time @expires_at) is over: "sandbox ID expired
 * at 2026-12-01T00:10:02Z (lifetime 2 s)" and @what (may be ""), with
 * context "expires_at" (that time, RFC 3339 UTC).
 */
static sbx_error *expired_fail(sbx_error **error, const char *op, const char *id,
                               double expires_at, double lifetime, const char *what)
{
    char when[32] = "?";
    struct tm tm;
    time_t t = (time_t)expires_at;
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    sbx_error *err = fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s expired at %s "
                          "(lifetime %g s)%s", id, when, lifetime, what);
    add_context(err, "expires_at", when);
    return err;
}

/** A pidfd of the process owning what this plugin makes (the host's
 *  owner_pidfd: the application, also out of process), or -1 with errno. */
static int owner_pidfd(void)
{
    if (host && host->struct_size >= offsetof(sbx_host_services, owner_pidfd)
                                     + sizeof(host->owner_pidfd) && host->owner_pidfd)
        return host->owner_pidfd();
    return proto_pidfd_open(getpid());
}

int local_check_lifetime(sbx_plugin_sandbox *sandbox, const char *op, sbx_error **error)
{
    if (!lifetime_over(sandbox->expires_at))
        return 0;
    expired_fail(error, op, sandbox->id, sandbox->expires_at, sandbox->lifetime, "");
    return -1;
}

/** Sends a finished frame, @fds riding with its first byte. */
static int send_frame(int fd, proto_buf *b, const int *fds, int nfds, const bound *bd)
{
    if (proto_buf_finish(b) < 0) {
        errno = E2BIG;
        return IO_ERR;
    }
    size_t off = 0;
    while (off < b->len) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * PROTO_EXEC_FDS_MAX)];
        } ctl;
        struct iovec iov = { b->data + off, b->len - off };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (off == 0 && nfds > 0) {
            memset(&ctl, 0, sizeof(ctl));
            mh.msg_control = ctl.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
        }
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_io(fd, POLLOUT, bd);
            if (r != IO_OK)
                return r;
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            return IO_EOF;
        return IO_ERR;
    }
    return IO_OK;
}

/** Receives exactly @n bytes. IO_EOF when the peer closed first. */
static int recv_exact(int fd, void *p, size_t n, const bound *bd)
{
    unsigned char *b = p;
    while (n > 0) {
        ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
        if (r > 0) {
            b += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0)
            return IO_EOF;
        if (errno == EINTR)
            continue;
        if (errno == ECONNRESET)
            return IO_EOF;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return IO_ERR;
        int w = wait_io(fd, POLLIN, bd);
        if (w != IO_OK)
            return w;
    }
    return IO_OK;
}

#if LOCAL_WARM
/** Reads one frame and drops its payload; the first descriptor riding
 *  with it goes to *@passed (close-on-exec; -1 when none came), any other
 *  is closed. On an error nothing is left open. */
static int read_fd_frame(int fd, uint32_t *type, int *passed, const bound *bd)
{
    unsigned char hdr[PROTO_HEADER_SIZE];
    size_t got = 0;
    int r = IO_OK;
    *passed = -1;
    while (got < sizeof(hdr)) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * 4)];
        } ctl;
        struct iovec iov = { hdr + got, sizeof(hdr) - got };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n > 0) {
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                    continue;
                size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                    int f;
                    memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                    if (*passed < 0)
                        *passed = f;
                    else
                        close(f);
                }
            }
            got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || errno == ECONNRESET)
            r = IO_EOF;
        else if (errno != EAGAIN && errno != EWOULDBLOCK)
            r = IO_ERR;
        else
            r = wait_io(fd, POLLIN, bd);
        if (r != IO_OK)
            break;
    }
    uint32_t len = 0;
    if (r == IO_OK && proto_parse_header(hdr, type, &len) < 0) {
        errno = EPROTO;
        r = IO_ERR;
    }
    unsigned char *p = r == IO_OK ? malloc((size_t)len + 1) : NULL;
    if (r == IO_OK)
        r = p ? recv_exact(fd, p, len, bd) : IO_ERR;
    free(p);
    if (r != IO_OK && *passed >= 0) {
        close(*passed);
        *passed = -1;
    }
    return r;
}
#endif

/** Reads one frame; *@payload is malloc'd (NUL-terminated) on IO_OK.
 *  Only the frame's own bytes are consumed. */
static int read_frame(int fd, uint32_t *type, unsigned char **payload, uint32_t *len,
                      const bound *bd)
{
    unsigned char hdr[PROTO_HEADER_SIZE];
    int r = recv_exact(fd, hdr, sizeof(hdr), bd);
    if (r != IO_OK)
        return r;
    if (proto_parse_header(hdr, type, len) < 0) {
        errno = EPROTO;
        return IO_ERR;
    }
    unsigned char *p = malloc((size_t)*len + 1);
    if (!p)
        return IO_ERR;
    bound rest = *bd;
    double frame_end = mono_now() + FRAME_SECS;
    if (frame_end < rest.until)
        rest.until = frame_end;
    r = recv_exact(fd, p, *len, &rest);
    if (r != IO_OK) {
        free(p);
        return r == IO_EOF ? IO_EOF : r;
    }
    p[*len] = '\0';
    *payload = p;
    return IO_OK;
}

/** Maps a failed wait or transfer to an error. */
static sbx_error *io_fail(sbx_error **error, int r, const char *op, const char *id,
                          const char *what)
{
    sbx_error *err;
    switch (r) {
    case IO_TIMEOUT:
        err = fail(error, SBX_ERROR_TIMEOUT, op,
                   "timed out waiting for the supervisor of sandbox %s (%s)", id, what);
        break;
    case IO_CANCEL:
        err = fail(error, SBX_ERROR_TIMEOUT, op, "call cancelled (%s, sandbox %s)", what, id);
        break;
    case IO_EOF:
        err = fail(error, SBX_ERROR_NOT_FOUND, op,
                   "sandbox %s is gone (its supervisor closed the connection during %s)",
                   id, what);
        break;
    default: {
        int e = errno;
        err = fail(error, local_errno_code(e, SBX_ERROR_CONNECTION), op,
                   "cannot talk to the supervisor of sandbox %s (%s): %s", id, what,
                   strerror(e));
        break;
    }
    }
    if (r == IO_TIMEOUT || r == IO_CANCEL)
        set_outcome_unknown(err);
    return err;
}

/**
 * Connects to a sandbox socket. Returns 0 with *@fd set, or an errno:
 * ENOENT / ECONNREFUSED mean the supervisor is gone; ETIMEDOUT / ECANCELED
 * that @bd ran out.
 */
static int connect_sock(const char *path, const bound *bd, int *fd)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(sa.sun_path))
        return ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return errno;
    for (;;) {
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            break;
        int e = errno;
        if (e == EINTR)
            continue;
        if (e == EAGAIN) {
            /* Listen backlog full: the supervisor is busy; try again. */
            struct pollfd p = { .fd = bd->cancel_fd, .events = POLLIN };
            if (bd->cancel_fd >= 0 && poll(&p, 1, 0) > 0) {
                close(s);
                return ECANCELED;
            }
            if (bound_ms(bd) == 0) {
                close(s);
                return ETIMEDOUT;
            }
            sleep_ms(5);
            continue;
        }
        if (e == EINPROGRESS) {
            int r = wait_io(s, POLLOUT, bd);
            socklen_t sl = sizeof(e);
            if (r == IO_OK && getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &sl) == 0 && e == 0)
                break;
            close(s);
            return r == IO_TIMEOUT ? ETIMEDOUT : r == IO_CANCEL ? ECANCELED : e ? e : EIO;
        }
        close(s);
        return e;
    }
    *fd = s;
    return 0;
}

static int gone_errno(int e)
{
    return e == ENOENT || e == ECONNREFUSED || e == ENOTDIR;
}

/** What connect_supervisor returns when the socket's listener is not the
 *  sandbox's supervisor (not an errno: those are positive). */
#define E_PEER (-1)

/**
 * Connects to @sb's socket and checks the peer: SO_PEERCRED must name the
 * recorded supervisor (pid and uid) and that pid must still be the process
 * started at the recorded time. Returns 0 with *@fd set; an errno as
 * connect_sock does; or E_PEER, the listener's credentials in *@peer.
 */
static int connect_supervisor(const struct sbx_plugin_sandbox *sb, const bound *bd, int *fd,
                              struct ucred *peer)
{
    /* It did not answer at resume: not again, for every call (see
     * local_resume). */
    if (sb->unresponsive) {
        *fd = -1;
        return ETIMEDOUT;
    }
    int e = connect_sock(sb->sock, bd, fd);
    if (e)
        return e;
    struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
    socklen_t cl = sizeof(cred);
    if (getsockopt(*fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.pid != sb->sup_pid
        || cred.uid != sb->sup_uid || !local_supervisor_alive((sbx_plugin_sandbox *)sb)) {
        if (peer)
            *peer = cred;
        close(*fd);
        *fd = -1;
        return E_PEER;
    }
    return 0;
}

/** The error for a socket served by another process than the supervisor. */
static sbx_error *peer_fail(sbx_error **error, const char *op,
                            const struct sbx_plugin_sandbox *sb, const struct ucred *peer)
{
    char num[32];
    snprintf(num, sizeof(num), "%d", (int)peer->pid);
    sbx_error *err = fail(error, SBX_ERROR_AUTHENTICATION, op,
                          "the socket of sandbox %s (%s) is served by pid %d (uid %d), not by "
                          "its supervisor (pid %d, uid %u): refusing to use it", sb->id,
                          sb->sock, (int)peer->pid, peer->uid == (uid_t)-1 ? -1 : (int)peer->uid,
                          (int)sb->sup_pid, (unsigned)sb->sup_uid);
    add_context(err, "path", sb->sock);
    add_context(err, "peer_pid", num);
    return err;
}

/** Sends a bodyless request on a fresh, peer-checked connection; returns
 *  the connection (or -1 with *@err an errno or E_PEER, or an IO code in
 *  *@io). */
static int request_simple(const struct sbx_plugin_sandbox *sb, uint32_t type, const bound *bd,
                          int *err, int *io, struct ucred *peer)
{
    int fd;
    *io = IO_OK;
    *err = connect_supervisor(sb, bd, &fd, peer);
    if (*err)
        return -1;
    proto_buf b;
    proto_buf_init(&b, type);
    int r = send_frame(fd, &b, NULL, 0, bd);
    proto_buf_free(&b);
    if (r != IO_OK) {
        *io = r;
        close(fd);
        return -1;
    }
    return fd;
}

/**
 * One bodyless request @type on a fresh, peer-checked connection, with
 * descriptor @fd riding along when >= 0, answered by @answer. Returns 0;
 * -1 with not_found (naming the expiry when the lifetime is over) when the
 * sandbox is gone, else an authentication, timeout or connection error.
 */
static int call_simple(struct sbx_plugin_sandbox *sb, uint32_t type, int fd, uint32_t answer,
                       const sbx_call_ctx *ctx, const char *op, sbx_error **error)
{
    bound bd = make_bound(ctx, PING_SECS);
    struct ucred peer;
    int c = -1;
    int e = connect_supervisor(sb, &bd, &c, &peer);
    int gone = (e == E_PEER && !proto_proc_alive(sb->sup_pid, sb->sup_start))
               || (e > 0 && gone_errno(e));
    if (!e) {
        proto_buf b;
        proto_buf_init(&b, type);
        int io = send_frame(c, &b, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, &bd);
        proto_buf_free(&b);
        uint32_t t = 0, len = 0;
        unsigned char *payload = NULL;
        if (io == IO_OK)
            io = read_frame(c, &t, &payload, &len, &bd);
        free(payload);
        close(c);
        if (io == IO_OK && t == answer)
            return 0;
        if (io == IO_OK) {
            fail(error, SBX_ERROR_CONNECTION, op,
                 "unexpected answer from the supervisor of sandbox %s", sb->id);
            return -1;
        }
        if (io != IO_EOF) {
            io_fail(error, io, op, sb->id, op);
            return -1;
        }
        gone = 1;
    }
    if (gone) {
        if (lifetime_over(sb->expires_at))
            expired_fail(error, op, sb->id, sb->expires_at, sb->lifetime, "");
        else
            fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s no longer exists", sb->id);
    } else if (e == E_PEER) {
        peer_fail(error, op, sb, &peer);
    } else if (e == ETIMEDOUT || e == ECANCELED) {
        io_fail(error, e == ETIMEDOUT ? IO_TIMEOUT : IO_CANCEL, op, sb->id, "connect");
    } else {
        fail(error, local_errno_code(e, SBX_ERROR_CONNECTION), op, "cannot connect to sandbox %s: %s", sb->id,
             strerror(e));
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Files and directories                                                     */
/* ------------------------------------------------------------------------ */

/** Creates @path (exclusive, 0600) holding @text. */
static int write_small_file_at(int dirfd, const char *path, const char *text)
{
    int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    const char *p = text;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            errno = w < 0 ? e : EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return close(fd);
}

static char *join_path(const char *a, const char *b)
{
    char *s;
    size_t la = strlen(a);
    while (la > 1 && a[la - 1] == '/')
        la--;
    if (asprintf(&s, "%.*s%s%s", (int)la, a, (b[0] == '/' || (la == 1 && a[0] == '/')) ? "" : "/",
                 b) < 0)
        return NULL;
    return s;
}

/* ------------------------------------------------------------------------ */
/* Environment                                                               */
/* ------------------------------------------------------------------------ */

/** A growable list of "K=V" strings (owned). */
typedef struct strv {
    char **v;
    size_t n, cap;
} strv;

static void strv_free(strv *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

/** Sets "K=V" (replacing an entry with the same key); skips strings
 *  without '='. */
static int strv_set(strv *s, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq)
        return 0;
    size_t kl = (size_t)(eq - kv) + 1;
    char *copy = strdup(kv);
    if (!copy)
        return -1;
    for (size_t i = 0; i < s->n; i++) {
        if (strncmp(s->v[i], kv, kl) == 0) {
            free(s->v[i]);
            s->v[i] = copy;
            return 0;
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v) {
            free(copy);
            return -1;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = copy;
    return 0;
}

static int strv_setkv(strv *s, const char *key, const char *value)
{
    char *kv;
    if (asprintf(&kv, "%s=%s", key, value) < 0)
        return -1;
    int r = strv_set(s, kv);
    free(kv);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Supervisor start-up                                                       */
/* ------------------------------------------------------------------------ */

#ifndef SBX_BUILD_DIR
#define SBX_BUILD_DIR ""
#endif

/**
 * 1 when this plugin is the file the build tree made (it is loaded from
 * SBX_BUILD_DIR/plugins/local/.libs): it then uses the build tree's
 * supervisor, as the library uses the build tree's plugins (uninstalled
 * use). An installed copy never looks there.
 */
static int plugin_is_uninstalled(void)
{
    char self[PATH_MAX], want[PATH_MAX + 32], real[PATH_MAX], *slash;
    Dl_info info;

    if (!*SBX_BUILD_DIR || !dladdr((void *)&plugin_is_uninstalled, &info) ||
        !info.dli_fname || !realpath(info.dli_fname, self) ||
        (slash = strrchr(self, '/')) == NULL)
        return 0;
    *slash = '\0';
    if ((size_t)snprintf(want, sizeof want, "%s/plugins/local/.libs", SBX_BUILD_DIR) >=
        sizeof want || !realpath(want, real))
        return 0;
    return strcmp(self, real) == 0;
}

/** The supervisor program (copied): $SBX_SUPERVISOR, else the build tree's
 *  when this plugin is the build tree's, else the installed one. */
static char *supervisor_path(void)
{
    const char *p = getenv("SBX_SUPERVISOR");
    char *path;

    if ((!p || !*p) && plugin_is_uninstalled() &&
        asprintf(&path, "%s/plugins/local/sbx-supervisor", SBX_BUILD_DIR) > 0)
        return path;
    return strdup(p && *p ? p : SBX_LIBEXEC_DIR "/sbx-supervisor");
}

static int check_supervisor(const char *path, const char *op, sbx_error **error)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0)
        return 0;
    sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                          "local backend: supervisor program %s is missing or not executable "
                          "(set SBX_SUPERVISOR or reinstall libsbx)", path);
    add_context(err, "path", path);
    return -1;
}

/** A pidfd of @pid (close-on-exec), or -1 with errno set where the kernel
 *  has none (before 5.3) or @pid is gone. */
static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/** Sleeps until @pidfd is readable (its process ended) or @ms passed
 *  (-1: no limit). Returns 1 when it ended, else 0. */
static int pidfd_wait(int pidfd, int ms)
{
    struct pollfd p = { .fd = pidfd, .events = POLLIN };
    int r;
    while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
        ;
    return r > 0;
}

int local_supervisor_alive(sbx_plugin_sandbox *sandbox)
{
    struct sbx_plugin_sandbox *sb = sandbox;
    int fd = __atomic_load_n(&sb->sup_pidfd1, __ATOMIC_ACQUIRE) - 1;
    if (fd < 0) {
        if (sb->sup_pid <= 1)
            return 0;
        fd = pidfd_of(sb->sup_pid);
        /* The pid named the recorded process when the pidfd was taken if
         * /proc says so now and the pidfd's process has not ended since
         * (the poll below): a pid is not reused while its process lives. */
        if (!proto_proc_alive(sb->sup_pid, sb->sup_start)) {
            if (fd >= 0)
                close(fd);
            return 0;
        }
        if (fd < 0)
            return 1;       /* no pidfds here: /proc on every call */
        int none = 0;
        if (!__atomic_compare_exchange_n(&sb->sup_pidfd1, &none, fd + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            close(fd);
            fd = none - 1;
        }
    }
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int r;
    while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    return r == 0;
}

/** Waits (bounded) for our own direct child @pid; returns its status or -1
 *  when it was reaped elsewhere. Sleeps on a pidfd of it (where the kernel
 *  has pidfds; else it looks every millisecond). */
static int reap_child(pid_t pid, const bound *bd)
{
    int status, rc;
    int pidfd = pidfd_of(pid);
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            rc = status;
            break;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -1;    /* SIGCHLD ignored, or reaped by the application */
            break;
        }
        int ms = bound_ms(bd);
        if (ms == 0) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            rc = status;
            break;
        }
        if (pidfd >= 0) {
            pidfd_wait(pidfd, ms);
        } else {
            sleep_ms(1);
        }
    }
    if (pidfd >= 0)
        close(pidfd);
    return rc;
}

/**
 * Binds @sb's socket at sb->sock (mode 0600 in the 0700 meta directory),
 * not listening yet: the supervisor listens, so SO_PEERCRED names it.
 * Returns 0 with the socket in *@sock_fd and an O_PATH descriptor of its
 * file in *@file_fd (both close-on-exec), or -1 with an error.
 */
static int bind_sandbox_socket(const struct sbx_plugin_sandbox *sb, int *sock_fd, int *file_fd,
                               const char *op, sbx_error **error)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    *sock_fd = *file_fd = -1;
    if (strlen(sb->sock) >= sizeof(sa.sun_path)) {
        sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                              "socket path %s is too long (at most %zu bytes)", sb->sock,
                              sizeof(sa.sun_path) - 1);
        add_context(err, "path", sb->sock);
        return -1;
    }
    strcpy(sa.sun_path, sb->sock);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(sb->sock, 0600) < 0) {
        sbx_error *err = fail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op,
                              "cannot bind %s: %s", sb->sock, strerror(errno));
        add_context(err, "path", sb->sock);
        if (s >= 0)
            close(s);
        return -1;
    }
    int f = open(sb->sock, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (f < 0) {
        sbx_error *err = fail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op,
                              "cannot open %s: %s", sb->sock, strerror(errno));
        add_context(err, "path", sb->sock);
        close(s);
        return -1;
    }
    *sock_fd = s;
    *file_fd = f;
    return 0;
}

/**
 * Starts the supervisor of @sb with @env as its base environment, hands it
 * the sandbox's socket (@sock_fds: bound socket, O_PATH of its file) and
 * waits for READY; then identifies it on a first connection (SO_PEERCRED:
 * its pid as seen from here, and the uid it runs as, both recorded in
 * @sb). On failure everything started is killed.
 */
/**
 * Spawns the supervisor @exe with @argv on a new control socketpair and
 * reaps the spawned process (it forks the supervisor and exits at once).
 * Returns 0 with the library's end of the control socket in *@ctl_out, or
 * -1 with an error (nothing left running).
 */
/** The end of start-up log @path (the sandbox's stderr while it starts),
 *  at most 1 KiB, lines joined by "; ", as ": TEXT" for a message; "" when
 *  there is none (a static buffer). */
static const char *log_tail(const char *path)
{
    static __thread char out[1100];
    char buf[1025];
    out[0] = '\0';
    if (!path)
        return out;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return out;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
    close(fd);
    if (n <= 0)
        return out;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    size_t o = 0;
    o += (size_t)snprintf(out, sizeof(out), ": ");
    for (ssize_t i = 0; i < n && o + 3 < sizeof(out); i++) {
        if (buf[i] == '\n') {
            out[o++] = ';';
            out[o++] = ' ';
        } else {
            out[o++] = buf[i];
        }
    }
    out[o] = '\0';
    return n > 0 ? out : "";
}

static int spawn_supervisor(const char *exe, char *const *argv, const bound *bdp, int *ctl_out,
                            const char *log_path, int in_fd, int out_fd, pid_t *unreaped,
                            sbx_error **error)
{
    const char *op = "create";
    bound bd = *bdp;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        fail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op,
             "cannot start the supervisor: socketpair: %s", strerror(errno));
        return -1;
    }
    int child_end = sv[1];
    if (child_end == PROTO_CONTROL_FD) {
        /* dup2 onto itself would keep close-on-exec set. */
        child_end = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
        close(sv[1]);
        if (child_end < 0) {
            fail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op, "fcntl: %s",
                 strerror(errno));
            close(sv[0]);
            return -1;
        }
    }

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    /* The supervisor needs no environment; only sanitizer settings pass,
     * so instrumented builds behave as their test run asks. */
    static const char *const passed[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS" };
    char *envp[sizeof(passed) / sizeof(passed[0]) + 1];
    size_t nenvp = 0;
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
        const char *v = getenv(passed[i]);
        if (v && asprintf(&envp[nenvp], "%s=%s", passed[i], v) >= 0)
            nenvp++;
    }
    envp[nenvp] = NULL;
    pid_t pid = -1;
    int r = posix_spawn_file_actions_init(&fa);
    if (r == 0) {
        r = posix_spawnattr_init(&attr);
        if (r == 0) {
            /* Nothing of the sandbox holds the caller's stdout or stderr
             * open (`id=$(sbx create -b bubblewrap)` returns at once):
             * stderr is META/log, whose end a start-up failure quotes
             * (bwrap's and the supervisor's reasons). */
            r = in_fd >= 0 ? posix_spawn_file_actions_adddup2(&fa, in_fd, 0)
                : posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
            if (r == 0)
                r = out_fd >= 0 ? posix_spawn_file_actions_adddup2(&fa, out_fd, 1)
                    : posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
            if (r == 0)
                r = posix_spawn_file_actions_addopen(&fa, 2, log_path ? log_path : "/dev/null",
                                                     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW,
                                                     0600);
            if (r == 0)
                r = posix_spawn_file_actions_adddup2(&fa, child_end, PROTO_CONTROL_FD);
            if (r == 0)
                r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK
                                             | POSIX_SPAWN_SETSIGDEF);
            if (r == 0)
                r = posix_spawnattr_setsigmask(&attr, &none);
            if (r == 0)
                r = posix_spawnattr_setsigdefault(&attr, &all);
            if (r == 0)
                r = posix_spawn(&pid, exe, &fa, &attr, argv, envp);
            posix_spawnattr_destroy(&attr);
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    close(child_end);
    for (size_t i = 0; i < nenvp; i++)
        free(envp[i]);
    if (r != 0) {
        sbx_error *err = fail(error, local_errno_code(r, SBX_ERROR_CREATION_FAILED), op,
                              "cannot start the supervisor %s: %s", exe, strerror(r));
        add_context(err, "path", exe);
        close(sv[0]);
        return -1;
    }

    if (unreaped) {
        /* The caller reaps it (launcher_go). */
        *unreaped = pid;
        *ctl_out = sv[0];
        return 0;
    }
    /* The spawned process forks the supervisor and exits at once. */
    int status = reap_child(pid, &bd);
    if (status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fail(error, SBX_ERROR_CREATION_FAILED, op, "the supervisor %s failed to start (%s %d)%s",
             exe, WIFEXITED(status) ? "exit status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log_tail(log_path));
        close(sv[0]);
        return -1;
    }
    *ctl_out = sv[0];
    return 0;
}

/** log_tail() of @sb's META/log. */
static const char *start_log(const struct sbx_plugin_sandbox *sb)
{
    char *path = join_path(sb->meta, "log");
    const char *t = log_tail(path);
    free(path);
    return t;
}

/** Sends CLAIM to the warm supervisor on @ctl for @sb; 0, or -1 when it is
 *  gone (the caller starts one cold). */
static int claim_warm(struct sbx_plugin_sandbox *sb, int ctl, const bound *bd)
{
    proto_buf b;
    proto_buf_init(&b, PROTO_CLAIM);
    proto_put_str(&b, sb->meta);
    proto_put_str(&b, !sb->owns_root && sb->tmp ? sb->tmp : "");
    int io = send_frame(ctl, &b, NULL, 0, bd);
    proto_buf_free(&b);
    return io == IO_OK ? 0 : -1;
}

/**
 * Makes @sb's root (when it owns it) and the root's tmp/ (made_tmp tells
 * whether this call made it; an existing directory is used). Returns 0, or
 * -1 with a creation_failed error naming the path; what it made is removed
 * with the meta directory.
 */
static int make_root_dirs(struct sbx_plugin_sandbox *sb, const char *op, sbx_error **error)
{
    if (sb->owns_root && mkdir(sb->root, 0700) < 0) {
        sbx_error *err = fail(error, SBX_ERROR_CREATION_FAILED, op, "cannot create %s: %s",
                              sb->root, strerror(errno));
        add_context(err, "path", sb->root);
        return -1;
    }
    if (mkdir(sb->tmp, 0700) == 0) {
        sb->made_tmp = 1;
        return 0;
    }
    struct stat st;
    if (errno != EEXIST || stat(sb->tmp, &st) < 0 || !S_ISDIR(st.st_mode)) {
        sbx_error *err = fail(error, SBX_ERROR_CREATION_FAILED, op, "cannot create %s: %s",
                              sb->tmp, errno == EEXIST ? "exists and is not a directory"
                              : strerror(errno));
        add_context(err, "path", sb->tmp);
        return -1;
    }
    sb->made_tmp = 0;
    return 0;
}

static char *record_json(const struct sbx_plugin_sandbox *sb);

/**
 * Writes @sb's record (meta/record, described at the top; mode 0600, a new
 * file: @replace removes an existing one first), through the meta
 * directory's descriptor @dirfd (AT_FDCWD: by its path). Returns 0, or -1 with a
 * creation_failed (or resource_exhausted) error naming the meta directory.
 */
static int write_record(struct sbx_plugin_sandbox *sb, int replace, int dirfd, const char *op,
                        sbx_error **error)
{
    char *recfile = dirfd == AT_FDCWD ? join_path(sb->meta, "record") : strdup("record");
    char *rec = recfile ? record_json(sb) : NULL;
    if (!rec) {
        free(recfile);
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    if (replace && unlinkat(dirfd, recfile, 0) < 0 && errno != ENOENT)
        replace = -1;
    int wr = replace < 0 ? -1 : write_small_file_at(dirfd, recfile, rec);
    free(rec);
    free(recfile);
    if (wr < 0) {
        int e = errno;
        sbx_error *err = fail(error, local_errno_code(e, SBX_ERROR_CREATION_FAILED), op,
                              "cannot write the record file in %s: %s", sb->meta,
                              strerror(e));
        add_context(err, "path", sb->meta);
        return -1;
    }
    return 0;
}

#ifndef SBX_LOCAL_BUBBLEWRAP
/**
 * Cold start of plain local: spawns @exe with `--sandbox-dir=` @sb->meta,
 * a template ending in XXXXXX that the supervisor makes (mkdtemp, before
 * its keeper forks it, so that no moment exists at which the directory is
 * there and nothing would remove it, whenever this process dies), with
 * `--remove=` @remove (may be NULL: the tmp/ of a caller's workdir, which
 * it makes then too when missing); reads its HELLO and checks it: this
 * protocol, a pid, and the directory it made, in the template's parent
 * under the template's prefix, of this user and nobody else's. Then
 * sb->meta is that directory, sup_pid and sup_start the supervisor's, and
 * sb->made_tmp says whether it made @remove.
 * Returns 0 with the control socket in *@ctl_out (CONFIG goes next), or -1
 * with an error and nothing left running or on disk.
 */
static int spawn_cold(struct sbx_plugin_sandbox *sb, const char *exe, const char *remove,
                      const bound *bd, int *ctl_out, sbx_error **error)
{
    const char *op = "create";
    char *dir_arg = NULL, *rm_arg = NULL;
    if (asprintf(&dir_arg, "--sandbox-dir=%s", sb->meta) < 0
        || (remove && asprintf(&rm_arg, "--remove=%s", remove) < 0)) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        free(dir_arg);
        return -1;
    }
    char *argv[] = { (char *)exe, "--control-fd=3", dir_arg, rm_arg, NULL };
    int ctl = -1;
    int r = spawn_supervisor(exe, argv, bd, &ctl, NULL, -1, -1, NULL, error);
    free(dir_arg);
    free(rm_arg);
    if (r < 0)
        return -1;
    uint32_t type = 0, len = 0;
    unsigned char *payload = NULL;
    int io = read_frame(ctl, &type, &payload, &len, bd);
    proto_reader rd;
    proto_reader_init(&rd, payload, len);
    if (io == IO_OK && type == PROTO_ERROR) {
        /* It could not make the directory in its parent, or @remove. */
        proto_get_u32(&rd);
        proto_get_i32(&rd);
        const char *msg = proto_get_str(&rd);
        sbx_error *err = fail(error, SBX_ERROR_CREATION_FAILED, op, "%s",
                              msg ? msg : "the supervisor failed to start");
        char *slash = strrchr(sb->meta, '/');
        if (remove && msg && strstr(msg, remove)) {
            add_context(err, "path", remove);
        } else if (slash) {
            *slash = '\0';
            add_context(err, "path", sb->meta);
            *slash = '/';
        }
        free(payload);
        close(ctl);
        return -1;
    }
    if (io != IO_OK || type != PROTO_HELLO) {
        if (io == IO_OK)
            fail(error, SBX_ERROR_CREATION_FAILED, op, "%s is not an sbx-supervisor", exe);
        else if (io == IO_EOF)
            fail(error, SBX_ERROR_CREATION_FAILED, op,
                 "the supervisor %s exited during start-up", exe);
        else if (io == IO_TIMEOUT || io == IO_CANCEL)
            fail(error, SBX_ERROR_TIMEOUT, op, io == IO_TIMEOUT
                 ? "timed out waiting for the supervisor %s to start"
                 : "call cancelled (the supervisor %s starting)", exe);
        else
            fail(error, local_errno_code(errno, SBX_ERROR_CONNECTION), op,
                 "cannot talk to the supervisor %s starting: %s", exe, strerror(errno));
        free(payload);
        close(ctl);
        return -1;
    }
    uint32_t version = proto_get_u32(&rd);
    pid_t pid = proto_get_i32(&rd);
    uint64_t start = proto_get_u64(&rd);
    const char *dir = proto_get_str(&rd);
    uint32_t made_remove = proto_get_u32(&rd);
    const char *slash = strrchr(sb->meta, '/');
    size_t pl = (size_t)(slash - sb->meta) + 1 + strlen(ID_PREFIX);
    int ok = !rd.failed && version == PROTO_VERSION && pid > 1 && dir
             && strlen(dir) == strlen(sb->meta) && strncmp(dir, sb->meta, pl) == 0
             && !strchr(dir + pl, '/');
    char *made = ok ? strdup(dir) : NULL;
    free(payload);
    struct stat st;
    int dfd = made ? open(made, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    ok = dfd >= 0 && fstat(dfd, &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & 077);
    if (dfd >= 0)
        close(dfd);
    if (!ok) {
        /* Its keeper removes what it made once it ends. */
        if (pid > 1 && proto_proc_alive(pid, start))
            kill(pid, SIGKILL);
        fail(error, rd.failed || version != PROTO_VERSION ? SBX_ERROR_CONFIGURATION
                    : SBX_ERROR_CREATION_FAILED, op,
             rd.failed || version != PROTO_VERSION
             ? "the supervisor %s speaks protocol %u, this plugin %u (mixed installations?)"
             : "the supervisor %s made no sandbox directory of this user in its place "
               "(protocol %u, this plugin %u)",
             exe, rd.failed ? 0u : version, PROTO_VERSION);
        free(made);
        close(ctl);
        return -1;
    }
    free(sb->meta);
    sb->meta = made;
    sb->sup_pid = pid;
    sb->sup_start = start;
    sb->made_tmp = remove && made_remove == 1;
    *ctl_out = ctl;
    return 0;
}
#endif

#ifdef SBX_LOCAL_BUBBLEWRAP
/* The bubblewrap launcher (`--launch --keep=META --make-keep`, bwrap.c's
 * bwrap_argv) is started before anything of the sandbox is on disk: it
 * makes META and forks its keeper, says so (a byte on its stdout), and
 * its sandbox's process waits for the library's go (a byte on its stdin)
 * while the library makes the rest; should this process die meanwhile, the
 * go pipe's EOF ends that process and the keeper removes everything. */
typedef struct launcher {
    pid_t pid;      /* the launcher (reaped by launcher_go / _abort), or -1 */
    int ctl;        /* the library's end of the control socket */
    int go;         /* the write end of the launcher's stdin */
} launcher;

/** Writes 6 random characters of mkdtemp's alphabet over the XXXXXX that
 *  ends @tmpl. 0, or -1 (errno). */
static int fill_template(char *tmpl)
{
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[6];
    size_t n = strlen(tmpl);
    if (n < 6 || strcmp(tmpl + n - 6, "XXXXXX") != 0) {
        errno = EINVAL;
        return -1;
    }
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return -1;
    for (size_t i = 0; i < 6; i++)
        tmpl[n - 6 + i] = chars[rnd[i] % (sizeof(chars) - 1)];
    return 0;
}

/** Reaps launcher @l (bounded by @bd), closing what the library holds of
 *  it: its exit status, or -1. */
static int launcher_reap(launcher *l, const bound *bd)
{
    if (l->go >= 0)
        close(l->go);
    l->go = -1;
    int status = l->pid > 0 ? reap_child(l->pid, bd) : -1;
    l->pid = -1;
    return status;
}

/** Ends a launcher that was not told to go: its sandbox's process sees EOF
 *  and exits, its keeper removes META and the rest (waited for, at most
 *  GONE_SECS, for the launcher only). */
static void launcher_abort(launcher *l)
{
    bound gone = make_bound(NULL, GONE_SECS);
    if (l->ctl >= 0)
        close(l->ctl);
    l->ctl = -1;
    launcher_reap(l, &gone);
}

/**
 * Starts the launcher with @argv (META is sb->meta, which it makes, and
 * the tmp/ of a caller's root_dir when missing: sb->made_tmp says whether
 * it did) and waits (bounded by @ctx) until its keeper runs. 0 with *@l
 * filled, or -1
 * with an error and nothing left; when META exists already, -1 with
 * *@exists set and no error (the caller names another).
 */
static int launcher_start(struct sbx_plugin_sandbox *sb, const char *exe, char *const *argv,
                          const sbx_call_ctx *ctx, launcher *l, int *exists, sbx_error **error)
{
    const char *op = "create";
    bound bd = make_bound(ctx, HANDSHAKE_SECS);
    int in[2], out[2];
    *l = (launcher){ .pid = -1, .ctl = -1, .go = -1 };
    *exists = 0;
    if (pipe2(in, O_CLOEXEC) < 0) {
        fail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op,
             "cannot start the supervisor: pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) < 0) {
        fail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op,
             "cannot start the supervisor: pipe: %s", strerror(errno));
        close(in[0]);
        close(in[1]);
        return -1;
    }
    int r = spawn_supervisor(exe, argv, &bd, &l->ctl, NULL, in[0], out[1], &l->pid, error);
    close(in[0]);
    close(out[1]);
    l->go = in[1];
    if (r < 0) {
        close(out[0]);
        close(l->go);
        l->go = -1;
        return -1;
    }
    unsigned char ready = 0;
    ssize_t n = -1;
    int io = wait_io(out[0], POLLIN, &bd);
    if (io == IO_OK)
        while ((n = read(out[0], &ready, 1)) < 0 && errno == EINTR)
            ;
    close(out[0]);
    if (n == 1 && (ready == 'R' || ready == 'M')) {
        sb->made_tmp = ready == 'M';
        return 0;
    }
    int status = -1;
    if (n == 0) {
        /* It ended first: its status says why. */
        status = launcher_reap(l, &bd);
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == PROTO_EXIT_EXISTS) {
            close(l->ctl);
            l->ctl = -1;
            *exists = 1;
            return -1;
        }
    }
    if (n == 0 && status != -1)
        fail(error, SBX_ERROR_CREATION_FAILED, op, "the supervisor %s failed to start (%s %d)",
             exe, WIFEXITED(status) ? "exit status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    else if (n == 0 || n == 1)
        fail(error, SBX_ERROR_CREATION_FAILED, op, "the supervisor %s failed to start", exe);
    else
        io_fail(error, io == IO_OK ? IO_ERR : io, op, sb->id, "supervisor start-up");
    launcher_abort(l);
    return -1;
}

/** Tells launcher @l to start the sandbox's process and reaps it (it exits
 *  once bwrap runs). 0 with the control socket left in l->ctl, or -1 with
 *  an error quoting META/log (its keeper removes what was made). */
static int launcher_go(launcher *l, struct sbx_plugin_sandbox *sb, const char *exe,
                       const sbx_call_ctx *ctx, sbx_error **error)
{
    const char *op = "create";
    bound bd = make_bound(ctx, HANDSHAKE_SECS);
    unsigned char go = 'G';
    ssize_t n;
    while ((n = write(l->go, &go, 1)) < 0 && errno == EINTR)
        ;
    int status = launcher_reap(l, &bd);
    if (status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fail(error, SBX_ERROR_CREATION_FAILED, op, "the supervisor %s failed to start (%s %d)%s",
             exe, WIFEXITED(status) ? "exit status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), start_log(sb));
        launcher_abort(l);
        return -1;
    }
    return 0;
}
#endif

/**
 * Starts @sb's supervisor and handshakes: with the client's warm one
 * @warm (warm->ctl >= 0; its socket taken and closed here; sb->meta is the
 * name its directory gets), CLAIM and CONFIG, then READY; else on the
 * control socket @cold_ctl of a supervisor started cold (taken and closed
 * here): plain local's spawn_cold read its HELLO, bubblewrap's HELLO is
 * read here; then CONFIG (with @sock_fds), READY. @late (a root of its own,
 * plain local): the record (and, cold, the root and its tmp/) is made
 * here, while the supervisor applies CONFIG (which never looks at the
 * root), with sup_uid taken to be this process's euid, or the warm one's
 * listener's (create writes the record again should the listener be of
 * another uid). Returns 0, or -1 with an error and nothing left running.
 */
static int wait_supervisor_gone(struct sbx_plugin_sandbox *sb, double secs);

static int start_supervisor(struct sbx_plugin_sandbox *sb, const char *exe, const strv *env,
                            const int sock_fds[2], int detached,
                            int late, warm_sup *warm, int cold_ctl, const sbx_call_ctx *ctx,
                            sbx_error **error)
{
    const char *op = "create";
    bound bd = make_bound(ctx, HANDSHAKE_SECS);
    int ctl = -1;
    uint32_t type, len;
    unsigned char *payload = NULL;
    int io;

    int spare = warm->ctl >= 0;
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* A claimed warm sandbox's init said HELLO when it was made. */
    int hello_read = spare || sb->spare_hello;
#else
    /* Spawned and its HELLO read (spawn_cold): CONFIG goes next. */
    int hello_read = spare || cold_ctl >= 0;
#endif
    if (spare) {
        /* Its directory becomes sb->meta: what was made ahead is used. */
        ctl = warm->ctl;
        warm->ctl = -1;
        sb->sup_pid = warm->pid;
        sb->sup_start = warm->start;
        /* Its listener's uid, checked when it was made: every connection
         * checks it (a caller's workdir, not late, sets it nowhere else). */
        sb->sup_uid = warm->uid;
        if (claim_warm(sb, ctl, &bd) < 0) {
            fail(error, SBX_ERROR_CREATION_FAILED, op,
                 "the warm supervisor %s (pid %d) is gone", exe, (int)warm->pid);
            close(ctl);
            return -1;
        }
    }
    if (hello_read) {
        if (!spare)
            ctl = cold_ctl;
        type = PROTO_HELLO;
        io = IO_OK;
    } else {
        /* bubblewrap: the launcher started (launcher_start, _go); its
         * supervisor, the sandbox's init, says HELLO now. */
        ctl = cold_ctl;
        io = read_frame(ctl, &type, &payload, &len, &bd);
    }
    if (hello_read) {
        /* HELLO was read and checked when it was made (warm_check,
         * spawn_cold). */
    } else if (io != IO_OK || type != PROTO_HELLO) {
        if (io == IO_OK)
            fail(error, SBX_ERROR_CREATION_FAILED, op, "%s is not an sbx-supervisor", exe);
        else if (io == IO_EOF)
            fail(error, SBX_ERROR_CREATION_FAILED, op,
                 "the supervisor %s exited during start-up%s", exe, start_log(sb));
        else
            io_fail(error, io, op, sb->id, "supervisor start-up");
        free(payload);
        close(ctl);
        return -1;
    }
    proto_reader rd;
    proto_reader_init(&rd, payload, len);
    uint32_t version = hello_read ? PROTO_VERSION : proto_get_u32(&rd);
    if (!hello_read) {
        sb->sup_pid = proto_get_i32(&rd);
        sb->sup_start = proto_get_u64(&rd);
    }
    free(payload);
    payload = NULL;
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* pid 1 of the sandbox's namespace: its host pid comes after READY. */
    int ns_init = !rd.failed && sb->sup_pid == 1;
    if (ns_init)
        sb->sup_pid = 0;
#else
    int ns_init = 0;
#endif
    if (rd.failed || version != PROTO_VERSION || (sb->sup_pid <= 1 && !ns_init)) {
        if (!rd.failed && sb->sup_pid > 1 && proto_proc_alive(sb->sup_pid, sb->sup_start))
            kill(sb->sup_pid, SIGKILL);
        fail(error, SBX_ERROR_CONFIGURATION, op,
             "the supervisor %s speaks protocol %u, this plugin %u (mixed installations?)",
             exe, rd.failed ? 0u : version, PROTO_VERSION);
        close(ctl);
        return -1;
    }

    /* An attached sandbox's owner is this process (the application in
     * process, its plugin host out of process): the supervisor ends the
     * sandbox when it is gone. */
    /* A warm supervisor listens on its own socket: only the pidfd goes. */
    int cfg_fds[PROTO_CONFIG_FDS_MAX] = { sock_fds[0], sock_fds[1], -1 };
    int n_socks = spare ? 0 : PROTO_CONFIG_FDS;
    if (!detached && (cfg_fds[n_socks] = owner_pidfd()) < 0) {
        int e = errno;
        fail(error, local_errno_code(e, SBX_ERROR_CREATION_FAILED), op,
             "no pidfd of the owning process: %s", strerror(e));
        close(ctl);
        if (sb->sup_pid > 1 && proto_proc_alive(sb->sup_pid, sb->sup_start))
            kill(sb->sup_pid, SIGKILL);
        return -1;
    }
    proto_buf b;
    proto_buf_init(&b, PROTO_CONFIG);
    proto_put_str(&b, sb->root);
    proto_put_u32(&b, (uint32_t)env->n);
    for (size_t i = 0; i < env->n; i++)
        proto_put_str(&b, env->v[i]);
    proto_put_u64(&b, (uint64_t)llround(sb->lifetime * 1000.0));
    proto_put_u32(&b, detached ? 1u : 0u);
    /* The supervisor counts the lifetime from READY, after this: the
     * expiry told to callers is never later than the real one. */
    if (sb->lifetime > 0)
        sb->expires_at = wall_now() + sb->lifetime;
    io = send_frame(ctl, &b, cfg_fds, n_socks + !detached, &bd);
    proto_buf_free(&b);
    if (!detached)
        close(cfg_fds[n_socks]);
    if (io == IO_OK && late) {
        /* A spare's directory is renamed while this runs: its record goes
         * in through the descriptor. */
        sb->sup_uid = spare ? warm->uid : geteuid();
        if ((!spare && make_root_dirs(sb, op, error) < 0)
            || write_record(sb, 0, spare ? warm->dirfd : AT_FDCWD, op, error) < 0) {
            close(ctl);
            if (sb->sup_pid > 1 && proto_proc_alive(sb->sup_pid, sb->sup_start))
                kill(sb->sup_pid, SIGKILL);
            return -1;
        }
    }
    /* A supervisor that refused (a claimed spare that cannot make the tmp/
     * of a caller's workdir sends ERROR and exits) may be gone before
     * CONFIG went out: its answer still waits on the socket. */
    if (io == IO_OK || io == IO_EOF)
        io = read_frame(ctl, &type, &payload, &len, &bd);
    close(ctl);
    if (io == IO_OK && type == PROTO_READY && spare) {
        /* Who listens was checked when the spare was made. Whether it
         * made the tmp/ of a caller's workdir: */
        proto_reader_init(&rd, payload, len);
        uint32_t made = proto_get_u32(&rd);
        if (!sb->owns_root)
            sb->made_tmp = !rd.failed && made == 1;
        free(payload);
        return 0;
    }
    if (io == IO_OK && type == PROTO_READY && ns_init && sb->spare_pid > 1) {
        /* A claimed warm sandbox's init, known by its HELLO's credentials
         * (bw_spare_make); it listens on the socket from CONFIG on, and
         * every connection checks that (SO_PEERCRED). */
        free(payload);
        sb->sup_pid = sb->spare_pid;
        sb->sup_start = sb->spare_start;
        sb->sup_uid = sb->spare_uid;
        return 0;
    }
    if (io == IO_OK && type == PROTO_READY) {
        free(payload);
        /* Who listens: the kernel translates the listener's credentials
         * into our pid and user namespaces (bubblewrap: the supervisor's
         * host pid, pid 1 inside). Nobody else can have touched the socket
         * yet: this library bound it in its 0700 directory. */
        int fd = -1, e = connect_sock(sb->sock, &bd, &fd);
        struct ucred cred = { 0 };
        socklen_t cl = sizeof(cred);
        proto_proc self;
        if (e == 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
            e = errno;
        if (e == 0 && (cred.pid <= 1 || (!ns_init && cred.pid != sb->sup_pid)
                       || proto_proc_stat(cred.pid, &self) < 0
                       || (!ns_init && self.start != sb->sup_start)))
            e = ESRCH;
        if (fd >= 0)
            close(fd);
        if (e == 0) {
            sb->sup_pid = cred.pid;
            sb->sup_start = self.start;
            sb->sup_uid = cred.uid;
            return 0;
        }
        fail(error, SBX_ERROR_CREATION_FAILED, op,
             "cannot identify the supervisor of sandbox %s (its socket's listener is pid %d, "
             "the supervisor said pid %d): %s", sb->id, (int)cred.pid, (int)sb->sup_pid,
             strerror(e));
        if (!ns_init) {
            if (proto_proc_alive(sb->sup_pid, sb->sup_start))
                kill(sb->sup_pid, SIGKILL);
            return -1;
        }
        /* Its host pid is unknown: ask it to end (it is this library's
         * socket, in its own directory). */
        bound gone = make_bound(NULL, GONE_SECS);
        if (connect_sock(sb->sock, &gone, &fd) == 0) {
            proto_buf_init(&b, PROTO_DESTROY);
            if (send_frame(fd, &b, NULL, 0, &gone) == IO_OK) {
                uint32_t t, l;
                unsigned char *p = NULL;
                if (read_frame(fd, &t, &p, &l, &gone) == IO_OK)
                    free(p);
            }
            proto_buf_free(&b);
            close(fd);
        }
        return -1;
    }

    if (io == IO_OK && type == PROTO_ERROR) {
        proto_reader_init(&rd, payload, len);
        proto_get_u32(&rd);
        proto_get_i32(&rd);
        const char *msg = proto_get_str(&rd);
        fail(error, SBX_ERROR_CREATION_FAILED, op, "supervisor: %s", msg ? msg : "failed");
    } else if (io == IO_OK) {
        fail(error, SBX_ERROR_CREATION_FAILED, op, "unexpected answer from the supervisor");
    } else if (io == IO_EOF) {
        fail(error, SBX_ERROR_CREATION_FAILED, op,
             "the supervisor %s exited during start-up%s", exe, start_log(sb));
    } else {
        io_fail(error, io, op, sb->id, "supervisor start-up");
    }
    free(payload);
    /* A claimed spare may be making the tmp/ of a caller's workdir, which
     * its keeper hears of just after: its control socket closed, it ends
     * on its own and its keeper removes that too. Killed when it does
     * not. */
    if (sb->sup_pid > 1 && proto_proc_alive(sb->sup_pid, sb->sup_start)
        && (!spare || wait_supervisor_gone(sb, GONE_SECS) < 0))
        kill(sb->sup_pid, SIGKILL);
    return -1;
}

/** Lets go of spare @w (nothing when w->ctl is -1): its control socket
 *  closed, it exits and its keeper removes its directory; with @now, that
 *  directory is removed here as well, before this returns. */
static void warm_drop(warm_sup *w, int now)
{
    int had = w->ctl >= 0;
    if (had)
        close(w->ctl);
    if (w->dirfd >= 0)
        close(w->dirfd);
    if (w->has_socks) {
        close(w->socks[0]);
        close(w->socks[1]);
    }
    if (had && now && w->dir)
        proto_rm_tree(w->dir);
    free(w->dir);
    free(w->bwrap);
    free(w->exe);
    free(w->base);
    *w = (warm_sup){ .ctl = -1, .dirfd = -1 };
}

/*
 * The warm supervisor (plain local). After each create that started a
 * supervisor, a thread of the client starts the next one ahead
 * (`--warm`): forked from the client's spawner, it makes everything of a
 * sandbox that does not depend on the request (its meta directory under a
 * spare's name, the root and its tmp/, the socket bound and listening;
 * proto.h) and waits for CLAIM; the thread checks who listens on that
 * socket. The next create takes it: CLAIM and CONFIG in one go, the record
 * written while the supervisor renames its directory to the sandbox's,
 * then READY; no directory, socket or connection is made on the way. A
 * warm supervisor lives as long as its control socket: it ends when the
 * client is freed or the process holding it dies, and its keeper removes
 * its directory (client_free removes it too, before it returns). One per
 * client, and one more kept ready by the client's spawner (below); it is
 * used only when the supervisor program ($SBX_SUPERVISOR) and the
 * temporary directory are still the same.
 */
#if LOCAL_WARM
/* The warm supervisors come from the client's warm spawner
 * (`--warm`), spawned at the first fill and asked for each next one (FORK,
 * proto.h): a fork of that loaded process instead of a spawn, an exec and
 * the dynamic loading of the program, so that the fill, which runs while
 * the new sandbox's first exec does, takes little of the CPU from it. The
 * spawner keeps one more warm supervisor ready, made as it answers each
 * FORK: so a fill answers at once, and a create right after a destroy (a
 * loop over one client) takes a spare made ahead instead of waiting for
 * the fork and the directory work of the next one, which then run beside
 * it (bench/README.md, lifecycle: the back-to-back row). The spawner lives
 * as long as its control socket, as a warm supervisor does; closed, it
 * removes its ready one first. */

/** Closes the client's warm spawner: at EOF it lets the warm supervisor it
 *  keeps ready go and exits once that one's keeper has removed its
 *  directory; this waits for that (the spawner's end of the socket
 *  closing, at most GONE_SECS), so that nothing it made is left when this
 *  returns. */
static void spawner_close(struct sbx_plugin_client *c)
{
    if (c->spawner_ctl >= 0) {
        bound bd = make_bound(NULL, GONE_SECS);
        char buf[256];
        shutdown(c->spawner_ctl, SHUT_WR);
        /* Anything it still says is of no use now: read to its EOF. */
        while (wait_io(c->spawner_ctl, POLLIN, &bd) == IO_OK) {
            ssize_t n = recv(c->spawner_ctl, buf, sizeof buf, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                break;
        }
        close(c->spawner_ctl);
    }
    c->spawner_ctl = -1;
    free(c->spawner_exe);
    c->spawner_exe = NULL;
}

/** A new warm supervisor of @exe, its directory in @base, from the
 *  client's warm spawner, which is spawned first when there is none, it is
 *  gone or it runs another program: the library's end of its control
 *  socket, or -1 (nothing left running). Called by the filling thread
 *  only. */
static int spawner_fork(struct sbx_plugin_client *c, const char *exe, const char *base,
                        const bound *bd)
{
    char pad[PROTO_WARM_PAD + 1];
    memset(pad, ' ', PROTO_WARM_PAD);
    pad[PROTO_WARM_PAD] = '\0';
    char *argv[] = { (char *)exe, "--control-fd=3", "--warm", pad, NULL };
    /* A spawner found gone is replaced once. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (c->spawner_ctl >= 0 && strcmp(c->spawner_exe, exe) != 0)
            spawner_close(c);
        if (c->spawner_ctl < 0) {
            int sctl = -1;
            if (spawn_supervisor(exe, argv, bd, &sctl, NULL, -1, -1, NULL, NULL) < 0)
                return -1;
            c->spawner_exe = strdup(exe);
            if (!c->spawner_exe) {
                close(sctl);
                return -1;
            }
            c->spawner_ctl = sctl;
        }
        proto_buf b;
        proto_buf_init(&b, PROTO_FORK);
        proto_put_str(&b, base);
        int io = send_frame(c->spawner_ctl, &b, NULL, 0, bd);
        proto_buf_free(&b);
        uint32_t type = 0;
        int fd = -1;
        if (io == IO_OK)
            io = read_fd_frame(c->spawner_ctl, &type, &fd, bd);
        if (io == IO_OK && type == PROTO_FORKED && fd >= 0)
            return fd;
        if (fd >= 0)
            close(fd);
        spawner_close(c);
        if (io == IO_TIMEOUT || io == IO_CANCEL)
            return -1;
    }
    return -1;
}

/**
 * Reads the HELLO of the new warm supervisor on @ctl (taken: kept in *@w,
 * or closed) and checks it: this protocol, its directory a spare's in
 * @base, of this user and nobody else's, and its socket's listener the
 * process that said HELLO. 0, or -1 (nothing kept).
 */
static int warm_check(int ctl, const char *base, warm_sup *w, const bound *bd)
{
    uint32_t type = 0, len = 0;
    unsigned char *hello = NULL;
    *w = (warm_sup){ .ctl = ctl, .dirfd = -1 };
    if (read_frame(ctl, &type, &hello, &len, bd) != IO_OK || type != PROTO_HELLO) {
        free(hello);
        warm_drop(w, 0);
        return -1;
    }
    proto_reader rd;
    proto_reader_init(&rd, hello, len);
    uint32_t version = proto_get_u32(&rd);
    w->pid = proto_get_i32(&rd);
    w->start = proto_get_u64(&rd);
    const char *dir = proto_get_str(&rd);
    size_t bl = strlen(base);
    int ok = !rd.failed && version == PROTO_VERSION && w->pid > 1 && dir
             && strncmp(dir, base, bl) == 0 && dir[bl] == '/'
             && strncmp(dir + bl + 1, PROTO_SPARE_PREFIX, strlen(PROTO_SPARE_PREFIX)) == 0
             && !strchr(dir + bl + 1, '/') && (w->dir = strdup(dir)) != NULL;
    free(hello);
    struct stat st;
    if (ok) {
        w->dirfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        ok = w->dirfd >= 0 && fstat(w->dirfd, &st) == 0 && st.st_uid == geteuid()
             && !(st.st_mode & 077);
    }
    char *sock = ok ? join_path(w->dir, "sock") : NULL;
    int fd = -1;
    struct ucred cred = { 0 };
    socklen_t cl = sizeof(cred);
    ok = sock && connect_sock(sock, bd, &fd) == 0
         && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && cred.pid == w->pid;
    free(sock);
    if (fd >= 0)
        close(fd);
    if (!ok) {
        warm_drop(w, 0);
        return -1;
    }
    w->uid = cred.uid;
    return 0;
}

#endif

#ifdef SBX_LOCAL_BUBBLEWRAP
/*
 * The warm sandbox (bubblewrap). After a create of the plain
 * configuration (no image, limits, user, root_dir, workdir, ro_binds or
 * backend options, and the host's network), a thread of the client makes
 * the next one ahead, as plain local makes its warm supervisor: the
 * launcher (launcher_start) makes BASE/PROTO_SPARE_PREFIX XXXXXX as META,
 * with its keeper ready; the root, its tmp/ and the overlay's directories
 * are made in it (bwrap_prepare_dirs), the sandbox's socket META/sock is
 * bound and listening (so that a sweep sees the spare alive: it is
 * this client's until CONFIG hands it over), and bwrap runs with its init
 * (`--init --spare=ID`), whose HELLO is read; that init waits for CONFIG
 * for as long as its control socket is open. None of its processes'
 * command lines, descriptors or environments names META meanwhile
 * (bwrap_argv's spare_id), so that it is nobody's to see but its
 * client's. Everything of bwrap_argv's
 * cold start is there: the same namespaces, seccomp filter, uid 65534 as
 * root, and the overlay at META/mnt with its layers named relative to
 * META.
 *
 * A create of the plain configuration takes it: it renames META to the
 * sandbox's (ID_PREFIX and the spare's six characters; never over an
 * existing directory), then CONFIG with the socket, READY and the check of
 * who listens, as a cold start. The rename changes nothing the sandbox
 * sees: the overlay was mounted (in the launcher's mount namespace) and
 * bwrap bound META/mnt as "/" by the directories, not by their names, and
 * the launcher's keeper follows META by its inode (keeper_follow in
 * supervisor.c: as made, as claimed, or either's trash name). Unclaimed, it ends when its control socket closes:
 * client_free (which removes its directory before returning), or the
 * process holding the client gone, SIGKILL included (the init sees EOF and
 * exits, bwrap with it, and the keeper removes META); a spare left with
 * neither (its keeper killed too) is removed by the next client's sweep or
 * `sbx gc` (proto_sweep_trash: nothing listens on its socket).
 *
 * A client keeps two (SPARES_MAX): each plain create takes the oldest
 * ready one and asks for as many as make two again, made one after the
 * other once that create's sandbox is destroyed (its gate). With one, a
 * create right after the destroy before it found the fill that destroy
 * let start still running, and started cold: every other create of such a
 * loop was cold. With two, the second is taken then while the first is
 * made. Each has its own launcher, keeper and control socket, and ends as
 * one alone does.
 */
static void sandbox_free_fields(struct sbx_plugin_sandbox *sb);

/**
 * Makes a warm sandbox of client @c for supervisor @exe with its directory
 * in @base into *@w (ctl, dir, dirfd, socks, bwrap), setting c->fill_late
 * once its bwrap runs. 0, or -1 with nothing left (its keeper removes
 * what was made). Called by the filling thread only.
 */
static int bw_spare_make(struct sbx_plugin_client *c, const char *exe, const char *base,
                         warm_sup *w)
{
    const char *op = "create";
    struct sbx_plugin_sandbox s = { 0 };
    launcher lch = { .pid = -1, .ctl = -1, .go = -1 };
    char **argv = NULL;
    char *bwrap = NULL;
    int made = 0, socks[2] = { -1, -1 }, rc = -1;
    *w = (warm_sup){ .ctl = -1, .dirfd = -1 };
    bwrap = bwrap_find(op, NULL);
    if (!bwrap || asprintf(&s.meta, "%s/" PROTO_SPARE_PREFIX "XXXXXX", base) < 0) {
        s.meta = NULL;
        goto out;
    }
    if (fill_template(s.meta) < 0)
        goto out;
    s.owns_root = 1;
    s.id = strdup(strrchr(s.meta, '/') + 1);
    s.root = join_path(s.meta, "root");
    s.tmp = s.root ? join_path(s.root, "tmp") : NULL;
    s.sock = join_path(s.meta, "sock");
    if (!s.id || !s.root || !s.tmp || !s.sock
        || bwrap_check_reach(s.meta, "the temporary directory", op, NULL) < 0
        || bwrap_check_reach(exe, "the supervisor", op, NULL) < 0
        || bwrap_check_reach(bwrap, "the bwrap program", op, NULL) < 0)
        goto out;
    char *claim_id = NULL;
    if (asprintf(&claim_id, ID_PREFIX "%s", s.id + strlen(PROTO_SPARE_PREFIX)) < 0)
        goto out;
    argv = bwrap_argv(exe, NULL, 0, bwrap, exe, s.root, s.meta, "/", NULL, 1, NULL, NULL,
                      NULL, claim_id, op, NULL);
    free(claim_id);
    int exists = 0;
    if (!argv || launcher_start(&s, exe, argv, NULL, &lch, &exists, NULL) < 0)
        goto out;
    made = 1;
    if (make_root_dirs(&s, op, NULL) < 0
        || bwrap_prepare_dirs(s.meta, s.root, 1, s.tmp, s.made_tmp, op, NULL) < 0
        || bind_sandbox_socket(&s, &socks[0], &socks[1], op, NULL) < 0
        || listen(socks[0], SOMAXCONN) < 0
        || setsockopt(lch.ctl, SOL_SOCKET, SO_PASSCRED, &(int){ 1 }, sizeof(int)) < 0
        || launcher_go(&lch, &s, exe, NULL, NULL) < 0)
        goto out;
    pthread_mutex_lock(&c->lock);
    c->fill_late = 1;
    pthread_mutex_unlock(&c->lock);
    /* Its init's HELLO: this protocol, pid 1 of its namespace. */
    bound bd = make_bound(NULL, HANDSHAKE_SECS);
    uint32_t type = 0, len = 0;
    unsigned char *hello = NULL;
    struct ucred cred = { 0 };
    int io = wait_io(lch.ctl, POLLIN, &bd);
    if (io == IO_OK)
        peek_credentials(lch.ctl, &cred);
    if (io == IO_OK)
        io = read_frame(lch.ctl, &type, &hello, &len, &bd);
    proto_reader rd;
    proto_reader_init(&rd, hello, len);
    uint32_t version = proto_get_u32(&rd);
    pid_t pid = proto_get_i32(&rd);
    free(hello);
    if (io != IO_OK || type != PROTO_HELLO || rd.failed || version != PROTO_VERSION || pid != 1)
        goto out;
    w->dirfd = open(s.meta, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (w->dirfd < 0)
        goto out;
    /* Who it is on the host, as the kernel gave it with the HELLO (the
     * init's pid and uid translated into this process's namespaces), so
     * that the create that claims it need not connect to ask (READY in
     * start_supervisor). */
    proto_proc init;
    if (cred.pid > 1 && proto_proc_stat(cred.pid, &init) == 0) {
        w->host_pid = cred.pid;
        w->start = init.start;
        w->uid = cred.uid;
    }
    w->ctl = lch.ctl;
    lch.ctl = -1;
    w->pid = 1;
    w->dir = s.meta;
    s.meta = NULL;
    w->has_socks = 1;
    w->socks[0] = socks[0];
    w->socks[1] = socks[1];
    socks[0] = socks[1] = -1;
    w->bwrap = bwrap;
    bwrap = NULL;
    rc = 0;
out:
    /* Not told to go: its process sees EOF and exits; told: its init does
     * at the control socket's EOF. Either way its keeper removes META. */
    if (lch.pid > 0)
        launcher_abort(&lch);
    if (lch.ctl >= 0)
        close(lch.ctl);
    if (socks[0] >= 0)
        close(socks[0]);
    if (socks[1] >= 0)
        close(socks[1]);
    if (rc < 0 && made && s.meta)
        proto_rm_tree(s.meta);
    if (rc < 0 && w->dirfd >= 0)
        close(w->dirfd);
    if (rc < 0)
        *w = (warm_sup){ .ctl = -1, .dirfd = -1 };
    bwrap_argv_free(argv);
    free(bwrap);
    sandbox_free_fields(&s);
    return rc;
}
#endif

/** Frees request @r's fields (its reference to the gate dropped). */
static void fill_req_free(fill_req *r)
{
    gate_unref(r->gate);
    free(r->exe);
    free(r->base);
    *r = (fill_req){ 0 };
}

#if LOCAL_SPARES
/* The filling thread: makes the spares asked for, one at a time, oldest
 * first, each once its gate opened (at most WARM_DEFER_SECS after its
 * create), until none is left or the client closes. */
static void *warm_fill(void *arg)
{
    struct sbx_plugin_client *c = arg;
    pthread_mutex_lock(&c->lock);
    while (c->n_reqs > 0 && !c->closing) {
        fill_req r = c->reqs[0];
        c->n_reqs--;
        memmove(&c->reqs[0], &c->reqs[1], (size_t)c->n_reqs * sizeof(c->reqs[0]));
        c->reqs[c->n_reqs] = (fill_req){ 0 };
        c->wait_gate = r.gate;
        c->making = 1;
        pthread_mutex_unlock(&c->lock);

        gate_wait(r.gate, WARM_DEFER_SECS);
        pthread_mutex_lock(&c->lock);
        c->wait_gate = NULL;
        int closing = c->closing;
        pthread_mutex_unlock(&c->lock);
        warm_sup w = { .ctl = -1, .dirfd = -1 };
        if (!closing) {
#ifdef SBX_LOCAL_BUBBLEWRAP
            bw_spare_make(c, r.exe, r.base, &w);
#else
            bound bd = make_bound(NULL, HANDSHAKE_SECS);
            int ctl = spawner_fork(c, r.exe, r.base, &bd);
            if (ctl >= 0)
                warm_check(ctl, r.base, &w, &bd);
#endif
        }

        pthread_mutex_lock(&c->lock);
        if (w.ctl >= 0 && !c->closing && c->n_warm < SPARES_MAX) {
            w.exe = r.exe;
            w.base = r.base;
            r.exe = r.base = NULL;
            c->warm[c->n_warm++] = w;
            w = (warm_sup){ .ctl = -1, .dirfd = -1 };
        }
        c->making = 0;
        c->fill_late = 0;
        pthread_cond_broadcast(&c->filled);
        pthread_mutex_unlock(&c->lock);
        warm_drop(&w, 1);
        fill_req_free(&r);
        pthread_mutex_lock(&c->lock);
    }
    c->filling = 0;
    pthread_cond_broadcast(&c->filled);
    pthread_mutex_unlock(&c->lock);
    return NULL;
}
#endif

/** Takes the client's oldest warm supervisor into *@w when it runs @exe
 *  and its directory is in @base, and it is still there (else w->ctl is
 *  -1; those that do not fit are let go). */
static void warm_take(struct sbx_plugin_client *c, const char *exe, const char *base,
                      warm_sup *w)
{
    *w = (warm_sup){ .ctl = -1, .dirfd = -1 };
#if LOCAL_SPARES
    warm_sup stale[SPARES_MAX];
    int n_stale = 0;
    pthread_mutex_lock(&c->lock);
    if (c->n_warm == 0) {
        /* None ready. One on its way is further along than a cold start:
         * wait for it (bounded), the gates of those asked for open.
         * (bubblewrap: only once its bwrap runs, its HELLO all that is
         * left; before, a warm sandbox on its way has as much left to do
         * as a cold start: the create starts cold, and the next one takes
         * it.) */
        gate_open(c->wait_gate);
        for (int i = 0; i < c->n_reqs; i++)
            gate_open(c->reqs[i].gate);
#ifdef SBX_LOCAL_BUBBLEWRAP
#define FILL_WAITED (c->making && c->fill_late)
#else
#define FILL_WAITED (c->filling)
#endif
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)WARM_WAIT_SECS;
        while (c->n_warm == 0 && FILL_WAITED && !c->closing
               && pthread_cond_timedwait(&c->filled, &c->lock, &until) == 0)
            ;
#undef FILL_WAITED
    }
    while (c->n_warm > 0 && w->ctl < 0) {
        warm_sup s = c->warm[0];
        c->n_warm--;
        memmove(&c->warm[0], &c->warm[1], (size_t)c->n_warm * sizeof(c->warm[0]));
        c->warm[c->n_warm] = (warm_sup){ .ctl = -1, .dirfd = -1 };
        if (s.exe && strcmp(s.exe, exe) == 0 && s.base && strcmp(s.base, base) == 0) {
            free(s.exe);
            free(s.base);
            s.exe = s.base = NULL;
            *w = s;
        } else {
            stale[n_stale++] = s;
        }
    }
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < n_stale; i++)
        warm_drop(&stale[i], 1);
    /* Gone meanwhile (its end of the socket closed): not taken. */
    struct pollfd pf = { .fd = w->ctl, .events = POLLIN };
    if (w->ctl >= 0 && poll(&pf, 1, 0) != 0)
        warm_drop(w, 1);
#else
    (void)c;
    (void)exe;
    (void)base;
#endif
}

/** Asks for warm supervisors of @exe, their directories in @base, made
 *  in the background by the filling thread, until SPARES_MAX are there or
 *  on their way; their fills wait at one gate first. Returns a reference
 *  to that gate for the sandbox just created (NULL when none was asked
 *  for). */
static fill_gate *warm_refill(struct sbx_plugin_client *c, const char *exe, const char *base)
{
#if LOCAL_SPARES
    /* SBX_LOCAL_WARM=0: none started ahead (every create spawns; on
     * bubblewrap every create starts its sandbox cold). */
    const char *knob = getenv("SBX_LOCAL_WARM");
    fill_gate *mine = NULL;
    if (knob && strcmp(knob, "0") == 0)
        return NULL;
    fill_gate *g = gate_new();
    if (!g)
        return NULL;
    pthread_mutex_lock(&c->lock);
    while (!c->closing && c->n_warm + c->n_reqs + c->making < SPARES_MAX) {
        fill_req r = { strdup(exe), strdup(base), gate_ref(g) };
        int ok = r.exe && r.base;
        if (ok && !c->filling) {
            if (c->fill_joinable) {
                /* It finished (filling is 0): the join does not wait. */
                pthread_join(c->fill_thread, NULL);
                c->fill_joinable = 0;
            }
            ok = pthread_create(&c->fill_thread, NULL, warm_fill, c) == 0;
            if (ok) {
                c->filling = 1;
                c->fill_joinable = 1;
            }
        }
        if (!ok) {
            fill_req_free(&r);
            break;
        }
        /* The thread takes it once this unlocks. */
        c->reqs[c->n_reqs++] = r;
        if (!mine)
            mine = gate_ref(g);
    }
    pthread_mutex_unlock(&c->lock);
    gate_unref(g);
    return mine;
#else
    (void)c;
    (void)exe;
    (void)base;
    return NULL;
#endif
}

/* ------------------------------------------------------------------------ */
/* Slots: plugin and client                                                  */
/* ------------------------------------------------------------------------ */

static int local_setup(const sbx_host_services *services, sbx_error **error)
{
    if (!services || services->struct_size < offsetof(sbx_host_services, free) + sizeof(void *)
        || !services->set_error)
        return -1;
    host = services;
    local_files_setup(services);
#ifdef SBX_LOCAL_BUBBLEWRAP
    bwrap_setup(services);
#endif
#ifdef SBX_LOCAL_SAFEHOUSE
    safehouse_setup(services);
#endif
    return 0;
}

static char *temp_base(const char *op, sbx_error **error);

static int local_client_new(const char *config_json, sbx_plugin_client **client,
                            sbx_error **error)
{
    struct sbx_plugin_client *c = calloc(1, sizeof(*c));
    if (!c) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return -1;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->filled, NULL);
    for (int i = 0; i < SPARES_MAX; i++)
        c->warm[i] = (warm_sup){ .ctl = -1, .dirfd = -1 };
    c->spawner_ctl = -1;
    /* Trash that lost its supervisor and keeper (both killed while they
     * removed it after DESTROY; proto.h), and spares that lost their
     * client and keeper (bubblewrap's too), go here. */
    char *base = temp_base("client_new", NULL);
    if (base)
        proto_sweep_trash(base, PROTO_TRASH_STALE_SECS);
    free(base);
    *client = c;
    return 0;
}

static void local_client_free(sbx_plugin_client *client)
{
    if (!client)
        return;
    pthread_mutex_lock(&client->lock);
    client->closing = 1;
    int joinable = client->fill_joinable;
    gate_open(client->wait_gate);
    for (int i = 0; i < client->n_reqs; i++)
        gate_open(client->reqs[i].gate);
    pthread_mutex_unlock(&client->lock);
    if (joinable)
        pthread_join(client->fill_thread, NULL);
    /* Those asked for and not begun (the thread leaves them at closing). */
    for (int i = 0; i < client->n_reqs; i++)
        fill_req_free(&client->reqs[i]);
    /* Its end of the socket closed, a warm supervisor exits; its
     * directory goes now (its keeper would remove it a moment later). */
    for (int i = 0; i < client->n_warm; i++)
        warm_drop(&client->warm[i], 1);
#if LOCAL_WARM
    spawner_close(client);
#endif
    pthread_cond_destroy(&client->filled);
    pthread_mutex_destroy(&client->lock);
    free(client);
}

static int local_probe(sbx_plugin_client *client, const sbx_call_ctx *ctx, uint64_t *caps,
                       sbx_error **error)
{
    char *path = supervisor_path();
    if (!path) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "probe", "out of memory");
        return -1;
    }
    int r = check_supervisor(path, "probe", error);
    free(path);
    if (r < 0)
        return -1;
    *caps = LOCAL_CAPS | LOCAL_FILE_CAPS;
#ifdef SBX_LOCAL_BUBBLEWRAP
    char *bwrap = bwrap_find("probe", error);
    if (!bwrap)
        return -1;
    free(bwrap);
    *caps |= bwrap_limit_caps();
#endif
#ifdef SBX_LOCAL_SAFEHOUSE
    char *cli = safehouse_find("probe", error);
    if (!cli)
        return -1;
    free(cli);
#endif
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Slots: lifecycle                                                          */
/* ------------------------------------------------------------------------ */

/** The record of @sb (meta/record, described at the top), malloc'd with a
 *  final newline; NULL when memory ran out. */
/* ---- exposed ports: the sandbox shares the host's network (bubblewrap
 * unless allow_internet=0), so a port is reached on 127.0.0.1 as it is;
 * the set lives in the record so that resumed handles see it ---- */

/** The refusal of ports on a bubblewrap sandbox with a network of its own. */
static sbx_error *own_netns_fail(sbx_error **error, unsigned port, const char *op)
{
    char num[16];
    snprintf(num, sizeof(num), "%u", port);
    sbx_error *err = fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                          BACKEND " backend: a sandbox made with allow_internet=0 has a "
                          "network namespace of its own that this host cannot reach, so "
                          "port %u cannot be exposed", port);
    add_context(err, "port", num);
    add_context(err, "reason", "own_network_namespace");
    return err;
}

/** Adds @port to @sb's set (kept ascending, once). 0, or -1 with an error. */
static int ports_add(struct sbx_plugin_sandbox *sb, unsigned port, const char *op,
                     sbx_error **error)
{
    if (sb->own_netns) {
        own_netns_fail(error, port, op);
        return -1;
    }
    size_t i = 0;
    while (i < sb->n_ports && sb->ports[i] < port)
        i++;
    if (i < sb->n_ports && sb->ports[i] == port)
        return 0;
    uint16_t *p = realloc(sb->ports, (sb->n_ports + 1) * sizeof(*p));
    if (!p) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    memmove(p + i + 1, p + i, (sb->n_ports - i) * sizeof(*p));
    p[i] = (uint16_t)port;
    sb->ports = p;
    sb->n_ports++;
    return 0;
}

static int ports_has(const struct sbx_plugin_sandbox *sb, unsigned port)
{
    for (size_t i = 0; i < sb->n_ports; i++)
        if (sb->ports[i] == port)
            return 1;
    return 0;
}

static json_object *ports_json(const struct sbx_plugin_sandbox *sb)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; a && i < sb->n_ports; i++)
        json_object_array_add(a, json_object_new_int(sb->ports[i]));
    return a;
}

static char *record_json(const struct sbx_plugin_sandbox *sb)
{
    json_object *o = json_object_new_object();
    char *out = NULL;
    if (o && json_object_object_add(o, "supervisor_pid",
                                    json_object_new_int64((int64_t)sb->sup_pid)) == 0
        && json_object_object_add(o, "supervisor_start",
                                  json_object_new_int64((int64_t)sb->sup_start)) == 0
        && json_object_object_add(o, "supervisor_uid",
                                  json_object_new_int64((int64_t)sb->sup_uid)) == 0
        && json_object_object_add(o, "root", json_object_new_string(sb->root)) == 0
        && json_object_object_add(o, "owns_root", json_object_new_boolean(sb->owns_root)) == 0
        && json_object_object_add(o, "made_tmp", json_object_new_boolean(sb->made_tmp)) == 0
        && (!sb->cwd || json_object_object_add(o, "cwd", json_object_new_string(sb->cwd)) == 0)
        && json_object_object_add(o, "lifetime", json_object_new_double(sb->lifetime)) == 0
        && json_object_object_add(o, "expires_at",
                                  json_object_new_double(sb->expires_at)) == 0
        && json_object_object_add(o, "own_netns", json_object_new_boolean(sb->own_netns)) == 0
        && (!sb->user_mapped
            || (json_object_object_add(o, "user_uid",
                                       json_object_new_int64((int64_t)sb->user_uid)) == 0
                && json_object_object_add(o, "user_gid",
                                          json_object_new_int64((int64_t)sb->user_gid)) == 0))
        && json_object_object_add(o, "ports", ports_json(sb)) == 0) {
        const char *t = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN
                                                          | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (t && asprintf(&out, "%s\n", t) < 0)
            out = NULL;
    }
    json_object_put(o);
    return out;
}

static void sandbox_free_fields(struct sbx_plugin_sandbox *sb)
{
    free(sb->wrapper);
    free(sb->id);
    free(sb->meta);
    free(sb->root);
    free(sb->sock);
    free(sb->tmp);
    free(sb->cwd);
    free(sb->ports);
}

/** Removes what a sandbox left on disk: the meta directory (with an owned
 *  root) and, in a caller's workdir, the tmp directory it made. */
static int remove_dirs(struct sbx_plugin_sandbox *sb, const char *op, sbx_error **error)
{
    int rc = 0;
    if (sb->made_tmp && !sb->owns_root && sb->tmp && proto_rm_tree(sb->tmp) < 0) {
        sbx_error *err = fail(error, SBX_ERROR_WORKSPACE, op, "cannot remove %s: %s", sb->tmp,
                              strerror(errno));
        add_context(err, "path", sb->tmp);
        rc = -1;
    }
    if (sb->meta && proto_rm_tree(sb->meta) < 0) {
        sbx_error *err = fail(error, SBX_ERROR_WORKSPACE, op, "cannot remove %s: %s", sb->meta,
                              strerror(errno));
        add_context(err, "path", sb->meta);
        rc = -1;
    }
    return rc;
}

/** The directory meta directories go in: realpath of $TMPDIR or /tmp. */
static char *temp_base(const char *op, sbx_error **error)
{
    const char *t = getenv("TMPDIR");
    if (!t || !*t)
        t = "/tmp";
    char *r = realpath(t, NULL);
    if (!r) {
        sbx_error *err = fail(error, SBX_ERROR_CREATION_FAILED, op,
                              "temporary directory %s is not usable: %s", t, strerror(errno));
        add_context(err, "path", t);
    }
    return r;
}

#ifndef SBX_LOCAL_BUBBLEWRAP
/** mkdir -p @path (mode 0755 less the umask): 0 when it is a directory
 *  afterwards, with the first directory this call made in *@made
 *  (malloc'd; NULL when it existed); else -1 with an invalid_argument
 *  (a component is not a directory) or creation_failed error naming the
 *  workdir, and nothing made left. */
static int make_dirs(const char *path, char **made, const char *op, sbx_error **error)
{
    *made = NULL;
    size_t len = strlen(path);
    char *p = strdup(path);
    if (!p) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int e = 0;
    for (size_t i = 1; i <= len && !e; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (path[i - 1] == '/')
            continue;
        p[i] = '\0';
        if (mkdir(p, 0755) == 0) {
            if (!*made && !(*made = strdup(p)))
                e = ENOMEM;
        } else if (errno != EEXIST) {
            e = errno;
        }
        p[i] = path[i];
    }
    free(p);
    if (!e)
        return 0;
    if (*made)
        proto_rm_tree(*made);
    free(*made);
    *made = NULL;
    sbx_error *err = fail(error, e == ENOTDIR ? SBX_ERROR_INVALID_ARGUMENT
                                 : e == ENOMEM ? SBX_ERROR_RESOURCE_EXHAUSTED
                                 : SBX_ERROR_CREATION_FAILED, op,
                          "cannot make workdir \"%s\": %s", path,
                          e == ENOTDIR ? "a component is not a directory" : strerror(e));
    add_context(err, "path", path);
    return -1;
}
#endif

/*
 * Options the local backend has no notion of: refused when the caller set
 * them (unset ones are defaults and ignored).
 */
static int refuse_unsupported(const sbx_plugin_create_request *request, const char *op,
                              sbx_error **error)
{
    static const struct {
        uint64_t field;
        const char *name;
        const char *why;
    } table[] = {
#ifndef SBX_LOCAL_BUBBLEWRAP
        { SBX_OPTION_IMAGE, "image", "commands run on the host's own filesystem" },
#endif
        { SBX_OPTION_TEMPLATE, "template", "there are no templates" },
        { SBX_OPTION_SNAPSHOT_ID, "snapshot_id", "there are no snapshots" },
        { SBX_OPTION_APP_NAME, "app_name", "there are no applications" },
        { SBX_OPTION_GPU, "gpu", "GPUs are not assigned" },
#ifdef SBX_LOCAL_BUBBLEWRAP
        { SBX_OPTION_DISK_MB, "disk_mb", "the root directory is on the host's filesystem, "
                                          "without a quota" },
#else
        { SBX_OPTION_DISK_MB, "disk_mb", "no isolation" },
#endif
    };
    if (request->struct_size < offsetof(sbx_plugin_create_request, backend_options)
                                   + sizeof(request->backend_options))
        return 0;
#ifndef SBX_LOCAL_BUBBLEWRAP
    /* It knows no backend option: the first key given is named. */
    if ((request->set_fields & SBX_OPTION_BACKEND_OPTIONS) && request->backend_options) {
        json_object *o = json_tokener_parse(request->backend_options);
        if (!o || !json_object_is_type(o, json_type_object)) {
            json_object_put(o);
            sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                  BACKEND " backend_options must be a JSON object, not %s",
                                  request->backend_options);
            add_context(err, "option", "backend_options");
            return -1;
        }
        json_object_object_foreach(o, key, val) {
            (void)val;
            sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                                  BACKEND " backend_options: unknown key \"%s\" (the "
                                  BACKEND " backend takes no backend options)", key);
            add_context(err, "option", "backend_options");
            add_context(err, "name", key);
            json_object_put(o);
            return -1;
        }
        json_object_put(o);
    }
#endif
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (!(request->set_fields & table[i].field))
            continue;
        sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                              BACKEND " backend cannot honour %s (%s); use %sdocker "
                              "or a hosted backend", table[i].name, table[i].why,
                              ISOLATION_CAPS ? "" : "bubblewrap, ");
        add_context(err, "option", table[i].name);
        return -1;
    }
    if ((request->set_fields & SBX_OPTION_ALLOW_INTERNET) && !request->allow_internet
        && !ISOLATION_CAPS) {
        sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                              "local backend cannot enforce allow_internet=false (no "
                              "isolation); use bubblewrap or docker");
        add_context(err, "option", "allow_internet");
        add_context(err, "value", "false");
        return -1;
    }
    return 0;
}

static int wait_supervisor_gone(struct sbx_plugin_sandbox *sb, double secs);

static int local_create(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                        const sbx_plugin_create_request *request,
                        sbx_plugin_sandbox **sandbox, sbx_error **error)
{
    const char *op = "create";
    struct sbx_plugin_sandbox *sb = NULL;
    char *exe = NULL, *base = NULL, *workdir = NULL;
    char *made_workdir = NULL;  /* the first directory create made for the workdir */
    strv env = { 0 };
    int made_meta = 0;
    int sock_fds[2] = { -1, -1 };
    warm_sup warm = { .ctl = -1, .dirfd = -1 };
    int cold_ctl = -1;          /* a cold supervisor's, between HELLO and CONFIG */
    char num[64];

    if (!request || request->struct_size < offsetof(sbx_plugin_create_request, env)
                                           + sizeof(request->env)) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "create request missing or too short");
        return -1;
    }
#ifdef SBX_LOCAL_BUBBLEWRAP
    char *bwrap = NULL, *image_root = NULL, **launch_argv = NULL, *cwd_inside = NULL;
    char *cg_procs[2] = { NULL, NULL };
    size_t n_cg = 0;
    int made_cg = 0;
    launcher lch = { .pid = -1, .ctl = -1, .go = -1 };
    int allow_internet = !(request->set_fields & SBX_OPTION_ALLOW_INTERNET)
                         || request->allow_internet;
#else
    char **launch_argv = NULL;
#endif
#ifdef SBX_LOCAL_SAFEHOUSE
    char *wrapper = NULL;       /* moves to sb->wrapper */
#endif
    if ((request->set_fields & SBX_OPTION_CPU) && !ISOLATION_CAPS) {
        snprintf(num, sizeof(num), "%g", request->cpu);
        sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                              "local backend cannot enforce cpu=%s (no isolation); "
                              "use bubblewrap or docker", num);
        add_context(err, "option", "cpu");
        add_context(err, "value", num);
        return -1;
    }
    if ((request->set_fields & SBX_OPTION_MEMORY_MB) && !ISOLATION_CAPS) {
        snprintf(num, sizeof(num), "%lld", (long long)request->memory_mb);
        sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                              "local backend cannot enforce memory_mb=%s (no isolation); "
                              "use bubblewrap or docker", num);
        add_context(err, "option", "memory_mb");
        add_context(err, "value", num);
        return -1;
    }
    if (refuse_unsupported(request, op, error) < 0)
        return -1;
    /* The lifetime: timeout_secs, from readiness on; enforced by the
     * supervisor. 0 or less: none (the library refuses that unless
     * something else bounds the sandbox). */
    double lifetime = request->timeout_secs > 0 ? request->timeout_secs : 0;
    if (lifetime * 1000.0 > (double)PROTO_LIFETIME_MAX_MS) {
        snprintf(num, sizeof(num), "%.15g", request->timeout_secs);
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "timeout_secs=%s is longer than the " BACKEND " backend's "
                              "longest lifetime (%llu s)", num,
                              (unsigned long long)(PROTO_LIFETIME_MAX_MS / 1000));
        add_context(err, "option", "timeout_secs");
        add_context(err, "value", num);
        return -1;
    }
    int detached = request->struct_size >= offsetof(sbx_plugin_create_request, detached)
                                            + sizeof(request->detached)
                   && request->detached;
    if (lifetime == 0 && detached) {
        sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                              "timeout_secs: a detached sandbox needs a lifetime: nothing "
                              "else ends it");
        add_context(err, "option", "timeout_secs");
        add_context(err, "reason", "detached");
        return -1;
    }

    exe = supervisor_path();
    if (!exe)
        goto nomem;
    if (check_supervisor(exe, op, error) < 0)
        goto fail;
#ifdef SBX_LOCAL_SAFEHOUSE
    wrapper = safehouse_find(op, error);
    if (!wrapper)
        goto fail;
#endif
#ifdef SBX_LOCAL_BUBBLEWRAP
    if ((request->set_fields & SBX_OPTION_CPU) && !(request->cpu > 0 && request->cpu <= 4096)) {
        snprintf(num, sizeof(num), "%g", request->cpu);
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "cpu=%s is out of range (0 < cpu <= 4096)", num);
        add_context(err, "option", "cpu");
        goto fail;
    }
    if ((request->set_fields & SBX_OPTION_MEMORY_MB) && request->memory_mb <= 0) {
        snprintf(num, sizeof(num), "%lld", (long long)request->memory_mb);
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "memory_mb=%s is out of range (> 0)", num);
        add_context(err, "option", "memory_mb");
        goto fail;
    }
    bwrap = bwrap_find(op, error);
    if (!bwrap)
        goto fail;
    pthread_mutex_lock(&client->lock);
    int userns = client->userns_ok || bwrap_check_userns(bwrap, op, error) == 0;
    if (userns)
        client->userns_ok = 1;
    pthread_mutex_unlock(&client->lock);
    if (!userns)
        goto fail;
    if ((request->set_fields & SBX_OPTION_IMAGE) && request->image) {
        struct stat st;
        char *usr = join_path(request->image, "usr");
        int ok = request->image[0] == '/' && usr && stat(usr, &st) == 0 && S_ISDIR(st.st_mode);
        free(usr);
        if (ok)
            image_root = realpath(request->image, NULL);
        if (!image_root) {
            sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                  "image \"%s\" is not a root filesystem directory (an "
                                  "absolute path of a tree with usr/ and etc/, e.g. made by "
                                  "debootstrap)", request->image);
            add_context(err, "option", "image");
            add_context(err, "value", request->image);
            goto fail;
        }
    }
    /* The create-time user (ABI 1.4), resolved in the sandbox's passwd. */
    const char *cuser = request->struct_size >= offsetof(sbx_plugin_create_request, user)
                                                + sizeof(request->user)
                        ? request->user : NULL;
    uid_t in_uid = 0;
    gid_t in_gid = 0;
    if (cuser) {
        char *pw = join_path(image_root ? image_root : "/", "etc/passwd");
        if (!pw)
            goto nomem;
        int rc_user = bwrap_resolve_user(pw, cuser, &in_uid, &in_gid, op, error);
        free(pw);
        if (rc_user < 0)
            goto fail;
    }
#endif

#ifdef SBX_LOCAL_BUBBLEWRAP
    /* The root: backend_options' root_dir, else META/root (made below);
     * the workdir is a path inside, made when missing once the root is
     * ready. */
    if (bwrap_root_dir((request->set_fields & SBX_OPTION_BACKEND_OPTIONS)
                       ? request->backend_options : NULL, &workdir, op, error) < 0)
        goto fail;
    if (request->workdir && bwrap_check_workdir(request->workdir,
                                                image_root ? image_root : "/", &cwd_inside,
                                                op, error) < 0)
        goto fail;
#else
    /* A caller's workdir is the root itself, made when missing (with its
     * parents; what create made goes again when create fails). */
    if (request->workdir && make_dirs(request->workdir, &made_workdir, op, error) < 0)
        goto fail;
    if (request->workdir) {
        struct stat st;
        if (stat(request->workdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            int e = errno;
            sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                  "workdir \"%s\" %s", request->workdir,
                                  access(request->workdir, F_OK) == 0 ? "is not a directory"
                                  : e == ENOENT || e == ENOTDIR ? "does not exist"
                                  : strerror(e));
            add_context(err, "path", request->workdir);
            goto fail;
        }
        workdir = realpath(request->workdir, NULL);
        if (!workdir) {
            sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "workdir \"%s\": %s",
                                  request->workdir, strerror(errno));
            add_context(err, "path", request->workdir);
            goto fail;
        }
    }
#endif

    base = temp_base(op, error);
    if (!base)
        goto fail;
    size_t sun_max = sizeof(((struct sockaddr_un *)NULL)->sun_path);
    size_t need = strlen(base) + strlen("/" ID_PREFIX "XXXXXX/sock");
    if (need >= sun_max) {
        sbx_error *err = fail(error, SBX_ERROR_CONFIGURATION, op,
                              "temporary directory %s is too long for a unix socket path "
                              "(%zu bytes, at most %zu); set TMPDIR to a shorter directory",
                              base, need, sun_max - 1);
        add_context(err, "path", base);
        goto fail;
    }

    sb = calloc(1, sizeof(*sb));
    if (!sb)
        goto nomem;
    pthread_mutex_init(&sb->lock, NULL);
    sb->lifetime = lifetime;
#ifdef SBX_LOCAL_BUBBLEWRAP
    sb->own_netns = !allow_internet;
    if (cuser) {
        sb->user_mapped = 1;
        sb->user_uid = in_uid;
        sb->user_gid = in_gid;
    }
#endif
    if (request->struct_size >= offsetof(sbx_plugin_create_request, n_ports)
                                + sizeof(request->n_ports)) {
        for (size_t i = 0; i < request->n_ports && request->ports; i++)
            if (ports_add(sb, request->ports[i], op, error) < 0)
                goto fail;
    }
#ifdef SBX_LOCAL_SAFEHOUSE
    sb->wrapper = wrapper;
    wrapper = NULL;
#endif
    /* The client's warm supervisor, when there is one, made the meta
     * directory (as a spare's; named the sandbox's at CLAIM), the root,
     * its tmp/ and the socket ahead. */
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* bubblewrap: a warm sandbox, for the plain configuration only (and
     * the same bwrap program); any other create starts cold. */
    int plain = !image_root && !cuser && !workdir && !cwd_inside && allow_internet
                && !(request->set_fields & (SBX_OPTION_CPU | SBX_OPTION_MEMORY_MB
                                            | SBX_OPTION_BACKEND_OPTIONS));
    if (plain) {
        warm_take(client, exe, base, &warm);
        if (warm.ctl >= 0 && (!warm.bwrap || strcmp(warm.bwrap, bwrap) != 0))
            warm_drop(&warm, 1);
    }
#else
    warm_take(client, exe, base, &warm);
#endif
    if (warm.ctl >= 0) {
        const char *name = strrchr(warm.dir, '/') + 1 + strlen(PROTO_SPARE_PREFIX);
        if (asprintf(&sb->meta, "%s/" ID_PREFIX "%s", base, name) < 0) {
            sb->meta = NULL;
            goto nomem;
        }
    } else if (asprintf(&sb->meta, "%s/" ID_PREFIX "XXXXXX", base) < 0) {
        sb->meta = NULL;
        goto nomem;
    }
    /* A caller's workdir is the root; its tmp/ is made by the supervisor
     * (cold: spawn_cold; warm: CLAIM) or the launcher (bubblewrap). */
    if (workdir) {
        sb->root = workdir;
        workdir = NULL;
        sb->tmp = join_path(sb->root, "tmp");
        if (!sb->tmp)
            goto nomem;
    }
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* A warm sandbox's META becomes the sandbox's, never over an existing
     * directory (its keeper follows it); should that fail, it is let go
     * and the create starts cold. */
    if (warm.ctl >= 0) {
        if (renameat2(AT_FDCWD, warm.dir, AT_FDCWD, sb->meta, RENAME_NOREPLACE) == 0) {
            made_meta = 1;
            free(warm.dir);
            warm.dir = NULL;
        } else {
            LOG(SBX_LOG_DEBUG, "cannot rename the warm sandbox %s to %s: %s", warm.dir,
                sb->meta, strerror(errno));
            warm_drop(&warm, 1);
            free(sb->meta);
            if (asprintf(&sb->meta, "%s/" ID_PREFIX "XXXXXX", base) < 0) {
                sb->meta = NULL;
                goto nomem;
            }
        }
    }
    /* Cold: named here, made by the launcher (launcher_start), so that it
     * never exists without its keeper. */
    if (warm.ctl < 0 && fill_template(sb->meta) < 0) {
        fail(error, local_errno_code(errno, SBX_ERROR_CREATION_FAILED), op,
             "cannot name a directory in %s: %s", base, strerror(errno));
        goto fail;
    }
#else
    /* Cold: the supervisor makes the directory (spawn_cold), and the
     * tmp/ of a caller's workdir when missing, so that neither exists
     * without a process that removes it, should this one die (a SIGKILL)
     * before the supervisor runs. */
    if (warm.ctl < 0) {
        bound cold_bd = make_bound(ctx, HANDSHAKE_SECS);
        if (spawn_cold(sb, exe, sb->tmp, &cold_bd, &cold_ctl, error) < 0) {
            free(sb->meta);
            sb->meta = NULL;
            goto fail;
        }
    }
    made_meta = 1;
#endif
    sb->id = strdup(strrchr(sb->meta, '/') + 1);
    sb->sock = join_path(sb->meta, "sock");
    if (!sb->root) {
        sb->root = join_path(sb->meta, "root");
        sb->owns_root = 1;
    }
    if (!sb->id || !sb->sock || !sb->root)
        goto nomem;
#ifdef SBX_LOCAL_BUBBLEWRAP
    sb->cwd = cwd_inside ? cwd_inside : strdup("/");
    cwd_inside = NULL;
    if (!sb->cwd)
        goto nomem;
#endif
    if (!sb->tmp)
        sb->tmp = join_path(sb->root, "tmp");
    if (!sb->tmp)
        goto nomem;
    /* A root of its own is made (with its tmp/) while the supervisor
     * starts (start_supervisor's late); on bubblewrap bwrap binds it, and a
     * caller's workdir decides made_tmp, which the supervisor's keeper
     * needs first: made now. */
    int late = 0;
#ifndef SBX_LOCAL_BUBBLEWRAP
    late = sb->owns_root;
#endif
    if (warm.ctl >= 0 && !sb->owns_root) {
        /* The spare's own root is not used. */
        unlinkat(warm.dirfd, "root/tmp", AT_REMOVEDIR);
        unlinkat(warm.dirfd, "root", AT_REMOVEDIR);
    }
    if (late)
        sb->made_tmp = 1;
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* A root in META once the launcher made META (below); the launcher
     * makes a root_dir's tmp/ when missing. One that is not a directory
     * is refused now. */
    else if (!sb->owns_root) {
        struct stat st;
        if (lstat(sb->tmp, &st) == 0 && !S_ISDIR(st.st_mode)) {
            sbx_error *err = fail(error, SBX_ERROR_CREATION_FAILED, op,
                                  "cannot create %s: exists and is not a directory", sb->tmp);
            add_context(err, "path", sb->tmp);
            goto fail;
        }
    }
#else
    /* Cold or warm, the supervisor makes the tmp/ of a caller's workdir
     * (spawn_cold, CLAIM). */
#endif

    /* The command environment: nothing of the caller's environment but
     * PATH and LANG; then the sandbox's own variables. npm's global prefix
     * points into the root (its bin/ first on PATH), so `npm install -g`
     * in a sandbox never writes to the host's prefix. */
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* Inside, the root is / and only the system tree's PATH exists. */
    const char *v = DEFAULT_PATH;
    const char *cmd_root = "/", *cmd_tmp = "/tmp", *cmd_sandbox_root = "";
#else
    const char *v = getenv("PATH");
    const char *cmd_root = sb->root, *cmd_tmp = sb->tmp, *cmd_sandbox_root = sb->root;
#endif
    char *npm_prefix = join_path(cmd_root, ".npm-global"), *path_value = NULL;
    if (!npm_prefix || asprintf(&path_value, "%s/bin:%s", npm_prefix,
                                v && *v ? v : DEFAULT_PATH) < 0) {
        free(npm_prefix);
        goto nomem;
    }
    int env_rc = strv_setkv(&env, "PATH", path_value);
    free(path_value);
    if (env_rc == 0)
        env_rc = strv_setkv(&env, "NPM_CONFIG_PREFIX", npm_prefix);
    free(npm_prefix);
    if (env_rc < 0)
        goto nomem;
    v = getenv("LANG");
    if (strv_setkv(&env, "LANG", v && *v ? v : DEFAULT_LANG) < 0
        || strv_setkv(&env, "HOME", cmd_root) < 0
        || strv_setkv(&env, "TMPDIR", cmd_tmp) < 0
        || strv_setkv(&env, "SANDBOX_ROOT", cmd_sandbox_root) < 0)
        goto nomem;
    for (const char *const *e = request->env; e && *e; e++)
        if (strv_set(&env, *e) < 0)
            goto nomem;

#ifdef SBX_LOCAL_BUBBLEWRAP
    /* A warm sandbox has all that follows (checked, made, started) but the
     * socket's hand-over. */
    if (warm.ctl >= 0) {
        sb->made_tmp = 1;
        sock_fds[0] = warm.socks[0];
        sock_fds[1] = warm.socks[1];
        warm.has_socks = 0;
        goto launched;
    }
    /* The image's usr/: bwrap passes through the image's root too. */
    char *image_usr = image_root ? join_path(image_root, "usr") : NULL;
    if (image_root && !image_usr)
        goto nomem;
    int reach = bwrap_check_reach(sb->meta, "the temporary directory", op, error) < 0
        || (!sb->owns_root && bwrap_check_reach(sb->root, "the root_dir", op, error) < 0)
        || bwrap_check_reach(exe, "the supervisor", op, error) < 0
        || bwrap_check_reach(bwrap, "the bwrap program", op, error) < 0
        || (image_usr && bwrap_check_reach(image_usr, "the image", op, error) < 0);
    free(image_usr);
    if (reach)
        goto fail;
    /* The cgroups are named now (the launcher's keeper removes them) and
     * made once it runs. */
    int limits = (request->set_fields & (SBX_OPTION_CPU | SBX_OPTION_MEMORY_MB)) != 0;
    if (limits && bwrap_cgroups_create(sb->id, request, 0, cg_procs, &n_cg, op, error) < 0)
        goto fail;
    launch_argv = bwrap_argv(exe, cg_procs, n_cg, bwrap, exe, sb->root, sb->meta,
                             image_root ? image_root : "/",
                             !sb->owns_root ? sb->tmp : NULL, allow_internet,
                             (request->set_fields & SBX_OPTION_BACKEND_OPTIONS)
                             ? request->backend_options : NULL,
                             cuser ? &in_uid : NULL, cuser ? &in_gid : NULL, NULL, op, error);
    if (!launch_argv)
        goto fail;
    int exists = 0;
    if (launcher_start(sb, exe, launch_argv, ctx, &lch, &exists, error) < 0) {
        if (exists) {
            sbx_error *err = fail(error, SBX_ERROR_CREATION_FAILED, op,
                                  "sandbox directory %s exists already", sb->meta);
            add_context(err, "path", sb->meta);
        }
        goto fail;
    }
    made_meta = 1;
    for (size_t i = 0; i < n_cg; i++)
        free(cg_procs[i]);
    n_cg = 0;
    if ((sb->owns_root && make_root_dirs(sb, op, error) < 0)
        || bwrap_prepare_dirs(sb->meta, sb->root, sb->owns_root, sb->tmp, sb->made_tmp,
                              op, error) < 0
        || bwrap_make_workdir(sb->root, sb->cwd, &made_workdir, op, error) < 0)
        goto fail;
    if (limits) {
        if (bwrap_cgroups_create(sb->id, request, 1, cg_procs, &n_cg, op, error) < 0)
            goto fail;
        made_cg = 1;
    }
#endif
    if (warm.ctl < 0 && bind_sandbox_socket(sb, &sock_fds[0], &sock_fds[1], op, error) < 0)
        goto fail;
#ifdef SBX_LOCAL_BUBBLEWRAP
    if (launcher_go(&lch, sb, exe, ctx, error) < 0)
        goto fail;
    cold_ctl = lch.ctl;
    lch.ctl = -1;
launched:
    if (warm.ctl >= 0) {
        /* Its init waits for CONFIG: a cold start's, from here on. */
        cold_ctl = warm.ctl;
        warm.ctl = -1;
        sb->sup_pid = 1;
        sb->spare_hello = 1;
        sb->spare_pid = warm.host_pid;
        sb->spare_start = warm.start;
        sb->spare_uid = warm.uid;
    }
#endif
    uid_t guessed_uid = geteuid();
    int started = start_supervisor(sb, exe, &env, sock_fds, detached, late, &warm,
                                   cold_ctl, ctx, error);
    cold_ctl = -1;
    if (sock_fds[0] >= 0)
        close(sock_fds[0]);
    if (sock_fds[1] >= 0)
        close(sock_fds[1]);
    if (started < 0)
        goto fail;
    warm_drop(&warm, 0);
    sb->spare_hello = 0;
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* The next warm sandbox, for a client that makes plain ones. */
    if (plain)
        sb->fill_gate = warm_refill(client, exe, base);
#else
    sb->fill_gate = warm_refill(client, exe, base);
#endif

    /* Written during start-up (late) unless the listener's uid differs
     * from the one the record took. */
    if ((!late || sb->sup_uid != guessed_uid) && write_record(sb, late, AT_FDCWD, op, error) < 0)
        goto fail_started;
#ifdef SBX_LOCAL_FAULTY
    if (sbx_fault_create(sb->id, ctx) < 0) {
        fail(error, SBX_ERROR_CANCELLED, op, "the create of %s was cancelled", sb->id);
        goto fail_started;
    }
#endif

    LOG(SBX_LOG_DEBUG, "created %s (root %s, supervisor pid %d)", sb->id, sb->root,
        (int)sb->sup_pid);
    free(made_workdir);
    strv_free(&env);
    free(exe);
    free(base);
#ifdef SBX_LOCAL_BUBBLEWRAP
    free(bwrap);
    free(image_root);
    for (size_t i = 0; i < n_cg; i++)
        free(cg_procs[i]);
    bwrap_argv_free(launch_argv);
#endif
    *sandbox = sb;
    return 0;

fail_started: {
        /* Ask the supervisor to end; kill it if it does not answer. */
        bound bd = make_bound(NULL, GONE_SECS);
        int e, io;
        int fd = request_simple(sb, PROTO_DESTROY, &bd, &e, &io, NULL);
        if (fd >= 0) {
            uint32_t t, l;
            unsigned char *p = NULL;
            if (read_frame(fd, &t, &p, &l, &bd) == IO_OK)
                free(p);
            close(fd);
        }
        if (sb->sup_pid > 1 && proto_proc_alive(sb->sup_pid, sb->sup_start))
            kill(sb->sup_pid, SIGKILL);
        wait_supervisor_gone(sb, GONE_SECS);
    }
    goto fail;
nomem:
    fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* Its keeper removes what was made too, as this does below. */
    if (lch.pid > 0)
        launcher_abort(&lch);
    free(bwrap);
    free(image_root);
    free(cwd_inside);
    for (size_t i = 0; i < n_cg; i++)
        free(cg_procs[i]);
    bwrap_argv_free(launch_argv);
    if (sb && made_cg)
        bwrap_cgroups_remove(sb->id);
    if (sb && made_meta && !sb->owns_root) {
        bwrap_clean_root(sb->root);
        bwrap_return_workdir(sb->meta, sb->root);
    }
#else
    (void)launch_argv;
#endif
#ifdef SBX_LOCAL_SAFEHOUSE
    free(wrapper);
#endif
    if (cold_ctl >= 0) {
        /* Spawned, not configured: it ends (and its keeper removes its
         * directory, as this does below). */
        close(cold_ctl);
        if (sb->sup_pid > 1 && proto_proc_alive(sb->sup_pid, sb->sup_start))
            kill(sb->sup_pid, SIGKILL);
        wait_supervisor_gone(sb, GONE_SECS);
    }
    if (sb && warm.dir) {
        /* A spare's directory goes under its own name, or under sb->meta
         * once its supervisor (claimed: gone first) renamed it there;
         * never a directory of that name that is not it. */
        if (warm.ctl < 0 && sb->sup_pid > 1)
            wait_supervisor_gone(sb, GONE_SECS);
        struct stat mine, named;
        int renamed = warm.dirfd >= 0 && fstat(warm.dirfd, &mine) == 0 && sb->meta
                      && lstat(sb->meta, &named) == 0 && mine.st_dev == named.st_dev
                      && mine.st_ino == named.st_ino;
        if (!renamed) {
            free(sb->meta);
            sb->meta = NULL;
        }
        proto_rm_tree(warm.dir);
    }
    warm_drop(&warm, 0);
    if (sb) {
        if (made_meta)
            remove_dirs(sb, op, NULL);
        gate_open(sb->fill_gate);
        gate_unref(sb->fill_gate);
        pthread_mutex_destroy(&sb->lock);
        sandbox_free_fields(sb);
        free(sb);
    }
    /* A workdir create made (local) or made in a root_dir (bubblewrap). */
    if (made_workdir)
        proto_rm_tree(made_workdir);
    free(made_workdir);
    strv_free(&env);
    free(workdir);
    free(exe);
    free(base);
    return -1;
}

/**
 * Waits (bounded by @secs) until the supervisor process is gone (a zombie
 * counts as gone). Returns 0, or -1 when it still runs. Sleeps on a pidfd
 * of it, which is readable once it ended; without pidfds it looks every
 * 5 ms.
 */
static int wait_supervisor_gone(struct sbx_plugin_sandbox *sb, double secs)
{
    if (!proto_proc_alive(sb->sup_pid, sb->sup_start))
        return 0;
    double end = mono_now() + secs;
    /* Opened after the check above and checked again below: a pid taken
     * over by another process fails the start-time check. */
    int pidfd = pidfd_of(sb->sup_pid);
    int rc = 0;
    while (proto_proc_alive(sb->sup_pid, sb->sup_start)) {
        double left = end - mono_now();
        if (left <= 0) {
            rc = -1;
            break;
        }
        if (pidfd >= 0) {
            int ms = left * 1000.0 >= INT_MAX - 1 ? INT_MAX : (int)(left * 1000.0) + 1;
            if (pidfd_wait(pidfd, ms)) {
                /* Ended: the next check sees it gone. Should it not, look
                 * the slow way rather than spin on a readable pidfd. */
                close(pidfd);
                pidfd = -1;
            }
        } else {
            sleep_ms(5);
        }
    }
    if (pidfd >= 0)
        close(pidfd);
    return rc;
}

/** Last resort when the supervisor does not answer: kill its tree, then
 *  it. Its keeper (its parent), when stopped too (a SIGSTOP of the whole
 *  process group), is continued: it reaps the supervisor and removes the
 *  sandbox's directory. */
static void kill_supervisor_tree(struct sbx_plugin_sandbox *sb)
{
    proto_proc sup, keeper;
    if (!proto_proc_alive(sb->sup_pid, sb->sup_start))
        return;
    int has_keeper = proto_proc_stat(sb->sup_pid, &sup) == 0 && sup.ppid > 1
                     && proto_proc_stat(sup.ppid, &keeper) == 0;
    kill(sb->sup_pid, SIGSTOP);
    for (int round = 0; round < 50; round++) {
        if (proto_kill_descendants(sb->sup_pid, SIGKILL, NULL) == 0)
            break;
        sleep_ms(10);
    }
    if (proto_proc_alive(sb->sup_pid, sb->sup_start))
        kill(sb->sup_pid, SIGKILL);
    proto_proc now;
    if (has_keeper && proto_proc_stat(sup.ppid, &now) == 0 && now.start == keeper.start
        && (now.state == 'T' || now.state == 't'))
        kill(sup.ppid, SIGCONT);
    wait_supervisor_gone(sb, GONE_SECS);
}

static int local_destroy(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                         sbx_error **error)
{
    const char *op = "destroy";
    struct sbx_plugin_sandbox *sb = sandbox;
    int rc = 0, ending = 0;
#ifdef SBX_LOCAL_BUBBLEWRAP
    int meta_lock = -1;
#endif

#ifdef SBX_LOCAL_FAULTY
    sbx_fault_destroy(sb->id);
#endif
    pthread_mutex_lock(&sb->lock);
    if (sb->destroyed)
        goto out;

    bound bd = make_bound(ctx, DESTROY_SECS);
    int e, io;
    struct ucred peer;
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* Held until META is gone: should this process die before (SIGKILL),
     * the launcher's keeper, which waits for it after the sandbox's end,
     * removes what is left (keeper() in supervisor.c). */
    meta_lock = proto_meta_lock(sb->meta);
#endif
    int fd = request_simple(sb, PROTO_DESTROY, &bd, &e, &io, &peer);
    int asked = fd >= 0;
    if (e == E_PEER)
        /* Never believe an impostor's answer: end the supervisor by pid. */
        LOG(SBX_LOG_WARNING, "the socket of sandbox %s is served by pid %d (uid %d), not by "
            "its supervisor (pid %d); ending the supervisor by pid", sb->id, (int)peer.pid,
            peer.uid == (uid_t)-1 ? -1 : (int)peer.uid, (int)sb->sup_pid);
    if (asked) {
        /* DESTROYED, then EOF once the supervisor exited. */
        uint32_t type, len;
        unsigned char *p = NULL;
        io = read_frame(fd, &type, &p, &len, &bd);
        free(p);
        p = NULL;
#ifndef SBX_LOCAL_BUBBLEWRAP
        /* DESTROYED comes once every process of the sandbox was reaped
         * and the meta directory renamed to its trash name, which the
         * supervisor removes after the answer (its keeper, should it die
         * first): destroy returns without waiting for that or for the
         * supervisor's exit. Left to do here: a tmp directory made in a
         * caller's workdir, and the meta directory should it still be
         * there (not renamed). (On bubblewrap the mounts go with bwrap,
         * later.) */
        if (io == IO_OK && type == PROTO_DESTROYED) {
            close(fd);
            if (remove_dirs(sb, op, error) < 0) {
                rc = -1;
                goto out;
            }
            goto destroyed;
        }
#else
        /* DESTROYED comes once every process of the sandbox but its init
         * was reaped (idle exec reapers: sent SIGKILL); the init exits
         * next, and with pid 1 its namespace ends. A sandbox with its own
         * root and no cgroups is done then: META goes to its trash name,
         * which the launcher's keeper, waiting for bwrap's end and this
         * lock, removes (and should this process die first, it removes
         * META as it is). Else the init's exit is waited for, as before,
         * for the cgroups and a caller's root_dir. */
        if (io == IO_OK && type == PROTO_DESTROYED && sb->owns_root && meta_lock >= 0
            && !bwrap_cgroups_exist(sb->id) && sb->meta && proto_meta_to_trash(sb->meta) == 0) {
            close(fd);
            goto destroyed;
        }
#endif
        if (io == IO_OK)
            io = read_frame(fd, &type, &p, &len, &bd);
        free(p);
        close(fd);
    } else if (e == ETIMEDOUT || e == ECANCELED) {
        io = e == ETIMEDOUT ? IO_TIMEOUT : IO_CANCEL;
    }
    if (io == IO_CANCEL || (io == IO_TIMEOUT && deadline_passed(&bd))) {
        io_fail(error, io, op, sb->id, "destroy");
        rc = -1;
        goto out;
    }
    /* Gone already, crashed, or not answering: make sure. A socket that is
     * gone with the meta directory was a supervisor's that ended the
     * sandbox, on its own (its keeper removed the directory) or at a
     * DESTROY sent through the exec endpoint (the directory renamed to its
     * trash, the supervisor removing it and exiting): it is given the time
     * to exit before it is killed. */
    ending = !asked && gone_errno(e) && sb->meta && access(sb->meta, F_OK) < 0
             && errno == ENOENT;
    if (ending)
        /* The sandbox's work is over (see below): the fill need not wait
         * for the supervisor's exit, as it does not after DESTROYED. */
        gate_open(sb->fill_gate);
    if (wait_supervisor_gone(sb, (asked && io != IO_TIMEOUT) || ending ? GONE_SECS : 0) < 0) {
        LOG(SBX_LOG_WARNING, "supervisor of %s (pid %d) still runs; killing it", sb->id,
            (int)sb->sup_pid);
        kill_supervisor_tree(sb);
    }
#ifdef SBX_LOCAL_BUBBLEWRAP
    bwrap_cgroups_remove(sb->id);
    if (!sb->owns_root) {
        bwrap_clean_root(sb->root);
        bwrap_return_workdir(sb->meta, sb->root);
    }
#endif

    /* Ended on its own or at a DESTROY of another process: the supervisor
     * or its keeper removed the tmp directory in the caller's workdir,
     * which a new sandbox of that workdir may have made again since. */
    if (!ending && remove_dirs(sb, op, error) < 0) {
        rc = -1;
        goto out;
    }
destroyed:
    sb->destroyed = 1;
    LOG(SBX_LOG_DEBUG, ending ? "destroyed %s (it had ended)" : "destroyed %s", sb->id);
#ifdef SBX_LOCAL_FAULTY
    sbx_fault_destroyed();
#endif
out:
#ifdef SBX_LOCAL_BUBBLEWRAP
    if (meta_lock >= 0)
        close(meta_lock);
#endif
    pthread_mutex_unlock(&sb->lock);
    /* The sandbox's work is over: the client's next warm supervisor may
     * start now. Not before the answer: it makes its directory, root and
     * socket, and took the CPU and the temporary directory from the
     * supervisor ending this sandbox (destroy measured 0.5 to 1 ms longer
     * on a busy machine). */
    gate_open(sb->fill_gate);
    return rc;
}

static int sandbox_destroyed(struct sbx_plugin_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    int d = sb->destroyed;
    pthread_mutex_unlock(&sb->lock);
    return d;
}

static int local_is_alive(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                          sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = sandbox;
    if (sandbox_destroyed(sb))
        return 0;
    bound bd = make_bound(ctx, PING_SECS);
    int e, io;
    struct ucred peer;
    int fd = request_simple(sb, PROTO_PING, &bd, &e, &io, &peer);
    if (fd < 0) {
        if (e == E_PEER) {
            if (!proto_proc_alive(sb->sup_pid, sb->sup_start))
                return 0;
            peer_fail(error, "is_alive", sb, &peer);
            return -1;
        }
        if (e == 0) {
            /* Connected, but the request could not be sent. */
            if (io == IO_EOF)
                return 0;
        } else if (gone_errno(e)) {
            return 0;
        } else if (e == ETIMEDOUT || e == ECANCELED) {
            io = e == ETIMEDOUT ? IO_TIMEOUT : IO_CANCEL;
        } else {
            errno = e;
            io = IO_ERR;
        }
        io_fail(error, io, "is_alive", sb->id, "ping");
        return -1;
    }
    uint32_t type, len;
    unsigned char *p = NULL;
    io = read_frame(fd, &type, &p, &len, &bd);
    free(p);
    close(fd);
    if (io == IO_OK && type == PROTO_PONG)
        return 1;
    if (io == IO_EOF || io == IO_OK)
        return 0;
    io_fail(error, io, "is_alive", sb->id, "ping");
    return -1;
}

static void local_sandbox_free(sbx_plugin_sandbox *sandbox)
{
    if (!sandbox)
        return;
    LOG(SBX_LOG_DEBUG, "released %s", sandbox->id ? sandbox->id : "a sandbox");
    gate_open(sandbox->fill_gate);
    gate_unref(sandbox->fill_gate);
    pthread_mutex_destroy(&sandbox->lock);
    if (sandbox->sup_pidfd1 > 0)
        close(sandbox->sup_pidfd1 - 1);
    sandbox_free_fields(sandbox);
    free(sandbox);
}

static const char *local_sandbox_id(sbx_plugin_sandbox *sandbox)
{
    return sandbox->id;
}

static const char *local_sandbox_root(sbx_plugin_sandbox *sandbox)
{
#ifdef SBX_LOCAL_BUBBLEWRAP
    (void)sandbox;
    return "";      /* the sandbox owns / */
#else
    return sandbox->root;
#endif
}

/* ------------------------------------------------------------------------ */
/* Slots: session state and resume                                           */
/* ------------------------------------------------------------------------ */

/** The working directory a command given none starts in, as the caller
 *  names it (borrowed): the root; inside bubblewrap, the workdir (as the
 *  session state's exec_endpoint names it too). */
static const char *default_cwd(const struct sbx_plugin_sandbox *sb)
{
#ifdef SBX_LOCAL_BUBBLEWRAP
    return sb->cwd ? sb->cwd : "/";
#else
    return sb->root;
#endif
}

/*
 * The local part ("data") of a session state:
 *
 *     {"meta":"/tmp/sbx-local-XXXXXX","root":"/tmp/sbx-local-XXXXXX/root",
 *      "owns_root":true,"made_tmp":true,"supervisor_pid":1234,
 *      "supervisor_start":5678}
 *
 * Paths and the supervisor's identity only (pid and start time, field 22
 * of /proc/PID/stat; on bubblewrap the host's pid of the supervisor, which
 * is pid 1 inside, found through SO_PEERCRED on its socket at create): the sandbox's environment stays in the supervisor's
 * memory, which is why a resumed sandbox's commands still get it.
 */
static char *local_session_state(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                                 sbx_error **error)
{
    const char *op = "session_state";
    struct sbx_plugin_sandbox *sb = sandbox;
    (void)ctx;

    if (sandbox_destroyed(sb)) {
        fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s was destroyed", sb->id);
        return NULL;
    }
    json_object *o = json_object_new_object();
    if (!o)
        goto nomem;
    if (json_object_object_add(o, "meta", json_object_new_string(sb->meta)) < 0
        || json_object_object_add(o, "root", json_object_new_string(sb->root)) < 0
        || json_object_object_add(o, "owns_root", json_object_new_boolean(sb->owns_root)) < 0
        || json_object_object_add(o, "made_tmp", json_object_new_boolean(sb->made_tmp)) < 0
        || json_object_object_add(o, "supervisor_pid",
                                  json_object_new_int64((int64_t)sb->sup_pid)) < 0
        || json_object_object_add(o, "supervisor_start",
                                  json_object_new_int64((int64_t)sb->sup_start)) < 0
        || json_object_object_add(o, "lifetime", json_object_new_double(sb->lifetime)) < 0
        || json_object_object_add(o, "expires_at", json_object_new_double(sb->expires_at)) < 0)
        goto nomem;
#if !defined(SBX_LOCAL_SAFEHOUSE) && !defined(SBX_LOCAL_FAULTY)
    /* Where a command that runs to its end may go without the plugin host
     * (<sbx/plugin.h>, session_state): the supervisor's socket, in this
     * protocol's version, served by that process as that user; commands
     * start in the root (safehouse's go through its CLI: they go by the
     * plugin). A supervisor that did not answer at resume has none: its
     * calls are refused at once (connect_supervisor).
     *
     * Bubblewrap: the supervisor is pid 1 of the sandbox's namespaces;
     * pid, start and uid are its host ones (found through SO_PEERCRED at
     * create), and its commands start in the workdir inside (resolve_cwd).
     * Only a sandbox with no cgroup names one: with a memory limit the
     * plugin's exec_end_info reports the OOM kills its cgroup counts,
     * which a command sent there would lose. A sandbox with its own root
     * takes DESTROY there too ("meta": the caller renames that directory
     * to its trash name after DESTROYED, under its flock, as
     * local_destroy does, and the launcher's keeper removes it once the
     * namespace ended); one in a caller's root_dir is destroyed by the
     * plugin ("destroy": false), which waits for the namespace's end and
     * removes its mounts' leftovers there (local_destroy). */
#ifdef SBX_LOCAL_BUBBLEWRAP
    int publish = !sb->unresponsive && sb->sup_pid > 1 && !bwrap_cgroups_exist(sb->id);
#else
    int publish = !sb->unresponsive;
#endif
    const char *ep_cwd = default_cwd(sb);
    json_object *ep = publish ? json_object_new_object() : NULL;
    if (publish && (!ep || json_object_object_add(o, "exec_endpoint", ep) < 0)) {
        json_object_put(ep);
        goto nomem;
    }
    if (ep && (json_object_object_add(ep, "protocol", json_object_new_string("sbx-local")) < 0
        || json_object_object_add(ep, "version", json_object_new_int64(PROTO_VERSION)) < 0
        || json_object_object_add(ep, "socket", json_object_new_string(sb->sock)) < 0
        || json_object_object_add(ep, "pid", json_object_new_int64((int64_t)sb->sup_pid)) < 0
        || json_object_object_add(ep, "start", json_object_new_int64((int64_t)sb->sup_start)) < 0
        || json_object_object_add(ep, "uid", json_object_new_int64((int64_t)sb->sup_uid)) < 0
        || json_object_object_add(ep, "cwd", json_object_new_string(ep_cwd)) < 0
        || json_object_object_add(ep, "expires_at", json_object_new_double(sb->expires_at)) < 0
        || json_object_object_add(ep, "lifetime", json_object_new_double(sb->lifetime)) < 0))
        goto nomem;
#ifdef SBX_LOCAL_BUBBLEWRAP
    if (ep && (sb->owns_root && sb->meta
               ? json_object_object_add(ep, "meta", json_object_new_string(sb->meta)) < 0
               : json_object_object_add(ep, "destroy", json_object_new_boolean(0)) < 0))
        goto nomem;
#endif
#endif
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN
                                                      | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? host->alloc(strlen(s) + 1) : NULL;
    if (!out)
        goto nomem;
    strcpy(out, s);
    json_object_put(o);
    return out;

nomem:
    json_object_put(o);
    fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return NULL;
}

/* @v as JSON text for a message: plain, "/" not escaped (borrowed from @v). */
static const char *json_value_text(json_object *v)
{
    return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN
                                                 | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/** A string member of the local session data that is an absolute path
 *  (borrowed from @o), or NULL with an invalid_argument error. */
static const char *state_path(json_object *o, const char *key, sbx_error **error)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)
        || json_object_get_string(v)[0] != '/'
        || strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v)
        || (size_t)json_object_get_string_len(v) >= PATH_MAX) {
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, "resume",
                              "invalid session state of the local backend: \"%s\" must be "
                              "an absolute path (got %s)", key,
                              v ? json_value_text(v) : "nothing");
        add_context(err, "field", key);
        return NULL;
    }
    return json_object_get_string(v);
}

/** A member that is a boolean (stored in *@out), else an error. */
static int state_bool(json_object *o, const char *key, int *out, sbx_error **error)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_boolean)) {
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, "resume",
                              "invalid session state of the local backend: \"%s\" must be "
                              "true or false (got %s)", key,
                              v ? json_value_text(v) : "nothing");
        add_context(err, "field", key);
        return -1;
    }
    *out = json_object_get_boolean(v);
    return 0;
}

/** A member that is an integer in [@min, @max] (stored in *@out). */
static int state_int(json_object *o, const char *key, int64_t min, int64_t max, int64_t *out,
                     sbx_error **error)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int)
        || json_object_get_int64(v) < min || json_object_get_int64(v) > max) {
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, "resume",
                              "invalid session state of the local backend: \"%s\" must be "
                              "an integer from %lld to %lld (got %s)", key, (long long)min,
                              (long long)max, v ? json_value_text(v) : "nothing");
        add_context(err, "field", key);
        return -1;
    }
    *out = json_object_get_int64(v);
    return 0;
}

/** 1 when @sb's supervisor is stopped (SIGSTOP, a debugger), else 0. */
static int supervisor_stopped(const struct sbx_plugin_sandbox *sb)
{
    proto_proc st;
    return proto_proc_stat(sb->sup_pid, &st) == 0 && st.start == sb->sup_start
           && (st.state == 'T' || st.state == 't');
}

/**
 * Checks that @sb's socket is served by its recorded supervisor (the peer
 * of a connection to it is that pid and uid, SO_PEERCRED) and that it
 * answers PING with PONG of this protocol version. Returns 0; 1 when the
 * socket is gone, 2 when another process serves it (logged: the supervisor
 * itself lives, so destroy can still end it by pid); 3 when it does not
 * answer within @ctx's bound or PING_SECS (stopped, or hung: it lives, so
 * destroy can end it by pid); -1 with a cancelled / connection /
 * configuration error.
 */
static int check_supervisor_answers(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                                    sbx_error **error)
{
    const char *op = "resume";
    bound bd = make_bound(ctx, PING_SECS);
    int fd = -1;
    struct ucred peer;
    int e = connect_supervisor(sb, &bd, &fd, &peer);
    if (e == E_PEER) {
        LOG(SBX_LOG_WARNING, "the socket of sandbox %s is served by pid %d, not by its "
            "supervisor (pid %d): commands are refused; destroy ends it by pid", sb->id,
            (int)peer.pid, (int)sb->sup_pid);
        return 2;
    }
    if (gone_errno(e))
        return 1;
    if (e == ETIMEDOUT)
        return 3;
    if (e) {
        if (e == ECANCELED)
            io_fail(error, IO_CANCEL, op, sb->id, "connect");
        else
            fail(error, local_errno_code(e, SBX_ERROR_CONNECTION), op, "cannot connect to sandbox %s: %s", sb->id,
                 strerror(e));
        return -1;
    }
    proto_buf b;
    proto_buf_init(&b, PROTO_PING);
    int io = send_frame(fd, &b, NULL, 0, &bd);
    proto_buf_free(&b);
    uint32_t type = 0, len = 0;
    unsigned char *payload = NULL;
    if (io == IO_OK)
        io = read_frame(fd, &type, &payload, &len, &bd);
    close(fd);
    if (io == IO_TIMEOUT)
        return 3;
    if (io != IO_OK) {
        io_fail(error, io, op, sb->id, "ping");
        return -1;
    }
    proto_reader rd;
    proto_reader_init(&rd, payload, len);
    uint32_t version = proto_get_u32(&rd);
    int ok = type == PROTO_PONG && !rd.failed;
    free(payload);
    if (!ok) {
        fail(error, SBX_ERROR_CONNECTION, op,
             "unexpected answer to PING from the supervisor of sandbox %s", sb->id);
        return -1;
    }
    if (version != PROTO_VERSION) {
        fail(error, SBX_ERROR_CONFIGURATION, op,
             "the supervisor of sandbox %s speaks protocol %u, this plugin %u "
             "(mixed installations?)", sb->id, version, PROTO_VERSION);
        return -1;
    }
    return 0;
}

/** Bound of a record file's size. */
#define RECORD_MAX 65536

/**
 * Reads @sb's record (meta/record) into @sb: only when meta is a directory
 * (not a symlink) of this user that nobody else may write, and the record
 * a regular file of this user nobody else may write. Returns 0; -1
 * with not_found when the directory or record does not exist, else
 * invalid_argument naming the path and what is wrong with it.
 */
static int read_record(struct sbx_plugin_sandbox *sb, sbx_error **error)
{
    const char *op = "resume";
    uid_t me = geteuid();
    struct stat st;
    sbx_error *err;
    if (lstat(sb->meta, &st) < 0) {
        err = fail(error, errno == ENOENT || errno == ENOTDIR ? SBX_ERROR_NOT_FOUND
                   : SBX_ERROR_INVALID_ARGUMENT, op, "sandbox %s no longer exists (%s: %s)",
                   sb->id, sb->meta, strerror(errno));
        add_context(err, "path", sb->meta);
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 022)) {
        err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                   "refusing sandbox directory %s: %s (owner uid %u, mode %04o; this "
                   "library makes directories of uid %u that only their owner may "
                   "write)", sb->meta,
                   !S_ISDIR(st.st_mode) ? "not a directory" : st.st_uid != me
                   ? "owned by another user" : "group or others may write it",
                   (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)me);
        add_context(err, "path", sb->meta);
        return -1;
    }
    int dfd = open(sb->meta, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = dfd < 0 ? -1 : openat(dfd, "record", O_RDONLY | O_NOFOLLOW | O_NONBLOCK
                                                  | O_CLOEXEC);
    int e = errno;
    if (dfd >= 0)
        close(dfd);
    char *path = join_path(sb->meta, "record");
    if (!path) {
        if (fd >= 0)
            close(fd);
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    if (fd < 0) {
        err = fail(error, e == ENOENT ? SBX_ERROR_NOT_FOUND : SBX_ERROR_INVALID_ARGUMENT, op,
                   "sandbox %s has no usable record %s (%s): not made by this library, or "
                   "its creation did not finish", sb->id, path, strerror(e));
        add_context(err, "path", path);
        free(path);
        return -1;
    }
    char *text = NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != me || (st.st_mode & 022)
        || st.st_size <= 0 || st.st_size > RECORD_MAX) {
        err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                   "refusing record %s (owner uid %u, mode %04o, %lld bytes): this library "
                   "writes a regular file of uid %u that only its owner may write", path,
                   (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                   (long long)st.st_size, (unsigned)me);
        add_context(err, "path", path);
        goto bad;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto bad;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    text[got] = '\0';
    json_object *o = got == (size_t)st.st_size ? json_tokener_parse(text) : NULL;
    json_object *v;
    int64_t pid = 0, start = 0, uid = 0;
    int ok = o && json_object_is_type(o, json_type_object);
#define REC_INT(key, min, max, out)                                                       \
    (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int)       \
     && (out = json_object_get_int64(v)) >= (min) && out <= (max))
    ok = ok && REC_INT("supervisor_pid", 2, INT32_MAX, pid)
         && REC_INT("supervisor_start", 0, INT64_MAX, start)
         && REC_INT("supervisor_uid", 0, UINT32_MAX - 1, uid);
#undef REC_INT
    ok = ok && json_object_object_get_ex(o, "owns_root", &v)
         && json_object_is_type(v, json_type_boolean)
         && ((sb->owns_root = json_object_get_boolean(v)), 1)
         && json_object_object_get_ex(o, "made_tmp", &v)
         && json_object_is_type(v, json_type_boolean)
         && ((sb->made_tmp = json_object_get_boolean(v)), 1)
         && json_object_object_get_ex(o, "root", &v) && json_object_is_type(v, json_type_string)
         && json_object_get_string(v)[0] == '/'
         && strlen(json_object_get_string(v)) == (size_t)json_object_get_string_len(v);
    /* Lifetime and expiry (records of older versions have none). */
    json_object *lv;
    if (ok && json_object_object_get_ex(o, "lifetime", &lv)
        && (json_object_is_type(lv, json_type_double) || json_object_is_type(lv, json_type_int)))
        sb->lifetime = json_object_get_double(lv);
    if (ok && json_object_object_get_ex(o, "expires_at", &lv)
        && (json_object_is_type(lv, json_type_double) || json_object_is_type(lv, json_type_int)))
        sb->expires_at = json_object_get_double(lv);
    /* Exposed ports (records of older versions have none). */
    json_object *pv;
    if (ok && json_object_object_get_ex(o, "own_netns", &pv))
        ok = json_object_is_type(pv, json_type_boolean)
             && ((sb->own_netns = json_object_get_boolean(pv)), 1);
    if (ok && json_object_object_get_ex(o, "ports", &pv)) {
        ok = json_object_is_type(pv, json_type_array);
        for (size_t i = 0; ok && i < json_object_array_length(pv); i++) {
            json_object *pe = json_object_array_get_idx(pv, i);
            int64_t port = json_object_is_type(pe, json_type_int) ? json_object_get_int64(pe) : 0;
            int own = sb->own_netns;
            sb->own_netns = 0;
            ok = port >= 1 && port <= 65535 && ports_add(sb, (unsigned)port, op, NULL) == 0;
            sb->own_netns = own;
        }
    }
    json_object *uv, *gv;
    if (ok && json_object_object_get_ex(o, "user_uid", &uv)) {
        ok = json_object_is_type(uv, json_type_int) && json_object_object_get_ex(o, "user_gid", &gv)
             && json_object_is_type(gv, json_type_int) && json_object_get_int64(uv) >= 0
             && json_object_get_int64(uv) < (int64_t)(uid_t)-1 && json_object_get_int64(gv) >= 0
             && json_object_get_int64(gv) < (int64_t)(gid_t)-1;
        if (ok) {
            sb->user_mapped = 1;
            sb->user_uid = (uid_t)json_object_get_int64(uv);
            sb->user_gid = (gid_t)json_object_get_int64(gv);
        }
    }
    json_object *cv;
    if (ok && json_object_object_get_ex(o, "cwd", &cv)) {
        ok = json_object_is_type(cv, json_type_string) && json_object_get_string(cv)[0] == '/'
             && strlen(json_object_get_string(cv)) == (size_t)json_object_get_string_len(cv);
        if (ok) {
            free(sb->cwd);
            sb->cwd = strdup(json_object_get_string(cv));
            ok = sb->cwd != NULL;
        }
    }
    if (ok) {
        free(sb->root);
        free(sb->tmp);
        sb->root = strdup(json_object_get_string(v));
        sb->tmp = sb->root ? join_path(sb->root, "tmp") : NULL;
        sb->sup_pid = (pid_t)pid;
        sb->sup_start = (unsigned long long)start;
        sb->sup_uid = (uid_t)uid;
    }
    json_object_put(o);
    if (ok && sb->owns_root) {
        char *own = join_path(sb->meta, "root");
        ok = own && strcmp(own, sb->root) == 0;
        free(own);
    }
    if (!ok) {
        err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                   "refusing record %s: not a record this library writes", path);
        add_context(err, "path", path);
        goto bad;
    }
    if (!sb->root || !sb->tmp) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto bad;
    }
    free(text);
    free(path);
    close(fd);
    return 0;
bad:
    free(text);
    free(path);
    close(fd);
    return -1;
}

/** Removes what a sandbox whose supervisor is gone left (its directory,
 *  a tmp it made in a caller's workdir; bubblewrap: its cgroups and mount
 *  points). Only called with @sb filled from its record. */
static void remove_leftovers(struct sbx_plugin_sandbox *sb)
{
#ifdef SBX_LOCAL_BUBBLEWRAP
    bwrap_cgroups_remove(sb->id);
    if (!sb->owns_root)
        bwrap_clean_root(sb->root);
#endif
    if (remove_dirs(sb, "resume", NULL) < 0)
        LOG(SBX_LOG_WARNING, "cannot remove what sandbox %s left in %s: %s", sb->id, sb->meta,
            strerror(errno));
}

/*
 * Reattaches to a sandbox from the data local_session_state made. Of the
 * data only "meta" locates the sandbox; the rest comes from the record
 * create wrote there (read_record), and the data's copies of it must
 * agree: its supervisor_pid and supervisor_start, else not_found (that
 * sandbox is not this one); its root, owns_root and made_tmp, else
 * invalid_argument naming the field. The supervisor must still be that
 * process (pid and start time), else not_found, and what the sandbox left
 * on disk is removed. A supervisor that lives but whose socket is gone or
 * served by another process, that is stopped (SIGSTOP, a debugger: no
 * PING is sent), or that does not answer a PING within the call's bound or
 * PING_SECS (hung), resumes (logged), so that
 * destroy ends it by pid; commands are then refused (authentication, or
 * timeout for one that did not answer).
 */
static int local_resume(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                        const char *state_json, sbx_plugin_sandbox **sandbox,
                        sbx_error **error)
{
    const char *op = "resume";
    struct sbx_plugin_sandbox *sb = NULL;
    json_object *o = NULL;
    int64_t pid = 0, start = 0;
    int owns_root = 0, made_tmp = 0;
    (void)client;

    if (state_json)
        o = json_tokener_parse(state_json);
    if (!o || !json_object_is_type(o, json_type_object)) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
             "invalid session state of the local backend: its data is not a JSON object");
        goto fail;
    }
    const char *meta = state_path(o, "meta", error);
    const char *root = meta ? state_path(o, "root", error) : NULL;
    if (!root)
        goto fail;
    const char *base = strrchr(meta, '/') + 1;
    if (strncmp(base, ID_PREFIX, strlen(ID_PREFIX)) != 0 || !base[strlen(ID_PREFIX)]) {
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "invalid session state of the local backend: \"%s\" is not "
                              "a local sandbox directory (" ID_PREFIX "*)", meta);
        add_context(err, "field", "meta");
        goto fail;
    }
    if (state_bool(o, "owns_root", &owns_root, error) < 0
        || state_bool(o, "made_tmp", &made_tmp, error) < 0
        || state_int(o, "supervisor_pid", 2, INT32_MAX, &pid, error) < 0
        || state_int(o, "supervisor_start", 0, INT64_MAX, &start, error) < 0)
        goto fail;
    sb = calloc(1, sizeof(*sb));
    if (!sb)
        goto nomem;
    pthread_mutex_init(&sb->lock, NULL);
    if (!(sb->id = strdup(base)) || !(sb->meta = strdup(meta))
        || !(sb->sock = join_path(sb->meta, "sock")))
        goto nomem;
    /* A sandbox whose lifetime is over (the state says when) is gone with
     * its directory: say so. */
    json_object *lv;
    double st_lifetime = 0, st_expires = 0;
    if (json_object_object_get_ex(o, "lifetime", &lv))
        st_lifetime = json_object_get_double(lv);
    if (json_object_object_get_ex(o, "expires_at", &lv))
        st_expires = json_object_get_double(lv);
    struct stat mst;
    if (lifetime_over(st_expires) && lstat(sb->meta, &mst) < 0 && errno == ENOENT) {
        sbx_error *err = expired_fail(error, op, sb->id, st_expires, st_lifetime, "");
        add_context(err, "path", sb->meta);
        goto fail;
    }
    if (read_record(sb, error) < 0)
        goto fail;
    if ((pid_t)pid != sb->sup_pid || (unsigned long long)start != sb->sup_start) {
        sbx_error *err = fail(error, SBX_ERROR_NOT_FOUND, op,
                              "sandbox %s no longer exists as this session state says (its "
                              "supervisor is pid %d started at %llu, the state names pid %d "
                              "started at %lld)", sb->id, (int)sb->sup_pid, sb->sup_start,
                              (int)pid, (long long)start);
        add_context(err, "path", sb->meta);
        goto fail;
    }
    const char *bad = strcmp(root, sb->root) != 0 ? "root"
                      : owns_root != sb->owns_root ? "owns_root"
                      : made_tmp != sb->made_tmp ? "made_tmp" : NULL;
    if (bad) {
        json_object *v = NULL;
        json_object_object_get_ex(o, bad, &v);
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "invalid session state of the local backend: \"%s\" is %s, but "
                              "sandbox %s was made with root \"%s\", owns_root %s, made_tmp %s",
                              bad, json_value_text(v), sb->id, sb->root,
                              sb->owns_root ? "true" : "false", sb->made_tmp ? "true" : "false");
        add_context(err, "field", bad);
        goto fail;
    }
#ifdef SBX_LOCAL_SAFEHOUSE
    if (!(sb->wrapper = safehouse_find(op, error)))
        goto fail;
#endif
    /* A stopped supervisor cannot answer: no PING to wait PING_SECS for. */
    int answers = !proto_proc_alive(sb->sup_pid, sb->sup_start) ? 1
                  : supervisor_stopped(sb) ? 3
                  : check_supervisor_answers(sb, ctx, error);
    if (answers < 0)
        goto fail;
    /* A socket that refuses: the supervisor is gone or on its way out (a
     * dying bubblewrap init lingers while its namespace is torn down). */
    if (answers == 1 && wait_supervisor_gone(sb, GONE_SECS) == 0) {
        sbx_error *err = fail(error, SBX_ERROR_NOT_FOUND, op,
                              "sandbox %s no longer exists (its supervisor, pid %d, is gone; "
                              "what it left on disk is removed)", sb->id, (int)sb->sup_pid);
        add_context(err, "path", sb->meta);
        remove_leftovers(sb);
        goto fail;
    }
    if (answers == 1)
        LOG(SBX_LOG_WARNING, "sandbox %s: its supervisor (pid %d) lives but its socket %s "
            "refuses connections; destroy ends it by pid", sb->id, (int)sb->sup_pid, sb->sock);
    if (answers == 3) {
        /* Resumed all the same, so that destroy can end it; every other
         * call is refused (a timeout, as this ping's). */
        LOG(SBX_LOG_WARNING, "sandbox %s: its supervisor (pid %d%s) did not answer; calls "
            "are refused as timed out, destroy ends it by pid", sb->id, (int)sb->sup_pid,
            supervisor_stopped(sb) ? ", stopped" : "");
        sb->unresponsive = 1;
    }
    /* The resuming process becomes one of its owners (a detached sandbox
     * ignores that). */
    if (answers == 0) {
        int pfd = owner_pidfd();
        if (pfd < 0) {
            int e = errno;
            fail(error, e == EMFILE || e == ENFILE || e == ENOMEM ? SBX_ERROR_RESOURCE_EXHAUSTED
                                                                  : SBX_ERROR_CREATION_FAILED,
                 op, "no pidfd of the owning process: %s", strerror(e));
            goto fail;
        }
        int r = call_simple(sb, PROTO_OWN, pfd, PROTO_OWNED, ctx, op, error);
        close(pfd);
        if (r < 0)
            goto fail;
    }
    json_object_put(o);
    LOG(SBX_LOG_DEBUG, "resumed %s (root %s, supervisor pid %d)", sb->id, sb->root,
        (int)sb->sup_pid);
    *sandbox = sb;
    return 0;

nomem:
    fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    if (sb) {
        pthread_mutex_destroy(&sb->lock);
        sandbox_free_fields(sb);
        free(sb);
    }
    json_object_put(o);
    return -1;
}

/* Detaches @sandbox: from now on only its lifetime and destroy end it, not
 * the end of its owners. not_found when it is gone (naming the expiry). */
static int local_detach(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, sbx_error **error)
{
    struct sbx_plugin_sandbox *sb = sandbox;
    if (sandbox_destroyed(sb)) {
        fail(error, SBX_ERROR_NOT_FOUND, "detach", "sandbox %s was destroyed", sb->id);
        return -1;
    }
    return call_simple(sb, PROTO_DETACH, -1, PROTO_DETACHED, ctx, "detach", error);
}

/* ------------------------------------------------------------------------ */
/* Slots: exposed ports                                                      */
/* ------------------------------------------------------------------------ */

/** not_found when @sb was destroyed or its lifetime is over; else 0. */
static int ports_check(struct sbx_plugin_sandbox *sb, const char *op, sbx_error **error)
{
    if (sandbox_destroyed(sb)) {
        fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s was destroyed", sb->id);
        return -1;
    }
    return local_check_lifetime(sb, op, error);
}

/** expose_port / unexpose_port: the set changed and the record rewritten
 *  (restored when the record cannot be written). */
static int ports_change(struct sbx_plugin_sandbox *sb, unsigned port, int add, const char *op,
                        sbx_error **error)
{
    if (ports_check(sb, op, error) < 0)
        return -1;
    pthread_mutex_lock(&sb->lock);
    int rc = 0;
    int had = ports_has(sb, port);
    if (add && !had) {
        rc = ports_add(sb, port, op, error);
        if (rc == 0 && write_record(sb, 1, AT_FDCWD, op, error) < 0) {
            for (size_t i = 0; i < sb->n_ports; i++)
                if (sb->ports[i] == port) {
                    memmove(sb->ports + i, sb->ports + i + 1,
                            (sb->n_ports - i - 1) * sizeof(*sb->ports));
                    sb->n_ports--;
                    break;
                }
            rc = -1;
        }
    } else if (!add && had) {
        for (size_t i = 0; i < sb->n_ports; i++)
            if (sb->ports[i] == port) {
                memmove(sb->ports + i, sb->ports + i + 1,
                        (sb->n_ports - i - 1) * sizeof(*sb->ports));
                sb->n_ports--;
                break;
            }
        if (write_record(sb, 1, AT_FDCWD, op, error) < 0) {
            ports_add(sb, port, op, NULL);
            rc = -1;
        }
    } else if (add && sb->own_netns) {
        own_netns_fail(error, port, op);
        rc = -1;
    }
    pthread_mutex_unlock(&sb->lock);
    return rc;
}

static int local_expose_port(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                             unsigned port, sbx_error **error)
{
    (void)ctx;
    return ports_change(sandbox, port, 1, "expose_port", error);
}

static int local_unexpose_port(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                               unsigned port, sbx_error **error)
{
    (void)ctx;
    return ports_change(sandbox, port, 0, "unexpose_port", error);
}

static char *local_resolve_port(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                                unsigned port, sbx_error **error)
{
    const char *op = "resolve_port";
    struct sbx_plugin_sandbox *sb = sandbox;
    (void)ctx;
    if (ports_check(sb, op, error) < 0)
        return NULL;
    pthread_mutex_lock(&sb->lock);
    int has = ports_has(sb, port);
    pthread_mutex_unlock(&sb->lock);
    char num[16];
    snprintf(num, sizeof(num), "%u", port);
    if (!has) {
        sbx_error *err = fail(error, SBX_ERROR_NOT_FOUND, op,
                              "port %u of sandbox %s is not exposed", port, sb->id);
        add_context(err, "port", num);
        return NULL;
    }
    char *out = host->alloc(sizeof("127.0.0.1:65535"));
    if (!out) {
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    snprintf(out, sizeof("127.0.0.1:65535"), "127.0.0.1:%u", port);
    return out;
}

static char *local_list_ports(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                              sbx_error **error)
{
    const char *op = "list_ports";
    struct sbx_plugin_sandbox *sb = sandbox;
    (void)ctx;
    if (ports_check(sb, op, error) < 0)
        return NULL;
    pthread_mutex_lock(&sb->lock);
    char *out = host->alloc(sb->n_ports * 6 + 1);
    if (out) {
        size_t len = 0;
        out[0] = '\0';
        for (size_t i = 0; i < sb->n_ports; i++)
            len += (size_t)sprintf(out + len, i ? " %u" : "%u", (unsigned)sb->ports[i]);
    }
    pthread_mutex_unlock(&sb->lock);
    if (!out)
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return out;
}

/* ------------------------------------------------------------------------ */
/* Slots: exec                                                               */
/* ------------------------------------------------------------------------ */

/** The path the supervisor opens for sandbox path @cwd (new string in
 *  *@out): resolved beneath the root by the file slots' rule
 *  (local_resolve_dir, whose errors it reports); inside bubblewrap, where
 *  the root is /, as given, and the workdir when none is. Returns 0 or -1. */
static int resolve_cwd(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cwd,
                       char **out, sbx_error **error)
{
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* Inside, the root is /; commands start in the workdir. */
    const char *root = "/";
    (void)ctx;
    (void)error;
    if (!cwd || !*cwd)
        cwd = sb->cwd;
#else
    const char *root = sb->root;
    if (cwd && *cwd)
        return local_resolve_dir(sb, ctx, "exec", cwd, out, error);
#endif
    *out = !cwd || !*cwd ? strdup(root) : join_path(root, cwd);
    if (!*out)
        fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "exec", "out of memory");
    return *out ? 0 : -1;
}

/** Stores the error of an exec that could not start: the supervisor's
 *  ERROR (@kind PROTO_ERR_*, @err_no, @msg or NULL) for the cwd @shown (as
 *  the caller gave it) in sandbox @id. */
static void start_fail(sbx_error **error, uint32_t kind, int err_no, const char *msg,
                       const char *shown, const char *id)
{
    const char *op = "exec";
    if (kind == PROTO_ERR_CWD) {
        sbx_error *err;
        if (err_no == ENOENT || err_no == ENOTDIR)
            err = fail(error, SBX_ERROR_NOT_FOUND, op,
                       "working directory \"%s\" does not exist in sandbox %s", shown, id);
        else
            err = fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                       "working directory \"%s\" cannot be used in sandbox %s: %s",
                       shown, id, strerror(err_no));
        add_context(err, "path", shown);
    } else if (kind == PROTO_ERR_DEADLINE) {
        /* Read only after its timeout's end: it never ran. */
        sbx_error *err = fail(error, SBX_ERROR_TIMEOUT, op, "the supervisor of sandbox %s "
                              "took the command in only after its timeout: it did not start "
                              "(%s)", id, msg ? msg : "refused");
        add_context(err, "started", "no");
        add_context(err, "reason", "start_deadline");
    } else {
        fail(error, SBX_ERROR_EXECUTION_FAILED, op, "supervisor of sandbox %s: %s", id,
             msg ? msg : "request refused");
    }
}

/** Stores the timeout error of an exec in sandbox @id whose supervisor
 *  (@pid) did not answer a request for @secs: @not_started when the
 *  command is known never to start (outcome failed), else it may have
 *  (outcome unknown). */
static void stall_fail(sbx_error **error, const char *op, const char *id, pid_t pid,
                       double secs, int not_started)
{
    char msg[512], num[16];
    proto_stall_message(msg, sizeof(msg), id, pid, secs, not_started);
    sbx_error *err = fail(error, SBX_ERROR_TIMEOUT, op, "%s", msg);
    add_context(err, "started", not_started ? "no" : "unknown");
    snprintf(num, sizeof(num), "%d", (int)pid);
    add_context(err, "supervisor_pid", num);
    if (!not_started)
        set_outcome_unknown(err);
}

/** 1 when @user names the uid the sandbox's commands run as (the
 *  supervisor's: its name in this host's passwd, or the number), else 0.
 *  Commands cannot run as anyone else here (no setuid in the supervisor;
 *  bubblewrap maps that one uid only). */
static int is_own_user(const struct sbx_plugin_sandbox *sb, const char *user)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(user, &end, 10);
    uid_t own = sb->user_mapped ? sb->user_uid : sb->sup_uid;
    if (*user >= '0' && *user <= '9' && !*end && errno == 0)
        return n == (unsigned long)own;
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* A create-time user's name is the sandbox's: its own /etc/passwd, as
     * its init sees it. */
    if (sb->user_mapped) {
        char path[64];
        uid_t u;
        gid_t g;
        snprintf(path, sizeof(path), "/proc/%d/root/etc/passwd", (int)sb->sup_pid);
        return bwrap_resolve_user(path, user, &u, &g, NULL, NULL) == 0 && u == own;
    }
#endif
    struct passwd pw, *res = NULL;
    char buf[1024];
    return getpwnam_r(user, &pw, buf, sizeof(buf), &res) == 0 && res
           && res->pw_uid == sb->sup_uid;
}

static int local_exec_start(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                            const sbx_plugin_exec_request *request,
                            sbx_plugin_process **process, sbx_error **error)
{
    const char *op = "exec";
    struct sbx_plugin_sandbox *sb = sandbox;
    int fd = -1, own[PROTO_EXEC_FDS] = { -1, -1, -1 };
    char *cwd = NULL;
    unsigned char *payload = NULL;
    proto_buf b = { 0 };
    int rc = -1;

    if (!request || request->struct_size < offsetof(sbx_plugin_exec_request, stderr_fd)
                                           + sizeof(int)) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "exec request missing or too short");
        return -1;
    }
#ifdef SBX_LOCAL_FAULTY
    switch (sbx_fault_exec(request, ctx)) {
    case 0:
        break;
    case 2:     /* a plugin that gives no code: the library supplies one */
        fail(error, FAULT_NO_CODE, op, "a failure without a code (fault plugin)");
        return -1;
    case 3:     /* a plugin that stores no error at all */
        return -1;
    default: {
        sbx_error *err = fail(error, SBX_ERROR_TIMEOUT, op, "call cancelled (fault plugin)");
        set_outcome_unknown(err);
        return -1;
    }
    }
#endif
    if (!request->shell == !(request->argv && request->argv[0])) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
             "exactly one of argv (non-empty) and shell must be set");
        return -1;
    }
    if (request->user && !is_own_user(sb, request->user)) {
        struct passwd pw, *res = NULL;
        char pwbuf[1024];
        if (!sb->user_mapped)
            getpwuid_r(sb->sup_uid, &pw, pwbuf, sizeof(pwbuf), &res);
        sbx_error *err = fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                              BACKEND " backend runs every command as uid %u (%s); user "
                              "\"%s\" cannot be chosen",
                              (unsigned)(sb->user_mapped ? sb->user_uid : sb->sup_uid),
                              sb->user_mapped ? "the sandbox's user"
                              : res ? res->pw_name : "no name", request->user);
        add_context(err, "user", request->user);
        return -1;
    }
    if (!request->tty_rows != !request->tty_cols || request->tty_rows > UINT16_MAX
        || request->tty_cols > UINT16_MAX) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
             "terminal size %u rows x %u columns is invalid (both 1..65535, or both 0 "
             "for no terminal)", request->tty_rows, request->tty_cols);
        return -1;
    }
    if (request->stdin_fd < -1) {
        fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
             "local backend does not take interactive stdin");
        return -1;
    }
    if (sandbox_destroyed(sb)) {
        fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s was destroyed", sb->id);
        return -1;
    }
    /* Its supervisor ends it a moment after the lifetime: nothing starts
     * meanwhile. */
    if (local_check_lifetime(sb, op, error) < 0)
        return -1;

    /* A fourth, the exit socket (SBX_PLUGIN_EXEC_EXIT_FD), rides along with
     * EXEC_QUIET: the reaper reports the end on it too. */
    int fds[PROTO_EXEC_FDS_MAX] = { request->stdin_fd, request->stdout_fd, request->stderr_fd,
                                    -1 };
    int nfds = PROTO_EXEC_FDS;
    for (int i = 0; i < PROTO_EXEC_FDS; i++) {
        if (fds[i] >= 0)
            continue;
        own[i] = open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
        if (own[i] < 0) {
            fail(error, local_errno_code(errno, SBX_ERROR_EXECUTION_FAILED), op,
                 "cannot open /dev/null: %s", strerror(errno));
            goto out;
        }
        fds[i] = own[i];
    }
    if (resolve_cwd(sb, ctx, request->cwd, &cwd, error) < 0)
        goto out;
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* The memory limit's kills so far: one more at the end is this
     * command's (exec_end_info). */
    uint64_t oom_before = 0;
    int oom_known = bwrap_oom_kills(sb->id, &oom_before) == 0;
#endif

    /* A caller that runs the command to its end needs no STARTED: a
     * terminal's exec still gets it (resizes follow the start). */
    int quiet = request->struct_size >= offsetof(sbx_plugin_exec_request, flags)
                                        + sizeof(request->flags)
                && (request->flags & SBX_PLUGIN_EXEC_START_UNCONFIRMED) && !request->tty_rows;
    proto_buf_init(&b, quiet ? PROTO_EXEC_QUIET : PROTO_EXEC);
    if (quiet && request->struct_size >= offsetof(sbx_plugin_exec_request, exit_fd)
                                         + sizeof(request->exit_fd)
        && (request->flags & SBX_PLUGIN_EXEC_EXIT_FD) && request->exit_fd >= 0)
        fds[nfds++] = request->exit_fd;
#ifdef SBX_LOCAL_SAFEHOUSE
    char *workdir_arg = NULL;
    if (asprintf(&workdir_arg, "--workdir=%s", sb->root) < 0)
        goto nomem;
    const char *wrap[] = { sb->wrapper, workdir_arg, "--env", "--" };
    const uint32_t nwrap = 4;
#else
    const char *const *wrap = NULL;
    const uint32_t nwrap = 0;
#endif
    uint32_t cmd_argc = 3;
    if (!request->shell)
        for (cmd_argc = 0; request->argv[cmd_argc]; cmd_argc++)
            ;
    proto_put_u32(&b, nwrap + cmd_argc);
    for (uint32_t i = 0; i < nwrap; i++)
        proto_put_str(&b, wrap[i]);
#ifdef SBX_LOCAL_SAFEHOUSE
    free(workdir_arg);
#endif
    if (request->shell) {
        proto_put_str(&b, "/bin/sh");
        proto_put_str(&b, "-c");
        proto_put_str(&b, request->shell);
    } else {
        for (uint32_t i = 0; i < cmd_argc; i++)
            proto_put_str(&b, request->argv[i]);
    }
    uint32_t envc = 0;
    while (request->env && request->env[envc])
        envc++;
    proto_put_u32(&b, envc);
    for (uint32_t i = 0; i < envc; i++)
        proto_put_str(&b, request->env[i]);
    proto_put_str(&b, cwd);
    if (request->tty_rows > 0) {
        proto_put_u32(&b, request->tty_rows);
        proto_put_u32(&b, request->tty_cols);
        proto_put_u32(&b, request->stdin_fd >= 0 ? PROTO_TTY_STDIN : 0);
    }
    /* Nothing starts after the caller stops waiting for it (the end of its
     * timeout, or the call's deadline): the supervisor refuses a request it
     * reads whole later (proto.h, EXEC). */
    double start_by = request->struct_size >= offsetof(sbx_plugin_exec_request, start_deadline)
                                              + sizeof(request->start_deadline)
                      ? request->start_deadline : 0;
    if (ctx && ctx->struct_size >= offsetof(sbx_call_ctx, deadline) + sizeof(double)
        && ctx->deadline > 0 && (start_by <= 0 || ctx->deadline < start_by))
        start_by = ctx->deadline;
    if (start_by > 0)
        proto_put_u64(&b, (uint64_t)(start_by * 1e9));
    else
        start_by = 0;
    if (b.failed) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
             "command and environment too large (limit %u bytes)", PROTO_MAX_FRAME);
        goto out;
    }

    bound bd = make_bound(ctx, REPLY_SECS);
    struct ucred peer;
    int e = connect_supervisor(sb, &bd, &fd, &peer);
    if ((e == E_PEER && !proto_proc_alive(sb->sup_pid, sb->sup_start))
        || (e && e != E_PEER && gone_errno(e))) {
        if (lifetime_over(sb->expires_at))
            expired_fail(error, op, sb->id, sb->expires_at, sb->lifetime, "");
        else if (e == E_PEER)
            fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s no longer exists (its "
                 "supervisor, pid %d, is gone)", sb->id, (int)sb->sup_pid);
        else
            fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s no longer exists", sb->id);
        goto out;
    }
    if (e == E_PEER) {
        peer_fail(error, op, sb, &peer);
        goto out;
    }
    if (e) {
        if (gone_errno(e))
            fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s no longer exists", sb->id);
        else if (e == ETIMEDOUT || e == ECANCELED)
            io_fail(error, e == ETIMEDOUT ? IO_TIMEOUT : IO_CANCEL, op, sb->id, "connect");
        else
            fail(error, local_errno_code(e, SBX_ERROR_CONNECTION), op, "cannot connect to sandbox %s: %s", sb->id,
                 strerror(e));
        goto out;
    }
    double sent_at = mono_now();
    int io = send_frame(fd, &b, fds, nfds, &bd);
    uint32_t type = 0, len = 0;
    /* Unconfirmed, the answer (EXIT, or ERROR when nothing could start) is
     * exec_wait's to read: the caller waits for one frame, not two. A
     * supervisor still stopped PROTO_ANSWER_SECS after start_by gets no
     * longer wait: a request it has not read by then never starts. */
    if (io == IO_OK && !quiet && start_by > 0 && start_by + PROTO_ANSWER_SECS < bd.until) {
        bound sb_bd = bd;
        sb_bd.until = start_by + PROTO_ANSWER_SECS;
        int w = wait_io(fd, POLLIN, &sb_bd);
        if (w == IO_TIMEOUT && mono_now() < bd.until && proto_proc_stopped(sb->sup_pid)) {
            stall_fail(error, op, sb->id, sb->sup_pid,
                       round((mono_now() - sent_at) * 10.0) / 10.0, proto_unread_bytes(fd) > 0);
            goto out;
        }
        if (w == IO_CANCEL || w == IO_ERR)
            io = w;
    }
    if (io == IO_OK && !quiet)
        io = read_frame(fd, &type, &payload, &len, &bd);
    if (io != IO_OK) {
        sbx_error *err = io == IO_EOF && lifetime_over(sb->expires_at)
            ? expired_fail(error, op, sb->id, sb->expires_at, sb->lifetime, "")
            : io_fail(error, io, op, sb->id, "exec");
        set_outcome_unknown(err);
        goto out;
    }
    int32_t pid = 0;
    if (!quiet) {
        proto_reader rd;
        proto_reader_init(&rd, payload, len);
        if (type == PROTO_ERROR) {
            uint32_t kind = proto_get_u32(&rd);
            int err_no = proto_get_i32(&rd);
            const char *msg = proto_get_str(&rd);
            start_fail(error, kind, err_no, msg, request->cwd ? request->cwd : default_cwd(sb),
                       sb->id);
            goto out;
        }
        pid = proto_get_i32(&rd);
        if (type != PROTO_STARTED || rd.failed || pid <= 0) {
            fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                 "unexpected answer from the supervisor of sandbox %s", sb->id);
            goto out;
        }
    }

    struct sbx_plugin_process *p = calloc(1, sizeof(*p));
    if (!p || !(p->sandbox_id = strdup(sb->id))
        || (quiet && !(p->cwd_shown = strdup(request->cwd ? request->cwd
                                                           : default_cwd(sb))))) {
        if (p)
            free(p->sandbox_id);
        free(p);
        goto nomem;
    }
#ifdef SBX_LOCAL_BUBBLEWRAP
    p->oom_known = oom_known;
    p->oom_before = oom_before;
#endif
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->wlock, NULL);
    p->fd = fd;
    p->pid = pid;
    p->exit_fd_given = nfds > PROTO_EXEC_FDS;
    p->tty = request->tty_rows > 0;
    p->expires_at = sb->expires_at;
    p->lifetime = sb->lifetime;
    p->sup_pid = sb->sup_pid;
    p->start_by = start_by;
    fd = -1;
    *process = p;
    rc = 0;
    goto out;

nomem:
    fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
out:
    /* Closing the connection before STARTED kills what it started. */
    if (fd >= 0)
        close(fd);
    for (int i = 0; i < PROTO_EXEC_FDS; i++)
        if (own[i] >= 0)
            close(own[i]);
    proto_buf_free(&b);
    free(payload);
    free(cwd);
    return rc;
}

/**
 * Waits (within @bd) for one frame from the supervisor and takes it in.
 * Returns IO_OK after a frame, or when another thread took it first.
 */
static int proc_pump(struct sbx_plugin_process *p, const bound *bd)
{
    int r = wait_io(p->fd, POLLIN, bd);
    if (r != IO_OK)
        return r;
    pthread_mutex_lock(&p->lock);
    if (p->lost) {
        pthread_mutex_unlock(&p->lock);
        return IO_EOF;
    }
    struct pollfd pf = { .fd = p->fd, .events = POLLIN };
    if (poll(&pf, 1, 0) <= 0) {
        pthread_mutex_unlock(&p->lock);
        return IO_OK;
    }
    uint32_t type, len;
    unsigned char *payload = NULL;
    bound fb = make_bound(NULL, FRAME_SECS);
    r = read_frame(p->fd, &type, &payload, &len, &fb);
    if (r == IO_OK) {
        proto_reader rd;
        proto_reader_init(&rd, payload, len);
        if (type == PROTO_EXIT) {
            int code = proto_get_i32(&rd);
            if (!rd.failed) {
                p->exited = 1;
                p->code = code;
            }
        } else if (type == PROTO_KILLED) {
            p->kills_acked++;
        } else if (type == PROTO_RESIZED) {
            int e = proto_get_i32(&rd);
            p->resize_errno = rd.failed ? EPROTO : e;
            p->resizes_acked++;
        } else if (type == PROTO_ERROR && p->cwd_shown && !p->exited) {
            /* An unconfirmed exec that could not start: nothing runs. */
            p->err_kind = proto_get_u32(&rd);
            p->err_no = proto_get_i32(&rd);
            const char *msg = proto_get_str(&rd);
            p->err_msg = msg ? strdup(msg) : NULL;
            p->start_failed = 1;
            p->lost = 1;
        }
        free(payload);
    } else {
        /* A torn or refused frame leaves the stream unusable. */
        p->lost = 1;
        r = IO_EOF;
    }
    pthread_mutex_unlock(&p->lock);
    return r;
}

static int local_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                           int timeout_ms, int *exit_code, sbx_error **error)
{
    struct sbx_plugin_process *p = process;
    bound bd = make_bound(ctx, timeout_ms < 0 ? -1.0 : timeout_ms / 1000.0);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int exited = p->exited, lost = p->lost, code = p->code;
        int start_failed = p->start_failed, stalled = p->stalled;
        pthread_mutex_unlock(&p->lock);
        if (exited) {
            if (exit_code)
                *exit_code = code;
            return 1;
        }
        if (start_failed) {
            start_fail(error, p->err_kind, p->err_no, p->err_msg, p->cwd_shown, p->sandbox_id);
            return -1;
        }
        if (stalled) {
            stall_fail(error, "exec_wait", p->sandbox_id, p->sup_pid, p->stall_secs,
                       p->not_started);
            return -1;
        }
        if (lost) {
            sbx_error *err = lifetime_over(p->expires_at)
                ? expired_fail(error, "exec_wait", p->sandbox_id, p->expires_at, p->lifetime,
                               " while the command ran")
                : fail(error, SBX_ERROR_NOT_FOUND, "exec_wait",
                       "sandbox %s ended while the command ran", p->sandbox_id);
            set_outcome_unknown(err);
            return -1;
        }
        int r = proc_pump(p, &bd);
        if (r == IO_OK || r == IO_EOF)
            continue;
        if (r == IO_TIMEOUT && !deadline_passed(&bd)) {
            pthread_mutex_lock(&p->lock);
            exited = p->exited;
            code = p->code;
            pthread_mutex_unlock(&p->lock);
            if (exited && exit_code)
                *exit_code = code;
            return exited ? 1 : 0;
        }
        io_fail(error, r, "exec_wait", p->sandbox_id, "wait");
        return -1;
    }
}

#ifdef SBX_LOCAL_BUBBLEWRAP
/* OOM_KILLED when the sandbox cgroup's OOM-kill counter rose since the
 * command started (read from the host: the cgroup outlives the command). */
static int bwrap_exec_end_info(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                               uint64_t *flags, sbx_error **error)
{
    struct sbx_plugin_process *p = process;
    uint64_t now = 0;

    *flags = 0;
    if (p->oom_known && bwrap_oom_kills(p->sandbox_id, &now) == 0 && now > p->oom_before)
        *flags |= SBX_PLUGIN_EXEC_OOM_KILLED;
    return 0;
}
#endif

static int local_exec_event_fd(sbx_plugin_process *process)
{
    return process->fd;
}

/**
 * Sends the frame @b (KILL or RESIZE) on @p's connection unless it is lost
 * (@skip_exited: or the command ended, for a RESIZE) and waits (within
 * @bd) for its ack: *@acked (kills_acked or resizes_acked, counted by
 * proc_pump) reaching the count *@sent had once this one was counted in.
 * Returns IO_OK once acked, IO_EOF when the connection is lost (the
 * supervisor ended the tree), IO_STALL when the supervisor does not
 * answer (stopped PROTO_ANSWER_SECS after the send: it cannot until
 * continued; or the frame still unread at the end of @bd: hung, as a
 * serving one reads it at once, however long the work then takes), or the
 * send's or wait's IO_* failure.
 */
static int proc_request(struct sbx_plugin_process *p, proto_buf *b, unsigned *sent,
                        const unsigned *acked, int skip_exited, const bound *bd)
{
    pthread_mutex_lock(&p->wlock);
    pthread_mutex_lock(&p->lock);
    int lost = p->lost || (skip_exited && p->exited), stalled = p->stalled;
    /* The request, alone on the connection so far, still unread at its
     * start_by: the supervisor will refuse it (proto.h, EXEC). */
    if (!lost && !stalled && p->kills_sent == 0 && p->resizes_sent == 0 && p->start_by > 0
        && mono_now() >= p->start_by && proto_unread_bytes(p->fd) > 0)
        p->not_started = 1;
    unsigned target = ++*sent;
    pthread_mutex_unlock(&p->lock);
    int r = lost ? IO_EOF : stalled ? IO_STALL : send_frame(p->fd, b, NULL, 0, bd);
    pthread_mutex_unlock(&p->wlock);
    if (r != IO_OK)
        return r;
    double sent_at = mono_now();
    bound stall = *bd;
    if (sent_at + PROTO_ANSWER_SECS < stall.until)
        stall.until = sent_at + PROTO_ANSWER_SECS;
    else
        stall.until = -1;       /* the caller's bound comes first */
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int done = *acked >= target;
        lost = p->lost;
        pthread_mutex_unlock(&p->lock);
        if (done)
            return IO_OK;
        if (lost)
            return IO_EOF;
        r = proc_pump(p, stall.until >= 0 ? &stall : bd);
        int stopped = 0, hung = 0;
        if (r == IO_TIMEOUT && stall.until >= 0 && mono_now() < bd->until) {
            stall.until = -1;
            stopped = proto_proc_stopped(p->sup_pid);
            if (!stopped)
                continue;
        } else if (r == IO_TIMEOUT) {
            hung = proto_unread_bytes(p->fd) > 0;
        }
        if (stopped || hung) {
            pthread_mutex_lock(&p->lock);
            p->stalled = 1;
            p->stall_secs = round((mono_now() - sent_at) * 10.0) / 10.0;
            pthread_mutex_unlock(&p->lock);
            return IO_STALL;
        }
        if (r != IO_OK && r != IO_EOF)
            return r;
    }
}

/** Sends KILL(@sig) and waits (within @bd) for the supervisor's ack. */
static int proc_kill(struct sbx_plugin_process *p, int sig, const bound *bd)
{
    proto_buf b;
    proto_buf_init(&b, PROTO_KILL);
    proto_put_i32(&b, sig);
    int r = proc_request(p, &b, &p->kills_sent, &p->kills_acked, 0, bd);
    proto_buf_free(&b);
    return r;
}

static int local_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int signal,
                           sbx_error **error)
{
    struct sbx_plugin_process *p = process;
    if (signal <= 0 || signal >= NSIG) {
        char num[16];
        snprintf(num, sizeof(num), "%d", signal);
        sbx_error *err = fail(error, SBX_ERROR_INVALID_ARGUMENT, "exec_kill",
                              "invalid signal %d", signal);
        add_context(err, "signal", num);
        return -1;
    }
    bound bd = make_bound(ctx, KILL_ACK_SECS);
    int r = proc_kill(p, signal, &bd);
    /* A connection that is gone means the supervisor ended the tree. */
    if (r == IO_OK || r == IO_EOF)
        return 0;
    if (r == IO_STALL)
        stall_fail(error, "exec_kill", p->sandbox_id, p->sup_pid, p->stall_secs,
                   p->not_started);
    else
        io_fail(error, r, "exec_kill", p->sandbox_id, "kill");
    return -1;
}

/** Sends RESIZE and waits (within @bd) for RESIZED; *@err_no gets its errno. */
static int proc_resize(struct sbx_plugin_process *p, unsigned rows, unsigned cols,
                       const bound *bd, int *err_no)
{
    proto_buf b;
    proto_buf_init(&b, PROTO_RESIZE);
    proto_put_u32(&b, rows);
    proto_put_u32(&b, cols);
    int r = proc_request(p, &b, &p->resizes_sent, &p->resizes_acked, 1, bd);
    proto_buf_free(&b);
    pthread_mutex_lock(&p->lock);
    *err_no = p->resize_errno;
    pthread_mutex_unlock(&p->lock);
    return r;
}

static int local_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                             unsigned rows, unsigned cols, sbx_error **error)
{
    struct sbx_plugin_process *p = process;
    const char *op = "exec_resize";
    if (!p->tty) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
             "the command in sandbox %s has no terminal to resize", p->sandbox_id);
        return -1;
    }
    if (rows == 0 || cols == 0 || rows > UINT16_MAX || cols > UINT16_MAX) {
        fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
             "terminal size %u rows x %u columns is invalid (each 1..65535)", rows, cols);
        return -1;
    }
    bound bd = make_bound(ctx, KILL_ACK_SECS);
    int err_no = 0;
    int r = proc_resize(p, rows, cols, &bd, &err_no);
    /* A command that ended has no terminal left to size: nothing to do. */
    if (r == IO_EOF)
        return 0;
    if (r == IO_STALL) {
        stall_fail(error, op, p->sandbox_id, p->sup_pid, p->stall_secs, p->not_started);
        return -1;
    }
    if (r != IO_OK) {
        io_fail(error, r, op, p->sandbox_id, "resize");
        return -1;
    }
    if (err_no != 0) {
        fail(error, SBX_ERROR_EXECUTION_FAILED, op,
             "cannot resize the terminal in sandbox %s: %s", p->sandbox_id, strerror(err_no));
        return -1;
    }
    return 0;
}

static void local_exec_free(sbx_plugin_process *process)
{
    struct sbx_plugin_process *p = process;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    /* A supervisor that does not answer gets the close only: it ends the
     * tree once it runs again, and nothing waits for it meanwhile. */
    int running = !p->exited && !p->lost && !p->stalled;
    pthread_mutex_unlock(&p->lock);
    /* Whether it still runs decides a kill below, which a caller with an
     * exit socket never gets (it took the end from there, or frees a
     * command it gave up on, whose tree the close ends): then the EXIT
     * that may wait on the connection need not be read. */
    if (running && !p->exit_fd_given) {
        bound now = make_bound(NULL, 0);
        while (running) {
            int r = proc_pump(p, &now);
            pthread_mutex_lock(&p->lock);
            running = !p->exited && !p->lost;
            pthread_mutex_unlock(&p->lock);
            if (r != IO_OK)
                break;
        }
    }
    /* Or it is on its way: closing the connection is enough then. The
     * supervisor kills the tree at the close only when the command still
     * runs, and the reaper tells it the command ended before it writes the
     * record, so a command whose end the caller has keeps its background
     * processes. */
    if (running && !p->exit_fd_given) {
        bound bd = make_bound(NULL, FREE_KILL_SECS);
        proc_kill(p, SIGKILL, &bd);
    }
    close(p->fd);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->wlock);
    free(p->sandbox_id);
    free(p->err_msg);
    free(p->cwd_shown);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

static const sbx_plugin local_plugin = {
    .struct_size = sizeof(sbx_plugin),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .name = BACKEND,
    .version = PACKAGE_VERSION,
#if defined(SBX_LOCAL_SAFEHOUSE)
    .description = "commands run as host processes under a per-sandbox root directory, "
                   "each wrapped by the safehouse CLI (macOS sandbox-exec)",
#elif defined(SBX_LOCAL_BUBBLEWRAP)
    .description = "commands run in a bubblewrap sandbox (Linux namespaces) whose / is a "
                   "per-sandbox root directory",
#else
    .description = "commands run as host processes under a per-sandbox root directory "
                   "(no isolation)",
#endif
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* Limits: where the probe finds cgroups it may create. */
    .caps = LOCAL_CAPS | LOCAL_FILE_CAPS | SBX_CAP_CPU_LIMIT | SBX_CAP_MEMORY_LIMIT,
#else
    .caps = LOCAL_CAPS | LOCAL_FILE_CAPS,
#endif
    .setup = local_setup,
    .client_new = local_client_new,
    .client_free = local_client_free,
    .probe = local_probe,
    .create = local_create,
    .resume = local_resume,
    .session_state = local_session_state,
    .destroy = local_destroy,
    .is_alive = local_is_alive,
    .sandbox_free = local_sandbox_free,
    .sandbox_id = local_sandbox_id,
    .sandbox_root = local_sandbox_root,
    .exec_start = local_exec_start,
    .exec_wait = local_exec_wait,
    .exec_event_fd = local_exec_event_fd,
    .exec_kill = local_exec_kill,
    .exec_resize = local_exec_resize,
    .exec_free = local_exec_free,
#ifndef SBX_LOCAL_EXEC_ONLY
    .list_files = local_list_files,
    .read_file = local_read_file,
#ifdef SBX_LOCAL_BUBBLEWRAP
    .write_file = bwrap_write_file,
    .upload_tar = bwrap_upload_tar,
#else
    .write_file = local_write_file,
    .upload_tar = local_upload_tar,
#endif
    .download_tar = local_download_tar,
    .stat_file = local_stat_file,
#endif
    .detach = local_detach,
#ifdef SBX_LOCAL_BUBBLEWRAP
    .exec_end_info = bwrap_exec_end_info,
#endif
    .expose_port = local_expose_port,
    .unexpose_port = local_unexpose_port,
    .resolve_port = local_resolve_port,
    .list_ports = local_list_ports,
};

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void);

SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)
{
#ifdef SBX_LOCAL_FAULTY
    sbx_fault_init();
#endif
    return &local_plugin;
}
