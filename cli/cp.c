/*
 * sbx cp: copy files between this host and a sandbox made by `sbx create`.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx cp [-r] SRC DST\n"
"\n"
"Copy a file (or, with -r, a directory) between this host and a sandbox.\n"
"Exactly one of SRC and DST is ID:PATH, PATH being a sandbox path (on local,\n"
"under the sandbox root). Contents and permission bits (the executable bit\n"
"in particular) are kept.\n"
"\n"
"A file copied to an existing directory goes into it under its own name; a\n"
"DST ending in '/' must be an existing directory. With -r, SRC is a\n"
"directory whose entries are copied into DST (created when missing, merged\n"
"into an existing one). As with docker cp, nothing above DST is created: a\n"
"DST whose parent directory does not exist is an error naming it.\n"
"\n"
"A DST of \"-\" writes SRC (a file or a directory, -r not needed) to stdout\n"
"as a tar stream whose entries are named from SRC's last component; a SRC\n"
"of \"-\" reads a tar stream (plain or compressed) from stdin and extracts\n"
"it into DST, which must be an existing directory (as docker cp does; an\n"
"entry with an absolute name or \"..\" is refused). Write a local file named\n"
"- as ./-.\n"
"\n"
"An operand is ID:PATH when it has a ':' before any '/'; write a local name\n"
"that has a colon as ./NAME, and one that starts with '-' as ./-NAME or\n"
"after `--`.\n"
"\n"
"  -r, -R, --recursive   copy directories\n"
"  -h, --help            show this help and exit\n"
"\n"
"On SIGINT, SIGTERM or SIGHUP the copy is cancelled, its partial output on\n"
"this host (staging files, directories it made) is removed and sbx exits\n"
"with 128+N at once, also when the backend does not stop the transfer.\n"
"\n"
"Exit status: 0 on success, 125 on failure, 128+N after signal N.\n");
}

/*
 * Splits a cp operand "ID:PATH" into its parts (new strings) and returns
 * 1; returns 0 for a local path. An operand is a sandbox's when a ':'
 * comes before any '/' and what precedes it is a possible id; a local name
 * with a colon is written "./NAME".
 */
static int split_remote(const char *arg, char **id, char **path)
{
    const char *colon = strchr(arg, ':');
    const char *slash = strchr(arg, '/');

    if (colon == NULL || colon == arg || (slash != NULL && slash < colon))
        return 0;
    *id = strndup(arg, (size_t)(colon - arg));
    if (*id == NULL || !cli_id_valid(*id)) {
        free(*id);
        *id = NULL;
        return 0;
    }
    *path = strdup(colon + 1);
    return 1;
}

/* The last path component of @path (borrowed; "" for "/" or ""). */
static const char *base_name(const char *path)
{
    size_t len = strlen(path);
    const char *end, *start;

    while (len > 1 && path[len - 1] == '/')
        len--;
    end = path + len;
    start = end;
    while (start > path && start[-1] != '/')
        start--;
    return start;
}

/* @dir joined with the last component of @path, as a new string. */
static char *join_base(const char *dir, const char *path)
{
    const char *b = base_name(path);
    size_t blen = strcspn(b, "/");
    size_t dlen = strlen(dir);
    char *out;

    while (dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    if (asprintf(&out, "%.*s%s%.*s", (int)dlen, dir, dir[dlen - 1] == '/' ? "" : "/",
                 (int)blen, b) < 0)
        return NULL;
    return out;
}

/*
 * 1 when sandbox path @path is a directory (it can be listed), 0 when it is
 * not (*@why, when @why is not NULL, then holds the listing's error, the
 * caller's to free, or NULL), 128+N when stop signal N came first
 * (reported).
 */
static int sandbox_is_dir_why(sbx_sandbox *sandbox, const char *path, sbx_error **why)
{
    cli_call call = { .kind = CLI_CALL_LIST, .what = "the copy", .sandbox = sandbox,
                      .sandbox_path = path };
    cli_outcome o;
    int status = cli_call_run(&call, &o);

    if (why != NULL)
        *why = NULL;
    if (status != 0)
        return status == CLI_EXIT_TOOL ? 0 : status;
    /* An empty directory lists as no entries, without an error. */
    status = o.error == NULL;
    if (why != NULL) {
        *why = o.error;
        o.error = NULL;
    }
    cli_outcome_clear(&o);
    return status;
}

static int sandbox_is_dir(sbx_sandbox *sandbox, const char *path)
{
    return sandbox_is_dir_why(sandbox, path, NULL);
}

/*
 * What a copy to this host may leave when sbx leaves a call that ignored
 * its cancellation: the library's staging entries (".NAME.sbx-XXXXXX" and
 * ".sbx-XXXXXX", beside the destination or inside an existing destination
 * directory) and the destination's parents that did not exist.
 */
#define CP_WATCHED 2
#define CP_MISSING 32
typedef struct cp_leftovers {
    char *dir[CP_WATCHED];           /* directories watched */
    char **before[CP_WATCHED];       /* staging names there before, NULL-terminated */
    char *missing[CP_MISSING];       /* missing parents, deepest first */
    size_t nmissing;
} cp_leftovers;

/* 1 when @name looks like the library's staging entry. */
static int is_staging_name(const char *name)
{
    return name[0] == '.' && strstr(name, ".sbx-") != NULL;
}

/* The staging names in @dir (NULL-terminated array; NULL when none or
 * unreadable). */
static char **staging_names(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0;

    while (d != NULL && (de = readdir(d)) != NULL) {
        char **bigger;

        if (!is_staging_name(de->d_name))
            continue;
        bigger = realloc(names, (n + 2) * sizeof *names);
        if (bigger == NULL)
            break;
        names = bigger;
        names[n] = strdup(de->d_name);
        if (names[n] != NULL)
            n++;
        names[n] = NULL;
    }
    if (d != NULL)
        closedir(d);
    return names;
}

static void free_names(char **names)
{
    for (size_t i = 0; names != NULL && names[i] != NULL; i++)
        free(names[i]);
    free(names);
}

/* Notes what copying to local path @target may leave (see cp_leftovers). */
static void cp_leftovers_note(cp_leftovers *l, const char *target)
{
    char *copy = strdup(target), *slash;
    struct stat st;

    memset(l, 0, sizeof *l);
    if (copy == NULL)
        return;
    if (stat(copy, &st) == 0 && S_ISDIR(st.st_mode)) {
        l->dir[1] = strdup(copy);
        l->before[1] = staging_names(copy);
    }
    /* The parent, and the parents that are missing. */
    for (;;) {
        size_t len = strlen(copy);

        while (len > 1 && copy[len - 1] == '/')
            copy[--len] = '\0';
        slash = strrchr(copy, '/');
        if (slash == NULL) {
            free(copy);
            copy = strdup(".");
        } else if (slash == copy) {
            slash[1] = '\0';
        } else {
            *slash = '\0';
        }
        if (copy == NULL || stat(copy, &st) == 0 || errno != ENOENT ||
            l->nmissing == CP_MISSING || strcmp(copy, "/") == 0 || strcmp(copy, ".") == 0)
            break;
        l->missing[l->nmissing++] = strdup(copy);
    }
    if (copy != NULL && l->nmissing == 0) {
        l->dir[0] = copy;
        l->before[0] = staging_names(copy);
    } else {
        free(copy);
    }
}

/* Removes what the copy left (cp_leftovers) and frees @arg's contents. */
static void cp_leftovers_remove(void *arg)
{
    cp_leftovers *l = arg;

    for (size_t i = 0; i < CP_WATCHED; i++) {
        char **now = l->dir[i] != NULL ? staging_names(l->dir[i]) : NULL;

        for (size_t k = 0; now != NULL && now[k] != NULL; k++) {
            int old = 0;
            char *path;

            for (size_t j = 0; l->before[i] != NULL && l->before[i][j] != NULL && !old; j++)
                old = strcmp(now[k], l->before[i][j]) == 0;
            if (old || asprintf(&path, "%s/%s", l->dir[i], now[k]) < 0)
                continue;
            cli_remove_tree(path);
            free(path);
        }
        free_names(now);
    }
    /* The parents the copy made, when nothing else is in them. */
    for (size_t i = 0; i < l->nmissing; i++)
        if (l->missing[i] != NULL) {
            char **inside = staging_names(l->missing[i]);

            for (size_t k = 0; inside != NULL && inside[k] != NULL; k++) {
                char *path;

                if (asprintf(&path, "%s/%s", l->missing[i], inside[k]) >= 0) {
                    cli_remove_tree(path);
                    free(path);
                }
            }
            free_names(inside);
        }
    for (size_t i = 0; i < l->nmissing; i++)
        if (l->missing[i] != NULL)
            rmdir(l->missing[i]);
}

static void cp_leftovers_free(cp_leftovers *l)
{
    for (size_t i = 0; i < CP_WATCHED; i++) {
        free(l->dir[i]);
        free_names(l->before[i]);
    }
    for (size_t i = 0; i < l->nmissing; i++)
        free(l->missing[i]);
    memset(l, 0, sizeof *l);
}

/* Runs one transfer of cp interruptibly (@kind, between @sandbox_path of
 * @sandbox and @local_path); 0, or the exit status (reported). */
static int cp_transfer(cli_call_kind kind, sbx_sandbox *sandbox, const char *sandbox_path,
                       const char *local_path)
{
    int to_host = kind == CLI_CALL_DOWNLOAD_FILE || kind == CLI_CALL_DOWNLOAD_DIR;
    cli_call call = { .kind = kind, .what = "the copy", .sandbox = sandbox,
                      .sandbox_path = sandbox_path, .local_path = local_path };
    cp_leftovers left;
    cli_outcome o;
    int status;

    if (to_host) {
        cp_leftovers_note(&left, local_path);
        call.cleanup = cp_leftovers_remove;
        call.cleanup_arg = &left;
    }
    status = cli_call_run(&call, &o);
    if (to_host)
        cp_leftovers_free(&left);
    if (status != 0)
        return status;
    if (o.error != NULL)
        return cli_outcome_fail(&o);
    cli_outcome_clear(&o);
    return 0;
}

/* The directory part of @path (new string): "" when @path has no '/'
 * (relative to where it is resolved), "/" for a top-level name. */
static char *parent_of(const char *path)
{
    size_t len = strlen(path);

    while (len > 1 && path[len - 1] == '/')
        len--;
    while (len > 0 && path[len - 1] != '/')
        len--;
    while (len > 1 && path[len - 1] == '/')
        len--;
    return strndup(path, len);
}

/*
 * Checks that the directory a copy is to make @target in exists, as docker
 * cp does (nothing is created above the destination): on this host when
 * @sandbox is NULL, else in @sandbox. Returns 0, or the exit status after
 * reporting "cannot copy to TARGET: its parent directory PARENT does not
 * exist".
 */
static int parent_exists(sbx_sandbox *sandbox, const char *target)
{
    char *parent = parent_of(target);
    struct stat st;
    int status = 0;

    if (parent == NULL)
        return cli_out_of_memory();
    if (parent[0] == '\0') {
        free(parent);
        return 0;
    }
    if (sandbox == NULL) {
        int rc = stat(parent, &st), e = errno;

        if (rc < 0 || !S_ISDIR(st.st_mode)) {
            cli_msg("cannot copy to %s: its parent directory %s %s", target, parent,
                    rc == 0 || e == ENOENT || e == ENOTDIR ? "does not exist" : strerror(e));
            status = CLI_EXIT_TOOL;
        }
    } else {
        sbx_error *why = NULL;

        status = sandbox_is_dir_why(sandbox, parent, &why);
        if (status == 0 && why != NULL && sbx_error_get_code(why) != SBX_ERROR_NOT_FOUND) {
            /* Not a directory, or outside the sandbox: the listing says which. */
            cli_msg("cannot copy to %s: its parent directory %s cannot be used", target, parent);
            cli_error(why);
            why = NULL;
            status = CLI_EXIT_TOOL;
        } else if (status == 0) {
            cli_msg("cannot copy to %s: its parent directory %s does not exist in the sandbox",
                    target, parent);
            status = CLI_EXIT_TOOL;
        } else {
            status = status == 1 ? 0 : status;
        }
        sbx_error_free(why);
    }
    free(parent);
    return status;
}

/* Reports that @src is a directory and -r was not given. */
static int not_recursive(const char *src)
{
    cli_msg("%s is a directory (use -r to copy a directory)", src);
    return CLI_EXIT_TOOL;
}

/* Copies local @src into sandbox path @dst_path; returns the exit status. */
static int copy_in(sbx_sandbox *sandbox, const char *src, const char *dst_path, int recursive)
{
    struct stat st;
    char *target;
    int is_dir, status;

    if (stat(src, &st) < 0) {
        cli_msg("cannot copy %s: %s", src, strerror(errno));
        return CLI_EXIT_TOOL;
    }
    if (S_ISDIR(st.st_mode)) {
        if (!recursive)
            return not_recursive(src);
        status = parent_exists(sandbox, dst_path);
        return status != 0 ? status : cp_transfer(CLI_CALL_UPLOAD_DIR, sandbox, dst_path, src);
    }
    is_dir = sandbox_is_dir(sandbox, dst_path);
    if (is_dir > 1)
        return is_dir;
    if (!is_dir && dst_path[strlen(dst_path) - 1] == '/') {
        /* docker cp: a destination ending in '/' must be a directory. */
        cli_msg("cannot copy to %s: no such directory in the sandbox", dst_path);
        return CLI_EXIT_TOOL;
    }
    target = is_dir ? join_base(dst_path, src) : strdup(dst_path);
    if (target == NULL)
        return cli_out_of_memory();
    status = parent_exists(sandbox, target);
    if (status == 0)
        status = cp_transfer(CLI_CALL_UPLOAD_FILE, sandbox, target, src);
    free(target);
    return status;
}

/* Copies sandbox path @src_path (named @src) to local @dst; returns the
 * exit status. */
static int copy_out(sbx_sandbox *sandbox, const char *src, const char *src_path,
                    const char *dst, int recursive)
{
    struct stat st;
    char *target;
    int is_dir = sandbox_is_dir(sandbox, src_path), status;

    if (is_dir > 1)
        return is_dir;
    if (is_dir) {
        if (!recursive)
            return not_recursive(src);
        status = parent_exists(NULL, dst);
        return status != 0 ? status : cp_transfer(CLI_CALL_DOWNLOAD_DIR, sandbox, src_path, dst);
    }
    if (stat(dst, &st) == 0 && S_ISDIR(st.st_mode)) {
        target = join_base(dst, src_path);
    } else if (dst[strlen(dst) - 1] == '/') {
        /* docker cp: a destination ending in '/' must be a directory. */
        cli_msg("cannot copy to %s: no such directory", dst);
        return CLI_EXIT_TOOL;
    } else {
        target = strdup(dst);
    }
    if (target == NULL)
        return cli_out_of_memory();
    status = parent_exists(NULL, target);
    if (status == 0)
        status = cp_transfer(CLI_CALL_DOWNLOAD_FILE, sandbox, src_path, target);
    free(target);
    return status;
}

/* `sbx cp - ID:DST`: DST must be an existing directory, as for docker. */
static int tar_in(sbx_sandbox *sandbox, const char *dst_path)
{
    int is_dir = sandbox_is_dir(sandbox, dst_path);

    if (is_dir > 1)
        return is_dir;
    if (!is_dir) {
        cli_msg("cannot copy the tar stream on stdin to %s: no such directory in the sandbox "
                "(the destination of \"-\" must be a directory)", dst_path);
        return CLI_EXIT_TOOL;
    }
    return cli_cp_tar_in(sandbox, dst_path);
}

/* `sbx cp ID:SRC -`: a file or a directory, no -r needed (docker cp). */
static int tar_out(sbx_sandbox *sandbox, const char *src_path)
{
    int is_dir = sandbox_is_dir(sandbox, src_path);

    if (is_dir > 1)
        return is_dir;
    return cli_cp_tar_out(sandbox, src_path, is_dir);
}

static int cp_main(int argc, char **argv)
{
    const cli_command *cmd = &cli_command_cp;
    int recursive = 0;
    const cli_option table[] = {
        { "recursive", 'r', 0, &recursive, NULL },
        { NULL, 'R', 0, &recursive, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    char *src_id = NULL, *src_path = NULL, *dst_id = NULL, *dst_path = NULL;
    const char *src, *dst;
    sbx_sandbox *sandbox;
    int src_remote, dst_remote, status = cli_parse_options(cmd, argc, argv, table, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (argc - optind != 2)
        return cli_usage_error(cmd, "expected SRC and DST, got %d argument%s", argc - optind,
                               argc - optind == 1 ? "" : "s");
    src = argv[optind];
    dst = argv[optind + 1];
    src_remote = split_remote(src, &src_id, &src_path);
    dst_remote = split_remote(dst, &dst_id, &dst_path);
    if (src_remote == dst_remote)
        status = cli_usage_error(cmd, "exactly one of SRC and DST must be ID:PATH (got \"%s\" "
                                 "and \"%s\")", src, dst);
    else if ((src_remote && (src_path == NULL || *src_path == '\0')) ||
             (dst_remote && (dst_path == NULL || *dst_path == '\0')))
        status = cli_usage_error(cmd, "empty sandbox path in \"%s\"", src_remote ? src : dst);
    else if (*(src_remote ? dst : src) == '\0')
        status = cli_usage_error(cmd, "empty local path");
    if (status == CLI_GO_ON) {
        sandbox = cli_sandbox_open(src_remote ? src_id : dst_id, NULL);
        if (sandbox == NULL)
            status = CLI_EXIT_TOOL;
        else if (dst_remote && strcmp(src, "-") == 0)
            status = tar_in(sandbox, dst_path);
        else if (src_remote && strcmp(dst, "-") == 0)
            status = tar_out(sandbox, src_path);
        else if (dst_remote)
            status = copy_in(sandbox, src, dst_path, recursive);
        else
            status = copy_out(sandbox, src, src_path, dst, recursive);
        sbx_sandbox_free(sandbox);
    }
    free(src_id);
    free(src_path);
    free(dst_id);
    free(dst_path);
    return status;
}

const cli_command cli_command_cp = {
    "cp", "cp [-r] SRC DST", "copy files between this host and a sandbox (ID:PATH)",
    cp_main, usage
};
