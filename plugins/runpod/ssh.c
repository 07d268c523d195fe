/*
 * ssh.c — commands over the system's OpenSSH client (ssh.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ssh.h"
#include "provider.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* The remote command line of every command: reads the script's length and
 * the script from stdin into a private temporary directory and runs it with
 * the rest of stdin, the directory as $1 (removed when the script ends).
 * Holds no value of the caller's. */
#define RP_BOOT "IFS= read -r n && d=$(mktemp -d) && head -c \"$n\" >\"$d/s\" && exec /bin/sh \"$d/s\" \"$d\""
/* Where a script that exits 255 leaves its marker (CASE-31). */
#define RP_MARK_DIR "/tmp"
#define RP_BUF_MAX (1024 * 1024)
#define RP_MASTER_LOOK_MS 1000  /* a running command looks at its master this often */

struct rp_ssh {
    char *host, *user, *key, *strict, *known_hosts;
    int port;
    double connect_timeout_s;
    int keepalive_s;
    char dir[RP_SSH_PATH_MAX + 1];      /* the private directory */
    char sock[RP_SSH_PATH_MAX + 1];     /* "" when commands run without a master */
    char kh[4096];                      /* the known_hosts file used */
    pthread_mutex_t lock;               /* guards master, closed */
    pid_t master;
    pid_t janitor;                      /* the directory's janitor (rp_janitor_start) */
    int janitor_fd;                     /* the write end of its stdin; -1 none */
    int closed;                         /* rp_ssh_close() was called */
};

static char *rp_expand_home(const char *path)
{
    if (path[0] == '~' && path[1] == '/') {
        const char *home = getenv("HOME");
        return cl_printf("%s%s", home ? home : "", path + 1);
    }
    return strdup(path);
}

/* The reason of the last transport error made on this thread. */
static __thread char rp_reason[32];

const char *rp_ssh_last_reason(void)
{
    return rp_reason;
}

static int rp_make_dir(rp_ssh *s)
{
    const char *bases[2] = { getenv("TMPDIR"), "/tmp" };
    for (int i = 0; i < 2; i++) {
        const char *b = bases[i];
        /* "BASE/sbx-ssh-XXXXXX/c" must fit, with the master's own name. */
        if (!b || !*b || strlen(b) + strlen("/sbx-ssh-XXXXXX/c") > RP_SSH_PATH_MAX)
            continue;
        snprintf(s->dir, sizeof s->dir, "%s/sbx-ssh-XXXXXX", b);
        if (mkdtemp(s->dir)) {
            memcpy(s->sock, s->dir, strlen(s->dir));
            memcpy(s->sock + strlen(s->dir), "/c", 3);
            return 0;
        }
    }
    /* Even /tmp does not fit (or cannot be used): a directory anywhere,
     * and commands without multiplexing (CASE-29). */
    const char *b = getenv("TMPDIR");
    char big[4096];
    snprintf(big, sizeof big, "%s/sbx-ssh-XXXXXX", b && *b ? b : "/tmp");
    if (strlen(big) > RP_SSH_PATH_MAX || !mkdtemp(big))
        return -1;
    snprintf(s->dir, sizeof s->dir, "%s", big);
    s->sock[0] = '\0';
    return 0;
}

static void rp_janitor_start(rp_ssh *s);

rp_ssh *rp_ssh_new(const rp_ssh_conf *conf, const char *op, sbx_error **error)
{
    rp_ssh *s = calloc(1, sizeof(*s));
    if (!s) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->janitor_fd = -1;
    s->host = strdup(conf->host ? conf->host : "");
    s->user = strdup(conf->user && *conf->user ? conf->user : "root");
    s->key = conf->key_path ? rp_expand_home(conf->key_path) : NULL;
    s->strict = strdup(conf->strict && *conf->strict ? conf->strict : "accept-new");
    s->port = conf->port;
    s->connect_timeout_s = conf->connect_timeout_s > 0 ? conf->connect_timeout_s : 10;
    s->keepalive_s = conf->keepalive_s > 0 ? conf->keepalive_s : 5;
    if (!s->host || !s->user || !s->strict || (conf->key_path && !s->key)) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        rp_ssh_free(s);
        return NULL;
    }
    if (s->key && access(s->key, R_OK) != 0) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, op,
                               "ssh_private_key_path %s: %s", s->key, strerror(errno));
        cl_context(e, "option", "ssh_private_key_path");
        cl_context(e, "path", s->key);
        rp_ssh_free(s);
        return NULL;
    }
    if (rp_make_dir(s) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op,
                "cannot make a private directory for ssh: %s", strerror(errno));
        rp_ssh_free(s);
        return NULL;
    }
    rp_janitor_start(s);
    if (conf->known_hosts && *conf->known_hosts) {
        char *kh = rp_expand_home(conf->known_hosts);
        snprintf(s->kh, sizeof s->kh, "%s", kh ? kh : conf->known_hosts);
        free(kh);
    } else {
        snprintf(s->kh, sizeof s->kh, "%s/known_hosts", s->dir);
        if (conf->known_line && *conf->known_line) {
            FILE *f = fopen(s->kh, "we");
            if (f) {
                fprintf(f, "%s\n", conf->known_line);
                fclose(f);
            }
        }
    }
    return s;
}

static int rp_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Ends and reaps the janitor of the master, which then does nothing
 * (s->lock held). */
static void rp_janitor_end(rp_ssh *s)
{
    if (s->janitor > 0) {
        kill(s->janitor, SIGKILL);
        while (waitpid(s->janitor, NULL, 0) < 0 && errno == EINTR)
            ;
        s->janitor = 0;
    }
    if (s->janitor_fd >= 0) {
        close(s->janitor_fd);
        s->janitor_fd = -1;
    }
}

static void rp_master_reaped(rp_ssh *s);

/* Kills and reaps the master (s->lock held). */
static void rp_master_kill(rp_ssh *s)
{
    if (s->master <= 0)
        return;
    pid_t pid = s->master;
    rp_master_reaped(s);
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

void rp_ssh_close(rp_ssh *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    rp_janitor_end(s);
    rp_master_kill(s);
    s->closed = 1;
    if (s->dir[0])
        nftw(s->dir, rp_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    pthread_mutex_unlock(&s->lock);
}

void rp_ssh_free(rp_ssh *s)
{
    if (!s)
        return;
    rp_ssh_close(s);
    pthread_mutex_destroy(&s->lock);
    free(s->host);
    free(s->user);
    free(s->key);
    free(s->strict);
    free(s->known_hosts);
    free(s);
}

pid_t rp_ssh_master_pid(rp_ssh *s)
{
    pthread_mutex_lock(&s->lock);
    pid_t p = s->master;
    pthread_mutex_unlock(&s->lock);
    return p;
}

const char *rp_ssh_socket_path(rp_ssh *s)
{
    return s->sock;
}

char *rp_ssh_known_line(rp_ssh *s)
{
    FILE *f = fopen(s->kh, "re");
    if (!f)
        return NULL;
    char line[8192];
    char *out = NULL;
    while (!out && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n && line[0] != '#')
            out = strdup(line);
    }
    fclose(f);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Starting ssh                                                              */
/* ------------------------------------------------------------------------ */

typedef struct rp_argv {
    char *v[64];
    int n;
    char *own[32];      /* strings to free */
    int nown;
} rp_argv;

static void rp_arg(rp_argv *a, const char *s)
{
    if (a->n < 63)
        a->v[a->n++] = (char *)s;
}

static void rp_argf(rp_argv *a, char *s)
{
    if (s && a->nown < 32) {
        a->own[a->nown++] = s;
        rp_arg(a, s);
    } else {
        free(s);
    }
}

static void rp_argv_clear(rp_argv *a)
{
    for (int i = 0; i < a->nown; i++)
        free(a->own[i]);
    a->nown = a->n = 0;
}

/* The options every ssh process of @s gets; @master: 1 for the master, 0
 * for a command over it. */
static void rp_argv_common(rp_ssh *s, rp_argv *a, int master, const char *log)
{
    rp_arg(a, "ssh");
    rp_arg(a, "-F");
    rp_arg(a, "/dev/null");
    rp_arg(a, "-T");
    rp_arg(a, "-E");
    rp_arg(a, log);
    static const char *const fixed[] = {
        "BatchMode=yes", "IdentitiesOnly=yes", "IdentityAgent=none",
        "PasswordAuthentication=no", "KbdInteractiveAuthentication=no", "ForwardAgent=no",
        "ForwardX11=no", "ClearAllForwardings=yes", "GlobalKnownHostsFile=/dev/null",
        "ServerAliveCountMax=3", "LogLevel=ERROR", "UpdateHostKeys=no", NULL
    };
    for (int i = 0; fixed[i]; i++) {
        rp_arg(a, "-o");
        rp_arg(a, fixed[i]);
    }
    rp_arg(a, "-o");
    rp_argf(a, cl_printf("StrictHostKeyChecking=%s", s->strict));
    rp_arg(a, "-o");
    rp_argf(a, cl_printf("UserKnownHostsFile=%s", s->kh));
    rp_arg(a, "-o");
    rp_argf(a, cl_printf("ConnectTimeout=%d", (int)(s->connect_timeout_s + 0.999)));
    rp_arg(a, "-o");
    rp_argf(a, cl_printf("ServerAliveInterval=%d", s->keepalive_s));
    if (s->key) {
        rp_arg(a, "-i");
        rp_arg(a, s->key);
    }
    rp_arg(a, "-o");
    if (!s->sock[0]) {
        rp_arg(a, "ControlPath=none");
    } else {
        rp_argf(a, cl_printf("ControlPath=%s", s->sock));
        rp_arg(a, "-o");
        rp_arg(a, master ? "ControlMaster=yes" : "ControlMaster=no");
        if (master) {
            rp_arg(a, "-o");
            rp_arg(a, "ControlPersist=no");
        }
    }
    rp_arg(a, "-p");
    rp_argf(a, cl_printf("%d", s->port));
    rp_arg(a, "-l");
    rp_arg(a, s->user);
}

extern char **environ;

/* posix_spawnp of @argv with descriptors 0, 1, 2 from @in, @out, @err (-1:
 * /dev/null) and nothing else open; a new session when @setsid. The
 * child's environment: PATH and HOME only. */
static pid_t rp_spawn(char *const argv[], int in, int out, int err, int setsid_)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    int fds[3] = { in, out, err };
    for (int i = 0; i < 3; i++) {
        if (fds[i] >= 0)
            posix_spawn_file_actions_adddup2(&fa, fds[i], i);
        else
            posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY,
                                             0);
    }
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (setsid_)
        flags |= POSIX_SPAWN_SETSID;
    posix_spawnattr_setflags(&at, flags);
    const char *home = getenv("HOME");
    const char *path = getenv("PATH");
    char *henv = cl_printf("HOME=%s", home ? home : "/");
    char *penv = cl_printf("PATH=%s", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    char *envp[] = { henv, penv, NULL };
    pid_t pid = -1;
    int rc = henv && penv ? posix_spawnp(&pid, argv[0], &fa, &at, argv, envp) : ENOMEM;
    free(henv);
    free(penv);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

/* The last meaningful line of ssh's log @path: a new string, or NULL. */
static char *rp_log_line(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char line[1024], last[1024] = "", hostkey = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            line[--n] = '\0';
        if (strstr(line, "REMOTE HOST IDENTIFICATION HAS CHANGED"))
            hostkey = 1;
        if (n && line[0] != '@' && strncmp(line, "Warning: Permanently added", 26) != 0)
            snprintf(last, sizeof last, "%s", line);
    }
    fclose(f);
    if (hostkey && !strstr(last, "Host key verification failed"))
        return strdup("Host key verification failed (REMOTE HOST IDENTIFICATION HAS CHANGED)");
    return last[0] ? strdup(last) : NULL;
}

/* The transport's error of an ssh process of @s whose log's last line
 * (rp_log_line()) is @line (taken; NULL when the log said nothing). */
static sbx_error *rp_transport_error_line(rp_ssh *s, sbx_error **error, char *line,
                                          const char *how, const char *op)
{
    const char *l = line ? line : "";
    sbx_error_code code = SBX_ERROR_CONNECTION;
    const char *reason = "ssh_failed";
    if (strstr(l, "Host key verification failed") || strstr(l, "IDENTIFICATION HAS CHANGED")) {
        code = SBX_ERROR_AUTHENTICATION;
        reason = "host_key_mismatch";
    } else if (strstr(l, "Permission denied")) {
        code = SBX_ERROR_AUTHENTICATION;
        reason = "permission_denied";
    } else if (strstr(l, "Connection refused")) {
        reason = "connection_refused";
    } else if (strstr(l, "timed out")) {
        reason = "connect_timeout";
    } else if (strstr(l, "too long for Unix domain socket")) {
        reason = "socket_path_too_long";
    } else if (strstr(l, "Connection closed") || strstr(l, "reset by peer")
               || strstr(l, "Broken pipe")) {
        reason = "connection_lost";
    }
    sbx_error *e = cl_fail(error, code, op, "ssh to %s@%s port %d %s: %s", s->user, s->host,
                           s->port, how, line ? line : "no message from ssh");
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    cl_context(e, "reason", reason);
    snprintf(rp_reason, sizeof rp_reason, "%s", reason);
    cl_context(e, "host", s->host);
    cl_context(e, "port", port);
    free(line);
    return e;
}

/* The transport's error of an ssh process of @s whose log is @log. */
static sbx_error *rp_transport_error(rp_ssh *s, sbx_error **error, const char *log,
                                     const char *how, const char *op)
{
    return rp_transport_error_line(s, error, rp_log_line(log), how, op);
}

/* 1 when @pid (a child) is stopped or traced (state T or t). */
static int rp_stopped(pid_t pid)
{
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'T' || rp[2] == 't');
}

static int rp_sock_answers(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* The directory's janitor: a sh in a session of its own whose stdin is a
 * pipe this process holds the other end of (close-on-exec), started with
 * the directory. When this process ends without rp_ssh_close() (a crash,
 * an exit without sandbox_free), the pipe reaches end of file and the
 * janitor ends the master named in DIR/pid, if one runs, and removes the
 * directory, so neither outlives its owner. DIR/pid names a master only
 * while it is unreaped (rp_master_set/rp_master_reaped), and the janitor
 * acts only once its owner is gone; a master that ended just before its
 * owner is reaped by init at once and its pid may be reused by then, so
 * the janitor signals the pid only while its command line still holds
 * this directory's ControlPath (rp_argv_common()).
 * rp_janitor_end() ends it first on an orderly close. Best effort: a
 * janitor that cannot start is logged. */
static void rp_janitor_start(rp_ssh *s)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        CL_LOG(SBX_LOG_WARNING, "no janitor for %s: %s", s->dir, strerror(errno));
        return;
    }
    char *argv[] = { "/bin/sh", "-c",
                     "read x; p=$(cat \"$1/pid\" 2>/dev/null) &&"
                     " tr '\\0' '\\n' <\"/proc/$p/cmdline\" 2>/dev/null |"
                     " grep -qxF \"ControlPath=$1/c\" && kill -TERM \"$p\" 2>/dev/null;"
                     " rm -rf -- \"$1\"",
                     "sbx-ssh-janitor", s->dir, NULL };
    pid_t j = rp_spawn(argv, p[0], -1, -1, 1);
    close(p[0]);
    if (j < 0) {
        CL_LOG(SBX_LOG_WARNING, "no janitor for %s: %s", s->dir, strerror(errno));
        close(p[1]);
        return;
    }
    s->janitor = j;
    s->janitor_fd = p[1];
}

/* DIR/pid: the running master's pid, for the janitor (s->lock held). */
static void rp_master_set(rp_ssh *s, pid_t pid)
{
    char path[RP_SSH_PATH_MAX + 16], tmp[RP_SSH_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/pid", s->dir);
    snprintf(tmp, sizeof tmp, "%s/pid.new", s->dir);
    FILE *f = fopen(tmp, "we");
    if (!f)
        return;
    fprintf(f, "%d\n", (int)pid);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        unlink(tmp);
    s->master = pid;
}

/* The master is reaped, or about to be: DIR/pid goes first (s->lock held). */
static void rp_master_reaped(rp_ssh *s)
{
    char path[RP_SSH_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/pid", s->dir);
    unlink(path);
    s->master = 0;
}

/* Ends the master when it is stopped (state T). */
static void rp_master_unwedge(rp_ssh *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->master > 0 && rp_stopped(s->master)) {
        CL_LOG(SBX_LOG_WARNING, "ssh master %d of %s:%d is stopped while a command runs; "
               "ending it", (int)s->master, s->host, s->port);
        pid_t pid = s->master;
        rp_master_reaped(s);
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    pthread_mutex_unlock(&s->lock);
}

int rp_ssh_master(rp_ssh *s, const sbx_call_ctx *ctx, const char *op, sbx_error **error)
{
    pthread_mutex_lock(&s->lock);
    if (s->closed) {
        pthread_mutex_unlock(&s->lock);
        cl_fail(error, SBX_ERROR_NOT_FOUND, op, "ssh to %s@%s port %d: closed (the sandbox "
                "was destroyed)", s->user, s->host, s->port);
        return -1;
    }
    if (!s->sock[0]) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    if (s->master > 0) {
        pid_t r = waitpid(s->master, NULL, WNOHANG);
        if (r == s->master || (r < 0 && errno == ECHILD)) {
            CL_LOG(SBX_LOG_INFO, "ssh master %d of %s:%d ended; starting another",
                   (int)s->master, s->host, s->port);
            rp_master_reaped(s);
        } else if (rp_stopped(s->master) || !rp_sock_answers(s->sock)) {
            CL_LOG(SBX_LOG_WARNING, "ssh master %d of %s:%d is stopped or gone; replacing it",
                   (int)s->master, s->host, s->port);
            pid_t pid = s->master;
            rp_master_reaped(s);
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        } else {
            pthread_mutex_unlock(&s->lock);
            return 0;
        }
    }
    char log[RP_SSH_PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/m.log", s->dir);
    cl_bound b = cl_bound_make(ctx, s->connect_timeout_s + 5);
    int rc = -1, tries = 0;
    pid_t pid;
spawn:
    unlink(s->sock);
    unlink(log);
    rp_argv a = { 0 };
    rp_argv_common(s, &a, 1, log);
    rp_arg(&a, "-N");
    rp_arg(&a, s->host);
    a.v[a.n] = NULL;
    pid = rp_spawn(a.v, -1, -1, -1, 1);
    rp_argv_clear(&a);
    tries++;
    if (pid < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot start ssh: %s",
                strerror(errno));
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            pid = 0;
            char *line = rp_log_line(log);
            char how[96];
            if (WIFSIGNALED(st))
                snprintf(how, sizeof how, "could not connect (ssh killed by signal %d)",
                         WTERMSIG(st));
            else
                snprintf(how, sizeof how, "could not connect (ssh exit status %d)",
                         WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            /* An ssh that ended saying nothing (no line in its log: no
             * refusal, no authentication failure, no timeout) is started
             * once more: a connection's start is safe to repeat. */
            if (!line && tries < 2 && cl_bound_left(&b) != 0 && !cl_bound_cancelled(&b)) {
                CL_LOG(SBX_LOG_WARNING, "ssh master of %s:%d ended saying nothing (%s); "
                       "starting it again", s->host, s->port, how + strlen("could not connect "));
                goto spawn;
            }
            rp_transport_error_line(s, error, line, how, op);
            break;
        }
        if (rp_sock_answers(s->sock)) {
            rc = 0;
            break;
        }
        if (cl_bound_left(&b) == 0 || cl_bound_cancelled(&b)) {
            sbx_error *e = cl_fail(error, cl_bound_cancelled(&b) ? SBX_ERROR_CANCELLED
                                                                 : SBX_ERROR_TIMEOUT, op,
                                   "ssh to %s@%s port %d: no connection within the bound",
                                   s->user, s->host, s->port);
            cl_context(e, "host", s->host);
            break;
        }
        cl_sleep(0.01, b.cancel_fd);
    }
    if (rc == 0) {
        rp_master_set(s, pid);
    } else if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* One command                                                               */
/* ------------------------------------------------------------------------ */

static int rp_keep(cl_buf *b, size_t max, const char *p, size_t n)
{
    if (!b)
        return 0;
    if (b->len >= max)
        return 0;
    if (n > max - b->len)
        n = max - b->len;
    return cl_buf_append(b, p, n);
}

static void rp_set_pid(const rp_ssh_cmd *c, pid_t pid, int pidfd)
{
    if (c->pid_lock)
        pthread_mutex_lock(c->pid_lock);
    if (c->pid_out)
        *c->pid_out = pid;
    if (c->pidfd_out)
        *c->pidfd_out = pidfd;
    if (c->pid_lock)
        pthread_mutex_unlock(c->pid_lock);
}

static int rp_run1(rp_ssh *s, const sbx_call_ctx *ctx, const rp_ssh_cmd *c, int check_mark,
                   int *code, const char *op, sbx_error **error);

int rp_ssh_run(rp_ssh *s, const sbx_call_ctx *ctx, const rp_ssh_cmd *cmd, int *code,
               const char *op, sbx_error **error)
{
    return rp_run1(s, ctx, cmd, 1, code, op, error);
}

/* Whether the script tagged @tag left its 255 marker (and removes it): 1
 * yes, 0 no, -1 with the transport's error. */
static int rp_marker(rp_ssh *s, const sbx_call_ctx *ctx, const char *tag, const char *op,
                     sbx_error **error)
{
    char script[256], t[40];
    snprintf(script, sizeof script, "rm -- " RP_MARK_DIR "/.sbx-255-%s 2>/dev/null\n", tag);
    cl_random_hex(t, 16);
    rp_ssh_cmd c = { .script = script, .tag = t, .in_fd = -1, .out_fd = -1, .err_fd = -1,
                     .stop_fd = -1 };
    int rc = 0;
    if (rp_run1(s, ctx, &c, 0, &rc, op, error) < 0)
        return -1;
    return rc == 0;
}

static int rp_run1(rp_ssh *s, const sbx_call_ctx *ctx, const rp_ssh_cmd *c, int check_mark,
                   int *code, const char *op, sbx_error **error)
{
    /* The script file: runs the script in a subshell, removes its
     * directory and marks a 255 (CASE-31). */
    char *file = cl_printf("(\n%s\n)\ns=$?\nrm -rf -- \"$1\"\n"
                           "[ \"$s\" -ne 255 ] || : >" RP_MARK_DIR "/.sbx-255-%s\nexit \"$s\"\n",
                           c->script, c->tag);
    char *head = file ? cl_printf("%zu\n", strlen(file)) : NULL;
    cl_buf pending = { 0 };
    int sv[2] = { -1, -1 }, op_[2] = { -1, -1 }, ep[2] = { -1, -1 }, pidfd = -1;
    pid_t pid = -1;
    int rc = -1;
    char log[RP_SSH_PATH_MAX + 64];
    snprintf(log, sizeof log, "%s/e-%s.log", s->dir, c->tag);
    if (!file || !head || cl_buf_append(&pending, head, strlen(head)) < 0
        || cl_buf_append(&pending, file, strlen(file)) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0
        || (c->out_fd < 0 && pipe2(op_, O_CLOEXEC) < 0)
        || (c->err_fd < 0 && pipe2(ep, O_CLOEXEC) < 0)) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot make pipes: %s",
                strerror(errno));
        goto out;
    }
    rp_argv a = { 0 };
    rp_argv_common(s, &a, 0, log);
    rp_arg(&a, s->host);
    rp_arg(&a, "--");
    rp_arg(&a, RP_BOOT);
    a.v[a.n] = NULL;
    pid = rp_spawn(a.v, sv[1], c->out_fd >= 0 ? c->out_fd : op_[1],
                   c->err_fd >= 0 ? c->err_fd : ep[1], 0);
    rp_argv_clear(&a);
    if (pid < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot start ssh: %s",
                strerror(errno));
        goto out;
    }
    close(sv[1]);
    sv[1] = -1;
    if (op_[1] >= 0) {
        close(op_[1]);
        op_[1] = -1;
    }
    if (ep[1] >= 0) {
        close(ep[1]);
        ep[1] = -1;
    }
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    rp_set_pid(c, pid, pidfd);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    size_t max = c->buf_max ? c->buf_max : RP_BUF_MAX;
    size_t sent = 0;
    int in_open = c->in_fd >= 0, exited = 0, stopped = 0;
    int status = 0;
    cl_bound b = cl_bound_make(ctx, 0);
    double next_look = cl_now() + RP_MASTER_LOOK_MS / 1000.0;
    char buf[65536];
    for (;;) {
        struct pollfd p[7];
        int n = 0, i_sock = -1, i_in = -1, i_out = -1, i_err = -1, i_pid = -1, i_stop = -1,
            i_cancel = -1;
        int want_write = sv[0] >= 0 && (sent < pending.len);
        if (want_write) {
            p[i_sock = n++] = (struct pollfd){ .fd = sv[0], .events = POLLOUT };
        } else if (sv[0] >= 0 && in_open) {
            p[i_in = n++] = (struct pollfd){ .fd = c->in_fd, .events = POLLIN };
        } else if (sv[0] >= 0 && !in_open) {
            /* Everything sent: the command's stdin ends. */
            shutdown(sv[0], SHUT_WR);
            close(sv[0]);
            sv[0] = -1;
        }
        if (op_[0] >= 0)
            p[i_out = n++] = (struct pollfd){ .fd = op_[0], .events = POLLIN };
        if (ep[0] >= 0)
            p[i_err = n++] = (struct pollfd){ .fd = ep[0], .events = POLLIN };
        if (!exited && pidfd >= 0)
            p[i_pid = n++] = (struct pollfd){ .fd = pidfd, .events = POLLIN };
        if (c->stop_fd >= 0)
            p[i_stop = n++] = (struct pollfd){ .fd = c->stop_fd, .events = POLLIN };
        if (b.cancel_fd >= 0)
            p[i_cancel = n++] = (struct pollfd){ .fd = b.cancel_fd, .events = POLLIN };
        if (exited && op_[0] < 0 && ep[0] < 0)
            break;
        if (!exited && pidfd < 0) {
            /* No pidfd: look every 10 ms. */
            pid_t r = waitpid(pid, &status, WNOHANG);
            if (r == pid) {
                exited = 1;
                pid = -1;
                continue;
            }
        }
        double left = cl_bound_left(&b);
        int tmo = left < 0 ? -1 : (int)(left * 1000) + 1;
        if (pidfd < 0 && !exited && (tmo < 0 || tmo > 10))
            tmo = 10;
        /* A master that stops while the command runs would hold it for
         * ever: looked at once a second, and ended (the command then
         * fails as a lost connection; the next one starts a master). */
        if (!exited && (tmo < 0 || tmo > RP_MASTER_LOOK_MS))
            tmo = RP_MASTER_LOOK_MS;
        if (!exited && cl_now() >= next_look) {
            next_look = cl_now() + RP_MASTER_LOOK_MS / 1000.0;
            rp_master_unwedge(s);
        }
        int pr = poll(p, (nfds_t)n, tmo);
        if (pr < 0 && errno != EINTR) {
            cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "poll: %s", strerror(errno));
            goto kill;
        }
        if ((i_stop >= 0 && p[i_stop].revents) || (i_cancel >= 0 && p[i_cancel].revents)) {
            stopped = 1;
            cl_fail(error, SBX_ERROR_CANCELLED, op, "the command was stopped");
            goto kill;
        }
        if (!exited && left == 0) {
            sbx_error *e = cl_fail(error, SBX_ERROR_TIMEOUT, op,
                                   "the call's deadline passed while ssh ran");
            cl_outcome_unknown(e);
            goto kill;
        }
        if (pr <= 0)
            continue;
        if (i_sock >= 0 && p[i_sock].revents) {
            ssize_t w = send(sv[0], pending.data + sent, pending.len - sent, MSG_NOSIGNAL);
            if (w > 0) {
                sent += (size_t)w;
                if (sent == pending.len)
                    pending.len = sent = 0;
            } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                /* ssh went away: its status tells. */
                close(sv[0]);
                sv[0] = -1;
                in_open = 0;
            }
        }
        if (i_in >= 0 && p[i_in].revents) {
            ssize_t r = read(c->in_fd, buf, sizeof buf);
            if (r > 0) {
                pending.len = sent = 0;
                cl_buf_append(&pending, buf, (size_t)r);
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                in_open = 0;
            }
        }
        for (int k = 0; k < 2; k++) {
            int idx = k ? i_err : i_out;
            int *fd = k ? &ep[0] : &op_[0];
            if (idx < 0 || !p[idx].revents)
                continue;
            ssize_t r = read(*fd, buf, sizeof buf);
            if (r > 0) {
                rp_keep(k ? c->err_buf : c->out_buf, max, buf, (size_t)r);
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                close(*fd);
                *fd = -1;
            }
        }
        if (i_pid >= 0 && p[i_pid].revents) {
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            exited = 1;
            pid = -1;
        }
    }
    rp_set_pid(c, 0, -1);
    if (WIFSIGNALED(status)) {
        rp_transport_error(s, error, log, "was ended by a signal", op);
        goto out;
    }
    int st = WEXITSTATUS(status);
    if (st == 255) {
        int m = check_mark ? rp_marker(s, ctx, c->tag, op, NULL) : 0;
        if (m != 1) {
            rp_transport_error(s, error, log, "failed", op);
            goto out;
        }
    }
    *code = st;
    rc = 1;
    goto out;
kill:
    (void)stopped;
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        pid = -1;
    }
    rp_set_pid(c, 0, -1);
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        rp_set_pid(c, 0, -1);
    }
    if (pidfd >= 0)
        close(pidfd);
    for (int i = 0; i < 2; i++) {
        if (sv[i] >= 0)
            close(sv[i]);
        if (op_[i] >= 0)
            close(op_[i]);
        if (ep[i] >= 0)
            close(ep[i]);
    }
    unlink(log);
    cl_buf_clear(&pending);
    free(file);
    free(head);
    return rc;
}
