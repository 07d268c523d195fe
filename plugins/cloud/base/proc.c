/*
 * proc.c — process handles over one streaming call (cloud.h): the worker
 * thread, the end event, output to the host's descriptors and the error
 * handed to exec_wait.
 */
#include "cloud.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *proc_main(void *arg)
{
    cl_proc *p = arg;
    /* A write to a pipe whose reader left fails with EPIPE, never kills. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int code = p->run(p);
    pthread_mutex_lock(&p->lock);
    p->ended = 1;
    p->exit_code = code;
    pthread_mutex_unlock(&p->lock);
    /* The host's descriptors see EOF at the command's end. */
    if (p->stdout_fd >= 0)
        close(p->stdout_fd);
    if (p->stderr_fd >= 0)
        close(p->stderr_fd);
    p->stdout_fd = p->stderr_fd = -1;
    char b = 1;
    while (write(p->event_wr, &b, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

int cl_proc_start(cl_proc *p, int stdout_fd, int stderr_fd, const char *op, sbx_error **error)
{
    int ev[2] = { -1, -1 }, st[2] = { -1, -1 };
    p->stdout_fd = p->stderr_fd = -1;
    p->event_rd = p->event_wr = p->stop_fd = p->stop_wr = -1;
    pthread_mutex_init(&p->lock, NULL);
    if (pipe2(ev, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0)
        goto fail;
    p->event_rd = ev[0];
    p->event_wr = ev[1];
    p->stop_fd = st[0];
    p->stop_wr = st[1];
    if (stdout_fd >= 0 && (p->stdout_fd = fcntl(stdout_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        goto fail;
    if (stderr_fd >= 0 && (p->stderr_fd = fcntl(stderr_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        goto fail;
    int rc = pthread_create(&p->thread, NULL, proc_main, p);
    if (rc != 0) {
        errno = rc;
        goto fail;
    }
    p->started = 1;
    return 0;
fail:
    cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot start the command's reader: %s",
            strerror(errno));
    cl_proc_clear(p);
    return -1;
}

int cl_proc_output(cl_proc *p, int stream, const void *data, size_t n)
{
    int fd = stream == 2 ? p->stderr_fd : p->stdout_fd;
    const char *s = data;
    if (fd < 0)
        return n ? -1 : 0;
    while (n) {
        struct pollfd pfd[2] = { { .fd = fd, .events = POLLOUT }, { .fd = p->stop_fd, .events = POLLIN } };
        int r = poll(pfd, 2, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (pfd[1].revents)
            return -1;
        if (pfd[0].revents & (POLLERR | POLLNVAL))
            return -1;
        size_t chunk = n > 65536 ? 65536 : n;
        ssize_t w = write(fd, s, chunk);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

void cl_proc_fail(cl_proc *p, sbx_error_code code, int unknown, const char *ctx_key,
                  const char *ctx_val, const char *fmt, ...)
{
    pthread_mutex_lock(&p->lock);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err_msg, sizeof(p->err_msg), fmt, ap);
    va_end(ap);
    p->err_code = code;
    p->err_unknown = unknown;
    p->err_nctx = 0;
    if (ctx_key && ctx_val) {
        snprintf(p->err_ctx_key[0], sizeof(p->err_ctx_key[0]), "%s", ctx_key);
        snprintf(p->err_ctx_val[0], sizeof(p->err_ctx_val[0]), "%s", ctx_val);
        p->err_nctx = 1;
    }
    pthread_mutex_unlock(&p->lock);
}

void cl_proc_fail_last(cl_proc *p)
{
    const cl_last_error *l = cl_last();
    char st[32];
    snprintf(st, sizeof(st), "%ld", l->http_status);
    cl_proc_fail(p, l->code, l->unknown, l->http_status ? "http_status" : NULL, st, "%s", l->msg);
}

int cl_proc_wait(cl_proc *p, int timeout_ms, int *exit_code, const char *op, sbx_error **error)
{
    struct pollfd pfd = { .fd = p->event_rd, .events = POLLIN };
    for (;;) {
        int r = poll(&pfd, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        break;
    }
    pthread_mutex_lock(&p->lock);
    int ended = p->ended, code = p->exit_code;
    pthread_mutex_unlock(&p->lock);
    if (!ended)
        return 0;
    if (code < 0) {
        pthread_mutex_lock(&p->lock);
        sbx_error *e = cl_fail(error, p->err_code ? p->err_code : SBX_ERROR_EXECUTION_FAILED, op,
                               "%s", p->err_msg[0] ? p->err_msg : "the command's stream failed");
        for (int i = 0; i < p->err_nctx; i++)
            cl_context(e, p->err_ctx_key[i], p->err_ctx_val[i]);
        if (p->err_unknown)
            cl_outcome_unknown(e);
        pthread_mutex_unlock(&p->lock);
        return -1;
    }
    *exit_code = code;
    return 1;
}

int cl_proc_event_fd(cl_proc *p)
{
    return p->event_rd;
}

void cl_proc_stop(cl_proc *p)
{
    pthread_mutex_lock(&p->lock);
    int already = p->stopped;
    p->stopped = 1;
    pthread_mutex_unlock(&p->lock);
    if (!already && p->stop_wr >= 0) {
        char b = 1;
        while (write(p->stop_wr, &b, 1) < 0 && errno == EINTR)
            ;
    }
}

int cl_proc_stopping(cl_proc *p)
{
    pthread_mutex_lock(&p->lock);
    int s = p->stopped;
    pthread_mutex_unlock(&p->lock);
    return s;
}

void cl_proc_clear(cl_proc *p)
{
    if (p->started) {
        cl_proc_stop(p);
        pthread_join(p->thread, NULL);
        p->started = 0;
    }
    int *fds[] = { &p->stdout_fd, &p->stderr_fd, &p->stop_fd, &p->stop_wr, &p->event_rd,
                   &p->event_wr };
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
    pthread_mutex_destroy(&p->lock);
}

/* ------------------------------------------------------------------------ */
/* Live output carried as text                                               */
/* ------------------------------------------------------------------------ */

#define CL_FNV_OFFSET UINT64_C(14695981039346656037)
#define CL_FNV_PRIME UINT64_C(1099511628211)

static uint64_t cl_fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * CL_FNV_PRIME;
    return h;
}

void cl_live_init(cl_live *l)
{
    l->off = 0;
    l->sent = 0;
    l->hash = CL_FNV_OFFSET;
}

int cl_live_emit(cl_live *l, cl_proc *p, int stream, const char *data, size_t n)
{
    if (!n)
        return 0;
    if (cl_proc_output(p, stream, data, n) < 0) {
        l->off = 1;
        return -1;
    }
    l->sent += n;
    l->hash = cl_fnv(l->hash, data, n);
    return 0;
}

int cl_live_suspect(const char *data, size_t n)
{
    return memmem(data, n, "\xef\xbf\xbd", 3) != NULL;
}

int cl_live_text(cl_live *l, cl_proc *p, int stream, const char *data, size_t n)
{
    if (l->off)
        return -1;
    if (cl_live_suspect(data, n)) {
        l->off = 1;
        return -1;
    }
    return cl_live_emit(l, p, stream, data, n);
}

void cl_live_rest_init(cl_live_rest *r, cl_proc *p, int stream, const cl_live *live)
{
    r->p = p;
    r->stream = stream;
    r->live = live;
    r->seen = 0;
    r->hash = CL_FNV_OFFSET;
    r->differs = 0;
}

int cl_live_rest_sink(void *ud, const char *data, size_t n)
{
    cl_live_rest *r = ud;
    if (r->seen < r->live->sent) {
        size_t k = r->live->sent - r->seen < n ? (size_t)(r->live->sent - r->seen) : n;
        r->hash = cl_fnv(r->hash, data, k);
        r->seen += k;
        data += k;
        n -= k;
        if (r->seen == r->live->sent && r->hash != r->live->hash) {
            r->differs = 1;
            return -1;
        }
    }
    r->seen += n;
    return cl_proc_output(r->p, r->stream, data, n);
}

int cl_live_rest_end(cl_live_rest *r, const char *provider, const char *op)
{
    if (r->seen < r->live->sent)
        r->differs = 1;
    if (!r->differs)
        return 0;
    const char *name = r->stream == 1 ? "stdout" : "stderr";
    cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, op, "%s: the %s the command's stream carried "
            "(%llu bytes) is not the start of its %s", provider, name,
            (unsigned long long)r->live->sent, name);
    return -1;
}
