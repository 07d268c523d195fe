/*
 * Helpers of the test programs that read the lifecycle record
 * (recordutil.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "recordutil.h"
#include "testutil.h"

void tu_dirs_make(tu_dirs *d, const char *prefix, int searchable)
{
    d->top = tu_mkdtemp(prefix);
    d->tmp = tu_strdup_printf("%s/tmp", d->top);
    cr_assert_eq(mkdir(d->tmp, 0700), 0, "mkdir %s", d->tmp);
    if (searchable) {
        cr_assert_eq(chmod(d->top, 0711), 0);
        cr_assert_eq(chmod(d->tmp, 0711), 0);
    }
    cr_assert_eq(setenv("TMPDIR", d->tmp, 1), 0);
    d->state = tu_strdup_printf("%s/state", d->top);
    cr_assert_eq(setenv("SBX_STATE_DIR", d->state, 1), 0);
}

void tu_dirs_free(tu_dirs *d)
{
    if (d->top)
        tu_rmtree(d->top);
    free(d->top);
    free(d->tmp);
    free(d->state);
    d->top = d->tmp = d->state = NULL;
}

/* Opens @state_dir's record read-only and steps @sql to its first row,
 * asserting each step; *@db and the statement returned are the caller's
 * (record_row_end()). */
static sqlite3_stmt *record_row(const char *state_dir, const char *sql, sqlite3 **db)
{
    char *path = tu_strdup_printf("%s/lifecycle.db", state_dir);
    sqlite3_stmt *st = NULL;
    *db = NULL;
    cr_assert_eq(sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(*db, 10000);
    cr_assert_eq(sqlite3_prepare_v2(*db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(*db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    free(path);
    return st;
}

static void record_row_end(sqlite3 *db, sqlite3_stmt *st)
{
    sqlite3_finalize(st);
    sqlite3_close(db);
}

long long tu_record_int(const char *state_dir, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st = record_row(state_dir, sql, &db);
    long long v = sqlite3_column_int64(st, 0);
    record_row_end(db, st);
    return v;
}

char *tu_record_text(const char *state_dir, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st = record_row(state_dir, sql, &db);
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *out = strdup(v ? v : "");
    cr_assert_not_null(out);
    record_row_end(db, st);
    return out;
}

long long tu_record_rows_for(const char *state_dir, const char *id)
{
    char *sql = sqlite3_mprintf("SELECT count(*) FROM sandboxes WHERE provider_id = %Q", id);
    cr_assert_not_null(sql);
    long long n = tu_record_int(state_dir, sql);
    sqlite3_free(sql);
    return n;
}

char *tu_record_dump(const char *state_dir)
{
    char *path = tu_strdup_printf("%s/lifecycle.db", state_dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    size_t cap = 256, len = 0;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    out[0] = '\0';
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT s.create_token, s.provider_id, s.detached, "
                                    "(SELECT group_concat(o.pid, ',') FROM owners o "
                                    " WHERE o.create_token = s.create_token) "
                                    "FROM sandboxes s ORDER BY s.created_at",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *tok = (const char *)sqlite3_column_text(st, 0);
        const char *id = (const char *)sqlite3_column_text(st, 1);
        const char *own = (const char *)sqlite3_column_text(st, 3);
        char *line = tu_strdup_printf("\n  %s %s detached=%d owners=%s", tok ? tok : "-",
                                      id ? id : "-", sqlite3_column_int(st, 2),
                                      own ? own : "none");
        size_t n = strlen(line);
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            out = realloc(out, cap);
            cr_assert_not_null(out);
        }
        memcpy(out + len, line, n + 1);
        len += n;
        free(line);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(path);
    return out;
}
