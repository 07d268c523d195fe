/*
 * record.c — the lifecycle record: every sandbox this library made, per user.
 *
 * One SQLite database, STATE_DIR/lifecycle.db, where STATE_DIR is
 * $SBX_STATE_DIR, else $XDG_STATE_HOME/sbx, else $HOME/.local/state/sbx
 * (the CLI's state directory). It is opened in WAL mode with a busy
 * timeout, so many processes may create and destroy at once; each change is
 * one transaction, so a process killed at any point leaves the record whole
 * (synchronous=NORMAL: an application crash loses nothing; a power loss
 * may lose the last transactions). A process's set-up of its connection
 * (WAL, schema, store id) runs under an exclusive flock(2) of the state
 * directory: SQLite refuses a second connection's switch of a fresh file to
 * WAL with SQLITE_BUSY at once, without the busy handler (its deadlock
 * avoidance), so fifty processes making the record at once lost some creates.
 *
 *   sandboxes(create_token PRIMARY KEY, backend, provider_id, session_state,
 *             created_at, expires_at, detached)
 *   owners(create_token, pid, start_ticks, boot_id)   one row per owner
 *   meta(key PRIMARY KEY, value)                      store_id
 *
 * sandboxes and owners are WITHOUT ROWID tables (since this file made
 * them so; a store made before keeps its rowid tables, which the same
 * statements read and write): each is its primary key's b-tree, so a
 * create's first transaction writes three pages (the row, its by-id index
 * entry, the owner) where it wrote five, and destroy's as many.
 * A row is written before the provider is asked to create (token, backend,
 * expiry, the creating process as owner), completed with the provider's id
 * and the session state once the sandbox exists, and removed at destroy.
 * sbx_gc() reads it. The store id (8 hex digits, made with the database)
 * is the first part of every create token this store hands out, so that
 * gc reaps a labelled resource no record knows only when this store made
 * it.
 *
 * The directory and the database are trusted only when owned by the
 * effective user and not writable by group or others (made 0700 / 0600).
 *
 * Thread-safe: one connection per process behind a mutex; a child of
 * fork() opens its own (a connection never crosses fork()).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#define RECORD_FILE "lifecycle.db"
#define RECORD_SCHEMA_VERSION 1
#define RECORD_BUSY_MS 10000

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static sqlite3 *record_db;          /* NULL until opened */
static pid_t record_pid;            /* the process that opened record_db */
static char record_store_id[9];     /* 8 hex digits */
static char record_path[PATH_MAX];

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS meta ("
    "  key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS sandboxes ("
    "  create_token TEXT PRIMARY KEY,"
    "  backend TEXT NOT NULL,"
    "  provider_id TEXT NOT NULL DEFAULT '',"
    "  session_state TEXT NOT NULL DEFAULT '',"
    "  created_at REAL NOT NULL,"
    "  expires_at REAL NOT NULL,"
    "  detached INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS sandboxes_by_id ON sandboxes(backend, provider_id);"
    "CREATE TABLE IF NOT EXISTS owners ("
    "  create_token TEXT NOT NULL REFERENCES sandboxes(create_token) ON DELETE CASCADE,"
    "  pid INTEGER NOT NULL,"
    "  start_ticks INTEGER NOT NULL,"
    "  boot_id TEXT NOT NULL,"
    "  PRIMARY KEY (create_token, pid, start_ticks)) WITHOUT ROWID;";

/*
 * The statements of the calls every sandbox makes (create: begin, owner,
 * complete; destroy: remove), prepared once per connection
 * (SQLITE_PREPARE_PERSISTENT) instead of parsed at each call, and the
 * creating process's own owner facts (start time, boot id), read from
 * /proc once per process. Guarded by record_lock; a statement is reset and
 * its bindings cleared after each use, so none holds a transaction or
 * points at a caller's strings between calls.
 */
enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_INSERT_SANDBOX,
    ST_ADD_OWNER,
    ST_COMPLETE,
    ST_REMOVE,
    ST_SET_DETACHED,
    ST_FIND,
    ST_REMOVE_OWNER,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_INSERT_SANDBOX] = "INSERT INTO sandboxes(create_token, backend, created_at, "
                          "expires_at, detached) VALUES(?1, ?2, ?3, ?4, ?5)",
    [ST_ADD_OWNER] = "INSERT OR IGNORE INTO owners(create_token, pid, start_ticks, boot_id) "
                     "VALUES(?1, ?2, ?3, ?4)",
    [ST_COMPLETE] = "UPDATE sandboxes SET provider_id = ?2, session_state = ?3, "
                    "expires_at = CASE WHEN ?4 > 0 THEN ?4 ELSE expires_at END "
                    "WHERE create_token = ?1",
    [ST_REMOVE] = "DELETE FROM sandboxes WHERE create_token = ?1",
    [ST_SET_DETACHED] = "UPDATE sandboxes SET detached = ?4 WHERE create_token = ?1",
    [ST_FIND] = "SELECT create_token FROM sandboxes WHERE backend = ?1 AND provider_id = ?2",
    [ST_REMOVE_OWNER] = "DELETE FROM owners WHERE create_token = ?1 AND pid = ?2 AND "
                        "start_ticks = ?3",
};

static sqlite3_stmt *record_stmts[ST_COUNT]; /* of record_db; NULL until first used */

static pid_t self_pid;                       /* whose facts these are; 0: none yet */
static unsigned long long self_ticks;
static char self_boot[40];

/* ------------------------------------------------------------- processes */

/* The kernel's boot id (36 characters), "" when unreadable. */
static void
boot_id(char out[40])
{
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, out, 39) : -1;

    if (fd >= 0)
        close(fd);
    if (n < 0)
        n = 0;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        n--;
    out[n] = '\0';
}

int
sbx_process_start_ticks(pid_t pid, unsigned long long *ticks)
{
    char path[64], buf[1024];
    const char *p;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The name (field 2) may hold spaces and parentheses: start after the
     * last ')'. Each space passed begins the next field, so the loop ends
     * at the start of field 22, the start time. */
    p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    for (field = 2; field < 22 && *p; p++)
        if (*p == ' ')
            field++;
    if (field != 22)
        return -1;
    *ticks = strtoull(p, NULL, 10);
    return 0;
}

int
sbx_process_is(pid_t pid, unsigned long long start_ticks)
{
    unsigned long long now;
    char path[64];
    struct stat st;

    if (pid <= 0 || sbx_process_start_ticks(pid, &now) < 0)
        return 0;
    /* 0: a row of a library that read field 21 (always 0) for the start
     * time; its owner is taken to be whatever process has the pid, as
     * that library did. */
    if (start_ticks != 0 && now != start_ticks)
        return 0;
    /* A zombie is gone for every purpose here. */
    snprintf(path, sizeof(path), "/proc/%ld/task", (long)pid);
    return stat(path, &st) == 0;
}

/* ------------------------------------------------------------- directory */

/* The user's home from the password database; NULL when it has none. */
static const char *
passwd_home(void)
{
    struct passwd *pw = getpwuid(geteuid());

    return pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
}

SBX_EXPORT char *
sbx_state_dir_path(sbx_error **error)
{
    char path[PATH_MAX];
    char *s;

    if (sbx_state_dir(path, sizeof path, error) < 0)
        return NULL;
    s = strdup(path);
    if (!s)
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, "state_dir_path", "out of memory");
    return s;
}

int
sbx_state_dir(char *out, size_t cap, sbx_error **err)
{
    const char *d = getenv("SBX_STATE_DIR"), *base;
    int n;

    if (d && *d)
        n = snprintf(out, cap, "%s", d);
    else if ((base = getenv("XDG_STATE_HOME")) && base[0] == '/')
        n = snprintf(out, cap, "%s/sbx", base);
    else if (((base = getenv("HOME")) && *base) || (base = passwd_home()))
        n = snprintf(out, cap, "%s/.local/state/sbx", base);
    else {
        sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL,
                      "cannot find the state directory: set SBX_STATE_DIR, XDG_STATE_HOME or HOME");
        return -1;
    }
    if (n < 0 || (size_t)n >= cap) {
        sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL, "state directory path is too long");
        return -1;
    }
    return 0;
}

int
sbx_check_private(const char *path, int fd, int is_dir, sbx_error **err)
{
    struct stat st;
    sbx_error *e;

    if ((fd >= 0 ? fstat(fd, &st) : lstat(path, &st)) < 0) {
        e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL, "cannot stat %s: %s", path,
                          strerror(errno));
        sbx_error_add_context(e, "path", path);
        return -1;
    }
    if (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL, "%s is not a %s", path,
                          is_dir ? "directory" : "regular file");
        sbx_error_add_context(e, "path", path);
        return -1;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 022)) {
        e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL,
                          "refusing %s: owned by uid %lu with mode %04o; it must belong to "
                          "uid %lu and not be writable by group or others", path,
                          (unsigned long)st.st_uid, (unsigned)(st.st_mode & 07777),
                          (unsigned long)geteuid());
        sbx_error_add_context(e, "path", path);
        return -1;
    }
    return 0;
}

int
sbx_state_dir_make(char *out, size_t cap, sbx_error **err)
{
    char *p;

    if (sbx_state_dir(out, cap, err) < 0)
        return -1;
    /* Each missing component is made 0700; existing parents are the
     * user's business, the state directory itself is checked. */
    for (p = out + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(out, 0700) < 0 && errno != EEXIST) {
            sbx_error *e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL,
                                         "cannot make %s: %s", out, strerror(errno));
            sbx_error_add_context(e, "path", out);
            *p = '/';
            return -1;
        }
        *p = '/';
    }
    if (mkdir(out, 0700) < 0 && errno != EEXIST) {
        sbx_error *e = sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL, "cannot make %s: %s",
                                     out, strerror(errno));
        sbx_error_add_context(e, "path", out);
        return -1;
    }
    return sbx_check_private(out, -1, 1, err);
}

/* --------------------------------------------------------------- opening */

/* The code of SQLite's last failure on record_db: resource_exhausted when
 * the system ran out (SQLITE_NOMEM, or an EMFILE, ENFILE or ENOMEM behind
 * it), else configuration. The system error, if any, goes in @os. */
static sbx_error_code
db_code(char *os, size_t cap)
{
    int sys = record_db ? sqlite3_system_errno(record_db) : 0;

    os[0] = '\0';
    if (sys > 0)
        snprintf(os, cap, " (%s)", strerror(sys));
    if ((record_db && sqlite3_errcode(record_db) == SQLITE_NOMEM) ||
        sbx_errno_code(sys, SBX_ERROR_CONFIGURATION) == SBX_ERROR_RESOURCE_EXHAUSTED)
        return SBX_ERROR_RESOURCE_EXHAUSTED;
    return SBX_ERROR_CONFIGURATION;
}

static int
db_fail(sbx_error **err, const char *what)
{
    char os[128];
    sbx_error_code code = db_code(os, sizeof(os));
    sbx_error *e = sbx_set_error(err, code, NULL,
                                 "lifecycle record %s: %s: %s%s", record_path, what,
                                 record_db ? sqlite3_errmsg(record_db) : "cannot open", os);
    sbx_error_add_context(e, "path", record_path);
    return -1;
}

static int
exec_sql(const char *sql, sbx_error **err)
{
    char *msg = NULL;

    if (sqlite3_exec(record_db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        char os[128];
        sbx_error_code code = db_code(os, sizeof(os));
        sbx_error *e = sbx_set_error(err, code, NULL, "lifecycle record %s: %s%s", record_path,
                                     msg ? msg : sqlite3_errmsg(record_db), os);
        sbx_error_add_context(e, "path", record_path);
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* Statement @which of record_db, prepared on first use. Call with
 * record_lock held and the database open; NULL with *@err set when it
 * cannot be prepared. Hand it back with stmt_done(). */
static sqlite3_stmt *
stmt_get(int which, sbx_error **err)
{
    if (!record_stmts[which] &&
        sqlite3_prepare_v3(record_db, stmt_sql[which], -1, SQLITE_PREPARE_PERSISTENT,
                           &record_stmts[which], NULL) != SQLITE_OK) {
        record_stmts[which] = NULL;
        db_fail(err, "prepare");
        return NULL;
    }
    return record_stmts[which];
}

/* Resets @st (NULL: nothing) and drops its bindings, ready for the next
 * call. */
static void
stmt_done(sqlite3_stmt *st)
{
    if (st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
}

/* Runs statement @which, one without parameters or rows (BEGIN, COMMIT);
 * errors as exec_sql(). */
static int
stmt_exec(int which, sbx_error **err)
{
    sqlite3_stmt *st = stmt_get(which, err);
    int rc;

    if (!st)
        return -1;
    rc = sqlite3_step(st);
    stmt_done(st);
    if (rc != SQLITE_DONE) {
        char os[128];
        sbx_error_code code = db_code(os, sizeof(os));
        sbx_error *e = sbx_set_error(err, code, NULL, "lifecycle record %s: %s%s", record_path,
                                     sqlite3_errmsg(record_db), os);
        sbx_error_add_context(e, "path", record_path);
        return -1;
    }
    return 0;
}

/* The store id from meta, made on first use. */
static int
load_store_id(sbx_error **err)
{
    sqlite3_stmt *st = NULL;
    char fresh[SBX_TOKEN_LEN + 1];
    int rc;

    if (sbx_random_token(fresh) < 0) {
        sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL, "cannot read random bytes");
        return -1;
    }
    if (sqlite3_prepare_v2(record_db, "INSERT OR IGNORE INTO meta(key, value) "
                           "VALUES('store_id', ?1)", -1, &st, NULL) != SQLITE_OK)
        return db_fail(err, "prepare");
    sqlite3_bind_text(st, 1, fresh + 4, 8, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return db_fail(err, "store id");
    if (sqlite3_prepare_v2(record_db, "SELECT value FROM meta WHERE key = 'store_id'", -1,
                           &st, NULL) != SQLITE_OK)
        return db_fail(err, "prepare");
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW || sqlite3_column_bytes(st, 0) != 8) {
        sqlite3_finalize(st);
        return db_fail(err, "store id");
    }
    memcpy(record_store_id, sqlite3_column_text(st, 0), 8);
    record_store_id[8] = '\0';
    sqlite3_finalize(st);
    return 0;
}

/* Takes the state directory's set-up lock: an exclusive flock(2) on the
 * directory, which ends with its holder (a crash included) and does not touch
 * SQLite's own fcntl(2) locks on the database. Waits at most RECORD_BUSY_MS;
 * then (a holder stopped, say) the set-up goes on without it and SQLite's
 * busy handling decides. Returns the descriptor to close, or -1 with nothing
 * held. */
static int
setup_lock(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    double deadline = sbx_monotonic_now() + RECORD_BUSY_MS / 1000.0;

    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;

        if ((e != EWOULDBLOCK && e != EINTR) || sbx_monotonic_now() >= deadline) {
            if (e == EWOULDBLOCK)
                sbx_log(SBX_LOG_WARNING, "record",
                        "the set-up lock of %s: still held after %d ms; going on without it",
                        dir, RECORD_BUSY_MS);
            else
                sbx_log(SBX_LOG_WARNING, "record", "the set-up lock of %s: %s; going on without it",
                        dir, strerror(e));
            close(fd);
            return -1;
        }
        usleep(2000);
    }
    return fd;
}

/* Opens the database for this process. Call with record_lock held. */
static int
record_open(sbx_error **err)
{
    char dir[PATH_MAX];
    int fd, lock;

    if (record_db && record_pid == getpid())
        return 0;
    /* A connection inherited through fork() belongs to the parent: it is
     * left alone (not closed, which could disturb the parent's locks), and
     * so are its statements. */
    record_db = NULL;
    memset(record_stmts, 0, sizeof(record_stmts));
    if (sbx_state_dir_make(dir, sizeof(dir), err) < 0)
        return -1;
    if ((size_t)snprintf(record_path, sizeof(record_path), "%s/" RECORD_FILE, dir) >=
        sizeof(record_path)) {
        sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL, "state directory path is too long");
        return -1;
    }
    /* Made 0600 by us, or checked: nobody else may plant rows. */
    fd = open(record_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0) {
        sbx_error *e = sbx_set_error(err, sbx_errno_code(errno, SBX_ERROR_CONFIGURATION), NULL,
                                     "cannot open %s: %s", record_path, strerror(errno));
        sbx_error_add_context(e, "path", record_path);
        return -1;
    }
    if (sbx_check_private(record_path, fd, 0, err) < 0) {
        close(fd);
        return -1;
    }
    close(fd);
    lock = setup_lock(dir);
    if (sqlite3_open_v2(record_path, &record_db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        db_fail(err, "open");
        goto fail;
    }
    sqlite3_busy_timeout(record_db, RECORD_BUSY_MS);
    if (exec_sql("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                 "PRAGMA foreign_keys=ON;", err) < 0 ||
        exec_sql(schema, err) < 0 || load_store_id(err) < 0)
        goto fail;
    if (lock >= 0)
        close(lock);
    record_pid = getpid();
    return 0;

fail:
    sqlite3_close(record_db);
    record_db = NULL;
    if (lock >= 0)
        close(lock);
    return -1;
}

/* 1 when this process has no connection open and the record's file does
 * not exist (never made, or removed with its state directory): a call that
 * only changes or reads rows then has none to touch, and makes nothing (a
 * plugin host cleaning up after its application must not make a state
 * directory again). 0 otherwise, also when the directory cannot be named
 * (record_open() says why). Call with record_lock held. */
static int
record_absent(void)
{
    char dir[PATH_MAX], path[PATH_MAX + sizeof(RECORD_FILE) + 1];

    if (record_db && record_pid == getpid())
        return 0;
    if (sbx_state_dir(dir, sizeof(dir), NULL) < 0)
        return 0;
    snprintf(path, sizeof(path), "%s/" RECORD_FILE, dir);
    return access(path, F_OK) < 0 && errno == ENOENT;
}

/* ----------------------------------------------------------------- calls */

int
sbx_record_new_token(char out[SBX_TOKEN_LEN + 1], sbx_error **err)
{
    int rc;

    if (sbx_random_token(out) < 0) {
        sbx_set_error(err, SBX_ERROR_CONFIGURATION, NULL,
                      "cannot read random bytes for the create token");
        return -1;
    }
    pthread_mutex_lock(&record_lock);
    rc = record_open(err);
    if (rc == 0)
        memcpy(out + 4, record_store_id, 8);
    pthread_mutex_unlock(&record_lock);
    return rc;
}

int
sbx_record_token_is_ours(const char *token)
{
    int ours;

    if (!token || strncmp(token, "sbx-", 4) != 0 || strlen(token) != SBX_TOKEN_LEN)
        return 0;
    pthread_mutex_lock(&record_lock);
    ours = record_open(NULL) == 0 && memcmp(token + 4, record_store_id, 8) == 0;
    pthread_mutex_unlock(&record_lock);
    return ours;
}

/* Adds this process as an owner of @token. Call with record_lock held. */
static int
add_owner_locked(const char *token, sbx_error **err)
{
    pid_t pid = getpid();
    sqlite3_stmt *st;
    int rc;

    if (self_pid != pid) {
        /* Read once per process; a start time that cannot be read is 0
         * (and read again next time), as the boot id "". */
        if (sbx_process_start_ticks(pid, &self_ticks) < 0)
            self_ticks = 0;
        boot_id(self_boot);
        self_pid = self_ticks && self_boot[0] ? pid : 0;
    }
    if (!(st = stmt_get(ST_ADD_OWNER, err)))
        return -1;
    sqlite3_bind_text(st, 1, token, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)pid);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)self_ticks);
    sqlite3_bind_text(st, 4, self_boot, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    stmt_done(st);
    return rc == SQLITE_DONE ? 0 : db_fail(err, "add owner");
}

int
sbx_record_begin(const char *token, const char *backend, double expires_at, int detached,
                 sbx_error **err)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&record_lock);
    if (record_open(err) < 0)
        goto out;
    if (stmt_exec(ST_BEGIN, err) < 0)
        goto out;
    if (!(st = stmt_get(ST_INSERT_SANDBOX, err)))
        goto rollback;
    sqlite3_bind_text(st, 1, token, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, backend, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, sbx_wallclock_now());
    sqlite3_bind_double(st, 4, expires_at);
    sqlite3_bind_int(st, 5, detached ? 1 : 0);
    if (sqlite3_step(st) != SQLITE_DONE) {
        db_fail(err, "insert");
        goto rollback;
    }
    stmt_done(st);
    st = NULL;
    if (add_owner_locked(token, err) < 0)
        goto rollback;
    if (stmt_exec(ST_COMMIT, err) < 0)
        goto rollback;
    rc = 0;
    goto out;
rollback:
    stmt_done(st);
    st = NULL;
    sqlite3_exec(record_db, "ROLLBACK", NULL, NULL, NULL);
out:
    stmt_done(st);
    pthread_mutex_unlock(&record_lock);
    return rc;
}

/* Runs the UPDATE/DELETE statement @which with up to three text arguments
 * (NULL = none) and an optional number (?4: an integer, or for ST_COMPLETE
 * a UNIX time). */
static int
record_change(int which, const char *a, const char *b, const char *c, double n,
              sbx_error **err)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&record_lock);
    if (record_absent()) {
        rc = 0;
        goto out;
    }
    if (record_open(err) < 0 || !(st = stmt_get(which, err)))
        goto out;
    if (a)
        sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
    if (b)
        sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
    if (c)
        sqlite3_bind_text(st, 3, c, -1, SQLITE_STATIC);
    if (sqlite3_bind_parameter_count(st) >= 4) {
        if (which == ST_COMPLETE)
            sqlite3_bind_double(st, 4, n);
        else
            sqlite3_bind_int(st, 4, (int)n);
    }
    if (sqlite3_step(st) != SQLITE_DONE) {
        db_fail(err, "update");
        goto out;
    }
    rc = sqlite3_changes(record_db);
out:
    stmt_done(st);
    pthread_mutex_unlock(&record_lock);
    return rc;
}

int
sbx_record_complete(const char *token, const char *provider_id, const char *session_state,
                    double expires_at, sbx_error **err)
{
    return record_change(ST_COMPLETE, token, provider_id ? provider_id : "",
                         session_state ? session_state : "", expires_at, err) < 0 ? -1 : 0;
}

int
sbx_record_remove(const char *token, sbx_error **err)
{
    return record_change(ST_REMOVE, token, NULL, NULL, 0, err);
}

int
sbx_record_set_detached(const char *token, int detached, sbx_error **err)
{
    return record_change(ST_SET_DETACHED, token, NULL, NULL, detached ? 1 : 0, err);
}

int
sbx_record_find(const char *backend, const char *provider_id, char token[SBX_TOKEN_LEN + 1],
                sbx_error **err)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&record_lock);
    if (record_absent()) {
        rc = 0;
        goto out;
    }
    if (record_open(err) < 0 || !(st = stmt_get(ST_FIND, err)))
        goto out;
    sqlite3_bind_text(st, 1, backend, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, provider_id, -1, SQLITE_STATIC);
    switch (sqlite3_step(st)) {
    case SQLITE_ROW:
        snprintf(token, SBX_TOKEN_LEN + 1, "%s", (const char *)sqlite3_column_text(st, 0));
        rc = 1;
        break;
    case SQLITE_DONE:
        rc = 0;
        break;
    default:
        db_fail(err, "select");
    }
out:
    stmt_done(st);
    pthread_mutex_unlock(&record_lock);
    return rc;
}

int
sbx_record_add_owner(const char *token, sbx_error **err)
{
    int rc;

    pthread_mutex_lock(&record_lock);
    rc = record_open(err) < 0 ? -1 : add_owner_locked(token, err);
    pthread_mutex_unlock(&record_lock);
    return rc;
}

int
sbx_record_remove_owner(const char *token, pid_t pid, unsigned long long start_ticks,
                        sbx_error **err)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&record_lock);
    if (record_absent()) {
        rc = 0;
        goto out;
    }
    if (record_open(err) < 0 || !(st = stmt_get(ST_REMOVE_OWNER, err)))
        goto out;
    sqlite3_bind_text(st, 1, token, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)pid);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)start_ticks);
    if (sqlite3_step(st) != SQLITE_DONE) {
        db_fail(err, "remove owner");
        goto out;
    }
    rc = sqlite3_changes(record_db);
out:
    stmt_done(st);
    pthread_mutex_unlock(&record_lock);
    return rc;
}

int
sbx_record_get(const char *token, int *detached, int *owners_alive, sbx_error **err)
{
    sqlite3_stmt *st = NULL, *ow = NULL;
    char boot[40];
    int rc = -1;

    boot_id(boot);
    *detached = 0;
    *owners_alive = 0;
    pthread_mutex_lock(&record_lock);
    if (record_absent()) {
        rc = 0;
        goto out;
    }
    if (record_open(err) < 0)
        goto out;
    if (sqlite3_prepare_v2(record_db, "SELECT detached FROM sandboxes WHERE create_token = ?1",
                           -1, &st, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(record_db, "SELECT pid, start_ticks, boot_id FROM owners WHERE "
                           "create_token = ?1", -1, &ow, NULL) != SQLITE_OK) {
        db_fail(err, "prepare");
        goto out;
    }
    sqlite3_bind_text(st, 1, token, -1, SQLITE_STATIC);
    switch (sqlite3_step(st)) {
    case SQLITE_ROW:
        *detached = sqlite3_column_int(st, 0);
        break;
    case SQLITE_DONE:
        rc = 0;
        goto out;
    default:
        db_fail(err, "select");
        goto out;
    }
    sqlite3_bind_text(ow, 1, token, -1, SQLITE_STATIC);
    while (sqlite3_step(ow) == SQLITE_ROW)
        if (strcmp((const char *)sqlite3_column_text(ow, 2), boot) == 0 &&
            sbx_process_is((pid_t)sqlite3_column_int64(ow, 0),
                           (unsigned long long)sqlite3_column_int64(ow, 1)))
            (*owners_alive)++;
    rc = 1;
out:
    sqlite3_finalize(st);
    sqlite3_finalize(ow);
    pthread_mutex_unlock(&record_lock);
    return rc;
}

int
sbx_record_foreach(sbx_record_fn fn, void *user_data, sbx_error **err)
{
    sqlite3_stmt *st = NULL, *ow = NULL;
    sbx_record_row *rows = NULL;
    size_t n = 0, cap = 0, i;
    char boot[40];
    int rc = -1, step;

    boot_id(boot);
    pthread_mutex_lock(&record_lock);
    if (record_open(err) < 0)
        goto out;
    if (sqlite3_prepare_v2(record_db, "SELECT create_token, backend, provider_id, "
                           "session_state, created_at, expires_at, detached FROM sandboxes "
                           "ORDER BY created_at, create_token", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(record_db, "SELECT pid, start_ticks, boot_id FROM owners WHERE "
                           "create_token = ?1", -1, &ow, NULL) != SQLITE_OK) {
        db_fail(err, "prepare");
        goto out;
    }
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        sbx_record_row *r;

        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            sbx_record_row *g = realloc(rows, nc * sizeof(*rows));
            if (!g) {
                sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
                goto out;
            }
            rows = g;
            cap = nc;
        }
        r = &rows[n];
        memset(r, 0, sizeof(*r));
        r->create_token = sbx_strdup((const char *)sqlite3_column_text(st, 0));
        r->backend = sbx_strdup((const char *)sqlite3_column_text(st, 1));
        r->provider_id = sbx_strdup((const char *)sqlite3_column_text(st, 2));
        r->session_state = sbx_strdup((const char *)sqlite3_column_text(st, 3));
        r->created_at = sqlite3_column_double(st, 4);
        r->expires_at = sqlite3_column_double(st, 5);
        r->detached = sqlite3_column_int(st, 6);
        n++;
        if (!r->create_token || !r->backend || !r->provider_id || !r->session_state) {
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, NULL, "out of memory");
            goto out;
        }
        sqlite3_reset(ow);
        sqlite3_bind_text(ow, 1, r->create_token, -1, SQLITE_STATIC);
        while (sqlite3_step(ow) == SQLITE_ROW) {
            r->owners++;
            if (strcmp((const char *)sqlite3_column_text(ow, 2), boot) == 0 &&
                sbx_process_is((pid_t)sqlite3_column_int64(ow, 0),
                               (unsigned long long)sqlite3_column_int64(ow, 1)))
                r->owners_alive++;
        }
    }
    if (step != SQLITE_DONE) {
        db_fail(err, "select");
        goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(st);
    sqlite3_finalize(ow);
    pthread_mutex_unlock(&record_lock);
    /* The callbacks run without the lock: they may change the record. */
    for (i = 0; i < n; i++) {
        if (rc == 0 && fn(&rows[i], user_data) != 0)
            rc = 1;
        free((char *)rows[i].create_token);
        free((char *)rows[i].backend);
        free((char *)rows[i].provider_id);
        free((char *)rows[i].session_state);
    }
    free(rows);
    return rc < 0 ? -1 : 0;
}

const char *
sbx_record_path(void)
{
    return record_path;
}
