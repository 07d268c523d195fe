/*
 * bench.h — what the benchmark programs share: a monotonic clock, sorting
 * samples, their percentiles and median, a growing buffer for an HTTP
 * answer's body (a libcurl write callback), a minimal HTTP/1.1 client on a
 * kept loopback connection, and starting and stopping the build's
 * sbx-server with a throwaway store. Header-only (static inline),
 * so each program stays one source file; not thread-safe beyond what each
 * function says.
 */
#ifndef SBX_BENCH_H
#define SBX_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SBX_TOP_BUILDDIR
#define SBX_TOP_BUILDDIR "."
#endif

/* CLOCK_MONOTONIC in microseconds. */
static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline double now_ms(void)
{
    return now_us() / 1e3;
}

/* qsort() comparison of doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The @p quantile (0..1) of the @n samples @v, nearest rank; sorts @v in
 * place. @n > 0. */
static inline double percentile(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

/* The median of the @n samples @v (the mean of the middle two when @n is
 * even); sorts @v in place. @n > 0. */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A growing response body, NUL-terminated; free() its data. */
typedef struct bench_body {
    char *data;
    size_t len;
} bench_body;

/* A libcurl CURLOPT_WRITEFUNCTION appending to the bench_body @ud; 0 (which
 * aborts the transfer) when out of memory. */
static inline size_t bench_collect(char *p, size_t size, size_t n, void *ud)
{
    bench_body *b = ud;
    size_t len = size * n;
    char *d = realloc(b->data, b->len + len + 1);
    if (!d)
        return 0;
    memcpy(d + b->len, p, len);
    b->len += len;
    d[b->len] = '\0';
    b->data = d;
    return len;
}

/* A TCP connection to 127.0.0.1:@port with TCP_NODELAY (as libcurl sets
 * it), to be kept for many requests: its descriptor, or -1 with errno set. */
static inline int bench_loopback_connect(unsigned port)
{
    struct sockaddr_in sa = { 0 };
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* One HTTP/1.1 exchange on the kept connection @fd: the whole request @req
 * (@len bytes) in one send(), then recv() until the answer's headers and
 * its Content-Length bytes (the body is dropped). The answer's status, or 0
 * on a failed send, a closed connection, an answer without Content-Length
 * or one of 8 KiB or more. */
static inline long bench_http_exchange(int fd, const char *req, size_t len)
{
    char buf[8192];
    size_t n = 0;

    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
        return 0;
    for (;;) {
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0)
            return 0;
        n += (size_t)k;
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n"), *cl;
        if (!end)
            continue;
        *end = '\0';
        cl = strcasestr(buf, "\r\ncontent-length:");
        size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 17, NULL, 10) : 0);
        if (!cl || want >= sizeof buf)
            return 0;
        if (n >= want)
            return strncmp(buf, "HTTP/1.1 ", 9) ? 0 : strtol(buf + 9, NULL, 10);
        *end = '\r';
    }
}

/* The files a bench's sbx-server leaves in its directory. */
static const char *const bench_server_files[] = { "cp.db", "cp.db-wal", "cp.db-shm",
                                                  "server.log", NULL };

/*
 * Starts the build's sbx-server (SBX_SERVER overrides the program) on
 * 127.0.0.1 with an ephemeral port, a throwaway SQLite store and its log in
 * a new directory "$TMPDIR/@prefix-XXXXXX" (written to @dir, @dir_cap
 * bytes; /tmp without TMPDIR), BESPOKE_ALLOWED_BACKENDS=local and @admin
 * as the admin token, in a process group of its own (a terminal's ^C
 * reaches the bench alone, which can then clean up through the server);
 * the server ends with this process (SIGTERM). Waits
 * up to 10 s for its first line ("listening on URL"). Returns 0 with *@pid
 * and @url (@url_cap bytes) set, or -1 with *@pid set when it was started
 * (stop it with bench_server_stop, which also removes the directory;
 * DIR/server.log says why) or -1 when it was not (dir[0] is then '\0' if
 * no directory was made); errno is set.
 */
static inline int bench_server_start(const char *prefix, const char *admin, char *dir,
                                     size_t dir_cap, pid_t *pid, char *url, size_t url_cap)
{
    const char *bin = getenv("SBX_SERVER"), *t = getenv("TMPDIR");
    char path[512], db[400], log[400], line[256] = "";
    int out[2];
    size_t n = 0;

    *pid = -1;
    if (!bin || !*bin) {
        snprintf(path, sizeof path, "%s/server/sbx-server", SBX_TOP_BUILDDIR);
        bin = path;
    }
    snprintf(dir, dir_cap, "%s/%s-XXXXXX", t && *t ? t : "/tmp", prefix);
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0)
        return -1;
    snprintf(db, sizeof db, "%s/cp.db", dir);
    snprintf(log, sizeof log, "%s/server.log", dir);
    *pid = fork();
    if (*pid < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (*pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        setpgid(0, 0);    /* a terminal's ^C is the bench's to handle */
        dup2(out[1], 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        setenv("BESPOKE_API_KEY_PEPPER", "bench-pepper", 1);
        setenv("BESPOKE_CONTROL_PLANE_ADMIN_TOKEN", admin, 1);
        setenv("BESPOKE_CONTROL_PLANE_DB", db, 1);
        setenv("BESPOKE_ALLOWED_BACKENDS", "local", 1);
        setenv("HOST", "127.0.0.1", 1);
        setenv("PORT", "0", 1);
        execl(bin, bin, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    struct pollfd p = { out[0], POLLIN, 0 };
    double end = now_ms() + 10000;
    while (n < sizeof line - 1 && !strchr(line, '\n') && now_ms() < end) {
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t k = read(out[0], line + n, sizeof line - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        line[n] = '\0';
    }
    close(out[0]);
    char *nl = strchr(line, '\n');
    if (nl)
        *nl = '\0';
    if (strncmp(line, "listening on ", 13) != 0 || strlen(line + 13) >= url_cap) {
        errno = EPROTO;
        return -1;
    }
    strcpy(url, line + 13);
    return 0;
}

/* Stops the server bench_server_start() started (*@pid; -1: none) by its
 * pid and removes its directory @dir (when dir[0]); both left reset. */
static inline void bench_server_stop(pid_t *pid, char *dir)
{
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = -1;
    }
    if (dir[0]) {
        char p[400];
        for (int i = 0; bench_server_files[i]; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, bench_server_files[i]);
            unlink(p);
        }
        rmdir(dir);
        dir[0] = '\0';
    }
}

#endif /* SBX_BENCH_H */
