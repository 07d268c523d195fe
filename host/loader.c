/*
 * host/loader.c — plugin discovery, loading and checking.
 *
 * A backend NAME is the file libsbx-NAME.so, looked up in each directory of
 * SBX_PLUGIN_PATH (colon-separated, empty entries skipped), then in the
 * configured plugin directory; the first existing file wins. A plugin is
 * loaded and checked once per process (per file) and never unloaded; the
 * outcome, usable or not, is cached under a mutex.
 *
 * The checks run in this order before any slot is called: the init symbol
 * exists, it returns a descriptor, the descriptor's struct_size covers ABI
 * 1.0, its ABI major equals the host's and its minor is not newer, and its
 * name equals the file's. Then the setup slot is called once with the host
 * services.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <json-c/json.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

#ifndef SBX_PLUGIN_DIR
#define SBX_PLUGIN_DIR "/usr/local/lib/libsbx/plugins"
#endif

#ifndef SBX_LIBEXEC_DIR
#define SBX_LIBEXEC_DIR "/usr/local/libexec/libsbx"
#endif

extern char **environ;

#define PLUGIN_PREFIX "libsbx-"
#define PLUGIN_SUFFIX ".so"

/* Is header field @field of descriptor @p inside its struct_size? */
#define HEADER_COVERED(p, field) SBX_SLOT_COVERED(p, field)

/* One plugin file, loaded (or refused) once. */
typedef struct plugin_entry {
    struct plugin_entry *next;
    char *name;                 /* backend name from the file name */
    char *path;                 /* the file */
    const sbx_plugin *plugin;   /* the descriptor; NULL when unusable */
    char *problem;              /* why it is unusable; NULL when usable */
    char *version;              /* copies from the descriptor, "" if unreadable */
    char *description;
    uint64_t caps;              /* 0 when unusable */
    unsigned abi_major;         /* 0 when unreadable */
    unsigned abi_minor;
} plugin_entry;

struct sbx_backend_info {
    char *name;
    char *path;
    char *version;
    char *description;
    char *problem;
    uint64_t caps;
    unsigned abi_major;
    unsigned abi_minor;
};

static pthread_mutex_t loader_lock = PTHREAD_MUTEX_INITIALIZER;
static plugin_entry *loaded;    /* guarded by loader_lock */

static const struct {
    uint64_t bit;
    const char *name;
} cap_names[] = {
    { SBX_CAP_EXEC, "exec" },
    { SBX_CAP_EXEC_STDIN, "exec_stdin" },
    { SBX_CAP_FILES, "files" },
    { SBX_CAP_DIR_TRANSFER, "dir_transfer" },
    { SBX_CAP_SNAPSHOT, "snapshot" },
    { SBX_CAP_RESUME, "resume" },
    { SBX_CAP_PTY, "pty" },
    { SBX_CAP_ISOLATION, "isolation" },
    { SBX_CAP_NETWORK_POLICY, "network_policy" },
    { SBX_CAP_CPU_LIMIT, "cpu_limit" },
    { SBX_CAP_MEMORY_LIMIT, "memory_limit" },
    { SBX_CAP_DISK_LIMIT, "disk_limit" },
    { SBX_CAP_GPU, "gpu" },
    { SBX_CAP_IMAGE, "image" },
    { SBX_CAP_LIFETIME, "lifetime" },
    { SBX_CAP_LIST_OWNED, "list_owned" },
    { SBX_CAP_EXPOSED_PORTS, "exposed_ports" },
    { SBX_CAP_BACKGROUND, "background" },
    { SBX_CAP_EXEC_STDIN_STREAM, "exec_stdin_stream" },
    { SBX_CAP_USER, "user" },
    { SBX_CAP_OWNER_WATCH, "owner_watch" },
};

SBX_EXPORT const char *
sbx_capability_name(uint64_t cap)
{
    for (size_t i = 0; i < sizeof(cap_names) / sizeof(cap_names[0]); i++)
        if (cap_names[i].bit == cap)
            return cap_names[i].name;
    return NULL;
}

SBX_EXPORT const char *
sbx_plugin_dir(void)
{
    return SBX_PLUGIN_DIR;
}

int
sbx_plugin_search_dirs(sbx_strv *dirs)
{
    const char *env = getenv("SBX_PLUGIN_PATH");

    if (env) {
        const char *p = env;

        while (*p) {
            size_t n = strcspn(p, ":");

            if (n > 0) {
                char *dir = strndup(p, n);

                if (!dir)
                    return -1;
                if (sbx_strv_contains(dirs, dir))
                    free(dir);
                else if (sbx_strv_push_take(dirs, dir) < 0)
                    return -1;
            }
            p += n;
            if (*p == ':')
                p++;
        }
    }
    /* From a build tree, and unless SBX_PLUGIN_PATH says where, the build
     * tree's plugins instead of the installed ones (of another build): local
     * and docker first, then every other plugins/ and plugins/cloud/
     * directory that holds built plugins (remote, ray, runpod, e2b...). */
    if (!env && sbx_uninstalled_build_dir()) {
        const char *build = sbx_uninstalled_build_dir();
        static const char *const more[] = { "", "cloud/" };

        if (sbx_strv_pushf(dirs, "%s/plugins/local/.libs", build) < 0 ||
            sbx_strv_pushf(dirs, "%s/plugins/docker/.libs", build) < 0)
            return -1;
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
            char pattern[PATH_MAX];
            glob_t g;
            int rc;

            if (snprintf(pattern, sizeof pattern, "%s/plugins/%s*/.libs", build, more[i]) >=
                (int)sizeof pattern)
                continue;
            rc = glob(pattern, GLOB_ONLYDIR, NULL, &g);
            if (rc == GLOB_NOSPACE)
                return -1;
            if (rc != 0)
                continue;
            for (size_t k = 0; k < g.gl_pathc; k++)
                if (!sbx_strv_contains(dirs, g.gl_pathv[k]) &&
                    sbx_strv_push(dirs, g.gl_pathv[k]) < 0) {
                    globfree(&g);
                    return -1;
                }
            globfree(&g);
        }
        return 0;
    }
    if (!sbx_strv_contains(dirs, SBX_PLUGIN_DIR) && sbx_strv_push(dirs, SBX_PLUGIN_DIR) < 0)
        return -1;
    return 0;
}

/* 1 when @path exists and is not a directory. */
static int
plugin_file_exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

static void
entry_free(plugin_entry *e)
{
    if (!e)
        return;
    free(e->name);
    free(e->path);
    free(e->problem);
    free(e->version);
    free(e->description);
    free(e);
}

/*
 * Reads what is readable of descriptor @p (within its struct_size) into @e:
 * ABI numbers, version, description. Caps are set only for usable plugins.
 */
static int
entry_read_header(plugin_entry *e, const sbx_plugin *p)
{
    if (HEADER_COVERED(p, abi_minor)) {
        e->abi_major = p->abi_major;
        e->abi_minor = p->abi_minor;
    }
    if (HEADER_COVERED(p, version) && p->version) {
        free(e->version);
        if (!(e->version = strdup(p->version)))
            return -1;
    }
    if (HEADER_COVERED(p, description) && p->description) {
        free(e->description);
        if (!(e->description = strdup(p->description)))
            return -1;
    }
    return 0;
}

/* Sets @e's problem from a format; -1 when memory runs out. */
SBX_PRINTF(2, 3) static int
entry_refuse(plugin_entry *e, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    e->problem = sbx_vasprintf(fmt, ap);
    va_end(ap);
    return e->problem ? 0 : -1;
}

/*
 * Loads and checks the plugin file @path of backend @name. Returns a new
 * entry (usable or with its problem), or NULL when memory runs out. Called
 * with loader_lock held.
 */
static plugin_entry *
entry_load(const char *name, const char *path)
{
    plugin_entry *e = calloc(1, sizeof(*e));
    sbx_plugin_init_fn init;
    const sbx_plugin *p;
    void *handle, *sym;
    int (*setup)(const sbx_host_services *, sbx_error **);
    int rc = 0;

    if (!e)
        return NULL;
    e->name = strdup(name);
    e->path = strdup(path);
    e->version = strdup("");
    e->description = strdup("");
    if (!e->name || !e->path || !e->version || !e->description)
        goto oom;

    dlerror();
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();

        if (entry_refuse(e, "cannot be loaded: %s", why ? why : "unknown dlopen error") < 0)
            goto oom;
        goto refused;
    }
    sym = dlsym(handle, SBX_PLUGIN_INIT_SYMBOL);
    if (!sym) {
        rc = entry_refuse(e, "does not export %s", SBX_PLUGIN_INIT_SYMBOL);
        goto close;
    }
    *(void **)&init = sym;
    p = init();
    if (!p) {
        rc = entry_refuse(e, "%s returned NULL", SBX_PLUGIN_INIT_SYMBOL);
        goto close;
    }
    if (entry_read_header(e, p) < 0) {
        rc = -1;
        goto close;
    }
    if (p->struct_size < SBX_PLUGIN_MIN_STRUCT_SIZE) {
        rc = entry_refuse(e, "descriptor is %zu bytes, ABI %d.0 needs at least %zu",
                          p->struct_size, SBX_PLUGIN_ABI_MAJOR,
                          (size_t)SBX_PLUGIN_MIN_STRUCT_SIZE);
        goto close;
    }
    if (p->abi_major != SBX_PLUGIN_ABI_MAJOR || p->abi_minor > SBX_PLUGIN_ABI_MINOR) {
        rc = entry_refuse(e, "built for ABI %u.%u, host speaks %d.%d", p->abi_major,
                          p->abi_minor, SBX_PLUGIN_ABI_MAJOR, SBX_PLUGIN_ABI_MINOR);
        goto close;
    }
    if (!p->name) {
        rc = entry_refuse(e, "descriptor has no name (file is for backend \"%s\")", name);
        goto close;
    }
    if (strcmp(p->name, name) != 0) {
        rc = entry_refuse(e, "descriptor names backend \"%s\", file is for \"%s\"",
                          p->name, name);
        goto close;
    }

    /* Checks passed: from here on plugin code may hold state, so the file
     * stays mapped even if setup fails. Pin it for the life of the process. */
    dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD | RTLD_NODELETE);
    setup = SBX_SLOT(p, setup);
    if (setup) {
        sbx_error *err = NULL;

        if (setup(sbx_host_services_get(), &err) != 0) {
            rc = entry_refuse(e, "setup failed: %s",
                              err ? sbx_error_get0_message(err) : "no reason given");
            sbx_error_free(err);
            if (rc < 0)
                goto oom;
            goto refused;
        }
        sbx_error_free(err);
    }
    e->plugin = p;
    e->caps = p->caps;
    sbx_log(SBX_LOG_INFO, name, "loaded %s (version %s, ABI %u.%u)", path, e->version,
            p->abi_major, p->abi_minor);
    return e;

close:
    /* No slot was called: unload the refused file. */
    dlclose(handle);
    if (rc < 0)
        goto oom;
refused:
    sbx_log(SBX_LOG_WARNING, name, "plugin %s refused: %s", path, e->problem);
    return e;
oom:
    entry_free(e);
    return NULL;
}

/*
 * The cached entry of file @path (backend @name), loading it on first use.
 * NULL only when memory runs out. Thread-safe.
 */
static const plugin_entry *
entry_get(const char *name, const char *path)
{
    plugin_entry *e;

    pthread_mutex_lock(&loader_lock);
    for (e = loaded; e; e = e->next)
        if (strcmp(e->path, path) == 0)
            break;
    if (!e) {
        e = entry_load(name, path);
        if (e) {
            e->next = loaded;
            loaded = e;
        }
    }
    pthread_mutex_unlock(&loader_lock);
    return e;
}

/*
 * The backends this project ships or plans (the names its packages and
 * --enable-plugin-NAME options use): only for these does the error for a
 * missing backend point at a package.
 */
static const char *const shipped_backends[] = {
    "local", "bubblewrap", "safehouse", "docker",
    "e2b", "daytona", "modal", "tensorlake", "vercel", "cloudflare", "blaxel",
    "runloop", "runpod", "ray", "kubernetes",
};

static int
backend_is_shipped(const char *name)
{
    for (size_t i = 0; i < sizeof(shipped_backends) / sizeof(shipped_backends[0]); i++)
        if (strcmp(shipped_backends[i], name) == 0)
            return 1;
    return 0;
}

static char *plugin_name_of(const char *file);

static int
name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The names of the backends whose plugin files are in @dirs, sorted, each
 * once, joined by ", " (a new string; "" when there is none), or NULL when
 * memory runs out.
 */
static char *
installed_names(const sbx_strv *dirs)
{
    sbx_strv names = { 0 };
    char *out;

    for (size_t i = 0; i < dirs->count; i++) {
        DIR *d = opendir(dirs->items[i]);
        struct dirent *de;

        if (!d)
            continue;
        while ((de = readdir(d))) {
            char *name = plugin_name_of(de->d_name);
            char *path = name ? sbx_asprintf("%s/%s", dirs->items[i], de->d_name) : NULL;
            int rc = 0;

            if (name && path && plugin_file_exists(path) && !sbx_strv_contains(&names, name))
                rc = sbx_strv_push(&names, name);
            free(name);
            free(path);
            if (rc < 0) {
                closedir(d);
                sbx_strv_clear(&names);
                return NULL;
            }
        }
        closedir(d);
    }
    if (names.count > 1)
        qsort(names.items, names.count, sizeof(names.items[0]), name_cmp);
    out = sbx_strv_join(&names, ", ");
    sbx_strv_clear(&names);
    return out;
}

/*
 * The file of backend @name: a new string, or NULL with *@err set
 * (invalid_argument, backend_not_installed, or unknown on OOM).
 */
static char *
plugin_find_path(const char *name, sbx_error **err)
{
    sbx_strv dirs = { 0 };
    char *path = NULL;
    sbx_error *error;

    if (!name) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL, "backend name is NULL");
        return NULL;
    }
    if (!sbx_backend_name_valid(name)) {
        error = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL,
                              "invalid backend name \"%s\": must match [a-z0-9][a-z0-9_-]*",
                              name);
        sbx_error_add_context(error, "backend_name", name);
        return NULL;
    }
    if (sbx_plugin_search_dirs(&dirs) < 0)
        goto oom;
    for (size_t i = 0; i < dirs.count; i++) {
        path = sbx_asprintf("%s/" PLUGIN_PREFIX "%s" PLUGIN_SUFFIX, dirs.items[i], name);
        if (!path)
            goto oom;
        if (plugin_file_exists(path))
            break;
        free(path);
        path = NULL;
    }
    if (!path) {
        char *searched = sbx_strv_join(&dirs, ":");
        char *installed = searched ? installed_names(&dirs) : NULL;
        char *hint = NULL;

        if (!installed) {
            free(searched);
            goto oom;
        }
        if (backend_is_shipped(name))
            hint = sbx_asprintf(" (install the libsbx-%s package or configure with "
                                "--enable-plugin-%s)", name, name);
        error = sbx_set_error(err, SBX_ERROR_BACKEND_NOT_INSTALLED, NULL,
                              "backend \"%s\" is not installed: no " PLUGIN_PREFIX "%s"
                              PLUGIN_SUFFIX " in %s; installed: %s%s",
                              name, name, searched, *installed ? installed : "none",
                              hint ? hint : "");
        sbx_error_add_context(error, "searched", searched);
        sbx_error_add_context(error, "installed", installed);
        if (hint)
            sbx_error_add_contextf(error, "package", "libsbx-%s", name);
        free(hint);
        free(installed);
        free(searched);
        sbx_strv_clear(&dirs);
        return NULL;
    }
    sbx_strv_clear(&dirs);
    return path;
oom:
    free(path);
    sbx_strv_clear(&dirs);
    sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
    return NULL;
}

int
sbx_plugin_find(const char *name, sbx_error **err)
{
    char *path = plugin_find_path(name, err);

    free(path);
    return path ? 0 : -1;
}

const sbx_plugin *
sbx_plugin_load(const char *name, sbx_error **err)
{
    const plugin_entry *e = NULL;
    char *path = plugin_find_path(name, err);
    sbx_error *error;

    if (!path)
        return NULL;
    e = entry_get(name, path);
    if (!e)
        goto oom;
    if (e->problem) {
        error = sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL,
                              "plugin %s for backend \"%s\" cannot be used: %s", path, name,
                              e->problem);
        sbx_error_add_context(error, "path", path);
        free(path);
        return NULL;
    }
    free(path);
    return e->plugin;
oom:
    free(path);
    sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
    return NULL;
}

/* ---------------------------------------------------------------- listing */

/* Name of backend file @file ("libsbx-NAME.so"), new string, or NULL when
 * it is not a plugin file name or NAME is not a valid backend name. */
static char *
plugin_name_of(const char *file)
{
    size_t len = strlen(file), pre = strlen(PLUGIN_PREFIX), suf = strlen(PLUGIN_SUFFIX);
    char *name;

    if (len <= pre + suf || strncmp(file, PLUGIN_PREFIX, pre) != 0 ||
        strcmp(file + len - suf, PLUGIN_SUFFIX) != 0)
        return NULL;
    name = strndup(file + pre, len - pre - suf);
    if (name && !sbx_backend_name_valid(name)) {
        free(name);
        return NULL;
    }
    return name;
}

static int
info_cmp(const void *a, const void *b)
{
    const sbx_backend_info *x = *(sbx_backend_info *const *)a;
    const sbx_backend_info *y = *(sbx_backend_info *const *)b;

    return strcmp(x->name, y->name);
}

static void
info_free(sbx_backend_info *info)
{
    if (!info)
        return;
    free(info->name);
    free(info->path);
    free(info->version);
    free(info->description);
    free(info->problem);
    free(info);
}

/* Adds @name at @path to @list unless the name is already there. */
static int
list_add(sbx_backend_info ***list, size_t *count, size_t *cap, const char *name,
         const char *path)
{
    sbx_backend_info *info;

    for (size_t i = 0; i < *count; i++)
        if (strcmp((*list)[i]->name, name) == 0)
            return 0;
    if (*count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        sbx_backend_info **n = realloc(*list, ncap * sizeof(*n));

        if (!n)
            return -1;
        *list = n;
        *cap = ncap;
    }
    info = calloc(1, sizeof(*info));
    if (!info)
        return -1;
    info->name = strdup(name);
    info->path = strdup(path);
    if (!info->name || !info->path) {
        info_free(info);
        return -1;
    }
    (*list)[(*count)++] = info;
    return 0;
}

/* Fills the loaded facts of @info from its cached entry (in this process). */
static int
list_fill(sbx_backend_info *info)
{
    const plugin_entry *e = entry_get(info->name, info->path);

    if (!e)
        return -1;
    info->version = strdup(e->version);
    info->description = strdup(e->description);
    if (!info->version || !info->description)
        return -1;
    if (e->problem && !(info->problem = strdup(e->problem)))
        return -1;
    info->caps = e->plugin ? e->caps : 0;
    info->abi_major = e->abi_major;
    info->abi_minor = e->abi_minor;
    return 0;
}

void
sbx_backend_info_free(sbx_backend_info *info)
{
    info_free(info);
}

sbx_backend_info *
sbx_backend_info_inspect(const char *name, const char *path)
{
    sbx_backend_info *info = calloc(1, sizeof(*info));

    if (!info)
        return NULL;
    info->name = strdup(name);
    info->path = strdup(path);
    if (!info->name || !info->path || list_fill(info) < 0) {
        info_free(info);
        return NULL;
    }
    return info;
}

char *
sbx_plugin_host_path(void)
{
    const char *p = getenv("SBX_PLUGIN_HOST");

    if ((!p || !*p) && sbx_uninstalled_build_dir())
        return sbx_asprintf("%s/host/plugin-host/sbx-plugin-host", sbx_uninstalled_build_dir());
    return strdup(p && *p ? p : SBX_LIBEXEC_DIR "/sbx-plugin-host");
}

/*
 * Fills @info by running `sbx-plugin-host --inspect NAME PATH` and reading
 * the JSON object it prints. A helper that dies (the plugin crashed while
 * loading) makes the problem say so with the signal. Returns 0, 1 when no
 * helper could be started (the caller inspects in-process), -1 on OOM.
 */
static int
list_fill_in_helper(sbx_backend_info *info)
{
    char *host = sbx_plugin_host_path();
    char *const argv[] = { host, (char *)"--inspect", info->name, info->path, NULL };
    posix_spawn_file_actions_t fa;
    sbx_buf out = { 0 };
    int pfd[2], status = 0, rc = -1;
    pid_t pid;
    char chunk[4096];
    ssize_t n;

    if (!host)
        return -1;
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        free(host);
        return 1;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (posix_spawn(&pid, host, &fa, NULL, argv, environ) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        close(pfd[0]);
        close(pfd[1]);
        free(host);
        return 1;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    while ((n = read(pfd[0], chunk, sizeof(chunk))) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (out.len < 1 << 20 && sbx_buf_append(&out, chunk, (size_t)n) < 0)
            break;
    }
    close(pfd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    free(host);

    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && out.len > 0) {
        char *text = sbx_buf_steal(&out, NULL);
        json_object *o = text ? json_tokener_parse(text) : NULL, *v;

        free(text);
        if (o && json_object_is_type(o, json_type_object)) {
            info->version = strdup(json_object_object_get_ex(o, "version", &v)
                                   ? json_object_get_string(v) : "");
            info->description = strdup(json_object_object_get_ex(o, "description", &v)
                                       ? json_object_get_string(v) : "");
            if (json_object_object_get_ex(o, "problem", &v))
                info->problem = strdup(json_object_get_string(v));
            if (json_object_object_get_ex(o, "caps", &v))
                info->caps = (uint64_t)json_object_get_int64(v);
            if (json_object_object_get_ex(o, "abi_major", &v))
                info->abi_major = (unsigned)json_object_get_int64(v);
            if (json_object_object_get_ex(o, "abi_minor", &v))
                info->abi_minor = (unsigned)json_object_get_int64(v);
            rc = info->version && info->description ? 0 : -1;
            json_object_put(o);
            return rc;
        }
        json_object_put(o);
    }
    sbx_buf_clear(&out);
    /* The helper died or printed nothing usable: the plugin is unusable. */
    {
        char *why = sbx_wait_status_text(status);

        info->version = strdup("");
        info->description = strdup("");
        info->problem = why ? sbx_asprintf("crashed while loading in a helper process (%s)", why)
                            : NULL;
        free(why);
        info->caps = 0;
    }
    return info->version && info->description && info->problem ? 0 : -1;
}

SBX_EXPORT int
sbx_backends_list(sbx_backend_info ***list, size_t *count, sbx_error **error)
{
    sbx_strv dirs = { 0 };
    sbx_backend_info **items = NULL;
    size_t n = 0, cap = 0;

    if (!list || !count) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "backends_list",
                      "list and count must not be NULL");
        return -1;
    }
    *list = NULL;
    *count = 0;
    if (sbx_plugin_search_dirs(&dirs) < 0)
        goto oom;
    for (size_t i = 0; i < dirs.count; i++) {
        DIR *d = opendir(dirs.items[i]);
        struct dirent *de;

        if (!d)
            continue;
        while ((de = readdir(d))) {
            char *name = plugin_name_of(de->d_name), *path;
            int rc;

            if (!name)
                continue;
            path = sbx_asprintf("%s/%s", dirs.items[i], de->d_name);
            rc = path && plugin_file_exists(path) ? list_add(&items, &n, &cap, name, path)
                 : path ? 0 : -1;
            free(name);
            free(path);
            if (rc < 0) {
                closedir(d);
                goto oom;
            }
        }
        closedir(d);
    }
    sbx_strv_clear(&dirs);
    if (n > 1)
        qsort(items, n, sizeof(*items), info_cmp);
    for (size_t i = 0; i < n; i++) {
        int rc = list_fill_in_helper(items[i]);

        if (rc == 1)
            rc = list_fill(items[i]);
        if (rc < 0)
            goto oom;
    }
    *list = items;
    *count = n;
    return 0;
oom:
    sbx_strv_clear(&dirs);
    sbx_backend_info_list_free(items, n);
    sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, "backends_list", "out of memory");
    return -1;
}

SBX_EXPORT void
sbx_backend_info_list_free(sbx_backend_info **list, size_t count)
{
    if (!list)
        return;
    for (size_t i = 0; i < count; i++)
        info_free(list[i]);
    free(list);
}

SBX_EXPORT const char *
sbx_backend_info_get0_name(const sbx_backend_info *info)
{
    return info ? info->name : "";
}

SBX_EXPORT const char *
sbx_backend_info_get0_path(const sbx_backend_info *info)
{
    return info ? info->path : "";
}

SBX_EXPORT const char *
sbx_backend_info_get0_version(const sbx_backend_info *info)
{
    return info && info->version ? info->version : "";
}

SBX_EXPORT const char *
sbx_backend_info_get0_description(const sbx_backend_info *info)
{
    return info && info->description ? info->description : "";
}

SBX_EXPORT const char *
sbx_backend_info_get0_problem(const sbx_backend_info *info)
{
    return info ? info->problem : NULL;
}

SBX_EXPORT uint64_t
sbx_backend_info_get_caps(const sbx_backend_info *info)
{
    return info ? info->caps : 0;
}

SBX_EXPORT unsigned
sbx_backend_info_get_abi_major(const sbx_backend_info *info)
{
    return info ? info->abi_major : 0;
}

SBX_EXPORT unsigned
sbx_backend_info_get_abi_minor(const sbx_backend_info *info)
{
    return info ? info->abi_minor : 0;
}
