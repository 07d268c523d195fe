/*
 * server/store_sqlite.c — the SQLite engine of the store (server/store.h).
 *
 * One connection per pooled slot on the same file: WAL journal (readers
 * never block the writer), foreign keys on, a 30 s busy timeout (as the
 * reference's connect(timeout=30)); begin() is BEGIN IMMEDIATE, so every
 * decision takes the database's write lock at its start and decisions
 * never interleave, whatever their lock names.
 */
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store.h"
#include "util.h"

struct store_conn {
    sqlite3 *db;
};

static void
set_err(char **err, sqlite3 *db, const char *what)
{
    if (err)
        *err = cp_printf("%s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

static store_conn *
sq_connect(const char *target, char **err)
{
    store_conn *c = calloc(1, sizeof *c);
    char *msg = NULL;

    if (!c)
        return NULL;
    if (sqlite3_open_v2(target, &c->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        set_err(err, c->db, "sqlite3_open");
        sqlite3_close(c->db);
        free(c);
        return NULL;
    }
    sqlite3_busy_timeout(c->db, 30000);
    if (sqlite3_exec(c->db, "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON;"
                            " PRAGMA synchronous=NORMAL;", NULL, NULL, &msg) != SQLITE_OK) {
        if (err)
            *err = cp_printf("PRAGMA: %s", msg ? msg : "failed");
        sqlite3_free(msg);
        sqlite3_close(c->db);
        free(c);
        return NULL;
    }
    return c;
}

static void
sq_close(store_conn *c)
{
    if (!c)
        return;
    sqlite3_close(c->db);
    free(c);
}

static int
sq_script(store_conn *c, const char *sql, char **err)
{
    char *msg = NULL;

    if (sqlite3_exec(c->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        if (err)
            *err = cp_printf("%s", msg ? msg : sqlite3_errmsg(c->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int
sq_begin(store_conn *c, const char *lock_name, char **err)
{
    (void)lock_name;
    return sq_script(c, "BEGIN IMMEDIATE", err);
}

static int
sq_commit(store_conn *c, char **err)
{
    return sq_script(c, "COMMIT", err);
}

static void
sq_rollback(store_conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

static sqlite3_stmt *
prepare(store_conn *c, const char *sql, size_t n, const char *const *p, char **err)
{
    sqlite3_stmt *st = NULL;

    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK) {
        set_err(err, c->db, "prepare");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = p[i] ? sqlite3_bind_text(st, (int)i + 1, p[i], -1, SQLITE_TRANSIENT)
                      : sqlite3_bind_null(st, (int)i + 1);
        if (rc != SQLITE_OK) {
            set_err(err, c->db, "bind");
            sqlite3_finalize(st);
            return NULL;
        }
    }
    return st;
}

static int64_t
sq_exec(store_conn *c, const char *sql, size_t n, const char *const *p, int *conflict,
        char **err)
{
    sqlite3_stmt *st = prepare(c, sql, n, p, err);
    int rc;

    if (conflict)
        *conflict = 0;
    if (!st)
        return -1;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc != SQLITE_DONE) {
        if (conflict && sqlite3_extended_errcode(c->db) == SQLITE_CONSTRAINT_UNIQUE)
            *conflict = 1;
        if (conflict && sqlite3_extended_errcode(c->db) == SQLITE_CONSTRAINT_PRIMARYKEY)
            *conflict = 1;
        set_err(err, c->db, "step");
        sqlite3_finalize(st);
        return -1;
    }
    sqlite3_finalize(st);
    return sqlite3_changes(c->db);
}

static int
sq_query(store_conn *c, const char *sql, size_t n, const char *const *p, store_rows **out,
         char **err)
{
    sqlite3_stmt *st = prepare(c, sql, n, p, err);
    store_rows *r;
    size_t cap = 0;
    int rc;

    *out = NULL;
    if (!st)
        return -1;
    r = calloc(1, sizeof *r);
    r->ncols = (size_t)sqlite3_column_count(st);
    r->names = calloc(r->ncols ? r->ncols : 1, sizeof *r->names);
    for (size_t i = 0; i < r->ncols; i++)
        r->names[i] = strdup(sqlite3_column_name(st, (int)i));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->nrows == cap) {
            cap = cap ? cap * 2 : 16;
            r->cells = realloc(r->cells, cap * (r->ncols ? r->ncols : 1) * sizeof *r->cells);
        }
        for (size_t i = 0; i < r->ncols; i++) {
            const unsigned char *t = sqlite3_column_text(st, (int)i);
            r->cells[r->nrows * r->ncols + i] = t ? strdup((const char *)t) : NULL;
        }
        r->nrows++;
    }
    if (rc != SQLITE_DONE) {
        set_err(err, c->db, "step");
        sqlite3_finalize(st);
        store_rows_free(r);
        return -1;
    }
    sqlite3_finalize(st);
    *out = r;
    return 0;
}

static int
sq_is_broken(store_conn *c)
{
    /* A transaction left open by a failed path is ended here, so the next
     * user of the connection starts clean. */
    sq_rollback(c);
    return 0;
}

const store_vtable store_sqlite_vtable = {
    "sqlite", sq_connect, sq_close, sq_begin, sq_commit, sq_rollback,
    sq_exec, sq_query, sq_script, sq_is_broken,
};
