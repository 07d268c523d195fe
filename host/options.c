/*
 * host/options.c — sbx_options: creation options that remember which fields
 * the caller set. Setters validate and copy; getters return the reference's
 * defaults for unset fields.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "internal.h"

struct sbx_options {
    uint64_t set;               /* sbx_option_field bits */
    double timeout_secs;
    double cpu;
    int64_t memory_mb;
    char *workdir;
    char *git_repo;
    char *git_ref;
    char *image;
    char *template_name;
    char *snapshot_id;
    char *app_name;
    char *gpu;
    char *backend_options;
    int64_t disk_mb;
    int allow_internet;
    int detached;
    uint16_t *ports;            /* exposed ports, in the order added */
    char *user;                 /* the default user */
    size_t port_count;
    sbx_progress_fn progress;   /* not a creation field: no set bit */
    void *progress_data;
    char *preset;
    sbx_manifest *workspace;    /* a reference */
    size_t file_count;          /* files in insertion order */
    char **file_paths;
    char **file_data;
    size_t *file_lens;
    size_t env_count;           /* env in insertion order */
    size_t env_cap;
    char **env_keys;
    char **env_values;
};

SBX_EXPORT sbx_options *
sbx_options_new(void)
{
    sbx_options *o = calloc(1, sizeof(*o));

    if (!o)
        return NULL;
    o->timeout_secs = SBX_DEFAULT_TIMEOUT_SECS;
    o->cpu = SBX_DEFAULT_CPU;
    o->memory_mb = SBX_DEFAULT_MEMORY_MB;
    o->allow_internet = 1;
    return o;
}

SBX_EXPORT void
sbx_options_free(sbx_options *options)
{
    if (!options)
        return;
    for (size_t i = 0; i < options->env_count; i++) {
        free(options->env_keys[i]);
        free(options->env_values[i]);
    }
    free(options->env_keys);
    free(options->env_values);
    free(options->workdir);
    free(options->git_repo);
    free(options->git_ref);
    free(options->image);
    free(options->template_name);
    free(options->snapshot_id);
    free(options->app_name);
    free(options->gpu);
    free(options->backend_options);
    free(options->preset);
    free(options->ports);
    free(options->user);
    sbx_manifest_free(options->workspace);
    for (size_t i = 0; i < options->file_count; i++) {
        free(options->file_paths[i]);
        free(options->file_data[i]);
    }
    free(options->file_paths);
    free(options->file_data);
    free(options->file_lens);
    free(options);
}

/* Fails with invalid_argument when @options is NULL. */
static int
check_options(const sbx_options *options, const char *op, sbx_error **error)
{
    if (options)
        return 0;
    sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op, "options is NULL");
    return -1;
}

/* The out-of-memory error of a setter. */
static int
oom(const char *op, sbx_error **error)
{
    sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return -1;
}

SBX_EXPORT int
sbx_options_set_env(sbx_options *options, const char *key, const char *value,
                    sbx_error **error)
{
    static const char op[] = "set_env";
    char *v;

    if (check_options(options, op, error) < 0)
        return -1;
    if (!key) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "environment variable name is NULL");
        return -1;
    }
    if (!sbx_env_key_valid(key)) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "invalid environment variable name \"%s\": must "
                                     "match [A-Za-z_][A-Za-z0-9_]*", key);
        sbx_error_add_context(e, "name", key);
        return -1;
    }
    if (!value) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "value of environment variable \"%s\" is NULL", key);
        sbx_error_add_context(e, "name", key);
        return -1;
    }
    if (!(v = strdup(value)))
        return oom(op, error);
    for (size_t i = 0; i < options->env_count; i++) {
        if (strcmp(options->env_keys[i], key) == 0) {
            free(options->env_values[i]);
            options->env_values[i] = v;
            options->set |= SBX_OPTION_ENV_VARS;
            return 0;
        }
    }
    if (options->env_count == options->env_cap) {
        size_t cap = options->env_cap ? options->env_cap * 2 : 8;
        char **keys = realloc(options->env_keys, cap * sizeof(*keys));
        char **values;

        if (!keys) {
            free(v);
            return oom(op, error);
        }
        options->env_keys = keys;
        values = realloc(options->env_values, cap * sizeof(*values));
        if (!values) {
            free(v);
            return oom(op, error);
        }
        options->env_values = values;
        options->env_cap = cap;
    }
    if (!(options->env_keys[options->env_count] = strdup(key))) {
        free(v);
        return oom(op, error);
    }
    options->env_values[options->env_count++] = v;
    options->set |= SBX_OPTION_ENV_VARS;
    return 0;
}

SBX_EXPORT int
sbx_options_set_workdir(sbx_options *options, const char *path, sbx_error **error)
{
    static const char op[] = "set_workdir";
    char *copy;

    if (check_options(options, op, error) < 0)
        return -1;
    if (!path || !*path) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid workdir \"%s\": must be a non-empty path", path ? path : "");
        return -1;
    }
    if (!(copy = strdup(path)))
        return oom(op, error);
    free(options->workdir);
    options->workdir = copy;
    options->set |= SBX_OPTION_WORKDIR;
    return 0;
}

/* Checks that @value of option @name is > 0 and finite. */
static int
check_positive(const char *op, const char *name, double value, sbx_error **error)
{
    sbx_error *e = NULL;

    if (!(value > 0))
        e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op, "%s must be > 0, got %g",
                          name, value);
    else if (!isfinite(value))
        e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                          "%s must be finite, got %g", name, value);
    else
        return 0;
    sbx_error_add_context(e, "option", name);
    sbx_error_add_contextf(e, "value", "%g", value);
    return -1;
}

SBX_EXPORT int
sbx_options_set_timeout_secs(sbx_options *options, double secs, sbx_error **error)
{
    static const char op[] = "set_timeout_secs";

    if (check_options(options, op, error) < 0)
        return -1;
    /* SBX_TIMEOUT_NONE, exactly: no lifetime (create decides whether the
     * backend and the attachment allow it). */
    if (!(secs == SBX_TIMEOUT_NONE || (secs > 0 && isfinite(secs)))) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "timeout_secs must be seconds > 0 and finite, or "
                                     "SBX_TIMEOUT_NONE for no lifetime (got %g)", secs);

        sbx_error_add_context(e, "option", "timeout_secs");
        sbx_error_add_contextf(e, "value", "%g", secs);
        return -1;
    }
    options->timeout_secs = secs;
    options->set |= SBX_OPTION_TIMEOUT_SECS;
    return 0;
}

SBX_EXPORT int
sbx_options_set_cpu(sbx_options *options, double cpu, sbx_error **error)
{
    static const char op[] = "set_cpu";

    if (check_options(options, op, error) < 0 || check_positive(op, "cpu", cpu, error) < 0)
        return -1;
    options->cpu = cpu;
    options->set |= SBX_OPTION_CPU;
    return 0;
}

SBX_EXPORT int
sbx_options_set_memory_mb(sbx_options *options, int64_t memory_mb, sbx_error **error)
{
    static const char op[] = "set_memory_mb";

    if (check_options(options, op, error) < 0)
        return -1;
    if (memory_mb <= 0) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "memory_mb must be > 0, got %lld", (long long)memory_mb);
        sbx_error_add_context(e, "option", "memory_mb");
        sbx_error_add_contextf(e, "value", "%lld", (long long)memory_mb);
        return -1;
    }
    options->memory_mb = memory_mb;
    options->set |= SBX_OPTION_MEMORY_MB;
    return 0;
}

SBX_EXPORT int
sbx_options_set_git_repo(sbx_options *options, const char *url, const char *ref,
                         sbx_error **error)
{
    static const char op[] = "set_git_repo";
    char *u, *r = NULL;

    if (check_options(options, op, error) < 0)
        return -1;
    if (!url || !*url) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid git repository URL \"\": must not be empty");
        return -1;
    }
    if (url[0] == '-') {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid git repository URL \"%s\": must not start with '-'", url);
        return -1;
    }
    if (ref && ref[0] == '-') {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "invalid git ref \"%s\": must not start with '-'", ref);
        return -1;
    }
    if (!(u = strdup(url)))
        return oom(op, error);
    if (ref && *ref && !(r = strdup(ref))) {
        free(u);
        return oom(op, error);
    }
    free(options->git_repo);
    free(options->git_ref);
    options->git_repo = u;
    options->git_ref = r;
    options->set |= SBX_OPTION_GIT_REPO;
    if (r)
        options->set |= SBX_OPTION_GIT_REF;
    else
        options->set &= ~(uint64_t)SBX_OPTION_GIT_REF;
    return 0;
}

/* Replaces string option @slot with a copy of non-empty @value. */
static int
set_string(sbx_options *options, const char *op, const char *name, char **slot,
           const char *value, sbx_option_field field, sbx_error **error)
{
    char *copy;

    if (check_options(options, op, error) < 0)
        return -1;
    if (!value || !*value) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "invalid %s \"\": must not be empty", name);
        sbx_error_add_context(e, "option", name);
        return -1;
    }
    if (!(copy = strdup(value)))
        return oom(op, error);
    free(*slot);
    *slot = copy;
    options->set |= field;
    return 0;
}

SBX_EXPORT int
sbx_options_set_image(sbx_options *options, const char *image, sbx_error **error)
{
    return set_string(options, "set_image", "image", options ? &options->image : NULL,
                      image, SBX_OPTION_IMAGE, error);
}

SBX_EXPORT int
sbx_options_set_template(sbx_options *options, const char *template_name, sbx_error **error)
{
    return set_string(options, "set_template", "template",
                      options ? &options->template_name : NULL, template_name,
                      SBX_OPTION_TEMPLATE, error);
}

SBX_EXPORT int
sbx_options_set_snapshot_id(sbx_options *options, const char *snapshot_id, sbx_error **error)
{
    return set_string(options, "set_snapshot_id", "snapshot_id",
                      options ? &options->snapshot_id : NULL, snapshot_id,
                      SBX_OPTION_SNAPSHOT_ID, error);
}

SBX_EXPORT int
sbx_options_set_app_name(sbx_options *options, const char *app_name, sbx_error **error)
{
    return set_string(options, "set_app_name", "app_name",
                      options ? &options->app_name : NULL, app_name,
                      SBX_OPTION_APP_NAME, error);
}

int
sbx_user_valid(const char *user)
{
    size_t len = user ? strlen(user) : 0;

    if (len == 0 || len > 256)
        return 0;
    for (const unsigned char *p = (const unsigned char *)user; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return 0;
    return 1;
}

SBX_EXPORT int
sbx_options_set_user(sbx_options *options, const char *user, sbx_error **error)
{
    if (check_options(options, "set_user", error) < 0)
        return -1;
    if (!sbx_user_valid(user)) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "set_user",
                                     "user \"%.256s\" is not a user name or uid (NULL, empty, "
                                     "too long, or holding whitespace or control characters)",
                                     user ? user : "(null)");

        sbx_error_add_context(e, "user", user ? user : "(null)");
        return -1;
    }
    return set_string(options, "set_user", "user", &options->user, user, SBX_OPTION_USER,
                      error);
}

SBX_EXPORT const char *
sbx_options_get0_user(const sbx_options *options)
{
    return options ? options->user : NULL;
}

/* 1 when @gpu is "TYPE" or "TYPE:COUNT" with COUNT a positive integer. */
static int
gpu_valid(const char *gpu)
{
    const char *colon = strchr(gpu, ':');

    if (colon == gpu || *gpu == '\0')
        return 0;
    if (!colon)
        return 1;
    if (colon[1] == '\0' || strchr(colon + 1, ':'))
        return 0;
    for (const char *p = colon + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return strtol(colon + 1, NULL, 10) > 0;
}

SBX_EXPORT int
sbx_options_set_gpu(sbx_options *options, const char *gpu, sbx_error **error)
{
    static const char op[] = "set_gpu";

    if (check_options(options, op, error) < 0)
        return -1;
    if (!gpu || !gpu_valid(gpu)) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "invalid gpu \"%s\": expected TYPE or TYPE:COUNT "
                                     "(e.g. H100:2)", gpu ? gpu : "");
        sbx_error_add_context(e, "option", "gpu");
        sbx_error_add_context(e, "value", gpu ? gpu : "");
        return -1;
    }
    return set_string(options, op, "gpu", &options->gpu, gpu, SBX_OPTION_GPU, error);
}

SBX_EXPORT int
sbx_options_set_disk_mb(sbx_options *options, int64_t disk_mb, sbx_error **error)
{
    static const char op[] = "set_disk_mb";

    if (check_options(options, op, error) < 0)
        return -1;
    if (disk_mb <= 0) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "disk_mb must be > 0, got %lld", (long long)disk_mb);
        sbx_error_add_context(e, "option", "disk_mb");
        sbx_error_add_contextf(e, "value", "%lld", (long long)disk_mb);
        return -1;
    }
    options->disk_mb = disk_mb;
    options->set |= SBX_OPTION_DISK_MB;
    return 0;
}

SBX_EXPORT int
sbx_options_set_allow_internet(sbx_options *options, int allow, sbx_error **error)
{
    if (check_options(options, "set_allow_internet", error) < 0)
        return -1;
    options->allow_internet = allow ? 1 : 0;
    options->set |= SBX_OPTION_ALLOW_INTERNET;
    return 0;
}

SBX_EXPORT int
sbx_options_set_detached(sbx_options *options, int detached, sbx_error **error)
{
    if (check_options(options, "set_detached", error) < 0)
        return -1;
    options->detached = detached ? 1 : 0;
    options->set |= SBX_OPTION_DETACHED;
    return 0;
}

SBX_EXPORT int
sbx_options_get_detached(const sbx_options *options)
{
    return options ? options->detached : 0;
}

SBX_EXPORT int
sbx_options_add_port(sbx_options *options, unsigned port, sbx_error **error)
{
    static const char op[] = "add_port";
    uint16_t *p;

    if (check_options(options, op, error) < 0)
        return -1;
    if (port < 1 || port > 65535) {
        sbx_error *err = NULL;

        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op,
                      "port %u is not a TCP port number (1..65535)", port);
        sbx_error_add_contextf(err, "port", "%u", port);
        sbx_error_propagate(error, err);
        return -1;
    }
    for (size_t i = 0; i < options->port_count; i++)
        if (options->ports[i] == port)
            return 0;
    p = realloc(options->ports, (options->port_count + 1) * sizeof(*p));
    if (!p)
        return oom(op, error);
    p[options->port_count++] = (uint16_t)port;
    options->ports = p;
    options->set |= SBX_OPTION_PORTS;
    return 0;
}

size_t
sbx_options_get_ports(const sbx_options *options, const uint16_t **ports)
{
    if (ports)
        *ports = options ? options->ports : NULL;
    return options ? options->port_count : 0;
}

SBX_EXPORT int
sbx_options_set_progress(sbx_options *options, sbx_progress_fn fn, void *user_data,
                         sbx_error **error)
{
    if (check_options(options, "set_progress", error) < 0)
        return -1;
    options->progress = fn;
    options->progress_data = fn ? user_data : NULL;
    return 0;
}

sbx_progress_fn
sbx_options_get_progress(const sbx_options *options, void **user_data)
{
    *user_data = options ? options->progress_data : NULL;
    return options ? options->progress : NULL;
}

SBX_EXPORT int
sbx_options_set_backend_options(sbx_options *options, const char *json, sbx_error **error)
{
    static const char op[] = "set_backend_options";
    json_object *obj = NULL;
    const char *why = NULL;
    size_t at = 0;
    int parsed, is_object;

    if (check_options(options, op, error) < 0)
        return -1;
    parsed = json ? sbx_json_parse_whole(json, &obj, &at, &why) : -1;
    is_object = parsed == 0 && json_object_is_type(obj, json_type_object);
    json_object_put(obj);
    if (!is_object) {
        /* The value itself is not repeated: it may hold a credential. */
        sbx_error *e;

        if (!json)
            e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "invalid backend_options: NULL");
        else if (parsed == -2) {
            sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        } else if (parsed < 0)
            e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "invalid backend_options: not JSON at offset %zu: %s", at, why);
        else
            e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                              "invalid backend_options: a JSON object is expected");
        sbx_error_add_context(e, "option", "backend_options");
        return -1;
    }
    return set_string(options, op, "backend_options", &options->backend_options, json,
                      SBX_OPTION_BACKEND_OPTIONS, error);
}

SBX_EXPORT int64_t
sbx_options_get_disk_mb(const sbx_options *options)
{
    return options ? options->disk_mb : 0;
}

SBX_EXPORT int
sbx_options_get_allow_internet(const sbx_options *options)
{
    return options ? options->allow_internet : 1;
}

SBX_EXPORT const char *
sbx_options_get0_image(const sbx_options *options)
{
    return options ? options->image : NULL;
}

SBX_EXPORT const char *
sbx_options_get0_template(const sbx_options *options)
{
    return options ? options->template_name : NULL;
}

SBX_EXPORT const char *
sbx_options_get0_snapshot_id(const sbx_options *options)
{
    return options ? options->snapshot_id : NULL;
}

SBX_EXPORT const char *
sbx_options_get0_app_name(const sbx_options *options)
{
    return options ? options->app_name : NULL;
}

SBX_EXPORT const char *
sbx_options_get0_gpu(const sbx_options *options)
{
    return options ? options->gpu : NULL;
}

SBX_EXPORT const char *
sbx_options_get0_backend_options(const sbx_options *options)
{
    return options ? options->backend_options : NULL;
}

SBX_EXPORT int
sbx_options_set_preset(sbx_options *options, const char *name, sbx_error **error)
{
    static const char op[] = "set_preset";

    if (check_options(options, op, error) < 0)
        return -1;
    if (!sbx_preset_name_valid(name)) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "invalid preset name \"%s\": must match "
                                     "[a-z0-9][a-z0-9._-]*", name ? name : "");
        sbx_error_add_context(e, "option", "preset");
        return -1;
    }
    return set_string(options, op, "preset", &options->preset, name, SBX_OPTION_PRESET, error);
}

SBX_EXPORT const char *
sbx_options_get0_preset(const sbx_options *options)
{
    return options ? options->preset : NULL;
}

SBX_EXPORT int
sbx_options_add_file(sbx_options *options, const char *path, const void *data, size_t len,
                     sbx_error **error)
{
    static const char op[] = "add_file";
    char *p, *d;

    if (check_options(options, op, error) < 0)
        return -1;
    if (!path || !*path) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "invalid file path \"\": must be a non-empty sandbox path");
        sbx_error_add_context(e, "option", "files");
        return -1;
    }
    if (!data && len) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                      "data of file \"%s\" is NULL with length %zu", path, len);
        return -1;
    }
    if (!(d = malloc(len ? len : 1)))
        return oom(op, error);
    if (len)
        memcpy(d, data, len);
    for (size_t i = 0; i < options->file_count; i++) {
        if (strcmp(options->file_paths[i], path) == 0) {
            free(options->file_data[i]);
            options->file_data[i] = d;
            options->file_lens[i] = len;
            options->set |= SBX_OPTION_FILES;
            return 0;
        }
    }
    if (!(p = strdup(path))) {
        free(d);
        return oom(op, error);
    }
    size_t n = options->file_count + 1;
    char **paths = realloc(options->file_paths, n * sizeof(*paths));
    if (paths)
        options->file_paths = paths;
    char **datas = paths ? realloc(options->file_data, n * sizeof(*datas)) : NULL;
    if (datas)
        options->file_data = datas;
    size_t *lens = datas ? realloc(options->file_lens, n * sizeof(*lens)) : NULL;
    if (!lens) {
        free(p);
        free(d);
        return oom(op, error);
    }
    options->file_lens = lens;
    options->file_paths[options->file_count] = p;
    options->file_data[options->file_count] = d;
    options->file_lens[options->file_count] = len;
    options->file_count = n;
    options->set |= SBX_OPTION_FILES;
    return 0;
}

SBX_EXPORT int
sbx_options_set_workspace(sbx_options *options, sbx_manifest *manifest, sbx_error **error)
{
    if (check_options(options, "set_workspace", error) < 0)
        return -1;
    sbx_manifest_free(options->workspace);
    options->workspace = sbx_manifest_ref(manifest);
    if (manifest)
        options->set |= SBX_OPTION_WORKSPACE;
    else
        options->set &= ~(uint64_t)SBX_OPTION_WORKSPACE;
    return 0;
}

sbx_manifest *
sbx_options_get0_workspace(const sbx_options *options)
{
    return options ? options->workspace : NULL;
}

size_t
sbx_options_get_file_count(const sbx_options *options)
{
    return options ? options->file_count : 0;
}

void
sbx_options_get0_file(const sbx_options *options, size_t index, const char **path,
                      const char **data, size_t *len)
{
    *path = options->file_paths[index];
    *data = options->file_data[index];
    *len = options->file_lens[index];
}

SBX_EXPORT int
sbx_options_is_set(const sbx_options *options, sbx_option_field field)
{
    return options && (options->set & (uint64_t)field) ? 1 : 0;
}

SBX_EXPORT double
sbx_options_get_timeout_secs(const sbx_options *options)
{
    return options ? options->timeout_secs : SBX_DEFAULT_TIMEOUT_SECS;
}

SBX_EXPORT double
sbx_options_get_cpu(const sbx_options *options)
{
    return options ? options->cpu : SBX_DEFAULT_CPU;
}

SBX_EXPORT int64_t
sbx_options_get_memory_mb(const sbx_options *options)
{
    return options ? options->memory_mb : SBX_DEFAULT_MEMORY_MB;
}

SBX_EXPORT const char *
sbx_options_get0_workdir(const sbx_options *options)
{
    return options ? options->workdir : NULL;
}

SBX_EXPORT const char *
sbx_options_get0_env(const sbx_options *options, const char *key)
{
    if (!options || !key)
        return NULL;
    for (size_t i = 0; i < options->env_count; i++)
        if (strcmp(options->env_keys[i], key) == 0)
            return options->env_values[i];
    return NULL;
}

int
sbx_options_env_strv(const sbx_options *options, sbx_strv *out)
{
    if (!options)
        return 0;
    for (size_t i = 0; i < options->env_count; i++)
        if (sbx_strv_pushf(out, "%s=%s", options->env_keys[i], options->env_values[i]) < 0)
            return -1;
    return 0;
}

uint64_t
sbx_options_set_fields(const sbx_options *options)
{
    return options ? options->set : 0;
}

const char *
sbx_options_get0_git_repo(const sbx_options *options)
{
    return options ? options->git_repo : NULL;
}

const char *
sbx_options_get0_git_ref(const sbx_options *options)
{
    return options ? options->git_ref : NULL;
}
