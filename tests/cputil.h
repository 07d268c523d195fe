/*
 * tests/cputil.h — test helpers for the control plane: a throwaway store,
 * sbx-server started on a free loopback port, organisations bootstrapped
 * with the admin token, and a small HTTP client.
 *
 * The store under test: $SBX_TEST_CP_PG_URL, when set, is the URL of a
 * PostgreSQL server's maintenance database (scripts/pg-env up prints it),
 * and every cpu_store_new() makes a fresh database there; otherwise each
 * store is a new SQLite file. So one test program runs on either store.
 *
 * The server program is $SBX_SERVER, else the build tree's
 * server/sbx-server. It inherits the test's environment (SBX_PLUGIN_PATH,
 * SBX_SUPERVISOR, SBX_PLUGIN_HOST ...) plus what cpu_start() sets.
 *
 * Helpers assert with Criterion and never return on failure unless said
 * otherwise. Nothing here is thread-safe except cpu_http(), which may be
 * called from several threads at once.
 */
#ifndef SBX_CPUTIL_H
#define SBX_CPUTIL_H

#include <stddef.h>
#include <sys/types.h>

#include <json-c/json.h>

/* The pepper and admin token cpu_start() gives every server. */
#define CPU_PEPPER "test-pepper-0123456789"
#define CPU_ADMIN_TOKEN "test-admin-token-0123456789"

/* A store: an SQLite path or a PostgreSQL database URL. */
typedef struct cpu_store {
    char *url;                    /* BESPOKE_CONTROL_PLANE_DB */
    char *dir;                    /* SQLite: its directory; else NULL */
    char *pg_admin;               /* PostgreSQL: the maintenance URL */
    char *pg_name;                /* PostgreSQL: the database made */
} cpu_store;

/* 1 when the tests run on PostgreSQL ($SBX_TEST_CP_PG_URL). */
int cpu_store_is_pg(void);
/* A fresh, empty store. */
cpu_store *cpu_store_new(void);
/* Removes the store (drops the database / deletes the file); NULL ignored. */
void cpu_store_free(cpu_store *store);

/* A running sbx-server. */
typedef struct cpu_server {
    pid_t pid;
    char *url;                    /* "http://127.0.0.1:PORT" */
    char *dir;                    /* its temporary directory (logs, state) */
    char *out_path, *err_path;    /* its stdout and stderr */
} cpu_server;

/* Starts sbx-server on @store with PORT=0, HOST=127.0.0.1, the pepper and
 * admin token above, BESPOKE_ALLOWED_BACKENDS=local and
 * XDG_STATE_HOME=<its dir>/state, then each "KEY=VALUE" of @env (NULL-
 * terminated, may be NULL; "KEY=" with nothing after unsets KEY), and waits
 * (10 s at most) for its "listening on URL" line. The server gets SIGTERM
 * when the test process dies (PR_SET_PDEATHSIG). */
cpu_server *cpu_start(const cpu_store *store, const char *const *env);
/* Starts @n servers as cpu_start() does, all forked before any is waited
 * for (so they open @store at the same moment), into @out[0..n-1]. */
void cpu_start_many(const cpu_store *store, const char *const *env, size_t n, cpu_server **out);
/* As cpu_start(), but returns NULL (no assertion) when the server exits
 * before listening; *@status gets its wait status then. */
cpu_server *cpu_try_start(const cpu_store *store, const char *const *env, int *status);
/* The stderr of the last server cpu_try_start() saw exit before listening
 * (new string; "" when none). */
char *cpu_last_stderr(void);
/* Sends @sig to the server and waits for it to exit; returns the wait
 * status. */
int cpu_signal(cpu_server *srv, int sig);
/* Terminates (DELETE) every sandbox not yet destroyed of the organisations
 * cpu_bootstrap() made in this process, then SIGTERM, wait, and removes
 * its directory; frees @srv. NULL ignored. A server already stopped (by
 * cpu_signal) is only freed. */
void cpu_stop(cpu_server *srv);
/* The server's stdout or stderr so far (free()). */
char *cpu_read_log(const cpu_server *srv, int which_stderr);

/* An HTTP response. */
typedef struct cpu_response {
    long status;
    char *body;                   /* NUL-terminated; "" when empty */
    size_t body_len;
    char *headers;                /* raw response header lines */
    json_object *json;            /* parsed body, or NULL */
} cpu_response;

/* Sends @method @url+@path with optional bearer @key, extra "Name: value"
 * @headers (NULL-terminated, may be NULL) and @body (NULL: none; sent as
 * application/json). Never asserts; status 0 on a transport failure.
 * Thread-safe. */
cpu_response *cpu_http(const char *url, const char *method, const char *path, const char *key,
                       const char *const *headers, const char *body);
void cpu_response_free(cpu_response *res);
/* The value of response header @name (case-insensitive), new string, or
 * NULL. */
char *cpu_response_header(const cpu_response *res, const char *name);
/* The string at @path ("a.b.0.c") in @res's JSON, borrowed; NULL when
 * absent or not a string. */
const char *cpu_jstr(const cpu_response *res, const char *path);
/* The JSON value at @path, borrowed; NULL when absent. */
json_object *cpu_jget(json_object *root, const char *path);

/* POST /v1/organizations with the admin token; returns the initial key's
 * secret (free()) and stores the organisation's id in *@org_id (free())
 * when not NULL. */
char *cpu_bootstrap(const cpu_server *srv, const char *name, char **org_id);
/* POST /v1/sandboxes {"backend":"local"} (plus @extra_json's fields when
 * not NULL, an object's text); asserts 201 and returns the id (free()). */
char *cpu_create_local(const cpu_server *srv, const char *key, const char *extra_json);

#endif
