/*
 * bench/cp_exec: an execute through the control plane (sbx-server) against
 * the direct library call on `local`, measured in one run.
 *
 * The bench starts the build tree's sbx-server (SBX_SERVER overrides) on
 * 127.0.0.1 with PORT=0, a throwaway SQLite store in a temporary directory
 * (its synchronous mode the server's default, normal, unless
 * BESPOKE_DB_SYNCHRONOUS is set; the first line says which) and
 * BESPOKE_ALLOWED_BACKENDS=local, makes an organization with the admin
 * token, and stops the server by its PID at the end (the directory is
 * removed). Rows:
 *
 *   - direct vs HTTP: execute_command({"/bin/true"}) on a live local
 *     sandbox made with the library, against POST /v1/sandboxes/ID/execute
 *     {"command":"/bin/true","args":[]} on a live local sandbox of the
 *     server (one libcurl handle: keep-alive; a new Idempotency-Key per
 *     request), alternating (-n rounds). p50 and p99 in microseconds of
 *     both, the added latency (HTTP minus direct) at p50 and p99, and the
 *     ratio. Target: <= 200 us added at p50.
 *   - the same with a minimal client in libcurl's place: the bytes libcurl
 *     sends for that request written with one send() on a kept TCP
 *     connection (TCP_NODELAY), the answer read with recv() until its
 *     headers and Content-Length bytes. Each round runs a direct call and
 *     a libcurl execute, then a direct call and a minimal client's
 *     execute, so every execute follows a direct call; each row compares
 *     its executes with the direct calls just before them. The difference
 *     of the two rows is what libcurl costs the client.
 *   - direct vs the remote plugin: the same direct call against
 *     execute_command({"/bin/true"}) on a sandbox of the `remote` backend
 *     (the whole client path: the plugin host, the plugin, its execute
 *     with the command as the request's own fields, as it sends them to
 *     sbx-server), alternating; and what the script the plugin sends a
 *     reference server instead would cost: the raw HTTP execute of
 *     /bin/true against the same one of that script ("/bin/sh -c"
 *     exporting the mark, stdin from /dev/null, exec).
 *   - replay: the same execute re-sent with a request id already completed
 *     (the stored answer, no provider call): replays per second and their
 *     p50 against a fresh execute's.
 *   - load: a second process (forked; C threads, one libcurl handle and
 *     connection each) sends -r executes in all at 1, 16 and 64 connections;
 *     requests per second, p50 and p99 of each, failures (anything but 200:
 *     must be 0), and the rate's ratio to the one-connection rate.
 *
 * Usage: cp_exec [-n ROUNDS] [-r LOAD_REQUESTS]   (defaults 300, 2000)
 * Environment as scripts/bench sets it (SBX_PLUGIN_PATH with the local and
 * remote plugins, SBX_SUPERVISOR, SBX_PLUGIN_HOST).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <sbx/sbx.h>

#include "bench.h"

#define ADMIN "bench-admin-token"

static pid_t g_server = -1;
static char g_dir[256];
static char g_url[128];
static char g_key[128];

static char g_sandbox[128];      /* the server's sandbox, once made */
/* The remote plugin's sandbox, a sandbox of the server too (die() destroys it). */
static sbx_sandbox *g_remote_sb;

static void server_stop(void);
static long http(CURL *h, const char *method, const char *path, const char *body, int admin,
                 const char *extra, bench_body *out);

/* Says why, terminates the server's sandboxes (they outlive the server),
 * stops the server and removes its directory, exits 1. */
static void die(const char *fmt, const char *a)
{
    fprintf(stderr, "cp_exec: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    if (g_remote_sb) {
        sbx_sandbox_destroy(g_remote_sb, NULL);
        g_remote_sb = NULL;
    }
    if (g_sandbox[0]) {
        char path[192];
        snprintf(path, sizeof path, "/v1/sandboxes/%s", g_sandbox);
        g_sandbox[0] = '\0';
        http(NULL, "DELETE", path, NULL, 0, NULL, NULL);
    }
    if (g_dir[0])
        server_stop();
    exit(1);
}

/* A stop signal (SIGINT, SIGTERM, SIGHUP) that came: the rounds check it
 * and end through die(), which terminates the server's sandbox first (the
 * server itself would leave it running, and its store goes with the
 * bench). */
static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
    g_stop = sig;
}

static void check_stop(void)
{
    if (g_stop)
        die("stopped by signal %s", strsignal(g_stop));
}

static void catch_stops(void)
{
    struct sigaction sa = { .sa_handler = on_stop, .sa_flags = SA_RESTART };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* ------------------------------------------------------------ the server */

static void server_start(void)
{
    if (bench_server_start("sbx-cp-exec", ADMIN, g_dir, sizeof g_dir, &g_server, g_url,
                           sizeof g_url) < 0) {
        int e = errno;
        /* Its log, before the directory goes. */
        char log[400], buf[4096];
        snprintf(log, sizeof log, "%s/server.log", g_dir);
        FILE *f = g_dir[0] ? fopen(log, "r") : NULL;
        size_t k = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        buf[k] = '\0';
        if (f)
            fclose(f);
        if (g_server < 0)
            die("cannot start sbx-server: %s", strerror(e));
        die("sbx-server did not start; its log:\n%s", buf);
    }
}

static void server_stop(void)
{
    bench_server_stop(&g_server, g_dir);
}

/* ------------------------------------------------------------ HTTP */

/* @method g_url@path with the product key (or the admin header when
 * @admin), on @h (a kept handle, or NULL for a new one), with @extra
 * header (or none): the status; the body in *@body when not NULL. */
static long http(CURL *h, const char *method, const char *path, const char *body, int admin,
                 const char *extra, bench_body *out)
{
    int own = !h;
    if (own)
        h = curl_easy_init();
    char url[512], auth[256];
    struct curl_slist *hd = NULL;
    snprintf(url, sizeof url, "%s%s", g_url, path);
    if (admin)
        snprintf(auth, sizeof auth, "X-Control-Plane-Admin: %s", ADMIN);
    else
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", g_key);
    hd = curl_slist_append(hd, auth);
    hd = curl_slist_append(hd, "Content-Type: application/json");
    if (extra)
        hd = curl_slist_append(hd, extra);
    bench_body sink = { 0 };
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    if (!body)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bench_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out ? out : &sink);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    free(sink.data);
    if (own)
        curl_easy_cleanup(h);
    return status;
}

static const char *jstr(const char *text, const char *key, char *buf, size_t cap)
{
    json_object *j = text ? json_tokener_parse(text) : NULL, *v = NULL;
    buf[0] = '\0';
    if (j && json_object_object_get_ex(j, key, &v) && json_object_is_type(v, json_type_string))
        snprintf(buf, cap, "%s", json_object_get_string(v));
    json_object_put(j);
    return buf;
}

static const char *exec_body = "{\"command\":\"/bin/true\",\"args\":[]}";
/* What the remote plugin sends a reference server (one whose records show
 * no idempotency_key) for execute_command({"/bin/true"}). */
static const char *script_body =
    "{\"command\":\"/bin/sh\",\"args\":[\"-c\",\"export SBX_EXEC_ID=sbx-exec-"
    "000000000000000000000000\\nexec </dev/null\\nexec '/bin/true'\"]}";

/* One execute of @body (NULL: /bin/true) on sandbox @id with request id
 * @key: status. */
static long http_exec_body(CURL *h, const char *id, const char *key, const char *body)
{
    char path[192], hk[192];
    snprintf(path, sizeof path, "/v1/sandboxes/%s/execute", id);
    snprintf(hk, sizeof hk, "Idempotency-Key: %s", key);
    return http(h, "POST", path, body ? body : exec_body, 0, hk, NULL);
}

static long http_exec(CURL *h, const char *id, const char *key)
{
    return http_exec_body(h, id, key, NULL);
}

/* ------------------------------------------------------------ a minimal client */

/* A kept connection to the server: its descriptor. */
static int raw_connect(void)
{
    unsigned port = 0;
    if (sscanf(g_url, "http://127.0.0.1:%u", &port) != 1)
        die("the server's address: %s", g_url);
    int fd = bench_loopback_connect(port);
    if (fd < 0)
        die("connect: %s", strerror(errno));
    return fd;
}

/* The execute of http_exec() on the kept connection @fd, with the bytes
 * libcurl sends for it (request line, Host, Accept, Authorization,
 * Content-Type, Idempotency-Key, Content-Length, the body) in one send(),
 * then recv() until the answer's headers and its Content-Length bytes:
 * the status, or 0 on a short or malformed answer. */
static long raw_exec(int fd, const char *id, const char *key)
{
    char req[1024];
    const char *host = g_url + strlen("http://");
    int len = snprintf(req, sizeof req,
                       "POST /v1/sandboxes/%s/execute HTTP/1.1\r\nHost: %s\r\nAccept: */*\r\n"
                       "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                       "Idempotency-Key: %s\r\nContent-Length: %zu\r\n\r\n%s",
                       id, host, g_key, key, strlen(exec_body), exec_body);
    if (len <= 0 || (size_t)len >= sizeof req)
        return 0;
    return bench_http_exchange(fd, req, (size_t)len);
}

/* ------------------------------------------------------------ the rows */

static int lib_true(sbx_sandbox *sb)
{
    const char *argv[] = { "/bin/true", NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(sb, &req, &err);
    if (!r) {
        fprintf(stderr, "cp_exec: exec: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        return -1;
    }
    int code = sbx_result_get_exit_code(r);
    sbx_result_free(r);
    return code;
}

static void row(const char *name, double *a, double *b, int n, const char *an, const char *bn)
{
    double a50 = percentile(a, (size_t)n, 0.5), a99 = percentile(a, (size_t)n, 0.99);
    double b50 = percentile(b, (size_t)n, 0.5), b99 = percentile(b, (size_t)n, 0.99);
    printf("%-22s %s p50 %8.0f us p99 %8.0f us | %s p50 %8.0f us p99 %8.0f us | added p50 "
           "%7.0f us p99 %7.0f us | ratio p50 %.2f\n", name, an, a50, a99, bn, b50, b99,
           b50 - a50, b99 - a99, b50 / a50);
}

/* ------------------------------------------------------------ load */

typedef struct worker {
    const char *id;
    int count;
    int index;
    double *lat;
    int failed;
} worker;

static void *load_worker(void *ud)
{
    worker *w = ud;
    CURL *h = curl_easy_init();
    char key[64];
    for (int i = 0; i < w->count; i++) {
        snprintf(key, sizeof key, "load-%d-%d-%d", (int)getpid(), w->index, i);
        double t0 = now_us();
        long st = http_exec(h, w->id, key);
        w->lat[i] = now_us() - t0;
        if (st != 200)
            w->failed++;
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* In the load process: @total executes over @conns connections; writes
 * "rps p50 p99 failed" to @fd. */
static void load_run(const char *id, int conns, int total, int fd)
{
    worker *w = calloc((size_t)conns, sizeof *w);
    pthread_t *t = calloc((size_t)conns, sizeof *t);
    double *lat = calloc((size_t)total, sizeof *lat);
    int per = total / conns, off = 0;
    double t0 = now_us();
    for (int i = 0; i < conns; i++) {
        w[i] = (worker){ id, per + (i < total % conns ? 1 : 0), i, lat + off, 0 };
        off += w[i].count;
        pthread_create(&t[i], NULL, load_worker, &w[i]);
    }
    int failed = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(t[i], NULL);
        failed += w[i].failed;
    }
    double secs = (now_us() - t0) / 1e6;
    char line[256];
    int n = snprintf(line, sizeof line, "%.1f %.0f %.0f %d\n", total / secs,
                     percentile(lat, (size_t)total, 0.5), percentile(lat, (size_t)total, 0.99),
                     failed);
    if (write(fd, line, (size_t)n) != n)
        _exit(1);
    free(w);
    free(t);
    free(lat);
}

int main(int argc, char **argv)
{
    int rounds = 300, load_total = 2000, opt;
    while ((opt = getopt(argc, argv, "n:r:")) != -1) {
        if (opt == 'n')
            rounds = atoi(optarg);
        else if (opt == 'r')
            load_total = atoi(optarg);
        else {
            fprintf(stderr, "usage: cp_exec [-n ROUNDS] [-r LOAD_REQUESTS]\n");
            return 2;
        }
    }
    if (rounds < 10 || load_total < 64) {
        fprintf(stderr, "cp_exec: -n is at least 10, -r at least 64\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server_start();
    catch_stops();
    bench_body b = { 0 };
    char buf[256];
    if (http(NULL, "POST", "/v1/organizations", "{\"name\":\"bench\"}", 1, NULL, &b) != 201)
        die("POST /v1/organizations: %s", b.data ? b.data : "");
    json_object *j = json_tokener_parse(b.data), *k = NULL;
    if (!j || !json_object_object_get_ex(j, "api_key", &k))
        die("no key in %s", b.data);
    snprintf(g_key, sizeof g_key, "%s", jstr(json_object_to_json_string(k), "secret", buf,
                                             sizeof buf));
    json_object_put(j);
    free(b.data);
    b = (bench_body){ 0 };

    /* The server's sandbox, and the direct one. */
    if (http(NULL, "POST", "/v1/sandboxes", "{\"backend\":\"local\",\"timeout_secs\":3600}", 0,
             "Idempotency-Key: bench-sandbox", &b) != 201)
        die("POST /v1/sandboxes: %s", b.data ? b.data : "");
    char id[128];
    snprintf(id, sizeof id, "%s", jstr(b.data, "id", buf, sizeof buf));
    snprintf(g_sandbox, sizeof g_sandbox, "%s", id);
    free(b.data);
    sbx_error *err = NULL;
    sbx_client *local = sbx_client_new("local", &err);
    sbx_sandbox *direct = local ? sbx_sandbox_create(local, NULL, &err) : NULL;
    if (!direct)
        die("local sandbox: %s", err ? sbx_error_get0_message(err) : "?");
    setenv("BESPOKE_SANDBOX_URL", g_url, 1);
    setenv("BESPOKE_SANDBOX_KEY", g_key, 1);
    setenv("BESPOKE_SANDBOX_BACKEND", "local", 1);
    sbx_client *remote = sbx_client_new("remote", &err);
    sbx_sandbox *rsb = remote ? sbx_sandbox_create(remote, NULL, &err) : NULL;
    if (!rsb)
        die("remote sandbox: %s", err ? sbx_error_get0_message(err) : "?");
    g_remote_sb = rsb;

    /* The server inherits BESPOKE_DB_SYNCHRONOUS (normal when unset). */
    const char *sync = getenv("BESPOKE_DB_SYNCHRONOUS");
    printf("cp_exec: sbx-server %s, %d rounds, plugins %s, SQLite synchronous=%s%s\n", g_url,
           rounds, getenv("SBX_PLUGIN_MODE") ? getenv("SBX_PLUGIN_MODE") : "outofprocess",
           sync && *sync ? sync : "normal", sync && *sync ? "" : " (the default)");
    CURL *h = curl_easy_init();
    double *a = calloc((size_t)rounds, sizeof *a), *c = calloc((size_t)rounds, sizeof *c);
    char key[64];
    /* Warm both paths. */
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "warm-%d", i);
        lib_true(direct);
        http_exec(h, id, key);
        lib_true(rsb);
    }
    /* direct vs HTTP, with libcurl and with the minimal client: each
     * round a direct call and a libcurl execute, then a direct call and a
     * minimal client's execute, so each execute follows a direct call. */
    int fd = raw_connect();
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "warm-raw-%d", i);
        lib_true(direct);
        if (raw_exec(fd, id, key) != 200)
            die("%s", "execute through the server failed (minimal client)");
    }
    double *a2 = calloc((size_t)rounds, sizeof *a2), *c2 = calloc((size_t)rounds, sizeof *c2);
    for (int i = 0; i < rounds; i++) {
        check_stop();
        double t0 = now_us();
        if (lib_true(direct) != 0)
            die("%s", "direct exec failed");
        double t1 = now_us();
        snprintf(key, sizeof key, "round-%d", i);
        if (http_exec(h, id, key) != 200)
            die("%s", "execute through the server failed");
        double t2 = now_us();
        a[i] = t1 - t0;
        c[i] = t2 - t1;
        t0 = now_us();
        if (lib_true(direct) != 0)
            die("%s", "direct exec failed");
        t1 = now_us();
        snprintf(key, sizeof key, "round-raw-%d", i);
        if (raw_exec(fd, id, key) != 200)
            die("%s", "execute through the server failed (minimal client)");
        t2 = now_us();
        a2[i] = t1 - t0;
        c2[i] = t2 - t1;
    }
    close(fd);
    row("execute /bin/true", a, c, rounds, "direct", "HTTP");
    row("  minimal client", a2, c2, rounds, "direct", "HTTP");
    free(a2);
    free(c2);
    /* direct vs the remote plugin */
    for (int i = 0; i < rounds; i++) {
        check_stop();
        double t0 = now_us();
        lib_true(direct);
        double t1 = now_us();
        if (lib_true(rsb) != 0)
            die("%s", "exec through the remote plugin failed");
        double t2 = now_us();
        a[i] = t1 - t0;
        c[i] = t2 - t1;
    }
    row("remote plugin", a, c, rounds, "direct", "remote");
    /* What of that is the plugin's script: the same request over raw HTTP
     * with and without it. */
    for (int i = 0; i < rounds; i++) {
        check_stop();
        snprintf(key, sizeof key, "plain-%d", i);
        double t0 = now_us();
        http_exec(h, id, key);
        double t1 = now_us();
        snprintf(key, sizeof key, "script-%d", i);
        if (http_exec_body(h, id, key, script_body) != 200)
            die("%s", "the script through the server failed");
        double t2 = now_us();
        a[i] = t1 - t0;
        c[i] = t2 - t1;
    }
    row("the plugin's script", a, c, rounds, "HTTP", "HTTP sh");
    /* replay vs fresh */
    for (int i = 0; i < rounds; i++) {
        check_stop();
        snprintf(key, sizeof key, "fresh-%d", i);
        double t0 = now_us();
        http_exec(h, id, key);
        double t1 = now_us();
        if (http_exec(h, id, "round-0") != 200)
            die("%s", "a replay failed");
        double t2 = now_us();
        a[i] = t1 - t0;
        c[i] = t2 - t1;
    }
    double f50 = percentile(a, (size_t)rounds, 0.5), r50 = percentile(c, (size_t)rounds, 0.5);
    double rsum = 0;
    for (int i = 0; i < rounds; i++)
        rsum += c[i];
    printf("%-22s fresh p50 %8.0f us | replay p50 %8.0f us p99 %8.0f us | %.0f replays/s "
           "(one connection) | replay/fresh %.2f\n", "idempotent replay", f50, r50,
           percentile(c, (size_t)rounds, 0.99), rounds / (rsum / 1e6), r50 / f50);
    curl_easy_cleanup(h);

    /* load from a second process */
    const int levels[] = { 1, 16, 64 };
    double base = 0;
    for (int l = 0; l < 3; l++) {
        int p[2];
        if (pipe(p) != 0)
            die("pipe: %s", strerror(errno));
        fflush(stdout);
        check_stop();
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            close(p[0]);
            load_run(id, levels[l], load_total, p[1]);
            _exit(0);
        }
        close(p[1]);
        char line[256] = "";
        ssize_t n = read(p[0], line, sizeof line - 1);
        close(p[0]);
        waitpid(pid, NULL, 0);
        double rps = 0, p50 = 0, p99 = 0;
        int failed = -1;
        if (n <= 0 || sscanf(line, "%lf %lf %lf %d", &rps, &p50, &p99, &failed) != 4)
            die("%s", "the load process gave no figures");
        if (l == 0)
            base = rps;
        printf("load %2d connection%s  %5d executes: %7.1f req/s  p50 %7.0f us  p99 %7.0f us  "
               "failed %d  rate/1-connection %.2f\n", levels[l], levels[l] > 1 ? "s" : " ",
               load_total, rps, p50, p99, failed, rps / base);
        if (failed)
            die("%s", "requests failed under load");
    }

    g_remote_sb = NULL;
    sbx_sandbox_destroy(rsb, NULL);
    sbx_sandbox_free(rsb);
    sbx_client_free(remote);
    sbx_sandbox_destroy(direct, NULL);
    sbx_sandbox_free(direct);
    sbx_client_free(local);
    char path[160];
    snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
    long st = http(NULL, "DELETE", path, NULL, 0, NULL, NULL);
    g_sandbox[0] = '\0';
    if (st != 200)
        fprintf(stderr, "cp_exec: DELETE %s: HTTP %ld\n", path, st);
    free(a);
    free(c);
    server_stop();
    curl_global_cleanup();
    return 0;
}
