/*
 * proto.c — frame encoding for the local backend (see proto.h), shared by
 * the plugin and the supervisor.
 */
#include "proto.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <linux/sockios.h>

/** Makes room for @n more bytes; sets failed when it cannot. */
static int buf_reserve(proto_buf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (n > PROTO_MAX_FRAME + PROTO_HEADER_SIZE - b->len) {
        b->failed = 1;
        return -1;
    }
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    unsigned char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static void buf_put(proto_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) < 0)
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void proto_buf_init(proto_buf *b, uint32_t type)
{
    memset(b, 0, sizeof(*b));
    buf_put(b, &type, sizeof(type));
    uint32_t zero = 0;
    buf_put(b, &zero, sizeof(zero));
}

void proto_buf_free(proto_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void proto_put_u32(proto_buf *b, uint32_t v)
{
    buf_put(b, &v, sizeof(v));
}

void proto_put_i32(proto_buf *b, int32_t v)
{
    buf_put(b, &v, sizeof(v));
}

void proto_put_u64(proto_buf *b, uint64_t v)
{
    buf_put(b, &v, sizeof(v));
}

void proto_put_str(proto_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (n > PROTO_MAX_FRAME) {
        b->failed = 1;
        return;
    }
    proto_put_u32(b, (uint32_t)n);
    buf_put(b, s, n + 1);
}

int proto_buf_finish(proto_buf *b)
{
    if (b->failed || b->len < PROTO_HEADER_SIZE
        || b->len - PROTO_HEADER_SIZE > PROTO_MAX_FRAME)
        return -1;
    uint32_t len = (uint32_t)(b->len - PROTO_HEADER_SIZE);
    memcpy(b->data + sizeof(uint32_t), &len, sizeof(len));
    return 0;
}

int proto_parse_header(const unsigned char hdr[PROTO_HEADER_SIZE],
                       uint32_t *type, uint32_t *len)
{
    memcpy(type, hdr, sizeof(*type));
    memcpy(len, hdr + sizeof(*type), sizeof(*len));
    return *len > PROTO_MAX_FRAME ? -1 : 0;
}

void proto_reader_init(proto_reader *r, const void *payload, size_t len)
{
    r->p = payload;
    r->left = len;
    r->failed = 0;
}

/** Copies @n bytes out of the payload, or fails the reader. */
static int reader_take(proto_reader *r, void *out, size_t n)
{
    if (r->failed || r->left < n) {
        r->failed = 1;
        memset(out, 0, n);
        return -1;
    }
    memcpy(out, r->p, n);
    r->p += n;
    r->left -= n;
    return 0;
}

uint32_t proto_get_u32(proto_reader *r)
{
    uint32_t v;
    reader_take(r, &v, sizeof(v));
    return v;
}

int32_t proto_get_i32(proto_reader *r)
{
    int32_t v;
    reader_take(r, &v, sizeof(v));
    return v;
}

uint64_t proto_get_u64(proto_reader *r)
{
    uint64_t v;
    reader_take(r, &v, sizeof(v));
    return v;
}

const char *proto_get_str(proto_reader *r)
{
    uint32_t n = proto_get_u32(r);
    if (r->failed || r->left <= n || r->p[n] != '\0'
        || memchr(r->p, '\0', n) != NULL) {
        r->failed = 1;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p += (size_t)n + 1;
    r->left -= (size_t)n + 1;
    return s;
}

int proto_workdir_owner(const char *meta, unsigned *uid, unsigned *gid)
{
    char *rec;
    if (asprintf(&rec, "%s/" PROTO_WORKDIR_OWNER, meta) < 0)
        return -1;
    int fd = open(rec, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    free(rec);
    if (fd < 0)
        return -1;
    char line[64];
    struct stat st;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()
        && !(st.st_mode & 022))
        n = read(fd, line, sizeof(line) - 1);
    close(fd);
    char nl;
    if (n <= 0)
        return -1;
    line[n] = '\0';
    return sscanf(line, "%u %u%c", uid, gid, &nl) == 3 && nl == '\n' ? 0 : -1;
}

int proto_proc_stat(pid_t pid, proto_proc *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n;
    do
        n = read(fd, buf, sizeof(buf) - 1);
    while (n < 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    if (n <= 0) {
        errno = n < 0 ? saved : ESRCH;
        return -1;
    }
    buf[n] = '\0';
    /* The command name (field 2) is in parentheses and may hold anything,
     * ')' included: the fields go on after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) {
        errno = EINVAL;
        return -1;
    }
    char state;
    int ppid, sid;
    unsigned long long start;
    /* fields 3..22 */
    if (sscanf(p + 1, " %c %d %*s %d %*s %*s %*s %*s %*s %*s %*s %*s %*s"
               " %*s %*s %*s %*s %*s %*s %llu",
               &state, &ppid, &sid, &start) != 4) {
        errno = EINVAL;
        return -1;
    }
    out->state = state;
    out->ppid = ppid;
    out->sid = sid;
    out->start = start;
    return 0;
}

/** 1 when errno @e says the process or the machine ran out of descriptors
 *  or memory (not that the thing asked for is missing). */
static int short_of_resources(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOMEM;
}

int proto_proc_alive(pid_t pid, unsigned long long start)
{
    proto_proc st;
    if (pid <= 0)
        return 0;
    if (proto_proc_stat(pid, &st) < 0) {
        /* /proc could not be read for want of a descriptor or memory: the
         * process is not known to be gone. kill(0) says whether the pid
         * lives (its start time cannot be checked now); a live sandbox is
         * never taken for a dead one because the caller ran out of
         * descriptors. */
        if (short_of_resources(errno))
            return kill(pid, 0) == 0 || errno == EPERM;
        return 0;
    }
    if (st.state == 'Z' || st.state == 'X')
        return 0;
    return start == 0 || st.start == start;
}

/** One row of a process table snapshot. */
struct proc_row {
    pid_t pid;
    pid_t ppid;
    char state;
    char mark;
};

static int row_cmp(const void *a, const void *b)
{
    pid_t x = ((const struct proc_row *)a)->pid, y = ((const struct proc_row *)b)->pid;
    return (x > y) - (x < y);
}

/**
 * The fallback walk, for kernels without /proc/PID/task/TID/children
 * (CONFIG_PROC_CHILDREN unset): reads /proc/PID/stat of every process on
 * the host and follows the parent links down from @ancestor. O(host).
 */
static void walk_by_scan(pid_t ancestor, proto_visit_fn fn, void *data)
{
    struct proc_row *rows = NULL;
    size_t n = 0, cap = 0;
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
        if (proto_proc_stat((pid_t)v, &st) < 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 256;
            struct proc_row *r = realloc(rows, ncap * sizeof(*r));
            if (!r)
                break;
            rows = r;
            cap = ncap;
        }
        rows[n++] = (struct proc_row){ (pid_t)v, st.ppid, st.state, 0 };
    }
    closedir(d);
    if (n == 0) {
        free(rows);
        return;
    }
    qsort(rows, n, sizeof(*rows), row_cmp);

    /* Mark the children of the ancestor and of marked processes until
     * nothing changes (one pass per generation). */
    int changed = 1;
    while (changed) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (rows[i].mark || rows[i].pid == ancestor)
                continue;
            int ours = rows[i].ppid == ancestor;
            if (!ours && rows[i].ppid > 0) {
                struct proc_row key = { .pid = rows[i].ppid };
                struct proc_row *p = bsearch(&key, rows, n, sizeof(*rows), row_cmp);
                ours = p && p->mark;
            }
            if (ours) {
                rows[i].mark = 1;
                changed = 1;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].mark)
            continue;
        proto_proc st;
        /* Read again: the sid, and whether it still is what the scan saw. */
        if (proto_proc_stat(rows[i].pid, &st) == 0 && st.ppid == rows[i].ppid)
            fn(rows[i].pid, &st, data);
    }
    free(rows);
}

/** 1 when this kernel has /proc/PID/task/TID/children; found out once. */
static int have_children_files(void)
{
    static volatile int known = -1;
    int k = known;
    if (k < 0) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
        k = access(path, F_OK) == 0;
        known = k;
    }
    return k;
}

/** A growable list of pids, each with the parent it was listed under. */
struct pid_queue {
    pid_t *pid;
    pid_t *parent;
    size_t n, cap;
};

/** Most pids one walk lists (PID_MAX_LIMIT): a tree is never larger. */
#define WALK_MAX 4194304

static int queue_push(struct pid_queue *q, pid_t pid, pid_t parent)
{
    if (q->n >= WALK_MAX)
        return -1;
    if (q->n == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 64;
        pid_t *a = realloc(q->pid, ncap * sizeof(*a));
        if (!a)
            return -1;
        q->pid = a;
        pid_t *b = realloc(q->parent, ncap * sizeof(*b));
        if (!b)
            return -1;
        q->parent = b;
        q->cap = ncap;
    }
    q->pid[q->n] = pid;
    q->parent[q->n] = parent;
    q->n++;
    return 0;
}

/** Appends the children of every thread of @pid to @q (what the kernel
 *  lists in /proc/@pid/task/TID/children). */
static void push_children(struct pid_queue *q, pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char file[320];
        snprintf(file, sizeof(file), "/proc/%d/task/%s/children", (int)pid, e->d_name);
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        /* "PID PID ... " with no limit on the count: parse as it comes. */
        char buf[4096];
        long cur = -1;
        for (;;) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            for (ssize_t i = 0; i < n; i++) {
                if (buf[i] >= '0' && buf[i] <= '9') {
                    cur = (cur < 0 ? 0 : cur * 10) + (buf[i] - '0');
                    if (cur > INT_MAX)
                        cur = INT_MAX;
                } else if (cur >= 0) {
                    if (cur > 0)
                        queue_push(q, (pid_t)cur, pid);
                    cur = -1;
                }
            }
        }
        if (cur > 0)
            queue_push(q, (pid_t)cur, pid);
        close(fd);
    }
    closedir(d);
}

void proto_walk_descendants(pid_t ancestor, proto_visit_fn fn, void *data)
{
    if (ancestor <= 0)
        return;
    if (!have_children_files()) {
        walk_by_scan(ancestor, fn, data);
        return;
    }
    struct pid_queue q = { 0 };
    push_children(&q, ancestor);
    for (size_t i = 0; i < q.n; i++) {
        pid_t pid = q.pid[i];
        proto_proc st;
        /* Gone, or no longer below the process it was listed under (it
         * was reparented, or its pid names another process now): a later
         * walk finds it where it went. */
        if (pid == ancestor || proto_proc_stat(pid, &st) < 0 || st.ppid != q.parent[i])
            continue;
        /* Its children first: once @fn has signalled it, it may exit and
         * they move away before they could be listed. A zombie has none. */
        if (st.state != 'Z' && st.state != 'X')
            push_children(&q, pid);
        fn(pid, &st, data);
    }
    free(q.pid);
    free(q.parent);
}

struct kill_walk {
    int sig;
    size_t live;
    size_t dead;
};

static void kill_one(pid_t pid, const proto_proc *st, void *data)
{
    struct kill_walk *k = data;
    if (st->state == 'Z' || st->state == 'X') {
        k->dead++;
        return;
    }
    k->live++;
    kill(pid, k->sig);
}

size_t proto_kill_descendants(pid_t ancestor, int sig, size_t *zombies)
{
    struct kill_walk k = { .sig = sig };
    proto_walk_descendants(ancestor, kill_one, &k);
    if (zombies)
        *zombies = k.dead;
    return k.live;
}

/**
 * Removes @name under @parent with all it holds (see proto_rm_tree).
 * @type: the entry's d_type as its directory listed it (DT_UNKNOWN when
 * not known); @known: its lstat when the caller has it, else NULL.
 *
 * A listed non-directory is unlinked and a listed directory rmdir'd
 * first, without a stat: a sandbox's files and its empty directories (its
 * tmp/) cost one call each. Should the entry have changed type since the
 * listing, or the directory not be empty (or be a mount point: EBUSY),
 * the call fails and the entry takes the full path below, which looks at
 * it first: nothing on another filesystem is entered.
 */
static int rm_tree_at(int parent, const char *name, dev_t dev, int depth, unsigned char type,
                      const struct stat *known)
{
    if (type != DT_UNKNOWN
        && unlinkat(parent, name, type == DT_DIR ? AT_REMOVEDIR : 0) == 0)
        return 0;
    if (type != DT_UNKNOWN && errno == ENOENT)
        return 0;
    struct stat st;
    if (known)
        st = *known;
    else if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(parent, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    if (st.st_dev != dev) {
        errno = EXDEV;
        return -1;
    }
    if (depth > 4096) {
        errno = ELOOP;
        return -1;
    }
    if ((st.st_mode & S_IRWXU) != S_IRWXU)
        fchmodat(parent, name, (st.st_mode & 07777) | S_IRWXU, 0);
    int rc = 0, sub_errno = 0;
    for (int pass = 0; pass < 3; pass++) {
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return errno == ENOENT ? 0 : -1;
        DIR *d = fdopendir(fd);
        if (!d) {
            close(fd);
            return -1;
        }
        rc = 0;
        sub_errno = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (rm_tree_at(fd, e->d_name, dev, depth + 1, e->d_type, NULL) < 0) {
                rc = -1;
                /* What stopped an entry's removal, a shortage first:
                 * proto_rm_tree() then goes another way. */
                if (!sub_errno || short_of_resources(errno))
                    sub_errno = errno;
            }
        }
        closedir(d);
        if (unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
            return 0;
        if (errno != ENOTEMPTY && errno != EEXIST)
            return -1;
    }
    /* Not empty: because an entry could not be removed (its reason, as
     * EMFILE deeper down), or because entries kept coming. */
    errno = rc == 0 || !sub_errno ? ENOTEMPTY : sub_errno;
    return -1;
}

/* Removes by name, with no descriptor, what a sandbox's meta directory
 * holds until its supervisor runs (sock, record, log, an empty root/ and
 * its tmp/; on bubblewrap the overlay's lower/, work/ and mnt/) and then
 * the directory itself: proto_rm_tree()'s way out when
 * the process has no descriptor left to walk the tree with. Returns 0
 * when @path is gone, else -1 with errno (a directory holding more). */
static int rm_known_layout(const char *path)
{
    static const char *const files[] = { "sock", "record", "log", "workdir-owner" };
    /* bubblewrap adds an overlay's empty lower layer, its work directory
     * (with the work/ overlayfs makes in it) and its mount point. */
    static const char *const dirs[] = { "root/tmp", "root", "lower", "work/work", "work",
                                        "mnt" };
    char sub[PATH_MAX];

    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, files[i]) < sizeof(sub))
            unlink(sub);
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, dirs[i]) < sizeof(sub))
            rmdir(sub);
    if (rmdir(path) == 0 || errno == ENOENT)
        return 0;
    return -1;
}

static int rm_tree_fds(const char *path);

extern char **environ;

/* The tree at @path removed by a child process that first closes every
 * descriptor it inherited (`rm -rf --one-file-system -- PATH`), for a
 * caller that has none left (EMFILE): 0 when @path is gone afterwards. */
static int rm_tree_in_child(const char *path)
{
    posix_spawn_file_actions_t fa;
    const char *argv[] = { "rm", "-rf", "--one-file-system", "--", path, NULL };
    static const char *const rms[] = { "/usr/bin/rm", "/bin/rm" };
    pid_t pid = -1;
    int rc = -1, status;
    struct stat st;

    if (posix_spawn_file_actions_init(&fa) != 0)
        return -1;
    posix_spawn_file_actions_addclosefrom_np(&fa, 0);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    for (size_t i = 0; i < sizeof(rms) / sizeof(rms[0]) && pid < 0; i++)
        if (access(rms[i], X_OK) == 0 &&
            posix_spawn(&pid, rms[i], &fa, NULL, (char *const *)argv, environ) != 0)
            pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    if (pid < 0)
        return -1;
    /* SIGCHLD ignored by an application: waitpid fails once the child is
     * gone, and the path says whether it did its work. */
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (lstat(path, &st) < 0 && errno == ENOENT)
        rc = 0;
    return rc;
}

int proto_rm_tree(const char *path)
{
    int rc = rm_tree_fds(path);
    if (rc < 0 && short_of_resources(errno)) {
        int e = errno;
        if (rm_known_layout(path) == 0)
            return 0;
        /* More than the known layout: a process of its own, with a fresh
         * table of descriptors, removes it (the per-process limit). */
        if (e == EMFILE && rm_tree_in_child(path) == 0)
            return 0;
        errno = e;
    }
    return rc;
}

static int rm_tree_fds(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (path[0] != '/' || !slash || !slash[1]) {
        errno = EINVAL;
        return -1;
    }
    char *parent = strndup(path, slash == path ? 1 : (size_t)(slash - path));
    if (!parent)
        return -1;
    int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(parent);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat st;
    int rc;
    if (fstatat(dfd, slash + 1, &st, AT_SYMLINK_NOFOLLOW) < 0)
        rc = errno == ENOENT ? 0 : -1;
    else
        rc = rm_tree_at(dfd, slash + 1, st.st_dev, 0, DT_UNKNOWN, &st);
    int e = errno;
    close(dfd);
    errno = e;
    return rc;
}

int proto_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

char *proto_trash_path(const char *meta)
{
    const char *slash = strrchr(meta, '/');
    if (!slash || !slash[1]) {
        errno = EINVAL;
        return NULL;
    }
    char *t = NULL;
    if (asprintf(&t, "%.*s/" PROTO_TRASH_PREFIX "%s", (int)(slash - meta), meta, slash + 1) < 0)
        return NULL;
    return t;
}

int proto_meta_lock(const char *meta)
{
    int fd = open(meta, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int proto_meta_to_trash(const char *meta)
{
    char *trash = proto_trash_path(meta);
    int r = trash ? renameat2(AT_FDCWD, meta, AT_FDCWD, trash, RENAME_NOREPLACE) : -1;
    int e = errno;
    free(trash);
    errno = e;
    return r;
}

/* Whether spare directory @path (PROTO_SPARE_PREFIX) lost its supervisor:
 * nothing listens on its socket (a connect is refused), or it has no
 * socket at all (it died making it). A live spare's listener queues the
 * connection, which it later reads as a client that hung up. */
static int spare_dead(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if ((size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/sock", path)
        >= sizeof sa.sun_path)
        return 0;
    struct stat st;
    if (lstat(sa.sun_path, &st) < 0)
        return errno == ENOENT;
    if (!S_ISSOCK(st.st_mode))
        return 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return 0;
    int dead = connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno == ECONNREFUSED;
    close(fd);
    return dead;
}

size_t proto_sweep_trash(const char *dir, long min_age)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t removed = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        int trash = strncmp(de->d_name, PROTO_TRASH_PREFIX, strlen(PROTO_TRASH_PREFIX)) == 0;
        int spare = strncmp(de->d_name, PROTO_SPARE_PREFIX, strlen(PROTO_SPARE_PREFIX)) == 0;
        if ((!trash && !spare) || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0
            || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()
            || now - st.st_ctime < min_age)
            continue;
        char *path = NULL;
        if (asprintf(&path, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, de->d_name) < 0)
            continue;
        if ((trash || spare_dead(path)) && proto_rm_tree(path) == 0)
            removed++;
        free(path);
    }
    closedir(d);
    return removed;
}

int proto_clean_bwrap_root(const char *root)
{
    int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    /* Mount points bwrap made: empty directories, symlinks it placed, the
     * supervisor's empty placeholder. Anything else stays. */
    static const char *const names[] = { "usr", "etc", "bin", "sbin", "lib", "lib32", "lib64",
                                         "libx32", "proc", "dev" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct stat st;
        if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            unlinkat(dfd, names[i], AT_REMOVEDIR);   /* only when empty */
        } else if (S_ISLNK(st.st_mode)) {
            char mine[PATH_MAX], host_t[PATH_MAX], hp[64];
            ssize_t l1 = readlinkat(dfd, names[i], mine, sizeof(mine) - 1);
            snprintf(hp, sizeof(hp), "/%s", names[i]);
            ssize_t l2 = readlink(hp, host_t, sizeof(host_t) - 1);
            if (l1 > 0 && l1 == l2 && memcmp(mine, host_t, (size_t)l1) == 0)
                unlinkat(dfd, names[i], 0);
        }
    }
    struct stat st;
    if (fstatat(dfd, ".sbx/sbx-supervisor", &st, AT_SYMLINK_NOFOLLOW) == 0
        && S_ISREG(st.st_mode) && st.st_size == 0)
        unlinkat(dfd, ".sbx/sbx-supervisor", 0);
    unlinkat(dfd, ".sbx/run", AT_REMOVEDIR);
    unlinkat(dfd, ".sbx", AT_REMOVEDIR);
    close(dfd);
    return 0;
}

int proto_unread_bytes(int fd)
{
    int n = 0;
    if (ioctl(fd, SIOCOUTQ, &n) < 0)
        return -1;
    return n;
}

int proto_proc_stopped(pid_t pid)
{
    proto_proc st;
    return proto_proc_stat(pid, &st) == 0 && (st.state == 'T' || st.state == 't');
}

char *proto_stall_message(char *buf, size_t size, const char *id, pid_t pid, double secs,
                          int not_started)
{
    int stopped = proto_proc_stopped(pid);
    snprintf(buf, size, "the supervisor of sandbox %s (pid %d%s) did not answer for %g s: %s",
             id, (int)pid, stopped ? ", stopped" : "", secs,
             not_started ? "the command did not start and never will"
                         : "the command may have started; it is ended once the supervisor "
                           "runs again");
    return buf;
}
