/*
 * host/workspace.c — the workspace manifest (the reference's Manifest of
 * File, LocalFile, LocalDir and GitRepo entries, plus custom entries) and
 * its application at create, in insertion order.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef enum entry_kind {
    ENTRY_FILE,
    ENTRY_LOCAL_FILE,
    ENTRY_LOCAL_DIR,
    ENTRY_GIT_REPO,
    ENTRY_CUSTOM
} entry_kind;

typedef struct entry {
    entry_kind kind;
    char *dest;
    char *data;              /* FILE bytes */
    size_t len;
    uint32_t mode;
    char *local;             /* LOCAL_FILE / LOCAL_DIR path, GIT_REPO url */
    char *ref;               /* GIT_REPO ref or NULL */
    int depth;
    sbx_manifest_entry_fn fn;
    void *user_data;
    void (*free_fn)(void *);
} entry;

struct sbx_manifest {
    atomic_int refs;
    entry *items;
    size_t count;
    size_t cap;
};

static const char *const kind_names[] = {
    [ENTRY_FILE] = "file",
    [ENTRY_LOCAL_FILE] = "local_file",
    [ENTRY_LOCAL_DIR] = "local_dir",
    [ENTRY_GIT_REPO] = "git_repo",
    [ENTRY_CUSTOM] = "custom",
};

SBX_EXPORT sbx_manifest *
sbx_manifest_new(void)
{
    sbx_manifest *m = calloc(1, sizeof(*m));

    if (m)
        atomic_init(&m->refs, 1);
    return m;
}

sbx_manifest *
sbx_manifest_ref(sbx_manifest *manifest)
{
    if (manifest)
        atomic_fetch_add(&manifest->refs, 1);
    return manifest;
}

SBX_EXPORT void
sbx_manifest_free(sbx_manifest *manifest)
{
    if (!manifest || atomic_fetch_sub(&manifest->refs, 1) != 1)
        return;
    for (size_t i = 0; i < manifest->count; i++) {
        entry *e = &manifest->items[i];
        free(e->dest);
        free(e->data);
        free(e->local);
        free(e->ref);
        if (e->free_fn)
            e->free_fn(e->user_data);
    }
    free(manifest->items);
    free(manifest);
}

SBX_EXPORT size_t
sbx_manifest_get_count(const sbx_manifest *manifest)
{
    return manifest ? manifest->count : 0;
}

/*
 * Checks the arguments every entry has and appends a zeroed entry of
 * @kind with a copy of @dest. Returns it, or NULL with *@error set.
 */
static entry *
add_entry(sbx_manifest *m, entry_kind kind, const char *dest, const char *op,
          sbx_error **error)
{
    entry *e;

    if (!m) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op, "manifest is NULL");
        return NULL;
    }
    if (!dest || !*dest) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid workspace destination \"\": must be a non-empty sandbox path");
        return NULL;
    }
    if (m->count == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        entry *grown = realloc(m->items, cap * sizeof(*grown));
        if (!grown)
            goto oom;
        m->items = grown;
        m->cap = cap;
    }
    e = &m->items[m->count];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    if (!(e->dest = strdup(dest)))
        goto oom;
    m->count++;
    return e;
oom:
    sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return NULL;
}

/* Removes the last entry again (after a failed copy of its fields). */
static int
drop_last(sbx_manifest *m, const char *op, sbx_error **error)
{
    entry *e = &m->items[--m->count];

    free(e->dest);
    free(e->data);
    free(e->local);
    free(e->ref);
    sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return -1;
}

SBX_EXPORT int
sbx_manifest_add_file(sbx_manifest *manifest, const char *dest, const void *data,
                      size_t len, uint32_t mode, sbx_error **error)
{
    static const char op[] = "manifest_add_file";
    entry *e;

    if (!data && len) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op, "data is NULL with length %zu",
                      len);
        return -1;
    }
    if (!(e = add_entry(manifest, ENTRY_FILE, dest, op, error)))
        return -1;
    e->mode = mode & 07777;
    e->len = len;
    if (!(e->data = malloc(len ? len : 1)))
        return drop_last(manifest, op, error);
    if (len)
        memcpy(e->data, data, len);
    return 0;
}

/* Adds an entry naming a host path. */
static int
add_local(sbx_manifest *m, entry_kind kind, const char *dest, const char *path,
          const char *op, sbx_error **error)
{
    entry *e;

    if (!path || !*path) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid local path \"\" for workspace entry \"%s\"", dest ? dest : "");
        return -1;
    }
    if (!(e = add_entry(m, kind, dest, op, error)))
        return -1;
    if (!(e->local = strdup(path)))
        return drop_last(m, op, error);
    return 0;
}

SBX_EXPORT int
sbx_manifest_add_local_file(sbx_manifest *manifest, const char *dest,
                            const char *local_path, sbx_error **error)
{
    return add_local(manifest, ENTRY_LOCAL_FILE, dest, local_path, "manifest_add_local_file",
                     error);
}

SBX_EXPORT int
sbx_manifest_add_local_dir(sbx_manifest *manifest, const char *dest, const char *local_dir,
                           sbx_error **error)
{
    return add_local(manifest, ENTRY_LOCAL_DIR, dest, local_dir, "manifest_add_local_dir",
                     error);
}

SBX_EXPORT int
sbx_manifest_add_git_repo(sbx_manifest *manifest, const char *dest, const char *url,
                          const char *ref, int depth, sbx_error **error)
{
    static const char op[] = "manifest_add_git_repo";
    entry *e;

    if (!url || !*url || url[0] == '-') {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid git repository URL \"%s\": must be non-empty and not start "
                      "with '-'", url ? url : "");
        return -1;
    }
    if (ref && ref[0] == '-') {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid git ref \"%s\": must not start with '-'", ref);
        return -1;
    }
    if (depth < 0) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op, "git depth must be >= 0, got %d",
                      depth);
        return -1;
    }
    if (!(e = add_entry(manifest, ENTRY_GIT_REPO, dest, op, error)))
        return -1;
    e->depth = depth;
    if (!(e->local = strdup(url)) || (ref && *ref && !(e->ref = strdup(ref))))
        return drop_last(manifest, op, error);
    return 0;
}

SBX_EXPORT int
sbx_manifest_add_custom(sbx_manifest *manifest, const char *dest, sbx_manifest_entry_fn fn,
                        void *user_data, void (*free_fn)(void *), sbx_error **error)
{
    static const char op[] = "manifest_add_custom";
    entry *e;

    if (!fn) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op, "custom entry function is NULL");
        return -1;
    }
    if (!(e = add_entry(manifest, ENTRY_CUSTOM, dest, op, error)))
        return -1;
    e->fn = fn;
    e->user_data = user_data;
    e->free_fn = free_fn;
    return 0;
}

/* --------------------------------------------------------------- apply */

/* The parent directory of sandbox path @path, or NULL when it has none. */
static char *
parent_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    if (!slash)
        return NULL;
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Runs a git clone for a GIT_REPO entry. */
static int
apply_git(sbx_sandbox *sandbox, const entry *e, sbx_error **err)
{
    static const char *const env[] = { "GIT_TERMINAL_PROMPT=0", NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    const char *argv[12];
    char depth[16];
    size_t n = 0;
    sbx_result *res;
    char *parent = parent_of(e->dest);

    /* git creates the destination itself but not its parents. */
    if (parent) {
        const char *mk[] = { "mkdir", "-p", "--", parent, NULL };
        sbx_exec_request mrq = SBX_EXEC_REQUEST_INIT;
        char *resolved = sbx_sandbox_resolve_path(sandbox, parent, err);
        if (!resolved) {
            free(parent);
            return -1;
        }
        mk[3] = resolved;
        mrq.argv = mk;
        res = sbx_exec_run(sandbox, &mrq, err);
        free(resolved);
        if (!res) {
            free(parent);
            return -1;
        }
        int code = res->exit_code;
        sbx_result_free(res);
        if (code != 0) {
            sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                          "cannot create directory %s for the git clone (exit code %d)",
                          parent, code);
            free(parent);
            return -1;
        }
    }
    free(parent);

    char *dest = sbx_sandbox_resolve_path(sandbox, e->dest, err);
    if (!dest)
        return -1;
    argv[n++] = "git";
    argv[n++] = "clone";
    if (e->depth > 0) {
        snprintf(depth, sizeof(depth), "%d", e->depth);
        argv[n++] = "--depth";
        argv[n++] = depth;
    }
    if (e->ref) {
        argv[n++] = "--branch";
        argv[n++] = e->ref;
    }
    argv[n++] = "--";
    argv[n++] = e->local;
    argv[n++] = dest;
    argv[n] = NULL;
    rq.argv = argv;
    rq.env = env;
    res = sbx_exec_run(sandbox, &rq, err);
    free(dest);
    if (!res)
        return -1;
    if (res->exit_code != 0) {
        char *shown = sbx_redact_url(e->local);
        sbx_error *x = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                                     "git clone of %s failed with exit code %d",
                                     shown ? shown : "", res->exit_code);
        sbx_error_add_contextf(x, "exit_code", "%d", res->exit_code);
        free(shown);
        sbx_result_free(res);
        return -1;
    }
    sbx_result_free(res);
    return 0;
}

static int
apply_entry(sbx_sandbox *sandbox, const entry *e, sbx_error **err)
{
    switch (e->kind) {
    case ENTRY_FILE: {
        if (sbx_sandbox_write_file(sandbox, e->dest, e->data, e->len, err) < 0)
            return -1;
        if (e->mode != 0644) {
            char mode[8];
            char *path = sbx_sandbox_resolve_path(sandbox, e->dest, err);
            const char *argv[] = { "chmod", mode, "--", path, NULL };
            sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
            sbx_result *res;
            int code;

            if (!path)
                return -1;
            snprintf(mode, sizeof(mode), "%o", (unsigned)e->mode);
            rq.argv = argv;
            res = sbx_exec_run(sandbox, &rq, err);
            free(path);
            if (!res)
                return -1;
            code = res->exit_code;
            sbx_result_free(res);
            if (code != 0) {
                sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                              "chmod %s of %s failed with exit code %d", mode, e->dest, code);
                return -1;
            }
        }
        return 0;
    }
    case ENTRY_LOCAL_FILE:
        return sbx_sandbox_upload_file(sandbox, e->local, e->dest, err);
    case ENTRY_LOCAL_DIR:
        return sbx_sandbox_upload_dir(sandbox, e->local, e->dest, err) < 0 ? -1 : 0;
    case ENTRY_GIT_REPO:
        return apply_git(sandbox, e, err);
    case ENTRY_CUSTOM:
        if (e->fn(sandbox, e->dest, e->user_data, err) != 0) {
            sbx_error_ensure(err, "", "workspace");
            return -1;
        }
        return 0;
    }
    return 0;
}

int
sbx_manifest_apply(const sbx_manifest *manifest, sbx_sandbox *sandbox, sbx_error **err)
{
    if (!manifest)
        return 0;
    for (size_t i = 0; i < manifest->count; i++) {
        const entry *e = &manifest->items[i];
        sbx_error *inner = NULL;

        if (apply_entry(sandbox, e, &inner) == 0)
            continue;
        sbx_error *x = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                                     "workspace entry %zu (%s at %s) failed: %s", i + 1,
                                     kind_names[e->kind], e->dest,
                                     inner ? sbx_error_get0_message(inner) : "unknown error");
        sbx_error_add_context(x, "step", "workspace");
        sbx_error_add_context(x, "dest", e->dest);
        sbx_error_add_context(x, "entry", kind_names[e->kind]);
        if (inner) {
            sbx_error_add_context(x, "cause", sbx_error_code_name(sbx_error_get_code(inner)));
            const char *code = sbx_error_get0_context(inner, "exit_code");
            if (code)
                sbx_error_add_context(x, "exit_code", code);
        }
        sbx_error_free(inner);
        return -1;
    }
    return 0;
}
