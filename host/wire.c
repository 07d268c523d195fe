/*
 * host/wire.c — frames of the plugin host's wire protocol (host/wire.h) and
 * the slot table's rows as data (host/slots.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slots.h"
#include "wire.h"

const sbx_slot_row sbx_slot_rows[SBX_SLOT_COUNT] = { SBX_SLOT_TABLE(SBX_SLOT_ROW_) };

void *
sbx_slot_get(const sbx_plugin *plugin, unsigned id)
{
    const sbx_slot_row *row;
    void *fn;

    if (id >= SBX_SLOT_COUNT)
        return NULL;
    row = &sbx_slot_rows[id];
    if (row->offset + sizeof(void (*)(void)) > plugin->struct_size)
        return NULL;
    memcpy(&fn, (const char *)plugin + row->offset, sizeof(fn));
    return fn;
}

/* The fixed header of every frame. */
typedef struct wire_header {
    uint32_t magic;
    uint32_t type;
    uint32_t slot;
    uint32_t body_len;
    uint64_t call_id;
} wire_header;

#define STR_NULL 0xffffffffu

void
sbx_wire_init(sbx_wire_msg *m, uint32_t type, uint32_t slot, uint64_t call_id)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->slot = slot;
    m->call_id = call_id;
}

void
sbx_wire_clear(sbx_wire_msg *m)
{
    sbx_buf_clear(&m->body);
    for (unsigned i = 0; i < m->nfds; i++)
        if (m->fds[i] >= 0 && !(m->borrowed & (1u << i)))
            close(m->fds[i]);
    m->nfds = 0;
    m->borrowed = 0;
    m->pos = 0;
}

static void
put_raw(sbx_wire_msg *m, const void *p, size_t n)
{
    if (!m->bad && sbx_buf_append(&m->body, p, n) < 0)
        m->bad = 1;
}

void
sbx_wire_put_u32(sbx_wire_msg *m, uint32_t v)
{
    put_raw(m, &v, sizeof(v));
}

void
sbx_wire_put_u64(sbx_wire_msg *m, uint64_t v)
{
    put_raw(m, &v, sizeof(v));
}

void
sbx_wire_put_i64(sbx_wire_msg *m, int64_t v)
{
    put_raw(m, &v, sizeof(v));
}

void
sbx_wire_put_f64(sbx_wire_msg *m, double v)
{
    put_raw(m, &v, sizeof(v));
}

void
sbx_wire_put_bytes(sbx_wire_msg *m, const void *data, size_t len)
{
    if (len >= STR_NULL) {
        m->bad = 1;
        return;
    }
    sbx_wire_put_u32(m, (uint32_t)len);
    put_raw(m, data, len);
    put_raw(m, "", 1);
}

void
sbx_wire_put_str(sbx_wire_msg *m, const char *s)
{
    if (!s)
        sbx_wire_put_u32(m, STR_NULL);
    else
        sbx_wire_put_bytes(m, s, strlen(s));
}

void
sbx_wire_put_strv(sbx_wire_msg *m, const char *const *v)
{
    uint32_t n = 0;

    if (!v) {
        sbx_wire_put_u32(m, STR_NULL);
        return;
    }
    while (v[n])
        n++;
    sbx_wire_put_u32(m, n);
    for (uint32_t i = 0; i < n; i++)
        sbx_wire_put_str(m, v[i]);
}

void
sbx_wire_put_fd(sbx_wire_msg *m, int fd)
{
    int copy;

    if (fd < 0) {
        sbx_wire_put_u32(m, STR_NULL);
        return;
    }
    if (m->nfds >= SBX_WIRE_MAX_FDS || (copy = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
        if (!m->bad)
            m->bad_errno = m->nfds >= SBX_WIRE_MAX_FDS ? E2BIG : errno;
        m->bad = 1;
        return;
    }
    m->fds[m->nfds] = copy;
    sbx_wire_put_u32(m, m->nfds++);
}

void
sbx_wire_put_fd_borrowed(sbx_wire_msg *m, int fd)
{
    if (fd < 0) {
        sbx_wire_put_u32(m, STR_NULL);
        return;
    }
    if (m->nfds >= SBX_WIRE_MAX_FDS) {
        if (!m->bad)
            m->bad_errno = E2BIG;
        m->bad = 1;
        return;
    }
    m->borrowed |= 1u << m->nfds;
    m->fds[m->nfds] = fd;
    sbx_wire_put_u32(m, m->nfds++);
}

void
sbx_wire_put_error(sbx_wire_msg *m, const sbx_error *e)
{
    size_t n;

    if (!e) {
        sbx_wire_put_u32(m, 0);
        return;
    }
    sbx_wire_put_u32(m, 1);
    sbx_wire_put_u32(m, (uint32_t)sbx_error_get_code(e));
    sbx_wire_put_u32(m, (uint32_t)sbx_error_get_outcome(e));
    sbx_wire_put_str(m, sbx_error_get0_backend(e));
    sbx_wire_put_str(m, sbx_error_get0_op(e));
    sbx_wire_put_str(m, sbx_error_get0_message(e));
    n = sbx_error_get_context_count(e);
    sbx_wire_put_u32(m, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        const char *k = "", *v = "";

        sbx_error_get0_context_at(e, i, &k, &v);
        sbx_wire_put_str(m, k);
        sbx_wire_put_str(m, v);
    }
}

static int
get_raw(sbx_wire_msg *m, void *p, size_t n)
{
    if (m->bad || m->body.len - m->pos < n) {
        m->bad = 1;
        memset(p, 0, n);
        return -1;
    }
    memcpy(p, m->body.data + m->pos, n);
    m->pos += n;
    return 0;
}

uint32_t
sbx_wire_get_u32(sbx_wire_msg *m)
{
    uint32_t v;

    get_raw(m, &v, sizeof(v));
    return v;
}

uint64_t
sbx_wire_get_u64(sbx_wire_msg *m)
{
    uint64_t v;

    get_raw(m, &v, sizeof(v));
    return v;
}

int64_t
sbx_wire_get_i64(sbx_wire_msg *m)
{
    int64_t v;

    get_raw(m, &v, sizeof(v));
    return v;
}

double
sbx_wire_get_f64(sbx_wire_msg *m)
{
    double v;

    get_raw(m, &v, sizeof(v));
    return v;
}

const void *
sbx_wire_get_bytes(sbx_wire_msg *m, size_t *len)
{
    uint32_t n = sbx_wire_get_u32(m);
    const char *p;

    *len = 0;
    if (m->bad || n == STR_NULL)
        return NULL;
    if (m->body.len - m->pos < (size_t)n + 1 || m->body.data[m->pos + n] != '\0') {
        m->bad = 1;
        return NULL;
    }
    p = m->body.data + m->pos;
    m->pos += (size_t)n + 1;
    *len = n;
    return p;
}

const char *
sbx_wire_get_str(sbx_wire_msg *m)
{
    size_t len;
    const char *s = sbx_wire_get_bytes(m, &len);

    /* A string holds no NUL of its own. */
    if (s && strlen(s) != len) {
        m->bad = 1;
        return NULL;
    }
    return s;
}

const char **
sbx_wire_get_strv(sbx_wire_msg *m, int *is_null)
{
    uint32_t n = sbx_wire_get_u32(m);
    const char **v;

    *is_null = 0;
    if (m->bad)
        return NULL;
    if (n == STR_NULL) {
        *is_null = 1;
        return NULL;
    }
    if (n > m->body.len - m->pos) {
        m->bad = 1;
        return NULL;
    }
    v = calloc((size_t)n + 1, sizeof(*v));
    if (!v) {
        m->bad = 1;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        v[i] = sbx_wire_get_str(m);
        if (!v[i]) {
            m->bad = 1;
            free(v);
            return NULL;
        }
    }
    return v;
}

int
sbx_wire_take_fd(sbx_wire_msg *m)
{
    uint32_t i = sbx_wire_get_u32(m);
    int fd;

    if (m->bad || i == STR_NULL)
        return -1;
    if (i >= m->nfds || m->fds[i] < 0) {
        m->bad = 1;
        return -1;
    }
    fd = m->fds[i];
    m->fds[i] = -1;
    return fd;
}

sbx_error *
sbx_wire_get_error(sbx_wire_msg *m)
{
    uint32_t present = sbx_wire_get_u32(m), code, outcome, n;
    const char *backend, *op, *message;
    sbx_error *e;

    if (m->bad || !present)
        return NULL;
    code = sbx_wire_get_u32(m);
    outcome = sbx_wire_get_u32(m);
    backend = sbx_wire_get_str(m);
    op = sbx_wire_get_str(m);
    message = sbx_wire_get_str(m);
    if (code >= SBX_ERROR_CODE_COUNT)
        code = SBX_ERROR_UNKNOWN;
    e = sbx_error_new((sbx_error_code)code, op && *op ? op : NULL, "%s",
                      message ? message : "(no message)");
    if (!e)
        return NULL;
    sbx_error_set_outcome(e, outcome ? SBX_ERROR_OUTCOME_UNKNOWN : SBX_ERROR_OUTCOME_FAILED);
    if (backend && *backend)
        sbx_error_fill(e, backend, NULL);
    n = sbx_wire_get_u32(m);
    for (uint32_t i = 0; i < n && !m->bad; i++) {
        const char *k = sbx_wire_get_str(m), *v = sbx_wire_get_str(m);

        if (k && v)
            sbx_error_add_context(e, k, v);
    }
    return e;
}

int
sbx_wire_send(int sock, const sbx_wire_msg *m)
{
    wire_header h = { SBX_WIRE_MAGIC, m->type, m->slot, 0, m->call_id };
    union {
        char buf[CMSG_SPACE(sizeof(int) * (SBX_WIRE_MAX_FDS + 1))];
        struct cmsghdr align;
    } cbuf;
    struct iovec iov[2];
    struct msghdr msg;
    int fds[SBX_WIRE_MAX_FDS + 1], body_fd = -1, e;
    unsigned k = 0;
    ssize_t n;

    if (m->bad) {
        errno = m->bad_errno ? m->bad_errno : ENOMEM;
        return -1;
    }
    if (m->body.len > SBX_WIRE_MAX_BODY) {
        errno = EMSGSIZE;
        return -1;
    }
    h.body_len = (uint32_t)m->body.len;
    iov[0].iov_base = &h;
    iov[0].iov_len = sizeof(h);
    iov[1].iov_base = m->body.data;
    iov[1].iov_len = m->body.len;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = m->body.len ? 2 : 1;
    for (unsigned i = 0; i < m->nfds; i++)
        fds[k++] = m->fds[i];
    if (m->body.len > SBX_WIRE_MAX_FRAME - sizeof(h)) {
        /* Too big for one packet: the body goes in a memfd. */
        size_t off = 0;

        body_fd = memfd_create("sbx-wire-body", MFD_CLOEXEC);
        if (body_fd < 0)
            return -1;
        while (off < m->body.len) {
            ssize_t w = write(body_fd, m->body.data + off, m->body.len - off);

            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                e = w < 0 ? errno : EIO;
                close(body_fd);
                errno = e;
                return -1;
            }
            off += (size_t)w;
        }
        h.type |= SBX_WIRE_BODY_IN_FD;
        msg.msg_iovlen = 1;
        fds[k++] = body_fd;
    }
    if (k > 0) {
        struct cmsghdr *c;

        memset(&cbuf, 0, sizeof(cbuf));
        msg.msg_control = cbuf.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * k);
        c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * k);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * k);
    }
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    e = errno;
    if (body_fd >= 0)
        close(body_fd);
    errno = e;
    return n < 0 ? -1 : 0;
}

static int wire_recv(int sock, sbx_wire_msg *m, void *scratch, int flags);

/* A receive that failed: closes the @n descriptors that came, clears @m,
 * sets errno to @e and returns -1. */
static int
recv_fail(sbx_wire_msg *m, const int *got, unsigned n, int e)
{
    for (unsigned i = 0; i < n; i++)
        close(got[i]);
    sbx_wire_clear(m);
    errno = e;
    return -1;
}

int
sbx_wire_recv(int sock, sbx_wire_msg *m, void *scratch)
{
    return wire_recv(sock, m, scratch, 0);
}

int
sbx_wire_recv_nowait(int sock, sbx_wire_msg *m, void *scratch)
{
    return wire_recv(sock, m, scratch, MSG_DONTWAIT);
}

static int
wire_recv(int sock, sbx_wire_msg *m, void *scratch, int flags)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * (SBX_WIRE_MAX_FDS + 1))];
        struct cmsghdr align;
    } cbuf;
    struct iovec iov = { scratch, SBX_WIRE_MAX_FRAME };
    int got[SBX_WIRE_MAX_FDS + 1];
    unsigned ngot = 0;
    struct msghdr msg;
    wire_header h;
    ssize_t n;

    sbx_wire_init(m, 0, 0, 0);
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.buf;
    msg.msg_controllen = sizeof(cbuf.buf);
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            int fds[SBX_WIRE_MAX_FDS + 8];

            if (k > sizeof(fds) / sizeof(fds[0]))
                k = sizeof(fds) / sizeof(fds[0]);
            memcpy(fds, CMSG_DATA(c), k * sizeof(int));
            for (size_t i = 0; i < k; i++) {
                if (ngot < SBX_WIRE_MAX_FDS + 1)
                    got[ngot++] = fds[i];
                else
                    close(fds[i]);
            }
        }
    }
    if (n == 0) {
        recv_fail(m, got, ngot, 0);
        return 0;
    }
    memcpy(&h, scratch, (size_t)n < sizeof(h) ? (size_t)n : sizeof(h));
    if ((size_t)n < sizeof(h) || (msg.msg_flags & MSG_TRUNC) || h.magic != SBX_WIRE_MAGIC ||
        ((h.type & SBX_WIRE_BODY_IN_FD) ? (size_t)n != sizeof(h) || h.body_len > SBX_WIRE_MAX_BODY
                                        : h.body_len != (size_t)n - sizeof(h))) {
        return recv_fail(m, got, ngot, EPROTO);
    }
    /* Out of descriptors here: the frame stands, its descriptors do not. */
    m->fds_lost = (msg.msg_flags & MSG_CTRUNC) != 0;
    m->type = h.type & ~SBX_WIRE_BODY_IN_FD;
    m->slot = h.slot;
    m->call_id = h.call_id;
    if (h.type & SBX_WIRE_BODY_IN_FD) {
        /* The body is in the last descriptor, a memfd. */
        int body_fd = ngot > 0 && !m->fds_lost ? got[--ngot] : -1;
        size_t off = 0;

        if (body_fd < 0) {
            return recv_fail(m, got, ngot, m->fds_lost ? EMFILE : EPROTO);
        }
        if (h.body_len) {
            m->body.data = malloc(h.body_len);
            m->body.cap = m->body.data ? h.body_len : 0;
        }
        while (m->body.data && off < h.body_len) {
            ssize_t r = pread(body_fd, m->body.data + off, h.body_len - off, (off_t)off);

            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            off += (size_t)r;
        }
        close(body_fd);
        m->body.len = off;
        if (off != h.body_len) {
            return recv_fail(m, got, ngot, EPROTO);
        }
    } else if (h.body_len &&
               sbx_buf_append(&m->body, (char *)scratch + sizeof(h), h.body_len) < 0) {
        return recv_fail(m, got, ngot, ENOMEM);
    }
    for (unsigned i = 0; i < ngot; i++) {
        if (m->nfds < SBX_WIRE_MAX_FDS)
            m->fds[m->nfds++] = got[i];
        else
            close(got[i]);
    }
    return 1;
}

char *
sbx_wait_status_text(int status)
{
    if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));

        return sbx_asprintf("killed by signal %d (SIG%s)", WTERMSIG(status),
                            abbrev ? abbrev : "?");
    }
    if (WIFEXITED(status))
        return sbx_asprintf("exited with status %d", WEXITSTATUS(status));
    return strdup("ended");
}
