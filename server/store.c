/*
 * server/store.c — engine choice, the connection pool and the schema
 * migrations of the control plane's store (server/store.h).
 *
 * The schema follows the reference's (schema_migrations, organizations,
 * api_keys, sandboxes with idempotency and the lifecycle timeline,
 * creation attempts, executions, usage_events, ledger_entries, the
 * lifecycle cost tables, and the tables of policies, provider health,
 * sessions, alerts, audit and retention that later endpoints fill), with
 * TEXT timestamps, decimals and JSON, so both engines run the same DDL.
 * Migrations are forward only, each applied once in version order inside
 * one transaction with its schema_migrations row.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store.h"
#include "util.h"

struct store {
    const store_vtable *vt;
    char *target;
    store_sync sync;
    pthread_mutex_t lock;
    pthread_cond_t freed;
    store_conn **idle;
    size_t nidle, cap;
    size_t open, max_open;        /* connections made and not closed; the cap */
    void *shared;                 /* the engine's shared state (shared_open) */
};

/* ---------------------------------------------------------------- migrations */

static const char *const migration_1 =
    "CREATE TABLE IF NOT EXISTS organizations ("
    " id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS api_keys ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL REFERENCES organizations(id),"
    " name TEXT NOT NULL, key_prefix TEXT NOT NULL, key_digest TEXT NOT NULL UNIQUE,"
    " scopes_json TEXT NOT NULL, created_at TEXT NOT NULL, last_used_at TEXT,"
    " expires_at TEXT, revoked_at TEXT);"
    "CREATE INDEX IF NOT EXISTS api_keys_org_created ON api_keys(organization_id, created_at);"
    "CREATE TABLE IF NOT EXISTS sandboxes ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL REFERENCES organizations(id),"
    " backend TEXT NOT NULL, status TEXT NOT NULL, config_json TEXT NOT NULL,"
    " created_at TEXT NOT NULL, destroyed_at TEXT, error TEXT,"
    " idempotency_key TEXT, request_fingerprint TEXT, provider_resource_id TEXT,"
    " latest_error_json TEXT, retry_status TEXT NOT NULL DEFAULT 'not_applicable',"
    " cleanup_status TEXT,"
    " requested_at TEXT, provisioning_at TEXT, running_at TEXT, stopping_at TEXT,"
    " terminated_at TEXT, failed_at TEXT, last_provider_observed_at TEXT,"
    " hourly_rate_usd TEXT NOT NULL DEFAULT '0', currency TEXT NOT NULL DEFAULT 'USD',"
    " pricing_source TEXT NOT NULL DEFAULT 'bundled',"
    " cost_state TEXT NOT NULL DEFAULT 'estimated',"
    " provider_missing INTEGER NOT NULL DEFAULT 0,"
    " creator_api_key_id TEXT, version INTEGER NOT NULL DEFAULT 1,"
    " expires_at TEXT, terminated_by_api_key_id TEXT, termination_reason TEXT,"
    " supervision_owner TEXT, supervision_claimed_at TEXT);"
    "CREATE UNIQUE INDEX IF NOT EXISTS sandboxes_org_idempotency"
    " ON sandboxes(organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS sandboxes_org_created ON sandboxes(organization_id, created_at);"
    "CREATE INDEX IF NOT EXISTS sandboxes_org_status"
    " ON sandboxes(organization_id, status, created_at);"
    "CREATE INDEX IF NOT EXISTS sandboxes_expiry ON sandboxes(expires_at, status);"
    "CREATE TABLE IF NOT EXISTS sandbox_creation_attempts ("
    " id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),"
    " attempt_number INTEGER NOT NULL, status TEXT NOT NULL, error_json TEXT,"
    " retry_status TEXT NOT NULL DEFAULT 'not_applicable', cleanup_status TEXT,"
    " provider_resource_id TEXT, started_at TEXT NOT NULL, completed_at TEXT,"
    " UNIQUE(sandbox_id, attempt_number));"
    "CREATE TABLE IF NOT EXISTS executions ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " request_id TEXT NOT NULL, status TEXT NOT NULL, response_json TEXT, error TEXT,"
    " created_at TEXT NOT NULL, completed_at TEXT,"
    " UNIQUE(organization_id, sandbox_id, request_id));"
    "CREATE INDEX IF NOT EXISTS executions_org_created ON executions(organization_id, created_at);"
    "CREATE TABLE IF NOT EXISTS usage_events ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " execution_id TEXT, request_id TEXT NOT NULL, metric TEXT NOT NULL,"
    " quantity TEXT NOT NULL, unit TEXT NOT NULL, provider_cost_usd TEXT NOT NULL,"
    " customer_cost_usd TEXT NOT NULL, created_at TEXT NOT NULL,"
    " UNIQUE(organization_id, sandbox_id, request_id, metric));"
    "CREATE INDEX IF NOT EXISTS usage_events_org_created ON usage_events(organization_id, created_at);"
    "CREATE TABLE IF NOT EXISTS ledger_entries ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " usage_event_id TEXT NOT NULL, kind TEXT NOT NULL, amount_usd TEXT NOT NULL,"
    " price_version TEXT NOT NULL, created_at TEXT NOT NULL,"
    " UNIQUE(usage_event_id, kind));"
    "CREATE INDEX IF NOT EXISTS ledger_entries_org_created ON ledger_entries(organization_id, created_at);"
    "CREATE TABLE IF NOT EXISTS lifecycle_costs ("
    " sandbox_id TEXT PRIMARY KEY, organization_id TEXT NOT NULL,"
    " billable_seconds TEXT NOT NULL, estimated_cost_usd TEXT NOT NULL,"
    " provider_reported_cost_usd TEXT, effective_cost_usd TEXT NOT NULL,"
    " customer_cost_usd TEXT NOT NULL, currency TEXT NOT NULL, pricing_source TEXT NOT NULL,"
    " cost_state TEXT NOT NULL, updated_at TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS lifecycle_ledger_entries ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " observation_id TEXT NOT NULL, billable_seconds_delta TEXT NOT NULL DEFAULT '0',"
    " provider_delta_usd TEXT NOT NULL, customer_delta_usd TEXT NOT NULL,"
    " cost_state TEXT NOT NULL, created_at TEXT NOT NULL,"
    " UNIQUE(sandbox_id, observation_id));"
    "CREATE INDEX IF NOT EXISTS lifecycle_ledger_org_created"
    " ON lifecycle_ledger_entries(organization_id, created_at);"
    "CREATE TABLE IF NOT EXISTS lifecycle_observations ("
    " sandbox_id TEXT NOT NULL, observation_id TEXT NOT NULL,"
    " PRIMARY KEY(sandbox_id, observation_id));"
    "CREATE TABLE IF NOT EXISTS provider_observations ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " observation_id TEXT NOT NULL, provider_resource_id TEXT, status TEXT NOT NULL,"
    " observed_at TEXT NOT NULL, provider_cost_usd TEXT, currency TEXT,"
    " missing INTEGER NOT NULL DEFAULT 0, UNIQUE(sandbox_id, observation_id));"
    "CREATE TABLE IF NOT EXISTS organization_policies ("
    " organization_id TEXT PRIMARY KEY, max_concurrent_sandboxes INTEGER,"
    " hourly_spend_limit_usd TEXT, daily_spend_limit_usd TEXT, allowed_backends_json TEXT,"
    " allowed_gpu_types_json TEXT, max_sandbox_lifetime_secs INTEGER,"
    " version INTEGER NOT NULL DEFAULT 1, updated_at TEXT, updated_by_api_key_id TEXT);"
    "CREATE TABLE IF NOT EXISTS policy_denials ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, api_key_id TEXT, policy TEXT NOT NULL,"
    " message TEXT NOT NULL, backend TEXT, gpu TEXT, requested_timeout_secs INTEGER,"
    " current_value TEXT, limit_value TEXT, created_at TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS provider_health ("
    " backend TEXT PRIMARY KEY, status TEXT NOT NULL, checked_at TEXT, message TEXT,"
    " checked_by_api_key_id TEXT);"
    "CREATE TABLE IF NOT EXISTS orphan_cleanups ("
    " backend TEXT NOT NULL, provider_resource_id TEXT NOT NULL, organization_id TEXT,"
    " status TEXT NOT NULL, observed_at TEXT, completed_at TEXT, claimed_at TEXT,"
    " claim_id TEXT, PRIMARY KEY(backend, provider_resource_id));"
    "CREATE TABLE IF NOT EXISTS web_sessions ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, api_key_id TEXT NOT NULL,"
    " token_digest TEXT NOT NULL UNIQUE, csrf_digest TEXT, created_at TEXT NOT NULL,"
    " last_used_at TEXT, expires_at TEXT NOT NULL, revoked_at TEXT);"
    "CREATE TABLE IF NOT EXISTS alert_configurations ("
    " organization_id TEXT PRIMARY KEY, budget_threshold_percent INTEGER,"
    " repeated_failures_count INTEGER, repeated_failures_window_minutes INTEGER NOT NULL DEFAULT 60,"
    " provider_degradation_enabled INTEGER NOT NULL DEFAULT 1, long_running_secs INTEGER,"
    " failed_cleanup_enabled INTEGER NOT NULL DEFAULT 1, version INTEGER NOT NULL DEFAULT 1,"
    " updated_at TEXT, updated_by_api_key_id TEXT);"
    "CREATE TABLE IF NOT EXISTS alert_events ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, alert_type TEXT NOT NULL,"
    " severity TEXT NOT NULL, message TEXT NOT NULL, resource_type TEXT, resource_id TEXT,"
    " dedupe_key TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE(organization_id, dedupe_key));"
    "CREATE INDEX IF NOT EXISTS alert_events_org_created ON alert_events(organization_id, created_at DESC);"
    "CREATE TABLE IF NOT EXISTS audit_log ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, api_key_id TEXT, session_id TEXT,"
    " action TEXT NOT NULL, resource_type TEXT, resource_id TEXT, outcome TEXT NOT NULL,"
    " details_json TEXT, created_at TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS audit_log_org_created ON audit_log(organization_id, created_at DESC);"
    "CREATE TABLE IF NOT EXISTS retention_policies ("
    " organization_id TEXT PRIMARY KEY, operational_days INTEGER NOT NULL DEFAULT 90,"
    " audit_days INTEGER NOT NULL DEFAULT 365, version INTEGER NOT NULL DEFAULT 1,"
    " updated_at TEXT, updated_by_api_key_id TEXT);";

/* 2: the sandbox's session state, sealed under a key derived from the
 * pepper (server/util.c), so a restarted server reattaches to it. */
static const char *const migration_2 =
    "ALTER TABLE sandboxes ADD COLUMN session_state_sealed TEXT;";

/* 3: an execute's rows touch fewer b-trees. executions, usage_events and
 * ledger_entries are keyed by the natural key their "once" rule already
 * named (the request id in its organisation and sandbox; the event's
 * kind), so that key is the table itself on SQLite (WITHOUT ROWID, written
 * by migration_sql()) and the only unique index on PostgreSQL; their `id`
 * columns stay (random, made once per row) without an index of their own,
 * no statement looking a row up by it. usage_events keeps its
 * (organization, created_at) index for an organisation's time windows;
 * executions and ledger_entries lose theirs, which no statement used (an
 * organisation's executions are listed per sandbox, on the key's prefix;
 * ledger entries are reached from their usage event). On SQLite an
 * execute wrote 19 WAL pages on average before (bench/README.md), 10
 * after. The rows are copied over as they are. */
static const char *const migration_3 =
    "CREATE TABLE executions_v3 ("
    " organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL, request_id TEXT NOT NULL,"
    " id TEXT NOT NULL, status TEXT NOT NULL, response_json TEXT, error TEXT,"
    " created_at TEXT NOT NULL, completed_at TEXT,"
    " PRIMARY KEY(organization_id, sandbox_id, request_id))@CLUSTERED@;"
    "INSERT INTO executions_v3(organization_id, sandbox_id, request_id, id, status,"
    " response_json, error, created_at, completed_at)"
    " SELECT organization_id, sandbox_id, request_id, id, status, response_json, error,"
    " created_at, completed_at FROM executions;"
    "DROP TABLE executions;"
    "ALTER TABLE executions_v3 RENAME TO executions;"
    "CREATE TABLE usage_events_v3 ("
    " organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL, request_id TEXT NOT NULL,"
    " metric TEXT NOT NULL, id TEXT NOT NULL, execution_id TEXT,"
    " quantity TEXT NOT NULL, unit TEXT NOT NULL, provider_cost_usd TEXT NOT NULL,"
    " customer_cost_usd TEXT NOT NULL, created_at TEXT NOT NULL,"
    " PRIMARY KEY(organization_id, sandbox_id, request_id, metric))@CLUSTERED@;"
    "INSERT INTO usage_events_v3(organization_id, sandbox_id, request_id, metric, id,"
    " execution_id, quantity, unit, provider_cost_usd, customer_cost_usd, created_at)"
    " SELECT organization_id, sandbox_id, request_id, metric, id, execution_id, quantity,"
    " unit, provider_cost_usd, customer_cost_usd, created_at FROM usage_events;"
    "DROP TABLE usage_events;"
    "ALTER TABLE usage_events_v3 RENAME TO usage_events;"
    "CREATE INDEX usage_events_org_created ON usage_events(organization_id, created_at);"
    "CREATE TABLE ledger_entries_v3 ("
    " usage_event_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,"
    " organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL, amount_usd TEXT NOT NULL,"
    " price_version TEXT NOT NULL, created_at TEXT NOT NULL,"
    " PRIMARY KEY(usage_event_id, kind))@CLUSTERED@;"
    "INSERT INTO ledger_entries_v3(usage_event_id, kind, id, organization_id, sandbox_id,"
    " amount_usd, price_version, created_at)"
    " SELECT usage_event_id, kind, id, organization_id, sandbox_id, amount_usd,"
    " price_version, created_at FROM ledger_entries;"
    "DROP TABLE ledger_entries;"
    "ALTER TABLE ledger_entries_v3 RENAME TO ledger_entries;";

/* 4: the execute's metering leaves its request (an outbox). The outcome's
 * transaction writes the execution's row alone, with what its usage event
 * will say (runtime_seconds and both costs, as answered) and
 * meter_pending = 1; the usage event and its two ledger entries are written
 * from that row after the answer, in a transaction that clears the flag
 * (server/meter.c, "The execution outbox"). The partial index holds only
 * the pending rows: what start-up recovery, the sweeper and a costs report
 * look up. Rows of earlier versions were metered with their outcome and
 * keep NULLs. */
static const char *const migration_4 =
    "ALTER TABLE executions ADD COLUMN runtime_seconds TEXT;"
    "ALTER TABLE executions ADD COLUMN provider_cost_usd TEXT;"
    "ALTER TABLE executions ADD COLUMN customer_cost_usd TEXT;"
    "ALTER TABLE executions ADD COLUMN meter_pending INTEGER;"
    "CREATE INDEX executions_meter_pending ON executions(meter_pending, organization_id)"
    " WHERE meter_pending = 1;";

/* 5: the outbox's rows, and the ledger's, are keyed by time first.
 *
 * The outbox is a table of its own, keyed by the completion time.
 * Version 4 marked a pending execution in its own row, so the pass that
 * metered it wrote that row's leaf of executions again (a leaf anywhere in
 * the table: the key holds the client's request id) as well as the partial
 * index's leaf; the outcome's transaction now inserts the execution's key
 * into execution_outbox, whose rows follow one another in time (the
 * right-most leaf: a pass's rows are on one or two leaves), and the pass
 * deletes them there, leaving executions as the outcome wrote it. Rows
 * still pending move over; the flag and its index go.
 *
 * ledger_entries was keyed by (usage_event_id, kind), the event's id a
 * random one, so each execution's two entries went to a leaf anywhere in
 * the table; its key is now (created_at, usage_event_id, kind): an entry's
 * created_at is its usage event's (the execution's completion time), the
 * same for every write of one event, so the key is as unique per event
 * and kind as before, and a pass's entries are appended together. The rows
 * are copied over as they are. */
static const char *const migration_5 =
    "CREATE TABLE execution_outbox ("
    " completed_at TEXT NOT NULL, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " request_id TEXT NOT NULL,"
    " PRIMARY KEY(completed_at, organization_id, sandbox_id, request_id))@CLUSTERED@;"
    "INSERT INTO execution_outbox(completed_at, organization_id, sandbox_id, request_id)"
    " SELECT completed_at, organization_id, sandbox_id, request_id FROM executions"
    " WHERE meter_pending = 1;"
    "DROP INDEX executions_meter_pending;"
    "ALTER TABLE executions DROP COLUMN meter_pending;"
    "CREATE TABLE ledger_entries_v5 ("
    " created_at TEXT NOT NULL, usage_event_id TEXT NOT NULL, kind TEXT NOT NULL,"
    " id TEXT NOT NULL, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " amount_usd TEXT NOT NULL, price_version TEXT NOT NULL,"
    " PRIMARY KEY(created_at, usage_event_id, kind))@CLUSTERED@;"
    "INSERT INTO ledger_entries_v5(created_at, usage_event_id, kind, id, organization_id,"
    " sandbox_id, amount_usd, price_version)"
    " SELECT created_at, usage_event_id, kind, id, organization_id, sandbox_id, amount_usd,"
    " price_version FROM ledger_entries;"
    "DROP TABLE ledger_entries;"
    "ALTER TABLE ledger_entries_v5 RENAME TO ledger_entries;";

/* 6: an execution's deadline, when its run must have answered (its
 * timeout, else its sandbox's expiry): a `running` row whose deadline
 * passed long ago (SBX_SERVER_EXECUTE_GRACE_SECS) was claimed by a server
 * that ended before it answered, and its next replay settles it as failed
 * with outcome unknown instead of answering "in progress" for ever. Rows
 * of before have none (their sandbox's expiry stands in). */
static const char *const migration_6 =
    "ALTER TABLE executions ADD COLUMN deadline_at TEXT;";

/* 7: the running executions, for the sweep that settles abandoned ones
 * (cp_settle_abandoned(), every SBX_SERVER_METER_SWEEP_SECS and at start):
 * a partial index holding only the rows whose status is `running` (those
 * in flight, and those a dead server left), so the sweep reads them
 * without a pass over every execution; a row leaves it when its outcome
 * is written. */
static const char *const migration_7 =
    "CREATE INDEX executions_running ON executions(deadline_at) WHERE status = 'running';";

static const char *const migrations[] = { NULL, migration_1, migration_2, migration_3,
                                          migration_4, migration_5, migration_6, migration_7 };
#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]) - 1)

int
store_schema_latest(void)
{
    return NMIGRATIONS;
}

/* @sql with each "@CLUSTERED@" made " WITHOUT ROWID" on SQLite (the
 * table is its primary key's b-tree: one b-tree less than a rowid table
 * with a unique index) and nothing on PostgreSQL (a heap with the key's
 * index). New string. */
static char *
migration_sql(const char *sql, int sqlite)
{
    static const char mark[] = "@CLUSTERED@", clause[] = " WITHOUT ROWID";
    size_t cap = strlen(sql) * 2 + 1, n = 0;
    char *out = malloc(cap);
    const char *p = sql, *m;

    if (!out)
        return NULL;
    while ((m = strstr(p, mark))) {
        memcpy(out + n, p, (size_t)(m - p));
        n += (size_t)(m - p);
        if (sqlite) {
            memcpy(out + n, clause, sizeof clause - 1);
            n += sizeof clause - 1;
        }
        p = m + sizeof mark - 1;
    }
    strcpy(out + n, p);
    return out;
}

static int
migrate(store *st, store_conn *c, char **err)
{
    const store_vtable *vt = st->vt;
    store_rows *rows = NULL;
    int have[NMIGRATIONS + 2] = { 0 };

    if (vt->begin(c, "schema", 0, err) < 0)
        return -1;
    if (vt->exec_script(c, "CREATE TABLE IF NOT EXISTS schema_migrations ("
                           " version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL);", err) < 0)
        goto fail;
    if (vt->query(c, "SELECT version FROM schema_migrations ORDER BY version", 0, NULL,
                  &rows, err) < 0)
        goto fail;
    for (size_t i = 0; i < rows->nrows; i++) {
        int v = atoi(rows->cells[i]);
        if (v > NMIGRATIONS) {
            if (err)
                *err = cp_printf("the database has schema version %d, newer than this "
                                 "sbx-server knows (%d)", v, NMIGRATIONS);
            goto fail;
        }
        if (v >= 1)
            have[v] = 1;
    }
    store_rows_free(rows);
    rows = NULL;
    for (int v = 1; v <= NMIGRATIONS; v++) {
        char ver[16], now[40];
        const char *p[2] = { ver, now };

        if (have[v])
            continue;
        {
            char *sql = migration_sql(migrations[v], vt == &store_sqlite_vtable);
            int rc = sql ? vt->exec_script(c, sql, err) : -1;

            if (!sql && err)
                *err = strdup("out of memory");
            free(sql);
            if (rc < 0)
                goto fail;
        }
        snprintf(ver, sizeof ver, "%d", v);
        cp_now_iso(now, sizeof now);
        if (vt->exec(c, "INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)",
                     2, p, NULL, err) < 0)
            goto fail;
    }
    return vt->commit(c, err);
fail:
    store_rows_free(rows);
    vt->rollback(c);
    return -1;
}

/* The connection URL as it may be shown: a password in its user part
 * ("postgresql://user:secret@host/db" → "postgresql://user:***@host/db")
 * or in its query ("?password=secret" → "?password=***") masked. */
static char *
redact_target(const char *target)
{
    const char *scheme = strstr(target, "://"), *at, *colon;
    char *shown, *q;

    if (!scheme)
        return strdup(target);
    at = strchr(scheme + 3, '@');
    colon = strchr(scheme + 3, ':');
    q = strchr(scheme + 3, '?');
    if (at && q && q < at)
        at = NULL;              /* an '@' of the query, not of the user part */
    shown = at && colon && colon < at ? cp_printf("%.*s:***%s", (int)(colon - target), target, at)
                                      : strdup(target);
    q = shown ? strchr(shown, '?') : NULL;
    if (q) {
        /* Each parameter copied, a password's value as "***" (3 bytes
         * more at most per parameter). */
        char *out = malloc(strlen(shown) * 4 + 1), *o;
        const char *p = q + 1;

        if (!out) {
            free(shown);
            return NULL;
        }
        o = out + (q + 1 - shown);
        memcpy(out, shown, (size_t)(q + 1 - shown));
        while (*p) {
            const char *end = strchr(p, '&');
            size_t len = end ? (size_t)(end - p) : strlen(p);

            if (len >= 9 && strncmp(p, "password=", 9) == 0) {
                memcpy(o, "password=***", 12);
                o += 12;
            } else {
                memcpy(o, p, len);
                o += len;
            }
            p += len;
            if (*p == '&')
                *o++ = *p++;
        }
        *o = '\0';
        free(shown);
        shown = out;
    }
    return shown;
}

store *
store_open(const char *target, store_sync sync, char **err)
{
    store *st;
    store_conn *c;
    char *why = NULL;

    if (!target || !*target) {
        if (err)
            *err = strdup("BESPOKE_CONTROL_PLANE_DB is empty");
        return NULL;
    }
    st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->vt = (!strncmp(target, "postgres://", 11) || !strncmp(target, "postgresql://", 13))
                 ? &store_pg_vtable : &store_sqlite_vtable;
    st->target = strdup(target);
    st->sync = sync;
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->freed, NULL);
    {
        const char *m = getenv("SBX_SERVER_DB_CONNECTIONS");
        long v = m ? strtol(m, NULL, 10) : 0;
        st->max_open = v > 0 ? (size_t)v : 16;
    }
    c = st->vt->connect(target, sync, NULL, &why);
    if (!c || migrate(st, c, &why) < 0) {
        char *shown = redact_target(target);
        if (err)
            *err = cp_printf("cannot open the %s store %s: %s", st->vt->name, shown,
                             why ? why : "unknown reason");
        free(shown);
        free(why);
        if (c)
            st->vt->close(c);
        store_close(st);
        return NULL;
    }
    /* The migrating connection knows no shared state: it is closed and
     * the pool's connections are made with it. */
    st->vt->close(c);
    if (st->vt->shared_open)
        st->shared = st->vt->shared_open(target, sync);
    return st;
}

void
store_close(store *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->nidle; i++)
        st->vt->close(st->idle[i]);
    if (st->shared)
        st->vt->shared_close(st->shared);
    free(st->idle);
    free(st->target);
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->freed);
    free(st);
}

const char *
store_engine(const store *st)
{
    return st->vt->name;
}

const store_vtable *
store_vt(const store *st)
{
    return st->vt;
}

store_conn *
store_acquire(store *st, char **err)
{
    store_conn *c = NULL;

    pthread_mutex_lock(&st->lock);
    /* A request holds one connection at a time, so waiting for one to come
     * back cannot deadlock. */
    while (!st->nidle && st->open >= st->max_open)
        pthread_cond_wait(&st->freed, &st->lock);
    if (st->nidle)
        c = st->idle[--st->nidle];
    else
        st->open++;
    pthread_mutex_unlock(&st->lock);
    if (c)
        return c;
    c = st->vt->connect(st->target, st->sync, st->shared, err);
    if (!c) {
        pthread_mutex_lock(&st->lock);
        st->open--;
        pthread_cond_signal(&st->freed);
        pthread_mutex_unlock(&st->lock);
    }
    return c;
}

void
store_release(store *st, store_conn *conn)
{
    if (!conn)
        return;
    if (st->vt->is_broken(conn)) {
        st->vt->close(conn);
        pthread_mutex_lock(&st->lock);
        st->open--;
        pthread_cond_signal(&st->freed);
        pthread_mutex_unlock(&st->lock);
        return;
    }
    pthread_mutex_lock(&st->lock);
    if (st->nidle == st->cap) {
        size_t ncap = st->cap ? st->cap * 2 : 8;
        store_conn **n = realloc(st->idle, ncap * sizeof *n);
        if (!n) {
            st->open--;
            pthread_cond_signal(&st->freed);
            pthread_mutex_unlock(&st->lock);
            st->vt->close(conn);
            return;
        }
        st->idle = n;
        st->cap = ncap;
    }
    st->idle[st->nidle++] = conn;
    pthread_cond_signal(&st->freed);
    pthread_mutex_unlock(&st->lock);
}

void
store_rows_free(store_rows *rows)
{
    if (!rows)
        return;
    free(rows->names);
    free(rows->cells);
    free(rows->text);
    free(rows);
}

const char *
store_cell(const store_rows *rows, size_t row, const char *name)
{
    if (!rows || row >= rows->nrows)
        return NULL;
    for (size_t i = 0; i < rows->ncols; i++)
        if (!strcmp(rows->names[i], name))
            return rows->cells[row * rows->ncols + i];
    return NULL;
}

int
store_schema_versions(store *st, int *out, int cap, char **err)
{
    store_conn *c = store_acquire(st, err);
    store_rows *rows = NULL;
    int n = 0;

    if (!c)
        return -1;
    if (st->vt->query(c, "SELECT version FROM schema_migrations ORDER BY version", 0, NULL,
                      &rows, err) < 0) {
        store_release(st, c);
        return -1;
    }
    for (size_t i = 0; i < rows->nrows && n < cap; i++)
        out[n++] = atoi(rows->cells[i]);
    store_rows_free(rows);
    store_release(st, c);
    return n;
}
