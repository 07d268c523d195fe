/*
 * server/store_pg.c — the PostgreSQL engine of the store (server/store.h),
 * through libpq.
 *
 * The target is a libpq connection URL (postgres:// or postgresql://).
 * Statements are the shared ones with `?` placeholders numbered $1..$n
 * here; parameters go as text with types inferred by the server. Each
 * statement is prepared once per connection (PQprepare, named s0, s1, ...
 * by the order they were first run) and then run by name, so the server
 * parses and plans it once: the server's statements are a fixed set.
 * Transactions run at READ COMMITTED; begin() takes
 * pg_advisory_xact_lock(hashtextextended(lock_name, 0)) in the round trip
 * of its BEGIN, so decisions on
 * one name serialise across every connection and every sbx-server
 * process sharing the database, and end with the transaction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "store.h"
#include "util.h"

/* Prepared statements kept per connection, by their `?` SQL text; beyond
 * this many, statements run unprepared. */
#define PG_STMT_CACHE 96

struct store_conn {
    PGconn *pg;
    int in_txn;
    char *prepared[PG_STMT_CACHE];  /* SQL text of statement "s<i>" */
    size_t nprepared;
};

static void
set_err(char **err, PGconn *pg, const char *what)
{
    if (err) {
        const char *m = pg ? PQerrorMessage(pg) : "out of memory";
        size_t n = strlen(m);
        while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
            n--;
        *err = cp_printf("%s: %.*s", what, (int)n, m);
    }
}

static store_conn *
pg_connect(const char *target, store_sync sync, void *shared, char **err)
{
    store_conn *c = calloc(1, sizeof *c);

    (void)sync;                   /* the PostgreSQL server's own durability */
    (void)shared;
    if (!c)
        return NULL;
    c->pg = PQconnectdb(target);
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK) {
        set_err(err, c->pg, "connect");
        PQfinish(c->pg);
        free(c);
        return NULL;
    }
    /* Notices (e.g. "relation already exists, skipping") stay quiet. */
    PQclear(PQexec(c->pg, "SET client_min_messages = warning"));
    return c;
}

static void
pg_close(store_conn *c)
{
    if (!c)
        return;
    PQfinish(c->pg);
    for (size_t i = 0; i < c->nprepared; i++)
        free(c->prepared[i]);
    free(c);
}

/* "a = ? AND b = ?" → "a = $1 AND b = $2" (statements never hold a `?`
 * inside a literal). */
static char *
number_params(const char *sql)
{
    size_t n = strlen(sql), k = 0, o = 0;
    char *out;
    int i = 0;

    for (size_t j = 0; j < n; j++)
        k += sql[j] == '?';
    out = malloc(n + k * 8 + 1);
    for (size_t j = 0; j < n; j++) {
        if (sql[j] == '?')
            o += (size_t)sprintf(out + o, "$%d", ++i);
        else
            out[o++] = sql[j];
    }
    out[o] = 0;
    return out;
}

static PGresult *
run(store_conn *c, const char *sql, size_t n, const char *const *p, char **err)
{
    char name[24], *q = NULL;
    PGresult *r;
    size_t i;

    for (i = 0; i < c->nprepared; i++)
        if (!strcmp(c->prepared[i], sql))
            break;
    if (i == c->nprepared && i < PG_STMT_CACHE) {
        q = number_params(sql);
        snprintf(name, sizeof name, "s%zu", i);
        r = PQprepare(c->pg, name, q, (int)n, NULL);
        if (!r) {
            free(q);
            set_err(err, c->pg, "prepare");
            return NULL;
        }
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            free(q);
            return r;               /* the caller reports the error */
        }
        PQclear(r);
        c->prepared[c->nprepared++] = strdup(sql);
    }
    if (i < c->nprepared) {
        snprintf(name, sizeof name, "s%zu", i);
        r = PQexecPrepared(c->pg, name, (int)n, p, NULL, NULL, 0);
    } else {
        if (!q)
            q = number_params(sql);
        r = PQexecParams(c->pg, q, (int)n, NULL, p, NULL, NULL, 0);
    }
    free(q);
    if (!r) {
        set_err(err, c->pg, "query");
        return NULL;
    }
    return r;
}

static int
pg_script(store_conn *c, const char *sql, char **err)
{
    PGresult *r = PQexec(c->pg, sql);
    int ok = r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);

    if (!ok)
        set_err(err, c->pg, "exec");
    PQclear(r);
    return ok ? 0 : -1;
}

/* BEGIN, the lock and (volatile) the commit mode in one simple query:
 * one round trip to the server instead of three. The lock name is sent as
 * a literal escaped by libpq (it holds ids from the request). */
static int
pg_begin(store_conn *c, const char *lock_name, unsigned flags, char **err)
{
    const char *name = lock_name ? lock_name : "";
    char *lit = PQescapeLiteral(c->pg, name, strlen(name)), *sql;
    int rc;

    if (!lit) {
        set_err(err, c->pg, "advisory lock");
        return -1;
    }
    sql = cp_printf("BEGIN; SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))%s", lit,
                    (flags & STORE_TXN_VOLATILE) ? "; SET LOCAL synchronous_commit TO off" : "");
    PQfreemem(lit);
    if (!sql) {
        set_err(err, NULL, "begin");
        return -1;
    }
    c->in_txn = 1;
    rc = pg_script(c, sql, err);
    free(sql);
    if (rc < 0) {
        pg_script(c, "ROLLBACK", NULL);
        c->in_txn = 0;
        return -1;
    }
    return 0;
}

static int
pg_commit(store_conn *c, char **err)
{
    int rc = pg_script(c, "COMMIT", err);

    c->in_txn = 0;
    return rc;
}

static void
pg_rollback(store_conn *c)
{
    if (c->in_txn || PQtransactionStatus(c->pg) != PQTRANS_IDLE)
        pg_script(c, "ROLLBACK", NULL);
    c->in_txn = 0;
}

static int64_t
pg_exec(store_conn *c, const char *sql, size_t n, const char *const *p, int *conflict,
        char **err)
{
    PGresult *r = run(c, sql, n, p, err);
    int64_t changed;

    if (conflict)
        *conflict = 0;
    if (!r)
        return -1;
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (conflict && state && !strcmp(state, "23505"))
            *conflict = 1;
        set_err(err, c->pg, "exec");
        PQclear(r);
        return -1;
    }
    changed = atoll(PQcmdTuples(r));
    PQclear(r);
    return changed;
}

static int
pg_query(store_conn *c, const char *sql, size_t n, const char *const *p, store_rows **out,
         char **err)
{
    PGresult *r = run(c, sql, n, p, err);
    store_rows *rows = NULL;
    size_t size = 0;
    char *at;

    *out = NULL;
    if (!r)
        return -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        set_err(err, c->pg, "query");
        PQclear(r);
        return -1;
    }
    rows = calloc(1, sizeof *rows);
    if (!rows)
        goto oom;
    rows->nrows = (size_t)PQntuples(r);
    rows->ncols = (size_t)PQnfields(r);
    rows->names = calloc(rows->ncols ? rows->ncols : 1, sizeof *rows->names);
    rows->cells = calloc(rows->nrows * rows->ncols + 1, sizeof *rows->cells);
    /* The names and values copied into one allocation (store.h). */
    for (size_t i = 0; i < rows->ncols; i++)
        size += strlen(PQfname(r, (int)i)) + 1;
    for (size_t y = 0; y < rows->nrows; y++)
        for (size_t x = 0; x < rows->ncols; x++)
            if (!PQgetisnull(r, (int)y, (int)x))
                size += (size_t)PQgetlength(r, (int)y, (int)x) + 1;
    rows->text = malloc(size ? size : 1);
    if (!rows->names || !rows->cells || !rows->text)
        goto oom;
    at = rows->text;
    for (size_t i = 0; i < rows->ncols; i++) {
        size_t len = strlen(PQfname(r, (int)i));
        rows->names[i] = memcpy(at, PQfname(r, (int)i), len + 1);
        at += len + 1;
    }
    for (size_t y = 0; y < rows->nrows; y++)
        for (size_t x = 0; x < rows->ncols; x++) {
            size_t len;
            if (PQgetisnull(r, (int)y, (int)x))
                continue;
            len = (size_t)PQgetlength(r, (int)y, (int)x);
            memcpy(at, PQgetvalue(r, (int)y, (int)x), len);
            at[len] = '\0';
            rows->cells[y * rows->ncols + x] = at;
            at += len + 1;
        }
    PQclear(r);
    *out = rows;
    return 0;
oom:
    if (err)
        *err = cp_printf("query: out of memory");
    PQclear(r);
    store_rows_free(rows);
    return -1;
}

static int
pg_is_broken(store_conn *c)
{
    if (PQstatus(c->pg) != CONNECTION_OK)
        return 1;
    pg_rollback(c);
    return PQstatus(c->pg) != CONNECTION_OK;
}

const store_vtable store_pg_vtable = {
    "postgresql", pg_connect, pg_close, pg_begin, pg_commit, pg_rollback,
    pg_exec, pg_query, pg_script, pg_is_broken, NULL, NULL,
};
