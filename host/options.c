/*
 * host/options.c — sbx_options: creation options that remember which fields
 * the caller set. Setters validate and copy; getters return the reference's
 * defaults for unset fields.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct sbx_options {
    uint64_t set;               /* sbx_option_field bits */
    double timeout_secs;
    double cpu;
    int64_t memory_mb;
    char *workdir;
    char *git_repo;
    char *git_ref;
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
    sbx_set_error(error, SBX_ERROR_UNKNOWN, op, "out of memory");
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

    if (check_options(options, op, error) < 0 ||
        check_positive(op, "timeout_secs", secs, error) < 0)
        return -1;
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
