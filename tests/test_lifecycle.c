/*
 * The lifecycle record and sbx_gc() on the backend under test
 * ($SBX_TEST_BACKEND, default local): rows written at create and removed at
 * destroy, attached sandboxes of a SIGKILLed owner reaped by gc, detached
 * ones untouched, expired ones reaped, dry runs that touch nothing, a
 * resuming process as an owner, concurrent writers, and a state directory
 * nobody else may write.
 *
 * Each test has its own TMPDIR and SBX_STATE_DIR (so its own record). The
 * owner processes of the gc tests load their plugins in process: out of
 * process their plugin hosts would destroy the attached sandboxes of a
 * killed owner themselves (tests/test_attached.c), leaving gc nothing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include <sbx/sbx.h>

#include "recordutil.h"
#include "testutil.h"

static tu_dirs g_dirs;   /* this test's directory, its TMPDIR and SBX_STATE_DIR */

static void setup(void)
{
    tu_dirs_make(&g_dirs, "sbx-lifecycle", 0);
}

static void teardown(void)
{
    tu_dirs_free(&g_dirs);
}

TestSuite(record, .init = setup, .fini = teardown, .timeout = 120);
TestSuite(gc, .init = setup, .fini = teardown, .timeout = 120);

/* Runs @sql (one integer result) against this test's record. */
static long long record_int(const char *sql)
{
    return tu_record_int(g_dirs.state, sql);
}

static long long rows_for(const char *id)
{
    return tu_record_rows_for(g_dirs.state, id);
}

/* The owner rows of the sandbox whose provider id is @id. */
static long long owners_of(const char *id)
{
    char *sql = sqlite3_mprintf("SELECT count(*) FROM owners JOIN sandboxes USING "
                                "(create_token) WHERE provider_id = %Q", id);
    long long n = record_int(sql);
    sqlite3_free(sql);
    return n;
}

/* Field 22 of /proc/self/stat (this process's start time in clock ticks
 * since boot), read here independently of the library. */
static unsigned long long own_start_ticks(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    cr_assert_not_null(p);
    /* Fields 3 to 22 follow ") ", one space before each. */
    char *save = NULL, *tok = strtok_r(p + 1, " ", &save);
    for (int field = 3; field < 22 && tok; field++)
        tok = strtok_r(NULL, " ", &save);
    cr_assert_not_null(tok);
    return strtoull(tok, NULL, 10);
}

/* The kernel's boot id, read here. */
static void own_boot_id(char out[64])
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(out, 64, f));
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* ------------------------------------------------------------------ record */

Test(record, row_written_at_create_and_removed_at_destroy)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 300, NULL), 0);
    double t0 = (double)time(NULL);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    const char *id = sbx_sandbox_get0_id(sb);
    cr_assert_eq(rows_for(id), 1);
    char *sql = sqlite3_mprintf("SELECT count(*) FROM sandboxes WHERE provider_id = %Q AND "
                                "backend = %Q AND detached = 0 AND length(create_token) = 36 "
                                "AND substr(create_token, 1, 12) = 'sbx-' || (SELECT value "
                                "FROM meta WHERE key = 'store_id') AND session_state LIKE "
                                "'{\"version\":1,%%' AND expires_at BETWEEN %f AND %f",
                                id, tu_backend(), t0 + 299, t0 + 302);
    cr_assert_eq(record_int(sql), 1, "the row does not hold what create wrote");
    sqlite3_free(sql);
    sql = sqlite3_mprintf("SELECT count(*) FROM owners JOIN sandboxes USING (create_token) "
                          "WHERE provider_id = %Q AND pid = %d", id, (int)getpid());
    cr_assert_eq(record_int(sql), 1, "this process is not the owner");
    sqlite3_free(sql);
    /* The owner is this process as it started (so a later process given
     * the same pid is not taken for it), on this boot. */
    unsigned long long ticks = own_start_ticks();
    cr_assert_gt(ticks, 0);
    sql = sqlite3_mprintf("SELECT start_ticks FROM owners JOIN sandboxes USING (create_token) "
                          "WHERE provider_id = %Q", id);
    cr_assert_eq(record_int(sql), (long long)ticks, "the owner's start time is not field 22 "
                 "of /proc/self/stat (%llu)", ticks);
    sqlite3_free(sql);
    char boot[64];
    own_boot_id(boot);
    cr_assert_eq(strlen(boot), 36);
    sql = sqlite3_mprintf("SELECT count(*) FROM owners JOIN sandboxes USING (create_token) "
                          "WHERE provider_id = %Q AND boot_id = %Q", id, boot);
    cr_assert_eq(record_int(sql), 1, "the owner's boot id is not %s", boot);
    sqlite3_free(sql);

    /* The record is the user's alone. */
    struct stat st;
    cr_assert_eq(stat(g_dirs.state, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0700);
    char *db = tu_strdup_printf("%s/lifecycle.db", g_dirs.state);
    cr_assert_eq(stat(db, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600);
    free(db);

    /* Each table is its primary key's b-tree (three pages a create). */
    cr_assert_eq(record_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                            "name IN ('sandboxes', 'owners') AND sql LIKE '%WITHOUT ROWID'"), 2);

    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    cr_assert_eq(rows_for(id), 0);
    cr_assert_eq(record_int("SELECT count(*) FROM owners"), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* A record made before its tables were WITHOUT ROWID (rowid tables, the
 * same columns) is used as it is: a create writes its row and owner, a
 * destroy removes them, and the tables stay as they were made. */
Test(record, a_store_with_rowid_tables_is_used_as_made)
{
    static const char old_schema[] =
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE sandboxes (create_token TEXT PRIMARY KEY, backend TEXT NOT NULL,"
        "  provider_id TEXT NOT NULL DEFAULT '', session_state TEXT NOT NULL DEFAULT '',"
        "  created_at REAL NOT NULL, expires_at REAL NOT NULL,"
        "  detached INTEGER NOT NULL DEFAULT 0);"
        "CREATE INDEX sandboxes_by_id ON sandboxes(backend, provider_id);"
        "CREATE TABLE owners (create_token TEXT NOT NULL REFERENCES "
        "  sandboxes(create_token) ON DELETE CASCADE, pid INTEGER NOT NULL,"
        "  start_ticks INTEGER NOT NULL, boot_id TEXT NOT NULL,"
        "  PRIMARY KEY (create_token, pid, start_ticks));";
    cr_assert_eq(mkdir(g_dirs.state, 0700), 0);
    char *path = tu_strdup_printf("%s/lifecycle.db", g_dirs.state);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, old_schema, NULL, NULL, NULL), SQLITE_OK,
                 "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    cr_assert_eq(chmod(path, 0600), 0);
    free(path);

    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *sb = tu_create(c, NULL);
    const char *id = sbx_sandbox_get0_id(sb);
    cr_assert_eq(rows_for(id), 1);
    char *sql = sqlite3_mprintf("SELECT count(*) FROM owners JOIN sandboxes USING (create_token) "
                                "WHERE provider_id = %Q AND pid = %d", id, (int)getpid());
    cr_assert_eq(record_int(sql), 1, "this process is not the owner");
    sqlite3_free(sql);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(rows_for(id), 0);
    cr_assert_eq(record_int("SELECT count(*) FROM owners"), 0);
    cr_assert_eq(record_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                            "name IN ('sandboxes', 'owners') AND sql LIKE '%WITHOUT ROWID%'"), 0);
    cr_assert_eq(record_int("SELECT count(*) FROM meta WHERE key = 'store_id' AND "
                            "length(value) = 8"), 1);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/* The state directory removed while an attached sandbox lives (a test
 * harness's, say), then its application ends: whatever ends the sandbox
 * (out of process the plugin host, which reads and removes its row; in
 * process the supervisor) makes no state directory again. The orphans the
 * application leaves become this process's children (a child subreaper),
 * so their end is waited for. */
Test(record, an_ending_without_a_state_directory_makes_none)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        sbx_client *c = sbx_client_new(tu_backend(), NULL);
        sbx_sandbox *sb = c ? sbx_sandbox_create(c, NULL, NULL) : NULL;
        if (!sb || !tu_exists(g_dirs.state))
            _exit(2);
        tu_rmtree(g_dirs.state);
        _exit(tu_exists(g_dirs.state) ? 3 : 0);
    }
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed: %d", status);
    double t0 = tu_now();
    for (;;) {
        pid_t w = waitpid(-1, NULL, WNOHANG);
        if (w < 0 && errno == ECHILD)
            break;
        cr_assert(w >= 0, "waitpid: %s", strerror(errno));
        if (w == 0) {
            cr_assert_lt(tu_now() - t0, 30.0, "the application's processes outlived it by 30 s");
            usleep(20 * 1000);
        }
    }
    cr_assert(!tu_exists(g_dirs.state), "%s was made again", g_dirs.state);
    char *tmp = tu_strdup_printf("%s/tmp", g_dirs.top);
    if (tu_backend_is_local() || strcmp(tu_backend(), "bubblewrap") == 0)
        cr_assert_eq(tu_count_entries(tmp), 0, "the attached sandbox's directory is left");
    free(tmp);
}

Test(record, untrusted_state_directory_refuses_create)
{
    cr_assert_eq(mkdir(g_dirs.state, 0777), 0);
    cr_assert_eq(chmod(g_dirs.state, 0777), 0);
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(c);
    cr_assert_null(sbx_sandbox_create(c, NULL, &err));
    char *want = tu_strdup_printf("refusing %s: owned by uid %lu with mode 0777; it must "
                                  "belong to uid %lu and not be writable by group or others",
                                  g_dirs.state, (unsigned long)geteuid(), (unsigned long)geteuid());
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    free(want);
    sbx_error_free(err);
    /* Nothing was made. */
    char *tmp = tu_strdup_printf("%s/tmp", g_dirs.top);
    cr_assert_eq(tu_count_entries(tmp), 0);
    free(tmp);
    sbx_client_free(c);
}

Test(record, detach_is_recorded)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    sbx_sandbox *sb = tu_create(c, NULL);
    char *sql = sqlite3_mprintf("SELECT detached FROM sandboxes WHERE provider_id = %Q",
                                sbx_sandbox_get0_id(sb));
    cr_assert_eq(record_int(sql), 0);
    cr_assert_eq(sbx_sandbox_detach(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(record_int(sql), 1);
    sqlite3_free(sql);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    cr_assert_eq(sbx_sandbox_detach(sb, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    sbx_error_free(err);
    err = NULL;
    cr_assert_eq(sbx_sandbox_detach(NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

/*
 * A create out of process crosses the plugin host once: the reply of its
 * one call carries the new sandbox's id, root and session state (wire 8),
 * so the row the record completes holds the session state without a second
 * call, with the data sbx_sandbox_session_state gives (which, asked
 * afterwards, goes to the plugin: the state may have changed). In process
 * nothing crosses and the row holds the same keys. The calls are read off
 * the plugin host's debug log (SBX_DEBUG: one line per call it receives).
 */
Test(record, a_create_crosses_the_plugin_host_once_and_records_the_session_state)
{
    static const sbx_plugin_mode modes[] = { SBX_PLUGIN_MODE_OUT_OF_PROCESS,
                                             SBX_PLUGIN_MODE_IN_PROCESS };
    const char *b = tu_backend();
    /* The local session data's keys (plugins/local/local.c), sorted; local
     * and bubblewrap (a sandbox with no cgroup) name an exec endpoint
     * (safehouse's commands go through the plugin). */
    const char *data_keys =
        strcmp(b, "local") == 0 || strcmp(b, "bubblewrap") == 0
            ? "exec_endpoint,expires_at,lifetime,made_tmp,meta,owns_root,root,"
              "supervisor_pid,supervisor_start"
        : strcmp(b, "safehouse") == 0
            ? "expires_at,lifetime,made_tmp,meta,owns_root,root,supervisor_pid,"
              "supervisor_start"
            : NULL;

    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        int out_of_process = modes[i] == SBX_PLUGIN_MODE_OUT_OF_PROCESS;
        tu_debug_log l;
        sbx_error *err = NULL;
        off_t from;

        tu_debug_log_start(&l);
        sbx_client *c = sbx_client_new_with_mode(b, modes[i], &err);
        cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");
        from = 0;
        free(tu_host_calls_since(&l, &from));   /* the host's start: client_new */

        sbx_sandbox *sb = tu_create(c, NULL);
        char *calls = tu_host_calls_since(&l, &from);
        cr_assert_str_eq(calls, out_of_process ? "create" : "",
                         "mode %d: the create's calls to the plugin host", (int)modes[i]);
        free(calls);

        const char *id = sbx_sandbox_get0_id(sb);
        char *sql = sqlite3_mprintf("SELECT session_state FROM sandboxes WHERE provider_id = %Q",
                                    id);
        char *recorded = tu_record_text(g_dirs.state, sql);
        sqlite3_free(sql);
        sql = sqlite3_mprintf("SELECT group_concat(key, ',') FROM (SELECT key FROM sandboxes, "
                              "json_each(sandboxes.session_state) WHERE provider_id = %Q "
                              "ORDER BY key)", id);
        char *keys = tu_record_text(g_dirs.state, sql);
        sqlite3_free(sql);
        cr_assert_str_eq(keys, "backend,data,id,timeout_secs,version", "recorded: %s", recorded);
        free(keys);
        if (data_keys) {
            sql = sqlite3_mprintf("SELECT group_concat(key, ',') FROM (SELECT key FROM "
                                  "sandboxes, json_each(sandboxes.session_state, '$.data') "
                                  "WHERE provider_id = %Q ORDER BY key)", id);
            keys = tu_record_text(g_dirs.state, sql);
            sqlite3_free(sql);
            cr_assert_str_eq(keys, data_keys, "recorded: %s", recorded);
            free(keys);
        }

        char *state = sbx_sandbox_session_state(sb, &err);
        cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
        calls = tu_host_calls_since(&l, &from);
        cr_assert_str_eq(calls, out_of_process ? "session_state" : "",
                         "mode %d: a later session_state's calls", (int)modes[i]);
        free(calls);
        /* The same data (the later state also has the size usage began
         * counting after the row was completed). */
        sql = sqlite3_mprintf("SELECT count(*) FROM sandboxes WHERE provider_id = %Q AND "
                              "json_extract(session_state, '$.data') = json_extract(%Q, "
                              "'$.data') AND json_extract(session_state, '$.id') = %Q", id,
                              state, id);
        cr_assert_eq(record_int(sql), 1, "recorded %s, then %s", recorded, state);
        sqlite3_free(sql);
        free(state);
        free(recorded);

        cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s",
                     err ? sbx_error_get0_message(err) : "");
        cr_assert_eq(rows_for(id), 0);
        sbx_sandbox_free(sb);
        sbx_client_free(c);
        free(tu_debug_log_stop(&l));
    }
}

/* 50 processes, released at once, make the record and create and destroy:
 * each sees exactly its own row while its sandbox lives, and the record ends
 * empty. Released together, they all set up their connection to a record
 * that does not exist yet at the same moment (SQLite refuses a concurrent
 * switch of a fresh file to WAL at once, without its busy handler). */
Test(record, fifty_concurrent_writers, .timeout = 300)
{
    enum { N = 50 };
    pid_t pids[N];
    int go[2], msgs[2];
    cr_assert_eq(pipe(go), 0);
    cr_assert_eq(pipe(msgs), 0);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        cr_assert(pids[i] >= 0);
        if (pids[i] == 0) {
            /* A writer that hangs ends on its own, so none outlives the
             * test holding its output open. */
            alarm(120);
            char c, line[512];
            close(go[1]);
            close(msgs[0]);
            if (read(go[0], &c, 1) != 0)
                _exit(6);
            sbx_error *err = NULL;
            sbx_sandbox *sb = sbx_create(tu_backend(), NULL, &err);
            if (!sb) {
                /* One write of at most PIPE_BUF: the writers' lines do not mix. */
                int n = snprintf(line, sizeof line, "writer %d: create: %s\n", i,
                                 err ? sbx_error_get0_message(err) : "no error");
                if (write(msgs[1], line, n < (int)sizeof line ? (size_t)n : sizeof line - 1) < 0)
                    _exit(7);
                _exit(2);
            }
            if (rows_for(sbx_sandbox_get0_id(sb)) != 1)
                _exit(3);
            if (sbx_sandbox_destroy(sb, &err) != 0)
                _exit(4);
            if (rows_for(sbx_sandbox_get0_id(sb)) != 0)
                _exit(5);
            sbx_sandbox_free(sb);
            _exit(0);
        }
    }
    close(go[0]);
    close(msgs[1]);
    close(go[1]);   /* the release: every writer's read() sees end of file */
    /* Every writer is waited for before any verdict, so none is left
     * running when one failed. */
    int status[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(waitpid(pids[i], &status[i], 0), pids[i]);
    char said[4096];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof said - 1 && (r = read(msgs[0], said + len, sizeof said - 1 - len)) > 0)
        len += (size_t)r;
    said[len] = '\0';
    close(msgs[0]);
    for (int i = 0; i < N; i++)
        cr_assert(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0,
                  "writer %d: status %d; the writers said: %s", i, status[i],
                  len ? said : "nothing");
    cr_assert_eq(record_int("SELECT count(*) FROM sandboxes"), 0);
    cr_assert_eq(record_int("SELECT count(*) FROM owners"), 0);
}

/* ---------------------------------------------------------------------- gc */

typedef struct gc_seen {
    int n;
    char id[8][256];
    sbx_gc_reason reason[8];
    int reaped[8];
    char error[8][512];
} gc_seen;

static int on_gc(const sbx_gc_item *item, void *ud)
{
    gc_seen *s = ud;
    if (item->reason == SBX_GC_LIST_FAILED)
        return 0;   /* docker without an Engine, say: not this test's business */
    cr_assert_lt(s->n, 8);
    snprintf(s->id[s->n], sizeof s->id[0], "%s", item->id);
    s->reason[s->n] = item->reason;
    s->reaped[s->n] = item->reaped;
    snprintf(s->error[s->n], sizeof s->error[0], "%s",
             item->error ? sbx_error_get0_message(item->error) : "");
    s->n++;
    return 0;
}

/* Child: creates an attached and a detached sandbox, writes their ids and
 * session states (four lines), then waits to be killed. */
static pid_t owner_child(int fd_out)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid)
        return pid;
    sbx_client *c = sbx_client_new_with_mode(tu_backend(), SBX_PLUGIN_MODE_IN_PROCESS, NULL);
    sbx_options *o = sbx_options_new();
    sbx_sandbox *attached = c ? sbx_sandbox_create(c, NULL, NULL) : NULL;
    sbx_options_set_detached(o, 1, NULL);
    sbx_sandbox *detached = c ? sbx_sandbox_create(c, o, NULL) : NULL;
    if (!attached || !detached)
        _exit(2);
    char *state = sbx_sandbox_session_state(attached, NULL);
    char *dstate = sbx_sandbox_session_state(detached, NULL);
    dprintf(fd_out, "%s\n%s\n%s\n%s\n", sbx_sandbox_get0_id(attached),
            sbx_sandbox_get0_id(detached), state ? state : "", dstate ? dstate : "");
    close(fd_out);
    for (;;)
        pause();
}

/* The child's four lines, split in place. */
typedef struct owned_pair {
    char *buf;
    char *attached, *detached, *state, *dstate;
} owned_pair;

static char *read_all(int fd);

static void read_pair(int fd, owned_pair *o)
{
    o->buf = read_all(fd);
    char *line[4], *s = o->buf;
    for (int i = 0; i < 4; i++) {
        char *nl = strchr(s, '\n');
        cr_assert_not_null(nl, "the owner child wrote \"%s\"", o->buf);
        *nl = '\0';
        line[i] = s;
        s = nl + 1;
    }
    o->attached = line[0];
    o->detached = line[1];
    o->state = line[2];
    o->dstate = line[3];
}

/* Destroys the detached sandbox of @o by its session state. */
static void destroy_detached(owned_pair *o)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_resume(o->dstate, &err);
    cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    cr_assert_eq(rows_for(o->detached), 0);
    free(o->buf);
}

static char *read_all(int fd)
{
    char *buf = calloc(1, 65536);
    size_t len = 0;
    ssize_t n;
    while (len < 65535 && (n = read(fd, buf + len, 65535 - len)) > 0)
        len += (size_t)n;
    return buf;
}

Test(gc, reaps_attached_of_a_killed_owner_and_keeps_detached)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t child = owner_child(p[1]);
    close(p[1]);
    owned_pair o;
    read_pair(p[0], &o);
    close(p[0]);
    const char *attached = o.attached, *detached = o.detached, *state = o.state;
    cr_assert_eq(kill(child, SIGKILL), 0);
    cr_assert_eq(waitpid(child, NULL, 0), child);

    /* A dry run reports it and touches nothing. */
    gc_seen seen = { 0 };
    sbx_error *err = NULL;
    cr_assert_eq(sbx_gc(SBX_GC_DRY_RUN, on_gc, &seen, &err), 1, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(seen.n, 1);
    cr_assert_str_eq(seen.id[0], attached);
    cr_assert_eq(seen.reason[0], SBX_GC_OWNER_GONE);
    cr_assert_eq(seen.reaped[0], 0);
    cr_assert_str_eq(seen.error[0], "");
    cr_assert_eq(rows_for(attached), 1);
    /* On local and bubblewrap the supervisor watches its owner and ends the
     * sandbox itself within 5 s (gc then only removes the row); elsewhere
     * it lives until gc. Checked from a child: a process that resumes it
     * becomes an owner. */
    int ends_itself = tu_backend_is_local() || strcmp(tu_backend(), "bubblewrap") == 0;
    if (ends_itself) {
        char *dir = tu_strdup_printf("%s/tmp/%s", g_dirs.top, attached);
        double t0 = tu_now();
        while (tu_exists(dir) && tu_now() - t0 < 5.0)
            usleep(20 * 1000);
        cr_assert(!tu_exists(dir), "%s outlived its killed owner by 5 s", dir);
        free(dir);
    } else {
        pid_t check = fork();
        cr_assert(check >= 0);
        if (check == 0) {
            setenv("SBX_PLUGIN_MODE", "inprocess", 1);
            sbx_sandbox *live = sbx_resume(state, NULL);
            _exit(live && sbx_sandbox_is_alive(live, NULL) == 1 ? 0 : 1);
        }
        int status;
        cr_assert_eq(waitpid(check, &status, 0), check);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the dry run destroyed it");
    }

    memset(&seen, 0, sizeof seen);
    cr_assert_eq(sbx_gc(0, on_gc, &seen, &err), 1);
    cr_assert_eq(seen.n, 1);
    cr_assert_str_eq(seen.id[0], attached);
    cr_assert_eq(seen.reason[0], SBX_GC_OWNER_GONE);
    cr_assert_eq(seen.reaped[0], 1, "not reaped: %s", seen.error[0]);
    cr_assert_eq(rows_for(attached), 0);
    cr_assert_eq(rows_for(detached), 1);
    sbx_sandbox *sb = sbx_resume(state, &err);
    cr_assert_null(sb, "the attached sandbox is still there");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    sbx_error_free(err);
    err = NULL;
    if (tu_backend_is_local() || strcmp(tu_backend(), "bubblewrap") == 0) {
        /* Only the detached sandbox's directory is left. */
        char *tmp = tu_strdup_printf("%s/tmp", g_dirs.top);
        char *left = tu_strdup_printf("%s/%s", tmp, detached);
        cr_assert_eq(tu_count_entries(tmp), 1);
        cr_assert(tu_exists(left), "%s is gone", left);
        free(left);
        free(tmp);
    }

    /* A second run finds nothing more. */
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(sbx_gc(0, on_gc, &seen, &err), 0);
    cr_assert_eq(seen.n, 0);

    /* The detached one is destroyed by hand. */
    char *sql = sqlite3_mprintf("SELECT count(*) FROM sandboxes WHERE provider_id = %Q AND "
                                "detached = 1", detached);
    cr_assert_eq(record_int(sql), 1);
    sqlite3_free(sql);
    destroy_detached(&o);
}

Test(gc, reaps_expired_detached)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new(tu_backend(), &err);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 1, NULL), 0);
    cr_assert_eq(sbx_options_set_detached(o, 1, NULL), 0);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    char *id = strdup(sbx_sandbox_get0_id(sb));
    gc_seen seen = { 0 };
    cr_assert_eq(sbx_gc(0, on_gc, &seen, &err), 0, "reaped before its lifetime ended");
    usleep(1300 * 1000);
    cr_assert_eq(sbx_gc(0, on_gc, &seen, &err), 1);
    cr_assert_str_eq(seen.id[0], id);
    cr_assert_eq(seen.reason[0], SBX_GC_EXPIRED);
    cr_assert_eq(seen.reaped[0], 1, "not reaped: %s", seen.error[0]);
    cr_assert_eq(rows_for(id), 0);
    cr_assert_eq(sbx_sandbox_is_alive(sb, &err), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    free(id);
}

/* A process that resumes an attached sandbox owns it too: the sandbox
 * lives while one owner does. */
Test(gc, a_resuming_process_is_an_owner)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t creator = owner_child(p[1]);
    close(p[1]);
    owned_pair o;
    read_pair(p[0], &o);
    close(p[0]);
    const char *state = o.state;
    long long a0 = owners_of(o.attached), d0 = owners_of(o.detached);

    int q[2];
    cr_assert_eq(pipe(q), 0);
    pid_t resumer = fork();
    cr_assert(resumer >= 0);
    if (resumer == 0) {
        close(q[0]);
        setenv("SBX_PLUGIN_MODE", "inprocess", 1);
        sbx_sandbox *sb = sbx_resume(state, NULL);
        /* A detached one it resumes gets no owner row: none ends it. */
        sbx_sandbox *d = sbx_resume(o.dstate, NULL);
        if (!sb || !d)
            _exit(2);
        cr_assert_eq(write(q[1], "r", 1), 1);
        close(q[1]);
        for (;;)
            pause();
    }
    close(q[1]);
    char ch;
    cr_assert_eq(read(q[0], &ch, 1), 1);
    close(q[0]);
    long long a1 = owners_of(o.attached), d1 = owners_of(o.detached);
    if (a1 != a0 + 1 || d1 != d0) {
        /* Nothing left paused behind a failed test. */
        kill(resumer, SIGKILL);
        waitpid(resumer, NULL, 0);
        kill(creator, SIGKILL);
        waitpid(creator, NULL, 0);
    }
    cr_assert_eq(a1, a0 + 1, "the resumer is not an owner");
    cr_assert_eq(d1, d0, "the detached sandbox got an owner row");
    kill(creator, SIGKILL);
    waitpid(creator, NULL, 0);
    gc_seen seen = { 0 };
    sbx_error *err = NULL;
    cr_assert_eq(sbx_gc(0, on_gc, &seen, &err), 0, "reaped while its resumer lives");
    kill(resumer, SIGKILL);
    waitpid(resumer, NULL, 0);
    cr_assert_eq(sbx_gc(0, on_gc, &seen, &err), 1);
    cr_assert_str_eq(seen.id[0], o.attached);
    cr_assert_eq(seen.reason[0], SBX_GC_OWNER_GONE);
    cr_assert_eq(seen.reaped[0], 1, "%s", seen.error[0]);
    /* The detached one stays; destroy it. */
    cr_assert_eq(rows_for(o.detached), 1);
    destroy_detached(&o);
}

Test(gc, bad_flags)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_gc(6, NULL, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "unknown flags 0x6");
    sbx_error_free(err);
}
