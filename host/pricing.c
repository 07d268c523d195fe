/*
 * host/pricing.c — the price table and what a sandbox's size costs.
 *
 * The bundled table is pricing/pricing.json, installed as
 * $(pkgdatadir)/pricing.json (read from the source tree when the library
 * runs uninstalled; SBX_PRICING_DATA names another file). A user file
 * (SBX_PRICING_FILE, else $XDG_CONFIG_HOME/sbx/pricing.json, else
 * ~/.config/sbx/pricing.json, when it exists) is laid over it, key by key
 * within each backend's entry; a backend the bundled table lacks is added.
 * Rates are read as exact decimals into pico-dollars per hour (a
 * per-second rate times 3600 stays exact), so only the final cost is
 * rounded, once, to the pico-dollar.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "internal.h"

#ifndef SBX_PRICING_DATA_FILE
#define SBX_PRICING_DATA_FILE "/usr/local/share/libsbx/pricing.json"
#endif

/* Reads and parses the JSON document at @path. NULL with configuration
 * naming the path when it cannot be read or is not a JSON object. */
static json_object *
load_doc(const char *path, sbx_error **err)
{
    json_object *doc = json_object_from_file(path);
    const char *why = json_util_get_last_err();
    sbx_error *e;

    if (!doc || !json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        if (doc || !why)
            why = doc ? "not a JSON object" : "unreadable";
        /* json-c ends its message with a newline: not part of ours. */
        e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, "pricing",
                          "cannot read the pricing file %s: %.*s", path,
                          (int)strcspn(why, "\n"), why);
        sbx_error_add_context(e, "path", path);
        return NULL;
    }
    return doc;
}

/* The bundled file's path into @out. */
static void
bundled_path(char *out, size_t cap)
{
    const char *env = getenv("SBX_PRICING_DATA");

    if (env && *env)
        snprintf(out, cap, "%s", env);
    else if (sbx_uninstalled_source_dir())
        snprintf(out, cap, "%s/pricing/pricing.json", sbx_uninstalled_source_dir());
    else
        snprintf(out, cap, "%s", SBX_PRICING_DATA_FILE);
}

/* The user's file into @out: 1 when there is one to read, 0 when none. */
static int
user_path(char *out, size_t cap)
{
    const char *env = getenv("SBX_PRICING_FILE");
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    struct stat st;

    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return 1;              /* named: it must be there */
    }
    if (xdg && xdg[0] == '/')
        snprintf(out, cap, "%s/sbx/pricing.json", xdg);
    else if (home && *home)
        snprintf(out, cap, "%s/.config/sbx/pricing.json", home);
    else
        return 0;
    return stat(out, &st) == 0;
}

json_object *
sbx_pricing_load(sbx_error **err)
{
    char path[4096], upath[4096];
    json_object *doc, *user, *backends, *ubackends, *files;

    bundled_path(path, sizeof path);
    doc = load_doc(path, err);
    if (!doc)
        return NULL;
    if (!json_object_object_get_ex(doc, "backends", &backends) ||
        !json_object_is_type(backends, json_type_object)) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, "pricing",
                                     "the pricing file %s has no \"backends\" object", path);
        sbx_error_add_context(e, "path", path);
        json_object_put(doc);
        return NULL;
    }
    files = json_object_new_array();
    json_object_array_add(files, json_object_new_string(path));
    {
        json_object_object_foreach(backends, name, entry) {
            (void)name;
            if (json_object_is_type(entry, json_type_object))
                json_object_object_add(entry, "origin", json_object_new_string(path));
        }
    }
    if (user_path(upath, sizeof upath)) {
        user = load_doc(upath, err);
        if (!user) {
            json_object_put(files);
            json_object_put(doc);
            return NULL;
        }
        if (!json_object_object_get_ex(user, "backends", &ubackends) ||
            !json_object_is_type(ubackends, json_type_object)) {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, "pricing",
                                         "the pricing file %s has no \"backends\" object",
                                         upath);
            sbx_error_add_context(e, "path", upath);
            json_object_put(user);
            json_object_put(files);
            json_object_put(doc);
            return NULL;
        }
        json_object_object_foreach(ubackends, name, uentry) {
            json_object *entry;

            if (!json_object_is_type(uentry, json_type_object))
                continue;
            if (!json_object_object_get_ex(backends, name, &entry)) {
                entry = json_object_new_object();
                json_object_object_add(backends, name, entry);
            }
            json_object_object_foreach(uentry, key, value) {
                /* A rate given one way replaces the bundled rate given the
                 * other way. */
                if (strcmp(key, "vcpu_usd_per_s") == 0)
                    json_object_object_del(entry, "vcpu_usd_per_h");
                else if (strcmp(key, "vcpu_usd_per_h") == 0)
                    json_object_object_del(entry, "vcpu_usd_per_s");
                else if (strcmp(key, "ram_gib_usd_per_s") == 0)
                    json_object_object_del(entry, "ram_gib_usd_per_h");
                else if (strcmp(key, "ram_gib_usd_per_h") == 0)
                    json_object_object_del(entry, "ram_gib_usd_per_s");
                json_object_object_add(entry, key, json_object_get(value));
            }
            json_object_object_add(entry, "origin", json_object_new_string(upath));
        }
        json_object_array_add(files, json_object_new_string(upath));
        json_object_put(user);
    }
    json_object_object_add(doc, "files", files);
    return doc;
}

/* The rate @base ("vcpu", "ram_gib") of @entry in pico-dollars per hour:
 * 1 found, 0 published as null or absent (*@why set), -1 malformed. */
static int
entry_rate(json_object *entry, const char *base, int64_t *pusd_h, char *bad_key, size_t cap)
{
    char key[64];
    json_object *v;
    int64_t x;

    snprintf(key, sizeof key, "%s_usd_per_s", base);
    if (json_object_object_get_ex(entry, key, &v)) {
        if (!v)
            return 0;
        if (sbx_json_decimal(v, 12, &x) < 0 || x < 0 || x > INT64_MAX / 3600) {
            snprintf(bad_key, cap, "%s", key);
            return -1;
        }
        *pusd_h = x * 3600;
        return 1;
    }
    snprintf(key, sizeof key, "%s_usd_per_h", base);
    if (json_object_object_get_ex(entry, key, &v)) {
        if (!v)
            return 0;
        if (sbx_json_decimal(v, 12, &x) < 0 || x < 0) {
            snprintf(bad_key, cap, "%s", key);
            return -1;
        }
        *pusd_h = x;
        return 1;
    }
    return 0;
}

/* @rate × @quantity, rounded to the unit; -1 on overflow. */
static int
scale_rate(int64_t rate, long double quantity, int64_t *out)
{
    long double v = (long double)rate * quantity;

    if (!(v >= 0) || v > (long double)INT64_MAX)
        return -1;
    *out = (int64_t)llroundl(v);
    return 0;
}

/*
 * The table sbx_pricing_rate() reads (every destroy asks it for the
 * sandbox's rate): parsed once and kept while both files are the same
 * (path, inode, size, modification and change times). A file modified
 * less than PRICING_SETTLE_SECS ago is read again at each call, since a
 * second write within one tick of the kernel's file clock (milliseconds)
 * would leave its times as they were. Guarded by pricing_lock, held for
 * the whole rate lookup (json-c's reference counts are not atomic).
 */
#define PRICING_SETTLE_SECS 2

typedef struct pricing_sig {
    char path[4096];
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} pricing_sig;

static pthread_mutex_t pricing_lock = PTHREAD_MUTEX_INITIALIZER;
static json_object *pricing_cache;
static pricing_sig pricing_cache_sig[2];

/* The signature of @path into @sig; 1 when it may be kept (it is missing,
 * or was last modified PRICING_SETTLE_SECS ago or earlier), 0 when not. */
static int
pricing_sig_of(const char *path, pricing_sig *sig)
{
    struct stat st;

    memset(sig, 0, sizeof(*sig));
    snprintf(sig->path, sizeof sig->path, "%s", path);
    if (stat(path, &st) < 0)
        return 1;
    sig->exists = 1;
    sig->dev = st.st_dev;
    sig->ino = st.st_ino;
    sig->size = st.st_size;
    sig->mtime = st.st_mtim;
    sig->ctime = st.st_ctim;
    return time(NULL) - st.st_mtim.tv_sec >= PRICING_SETTLE_SECS;
}

static int
pricing_sig_eq(const pricing_sig *a, const pricing_sig *b)
{
    return strcmp(a->path, b->path) == 0 && a->exists == b->exists && a->dev == b->dev &&
           a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec &&
           a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* The table (a new reference), from the cache when both files are as they
 * were; NULL with the error of sbx_pricing_load(). Called with
 * pricing_lock held. */
static json_object *
pricing_cached(sbx_error **err)
{
    pricing_sig sig[2];
    char path[4096];
    json_object *doc;
    int keep;

    bundled_path(path, sizeof path);
    keep = pricing_sig_of(path, &sig[0]);
    if (!user_path(path, sizeof path))
        path[0] = '\0';
    keep = pricing_sig_of(path, &sig[1]) && keep;
    if (pricing_cache && pricing_sig_eq(&sig[0], &pricing_cache_sig[0]) &&
        pricing_sig_eq(&sig[1], &pricing_cache_sig[1]))
        return json_object_get(pricing_cache);
    doc = sbx_pricing_load(err);
    json_object_put(pricing_cache);
    pricing_cache = NULL;
    if (doc && keep) {
        pricing_cache = json_object_get(doc);
        memcpy(pricing_cache_sig, sig, sizeof(sig));
    }
    return doc;
}

/* The "origin" of a merged entry: the file that set it last; NULL when
 * there is none. */
static const char *
get_origin(json_object *entry)
{
    json_object *v;

    if (!json_object_object_get_ex(entry, "origin", &v) ||
        !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static int pricing_rate_locked(const char *backend, double vcpu, double ram_gib,
                               const char *gpu, sbx_rate *rate, sbx_error **err);

int
sbx_pricing_rate(const char *backend, double vcpu, double ram_gib, const char *gpu,
                 sbx_rate *rate, sbx_error **err)
{
    pthread_mutex_lock(&pricing_lock);
    int r = pricing_rate_locked(backend, vcpu, ram_gib, gpu, rate, err);
    pthread_mutex_unlock(&pricing_lock);
    /* The backend is the error's own field, not a context pair beside it. */
    if (r < 0 && err && *err && backend && *backend)
        sbx_error_fill(*err, backend, NULL);
    return r;
}

static int
pricing_rate_locked(const char *backend, double vcpu, double ram_gib, const char *gpu,
                    sbx_rate *rate, sbx_error **err)
{
    static const char op[] = "pricing";
    json_object *doc, *backends, *entry, *v, *gpus;
    int64_t cpu_h = 0, ram_h = 0, gpu_h = 0, part;
    char bad_key[64] = "";
    sbx_error *e;
    int r;

    memset(rate, 0, sizeof *rate);
    if (!backend || !*backend) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op, "backend is NULL or empty");
        return -1;
    }
    if (!(vcpu >= 0) || !isfinite(vcpu) || !(ram_gib >= 0) || !isfinite(ram_gib)) {
        e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op,
                          "invalid size: vcpu %g, ram_gib %g (finite numbers >= 0)",
                          vcpu, ram_gib);
        sbx_error_add_contextf(e, "vcpu", "%g", vcpu);
        sbx_error_add_contextf(e, "ram_gib", "%g", ram_gib);
        return -1;
    }
    doc = pricing_cached(err);
    if (!doc)
        return -1;
    json_object_object_get_ex(doc, "backends", &backends);
    if (!json_object_object_get_ex(backends, backend, &entry) ||
        !json_object_is_type(entry, json_type_object)) {
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, op,
                          "no price for backend \"%s\" in the pricing table", backend);
        json_object_put(doc);
        return -1;
    }
    r = vcpu > 0 ? entry_rate(entry, "vcpu", &cpu_h, bad_key, sizeof bad_key) : 1;
    if (r == 1)
        r = ram_gib > 0 ? entry_rate(entry, "ram_gib", &ram_h, bad_key, sizeof bad_key) : 1;
    if (r == 0) {
        e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, op,
                          "backend \"%s\" has no published vCPU or memory rate "
                          "in the pricing table", backend);
        json_object_put(doc);
        return -1;
    }
    if (r < 0) {
        const char *value = json_object_to_json_string_ext(
            json_object_object_get(entry, bad_key), JSON_C_TO_STRING_PLAIN);
        const char *origin = get_origin(entry);

        e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, op,
                          "backend \"%s\" has a malformed rate in the pricing table: "
                          "%s %s is not a decimal number of USD >= 0 that fits%s%s%s",
                          backend, bad_key, value, origin ? " (the entry last set by " : "",
                          origin ? origin : "", origin ? ")" : "");
        sbx_error_add_context(e, "key", bad_key);
        sbx_error_add_context(e, "value", value);
        if (origin)
            sbx_error_add_context(e, "path", origin);
        json_object_put(doc);
        return -1;
    }
    if (scale_rate(cpu_h, vcpu, &cpu_h) < 0 || scale_rate(ram_h, ram_gib, &ram_h) < 0)
        goto overflow;
    if (gpu && *gpu) {
        char type[128];
        const char *colon = strchr(gpu, ':');
        long count = 1;
        int64_t x;

        snprintf(type, sizeof type, "%.*s", (int)(colon ? (size_t)(colon - gpu) : strlen(gpu)),
                 gpu);
        if (colon) {
            char *end;

            errno = 0;
            count = strtol(colon + 1, &end, 10);
            if (*end || errno || count < 1) {
                e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op,
                                  "invalid GPU \"%s\": expected TYPE or TYPE:COUNT", gpu);
                sbx_error_add_context(e, "gpu", gpu);
                json_object_put(doc);
                return -1;
            }
        }
        if (!json_object_object_get_ex(entry, "gpu_usd_per_s", &gpus) ||
            !json_object_object_get_ex(gpus, type, &v) || !v) {
            e = sbx_set_error(err, SBX_ERROR_NOT_FOUND, op,
                              "backend \"%s\" has no published rate for GPU \"%s\"",
                              backend, type);
                sbx_error_add_context(e, "gpu", gpu);
            json_object_put(doc);
            return -1;
        }
        if (sbx_json_decimal(v, 12, &x) < 0 || x < 0 || x > INT64_MAX / 3600 / count)
            goto overflow;
        gpu_h = x * 3600 * count;
    }
    part = cpu_h + ram_h;
    if (part < cpu_h || part + gpu_h < part)
        goto overflow;
    rate->pusd_per_hour = part + gpu_h;
    if (json_object_object_get_ex(entry, "billing_granularity_s", &v) && v)
        rate->granularity_s = json_object_get_double(v);
    if (json_object_object_get_ex(entry, "minimum_s", &v) && v)
        rate->minimum_s = json_object_get_double(v);
    if (json_object_object_get_ex(entry, "source_url", &v) && v &&
        json_object_is_type(v, json_type_string))
        snprintf(rate->source, sizeof rate->source, "%s", json_object_get_string(v));
    if (json_object_object_get_ex(entry, "origin", &v) && v)
        snprintf(rate->origin, sizeof rate->origin, "%s", json_object_get_string(v));
    json_object_put(doc);
    return 0;

overflow:
    e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op,
                      "the rate of backend \"%s\" for this size is out of range", backend);
    json_object_put(doc);
    return -1;
}

double
sbx_rate_billed_seconds(const sbx_rate *rate, double seconds)
{
    double s = seconds > 0 ? seconds : 0;

    if (rate->granularity_s > 0)
        s = ceil(s / rate->granularity_s - 1e-9) * rate->granularity_s;
    if (s < rate->minimum_s)
        s = rate->minimum_s;
    return s;
}

int
sbx_rate_cost_checked(const sbx_rate *rate, double seconds, int64_t *pusd)
{
    /* Microseconds × pico-dollars per hour / 3.6e9, rounded once. */
    long double us = roundl((long double)sbx_rate_billed_seconds(rate, seconds) * 1e6L);
    unsigned __int128 num, q;

    *pusd = 0;
    if (rate->pusd_per_hour <= 0)
        return 0;
    /* Past 2^64 microseconds (about 584,000 years) no rate fits, and the
     * conversion below would not be defined. */
    if (!(us < 18446744073709551616.0L)) {
        *pusd = INT64_MAX;
        return -1;
    }
    num = (unsigned __int128)(uint64_t)us * (unsigned __int128)(uint64_t)rate->pusd_per_hour;
    q = (num + 1800000000u) / 3600000000u;
    if (q > (unsigned __int128)INT64_MAX) {
        *pusd = INT64_MAX;
        return -1;
    }
    *pusd = (int64_t)q;
    return 0;
}

int64_t
sbx_rate_cost(const sbx_rate *rate, double seconds)
{
    int64_t pusd;

    sbx_rate_cost_checked(rate, seconds, &pusd);
    return pusd;
}

int64_t
sbx_rate_fusd_per_second(const sbx_rate *rate)
{
    /* pico-dollars per hour × 1000 / 3600 = femto-dollars per second. */
    return (int64_t)(((unsigned __int128)(uint64_t)rate->pusd_per_hour * 1000u + 1800u) / 3600u);
}

SBX_EXPORT int
sbx_cost_per_second(const char *backend, double vcpu, double ram_gib, const char *gpu,
                    int64_t *fusd_per_second, sbx_error **error)
{
    sbx_error *err = NULL;
    sbx_rate rate;

    if (!fusd_per_second) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "cost_per_second",
                      "fusd_per_second is NULL");
        sbx_error_fill(err, backend, "cost_per_second");
        sbx_error_propagate(error, err);
        return -1;
    }
    *fusd_per_second = 0;
    if (sbx_pricing_rate(backend, vcpu, ram_gib, gpu, &rate, &err) < 0) {
        sbx_error_fill(err, backend, "cost_per_second");
        sbx_error_propagate(error, err);
        return -1;
    }
    *fusd_per_second = sbx_rate_fusd_per_second(&rate);
    return 0;
}

SBX_EXPORT int
sbx_cost_of_duration(const char *backend, double vcpu, double ram_gib, const char *gpu,
                     double seconds, int64_t *pusd, sbx_error **error)
{
    sbx_error *err = NULL;
    sbx_rate rate;

    if (pusd)
        *pusd = 0;
    if (!pusd || !isfinite(seconds)) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "cost_of_duration",
                      pusd ? "seconds %g is not a finite number" : "pusd is NULL", seconds);
        sbx_error_fill(err, backend, "cost_of_duration");
        sbx_error_propagate(error, err);
        return -1;
    }
    if (sbx_pricing_rate(backend, vcpu, ram_gib, gpu, &rate, &err) < 0) {
        sbx_error_fill(err, backend, "cost_of_duration");
        sbx_error_propagate(error, err);
        return -1;
    }
    if (sbx_rate_cost_checked(&rate, seconds, pusd) < 0) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "cost_of_duration",
                                     "the cost of %g seconds on backend \"%s\" does not fit "
                                     "an amount (about 9.2 million USD at most)",
                                     seconds, backend);
        sbx_error_add_contextf(e, "seconds", "%g", seconds);
        sbx_error_fill(err, backend, "cost_of_duration");
        sbx_error_propagate(error, err);
        *pusd = 0;
        return -1;
    }
    return 0;
}

SBX_EXPORT char *
sbx_pricing_get_entry(const char *backend, sbx_error **error)
{
    json_object *doc, *backends, *entry;
    sbx_error *err = NULL;
    char *out;

    if (!backend || !*backend) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "pricing", "backend is NULL or empty");
        sbx_error_propagate(error, err);
        return NULL;
    }
    doc = sbx_pricing_load(&err);
    if (!doc) {
        sbx_error_fill(err, backend, "pricing");
        sbx_error_propagate(error, err);
        return NULL;
    }
    json_object_object_get_ex(doc, "backends", &backends);
    if (!json_object_object_get_ex(backends, backend, &entry)) {
        sbx_set_error(&err, SBX_ERROR_NOT_FOUND, "pricing",
                      "no price for backend \"%s\" in the pricing table", backend);
        sbx_error_fill(err, backend, "pricing");
        sbx_error_propagate(error, err);
        json_object_put(doc);
        return NULL;
    }
    out = sbx_strdup(json_object_to_json_string_ext(entry, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(doc);
    if (!out) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, "pricing", "out of memory");
        sbx_error_propagate(error, err);
    }
    return out;
}

SBX_EXPORT char *
sbx_pricing_to_json(sbx_error **error)
{
    sbx_error *err = NULL;
    json_object *doc = sbx_pricing_load(&err);
    char *out;

    if (!doc) {
        sbx_error_fill(err, NULL, "pricing");
        sbx_error_propagate(error, err);
        return NULL;
    }
    out = sbx_strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(doc);
    if (!out) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, "pricing", "out of memory");
        sbx_error_propagate(error, err);
    }
    return out;
}
