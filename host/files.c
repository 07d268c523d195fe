/*
 * host/files.c — the file calls of <sbx/sbx.h>: list_files, read_file,
 * write_file, upload/download_file, upload/download_dir and
 * sbx_extract_tar_fd.
 *
 * Each call uses the plugin's slot when it has one, else a generic
 * fallback built on exec, so a backend that can only run commands still
 * moves files:
 *
 *   list       find PATH -mindepth 1 -maxdepth 1 -printf '%y %s %m %f\0'
 *   read       cat -- PATH, its stdout straight to the caller's descriptor
 *   write      mkdir -p -- DIR && cat > PATH && chmod -- MODE PATH, stdin
 *              straight from the caller's descriptor
 *   mode       stat -L -c %a -- PATH (for download_file)
 *   dirs       tar -xpf - / tar -cf - . in the directory
 *
 * Every path reaches the command as an argument ("$1"), never spliced into
 * the script. Where the sandbox has a root (local), absolute sandbox paths
 * are taken under it and ".." may not climb above it.
 *
 * Bytes move through descriptors: a call that produces a stream (a slot
 * writing to a descriptor, a tar writer) runs on a helper thread feeding a
 * pipe that the calling thread consumes, so memory stays bounded. The
 * helper thread blocks every signal, so a reader that stops early gives it
 * EPIPE, never SIGPIPE. Of two failures the first is reported (the second
 * is its consequence). Directory streams coming out of a sandbox always go
 * through the checked extractor of host/archive.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "archive.h"
#include "internal.h"

#define FILES_STDERR_LIMIT ((size_t)64 << 10)  /* stderr kept from a fallback command */
#define FILES_PIPE_SIZE (1 << 20)              /* asked for the transfer pipes */

struct sbx_file_info {
    char *name;
    char *path;
    int is_dir;
    int64_t size;
    uint32_t mode;
};

/* ---------------------------------------------------------------- helpers */

/* Fills backend and op into @err and hands it to the caller's @error. */
static void
files_finish(sbx_error **error, sbx_error *err, sbx_sandbox *sandbox, const char *op)
{
    sbx_error_fill(err, sandbox && sandbox->client ? sandbox->client->backend : NULL, op);
    sbx_error_propagate(error, err);
}

/* The entry gate: usable sandbox, non-empty @path. */
static int
files_begin(sbx_sandbox *sandbox, const char *path, const char *what, sbx_error **err)
{
    if (sbx_sandbox_check_usable(sandbox, err) < 0)
        return -1;
    if (!path || !*path) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "%s is %s", what,
                      path ? "empty" : "NULL");
        return -1;
    }
    return 0;
}

static sbx_fs_env
host_env(const char *op)
{
    sbx_fs_env env = { sbx_host_services_get(), NULL, op };

    return env;
}

/* ---------------------------------------------------------------- pumps */

typedef int (*pump_fn)(void *arg, int fd, sbx_error **err);

typedef struct pump_side {
    pump_fn fn;
    void *arg;
    int fd;
    int rc;
    unsigned order;             /* when it failed, among the two sides */
    sbx_error *err;
    unsigned *seq;
    int scope_fd;               /* the caller's call scope, for the helper thread */
    double scope_deadline;
} pump_side;

static void
pump_call(pump_side *s)
{
    s->rc = s->fn(s->arg, s->fd, &s->err);
    if (s->rc < 0)
        s->order = __atomic_fetch_add(s->seq, 1, __ATOMIC_SEQ_CST);
    sbx_close_fd(&s->fd);       /* the other side sees EOF / EPIPE now */
}

static void *
pump_thread(void *arg)
{
    pump_side *s = arg;

    /* The caller's cancellation and deadline reach the plugin calls this
     * side makes too. */
    sbx_call_scope_set(s->scope_fd, s->scope_deadline);
    pump_call(s);
    sbx_call_scope_set(-1, 0);
    return NULL;
}

/*
 * Runs @producer on a helper thread, writing into a pipe, and @consumer on
 * this thread, reading from it. Each side's descriptor is closed when it
 * returns. Returns 0 when both succeeded, else -1 with the first failure
 * in *@err.
 */
static int
pump_run(pump_fn producer, void *parg, pump_fn consumer, void *carg, sbx_error **err)
{
    unsigned seq = 0;
    pump_side p = { producer, parg, -1, 0, 0, NULL, &seq, -1, 0 };
    pump_side c = { consumer, carg, -1, 0, 0, NULL, &seq, -1, 0 };
    sigset_t all, old;
    pthread_t tid;
    int fds[2], rc;

    if (pipe2(fds, O_CLOEXEC) < 0) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "cannot create a pipe: %s", strerror(errno));
        return -1;
    }
    fcntl(fds[1], F_SETPIPE_SZ, FILES_PIPE_SIZE);   /* larger writes; best effort */
    c.fd = fds[0];
    p.fd = fds[1];
    sbx_call_scope_get(&p.scope_fd, &p.scope_deadline);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&tid, NULL, pump_thread, &p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(fds[0]);
        close(fds[1]);
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "cannot start a thread: %s", strerror(rc));
        return -1;
    }
    pump_call(&c);
    pthread_join(tid, NULL);

    if (p.rc < 0 && (c.rc >= 0 || p.order < c.order)) {
        sbx_error_propagate(err, p.err);
        sbx_error_free(c.err);
        return -1;
    }
    if (c.rc < 0) {
        sbx_error_propagate(err, c.err);
        sbx_error_free(p.err);
        return -1;
    }
    sbx_error_free(p.err);
    sbx_error_free(c.err);
    return 0;
}

/* ---------------------------------------------------------------- fallbacks */

/* 1 when the plugin can run commands (the fallbacks' requirement). */
static int
can_exec(const sbx_plugin *plugin)
{
    return SBX_SLOT(plugin, exec_start) && SBX_SLOT(plugin, exec_wait);
}

static int
unsupported(sbx_sandbox *sandbox, const char *what, sbx_error **err)
{
    sbx_set_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, NULL,
                  "backend \"%s\" cannot %s (no file slot and no exec)",
                  sandbox->client->backend, what);
    return -1;
}

/*
 * The path a command in the sandbox uses for sandbox path @path: under the
 * root where the sandbox has one (absolute and relative paths alike, as
 * the local plugin resolves them), else @path itself, with "./" before a
 * relative path so that no command takes it for an option. Where there is
 * a root, ".." may not climb above it (invalid_argument).
 */
static char *
command_path(sbx_sandbox *sandbox, const char *path, sbx_error **err)
{
    const char *root = sandbox->root ? sandbox->root : "";
    const char *p = path;
    long depth = 0;

    if (*root) {
        while (*p) {
            const char *c;
            size_t len;

            while (*p == '/')
                p++;
            c = p;
            while (*p && *p != '/')
                p++;
            len = (size_t)(p - c);
            if (len == 2 && c[0] == '.' && c[1] == '.') {
                if (--depth < 0) {
                    sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                                 "path \"%s\" leads outside the sandbox root",
                                                 path);
                    sbx_error_add_context(e, "path", path);
                    return NULL;
                }
            } else if (len > 0 && !(len == 1 && c[0] == '.')) {
                depth++;
            }
        }
        return sbx_asprintf("%s%s%s", root, path[0] == '/' ? "" : "/", path);
    }
    return path[0] == '/' ? sbx_strdup(path) : sbx_asprintf("./%s", path);
}

/*
 * Runs `/bin/sh -c SCRIPT sbx-files ARG1 [ARG2]` without a timeout, stdin
 * from @in_fd and stdout to @out_fd (-1: EOF / captured), as @user (NULL:
 * the sandbox's default user). Returns the result or NULL.
 */
static sbx_result *
run_script(sbx_sandbox *sandbox, const char *script, const char *arg1, const char *arg2,
           int in_fd, int out_fd, const char *user, sbx_error **err)
{
    const char *argv[] = { "/bin/sh", "-c", script, "sbx-files", arg1, arg2, NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;

    rq.argv = argv;
    rq.user = user;
    rq.timeout_secs = -1;
    rq.output_limit = out_fd >= 0 ? FILES_STDERR_LIMIT : SBX_DEFAULT_OUTPUT_LIMIT;
    return sbx_exec_run_fds(sandbox, &rq, in_fd, out_fd, err);
}

/*
 * The fallback scripts' exit codes: 0 done, 3 missing (not_found), 4 wrong
 * kind (invalid_argument: @kind says what), anything else failed
 * (execution_failed with the command's stderr). Frees @r.
 */
static int
script_status(sbx_result *r, const char *path, const char *command, const char *kind,
              sbx_error **err)
{
    int code = sbx_result_get_exit_code(r);
    sbx_error *e = NULL;

    if (code == 0 && !sbx_result_is_timed_out(r)) {
        sbx_result_free(r);
        return 0;
    }
    if (code == 3) {
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, NULL, "no such file or directory: \"%s\"",
                          path);
    } else if (code == 4) {
        e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "\"%s\" %s", path, kind);
    } else {
        size_t len;
        const char *msg = sbx_result_get0_stderr(r, &len);

        while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
            len--;
        if (len > 512)
            len = 512;
        e = sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, NULL,
                          "%s failed in the sandbox for \"%s\" (exit code %d)%s%.*s", command,
                          path, code, len ? ": " : "", (int)len, msg);
        sbx_error_add_contextf(e, "exit_code", "%d", code);
    }
    sbx_error_add_context(e, "path", path);
    sbx_result_free(r);
    return -1;
}

/* Runs a fallback script on sandbox path @path as @user (NULL: the
 * default user) and checks its status. */
static int
run_on_path(sbx_sandbox *sandbox, const char *script, const char *path, const char *arg2,
            int in_fd, int out_fd, const char *user, const char *command, const char *kind,
            sbx_result **keep, sbx_error **err)
{
    char *cpath = command_path(sandbox, path, err);
    sbx_result *r;

    if (!cpath)
        return -1;
    r = run_script(sandbox, script, cpath, arg2, in_fd, out_fd, user, err);
    if (!r && user && err)
        sbx_error_add_context(*err, "path", path);
    free(cpath);
    if (!r)
        return -1;
    if (keep && sbx_result_get_exit_code(r) == 0 && !sbx_result_is_timed_out(r)) {
        *keep = r;
        return 0;
    }
    return script_status(r, path, command, kind, err);
}

static const char list_script[] =
    "p=$1; [ -e \"$p\" ] || exit 3; [ -d \"$p\" ] || exit 4; "
    "exec find -H \"$p\" -mindepth 1 -maxdepth 1 -printf '%y %s %m %f\\0'";
static const char read_script[] =
    "p=$1; [ -e \"$p\" ] || exit 3; [ -d \"$p\" ] && exit 4; exec cat -- \"$p\"";
static const char write_script[] =
    "p=$1; [ -d \"$p\" ] && exit 4; d=$(dirname -- \"$p\") && mkdir -p -- \"$d\" && "
    "cat > \"$p\" && chmod -- \"$2\" \"$p\"";
static const char mode_script[] =
    "p=$1; [ -e \"$p\" ] || exit 3; [ -d \"$p\" ] && exit 4; exec stat -L -c %a -- \"$p\"";
static const char untar_script[] =
    "p=$1; [ -e \"$p\" ] && [ ! -d \"$p\" ] && exit 4; "
    "mkdir -p -- \"$p\" && cd -- \"$p\" && exec tar -xpf -";
static const char tar_script[] =
    "p=$1; [ -e \"$p\" ] || exit 3; [ -d \"$p\" ] || exit 4; cd -- \"$p\" && exec tar -cf - .";

/* ---------------------------------------------------------------- listing */

typedef struct file_list {
    sbx_file_info **items;
    size_t count;
    size_t cap;
    const char *dir;            /* the listed sandbox path */
    int oom;
} file_list;

static void
file_info_free(sbx_file_info *info)
{
    if (!info)
        return;
    free(info->name);
    free(info->path);
    free(info);
}

static int
file_list_add(file_list *l, const char *name, size_t name_len, int is_dir, int64_t size,
              uint32_t mode)
{
    sbx_file_info *info;
    size_t dl = strlen(l->dir);

    if (l->count == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 32;
        sbx_file_info **grown = realloc(l->items, ncap * sizeof(*grown));

        if (!grown)
            goto oom;
        l->items = grown;
        l->cap = ncap;
    }
    if (!(info = calloc(1, sizeof(*info))))
        goto oom;
    info->name = sbx_strndup(name, name_len);
    info->path = sbx_asprintf("%s%s%.*s", l->dir, dl && l->dir[dl - 1] == '/' ? "" : "/",
                              (int)name_len, name);
    if (!info->name || !info->path) {
        file_info_free(info);
        goto oom;
    }
    info->is_dir = is_dir;
    info->size = size;
    info->mode = mode;
    l->items[l->count++] = info;
    return 0;
oom:
    l->oom = 1;
    return -1;
}

static int
list_cb(const sbx_plugin_file_info *info, void *user_data)
{
    file_list *l = user_data;

    if (!info || !info->name)
        return 0;
    return file_list_add(l, info->name, strlen(info->name), info->is_dir != 0, info->size,
                         info->mode & 07777) < 0;
}

static int
cmp_info(const void *a, const void *b)
{
    return strcmp((*(sbx_file_info *const *)a)->name, (*(sbx_file_info *const *)b)->name);
}

/* Parses the fallback's records "TYPE SIZE MODE NAME\0". */
static int
parse_listing(file_list *l, const char *out, size_t len, sbx_error **err)
{
    const char *p = out, *end = out + len;

    while (p < end) {
        const char *rec = p, *nul = memchr(p, '\0', (size_t)(end - p)), *name;
        char type;
        long long size;
        unsigned mode;
        int used = 0;

        if (!nul) {
            sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, NULL, "unterminated listing record");
            return -1;
        }
        p = nul + 1;
        if (sscanf(rec, "%c %lld %o %n", &type, &size, &mode, &used) < 3 || used <= 0) {
            sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, NULL, "bad listing record \"%.80s\"",
                          rec);
            return -1;
        }
        name = rec + used;
        if (file_list_add(l, name, (size_t)(nul - name), type == 'd', (int64_t)size,
                          mode & 07777) < 0) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* The plugin's stat_file of sandbox path @path into *@info (zeroed and
 * sized first): 1, 0 when the plugin has no stat_file slot, -1 with its
 * error in *@err (may be NULL). */
static int
stat_through_slot(sbx_sandbox *sandbox, const char *path, sbx_plugin_file_info *info,
                  sbx_error **err)
{
    int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, const char *,
                sbx_plugin_file_info *, sbx_error **);
    sbx_call_ctx ctx;
    sbx_error *e = NULL;

    slot = SBX_SLOT(sandbox->client->plugin, stat_file);
    if (!slot)
        return 0;
    memset(info, 0, sizeof(*info));
    info->struct_size = sizeof(*info);
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    if (slot(sandbox->handle, &ctx, path, info, err ? err : &e) != 0) {
        sbx_error_free(e);
        return -1;
    }
    return 1;
}

/* Whether sandbox path @path is a directory (1), something else (0), or
 * cannot be told (-1: it is not there, or the call failed), from the
 * plugin's stat_file slot, else from mode_script (exit 4: a directory; 0:
 * something else) when the plugin runs commands. */
static int
path_is_dir(sbx_sandbox *sandbox, const char *path)
{
    sbx_plugin_file_info info;
    sbx_error *e = NULL;
    int got = stat_through_slot(sandbox, path, &info, NULL);

    if (got != 0)
        return got < 0 ? -1 : info.is_dir ? 1 : 0;
    if (!can_exec(sandbox->client->plugin))
        return -1;
    char *cpath = command_path(sandbox, path, &e);
    sbx_result *r = cpath ? run_script(sandbox, mode_script, cpath, NULL, -1, -1, NULL, &e)
                          : NULL;
    free(cpath);
    sbx_error_free(e);
    if (!r)
        return -1;
    int code = sbx_result_is_timed_out(r) ? -1 : sbx_result_get_exit_code(r);
    sbx_result_free(r);
    return code == 4 ? 1 : code == 0 ? 0 : -1;
}

/* A plugin's failed read_file (@want_dir 0) or list_files (@want_dir 1)
 * of @path, whose error *@err is configuration, not_found, invalid_argument
 * or execution_failed (providers answer a read of a directory, or a
 * listing of a file, with a 400 or a 404 and a message of their own):
 * when @path is a directory (read) or is there and is not one (list),
 * *@err becomes the API's invalid_argument with the same message on every
 * backend, "\"PATH\" is a directory" or "\"PATH\" is not a directory",
 * path in its context. Other errors (timeouts, authentication, the
 * connection), and a path whose kind cannot be told, stay as they are. */
static void
kind_refusal(sbx_sandbox *sandbox, const char *path, int want_dir, sbx_error **err)
{
    sbx_error_code code;
    int dir;

    if (!err || !*err)
        return;
    code = sbx_error_get_code(*err);
    if (code != SBX_ERROR_CONFIGURATION && code != SBX_ERROR_NOT_FOUND &&
        code != SBX_ERROR_INVALID_ARGUMENT && code != SBX_ERROR_EXECUTION_FAILED)
        return;
    dir = path_is_dir(sandbox, path);
    if (dir < 0 || dir == want_dir)
        return;
    sbx_error_free(*err);
    *err = NULL;
    sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                 want_dir ? "\"%s\" is not a directory" : "\"%s\" is a directory",
                                 path);
    sbx_error_add_context(e, "path", path);
}

/* list_files as @user (NULL: the plain call, through the slot when there
 * is one; else always a command of @user). */
static int
list_files(sbx_sandbox *sandbox, const char *path, const char *user, sbx_file_info ***list,
           size_t *count, sbx_error **error)
{
    static const char op[] = "list_files";
    int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, const char *, sbx_plugin_file_fn,
                void *, sbx_error **);
    file_list l = { .dir = path };
    sbx_error *err = NULL;
    sbx_result *r = NULL;

    if (list)
        *list = NULL;
    if (count)
        *count = 0;
    if (files_begin(sandbox, path, "path", &err) < 0)
        goto fail;
    if (!list || !count) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "list and count must not be NULL");
        goto fail;
    }
    slot = SBX_SLOT(sandbox->client->plugin, list_files);
    if (slot && !user) {
        sbx_call_ctx ctx;

        sbx_call_ctx_init_for(&ctx, sandbox->client);
        if (slot(sandbox->handle, &ctx, path, list_cb, &l, &err) != 0) {
            kind_refusal(sandbox, path, 1, &err);
            sbx_error_ensure(&err, sandbox->client->backend, op);
            goto fail;
        }
        if (l.oom) {
            sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
            goto fail;
        }
    } else if (can_exec(sandbox->client->plugin)) {
        size_t len;
        const char *out;

        if (run_on_path(sandbox, list_script, path, NULL, -1, -1, user, "find",
                        "is not a directory", &r, &err) < 0)
            goto fail;
        if (sbx_result_is_stdout_truncated(r)) {
            sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "listing of \"%s\" is too large", path);
            goto fail;
        }
        out = sbx_result_get0_stdout(r, &len);
        if (parse_listing(&l, out, len, &err) < 0)
            goto fail;
        sbx_result_free(r);
        r = NULL;
    } else {
        unsupported(sandbox, "list files", &err);
        goto fail;
    }
    if (l.count > 1)
        qsort(l.items, l.count, sizeof(*l.items), cmp_info);
    *list = l.items;
    *count = l.count;
    return 0;
fail:
    sbx_result_free(r);
    sbx_file_info_list_free(l.items, l.count);
    sbx_error_replace_op(err, "exec", op);
    files_finish(error, err, sandbox, op);
    return -1;
}

SBX_EXPORT int
sbx_sandbox_list_files(sbx_sandbox *sandbox, const char *path, sbx_file_info ***list,
                       size_t *count, sbx_error **error)
{
    return list_files(sandbox, path, NULL, list, count, error);
}

SBX_EXPORT int
sbx_sandbox_list_files_as(sbx_sandbox *sandbox, const char *path, const char *user,
                          sbx_file_info ***list, size_t *count, sbx_error **error)
{
    return list_files(sandbox, path, user, list, count, error);
}

SBX_EXPORT const char *
sbx_file_info_get0_name(const sbx_file_info *info)
{
    return info ? info->name : NULL;
}

SBX_EXPORT const char *
sbx_file_info_get0_path(const sbx_file_info *info)
{
    return info ? info->path : NULL;
}

SBX_EXPORT int
sbx_file_info_is_dir(const sbx_file_info *info)
{
    return info ? info->is_dir : 0;
}

SBX_EXPORT int64_t
sbx_file_info_get_size(const sbx_file_info *info)
{
    return info ? info->size : -1;
}

SBX_EXPORT uint32_t
sbx_file_info_get_mode(const sbx_file_info *info)
{
    return info ? info->mode : 0;
}

SBX_EXPORT void
sbx_file_info_list_free(sbx_file_info **list, size_t count)
{
    if (!list)
        return;
    for (size_t i = 0; i < count; i++)
        file_info_free(list[i]);
    free(list);
}

/* ---------------------------------------------------------------- read */

/* read_file_to_fd without the entry gate, as @user (NULL: the default
 * user, through the slot when there is one); errors unfilled. */
static int
read_to_fd(sbx_sandbox *sandbox, const char *path, const char *user, int fd, sbx_error **err)
{
    int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, const char *, int, sbx_error **);

    slot = SBX_SLOT(sandbox->client->plugin, read_file);
    if (slot && !user) {
        sbx_call_ctx ctx;

        sbx_call_ctx_init_for(&ctx, sandbox->client);
        if (slot(sandbox->handle, &ctx, path, fd, err) != 0) {
            kind_refusal(sandbox, path, 0, err);
            sbx_error_ensure(err, sandbox->client->backend, "read_file");
            return -1;
        }
        return 0;
    }
    if (can_exec(sandbox->client->plugin))
        return run_on_path(sandbox, read_script, path, NULL, -1, fd, user, "cat",
                           "is a directory", NULL, err);
    return unsupported(sandbox, "read files", err);
}

SBX_EXPORT int
sbx_sandbox_read_file_to_fd(sbx_sandbox *sandbox, const char *path, int fd, sbx_error **error)
{
    sbx_error *err = NULL;

    if (files_begin(sandbox, path, "path", &err) == 0) {
        if (fd < 0)
            sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "bad descriptor %d", fd);
        else if (read_to_fd(sandbox, path, NULL, fd, &err) == 0)
            return 0;
    }
    files_finish(error, err, sandbox, "read_file");
    return -1;
}

typedef struct read_job {
    sbx_sandbox *sandbox;
    const char *path;
    sbx_buf buf;
    const char *user;           /* NULL: the default user */
} read_job;

static int
read_producer(void *arg, int fd, sbx_error **err)
{
    read_job *j = arg;

    return read_to_fd(j->sandbox, j->path, j->user, fd, err);
}

static int
read_consumer(void *arg, int fd, sbx_error **err)
{
    read_job *j = arg;
    char chunk[65536];

    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            sbx_set_error(err, SBX_ERROR_WORKSPACE, NULL, "cannot read \"%s\": %s", j->path,
                          strerror(errno));
            return -1;
        }
        if (n == 0)
            return 0;
        if (sbx_buf_append(&j->buf, chunk, (size_t)n) < 0) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory reading \"%s\"", j->path);
            return -1;
        }
    }
}

/* read_file as @user (NULL: the plain call). */
static int
read_file(sbx_sandbox *sandbox, const char *path, const char *user, char **data, size_t *len,
          sbx_error **error)
{
    read_job j = { sandbox, path, { 0 }, user };
    sbx_error *err = NULL;

    if (data)
        *data = NULL;
    if (len)
        *len = 0;
    if (files_begin(sandbox, path, "path", &err) < 0)
        goto fail;
    if (!data) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "data must not be NULL");
        goto fail;
    }
    if (pump_run(read_producer, &j, read_consumer, &j, &err) < 0)
        goto fail;
    *data = sbx_buf_steal(&j.buf, len);
    if (!*data) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        goto fail;
    }
    return 0;
fail:
    sbx_buf_clear(&j.buf);
    sbx_error_replace_op(err, "exec", "read_file");
    files_finish(error, err, sandbox, "read_file");
    return -1;
}

SBX_EXPORT int
sbx_sandbox_read_file(sbx_sandbox *sandbox, const char *path, char **data, size_t *len,
                      sbx_error **error)
{
    return read_file(sandbox, path, NULL, data, len, error);
}

SBX_EXPORT int
sbx_sandbox_read_file_as(sbx_sandbox *sandbox, const char *path, const char *user, char **data,
                         size_t *len, sbx_error **error)
{
    return read_file(sandbox, path, user, data, len, error);
}

/* ---------------------------------------------------------------- write */

/* write_file_from_fd without the entry gate, as @user (NULL: the default
 * user, through the slot when there is one); errors unfilled. */
static int
write_from_fd(sbx_sandbox *sandbox, const char *path, const char *user, int fd, uint32_t mode,
              sbx_error **err)
{
    int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, const char *, int, uint32_t,
                sbx_error **);

    if (mode > 07777) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "bad mode 0%o (more than 07777)",
                      (unsigned)mode);
        return -1;
    }
    slot = SBX_SLOT(sandbox->client->plugin, write_file);
    if (slot && !user) {
        sbx_call_ctx ctx;

        sbx_call_ctx_init_for(&ctx, sandbox->client);
        if (slot(sandbox->handle, &ctx, path, fd, mode, err) != 0) {
            sbx_error_ensure(err, sandbox->client->backend, "write_file");
            return -1;
        }
        return 0;
    }
    if (can_exec(sandbox->client->plugin)) {
        char m[16];

        snprintf(m, sizeof(m), "%o", (unsigned)mode);
        return run_on_path(sandbox, write_script, path, m, fd, -1, user, "cat",
                           "is a directory", NULL, err);
    }
    return unsupported(sandbox, "write files", err);
}

SBX_EXPORT int
sbx_sandbox_write_file_from_fd(sbx_sandbox *sandbox, const char *path, int fd, uint32_t mode,
                               sbx_error **error)
{
    sbx_error *err = NULL;

    if (files_begin(sandbox, path, "path", &err) == 0) {
        if (fd < 0)
            sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "bad descriptor %d", fd);
        else if (write_from_fd(sandbox, path, NULL, fd, mode, &err) == 0)
            return 0;
    }
    files_finish(error, err, sandbox, "write_file");
    return -1;
}

typedef struct write_job {
    sbx_sandbox *sandbox;
    const char *path;
    const char *data;
    size_t len;
    const char *user;           /* NULL: the default user */
} write_job;

static int
bytes_producer(void *arg, int fd, sbx_error **err)
{
    write_job *j = arg;
    const char *p = j->data;
    size_t left = j->len;

    while (left > 0) {
        ssize_t n = write(fd, p, left > 65536 ? 65536 : left);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            sbx_set_error(err, SBX_ERROR_WORKSPACE, NULL, "cannot send the bytes of \"%s\": %s",
                          j->path, n < 0 ? strerror(errno) : "no progress");
            return -1;
        }
        p += n;
        left -= (size_t)n;
    }
    return 0;
}

static int
write_consumer(void *arg, int fd, sbx_error **err)
{
    write_job *j = arg;

    return write_from_fd(j->sandbox, j->path, j->user, fd, 0644, err);
}

/* write_file as @user (NULL: the plain call). */
static int
write_file(sbx_sandbox *sandbox, const char *path, const char *user, const void *data,
           size_t len, sbx_error **error)
{
    write_job j = { sandbox, path, data, len, user };
    sbx_error *err = NULL;

    if (files_begin(sandbox, path, "path", &err) == 0) {
        if (!data && len)
            sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "data is NULL");
        else if (pump_run(bytes_producer, &j, write_consumer, &j, &err) == 0)
            return 0;
    }
    sbx_error_replace_op(err, "exec", "write_file");
    files_finish(error, err, sandbox, "write_file");
    return -1;
}

SBX_EXPORT int
sbx_sandbox_write_file(sbx_sandbox *sandbox, const char *path, const void *data, size_t len,
                       sbx_error **error)
{
    return write_file(sandbox, path, NULL, data, len, error);
}

SBX_EXPORT int
sbx_sandbox_write_file_as(sbx_sandbox *sandbox, const char *path, const char *user,
                          const void *data, size_t len, sbx_error **error)
{
    return write_file(sandbox, path, user, data, len, error);
}

/* ---------------------------------------------------------------- one file */

SBX_EXPORT int
sbx_sandbox_upload_file(sbx_sandbox *sandbox, const char *local_path, const char *sandbox_path,
                        sbx_error **error)
{
    sbx_error *err = NULL;
    struct stat st;
    int fd = -1;

    if (files_begin(sandbox, sandbox_path, "sandbox_path", &err) < 0)
        goto fail;
    if (!local_path || !*local_path) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "local_path is %s",
                      local_path ? "empty" : "NULL");
        goto fail;
    }
    fd = open(local_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : 0;
        sbx_error *x = sbx_set_error(&err, e == ENOENT ? SBX_ERROR_NOT_FOUND
                                                       : SBX_ERROR_INVALID_ARGUMENT, NULL,
                                     "cannot upload \"%s\": %s", local_path,
                                     e ? strerror(e) : "not a regular file");
        sbx_error_add_context(x, "path", local_path);
        goto fail;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (write_from_fd(sandbox, sandbox_path, NULL, fd, st.st_mode & 0777, &err) < 0)
        goto fail;
    close(fd);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    files_finish(error, err, sandbox, "upload_file");
    return -1;
}

/* The permission bits of sandbox file @path (0644 when the backend cannot
 * tell). Returns 0 or -1 (not_found, a directory, ...). */
static int
sandbox_file_mode(sbx_sandbox *sandbox, const char *path, uint32_t *mode, sbx_error **err)
{
    sbx_plugin_file_info info;
    sbx_result *r = NULL;

    *mode = 0644;
    int got = stat_through_slot(sandbox, path, &info, err);
    if (got < 0) {
        sbx_error_ensure(err, sandbox->client->backend, "stat_file");
        return -1;
    }
    if (got > 0) {
        if (info.is_dir) {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                         "\"%s\" is a directory", path);
            sbx_error_add_context(e, "path", path);
            return -1;
        }
        if (info.mode)
            *mode = info.mode & 0777;
        return 0;
    }
    if (SBX_SLOT(sandbox->client->plugin, read_file) || !can_exec(sandbox->client->plugin))
        return 0;               /* cannot tell: the default */
    if (run_on_path(sandbox, mode_script, path, NULL, -1, -1, NULL, "stat", "is a directory", &r,
                    err) < 0)
        return -1;
    unsigned m = 0;
    if (sscanf(sbx_result_get0_stdout(r, NULL), "%o", &m) == 1)
        *mode = m & 0777;
    sbx_result_free(r);
    return 0;
}

/* Makes the missing directories of @path (mkdir -p), recording those it
 * made in @made (in order) so that they can be removed again. */
static int
mkdir_parents(const char *path, sbx_strv *made, sbx_error **err)
{
    char *copy = sbx_strdup(path);
    size_t len;

    if (!copy) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        return -1;
    }
    len = strlen(copy);
    for (size_t i = 1; i <= len; i++) {
        if (copy[i] != '/' && copy[i] != '\0')
            continue;
        if (copy[i - 1] == '/')
            continue;
        char saved = copy[i];
        copy[i] = '\0';
        if (mkdir(copy, 0777) == 0) {
            if (sbx_strv_push(made, copy) < 0) {
                copy[i] = saved;
                sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
                free(copy);
                return -1;
            }
        } else if (errno != EEXIST) {
            sbx_error *e = sbx_set_error(err, errno == ENOENT || errno == ENOTDIR
                                                  ? SBX_ERROR_INVALID_ARGUMENT
                                                  : SBX_ERROR_WORKSPACE, NULL,
                                         "cannot create directory \"%s\": %s", copy,
                                         strerror(errno));
            sbx_error_add_context(e, "path", copy);
            free(copy);
            return -1;
        }
        copy[i] = saved;
    }
    free(copy);
    return 0;
}

/* Removes the directories mkdir_parents made, deepest first (only when
 * empty). */
static void
unmake_dirs(sbx_strv *made)
{
    for (size_t i = made->count; i > 0; i--)
        rmdir(made->items[i - 1]);
    sbx_strv_clear(made);
}

/* The directory part of @path ("." when none), new string. */
static char *
dir_part(const char *path)
{
    size_t len = strlen(path);

    while (len > 1 && path[len - 1] == '/')
        len--;
    while (len > 0 && path[len - 1] != '/')
        len--;
    while (len > 1 && path[len - 1] == '/')
        len--;
    return len == 0 ? sbx_strdup(".") : sbx_strndup(path, len);
}

/* The last component of @path (trailing slashes ignored), new string. */
static char *
base_part(const char *path)
{
    size_t len = strlen(path), start;

    while (len > 1 && path[len - 1] == '/')
        len--;
    start = len;
    while (start > 0 && path[start - 1] != '/')
        start--;
    return sbx_strndup(path + start, len - start);
}

/*
 * A file of directory @dir with no name (O_TMPFILE), for a download that
 * must leave nothing behind if the process dies before it ends (SIGKILL
 * included): -1 when the file system has no O_TMPFILE or /proc/self/fd,
 * through which publish_tmpfile() names it, is not there.
 */
static int
open_unnamed(const char *dir)
{
    if (access("/proc/self/fd", X_OK) != 0)
        return -1;
    return open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
}

/*
 * Gives the unnamed file @fd of @dir the name @local_path: linked there
 * when nothing is (atomic), else linked under a staging name
 * ".BASE.sbx-XXXXXXXX" beside it and renamed over it (a file under that
 * name exists only between the two calls). 0, or -1 with errno.
 */
static int
publish_tmpfile(int fd, const char *dir, const char *base, const char *local_path)
{
    char proc[64], *tmp = NULL;
    unsigned char r[6];
    int rc = -1;

    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, local_path, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    if (errno != EEXIST)
        return -1;
    for (int tries = 0; tries < 16; tries++) {
        if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
            return -1;
        free(tmp);
        tmp = sbx_asprintf("%s/.%.200s.sbx-%02x%02x%02x%02x%02x%02x", dir, base, r[0], r[1],
                           r[2], r[3], r[4], r[5]);
        if (!tmp) {
            errno = ENOMEM;
            return -1;
        }
        if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) {
            rc = rename(tmp, local_path);
            if (rc < 0) {
                int e = errno;

                unlink(tmp);
                errno = e;
            }
            break;
        }
        if (errno != EEXIST)
            break;
    }
    free(tmp);
    return rc;
}

SBX_EXPORT int
sbx_sandbox_download_file(sbx_sandbox *sandbox, const char *sandbox_path, const char *local_path,
                          sbx_error **error)
{
    sbx_error *err = NULL;
    sbx_strv made = { 0 };
    char *dir = NULL, *base = NULL, *tmp = NULL;
    uint32_t mode;
    struct stat st;
    int fd = -1, unnamed = 0;

    if (files_begin(sandbox, sandbox_path, "sandbox_path", &err) < 0)
        goto fail;
    if (!local_path || !*local_path) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "local_path is %s",
                      local_path ? "empty" : "NULL");
        goto fail;
    }
    if (stat(local_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                     "\"%s\" is a directory", local_path);
        sbx_error_add_context(e, "path", local_path);
        goto fail;
    }
    if (sandbox_file_mode(sandbox, sandbox_path, &mode, &err) < 0)
        goto fail;
    dir = dir_part(local_path);
    base = base_part(local_path);
    if (!dir || !base) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        goto fail;
    }
    if (mkdir_parents(dir, &made, &err) < 0)
        goto fail;
    /* The bytes go to a file with no name, named only once complete: a
     * process killed meanwhile leaves nothing. Where the file system has
     * no O_TMPFILE, a staging file ".BASE.sbx-XXXXXX" beside the
     * destination, renamed over it at the end. */
    fd = open_unnamed(dir);
    unnamed = fd >= 0;
    if (!unnamed && (tmp = sbx_asprintf("%s/.%.200s.sbx-XXXXXX", dir, base)) != NULL)
        fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        sbx_error *e = sbx_set_error(&err, tmp ? sbx_errno_code(errno, SBX_ERROR_WORKSPACE)
                                               : SBX_ERROR_RESOURCE_EXHAUSTED, NULL,
                                     "cannot create a file in \"%s\": %s", dir,
                                     tmp ? strerror(errno) : "out of memory");
        sbx_error_add_context(e, "path", dir);
        free(tmp);
        tmp = NULL;
        goto fail;
    }
    if (read_to_fd(sandbox, sandbox_path, NULL, fd, &err) < 0)
        goto fail;
    int done;

    if (fchmod(fd, mode) < 0)
        done = -1;
    else if (unnamed)
        done = publish_tmpfile(fd, dir, base, local_path);
    else
        done = close(fd) < 0 || (fd = -1, rename(tmp, local_path) < 0) ? -1 : 0;
    if (done < 0) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_WORKSPACE, NULL, "cannot write \"%s\": %s",
                                     local_path, strerror(errno));
        sbx_error_add_context(e, "path", local_path);
        goto fail;
    }
    if (fd >= 0)
        close(fd);
    free(tmp);
    free(dir);
    free(base);
    sbx_strv_clear(&made);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    if (tmp)
        unlink(tmp);
    free(tmp);
    free(dir);
    free(base);
    unmake_dirs(&made);
    files_finish(error, err, sandbox, "download_file");
    return -1;
}

/* ---------------------------------------------------------------- directories */

/* Where a tree is extracted: directory @name of @parent_fd (@name NULL:
 * @parent_fd itself), plus the parents this call made. */
typedef struct dest {
    int parent_fd;
    char *name;
    sbx_strv made;
} dest;

/* Opens the place of local directory @path, creating missing parents. */
static int
dest_open(const char *path, dest *d, sbx_error **err)
{
    struct stat st;
    char *real = NULL, *dir = NULL;
    int rc = -1;

    d->parent_fd = -1;
    d->name = NULL;
    if (!path || !*path) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "local directory is %s",
                      path ? "empty" : "NULL");
        return -1;
    }
    if (stat(path, &st) < 0) {
        if (errno != ENOENT) {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                         "cannot use \"%s\": %s", path, strerror(errno));
            sbx_error_add_context(e, "path", path);
            return -1;
        }
        if (!(dir = dir_part(path)) || !(d->name = base_part(path))) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
            goto out;
        }
        if (mkdir_parents(dir, &d->made, err) < 0)
            goto out;
        if (strcmp(d->name, ".") == 0 || strcmp(d->name, "..") == 0 ||
            stat(path, &st) == 0) {
            free(d->name);
            d->name = NULL;     /* exists now: resolve it below */
        } else {
            d->parent_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (d->parent_fd < 0) {
                sbx_error *e = sbx_set_error(err, SBX_ERROR_WORKSPACE, NULL,
                                             "cannot open \"%s\": %s", dir, strerror(errno));
                sbx_error_add_context(e, "path", dir);
                goto out;
            }
            rc = 0;
            goto out;
        }
    }
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                     "\"%s\" exists and is not a directory", path);
        sbx_error_add_context(e, "path", path);
        goto out;
    }
    /* An existing directory: its real place, so the staging directory goes
     * beside it and not beside a symlink to it. */
    if (!(real = realpath(path, NULL))) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_WORKSPACE, NULL, "cannot resolve \"%s\": %s",
                                     path, strerror(errno));
        sbx_error_add_context(e, "path", path);
        goto out;
    }
    free(dir);
    if (strcmp(real, "/") == 0) {
        dir = sbx_strdup("/");
        d->name = NULL;
    } else {
        dir = dir_part(real);
        d->name = base_part(real);
        if (!d->name) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
            goto out;
        }
    }
    if (!dir || (d->parent_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_WORKSPACE, NULL, "cannot open \"%s\": %s",
                                     dir ? dir : path, strerror(errno));
        sbx_error_add_context(e, "path", dir ? dir : path);
        goto out;
    }
    rc = 0;
out:
    free(real);
    free(dir);
    return rc;
}

static void
dest_close(dest *d, int failed)
{
    if (d->parent_fd >= 0)
        close(d->parent_fd);
    d->parent_fd = -1;
    free(d->name);
    d->name = NULL;
    if (failed)
        unmake_dirs(&d->made);
    sbx_strv_clear(&d->made);
}

typedef struct dir_job {
    sbx_sandbox *sandbox;
    const char *sandbox_dir;
    int local_fd;               /* upload: the tree */
    dest *dst;                  /* download: where it goes */
    int64_t count;
    const char *op;
    const sbx_tar_policy *policy;   /* download: the extractor's, or NULL */
} dir_job;

/* upload_dir: the tree as a tar stream into @fd. */
static int
tree_producer(void *arg, int fd, sbx_error **err)
{
    dir_job *j = arg;
    sbx_fs_env env = host_env(j->op);

    j->count = sbx_tar_write_tree(&env, j->local_fd, fd, err);
    return j->count < 0 ? -1 : 0;
}

/* upload_dir: the stream from @fd extracted in the sandbox. */
static int
untar_consumer(void *arg, int fd, sbx_error **err)
{
    dir_job *j = arg;
    sbx_sandbox *sb = j->sandbox;
    int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, const char *, int, sbx_error **);

    slot = SBX_SLOT(sb->client->plugin, upload_tar);
    if (slot) {
        sbx_call_ctx ctx;

        sbx_call_ctx_init_for(&ctx, sb->client);
        if (slot(sb->handle, &ctx, j->sandbox_dir, fd, err) != 0) {
            sbx_error_ensure(err, sb->client->backend, "upload_tar");
            return -1;
        }
        return 0;
    }
    return run_on_path(sb, untar_script, j->sandbox_dir, NULL, fd, -1, NULL, "tar -x",
                       "exists and is not a directory", NULL, err);
}

/* download_dir: the sandbox directory as a tar stream into @fd. */
static int
tar_producer(void *arg, int fd, sbx_error **err)
{
    dir_job *j = arg;
    sbx_sandbox *sb = j->sandbox;
    int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, const char *, int, sbx_error **);

    slot = SBX_SLOT(sb->client->plugin, download_tar);
    if (slot) {
        sbx_call_ctx ctx;

        sbx_call_ctx_init_for(&ctx, sb->client);
        if (slot(sb->handle, &ctx, j->sandbox_dir, fd, err) != 0) {
            sbx_error_ensure(err, sb->client->backend, "download_tar");
            return -1;
        }
        return 0;
    }
    return run_on_path(sb, tar_script, j->sandbox_dir, NULL, -1, fd, NULL, "tar -c",
                       "is not a directory", NULL, err);
}

/* download_dir: the stream from @fd through the checked extractor. */
static int
extract_consumer(void *arg, int fd, sbx_error **err)
{
    dir_job *j = arg;
    sbx_fs_env env = host_env(j->op);

    j->count = sbx_tar_extract_with(&env, j->policy, fd, j->dst->parent_fd, j->dst->name, err);
    return j->count < 0 ? -1 : 0;
}

/* 1 when the plugin can move directories (tar slot or exec). */
static int
can_move_dirs(const sbx_plugin *plugin, int upload)
{
    return (upload ? SBX_SLOT(plugin, upload_tar) != NULL : SBX_SLOT(plugin, download_tar) != NULL)
           || can_exec(plugin);
}

SBX_EXPORT int64_t
sbx_sandbox_upload_dir(sbx_sandbox *sandbox, const char *local_dir, const char *sandbox_dir,
                       sbx_error **error)
{
    static const char op[] = "upload_dir";
    dir_job j = { sandbox, sandbox_dir, -1, NULL, 0, op, NULL };
    sbx_error *err = NULL;

    if (files_begin(sandbox, sandbox_dir, "sandbox_dir", &err) < 0)
        goto fail;
    if (!local_dir || !*local_dir) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "local_dir is %s",
                      local_dir ? "empty" : "NULL");
        goto fail;
    }
    if (!can_move_dirs(sandbox->client->plugin, 1)) {
        unsupported(sandbox, "upload directories", &err);
        goto fail;
    }
    j.local_fd = open(local_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (j.local_fd < 0) {
        sbx_error *e = sbx_set_error(&err, errno == ENOENT ? SBX_ERROR_NOT_FOUND
                                                           : SBX_ERROR_INVALID_ARGUMENT, NULL,
                                     "cannot upload \"%s\": %s", local_dir, strerror(errno));
        sbx_error_add_context(e, "path", local_dir);
        goto fail;
    }
    if (pump_run(tree_producer, &j, untar_consumer, &j, &err) < 0)
        goto fail;
    close(j.local_fd);
    return j.count;
fail:
    if (j.local_fd >= 0)
        close(j.local_fd);
    files_finish(error, err, sandbox, op);
    return -1;
}

/* ---------------------------------------------------------------- extract options */

struct sbx_extract_options {
    sbx_tar_policy policy;
};

_Static_assert(SBX_OUTSIDE_SYMLINKS_KEEP == SBX_TAR_SYMLINKS_KEEP &&
               SBX_OUTSIDE_SYMLINKS_SKIP == SBX_TAR_SYMLINKS_SKIP &&
               SBX_OUTSIDE_SYMLINKS_REFUSE == SBX_TAR_SYMLINKS_REFUSE,
               "sbx_outside_symlinks and the extractor's values differ");
_Static_assert(SBX_EXTRACT_DEFAULT_MAX_ENTRY_BYTES == SBX_TAR_DEFAULT_MAX_ENTRY_BYTES &&
               SBX_EXTRACT_DEFAULT_MAX_TOTAL_BYTES == SBX_TAR_DEFAULT_MAX_TOTAL_BYTES &&
               SBX_EXTRACT_DEFAULT_MAX_ENTRIES == SBX_TAR_DEFAULT_MAX_ENTRIES,
               "the documented extraction limits and the extractor's differ");

SBX_EXPORT sbx_extract_options *
sbx_extract_options_new(void)
{
    return calloc(1, sizeof(sbx_extract_options));
}

SBX_EXPORT void
sbx_extract_options_free(sbx_extract_options *options)
{
    free(options);
}

SBX_EXPORT int
sbx_extract_options_set_limits(sbx_extract_options *options, int64_t max_entry_bytes,
                               int64_t max_total_bytes, int64_t max_entries, sbx_error **error)
{
    const struct {
        const char *name;
        int64_t v;
    } vals[] = { { "max_entry_bytes", max_entry_bytes },
                 { "max_total_bytes", max_total_bytes },
                 { "max_entries", max_entries } };

    if (!options) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "extract_options_set_limits",
                      "options is NULL");
        return -1;
    }
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        if (vals[i].v < 0) {
            sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "extract_options_set_limits",
                          "%s %lld is negative (0 keeps the default)", vals[i].name,
                          (long long)vals[i].v);
            return -1;
        }
    }
    options->policy.max_entry_bytes = max_entry_bytes;
    options->policy.max_total_bytes = max_total_bytes;
    options->policy.max_entries = max_entries;
    return 0;
}

SBX_EXPORT int
sbx_extract_options_set_outside_symlinks(sbx_extract_options *options, sbx_outside_symlinks how,
                                         sbx_error **error)
{
    if (!options || (how != SBX_OUTSIDE_SYMLINKS_KEEP && how != SBX_OUTSIDE_SYMLINKS_SKIP &&
                     how != SBX_OUTSIDE_SYMLINKS_REFUSE)) {
        if (options)
            sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "extract_options_set_outside_symlinks",
                          "outside_symlinks %d is not one of KEEP (0), SKIP (1), REFUSE (2)",
                          (int)how);
        else
            sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT,
                          "extract_options_set_outside_symlinks", "options is NULL");
        return -1;
    }
    options->policy.outside_symlinks = (int)how;
    return 0;
}

SBX_EXPORT void
sbx_extract_options_set_note_fn(sbx_extract_options *options, sbx_extract_note_fn fn,
                                void *user_data)
{
    if (!options)
        return;
    options->policy.note = fn;
    options->policy.note_data = user_data;
}

SBX_EXPORT int64_t
sbx_sandbox_download_dir(sbx_sandbox *sandbox, const char *sandbox_dir, const char *local_dir,
                         sbx_error **error)
{
    return sbx_sandbox_download_dir_with_options(sandbox, sandbox_dir, local_dir, NULL, error);
}

SBX_EXPORT int64_t
sbx_sandbox_download_dir_with_options(sbx_sandbox *sandbox, const char *sandbox_dir,
                                      const char *local_dir, const sbx_extract_options *options,
                                      sbx_error **error)
{
    static const char op[] = "download_dir";
    dest d = { -1, NULL, { 0 } };
    dir_job j = { sandbox, sandbox_dir, -1, &d, 0, op, options ? &options->policy : NULL };
    sbx_error *err = NULL;

    if (files_begin(sandbox, sandbox_dir, "sandbox_dir", &err) < 0)
        goto fail;
    if (!can_move_dirs(sandbox->client->plugin, 0)) {
        unsupported(sandbox, "download directories", &err);
        goto fail;
    }
    if (dest_open(local_dir, &d, &err) < 0)
        goto fail;
    if (pump_run(tar_producer, &j, extract_consumer, &j, &err) < 0)
        goto fail;
    dest_close(&d, 0);
    return j.count;
fail:
    dest_close(&d, 1);
    files_finish(error, err, sandbox, op);
    return -1;
}

SBX_EXPORT int64_t
sbx_extract_tar_fd(int fd, const char *dest_dir, sbx_error **error)
{
    return sbx_extract_tar_fd_with_options(fd, dest_dir, NULL, error);
}

SBX_EXPORT int64_t
sbx_extract_tar_fd_with_options(int fd, const char *dest_dir, const sbx_extract_options *options,
                                sbx_error **error)
{
    static const char op[] = "extract_tar";
    dest d = { -1, NULL, { 0 } };
    sbx_error *err = NULL;
    sbx_fs_env env = host_env(op);
    int64_t count;

    if (fd < 0) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, NULL, "bad descriptor %d", fd);
        goto fail;
    }
    if (dest_open(dest_dir, &d, &err) < 0)
        goto fail;
    count = sbx_tar_extract_with(&env, options ? &options->policy : NULL, fd, d.parent_fd,
                                 d.name, &err);
    if (count < 0)
        goto fail;
    dest_close(&d, 0);
    return count;
fail:
    dest_close(&d, 1);
    sbx_error_fill(err, NULL, op);
    sbx_error_propagate(error, err);
    return -1;
}
