/*
 * sbx-plugin-host — runs one backend plugin in a process of its own and
 * serves its slots to libsbx over a socketpair (host/wire.h).
 *
 *   sbx-plugin-host --serve FD
 *       FD is this end of a SOCK_SEQPACKET socketpair. The first frame
 *       (HELLO) names the backend; the plugin is found, checked and set up
 *       exactly as libsbx does in-process (host/loader.c), then every CALL
 *       is decoded by its row of the slot table (host/slots.h) and the slot
 *       is called through libffi with the row's signature. Calls that may
 *       block run on worker threads, so one host serves many sandboxes and
 *       concurrent requests; calls that never block (QUICK rows) run on the
 *       reader thread. A CANCEL frame makes the call's cancel descriptor
 *       readable. EOF (the application closed its end, exited, crashed or
 *       was killed) is the only way the host ends on its own: pool threads
 *       left idle retire, the first one (the process's main thread) never
 *       does.
 *
 *       Attached sandboxes. The host keeps every sandbox created or
 *       resumed through it and not destroyed (the plugin's sandbox_free of
 *       such a handle, and client_free while one is kept, wait until the
 *       end; a freed handle of a sandbox another kept handle holds too is
 *       freed at once, unless a destroy runs on it; a handle freed while
 *       its destroy runs is freed when that destroy succeeded, and
 *       client_free waits for the destroys in flight first: libsbx does
 *       not wait for the destroy of a sandbox it ended through its exec
 *       endpoint, and its frees come right behind). At EOF it cancels the calls in flight; then, when it keeps a sandbox whose lifecycle record row
 *       (host/record.c) is attached and the application (the socket's peer,
 *       SO_PEERCRED, watched through a pidfd opened at HELLO) still lives,
 *       it sends a LINGER frame (the application's libsbx stops waiting for
 *       it) and waits for that process to end. Then, for each kept sandbox:
 *       the application stops being one of its owners, and a sandbox whose
 *       row is attached and has no other living owner is destroyed through
 *       the plugin's destroy slot (all at once, each within
 *       ATTACH_DESTROY_SECS) and its row removed. Detached rows, rows with
 *       another living owner and sandboxes the record does not know are
 *       left alone. Then the plugin's sandbox_free runs for each kept
 *       sandbox the application had freed (what the plugin holds on this
 *       host for it goes: connections, ssh masters, private directories),
 *       and the host exits. What it does is logged only with SBX_DEBUG set;
 *       at "debug" that includes one line per call it receives, "plugin
 *       host: call SLOT" (a round trip, or a frame sent without a reply for
 *       the slots that have none), written before the plugin runs it.
 *
 *       Environment: SBX_PLUGIN_HOST_IDLE_MS (milliseconds, 1 to 3600000;
 *       default 30000) is how long a pool thread waits for a frame before
 *       it retires while more than two others are idle too. Tests set it
 *       low to make threads retire while calls are in flight; a value out
 *       of range or not a number is ignored.
 *
 *   sbx-plugin-host --inspect NAME PATH
 *       Loads the plugin file PATH of backend NAME with every check and
 *       prints what `sbx backends` shows of it as one JSON object. libsbx
 *       runs this once per plugin file, so a plugin that crashes while
 *       loading cannot take the listing down with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <ffi.h>
#include <json-c/json.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../internal.h"
#include "../slots.h"
#include "../wire.h"

/* ---------------------------------------------------------------- handles */

/* Handle ids: (tag << 32) | index, so a stale id never finds a new handle. */
typedef struct handle_slot {
    void *ptr;
    uint32_t tag;
    int kind;                   /* SBX_ENC_CLIENT / SANDBOX / PROCESS; -1 free */
} handle_slot;

/* One call in flight on a worker: found by CANCEL and STOP frames. */
typedef struct call_rec {
    struct call_rec *next;
    uint64_t id;
    int cancel_fd;              /* eventfd: the plugin's ctx.cancel_fd */
    int fired;                  /* cancel_fd was written (under H.lock) */
    int stop;                   /* a STOP frame came (listing callbacks) */
} call_rec;

static struct {
    int sock;
    const sbx_plugin *plugin;
    const char *backend;
    ffi_cif cif[SBX_SLOT_COUNT];
    ffi_type *types[SBX_SLOT_COUNT][SBX_ROW_MAX_ARGS];
    pthread_mutex_t lock;       /* handles, calls */
    handle_slot *handles;
    size_t nhandles;
    call_rec *calls;
} H = { .sock = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t
handle_add(void *ptr, int kind)
{
    size_t i;
    uint64_t id = 0;

    pthread_mutex_lock(&H.lock);
    for (i = 0; i < H.nhandles; i++)
        if (H.handles[i].kind < 0)
            break;
    if (i == H.nhandles) {
        handle_slot *n = realloc(H.handles, (H.nhandles + 16) * sizeof(*n));

        if (!n)
            goto out;
        H.handles = n;
        for (size_t k = H.nhandles; k < H.nhandles + 16; k++)
            H.handles[k] = (handle_slot){ NULL, 0, -1 };
        H.nhandles += 16;
    }
    H.handles[i].ptr = ptr;
    H.handles[i].kind = kind;
    H.handles[i].tag++;
    id = ((uint64_t)H.handles[i].tag << 32) | (uint64_t)(i + 1);
out:
    pthread_mutex_unlock(&H.lock);
    return id;
}

/*
 * The names of a new sandbox @sb (NULL: the create or resume failed) that
 * ride with its handle in the reply (wire 8): its id and root (borrowed
 * strings of the plugin, NULL when it has no such slot or none to give)
 * and its session state (NULL when the plugin has no session_state slot or
 * could not give one; the reason is logged). The library keeps them, so
 * that a create costs one round trip instead of four. The session state
 * is asked with a context of its own (60 s, no cancel): the create's
 * deadline or cancel must not cost the sandbox its way back after a crash.
 */
static void
put_sandbox_names(sbx_wire_msg *rep, sbx_plugin_sandbox *sb)
{
    const char *(*get_id)(sbx_plugin_sandbox *) = (const char *(*)(sbx_plugin_sandbox *))
        (uintptr_t)sbx_slot_get(H.plugin, SBX_SLOT_ID_sandbox_id);
    const char *(*get_root)(sbx_plugin_sandbox *) = (const char *(*)(sbx_plugin_sandbox *))
        (uintptr_t)sbx_slot_get(H.plugin, SBX_SLOT_ID_sandbox_root);
    char *(*get_state)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **) =
        (char *(*)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **))(uintptr_t)
            sbx_slot_get(H.plugin, SBX_SLOT_ID_session_state);
    char *state = NULL;
    sbx_error *e = NULL;

    sbx_wire_put_str(rep, sb && get_id ? get_id(sb) : NULL);
    sbx_wire_put_str(rep, sb && get_root ? get_root(sb) : NULL);
    if (sb && get_state) {
        sbx_call_ctx own;

        memset(&own, 0, sizeof(own));
        own.struct_size = sizeof(own);
        own.deadline = sbx_monotonic_now() + 60;
        own.cancel_fd = -1;
        state = get_state(sb, &own, &e);
        if (!state)
            sbx_log(SBX_LOG_WARNING, H.backend, "no session state for the new sandbox (it "
                    "cannot be reattached after a crash): %s",
                    e ? sbx_error_get0_message(e) : "no reason given");
        sbx_error_free(e);
    }
    sbx_wire_put_str(rep, state);
    if (state)
        sbx_host_services_get()->free(state);
}

/* The handle @id of @kind: 0 and *@ptr (which may be NULL: a plugin may
 * make a client without state), or -1 when unknown. */
static int
handle_get(uint64_t id, int kind, void **ptr)
{
    size_t i = (size_t)(id & 0xffffffffu);
    int rc = -1;

    pthread_mutex_lock(&H.lock);
    if (i >= 1 && i <= H.nhandles && H.handles[i - 1].kind == kind &&
        H.handles[i - 1].tag == (uint32_t)(id >> 32)) {
        *ptr = H.handles[i - 1].ptr;
        rc = 0;
    }
    pthread_mutex_unlock(&H.lock);
    return rc;
}

static void
handle_remove(uint64_t id)
{
    size_t i = (size_t)(id & 0xffffffffu);

    pthread_mutex_lock(&H.lock);
    if (i >= 1 && i <= H.nhandles && H.handles[i - 1].tag == (uint32_t)(id >> 32))
        H.handles[i - 1].kind = -1;
    pthread_mutex_unlock(&H.lock);
}

static void
call_register(call_rec *c)
{
    pthread_mutex_lock(&H.lock);
    c->next = H.calls;
    H.calls = c;
    pthread_mutex_unlock(&H.lock);
}

static void
call_unregister(call_rec *c)
{
    pthread_mutex_lock(&H.lock);
    for (call_rec **p = &H.calls; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&H.lock);
}

/* CANCEL / STOP frame for call @id. */
static void
call_signal(uint64_t id, int stop)
{
    pthread_mutex_lock(&H.lock);
    for (call_rec *c = H.calls; c; c = c->next) {
        if (c->id != id)
            continue;
        if (stop)
            __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
        else if (c->cancel_fd >= 0 && eventfd_write(c->cancel_fd, 1) == 0)
            c->fired = 1;
        break;
    }
    pthread_mutex_unlock(&H.lock);
}

/* ---------------------------------------------------------------- kept */

/** Seconds each destroy of an attached sandbox may take at the end. */
#define ATTACH_DESTROY_SECS 20.0

/* Seconds the end waits for creates and resumes still in flight. */
#define END_CREATE_WAIT_SECS 20.0

/* A sandbox created or resumed here and not destroyed. */
typedef struct kept_sb {
    struct kept_sb *next;
    sbx_plugin_sandbox *sb;
    char token[SBX_TOKEN_LEN + 1];  /* its create token; "" = look it up by id */
    int freed;                      /* the application freed its handle */
    int busy;                       /* a destroy at the end still runs on it */
    unsigned destroying;            /* destroy calls of the application in
                                     * flight on it (kept_destroy_begin()) */
} kept_sb;

static struct {
    pthread_mutex_t lock;
    kept_sb *list;
    unsigned making;                /* creates and resumes in flight */
    unsigned proc_calls;            /* exec_start and process calls in flight */
    unsigned destroys;              /* destroy calls in flight on kept sandboxes */
    pthread_cond_t made;            /* signalled as either count reaches 0 */
    pid_t app;                      /* the application (socket peer); 0 unknown */
    unsigned long long app_ticks;   /* its start time, clock ticks since boot */
    int app_fd;                     /* pidfd of it; -1 none */
} K = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, PTHREAD_COND_INITIALIZER, 0, 0, -1 };

/* Counts one call in (@delta 1) or out (-1) of *@count (a counter of K),
 * waking kept_wait_counter() when it reaches 0. */
static void
kept_count(unsigned *count, int delta)
{
    pthread_mutex_lock(&K.lock);
    *count = delta > 0 ? *count + 1 : *count - 1;
    if (*count == 0)
        pthread_cond_broadcast(&K.made);
    pthread_mutex_unlock(&K.lock);
}

/* A create or resume starts (@delta 1) or ended (-1, after kept_add). */
static void
kept_making(int delta)
{
    kept_count(&K.making, delta);
}

/* A call that starts or uses a process starts (@delta 1) or ended (-1,
 * after its reply holds the new handle). */
static void
proc_call(int delta)
{
    kept_count(&K.proc_calls, delta);
}

/*
 * Waits, at most @secs, until no create or resume is in flight. Their calls
 * were cancelled at EOF: each either fails, having removed what it made (a
 * container, a pod) as a failed create does, or returns a sandbox, which
 * kept_add() keeps for end_reap(). Exiting under them instead would end the
 * plugin in the middle, with what the provider already made left behind.
 */
static unsigned
kept_wait_counter(const unsigned *count, double secs)
{
    double until = sbx_monotonic_now() + secs;
    unsigned running;

    pthread_mutex_lock(&K.lock);
    while (*count > 0) {
        double left = until - sbx_monotonic_now();
        struct timespec ts;

        if (left <= 0)
            break;
        /* K.made uses CLOCK_REALTIME (the static initialiser); a jump of
         * that clock shortens or lengthens one wait, and the loop checks
         * the monotonic bound again. */
        clock_gettime(CLOCK_REALTIME, &ts);
        if (left > 1.0)
            left = 1.0;
        ts.tv_sec += (time_t)left;
        ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&K.made, &K.lock, &ts);
    }
    running = *count;
    if (running > 0)
        sbx_log(SBX_LOG_WARNING, H.backend, "plugin host: %u %s still running after %.0f s",
                running, count == &K.making ? "create(s), whose sandboxes are left to gc,"
                         : count == &K.destroys ? "destroy(s)" : "process call(s)", secs);
    pthread_mutex_unlock(&K.lock);
    return running;
}

static void
kept_wait_making(double secs)
{
    (void)kept_wait_counter(&K.making, secs);
}

/* Seconds the end waits for the process calls it cancelled, and for the
 * exec_free of the processes the application left. */
#define END_PROC_WAIT_SECS 3.0
#define END_PROC_FREE_SECS 8.0

/*
 * A batch of jobs the host's end runs all at once, each on a detached
 * thread of its own (inline when none can start), waiting for them at most
 * a bound. A batch lives in static storage, not on the waiter's stack: a
 * job past the bound still signals it while the host goes on to exit. The
 * host ends once, so each batch serves one run.
 */
typedef struct end_batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned left;
} end_batch;

/* Called by each job of @b when it is done. */
static void
end_batch_done(end_batch *b)
{
    pthread_mutex_lock(&b->lock);
    if (--b->left == 0)
        pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* Runs @fn on each of the @n jobs at @jobs (@size bytes apart) and waits
 * until all called end_batch_done(@b) or @secs passed. The jobs must stay
 * allocated until the process exits (one past the bound may still run). */
static void
end_batch_run(end_batch *b, void *(*fn)(void *), void *jobs, size_t size, size_t n,
              double secs)
{
    pthread_condattr_t ca;
    struct timespec until;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    b->left = (unsigned)n;
    for (size_t i = 0; i < n; i++) {
        void *job = (char *)jobs + i * size;
        pthread_t t;
        pthread_attr_t attr;

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, fn, job) != 0)
            fn(job);
        pthread_attr_destroy(&attr);
    }
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)secs;
    pthread_mutex_lock(&b->lock);
    while (b->left > 0 && pthread_cond_timedwait(&b->cond, &b->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&b->lock);
}

typedef struct proc_job {
    sbx_plugin_process *proc;
    end_batch *batch;
} proc_job;

static void *
end_proc_free(void *arg)
{
    proc_job *j = arg;
    void (*exec_free)(sbx_plugin_process *) =
        (void (*)(sbx_plugin_process *))(uintptr_t)sbx_slot_get(H.plugin, SBX_SLOT_ID_exec_free);

    if (exec_free)
        exec_free(j->proc);
    end_batch_done(j->batch);
    return NULL;
}

/*
 * The application is gone with processes it started and never freed: each
 * goes through the plugin's exec_free, which kills its tree when it still
 * runs, as the application's free would have. Without this a command of a
 * sandbox that outlives the application (detached, or owned by another
 * process) ran on after the SIGKILL of the process that started it on
 * docker, while local and bubblewrap end it with its connection. All at
 * once, bounded; the process calls cancelled at EOF end first (calls on
 * one process never overlap).
 */
static void
end_processes(void)
{
    static end_batch batch = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    sbx_plugin_process **procs = NULL;
    size_t n = 0, cap = 0;

    /* A process call that ignored its cancel still runs on its process:
     * freeing any of them under it could free that one; they stay. */
    if (kept_wait_counter(&K.proc_calls, END_PROC_WAIT_SECS) > 0)
        return;
    pthread_mutex_lock(&H.lock);
    for (size_t i = 0; i < H.nhandles; i++) {
        if (H.handles[i].kind != SBX_ENC_PROCESS)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            sbx_plugin_process **m = realloc(procs, ncap * sizeof(*m));

            if (!m)
                break;
            procs = m;
            cap = ncap;
        }
        procs[n++] = H.handles[i].ptr;
        H.handles[i].kind = -1;     /* nothing uses it after this */
    }
    pthread_mutex_unlock(&H.lock);
    if (n == 0) {
        free(procs);
        return;
    }
    proc_job *jobs = calloc(n, sizeof(*jobs));
    if (!jobs) {
        free(procs);
        return;
    }
    for (size_t i = 0; i < n; i++)
        jobs[i] = (proc_job){ procs[i], &batch };
    end_batch_run(&batch, end_proc_free, jobs, sizeof(*jobs), n, END_PROC_FREE_SECS);
    sbx_log(SBX_LOG_INFO, H.backend, "plugin host: freed %zu process(es) the application "
            "left", n);
    /* The jobs are not freed: a free past its bound may still run until the
     * process exits. */
    free(procs);
}

static void
kept_add(sbx_plugin_sandbox *sb, const char *token)
{
    kept_sb *k = calloc(1, sizeof(*k));

    if (!k)
        return;   /* out of memory: this one is left to sbx_gc() */
    k->sb = sb;
    if (token && strlen(token) == SBX_TOKEN_LEN)
        memcpy(k->token, token, SBX_TOKEN_LEN + 1);
    pthread_mutex_lock(&K.lock);
    k->next = K.list;
    K.list = k;
    pthread_mutex_unlock(&K.lock);
}

/* Takes @sb off the kept list (K.lock held); 1 when the plugin's
 * sandbox_free is to run now: the application freed the handle while a
 * destroy ran (kept_destroy_begin()), and none runs any more. */
static int
kept_unlink_locked(sbx_plugin_sandbox *sb)
{
    for (kept_sb **p = &K.list; *p; p = &(*p)->next) {
        if ((*p)->sb == sb) {
            kept_sb *k = *p;
            int free_now = k->freed && !k->busy && !k->destroying;

            *p = k->next;
            free(k);
            return free_now;
        }
    }
    return 0;
}

/* The plugin's sandbox_free of @sb. */
static void
plugin_sandbox_free(sbx_plugin_sandbox *sb)
{
    void (*sandbox_free)(sbx_plugin_sandbox *) =
        (void (*)(sbx_plugin_sandbox *))(uintptr_t)
            sbx_slot_get(H.plugin, SBX_SLOT_ID_sandbox_free);

    if (sandbox_free)
        sandbox_free(sb);
}

/* @sb was destroyed: no longer kept. */
static void
kept_drop(sbx_plugin_sandbox *sb)
{
    int free_now;

    pthread_mutex_lock(&K.lock);
    free_now = kept_unlink_locked(sb);
    pthread_mutex_unlock(&K.lock);
    if (free_now)
        plugin_sandbox_free(sb);
}

/*
 * A destroy CALL on sandbox handle @id starts: counted by the thread that
 * read it, before the next frame is read, until kept_destroy_end(). While
 * one runs, the application's free of the handle is deferred
 * (kept_defer_free()), even when another kept handle names the same
 * sandbox, and client_free waits for it: libsbx sends the destroy of a
 * sandbox it ended through its exec endpoint without waiting for the
 * answer, and its frees may come right behind. Returns the kept sandbox
 * counted, or NULL (not a kept one: nothing counted). The call uses that
 * pointer rather than looking the handle up again when it runs
 * (decode_arg()): the free behind it may by then have taken the handle's
 * id off the table.
 */
static sbx_plugin_sandbox *
kept_destroy_begin(uint64_t id)
{
    void *ptr = NULL;
    kept_sb *k;

    if (handle_get(id, SBX_ENC_SANDBOX, &ptr) < 0 || !ptr)
        return NULL;
    pthread_mutex_lock(&K.lock);
    for (k = K.list; k && k->sb != ptr; k = k->next)
        ;
    if (k) {
        k->destroying++;
        K.destroys++;
    }
    pthread_mutex_unlock(&K.lock);
    return k ? ptr : NULL;
}

/* The destroy kept_destroy_begin() counted on @sb ended; @destroyed: it
 * succeeded (@sb is no longer kept, and a free the application sent
 * meanwhile runs now). */
static void
kept_destroy_end(sbx_plugin_sandbox *sb, int destroyed)
{
    int free_now = 0;

    pthread_mutex_lock(&K.lock);
    for (kept_sb *k = K.list; k; k = k->next) {
        if (k->sb == sb) {
            if (k->destroying > 0)
                k->destroying--;
            break;
        }
    }
    if (destroyed)
        free_now = kept_unlink_locked(sb);
    /* One lock with the drop: client_free, woken here, finds it gone. */
    if (K.destroys > 0 && --K.destroys == 0)
        pthread_cond_broadcast(&K.made);
    pthread_mutex_unlock(&K.lock);
    if (free_now)
        plugin_sandbox_free(sb);
}

/* The application frees its handle of @sb: 1 when the plugin's
 * sandbox_free must wait (the sandbox is kept: its handle may be needed to
 * destroy it at the end), 0 to free it now. A handle of a sandbox another
 * kept handle also holds (the same sandbox_id: resumed again, or its
 * creator still held) is not needed for that and is no longer kept: it is
 * freed now, so that resuming one sandbox over and over and freeing each
 * handle keeps one plugin handle (its connections, ssh master, private
 * directory) here, not one per resume until the end. */
static int
kept_defer_free(sbx_plugin_sandbox *sb)
{
    const char *(*get_id)(sbx_plugin_sandbox *) =
        (const char *(*)(sbx_plugin_sandbox *))(uintptr_t)
            sbx_slot_get(H.plugin, SBX_SLOT_ID_sandbox_id);
    kept_sb **at = NULL;
    int kept = 0;

    pthread_mutex_lock(&K.lock);
    for (kept_sb **p = &K.list; *p; p = &(*p)->next) {
        if ((*p)->sb == sb && !(*p)->freed) {
            at = p;
            break;
        }
    }
    if (at) {
        const char *id = get_id ? get_id(sb) : NULL;
        kept_sb *k = *at;

        kept = 1;
        for (kept_sb *o = K.list; o && kept && !k->destroying && id && *id; o = o->next) {
            const char *oid;

            if (o != k && o->sb && (oid = get_id(o->sb)) && strcmp(oid, id) == 0)
                kept = 0;
        }
        if (kept) {
            k->freed = 1;
        } else {
            *at = k->next;
            free(k);
        }
    }
    pthread_mutex_unlock(&K.lock);
    return kept;
}

/* 1 when a sandbox is kept. */
static int
kept_any(void)
{
    int any;

    pthread_mutex_lock(&K.lock);
    any = K.list != NULL;
    pthread_mutex_unlock(&K.lock);
    return any;
}

/* The application from the socket's credentials, with a pidfd. */
static void
app_watch(int sock)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid <= 0)
        return;
    if (sbx_process_start_ticks(cred.pid, &K.app_ticks) < 0)
        return;
    K.app_fd = (int)syscall(SYS_pidfd_open, cred.pid, 0);
    if (K.app_fd < 0)
        return;
    /* The pid was not reused between the two looks. */
    if (!sbx_process_is(cred.pid, K.app_ticks)) {
        close(K.app_fd);
        K.app_fd = -1;
        return;
    }
    K.app = cred.pid;
    /* What the plugins make belongs to the application. */
    sbx_host_set_owner_pidfd(K.app_fd);
}

/* 1 while the application lives. */
static int
app_alive(void)
{
    struct pollfd p = { K.app_fd, POLLIN, 0 };

    if (K.app_fd < 0)
        return 0;
    return poll(&p, 1, 0) == 0;
}

/* Fills @k->token from the record by the sandbox's id when it has none. */
static void
kept_token(kept_sb *k)
{
    const char *(*get_id)(sbx_plugin_sandbox *) =
        (const char *(*)(sbx_plugin_sandbox *))(uintptr_t)
            sbx_slot_get(H.plugin, SBX_SLOT_ID_sandbox_id);
    const char *id;

    if (k->token[0] || !get_id || !(id = get_id(k->sb)) || !*id)
        return;
    if (sbx_record_find(H.backend, id, k->token, NULL) != 1)
        k->token[0] = '\0';
}

/* One destroy at the end, on a thread of its own. */
typedef struct end_job {
    kept_sb *k;
    end_batch *batch;
} end_job;

static void *
end_destroy(void *arg)
{
    end_job *j = arg;
    int (*destroy)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **) =
        (int (*)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **))(uintptr_t)
            sbx_slot_get(H.plugin, SBX_SLOT_ID_destroy);
    sbx_error *err = NULL;
    sbx_call_ctx ctx;

    memset(&ctx, 0, sizeof(ctx));
    ctx.struct_size = sizeof(ctx);
    ctx.deadline = sbx_monotonic_now() + ATTACH_DESTROY_SECS;
    ctx.cancel_fd = -1;
    if (destroy && destroy(j->k->sb, &ctx, &err) == 0) {
        sbx_record_remove(j->k->token, NULL);
        sbx_log(SBX_LOG_INFO, H.backend, "plugin host: destroyed attached sandbox %s of "
                "process %d", j->k->token, (int)K.app);
    } else {
        sbx_log(SBX_LOG_WARNING, H.backend, "plugin host: attached sandbox %s of process %d "
                "could not be destroyed (left to gc): %s", j->k->token, (int)K.app,
                err ? sbx_error_get0_message(err) : "the backend has no destroy");
    }
    sbx_error_free(err);
    pthread_mutex_lock(&K.lock);
    j->k->busy = 0;
    pthread_mutex_unlock(&K.lock);
    end_batch_done(j->batch);
    return NULL;
}

/* The application is gone: its kept sandboxes lose it as an owner, and the
 * attached ones nobody else owns are destroyed, all at once, bounded. */
static void
end_reap(void)
{
    /* Static (end_batch): a destroy past its bound still signals it after
     * this returned, while kept_release() and exit() run. */
    static end_batch batch = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    unsigned n = 0;
    end_job *jobs;

    pthread_mutex_lock(&K.lock);
    for (kept_sb *k = K.list; k; k = k->next)
        n++;
    jobs = n ? calloc(n, sizeof(*jobs)) : NULL;
    n = 0;
    for (kept_sb *k = K.list; k && jobs; k = k->next) {
        int detached = 0, alive = 0, row;

        kept_token(k);
        if (!k->token[0])
            continue;   /* not in the record: not ours to end */
        if (K.app > 0)
            sbx_record_remove_owner(k->token, K.app, K.app_ticks, NULL);
        row = sbx_record_get(k->token, &detached, &alive, NULL);
        if (row != 1 || detached || alive > 0) {
            sbx_log(SBX_LOG_INFO, H.backend, "plugin host: sandbox %s left alone (%s)",
                    k->token, row != 1 ? "no row" : detached ? "detached"
                                                             : "another owner lives");
            continue;
        }
        jobs[n] = (end_job){ k, &batch };
        k->busy = 1;
        n++;
    }
    pthread_mutex_unlock(&K.lock);
    end_batch_run(&batch, end_destroy, jobs, sizeof(*jobs), n, ATTACH_DESTROY_SECS + 2);
    /* The jobs are not freed: a destroy past its bound may still run until
     * the process exits. */
}

/* The plugin's sandbox_free of every kept sandbox the application freed
 * (its free was deferred to the end, kept_defer_free()) and no destroy of
 * the end still runs on: what the plugin holds on this host for it (a
 * connection, an ssh master, a private directory) goes before the host
 * exits, as it would have gone at the application's free. A handle the
 * application did not free may still be in a call cancelled at EOF, and
 * is left as an exiting application leaves its own. */
static void
kept_release(void)
{
    void (*sandbox_free)(sbx_plugin_sandbox *) =
        (void (*)(sbx_plugin_sandbox *))(uintptr_t)
            sbx_slot_get(H.plugin, SBX_SLOT_ID_sandbox_free);

    pthread_mutex_lock(&K.lock);
    for (kept_sb *k = K.list; k; k = k->next) {
        if (k->freed && !k->busy && !k->destroying && sandbox_free) {
            sandbox_free(k->sb);
            k->sb = NULL;
            k->busy = 1;   /* freed: nothing more of it */
        }
    }
    pthread_mutex_unlock(&K.lock);
}

/*
 * The application's end of the socket closed (EOF; @code is the exit
 * status). Called by the thread that saw it, with the receive lock held, so
 * no other thread reads again. Never returns.
 */
static void
host_end(int code)
{
    int watch = 0;

    /* Calls in flight answer nobody now: cancel them. */
    pthread_mutex_lock(&H.lock);
    for (call_rec *c = H.calls; c; c = c->next)
        if (c->cancel_fd >= 0 && eventfd_write(c->cancel_fd, 1) == 0)
            c->fired = 1;
    pthread_mutex_unlock(&H.lock);
    /* A create cancelled above may already have made something: it ends
     * first, cleaning up or handing its sandbox to the list below. */
    kept_wait_making(END_CREATE_WAIT_SECS);
    /* The commands the application started and left go before their
     * sandboxes do. */
    end_processes();

    pthread_mutex_lock(&K.lock);
    if (!K.list) {
        pthread_mutex_unlock(&K.lock);
        exit(code);
    }
    pthread_mutex_unlock(&K.lock);
    if (app_alive()) {
        /* Wait only when an attached sandbox depends on it. */
        pthread_mutex_lock(&K.lock);
        for (kept_sb *k = K.list; k && !watch; k = k->next) {
            int detached = 0, alive = 0;

            kept_token(k);
            watch = k->token[0] && sbx_record_get(k->token, &detached, &alive, NULL) == 1 &&
                    !detached;
        }
        pthread_mutex_unlock(&K.lock);
        if (!watch) {
            kept_release();
            exit(code);
        }
        {
            sbx_wire_msg m;

            sbx_wire_init(&m, SBX_MSG_LINGER, 0, 0);
            sbx_wire_send(H.sock, &m);
            sbx_wire_clear(&m);
        }
        sbx_log(SBX_LOG_INFO, H.backend, "plugin host: waiting for process %d to end",
                (int)K.app);
        for (;;) {
            struct pollfd p = { K.app_fd, POLLIN, 0 };

            if (poll(&p, 1, -1) > 0 || (errno != EINTR && errno != EAGAIN))
                break;
        }
    }
    end_reap();
    kept_release();
    exit(code);
}

/* ---------------------------------------------------------------- ffi */

static ffi_type *
enc_ffi_type(int enc)
{
    switch (enc) {
    case SBX_ENC_INT:
    case SBX_ENC_FD:
        return &ffi_type_sint;
    case SBX_ENC_U32:
        return &ffi_type_uint32;
    case SBX_ENC_SIZE:
        return sizeof(size_t) == 8 ? &ffi_type_uint64 : &ffi_type_uint32;
    default:
        return &ffi_type_pointer;
    }
}

static ffi_type *
ret_ffi_type(int ret)
{
    switch (ret) {
    case SBX_RET_VOID:
        return &ffi_type_void;
    case SBX_RET_INT:
    case SBX_RET_FD:
        return &ffi_type_sint;
    default:
        return &ffi_type_pointer;
    }
}

static int
prepare_cifs(void)
{
    for (unsigned s = 0; s < SBX_SLOT_COUNT; s++) {
        const sbx_slot_row *row = &sbx_slot_rows[s];

        for (unsigned i = 0; i < row->nargs; i++)
            H.types[s][i] = enc_ffi_type(row->enc[i]);
        if (ffi_prep_cif(&H.cif[s], FFI_DEFAULT_ABI, row->nargs, ret_ffi_type(row->ret),
                         H.types[s]) != FFI_OK)
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- callbacks */

/* The state a listing callback sends its entries with. */
typedef struct listing {
    uint64_t call_id;
    uint32_t slot;
    call_rec *rec;
} listing;

static int
send_entry(listing *l, sbx_wire_msg *m)
{
    int rc = sbx_wire_send(H.sock, m);

    sbx_wire_clear(m);
    if (rc < 0)
        return 1;
    return __atomic_load_n(&l->rec->stop, __ATOMIC_ACQUIRE) ? 1 : 0;
}

static int
file_entry_fn(const sbx_plugin_file_info *info, void *user_data)
{
    listing *l = user_data;
    sbx_wire_msg m;

    sbx_wire_init(&m, SBX_MSG_ENTRY, l->slot, l->call_id);
    sbx_wire_put_str(&m, info->name ? info->name : "");
    sbx_wire_put_i64(&m, info->is_dir);
    sbx_wire_put_i64(&m, info->size);
    sbx_wire_put_u32(&m, info->mode);
    return send_entry(l, &m);
}

static int
owned_entry_fn(const sbx_plugin_owned_info *info, void *user_data)
{
    listing *l = user_data;
    sbx_wire_msg m;

    sbx_wire_init(&m, SBX_MSG_ENTRY, l->slot, l->call_id);
    sbx_wire_put_str(&m, info->id ? info->id : "");
    sbx_wire_put_str(&m, info->create_token);
    sbx_wire_put_f64(&m, info->created_at);
    sbx_wire_put_f64(&m, info->expires_at);
    return send_entry(l, &m);
}

/* ---------------------------------------------------------------- calls */

/* Storage for one decoded argument. */
typedef union argval {
    void *p;
    const void *cp;
    int i;
    unsigned u;
    size_t z;
} argval;

/* Everything a call decodes, kept until its reply is sent. */
typedef struct call_frame {
    argval v[SBX_ROW_MAX_ARGS];
    void *av[SBX_ROW_MAX_ARGS];
    sbx_call_ctx ctx;
    sbx_plugin_create_request creq;
    uint16_t *ports;            /* creq.ports */
    sbx_plugin_exec_request ereq;
    const char **strv[4];       /* decoded vectors (array only) */
    int fds[4];                 /* received descriptors to close */
    unsigned nfds;
    uint64_t out_u64;
    int out_int;
    sbx_plugin_file_info info;
    void *out_handle;
    sbx_error *error;
    listing list;
    call_rec rec;
    int registered;             /* rec is on H.calls (CANCEL and STOP find it) */
    uint64_t handle_id;         /* of the first argument, for FREES rows */
    int refused;                /* errno: fail the call unrun (no thread to read) */
    int proc_call;              /* counted by proc_call() until done */
    int64_t bad_fd;             /* a descriptor number the frame did not pass */
    sbx_plugin_sandbox *destroying; /* a destroy's kept sandbox, counted by
                                 * kept_destroy_begin() until the call ends */
} call_frame;

static void
reply_error(uint64_t call_id, uint32_t slot, sbx_error_code code, const char *fmt, ...)
    SBX_PRINTF(4, 5);

static void
reply_error(uint64_t call_id, uint32_t slot, sbx_error_code code, const char *fmt, ...)
{
    const sbx_slot_row *row = &sbx_slot_rows[slot];
    sbx_error *e;
    sbx_wire_msg m;
    va_list ap;

    va_start(ap, fmt);
    e = sbx_error_newv(code, row->name, fmt, ap);
    va_end(ap);
    sbx_error_fill(e, H.backend, NULL);
    sbx_wire_init(&m, SBX_MSG_REPLY, slot, call_id);
    /* The return value says failure; OUT values are zero; the error last. */
    switch (row->ret) {
    case SBX_RET_INT:
        sbx_wire_put_i64(&m, -1);
        break;
    case SBX_RET_FD:
        sbx_wire_put_i64(&m, -1);
        sbx_wire_put_fd(&m, -1);
        break;
    case SBX_RET_STR_ALLOC:
    case SBX_RET_STR_BORROWED:
        sbx_wire_put_str(&m, NULL);
        break;
    default:
        break;
    }
    sbx_wire_put_u32(&m, 0); /* "no OUT values follow" */
    sbx_wire_put_error(&m, e);
    sbx_wire_send(H.sock, &m);
    sbx_wire_clear(&m);
    sbx_error_free(e);
}

/* Decodes argument @i of @row from @req into @f. 0, -1 (bad frame), -2
 * (unknown handle) or -3 (a descriptor named by number, f->bad_fd, instead
 * of passed with the frame). */
static int
decode_arg(const sbx_slot_row *row, unsigned i, sbx_wire_msg *req, call_frame *f)
{
    argval *v = &f->v[i];
    int null;

    switch (row->enc[i]) {
    case SBX_ENC_CLIENT:
    case SBX_ENC_SANDBOX:
    case SBX_ENC_PROCESS: {
        uint64_t id = sbx_wire_get_u64(req);

        if (i == 0)
            f->handle_id = id;
        if (i == 0 && f->destroying) {
            /* Found when the frame was read: the application's free of the
             * handle, which may come right behind a destroy it does not
             * wait for, takes the id off the table before this runs, and
             * leaves the sandbox to be freed after (kept_destroy_begin). */
            v->p = f->destroying;
            return 0;
        }
        return handle_get(id, row->enc[i], &v->p) == 0 ? 0 : -2;
    }
    case SBX_ENC_CTX:
        memset(&f->ctx, 0, sizeof(f->ctx));
        f->ctx.struct_size = sizeof(f->ctx);
        f->ctx.deadline = sbx_wire_get_f64(req);
        f->ctx.create_token = sbx_wire_get_str(req);
        f->ctx.cancel_fd = f->rec.cancel_fd;
        v->cp = &f->ctx;
        return 0;
    case SBX_ENC_STR:
        v->cp = sbx_wire_get_str(req);
        return 0;
    case SBX_ENC_BYTES: {
        size_t len;

        v->cp = sbx_wire_get_bytes(req, &len);
        return 0;
    }
    case SBX_ENC_SIZE:
        v->z = (size_t)sbx_wire_get_u64(req);
        return 0;
    case SBX_ENC_INT:
        v->i = (int)sbx_wire_get_i64(req);
        return 0;
    case SBX_ENC_U32:
        v->u = sbx_wire_get_u32(req);
        return 0;
    case SBX_ENC_FD:
        v->i = sbx_wire_take_fd(req);
        if (v->i >= 0)
            f->fds[f->nfds++] = v->i;
        return 0;
    case SBX_ENC_CREATE_REQ: {
        sbx_plugin_create_request *r = &f->creq;

        memset(r, 0, sizeof(*r));
        r->struct_size = sizeof(*r);
        r->set_fields = sbx_wire_get_u64(req);
        r->cpu = sbx_wire_get_f64(req);
        r->memory_mb = sbx_wire_get_i64(req);
        r->timeout_secs = sbx_wire_get_f64(req);
        r->workdir = sbx_wire_get_str(req);
        f->strv[0] = sbx_wire_get_strv(req, &null);
        r->env = f->strv[0];
        r->expires_at = sbx_wire_get_f64(req);
        r->image = sbx_wire_get_str(req);
        r->template_name = sbx_wire_get_str(req);
        r->snapshot_id = sbx_wire_get_str(req);
        r->app_name = sbx_wire_get_str(req);
        r->gpu = sbx_wire_get_str(req);
        r->disk_mb = sbx_wire_get_i64(req);
        r->allow_internet = (int)sbx_wire_get_i64(req);
        r->backend_options = sbx_wire_get_str(req);
        r->detached = (int)sbx_wire_get_i64(req);
        {
            uint32_t n = sbx_wire_get_u32(req);

            if (n > 65535)
                n = 65535;      /* a port appears once: at most 65535 */
            free(f->ports);
            f->ports = n ? calloc(n, sizeof(*f->ports)) : NULL;
            for (uint32_t k = 0; k < n; k++) {
                uint32_t p = sbx_wire_get_u32(req);

                if (f->ports)
                    f->ports[k] = (uint16_t)p;
            }
            r->ports = f->ports;
            r->n_ports = f->ports ? n : 0;
        }
        r->user = sbx_wire_get_str(req);
        v->cp = r;
        return 0;
    }
    case SBX_ENC_EXEC_REQ: {
        sbx_plugin_exec_request *r = &f->ereq;

        memset(r, 0, sizeof(*r));
        r->struct_size = sizeof(*r);
        f->strv[1] = sbx_wire_get_strv(req, &null);
        r->argv = f->strv[1];
        r->shell = sbx_wire_get_str(req);
        f->strv[2] = sbx_wire_get_strv(req, &null);
        r->env = f->strv[2];
        r->cwd = sbx_wire_get_str(req);
        r->user = sbx_wire_get_str(req);
        r->tty_rows = sbx_wire_get_u32(req);
        r->tty_cols = sbx_wire_get_u32(req);
        r->stdin_fd = sbx_wire_take_fd(req);
        r->stdout_fd = sbx_wire_take_fd(req);
        r->stderr_fd = sbx_wire_take_fd(req);
        /* -1, -2 and other negative values (no descriptor: EOF, interactive
         * stdin) travel as themselves; a descriptor is only ever one passed
         * with the frame, never a number of this process's own. */
        {
            int64_t raw_in = sbx_wire_get_i64(req);

            if (r->stdin_fd < 0 && !req->bad && raw_in >= 0) {
                f->bad_fd = raw_in;
                r->stdin_fd = -1;
                if (r->stdout_fd >= 0)
                    f->fds[f->nfds++] = r->stdout_fd;
                if (r->stderr_fd >= 0)
                    f->fds[f->nfds++] = r->stderr_fd;
                return -3;
            }
            if (r->stdin_fd < 0)
                r->stdin_fd = raw_in < INT_MIN ? INT_MIN : (int)raw_in;
        }
        r->flags = sbx_wire_get_u32(req);
        r->exit_fd = sbx_wire_take_fd(req);
        r->start_deadline = sbx_wire_get_f64(req);
        if (r->exit_fd < 0)
            r->flags &= ~SBX_PLUGIN_EXEC_EXIT_FD;
        if (r->stdin_fd >= 0)
            f->fds[f->nfds++] = r->stdin_fd;
        if (r->stdout_fd >= 0)
            f->fds[f->nfds++] = r->stdout_fd;
        if (r->stderr_fd >= 0)
            f->fds[f->nfds++] = r->stderr_fd;
        if (r->exit_fd >= 0)
            f->fds[f->nfds++] = r->exit_fd;
        v->cp = r;
        return 0;
    }
    case SBX_ENC_FILE_FN:
        v->p = (void *)(uintptr_t)file_entry_fn;
        return 0;
    case SBX_ENC_OWNED_FN:
        v->p = (void *)(uintptr_t)owned_entry_fn;
        return 0;
    case SBX_ENC_USER_DATA:
        v->p = &f->list;
        return 0;
    case SBX_ENC_U64:
        v->p = &f->out_u64;
        return 0;
    case SBX_ENC_INT_OUT:
        v->p = &f->out_int;
        return 0;
    case SBX_ENC_FILE_INFO:
        memset(&f->info, 0, sizeof(f->info));
        f->info.struct_size = sizeof(f->info);
        v->p = &f->info;
        return 0;
    case SBX_ENC_NEW_CLIENT:
    case SBX_ENC_NEW_SANDBOX:
    case SBX_ENC_NEW_PROCESS:
        v->p = &f->out_handle;
        return 0;
    case SBX_ENC_ERROR:
        v->p = &f->error;
        return 0;
    default:
        return -1;
    }
}

/* Does this row take a call context? */
static int
row_has_ctx(const sbx_slot_row *row)
{
    for (unsigned i = 0; i < row->nargs; i++)
        if (row->enc[i] == SBX_ENC_CTX)
            return 1;
    return 0;
}

/* A cancel eventfd of this thread's last call that never fired, for its
 * next one (a call is prepared and run on the thread that read it): an
 * exec costs no eventfd and close. Closed when the thread leaves. */
static __thread int spare_cancel_fd = -1;

/* The frame of call @req, its cancel record registered when the slot takes
 * a call context and @cancellable: a call the reader runs itself (a QUICK
 * one, handle_inline()) is over before the next frame, a CANCEL for it
 * included, is read, so its context's cancel_fd is -1 ("cannot be
 * cancelled") and it costs no eventfd. NULL when memory runs out. */
static call_frame *
call_prepare(const sbx_wire_msg *req, int cancellable)
{
    const sbx_slot_row *row = &sbx_slot_rows[req->slot];
    call_frame *f = calloc(1, sizeof(*f));

    if (!f)
        return NULL;
    f->rec.id = req->call_id;
    f->rec.cancel_fd = -1;
    f->list.call_id = req->call_id;
    f->list.slot = req->slot;
    f->list.rec = &f->rec;
    if (cancellable && row_has_ctx(row)) {
        if (spare_cancel_fd >= 0) {
            f->rec.cancel_fd = spare_cancel_fd;
            spare_cancel_fd = -1;
        } else {
            f->rec.cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        }
        call_register(&f->rec);
        f->registered = 1;
    }
    return f;
}

/*
 * Decodes, calls and replies to one CALL frame; frees it. @f is its frame
 * from call_prepare() (registered before the next frame was read, so that a
 * CANCEL right behind the call finds it), or NULL to make one here for a
 * call run inline, which no CANCEL can reach.
 */
static void
run_call(sbx_wire_msg *req, call_frame *f)
{
    const sbx_slot_row *row;
    sbx_wire_msg rep;
    ffi_arg rv = 0;
    void *fn;
    int rc, ok = 0;

    row = &sbx_slot_rows[req->slot];
    /* One line per call that crossed (SBX_DEBUG=debug): what an operation
     * costs in round trips, read off the log. */
    sbx_log(SBX_LOG_DEBUG, H.backend, "plugin host: call %s", row->name);
    fn = sbx_slot_get(H.plugin, req->slot);
    if (!f)
        f = call_prepare(req, 0);
    if (!f) {
        reply_error(req->call_id, req->slot, SBX_ERROR_RESOURCE_EXHAUSTED, "out of memory in the plugin host");
        goto out;
    }
    if (f->refused) {
        reply_error(req->call_id, req->slot,
                    sbx_errno_code(f->refused, SBX_ERROR_RESOURCE_EXHAUSTED),
                    "the plugin host cannot start a thread to go on reading calls "
                    "while this one runs: %s", strerror(f->refused));
        goto done;
    }
    for (unsigned i = 0; i < row->nargs; i++) {
        rc = decode_arg(row, i, req, f);
        if (rc == -2) {
            reply_error(req->call_id, req->slot, SBX_ERROR_NOT_FOUND,
                        "%s: the handle is not known to this plugin host", row->name);
            goto done;
        }
        if (rc == -3) {
            reply_error(req->call_id, req->slot, SBX_ERROR_INVALID_ARGUMENT,
                        "%s: stdin descriptor %lld was not passed with the call frame "
                        "(a descriptor travels beside the frame, never as a number)",
                        row->name, (long long)f->bad_fd);
            goto done;
        }
        if ((rc < 0 || req->bad) && req->fds_lost) {
            reply_error(req->call_id, req->slot, SBX_ERROR_RESOURCE_EXHAUSTED,
                        "%s: the plugin host had no room for the descriptors of the call "
                        "(too many open files)", row->name);
            goto done;
        }
        if (rc < 0 || req->bad) {
            reply_error(req->call_id, req->slot, SBX_ERROR_INVALID_ARGUMENT,
                        "%s: malformed call frame (argument %u of %u)", row->name, i + 1,
                        row->nargs);
            goto done;
        }
        f->av[i] = &f->v[i];
    }
    if (!fn) {
        reply_error(req->call_id, req->slot, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                    "backend \"%s\" does not support %s", H.backend, row->name);
        goto done;
    }
    if (req->slot == SBX_SLOT_ID_sandbox_free && kept_defer_free(f->v[0].p)) {
        /* Kept to be destroyed at the end: the plugin frees it then. */
    } else if (req->slot == SBX_SLOT_ID_client_free &&
               (kept_wait_counter(&K.destroys, ATTACH_DESTROY_SECS), kept_any())) {
        /* The kept sandboxes may need their client to be destroyed. (The
         * destroys in flight end first: those libsbx did not wait for,
         * of sandboxes it ended through their exec endpoint, drop theirs.) */
    } else if (req->slot == SBX_SLOT_ID_create || req->slot == SBX_SLOT_ID_resume) {
        kept_making(1);
        ffi_call(&H.cif[req->slot], FFI_FN(fn), &rv, f->av);
        if ((int)rv == 0 && f->out_handle)
            kept_add(f->out_handle, req->slot == SBX_SLOT_ID_create ? f->ctx.create_token : NULL);
        kept_making(-1);
    } else if (req->slot == SBX_SLOT_ID_exec_start ||
               (row->nargs > 0 && row->enc[0] == SBX_ENC_PROCESS)) {
        /* Counted until its reply is out (with the new process's handle). */
        proc_call(1);
        f->proc_call = 1;
        ffi_call(&H.cif[req->slot], FFI_FN(fn), &rv, f->av);
    } else {
        ffi_call(&H.cif[req->slot], FFI_FN(fn), &rv, f->av);
    }
    ok = 1;
    if (f->destroying) {
        kept_destroy_end(f->destroying, (int)rv == 0);
        f->destroying = NULL;
    } else if (req->slot == SBX_SLOT_ID_destroy && (int)rv == 0) {
        kept_drop(f->v[0].p);
    }

    sbx_wire_init(&rep, SBX_MSG_REPLY, req->slot, req->call_id);
    switch (row->ret) {
    case SBX_RET_INT:
        sbx_wire_put_i64(&rep, (int)rv);
        break;
    case SBX_RET_FD:
        sbx_wire_put_i64(&rep, (int)rv);
        sbx_wire_put_fd(&rep, (int)rv);
        break;
    case SBX_RET_STR_ALLOC: {
        char *s = (char *)(uintptr_t)rv;

        sbx_wire_put_str(&rep, s);
        if (s)
            sbx_host_services_get()->free(s);
        break;
    }
    case SBX_RET_STR_BORROWED:
        sbx_wire_put_str(&rep, (const char *)(uintptr_t)rv);
        break;
    default:
        break;
    }
    sbx_wire_put_u32(&rep, 1); /* OUT values follow */
    for (unsigned i = 0; i < row->nargs; i++) {
        if (row->dir[i] != SBX_DIR_OUT)
            continue;
        switch (row->enc[i]) {
        case SBX_ENC_U64:
            sbx_wire_put_u64(&rep, f->out_u64);
            break;
        case SBX_ENC_INT_OUT:
            sbx_wire_put_i64(&rep, f->out_int);
            break;
        case SBX_ENC_FILE_INFO:
            sbx_wire_put_str(&rep, f->info.name);
            sbx_wire_put_i64(&rep, f->info.is_dir);
            sbx_wire_put_i64(&rep, f->info.size);
            sbx_wire_put_u32(&rep, f->info.mode);
            break;
        case SBX_ENC_NEW_CLIENT:
        case SBX_ENC_NEW_SANDBOX:
        case SBX_ENC_NEW_PROCESS: {
            int kind = row->enc[i] == SBX_ENC_NEW_CLIENT ? SBX_ENC_CLIENT
                       : row->enc[i] == SBX_ENC_NEW_SANDBOX ? SBX_ENC_SANDBOX
                       : SBX_ENC_PROCESS;

            sbx_wire_put_u64(&rep, (int)rv == 0 ? handle_add(f->out_handle, kind) : 0);
            if (kind == SBX_ENC_SANDBOX)
                put_sandbox_names(&rep, (int)rv == 0 ? f->out_handle : NULL);
            if (kind == SBX_ENC_PROCESS) {
                /* Its event descriptor travels with it (no round trip later). */
                int (*event_fd)(sbx_plugin_process *) =
                    (int (*)(sbx_plugin_process *))(uintptr_t)
                        sbx_slot_get(H.plugin, SBX_SLOT_ID_exec_event_fd);

                sbx_wire_put_fd(&rep, (int)rv == 0 && event_fd && f->out_handle
                                          ? event_fd(f->out_handle) : -1);
            }
            break;
        }
        case SBX_ENC_ERROR:
            if ((row->ret == SBX_RET_INT && (int)rv < 0) ||
                (row->ret == SBX_RET_STR_ALLOC && !rv))
                sbx_error_ensure(&f->error, H.backend, row->name);
            sbx_wire_put_error(&rep, f->error);
            break;
        default:
            break;
        }
    }
    if (row->flags & SBX_ROW_NO_REPLY) {
        /* Nothing to say. */
    } else if (sbx_wire_send(H.sock, &rep) < 0 && errno != EPIPE && errno != ECONNRESET) {
        /* The caller waits: tell it why rather than nothing. */
        int e = errno;

        sbx_wire_clear(&rep);
        reply_error(req->call_id, req->slot, SBX_ERROR_CONNECTION,
                    "%s: the plugin host could not send its reply: %s", row->name, strerror(e));
    }
    sbx_wire_clear(&rep);

done:
    if (f->destroying)
        kept_destroy_end(f->destroying, 0);
    if (ok && (row->flags & SBX_ROW_FREES))
        handle_remove(f->handle_id);
    if (f->proc_call)
        proc_call(-1);
    if (f->registered)
        call_unregister(&f->rec);
    /* Unregistered, nothing writes it any more: one that never fired is
     * as good as new. */
    if (f->rec.cancel_fd >= 0 && !f->rec.fired && spare_cancel_fd < 0)
        spare_cancel_fd = f->rec.cancel_fd;
    else if (f->rec.cancel_fd >= 0)
        close(f->rec.cancel_fd);
    for (unsigned i = 0; i < f->nfds; i++)
        close(f->fds[i]);
    for (unsigned i = 0; i < 4; i++)
        free(f->strv[i]);
    free(f->ports);
    sbx_error_free(f->error);
    free(f);
out:
    sbx_wire_clear(req);
    free(req);
}

/* ---------------------------------------------------------------- threads */

/*
 * Every idle thread waits on the socket itself (an epoll instance of its
 * own with EPOLLEXCLUSIVE, so a frame wakes one of them). The thread that
 * receives a frame handles it: frames that never block (QUICK calls, CANCEL,
 * STOP) in order, still holding the receive lock, so the next frame is read
 * only after them; a call that may block after releasing it. So a call
 * reaches its plugin slot on the thread that read it, and nothing is woken
 * to take over the reading: the other idle threads already wait. A thread
 * that takes the last idle place for a blocking call starts one more.
 * A thread woken while another holds the receive lock does not queue on
 * it (which cost it two more wake-ups for a frame, such as an exec's free
 * right behind its wait, that the holder reads anyway): it waits again.
 * The holder reads until no frame is left, and after letting go looks
 * once more, reading what came meanwhile itself, or, leaving for a
 * blocking call, kicking an idle thread to read it (kick_idle()).
 */
/* One thread of the pool. */
typedef struct lf_rec {
    struct lf_rec *next;
    int kick_fd;                /* eventfd in its epoll set: "look again" */
    int idle;                   /* waiting for a frame (atomic) */
} lf_rec;

static struct {
    pthread_mutex_t recv_lock;
    unsigned idle;              /* threads waiting for a frame (atomic) */
    pthread_mutex_t list_lock;
    lf_rec *threads;
} LF = { PTHREAD_MUTEX_INITIALIZER, 0, PTHREAD_MUTEX_INITIALIZER, NULL };

/*
 * An exclusive wake-up wakes one thread per arrival; when the thread that
 * was woken stops reading at a blocking call while more frames wait, it
 * kicks an idle thread to read them (after releasing the receive lock,
 * which a kicked thread only tries to take). Returns 1 when frames wait
 * and no thread was idle to be kicked: the wake-ups of those frames went
 * to threads that found the lock held, so nobody would read them before
 * the next frame came; the caller starts a thread for them. Else 0.
 */
static int
kick_idle(const lf_rec *self)
{
    struct pollfd p = { H.sock, POLLIN, 0 };
    int kicked = 0;

    if (poll(&p, 1, 0) <= 0)
        return 0;
    pthread_mutex_lock(&LF.list_lock);
    for (lf_rec *r = LF.threads; r; r = r->next) {
        if (r != self && __atomic_load_n(&r->idle, __ATOMIC_SEQ_CST)) {
            eventfd_write(r->kick_fd, 1);
            kicked = 1;
            break;
        }
    }
    pthread_mutex_unlock(&LF.list_lock);
    return !kicked;
}

/* Takes @self off the list kick_idle() picks from (if it is on it). */
static void
lf_unlist(lf_rec *self)
{
    pthread_mutex_lock(&LF.list_lock);
    for (lf_rec **p = &LF.threads; *p; p = &(*p)->next)
        if (*p == self) {
            *p = self->next;
            break;
        }
    pthread_mutex_unlock(&LF.list_lock);
}

static void handle_inline(sbx_wire_msg *m);
static int is_quick(const sbx_wire_msg *req);
static void *lf_thread(void *arg);

/* An idle thread leaves after this long (SBX_PLUGIN_HOST_IDLE_MS) when more
 * than LF_KEEP_IDLE others are idle too. */
#define LF_IDLE_EXIT_MS 30000
#define LF_KEEP_IDLE 2u
static int lf_idle_ms = LF_IDLE_EXIT_MS;


/* Takes @self out of the pool and frees what it holds. */
static void
lf_leave(lf_rec *self, int ep, void *scratch)
{
    lf_unlist(self);
    close(self->kick_fd);
    close(ep);
    if (spare_cancel_fd >= 0)
        close(spare_cancel_fd);
    spare_cancel_fd = -1;
    free(self);
    free(scratch);
}

/* What a thread of the pool needs, made before it starts (so that a
 * shortage of descriptors or memory is seen by the thread that wanted it). */
typedef struct lf_start {
    void *scratch;
    int ep;
    lf_rec *self;
    int permanent;
} lf_start;

/* Frees what lf_setup() made; keeps errno. */
static void
lf_setup_free(lf_start *st)
{
    int e = errno;

    if (st->self && st->self->kick_fd >= 0)
        close(st->self->kick_fd);
    if (st->ep >= 0)
        close(st->ep);
    free(st->self);
    free(st->scratch);
    free(st);
    errno = e;
}

/* A new thread's buffer, epoll set and kick descriptor; NULL with errno
 * set when they cannot be made. */
static lf_start *
lf_setup(int permanent)
{
    /* Edge-triggered: a thread that found the receive lock held waits for
     * the next frame, not again for the one the holder is reading. */
    struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLET };
    struct epoll_event kev = { .events = EPOLLIN };
    lf_start *st = calloc(1, sizeof(*st));

    if (!st)
        return NULL;
    st->ep = -1;
    st->permanent = permanent;
    st->scratch = malloc(SBX_WIRE_MAX_FRAME);
    st->self = calloc(1, sizeof(*st->self));
    if (!st->scratch || !st->self) {
        errno = ENOMEM;
        lf_setup_free(st);
        return NULL;
    }
    st->self->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (st->self->kick_fd < 0 || (st->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        lf_setup_free(st);
        return NULL;
    }
    ev.data.fd = H.sock;
    kev.data.fd = st->self->kick_fd;
    if (epoll_ctl(st->ep, EPOLL_CTL_ADD, H.sock, &ev) < 0 ||
        epoll_ctl(st->ep, EPOLL_CTL_ADD, st->self->kick_fd, &kev) < 0) {
        lf_setup_free(st);
        return NULL;
    }
    return st;
}

/* Starts one more thread of the pool: 0, or -1 with errno set when the
 * process is out of descriptors, memory or threads. */
static int
spawn_thread(void)
{
    pthread_t t;
    pthread_attr_t attr;
    lf_start *st = lf_setup(0);
    int rc;

    if (!st)
        return -1;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &attr, lf_thread, st);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        lf_setup_free(st);
        errno = rc;
        return -1;
    }
    return 0;
}

static void *
lf_thread(void *arg)
{
    lf_start *st = arg;
    void *scratch = st->scratch;
    struct epoll_event ev;
    int ep = st->ep;
    lf_rec *self = st->self;
    /* The main thread stays: were it to return, serve() would return and
     * the process exit with the other threads' calls in flight. */
    int permanent = st->permanent;

    free(st);
    pthread_mutex_lock(&LF.list_lock);
    self->next = LF.threads;
    LF.threads = self;
    pthread_mutex_unlock(&LF.list_lock);
    __atomic_add_fetch(&LF.idle, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        sbx_wire_msg *m = NULL;
        call_frame *frame = NULL;
        int blocking = 0, n;

        __atomic_store_n(&self->idle, 1, __ATOMIC_SEQ_CST);
        n = epoll_wait(ep, &ev, 1, permanent ? -1 : lf_idle_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            exit(1);
        if (n == 0) {
            /* Idle for long: leave when enough others wait. */
            unsigned idle = __atomic_load_n(&LF.idle, __ATOMIC_SEQ_CST);

            while (idle > LF_KEEP_IDLE &&
                   !__atomic_compare_exchange_n(&LF.idle, &idle, idle - 1, 0,
                                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                ;
            if (idle > LF_KEEP_IDLE) {
                /* A kick (kick_idle) may have come to this thread just as
                 * it timed out. Once it is off the list (no kick can pick
                 * it) and the socket out of its set (later frames wake the
                 * others), a kick it got or a frame waiting keeps it: it
                 * reads (adding the socket back reports it ready at once). */
                struct pollfd more = { H.sock, POLLIN, 0 };
                struct epoll_event back = { .events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLET,
                                            .data.fd = H.sock };
                eventfd_t kicked = 0;

                lf_unlist(self);
                __atomic_store_n(&self->idle, 0, __ATOMIC_SEQ_CST);
                epoll_ctl(ep, EPOLL_CTL_DEL, H.sock, NULL);
                if ((eventfd_read(self->kick_fd, &kicked) == 0 || poll(&more, 1, 0) > 0) &&
                    epoll_ctl(ep, EPOLL_CTL_ADD, H.sock, &back) == 0) {
                    pthread_mutex_lock(&LF.list_lock);
                    self->next = LF.threads;
                    LF.threads = self;
                    pthread_mutex_unlock(&LF.list_lock);
                    __atomic_add_fetch(&LF.idle, 1, __ATOMIC_SEQ_CST);
                    continue;
                }
                lf_leave(self, ep, scratch);
                return NULL;
            }
            continue;
        }
        if (ev.data.fd == self->kick_fd) {
            eventfd_t v;

            eventfd_read(self->kick_fd, &v);
        }
        int uncovered = 0;

        for (;;) {
            struct pollfd more = { H.sock, POLLIN, 0 };

            /* Held: its holder reads every frame there is and looks again
             * after letting go (below), so this one goes back to wait,
             * still idle (kick_idle() may pick it). */
            if (pthread_mutex_trylock(&LF.recv_lock) != 0)
                break;
            __atomic_store_n(&self->idle, 0, __ATOMIC_SEQ_CST);
            for (;;) {
                int rc;

                m = malloc(sizeof(*m));
                if (!m)
                    exit(1);
                rc = sbx_wire_recv_nowait(H.sock, m, scratch);
                if (rc < 0 && errno == EAGAIN) {
                    free(m);
                    m = NULL;
                    break;
                }
                if (rc <= 0)
                    host_end(rc == 0 ? 0 : 1); /* the application closed its end */
                if (m->type == SBX_MSG_CALL && m->slot < SBX_SLOT_COUNT && !is_quick(m)) {
                    blocking = 1;
                    break;
                }
                handle_inline(m);
                m = NULL;
            }
            if (blocking)
                frame = call_prepare(m, 1);
            if (frame && m->slot == SBX_SLOT_ID_destroy) {
                /* Counted before the next frame is read: a free of its
                 * handle right behind it waits for it (kept_destroy_begin). */
                sbx_wire_msg peek = *m;

                frame->destroying = kept_destroy_begin(sbx_wire_get_u64(&peek));
            }
            pthread_mutex_unlock(&LF.recv_lock);
            if (blocking) {
                uncovered = kick_idle(self);
                break;
            }
            /* A frame that came after the last read woke a thread that
             * found the lock held: read it here. */
            if (poll(&more, 1, 0) <= 0)
                break;
        }
        if (!blocking)
            continue;
        /* A thread more when none is left idle, or when frames wait behind
         * this call and no idle thread could be kicked for them (the count
         * may still include a thread about to run a call of its own). */
        if ((__atomic_sub_fetch(&LF.idle, 1, __ATOMIC_SEQ_CST) == 0 || uncovered) &&
            spawn_thread() < 0 && frame && !(sbx_slot_rows[m->slot].flags & SBX_ROW_NO_REPLY)) {
            /* No thread could be started to read the frames behind this
             * call (out of descriptors, memory or threads): this one stays
             * the reader, and the call fails rather than runs, since a
             * host that reads no more would miss the cancels and calls of
             * every other sandbox. */
            frame->refused = errno;
        }
        run_call(m, frame);
        __atomic_add_fetch(&LF.idle, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* 1 when the CALL in @req may run on the reader thread. */
static int
is_quick(const sbx_wire_msg *req)
{
    const sbx_slot_row *row = &sbx_slot_rows[req->slot];

    if (row->flags & SBX_ROW_QUICK)
        return 1;
    if (row->flags & SBX_ROW_QUICK_IF_NO_WAIT) {
        /* Peek at the INT argument (the wait): decode a copy of the cursor. */
        sbx_wire_msg peek = *req;

        peek.nfds = 0;
        for (unsigned i = 0; i < row->nargs; i++) {
            switch (row->enc[i]) {
            case SBX_ENC_PROCESS:
            case SBX_ENC_SANDBOX:
            case SBX_ENC_CLIENT:
                sbx_wire_get_u64(&peek);
                break;
            case SBX_ENC_CTX:
                sbx_wire_get_f64(&peek);
                sbx_wire_get_str(&peek);
                break;
            case SBX_ENC_INT:
                return !peek.bad && sbx_wire_get_i64(&peek) == 0;
            default:
                return 0;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- serve */

static int
send_welcome(uint32_t version, const sbx_plugin *p, const sbx_error *err)
{
    sbx_wire_msg m;
    int rc;

    sbx_wire_init(&m, SBX_MSG_WELCOME, 0, 0);
    sbx_wire_put_u32(&m, version);
    sbx_wire_put_u32(&m, (uint32_t)getpid());
    if (!p) {
        sbx_wire_put_u32(&m, 0);
        sbx_wire_put_error(&m, err);
    } else {
        uint64_t have = 0;

        for (unsigned s = 0; s < SBX_SLOT_COUNT; s++)
            if (sbx_slot_get(p, s))
                have |= (uint64_t)1 << s;
        sbx_wire_put_u32(&m, 1);
        sbx_wire_put_str(&m, p->name);
        sbx_wire_put_str(&m, p->version ? p->version : "");
        sbx_wire_put_str(&m, p->description ? p->description : "");
        sbx_wire_put_u32(&m, p->abi_major);
        sbx_wire_put_u32(&m, p->abi_minor);
        sbx_wire_put_u64(&m, p->caps);
        sbx_wire_put_u64(&m, have);
    }
    rc = sbx_wire_send(H.sock, &m);
    sbx_wire_clear(&m);
    return rc;
}

static int
serve(int sock)
{
    void *scratch = malloc(SBX_WIRE_MAX_FRAME);
    sbx_wire_msg hello;
    uint32_t pmin, pmax, version;
    const char *backend;
    sbx_error *err = NULL;

    if (!scratch)
        return 1;
    H.sock = sock;
    app_watch(sock);
    if (prepare_cifs() < 0) {
        fprintf(stderr, "sbx-plugin-host: cannot prepare the libffi call interfaces\n");
        return 1;
    }
    int got = sbx_wire_recv(sock, &hello, scratch);
    if (got == 0)
        return 1;   /* the application went before it said HELLO: nobody to tell */
    if (got != 1 || hello.type != SBX_MSG_HELLO) {
        fprintf(stderr, "sbx-plugin-host: no HELLO frame on descriptor %d\n", sock);
        return 1;
    }
    pmin = sbx_wire_get_u32(&hello);
    pmax = sbx_wire_get_u32(&hello);
    backend = sbx_wire_get_str(&hello);
    if (hello.bad || !backend) {
        fprintf(stderr, "sbx-plugin-host: malformed HELLO frame\n");
        return 1;
    }
    version = pmax < SBX_WIRE_VERSION_MAX ? pmax : SBX_WIRE_VERSION_MAX;
    if (version < pmin || version < SBX_WIRE_VERSION_MIN) {
        sbx_set_error(&err, SBX_ERROR_CONFIGURATION, NULL,
                      "wire protocol mismatch: libsbx speaks versions %u to %u, "
                      "sbx-plugin-host speaks %d to %d", pmin, pmax,
                      SBX_WIRE_VERSION_MIN, SBX_WIRE_VERSION_MAX);
        send_welcome(0, NULL, err);
        return 1;
    }
    H.backend = strdup(backend);
    H.plugin = H.backend ? sbx_plugin_load(H.backend, &err) : NULL;
    sbx_wire_clear(&hello);
    if (send_welcome(version, H.plugin, err) < 0 || !H.plugin)
        return 1;

    free(scratch);
    {
        lf_start *st = lf_setup(1);

        if (!st) {
            fprintf(stderr, "sbx-plugin-host: cannot set up a thread: %s\n", strerror(errno));
            exit(1);
        }
        lf_thread(st);
    }
    /* Not reached: the host ends only by exit() at EOF or on a fault. */
    return 1;
}

/* A frame the reading thread handles itself: a QUICK call, CANCEL, STOP. */
static void
handle_inline(sbx_wire_msg *m)
{
    switch (m->type) {
    case SBX_MSG_CALL:
        if (m->slot >= SBX_SLOT_COUNT) {
            uint32_t slot = m->slot;

            /* A newer libsbx may know slots this host does not. */
            reply_error(m->call_id, 0, SBX_ERROR_FEATURE_NOT_SUPPORTED,
                        "slot number %u is not known to this plugin host", slot);
            break;
        }
        run_call(m, NULL);
        return;
    case SBX_MSG_CANCEL:
    case SBX_MSG_STOP:
        call_signal(m->call_id, m->type == SBX_MSG_STOP);
        break;
    default:
        break;
    }
    sbx_wire_clear(m);
    free(m);
}

/* ---------------------------------------------------------------- inspect */

static int
inspect(const char *name, const char *path)
{
    sbx_backend_info *info = sbx_backend_info_inspect(name, path);
    json_object *o;

    if (!info)
        return 1;
    o = json_object_new_object();
    json_object_object_add(o, "version", json_object_new_string(sbx_backend_info_get0_version(info)));
    json_object_object_add(o, "description",
                           json_object_new_string(sbx_backend_info_get0_description(info)));
    if (sbx_backend_info_get0_problem(info))
        json_object_object_add(o, "problem",
                               json_object_new_string(sbx_backend_info_get0_problem(info)));
    json_object_object_add(o, "caps", json_object_new_int64((int64_t)sbx_backend_info_get_caps(info)));
    json_object_object_add(o, "abi_major", json_object_new_int64(sbx_backend_info_get_abi_major(info)));
    json_object_object_add(o, "abi_minor", json_object_new_int64(sbx_backend_info_get_abi_minor(info)));
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    sbx_backend_info_free(info);
    return fflush(stdout) == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "--serve") == 0) {
        char *end;
        long fd = strtol(argv[2], &end, 10);

        if (*end || fd < 0 || fd > 1 << 20) {
            fprintf(stderr, "sbx-plugin-host: bad descriptor \"%s\"\n", argv[2]);
            return 2;
        }
        /* Not inherited by what the plugin starts: a crash must close the
         * application's socket at once. */
        if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0) {
            fprintf(stderr, "sbx-plugin-host: descriptor %ld: %s\n", fd, strerror(errno));
            return 2;
        }
        {
            const char *ms = getenv("SBX_PLUGIN_HOST_IDLE_MS");
            char *mend;
            long v = ms ? strtol(ms, &mend, 10) : 0;

            if (ms && *ms && !*mend && v >= 1 && v <= 3600000)
                lf_idle_ms = (int)v;
        }
        return serve((int)fd);
    }
    if (argc == 4 && strcmp(argv[1], "--inspect") == 0)
        return inspect(argv[2], argv[3]);
    fprintf(stderr,
            "usage: sbx-plugin-host --serve FD\n"
            "       sbx-plugin-host --inspect NAME PATH\n"
            "Runs a libsbx backend plugin out of process; started by libsbx.\n");
    return 2;
}
