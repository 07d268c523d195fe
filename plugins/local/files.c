/*
 * files.c — the local backend's file slots: list_files, read_file,
 * write_file, stat_file, upload_tar, download_tar.
 *
 * A sandbox path names a path under the sandbox root, absolute or not
 * ("/work/x" and "work/x" are ROOT/work/x). Every path is resolved beneath
 * the root (host/archive.c: openat2 with RESOLVE_BENEATH where the kernel
 * has it, else a component walk with O_NOFOLLOW): ".." above the root and
 * symlinks that lead out of it (absolute, or climbing above it) are refused
 * with invalid_argument, so nothing outside the root is read or written.
 * Symlinks that stay inside are followed. On bubblewrap, every path is
 * resolved in the sandbox's mount namespace, through /proc/PID/root of its
 * pid 1: the file slots see what its commands see (/usr, /etc and the
 * other system directories bound read-only, ro_binds, an owned root
 * through its overlay, never beside it), and a write where the sandbox
 * may not write fails as it would inside (a read-only file system).
 *
 * Data moves between descriptors in bounded chunks (copy_file_range or
 * sendfile where the kernel can); directories move as tar streams made and
 * checked by host/archive.c, which this plugin links.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "local.h"
#ifdef SBX_LOCAL_BUBBLEWRAP
#include "proto.h"
#endif
#include "../../host/archive.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>

static const sbx_host_services *host;

#ifdef SBX_LOCAL_FAULTY
/* tests/plugins/faults.c: 1 when a transfer of @path was cancelled. */
int sbx_fault_path(const char *path, const sbx_call_ctx *ctx);
/* Fails the slot when the fault plugin cancelled it (closing @fd). */
#define FAULT_PATH(env, path, ctx, error, fd)                                               \
    do {                                                                                    \
        if (sbx_fault_path((path), (ctx))) {                                                \
            close(fd);                                                                      \
            fail((env), (error), SBX_ERROR_TIMEOUT, (path), "call cancelled (fault plugin)"); \
            return -1;                                                                      \
        }                                                                                   \
    } while (0)
#else
#define FAULT_PATH(env, path, ctx, error, fd) ((void)0)
#endif

void local_files_setup(const sbx_host_services *services)
{
    host = services;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static sbx_fs_env env_of(const sbx_call_ctx *ctx, const char *op)
{
    sbx_fs_env env = { host, ctx, op };
    return env;
}

static sbx_error *fail(const sbx_fs_env *env, sbx_error **error, sbx_error_code code,
                       const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/** Stores a new error, with @path as context "path" when not NULL. */
static sbx_error *fail(const sbx_fs_env *env, sbx_error **error, sbx_error_code code,
                       const char *path, const char *fmt, ...)
{
    char msg[2 * PATH_MAX + 256];
    va_list ap;

    if (!error || *error || !host)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host->set_error(error, code, env->op, "%s", msg);
    if (*error && path && host->error_add_context)
        host->error_add_context(*error, "path", path);
    return *error;
}

/** The error for a failed resolution of sandbox path @path (errno @e). */
static void path_fail(const sbx_fs_env *env, sbx_error **error, int e, const char *path)
{
    switch (e) {
    case ENOENT:
        fail(env, error, SBX_ERROR_NOT_FOUND, path, "no such file or directory: \"%s\"", path);
        break;
    case ENOTDIR:
        fail(env, error, SBX_ERROR_NOT_FOUND, path,
             "no such file or directory: \"%s\" (a component is not a directory)", path);
        break;
    case EXDEV:
        fail(env, error, SBX_ERROR_INVALID_ARGUMENT, path,
             "path \"%s\" leads outside the sandbox root (through \"..\" or a symlink)", path);
        break;
    case ELOOP:
        fail(env, error, SBX_ERROR_INVALID_ARGUMENT, path,
             "path \"%s\": too many levels of symbolic links", path);
        break;
    case ENAMETOOLONG:
        fail(env, error, SBX_ERROR_INVALID_ARGUMENT, path, "path \"%s\" is too long", path);
        break;
    case EISDIR:
        fail(env, error, SBX_ERROR_INVALID_ARGUMENT, path, "\"%s\" is a directory", path);
        break;
    default:
        fail(env, error, SBX_ERROR_WORKSPACE, path, "cannot open \"%s\": %s", path, strerror(e));
        break;
    }
}

/** Opens the sandbox root; -1 with not_found once destroyed. */
static int open_root(struct sbx_plugin_sandbox *sb, const sbx_fs_env *env, const char *path,
                     sbx_error **error)
{
    int destroyed, fd;

    if (!sb) {
        fail(env, error, SBX_ERROR_INVALID_ARGUMENT, NULL, "sandbox is NULL");
        return -1;
    }
    if (!path) {
        fail(env, error, SBX_ERROR_INVALID_ARGUMENT, NULL, "path is NULL");
        return -1;
    }
    pthread_mutex_lock(&sb->lock);
    destroyed = sb->destroyed;
    pthread_mutex_unlock(&sb->lock);
    if (destroyed) {
        fail(env, error, SBX_ERROR_NOT_FOUND, NULL, "sandbox %s was destroyed", sb->id);
        return -1;
    }
#ifdef SBX_LOCAL_BUBBLEWRAP
    /* Every path is resolved in the sandbox's own view, its pid 1's root
     * (/proc/PID/root): what its commands see, the read-only system
     * directories bound from the host included (writes to them fail with
     * EROFS, as inside), and an owned root, the upper layer of the
     * sandbox's overlay (bwrap.c), never reached beside the overlay. That
     * pid must still be the supervisor. */
    {
        char via[64];
        snprintf(via, sizeof(via), "/proc/%d/root", (int)sb->sup_pid);
        fd = sb->sup_pid > 1 ? open(via, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (fd >= 0 && !local_supervisor_alive(sb)) {
            close(fd);
            fd = -1;
        }
        if (fd < 0)
            fail(env, error, SBX_ERROR_NOT_FOUND, NULL,
                 "sandbox %s is gone (its supervisor, pid %d, has ended)", sb->id,
                 (int)sb->sup_pid);
        return fd;
    }
#endif
    fd = open(sb->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            fail(env, error, SBX_ERROR_NOT_FOUND, NULL, "sandbox %s is gone (no root %s)",
                 sb->id, sb->root);
        else
            fail(env, error, SBX_ERROR_WORKSPACE, NULL, "cannot open the sandbox root %s: %s",
                 sb->root, strerror(errno));
    }
    return fd;
}

int local_resolve_dir(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *op,
                      const char *path, char **out, sbx_error **error)
{
    sbx_fs_env env = env_of(ctx, op);
    char link[64], real[PATH_MAX];
    int root, fd, e, other;
    ssize_t n;

    *out = NULL;
    root = open_root(sandbox, &env, path, error);
    if (root < 0)
        return -1;
    fd = sbx_fs_open_beneath(root, path, 0, O_PATH | O_DIRECTORY, 0);
    if (fd < 0) {
        e = errno;
        other = e == ENOTDIR ? sbx_fs_open_beneath(root, path, 0, O_PATH, 0) : -1;
        if (other >= 0) {
            close(other);
            fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, path,
                 "working directory \"%s\" is not a directory", path);
        } else if (e == ENOENT || e == ENOTDIR) {
            fail(&env, error, SBX_ERROR_NOT_FOUND, path,
                 "working directory \"%s\" does not exist in sandbox %s", path, sandbox->id);
        } else if (e == EXDEV) {
            fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, path,
                 "working directory \"%s\" leads outside the sandbox root (through \"..\" or "
                 "a symlink)", path);
        } else {
            path_fail(&env, error, e, path);
        }
        close(root);
        return -1;
    }
    close(root);
    /* The directory's own path: what the supervisor opens has no symlink
     * and no ".." left to resolve. */
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, real, sizeof(real) - 1);
    e = errno;
    close(fd);
    if (n <= 0 || (size_t)n >= sizeof(real) - 1) {
        fail(&env, error, SBX_ERROR_WORKSPACE, path,
             "cannot resolve working directory \"%s\": %s", path,
             n < 0 ? strerror(e) : "path too long");
        return -1;
    }
    real[n] = '\0';
    *out = strdup(real);
    if (!*out) {
        fail(&env, error, SBX_ERROR_RESOURCE_EXHAUSTED, path, "out of memory");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Slots                                                                     */
/* ------------------------------------------------------------------------ */

int local_list_files(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                     sbx_plugin_file_fn fn, void *user_data, sbx_error **error)
{
    if (local_check_lifetime(sandbox, "list_files", error) < 0)
        return -1;
    sbx_fs_env env = env_of(ctx, "list_files");
    int root = open_root(sandbox, &env, path, error), dfd, lfd;
    DIR *d;
    struct dirent *de;
    int rc = 0;

    if (root < 0)
        return -1;
    if (!fn) {
        close(root);
        fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, NULL, "callback is NULL");
        return -1;
    }
    dfd = sbx_fs_open_beneath(root, path, 0, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        int e = errno, other = -1;

        /* ENOTDIR: the path itself is a file (invalid), or a component on
         * the way is (not found). */
        if (e == ENOTDIR && (other = sbx_fs_open_beneath(root, path, 0, O_PATH, 0)) >= 0) {
            close(other);
            fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, path, "\"%s\" is not a directory",
                 path);
        } else {
            path_fail(&env, error, e, path);
        }
        close(root);
        return -1;
    }
    close(root);
    lfd = dup(dfd);
    if (lfd < 0 || !(d = fdopendir(lfd))) {
        fail(&env, error, SBX_ERROR_WORKSPACE, path, "cannot list \"%s\": %s", path,
             strerror(errno));
        if (lfd >= 0)
            close(lfd);
        close(dfd);
        return -1;
    }
    errno = 0;
    while ((de = readdir(d))) {
        struct stat st;
        sbx_plugin_file_info info;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        memset(&info, 0, sizeof(info));
        info.struct_size = sizeof(info);
        info.name = de->d_name;
        info.size = -1;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            info.is_dir = S_ISDIR(st.st_mode);
            info.size = st.st_size;
            info.mode = st.st_mode & 07777;
        } else if (errno == ENOENT) {
            errno = 0;
            continue;           /* removed meanwhile */
        }
        if (fn(&info, user_data) != 0)
            break;
        errno = 0;
    }
    if (errno) {
        fail(&env, error, SBX_ERROR_WORKSPACE, path, "cannot list \"%s\": %s", path,
             strerror(errno));
        rc = -1;
    }
    closedir(d);
    close(dfd);
    return rc;
}

int local_read_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                    int fd, sbx_error **error)
{
    if (local_check_lifetime(sandbox, "read_file", error) < 0)
        return -1;
    sbx_fs_env env = env_of(ctx, "read_file");
    int root = open_root(sandbox, &env, path, error), in;
    struct stat st;
    int64_t n;

    if (root < 0)
        return -1;
    FAULT_PATH(&env, path, ctx, error, root);
    /* O_NONBLOCK: a fifo in the sandbox must not hang the open. */
    in = sbx_fs_open_beneath(root, path, 0, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
    close(root);
    if (in < 0) {
        path_fail(&env, error, errno, path);
        return -1;
    }
    if (fstat(in, &st) < 0)
        st.st_mode = 0;
    if (!S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode))
            path_fail(&env, error, EISDIR, path);
        else
            fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, path, "\"%s\" is not a regular file",
                 path);
        close(in);
        return -1;
    }
    n = sbx_fs_copy_fd(&env, in, fd, path, error);
    close(in);
    return n < 0 ? -1 : 0;
}

/** A fresh temporary file beside @name in @dfd; its name in @tmp. */
static int make_temp(int dfd, const char *name, char *tmp, size_t tmpsz)
{
    for (int tries = 0; tries < 100; tries++) {
        unsigned long long r = 0;
        int fd;

        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (unsigned long long)random() ^ ((unsigned long long)getpid() << 32);
        snprintf(tmp, tmpsz, ".%.200s.sbx-%012llx", name, r & 0xffffffffffffULL);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

/** A file with no name in @dfd (O_TMPFILE), for a write that must leave
 *  nothing behind when its process dies before it ends (SIGKILL
 *  included); -1 where the file system has no O_TMPFILE or /proc/self/fd,
 *  through which publish_unnamed() names it, is not there. */
static int open_unnamed(int dfd)
{
    if (access("/proc/self/fd", X_OK) != 0)
        return -1;
    return openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
}

/** Names the unnamed file @fd @last in @dfd: linked there when nothing
 *  is (atomic), else linked under a staging name beside it and renamed
 *  over it (that name exists only between the two calls). 0, or -1 with
 *  errno. */
static int publish_unnamed(int fd, int dfd, const char *last)
{
    char proc[64], tmp[NAME_MAX + 1];

    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, dfd, last, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    if (errno != EEXIST)
        return -1;
    for (int tries = 0; tries < 100; tries++) {
        unsigned long long r = 0;

        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (unsigned long long)random() ^ ((unsigned long long)getpid() << 32);
        snprintf(tmp, sizeof(tmp), ".%.200s.sbx-%012llx", last, r & 0xffffffffffffULL);
        if (linkat(AT_FDCWD, proc, dfd, tmp, AT_SYMLINK_FOLLOW) == 0) {
            if (renameat(dfd, tmp, dfd, last) == 0)
                return 0;
            int e = errno;
            unlinkat(dfd, tmp, 0);
            errno = e;
            return -1;
        }
        if (errno != EEXIST)
            return -1;
    }
    errno = EEXIST;
    return -1;
}

int local_write_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                     int fd, uint32_t mode, sbx_error **error)
{
    if (local_check_lifetime(sandbox, "write_file", error) < 0)
        return -1;
    sbx_fs_env env = env_of(ctx, "write_file");
    int root = open_root(sandbox, &env, path, error), dfd, out;
    char *last = NULL, tmp[NAME_MAX + 1];
    struct stat st;

    if (root < 0)
        return -1;
    if (mode > 07777) {
        close(root);
        fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, path, "bad mode 0%o for \"%s\"",
             (unsigned)mode, path);
        return -1;
    }
    dfd = sbx_fs_parent_beneath(root, path, SBX_BENEATH_CREATE_DIRS, &last);
    close(root);
    if (dfd < 0) {
        path_fail(&env, error, errno, path);
        return -1;
    }
    if (!last || (fstatat(dfd, last, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))) {
        path_fail(&env, error, EISDIR, path);
        goto fail;
    }
    /* The bytes go to a file with no name, named once complete: a process
     * killed meanwhile leaves nothing in the sandbox. Where the file system
     * has no O_TMPFILE, a staging file ".NAME.sbx-XXXXXXXXXXXX" beside it,
     * renamed over it at the end. */
    out = open_unnamed(dfd);
    int unnamed = out >= 0;
    tmp[0] = '\0';
    if (!unnamed)
        out = make_temp(dfd, last, tmp, sizeof(tmp));
    if (out < 0) {
        fail(&env, error, SBX_ERROR_WORKSPACE, path, "cannot create a file beside \"%s\": %s",
             path, strerror(errno));
        goto fail;
    }
    if (sbx_fs_copy_fd(&env, fd, out, path, error) < 0 || fchmod(out, mode) < 0 ||
        (unnamed ? publish_unnamed(out, dfd, last) : renameat(dfd, tmp, dfd, last)) < 0) {
        fail(&env, error, SBX_ERROR_WORKSPACE, path, "cannot write \"%s\": %s", path,
             strerror(errno));
        close(out);
        if (tmp[0])
            unlinkat(dfd, tmp, 0);
        goto fail;
    }
    close(out);
    close(dfd);
    free(last);
    return 0;
fail:
    close(dfd);
    free(last);
    return -1;
}

int local_stat_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                    sbx_plugin_file_info *info, sbx_error **error)
{
    if (local_check_lifetime(sandbox, "stat_file", error) < 0)
        return -1;
    static __thread char name[NAME_MAX + 1];
    sbx_fs_env env = env_of(ctx, "stat_file");
    int root = open_root(sandbox, &env, path, error), fd;
    struct stat st;
    const char *p, *base;
    size_t len;

    if (root < 0)
        return -1;
    if (!info) {
        close(root);
        fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, NULL, "info is NULL");
        return -1;
    }
    fd = sbx_fs_open_beneath(root, path, 0, O_PATH, 0);
    close(root);
    if (fd < 0 || fstat(fd, &st) < 0) {
        path_fail(&env, error, errno, path);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    /* The last component of @path ("" for the root). */
    len = strlen(path);
    while (len > 0 && path[len - 1] == '/')
        len--;
    for (base = p = path; p < path + len; p++)
        if (*p == '/')
            base = p + 1;
    len = (size_t)(path + len - base);
    if (len > NAME_MAX)
        len = NAME_MAX;
    memcpy(name, base, len);
    name[len] = '\0';
    memset(info, 0, sizeof(*info));
    info->struct_size = sizeof(*info);
    info->name = name;
    info->is_dir = S_ISDIR(st.st_mode);
    info->size = st.st_size;
    info->mode = st.st_mode & 07777;
    return 0;
}

int local_download_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                       int fd, sbx_error **error)
{
    if (local_check_lifetime(sandbox, "download_tar", error) < 0)
        return -1;
    sbx_fs_env env = env_of(ctx, "download_dir");
    int root = open_root(sandbox, &env, path, error), dfd;
    int64_t n;

    if (root < 0)
        return -1;
    FAULT_PATH(&env, path, ctx, error, root);
    dfd = sbx_fs_open_beneath(root, path, 0, O_RDONLY | O_DIRECTORY, 0);
    close(root);
    if (dfd < 0) {
        if (errno == ENOTDIR)
            fail(&env, error, SBX_ERROR_INVALID_ARGUMENT, path, "\"%s\" is not a directory",
                 path);
        else
            path_fail(&env, error, errno, path);
        return -1;
    }
    n = sbx_tar_write_tree(&env, dfd, fd, error);
    close(dfd);
    return n < 0 ? -1 : 0;
}

int local_upload_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                     int fd, sbx_error **error)
{
    if (local_check_lifetime(sandbox, "upload_tar", error) < 0)
        return -1;
    sbx_fs_env env = env_of(ctx, "upload_dir");
    int root = open_root(sandbox, &env, path, error), pfd;
    char *last = NULL;
    int64_t n;

    if (root < 0)
        return -1;
    pfd = sbx_fs_parent_beneath(root, path, SBX_BENEATH_CREATE_DIRS, &last);
    close(root);
    if (pfd < 0) {
        path_fail(&env, error, errno, path);
        return -1;
    }
    n = sbx_tar_extract(&env, fd, pfd, last, error);
    close(pfd);
    free(last);
    return n < 0 ? -1 : 0;
}
