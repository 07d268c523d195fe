/*
 * server/meter.c — pricing, usage, the ledgers and the costs report
 * (CONTROL-PLANE.md §5).
 *
 * Money is exact: amounts are int64 pico-dollars read and printed by
 * libsbx's money helpers (sbx_usd_parse, sbx_usd_format: decimal strings,
 * never binary floats); seconds are int64 microseconds printed the same
 * way. Rates come from libsbx's price table (sbx_cost_per_second over the
 * bundled pricing/pricing.json, or the operator's SBX_PRICING_FILE): the
 * rate of a sandbox is fixed at create as
 *   vCPU rate × cpu (default 1) + RAM-GiB rate × memory_mb (default 1024)/1024
 * per hour, and its pricing source is the table's "last_updated" date.
 *
 * Each execution writes one usage event (metric runtime_seconds, unit
 * second) and two ledger entries, provider_cost and customer_cost
 * (customer = provider × BESPOKE_CUSTOMER_MARKUP), unique per request id.
 *
 * The execution outbox: the execute's outcome transaction (server/api.c)
 * writes the executions row, carrying the amounts it answers
 * (runtime_seconds, provider_cost_usd, customer_cost_usd), and the
 * execution's key in execution_outbox (keyed by the completion time first,
 * so its rows are appended and a pass finds them together), and commits
 * before the answer. The usage event and its ledger entries are written
 * from that row after the answer, in one transaction (lock "meter") that
 * also deletes the outbox's row, by meter_settle(), which runs:
 *   - on the server's outbox thread, woken once such an answer is sent
 *     (server/http.c), 10 ms later (OUTBOX_GATHER_SECS) with the answers
 *     sent meanwhile, in transactions of up to 64 executions; and every
 *     SBX_SERVER_METER_SWEEP_SECS (default 30) as a sweeper: rows another
 *     server process on the same database left pending when it died (the
 *     same sweep settles the executions whose server died before it
 *     answered, cp_settle_abandoned(), server/api.c);
 *   - at start-up, before the server listens (a SIGKILLed server's rows);
 *   - at a clean stop, after the last request;
 *   - in GET /v1/costs for the organisation, before the report reads usage,
 *     so a report never misses an answered execution.
 * Every path is idempotent: the usage event is unique per request id, its
 * ledger entries are written only with a new event, and the outbox's row is
 * deleted in the same transaction. So each answered execution is metered
 * exactly once, by whichever server gets to its row first, with the time and
 * amounts of its answer (created_at = the execution's completed_at).
 * Each sandbox lifetime accrues at observations (create:, estimate:,
 * terminate:, terminate-failed:), each applied once: the billable seconds
 * since provisioning, never decreasing, priced at the fixed rate, with the
 * deltas written to lifecycle_ledger_entries split at UTC midnights and
 * the remainder in an <obs>:adjustment row. A sandbox whose rate is 0
 * bills only through usage events.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "util.h"

/* ---------------------------------------------------------------- decimals */

static int64_t
pow10i(int n)
{
    int64_t v = 1;

    while (n-- > 0)
        v *= 10;
    return v;
}

void
meter_fmt(int64_t v, int scale, char *buf, size_t cap)
{
    uint64_t mag, unit = (uint64_t)pow10i(scale), frac;
    int n;

    if (scale == 12) {
        /* Money: libsbx's exact formatter. */
        if (sbx_usd_format(v, buf, cap) < 0)
            snprintf(buf, cap, "0");
        return;
    }
    /* Seconds (scale 6): the same form, without the pico-dollar range
     * limit. */
    mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    frac = mag % unit;
    n = snprintf(buf, cap, "%s%llu", v < 0 ? "-" : "", (unsigned long long)(mag / unit));
    if (frac && n > 0 && (size_t)n < cap) {
        char f[24];
        int k = snprintf(f, sizeof f, "%0*llu", scale, (unsigned long long)frac);
        while (k > 0 && f[k - 1] == '0')
            f[--k] = 0;
        snprintf(buf + n, cap - (size_t)n, ".%s", f);
    }
}

int
meter_parse(const char *text, int scale, int64_t *out)
{
    int64_t p;
    const char *dot;
    char *end;
    long long whole;

    if (!text)
        return -1;
    if (scale == 12)
        return sbx_usd_parse(text, out, NULL);
    /* Seconds: "600", "0.25" (what meter_fmt writes). */
    whole = strtoll(text, &end, 10);
    if (end == text && *text != '.')
        return -1;
    p = (int64_t)whole * pow10i(scale);
    dot = end;
    if (*dot == '.') {
        int64_t unit = pow10i(scale - 1), f = 0;
        for (const char *c = dot + 1; *c >= '0' && *c <= '9'; c++, unit /= 10)
            f += (*c - '0') * unit;
        p += text[0] == '-' ? -f : f;
    }
    *out = p;
    return 0;
}

static int64_t
muldiv(int64_t a, int64_t b, int64_t d)
{
    __int128 n = (__int128)a * b;
    __int128 q = n / d, r = n % d;

    /* half away from zero */
    if (2 * (r < 0 ? -r : r) >= (d < 0 ? -d : d))
        q += ((n < 0) != (d < 0)) ? -1 : 1;
    return (int64_t)q;
}

int64_t
meter_customer(const cp_settings *set, int64_t pusd)
{
    return muldiv(pusd, set->markup_pusd, 1000000000000LL);
}

int64_t
meter_cost(int64_t rate_pusd_h, int64_t us)
{
    return muldiv(rate_pusd_h, us, 3600LL * 1000000LL);
}

/* ---------------------------------------------------------------- pricing */

static char price_version[32] = "bundled";

const char *
meter_price_version(void)
{
    static int loaded;

    if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) {
        char *doc = sbx_pricing_to_json(NULL);
        json_object *o = doc ? json_tokener_parse(doc) : NULL, *v;
        if (o && json_object_object_get_ex(o, "last_updated", &v) &&
            json_object_is_type(v, json_type_string))
            snprintf(price_version, sizeof price_version, "%s", json_object_get_string(v));
        json_object_put(o);
        free(doc);
        __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
    }
    return price_version;
}

int64_t
meter_hourly_rate(const char *backend, double cpu, int64_t memory_mb, const char *gpu)
{
    int64_t fusd = 0;

    if (sbx_cost_per_second(backend, cpu, (double)memory_mb / 1024.0, gpu, &fusd, NULL) < 0)
        return 0;
    /* femto-dollars per second × 3600 s / 1000 = pico-dollars per hour */
    return muldiv(fusd, 3600, 1000);
}

/* ---------------------------------------------------------------- usage */

/* One execution's usage event and its two ledger entries, from its
 * executions row (the amounts as answered, decimal text; @at its
 * completed_at, the first column of its outbox row's key), then that
 * execution_outbox row deleted: inside the caller's transaction. An event
 * already written (by another server's sweeper) is left as it is and its
 * entries are not written again. 0 or -1. */
static int
meter_execution(cx *x, const char *org, const char *sandbox_id, const char *execution_id,
                const char *request_id, const char *qty, const char *prov, const char *cust,
                const char *at)
{
    char *use = cp_new_id("use"), *l1 = cp_new_id("led"), *l2 = cp_new_id("led");
    int64_t n;
    int rc = -1;

    n = ex(x, "INSERT INTO usage_events(id, organization_id, sandbox_id, execution_id, request_id,"
              " metric, quantity, unit, provider_cost_usd, customer_cost_usd, created_at)"
              " VALUES (?, ?, ?, ?, ?, 'runtime_seconds', ?, 'second', ?, ?, ?)"
              " ON CONFLICT DO NOTHING",
           P(use, org, sandbox_id, execution_id, request_id, qty, prov, cust, at), NULL);
    if (n < 0)
        goto out;
    /* Both entries in one statement. */
    if (n > 0 &&
        ex(x, "INSERT INTO ledger_entries(id, organization_id, sandbox_id, usage_event_id, kind,"
              " amount_usd, price_version, created_at) VALUES (?, ?, ?, ?, 'provider_cost', ?, ?, ?),"
              " (?, ?, ?, ?, 'customer_cost', ?, ?, ?) ON CONFLICT DO NOTHING",
           P(l1, org, sandbox_id, use, prov, meter_price_version(), at,
             l2, org, sandbox_id, use, cust, meter_price_version(), at), NULL) < 0)
        goto out;
    if (ex(x, "DELETE FROM execution_outbox WHERE completed_at = ? AND organization_id = ?"
              " AND sandbox_id = ? AND request_id = ?",
           P(at, org, sandbox_id, request_id), NULL) < 0)
        goto out;
    rc = 0;
out:
    free(use);
    free(l1);
    free(l2);
    return rc;
}

int
meter_outbox_add(cx *x, const char *completed_at, const char *org, const char *sandbox_id,
                 const char *request_id)
{
    return ex(x, "INSERT INTO execution_outbox(completed_at, organization_id, sandbox_id,"
                 " request_id) VALUES (?, ?, ?, ?)",
              P(completed_at, org, sandbox_id, request_id), NULL) < 0 ? -1 : 0;
}

/* meter_settle()'s read: the pending executions with their amounts, oldest
 * first, a transaction's worth; with " WHERE o.organization_id = ?" between
 * the two parts for one organisation's. Two statements (each prepared once
 * per connection) of one text rather than one with an optional filter
 * ("? IS NULL OR ..."): each keeps the plan made for it (PostgreSQL's
 * generic plan of the optional filter is the filtered one's, for both). */
#define OUTBOX_SELECT                                                                      \
    "SELECT o.organization_id, o.sandbox_id, o.request_id, e.id, e.runtime_seconds,"       \
    " e.provider_cost_usd, e.customer_cost_usd, o.completed_at FROM execution_outbox o"    \
    " JOIN executions e ON e.organization_id = o.organization_id"                          \
    " AND e.sandbox_id = o.sandbox_id AND e.request_id = o.request_id"
#define OUTBOX_ORDER " ORDER BY o.completed_at LIMIT 64"

int
meter_settle(cx *x, const char *org)
{
    int total = 0;

    for (;;) {
        store_rows *r;
        size_t n;

        /* Volatile: the pending row it reads was committed as the outcome
         * was (durably at BESPOKE_DB_SYNCHRONOUS=full), so a lost commit
         * of this one leaves the row pending, and it is metered again. */
        if (tx_begin_volatile(x, "meter") < 0)
            return -1;
        if (org)
            r = q(x, OUTBOX_SELECT " WHERE o.organization_id = ?" OUTBOX_ORDER, P(org));
        else
            r = q(x, OUTBOX_SELECT OUTBOX_ORDER, 0, NULL);
        if (!r)
            goto fail;
        for (size_t i = 0; i < r->nrows; i++) {
            const char *const *c = (const char *const *)r->cells + i * r->ncols;

            /* Columns as selected; a pending row always has its amounts. */
            if (!c[4] || !c[5] || !c[6] || !c[7] ||
                meter_execution(x, c[0], c[1], c[3], c[2], c[4], c[5], c[6], c[7]) < 0) {
                if (!x->failed)
                    fprintf(stderr, "sbx-server: execution %s has no amounts to meter\n",
                            c[3] ? c[3] : "?");
                store_rows_free(r);
                goto fail;
            }
        }
        n = r->nrows;
        store_rows_free(r);
        if (tx_commit(x) < 0)
            return -1;
        total += (int)n;
        if (n < 64)
            return total;
    }
fail:
    tx_rollback(x);
    x->failed = 1;
    return -1;
}

/* ---------------------------------------------------------------- the execution outbox */

/* Seconds an outbox pass waits after its wake for more answers to join. */
#define OUTBOX_GATHER_SECS 0.01

struct cp_meter {
    cp_server *srv;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;          /* CLOCK_MONOTONIC */
    double sweep_secs;
    int want, stop;
};

/* One pass over every pending execution; failures are logged (the rows
 * stay pending for the next pass). */
static void
outbox_pass(cp_server *srv)
{
    cx x;

    cx_init(&x, srv);
    if (meter_settle(&x, NULL) < 0)
        fprintf(stderr, "sbx-server: metering of answered executions failed; "
                        "retried at the next answer or sweep\n");
    cx_done(&x);
}

void
meter_abandoned_pass(cp_server *srv)
{
    cx x;
    int n;

    cx_init(&x, srv);
    n = cp_settle_abandoned(&x);
    cx_done(&x);
    if (n < 0)
        fprintf(stderr, "sbx-server: settling abandoned executions failed; "
                        "retried at the next sweep\n");
    else if (n > 0)
        fprintf(stderr, "sbx-server: settled %d abandoned execution%s as failed\n", n,
                n == 1 ? "" : "s");
}

/* The monotonic time @secs from now. */
static struct timespec
mono_after(double secs)
{
    struct timespec at;

    clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_sec += (time_t)secs;
    at.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000L;
    }
    return at;
}

static void *
outbox_main(void *arg)
{
    cp_meter *m = arg;
    struct timespec at;
    /* The next sweep for abandoned executions: kept apart from the timed
     * wait, which answers put off while they keep coming. */
    double next_sweep = cp_mono() + m->sweep_secs;

    pthread_mutex_lock(&m->lock);
    for (;;) {
        at = mono_after(m->sweep_secs);
        while (!m->want && !m->stop)
            if (pthread_cond_timedwait(&m->wake, &m->lock, &at) == ETIMEDOUT)
                m->want = 1;      /* the sweep */
        /* The answers of the next OUTBOX_GATHER_SECS join this one's
         * pass: one transaction for them all, not one each beside the
         * requests that follow. */
        at = mono_after(OUTBOX_GATHER_SECS);
        while (!m->stop && pthread_cond_timedwait(&m->wake, &m->lock, &at) != ETIMEDOUT)
            ;
        if (m->stop)
            break;
        m->want = 0;
        pthread_mutex_unlock(&m->lock);
        outbox_pass(m->srv);
        if (cp_mono() >= next_sweep) {
            meter_abandoned_pass(m->srv);
            next_sweep = cp_mono() + m->sweep_secs;
        }
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    /* What the last answers left. */
    outbox_pass(m->srv);
    return NULL;
}

cp_meter *
meter_outbox_start(cp_server *srv, double sweep_secs)
{
    cp_meter *m = calloc(1, sizeof *m);
    pthread_condattr_t ca;

    if (!m)
        return NULL;
    m->srv = srv;
    m->sweep_secs = sweep_secs;
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&m->thread, NULL, outbox_main, m) != 0) {
        pthread_mutex_destroy(&m->lock);
        pthread_cond_destroy(&m->wake);
        free(m);
        return NULL;
    }
    return m;
}

void
meter_outbox_wake(cp_meter *m)
{
    pthread_mutex_lock(&m->lock);
    /* Only the first answer since the last pass wakes the thread: the
     * others join the pass it gathers (it waits OUTBOX_GATHER_SECS
     * whatever wakes it meanwhile), and a wake-up per answer took the
     * CPU from the client the answer was just sent to. */
    if (!m->want) {
        m->want = 1;
        pthread_cond_signal(&m->wake);
    }
    pthread_mutex_unlock(&m->lock);
}

void
meter_outbox_stop(cp_meter *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->stop = 1;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->lock);
    pthread_join(m->thread, NULL);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->wake);
    free(m);
}

/* ---------------------------------------------------------------- lifecycle */

static int64_t
parse_or(const char *text, int scale, int64_t dflt)
{
    int64_t v;

    return meter_parse(text, scale, &v) == 0 ? v : dflt;
}

static int
write_ledger_row(cx *x, const char *org, const char *sb, const char *obs, int64_t seconds_us,
                 int64_t prov, int64_t cust, const char *state, int64_t at_us)
{
    char s[40], p[40], c[40], at[40];
    char *id = cp_new_id("lcl");
    int64_t n;

    meter_fmt(seconds_us, 6, s, sizeof s);
    meter_fmt(prov, 12, p, sizeof p);
    meter_fmt(cust, 12, c, sizeof c);
    cp_iso(at_us, at, sizeof at);
    n = ex(x, "INSERT INTO lifecycle_ledger_entries(id, organization_id, sandbox_id,"
              " observation_id, billable_seconds_delta, provider_delta_usd, customer_delta_usd,"
              " cost_state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
           P(id, org, sb, obs, s, p, c, state, at), NULL);
    free(id);
    return n < 0 ? -1 : 0;
}

int
meter_accrue(cx *x, const char *sandbox_id, const char *obs, int64_t end_us)
{
    store_rows *s = NULL, *prev = NULL;
    int64_t rate, start_us, secs, prev_secs, prev_eff, prev_cust, eff, cust, dsec, dprov, dcust;
    int64_t n, seg_start, left_prov, left_cust;
    char lock[200], now[40], t1[40], t2[40], t3[40], rowid[300];
    const char *org;
    int i = 0;

    snprintf(lock, sizeof lock, "sandbox:%s", sandbox_id);
    if (tx_begin(x, lock) < 0)
        return -1;
    s = q(x, "SELECT organization_id, hourly_rate_usd, provisioning_at, created_at, cost_state,"
             " expires_at FROM sandboxes WHERE id = ?", P(sandbox_id));
    if (!s || !s->nrows)
        goto fail;
    /* A sandbox's lifetime ends at its expiry, whatever the record says
     * yet (the provider, or the supervisor on local, ended it then): no
     * observation bills past it. */
    {
        int64_t expires_us;
        const char *exp = store_cell(s, 0, "expires_at");

        if (exp && cp_parse_iso(exp, &expires_us) == 0 && end_us > expires_us)
            end_us = expires_us;
    }
    rate = parse_or(store_cell(s, 0, "hourly_rate_usd"), 12, 0);
    if (rate == 0) {
        /* Billed through usage events only. */
        store_rows_free(s);
        tx_rollback(x);
        return 0;
    }
    org = store_cell(s, 0, "organization_id");
    n = ex(x, "INSERT INTO lifecycle_observations(sandbox_id, observation_id) VALUES (?, ?)"
              " ON CONFLICT DO NOTHING", P(sandbox_id, obs), NULL);
    if (n < 0)
        goto fail;
    if (n == 0) {
        store_rows_free(s);
        tx_rollback(x);
        return 0;                  /* applied before */
    }
    if (cp_parse_iso(store_cell(s, 0, "provisioning_at") ? store_cell(s, 0, "provisioning_at")
                                                          : store_cell(s, 0, "created_at"),
                     &start_us) < 0)
        goto fail;
    prev = q(x, "SELECT billable_seconds, effective_cost_usd, customer_cost_usd"
                " FROM lifecycle_costs WHERE sandbox_id = ?", P(sandbox_id));
    if (!prev)
        goto fail;
    prev_secs = prev->nrows ? parse_or(store_cell(prev, 0, "billable_seconds"), 6, 0) : 0;
    prev_eff = prev->nrows ? parse_or(store_cell(prev, 0, "effective_cost_usd"), 12, 0) : 0;
    prev_cust = prev->nrows ? parse_or(store_cell(prev, 0, "customer_cost_usd"), 12, 0) : 0;
    secs = end_us - start_us;
    if (secs < prev_secs)
        secs = prev_secs;
    if (secs < 0)
        secs = 0;
    eff = meter_cost(rate, secs);
    cust = meter_customer(x->set, eff);
    dsec = secs - prev_secs;
    dprov = eff - prev_eff;
    dcust = cust - prev_cust;
    /* The interval [end - dsec, end], split at UTC midnights. */
    seg_start = end_us - dsec;
    left_prov = dprov;
    left_cust = dcust;
    while (seg_start < end_us) {
        int64_t day = 86400LL * 1000000LL;
        int64_t next = (seg_start / day + 1) * day, seg_end = next < end_us ? next : end_us;
        int64_t len = seg_end - seg_start;
        int64_t p = muldiv(dprov, len, dsec), c = muldiv(dcust, len, dsec);
        snprintf(rowid, sizeof rowid, "%s:time:%d", obs, i++);
        if (write_ledger_row(x, org, sandbox_id, rowid, len, p, c, "estimated", seg_start) < 0)
            goto fail;
        left_prov -= p;
        left_cust -= c;
        seg_start = seg_end;
    }
    if (left_prov || left_cust || dsec == 0) {
        snprintf(rowid, sizeof rowid, "%s:adjustment", obs);
        if (write_ledger_row(x, org, sandbox_id, rowid, 0, left_prov, left_cust, "estimated",
                             end_us) < 0)
            goto fail;
    }
    meter_fmt(secs, 6, t1, sizeof t1);
    meter_fmt(eff, 12, t2, sizeof t2);
    meter_fmt(cust, 12, t3, sizeof t3);
    cp_iso(end_us, now, sizeof now);
    if (ex(x, "DELETE FROM lifecycle_costs WHERE sandbox_id = ?", P(sandbox_id), NULL) < 0 ||
        ex(x, "INSERT INTO lifecycle_costs(sandbox_id, organization_id, billable_seconds,"
              " estimated_cost_usd, provider_reported_cost_usd, effective_cost_usd,"
              " customer_cost_usd, currency, pricing_source, cost_state, updated_at)"
              " VALUES (?, ?, ?, ?, NULL, ?, ?, 'USD', ?, 'estimated', ?)",
           P(sandbox_id, org, t1, t2, t2, t3, meter_price_version(), now), NULL) < 0)
        goto fail;
    store_rows_free(s);
    store_rows_free(prev);
    return tx_commit(x);
fail:
    store_rows_free(s);
    store_rows_free(prev);
    tx_rollback(x);
    return -1;
}

int
meter_accrue_active(cx *x, const char *org)
{
    store_rows *r = q(x, "SELECT id FROM sandboxes WHERE organization_id = ?"
                         " AND status IN ('creating', 'running', 'stopping')"
                         " AND cost_state = 'estimated' AND hourly_rate_usd <> '0'", P(org));
    int64_t now_us = cp_now_us();
    char now[40], obs[200];

    if (!r)
        return -1;
    cp_iso(now_us, now, sizeof now);
    for (size_t i = 0; i < r->nrows; i++) {
        snprintf(obs, sizeof obs, "estimate:%s:%s", r->cells[i], now);
        meter_accrue(x, r->cells[i], obs, now_us);
    }
    store_rows_free(r);
    return 0;
}

json_object *
meter_cost_json(cx *x, const char *sandbox_id)
{
    store_rows *r = q(x, "SELECT * FROM lifecycle_costs WHERE sandbox_id = ?", P(sandbox_id));
    json_object *o;
    static const char *const f[] = { "billable_seconds", "estimated_cost_usd",
                                     "provider_reported_cost_usd", "effective_cost_usd",
                                     "customer_cost_usd", "currency", "pricing_source",
                                     "cost_state", "updated_at" };

    if (!r || !r->nrows) {
        store_rows_free(r);
        return NULL;
    }
    o = json_object_new_object();
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const char *v = store_cell(r, 0, f[i]);
        json_object_object_add(o, f[i], v ? json_object_new_string(v) : NULL);
    }
    store_rows_free(r);
    return o;
}

/* ---------------------------------------------------------------- costs */

typedef struct bucket {
    char key[200];
    int64_t us, prov, cust;
} bucket;

typedef struct buckets {
    bucket *b;
    size_t n, cap;
} buckets;

static bucket *
bucket_of(buckets *bs, const char *key)
{
    for (size_t i = 0; i < bs->n; i++)
        if (!strcmp(bs->b[i].key, key))
            return &bs->b[i];
    if (bs->n == bs->cap) {
        bs->cap = bs->cap ? bs->cap * 2 : 16;
        bs->b = realloc(bs->b, bs->cap * sizeof *bs->b);
    }
    memset(&bs->b[bs->n], 0, sizeof bs->b[0]);
    snprintf(bs->b[bs->n].key, sizeof bs->b[0].key, "%s", key);
    return &bs->b[bs->n++];
}

static int
cmp_bucket(const void *a, const void *b)
{
    return strcmp(((const bucket *)a)->key, ((const bucket *)b)->key);
}

/* The report key of a row: its sandbox, that sandbox's backend, or the
 * UTC day of @created_at. */
static const char *
key_of(const char *group, const char *sandbox_id, const char *backend, const char *created_at,
       char *day)
{
    if (!strcmp(group, "sandbox"))
        return sandbox_id;
    if (!strcmp(group, "backend"))
        return backend ? backend : "";
    snprintf(day, 11, "%s", created_at);
    return day;
}

static int
window_arg(const cp_request *req, cp_response *res, const char *name, int64_t *out, int *have)
{
    const char *v = cp_query(req, name);
    json_object *jv;
    int rc;

    *have = 0;
    if (!v)
        return 0;
    jv = json_object_new_string(v);
    rc = parse_datetime_value(res, "query", name, jv, out);
    json_object_put(jv);
    if (rc < 0)
        return -1;
    *have = 1;
    return 0;
}

void
h_costs(cx *x, cp_request *req, cp_response *res)
{
    const char *group = cp_query(req, "group_by");
    int64_t start = 0, end = 0;
    int has_start, has_end, bad = 0;
    store_rows *sb = NULL, *ue = NULL, *ll = NULL;
    buckets bs = { 0 };
    json_object *out, *items;
    char day[16];

    if (!cp_require_scope(req, res, "usage:read"))
        return;
    if (!group)
        group = "sandbox";
    if (strcmp(group, "sandbox") && strcmp(group, "backend") && strcmp(group, "day")) {
        json_object *ctx = json_object_new_object(), *loc = json_object_new_array();
        json_object_array_add(loc, json_object_new_string("query"));
        json_object_array_add(loc, json_object_new_string("group_by"));
        json_object_object_add(ctx, "pattern", json_object_new_string("^(sandbox|backend|day)$"));
        reply_validation_at(res, "string_pattern_mismatch", loc,
                            "String should match pattern '^(sandbox|backend|day)$'",
                            json_object_new_string(group), ctx);
        bad = 1;
    }
    /* Every argument's error an item of the one 422 (FastAPI's order:
     * group_by, start, end). */
    bad |= window_arg(req, res, "start", &start, &has_start) < 0;
    bad |= window_arg(req, res, "end", &end, &has_end) < 0;
    if (bad)
        return;
    if (has_start && has_end && start >= end) {
        cp_reply_detail(res, 422, "start must be before end");
        return;
    }
    /* Read-your-writes: what the organisation's answered executions left
     * in the outbox is metered before the report reads the usage. */
    if (meter_settle(x, req->who.org_id) < 0) {
        reply_internal(res);
        return;
    }
    meter_accrue_active(x, req->who.org_id);
    x->failed = 0;
    sb = q(x, "SELECT s.id, s.backend, (SELECT COUNT(*) FROM lifecycle_costs c"
              " WHERE c.sandbox_id = s.id) AS has_lifecycle FROM sandboxes s"
              " WHERE s.organization_id = ?", P(req->who.org_id));
    ue = q(x, "SELECT sandbox_id, quantity, provider_cost_usd, customer_cost_usd, created_at"
              " FROM usage_events WHERE organization_id = ?", P(req->who.org_id));
    ll = q(x, "SELECT sandbox_id, billable_seconds_delta, provider_delta_usd, customer_delta_usd,"
              " created_at FROM lifecycle_ledger_entries WHERE organization_id = ?",
           P(req->who.org_id));
    if (!sb || !ue || !ll) {
        reply_internal(res);
        goto out;
    }
    /* (a) usage events of sandboxes without lifecycle costs. */
    for (size_t i = 0; i < ue->nrows; i++) {
        const char *sid = store_cell(ue, i, "sandbox_id"), *backend = NULL;
        const char *at = store_cell(ue, i, "created_at");
        int lifecycle = 0;
        int64_t t;
        bucket *b;
        for (size_t k = 0; k < sb->nrows; k++)
            if (!strcmp(store_cell(sb, k, "id"), sid)) {
                backend = store_cell(sb, k, "backend");
                lifecycle = atoi(store_cell(sb, k, "has_lifecycle")) > 0;
            }
        if (lifecycle || cp_parse_iso(at, &t) < 0)
            continue;
        if ((has_start && t < start) || (has_end && t >= end))
            continue;
        b = bucket_of(&bs, key_of(group, sid, backend, at, day));
        b->us += parse_or(store_cell(ue, i, "quantity"), 6, 0);
        b->prov += parse_or(store_cell(ue, i, "provider_cost_usd"), 12, 0);
        b->cust += parse_or(store_cell(ue, i, "customer_cost_usd"), 12, 0);
    }
    /* (b) lifecycle rows, each the interval [created_at, +seconds),
     * prorated by its overlap with the window. */
    for (size_t i = 0; i < ll->nrows; i++) {
        const char *sid = store_cell(ll, i, "sandbox_id"), *backend = NULL;
        const char *at = store_cell(ll, i, "created_at");
        int64_t t, len = parse_or(store_cell(ll, i, "billable_seconds_delta"), 6, 0);
        int64_t lo, hi, ov;
        int64_t p = parse_or(store_cell(ll, i, "provider_delta_usd"), 12, 0);
        int64_t c = parse_or(store_cell(ll, i, "customer_delta_usd"), 12, 0);
        bucket *b;
        if (cp_parse_iso(at, &t) < 0)
            continue;
        for (size_t k = 0; k < sb->nrows; k++)
            if (!strcmp(store_cell(sb, k, "id"), sid))
                backend = store_cell(sb, k, "backend");
        if (len == 0) {
            if ((has_start && t < start) || (has_end && t >= end))
                continue;
            ov = 0;
        } else {
            lo = has_start && start > t ? start : t;
            hi = has_end && end < t + len ? end : t + len;
            if (hi <= lo)
                continue;
            ov = hi - lo;
            if (ov != len) {
                p = muldiv(p, ov, len);
                c = muldiv(c, ov, len);
            }
        }
        b = bucket_of(&bs, key_of(group, sid, backend, at, day));
        b->us += ov;
        b->prov += p;
        b->cust += c;
    }
    if (bs.n)
        qsort(bs.b, bs.n, sizeof bs.b[0], cmp_bucket);
    out = json_object_new_object();
    items = json_object_new_array();
    for (size_t i = 0; i < bs.n; i++) {
        json_object *it = json_object_new_object();
        char t[40];
        json_object_object_add(it, "key", json_object_new_string(bs.b[i].key));
        meter_fmt(bs.b[i].us, 6, t, sizeof t);
        json_object_object_add(it, "runtime_seconds", json_object_new_string(t));
        meter_fmt(bs.b[i].prov, 12, t, sizeof t);
        json_object_object_add(it, "provider_cost_usd", json_object_new_string(t));
        meter_fmt(bs.b[i].cust, 12, t, sizeof t);
        json_object_object_add(it, "customer_cost_usd", json_object_new_string(t));
        json_object_array_add(items, it);
    }
    json_object_object_add(out, "group_by", json_object_new_string(group));
    json_object_object_add(out, "items", items);
    cp_reply_json(res, 200, out);
out:
    free(bs.b);
    store_rows_free(sb);
    store_rows_free(ue);
    store_rows_free(ll);
}
