/*
 * files.c — the docker backend's file slots, on the Engine's archive
 * endpoints (GET / PUT / HEAD /containers/{id}/archive?path=...).
 *
 *  - stat_file: HEAD; the X-Docker-Container-Path-Stat header (base64
 *    JSON {name,size,mode,mtime,linkTarget}, mode a Go os.FileMode).
 *  - read_file: GET of the file (symlinks followed, at most 8), a one-entry
 *    tar read by the tar helper library (host/archive.h) as it arrives (curl runs in a helper thread
 *    feeding a pipe), its data written to the caller's descriptor.
 *  - write_file: PUT at "/" of a one-entry tar built on the fly: the
 *    header made by the tar helper library (PAX where needed: long names,
 *    names that are not ASCII, as bytes, sizes over 8 GiB), then the bytes streamed from the caller's descriptor (its size
 *    from fstat, or spooled to an unlinked temporary file when it is a pipe),
 *    then padding and the end-of-archive blocks. The Engine creates missing
 *    parent directories (0755).
 *  - upload_tar: PUT of the caller's tar stream (chunked) at the directory,
 *    made first when missing (a one-entry tar holding it).
 *  - download_tar: GET of "DIR/." streamed to the caller's descriptor:
 *    entries come relative ("./", "./a"); the host's checked extractor
 *    handles safety.
 *  - list_files: an exec of find (GNU find -printf, else a sh loop with
 *    stat) printing NUL-separated records.
 * Memory stays bounded whatever the size.
 */
#include "docker.h"
#include "../../host/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include <archive.h>
#include <archive_entry.h>
#include <json-c/json.h>

#define API_SECS 60.0
#define LIST_SECS 120.0
#define LIST_CAP ((size_t)64 << 20)
#define BLOCK 512

/* ------------------------------------------------------------------------ */
/* stat                                                                      */
/* ------------------------------------------------------------------------ */

static char *archive_path(struct sbx_plugin_sandbox *sb, const char *abs, const char *suffix)
{
    char *e = cl_url_escape(abs), *p = NULL;
    if (e && asprintf(&p, "/containers/%s/archive?path=%s%s", sb->id, e, suffix) < 0)
        p = NULL;
    free(e);
    return p;
}

/* After a 404 from an archive endpoint: is the container gone? 1 yes (an
 * error was made), 0 no (the path is missing), -1 error. */
static int container_gone(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                          const char *op, sbx_error **error)
{
    char *path;
    if (asprintf(&path, "/containers/%s/json", sb->id) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "GET", .path = path, .secs = API_SECS };
    dk_resp r;
    int rc = dk_request(sb->client, ctx, &req, &r, op, error);
    free(path);
    if (rc < 0)
        return -1;
    rc = 0;
    if (r.status == 404) {
        sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                                 "sandbox %.12s no longer exists", sb->id);
        cl_context(err, "sandbox_id", sb->id);
        rc = 1;
    }
    dk_resp_clear(&r);
    return rc;
}

int dk_path_stat(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *abs,
                 uint32_t *mode, int64_t *size, char **name, char **link_target,
                 const char *op, sbx_error **error)
{
    char *path = archive_path(sb, abs, "");
    if (!path) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "HEAD", .path = path, .secs = API_SECS };
    dk_resp r;
    int rc = dk_request(sb->client, ctx, &req, &r, op, error);
    free(path);
    if (rc < 0)
        return -1;
    rc = -1;
    if (r.status == 404) {
        int g = container_gone(sb, ctx, op, error);
        rc = g == 0 ? 0 : -1;
        goto out;
    }
    if (r.status != 200 || !r.path_stat) {
        if (r.status == 200)
            cl_fail(error, SBX_ERROR_CONNECTION, op, "the archive HEAD of %s carried no stat", abs);
        else
            dk_fail_container(error, sb, &r, DK_CODE_BY_STATUS, op, "cannot stat the path");
        goto out;
    }
    json_object *j = json_tokener_parse(r.path_stat), *v;
    if (!j || !json_object_is_type(j, json_type_object)) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "the path stat of %s is not JSON", abs);
        json_object_put(j);
        goto out;
    }
    if (mode)
        *mode = json_object_object_get_ex(j, "mode", &v)
                ? (uint32_t)json_object_get_int64(v) : 0;
    if (size)
        *size = json_object_object_get_ex(j, "size", &v) ? json_object_get_int64(v) : -1;
    if (name)
        *name = json_object_object_get_ex(j, "name", &v) && json_object_is_type(v, json_type_string)
                ? strdup(json_object_get_string(v)) : strdup("");
    if (link_target)
        *link_target = json_object_object_get_ex(j, "linkTarget", &v)
                       && json_object_is_type(v, json_type_string)
                       && json_object_get_string_len(v) > 0
                       ? strdup(json_object_get_string(v)) : NULL;
    json_object_put(j);
    rc = 1;
out:
    dk_resp_clear(&r);
    return rc;
}

/* Permission bits of a Go os.FileMode. */
static uint32_t go_perm(uint32_t m)
{
    uint32_t p = m & 0777;
    if (m & (UINT32_C(1) << 23))
        p |= 04000;
    if (m & (UINT32_C(1) << 22))
        p |= 02000;
    if (m & (UINT32_C(1) << 20))
        p |= 01000;
    return p;
}

static sbx_error *fail_missing(sbx_error **error, struct sbx_plugin_sandbox *sb, const char *op,
                               const char *shown)
{
    sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                             "\"%s\" does not exist in sandbox %.12s", shown, sb->id);
    cl_context(err, "path", shown);
    return err;
}

int dk_stat_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                 sbx_plugin_file_info *info, sbx_error **error)
{
    const char *op = "stat_file";
    struct sbx_plugin_sandbox *sb = sandbox;
    if (dk_sandbox_check(sb, op, error) < 0)
        return -1;
    char *abs = dk_sandbox_path(sb, path, op, error), *name = NULL;
    if (!abs)
        return -1;
    uint32_t mode = 0;
    int64_t size = -1;
    int r = dk_path_stat(sb, ctx, abs, &mode, &size, &name, NULL, op, error);
    free(abs);
    if (r <= 0) {
        if (r == 0)
            fail_missing(error, sb, op, path);
        free(name);
        return -1;
    }
    pthread_mutex_lock(&sb->lock);
    free(sb->stat_name);
    sb->stat_name = name;
    pthread_mutex_unlock(&sb->lock);
    info->name = name;
    info->is_dir = (mode & DK_MODE_DIR) != 0;
    info->size = size;
    info->mode = go_perm(mode);
    return 0;
}

/* Follows @abs through symlinks (at most 8) to a non-link; stores the final
 * path and its mode. 1 found, 0 missing (or dangling), -1 error. */
static int resolve(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *abs,
                   char **final, uint32_t *mode, const char *op, sbx_error **error)
{
    char *cur = strdup(abs);
    for (int depth = 0; cur && depth < 9; depth++) {
        char *target = NULL;
        int r = dk_path_stat(sb, ctx, cur, mode, NULL, NULL, &target, op, error);
        if (r <= 0) {
            free(cur);
            free(target);
            return r;
        }
        if (!(*mode & DK_MODE_SYMLINK) || !target || target[0] != '/') {
            free(target);
            *final = cur;
            return 1;
        }
        free(cur);
        cur = target;
    }
    free(cur);
    if (!cur)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "too many symlinks at %s", abs);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* GET through a pipe (curl in a helper thread, libarchive on this one)      */
/* ------------------------------------------------------------------------ */

typedef struct getter {
    struct sbx_plugin_sandbox *sb;
    const sbx_call_ctx *ctx;
    const char *path;
    const char *op;
    int wfd;
    int rc;
    dk_resp resp;
    cl_last_error last;
} getter;

static int pipe_sink(void *ud, const char *p, size_t n)
{
    getter *g = ud;
    return dk_write_all(g->wfd, p, n, -1, NULL);
}

static void *getter_main(void *arg)
{
    getter *g = arg;
    sigset_t old;
    dk_sigpipe_block(&old);     /* EPIPE, not a signal (the thread ends with it) */
    dk_req req = { .method = "GET", .path = g->path, .sink = pipe_sink, .sink_ud = g };
    g->rc = dk_request(g->sb->client, g->ctx, &req, &g->resp, g->op, NULL);
    if (g->rc < 0)
        g->last = *cl_last();
    close(g->wfd);
    g->wfd = -1;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* read_file                                                                 */
/* ------------------------------------------------------------------------ */

/* Copies the data of the archive's first entry (a regular file) to @fd. */
/* The first entry of the tar stream on @rfd, a regular file, copied to
 * @fd by the tar helper library: 0, -2 for an empty stream (the caller
 * looks at the HTTP status), -1 with an error. */
static int extract_first(int rfd, int fd, const char *shown, const char *op,
                         sbx_error **error)
{
    sbx_fs_env env = { cl_host, NULL, op };
    int r = sbx_tar_first_file(&env, rfd, fd, shown, SBX_ERROR_CONNECTION, error);
    return r == 1 ? 0 : r == 0 ? -2 : -1;
}

/* Runs GET @path, handing the body (a pipe) to @consume on this thread. */
static int get_via_pipe(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                        const char *path, int (*consume)(int rfd, void *ud), void *ud,
                        dk_resp *resp, int *consume_rc, const char *op, sbx_error **error)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "pipe: %s", strerror(errno));
        return -1;
    }
    getter g = { .sb = sb, .ctx = ctx, .path = path, .op = op, .wfd = pfd[1] };
    pthread_t t;
    int e = pthread_create(&t, NULL, getter_main, &g);
    if (e) {
        close(pfd[0]);
        close(pfd[1]);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "pthread_create: %s", strerror(e));
        return -1;
    }
    *consume_rc = consume(pfd[0], ud);
    /* Let the transfer end: reading on to EOF (bounded by the request). */
    char sink[65536];
    while (read(pfd[0], sink, sizeof(sink)) > 0)
        ;
    close(pfd[0]);
    pthread_join(t, NULL);
    *resp = g.resp;
    if (g.rc < 0) {
        sbx_error *err = cl_fail(error, g.last.code, op, "%s", g.last.msg);
        if (g.last.unknown)
            cl_outcome_unknown(err);
        return -1;
    }
    return 0;
}

typedef struct read_job {
    int fd;
    const char *shown;
    const char *op;
    sbx_error **error;
} read_job;

/* The sandbox path @path of a file (@want_dir 0) or a directory (1) that
 * must exist: stores its absolute path and, symbolic links followed, its
 * final path in *@abs and *@final (new strings). Returns 0, or -1 with
 * *@error set (missing, of the other kind) and nothing stored. */
static int resolve_existing(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                            const char *path, int want_dir, const char *op, char **abs,
                            char **final, sbx_error **error)
{
    if (dk_sandbox_check(sb, op, error) < 0)
        return -1;
    char *a = dk_sandbox_path(sb, path, op, error), *f = NULL;
    uint32_t mode = 0;
    if (!a)
        return -1;
    int r = resolve(sb, ctx, a, &f, &mode, op, error);
    if (r == 0)
        fail_missing(error, sb, op, path);
    if (r > 0 && !(mode & DK_MODE_DIR) != !want_dir) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 want_dir ? "\"%s\" is not a directory" : "\"%s\" is a directory",
                                 path);
        cl_context(err, "path", path);
        r = -1;
    }
    if (r <= 0) {
        free(a);
        free(f);
        return -1;
    }
    *abs = a;
    *final = f;
    return 0;
}

static int read_consume(int rfd, void *ud)
{
    read_job *j = ud;
    sigset_t old;
    dk_sigpipe_block(&old);
    int r = extract_first(rfd, j->fd, j->shown, j->op, j->error);
    dk_sigpipe_restore(&old);
    return r;
}

int dk_read_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                 int fd, sbx_error **error)
{
    const char *op = "read_file";
    struct sbx_plugin_sandbox *sb = sandbox;
    char *abs = NULL, *final = NULL, *apath = NULL;
    int rc = -1;
    if (resolve_existing(sb, ctx, path, 0, op, &abs, &final, error) < 0)
        return -1;
    if (!(apath = archive_path(sb, final, ""))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    read_job job = { .fd = fd, .shown = path, .op = op, .error = error };
    dk_resp resp;
    int crc = 0;
    if (get_via_pipe(sb, ctx, apath, read_consume, &job, &resp, &crc, op, error) < 0) {
        dk_resp_clear(&resp);
        goto out;
    }
    if (resp.status == 404) {
        if (container_gone(sb, ctx, op, error) == 0)
            fail_missing(error, sb, op, path);
    } else if (resp.status != 200) {
        dk_fail_container(error, sb, &resp, DK_CODE_BY_STATUS, op, "cannot read the file");
    } else if (crc == -2) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "the Engine sent no archive for \"%s\"", path);
    } else if (crc == 0) {
        rc = 0;
    }
    dk_resp_clear(&resp);
out:
    free(abs);
    free(final);
    free(apath);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* PUT sources                                                               */
/* ------------------------------------------------------------------------ */

static int64_t pad_of(int64_t size)
{
    return (BLOCK - size % BLOCK) % BLOCK;
}

/* One-entry tar: header bytes, then @data_len bytes from @fd, then padding
 * and two zero blocks. */
typedef struct one_entry {
    cl_buf header;
    size_t hdr_off;
    int fd;
    int64_t data_left;
    int64_t tail_left;      /* padding + end of archive */
    dk_bound bound;
    const char *op;
    sbx_error **error;
} one_entry;

static ssize_t one_entry_source(void *ud, char *buf, size_t cap)
{
    one_entry *o = ud;
    if (o->hdr_off < o->header.len) {
        size_t n = o->header.len - o->hdr_off;
        if (n > cap)
            n = cap;
        memcpy(buf, o->header.data + o->hdr_off, n);
        o->hdr_off += n;
        return (ssize_t)n;
    }
    if (o->data_left > 0) {
        size_t want = (int64_t)cap < o->data_left ? cap : (size_t)o->data_left;
        for (;;) {
            ssize_t n = read(o->fd, buf, want);
            if (n > 0) {
                o->data_left -= n;
                return n;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0)
                cl_fail(o->error, SBX_ERROR_WORKSPACE, o->op,
                        "the data ended %lld bytes early (the file shrank?)",
                        (long long)o->data_left);
            else
                cl_fail(o->error, SBX_ERROR_WORKSPACE, o->op, "reading the data: %s",
                        strerror(errno));
            return -1;
        }
    }
    if (o->tail_left > 0) {
        size_t n = (int64_t)cap < o->tail_left ? cap : (size_t)o->tail_left;
        memset(buf, 0, n);
        o->tail_left -= (int64_t)n;
        return (ssize_t)n;
    }
    return 0;
}

/* The header bytes (PAX + ustar) of one entry, from the tar helper
 * library: names are bytes, whatever the locale. */
static int entry_header(const char *name, mode_t type, uint32_t mode, int64_t size,
                        cl_buf *out, const char *op, sbx_error **error)
{
    sbx_fs_env env = { cl_host, NULL, op };
    unsigned char *h = NULL;
    size_t len = 0;
    if (sbx_tar_entry_header(&env, name, type == AE_IFDIR ? S_IFDIR : S_IFREG, mode, size,
                             (int64_t)time(NULL), &h, &len, error) < 0)
        return -1;
    int rc = cl_buf_append(out, h, len);
    free(h);
    if (rc < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return rc < 0 ? -1 : 0;
}

/* PUT /containers/{id}/archive?path=@dir with @src. */
static int archive_put(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *dir,
                       dk_source_fn src, void *ud, int64_t len, const char *shown,
                       const char *op, sbx_error **error)
{
    char *path = archive_path(sb, dir, "");
    if (!path) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    dk_req req = { .method = "PUT", .path = path, .source = src, .source_ud = ud,
                   .source_len = len };
    dk_resp r;
    int rc = dk_request(sb->client, ctx, &req, &r, op, error);
    free(path);
    if (rc < 0)
        return -1;
    if (r.status != 200) {
        rc = -1;
        if (r.status == 404 && container_gone(sb, ctx, op, error) != 0) {
            /* the container is gone: error made */
        } else {
            sbx_error *err = dk_fail_container(error, sb, &r, r.status == 403 || r.status == 400
                                               || r.status == 500 || r.status == 404
                                               ? SBX_ERROR_INVALID_ARGUMENT : SBX_ERROR_WORKSPACE,
                                               op, shown);
            cl_context(err, "path", shown);
        }
    }
    dk_resp_clear(&r);
    return rc;
}

/* Makes directory @abs (and its parents) with a one-entry tar at "/". */
static int make_dir(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *abs,
                    const char *shown, const char *op, sbx_error **error)
{
    one_entry o = { .fd = -1, .op = op, .error = error };
    const char *rel = abs;
    while (*rel == '/')
        rel++;
    if (!*rel)
        return 0;
    char *name;
    if (asprintf(&name, "%s/", rel) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int rc = entry_header(name, AE_IFDIR, 0755, 0, &o.header, op, error);
    free(name);
    if (rc == 0) {
        o.tail_left = 2 * BLOCK;
        rc = archive_put(sb, ctx, "/", one_entry_source, &o,
                         (int64_t)o.header.len + o.tail_left, shown, op, error);
    }
    cl_buf_clear(&o.header);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* write_file                                                                */
/* ------------------------------------------------------------------------ */

/* A descriptor of a regular file holding the rest of @fd: @fd itself when it
 * is one (from its offset), else an unlinked temporary copy. */
static int sized_source(int fd, int *owned, int64_t *size, const char *op, sbx_error **error)
{
    struct stat st;
    *owned = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t cur = lseek(fd, 0, SEEK_CUR);
        if (cur >= 0) {
            *size = st.st_size > cur ? (int64_t)(st.st_size - cur) : 0;
            return fd;
        }
    }
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    int t = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (t < 0) {
        char *tmpl;
        if (asprintf(&tmpl, "%s/sbx-docker-XXXXXX", dir) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
        t = mkostemp(tmpl, O_CLOEXEC);
        if (t >= 0)
            unlink(tmpl);
        free(tmpl);
    }
    if (t < 0) {
        cl_fail(error, SBX_ERROR_WORKSPACE, op, "cannot make a temporary file in %s: %s", dir,
                strerror(errno));
        return -1;
    }
    char *buf = malloc(65536);
    int64_t total = 0;
    if (!buf) {
        close(t);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    for (;;) {
        ssize_t n = read(fd, buf, 65536);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = { .fd = fd, .events = POLLIN };
            poll(&p, 1, -1);
            continue;
        }
        if (n <= 0) {
            if (n < 0) {
                cl_fail(error, SBX_ERROR_WORKSPACE, op, "reading the data: %s", strerror(errno));
                free(buf);
                close(t);
                return -1;
            }
            break;
        }
        if (dk_write_all(t, buf, (size_t)n, -1, NULL) < 0) {
            cl_fail(error, SBX_ERROR_WORKSPACE, op, "spooling the data to %s: %s", dir,
                    strerror(errno));
            free(buf);
            close(t);
            return -1;
        }
        total += n;
    }
    free(buf);
    lseek(t, 0, SEEK_SET);
    *size = total;
    *owned = t;
    return t;
}

/* ------------------------------------------------------------------------ */
/* Ownership (CASE-45)                                                       */
/* ------------------------------------------------------------------------ */

/*
 * The Engine extracts an archive as root and keeps the entries' owners
 * (the library writes owner 0), so without more a file the caller wrote
 * belongs to root while commands run as the image's USER, who then cannot
 * change it. When the container's default user is not root, what a file
 * call made (the file, the directories it made for it, the entries an
 * upload added or replaced) is given to that user's uid and gid by a
 * short command run as root afterwards; what was there before keeps its
 * owner and mode.
 */
#define OWNER_SECS 60.0

/** Stores the default user's "UID:GID" in @out ("" when root), asking
 *  the container once per handle (`id -u; id -g`). 0 or -1. */
static int owner_get(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, char out[32],
                     const char *op, sbx_error **error)
{
    pthread_mutex_lock(&sb->lock);
    int known = sb->owner_known;
    if (known)
        memcpy(out, sb->owner, 32);
    pthread_mutex_unlock(&sb->lock);
    if (known)
        return 0;
    static const char *const argv[] = { "sh", "-c", "id -u; id -g", NULL };
    cl_buf o = { 0 }, e = { 0 };
    int code = -1;
    unsigned uid = 0, gid = 0;
    if (dk_exec_capture(sb, ctx, argv, OWNER_SECS, 4096, &o, &e, &code, op, error) < 0) {
        cl_buf_clear(&o);
        cl_buf_clear(&e);
        return -1;
    }
    int ok = code == 0 && o.data && sscanf(o.data, "%u %u", &uid, &gid) == 2;
    cl_buf_clear(&o);
    cl_buf_clear(&e);
    if (!ok) {
        cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                "cannot learn the container's user (`id -u; id -g` exited %d)", code);
        return -1;
    }
    if (uid == 0 && gid == 0)
        out[0] = '\0';
    else
        snprintf(out, 32, "%u:%u", uid, gid);
    pthread_mutex_lock(&sb->lock);
    memcpy(sb->owner, out, 32);
    sb->owner_known = 1;
    pthread_mutex_unlock(&sb->lock);
    return 0;
}

/** Runs `sh -c SCRIPT sh ARGS...` as root; its stdout (trimmed) in *@out
 *  when @out is not NULL (new string). 0, or -1 with a workspace error
 *  naming @shown. */
static int root_script(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *script,
                       const char *const *args, char **out, const char *shown, const char *op,
                       sbx_error **error)
{
    const char *argv[10] = { "sh", "-c", script, "sh" };
    size_t n = 4;
    for (size_t i = 0; args[i] && n < 9; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    cl_buf o = { 0 }, e = { 0 };
    int code = -1;
    int rc = dk_exec_capture_as(sb, ctx, "0:0", argv, OWNER_SECS, (size_t)1 << 20, &o, &e, &code,
                                op, error);
    if (rc == 0 && code != 0) {
        sbx_error *err = cl_fail(error, SBX_ERROR_WORKSPACE, op,
                                 "cannot give \"%s\" to the container's user (exit %d): %.*s",
                                 shown, code, (int)(e.len > 300 ? 300 : e.len),
                                 e.data ? e.data : "");
        cl_context(err, "path", shown);
        rc = -1;
    }
    if (rc == 0 && out) {
        size_t len = o.len;
        while (len && o.data[len - 1] == '\n')
            len--;
        *out = strndup(o.data ? o.data : "", len);
        if (!*out) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            rc = -1;
        }
    }
    cl_buf_clear(&o);
    cl_buf_clear(&e);
    return rc;
}

/* $1: an absolute path; prints the deepest of its ancestors that exists. */
static const char existing_ancestor[] =
    "d=${1%/*}; [ -n \"$d\" ] || d=/\n"
    "while [ ! -e \"$d\" ]; do d=${d%/*}; [ -n \"$d\" ] || d=/; done\n"
    "printf '%s\\n' \"$d\"\n";

/* $1 UID:GID, $2 the ancestor that existed, $3 the path written: the path
 * and the directories made between them get the owner. */
static const char give_path[] =
    "u=$1; e=$2; p=$3\n"
    "chown -h \"$u\" \"$p\" || exit 1\n"
    "d=${p%/*}\n"
    "while [ -n \"$d\" ] && [ \"$d\" != \"$e\" ]; do chown \"$u\" \"$d\" || exit 1; d=${d%/*}; done\n";

/* $1 a directory (may not exist yet): writes the inode numbers under it
 * to a new file and prints that file's path and the deepest existing
 * ancestor of $1. */
static const char list_before[] =
    "f=$(mktemp /tmp/.sbx-owner-XXXXXX) || exit 1\n"
    "if [ -e \"$1\" ]; then find \"$1\" -xdev -exec stat -c %i {} + > \"$f\" || exit 1; fi\n"
    "d=$1\n"
    "while [ ! -e \"$d\" ]; do d=${d%/*}; [ -n \"$d\" ] || d=/; done\n"
    "printf '%s\\n%s\\n' \"$f\" \"$d\"\n";

/* $1 UID:GID, $2 the directory uploaded into, $3 the inode list, $4 its
 * deepest ancestor that existed: every entry under $2 not in the list, and
 * the directories made above it, get the owner; the list goes. */
static const char give_new[] =
    "u=$1; t=$2; f=$3; e=$4\n"
    "find \"$t\" -xdev -exec stat -c '%i %n' {} + | awk -v F=\"$f\" "
    "'BEGIN { while ((getline l < F) > 0) s[l] = 1 } !($1 in s) { sub(/^[0-9]+ /, \"\"); "
    "print }' | while IFS= read -r p; do chown -h \"$u\" \"$p\" || exit 1; done || exit 1\n"
    "rm -f \"$f\"\n"
    "if [ \"$e\" != \"$t\" ]; then d=${t%/*}\n"
    "  while [ -n \"$d\" ] && [ \"$d\" != \"$e\" ]; do chown \"$u\" \"$d\" || exit 1; "
    "d=${d%/*}; done\nfi\n";

int dk_write_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                  int fd, uint32_t mode, sbx_error **error)
{
    const char *op = "write_file";
    struct sbx_plugin_sandbox *sb = sandbox;
    if (dk_sandbox_check(sb, op, error) < 0)
        return -1;
    char *abs = dk_sandbox_path(sb, path, op, error);
    if (!abs)
        return -1;
    int rc = -1, owned = -1;
    one_entry o = { .fd = -1, .op = op, .error = error };
    const char *rel = abs;
    while (*rel == '/')
        rel++;
    size_t rl = strlen(rel);
    if (!*rel || rel[rl - 1] == '/') {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "\"%s\" does not name a file", path);
        cl_context(err, "path", path);
        goto out;
    }
    int64_t size = 0;
    o.fd = sized_source(fd, &owned, &size, op, error);
    if (o.fd < 0)
        goto out;
    if (entry_header(rel, AE_IFREG, mode, size, &o.header, op, error) < 0)
        goto out;
    o.data_left = size;
    o.tail_left = pad_of(size) + 2 * BLOCK;
    char owner[32], *ancestor = NULL;
    if (owner_get(sb, ctx, owner, op, error) < 0)
        goto out;
    if (owner[0]) {
        const char *args[] = { abs, NULL };
        if (root_script(sb, ctx, existing_ancestor, args, &ancestor, path, op, error) < 0)
            goto out;
    }
    rc = archive_put(sb, ctx, "/", one_entry_source, &o,
                     (int64_t)o.header.len + size + o.tail_left, path, op, error);
    if (rc == 0 && owner[0]) {
        const char *args[] = { owner, ancestor, abs, NULL };
        rc = root_script(sb, ctx, give_path, args, NULL, path, op, error);
    }
    free(ancestor);
out:
    if (owned >= 0)
        close(owned);
    cl_buf_clear(&o.header);
    free(abs);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* upload_tar / download_tar                                                 */
/* ------------------------------------------------------------------------ */

typedef struct fd_source {
    int fd;
    dk_bound bound;
    const char *op;
    sbx_error **error;
} fd_source;

static ssize_t fd_source_read(void *ud, char *buf, size_t cap)
{
    fd_source *s = ud;
    for (;;) {
        ssize_t n = read(s->fd, buf, cap);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            cl_fail(s->error, SBX_ERROR_WORKSPACE, s->op, "reading the tar stream: %s",
                    strerror(errno));
            return -1;
        }
        struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN },
                               { .fd = s->bound.cancel_fd, .events = POLLIN } };
        int r = poll(p, s->bound.cancel_fd >= 0 ? 2 : 1, dk_bound_ms(&s->bound, -1));
        if (r == 0 || (r > 0 && s->bound.cancel_fd >= 0 && p[1].revents)) {
            dk_fail_bound(s->error, &s->bound, s->op, "reading the tar stream");
            return -1;
        }
    }
}

/* Makes sure @abs is a directory (creating it when missing). */
static int ensure_dir(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *abs,
                      const char *shown, const char *op, sbx_error **error)
{
    char *final = NULL;
    uint32_t mode = 0;
    int r = resolve(sb, ctx, abs, &final, &mode, op, error);
    free(final);
    if (r < 0)
        return -1;
    if (r == 0)
        return make_dir(sb, ctx, abs, shown, op, error);
    if (!(mode & DK_MODE_DIR)) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "\"%s\" is not a directory", shown);
        cl_context(err, "path", shown);
        return -1;
    }
    return 0;
}

int dk_upload_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                  int fd, sbx_error **error)
{
    const char *op = "upload_tar";
    struct sbx_plugin_sandbox *sb = sandbox;
    if (dk_sandbox_check(sb, op, error) < 0)
        return -1;
    char *abs = dk_sandbox_path(sb, path, op, error);
    if (!abs)
        return -1;
    int rc = -1;
    char owner[32], *before = NULL;
    if (owner_get(sb, ctx, owner, op, error) < 0)
        goto out;
    if (owner[0]) {
        const char *args[] = { abs, NULL };
        if (root_script(sb, ctx, list_before, args, &before, path, op, error) < 0)
            goto out;
    }
    if (ensure_dir(sb, ctx, abs, path, op, error) == 0) {
        fd_source s = { .fd = fd, .bound = dk_bound_make(ctx, 0), .op = op, .error = error };
        rc = archive_put(sb, ctx, abs, fd_source_read, &s, -1, path, op, error);
    }
    if (before) {
        char *nl = strchr(before, '\n');
        if (nl)
            *nl = '\0';
        const char *args[] = { owner, abs, before, nl ? nl + 1 : "/", NULL };
        if (rc == 0)
            rc = root_script(sb, ctx, give_new, args, NULL, path, op, error);
        else
            root_script(sb, ctx, "rm -f \"$3\"", args, NULL, path, op, NULL);
    }
out:
    free(before);
    free(abs);
    return rc;
}

typedef struct fd_sink {
    int fd;
    dk_bound bound;
    const char *op;
    sbx_error **error;
} fd_sink;

static int fd_sink_write(void *ud, const char *p, size_t n)
{
    fd_sink *s = ud;
    if (dk_write_all(s->fd, p, n, -1, &s->bound) == 0)
        return 0;
    if (errno == ECANCELED || errno == ETIMEDOUT)
        dk_fail_bound(s->error, &s->bound, s->op, "writing the tar stream");
    else
        cl_fail(s->error, SBX_ERROR_WORKSPACE, s->op, "writing the tar stream: %s",
                strerror(errno));
    return -1;
}

int dk_download_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                    int fd, sbx_error **error)
{
    const char *op = "download_tar";
    struct sbx_plugin_sandbox *sb = sandbox;
    char *abs = NULL, *final = NULL, *apath = NULL;
    int rc = -1;
    if (resolve_existing(sb, ctx, path, 1, op, &abs, &final, error) < 0)
        return -1;
    size_t fl = strlen(final);
    if (!(apath = archive_path(sb, final, fl && final[fl - 1] == '/' ? "." : "/."))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto out;
    }
    fd_sink s = { .fd = fd, .bound = dk_bound_make(ctx, 0), .op = op, .error = error };
    dk_req req = { .method = "GET", .path = apath, .sink = fd_sink_write, .sink_ud = &s };
    dk_resp resp;
    sigset_t old;
    dk_sigpipe_block(&old);     /* a closed reader is EPIPE, not a signal */
    int got = dk_request(sb->client, ctx, &req, &resp, op, error);
    dk_sigpipe_restore(&old);
    if (got < 0)
        goto out;
    if (resp.status == 404) {
        if (container_gone(sb, ctx, op, error) == 0)
            fail_missing(error, sb, op, path);
    } else if (resp.status != 200) {
        dk_fail_container(error, sb, &resp, DK_CODE_BY_STATUS, op, "cannot read the directory");
    } else {
        rc = 0;
    }
    dk_resp_clear(&resp);
out:
    free(abs);
    free(final);
    free(apath);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* list_files                                                                */
/* ------------------------------------------------------------------------ */

/* sh -c LIST sbx-ls DIR: NUL-terminated records "TYPE SIZE MODE NAME";
 * exit 3 when DIR is missing, 4 when it is not a directory. */
static const char list_script[] =
    "cd -- \"$1\" 2>/dev/null || { [ -e \"$1\" ] && exit 4; exit 3; }\n"
    "if find . -maxdepth 0 -printf '' 2>/dev/null; then\n"
    "  exec find . -mindepth 1 -maxdepth 1 -printf '%y %s %m %P\\0'\n"
    "fi\n"
    "for f in .* *; do\n"
    "  case $f in .|..) continue ;; esac\n"
    "  [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
    "  if [ -L \"$f\" ]; then t=l; elif [ -d \"$f\" ]; then t=d; elif [ -f \"$f\" ]; then t=f;"
    " else t=o; fi\n"
    "  printf '%s %s %s %s\\0' \"$t\" \"$(stat -c %s -- \"$f\")\" \"$(stat -c %a -- \"$f\")\""
    " \"$f\"\n"
    "done\n";

typedef struct list_ent {
    const char *name;
    int is_dir;
    int64_t size;
    uint32_t mode;
} list_ent;

static int ent_cmp(const void *a, const void *b)
{
    return strcmp(((const list_ent *)a)->name, ((const list_ent *)b)->name);
}

int dk_list_files(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                  sbx_plugin_file_fn fn, void *user_data, sbx_error **error)
{
    const char *op = "list_files";
    struct sbx_plugin_sandbox *sb = sandbox;
    if (dk_sandbox_check(sb, op, error) < 0)
        return -1;
    char *abs = dk_sandbox_path(sb, path, op, error);
    if (!abs)
        return -1;
    const char *argv[] = { "/bin/sh", "-c", list_script, "sbx-ls", abs, NULL };
    cl_buf out = { 0 }, err = { 0 };
    list_ent *ents = NULL;
    size_t n = 0, cap = 0;
    int code = -1, rc = -1;
    if (dk_exec_capture(sb, ctx, argv, LIST_SECS, LIST_CAP, &out, &err, &code, op, error) < 0)
        goto out;
    if (code == 3) {
        fail_missing(error, sb, op, path);
        goto out;
    }
    if (code == 4) {
        sbx_error *e = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "\"%s\" is not a directory", path);
        cl_context(e, "path", path);
        goto out;
    }
    if (code != 0) {
        cl_fail(error, SBX_ERROR_WORKSPACE, op, "listing \"%s\" failed (exit %d): %.200s", path,
                code, err.data ? err.data : "");
        goto out;
    }
    for (size_t off = 0; off < out.len;) {
        char *rec = out.data + off;
        size_t len = strlen(rec);
        off += len + 1;
        char type;
        long long size;
        unsigned mode;
        int used = 0;
        if (sscanf(rec, "%c %lld %o %n", &type, &size, &mode, &used) != 3 || used <= 0
            || !rec[used])
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            list_ent *ne = realloc(ents, cap * sizeof(*ents));
            if (!ne) {
                cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
                goto out;
            }
            ents = ne;
        }
        ents[n++] = (list_ent){ .name = rec + used, .is_dir = type == 'd', .size = size,
                                .mode = mode & 07777 };
    }
    if (n > 1)
        qsort(ents, n, sizeof(*ents), ent_cmp);
    rc = 0;
    for (size_t i = 0; i < n; i++) {
        sbx_plugin_file_info info = { .struct_size = sizeof(info), .name = ents[i].name,
                                      .is_dir = ents[i].is_dir, .size = ents[i].size,
                                      .mode = ents[i].mode };
        if (fn(&info, user_data) != 0)
            break;
    }
out:
    free(ents);
    cl_buf_clear(&out);
    cl_buf_clear(&err);
    free(abs);
    return rc;
}
