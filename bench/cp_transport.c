/*
 * bench/cp_transport: where the HTTP part of an execute through sbx-server
 * goes, measured on 127.0.0.1 in one run. Three servers, each in a process
 * of its own (as sbx-server is to its clients):
 *
 *   - raw: a thread per connection, blocking recv() until the end of the
 *     request's headers, then one send() of a fixed HTTP/1.1 answer (the
 *     bytes sbx-server answers GET /healthz with, headers and body);
 *   - mhd: libmicrohttpd with the daemon flags and options of
 *     server/http.c, its handler answering the same fixed body with the
 *     same headers (MHD_create_response_from_buffer, MUST_COPY), nothing
 *     else (no request context, routing, log line);
 *   - sbx-server: the build's server (SBX_SERVER overrides), GET /healthz,
 *     started as bench/cp_exec starts it (a throwaway SQLite store);
 *
 * and two clients, each on one kept connection:
 *
 *   - raw: one blocking send() of the request bytes libcurl sends for
 *     bench/cp_exec's GET (request line, Host, Accept, Authorization,
 *     Content-Type), recv() until the headers and Content-Length bytes;
 *   - curl: libcurl set up as bench/cp_exec sets it up (one easy handle,
 *     the same options and headers).
 *
 * Each round sends one request of every client to every server (six
 * pairs, in turn, each round starting at the next pair) and then idles -i microseconds (default 800: the direct
 * library call between two HTTP executes of bench/cp_exec), so every pair
 * meets the same load. Rows: p50 and p99 of each pair in microseconds.
 * Differences of rows split the round trip: raw/raw is the kernel's and
 * the two wake-ups' part; mhd/raw minus raw/raw libmicrohttpd's;
 * raw/curl minus raw/raw libcurl's; sbx-server/raw minus mhd/raw the
 * server's own work per request (request context, routing, JSON, the log
 * line).
 *
 * Usage: cp_transport [-n ROUNDS] [-i IDLE_US]   (defaults 2000, 800)
 * The servers are stopped by their pids at the end (and on failure); the
 * store's directory is removed.
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
#include <microhttpd.h>

#include "bench.h"

#define BODY "{\"status\":\"ok\"}"

/* server/http.c's security headers, as sbx-server sends them. */
static const char *const headers[][2] = {
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
    { "Content-Type", "application/json" },
};

static pid_t g_pids[3] = { -1, -1, -1 };
static char g_dir[256];

static void stop_all(void)
{
    for (int i = 0; i < 2; i++)
        if (g_pids[i] > 0) {
            kill(g_pids[i], SIGTERM);
            waitpid(g_pids[i], NULL, 0);
            g_pids[i] = -1;
        }
    bench_server_stop(&g_pids[2], g_dir);
}

static void die(const char *what)
{
    fprintf(stderr, "cp_transport: %s: %s\n", what, strerror(errno));
    stop_all();
    exit(1);
}

/* ------------------------------------------------------------ raw server */

static char g_answer[2048];
static size_t g_answer_len;

static void *raw_conn(void *ud)
{
    int fd = (int)(intptr_t)ud;
    char buf[8192];
    size_t n = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (!end)
            continue;
        /* GET requests only: no body. */
        if (send(fd, g_answer, g_answer_len, MSG_NOSIGNAL) != (ssize_t)g_answer_len)
            break;
        size_t used = (size_t)(end + 4 - buf);
        memmove(buf, buf + used, n - used);
        n -= used;
    }
    close(fd);
    return NULL;
}

static void raw_serve(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        pthread_create(&t, NULL, raw_conn, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}

/* ------------------------------------------------------------ mhd server */

static enum MHD_Result mhd_handler(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version,
                                   const char *upload, size_t *upload_size, void **con_cls)
{
    static int first;
    (void)cls; (void)url; (void)method; (void)version; (void)upload; (void)upload_size;
    /* As server/http.c: the first call per request only sets the context. */
    if (!*con_cls) {
        *con_cls = &first;
        return MHD_YES;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(BODY), (void *)BODY,
                                                             MHD_RESPMEM_MUST_COPY);
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++)
        MHD_add_response_header(r, headers[i][0], headers[i][1]);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static void mhd_serve(unsigned *port_out, int report)
{
    struct sockaddr_in sa = { 0 };
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
            MHD_USE_ITC | MHD_USE_ERROR_LOG,
        0, NULL, NULL, mhd_handler, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_CONNECTION_TIMEOUT, 120u,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    if (!d)
        _exit(1);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port_out = info->port;
    if (write(report, port_out, sizeof *port_out) != sizeof *port_out)
        _exit(1);
    for (;;)
        pause();
}

/* Forks a server process: @kind 0 raw, 1 mhd. Its port. */
static unsigned start_fake(int kind)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        die("pipe");
    int lfd = -1;
    unsigned port = 0;
    if (kind == 0) {
        struct sockaddr_in sa = { 0 };
        socklen_t sl = sizeof sa;
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 64) != 0 ||
            getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
            die("listen");
        port = ntohs(sa.sin_port);
    }
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        close(p[0]);
        if (kind == 0)
            raw_serve(lfd);
        else
            mhd_serve(&port, p[1]);
        _exit(0);
    }
    g_pids[kind] = pid;
    close(p[1]);
    if (kind == 1 && read(p[0], &port, sizeof port) != sizeof port)
        die("the libmicrohttpd server did not start");
    close(p[0]);
    if (lfd >= 0)
        close(lfd);
    return port;
}

/* ------------------------------------------------------------ sbx-server */

static unsigned start_server(void)
{
    char url[128];
    unsigned port = 0;
    if (bench_server_start("sbx-cp-transport", "bench-admin-token", g_dir, sizeof g_dir,
                           &g_pids[2], url, sizeof url) < 0)
        die("sbx-server did not start");
    if (sscanf(url, "http://127.0.0.1:%u", &port) != 1) {
        errno = EPROTO;
        die("sbx-server's address");
    }
    return port;
}

/* ------------------------------------------------------------ clients */

static char g_request[1024];
static size_t g_request_len;

/* One request on @fd: 0, or -1 on a short answer or a status but 200. */
static int raw_round(int fd)
{
    return bench_http_exchange(fd, g_request, g_request_len) == 200 ? 0 : -1;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* A handle set up as bench/cp_exec's http() sets up its GET. */
static CURL *curl_client(unsigned port, char *url, size_t cap, struct curl_slist **hd)
{
    CURL *h = curl_easy_init();
    snprintf(url, cap, "http://127.0.0.1:%u/healthz", port);
    *hd = curl_slist_append(NULL, "Authorization: Bearer bsk_live_"
                                  "0000000000000000000000000000000000000000000");
    *hd = curl_slist_append(*hd, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hd);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "GET");
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    return h;
}

static int curl_round(CURL *h)
{
    long st = 0;
    if (curl_easy_perform(h) != CURLE_OK)
        return -1;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    return st == 200 ? 0 : -1;
}

static void idle_us(long us)
{
    if (us <= 0)
        return;
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    int rounds = 2000, opt;
    long idle = 800;
    while ((opt = getopt(argc, argv, "n:i:")) != -1) {
        if (opt == 'n')
            rounds = atoi(optarg);
        else if (opt == 'i')
            idle = atol(optarg);
        else {
            fprintf(stderr, "usage: cp_transport [-n ROUNDS] [-i IDLE_US]\n");
            return 2;
        }
    }
    if (rounds < 10 || idle < 0) {
        fprintf(stderr, "cp_transport: -n is at least 10, -i at least 0\n");
        return 2;
    }
    /* The fixed answer: what libmicrohttpd sends for the same response
     * (its Date header, the same headers, Content-Length, the body). */
    size_t n = (size_t)snprintf(g_answer, sizeof g_answer, "HTTP/1.1 200 OK\r\n");
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++)
        n += (size_t)snprintf(g_answer + n, sizeof g_answer - n, "%s: %s\r\n", headers[i][0],
                              headers[i][1]);
    n += (size_t)snprintf(g_answer + n, sizeof g_answer - n,
                          "Date: Sat, 05 Dec 2026 00:00:00 GMT\r\nContent-Length: %zu\r\n\r\n%s",
                          strlen(BODY), BODY);
    g_answer_len = n;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    unsigned ports[3];
    ports[0] = start_fake(0);
    ports[1] = start_fake(1);
    ports[2] = start_server();
    g_request_len = (size_t)snprintf(
        g_request, sizeof g_request,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nAccept: */*\r\n"
        "Authorization: Bearer bsk_live_0000000000000000000000000000000000000000000\r\n"
        "Content-Type: application/json\r\n\r\n", ports[2]);

    const char *names[3] = { "raw", "mhd", "sbx-server" };
    int fds[3];
    CURL *hs[3];
    struct curl_slist *hd[3];
    char urls[3][128];
    for (int s = 0; s < 3; s++) {
        if ((fds[s] = bench_loopback_connect(ports[s])) < 0)
            die("connect");
        hs[s] = curl_client(ports[s], urls[s], sizeof urls[s], &hd[s]);
    }
    double *lat[6];
    for (int k = 0; k < 6; k++)
        lat[k] = calloc((size_t)rounds, sizeof *lat[k]);
    /* Warm every pair, then the rounds. */
    for (int i = -20; i < rounds; i++) {
        /* Each round starts at another pair, so none is always the
         * first after the idle time. */
        for (int j = 0; j < 6; j++) {
            int k = (j + (i < 0 ? -i : i)) % 6, s = k / 2, curl = k % 2;
            double t0 = now_us();
            int rc = curl ? curl_round(hs[s]) : raw_round(fds[s]);
            double t1 = now_us();
            if (rc != 0) {
                errno = EPROTO;
                fprintf(stderr, "cp_transport: %s client against %s failed\n",
                        curl ? "curl" : "raw", names[s]);
                die("request");
            }
            if (i >= 0)
                lat[k][i] = t1 - t0;
            idle_us(idle / 6);
        }
    }
    printf("cp_transport: %d rounds, %ld us idle per round, 127.0.0.1, one kept connection "
           "per pair\n", rounds, idle);
    double p50[6];
    for (int k = 0; k < 6; k++) {
        p50[k] = percentile(lat[k], (size_t)rounds, 0.5);
        printf("%-10s server, %-4s client: p50 %6.1f us  p99 %7.1f us\n", names[k / 2],
               k % 2 ? "curl" : "raw", p50[k], percentile(lat[k], (size_t)rounds, 0.99));
    }
    printf("split (p50): kernel and wake-ups %.1f us; libmicrohttpd +%.1f us; libcurl +%.1f us "
           "(raw server), +%.1f us (mhd); sbx-server's own per-request work +%.1f us (raw "
           "client), +%.1f us (curl)\n", p50[0], p50[2] - p50[0], p50[1] - p50[0],
           p50[3] - p50[2], p50[4] - p50[2], p50[5] - p50[3]);
    for (int s = 0; s < 3; s++) {
        close(fds[s]);
        curl_easy_cleanup(hs[s]);
        curl_slist_free_all(hd[s]);
    }
    for (int k = 0; k < 6; k++)
        free(lat[k]);
    stop_all();
    curl_global_cleanup();
    return 0;
}
