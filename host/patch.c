/*
 * host/patch.c — sbx_sandbox_apply_patch: a unified diff applied to files
 * in a sandbox through the file calls, all or nothing (the reference's
 * AgentContext.apply_patch ran `patch -pN` in the sandbox; this needs no
 * patch program there and never leaves half a patch behind).
 *
 * Every hunk of every file is matched against the file's current content
 * first (exact context, at the line the hunk names or the nearest line
 * where it matches, as patch does with fuzz 0); only when all of them
 * match are the files written.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* A line with its terminator ("\n", or none at the end of a file). */
typedef struct line {
    const char *s;
    size_t len;
} line;

typedef struct lines {
    line *v;
    size_t n, cap;
} lines;

static int
lines_push(lines *l, const char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        line *v = realloc(l->v, cap * sizeof(*v));

        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].s = s;
    l->v[l->n].len = len;
    l->n++;
    return 0;
}

/* Splits @len bytes of @s into lines (each keeps its "\n"). */
static int
lines_split(lines *l, const char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (s + i)) + 1 : len - i;

        if (lines_push(l, s + i, n) < 0)
            return -1;
        i += n;
    }
    return 0;
}

typedef struct hunk {
    long old_start, old_count, new_start, new_count;
    char *header;               /* "@@ -1,3 +1,4 @@" */
    lines old, new;             /* the lines it expects and those it leaves */
    sbx_strv owned;             /* lines without a "\n" made for "\ No newline" */
} hunk;

typedef struct file_patch {
    char *old_path, *new_path;  /* stripped; NULL for /dev/null */
    hunk *hunks;
    size_t nhunks;
    /* applied */
    char *path;                 /* the sandbox path written or removed */
    sbx_buf out;
    int remove, create;
    uint32_t mode;
    char *orig;                 /* the content before (to put back) */
    size_t orig_len;
    int written;                /* the write or removal happened */
} file_patch;

static void
hunk_clear(hunk *h)
{
    free(h->header);
    free(h->old.v);
    free(h->new.v);
    sbx_strv_clear(&h->owned);
}

/* The path of a "--- " / "+++ " line: up to a tab, @strip components
 * removed; NULL for /dev/null. *@bad set when too few components. */
static char *
header_path(const char *s, size_t len, int strip, int *bad)
{
    const char *tab = memchr(s, '\t', len), *p;
    size_t n = tab ? (size_t)(tab - s) : len;
    char *copy;

    while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    if (n == 9 && memcmp(s, "/dev/null", 9) == 0)
        return NULL;
    p = s;
    for (int i = 0; i < strip; i++) {
        const char *slash = memchr(p, '/', n - (size_t)(p - s));

        if (!slash) {
            *bad = 1;
            return NULL;
        }
        p = slash + 1;
        while ((size_t)(p - s) < n && *p == '/')
            p++;
    }
    copy = sbx_strndup(p, n - (size_t)(p - s));
    if (copy && !*copy) {
        free(copy);
        *bad = 1;
        return NULL;
    }
    return copy;
}

/* Parses @patch into @files. 0, or -1 with invalid_argument naming the
 * line. */
static int
parse_patch(const char *patch, size_t len, int strip, file_patch **files, size_t *nfiles,
            sbx_error **err)
{
    lines pl = { 0 };
    size_t i = 0;
    file_patch *f = NULL;
    sbx_error *e;
    int rc = -1;

    if (lines_split(&pl, patch, len) < 0)
        goto oom;
    while (i < pl.n) {
        const line *l = &pl.v[i];
        int bad = 0;

        if (l->len < 4 || memcmp(l->s, "--- ", 4) != 0) {
            i++;
            continue;
        }
        if (i + 1 >= pl.n || pl.v[i + 1].len < 4 || memcmp(pl.v[i + 1].s, "+++ ", 4) != 0) {
            e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                              "patch line %zu: \"---\" without a \"+++\" line after it", i + 1);
            sbx_error_add_contextf(e, "line", "%zu", i + 1);
            goto out;
        }
        {
            file_patch *bigger = realloc(*files, (*nfiles + 1) * sizeof(**files));

            if (!bigger)
                goto oom;
            *files = bigger;
            f = &bigger[(*nfiles)++];
            memset(f, 0, sizeof(*f));
        }
        f->old_path = header_path(l->s + 4, l->len - 4 - (l->s[l->len - 1] == '\n'), strip, &bad);
        f->new_path = header_path(pl.v[i + 1].s + 4,
                                  pl.v[i + 1].len - 4 - (pl.v[i + 1].s[pl.v[i + 1].len - 1] == '\n'),
                                  strip, &bad);
        if (bad || (!f->old_path && !f->new_path)) {
            e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                              "patch line %zu: the file name has fewer than %d leading "
                              "components to strip (or is empty)", i + 1, strip);
            sbx_error_add_contextf(e, "line", "%zu", i + 1);
            sbx_error_add_contextf(e, "strip", "%d", strip);
            goto out;
        }
        i += 2;
        while (i < pl.n && pl.v[i].len >= 3 && memcmp(pl.v[i].s, "@@ ", 3) == 0) {
            hunk *h;
            long olds, oldc = 1, news, newc = 1;
            const char *s = pl.v[i].s;
            char *end;

            {
                hunk *bigger = realloc(f->hunks, (f->nhunks + 1) * sizeof(*f->hunks));

                if (!bigger)
                    goto oom;
                f->hunks = bigger;
                h = &bigger[f->nhunks++];
                memset(h, 0, sizeof(*h));
            }
            errno = 0;
            if (s[3] != '-')
                goto bad_header;
            olds = strtol(s + 4, &end, 10);
            if (*end == ',')
                oldc = strtol(end + 1, &end, 10);
            if (*end != ' ' || end[1] != '+')
                goto bad_header;
            news = strtol(end + 2, &end, 10);
            if (*end == ',')
                newc = strtol(end + 1, &end, 10);
            if (strncmp(end, " @@", 3) != 0 || errno || olds < 0 || oldc < 0 || news < 0 ||
                newc < 0)
                goto bad_header;
            h->old_start = olds;
            h->old_count = oldc;
            h->new_start = news;
            h->new_count = newc;
            h->header = sbx_strndup(s, (size_t)(end + 3 - s));
            if (!h->header)
                goto oom;
            i++;
            while ((long)h->old.n < oldc || (long)h->new.n < newc) {
                const char *ls;
                size_t ll;
                char kind;

                if (i >= pl.n) {
                    e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                                      "patch ends inside hunk %zu of %s (%s)", f->nhunks,
                                      f->new_path ? f->new_path : f->old_path, h->header);
                    sbx_error_add_context(e, "hunk", h->header);
                    goto out;
                }
                ls = pl.v[i].s;
                ll = pl.v[i].len;
                kind = ll > 0 && ls[0] != '\n' ? ls[0] : ' ';
                if (kind == '\\') {
                    i++;
                    continue;
                }
                if (kind != ' ' && kind != '-' && kind != '+') {
                    e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                                      "patch line %zu in hunk %zu of %s (%s) starts with "
                                      "neither ' ', '-' nor '+'", i + 1, f->nhunks,
                                      f->new_path ? f->new_path : f->old_path, h->header);
                    sbx_error_add_contextf(e, "line", "%zu", i + 1);
                    goto out;
                }
                /* The line's text (an empty context line may have lost its
                 * blank) and its "\n", unless "\ No newline" follows. */
                {
                    const char *text = ls[0] == '\n' ? ls : ls + 1;
                    size_t tl = ls[0] == '\n' ? ll : ll - 1;

                    if (i + 1 < pl.n && pl.v[i + 1].len > 0 && pl.v[i + 1].s[0] == '\\' &&
                        tl > 0 && text[tl - 1] == '\n')
                        tl--;
                    if ((kind == ' ' || kind == '-') && lines_push(&h->old, text, tl) < 0)
                        goto oom;
                    if ((kind == ' ' || kind == '+') && lines_push(&h->new, text, tl) < 0)
                        goto oom;
                }
                i++;
            }
            continue;
bad_header:
            e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                              "patch line %zu: malformed hunk header \"%.*s\"", i + 1,
                              (int)(pl.v[i].len && pl.v[i].s[pl.v[i].len - 1] == '\n'
                                    ? pl.v[i].len - 1 : pl.v[i].len), pl.v[i].s);
            sbx_error_add_contextf(e, "line", "%zu", i + 1);
            goto out;
        }
        if (f->nhunks == 0) {
            e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                              "patch line %zu: %s has no hunk", i,
                              f->new_path ? f->new_path : f->old_path);
            sbx_error_add_contextf(e, "line", "%zu", i);
            goto out;
        }
    }
    if (*nfiles == 0) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                      "the patch holds no unified diff (no \"---\" / \"+++\" lines)");
        goto out;
    }
    rc = 0;
    goto out;
oom:
    sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "apply_patch", "out of memory");
out:
    /* The hunks' lines point into @patch, which outlives them. */
    free(pl.v);
    return rc;
}

/* 1 when @want matches @have at @at. */
static int
matches_at(const lines *have, size_t at, const lines *want)
{
    if (at + want->n > have->n)
        return 0;
    for (size_t k = 0; k < want->n; k++)
        if (have->v[at + k].len != want->v[k].len ||
            memcmp(have->v[at + k].s, want->v[k].s, want->v[k].len) != 0)
            return 0;
    return 1;
}

/* The sandbox path of @rel under @dir. */
static char *
join(const char *dir, const char *rel)
{
    if (!dir || !*dir)
        return sbx_strdup(rel);
    return sbx_asprintf("%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", rel);
}

/* The permission bits of sandbox file @path (0644 when unknown). */
static uint32_t
file_mode(sbx_sandbox *sandbox, const char *path)
{
    const char *slash = strrchr(path, '/');
    char *parent = slash ? (slash == path ? sbx_strdup("/")
                                          : sbx_strndup(path, (size_t)(slash - path)))
                         : sbx_strdup(".");
    const char *name = slash ? slash + 1 : path;
    sbx_file_info **list = NULL;
    size_t count = 0;
    uint32_t mode = 0644;

    if (parent && sbx_sandbox_list_files(sandbox, parent, &list, &count, NULL) == 0)
        for (size_t i = 0; i < count; i++)
            if (strcmp(sbx_file_info_get0_name(list[i]), name) == 0 &&
                (sbx_file_info_get_mode(list[i]) & 0777) != 0)
                mode = sbx_file_info_get_mode(list[i]) & 07777;
    sbx_file_info_list_free(list, count);
    free(parent);
    return mode;
}

/* Applies @f's hunks to the current content of its file in memory. */
static int
apply_file(sbx_sandbox *sandbox, const char *dir, file_patch *f, size_t index, sbx_error **err)
{
    const char *rel = f->old_path ? f->old_path : f->new_path;
    char *data = NULL;
    size_t len = 0, pos = 0;
    lines have = { 0 };
    sbx_error *e, *read_err = NULL;
    long offset = 0;
    int rc = -1;

    f->path = join(dir, f->new_path ? f->new_path : f->old_path);
    if (!f->path)
        goto oom;
    if (f->old_path) {
        char *old = join(dir, f->old_path);

        if (!old)
            goto oom;
        if (sbx_sandbox_read_file(sandbox, old, &data, &len, &read_err) < 0) {
            e = sbx_set_error(err, sbx_error_get_code(read_err), "apply_patch",
                              "cannot read %s, file %zu of the patch: %s", old, index + 1,
                              sbx_error_get0_message(read_err));
            sbx_error_add_context(e, "path", old);
            sbx_error_free(read_err);
            free(old);
            goto out;
        }
        f->mode = file_mode(sandbox, old);
        free(old);
    } else {
        f->create = 1;
        f->mode = 0644;
        if (sbx_sandbox_read_file(sandbox, f->path, &data, &len, NULL) == 0) {
            e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                              "the patch creates %s, which exists already", f->path);
            sbx_error_add_context(e, "path", f->path);
            goto out;
        }
        data = NULL;
        len = 0;
    }
    if (lines_split(&have, data ? data : "", len) < 0)
        goto oom;
    for (size_t k = 0; k < f->nhunks; k++) {
        hunk *h = &f->hunks[k];
        long want = (h->old_count == 0 ? h->old_start : h->old_start - 1) + offset;
        long found = -1;

        if (want < (long)pos)
            want = (long)pos;
        /* The named line first, then outwards, never before the previous
         * hunk's end. */
        for (long d = 0; found < 0 && (want - d >= (long)pos || want + d <= (long)have.n); d++) {
            if (want + d <= (long)have.n && matches_at(&have, (size_t)(want + d), &h->old))
                found = want + d;
            else if (d > 0 && want - d >= (long)pos &&
                     matches_at(&have, (size_t)(want - d), &h->old))
                found = want - d;
        }
        if (found < 0) {
            e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                              "hunk %zu of %s (%s) does not apply: its lines are not in the "
                              "file; no file was changed", k + 1, rel, h->header);
            sbx_error_add_context(e, "path", f->path);
            sbx_error_add_contextf(e, "hunk", "%zu", k + 1);
            sbx_error_add_context(e, "hunk_header", h->header);
            goto out;
        }
        for (size_t j = pos; j < (size_t)found; j++)
            if (sbx_buf_append(&f->out, have.v[j].s, have.v[j].len) < 0)
                goto oom;
        for (size_t j = 0; j < h->new.n; j++)
            if (sbx_buf_append(&f->out, h->new.v[j].s, h->new.v[j].len) < 0)
                goto oom;
        pos = (size_t)found + h->old.n;
        /* How far this file's lines are from where the patch saw them. */
        offset = found - (h->old_count == 0 ? h->old_start : h->old_start - 1);
    }
    for (size_t j = pos; j < have.n; j++)
        if (sbx_buf_append(&f->out, have.v[j].s, have.v[j].len) < 0)
            goto oom;
    f->remove = f->new_path == NULL;
    if (f->remove && f->out.len != 0) {
        e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "apply_patch",
                          "the patch removes %s but leaves %zu bytes in it", rel, f->out.len);
        sbx_error_add_context(e, "path", f->path);
        goto out;
    }
    rc = 0;
    /* Kept to put the file back should a later write fail. */
    f->orig = data;
    f->orig_len = len;
    data = NULL;
    goto out;
oom:
    sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "apply_patch", "out of memory");
out:
    free(have.v);
    free(data);
    return rc;
}

int
sbx_sandbox_remove_path(sbx_sandbox *sandbox, const char *path, const char *cwd,
                        sbx_error **err)
{
    /* A command sees an absolute sandbox path under the sandbox's root
     * (local's directory on the host; "" where the sandbox owns /). */
    char *target = path[0] == '/' ? sbx_asprintf("%s%s", sandbox->root, path)
                                  : sbx_strdup(path);
    const char *argv[] = { "rm", "-f", "--", target, NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    sbx_result *r;
    int code;

    if (!target) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        return -1;
    }
    req.argv = argv;
    req.cwd = cwd;
    r = sbx_sandbox_execute_command(sandbox, &req, err);
    free(target);
    if (!r)
        return -1;
    code = sbx_result_get_exit_code(r);
    sbx_result_free(r);
    if (code != 0) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_EXECUTION_FAILED, NULL,
                                     "cannot remove %s (rm exited with code %d)", path, code);
        sbx_error_add_context(e, "path", path);
        return -1;
    }
    return 0;
}

/* Writes @len bytes of @data to @f's file (mode kept), or removes it
 * (@remove). */
static int
put_file(sbx_sandbox *sandbox, const char *dir, file_patch *f, int remove, const char *data,
         size_t len, sbx_error **err)
{
    size_t off = 0;
    int fd, rc;

    if (remove)
        return sbx_sandbox_remove_path(sandbox, f->path, dir, err);
    fd = memfd_create("sbx-patch", MFD_CLOEXEC);
    if (fd < 0) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "apply_patch", "memfd_create: %s",
                      strerror(errno));
        return -1;
    }
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "apply_patch",
                          "cannot stage %s: %s", f->path, strerror(errno));
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    lseek(fd, 0, SEEK_SET);
    rc = sbx_sandbox_write_file_from_fd(sandbox, f->path, fd, f->mode, err);
    close(fd);
    return rc;
}

SBX_EXPORT int
sbx_sandbox_apply_patch(sbx_sandbox *sandbox, const char *patch, size_t len, int strip,
                        const char *dir, sbx_error **error)
{
    static const char op[] = "apply_patch";
    file_patch *files = NULL;
    size_t nfiles = 0;
    sbx_error *err = NULL;
    int rc = -1;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0)
        goto out;
    if (!patch || strip < 0) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op,
                                     patch ? "invalid strip level %d (0 or more)"
                                           : "the patch is NULL", strip);
        sbx_error_add_contextf(e, "strip", "%d", strip);
        goto out;
    }
    if (parse_patch(patch, len, strip, &files, &nfiles, &err) < 0)
        goto out;
    for (size_t i = 0; i < nfiles; i++)
        if (apply_file(sandbox, dir, &files[i], i, &err) < 0)
            goto out;
    /* Every hunk matched: now the files change. A write that fails puts
     * the files written before it back as they were (best effort). */
    for (size_t i = 0; i < nfiles; i++) {
        file_patch *f = &files[i];

        if (put_file(sandbox, dir, f, f->remove, f->out.data, f->out.len, &err) < 0) {
            for (size_t j = i; j-- > 0;) {
                file_patch *g = &files[j];
                sbx_error *undo = NULL;

                if (put_file(sandbox, dir, g, g->create, g->orig, g->orig_len, &undo) < 0)
                    sbx_error_add_context(err, "not_restored", g->path);
                sbx_error_free(undo);
            }
            goto out;
        }
        f->written = 1;
    }
    rc = (int)nfiles;
out:
    for (size_t i = 0; i < nfiles; i++) {
        for (size_t k = 0; k < files[i].nhunks; k++)
            hunk_clear(&files[i].hunks[k]);
        free(files[i].hunks);
        free(files[i].old_path);
        free(files[i].new_path);
        free(files[i].path);
        free(files[i].orig);
        sbx_buf_clear(&files[i].out);
    }
    free(files);
    if (rc < 0) {
        sbx_error_fill(err, sandbox ? sandbox->client->backend : NULL, op);
        sbx_error_propagate(error, err);
    }
    return rc;
}
