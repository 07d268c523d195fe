/*
 * host/client.c — clients (one loaded backend) and sandboxes: create with
 * its generic steps (git clone), destroy, is_alive, free. Every error that
 * leaves these functions carries the backend name and the op.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <json-c/json.h>

extern char **environ;

#include "internal.h"
#include "proxy.h"

/* The calling thread's call scope (sbx_call_scope_set). */
static __thread int scope_cancel_fd = -1;
static __thread double scope_deadline = 0;

void
sbx_call_scope_set(int cancel_fd, double deadline)
{
    scope_cancel_fd = cancel_fd;
    scope_deadline = deadline;
}

void
sbx_call_scope_get(int *cancel_fd, double *deadline)
{
    if (cancel_fd)
        *cancel_fd = scope_cancel_fd;
    if (deadline)
        *deadline = scope_deadline;
}

void
sbx_call_ctx_init(sbx_call_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->struct_size = sizeof(*ctx);
    ctx->deadline = scope_deadline;
    ctx->cancel_fd = scope_cancel_fd;
    ctx->create_token = NULL;
}

void
sbx_call_ctx_init_for(sbx_call_ctx *ctx, const sbx_client *client)
{
    sbx_call_ctx_init(ctx);
    if (client && client->mode == SBX_PLUGIN_MODE_IN_PROCESS && client->call_timeout > 0) {
        double d = sbx_monotonic_now() + client->call_timeout;
        if (ctx->deadline <= 0 || d < ctx->deadline)
            ctx->deadline = d;
    }
}

/* Fills backend and op into @err and hands it to the caller's @error. */
static void
finish_error(sbx_error **error, sbx_error *err, const char *backend, const char *op)
{
    sbx_error_fill(err, backend, op);
    sbx_error_propagate(error, err);
}

/* ---------------------------------------------------------------- clients */

SBX_EXPORT const char *
sbx_plugin_mode_name(sbx_plugin_mode mode)
{
    switch (mode) {
    case SBX_PLUGIN_MODE_OUT_OF_PROCESS:
        return "outofprocess";
    case SBX_PLUGIN_MODE_IN_PROCESS:
        return "inprocess";
    default:
        return "default";
    }
}

SBX_EXPORT int
sbx_plugin_mode_resolve(sbx_plugin_mode mode, sbx_error **error)
{
    const char *env;
    sbx_error *e;

    if (mode == SBX_PLUGIN_MODE_OUT_OF_PROCESS || mode == SBX_PLUGIN_MODE_IN_PROCESS)
        return (int)mode;
    if (mode != SBX_PLUGIN_MODE_DEFAULT) {
        e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "client_new",
                          "invalid plugin mode %d", (int)mode);
        sbx_error_add_contextf(e, "mode", "%d", (int)mode);
        return -1;
    }
    env = getenv("SBX_PLUGIN_MODE");
    if (!env || !*env || strcmp(env, "outofprocess") == 0)
        return SBX_PLUGIN_MODE_OUT_OF_PROCESS;
    if (strcmp(env, "inprocess") == 0)
        return SBX_PLUGIN_MODE_IN_PROCESS;
    e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "client_new",
                      "invalid SBX_PLUGIN_MODE \"%s\": must be \"inprocess\" or "
                      "\"outofprocess\"", env);
    sbx_error_add_context(e, "SBX_PLUGIN_MODE", env);
    return -1;
}

SBX_EXPORT sbx_client *
sbx_client_new(const char *backend, sbx_error **error)
{
    return sbx_client_new_with_mode(backend, SBX_PLUGIN_MODE_DEFAULT, error);
}

/* A new client record for @backend in @mode, or NULL with an error. */
static sbx_client *
client_alloc(const char *backend, sbx_plugin_mode mode, sbx_error **error)
{
    sbx_client *client = calloc(1, sizeof(*client));
    sbx_error *err = NULL;

    if (!client || !(client->backend = strdup(backend))) {
        free(client);
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        finish_error(error, err, backend, "client_new");
        return NULL;
    }
    client->mode = mode;
    if (sbx_usage_client_init(client, &err) < 0) {
        free(client->backend);
        free(client);
        finish_error(error, err, backend, "client_new");
        return NULL;
    }
    return client;
}

SBX_EXPORT sbx_client *
sbx_client_new_with_mode(const char *backend, sbx_plugin_mode mode, sbx_error **error)
{
    return sbx_client_new_with_config(backend, mode, NULL, error);
}

/* 0 when @config_json is NULL, empty or a JSON object; else -1 with
 * invalid_argument naming the text (cut to 64 bytes) in the message and
 * its context "config". */
static int
check_client_config(const char *config_json, sbx_error **err)
{
    struct json_object *j;
    int ok;

    if (!config_json || !*config_json)
        return 0;
    j = json_tokener_parse(config_json);
    ok = j && json_object_is_type(j, json_type_object);
    json_object_put(j);
    if (ok)
        return 0;
    sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "client_new",
                  "client config '%.64s%s' is not a JSON object", config_json,
                  strlen(config_json) > 64 ? "..." : "");
    sbx_error_add_context(*err, "config", "not a JSON object");
    return -1;
}

SBX_EXPORT sbx_client *
sbx_client_new_with_config(const char *backend, sbx_plugin_mode mode, const char *config_json,
                           sbx_error **error)
{
    static const char op[] = "client_new";
    int (*client_new)(const char *, sbx_plugin_client **, sbx_error **);
    sbx_error *err = NULL;
    const sbx_plugin *plugin;
    sbx_client *client;
    int resolved = sbx_plugin_mode_resolve(mode, &err);

    if (resolved < 0) {
        finish_error(error, err, backend && sbx_backend_name_valid(backend) ? backend : NULL, op);
        return NULL;
    }
    if (config_json && !*config_json)
        config_json = NULL;
    if (check_client_config(config_json, &err) < 0) {
        finish_error(error, err, backend && sbx_backend_name_valid(backend) ? backend : NULL, op);
        return NULL;
    }
    if (resolved == SBX_PLUGIN_MODE_OUT_OF_PROCESS) {
        sbx_plugin_client *handle = NULL;

        /* The name is checked and the plugin found here first, so a missing
         * backend is reported without starting a host. */
        if (sbx_plugin_find(backend, &err) < 0) {
            finish_error(error, err, sbx_backend_name_valid(backend) ? backend : NULL, op);
            return NULL;
        }
        if (!(client = client_alloc(backend, SBX_PLUGIN_MODE_OUT_OF_PROCESS, error)))
            return NULL;
        if (sbx_proxy_open(backend, config_json, &client->plugin, &handle, &err) < 0) {
            sbx_error_ensure(&err, backend, op);
            finish_error(error, err, backend, op);
            free(client->backend);
            free(client);
            return NULL;
        }
        client->handle = handle;
        return client;
    }

    plugin = sbx_plugin_load(backend, &err);
    if (!plugin) {
        finish_error(error, err, sbx_backend_name_valid(backend) ? backend : NULL, op);
        return NULL;
    }
    if (!(client = client_alloc(backend, SBX_PLUGIN_MODE_IN_PROCESS, error)))
        return NULL;
    client->plugin = plugin;
    client_new = SBX_SLOT(plugin, client_new);
    if (client_new && client_new(config_json, &client->handle, &err) != 0) {
        sbx_error_ensure(&err, backend, op);
        finish_error(error, err, backend, op);
        free(client->backend);
        free(client);
        return NULL;
    }
    sbx_error_free(err);
    return client;
}

SBX_EXPORT void
sbx_client_free(sbx_client *client)
{
    void (*client_free)(sbx_plugin_client *);

    if (!client)
        return;
    client_free = SBX_SLOT(client->plugin, client_free);
    if (client_free && client->handle)
        client_free(client->handle);
    sbx_usage_client_free(client);
    free(client->backend);
    free(client);
}

SBX_EXPORT const char *
sbx_client_get0_backend(const sbx_client *client)
{
    return client ? client->backend : "";
}

SBX_EXPORT sbx_plugin_mode
sbx_client_get_plugin_mode(const sbx_client *client)
{
    return client ? client->mode : SBX_PLUGIN_MODE_DEFAULT;
}

SBX_EXPORT int
sbx_client_get_host_pid(const sbx_client *client)
{
    if (!client || client->mode != SBX_PLUGIN_MODE_OUT_OF_PROCESS)
        return 0;
    return sbx_proxy_host_pid(client->handle);
}

SBX_EXPORT int
sbx_client_set_call_timeout(sbx_client *client, double secs, sbx_error **error)
{
    static const char op[] = "set_call_timeout";
    sbx_error *err = NULL, *e;

    if (!client) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "client is NULL");
        finish_error(error, err, NULL, op);
        return -1;
    }
    if (!isfinite(secs) || secs < 0) {
        e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op,
                          "invalid call timeout %g: must be a finite number of seconds >= 0",
                          secs);
        sbx_error_add_contextf(e, "call_timeout", "%g", secs);
        finish_error(error, err, client->backend, op);
        return -1;
    }
    client->call_timeout = secs;
    if (client->mode == SBX_PLUGIN_MODE_OUT_OF_PROCESS)
        sbx_proxy_set_call_timeout(client->handle, secs);
    return 0;
}

SBX_EXPORT int
sbx_client_probe(sbx_client *client, uint64_t *caps, sbx_error **error)
{
    static const char op[] = "probe";
    int (*probe)(sbx_plugin_client *, const sbx_call_ctx *, uint64_t *, sbx_error **);
    sbx_error *err = NULL;
    sbx_call_ctx ctx;
    uint64_t got = 0;

    if (!client || !caps) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "%s is NULL",
                      client ? "caps" : "client");
        finish_error(error, err, client ? client->backend : NULL, op);
        return -1;
    }
    probe = SBX_SLOT(client->plugin, probe);
    if (!probe) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" does not support probe", client->backend);
        finish_error(error, err, client->backend, op);
        return -1;
    }
    sbx_call_ctx_init_for(&ctx, client);
    if (probe(client->handle, &ctx, &got, &err) != 0) {
        sbx_error_ensure(&err, client->backend, op);
        finish_error(error, err, client->backend, op);
        return -1;
    }
    sbx_error_free(err);
    *caps = got & client->plugin->caps;
    return 0;
}

/* ---------------------------------------------------------------- sandboxes */

/* Frees the handle's memory and the plugin handle; does not destroy. */
static void
sandbox_release(sbx_sandbox *sandbox)
{
    void (*sandbox_free)(sbx_plugin_sandbox *);

    /* A handle freed without a destroy ends its lifetime in this process. */
    sbx_usage_sandbox_end(sandbox, 0);
    sbx_usage_sandbox_free(sandbox);
    sandbox_free = SBX_SLOT(sandbox->client->plugin, sandbox_free);
    if (sandbox_free && sandbox->handle)
        sandbox_free(sandbox->handle);
    if (sandbox->owns_client)
        sbx_shared_client_put(sandbox->client);
    sbx_direct_ep_free(sandbox->direct);
    pthread_mutex_destroy(&sandbox->lock);
    free(sandbox->id);
    free(sandbox->root);
    free(sandbox);
}

/*
 * The directory name git gives a clone of @url: its last path component
 * without trailing '/' and ".git"; "repo" when that leaves "", "." or "..".
 */
static char *
repo_dir_name(const char *url)
{
    size_t len = strlen(url), start = 0, n;
    char *name;

    while (len > 0 && url[len - 1] == '/')
        len--;
    for (size_t i = 0; i < len; i++)
        if (url[i] == '/')
            start = i + 1;
    if (start == 0)
        for (size_t i = 0; i < len; i++)
            if (url[i] == ':')
                start = i + 1;
    n = len - start;
    if (n >= 4 && memcmp(url + start + n - 4, ".git", 4) == 0)
        n -= 4;
    if (n == 0 || (n == 1 && url[start] == '.') ||
        (n == 2 && url[start] == '.' && url[start + 1] == '.'))
        return strdup("repo");
    name = strndup(url + start, n);
    return name;
}

/* The last non-empty line of @text (new string), without CR/LF. */
static char *
last_line(const char *text, size_t len)
{
    size_t end = len, start;

    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r'))
        end--;
    start = end;
    while (start > 0 && text[start - 1] != '\n' && text[start - 1] != '\r')
        start--;
    return strndup(text + start, end - start);
}

/*
 * @line with every occurrence of @secret replaced by @shown (new string).
 * Keeps a password in the clone URL out of messages that echo the URL.
 */
static char *
replace_all(const char *line, const char *secret, const char *shown)
{
    sbx_buf b = { 0 };
    size_t slen = strlen(secret);
    const char *p = line, *hit;

    if (slen == 0 || strcmp(secret, shown) == 0)
        return strdup(line);
    while ((hit = strstr(p, secret))) {
        if (sbx_buf_append(&b, p, (size_t)(hit - p)) < 0 ||
            sbx_buf_append(&b, shown, strlen(shown)) < 0) {
            sbx_buf_clear(&b);
            return NULL;
        }
        p = hit + slen;
    }
    if (sbx_buf_append(&b, p, strlen(p)) < 0) {
        sbx_buf_clear(&b);
        return NULL;
    }
    return sbx_buf_steal(&b, NULL);
}

/* The host directory @url names when it is a local repository path
 * ("file://" stripped), else NULL. */
static const char *
host_repo_dir(const char *url)
{
    const char *p = strncmp(url, "file://", 7) == 0 ? url + 7 : url;
    struct stat st;

    if (strstr(p, "://") || stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
        return NULL;
    return p;
}

/*
 * Writes a bundle of the host repository @dir (HEAD, every branch and tag:
 * `git -C DIR bundle create - HEAD --all`, on git's stdout) to a temporary
 * file unlinked before git starts and returns its descriptor at offset 0,
 * or -1 with a creation_failed error naming the step and git's last line.
 * Nothing is ever on disk under a name: a process killed while git runs
 * (SIGKILL included) leaves no file behind, and git itself ends when it
 * has written the bundle.
 */
static int
bundle_repo(const char *dir, const char *shown, sbx_error **err)
{
    const char *t = getenv("TMPDIR");
    const char *tmp = t && *t ? t : "/tmp";
    char *path = sbx_asprintf("%s/sbx-git-XXXXXX.bundle", tmp);
    int pfd[2] = { -1, -1 }, fd = -1, rc = -1, status = 0;
    pid_t pid = -1;
    sbx_buf msg = { 0 };
    posix_spawn_file_actions_t fa;
    sbx_error *e;

    if (!path) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        return -1;
    }
    fd = open(tmp, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        /* A file system without O_TMPFILE: a name, gone at once. */
        fd = mkostemps(path, 7, O_CLOEXEC);
        if (fd >= 0)
            unlink(path);
    }
    if (fd < 0) {
        e = sbx_set_error(err, errno == EMFILE || errno == ENFILE || errno == ENOMEM
                                   ? SBX_ERROR_RESOURCE_EXHAUSTED : SBX_ERROR_CREATION_FAILED,
                          NULL, "git clone of %s: cannot make a temporary file in %s: %s",
                          shown, tmp, strerror(errno));
        sbx_error_add_context(e, "step", "git_clone");
        sbx_error_add_context(e, "path", tmp);
        free(path);
        return -1;
    }
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        e = sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "pipe: %s", strerror(errno));
        goto out;
    }
    const char *argv[] = { "git", "-C", dir, "bundle", "create", "-", "HEAD", "--all", NULL };
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    int se = posix_spawnp(&pid, "git", &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    pfd[1] = -1;
    if (se != 0) {
        e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                          "git clone of %s: cannot run git on this host to carry the "
                          "repository into the sandbox: %s", shown, strerror(se));
        sbx_error_add_context(e, "step", "git_clone");
        goto out;
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(pfd[0], buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (msg.len < 65536)
            sbx_buf_append(&msg, buf, (size_t)n);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char *line = last_line(msg.data, msg.len);
        e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                          "git clone of %s failed: the bundle of the host repository could "
                          "not be made%s%s", shown, line && *line ? ": " : "",
                          line ? line : "");
        sbx_error_add_context(e, "step", "git_clone");
        free(line);
        goto out;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                          "git clone of %s: cannot read the bundle back: %s", shown,
                          strerror(errno));
        sbx_error_add_context(e, "step", "git_clone");
        goto out;
    }
    rc = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    free(path);
    sbx_buf_clear(&msg);
    return rc;
}

/*
 * Runs `git clone --depth 1 [--branch REF] -- URL NAME` in the sandbox's
 * working directory through the exec engine. A local repository path on a
 * backend with isolation (the sandbox cannot see the host's path) is
 * carried in: a bundle of it (bundle_repo) is written to
 * /tmp/.sbx-git-XXXXXXXX.bundle in the sandbox and cloned from there, its
 * origin set back to URL and the bundle removed. Returns 0, or -1 with
 * *@err a creation_failed error naming the step.
 */
static int
git_clone(sbx_sandbox *sandbox, const char *url, const char *ref, sbx_error **err)
{
    static const char *const env[] = { "GIT_TERMINAL_PROMPT=0", NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    const char *argv[10];
    sbx_error *inner = NULL, *e;
    char *name = repo_dir_name(url), *shown = sbx_redact_url(url);
    sbx_result *res = NULL;
    size_t n = 0;
    int rc = -1;

    const char *host_dir = host_repo_dir(url);
    char *carried = NULL, *clone_from = (char *)url;

    if (!name || !shown) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        goto out;
    }
    if (host_dir && (sandbox->client->plugin->caps & SBX_CAP_ISOLATION)) {
        unsigned long long r = 0;
        int bfd = bundle_repo(host_dir, shown, err);

        if (bfd < 0)
            goto out;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (unsigned long long)getpid() * 2654435761ULL;
        carried = sbx_asprintf("/tmp/.sbx-git-%08llx.bundle", r & 0xffffffffULL);
        if (!carried) {
            close(bfd);
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
            goto out;
        }
        int w = sbx_sandbox_write_file_from_fd(sandbox, carried, bfd, 0644, &inner);
        close(bfd);
        if (w < 0) {
            e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                              "git clone of %s failed: cannot carry the repository into the "
                              "sandbox: %s", shown,
                              inner ? sbx_error_get0_message(inner) : "write_file failed");
            sbx_error_add_context(e, "step", "git_clone");
            goto out;
        }
        if (sandbox->root && *sandbox->root) {
            /* Written as a sandbox path: commands name it under the root
             * (an isolated sandbox that is a directory, as on ray). */
            char *in_root = sbx_asprintf("%s%s", sandbox->root, carried);

            if (!in_root) {
                sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
                goto out;
            }
            free(carried);
            carried = in_root;
        }
        clone_from = carried;
    }
    argv[n++] = "git";
    argv[n++] = "clone";
    argv[n++] = "--depth";
    argv[n++] = "1";
    if (ref) {
        argv[n++] = "--branch";
        argv[n++] = ref;
    }
    argv[n++] = "--";
    argv[n++] = clone_from;
    argv[n++] = name;
    argv[n] = NULL;
    rq.argv = argv;
    rq.env = env;
    res = sbx_exec_run(sandbox, &rq, &inner);
    if (!res) {
        e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                          "git clone of %s failed: %s", shown,
                          inner ? sbx_error_get0_message(inner) : "unknown error");
        sbx_error_add_context(e, "step", "git_clone");
        sbx_error_add_context(e, "cause", sbx_error_code_name(sbx_error_get_code(inner)));
        goto out;
    }
    if (res->exit_code != 0) {
        char *raw = last_line(res->err, res->err_len);
        char *line = raw ? replace_all(raw, url, shown) : NULL;

        free(raw);

        e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                          "git clone of %s failed with exit code %d%s%s%s", shown,
                          res->exit_code, res->timed_out ? " (timed out)" : "",
                          line && *line ? ": " : "", line ? line : "");
        sbx_error_add_context(e, "step", "git_clone");
        sbx_error_add_contextf(e, "exit_code", "%d", res->exit_code);
        free(line);
        goto out;
    }
    if (carried) {
        /* The clone's origin is the repository the caller named. */
        const char *set_url[] = { "git", "-C", name, "remote", "set-url", "origin", url, NULL };
        sbx_exec_request sq = SBX_EXEC_REQUEST_INIT;
        sbx_result *sr;

        sq.argv = set_url;
        sq.env = env;
        sr = sbx_exec_run(sandbox, &sq, &inner);
        if (!sr || sr->exit_code != 0) {
            e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                              "git clone of %s: cannot set its origin (exit code %d)", shown,
                              sr ? sr->exit_code : -1);
            sbx_error_add_context(e, "step", "git_clone");
            sbx_result_free(sr);
            goto out;
        }
        sbx_result_free(sr);
    }
    rc = 0;
out:
    if (carried) {
        /* The bundle goes again, whatever happened. */
        const char *rm[] = { "rm", "-f", "--", carried, NULL };
        sbx_exec_request rq2 = SBX_EXEC_REQUEST_INIT;
        sbx_error *ignored = NULL;

        rq2.argv = rm;
        sbx_result_free(sbx_exec_run(sandbox, &rq2, &ignored));
        sbx_error_free(ignored);
    }
    free(carried);
    sbx_error_free(inner);
    sbx_result_free(res);
    free(name);
    free(shown);
    return rc;
}

/*
 * Writes the files of sbx_options_add_file(), in order. Returns 0, or -1
 * with *@err a creation_failed error naming the step and the path.
 */
static int
write_files(sbx_sandbox *sandbox, const sbx_options *options, sbx_error **err)
{
    size_t n = sbx_options_get_file_count(options);

    for (size_t i = 0; i < n; i++) {
        const char *path, *data;
        size_t len;
        sbx_error *inner = NULL;

        sbx_options_get0_file(options, i, &path, &data, &len);
        if (sbx_sandbox_write_file(sandbox, path, data, len, &inner) == 0)
            continue;
        sbx_error *e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL,
                                     "writing file %s failed: %s", path,
                                     inner ? sbx_error_get0_message(inner) : "unknown error");
        sbx_error_add_context(e, "step", "files");
        sbx_error_add_context(e, "path", path);
        if (inner)
            sbx_error_add_context(e, "cause", sbx_error_code_name(sbx_error_get_code(inner)));
        sbx_error_free(inner);
        return -1;
    }
    return 0;
}

/* The last SBX_PRESET_TAIL_BYTES bytes of one stream of a setup command,
 * and how many it wrote in all. */
typedef struct setup_tail {
    char bytes[SBX_PRESET_TAIL_BYTES];
    size_t len;
    uint64_t total;
} setup_tail;

/* What the streaming callback of one setup command needs. */
typedef struct setup_watch {
    setup_tail tail[2];             /* stdout, stderr */
    sbx_progress_fn fn;
    void *fn_data;
    sbx_progress report;            /* the STEP_OUTPUT report, filled in */
} setup_watch;

static void
setup_tail_add(setup_tail *t, const char *data, size_t len)
{
    t->total += len;
    if (len >= sizeof(t->bytes)) {
        memcpy(t->bytes, data + len - sizeof(t->bytes), sizeof(t->bytes));
        t->len = sizeof(t->bytes);
        return;
    }
    if (t->len + len > sizeof(t->bytes)) {
        size_t drop = t->len + len - sizeof(t->bytes);
        memmove(t->bytes, t->bytes + drop, t->len - drop);
        t->len -= drop;
    }
    memcpy(t->bytes + t->len, data, len);
    t->len += len;
}

static void
setup_output(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    setup_watch *w = user_data;

    setup_tail_add(&w->tail[stream == SBX_STREAM_STDERR], data, len);
    if (w->fn) {
        w->report.event = SBX_PROGRESS_STEP_OUTPUT;
        w->report.stream = stream;
        w->report.data = data;
        w->report.len = len;
        w->fn(&w->report, w->fn_data);
        w->report.data = NULL;
        w->report.len = 0;
    }
}

/* The tail of @t as a string (new; a NUL byte in it ends the text early).
 * NULL on OOM. */
static char *
tail_text(const setup_tail *t)
{
    return strndup(t->bytes, t->len);
}

/* Appends the "--- stdout ---" section of @t to @b (nothing when the
 * stream wrote nothing). Returns 0 or -1. */
static int
tail_section(sbx_buf *b, const char *name, const setup_tail *t, const char *text)
{
    char head[96];
    size_t n = strlen(text);

    if (t->total == 0)
        return 0;
    if (t->total > t->len)
        snprintf(head, sizeof(head), "\n--- %s (last %zu of %llu bytes) ---\n", name, t->len,
                 (unsigned long long)t->total);
    else
        snprintf(head, sizeof(head), "\n--- %s ---\n", name);
    if (n > 0 && text[n - 1] == '\n')
        n--;
    return sbx_buf_append(b, head, strlen(head)) < 0 || sbx_buf_append(b, text, n) < 0 ? -1 : 0;
}

/*
 * Runs the preset's setup commands with /bin/sh -c, in order, reporting
 * each to the options' progress callback. Returns 0, or -1 with *@err a
 * creation_failed error naming the step, the command and the tails of its
 * output (sbx.h, "Presets").
 */
static int
run_setup(sbx_sandbox *sandbox, const sbx_preset *preset, const sbx_options *options,
          sbx_strv *commands, sbx_error **err)
{
    setup_watch *w = commands->count ? calloc(1, sizeof(*w)) : NULL;
    int rc = 0;

    if (commands->count && !w) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < commands->count; i++) {
        sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
        sbx_error *inner = NULL;
        sbx_result *res;
        double start;

        memset(w, 0, sizeof(*w));
        w->fn = sbx_options_get_progress(options, &w->fn_data);
        w->report.struct_size = sizeof(w->report);
        w->report.step = "preset_setup";
        w->report.name = sbx_preset_get0_name(preset);
        w->report.index = i + 1;
        w->report.count = commands->count;
        w->report.command = commands->items[i];
        if (w->fn) {
            w->report.event = SBX_PROGRESS_STEP_START;
            w->fn(&w->report, w->fn_data);
        }
        rq.shell = commands->items[i];
        rq.on_output = setup_output;
        rq.user_data = w;
        rq.flags = SBX_EXEC_NO_CAPTURE;   /* the tails are all that is kept */
        start = sbx_monotonic_now();
        res = sbx_exec_run(sandbox, &rq, &inner);
        if (w->fn) {
            w->report.event = SBX_PROGRESS_STEP_END;
            w->report.exit_code = res ? res->exit_code : -1;
            w->report.timed_out = res ? res->timed_out : 0;
            w->report.duration_secs = sbx_monotonic_now() - start;
            w->fn(&w->report, w->fn_data);
        }
        if (res && res->exit_code == 0) {
            sbx_result_free(res);
            continue;
        }
        char *out = tail_text(&w->tail[0]), *errt = tail_text(&w->tail[1]), *head;
        sbx_buf b = { 0 };
        if (res)
            head = sbx_asprintf("preset setup command %zu of %zu failed with exit code %d%s: %s",
                                i + 1, commands->count, res->exit_code,
                                res->timed_out ? " (timed out)" : "", commands->items[i]);
        else
            head = sbx_asprintf("preset setup command %zu of %zu could not run: %s: %s", i + 1,
                                commands->count,
                                inner ? sbx_error_get0_message(inner) : "no error given",
                                commands->items[i]);
        if (!out || !errt || !head || sbx_buf_append(&b, head, strlen(head)) < 0 ||
            tail_section(&b, "stdout", &w->tail[0], out) < 0 ||
            tail_section(&b, "stderr", &w->tail[1], errt) < 0 ||
            sbx_buf_append(&b, "", 1) < 0) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
        } else {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_CREATION_FAILED, NULL, "%s", b.data);
            sbx_error_add_context(e, "step", "preset_setup");
            sbx_error_add_context(e, "command", commands->items[i]);
            if (res)
                sbx_error_add_contextf(e, "exit_code", "%d", res->exit_code);
            else if (inner)
                sbx_error_add_context(e, "cause", sbx_error_code_name(sbx_error_get_code(inner)));
            if (w->tail[0].total)
                sbx_error_add_context(e, "stdout_tail", out);
            if (w->tail[1].total)
                sbx_error_add_context(e, "stderr_tail", errt);
        }
        sbx_buf_clear(&b);
        free(head);
        free(out);
        free(errt);
        sbx_result_free(res);
        sbx_error_free(inner);
        rc = -1;
        break;
    }
    free(w);
    return rc;
}

/*
 * Destroys a sandbox whose creation failed in a later step; notes a failed
 * cleanup in @err's context. The cleanup is not the caller's call: the
 * caller's cancellation and deadline (a creation cancelled with
 * sbx_op_cancel) do not stop it, the destroy slot's own bound does.
 */
static void
destroy_after_failure(sbx_sandbox *sandbox, sbx_error *err)
{
    int (*destroy)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **);
    sbx_error *derr = NULL;
    sbx_call_ctx ctx;

    destroy = SBX_SLOT(sandbox->client->plugin, destroy);
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    ctx.cancel_fd = -1;
    ctx.deadline = 0;
    if (!destroy || destroy(sandbox->handle, &ctx, &derr) != 0) {
        sbx_error_add_context(err, "cleanup", "failed");
        if (derr)
            sbx_error_add_context(err, "cleanup_error", sbx_error_get0_message(derr));
    } else if (sandbox->token[0]) {
        sbx_record_remove(sandbox->token, NULL);
    }
    sbx_error_free(derr);
}

/* Completes the lifecycle record of a sandbox just made: the provider's id,
 * the session state sbx_gc() resumes it from (none when the backend has no
 * session state) and the expiry @expires_at (UNIX seconds, 0 = none),
 * counted from when the create returned. A failure leaves the row with the
 * token, which
 * gc still matches against list_owned. The same session state gives the
 * sandbox's live price, where the provider reports one (usage.c), and its
 * exec endpoint, where it has one (direct.c). */
static void
record_created(sbx_sandbox *sandbox, double expires_at)
{
    char *state = NULL;

    if (SBX_SLOT(sandbox->client->plugin, session_state))
        state = sbx_sandbox_session_state(sandbox, NULL);
    if (state) {
        json_object *doc = json_tokener_parse(state);

        sbx_usage_sandbox_live_price(sandbox, doc);
        sbx_direct_from_state(sandbox, doc, 0);
        json_object_put(doc);
    }
    if (sandbox->token[0])
        sbx_record_complete(sandbox->token, sandbox->id, state, expires_at, NULL);
    free(state);
}

/*
 * A sandbox without a lifetime (SBX_TIMEOUT_NONE) only where its owners
 * bound it: attached, on a backend that ends it when they end, SIGKILL
 * included, in both plugin modes (SBX_CAP_OWNER_WATCH). Else -1 with a
 * configuration error naming the option and the reason.
 */
static int
refuse_no_lifetime(sbx_client *client, const sbx_options *options, const char *op,
                   sbx_error **err)
{
    sbx_error *e;

    if (sbx_options_get_detached(options)) {
        e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, op,
                          "timeout_secs: a detached sandbox needs a lifetime: nothing else "
                          "ends it (no lifetime, SBX_TIMEOUT_NONE, is for an attached "
                          "sandbox, which ends with its owners)");
        sbx_error_add_context(e, "reason", "detached");
    } else if (!(client->plugin->caps & SBX_CAP_OWNER_WATCH)) {
        e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, op,
                          "timeout_secs: backend \"%s\" cannot end an attached sandbox when "
                          "its owners end, so it needs a lifetime (no lifetime, "
                          "SBX_TIMEOUT_NONE, is for local, bubblewrap and safehouse)",
                          client->backend);
        sbx_error_add_context(e, "reason", "backend");
    } else {
        return 0;
    }
    sbx_error_add_context(e, "option", "timeout_secs");
    return -1;
}

SBX_EXPORT sbx_sandbox *
sbx_sandbox_create(sbx_client *client, const sbx_options *options, sbx_error **error)
{
    static const char op[] = "create";
    int (*create)(sbx_plugin_client *, const sbx_call_ctx *,
                  const sbx_plugin_create_request *, sbx_plugin_sandbox **, sbx_error **);
    const char *(*get_id)(sbx_plugin_sandbox *);
    const char *(*get_root)(sbx_plugin_sandbox *);
    char token[SBX_TOKEN_LEN + 1];
    sbx_plugin_create_request req;
    sbx_plugin_sandbox *handle = NULL;
    sbx_sandbox *sandbox = NULL;
    sbx_strv env = { 0 };
    sbx_error *err = NULL;
    sbx_call_ctx ctx;
    const char *s;
    sbx_preset *preset = NULL;
    sbx_strv setup = { 0 };
    int skip_setup = 0, setup_first = 0;
    double expires_mono = 0;

    if (!client) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "client is NULL");
        finish_error(error, err, NULL, op);
        return NULL;
    }
    create = SBX_SLOT(client->plugin, create);
    if (!create) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" cannot create sandboxes", client->backend);
        goto fail;
    }
    if (sbx_record_new_token(token, &err) < 0)
        goto fail;
    if (sbx_options_get0_preset(options)) {
        preset = sbx_preset_load(sbx_options_get0_preset(options), &err);
        if (!preset) {
            sbx_error_add_context(err, "option", "preset");
            goto fail;
        }
    }
    if (sbx_preset_env_strv(preset, options, &env) < 0 ||
        sbx_options_env_strv(options, &env) < 0)
        goto oom;

    memset(&req, 0, sizeof(req));
    req.struct_size = sizeof(req);
    req.set_fields = sbx_options_set_fields(options);
    req.cpu = sbx_options_get_cpu(options);
    req.memory_mb = sbx_options_get_memory_mb(options);
    req.timeout_secs = sbx_options_get_timeout_secs(options);
    /* Preset values are defaults: only fields the caller left unset. */
    if (preset) {
        double v;
        if (!sbx_options_is_set(options, SBX_OPTION_CPU) && sbx_preset_get_number(preset, "cpu", &v))
            req.cpu = v;
        if (!sbx_options_is_set(options, SBX_OPTION_MEMORY_MB) &&
            sbx_preset_get_number(preset, "memory_mb", &v))
            req.memory_mb = (int64_t)v;
        if (!sbx_options_is_set(options, SBX_OPTION_TIMEOUT_SECS) &&
            sbx_preset_get_number(preset, "timeout_secs", &v))
            req.timeout_secs = v;
    }
    req.workdir = sbx_options_get0_workdir(options);
    req.env = sbx_strv_view(&env);
    if (req.timeout_secs < 0 && refuse_no_lifetime(client, options, op, &err) < 0)
        goto fail;
    /* The lifetime counts from when the sandbox is usable: this is the
     * expiry were it usable now, the first guess the record keeps; the
     * record's is counted again once the create returns (a pull or a
     * provider's boot does not make sbx_gc() reap early). The default exec
     * timeout keeps this one, the earliest: a provider may start its own
     * count before the create returns, and a command the default bounds
     * must time out (124) before the provider ends the sandbox under it. */
    req.expires_at = req.timeout_secs > 0 ? sbx_wallclock_now() + req.timeout_secs : 0;
    expires_mono = req.timeout_secs > 0 ? sbx_monotonic_now() + req.timeout_secs : 0;
    req.image = sbx_options_get0_image(options);
    req.template_name = sbx_options_get0_template(options);
    req.snapshot_id = sbx_options_get0_snapshot_id(options);
    req.app_name = sbx_options_get0_app_name(options);
    req.gpu = sbx_options_get0_gpu(options);
    req.disk_mb = sbx_options_get_disk_mb(options);
    req.allow_internet = sbx_options_get_allow_internet(options);
    req.backend_options = sbx_options_get0_backend_options(options);
    req.detached = sbx_options_get_detached(options);
    req.n_ports = sbx_options_get_ports(options, &req.ports);
    if (req.n_ports && (client->plugin->abi_minor < 3 ||
                        !(client->plugin->caps & SBX_CAP_EXPOSED_PORTS))) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                                     "backend \"%s\" cannot expose ports (port %u asked)",
                                     client->backend, (unsigned)req.ports[0]);

        sbx_error_add_contextf(e, "port", "%u", (unsigned)req.ports[0]);
        sbx_error_add_context(e, "option", "ports");
        goto fail;
    }
    req.user = sbx_options_get0_user(options);
    if (req.user && (client->plugin->abi_minor < 4 || !(client->plugin->caps & SBX_CAP_USER))) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                                     "backend \"%s\" cannot run its sandboxes as a chosen user "
                                     "(user \"%s\" asked)", client->backend, req.user);

        sbx_error_add_context(e, "user", req.user);
        sbx_error_add_context(e, "option", "user");
        goto fail;
    }
    if (preset && !sbx_options_is_set(options, SBX_OPTION_ALLOW_INTERNET))
        sbx_preset_get_bool(preset, "allow_internet", &req.allow_internet);
    if (preset && !req.image) {
        req.image = sbx_preset_get0_image(preset, client->backend);
        /* The preset's image already holds what its setup would install. */
        skip_setup = req.image && (client->plugin->caps & SBX_CAP_IMAGE);
    }

    /* Recorded before the provider is asked, so that nothing it makes can
     * be lost: sbx_gc() finds it by the token even if this process dies. */
    if (sbx_record_begin(token, client->backend, req.timeout_secs > 0 ? req.expires_at : 0,
                         sbx_options_get_detached(options), &err) < 0)
        goto fail;
    sbx_call_ctx_init_for(&ctx, client);
    ctx.create_token = token;
    if (create(client->handle, &ctx, &req, &handle, &err) != 0) {
        sbx_error_ensure(&err, client->backend, op);
        /* An unknown outcome keeps the row: the provider may hold a
         * sandbox with this token, which gc reaps. */
        if (sbx_error_get_outcome(err) != SBX_ERROR_OUTCOME_UNKNOWN)
            sbx_record_remove(token, NULL);
        goto fail;
    }
    sbx_error_free(err);
    err = NULL;
    sbx_strv_clear(&env);

    sandbox = calloc(1, sizeof(*sandbox));
    if (!sandbox) {
        void (*sandbox_free)(sbx_plugin_sandbox *) = SBX_SLOT(client->plugin, sandbox_free);
        int (*destroy)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **) =
            SBX_SLOT(client->plugin, destroy);

        if (destroy && destroy(handle, &ctx, NULL) == 0)
            sbx_record_remove(token, NULL);
        if (sandbox_free)
            sandbox_free(handle);
        goto oom;
    }
    if (req.timeout_secs > 0)
        req.expires_at = sbx_wallclock_now() + req.timeout_secs;
    memcpy(sandbox->token, token, sizeof(sandbox->token));
    sandbox->client = client;
    sandbox->handle = handle;
    sandbox->timeout_secs = req.timeout_secs;
    sandbox->expires_mono = expires_mono;
    pthread_mutex_init(&sandbox->lock, NULL);
    get_id = SBX_SLOT(client->plugin, sandbox_id);
    get_root = SBX_SLOT(client->plugin, sandbox_root);
    s = get_id ? get_id(handle) : NULL;
    sandbox->id = strdup(s ? s : "");
    s = get_root ? get_root(handle) : NULL;
    sandbox->root = strdup(s ? s : "");
    if (!sandbox->id || !sandbox->root) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        destroy_after_failure(sandbox, err);
        sandbox_release(sandbox);
        goto fail;
    }
    record_created(sandbox, req.timeout_secs > 0 ? req.expires_at : 0);

    /* Generic creation steps, in the reference's order. */
    if (preset && !skip_setup) {
        if (sbx_preset_setup_commands(preset, client->backend, &setup) < 0)
            goto oom_after_create;
        sbx_preset_get_bool(preset, "setup_before_workspace", &setup_first);
    }
    if ((setup_first && run_setup(sandbox, preset, options, &setup, &err) < 0) ||
        (sbx_options_get0_git_repo(options) &&
         git_clone(sandbox, sbx_options_get0_git_repo(options),
                   sbx_options_get0_git_ref(options), &err) < 0) ||
        write_files(sandbox, options, &err) < 0 ||
        sbx_manifest_apply(sbx_options_get0_workspace(options), sandbox, &err) < 0 ||
        (!setup_first && run_setup(sandbox, preset, options, &setup, &err) < 0)) {
        destroy_after_failure(sandbox, err);
        sandbox_release(sandbox);
        goto fail;
    }
    sbx_strv_clear(&setup);
    sbx_preset_free(preset);
    sbx_usage_sandbox_start(sandbox, req.cpu, req.memory_mb, req.gpu);
    return sandbox;

oom_after_create:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    destroy_after_failure(sandbox, err);
    sandbox_release(sandbox);
    goto fail;

oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    sbx_strv_clear(&env);
    sbx_strv_clear(&setup);
    sbx_preset_free(preset);
    finish_error(error, err, client->backend, op);
    return NULL;
}

/* ------------------------------------------------------- shared clients */

/*
 * The clients behind sbx_create() and sbx_resume(): one per backend and
 * plugin mode in a process, counted by the sandboxes that use it and kept
 * when the count drops to 0, so that the next sbx_create() does not start
 * a plugin host again (out of process its host ends with the process; it
 * destroys the attached sandboxes left then). A child of fork() never uses
 * its parent's: the entries carry the pid that made them.
 */
typedef struct shared_client {
    struct shared_client *next;
    sbx_client *client;
    size_t refs;
    pid_t pid;
} shared_client;

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_client *shared_clients;

sbx_client *
sbx_shared_client_get(const char *backend, sbx_error **error)
{
    sbx_plugin_mode mode;
    shared_client *e;
    sbx_client *c = NULL;
    sbx_error *err = NULL;
    pid_t me = getpid();

    mode = sbx_plugin_mode_resolve(SBX_PLUGIN_MODE_DEFAULT, &err);
    if (err) {
        finish_error(error, err, backend, "client_new");
        return NULL;
    }
    pthread_mutex_lock(&shared_lock);
    for (e = shared_clients; e; e = e->next)
        if (e->pid == me && e->client->mode == mode && backend &&
            strcmp(e->client->backend, backend) == 0) {
            e->refs++;
            c = e->client;
            break;
        }
    if (!c && (e = calloc(1, sizeof(*e))) != NULL) {
        /* Made under the lock: concurrent first users wait for one. */
        e->client = sbx_client_new_with_mode(backend, mode, error);
        if (e->client) {
            e->refs = 1;
            e->pid = me;
            e->next = shared_clients;
            shared_clients = e;
            c = e->client;
        } else {
            free(e);
        }
    } else if (!c) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        finish_error(error, err, backend, "client_new");
    }
    pthread_mutex_unlock(&shared_lock);
    return c;
}

void
sbx_shared_client_put(sbx_client *client)
{
    shared_client *e;

    pthread_mutex_lock(&shared_lock);
    for (e = shared_clients; e; e = e->next)
        if (e->client == client && e->pid == getpid()) {
            if (e->refs > 0)
                e->refs--;
            break;
        }
    pthread_mutex_unlock(&shared_lock);
}

SBX_EXPORT sbx_sandbox *
sbx_create(const char *backend, const sbx_options *options, sbx_error **error)
{
    sbx_client *client = sbx_shared_client_get(backend, error);
    sbx_sandbox *sandbox;

    if (!client)
        return NULL;
    sandbox = sbx_sandbox_create(client, options, error);
    if (!sandbox) {
        sbx_shared_client_put(client);
        return NULL;
    }
    sandbox->owns_client = 1;
    return sandbox;
}

/* 1 when @sandbox was destroyed. */
static int
sandbox_destroyed(sbx_sandbox *sandbox)
{
    int d;

    pthread_mutex_lock(&sandbox->lock);
    d = sandbox->destroyed;
    pthread_mutex_unlock(&sandbox->lock);
    return d;
}

int
sbx_sandbox_check_usable(sbx_sandbox *sandbox, sbx_error **err)
{
    sbx_error *e;

    if (!sandbox) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "sandbox is NULL");
        return -1;
    }
    if (!sandbox_destroyed(sandbox))
        return 0;
    if (sandbox->id[0])
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, NULL, "sandbox %s was destroyed",
                          sandbox->id);
    else
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, NULL, "sandbox was destroyed");
    sbx_error_add_context(e, "sandbox_id", sandbox->id);
    return -1;
}

void
sbx_sandbox_note_gone(sbx_sandbox *sandbox, const sbx_error *err)
{
    int (*is_alive)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **);
    sbx_error *e = NULL;
    sbx_call_ctx ctx;

    if (!sandbox || !err || sbx_error_get_code(err) != SBX_ERROR_NOT_FOUND ||
        !sandbox->token[0] || sandbox_destroyed(sandbox))
        return;
    is_alive = SBX_SLOT(sandbox->client->plugin, is_alive);
    if (!is_alive)
        return;
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    if (is_alive(sandbox->handle, &ctx, &e) == 0)
        sbx_record_remove(sandbox->token, NULL);
    sbx_error_free(e);
}

/* Calls the sandbox slot @slot of @sandbox as @op with a fresh call
 * context; a failure is finished into *@error with the backend, @op and
 * the sandbox's id. Returns the slot's 0, or -1. */
static int
call_sandbox_slot(sbx_sandbox *sandbox, const char *op,
                  int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **),
                  sbx_error **error)
{
    sbx_error *err = NULL;
    sbx_call_ctx ctx;

    sbx_call_ctx_init_for(&ctx, sandbox->client);
    if (slot(sandbox->handle, &ctx, &err) != 0) {
        sbx_error_ensure(&err, sandbox->client->backend, op);
        sbx_error_add_context(err, "sandbox_id", sandbox->id);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    sbx_error_free(err);
    return 0;
}

SBX_EXPORT int
sbx_sandbox_destroy(sbx_sandbox *sandbox, sbx_error **error)
{
    static const char op[] = "destroy";
    int (*destroy)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **);
    sbx_error *err = NULL;

    if (!sandbox) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "sandbox is NULL");
        finish_error(error, err, NULL, op);
        return -1;
    }
    if (sandbox_destroyed(sandbox))
        return 0;
    destroy = SBX_SLOT(sandbox->client->plugin, destroy);
    if (!destroy) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" cannot destroy sandboxes", sandbox->client->backend);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    if (sandbox->direct) {
        /* Out of process, a sandbox with an exec endpoint is ended there,
         * with no plugin host in between (two wake-ups fewer); the host's
         * plugin then finishes on its own time (direct.c). */
        sbx_call_ctx ctx;
        int d;

        sbx_call_ctx_init_for(&ctx, sandbox->client);
        d = sbx_direct_destroy(sandbox, &ctx, &err);
        if (d < 0) {
            sbx_error_add_context(err, "sandbox_id", sandbox->id);
            finish_error(error, err, sandbox->client->backend, op);
            return -1;
        }
        if (d == 1) {
            sbx_log(SBX_LOG_DEBUG, sandbox->client->backend,
                    "destroyed %s (through its exec endpoint)", sandbox->id);
            sbx_proxy_destroy_unwaited(sandbox->handle);
            goto destroyed;
        }
    }
    if (call_sandbox_slot(sandbox, op, destroy, error) < 0)
        return -1;
destroyed:
    pthread_mutex_lock(&sandbox->lock);
    sandbox->destroyed = 1;
    pthread_mutex_unlock(&sandbox->lock);
    if (sandbox->token[0])
        sbx_record_remove(sandbox->token, NULL);
    sbx_usage_sandbox_end(sandbox, 1);
    return 0;
}

SBX_EXPORT int
sbx_sandbox_detach(sbx_sandbox *sandbox, sbx_error **error)
{
    static const char op[] = "detach";
    int (*detach)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **);
    sbx_error *err = NULL;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0) {
        finish_error(error, err, sandbox ? sandbox->client->backend : NULL, op);
        return -1;
    }
    if (!sandbox->token[0]) {
        sbx_set_error(&err, SBX_ERROR_NOT_FOUND, op,
                      "sandbox %s has no lifecycle record (it was not made or resumed "
                      "through this record)", sandbox->id);
        sbx_error_add_context(err, "sandbox_id", sandbox->id);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    if (sandbox->timeout_secs < 0) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_CONFIGURATION, op,
                                     "timeout_secs: sandbox %s has no lifetime, and a detached "
                                     "sandbox needs one: nothing else would end it",
                                     sandbox->id);

        sbx_error_add_context(e, "option", "timeout_secs");
        sbx_error_add_context(e, "reason", "detached");
        sbx_error_add_context(e, "sandbox_id", sandbox->id);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    if (sbx_record_set_detached(sandbox->token, 1, &err) < 0) {
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    /* A backend that watches its owners itself stops doing so. */
    detach = SBX_SLOT(sandbox->client->plugin, detach);
    if (detach && call_sandbox_slot(sandbox, op, detach, error) < 0)
        return -1;
    return 0;
}

/* sbx_sandbox_stop / sbx_sandbox_start: the optional slot @slot (NULL:
 * feature_not_supported naming the backend) on @sandbox, as @op. */
static int
stop_or_start(sbx_sandbox *sandbox, const char *op,
              int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **),
              sbx_error **error)
{
    sbx_error *err = NULL;

    if (!slot) {
        if (strcmp(op, "start") == 0)
            sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                          "backend \"%s\" has no stopped sandbox to start: it cannot stop "
                          "one without destroying it", sandbox->client->backend);
        else
            sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                          "backend \"%s\" cannot %s a sandbox without destroying it",
                          sandbox->client->backend, op);
        sbx_error_add_context(err, "sandbox_id", sandbox->id);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    return call_sandbox_slot(sandbox, op, slot, error);
}

SBX_EXPORT int
sbx_sandbox_stop(sbx_sandbox *sandbox, sbx_error **error)
{
    sbx_error *err = NULL;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0) {
        finish_error(error, err, sandbox ? sandbox->client->backend : NULL, "stop");
        return -1;
    }
    return stop_or_start(sandbox, "stop", SBX_SLOT(sandbox->client->plugin, stop), error);
}

SBX_EXPORT int
sbx_sandbox_start(sbx_sandbox *sandbox, sbx_error **error)
{
    sbx_error *err = NULL;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0) {
        finish_error(error, err, sandbox ? sandbox->client->backend : NULL, "start");
        return -1;
    }
    return stop_or_start(sandbox, "start", SBX_SLOT(sandbox->client->plugin, start), error);
}

/* ---- exposed ports ---- */

/* Checks @sandbox and @port (0 = no port to check) for @op; fails with
 * feature_not_supported naming the backend when @slot is NULL. */
static int
port_call_check(sbx_sandbox *sandbox, unsigned port, int want_port, const void *slot,
                const char *op, sbx_error **error)
{
    sbx_error *err = NULL;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0) {
        finish_error(error, err, sandbox ? sandbox->client->backend : NULL, op);
        return -1;
    }
    if (want_port && (port < 1 || port > 65535)) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "port %u is not a TCP port number (1..65535)", port);

        sbx_error_add_contextf(e, "port", "%u", port);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    if (!slot) {
        sbx_error *e;

        if (sandbox->client->plugin->caps & SBX_CAP_EXPOSED_PORTS)
            e = sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                              "backend \"%s\" fixes its exposed ports at create: "
                              "declare them with sbx_options_add_port()",
                              sandbox->client->backend);
        else
            e = sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                              "backend \"%s\" cannot expose ports", sandbox->client->backend);
        if (want_port)
            sbx_error_add_contextf(e, "port", "%u", port);
        sbx_error_add_context(e, "sandbox_id", sandbox->id);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    return 0;
}

/* Ends a failed port call: the error completed and handed over. */
static void
port_call_fail(sbx_sandbox *sandbox, sbx_error *err, const char *op, sbx_error **error)
{
    sbx_error_ensure(&err, sandbox->client->backend, op);
    sbx_error_add_context(err, "sandbox_id", sandbox->id);
    finish_error(error, err, sandbox->client->backend, op);
}

static int
expose_or_unexpose(sbx_sandbox *sandbox, unsigned port, const char *op,
                   int (*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, unsigned,
                               sbx_error **),
                   sbx_error **error)
{
    sbx_error *err = NULL;
    sbx_call_ctx ctx;

    if (port_call_check(sandbox, port, 1, (const void *)slot, op, error) < 0)
        return -1;
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    if (slot(sandbox->handle, &ctx, port, &err) != 0) {
        port_call_fail(sandbox, err, op, error);
        return -1;
    }
    sbx_error_free(err);
    return 0;
}

SBX_EXPORT int
sbx_sandbox_expose_port(sbx_sandbox *sandbox, unsigned port, sbx_error **error)
{
    return expose_or_unexpose(sandbox, port, "expose_port",
                              sandbox ? SBX_SLOT(sandbox->client->plugin, expose_port) : NULL,
                              error);
}

SBX_EXPORT int
sbx_sandbox_unexpose_port(sbx_sandbox *sandbox, unsigned port, sbx_error **error)
{
    return expose_or_unexpose(sandbox, port, "unexpose_port",
                              sandbox ? SBX_SLOT(sandbox->client->plugin, unexpose_port) : NULL,
                              error);
}

SBX_EXPORT char *
sbx_sandbox_resolve_port(sbx_sandbox *sandbox, unsigned port, sbx_error **error)
{
    static const char op[] = "resolve_port";
    char *(*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, unsigned, sbx_error **) =
        sandbox ? SBX_SLOT(sandbox->client->plugin, resolve_port) : NULL;
    sbx_error *err = NULL;
    sbx_call_ctx ctx;
    char *s, *out;

    if (port_call_check(sandbox, port, 1, (const void *)slot, op, error) < 0)
        return NULL;
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    s = slot(sandbox->handle, &ctx, port, &err);
    if (!s) {
        port_call_fail(sandbox, err, op, error);
        return NULL;
    }
    sbx_error_free(err);
    out = strdup(s);
    sbx_host_services_get()->free(s);
    if (!out) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        finish_error(error, err, sandbox->client->backend, op);
    }
    return out;
}

SBX_EXPORT int
sbx_sandbox_list_ports(sbx_sandbox *sandbox, uint16_t **ports, size_t *count,
                       sbx_error **error)
{
    static const char op[] = "list_ports";
    char *(*slot)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **) =
        sandbox ? SBX_SLOT(sandbox->client->plugin, list_ports) : NULL;
    sbx_error *err = NULL;
    sbx_call_ctx ctx;
    uint16_t *list = NULL;
    size_t n = 0;
    char *s;

    if (!ports || !count) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "ports or count is NULL");
        finish_error(error, err, sandbox ? sandbox->client->backend : NULL, op);
        return -1;
    }
    *ports = NULL;
    *count = 0;
    if (port_call_check(sandbox, 0, 0, (const void *)slot, op, error) < 0)
        return -1;
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    s = slot(sandbox->handle, &ctx, &err);
    if (!s) {
        port_call_fail(sandbox, err, op, error);
        return -1;
    }
    sbx_error_free(err);
    err = NULL;
    for (const char *p = s; *p;) {
        char *end;
        unsigned long v;
        uint16_t *grown;

        while (*p == ' ')
            p++;
        if (!*p)
            break;
        v = strtoul(p, &end, 10);
        if (end == p || v < 1 || v > 65535) {
            sbx_set_error(&err, SBX_ERROR_EXECUTION_FAILED, op,
                          "backend \"%s\" listed its ports as \"%s\"",
                          sandbox->client->backend, s);
            break;
        }
        grown = realloc(list, (n + 1) * sizeof(*list));
        if (!grown) {
            sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            break;
        }
        list = grown;
        list[n++] = (uint16_t)v;
        p = end;
    }
    sbx_host_services_get()->free(s);
    if (err) {
        free(list);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    *ports = list;
    *count = n;
    return 0;
}

SBX_EXPORT void
sbx_sandbox_free(sbx_sandbox *sandbox)
{
    if (sandbox)
        sandbox_release(sandbox);
}

SBX_EXPORT int
sbx_sandbox_is_alive(sbx_sandbox *sandbox, sbx_error **error)
{
    static const char op[] = "is_alive";
    int (*is_alive)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **);
    sbx_error *err = NULL;
    sbx_call_ctx ctx;
    int rc;

    if (!sandbox) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "sandbox is NULL");
        finish_error(error, err, NULL, op);
        return -1;
    }
    if (sandbox_destroyed(sandbox))
        return 0;
    is_alive = SBX_SLOT(sandbox->client->plugin, is_alive);
    if (!is_alive) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" does not support is_alive", sandbox->client->backend);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    rc = is_alive(sandbox->handle, &ctx, &err);
    if (rc < 0) {
        sbx_error_ensure(&err, sandbox->client->backend, op);
        finish_error(error, err, sandbox->client->backend, op);
        return -1;
    }
    sbx_error_free(err);
    return rc > 0 ? 1 : 0;
}

SBX_EXPORT char *
sbx_sandbox_snapshot(sbx_sandbox *sandbox, sbx_error **error)
{
    static const char op[] = "snapshot";
    char *(*snapshot)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **);
    const sbx_host_services *services = sbx_host_services_get();
    sbx_error *err = NULL;
    sbx_call_ctx ctx;
    char *raw, *out;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0) {
        finish_error(error, err, sandbox ? sandbox->client->backend : NULL, op);
        return NULL;
    }
    snapshot = SBX_SLOT(sandbox->client->plugin, snapshot);
    if (!snapshot) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" cannot snapshot sandboxes", sandbox->client->backend);
        finish_error(error, err, sandbox->client->backend, op);
        return NULL;
    }
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    raw = snapshot(sandbox->handle, &ctx, &err);
    if (!raw) {
        sbx_error_ensure(&err, sandbox->client->backend, op);
        sbx_error_add_context(err, "sandbox_id", sandbox->id);
        finish_error(error, err, sandbox->client->backend, op);
        return NULL;
    }
    sbx_error_free(err);
    out = sbx_strdup(raw);
    services->free(raw);
    if (!out) {
        err = NULL;
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        finish_error(error, err, sandbox->client->backend, op);
    }
    return out;
}

/* ---------------------------------------------------------- owned sandboxes */

/* Adapts the plugin's list_owned callback to the public one. */
struct owned_walk {
    sbx_owned_fn fn;
    void *user_data;
    int count;
};

static int
owned_walk_one(const sbx_plugin_owned_info *info, void *user_data)
{
    struct owned_walk *w = user_data;
    sbx_owned_sandbox s = {
        .id = info->id ? info->id : "",
        .create_token = info->create_token ? info->create_token : "",
        .created_at = info->created_at,
        .expires_at = info->expires_at,
    };

    w->count++;
    return w->fn ? w->fn(&s, w->user_data) : 0;
}

SBX_EXPORT int
sbx_client_list_owned(sbx_client *client, sbx_owned_fn fn, void *user_data, sbx_error **error)
{
    static const char op[] = "list_owned";
    int (*list_owned)(sbx_plugin_client *, const sbx_call_ctx *, sbx_plugin_owned_fn, void *,
                      sbx_error **);
    struct owned_walk walk = { fn, user_data, 0 };
    sbx_error *err = NULL;
    sbx_call_ctx ctx;

    if (!client) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "client is NULL");
        finish_error(error, err, NULL, op);
        return -1;
    }
    list_owned = SBX_SLOT(client->plugin, list_owned);
    if (!list_owned) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" cannot list the sandboxes this library made",
                      client->backend);
        finish_error(error, err, client->backend, op);
        return -1;
    }
    sbx_call_ctx_init_for(&ctx, client);
    if (list_owned(client->handle, &ctx, owned_walk_one, &walk, &err) != 0) {
        sbx_error_ensure(&err, client->backend, op);
        finish_error(error, err, client->backend, op);
        return -1;
    }
    sbx_error_free(err);
    return walk.count;
}

SBX_EXPORT int
sbx_client_destroy_by_id(sbx_client *client, const char *id, sbx_error **error)
{
    static const char op[] = "destroy_by_id";
    int (*destroy_by_id)(sbx_plugin_client *, const sbx_call_ctx *, const char *, sbx_error **);
    sbx_error *err = NULL;
    sbx_call_ctx ctx;

    if (!client || !id || !*id) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "%s",
                      !client ? "client is NULL" : "sandbox id is NULL or empty");
        finish_error(error, err, client ? client->backend : NULL, op);
        return -1;
    }
    destroy_by_id = SBX_SLOT(client->plugin, destroy_by_id);
    if (!destroy_by_id) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" cannot destroy sandboxes by id", client->backend);
        finish_error(error, err, client->backend, op);
        return -1;
    }
    sbx_call_ctx_init_for(&ctx, client);
    if (destroy_by_id(client->handle, &ctx, id, &err) != 0) {
        sbx_error_ensure(&err, client->backend, op);
        sbx_error_add_context(err, "sandbox_id", id);
        finish_error(error, err, client->backend, op);
        return -1;
    }
    sbx_error_free(err);
    return 0;
}

SBX_EXPORT const char *
sbx_sandbox_get0_backend(const sbx_sandbox *sandbox)
{
    return sandbox ? sandbox->client->backend : "";
}

SBX_EXPORT const char *
sbx_sandbox_get0_id(const sbx_sandbox *sandbox)
{
    return sandbox ? sandbox->id : "";
}

SBX_EXPORT const char *
sbx_sandbox_get0_root(const sbx_sandbox *sandbox)
{
    return sandbox ? sandbox->root : "";
}

char *
sbx_sandbox_resolve_path(const sbx_sandbox *sandbox, const char *path, sbx_error **err)
{
    const char *p;

    if (!path || !*path) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                      "invalid sandbox path \"\": must not be empty");
        return NULL;
    }
    /* No ".." component: the path must stay beneath the sandbox's root. */
    for (p = path; *p; ) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                                         "invalid sandbox path \"%s\": \"..\" is not allowed",
                                         path);
            sbx_error_add_context(e, "path", path);
            return NULL;
        }
        p += n;
        while (*p == '/')
            p++;
    }
    char *out;
    if (!sandbox->root[0])
        out = strdup(path);
    else if (path[0] == '/')
        out = sbx_asprintf("%s%s", sandbox->root, path);
    else
        out = sbx_asprintf("%s/%s", sandbox->root, path);
    if (!out)
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
    return out;
}
