/*
 * host/proxy.c — the out-of-process proxy: a plugin descriptor whose slots
 * send each call to an sbx-plugin-host process (host/plugin-host/) that runs
 * the real plugin.
 *
 * One host process per client. sbx_proxy_open() starts it on a
 * SOCK_SEQPACKET socketpair, exchanges HELLO / WELCOME (wire version, then
 * the plugin's descriptor facts), and builds a descriptor with the same
 * slots the plugin has, each a function generated from its row of the slot
 * table (host/slots.h) with exactly the slot's C signature; the rest of
 * libsbx uses it like any loaded plugin.
 * The callers waiting for replies take turns reading the socket.
 *
 * Faults:
 *  - The host dies (a plugin crash): every call in flight on the client
 *    fails with a retryable connection error naming the signal; the next
 *    call on the client or a sandbox starts a new host, and every sandbox
 *    whose session state was taken at create / resume is resumed there
 *    (reattached) under the same handle. A host that dies while no call
 *    waits is found gone by the next call (its socket hung up), which
 *    starts the new one. Processes started on the dead host are gone:
 *    calls on them fail with a connection error and never start a host.
 *  - A call past its deadline (the call context's, or the client's call
 *    timeout) or whose cancel descriptor fires gets a CANCEL frame: the
 *    plugin's cancel descriptor becomes readable. When no reply comes
 *    within SBX_PROXY_CANCEL_GRACE_SECS after that, the host is killed (and
 *    restarted by the next call) and the call fails with a timeout error.
 * Descriptors (exec stdin/stdout/stderr, file slot descriptors) are passed
 * with SCM_RIGHTS: bytes go straight between the command and the caller.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "proxy.h"
#include "slots.h"
#include "wire.h"

extern char **environ;

/** Seconds a cancelled call may take to answer before its host is killed. */
#define SBX_PROXY_CANCEL_GRACE_SECS 2.0
/** Seconds a new host may take to load its plugin and answer HELLO (or
 *  the client's call timeout, when shorter). */
#define SBX_PROXY_START_TIMEOUT_SECS 30.0
/** Seconds a host may take to exit after its socket closed. */
#define SBX_PROXY_EXIT_GRACE_SECS 2.0
/** Socket buffer for frames, bytes. */
#define SBX_PROXY_SOCKBUF (1024 * 1024)

typedef struct proxy_client proxy_client;

/* One call waiting for its reply. */
typedef struct proxy_call {
    struct proxy_call *next;
    uint64_t id;
    int efd;                    /* eventfd: a frame came or the host died */
    sbx_wire_msg *reply;        /* the REPLY, once here */
    sbx_wire_msg **entries;     /* ENTRY frames not yet handed over */
    size_t nentries, capentries;
    int failed;                 /* the host died first */
} proxy_call;

/* What every proxy handle starts with. */
typedef struct proxy_handle {
    proxy_client *pc;
    uint64_t remote;            /* the plugin host's handle id */
    unsigned gen;               /* the host generation it lives on */
} proxy_handle;

typedef struct proxy_sandbox {
    proxy_handle h;
    struct proxy_sandbox *prev, *next;
    char *state;                /* session state for reattaching; NULL if none */
    int lost;                   /* its host died and it could not be resumed */
    /* Its names as they came with the handle (wire 8): sandbox_id and
     * sandbox_root answer from here, and the first session_state after
     * the create (state_fresh) from state, with no round trip. */
    int named;                  /* id and root below are the plugin's */
    char *id, *root;            /* NULL when the plugin gave none */
    int state_fresh;            /* state was taken with the create's reply */
} proxy_sandbox;

typedef struct proxy_process {
    proxy_handle h;
    int event_fd;               /* the plugin's event descriptor (received) */
    int dead_fd;                /* dup of its host's socket: hangs up when the
                                 * host dies */
    int poll_fd;                /* epoll over both, handed to the caller */
    int event_added;            /* event_fd is in poll_fd */
} proxy_process;

/* Idle epoll sets kept per client (each with its host's hang-up watch in
 * it), so that an exec does not make and tear down one of its own: one, the
 * exec after exec of a caller; execs running side by side beyond it make
 * their own, closed when they end. */
#define PROXY_POLLSETS_KEPT 1

typedef struct proxy_pollset {
    int epfd;                   /* holds dead_fd (EPOLLRDHUP), nothing else */
    int dead_fd;
    unsigned gen;               /* the host generation dead_fd watches */
} proxy_pollset;

struct proxy_client {
    proxy_handle h;             /* h.pc == self; h.remote = plugin client */
    sbx_plugin desc;            /* what libsbx calls */
    char *backend;
    char *config;               /* client_new's config, for restarts */
    char *name, *version, *description;
    uint64_t have;              /* slots the plugin has */
    double call_timeout;        /* seconds; 0 = none */

    pthread_mutex_t restart_lock; /* held while a host is (re)started */
    pthread_mutex_t lock;       /* everything below */
    int sock;
    int old_sock;               /* the previous host's socket, shut down; closed
                                 * one restart later, so that a call still
                                 * holding its number never reaches a new host */
    pid_t pid;
    unsigned gen;
    int dead;                   /* the current host is gone */
    int restarting;             /* a new host is being started and the
                                 * sandboxes reattached: wait on restart_lock */
    int killed;                 /* we killed it (unacknowledged cancel) */
    char *death;                /* how it ended */
    int reaped;                 /* the current host's pid was waited for */
    int reading;                /* a waiting caller is reading the socket */
    void *scratch;              /* the reader's buffer, SBX_WIRE_MAX_FRAME */
    uint64_t next_call;
    proxy_call *calls;
    proxy_sandbox *sandboxes;
    proxy_pollset idle_sets[PROXY_POLLSETS_KEPT]; /* of ended processes */
    unsigned n_idle_sets;
};

/* A slot's return value, whatever its type. */
typedef union proxy_ret {
    int i;
    char *s;
    const char *cs;
} proxy_ret;

/* The proxy function of each row, generated below. */
static void *const proxy_fns[SBX_SLOT_COUNT];

/* ---------------------------------------------------------------- helpers */

static const sbx_slot_row *
row_of(unsigned slot)
{
    return &sbx_slot_rows[slot];
}

static char *
proxy_strdup_alloc(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = sbx_host_services_get()->alloc(n);

    if (p)
        memcpy(p, s, n);
    return p;
}

/* Sets a connection error about @pc's dead host into @err. */
static void
set_dead_error_as(proxy_client *pc, sbx_error **err, const char *slot, int timed_out)
{
    sbx_error *e;

    pthread_mutex_lock(&pc->lock);
    e = sbx_set_error(err, timed_out ? SBX_ERROR_TIMEOUT : SBX_ERROR_CONNECTION, slot,
                      "the plugin host of backend \"%s\" %s", pc->backend,
                      pc->death ? pc->death : "is gone");
    pthread_mutex_unlock(&pc->lock);
    sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
    sbx_error_fill(e, pc->backend, slot);
}

/* A connection error about @pc's dead host in @err. */
static void
set_dead_error(proxy_client *pc, sbx_error **err, const char *slot)
{
    set_dead_error_as(pc, err, slot, 0);
}

/* ---------------------------------------------------------------- reading */

/*
 * There is no reader thread: the callers waiting for replies take turns
 * reading the socket (one at a time, pc->reading), so a reply usually
 * reaches the thread that waits for it without a thread switch. A frame for
 * another call is handed to that call, whose thread is woken through its
 * eventfd. A caller whose call is done while others wait wakes one of them
 * to read on. A process handle's descriptor includes the socket's hang-up,
 * so an exec in flight wakes when the host dies even while no call waits.
 */

static proxy_call *
call_find(proxy_client *pc, uint64_t id)
{
    for (proxy_call *c = pc->calls; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Reaps @pid, killing it when it does not end within the grace. */
static int
reap(pid_t pid, double grace, int *killed_by_us)
{
    double until = sbx_monotonic_now() + grace;
    int status = 0;

    if (killed_by_us)
        *killed_by_us = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);

        if (r == pid)
            return status;
        if (r < 0 && errno == ECHILD)
            return -1; /* the application collected it (SIGCHLD ignored?) */
        if (r < 0 && errno != EINTR)
            return status;
        if (r == 0 && sbx_monotonic_now() >= until) {
            if (killed_by_us)
                *killed_by_us = 1;
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            return status;
        }
        usleep(1000);
    }
}

/*
 * The current host's socket gave EOF or an error: reap the host, say how it
 * ended, fail every call waiting on it. Called with pc->lock held.
 */
static void
conn_died_locked(proxy_client *pc)
{
    int status;
    char *how;

    int ours = 0;

    if (pc->dead)
        return;
    pc->dead = 1;
    status = reap(pc->pid, SBX_PROXY_EXIT_GRACE_SECS, &ours);
    pc->reaped = 1;
    how = status == -1 ? strdup("ended (its exit status was collected elsewhere)")
                       : sbx_wait_status_text(status);
    free(pc->death);
    if (pc->killed)
        pc->death = sbx_asprintf("(pid %d) did not acknowledge a cancel within %.0f s and "
                                 "was killed", (int)pc->pid, SBX_PROXY_CANCEL_GRACE_SECS);
    else if (ours)
        pc->death = sbx_asprintf("(pid %d) closed its socket and did not exit within %.0f s; "
                                 "it was killed", (int)pc->pid, SBX_PROXY_EXIT_GRACE_SECS);
    else
        pc->death = sbx_asprintf("(pid %d) died: %s", (int)pc->pid, how ? how : "ended");
    for (proxy_call *c = pc->calls; c; c = c->next) {
        c->failed = 1;
        eventfd_write(c->efd, 1);
    }
    sbx_log(SBX_LOG_INFO, pc->backend, "plugin host pid %d ended: %s", (int)pc->pid,
            how ? how : "?");
    free(how);
}

/* Hands frame @m to its call (with pc->lock held); frees it when no call
 * waits for it. */
static void
route_locked(proxy_client *pc, sbx_wire_msg *m, proxy_call *self)
{
    proxy_call *c = (m->type == SBX_MSG_REPLY || m->type == SBX_MSG_ENTRY)
                        ? call_find(pc, m->call_id) : NULL;

    if (c && m->type == SBX_MSG_REPLY && !c->reply) {
        c->reply = m;
        m = NULL;
    } else if (c && m->type == SBX_MSG_ENTRY) {
        if (c->nentries == c->capentries) {
            size_t ncap = c->capentries ? c->capentries * 2 : 16;
            sbx_wire_msg **n = realloc(c->entries, ncap * sizeof(*n));

            if (n) {
                c->entries = n;
                c->capentries = ncap;
            }
        }
        if (c->nentries < c->capentries) {
            c->entries[c->nentries++] = m;
            m = NULL;
        }
    }
    if (c && c != self)
        eventfd_write(c->efd, 1);
    if (m) {
        sbx_wire_clear(m);
        free(m);
    }
}

/* The calling thread's eventfd for waiting (kept for the thread's life,
 * closed when it exits). */
static pthread_key_t efd_key;
static pthread_once_t efd_once = PTHREAD_ONCE_INIT;
static __thread int efd_busy;

static void
efd_destroy(void *p)
{
    close((int)(intptr_t)p - 1);
}

static void
efd_key_make(void)
{
    pthread_key_create(&efd_key, efd_destroy);
}

/* An eventfd for one wait: the thread's own (drained), or a new one when the
 * thread's is in use (a listing callback that calls libsbx again). *@own
 * says which; give it back with efd_release(). */
static int
efd_get(int *own)
{
    int fd;

    pthread_once(&efd_once, efd_key_make);
    *own = 0;
    if (!efd_busy) {
        intptr_t v = (intptr_t)pthread_getspecific(efd_key);

        if (v == 0) {
            fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
            if (fd >= 0 && pthread_setspecific(efd_key, (void *)(intptr_t)(fd + 1)) != 0) {
                close(fd);
                fd = -1;
            }
        } else {
            eventfd_t drain;

            fd = (int)v - 1;
            eventfd_read(fd, &drain);
        }
        if (fd >= 0) {
            efd_busy = 1;
            *own = 1;
            return fd;
        }
    }
    return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

static void
efd_release(int fd, int own)
{
    if (own)
        efd_busy = 0;
    else if (fd >= 0)
        close(fd);
}

/* ---------------------------------------------------------------- calls */

/* Context the generic call needs beyond the frame. */
typedef struct call_io {
    const sbx_call_ctx *ctx;    /* NULL when the row has none */
    sbx_plugin_file_fn file_fn;
    sbx_plugin_owned_fn owned_fn;
    void *user_data;
} call_io;

/* Hands ENTRY frame @m to the caller's callback. Returns its verdict. */
static int
deliver_entry(call_io *io, sbx_wire_msg *m)
{
    if (io->file_fn) {
        sbx_plugin_file_info info = { sizeof(info), NULL, 0, 0, 0 };

        info.name = sbx_wire_get_str(m);
        info.is_dir = (int)sbx_wire_get_i64(m);
        info.size = sbx_wire_get_i64(m);
        info.mode = sbx_wire_get_u32(m);
        return m->bad ? 1 : io->file_fn(&info, io->user_data);
    }
    if (io->owned_fn) {
        sbx_plugin_owned_info info = { sizeof(info), NULL, NULL, 0, 0 };

        info.id = sbx_wire_get_str(m);
        info.create_token = sbx_wire_get_str(m);
        info.created_at = sbx_wire_get_f64(m);
        info.expires_at = sbx_wire_get_f64(m);
        return m->bad ? 1 : io->owned_fn(&info, io->user_data);
    }
    return 0;
}

/* When nobody reads while calls other than @self wait, wakes one of them to
 * read on. With pc->lock held. */
static void
wake_other_locked(proxy_client *pc, const proxy_call *self)
{
    if (pc->reading)
        return;
    for (proxy_call *c = pc->calls; c; c = c->next)
        if (c != self && !c->reply && !c->failed) {
            eventfd_write(c->efd, 1);
            return;
        }
}

/* Takes @call out of @pc's list and, when nobody reads while others wait,
 * wakes one of them to read on. With pc->lock held. */
static void
call_unlink_locked(proxy_client *pc, proxy_call *call)
{
    for (proxy_call **p = &pc->calls; *p; p = &(*p)->next)
        if (*p == call) {
            *p = call->next;
            break;
        }
    wake_other_locked(pc, call);
}

/*
 * Sends CALL frame @req on @pc's current host and waits for its REPLY,
 * handing ENTRY frames to @io's callback meanwhile. Returns the reply
 * (caller frees), or NULL with *@err set (connection / timeout).
 */
static sbx_wire_msg *
call_send_wait(proxy_client *pc, unsigned gen, sbx_wire_msg *req, call_io *io,
               const char *slot, sbx_error **err)
{
    proxy_call call = { .efd = -1 };
    sbx_wire_msg *reply = NULL;
    double deadline = 0, kill_at = 0;
    int cancel_fd = -1, cancelled = 0, stopped = 0, sock, own_efd, failed = 0;
    pid_t pid;

    call.efd = efd_get(&own_efd);
    if (call.efd < 0) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, slot, "eventfd: %s", strerror(errno));
        return NULL;
    }
    if (io->ctx) {
        deadline = io->ctx->deadline;
        cancel_fd = io->ctx->cancel_fd;
    }
    if (pc->call_timeout > 0) {
        double d = sbx_monotonic_now() + pc->call_timeout;

        if (!deadline || d < deadline)
            deadline = d;
    }

    pthread_mutex_lock(&pc->lock);
    if (pc->dead || pc->gen != gen) {
        /* Encoded for a host that is gone: its handle ids mean nothing to
         * the new one. */
        pthread_mutex_unlock(&pc->lock);
        efd_release(call.efd, own_efd);
        set_dead_error(pc, err, slot);
        return NULL;
    }
    call.id = ++pc->next_call;
    req->call_id = call.id;
    call.next = pc->calls;
    pc->calls = &call;
    sock = pc->sock;
    pid = pc->pid;
    pthread_mutex_unlock(&pc->lock);

    if (sbx_wire_send(sock, req) < 0) {
        int e = errno;

        pthread_mutex_lock(&pc->lock);
        call_unlink_locked(pc, &call);
        if ((e == EPIPE || e == ECONNRESET || e == ENOTCONN) && pc->pid == pid)
            conn_died_locked(pc);
        pthread_mutex_unlock(&pc->lock);
        efd_release(call.efd, own_efd);
        if (e == EPIPE || e == ECONNRESET || e == ENOTCONN) {
            set_dead_error(pc, err, slot);
        } else {
            sbx_error *x = sbx_set_error(err, SBX_ERROR_CONNECTION, slot,
                                         "cannot send %s to the plugin host: %s", slot,
                                         strerror(e));

            sbx_error_fill(x, pc->backend, slot);
        }
        return NULL;
    }

    for (;;) {
        struct pollfd pfd[2];
        nfds_t n = 0;
        int timeout = -1, rc, reader = 0, icancel = -1;
        double now = sbx_monotonic_now();
        sbx_wire_msg **entries = NULL;
        size_t nentries = 0;

        pthread_mutex_lock(&pc->lock);
        if (call.nentries) {
            entries = call.entries;
            nentries = call.nentries;
            call.entries = NULL;
            call.nentries = call.capentries = 0;
        }
        reply = call.reply;
        failed = call.failed;
        if (!reply && !failed && !nentries && !pc->reading && !pc->dead && pc->pid == pid) {
            pc->reading = 1;
            reader = 1;
        }
        pthread_mutex_unlock(&pc->lock);

        for (size_t i = 0; i < nentries; i++) {
            if (!stopped && deliver_entry(io, entries[i]) != 0) {
                sbx_wire_msg stop;

                stopped = 1;
                sbx_wire_init(&stop, SBX_MSG_STOP, 0, call.id);
                sbx_wire_send(sock, &stop);
                sbx_wire_clear(&stop);
            }
            sbx_wire_clear(entries[i]);
            free(entries[i]);
        }
        free(entries);
        if (reply || failed)
            break;
        if (nentries)
            continue;

        if (cancelled)
            timeout = kill_at > now ? (int)ceil((kill_at - now) * 1000) : 0;
        else if (deadline)
            timeout = deadline > now ? (int)ceil((deadline - now) * 1000) : 0;
        pfd[n++] = (struct pollfd){ reader ? sock : call.efd, POLLIN, 0 };
        if (cancel_fd >= 0 && !cancelled) {
            icancel = (int)n;
            pfd[n++] = (struct pollfd){ cancel_fd, POLLIN, 0 };
        }
        rc = poll(pfd, n, timeout);
        if (reader) {
            sbx_wire_msg *m = NULL;
            int got = 0;

            if (rc > 0 && pfd[0].revents) {
                m = malloc(sizeof(*m));
                got = m ? sbx_wire_recv(sock, m, pc->scratch) : -1;
            }
            pthread_mutex_lock(&pc->lock);
            pc->reading = 0;
            if (got == 1)
                route_locked(pc, m, &call);
            else if (rc > 0 && pfd[0].revents && pc->pid == pid)
                conn_died_locked(pc);
            if (got != 1)
                free(m);
            /* Whatever came, someone else may be waiting for the next frame
             * while this thread hands over entries or returns. */
            if (call.reply || call.failed || call.nentries)
                wake_other_locked(pc, &call);
            pthread_mutex_unlock(&pc->lock);
        } else if (rc > 0 && (pfd[0].revents & POLLIN)) {
            eventfd_t v;

            eventfd_read(call.efd, &v);
        }
        now = sbx_monotonic_now();
        if (!cancelled && ((icancel >= 0 && rc > 0 &&
                            (pfd[icancel].revents & (POLLIN | POLLHUP | POLLERR))) ||
                           (deadline && now >= deadline))) {
            sbx_wire_msg cancel;

            cancelled = 1;
            kill_at = now + SBX_PROXY_CANCEL_GRACE_SECS;
            sbx_wire_init(&cancel, SBX_MSG_CANCEL, 0, call.id);
            sbx_wire_send(sock, &cancel);
            sbx_wire_clear(&cancel);
            sbx_log(SBX_LOG_INFO, pc->backend, "%s: cancel sent to plugin host %d", slot,
                    (int)pid);
        } else if (cancelled && now >= kill_at) {
            pthread_mutex_lock(&pc->lock);
            if (pc->pid == pid && !pc->dead) {
                pc->killed = 1;
                kill(pid, SIGKILL);
            }
            pthread_mutex_unlock(&pc->lock);
            kill_at = now + 3600; /* the reader sees the end and fails the calls */
        }
    }

    pthread_mutex_lock(&pc->lock);
    call_unlink_locked(pc, &call);
    pthread_mutex_unlock(&pc->lock);
    /* Entries that came with the reply, after the last hand-over. */
    for (size_t i = 0; i < call.nentries; i++) {
        if (!stopped && deliver_entry(io, call.entries[i]) != 0)
            stopped = 1;
        sbx_wire_clear(call.entries[i]);
        free(call.entries[i]);
    }
    free(call.entries);
    efd_release(call.efd, own_efd);
    if (!reply) {
        int killed;

        pthread_mutex_lock(&pc->lock);
        killed = pc->killed && pc->pid == pid;
        pthread_mutex_unlock(&pc->lock);
        /* Only the call whose cancel went unanswered timed out; the others
         * lost their host. */
        set_dead_error_as(pc, err, slot, cancelled && killed);
    }
    return reply;
}

/* ---------------------------------------------------------------- hosts */

static void proxy_reattach(proxy_client *pc);

/* 1 when the host on @sock (our writing side shut down) answers with a
 * LINGER frame within @grace seconds: it keeps attached sandboxes of this
 * process and ends after it. 0 at EOF (it exits now) or at the grace. */
static int
host_lingers(int sock, void *scratch, double grace)
{
    double until = sbx_monotonic_now() + grace;

    if (sock < 0 || !scratch)
        return 0;
    for (;;) {
        double left = until - sbx_monotonic_now();
        struct pollfd p = { sock, POLLIN, 0 };
        sbx_wire_msg m;
        int rc, type;

        if (left <= 0)
            return 0;
        rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return 0;
        if (sbx_wire_recv(sock, &m, scratch) != 1)
            return 0;
        type = (int)m.type;
        sbx_wire_clear(&m);
        if (type == SBX_MSG_LINGER)
            return 1;
        /* A late reply of a call nobody waits for: skip it. */
    }
}

/* Closes the current host's socket (the host exits at EOF, or says it
 * lingers: it then ends after this process, destroying the attached
 * sandboxes it keeps) and reaps it, killing it after a grace. Called
 * without pc->lock; no call may wait. */
static void
host_stop(proxy_client *pc)
{
    pthread_mutex_lock(&pc->lock);
    if (pc->sock >= 0)
        shutdown(pc->sock, pc->dead ? SHUT_RDWR : SHUT_WR);
    if (!pc->reaped && pc->pid > 0) {
        if (!pc->dead && host_lingers(pc->sock, pc->scratch, SBX_PROXY_EXIT_GRACE_SECS))
            sbx_log(SBX_LOG_INFO, pc->backend, "plugin host pid %d stays until this process "
                    "ends (it keeps attached sandboxes)", (int)pc->pid);
        else
            reap(pc->pid, SBX_PROXY_EXIT_GRACE_SECS, NULL);
        pc->reaped = 1;
    }
    if (pc->sock >= 0)
        shutdown(pc->sock, SHUT_RDWR);
    sbx_close_fd(&pc->old_sock);
    pc->old_sock = pc->sock;
    pc->sock = -1;
    pc->dead = 1;
    pthread_mutex_unlock(&pc->lock);
}

/*
 * Starts a host for @pc: spawn, HELLO / WELCOME, reader thread, then the
 * plugin's client_new. Called with restart_lock held. Returns 0 or -1 with
 * *@err set.
 */
static int
host_start(proxy_client *pc, sbx_error **err)
{
    static const char op[] = "plugin_host";
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    int sv[2], child, bufsize = SBX_PROXY_SOCKBUF;
    char fdarg[16], *host = NULL;
    void *scratch = NULL;
    sbx_wire_msg m;
    pid_t pid;
    uint32_t version, ok;
    sbx_error *e;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        e = sbx_set_error(err, sbx_errno_code(errno, SBX_ERROR_CONNECTION), op,
                          "cannot start the plugin host: socketpair: %s", strerror(errno));
        return -1;
    }
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize));
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize));
    /* Our end away from 0-2 (an application may run with them closed),
     * the child's away from 0-3 (where the host's descriptors go). */
    if (sv[0] <= 2) {
        int moved = fcntl(sv[0], F_DUPFD_CLOEXEC, 10);

        close(sv[0]);
        sv[0] = moved;
    }
    child = sv[1];
    if (child <= 3) {
        int moved = fcntl(child, F_DUPFD_CLOEXEC, 10);

        close(child);
        child = moved;
    }
    if (sv[0] < 0) {
        if (child >= 0)
            close(child);
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of descriptors");
        return -1;
    }
    host = sbx_plugin_host_path();
    if (child < 0 || !host) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory or descriptors");
        goto fail_fds;
    }
    snprintf(fdarg, sizeof(fdarg), "%d", 3);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (fcntl(2, F_GETFD) >= 0) {
        /* What the plugin prints goes to the application's stderr. */
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    } else {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    }
    posix_spawn_file_actions_adddup2(&fa, child, 3);
    /* Nothing else of the application's: not its descriptors left without
     * close-on-exec either. */
    posix_spawn_file_actions_addclosefrom_np(&fa, 4);
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    /* Its own process group: a terminal's Ctrl-C goes to the application,
     * which then closes the socket, and the host follows. */
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    {
        char *const argv[] = { host, (char *)"--serve", fdarg, NULL };
        int rc = posix_spawn(&pid, host, &fa, &attr, argv, environ);

        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (rc != 0) {
            e = sbx_set_error(err, sbx_errno_code(rc, SBX_ERROR_CONFIGURATION), op,
                              "cannot start the plugin host %s: %s (set SBX_PLUGIN_HOST, "
                              "or SBX_PLUGIN_MODE=inprocess)", host, strerror(rc));
            sbx_error_add_context(e, "path", host);
            goto fail_fds;
        }
    }
    close(child);
    child = -1;

    /* HELLO: the wire versions we speak and the backend. */
    sbx_wire_init(&m, SBX_MSG_HELLO, 0, 0);
    sbx_wire_put_u32(&m, SBX_WIRE_VERSION_MIN);
    sbx_wire_put_u32(&m, SBX_WIRE_VERSION_MAX);
    sbx_wire_put_str(&m, pc->backend);
    if (sbx_wire_send(sv[0], &m) < 0) {
        sbx_wire_clear(&m);
        goto died;
    }
    sbx_wire_clear(&m);
    /* WELCOME within a bound: a plugin that hangs while loading must not
     * hang the application. */
    {
        double limit = pc->call_timeout > 0 && pc->call_timeout < SBX_PROXY_START_TIMEOUT_SECS
                           ? pc->call_timeout : SBX_PROXY_START_TIMEOUT_SECS;
        struct pollfd p = { sv[0], POLLIN, 0 };
        int rc;

        do
            rc = poll(&p, 1, (int)(limit * 1000));
        while (rc < 0 && errno == EINTR);
        if (rc == 0) {
            kill(pid, SIGKILL);
            close(sv[0]);
            reap(pid, SBX_PROXY_EXIT_GRACE_SECS, NULL);
            e = sbx_set_error(err, SBX_ERROR_TIMEOUT, op,
                              "the plugin host of backend \"%s\" (pid %d) did not finish "
                              "loading the plugin within %g s and was killed", pc->backend,
                              (int)pid, limit);
            sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
            free(host);
            return -1;
        }
    }
    scratch = malloc(SBX_WIRE_MAX_FRAME);
    if (!scratch || sbx_wire_recv(sv[0], &m, scratch) != 1) {
        if (scratch)
            sbx_wire_clear(&m);
        goto died;
    }
    if (m.type != SBX_MSG_WELCOME)
        m.bad = 1;
    free(scratch);
    scratch = NULL;
    version = sbx_wire_get_u32(&m);
    sbx_wire_get_u32(&m); /* the host's pid, as it sees itself */
    ok = sbx_wire_get_u32(&m);
    if (!ok || version == 0) {
        sbx_error *remote = sbx_wire_get_error(&m);

        sbx_wire_clear(&m);
        close(sv[0]);
        reap(pid, SBX_PROXY_EXIT_GRACE_SECS, NULL);
        free(host);
        if (!remote)
            remote = sbx_error_new(SBX_ERROR_CONNECTION, op, "the plugin host refused HELLO");
        sbx_error_propagate(err, remote);
        return -1;
    }
    if (!pc->name) {
        pc->name = sbx_strdup(sbx_wire_get_str(&m));
        pc->version = sbx_strdup(sbx_wire_get_str(&m));
        pc->description = sbx_strdup(sbx_wire_get_str(&m));
        pc->desc.abi_major = sbx_wire_get_u32(&m);
        pc->desc.abi_minor = sbx_wire_get_u32(&m);
        pc->desc.caps = sbx_wire_get_u64(&m);
        pc->have = sbx_wire_get_u64(&m);
    }
    if (m.bad) {
        sbx_wire_clear(&m);
        kill(pid, SIGKILL);
        close(sv[0]);
        reap(pid, SBX_PROXY_EXIT_GRACE_SECS, NULL);
        free(scratch);
        free(host);
        e = sbx_set_error(err, SBX_ERROR_CONNECTION, op,
                          "the plugin host of backend \"%s\" (pid %d) sent a malformed "
                          "WELCOME (a different build of sbx-plugin-host?)", pc->backend,
                          (int)pid);
        sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
        return -1;
    }
    sbx_wire_clear(&m);

    pthread_mutex_lock(&pc->lock);
    if (!pc->scratch)
        pc->scratch = malloc(SBX_WIRE_MAX_FRAME);
    pc->sock = sv[0];
    pc->pid = pid;
    pc->gen++;
    pc->dead = 0;
    pc->killed = 0;
    pc->reaped = 0;
    pc->reading = 0;
    if (!pc->scratch) {
        kill(pid, SIGKILL);
        reap(pid, SBX_PROXY_EXIT_GRACE_SECS, NULL);
        pc->reaped = 1;
        sbx_close_fd(&pc->sock);
        pc->dead = 1;
        pthread_mutex_unlock(&pc->lock);
        free(host);
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    pthread_mutex_unlock(&pc->lock);
    free(host);
    sbx_log(SBX_LOG_INFO, pc->backend, "plugin host pid %d serves it (wire version %u)",
            (int)pid, version);

    /* The plugin's client, with the same config every time. */
    if (pc->have & ((uint64_t)1 << SBX_SLOT_ID_client_new)) {
        sbx_plugin_client *remote = NULL;
        sbx_error *cerr = NULL;
        const char *config = pc->config;
        sbx_plugin_client **out = &remote;
        sbx_error **ep = &cerr;
        void *av[3] = { &config, &out, &ep };
        proxy_ret r;

        pc->h.gen = pc->gen;
        sbx_proxy_invoke_on(pc, SBX_SLOT_ID_client_new, av, &r);
        if (r.i != 0) {
            sbx_error_ensure(&cerr, pc->backend, "client_new");
            sbx_error_propagate(err, cerr);
            host_stop(pc);
            return -1;
        }
        sbx_error_free(cerr);
    } else {
        pc->h.remote = 0;
    }
    pc->h.gen = pc->gen;
    return 0;

died:
    /* The host ended before it welcomed us: say how it ended. */
    close(sv[0]);
    {
        int status = reap(pid, SBX_PROXY_EXIT_GRACE_SECS, NULL);
        char *how = sbx_wait_status_text(status);

        e = sbx_set_error(err, SBX_ERROR_CONNECTION, op,
                          "the plugin host of backend \"%s\" (pid %d) %s%s before it was ready",
                          pc->backend, (int)pid, how && strncmp(how, "killed", 6) == 0 ? "was " : "",
                          how ? how : "ended");
        sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
        free(how);
    }
    free(scratch);
    free(host);
    return -1;
fail_fds:
    close(sv[0]);
    if (child >= 0)
        close(child);
    free(host);
    return -1;
}

/* 1 when @pc's host hung up while no call of the client waited (killed
 * while idle: nobody read the socket to see it go), so that the next call
 * starts a new host instead of failing on the dead one's socket. With calls
 * waiting it is theirs to find (the replies before the hang-up are
 * theirs). With pc->lock held. */
static int
hung_up_while_idle_locked(proxy_client *pc)
{
    struct pollfd p = { .fd = pc->sock, .events = POLLIN };

    if (pc->dead || pc->calls || pc->reading || pc->sock < 0)
        return 0;
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)) != 0;
}

/* Makes sure @pc has a live host; restarts and reattaches when it died.
 * Returns 0 or -1 with *@err set. */
static int
ensure_host(proxy_client *pc, const char *slot, sbx_error **err)
{
    int dead;

    pthread_mutex_lock(&pc->lock);
    if (hung_up_while_idle_locked(pc))
        conn_died_locked(pc);
    dead = pc->dead || pc->restarting;
    pthread_mutex_unlock(&pc->lock);
    if (!dead)
        return 0;
    /* Dead, or another thread is starting its successor: wait for that. */
    pthread_mutex_lock(&pc->restart_lock);
    pthread_mutex_lock(&pc->lock);
    dead = pc->dead;
    if (dead)
        pc->restarting = 1;
    pthread_mutex_unlock(&pc->lock);
    if (dead) {
        int rc;

        host_stop(pc);
        rc = host_start(pc, err);
        if (rc == 0)
            proxy_reattach(pc);
        pthread_mutex_lock(&pc->lock);
        pc->restarting = 0;
        pthread_mutex_unlock(&pc->lock);
        if (rc < 0) {
            pthread_mutex_unlock(&pc->restart_lock);
            sbx_error_fill(err ? *err : NULL, pc->backend, slot);
            return -1;
        }
    }
    pthread_mutex_unlock(&pc->restart_lock);
    return 0;
}

/* ---------------------------------------------------------------- kept strings */

/*
 * Strings a slot returns borrowed (sandbox_id, sandbox_root, stat_file's
 * name) are kept per calling thread and slot: valid until the same thread
 * calls that slot again, so threads sharing a sandbox never free each
 * other's strings.
 */
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

static void
kept_destroy(void *p)
{
    char **a = p;

    for (unsigned i = 0; i < SBX_SLOT_COUNT; i++)
        free(a[i]);
    free(a);
}

static void
kept_key_make(void)
{
    pthread_key_create(&kept_key, kept_destroy);
}

static const char *
kept_set(unsigned slot, const char *s)
{
    char **a;

    pthread_once(&kept_once, kept_key_make);
    a = pthread_getspecific(kept_key);
    if (!a) {
        a = calloc(SBX_SLOT_COUNT, sizeof(*a));
        if (!a || pthread_setspecific(kept_key, a) != 0) {
            free(a);
            return NULL;
        }
    }
    free(a[slot]);
    a[slot] = s ? strdup(s) : NULL;
    return a[slot];
}

/* ---------------------------------------------------------------- handles */

static void
sandbox_link(proxy_client *pc, proxy_sandbox *sb)
{
    pthread_mutex_lock(&pc->lock);
    sb->next = pc->sandboxes;
    if (pc->sandboxes)
        pc->sandboxes->prev = sb;
    pc->sandboxes = sb;
    pthread_mutex_unlock(&pc->lock);
}

static void
sandbox_unlink(proxy_client *pc, proxy_sandbox *sb)
{
    pthread_mutex_lock(&pc->lock);
    if (sb->prev)
        sb->prev->next = sb->next;
    else if (pc->sandboxes == sb)
        pc->sandboxes = sb->next;
    if (sb->next)
        sb->next->prev = sb->prev;
    sb->prev = sb->next = NULL;
    pthread_mutex_unlock(&pc->lock);
}

/*
 * Keeps the epoll set @epfd of an ended process (its event descriptor
 * already taken out; @dead_fd, the hang-up watch in it, of host
 * generation @gen) for the next process of @pc. 1 when kept (@pc owns both
 * descriptors now), 0 when the caller closes them: the set is not whole
 * (-1), of another generation or of a host that died, or enough are kept.
 */
static int
pollset_keep(proxy_client *pc, int epfd, int dead_fd, unsigned gen)
{
    int kept = 0;

    if (epfd < 0 || dead_fd < 0)
        return 0;
    pthread_mutex_lock(&pc->lock);
    if (!pc->dead && pc->gen == gen && pc->n_idle_sets < PROXY_POLLSETS_KEPT) {
        pc->idle_sets[pc->n_idle_sets++] = (proxy_pollset){ epfd, dead_fd, gen };
        kept = 1;
    }
    pthread_mutex_unlock(&pc->lock);
    return kept;
}

/* Takes a kept set of host generation @gen out of @pc into @p (poll_fd,
 * dead_fd), closing the kept sets of other generations met on the way; 0,
 * or -1 when none is kept. Call with pc->lock held. */
static int
pollset_take_locked(proxy_client *pc, unsigned gen, proxy_process *p)
{
    while (pc->n_idle_sets > 0) {
        proxy_pollset *ps = &pc->idle_sets[--pc->n_idle_sets];

        if (ps->gen == gen && !pc->dead) {
            p->poll_fd = ps->epfd;
            p->dead_fd = ps->dead_fd;
            return 0;
        }
        close(ps->epfd);
        close(ps->dead_fd);
    }
    return -1;
}

/* Closes the sets @pc keeps. */
static void
pollsets_close(proxy_client *pc)
{
    while (pc->n_idle_sets > 0) {
        proxy_pollset *ps = &pc->idle_sets[--pc->n_idle_sets];

        close(ps->epfd);
        close(ps->dead_fd);
    }
}

/* Frees our side of sandbox or process handle @h (encoder @enc): a
 * sandbox leaves @pc's list (when @pc is not NULL), a process closes its
 * descriptors. */
static void
handle_free_local(proxy_client *pc, int enc, proxy_handle *h)
{
    if (enc == SBX_ENC_SANDBOX) {
        proxy_sandbox *sb = (proxy_sandbox *)h;

        if (pc)
            sandbox_unlink(pc, sb);
        free(sb->state);
        free(sb->id);
        free(sb->root);
    } else if (enc == SBX_ENC_PROCESS) {
        proxy_process *p = (proxy_process *)h;
        int clean = 1;

        if (p->event_added)
            clean = epoll_ctl(p->poll_fd, EPOLL_CTL_DEL, p->event_fd, NULL) == 0;
        sbx_close_fd(&p->event_fd);
        if (pc && clean && pollset_keep(pc, p->poll_fd, p->dead_fd, p->h.gen))
            p->poll_fd = p->dead_fd = -1;
        sbx_close_fd(&p->poll_fd);
        sbx_close_fd(&p->dead_fd);
    }
    free(h);
}

/* ---------------------------------------------------------------- invoke */

/* The client a call's first argument belongs to. */
static proxy_client *
first_client(const sbx_slot_row *row, void **av)
{
    void *p = *(void **)av[0];

    switch (row->enc[0]) {
    case SBX_ENC_CLIENT:
        return p;
    case SBX_ENC_SANDBOX:
    case SBX_ENC_PROCESS:
        return p ? ((proxy_handle *)p)->pc : NULL;
    default:
        return NULL;
    }
}

/* The ERROR argument of a call, or NULL. */
static sbx_error **
error_arg(const sbx_slot_row *row, void **av)
{
    for (unsigned i = 0; i < row->nargs; i++)
        if (row->enc[i] == SBX_ENC_ERROR)
            return *(sbx_error ***)av[i];
    return NULL;
}

static void
ret_fail(const sbx_slot_row *row, proxy_ret *ret)
{
    switch (row->ret) {
    case SBX_RET_INT:
    case SBX_RET_FD:
        ret->i = -1;
        break;
    case SBX_RET_STR_ALLOC:
        ret->s = NULL;
        break;
    case SBX_RET_STR_BORROWED:
        ret->cs = NULL;
        break;
    default:
        break;
    }
}

/* Encodes IN argument @i of @row into @m. */
static void
encode_arg(const sbx_slot_row *row, unsigned i, void **av, sbx_wire_msg *m, call_io *io,
           proxy_client *pc)
{
    switch (row->enc[i]) {
    case SBX_ENC_CLIENT:
        sbx_wire_put_u64(m, pc->h.remote);
        break;
    case SBX_ENC_SANDBOX:
    case SBX_ENC_PROCESS: {
        proxy_handle *h = *(proxy_handle **)av[i];

        sbx_wire_put_u64(m, h ? h->remote : 0);
        break;
    }
    case SBX_ENC_CTX: {
        const sbx_call_ctx *ctx = *(const sbx_call_ctx **)av[i];
        double deadline = ctx ? ctx->deadline : 0;

        if (pc->call_timeout > 0) {
            double d = sbx_monotonic_now() + pc->call_timeout;

            if (!deadline || d < deadline)
                deadline = d;
        }
        io->ctx = ctx;
        sbx_wire_put_f64(m, deadline);
        sbx_wire_put_str(m, ctx ? ctx->create_token : NULL);
        break;
    }
    case SBX_ENC_STR:
        sbx_wire_put_str(m, *(const char **)av[i]);
        break;
    case SBX_ENC_BYTES: {
        const void *p = *(const void **)av[i];
        size_t len = row->len[i] >= 0 ? *(size_t *)av[row->len[i]] : 0;

        sbx_wire_put_bytes(m, p ? p : "", p ? len : 0);
        break;
    }
    case SBX_ENC_SIZE:
        sbx_wire_put_u64(m, (uint64_t) * (size_t *)av[i]);
        break;
    case SBX_ENC_INT:
        sbx_wire_put_i64(m, *(int *)av[i]);
        break;
    case SBX_ENC_U32:
        sbx_wire_put_u32(m, *(unsigned *)av[i]);
        break;
    case SBX_ENC_FD:
        sbx_wire_put_fd(m, *(int *)av[i]);
        break;
    case SBX_ENC_CREATE_REQ: {
        const sbx_plugin_create_request *r = *(const sbx_plugin_create_request **)av[i];

        sbx_wire_put_u64(m, r->set_fields);
        sbx_wire_put_f64(m, r->cpu);
        sbx_wire_put_i64(m, r->memory_mb);
        sbx_wire_put_f64(m, r->timeout_secs);
        sbx_wire_put_str(m, r->workdir);
        sbx_wire_put_strv(m, r->env);
        sbx_wire_put_f64(m, r->expires_at);
        sbx_wire_put_str(m, r->image);
        sbx_wire_put_str(m, r->template_name);
        sbx_wire_put_str(m, r->snapshot_id);
        sbx_wire_put_str(m, r->app_name);
        sbx_wire_put_str(m, r->gpu);
        sbx_wire_put_i64(m, r->disk_mb);
        sbx_wire_put_i64(m, r->allow_internet);
        sbx_wire_put_str(m, r->backend_options);
        sbx_wire_put_i64(m, r->struct_size >= offsetof(sbx_plugin_create_request, detached) +
                                                   sizeof(r->detached)
                                ? r->detached
                                : 0);
        {
            size_t n = r->struct_size >= offsetof(sbx_plugin_create_request, n_ports) +
                                             sizeof(r->n_ports) && r->ports
                           ? r->n_ports
                           : 0;

            sbx_wire_put_u32(m, (uint32_t)n);
            for (size_t k = 0; k < n; k++)
                sbx_wire_put_u32(m, r->ports[k]);
        }
        sbx_wire_put_str(m, r->struct_size >= offsetof(sbx_plugin_create_request, user) +
                                                   sizeof(r->user)
                                ? r->user
                                : NULL);
        break;
    }
    case SBX_ENC_EXEC_REQ: {
        const sbx_plugin_exec_request *r = *(const sbx_plugin_exec_request **)av[i];

        sbx_wire_put_strv(m, r->argv);
        sbx_wire_put_str(m, r->shell);
        sbx_wire_put_strv(m, r->env);
        sbx_wire_put_str(m, r->cwd);
        sbx_wire_put_str(m, r->user);
        sbx_wire_put_u32(m, r->tty_rows);
        sbx_wire_put_u32(m, r->tty_cols);
        /* The call's descriptors stay open until it returns, and the frame
         * is sent before that: no copies. */
        sbx_wire_put_fd_borrowed(m, r->stdin_fd);
        sbx_wire_put_fd_borrowed(m, r->stdout_fd);
        sbx_wire_put_fd_borrowed(m, r->stderr_fd);
        /* A descriptor travels beside the frame; only the negative
         * values (-1 EOF, -2 interactive) travel as numbers. */
        sbx_wire_put_i64(m, r->stdin_fd < 0 ? r->stdin_fd : -1);
        sbx_wire_put_u32(m, r->struct_size >= offsetof(sbx_plugin_exec_request, flags)
                                                   + sizeof(r->flags) ? r->flags : 0);
        sbx_wire_put_fd_borrowed(m, r->struct_size >= offsetof(sbx_plugin_exec_request, exit_fd)
                                        + sizeof(r->exit_fd) ? r->exit_fd : -1);
        sbx_wire_put_f64(m, r->struct_size >= offsetof(sbx_plugin_exec_request, start_deadline)
                                + sizeof(r->start_deadline) ? r->start_deadline : 0);
        break;
    }
    case SBX_ENC_FILE_FN:
        io->file_fn = *(sbx_plugin_file_fn *)av[i];
        break;
    case SBX_ENC_OWNED_FN:
        io->owned_fn = *(sbx_plugin_owned_fn *)av[i];
        break;
    case SBX_ENC_USER_DATA:
        io->user_data = *(void **)av[i];
        break;
    default:
        break;
    }
}

/*
 * Answers @slot on sandbox handle @av[0] from what came with the handle,
 * with no round trip: sandbox_id and sandbox_root (the plugin's strings,
 * kept as long as the handle), and the first session_state after the
 * create or resume (the state taken in the same reply; a later call asks
 * the plugin, the state may have changed). Returns 1 when answered into
 * @ret, 0 when the call must go to the host.
 */
static int
answer_from_names(unsigned slot, void **av, proxy_ret *ret)
{
    proxy_sandbox *sb;
    int done = 0;

    if (slot != SBX_SLOT_ID_sandbox_id && slot != SBX_SLOT_ID_sandbox_root &&
        slot != SBX_SLOT_ID_session_state)
        return 0;
    sb = *(proxy_sandbox **)av[0];
    if (!sb || !sb->named)
        return 0;
    if (slot == SBX_SLOT_ID_sandbox_id) {
        ret->cs = sb->id;
        return 1;
    }
    if (slot == SBX_SLOT_ID_sandbox_root) {
        ret->cs = sb->root;
        return 1;
    }
    pthread_mutex_lock(&sb->h.pc->lock);
    if (sb->state_fresh && sb->state) {
        sb->state_fresh = 0;
        ret->s = proxy_strdup_alloc(sb->state);
        done = ret->s != NULL;
    }
    pthread_mutex_unlock(&sb->h.pc->lock);
    return done;
}

/*
 * Keeps @fd (received: the plugin's event descriptor of process @p) and
 * returns what the caller polls: an epoll descriptor over it and this host
 * generation's hang-up watch (dead_fd), so a crash wakes the caller too.
 * The set is one kept from an ended process (set up with the process,
 * pollset_take_locked()) or made here; it stays with @p until it is freed.
 */
static int
process_set_event_fd(proxy_process *p, int fd)
{
    struct epoll_event ev = { .events = EPOLLIN };

    if (p->event_added && epoll_ctl(p->poll_fd, EPOLL_CTL_DEL, p->event_fd, NULL) < 0)
        sbx_close_fd(&p->poll_fd);    /* not to be kept with a stale entry */
    p->event_added = 0;
    sbx_close_fd(&p->event_fd);
    if (fd < 0)
        return -1;
    p->event_fd = fd;
    if (p->poll_fd < 0) {
        p->poll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (p->poll_fd < 0)
            return p->event_fd;
        if (p->dead_fd >= 0) {
            /* Only the hang-up (always reported), not the frames. */
            ev.events = EPOLLRDHUP;
            ev.data.fd = p->dead_fd;
            epoll_ctl(p->poll_fd, EPOLL_CTL_ADD, p->dead_fd, &ev);
        }
    }
    ev.events = EPOLLIN;
    ev.data.fd = p->event_fd;
    if (epoll_ctl(p->poll_fd, EPOLL_CTL_ADD, p->event_fd, &ev) < 0)
        return p->event_fd;
    p->event_added = 1;
    return p->poll_fd;
}

/* Decodes the reply @rep of @row into the caller's OUT arguments and @ret. */
static void
decode_reply(proxy_client *pc, const sbx_slot_row *row, unsigned slot, void **av,
             sbx_wire_msg *rep, proxy_ret *ret, unsigned gen)
{
    proxy_handle *first = row->enc[0] == SBX_ENC_CLIENT ? &pc->h : *(proxy_handle **)av[0];
    int received_fd = -1, ok_outs;

    switch (row->ret) {
    case SBX_RET_INT:
        ret->i = (int)sbx_wire_get_i64(rep);
        break;
    case SBX_RET_FD:
        ret->i = (int)sbx_wire_get_i64(rep);
        received_fd = sbx_wire_take_fd(rep);
        break;
    case SBX_RET_STR_ALLOC: {
        const char *s = sbx_wire_get_str(rep);

        ret->s = s ? proxy_strdup_alloc(s) : NULL;
        break;
    }
    case SBX_RET_STR_BORROWED: {
        const char *s = sbx_wire_get_str(rep);

        ret->cs = kept_set(slot, s);
        break;
    }
    default:
        break;
    }
    if (row->ret == SBX_RET_FD)
        ret->i = process_set_event_fd((proxy_process *)first, received_fd);
    ok_outs = (int)sbx_wire_get_u32(rep);
    for (unsigned i = 0; i < row->nargs; i++) {
        if (row->dir[i] != SBX_DIR_OUT)
            continue;
        switch (row->enc[i]) {
        case SBX_ENC_U64:
            if (ok_outs)
                **(uint64_t **)av[i] = sbx_wire_get_u64(rep);
            break;
        case SBX_ENC_INT_OUT:
            if (ok_outs)
                **(int **)av[i] = (int)sbx_wire_get_i64(rep);
            break;
        case SBX_ENC_FILE_INFO: {
            sbx_plugin_file_info *info = *(sbx_plugin_file_info **)av[i];

            if (!ok_outs)
                break;
            {
                const char *name = sbx_wire_get_str(rep);

                info->name = kept_set(slot, name);
                info->is_dir = (int)sbx_wire_get_i64(rep);
                info->size = sbx_wire_get_i64(rep);
                info->mode = sbx_wire_get_u32(rep);
            }
            break;
        }
        case SBX_ENC_NEW_CLIENT: {
            uint64_t id = ok_outs ? sbx_wire_get_u64(rep) : 0;

            if (ok_outs && ret->i == 0) {
                pc->h.remote = id;
                **(sbx_plugin_client ***)av[i] = (sbx_plugin_client *)pc;
            }
            break;
        }
        case SBX_ENC_NEW_SANDBOX: {
            uint64_t id = ok_outs ? sbx_wire_get_u64(rep) : 0;
            const char *sid = ok_outs ? sbx_wire_get_str(rep) : NULL;
            const char *root = ok_outs ? sbx_wire_get_str(rep) : NULL;
            const char *state = ok_outs ? sbx_wire_get_str(rep) : NULL;

            if (ok_outs && ret->i == 0) {
                proxy_sandbox *sb = calloc(1, sizeof(*sb));

                if (!sb || (sid && !(sb->id = strdup(sid))) ||
                    (root && !(sb->root = strdup(root))) ||
                    (state && !(sb->state = strdup(state)))) {
                    if (sb) {
                        free(sb->id);
                        free(sb->root);
                        free(sb);
                    }
                    ret->i = -1;
                    break;
                }
                sb->named = 1;
                sb->state_fresh = sb->state != NULL;
                sb->h.pc = pc;
                sb->h.remote = id;
                sb->h.gen = gen;
                sandbox_link(pc, sb);
                **(sbx_plugin_sandbox ***)av[i] = (sbx_plugin_sandbox *)sb;
            }
            break;
        }
        case SBX_ENC_NEW_PROCESS: {
            uint64_t id = ok_outs ? sbx_wire_get_u64(rep) : 0;
            int efd = ok_outs ? sbx_wire_take_fd(rep) : -1;

            if (ok_outs && ret->i == 0) {
                proxy_process *p = calloc(1, sizeof(*p));

                if (!p) {
                    ret->i = -1;
                    break;
                }
                p->h.pc = pc;
                p->h.remote = id;
                p->h.gen = gen;
                p->event_fd = p->poll_fd = p->dead_fd = -1;
                pthread_mutex_lock(&pc->lock);
                if (pc->sock >= 0 && pc->gen == gen && pollset_take_locked(pc, gen, p) < 0)
                    p->dead_fd = fcntl(pc->sock, F_DUPFD_CLOEXEC, 3);
                pthread_mutex_unlock(&pc->lock);
                process_set_event_fd(p, efd);
                efd = -1;
                **(sbx_plugin_process ***)av[i] = (sbx_plugin_process *)p;
            }
            if (efd >= 0)
                close(efd);
            break;
        }
        case SBX_ENC_ERROR: {
            sbx_error **ep = *(sbx_error ***)av[i];
            sbx_error *e = sbx_wire_get_error(rep);

            if (e)
                sbx_error_propagate(ep, e);
            break;
        }
        default:
            break;
        }
    }
    if (rep->bad) {
        sbx_error **ep = error_arg(row, av);
        sbx_error *e;

        ret_fail(row, ret);
        if (rep->fds_lost)
            e = sbx_set_error(ep, SBX_ERROR_RESOURCE_EXHAUSTED, row->name,
                              "the reply of the plugin host of backend \"%s\" carried "
                              "descriptors this process had no room for (too many open files)",
                              pc->backend);
        else
            e = sbx_set_error(ep, SBX_ERROR_CONNECTION, row->name,
                              "malformed reply from the plugin host of backend \"%s\"",
                              pc->backend);
        sbx_error_set_outcome(e, SBX_ERROR_OUTCOME_UNKNOWN);
    }
}

void
sbx_proxy_invoke_on(proxy_client *pc, unsigned slot, void **av, void *retp)
{
    const sbx_slot_row *row = row_of(slot);
    proxy_ret *ret = retp;
    sbx_error **ep = error_arg(row, av);
    proxy_handle *first = NULL;
    call_io io = { 0 };
    sbx_wire_msg req, *rep;
    unsigned gen;

    ret_fail(row, ret);
    if (row->enc[0] == SBX_ENC_SANDBOX || row->enc[0] == SBX_ENC_PROCESS)
        first = *(proxy_handle **)av[0];

    /* Frees of handles whose host is gone only free our side. */
    pthread_mutex_lock(&pc->lock);
    gen = pc->gen;
    pthread_mutex_unlock(&pc->lock);
    if ((row->flags & SBX_ROW_FREES) && first && first->gen != gen)
        goto freed;
    if (first && first->gen != gen) {
        char *death;

        pthread_mutex_lock(&pc->lock);
        death = sbx_strdup(pc->death ? pc->death : "ended");
        pthread_mutex_unlock(&pc->lock);
        if (row->enc[0] == SBX_ENC_SANDBOX && ((proxy_sandbox *)first)->lost)
            sbx_set_error(ep, SBX_ERROR_CONNECTION, row->name,
                          "sandbox was lost with the plugin host of backend \"%s\", which %s, "
                          "and cannot be resumed", pc->backend, death ? death : "ended");
        else if (row->enc[0] == SBX_ENC_SANDBOX)
            sbx_set_error(ep, SBX_ERROR_CONNECTION, row->name,
                          "sandbox is not attached to a plugin host of backend \"%s\" yet "
                          "(the last one %s); the next call tries again", pc->backend,
                          death ? death : "ended");
        else
            sbx_set_error(ep, SBX_ERROR_CONNECTION, row->name,
                          "the process was lost with the plugin host of backend \"%s\", "
                          "which %s", pc->backend, death ? death : "ended");
        free(death);
        if (ep && *ep) {
            sbx_error_fill(*ep, pc->backend, row->name);
            sbx_error_set_outcome(*ep, SBX_ERROR_OUTCOME_UNKNOWN);
        }
        return;
    }

    if (row->ret == SBX_RET_FD && row->enc[0] == SBX_ENC_PROCESS) {
        /* exec_event_fd: it came with the process. */
        proxy_process *p = (proxy_process *)first;

        ret->i = p->event_added ? p->poll_fd : p->event_fd;
        return;
    }
    sbx_wire_init(&req, SBX_MSG_CALL, slot, 0);
    for (unsigned i = 0; i < row->nargs; i++)
        if (row->dir[i] == SBX_DIR_IN)
            encode_arg(row, i, av, &req, &io, pc);
    if (row->flags & SBX_ROW_NO_REPLY) {
        /* The host runs it before the next frame; nothing comes back. */
        int sock;

        pthread_mutex_lock(&pc->lock);
        sock = pc->dead ? -1 : pc->sock;
        req.call_id = ++pc->next_call;
        pthread_mutex_unlock(&pc->lock);
        if (sock >= 0)
            sbx_wire_send(sock, &req);
        sbx_wire_clear(&req);
        goto freed;
    }
    rep = call_send_wait(pc, gen, &req, &io, row->name, ep);
    sbx_wire_clear(&req);
    if (!rep) {
        if (row->flags & SBX_ROW_FREES)
            goto freed;
        return;
    }
    /* A new sandbox's session state, kept to reattach it, came with it. */
    decode_reply(pc, row, slot, av, rep, ret, gen);
    sbx_wire_clear(rep);
    free(rep);
    if (!(row->flags & SBX_ROW_FREES))
        return;
freed:
    if (first)
        handle_free_local(pc, row->enc[0], first);
}

int
sbx_proxy_destroy_unwaited(sbx_plugin_sandbox *sandbox)
{
    proxy_handle *h = (proxy_handle *)sandbox;
    proxy_client *pc = h ? h->pc : NULL;
    const sbx_slot_row *row = row_of(SBX_SLOT_ID_destroy);
    sbx_call_ctx ctx, *ctxp = &ctx;
    sbx_error *err = NULL, **errp = &err;
    void *av[3] = { &sandbox, &ctxp, &errp };
    call_io io = { 0 };
    sbx_wire_msg req;
    int sock, rc;

    if (!pc || row->nargs != 3)
        return -1;
    /* The caller's deadline and cancellation are not this call's: the
     * plugin's destroy has its own bound. */
    sbx_call_ctx_init_for(&ctx, NULL);
    ctx.deadline = 0;
    ctx.cancel_fd = -1;
    sbx_wire_init(&req, SBX_MSG_CALL, SBX_SLOT_ID_destroy, 0);
    for (unsigned i = 0; i < row->nargs; i++)
        if (row->dir[i] == SBX_DIR_IN)
            encode_arg(row, i, av, &req, &io, pc);
    /* A call id no caller waits on: whoever reads the reply drops it
     * (route_locked). */
    pthread_mutex_lock(&pc->lock);
    sock = pc->dead || h->gen != pc->gen ? -1 : pc->sock;
    req.call_id = ++pc->next_call;
    pthread_mutex_unlock(&pc->lock);
    rc = sock >= 0 ? sbx_wire_send(sock, &req) : -1;
    sbx_wire_clear(&req);
    return rc < 0 ? -1 : 0;
}

/* The generic entry of every generated proxy function. */
static void
proxy_invoke(unsigned slot, void **av, proxy_ret *ret)
{
    const sbx_slot_row *row = row_of(slot);
    proxy_client *pc = first_client(row, av);
    sbx_error **ep = error_arg(row, av);

    ret_fail(row, ret);
    if (!pc && (row->flags & SBX_ROW_FREES) && row->enc[0] != SBX_ENC_CLIENT &&
        *(void **)av[0]) {
        /* Its client was freed first: free our side only. */
        handle_free_local(NULL, row->enc[0], *(proxy_handle **)av[0]);
        return;
    }
    if (!pc) {
        sbx_set_error(ep, SBX_ERROR_INVALID_ARGUMENT, row->name, "handle is NULL");
        return;
    }
    /* A process of a host that died is gone with it: fail (or free) it
     * without starting a new host. */
    if (row->enc[0] == SBX_ENC_PROCESS) {
        proxy_handle *h = *(proxy_handle **)av[0];
        int stale;

        pthread_mutex_lock(&pc->lock);
        stale = pc->dead || h->gen != pc->gen;
        if (stale)
            h->gen = 0; /* never a live generation (they start at 1) */
        pthread_mutex_unlock(&pc->lock);
        /* Stale or not, a call on a process never starts a new host:
         * it lives on the host that started it. Another thread may find
         * that host dead between the check above and a restart (and
         * the restart would reattach every sandbox to a host that then
         * outlives this one's purpose); sbx_proxy_invoke_on() answers a
         * host found dead at its send as gone. */
        sbx_proxy_invoke_on(pc, slot, av, ret);
        return;
    }
    if (row->flags & SBX_ROW_FREES) {
        /* Never while a restart walks the sandboxes to reattach them. */
        if (row->enc[0] == SBX_ENC_SANDBOX)
            pthread_mutex_lock(&pc->restart_lock);
        sbx_proxy_invoke_on(pc, slot, av, ret);
        if (row->enc[0] == SBX_ENC_SANDBOX)
            pthread_mutex_unlock(&pc->restart_lock);
        return;
    }
    if (answer_from_names(slot, av, ret))
        return;
    if (ensure_host(pc, row->name, ep) < 0)
        return;
    sbx_proxy_invoke_on(pc, slot, av, ret);
}

/* ---------------------------------------------------------------- generated */

#define PROXY_PARAM_(i, spec) SBX_ARG_TYPE_ spec a##i
#define PROXY_ADDR_(i, spec) (void *)&a##i
#define PROXY_RETURN_VOID(r) (void)(r);
#define PROXY_RETURN_INT(r) return (r).i;
#define PROXY_RETURN_FD(r) return (r).i;
#define PROXY_RETURN_STR_ALLOC(r) return (r).s;
#define PROXY_RETURN_STR_BORROWED(r) return (r).cs;

#define PROXY_FN_(name, rk, rt, fl, n, ...)                                     \
    static rt proxy_##name(SBX_MAP(n, PROXY_PARAM_, __VA_ARGS__))              \
    {                                                                          \
        void *av[] = { SBX_MAP(n, PROXY_ADDR_, __VA_ARGS__) };                 \
        proxy_ret r;                                                           \
        proxy_invoke(SBX_SLOT_ID_##name, av, &r);                              \
        PROXY_RETURN_##rk(r)                                                   \
    }
SBX_SLOT_TABLE(PROXY_FN_)

#define PROXY_PTR_(name, ...) [SBX_SLOT_ID_##name] = (void *)(uintptr_t)proxy_##name,
static void *const proxy_fns[SBX_SLOT_COUNT] = { SBX_SLOT_TABLE(PROXY_PTR_) };

/* ---------------------------------------------------------------- reattach */

/* Resumes every sandbox of @pc on its new host (restart_lock held). */
static void
proxy_reattach(proxy_client *pc)
{
    proxy_sandbox **list = NULL;
    size_t n = 0;

    pthread_mutex_lock(&pc->lock);
    for (proxy_sandbox *sb = pc->sandboxes; sb; sb = sb->next)
        n++;
    list = n ? calloc(n, sizeof(*list)) : NULL;
    n = 0;
    if (list)
        for (proxy_sandbox *sb = pc->sandboxes; sb; sb = sb->next)
            list[n++] = sb;
    pthread_mutex_unlock(&pc->lock);

    for (size_t i = 0; i < n; i++) {
        proxy_sandbox *sb = list[i];
        sbx_plugin_sandbox *fresh = NULL;
        sbx_error *e = NULL;
        sbx_call_ctx ctx;
        const sbx_call_ctx *cp = &ctx;
        const char *state = sb->state;
        sbx_plugin_sandbox **out = &fresh;
        sbx_error **ep = &e;
        sbx_plugin_client *client = (sbx_plugin_client *)pc;
        void *av[5] = { &client, &cp, &state, &out, &ep };
        proxy_ret r;

        if (sb->lost || sb->h.gen == pc->gen)
            continue;
        if (!state || !(pc->have & ((uint64_t)1 << SBX_SLOT_ID_resume))) {
            sb->lost = 1;
            continue;
        }
        sbx_call_ctx_init(&ctx);
        sbx_proxy_invoke_on(pc, SBX_SLOT_ID_resume, av, &r);
        if (r.i == 0 && fresh) {
            proxy_sandbox *f = (proxy_sandbox *)fresh;

            /* Move the new remote handle into the old one the caller holds. */
            sb->h.remote = f->h.remote;
            sb->h.gen = f->h.gen;
            handle_free_local(pc, SBX_ENC_SANDBOX, &f->h);
            sbx_log(SBX_LOG_INFO, pc->backend, "sandbox reattached on the new plugin host");
        } else if (e && (sbx_error_get_code(e) == SBX_ERROR_CONNECTION ||
                         sbx_error_get_code(e) == SBX_ERROR_TIMEOUT)) {
            /* This host died too: the next restart tries again. */
            sbx_log(SBX_LOG_WARNING, pc->backend, "sandbox not reattached yet: %s",
                    sbx_error_get0_message(e));
        } else {
            sb->lost = 1;
            sbx_log(SBX_LOG_WARNING, pc->backend, "sandbox could not be reattached: %s",
                    e ? sbx_error_get0_message(e) : "no reason given");
        }
        sbx_error_free(e);
    }
    free(list);
}

/* ---------------------------------------------------------------- public */

/* Frees @pc and what it holds (its host already stopped). */
static void
proxy_client_destroy(proxy_client *pc)
{
    sbx_close_fd(&pc->old_sock);
    pollsets_close(pc);
    pthread_mutex_destroy(&pc->lock);
    pthread_mutex_destroy(&pc->restart_lock);
    free(pc->scratch);
    free(pc->death);
    free(pc->backend);
    free(pc->config);
    free(pc->name);
    free(pc->version);
    free(pc->description);
    free(pc);
}

/* client_free of the proxy descriptor: frees the plugin's client, stops
 * the host and frees everything. */
static void
proxy_client_close(sbx_plugin_client *client)
{
    proxy_client *pc = (proxy_client *)client;
    int dead;

    if (!pc)
        return;
    pthread_mutex_lock(&pc->lock);
    dead = pc->dead;
    pthread_mutex_unlock(&pc->lock);
    if (!dead && (pc->have & ((uint64_t)1 << SBX_SLOT_ID_client_free))) {
        sbx_plugin_client *arg = client;
        void *av[1] = { &arg };
        proxy_ret r;

        sbx_proxy_invoke_on(pc, SBX_SLOT_ID_client_free, av, &r);
    }
    host_stop(pc);
    pthread_mutex_lock(&pc->lock);
    while (pc->sandboxes) {
        proxy_sandbox *sb = pc->sandboxes;

        pc->sandboxes = sb->next;
        sb->prev = sb->next = NULL;
        /* Still held by the caller: it frees it with sandbox_free. */
        sb->lost = 1;
        sb->h.pc = NULL;
    }
    pthread_mutex_unlock(&pc->lock);
    proxy_client_destroy(pc);
}

int
sbx_proxy_open(const char *backend, const char *config_json, const sbx_plugin **plugin,
               sbx_plugin_client **client, sbx_error **err)
{
    proxy_client *pc = calloc(1, sizeof(*pc));

    if (!pc || !(pc->backend = strdup(backend)) ||
        (config_json && !(pc->config = strdup(config_json)))) {
        if (pc)
            free(pc->backend);
        free(pc);
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return -1;
    }
    pc->h.pc = pc;
    pc->sock = -1;
    pc->old_sock = -1;
    pc->dead = 1;
    pthread_mutex_init(&pc->lock, NULL);
    pthread_mutex_init(&pc->restart_lock, NULL);
    pthread_mutex_lock(&pc->restart_lock);
    if (host_start(pc, err) < 0) {
        pthread_mutex_unlock(&pc->restart_lock);
        proxy_client_destroy(pc);
        return -1;
    }
    pthread_mutex_unlock(&pc->restart_lock);

    /* The descriptor: the plugin's facts and a proxy for each slot it has. */
    pc->desc.struct_size = sizeof(pc->desc);
    pc->desc.name = pc->name ? pc->name : pc->backend;
    pc->desc.version = pc->version ? pc->version : "";
    pc->desc.description = pc->description ? pc->description : "";
    for (unsigned s = 0; s < SBX_SLOT_COUNT; s++)
        if (pc->have & ((uint64_t)1 << s))
            memcpy((char *)&pc->desc + sbx_slot_rows[s].offset, &proxy_fns[s], sizeof(void *));
    pc->desc.client_new = NULL;
    pc->desc.client_free = proxy_client_close;
    *plugin = &pc->desc;
    *client = (sbx_plugin_client *)pc;
    return 0;
}

void
sbx_proxy_set_call_timeout(sbx_plugin_client *client, double secs)
{
    ((proxy_client *)client)->call_timeout = secs;
}

int
sbx_proxy_host_pid(sbx_plugin_client *client)
{
    proxy_client *pc = (proxy_client *)client;
    int pid;

    pthread_mutex_lock(&pc->lock);
    pid = pc->dead ? 0 : (int)pc->pid;
    pthread_mutex_unlock(&pc->lock);
    return pid;
}
