/*
 * sbx-supervisor — the process behind one local sandbox.
 *
 * libsbx-local.so starts it with posix_spawn, its control socket on
 * descriptor 3 and the sandbox's directory on the command line. It forks
 * once and the first process exits, so the supervisor is nobody's child in
 * the application; in its own session it becomes the child subreaper of
 * everything the sandbox starts. It makes itself non-dumpable (no process
 * of the sandbox may trace it or take its descriptors), sends HELLO, reads
 * CONFIG (root, base environment, and the socket the plugin bound at
 * DIR/sock), listens on that socket and answers READY. From then on it
 * serves EXEC, KILL, PING and DESTROY requests (proto.h) in a
 * single-threaded poll loop, with SIGCHLD read from a signalfd.
 *
 * Each exec runs under a reaper of its own, a forked copy of the
 * supervisor: a child subreaper that starts the command in a new session
 * (the exec's pid is its session id), reports its pid and exit code on a
 * socket, and reaps whatever the command leaves until nothing of it is
 * left. Every process the command starts, setsid'd or double-forked, stays
 * below that reaper, so KILL reaches the whole tree through the child
 * links in /proc. A reaper serves one exec at a time; once nothing of its
 * exec is left it says so (IDLE) and waits for the next one, so an exec
 * normally costs no fork and no process exit besides the command's own
 * (those two were most of the time an exec took beyond posix_spawn). Up to
 * REAPER_IDLE_MAX idle reapers are kept; one is forked at start-up. The
 * reaper writes STARTED and EXIT on the client's connection itself (one
 * process less between the command's end and the caller); the supervisor
 * answers everything else, and sends EXIT itself for an exec that was
 * killed, once nothing of it is left. The supervisor reads a reaper's
 * reports only when it needs them (the client gone or asking for a KILL,
 * a reaper wanted for the next exec, the reaper ended): an exec wakes it
 * for the request and for the client's close, nothing else.
 * The kill walks follow each process's children (/proc/PID/task/TID/
 * children) down from the supervisor or a reaper, so they cost what the
 * sandbox's tree costs, whatever else runs on the host; teardowns wait
 * for SIGCHLD between rounds, not for a fixed time.
 * DESTROY kills every descendant of the supervisor, answers and exits.
 *
 * The sandbox also ends itself (proto.h): at the end of its lifetime
 * (CONFIG; a deadline of the poll loop, counted from READY), and when the
 * last of its owners (pidfds polled beside the sockets) has ended, unless
 * it is detached. A keeper process, its parent, then removes what it left
 * on the host (main() and launch() below).
 *
 * Should the supervisor die without DESTROY (SIGKILL, a crash), its
 * reapers see their sockets to it hang up: a busy one kills every process
 * below it (its exec's whole tree, setsid'd and double-forked ones
 * included, all of them its descendants) and exits, an idle one exits; so
 * nothing of the sandbox outlives its supervisor by more than a moment.
 *
 * libsbx-bubblewrap.so starts it as `--launch ... -- bwrap ...` (launch()
 * below), and inside bwrap as `--control-fd=3 --init`, pid 1 of the
 * sandbox's pid namespace, where it does not fork away (the namespace ends
 * with it) and knows no path of its socket: it only holds the descriptors.
 * A warm bubblewrap sandbox's (`--control-fd=3 --init --spare=ID`, started
 * ahead by the library's client) waits for CONFIG with no time limit
 * instead: it ends when its control socket closes first (its client freed,
 * or the process holding it gone).
 */
#include "proto.h"
#ifdef SBX_SUPERVISOR_SECCOMP
#include "seccomp.h"
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <sbx/plugin.h>   /* sbx_plugin_exit_record */

/** How long the plugin may take to send CONFIG. */
#define CONFIG_WAIT_MS 30000
/** How often the supervisor checks that its socket is still in place. */
#define WATCH_INTERVAL_MS 30000
/** How long a reply may wait for room in a client's socket buffer. */
#define SEND_WAIT_MS 1000
/** Most client connections at once. */
#define MAX_CONNS 512
/** Rounds (5 ms apart) a SIGKILL of one exec's tree may take. */
#define EXEC_KILL_ROUNDS 400
/** How long an exec's reaper may take to start the command. */
#define START_WAIT_MS 10000
/** How long the final teardown (or an orphaned reaper's) may take. */
#define TEARDOWN_MS 5000
/** How long after its lifetime the supervisor ends the sandbox (calls
 *  after the lifetime are refused by the library meanwhile). */
#define LIFETIME_GRACE_MS 1000
/** Idle reapers kept for later execs; more are told to exit. */
#define REAPER_IDLE_MAX 4
/** Descriptors of a job: the command's stdin, stdout, stderr, its working
 *  directory, and the client's connection. */
#define JOB_FDS (PROTO_EXEC_FDS + 2)
/** In place of a job's length on a reaper's socket: the exec was killed,
 *  leave its EXIT to the supervisor. */
#define JOB_HOLD 0xffffffffu
/** Or'ed into a job's length (which PROTO_MAX_FRAME keeps far below it):
 *  the exec came as EXEC_QUIET, send the client no STARTED. */
#define JOB_QUIET 0x80000000u
/** Or'ed in too: the caller's exit socket rides after the JOB_FDS. */
#define JOB_EXIT_FD 0x40000000u

/** Fallback PATH when the command's environment has none. */
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

struct reaper;

/** One client connection; at most one exec per connection. */
typedef struct conn {
    int fd;
    unsigned char *buf;          /* header, then payload */
    size_t len;                  /* bytes in buf */
    size_t cap;
    uint32_t type;               /* parsed header, once len >= header */
    uint32_t plen;
    int fds[PROTO_EXEC_FDS_MAX]; /* descriptors received with EXEC */
    int nfds;
    pid_t pid;                   /* exec's main process and session id */
    int starting;                /* handed to rp, its REAPER_PID not read yet */
    pid_t reaper;                /* pid of rp while it serves this exec, else 0 */
    struct reaper *rp;           /* the reaper running this exec, or NULL */
    int running;                 /* main process not reaped yet */
    int killed;                  /* a KILL was asked for this exec */
    int exit_pending;            /* EXIT held until the reaper is gone */
    int exit_code;               /* the held code */
    int tty;                     /* master of the exec's terminal (for RESIZE), or -1 */
    int dead;                    /* to be closed */
} conn;

/** The terminal fields of an EXEC (rows 0: none). */
typedef struct exec_tty {
    uint32_t rows, cols, flags;
} exec_tty;

/**
 * An exec reaper (see the top of this file). The supervisor sends it a job
 * on its socket: u32 length (JOB_QUIET or'ed in for an EXEC_QUIET) and the
 * EXEC payload, with the JOB_FDS descriptors riding as SCM_RIGHTS on the
 * first byte; and JOB_HOLD when the exec is killed. It answers with
 * reaper_msg reports: REAPER_PID (then it sends STARTED to the client,
 * unless quiet; or REAPER_ERROR when nothing could start,
 * after which it exits), REAPER_EXIT_SENT when the main process ended and
 * it is sending EXIT to the client, REAPER_EXIT instead when a JOB_HOLD
 * came (the supervisor sends EXIT), and REAPER_IDLE once it reaped
 * everything of the exec. At EOF on its socket it exits.
 */
typedef struct reaper {
    pid_t pid;
    int fd;                      /* our end of its socket; -1 once retired */
    conn *owner;                 /* the exec it serves; NULL when none */
    int busy;                    /* a job was sent and IDLE not seen yet */
    int gone;                    /* reaped; freed by sweep_reapers */
    unsigned char msg[64];       /* reports read, the last one maybe in part */
    size_t have;
} reaper;

/** What a reaper reports (8 bytes, written whole). */
typedef struct reaper_msg {
    int32_t tag;                 /* REAPER_* */
    int32_t value;
} reaper_msg;

enum { REAPER_PID = 1, REAPER_EXIT = 2, REAPER_ERROR = 3, REAPER_IDLE = 4,
       REAPER_EXIT_SENT = 5 };

static struct {
    char *dir;
    char *sock_path;
    const char *remove;          /* a tmp/ this sandbox made in a caller's workdir, or NULL */
    char *root;
    char **env;                  /* base environment, "K=V" */
    size_t nenv;
    int listen_fd;
    int sock_file_fd;            /* O_PATH descriptor of the socket's file */
    int sig_fd;
    dev_t sock_dev;
    ino_t sock_ino;
    conn **conns;
    size_t nconns;
    reaper **reapers;
    size_t nreapers;
    long long deadline;          /* CLOCK_MONOTONIC ms the lifetime ends; 0 = none */
    uint64_t lifetime_ms;        /* from CONFIG; 0 = none */
    int detached;                /* owners do not matter */
    int *owners;                 /* pidfds of the owning processes */
    size_t nowners;
} S = { .listen_fd = -1, .sock_file_fd = -1, .sig_fd = -1 };

/** Set by --init --spare=ID: the init of a warm bubblewrap sandbox, which
 *  waits for CONFIG with no time limit (run()). */
static int init_waits;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/** Waits up to @ms for @events on @fd: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, long long ms)
{
    long long end = now_ms() + ms;
    for (;;) {
        long long left = end - now_ms();
        if (left < 0)
            left = 0;
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, (int)(left > INT_MAX ? INT_MAX : left));
        if (r > 0)
            return 1;
        if (r == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/** Writes all of @p to @fd within @ms; returns 0 or -1. */
static int write_all(int fd, const void *p, size_t n, long long ms)
{
    const unsigned char *b = p;
    long long end = now_ms() + ms;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == ENOTSOCK)
            w = write(fd, b, n);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            long long left = end - now_ms();
            if (left <= 0 || wait_fd(fd, POLLOUT, left) <= 0)
                return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

/** Reads exactly @n bytes within @ms; returns 0, or -1 on EOF/error/time. */
static int read_all(int fd, void *p, size_t n, long long ms)
{
    unsigned char *b = p;
    long long end = now_ms() + ms;
    while (n > 0) {
        long long left = end - now_ms();
        if (left <= 0 || wait_fd(fd, POLLIN, left) <= 0)
            return -1;
        ssize_t r = read(fd, b, n);
        if (r > 0) {
            b += r;
            n -= (size_t)r;
        } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
            return -1;
        }
    }
    return 0;
}

/** Finishes and writes a frame on a blocking-style descriptor. */
static int send_buf(int fd, proto_buf *b, long long ms)
{
    int r = -1;
    if (proto_buf_finish(b) == 0)
        r = write_all(fd, b->data, b->len, ms);
    proto_buf_free(b);
    return r;
}

static void send_error_fd(int fd, proto_err_kind kind, int err, const char *msg)
{
    proto_buf b;
    proto_buf_init(&b, PROTO_ERROR);
    proto_put_u32(&b, kind);
    proto_put_i32(&b, err);
    proto_put_str(&b, msg);
    send_buf(fd, &b, SEND_WAIT_MS);
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                 */
/* ------------------------------------------------------------------------ */

/** The exit code the library reports: status, or 128+N for signal N. */
static int exit_code_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 255;
}

static void conn_send(conn *c, proto_buf *b);
static void conn_error(conn *c, proto_err_kind kind, int err, const char *msg);
static void read_report(struct reaper *rp);
static int reaper_watched(const struct reaper *rp);

/** Records that @c's main process ended with @code and tells the client. */
static void send_exit(conn *c, int code)
{
    proto_buf b;
    proto_buf_init(&b, PROTO_EXIT);
    proto_put_i32(&b, code);
    conn_send(c, &b);
}

/**
 * The exec's main process ended with @code. Normally EXIT goes out at once
 * (background descendants live on). For an exec that was killed, EXIT is
 * held until its reaper is gone, i.e. until every process of the tree has
 * been reaped: a command run right after a timeout never sees a survivor,
 * not even a zombie.
 */
static void exec_ended(conn *c, int code)
{
    if (!c->running)
        return;
    c->running = 0;
    if (c->killed && c->reaper > 0) {
        c->exit_pending = 1;
        c->exit_code = code;
        return;
    }
    send_exit(c, code);
}

/**
 * @rp no longer serves its exec: nothing of the exec is left below it
 * (IDLE), or it is gone. A held EXIT goes out now.
 */
static void reaper_detach(reaper *rp)
{
    conn *c = rp->owner;
    rp->owner = NULL;
    if (!c)
        return;
    c->rp = NULL;
    c->reaper = 0;
    if (c->exit_pending) {
        c->exit_pending = 0;
        send_exit(c, c->exit_code);
    }
}

/** Stops using @rp (idle, exiting, or failed; with @kill_it, SIGKILL it):
 *  closes its socket, at whose EOF an idle reaper exits. */
static void reaper_retire(reaper *rp, int kill_it)
{
    if (rp->fd >= 0) {
        close(rp->fd);
        rp->fd = -1;
    }
    rp->have = 0;
    if (kill_it && !rp->gone)
        kill(rp->pid, SIGKILL);
}

/**
 * Reaps every child that ended: exec reapers, and processes reparented to
 * the supervisor (a main process among them is reported, should its
 * reaper have been killed).
 */
static void reap_children(void)
{
    for (;;) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p <= 0) {
            if (p < 0 && errno == EINTR)
                continue;
            return;
        }
        for (size_t i = 0; i < S.nreapers; i++) {
            reaper *rp = S.reapers[i];
            if (rp->pid == p && !rp->gone) {
                rp->gone = 1;
                /* What it reported before it ended is still buffered. */
                read_report(rp);
                conn *c = rp->owner;
                if (c && c->starting) {
                    c->starting = 0;
                    c->running = 0;
                    conn_error(c, PROTO_ERR_INTERNAL, EIO,
                               "cannot start a process: its reaper ended first");
                }
                reaper_detach(rp);
                reaper_retire(rp, 0);
            }
        }
        for (size_t i = 0; i < S.nconns; i++) {
            conn *c = S.conns[i];
            if (c->pid == p)
                exec_ended(c, exit_code_of(status));
        }
    }
}

struct session_kill {
    pid_t sid;
    int sig;
    size_t live;
    size_t zombies;
};

static void session_kill_one(pid_t pid, const proto_proc *st, void *data)
{
    struct session_kill *k = data;
    if (st->sid != k->sid || pid == 1)
        return;
    if (st->state == 'Z' || st->state == 'X') {
        k->zombies++;
        return;
    }
    kill(pid, k->sig);
    k->live++;
}

/**
 * Sends @sig to the whole tree of @c's command: every descendant of its
 * reaper and, should the reaper be gone, every process of its session.
 * With @sync (SIGKILL), repeats until nothing of it is left (bounded), so
 * a later exec no longer sees any of it.
 */
static void kill_exec(conn *c, int sig, int sync)
{
    /* With the main process and the reaper gone, nothing of it is left. */
    if (c->pid <= 1 || (!c->running && c->reaper == 0))
        return;
    int zombie_rounds = 0;
    for (int round = 0; round < (sync ? EXEC_KILL_ROUNDS : 1); round++) {
        /* Whatever of the session outlived its reaper was reparented to
         * us (the subreaper): it is below the supervisor. */
        struct session_kill k = { .sid = c->pid, .sig = sig };
        proto_walk_descendants(getpid(), session_kill_one, &k);
        size_t zombies = 0;
        if (c->reaper > 0)
            k.live += proto_kill_descendants(c->reaper, sig, &zombies);
        k.zombies += zombies;
        reap_children();
        if (!sync || (k.live == 0 && k.zombies == 0))
            break;
        /* A zombie whose parent lives outside the tree is not ours. */
        if (k.live == 0 && ++zombie_rounds > 20)
            break;
        /* Its reaper reports when the main process ended and once the
         * whole tree is reaped (IDLE): wait for a report, not a fixed
         * time. The round's 5 ms bound what ends unreported: processes of
         * the session reparented to the supervisor, a reaper gone. */
        int w = c->rp && c->rp->fd >= 0 ? wait_fd(c->rp->fd, POLLIN, 5) : -1;
        if (w > 0)
            read_report(c->rp);
        else if (w < 0)
            sleep_ms(5);
    }
}

/** 1 when the calling process has no child left, ended or not. */
static int no_children(void)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

/**
 * Sleeps until a SIGCHLD is pending on @sig_fd (a signalfd with SIGCHLD
 * blocked) or @ms passed, and takes the pending signals in. Without a
 * signalfd it just sleeps. Every death below a child subreaper ends in a
 * SIGCHLD here (its own child's, or a zombie's reparented to it), so the
 * time-out only bounds a wait for something that is not a death.
 */
static void wait_chld(int sig_fd, long ms)
{
    if (sig_fd < 0) {
        sleep_ms(ms);
        return;
    }
    struct pollfd p = { .fd = sig_fd, .events = POLLIN };
    while (poll(&p, 1, (int)ms) < 0 && errno == EINTR)
        ;
    /* Every pending signal in one read, as a rule. */
    struct signalfd_siginfo si[8];
    while (read(sig_fd, si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
}

/**
 * Kills everything the sandbox started and reaps it (bounded). Done once
 * the supervisor has no child: every descendant hangs below one. Between
 * rounds it waits for the next death (SIGCHLD), not for a fixed time.
 */
static void kill_everything(void)
{
    long long end = now_ms() + TEARDOWN_MS;
    while (now_ms() < end) {
        reap_children();
        if (no_children())
            return;
        proto_kill_descendants(getpid(), SIGKILL, NULL);
        reap_children();
        if (no_children())
            return;
        wait_chld(S.sig_fd, 10);
    }
}

/**
 * At DESTROY, when nothing the sandbox's commands started can be left:
 * every reaper reported IDLE (nothing of its exec is left, so it runs
 * nothing of the sandbox) and the supervisor has no child but them (as
 * /proc/thread-self/children lists them). Then each is sent SIGKILL and 1
 * is returned: the answer need not wait for their ends, which
 * kill_everything() reaps after it. 0 otherwise, and nothing was done.
 */
static int end_idle_reapers(void)
{
    reap_children();
    for (size_t i = 0; i < S.nreapers; i++) {
        reaper *rp = S.reapers[i];
        if (!rp->gone && rp->fd >= 0)
            read_report(rp);
        if (!rp->gone && (rp->fd < 0 || rp->busy))
            return 0;
    }
    int fd = open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (r < 0 || n >= sizeof(buf) - 1)
        return 0;
    buf[n] = '\0';
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        int known = 0;
        for (size_t i = 0; i < S.nreapers && !known; i++)
            known = !S.reapers[i]->gone && S.reapers[i]->pid == (pid_t)pid;
        if (!known)
            return 0;
        while (*end == ' ' || *end == '\n')
            end++;
    }
    for (size_t i = 0; i < S.nreapers; i++)
        if (!S.reapers[i]->gone)
            kill(S.reapers[i]->pid, SIGKILL);
    return 1;
}

/**
 * Before the sandbox ends on its own: no exec in flight gets an EXIT (its
 * command is about to be killed, and an exit code would read as the
 * command's own end). Each busy reaper is told to leave EXIT to the
 * supervisor (JOB_HOLD, before any signal), and the supervisor sends
 * nothing more on any connection: the callers see their connections close
 * and report the sandbox's end (the library names the expiry).
 */
static void hold_every_exit(void)
{
    uint32_t hold = JOB_HOLD;
    for (size_t i = 0; i < S.nreapers; i++) {
        reaper *rp = S.reapers[i];
        if (rp->fd >= 0 && rp->busy && !rp->gone)
            write_all(rp->fd, &hold, sizeof(hold), SEND_WAIT_MS);
    }
    for (size_t i = 0; i < S.nconns; i++)
        S.conns[i]->dead = 1;
}

/**
 * Ends the sandbox: stops taking connections, kills every descendant,
 * answers @requester (may be NULL) and exits: 0 after DESTROY (a
 * @requester), PROTO_EXIT_SELF_END when it ends on its own, so that the
 * keeper removes what the sandbox left. After DESTROY the directory is
 * renamed to its trash name before the answer and removed after it (the
 * caller need not wait for that); should the removal fail, the exit is
 * PROTO_EXIT_TRASH_LEFT and the keeper tries again. When only idle
 * reapers are left (end_idle_reapers), the answer comes once they were
 * sent SIGKILL, and their ends are reaped after it: no process the
 * sandbox's commands started is alive either way when the caller hears
 * DESTROYED.
 */
static void __attribute__((noreturn)) shutdown_sandbox(conn *requester)
{
    if (S.listen_fd >= 0) {
        close(S.listen_fd);
        S.listen_fd = -1;
    }
    /* After DESTROY the directory is renamed below: its socket goes with
     * it (no connection is taken from here on). */
    struct stat st;
    if (!requester && S.sock_path && S.sock_ino && stat(S.sock_path, &st) == 0
        && st.st_dev == S.sock_dev && st.st_ino == S.sock_ino)
        unlink(S.sock_path);
    if (!requester)
        hold_every_exit();
    int early = requester && end_idle_reapers();
    if (!early)
        kill_everything();
    char *trash = NULL;
    if (requester && S.dir && (trash = proto_trash_path(S.dir)) && rename(S.dir, trash) < 0) {
        free(trash);
        trash = NULL;
    }
    /* A tmp/ made in a caller's workdir goes before the answer too: the
     * library removes it after the answer, but should it die first (a
     * SIGKILL) nothing else would (the keeper, seeing exit 0, leaves it:
     * by then a next sandbox may have made its own there). */
    if (requester && S.remove)
        proto_rm_tree(S.remove);
    if (requester) {
        proto_buf b;
        proto_buf_init(&b, PROTO_DESTROYED);
        conn_send(requester, &b);
    }
    /* Idle reapers SIGKILLed before the answer are reaped after it. */
    if (early)
        kill_everything();
    if (trash && proto_rm_tree(trash) < 0)
        _exit(PROTO_EXIT_TRASH_LEFT);
    _exit(requester ? 0 : PROTO_EXIT_SELF_END);
}

/* ------------------------------------------------------------------------ */
/* Owners                                                                    */
/* ------------------------------------------------------------------------ */

/** Takes pidfd @fd as one more owner (closed at once when detached). */
static int owner_add(int fd)
{
    if (S.detached) {
        close(fd);
        return 0;
    }
    int *v = realloc(S.owners, (S.nowners + 1) * sizeof(*v));
    if (!v) {
        close(fd);
        return -1;
    }
    S.owners = v;
    S.owners[S.nowners++] = fd;
    return 0;
}

/** From now on only the lifetime and DESTROY end the sandbox. */
static void owners_forget(void)
{
    S.detached = 1;
    for (size_t i = 0; i < S.nowners; i++)
        close(S.owners[i]);
    S.nowners = 0;
}

/** Owner @i has ended (its pidfd is readable): the sandbox ends with its
 *  last owner. */
static void owner_ended(size_t i)
{
    close(S.owners[i]);
    S.owners[i] = S.owners[--S.nowners];
    if (S.nowners == 0 && !S.detached)
        shutdown_sandbox(NULL);
}

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

/** The value of @key in @env ("K=V" strings), or NULL. */
static const char *env_get(char *const *env, const char *key)
{
    size_t kl = strlen(key);
    for (; *env; env++)
        if (strncmp(*env, key, kl) == 0 && (*env)[kl] == '=')
            return *env + kl + 1;
    return NULL;
}

/** Base environment with @overlay laid over it (by key); a new array of
 *  borrowed strings, or NULL when memory runs out. */
static char **env_merge(char *const *overlay, size_t n)
{
    char **out = calloc(S.nenv + n + 1, sizeof(*out));
    if (!out)
        return NULL;
    size_t cnt = 0;
    for (size_t i = 0; i < S.nenv; i++)
        out[cnt++] = S.env[i];
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(overlay[i], '=');
        if (!eq)
            continue;
        size_t kl = (size_t)(eq - overlay[i]) + 1;
        size_t j;
        for (j = 0; j < cnt; j++)
            if (strncmp(out[j], overlay[i], kl) == 0)
                break;
        out[j] = overlay[i];
        if (j == cnt)
            cnt++;
    }
    out[cnt] = NULL;
    return out;
}

/**
 * Finds @name along @path the way a shell does, relative entries taken
 * from @cwd_fd. Returns 0 and a new string in *@out, or the errno to
 * report (ENOENT: not found; EACCES: found but not executable).
 */
static int path_lookup(const char *name, const char *path, int cwd_fd, char **out)
{
    int seen_eacces = 0;
    size_t nl = strlen(name);
    const char *p = path;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);
        char *cand = malloc(dl + nl + 3);
        if (!cand)
            return ENOMEM;
        if (dl == 0)
            snprintf(cand, dl + nl + 3, "./%s", name);
        else
            snprintf(cand, dl + nl + 3, "%.*s/%s", (int)dl, p, name);
        struct stat st;
        if (fstatat(cwd_fd, cand, &st, 0) == 0 && !S_ISDIR(st.st_mode)) {
            if (faccessat(cwd_fd, cand, X_OK, AT_EACCESS) == 0 && S_ISREG(st.st_mode)) {
                *out = cand;
                return 0;
            }
            seen_eacces = 1;
        }
        free(cand);
        if (!colon)
            break;
        p = colon + 1;
    }
    return seen_eacces ? EACCES : ENOENT;
}

/** The signals a reaper ignores, as found when it started: the only
 *  dispositions an exec'd command would inherit. */
static sigset_t reaper_ignored;

/**
 * Starts @prog in a new session with the exec's descriptors (@fds on 0, 1
 * and 2, or the terminal @tty_path opened after setsid, so that it becomes
 * the controlling terminal, on all three) and working directory @cwd_fd, no
 * signal blocked and none ignored. Returns 0 with *@pid set, or the errno
 * of the step that failed (ENOEXEC: no #! line; nothing is left running).
 *
 * What posix_spawn does, minus its cost here: glibc's child resets the
 * disposition of every signal (two sigaction calls for each of the 64,
 * since it cannot know which have handlers), about as long as the rest of
 * the child's work. A reaper installs no handler, so only the signals it
 * found ignored (reaper_ignored) are reset. vfork, as posix_spawn uses it:
 * the child borrows the reaper's memory until execve, touching nothing but
 * @err; every signal is blocked meanwhile, so nothing runs on the shared
 * stack.
 */
static int spawn_in_session(const char *prog, char *const argv[], char *const envp[],
                            const int fds[PROTO_EXEC_FDS], const char *tty_path, int cwd_fd,
                            pid_t *pid)
{
    volatile int err = 0;
    sigset_t all, old;

    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t p = vfork();
    if (p == 0) {
        int e = 0;
        if (setsid() < 0)
            e = errno;
        if (e == 0 && tty_path) {
            int t = open(tty_path, O_RDWR);
            if (t < 0)
                e = errno;
            else if (t != 0 && (dup2(t, 0) < 0 || close(t) < 0))
                e = errno;
            for (int i = 1; e == 0 && i < PROTO_EXEC_FDS; i++)
                if (dup2(0, i) < 0)
                    e = errno;
        } else {
            for (int i = 0; e == 0 && i < PROTO_EXEC_FDS; i++) {
                /* dup2 onto itself keeps close-on-exec: clear it instead. */
                if (fds[i] == i ? fcntl(i, F_SETFD, 0) < 0 : dup2(fds[i], i) < 0)
                    e = errno;
            }
        }
        if (e == 0 && fchdir(cwd_fd) < 0)
            e = errno;
        for (int sig = 1; e == 0 && sig < NSIG; sig++) {
            if (sigismember(&reaper_ignored, sig) != 1)
                continue;
            struct sigaction sa;
            memset(&sa, 0, sizeof(sa));
            sa.sa_handler = SIG_DFL;
            if (sigaction(sig, &sa, NULL) < 0)
                e = errno;
        }
        if (e == 0) {
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            execve(prog, argv, envp);
            e = errno;
        }
        err = e;
        _exit(127);
    }
    int e = p < 0 ? errno : 0;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (p < 0)
        return e;
    if (err != 0) {
        /* It never ran anything: reap it here, unseen by the caller. */
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
        return err;
    }
    *pid = p;
    return 0;
}

/**
 * Starts a stand-in for a command that cannot run: it writes @msg to the
 * exec's stderr and exits @code, in its own session like a real command.
 */
static int spawn_failure(const char *msg, int code, int err_fd, pid_t *pid)
{
    pid_t p = fork();
    if (p < 0)
        return errno;
    if (p == 0) {
        setsid();
        size_t n = strlen(msg);
        while (n > 0) {
            ssize_t w = write(err_fd, msg, n);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            msg += w;
            n -= (size_t)w;
        }
        _exit(code);
    }
    *pid = p;
    return 0;
}

static void conn_close_fds(conn *c)
{
    for (int i = 0; i < c->nfds; i++)
        close(c->fds[i]);
    c->nfds = 0;
}

static void conn_error(conn *c, proto_err_kind kind, int err, const char *msg)
{
    proto_buf b;
    proto_buf_init(&b, PROTO_ERROR);
    proto_put_u32(&b, kind);
    proto_put_i32(&b, err);
    proto_put_str(&b, msg);
    conn_send(c, &b);
    c->dead = 1;
}

/** Closes every descriptor from 3 up except those in @keep. */
static void close_all_except(int *keep, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    unsigned lo = 3;
    for (int i = 0; i < n; i++) {
        if (keep[i] < (int)lo)
            continue;
        if ((unsigned)keep[i] > lo)
            close_range(lo, (unsigned)keep[i] - 1, 0);
        lo = (unsigned)keep[i] + 1;
    }
    close_range(lo, ~0U, 0);
}

static void report(int fd, int32_t tag, int32_t value)
{
    reaper_msg m = { tag, value };
    while (send(fd, &m, sizeof(m), MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

/**
 * The fields of an EXEC payload. *@argv and *@overlay are new
 * NULL-terminated arrays (free them, not their strings) pointing into
 * @payload. Returns 0, EPROTO when the payload is malformed, or ENOMEM.
 */
static int parse_exec(const unsigned char *payload, size_t len, char ***argv, uint32_t *argc,
                      char ***overlay, uint32_t *envc, const char **cwd, exec_tty *tty,
                      uint64_t *start_by)
{
    proto_reader r;
    *argv = *overlay = NULL;
    *start_by = 0;
    memset(tty, 0, sizeof(*tty));
    proto_reader_init(&r, payload, len);
    *argc = proto_get_u32(&r);
    if (r.failed || *argc == 0 || *argc > len / 5)
        return EPROTO;
    if (!(*argv = calloc((size_t)*argc + 1, sizeof(**argv))))
        return ENOMEM;
    for (uint32_t i = 0; i < *argc; i++)
        (*argv)[i] = (char *)proto_get_str(&r);
    *envc = proto_get_u32(&r);
    if (r.failed || *envc > len / 5)
        goto bad;
    if (!(*overlay = calloc((size_t)*envc + 1, sizeof(**overlay)))) {
        free(*argv);
        *argv = NULL;
        return ENOMEM;
    }
    for (uint32_t i = 0; i < *envc; i++)
        (*overlay)[i] = (char *)proto_get_str(&r);
    *cwd = proto_get_str(&r);
    /* What follows cwd, told apart by its size: the terminal (3 x u32),
     * start_by (u64), or both. */
    if (!r.failed && (r.left == 12 || r.left == 20)) {
        tty->rows = proto_get_u32(&r);
        tty->cols = proto_get_u32(&r);
        tty->flags = proto_get_u32(&r);
        if (tty->rows > UINT16_MAX || tty->cols > UINT16_MAX || !tty->rows != !tty->cols)
            goto bad;
    }
    if (!r.failed && r.left == 8)
        *start_by = proto_get_u64(&r);
    if (r.failed || r.left != 0)
        goto bad;
    return 0;
bad:
    free(*argv);
    free(*overlay);
    *argv = *overlay = NULL;
    return EPROTO;
}

/**
 * In a reaper: starts the command of one job in a new session and reports
 * REAPER_PID on @rep; a command that cannot run gets a stand-in that
 * prints why and exits 127 or 126. Returns the pid, or 0 after reporting
 * REAPER_ERROR (nothing started).
 */
static pid_t start_command(char **argv, uint32_t argc, char **envp,
                           const int fds[PROTO_EXEC_FDS], const char *tty_path, int cwd_fd,
                           int rep)
{
    char msg[PATH_MAX + 128];
    char *found = NULL, **sh = NULL;
    pid_t pid = 0;
    int err = 0;

    const char *name = argv[0];
    int has_slash = strchr(name, '/') != NULL;
    const char *prog = name;
    if (!has_slash) {
        const char *path = env_get(envp, "PATH");
        err = path_lookup(name, path ? path : DEFAULT_PATH, cwd_fd, &found);
        prog = found;
    }
    if (err == 0) {
        err = spawn_in_session(prog, argv, envp, fds, tty_path, cwd_fd, &pid);
        if (err == ENOEXEC) {
            /* No #! line: run it with the shell, as execvp does. */
            sh = calloc((size_t)argc + 2, sizeof(*sh));
            if (!sh) {
                err = ENOMEM;
            } else {
                sh[0] = "/bin/sh";
                sh[1] = (char *)prog;
                for (uint32_t i = 1; i < argc; i++)
                    sh[i + 1] = argv[i];
                err = spawn_in_session("/bin/sh", sh, envp, fds, tty_path, cwd_fd, &pid);
            }
        }
    }
    if (err != 0) {
        int code;
        if (err == ENOENT) {
            code = 127;
            snprintf(msg, sizeof(msg), "%.*s: %s\n", PATH_MAX, name,
                     has_slash ? "not found" : "command not found");
        } else {
            code = 126;
            snprintf(msg, sizeof(msg), "%.*s: %s\n", PATH_MAX, name,
                     err == EACCES ? "Permission denied" : strerror(err));
        }
        int err_fd = fds[2], slave = -1;
        if (tty_path && (slave = open(tty_path, O_RDWR | O_NOCTTY | O_CLOEXEC)) >= 0)
            err_fd = slave;
        err = spawn_failure(msg, code, err_fd, &pid);
        if (slave >= 0)
            close(slave);
    }
    free(sh);
    free(found);
    if (err != 0) {
        report(rep, REAPER_ERROR, err);
        return 0;
    }
    report(rep, REAPER_PID, pid);
    return pid;
}

/**
 * In a reaper: reads one job from @fd. Returns 0 with a new payload in
 * *@payload and the JOB_FDS descriptors in @fds (close-on-exec), the exit
 * socket after them (-1: none), or -1 at EOF or on a malformed job.
 */
static int reaper_recv_job(int fd, unsigned char **payload, uint32_t *len,
                           int fds[JOB_FDS + 1], int *quiet)
{
    uint32_t n = 0;
    size_t got = 0;
    int nfds = 0;

    for (int i = 0; i < JOB_FDS + 1; i++)
        fds[i] = -1;
    *payload = NULL;
    /* Asleep in poll, not in recvmsg: a recvmsg asleep on the socket is
     * woken too whenever its room to write grows, which is when the
     * supervisor takes this reaper's reports, as a rule just before it
     * sends the next job; poll wakes for the job alone. */
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    while (poll(&pf, 1, -1) < 0 && errno == EINTR)
        ;
    while (got < sizeof(n)) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * (JOB_FDS + 1))];
        } ctl;
        struct iovec iov = { (char *)&n + got, sizeof(n) - got };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
        ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            goto fail;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int f;
                memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                if (nfds < JOB_FDS + 1)
                    fds[nfds++] = f;
                else
                    close(f);
            }
        }
        got += (size_t)r;
        if (got == sizeof(n) && n == JOB_HOLD && nfds == 0)
            got = 0;    /* a late note about the exec before: nothing to hold now */
    }
    *quiet = (n & JOB_QUIET) != 0;
    int want = n & JOB_EXIT_FD ? JOB_FDS + 1 : JOB_FDS;
    n &= ~(JOB_QUIET | JOB_EXIT_FD);
    if (nfds != want || n > PROTO_MAX_FRAME || !(*payload = malloc(n + 1)))
        goto fail;
    for (got = 0; got < n;) {
        ssize_t r = read(fd, *payload + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            goto fail;
        got += (size_t)r;
    }
    *len = n;
    return 0;
fail:
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    free(*payload);
    *payload = NULL;
    return -1;
}

/** In a reaper: 1 when the supervisor sent JOB_HOLD (read now), else 0. */
static int reaper_held(int fd)
{
    int held = 0;
    uint32_t note;
    while (recv(fd, &note, sizeof(note), MSG_DONTWAIT) == (ssize_t)sizeof(note))
        held |= note == JOB_HOLD;
    return held;
}

/** Sends frame @type with one i32 @value on @fd; returns 0 or -1. */
static int send_i32_frame(int fd, uint32_t type, int32_t value)
{
    proto_buf b;
    proto_buf_init(&b, type);
    proto_put_i32(&b, value);
    return send_buf(fd, &b, SEND_WAIT_MS);
}

/**
 * In a reaper whose supervisor is gone: kills every process below it
 * until none is left (bounded; woken by @sig_fd's SIGCHLD), reaps them
 * and exits.
 */
static void __attribute__((noreturn)) reaper_orphaned(int sig_fd)
{
    long long end = now_ms() + TEARDOWN_MS;
    while (now_ms() < end) {
        int status;
        while (waitpid(-1, &status, WNOHANG) > 0)
            ;
        if (no_children())
            break;
        proto_kill_descendants(getpid(), SIGKILL, NULL);
        while (waitpid(-1, &status, WNOHANG) > 0)
            ;
        if (no_children())
            break;
        wait_chld(sig_fd, 10);
    }
    _exit(0);
}

/** Bytes the terminal relay moves per read. */
#define RELAY_CHUNK 4096
/** After the main process ended: the relay takes what the terminal still
 *  holds until it is quiet this long, or RELAY_DRAIN_MAX_MS in all. */
#define RELAY_QUIET_MS 30
#define RELAY_DRAIN_MAX_MS 1000
/** Longest wait for the caller to take the terminal's output. */
#define RELAY_OUT_WAIT_MS 60000

/**
 * A reaper's terminal relay for an exec with a pseudo-terminal: the
 * master's bytes go to the exec's stdout, the exec's stdin to the master.
 * Every descriptor is -1 when not (or no longer) in use.
 */
typedef struct relay {
    int master;                  /* the terminal's master (non-blocking) */
    int in;                      /* the exec's stdin; -1 without one */
    int out;                     /* the exec's stdout */
    int hup_on_eof;              /* stdin's EOF hangs the terminal up */
    pid_t pid;                   /* the command: its session's leader */
    unsigned char buf[RELAY_CHUNK];  /* stdin bytes the master has not taken */
    size_t len, off;
} relay;

static void relay_close(relay *rl)
{
    int *fds[3] = { &rl->master, &rl->in, &rl->out };
    for (int i = 0; i < 3; i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

/** Reads once from the master and hands the bytes to stdout. Returns 1 when
 *  bytes came, 0 when none were there, -1 when the terminal's slave side is
 *  closed (every process of it gone) or the master failed. */
static int relay_out(relay *rl)
{
    unsigned char b[RELAY_CHUNK];
    ssize_t n = read(rl->master, b, sizeof(b));
    if (n > 0) {
        /* A caller that stopped reading loses the rest, the command goes on. */
        if (rl->out >= 0 && write_all(rl->out, b, (size_t)n, RELAY_OUT_WAIT_MS) < 0) {
            close(rl->out);
            rl->out = -1;
        }
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    return -1;      /* EIO: no slave open any more */
}

/** Hangs the terminal up for its processes: SIGHUP (and SIGCONT, as the
 *  kernel's hang-up does) to the foreground process group and the session. */
static void relay_hangup(relay *rl)
{
    pid_t fg = rl->master >= 0 ? tcgetpgrp(rl->master) : -1;
    if (fg > 0) {
        kill(-fg, SIGHUP);
        kill(-fg, SIGCONT);
    }
    kill(-rl->pid, SIGHUP);
    kill(-rl->pid, SIGCONT);
}

/** Moves stdin's bytes to the master as far as it takes them now. */
static void relay_in(relay *rl, short in_ev, short master_ev)
{
    if (rl->len == 0 && rl->in >= 0 && (in_ev & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t n = read(rl->in, rl->buf, sizeof(rl->buf));
        if (n > 0) {
            rl->len = (size_t)n;
            rl->off = 0;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close(rl->in);
            rl->in = -1;
            if (rl->hup_on_eof)
                relay_hangup(rl);
        }
    }
    if (rl->len > 0 && rl->master >= 0 && (master_ev & POLLOUT || in_ev)) {
        ssize_t w = write(rl->master, rl->buf + rl->off, rl->len);
        if (w > 0) {
            rl->off += (size_t)w;
            rl->len -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            rl->len = 0;    /* the terminal is gone: nobody reads them */
        }
    }
}

/** After the main process ended: takes what the terminal still holds
 *  (bounded), then closes the relay; its other processes are hung up. */
static void relay_finish(relay *rl)
{
    if (rl->master >= 0) {
        long long end = now_ms() + RELAY_DRAIN_MAX_MS;
        for (;;) {
            int r = relay_out(rl);
            if (r < 0)
                break;
            if (r == 0) {
                long long left = end - now_ms();
                if (left <= 0 || wait_fd(rl->master, POLLIN,
                                         left < RELAY_QUIET_MS ? left : RELAY_QUIET_MS) <= 0)
                    break;
            }
        }
    }
    relay_close(rl);
}

/**
 * In a reaper serving an exec: sleeps until a child changed state
 * (@sig_fd, a signalfd of SIGCHLD) or the supervisor's end of @fd hung up,
 * in which case the supervisor is gone and the reaper ends the tree. With
 * a terminal (@rl's master open) it relays meanwhile.
 */
static void reaper_wait(int sig_fd, int fd, relay *rl)
{
    /* events 0: only a hang-up or an error of the supervisor's socket. */
    struct pollfd p[4] = { { .fd = sig_fd, .events = POLLIN }, { .fd = fd, .events = 0 },
                           { .fd = -1 }, { .fd = -1 } };
    if (rl->master >= 0) {
        p[2].fd = rl->master;
        p[2].events = POLLIN | (rl->len > 0 ? POLLOUT : 0);
        if (rl->in >= 0 && rl->len == 0) {
            p[3].fd = rl->in;
            p[3].events = POLLIN;
        }
    }
    int r = poll(p, 4, -1);
    if (r < 0 && errno != EINTR)
        reaper_orphaned(sig_fd);
    if (r > 0 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
        reaper_orphaned(sig_fd);
    if (r > 0 && rl->master >= 0) {
        if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (relay_out(rl) < 0) {
                /* Nothing holds the terminal: stop watching it. */
                relay_close(rl);
            }
        }
        if (rl->master >= 0)
            relay_in(rl, p[3].revents, p[2].revents);
    }
    /* Every pending signal in one read, as a rule. */
    struct signalfd_siginfo si[8];
    while (read(sig_fd, si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
}

/**
 * A reaper's life: a child subreaper that takes jobs from @fd one at a
 * time, starts each command, reaps everything below it until nothing of
 * the exec is left, reports REAPER_IDLE and waits for the next job. Exits
 * at EOF on @fd, or after a job it could not start.
 */
static void __attribute__((noreturn)) reaper_main(int fd)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    /* SIGCHLD is blocked (as in the supervisor): it is read from here. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sig_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sig_fd < 0)
        _exit(1);
    /* Handlers do not survive exec, ignored signals do: resetting just
     * those spares the command's start one sigaction per signal. */
    sigemptyset(&reaper_ignored);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            sigaddset(&reaper_ignored, sig);
    }
    for (;;) {
        unsigned char *payload;
        uint32_t len, argc, envc;
        int fds[JOB_FDS + 1];
        char **argv, **overlay, **envp = NULL;
        const char *cwd;
        pid_t pid = 0;
        exec_tty tty;
        char tty_path[64];
        relay rl = { .master = -1, .in = -1, .out = -1 };
        int quiet = 0;

        if (reaper_recv_job(fd, &payload, &len, fds, &quiet) < 0)
            _exit(0);
        uint64_t start_by;
        int err = parse_exec(payload, len, &argv, &argc, &overlay, &envc, &cwd, &tty,
                             &start_by);
        if (err == 0 && !(envp = env_merge(overlay, envc)))
            err = ENOMEM;
        /* With a terminal the supervisor sent its master in stderr's place. */
        if (err == 0 && tty.rows > 0)
            err = ptsname_r(fds[2], tty_path, sizeof(tty_path));
        if (err == 0)
            pid = start_command(argv, argc, envp, fds, tty.rows > 0 ? tty_path : NULL,
                                fds[PROTO_EXEC_FDS], fd);
        else
            report(fd, REAPER_ERROR, err);
        if (pid > 0 && tty.rows > 0) {
            rl.master = fds[2];
            rl.out = fds[1];
            rl.pid = pid;
            if (tty.flags & PROTO_TTY_STDIN) {
                rl.in = fds[0];
                rl.hup_on_eof = 1;
                fds[0] = -1;
            }
            fds[1] = fds[2] = -1;
            fcntl(rl.master, F_SETFL, fcntl(rl.master, F_GETFL) | O_NONBLOCK);
        }
        /* Hold nothing of the command's: its output ends when it does.
         * But for a caller with an exit socket: its stdout and stderr are
         * held until the record is out, so that the caller wakes once for
         * the end, not for the EOF of each first (it takes what the pipes
         * hold once it has the record). */
        int client = fds[JOB_FDS - 1], exit_fd = fds[JOB_FDS];
        int held[2] = { -1, -1 };
        if (exit_fd >= 0 && rl.master < 0) {
            held[0] = fds[1];
            held[1] = fds[2];
            fds[1] = fds[2] = -1;
        }
        for (int i = 0; i < JOB_FDS - 1; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        free(envp);
        free(overlay);
        free(argv);
        free(payload);
        if (pid <= 0)
            _exit(1);     /* the exit socket closes without a record */
        /* A client that is gone is the supervisor's to notice. */
        if (!quiet)
            send_i32_frame(client, PROTO_STARTED, pid);
        /* Nothing has ended yet, as a rule: sleep first (an end meanwhile
         * left its SIGCHLD on sig_fd). */
        reaper_wait(sig_fd, fd, &rl);
        for (;;) {
            int status;
            pid_t p = waitpid(-1, &status, WNOHANG);
            if (p < 0) {
                if (errno == EINTR)
                    continue;
                break;
            }
            if (p == 0) {
                reaper_wait(sig_fd, fd, &rl);
                continue;
            }
            if (p != pid)
                continue;
            /* The terminal's last bytes reach stdout before EXIT does. */
            relay_finish(&rl);
            /* The report goes first: a client that has its EXIT may close
             * at once, and the supervisor must know by then that the exec
             * ended, or it would kill what the exec left running. */
            int code = exit_code_of(status);
            if (reaper_held(fd)) {
                report(fd, REAPER_EXIT, code);
            } else {
                report(fd, REAPER_EXIT_SENT, code);
                /* The caller's record first: it wakes for that alone, not
                 * for EXIT a moment before. The report above already tells
                 * the supervisor that the exec ended, should the client
                 * close before EXIT is read. */
                if (exit_fd >= 0) {
                    sbx_plugin_exit_record rec = { SBX_PLUGIN_EXIT_RECORD_MAGIC, code };
                    while (send(exit_fd, &rec, sizeof(rec), MSG_NOSIGNAL | MSG_DONTWAIT) < 0
                           && errno == EINTR)
                        ;
                }
                send_i32_frame(client, PROTO_EXIT, code);
            }
            close(client);
            client = -1;
            if (exit_fd >= 0)
                close(exit_fd);
            exit_fd = -1;
            for (int i = 0; i < 2; i++)
                if (held[i] >= 0)
                    close(held[i]);
            held[0] = held[1] = -1;
        }
        if (client >= 0)
            close(client);
        if (exit_fd >= 0)
            close(exit_fd);
        for (int i = 0; i < 2; i++)
            if (held[i] >= 0)
                close(held[i]);
        relay_close(&rl);
        report(fd, REAPER_IDLE, 0);
    }
}

/** A new reaper, in S.reapers; NULL with errno set when none could start. */
static reaper *reaper_new(void)
{
    int sv[2];
    reaper *rp = calloc(1, sizeof(*rp));
    reaper **v = realloc(S.reapers, (S.nreapers + 1) * sizeof(*v));
    if (v)
        S.reapers = v;
    if (!rp || !v) {
        free(rp);
        errno = ENOMEM;
        return NULL;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        free(rp);
        return NULL;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        free(rp);
        errno = e;
        return NULL;
    }
    if (pid == 0) {
        int keep[] = { sv[1] };
        close_all_except(keep, 1);
        reaper_main(sv[1]);
    }
    close(sv[1]);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    rp->pid = pid;
    rp->fd = sv[0];
    S.reapers[S.nreapers++] = rp;
    return rp;
}

/** An idle reaper, or a new one; NULL with errno set. */
static reaper *reaper_get(void)
{
    for (size_t i = 0; i < S.nreapers; i++) {
        reaper *rp = S.reapers[i];
        if (rp->fd >= 0 && !rp->busy && !rp->gone)
            return rp;
    }
    /* One whose IDLE waits unread (reaper_watched) is as good. */
    for (size_t i = 0; i < S.nreapers; i++) {
        reaper *rp = S.reapers[i];
        if (rp->fd >= 0 && rp->busy && !rp->gone && !reaper_watched(rp)) {
            read_report(rp);
            if (rp->fd >= 0 && !rp->busy)
                return rp;
        }
    }
    return reaper_new();
}

/**
 * Hands a job to @rp: the EXEC @payload, with the command's descriptors
 * @fds, @cwd_fd, the client's connection @client and its exit socket
 * @exit_fd (-1: none) on its first byte. Returns 0 or an errno.
 */
static int reaper_send_job(reaper *rp, const unsigned char *payload, uint32_t len,
                           const int fds[PROTO_EXEC_FDS], int cwd_fd, int client, int quiet,
                           int exit_fd)
{
    int all[JOB_FDS + 1] = { fds[0], fds[1], fds[2], cwd_fd, client, exit_fd };
    size_t nall = exit_fd >= 0 ? JOB_FDS + 1 : JOB_FDS;
    uint32_t head = (quiet ? len | JOB_QUIET : len) | (exit_fd >= 0 ? JOB_EXIT_FD : 0);
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(all))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov[2] = { { &head, sizeof(head) }, { (void *)payload, len } };
    struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2, .msg_control = ctl.buf,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * nall) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nall);
    memcpy(CMSG_DATA(cm), all, sizeof(int) * nall);

    ssize_t n;
    for (;;) {
        n = sendmsg(rp->fd, &mh, MSG_NOSIGNAL);
        if (n >= 0)
            break;
        if (errno == EINTR)
            continue;
        if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_fd(rp->fd, POLLOUT, SEND_WAIT_MS) > 0)
            continue;
        return errno;
    }
    rp->busy = 1;
    size_t sent = (size_t)n;
    if (sent < sizeof(len))
        return EIO;     /* a socket buffer of under 4 bytes: never seen */
    sent -= sizeof(len);
    if (sent < len && write_all(rp->fd, payload + sent, len - sent, SEND_WAIT_MS) < 0)
        return errno ? errno : EIO;
    return 0;
}

/**
 * Handles EXEC: validates the cwd and hands the exec to a reaper, which
 * starts the command and answers STARTED (or, when nothing could start,
 * reports REAPER_ERROR and exits). The supervisor does not wait for the
 * reaper's REAPER_PID: it takes it in when it needs the pid (a KILL, the
 * client gone; exec_pid_known), so an exec costs it one wake-up less.
 */
static void do_exec(conn *c, const unsigned char *payload, size_t len, int quiet)
{
    char **argv = NULL, **overlay = NULL;
    uint32_t argc, envc;
    const char *cwd;
    int cwd_fd = -1, master = -1, e;
    char msg[PATH_MAX + 128];
    reaper *rp = NULL;
    exec_tty tty;

    if (c->pid != 0 || c->starting || c->rp
        || (c->nfds != PROTO_EXEC_FDS && !(quiet && c->nfds == PROTO_EXEC_FDS_MAX))) {
        conn_error(c, PROTO_ERR_PROTOCOL, EPROTO, "EXEC needs three descriptors (EXEC_QUIET "
                   "three or four), once");
        goto out;
    }
    uint64_t start_by;
    e = parse_exec(payload, len, &argv, &argc, &overlay, &envc, &cwd, &tty, &start_by);
    if (e == EPROTO) {
        conn_error(c, PROTO_ERR_PROTOCOL, EPROTO, "malformed EXEC request");
        goto out;
    }
    if (e != 0) {
        conn_error(c, PROTO_ERR_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }
    /* Read whole only after the caller stopped waiting for its start (this
     * process was stopped or starved meanwhile): nothing starts, ever. The
     * frame is in, so a caller that still saw it unread at start_by knows
     * the command never runs (proto.h, EXEC). */
    if (start_by != 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        if (now >= start_by) {
            snprintf(msg, sizeof(msg), "the request was read %.3f s after its start "
                     "deadline: not started", (double)(now - start_by) / 1e9);
            conn_error(c, PROTO_ERR_DEADLINE, ETIMEDOUT, msg);
            goto out;
        }
    }

    /* The working directory must exist before anything runs. */
    cwd_fd = open(cwd, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cwd_fd < 0) {
        e = errno;
        snprintf(msg, sizeof(msg), "working directory %s: %s", cwd, strerror(e));
        conn_error(c, PROTO_ERR_CWD, e, msg);
        goto out;
    }
    if (tty.rows > 0) {
        /* The terminal is made here, in the sandbox's view of /dev; the
         * reaper gets its master in stderr's place (the terminal merges the
         * streams: stderr ends at once) and opens the slave for the
         * command. This end stays for RESIZE. */
        struct winsize ws = { .ws_row = (unsigned short)tty.rows,
                              .ws_col = (unsigned short)tty.cols };
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0
            || ioctl(master, TIOCSWINSZ, &ws) < 0) {
            e = errno;
            snprintf(msg, sizeof(msg), "cannot make a terminal: %s", strerror(e));
            conn_error(c, PROTO_ERR_INTERNAL, e, msg);
            goto out;
        }
        close(c->fds[2]);
        c->fds[2] = master;
        c->tty = dup(master);
        fcntl(c->tty, F_SETFD, FD_CLOEXEC);
        master = -1;
    }
    rp = reaper_get();
    e = rp ? reaper_send_job(rp, payload, (uint32_t)len, c->fds, cwd_fd, c->fd, quiet,
                             c->nfds > PROTO_EXEC_FDS ? c->fds[PROTO_EXEC_FDS] : -1)
            : errno;
    if (e != 0) {
        if (rp)
            reaper_retire(rp, 1);
        snprintf(msg, sizeof(msg), "cannot start a process: %s", strerror(e));
        conn_error(c, PROTO_ERR_INTERNAL, e, msg);
        goto out;
    }
    /* The reaper reports the pid and sends STARTED. */
    rp->owner = c;
    c->rp = rp;
    c->reaper = rp->pid;
    c->starting = 1;
    c->running = 1;

out:
    conn_close_fds(c);
    if (master >= 0)
        close(master);
    if (cwd_fd >= 0)
        close(cwd_fd);
    free(overlay);
    free(argv);
}

/** Takes in what @rp reported. */
static void read_report(reaper *rp)
{
    /* Several reports in one read (an exec's three, usually); a read
     * that does not fill the buffer took all there was. */
    size_t off = 0;
    int more = 1;
    while (rp->fd >= 0) {       /* reaper_retire() empties the buffer */
        if (rp->have - off < sizeof(reaper_msg)) {
            memmove(rp->msg, rp->msg + off, rp->have - off);
            rp->have -= off;
            off = 0;
            if (!more)
                return;
            ssize_t n = read(rp->fd, rp->msg + rp->have, sizeof(rp->msg) - rp->have);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return;
            if (n <= 0) {
                /* It is exiting; reap_children detaches it once it is gone. */
                reaper_retire(rp, 0);
                return;
            }
            more = (size_t)n == sizeof(rp->msg) - rp->have;
            rp->have += (size_t)n;
            continue;
        }
        reaper_msg m;
        memcpy(&m, rp->msg + off, sizeof(m));
        off += sizeof(m);
        conn *c = rp->owner;
        if (m.tag == REAPER_PID && c && c->starting) {
            c->starting = 0;
            if (m.value > 1) {
                c->pid = m.value;
            } else {
                c->running = 0;
                reaper_retire(rp, 1);
                conn_error(c, PROTO_ERR_INTERNAL, EIO, "cannot start a process: bad report "
                           "from its reaper");
            }
        } else if (m.tag == REAPER_ERROR && c && c->starting) {
            char msg[128];
            c->starting = 0;
            c->running = 0;
            reaper_retire(rp, 1);
            snprintf(msg, sizeof(msg), "cannot start a process: %s", strerror(m.value));
            conn_error(c, PROTO_ERR_INTERNAL, m.value, msg);
        } else if (m.tag == REAPER_EXIT && rp->owner) {
            exec_ended(rp->owner, m.value);
        } else if (m.tag == REAPER_EXIT_SENT && rp->owner) {
            rp->owner->running = 0;
        } else if (m.tag == REAPER_IDLE) {
            rp->busy = 0;
            reaper_detach(rp);
            size_t idle = 0;
            for (size_t i = 0; i < S.nreapers; i++)
                if (S.reapers[i]->fd >= 0 && !S.reapers[i]->busy && !S.reapers[i]->gone)
                    idle++;
            if (idle > REAPER_IDLE_MAX)
                reaper_retire(rp, 0);
        }
    }
}

/**
 * Takes in @c's REAPER_PID should it still be on its way (bounded by
 * START_WAIT_MS; an exec whose reaper does not report is failed and its
 * reaper killed), and any other report already sent. Returns 1 when the
 * exec's pid is known, else 0.
 */
static int exec_pid_known(conn *c)
{
    long long end = now_ms() + START_WAIT_MS;
    while (c->starting && c->rp && c->rp->fd >= 0) {
        long long left = end - now_ms();
        if (left <= 0 || wait_fd(c->rp->fd, POLLIN, left) <= 0)
            break;
        read_report(c->rp);
    }
    if (c->rp && c->rp->fd >= 0)
        read_report(c->rp);
    if (c->starting) {
        c->starting = 0;
        c->running = 0;
        if (c->rp)
            reaper_retire(c->rp, 1);
        conn_error(c, PROTO_ERR_INTERNAL, EIO, "cannot start a process: its reaper did "
                   "not answer");
    }
    return c->pid > 0;
}

/**
 * 1 when the serve loop must watch @rp's reports at once: only while its
 * exec was asked to KILL (the reaper then leaves EXIT to the supervisor).
 * Nothing else it says needs the supervisor right away: the client hears
 * STARTED and EXIT from the reaper itself, the reports wait in the socket
 * until the client goes or sends KILL (exec_pid_known, read_report), an
 * IDLE is taken in when an exec looks for a reaper (reaper_get), and a
 * reaper that ends is noticed by SIGCHLD. Each report left waiting is a
 * wake-up of the supervisor saved.
 */
static int reaper_watched(const reaper *rp)
{
    return rp->owner && rp->owner->killed;
}

/** Frees the reapers that were reaped. */
static void sweep_reapers(void)
{
    size_t k = 0;
    for (size_t i = 0; i < S.nreapers; i++) {
        if (S.reapers[i]->gone)
            free(S.reapers[i]);
        else
            S.reapers[k++] = S.reapers[i];
    }
    S.nreapers = k;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                               */
/* ------------------------------------------------------------------------ */

static void conn_send(conn *c, proto_buf *b)
{
    if (c->dead || proto_buf_finish(b) < 0 || write_all(c->fd, b->data, b->len, SEND_WAIT_MS) < 0)
        c->dead = 1;
    proto_buf_free(b);
}

static void handle_frame(conn *c)
{
    const unsigned char *payload = c->buf + PROTO_HEADER_SIZE;
    proto_reader r;
    proto_buf b;

    if (c->type != PROTO_EXEC && c->type != PROTO_EXEC_QUIET && c->type != PROTO_OWN)
        conn_close_fds(c);
    switch (c->type) {
    case PROTO_EXEC:
    case PROTO_EXEC_QUIET:
        do_exec(c, payload, c->plen, c->type == PROTO_EXEC_QUIET);
        break;
    case PROTO_KILL: {
        proto_reader_init(&r, payload, c->plen);
        int sig = proto_get_i32(&r);
        if (r.failed || sig < 0 || sig >= NSIG) {
            conn_error(c, PROTO_ERR_PROTOCOL, EINVAL, "bad signal");
            break;
        }
        /* Its reaper's reports first: the pid, and whether it ended. */
        if (sig > 0 && c->rp && c->rp->fd >= 0) {
            if (c->starting)
                exec_pid_known(c);
            else
                read_report(c->rp);
        }
        if (c->dead)
            break;
        if (c->pid > 0 && sig > 0) {
            c->killed = 1;
            /* Before any signal: the reaper then leaves EXIT to us. */
            uint32_t hold = JOB_HOLD;
            if (c->rp && c->rp->fd >= 0 && c->running)
                write_all(c->rp->fd, &hold, sizeof(hold), SEND_WAIT_MS);
            kill_exec(c, sig, sig == SIGKILL);
        }
        proto_buf_init(&b, PROTO_KILLED);
        conn_send(c, &b);
        break;
    }
    case PROTO_RESIZE: {
        proto_reader_init(&r, payload, c->plen);
        uint32_t rows = proto_get_u32(&r), cols = proto_get_u32(&r);
        if (r.failed || rows == 0 || cols == 0 || rows > UINT16_MAX || cols > UINT16_MAX) {
            conn_error(c, PROTO_ERR_PROTOCOL, EINVAL, "bad terminal size");
            break;
        }
        struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
        /* The kernel sends SIGWINCH to the foreground process group. */
        int err = c->tty < 0 ? ENOTTY : ioctl(c->tty, TIOCSWINSZ, &ws) < 0 ? errno : 0;
        proto_buf_init(&b, PROTO_RESIZED);
        proto_put_i32(&b, err);
        conn_send(c, &b);
        break;
    }
    case PROTO_PING:
        proto_buf_init(&b, PROTO_PONG);
        proto_put_u32(&b, PROTO_VERSION);
        conn_send(c, &b);
        break;
    case PROTO_OWN: {
        int ok = c->nfds == 1 && owner_add(c->fds[0]) == 0;
        if (c->nfds == 1)
            c->nfds = 0;    /* owner_add took it */
        conn_close_fds(c);
        if (!ok) {
            conn_error(c, PROTO_ERR_PROTOCOL, EPROTO, "OWN needs one pidfd");
            break;
        }
        proto_buf_init(&b, PROTO_OWNED);
        conn_send(c, &b);
        break;
    }
    case PROTO_DETACH:
        owners_forget();
        proto_buf_init(&b, PROTO_DETACHED);
        conn_send(c, &b);
        break;
    case PROTO_DESTROY:
        shutdown_sandbox(c);
    default:
        conn_error(c, PROTO_ERR_PROTOCOL, EPROTO, "unknown request");
        break;
    }
}

/** Reads what @c has sent, handling each complete frame. */
static void conn_read(conn *c)
{
    while (!c->dead) {
        size_t want = c->len < PROTO_HEADER_SIZE ? PROTO_HEADER_SIZE - c->len
                                                 : PROTO_HEADER_SIZE + c->plen - c->len;
        if (c->len + want > c->cap) {
            size_t cap = c->len + want;
            unsigned char *p = realloc(c->buf, cap);
            if (!p) {
                c->dead = 1;
                return;
            }
            c->buf = p;
            c->cap = cap;
        }
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * 8)];
        } ctl;
        struct iovec iov = { c->buf + c->len, want };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
        ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n > 0) {
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                    continue;
                size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                    if (c->nfds < PROTO_EXEC_FDS_MAX)
                        c->fds[c->nfds++] = fd;
                    else
                        close(fd);
                }
            }
            if (mh.msg_flags & MSG_CTRUNC)
                c->dead = 1;
        }
        if (n <= 0) {
            c->dead = 1;
            return;
        }
        c->len += (size_t)n;
        if (c->len == PROTO_HEADER_SIZE
            && proto_parse_header(c->buf, &c->type, &c->plen) < 0) {
            c->dead = 1;
            return;
        }
        if (c->len >= PROTO_HEADER_SIZE && c->len == PROTO_HEADER_SIZE + c->plen) {
            handle_frame(c);
            c->len = 0;
        }
    }
}

static void conn_free(conn *c)
{
    conn_close_fds(c);
    if (c->tty >= 0)
        close(c->tty);
    if (c->rp)
        c->rp->owner = NULL;    /* it serves on until its exec's tree is gone */
    close(c->fd);
    free(c->buf);
    free(c);
}

/** Closes dead connections; a command whose caller is gone is killed. */
static void sweep_conns(void)
{
    for (size_t i = 0; i < S.nconns; i++) {
        conn *c = S.conns[i];
        /* A client closes once it has its EXIT: take in the reaper's word
         * that the exec ended before deciding it was left running. */
        if (c->dead && c->running && c->rp && c->rp->fd >= 0) {
            if (c->starting)
                exec_pid_known(c);
            else
                read_report(c->rp);
        }
        if (c->dead && c->running && c->pid > 0)
            kill_exec(c, SIGKILL, 1);
    }
    size_t k = 0;
    for (size_t i = 0; i < S.nconns; i++) {
        if (S.conns[i]->dead)
            conn_free(S.conns[i]);
        else
            S.conns[k++] = S.conns[i];
    }
    S.nconns = k;
}

/** Accepts pending connections; returns -1 when out of descriptors. */
static int accept_conns(void)
{
    while (S.nconns < MAX_CONNS) {
        int fd = accept4(S.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS)
                return -1;
            return 0;
        }
        conn *c = calloc(1, sizeof(*c));
        conn **v = realloc(S.conns, (S.nconns + 1) * sizeof(*v));
        if (v)
            S.conns = v;
        if (!c || !v) {
            free(c);
            close(fd);
            return -1;
        }
        c->fd = fd;
        c->tty = -1;
        S.conns[S.nconns++] = c;
    }
    return 0;
}

static void handle_signals(void)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(S.sig_fd, &si, sizeof(si));
        if (n != (ssize_t)sizeof(si)) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        if (si.ssi_signo != SIGCHLD)
            shutdown_sandbox(NULL);
    }
    reap_children();
}

/** The sandbox is over when its socket's file was removed or replaced
 *  (its last link gone; where the path is known, the path no longer
 *  names it). */
static void watch_socket(void)
{
    struct stat st;
    if (fstat(S.sock_file_fd, &st) < 0 || st.st_nlink == 0)
        shutdown_sandbox(NULL);
    if (S.sock_path && (stat(S.sock_path, &st) < 0 || st.st_dev != S.sock_dev
                        || st.st_ino != S.sock_ino))
        shutdown_sandbox(NULL);
}

static void __attribute__((noreturn)) serve(void)
{
    long long last_watch = now_ms();
    long long accept_pause_until = 0;
    struct pollfd *pfd = NULL;
    size_t pcap = 0;

    for (;;) {
        /* signalfd, listener, each connection's socket, each reaper's,
         * each owner's pidfd */
        size_t n = 2 + S.nconns + S.nreapers + S.nowners;
        if (n > pcap) {
            struct pollfd *p = realloc(pfd, n * sizeof(*p));
            if (!p) {
                sleep_ms(10);
                continue;
            }
            pfd = p;
            pcap = n;
        }
        long long now = now_ms();
        int accepting = S.nconns < MAX_CONNS && now >= accept_pause_until;
        pfd[0] = (struct pollfd){ .fd = S.sig_fd, .events = POLLIN };
        pfd[1] = (struct pollfd){ .fd = accepting ? S.listen_fd : -1, .events = POLLIN };
        size_t nc = S.nconns, nr = S.nreapers, no = S.nowners;
        for (size_t i = 0; i < nc; i++)
            pfd[2 + i] = (struct pollfd){ .fd = S.conns[i]->fd, .events = POLLIN };
        for (size_t i = 0; i < nr; i++)
            pfd[2 + nc + i] = (struct pollfd){
                .fd = reaper_watched(S.reapers[i]) ? S.reapers[i]->fd : -1, .events = POLLIN };
        for (size_t i = 0; i < no; i++)
            pfd[2 + nc + nr + i] = (struct pollfd){ .fd = S.owners[i], .events = POLLIN };
        /* The lifetime's end is the loop's deadline. */
        if (S.deadline && now >= S.deadline)
            shutdown_sandbox(NULL);
        long long timeout = last_watch + WATCH_INTERVAL_MS - now;
        if (S.deadline && S.deadline - now < timeout)
            timeout = S.deadline - now;
        if (!accepting && S.nconns < MAX_CONNS && timeout > 100)
            timeout = 100;
        if (timeout < 0)
            timeout = 0;
        int r = poll(pfd, n, (int)timeout);
        if (r < 0 && errno != EINTR)
            shutdown_sandbox(NULL);
        if (now_ms() - last_watch >= WATCH_INTERVAL_MS) {
            watch_socket();
            last_watch = now_ms();
        }
        if (r <= 0)
            continue;
        if (pfd[0].revents)
            handle_signals();
        /* An owner's pidfd turns readable when that process has ended
         * (from the end, so removing one keeps the others' places). */
        for (size_t i = no; i-- > 0;)
            if (pfd[2 + nc + nr + i].revents && i < S.nowners
                && S.owners[i] == pfd[2 + nc + nr + i].fd)
                owner_ended(i);
        /* Reports first (an EXIT before a KILL on the same exec); reapers
         * and connections are only appended until the sweeps below. */
        for (size_t i = 0; i < nr; i++) {
            reaper *rp = S.reapers[i];
            if (pfd[2 + nc + i].revents && rp->fd >= 0 && pfd[2 + nc + i].fd == rp->fd)
                read_report(rp);
        }
        for (size_t i = 0; i < nc; i++) {
            conn *c = S.conns[i];
            if (pfd[2 + i].revents && pfd[2 + i].fd == c->fd)
                conn_read(c);
        }
        sweep_conns();
        sweep_reapers();
        if (pfd[1].revents) {
            /* A new client has usually sent its request already. */
            size_t first = S.nconns;
            if (accept_conns() < 0)
                accept_pause_until = now_ms() + 100;
            for (size_t i = first; i < S.nconns; i++)
                conn_read(S.conns[i]);
            sweep_conns();
            sweep_reapers();
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Start-up                                                                  */
/* ------------------------------------------------------------------------ */

/** Reads one frame from the control socket; returns the payload (malloc'd)
 *  or NULL. Descriptors riding with its first byte go to @fds (up to
 *  @max, close-on-exec; the count in *@nfds), others are closed. */
static unsigned char *read_control_frame(int fd, uint32_t *type, uint32_t *len, int *fds,
                                         int max, int *nfds)
{
    unsigned char hdr[PROTO_HEADER_SIZE];
    *nfds = 0;
    for (;;) {
        if (wait_fd(fd, POLLIN, CONFIG_WAIT_MS) <= 0)
            return NULL;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * 8)];
        } ctl;
        struct iovec iov = { hdr, 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return NULL;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int f;
                memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                if (*nfds < max)
                    fds[(*nfds)++] = f;
                else
                    close(f);
            }
        }
        break;
    }
    if (read_all(fd, hdr + 1, sizeof(hdr) - 1, CONFIG_WAIT_MS) < 0
        || proto_parse_header(hdr, type, len) < 0)
        return NULL;
    unsigned char *p = malloc(*len + 1);
    if (!p)
        return NULL;
    if (read_all(fd, p, *len, CONFIG_WAIT_MS) < 0) {
        free(p);
        return NULL;
    }
    return p;
}

/** Takes the CONFIG payload and its descriptors (@fds: the bound socket,
 *  its file); returns 0, or -1 with *@err and @msg set. */
static int apply_config(const unsigned char *payload, uint32_t len, const int *fds, int nfds,
                        int *err, char *msg, size_t msgsz)
{
    proto_reader r;
    proto_reader_init(&r, payload, len);
    const char *root = proto_get_str(&r);
    uint32_t n = proto_get_u32(&r);
    if (r.failed || n > len / 5) {
        *err = EPROTO;
        snprintf(msg, msgsz, "malformed CONFIG");
        return -1;
    }
    S.root = strdup(root);
    S.env = calloc((size_t)n + 1, sizeof(*S.env));
    if (!S.root || !S.env) {
        *err = ENOMEM;
        snprintf(msg, msgsz, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *e = proto_get_str(&r);
        if (!e || !strchr(e, '=')) {
            *err = EPROTO;
            snprintf(msg, msgsz, "malformed CONFIG");
            return -1;
        }
        if (!(S.env[S.nenv++] = strdup(e))) {
            *err = ENOMEM;
            snprintf(msg, msgsz, "out of memory");
            return -1;
        }
    }
    S.lifetime_ms = proto_get_u64(&r);
    uint32_t detached = proto_get_u32(&r);
    if (r.failed || r.left != 0 || detached > 1 || S.lifetime_ms > PROTO_LIFETIME_MAX_MS) {
        *err = EPROTO;
        snprintf(msg, msgsz, "malformed CONFIG (lifetime %llu ms, detached %u)",
                 (unsigned long long)S.lifetime_ms, detached);
        return -1;
    }
    S.detached = (int)detached;

    /* The plugin bound the socket; listening here makes SO_PEERCRED of
     * every connection name this process. A warm supervisor listens on
     * its own already: only the owner's pidfd comes. */
    int spare = S.listen_fd >= 0;
    int want = (spare ? 0 : PROTO_CONFIG_FDS) + !S.detached;
    if (nfds != want) {
        *err = EPROTO;
        snprintf(msg, msgsz, "CONFIG of %s sandbox came with %d descriptors, not %d",
                 S.detached ? "a detached" : "an attached", nfds, want);
        return -1;
    }
    if (!spare) {
        S.listen_fd = fds[0];
        S.sock_file_fd = fds[1];
    }
    if (!S.detached && owner_add(fds[want - 1]) < 0) {
        *err = ENOMEM;
        snprintf(msg, msgsz, "out of memory");
        return -1;
    }
    if (!spare) {
        struct stat st;
        errno = 0;
        int ok = fcntl(S.listen_fd, F_SETFL, O_NONBLOCK) == 0
            && listen(S.listen_fd, SOMAXCONN) == 0
            && fstat(S.sock_file_fd, &st) == 0 && S_ISSOCK(st.st_mode);
        *err = ok ? 0 : errno ? errno : ENOTSOCK;
        if (!ok) {
            snprintf(msg, msgsz, "cannot listen on the sandbox's socket: %s", strerror(*err));
            return -1;
        }
        S.sock_dev = st.st_dev;
        S.sock_ino = st.st_ino;
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0
        || (S.sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
        *err = errno;
        snprintf(msg, msgsz, "signalfd: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int write_proc_self(const char *file, const char *text)
{
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/*
 * --overlay=META: in a user and mount namespace of the launcher's own
 * (which bwrap inherits), mounts at META/mnt an overlay whose upper layer
 * is META/root (the sandbox's files, on the host's disk) over the empty
 * META/lower, with META/work as its work directory. The layers are named
 * relative to META, so the sandbox's mountinfo shows "/" as the root of its
 * "/" and no host path. Without overlayfs (or user extended attributes on
 * the filesystem of META) META/root is bound at META/mnt instead.
 */
static int launch_overlay(const char *meta)
{
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        fprintf(stderr, "sbx-supervisor: --overlay: unshare: %s\n", strerror(errno));
        return -1;
    }
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    int r = write_proc_self("/proc/self/uid_map", map);
    if (r == 0)
        r = write_proc_self("/proc/self/setgroups", "deny\n");
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if (r == 0)
        r = write_proc_self("/proc/self/gid_map", map);
    if (r < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || chdir(meta) < 0) {
        fprintf(stderr, "sbx-supervisor: --overlay: user namespace for %s: %s\n", meta,
                strerror(errno));
        return -1;
    }
    if (mount("overlay", "mnt", "overlay", 0,
              "lowerdir=lower,upperdir=root,workdir=work,userxattr") < 0
        && mount("root", "mnt", NULL, MS_BIND, NULL) < 0) {
        fprintf(stderr, "sbx-supervisor: --overlay: cannot mount %s/mnt: %s\n", meta,
                strerror(errno));
        return -1;
    }
    if (chdir("/") < 0)
        return -1;
    return 0;
}

/**
 * Gives a caller's workdir @root, lent to the sandbox's user, back to the
 * owner META/workdir-owner names ("UID GID\n", written by the library;
 * only a file of this user nobody else may write, and only while @root
 * belongs to someone else than that owner).
 */
static void give_back(const char *meta, const char *root)
{
    unsigned ou, og;
    struct stat st;
    if (proto_workdir_owner(meta, &ou, &og) < 0)
        return;
    int dfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    if (fstat(dfd, &st) == 0 && st.st_uid != (uid_t)ou && fchown(dfd, (uid_t)ou, (gid_t)og) < 0)
        fprintf(stderr, "sbx-supervisor: cannot give %s back to uid %u: %s\n", root, ou,
                strerror(errno));
    close(dfd);
}

/** A warm supervisor's directory under its first name, which its keeper
 *  made and removes with the rest (keeper()); NULL for any other. */
static const char *keeper_spare;

/** Set in the bubblewrap launcher's keeper: after DESTROY it checks that
 *  the library finished removing META (keeper()). */
static int keeper_checks_destroy;

/** The bubblewrap launcher's keeper: META as the launcher made it (its
 *  device and inode), so that the keeper finds it under the name it has
 *  when the sandbox ends: as made, renamed to DIR/claim_id by the create
 *  that claimed it (a warm sandbox's, --spare-id), or either's trash name
 *  (destroy renames META there for the keeper to remove). */
static struct {
    int on;
    dev_t dev;
    ino_t ino;
    const char *claim_id;       /* --spare-id's ID; NULL for a cold start */
} keeper_follow;

/** 1 when @path is META (keeper_follow). */
static int keeper_is_meta(const char *path)
{
    struct stat st;
    return path && lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == keeper_follow.dev
           && st.st_ino == keeper_follow.ino;
}

/** The name META (@meta as made) has now, malloc'd; NULL when it is gone
 *  (or memory ran out). Without keeper_follow, @meta itself. */
static char *keeper_meta_now(const char *meta)
{
    if (!keeper_follow.on || !meta)
        return meta ? strdup(meta) : NULL;
    char *names[4] = { strdup(meta), NULL, NULL, NULL };
    const char *slash = strrchr(meta, '/');
    if (keeper_follow.claim_id && slash
        && asprintf(&names[1], "%.*s/%s", (int)(slash - meta), meta,
                    keeper_follow.claim_id) < 0)
        names[1] = NULL;
    names[2] = names[0] ? proto_trash_path(names[0]) : NULL;
    names[3] = names[1] ? proto_trash_path(names[1]) : NULL;
    char *found = NULL;
    for (int i = 0; i < 4; i++) {
        if (!found && keeper_is_meta(names[i]))
            found = names[i];
        else
            free(names[i]);
    }
    return found;
}

/** A caller's root_dir whose bwrap mount points the bubblewrap launcher's
 *  keeper removes (--clean-root); NULL for any other. */
static const char *keeper_clean_root;

/**
 * The keeper of a sandbox: waits for its process @child (the supervisor,
 * or bwrap whose init it is) and, unless that exited 0 (after DESTROY,
 * when the supervisor removed the directory and the library the rest) or
 * PROTO_EXIT_TRASH_LEFT (after DESTROY: then it removes the trash only),
 * removes what the sandbox left on the host: the cgroup directories
 * holding @cg (cgroup.procs files, @ncg of them), the meta directory @meta
 * and its trash name (a supervisor that died removing it after DESTROY),
 * and @remove (may be NULL), and a warm supervisor's directory under its
 * first name (keeper_spare: claimed, it died before renaming it); a
 * caller's workdir @lent (may be NULL) to the sandbox's user goes back to
 * its owner first (give_back). Holds no descriptor of the sandbox; never
 * returns.
 */
static void __attribute__((noreturn)) keeper(pid_t child, const char *meta, const char *remove,
                                             const char *lent, char **cg, size_t ncg)
{
    close_range(0, ~0U, 0);
    int status = 0;
    pid_t r;
    while ((r = waitpid(child, &status, 0)) < 0 && errno == EINTR)
        ;
    if (r == child && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        /* After DESTROY the library removes what is left. The bubblewrap
         * launcher's keeper makes sure it did: the library holds a lock
         * on META (flock) from before DESTROY until META is gone, so once
         * this gets the lock, a META still there means the library died
         * midway (a SIGKILL of the application or the plugin host): all
         * of it goes below. */
        char *named = keeper_checks_destroy ? keeper_meta_now(meta) : NULL;
        int fd = named ? open(named, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        free(named);
        if (fd < 0)
            _exit(0);
        while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
            ;
        struct stat st;
        int left = fstat(fd, &st) == 0 && st.st_nlink > 0;
        close(fd);
        if (!left)
            _exit(0);
    }
    if (r == child && WIFEXITED(status) && WEXITSTATUS(status) == PROTO_EXIT_SPARE_ONLY
        && keeper_spare) {
        proto_rm_tree(keeper_spare);
        _exit(0);
    }
    if (r == child && WIFEXITED(status) && WEXITSTATUS(status) == PROTO_EXIT_TRASH_LEFT
        && meta) {
        char *trash = proto_trash_path(meta);
        if (trash)
            proto_rm_tree(trash);
        free(trash);
        _exit(0);
    }
    /* A cgroup goes once the last process in it is gone (just after its
     * init, which the keeper saw end); bounded. */
    for (size_t i = 0; i < ncg; i++) {
        char *dir = strdup(cg[i]);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (!slash)
            continue;
        *slash = '\0';
        /* After 1, 2, 4, 8, then every 10 ms: about 2 s in all. */
        long ms = 1;
        for (int round = 0; round < 200 && rmdir(dir) < 0 && errno == EBUSY; round++) {
            sleep_ms(ms);
            ms = ms * 2 > 10 ? 10 : ms * 2;
        }
        free(dir);
    }
    if (keeper_clean_root)
        proto_clean_bwrap_root(keeper_clean_root);
    /* META under its name now (keeper_meta_now): nothing when it is gone. */
    char *meta_now = keeper_meta_now(meta);
    if (meta_now && lent)
        give_back(meta_now, lent);
    if (keeper_spare)
        proto_rm_tree(keeper_spare);
    if (meta_now) {
        proto_rm_tree(meta_now);
        char *trash = proto_trash_path(meta_now);
        if (trash)
            proto_rm_tree(trash);
        free(trash);
    }
    free(meta_now);
    if (remove)
        proto_rm_tree(remove);
    _exit(0);
}

/** In the launcher's sandbox process: joins the cgroups @cg (@ncg), puts
 *  the seccomp filter on descriptor @seccomp_fd (> 3, or 0 for none),
 *  becomes @uid/@gid (when > 0) and mounts @overlay (may be NULL).
 *  Returns 0, or the launcher's exit status (the reason on stderr). */
static int launch_setup(char **cg, size_t ncg, long seccomp_fd, long uid, long gid,
                        const char *overlay)
{
    for (size_t i = 0; i < ncg; i++) {
        int fd = open(cg[i], O_WRONLY | O_CLOEXEC);
        char num[32];
        int n = snprintf(num, sizeof(num), "%d\n", (int)getpid());
        if (fd < 0 || write(fd, num, (size_t)n) != n) {
            fprintf(stderr, "sbx-supervisor: cannot join cgroup %s: %s\n", cg[i],
                    strerror(errno));
            if (fd >= 0)
                close(fd);
            return 1;
        }
        close(fd);
    }
    if (seccomp_fd > 0) {
#ifdef SBX_SUPERVISOR_SECCOMP
        char msg[256];
        int fd = sbx_seccomp_filter_fd(msg, sizeof(msg));
        if (fd < 0) {
            fprintf(stderr, "sbx-supervisor: %s\n", msg);
            return 1;
        }
        if (fd != seccomp_fd) {
            if (dup2(fd, (int)seccomp_fd) < 0) {
                fprintf(stderr, "sbx-supervisor: dup2 of the seccomp filter: %s\n",
                        strerror(errno));
                close(fd);
                return 1;
            }
            close(fd);
        }
#else
        fprintf(stderr, "sbx-supervisor: --launch: --seccomp-fd=%ld: built without "
                "libseccomp\n", seccomp_fd);
        return 1;
#endif
    }
    if (uid > 0) {
        if (setgroups(0, NULL) < 0 || setgid((gid_t)gid) < 0 || setuid((uid_t)uid) < 0
            || getuid() != (uid_t)uid || geteuid() != (uid_t)uid
            || getgid() != (gid_t)gid || getegid() != (gid_t)gid) {
            fprintf(stderr, "sbx-supervisor: cannot become uid %ld, gid %ld: %s\n", uid, gid,
                    strerror(errno));
            return 1;
        }
        /* The change of user made /proc/self root's; the maps below and
         * the library's view of the sandbox need it ours. */
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    }
    if (overlay && launch_overlay(overlay) < 0)
        return 1;
    return 0;
}

/**
 * Launcher mode of the bubblewrap backend:
 *     sbx-supervisor --launch [--cgroup-procs=FILE]... [--seccomp-fd=N]
 *                    [--user=UID:GID] [--overlay=META] [--keep=META]
 *                    [--make-keep] [--remove=PATH] [--lent=ROOT] [--clean-root=ROOT]
 *                    [--spare-id=ID] -- PROGRAM ARG...
 * With --spare-id (a warm sandbox, made ahead; with --make-keep and
 * --overlay only): META may be renamed to DIR/ID (the keeper follows it,
 * keeper_follow), the command line shows ID in place of META, there is no
 * start-up log, and PROGRAM gets "--bind META/mnt /" on descriptor
 * PROTO_ROOT_ARGS_FD (root_args_fd, for `bwrap --args`).
 * With --make-keep, makes META first (mode 0700; exit PROTO_EXIT_EXISTS
 * when it exists), its stderr META/log from then on, and --remove's PATH
 * when missing (one that exists is left to its owner); once the keeper
 * runs, writes a byte to stdout ('M' when it made PATH, else 'R'), and the
 * sandbox's process waits for a
 * byte ('G') on stdin before anything else (EOF: it exits 1 and the keeper
 * removes everything), so the library makes what goes in META, the
 * cgroups and a lent root only while a keeper stands ready to remove them.
 * Forks a keeper and exits once the sandbox's process started: 0, or 1
 * when a cgroup, the filter or the change of user failed, 2 on a malformed
 * command line, 127 when PROGRAM cannot run (the reason goes to stderr);
 * so the library reaps it by pid. The keeper forks the sandbox's process,
 * which moves itself into each cgroup (FILE is a cgroup.procs file); with
 * --seccomp-fd, compiles the sandbox's seccomp filter (seccomp.c) onto
 * descriptor N (> 3) for `bwrap --seccomp N`; with --user, becomes UID and
 * GID with no supplementary groups (the library runs as root: bwrap then
 * runs unprivileged, its user namespace maps the sandbox's uid to UID and
 * nothing of it is host root); with --overlay, mounts the sandbox's root
 * (launch_overlay); and execs PROGRAM (bwrap, whose init is the supervisor
 * in --init mode), keeping descriptor 3 (and N). The keeper stays outside
 * every namespace, cgroup and change of user, as the library's user, and
 * when bwrap has ended other than after a DESTROY the library saw through
 * (exit 0, and META gone once the library's lock on it is free) gives a caller's
 * workdir ROOT lent to the sandbox's user back (--lent) and removes the
 * cgroups, bwrap's mount points in a caller's root_dir (--clean-root),
 * --keep's META and --remove's PATH (keeper()).
 */
/* Undoes what a start made before its keeper could: the directory @dir
 * (NULL: none made here) and --remove's PATH @remove when @made_remove.
 * Returns 1, the start's failure status. */
static int unmake(const char *dir, const char *remove, int made_remove)
{
    if (dir)
        proto_rm_tree(dir);
    if (made_remove)
        rmdir(remove);
    return 1;
}

/* --remove's PATH (the tmp/ of a caller's workdir or root_dir), made
 * here when missing: then it is the sandbox's (*@made = 1; its keeper and
 * DESTROY remove it). One that exists is the caller's: left alone, and
 * *@remove becomes NULL. 0, or -1 with what went wrong in @msg (a
 * directory cannot be made, or the path is not one). */
static int make_remove_dir(const char **remove, int *made, char *msg, size_t size)
{
    struct stat st;
    *made = 0;
    if (mkdir(*remove, 0700) == 0) {
        *made = 1;
        return 0;
    }
    if (errno == EEXIST && stat(*remove, &st) == 0 && S_ISDIR(st.st_mode)) {
        *remove = NULL;
        return 0;
    }
    int e = errno;
    snprintf(msg, size, "cannot create %s: %s", *remove,
             e == EEXIST ? "exists and is not a directory" : strerror(e));
    errno = e;
    return -1;
}

/* A warm sandbox's bwrap gets "--bind META/mnt /" on PROTO_ROOT_ARGS_FD
 * (`bwrap --args`), a pipe holding those three arguments. 0, or 1 (the
 * reason on stderr). */
static int root_args_fd(const char *meta)
{
    char *a = NULL;
    int p[2];
    int n = asprintf(&a, "--bind%c%s/mnt%c/%c", 0, meta, 0, 0);
    if (n < 0 || pipe(p) < 0) {
        fprintf(stderr, "sbx-supervisor: --spare-id: %s\n", strerror(errno));
        free(a);
        return 1;
    }
    int ok = write_all(p[1], a, (size_t)n, CONFIG_WAIT_MS) == 0;
    free(a);
    close(p[1]);
    if (ok && p[0] != PROTO_ROOT_ARGS_FD) {
        ok = dup2(p[0], PROTO_ROOT_ARGS_FD) == PROTO_ROOT_ARGS_FD;
        close(p[0]);
    }
    if (!ok) {
        fprintf(stderr, "sbx-supervisor: --spare-id: cannot pass the root's bind: %s\n",
                strerror(errno));
        return 1;
    }
    return 0;
}

/* A descriptor of at least @min for @fd (close-on-exec; @fd closed), or
 * -1: so that nothing of the launcher sits where bwrap's descriptors go. */
static int fd_at_least(int fd, int min)
{
    if (fd < 0 || fd >= min)
        return fd;
    int n = fcntl(fd, F_DUPFD_CLOEXEC, min);
    close(fd);
    return n;
}

static int launch(int argc, char **argv)
{
    static const char cg_opt[] = "--cgroup-procs=", sc_opt[] = "--seccomp-fd=",
                      user_opt[] = "--user=", ovl_opt[] = "--overlay=",
                      keep_opt[] = "--keep=", rm_opt[] = "--remove=", lent_opt[] = "--lent=",
                      spare_opt[] = "--spare-id=";
    const char *overlay = NULL, *keep = NULL, *remove = NULL, *lent = NULL, *spare_id = NULL;
    int make_keep = 0;
    char *cg[8];
    size_t ncg = 0;
    long seccomp_fd = 0;
    int i = 2;
    long uid = -1, gid = -1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strncmp(argv[i], cg_opt, sizeof(cg_opt) - 1) == 0) {
            if (ncg == sizeof(cg) / sizeof(cg[0])) {
                fprintf(stderr, "sbx-supervisor: --launch: more than %zu %s options\n",
                        sizeof(cg) / sizeof(cg[0]), cg_opt);
                return 2;
            }
            cg[ncg++] = argv[i] + sizeof(cg_opt) - 1;
        } else if (strncmp(argv[i], sc_opt, sizeof(sc_opt) - 1) == 0) {
            char *end;
            seccomp_fd = strtol(argv[i] + sizeof(sc_opt) - 1, &end, 10);
            if (*end || seccomp_fd <= PROTO_CONTROL_FD || seccomp_fd > 1024) {
                fprintf(stderr, "sbx-supervisor: --launch: bad %s (a descriptor above %d)\n",
                        argv[i], PROTO_CONTROL_FD);
                return 2;
            }
        } else if (strncmp(argv[i], ovl_opt, sizeof(ovl_opt) - 1) == 0
                   && argv[i][sizeof(ovl_opt) - 1] == '/') {
            overlay = argv[i] + sizeof(ovl_opt) - 1;
        } else if (strncmp(argv[i], keep_opt, sizeof(keep_opt) - 1) == 0
                   && argv[i][sizeof(keep_opt) - 1] == '/') {
            keep = argv[i] + sizeof(keep_opt) - 1;
        } else if (strcmp(argv[i], "--make-keep") == 0) {
            make_keep = 1;
        } else if (strncmp(argv[i], spare_opt, sizeof(spare_opt) - 1) == 0
                   && argv[i][sizeof(spare_opt) - 1] && !strchr(argv[i], '/')) {
            spare_id = argv[i] + sizeof(spare_opt) - 1;
        } else if (strncmp(argv[i], "--clean-root=/", 14) == 0) {
            keeper_clean_root = argv[i] + 13;
        } else if (strncmp(argv[i], rm_opt, sizeof(rm_opt) - 1) == 0
                   && argv[i][sizeof(rm_opt) - 1] == '/') {
            remove = argv[i] + sizeof(rm_opt) - 1;
        } else if (strncmp(argv[i], lent_opt, sizeof(lent_opt) - 1) == 0
                   && argv[i][sizeof(lent_opt) - 1] == '/') {
            lent = argv[i] + sizeof(lent_opt) - 1;
        } else if (strncmp(argv[i], user_opt, sizeof(user_opt) - 1) == 0) {
            char *end;
            const char *v = argv[i] + sizeof(user_opt) - 1;
            uid = strtol(v, &end, 10);
            if (end == v || *end != ':' || uid <= 0 || uid > 0x7ffffffe) {
                fprintf(stderr, "sbx-supervisor: --launch: bad %s (UID:GID, not 0)\n",
                        argv[i]);
                return 2;
            }
            v = end + 1;
            gid = strtol(v, &end, 10);
            if (end == v || *end || gid <= 0 || gid > 0x7ffffffe) {
                fprintf(stderr, "sbx-supervisor: --launch: bad %s (UID:GID, not 0)\n",
                        argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "sbx-supervisor: --launch: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (i + 1 >= argc || strcmp(argv[i], "--") != 0 || argv[i + 1][0] != '/') {
        fprintf(stderr, "sbx-supervisor: --launch: expected -- /PROGRAM ARG...\n");
        return 2;
    }
    if (make_keep && !keep) {
        fprintf(stderr, "sbx-supervisor: --launch: --make-keep without --keep\n");
        return 2;
    }
    if (spare_id && (!make_keep || !overlay || remove || lent || keeper_clean_root)) {
        fprintf(stderr, "sbx-supervisor: --launch: --spare-id needs --make-keep and "
                "--overlay, and no --remove, --lent or --clean-root\n");
        return 2;
    }
    if (spare_id) {
        /* A warm sandbox (made ahead, its META claimed and renamed to
         * DIR/ID by a create): none of its command lines names META, so
         * that it is nobody's to see but its client's. Ours shows the ID
         * in place of the paths; bwrap's root comes on a descriptor. */
        char *k = strdup(keep), *o = strdup(overlay);
        if (!k || !o) {
            free(k);
            free(o);
            return 1;
        }
        keep = k;
        overlay = o;
        for (int j = 2; j < i; j++) {
            size_t len = strlen(argv[j]);
            const char *opt = strncmp(argv[j], keep_opt, sizeof(keep_opt) - 1) == 0 ? keep_opt
                              : strncmp(argv[j], ovl_opt, sizeof(ovl_opt) - 1) == 0 ? ovl_opt
                              : NULL;
            if (opt) {
                memset(argv[j], 0, len);
                snprintf(argv[j], len + 1, "%s%s", opt, spare_id);
            }
        }
    }
    /* --make-keep: META is made here, so that it never exists without the
     * keeper (forked next) to remove it, whenever the library stops; its
     * start-up log is our stderr from now on. */
    if (make_keep) {
        if (mkdir(keep, 0700) < 0) {
            if (errno == EEXIST)
                return PROTO_EXIT_EXISTS;
            fprintf(stderr, "sbx-supervisor: cannot create %s: %s\n", keep, strerror(errno));
            return 1;
        }
        /* The keeper follows META by its inode, whatever its name when
         * the sandbox ends (keeper_follow). */
        struct stat kst;
        if (lstat(keep, &kst) < 0) {
            fprintf(stderr, "sbx-supervisor: cannot look at %s: %s\n", keep, strerror(errno));
            rmdir(keep);
            return 1;
        }
        keeper_follow.on = 1;
        keeper_follow.dev = kst.st_dev;
        keeper_follow.ino = kst.st_ino;
        keeper_follow.claim_id = spare_id;
        /* A warm sandbox's start-up has no log: its descriptor would name
         * META. */
        char *log = NULL;
        int lfd = spare_id ? open("/dev/null", O_WRONLY | O_CLOEXEC)
                  : asprintf(&log, "%s/log", keep) < 0 ? -1
                  : open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
        free(log);
        if (lfd >= 0) {
            dup2(lfd, 2);
            close(lfd);
        }
    }
    /* So is --remove's PATH (the tmp/ of a caller's root_dir) when it is
     * missing; one that exists is not the sandbox's: kept, and the ready
     * byte says so. */
    int made_remove = 0;
    char rmsg[PATH_MAX + 128];
    if (make_keep && remove && make_remove_dir(&remove, &made_remove, rmsg, sizeof rmsg) < 0) {
        fprintf(stderr, "sbx-supervisor: %s\n", rmsg);
        proto_rm_tree(keep);
        return 1;
    }
    /* The sandbox's process reports a failed setup on this pipe; a
     * successful exec closes it. */
    int pp[2];
    if (pipe2(pp, O_CLOEXEC) < 0)
        return unmake(make_keep ? keep : NULL, remove, made_remove);
    /* Above the descriptors bwrap gets (3, the filter's, the root's). */
    pp[0] = fd_at_least(pp[0], PROTO_ROOT_ARGS_FD + 1);
    pp[1] = fd_at_least(pp[1], PROTO_ROOT_ARGS_FD + 1);
    if (pp[0] < 0 || pp[1] < 0)
        return unmake(make_keep ? keep : NULL, remove, made_remove);
    pid_t k = fork();
    if (k < 0)
        return unmake(make_keep ? keep : NULL, remove, made_remove);
    if (k > 0) {
        close(pp[1]);
        unsigned char code = 0;
        ssize_t n;
        while ((n = read(pp[0], &code, 1)) < 0 && errno == EINTR)
            ;
        _exit(n == 1 ? code : 0);
    }
    close(pp[0]);
    pid_t b = fork();
    if (b < 0) {
        unsigned char code = 1;
        unmake(make_keep ? keep : NULL, remove, made_remove);
        if (write(pp[1], &code, 1) < 0)
            _exit(1);
        _exit(1);
    }
    if (b == 0) {
        int code = 0;
        if (make_keep) {
            /* The library prepares META and says go (a byte on stdin);
             * EOF instead: it failed or died, nothing starts. */
            unsigned char go = 0;
            ssize_t n;
            int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (nul >= 0)
                dup2(nul, 1);
            while ((n = read(0, &go, 1)) < 0 && errno == EINTR)
                ;
            if (nul >= 0) {
                dup2(nul, 0);
                close(nul);
            }
            if (n != 1 || go != 'G')
                code = 1;
        }
        if (code == 0)
            code = launch_setup(cg, ncg, seccomp_fd, uid, gid, overlay);
        if (code == 0 && spare_id)
            code = root_args_fd(overlay);
        if (code == 0) {
            execv(argv[i + 1], argv + i + 1);
            fprintf(stderr, "sbx-supervisor: cannot run %s: %s\n", argv[i + 1],
                    strerror(errno));
            code = 127;
        }
        unsigned char c = (unsigned char)code;
        if (write(pp[1], &c, 1) < 0)
            _exit(code);
        _exit(code);
    }
    keeper_checks_destroy = 1;
    if (make_keep) {
        /* Ready: what the library makes from now on is ours to remove.
         * Should the library be gone already, the write fails (EPIPE, not
         * the signal) and the sandbox's process sees EOF on its stdin. */
        signal(SIGPIPE, SIG_IGN);
        unsigned char ready = made_remove ? 'M' : 'R';
        ssize_t w;
        while ((w = write(1, &ready, 1)) < 0 && errno == EINTR)
            ;
        (void)w;
    }
    keeper(b, keep, remove, lent, cg, ncg);
}

static int run(int init_mode, const char *remove, char **warm_argv, const char *spare_base);
static void set_title(char **argv, const char *dir);

/** What every start does first: keeps no descriptor but the control
 *  socket's (nothing the application leaked past exec) and ignores
 *  SIGPIPE. */
static void start_up(void)
{
    close_range(PROTO_CONTROL_FD + 1, ~0U, 0);
    fcntl(PROTO_CONTROL_FD, F_SETFD, FD_CLOEXEC);
    struct sigaction sa = { .sa_handler = SIG_IGN };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
}

/**
 * Waits, with no time limit, for CLAIM on the control socket of a warm
 * supervisor and takes its directory and keeper's extra path; writes
 * "--sandbox-dir=DIR" over the command line's PAD (@argv) so ps and /proc
 * show which sandbox it serves, as a cold start's would. Returns 0, or -1
 * when the socket closed first or the frame is bad.
 */
static int read_claim(char **argv, char **dir, char **remove)
{
    int ctl = PROTO_CONTROL_FD;
    struct pollfd pf = { .fd = ctl, .events = POLLIN };
    while (poll(&pf, 1, -1) < 0 && errno == EINTR)
        ;
    unsigned char hdr[PROTO_HEADER_SIZE];
    uint32_t type, len;
    if (read_all(ctl, hdr, sizeof(hdr), CONFIG_WAIT_MS) < 0
        || proto_parse_header(hdr, &type, &len) < 0 || type != PROTO_CLAIM)
        return -1;
    unsigned char *payload = malloc((size_t)len + 1);
    if (!payload || read_all(ctl, payload, len, CONFIG_WAIT_MS) < 0) {
        free(payload);
        return -1;
    }
    proto_reader rd;
    proto_reader_init(&rd, payload, len);
    const char *d = proto_get_str(&rd);
    const char *r = proto_get_str(&rd);
    if (rd.failed || !d || d[0] != '/' || !r || (r[0] && r[0] != '/')) {
        free(payload);
        return -1;
    }
    int has_remove = r[0] != '\0';
    *dir = strdup(d);
    *remove = has_remove ? strdup(r) : NULL;
    free(payload);
    if (!*dir || (has_remove && !*remove))
        return -1;
    set_title(argv, *dir);
    return 0;
}

/** Writes "--sandbox-dir=@dir" over a warm supervisor's "--warm PAD"
 *  (argv[2] and argv[3], which lie end to end). */
static void set_title(char **argv, const char *dir)
{
    size_t room = strlen(argv[2]) + 1 + PROTO_WARM_PAD;
    if (argv[3] == argv[2] + strlen(argv[2]) + 1
        && strlen("--sandbox-dir=") + strlen(dir) < room) {
        memset(argv[2], 0, room);
        snprintf(argv[2], room, "--sandbox-dir=%s", dir);
    }
}

/**
 * The keeper of a warm supervisor, which made its directory @spare: keeper()
 * once the sandbox's paths came through @pipe_rd (the supervisor writes
 * "DIR\0PATH\0" there when it is claimed, before it renames @spare to
 * DIR); when the supervisor ends unclaimed, it removes @spare and exits.
 * Never returns.
 */
static void __attribute__((noreturn)) warm_keeper(pid_t child, int pipe_rd, char **argv,
                                                  const char *spare)
{
    close_range(0, (unsigned)pipe_rd - 1, 0);
    close_range((unsigned)pipe_rd + 1, ~0U, 0);
    char buf[2 * PATH_MAX + 4];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(pipe_rd, buf + n, sizeof(buf) - 1 - n);
        if (r > 0) {
            n += (size_t)r;
            if (n < sizeof(buf) - 1)
                continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        break;
    }
    close(pipe_rd);
    buf[n] = '\0';
    size_t dl = strnlen(buf, n);
    keeper_spare = spare;
    if (n == 0 || dl == n || buf[0] != '/') {
        /* Unclaimed (or cut short): its directory is all there is. */
        int status;
        while (waitpid(child, &status, 0) < 0 && errno == EINTR)
            ;
        proto_rm_tree(spare);
        _exit(0);
    }
    const char *dir = buf, *remove = buf + dl + 1;
    set_title(argv, dir);
    keeper(child, dir, remove[0] == '/' ? remove : NULL, NULL, NULL, 0);
}

/**
 * In a warm supervisor: makes what a sandbox in directory @spare needs
 * before its request (root/, root/tmp/, and the socket bound and
 * listening at sock, mode 0600; its file's identity kept in S.sock_dev
 * and S.sock_ino); 0, or -1 (its keeper removes @spare).
 */
static int spare_prepare(const char *spare)
{
    char *root = NULL, *tmp = NULL;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (asprintf(&root, "%s/root", spare) < 0)
        return -1;
    if (asprintf(&tmp, "%s/root/tmp", spare) < 0 || asprintf(&S.sock_path, "%s/sock", spare) < 0
        || strlen(S.sock_path) >= sizeof(sa.sun_path)
        || mkdir(root, 0700) < 0 || mkdir(tmp, 0700) < 0) {
        free(root);
        free(tmp);
        return -1;
    }
    free(root);
    free(tmp);
    strcpy(sa.sun_path, S.sock_path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct stat st;
    /* No descriptor names a path in the spare (sock_file_fd is opened at
     * CLAIM): nothing but its client's own check finds it by its path. */
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(S.sock_path, 0600) < 0
        || listen(s, SOMAXCONN) < 0 || lstat(S.sock_path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        if (s >= 0)
            close(s);
        return -1;
    }
    S.listen_fd = s;
    S.sock_dev = st.st_dev;
    S.sock_ino = st.st_ino;
    return 0;
}

/** Sends an empty frame of @type on @fd with @pass (>= 0) riding along as
 *  SCM_RIGHTS; 0 or -1. */
static int send_fd_frame(int fd, uint32_t type, int pass)
{
    proto_buf b;
    proto_buf_init(&b, type);
    if (proto_buf_finish(&b) < 0) {
        proto_buf_free(&b);
        return -1;
    }
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = { b.data, b.len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &pass, sizeof(int));
    ssize_t n;
    while ((n = sendmsg(fd, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    int rc = n < 0 ? -1
             : (size_t)n < b.len ? write_all(fd, b.data + n, b.len - (size_t)n, CONFIG_WAIT_MS)
             : 0;
    proto_buf_free(&b);
    return rc < 0 ? -1 : 0;
}

/* How long a spawner at EOF waits for its ready warm supervisor's keeper
 * to have removed its directory. */
#define READY_GONE_MS 5000

/** A warm supervisor forked by the spawner and not yet asked for. */
typedef struct ready_sup {
    int ctl;            /* the library's end of its control socket; -1 none */
    int keeper_fd;      /* pidfd of its keeper (the process forked); -1 none */
    char *base;         /* the directory its directory was made in */
} ready_sup;

/**
 * Forks a warm supervisor whose directory goes in @base (the fork is its
 * keeper, a sibling of this process: see spawner_main()). Returns the
 * library's end of its control socket, or -1 with errno; *@keeper_fd gets
 * a pidfd of the keeper, or -1 when none could be opened.
 */
static int spawner_fork_one(char **argv, const char *base, int *keeper_fd)
{
    int sv[2];
    *keeper_fd = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    /* A sibling, not a child: the keeper settles under this process's
     * parent (the caller's subreaper, or init) at once, with no process
     * forked in between to exit. A raw clone: this process has one
     * thread, and nothing of glibc it uses depends on the thread id fork
     * would have updated (raise() asks the kernel). */
    pid_t x = (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), NULL, NULL,
                             NULL, NULL);
    if (x == 0) {
        /* Its own control socket in place of this one's. */
        if (dup2(sv[1], PROTO_CONTROL_FD) < 0)
            _exit(1);
        start_up();
        _exit(run(0, NULL, argv, base));
    }
    int err = errno;
    close(sv[1]);
    if (x < 0) {
        close(sv[0]);
        errno = err;
        return -1;
    }
    *keeper_fd = proto_pidfd_open(x);
    if (*keeper_fd >= 0)
        fcntl(*keeper_fd, F_SETFD, FD_CLOEXEC);
    return sv[0];
}

/** 1 when @r's keeper has ended (killed: it ends only after its
 *  supervisor otherwise). */
static int ready_keeper_gone(const ready_sup *r)
{
    struct pollfd pf = { .fd = r->keeper_fd, .events = POLLIN };
    return r->keeper_fd >= 0 && poll(&pf, 1, 0) > 0
           && (pf.revents & (POLLIN | POLLHUP | POLLERR));
}

/** The spare directory @r's supervisor named in its HELLO, still unread on
 *  its control socket (MSG_PEEK): a new string when it is a spare's in
 *  r->base, else NULL (no HELLO yet, or not one). */
static char *ready_spare_dir(const ready_sup *r)
{
    unsigned char buf[PROTO_HEADER_SIZE + PATH_MAX + 64];
    ssize_t n = recv(r->ctl, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    uint32_t type, len;
    if (n < (ssize_t)PROTO_HEADER_SIZE || proto_parse_header(buf, &type, &len) < 0
        || type != PROTO_HELLO || (size_t)n < PROTO_HEADER_SIZE + (size_t)len)
        return NULL;
    proto_reader rd;
    proto_reader_init(&rd, buf + PROTO_HEADER_SIZE, len);
    proto_get_u32(&rd);
    proto_get_i32(&rd);
    proto_get_u64(&rd);
    const char *dir = proto_get_str(&rd);
    size_t bl = strlen(r->base);
    if (rd.failed || !dir || strncmp(dir, r->base, bl) != 0 || dir[bl] != '/'
        || strncmp(dir + bl + 1, PROTO_SPARE_PREFIX, strlen(PROTO_SPARE_PREFIX)) != 0
        || strchr(dir + bl + 1, '/'))
        return NULL;
    return strdup(dir);
}

/** Lets go of @r: its control socket closed, its supervisor ends and its
 *  keeper removes its directory (this process does, when that keeper was
 *  killed and the supervisor's HELLO named it); with @wait, returns once
 *  that keeper has ended (at most @wait ms). */
static void ready_drop(ready_sup *r, int wait)
{
    char *orphan = r->ctl >= 0 && r->base && ready_keeper_gone(r) ? ready_spare_dir(r) : NULL;
    if (r->ctl >= 0)
        close(r->ctl);
    if (orphan) {
        proto_rm_tree(orphan);
        free(orphan);
    }
    if (r->keeper_fd >= 0 && wait > 0) {
        struct pollfd pf = { .fd = r->keeper_fd, .events = POLLIN };
        while (poll(&pf, 1, wait) < 0 && errno == EINTR)
            ;
    }
    if (r->keeper_fd >= 0)
        close(r->keeper_fd);
    free(r->base);
    *r = (ready_sup){ .ctl = -1, .keeper_fd = -1 };
}

/**
 * The warm spawner (`--control-fd=3 --warm PAD`): the process the library
 * spawned exits at once, as on a cold start, and its child stays, loaded,
 * for as long as the control socket is open. It keeps one warm supervisor
 * ready, forked ahead: at each FORK it answers FORKED with the library's
 * end of that one's control socket when it was made for the same BASE and
 * it and its keeper are still there, else with a fresh one's (ERROR when
 * it could not fork),
 * and then forks the next one to keep ready. So a create that comes right
 * after the destroy that asked for the client's next spare finds one made
 * (the fork and the directory work then run beside that create) instead
 * of waiting for it. Each fork is a warm keeper, which forks the
 * supervisor (run()); the supervisor says HELLO, then waits with no time
 * limit for CLAIM (read_claim()). When that control socket closes first
 * (the library, or the process holding the warm one, or this spawner for
 * its ready one, is gone) both end, and the keeper removes the directory.
 * Claimed, it goes on as a cold start. A fork of this loaded process costs
 * a fraction of a spawn (no exec, no dynamic loading). At EOF on its own
 * control socket the spawner lets its ready one go, waits (at most
 * READY_GONE_MS) until that one's keeper has removed its directory, and
 * exits 0, so that the library, which waits for this EOF in turn
 * (spawner_close()), leaves no directory behind when it frees the client.
 */
static int spawner_main(char **argv)
{
    int ctl = PROTO_CONTROL_FD;
    ready_sup ready = { .ctl = -1, .keeper_fd = -1 };
    start_up();
    pid_t p = fork();
    if (p < 0)
        return 1;
    if (p > 0)
        _exit(0);
    for (;;) {
        struct pollfd pf = { .fd = ctl, .events = POLLIN };
        while (poll(&pf, 1, -1) < 0 && errno == EINTR)
            ;
        unsigned char hdr[PROTO_HEADER_SIZE];
        uint32_t type, len;
        if (read_all(ctl, hdr, sizeof(hdr), CONFIG_WAIT_MS) < 0) {
            ready_drop(&ready, READY_GONE_MS);
            _exit(0);
        }
        unsigned char *payload = NULL;
        const char *base = NULL;
        if (proto_parse_header(hdr, &type, &len) == 0 && type == PROTO_FORK
            && (payload = malloc((size_t)len + 1)) != NULL
            && read_all(ctl, payload, len, CONFIG_WAIT_MS) == 0) {
            proto_reader rd;
            proto_reader_init(&rd, payload, len);
            base = proto_get_str(&rd);
            if (rd.failed || rd.left != 0 || !base || base[0] != '/')
                base = NULL;
        }
        if (!base) {
            send_error_fd(ctl, PROTO_ERR_PROTOCOL, EPROTO, "expected FORK with a directory");
            ready_drop(&ready, READY_GONE_MS);
            _exit(1);
        }
        int fd = -1, keeper_fd = -1;
        if (ready.ctl >= 0) {
            /* Still there (its HELLO may wait to be read: only a hang-up
             * counts), its keeper too (a supervisor whose keeper is gone
             * fails at CLAIM, when it cannot tell it the sandbox's paths),
             * and made for this BASE: it is the answer. */
            struct pollfd rp = { .fd = ready.ctl, .events = POLLRDHUP };
            int gone = poll(&rp, 1, 0) < 0 || (rp.revents & (POLLHUP | POLLRDHUP | POLLERR))
                       || ready_keeper_gone(&ready);
            if (!gone && strcmp(ready.base, base) == 0) {
                fd = ready.ctl;
                ready.ctl = -1;
            }
            ready_drop(&ready, 0);
        }
        if (fd < 0)
            fd = spawner_fork_one(argv, base, &keeper_fd);
        int err = fd < 0 ? errno : 0;
        if (keeper_fd >= 0)
            close(keeper_fd);
        if (err) {
            send_error_fd(ctl, PROTO_ERR_INTERNAL, err, "cannot fork a warm supervisor");
        } else if (send_fd_frame(ctl, PROTO_FORKED, fd) < 0) {
            close(fd);
            _exit(0);
        }
        if (fd >= 0)
            close(fd);
        /* The next one, made now. */
        if (!err && (ready.base = strdup(base)) != NULL) {
            ready.ctl = spawner_fork_one(argv, base, &ready.keeper_fd);
            if (ready.ctl < 0)
                ready_drop(&ready, 0);
        }
        free(payload);
    }
}

int main(int argc, char **argv)
{
    int ctl = PROTO_CONTROL_FD;
    static const char dir_opt[] = "--sandbox-dir=";
    int init_mode = 0;

    if (argc >= 2 && strcmp(argv[1], "--launch") == 0)
        return launch(argc, argv);
    /* --init: the init of a bubblewrap sandbox (pid 1 of its namespace),
     * which must not detach: the namespace ends with it. It knows no path
     * of its socket. */
    static const char rm_opt[] = "--remove=";
    const char *remove = NULL;
    if (argc == 3 && strcmp(argv[2], "--init") == 0)
        init_mode = 1;
    /* --init --spare=ID: a warm bubblewrap sandbox's (ID its name once
     * claimed), which waits for CONFIG for as long as its control socket
     * is open. */
    int spare_init = argc == 4 && strcmp(argv[2], "--init") == 0
                     && strncmp(argv[3], "--spare=", 8) == 0 && argv[3][8];
    if (spare_init) {
        init_mode = 1;
        init_waits = 1;
    }
    /* --warm PAD: started ahead; the directory comes with CLAIM. */
    int warm = argc == 4 && strcmp(argv[1], "--control-fd=3") == 0
               && strcmp(argv[2], "--warm") == 0 && strlen(argv[3]) == PROTO_WARM_PAD
               && fcntl(ctl, F_GETFD) >= 0;
    if (warm)
        return spawner_main(argv);
    if (argc == 4 && strncmp(argv[3], rm_opt, sizeof(rm_opt) - 1) == 0
        && argv[3][sizeof(rm_opt) - 1] == '/')
        remove = argv[3] + sizeof(rm_opt) - 1;
    if (argc != 3 + (remove != NULL) + spare_init || strcmp(argv[1], "--control-fd=3") != 0
        || (!init_mode && (strncmp(argv[2], dir_opt, sizeof(dir_opt) - 1) != 0
                           || argv[2][sizeof(dir_opt) - 1] != '/'))
        || fcntl(ctl, F_GETFD) < 0) {
        fprintf(stderr, "sbx-supervisor: internal program of libsbx-local; "
                "it is started by the library, not by hand\n");
        return 2;
    }
    if (!init_mode)
        S.dir = argv[2] + sizeof(dir_opt) - 1;
    start_up();

    /* Detach: the process the library spawned exits at once (it reaps it
     * by pid); the supervisor lives on, reparented away from the app, the
     * child of its keeper (keeper()). */
    if (!init_mode) {
        pid_t p = fork();
        if (p < 0)
            return 1;
        if (p > 0)
            _exit(0);
    }
    return run(init_mode, remove, NULL, NULL);
}

/**
 * The sandbox from the keeper's fork on: its lifetime's whole service.
 * @init_mode: pid 1 of a bubblewrap sandbox (no keeper, no directory);
 * @remove: the keeper's extra path (may be NULL); @warm_argv: a warm
 * supervisor's command line (NULL for a cold start), which makes its
 * directory in @spare_base (and what is in it: spare_prepare()) before
 * HELLO; the sandbox's name for it and the path come with CLAIM. Returns
 * the exit status of a failed start; serves until the sandbox ends
 * otherwise.
 */
static int run(int init_mode, const char *remove, char **warm_argv, const char *spare_base)
{
    int ctl = PROTO_CONTROL_FD;
    char msg[PATH_MAX + 128];
    int pipe_wr = -1;
    char *spare = NULL;
    const char *made_dir = NULL;    /* a cold start's DIR, made here */
    int made_remove = 0;            /* and its --remove PATH, made here */

    if (warm_argv) {
        /* Made before the keeper forks it, so the keeper knows it. */
        if (asprintf(&spare, "%s/" PROTO_SPARE_PREFIX "XXXXXX", spare_base) < 0)
            return 1;
        if (!mkdtemp(spare))
            return 1;
        int pp[2];
        pid_t p = pipe2(pp, O_CLOEXEC) < 0 ? -1 : fork();
        if (p < 0) {
            proto_rm_tree(spare);
            return 1;
        }
        if (p > 0) {
            close(pp[1]);
            warm_keeper(p, pp[0], warm_argv, spare);
        }
        close(pp[0]);
        pipe_wr = pp[1];
    } else if (!init_mode) {
        /* A DIR ending in XXXXXX is made here (mkdtemp, mode 0700, its
         * name written over the command line's), before the keeper forks
         * it: from its first moment something removes it, whenever the
         * library stops; its name goes in HELLO. The log the library
         * quotes is its stderr from then on. */
        size_t dl = strlen(S.dir);
        if (dl > 6 && strcmp(S.dir + dl - 6, "XXXXXX") == 0) {
            if (!mkdtemp(S.dir)) {
                snprintf(msg, sizeof(msg), "cannot create a directory in %.*s: %s",
                         (int)(strrchr(S.dir, '/') - S.dir), S.dir, strerror(errno));
                send_error_fd(ctl, PROTO_ERR_INTERNAL, errno, msg);
                return 1;
            }
            made_dir = S.dir;
            char *log = NULL;
            int lfd = asprintf(&log, "%s/log", S.dir) < 0 ? -1
                      : open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
            free(log);
            if (lfd >= 0) {
                dup2(lfd, 2);
                close(lfd);
            }
        }
        /* So is --remove's PATH, a tmp/ in a caller's workdir, when it
         * is missing: made here, it is this sandbox's (the keeper and
         * DESTROY remove it); one that exists is left alone. HELLO says
         * which. */
        if (made_dir && remove && make_remove_dir(&remove, &made_remove, msg, sizeof(msg)) < 0) {
            send_error_fd(ctl, PROTO_ERR_INTERNAL, errno, msg);
            proto_rm_tree(made_dir);
            return 1;
        }
        S.remove = remove;
        if (asprintf(&S.sock_path, "%s/sock", S.dir) < 0)
            return unmake(made_dir, remove, made_remove);
        pid_t p = fork();
        if (p < 0)
            return unmake(made_dir, remove, made_remove);
        if (p > 0)
            keeper(p, S.dir, remove, NULL, NULL, 0);
    }
    setsid();
    if (chdir("/") < 0)
        return 1;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return 1;
    /* Not dumpable (its reapers inherit it; the commands, exec'd, do not):
     * a process of the sandbox running as the same user may neither trace
     * it nor take its descriptors (pidfd_getfd, /proc/PID/fd). */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return 1;

    proto_proc self;
    if (proto_proc_stat(getpid(), &self) < 0)
        return 1;
    if (spare && spare_prepare(spare) < 0)
        return 1;
    proto_buf b;
    proto_buf_init(&b, PROTO_HELLO);
    proto_put_u32(&b, PROTO_VERSION);
    proto_put_i32(&b, getpid());
    proto_put_u64(&b, self.start);
    proto_put_str(&b, spare ? spare : made_dir ? made_dir : "");
    proto_put_u32(&b, (uint32_t)made_remove);
    if (send_buf(ctl, &b, CONFIG_WAIT_MS) < 0)
        return 1;
    if (warm_argv) {
        char *dir = NULL, *rm = NULL;
        if (read_claim(warm_argv, &dir, &rm) < 0)
            return 1;
        /* PATH (the tmp/ of a caller's workdir) is made here when missing,
         * as a cold start makes it; one that exists is left alone (the
         * keeper never hears of it). READY says which. */
        if (rm) {
            const char *path = rm;
            if (make_remove_dir(&path, &made_remove, msg, sizeof(msg)) < 0) {
                send_error_fd(ctl, PROTO_ERR_INTERNAL, errno, msg);
                return 1;
            }
            if (!path) {
                free(rm);
                rm = NULL;
            }
        }
        /* The keeper learns the sandbox's paths before they exist. */
        size_t dl = strlen(dir) + 1, rl = rm ? strlen(rm) + 1 : 1;
        if (write_all(pipe_wr, dir, dl, CONFIG_WAIT_MS) < 0
            || write_all(pipe_wr, rm ? rm : "", rl, CONFIG_WAIT_MS) < 0)
            return 1;
        close(pipe_wr);
        S.remove = rm;
        /* Never over an existing directory. */
        char *path = NULL;
        if (renameat2(AT_FDCWD, spare, AT_FDCWD, dir, RENAME_NOREPLACE) < 0) {
            /* DIR is not this sandbox's: the keeper leaves it. */
            snprintf(msg, sizeof(msg), "cannot rename %s to %s: %s", spare, dir,
                     strerror(errno));
            send_error_fd(ctl, PROTO_ERR_INTERNAL, errno, msg);
            return PROTO_EXIT_SPARE_ONLY;
        }
        struct stat st;
        if (asprintf(&path, "%s/sock", dir) < 0
            || (S.sock_file_fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC)) < 0
            || fstat(S.sock_file_fd, &st) < 0 || st.st_dev != S.sock_dev
            || st.st_ino != S.sock_ino) {
            snprintf(msg, sizeof(msg), "the socket of %s is not the one bound", dir);
            send_error_fd(ctl, PROTO_ERR_INTERNAL, EPROTO, msg);
            return 1;
        }
        free(S.sock_path);
        S.sock_path = path;
        S.dir = dir;
        free(spare);
        spare = NULL;
    }

    uint32_t type, len;
    int cfg_fds[PROTO_CONFIG_FDS_MAX], n_cfg_fds = 0;
    if (init_waits) {
        /* A warm sandbox: CONFIG comes when a create claims it, or EOF. */
        struct pollfd pf = { .fd = ctl, .events = POLLIN };
        while (poll(&pf, 1, -1) < 0 && errno == EINTR)
            ;
    }
    unsigned char *cfg = read_control_frame(ctl, &type, &len, cfg_fds, PROTO_CONFIG_FDS_MAX,
                                            &n_cfg_fds);
    if (!cfg)
        return 1;
    int err = 0;
    if (type != PROTO_CONFIG) {
        send_error_fd(ctl, PROTO_ERR_PROTOCOL, EPROTO, "expected CONFIG");
        return 1;
    }
    if (apply_config(cfg, len, cfg_fds, n_cfg_fds, &err, msg, sizeof(msg)) < 0) {
        send_error_fd(ctl, PROTO_ERR_INTERNAL, err, msg);
        return 1;
    }
    free(cfg);

    proto_buf_init(&b, PROTO_READY);
    proto_put_u32(&b, (uint32_t)made_remove);
    if (send_buf(ctl, &b, CONFIG_WAIT_MS) < 0)
        shutdown_sandbox(NULL);
    /* The lifetime counts from here: the sandbox is usable. The end comes
     * LIFETIME_GRACE_MS later, so that an exec whose timeout is the
     * lifetime (the library's default) times out first. */
    if (S.lifetime_ms)
        S.deadline = now_ms() + (long long)S.lifetime_ms + LIFETIME_GRACE_MS;
    close(ctl);

    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        shutdown_sandbox(NULL);
    for (int fd = 0; fd <= 2; fd++)
        dup2(null, fd);
    if (null > 2)
        close(null);
    /* The first exec finds its reaper ready (a failure here is retried
     * then). */
    reaper_new();

    serve();
}
