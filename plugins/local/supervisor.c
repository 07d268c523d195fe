/*
 * sbx-supervisor — the process behind one local sandbox.
 *
 * libsbx-local.so starts it with posix_spawn, its control socket on
 * descriptor 3 and the sandbox's directory on the command line. It forks
 * once and the first process exits, so the supervisor is nobody's child in
 * the application; in its own session it becomes the child subreaper of
 * everything the sandbox starts. It sends HELLO, reads CONFIG (root, base
 * environment), listens on DIR/sock and answers READY. From then on it
 * serves EXEC, KILL, PING and DESTROY requests (proto.h) in a
 * single-threaded poll loop, with SIGCHLD read from a signalfd.
 *
 * Each exec gets a small reaper of its own, forked from the supervisor: a
 * child subreaper that starts the command in a new session (the exec's pid
 * is its session id), reports its pid and exit code on a pipe, and reaps
 * whatever the command leaves until nothing of it is left. Every process
 * the command starts, setsid'd or double-forked, stays below that reaper,
 * so KILL reaches the whole tree through the parent links in /proc.
 * DESTROY kills every descendant of the supervisor, answers and exits.
 */
#include "proto.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

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
/** Rounds (10 ms apart) the final teardown may take. */
#define TEARDOWN_ROUNDS 500

/** Fallback PATH when the command's environment has none. */
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

/** One client connection; at most one exec per connection. */
typedef struct conn {
    int fd;
    unsigned char *buf;          /* header, then payload */
    size_t len;                  /* bytes in buf */
    size_t cap;
    uint32_t type;               /* parsed header, once len >= header */
    uint32_t plen;
    int fds[PROTO_EXEC_FDS];     /* descriptors received with EXEC */
    int nfds;
    pid_t pid;                   /* exec's main process and session id */
    pid_t reaper;                /* the exec's reaper while it lives */
    int report_fd;               /* pipe from the reaper, or -1 */
    int running;                 /* main process not reaped yet */
    int killed;                  /* a KILL was asked for this exec */
    int exit_pending;            /* EXIT held until the reaper is gone */
    int exit_code;               /* the held code */
    int dead;                    /* to be closed */
} conn;

/** What an exec's reaper reports on its pipe (atomic pipe writes). */
typedef struct reaper_msg {
    int32_t tag;                 /* REAPER_* */
    int32_t value;
} reaper_msg;

enum { REAPER_PID = 1, REAPER_EXIT = 2, REAPER_ERROR = 3 };

static struct {
    char *dir;
    char *sock_path;
    char *root;
    char **env;                  /* base environment, "K=V" */
    size_t nenv;
    int listen_fd;
    int sig_fd;
    dev_t sock_dev;
    ino_t sock_ino;
    conn **conns;
    size_t nconns;
} S = { .listen_fd = -1, .sig_fd = -1 };

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
        for (size_t i = 0; i < S.nconns; i++) {
            conn *c = S.conns[i];
            if (c->reaper == p) {
                c->reaper = 0;
                if (c->exit_pending) {
                    c->exit_pending = 0;
                    send_exit(c, c->exit_code);
                }
            }
            if (c->pid == p)
                exec_ended(c, exit_code_of(status));
        }
    }
}

/** Calls @fn for each process in /proc. */
static void for_each_proc(void (*fn)(pid_t pid, const proto_proc *st, void *data),
                          void *data)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end != '\0' || v <= 0 || v > INT_MAX)
            continue;
        proto_proc st;
        if (proto_proc_stat((pid_t)v, &st) == 0)
            fn((pid_t)v, &st, data);
    }
    closedir(d);
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
    if (st->sid != k->sid || pid == getpid() || pid == 1)
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
        struct session_kill k = { .sid = c->pid, .sig = sig };
        for_each_proc(session_kill_one, &k);
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
        sleep_ms(5);
    }
}

/** Kills everything the sandbox started and reaps it (bounded). */
static void kill_everything(void)
{
    for (int round = 0; round < TEARDOWN_ROUNDS; round++) {
        size_t zombies = 0;
        size_t found = proto_kill_descendants(getpid(), SIGKILL, &zombies) + zombies;
        reap_children();
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        int r = waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT);
        if (found == 0 && r < 0 && errno == ECHILD)
            return;
        sleep_ms(10);
    }
}

/**
 * Ends the sandbox: stops taking connections, kills every descendant,
 * answers @requester (may be NULL) and exits.
 */
static void __attribute__((noreturn)) shutdown_sandbox(conn *requester)
{
    if (S.listen_fd >= 0) {
        close(S.listen_fd);
        S.listen_fd = -1;
    }
    struct stat st;
    if (S.sock_path && stat(S.sock_path, &st) == 0
        && st.st_dev == S.sock_dev && st.st_ino == S.sock_ino)
        unlink(S.sock_path);
    kill_everything();
    if (requester) {
        proto_buf b;
        proto_buf_init(&b, PROTO_DESTROYED);
        conn_send(requester, &b);
    }
    _exit(0);
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

/** posix_spawn in a new session with the exec's descriptors and cwd;
 *  returns 0 or an errno. */
static int spawn_in_session(const char *prog, char *const argv[], char *const envp[],
                            const int fds[PROTO_EXEC_FDS], int cwd_fd, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    int r;

    sigemptyset(&none);
    sigfillset(&all);
    if ((r = posix_spawn_file_actions_init(&fa)) != 0)
        return r;
    if ((r = posix_spawnattr_init(&attr)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return r;
    }
    for (int i = 0; i < PROTO_EXEC_FDS && r == 0; i++)
        r = posix_spawn_file_actions_adddup2(&fa, fds[i], i);
    if (r == 0)
        r = posix_spawn_file_actions_addfchdir_np(&fa, cwd_fd);
    if (r == 0)
        r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK
                                     | POSIX_SPAWN_SETSIGDEF);
    if (r == 0)
        r = posix_spawnattr_setsigmask(&attr, &none);
    if (r == 0)
        r = posix_spawnattr_setsigdefault(&attr, &all);
    if (r == 0)
        r = posix_spawn(pid, prog, &fa, &attr, argv, envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return r;
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
    while (write(fd, &m, sizeof(m)) < 0 && errno == EINTR)
        ;
}

/**
 * The exec's reaper (a forked copy of the supervisor): starts the command
 * and reaps everything below it until nothing is left. Reports on @rep:
 * REAPER_PID, later REAPER_EXIT; or REAPER_ERROR when nothing could start.
 */
static void __attribute__((noreturn)) run_reaper(char **argv, uint32_t argc, char **envp,
                                                 const int fds[PROTO_EXEC_FDS], int cwd_fd,
                                                 int rep)
{
    char msg[PATH_MAX + 128];
    char *found = NULL;
    pid_t pid = 0;
    int err = 0;

    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    const char *name = argv[0];
    int has_slash = strchr(name, '/') != NULL;
    const char *prog = name;
    if (!has_slash) {
        const char *path = env_get(envp, "PATH");
        err = path_lookup(name, path ? path : DEFAULT_PATH, cwd_fd, &found);
        prog = found;
    }
    if (err == 0) {
        err = spawn_in_session(prog, argv, envp, fds, cwd_fd, &pid);
        if (err == ENOEXEC) {
            /* No #! line: run it with the shell, as execvp does. */
            char **sh = calloc((size_t)argc + 2, sizeof(*sh));
            if (!sh) {
                err = ENOMEM;
            } else {
                sh[0] = "/bin/sh";
                sh[1] = (char *)prog;
                for (uint32_t i = 1; i < argc; i++)
                    sh[i + 1] = argv[i];
                err = spawn_in_session("/bin/sh", sh, envp, fds, cwd_fd, &pid);
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
        err = spawn_failure(msg, code, fds[2], &pid);
    }
    if (err != 0) {
        report(rep, REAPER_ERROR, err);
        _exit(1);
    }
    /* Hold nothing of the command's: its output ends when it does. */
    for (int i = 0; i < PROTO_EXEC_FDS; i++)
        close(fds[i]);
    close(cwd_fd);
    report(rep, REAPER_PID, pid);
    for (;;) {
        int status;
        pid_t p = waitpid(-1, &status, 0);
        if (p < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p == pid)
            report(rep, REAPER_EXIT, exit_code_of(status));
    }
    _exit(0);
}

/** Handles EXEC: validates the cwd, starts the command, answers STARTED. */
static void do_exec(conn *c, const unsigned char *payload, size_t len)
{
    proto_reader r;
    char **argv = NULL, **overlay = NULL, **envp = NULL;
    int cwd_fd = -1, rep[2] = { -1, -1 };
    char msg[PATH_MAX + 128];

    if (c->pid != 0 || c->nfds != PROTO_EXEC_FDS) {
        conn_error(c, PROTO_ERR_PROTOCOL, EPROTO, "EXEC needs three descriptors, once");
        goto out;
    }
    proto_reader_init(&r, payload, len);
    uint32_t argc = proto_get_u32(&r);
    if (r.failed || argc == 0 || argc > len / 5)
        goto bad;
    argv = calloc((size_t)argc + 1, sizeof(*argv));
    if (!argv)
        goto nomem;
    for (uint32_t i = 0; i < argc; i++)
        argv[i] = (char *)proto_get_str(&r);
    uint32_t envc = proto_get_u32(&r);
    if (r.failed || envc > len / 5)
        goto bad;
    overlay = calloc((size_t)envc + 1, sizeof(*overlay));
    if (!overlay)
        goto nomem;
    for (uint32_t i = 0; i < envc; i++)
        overlay[i] = (char *)proto_get_str(&r);
    const char *cwd = proto_get_str(&r);
    if (r.failed || r.left != 0)
        goto bad;

    /* The working directory must exist before anything runs. */
    cwd_fd = open(cwd, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cwd_fd < 0) {
        int e = errno;
        snprintf(msg, sizeof(msg), "working directory %s: %s", cwd, strerror(e));
        conn_error(c, PROTO_ERR_CWD, e, msg);
        goto out;
    }
    envp = env_merge(overlay, envc);
    if (!envp)
        goto nomem;
    if (pipe2(rep, O_CLOEXEC) < 0)
        goto sys;
    pid_t reaper = fork();
    if (reaper < 0)
        goto sys;
    if (reaper == 0) {
        int keep[] = { c->fds[0], c->fds[1], c->fds[2], cwd_fd, rep[1] };
        close_all_except(keep, (int)(sizeof(keep) / sizeof(keep[0])));
        run_reaper(argv, argc, envp, c->fds, cwd_fd, rep[1]);
    }
    close(rep[1]);
    rep[1] = -1;
    c->reaper = reaper;

    reaper_msg m = { 0, 0 };
    if (read_all(rep[0], &m, sizeof(m), START_WAIT_MS) < 0 || m.tag != REAPER_PID
        || m.value <= 1) {
        int e = m.tag == REAPER_ERROR ? m.value : EIO;
        kill(reaper, SIGKILL);
        snprintf(msg, sizeof(msg), "cannot start a process: %s", strerror(e));
        conn_error(c, PROTO_ERR_INTERNAL, e, msg);
        goto out;
    }
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    c->report_fd = rep[0];
    rep[0] = -1;
    c->pid = m.value;
    c->running = 1;
    proto_buf b;
    proto_buf_init(&b, PROTO_STARTED);
    proto_put_i32(&b, c->pid);
    conn_send(c, &b);
    goto out;

sys:
    snprintf(msg, sizeof(msg), "cannot start a process: %s", strerror(errno));
    conn_error(c, PROTO_ERR_INTERNAL, errno, msg);
    goto out;
bad:
    conn_error(c, PROTO_ERR_PROTOCOL, EPROTO, "malformed EXEC request");
    goto out;
nomem:
    conn_error(c, PROTO_ERR_INTERNAL, ENOMEM, "out of memory");
out:
    conn_close_fds(c);
    if (cwd_fd >= 0)
        close(cwd_fd);
    for (int i = 0; i < 2; i++)
        if (rep[i] >= 0)
            close(rep[i]);
    free(envp);
    free(overlay);
    free(argv);
}

/** Takes in what an exec's reaper reported. */
static void read_report(conn *c)
{
    reaper_msg m;
    for (;;) {
        ssize_t n = read(c->report_fd, &m, sizeof(m));
        if (n == (ssize_t)sizeof(m)) {
            if (m.tag == REAPER_EXIT)
                exec_ended(c, m.value);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        /* The reaper is gone; a main process it left is ours to reap. */
        close(c->report_fd);
        c->report_fd = -1;
        return;
    }
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

    if (c->type != PROTO_EXEC)
        conn_close_fds(c);
    switch (c->type) {
    case PROTO_EXEC:
        do_exec(c, payload, c->plen);
        break;
    case PROTO_KILL: {
        proto_reader_init(&r, payload, c->plen);
        int sig = proto_get_i32(&r);
        if (r.failed || sig < 0 || sig >= NSIG) {
            conn_error(c, PROTO_ERR_PROTOCOL, EINVAL, "bad signal");
            break;
        }
        if (c->pid > 0 && sig > 0) {
            c->killed = 1;
            kill_exec(c, sig, sig == SIGKILL);
        }
        proto_buf_init(&b, PROTO_KILLED);
        conn_send(c, &b);
        break;
    }
    case PROTO_PING:
        proto_buf_init(&b, PROTO_PONG);
        proto_put_u32(&b, PROTO_VERSION);
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
                    if (c->nfds < PROTO_EXEC_FDS)
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
    if (c->report_fd >= 0)
        close(c->report_fd);
    close(c->fd);
    free(c->buf);
    free(c);
}

/** Closes dead connections; a command whose caller is gone is killed. */
static void sweep_conns(void)
{
    for (size_t i = 0; i < S.nconns; i++) {
        conn *c = S.conns[i];
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
        c->report_fd = -1;
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

/** The sandbox is over when its socket was removed or replaced. */
static void watch_socket(void)
{
    struct stat st;
    if (stat(S.sock_path, &st) < 0 || st.st_dev != S.sock_dev || st.st_ino != S.sock_ino)
        shutdown_sandbox(NULL);
}

static void __attribute__((noreturn)) serve(void)
{
    long long last_watch = now_ms();
    long long accept_pause_until = 0;
    struct pollfd *pfd = NULL;
    size_t pcap = 0;

    for (;;) {
        /* signalfd, listener, then per connection: socket, reaper pipe */
        size_t n = 2 + 2 * S.nconns;
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
        for (size_t i = 0; i < S.nconns; i++) {
            pfd[2 + 2 * i] = (struct pollfd){ .fd = S.conns[i]->fd, .events = POLLIN };
            pfd[3 + 2 * i] = (struct pollfd){ .fd = S.conns[i]->report_fd, .events = POLLIN };
        }
        long long timeout = last_watch + WATCH_INTERVAL_MS - now;
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
        size_t polled = (n - 2) / 2;
        for (size_t i = 0; i < polled && i < S.nconns; i++) {
            conn *c = S.conns[i];
            if (pfd[3 + 2 * i].revents && c->report_fd >= 0 && pfd[3 + 2 * i].fd == c->report_fd)
                read_report(c);
            if (pfd[2 + 2 * i].revents && pfd[2 + 2 * i].fd == c->fd)
                conn_read(c);
        }
        sweep_conns();
        if (pfd[1].revents && accept_conns() < 0)
            accept_pause_until = now_ms() + 100;
    }
}

/* ------------------------------------------------------------------------ */
/* Start-up                                                                  */
/* ------------------------------------------------------------------------ */

/** Reads one frame from the control socket; returns the payload (malloc'd)
 *  or NULL. */
static unsigned char *read_control_frame(int fd, uint32_t *type, uint32_t *len)
{
    unsigned char hdr[PROTO_HEADER_SIZE];
    if (read_all(fd, hdr, sizeof(hdr), CONFIG_WAIT_MS) < 0
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

/** Takes the CONFIG payload; returns 0, or -1 with *@err and @msg set. */
static int apply_config(const unsigned char *payload, uint32_t len, int *err,
                        char *msg, size_t msgsz)
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
    if (!S.sock_path || !S.root || !S.env) {
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

    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(S.sock_path) >= sizeof(sa.sun_path)) {
        *err = ENAMETOOLONG;
        snprintf(msg, msgsz, "socket path %s is too long", S.sock_path);
        return -1;
    }
    strcpy(sa.sun_path, S.sock_path);
    S.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    /* Only the owner may connect (the directory is 0700 as well); the
     * commands keep the umask the application had. */
    mode_t old_mask = umask(077);
    struct stat st;
    int ok = S.listen_fd >= 0
        && bind(S.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0
        && listen(S.listen_fd, SOMAXCONN) == 0
        && stat(S.sock_path, &st) == 0;
    *err = errno;
    umask(old_mask);
    if (!ok) {
        snprintf(msg, msgsz, "cannot listen on %s: %s", S.sock_path, strerror(*err));
        return -1;
    }
    S.sock_dev = st.st_dev;
    S.sock_ino = st.st_ino;

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

int main(int argc, char **argv)
{
    int ctl = PROTO_CONTROL_FD;
    char msg[PATH_MAX + 128];
    static const char dir_opt[] = "--sandbox-dir=";

    if (argc != 3 || strcmp(argv[1], "--control-fd=3") != 0
        || strncmp(argv[2], dir_opt, sizeof(dir_opt) - 1) != 0
        || argv[2][sizeof(dir_opt) - 1] != '/' || fcntl(ctl, F_GETFD) < 0) {
        fprintf(stderr, "sbx-supervisor: internal program of libsbx-local; "
                "it is started by the library, not by hand\n");
        return 2;
    }
    S.dir = argv[2] + sizeof(dir_opt) - 1;
    if (asprintf(&S.sock_path, "%s/sock", S.dir) < 0)
        return 1;
    /* Keep nothing the application leaked past exec. */
    close_range(ctl + 1, ~0U, 0);
    fcntl(ctl, F_SETFD, FD_CLOEXEC);

    struct sigaction sa = { .sa_handler = SIG_IGN };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);

    /* Detach: the process the library spawned exits at once (it reaps it
     * by pid); the supervisor lives on, reparented away from the app. */
    pid_t p = fork();
    if (p < 0)
        return 1;
    if (p > 0)
        _exit(0);
    setsid();
    if (chdir("/") < 0)
        return 1;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return 1;

    proto_proc self;
    if (proto_proc_stat(getpid(), &self) < 0)
        return 1;
    proto_buf b;
    proto_buf_init(&b, PROTO_HELLO);
    proto_put_u32(&b, PROTO_VERSION);
    proto_put_i32(&b, getpid());
    proto_put_u64(&b, self.start);
    if (send_buf(ctl, &b, CONFIG_WAIT_MS) < 0)
        return 1;

    uint32_t type, len;
    unsigned char *cfg = read_control_frame(ctl, &type, &len);
    if (!cfg)
        return 1;
    int err = 0;
    if (type != PROTO_CONFIG) {
        send_error_fd(ctl, PROTO_ERR_PROTOCOL, EPROTO, "expected CONFIG");
        return 1;
    }
    if (apply_config(cfg, len, &err, msg, sizeof(msg)) < 0) {
        send_error_fd(ctl, PROTO_ERR_INTERNAL, err, msg);
        return 1;
    }
    free(cfg);

    proto_buf_init(&b, PROTO_READY);
    if (send_buf(ctl, &b, CONFIG_WAIT_MS) < 0)
        shutdown_sandbox(NULL);
    close(ctl);

    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        shutdown_sandbox(NULL);
    for (int fd = 0; fd <= 2; fd++)
        dup2(null, fd);
    if (null > 2)
        close(null);

    serve();
}
