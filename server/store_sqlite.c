/*
 * server/store_sqlite.c — the SQLite engine of the store (server/store.h).
 *
 * One connection per pooled slot on the same file: WAL journal (readers
 * never block the writer), foreign keys on, a 30 s busy timeout (as the
 * reference's connect(timeout=30)); begin() is BEGIN IMMEDIATE, so every
 * decision takes the database's write lock at its start and decisions
 * never interleave, whatever their lock names. synchronous is NORMAL
 * (STORE_SYNC_NORMAL: a commit is written to the WAL, which is fsynced at
 * checkpoints) or FULL (STORE_SYNC_FULL: each commit fsyncs the WAL); at
 * FULL a STORE_TXN_VOLATILE transaction runs at NORMAL and sets FULL back
 * at its end.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include <sqlite3.h>

#include "store.h"
#include "util.h"

/* Prepared statements kept per connection, by their SQL text (found by its
 * hash first): the server's statements are a fixed set, so each is
 * compiled once per connection. */
#define STMT_CACHE 64

/* Write transactions of this process take this lock before BEGIN IMMEDIATE:
 * they queue here, woken at once, instead of in SQLite's busy handler,
 * which sleeps in steps of up to 100 ms. Other processes on the same file
 * still meet at SQLite's own lock (the busy timeout). */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* WAL frames that wake the checkpointer: SQLite's default autocheckpoint
 * threshold (SQLITE_DEFAULT_WAL_AUTOCHECKPOINT). */
#define CHECKPOINT_FRAMES 1000
/* WAL frames past which the checkpointer is behind (a busy machine has not
 * given its thread a CPU since it was woken): the committing connection
 * then checkpoints itself, as SQLite's own autocheckpoint would, so the WAL
 * stays bounded whatever the load. */
#define CHECKPOINT_BEHIND_FRAMES 1500

/* The store's background checkpointer (shared_open()). */
typedef struct sq_shared {
    sqlite3 *db;                  /* the checkpointer's own connection */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int want;                     /* a checkpoint was asked for */
    int stop;
} sq_shared;

struct store_conn {
    sqlite3 *db;
    int holds_write_lock;
    int full;                     /* synchronous=FULL (STORE_SYNC_FULL) */
    int volatile_txn;             /* at FULL: synchronous=NORMAL until the end */
    struct {
        uint64_t hash;            /* sql_hash() of sql */
        char *sql;
        sqlite3_stmt *stmt;
    } cache[STMT_CACHE];
    size_t ncache;
};

static void
set_err(char **err, sqlite3 *db, const char *what)
{
    if (err)
        *err = cp_printf("%s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

/* The WAL hook of pooled connections (sqlite3_wal_hook(), called after
 * each commit with the WAL's size in frames): wakes the checkpointer, or,
 * when it is behind, checkpoints on the committing connection (PASSIVE, as
 * SQLite's default hook does; a failure is retried at the next commit). */
static int
wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    sq_shared *sh = arg;

    if (frames >= CHECKPOINT_BEHIND_FRAMES) {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    } else if (frames >= CHECKPOINT_FRAMES) {
        pthread_mutex_lock(&sh->lock);
        sh->want = 1;
        pthread_cond_signal(&sh->wake);
        pthread_mutex_unlock(&sh->lock);
    }
    return SQLITE_OK;
}

static void *
checkpointer(void *arg)
{
    sq_shared *sh = arg;

    pthread_mutex_lock(&sh->lock);
    for (;;) {
        while (!sh->want && !sh->stop)
            pthread_cond_wait(&sh->wake, &sh->lock);
        if (sh->stop)
            break;
        sh->want = 0;
        pthread_mutex_unlock(&sh->lock);
        /* PASSIVE: copies what no reader still needs, waiting for no one;
         * a failure (busy, I/O) is retried at the next wake. */
        sqlite3_wal_checkpoint_v2(sh->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&sh->lock);
    }
    pthread_mutex_unlock(&sh->lock);
    return NULL;
}

static void *
sq_shared_open(const char *target, store_sync sync)
{
    sq_shared *sh = calloc(1, sizeof *sh);

    if (!sh)
        return NULL;
    if (sqlite3_open_v2(target, &sh->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK ||
        sqlite3_exec(sh->db, sync == STORE_SYNC_FULL ? "PRAGMA synchronous=FULL"
                                                     : "PRAGMA synchronous=NORMAL",
                     NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_wal_autocheckpoint(sh->db, 0);
    pthread_mutex_init(&sh->lock, NULL);
    pthread_cond_init(&sh->wake, NULL);
    if (pthread_create(&sh->thread, NULL, checkpointer, sh) != 0) {
        pthread_mutex_destroy(&sh->lock);
        pthread_cond_destroy(&sh->wake);
        goto fail;
    }
    return sh;
fail:
    sqlite3_close(sh->db);
    free(sh);
    return NULL;
}

static void
sq_shared_close(void *arg)
{
    sq_shared *sh = arg;

    pthread_mutex_lock(&sh->lock);
    sh->stop = 1;
    pthread_cond_signal(&sh->wake);
    pthread_mutex_unlock(&sh->lock);
    pthread_join(sh->thread, NULL);
    sqlite3_close(sh->db);         /* the last connection: checkpoints the WAL */
    pthread_mutex_destroy(&sh->lock);
    pthread_cond_destroy(&sh->wake);
    free(sh);
}

static store_conn *
sq_connect(const char *target, store_sync sync, void *shared, char **err)
{
    store_conn *c = calloc(1, sizeof *c);
    char *msg = NULL;
    int rc;

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
    c->full = sync == STORE_SYNC_FULL;
    /* SQLite answers a switch of a fresh file to WAL that races another
     * connection's (servers started at once on a new database) with
     * SQLITE_BUSY at once, without the busy handler (its deadlock
     * avoidance): retried here for as long as the busy timeout. */
    for (int waited_ms = 0;; waited_ms += 2) {
        rc = sqlite3_exec(c->db, c->full ? "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON;"
                                           " PRAGMA synchronous=FULL;"
                                         : "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON;"
                                           " PRAGMA synchronous=NORMAL;",
                          NULL, NULL, &msg);
        if (rc != SQLITE_BUSY || waited_ms >= 30000)
            break;
        sqlite3_free(msg);
        msg = NULL;
        usleep(2000);
    }
    if (rc != SQLITE_OK) {
        if (err)
            *err = cp_printf("PRAGMA: %s", msg ? msg : "failed");
        sqlite3_free(msg);
        sqlite3_close(c->db);
        free(c);
        return NULL;
    }
    /* Replaces SQLite's autocheckpoint: the store's checkpointer runs
     * them (see the top of this file). */
    if (shared)
        sqlite3_wal_hook(c->db, wal_hook, shared);
    return c;
}

static void
sq_close(store_conn *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->ncache; i++) {
        sqlite3_finalize(c->cache[i].stmt);
        free(c->cache[i].sql);
    }
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

static sqlite3_stmt *prepare(store_conn *c, const char *sql, size_t n, const char *const *p,
                             char **err);
static void release(store_conn *c, sqlite3_stmt *st);

/* Runs @sql (no parameters, no rows) through the statement cache: BEGIN
 * IMMEDIATE and COMMIT run twice per execute, compiled once. */
static int
sq_cached(store_conn *c, const char *sql, char **err)
{
    sqlite3_stmt *st = prepare(c, sql, 0, NULL, err);
    int rc;

    if (!st)
        return -1;
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        set_err(err, c->db, sql);
        release(c, st);
        return -1;
    }
    release(c, st);
    return 0;
}

/* Sets synchronous back to FULL after a volatile transaction. */
static void
end_volatile(store_conn *c)
{
    if (c->volatile_txn) {
        c->volatile_txn = 0;
        sqlite3_exec(c->db, "PRAGMA synchronous=FULL", NULL, NULL, NULL);
    }
}

static int
sq_begin(store_conn *c, const char *lock_name, unsigned flags, char **err)
{
    (void)lock_name;
    if ((flags & STORE_TXN_VOLATILE) && c->full && !c->volatile_txn) {
        if (sq_script(c, "PRAGMA synchronous=NORMAL", err) < 0)
            return -1;
        c->volatile_txn = 1;
    }
    pthread_mutex_lock(&write_lock);
    c->holds_write_lock = 1;
    if (sq_cached(c, "BEGIN IMMEDIATE", err) < 0) {
        c->holds_write_lock = 0;
        pthread_mutex_unlock(&write_lock);
        end_volatile(c);
        return -1;
    }
    return 0;
}

static void
drop_write_lock(store_conn *c)
{
    end_volatile(c);
    if (c->holds_write_lock) {
        c->holds_write_lock = 0;
        pthread_mutex_unlock(&write_lock);
    }
}

static int
sq_commit(store_conn *c, char **err)
{
    int rc = sq_cached(c, "COMMIT", err);

    if (rc < 0 && !sqlite3_get_autocommit(c->db))
        return rc;                 /* still open: the caller rolls back */
    drop_write_lock(c);
    return rc;
}

static void
sq_rollback(store_conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    drop_write_lock(c);
}

/* Ends the use of @st: reset for its next use when cached, else finalized. */
static void
release(store_conn *c, sqlite3_stmt *st)
{
    for (size_t i = 0; i < c->ncache; i++)
        if (c->cache[i].stmt == st) {
            sqlite3_reset(st);
            sqlite3_clear_bindings(st);
            return;
        }
    sqlite3_finalize(st);
}

/* FNV-1a of @sql: the cache compares it before the text (many of the
 * server's statements share their first hundreds of characters). */
static uint64_t
sql_hash(const char *sql)
{
    uint64_t h = 14695981039346656037ULL;

    for (const unsigned char *q = (const unsigned char *)sql; *q; q++)
        h = (h ^ *q) * 1099511628211ULL;
    return h;
}

/* The statement for @sql, from the cache or compiled now, with @p bound.
 * The values are bound without a copy (SQLITE_STATIC): every caller steps
 * the statement and release()s it, which clears the bindings, while @p is
 * still its caller's. */
static sqlite3_stmt *
prepare(store_conn *c, const char *sql, size_t n, const char *const *p, char **err)
{
    sqlite3_stmt *st = NULL;
    uint64_t h = sql_hash(sql);
    size_t i;

    for (i = 0; i < c->ncache; i++)
        if (c->cache[i].hash == h && !strcmp(c->cache[i].sql, sql)) {
            st = c->cache[i].stmt;
            break;
        }
    if (!st) {
        if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
            set_err(err, c->db, "prepare");
            return NULL;
        }
        if (c->ncache < STMT_CACHE && (c->cache[c->ncache].sql = strdup(sql))) {
            c->cache[c->ncache].hash = h;
            c->cache[c->ncache].stmt = st;
            c->ncache++;
        }
    }
    for (size_t k = 0; k < n; k++) {
        int rc = p[k] ? sqlite3_bind_text(st, (int)k + 1, p[k], -1, SQLITE_STATIC)
                      : sqlite3_bind_null(st, (int)k + 1);
        if (rc != SQLITE_OK) {
            set_err(err, c->db, "bind");
            release(c, st);
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
        release(c, st);
        return -1;
    }
    release(c, st);
    return sqlite3_changes(c->db);
}

/* A query's names and values, copied one after another into one growing
 * allocation (what store_rows_free() frees as rows->text) instead of one
 * allocation each. While it grows, a name or cell holds its offset + 1 as
 * a pointer-sized integer; text_fix() makes them pointers at the end. */
typedef struct row_text {
    char *buf;
    size_t len, cap;
} row_text;

static int
text_put(row_text *t, const char *s, size_t n, char **slot)
{
    if (t->len + n + 1 > t->cap) {
        size_t ncap = (t->len + n + 1) * 2;
        char *b = realloc(t->buf, ncap < 1024 ? 1024 : ncap);
        if (!b)
            return -1;
        t->buf = b;
        t->cap = ncap < 1024 ? 1024 : ncap;
    }
    memcpy(t->buf + t->len, s, n);
    t->buf[t->len + n] = '\0';
    *slot = (char *)(uintptr_t)(t->len + 1);
    t->len += n + 1;
    return 0;
}

/* The offsets of @r made pointers into @t's allocation, which @r takes. */
static void
text_fix(row_text *t, store_rows *r)
{
    if (!r) {
        free(t->buf);
        return;
    }
    for (size_t i = 0; r->names && i < r->ncols; i++)
        if (r->names[i])
            r->names[i] = t->buf + ((uintptr_t)r->names[i] - 1);
    for (size_t i = 0; r->cells && i < r->nrows * r->ncols; i++)
        if (r->cells[i])
            r->cells[i] = t->buf + ((uintptr_t)r->cells[i] - 1);
    r->text = t->buf;
    t->buf = NULL;
}

static int
sq_query(store_conn *c, const char *sql, size_t n, const char *const *p, store_rows **out,
         char **err)
{
    sqlite3_stmt *st = prepare(c, sql, n, p, err);
    store_rows *r = NULL;
    row_text text = { NULL, 0, 0 };
    size_t cap = 0;
    int rc;

    *out = NULL;
    if (!st)
        return -1;
    r = calloc(1, sizeof *r);
    if (!r)
        goto oom;
    r->ncols = (size_t)sqlite3_column_count(st);
    r->names = calloc(r->ncols ? r->ncols : 1, sizeof *r->names);
    if (!r->names)
        goto oom;
    for (size_t i = 0; i < r->ncols; i++) {
        const char *name = sqlite3_column_name(st, (int)i);
        if (!name || text_put(&text, name, strlen(name), &r->names[i]) < 0)
            goto oom;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->nrows == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **cells = realloc(r->cells, ncap * (r->ncols ? r->ncols : 1) * sizeof *cells);
            if (!cells)
                goto oom;
            r->cells = cells;
            cap = ncap;
        }
        for (size_t i = 0; i < r->ncols; i++) {
            const unsigned char *t = sqlite3_column_text(st, (int)i);
            char **cell = &r->cells[r->nrows * r->ncols + i];
            *cell = NULL;
            if (t && text_put(&text, (const char *)t, (size_t)sqlite3_column_bytes(st, (int)i),
                              cell) < 0)
                goto oom;
        }
        r->nrows++;
    }
    if (rc != SQLITE_DONE) {
        set_err(err, c->db, "step");
        release(c, st);
        text_fix(&text, r);
        store_rows_free(r);
        return -1;
    }
    text_fix(&text, r);
    release(c, st);
    *out = r;
    return 0;
oom:
    set_err(err, NULL, "query");
    release(c, st);
    text_fix(&text, r);
    store_rows_free(r);
    return -1;
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
    sq_exec, sq_query, sq_script, sq_is_broken, sq_shared_open, sq_shared_close,
};
