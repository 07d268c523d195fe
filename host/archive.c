/*
 * host/archive.c — paths beneath a directory, bounded copies, and tar
 * streams through libarchive: the tree writer behind upload_dir and the
 * checked extractor behind download_dir, sbx_extract_tar_fd and the local
 * plugin's upload_tar (archive.h describes the contract).
 *
 * Trees are walked by path relative to a base descriptor, each directory
 * reopened beneath the base when needed, so the number of open descriptors
 * stays small however deep a tree is; names are kept per directory on the
 * way down, data moves in fixed-size blocks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HAVE_OPENAT2_H 1
#endif
#endif

#define COPY_CHUNK ((size_t)8 << 20)     /* bytes per copy_file_range / sendfile */
#define RW_BUF ((size_t)256 << 10)       /* read/write buffer */
#define TAR_BLOCK ((size_t)64 << 10)     /* tar record size, and read block */
#define DATA_BUF ((size_t)1 << 20)       /* file data per archive_write_data */
#define MAX_SYMLINKS 40                  /* as the kernel's limit */

/* ---------------------------------------------------------------- errors */

static sbx_error *env_fail(const sbx_fs_env *env, sbx_error **err, sbx_error_code code,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Stores a new error through the host services; returns it for context. */
static sbx_error *
env_fail(const sbx_fs_env *env, sbx_error **err, sbx_error_code code, const char *fmt, ...)
{
    char msg[PATH_MAX + 512];
    va_list ap;

    if (!err || *err || !env || !env->hs || !env->hs->set_error)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    env->hs->set_error(err, code, env->op, "%s", msg);
    return *err;
}

static void
env_context(const sbx_fs_env *env, sbx_error *e, const char *key, const char *value)
{
    if (e && env->hs->error_add_context)
        env->hs->error_add_context(e, key, value);
}

/* Deadline and cancellation of the call: 0 to go on, -1 with a timeout
 * error when it is over. */
static int
env_check(const sbx_fs_env *env, sbx_error **err)
{
    const sbx_call_ctx *c = env->ctx;
    struct timespec ts;

    if (!c || c->struct_size < offsetof(sbx_call_ctx, cancel_fd) + sizeof(int))
        return 0;
    if (c->deadline > 0) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (ts.tv_sec + ts.tv_nsec / 1e9 >= c->deadline) {
            env_fail(env, err, SBX_ERROR_TIMEOUT, "the call's deadline passed");
            return -1;
        }
    }
    if (c->cancel_fd >= 0) {
        struct pollfd p = { .fd = c->cancel_fd, .events = POLLIN };

        if (poll(&p, 1, 0) > 0) {
            sbx_error *e = env_fail(env, err, SBX_ERROR_TIMEOUT, "the call was cancelled");

            if (e && env->hs->error_set_outcome)
                env->hs->error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
            return -1;
        }
    }
    return 0;
}

/* Waits until @fd is ready for @events, watching the call's cancel
 * descriptor and deadline. 0 ready, -1 with *@err set. */
static int
env_wait(const sbx_fs_env *env, int fd, short events, sbx_error **err)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = events }, { .fd = -1 } };
        const sbx_call_ctx *c = env->ctx;
        int timeout = -1, n = 1;

        if (c && c->struct_size >= offsetof(sbx_call_ctx, cancel_fd) + sizeof(int)) {
            if (c->cancel_fd >= 0) {
                p[1].fd = c->cancel_fd;
                p[1].events = POLLIN;
                n = 2;
            }
            if (c->deadline > 0) {
                struct timespec ts;
                double left;

                clock_gettime(CLOCK_MONOTONIC, &ts);
                left = c->deadline - (ts.tv_sec + ts.tv_nsec / 1e9);
                timeout = left <= 0 ? 0 : left > INT_MAX / 1000 ? INT_MAX : (int)(left * 1000) + 1;
            }
        }
        int r = poll(p, (nfds_t)n, timeout);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "poll failed: %s", strerror(errno));
            return -1;
        }
        if (r > 0 && p[0].revents)
            return 0;
        if (env_check(env, err) < 0)
            return -1;
        if (r == 0) {
            env_fail(env, err, SBX_ERROR_TIMEOUT, "the call's deadline passed");
            return -1;
        }
    }
}

/* ---------------------------------------------------------------- paths */

/* Whether openat2() works here: 0 not known yet, 1 yes, -1 no. */
static int openat2_state;

/*
 * openat2(RESOLVE_BENEATH) when the kernel has it. Returns 1 when it
 * answered (*@fd set, errno on failure), 0 when the caller must walk.
 */
static int
try_openat2(int base, const char *path, unsigned how, int flags, mode_t mode, int *fd)
{
#if defined(HAVE_OPENAT2_H) && defined(SYS_openat2)
    struct open_how oh;

    if (__atomic_load_n(&openat2_state, __ATOMIC_RELAXED) < 0)
        return 0;
    memset(&oh, 0, sizeof(oh));
    oh.flags = (uint64_t)(flags | O_CLOEXEC);
    oh.mode = (flags & O_CREAT) ? mode : 0;
    oh.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
                 ((how & SBX_BENEATH_NO_SYMLINKS) ? RESOLVE_NO_SYMLINKS : 0);
    for (int tries = 0; tries < 8; tries++) {
        long r = syscall(SYS_openat2, base, path, &oh, sizeof(oh));

        if (r >= 0) {
            __atomic_store_n(&openat2_state, 1, __ATOMIC_RELAXED);
            *fd = (int)r;
            return 1;
        }
        if (errno == EAGAIN || errno == EINTR)
            continue;           /* a rename raced the lookup: try again */
        if (errno == ENOSYS || errno == E2BIG || errno == EPERM) {
            /* No openat2 here (or a filter refuses it): walk instead. */
            __atomic_store_n(&openat2_state, -1, __ATOMIC_RELAXED);
            return 0;
        }
        if (errno == EINVAL)
            return 0;
        *fd = -1;
        return 1;
    }
    return 0;
#else
    (void)base; (void)path; (void)how; (void)flags; (void)mode; (void)fd;
    return 0;
#endif
}

void
sbx_fs_use_openat2(int on)
{
    __atomic_store_n(&openat2_state, on ? 0 : -1, __ATOMIC_RELAXED);
}

/* Leading slashes off; "" for the base itself. */
static const char *
rel_of(const char *path)
{
    while (*path == '/')
        path++;
    return path;
}

/*
 * The component walk. Resolves @path beneath @base: every component but
 * the last, and the last too when it is "." or ".." or (with
 * @follow_last) a symlink. Returns a new descriptor of the directory
 * reached and stores the last component in *@last (NULL when the path
 * names that directory itself); -1 with errno set on failure.
 */
static int
walk(int base, const char *path, unsigned how, int follow_last, char **last)
{
    size_t n = 0, cap = 16;
    int *fds = malloc(cap * sizeof(*fds));
    char *rest = strdup(path), *p, *link = NULL;
    int links = 0, saved, result = -1;

    *last = NULL;
    if (!fds || !rest) {
        errno = ENOMEM;
        goto out;
    }
    if ((fds[0] = openat(base, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        goto out;
    n = 1;
    p = rest;
    for (;;) {
        char *c, *slash;
        const char *q;
        struct stat st;
        int is_last, fd;

        while (*p == '/')
            p++;
        if (!*p)
            break;              /* the path names the current directory */
        c = p;
        slash = strchr(p, '/');
        if (slash) {
            *slash = '\0';
            p = slash + 1;
        } else {
            p = c + strlen(c);
        }
        for (q = p; *q == '/'; q++)
            ;
        is_last = !*q;
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0) {
            if (n == 1) {
                errno = EXDEV;
                goto out;
            }
            close(fds[--n]);
            continue;
        }
        if (is_last && !follow_last) {
            *last = strdup(c);
            if (!*last) {
                errno = ENOMEM;
                goto out;
            }
            break;
        }
        if (fstatat(fds[n - 1], c, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                goto out;
            if (is_last) {
                if (!(*last = strdup(c))) {
                    errno = ENOMEM;
                    goto out;
                }
                break;
            }
            if (!(how & SBX_BENEATH_CREATE_DIRS))
                goto out;
            if (mkdirat(fds[n - 1], c, 0755) < 0 && errno != EEXIST)
                goto out;
            if (fstatat(fds[n - 1], c, &st, AT_SYMLINK_NOFOLLOW) < 0)
                goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t len;

            if ((how & SBX_BENEATH_NO_SYMLINKS) || ++links > MAX_SYMLINKS) {
                errno = ELOOP;
                goto out;
            }
            len = readlinkat(fds[n - 1], c, target, sizeof(target) - 1);
            if (len < 0)
                goto out;
            target[len] = '\0';
            if (target[0] == '/') {
                errno = EXDEV;  /* absolute: outside whatever the base is */
                goto out;
            }
            /* Go on with TARGET/REST. */
            size_t rl = strlen(p);
            link = malloc((size_t)len + rl + 2);
            if (!link) {
                errno = ENOMEM;
                goto out;
            }
            memcpy(link, target, (size_t)len);
            link[len] = '/';
            memcpy(link + len + 1, p, rl + 1);
            free(rest);
            rest = link;
            link = NULL;
            p = rest;
            continue;
        }
        if (is_last) {
            if (!(*last = strdup(c))) {
                errno = ENOMEM;
                goto out;
            }
            break;
        }
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            goto out;
        }
        fd = openat(fds[n - 1], c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            goto out;
        if (n == cap) {
            int *grown = realloc(fds, cap * 2 * sizeof(*fds));

            if (!grown) {
                close(fd);
                errno = ENOMEM;
                goto out;
            }
            fds = grown;
            cap *= 2;
        }
        fds[n++] = fd;
    }
    result = fds[--n];
out:
    saved = errno;
    if (result < 0) {
        free(*last);
        *last = NULL;
    }
    while (n > 0)
        close(fds[--n]);
    free(fds);
    free(rest);
    free(link);
    errno = saved;
    return result;
}

int
sbx_fs_open_beneath(int base, const char *path, unsigned how, int flags, mode_t mode)
{
    const char *rel = rel_of(path ? path : "");
    char *last = NULL;
    int fd, dfd, saved;

    if (!*rel)
        rel = ".";
    if (try_openat2(base, rel, how, flags, mode, &fd)) {
        if (fd >= 0 || errno != ENOENT || !(how & SBX_BENEATH_CREATE_DIRS))
            return fd;
    }
    dfd = walk(base, rel, how, !(flags & O_NOFOLLOW), &last);
    if (dfd < 0)
        return -1;
    if (!last) {
        if (flags & (O_CREAT | O_TRUNC | O_WRONLY | O_RDWR)) {
            close(dfd);
            errno = EISDIR;
            return -1;
        }
        fd = openat(dfd, ".", flags | O_CLOEXEC);
    } else {
        if ((how & SBX_BENEATH_CREATE_DIRS) && (flags & O_DIRECTORY) &&
            mkdirat(dfd, last, 0755) < 0 && errno != EEXIST) {
            saved = errno;
            close(dfd);
            free(last);
            errno = saved;
            return -1;
        }
        fd = openat(dfd, last, flags | O_NOFOLLOW | O_CLOEXEC, mode);
    }
    saved = errno;
    close(dfd);
    free(last);
    errno = saved;
    return fd;
}

int
sbx_fs_parent_beneath(int base, const char *path, unsigned how, char **last)
{
    const char *rel = rel_of(path ? path : "");
    size_t len = strlen(rel);
    int fd;

    *last = NULL;
    while (len > 0 && rel[len - 1] == '/')
        len--;
    if (len > 0) {
        const char *name = rel;
        char *parent;

        for (size_t i = 0; i < len; i++)
            if (rel[i] == '/')
                name = rel + i + 1;
        size_t nlen = len - (size_t)(name - rel);
        if (!(nlen == 1 && name[0] == '.') && !(nlen == 2 && name[0] == '.' && name[1] == '.')) {
            parent = (name == rel) ? strdup(".") : strndup(rel, (size_t)(name - rel));
            if (!parent) {
                errno = ENOMEM;
                return -1;
            }
            if (try_openat2(base, parent, how, O_RDONLY | O_DIRECTORY, 0, &fd)) {
                int saved = errno;

                free(parent);
                if (fd >= 0) {
                    if (!(*last = strndup(name, nlen))) {
                        close(fd);
                        errno = ENOMEM;
                        return -1;
                    }
                    return fd;
                }
                if (saved != ENOENT || !(how & SBX_BENEATH_CREATE_DIRS)) {
                    errno = saved;
                    return -1;
                }
            } else {
                free(parent);
            }
        }
    }
    return walk(base, rel, how, 0, last);
}

/* ---------------------------------------------------------------- SIGPIPE */

/*
 * Writes to a pipe or socket whose reader is gone raise SIGPIPE, which
 * would kill an application that did not ignore it; the library installs
 * no handler. While writing, SIGPIPE is blocked in the calling thread, and
 * one that this thread raised is taken off afterwards (the write itself
 * reports EPIPE).
 */
typedef struct pipe_guard {
    sigset_t old;
    int was_pending;
    int active;
} pipe_guard;

static void
guard_begin(pipe_guard *g)
{
    sigset_t block, pending;

    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    sigemptyset(&pending);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE) == 1;
    g->active = pthread_sigmask(SIG_BLOCK, &block, &g->old) == 0 &&
                sigismember(&g->old, SIGPIPE) != 1;
}

static void
guard_end(pipe_guard *g)
{
    sigset_t pending, only;
    struct timespec zero = { 0, 0 };

    if (!g->active)
        return;
    sigemptyset(&pending);
    if (!g->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
        sigemptyset(&only);
        sigaddset(&only, SIGPIPE);
        while (sigtimedwait(&only, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---------------------------------------------------------------- copy */

/* Writes all of @buf to @fd (which may be non-blocking). */
static int
write_all(const sbx_fs_env *env, int fd, const char *buf, size_t len, const char *what,
          sbx_error **err)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);

        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (env_wait(env, fd, POLLOUT, err) < 0)
                return -1;
        } else {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot write %s: %s", what,
                     n < 0 ? strerror(errno) : "no progress");
            return -1;
        }
    }
    return 0;
}

static int64_t
copy_fd(const sbx_fs_env *env, int in_fd, int out_fd, const char *what, sbx_error **err);

int64_t
sbx_fs_copy_fd(const sbx_fs_env *env, int in_fd, int out_fd, const char *what, sbx_error **err)
{
    pipe_guard g;
    int64_t n;

    guard_begin(&g);
    n = copy_fd(env, in_fd, out_fd, what, err);
    guard_end(&g);
    return n;
}

static int64_t
copy_fd(const sbx_fs_env *env, int in_fd, int out_fd, const char *what, sbx_error **err)
{
    struct stat ist, ost;
    int mode;                   /* 0 copy_file_range, 1 sendfile, 2 read/write */
    int64_t total = 0;
    char *buf = NULL;

    if (fstat(in_fd, &ist) < 0 || fstat(out_fd, &ost) < 0) {
        env_fail(env, err, SBX_ERROR_INVALID_ARGUMENT, "bad descriptor for %s: %s", what,
                 strerror(errno));
        return -1;
    }
    mode = S_ISREG(ist.st_mode) ? (S_ISREG(ost.st_mode) ? 0 : 1) : 2;
    for (;;) {
        ssize_t n;

        if (env_check(env, err) < 0)
            goto fail;
        if (mode == 0) {
            n = copy_file_range(in_fd, NULL, out_fd, NULL, COPY_CHUNK, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                mode = 1;       /* EXDEV, EINVAL, EOPNOTSUPP, ...: plainer ways */
                continue;
            }
        } else if (mode == 1) {
            n = sendfile(out_fd, in_fd, NULL, COPY_CHUNK);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if (env_wait(env, out_fd, POLLOUT, err) < 0)
                    goto fail;
                continue;
            }
            if (n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
                mode = 2;
                continue;
            }
            if (n < 0) {
                env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot copy %s: %s", what,
                         strerror(errno));
                goto fail;
            }
        } else {
            if (!buf && !(buf = malloc(RW_BUF))) {
                env_fail(env, err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
                goto fail;
            }
            n = read(in_fd, buf, RW_BUF);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if (env_wait(env, in_fd, POLLIN, err) < 0)
                    goto fail;
                continue;
            }
            if (n < 0) {
                env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot read %s: %s", what,
                         strerror(errno));
                goto fail;
            }
            if (n > 0 && write_all(env, out_fd, buf, (size_t)n, what, err) < 0)
                goto fail;
        }
        if (n == 0)
            break;
        total += n;
    }
    free(buf);
    return total;
fail:
    free(buf);
    return -1;
}

/* ---------------------------------------------------------------- trees */

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
names_free(char **names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

/* The names in directory @fd (not "." and ".."), sorted; @fd stays open.
 * Returns 0 or -1 with errno set. */
static int
list_names(int fd, char ***names, size_t *count)
{
    int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d;
    struct dirent *de;
    size_t n = 0, cap = 0;
    char **v = NULL;
    int saved;

    *names = NULL;
    *count = 0;
    if (dfd < 0)
        return -1;
    if (!(d = fdopendir(dfd))) {
        saved = errno;
        close(dfd);
        errno = saved;
        return -1;
    }
    errno = 0;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **grown = realloc(v, ncap * sizeof(*v));

            if (!grown)
                goto oom;
            v = grown;
            cap = ncap;
        }
        if (!(v[n] = strdup(de->d_name)))
            goto oom;
        n++;
        errno = 0;
    }
    if (errno) {
        saved = errno;
        closedir(d);
        names_free(v, n);
        errno = saved;
        return -1;
    }
    closedir(d);
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_names);
    *names = v;
    *count = n;
    return 0;
oom:
    closedir(d);
    names_free(v, n);
    errno = ENOMEM;
    return -1;
}

/* "@a/@b" (or @b when @a is ""), in a new string; NULL with ENAMETOOLONG
 * when it reaches PATH_MAX. */
static char *
rel_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s;

    if (la + lb + 2 > PATH_MAX) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    if (!(s = malloc(la + lb + 2))) {
        errno = ENOMEM;
        return NULL;
    }
    if (la) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    } else {
        memcpy(s, b, lb + 1);
    }
    return s;
}

/* Opens directory @rel beneath @base, never through a symlink. */
static int
open_dir_rel(int base, const char *rel)
{
    return sbx_fs_open_beneath(base, rel, SBX_BENEATH_NO_SYMLINKS,
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
}

/* Removes @rel beneath @base and everything under it, never following a
 * symlink. Directories without write or search permission are opened up
 * first. Returns 0 or -1 with errno set. */
static int
rm_rel(int base, const char *rel)
{
    char *last = NULL, **names = NULL;
    size_t count = 0;
    struct stat st;
    int pfd, fd, rc = -1, saved = 0;

    pfd = sbx_fs_parent_beneath(base, rel, SBX_BENEATH_NO_SYMLINKS, &last);
    if (pfd < 0)
        return -1;
    if (!last) {
        close(pfd);
        errno = EINVAL;
        return -1;
    }
    if (fstatat(pfd, last, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        rc = errno == ENOENT ? 0 : -1;
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = unlinkat(pfd, last, 0);
        goto out;
    }
    if ((st.st_mode & 0700) != 0700)
        fchmodat(pfd, last, (st.st_mode & 07777) | 0700, 0);
    fd = openat(pfd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        goto out;
    if (list_names(fd, &names, &count) < 0) {
        saved = errno;
        close(fd);
        errno = saved;
        goto out;
    }
    /* Files now; directories after this one is closed (bounded fds). */
    for (size_t i = 0; i < count; i++) {
        if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
            continue;
        if (unlinkat(fd, names[i], 0) < 0 && errno != ENOENT)
            saved = errno;
        free(names[i]);
        names[i] = NULL;
    }
    close(fd);
    for (size_t i = 0; i < count; i++) {
        char *child;

        if (!names[i])
            continue;
        if (!(child = rel_join(rel_of(rel), names[i])) || rm_rel(base, child) < 0)
            saved = errno;
        free(child);
    }
    if (unlinkat(pfd, last, AT_REMOVEDIR) < 0 && errno != ENOENT)
        saved = saved ? saved : errno;
    rc = saved ? -1 : 0;
    if (saved)
        errno = saved;
out:
    saved = errno;
    names_free(names, count);
    free(last);
    close(pfd);
    errno = saved;
    return rc;
}

/* ---------------------------------------------------------------- writer */

typedef struct tw_frame {
    char **names;
    size_t count;
    size_t next;
    size_t dir_len;             /* length of the directory's path in rel */
} tw_frame;

static int64_t
write_tree(const sbx_fs_env *env, int dir_fd, int out_fd, sbx_error **err);

#ifdef SBX_ARCHIVE_TEST_HOOKS
void (*sbx_tar_test_before_open)(int dir_fd, const char *name);
#endif

int64_t
sbx_tar_write_tree(const sbx_fs_env *env, int dir_fd, int out_fd, sbx_error **err)
{
    pipe_guard g;
    int64_t n;

    guard_begin(&g);
    n = write_tree(env, dir_fd, out_fd, err);
    guard_end(&g);
    return n;
}

static int64_t
write_tree(const sbx_fs_env *env, int dir_fd, int out_fd, sbx_error **err)
{
    struct archive *a = archive_write_new();
    struct archive_entry *e = archive_entry_new();
    tw_frame *frames = NULL;
    size_t nframes = 0, cap = 0, cur_frame = (size_t)-1;
    char *rel = malloc(PATH_MAX), *buf = malloc(DATA_BUF);
    int cur_fd = -1, ffd = -1;
    int64_t count = 0;

    if (!a || !e || !rel || !buf) {
        env_fail(env, err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
        goto fail;
    }
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_options(a, "hdrcharset=BINARY") != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(a, (int)TAR_BLOCK) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open_fd(a, out_fd) != ARCHIVE_OK) {
        env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot start the tar stream: %s",
                 archive_error_string(a) ? archive_error_string(a) : "unknown error");
        goto fail;
    }
    rel[0] = '\0';
    frames = malloc(16 * sizeof(*frames));
    if (!frames) {
        env_fail(env, err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
        goto fail;
    }
    cap = 16;
    if (list_names(dir_fd, &frames[0].names, &frames[0].count) < 0) {
        env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot list the directory: %s", strerror(errno));
        goto fail;
    }
    frames[0].next = 0;
    frames[0].dir_len = 0;
    nframes = 1;

    while (nframes > 0) {
        tw_frame *f = &frames[nframes - 1];
        const char *name;
        struct stat st;
        size_t nlen, elen;

        if (f->next == f->count) {
            names_free(f->names, f->count);
            if (cur_frame == nframes - 1) {
                close(cur_fd);
                cur_fd = -1;
                cur_frame = (size_t)-1;
            }
            nframes--;
            continue;
        }
        name = f->names[f->next++];
        nlen = strlen(name);
        elen = f->dir_len + (f->dir_len ? 1 : 0) + nlen;
        if (elen >= PATH_MAX) {
            rel[f->dir_len] = '\0';
            sbx_error *x = env_fail(env, err, SBX_ERROR_INVALID_ARGUMENT,
                                    "path too long under \"%s\": \"%s\"", rel, name);
            env_context(env, x, "entry", name);
            goto fail;
        }
        if (cur_frame != nframes - 1) {
            if (cur_fd >= 0)
                close(cur_fd);
            rel[f->dir_len] = '\0';
            cur_fd = open_dir_rel(dir_fd, rel);
            if (cur_fd < 0) {
                sbx_error *x = env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot open \"%s\": %s",
                                        rel, strerror(errno));
                env_context(env, x, "entry", rel);
                goto fail;
            }
            cur_frame = nframes - 1;
        }
        if (f->dir_len)
            rel[f->dir_len] = '/';
        memcpy(rel + elen - nlen, name, nlen + 1);

        if (env_check(env, err) < 0)
            goto fail;
        if (fstatat(cur_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;       /* vanished meanwhile */
            sbx_error *x = env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot stat \"%s\": %s",
                                    rel, strerror(errno));
            env_context(env, x, "entry", rel);
            goto fail;
        }
        if (S_ISREG(st.st_mode)) {
            struct stat ost;

#ifdef SBX_ARCHIVE_TEST_HOOKS
            if (sbx_tar_test_before_open)
                sbx_tar_test_before_open(cur_fd, name);
#endif
            /* What was stat'ed may be swapped meanwhile (the tree may be
             * a sandbox's, changing under us): O_NONBLOCK so that a fifo
             * put in its place cannot hang the open, O_NOFOLLOW so that
             * a symlink is not followed, then the opened object must be
             * the regular file that was stat'ed. Anything else is skipped
             * as the special files are. */
            ffd = openat(cur_fd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
            if (ffd < 0 && (errno == ENOENT || errno == ELOOP || errno == ENXIO))
                continue;       /* vanished, or swapped for a symlink or socket */
            if (ffd < 0 || fstat(ffd, &ost) < 0) {
                sbx_error *x = env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot open \"%s\": %s",
                                        rel, strerror(errno));
                env_context(env, x, "entry", rel);
                goto fail;
            }
            if (!S_ISREG(ost.st_mode) || ost.st_dev != st.st_dev || ost.st_ino != st.st_ino) {
                close(ffd);
                ffd = -1;
                continue;       /* swapped between the stat and the open */
            }
            st = ost;
        } else if (!S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
            continue;           /* socket, fifo, device: not carried */
        }

        archive_entry_clear(e);
        archive_entry_set_pathname(e, rel);
        archive_entry_set_perm(e, st.st_mode & 0777);
        archive_entry_set_mtime(e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        if (S_ISDIR(st.st_mode)) {
            archive_entry_set_filetype(e, AE_IFDIR);
            archive_entry_set_size(e, 0);
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t tl = readlinkat(cur_fd, name, target, sizeof(target) - 1);

            if (tl < 0) {
                sbx_error *x = env_fail(env, err, SBX_ERROR_WORKSPACE,
                                        "cannot read symlink \"%s\": %s", rel, strerror(errno));
                env_context(env, x, "entry", rel);
                goto fail;
            }
            target[tl] = '\0';
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_symlink(e, target);
            archive_entry_set_size(e, 0);
        } else {
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_size(e, st.st_size);
        }
        if (archive_write_header(a, e) < ARCHIVE_WARN) {
            sbx_error *x = env_fail(env, err, SBX_ERROR_WORKSPACE,
                                    "cannot write the tar entry \"%s\": %s", rel,
                                    archive_error_string(a));
            env_context(env, x, "entry", rel);
            goto fail;
        }
        if (ffd >= 0) {
            int64_t left = st.st_size;

            while (left > 0) {
                size_t want = left < (int64_t)DATA_BUF ? (size_t)left : DATA_BUF;
                ssize_t n = read(ffd, buf, want);

                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0) {
                    sbx_error *x = env_fail(env, err, SBX_ERROR_WORKSPACE,
                                            "cannot read \"%s\": %s", rel, strerror(errno));
                    env_context(env, x, "entry", rel);
                    goto fail;
                }
                if (n == 0)
                    break;      /* shrank meanwhile: libarchive pads with zeros */
                if (archive_write_data(a, buf, (size_t)n) < 0) {
                    env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot write the tar stream: %s",
                             archive_error_string(a));
                    goto fail;
                }
                left -= n;
                if (env_check(env, err) < 0)
                    goto fail;
            }
            close(ffd);
            ffd = -1;
        }
        if (archive_write_finish_entry(a) < ARCHIVE_WARN) {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot write the tar stream: %s",
                     archive_error_string(a));
            goto fail;
        }
        count++;

        if (S_ISDIR(st.st_mode)) {
            int cfd = openat(cur_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            tw_frame child = { 0 };

            if (cfd < 0 || list_names(cfd, &child.names, &child.count) < 0) {
                sbx_error *x = env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot list \"%s\": %s",
                                        rel, strerror(errno));
                env_context(env, x, "entry", rel);
                if (cfd >= 0)
                    close(cfd);
                goto fail;
            }
            close(cfd);
            if (child.count == 0) {
                free(child.names);
                continue;
            }
            if (nframes == cap) {
                tw_frame *grown = realloc(frames, cap * 2 * sizeof(*frames));

                if (!grown) {
                    names_free(child.names, child.count);
                    env_fail(env, err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
                    goto fail;
                }
                frames = grown;
                cap *= 2;
            }
            child.dir_len = elen;
            frames[nframes++] = child;
        }
    }
    if (archive_write_close(a) != ARCHIVE_OK) {
        env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot finish the tar stream: %s",
                 archive_error_string(a));
        goto fail;
    }
    archive_write_free(a);
    archive_entry_free(e);
    free(frames);
    free(rel);
    free(buf);
    return count;

fail:
    while (nframes > 0) {
        nframes--;
        names_free(frames[nframes].names, frames[nframes].count);
    }
    if (ffd >= 0)
        close(ffd);
    if (cur_fd >= 0)
        close(cur_fd);
    if (a)
        archive_write_free(a);      /* closes without flushing more than it must */
    archive_entry_free(e);
    free(frames);
    free(rel);
    free(buf);
    return -1;
}

/* ---------------------------------------------------------------- extractor */

/* A directory whose mode lacks u+rwx: set last, once all is in place. */
typedef struct fixup {
    struct fixup *next;
    mode_t mode;
    char rel[];
} fixup;

typedef struct ex_state {
    const sbx_fs_env *env;
    sbx_error **err;
    int sfd;                    /* staging directory */
    char *pc_rel;               /* parent cache: relative path ... */
    int pc_fd;                  /* ... and its descriptor */
    fixup *fixups;
    int have_root_mode;
    mode_t root_mode;
    mode_t umask;               /* taken off every mode */
    sbx_tar_policy pol;         /* the caller's, its zeros made defaults */
    int64_t entries;            /* entries read, the root not counted */
    int64_t total;              /* bytes of the files so far */
} ex_state;

/* This process's umask, read without changing it (umask(2) cannot read
 * without setting, which would race other threads); 022 when /proc cannot
 * tell. */
static mode_t
current_umask(void)
{
    char line[128];
    mode_t m = 022;
    FILE *f = fopen("/proc/self/status", "re");

    if (!f)
        return m;
    while (fgets(line, sizeof(line), f)) {
        unsigned v;

        if (sscanf(line, "Umask: %o", &v) == 1) {
            m = (mode_t)(v & 0777);
            break;
        }
    }
    fclose(f);
    return m;
}

/* A workspace error naming @entry. */
static void
refuse(ex_state *st, const char *entry, const char *why)
{
    sbx_error *e = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                            "unsafe archive entry \"%s\" refused: %s", entry ? entry : "", why);

    env_context(st->env, e, "entry", entry ? entry : "");
}

/* A note about @entry for the caller (a skipped symlink). */
static void
note(ex_state *st, const char *entry, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
note(ex_state *st, const char *entry, const char *fmt, ...)
{
    char msg[PATH_MAX + 256];
    va_list ap;

    if (!st->pol.note)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    st->pol.note(entry, msg, st->pol.note_data);
}

/* A workspace error naming @entry and the bound it passed. */
static void
refuse_limit(ex_state *st, const char *entry, const char *what, long long value,
             const char *limit_name, long long limit)
{
    char msg[256];

    snprintf(msg, sizeof(msg), "%s %lld is over the limit of %lld (%s)", what, value, limit,
             limit_name);
    refuse(st, entry, msg);
}

/* A symlink @path -> @target that check_symlink() found leaving the
 * destination (@why): 1 to make it, 0 to leave it out, -1 refused. */
static int
outside_symlink(ex_state *st, const char *raw, const char *target, const char *why)
{
    if (!target || !*target || st->pol.outside_symlinks == SBX_TAR_SYMLINKS_REFUSE) {
        refuse(st, raw, why);
        return -1;
    }
    if (st->pol.outside_symlinks == SBX_TAR_SYMLINKS_SKIP) {
        note(st, raw, "symlink \"%s\" -> \"%s\" skipped: %s", raw, target, why);
        return 0;
    }
    return 1;
}

/*
 * Normalises an entry name into @out ("a/b/c": no empty, "." or trailing
 * components). Returns NULL, or why the name is refused.
 */
static const char *
normalize_name(const char *raw, char *out, size_t outsz)
{
    size_t o = 0;
    const char *p;

    if (!raw || !*raw)
        return "empty name";
    if (raw[0] == '/')
        return "absolute path";
    for (p = raw; *p;) {
        const char *c = p;
        size_t len;

        while (*p && *p != '/')
            p++;
        len = (size_t)(p - c);
        while (*p == '/')
            p++;
        if (len == 0 || (len == 1 && c[0] == '.'))
            continue;
        if (len == 2 && c[0] == '.' && c[1] == '.')
            return "\"..\" component leaves the destination";
        if (o + (o ? 1 : 0) + len + 1 > outsz)
            return "name too long";
        if (o)
            out[o++] = '/';
        memcpy(out + o, c, len);
        o += len;
    }
    out[o] = '\0';
    return NULL;
}

/*
 * Checks the target of a symlink at @path (normalised): relative, leading
 * ".." at most as deep as the link, and no ".." after a name (which could
 * climb out through another symlink). Returns NULL or why not.
 */
static const char *
check_symlink(const char *path, const char *target)
{
    size_t depth = 0, ups = 0;
    int seen_name = 0;
    const char *p;

    if (!target || !*target)
        return "empty symlink target";
    if (target[0] == '/')
        return "symlink target is an absolute path (outside the destination)";
    for (p = path; *p; p++)
        if (*p == '/')
            depth++;
    for (p = target; *p;) {
        const char *c = p;
        size_t len;

        while (*p && *p != '/')
            p++;
        len = (size_t)(p - c);
        while (*p == '/')
            p++;
        if (len == 0 || (len == 1 && c[0] == '.'))
            continue;
        if (len == 2 && c[0] == '.' && c[1] == '.') {
            if (seen_name)
                return "symlink target has \"..\" after a name";
            if (++ups > depth)
                return "symlink target leaves the destination";
        } else {
            seen_name = 1;
        }
    }
    return NULL;
}

/* The descriptor of the parent directory of entry @path (normalised, not
 * empty) in staging, made when missing; *@name points at the last
 * component. -1 with the error set. */
static int
ex_parent(ex_state *st, const char *raw, const char *path, const char **name)
{
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path) : 0;
    int fd;

    *name = slash ? slash + 1 : path;
    if (st->pc_rel && strlen(st->pc_rel) == plen && memcmp(st->pc_rel, path, plen) == 0)
        return st->pc_fd;
    if (st->pc_fd >= 0)
        close(st->pc_fd);
    free(st->pc_rel);
    st->pc_fd = -1;
    st->pc_rel = strndup(path, plen);
    if (!st->pc_rel) {
        env_fail(st->env, st->err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    fd = plen ? sbx_fs_open_beneath(st->sfd, st->pc_rel,
                                    SBX_BENEATH_NO_SYMLINKS | SBX_BENEATH_CREATE_DIRS,
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0)
              : openat(st->sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;

        free(st->pc_rel);
        st->pc_rel = NULL;
        if (e == ELOOP)
            refuse(st, raw, "it would be written through a symlink");
        else if (e == ENOTDIR || e == EEXIST)
            refuse(st, raw, "a parent is not a directory");
        else
            env_fail(st->env, st->err, SBX_ERROR_WORKSPACE, "cannot create the parent of \"%s\": %s",
                     raw, strerror(e));
        return -1;
    }
    st->pc_fd = fd;
    return fd;
}

/* Clears the place of a new non-directory entry @name in @pfd: an earlier
 * file or symlink is removed, an empty directory too; a directory with
 * content is refused. */
static int
ex_make_room(ex_state *st, int pfd, const char *name, const char *raw)
{
    struct stat sb;

    if (fstatat(pfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;
    if (S_ISDIR(sb.st_mode)) {
        if (unlinkat(pfd, name, AT_REMOVEDIR) == 0)
            return 0;
        refuse(st, raw, "it replaces a directory of the archive");
        return -1;
    }
    if (unlinkat(pfd, name, 0) < 0) {
        env_fail(st->env, st->err, SBX_ERROR_WORKSPACE, "cannot replace \"%s\": %s", raw,
                 strerror(errno));
        return -1;
    }
    /* The cache may hold a directory of this name no more. */
    return 0;
}

static int
is_zero(const char *p, size_t n)
{
    static const char zero[4096];

    while (n >= sizeof(zero)) {
        if (memcmp(p, zero, sizeof(zero)) != 0)
            return 0;
        p += sizeof(zero);
        n -= sizeof(zero);
    }
    return memcmp(p, zero, n) == 0;
}

/* Writes the data of the current entry to the new file @fd: blocks of
 * zeros become holes. */
static int
ex_data(ex_state *st, struct archive *a, int fd, const char *raw, int64_t size)
{
    int64_t end = 0;
    struct stat sb;

    for (;;) {
        const void *block;
        size_t len;
        la_int64_t off;
        int r = archive_read_data_block(a, &block, &len, &off);

        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            sbx_error *e = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                                    "broken archive in entry \"%s\": %s", raw,
                                    archive_error_string(a));
            env_context(st->env, e, "entry", raw);
            return -1;
        }
        if (len > 0 && !is_zero(block, len)) {
            const char *p = block;
            size_t left = len;
            off_t at = off;

            while (left > 0) {
                ssize_t n = pwrite(fd, p, left, at);

                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    sbx_error *e = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                                            "cannot write \"%s\": %s", raw,
                                            n < 0 ? strerror(errno) : "no progress");
                    env_context(st->env, e, "entry", raw);
                    return -1;
                }
                p += n;
                at += n;
                left -= (size_t)n;
            }
        }
        if (off + (int64_t)len > end)
            end = off + (int64_t)len;
        if (end > st->pol.max_entry_bytes) {
            refuse_limit(st, raw, "its size in bytes", (long long)end, "max_entry_bytes",
                         (long long)st->pol.max_entry_bytes);
            return -1;
        }
        if (env_check(st->env, st->err) < 0)
            return -1;
    }
    if (end > size) {
        /* More data than the header said: it counts towards the total. */
        if (end - size > st->pol.max_total_bytes - st->total) {
            refuse_limit(st, raw, "the size of the files so far in bytes",
                         (long long)(st->total + (end - size)), "max_total_bytes",
                         (long long)st->pol.max_total_bytes);
            return -1;
        }
        st->total += end - size;
    }
    if (size > end)
        end = size;
    if (fstat(fd, &sb) == 0 && sb.st_size != end && ftruncate(fd, end) < 0) {
        env_fail(st->env, st->err, SBX_ERROR_WORKSPACE, "cannot size \"%s\": %s", raw,
                 strerror(errno));
        return -1;
    }
    return 0;
}

/* One entry, checked, then made in staging. Returns 1 when it counts, 0
 * for the root entry, -1 on refusal or error. */
static int
ex_entry(ex_state *st, struct archive *a, struct archive_entry *e)
{
    const char *raw = archive_entry_pathname(e), *hl = archive_entry_hardlink(e);
    const char *why, *name;
    char path[PATH_MAX], tpath[PATH_MAX];
    mode_t type = archive_entry_filetype(e);
    mode_t perm = archive_entry_perm(e) & 0777 & ~st->umask;
    int pfd, fd, k;

    if (!raw)
        raw = archive_entry_pathname_utf8(e);
    if ((why = normalize_name(raw, path, sizeof(path)))) {
        refuse(st, raw, why);
        return -1;
    }
    if (*path && ++st->entries > st->pol.max_entries) {
        refuse_limit(st, raw, "the number of entries", (long long)st->entries, "max_entries",
                     (long long)st->pol.max_entries);
        return -1;
    }
    if (!*path) {
        /* The root ("." or "./"): only its mode matters. */
        if (hl || type != AE_IFDIR) {
            refuse(st, raw, "the root entry is not a directory");
            return -1;
        }
        st->have_root_mode = 1;
        st->root_mode = perm;       /* the umask already off */
        return 0;
    }
    if (hl) {
        char *tlast = NULL;
        struct stat sb;
        int tfd;

        if ((why = normalize_name(hl, tpath, sizeof(tpath))) || !*tpath) {
            char msg[PATH_MAX + 64];

            snprintf(msg, sizeof(msg), "hard link to \"%s\" (%s)", hl,
                     why ? why : "the destination itself");
            refuse(st, raw, msg);
            return -1;
        }
        tfd = sbx_fs_parent_beneath(st->sfd, tpath, SBX_BENEATH_NO_SYMLINKS, &tlast);
        if (tfd < 0 || !tlast || fstatat(tfd, tlast, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
            S_ISDIR(sb.st_mode)) {
            char msg[PATH_MAX + 64];

            snprintf(msg, sizeof(msg), "hard link to \"%s\", which is not an earlier file "
                     "of the archive", hl);
            if (tfd >= 0)
                close(tfd);
            free(tlast);
            refuse(st, raw, msg);
            return -1;
        }
        if (S_ISLNK(sb.st_mode)) {
            /* A link to a symlink is that symlink at another depth: its
             * target must hold from there too. */
            char target[PATH_MAX];
            ssize_t tl = readlinkat(tfd, tlast, target, sizeof(target) - 1);

            if (tl < 0) {
                close(tfd);
                free(tlast);
                refuse(st, raw, "unreadable symlink");
                return -1;
            }
            target[tl] = '\0';
            if ((why = check_symlink(path, target)) &&
                (k = outside_symlink(st, raw, target, why)) <= 0) {
                close(tfd);
                free(tlast);
                return k;
            }
        }
        if ((pfd = ex_parent(st, raw, path, &name)) < 0 ||
            ex_make_room(st, pfd, name, raw) < 0) {
            close(tfd);
            free(tlast);
            return -1;
        }
        if (linkat(tfd, tlast, pfd, name, 0) < 0) {
            sbx_error *x = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                                    "cannot link \"%s\": %s", raw, strerror(errno));
            env_context(st->env, x, "entry", raw);
            close(tfd);
            free(tlast);
            return -1;
        }
        close(tfd);
        free(tlast);
        return 1;
    }

    switch (type) {
    case AE_IFREG: {
        /* The apparent size: a sparse entry counts whole. */
        int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;

        if (size < 0)
            size = 0;
        if (size > st->pol.max_entry_bytes) {
            refuse_limit(st, raw, "its size in bytes", (long long)size, "max_entry_bytes",
                         (long long)st->pol.max_entry_bytes);
            return -1;
        }
        if (size > st->pol.max_total_bytes - st->total) {
            refuse_limit(st, raw, "the size of the files so far in bytes",
                         (long long)(st->total + size), "max_total_bytes",
                         (long long)st->pol.max_total_bytes);
            return -1;
        }
        st->total += size;
        break;
    }
    case AE_IFDIR:
        break;
    case AE_IFLNK:
        if ((why = check_symlink(path, archive_entry_symlink(e))) &&
            (k = outside_symlink(st, raw, archive_entry_symlink(e), why)) <= 0)
            return k;
        break;
    case AE_IFCHR:
    case AE_IFBLK:
        refuse(st, raw, "device files are not extracted");
        return -1;
    case AE_IFIFO:
        refuse(st, raw, "fifos are not extracted");
        return -1;
    default:
        refuse(st, raw, "unsupported entry type");
        return -1;
    }

    if ((pfd = ex_parent(st, raw, path, &name)) < 0)
        return -1;

    if (type == AE_IFDIR) {
        struct stat sb;

        if (fstatat(pfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(sb.st_mode) &&
            unlinkat(pfd, name, 0) < 0) {
            env_fail(st->env, st->err, SBX_ERROR_WORKSPACE, "cannot replace \"%s\": %s", raw,
                     strerror(errno));
            return -1;
        }
        if (mkdirat(pfd, name, 0700) < 0 && errno != EEXIST) {
            sbx_error *x = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                                    "cannot create directory \"%s\": %s", raw, strerror(errno));
            env_context(st->env, x, "entry", raw);
            return -1;
        }
        fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fchmod(fd, perm | 0700) < 0) {
            sbx_error *x = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                                    "cannot set up directory \"%s\": %s", raw, strerror(errno));
            env_context(st->env, x, "entry", raw);
            if (fd >= 0)
                close(fd);
            return -1;
        }
        close(fd);
        if ((perm & 0700) != 0700) {
            size_t len = strlen(path);
            fixup *f = malloc(sizeof(*f) + len + 1);

            if (!f) {
                env_fail(st->env, st->err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
                return -1;
            }
            f->mode = perm;
            memcpy(f->rel, path, len + 1);
            f->next = st->fixups;
            st->fixups = f;
        }
        return 1;
    }

    if (ex_make_room(st, pfd, name, raw) < 0)
        return -1;
    if (type == AE_IFLNK) {
        if (symlinkat(archive_entry_symlink(e), pfd, name) < 0) {
            sbx_error *x = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                                    "cannot create symlink \"%s\": %s", raw, strerror(errno));
            env_context(st->env, x, "entry", raw);
            return -1;
        }
        return 1;
    }

    fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        sbx_error *x = env_fail(st->env, st->err, SBX_ERROR_WORKSPACE,
                                "cannot create \"%s\": %s", raw, strerror(errno));
        env_context(st->env, x, "entry", raw);
        return -1;
    }
    if (ex_data(st, a, fd, raw, archive_entry_size_is_set(e) ? archive_entry_size(e) : 0) < 0) {
        close(fd);
        return -1;
    }
    if (fchmod(fd, perm) < 0) {
        env_fail(st->env, st->err, SBX_ERROR_WORKSPACE, "cannot set the mode of \"%s\": %s", raw,
                 strerror(errno));
        close(fd);
        return -1;
    }
    if (archive_entry_mtime_is_set(e)) {
        struct timespec ts[2] = {
            { .tv_nsec = UTIME_OMIT },
            { .tv_sec = archive_entry_mtime(e), .tv_nsec = archive_entry_mtime_nsec(e) },
        };

        futimens(fd, ts);
    }
    close(fd);
    return 1;
}

/*
 * Process @pid's state and start time (clock ticks since boot, field 22 of
 * /proc/PID/stat): 1 when it lives (a zombie does not), 0 when it does not
 * exist, -1 when /proc cannot tell (out of descriptors, say).
 */
static int
proc_start(pid_t pid, unsigned long long *ticks)
{
    char path[64], buf[1024];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? 0 : -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return n == 0 || errno == ESRCH ? 0 : -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'), state = 0;
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s"
                            " %*s %*s %*s %*s %llu", &state, ticks) != 2)
        return -1;
    return state == 'Z' || state == 'X' ? 0 : 1;
}

/*
 * Removes from @parent the staging directories of extractions whose process
 * died before it could (a SIGKILL mid-copy): names ".NAME.sbx-PID-TICKS-X"
 * (make_staging's) whose PID does not live with start time TICKS. Nothing
 * of another form, and no staging of a live process, is touched.
 */
static void
sweep_dead_staging(int parent)
{
    int fd = openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    char **dead = NULL;
    size_t n = 0;

    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        const char *tag = e->d_name[0] == '.' ? strstr(e->d_name, ".sbx-") : NULL;
        unsigned long long pid, ticks;
        char rest[16];
        int used = 0;

        unsigned long long now = 0;

        if (!tag || sscanf(tag, ".sbx-%llu-%llu-%15[a-z0-9]%n", &pid, &ticks, rest, &used) != 3 ||
            tag[used] != '\0' || strlen(rest) != 8 || pid == 0 || pid > INT_MAX || ticks == 0)
            continue;   /* not of this form, or made without a start time to check */
        int lives = proc_start((pid_t)pid, &now);
        if (lives < 0 || (lives == 1 && now == ticks))
            continue;   /* its process lives, or cannot be told: not ours to remove */
        char **m = realloc(dead, (n + 1) * sizeof(*m));
        if (!m)
            break;
        dead = m;
        if ((dead[n] = strdup(e->d_name)) != NULL)
            n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        rm_rel(parent, dead[i]);
        free(dead[i]);
    }
    free(dead);
}

/* A fresh directory ".NAME.sbx-PID-TICKS-XXXXXXXX" in @parent (PID and
 * TICKS: this process and its start time, so that a later extraction can
 * tell it from one of a process still alive); its name in @out. Stale
 * staging directories of dead processes go first. */
static int
make_staging(int parent, const char *name, char *out, size_t outsz)
{
    static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    static unsigned long long self_ticks;
    char base[64];

    if (!self_ticks && proc_start(getpid(), &self_ticks) != 1)
        self_ticks = 0;
    sweep_dead_staging(parent);
    snprintf(base, sizeof(base), ".%.40s", name && *name != '.' ? name : "sbx");
    for (int tries = 0; tries < 100; tries++) {
        unsigned char rnd[8];

        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            for (size_t i = 0; i < sizeof(rnd); i++)
                rnd[i] = (unsigned char)(rand() ^ (int)time(NULL));
        snprintf(out, outsz, "%s.sbx-%d-%llu-", base, (int)getpid(), self_ticks);
        size_t len = strlen(out);
        for (size_t i = 0; i < 8 && len + 1 < outsz; i++) {
            out[len++] = digits[rnd[i] % (sizeof(digits) - 1)];
            out[len] = '\0';
        }
        if (mkdirat(parent, out, 0700) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    errno = EEXIST;
    return -1;
}

/*
 * Moves everything under @srel of @sbase into @drel of @dbase: what is
 * missing is renamed over, directories on both sides merge, anything else
 * replaces what it meets. Never follows a symlink. Returns 0 or -1 (errno).
 */
static int
merge_rel(int sbase, const char *srel, int dbase, const char *drel)
{
    char **names = NULL;
    size_t count = 0;
    mode_t *modes = NULL;
    int sfd, dfd, rc = -1, saved = 0;

    sfd = open_dir_rel(sbase, srel);
    if (sfd < 0)
        return -1;
    dfd = open_dir_rel(dbase, drel);
    if (dfd < 0) {
        saved = errno;
        close(sfd);
        errno = saved;
        return -1;
    }
    if (list_names(sfd, &names, &count) < 0)
        goto out;
    if (count && !(modes = calloc(count, sizeof(*modes)))) {
        errno = ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        struct stat ss, ds;

        if (fstatat(sfd, names[i], &ss, AT_SYMLINK_NOFOLLOW) < 0)
            goto out;
        if (fstatat(dfd, names[i], &ds, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                goto out;
        } else if (S_ISDIR(ss.st_mode) && S_ISDIR(ds.st_mode)) {
            modes[i] = (ss.st_mode & 07777) | S_IFDIR;    /* merge below */
            continue;
        } else if (S_ISDIR(ds.st_mode)) {
            char *child = rel_join(rel_of(drel), names[i]);

            if (!child || rm_rel(dbase, child) < 0) {
                free(child);
                goto out;
            }
            free(child);
        } else if (S_ISDIR(ss.st_mode)) {
            if (unlinkat(dfd, names[i], 0) < 0)
                goto out;
        }
        if (renameat(sfd, names[i], dfd, names[i]) < 0)
            goto out;
    }
    close(sfd);
    close(dfd);
    sfd = dfd = -1;
    for (size_t i = 0; i < count; i++) {
        char *sc, *dc;
        int fd;

        if (!modes[i])
            continue;
        sc = rel_join(rel_of(srel), names[i]);
        dc = rel_join(rel_of(drel), names[i]);
        if (!sc || !dc || merge_rel(sbase, sc, dbase, dc) < 0) {
            free(sc);
            free(dc);
            goto out;
        }
        fd = open_dir_rel(dbase, dc);
        if (fd >= 0) {
            fchmod(fd, modes[i] & 07777);
            close(fd);
        }
        free(sc);
        free(dc);
    }
    rc = 0;
out:
    saved = errno;
    if (sfd >= 0)
        close(sfd);
    if (dfd >= 0)
        close(dfd);
    names_free(names, count);
    free(modes);
    errno = saved;
    return rc;
}

/* Reads @fd to EOF so the writer of the stream finishes cleanly. */
static void
drain(int fd)
{
    char buf[16384];
    ssize_t n;

    do
        n = read(fd, buf, sizeof(buf));
    while (n > 0 || (n < 0 && errno == EINTR));
}

int64_t
sbx_tar_extract(const sbx_fs_env *env, int in_fd, int parent_fd, const char *name,
                sbx_error **err)
{
    return sbx_tar_extract_with(env, NULL, in_fd, parent_fd, name, err);
}

int64_t
sbx_tar_extract_with(const sbx_fs_env *env, const sbx_tar_policy *policy, int in_fd,
                     int parent_fd, const char *name, sbx_error **err)
{
    ex_state st = { .env = env, .err = err, .sfd = -1, .pc_fd = -1 };
    struct archive *a = NULL;
    struct archive_entry *e;
    char sname[96];
    int stage_parent = -1, dest_fd = -1, dest_exists = 0, staged = 0;
    int64_t count = 0;
    struct stat ds, ps;

    if (name && (!*name || strchr(name, '/') || strcmp(name, ".") == 0 ||
                 strcmp(name, "..") == 0)) {
        env_fail(env, err, SBX_ERROR_INVALID_ARGUMENT, "bad destination name \"%s\"", name);
        return -1;
    }
    if (policy)
        st.pol = *policy;
    if (st.pol.max_entry_bytes <= 0)
        st.pol.max_entry_bytes = SBX_TAR_DEFAULT_MAX_ENTRY_BYTES;
    if (st.pol.max_total_bytes <= 0)
        st.pol.max_total_bytes = SBX_TAR_DEFAULT_MAX_TOTAL_BYTES;
    if (st.pol.max_entries <= 0)
        st.pol.max_entries = SBX_TAR_DEFAULT_MAX_ENTRIES;
    st.umask = current_umask();
    /* Where the staging directory goes: beside the destination, or inside
     * it when it is the given directory itself or another filesystem. */
    if (!name) {
        stage_parent = parent_fd;
        dest_exists = 1;
    } else if (fstatat(parent_fd, name, &ds, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISDIR(ds.st_mode)) {
            sbx_error *x = env_fail(env, err, SBX_ERROR_INVALID_ARGUMENT,
                                    "destination \"%s\" exists and is not a directory", name);
            env_context(env, x, "path", name);
            return -1;
        }
        dest_exists = 1;
        dest_fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dest_fd < 0 || fstat(parent_fd, &ps) < 0) {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot open destination \"%s\": %s", name,
                     strerror(errno));
            goto fail;
        }
        stage_parent = ds.st_dev == ps.st_dev ? parent_fd : dest_fd;
    } else if (errno == ENOENT) {
        stage_parent = parent_fd;
    } else {
        env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot stat destination \"%s\": %s", name,
                 strerror(errno));
        return -1;
    }
    if (make_staging(stage_parent, name, sname, sizeof(sname)) < 0) {
        env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot create a staging directory: %s",
                 strerror(errno));
        goto fail;
    }
    staged = 1;
    st.sfd = openat(stage_parent, sname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (st.sfd < 0) {
        env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot open the staging directory: %s",
                 strerror(errno));
        goto fail;
    }

    a = archive_read_new();
    if (!a || archive_read_support_format_tar(a) != ARCHIVE_OK ||
        archive_read_open_fd(a, in_fd, TAR_BLOCK) != ARCHIVE_OK) {
        env_fail(env, err, SBX_ERROR_WORKSPACE, "not a tar stream: %s",
                 a && archive_error_string(a) ? archive_error_string(a) : "out of memory");
        goto fail;
    }
    for (;;) {
        int r = archive_read_next_header(a, &e), k;

        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "broken tar stream after %lld entries: %s",
                     (long long)count, archive_error_string(a));
            goto fail;
        }
        if ((k = ex_entry(&st, a, e)) < 0)
            goto fail;
        count += k;
        if (env_check(env, err) < 0)
            goto fail;
    }
    archive_read_free(a);
    a = NULL;
    drain(in_fd);
    if (st.pc_fd >= 0)
        close(st.pc_fd);
    st.pc_fd = -1;

    /* Into place. */
    if (!dest_exists) {
        fchmod(st.sfd, st.have_root_mode ? st.root_mode | 0700 : 0755);
        if (renameat2(stage_parent, sname, parent_fd, name, RENAME_NOREPLACE) == 0) {
            staged = 0;
            dest_fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        } else if (errno == EEXIST || errno == ENOTEMPTY) {
            dest_exists = 1;    /* made meanwhile: merge into it */
            dest_fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        } else if (errno == EINVAL &&
                   renameat(stage_parent, sname, parent_fd, name) == 0) {
            staged = 0;     /* renameat2 flags unsupported here */
            dest_fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        } else {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot move the extracted tree into \"%s\": %s",
                     name, strerror(errno));
            goto fail;
        }
        if (dest_fd < 0) {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot open destination \"%s\": %s", name,
                     strerror(errno));
            goto fail;
        }
    }
    if (dest_exists) {
        int dbase = name ? dest_fd : parent_fd;

        if (merge_rel(st.sfd, "", dbase, "") < 0) {
            env_fail(env, err, SBX_ERROR_WORKSPACE, "cannot merge the extracted tree into %s%s%s: %s",
                     name ? "\"" : "the destination", name ? name : "", name ? "\"" : "",
                     strerror(errno));
            goto fail;
        }
    }
    /* Modes without u+rwx, deepest first (the list is in reverse order),
     * then the root's when it was made here. */
    for (fixup *f = st.fixups; f; f = f->next) {
        int base = name ? dest_fd : parent_fd;
        int fd = open_dir_rel(base, f->rel);

        if (fd >= 0) {
            fchmod(fd, f->mode);
            close(fd);
        }
    }
    if (st.have_root_mode && !dest_exists)
        fchmod(dest_fd, st.root_mode);
    if (staged) {
        close(st.sfd);
        st.sfd = -1;
        rm_rel(stage_parent, sname);
        staged = 0;
    }
    goto out;

fail:
    count = -1;
out:
    if (a)
        archive_read_free(a);
    if (st.pc_fd >= 0)
        close(st.pc_fd);
    free(st.pc_rel);
    if (st.sfd >= 0)
        close(st.sfd);
    if (staged)
        rm_rel(stage_parent, sname);
    if (dest_fd >= 0)
        close(dest_fd);
    while (st.fixups) {
        fixup *f = st.fixups;

        st.fixups = f->next;
        free(f);
    }
    return count;
}

/* ---------------------------------------------------------------- one entry */

typedef struct hdr_sink {
    unsigned char *buf;
    size_t len, cap;
    int done, failed;
} hdr_sink;

static ssize_t hdr_collect(struct archive *a, void *ud, const void *p, size_t n)
{
    hdr_sink *h = ud;
    (void)a;
    if (h->done)
        return -1;      /* stops libarchive's padding at once */
    if (h->len + n > h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 4096;
        while (cap < h->len + n)
            cap *= 2;
        unsigned char *nb = realloc(h->buf, cap);
        if (!nb) {
            h->failed = 1;
            return -1;
        }
        h->buf = nb;
        h->cap = cap;
    }
    memcpy(h->buf + h->len, p, n);
    h->len += n;
    return (ssize_t)n;
}

int sbx_tar_entry_header(const sbx_fs_env *env, const char *name, mode_t type, uint32_t mode,
                         int64_t size, int64_t mtime, unsigned char **out, size_t *len,
                         sbx_error **err)
{
    struct archive *a = archive_write_new();
    struct archive_entry *e = archive_entry_new();
    hdr_sink h = { 0 };
    int rc = -1;

    *out = NULL;
    *len = 0;
    if (!a || !e) {
        env_fail(env, err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK
        || archive_write_set_options(a, "hdrcharset=BINARY") != ARCHIVE_OK
        || archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK
        || archive_write_open(a, &h, NULL, hdr_collect, NULL) != ARCHIVE_OK)
        goto arch_fail;
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, type == S_IFDIR ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, mode & 07777);
    archive_entry_set_size(e, type == S_IFDIR ? 0 : size);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_mtime(e, (time_t)mtime, 0);
    if (archive_write_header(a, e) != ARCHIVE_OK)
        goto arch_fail;
    /* On close libarchive pads the data it never got and ends the archive:
     * none of that is the header. */
    h.done = 1;
    if (h.failed || h.len == 0 || h.len % 512 != 0) {
        env_fail(env, err, h.failed ? SBX_ERROR_RESOURCE_EXHAUSTED : SBX_ERROR_WORKSPACE,
                 h.failed ? "out of memory" : "a tar header of %zu bytes for \"%s\"", h.len,
                 name);
        goto out;
    }
    *out = h.buf;
    *len = h.len;
    h.buf = NULL;
    rc = 0;
    goto out;
arch_fail:
    env_fail(env, err, SBX_ERROR_WORKSPACE, "making a tar header for \"%s\": %s", name,
             archive_error_string(a) ? archive_error_string(a) : "libarchive failed");
out:
    h.done = 1;
    if (a)
        archive_write_free(a);
    archive_entry_free(e);
    free(h.buf);
    return rc;
}

static int write_all_fd(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = { .fd = fd, .events = POLLOUT };
            poll(&pf, 1, 1000);
            continue;
        }
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int sbx_tar_first_file(const sbx_fs_env *env, int in_fd, int out_fd, const char *shown,
                       sbx_error_code read_code, sbx_error **err)
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    static const char zeros[65536];
    int rc = -1, r;

    if (!a) {
        env_fail(env, err, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    archive_read_support_format_tar(a);
    if (archive_read_open_fd(a, in_fd, 65536) != ARCHIVE_OK) {
        rc = 0;
        goto out;
    }
    /* A name the locale cannot show is a warning only: names are bytes. */
    r = archive_read_next_header(a, &e);
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        rc = 0;         /* no entry: the caller looks at why */
        goto out;
    }
    if (archive_entry_filetype(e) != AE_IFREG) {
        sbx_error *x = env_fail(env, err, SBX_ERROR_INVALID_ARGUMENT,
                                "\"%s\" is not a regular file", shown);
        if (x && env->hs->error_add_context)
            env->hs->error_add_context(x, "path", shown);
        goto out;
    }
    int64_t pos = 0;
    for (;;) {
        const void *buf;
        size_t size;
        la_int64_t off;
        r = archive_read_data_block(a, &buf, &size, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            env_fail(env, err, read_code, "reading \"%s\" from the sandbox: %s", shown,
                     archive_error_string(a) ? archive_error_string(a) : "libarchive failed");
            goto out;
        }
        while (pos < off) {     /* a hole */
            size_t z = off - pos > (int64_t)sizeof(zeros) ? sizeof(zeros) : (size_t)(off - pos);
            if (write_all_fd(out_fd, zeros, z) < 0)
                goto write_failed;
            pos += (int64_t)z;
        }
        if (size && write_all_fd(out_fd, buf, size) < 0)
            goto write_failed;
        pos += (int64_t)size;
    }
    int64_t want = archive_entry_size(e);
    while (pos < want) {        /* a trailing hole */
        size_t z = want - pos > (int64_t)sizeof(zeros) ? sizeof(zeros) : (size_t)(want - pos);
        if (write_all_fd(out_fd, zeros, z) < 0)
            goto write_failed;
        pos += (int64_t)z;
    }
    rc = 1;
    goto out;
write_failed:
    env_fail(env, err, SBX_ERROR_WORKSPACE, "writing \"%s\" to the descriptor: %s", shown,
             strerror(errno));
out:
    archive_read_free(a);
    return rc;
}
