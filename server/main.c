/*
 * server/main.c — sbx-server: the control plane's HTTP API over libsbx.
 *
 *   sbx-server            (settings from the environment; no arguments)
 *
 * Settings (the reference's names, CONTROL-PLANE.md §0):
 *   BESPOKE_API_KEY_PEPPER               required: the HMAC key of product
 *                                        keys and the root of the session-
 *                                        state sealing key
 *   BESPOKE_CONTROL_PLANE_ADMIN_TOKEN    required: X-Control-Plane-Admin of
 *                                        POST /v1/organizations
 *   BESPOKE_CONTROL_PLANE_DB             SQLite path (default
 *                                        ./bespoke-control-plane.db) or a
 *                                        postgres:// / postgresql:// URL
 *   BESPOKE_DB_SYNCHRONOUS               "normal" (default) or "full": an
 *                                        SQLite store's synchronous mode in
 *                                        WAL (server/store.h "Durability":
 *                                        full fsyncs every commit, so an
 *                                        answered commit survives a power
 *                                        loss; normal survives a crash of
 *                                        the server, and an operating-
 *                                        system crash may lose the last
 *                                        commits). PostgreSQL keeps its
 *                                        server's synchronous_commit.
 *   BESPOKE_ALLOWED_BACKENDS             comma list (default: every
 *                                        installed backend), read at start
 *   BESPOKE_CUSTOMER_MARKUP              decimal >= 0 (default 1)
 *   BESPOKE_PROVIDER_TIMEOUT_SECS        the deadline of each provider call
 *                                        (create, terminate, reattach, an
 *                                        execute's steps; 120; 1..3600)
 *   BESPOKE_EXECUTE_TIMEOUT_SECS         the timeout of a command with none
 *                                        of its own on a sandbox without a
 *                                        lifetime (3600; 1..86400); an
 *                                        execute on a hosted backend is
 *                                        answered by its timeout + 2 s +
 *                                        the provider timeout (server/api.c)
 *   BESPOKE_SESSION_COOKIE_SECURE        "0" drops the cookie's Secure
 *   HOST, PORT                           127.0.0.1, 8000 (PORT=0: any
 *                                        free port)
 *   SBX_SERVER_CONNECTIONS               HTTP connections served at once,
 *                                        each on its own thread (256)
 *   SBX_SERVER_DB_CONNECTIONS            store connections at most (16;
 *                                        1..1024)
 *   SBX_PRICING_FILE                     the pricing data (<sbx/sbx.h>,
 *                                        sbx_cost_per_second()); one that
 *                                        cannot be read stops the start
 *   SBX_SERVER_METER_SWEEP_SECS          seconds between the execution
 *                                        outbox's sweeps for rows another
 *                                        server left unmetered and for
 *                                        abandoned executions (30;
 *                                        0.01..86400; server/meter.c)
 *   SBX_SERVER_EXECUTE_GRACE_SECS        seconds past an execution's
 *                                        deadline after which a `running`
 *                                        one is settled as abandoned (60;
 *                                        0..86400; server/api.c)
 *   SBX_SERVER_STOP_GRACE_SECS           seconds a stop waits for the
 *                                        requests in flight (30; 0..3600)
 *
 * Test hooks, never set in production: SBX_SERVER_TEST_CLOCK_OFFSET_S
 * (seconds added to the clock, for tests of time windows),
 * SBX_SERVER_TEST_CLOCK_FILE (a file whose number, UNIX seconds, is the
 * clock, read at each reading of it: a test sets it and steps it, backwards
 * too),
 * SBX_SERVER_TEST_CRASH_AFTER_PROVIDER_CREATE (the server SIGKILLs itself
 * after a provider create succeeded and before its outcome is committed),
 * SBX_SERVER_TEST_CRASH_AFTER_ANSWER (it SIGKILLs itself once an
 * execute's answer is sent, before the outbox meters it) and
 * SBX_SERVER_TEST_ASYNC_FAULT ("eventfd" or "thread": that step of making
 * the pool of provider calls fails, server/runtime.c).
 *
 * A missing required setting, or a bad value, exits with status 2 and a
 * message naming the setting (never its value when it is a secret). On
 * start it prints one line on stdout, "listening on http://HOST:PORT",
 * with the port it bound, and logs one line per request on stderr
 * (server/http.c). Before it listens it meters the executions a killed
 * server answered and left unmetered (server/meter.c, "The execution
 * outbox"), and settles the executions whose server died before
 * answering, past their deadline and grace (cp_settle_abandoned()).
 * SIGTERM or SIGINT stop it: requests in flight finish, the outbox meters
 * what they left, and it exits 0. A request still running
 * SBX_SERVER_STOP_GRACE_SECS after the signal (a long command, a provider
 * that does not answer) is left: the server says how many on stderr and
 * exits 1 at once, as if killed (its execution is settled as a killed
 * server's is). Sandboxes stay (they are detached and their sealed
 * session state is in the store) until terminated or their lifetime ends.
 */
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "http.h"
#include "server.h"
#include "util.h"

struct cp_server {
    cp_settings set;
    store *st;
    cp_runtimes *rt;
    cp_meter *meter;              /* the execution outbox's thread */
    int crash_after_answer;       /* SBX_SERVER_TEST_CRASH_AFTER_ANSWER */
};

void
cp_server_answered(cp_server *srv)
{
    if (srv->crash_after_answer)
        raise(SIGKILL);
    if (srv->meter)
        meter_outbox_wake(srv->meter);
}

const cp_settings *
cp_server_settings(const cp_server *srv)
{
    return &srv->set;
}

store *
cp_server_store(const cp_server *srv)
{
    return srv->st;
}

cp_runtimes *
cp_server_runtimes(const cp_server *srv)
{
    return srv->rt;
}

static char *
env_dup(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v ? strdup(v) : dflt ? strdup(dflt) : NULL;
}

/* Seconds from the variable @name into *@out (@dflt when unset): 0, or -1
 * having said what is wrong when it is not a number from @min to @max
 * (@range, as the message words it). */
static int
env_secs(const char *name, double dflt, double min, double max, const char *range,
         double *out)
{
    const char *v = getenv(name);
    char *end;
    double t;

    *out = dflt;
    if (!v)
        return 0;
    t = strtod(v, &end);
    if (!*v || *end || !(t >= min && t <= max)) {
        fprintf(stderr, "sbx-server: %s must be seconds from %s, not \"%s\"\n", name, range,
                v);
        return -1;
    }
    *out = t;
    return 0;
}

static int
read_settings(cp_settings *s)
{
    const char *missing[2];
    size_t nmissing = 0;
    const char *v;
    char *end;

    memset(s, 0, sizeof *s);
    s->pepper = env_dup("BESPOKE_API_KEY_PEPPER", NULL);
    s->admin_token = env_dup("BESPOKE_CONTROL_PLANE_ADMIN_TOKEN", NULL);
    if (!s->pepper || !*s->pepper)
        missing[nmissing++] = "BESPOKE_API_KEY_PEPPER";
    if (!s->admin_token || !*s->admin_token)
        missing[nmissing++] = "BESPOKE_CONTROL_PLANE_ADMIN_TOKEN";
    if (nmissing) {
        fprintf(stderr, "sbx-server: missing required setting%s: %s%s%s (set %s in the "
                        "environment)\n", nmissing > 1 ? "s" : "", missing[0],
                nmissing > 1 ? ", " : "", nmissing > 1 ? missing[1] : "",
                nmissing > 1 ? "them" : "it");
        return -1;
    }
    s->db = env_dup("BESPOKE_CONTROL_PLANE_DB", "./bespoke-control-plane.db");
    v = getenv("BESPOKE_DB_SYNCHRONOUS");
    if (v && strcasecmp(v, "normal") && strcasecmp(v, "full")) {
        fprintf(stderr, "sbx-server: BESPOKE_DB_SYNCHRONOUS must be \"normal\" or \"full\", "
                        "not \"%s\"\n", v);
        return -1;
    }
    s->db_sync_full = v && !strcasecmp(v, "full");
    v = getenv("BESPOKE_ALLOWED_BACKENDS");
    if (v) {
        char *copy = strdup(v), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *e;
            while (isspace((unsigned char)*t))
                t++;
            e = t + strlen(t);
            while (e > t && isspace((unsigned char)e[-1]))
                *--e = 0;
            if (!*t)
                continue;
            for (char *c = t; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            s->backends = realloc(s->backends, (s->nbackends + 1) * sizeof *s->backends);
            s->backends[s->nbackends++] = strdup(t);
        }
        free(copy);
        if (!s->backends)
            s->backends = calloc(1, sizeof *s->backends);   /* none enabled */
    }
    s->markup_text = env_dup("BESPOKE_CUSTOMER_MARKUP", "1");
    if (sbx_usd_parse(s->markup_text, &s->markup_pusd, NULL) < 0 || s->markup_pusd < 0) {
        fprintf(stderr, "sbx-server: BESPOKE_CUSTOMER_MARKUP must be a decimal number >= 0, "
                        "not \"%s\"\n", s->markup_text);
        return -1;
    }
    v = getenv("BESPOKE_SESSION_COOKIE_SECURE");
    s->cookie_secure = !(v && !strcmp(v, "0"));
    s->host = env_dup("HOST", "127.0.0.1");
    v = getenv("PORT");
    s->port = 8000;
    if (v) {
        long p = strtol(v, &end, 10);
        if (!*v || *end || p < 0 || p > 65535) {
            fprintf(stderr, "sbx-server: PORT must be a port number 0..65535, not \"%s\"\n", v);
            return -1;
        }
        s->port = (unsigned)p;
    }
    if (env_secs("SBX_SERVER_METER_SWEEP_SECS", 30, 0.01, 86400, "0.01 to 86400",
                 &s->meter_sweep_secs) < 0 ||
        env_secs("SBX_SERVER_EXECUTE_GRACE_SECS", 60, 0, 86400, "0 to 86400",
                 &s->execute_grace_secs) < 0 ||
        env_secs("SBX_SERVER_STOP_GRACE_SECS", 30, 0, 3600, "0 to 3600",
                 &s->stop_grace_secs) < 0 ||
        env_secs("BESPOKE_PROVIDER_TIMEOUT_SECS", 120, 1, 3600, "1 to 3600",
                 &s->provider_timeout_secs) < 0 ||
        env_secs("BESPOKE_EXECUTE_TIMEOUT_SECS", 3600, 1, 86400, "1 to 86400",
                 &s->execute_timeout_secs) < 0)
        return -1;
    v = getenv("SBX_SERVER_CONNECTIONS");
    s->connections = 256;
    if (v) {
        long t = strtol(v, &end, 10);
        if (!*v || *end || t < 1 || t > 4096) {
            fprintf(stderr, "sbx-server: SBX_SERVER_CONNECTIONS must be 1..4096, not \"%s\"\n",
                    v);
            return -1;
        }
        s->connections = (unsigned)t;
    }
    /* Read by the store (store_open); checked here with the others. */
    v = getenv("SBX_SERVER_DB_CONNECTIONS");
    if (v) {
        long t = strtol(v, &end, 10);
        if (!*v || *end || t < 1 || t > 1024) {
            fprintf(stderr, "sbx-server: SBX_SERVER_DB_CONNECTIONS must be 1..1024, not "
                            "\"%s\"\n", v);
            return -1;
        }
    }
    /* Every price comes from the pricing data: a file that cannot be read
     * would price every sandbox and execution at 0, so it stops the start
     * (sbx_cost_per_second(), <sbx/sbx.h>: $SBX_PRICING_FILE, the user's
     * file, else the bundled table). */
    {
        sbx_error *perr = NULL;
        char *table = sbx_pricing_to_json(&perr);

        if (!table) {
            fprintf(stderr, "sbx-server: %s\n", perr ? sbx_error_get0_message(perr)
                                                      : "cannot read the pricing data");
            sbx_error_free(perr);
            return -1;
        }
        free(table);
    }
    return 0;
}

static void
free_settings(cp_settings *s)
{
    if (s->pepper)
        memset(s->pepper, 0, strlen(s->pepper));
    free(s->pepper);
    free(s->admin_token);
    free(s->db);
    for (size_t i = 0; i < s->nbackends; i++)
        free(s->backends[i]);
    free(s->backends);
    free(s->markup_text);
    free(s->host);
}

int
main(int argc, char **argv)
{
    cp_server srv;
    cp_http *http;
    char *err = NULL;
    sigset_t set;
    int sig = 0;
    unsigned running;

    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: sbx-server   (settings from BESPOKE_* environment variables;"
               " see sbx-server(1))\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        printf("sbx-server %s\n", sbx_version());
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "sbx-server: unexpected argument \"%s\" (settings come from the "
                        "environment)\n", argv[1]);
        return 2;
    }
    memset(&srv, 0, sizeof srv);
    if (read_settings(&srv.set) < 0) {
        free_settings(&srv.set);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    srv.st = store_open(srv.set.db, srv.set.db_sync_full ? STORE_SYNC_FULL : STORE_SYNC_NORMAL,
                        &err);
    if (!srv.st) {
        fprintf(stderr, "sbx-server: %s\n", err);
        free(err);
        free_settings(&srv.set);
        return 1;
    }
    srv.rt = cp_runtimes_new(&srv.set);
    srv.crash_after_answer = getenv("SBX_SERVER_TEST_CRASH_AFTER_ANSWER") != NULL;
    /* Executions a killed server answered and had not metered yet. */
    {
        cx x;
        int n;

        cx_init(&x, &srv);
        n = meter_settle(&x, NULL);
        cx_done(&x);
        if (n < 0) {
            fprintf(stderr, "sbx-server: cannot meter the executions answered before the "
                            "start (store failure)\n");
            cp_runtimes_free(srv.rt);
            store_close(srv.st);
            free_settings(&srv.set);
            return 1;
        }
        if (n > 0)
            fprintf(stderr, "sbx-server: metered %d execution%s answered before the start\n",
                    n, n == 1 ? "" : "s");
        /* Executions whose server died before answering, past their
         * deadline and grace (the sweep retries after a failure). */
        meter_abandoned_pass(&srv);
    }
    srv.meter = meter_outbox_start(&srv, srv.set.meter_sweep_secs);
    if (!srv.meter) {
        fprintf(stderr, "sbx-server: cannot start the metering thread\n");
        cp_runtimes_free(srv.rt);
        store_close(srv.st);
        free_settings(&srv.set);
        return 1;
    }
    http = cp_http_start(&srv, srv.set.host, srv.set.port, srv.set.connections,
                         &err);
    if (!http) {
        fprintf(stderr, "sbx-server: %s\n", err);
        free(err);
        meter_outbox_stop(srv.meter);
        cp_runtimes_free(srv.rt);
        store_close(srv.st);
        free_settings(&srv.set);
        return 1;
    }
    if (!strcmp(store_engine(srv.st), "sqlite"))
        fprintf(stderr, "sbx-server: store sqlite, schema version %d, synchronous %s\n",
                store_schema_latest(), srv.set.db_sync_full ? "full" : "normal");
    else
        fprintf(stderr, "sbx-server: store %s, schema version %d\n", store_engine(srv.st),
                store_schema_latest());
    printf("listening on http://%s:%u\n", srv.set.host, cp_http_port(http));
    fflush(stdout);
    sigwait(&set, &sig);
    fprintf(stderr, "sbx-server: signal %d, stopping\n", sig);
    running = cp_http_stop(http, srv.set.stop_grace_secs);
    if (running > 0) {
        /* Their threads still use the runtimes and the store: nothing is
         * freed. What they would have written is what a killed server
         * leaves, and is settled as that is (their executions by the sweep
         * of any server on the store, at its start too). */
        fprintf(stderr, "sbx-server: %u request(s) still running %g s after the signal; "
                "stopping without them (exit status 1)\n", running, srv.set.stop_grace_secs);
        meter_outbox_stop(srv.meter);
        fflush(NULL);
        _exit(1);
    }
    meter_outbox_stop(srv.meter);
    /* An execute answered at its deadline may have left its provider call
     * running on a thread of its own (server/api.c): its handle and client
     * stay then, until the process ends. */
    if (!cp_runtimes_busy(srv.rt))
        cp_runtimes_free(srv.rt);
    store_close(srv.st);
    free_settings(&srv.set);
    return 0;
}
