/*
 * server/store.h — the control plane's storage interface.
 *
 * sbx-server keeps organisations, API keys, sandboxes, executions, usage
 * and the ledgers in one SQL database behind this interface. Two
 * implementations sit behind the vtable below:
 *
 *   - SQLite (server/store_sqlite.c), the embedded default: a file path
 *     (BESPOKE_CONTROL_PLANE_DB, default ./bespoke-control-plane.db), WAL
 *     mode, foreign keys on, busy timeout 30 s;
 *   - PostgreSQL (server/store_pg.c, libpq), chosen by a connection URL
 *     starting postgres:// or postgresql://, so several sbx-server
 *     processes can share one database.
 *
 * The statements themselves are written once (server/api.c, auth.c, meter.c)
 * in the SQL both engines accept: `?` placeholders (the PostgreSQL side
 * numbers them $1..$n), TEXT for timestamps, decimals and JSON, INTEGER
 * for counters and 0/1 flags, `INSERT ... ON CONFLICT DO NOTHING` for
 * "insert once". Every parameter and every value read is text (NULL for
 * SQL NULL), as the reference's schema stores them.
 *
 * Transactions: every multi-step decision (the idempotency reservation and
 * the create's record, an execution's claim, a termination's version
 * check, a ledger write) runs between begin() and commit(). begin() takes
 * a lock name: SQLite takes its database-wide write lock (BEGIN
 * IMMEDIATE), PostgreSQL a transaction-scoped advisory lock on the name's
 * hash (pg_advisory_xact_lock), so two decisions on one name, in one or in
 * several server processes, never interleave, and decisions on different
 * names run in parallel. Unique constraints back every "once" rule on both
 * engines as well.
 *
 * Durability (BESPOKE_DB_SYNCHRONOUS, store_open()'s @sync): a commit is
 * in the database before commit() returns, so an answer the server gave (a
 * ledger entry, a sandbox record, a key) survives a crash of the server
 * process, a SIGKILL included. How it survives the machine:
 *
 *   - STORE_SYNC_NORMAL, the default: SQLite synchronous=NORMAL in WAL
 *     mode. A commit is written to the WAL without an fsync; the WAL is
 *     fsynced at each checkpoint. An operating-system crash or a power
 *     loss can lose the last commits (never corrupt the database).
 *   - STORE_SYNC_FULL (BESPOKE_DB_SYNCHRONOUS=full): synchronous=FULL, each
 *     commit fsyncs the WAL, so an answered commit survives a power loss
 *     too. The fsync costs about 200 us a commit on an ext4 virtual disk,
 *     as much as bench/cp_exec's whole target for an execute's added
 *     latency. In this mode a transaction begun with
 *     STORE_TXN_VOLATILE is still only written (synchronous=NORMAL for that
 *     transaction): it is for decisions that no answer acknowledges, an
 *     execution's claim, whose answer comes with the durable commit of its
 *     outcome.
 *
 * PostgreSQL keeps its server's own durability (synchronous_commit, on by
 * default) whatever @sync says; a STORE_TXN_VOLATILE transaction runs
 * with synchronous_commit off there.
 *
 * Threads: a connection is used by one thread at a time; the pool
 * (store_acquire/store_release) hands connections to request threads and
 * is thread-safe. It opens at most SBX_SERVER_DB_CONNECTIONS connections
 * (default 16; PostgreSQL's own default limit is 100 for all clients) and
 * makes a request wait for one when all are in use.
 */
#ifndef SBX_SERVER_STORE_H
#define SBX_SERVER_STORE_H

#include <stddef.h>
#include <stdint.h>

/* The rows of a query: @nrows × @ncols cells of text (NULL = SQL NULL),
 * row-major, with the column names. Owned by the caller: store_rows_free().
 * The names and values are NUL-terminated strings inside @text, one
 * allocation. */
typedef struct store_rows {
    size_t nrows, ncols;
    char **names;                 /* ncols column names */
    char **cells;                 /* nrows * ncols values */
    char *text;                   /* what names and cells point into */
} store_rows;

typedef struct store_conn store_conn;

/* begin() flags. */
#define STORE_TXN_VOLATILE 1u     /* not flushed at commit (see above) */

/* How commits reach the disk (see "Durability" above). */
typedef enum store_sync {
    STORE_SYNC_NORMAL = 0,        /* written at commit, fsynced at checkpoints */
    STORE_SYNC_FULL = 1,          /* fsynced at every commit */
} store_sync;

/* One engine. Each slot returns 0 / a value on success and -1 on failure
 * with a message (new string, free()) in *err when @err is not NULL. */
typedef struct store_vtable {
    const char *name;             /* "sqlite" or "postgresql" */
    /* Opens a connection to @target (a path or a URL) committing as @sync
     * says; @shared is what shared_open() returned for the store (NULL
     * when the engine has none). */
    store_conn *(*connect)(const char *target, store_sync sync, void *shared, char **err);
    void (*close)(store_conn *conn);
    /* Starts a transaction holding the lock @lock_name, durable unless
     * @flags has STORE_TXN_VOLATILE (see above). */
    int (*begin)(store_conn *conn, const char *lock_name, unsigned flags, char **err);
    int (*commit)(store_conn *conn, char **err);
    /* Never fails visibly; a connection left unusable is reopened by the
     * pool. */
    void (*rollback)(store_conn *conn);
    /* Runs @sql with @nparams text parameters; returns the number of rows
     * changed (0 for statements that change none), -1 on error. A unique
     * violation sets *@conflict to 1 when @conflict is not NULL. */
    int64_t (*exec)(store_conn *conn, const char *sql, size_t nparams,
                    const char *const *params, int *conflict, char **err);
    /* Runs a query; *@rows gets the result (store_rows_free()). */
    int (*query)(store_conn *conn, const char *sql, size_t nparams,
                 const char *const *params, store_rows **rows, char **err);
    /* Runs a script of several statements without parameters (DDL). */
    int (*exec_script)(store_conn *conn, const char *sql, char **err);
    /* 1 when the connection is broken and must not go back to the pool. */
    int (*is_broken)(store_conn *conn);
    /* Optional (NULL: none): the engine's state shared by a store's
     * connections, made once by store_open() after the migrations and
     * ended by store_close() after every connection is closed (SQLite: the
     * background checkpointer). NULL from shared_open() is not an error:
     * the connections then work on their own. */
    void *(*shared_open)(const char *target, store_sync sync);
    void (*shared_close)(void *shared);
} store_vtable;

extern const store_vtable store_sqlite_vtable;
extern const store_vtable store_pg_vtable;

/* A store: the engine, its target and a pool of connections. */
typedef struct store store;

/* Opens the store named by @target: a postgres:// or postgresql:// URL
 * selects PostgreSQL, anything else is an SQLite file path; every
 * connection commits as @sync says (see "Durability" above). Connects once
 * and applies the pending schema migrations (server/store.c) under the lock
 * "schema". NULL on failure with the reason in *@err (new string; it names
 * the target without a password). */
store *store_open(const char *target, store_sync sync, char **err);
/* Closes the pooled connections and then the engine's shared state (the
 * SQLite checkpointer, joined); every connection acquired must have been
 * released before. */
void store_close(store *st);
const char *store_engine(const store *st);

/* A pooled connection for the calling thread (NULL with *@err on failure);
 * give it back with store_release(). */
store_conn *store_acquire(store *st, char **err);
void store_release(store *st, store_conn *conn);
const store_vtable *store_vt(const store *st);

void store_rows_free(store_rows *rows);
/* The cell of row @row in the column named @name; NULL when the value is
 * NULL or the column does not exist. Borrowed. */
const char *store_cell(const store_rows *rows, size_t row, const char *name);

/* The applied schema versions, ascending, into @out (at most @cap); the
 * count, or -1. */
int store_schema_versions(store *st, int *out, int cap, char **err);

/* Migrations (server/store.c): the newest schema version. */
int store_schema_latest(void);

#endif
