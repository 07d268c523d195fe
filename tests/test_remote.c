/*
 * test_remote.c — what only the remote backend does, through a real
 * control plane (tests/remote.sh starts the build's sbx-server over its
 * local backend and runs this program with SBX_TEST_BACKEND=remote,
 * BESPOKE_SANDBOX_URL, BESPOKE_SANDBOX_KEY of an organization it made, and
 * SBX_TEST_CP_ADMIN_TOKEN):
 *
 *  - the error contract (CONTROL-PLANE.md §0, §10) on sbx codes, each from
 *    the server's own answer: 401 (a wrong key), 403 (a key without the
 *    scope), 404 (a sandbox id the server does not have), 409 (one
 *    idempotency key, two different creates), 422 as a string (a backend
 *    the server does not enable), as a provider payload (local refusing an
 *    image) and as a validation list (the body changed on the wire), 502
 *    and 504 with a provider payload (docker with no engine; e2b whose
 *    fake answers 504), 500 (the server's store failing one statement: a
 *    trigger in its store, SQLite or PostgreSQL) on create and on
 *    execute, and a server that does not answer (connection);
 *  - a create and an execute whose answers are lost on the wire are sent
 *    again with the same idempotency key, and the server makes one sandbox
 *    and runs the command once (its list and the command's own file count),
 *    also when the re-sent execute finds the first still running (409 in
 *    progress, waited out); a failed execute's replay (409 with the stored
 *    payload as a string) is the same error as the 502 it replays; a create
 *    whose answer is lost with no re-send allowed fails with outcome
 *    unknown, and the sandbox the server made is deleted before it returns;
 *  - list_owned reports the sandboxes made with a create token (the
 *    records' idempotency_key), not those made by other clients or with
 *    the caller's own key, which destroy_by_id refuses; a create whose
 *    answer was lost (every send of it) is reaped by sbx_gc() once its
 *    lifetime ended, found by its token through list_owned;
 *  - the session state holds the server's id and URL, no key, and a resume
 *    through another client works;
 *  - CASE-07 through the control plane: non-UTF-8 output arrives byte-exact;
 *  - the CLI: `sbx --remote URL` run, create, exec, ps and rm on the
 *    server's sandboxes, and `sbx costs` printing the server's /v1/costs
 *    (the same JSON, and its strings in the table), its refusals and usage
 *    errors; the same commands with no --remote, the server named by
 *    BESPOKE_SANDBOX_URL and the key by BESPOKE_SANDBOX_KEY.
 *
 * The proxy below is fault injection on the wire between the plugin and
 * the real server (it relays both ways, and drops an answer or rewrites a
 * request on purpose); every answer comes from sbx-server itself.
 */
#include "recordutil.h"
#include "testutil.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#ifdef SBX_TEST_HAVE_LIBPQ
#include <libpq-fe.h>
#endif
#include <sqlite3.h>

#include <sbx/sbx.h>

static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    sbx_error *err = NULL;
    cr_assert_str_eq(tu_backend(), "remote", "run by tests/remote.sh");
    cr_assert_not_null(getenv("BESPOKE_SANDBOX_URL"));
    cr_assert_not_null(getenv("SBX_TEST_CP_ADMIN_TOKEN"));
    g_client = sbx_client_new("remote", &err);
    cr_assert_not_null(g_client, "sbx_client_new: %s", err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
}

TestSuite(remote, .init = setup, .fini = teardown, .timeout = 90);

/* ---------------------------------------------------------- HTTP helpers */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    size_t len = size * n;
    char **buf = ud;
    size_t have = *buf ? strlen(*buf) : 0;
    char *nb = realloc(*buf, have + len + 1);
    cr_assert_not_null(nb);
    memcpy(nb + have, p, len);
    nb[have + len] = '\0';
    *buf = nb;
    return len;
}

/* @method BESPOKE_SANDBOX_URL@path with @header (or none) and @body (or
 * none): the status, the answer's JSON in *@out (NULL when none). */
static long cp_http(const char *method, const char *path, const char *header, const char *body,
                    json_object **out)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char *url = tu_strdup_printf("%s%s", getenv("BESPOKE_SANDBOX_URL"), path), *got = NULL;
    long status = 0;
    if (header)
        hdrs = curl_slist_append(hdrs, header);
    if (body)
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &got);
    cr_assert_eq(curl_easy_perform(h), CURLE_OK, "%s %s", method, url);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (out)
        *out = got ? json_tokener_parse(got) : NULL;
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(url);
    free(got);
    return status;
}

/* A new key of the suite's organization with @scopes (a JSON array): its
 * secret, a new string. */
static char *new_key(const char *scopes)
{
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    char *body = tu_strdup_printf("{\"name\":\"test\",\"scopes\":%s}", scopes);
    json_object *j = NULL;
    cr_assert_eq(cp_http("POST", "/v1/api-keys", auth, body, &j), 201);
    char *secret = strdup(tu_json_str(j, "secret"));
    json_object_put(j);
    free(auth);
    free(body);
    return secret;
}

/* The ids of the sandboxes of the suite's organization whose status is
 * @status (NULL: any): how many. */
static int count_sandboxes(const char *status)
{
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    json_object *j = NULL;
    cr_assert_eq(cp_http("GET", "/v1/sandboxes", auth, NULL, &j), 200);
    cr_assert(json_object_is_type(j, json_type_array));
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(j); i++)
        if (!status || strcmp(tu_json_str(json_object_array_get_idx(j, i), "status"),
                              status) == 0)
            n++;
    json_object_put(j);
    free(auth);
    return n;
}

/* A client of the remote backend with the client options @config. */
static sbx_client *client_with(const char *config)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new_with_config("remote", SBX_PLUGIN_MODE_DEFAULT, config, &err);
    cr_assert_not_null(c, "client %s: %s", config, err ? sbx_error_get0_message(err) : "");
    return c;
}

/* Creates with @c and @o and expects it to fail: the error. */
static sbx_error *create_fails(sbx_client *c, sbx_options *o)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
    if (sb) {
        sbx_sandbox_destroy(sb, NULL);
        sbx_sandbox_free(sb);
    }
    cr_assert_null(sb, "the create succeeded");
    cr_assert_not_null(err);
    cr_assert_str_eq(sbx_error_get0_backend(err), "remote");
    return err;
}

static void assert_ctx(const sbx_error *err, const char *key, const char *want)
{
    const char *got = sbx_error_get0_context(err, key);
    cr_assert_not_null(got, "no context %s (message: %s)", key, sbx_error_get0_message(err));
    cr_assert_str_eq(got, want, "context %s", key);
}

/* ---------------------------------------------------------- the proxy */

/*
 * A proxy on 127.0.0.1 in front of the control plane, one request at a time
 * per connection (Content-Length bodies, as sbx-server answers): requests
 * go on as they came, except that the first @drop requests whose line
 * starts with @match have their answer read from the server and thrown
 * away, the client's connection closed instead (the answer lost on the
 * wire), and a request body holding @from gets @to instead (same length).
 */
typedef struct proxy {
    int lfd;
    int port;
    int upstream_port;
    const char *match;
    int drop;
    const char *from, *to;
    int early;          /* a dropped request's connection is closed as soon
                         * as the request went on, before its answer */
    const char *ans_from, *ans_to; /* every @ans_from in an answer becomes
                                    * @ans_to (same length) */
    char *last;         /* the last request whose line starts with @match */
    pthread_mutex_t lock;
    int requests;       /* requests seen whose line starts with @match */
    pthread_t thread;
} proxy;

/* Reads one HTTP message (headers and a Content-Length body) from @fd into
 * a new buffer: its length, 0 at the end, -1 on error. */
static ssize_t read_message(int fd, char **out)
{
    size_t cap = 65536, len = 0;
    char *b = malloc(cap);
    ssize_t want = -1;
    for (;;) {
        if (len + 1 >= cap)
            b = realloc(b, cap *= 2);
        ssize_t k = read(fd, b + len, cap - len - 1);
        if (k <= 0) {
            free(b);
            return len == 0 && k == 0 ? 0 : -1;
        }
        len += (size_t)k;
        b[len] = '\0';
        if (want < 0) {
            char *end = strstr(b, "\r\n\r\n");
            if (!end)
                continue;
            long cl = 0;
            for (char *p = b; p < end; p = strstr(p, "\r\n") + 2)
                if (strncasecmp(p, "Content-Length:", 15) == 0)
                    cl = strtol(p + 15, NULL, 10);
            want = (end + 4 - b) + cl;
        }
        if ((ssize_t)len >= want) {
            *out = b;
            return (ssize_t)len;
        }
    }
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct conn {
    proxy *px;
    int fd;
} conn;

static void *proxy_conn(void *ud)
{
    conn *c = ud;
    proxy *px = c->px;
    int up = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)px->upstream_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (connect(up, (struct sockaddr *)&a, sizeof a) == 0) {
        for (;;) {
            char *rq = NULL, *rs = NULL;
            ssize_t n = read_message(c->fd, &rq);
            if (n <= 0)
                break;
            int drop = 0;
            pthread_mutex_lock(&px->lock);
            if (px->match && strncmp(rq, px->match, strlen(px->match)) == 0) {
                px->requests++;
                free(px->last);
                px->last = strndup(rq, (size_t)n);
                if (px->drop > 0) {
                    px->drop--;
                    drop = 1;
                }
            }
            pthread_mutex_unlock(&px->lock);
            if (px->from) {
                char *hit = memmem(rq, (size_t)n, px->from, strlen(px->from));
                if (hit)
                    memcpy(hit, px->to, strlen(px->to));
            }
            ssize_t m = -1;
            if (write_all(up, rq, (size_t)n) == 0) {
                if (drop && px->early) {
                    /* Lost on the way back before any answer: the client
                     * sees its connection end 0.3 s after the request went
                     * on (the server has it in hand by then); the server's
                     * answer is read and thrown away. */
                    usleep(300000);
                    shutdown(c->fd, SHUT_RDWR);
                    m = read_message(up, &rs);
                    free(rq);
                    free(rs);
                    break;
                }
                m = read_message(up, &rs);
                for (char *hit = m > 0 && px->ans_from ? rs : NULL;
                     hit && (hit = memmem(hit, (size_t)(rs + m - hit), px->ans_from,
                                          strlen(px->ans_from))) != NULL;
                     hit += strlen(px->ans_to))
                    memcpy(hit, px->ans_to, strlen(px->ans_to));
            }
            free(rq);
            if (m <= 0 || drop || write_all(c->fd, rs, (size_t)m) < 0) {
                free(rs);
                break;
            }
            free(rs);
        }
    }
    close(up);
    close(c->fd);
    free(c);
    return NULL;
}

static void *proxy_main(void *ud)
{
    proxy *px = ud;
    for (;;) {
        int fd = accept(px->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        conn *c = malloc(sizeof *c);
        c->px = px;
        c->fd = fd;
        pthread_t t;
        pthread_create(&t, NULL, proxy_conn, c);
        pthread_detach(t);
    }
}

static proxy *proxy_start(const char *match, int drop, const char *from, const char *to)
{
    proxy *px = calloc(1, sizeof *px);
    const char *url = getenv("BESPOKE_SANDBOX_URL");
    const char *colon = strrchr(url, ':');
    px->upstream_port = atoi(colon + 1);
    px->match = match;
    px->drop = drop;
    px->from = from;
    px->to = to;
    pthread_mutex_init(&px->lock, NULL);
    px->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    cr_assert_eq(bind(px->lfd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(px->lfd, 16), 0);
    getsockname(px->lfd, (struct sockaddr *)&a, &al);
    px->port = ntohs(a.sin_port);
    pthread_create(&px->thread, NULL, proxy_main, px);
    return px;
}

/* The last request whose line started with the proxy's match: a new
 * string. */
static char *proxy_last(proxy *px)
{
    pthread_mutex_lock(&px->lock);
    char *r = px->last ? strdup(px->last) : NULL;
    pthread_mutex_unlock(&px->lock);
    cr_assert_not_null(r, "no request matched");
    return r;
}

static int proxy_requests(proxy *px)
{
    pthread_mutex_lock(&px->lock);
    int n = px->requests;
    pthread_mutex_unlock(&px->lock);
    return n;
}

/* A client through @px (the rest from the environment). */
static sbx_client *client_via(proxy *px)
{
    char *cfg = tu_strdup_printf("{\"url\":\"http://127.0.0.1:%d\"}", px->port);
    sbx_client *c = client_with(cfg);
    free(cfg);
    return c;
}

/* ---------------------------------------------------------- the errors */

Test(remote, wrong_key_is_authentication_401)
{
    sbx_client *c = client_with("{\"api_key\":\"bsk_live_not-a-key-of-this-server\"}");
    sbx_error *err = create_fails(c, NULL);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION, "create the sandbox: invalid API key (HTTP 401)",
                    NULL);
    assert_ctx(err, "http_status", "401");
    cr_assert_null(strstr(sbx_error_get0_message(err), "not-a-key"), "the key was echoed");
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    sbx_error_free(err);
    sbx_client_free(c);
}

Test(remote, missing_scope_is_authentication_403_naming_it)
{
    char *key = new_key("[\"sandboxes:read\"]");
    char *cfg = tu_strdup_printf("{\"api_key\":\"%s\"}", key);
    sbx_client *c = client_with(cfg);
    sbx_error *err = create_fails(c, NULL);
    tu_assert_error(err, SBX_ERROR_AUTHENTICATION,
                    "create the sandbox: API key requires scope: sandboxes:create (HTTP 403)",
                    NULL);
    assert_ctx(err, "http_status", "403");
    assert_ctx(err, "scope", "sandboxes:create");
    cr_assert_null(strstr(sbx_error_get0_message(err), key));
    sbx_error_free(err);
    sbx_client_free(c);
    free(cfg);
    free(key);
}

Test(remote, unknown_sandbox_is_not_found_404)
{
    char *state = tu_strdup_printf(
        "{\"version\":1,\"backend\":\"remote\",\"id\":\"sbx_00000000000000000000000000000000\","
        "\"timeout_secs\":600,\"data\":{\"version\":1,\"sandbox_id\":"
        "\"sbx_00000000000000000000000000000000\",\"url\":\"%s\"}}",
        getenv("BESPOKE_SANDBOX_URL"));
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_resume(g_client, state, &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "sbx_00000000000000000000000000000000", NULL);
    assert_ctx(err, "reason", "gone");
    sbx_error_free(err);
    free(state);
}

Test(remote, same_key_other_request_is_invalid_argument_409)
{
    sbx_options *o = sbx_options_new();
    char *bo = tu_strdup_printf("{\"idempotency_key\":\"test-409-%d\"}", (int)getpid());
    cr_assert_eq(sbx_options_set_backend_options(o, bo, NULL), 0);
    g_sb = tu_create(g_client, o);
    /* The same request again: the same sandbox. */
    sbx_sandbox *again = tu_create(g_client, o);
    cr_assert_str_eq(sbx_sandbox_get0_id(again), sbx_sandbox_get0_id(g_sb));
    sbx_sandbox_free(again);
    /* Another request with that key. */
    cr_assert_eq(sbx_options_set_env(o, "OTHER", "1", NULL), 0);
    sbx_error *err = create_fails(g_client, o);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT,
                    "create the sandbox: idempotency key was already used with a different "
                    "request (HTTP 409)", NULL);
    assert_ctx(err, "http_status", "409");
    assert_ctx(err, "reason", "idempotency_key_reused");
    sbx_error_free(err);
    sbx_options_free(o);
    free(bo);
}

Test(remote, backend_not_enabled_is_configuration_422)
{
    sbx_client *c = client_with("{\"backend\":\"vercel\"}");
    sbx_error *err = create_fails(c, NULL);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION,
                    "create the sandbox: backend is not enabled: vercel (HTTP 422)", NULL);
    assert_ctx(err, "http_status", "422");
    assert_ctx(err, "upstream_backend", "vercel");
    sbx_error_free(err);
    sbx_client_free(c);
}

/* A create value that is not UTF-8 text is refused by the plugin naming
 * its option, before any request (the server would answer json_invalid at
 * a byte offset): an env value, a workdir. */
Test(remote, create_text_that_is_not_utf8_is_refused_naming_the_option)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "X", "a\xff", NULL), 0);
    sbx_error *err = create_fails(g_client, o);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "remote backend: env: the value of X is not UTF-8 text (the control "
                     "plane's JSON carries nothing else)");
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONFIGURATION);
    assert_ctx(err, "option", "env");
    sbx_error_free(err);
    sbx_options_free(o);
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, "/tmp/w\xc3\x28", NULL), 0);
    err = create_fails(g_client, o);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "remote backend: workdir: is not UTF-8 text (the control plane's JSON "
                     "carries nothing else)");
    assert_ctx(err, "option", "workdir");
    sbx_error_free(err);
    sbx_options_free(o);
    /* Valid UTF-8 beyond ASCII goes through. */
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_env(o, "X", "caf\xc3\xa9", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_result *r = tu_sh(g_sb, "printf %s \"$X\"", 10);
    tu_assert_stdout(r, "caf\xc3\xa9");
    sbx_result_free(r);
    sbx_options_free(o);
}

Test(remote, provider_refusal_is_its_payload_422)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_image(o, "debian:bookworm", NULL), 0);
    sbx_error *err = create_fails(g_client, o);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION,
                    "create the sandbox (image debian:bookworm): Provider configuration is "
                    "invalid. (HTTP 422, backend local)", NULL);
    assert_ctx(err, "http_status", "422");
    assert_ctx(err, "remote_code", "configuration");
    assert_ctx(err, "upstream_backend", "local");
    assert_ctx(err, "upstream_op", "create");
    /* The one option the request set. */
    assert_ctx(err, "option", "image");
    sbx_error_free(err);
    sbx_options_free(o);
}

Test(remote, validation_list_is_invalid_argument_422)
{
    /* cpu 2.5 leaves as "cpu":2.5; the wire makes it -25. */
    proxy *px = proxy_start("POST /v1/sandboxes ", 0, "\"cpu\":2.5", "\"cpu\":-25");
    sbx_client *c = client_via(px);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_cpu(o, 2.5, NULL), 0);
    sbx_error *err = create_fails(c, o);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT,
                    "create the sandbox (cpu 2.5): cpu: Input should be greater than 0 "
                    "(HTTP 422)", NULL);
    assert_ctx(err, "http_status", "422");
    assert_ctx(err, "field", "cpu");
    cr_assert_eq(proxy_requests(px), 1);
    sbx_error_free(err);
    sbx_options_free(o);
    sbx_client_free(c);
}

Test(remote, provider_failure_is_its_payload_502)
{
    /* docker is enabled at the server, and has no engine there. */
    sbx_client *c = client_with("{\"backend\":\"docker\"}");
    int before = count_sandboxes("failed");
    sbx_error *err = create_fails(c, NULL);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CONNECTION, "code %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    tu_assert_error(err, SBX_ERROR_CONNECTION,
                    "create the sandbox: Provider connection failed. (HTTP 502, backend docker)",
                    NULL);
    assert_ctx(err, "http_status", "502");
    assert_ctx(err, "remote_code", "connection");
    assert_ctx(err, "upstream_backend", "docker");
    assert_ctx(err, "upstream_op", "create");
    /* Answers are never re-sent: one failed record. */
    cr_assert_eq(count_sandboxes("failed"), before + 1);
    sbx_error_free(err);
    sbx_client_free(c);
}

Test(remote, provider_timeout_is_its_payload_504)
{
    /* e2b is enabled at the server, its fake answering every create 504. */
    sbx_client *c = client_with("{\"backend\":\"e2b\"}");
    sbx_error *err = create_fails(c, NULL);
    tu_assert_error(err, SBX_ERROR_TIMEOUT,
                    "create the sandbox: Provider request timed out. (HTTP 504, backend e2b)",
                    NULL);
    assert_ctx(err, "http_status", "504");
    assert_ctx(err, "remote_code", "timeout");
    assert_ctx(err, "upstream_backend", "e2b");
    assert_ctx(err, "upstream_op", "create");
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    sbx_error_free(err);
    sbx_client_free(c);
}

/* Runs @sql on the server's own store (SBX_TEST_CP_DB: its SQLite file, or
 * the postgresql:// URL of its database). */
static void cp_db(const char *sql)
{
    const char *path = getenv("SBX_TEST_CP_DB");
    cr_assert_not_null(path, "run by tests/remote.sh");
    if (!strncmp(path, "postgres", 8)) {
#ifndef SBX_TEST_HAVE_LIBPQ
        cr_assert_fail("a PostgreSQL store, and this build has no libpq");
#else
        PGconn *c = PQconnectdb(path);
        cr_assert(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
        PGresult *r = PQexec(c, sql);
        cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
        PQclear(r);
        PQfinish(c);
        return;
#endif
    }
    sqlite3 *db = NULL;
    char *msg = NULL;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 30000);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql,
                 msg ? msg : "");
    sqlite3_close(db);
}

/* Makes the server's store refuse a row inserted into @table when @cond
 * (SQL on NEW) holds: a trigger @name, in the store's own dialect. */
static void cp_db_refuse_insert(const char *name, const char *table, const char *cond)
{
    char *sql;
    if (!strncmp(getenv("SBX_TEST_CP_DB") ? getenv("SBX_TEST_CP_DB") : "", "postgres", 8))
        sql = tu_strdup_printf("CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$"
                               " BEGIN IF %s THEN RAISE EXCEPTION 'test: refused'; END IF;"
                               " RETURN NEW; END $$;"
                               " CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW"
                               " EXECUTE FUNCTION %s();", name, cond, name, table, name);
    else
        sql = tu_strdup_printf("CREATE TRIGGER %s BEFORE INSERT ON %s WHEN %s"
                               " BEGIN SELECT RAISE(ABORT, 'test: refused'); END;",
                               name, table, cond);
    cp_db(sql);
    free(sql);
}

static void cp_db_drop_trigger(const char *name, const char *table)
{
    char *sql;
    if (!strncmp(getenv("SBX_TEST_CP_DB") ? getenv("SBX_TEST_CP_DB") : "", "postgres", 8))
        sql = tu_strdup_printf("DROP TRIGGER %s ON %s; DROP FUNCTION %s();", name, table, name);
    else
        sql = tu_strdup_printf("DROP TRIGGER %s;", name);
    cp_db(sql);
    free(sql);
}

Test(remote, server_500_on_create_is_connection_with_outcome_unknown)
{
    /* The server cannot record the create (its INSERT fails): 500
     * "Internal control-plane error.", a server fault whose effect the
     * client cannot know. No re-sends, so the one answer is the error. */
    cp_db_refuse_insert("test_fail_create", "sandboxes",
                        "NEW.idempotency_key = 'sbx-test-500-create'");
    sbx_client *c = client_with("{\"retries\":0}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(
                     o, "{\"idempotency_key\":\"sbx-test-500-create\"}", NULL), 0);
    int before = count_sandboxes(NULL);
    sbx_error *err = create_fails(c, o);
    cp_db_drop_trigger("test_fail_create", "sandboxes");
    tu_assert_error(err, SBX_ERROR_CONNECTION,
                    "create the sandbox: Internal control-plane error. (HTTP 500)", NULL);
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    assert_ctx(err, "http_status", "500");
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    cr_assert_eq(count_sandboxes(NULL), before);
    sbx_error_free(err);
    sbx_options_free(o);
    sbx_client_free(c);
}

Test(remote, server_500_on_execute_is_connection_with_outcome_unknown)
{
    /* The server cannot claim the execution (its INSERT into executions
     * fails for this sandbox): 500 on every send of the request. */
    g_sb = tu_create(g_client, NULL);
    char *cond = tu_strdup_printf("NEW.sandbox_id = '%s'", sbx_sandbox_get0_id(g_sb));
    cp_db_refuse_insert("test_fail_execute", "executions", cond);
    free(cond);
    sbx_error *err = NULL;
    const char *argv[] = { "true", NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = argv;
    sbx_result *res = sbx_sandbox_execute_command(g_sb, &rq, &err);
    cp_db_drop_trigger("test_fail_execute", "executions");
    cr_assert_null(res);
    tu_assert_error(err, SBX_ERROR_CONNECTION,
                    "run the command: Internal control-plane error. (HTTP 500)", NULL);
    assert_ctx(err, "http_status", "500");
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    sbx_error_free(err);
    /* The server is well again: the sandbox runs commands. */
    sbx_result *r = tu_sh(g_sb, "echo fine", 10);
    tu_assert_stdout(r, "fine\n");
    sbx_result_free(r);
}

Test(remote, server_down_is_connection)
{
    /* A port nothing listens on. */
    char *cfg = tu_strdup_printf("{\"url\":\"http://127.0.0.1:%u\",\"retries\":1}",
                                 tu_free_port());
    sbx_client *c = client_with(cfg);
    sbx_error *err = create_fails(c, NULL);
    tu_assert_error(err, SBX_ERROR_CONNECTION, "create the sandbox on 127.0.0.1:", NULL);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    sbx_error_free(err);
    sbx_client_free(c);
    free(cfg);
}

Test(remote, missing_url_and_key_are_configuration)
{
    unsetenv("BESPOKE_SANDBOX_URL");
    sbx_client *c = client_with(NULL);
    sbx_error *err = create_fails(c, NULL);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "no control-plane URL (set the client option "
                    "url or BESPOKE_SANDBOX_URL)", NULL);
    sbx_error_free(err);
    /* The probe says so too (`sbx backends`: unavailable, and why). */
    uint64_t caps = 7;
    err = NULL;
    cr_assert_eq(sbx_client_probe(c, &caps, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "remote backend: no control-plane URL (set the "
                    "client option url or BESPOKE_SANDBOX_URL)", NULL);
    cr_assert_str_eq(sbx_error_get0_op(err), "probe");
    sbx_error_free(err);
    sbx_client_free(c);
    /* A URL without a product key: the key is named. */
    unsetenv("BESPOKE_SANDBOX_KEY");
    c = client_with("{\"url\":\"http://127.0.0.1:9\"}");
    err = NULL;
    cr_assert_eq(sbx_client_probe(c, &caps, &err), -1);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "remote backend: no product key (set the client "
                    "option api_key or BESPOKE_SANDBOX_KEY)", NULL);
    sbx_error_free(err);
    sbx_client_free(c);
    /* Both: available, nothing asked of the server. */
    c = client_with("{\"url\":\"http://127.0.0.1:9\",\"api_key\":\"bsk_live_x\"}");
    cr_assert_eq(sbx_client_probe(c, &caps, NULL), 0);
    cr_assert_neq(caps, 0);
    sbx_client_free(c);
}

Test(remote, exec_after_destroy_is_not_found)
{
    g_sb = tu_create(g_client, NULL);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_error *err = NULL;
    const char *argv[] = { "true", NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = argv;
    cr_assert_null(sbx_sandbox_execute_command(g_sb, &rq, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND, "%s",
                 sbx_error_get0_message(err));
    sbx_error_free(err);
}

/* ---------------------------------------------------------- exec's form */

/* Runs argv {"sh", "-c", SCRIPT} with the variable V=@v and the cwd @cwd on
 * @sb: the result. */
static sbx_result *run_in(sbx_sandbox *sb, const char *script, const char *v, const char *cwd,
                          sbx_error **err)
{
    const char *argv[] = { "sh", "-c", script, NULL };
    char *kv = tu_strdup_printf("V=%s", v);
    const char *env[] = { kv, NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = argv;
    rq.env = env;
    rq.cwd = cwd;
    rq.timeout_secs = 20;
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, err);
    free(kv);
    return r;
}

/* Makes "/w d" in @sb and runs a command there with V set: its cwd and V
 * arrive as given. */
static void env_and_cwd_arrive(sbx_sandbox *sb)
{
    sbx_result *m = tu_sh(sb, "mkdir -p \"$SANDBOX_ROOT/w d\"", 20);
    tu_assert_exit(m, 0);
    sbx_result_free(m);
    sbx_error *err = NULL;
    sbx_result *r = run_in(sb, "printf '%s|%s' \"$V\" \"${PWD##*/}\"", "a 'b' $c", "/w d", &err);
    cr_assert_not_null(r, "%s", err ? sbx_error_get0_message(err) : "");
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "a 'b' $c|w d");
    sbx_result_free(r);
}

/* The body of the last request @px matched, as JSON (json_object_put()). */
static json_object *proxy_last_body(proxy *px)
{
    char *last = proxy_last(px);
    const char *body = strstr(last, "\r\n\r\n");
    cr_assert_not_null(body, "request %s", last);
    json_object *j = json_tokener_parse(body + 4);
    cr_assert_not_null(j, "body %s", body + 4);
    free(last);
    return j;
}

/* A missing cwd is not_found naming it, and a cwd that is a file
 * invalid_argument naming it, as on local. */
static void cwd_refusals_name_it(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    sbx_result *r = run_in(sb, "true", "x", "/no/such/dir", &err);
    cr_assert_null(r);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/no/such/dir", NULL);
    assert_ctx(err, "path", "/no/such/dir");
    sbx_error_free(err);
    sbx_result *m = tu_sh(sb, "echo f > \"$SANDBOX_ROOT/f\"", 20);
    tu_assert_exit(m, 0);
    sbx_result_free(m);
    err = NULL;
    r = run_in(sb, "true", "x", "/f", &err);
    cr_assert_null(r);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT,
                    "the working directory /f is not a directory in the sandbox", NULL);
    assert_ctx(err, "path", "/f");
    sbx_error_free(err);
}

/* sbx-server shows a record's idempotency_key: its commands go as
 * execute's own fields (argv, env with the command's mark, cwd), no shell
 * of the plugin's around them. */
Test(remote, commands_go_as_executes_own_fields_where_the_server_takes_them)
{
    proxy *px = proxy_start("POST /v1/sandboxes/", 0, NULL, NULL);
    sbx_client *c = client_via(px);
    g_sb = tu_create(c, NULL);
    env_and_cwd_arrive(g_sb);
    sbx_error *err = NULL;
    sbx_result *r;
    json_object *j = proxy_last_body(px);
    cr_assert_str_eq(tu_json_str(j, "command"), "sh");
    json_object *args = NULL, *env = NULL;
    cr_assert(json_object_object_get_ex(j, "args", &args));
    cr_assert_eq(json_object_array_length(args), 2);
    cr_assert_str_eq(json_object_get_string(json_object_array_get_idx(args, 0)), "-c");
    cr_assert_str_eq(tu_json_str(j, "cwd"), "/w d");
    cr_assert(json_object_object_get_ex(j, "env", &env));
    cr_assert_str_eq(tu_json_str(env, "V"), "a 'b' $c");
    cr_assert_eq(json_object_object_length(env), 2, "V and the command's mark: %s",
                 json_object_to_json_string(env));
    json_object_put(j);
    /* Stdin as stdin_b64 when it ends within 4 MiB, byte-exact; a longer
     * one goes through the script. */
    for (int big = 0; big < 2; big++) {
        size_t n = big ? 4 * 1048576 + 1 : 3;
        unsigned char *data = malloc(n);
        for (size_t i = 0; i < n; i++)
            data[i] = (unsigned char)(i * 7 + 255);
        const char *argv[] = { "sha256sum", NULL };
        sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
        rq.argv = argv;
        rq.stdin_data = data;
        rq.stdin_len = n;
        rq.timeout_secs = 60;
        r = sbx_sandbox_execute_command(g_sb, &rq, &err);
        cr_assert_not_null(r, "%s", err ? sbx_error_get0_message(err) : "");
        char hex[65], *want = NULL;
        tu_sha256_hex(data, n, hex);
        want = tu_strdup_printf("%s  -\n", hex);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, want);
        sbx_result_free(r);
        free(want);
        j = proxy_last_body(px);
        if (big) {
            cr_assert_str_eq(tu_json_str(j, "command"), "/bin/sh");
        } else {
            cr_assert_str_eq(tu_json_str(j, "command"), "sha256sum");
            cr_assert_str_eq(tu_json_str(j, "stdin_b64"), "/wYN");
        }
        json_object_put(j);
        free(data);
    }
    /* A missing cwd and a file, as through the script; one the upstream
     * backend refuses although it is a directory (leading out of its
     * root): invalid_argument naming it too, not the server's bare
     * "Provider operation failed." */
    cwd_refusals_name_it(g_sb);
    r = run_in(g_sb, "true", "x", "/w d/../..", &err);
    cr_assert_null(r);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT,
                    "the control plane's backend refused the working directory /w d/../.. "
                    "(invalid_argument)", NULL);
    assert_ctx(err, "path", "/w d/../..");
    sbx_error_free(err);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_client_free(c);
}

/* A server that does not show the key (a reference server, which drops the
 * fields it does not know) gets every command as the portable script: env,
 * cwd, a missing cwd and a timeout behave the same. */
Test(remote, a_server_without_the_fields_gets_the_portable_script)
{
    proxy *px = proxy_start("POST /v1/sandboxes/", 0, NULL, NULL);
    px->ans_from = "\"idempotency_key\"";
    px->ans_to = "\"idempotency_kex\"";
    sbx_client *c = client_via(px);
    g_sb = tu_create(c, NULL);
    env_and_cwd_arrive(g_sb);
    sbx_error *err = NULL;
    sbx_result *r;
    json_object *j = proxy_last_body(px);
    cr_assert_str_eq(tu_json_str(j, "command"), "/bin/sh");
    cr_assert(!json_object_object_get_ex(j, "env", NULL));
    cr_assert(!json_object_object_get_ex(j, "cwd", NULL));
    json_object_put(j);
    cwd_refusals_name_it(g_sb);
    /* A timeout ends the command through its mark. */
    double t0 = tu_now();
    r = tu_sh(g_sb, "sleep 30", 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(sbx_result_is_timed_out(r));
    sbx_result_free(r);
    cr_assert_lt(tu_now() - t0, 10.0);
    /* A shell command killed through its mark ends with the signal, its
     * shell included, as on local (no "after" from a shell left running). */
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "sleep 30; echo after";
    rq.timeout_secs = 60;
    sbx_process *p = sbx_sandbox_start_process(g_sb, &rq, &err);
    cr_assert_not_null(p, "%s", err ? sbx_error_get0_message(err) : "");
    usleep(500000);
    t0 = tu_now();
    cr_assert_eq(sbx_process_kill(p, SIGKILL, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    int ec = -1;
    r = NULL;
    cr_assert_eq(sbx_process_wait(p, 20, &ec, &r, &err), 1);
    cr_assert_eq(ec, 137);
    tu_assert_stdout(r, "");
    cr_assert_lt(tu_now() - t0, 10.0);
    sbx_result_free(r);
    sbx_process_free(p);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_client_free(c);
}

/* A command started with its stdin open is sent when its stdin ends (its
 * bytes go whole, in the execute or first into the sandbox): killed or
 * timed out before that, it ends at once as local's does, and never runs,
 * through the fields and through the script alike. */
Test(remote, a_command_ended_before_its_stdin_closed_never_runs)
{
    for (int script = 0; script < 2; script++) {
        proxy *px = proxy_start("POST /v1/sandboxes/", 0, NULL, NULL);
        if (script) {
            px->ans_from = "\"idempotency_key\"";
            px->ans_to = "\"idempotency_kex\"";
        }
        sbx_client *c = client_via(px);
        g_sb = tu_create(c, NULL);
        const char *argv[] = { "sh", "-c", "cat >/dev/null; echo ran >> \"$SANDBOX_ROOT/ran\"",
                               NULL };
        sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
        rq.argv = argv;
        rq.flags = SBX_EXEC_STDIN_OPEN;
        rq.timeout_secs = 60;
        sbx_error *err = NULL;
        sbx_process *p = sbx_sandbox_start_process(g_sb, &rq, &err);
        cr_assert_not_null(p, "%s", err ? sbx_error_get0_message(err) : "");
        cr_assert_eq(sbx_process_write_stdin(p, "a\n", 2, &err), 0);
        double t0 = tu_now();
        cr_assert_eq(sbx_process_kill(p, SIGKILL, &err), 0, "%s",
                     err ? sbx_error_get0_message(err) : "");
        int ec = -1;
        cr_assert_eq(sbx_process_wait(p, 10, &ec, NULL, &err), 1, "script %d: still waiting",
                     script);
        cr_assert_eq(ec, 137);
        cr_assert_lt(tu_now() - t0, 5.0);
        cr_assert_eq(sbx_process_close_stdin(p, &err), 0);
        cr_assert_eq(sbx_process_wait(p, 1, &ec, NULL, &err), 1);
        cr_assert_eq(ec, 137);
        sbx_process_free(p);
        /* Timed out with its stdin never closed: 124 at its timeout. */
        rq.timeout_secs = 1;
        p = sbx_sandbox_start_process(g_sb, &rq, &err);
        cr_assert_not_null(p, "%s", err ? sbx_error_get0_message(err) : "");
        t0 = tu_now();
        sbx_result *r = NULL;
        cr_assert_eq(sbx_process_wait(p, 15, &ec, &r, &err), 1, "script %d: no timeout",
                     script);
        cr_assert_eq(ec, 124);
        cr_assert(sbx_result_is_timed_out(r));
        cr_assert_lt(tu_now() - t0, 8.0);
        sbx_result_free(r);
        sbx_process_free(p);
        usleep(500000);
        r = tu_sh(g_sb, "test -e \"$SANDBOX_ROOT/ran\"; echo $?", 20);
        tu_assert_exit(r, 0);
        tu_assert_stdout(r, "1\n");
        sbx_result_free(r);
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
        sbx_client_free(c);
    }
}

/* ---------------------------------------------------------- retries */

Test(remote, lost_create_answer_is_resent_with_the_key_and_makes_one_sandbox)
{
    int before = count_sandboxes(NULL);
    proxy *px = proxy_start("POST /v1/sandboxes ", 1, NULL, NULL);
    sbx_client *c = client_via(px);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
    cr_assert_not_null(sb, "create: %s", err ? sbx_error_get0_message(err) : "");
    /* Sent twice (the first answer lost), one sandbox made. */
    cr_assert_eq(proxy_requests(px), 2);
    cr_assert_eq(count_sandboxes(NULL), before + 1);
    sbx_result *r = tu_sh(sb, "echo once", 10);
    tu_assert_stdout(r, "once\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

Test(remote, create_with_unknown_outcome_leaves_nothing)
{
    /* No re-sends: the lost answer leaves the outcome unknown; the reaper
     * sends the create again with its key and deletes what it gets. */
    int running = count_sandboxes("running"), destroyed = count_sandboxes("destroyed");
    proxy *px = proxy_start("POST /v1/sandboxes ", 1, NULL, NULL);
    char *cfg = tu_strdup_printf("{\"url\":\"http://127.0.0.1:%d\",\"retries\":0}", px->port);
    sbx_client *c = client_with(cfg);
    sbx_error *err = create_fails(c, NULL);
    tu_assert_error(err, SBX_ERROR_CONNECTION, "create the sandbox on 127.0.0.1:", NULL);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    sbx_error_free(err);
    /* The server made one, and it is destroyed already. */
    cr_assert_geq(proxy_requests(px), 2);
    cr_assert_eq(count_sandboxes("destroyed"), destroyed + 1);
    cr_assert_eq(count_sandboxes("running"), running);
    sbx_client_free(c);
    free(cfg);
}

Test(remote, lost_execute_answer_is_resent_and_runs_once)
{
    proxy *px = proxy_start("POST /v1/sandboxes/", 0, NULL, NULL);
    sbx_client *c = client_via(px);
    g_sb = tu_create(c, NULL);
    pthread_mutex_lock(&px->lock);
    px->match = "POST /v1/sandboxes/";
    px->requests = 0;
    px->drop = 1;
    pthread_mutex_unlock(&px->lock);
    sbx_result *r = tu_sh(g_sb, "echo x >> \"$SANDBOX_ROOT/tmp-runs\"; wc -l < "
                                "\"$SANDBOX_ROOT/tmp-runs\"", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    cr_assert_eq(proxy_requests(px), 2);
    r = tu_sh(g_sb, "wc -l < \"$SANDBOX_ROOT/tmp-runs\"", 20);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_client_free(c);
}

Test(remote, resent_execute_waits_out_the_first_and_runs_once)
{
    proxy *px = proxy_start("POST /v1/sandboxes/", 0, NULL, NULL);
    sbx_client *c = client_via(px);
    g_sb = tu_create(c, NULL);
    pthread_mutex_lock(&px->lock);
    px->requests = 0;
    px->drop = 1;
    px->early = 1;
    pthread_mutex_unlock(&px->lock);
    /* The first is cut before its answer; the re-sent one finds it running
     * (409 in progress) and asks again until the stored answer comes. */
    sbx_result *r = tu_sh(g_sb, "sleep 3; echo x >> \"$SANDBOX_ROOT/tmp-runs\"; "
                                "wc -l < \"$SANDBOX_ROOT/tmp-runs\"", 20);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    cr_assert_geq(proxy_requests(px), 3, "%d requests", proxy_requests(px));
    r = tu_sh(g_sb, "wc -l < \"$SANDBOX_ROOT/tmp-runs\"", 20);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_client_free(c);
}

Test(remote, failed_execute_and_its_replay_are_the_providers_payload)
{
    /* A 1 s lifetime, over: the provider call fails (502 and its payload);
     * with that answer lost, the re-sent request gets the stored payload
     * as a 409 string, mapped the same. */
    proxy *px = proxy_start("POST /v1/sandboxes/", 0, NULL, NULL);
    sbx_client *c = client_via(px);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 1, NULL), 0);
    g_sb = tu_create(c, o);
    sbx_options_free(o);
    usleep(1600000);
    sbx_error *first = NULL;
    const char *argv[] = { "true", NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.argv = argv;
    cr_assert_null(sbx_sandbox_execute_command(g_sb, &rq, &first));
    cr_assert_not_null(first);
    assert_ctx(first, "http_status", "502");
    assert_ctx(first, "upstream_backend", "local");
    assert_ctx(first, "upstream_op", "execute");
    const char *code = sbx_error_get0_context(first, "remote_code");
    cr_assert_not_null(code);
    pthread_mutex_lock(&px->lock);
    px->requests = 0;
    px->drop = 1;
    pthread_mutex_unlock(&px->lock);
    sbx_error *again = NULL;
    cr_assert_null(sbx_sandbox_execute_command(g_sb, &rq, &again));
    cr_assert_not_null(again);
    /* Its own request: a 502 again, lost, then the replay's 409. */
    cr_assert_eq(proxy_requests(px), 2);
    assert_ctx(again, "http_status", "409");
    assert_ctx(again, "remote_code", code);
    assert_ctx(again, "upstream_backend", "local");
    assert_ctx(again, "upstream_op", "execute");
    cr_assert_eq(sbx_error_get_code(again), sbx_error_get_code(first), "%s / %s",
                 sbx_error_get0_message(again), sbx_error_get0_message(first));
    cr_assert_neq(sbx_error_get_code(again), SBX_ERROR_UNKNOWN);
    sbx_error_free(first);
    sbx_error_free(again);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    sbx_client_free(c);
}

/* ---------------------------------------------------------- owned sandboxes */

typedef struct owned_seen {
    int n;
    char id[8][128];
    char token[8][64];
    double created_at[8], expires_at[8];
} owned_seen;

static int on_owned(const sbx_owned_sandbox *s, void *ud)
{
    owned_seen *o = ud;
    if (o->n < 8) {
        snprintf(o->id[o->n], sizeof o->id[0], "%s", s->id);
        snprintf(o->token[o->n], sizeof o->token[0], "%s", s->create_token);
        o->created_at[o->n] = s->created_at;
        o->expires_at[o->n] = s->expires_at;
    }
    o->n++;
    return 0;
}

/* The index of @id among @o's, or -1. */
static int owned_index(const owned_seen *o, const char *id)
{
    for (int i = 0; i < o->n && i < 8; i++)
        if (strcmp(o->id[i], id) == 0)
            return i;
    return -1;
}

/* The server's status of sandbox @id ("" when 404). */
static char *status_of(const char *id)
{
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    char *path = tu_strdup_printf("/v1/sandboxes/%s", id);
    json_object *j = NULL;
    long st = cp_http("GET", path, auth, NULL, &j);
    char *out = strdup(st == 200 ? tu_json_str(j, "status") : "");
    json_object_put(j);
    free(path);
    free(auth);
    return out;
}

Test(remote, list_owned_reports_creates_by_token_and_destroy_by_id_refuses_others)
{
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 600, NULL), 0);
    double t0 = (double)time(NULL);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    const char *id = sbx_sandbox_get0_id(g_sb);
    /* Another client's sandbox (no key) and one made with the caller's key. */
    json_object *j = NULL;
    cr_assert_eq(cp_http("POST", "/v1/sandboxes", auth, "{\"backend\":\"local\"}", &j), 201);
    char *other = strdup(tu_json_str(j, "id"));
    json_object_put(j);
    o = sbx_options_new();
    char *mine_key = tu_strdup_printf("{\"idempotency_key\":\"mine-%d-%ld\"}", (int)getpid(),
                                      (long)time(NULL));
    cr_assert_eq(sbx_options_set_backend_options(o, mine_key, NULL), 0);
    free(mine_key);
    sbx_error *err = NULL;
    sbx_sandbox *mine = sbx_sandbox_create(g_client, o, &err);
    cr_assert_not_null(mine, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_options_free(o);

    owned_seen seen = { 0 };
    int n = sbx_client_list_owned(g_client, on_owned, &seen, &err);
    cr_assert_geq(n, 1, "list_owned: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(n, seen.n);
    int i = owned_index(&seen, id);
    cr_assert_geq(i, 0, "%s not listed", id);
    cr_assert_eq(strncmp(seen.token[i], "sbx-", 4), 0);
    cr_assert_eq(strlen(seen.token[i]), 36);
    cr_assert(seen.created_at[i] >= t0 - 2 && seen.created_at[i] <= t0 + 60, "created_at %f",
              seen.created_at[i]);
    cr_assert(seen.expires_at[i] >= seen.created_at[i] + 599.9
              && seen.expires_at[i] <= seen.created_at[i] + 600.1, "expires_at %f",
              seen.expires_at[i]);
    cr_assert_eq(owned_index(&seen, other), -1);
    cr_assert_eq(owned_index(&seen, sbx_sandbox_get0_id(mine)), -1);

    /* What the library did not make is refused, and left running. */
    cr_assert_eq(sbx_client_destroy_by_id(g_client, other, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, other, "not made by libsbx", NULL);
    sbx_error_free(err);
    err = NULL;
    char *st = status_of(other);
    cr_assert_str_eq(st, "running");
    free(st);
    /* Ours is destroyed; again, and an id the server never had, are success. */
    cr_assert_eq(sbx_client_destroy_by_id(g_client, id, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    st = status_of(id);
    cr_assert_str_eq(st, "destroyed");
    free(st);
    cr_assert_eq(sbx_client_destroy_by_id(g_client, id, &err), 0);
    cr_assert_eq(sbx_client_destroy_by_id(g_client, "sbx_00000000000000000000000000000000", &err),
                 0);
    seen.n = 0;
    cr_assert_geq(sbx_client_list_owned(g_client, on_owned, &seen, &err), 0);
    cr_assert_eq(owned_index(&seen, id), -1);

    char *path = tu_strdup_printf("/v1/sandboxes/%s", other);
    cr_assert_eq(cp_http("DELETE", path, auth, NULL, NULL), 200);
    free(path);
    sbx_sandbox_destroy(mine, NULL);
    sbx_sandbox_free(mine);
    free(other);
    free(auth);
}

typedef struct gc_seen {
    int n;
    char id[128];
    char token[64];
    sbx_gc_reason reason;
    int reaped;
} gc_seen;

static int on_gc(const sbx_gc_item *it, void *ud)
{
    gc_seen *g = ud;
    if (strcmp(it->backend, "remote") == 0 && it->reason != SBX_GC_LIST_FAILED) {
        g->n++;
        snprintf(g->id, sizeof g->id, "%s", it->id);
        snprintf(g->token, sizeof g->token, "%s", it->create_token);
        g->reason = it->reason;
        g->reaped = it->reaped;
    }
    return 0;
}

Test(remote, gc_reaps_a_create_whose_answer_was_lost)
{
    /* A record of this test's own (its store id in the create token). */
    tu_dirs d;
    tu_dirs_make(&d, "remote-gc", 0);
    int running = count_sandboxes("running");
    /* Every answer to a create is lost, the reaper's re-sends too. */
    proxy *px = proxy_start("POST /v1/sandboxes ", 1000, NULL, NULL);
    char *cfg = tu_strdup_printf("{\"url\":\"http://127.0.0.1:%d\",\"retries\":0}", px->port);
    sbx_client *c = client_with(cfg);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_timeout_secs(o, 1, NULL), 0);
    sbx_error *err = create_fails(c, o);
    cr_assert_eq(sbx_error_get_outcome(err), SBX_ERROR_OUTCOME_UNKNOWN);
    sbx_error_free(err);
    sbx_options_free(o);
    sbx_client_free(c);
    /* The server made it, and nothing on this side knows its id. */
    cr_assert_eq(count_sandboxes("running"), running + 1);
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    json_object *j = NULL;
    cr_assert_eq(cp_http("GET", "/v1/sandboxes", auth, NULL, &j), 200);
    json_object *newest = json_object_array_get_idx(j, 0);
    char *id = strdup(tu_json_str(newest, "id"));
    char *token = strdup(tu_json_str(newest, "idempotency_key"));
    cr_assert_str_eq(tu_json_str(newest, "status"), "running");
    json_object_put(j);
    usleep(1300000);  /* its lifetime ends */
    gc_seen g = { 0 };
    cr_assert_geq(sbx_gc(0, on_gc, &g, &err), 1, "gc: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(g.n, 1);
    cr_assert_eq(g.reason, SBX_GC_EXPIRED);
    cr_assert_eq(g.reaped, 1);
    cr_assert_str_eq(g.token, token);
    char *st = status_of(id);
    cr_assert_str_eq(st, "destroyed");
    free(st);
    cr_assert_eq(count_sandboxes("running"), running);
    /* Nothing left to reap. */
    g.n = 0;
    cr_assert_geq(sbx_gc(0, on_gc, &g, &err), 0);
    cr_assert_eq(g.n, 0);
    free(id);
    free(token);
    free(auth);
    free(cfg);
    tu_dirs_free(&d);
}

/* ---------------------------------------------------------- state, output */

Test(remote, session_state_holds_the_id_and_url_and_no_key)
{
    g_sb = tu_create(g_client, NULL);
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(g_sb, &err);
    cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_null(strstr(state, getenv("BESPOKE_SANDBOX_KEY")), "the key is in the state");
    json_object *j = json_tokener_parse(state), *data = NULL;
    cr_assert(json_object_object_get_ex(j, "data", &data));
    cr_assert_str_eq(tu_json_str(data, "sandbox_id"), sbx_sandbox_get0_id(g_sb));
    cr_assert_str_eq(tu_json_str(data, "url"), getenv("BESPOKE_SANDBOX_URL"));
    cr_assert_str_eq(tu_json_str(data, "backend"), "local");
    json_object_put(j);
    /* Another client, without a URL of its own, resumes from it. */
    unsetenv("BESPOKE_SANDBOX_URL");
    sbx_client *c = client_with(NULL);
    sbx_sandbox *sb = sbx_sandbox_resume(c, state, &err);
    cr_assert_not_null(sb, "resume: %s", err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb, "echo resumed", 10);
    tu_assert_stdout(r, "resumed\n");
    sbx_result_free(r);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    free(state);
}

Test(remote, case_07_non_utf8_output_through_the_control_plane)
{
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "printf 'ok\\377\\376\\n'; printf 'e\\200\\n' >&2", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, "ok\xff\xfe\n", 5);
    tu_assert_stderr_bytes(r, "e\x80\n", 3);
    sbx_result_free(r);
}

/* ---------------------------------------------------------- the CLI */

/* Runs $SBX_CLI @args (stdin /dev/null) with SBX_STATE_DIR=@state, the
 * key from the environment, and without SBX_BACKEND and
 * BESPOKE_SANDBOX_BACKEND (the upstream backend is the CLI's: -b, else
 * local); BESPOKE_SANDBOX_URL is kept when @keep_url (the variables name
 * the server), else unset (--remote is what names it): its exit status;
 * its stdout and stderr in *@out and *@err (new strings). */
static int cli_run(const char *state, const char *const *args, int keep_url, char **out,
                   char **err)
{
    char *dir = tu_mkdtemp("sbx-remote-cli");
    char *o = tu_strdup_printf("%s/out", dir), *e = tu_strdup_printf("%s/err", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        size_t n = 0;
        while (args[n])
            n++;
        char **argv = calloc(n + 2, sizeof *argv);
        argv[0] = (char *)getenv("SBX_CLI");
        for (size_t i = 0; i < n; i++)
            argv[i + 1] = (char *)args[i];
        int in = open("/dev/null", O_RDONLY);
        int fo = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || fo < 0 || fe < 0 || dup2(in, 0) < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
            _exit(126);
        setenv("SBX_STATE_DIR", state, 1);
        if (!keep_url)
            unsetenv("BESPOKE_SANDBOX_URL");
        unsetenv("BESPOKE_SANDBOX_BACKEND");
        unsetenv("SBX_BACKEND");
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    size_t len;
    FILE *f = fopen(o, "r");
    *out = calloc(1, 1 << 20);
    len = fread(*out, 1, (1 << 20) - 1, f);
    (*out)[len] = '\0';
    fclose(f);
    f = fopen(e, "r");
    *err = calloc(1, 1 << 20);
    len = fread(*err, 1, (1 << 20) - 1, f);
    (*err)[len] = '\0';
    fclose(f);
    unlink(o);
    unlink(e);
    rmdir(dir);
    free(o);
    free(e);
    free(dir);
    cr_assert(WIFEXITED(st), "sbx ended by a signal");
    return WEXITSTATUS(st);
}

/* sbx with --remote naming the server (in @args). */
static int cli(const char *state, const char *const *args, char **out, char **err)
{
    return cli_run(state, args, 0, out, err);
}

/* sbx with the server named by BESPOKE_SANDBOX_URL and no --remote. */
static int cli_env(const char *state, const char *const *args, char **out, char **err)
{
    return cli_run(state, args, 1, out, err);
}

/* The status of the server's sandbox @id. */
static char *server_status(const char *id)
{
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    char *path = tu_strdup_printf("/v1/sandboxes/%s", id);
    json_object *j = NULL;
    cr_assert_eq(cp_http("GET", path, auth, NULL, &j), 200, "GET %s", path);
    char *s = strdup(tu_json_str(j, "status"));
    json_object_put(j);
    free(auth);
    free(path);
    return s;
}

Test(remote, cli_remote_run_streams_and_destroys)
{
    char *state = tu_mkdtemp("sbx-remote-state");
    const char *url = getenv("BESPOKE_SANDBOX_URL");
    int before = count_sandboxes("destroyed");
    const char *args[] = { "--remote", url, "run", "--", "sh", "-c",
                           "echo hi; echo err >&2; exit 3", NULL };
    char *out, *err;
    cr_assert_eq(cli(state, args, &out, &err), 3, "stderr: %s", err);
    cr_assert_str_eq(out, "hi\n");
    cr_assert_str_eq(err, "err\n");
    /* Made on the server and destroyed there. */
    cr_assert_eq(count_sandboxes("destroyed"), before + 1);
    free(out);
    free(err);
    tu_rmtree(state);
    free(state);
}

Test(remote, cli_remote_create_exec_ps_rm)
{
    char *state = tu_mkdtemp("sbx-remote-state");
    const char *url = getenv("BESPOKE_SANDBOX_URL");
    char *out, *err;
    const char *create[] = { "--remote", url, "create", "-b", "local", NULL };
    cr_assert_eq(cli(state, create, &out, &err), 0, "stderr: %s", err);
    cr_assert_eq(strncmp(out, "sbx_", 4), 0, "id %s", out);
    cr_assert_eq(strlen(out), 37, "id %s", out);  /* sbx_ + 32 hex + \n */
    char *id = strndup(out, 36);
    free(out);
    free(err);
    char *s = server_status(id);
    cr_assert_str_eq(s, "running");
    free(s);

    /* exec reaches it through its record; the URL from --remote. */
    const char *exec[] = { "--remote", url, "exec", id, "--", "sh", "-c",
                           "printf 'a\\377b'; exit 4", NULL };
    cr_assert_eq(cli(state, exec, &out, &err), 4, "stderr: %s", err);
    cr_assert_eq(memcmp(out, "a\377b", 4), 0);
    free(out);
    free(err);

    const char *ps[] = { "--remote", url, "ps", "--json", NULL };
    cr_assert_eq(cli(state, ps, &out, &err), 0, "stderr: %s", err);
    json_object *j = json_tokener_parse(out);
    cr_assert(json_object_is_type(j, json_type_array), "ps --json: %s", out);
    cr_assert_eq(json_object_array_length(j), 1);
    json_object *row = json_object_array_get_idx(j, 0);
    cr_assert_str_eq(tu_json_str(row, "id"), id);
    cr_assert_str_eq(tu_json_str(row, "backend"), "remote");
    cr_assert_str_eq(tu_json_str(row, "state"), "running");
    json_object_put(j);
    free(out);
    free(err);

    const char *rm[] = { "--remote", url, "rm", id, NULL };
    cr_assert_eq(cli(state, rm, &out, &err), 0, "stderr: %s", err);
    free(out);
    free(err);
    s = server_status(id);
    cr_assert_str_eq(s, "destroyed");
    free(s);
    const char *psa[] = { "--remote", url, "ps", "-a", "--json", NULL };
    cr_assert_eq(cli(state, psa, &out, &err), 0, "stderr: %s", err);
    cr_assert_str_eq(out, "[\n]\n");
    free(out);
    free(err);
    free(id);
    tu_rmtree(state);
    free(state);
}

Test(remote, cli_costs_prints_the_servers_costs)
{
    char *state = tu_mkdtemp("sbx-remote-state");
    const char *url = getenv("BESPOKE_SANDBOX_URL");
    /* Something metered: a command run on local. */
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "echo metered", 10);
    tu_assert_stdout(r, "metered\n");
    sbx_result_free(r);
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    json_object *want = NULL;
    cr_assert_eq(cp_http("GET", "/v1/costs?group_by=backend", auth, NULL, &want), 200);
    char *out, *err;
    const char *json[] = { "--remote", url, "costs", "--group-by", "backend", "--json", NULL };
    cr_assert_eq(cli(state, json, &out, &err), 0, "stderr: %s", err);
    json_object *got = json_tokener_parse(out);
    cr_assert(json_object_equal(got, want), "sbx costs --json: %s, the server: %s", out,
              json_object_to_json_string(want));
    cr_assert_str_eq(tu_json_str(got, "group_by"), "backend");
    json_object_put(got);
    free(out);
    free(err);

    /* The table: a header and the local row, the server's strings. */
    const char *table[] = { "--remote", url, "costs", "--group-by=backend", NULL };
    cr_assert_eq(cli(state, table, &out, &err), 0, "stderr: %s", err);
    json_object *items = NULL, *local = NULL;
    cr_assert(json_object_object_get_ex(want, "items", &items));
    for (size_t i = 0; i < json_object_array_length(items); i++)
        if (strcmp(tu_json_str(json_object_array_get_idx(items, i), "key"), "local") == 0)
            local = json_object_array_get_idx(items, i);
    cr_assert_not_null(local, "no local row in %s", json_object_to_json_string(want));
    char *line = tu_strdup_printf("%-40s %16s %18s %18s\n", "local",
                                  tu_json_str(local, "runtime_seconds"),
                                  tu_json_str(local, "provider_cost_usd"),
                                  tu_json_str(local, "customer_cost_usd"));
    char *header = tu_strdup_printf("%-40s %16s %18s %18s\n", "KEY", "RUNTIME_SECONDS",
                                    "PROVIDER_COST_USD", "CUSTOMER_COST_USD");
    cr_assert_eq(strncmp(out, header, strlen(header)), 0, "table: %s", out);
    cr_assert_not_null(strstr(out, line), "table %s lacks %s", out, line);
    free(line);
    free(header);
    free(out);
    free(err);
    json_object_put(want);
    free(auth);

    /* A window the server refuses: its message, exit 125, in the words of
     * the options (--since and --until, not the query's start and end),
     * naming the value refused. */
    const char *bad[] = { "--remote", url, "costs", "--since", "2026-02-01", "--until",
                          "2026-01-01", NULL };
    cr_assert_eq(cli(state, bad, &out, &err), 125);
    cr_assert_str_eq(out, "");
    cr_assert_str_eq(err, "sbx: costs: the control plane refused: --since must be before "
                          "--until (HTTP 422)\n");
    free(out);
    free(err);
    const char *naive[] = { "--remote", url, "costs", "--since", "2026-02-01T00:00:00", NULL };
    cr_assert_eq(cli(state, naive, &out, &err), 125);
    cr_assert_str_eq(err, "sbx: costs: the control plane refused: --since must include a "
                          "timezone (HTTP 422)\n");
    free(out);
    free(err);
    const char *garbled[] = { "--remote", url, "costs", "--until", "soon", NULL };
    cr_assert_eq(cli(state, garbled, &out, &err), 125);
    cr_assert_str_eq(err, "sbx: costs: the control plane refused: --until \"soon\": Input "
                          "should be a valid datetime or date, input is too short (HTTP 422)\n");
    free(out);
    free(err);

    /* A bad group and no control plane: usage errors. */
    const char *group[] = { "--remote", url, "costs", "--group-by", "week", NULL };
    cr_assert_eq(cli(state, group, &out, &err), 125);
    cr_assert_not_null(strstr(err, "invalid --group-by value \"week\": expected sandbox, "
                                   "backend or day"), "%s", err);
    free(out);
    free(err);
    const char *none[] = { "costs", NULL };
    cr_assert_eq(cli(state, none, &out, &err), 125);
    cr_assert_not_null(strstr(err, "no control plane: give --remote URL before the command, "
                                   "or set BESPOKE_SANDBOX_URL"), "%s", err);
    free(out);
    free(err);
    tu_rmtree(state);
    free(state);
}

/* ---------------------------------------------------------- the CLI through the variables */

/* BESPOKE_SANDBOX_URL and BESPOKE_SANDBOX_KEY set, no --remote: run makes
 * its sandbox on the server (the upstream backend local) and destroys it
 * there; create, exec, ps and rm work on the server's sandbox as with
 * --remote. */
Test(remote, cli_env_run_create_exec_ps_rm)
{
    char *state = tu_mkdtemp("sbx-remote-state");
    char *out, *err;
    int made = count_sandboxes(NULL), gone = count_sandboxes("destroyed");

    const char *run[] = { "run", "--", "sh", "-c", "echo hi; echo err >&2; exit 3", NULL };
    cr_assert_eq(cli_env(state, run, &out, &err), 3, "stderr: %s", err);
    cr_assert_str_eq(out, "hi\n");
    cr_assert_str_eq(err, "err\n");
    free(out);
    free(err);
    cr_assert_eq(count_sandboxes(NULL), made + 1);
    cr_assert_eq(count_sandboxes("destroyed"), gone + 1);

    const char *create[] = { "create", "-b", "local", NULL };
    cr_assert_eq(cli_env(state, create, &out, &err), 0, "stderr: %s", err);
    cr_assert_eq(strncmp(out, "sbx_", 4), 0, "id %s", out);
    cr_assert_eq(strlen(out), 37, "id %s", out);  /* sbx_ + 32 hex + \n */
    char *id = strndup(out, 36);
    free(out);
    free(err);
    cr_assert_eq(count_sandboxes(NULL), made + 2);
    {
        char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
        char *path = tu_strdup_printf("/v1/sandboxes/%s", id);
        json_object *j = NULL;
        cr_assert_eq(cp_http("GET", path, auth, NULL, &j), 200, "GET %s", path);
        cr_assert_str_eq(tu_json_str(j, "status"), "running");
        cr_assert_str_eq(tu_json_str(j, "backend"), "local");
        json_object_put(j);
        free(auth);
        free(path);
    }

    const char *exec[] = { "exec", id, "--", "sh", "-c", "printf 'a\\377b'; exit 4", NULL };
    cr_assert_eq(cli_env(state, exec, &out, &err), 4, "stderr: %s", err);
    cr_assert_eq(memcmp(out, "a\377b", 4), 0);
    free(out);
    free(err);

    const char *ps[] = { "ps", "--json", NULL };
    cr_assert_eq(cli_env(state, ps, &out, &err), 0, "stderr: %s", err);
    json_object *j = json_tokener_parse(out);
    cr_assert(json_object_is_type(j, json_type_array), "ps --json: %s", out);
    cr_assert_eq(json_object_array_length(j), 1);
    json_object *row = json_object_array_get_idx(j, 0);
    cr_assert_str_eq(tu_json_str(row, "id"), id);
    cr_assert_str_eq(tu_json_str(row, "backend"), "remote");
    cr_assert_str_eq(tu_json_str(row, "state"), "running");
    json_object_put(j);
    free(out);
    free(err);

    const char *rm[] = { "rm", id, NULL };
    cr_assert_eq(cli_env(state, rm, &out, &err), 0, "stderr: %s", err);
    cr_assert_str_eq(err, "");
    free(out);
    free(err);
    char *s = server_status(id);
    cr_assert_str_eq(s, "destroyed");
    free(s);
    const char *psa[] = { "ps", "-a", "--json", NULL };
    cr_assert_eq(cli_env(state, psa, &out, &err), 0, "stderr: %s", err);
    cr_assert_str_eq(out, "[\n]\n");
    free(out);
    free(err);
    cr_assert_eq(count_sandboxes("destroyed"), gone + 2);
    free(id);
    tu_rmtree(state);
    free(state);
}

/* sbx costs with the variables and no --remote: the server's /v1/costs,
 * as JSON and as the table. */
Test(remote, cli_env_costs)
{
    char *state = tu_mkdtemp("sbx-remote-state");
    g_sb = tu_create(g_client, NULL);
    sbx_result *r = tu_sh(g_sb, "echo metered", 10);
    tu_assert_stdout(r, "metered\n");
    sbx_result_free(r);
    char *auth = tu_strdup_printf("Authorization: Bearer %s", getenv("BESPOKE_SANDBOX_KEY"));
    json_object *want = NULL, *items = NULL;
    cr_assert_eq(cp_http("GET", "/v1/costs?group_by=sandbox", auth, NULL, &want), 200);
    char *out, *err;
    const char *json[] = { "costs", "--json", NULL };
    cr_assert_eq(cli_env(state, json, &out, &err), 0, "stderr: %s", err);
    json_object *got = json_tokener_parse(out);
    cr_assert(json_object_equal(got, want), "sbx costs --json: %s, the server: %s", out,
              json_object_to_json_string(want));
    cr_assert_str_eq(tu_json_str(got, "group_by"), "sandbox");
    json_object_put(got);
    free(out);
    free(err);

    /* The table: the header, then one row per item in the server's order. */
    const char *table[] = { "costs", NULL };
    cr_assert_eq(cli_env(state, table, &out, &err), 0, "stderr: %s", err);
    cr_assert_str_eq(err, "");
    cr_assert(json_object_object_get_ex(want, "items", &items));
    cr_assert_gt(json_object_array_length(items), 0);
    char *expect = tu_strdup_printf("%-40s %16s %18s %18s\n", "KEY", "RUNTIME_SECONDS",
                                    "PROVIDER_COST_USD", "CUSTOMER_COST_USD");
    for (size_t i = 0; i < json_object_array_length(items); i++) {
        json_object *it = json_object_array_get_idx(items, i);
        char *line = tu_strdup_printf("%s%-40s %16s %18s %18s\n", expect, tu_json_str(it, "key"),
                                      tu_json_str(it, "runtime_seconds"),
                                      tu_json_str(it, "provider_cost_usd"),
                                      tu_json_str(it, "customer_cost_usd"));
        free(expect);
        expect = line;
    }
    cr_assert_str_eq(out, expect);
    free(expect);
    free(out);
    free(err);
    json_object_put(want);
    free(auth);

    /* The key from the variable: another organisation's key sees its own
     * (empty) costs. */
    {
        char *admin = tu_strdup_printf("X-Control-Plane-Admin: %s",
                                       getenv("SBX_TEST_CP_ADMIN_TOKEN"));
        json_object *org = NULL, *key = NULL;
        cr_assert_eq(cp_http("POST", "/v1/organizations", admin, "{\"name\":\"cli-env\"}", &org),
                     201);
        cr_assert(json_object_object_get_ex(org, "api_key", &key));
        char *mine = strdup(getenv("BESPOKE_SANDBOX_KEY"));
        setenv("BESPOKE_SANDBOX_KEY", tu_json_str(key, "secret"), 1);
        cr_assert_eq(cli_env(state, json, &out, &err), 0, "stderr: %s", err);
        setenv("BESPOKE_SANDBOX_KEY", mine, 1);
        json_object *theirs = json_tokener_parse(out), *none = NULL;
        cr_assert_str_eq(tu_json_str(theirs, "group_by"), "sandbox", "%s", out);
        cr_assert(json_object_object_get_ex(theirs, "items", &none), "%s", out);
        cr_assert_eq(json_object_array_length(none), 0, "%s", out);
        json_object_put(theirs);
        free(out);
        free(err);
        free(mine);
        json_object_put(org);
        free(admin);
    }
    tu_rmtree(state);
    free(state);
}
