/*
 * host/presets.c — presets: named creation defaults plus setup commands,
 * kept as JSON data files (format: presets/README.md), found by name in
 * the run-time registry, SBX_PRESET_PATH, the user's directory and the
 * built-in directory, in that order.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "internal.h"

#ifndef SBX_PRESET_DIR
#define SBX_PRESET_DIR "/usr/local/share/libsbx/presets"
#endif

/* Largest preset file read (a preset is a few hundred bytes). */
#define PRESET_MAX_BYTES (1u << 20)

struct sbx_preset {
    json_object *doc;       /* validated document */
    char *name;
    char *description;
    char *source;           /* file path or "registered" */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static json_object **registry;     /* registered documents */
static size_t registry_count;

int
sbx_preset_name_valid(const char *name)
{
    if (!name || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
        return 0;
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return strlen(name) <= 128;
}

/* ---------------------------------------------------------------- checks */

static sbx_error *
bad(sbx_error **err, const char *source, const char *fmt, const char *key)
{
    sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "preset", fmt, key);
    if (source)
        sbx_error_add_context(e, "source", source);
    if (key)
        sbx_error_add_context(e, "key", key);
    return e;
}

static int
check_string_map(json_object *v, const char *key, int values_are_lists, int keys_are_env,
                 const char *source, sbx_error **err)
{
    if (!json_object_is_type(v, json_type_object)) {
        bad(err, source, "preset key \"%s\" must be a JSON object", key);
        return -1;
    }
    json_object_object_foreach(v, k, item) {
        if (keys_are_env && !sbx_env_key_valid(k)) {
            sbx_error *e = bad(err, source, "invalid environment variable name \"%s\" in preset",
                               k);
            sbx_error_add_context(e, "name", k);
            return -1;
        }
        if (values_are_lists) {
            if (!json_object_is_type(item, json_type_array)) {
                bad(err, source, "preset key \"%s\" must map names to lists of strings", key);
                return -1;
            }
            for (size_t i = 0; i < json_object_array_length(item); i++)
                if (!json_object_is_type(json_object_array_get_idx(item, i), json_type_string)) {
                    bad(err, source, "preset key \"%s\" must map names to lists of strings",
                        key);
                    return -1;
                }
        } else if (!json_object_is_type(item, json_type_string)) {
            bad(err, source, "preset key \"%s\" must map names to strings", key);
            return -1;
        }
    }
    return 0;
}

/* Validates @doc as a preset document. */
static int
validate(json_object *doc, const char *source, sbx_error **err)
{
    json_object *v;

    if (!json_object_is_type(doc, json_type_object)) {
        bad(err, source, "a preset must be a JSON object%s", "");
        return -1;
    }
    json_object_object_foreach(doc, key, val) {
        if (strcmp(key, "format") == 0) {
            if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) != 1) {
                bad(err, source, "preset \"%s\" must be 1 (the only format this library reads)",
                    key);
                return -1;
            }
        } else if (strcmp(key, "name") == 0 || strcmp(key, "description") == 0 ||
                   strcmp(key, "image") == 0) {
            if (!json_object_is_type(val, json_type_string) ||
                (strcmp(key, "description") != 0 && json_object_get_string_len(val) == 0)) {
                bad(err, source, "preset key \"%s\" must be a non-empty string", key);
                return -1;
            }
        } else if (strcmp(key, "backend_images") == 0) {
            if (check_string_map(val, key, 0, 0, source, err) < 0)
                return -1;
        } else if (strcmp(key, "backend_setup_commands") == 0) {
            if (check_string_map(val, key, 1, 0, source, err) < 0)
                return -1;
        } else if (strcmp(key, "env") == 0) {
            if (check_string_map(val, key, 0, 1, source, err) < 0)
                return -1;
        } else if (strcmp(key, "setup_commands") == 0) {
            if (!json_object_is_type(val, json_type_array)) {
                bad(err, source, "preset key \"%s\" must be a list of strings", key);
                return -1;
            }
            for (size_t i = 0; i < json_object_array_length(val); i++)
                if (!json_object_is_type(json_object_array_get_idx(val, i), json_type_string)) {
                    bad(err, source, "preset key \"%s\" must be a list of strings", key);
                    return -1;
                }
        } else if (strcmp(key, "setup_before_workspace") == 0 ||
                   strcmp(key, "allow_internet") == 0) {
            if (!json_object_is_type(val, json_type_boolean)) {
                bad(err, source, "preset key \"%s\" must be true or false", key);
                return -1;
            }
        } else if (strcmp(key, "cpu") == 0 || strcmp(key, "timeout_secs") == 0) {
            if (!(json_object_is_type(val, json_type_double) ||
                  json_object_is_type(val, json_type_int)) ||
                !(json_object_get_double(val) > 0) || json_object_get_double(val) > 1e9) {
                bad(err, source, "preset key \"%s\" must be a number > 0", key);
                return -1;
            }
        } else if (strcmp(key, "memory_mb") == 0) {
            if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) <= 0) {
                bad(err, source, "preset key \"%s\" must be an integer > 0", key);
                return -1;
            }
        } else {
            bad(err, source, "unknown key \"%s\" in preset", key);
            return -1;
        }
    }
    if (!json_object_object_get_ex(doc, "name", &v)) {
        bad(err, source, "a preset needs a \"%s\"", "name");
        return -1;
    }
    if (!sbx_preset_name_valid(json_object_get_string(v))) {
        sbx_error *e = bad(err, source, "invalid preset name \"%s\": must match "
                           "[a-z0-9][a-z0-9._-]*", json_object_get_string(v));
        sbx_error_add_context(e, "name", json_object_get_string(v));
        return -1;
    }
    return 0;
}

/* A preset taking ownership of the validated @doc. */
static sbx_preset *
preset_new(json_object *doc, const char *source)
{
    sbx_preset *p = calloc(1, sizeof(*p));
    json_object *v;

    if (!p)
        return NULL;
    p->doc = doc;
    json_object_object_get_ex(doc, "name", &v);
    p->name = strdup(json_object_get_string(v));
    p->description = strdup(json_object_object_get_ex(doc, "description", &v)
                            ? json_object_get_string(v) : "");
    p->source = strdup(source);
    if (!p->name || !p->description || !p->source) {
        free(p->name);
        free(p->description);
        free(p->source);
        free(p);
        return NULL;
    }
    return p;
}

/* Parses @json into a validated document (new reference). */
static json_object *
parse_doc(const char *json, const char *source, sbx_error **err)
{
    enum json_tokener_error jerr = json_tokener_success;
    json_object *doc;

    if (!json) {
        bad(err, source, "preset document is %s", "NULL");
        return NULL;
    }
    doc = json_tokener_parse_verbose(json, &jerr);
    if (!doc) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "preset",
                                     "preset is not valid JSON: %s",
                                     json_tokener_error_desc(jerr));
        if (source)
            sbx_error_add_context(e, "source", source);
        return NULL;
    }
    if (validate(doc, source, err) < 0) {
        json_object_put(doc);
        return NULL;
    }
    return doc;
}

SBX_EXPORT sbx_preset *
sbx_preset_parse(const char *json, sbx_error **error)
{
    sbx_error *err = NULL;
    json_object *doc = parse_doc(json, NULL, &err);
    sbx_preset *p;

    if (!doc) {
        sbx_error_propagate(error, err);
        return NULL;
    }
    if (!(p = preset_new(doc, "parsed"))) {
        json_object_put(doc);
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, "preset", "out of memory");
    }
    return p;
}

SBX_EXPORT void
sbx_preset_free(sbx_preset *preset)
{
    if (!preset)
        return;
    json_object_put(preset->doc);
    free(preset->name);
    free(preset->description);
    free(preset->source);
    free(preset);
}

SBX_EXPORT int
sbx_preset_register(const char *json, sbx_error **error)
{
    sbx_error *err = NULL;
    json_object *doc = parse_doc(json, "registered", &err), *v;
    const char *name;
    int rc = 0;

    if (!doc) {
        sbx_error_propagate(error, err);
        return -1;
    }
    json_object_object_get_ex(doc, "name", &v);
    name = json_object_get_string(v);
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_count; i++) {
        json_object *n;
        json_object_object_get_ex(registry[i], "name", &n);
        if (strcmp(json_object_get_string(n), name) == 0) {
            json_object_put(registry[i]);
            registry[i] = doc;
            doc = NULL;
            break;
        }
    }
    if (doc) {
        json_object **grown = realloc(registry, (registry_count + 1) * sizeof(*grown));
        if (grown) {
            registry = grown;
            registry[registry_count++] = doc;
        } else {
            json_object_put(doc);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (rc < 0)
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, "preset", "out of memory");
    return rc;
}

/* ---------------------------------------------------------------- lookup */

/* The directories searched for preset files, in order. */
static int
search_dirs(sbx_strv *dirs)
{
    const char *path = getenv("SBX_PRESET_PATH");
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    const char *builtin = getenv("SBX_PRESET_DIR");

    if (path && *path) {
        char *copy = strdup(path), *save = NULL;
        if (!copy)
            return -1;
        for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
            if (*d && sbx_strv_push(dirs, d) < 0) {
                free(copy);
                return -1;
            }
        free(copy);
    }
    if (xdg && *xdg) {
        if (sbx_strv_pushf(dirs, "%s/sbx/presets", xdg) < 0)
            return -1;
    } else if (home && *home) {
        if (sbx_strv_pushf(dirs, "%s/.config/sbx/presets", home) < 0)
            return -1;
    }
    if ((!builtin || !*builtin) && sbx_uninstalled_source_dir())
        return sbx_strv_pushf(dirs, "%s/presets", sbx_uninstalled_source_dir());
    return sbx_strv_push(dirs, builtin && *builtin ? builtin : SBX_PRESET_DIR);
}

/* What kind of file @mode is, for messages about a preset file that is not
 * a regular file. */
static const char *
file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a fifo";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a regular file";
}

/* Stores an invalid_argument error about preset file @path in *@err. */
static sbx_error *
bad_file(sbx_error **err, const char *path, const char *fmt, ...) SBX_PRINTF(3, 4);

static sbx_error *
bad_file(sbx_error **err, const char *path, const char *fmt, ...)
{
    va_list ap;
    char *text;
    sbx_error *e;

    va_start(ap, fmt);
    text = sbx_vasprintf(fmt, ap);
    va_end(ap);
    e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "preset", "%s",
                      text ? text : "out of memory");
    free(text);
    sbx_error_add_context(e, "source", path);
    return e;
}

/*
 * Reads a preset file. Returns the preset, NULL with *@err set, or NULL
 * with *@missing = 1 when there is no such file. The file is opened
 * without blocking (a fifo or a device never hangs the caller) and must be
 * a regular file: anything else is refused with invalid_argument naming
 * the path and what it is.
 */
static sbx_preset *
load_file(const char *path, int *missing, sbx_error **err)
{
    sbx_buf b = { 0 };
    char chunk[4096];
    ssize_t n;
    json_object *doc;
    sbx_preset *p;
    struct stat st;
    char *text;
    int fd;

    *missing = 0;
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            *missing = 1;
        else
            bad_file(err, path, "cannot read preset file %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        bad_file(err, path, "cannot read preset file %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        bad_file(err, path, "preset file %s is %s, not a regular file", path,
                 file_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    for (;;) {
        n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            bad_file(err, path, "cannot read preset file %s: %s", path, strerror(errno));
            close(fd);
            sbx_buf_clear(&b);
            return NULL;
        }
        if (n == 0)
            break;
        if (b.len + (size_t)n > PRESET_MAX_BYTES || sbx_buf_append(&b, chunk, (size_t)n) < 0) {
            close(fd);
            sbx_buf_clear(&b);
            bad_file(err, path, "preset file %s is larger than %u bytes", path,
                     PRESET_MAX_BYTES);
            return NULL;
        }
    }
    close(fd);
    text = sbx_buf_steal(&b, NULL);
    doc = text ? parse_doc(text, path, err) : NULL;
    free(text);
    if (!doc)
        return NULL;
    if (!(p = preset_new(doc, path))) {
        json_object_put(doc);
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "preset", "out of memory");
    }
    return p;
}

/* The registered preset @name (a new preset), or NULL. */
static sbx_preset *
find_registered(const char *name)
{
    sbx_preset *p = NULL;

    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_count && !p; i++) {
        json_object *n;
        json_object_object_get_ex(registry[i], "name", &n);
        if (strcmp(json_object_get_string(n), name) == 0) {
            json_object *copy = NULL;
            if (json_object_deep_copy(registry[i], &copy, NULL) == 0) {
                p = preset_new(copy, "registered");
                if (!p)
                    json_object_put(copy);
            }
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return p;
}

SBX_EXPORT sbx_preset *
sbx_preset_load(const char *name, sbx_error **error)
{
    sbx_strv dirs = { 0 };
    sbx_error *err = NULL;
    sbx_preset *p;

    if (!sbx_preset_name_valid(name)) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "preset",
                                     "invalid preset name \"%s\": must match "
                                     "[a-z0-9][a-z0-9._-]*", name ? name : "");
        sbx_error_add_context(e, "name", name ? name : "");
        return NULL;
    }
    if ((p = find_registered(name)))
        return p;
    if (search_dirs(&dirs) < 0) {
        sbx_strv_clear(&dirs);
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, "preset", "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < dirs.count; i++) {
        int missing;
        char *path = sbx_asprintf("%s/%s.json", dirs.items[i], name);
        if (!path)
            break;
        p = load_file(path, &missing, &err);
        if (p && strcmp(p->name, name) != 0) {
            /* A file is only found under its own name. */
            sbx_error *e = bad_file(&err, path,
                                    "preset file %s names preset \"%s\", not \"%s\" "
                                    "(the name it was loaded by)", path, p->name, name);
            sbx_error_add_context(e, "name", name);
            sbx_error_add_context(e, "file_name", p->name);
            sbx_preset_free(p);
            p = NULL;
        }
        free(path);
        if (p || !missing) {
            sbx_strv_clear(&dirs);
            sbx_error_propagate(error, err);
            return p;
        }
    }
    char *searched = sbx_strv_join(&dirs, ":");
    sbx_error *e = sbx_set_error(error, SBX_ERROR_NOT_FOUND, "preset",
                                 "no preset named \"%s\" (searched the registered presets "
                                 "and %s)", name, searched ? searched : "");
    sbx_error_add_context(e, "name", name);
    sbx_error_add_context(e, "searched", searched ? searched : "");
    free(searched);
    sbx_strv_clear(&dirs);
    return NULL;
}

static int
cmp_preset(const void *a, const void *b)
{
    return strcmp((*(sbx_preset *const *)a)->name, (*(sbx_preset *const *)b)->name);
}

/* Appends @p to @out unless a preset of its name is there (then frees it). */
static int
add_unique(sbx_preset ***out, size_t *count, size_t *cap, sbx_preset *p)
{
    for (size_t i = 0; i < *count; i++)
        if (strcmp((*out)[i]->name, p->name) == 0) {
            sbx_preset_free(p);
            return 0;
        }
    if (*count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        sbx_preset **grown = realloc(*out, ncap * sizeof(*grown));
        if (!grown) {
            sbx_preset_free(p);
            return -1;
        }
        *out = grown;
        *cap = ncap;
    }
    (*out)[(*count)++] = p;
    return 0;
}

SBX_EXPORT int
sbx_presets_list(sbx_preset ***list, size_t *count, sbx_error **error)
{
    sbx_preset **out = NULL;
    size_t n = 0, cap = 0;
    sbx_strv dirs = { 0 };

    if (!list || !count) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "presets_list", "list or count is NULL");
        return -1;
    }
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_count; i++) {
        json_object *copy = NULL;
        sbx_preset *p;
        if (json_object_deep_copy(registry[i], &copy, NULL) != 0 ||
            !(p = preset_new(copy, "registered")) || add_unique(&out, &n, &cap, p) < 0) {
            pthread_mutex_unlock(&registry_lock);
            goto oom;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (search_dirs(&dirs) < 0)
        goto oom;
    for (size_t i = 0; i < dirs.count; i++) {
        DIR *d = opendir(dirs.items[i]);
        struct dirent *e;
        if (!d)
            continue;
        while ((e = readdir(d))) {
            size_t len = strlen(e->d_name);
            int missing;
            if (len <= 5 || strcmp(e->d_name + len - 5, ".json") != 0)
                continue;
            char *path = sbx_asprintf("%s/%s", dirs.items[i], e->d_name);
            sbx_error *skipped = NULL;
            sbx_preset *p = path ? load_file(path, &missing, &skipped) : NULL;
            /* A file is only found under its own name. */
            if (p && (strlen(p->name) != len - 5 || strncmp(p->name, e->d_name, len - 5) != 0)) {
                sbx_log(SBX_LOG_WARNING, NULL,
                        "preset file %s left out: it names preset \"%s\", not \"%.*s\"",
                        path, p->name, (int)(len - 5), e->d_name);
                sbx_preset_free(p);
                p = NULL;
            } else if (!p && skipped) {
                sbx_log(SBX_LOG_WARNING, NULL, "preset file left out: %s",
                        sbx_error_get0_message(skipped));
            }
            free(path);
            sbx_error_free(skipped);
            if (p && add_unique(&out, &n, &cap, p) < 0) {
                closedir(d);
                goto oom;
            }
        }
        closedir(d);
    }
    sbx_strv_clear(&dirs);
    if (n > 1)
        qsort(out, n, sizeof(*out), cmp_preset);
    *list = out;
    *count = n;
    return 0;
oom:
    sbx_strv_clear(&dirs);
    sbx_preset_list_free(out, n);
    sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, "presets_list", "out of memory");
    return -1;
}

SBX_EXPORT void
sbx_preset_list_free(sbx_preset **list, size_t count)
{
    if (!list)
        return;
    for (size_t i = 0; i < count; i++)
        sbx_preset_free(list[i]);
    free(list);
}

/* ------------------------------------------------------------- accessors */

SBX_EXPORT const char *
sbx_preset_get0_name(const sbx_preset *preset)
{
    return preset ? preset->name : NULL;
}

SBX_EXPORT const char *
sbx_preset_get0_description(const sbx_preset *preset)
{
    return preset ? preset->description : NULL;
}

SBX_EXPORT const char *
sbx_preset_get0_source(const sbx_preset *preset)
{
    return preset ? preset->source : NULL;
}

SBX_EXPORT const char *
sbx_preset_get0_image(const sbx_preset *preset, const char *backend)
{
    json_object *map, *v;

    if (!preset)
        return NULL;
    if (backend && json_object_object_get_ex(preset->doc, "backend_images", &map) &&
        json_object_object_get_ex(map, backend, &v))
        return json_object_get_string(v);
    return json_object_object_get_ex(preset->doc, "image", &v) ? json_object_get_string(v)
                                                               : NULL;
}

SBX_EXPORT char *
sbx_preset_to_json(const sbx_preset *preset)
{
    if (!preset)
        return NULL;
    return strdup(json_object_to_json_string_ext(preset->doc,
                                                 JSON_C_TO_STRING_PRETTY |
                                                 JSON_C_TO_STRING_SPACED |
                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* --------------------------------------------------- used by create */

int
sbx_preset_get_number(const sbx_preset *preset, const char *key, double *value)
{
    json_object *v;

    if (!preset || !json_object_object_get_ex(preset->doc, key, &v))
        return 0;
    *value = json_object_get_double(v);
    return 1;
}

int
sbx_preset_get_bool(const sbx_preset *preset, const char *key, int *value)
{
    json_object *v;

    if (!preset || !json_object_object_get_ex(preset->doc, key, &v))
        return 0;
    *value = json_object_get_boolean(v) ? 1 : 0;
    return 1;
}

int
sbx_preset_env_strv(const sbx_preset *preset, const sbx_options *options, sbx_strv *out)
{
    json_object *env;

    if (!preset || !json_object_object_get_ex(preset->doc, "env", &env))
        return 0;
    json_object_object_foreach(env, k, v) {
        if (sbx_options_get0_env(options, k))
            continue; /* the caller's value wins */
        if (sbx_strv_pushf(out, "%s=%s", k, json_object_get_string(v)) < 0)
            return -1;
    }
    return 0;
}

int
sbx_preset_setup_commands(const sbx_preset *preset, const char *backend, sbx_strv *out)
{
    json_object *list, *map;

    if (!preset)
        return 0;
    if (json_object_object_get_ex(preset->doc, "setup_commands", &list))
        for (size_t i = 0; i < json_object_array_length(list); i++)
            if (sbx_strv_push(out, json_object_get_string(
                                       json_object_array_get_idx(list, i))) < 0)
                return -1;
    if (backend && json_object_object_get_ex(preset->doc, "backend_setup_commands", &map) &&
        json_object_object_get_ex(map, backend, &list))
        for (size_t i = 0; i < json_object_array_length(list); i++)
            if (sbx_strv_push(out, json_object_get_string(
                                       json_object_array_get_idx(list, i))) < 0)
                return -1;
    return 0;
}
