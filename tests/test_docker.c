/*
 * Docker-only tests: the docker backend against the real Docker Engine that
 * scripts/docker-env starts (DOCKER_HOST, else /var/run/docker.sock; the
 * test image is $SBX_DOCKER_IMAGE, default sbx-test/debian:bookworm) and
 * against fake Engines written here, which answer the Engine API shapes
 * field for field on a unix socket in a temporary directory.
 *
 *   case10_*   stream framing byte-exact (real Engine; fake: frames split
 *              at every awkward place, a malformed header refused)
 *   case26_*   exit codes read only after the stream's EOF (real: 100 runs;
 *              fake: null ExitCode while running, never started, running
 *              forever)
 *   case28_*   a failed pull is the pull's error (fake A/B, real C)
 *   case49_*   the container killed by its memory limit (fake B)
 *   pull_progress_* the progress line of a pull from a captured stream
 *   files_*    CASE-13, 14, 17 and 11 through the library's file API
 *   engine_*   labels and limits on the container, snapshot/commit, resume
 *              in another process, list_owned / destroy_by_id (the plugin's
 *              slots called directly), nothing left behind
 *   preset_*   the claude-code preset's image (scripts/docker-env presets
 *              builds it on the test image) answers `claude --version`; a
 *              preset's image skips its setup commands, the caller's image
 *              runs them
 *   case25     2 GiB + 16 bytes each way (slow)
 *
 * Every test checks that the containers it made are gone at its end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sbx/plugin.h>
#include <sbx/sbx.h>

#include "recordutil.h"
#include "testutil.h"
#include "../plugins/docker/progress.h"

static char *g_tmp;

static const char *test_image(void)
{
    const char *i = getenv("SBX_DOCKER_IMAGE");
    return i && *i ? i : "sbx-test/debian:bookworm";
}

/* The real Engine's socket (DOCKER_HOST as the test run started). */
static char g_real_sock[sizeof(((struct sockaddr_un *)0)->sun_path)];

static void common_setup(void)
{
    const char *h = getenv("DOCKER_HOST");
    if (h && strncmp(h, "unix://", 7) == 0)
        snprintf(g_real_sock, sizeof g_real_sock, "%.107s", h + 7);
    else
        snprintf(g_real_sock, sizeof g_real_sock, "/var/run/docker.sock");
    g_tmp = tu_fresh_tmpdir();
    setenv("SBX_DOCKER_IMAGE", test_image(), 1);
    signal(SIGPIPE, SIG_IGN);
}

static void common_teardown(void)
{
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

/* ======================================================= raw Engine calls */

/* One HTTP/1.0 request to the real Engine (so the answer is never chunked:
 * it ends when the Engine closes). Returns the status; *@body (may be NULL)
 * gets the body (free()). */
static int engine(const char *method, const char *path, const char *json, char **body)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memcpy(sa.sun_path, g_real_sock, sizeof sa.sun_path);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect %s: %s",
                 g_real_sock, strerror(errno));
    char *req = tu_strdup_printf("%s /v1.41%s HTTP/1.0\r\nHost: localhost\r\n"
                                 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                 method, path, json ? strlen(json) : 0, json ? json : "");
    size_t n = strlen(req);
    cr_assert_eq(write(fd, req, n), (ssize_t)n);
    free(req);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char tmp[65536];
    ssize_t r;
    while ((r = read(fd, tmp, sizeof tmp)) > 0)
        fwrite(tmp, 1, (size_t)r, f);
    fclose(f);
    close(fd);
    int status = 0;
    cr_assert_eq(sscanf(buf, "HTTP/1.%*d %d", &status), 1, "bad answer \"%.40s\"", buf);
    char *b = strstr(buf, "\r\n\r\n");
    if (body)
        *body = strdup(b ? b + 4 : "");
    free(buf);
    return status;
}

static json_object *engine_json(const char *path)
{
    char *body;
    int st = engine("GET", path, NULL, &body);
    cr_assert_eq(st, 200, "GET %s: %d %s", path, st, body);
    json_object *j = json_tokener_parse(body);
    cr_assert_not_null(j, "GET %s: not JSON", path);
    free(body);
    return j;
}

/* Waits (bounded) until the Engine no longer has container @id. */
static void assert_container_gone(const char *id)
{
    char *path = tu_strdup_printf("/containers/%s/json", id);
    double end = tu_now() + 20.0;
    int st;
    while ((st = engine("GET", path, NULL, NULL)) != 404 && tu_now() < end)
        usleep(50000);
    cr_assert_eq(st, 404, "container %s is still there", id);
    free(path);
}

static const char *jstr(json_object *j, const char *a, const char *b)
{
    json_object *v;
    if (!json_object_object_get_ex(j, a, &v))
        return NULL;
    if (b && !json_object_object_get_ex(v, b, &v))
        return NULL;
    return json_object_get_string(v);
}

/* ========================================================== library helpers */

static sbx_client *client_new(void)
{
    sbx_error *err = NULL;
    sbx_client *c = sbx_client_new("docker", &err);
    cr_assert_null(err, "sbx_client_new(docker): %s", err ? sbx_error_get0_message(err) : "");
    return c;
}

/* A sandbox on @c with network none (and @image unless NULL). */
static sbx_sandbox *make_sandbox(sbx_client *c, const char *image)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    if (image)
        cr_assert_eq(sbx_options_set_image(o, image, NULL), 0);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    return sb;
}

static void destroy_and_check(sbx_sandbox *sb, int real)
{
    char *id = strdup(sbx_sandbox_get0_id(sb));
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "destroy: %s",
                 err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    if (real)
        assert_container_gone(id);
    free(id);
}

static char *sha_of(const void *p, size_t n)
{
    char hex[65];
    tu_sha256_hex(p, n, hex);
    return strdup(hex);
}

/* ============================================================ the fake Engine */

#define FAKE_LOG_MAX 512

typedef struct fake fake;
/* Answers one request on connection @fd (which it may keep for a stream);
 * the connection is closed after it returns. */
typedef void (*fake_fn)(fake *f, int fd, const char *method, const char *path,
                        const char *body);

struct fake {
    char dir[80];
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int lfd;
    pthread_t thread;
    volatile int stop;
    fake_fn fn;
    int variant;
    pthread_mutex_t lock;
    char *log[FAKE_LOG_MAX];
    int nlog;
    int active;                 /* connection threads running */
    int inspects;               /* GET /exec/e1/json answered */
    int kills;                  /* kill execs created */
    double t0;
};

static fake g_fake;

static void fake_log(fake *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fake_log(fake *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    pthread_mutex_lock(&f->lock);
    if (s && f->nlog < FAKE_LOG_MAX)
        f->log[f->nlog++] = s;
    else
        free(s);
    pthread_mutex_unlock(&f->lock);
}

/* Index of the first log line starting with @prefix, or -1. */
static int fake_find(fake *f, const char *prefix)
{
    pthread_mutex_lock(&f->lock);
    int at = -1;
    for (int i = 0; i < f->nlog && at < 0; i++)
        if (strncmp(f->log[i], prefix, strlen(prefix)) == 0)
            at = i;
    pthread_mutex_unlock(&f->lock);
    return at;
}

static int fake_count(fake *f, const char *prefix)
{
    pthread_mutex_lock(&f->lock);
    int n = 0;
    for (int i = 0; i < f->nlog; i++)
        if (strncmp(f->log[i], prefix, strlen(prefix)) == 0)
            n++;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static void fake_dump(fake *f)
{
    pthread_mutex_lock(&f->lock);
    for (int i = 0; i < f->nlog; i++)
        fprintf(stderr, "fake log %d: %s\n", i, f->log[i]);
    pthread_mutex_unlock(&f->lock);
}

static void send_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;             /* the client went away */
        s += w;
        n -= (size_t)w;
    }
}

/* A complete answer with a JSON (or text) body. */
static void reply(int fd, int status, const char *body)
{
    const char *reason = status == 200 ? "OK" : status == 201 ? "Created"
                       : status == 204 ? "No Content" : status == 404 ? "Not Found"
                       : status == 409 ? "Conflict" : "Error";
    char *head = tu_strdup_printf("HTTP/1.1 %d %s\r\nApi-Version: 1.41\r\n"
                                  "Content-Type: application/json\r\nDocker-Experimental: false\r\n"
                                  "Ostype: linux\r\nServer: Docker/20.10.24 (linux)\r\n"
                                  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                                  status, reason, status == 204 ? 0 : strlen(body));
    send_all(fd, head, strlen(head));
    if (status != 204)
        send_all(fd, body, strlen(body));
    free(head);
}

/* The start of a hijacked exec stream, as the Engine answers it. */
static void upgrade(int fd)
{
    static const char head[] = "HTTP/1.1 101 UPGRADED\r\n"
                               "Content-Type: application/vnd.docker.raw-stream\r\n"
                               "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
    send_all(fd, head, sizeof head - 1);
}

/* Appends a frame [stream,0,0,0,len] + @p to @out. */
static void put_frame(FILE *out, int stream, const void *p, uint32_t n)
{
    unsigned char h[8] = { (unsigned char)stream, 0, 0, 0, (unsigned char)(n >> 24),
                           (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n };
    fwrite(h, 1, 8, out);
    fwrite(p, 1, n, out);
}

static void frame_now(int fd, int stream, const char *text)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    put_frame(f, stream, text, (uint32_t)strlen(text));
    fclose(f);
    send_all(fd, buf, len);
    free(buf);
}

typedef struct conn_arg {
    fake *f;
    int fd;
} conn_arg;

static void *conn_main(void *arg)
{
    conn_arg *ca = arg;
    fake *f = ca->f;
    int fd = ca->fd;
    free(ca);
    char *buf = malloc(1 << 20);
    size_t len = 0;
    char *end = NULL;
    while (!end && len < (1 << 20) - 1) {
        ssize_t n = recv(fd, buf + len, (1 << 20) - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (end) {
        char method[16] = "", path[4096] = "";
        sscanf(buf, "%15s %4095s", method, path);
        size_t clen = 0;
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (cl && cl < end)
            clen = strtoul(cl + 17, NULL, 10);
        size_t have = len - (size_t)(end + 4 - buf);
        while (have < clen && len < (1 << 20) - 1) {
            ssize_t n = recv(fd, buf + len, (1 << 20) - 1 - len, 0);
            if (n <= 0)
                break;
            len += (size_t)n;
            have += (size_t)n;
        }
        buf[len] = '\0';
        fake_log(f, "%s %s", method, path);
        f->fn(f, fd, method, path, end + 4);
    }
    free(buf);
    close(fd);
    pthread_mutex_lock(&f->lock);
    f->active--;
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

static void *accept_main(void *arg)
{
    fake *f = arg;
    while (!f->stop) {
        struct pollfd p = { .fd = f->lfd, .events = POLLIN };
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        conn_arg *ca = malloc(sizeof *ca);
        ca->f = f;
        ca->fd = c;
        pthread_mutex_lock(&f->lock);
        f->active++;
        pthread_mutex_unlock(&f->lock);
        pthread_t t;
        if (pthread_create(&t, NULL, conn_main, ca) == 0) {
            pthread_detach(t);
        } else {
            close(c);
            free(ca);
            pthread_mutex_lock(&f->lock);
            f->active--;
            pthread_mutex_unlock(&f->lock);
        }
    }
    return NULL;
}

static void fake_start_on(fake_fn fn, int variant, int tcp);

/* Starts the fake Engine on a unix socket in a new temporary directory and
 * points DOCKER_HOST at it. */
static void fake_start(fake_fn fn, int variant)
{
    fake_start_on(fn, variant, 0);
}

/* The same on 127.0.0.1 (an ephemeral port): DOCKER_HOST=tcp://... */
static void fake_start_tcp(fake_fn fn, int variant)
{
    fake_start_on(fn, variant, 1);
}

static void fake_start_on(fake_fn fn, int variant, int tcp)
{
    fake *f = &g_fake;
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
    f->fn = fn;
    f->variant = variant;
    f->t0 = tu_now();
    char *d = tu_mkdtemp("fake-engine");
    cr_assert(strlen(d) + sizeof "/engine.sock" <= sizeof f->sock, "TMPDIR too long: %s", d);
    snprintf(f->dir, sizeof f->dir, "%.79s", d);
    snprintf(f->sock, sizeof f->sock, "%.79s/engine.sock", d);
    free(d);
    char *h;
    if (tcp) {
        f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(f->lfd >= 0);
        struct sockaddr_in in = { .sin_family = AF_INET,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof in;
        cr_assert_eq(bind(f->lfd, (struct sockaddr *)&in, sizeof in), 0);
        cr_assert_eq(getsockname(f->lfd, (struct sockaddr *)&in, &sl), 0);
        h = tu_strdup_printf("tcp://127.0.0.1:%d", ntohs(in.sin_port));
    } else {
        f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(f->lfd >= 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        memcpy(sa.sun_path, f->sock, sizeof sa.sun_path);
        cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0, "bind: %s",
                     strerror(errno));
        h = tu_strdup_printf("unix://%s", f->sock);
    }
    cr_assert_eq(listen(f->lfd, 64), 0);
    cr_assert_eq(pthread_create(&f->thread, NULL, accept_main, f), 0);
    setenv("DOCKER_HOST", h, 1);
    free(h);
}

static void fake_stop(void)
{
    fake *f = &g_fake;
    f->stop = 1;
    pthread_join(f->thread, NULL);
    double end = tu_now() + 10.0;
    for (;;) {
        pthread_mutex_lock(&f->lock);
        int a = f->active;
        pthread_mutex_unlock(&f->lock);
        if (a == 0 || tu_now() > end)
            break;
        usleep(10000);
    }
    close(f->lfd);
    unlink(f->sock);
    rmdir(f->dir);
    for (int i = 0; i < f->nlog; i++)
        free(f->log[i]);
    f->nlog = 0;
    char *h = tu_strdup_printf("unix://%s", g_real_sock);
    setenv("DOCKER_HOST", h, 1);
    free(h);
}

/* ---------------------------------------------------- a fake container */

#define FAKE_CID "c0ffee0000000000000000000000000000000000000000000000000000000001"

enum {
    V_HI_7 = 1,         /* CASE-26 (2) */
    V_NEVER_STARTED,    /* CASE-26 (3) */
    V_RUNNING_FOREVER,  /* CASE-26 (4) */
    V_SPLIT,            /* CASE-10 framing, split at every awkward place */
    V_BAD_HEADER,       /* a frame header with stream byte 7 */
    V_HOSTILE_TAR,      /* CASE-11: download_dir gets a hostile archive */
    V_OOM,              /* CASE-49 B: the exec's end is the container's OOM kill */
};

/* CASE-10's output, and the framed stream carrying it. */
static char *g_c10_out, *g_c10_err, *g_c10_stream;
static size_t g_c10_out_len, g_c10_err_len, g_c10_stream_len;

static void case10_expected(char **out, size_t *outn, char **err, size_t *errn)
{
    FILE *fo = open_memstream(out, outn), *fe = open_memstream(err, errn);
    for (int i = 1; i <= 2000; i++) {
        fprintf(fo, "line%d\n", i);
        fprintf(fe, "err%d\n", i);
    }
    for (int i = 0; i < 3000000; i++)
        fputc('y', fo);
    fclose(fo);
    fclose(fe);
}

/* Frames of awkward sizes (1 byte, not line-aligned, a zero-length one,
 * over 1 MiB), stdout and stderr interleaved. */
static void case10_build_stream(void)
{
    case10_expected(&g_c10_out, &g_c10_out_len, &g_c10_err, &g_c10_err_len);
    FILE *f = open_memstream(&g_c10_stream, &g_c10_stream_len);
    static const size_t sizes[] = { 1, 7, 13, 0, 4096, 9, 65537, 3, 1048577, 500 };
    size_t o = 0, e = 0, k = 0;
    while (o < g_c10_out_len || e < g_c10_err_len) {
        size_t n = sizes[k++ % (sizeof sizes / sizeof sizes[0])];
        if (o < g_c10_out_len) {
            size_t take = n < g_c10_out_len - o ? n : g_c10_out_len - o;
            put_frame(f, 1, g_c10_out + o, (uint32_t)take);
            o += take;
        }
        if (e < g_c10_err_len) {
            size_t take = n < g_c10_err_len - e ? n : g_c10_err_len - e;
            if (take)
                put_frame(f, 2, g_c10_err + e, (uint32_t)take);
            e += take;
        }
    }
    fclose(f);
}

/* The hostile archive of CASE-11 (built by libarchive-free hand: ustar). */
static void ustar_entry(FILE *f, const char *name, char type, const char *link,
                        const char *data, size_t len, unsigned mode)
{
    unsigned char h[512];
    memset(h, 0, sizeof h);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", mode);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011zo", len);
    snprintf((char *)h + 136, 12, "%011o", 1700000000);
    memset(h + 148, ' ', 8);
    h[156] = (unsigned char)type;
    if (link)
        snprintf((char *)h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    fwrite(h, 1, 512, f);
    if (len) {
        fwrite(data, 1, len, f);
        static const char zeros[512];
        fwrite(zeros, 1, (512 - len % 512) % 512, f);
    }
}

static char *g_abs_escape;

static char *hostile_tar(size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    ustar_entry(f, "./", '5', NULL, NULL, 0, 0755);
    ustar_entry(f, "ok.txt", '0', NULL, "ok\n", 3, 0644);
    ustar_entry(f, "../escape1.txt", '0', NULL, "x\n", 2, 0644);
    ustar_entry(f, "sub/../../escape2.txt", '0', NULL, "x\n", 2, 0644);
    ustar_entry(f, g_abs_escape, '0', NULL, "x\n", 2, 0644);
    ustar_entry(f, "hl", '1', "/etc/passwd", NULL, 0, 0644);
    static const char end[1024];
    fwrite(end, 1, sizeof end, f);
    fclose(f);
    return buf;
}

static char *b64(const char *s)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(s);
    char *o = malloc(n / 3 * 4 + 8), *p = o;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)s[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)s[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)s[i + 2];
        *p++ = t[v >> 18 & 63];
        *p++ = t[v >> 12 & 63];
        *p++ = i + 1 < n ? t[v >> 6 & 63] : '=';
        *p++ = i + 2 < n ? t[v & 63] : '=';
    }
    *p = '\0';
    return o;
}

static void fake_container_fn(fake *f, int fd, const char *method, const char *path,
                              const char *body)
{
    if (strcmp(path, "/_ping") == 0) {
        reply(fd, 200, "OK");
        return;
    }
    if (strncmp(path, "/v1.41/", 7) != 0) {
        reply(fd, 400, "{\"message\":\"client version is not 1.41\"}");
        return;
    }
    const char *p = path + 6;
    if (strcmp(method, "GET") == 0 && strncmp(p, "/images/", 8) == 0) {
        reply(fd, 200, "{\"Id\":\"sha256:fa4e\",\"Config\":{\"WorkingDir\":\"\","
                       "\"Env\":[\"PATH=/usr/bin:/bin\"]}}");
    } else if (strcmp(method, "POST") == 0 && strncmp(p, "/containers/create", 18) == 0) {
        reply(fd, 201, "{\"Id\":\"" FAKE_CID "\",\"Warnings\":[]}");
    } else if (strcmp(method, "POST") == 0 && strcmp(p, "/containers/" FAKE_CID "/start") == 0) {
        reply(fd, 204, "");
    } else if (f->variant == V_OOM && f->inspects > 0 && strcmp(method, "GET") == 0
               && strcmp(p, "/containers/" FAKE_CID "/json") == 0) {
        /* Once the exec ended, the whole container was OOM-killed. */
        reply(fd, 200, "{\"Id\":\"" FAKE_CID "\",\"State\":{\"Status\":\"exited\","
                       "\"Running\":false,\"OOMKilled\":true,\"ExitCode\":137},"
                       "\"HostConfig\":{\"Memory\":67108864},\"Config\":{\"WorkingDir\":\"\","
                       "\"Labels\":{\"sbx.backend\":\"docker\"}}}");
    } else if (f->variant == V_OOM && f->inspects > 0 && strcmp(method, "POST") == 0
               && strcmp(p, "/containers/" FAKE_CID "/exec") == 0) {
        reply(fd, 409, "{\"message\":\"container " FAKE_CID " is not running\"}");
    } else if (strcmp(method, "GET") == 0 && strcmp(p, "/containers/" FAKE_CID "/json") == 0) {
        reply(fd, 200, "{\"Id\":\"" FAKE_CID "\",\"State\":{\"Status\":\"running\","
                       "\"Running\":true},\"Config\":{\"WorkingDir\":\"\",\"Labels\":"
                       "{\"sbx.backend\":\"docker\"}}}");
    } else if (strcmp(method, "DELETE") == 0 && strncmp(p, "/containers/" FAKE_CID, 76) == 0) {
        reply(fd, 204, "");
    } else if (strcmp(method, "POST") == 0 && strcmp(p, "/containers/" FAKE_CID "/exec") == 0) {
        if (strstr(body, "sbx-kill")) {
            pthread_mutex_lock(&f->lock);
            int k = ++f->kills;
            pthread_mutex_unlock(&f->lock);
            char *ans = tu_strdup_printf("{\"Id\":\"k%d\"}", k);
            reply(fd, 201, ans);
            free(ans);
        } else {
            reply(fd, 201, "{\"Id\":\"e1\"}");
        }
    } else if (strcmp(method, "POST") == 0 && strncmp(p, "/exec/k", 7) == 0) {
        /* The kill helper: it found no process. */
        upgrade(fd);
        frame_now(fd, 1, "0\n");
    } else if (strcmp(method, "GET") == 0 && strncmp(p, "/exec/k", 7) == 0) {
        reply(fd, 200, "{\"Running\":false,\"ExitCode\":0,\"Pid\":0}");
    } else if (strcmp(method, "POST") == 0 && strcmp(p, "/exec/e1/start") == 0) {
        upgrade(fd);
        switch (f->variant) {
        case V_HI_7:
        case V_RUNNING_FOREVER:
            frame_now(fd, 1, "hi\n");
            usleep(300000);     /* an inspect now would come before the EOF */
            break;
        case V_NEVER_STARTED:
            break;
        case V_SPLIT: {
            static const size_t cuts[] = { 1, 2, 3, 5, 8, 9, 4095, 7, 65536, 131073, 11 };
            size_t off = 0, k = 0;
            while (off < g_c10_stream_len) {
                size_t n = cuts[k++ % (sizeof cuts / sizeof cuts[0])];
                if (n > g_c10_stream_len - off)
                    n = g_c10_stream_len - off;
                send_all(fd, g_c10_stream + off, n);
                off += n;
                if (k % 97 == 0)
                    usleep(1000);
            }
            break;
        }
        case V_BAD_HEADER: {
            static const unsigned char bad[] = { 1, 0, 0, 0, 0, 0, 0, 3, 'o', 'k', '\n',
                                                 7, 0, 0, 0, 0, 0, 0, 3, 'z', 'z', 'z' };
            send_all(fd, bad, sizeof bad);
            break;
        }
        }
        fake_log(f, "stream-end e1");
    } else if (strcmp(method, "GET") == 0 && strcmp(p, "/exec/e1/json") == 0) {
        pthread_mutex_lock(&f->lock);
        int n = ++f->inspects;
        pthread_mutex_unlock(&f->lock);
        switch (f->variant) {
        case V_HI_7:
            reply(fd, 200, n <= 2 ? "{\"ID\":\"e1\",\"Running\":true,\"ExitCode\":null,\"Pid\":4242}"
                                  : "{\"ID\":\"e1\",\"Running\":false,\"ExitCode\":7,\"Pid\":4242}");
            break;
        case V_NEVER_STARTED:
            reply(fd, 200, "{\"ID\":\"e1\",\"Running\":false,\"ExitCode\":null,\"Pid\":0}");
            break;
        case V_RUNNING_FOREVER:
            reply(fd, 200, "{\"ID\":\"e1\",\"Running\":true,\"ExitCode\":null,\"Pid\":4242}");
            break;
        case V_OOM:
            reply(fd, 200, "{\"ID\":\"e1\",\"Running\":false,\"ExitCode\":137,\"Pid\":4242}");
            break;
        default:
            reply(fd, 200, "{\"ID\":\"e1\",\"Running\":false,\"ExitCode\":0,\"Pid\":4242}");
            break;
        }
    } else if (strcmp(method, "HEAD") == 0 && strstr(p, "/archive?path=")) {
        char *st = b64("{\"name\":\"out\",\"size\":4096,\"mode\":2147484141,"
                       "\"mtime\":\"2026-11-29T09:00:00Z\",\"linkTarget\":\"\"}");
        char *head = tu_strdup_printf("HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\n"
                                      "Content-Type: application/x-tar\r\n"
                                      "X-Docker-Container-Path-Stat: %s\r\n"
                                      "Connection: close\r\n\r\n", st);
        send_all(fd, head, strlen(head));
        free(head);
        free(st);
    } else if (strcmp(method, "GET") == 0 && strstr(p, "/archive?path=")) {
        size_t len;
        char *tar = hostile_tar(&len);
        char *head = tu_strdup_printf("HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\n"
                                      "Content-Type: application/x-tar\r\n"
                                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", len);
        send_all(fd, head, strlen(head));
        send_all(fd, tar, len);
        free(head);
        free(tar);
    } else {
        reply(fd, 404, "{\"message\":\"page not found\"}");
    }
}

/* A sandbox on the fake Engine. */
static sbx_sandbox *fake_sandbox(sbx_client **c)
{
    *c = client_new();
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_image(o, "alpine:3.20", NULL), 0);
    sbx_sandbox *sb = tu_create(*c, o);
    sbx_options_free(o);
    cr_assert_str_eq(sbx_sandbox_get0_id(sb), FAKE_CID);
    return sb;
}

static void fake_sandbox_end(sbx_sandbox *sb, sbx_client *c)
{
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    cr_assert(fake_find(&g_fake, "DELETE /v1.41/containers/" FAKE_CID) >= 0,
              "the sandbox was not removed");
}

TestSuite(fake, .init = common_setup, .fini = common_teardown, .timeout = 60);
TestSuite(real, .init = common_setup, .fini = common_teardown, .timeout = 240);
TestSuite(slow, .init = common_setup, .fini = common_teardown, .timeout = 900);
TestSuite(pull_progress, .timeout = 10);

/* ================================================================ CASE-10 */

static const char case10_script[] =
    "i=1; while [ $i -le 2000 ]; do echo line$i; echo err$i >&2; i=$((i+1)); done; "
    "head -c 3000000 /dev/zero | tr '\\0' y";

static void case10_check(sbx_result *r)
{
    size_t on, en;
    const char *out = sbx_result_get0_stdout(r, &on), *err = sbx_result_get0_stderr(r, &en);
    tu_assert_exit(r, 0);
    cr_assert_eq(on, 3016893, "stdout is %zu bytes", on);
    cr_assert_eq(en, 14893, "stderr is %zu bytes", en);
    char *so = sha_of(out, on), *se = sha_of(err, en);
    cr_assert_str_eq(so, "3a1854a8515cb694739ed222a37518619ea5fe5ffe38e2ab03dea0740d13b957");
    cr_assert_str_eq(se, "e0fb3eba29c8e58b64fcbffd74447b2ac7826eb2cae84f909c645b18bd8dcea1");
    free(so);
    free(se);
}

Test(real, case10_framing_byte_exact)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    for (int round = 0; round < 3; round++) {
        sbx_result *r = tu_sh(sb, case10_script, 60);
        case10_check(r);
        sbx_result_free(r);
    }
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}

Test(fake, case10_frames_split_everywhere)
{
    case10_build_stream();
    fake_start(fake_container_fn, V_SPLIT);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    sbx_result *r = tu_sh(sb, case10_script, 60);
    tu_assert_exit(r, 0);
    tu_assert_stdout_bytes(r, g_c10_out, g_c10_out_len);
    tu_assert_stderr_bytes(r, g_c10_err, g_c10_err_len);
    case10_check(r);
    sbx_result_free(r);
    fake_sandbox_end(sb, c);
    fake_stop();
    free(g_c10_out);
    free(g_c10_err);
    free(g_c10_stream);
}

Test(fake, case10_malformed_header_is_an_error)
{
    fake_start(fake_container_fn, V_BAD_HEADER);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo ok";
    sbx_error *err = tu_exec_fail(sb, &req, SBX_ERROR_EXECUTION_FAILED);
    tu_assert_error(err, SBX_ERROR_EXECUTION_FAILED, "malformed exec stream", "07 00 00 00",
                    NULL);
    cr_assert_str_eq(sbx_error_get0_backend(err), "docker");
    sbx_error_free(err);
    fake_sandbox_end(sb, c);
    fake_stop();
}

/* ================================================================ CASE-26 */

Test(real, case26_exit_codes_after_the_end)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    const char *f[] = { "false", NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = f;
    sbx_result *r = tu_exec(sb, &req);
    tu_assert_exit(r, 1);
    sbx_result_free(r);
    r = tu_sh(sb, "exit 7", 10);
    tu_assert_exit(r, 7);
    sbx_result_free(r);
    for (int i = 0; i < 100; i++) {
        r = tu_sh(sb, "sleep 0.05; exit 3", 10);
        cr_assert_eq(sbx_result_get_exit_code(r), 3, "run %d: exit %d", i,
                     sbx_result_get_exit_code(r));
        cr_assert_eq(sbx_result_is_timed_out(r), 0);
        sbx_result_free(r);
    }
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}

Test(fake, case26_null_exit_code_while_running)
{
    fake_start(fake_container_fn, V_HI_7);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    sbx_result *r = tu_sh(sb, "echo hi; exit 7", 10);
    tu_assert_exit(r, 7);
    tu_assert_stdout(r, "hi\n");
    tu_assert_stderr(r, "");
    sbx_result_free(r);
    int eof = fake_find(&g_fake, "stream-end e1");
    int first = fake_find(&g_fake, "GET /v1.41/exec/e1/json");
    if (eof < 0 || first < 0 || first < eof)
        fake_dump(&g_fake);
    cr_assert(eof >= 0 && first > eof, "inspect (log line %d) before the stream's EOF (%d)",
              first, eof);
    cr_assert(fake_count(&g_fake, "GET /v1.41/exec/e1/json") >= 3, "only %d inspects",
              fake_count(&g_fake, "GET /v1.41/exec/e1/json"));
    fake_sandbox_end(sb, c);
    fake_stop();
}

Test(fake, case26_over_tcp)
{
    fake_start_tcp(fake_container_fn, V_HI_7);
    cr_assert_eq(strncmp(getenv("DOCKER_HOST"), "tcp://127.0.0.1:", 16), 0);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    sbx_result *r = tu_sh(sb, "echo hi; exit 7", 10);
    tu_assert_exit(r, 7);
    tu_assert_stdout(r, "hi\n");
    sbx_result_free(r);
    cr_assert(fake_find(&g_fake, "GET /v1.41/exec/e1/json") > fake_find(&g_fake, "stream-end e1"));
    fake_sandbox_end(sb, c);
    fake_stop();
}

Test(fake, case26_never_started_is_an_error)
{
    fake_start(fake_container_fn, V_NEVER_STARTED);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "true";
    req.timeout_secs = 10;
    double t0 = tu_now();
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(sb, &req, &err);
    double dt = tu_now() - t0;
    cr_assert_null(r, "a result (exit %d) for an exec that never started",
                   r ? sbx_result_get_exit_code(r) : -1);
    tu_assert_error(err, SBX_ERROR_EXECUTION_FAILED, "exit status unknown", NULL);
    cr_assert(dt < 6.0, "took %.2f s", dt);
    sbx_error_free(err);
    fake_sandbox_end(sb, c);
    fake_stop();
}

Test(fake, case26_running_forever_is_exit_unknown)
{
    fake_start(fake_container_fn, V_RUNNING_FOREVER);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "echo hi";
    req.timeout_secs = 5;
    double t0 = tu_now();
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_command(sb, &req, &err);
    double dt = tu_now() - t0;
    if (r) {
        cr_assert_eq(sbx_result_is_timed_out(r), 1, "exit %d without timed_out",
                     sbx_result_get_exit_code(r));
        cr_assert_eq(sbx_result_get_exit_code(r), 124);
        sbx_result_free(r);
    } else {
        tu_assert_error(err, SBX_ERROR_EXECUTION_FAILED, "exit status unknown", NULL);
        sbx_error_free(err);
    }
    cr_assert(dt >= 4.9 && dt < 8.0, "took %.2f s", dt);
    cr_assert(g_fake.kills >= 1, "the process tree was not signalled");
    fake_sandbox_end(sb, c);
    fake_stop();
}

/* ================================================================ CASE-49 */

/*
 * CASE-49 B: the whole container is OOM-killed while a command runs: the
 * exec stream ends with no frames, exec inspect answers Running:false
 * ExitCode:137, the container's state OOMKilled:true. The exec fails with
 * not_found naming the memory limit and saying the sandbox ended (not
 * connection, not retryable, not retried: one exec of the command), and
 * every later call fails the same way without asking the Engine to run
 * anything.
 */
Test(fake, case49_b_the_container_killed_by_its_memory_limit)
{
    static const char want[] = "sandbox c0ffee000000 ended: its memory limit (64 MiB) killed "
                               "the container's main process (out of memory); the command "
                               "ended with exit code 137";
    fake_start(fake_container_fn, V_OOM);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "python3 -c 'b=bytearray(256*1024*1024)'";
    req.timeout_secs = 10;
    sbx_error *err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "oom_killed");
    cr_assert_str_eq(sbx_error_get0_context(err, "memory_mb"), "64");
    cr_assert_str_eq(sbx_error_get0_backend(err), "docker");
    cr_assert_eq(sbx_error_is_retryable(err), 0);
    sbx_error_free(err);
    cr_assert_eq(fake_count(&g_fake, "POST /v1.41/exec/e1/start"), 1, "the command was retried");

    req.shell = "echo next";
    err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    cr_assert_str_eq(sbx_error_get0_context(err, "reason"), "oom_killed");
    sbx_error_free(err);
    err = NULL;
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(sbx_sandbox_read_file(sb, "/etc/hostname", &data, &len, &err), -1);
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    sbx_error_free(err);
    /* Exec create: the command, then the counter read the dead container
     * refused; nothing after the sandbox was known to be gone. */
    cr_assert_eq(fake_count(&g_fake, "POST /v1.41/containers/" FAKE_CID "/exec"), 2);
    fake_sandbox_end(sb, c);
    fake_stop();
}

/* ========================================================== pull progress */

/* A pull as the Engine streams it (POST /images/create), one JSON object a
 * line: a layer already here, two downloaded, then the digest. */
static const char *const pull_stream[] = {
    "{\"status\":\"Pulling from library/alpine\",\"id\":\"3.20\"}",
    "{\"status\":\"Already exists\",\"progressDetail\":{},\"id\":\"aaaa00000001\"}",
    "{\"status\":\"Pulling fs layer\",\"progressDetail\":{},\"id\":\"bbbb00000002\"}",
    "{\"status\":\"Pulling fs layer\",\"progressDetail\":{},\"id\":\"cccc00000003\"}",
    "{\"status\":\"Waiting\",\"progressDetail\":{},\"id\":\"cccc00000003\"}",
    "{\"status\":\"Downloading\",\"progressDetail\":{\"current\":512,\"total\":3419706},"
    "\"progress\":\"[>    ]     512B/3.42MB\",\"id\":\"bbbb00000002\"}",
    "{\"status\":\"Downloading\",\"progressDetail\":{\"current\":1048576,\"total\":3419706},"
    "\"progress\":\"[====>    ]  1.049MB/3.42MB\",\"id\":\"bbbb00000002\"}",
    "{\"status\":\"Downloading\",\"progressDetail\":{\"current\":700,\"total\":900},"
    "\"id\":\"cccc00000003\"}",
    "{\"status\":\"Verifying Checksum\",\"progressDetail\":{},\"id\":\"cccc00000003\"}",
    "{\"status\":\"Download complete\",\"progressDetail\":{},\"id\":\"cccc00000003\"}",
    "{\"status\":\"Download complete\",\"progressDetail\":{},\"id\":\"bbbb00000002\"}",
    "{\"status\":\"Extracting\",\"progressDetail\":{\"current\":32768,\"total\":3419706},"
    "\"id\":\"bbbb00000002\"}",
    "{\"status\":\"Pull complete\",\"progressDetail\":{},\"id\":\"bbbb00000002\"}",
    "{\"status\":\"Extracting\",\"progressDetail\":{\"current\":900,\"total\":900},"
    "\"id\":\"cccc00000003\"}",
    "{\"status\":\"Pull complete\",\"progressDetail\":{},\"id\":\"cccc00000003\"}",
    "{\"status\":\"Digest: sha256:beefdead\"}",
    "not json",
    "{\"status\":\"Status: Downloaded newer image for alpine:3.20\"}",
};

/* The summary line after each line of the stream, when it changed. */
Test(pull_progress, lines_from_a_captured_pull_stream)
{
    static const char *const want[] = {
        NULL,
        "pulling alpine:3.20: 1/1 layers",
        "pulling alpine:3.20: 1/2 layers",
        "pulling alpine:3.20: 1/3 layers",
        NULL,
        "pulling alpine:3.20: 1/3 layers, 512 B of 3.4 MB",
        "pulling alpine:3.20: 1/3 layers, 1.0 MB of 3.4 MB",
        NULL,   /* 1.0 MB of 3.4 MB still */
        NULL,
        NULL,
        "pulling alpine:3.20: 1/3 layers, 3.4 MB of 3.4 MB",
        NULL,   /* extracting moves no download bytes */
        "pulling alpine:3.20: 2/3 layers, 3.4 MB of 3.4 MB",
        NULL,
        "pulling alpine:3.20: 3/3 layers, 3.4 MB of 3.4 MB",
        NULL,
        NULL,
        NULL,
    };
    dk_pull_progress p = { .image = "alpine:3.20" };
    size_t n = sizeof pull_stream / sizeof pull_stream[0];
    cr_assert_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) {
        int rc = dk_pull_progress_feed(&p, pull_stream[i]);
        cr_assert_eq(rc, want[i] ? 1 : 0, "line %zu: rc %d (line \"%s\")", i, rc, p.line);
        if (want[i])
            cr_assert_str_eq(p.line, want[i], "line %zu", i);
    }
    cr_assert_eq(p.count, 3);
    dk_pull_progress_clear(&p);
    cr_assert_eq(p.count, 0);
    cr_assert_str_eq(p.line, "");
}

Test(pull_progress, byte_units_as_docker_shows_them)
{
    static const struct { int64_t n; const char *s; } cases[] = {
        { 0, "0 B" }, { 999, "999 B" }, { 1000, "1.0 kB" }, { 12345, "12.3 kB" },
        { 999949, "999.9 kB" }, { 3419706, "3.4 MB" }, { 1250000000, "1.25 GB" },
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dk_pull_progress_bytes(cases[i].n, buf, sizeof buf);
        cr_assert_str_eq(buf, cases[i].s, "%lld", (long long)cases[i].n);
    }
}

/* An image that is here already is not pulled: the create asks for it
 * (GET /images/NAME/json) and never posts /images/create. */
Test(fake, pull_path_a_local_image_is_not_pulled)
{
    fake_start(fake_container_fn, 0);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    cr_assert(fake_find(&g_fake, "GET /v1.41/images/alpine:3.20/json") >= 0);
    cr_assert_eq(fake_find(&g_fake, "POST /v1.41/images/create"), -1, "a local image was pulled");
    fake_sandbox_end(sb, c);
    fake_stop();
}

/* ================================================================ CASE-28 */

/* A pull's answer as the Engine starts it: the head, then its first line. */
static const char pull_head[] = "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\n"
                                "Content-Type: application/json\r\nConnection: close\r\n\r\n";
static const char pull_first[] = "{\"status\":\"Pulling from library/alpine\",\"id\":\"3.20\"}\r\n";

static void case28_fn(fake *f, int fd, const char *method, const char *path, const char *body)
{
    if (strcmp(path, "/_ping") == 0) {
        reply(fd, 200, "OK");
    } else if (strcmp(method, "GET") == 0 && strcmp(path, "/v1.41/images/alpine:3.20/json") == 0) {
        reply(fd, 404, "{\"message\":\"No such image: alpine:3.20\"}");
    } else if (strcmp(method, "POST") == 0
               && strcmp(path, "/v1.41/images/create?fromImage=alpine&tag=3.20") == 0) {
        static const char l2[] = "{\"errorDetail\":{\"message\":\"toomanyrequests: pull rate "
                                 "limit reached\"},\"error\":\"toomanyrequests: pull rate limit "
                                 "reached\"}\r\n";
        send_all(fd, pull_head, sizeof pull_head - 1);
        send_all(fd, pull_first, sizeof pull_first - 1);
        if (f->variant == 2) {
            /* Two TCP writes, split inside "toomanyrequests". */
            const char *cut = strstr(l2, "manyreq");
            usleep(100000);
            send_all(fd, l2, (size_t)(cut - l2));
            usleep(200000);
            send_all(fd, cut, strlen(cut));
        } else {
            send_all(fd, l2, sizeof l2 - 1);
        }
    } else if (strcmp(method, "POST") == 0 && strncmp(path, "/v1.41/containers/create", 24) == 0) {
        reply(fd, 404, "{\"message\":\"No such image: alpine:3.20\"}");
    } else {
        reply(fd, 404, "{\"message\":\"page not found\"}");
    }
}

static void case28_fake(int variant)
{
    fake_start(case28_fn, variant);
    sbx_client *c = client_new();
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_image(o, "alpine:3.20", NULL), 0);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
    sbx_options_free(o);
    cr_assert_null(sb, "create succeeded although the pull failed");
    tu_assert_error(err, SBX_ERROR_CREATION_FAILED, "toomanyrequests: pull rate limit reached",
                    "alpine:3.20", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "step"), "image_pull");
    cr_assert_str_eq(sbx_error_get0_context(err, "image"), "alpine:3.20");
    sbx_error_free(err);
    cr_assert(fake_find(&g_fake, "POST /v1.41/images/create?fromImage=alpine&tag=3.20") >= 0);
    cr_assert_eq(fake_find(&g_fake, "POST /v1.41/containers/create"), -1,
                 "a container create followed the failed pull");
    cr_assert_eq(fake_find(&g_fake, "DELETE"), -1, "something was made to clean up");
    sbx_client_free(c);
    fake_stop();
}

Test(fake, case28_a_pull_error_line)
{
    case28_fake(1);
}

Test(fake, case28_b_error_line_split_across_writes)
{
    case28_fake(2);
}

/* ============================================ lifetime from when usable */

/* A pull that takes 2 s, then the plain fake container; the create body
 * is kept for the test to read. */
static char *g_slow_create_body;
static int g_slow_pulled;

static void slow_pull_fn(fake *f, int fd, const char *method, const char *path, const char *body)
{
    if (strcmp(method, "GET") == 0 && strcmp(path, "/v1.41/images/alpine:3.20/json") == 0
        && !__atomic_load_n(&g_slow_pulled, __ATOMIC_SEQ_CST)) {
        reply(fd, 404, "{\"message\":\"No such image: alpine:3.20\"}");
    } else if (strcmp(method, "POST") == 0
               && strcmp(path, "/v1.41/images/create?fromImage=alpine&tag=3.20") == 0) {
        static const char l2[] = "{\"status\":\"Status: Downloaded newer image for "
                                 "alpine:3.20\"}\r\n";
        send_all(fd, pull_head, sizeof pull_head - 1);
        send_all(fd, pull_first, sizeof pull_first - 1);
        usleep(2000000);
        __atomic_store_n(&g_slow_pulled, 1, __ATOMIC_SEQ_CST);
        send_all(fd, l2, sizeof l2 - 1);
    } else {
        if (strcmp(method, "POST") == 0 && strncmp(path, "/v1.41/containers/create", 24) == 0) {
            pthread_mutex_lock(&f->lock);
            free(g_slow_create_body);
            g_slow_create_body = strdup(body);
            pthread_mutex_unlock(&f->lock);
        }
        fake_container_fn(f, fd, method, path, body);
    }
}

/* Issue 14: the lifetime counts from when the sandbox is usable, not from
 * the request. A create whose pull takes 2 s with a 60 s lifetime: the
 * container's sbx.expires_at label and the record's expiry both end 60 s
 * after the pull (the label, whole seconds rounded up, is counted as the
 * body is made; the record's once create returned), never 60 s after the
 * request. */
Test(fake, lifetime_counts_from_after_the_pull)
{
    char *state = tu_strdup_printf("%s/state", g_tmp);
    cr_assert_eq(setenv("SBX_STATE_DIR", state, 1), 0);
    g_slow_pulled = 0;
    fake_start(slow_pull_fn, 0);
    sbx_client *c = client_new();
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_image(o, "alpine:3.20", NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 60, NULL), 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t0 = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    sbx_sandbox *sb = tu_create(c, o);
    clock_gettime(CLOCK_REALTIME, &ts);
    double t1 = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    sbx_options_free(o);
    cr_assert(t1 - t0 >= 2.0, "the create took %.3f s, not the pull's 2 s", t1 - t0);
    cr_assert_eq(fake_count(&g_fake, "POST /v1.41/images/create?fromImage=alpine&tag=3.20"), 1);

    pthread_mutex_lock(&g_fake.lock);
    json_object *body = json_tokener_parse(g_slow_create_body ? g_slow_create_body : "");
    pthread_mutex_unlock(&g_fake.lock);
    cr_assert_not_null(body, "no container create body");
    json_object *labels = NULL, *v = NULL;
    cr_assert(json_object_object_get_ex(body, "Labels", &labels));
    cr_assert(json_object_object_get_ex(labels, "sbx.expires_at", &v));
    double label = strtod(json_object_get_string(v), NULL);
    cr_assert(label >= t0 + 2.0 + 60.0 && label <= ceil(t1 + 60.0),
              "label sbx.expires_at %.0f: not in [%.3f, %.0f] (request + 60 = %.3f)", label,
              t0 + 62.0, ceil(t1 + 60.0), t0 + 60.0);
    json_object_put(body);

    char *sql = tu_strdup_printf("SELECT CAST(expires_at * 1000 AS INTEGER) FROM sandboxes "
                                 "WHERE provider_id = '%s'", FAKE_CID);
    double rec = (double)tu_record_int(state, sql) / 1000.0;
    free(sql);
    cr_assert(rec >= t0 + 2.0 + 60.0 && rec <= t1 + 60.0 + 0.001,
              "record expires_at %.3f: not in [%.3f, %.3f] (request + 60 = %.3f)", rec,
              t0 + 62.0, t1 + 60.0, t0 + 60.0);

    fake_sandbox_end(sb, c);
    fake_stop();
    pthread_mutex_lock(&g_fake.lock);
    free(g_slow_create_body);
    g_slow_create_body = NULL;
    pthread_mutex_unlock(&g_fake.lock);
    unsetenv("SBX_STATE_DIR");
    free(state);
}

Test(real, case28_c_missing_tag)
{
    const char *image = "alpine:sbx-no-such-tag-zz9";
    /* What the Engine itself says about this pull. */
    char *body = NULL;
    int st = engine("POST", "/images/create?fromImage=alpine&tag=sbx-no-such-tag-zz9", NULL,
                    &body);
    json_object *j = json_tokener_parse(body);
    const char *daemon = NULL;
    if (j && json_object_is_type(j, json_type_object))
        daemon = jstr(j, "message", NULL);
    cr_assert_neq(st, 200, "the Engine pulled %s", image);
    sbx_client *c = client_new();
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_image(o, image, NULL), 0);
    sbx_error *err = NULL;
    double t0 = tu_now();
    sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
    double dt = tu_now() - t0;
    sbx_options_free(o);
    cr_assert_null(sb);
    tu_assert_error(err, SBX_ERROR_CREATION_FAILED, "cannot pull image", image, NULL);
    if (daemon) {
        /* The Engine's own words reach the caller. */
        char *m = strdup(daemon);
        char *colon = strrchr(m, ':');   /* the stable end of the message */
        cr_assert(strstr(sbx_error_get0_message(err), colon ? colon : m) != NULL,
                  "message \"%s\" lacks the Engine's \"%s\"", sbx_error_get0_message(err), m);
        free(m);
    }
    cr_assert(dt < 60.0, "took %.1f s", dt);
    sbx_error_free(err);
    json_object_put(j);
    free(body);
    /* No container with the library's labels from this image. */
    json_object *list = engine_json("/containers/json?all=1&filters=%7B%22label%22%3A%5B%22"
                                    "sbx.backend%3Ddocker%22%5D%7D");
    for (size_t i = 0; i < json_object_array_length(list); i++)
        cr_assert_str_neq(jstr(json_object_array_get_idx(list, i), "Image", NULL), image);
    json_object_put(list);
    sbx_client_free(c);
}

/* ================================================================ files */

static char *host_dir(const char *name)
{
    char *d = tu_strdup_printf("%s/%s", g_tmp, name);
    cr_assert_eq(mkdir(d, 0755), 0, "mkdir %s: %s", d, strerror(errno));
    return d;
}

static void host_file(const char *dir, const char *name, const char *data, unsigned mode)
{
    char *p = tu_strdup_printf("%s/%s", dir, name);
    tu_write_file(p, data, strlen(data), mode);
    cr_assert_eq(chmod(p, mode), 0);
    free(p);
}

static unsigned mode_of(const char *dir, const char *name)
{
    char *p = tu_strdup_printf("%s/%s", dir, name);
    struct stat st;
    cr_assert_eq(lstat(p, &st), 0, "%s: %s", p, strerror(errno));
    free(p);
    return st.st_mode & 07777;
}

Test(real, files_case17_binary_byte_exact)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    size_t len = 1048576;
    unsigned char *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)(i % 256);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(sb, "/work/bin.dat", data, len, &err), 0, "write: %s",
                 err ? sbx_error_get0_message(err) : "");
    char *back = NULL;
    size_t blen = 0;
    cr_assert_eq(sbx_sandbox_read_file(sb, "/work/bin.dat", &back, &blen, &err), 0, "read: %s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(blen, 1048576);
    char *h = sha_of(back, blen);
    cr_assert_str_eq(h, "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83");
    sbx_result *r = tu_sh(sb, "sha256sum /work/bin.dat", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83  "
                        "/work/bin.dat\n");
    sbx_result_free(r);
    free(h);
    free(back);
    free(data);

    /* Missing parents are made; a missing file is not_found. */
    cr_assert_eq(sbx_sandbox_write_file(sb, "/work/a/b/c.txt", "abc", 3, &err), 0);
    r = tu_sh(sb, "cat /work/a/b/c.txt; stat -c '%a' /work/a/b/c.txt", 10);
    tu_assert_stdout(r, "abc644\n");
    sbx_result_free(r);
    cr_assert_eq(sbx_sandbox_read_file(sb, "/work/nope.txt", &back, &blen, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/work/nope.txt", NULL);
    sbx_error_clear(&err);
    /* Relative paths are under the working directory. */
    cr_assert_eq(sbx_sandbox_write_file(sb, "rel.txt", "rel", 3, &err), 0);
    r = tu_sh(sb, "cat \"$(pwd)/rel.txt\"", 10);
    tu_assert_stdout(r, "rel");
    sbx_result_free(r);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}

Test(real, files_case13_executable_bits)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    umask(022);
    char *P = host_dir("P");
    host_file(P, "gradlew", "#!/bin/sh\necho ok\n", 0755);
    host_file(P, "build.gradle", "x\n", 0644);
    char *bin = tu_strdup_printf("%s/bin", P);
    cr_assert_eq(mkdir(bin, 0755), 0);
    host_file(bin, "tool", "#!/bin/sh\necho ok\n", 0750);
    sbx_error *err = NULL;
    cr_assert(sbx_sandbox_upload_dir(sb, P, "/work/proj", &err) > 0, "upload_dir: %s",
              err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb, "cd /work/proj && stat -c '%a %n' gradlew build.gradle bin/tool "
                              "&& ./gradlew", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "755 gradlew\n644 build.gradle\n750 bin/tool\nok\n");
    sbx_result_free(r);

    host_file(g_tmp, "run.sh", "#!/bin/sh\necho ok\n", 0755);
    char *run = tu_strdup_printf("%s/run.sh", g_tmp);
    cr_assert_eq(sbx_sandbox_upload_file(sb, run, "/work/run.sh", &err), 0, "upload_file: %s",
                 err ? sbx_error_get0_message(err) : "");
    const char *argv[] = { "/work/run.sh", NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    r = tu_exec(sb, &req);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "ok\n");
    sbx_result_free(r);

    char *Q = tu_strdup_printf("%s/Q", g_tmp);
    cr_assert(sbx_sandbox_download_dir(sb, "/work/proj", Q, &err) > 0, "download_dir: %s",
              err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(mode_of(Q, "gradlew"), 0755);
    cr_assert_eq(mode_of(Q, "build.gradle"), 0644);
    cr_assert_eq(mode_of(Q, "bin/tool"), 0750);
    char *back = tu_strdup_printf("%s/run-back.sh", g_tmp);
    cr_assert_eq(sbx_sandbox_download_file(sb, "/work/run.sh", back, &err), 0);
    cr_assert_eq(mode_of(g_tmp, "run-back.sh"), 0755);
    free(back);
    free(Q);
    free(run);
    free(bin);
    free(P);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}

Test(real, files_case14_empty_dirs_and_files)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    umask(022);
    char *T = host_dir("T");
    char *p;
    const char *dirs[] = { "empty_dir", "a", "a/b", "a/b/c", "sub" };
    for (size_t i = 0; i < 5; i++) {
        p = tu_strdup_printf("%s/%s", T, dirs[i]);
        cr_assert_eq(mkdir(p, 0755), 0);
        free(p);
    }
    host_file(T, "zero.txt", "", 0644);
    host_file(T, ".hidden", "h", 0644);
    host_file(T, "sub/.keep", "", 0644);
    sbx_error *err = NULL;
    cr_assert(sbx_sandbox_upload_dir(sb, T, "/work/t", &err) > 0, "upload_dir: %s",
              err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb, "cd /work/t && LC_ALL=C find . | LC_ALL=C sort && stat -c %s "
                              "zero.txt", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, ".\n./.hidden\n./a\n./a/b\n./a/b/c\n./empty_dir\n./sub\n./sub/.keep\n"
                        "./zero.txt\n0\n");
    sbx_result_free(r);
    char *T2 = tu_strdup_printf("%s/T2", g_tmp);
    cr_assert(sbx_sandbox_download_dir(sb, "/work/t", T2, &err) > 0, "download_dir: %s",
              err ? sbx_error_get0_message(err) : "");
    const char *entries[] = { ".hidden", "a/b/c", "empty_dir", "sub/.keep", "zero.txt" };
    const long sizes[] = { 1, -1, -1, 0, 0 };
    for (size_t i = 0; i < 5; i++) {
        p = tu_strdup_printf("%s/%s", T2, entries[i]);
        struct stat st;
        cr_assert_eq(lstat(p, &st), 0, "%s is missing", p);
        if (sizes[i] >= 0)
            cr_assert_eq(st.st_size, sizes[i], "%s size %lld", p, (long long)st.st_size);
        else
            cr_assert(S_ISDIR(st.st_mode));
        free(p);
    }
    p = tu_strdup_printf("%s/empty_dir", T2);
    cr_assert_eq(tu_count_entries(p), 0);
    free(p);
    char *E = host_dir("E");
    cr_assert(sbx_sandbox_upload_dir(sb, E, "/work/e", &err) >= 0, "upload_dir of an empty "
              "dir: %s", err ? sbx_error_get0_message(err) : "");
    r = tu_sh(sb, "test -d /work/e && ls -A /work/e | wc -l", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "0\n");
    sbx_result_free(r);
    free(E);
    free(T2);
    free(T);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}

Test(real, files_list_and_stat_names_exact)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    sbx_result *r = tu_sh(sb, "mkdir -p /work/l/sub && cd /work/l && printf 12345 > 'a b' && "
                              "printf x > -dash && printf xy > 'p+q' && printf '' > 'x%20y' && "
                              "printf abc > 'caf\xc3\xa9' && ln -s sub link", 10);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    sbx_file_info **list = NULL;
    size_t n = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_list_files(sb, "/work/l", &list, &n, &err), 0, "list: %s",
                 err ? sbx_error_get0_message(err) : "");
    static const struct { const char *name; int dir; long size; } want[] = {
        { "-dash", 0, 1 }, { "a b", 0, 5 }, { "caf\xc3\xa9", 0, 3 }, { "link", 0, -2 },
        { "p+q", 0, 2 }, { "sub", 1, -2 }, { "x%20y", 0, 0 },
    };
    cr_assert_eq(n, 7, "%zu entries", n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(sbx_file_info_get0_name(list[i]), want[i].name);
        cr_assert_eq(sbx_file_info_is_dir(list[i]), want[i].dir, "%s", want[i].name);
        if (want[i].size >= 0)
            cr_assert_eq(sbx_file_info_get_size(list[i]), want[i].size, "%s", want[i].name);
    }
    sbx_file_info_list_free(list, n);
    cr_assert_eq(sbx_sandbox_list_files(sb, "/work/none", &list, &n, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/work/none", NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_list_files(sb, "/work/l/a b", &list, &n, &err), -1);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "not a directory", NULL);
    sbx_error_clear(&err);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}

Test(fake, files_case11_hostile_archive_refused)
{
    g_abs_escape = tu_strdup_printf("%s/sbx_abs_escape.txt", g_tmp);
    fake_start(fake_container_fn, V_HOSTILE_TAR);
    sbx_client *c;
    sbx_sandbox *sb = fake_sandbox(&c);
    char *t = tu_strdup_printf("%s/t", g_tmp);
    cr_assert_eq(mkdir(t, 0755), 0);
    char *D = tu_strdup_printf("%s/dest", t);
    cr_assert_eq(mkdir(D, 0755), 0);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_download_dir(sb, "/work/out", D, &err), -1);
    tu_assert_error(err, SBX_ERROR_WORKSPACE, NULL);
    cr_assert_not_null(sbx_error_get0_context(err, "entry"));
    sbx_error_free(err);
    char *e1 = tu_strdup_printf("%s/escape1.txt", t), *e2 = tu_strdup_printf("%s/escape2.txt", t);
    cr_assert_eq(tu_exists(e1), 0);
    cr_assert_eq(tu_exists(e2), 0);
    cr_assert_eq(tu_exists(g_abs_escape), 0);
    cr_assert_eq(tu_count_entries(D), 0, "the refused archive wrote into %s", D);
    free(e1);
    free(e2);
    free(D);
    free(t);
    fake_sandbox_end(sb, c);
    fake_stop();
    free(g_abs_escape);
}

/* ================================================================ engine */

static int is_token(const char *s)
{
    if (!s || strlen(s) != 36 || strncmp(s, "sbx-", 4) != 0)
        return 0;
    for (const char *p = s + 4; *p; p++)
        if (!strchr("0123456789abcdef", *p))
            return 0;
    return 1;
}

Test(real, engine_labels_limits_and_workdir)
{
    sbx_client *c = client_new();
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    cr_assert_eq(sbx_options_set_cpu(o, 0.5, NULL), 0);
    cr_assert_eq(sbx_options_set_memory_mb(o, 256, NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 120, NULL), 0);
    cr_assert_eq(sbx_options_set_env(o, "FOO", "bar baz", NULL), 0);
    cr_assert_eq(sbx_options_set_workdir(o, "/work/wd", NULL), 0);
    double now = (double)time(NULL);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    char *path = tu_strdup_printf("/containers/%s/json", sbx_sandbox_get0_id(sb));
    json_object *j = engine_json(path), *cfg, *hc, *v;
    free(path);
    cr_assert(json_object_object_get_ex(j, "Config", &cfg));
    cr_assert(json_object_object_get_ex(j, "HostConfig", &hc));
    cr_assert_str_eq(jstr(cfg, "Labels", "sbx.backend"), "docker");
    const char *tok = jstr(cfg, "Labels", "sbx.create_token");
    cr_assert(is_token(tok), "create token \"%s\"", tok ? tok : "(none)");
    char *name = tu_strdup_printf("/%s", tok);
    cr_assert_str_eq(jstr(j, "Name", NULL), name);
    free(name);
    double exp = strtod(jstr(cfg, "Labels", "sbx.expires_at"), NULL);
    cr_assert(exp >= now + 118 && exp <= now + 125, "expires_at %.0f, now %.0f", exp, now);
    cr_assert_str_eq(jstr(cfg, "WorkingDir", NULL), "/work/wd");
    cr_assert_str_eq(jstr(cfg, "Entrypoint", NULL), "[ \"sleep\" ]");
    cr_assert_str_eq(jstr(cfg, "Cmd", NULL), "[ \"150\" ]");  /* 120 s + 30 s grace */
    json_object_object_get_ex(cfg, "Env", &v);
    int foo = 0, root = 0;
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        const char *e = json_object_get_string(json_object_array_get_idx(v, i));
        foo += strcmp(e, "FOO=bar baz") == 0;
        root += strcmp(e, "SANDBOX_ROOT=") == 0;
    }
    cr_assert(foo == 1 && root == 1);
    cr_assert_eq(json_object_get_int64(json_object_object_get(hc, "NanoCpus")), 500000000);
    cr_assert_eq(json_object_get_int64(json_object_object_get(hc, "Memory")), 268435456);
    cr_assert_eq(json_object_get_int64(json_object_object_get(hc, "MemorySwap")), 268435456);
    cr_assert_eq(json_object_get_int64(json_object_object_get(hc, "PidsLimit")), 4096);
    cr_assert_str_eq(jstr(hc, "NetworkMode", NULL), "none");
    cr_assert_eq(json_object_get_boolean(json_object_object_get(hc, "Init")), 1);
    cr_assert_eq(json_object_get_boolean(json_object_object_get(hc, "AutoRemove")), 1);
    json_object_put(j);

    /* What the commands see. */
    sbx_result *r = tu_sh(sb, "pwd; echo \"$FOO\"; ls /sys/class/net; "
                              "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || "
                              "cat /sys/fs/cgroup/memory.max", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "/work/wd\nbar baz\nlo\n268435456\n");
    sbx_result_free(r);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}

/* Containers (any state) labelled sbx.test=@tag. */
static size_t count_tagged(const char *tag)
{
    char *path = tu_strdup_printf("/containers/json?all=1&filters=%%7B%%22label%%22%%3A%%5B%%22"
                                  "sbx.test%%3D%s%%22%%5D%%7D", tag);
    json_object *j = engine_json(path);
    size_t n = json_object_array_length(j);
    json_object_put(j);
    free(path);
    return n;
}

/* Options carrying the label sbx.test=@tag (through backend_options). */
static sbx_options *tagged_options(const char *tag)
{
    sbx_options *o = sbx_options_new();
    char *bo = tu_strdup_printf("{\"Labels\":{\"sbx.test\":\"%s\"}}", tag);
    cr_assert_eq(sbx_options_set_backend_options(o, bo, NULL), 0);
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    free(bo);
    return o;
}

Test(real, engine_refused_options_name_themselves)
{
    sbx_client *c = client_new();
    static const struct { const char *option; } cases[] = {
        { "template" }, { "app_name" }, { "gpu" }, { "disk_mb" }, { "memory_mb" },
    };
    char *tag = tu_strdup_printf("refused-%d", (int)getpid());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sbx_options *o = tagged_options(tag);
        const char *name = cases[i].option;
        if (strcmp(name, "template") == 0)
            sbx_options_set_template(o, "base", NULL);
        else if (strcmp(name, "app_name") == 0)
            sbx_options_set_app_name(o, "evals", NULL);
        else if (strcmp(name, "gpu") == 0)
            sbx_options_set_gpu(o, "H100:2", NULL);
        else if (strcmp(name, "disk_mb") == 0)
            sbx_options_set_disk_mb(o, 2048, NULL);   /* overlay2 on extfs: no quota */
        else
            sbx_options_set_memory_mb(o, 2, NULL);    /* below the Engine's 6 MB */
        sbx_error *err = NULL;
        sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
        sbx_options_free(o);
        cr_assert_null(sb, "%s accepted", name);
        tu_assert_error(err, SBX_ERROR_CONFIGURATION, name, NULL);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), name);
        sbx_error_free(err);
    }
    /* Image references are checked before anything is asked. */
    sbx_options *o = tagged_options(tag);
    sbx_options_set_image(o, "-bad image", NULL);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(c, o, &err));
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "-bad image", NULL);
    sbx_error_clear(&err);
    sbx_options_free(o);
    cr_assert_eq(count_tagged(tag), 0, "a refused create left a container");

    /* The label reaches the container (backend_options merged) and the
     * library's own labels stay. */
    o = tagged_options(tag);
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"Labels\":{\"sbx.test\":\"x\","
                                                    "\"sbx.backend\":\"other\"}}", NULL), 0);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    char *path = tu_strdup_printf("/containers/%s/json", sbx_sandbox_get0_id(sb));
    json_object *j = engine_json(path), *cfg;
    cr_assert(json_object_object_get_ex(j, "Config", &cfg));
    cr_assert_str_eq(jstr(cfg, "Labels", "sbx.test"), "x");
    cr_assert_str_eq(jstr(cfg, "Labels", "sbx.backend"), "docker");
    json_object_put(j);
    free(path);
    destroy_and_check(sb, 1);

    /* A failed creation step (the clone) removes the container. */
    o = tagged_options(tag);
    cr_assert_eq(sbx_options_set_git_repo(o, "/no/such/repo", NULL, NULL), 0);
    cr_assert_null(sbx_sandbox_create(c, o, &err));
    tu_assert_error(err, SBX_ERROR_CREATION_FAILED, NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "step"), "git_clone");
    sbx_error_free(err);
    sbx_options_free(o);
    double end = tu_now() + 20.0;
    while (count_tagged(tag) != 0 && tu_now() < end)
        usleep(100000);
    cr_assert_eq(count_tagged(tag), 0, "the failed create left its container");
    free(tag);
    sbx_client_free(c);
}

/* Child: creates a sandbox with a running background process and a file,
 * writes its session state to @fd and exits without destroying it. */
static void resume_child(int fd)
{
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    /* Handed to another process after this one exits: detached. */
    sbx_options_set_detached(o, 1, NULL);
    sbx_options_set_env(o, "SECRET_TOKEN", "s3cr3t-value-zz9", NULL);
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_create("docker", o, &err);
    sbx_options_free(o);
    if (!sb)
        _exit(2);
    sbx_result *r = sbx_sandbox_execute_shell(sb, "mkdir -p /work && echo kept > /work/f.txt && "
                                                  "sleep 1000 >/dev/null 2>&1 </dev/null &", &err);
    if (!r || sbx_result_get_exit_code(r) != 0)
        _exit(3);
    sbx_result_free(r);
    char *state = sbx_sandbox_session_state(sb, &err);
    if (!state)
        _exit(4);
    ssize_t n = write(fd, state, strlen(state));
    (void)n;
    _exit(0);
}

Test(real, engine_resume_in_another_process)
{
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        resume_child(pfd[1]);
    }
    close(pfd[1]);
    char state[8192];
    size_t len = 0;
    ssize_t n;
    while ((n = read(pfd[0], state + len, sizeof state - 1 - len)) > 0)
        len += (size_t)n;
    state[len] = '\0';
    close(pfd[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    cr_assert(strstr(state, "s3cr3t-value-zz9") == NULL, "session state holds an env value");
    cr_assert(strstr(state, "\"backend\":\"docker\"") != NULL, "state %s", state);

    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_resume(state, &err);
    cr_assert_not_null(sb, "resume: %s", err ? sbx_error_get0_message(err) : "");
    sbx_result *r = tu_sh(sb, "cat /work/f.txt; ps -eo args | grep -c '^sleep 1000$'; "
                              "printf '%s' \"$SECRET_TOKEN\"", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n1\ns3cr3t-value-zz9");
    sbx_result_free(r);
    char *id = strdup(sbx_sandbox_get0_id(sb));
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0);
    sbx_sandbox_free(sb);
    assert_container_gone(id);
    /* Resuming a destroyed sandbox is not_found. */
    cr_assert_null(sbx_resume(state, &err));
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, NULL);
    sbx_error_free(err);
    free(id);
}

/* ---------------------------------------------- the plugin's slots, directly */

/* Host services of our own: errors are plain structs the test reads. */
typedef struct test_error {
    sbx_error_code code;
    char msg[2048];
} test_error;

static void th_log(sbx_log_level level, const char *backend, const char *fmt, ...)
{
}

static void th_set_error(sbx_error **error, sbx_error_code code, const char *op,
                         const char *fmt, ...)
{
    if (!error || *error)
        return;
    test_error *e = calloc(1, sizeof *e);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    *error = (sbx_error *)e;
}

static void th_add_context(sbx_error *error, const char *key, const char *value)
{
}

static void th_set_outcome(sbx_error *error, sbx_error_outcome outcome)
{
}

static const sbx_host_services test_host = {
    .struct_size = sizeof(sbx_host_services),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .log = th_log,
    .set_error = th_set_error,
    .error_add_context = th_add_context,
    .error_set_outcome = th_set_outcome,
    .alloc = malloc,
    .free = free,
};

static const sbx_plugin *load_plugin(void)
{
    const char *sp = getenv("SBX_PLUGIN_PATH");
    cr_assert_not_null(sp);
    char *copy = strdup(sp), *save = NULL;
    void *h = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !h; d = strtok_r(NULL, ":", &save)) {
        char *p = tu_strdup_printf("%s/libsbx-docker.so", d);
        if (access(p, R_OK) == 0)
            h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
        free(p);
    }
    free(copy);
    cr_assert_not_null(h, "libsbx-docker.so not found in %s", sp);
    sbx_plugin_init_fn init = (sbx_plugin_init_fn)dlsym(h, SBX_PLUGIN_INIT_SYMBOL);
    cr_assert_not_null(init);
    const sbx_plugin *pl = init();
    cr_assert_str_eq(pl->name, "docker");
    sbx_error *err = NULL;
    cr_assert_eq(pl->setup(&test_host, &err), 0);
    return pl;
}

typedef struct owned_seen {
    const char *want;
    int found;
    char token[64];
    double created, expires;
} owned_seen;

static int on_owned(const sbx_plugin_owned_info *info, void *ud)
{
    owned_seen *s = ud;
    if (strcmp(info->id, s->want) == 0) {
        s->found++;
        snprintf(s->token, sizeof s->token, "%s", info->create_token);
        s->created = info->created_at;
        s->expires = info->expires_at;
    }
    return 0;
}

/* Child: creates a sandbox (timeout 300 s), prints its id, exits without
 * destroying it: its creator is gone. */
static void owned_child(int fd)
{
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    sbx_options_set_timeout_secs(o, 300, NULL);
    sbx_sandbox *sb = sbx_create("docker", o, NULL);
    if (!sb)
        _exit(2);
    const char *id = sbx_sandbox_get0_id(sb);
    ssize_t n = write(fd, id, strlen(id));
    (void)n;
    _exit(0);
}

Test(real, engine_list_owned_and_destroy_by_id)
{
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    double t0 = (double)time(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        owned_child(pfd[1]);
    }
    close(pfd[1]);
    char id[128];
    ssize_t n = read(pfd[0], id, sizeof id - 1);
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(n == 64 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed");
    id[n] = '\0';

    /* This process never used libsbx: the plugin is ours alone. */
    const sbx_plugin *pl = load_plugin();
    sbx_plugin_client *pc = NULL;
    sbx_error *err = NULL;
    cr_assert_eq(pl->client_new(NULL, &pc, &err), 0);
    sbx_call_ctx ctx = { .struct_size = sizeof ctx, .cancel_fd = -1 };
    owned_seen seen = { .want = id };
    cr_assert_eq(pl->list_owned(pc, &ctx, on_owned, &seen, &err), 0, "list_owned: %s",
                 err ? ((test_error *)err)->msg : "");
    cr_assert_eq(seen.found, 1, "list_owned did not find %s", id);
    cr_assert(is_token(seen.token), "token \"%s\"", seen.token);
    cr_assert(seen.created >= t0 - 2 && seen.created <= t0 + 60, "created_at %.0f", seen.created);
    cr_assert(seen.expires >= seen.created + 295 && seen.expires <= seen.created + 310,
              "expires_at %.0f, created_at %.0f", seen.expires, seen.created);

    cr_assert_eq(pl->destroy_by_id(pc, &ctx, id, &err), 0, "destroy_by_id: %s",
                 err ? ((test_error *)err)->msg : "");
    assert_container_gone(id);
    seen.found = 0;
    cr_assert_eq(pl->list_owned(pc, &ctx, on_owned, &seen, &err), 0);
    cr_assert_eq(seen.found, 0);
    /* Gone already: nothing to do. */
    cr_assert_eq(pl->destroy_by_id(pc, &ctx, id, &err), 0);

    /* A container the library did not make is refused and kept. */
    char *body = NULL;
    char *create = tu_strdup_printf("{\"Image\":\"%s\",\"Cmd\":[\"true\"],"
                                    "\"HostConfig\":{\"NetworkMode\":\"none\"}}", test_image());
    cr_assert_eq(engine("POST", "/containers/create", create, &body), 201, "%s", body);
    json_object *j = json_tokener_parse(body);
    char *other = strdup(jstr(j, "Id", NULL));
    json_object_put(j);
    free(body);
    free(create);
    cr_assert_eq(pl->destroy_by_id(pc, &ctx, other, &err), -1);
    cr_assert_not_null(err);
    cr_assert_eq(((test_error *)err)->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(((test_error *)err)->msg, "not made by libsbx") != NULL);
    free(err);
    err = NULL;
    char *p = tu_strdup_printf("/containers/%s/json", other);
    cr_assert_eq(engine("GET", p, NULL, NULL), 200, "the foreign container was removed");
    free(p);
    p = tu_strdup_printf("/containers/%s?force=1", other);
    cr_assert_eq(engine("DELETE", p, NULL, NULL), 204);
    free(p);
    free(other);
    cr_assert_eq(pl->destroy_by_id(pc, &ctx, "../etc", &err), -1);
    cr_assert_eq(((test_error *)err)->code, SBX_ERROR_INVALID_ARGUMENT);
    free(err);
    pl->client_free(pc);
}

/* Runs @fn(@arg, fd) in a child process (which may use libsbx: this process
 * then must not), collecting what it writes to fd; returns its exit status
 * (0..255, or 256 + signal). */
static int run_child(void (*fn)(void *arg, int fd), void *arg, char *out, size_t cap)
{
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        fn(arg, pfd[1]);
        _exit(0);
    }
    close(pfd[1]);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(pfd[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(pfd[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 256 + WTERMSIG(status);
}

/* Child: a sandbox holding /work/snap.txt; writes its state's "data". */
static void snap_child_make(void *arg, int fd)
{
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    /* Resumed by the parent after this process exits: detached. */
    sbx_options_set_detached(o, 1, NULL);
    sbx_sandbox *sb = sbx_create("docker", o, NULL);
    sbx_options_free(o);
    if (!sb)
        _exit(2);
    sbx_result *r = sbx_sandbox_execute_shell(sb, "mkdir -p /work && echo snapped > "
                                                  "/work/snap.txt", NULL);
    if (!r || sbx_result_get_exit_code(r) != 0)
        _exit(3);
    char *state = sbx_sandbox_session_state(sb, NULL);
    json_object *j = state ? json_tokener_parse(state) : NULL, *data;
    if (!j || !json_object_object_get_ex(j, "data", &data))
        _exit(4);
    const char *d = json_object_to_json_string(data);
    ssize_t n = write(fd, d, strlen(d));
    (void)n;
    _exit(0);
}

/* sbx_sandbox_snapshot through the public API (and so through the plugin
 * host out of process): the id is the committed image's, a sandbox made
 * from it sees the snapshotted file, and the image carries the labels. */
Test(real, public_snapshot)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    sbx_result *r = tu_sh(sb, "mkdir -p /work && printf 'kept\\n' > /work/snap.txt", 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    sbx_error *err = NULL;
    char *snap = sbx_sandbox_snapshot(sb, &err);
    cr_assert_not_null(snap, "snapshot: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(strncmp(snap, "sha256:", 7), 0, "snapshot id \"%s\"", snap);
    cr_assert_eq(strlen(snap), 71, "snapshot id \"%s\"", snap);
    char *p = tu_strdup_printf("/images/%s/json", snap);
    json_object *j = engine_json(p);
    json_object *cfg;
    cr_assert(json_object_object_get_ex(j, "Config", &cfg));
    cr_assert_str_eq(jstr(cfg, "Labels", "sbx.backend"), "docker");
    cr_assert_str_eq(jstr(cfg, "Labels", "sbx.snapshot_of"), sbx_sandbox_get0_id(sb));
    json_object_put(j);
    free(p);
    destroy_and_check(sb, 1);

    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    cr_assert_eq(sbx_options_set_snapshot_id(o, snap, NULL), 0);
    sbx_sandbox *from = tu_create(c, o);
    sbx_options_free(o);
    r = tu_sh(from, "cat /work/snap.txt", 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "kept\n");
    sbx_result_free(r);
    destroy_and_check(from, 1);
    p = tu_strdup_printf("/images/%s?force=1", snap);
    cr_assert_eq(engine("DELETE", p, NULL, NULL), 200);
    free(p);
    free(snap);
    sbx_client_free(c);
}

/* sbx_gc on docker: an attached sandbox whose owner was SIGKILLed is
 * reaped; a container with the labels and this record's token but no row
 * is reaped; one with another record's token, and one without the labels,
 * are never touched. */
typedef struct dk_gc_seen {
    int n;
    char id[4][128];
    sbx_gc_reason reason[4];
    int reaped[4];
} dk_gc_seen;

static int dk_on_gc(const sbx_gc_item *item, void *ud)
{
    dk_gc_seen *s = ud;
    cr_assert_neq(item->reason, SBX_GC_LIST_FAILED, "%s: %s", item->backend,
                  item->error ? sbx_error_get0_message(item->error) : "");
    cr_assert_lt(s->n, 4);
    snprintf(s->id[s->n], sizeof s->id[0], "%s", item->id);
    s->reason[s->n] = item->reason;
    s->reaped[s->n] = item->reaped;
    s->n++;
    return 0;
}

/* A container made straight through the Engine with @labels_json. */
static char *raw_container(const char *labels_json)
{
    char *body = NULL;
    char *create = tu_strdup_printf("{\"Image\":\"%s\",\"Cmd\":[\"true\"],\"Labels\":%s,"
                                    "\"HostConfig\":{\"NetworkMode\":\"none\"}}", test_image(),
                                    labels_json);
    cr_assert_eq(engine("POST", "/containers/create", create, &body), 201, "%s", body);
    json_object *j = json_tokener_parse(body);
    char *id = strdup(jstr(j, "Id", NULL));
    json_object_put(j);
    free(body);
    free(create);
    return id;
}

Test(real, gc_reaps_orphans_and_unrecorded_and_nothing_else)
{
    char *state = tu_strdup_printf("%s/state", g_tmp);
    cr_assert_eq(setenv("SBX_STATE_DIR", state, 1), 0);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        close(p[0]);
        /* In process: out of process its plugin host would destroy the
         * attached sandbox itself when the owner dies (test_attached). */
        setenv("SBX_PLUGIN_MODE", "inprocess", 1);
        sbx_options *o = sbx_options_new();
        sbx_options_set_allow_internet(o, 0, NULL);
        sbx_sandbox *sb = sbx_create("docker", o, NULL);
        if (!sb)
            _exit(2);
        dprintf(p[1], "%s", sbx_sandbox_get0_id(sb));
        close(p[1]);
        for (;;)
            pause();
    }
    close(p[1]);
    char orphan[128];
    ssize_t n = read(p[0], orphan, sizeof orphan - 1);
    close(p[0]);
    cr_assert_eq(n, 64, "the child made no sandbox");
    orphan[n] = '\0';
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);

    /* This record's store id is in the orphan's token. */
    char *path = tu_strdup_printf("/containers/%s/json", orphan);
    json_object *j = engine_json(path);
    json_object *cfg;
    cr_assert(json_object_object_get_ex(j, "Config", &cfg));
    char store[9];
    snprintf(store, sizeof store, "%s", jstr(cfg, "Labels", "sbx.create_token") + 4);
    json_object_put(j);
    free(path);
    char *labels = tu_strdup_printf("{\"sbx.backend\":\"docker\",\"sbx.create_token\":"
                                    "\"sbx-%s000000000000000000000000\"}", store);
    char *unrecorded = raw_container(labels);
    free(labels);
    const char *other_store = strcmp(store, "ffffffff") == 0 ? "eeeeeeee" : "ffffffff";
    labels = tu_strdup_printf("{\"sbx.backend\":\"docker\",\"sbx.create_token\":"
                              "\"sbx-%s000000000000000000000000\"}", other_store);
    char *foreign = raw_container(labels);
    free(labels);
    char *unlabelled = raw_container("{}");

    dk_gc_seen seen = { 0 };
    sbx_error *err = NULL;
    cr_assert_eq(sbx_gc(SBX_GC_DRY_RUN, dk_on_gc, &seen, &err), 2, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(seen.reaped[0] + seen.reaped[1], 0);
    path = tu_strdup_printf("/containers/%s/json", orphan);
    cr_assert_eq(engine("GET", path, NULL, NULL), 200, "the dry run removed %s", orphan);
    free(path);
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(sbx_gc(0, dk_on_gc, &seen, &err), 2, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert_str_eq(seen.id[0], orphan);
    cr_assert_eq(seen.reason[0], SBX_GC_OWNER_GONE);
    cr_assert_eq(seen.reaped[0], 1);
    cr_assert_str_eq(seen.id[1], unrecorded);
    cr_assert_eq(seen.reason[1], SBX_GC_UNRECORDED);
    cr_assert_eq(seen.reaped[1], 1);
    assert_container_gone(orphan);
    assert_container_gone(unrecorded);
    const char *kept[] = { foreign, unlabelled };
    for (int i = 0; i < 2; i++) {
        path = tu_strdup_printf("/containers/%s/json", kept[i]);
        cr_assert_eq(engine("GET", path, NULL, NULL), 200, "gc removed %s", kept[i]);
        free(path);
        path = tu_strdup_printf("/containers/%s?force=1", kept[i]);
        cr_assert_eq(engine("DELETE", path, NULL, NULL), 204);
        free(path);
    }
    free(unrecorded);
    free(foreign);
    free(unlabelled);
    free(state);
}

/* Child: a sandbox from snapshot @arg (as snapshot_id, then as image);
 * writes what `cat /work/snap.txt` printed in each. */
static void snap_child_use(void *arg, int fd)
{
    for (int as_image = 0; as_image < 2; as_image++) {
        sbx_options *o = sbx_options_new();
        sbx_options_set_allow_internet(o, 0, NULL);
        if (as_image)
            sbx_options_set_image(o, arg, NULL);
        else
            sbx_options_set_snapshot_id(o, arg, NULL);
        sbx_error *err = NULL;
        sbx_sandbox *sb = sbx_create("docker", o, &err);
        sbx_options_free(o);
        if (!sb) {
            dprintf(fd, "create: %s\n", sbx_error_get0_message(err));
            _exit(2);
        }
        sbx_result *r = sbx_sandbox_execute_shell(sb, "cat /work/snap.txt", NULL);
        if (r)
            dprintf(fd, "%s", sbx_result_get0_stdout(r, NULL));
        sbx_sandbox_destroy(sb, NULL);
    }
    /* A snapshot that does not exist. */
    sbx_options *o = sbx_options_new();
    sbx_options_set_snapshot_id(o, "sha256:00000000000000000000000000000000000000000000000000"
                                   "00000000000000", NULL);
    sbx_error *err = NULL;
    if (sbx_create("docker", o, &err) || sbx_error_get_code(err) != SBX_ERROR_NOT_FOUND)
        _exit(3);
    dprintf(fd, "missing: %s\n", sbx_error_get0_message(err));
    _exit(0);
}

Test(real, engine_snapshot_commit)
{
    char data[4096], out[4096];
    cr_assert_eq(run_child(snap_child_make, NULL, data, sizeof data), 0);
    const sbx_plugin *pl = load_plugin();
    sbx_plugin_client *pc = NULL;
    sbx_error *err = NULL;
    cr_assert_eq(pl->client_new(NULL, &pc, &err), 0);
    sbx_call_ctx ctx = { .struct_size = sizeof ctx, .cancel_fd = -1 };
    sbx_plugin_sandbox *psb = NULL;
    cr_assert_eq(pl->resume(pc, &ctx, data, &psb, &err), 0, "resume %s: %s", data,
                 err ? ((test_error *)err)->msg : "");
    char *id = strdup(pl->sandbox_id(psb));
    char *snap = pl->snapshot(psb, &ctx, &err);
    cr_assert_not_null(snap, "snapshot: %s", err ? ((test_error *)err)->msg : "");
    cr_assert_eq(strncmp(snap, "sha256:", 7), 0, "snapshot id \"%s\"", snap);
    cr_assert_eq(strlen(snap), 71);
    cr_assert_eq(pl->destroy(psb, &ctx, &err), 0);
    cr_assert_eq(pl->destroy(psb, &ctx, &err), 0, "a second destroy is a no-op");
    cr_assert_eq(pl->snapshot(psb, &ctx, &err), NULL);
    cr_assert_eq(((test_error *)err)->code, SBX_ERROR_NOT_FOUND);
    free(err);
    err = NULL;
    pl->sandbox_free(psb);
    assert_container_gone(id);

    /* The image carries the library's label. */
    char *p = tu_strdup_printf("/images/%s/json", snap);
    json_object *j = engine_json(p);
    json_object *cfg;
    cr_assert(json_object_object_get_ex(j, "Config", &cfg));
    cr_assert_str_eq(jstr(cfg, "Labels", "sbx.backend"), "docker");
    cr_assert_str_eq(jstr(cfg, "Labels", "sbx.snapshot_of"), id);
    json_object_put(j);
    free(p);

    int st = run_child(snap_child_use, snap, out, sizeof out);
    cr_assert_eq(st, 0, "child %d: %s", st, out);
    cr_assert(strncmp(out, "snapped\nsnapped\nmissing: ", 25) == 0, "got \"%s\"", out);
    cr_assert(strstr(out, "sha256:0000") != NULL, "got \"%s\"", out);
    p = tu_strdup_printf("/images/%s?force=1", snap);
    cr_assert_eq(engine("DELETE", p, NULL, NULL), 200);
    free(p);
    free(snap);
    free(id);
    pl->client_free(pc);
}

Test(real, engine_lifetime_ends_the_container, .timeout = 120)
{
    sbx_client *c = client_new();
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    sbx_options_set_timeout_secs(o, 1, NULL);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    char *id = strdup(sbx_sandbox_get0_id(sb));
    /* The handle goes; the sandbox is not destroyed: it must end by itself
     * (1 s + the 30 s grace) and be removed. */
    sbx_sandbox_free(sb);
    char *path = tu_strdup_printf("/containers/%s/json", id);
    double end = tu_now() + 60.0;
    int st;
    while ((st = engine("GET", path, NULL, NULL)) == 200 && tu_now() < end)
        usleep(500000);
    cr_assert_eq(st, 404, "container %s outlived its lifetime", id);
    cr_assert(tu_now() - (end - 60.0) >= 25.0, "ended early");
    free(path);
    free(id);
    sbx_client_free(c);
}

Test(real, engine_missing_cwd_and_gone_sandbox)
{
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, NULL);
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "touch /ran_marker";
    req.cwd = "/definitely/not/here";
    sbx_error *err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/definitely/not/here", NULL);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "/definitely/not/here");
    sbx_error_free(err);
    sbx_result *r = tu_sh(sb, "test -e /ran_marker; echo $?", 10);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    /* A file is not a working directory. */
    req.cwd = "/etc/passwd";
    err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "/etc/passwd", "not a directory", NULL);
    sbx_error_free(err);
    /* A symlink to a directory is one. */
    req.shell = "pwd -P";
    req.cwd = "/bin";
    r = tu_exec(sb, &req);
    tu_assert_stdout(r, "/usr/bin\n");
    sbx_result_free(r);

    /* The container removed behind the library's back: not_found. */
    char *p = tu_strdup_printf("/containers/%s?force=1", sbx_sandbox_get0_id(sb));
    cr_assert_eq(engine("DELETE", p, NULL, NULL), 204);
    free(p);
    req.cwd = NULL;
    req.shell = "true";
    err = tu_exec_fail(sb, &req, SBX_ERROR_NOT_FOUND);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_sandbox_is_alive(sb, NULL), 0);
    char *data = NULL;
    size_t len;
    cr_assert_eq(sbx_sandbox_read_file(sb, "/etc/hostname", &data, &len, &err), -1);
    tu_assert_error(err, SBX_ERROR_NOT_FOUND, "no longer exists", NULL);
    sbx_error_free(err);
    cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
    sbx_sandbox_free(sb);
    sbx_client_free(c);
}

Test(real, engine_unreachable_is_a_connection_error)
{
    setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock", 1);
    sbx_client *c = client_new();
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(c, NULL, &err));
    tu_assert_error(err, SBX_ERROR_CONNECTION, "/nonexistent/docker.sock", NULL);
    cr_assert_eq(sbx_error_is_retryable(err), 1);
    sbx_error_clear(&err);
    sbx_client_free(c);
    setenv("DOCKER_HOST", "ssh://somewhere", 1);
    cr_assert_null(sbx_client_new("docker", &err));
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "ssh://somewhere", NULL);
    sbx_error_free(err);
}

/* ================================================================ presets */

/* The image of the built-in preset claude-code (presets/claude-code.json),
 * which scripts/docker-env presets builds on the test image: asserts that the
 * Engine has it (no registry is reachable here). New string. */
static char *claude_image(void)
{
    sbx_error *err = NULL;
    sbx_preset *p = sbx_preset_load("claude-code", &err);
    cr_assert_not_null(p, "preset claude-code: %s", err ? sbx_error_get0_message(err) : "");
    char *image = strdup(sbx_preset_get0_image(p, "docker"));
    sbx_preset_free(p);
    cr_assert_str_eq(image, "ghcr.io/bespokelabsai/sandbox/claude-code:v2");
    char *path = tu_strdup_printf("/images/%s/json", image);
    int st = engine("GET", path, NULL, NULL);
    cr_assert_eq(st, 200, "the Engine has no image %s (HTTP %d): build it with "
                 "`scripts/docker-env presets`", image, st);
    free(path);
    return image;
}

/* The Config.Image of sandbox @sb's container (new string). */
static char *container_image(sbx_sandbox *sb)
{
    char *path = tu_strdup_printf("/containers/%s/json", sbx_sandbox_get0_id(sb));
    json_object *j = engine_json(path);
    char *image = strdup(jstr(j, "Config", "Image"));
    json_object_put(j);
    free(path);
    return image;
}

/* Asserts that `claude --version` in @sb exits 0 and that its output starts
 * with the version of the @anthropic-ai/claude-code package installed in the
 * same container, followed by a space or the end of the line. */
static void assert_claude_answers(sbx_sandbox *sb)
{
    sbx_result *r = tu_sh(sb, "cd \"$(npm root -g)/@anthropic-ai/claude-code\" && "
                              "node -p \"require('./package.json').version\"", 60);
    tu_assert_exit(r, 0);
    const char *out = sbx_result_get0_stdout(r, NULL);
    size_t n = strcspn(out, "\n");
    cr_assert(n > 0 && strcmp(out + n, "\n") == 0, "package.json version: \"%s\"", out);
    char *version = strndup(out, n);
    unsigned major, minor, patch;
    cr_assert_eq(sscanf(version, "%u.%u.%u", &major, &minor, &patch), 3,
                 "package.json version \"%s\"", version);
    sbx_result_free(r);

    const char *argv[] = { "claude", "--version", NULL };
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.argv = argv;
    req.timeout_secs = 60;
    r = tu_exec(sb, &req);
    tu_assert_exit(r, 0);
    out = sbx_result_get0_stdout(r, NULL);
    cr_assert(strncmp(out, version, n) == 0 && (out[n] == ' ' || out[n] == '\n'),
              "claude --version printed \"%s\", not version %s", out, version);
    cr_assert_neq(strchr(out, '\n'), NULL, "claude --version printed \"%s\"", out);
    sbx_result_free(r);
    free(version);
}

/* Registers "t-claude": the claude-code preset's image, with a setup command
 * that leaves a marker file. */
static void register_t_claude(const char *image)
{
    char *json = tu_strdup_printf(
        "{\"format\": 1, \"name\": \"t-claude\", \"image\": \"%s\", "
        "\"setup_commands\": [\"echo ran >/sbx-setup-marker\"], "
        "\"cpu\": 1, \"memory_mb\": 2048, \"timeout_secs\": 600, \"allow_internet\": true}",
        image);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_preset_register(json, &err), 0, "register: %s",
                 err ? sbx_error_get0_message(err) : "");
    free(json);
}

/* A sandbox made with preset @preset, network none, and @image unless NULL. */
static sbx_sandbox *preset_sandbox(sbx_client *c, const char *preset, const char *image)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_preset(o, preset, NULL), 0);
    /* The test Engine has no bridge: the caller's value beats the preset's true. */
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    if (image)
        cr_assert_eq(sbx_options_set_image(o, image, NULL), 0);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    return sb;
}

Test(real, preset_image_answers_claude_version)
{
    char *image = claude_image();
    sbx_client *c = client_new();
    sbx_sandbox *sb = make_sandbox(c, image);
    char *used = container_image(sb);
    cr_assert_str_eq(used, image);
    assert_claude_answers(sb);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
    free(used);
    free(image);
}

Test(real, preset_claude_code_uses_its_image_and_skips_setup)
{
    char *image = claude_image();
    sbx_client *c = client_new();
    /* The built-in preset: its setup (npm install -g, which needs the network
     * this sandbox lacks) is skipped, or the create would fail. */
    sbx_sandbox *sb = preset_sandbox(c, "claude-code", NULL);
    char *used = container_image(sb);
    cr_assert_str_eq(used, image);
    free(used);
    assert_claude_answers(sb);
    destroy_and_check(sb, 1);

    /* A copy whose setup leaves a marker: the marker is absent. */
    register_t_claude(image);
    sb = preset_sandbox(c, "t-claude", NULL);
    used = container_image(sb);
    cr_assert_str_eq(used, image);
    sbx_result *r = tu_sh(sb, "test -e /sbx-setup-marker; echo $?", 10);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "1\n");
    sbx_result_free(r);
    assert_claude_answers(sb);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
    free(used);
    free(image);
}

Test(real, preset_with_callers_image_runs_setup)
{
    char *image = claude_image();
    register_t_claude(image);
    sbx_client *c = client_new();
    sbx_sandbox *sb = preset_sandbox(c, "t-claude", test_image());
    char *used = container_image(sb);
    cr_assert_str_eq(used, test_image());
    sbx_result *r = tu_sh(sb, "cat /sbx-setup-marker; command -v claude || echo no claude",
                          10);
    tu_assert_exit(r, 0);
    /* The setup ran, on the caller's image, which has no claude. */
    tu_assert_stdout(r, "ran\nno claude\n");
    sbx_result_free(r);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
    free(used);
    free(image);
}

/* ================================================================ CASE-25 */

static void big_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, 2147483648LL), 0);
    cr_assert_eq(pwrite(fd, "END-OF-BIG-FILE\n", 16, 2147483648LL), 16);
    close(fd);
}

static void check_big(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(st.st_size, 2147483664LL, "%s is %lld bytes", path, (long long)st.st_size);
    char tail[17] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_eq(pread(fd, tail, 16, 2147483648LL), 16);
    close(fd);
    cr_assert_str_eq(tail, "END-OF-BIG-FILE\n");
    char *cmd = tu_strdup_printf("sha256sum '%s'", path);
    FILE *f = popen(cmd, "r");
    char hex[65] = "";
    cr_assert_eq(fscanf(f, "%64s", hex), 1);
    pclose(f);
    free(cmd);
    cr_assert_str_eq(hex, "7985425abecfd535c9d8a48842b558cc4595464d72054e9c7346a5844f3054e5");
}

Test(slow, case25_two_gib_each_way)
{
    struct statvfs vs;
    cr_assert_eq(statvfs(g_tmp, &vs), 0);
    unsigned long long free_b = (unsigned long long)vs.f_bavail * vs.f_frsize;
    cr_assert(free_b > (10ULL << 30), "case25 needs 10 GiB free in %s (has %llu)", g_tmp,
              free_b);
    sbx_client *c = client_new();
    sbx_options *o = sbx_options_new();
    sbx_options_set_allow_internet(o, 0, NULL);
    sbx_options_set_memory_mb(o, 512, NULL);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    sbx_result *r = tu_sh(sb, "mkdir -p /work && truncate -s 2147483648 /work/big.bin && "
                              "printf 'END-OF-BIG-FILE\\n' >> /work/big.bin", 30);
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    char *local = tu_strdup_printf("%s/big.bin", g_tmp);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_download_file(sb, "/work/big.bin", local, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    check_big(local);
    unlink(local);
    char *Ld = tu_strdup_printf("%s/Ld", g_tmp);
    cr_assert(sbx_sandbox_download_dir(sb, "/work", Ld, &err) > 0, "%s",
              err ? sbx_error_get0_message(err) : "");
    char *lbig = tu_strdup_printf("%s/big.bin", Ld);
    check_big(lbig);
    tu_rmtree(Ld);
    big_file(local);
    cr_assert_eq(sbx_sandbox_upload_file(sb, local, "/work/up.bin", &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    unlink(local);
    r = tu_sh(sb, "stat -c %s /work/up.bin; tail -c 16 /work/up.bin", 120);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, "2147483664\nEND-OF-BIG-FILE\n");
    sbx_result_free(r);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    cr_assert(ru.ru_maxrss < 256 * 1024, "peak RSS %ld KiB", ru.ru_maxrss);
    free(lbig);
    free(Ld);
    free(local);
    destroy_and_check(sb, 1);
    sbx_client_free(c);
}
