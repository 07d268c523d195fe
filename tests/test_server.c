/*
 * tests/test_server.c — sbx-server through HTTP, on the local backend:
 * every endpoint and status code of the contract this server serves
 * (CONTROL-PLANE.md §1–§3, §5, §8), scopes, tenant isolation, idempotency
 * under concurrency, replays, a crash between the provider create and the
 * commit, restarts (sealed session state, which opens under the server's
 * pepper only: through a server with another and directly, server/util.c
 * being linked in), two servers on one database,
 * the metering outbox (each answered execute metered once, as answered,
 * also when its server is SIGKILLed right after the answer), provider
 * failures of terminate and execute (the e2b contract fake, its faults set
 * at run time), a provider that does not answer (create, execute and
 * terminate answered 504 within BESPOKE_PROVIDER_TIMEOUT_SECS and the
 * execute's margin), the cases CASE-07, CASE-17, CASE-36 and CASE-38, and
 * request bodies read as pydantic's lax mode reads them (through HTTP, and
 * server/lax.c's coercions directly, linked in).
 *
 * The store is SQLite, or PostgreSQL when SBX_TEST_CP_PG_URL is set
 * (scripts/test runs this program both ways; tests/cputil.h).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include "../server/lax.h"         /* cp_lax_int(), cp_lax_float(), cp_lax_bool() */
#include "../server/util.h"        /* cp_seal(), cp_unseal(), cp_hmac_hex() */
#include "cputil.h"
#include "testutil.h"

static char *db_list(const char *sql);

/* Request id @rid was metered exactly once: one usage event and its two
 * ledger entries (asserts). */
static void assert_metered_once(const char *rid);
/* GET /v1/costs on @s: the organisation's answered executions are metered
 * before it answers (server/meter.c, the execution outbox). */
static void settle(const struct cpu_server *s, const char *k);

static cpu_store *store;
static cpu_server *srv;
static char *key, *org;

static void
setup(void)
{
    store = cpu_store_new();
    srv = cpu_start(store, NULL);
    key = cpu_bootstrap(srv, "acme", &org);
}

static void
teardown(void)
{
    cpu_stop(srv);
    cpu_store_free(store);
    free(key);
    free(org);
    srv = NULL;
    store = NULL;
    key = org = NULL;
}

TestSuite(server, .init = setup, .fini = teardown, .timeout = 60);

/* The response, asserted to have @status. */
static cpu_response *
req_s(long status, const char *method, const char *path, const char *k,
      const char *const *headers, const char *body)
{
    cpu_response *r = cpu_http(srv->url, method, path, k, headers, body);

    cr_assert_eq(r->status, status, "%s %s: want %ld, got %ld: %s", method, path, status,
                 r->status, r->body);
    return r;
}

/* Asserts the body is {"detail": @detail}. */
static void
expect_detail(const cpu_response *r, const char *detail)
{
    json_object *d = cpu_jget(r->json, "detail");

    cr_assert(json_object_is_type(d, json_type_string), "detail of %s", r->body);
    cr_assert_str_eq(json_object_get_string(d), detail);
    cr_assert_eq(json_object_object_length(r->json), 1);
}

static void
expect_status_detail(long status, const char *method, const char *path, const char *k,
                     const char *const *headers, const char *body, const char *detail)
{
    cpu_response *r = req_s(status, method, path, k, headers, body);

    expect_detail(r, detail);
    cpu_response_free(r);
}

static char *
path_of(const char *fmt, const char *id)
{
    return tu_strdup_printf(fmt, id);
}

/* Creates a key of the organisation of @k with @scopes_json; its secret. */
static char *
make_key(const char *k, const char *scopes_json, char **key_id)
{
    char *body = tu_strdup_printf("{\"name\":\"k\",\"scopes\":%s}", scopes_json), *s;
    cpu_response *r = req_s(201, "POST", "/v1/api-keys", k, NULL, body);

    s = strdup(cpu_jstr(r, "secret"));
    if (key_id)
        *key_id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    free(body);
    return s;
}

/* Executes @body in sandbox @id with optional Idempotency-Key @rid. */
static cpu_response *
execute(const char *k, const char *id, const char *rid, const char *body, long status)
{
    char *p = path_of("/v1/sandboxes/%s/execute", id), *h = NULL;
    const char *hdr[] = { NULL, NULL };
    cpu_response *r;

    if (rid) {
        h = tu_strdup_printf("Idempotency-Key: %s", rid);
        hdr[0] = h;
    }
    r = req_s(status, "POST", p, k, hdr, body);
    free(p);
    free(h);
    return r;
}

static void
terminate(const char *k, const char *id)
{
    char *p = path_of("/v1/sandboxes/%s", id);
    cpu_response *r = req_s(200, "DELETE", p, k, NULL, NULL);

    cr_assert_str_eq(cpu_jstr(r, "status"), "destroyed");
    cpu_response_free(r);
    free(p);
}

/* ---------------------------------------------------------------- basics */

Test(server, healthz_and_security_headers)
{
    static const char *const want[][2] = {
        { "Content-Security-Policy",
          "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
          "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
          "frame-ancestors 'none'; object-src 'none'" },
        { "X-Content-Type-Options", "nosniff" },
        { "X-Frame-Options", "DENY" },
        { "Referrer-Policy", "no-referrer" },
        { "Permissions-Policy", "camera=(), microphone=(), geolocation=()" },
        { "Cross-Origin-Opener-Policy", "same-origin" },
        { "Strict-Transport-Security", "max-age=63072000; includeSubDomains" },
    };
    struct { const char *method, *path, *key; long status; } cases[] = {
        { "GET", "/healthz", NULL, 200 },
        { "GET", "/v1/sandboxes", NULL, 401 },
        { "GET", "/nope", NULL, 404 },
        { "PUT", "/v1/sandboxes", key, 405 },
        { "OPTIONS", "/v1/sandboxes", NULL, 405 },
        { "GET", "/v1/sandboxes", key, 200 },
        { "HEAD", "/healthz", NULL, 200 },
        { "DELETE", "/v1/sandboxes/sbx_0", key, 404 },
    };
    cpu_response *r = req_s(200, "GET", "/healthz", NULL, NULL, NULL);

    cr_assert_str_eq(r->body, "{\"status\":\"ok\"}");
    cpu_response_free(r);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = req_s(cases[i].status, cases[i].method, cases[i].path, cases[i].key, NULL, NULL);
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            char *v = cpu_response_header(r, want[k][0]);
            cr_assert(v, "%s %s lacks %s", cases[i].method, cases[i].path, want[k][0]);
            cr_assert_str_eq(v, want[k][1]);
            free(v);
        }
        if (r->status == 404 && !strcmp(cases[i].path, "/nope"))
            expect_detail(r, "Not Found");
        if (r->status == 405)
            expect_detail(r, "Method Not Allowed");
        cpu_response_free(r);
    }
}

Test(server, missing_settings_are_named)
{
    const char *env1[] = { "BESPOKE_API_KEY_PEPPER=", NULL };
    const char *env2[] = { "BESPOKE_API_KEY_PEPPER=", "BESPOKE_CONTROL_PLANE_ADMIN_TOKEN=", NULL };
    const char *env3[] = { "BESPOKE_CUSTOMER_MARKUP=lots", NULL };
    int st = 0;

    cr_assert_null(cpu_try_start(store, env1, &st));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    cr_assert_null(cpu_try_start(store, env2, &st));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    cr_assert_null(cpu_try_start(store, env3, &st));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

Test(server, help_and_version)
{
    const char *prog = getenv("SBX_SERVER") ? getenv("SBX_SERVER")
                                            : SBX_BUILD_DIR "/server/sbx-server";
    char *cmd = tu_strdup_printf("'%s' --version", prog), line[256] = "";
    FILE *p = popen(cmd, "r");
    int st;

    cr_assert(p);
    cr_assert(fgets(line, sizeof line, p));
    st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert_str_eq(line, "sbx-server " SBX_VERSION_STRING "\n");
    free(cmd);
    cmd = tu_strdup_printf("'%s' --port 1 2>&1", prog);
    p = popen(cmd, "r");
    cr_assert(fgets(line, sizeof line, p));
    st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    cr_assert_str_eq(line, "sbx-server: unexpected argument \"--port\" (settings come from the "
                           "environment)\n");
    free(cmd);
}

Test(server, missing_settings_message)
{
    /* The message names exactly what is missing. */
    const char *prog = getenv("SBX_SERVER") ? getenv("SBX_SERVER")
                                            : SBX_BUILD_DIR "/server/sbx-server";
    char *cmd = tu_strdup_printf("env -u BESPOKE_API_KEY_PEPPER -u BESPOKE_CONTROL_PLANE_ADMIN_TOKEN"
                                 " BESPOKE_CONTROL_PLANE_ADMIN_TOKEN=x '%s' 2>&1", prog);
    FILE *p = popen(cmd, "r");
    char line[512] = "";
    int st;

    cr_assert(p);
    cr_assert(fgets(line, sizeof line, p));
    st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    cr_assert_str_eq(line, "sbx-server: missing required setting: BESPOKE_API_KEY_PEPPER "
                           "(set it in the environment)\n");
    free(cmd);
}

Test(server, bad_connection_limit_is_named)
{
    const char *prog = getenv("SBX_SERVER") ? getenv("SBX_SERVER")
                                            : SBX_BUILD_DIR "/server/sbx-server";
    const char *bad[] = { "0", "4097", "x" };

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *cmd = tu_strdup_printf("env BESPOKE_API_KEY_PEPPER=p"
                                     " BESPOKE_CONTROL_PLANE_ADMIN_TOKEN=a"
                                     " SBX_SERVER_CONNECTIONS=%s '%s' 2>&1", bad[i], prog);
        char *want = tu_strdup_printf("sbx-server: SBX_SERVER_CONNECTIONS must be 1..4096, not"
                                      " \"%s\"\n", bad[i]);
        FILE *p = popen(cmd, "r");
        char line[512] = "";
        int st;

        cr_assert(p);
        cr_assert(fgets(line, sizeof line, p));
        st = pclose(p);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        cr_assert_str_eq(line, want);
        free(cmd);
        free(want);
    }
}

/* Settings the server reads elsewhere are named at the start as well: a
 * store connection count that is no number, a pricing file that cannot be
 * read (every price would be 0); a PostgreSQL URL that fails shows no
 * password, in the user part or in the query. Exit 2 for a setting, 1 for
 * a store that cannot be opened. */
Test(server, settings_read_elsewhere_are_named_at_start)
{
    const char *prog = getenv("SBX_SERVER") ? getenv("SBX_SERVER")
                                            : SBX_BUILD_DIR "/server/sbx-server";
    static const struct {
        const char *env, *want;
        int status;
    } cases[] = {
        { "SBX_SERVER_DB_CONNECTIONS=abc",
          "sbx-server: SBX_SERVER_DB_CONNECTIONS must be 1..1024, not \"abc\"\n", 2 },
        { "SBX_PRICING_FILE=/nonexistent/pricing.json",
          "sbx-server: cannot read the pricing file /nonexistent/pricing.json: "
          "json_object_from_file: error opening file /nonexistent/pricing.json: No such file "
          "or directory\n", 2 },
        { "BESPOKE_CONTROL_PLANE_DB='postgresql://u:hunter2@127.0.0.1:1/x?sslmode=disable"
          "&password=hunter3&connect_timeout=2'",
          "sbx-server: cannot open the postgresql store postgresql://u:***@127.0.0.1:1/x?"
          "sslmode=disable&password=***&connect_timeout=2: connect: connection to server at "
          "\"127.0.0.1\", port 1 failed: Connection refused\n", 1 },
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *cmd = tu_strdup_printf("env BESPOKE_API_KEY_PEPPER=p"
                                     " BESPOKE_CONTROL_PLANE_ADMIN_TOKEN=a PORT=0 %s '%s' 2>&1",
                                     cases[i].env, prog);
        FILE *p = popen(cmd, "r");
        char line[1024] = "";
        int st;

        cr_assert(p);
        cr_assert(fgets(line, sizeof line, p));
        while (fgetc(p) != EOF)
            ;
        st = pclose(p);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == cases[i].status, "%s: status %d",
                  cases[i].env, st);
        cr_expect_str_eq(line, cases[i].want);
        cr_expect_null(strstr(line, "hunter"), "%s", line);
        free(cmd);
    }
}

Test(server, bad_meter_sweep_execute_grace_and_stop_grace_are_named)
{
    const char *prog = getenv("SBX_SERVER") ? getenv("SBX_SERVER")
                                            : SBX_BUILD_DIR "/server/sbx-server";
    static const struct {
        const char *var, *value, *range;
    } bad[] = {
        { "SBX_SERVER_METER_SWEEP_SECS", "0", "0.01 to 86400" },
        { "SBX_SERVER_METER_SWEEP_SECS", "0.001", "0.01 to 86400" },
        { "SBX_SERVER_METER_SWEEP_SECS", "86401", "0.01 to 86400" },
        { "SBX_SERVER_METER_SWEEP_SECS", "x", "0.01 to 86400" },
        { "SBX_SERVER_METER_SWEEP_SECS", "1s", "0.01 to 86400" },
        { "SBX_SERVER_METER_SWEEP_SECS", "", "0.01 to 86400" },
        { "SBX_SERVER_EXECUTE_GRACE_SECS", "-1", "0 to 86400" },
        { "SBX_SERVER_EXECUTE_GRACE_SECS", "86401", "0 to 86400" },
        { "SBX_SERVER_EXECUTE_GRACE_SECS", "nan", "0 to 86400" },
        { "SBX_SERVER_STOP_GRACE_SECS", "-1", "0 to 3600" },
        { "SBX_SERVER_STOP_GRACE_SECS", "3601", "0 to 3600" },
        { "SBX_SERVER_STOP_GRACE_SECS", "x", "0 to 3600" },
        { "SBX_SERVER_EXECUTE_GRACE_SECS", "", "0 to 86400" },
    };

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *cmd = tu_strdup_printf("env BESPOKE_API_KEY_PEPPER=p"
                                     " BESPOKE_CONTROL_PLANE_ADMIN_TOKEN=a"
                                     " %s='%s' '%s' 2>&1", bad[i].var, bad[i].value, prog);
        char *want = tu_strdup_printf("sbx-server: %s must be seconds from %s, not \"%s\"\n",
                                      bad[i].var, bad[i].range, bad[i].value);
        FILE *p = popen(cmd, "r");
        char line[512] = "";
        int st;

        cr_assert(p);
        cr_assert(fgets(line, sizeof line, p));
        st = pclose(p);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: status %#x", cmd, st);
        cr_assert_str_eq(line, want);
        free(cmd);
        free(want);
    }
}

/* A connection to @srv's port with GET /healthz sent on it (keep-alive):
 * the socket; *@answered 1 when an answer came within 5 s, 0 when the
 * server closed the connection instead. */
static int
healthz_on_new_connection(const cpu_server *s, int *answered)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    const char *rq = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct pollfd pfd;
    char buf[2048];
    ssize_t n;

    a.sin_port = htons((uint16_t)atoi(strrchr(s->url, ':') + 1));
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    /* The send may fail when the server already closed it. */
    (void)send(fd, rq, strlen(rq), MSG_NOSIGNAL);
    pfd.fd = fd;
    pfd.events = POLLIN;
    cr_assert_eq(poll(&pfd, 1, 5000), 1, "no answer and no close within 5 s");
    n = recv(fd, buf, sizeof buf - 1, 0);
    *answered = n > 0 && strncmp(buf, "HTTP/1.1 200", 12) == 0;
    return fd;
}

/* SBX_SERVER_CONNECTIONS bounds the connections served at once: with 1, a
 * second connection is closed while the first stays open, and served once
 * it is gone. */
Test(server, connection_limit)
{
    const char *env[] = { "SBX_SERVER_CONNECTIONS=1", NULL };
    int first, second, third, ok = 0;

    cpu_stop(srv);
    srv = cpu_start(store, env);
    first = healthz_on_new_connection(srv, &ok);
    cr_assert_eq(ok, 1);
    second = healthz_on_new_connection(srv, &ok);
    cr_assert_eq(ok, 0);
    close(second);
    close(first);
    for (int i = 0; i < 100; i++) {
        third = healthz_on_new_connection(srv, &ok);
        close(third);
        if (ok)
            break;
        usleep(20000);         /* the first's thread is ending */
    }
    cr_assert_eq(ok, 1);
}

Test(server, organizations_bootstrap)
{
    const char *bad[] = { "X-Control-Plane-Admin: wrong", NULL };
    const char *good[] = { "X-Control-Plane-Admin: " CPU_ADMIN_TOKEN, NULL };
    cpu_response *r;
    const char *secret;

    expect_status_detail(401, "POST", "/v1/organizations", NULL, NULL, "{\"name\":\"x\"}",
                         "invalid control-plane admin token");
    expect_status_detail(401, "POST", "/v1/organizations", NULL, bad, "{\"name\":\"x\"}",
                         "invalid control-plane admin token");
    r = req_s(422, "POST", "/v1/organizations", NULL, good, "{\"name\":\"\"}");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "string_too_short");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "name");
    cpu_response_free(r);
    r = req_s(422, "POST", "/v1/organizations", NULL, good, "{}");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "missing");
    cpu_response_free(r);
    expect_status_detail(422, "POST", "/v1/organizations", NULL, good, "{\"name\":\"   \"}",
                         "organization name must not be blank");
    r = req_s(201, "POST", "/v1/organizations", NULL, good, "{\"name\":\"beta\"}");
    cr_assert_str_eq(cpu_jstr(r, "organization.name"), "beta");
    cr_assert_eq(strncmp(cpu_jstr(r, "organization.id"), "org_", 4), 0);
    cr_assert_eq(strlen(cpu_jstr(r, "organization.id")), 36);
    cr_assert_str_eq(cpu_jstr(r, "api_key.name"), "Initial key");
    secret = cpu_jstr(r, "api_key.secret");
    cr_assert_eq(strlen(secret), 52);
    cr_assert_eq(strncmp(secret, "bsk_live_", 9), 0);
    cr_assert_eq(strncmp(cpu_jstr(r, "api_key.prefix"), secret, 17), 0);
    cr_assert_eq(strlen(cpu_jstr(r, "api_key.prefix")), 17);
    cr_assert_str_eq(cpu_jstr(r, "api_key.scopes.0"), "*");
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "api_key.scopes")), 1);
    cr_assert_str_eq(cpu_jstr(r, "api_key.created_at"), cpu_jstr(r, "organization.created_at"));
    cpu_response_free(r);
}

Test(server, authentication)
{
    const char *basic[] = { "Authorization: Basic abc", NULL };
    char *k2, *k2_id, *p;
    cpu_response *r;

    expect_status_detail(401, "GET", "/v1/sandboxes", NULL, NULL, NULL,
                         "Bearer API key or dashboard session required");
    expect_status_detail(401, "GET", "/v1/sandboxes", NULL, basic, NULL, "Bearer API key required");
    expect_status_detail(401, "GET", "/v1/sandboxes", "nope", NULL, NULL, "invalid API key");
    expect_status_detail(401, "GET", "/v1/sandboxes", "bsk_live_nope", NULL, NULL,
                         "invalid API key");
    /* A key that expired. */
    r = req_s(201, "POST", "/v1/api-keys", key, NULL,
              "{\"name\":\"old\",\"expires_at\":\"2020-01-01T00:00:00Z\"}");
    cr_assert_str_eq(cpu_jstr(r, "secret") + 0, cpu_jstr(r, "secret"));
    expect_status_detail(401, "GET", "/v1/sandboxes", cpu_jstr(r, "secret"), NULL, NULL,
                         "API key has expired");
    cpu_response_free(r);
    /* A revoked key. */
    k2 = make_key(key, "[\"sandboxes:read\"]", &k2_id);
    r = req_s(200, "GET", "/v1/sandboxes", k2, NULL, NULL);
    cpu_response_free(r);
    p = path_of("/v1/api-keys/%s", k2_id);
    r = req_s(204, "DELETE", p, key, NULL, NULL);
    cr_assert_eq(r->body_len, 0);
    cpu_response_free(r);
    expect_status_detail(404, "DELETE", p, key, NULL, NULL, "API key not found");
    expect_status_detail(401, "GET", "/v1/sandboxes", k2, NULL, NULL, "invalid API key");
    free(p);
    free(k2);
    free(k2_id);
}

/* An execute reads the key's row in its own first statement (with the
 * sandbox and the request id's execution): the same answers as every other
 * route, in the same order (401, then 403, then 422, then 404), and a
 * revocation committed through another server of the database refuses the
 * very next execute. No refused execute leaves an executions row. */
Test(server, execute_authentication)
{
    cpu_server *b = cpu_start(store, NULL);
    char *sa = cpu_create_local(srv, key, NULL), *kb = cpu_bootstrap(srv, "beta", NULL);
    char *kread = make_key(key, "[\"sandboxes:read\"]", NULL), *kx_id, *kx, *p, *n;
    const char *body = "{\"command\":\"true\"}";
    cpu_response *r;

    kx = make_key(key, "[\"sandboxes:execute\"]", &kx_id);
    p = path_of("/v1/sandboxes/%s/execute", sa);
    expect_status_detail(401, "POST", p, NULL, NULL, body,
                         "Bearer API key or dashboard session required");
    expect_status_detail(401, "POST", p, "bsk_live_nope", NULL, body, "invalid API key");
    expect_status_detail(401, "POST", p, "bsk_live_nope", NULL, "{", "invalid API key");
    r = req_s(201, "POST", "/v1/api-keys", key, NULL,
              "{\"name\":\"old\",\"expires_at\":\"2020-01-01T00:00:00Z\"}");
    expect_status_detail(401, "POST", p, cpu_jstr(r, "secret"), NULL, body,
                         "API key has expired");
    cpu_response_free(r);
    expect_status_detail(403, "POST", p, kread, NULL, body,
                         "API key requires scope: sandboxes:execute");
    expect_status_detail(403, "POST", p, kread, NULL, "{",
                         "API key requires scope: sandboxes:execute");
    r = req_s(422, "POST", p, kx, NULL, "{\"command\":\"true\",\"code\":\"1\"}");
    cpu_response_free(r);
    /* Another organisation's key: no such sandbox; an unknown sandbox alike. */
    expect_status_detail(404, "POST", p, kb, NULL, body, "sandbox not found");
    expect_status_detail(404, "POST", "/v1/sandboxes/sbx_nope/execute", kx, NULL, body,
                         "sandbox not found");
    r = execute(kx, sa, "auth-1", "{\"command\":\"echo ok\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "ok\n");
    cpu_response_free(r);
    /* Revoked through server B: the next execute through A is refused. */
    n = path_of("/v1/api-keys/%s", kx_id);
    r = cpu_http(b->url, "DELETE", n, key, NULL, NULL);
    cr_assert_eq(r->status, 204, "%s", r->body);
    cpu_response_free(r);
    r = execute(kx, sa, "auth-2", body, 401);
    expect_detail(r, "invalid API key");
    cpu_response_free(r);
    /* A replay of the answered request id is refused as well. */
    r = execute(kx, sa, "auth-1", body, 401);
    expect_detail(r, "invalid API key");
    cpu_response_free(r);
    free(n);
    n = db_list("SELECT request_id FROM executions ORDER BY request_id");
    cr_assert_str_eq(n, "auth-1");
    free(n);
    terminate(key, sa);
    cpu_stop(b);
    free(p);
    free(kx);
    free(kx_id);
    free(kread);
    free(kb);
    free(sa);
}

Test(server, api_keys)
{
    cpu_response *r;
    char *id;

    r = req_s(201, "POST", "/v1/api-keys", key, NULL,
              "{\"name\":\"ci\",\"scopes\":[\"usage:read\",\"sandboxes:read\",\"usage:read\"],"
              "\"expires_at\":\"2099-01-02T03:04:05+02:00\"}");
    cr_assert_str_eq(cpu_jstr(r, "name"), "ci");
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "scopes")), 2);
    cr_assert_str_eq(cpu_jstr(r, "scopes.0"), "sandboxes:read");
    cr_assert_str_eq(cpu_jstr(r, "scopes.1"), "usage:read");
    cr_assert_eq(strlen(cpu_jstr(r, "secret")), 52);
    cr_assert_eq(json_object_object_length(r->json), 6);
    id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/api-keys", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 2);
    cr_assert_str_eq(cpu_jstr(r, "0.name"), "Initial key");
    cr_assert_str_eq(cpu_jstr(r, "1.id"), id);
    cr_assert_str_eq(cpu_jstr(r, "1.expires_at"), "2099-01-02T01:04:05+00:00");
    cr_assert_null(cpu_jget(r->json, "1.secret"));
    cr_assert_null(cpu_jget(r->json, "0.secret"));
    cr_assert_null(cpu_jget(r->json, "1.revoked_at"));
    cr_assert(json_object_object_get_ex(cpu_jget(r->json, "1"), "revoked_at", NULL));
    cr_assert(strstr(r->body, "bsk_live_") == NULL || strstr(r->body, "\"prefix\""));
    cpu_response_free(r);
    expect_status_detail(422, "POST", "/v1/api-keys", key, NULL, "{\"name\":\"x\",\"scopes\":[]}",
                         "at least one API-key scope is required");
    expect_status_detail(422, "POST", "/v1/api-keys", key, NULL,
                         "{\"name\":\"x\",\"expires_at\":\"2099-01-01T00:00:00\"}",
                         "expires_at must include a timezone");
    r = req_s(201, "POST", "/v1/api-keys", key, NULL, "{\"name\":\"all\"}");
    cr_assert_str_eq(cpu_jstr(r, "scopes.0"), "*");
    cpu_response_free(r);
    expect_status_detail(404, "DELETE", "/v1/api-keys/key_unknown", key, NULL, NULL,
                         "API key not found");
    free(id);
}

/* The ten can_* flags of GET /v1/session, in the contract's order
 * (CONTROL-PLANE.md §1), with the scopes each needs. */
static const char *const session_flags[10] = {
    "can_terminate",        /* sandboxes:terminate */
    "can_view_policy",      /* policies:read and usage:read */
    "can_manage_policy",    /* policies:write */
    "can_view_providers",   /* providers:read */
    "can_manage_providers", /* providers:write */
    "can_create",           /* sandboxes:create */
    "can_view_alerts",      /* alerts:read */
    "can_view_audit",       /* audit:read */
    "can_export",           /* exports:read */
    "can_view_usage",       /* usage:read */
};

/* GET /v1/session with @k: 200, and every member of the answer is as
 * given: api_key_id @key_id, scopes @scopes_json (the array's text), role
 * @role, auth_mode "api_key", the ten flags (a string of ten 0/1 in
 * session_flags' order), and nothing else (no csrf_token without a
 * cookie). */
static void
expect_session(const char *k, const char *key_id, const char *scopes_json, const char *role,
               const char *flags)
{
    cpu_response *r = req_s(200, "GET", "/v1/session", k, NULL, NULL);

    cr_assert_str_eq(cpu_jstr(r, "api_key_id"), key_id);
    cr_assert_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "scopes"),
                                                    JSON_C_TO_STRING_PLAIN), scopes_json);
    cr_assert_str_eq(cpu_jstr(r, "role"), role);
    cr_assert_str_eq(cpu_jstr(r, "auth_mode"), "api_key");
    for (size_t i = 0; i < 10; i++) {
        json_object *v = cpu_jget(r->json, session_flags[i]);
        cr_assert(json_object_is_type(v, json_type_boolean), "%s of %s", session_flags[i],
                  r->body);
        cr_assert_eq(json_object_get_boolean(v), flags[i] == '1', "%s with %s: %s",
                     session_flags[i], scopes_json, r->body);
    }
    cr_assert_null(cpu_jget(r->json, "csrf_token"));
    /* api_key_id, scopes, role, the ten flags, auth_mode */
    cr_assert_eq(json_object_object_length(r->json), 14, "%s", r->body);
    cpu_response_free(r);
}

Test(server, session)
{
    char *id, *k;
    cpu_response *r;

    /* The organisation's first key: every scope ("*"). */
    r = req_s(200, "GET", "/v1/api-keys", key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "0.name"), "Initial key");
    id = strdup(cpu_jstr(r, "0.id"));
    cpu_response_free(r);
    expect_session(key, id, "[\"*\"]", "administrator", "1111111111");
    free(id);
    /* Named scopes that make an administrator: the flags are theirs
     * (policies:read without usage:read does not view the policy). */
    k = make_key(key, "[\"providers:write\",\"policies:write\",\"policies:read\"]", &id);
    expect_session(k, id, "[\"policies:read\",\"policies:write\",\"providers:write\"]",
                   "administrator", "0010100000");
    free(k);
    free(id);
    /* Every read scope: an observer that views all. */
    k = make_key(key, "[\"usage:read\",\"policies:read\",\"exports:read\",\"audit:read\","
                      "\"alerts:read\",\"providers:read\"]", &id);
    expect_session(k, id, "[\"alerts:read\",\"audit:read\",\"exports:read\",\"policies:read\","
                          "\"providers:read\",\"usage:read\"]",
                   "observer", "0101001111");
    free(k);
    free(id);
    k = make_key(key, "[\"sandboxes:terminate\",\"sandboxes:read\"]", &id);
    expect_session(k, id, "[\"sandboxes:read\",\"sandboxes:terminate\"]", "operator",
                   "1000000000");
    free(k);
    free(id);
    /* Only sandboxes:read: an observer that can do none of it. */
    k = make_key(key, "[\"sandboxes:read\"]", &id);
    expect_session(k, id, "[\"sandboxes:read\"]", "observer", "0000000000");
    free(k);
    free(id);
    /* Legacy sandboxes:write: create, execute, terminate (an operator). */
    k = make_key(key, "[\"sandboxes:write\"]", &id);
    expect_session(k, id, "[\"sandboxes:write\"]", "operator", "1000010000");
    free(k);
    free(id);
}

/* Each 422 item of a constraint is pydantic v2's for it, as FastAPI sends
 * it (CONTROL-PLANE.md §0): type, loc (an item's index or key too), msg,
 * input and ctx ({"gt"}, {"le"}, too_long's {field_type, max_length,
 * actual_length}, datetime_from_date_parsing's {"error"}, and a
 * ValueError's {"error": {}}). */
Test(server, validation_items_are_pydantics)
{
    static const char *const cases[][4] = {
        /* method, path ("X": the sandbox's execute), body, the answer */
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"cpu\":0}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input "
          "should be greater than 0\",\"input\":0,\"ctx\":{\"gt\":0.0}}]}" },
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"cpu\":-1.5}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input "
          "should be greater than 0\",\"input\":-1.5,\"ctx\":{\"gt\":0.0}}]}" },
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"memory_mb\":-1}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":-1,\"ctx\":{\"gt\":0}}]}" },
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"disk_mb\":0}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"disk_mb\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":0,\"ctx\":{\"gt\":0}}]}" },
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"timeout_secs\":0}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":0,\"ctx\":{\"gt\":0}}]}" },
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"env_vars\":{\"A\":\"x\",\"B\":5}}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"env_vars\",\"B\"],\"msg\":"
          "\"Input should be a valid string\",\"input\":5}]}" },
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"env_vars\":{\"A=B\":\"x\"}}",
          "{\"detail\":[{\"type\":\"value_error\",\"loc\":[\"body\",\"env_vars\"],\"msg\":"
          "\"Value error, an environment variable name must not be empty or contain '='\","
          "\"input\":\"A=B\",\"ctx\":{\"error\":{}}}]}" },
        { "POST", "X", "{\"command\":\"true\",\"timeout_secs\":0}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":0,\"ctx\":{\"gt\":0.0}}]}" },
        { "POST", "X", "{\"command\":\"true\",\"args\":[\"a\",1]}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"args\",1],\"msg\":"
          "\"Input should be a valid string\",\"input\":1}]}" },
        { "POST", "X", "{\"command\":\"true\",\"env\":{\"A\":[]}}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"env\",\"A\"],\"msg\":"
          "\"Input should be a valid string\",\"input\":[]}]}" },
        { "POST", "X", "{\"command\":\"true\",\"env\":{\"=\":\"x\"}}",
          "{\"detail\":[{\"type\":\"value_error\",\"loc\":[\"body\",\"env\"],\"msg\":"
          "\"Value error, an environment variable name must not be empty or contain '='\","
          "\"input\":\"=\",\"ctx\":{\"error\":{}}}]}" },
        { "POST", "X", "{\"language\":\"python\"}",
          "{\"detail\":[{\"type\":\"value_error\",\"loc\":[\"body\"],\"msg\":\"Value error, "
          "provide exactly one of code or command\",\"input\":{\"language\":\"python\"},"
          "\"ctx\":{\"error\":{}}}]}" },
        { "POST", "X", "{\"command\":\"true\",\"stdin_b64\":\"!\"}",
          "{\"detail\":[{\"type\":\"value_error\",\"loc\":[\"body\",\"stdin_b64\"],\"msg\":"
          "\"Value error, stdin_b64 must be standard base64\",\"input\":\"!\","
          "\"ctx\":{\"error\":{}}}]}" },
        { "POST", "/v1/api-keys", "{\"name\":\"k\",\"scopes\":[\"a\",7]}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"scopes\",1],\"msg\":"
          "\"Input should be a valid string\",\"input\":7}]}" },
        { "POST", "/v1/api-keys", "{\"name\":\"k\",\"expires_at\":\"soon\"}",
          "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\","
          "\"expires_at\"],\"msg\":\"Input should be a valid datetime or date, input is too "
          "short\",\"input\":\"soon\",\"ctx\":{\"error\":\"input is too short\"}}]}" },
        { "POST", "/v1/api-keys", "{\"name\":\"k\",\"expires_at\":\"20x6-01-01T00:00:00Z\"}",
          "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\","
          "\"expires_at\"],\"msg\":\"Input should be a valid datetime or date, invalid character "
          "in year\",\"input\":\"20x6-01-01T00:00:00Z\",\"ctx\":{\"error\":\"invalid character "
          "in year\"}}]}" },
        { "POST", "/v1/api-keys", "{\"name\":\"k\",\"expires_at\":\"2026/01/01T00:00:00Z\"}",
          "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\","
          "\"expires_at\"],\"msg\":\"Input should be a valid datetime or date, invalid date "
          "separator, expected `-`\",\"input\":\"2026/01/01T00:00:00Z\",\"ctx\":{\"error\":"
          "\"invalid date separator, expected `-`\"}}]}" },
        { "POST", "/v1/api-keys", "{\"name\":\"k\",\"expires_at\":\"2026-13-01T00:00:00Z\"}",
          "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\","
          "\"expires_at\"],\"msg\":\"Input should be a valid datetime or date, month value is "
          "outside expected range of 1-12\",\"input\":\"2026-13-01T00:00:00Z\",\"ctx\":"
          "{\"error\":\"month value is outside expected range of 1-12\"}}]}" },
        { "POST", "/v1/api-keys", "{\"name\":\"k\",\"expires_at\":\"2026-02-30T00:00:00Z\"}",
          "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\","
          "\"expires_at\"],\"msg\":\"Input should be a valid datetime or date, day value is "
          "outside expected range\",\"input\":\"2026-02-30T00:00:00Z\",\"ctx\":"
          "{\"error\":\"day value is outside expected range\"}}]}" },
        { "POST", "/v1/api-keys", "{\"name\":\"k\",\"expires_at\":\"2026-01-01T25:00:00Z\"}",
          "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\","
          "\"expires_at\"],\"msg\":\"Input should be a valid datetime or date, unexpected extra "
          "characters at the end of the input\",\"input\":\"2026-01-01T25:00:00Z\",\"ctx\":"
          "{\"error\":\"unexpected extra characters at the end of the input\"}}]}" },
        { "GET", "/v1/costs?start=2026-1-01T00:00:00Z", NULL,
          "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"query\","
          "\"start\"],\"msg\":\"Input should be a valid datetime or date, invalid character in "
          "month\",\"input\":\"2026-1-01T00:00:00Z\",\"ctx\":{\"error\":\"invalid character in "
          "month\"}}]}" },
    };
    char *id = cpu_create_local(srv, key, NULL), *ex = path_of("/v1/sandboxes/%s/execute", id);
    cpu_response *r;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = strcmp(cases[i][1], "X") ? cases[i][1] : ex;
        r = req_s(422, cases[i][0], path, key, NULL, cases[i][2]);
        cr_expect_str_eq(r->body, cases[i][3], "%s %s %s", cases[i][0], path,
                         cases[i][2] ? cases[i][2] : "");
        cpu_response_free(r);
    }
    /* 65 scopes: pydantic's too_long of a list of at most 64. */
    {
        size_t cap = 64 + 65 * 8, len = 0;
        char *b = malloc(cap);
        len += (size_t)snprintf(b, cap, "{\"name\":\"k\",\"scopes\":[");
        for (int i = 0; i < 65; i++)
            len += (size_t)snprintf(b + len, cap - len, "%s\"s%d\"", i ? "," : "", i);
        snprintf(b + len, cap - len, "]}");
        r = req_s(422, "POST", "/v1/api-keys", key, NULL, b);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.type"), "too_long");
        cr_expect_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "detail.0.loc"),
                                                        JSON_C_TO_STRING_PLAIN),
                         "[\"body\",\"scopes\"]");
        cr_expect_str_eq(cpu_jstr(r, "detail.0.msg"),
                         "List should have at most 64 items after validation, not 65");
        cr_expect_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "detail.0.ctx"),
                                                        JSON_C_TO_STRING_PLAIN),
                         "{\"field_type\":\"List\",\"max_length\":64,\"actual_length\":65}");
        cr_expect_eq(json_object_array_length(cpu_jget(r->json, "detail.0.input")), 65);
        cpu_response_free(r);
        free(b);
    }
    /* An expiry that is no text at all: pydantic's datetime_type. */
    r = req_s(422, "POST", "/v1/api-keys", key, NULL, "{\"name\":\"k\",\"expires_at\":true}");
    cr_expect_str_eq(r->body, "{\"detail\":[{\"type\":\"datetime_type\",\"loc\":[\"body\","
                              "\"expires_at\"],\"msg\":\"Input should be a valid datetime\","
                              "\"input\":true}]}");
    cpu_response_free(r);
    free(ex);
    free(id);
}

/* A body with several errors is answered with every one, each an item of
 * the 422's list in pydantic's order: the model's fields in order, a
 * list's or a dict's items in order; a list longer than its max_length is
 * its too_long alone, whatever its items. The answers are pydantic 2.13.4's
 * for models of the same shape (FastAPI's "body" before each loc). */
Test(server, a_body_with_several_errors_gets_them_all)
{
    static const char *const cases[][3] = {
        /* path ("X": the sandbox's execute), body, the answer */
        { "/v1/sandboxes",
          "{\"backend\":5,\"cpu\":\"x\",\"memory_mb\":0,\"timeout_secs\":1.5,\"env_vars\":{\"A\":"
          "1,\"B\":2},\"allow_internet\":\"maybe\",\"git_ref\":3}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"backend\"],\"msg\":\"Input s"
          "hould be a valid string\",\"input\":5},{\"type\":\"float_parsing\",\"loc\":[\"body"
          "\",\"cpu\"],\"msg\":\"Input should be a valid number, unable to parse string a"
          "s a number\",\"input\":\"x\"},{\"type\":\"greater_than\",\"loc\":[\"body\",\"memory_mb"
          "\"],\"msg\":\"Input should be greater than 0\",\"input\":0,\"ctx\":{\"gt\":0}},{\"ty"
          "pe\":\"int_from_float\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":\"Input should b"
          "e a valid integer, got a number with a fractional part\",\"input\":1.5},{\"t"
          "ype\":\"string_type\",\"loc\":[\"body\",\"env_vars\",\"A\"],\"msg\":\"Input should be "
          "a valid string\",\"input\":1},{\"type\":\"string_type\",\"loc\":[\"body\",\"env_vars"
          "\",\"B\"],\"msg\":\"Input should be a valid string\",\"input\":2},{\"type\":\"bool_p"
          "arsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg\":\"Input should be a valid b"
          "oolean, unable to interpret input\",\"input\":\"maybe\"},{\"type\":\"string_type"
          "\",\"loc\":[\"body\",\"git_ref\"],\"msg\":\"Input should be a valid string\",\"input"
          "\":3}]}" },
        { "/v1/sandboxes",
          "{\"cpu\":-1,\"disk_mb\":\"2_0x\"}",
          "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"backend\"],\"msg\":\"Field requi"
          "red\",\"input\":{\"cpu\":-1,\"disk_mb\":\"2_0x\"}},{\"type\":\"greater_than\",\"loc\":["
          "\"body\",\"cpu\"],\"msg\":\"Input should be greater than 0\",\"input\":-1,\"ctx\":{\""
          "gt\":0.0}},{\"type\":\"int_parsing\",\"loc\":[\"body\",\"disk_mb\"],\"msg\":\"Input sh"
          "ould be a valid integer, unable to parse string as an integer\",\"input\":\""
          "2_0x\"}]}" },
        /* The reference's model has gpu before timeout_secs. */
        { "/v1/sandboxes",
          "{\"timeout_secs\":0,\"gpu\":5,\"backend\":\"local\"}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"gpu\"],\"msg\":\"Input s"
          "hould be a valid string\",\"input\":5},{\"type\":\"greater_than\",\"loc\":[\"body"
          "\",\"timeout_secs\"],\"msg\":\"Input should be greater than 0\",\"input\":0,\"ctx"
          "\":{\"gt\":0}}]}" },
        { "X",
          "{\"code\":1,\"command\":2,\"args\":[\"a\",3,4],\"env\":{\"A\":1,\"B\":[]},\"cwd\":5,\"tim"
          "eout_secs\":0}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"code\"],\"msg\":\"Input shou"
          "ld be a valid string\",\"input\":1},{\"type\":\"string_type\",\"loc\":[\"body\",\"co"
          "mmand\"],\"msg\":\"Input should be a valid string\",\"input\":2},{\"type\":\"strin"
          "g_type\",\"loc\":[\"body\",\"args\",1],\"msg\":\"Input should be a valid string\",\""
          "input\":3},{\"type\":\"string_type\",\"loc\":[\"body\",\"args\",2],\"msg\":\"Input sho"
          "uld be a valid string\",\"input\":4},{\"type\":\"string_type\",\"loc\":[\"body\",\"e"
          "nv\",\"A\"],\"msg\":\"Input should be a valid string\",\"input\":1},{\"type\":\"stri"
          "ng_type\",\"loc\":[\"body\",\"env\",\"B\"],\"msg\":\"Input should be a valid string\""
          ",\"input\":[]},{\"type\":\"string_type\",\"loc\":[\"body\",\"cwd\"],\"msg\":\"Input sho"
          "uld be a valid string\",\"input\":5},{\"type\":\"greater_than\",\"loc\":[\"body\",\""
          "timeout_secs\"],\"msg\":\"Input should be greater than 0\",\"input\":0,\"ctx\":{\""
          "gt\":0.0}}]}" },
        { "/v1/api-keys",
          "{\"name\":\"\",\"scopes\":\"x\",\"expires_at\":\"soon\"}",
          "{\"detail\":[{\"type\":\"string_too_short\",\"loc\":[\"body\",\"name\"],\"msg\":\"Strin"
          "g should have at least 1 character\",\"input\":\"\",\"ctx\":{\"min_length\":1}},{"
          "\"type\":\"list_type\",\"loc\":[\"body\",\"scopes\"],\"msg\":\"Input should be a vali"
          "d list\",\"input\":\"x\"},{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\","
          "\"expires_at\"],\"msg\":\"Input should be a valid datetime or date, input is "
          "too short\",\"input\":\"soon\",\"ctx\":{\"error\":\"input is too short\"}}]}" },
        { "/v1/api-keys",
          "{\"scopes\":[1,\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\""
          ",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\""
          ",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\""
          ",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"],\"expires_at\":\"2026"
          "-13-01T00:00:00Z\"}",
          "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"name\"],\"msg\":\"Field required"
          "\",\"input\":{\"scopes\":[1,\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\""
          "a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\""
          "a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\""
          "a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"],\"expires"
          "_at\":\"2026-13-01T00:00:00Z\"}},{\"type\":\"too_long\",\"loc\":[\"body\",\"scopes\"]"
          ",\"msg\":\"List should have at most 64 items after validation, not 65\",\"inp"
          "ut\":[1,\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\""
          "a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\""
          "a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\""
          "a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"],\"ctx\":{\"field_type\":\"Lis"
          "t\",\"max_length\":64,\"actual_length\":65}},{\"type\":\"datetime_from_date_pars"
          "ing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":\"Input should be a valid datetime"
          " or date, month value is outside expected range of 1-12\",\"input\":\"2026-1"
          "3-01T00:00:00Z\",\"ctx\":{\"error\":\"month value is outside expected range of"
          " 1-12\"}}]}" },
    };
    char *id = cpu_create_local(srv, key, NULL), *ex = path_of("/v1/sandboxes/%s/execute", id);

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = strcmp(cases[i][0], "X") ? cases[i][0] : ex;
        cpu_response *r = req_s(422, "POST", path, key, NULL, cases[i][1]);
        cr_expect_str_eq(r->body, cases[i][2], "%s %s", path, cases[i][1]);
        cpu_response_free(r);
    }
    /* A handler's own check (an expiry without a time zone, no scope)
     * comes after the model's: with a field's error it is not answered. */
    cpu_response *r = req_s(422, "POST", "/v1/api-keys", key, NULL,
                            "{\"scopes\":[],\"expires_at\":\"2026-01-01T00:00:00\"}");
    cr_expect_str_eq(r->body, "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"name\"],"
                              "\"msg\":\"Field required\",\"input\":{\"scopes\":[],"
                              "\"expires_at\":\"2026-01-01T00:00:00\"}}]}");
    cpu_response_free(r);
    /* Without a field's error, the handler's checks in the reference's
     * order: the scopes before the expiry's time zone, start's before
     * end's. */
    expect_status_detail(422, "POST", "/v1/api-keys", key, NULL,
                         "{\"name\":\"k\",\"scopes\":[],\"expires_at\":\"2099-01-01T00:00:00\"}",
                         "at least one API-key scope is required");
    expect_status_detail(422, "GET", "/v1/costs?start=2026-01-01T00:00:00&end=2026-01-02T00:00:00",
                         key, NULL, NULL, "start must include a timezone");
    /* The query of /v1/costs: group_by, start, end. */
    r = req_s(422, "GET", "/v1/costs?group_by=week&start=soon&end=2026-01-01T00:00:00", key, NULL,
              NULL);
    cr_expect_str_eq(r->body,
                     "{\"detail\":[{\"type\":\"string_pattern_mismatch\",\"loc\":[\"query\","
                     "\"group_by\"],\"msg\":\"String should match pattern '^(sandbox|backend|day)$'"
                     "\",\"input\":\"week\",\"ctx\":{\"pattern\":\"^(sandbox|backend|day)$\"}},"
                     "{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"query\",\"start\"],"
                     "\"msg\":\"Input should be a valid datetime or date, input is too short\","
                     "\"input\":\"soon\",\"ctx\":{\"error\":\"input is too short\"}}]}");
    cpu_response_free(r);
    r = req_s(422, "GET", "/v1/costs?group_by=day&start=2026-01-01T00:00:00&end=x", key, NULL,
              NULL);
    cr_expect_str_eq(r->body,
                     "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"query\","
                     "\"end\"],\"msg\":\"Input should be a valid datetime or date, input is too "
                     "short\",\"input\":\"x\",\"ctx\":{\"error\":\"input is too short\"}}]}");
    cpu_response_free(r);
    free(ex);
    terminate(key, id);
}

/* An API key's name is stripped as Python's str.strip() strips (Unicode
 * whitespace too), stored so, and refused when nothing is left, before the
 * scopes' and the expiry's checks (the reference's issue_api_key()); a
 * query argument given twice is its last value, as Starlette reads it. */
Test(server, api_key_names_are_stripped_and_queries_take_the_last_value)
{
    cpu_response *r = req_s(201, "POST", "/v1/api-keys", key, NULL,
                            "{\"name\":\" \\t k 1\\u3000\\n\",\"scopes\":[\"usage:read\"]}");
    cr_assert_str_eq(cpu_jstr(r, "name"), "k 1");
    char *id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/api-keys", key, NULL, NULL);
    int seen = 0;
    for (size_t i = 0; i < json_object_array_length(r->json); i++) {
        json_object *k = json_object_array_get_idx(r->json, i), *v;
        if (json_object_object_get_ex(k, "id", &v) && !strcmp(json_object_get_string(v), id)) {
            cr_assert_str_eq(tu_json_str(k, "name"), "k 1");
            seen = 1;
        }
    }
    cr_assert(seen, "the key is not listed");
    cpu_response_free(r);
    free(id);
    expect_status_detail(422, "POST", "/v1/api-keys", key, NULL,
                         "{\"name\":\" \\u00a0\\u2028\\u3000\\u0085\\u001c \"}",
                         "API-key name must not be empty");
    expect_status_detail(422, "POST", "/v1/api-keys", key, NULL,
                         "{\"name\":\"  \",\"scopes\":[],\"expires_at\":\"2099-01-01T00:00:00\"}",
                         "API-key name must not be empty");
    /* Not whitespace to Python: kept. */
    r = req_s(201, "POST", "/v1/api-keys", key, NULL, "{\"name\":\"\\u200b\"}");
    cr_assert_str_eq(cpu_jstr(r, "name"), "\xe2\x80\x8b");
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/costs?group_by=week&group_by=day", key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "group_by"), "day");
    cpu_response_free(r);
    expect_status_detail(422, "GET", "/v1/costs?start=2026-01-01T00:00:00Z&start=2026-01-01", key,
                         NULL, NULL, "start must include a timezone");
}

/* A datetime field takes Unix time as pydantic v2 does: a number or a
 * numeric string, seconds when within ±2e10, else milliseconds; what it
 * refuses is its exact 422 item: a number out of range datetime_parsing, a
 * numeric string out of range the date parser's words (year 0 after it),
 * any other string the date parser's. Values as pydantic 2.13 gives them. */
Test(server, datetimes_take_unix_time_as_pydantic_does)
{
    static const char *const ok[][2] = {
        { "4102444800", "2100-01-01T00:00:00+00:00" },
        { "\"4102444800\"", "2100-01-01T00:00:00+00:00" },
        { "4102444800.5", "2100-01-01T00:00:00.500000+00:00" },
        { "\"4102444800123\"", "2100-01-01T00:00:00.123000+00:00" },
        { "4102444800123", "2100-01-01T00:00:00.123000+00:00" },
        { "\"+4102444800\"", "2100-01-01T00:00:00+00:00" },
        { "\".5\"", "1970-01-01T00:00:00.500000+00:00" },
        { "\"1.5e3\"", "1970-01-01T00:25:00+00:00" },
        /* Whole milliseconds exact to the microsecond, as pydantic gives. */
        { "253402300799999", "9999-12-31T23:59:59.999000+00:00" },
        { "253402300799001", "9999-12-31T23:59:59.001000+00:00" },
        /* Years before 1000 with four digits, as isoformat writes them. */
        { "\"0385-07-25T00:00:00Z\"", "0385-07-25T00:00:00+00:00" },
        { "-50000000000000", "0385-07-25T07:06:40+00:00" },
    };
    static const char *const refused[][2] = {
        { "253402300800000",
          "{\"type\":\"datetime_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":\"Input "
          "should be a valid datetime, dates after 9999 are not supported as unix timestamps\","
          "\"input\":253402300800000,\"ctx\":{\"error\":\"dates after 9999 are not supported "
          "as unix timestamps\"}}" },
        { "\"253402300800000\"",
          "{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":"
          "\"Input should be a valid datetime or date, dates after 9999 are not supported as "
          "unix timestamps\",\"input\":\"253402300800000\",\"ctx\":{\"error\":\"dates after "
          "9999 are not supported as unix timestamps\"}}" },
        { "-62135596800001",
          "{\"type\":\"datetime_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":\"Input "
          "should be a valid datetime, year 0 is out of range\",\"input\":-62135596800001,"
          "\"ctx\":{\"error\":\"year 0 is out of range\"}}" },
        { "\"-62135596800001\"",
          "{\"type\":\"datetime_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":\"Input "
          "should be a valid datetime, year 0 is out of range\",\"input\":\"-62135596800001\","
          "\"ctx\":{\"error\":\"year 0 is out of range\"}}" },
        { "-100000000000000",
          "{\"type\":\"datetime_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":\"Input "
          "should be a valid datetime, dates before 0000 are not supported as unix timestamps\","
          "\"input\":-100000000000000,\"ctx\":{\"error\":\"dates before 0000 are not supported "
          "as unix timestamps\"}}" },
        { "\"1e9\"",
          "{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":"
          "\"Input should be a valid datetime or date, input is too short\",\"input\":\"1e9\","
          "\"ctx\":{\"error\":\"input is too short\"}}" },
        { "\"99999999999999999999\"",
          "{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":"
          "\"Input should be a valid datetime or date, invalid date separator, expected `-`\","
          "\"input\":\"99999999999999999999\",\"ctx\":{\"error\":\"invalid date separator, "
          "expected `-`\"}}" },
        { "\"2030-01-01T00:00:00+24:00\"",
          "{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":"
          "\"Input should be a valid datetime or date, unexpected extra characters at the end of "
          "the input\",\"input\":\"2030-01-01T00:00:00+24:00\",\"ctx\":{\"error\":\"unexpected "
          "extra characters at the end of the input\"}}" },
        { "\"2030-01-01T00:00:00-23:60\"",
          "{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":"
          "\"Input should be a valid datetime or date, unexpected extra characters at the end of "
          "the input\",\"input\":\"2030-01-01T00:00:00-23:60\",\"ctx\":{\"error\":\"unexpected "
          "extra characters at the end of the input\"}}" },
        { "\"4102444800 \"",
          "{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"body\",\"expires_at\"],\"msg\":"
          "\"Input should be a valid datetime or date, invalid date separator, expected `-`\","
          "\"input\":\"4102444800 \",\"ctx\":{\"error\":\"invalid date separator, expected "
          "`-`\"}}" },
    };
    cpu_response *r;

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char *b = tu_strdup_printf("{\"name\":\"unix-%zu\",\"expires_at\":%s}", i, ok[i][0]);
        char *name = tu_strdup_printf("unix-%zu", i);
        int seen = 0;
        r = req_s(201, "POST", "/v1/api-keys", key, NULL, b);
        cpu_response_free(r);
        r = req_s(200, "GET", "/v1/api-keys", key, NULL, NULL);
        for (size_t j = 0; j < json_object_array_length(r->json); j++) {
            json_object *o = json_object_array_get_idx(r->json, j), *n, *e;
            if (json_object_object_get_ex(o, "name", &n) &&
                !strcmp(json_object_get_string(n), name)) {
                cr_expect(json_object_object_get_ex(o, "expires_at", &e));
                cr_expect_str_eq(json_object_get_string(e), ok[i][1], "%s", ok[i][0]);
                seen = 1;
            }
        }
        cr_expect(seen, "%s", name);
        cpu_response_free(r);
        free(name);
        free(b);
    }
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char *b = tu_strdup_printf("{\"name\":\"k\",\"expires_at\":%s}", refused[i][0]);
        char *want = tu_strdup_printf("{\"detail\":[%s]}", refused[i][1]);
        r = req_s(422, "POST", "/v1/api-keys", key, NULL, b);
        cr_expect_str_eq(r->body, want, "%s", refused[i][0]);
        cpu_response_free(r);
        free(want);
        free(b);
    }
    /* /v1/costs's window: the query's text alike. */
    r = req_s(200, "GET", "/v1/costs?start=0&end=4102444800123", key, NULL, NULL);
    cr_expect_str_eq(r->body, "{\"group_by\":\"sandbox\",\"items\":[]}");
    cpu_response_free(r);
    r = req_s(422, "GET", "/v1/costs?start=4102444800&end=4102444800000", key, NULL, NULL);
    cr_expect_str_eq(r->body, "{\"detail\":\"start must be before end\"}");
    cpu_response_free(r);
    r = req_s(422, "GET", "/v1/costs?end=253402300800000", key, NULL, NULL);
    cr_expect_str_eq(r->body,
                     "{\"detail\":[{\"type\":\"datetime_from_date_parsing\",\"loc\":[\"query\","
                     "\"end\"],\"msg\":\"Input should be a valid datetime or date, dates after "
                     "9999 are not supported as unix timestamps\",\"input\":\"253402300800000\","
                     "\"ctx\":{\"error\":\"dates after 9999 are not supported as unix "
                     "timestamps\"}}]}");
    cpu_response_free(r);
}

/* A key's name is 1 to 200 characters (Unicode code points, as pydantic
 * counts them, not bytes): 201 is pydantic's string_too_long with its ctx,
 * "" string_too_short; 200 two-byte characters are a valid name. */
Test(server, api_key_name_length)
{
    char name[2 * 201 + 1], *body, *want;
    cpu_response *r;

    memset(name, 'n', 201);
    name[201] = 0;
    body = tu_strdup_printf("{\"name\":\"%s\"}", name);
    r = req_s(422, "POST", "/v1/api-keys", key, NULL, body);
    want = tu_strdup_printf("{\"detail\":[{\"type\":\"string_too_long\",\"loc\":[\"body\","
                            "\"name\"],\"msg\":\"String should have at most 200 characters\","
                            "\"input\":\"%s\",\"ctx\":{\"max_length\":200}}]}", name);
    cr_assert_str_eq(r->body, want);
    cpu_response_free(r);
    free(body);
    free(want);
    r = req_s(422, "POST", "/v1/api-keys", key, NULL, "{\"name\":\"\"}");
    cr_assert_str_eq(r->body, "{\"detail\":[{\"type\":\"string_too_short\",\"loc\":[\"body\","
                              "\"name\"],\"msg\":\"String should have at least 1 character\","
                              "\"input\":\"\",\"ctx\":{\"min_length\":1}}]}");
    cpu_response_free(r);
    /* 200 characters: made, the name as sent. */
    name[200] = 0;
    body = tu_strdup_printf("{\"name\":\"%s\"}", name);
    r = req_s(201, "POST", "/v1/api-keys", key, NULL, body);
    cr_assert_str_eq(cpu_jstr(r, "name"), name);
    cpu_response_free(r);
    free(body);
    /* 200 characters of two bytes each (U+00E9): made; 201: refused. */
    for (size_t i = 0; i < 201; i++)
        memcpy(name + 2 * i, "\xc3\xa9", 2);
    name[2 * 200] = 0;
    body = tu_strdup_printf("{\"name\":\"%s\"}", name);
    r = req_s(201, "POST", "/v1/api-keys", key, NULL, body);
    cr_assert_str_eq(cpu_jstr(r, "name"), name);
    cpu_response_free(r);
    free(body);
    name[2 * 200] = '\xc3';
    name[2 * 201] = 0;
    body = tu_strdup_printf("{\"name\":\"%s\"}", name);
    r = req_s(422, "POST", "/v1/api-keys", key, NULL, body);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "string_too_long");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.input"), name);
    cpu_response_free(r);
    free(body);
    /* The organisation's name is held to the same rule. */
    {
        const char *admin[] = { "X-Control-Plane-Admin: " CPU_ADMIN_TOKEN, NULL };
        body = tu_strdup_printf("{\"name\":\"%s\"}", name);
        r = req_s(422, "POST", "/v1/organizations", NULL, admin, body);
        cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "string_too_long");
        cr_assert_eq(json_object_get_int(cpu_jget(r->json, "detail.0.ctx.max_length")), 200);
        cpu_response_free(r);
        free(body);
        name[2 * 200] = 0;
        body = tu_strdup_printf("{\"name\":\"%s\"}", name);
        r = req_s(201, "POST", "/v1/organizations", NULL, admin, body);
        cr_assert_str_eq(cpu_jstr(r, "organization.name"), name);
        cpu_response_free(r);
        free(body);
    }
}

/* ---------------------------------------------------------------- scopes */

Test(server, scopes_on_every_route)
{
    struct { const char *method, *path, *body, *scope; } routes[] = {
        { "GET", "/v1/sandboxes", NULL, "sandboxes:read" },
        { "POST", "/v1/sandboxes", "{\"backend\":\"local\"}", "sandboxes:create" },
        { "GET", "/v1/sandboxes/%s", NULL, "sandboxes:read" },
        { "GET", "/v1/sandboxes/%s/detail", NULL, "sandboxes:read" },
        { "POST", "/v1/sandboxes/%s/execute", "{\"command\":\"true\"}", "sandboxes:execute" },
        { "DELETE", "/v1/sandboxes/%s", NULL, "sandboxes:terminate" },
        { "GET", "/v1/costs", NULL, "usage:read" },
        { "GET", "/v1/api-keys", NULL, "keys:write" },
        { "POST", "/v1/api-keys", "{\"name\":\"x\"}", "keys:write" },
        { "DELETE", "/v1/api-keys/key_x", NULL, "keys:write" },
    };
    char *id = cpu_create_local(srv, key, NULL);
    char *none = make_key(key, "[\"alerts:read\"]", NULL);
    char *legacy = make_key(key, "[\"sandboxes:write\"]", NULL);
    cpu_response *r;

    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        char *p = path_of(routes[i].path, id), *want;
        char *one = make_key(key, (want = tu_strdup_printf("[\"%s\"]", routes[i].scope)), NULL);
        free(want);
        want = tu_strdup_printf("API key requires scope: %s", routes[i].scope);
        expect_status_detail(403, routes[i].method, p, none, NULL, routes[i].body, want);
        /* The one scope is enough to pass the check. */
        r = cpu_http(srv->url, routes[i].method, p, one, NULL, routes[i].body);
        cr_assert_neq(r->status, 403, "%s %s with %s: %s", routes[i].method, p,
                      routes[i].scope, r->body);
        cr_assert_neq(r->status, 401);
        cpu_response_free(r);
        free(want);
        free(one);
        free(p);
    }
    /* Legacy sandboxes:write: create, execute, terminate; not read. */
    r = req_s(201, "POST", "/v1/sandboxes", legacy, NULL, "{\"backend\":\"local\"}");
    {
        char *p = path_of("/v1/sandboxes/%s", cpu_jstr(r, "id"));
        cpu_response *g = req_s(403, "GET", p, legacy, NULL, NULL);
        cpu_response_free(g);
        g = req_s(200, "DELETE", p, legacy, NULL, NULL);
        cpu_response_free(g);
        free(p);
    }
    cpu_response_free(r);
    free(id);
    free(none);
    free(legacy);
}

/* ---------------------------------------------------------------- sandboxes */

Test(server, sandbox_lifecycle)
{
    const char *stale[] = { "If-Match: \"1\"", NULL };
    const char *badm[] = { "If-Match: abc", NULL };
    const char *weak[] = { "If-Match: W/\"2\"", NULL };
    cpu_response *r;
    char *id, *p, *pe;

    r = req_s(201, "POST", "/v1/sandboxes", key, NULL,
              "{\"backend\":\" LOCAL \",\"timeout_secs\":60,\"env_vars\":"
              "{\"B\":\"2\",\"A\":\"1\"},\"unknown_field\":1,\"image\":null}");
    id = strdup(cpu_jstr(r, "id"));
    cr_assert_eq(strncmp(id, "sbx_", 4), 0);
    cr_assert_str_eq(cpu_jstr(r, "backend"), "local");
    cr_assert_str_eq(cpu_jstr(r, "status"), "running");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 2);
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "attempt_count")), 1);
    cr_assert_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "config"),
                                                    JSON_C_TO_STRING_PLAIN),
                     "{\"env_var_names\":[\"A\",\"B\"],\"timeout_secs\":60}");
    cr_assert_str_eq(cpu_jstr(r, "retry_status"), "not_applicable");
    cr_assert_str_eq(cpu_jstr(r, "hourly_rate_usd"), "0");
    cr_assert_str_eq(cpu_jstr(r, "currency"), "USD");
    cr_assert_str_eq(cpu_jstr(r, "cost_state"), "estimated");
    cr_assert_str_eq(cpu_jstr(r, "creator_api_key_name"), "Initial key");
    cr_assert_null(cpu_jget(r->json, "organization_id"));
    cr_assert_null(cpu_jget(r->json, "latest_error"));
    cr_assert(cpu_jstr(r, "provider_resource_id"));
    cr_assert(cpu_jstr(r, "expires_at"));
    cr_assert_str_eq(cpu_jstr(r, "requested_at"), cpu_jstr(r, "created_at"));
    cr_assert_eq(json_object_object_length(r->json), 31);
    cpu_response_free(r);

    p = path_of("/v1/sandboxes/%s", id);
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "id"), id);
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 1);
    cr_assert_str_eq(cpu_jstr(r, "0.id"), id);
    cpu_response_free(r);

    /* CASE-09 through HTTP: separate streams, exit codes, env. */
    r = execute(key, id, NULL, "{\"command\":\"echo out; echo err >&2; echo out2\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "out\nout2\n");
    cr_assert_str_eq(cpu_jstr(r, "stderr"), "err\n");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "exit_code")), 0);
    cr_assert_eq(strncmp(cpu_jstr(r, "request_id"), "req_", 4), 0);
    cr_assert_str_eq(cpu_jstr(r, "usage.provider_cost_usd"), "0");
    cr_assert_null(cpu_jget(r->json, "stdout_b64"));
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"echo boom >&2; echo $A$B; exit 3\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "12\n");
    cr_assert_str_eq(cpu_jstr(r, "stderr"), "boom\n");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "exit_code")), 3);
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"printf\",\"args\":[\"%s|\",\"a b\",\"$A\"]}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "a b|$A|");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"code\":\"echo $((6*7))\",\"language\":\"bash\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "42\n");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"true\",\"code\":\"x\"}", 422);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.msg"), "Value error, provide exactly one of code or command");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{}", 422);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "value_error");
    cpu_response_free(r);
    /* A field of the wrong type is named, with what was sent (pydantic's
     * list detail). */
    {
        static const char *const bad[][2] = {
            { "{\"code\":5}", "code" }, { "{\"command\":[\"ls\"]}", "command" },
            { "{\"code\":\"1\",\"language\":7}", "language" },
            { "{\"command\":\"true\",\"cwd\":false}", "cwd" },
        };
        static const char *const input[] = { "5", "[ \"ls\" ]", "7", "false" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            r = execute(key, id, NULL, bad[i][0], 422);
            cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "string_type");
            cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.0"), "body");
            cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), bad[i][1]);
            cr_assert_str_eq(cpu_jstr(r, "detail.0.msg"), "Input should be a valid string");
            cr_assert_str_eq(json_object_to_json_string(cpu_jget(r->json, "detail.0.input")),
                             input[i]);
            cpu_response_free(r);
        }
    }

    /* Detail: attempts and executions, newest first. */
    pe = path_of("/v1/sandboxes/%s/detail", id);
    r = req_s(200, "GET", pe, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "sandbox.id"), id);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "attempts")), 1);
    cr_assert_str_eq(cpu_jstr(r, "attempts.0.status"), "succeeded");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "attempts.0.attempt_number")), 1);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "executions")), 4);
    cr_assert_str_eq(cpu_jstr(r, "executions.0.status"), "completed");
    cr_assert_str_eq(cpu_jstr(r, "executions.0.response.stdout"), "42\n");
    cr_assert_str_eq(cpu_jstr(r, "executions.3.response.stdout"), "out\nout2\n");
    cr_assert(json_object_is_type(cpu_jget(r->json, "provider_observations"), json_type_array));
    cr_assert(json_object_object_get_ex(r->json, "cost", NULL));
    cpu_response_free(r);

    /* Terminate: If-Match checks. */
    expect_status_detail(422, "DELETE", p, key, badm, NULL, "If-Match must be a sandbox version");
    expect_status_detail(409, "DELETE", p, key, stale, NULL,
                         "sandbox changed; refresh before terminating");
    r = req_s(200, "DELETE", p, key, weak, NULL);
    cr_assert_str_eq(cpu_jstr(r, "status"), "destroyed");
    cr_assert_str_eq(cpu_jstr(r, "termination_reason"), "operator");
    cr_assert_str_eq(cpu_jstr(r, "terminated_by_api_key_name"), "Initial key");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 4);
    cr_assert(cpu_jstr(r, "stopping_at"));
    cr_assert(cpu_jstr(r, "terminated_at"));
    cpu_response_free(r);
    /* Destroyed: idempotent 200 before the version check. */
    r = req_s(200, "DELETE", p, key, stale, NULL);
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 4);
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"true\"}", 409);
    expect_detail(r, "sandbox is destroyed");
    cpu_response_free(r);
    expect_status_detail(404, "GET", "/v1/sandboxes/sbx_missing", key, NULL, NULL,
                         "sandbox not found");
    expect_status_detail(404, "GET", "/v1/sandboxes/sbx_missing/detail", key, NULL, NULL,
                         "sandbox not found");
    r = execute(key, "sbx_missing", NULL, "{\"command\":\"true\"}", 404);
    cpu_response_free(r);
    free(p);
    free(pe);
    free(id);
}

Test(server, create_validation)
{
    cpu_response *r;
    const char *long_key;
    char *h;
    const char *hdr[2] = { NULL, NULL };

    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{}");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "missing");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.0"), "body");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "backend");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.msg"), "Field required");
    cpu_response_free(r);
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"local\",\"cpu\":0}");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "greater_than");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "cpu");
    cpu_response_free(r);
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL,
              "{\"backend\":\"local\",\"timeout_secs\":\"x\"}");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "int_parsing");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.msg"),
                     "Input should be a valid integer, unable to parse string as an integer");
    cpu_response_free(r);
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "json_invalid");
    cpu_response_free(r);
    /* A lifetime whose expiry no record can show (past 9999-12-31, or an
     * overflow of now + timeout_secs): refused before anything is made. */
    {
        static const char *const huge[] = { "253402300800", "9223372036855",
                                             "9223372036854775807",
                                             "123456789012345678901234567890" };
        for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
            char *b = tu_strdup_printf("{\"backend\":\"local\",\"timeout_secs\":%s}", huge[i]);
            const char *m, *want = "Input should be less than or equal to ";
            /* The server's clock (CLOCK_REALTIME), not time(), which reads
             * the coarse clock and may lag a second boundary by a tick. */
            struct timespec ts;
            long long n, t0, t1;
            clock_gettime(CLOCK_REALTIME, &ts);
            t0 = (long long)ts.tv_sec;
            r = req_s(422, "POST", "/v1/sandboxes", key, NULL, b);
            clock_gettime(CLOCK_REALTIME, &ts);
            t1 = (long long)ts.tv_sec;
            cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "less_than_equal");
            cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "timeout_secs");
            m = cpu_jstr(r, "detail.0.msg");
            cr_assert(m && strncmp(m, want, strlen(want)) == 0, "%s", m);
            cr_assert_eq(sscanf(m + strlen(want), "%lld", &n), 1);
            /* the server's now + n is 9999-12-31T23:59:59Z */
            cr_assert(n >= 253402300799LL - t1 && n <= 253402300799LL - t0, "%s", m);
            /* pydantic's words and ctx for le=n */
            cr_assert_str_eq(m, tu_strdup_printf("%s%lld", want, n));
            cr_assert_eq(json_object_get_int64(cpu_jget(r->json, "detail.0.ctx.le")), n);
            cr_assert_eq(json_object_object_length(cpu_jget(r->json, "detail.0.ctx")), 1);
            /* the input as sent (json-c would read it back cut to a bound) */
            free(b);
            b = tu_strdup_printf(",\"input\":%s,", huge[i]);
            cr_assert(strstr(r->body, b), "%s", r->body);
            cpu_response_free(r);
            free(b);
        }
    }
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "[1]");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "model_attributes_type");
    cpu_response_free(r);
    expect_status_detail(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"docker\"}",
                         "backend is not enabled: docker");
    {
        static char lk[300] = "Idempotency-Key: ";
        memset(lk + strlen("Idempotency-Key: "), 'x', 256);
        long_key = lk;
    }
    hdr[0] = long_key;
    expect_status_detail(422, "POST", "/v1/sandboxes", key, hdr, "{\"backend\":\"local\"}",
                         "idempotency key must contain 1 to 255 characters");
    h = tu_strdup_printf("Idempotency-Key;");
    hdr[0] = h;
    expect_status_detail(422, "POST", "/v1/sandboxes", key, hdr, "{\"backend\":\"local\"}",
                         "idempotency key must contain 1 to 255 characters");
    free(h);
    /* Nothing was made. */
    r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 0);
    cpu_response_free(r);
}

/* Request bodies are read as the reference reads them: pydantic v2 in its
 * default, lax, mode (server/lax.h). Numbers and booleans sent as strings
 * ("5", " 7 ", "1_000", "5.0", "yes") and booleans sent as numbers are
 * coerced, stored in the config as their coerced values and fingerprinted
 * so (one Idempotency-Key replays "5" and 5 as the same request); what
 * pydantic refuses is its exact 422 (an item for each refusal, in the
 * model's field order). Every expected value below is pydantic 2.13.4's
 * answer for a model of the same shape. */
Test(server, bodies_are_coerced_as_pydantics_lax_mode)
{
    static const char *const accepted[][2] = {
        /* create fields after "backend":"local", and the record's config */
        { "\"timeout_secs\":\"5\"",
          "{\"timeout_secs\":5}" },
        { "\"timeout_secs\":\" 7 \"",
          "{\"timeout_secs\":7}" },
        { "\"timeout_secs\":\"+3\"",
          "{\"timeout_secs\":3}" },
        { "\"timeout_secs\":\"1_000\"",
          "{\"timeout_secs\":1000}" },
        { "\"timeout_secs\":\"5.0\"",
          "{\"timeout_secs\":5}" },
        { "\"timeout_secs\":5.0",
          "{\"timeout_secs\":5}" },
        { "\"timeout_secs\":true",
          "{\"timeout_secs\":1}" },
        { "\"timeout_secs\":\"\\t9\\n\"",
          "{\"timeout_secs\":9}" },
        { "\"memory_mb\":\"512\",\"disk_mb\":\"2_048\"",
          "{\"disk_mb\":2048,\"memory_mb\":512}" },
        { "\"cpu\":\"2.5\"",
          "{\"cpu\":2.5}" },
        { "\"cpu\":true",
          "{\"cpu\":1.0}" },
        { "\"cpu\":\"1e1\"",
          "{\"cpu\":10.0}" },
        { "\"cpu\":\" 0.5 \"",
          "{\"cpu\":0.5}" },
        { "\"cpu\":2",
          "{\"cpu\":2.0}" },
        { "\"cpu\":\"1_0.5\"",
          "{\"cpu\":10.5}" },
        { "\"allow_internet\":0",
          "{\"allow_internet\":false}" },
        { "\"allow_internet\":1",
          "{\"allow_internet\":true}" },
        { "\"allow_internet\":\"yes\"",
          "{\"allow_internet\":true}" },
        { "\"allow_internet\":\"Off\"",
          "{\"allow_internet\":false}" },
        { "\"allow_internet\":\"T\"",
          "{\"allow_internet\":true}" },
        { "\"allow_internet\":1.0",
          "{\"allow_internet\":true}" },
        { "\"allow_internet\":\"n\"",
          "{\"allow_internet\":false}" },
    };
    static const char *const refused[][2] = {
        /* create fields after "backend":"local", and the answer */
        { "\"timeout_secs\":\"x\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be a valid integer, unable to parse string as an integer\",\"input\":"
          "\"x\"}]}" },
        { "\"timeout_secs\":\"1e3\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be a valid integer, unable to parse string as an integer\",\"input\":"
          "\"1e3\"}]}" },
        { "\"timeout_secs\":\"0x10\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be a valid integer, unable to parse string as an integer\",\"input\":"
          "\"0x10\"}]}" },
        { "\"timeout_secs\":\"5.5\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be a valid integer, unable to parse string as an integer\",\"input\":"
          "\"5.5\"}]}" },
        { "\"timeout_secs\":\"\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be a valid integer, unable to parse string as an integer\",\"input\":"
          "\"\"}]}" },
        { "\"timeout_secs\":\"5.\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be a valid integer, unable to parse string as an integer\",\"input\":"
          "\"5.\"}]}" },
        { "\"timeout_secs\":\"1__0\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be a valid integer, unable to parse string as an integer\",\"input\":"
          "\"1__0\"}]}" },
        { "\"timeout_secs\":\"0\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":\"0\",\"ctx\":{\"gt\":0}}]}" },
        { "\"timeout_secs\":\"-1\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":\"-1\",\"ctx\":{\"gt\":0}}]}" },
        { "\"timeout_secs\":false",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":false,\"ctx\":{\"gt\":0}}]}" },
        { "\"timeout_secs\":[]",
          "{\"detail\":[{\"type\":\"int_type\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":\"In"
          "put should be a valid integer\",\"input\":[]}]}" },
        { "\"timeout_secs\":{}",
          "{\"detail\":[{\"type\":\"int_type\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":\"In"
          "put should be a valid integer\",\"input\":{}}]}" },
        { "\"memory_mb\":\"0.0\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":\"I"
          "nput should be greater than 0\",\"input\":\"0.0\",\"ctx\":{\"gt\":0}}]}" },
        { "\"disk_mb\":\" -5 \"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"disk_mb\"],\"msg\":\"Inp"
          "ut should be greater than 0\",\"input\":\" -5 \",\"ctx\":{\"gt\":0}}]}" },
        { "\"cpu\":\"x\"",
          "{\"detail\":[{\"type\":\"float_parsing\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input "
          "should be a valid number, unable to parse string as a number\",\"input\":\"x\"}]}" },
        { "\"cpu\":\"nan\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input s"
          "hould be greater than 0\",\"input\":\"nan\",\"ctx\":{\"gt\":0.0}}]}" },
        { "\"cpu\":\"-inf\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input s"
          "hould be greater than 0\",\"input\":\"-inf\",\"ctx\":{\"gt\":0.0}}]}" },
        { "\"cpu\":\"0\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input s"
          "hould be greater than 0\",\"input\":\"0\",\"ctx\":{\"gt\":0.0}}]}" },
        { "\"cpu\":false",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input s"
          "hould be greater than 0\",\"input\":false,\"ctx\":{\"gt\":0.0}}]}" },
        { "\"cpu\":[]",
          "{\"detail\":[{\"type\":\"float_type\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input sho"
          "uld be a valid number\",\"input\":[]}]}" },
        { "\"cpu\":\"0x10\"",
          "{\"detail\":[{\"type\":\"float_parsing\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input "
          "should be a valid number, unable to parse string as a number\",\"input\":\"0x10\"}]}" },
        { "\"cpu\":\"1e-400\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input s"
          "hould be greater than 0\",\"input\":\"1e-400\",\"ctx\":{\"gt\":0.0}}]}" },
        { "\"cpu\":\"_1\"",
          "{\"detail\":[{\"type\":\"float_parsing\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input "
          "should be a valid number, unable to parse string as a number\",\"input\":\"_1\"}]}" },
        { "\"allow_internet\":\"x\"",
          "{\"detail\":[{\"type\":\"bool_parsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg"
          "\":\"Input should be a valid boolean, unable to interpret input\",\"input\":\"x\"}]}" },
        { "\"allow_internet\":2",
          "{\"detail\":[{\"type\":\"bool_parsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg"
          "\":\"Input should be a valid boolean, unable to interpret input\",\"input\":2}]}" },
        { "\"allow_internet\":0.5",
          "{\"detail\":[{\"type\":\"bool_type\",\"loc\":[\"body\",\"allow_internet\"],\"msg\":"
          "\"Input should be a valid boolean\",\"input\":0.5}]}" },
        { "\"allow_internet\":\"\"",
          "{\"detail\":[{\"type\":\"bool_parsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg"
          "\":\"Input should be a valid boolean, unable to interpret input\",\"input\":\"\"}]}" },
        { "\"allow_internet\":\" true\"",
          "{\"detail\":[{\"type\":\"bool_parsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg"
          "\":\"Input should be a valid boolean, unable to interpret input\",\"input\":\" true"
          "\"}]}" },
        { "\"allow_internet\":[]",
          "{\"detail\":[{\"type\":\"bool_type\",\"loc\":[\"body\",\"allow_internet\"],\"msg\":"
          "\"Input should be a valid boolean\",\"input\":[]}]}" },
        { "\"allow_internet\":10000000000000000000",
          "{\"detail\":[{\"type\":\"bool_type\",\"loc\":[\"body\",\"allow_internet\"],\"msg\":"
          "\"Input should be a valid boolean\",\"input\":10000000000000000000}]}" },
        { "\"allow_internet\":\"1.0\"",
          "{\"detail\":[{\"type\":\"bool_parsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg"
          "\":\"Input should be a valid boolean, unable to interpret input\",\"input\":\"1.0\"}"
          "]}" },
        { "\"allow_internet\":-1",
          "{\"detail\":[{\"type\":\"bool_parsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg"
          "\":\"Input should be a valid boolean, unable to interpret input\",\"input\":-1}]}" },
        { "\"allow_internet\":-9223372036854775809",
          "{\"detail\":[{\"type\":\"bool_type\",\"loc\":[\"body\",\"allow_internet\"],\"msg\":\""
          "Input should be a valid boolean\",\"input\":-9223372036854775809}]}" },
        { "\"image\":5",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"image\"],\"msg\":\"Input "
          "should be a valid string\",\"input\":5}]}" },
        { "\"gpu\":true",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"gpu\"],\"msg\":\"Input sh"
          "ould be a valid string\",\"input\":true}]}" },
        { "\"preset\":1.5",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"preset\"],\"msg\":\"Input"
          " should be a valid string\",\"input\":1.5}]}" },
        { "\"env_vars\":{\"A\":1}",
          "{\"detail\":[{\"type\":\"string_type\",\"loc\":[\"body\",\"env_vars\",\"A\"],\"msg\""
          ":\"Input should be a valid string\",\"input\":1}]}" },
        /* several refusals: every one, in the model's order */
        { "\"allow_internet\":\"maybe\",\"cpu\":\"x\"",
          "{\"detail\":[{\"type\":\"float_parsing\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input should "
          "be a valid number, unable to parse string as a number\",\"input\":\"x\"},{\"type\":"
          "\"bool_parsing\",\"loc\":[\"body\",\"allow_internet\"],\"msg\":\"Input should be a vali"
          "d boolean, unable to interpret input\",\"input\":\"maybe\"}]}" },
        { "\"timeout_secs\":\"x\",\"memory_mb\":\"y\"",
          "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":\"Input sho"
          "uld be a valid integer, unable to parse string as an integer\",\"input\":\"y\"},{"
          "\"type\":\"int_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":\"Input should be a "
          "valid integer, unable to parse string as an integer\",\"input\":\"x\"}]}" },
    };
    static const char *const exec_refused[][2] = {
        /* execute fields after "command":"true", and the answer */
        { "\"timeout_secs\":\"x\"",
          "{\"detail\":[{\"type\":\"float_parsing\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\""
          ":\"Input should be a valid number, unable to parse string as a number\",\"input\":\""
          "x\"}]}" },
        { "\"timeout_secs\":\"0\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":\"0\",\"ctx\":{\"gt\":0.0}}]}" },
        { "\"timeout_secs\":false",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":false,\"ctx\":{\"gt\":0.0}}]}" },
        { "\"timeout_secs\":\"nan\"",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":\"nan\",\"ctx\":{\"gt\":0.0}}]}" },
        { "\"timeout_secs\":{}",
          "{\"detail\":[{\"type\":\"float_type\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":\""
          "Input should be a valid number\",\"input\":{}}]}" },
    };
    static const char *const replays[] = { "\"timeout_secs\":5", "\"timeout_secs\":\"5\"",
                                           "\"timeout_secs\":\" 5.0 \"",
                                           "\"timeout_secs\":5.0" };
    char *id = cpu_create_local(srv, key, NULL), *ex = path_of("/v1/sandboxes/%s/execute", id);
    cpu_response *r, *first;
    size_t made = 1;

    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        char *b = tu_strdup_printf("{\"backend\":\"local\",%s}", accepted[i][0]);
        char *h = tu_strdup_printf("Idempotency-Key: lax-%zu", i);
        char *q = tu_strdup_printf("/v1/sandboxes?idempotency_key=lax-%zu", i);
        const char *hdr[] = { h, NULL };
        r = cpu_http(srv->url, "POST", "/v1/sandboxes", key, hdr, b);
        /* Made, or refused by the local backend (an option it cannot
         * honour: 422 configuration, the record kept failed). */
        cr_assert(r->status == 201 || (r->status == 422 &&
                                       !strcmp(cpu_jstr(r, "detail.code"), "configuration")),
                  "%s: %ld %s", b, r->status, r->body);
        cpu_response_free(r);
        made++;
        r = req_s(200, "GET", q, key, NULL, NULL);
        cr_assert_eq(json_object_array_length(r->json), 1, "%s", b);
        cr_expect_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "0.config"),
                                                        JSON_C_TO_STRING_PLAIN),
                         accepted[i][1], "%s", b);
        if (!strcmp(cpu_jstr(r, "0.status"), "running"))
            terminate(key, cpu_jstr(r, "0.id"));
        cpu_response_free(r);
        free(b);
        free(h);
        free(q);
    }
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char *b = tu_strdup_printf("{\"backend\":\"local\",%s}", refused[i][0]);
        r = req_s(422, "POST", "/v1/sandboxes", key, NULL, b);
        cr_expect_str_eq(r->body, refused[i][1], "%s", b);
        cpu_response_free(r);
        free(b);
    }
    /* Integers past the double range for a float: Python's float(int)
     * overflows, which pydantic answers float_type, echoing the integer
     * as sent (2 followed by 308 zeros; -1 followed by 400). */
    {
        static const char *const lead[] = { "2", "-1" };
        static const size_t zeros[] = { 308, 400 };
        for (size_t i = 0; i < 2; i++) {
            char num[420], *b, *want;
            snprintf(num, sizeof num, "%s", lead[i]);
            memset(num + strlen(lead[i]), '0', zeros[i]);
            num[strlen(lead[i]) + zeros[i]] = '\0';
            b = tu_strdup_printf("{\"backend\":\"local\",\"cpu\":%s}", num);
            want = tu_strdup_printf("{\"detail\":[{\"type\":\"float_type\",\"loc\":[\"body\","
                                    "\"cpu\"],\"msg\":\"Input should be a valid number\","
                                    "\"input\":%s}]}", num);
            r = req_s(422, "POST", "/v1/sandboxes", key, NULL, b);
            cr_expect_str_eq(r->body, want, "%s", b);
            cpu_response_free(r);
            free(b);
            free(want);
        }
    }
    /* One key: the same request however its number is written. */
    {
        const char *hdr[] = { "Idempotency-Key: lax-replay", NULL };
        first = NULL;
        for (size_t i = 0; i < sizeof replays / sizeof replays[0]; i++) {
            char *b = tu_strdup_printf("{\"backend\":\"local\",%s}", replays[i]);
            r = req_s(201, "POST", "/v1/sandboxes", key, hdr, b);
            if (!first)
                first = r;
            else {
                cr_expect_str_eq(cpu_jstr(r, "id"), cpu_jstr(first, "id"), "%s", b);
                cr_expect_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "config"),
                                                                JSON_C_TO_STRING_PLAIN),
                                 "{\"timeout_secs\":5}");
                cpu_response_free(r);
            }
            free(b);
        }
        made++;
        expect_status_detail(409, "POST", "/v1/sandboxes", key, hdr,
                             "{\"backend\":\"local\",\"timeout_secs\":\"6\"}",
                             "idempotency key was already used with a different request");
        terminate(key, cpu_jstr(first, "id"));
        cpu_response_free(first);
    }
    /* Infinity, which pydantic takes for a float and no record or
     * provider can carry, is refused as a non-finite JSON number is. */
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"local\",\"cpu\":\"inf\"}");
    cr_expect_str_eq(r->body, "{\"detail\":[{\"type\":\"finite_number\",\"loc\":[\"body\","
                              "\"cpu\"],\"msg\":\"Input should be a finite number\","
                              "\"input\":\"inf\"}]}");
    cpu_response_free(r);
    /* The execute's timeout (a float > 0, beyond the reference). */
    for (size_t i = 0; i < sizeof exec_refused / sizeof exec_refused[0]; i++) {
        char *b = tu_strdup_printf("{\"command\":\"true\",%s}", exec_refused[i][0]);
        r = req_s(422, "POST", ex, key, NULL, b);
        cr_expect_str_eq(r->body, exec_refused[i][1], "%s", b);
        cpu_response_free(r);
        free(b);
    }
    {
        static const char *const ok[] = { "\"timeout_secs\":\"5\"", "\"timeout_secs\":true",
                                          "\"timeout_secs\":\" 2.5 \"" };
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            char *b = tu_strdup_printf("{\"command\":\"echo ok\",%s}", ok[i]);
            r = req_s(200, "POST", ex, key, NULL, b);
            cr_expect_str_eq(cpu_jstr(r, "stdout"), "ok\n", "%s", b);
            cr_expect_eq(json_object_get_int(cpu_jget(r->json, "exit_code")), 0, "%s", b);
            cpu_response_free(r);
            free(b);
        }
    }
    /* Nothing else was made. */
    r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_expect_eq(json_object_array_length(r->json), made);
    cpu_response_free(r);
    terminate(key, id);
    free(ex);
    free(id);
}

/* Numbers past what C holds, as pydantic (FastAPI) answers them, whose
 * integers have no bounds: an integer past int64 is echoed in the 422
 * exactly as it was sent (json-c reads it cut to the nearest bound), one
 * past INT64_MAX where pydantic would take it is refused at the bound the
 * server can carry (less_than_equal, pydantic's words for le), and a float
 * given for an integer is int_from_float or, past int64, int_parsing_size
 * (its input as Python writes the float). The whole answer, byte for
 * byte, as pydantic 2 gives it for the same model; nothing is made. */
Test(server, numbers_past_int64_are_answered_as_pydantic_does)
{
    static const struct {
        int create;
        const char *body, *want;
    } cases[] = {
        { 1, "{\"backend\":\"local\",\"memory_mb\":123456789012345678901234567890}",
          "{\"detail\":[{\"type\":\"less_than_equal\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":"
          "\"Input should be less than or equal to 9223372036854775807\",\"input\":1234567890123"
          "45678901234567890,\"ctx\":{\"le\":9223372036854775807}}]}" },
        { 1, "{\"backend\":\"local\",\"memory_mb\":9223372036854775808}",
          "{\"detail\":[{\"type\":\"less_than_equal\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":"
          "\"Input should be less than or equal to 9223372036854775807\",\"input\":9223372036854"
          "775808,\"ctx\":{\"le\":9223372036854775807}}]}" },
        { 1, "{\"backend\":\"local\",\"disk_mb\":-123456789012345678901234567890}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"disk_mb\"],\"msg\":\"Inpu"
          "t should be greater than 0\",\"input\":-123456789012345678901234567890,\"ctx\":{\"gt"
          "\":0}}]}" },
        { 1, "{\"backend\":\"local\",\"disk_mb\":-9223372036854775809}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"disk_mb\"],\"msg\":\"Inpu"
          "t should be greater than 0\",\"input\":-9223372036854775809,\"ctx\":{\"gt\":0}}]}" },
        { 1, "{\"backend\":\"local\",\"timeout_secs\":-18446744073709551616}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":-18446744073709551616,\"ctx\":{\"gt\":0}"
          "}]}" },
        { 1, "{\"backend\":\"local\",\"cpu\":-123456789012345678901234567890}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"cpu\"],\"msg\":\"Input sh"
          "ould be greater than 0\",\"input\":-123456789012345678901234567890,\"ctx\":{\"gt\":0."
          "0}}]}" },
        { 1, "{\"backend\":\"local\",\"memory_mb\":1E20}",
          "{\"detail\":[{\"type\":\"int_parsing_size\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":"
          "\"Unable to parse input string as an integer, exceeded maximum size\",\"input\":1e+20"
          "}]}" },
        { 1, "{\"backend\":\"local\",\"disk_mb\":-9.3e18}",
          "{\"detail\":[{\"type\":\"int_parsing_size\",\"loc\":[\"body\",\"disk_mb\"],\"msg\":\""
          "Unable to parse input string as an integer, exceeded maximum size\",\"input\":-9.3e+1"
          "8}]}" },
        { 1, "{\"backend\":\"local\",\"memory_mb\":9223372036854775808.0}",
          "{\"detail\":[{\"type\":\"int_parsing_size\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":"
          "\"Unable to parse input string as an integer, exceeded maximum size\",\"input\":9.223"
          "372036854776e+18}]}" },
        { 1, "{\"backend\":\"local\",\"memory_mb\":2.5}",
          "{\"detail\":[{\"type\":\"int_from_float\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":\""
          "Input should be a valid integer, got a number with a fractional part\",\"input\":2.5}"
          "]}" },
        { 1, "{\"memory_mb\":-123456789012345678901234567890,\"a\":[1,99999999999999999999]}",
          "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"backend\"],\"msg\":\"Field required\""
          ",\"input\":{\"memory_mb\":-123456789012345678901234567890,\"a\":[1,999999999999999"
          "99999]}},{\"type\":\"greater_than\",\"loc\":[\"body\",\"memory_mb\"],\"msg\":\"Input shou"
          "ld be greater than 0\",\"input\":-123456789012345678901234567890,\"ctx\":{\"gt\":0}"
          "}]}" },
        { 0, "{\"command\":\"true\",\"timeout_secs\":-123456789012345678901234567890}",
          "{\"detail\":[{\"type\":\"greater_than\",\"loc\":[\"body\",\"timeout_secs\"],\"msg\":"
          "\"Input should be greater than 0\",\"input\":-123456789012345678901234567890,\"ctx\":"
          "{\"gt\":0.0}}]}" },
    };
    char *id = cpu_create_local(srv, key, NULL), *ex = path_of("/v1/sandboxes/%s/execute", id);
    cpu_response *r;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = req_s(422, "POST", cases[i].create ? "/v1/sandboxes" : ex, key, NULL,
                  cases[i].body);
        cr_expect_str_eq(r->body, cases[i].want, "%s", cases[i].body);
        cpu_response_free(r);
    }
    r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 1);
    cpu_response_free(r);
    free(ex);
    free(id);
}

/* The value at @path of the answer as text (a number's digits too), or
 * "(none)". */
static const char *
jtext(const cpu_response *r, const char *path)
{
    json_object *v = cpu_jget(r->json, path);

    return v ? json_object_get_string(v) : "(none)";
}

/* Bodies are JSON as written (RFC 8259, UTF-8), and values the server
 * could not use as sent are refused naming where they are: a string with
 * NUL (a command would run cut short at it), a number that is not finite
 * (the error's input as its text, since JSON has no NaN), text that is
 * not UTF-8 where it is kept and shown again (create, keys; an execute's
 * command is bytes for the command), an Idempotency-Key that is not UTF-8
 * text (it is echoed in JSON answers).
 * Every answer parses as JSON, and nothing is made or run. */
Test(server, bodies_and_keys_json_cannot_carry_are_422)
{
    char *id = cpu_create_local(srv, key, NULL), *p = path_of("/v1/sandboxes/%s", id);
    cpu_response *r;
    const char *hdr[2] = { NULL, NULL };
    static const struct {
        const char *body, *type, *loc1, *loc2, *msg, *input;
    } bad[] = {
        { "{\"command\":\"echo a\\u0000b\"}", "string_type", "command", NULL,
          "Input should be a string without NUL (\\u0000) characters", "echo a" },
        { "{\"command\":\"true\",\"env\":{\"A\":\"x\\u0000\"}}", "string_type", "env", "A",
          "Input should be a string without NUL (\\u0000) characters", "x" },
        { "{\"command\":\"true\",\"args\":[\"a\",\"\\u0000\"]}", "string_type", "args", "1",
          "Input should be a string without NUL (\\u0000) characters", "" },
        { "{\"command\":\"true\",\"timeout_secs\":NaN}", "finite_number", "timeout_secs", NULL,
          "Input should be a finite number", "NaN" },
        { "{\"command\":\"true\",\"timeout_secs\":1e400}", "finite_number", "timeout_secs",
          NULL, "Input should be a finite number", "1e400" },
        { "{\"command\":\"true\",\"timeout_secs\":\"x\"}", "float_parsing", "timeout_secs", NULL,
          "Input should be a valid number, unable to parse string as a number", "x" },
    };
    static const struct {
        const char *body, *loc1, *error;
    } invalid[] = {
        { "{\"command\":\"echo tc\",}", "21", "unexpected character" },
        { "/*c*/{\"command\":\"echo cm\"}", "0", "unexpected character" },
        { "{\"command\":'echo sq'}", "11", "unexpected character" },
        { "{\"command\":\"echo x\"} trailing", "21", "unexpected character" },
    };
    char *ex = path_of("/v1/sandboxes/%s/execute", id);

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = req_s(422, "POST", ex, key, NULL, bad[i].body);
        cr_assert_not_null(r->json, "%s", r->body);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.type"), bad[i].type, "%s", bad[i].body);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.loc.0"), "body");
        cr_expect_str_eq(jtext(r, "detail.0.loc.1"), bad[i].loc1, "%s", bad[i].body);
        if (bad[i].loc2)
            cr_expect_str_eq(jtext(r, "detail.0.loc.2"), bad[i].loc2, "%s", bad[i].body);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.msg"), bad[i].msg);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.input"), bad[i].input, "%s", bad[i].body);
        cpu_response_free(r);
    }
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        r = req_s(422, "POST", ex, key, NULL, invalid[i].body);
        cr_assert_not_null(r->json, "%s", r->body);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.type"), "json_invalid", "%s", invalid[i].body);
        cr_expect_str_eq(jtext(r, "detail.0.loc.1"), invalid[i].loc1, "%s", invalid[i].body);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.ctx.error"), invalid[i].error, "%s",
                         invalid[i].body);
        cpu_response_free(r);
    }
    /* JSON that is not an object. */
    r = req_s(422, "POST", ex, key, NULL, "null");
    cr_expect_str_eq(cpu_jstr(r, "detail.0.type"), "model_attributes_type");
    cr_expect(json_object_is_type(cpu_jget(r->json, "detail.0.input"), json_type_null));
    cpu_response_free(r);
    r = req_s(422, "POST", ex, key, NULL, "5");
    cr_expect_str_eq(cpu_jstr(r, "detail.0.type"), "model_attributes_type");
    cr_expect_eq(json_object_get_int(cpu_jget(r->json, "detail.0.input")), 5);
    cpu_response_free(r);
    /* Create and api-keys read bodies the same way. */
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"local\\u0000x\"}");
    cr_expect_str_eq(jtext(r, "detail.0.loc.1"), "backend");
    cpu_response_free(r);
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"local\",\"image\":\"\xc3\x28\"}");
    cr_expect_str_eq(cpu_jstr(r, "detail.0.ctx.error"), "invalid utf-8 string");
    cpu_response_free(r);
    r = req_s(422, "POST", "/v1/api-keys", key, NULL, "{\"name\":\"a\\u0000b\"}");
    cr_expect_str_eq(jtext(r, "detail.0.loc.1"), "name");
    cpu_response_free(r);
    /* Keys that are not UTF-8 text, on create and execute. */
    hdr[0] = "Idempotency-Key: k\xff";
    expect_status_detail(422, "POST", "/v1/sandboxes", key, hdr, "{\"backend\":\"local\"}",
                         "idempotency key must be UTF-8 text without control characters");
    hdr[0] = "Idempotency-Key: k\x01";
    expect_status_detail(422, "POST", ex, key, hdr, "{\"command\":\"true\"}",
                         "idempotency key must be UTF-8 text without control characters");
    hdr[0] = "Idempotency-Key: caf\xc3\xa9";
    r = req_s(200, "POST", ex, key, hdr, "{\"command\":\"true\"}");
    cr_expect_str_eq(cpu_jstr(r, "request_id"), "caf\xc3\xa9");
    cpu_response_free(r);
    /* Environment names libsbx cannot set as named ("A=B" would set A to
     * "B=c"): 422 naming them, on execute and on create (before anything
     * is made). */
    {
        static const char *const names[] = { "A=B", "" };
        for (size_t i = 0; i < 2; i++) {
            char *b = tu_strdup_printf("{\"command\":\"true\",\"env\":{\"%s\":\"c\"}}",
                                       names[i]);
            r = req_s(422, "POST", ex, key, NULL, b);
            cr_expect_str_eq(cpu_jstr(r, "detail.0.type"), "value_error");
            cr_expect_str_eq(jtext(r, "detail.0.loc.1"), "env");
            cr_expect_str_eq(cpu_jstr(r, "detail.0.msg"), "Value error, an environment "
                             "variable name must not be empty or contain '='");
            cr_expect_str_eq(cpu_jstr(r, "detail.0.input"), names[i]);
            cpu_response_free(r);
            free(b);
            b = tu_strdup_printf("{\"backend\":\"local\",\"env_vars\":{\"%s\":\"c\"}}",
                                 names[i]);
            r = req_s(422, "POST", "/v1/sandboxes", key, NULL, b);
            cr_expect_str_eq(jtext(r, "detail.0.loc.1"), "env_vars");
            cr_expect_str_eq(cpu_jstr(r, "detail.0.input"), names[i]);
            cpu_response_free(r);
            free(b);
        }
    }
    /* More variables than a create takes: said so (was "Input should be a
     * valid string" about a string). */
    {
        size_t cap = 16 + 257 * 16, len = 0;
        char *b = malloc(cap);
        len += (size_t)snprintf(b, cap, "{\"backend\":\"local\",\"env_vars\":{");
        for (int i = 0; i < 257; i++)
            len += (size_t)snprintf(b + len, cap - len, "%s\"V%d\":\"x\"", i ? "," : "", i);
        snprintf(b + len, cap - len, "}}");
        r = req_s(422, "POST", "/v1/sandboxes", key, NULL, b);
        cr_expect_str_eq(cpu_jstr(r, "detail.0.type"), "too_long");
        cr_expect_str_eq(cpu_jstr(r, "detail.0.msg"),
                         "Dictionary should have at most 256 items after validation, not 257");
        cr_expect_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "detail.0.ctx"),
                                                        JSON_C_TO_STRING_PLAIN),
                         "{\"field_type\":\"Dictionary\",\"max_length\":256,"
                         "\"actual_length\":257}");
        cr_expect_eq(json_object_object_length(cpu_jget(r->json, "detail.0.input")), 257);
        cpu_response_free(r);
        free(b);
    }
    /* An execute's strings are bytes for the command: not UTF-8 is fine,
     * and a 422 echoing them is still JSON (U+FFFD for each bad byte). */
    r = req_s(200, "POST", ex, key, NULL, "{\"command\":\"printf %s '\xff'\"}");
    cr_expect_str_eq(cpu_jstr(r, "stdout_b64"), "/w==");
    cpu_response_free(r);
    r = req_s(422, "POST", ex, key, NULL, "{\"command\":\"a\xff\",\"code\":\"x\"}");
    cr_assert_not_null(r->json, "not JSON: %s", r->body);
    cr_expect_str_eq(cpu_jstr(r, "detail.0.input.command"), "a\xef\xbf\xbd");
    cpu_response_free(r);
    /* Nothing else was made or run: one sandbox, two executions. */
    r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_expect_eq(json_object_array_length(r->json), 1);
    cpu_response_free(r);
    free(p);
    p = path_of("/v1/sandboxes/%s/detail", id);
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_expect_eq(json_object_array_length(cpu_jget(r->json, "executions")), 2);
    cpu_response_free(r);
    terminate(key, id);
    free(ex);
    free(p);
    free(id);
}

/* 1 when @r's body is JSON to a strict parser: RFC 8259 text, UTF-8,
 * nothing after the value (cpu_http() parses leniently). */
static int
strict_json(const cpu_response *r)
{
    json_tokener *tok = json_tokener_new();
    json_object *o;
    int ok;

    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    o = json_tokener_parse_ex(tok, r->body, (int)r->body_len);
    ok = o && json_tokener_get_error(tok) == json_tokener_success &&
         (size_t)json_tokener_get_parse_end(tok) == r->body_len;
    json_object_put(o);
    json_tokener_free(tok);
    return ok;
}

/* Every answer that may echo bytes of the request which are not UTF-8 (an
 * execute's values, a query argument, a create's backend cut at its
 * length limit) or text an earlier server version stored as sent (a
 * record's config and key, a key's name and scopes, an execution's
 * request id) is JSON a strict parser takes: each invalid sequence is
 * U+FFFD. */
Test(server, answers_echoing_bytes_that_are_not_utf8_are_json)
{
    char *id = cpu_create_local(srv, key, NULL), *ex = path_of("/v1/sandboxes/%s/execute", id);
    cpu_response *r;
    static const struct {
        const char *method, *path, *body, *field, *want;
    } echo[] = {
        { "POST", NULL, "{\"command\":\"a\xff\",\"code\":\"x\"}", "detail.0.input.command",
          "a\xef\xbf\xbd" },
        { "POST", NULL, "{\"command\":\"true\",\"args\":\"\xff\"}", "detail.0.input",
          "\xef\xbf\xbd" },
        { "POST", NULL, "{\"command\":\"true\",\"env\":{\"\xfe=\":\"c\"}}", "detail.0.input",
          "\xef\xbf\xbd=" },
        { "POST", NULL, "{\"command\":\"true\",\"stdin_b64\":\"\xff\"}", "detail.0.input",
          "\xef\xbf\xbd" },
        { "POST", NULL, "{\"command\":\"true\",\"timeout_secs\":\"\xc3\"}", "detail.0.input",
          "\xef\xbf\xbd" },
        { "POST", NULL, "{\"command\":\"\xff\\u0000\"}", "detail.0.input", "\xef\xbf\xbd" },
        { "POST", NULL, "\"\xe2\x82\"", "detail.0.input", "\xef\xbf\xbd\xef\xbf\xbd" },
        { "GET", "/v1/costs?group_by=%FF", NULL, "detail.0.input", "\xef\xbf\xbd" },
        { "GET", "/v1/costs?start=2026%FF", NULL, "detail.0.input", "2026\xef\xbf\xbd" },
        /* 40 two-byte characters: the name is cut at 63 bytes, in the
         * 32nd. */
        { "POST", "/v1/sandboxes",
          "{\"backend\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
          "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
          "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
          "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}", "detail",
          "backend is not enabled: \xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
          "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
          "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
          "\xc3\xa9\xef\xbf\xbd" },
    };

    for (size_t i = 0; i < sizeof echo / sizeof echo[0]; i++) {
        const char *path = echo[i].path ? echo[i].path : ex;
        r = cpu_http(srv->url, echo[i].method, path, key, NULL, echo[i].body);
        cr_expect_eq(r->status, 422, "%zu: %ld %s", i, r->status, r->body);
        cr_expect(strict_json(r), "%zu: not JSON: %s", i, r->body);
        cr_expect_str_eq(cpu_jstr(r, echo[i].field), echo[i].want, "%zu: %s", i, r->body);
        cpu_response_free(r);
    }
    /* Text an earlier version kept as it was sent. A PostgreSQL database
     * in UTF-8 refuses such text itself; SQLite keeps any bytes. */
    {
        /* The text of one byte 0xff. */
        const char *ff = cpu_store_is_pg() ? "convert_from(decode('ff', 'hex'), 'UTF8')"
                                           : "CAST(X'FF' AS TEXT)";
        char *old[] = {
            tu_strdup_printf("UPDATE sandboxes SET config_json = '{\"image\":\"' || %s || '\"}',"
                             " idempotency_key = 'k' || %s", ff, ff),
            tu_strdup_printf("UPDATE api_keys SET name = 'n' || %s,"
                             " scopes_json = '[\"*\",\"s' || %s || '\"]'", ff, ff),
            tu_strdup_printf("INSERT INTO executions(organization_id, sandbox_id, request_id, id,"
                             " status, created_at) SELECT organization_id, id, 'r' || %s,"
                             " 'exe_old', 'running', created_at FROM sandboxes", ff),
        };
        char *sb = path_of("/v1/sandboxes/%s", id);
        char *detail = path_of("/v1/sandboxes/%s/detail", id);
        static const struct {
            const char *path, *field, *want;
        } stored[] = {
            { NULL, "config.image", "\xef\xbf\xbd" },
            { NULL, "idempotency_key", "k\xef\xbf\xbd" },
            { "/v1/sandboxes", "0.idempotency_key", "k\xef\xbf\xbd" },
            { "/detail", "executions.0.request_id", "r\xef\xbf\xbd" },
            { "/v1/api-keys", "0.name", "n\xef\xbf\xbd" },
            { "/v1/session", "scopes.1", "s\xef\xbf\xbd" },
        };
        for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
            char *done = db_list(old[i]);
            if (cpu_store_is_pg())
                cr_expect_null(done, "%s", old[i]);
            else
                cr_expect_not_null(done, "%s", old[i]);
            free(done);
            free(old[i]);
        }
        if (!cpu_store_is_pg())
            for (size_t i = 0; i < sizeof stored / sizeof stored[0]; i++) {
                const char *path = !stored[i].path ? sb
                                   : !strcmp(stored[i].path, "/detail") ? detail
                                                                        : stored[i].path;
                r = req_s(200, "GET", path, key, NULL, NULL);
                cr_expect(strict_json(r), "%s: not JSON: %s", path, r->body);
                cr_expect_str_eq(cpu_jstr(r, stored[i].field), stored[i].want, "%s: %s", path,
                                 r->body);
                cpu_response_free(r);
            }
        free(sb);
        free(detail);
    }
    terminate(key, id);
    free(ex);
    free(id);
}

/* A provider failure is the contract's payload, the record left failed,
 * and replays of its key return that record without a second attempt. */
Test(server, provider_failure_payload)
{
    const char *hdr[] = { "Idempotency-Key: bad-1", NULL };
    cpu_response *r;
    char *p;

    r = req_s(502, "POST", "/v1/sandboxes", key, hdr,
              "{\"backend\":\"local\",\"git_repo\":\"/nonexistent/repo.git\"}");
    cr_assert_str_eq(cpu_jstr(r, "detail.code"), "creation_failed");
    cr_assert_str_eq(cpu_jstr(r, "detail.message"), "Provider sandbox creation failed.");
    cr_assert_str_eq(cpu_jstr(r, "detail.backend"), "local");
    cr_assert_str_eq(cpu_jstr(r, "detail.op"), "create");
    cr_assert_str_eq(cpu_jstr(r, "detail.outcome"), "failed");
    cr_assert(json_object_is_type(cpu_jget(r->json, "detail.retryable"), json_type_boolean));
    cr_assert(json_object_is_type(cpu_jget(r->json, "detail.context"), json_type_object));
    cr_assert_eq(json_object_object_length(cpu_jget(r->json, "detail")), 7);
    cpu_response_free(r);
    r = req_s(201, "POST", "/v1/sandboxes", key, hdr,
              "{\"backend\":\"local\",\"git_repo\":\"/nonexistent/repo.git\"}");
    cr_assert_str_eq(cpu_jstr(r, "status"), "failed");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "attempt_count")), 1);
    cr_assert_str_eq(cpu_jstr(r, "latest_error.code"), "creation_failed");
    cr_assert(cpu_jstr(r, "failed_at"));
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 2);
    p = path_of("/v1/sandboxes/%s/execute", cpu_jstr(r, "id"));
    /* A failed sandbox does not execute. */
    expect_status_detail(409, "POST", p, key, NULL, "{\"command\":\"true\"}",
                         "sandbox is failed");
    free(p);
    p = path_of("/v1/sandboxes/%s", cpu_jstr(r, "id"));
    cpu_response_free(r);
    /* A failed sandbox has no runtime to terminate. */
    expect_status_detail(409, "DELETE", p, key, NULL, NULL,
                         "sandbox runtime is not attached and provider termination is not configured");
    free(p);
    /* An option the backend cannot honour: 422 configuration. */
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"local\",\"cpu\":2}");
    cr_assert_str_eq(cpu_jstr(r, "detail.code"), "configuration");
    cr_assert_str_eq(cpu_jstr(r, "detail.message"), "Provider configuration is invalid.");
    cr_assert_str_eq(cpu_jstr(r, "detail.outcome"), "failed");
    cr_assert_not(json_object_get_boolean(cpu_jget(r->json, "detail.retryable")));
    cpu_response_free(r);
}

/* ---------------------------------------------------------------- idempotency */

/* The fingerprint hashes the text Python's json.dumps(sort_keys=True,
 * separators=(",", ":")) writes of the coerced body (CONTROL-PLANE.md §3):
 * every character outside ' '..'~' as \uXXXX (a surrogate pair past
 * U+FFFF), "/" as itself. The expected text and digest are Python's, under
 * the tests' pepper. A record of a server that hashed json-c's text of the
 * same object still replays. */
Test(server, the_fingerprint_is_pythons_canonical_text)
{
    static const char body[] =
        "{\"backend\":\" Local\",\"timeout_secs\":\"60\",\"env_vars\":{\"Z_U\":"
        "\"v/\\\"\\\\\\n\xe2\x98\x83\xf0\x9f\x98\x80\x7f\\u0001\\t\xc3\xbc\","
        "\"A_B\":\"\xc3\xa9\"}}";
    static const char python[] =
        "{\"backend\":\"local\",\"env_vars\":{\"A_B\":\"\\u00e9\",\"Z_U\":"
        "\"v/\\\"\\\\\\n\\u2603\\ud83d\\ude00\\u007f\\u0001\\t\\u00fc\"},\"timeout_secs\":60}";
    const char *hdr[] = { "Idempotency-Key: canonical", NULL };
    char fp[65], *sql, *stored;
    cpu_response *a, *b;

    cp_hmac_hex(CPU_PEPPER, python, strlen(python), fp);
    cr_assert_str_eq(fp, "65f8e7f33e0a9c51bad56fcb5974a697c70e0de0079a3e018c72cc9e0035b3c3");
    a = req_s(201, "POST", "/v1/sandboxes", key, hdr, body);
    sql = tu_strdup_printf("SELECT request_fingerprint FROM sandboxes WHERE id = '%s'",
                           cpu_jstr(a, "id"));
    stored = db_list(sql);
    cr_assert_str_eq(stored, fp);
    free(stored);
    free(sql);

    /* The record of an earlier server: its fingerprint over json-c's text. */
    json_object *canon = json_tokener_parse(python);
    const char *old = json_object_to_json_string_ext(canon, JSON_C_TO_STRING_PLAIN);
    char fp_old[65];
    cr_assert_not_null(strstr(old, "v\\/"), "json-c's text: %s", old);
    cp_hmac_hex(CPU_PEPPER, old, strlen(old), fp_old);
    sql = tu_strdup_printf("UPDATE sandboxes SET request_fingerprint = '%s' WHERE id = '%s'",
                           fp_old, cpu_jstr(a, "id"));
    stored = db_list(sql);
    cr_assert_not_null(stored);
    free(stored);
    free(sql);
    json_object_put(canon);
    /* The same request in Python's own escapes replays it. */
    b = req_s(201, "POST", "/v1/sandboxes", key, hdr,
              "{\"env_vars\":{\"A_B\":\"\\u00e9\",\"Z_U\":\"v\\/\\\"\\\\\\n\\u2603\\ud83d\\ude00"
              "\\u007f\\u0001\\t\\u00fc\"},\"timeout_secs\":60,\"backend\":\"local\"}");
    cr_assert_str_eq(cpu_jstr(b, "id"), cpu_jstr(a, "id"));
    cpu_response_free(b);
    expect_status_detail(409, "POST", "/v1/sandboxes", key, hdr,
                         "{\"backend\":\"local\",\"timeout_secs\":60,\"env_vars\":{\"A_B\":\"e\"}}",
                         "idempotency key was already used with a different request");
    terminate(key, strdup(cpu_jstr(a, "id")));
    cpu_response_free(a);
}

Test(server, create_idempotency_replay_and_mismatch)
{
    const char *hdr[] = { "Idempotency-Key: same", NULL };
    cpu_response *a, *b, *c;
    char *p;

    a = req_s(201, "POST", "/v1/sandboxes", key, hdr,
              "{\"backend\":\"local\",\"timeout_secs\":60,\"env_vars\":{\"X\":\"1\"}}");
    /* The same request, written differently: 60 ≡ 60.0, LOCAL ≡ local, null ≡ absent. */
    b = req_s(201, "POST", "/v1/sandboxes", key, hdr,
              "{\"env_vars\":{\"X\":\"1\"},\"timeout_secs\":60.0,\"backend\":\"LOCAL\",\"gpu\":null}");
    cr_assert_str_eq(cpu_jstr(a, "id"), cpu_jstr(b, "id"));
    cr_assert_str_eq(a->body, b->body);
    /* A different env value is a different request. */
    expect_status_detail(409, "POST", "/v1/sandboxes", key, hdr,
                         "{\"backend\":\"local\",\"timeout_secs\":60,\"env_vars\":{\"X\":\"2\"}}",
                         "idempotency key was already used with a different request");
    expect_status_detail(409, "POST", "/v1/sandboxes", key, hdr, "{\"backend\":\"local\"}",
                         "idempotency key was already used with a different request");
    c = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(c->json), 1);
    cpu_response_free(c);
    /* After terminate the replay returns the current record. */
    p = path_of("/v1/sandboxes/%s", cpu_jstr(a, "id"));
    c = req_s(200, "DELETE", p, key, NULL, NULL);
    cpu_response_free(c);
    c = req_s(201, "POST", "/v1/sandboxes", key, hdr,
              "{\"backend\":\"local\",\"timeout_secs\":60,\"env_vars\":{\"X\":\"1\"}}");
    cr_assert_str_eq(cpu_jstr(c, "status"), "destroyed");
    cr_assert_str_eq(cpu_jstr(c, "id"), cpu_jstr(a, "id"));
    cpu_response_free(a);
    cpu_response_free(b);
    cpu_response_free(c);
    free(p);
}

typedef struct race {
    const char *url, *key, *body;
    const char *idem;
    long status;
    char id[64];
} race;

static void *
race_create(void *arg)
{
    race *r = arg;
    char *h = tu_strdup_printf("Idempotency-Key: %s", r->idem);
    const char *hdr[] = { h, NULL };
    cpu_response *res = cpu_http(r->url, "POST", "/v1/sandboxes", r->key, hdr, r->body);

    r->status = res->status;
    if (cpu_jstr(res, "id"))
        snprintf(r->id, sizeof r->id, "%s", cpu_jstr(res, "id"));
    cpu_response_free(res);
    free(h);
    return NULL;
}

/* 20 concurrent creates with one key (across @nurls servers) make one
 * sandbox; every caller gets 201 and its id. */
static void
race_20(const char *const *urls, size_t nurls, const char *k)
{
    race rs[20];
    pthread_t th[20];
    cpu_response *r;

    for (int i = 0; i < 20; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        rs[i].url = urls[(size_t)i % nurls];
        rs[i].key = k;
        rs[i].body = "{\"backend\":\"local\",\"timeout_secs\":120}";
        rs[i].idem = "race-key";
        cr_assert_eq(pthread_create(&th[i], NULL, race_create, &rs[i]), 0);
    }
    for (int i = 0; i < 20; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(rs[i].status, 201, "create %d: %ld", i, rs[i].status);
        cr_assert_str_eq(rs[i].id, rs[0].id);
    }
    r = cpu_http(urls[0], "GET", "/v1/sandboxes", k, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 1);
    cpu_response_free(r);
    /* Wait for the one create to finish, then terminate it. */
    for (int i = 0; i < 200; i++) {
        char *p = path_of("/v1/sandboxes/%s", rs[0].id);
        r = cpu_http(urls[0], "GET", p, k, NULL, NULL);
        free(p);
        if (strcmp(cpu_jstr(r, "status"), "creating")) {
            cr_assert_str_eq(cpu_jstr(r, "status"), "running");
            cpu_response_free(r);
            break;
        }
        cpu_response_free(r);
        usleep(20000);
    }
    {
        char *p = path_of("/v1/sandboxes/%s", rs[0].id);
        r = cpu_http(urls[nurls - 1], "DELETE", p, k, NULL, NULL);
        cr_assert_eq(r->status, 200, "%s", r->body);
        cpu_response_free(r);
        free(p);
    }
}

Test(server, concurrent_same_key_creates_make_one_sandbox)
{
    const char *urls[] = { srv->url };

    race_20(urls, 1, key);
}

/* A library error whose code the reference has no word for keeps the
 * library's code, so that the remote backend fails as every other backend
 * does, with the contract's message for codes outside its list: an unknown
 * language is invalid_argument, 422, "Provider operation failed.". */
Test(server, a_library_code_outside_the_contract_keeps_its_name)
{
    char *id = cpu_create_local(srv, key, NULL);
    cpu_response *r = execute(key, id, NULL, "{\"code\":\"1\",\"language\":\"cobol\"}", 422);

    cr_assert_str_eq(r->body, "{\"detail\":{\"message\":\"Provider operation failed.\","
                              "\"code\":\"invalid_argument\",\"backend\":\"local\","
                              "\"op\":\"execute\",\"retryable\":false,\"outcome\":\"failed\","
                              "\"context\":{}}}");
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

Test(server, execute_replay)
{
    char *id = cpu_create_local(srv, key, NULL);
    cpu_response *a, *b, *c;

    a = execute(key, id, "run-1", "{\"command\":\"echo $$; date +%N\"}", 200);
    cr_assert_str_eq(cpu_jstr(a, "request_id"), "run-1");
    /* Replay: the stored response verbatim, whatever the body now says. */
    b = execute(key, id, "run-1", "{\"command\":\"echo other\"}", 200);
    cr_assert_str_eq(a->body, b->body);
    c = execute(key, id, "run-2", "{\"command\":\"echo $$; date +%N\"}", 200);
    cr_assert_str_neq(cpu_jstr(a, "stdout"), cpu_jstr(c, "stdout"));
    cpu_response_free(a);
    cpu_response_free(b);
    cpu_response_free(c);
    /* One usage event per request id. */
    a = req_s(200, "GET", "/v1/costs?group_by=sandbox", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(a->json, "items")), 1);
    cr_assert_str_eq(cpu_jstr(a, "items.0.key"), id);
    cpu_response_free(a);
    terminate(key, id);
    free(id);
}

/* ---------------------------------------------------------------- cases */

Test(server, case07_non_utf8_output)
{
    char *id = cpu_create_local(srv, key, NULL);
    cpu_response *r = execute(key, id, NULL,
                              "{\"command\":\"printf 'ok\\\\377\\\\376\\\\n'; printf 'e\\\\200\\\\n' >&2\"}",
                              200);

    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "exit_code")), 0);
    cr_assert_str_eq(cpu_jstr(r, "stdout_b64"), "b2v//go=");
    cr_assert_str_eq(cpu_jstr(r, "stderr_b64"), "ZYAK");
    cr_assert(json_object_get_boolean(cpu_jget(r->json, "stdout_lossy")));
    cr_assert(json_object_get_boolean(cpu_jget(r->json, "stderr_lossy")));
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "ok\xef\xbf\xbd\xef\xbf\xbd\n");
    cr_assert_str_eq(cpu_jstr(r, "stderr"), "e\xef\xbf\xbd\n");
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

Test(server, case17_binary_bytes_through_http)
{
    char *id = cpu_create_local(srv, key, NULL), hex[65];
    unsigned char *data = malloc(1048576), *got;
    size_t len = 0;
    cpu_response *r;

    for (size_t i = 0; i < 1048576; i++)
        data[i] = (unsigned char)(i & 0xff);
    /* Upload: the bytes as the command's stdin (stdin_b64). */
    {
        static const char tbl[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t o = 0;
        char *b64 = malloc(1048576 / 3 * 4 + 8), *body;
        size_t i = 0;
        for (; i + 3 <= 1048576; i += 3) {
            unsigned v = (unsigned)data[i] << 16 | (unsigned)data[i + 1] << 8 | data[i + 2];
            b64[o++] = tbl[v >> 18];
            b64[o++] = tbl[(v >> 12) & 63];
            b64[o++] = tbl[(v >> 6) & 63];
            b64[o++] = tbl[v & 63];
        }
        {
            unsigned v = (unsigned)data[i] << 16;   /* 1048576 = 3k + 1 */
            b64[o++] = tbl[v >> 18];
            b64[o++] = tbl[(v >> 12) & 63];
            b64[o++] = '=';
            b64[o++] = '=';
        }
        b64[o] = 0;
        body = tu_strdup_printf("{\"command\":\"cat > \\\"$SANDBOX_ROOT/bin.dat\\\"\","
                                "\"stdin_b64\":\"%s\"}", b64);
        r = execute(key, id, NULL, body, 200);
        cr_assert_eq(json_object_get_int(cpu_jget(r->json, "exit_code")), 0, "%s", r->body);
        cpu_response_free(r);
        free(body);
        free(b64);
    }
    r = execute(key, id, NULL, "{\"command\":\"true\",\"stdin_b64\":\"@@\"}", 422);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "stdin_b64");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"sha256sum \\\"$SANDBOX_ROOT/bin.dat\\\" | cut -c1-64\"}",
                200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"),
                     "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83\n");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"cat \\\"$SANDBOX_ROOT/bin.dat\\\"\"}", 200);
    cr_assert(cpu_jstr(r, "stdout_b64"));
    got = (unsigned char *)strdup(cpu_jstr(r, "stdout_b64"));
    cpu_response_free(r);
    {
        /* base64 decode */
        static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t n = strlen((char *)got), o = 0;
        unsigned char *out = malloc(n);
        unsigned acc = 0;
        int bits = 0;
        for (size_t i = 0; i < n && got[i] != '='; i++) {
            acc = acc << 6 | (unsigned)(strchr(tbl, got[i]) - tbl);
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                out[o++] = (unsigned char)(acc >> bits);
            }
        }
        len = o;
        free(got);
        got = out;
    }
    cr_assert_eq(len, 1048576);
    tu_sha256_hex(got, len, hex);
    cr_assert_str_eq(hex, "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83");
    cr_assert_eq(memcmp(got, data, len), 0);
    free(got);
    free(data);
    terminate(key, id);
    free(id);
}

/* CASE-38: idempotency keys and request ids belong to the organisation. */
Test(server, case38_keys_scoped_to_the_tenant)
{
    char *kb = cpu_bootstrap(srv, "beta", NULL), *sa, *sb, *p;
    const char *h1[] = { "Idempotency-Key: 1", NULL };
    const char *h2[] = { "Idempotency-Key: 2", NULL };
    cpu_response *a, *b;

    a = req_s(201, "POST", "/v1/sandboxes", key, h1, "{\"backend\":\"local\"}");
    b = req_s(201, "POST", "/v1/sandboxes", kb, h1, "{\"backend\":\"local\"}");
    sa = strdup(cpu_jstr(a, "id"));
    sb = strdup(cpu_jstr(b, "id"));
    cr_assert_str_neq(sa, sb);
    cr_assert_str_neq(cpu_jstr(a, "creator_api_key_id"), cpu_jstr(b, "creator_api_key_id"));
    cpu_response_free(a);
    cpu_response_free(b);
    a = req_s(201, "POST", "/v1/sandboxes", key, h2, "{\"backend\":\"local\"}");
    b = req_s(201, "POST", "/v1/sandboxes", kb, h2, "{\"backend\":\"local\",\"timeout_secs\":60}");
    cr_assert_str_neq(cpu_jstr(a, "id"), cpu_jstr(b, "id"));
    terminate(key, cpu_jstr(a, "id"));
    terminate(kb, cpu_jstr(b, "id"));
    cpu_response_free(a);
    cpu_response_free(b);
    a = execute(key, sa, "run-1", "{\"command\":\"echo secret-A\"}", 200);
    b = execute(kb, sb, "run-1", "{\"command\":\"echo b\"}", 200);
    cr_assert_str_eq(cpu_jstr(a, "stdout"), "secret-A\n");
    cr_assert_str_eq(cpu_jstr(b, "stdout"), "b\n");
    cr_assert_null(strstr(b->body, "secret-A"));
    cpu_response_free(a);
    cpu_response_free(b);
    /* B never sees or touches A's sandbox. */
    p = path_of("/v1/sandboxes/%s", sa);
    expect_status_detail(404, "GET", p, kb, NULL, NULL, "sandbox not found");
    expect_status_detail(404, "DELETE", p, kb, NULL, NULL, "sandbox not found");
    free(p);
    p = path_of("/v1/sandboxes/%s/detail", sa);
    expect_status_detail(404, "GET", p, kb, NULL, NULL, "sandbox not found");
    free(p);
    a = execute(kb, sa, "run-1", "{\"command\":\"echo x\"}", 404);
    expect_detail(a, "sandbox not found");
    cpu_response_free(a);
    a = req_s(200, "GET", "/v1/sandboxes", kb, NULL, NULL);
    cr_assert_eq(json_object_array_length(a->json), 2);
    cr_assert_null(strstr(a->body, sa));
    cpu_response_free(a);
    /* Within one org, the same key with another body is still 409. */
    expect_status_detail(409, "POST", "/v1/sandboxes", key, h1,
                         "{\"backend\":\"local\",\"timeout_secs\":5}",
                         "idempotency key was already used with a different request");
    terminate(key, sa);
    terminate(kb, sb);
    free(sa);
    free(sb);
    free(kb);
}

Test(server, cross_tenant_keys_and_costs)
{
    char *kb = cpu_bootstrap(srv, "beta", NULL), *kid, *p, *sa;
    cpu_response *r;

    free(make_key(key, "[\"usage:read\"]", &kid));
    p = path_of("/v1/api-keys/%s", kid);
    expect_status_detail(404, "DELETE", p, kb, NULL, NULL, "API key not found");
    r = req_s(200, "GET", "/v1/api-keys", kb, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 1);
    cr_assert_null(strstr(r->body, kid));
    cpu_response_free(r);
    sa = cpu_create_local(srv, key, NULL);
    r = execute(key, sa, NULL, "{\"command\":\"true\"}", 200);
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/costs", kb, NULL, NULL);
    cr_assert_str_eq(r->body, "{\"group_by\":\"sandbox\",\"items\":[]}");
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/costs", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "items")), 1);
    cpu_response_free(r);
    terminate(key, sa);
    /* The key still works for its own org after B's attempt. */
    r = req_s(204, "DELETE", p, key, NULL, NULL);
    cpu_response_free(r);
    free(sa);
    free(p);
    free(kid);
    free(kb);
}

/* CASE-36: no key or token is echoed or logged; the DB holds digests. */
Test(server, case36_no_secret_echoed_or_logged)
{
    char *k2, *k2_id, *p, *out, *err, *malformed;
    cpu_response *r;
    const char *secrets[3];

    k2 = make_key(key, "[\"sandboxes:read\"]", &k2_id);
    p = path_of("/v1/api-keys/%s", k2_id);
    r = req_s(204, "DELETE", p, key, NULL, NULL);
    cpu_response_free(r);
    malformed = strdup("bsk_live_QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ!!");
    secrets[0] = key;
    secrets[1] = k2;
    secrets[2] = malformed;
    {
        struct { const char *method, *path, *k, *body; long status; } calls[] = {
            { "GET", "/v1/sandboxes", k2, NULL, 401 },
            { "GET", "/v1/sandboxes", malformed, NULL, 401 },
            { "POST", "/v1/sandboxes", key, "{\"backend\":\"docker\"}", 422 },
            { "POST", "/v1/sandboxes", key, "{\"backend\":\"local\",\"cpu\":-1}", 422 },
            { "GET", "/v1/api-keys", key, NULL, 200 },
            { "GET", "/v1/session", key, NULL, 200 },
            { "POST", "/v1/api-keys", key, "{\"name\":\"x\",\"scopes\":[]}", 422 },
        };
        for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
            r = req_s(calls[i].status, calls[i].method, calls[i].path, calls[i].k, NULL,
                      calls[i].body);
            for (size_t s = 0; s < 3; s++) {
                cr_assert_null(strstr(r->body, secrets[s]), "%s %s echoes a secret",
                               calls[i].method, calls[i].path);
                cr_assert_null(strstr(r->headers, secrets[s]));
            }
            cpu_response_free(r);
        }
    }
    out = cpu_read_log(srv, 0);
    err = cpu_read_log(srv, 1);
    for (size_t s = 0; s < 3; s++) {
        cr_assert_null(strstr(out, secrets[s]));
        cr_assert_null(strstr(err, secrets[s]));
    }
    cr_assert_null(strstr(err, "bsk_live_"));
    cr_assert_null(strstr(err, CPU_PEPPER));
    cr_assert(strstr(err, "method=GET route=/v1/sandboxes status=401"));
    /* The SQLite file holds no secret. */
    if (!cpu_store_is_pg()) {
        FILE *f;
        char *db, *dbs[3];
        dbs[0] = tu_strdup_printf("%s", store->url);
        dbs[1] = tu_strdup_printf("%s-wal", store->url);
        dbs[2] = NULL;
        for (int i = 0; dbs[i]; i++) {
            long n;
            f = fopen(dbs[i], "rb");
            if (!f)
                continue;
            fseek(f, 0, SEEK_END);
            n = ftell(f);
            fseek(f, 0, SEEK_SET);
            db = malloc((size_t)n + 1);
            cr_assert_eq(fread(db, 1, (size_t)n, f), (size_t)n);
            fclose(f);
            for (size_t s = 0; s < 2; s++)
                cr_assert_null(memmem(db, (size_t)n, secrets[s], strlen(secrets[s])),
                               "%s holds a key", dbs[i]);
            free(db);
        }
        free(dbs[0]);
        free(dbs[1]);
    }
    free(out);
    free(err);
    free(malformed);
    free(p);
    free(k2);
    free(k2_id);
}

Test(server, request_log_line)
{
    char *id = cpu_create_local(srv, key, NULL), *err, *want;

    terminate(key, id);
    err = cpu_read_log(srv, 1);
    want = tu_strdup_printf("method=POST route=/v1/sandboxes status=201 duration_ms=");
    cr_assert(strstr(err, want), "%s", err);
    free(want);
    want = tu_strdup_printf("method=DELETE route=/v1/sandboxes/{id} status=200 duration_ms=");
    cr_assert(strstr(err, want));
    free(want);
    want = tu_strdup_printf("organization=%s\n", org);
    cr_assert(strstr(err, want));
    cr_assert_null(strstr(err, id));   /* routes, not paths */
    free(want);
    free(err);
    free(id);
}

/* ---------------------------------------------------------------- crash, restart, replicas */

/* A server killed between the provider create and the commit of its
 * outcome: the retry with the key returns the reserved record and never
 * creates again. */
Test(server, killed_between_provider_create_and_commit)
{
    const char *hook[] = { "SBX_SERVER_TEST_CRASH_AFTER_PROVIDER_CREATE=1", NULL };
    const char *hdr[] = { "Idempotency-Key: crash-1", NULL };
    const char *body = "{\"backend\":\"local\",\"timeout_secs\":2}";
    cpu_server *dying = cpu_start(store, hook), *again;
    cpu_response *r;
    char *id;
    int st;

    r = cpu_http(dying->url, "POST", "/v1/sandboxes", key, hdr, body);
    cr_assert_eq(r->status, 0);     /* the connection died with the server */
    cpu_response_free(r);
    st = cpu_signal(dying, 0);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    again = cpu_start(store, NULL);
    r = cpu_http(again->url, "POST", "/v1/sandboxes", key, hdr, body);
    cr_assert_eq(r->status, 201, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "status"), "creating");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "attempt_count")), 1);
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 1);
    id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    /* A sandbox still `creating` does not execute (nor is it terminated:
     * it has no runtime). */
    {
        char *pe = path_of("/v1/sandboxes/%s/execute", id);
        r = cpu_http(again->url, "POST", pe, key, NULL, "{\"command\":\"true\"}");
        cr_assert_eq(r->status, 409, "%s", r->body);
        expect_detail(r, "sandbox is creating");
        cpu_response_free(r);
        free(pe);
        pe = path_of("/v1/sandboxes/%s", id);
        r = cpu_http(again->url, "DELETE", pe, key, NULL, NULL);
        cr_assert_eq(r->status, 409, "%s", r->body);
        expect_detail(r, "sandbox runtime is not attached and provider termination is not "
                         "configured");
        cpu_response_free(r);
        r = cpu_http(again->url, "GET", pe, key, NULL, NULL);
        cr_assert_str_eq(cpu_jstr(r, "status"), "creating");
        cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 1);
        cpu_response_free(r);
        free(pe);
    }
    /* The retry never reached a provider: this server started no plugin
     * host (it makes one on a backend's first use). */
    {
        char *cmd = tu_strdup_printf("pgrep -P %d", (int)again->pid);
        FILE *p = popen(cmd, "r");
        char line[64];
        cr_assert(p);
        cr_assert_null(fgets(line, sizeof line, p), "the server has a child: %s", line);
        pclose(p);
        free(cmd);
    }
    r = cpu_http(again->url, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 1);
    cr_assert_str_eq(cpu_jstr(r, "0.id"), id);
    cpu_response_free(r);
    r = cpu_http(again->url, "GET", "/v1/sandboxes/x/detail", key, NULL, NULL);
    cpu_response_free(r);
    cpu_stop(again);
    cpu_stop(dying);
    free(id);
    /* The sandbox the dead server made ends with its 2 s lifetime. */
    sleep(3);
}

/* Beyond the reference: the sealed session state lets a restarted server
 * execute in and terminate a sandbox it did not make. */
Test(server, restart_resumes_sandboxes)
{
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}");
    cpu_response *r;

    r = execute(key, id, NULL, "{\"command\":\"echo kept > \\\"$SANDBOX_ROOT/f\\\"\"}", 200);
    cpu_response_free(r);
    /* At rest the session state is sealed: no JSON, no path, no id. */
    {
        char *sealed = db_list("SELECT session_state_sealed FROM sandboxes");
        cr_assert(sealed);
        cr_assert_eq(strncmp(sealed, "v1.", 3), 0, "%s", sealed);
        cr_assert_null(strchr(sealed, '{'));
        cr_assert_null(strstr(sealed, "sbx-local"));
        cr_assert_null(strstr(sealed, "backend"));
        free(sealed);
    }
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = cpu_start(store, NULL);
    r = execute(key, id, NULL, "{\"command\":\"cat \\\"$SANDBOX_ROOT/f\\\"\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "kept\n");
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

/* An answered execute is committed with its usage and ledger entries before
 * the answer: a server killed right after it (SIGKILL: no clean shutdown)
 * loses none of it, in the default synchronous=NORMAL as well. */
Test(server, answered_execute_survives_a_killed_server)
{
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}"), *body, *n;
    cpu_response *r;
    int st;

    r = execute(key, id, "run-kept", "{\"command\":\"printf kept\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "kept");
    body = strdup(r->body);
    cpu_response_free(r);
    st = cpu_signal(srv, SIGKILL);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    cpu_stop(srv);
    srv = cpu_start(store, NULL);
    /* The same request id again: the stored answer, byte for byte. */
    r = execute(key, id, "run-kept", "{\"command\":\"printf kept\"}", 200);
    cr_assert_str_eq(r->body, body);
    cpu_response_free(r);
    n = db_list("SELECT status FROM executions WHERE request_id = 'run-kept'");
    cr_assert_str_eq(n, "completed");
    free(n);
    assert_metered_once("run-kept");
    terminate(key, id);
    free(body);
    free(id);
}

/* BESPOKE_DB_SYNCHRONOUS: normal by default, full on request (an SQLite
 * store says which on start); anything else is refused, naming it. */
Test(server, db_synchronous_setting)
{
    const char *full[] = { "BESPOKE_DB_SYNCHRONOUS=Full", NULL };
    const char *bad[] = { "off", "fsync", "normal ", "2" };
    char *log, *want, *id;
    cpu_response *r;
    int st;

    log = cpu_read_log(srv, 1);
    want = cpu_store_is_pg()
               ? tu_strdup_printf("sbx-server: store postgresql, schema version %d\n", 7)
               : tu_strdup_printf("sbx-server: store sqlite, schema version %d,"
                                  " synchronous normal\n", 7);
    cr_assert(strstr(log, want), "%s", log);
    free(log);
    free(want);
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = cpu_start(store, full);
    log = cpu_read_log(srv, 1);
    want = cpu_store_is_pg()
               ? tu_strdup_printf("sbx-server: store postgresql, schema version %d\n", 7)
               : tu_strdup_printf("sbx-server: store sqlite, schema version %d,"
                                  " synchronous full\n", 7);
    cr_assert(strstr(log, want), "%s", log);
    free(log);
    free(want);
    /* At full, the claim's volatile transaction and the durable outcome. */
    id = cpu_create_local(srv, key, "{\"timeout_secs\":60}");
    r = execute(key, id, "at-full", "{\"command\":\"printf full\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "full");
    cpu_response_free(r);
    r = execute(key, id, "at-full", "{\"command\":\"printf full\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "full");
    cpu_response_free(r);
    terminate(key, id);
    free(id);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *e = tu_strdup_printf("BESPOKE_DB_SYNCHRONOUS=%s", bad[i]), *err;
        const char *env[] = { e, NULL };
        cr_assert_null(cpu_try_start(store, env, &st));
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        err = cpu_last_stderr();
        want = tu_strdup_printf("sbx-server: BESPOKE_DB_SYNCHRONOUS must be \"normal\" or"
                                " \"full\", not \"%s\"\n", bad[i]);
        cr_assert_str_eq(err, want);
        free(want);
        free(err);
        free(e);
    }
}

/* The sealing itself (server/util.c): what cp_seal() made opens under the
 * same pepper and sandbox id only; another pepper, another id, a changed
 * byte or a truncated text opens to nothing. */
Test(sealing, opens_under_its_pepper_and_id_only)
{
    const char *plain = "{\"backend\":\"local\",\"data\":{\"id\":\"sbx-local-x\"}}";
    char *sealed = cp_seal("pepper-a", "sbx_1", plain), *other, *open_;
    size_t n;

    cr_assert(sealed);
    cr_assert_eq(strncmp(sealed, "v1.", 3), 0, "%s", sealed);
    cr_assert_null(strstr(sealed, "local"));
    open_ = cp_unseal("pepper-a", "sbx_1", sealed);
    cr_assert(open_);
    cr_assert_str_eq(open_, plain);
    free(open_);
    cr_assert_null(cp_unseal("pepper-b", "sbx_1", sealed));
    cr_assert_null(cp_unseal("pepper-a", "sbx_2", sealed));
    cr_assert_null(cp_unseal("", "sbx_1", sealed));
    /* Each seal draws a new nonce: the same state seals differently. */
    other = cp_seal("pepper-a", "sbx_1", plain);
    cr_assert_str_neq(other, sealed);
    open_ = cp_unseal("pepper-a", "sbx_1", other);
    cr_assert_str_eq(open_, plain);
    free(open_);
    free(other);
    /* One base64 character changed (the ciphertext, past the nonce), the
     * tag cut short, the version prefix gone. */
    n = strlen(sealed);
    other = strdup(sealed);
    other[3 + 20] = other[3 + 20] == 'A' ? 'B' : 'A';
    cr_assert_null(cp_unseal("pepper-a", "sbx_1", other));
    free(other);
    other = strndup(sealed, n - 4);
    cr_assert_null(cp_unseal("pepper-a", "sbx_1", other));
    free(other);
    cr_assert_null(cp_unseal("pepper-a", "sbx_1", sealed + 3));
    free(sealed);
}

/* A server with another pepper cannot open a sandbox's sealed state: with
 * a key that is valid under its pepper (written into the store as that
 * pepper's digest), it reads the record but can neither execute in nor
 * terminate the sandbox, and changes nothing. The state in the store
 * opens under the right pepper only; the server with the right pepper
 * executes in the same sandbox (its file still there) and ends it. */
Test(server, session_state_is_sealed_under_the_pepper)
{
    const char *other[] = { "BESPOKE_API_KEY_PEPPER=another-pepper", NULL };
    const char *other_key = "bsk_live_AnotherPepperKey0123456789abcdefghijklmnopq";
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}");
    char *sql, *sealed, *state, *p, digest[65], now[40];
    cpu_server *wrong;
    cpu_response *r;

    r = execute(key, id, NULL, "{\"command\":\"echo kept > \\\"$SANDBOX_ROOT/f\\\"\"}", 200);
    cpu_response_free(r);
    cpu_signal(srv, SIGTERM);
    /* In the store: the state opens under this suite's pepper and that
     * sandbox's id, and not under another pepper. */
    sql = tu_strdup_printf("SELECT session_state_sealed FROM sandboxes WHERE id = '%s'", id);
    sealed = db_list(sql);
    free(sql);
    cr_assert(sealed && *sealed);
    cr_assert_null(cp_unseal("another-pepper", id, sealed));
    state = cp_unseal(CPU_PEPPER, id, sealed);
    cr_assert(state, "the stored state does not open under the server's pepper");
    {
        json_object *j = json_tokener_parse(state);
        cr_assert(j, "%s", state);
        cr_assert_str_eq(json_object_get_string(cpu_jget(j, "backend")), "local");
        json_object_put(j);
    }
    free(state);
    free(sealed);

    /* Another pepper: the old keys are invalid ... */
    wrong = cpu_start(store, other);
    r = cpu_http(wrong->url, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_eq(r->status, 401);
    cpu_response_free(r);
    /* ... and a key of the organisation made under it reads the record
     * but cannot open the state: 409 on execute and terminate. */
    cp_hmac_hex("another-pepper", other_key, strlen(other_key), digest);
    cp_now_iso(now, sizeof now);
    sql = tu_strdup_printf("INSERT INTO api_keys(id, organization_id, name, key_prefix,"
                           " key_digest, scopes_json, created_at) VALUES ('key_other', '%s',"
                           " 'other pepper', '%.17s', '%s', '[\"*\"]', '%s')",
                           org, other_key, digest, now);
    cr_assert(db_list(sql) != NULL, "%s", sql);
    free(sql);
    p = path_of("/v1/sandboxes/%s", id);
    r = cpu_http(wrong->url, "GET", p, other_key, NULL, NULL);
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "status"), "running");
    cpu_response_free(r);
    {
        char *pe = path_of("/v1/sandboxes/%s/execute", id);
        r = cpu_http(wrong->url, "POST", pe, other_key, NULL,
                     "{\"command\":\"cat \\\"$SANDBOX_ROOT/f\\\"\"}");
        cr_assert_eq(r->status, 409, "%s", r->body);
        expect_detail(r, "sandbox runtime is unavailable after a control-plane restart");
        cpu_response_free(r);
        free(pe);
    }
    r = cpu_http(wrong->url, "DELETE", p, other_key, NULL, NULL);
    cr_assert_eq(r->status, 409, "%s", r->body);
    expect_detail(r, "sandbox runtime is not attached and provider termination is not configured");
    cpu_response_free(r);
    r = cpu_http(wrong->url, "GET", p, other_key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "status"), "running");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 2);
    cpu_response_free(r);
    cpu_stop(wrong);
    cpu_stop(srv);

    /* The right pepper again: the same sandbox, its file kept. */
    srv = cpu_start(store, NULL);
    r = execute(key, id, NULL, "{\"command\":\"cat \\\"$SANDBOX_ROOT/f\\\"\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "kept\n");
    cpu_response_free(r);
    terminate(key, id);
    free(p);
    free(id);
}

Test(server, two_servers_one_database)
{
    cpu_server *b = cpu_start(store, NULL);
    const char *urls[] = { srv->url, b->url };
    char *id;
    cpu_response *r;
    char *p;

    race_20(urls, 2, key);
    /* Made through A, executed and terminated through B. */
    id = cpu_create_local(srv, key, "{\"timeout_secs\":60}");
    p = tu_strdup_printf("/v1/sandboxes/%s/execute", id);
    r = cpu_http(b->url, "POST", p, key, NULL, "{\"command\":\"echo via-b\"}");
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "via-b\n");
    cpu_response_free(r);
    free(p);
    p = tu_strdup_printf("/v1/sandboxes/%s", id);
    r = cpu_http(b->url, "DELETE", p, key, NULL, NULL);
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "status"), "destroyed");
    cpu_response_free(r);
    r = cpu_http(srv->url, "POST", "/v1/sandboxes/x/execute", key, NULL, "{\"command\":\"true\"}");
    cpu_response_free(r);
    r = cpu_http(srv->url, "GET", p, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "status"), "destroyed");
    cpu_response_free(r);
    free(p);
    cpu_stop(b);
    free(id);
}

/* Six servers started at once on a new SQLite file (or a new PostgreSQL
 * database) all come up: SQLite refuses a connection's switch of a fresh
 * file to WAL that races another's with SQLITE_BUSY at once, without the
 * busy handler, and the server retries it. A key made through one is known
 * to every other. */
Test(server, servers_started_at_once_on_a_new_database_all_serve)
{
    enum { N = 6 };
    cpu_store *fresh = cpu_store_new();
    cpu_server *s[N];
    char *k;

    cpu_start_many(fresh, NULL, N, s);
    k = cpu_bootstrap(s[0], "at-once", NULL);
    for (int i = 0; i < N; i++) {
        cpu_response *r = cpu_http(s[i]->url, "GET", "/v1/sandboxes", k, NULL, NULL);
        cr_assert_eq(r->status, 200, "server %d: %s", i, r->body);
        cpu_response_free(r);
    }
    for (int i = 0; i < N; i++)
        cpu_stop(s[i]);
    free(k);
    cpu_store_free(fresh);
}

/* ---------------------------------------------------------------- metering */

/* A price for local (0.036 USD per vCPU-hour, 0.018 per GiB-hour: 0.054
 * per hour at the default size) through the operator's pricing file, and a
 * markup of 1.5. */
static char *price_dir;

/* A server with the test price table, the markup 1.5 and up to two more
 * settings ("NAME=value", NULL for none). */
static cpu_server *
start_priced_with(const char *extra_env, const char *extra_env2)
{
    char *file, *penv;
    const char *env[5] = { NULL, "BESPOKE_CUSTOMER_MARKUP=1.5", extra_env,
                           extra_env ? extra_env2 : NULL, NULL };
    cpu_server *s;

    if (!price_dir)
        price_dir = tu_mkdtemp("cp-pricing");
    file = tu_strdup_printf("%s/pricing.json", price_dir);
    {
        static const char doc[] = "{\"backends\":{\"local\":{\"vcpu_usd_per_h\":0.036,"
                                  "\"ram_gib_usd_per_h\":0.018}}}";
        tu_write_file(file, doc, sizeof doc - 1, 0644);
    }
    penv = tu_strdup_printf("SBX_PRICING_FILE=%s", file);
    env[0] = penv;
    s = cpu_start(store, env);
    free(penv);
    free(file);
    return s;
}

static cpu_server *
start_priced(const char *extra_env)
{
    return start_priced_with(extra_env, NULL);
}

static void
metering_setup(void)
{
    store = cpu_store_new();
    srv = start_priced(NULL);
    key = cpu_bootstrap(srv, "acme", &org);
}

static void
metering_teardown(void)
{
    teardown();
    tu_rmtree(price_dir);
    free(price_dir);
    price_dir = NULL;
}

TestSuite(metering, .init = metering_setup, .fini = metering_teardown, .timeout = 60);

/* "2026-12-04T22:37:31.783499+00:00" → microseconds since the epoch. */
static int64_t
iso_us(const char *s)
{
    struct tm tm = { 0 };
    int us = 0, n = 0;
    char frac[8] = "";

    cr_assert(s);
    cr_assert_eq(sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                        &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n), 6);
    if (s[n] == '.') {
        snprintf(frac, sizeof frac, "%.6s", s + n + 1);
        us = atoi(frac);
        n += 7;
    }
    cr_assert_str_eq(s + n, "+00:00");
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000000 + us;
}

/* Decimal text → pico units (money), or micro units for seconds (the
 * same text read as pico-units, divided by 10^6). */
static int64_t
pico(const char *text)
{
    int64_t v;

    cr_assert(text);
    cr_assert_eq(sbx_usd_parse(text, &v, NULL), 0, "%s", text);
    return v;
}

static int64_t
round_div(__int128 n, int64_t d)
{
    __int128 q = n / d, r = n % d;

    if (2 * (r < 0 ? -r : r) >= d)
        q += n < 0 ? -1 : 1;
    return (int64_t)q;
}

static char *
usd(int64_t pusd)
{
    char buf[SBX_USD_FORMAT_SIZE];

    cr_assert(sbx_usd_format(pusd, buf, sizeof buf) > 0);
    return strdup(buf);
}

/* The price of @us microseconds at 0.054 USD per hour, in pico-dollars. */
static int64_t
price_of(int64_t us)
{
    return round_div((__int128)54000000000LL * us, 3600LL * 1000000LL);
}

static int64_t
marked_up(int64_t pusd)
{
    return round_div((__int128)pusd * 3, 2);
}

Test(metering, execution_usage_and_ledger)
{
    char *id = cpu_create_local(srv, key, NULL), *p, *want;
    cpu_response *r;
    int64_t us, prov;

    p = path_of("/v1/sandboxes/%s", id);
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "hourly_rate_usd"), "0.054");
    cr_assert_str_eq(cpu_jstr(r, "pricing_source"), "2026-12-04");
    cpu_response_free(r);
    r = execute(key, id, "m-1", "{\"command\":\"sleep 0.05\"}", 200);
    us = pico(cpu_jstr(r, "usage.runtime_seconds")) / 1000000;
    cr_assert_geq(us, 50000);
    prov = price_of(us);
    want = usd(prov);
    cr_assert_str_eq(cpu_jstr(r, "usage.provider_cost_usd"), want);
    free(want);
    want = usd(marked_up(prov));
    cr_assert_str_eq(cpu_jstr(r, "usage.customer_cost_usd"), want);
    free(want);
    cpu_response_free(r);
    /* The lifecycle: after terminate, billed from provisioning to the
     * termination, once. */
    r = req_s(200, "DELETE", p, key, NULL, NULL);
    us = iso_us(cpu_jstr(r, "terminated_at")) - iso_us(cpu_jstr(r, "provisioning_at"));
    cpu_response_free(r);
    free(p);
    p = path_of("/v1/sandboxes/%s/detail", id);
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_assert_eq(pico(cpu_jstr(r, "cost.billable_seconds")) / 1000000, us);
    want = usd(price_of(us));
    cr_assert_str_eq(cpu_jstr(r, "cost.estimated_cost_usd"), want);
    cr_assert_str_eq(cpu_jstr(r, "cost.effective_cost_usd"), want);
    free(want);
    want = usd(marked_up(price_of(us)));
    cr_assert_str_eq(cpu_jstr(r, "cost.customer_cost_usd"), want);
    cr_assert_str_eq(cpu_jstr(r, "cost.cost_state"), "estimated");
    cr_assert_str_eq(cpu_jstr(r, "cost.currency"), "USD");
    cr_assert_null(cpu_jget(r->json, "cost.provider_reported_cost_usd"));
    cpu_response_free(r);
    /* The report: the lifecycle rows (usage events of a sandbox with a
     * lifecycle are not counted again). */
    r = req_s(200, "GET", "/v1/costs?group_by=backend", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "items")), 1);
    cr_assert_str_eq(cpu_jstr(r, "group_by"), "backend");
    cr_assert_str_eq(cpu_jstr(r, "items.0.key"), "local");
    cr_assert_eq(pico(cpu_jstr(r, "items.0.runtime_seconds")) / 1000000, us);
    cr_assert_str_eq(cpu_jstr(r, "items.0.provider_cost_usd"), want = usd(price_of(us)));
    free(want);
    cr_assert_str_eq(cpu_jstr(r, "items.0.customer_cost_usd"),
                     want = usd(marked_up(price_of(us))));
    free(want);
    cpu_response_free(r);
    /* A window that ends before the sandbox: nothing. */
    r = req_s(200, "GET", "/v1/costs?group_by=sandbox&start=2000-01-01T00:00:00Z"
                          "&end=2000-01-02T00:00:00%2B00:00", key, NULL, NULL);
    cr_assert_str_eq(r->body, "{\"group_by\":\"sandbox\",\"items\":[]}");
    cpu_response_free(r);
    free(p);
    free(id);
}

Test(metering, costs_parameters)
{
    cpu_response *r;

    r = req_s(422, "GET", "/v1/costs?group_by=week", key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.type"), "string_pattern_mismatch");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.0"), "query");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "group_by");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.input"), "week");
    cr_assert_str_eq(cpu_jstr(r, "detail.0.ctx.pattern"), "^(sandbox|backend|day)$");
    cpu_response_free(r);
    expect_status_detail(422, "GET", "/v1/costs?start=2026-01-01T00:00:00", key, NULL, NULL,
                         "start must include a timezone");
    expect_status_detail(422, "GET", "/v1/costs?end=2026-01-01", key, NULL, NULL,
                         "end must include a timezone");
    expect_status_detail(422, "GET",
                         "/v1/costs?start=2026-01-02T00:00:00Z&end=2026-01-01T00:00:00Z", key,
                         NULL, NULL, "start must be before end");
    r = req_s(422, "GET", "/v1/costs?start=yesterday", key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "start");
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/costs?group_by=day&start=2026-01-01T00:00:00.000Z", key, NULL,
              NULL);
    cr_assert_str_eq(r->body, "{\"group_by\":\"day\",\"items\":[]}");
    cpu_response_free(r);
}

/* A lifetime across a UTC midnight is split into one ledger row per day
 * (the server's clock is set 0.7 s before a midnight for this test). */
Test(metering, lifecycle_split_at_midnight)
{
    struct timespec ts;
    int64_t now_us, midnight, offset_us, prov_at, end_at, d1, d2;
    char env[80], day1[16], day2[16], *id, *p, *q1, *want;
    cpu_response *r;
    time_t t;
    struct tm tm;

    cpu_stop(srv);
    clock_gettime(CLOCK_REALTIME, &ts);
    now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    midnight = (now_us / 86400000000LL + 1) * 86400000000LL;
    offset_us = midnight - 1500000 - now_us;   /* the server's clock: 1.5 s before midnight */
    snprintf(env, sizeof env, "SBX_SERVER_TEST_CLOCK_OFFSET_S=%.6f", (double)offset_us / 1e6);
    srv = start_priced(env);
    id = cpu_create_local(srv, key, NULL);
    /* Until 0.3 s past the server's midnight. */
    for (;;) {
        clock_gettime(CLOCK_REALTIME, &ts);
        now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        if (now_us + offset_us >= midnight + 300000)
            break;
        usleep(20000);
    }
    p = path_of("/v1/sandboxes/%s", id);
    r = req_s(200, "DELETE", p, key, NULL, NULL);
    prov_at = iso_us(cpu_jstr(r, "provisioning_at"));
    end_at = iso_us(cpu_jstr(r, "terminated_at"));
    cpu_response_free(r);
    cr_assert_lt(prov_at, midnight, "the sandbox was made after the midnight");
    cr_assert_gt(end_at, midnight);
    d1 = midnight - prov_at;
    d2 = end_at - midnight;
    t = (time_t)(midnight / 1000000 - 1);
    gmtime_r(&t, &tm);
    strftime(day1, sizeof day1, "%Y-%m-%d", &tm);
    t = (time_t)(midnight / 1000000);
    gmtime_r(&t, &tm);
    strftime(day2, sizeof day2, "%Y-%m-%d", &tm);
    r = req_s(200, "GET", "/v1/costs?group_by=day", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "items")), 2, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "items.0.key"), day1);
    cr_assert_str_eq(cpu_jstr(r, "items.1.key"), day2);
    cr_assert_eq(pico(cpu_jstr(r, "items.0.runtime_seconds")) / 1000000, d1);
    cr_assert_eq(pico(cpu_jstr(r, "items.1.runtime_seconds")) / 1000000, d2);
    /* The money of both days adds up to the lifetime's, exactly. */
    cr_assert_eq(pico(cpu_jstr(r, "items.0.provider_cost_usd")) +
                 pico(cpu_jstr(r, "items.1.provider_cost_usd")), price_of(d1 + d2));
    cr_assert_eq(pico(cpu_jstr(r, "items.0.customer_cost_usd")) +
                 pico(cpu_jstr(r, "items.1.customer_cost_usd")), marked_up(price_of(d1 + d2)));
    cpu_response_free(r);
    /* A window from the midnight: the second day only. */
    t = (time_t)(midnight / 1000000);
    gmtime_r(&t, &tm);
    strftime(env, sizeof env, "/v1/costs?group_by=sandbox&start=%Y-%m-%dT%H:%M:%SZ", &tm);
    r = req_s(200, "GET", env, key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "items")), 1);
    cr_assert_str_eq(cpu_jstr(r, "items.0.key"), id);
    cr_assert_eq(pico(cpu_jstr(r, "items.0.runtime_seconds")) / 1000000, d2);
    q1 = strdup(cpu_jstr(r, "items.0.provider_cost_usd"));
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/costs?group_by=day", key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "items.1.provider_cost_usd"), q1);
    cpu_response_free(r);
    (void)want;
    free(q1);
    free(p);
    free(id);
}

/* ---------------------------------------------------------------- schema */

/* The first column of @sql's rows on the test store, comma-joined (new
 * string); NULL when the statement fails. */
static char *
db_list(const char *sql)
{
    char *out = calloc(1, 1);
    size_t n = 0;

    if (cpu_store_is_pg()) {
        PGconn *c = PQconnectdb(store->url);
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
            PQclear(r);
            PQfinish(c);
            free(out);
            return NULL;
        }
        for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
            const char *v = PQgetvalue(r, i, 0);
            out = realloc(out, n + strlen(v) + 2);
            n += (size_t)sprintf(out + n, "%s%s", n ? "," : "", v);
        }
        PQclear(r);
        PQfinish(c);
    } else {
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        int rc;
        cr_assert_eq(sqlite3_open(store->url, &db), SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
            sqlite3_close(db);
            free(out);
            return NULL;
        }
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *v = (const char *)sqlite3_column_text(st, 0);
            v = v ? v : "";
            out = realloc(out, n + strlen(v) + 2);
            n += (size_t)sprintf(out + n, "%s%s", n ? "," : "", v);
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
        if (rc != SQLITE_DONE) {
            free(out);
            return NULL;
        }
    }
    return out;
}

Test(server, schema_migrations_forward)
{
    char *v = db_list("SELECT version FROM schema_migrations ORDER BY version"), *err;
    int st = 0;

    cr_assert_str_eq(v, "1,2,3,4,5,6,7");
    free(v);
    if (!cpu_store_is_pg()) {
        v = db_list("PRAGMA journal_mode");
        cr_assert_str_eq(v, "wal");
        free(v);
    }
    /* A database at version 1: the server applies 2 on start. */
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    free(db_list("DELETE FROM schema_migrations WHERE version = 2"));
    free(db_list("ALTER TABLE sandboxes DROP COLUMN session_state_sealed"));
    v = db_list("SELECT version FROM schema_migrations ORDER BY version");
    cr_assert_str_eq(v, "1,3,4,5,6,7");
    free(v);
    cr_assert_null(db_list("SELECT session_state_sealed FROM sandboxes"));
    srv = cpu_start(store, NULL);
    v = db_list("SELECT version FROM schema_migrations ORDER BY version");
    cr_assert_str_eq(v, "1,2,3,4,5,6,7");
    free(v);
    v = db_list("SELECT session_state_sealed FROM sandboxes");
    cr_assert_str_eq(v, "");
    free(v);
    /* Its data is kept: the key still works. */
    {
        cpu_response *r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
        cpu_response_free(r);
    }
    /* A database from a newer server is refused, naming the versions. */
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = NULL;
    free(db_list("INSERT INTO schema_migrations(version, applied_at) VALUES (99, 'x')"));
    cr_assert_null(cpu_try_start(store, NULL, &st));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    err = cpu_last_stderr();
    cr_assert(strstr(err, "the database has schema version 99, newer than this sbx-server "
                          "knows (7)"), "%s", err);
    free(err);
    free(db_list("DELETE FROM schema_migrations WHERE version = 99"));
    srv = cpu_start(store, NULL);
}

/* SQLite's checkpoints run on the store's background thread (the
 * connections' WAL hook wakes it at 1000 frames, in place of SQLite's own
 * autocheckpoint): 300 executes write about 3000 WAL pages, and the WAL
 * file is still restarted from its beginning, never growing past the
 * frames written between two checkpoints (1000 and the writes in flight
 * while one runs; 2000 pages of 4096 bytes and their 24-byte headers is
 * the bound asserted). Without checkpoints it would hold every page. */
Test(server, sqlite_checkpoints_in_the_background)
{
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}"), *wal, *n;
    struct stat sb;

    if (cpu_store_is_pg()) {
        /* PostgreSQL checkpoints itself: the store has no file here. */
        cr_assert_eq(access(store->url, F_OK), -1);
        terminate(key, id);
        free(id);
        return;
    }
    for (int i = 0; i < 300; i++) {
        char rid[32];
        cpu_response *r;

        snprintf(rid, sizeof rid, "ckpt-%d", i);
        r = execute(key, id, rid, "{\"command\":\"true\"}", 200);
        cpu_response_free(r);
    }
    settle(srv, key);
    n = db_list("SELECT COUNT(*) FROM usage_events WHERE request_id LIKE 'ckpt-%'");
    cr_assert_str_eq(n, "300");
    free(n);
    wal = tu_strdup_printf("%s-wal", store->url);
    cr_assert_eq(stat(wal, &sb), 0, "%s", wal);
    cr_assert_lt(sb.st_size, 32 + 2000 * (4096 + 24), "WAL of %lld bytes", (long long)sb.st_size);
    free(wal);
    terminate(key, id);
    free(id);
}

/* The execute's tables as schema version 2 made them (rowid tables with a
 * unique index per "once" rule), for the migration test below. */
static const char *const executions_v2[] = {
    "CREATE TABLE executions_v2 ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " request_id TEXT NOT NULL, status TEXT NOT NULL, response_json TEXT, error TEXT,"
    " created_at TEXT NOT NULL, completed_at TEXT,"
    " UNIQUE(organization_id, sandbox_id, request_id))",
    "INSERT INTO executions_v2 SELECT id, organization_id, sandbox_id, request_id, status,"
    " response_json, error, created_at, completed_at FROM executions",
    "DROP TABLE executions",
    "ALTER TABLE executions_v2 RENAME TO executions",
    "CREATE INDEX executions_org_created ON executions(organization_id, created_at)",
    "CREATE TABLE usage_events_v2 ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " execution_id TEXT, request_id TEXT NOT NULL, metric TEXT NOT NULL,"
    " quantity TEXT NOT NULL, unit TEXT NOT NULL, provider_cost_usd TEXT NOT NULL,"
    " customer_cost_usd TEXT NOT NULL, created_at TEXT NOT NULL,"
    " UNIQUE(organization_id, sandbox_id, request_id, metric))",
    "INSERT INTO usage_events_v2 SELECT id, organization_id, sandbox_id, execution_id,"
    " request_id, metric, quantity, unit, provider_cost_usd, customer_cost_usd, created_at"
    " FROM usage_events",
    "DROP TABLE usage_events",
    "ALTER TABLE usage_events_v2 RENAME TO usage_events",
    "CREATE INDEX usage_events_org_created ON usage_events(organization_id, created_at)",
    "CREATE TABLE ledger_entries_v2 ("
    " id TEXT PRIMARY KEY, organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " usage_event_id TEXT NOT NULL, kind TEXT NOT NULL, amount_usd TEXT NOT NULL,"
    " price_version TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE(usage_event_id, kind))",
    "INSERT INTO ledger_entries_v2 SELECT id, organization_id, sandbox_id, usage_event_id,"
    " kind, amount_usd, price_version, created_at FROM ledger_entries",
    "DROP TABLE ledger_entries",
    "ALTER TABLE ledger_entries_v2 RENAME TO ledger_entries",
    "CREATE INDEX ledger_entries_org_created ON ledger_entries(organization_id, created_at)",
    "DROP TABLE execution_outbox",
    "DELETE FROM schema_migrations WHERE version IN (3, 4, 5, 6, 7)",
};

/* The indexes of the execute's three tables: from version 3 a primary key
 * each (on SQLite the table itself, WITHOUT ROWID) and usage_events' time
 * index (version 4's partial index of executions still to meter is gone
 * in version 5, the outbox a table of its own), and from version 7 the
 * partial index of running executions; version 2 had an id key, a unique
 * index and a time index each. */
static char *
execute_table_indexes(void)
{
    return db_list(cpu_store_is_pg()
                       ? "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema()"
                         " AND tablename IN ('executions', 'usage_events', 'ledger_entries')"
                       : "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name"
                         " IN ('executions', 'usage_events', 'ledger_entries')");
}

/* Version 3 keys executions, usage_events and ledger_entries on their
 * natural keys; a database at version 2 keeps every row through it: the
 * stored answer is replayed and was metered once. */
Test(server, schema_migration_3_keeps_executions)
{
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}"), *body, *n;
    cpu_response *r;

    r = execute(key, id, "mig-kept", "{\"command\":\"printf kept\"}", 200);
    body = strdup(r->body);
    cpu_response_free(r);
    n = execute_table_indexes();
    cr_assert_str_eq(n, cpu_store_is_pg() ? "5" : "2");
    free(n);
    if (!cpu_store_is_pg()) {
        n = db_list("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN"
                    " ('executions', 'usage_events', 'ledger_entries')"
                    " AND sql LIKE '%WITHOUT ROWID'");
        cr_assert_str_eq(n, "3");
        free(n);
    }
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    for (size_t i = 0; i < sizeof executions_v2 / sizeof executions_v2[0]; i++) {
        n = db_list(executions_v2[i]);
        cr_assert_not_null(n, "%s", executions_v2[i]);
        free(n);
    }
    n = execute_table_indexes();
    cr_assert_str_eq(n, "9");
    free(n);
    srv = cpu_start(store, NULL);
    n = db_list("SELECT version FROM schema_migrations ORDER BY version");
    cr_assert_str_eq(n, "1,2,3,4,5,6,7");
    free(n);
    n = execute_table_indexes();
    cr_assert_str_eq(n, cpu_store_is_pg() ? "5" : "2");
    free(n);
    r = execute(key, id, "mig-kept", "{\"command\":\"printf again\"}", 200);
    cr_assert_str_eq(r->body, body);
    cpu_response_free(r);
    assert_metered_once("mig-kept");
    /* A new request id runs and is metered on the new tables. */
    r = execute(key, id, "mig-new", "{\"command\":\"printf new\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "new");
    cpu_response_free(r);
    n = db_list("SELECT status FROM executions WHERE request_id = 'mig-new'");
    cr_assert_str_eq(n, "completed");
    free(n);
    terminate(key, id);
    free(body);
    free(id);
}

/* ---------------------------------------------------------------- CASE-36, provider side */

#define E2B_SECRET "e2b_TESTSECRET_0123456789abcdef"

/* The e2b contract fake (tests/fakes/e2b.py), its API key "fake-e2b-key",
 * with the fault rules @faults (SBX_FAKE_FAULTS; NULL: none) from its
 * start; SIGTERM when the test process dies. Its pid in *@pid, its
 * directory in *@dir, its URL back. */
static char *
start_e2b_fake_with(const char *faults, pid_t *pid, char **dir)
{
    char *out, *line = NULL, *url = NULL;
    const char *src = getenv("SBX_TEST_SRCDIR") ? getenv("SBX_TEST_SRCDIR")
                                                : SBX_SOURCE_DIR "/tests";

    *dir = tu_mkdtemp("cp-e2b");
    out = tu_strdup_printf("%s/port", *dir);
    *pid = fork();
    cr_assert(*pid >= 0);
    if (*pid == 0) {
        char *script = tu_strdup_printf("%s/fakes/e2b.py", src);
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        /* Ended with the test process, also one that failed an assertion
         * before it could stop the fake. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1)
            _exit(1);
        dup2(fd, 1);
        unsetenv("SBX_FAKE_API_KEY");
        if (faults)
            setenv("SBX_FAKE_FAULTS", faults, 1);
        else
            unsetenv("SBX_FAKE_FAULTS");
        execl("/usr/bin/python3", "python3", script, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 400 && !url; i++) {
        FILE *f = fopen(out, "r");
        size_t cap = 0;
        if (f && getline(&line, &cap, f) > 0 && !strncmp(line, "PORT ", 5))
            url = tu_strdup_printf("http://127.0.0.1:%d", atoi(line + 5));
        if (f)
            fclose(f);
        if (!url)
            usleep(25000);
    }
    free(line);
    free(out);
    cr_assert(url, "the e2b fake did not start");
    return url;
}

/* The e2b fake answering every create with a 401 whose body echoes the
 * credential. */
static char *
start_e2b_fake(pid_t *pid, char **dir)
{
    return start_e2b_fake_with("[{\"method\":\"POST\",\"path\":\"^/sandboxes\",\"status\":401,"
                               "\"times\":-1,\"body\":{\"message\":\"invalid key " E2B_SECRET
                               "\"}}]", pid, dir);
}

Test(server, case36_provider_secret_never_leaves)
{
    pid_t fake;
    char *fdir, *url = start_e2b_fake(&fake, &fdir), *penv, *uenv, *senv, *out, *err;
    const char *env[6];
    cpu_server *s;
    cpu_response *r;
    char *k;
    sbx_error *e = NULL;
    char *estr;

    penv = tu_strdup_printf("SBX_PLUGIN_PATH=%s/plugins/cloud/e2b/.libs:%s", SBX_BUILD_DIR,
                            getenv("SBX_PLUGIN_PATH") ? getenv("SBX_PLUGIN_PATH") : "");
    uenv = tu_strdup_printf("E2B_API_URL=%s", url);
    senv = tu_strdup_printf("E2B_SANDBOX_URL=%s", url);
    env[0] = penv;
    env[1] = uenv;
    env[2] = senv;
    env[3] = "E2B_API_KEY=" E2B_SECRET;
    env[4] = "BESPOKE_ALLOWED_BACKENDS=local,e2b";
    env[5] = NULL;
    s = cpu_start(store, env);
    k = cpu_bootstrap(s, "gamma", NULL);
    r = cpu_http(s->url, "POST", "/v1/sandboxes", k, NULL, "{\"backend\":\"e2b\"}");
    cr_assert_eq(r->status, 502, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "detail.code"), "authentication");
    cr_assert_str_eq(cpu_jstr(r, "detail.message"), "Provider authentication failed.");
    cr_assert_str_eq(cpu_jstr(r, "detail.backend"), "e2b");
    cr_assert_null(strstr(r->body, "TESTSECRET"));
    cr_assert_null(strstr(r->headers, "TESTSECRET"));
    cpu_response_free(r);
    /* The stored record and its detail hold the fixed payload only. */
    r = cpu_http(s->url, "GET", "/v1/sandboxes", k, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "0.status"), "failed");
    cr_assert_str_eq(cpu_jstr(r, "0.latest_error.code"), "authentication");
    cr_assert_null(strstr(r->body, "TESTSECRET"));
    cr_assert_null(strstr(r->body, k));
    cpu_response_free(r);
    out = cpu_read_log(s, 0);
    err = cpu_read_log(s, 1);
    cr_assert_null(strstr(out, "TESTSECRET"));
    cr_assert_null(strstr(err, "TESTSECRET"));
    cr_assert_null(strstr(err, k));
    free(out);
    free(err);
    cpu_stop(s);
    /* The database holds neither. */
    {
        char *all = db_list("SELECT COALESCE(latest_error_json, '') || config_json FROM sandboxes");
        cr_assert(all);
        cr_assert_null(strstr(all, "TESTSECRET"));
        free(all);
        all = db_list("SELECT key_digest FROM api_keys");
        cr_assert_null(strstr(all, "bsk_live_"));
        free(all);
    }
    /* The C API's error string. */
    setenv("E2B_API_URL", url, 1);
    setenv("E2B_SANDBOX_URL", url, 1);
    setenv("E2B_API_KEY", E2B_SECRET, 1);
    setenv("SBX_PLUGIN_PATH", penv + strlen("SBX_PLUGIN_PATH="), 1);
    cr_assert_null(sbx_create("e2b", NULL, &e));
    cr_assert_eq(sbx_error_get_code(e), SBX_ERROR_AUTHENTICATION);
    estr = sbx_error_to_string(e);
    cr_assert_null(strstr(estr, "TESTSECRET"), "%s", estr);
    free(estr);
    sbx_error_free(e);
    kill(fake, SIGTERM);
    waitpid(fake, NULL, 0);
    tu_rmtree(fdir);
    free(fdir);
    free(url);
    free(penv);
    free(uenv);
    free(senv);
    free(k);
}

/* ---------------------------------------------------------------- provider failures on e2b */

/* A server enabling local and e2b, e2b being the contract fake at @url
 * with its own key (its sandboxes work until a fault rule says otherwise),
 * with the setting @extra ("NAME=value") too unless NULL. */
static cpu_server *
start_with_e2b_and(const char *url, const char *extra)
{
    char *penv = tu_strdup_printf("SBX_PLUGIN_PATH=%s/plugins/cloud/e2b/.libs:%s", SBX_BUILD_DIR,
                                  getenv("SBX_PLUGIN_PATH") ? getenv("SBX_PLUGIN_PATH") : "");
    char *uenv = tu_strdup_printf("E2B_API_URL=%s", url);
    char *senv = tu_strdup_printf("E2B_SANDBOX_URL=%s", url);
    const char *env[] = { penv, uenv, senv, "E2B_API_KEY=fake-e2b-key",
                          "BESPOKE_ALLOWED_BACKENDS=local,e2b", extra, NULL };
    cpu_server *s = cpu_start(store, env);

    free(penv);
    free(uenv);
    free(senv);
    return s;
}

static cpu_server *
start_with_e2b(const char *url)
{
    return start_with_e2b_and(url, NULL);
}

/* Replaces the fake's fault rules with @rules (JSON; "[]": none). */
static void
fake_faults(const char *url, const char *rules)
{
    cpu_response *r = cpu_http(url, "POST", "/_fake/faults", NULL, NULL, rules);

    cr_assert_eq(r->status / 100, 2, "POST /_fake/faults: %ld %s", r->status, r->body);
    cpu_response_free(r);
}

static void
stop_fake(pid_t pid, char *dir, char *url)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    tu_rmtree(dir);
    free(dir);
    free(url);
}

/* A terminate whose provider destroy fails (CONTROL-PLANE.md §1): the
 * provider's payload with op "destroy" as the answer (502 for a refusal,
 * 504 for the provider's timeout), the record `failed` with that payload as
 * its latest_error and retry_status not_retryable; a failed sandbox cannot
 * execute (409) but may be terminated again, which destroys it once the
 * provider deletes. */
Test(server, terminate_whose_destroy_fails)
{
    pid_t fake;
    char *fdir, *furl = start_e2b_fake_with(NULL, &fake, &fdir), *k, *id, *p, *pe, *kid;
    cpu_server *s;
    cpu_response *r, *answer;
    const char *refused = "{\"detail\":{\"message\":\"Provider authentication failed.\","
                          "\"code\":\"authentication\",\"backend\":\"e2b\",\"op\":\"destroy\","
                          "\"retryable\":false,\"outcome\":\"failed\",\"context\":{}}}";
    const char *timed_out = "{\"detail\":{\"message\":\"Provider request timed out.\","
                            "\"code\":\"timeout\",\"backend\":\"e2b\",\"op\":\"destroy\","
                            "\"retryable\":true,\"outcome\":\"failed\",\"context\":{}}}";
    const char *stopping_at;

    s = start_with_e2b(furl);
    k = cpu_bootstrap(s, "delta", NULL);
    r = cpu_http(s->url, "GET", "/v1/api-keys", k, NULL, NULL);
    kid = strdup(cpu_jstr(r, "0.id"));
    cpu_response_free(r);
    r = cpu_http(s->url, "POST", "/v1/sandboxes", k, NULL, "{\"backend\":\"e2b\"}");
    cr_assert_eq(r->status, 201, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "status"), "running");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 2);
    id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    p = path_of("/v1/sandboxes/%s", id);
    pe = path_of("/v1/sandboxes/%s/execute", id);

    /* The provider refuses the delete: 502 with its payload, op destroy. */
    fake_faults(furl, "[{\"method\":\"DELETE\",\"path\":\"^/sandboxes/\",\"status\":403,"
                      "\"times\":-1}]");
    answer = cpu_http(s->url, "DELETE", p, k, NULL, NULL);
    cr_assert_eq(answer->status, 502, "%s", answer->body);
    cr_assert_str_eq(answer->body, refused);
    /* The record: failed, the payload its latest error, not retryable,
     * stopped but not terminated; two state writes since running. */
    r = cpu_http(s->url, "GET", p, k, NULL, NULL);
    cr_assert_eq(r->status, 200);
    cr_assert_str_eq(cpu_jstr(r, "status"), "failed");
    cr_assert_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "latest_error"),
                                                    JSON_C_TO_STRING_PLAIN),
                     json_object_to_json_string_ext(cpu_jget(answer->json, "detail"),
                                                    JSON_C_TO_STRING_PLAIN));
    cr_assert_str_eq(cpu_jstr(r, "retry_status"), "not_retryable");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 4);
    cr_assert(cpu_jstr(r, "failed_at"));
    cr_assert(cpu_jstr(r, "stopping_at"));
    stopping_at = cpu_jstr(r, "stopping_at");
    cr_assert(strcmp(stopping_at, cpu_jstr(r, "failed_at")) <= 0);
    cr_assert_null(cpu_jget(r->json, "terminated_at"));
    cr_assert_null(cpu_jget(r->json, "destroyed_at"));
    cr_assert_null(cpu_jget(r->json, "termination_reason"));
    cr_assert_null(cpu_jget(r->json, "terminated_by_api_key_id"));
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "attempt_count")), 1);
    cpu_response_free(r);
    cpu_response_free(answer);
    /* A failed sandbox does not execute: 409 before any provider call. */
    r = cpu_http(s->url, "POST", pe, k, NULL, "{\"command\":\"true\"}");
    cr_assert_eq(r->status, 409, "%s", r->body);
    expect_detail(r, "sandbox is failed");
    cpu_response_free(r);

    /* Terminated again, the provider timing out: 504, op destroy; still
     * failed, the new payload its latest error. */
    fake_faults(furl, "[{\"method\":\"DELETE\",\"path\":\"^/sandboxes/\",\"status\":504,"
                      "\"times\":-1}]");
    answer = cpu_http(s->url, "DELETE", p, k, NULL, NULL);
    cr_assert_eq(answer->status, 504, "%s", answer->body);
    cr_assert_str_eq(answer->body, timed_out);
    r = cpu_http(s->url, "GET", p, k, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "status"), "failed");
    cr_assert_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "latest_error"),
                                                    JSON_C_TO_STRING_PLAIN),
                     json_object_to_json_string_ext(cpu_jget(answer->json, "detail"),
                                                    JSON_C_TO_STRING_PLAIN));
    cr_assert_str_eq(cpu_jstr(r, "retry_status"), "not_retryable");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 6);
    cpu_response_free(r);
    cpu_response_free(answer);

    /* The provider deletes again: a third terminate destroys it, by this
     * key, as the operator's; a fourth answers the same record. */
    fake_faults(furl, "[]");
    r = cpu_http(s->url, "DELETE", p, k, NULL, NULL);
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "status"), "destroyed");
    cr_assert_str_eq(cpu_jstr(r, "termination_reason"), "operator");
    cr_assert_str_eq(cpu_jstr(r, "terminated_by_api_key_id"), kid);
    cr_assert_str_eq(cpu_jstr(r, "terminated_by_api_key_name"), "Initial key");
    cr_assert(cpu_jstr(r, "terminated_at"));
    cr_assert_str_eq(cpu_jstr(r, "destroyed_at"), cpu_jstr(r, "terminated_at"));
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 8);
    answer = cpu_http(s->url, "DELETE", p, k, NULL, NULL);
    cr_assert_eq(answer->status, 200, "%s", answer->body);
    cr_assert_str_eq(answer->body, r->body);
    cpu_response_free(answer);
    cpu_response_free(r);
    /* The fake has no sandbox left. */
    r = cpu_http(furl, "GET", "/v2/sandboxes", NULL, (const char *[]){
                     "X-API-Key: fake-e2b-key", NULL }, NULL);
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(r->body, "[]");
    cpu_response_free(r);
    free(pe);
    free(p);
    free(id);
    free(kid);
    free(k);
    cpu_stop(s);
    stop_fake(fake, fdir, furl);
}

/* Execute through a provider that fails (CONTROL-PLANE.md §1): its
 * timeout is 504 with the payload, op "execute"; the request id replays
 * the failure (409, the payload's text) and is metered once; the next
 * request runs. */
Test(server, execute_on_a_provider_timeout_is_504)
{
    pid_t fake;
    char *fdir, *furl = start_e2b_fake_with(NULL, &fake, &fdir), *k, *id, *pe;
    const char *hdr[] = { "Idempotency-Key: slow-1", NULL };
    cpu_server *s;
    cpu_response *r, *again;

    s = start_with_e2b(furl);
    k = cpu_bootstrap(s, "epsilon", NULL);
    r = cpu_http(s->url, "POST", "/v1/sandboxes", k, NULL, "{\"backend\":\"e2b\"}");
    cr_assert_eq(r->status, 201, "%s", r->body);
    id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    pe = path_of("/v1/sandboxes/%s/execute", id);
    fake_faults(furl, "[{\"method\":\"POST\",\"path\":\"^/process.Process/Start$\","
                      "\"status\":504}]");
    r = cpu_http(s->url, "POST", pe, k, hdr, "{\"command\":\"echo hi\"}");
    cr_assert_eq(r->status, 504, "%s", r->body);
    cr_assert_str_eq(r->body, "{\"detail\":{\"message\":\"Provider request timed out.\","
                              "\"code\":\"timeout\",\"backend\":\"e2b\",\"op\":\"execute\","
                              "\"retryable\":true,\"outcome\":\"failed\",\"context\":{}}}");
    again = cpu_http(s->url, "POST", pe, k, hdr, "{\"command\":\"echo hi\"}");
    cr_assert_eq(again->status, 409, "%s", again->body);
    cr_assert_str_eq(cpu_jstr(again, "detail"),
                     json_object_to_json_string_ext(cpu_jget(r->json, "detail"),
                                                    JSON_C_TO_STRING_PLAIN));
    cpu_response_free(again);
    cpu_response_free(r);
    settle(s, k);
    assert_metered_once("slow-1");
    /* The rule answered once: the sandbox runs the next request. */
    r = cpu_http(s->url, "POST", pe, k, NULL, "{\"command\":\"echo hi\"}");
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "hi\n");
    cpu_response_free(r);
    free(pe);
    free(id);
    free(k);
    cpu_stop(s);
    stop_fake(fake, fdir, furl);
}

/* The value of "detail" in the answer text @body ({"detail":{...}}), in a
 * buffer of its own, valid until the next call. */
static const char *
detail_text(const char *body)
{
    static char buf[1024];
    const char *b = strchr(body + 1, '{');

    snprintf(buf, sizeof buf, "%.*s", (int)strlen(b) - 1, b);
    return buf;
}

/* The record of sandbox @id through @s as @k (asserts 200). */
static cpu_response *
record_of(const cpu_server *s, const char *k, const char *id)
{
    char *p = path_of("/v1/sandboxes/%s", id);
    cpu_response *r = cpu_http(s->url, "GET", p, k, NULL, NULL);

    cr_assert_eq(r->status, 200, "%s", r->body);
    free(p);
    return r;
}

/* The latest_error of record @r, as compact JSON text. */
static const char *
latest_error_text(const cpu_response *r)
{
    return json_object_to_json_string_ext(cpu_jget(r->json, "latest_error"),
                                          JSON_C_TO_STRING_PLAIN);
}

/* A provider that does not answer (the fake reads the request and says
 * nothing for 60 s) does not hold a request: with
 * BESPOKE_PROVIDER_TIMEOUT_SECS=2, a create and a terminate are answered
 * 504 with the provider's timeout payload within the 2 s and the plugin
 * host's 2 s to acknowledge the cancel, the record failed (the create's
 * outcome unknown, so not retryable and blocked on an unknown cleanup;
 * the terminate's not retryable); an execute whose command has
 * timeout_secs 1 is answered 504 at 1 s + SBX_KILL_GRACE_SECS + 2 s, its
 * outcome unknown, the execution failed with that payload (a replay is 409
 * with it) and metered once. The same server answers at once again when
 * the provider does. */
Test(server, a_provider_that_hangs_is_answered_504_within_its_bound, .timeout = 120)
{
    pid_t fake;
    char *fdir, *furl = start_e2b_fake_with(NULL, &fake, &fdir), *k, *id, *p, *pe;
    const char *hdr[] = { "Idempotency-Key: hung-1", NULL };
    cpu_server *s;
    cpu_response *r, *rec, *again;
    double t0, dt;
    const char *create_timeout = "{\"detail\":{\"message\":\"Provider request timed out.\","
                                 "\"code\":\"timeout\",\"backend\":\"e2b\",\"op\":\"create\","
                                 "\"retryable\":false,\"outcome\":\"unknown\",\"context\":{}}}";
    const char *exec_timeout = "{\"detail\":{\"message\":\"Provider request timed out.\","
                               "\"code\":\"timeout\",\"backend\":\"e2b\",\"op\":\"execute\","
                               "\"retryable\":false,\"outcome\":\"unknown\",\"context\":{}}}";
    const char *destroy_timeout = "{\"detail\":{\"message\":\"Provider request timed out.\","
                                  "\"code\":\"timeout\",\"backend\":\"e2b\",\"op\":\"destroy\","
                                  "\"retryable\":true,\"outcome\":\"failed\",\"context\":{}}}";

    s = start_with_e2b_and(furl, "BESPOKE_PROVIDER_TIMEOUT_SECS=2");
    k = cpu_bootstrap(s, "zeta", NULL);

    /* The create. */
    fake_faults(furl, "[{\"method\":\"POST\",\"path\":\"^/sandboxes$\",\"action\":\"hang\","
                      "\"delay\":60}]");
    t0 = tu_now();
    r = cpu_http(s->url, "POST", "/v1/sandboxes", k, NULL, "{\"backend\":\"e2b\"}");
    dt = tu_now() - t0;
    cr_assert_eq(r->status, 504, "%s", r->body);
    cr_assert_str_eq(r->body, create_timeout);
    cr_assert(dt >= 1.9 && dt < 4.5, "the create was answered after %.2f s", dt);
    cpu_response_free(r);
    r = cpu_http(s->url, "GET", "/v1/sandboxes", k, NULL, NULL);
    cr_assert_eq(json_object_array_length(r->json), 1, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "0.status"), "failed");
    cr_assert_str_eq(cpu_jstr(r, "0.retry_status"), "blocked_cleanup_unknown");
    cr_assert_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "0.latest_error"),
                                                    JSON_C_TO_STRING_PLAIN),
                     detail_text(create_timeout));
    cpu_response_free(r);

    /* The provider answers again: a sandbox at once. */
    fake_faults(furl, "[]");
    t0 = tu_now();
    r = cpu_http(s->url, "POST", "/v1/sandboxes", k, NULL, "{\"backend\":\"e2b\"}");
    cr_assert_eq(r->status, 201, "%s", r->body);
    cr_assert(tu_now() - t0 < 1.5);
    id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    p = path_of("/v1/sandboxes/%s", id);
    pe = path_of("/v1/sandboxes/%s/execute", id);

    /* The execute: its process never starts, nor ends. */
    fake_faults(furl, "[{\"method\":\"POST\",\"path\":\"^/process.Process/\",\"action\":\"hang\","
                      "\"delay\":60,\"times\":-1}]");
    t0 = tu_now();
    r = cpu_http(s->url, "POST", pe, k, hdr, "{\"command\":\"echo hi\",\"timeout_secs\":1}");
    dt = tu_now() - t0;
    cr_assert_eq(r->status, 504, "%s", r->body);
    cr_assert_str_eq(r->body, exec_timeout);
    cr_assert(dt >= 1 + SBX_KILL_GRACE_SECS + 2 - 0.1 && dt < 1 + SBX_KILL_GRACE_SECS + 2 + 1.5,
              "the execute was answered after %.2f s", dt);
    again = cpu_http(s->url, "POST", pe, k, hdr, "{\"command\":\"echo hi\",\"timeout_secs\":1}");
    cr_assert_eq(again->status, 409, "%s", again->body);
    cr_assert_str_eq(cpu_jstr(again, "detail"), detail_text(exec_timeout));
    cpu_response_free(again);
    cpu_response_free(r);
    settle(s, k);
    assert_metered_once("hung-1");
    rec = record_of(s, k, id);
    cr_assert_str_eq(cpu_jstr(rec, "status"), "running");
    cpu_response_free(rec);

    /* The terminate. */
    fake_faults(furl, "[{\"method\":\"DELETE\",\"path\":\"^/sandboxes/\",\"action\":\"hang\","
                      "\"delay\":60,\"times\":-1}]");
    t0 = tu_now();
    r = cpu_http(s->url, "DELETE", p, k, NULL, NULL);
    dt = tu_now() - t0;
    cr_assert_eq(r->status, 504, "%s", r->body);
    cr_assert_str_eq(r->body, destroy_timeout);
    cr_assert(dt >= 1.9 && dt < 4.5, "the terminate was answered after %.2f s", dt);
    cpu_response_free(r);
    rec = record_of(s, k, id);
    cr_assert_str_eq(cpu_jstr(rec, "status"), "failed");
    cr_assert_str_eq(cpu_jstr(rec, "retry_status"), "not_retryable");
    cr_assert_str_eq(latest_error_text(rec), detail_text(destroy_timeout));
    cpu_response_free(rec);

    /* Answered again: the terminate destroys it. */
    fake_faults(furl, "[]");
    r = cpu_http(s->url, "DELETE", p, k, NULL, NULL);
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "status"), "destroyed");
    cpu_response_free(r);
    free(pe);
    free(p);
    free(id);
    free(k);
    cpu_stop(s);
    stop_fake(fake, fdir, furl);
}

/* The threads of process @pid (entries of /proc/PID/task). */
static int
thread_count(pid_t pid)
{
    char path[64];
    DIR *d;
    struct dirent *de;
    int n = 0;

    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    d = opendir(path);
    cr_assert(d, "%s", path);
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Waits at most @secs for @pid to have at most @want threads; the count
 * seen last back, and in *@after how long it took. */
static int
threads_back_to(pid_t pid, int want, double secs, double *after)
{
    double t0 = tu_now();
    int n;

    while ((n = thread_count(pid)) > want && tu_now() - t0 < secs)
        usleep(20000);
    *after = tu_now() - t0;
    return n;
}

/* An execute answered 504 at its deadline (the provider answers nothing)
 * leaves nothing running: its provider call is cancelled at the deadline
 * (sbx_op_cancel()), so the server's threads are back to what they were
 * before it within 0.5 s in both plugin modes (the cancel comes after the
 * command's SIGKILL, so the library frees its handle at once, which ends
 * the plugin's thread of the command; it used to end 3 s later in
 * process, when the library gave up waiting for the end), not when the
 * provider's calls would have ended; the execution is failed with the
 * timeout payload (outcome unknown, not retryable) and metered once, as
 * a failed execution is (CONTROL-PLANE.md §1: usage still metered): one
 * usage event, "runtime_seconds" in seconds, of the execution, whose
 * quantity and costs are the execution's, and the two ledger entries with
 * those amounts. The server then executes on the sandbox again. */
Test(server, an_execute_answered_504_leaves_no_thread_behind, .timeout = 120)
{
    pid_t fake;
    char *fdir, *furl = start_e2b_fake_with(NULL, &fake, &fdir), *k, *id, *pe, *sql, *got,
         *want;
    const char *hdr[] = { "Idempotency-Key: abandoned-1", NULL };
    cpu_server *s;
    cpu_response *r;
    int base, n;
    double after, bound;

    bound = 0.5;
    s = start_with_e2b_and(furl, "BESPOKE_PROVIDER_TIMEOUT_SECS=2");
    k = cpu_bootstrap(s, "eta", NULL);
    r = cpu_http(s->url, "POST", "/v1/sandboxes", k, NULL, "{\"backend\":\"e2b\"}");
    cr_assert_eq(r->status, 201, "%s", r->body);
    id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    pe = path_of("/v1/sandboxes/%s/execute", id);
    /* One execute first, so that every thread a first one starts for good
     * (the plugin's, the outbox's) is running before the count. */
    r = cpu_http(s->url, "POST", pe, k, NULL, "{\"command\":\"echo hi\"}");
    cr_assert_eq(r->status, 200, "%s", r->body);
    cpu_response_free(r);
    settle(s, k);
    usleep(300000);
    base = thread_count(s->pid);

    fake_faults(furl, "[{\"method\":\"POST\",\"path\":\"^/process.Process/\",\"action\":\"hang\","
                      "\"delay\":60,\"times\":-1}]");
    r = cpu_http(s->url, "POST", pe, k, hdr, "{\"command\":\"echo hi\",\"timeout_secs\":1}");
    cr_assert_eq(r->status, 504, "%s", r->body);
    cr_assert_str_eq(r->body, "{\"detail\":{\"message\":\"Provider request timed out.\","
                              "\"code\":\"timeout\",\"backend\":\"e2b\",\"op\":\"execute\","
                              "\"retryable\":false,\"outcome\":\"unknown\",\"context\":{}}}");
    cpu_response_free(r);
    n = threads_back_to(s->pid, base, 30, &after);
    cr_assert(n <= base && after < bound,
              "%d threads %.2f s after the 504 (%d before it)", n, after, base);

    settle(s, k);
    sql = tu_strdup_printf("SELECT status || '|' || error FROM executions"
                           " WHERE request_id = 'abandoned-1'");
    got = db_list(sql);
    free(sql);
    cr_assert_str_eq(got, "failed|{\"message\":\"Provider request timed out.\","
                          "\"code\":\"timeout\",\"backend\":\"e2b\",\"op\":\"execute\","
                          "\"retryable\":false,\"outcome\":\"unknown\",\"context\":{}}");
    free(got);
    assert_metered_once("abandoned-1");
    sql = tu_strdup_printf("SELECT u.metric || '|' || u.unit || '|' || u.quantity || '|' ||"
                           " u.provider_cost_usd || '|' || u.customer_cost_usd || '|' ||"
                           " u.created_at FROM usage_events u JOIN executions e"
                           " ON e.id = u.execution_id WHERE u.request_id = 'abandoned-1'");
    got = db_list(sql);
    free(sql);
    sql = tu_strdup_printf("SELECT 'runtime_seconds|second|' || runtime_seconds || '|' ||"
                           " provider_cost_usd || '|' || customer_cost_usd || '|' ||"
                           " completed_at FROM executions WHERE request_id = 'abandoned-1'");
    want = db_list(sql);
    free(sql);
    cr_assert_str_eq(got, want);
    free(got);
    free(want);
    sql = tu_strdup_printf("SELECT l.kind || '|' || l.amount_usd FROM ledger_entries l"
                           " JOIN usage_events u ON u.id = l.usage_event_id"
                           " WHERE u.request_id = 'abandoned-1' ORDER BY l.kind");
    got = db_list(sql);
    free(sql);
    sql = tu_strdup_printf("SELECT 'customer_cost|' || customer_cost_usd || ',provider_cost|' ||"
                           " provider_cost_usd FROM executions WHERE request_id = 'abandoned-1'");
    want = db_list(sql);
    free(sql);
    cr_assert_str_eq(got, want);
    free(got);
    free(want);

    /* The provider answers again: so does the sandbox. */
    fake_faults(furl, "[]");
    r = cpu_http(s->url, "POST", pe, k, NULL, "{\"command\":\"echo again\"}");
    cr_assert_eq(r->status, 200, "%s", r->body);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "again\n");
    cpu_response_free(r);
    free(pe);
    free(id);
    free(k);
    cpu_stop(s);
    stop_fake(fake, fdir, furl);
}

/* A pool of provider calls that cannot be made (SBX_SERVER_TEST_ASYNC_FAULT
 * fails its eventfd or its dispatching thread as the system would) is
 * named in the log, each time an execute needs it, and the execute still
 * runs, on the request's thread. */
Test(server, a_pool_that_cannot_start_is_named, .timeout = 120)
{
    static const struct {
        const char *fault, *why;
    } cases[] = {
        { "SBX_SERVER_TEST_ASYNC_FAULT=eventfd", "eventfd: Too many open files" },
        { "SBX_SERVER_TEST_ASYNC_FAULT=thread",
          "the dispatching thread: Resource temporarily unavailable" },
    };
    pid_t fake;
    char *fdir, *furl = start_e2b_fake_with(NULL, &fake, &fdir);

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cpu_server *s = start_with_e2b_and(furl, cases[i].fault);
        char *k = cpu_bootstrap(s, "pool", NULL), *id, *pe, *log, *want;
        const char *at;
        cpu_response *r;
        int lines = 0;

        r = cpu_http(s->url, "POST", "/v1/sandboxes", k, NULL, "{\"backend\":\"e2b\"}");
        cr_assert_eq(r->status, 201, "%s", r->body);
        id = strdup(cpu_jstr(r, "id"));
        cpu_response_free(r);
        pe = path_of("/v1/sandboxes/%s/execute", id);
        for (int n = 0; n < 2; n++) {
            r = cpu_http(s->url, "POST", pe, k, NULL, "{\"command\":\"echo hi\"}");
            cr_assert_eq(r->status, 200, "%s", r->body);
            cr_assert_str_eq(cpu_jstr(r, "stdout"), "hi\n");
            cpu_response_free(r);
        }
        log = cpu_read_log(s, 1);
        want = tu_strdup_printf("sbx-server: cannot start the pool of provider calls (%s): the "
                                "execute runs on the request's thread, answered when its "
                                "provider call ends rather than at its deadline\n",
                                cases[i].why);
        for (at = log; (at = strstr(at, want)) != NULL; at++)
            lines++;
        cr_assert_eq(lines, 2, "%s", log);
        free(want);
        free(log);
        free(pe);
        free(id);
        free(k);
        cpu_stop(s);
    }
    stop_fake(fake, fdir, furl);
}

/* ---------------------------------------------------------------- executions in flight and failed */

typedef struct exec_arg {
    const char *id, *body;
    cpu_response *res;
} exec_arg;

static void *
exec_thread(void *arg)
{
    exec_arg *a = arg;
    char *p = path_of("/v1/sandboxes/%s/execute", a->id);
    const char *hdr[] = { "Idempotency-Key: slow-1", NULL };

    a->res = cpu_http(srv->url, "POST", p, key, hdr, a->body);
    free(p);
    return NULL;
}

/* Waits (10 s at most) until sandbox @id's execution @rid is `running`. */
static void
wait_running(const char *id, const char *rid)
{
    char *p = path_of("/v1/sandboxes/%s/detail", id);

    for (int i = 0; i < 500; i++) {
        cpu_response *r = req_s(200, "GET", p, key, NULL, NULL);
        json_object *ex = cpu_jget(r->json, "executions");
        for (size_t k = 0; ex && k < json_object_array_length(ex); k++) {
            json_object *e = json_object_array_get_idx(ex, k);
            if (!strcmp(json_object_get_string(json_object_object_get(e, "request_id")), rid) &&
                !strcmp(json_object_get_string(json_object_object_get(e, "status")), "running")) {
                cpu_response_free(r);
                free(p);
                return;
            }
        }
        cpu_response_free(r);
        usleep(20000);
    }
    cr_assert_fail("execution %s never ran", rid);
}

Test(server, execution_in_progress_is_409)
{
    char *id = cpu_create_local(srv, key, NULL);
    exec_arg a = { id, "{\"command\":\"sleep 1; echo done\"}", NULL };
    pthread_t th;
    cpu_response *r;

    cr_assert_eq(pthread_create(&th, NULL, exec_thread, &a), 0);
    wait_running(id, "slow-1");
    r = execute(key, id, "slow-1", "{\"command\":\"sleep 1; echo done\"}", 409);
    expect_detail(r, "execution is already in progress");
    cpu_response_free(r);
    pthread_join(th, NULL);
    cr_assert_eq(a.res->status, 200);
    cr_assert_str_eq(cpu_jstr(a.res, "stdout"), "done\n");
    r = execute(key, id, "slow-1", "{\"command\":\"true\"}", 200);
    cr_assert_str_eq(r->body, a.res->body);
    cpu_response_free(r);
    cpu_response_free(a.res);
    terminate(key, id);
    free(id);
}

Test(server, failed_execution_replays_its_payload)
{
    /* A sandbox whose 1 s lifetime ended: the provider call fails. */
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":1}");
    cpu_response *r, *again;
    json_object *stored;

    usleep(1600000);
    r = execute(key, id, "late-1", "{\"command\":\"echo hi\"}", 502);
    cr_assert_str_eq(cpu_jstr(r, "detail.backend"), "local");
    cr_assert_str_eq(cpu_jstr(r, "detail.op"), "execute");
    cr_assert(cpu_jstr(r, "detail.code"));
    /* The replay is 409 whose detail is the stored payload's JSON text. */
    again = execute(key, id, "late-1", "{\"command\":\"echo hi\"}", 409);
    cr_assert(json_object_is_type(cpu_jget(again->json, "detail"), json_type_string));
    stored = json_tokener_parse(cpu_jstr(again, "detail"));
    cr_assert_str_eq(json_object_to_json_string_ext(stored, JSON_C_TO_STRING_PLAIN),
                     json_object_to_json_string_ext(cpu_jget(r->json, "detail"),
                                                    JSON_C_TO_STRING_PLAIN));
    json_object_put(stored);
    cpu_response_free(r);
    cpu_response_free(again);
    /* Metered even so: one usage event. */
    r = req_s(200, "GET", "/v1/costs", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "items")), 1);
    cpu_response_free(r);
    free(id);
}

/* ---------------------------------------------------------------- 413 and 500 */

Test(server, oversized_body_and_store_failure)
{
    size_t n = (8u << 20) + 16;
    char *big = malloc(n + 1), *v, *err;
    cpu_response *r;

    memset(big, ' ', n);
    big[n] = 0;
    r = req_s(413, "POST", "/v1/sandboxes", key, NULL, big);
    expect_detail(r, "Request body is too large");
    v = cpu_response_header(r, "X-Frame-Options");
    cr_assert_str_eq(v, "DENY");
    free(v);
    cpu_response_free(r);
    free(big);
    /* A store that fails mid-request: 500 with the contract's text and
     * headers, never the engine's message. */
    free(db_list("ALTER TABLE api_keys RENAME TO api_keys_away"));
    r = req_s(500, "GET", "/v1/sandboxes", key, NULL, NULL);
    expect_detail(r, "Internal control-plane error.");
    v = cpu_response_header(r, "Content-Security-Policy");
    cr_assert(v);
    free(v);
    cr_assert_null(strstr(r->body, "api_keys"));
    cpu_response_free(r);
    free(db_list("ALTER TABLE api_keys_away RENAME TO api_keys"));
    r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cpu_response_free(r);
    err = cpu_read_log(srv, 1);
    cr_assert(strstr(err, "method=GET route=/v1/sandboxes status=500"));
    cr_assert_null(strstr(err, key));
    free(err);
}

/* A command that runs for a while holds its own connection's thread and no
 * store connection: with one store connection, requests on other
 * connections, reads of the store included, are answered meanwhile. */
Test(server, slow_execute_does_not_stall_other_requests)
{
    const char *env[] = { "SBX_SERVER_DB_CONNECTIONS=1", NULL };
    char *id;
    exec_arg a;
    pthread_t th;
    cpu_response *r;

    cpu_stop(srv);
    srv = cpu_start(store, env);
    id = cpu_create_local(srv, key, NULL);
    a.id = id;
    a.body = "{\"command\":\"sleep 2; echo done\"}";
    a.res = NULL;
    cr_assert_eq(pthread_create(&th, NULL, exec_thread, &a), 0);
    /* These requests are answered while the command runs. */
    wait_running(id, "slow-1");
    for (int i = 0; i < 5; i++) {
        r = req_s(200, "GET", "/healthz", NULL, NULL, NULL);
        cpu_response_free(r);
        r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
        cpu_response_free(r);
    }
    cr_assert_null(__atomic_load_n(&a.res, __ATOMIC_ACQUIRE));
    pthread_join(th, NULL);
    cr_assert_eq(a.res->status, 200);
    cr_assert_str_eq(cpu_jstr(a.res, "stdout"), "done\n");
    cpu_response_free(a.res);
    terminate(key, id);
    free(id);
}

/* SIGTERM while a command runs: the server takes no new connection, but
 * the execute in flight is answered (200, its output) before it exits 0;
 * the sandbox, detached, is still there for the next start. */
Test(server, a_stop_answers_the_requests_in_flight)
{
    char *id = cpu_create_local(srv, key, NULL);
    exec_arg a;
    pthread_t th;
    cpu_response *r;
    int st;

    a.id = id;
    a.body = "{\"command\":\"sleep 1; echo done\"}";
    a.res = NULL;
    cr_assert_eq(pthread_create(&th, NULL, exec_thread, &a), 0);
    wait_running(id, "slow-1");
    st = cpu_signal(srv, SIGTERM);
    pthread_join(th, NULL);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    cr_assert_eq(a.res->status, 200, "%d: %s", a.res->status, a.res->body);
    cr_assert_str_eq(cpu_jstr(a.res, "stdout"), "done\n");
    cpu_response_free(a.res);
    cpu_stop(srv);
    srv = cpu_start(store, NULL);
    r = req_s(200, "GET", "/healthz", NULL, NULL, NULL);
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

/* A request that outlasts the stop's grace (SBX_SERVER_STOP_GRACE_SECS,
 * here 1 s: a command of 30 s) does not hold the stop: the server says so
 * and exits 1 about the grace after the signal, its client's connection
 * closed with no answer; the command's sandbox stays, and a new server
 * on the store terminates it. */
Test(server, a_request_outlasting_the_stop_grace_does_not_hold_the_stop)
{
    static const char *const env[] = { "SBX_SERVER_STOP_GRACE_SECS=1", NULL };
    struct timespec t0, t1;
    exec_arg a;
    pthread_t th;
    char *id, *log;
    double took;
    int st;

    cpu_stop(srv);
    srv = cpu_start(store, env);
    id = cpu_create_local(srv, key, NULL);
    a.id = id;
    a.body = "{\"command\":\"sleep 30; echo late\"}";
    a.res = NULL;
    cr_assert_eq(pthread_create(&th, NULL, exec_thread, &a), 0);
    wait_running(id, "slow-1");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = cpu_signal(srv, SIGTERM);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    pthread_join(th, NULL);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    cr_assert(took >= 1.0 && took < 10.0, "the stop took %.2f s", took);
    cr_assert_eq(a.res->status, 0, "%ld: %s", (long)a.res->status, a.res->body);
    cpu_response_free(a.res);
    log = cpu_read_log(srv, 1);
    cr_assert_not_null(strstr(log, "sbx-server: signal 15, stopping\n"
                                   "sbx-server: 1 request(s) still running 1 s after the signal; "
                                   "stopping without them (exit status 1)\n"), "%s", log);
    free(log);
    cpu_stop(srv);
    srv = cpu_start(store, NULL);
    terminate(key, id);
    free(id);
}

/* One store connection for the whole server: 20 concurrent creates wait
 * their turn and still make one sandbox. */
/* Beyond the reference: a record made with an Idempotency-Key carries it
 * (the 32nd field, last), one made without has the reference's 31; the
 * list filters by it, within the organisation only. */
Test(server, idempotency_key_on_the_record_and_the_list_filter)
{
    char *kb = cpu_bootstrap(srv, "beta", NULL), *sa, *sb;
    const char *h1[] = { "Idempotency-Key: sbx-0123456789abcdef0123456789abcdef", NULL };
    cpu_response *a, *b, *n;
    const char *last = NULL;

    a = req_s(201, "POST", "/v1/sandboxes", key, h1, "{\"backend\":\"local\"}");
    sa = strdup(cpu_jstr(a, "id"));
    cr_assert_str_eq(cpu_jstr(a, "idempotency_key"), "sbx-0123456789abcdef0123456789abcdef");
    cr_assert_eq(json_object_object_length(a->json), 32);
    json_object_object_foreach(a->json, name, value) {
        (void)value;
        last = name;
    }
    cr_assert_str_eq(last, "idempotency_key");
    cpu_response_free(a);
    /* The same key in another organisation: its own record. */
    b = req_s(201, "POST", "/v1/sandboxes", kb, h1, "{\"backend\":\"local\"}");
    sb = strdup(cpu_jstr(b, "id"));
    cpu_response_free(b);
    n = req_s(201, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"local\"}");
    cr_assert_null(cpu_jget(n->json, "idempotency_key"));
    cr_assert_eq(json_object_object_length(n->json), 31);

    a = req_s(200, "GET", "/v1/sandboxes?idempotency_key=sbx-0123456789abcdef0123456789abcdef",
              key, NULL, NULL);
    cr_assert_eq(json_object_array_length(a->json), 1);
    cr_assert_str_eq(cpu_jstr(a, "0.id"), sa);
    cr_assert_str_eq(cpu_jstr(a, "0.idempotency_key"), "sbx-0123456789abcdef0123456789abcdef");
    cpu_response_free(a);
    b = req_s(200, "GET", "/v1/sandboxes?idempotency_key=sbx-0123456789abcdef0123456789abcdef",
              kb, NULL, NULL);
    cr_assert_eq(json_object_array_length(b->json), 1);
    cr_assert_str_eq(cpu_jstr(b, "0.id"), sb);
    cpu_response_free(b);
    a = req_s(200, "GET", "/v1/sandboxes?idempotency_key=other", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(a->json), 0);
    cpu_response_free(a);
    a = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(a->json), 2);
    cpu_response_free(a);
    terminate(key, sa);
    terminate(kb, sb);
    terminate(key, cpu_jstr(n, "id"));
    cpu_response_free(n);
    free(sa);
    free(sb);
    free(kb);
}

Test(server, one_store_connection_suffices)
{
    const char *env[] = { "SBX_SERVER_DB_CONNECTIONS=1", NULL };
    const char *urls[1];

    cpu_stop(srv);
    srv = cpu_start(store, env);
    urls[0] = srv->url;
    race_20(urls, 1, key);
    if (cpu_store_is_pg()) {
        char *sql = tu_strdup_printf("SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND pid <> pg_backend_pid()",
                                     store->pg_name), *n = db_list(sql);
        cr_assert_str_eq(n, "1");
        free(n);
        free(sql);
    }
}

/* Without BESPOKE_ALLOWED_BACKENDS every installed backend is enabled;
 * a name that is not installed is refused. */
Test(server, all_installed_backends_by_default)
{
    const char *env[] = { "BESPOKE_ALLOWED_BACKENDS=", NULL };
    char *id;

    cpu_stop(srv);
    srv = cpu_start(store, env);
    id = cpu_create_local(srv, key, NULL);
    terminate(key, id);
    expect_status_detail(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"nosuch\"}",
                         "backend is not enabled: nosuch");
    free(id);
}

/* An empty list enables nothing. */
Test(server, empty_backend_list_enables_none)
{
    const char *env[] = { "BESPOKE_ALLOWED_BACKENDS= , ", NULL };

    cpu_stop(srv);
    srv = cpu_start(store, env);
    expect_status_detail(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"local\"}",
                         "backend is not enabled: local");
}

/* ---------------------------------------------------------------- concurrency of execute and terminate */

typedef struct par_arg {
    const char *url, *method, *path, *body, *hdr;
    long status;
    char *out;
} par_arg;

static void *
par_thread(void *arg)
{
    par_arg *a = arg;
    const char *hdr[] = { a->hdr, NULL };
    cpu_response *r = cpu_http(a->url, a->method, a->path, key, a->hdr ? hdr : NULL, a->body);

    a->status = r->status;
    a->out = strdup(r->body);
    cpu_response_free(r);
    return NULL;
}

static void
run_parallel(par_arg *args, int n)
{
    pthread_t th[32];

    for (int i = 0; i < n; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, par_thread, &args[i]), 0);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* The test clock of the server's SBX_SERVER_TEST_CLOCK_FILE: @t UNIX
 * seconds. */
static void
set_clock(const char *file, double t)
{
    char text[64];
    int n = snprintf(text, sizeof text, "%.6f\n", t);

    tu_write_file(file, text, (size_t)n, 0600);
}

/* The lifecycle cost a detail shows: billable microseconds and provider
 * and customer amounts in pico-dollars. */
static void
detail_cost(const char *path, int64_t *us, int64_t *prov, int64_t *cust)
{
    cpu_response *r = req_s(200, "GET", path, key, NULL, NULL);

    *us = pico(cpu_jstr(r, "cost.billable_seconds")) / 1000000;
    *prov = pico(cpu_jstr(r, "cost.effective_cost_usd"));
    *cust = pico(cpu_jstr(r, "cost.customer_cost_usd"));
    cpu_response_free(r);
}

#define S(x) ((int64_t)(x) * 1000000)

/* CASE-58: a sandbox at 0.054 USD an hour (markup 1.5 here), its lifetime
 * billed from T0 = 2026-03-10T10:00:00Z by a clock the test sets: 20
 * concurrent details and a costs query at T0+600 s all show 600 s and
 * 0.009; the clock stepped back to T0+300 s changes nothing (never less,
 * no negative row); T0+900 s is 900 s and 0.0135; a restarted server at
 * T0+1200 s bills 1200 s and 0.018, not again from the start on top of
 * the stored total; the terminate at T0+1500 s ends it at 1500 s and
 * 0.0225. The lifecycle rows then sum to 1500 s and 0.0225, each >= 0,
 * each observation once, and the costs by day sum to the costs by
 * sandbox. */
Test(metering, case58_lifecycle_counts_each_second_once)
{
    const double t0 = 1773136800.0;     /* 2026-03-10T10:00:00Z */
    char *clock = tu_strdup_printf("%s/clock", price_dir), *env, *id, *p;
    int64_t us, prov, cust;
    par_arg a[20];
    cpu_response *r;

    cpu_stop(srv);
    set_clock(clock, t0);
    env = tu_strdup_printf("SBX_SERVER_TEST_CLOCK_FILE=%s", clock);
    srv = start_priced(env);
    /* A lifetime past the clock's last step (T0+1500 s). */
    id = cpu_create_local(srv, key, "{\"timeout_secs\":3600}");
    p = path_of("/v1/sandboxes/%s/detail", id);
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "sandbox.provisioning_at"), "2026-03-10T10:00:00+00:00");
    cr_assert_str_eq(cpu_jstr(r, "sandbox.hourly_rate_usd"), "0.054");
    cpu_response_free(r);

    set_clock(clock, t0 + 600);
    for (int i = 0; i < 20; i++)
        a[i] = (par_arg){ srv->url, "GET", p, NULL, NULL, 0, NULL };
    run_parallel(a, 20);
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(a[i].status, 200, "%s", a[i].out);
        r = calloc(1, sizeof *r);
        r->json = json_tokener_parse(a[i].out);
        cr_assert_eq(pico(cpu_jstr(r, "cost.billable_seconds")), S(600) * 1000000);
        cr_assert_eq(pico(cpu_jstr(r, "cost.effective_cost_usd")), 9000000000LL);
        cr_assert_eq(pico(cpu_jstr(r, "cost.customer_cost_usd")), 13500000000LL);
        json_object_put(r->json);
        free(r);
        free(a[i].out);
    }
    r = req_s(200, "GET", "/v1/costs?group_by=sandbox", key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "items")), 1, "%s", r->body);
    cr_assert_eq(pico(cpu_jstr(r, "items.0.runtime_seconds")), S(600) * 1000000, "%s", r->body);
    cr_assert_eq(pico(cpu_jstr(r, "items.0.provider_cost_usd")), 9000000000LL, "%s", r->body);
    cpu_response_free(r);

    set_clock(clock, t0 + 300);
    for (int i = 0; i < 3; i++) {
        detail_cost(p, &us, &prov, &cust);
        cr_assert_eq(us, S(600));
        cr_assert_eq(prov, 9000000000LL);
        cr_assert_eq(cust, 13500000000LL);
    }
    set_clock(clock, t0 + 900);
    detail_cost(p, &us, &prov, &cust);
    cr_assert_eq(us, S(900));
    cr_assert_eq(prov, 13500000000LL);
    cr_assert_eq(cust, 20250000000LL);

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    set_clock(clock, t0 + 1200);
    srv = start_priced(env);
    detail_cost(p, &us, &prov, &cust);
    cr_assert_eq(us, S(1200));
    cr_assert_eq(prov, 18000000000LL);
    cr_assert_eq(cust, 27000000000LL);

    set_clock(clock, t0 + 1500);
    free(p);
    p = path_of("/v1/sandboxes/%s", id);
    r = req_s(200, "DELETE", p, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "terminated_at"), "2026-03-10T10:25:00+00:00");
    cpu_response_free(r);
    free(p);
    p = path_of("/v1/sandboxes/%s/detail", id);
    detail_cost(p, &us, &prov, &cust);
    cr_assert_eq(us, S(1500));
    cr_assert_eq(prov, 22500000000LL);
    cr_assert_eq(cust, 33750000000LL);

    /* The rows: 1500 s and 0.0225 in all, none below zero, each
     * observation once. */
    {
        char *q = tu_strdup_printf("SELECT billable_seconds_delta || '/' || provider_delta_usd"
                                   " FROM lifecycle_ledger_entries WHERE sandbox_id = '%s'"
                                   " ORDER BY created_at, observation_id", id);
        char *rows = db_list(q), *save = NULL;
        int64_t secs = 0, usd_sum = 0;
        cr_assert_not_null(rows);
        for (char *row = strtok_r(rows, ",", &save); row; row = strtok_r(NULL, ",", &save)) {
            char *slash = strchr(row, '/');
            cr_assert_not_null(slash, "%s", row);
            *slash = '\0';
            int64_t s1 = pico(row), u1 = pico(slash + 1);
            cr_assert_geq(s1, 0, "a negative row: %s", row);
            cr_assert_geq(u1, 0, "a negative row: %s", slash + 1);
            secs += s1;
            usd_sum += u1;
        }
        cr_assert_eq(secs, S(1500) * 1000000);
        cr_assert_eq(usd_sum, 22500000000LL);
        free(rows);
        free(q);
        q = tu_strdup_printf("SELECT COUNT(*) - COUNT(DISTINCT observation_id) FROM"
                             " lifecycle_ledger_entries WHERE sandbox_id = '%s'", id);
        rows = db_list(q);
        cr_assert_str_eq(rows, "0");
        free(rows);
        free(q);
    }
    r = req_s(200, "GET", "/v1/costs?group_by=day", key, NULL, NULL);
    prov = 0;
    for (size_t i = 0; i < json_object_array_length(cpu_jget(r->json, "items")); i++) {
        char k[64];
        snprintf(k, sizeof k, "items.%zu.provider_cost_usd", i);
        prov += pico(cpu_jstr(r, k));
    }
    cpu_response_free(r);
    cr_assert_eq(prov, 22500000000LL);
    r = req_s(200, "GET", "/v1/costs?group_by=sandbox", key, NULL, NULL);
    cr_assert_eq(pico(cpu_jstr(r, "items.0.provider_cost_usd")), 22500000000LL, "%s", r->body);
    cr_assert_eq(pico(cpu_jstr(r, "items.0.runtime_seconds")), S(1500) * 1000000, "%s", r->body);
    cpu_response_free(r);
    free(p);
    free(id);
    free(env);
    free(clock);
}

#undef S

/* 20 concurrent executes with one request id run the command once: the
 * others get the stored response or 409 while it runs; one usage event. */
Test(server, concurrent_same_request_id_runs_once)
{
    char *id = cpu_create_local(srv, key, NULL), *p = path_of("/v1/sandboxes/%s/execute", id);
    par_arg a[20];
    int ok = 0, busy = 0;
    const char *first = NULL;
    cpu_response *r;

    for (int i = 0; i < 20; i++)
        a[i] = (par_arg){ srv->url, "POST", p,
                          "{\"command\":\"echo run >> \\\"$SANDBOX_ROOT/count\\\"; echo $$\"}",
                          "Idempotency-Key: once", 0, NULL };
    run_parallel(a, 20);
    for (int i = 0; i < 20; i++) {
        if (a[i].status == 200) {
            ok++;
            if (!first)
                first = a[i].out;
            cr_assert_str_eq(a[i].out, first);
        } else {
            cr_assert_eq(a[i].status, 409, "%ld %s", a[i].status, a[i].out);
            cr_assert_str_eq(a[i].out, "{\"detail\":\"execution is already in progress\"}");
            busy++;
        }
    }
    cr_assert_geq(ok, 1);
    cr_assert_eq(ok + busy, 20);
    r = execute(key, id, NULL, "{\"command\":\"cat \\\"$SANDBOX_ROOT/count\\\"\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "run\n");
    cpu_response_free(r);
    free(p);
    p = path_of("/v1/sandboxes/%s/detail", id);
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_assert_eq(json_object_array_length(cpu_jget(r->json, "executions")), 2);
    cpu_response_free(r);
    for (int i = 0; i < 20; i++)
        free(a[i].out);
    terminate(key, id);
    free(p);
    free(id);
}

/* 10 concurrent terminations: the sandbox is destroyed once; each caller
 * gets the destroyed record or "already in progress". */
Test(server, concurrent_terminations_destroy_once)
{
    char *id = cpu_create_local(srv, key, NULL), *p = path_of("/v1/sandboxes/%s", id);
    par_arg a[10];
    int done = 0;
    cpu_response *r;

    for (int i = 0; i < 10; i++)
        a[i] = (par_arg){ srv->url, "DELETE", p, NULL, NULL, 0, NULL };
    run_parallel(a, 10);
    for (int i = 0; i < 10; i++) {
        if (a[i].status == 200) {
            json_object *o = json_tokener_parse(a[i].out);
            cr_assert_str_eq(json_object_get_string(json_object_object_get(o, "status")),
                             "destroyed");
            json_object_put(o);
            done++;
        } else {
            cr_assert_eq(a[i].status, 409, "%ld %s", a[i].status, a[i].out);
            cr_assert_str_eq(a[i].out,
                             "{\"detail\":\"sandbox termination is already in progress\"}");
        }
        free(a[i].out);
    }
    cr_assert_geq(done, 1);
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "status"), "destroyed");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 4);
    cpu_response_free(r);
    free(p);
    free(id);
}

/* A sandbox that ended (its lifetime) while no server ran cannot be
 * reattached: the reference's 409s, in every plugin mode. */
Test(server, restart_with_a_vanished_sandbox)
{
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":1}"), *p, *dir;
    cpu_response *r;
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    p = path_of("/v1/sandboxes/%s", id);
    r = req_s(200, "GET", p, key, NULL, NULL);
    /* local's sandbox directory, which goes when its supervisor ends it */
    dir = tu_strdup_printf("%s/%s", tmp, cpu_jstr(r, "provider_resource_id"));
    cpu_response_free(r);
    cr_assert(tu_exists(dir), "%s", dir);
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    for (int i = 0; i < 500 && tu_exists(dir); i++)
        usleep(20000);
    cr_assert_not(tu_exists(dir), "the sandbox outlived its lifetime");
    free(dir);
    srv = cpu_start(store, NULL);
    r = execute(key, id, NULL, "{\"command\":\"true\"}", 409);
    expect_detail(r, "sandbox runtime is unavailable after a control-plane restart");
    cpu_response_free(r);
    expect_status_detail(409, "DELETE", p, key, NULL, NULL,
                         "sandbox runtime is not attached and provider termination is not configured");
    r = req_s(200, "GET", p, key, NULL, NULL);
    cr_assert_str_eq(cpu_jstr(r, "status"), "running");
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "version")), 2);
    cpu_response_free(r);
    free(p);
    free(id);
}

/* An enabled backend whose plugin is not installed: 422 with the
 * backend_not_installed payload; the stored config keeps numbers as
 * written (0.1, not 0.10000000000000001). */
Test(server, enabled_but_not_installed_backend)
{
    const char *env[] = { "BESPOKE_ALLOWED_BACKENDS=local,nosuch", NULL };
    cpu_response *r;

    cpu_stop(srv);
    srv = cpu_start(store, env);
    r = req_s(422, "POST", "/v1/sandboxes", key, NULL, "{\"backend\":\"nosuch\",\"cpu\":0.1}");
    cr_assert_str_eq(r->body, "{\"detail\":{\"message\":\"Provider backend is unavailable.\","
                              "\"code\":\"backend_not_installed\",\"backend\":\"nosuch\","
                              "\"op\":\"create\",\"retryable\":false,\"outcome\":\"failed\","
                              "\"context\":{}}}");
    cpu_response_free(r);
    r = req_s(200, "GET", "/v1/sandboxes", key, NULL, NULL);
    cr_assert_str_eq(json_object_to_json_string_ext(cpu_jget(r->json, "0.config"),
                                                    JSON_C_TO_STRING_PLAIN), "{\"cpu\":0.1}");
    cr_assert_str_eq(cpu_jstr(r, "0.status"), "failed");
    cr_assert_str_eq(cpu_jstr(r, "0.retry_status"), "not_retryable");
    cpu_response_free(r);
}

/* The execute extensions: env, cwd and timeout_secs map onto libsbx's exec
 * request (CASE-18's missing directory is the provider's not_found). */
Test(server, execute_env_cwd_timeout)
{
    char *id = cpu_create_local(srv, key, NULL);
    cpu_response *r;
    const char *out;

    r = execute(key, id, NULL, "{\"command\":\"mkdir -p \\\"$SANDBOX_ROOT/sub\\\"\"}", 200);
    cpu_response_free(r);
    r = execute(key, id, NULL,
                "{\"command\":\"echo $X-$Y; pwd\",\"env\":{\"X\":\"x 1\",\"Y\":\"\"},\"cwd\":\"/sub\"}",
                200);
    out = cpu_jstr(r, "stdout");
    cr_assert_eq(strncmp(out, "x 1-\n", 5), 0, "%s", out);
    cr_assert_str_eq(out + strlen(out) - 5, "/sub\n");
    cr_assert_null(cpu_jget(r->json, "timed_out"));
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"true\",\"cwd\":\"/missing/dir\"}", 502);
    cr_assert_str_eq(cpu_jstr(r, "detail.code"), "not_found");
    cr_assert_str_eq(cpu_jstr(r, "detail.op"), "execute");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"echo start; sleep 5\",\"timeout_secs\":0.5}", 200);
    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "exit_code")), 124);
    cr_assert(json_object_get_boolean(cpu_jget(r->json, "timed_out")));
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "start\n");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"true\",\"env\":[1]}", 422);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "env");
    cpu_response_free(r);
    r = execute(key, id, NULL, "{\"command\":\"true\",\"timeout_secs\":0}", 422);
    cr_assert_str_eq(cpu_jstr(r, "detail.0.loc.1"), "timeout_secs");
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

/* An execute without a timeout on a sandbox with a lifetime is timed out
 * 0.5 s past the sandbox's expiry (EXEC_DEFAULT_MARGIN_SECS): a client on
 * the remote backend, whose library ends the command at the expiry, sees
 * its own timeout first; and before the local sandbox ends, 1 s past it,
 * so the answer is the command's timeout, not the sandbox's end. */
Test(server, an_execute_without_a_timeout_ends_past_the_expiry)
{
    double before = tu_now();
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":2}");
    cpu_response *r = execute(key, id, NULL, "{\"command\":\"echo start; sleep 30\"}", 200);
    double took = tu_now() - before;

    cr_assert_eq(json_object_get_int(cpu_jget(r->json, "exit_code")), 124);
    cr_assert(json_object_get_boolean(cpu_jget(r->json, "timed_out")));
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "start\n");
    cr_assert_str_eq(cpu_jstr(r, "stderr"), "");
    cr_assert(took >= 2.5, "answered %.3f s after the create began", took);
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

static void assert_metered_once(const char *rid)
{
    char *sql = tu_strdup_printf("SELECT COUNT(*) FROM usage_events WHERE request_id = '%s'",
                                 rid);
    char *n = db_list(sql);
    cr_assert_str_eq(n, "1", "usage events of %s", rid);
    free(n);
    free(sql);
    sql = tu_strdup_printf("SELECT l.kind FROM ledger_entries l JOIN usage_events u"
                           " ON u.id = l.usage_event_id WHERE u.request_id = '%s'"
                           " ORDER BY l.kind", rid);
    n = db_list(sql);
    cr_assert_str_eq(n, "customer_cost,provider_cost", "ledger entries of %s", rid);
    free(n);
    free(sql);
}

static void settle(const cpu_server *s, const char *k)
{
    cpu_response *r = cpu_http(s->url, "GET", "/v1/costs", k, NULL, NULL);

    cr_assert_eq(r->status, 200, "GET /v1/costs: %ld %s", r->status, r->body);
    cpu_response_free(r);
}

/* Request id @rid was metered once, exactly as @answer (its 200 response)
 * said: the usage event's quantity and costs are the answer's usage, its
 * time the execution's completion and its execution the row's id; the two
 * ledger entries carry the same amounts and time; the row is no longer
 * pending. */
static void assert_metered_as_answered(const char *rid, const cpu_response *answer)
{
    char *sql, *got, *want, *row;

    assert_metered_once(rid);
    sql = tu_strdup_printf("SELECT completed_at || '|' || id FROM executions"
                           " WHERE request_id = '%s'", rid);
    row = db_list(sql);
    free(sql);
    cr_assert(row && strchr(row, '|'), "execution %s: %s", rid, row ? row : "(failed)");
    sql = tu_strdup_printf("SELECT quantity || '|' || provider_cost_usd || '|' ||"
                           " customer_cost_usd || '|' || created_at || '|' || execution_id"
                           " FROM usage_events WHERE request_id = '%s'", rid);
    got = db_list(sql);
    free(sql);
    want = tu_strdup_printf("%s|%s|%s|%s", cpu_jstr(answer, "usage.runtime_seconds"),
                            cpu_jstr(answer, "usage.provider_cost_usd"),
                            cpu_jstr(answer, "usage.customer_cost_usd"), row);
    cr_assert_str_eq(got, want);
    free(got);
    free(want);
    *strchr(row, '|') = '\0';       /* the completion time */
    sql = tu_strdup_printf("SELECT l.kind || '|' || l.amount_usd || '|' || l.created_at"
                           " FROM ledger_entries l JOIN usage_events u"
                           " ON u.id = l.usage_event_id WHERE u.request_id = '%s'"
                           " ORDER BY l.kind", rid);
    got = db_list(sql);
    free(sql);
    want = tu_strdup_printf("customer_cost|%s|%s,provider_cost|%s|%s",
                            cpu_jstr(answer, "usage.customer_cost_usd"), row,
                            cpu_jstr(answer, "usage.provider_cost_usd"), row);
    cr_assert_str_eq(got, want);
    free(got);
    free(want);
    free(row);
    sql = tu_strdup_printf("SELECT COUNT(*) FROM execution_outbox WHERE request_id = '%s'", rid);
    got = db_list(sql);
    free(sql);
    cr_assert_str_eq(got, "0", "%s still pending", rid);
    free(got);
}

/* Executes @body with request id @rid through @s, which has
 * SBX_SERVER_TEST_CRASH_AFTER_ANSWER set: the answer comes (200, returned)
 * and then the server is gone by SIGKILL, its outcome committed with the
 * metering still pending. */
static cpu_response *
execute_then_killed(cpu_server *s, const char *id, const char *rid, const char *body)
{
    char *p = path_of("/v1/sandboxes/%s/execute", id), *h, *sql, *n;
    const char *hdr[] = { NULL, NULL };
    cpu_response *r;
    int st;

    h = tu_strdup_printf("Idempotency-Key: %s", rid);
    hdr[0] = h;
    r = cpu_http(s->url, "POST", p, key, hdr, body);
    cr_assert_eq(r->status, 200, "%ld %s", r->status, r->body);
    st = cpu_signal(s, 0);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "wait status %#x", st);
    sql = tu_strdup_printf("SELECT e.status || '|' || (SELECT COUNT(*) FROM execution_outbox o"
                           " WHERE o.completed_at = e.completed_at AND o.request_id = e.request_id)"
                           " FROM executions e WHERE e.request_id = '%s'", rid);
    n = db_list(sql);
    cr_assert_str_eq(n, "completed|1");
    free(n);
    free(sql);
    sql = tu_strdup_printf("SELECT COUNT(*) FROM usage_events WHERE request_id = '%s'", rid);
    n = db_list(sql);
    cr_assert_str_eq(n, "0");
    free(n);
    free(sql);
    free(h);
    free(p);
    return r;
}

/* The outbox: the answer comes once the execution's row is committed; its
 * usage event and ledger entries follow from that row, with the amounts
 * and time of the answer. */
/* A sandbox whose lifetime (60 s from T0, at 0.054 USD an hour, markup
 * 1.5) is over is billed to its expiry and no further, whatever its record
 * says until someone ends it: 30 s at T0+30 s, 60 s (0.0009, 0.00135 to
 * the customer) at T0+120 s and T0+300 s, and still 60 s after its
 * terminate at T0+400 s. */
Test(metering, a_lifetime_is_billed_to_its_expiry_only)
{
    const double t0 = 1773136800.0;     /* 2026-03-10T10:00:00Z */
    char *clock = tu_strdup_printf("%s/clock", price_dir), *env, *id, *p;
    int64_t us, prov, cust;
    cpu_response *r;

    cpu_stop(srv);
    set_clock(clock, t0);
    env = tu_strdup_printf("SBX_SERVER_TEST_CLOCK_FILE=%s", clock);
    srv = start_priced(env);
    id = cpu_create_local(srv, key, "{\"timeout_secs\":60}");
    p = path_of("/v1/sandboxes/%s/detail", id);
    set_clock(clock, t0 + 30);
    detail_cost(p, &us, &prov, &cust);
    cr_assert_eq(us, 30000000LL);
    cr_assert_eq(prov, 450000000LL);
    cr_assert_eq(cust, 675000000LL);
    for (int step = 0; step < 2; step++) {
        set_clock(clock, t0 + (step ? 300 : 120));
        detail_cost(p, &us, &prov, &cust);
        cr_assert_eq(us, 60000000LL, "at T0+%d s: %lld us", step ? 300 : 120, (long long)us);
        cr_assert_eq(prov, 900000000LL);
        cr_assert_eq(cust, 1350000000LL);
    }
    set_clock(clock, t0 + 400);
    free(p);
    p = path_of("/v1/sandboxes/%s", id);
    r = req_s(200, "DELETE", p, key, NULL, NULL);
    cpu_response_free(r);
    free(p);
    p = path_of("/v1/sandboxes/%s/detail", id);
    detail_cost(p, &us, &prov, &cust);
    cr_assert_eq(us, 60000000LL);
    cr_assert_eq(prov, 900000000LL);
    cr_assert_eq(cust, 1350000000LL);
    free(p);
    free(id);
    free(env);
    free(clock);
}

Test(metering, outbox_meters_as_answered)
{
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}");
    cpu_response *r = execute(key, id, "ob-1", "{\"command\":\"sleep 0.02\"}", 200);

    cr_assert_gt(pico(cpu_jstr(r, "usage.provider_cost_usd")), 0);
    settle(srv, key);
    assert_metered_as_answered("ob-1", r);
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

/* A server SIGKILLed while a command runs leaves its execution `running`:
 * a replay is 409 "in progress" until the execute's deadline (its timeout,
 * 5 s) and SBX_SERVER_EXECUTE_GRACE_SECS (1 s) have passed, never for
 * ever; then a replay settles it as failed with outcome unknown, and every
 * later replay answers that. Nothing is metered for it; the sandbox goes
 * on serving other request ids. */
/* Sends @body to the execute route @path with request id @request_id from a
 * child process and SIGKILLs the server once the execution is claimed
 * (`running`), so that its answer never comes; srv is stopped after. */
static void
kill_server_mid_execute(const char *path, const char *request_id, const char *body)
{
    char *h = tu_strdup_printf("Idempotency-Key: %s", request_id);
    char *sql = tu_strdup_printf("SELECT status FROM executions WHERE request_id = '%s'",
                                 request_id);
    const char *hdr[] = { h, NULL };
    char *n = NULL;
    pid_t child = fork();
    int st;

    cr_assert_geq(child, 0);
    if (child == 0) {
        cpu_response_free(cpu_http(srv->url, "POST", path, key, hdr, body));
        _exit(0);
    }
    for (int i = 0;; i++) {
        free(n);
        n = db_list(sql);
        if (n && !strcmp(n, "running"))
            break;
        cr_assert(i < 1000, "the execution is not running: \"%s\"", n ? n : "(none)");
        usleep(10000);
    }
    free(n);
    st = cpu_signal(srv, SIGKILL);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "wait status %#x", st);
    cpu_stop(srv);
    cr_assert_eq(waitpid(child, &st, 0), child);
    free(sql);
    free(h);
}

Test(metering, an_execution_whose_server_died_is_settled_after_its_deadline)
{
    const char *grace = "SBX_SERVER_EXECUTE_GRACE_SECS=1";
    const char *body = "{\"command\":\"sleep 30\",\"timeout_secs\":5}";
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":120}"), *n = NULL;
    char *p = path_of("/v1/sandboxes/%s/execute", id);
    cpu_response *r;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = start_priced(grace);
    kill_server_mid_execute(p, "died-1", body);
    srv = start_priced(grace);

    r = execute(key, id, "died-1", body, 409);
    expect_detail(r, "execution is already in progress");
    cpu_response_free(r);
    for (int i = 0;; i++) {
        r = execute(key, id, "died-1", body, 409);
        if (strcmp(cpu_jstr(r, "detail"), "execution is already in progress"))
            break;
        cr_assert(i < 100, "still in progress 20 s after the deadline");
        cpu_response_free(r);
        usleep(200000);
    }
    expect_detail(r, "{\"message\":\"Provider execution failed.\","
                     "\"code\":\"execution_failed\",\"backend\":\"local\",\"op\":\"execute\","
                     "\"retryable\":false,\"outcome\":\"unknown\",\"context\":{}}");
    cpu_response *again = execute(key, id, "died-1", body, 409);
    cr_assert_str_eq(again->body, r->body);
    cpu_response_free(again);
    cpu_response_free(r);
    n = db_list("SELECT e.status || '|' || CASE WHEN e.completed_at IS NULL THEN 0 ELSE 1 END || '|' ||"
                " (SELECT COUNT(*) FROM usage_events u WHERE u.request_id = e.request_id)"
                " FROM executions e WHERE e.request_id = 'died-1'");
    cr_assert_str_eq(n, "failed|1|0");
    free(n);
    r = execute(key, id, "died-2", "{\"command\":\"printf alive\"}", 200);
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "alive");
    cpu_response_free(r);
    terminate(key, id);
    free(p);
    free(id);
}

/* The payload an abandoned execution of the local backend is settled
 * with, as its replays answer it. */
#define ABANDONED_PAYLOAD                                                                  \
    "{\"message\":\"Provider execution failed.\",\"code\":\"execution_failed\","           \
    "\"backend\":\"local\",\"op\":\"execute\",\"retryable\":false,\"outcome\":\"unknown\"," \
    "\"context\":{}}"

/* The executions of sandbox @id as its detail lists them, one
 * "request_id|status|completed (0 or 1)|error as JSON" line each, joined
 * by newlines. */
static char *
detail_executions(const char *id)
{
    char *p = path_of("/v1/sandboxes/%s/detail", id), *out = calloc(1, 1);
    cpu_response *r = req_s(200, "GET", p, key, NULL, NULL);
    json_object *list = cpu_jget(r->json, "executions");

    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *e = json_object_array_get_idx(list, i);
        json_object *err = json_object_object_get(e, "error");
        char *line = tu_strdup_printf(
            "%s%s%s|%s|%d|%s", out, *out ? "\n" : "",
            json_object_get_string(json_object_object_get(e, "request_id")),
            json_object_get_string(json_object_object_get(e, "status")),
            json_object_object_get(e, "completed_at") != NULL,
            err ? json_object_to_json_string_ext(err, JSON_C_TO_STRING_PLAIN) : "null");
        free(out);
        out = line;
    }
    cpu_response_free(r);
    free(p);
    return out;
}

/* A server killed while its execute's command ran: past the execution's
 * deadline and SBX_SERVER_EXECUTE_GRACE_SECS, the next server's sweep
 * (SBX_SERVER_METER_SWEEP_SECS) settles it as failed with no replay
 * sent, with the row values a replay would write and unmetered; a replay
 * then answers that payload exactly. */
/* A server whose command outlives its deadline and the grace (a stalled
 * machine: here the server's test clock jumps ahead while the command
 * runs) finds its execution settled by a replay meanwhile: the settled
 * outcome stands, and the late answer is that outcome, as every replay's;
 * nothing is metered. */
Test(metering, a_late_outcome_does_not_overwrite_a_settled_execution)
{
    const char *body = "{\"command\":\"sleep 1; echo late\",\"timeout_secs\":5}";
    char *clock = tu_strdup_printf("%s/clock", price_dir), *env, *id, *n, *p;
    struct timespec ts;
    double t0;
    par_arg a;
    pthread_t th;
    cpu_response *r;

    clock_gettime(CLOCK_REALTIME, &ts);
    t0 = (double)ts.tv_sec;
    set_clock(clock, t0);
    env = tu_strdup_printf("SBX_SERVER_TEST_CLOCK_FILE=%s", clock);
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = start_priced_with(env, "SBX_SERVER_EXECUTE_GRACE_SECS=1");
    id = cpu_create_local(srv, key, "{\"timeout_secs\":600}");
    p = path_of("/v1/sandboxes/%s/execute", id);
    a = (par_arg){ srv->url, "POST", p, body, "Idempotency-Key: late-1", 0, NULL };
    cr_assert_eq(pthread_create(&th, NULL, par_thread, &a), 0);
    for (int i = 0;; i++) {
        n = db_list("SELECT status FROM executions WHERE request_id = 'late-1'");
        int running = n && !strcmp(n, "running");
        free(n);
        if (running)
            break;
        cr_assert(i < 500, "the execution is not running");
        usleep(2000);
    }
    /* Past its deadline (5 s) and the grace (1 s): a replay settles it. */
    set_clock(clock, t0 + 60);
    r = execute(key, id, "late-1", body, 409);
    expect_detail(r, ABANDONED_PAYLOAD);
    cpu_response_free(r);
    pthread_join(th, NULL);
    cr_assert_eq(a.status, 409, "%s", a.out);
    r = calloc(1, sizeof *r);
    r->body = a.out;
    r->json = json_tokener_parse(a.out);
    expect_detail(r, ABANDONED_PAYLOAD);
    json_object_put(r->json);
    free(r);
    free(a.out);
    n = db_list("SELECT e.status || '|' || e.error || '|' || (SELECT COUNT(*) FROM usage_events u"
                " WHERE u.request_id = e.request_id) || '|' || (SELECT COUNT(*) FROM"
                " execution_outbox o WHERE o.request_id = e.request_id) || '|' ||"
                " CASE WHEN e.response_json IS NULL THEN 'no answer' ELSE 'answer' END"
                " FROM executions e WHERE e.request_id = 'late-1'");
    cr_assert_str_eq(n, "failed|" ABANDONED_PAYLOAD "|0|0|no answer");
    free(n);
    n = cpu_read_log(srv, 1);
    cr_assert(strstr(n, "sbx-server: execution late-1 of sandbox "), "%s", n);
    cr_assert(strstr(n, " ended after it was settled as abandoned; its settled outcome "
                        "stands\n"), "%s", n);
    free(n);
    terminate(key, id);
    free(p);
    free(id);
    free(env);
    free(clock);
}

Test(metering, an_execution_whose_server_died_is_settled_by_the_sweep)
{
    const char *grace = "SBX_SERVER_EXECUTE_GRACE_SECS=1";
    const char *sweep = "SBX_SERVER_METER_SWEEP_SECS=0.2";
    const char *body = "{\"command\":\"sleep 30\",\"timeout_secs\":5}";
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":120}"), *n = NULL, *stored;
    char *p = path_of("/v1/sandboxes/%s/execute", id);
    cpu_response *r;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = start_priced_with(grace, sweep);
    kill_server_mid_execute(p, "swept-1", body);
    srv = start_priced_with(grace, sweep);

    /* Before its deadline the detail lists it running, and only the
     * detail is read from here on until it is settled. */
    n = detail_executions(id);
    cr_assert_str_eq(n, "swept-1|running|0|null");
    for (int i = 0;; i++) {
        free(n);
        n = detail_executions(id);
        if (strcmp(n, "swept-1|running|0|null"))
            break;
        cr_assert(i < 100, "still running 20 s after the deadline");
        usleep(200000);
    }
    cr_assert_str_eq(n, "swept-1|failed|1|" ABANDONED_PAYLOAD);
    free(n);
    n = cpu_read_log(srv, 1);
    cr_assert(strstr(n, "sbx-server: settled 1 abandoned execution as failed\n"), "%s", n);
    cr_assert_null(strstr(n, "route=/v1/sandboxes/{id}/execute"), "a replay was sent: %s", n);
    free(n);
    n = db_list("SELECT e.status || '|' || e.error || '|' || (SELECT COUNT(*) FROM usage_events u"
                " WHERE u.request_id = e.request_id) || '|' || (SELECT COUNT(*) FROM"
                " execution_outbox o WHERE o.request_id = e.request_id) || '|' ||"
                " CASE WHEN e.runtime_seconds IS NULL THEN 'unmetered' ELSE 'amounts' END"
                " FROM executions e WHERE e.request_id = 'swept-1'");
    cr_assert_str_eq(n, "failed|" ABANDONED_PAYLOAD "|0|0|unmetered");
    free(n);
    stored = db_list("SELECT completed_at FROM executions WHERE request_id = 'swept-1'");
    r = execute(key, id, "swept-1", body, 409);
    expect_detail(r, ABANDONED_PAYLOAD);
    cpu_response_free(r);
    /* The replay wrote nothing. */
    n = db_list("SELECT completed_at FROM executions WHERE request_id = 'swept-1'");
    cr_assert_str_eq(n, stored);
    free(n);
    free(stored);
    terminate(key, id);
    free(p);
    free(id);
}

/* A running execution whose deadline and grace passed while no server ran
 * is settled by the next server before it listens (its sweep too long to
 * have done it), as the sweep and a replay settle it. */
Test(metering, an_abandoned_execution_is_settled_at_start)
{
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":120}"), *n, *sql;
    cpu_response *r;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    sql = tu_strdup_printf("INSERT INTO executions(organization_id, sandbox_id, request_id, id,"
                           " status, created_at, deadline_at) VALUES ('%s', '%s', 'gone-1',"
                           " 'exe_gone1', 'running', '2026-01-01T00:00:00Z',"
                           " '2026-01-01T00:00:05Z'), ('%s', '%s', 'gone-2', 'exe_gone2',"
                           " 'running', '2026-01-01T00:00:00Z', '9999-01-01T00:00:00Z')",
                           org, id, org, id);
    n = db_list(sql);
    cr_assert_not_null(n, "%s", sql);
    free(n);
    free(sql);
    srv = start_priced_with("SBX_SERVER_METER_SWEEP_SECS=86400", NULL);
    n = cpu_read_log(srv, 1);
    cr_assert(strstr(n, "sbx-server: settled 1 abandoned execution as failed\n"), "%s", n);
    free(n);
    n = detail_executions(id);
    cr_assert_str_eq(n, "gone-2|running|0|null\ngone-1|failed|1|" ABANDONED_PAYLOAD);
    free(n);
    r = execute(key, id, "gone-1", "{\"command\":\"true\"}", 409);
    expect_detail(r, ABANDONED_PAYLOAD);
    cpu_response_free(r);
    r = execute(key, id, "gone-2", "{\"command\":\"true\"}", 409);
    expect_detail(r, "execution is already in progress");
    cpu_response_free(r);
    n = db_list("SELECT COUNT(*) FROM usage_events");
    cr_assert_str_eq(n, "0");
    free(n);
    terminate(key, id);
    free(id);
}

/* A server SIGKILLed right after answering, before its outbox metered the
 * execute: the next server meters it at start-up, once, as answered; a
 * replay returns the answer; a later start meters nothing again. */
/* An execution claimed on a sandbox without a lifetime, by a call without
 * a timeout, whose server died: with no deadline it may still run while
 * its sandbox lives (a restart leaves it running), and is settled as
 * failed, as abandoned, once its sandbox is destroyed. */
Test(metering, an_execution_without_a_deadline_is_settled_when_its_sandbox_ends)
{
    char *id = cpu_create_local(srv, key, "{}"), *n, *sql;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    sql = tu_strdup_printf("INSERT INTO executions(organization_id, sandbox_id, request_id, id,"
                           " status, created_at, deadline_at) VALUES ('%s', '%s', 'gone-3',"
                           " 'exe_gone3', 'running', '2026-01-01T00:00:00Z', NULL)", org, id);
    n = db_list(sql);
    cr_assert_not_null(n, "%s", sql);
    free(n);
    free(sql);
    srv = start_priced_with("SBX_SERVER_METER_SWEEP_SECS=86400", NULL);
    n = detail_executions(id);
    cr_assert_str_eq(n, "gone-3|running|0|null");
    free(n);
    terminate(key, id);
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = start_priced_with("SBX_SERVER_METER_SWEEP_SECS=86400", NULL);
    n = cpu_read_log(srv, 1);
    cr_assert(strstr(n, "sbx-server: settled 1 abandoned execution as failed\n"), "%s", n);
    free(n);
    n = db_list("SELECT request_id || '|' || status FROM executions WHERE request_id = 'gone-3'");
    cr_assert_str_eq(n, "gone-3|failed");
    free(n);
    free(id);
}

Test(metering, answered_then_killed_is_metered_at_start)
{
    const char *hook = "SBX_SERVER_TEST_CRASH_AFTER_ANSWER=1";
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}"), *log, *n;
    cpu_server *dying;
    cpu_response *r, *again;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = NULL;
    dying = start_priced(hook);
    r = execute_then_killed(dying, id, "kill-1", "{\"command\":\"printf answered\"}");
    cr_assert_str_eq(cpu_jstr(r, "stdout"), "answered");
    cpu_stop(dying);
    srv = start_priced(NULL);
    log = cpu_read_log(srv, 1);
    cr_assert(strstr(log, "sbx-server: metered 1 execution answered before the start\n"),
              "%s", log);
    free(log);
    assert_metered_as_answered("kill-1", r);
    again = execute(key, id, "kill-1", "{\"command\":\"printf answered\"}", 200);
    cr_assert_str_eq(again->body, r->body);
    cpu_response_free(again);
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = start_priced(NULL);
    log = cpu_read_log(srv, 1);
    cr_assert_null(strstr(log, "metered"), "%s", log);
    free(log);
    n = db_list("SELECT COUNT(*) FROM usage_events WHERE request_id = 'kill-1'");
    cr_assert_str_eq(n, "1");
    free(n);
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

/* An execution a version 4 server answered and left pending (its row's
 * meter_pending, the partial index) is moved to the outbox by migration
 * 5 and metered at the next start, once, as answered; the ledger entries
 * of one metered before keep their values under the ledger's new key. */
Test(metering, schema_migration_5_keeps_pending_executions)
{
    static const char *const to_v4[] = {
        "ALTER TABLE executions ADD COLUMN meter_pending INTEGER",
        "UPDATE executions SET meter_pending = 1 WHERE request_id IN"
        " (SELECT request_id FROM execution_outbox)",
        "CREATE INDEX executions_meter_pending ON executions(meter_pending, organization_id)"
        " WHERE meter_pending = 1",
        "DROP TABLE execution_outbox",
        "CREATE TABLE ledger_entries_v4 ("
        " usage_event_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,"
        " organization_id TEXT NOT NULL, sandbox_id TEXT NOT NULL, amount_usd TEXT NOT NULL,"
        " price_version TEXT NOT NULL, created_at TEXT NOT NULL,"
        " PRIMARY KEY(usage_event_id, kind))",
        "INSERT INTO ledger_entries_v4(usage_event_id, kind, id, organization_id, sandbox_id,"
        " amount_usd, price_version, created_at) SELECT usage_event_id, kind, id,"
        " organization_id, sandbox_id, amount_usd, price_version, created_at"
        " FROM ledger_entries",
        "DROP TABLE ledger_entries",
        "ALTER TABLE ledger_entries_v4 RENAME TO ledger_entries",
        "DROP INDEX executions_running",
        "ALTER TABLE executions DROP COLUMN deadline_at",
        "DELETE FROM schema_migrations WHERE version IN (5, 6, 7)",
    };
    const char *hook = "SBX_SERVER_TEST_CRASH_AFTER_ANSWER=1";
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}"), *log, *n;
    cpu_server *dying;
    cpu_response *r, *before;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = start_priced(NULL);
    before = execute(key, id, "mig5-0", "{\"command\":\"sleep 0.02\"}", 200);
    settle(srv, key);
    assert_metered_as_answered("mig5-0", before);
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = NULL;
    dying = start_priced(hook);
    r = execute_then_killed(dying, id, "mig5-1", "{\"command\":\"printf pending\"}");
    cpu_stop(dying);
    for (size_t i = 0; i < sizeof to_v4 / sizeof to_v4[0]; i++) {
        n = db_list(to_v4[i]);
        cr_assert_not_null(n, "%s", to_v4[i]);
        free(n);
    }
    n = db_list("SELECT request_id FROM executions WHERE meter_pending = 1");
    cr_assert_str_eq(n, "mig5-1");
    free(n);
    srv = start_priced(NULL);
    n = db_list("SELECT version FROM schema_migrations ORDER BY version");
    cr_assert_str_eq(n, "1,2,3,4,5,6,7");
    free(n);
    log = cpu_read_log(srv, 1);
    cr_assert(strstr(log, "sbx-server: metered 1 execution answered before the start\n"),
              "%s", log);
    free(log);
    assert_metered_as_answered("mig5-1", r);
    assert_metered_as_answered("mig5-0", before);
    n = db_list("SELECT COUNT(*) FROM usage_events WHERE request_id LIKE 'mig5-%'");
    cr_assert_str_eq(n, "2");
    free(n);
    n = db_list("SELECT COUNT(*) FROM ledger_entries l JOIN usage_events u"
                " ON u.id = l.usage_event_id WHERE u.request_id LIKE 'mig5-%'");
    cr_assert_str_eq(n, "4");
    free(n);
    cpu_response_free(before);
    cpu_response_free(r);
    terminate(key, id);
    free(id);
}

/* Two servers on one database: one answers and is SIGKILLed before
 * metering; the other's sweeper (every 0.2 s here) meters that execute
 * with no request of its own, once, as answered. */
Test(metering, another_server_sweeps_what_a_killed_one_answered)
{
    const char *hook = "SBX_SERVER_TEST_CRASH_AFTER_ANSWER=1";
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}"), *n = NULL;
    cpu_server *dying, *sweeper;
    cpu_response *r;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    srv = NULL;
    sweeper = start_priced("SBX_SERVER_METER_SWEEP_SECS=0.2");
    dying = start_priced(hook);
    r = execute_then_killed(dying, id, "kill-2", "{\"command\":\"printf swept\"}");
    cpu_stop(dying);
    /* The sweeper's next pass (0.2 s; 10 s at most on a loaded machine). */
    for (int i = 0; i < 500; i++) {
        free(n);
        n = db_list("SELECT COUNT(*) FROM execution_outbox WHERE request_id = 'kill-2'");
        if (n && !strcmp(n, "0"))
            break;
        usleep(20000);
    }
    cr_assert_str_eq(n, "0", "not swept");
    free(n);
    assert_metered_as_answered("kill-2", r);
    cpu_response_free(r);
    srv = sweeper;
    terminate(key, id);
    free(id);
}

typedef struct settle_arg {
    const char *url;
    long status;
} settle_arg;

static void *
settle_thread(void *p)
{
    settle_arg *a = p;
    cpu_response *r = cpu_http(a->url, "GET", "/v1/costs", key, NULL, NULL);

    a->status = r->status;
    cpu_response_free(r);
    return NULL;
}

/* Makes the executions whose request ids start with "pair-" unmetered
 * again, as a server killed after answering them would have left them:
 * their usage events and ledger entries removed, their keys in the
 * outbox. */
static void
unmeter_pairs(void)
{
    static const char *const sql[] = {
        "DELETE FROM ledger_entries WHERE usage_event_id IN (SELECT id FROM usage_events"
        " WHERE request_id LIKE 'pair-%')",
        "DELETE FROM usage_events WHERE request_id LIKE 'pair-%'",
        "INSERT INTO execution_outbox(completed_at, organization_id, sandbox_id, request_id)"
        " SELECT completed_at, organization_id, sandbox_id, request_id FROM executions"
        " WHERE request_id LIKE 'pair-%'",
    };

    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        char *n = db_list(sql[i]);
        cr_assert_not_null(n, "%s", sql[i]);
        free(n);
    }
}

/* 70 executions left unmetered (more than one batch of 64): a server's
 * start-up meters them all; left unmetered again, two servers on the one
 * database settle them at once, five costs reports each: every one is
 * metered exactly once, as it was answered. */
Test(metering, two_servers_settle_each_execution_once)
{
    const char *sweep = "SBX_SERVER_METER_SWEEP_SECS=86400";
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}"), *n, *log;
    cpu_response *ans[70];
    cpu_server *b;
    settle_arg args[10];
    pthread_t th[10];

    for (int i = 0; i < 70; i++) {
        char rid[32];
        snprintf(rid, sizeof rid, "pair-%02d", i);
        ans[i] = execute(key, id, rid, "{\"command\":\"true\"}", 200);
    }
    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    unmeter_pairs();
    srv = start_priced(sweep);
    log = cpu_read_log(srv, 1);
    cr_assert(strstr(log, "sbx-server: metered 70 executions answered before the start\n"),
              "%s", log);
    free(log);
    n = db_list("SELECT COUNT(*) FROM usage_events WHERE request_id LIKE 'pair-%'");
    cr_assert_str_eq(n, "70");
    free(n);
    b = start_priced(sweep);
    unmeter_pairs();
    for (int i = 0; i < 10; i++) {
        args[i].url = i % 2 ? b->url : srv->url;
        args[i].status = 0;
        cr_assert_eq(pthread_create(&th[i], NULL, settle_thread, &args[i]), 0);
    }
    for (int i = 0; i < 10; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(args[i].status, 200);
    }
    n = db_list("SELECT COUNT(*) FROM usage_events WHERE request_id LIKE 'pair-%'");
    cr_assert_str_eq(n, "70");
    free(n);
    n = db_list("SELECT COUNT(*) FROM ledger_entries l JOIN usage_events u"
                " ON u.id = l.usage_event_id WHERE u.request_id LIKE 'pair-%'");
    cr_assert_str_eq(n, "140");
    free(n);
    for (int i = 0; i < 70; i++) {
        char rid[32];
        snprintf(rid, sizeof rid, "pair-%02d", i);
        assert_metered_as_answered(rid, ans[i]);
        cpu_response_free(ans[i]);
    }
    cpu_stop(b);
    terminate(key, id);
    free(id);
}

/* Read-your-writes: a costs report through another server counts an
 * execute answered a moment before by a server that died before metering
 * it (local is priced 0 by the bundled table: the report is the usage
 * events'). */
Test(server, costs_report_counts_an_answered_execute)
{
    const char *hook[] = { "SBX_SERVER_TEST_CRASH_AFTER_ANSWER=1", NULL };
    const char *slow[] = { "SBX_SERVER_METER_SWEEP_SECS=86400", NULL };
    char *id = cpu_create_local(srv, key, "{\"timeout_secs\":60}");
    cpu_server *dying, *other;
    cpu_response *r, *c;

    cpu_signal(srv, SIGTERM);
    cpu_stop(srv);
    other = cpu_start(store, slow);
    dying = cpu_start(store, hook);
    r = execute_then_killed(dying, id, "seen-1", "{\"command\":\"sleep 0.01\"}");
    cpu_stop(dying);
    c = cpu_http(other->url, "GET", "/v1/costs?group_by=sandbox", key, NULL, NULL);
    cr_assert_eq(c->status, 200, "%s", c->body);
    cr_assert_eq(json_object_array_length(cpu_jget(c->json, "items")), 1, "%s", c->body);
    cr_assert_str_eq(cpu_jstr(c, "items.0.key"), id);
    cr_assert_str_eq(cpu_jstr(c, "items.0.runtime_seconds"), cpu_jstr(r, "usage.runtime_seconds"));
    cr_assert_str_eq(cpu_jstr(c, "items.0.provider_cost_usd"), "0");
    cpu_response_free(c);
    assert_metered_as_answered("seen-1", r);
    cpu_response_free(r);
    srv = other;
    terminate(key, id);
    free(id);
}

/* ---------------------------------------------------------------- lax */

/* Checks one coercion of @kind ('i', 'f', 'b') against @want: pydantic's
 * error type, or the value it gives (an integer in decimal, past int64
 * the bound the server keeps with its range; a float as Python's repr(),
 * "inf", "-inf" or "nan"; a bool "1" or "0"). @what names the case. */
static void
expect_lax(char kind, int rc, const cp_lax_error *err, int64_t i, int range, double f, int b,
           const char *want, const char *what)
{
    if (!((want[0] >= '0' && want[0] <= '9') || want[0] == '-' || !strcmp(want, "inf") ||
          !strcmp(want, "nan"))) {
        cr_expect_eq(rc, -1, "%c %s: accepted, want %s", kind, what, want);
        if (rc < 0)
            cr_expect_str_eq(err->type, want, "%c %s", kind, what);
        return;
    }
    cr_expect_eq(rc, 0, "%c %s: %s, want %s", kind, what, rc ? err->type : "", want);
    if (rc)
        return;
    if (kind == 'i') {
        long long w;
        errno = 0;
        w = strtoll(want, NULL, 10);
        cr_expect_eq(i, (int64_t)w, "%c %s: %lld", kind, what, (long long)i);
        cr_expect_eq(range, errno != ERANGE ? CP_LAX_IN_RANGE : w > 0 ? CP_LAX_ABOVE : CP_LAX_BELOW,
                     "%c %s", kind, what);
    } else if (kind == 'f') {
        double w = strtod(want, NULL);
        cr_expect(isnan(w) ? isnan(f) : f == w, "%c %s: %.17g", kind, what, f);
    } else {
        cr_expect_eq(b, atoi(want), "%c %s", kind, what);
    }
}

/* The coercions of server/lax.c, rule by rule, as pydantic 2.13.4 answers
 * them for a model with an int, a float and a bool field (the values
 * below are its answers): strings trimmed of Unicode white space (not of
 * U+001C or U+200B), underscores between digits, leading zeros (and what
 * pydantic reads after them: "0-5" is -5), "5.0" as an int, Rust's
 * float syntax (inf, nan, "5.", ".5"), the bool words in any case and
 * untrimmed; then JSON numbers and booleans. */
Test(lax, coercions_are_pydantics)
{
    static const struct { char kind; const char *text, *want; } texts[] = {
        { 'i', "5", "5" },
        { 'i', " 7 ", "7" },
        { 'i', "+3", "3" },
        { 'i', "-4", "-4" },
        { 'i', "1_000", "1000" },
        { 'i', "5.0", "5" },
        { 'i', "5.00", "5" },
        { 'i', "0_5", "5" },
        { 'i', "0005", "5" },
        { 'i', "\0119\012", "9" },
        { 'i', "\302\2405", "5" },
        { 'i', "5\343\200\200", "5" },
        { 'i', "\342\200\2505", "5" },
        { 'i', "\0135\014", "5" },
        { 'i', "\302\2055", "5" },
        { 'i', "\0345", "int_parsing" },
        { 'i', "\342\200\2135", "int_parsing" },
        { 'i', "x", "int_parsing" },
        { 'i', "1e3", "int_parsing" },
        { 'i', "0x10", "int_parsing" },
        { 'i', "5.5", "int_parsing" },
        { 'i', "5.", "int_parsing" },
        { 'i', ".0", "int_parsing" },
        { 'i', "", "int_parsing" },
        { 'i', " ", "int_parsing" },
        { 'i', "1__0", "int_parsing" },
        { 'i', "_1", "int_parsing" },
        { 'i', "1_", "int_parsing" },
        { 'i', "-_5", "int_parsing" },
        { 'i', "5.0_", "int_parsing" },
        { 'i', "1_0.0_0", "int_parsing" },
        { 'i', "+-5", "int_parsing" },
        { 'i', "5 0", "int_parsing" },
        { 'i', "\331\245", "int_parsing" },
        { 'i', "0-5", "-5" },
        { 'i', "0__5", "5" },
        { 'i', "+0-5", "-5" },
        { 'i', "-0__5", "-5" },
        { 'i', "0_-_5", "-5" },
        { 'i', "0-05", "int_parsing" },
        { 'i', "0_", "int_parsing" },
        { 'i', "0_0", "0" },
        { 'i', "00-_0", "0" },
        { 'i', "9223372036854775807", "9223372036854775807" },
        { 'i', "9223372036854775808", "9223372036854775808" },
        { 'i', "-9223372036854775808", "-9223372036854775808" },
        { 'i', "-9223372036854775809", "-9223372036854775809" },
        { 'i', "99999999999999999999", "99999999999999999999" },
        { 'i', "1_000.000", "1000" },
        { 'f', "2.5", "2.5" },
        { 'f', " 2.5 ", "2.5" },
        { 'f', "+1.5", "1.5" },
        { 'f', "-2", "-2.0" },
        { 'f', ".5", "0.5" },
        { 'f', "5.", "5.0" },
        { 'f', "1e3", "1000.0" },
        { 'f', "1.5E-3", "0.0015" },
        { 'f', "1_0.5", "10.5" },
        { 'f', "1_.5", "1.5" },
        { 'f', "1._5", "1.5" },
        { 'f', "1e1_0", "10000000000.0" },
        { 'f', "1_e1", "10.0" },
        { 'f', "inf", "inf" },
        { 'f', "-Infinity", "-inf" },
        { 'f', "iNfInItY", "inf" },
        { 'f', "nan", "nan" },
        { 'f', "+NaN", "nan" },
        { 'f', "i_nf", "inf" },
        { 'f', "1e309", "inf" },
        { 'f', "1e-400", "0.0" },
        { 'f', "\302\2402.5", "2.5" },
        { 'f', "x", "float_parsing" },
        { 'f', "", "float_parsing" },
        { 'f', ".", "float_parsing" },
        { 'f', "e5", "float_parsing" },
        { 'f', "1e", "float_parsing" },
        { 'f', "0x10", "float_parsing" },
        { 'f', "1__0", "float_parsing" },
        { 'f', "_1", "float_parsing" },
        { 'f', "1_", "float_parsing" },
        { 'f', " 1_0 ", "float_parsing" },
        { 'f', "infinit", "float_parsing" },
        { 'f', "nan(1)", "float_parsing" },
        { 'f', "1d", "float_parsing" },
        { 'f', "\331\241", "float_parsing" },
        { 'f', "4.9e-324", "5e-324" },
        { 'f', "0.1", "0.1" },
        { 'f', "1_000_000.000_1", "1000000.0001" },
        { 'b', "true", "1" },
        { 'b', "TRUE", "1" },
        { 'b', "tRuE", "1" },
        { 'b', "false", "0" },
        { 'b', "yes", "1" },
        { 'b', "No", "0" },
        { 'b', "on", "1" },
        { 'b', "OFF", "0" },
        { 'b', "t", "1" },
        { 'b', "F", "0" },
        { 'b', "y", "1" },
        { 'b', "n", "0" },
        { 'b', "1", "1" },
        { 'b', "0", "0" },
        { 'b', "x", "bool_parsing" },
        { 'b', "", "bool_parsing" },
        { 'b', " true", "bool_parsing" },
        { 'b', "true ", "bool_parsing" },
        { 'b', "2", "bool_parsing" },
        { 'b', "01", "bool_parsing" },
        { 'b', "+1", "bool_parsing" },
        { 'b', "1.0", "bool_parsing" },
        { 'b', "0.0", "bool_parsing" },
        { 'b', "yess", "bool_parsing" },
        { 'b', "o", "bool_parsing" },
    };
    static const struct { char kind; const char *json, *want; } values[] = {
        { 'i', "true", "1" },
        { 'i', "false", "0" },
        { 'i', "5.0", "5" },
        { 'i', "5.5", "int_from_float" },
        { 'i', "1e20", "int_parsing_size" },
        { 'i', "-9.3e18", "int_parsing_size" },
        { 'i', "[]", "int_type" },
        { 'i', "{}", "int_type" },
        { 'f', "true", "1.0" },
        { 'f', "false", "0.0" },
        { 'f', "2", "2.0" },
        { 'f', "9223372036854775808", "9.223372036854776e+18" },
        { 'f', "[]", "float_type" },
        { 'b', "0", "0" },
        { 'b', "1", "1" },
        { 'b', "2", "bool_parsing" },
        { 'b', "-1", "bool_parsing" },
        { 'b', "0.0", "0" },
        { 'b', "-0.0", "0" },
        { 'b', "1.0", "1" },
        { 'b', "2.0", "bool_parsing" },
        { 'b', "0.5", "bool_type" },
        { 'b', "1e20", "bool_type" },
        { 'b', "9223372036854775807", "bool_parsing" },
        { 'b', "9223372036854775808", "bool_type" },
        { 'b', "[]", "bool_type" },
        { 'b', "{}", "bool_type" },
    };
    cp_lax_error err = { NULL, NULL };

    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        int64_t i = 0;
        int range = 0, b = 0, rc;
        double f = 0;
        size_t len = strlen(texts[k].text);
        if (texts[k].kind == 'i')
            rc = cp_lax_int_text(texts[k].text, len, &i, &range, &err);
        else if (texts[k].kind == 'f')
            rc = cp_lax_float_text(texts[k].text, len, &f, &err);
        else
            rc = cp_lax_bool_text(texts[k].text, len, &b, &err);
        expect_lax(texts[k].kind, rc, &err, i, range, f, b, texts[k].want, texts[k].text);
    }
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
        json_object *v = json_tokener_parse(values[k].json);
        int64_t i = 0;
        int range = 0, b = 0, rc;
        double f = 0;
        if (values[k].kind == 'i')
            rc = cp_lax_int(v, &i, &range, &err);
        else if (values[k].kind == 'f')
            rc = cp_lax_float(v, &f, &err);
        else
            rc = cp_lax_bool(v, &b, &err);
        expect_lax(values[k].kind, rc, &err, i, range, f, b, values[k].want, values[k].json);
        json_object_put(v);
    }
}
