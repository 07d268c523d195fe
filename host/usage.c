/*
 * host/usage.c — the running usage of sandboxes and clients, and the
 * ledger of JSON lines (sbx.h, "Usage and the ledger").
 *
 * A sandbox counts its agent calls under its own lock and its lifetime
 * from sbx_usage_sandbox_start(); a client counts the calls of all its
 * sandboxes and the lifetimes that ended under usage_lock, and keeps the
 * sandboxes whose lifetime runs in a list (live) so that a reading adds
 * their lifetime so far. Lock order: a sandbox's lock, then its client's
 * usage_lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "internal.h"

/* The fields of sbx_usage past struct_size, added into @dst. */
static void
usage_add(sbx_usage *dst, const sbx_usage *src)
{
    /* Saturating: a malformed or enormous count read from a CLI can never
     * wrap a total round to a negative number. */
    dst->calls = sbx_sat_add(dst->calls, src->calls);
    dst->input_tokens = sbx_sat_add(dst->input_tokens, src->input_tokens);
    dst->output_tokens = sbx_sat_add(dst->output_tokens, src->output_tokens);
    dst->reasoning_tokens = sbx_sat_add(dst->reasoning_tokens, src->reasoning_tokens);
    dst->cache_read_tokens = sbx_sat_add(dst->cache_read_tokens, src->cache_read_tokens);
    dst->cache_write_tokens = sbx_sat_add(dst->cache_write_tokens, src->cache_write_tokens);
    dst->llm_cost_pusd = sbx_sat_add(dst->llm_cost_pusd, src->llm_cost_pusd);
    dst->llm_cost_unknown = sbx_sat_add(dst->llm_cost_unknown, src->llm_cost_unknown);
    dst->compute_seconds += src->compute_seconds;
    dst->compute_cost_pusd = sbx_sat_add(dst->compute_cost_pusd, src->compute_cost_pusd);
    dst->compute_cost_unknown = sbx_sat_add(dst->compute_cost_unknown,
                                            src->compute_cost_unknown);
    dst->sandboxes = sbx_sat_add(dst->sandboxes, src->sandboxes);
    dst->sandbox_seconds += src->sandbox_seconds;
    dst->sandbox_cost_pusd = sbx_sat_add(dst->sandbox_cost_pusd, src->sandbox_cost_pusd);
    dst->sandbox_cost_unknown = sbx_sat_add(dst->sandbox_cost_unknown,
                                            src->sandbox_cost_unknown);
}

/* Copies @src into the caller's @dst within dst->struct_size. */
static void
usage_copy_out(sbx_usage *dst, const sbx_usage *src)
{
    size_t n = dst->struct_size;

    if (n > sizeof(*src))
        n = sizeof(*src);
    if (n > sizeof(size_t))
        memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t),
               n - sizeof(size_t));
}

SBX_EXPORT int64_t
sbx_usage_total_tokens(const sbx_usage *usage)
{
    if (!usage)
        return 0;
    return sbx_sat_add(sbx_sat_add(sbx_sat_add(usage->input_tokens, usage->output_tokens),
                                   sbx_sat_add(usage->reasoning_tokens,
                                               usage->cache_read_tokens)),
                       usage->cache_write_tokens);
}

SBX_EXPORT int
sbx_usage_total_cost(const sbx_usage *usage, int64_t *pusd)
{
    int complete;

    if (!usage || !pusd)
        return -1;
    *pusd = usage->llm_cost_pusd;
    complete = usage->llm_cost_unknown == 0;
    if (usage->sandboxes > 0) {
        *pusd = sbx_sat_add(*pusd, usage->sandbox_cost_pusd);
        complete = complete && usage->sandbox_cost_unknown == 0;
    } else {
        *pusd = sbx_sat_add(*pusd, usage->compute_cost_pusd);
        complete = complete && usage->compute_cost_unknown == 0;
    }
    return complete;
}

/* Adds a money member: the exact decimal, or null when @known is 0. */
static void
add_money(json_object *o, const char *key, int64_t pusd, int known)
{
    json_object_object_add(o, key, known ? sbx_json_new_decimal(pusd, 12) : NULL);
}

static json_object *
seconds_json(double s)
{
    char buf[64];

    /* Microseconds: what the clock gives, printed without float noise. */
    sbx_decimal_format((int64_t)(s * 1e6 + 0.5), 6, buf, sizeof buf);
    return json_object_new_double_s(s, buf);
}

void
sbx_usage_add_tokens_json(json_object *o, const sbx_usage *u)
{
    json_object_object_add(o, "input_tokens", json_object_new_int64(u->input_tokens));
    json_object_object_add(o, "output_tokens", json_object_new_int64(u->output_tokens));
    json_object_object_add(o, "reasoning_tokens", json_object_new_int64(u->reasoning_tokens));
    json_object_object_add(o, "cache_read_tokens", json_object_new_int64(u->cache_read_tokens));
    json_object_object_add(o, "cache_write_tokens",
                           json_object_new_int64(u->cache_write_tokens));
}

json_object *
sbx_usage_json(const sbx_usage *u)
{
    json_object *o = json_object_new_object();
    int single = u->calls <= 1 && u->sandboxes == 0;
    int64_t total;
    int complete;

    json_object_object_add(o, "calls", json_object_new_int64(u->calls));
    sbx_usage_add_tokens_json(o, u);
    json_object_object_add(o, "total_tokens", json_object_new_int64(sbx_usage_total_tokens(u)));
    add_money(o, "llm_cost_usd", u->llm_cost_pusd, !single || u->llm_cost_unknown == 0);
    json_object_object_add(o, "llm_cost_unknown", json_object_new_int64(u->llm_cost_unknown));
    json_object_object_add(o, "compute_seconds", seconds_json(u->compute_seconds));
    add_money(o, "compute_cost_usd", u->compute_cost_pusd,
              !single || u->compute_cost_unknown == 0);
    json_object_object_add(o, "compute_cost_unknown",
                           json_object_new_int64(u->compute_cost_unknown));
    json_object_object_add(o, "sandboxes", json_object_new_int64(u->sandboxes));
    json_object_object_add(o, "sandbox_seconds", seconds_json(u->sandbox_seconds));
    add_money(o, "sandbox_cost_usd", u->sandbox_cost_pusd, 1);
    json_object_object_add(o, "sandbox_cost_unknown",
                           json_object_new_int64(u->sandbox_cost_unknown));
    complete = sbx_usage_total_cost(u, &total);
    add_money(o, "total_cost_usd", total, complete == 1 || !single);
    return o;
}

SBX_EXPORT char *
sbx_usage_to_json(const sbx_usage *usage)
{
    sbx_usage u = SBX_USAGE_INIT;
    json_object *o;
    char *s;

    if (usage) {
        sbx_usage tmp = SBX_USAGE_INIT;

        /* Read within the caller's struct_size. */
        size_t n = usage->struct_size < sizeof(u) ? usage->struct_size : sizeof(u);
        memcpy(&tmp, usage, n);
        tmp.struct_size = sizeof(tmp);
        u = tmp;
    }
    o = sbx_usage_json(&u);
    s = sbx_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                  JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

/* ------------------------------------------------------------ the ledger */

/* "2026-01-02T03:04:05.123Z" */
static void
iso_now(char out[64])
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ts.tv_nsec / 1000000) % 1000);
}

/* Appends @record as one line to @client's ledger, when it has one. */
static void
ledger_write(sbx_client *client, json_object *record)
{
    char *path = NULL, now[64];
    const char *text;
    char *line;
    size_t len;
    int fd;

    pthread_mutex_lock(&client->usage_lock);
    path = sbx_strdup(client->ledger_path);
    pthread_mutex_unlock(&client->usage_lock);
    if (!path)
        return;
    iso_now(now);
    json_object_object_add(record, "time", json_object_new_string(now));
    text = json_object_to_json_string_ext(record, JSON_C_TO_STRING_PLAIN |
                                          JSON_C_TO_STRING_NOSLASHESCAPE);
    line = sbx_asprintf("%s\n", text);
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (!line || fd < 0) {
        sbx_log(SBX_LOG_WARNING, client->backend, "cannot write the ledger %s: %s", path,
                line ? strerror(errno) : "out of memory");
    } else {
        ssize_t n;

        len = strlen(line);
        do
            n = write(fd, line, len);
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)len)
            sbx_log(SBX_LOG_WARNING, client->backend, "cannot write the ledger %s: %s",
                    path, n < 0 ? strerror(errno) : "short write");
    }
    if (fd >= 0)
        close(fd);
    free(line);
    free(path);
}

SBX_EXPORT int
sbx_client_set_ledger(sbx_client *client, const char *path, sbx_error **error)
{
    sbx_error *err = NULL;
    char *copy = NULL;

    if (!client) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "set_ledger", "client is NULL");
        sbx_error_propagate(error, err);
        return -1;
    }
    if (path) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);

        if (fd < 0) {
            sbx_error *e = sbx_set_error(&err, SBX_ERROR_CONFIGURATION, "set_ledger",
                                         "cannot open the ledger %s: %s", path,
                                         strerror(errno));
            sbx_error_add_context(e, "path", path);
            sbx_error_fill(err, client->backend, "set_ledger");
            sbx_error_propagate(error, err);
            return -1;
        }
        close(fd);
        copy = strdup(path);
        if (!copy) {
            sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, "set_ledger", "out of memory");
            sbx_error_propagate(error, err);
            return -1;
        }
    }
    pthread_mutex_lock(&client->usage_lock);
    free(client->ledger_path);
    client->ledger_path = copy;
    pthread_mutex_unlock(&client->usage_lock);
    return 0;
}

/* ------------------------------------------------------------ lifetimes */

int
sbx_usage_client_init(sbx_client *client, sbx_error **error)
{
    const char *env = getenv("SBX_LEDGER");
    int fd;

    pthread_mutex_init(&client->usage_lock, NULL);
    client->usage.struct_size = sizeof(client->usage);
    client->ledger_path = NULL;
    if (!env || !*env)
        return 0;
    /* Opened now as sbx_client_set_ledger() does: a ledger that cannot be
     * written is said at once, not found missing after the run. */
    fd = open(env, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_CONFIGURATION, "client_new",
                                     "cannot open the ledger SBX_LEDGER names, %s: %s", env,
                                     strerror(errno));

        sbx_error_add_context(e, "SBX_LEDGER", env);
        pthread_mutex_destroy(&client->usage_lock);
        return -1;
    }
    close(fd);
    client->ledger_path = strdup(env);
    if (!client->ledger_path) {
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        pthread_mutex_destroy(&client->usage_lock);
        return -1;
    }
    return 0;
}

void
sbx_usage_client_free(sbx_client *client)
{
    pthread_mutex_destroy(&client->usage_lock);
    free(client->ledger_path);
}

void
sbx_usage_sandbox_start(sbx_sandbox *sandbox, double cpu, int64_t memory_mb, const char *gpu)
{
    sbx_client *client = sandbox->client;

    sandbox->cpu = cpu;
    sandbox->ram_gib = (double)memory_mb / 1024.0;
    sandbox->gpu = gpu && *gpu ? strdup(gpu) : NULL;
    sandbox->usage.struct_size = sizeof(sandbox->usage);
    sandbox->started_mono = sbx_monotonic_now();
    pthread_mutex_lock(&client->usage_lock);
    sandbox->live_next = client->live;
    sandbox->live_prev = NULL;
    if (client->live)
        client->live->live_prev = sandbox;
    client->live = sandbox;
    sandbox->usage_started = 1;
    pthread_mutex_unlock(&client->usage_lock);
}

void
sbx_usage_sandbox_live_price(sbx_sandbox *sandbox, json_object *doc)
{
    json_object *data = NULL, *price = NULL;
    int64_t pusd;

    if (!doc || !json_object_object_get_ex(doc, "data", &data) ||
        !json_object_object_get_ex(data, "price_usd_per_hour", &price) ||
        json_object_get_type(price) == json_type_string ||
        sbx_json_decimal(price, 12, &pusd) < 0 || pusd < 0)
        return;
    sandbox->live_pusd_per_hour = pusd;
    sandbox->live_price = 1;
}

/* The rate of @sandbox: the provider's live price when it reported one
 * (with the table entry's granularity and minimum when the table has the
 * backend), else the table's rate for its size. 1 when known. */
static int
sandbox_rate(const sbx_sandbox *sandbox, sbx_rate *rate)
{
    int known = sbx_pricing_rate(sandbox->client->backend, sandbox->cpu, sandbox->ram_gib,
                                 sandbox->gpu, rate, NULL) == 0;

    if (!sandbox->live_price)
        return known;
    if (!known) {
        /* The size has no table rate (a GPU type the table lacks): the
         * entry's granularity and minimum, when the backend has one. */
        if (sbx_pricing_rate(sandbox->client->backend, 0, 0, NULL, rate, NULL) < 0)
            memset(rate, 0, sizeof(*rate));
    }
    rate->pusd_per_hour = sandbox->live_pusd_per_hour;
    snprintf(rate->source, sizeof rate->source, "%s", "the provider's live price");
    return 1;
}

/* @sandbox's lifetime until @now into @u (sandboxes 1); @rate gets the
 * rate (0 when unknown). */
static int
lifetime(const sbx_sandbox *sandbox, double now, sbx_usage *u, sbx_rate *rate)
{
    double secs = now - sandbox->started_mono;
    int known;

    if (secs < 0)
        secs = 0;
    known = sandbox_rate(sandbox, rate);
    u->sandboxes = 1;
    u->sandbox_seconds = secs;
    if (known)
        u->sandbox_cost_pusd = sbx_rate_cost(rate, secs);
    else
        u->sandbox_cost_unknown = 1;
    return known;
}

/* The rate members of a record. */
static void
add_rate(json_object *o, const sbx_sandbox *sandbox, const sbx_rate *rate, int known)
{
    json_object_object_add(o, "vcpu", json_object_new_double(sandbox->cpu));
    json_object_object_add(o, "ram_gib", json_object_new_double(sandbox->ram_gib));
    json_object_object_add(o, "gpu", sandbox->gpu ? json_object_new_string(sandbox->gpu) : NULL);
    if (known) {
        char buf[64];
        int64_t f = sbx_rate_fusd_per_second(rate);

        /* Exact for rates published per second; 15 decimals, rounded, for
         * a rate per hour that is no finite decimal per second. */
        sbx_decimal_format(f, 15, buf, sizeof buf);
        json_object_object_add(o, "rate_usd_per_s",
                               json_object_new_double_s((double)f / 1e15, buf));
        json_object_object_add(o, "rate_source",
                               json_object_new_string(rate->source[0] ? rate->source
                                                                      : rate->origin));
    } else {
        json_object_object_add(o, "rate_usd_per_s", NULL);
        json_object_object_add(o, "rate_source", NULL);
    }
}

void
sbx_usage_sandbox_end(sbx_sandbox *sandbox, int destroyed)
{
    sbx_client *client = sandbox->client;
    sbx_usage life = SBX_USAGE_INIT, calls;
    json_object *rec;
    sbx_rate rate;
    int known;

    pthread_mutex_lock(&sandbox->lock);
    if (!sandbox->usage_started || sandbox->usage_ended) {
        pthread_mutex_unlock(&sandbox->lock);
        return;
    }
    sandbox->usage_ended = 1;
    known = lifetime(sandbox, sbx_monotonic_now(), &life, &rate);
    sandbox->usage.sandboxes = life.sandboxes;
    sandbox->usage.sandbox_seconds = life.sandbox_seconds;
    sandbox->usage.sandbox_cost_pusd = life.sandbox_cost_pusd;
    sandbox->usage.sandbox_cost_unknown = life.sandbox_cost_unknown;
    calls = sandbox->usage;
    pthread_mutex_lock(&client->usage_lock);
    usage_add(&client->usage, &life);
    if (sandbox->live_prev)
        sandbox->live_prev->live_next = sandbox->live_next;
    else if (client->live == sandbox)
        client->live = sandbox->live_next;
    if (sandbox->live_next)
        sandbox->live_next->live_prev = sandbox->live_prev;
    sandbox->live_next = sandbox->live_prev = NULL;
    pthread_mutex_unlock(&client->usage_lock);
    pthread_mutex_unlock(&sandbox->lock);

    rec = json_object_new_object();
    json_object_object_add(rec, "kind", json_object_new_string("sandbox"));
    json_object_object_add(rec, "backend", json_object_new_string(client->backend));
    json_object_object_add(rec, "sandbox_id", json_object_new_string(sandbox->id));
    json_object_object_add(rec, "end", json_object_new_string(destroyed ? "destroyed"
                                                                        : "released"));
    add_rate(rec, sandbox, &rate, known);
    json_object_object_add(rec, "seconds", seconds_json(life.sandbox_seconds));
    json_object_object_add(rec, "billed_seconds",
                           known ? seconds_json(sbx_rate_billed_seconds(&rate,
                                                                        life.sandbox_seconds))
                                 : NULL);
    json_object_object_add(rec, "agent_calls", json_object_new_int64(calls.calls));
    sbx_usage_add_tokens_json(rec, &calls);
    add_money(rec, "llm_cost_usd", calls.llm_cost_pusd, 1);
    json_object_object_add(rec, "llm_cost_unknown_calls",
                           json_object_new_int64(calls.llm_cost_unknown));
    add_money(rec, "compute_cost_usd", life.sandbox_cost_pusd, known);
    ledger_write(client, rec);
    json_object_put(rec);
}

void
sbx_usage_sandbox_free(sbx_sandbox *sandbox)
{
    free(sandbox->gpu);
    sandbox->gpu = NULL;
}

void
sbx_usage_add_call(sbx_sandbox *sandbox, const sbx_usage *call, json_object *record)
{
    sbx_client *client = sandbox->client;

    pthread_mutex_lock(&sandbox->lock);
    usage_add(&sandbox->usage, call);
    pthread_mutex_lock(&client->usage_lock);
    usage_add(&client->usage, call);
    pthread_mutex_unlock(&client->usage_lock);
    pthread_mutex_unlock(&sandbox->lock);
    if (record)
        ledger_write(client, record);
}

int
sbx_usage_call_rate(const sbx_sandbox *sandbox, double seconds, sbx_usage *u,
                    json_object *record)
{
    sbx_rate rate;
    int known = sandbox_rate(sandbox, &rate);

    u->compute_seconds = seconds;
    if (known)
        u->compute_cost_pusd = sbx_rate_cost(&rate, seconds);
    else
        u->compute_cost_unknown = 1;
    if (record) {
        add_rate(record, sandbox, &rate, known);
        json_object_object_add(record, "seconds", seconds_json(seconds));
    }
    return known;
}

SBX_EXPORT int
sbx_sandbox_get_usage(sbx_sandbox *sandbox, sbx_usage *usage, sbx_error **error)
{
    sbx_usage u;
    sbx_error *err = NULL;

    if (!sandbox || !usage) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "get_usage", "%s is NULL",
                      sandbox ? "usage" : "sandbox");
        sbx_error_propagate(error, err);
        return -1;
    }
    pthread_mutex_lock(&sandbox->lock);
    u = sandbox->usage;
    if (sandbox->usage_started && !sandbox->usage_ended) {
        sbx_usage life = SBX_USAGE_INIT;
        sbx_rate rate;

        lifetime(sandbox, sbx_monotonic_now(), &life, &rate);
        usage_add(&u, &life);
    }
    pthread_mutex_unlock(&sandbox->lock);
    usage_copy_out(usage, &u);
    return 0;
}

SBX_EXPORT int
sbx_client_get_usage(sbx_client *client, sbx_usage *usage, sbx_error **error)
{
    sbx_usage u;
    sbx_error *err = NULL;
    double now = sbx_monotonic_now();

    if (!client || !usage) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "get_usage", "%s is NULL",
                      client ? "usage" : "client");
        sbx_error_propagate(error, err);
        return -1;
    }
    pthread_mutex_lock(&client->usage_lock);
    u = client->usage;
    for (sbx_sandbox *s = client->live; s; s = s->live_next) {
        sbx_usage life = SBX_USAGE_INIT;
        sbx_rate rate;

        lifetime(s, now, &life, &rate);
        usage_add(&u, &life);
    }
    pthread_mutex_unlock(&client->usage_lock);
    usage_copy_out(usage, &u);
    return 0;
}
