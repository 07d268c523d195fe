/*
 * server/runtime.c — the sandboxes sbx-server runs through libsbx: one
 * sbx_client per enabled backend (made on first use, plugins out of
 * process, shared by every request thread), and the handles of attached
 * sandboxes by server id, reference-counted so a termination never frees a
 * handle another thread is executing in.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "server.h"
#include "util.h"

typedef struct rt_client {
    char *backend;
    sbx_client *client;
} rt_client;

typedef struct rt_sandbox {
    char *id;
    sbx_sandbox *sandbox;
    int refs;                     /* the map's own + one per cp_runtime_get */
    int dropped;
} rt_sandbox;

struct cp_runtimes {
    const cp_settings *settings;
    char **installed;             /* with no BESPOKE_ALLOWED_BACKENDS: the usable */
    size_t ninstalled;            /* backends installed at start */
    pthread_mutex_t lock;
    rt_client *clients;
    size_t nclients;
    rt_sandbox **sandboxes;
    size_t nsandboxes, cap;
    unsigned workers;             /* provider calls on threads of their own */
    sbx_async *async;             /* the pool of those calls (cp_runtime_async()) */
    pthread_t dispatcher;         /* runs their callbacks */
    int stop_fd;                  /* an eventfd that ends the dispatcher; -1 */
};

cp_runtimes *
cp_runtimes_new(const cp_settings *settings)
{
    cp_runtimes *rt = calloc(1, sizeof *rt);

    rt->settings = settings;
    rt->stop_fd = -1;
    pthread_mutex_init(&rt->lock, NULL);
    if (!settings->backends) {
        /* Every installed backend that loads, as found at start. */
        sbx_backend_info **list = NULL;
        size_t n = 0;
        if (sbx_backends_list(&list, &n, NULL) == 0) {
            rt->installed = calloc(n ? n : 1, sizeof *rt->installed);
            for (size_t i = 0; i < n; i++)
                if (!sbx_backend_info_get0_problem(list[i]))
                    rt->installed[rt->ninstalled++] = strdup(sbx_backend_info_get0_name(list[i]));
            sbx_backend_info_list_free(list, n);
        }
    }
    return rt;
}

void
cp_runtimes_free(cp_runtimes *rt)
{
    if (!rt)
        return;
    if (rt->async) {
        uint64_t one = 1;
        ssize_t w;
        do
            w = write(rt->stop_fd, &one, sizeof one);
        while (w < 0 && errno == EINTR);
        pthread_join(rt->dispatcher, NULL);
        close(rt->stop_fd);
        sbx_async_free(rt->async);
    }
    for (size_t i = 0; i < rt->nsandboxes; i++) {
        sbx_sandbox_free(rt->sandboxes[i]->sandbox);
        free(rt->sandboxes[i]->id);
        free(rt->sandboxes[i]);
    }
    for (size_t i = 0; i < rt->nclients; i++) {
        sbx_client_free(rt->clients[i].client);
        free(rt->clients[i].backend);
    }
    free(rt->sandboxes);
    free(rt->clients);
    for (size_t i = 0; i < rt->ninstalled; i++)
        free(rt->installed[i]);
    free(rt->installed);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
}

int
cp_backend_enabled(const cp_runtimes *rt, const char *backend)
{
    const cp_settings *s = rt->settings;
    char *const *list = s->backends ? s->backends : rt->installed;
    size_t n = s->backends ? s->nbackends : rt->ninstalled;

    if (!backend || !*backend)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], backend))
            return 1;
    return 0;
}

sbx_client *
cp_runtime_client(cp_runtimes *rt, const char *backend, sbx_error **error)
{
    sbx_client *c = NULL;

    pthread_mutex_lock(&rt->lock);
    for (size_t i = 0; i < rt->nclients; i++)
        if (!strcmp(rt->clients[i].backend, backend))
            c = rt->clients[i].client;
    if (!c) {
        c = sbx_client_new_with_mode(backend, SBX_PLUGIN_MODE_DEFAULT, error);
        /* Every provider call gets the deadline (before any other thread
         * can use the client): see cp_runtime_client() in server.h. */
        if (c && sbx_client_set_call_timeout(c, rt->settings->provider_timeout_secs, error) < 0) {
            sbx_client_free(c);
            c = NULL;
        }
        if (c) {
            rt->clients = realloc(rt->clients, (rt->nclients + 1) * sizeof *rt->clients);
            rt->clients[rt->nclients].backend = strdup(backend);
            rt->clients[rt->nclients].client = c;
            rt->nclients++;
        }
    }
    pthread_mutex_unlock(&rt->lock);
    return c;
}

static rt_sandbox *
find(cp_runtimes *rt, const char *id, size_t *at)
{
    for (size_t i = 0; i < rt->nsandboxes; i++)
        if (!strcmp(rt->sandboxes[i]->id, id)) {
            if (at)
                *at = i;
            return rt->sandboxes[i];
        }
    return NULL;
}

void
cp_runtime_put(cp_runtimes *rt, const char *id, sbx_sandbox *sandbox)
{
    rt_sandbox *s = calloc(1, sizeof *s), *old;
    size_t at;

    s->id = strdup(id);
    s->sandbox = sandbox;
    s->refs = 1;
    pthread_mutex_lock(&rt->lock);
    old = find(rt, id, &at);
    if (old) {
        /* Another thread resumed it first: keep that one. */
        pthread_mutex_unlock(&rt->lock);
        sbx_sandbox_free(sandbox);
        free(s->id);
        free(s);
        return;
    }
    if (rt->nsandboxes == rt->cap) {
        rt->cap = rt->cap ? rt->cap * 2 : 16;
        rt->sandboxes = realloc(rt->sandboxes, rt->cap * sizeof *rt->sandboxes);
    }
    rt->sandboxes[rt->nsandboxes++] = s;
    pthread_mutex_unlock(&rt->lock);
}

sbx_sandbox *
cp_runtime_get(cp_runtimes *rt, const char *id)
{
    rt_sandbox *s;
    sbx_sandbox *sb = NULL;

    pthread_mutex_lock(&rt->lock);
    s = find(rt, id, NULL);
    if (s) {
        s->refs++;
        sb = s->sandbox;
    }
    pthread_mutex_unlock(&rt->lock);
    return sb;
}

/* Takes one reference of rt->sandboxes[at]; the last one removes and frees it. */
static void
release_at(cp_runtimes *rt, size_t at)
{
    rt_sandbox *s = rt->sandboxes[at];

    if (--s->refs == 0) {
        rt->sandboxes[at] = rt->sandboxes[--rt->nsandboxes];
        sbx_sandbox_free(s->sandbox);
        free(s->id);
        free(s);
    }
}

void
cp_runtime_unref(cp_runtimes *rt, sbx_sandbox *sandbox)
{
    pthread_mutex_lock(&rt->lock);
    for (size_t i = 0; i < rt->nsandboxes; i++)
        if (rt->sandboxes[i]->sandbox == sandbox) {
            release_at(rt, i);
            break;
        }
    pthread_mutex_unlock(&rt->lock);
}

void
cp_runtime_drop(cp_runtimes *rt, const char *id)
{
    size_t at;
    rt_sandbox *s;

    pthread_mutex_lock(&rt->lock);
    s = find(rt, id, &at);
    if (s && !s->dropped) {
        /* A handle still in use stays until its last reference, under an
         * id no lookup matches. */
        s->dropped = 1;
        free(s->id);
        s->id = strdup("");
        release_at(rt, at);
    }
    pthread_mutex_unlock(&rt->lock);
}

/* The dispatcher: runs the pool's callbacks as its operations complete,
 * until rt->stop_fd is signalled. */
static void *
dispatch_thread(void *arg)
{
    cp_runtimes *rt = arg;
    struct pollfd p[2];

    p[0].fd = sbx_async_get_fd(rt->async);
    p[0].events = POLLIN;
    p[1].fd = rt->stop_fd;
    p[1].events = POLLIN;
    for (;;) {
        p[0].revents = p[1].revents = 0;
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[0].revents & POLLIN)
            sbx_async_dispatch(rt->async);
        if (p[1].revents & POLLIN)
            break;
    }
    return NULL;
}

/* "@what: the text of errno @err" (free()). */
static char *
os_fault(const char *what, int err)
{
    char buf[256];

    return cp_printf("%s: %s", what, strerror_r(err, buf, sizeof buf));
}

/* The test hook SBX_SERVER_TEST_ASYNC_FAULT: "eventfd" or "thread" makes
 * that step of cp_runtime_async() fail as the system would (EMFILE,
 * EAGAIN); 0 otherwise. */
static int
test_fault(const char *step)
{
    const char *v = getenv("SBX_SERVER_TEST_ASYNC_FAULT");

    return v && !strcmp(v, step);
}

sbx_async *
cp_runtime_async(cp_runtimes *rt, char **why)
{
    sbx_async *a;
    char *fault = NULL;

    pthread_mutex_lock(&rt->lock);
    if (!rt->async) {
        unsigned n = rt->settings->connections;
        sigset_t all, old;
        sbx_error *e = NULL;
        int rc;

        if (n < 1)
            n = 1;
        if (n > SBX_ASYNC_MAX_WORKERS)
            n = SBX_ASYNC_MAX_WORKERS;
        rt->async = sbx_async_new(n, &e);
        if (!rt->async) {
            fault = cp_printf("the pool: %s", e ? sbx_error_get0_message(e) : "no error given");
            sbx_error_free(e);
        } else {
            if (test_fault("eventfd")) {
                rt->stop_fd = -1;
                errno = EMFILE;
            } else {
                rt->stop_fd = eventfd(0, EFD_CLOEXEC);
            }
            if (rt->stop_fd < 0) {
                fault = os_fault("eventfd", errno);
                sbx_async_free(rt->async);
                rt->async = NULL;
            }
        }
        if (rt->async) {
            /* Signals stay with the thread that waits for them (main.c). */
            sigfillset(&all);
            pthread_sigmask(SIG_SETMASK, &all, &old);
            rc = test_fault("thread") ? EAGAIN
                                      : pthread_create(&rt->dispatcher, NULL, dispatch_thread, rt);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (rc != 0) {
                fault = os_fault("the dispatching thread", rc);
                close(rt->stop_fd);
                rt->stop_fd = -1;
                sbx_async_free(rt->async);
                rt->async = NULL;
            }
        }
    }
    a = rt->async;
    pthread_mutex_unlock(&rt->lock);
    if (why)
        *why = fault;
    else
        free(fault);
    return a;
}

void
cp_runtime_worker_begin(cp_runtimes *rt)
{
    pthread_mutex_lock(&rt->lock);
    rt->workers++;
    pthread_mutex_unlock(&rt->lock);
}

void
cp_runtime_worker_end(cp_runtimes *rt)
{
    pthread_mutex_lock(&rt->lock);
    rt->workers--;
    pthread_mutex_unlock(&rt->lock);
}

unsigned
cp_runtimes_busy(cp_runtimes *rt)
{
    unsigned n;

    pthread_mutex_lock(&rt->lock);
    n = rt->workers;
    pthread_mutex_unlock(&rt->lock);
    return n;
}
