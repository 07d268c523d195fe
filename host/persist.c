/*
 * host/persist.c — a sandbox's workspace as one tar stream: persist (out
 * of the sandbox) and hydrate (into one, on any backend), built on the
 * generic file and exec calls, so the layout is the same everywhere.
 *
 * The stream (<sbx/sbx.h>, "Workspace persistence"): PAX tar, entries
 * sorted, owner 0, modes kept:
 *   workspace/...          the directory's contents
 *   home/.claude/...       with SBX_PERSIST_AGENT_HOME, what exists of the
 *   home/.claude.json      sandbox user's agent state: Claude Code's
 *   home/.codex/...        directory and file, Codex's $CODEX_HOME (else
 *                          ~/.codex)
 *
 * Persist downloads those into a private host directory through the
 * checked extractor, then writes the tree to the caller's descriptor.
 * Hydrate extracts the caller's stream into a private host directory
 * through the checked extractor (symlinks leaving it refused), checks the
 * layout, uploads the workspace into a staging directory inside the
 * target directory and only then swaps the target's contents for the
 * staging directory's in one command of renames: a stream that is refused
 * or an upload that fails leaves the target as it was.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive.h"
#include "internal.h"

/* The agent state persisted with SBX_PERSIST_AGENT_HOME: its name under
 * home/ in the stream; 'd' a directory, 'f' a file. */
static const struct {
    const char *name;
    char type;
} agent_parts[] = {
    { ".claude", 'd' },
    { ".claude.json", 'f' },
    { ".codex", 'd' },          /* $CODEX_HOME, else ~/.codex */
};
#define N_AGENT_PARTS (sizeof agent_parts / sizeof agent_parts[0])

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Removes the host tree @path (NULL ignored). */
static void
rm_tree(const char *path)
{
    if (path)
        nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A new private host directory, or NULL with an error. */
static char *
host_tmpdir(const char *op, sbx_error **err)
{
    const char *base = getenv("TMPDIR");
    char *path = NULL;

    if (!base || !*base)
        base = "/tmp";
    if (asprintf(&path, "%s/sbx-%s-XXXXXX", base, op) < 0) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    if (!mkdtemp(path)) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_WORKSPACE, op,
                                     "cannot make a temporary directory in %s: %s", base,
                                     strerror(errno));

        sbx_error_add_context(e, "path", base);
        free(path);
        return NULL;
    }
    return path;
}

/* Runs `/bin/sh -c SCRIPT sh ARG...` (NULL-terminated @args) in @sb with
 * no stdin; stores its stdout (new string) in *@out when @out is not
 * NULL. Returns the exit code, or -1 with an error. */
static int
run_script(sbx_sandbox *sb, const char *script, const char *const *args, char **out,
           const char *op, sbx_error **err)
{
    const char *argv[12] = { "/bin/sh", "-c", script, "sh" };
    size_t n = 4;
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    sbx_result *r;
    int code;

    for (size_t i = 0; args && args[i] && n < 11; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    rq.argv = argv;
    rq.timeout_secs = 600;
    r = sbx_sandbox_execute_command(sb, &rq, err);
    if (!r)
        return -1;
    code = sbx_result_get_exit_code(r);
    if (out) {
        size_t len = 0;
        const char *s = sbx_result_get0_stdout(r, &len);

        *out = strndup(s, len);
        if (!*out) {
            sbx_result_free(r);
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
    }
    if (code != 0) {
        size_t len = 0;
        const char *e = sbx_result_get0_stderr(r, &len);
        sbx_error *x = sbx_set_error(err, SBX_ERROR_WORKSPACE, op,
                                     "a command of %s failed with exit code %d: %.*s", op, code,
                                     (int)(len > 400 ? 400 : len), e);

        sbx_error_add_contextf(x, "exit_code", "%d", code);
    }
    sbx_result_free(r);
    return code;
}

/* @path as a sandbox path: on local, where commands see host paths, the
 * sandbox root's prefix taken off. New string or NULL (no memory). */
static char *
sandbox_path_of(sbx_sandbox *sb, const char *path, size_t len)
{
    const char *root = sbx_sandbox_get0_root(sb);
    size_t rl = root ? strlen(root) : 0;

    while (rl > 1 && root[rl - 1] == '/')
        rl--;
    if (rl && len >= rl && strncmp(path, root, rl) == 0 && (len == rl || path[rl] == '/')) {
        path += rl;
        len -= rl;
        if (len == 0)
            return strdup("/");
    }
    return strndup(path, len);
}

/* The sandbox path of @dir: @dir itself, or the sandbox's working
 * directory when NULL. New string, or NULL with an error. */
static char *
resolve_dir(sbx_sandbox *sb, const char *dir, const char *op, sbx_error **err)
{
    char *out = NULL, *p;
    size_t len;

    if (dir) {
        if (dir[0] != '/') {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op,
                                         "directory \"%s\" is not an absolute sandbox path",
                                         dir);

            sbx_error_add_context(e, "path", dir);
            return NULL;
        }
        p = strdup(dir);
        if (!p)
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return p;
    }
    if (run_script(sb, "pwd", NULL, &out, op, err) != 0) {
        free(out);
        return NULL;
    }
    len = strlen(out);
    while (len && out[len - 1] == '\n')
        len--;
    p = sandbox_path_of(sb, out, len);
    free(out);
    if (!p)
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return p;
}

/* Refuses "/" where the sandbox owns it (its whole system). */
static int
check_not_system_root(sbx_sandbox *sb, const char *path, const char *op, sbx_error **err)
{
    const char *root = sbx_sandbox_get0_root(sb);

    if ((root && *root) || strspn(path, "/") != strlen(path))
        return 0;
    sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "the workspace directory is \"/\", the sandbox's whole "
                                 "system: give a directory (or create the sandbox with a "
                                 "workdir)");

    sbx_error_add_context(e, "path", path);
    return -1;
}

/*
 * The agent parts of the sandbox user's home: their sandbox paths in
 * @paths (new strings) and what exists ('d', 'f' or '-') in @kind. 0, or
 * -1 with an error.
 */
static int
agent_paths(sbx_sandbox *sb, char *paths[N_AGENT_PARTS], char kind[N_AGENT_PARTS],
            const char *op, sbx_error **err)
{
    static const char script[] =
        "c=${CODEX_HOME:-$HOME/.codex}\n"
        "for p in \"$HOME/.claude\" \"$HOME/.claude.json\" \"$c\"; do\n"
        "  if [ -d \"$p\" ] && [ ! -L \"$p\" ]; then t=d\n"
        "  elif [ -f \"$p\" ] && [ ! -L \"$p\" ]; then t=f\n"
        "  else t=-; fi\n"
        "  printf '%s %s\\n' \"$t\" \"$p\"\n"
        "done\n";
    char *out = NULL, *line, *save = NULL;
    size_t i = 0;

    if (run_script(sb, script, NULL, &out, op, err) != 0) {
        free(out);
        return -1;
    }
    for (line = strtok_r(out, "\n", &save); line && i < N_AGENT_PARTS;
         line = strtok_r(NULL, "\n", &save), i++) {
        kind[i] = line[0];
        paths[i] = strlen(line) > 2 ? sandbox_path_of(sb, line + 2, strlen(line + 2)) : NULL;
        if (!paths[i] || paths[i][0] != '/') {
            sbx_set_error(err, SBX_ERROR_WORKSPACE, op,
                          "the sandbox user's home is not an absolute path (\"%s\")", line);
            free(out);
            for (size_t k = 0; k <= i; k++) {
                free(paths[k]);
                paths[k] = NULL;
            }
            return -1;
        }
    }
    free(out);
    if (i != N_AGENT_PARTS) {
        sbx_set_error(err, SBX_ERROR_WORKSPACE, op, "cannot find the sandbox user's home");
        for (size_t k = 0; k < i; k++) {
            free(paths[k]);
            paths[k] = NULL;
        }
        return -1;
    }
    return 0;
}

/* Fails with invalid_argument unless @sandbox, @flags and @fd are usable. */
static int
check_args(sbx_sandbox *sandbox, unsigned flags, int fd, const char *op, sbx_error **err)
{
    if (!sandbox) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op, "sandbox is NULL");
        return -1;
    }
    if (flags & ~SBX_PERSIST_AGENT_HOME) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op, "unknown flags 0x%x",
                      flags & ~SBX_PERSIST_AGENT_HOME);
        return -1;
    }
    if (fd < 0 || fcntl(fd, F_GETFL) < 0) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op, "descriptor %d is not open", fd);
        return -1;
    }
    return 0;
}

/* Completes @err with the backend and op and hands it to @error. */
static void
finish(sbx_sandbox *sandbox, sbx_error *err, const char *op, sbx_error **error)
{
    sbx_error_fill(err, sandbox ? sbx_sandbox_get0_backend(sandbox) : NULL, op);
    if (sandbox && err)
        sbx_error_add_context(err, "sandbox_id", sbx_sandbox_get0_id(sandbox));
    sbx_error_propagate(error, err);
}

SBX_EXPORT int64_t
sbx_sandbox_persist_workspace(sbx_sandbox *sandbox, const char *dir, unsigned flags, int fd,
                              sbx_error **error)
{
    static const char op[] = "persist_workspace";
    sbx_error *err = NULL;
    char *path = NULL, *tmp = NULL, *sub = NULL;
    char *parts[N_AGENT_PARTS] = { NULL };
    char kind[N_AGENT_PARTS];
    int64_t n = -1;
    int tfd = -1;

    if (check_args(sandbox, flags, fd, op, &err) < 0 ||
        !(path = resolve_dir(sandbox, dir, op, &err)) ||
        check_not_system_root(sandbox, path, op, &err) < 0 ||
        !(tmp = host_tmpdir("persist", &err)))
        goto out;
    if (asprintf(&sub, "%s/workspace", tmp) < 0) {
        sub = NULL;
        goto oom;
    }
    if (sbx_sandbox_download_dir(sandbox, path, sub, &err) < 0)
        goto out;
    if (flags & SBX_PERSIST_AGENT_HOME) {
        if (agent_paths(sandbox, parts, kind, op, &err) < 0)
            goto out;
        for (size_t i = 0; i < N_AGENT_PARTS; i++) {
            if (kind[i] != agent_parts[i].type)
                continue;
            free(sub);
            if (asprintf(&sub, "%s/home/%s", tmp, agent_parts[i].name) < 0) {
                sub = NULL;
                goto oom;
            }
            if (kind[i] == 'd') {
                if (sbx_sandbox_download_dir(sandbox, parts[i], sub, &err) < 0)
                    goto out;
            } else {
                char *home = NULL;

                if (asprintf(&home, "%s/home", tmp) < 0)
                    goto oom;
                mkdir(home, 0700);
                free(home);
                if (sbx_sandbox_download_file(sandbox, parts[i], sub, &err) < 0)
                    goto out;
            }
        }
    }
    tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tfd < 0) {
        sbx_set_error(&err, SBX_ERROR_WORKSPACE, op, "cannot open %s: %s", tmp, strerror(errno));
        goto out;
    }
    {
        sbx_fs_env env = { sbx_host_services_get(), NULL, op };

        n = sbx_tar_write_tree(&env, tfd, fd, &err);
    }
    goto out;
oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
out:
    if (tfd >= 0)
        close(tfd);
    rm_tree(tmp);
    free(tmp);
    free(sub);
    free(path);
    for (size_t i = 0; i < N_AGENT_PARTS; i++)
        free(parts[i]);
    if (n < 0) {
        if (!err)
            sbx_set_error(&err, SBX_ERROR_WORKSPACE, op, "persist failed");
        finish(sandbox, err, op, error);
    } else {
        sbx_error_free(err);
    }
    return n;
}

/* Checks the layout of an extracted stream in @tmp: "workspace" (a
 * directory) must be there; besides it only "home" with the agent parts.
 * 0, or -1 with a workspace error naming the entry. */
static int
check_layout(const char *tmp, const char *op, sbx_error **err)
{
    DIR *d = opendir(tmp);
    struct dirent *e;
    int have_ws = 0, rc = 0;
    char *home = NULL;

    if (!d) {
        sbx_set_error(err, SBX_ERROR_WORKSPACE, op, "cannot read %s: %s", tmp, strerror(errno));
        return -1;
    }
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strcmp(e->d_name, "workspace") == 0 && e->d_type == DT_DIR) {
            have_ws = 1;
        } else if (strcmp(e->d_name, "home") == 0 && e->d_type == DT_DIR) {
            continue;
        } else {
            sbx_error *x = sbx_set_error(err, SBX_ERROR_WORKSPACE, op,
                                         "entry \"%s\" is not part of a persisted workspace "
                                         "(workspace/ and home/ only)", e->d_name);

            sbx_error_add_context(x, "entry", e->d_name);
            rc = -1;
        }
    }
    closedir(d);
    if (rc == 0 && !have_ws) {
        sbx_set_error(err, SBX_ERROR_WORKSPACE, op,
                      "the stream holds no workspace/ directory: not a persisted workspace");
        rc = -1;
    }
    if (rc == 0 && asprintf(&home, "%s/home", tmp) >= 0 && (d = opendir(home))) {
        while (rc == 0 && (e = readdir(d))) {
            size_t i = 0;

            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            while (i < N_AGENT_PARTS && strcmp(agent_parts[i].name, e->d_name) != 0)
                i++;
            if (i == N_AGENT_PARTS ||
                (agent_parts[i].type == 'd') != (e->d_type == DT_DIR) ||
                (agent_parts[i].type == 'f' && e->d_type != DT_REG)) {
                char *name = NULL;
                sbx_error *x;

                if (asprintf(&name, "home/%s", e->d_name) < 0)
                    name = NULL;
                x = sbx_set_error(err, SBX_ERROR_WORKSPACE, op,
                                  "entry \"%s\" is not agent state this library restores "
                                  "(home/.claude/, home/.claude.json, home/.codex/)",
                                  name ? name : e->d_name);
                sbx_error_add_context(x, "entry", name ? name : e->d_name);
                free(name);
                rc = -1;
            }
        }
        closedir(d);
    }
    free(home);
    return rc;
}

/* A staging name: ".sbx-hydrate-" and 16 hex digits. */
static void
staging_name(char out[32])
{
    unsigned char r[8];

    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        memset(r, 0x5a, sizeof r);
    snprintf(out, 32, ".sbx-hydrate-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3],
             r[4], r[5], r[6], r[7]);
}

/* Swaps the contents of sandbox directory $1 for those of its
 * subdirectory $2 (the staging directory): every other entry but $4 (the
 * agent state's staging directory when the home is $1; may be empty)
 * moves into $3 (a new subdirectory), every entry of $2 moves up, then $2
 * and $3 go. A failed move puts back what moved. Paths are sandbox
 * paths. */
static const char swap_script[] =
    "d=\"$SANDBOX_ROOT$1\"; s=\"$d/$2\"; b=\"$d/$3\"\n"
    "mkdir \"$b\" || exit 1\n"
    "undo() {\n"
    "  for f in \"$d\"/* \"$d\"/.[!.]* \"$d\"/..?*; do\n"
    "    [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
    "    case $f in \"$s\"|\"$b\"|\"$d/$4\") continue ;; esac\n"
    "    mv -f \"$f\" \"$s\"/ 2>/dev/null\n"
    "  done\n"
    "  for f in \"$b\"/* \"$b\"/.[!.]* \"$b\"/..?*; do\n"
    "    [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
    "    mv -f \"$f\" \"$d\"/\n"
    "  done\n"
    "  rm -rf \"$s\" \"$b\"; exit 1\n"
    "}\n"
    "for f in \"$d\"/* \"$d\"/.[!.]* \"$d\"/..?*; do\n"
    "  [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
    "  case $f in \"$s\"|\"$b\"|\"$d/$4\") continue ;; esac\n"
    "  mv -f \"$f\" \"$b\"/ || undo\n"
    "done\n"
    "for f in \"$s\"/* \"$s\"/.[!.]* \"$s\"/..?*; do\n"
    "  [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
    "  mv -f \"$f\" \"$d\"/ || undo\n"
    "done\n"
    "rmdir \"$s\"; rm -rf \"$b\"\n";

/* Replaces agent part $2 (a sandbox path) by $1/$3 (what was uploaded),
 * its parent made when missing. */
static const char agent_script[] =
    "src=\"$SANDBOX_ROOT$1/$3\"; dst=\"$SANDBOX_ROOT$2\"\n"
    "mkdir -p \"$(dirname \"$dst\")\" && rm -rf \"$dst\" && mv -f \"$src\" \"$dst\"\n";

SBX_EXPORT int64_t
sbx_sandbox_hydrate_workspace(sbx_sandbox *sandbox, const char *dir, unsigned flags, int fd,
                              sbx_error **error)
{
    static const char op[] = "hydrate_workspace";
    sbx_error *err = NULL;
    sbx_extract_options *xo = NULL;
    char *path = NULL, *tmp = NULL, *sub = NULL, *stage = NULL, *home_stage = NULL;
    char *parts[N_AGENT_PARTS] = { NULL };
    char kind[N_AGENT_PARTS], name[32], old[32], home_name[32];
    int64_t n = -1, count;
    int staged = 0, home_staged = 0;

    if (check_args(sandbox, flags, fd, op, &err) < 0 ||
        !(tmp = host_tmpdir("hydrate", &err)))
        goto out;
    /* The whole stream is checked before the sandbox is touched. */
    xo = sbx_extract_options_new();
    if (!xo || sbx_extract_options_set_outside_symlinks(xo, SBX_OUTSIDE_SYMLINKS_REFUSE,
                                                        &err) < 0)
        goto oom;
    count = sbx_extract_tar_fd_with_options(fd, tmp, xo, &err);
    if (count < 0 || check_layout(tmp, op, &err) < 0)
        goto out;
    if (!(path = resolve_dir(sandbox, dir, op, &err)) ||
        check_not_system_root(sandbox, path, op, &err) < 0)
        goto out;
    if (asprintf(&sub, "%s/workspace", tmp) < 0) {
        sub = NULL;
        goto oom;
    }
    staging_name(name);
    if (asprintf(&stage, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", name) < 0) {
        stage = NULL;
        goto oom;
    }
    staged = 1;
    if (sbx_sandbox_upload_dir(sandbox, sub, stage, &err) < 0)
        goto out;
    if (flags & SBX_PERSIST_AGENT_HOME) {
        char *home_dir = NULL;

        if (asprintf(&home_dir, "%s/home", tmp) < 0)
            goto oom;
        if (access(home_dir, F_OK) == 0) {
            if (agent_paths(sandbox, parts, kind, op, &err) < 0) {
                free(home_dir);
                goto out;
            }
            /* Staged beside the first part (in the user's home), under a
             * name of its own (the home may be the workspace itself). */
            char *slash = strrchr(parts[0], '/');
            staging_name(home_name);
            if (asprintf(&home_stage, "%.*s/%s", (int)(slash - parts[0]), parts[0],
                         home_name) < 0) {
                home_stage = NULL;
                free(home_dir);
                goto oom;
            }
            home_staged = 1;
            if (sbx_sandbox_upload_dir(sandbox, home_dir, home_stage, &err) < 0) {
                free(home_dir);
                goto out;
            }
        }
        free(home_dir);
    }
    /* Everything is in the sandbox: the swap. */
    {
        const char *args[] = { path, name, NULL, home_staged ? home_name : "", NULL };

        staging_name(old);
        args[2] = old;
        if (run_script(sandbox, swap_script, args, NULL, op, &err) != 0)
            goto out;
        staged = 0;
    }
    if (home_staged) {
        for (size_t i = 0; i < N_AGENT_PARTS; i++) {
            char *local = NULL;
            int have;

            if (asprintf(&local, "%s/home/%s", tmp, agent_parts[i].name) < 0)
                goto oom;
            have = access(local, F_OK) == 0;
            free(local);
            if (!have)
                continue;
            const char *args[] = { home_stage, parts[i], agent_parts[i].name, NULL };

            if (run_script(sandbox, agent_script, args, NULL, op, &err) != 0)
                goto out;
        }
    }
    n = count;
    goto out;
oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
out:
    if (staged || home_staged) {
        /* What was staged goes; the target was not touched. */
        const char *args[] = { staged ? stage : "", home_staged ? home_stage : "", NULL };

        run_script(sandbox, "for p in \"$1\" \"$2\"; do [ -n \"$p\" ] && "
                            "rm -rf \"$SANDBOX_ROOT$p\"; done; exit 0", args, NULL, op, NULL);
    }
    sbx_extract_options_free(xo);
    rm_tree(tmp);
    free(tmp);
    free(sub);
    free(stage);
    free(home_stage);
    free(path);
    for (size_t i = 0; i < N_AGENT_PARTS; i++)
        free(parts[i]);
    if (n < 0) {
        if (!err)
            sbx_set_error(&err, SBX_ERROR_WORKSPACE, op, "hydrate failed");
        finish(sandbox, err, op, error);
    } else {
        sbx_error_free(err);
    }
    return n;
}
