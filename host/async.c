/*
 * host/async.c — the asynchronous API: a pool of worker threads that run
 * the synchronous calls, and a completion queue that the application's
 * event loop drains on its own thread.
 *
 * One mutex guards everything shared. Operations move through three lists:
 *
 *  - pending: submitted, not started, in submission order. A worker takes
 *    the first one that may start: its client (its key) is below the
 *    per-client bound, or there is no bound. Workers wait on work_cv;
 *    submitting signals it and starts a thread when fewer idle threads
 *    than pending operations exist (up to max_workers).
 *  - (running: the worker holds the operation; the key counts it.)
 *  - done: completed, waiting for sbx_async_dispatch(). The pool's eventfd
 *    is written under the mutex whenever an operation joins this list and
 *    read (reset to zero) under the mutex when dispatch empties it, so it
 *    is readable exactly while the list holds something.
 *
 * A worker runs each operation's synchronous call with its own cancel
 * eventfd as the thread's call scope (sbx_call_scope_set), so every plugin
 * call context made by the call carries it; sbx_op_cancel() writes to it
 * while the operation runs, and the worker resets it once the operation
 * left the running state. This file uses only the public synchronous API
 * and the call scope, so it does not depend on how plugins are hosted.
 *
 * What an operation made and the callback did not steal is released after
 * the callback; a sandbox is destroyed by a worker (the operation is
 * queued again as an internal one without callback), so the event loop
 * never blocks on it. sbx_async_free() lets internal operations finish.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <json-c/json.h>

#include "internal.h"

typedef enum op_state {
    OP_PENDING,                 /* in the pending list */
    OP_RUNNING,                 /* a worker runs its call */
    OP_FINISHING,               /* cancelled while running; the worker cleans up */
    OP_DONE,                    /* in the done list */
    OP_DISPATCHED               /* taken by dispatch: its callback runs */
} op_state;

/* The client an operation counts against for the per-client bound. */
typedef struct async_key {
    const void *ptr;            /* the sbx_client; NULL when keyed by name */
    char *name;                 /* the backend name when ptr is NULL */
    unsigned running;           /* operations of this key running now */
    size_t refs;                /* pending + running operations holding it */
    struct async_key *next;
} async_key;

typedef struct op_list {
    sbx_op *head, *tail;
    size_t count;
} op_list;

typedef struct async_worker {
    sbx_async *async;
    pthread_t thread;
    int cancel_fd;              /* eventfd: readable = cancel the running op */
} async_worker;

struct sbx_async {
    pthread_mutex_t lock;
    pthread_cond_t work_cv;     /* workers wait here for an op to run */
    int efd;                    /* readable while @done is not empty */
    unsigned max_workers;
    unsigned nthreads;          /* workers started (all in @workers) */
    unsigned busy;              /* workers running an operation */
    unsigned max_per_client;    /* 0 = no bound */
    int stopping;               /* sbx_async_free() began */
    /* The dispatching thread's own: sbx_async_free() called from one of
     * its callbacks is carried out when the outermost dispatch returns. */
    unsigned dispatch_depth;    /* dispatches running (nested from callbacks) */
    pthread_t dispatcher;       /* their thread, while dispatch_depth > 0 */
    int free_deferred;          /* a callback freed the pool */
    size_t outstanding;         /* user operations not yet dispatched */
    op_list pending;
    op_list done;
    async_key *keys;
    async_worker *workers;      /* max_workers slots */
};

struct sbx_op {
    sbx_async *async;
    sbx_op *prev, *next;        /* in pending or done */
    sbx_op_kind kind;
    const char *name;           /* the synchronous call's op name */
    sbx_op_done_fn done;
    void *user_data;
    op_state state;
    int cancelled;
    int internal;               /* destroy + free @sandbox; no callback */
    int cancel_fd;              /* the worker's descriptor while running */
    async_key *key;             /* NULL: not bounded */

    /* Arguments: copies, except the borrowed handles and descriptor. */
    sbx_client *client;
    sbx_sandbox *sandbox;
    char *s1, *s2, *s3;         /* strings, by kind (see the submitters) */
    sbx_options *options;
    int has_request;
    sbx_exec_request rq;        /* pointers into the copies below */
    sbx_strv argv, env;
    char *shell, *cwd, *user;
    void *stdin_copy;
    void *bytes;                /* write_file data */
    size_t nbytes;
    int fd;
    uint32_t mode;
    sbx_plugin_mode plugin_mode; /* client_new */

    /* Outcome. */
    int failed;
    sbx_error *error;
    sbx_sandbox *made;          /* create / resume */
    sbx_client *made_client;    /* client_new */
    sbx_result *result;
    char *data;
    size_t data_len;
    sbx_file_info **list;
    size_t list_count;
    int64_t value;
    /* run_agent: the request (strings in s1..s3, shell, cwd, argv, env)
     * and its run; apply_patch: the strip level (patch in bytes, dir in s1). */
    sbx_agent_request agent;
    sbx_agent_run *agent_run;
    int strip;
};

/* ---------------------------------------------------------------- lists */

static void
list_append(op_list *l, sbx_op *op)
{
    op->next = NULL;
    op->prev = l->tail;
    if (l->tail)
        l->tail->next = op;
    else
        l->head = op;
    l->tail = op;
    l->count++;
}

static void
list_remove(op_list *l, sbx_op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        l->head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        l->tail = op->prev;
    op->prev = op->next = NULL;
    l->count--;
}

/* ---------------------------------------------------------------- keys */

/* The key for @ptr or @name (one of them non-NULL), made when missing;
 * NULL when memory runs out. Under the lock. */
static async_key *
key_get(sbx_async *a, const void *ptr, const char *name)
{
    async_key *k;

    for (k = a->keys; k; k = k->next)
        if (ptr ? k->ptr == ptr : !k->ptr && strcmp(k->name, name) == 0)
            break;
    if (!k) {
        k = calloc(1, sizeof(*k));
        if (!k)
            return NULL;
        k->ptr = ptr;
        if (!ptr && !(k->name = strdup(name))) {
            free(k);
            return NULL;
        }
        k->next = a->keys;
        a->keys = k;
    }
    k->refs++;
    return k;
}

/* Drops @op's hold on its key (freed with the last one). Under the lock. */
static void
key_release(sbx_async *a, sbx_op *op)
{
    async_key *k = op->key, **pp;

    if (!k)
        return;
    op->key = NULL;
    if (--k->refs > 0)
        return;
    for (pp = &a->keys; *pp != k; pp = &(*pp)->next)
        ;
    *pp = k->next;
    free(k->name);
    free(k);
}

/* ---------------------------------------------------------------- ops */

/* The op name errors of @kind carry (the synchronous call's). */
static const char *
kind_op_name(sbx_op_kind kind)
{
    switch (kind) {
    case SBX_OP_CLIENT_NEW: return "client_new";
    case SBX_OP_CLIENT_PROBE: return "probe";
    case SBX_OP_SANDBOX_CREATE: return "create";
    case SBX_OP_CREATE: return "create";
    case SBX_OP_SANDBOX_RESUME: return "resume";
    case SBX_OP_RESUME: return "resume";
    case SBX_OP_DESTROY: return "destroy";
    case SBX_OP_IS_ALIVE: return "is_alive";
    case SBX_OP_EXECUTE_COMMAND: return "execute_command";
    case SBX_OP_EXECUTE_SHELL: return "execute_command";
    case SBX_OP_EXECUTE_CODE: return "execute_code";
    case SBX_OP_LIST_FILES: return "list_files";
    case SBX_OP_READ_FILE: return "read_file";
    case SBX_OP_READ_FILE_TO_FD: return "read_file";
    case SBX_OP_WRITE_FILE: return "write_file";
    case SBX_OP_WRITE_FILE_FROM_FD: return "write_file";
    case SBX_OP_UPLOAD_FILE: return "upload_file";
    case SBX_OP_DOWNLOAD_FILE: return "download_file";
    case SBX_OP_UPLOAD_DIR: return "upload_dir";
    case SBX_OP_DOWNLOAD_DIR: return "download_dir";
    case SBX_OP_SESSION_STATE: return "session_state";
    case SBX_OP_EXTRACT_TAR: return "extract_tar";
    case SBX_OP_SNAPSHOT: return "snapshot";
    case SBX_OP_DESTROY_BY_ID: return "destroy_by_id";
    case SBX_OP_RUN_AGENT: return "run_agent";
    case SBX_OP_APPLY_PATCH: return "apply_patch";
    case SBX_OP_PERSIST_WORKSPACE: return "persist_workspace";
    case SBX_OP_HYDRATE_WORKSPACE: return "hydrate_workspace";
    case SBX_OP_RESOLVE_PORT: return "resolve_port";
    }
    return "async";
}

/* Frees the argument copies (handles and descriptors are borrowed). */
static void
op_clear_args(sbx_op *op)
{
    free(op->s1);
    free(op->s2);
    free(op->s3);
    op->s1 = op->s2 = op->s3 = NULL;
    sbx_options_free(op->options);
    op->options = NULL;
    sbx_strv_clear(&op->argv);
    sbx_strv_clear(&op->env);
    free(op->shell);
    free(op->cwd);
    free(op->user);
    op->user = NULL;
    free(op->stdin_copy);
    free(op->bytes);
    op->shell = op->cwd = NULL;
    op->stdin_copy = op->bytes = NULL;
    op->has_request = 0;
}

/*
 * Releases what the call made and nobody took, in the calling thread: a
 * sandbox is destroyed and freed (blocking). Keeps the error.
 */
static void
op_drop_outputs(sbx_op *op)
{
    if (op->made) {
        sbx_error *err = NULL;

        if (sbx_sandbox_destroy(op->made, &err) < 0)
            sbx_log(SBX_LOG_WARNING, sbx_sandbox_get0_backend(op->made),
                    "destroying sandbox %s that no callback took failed: %s",
                    sbx_sandbox_get0_id(op->made), sbx_error_get0_message(err));
        sbx_error_free(err);
        sbx_sandbox_free(op->made);
        op->made = NULL;
    }
    sbx_client_free(op->made_client);
    op->made_client = NULL;
    sbx_result_free(op->result);
    op->result = NULL;
    free(op->data);
    op->data = NULL;
    op->data_len = 0;
    sbx_file_info_list_free(op->list, op->list_count);
    op->list = NULL;
    op->list_count = 0;
    sbx_agent_run_free(op->agent_run);
    op->agent_run = NULL;
}

/* Frees @op entirely (outputs released in this thread). */
static void
op_free(sbx_op *op)
{
    op_drop_outputs(op);
    op_clear_args(op);
    sbx_error_free(op->error);
    free(op);
}

/* The backend @op concerns, for its errors; NULL when not known. */
static const char *
op_backend(const sbx_op *op)
{
    if (op->sandbox)
        return sbx_sandbox_get0_backend(op->sandbox);
    if (op->client)
        return sbx_client_get0_backend(op->client);
    if ((op->kind == SBX_OP_CREATE || op->kind == SBX_OP_CLIENT_NEW) && op->s1 &&
        sbx_backend_name_valid(op->s1))
        return op->s1;
    return NULL;
}

/*
 * A cancelled error for @op: "NAME cancelled before it started" (outcome
 * failed) or "... while it ran" (outcome unknown). @cause (may be NULL) is
 * the error the call itself returned, kept as context. NULL on OOM.
 */
static sbx_error *
cancel_error(const sbx_op *op, int started, const sbx_error *cause)
{
    sbx_sandbox *sb = op->sandbox;
    sbx_error *e;

    if (sb && sbx_sandbox_get0_id(sb)[0])
        e = sbx_error_new(SBX_ERROR_CANCELLED, op->name, "%s cancelled %s (sandbox %s)",
                          op->name, started ? "while it ran" : "before it started",
                          sbx_sandbox_get0_id(sb));
    else
        e = sbx_error_new(SBX_ERROR_CANCELLED, op->name, "%s cancelled %s", op->name,
                          started ? "while it ran" : "before it started");
    if (!e)
        return NULL;
    sbx_error_fill(e, op_backend(op), op->name);
    if (sb && sbx_sandbox_get0_id(sb)[0])
        sbx_error_add_context(e, "sandbox_id", sbx_sandbox_get0_id(sb));
    if (cause) {
        sbx_error_add_context(e, "cause", sbx_error_code_name(sbx_error_get_code(cause)));
        sbx_error_add_context(e, "cause_message", sbx_error_get0_message(cause));
    }
    sbx_error_set_outcome(e, started ? SBX_ERROR_OUTCOME_UNKNOWN : SBX_ERROR_OUTCOME_FAILED);
    return e;
}

/* Makes @op's outcome "cancelled while it ran": whatever the call made is
 * released (in this thread), and its own error kept as the cause unless it
 * is a cancelled error already (the exec engine's). */
static void
op_finish_cancelled(sbx_op *op)
{
    op_drop_outputs(op);
    if (op->error && sbx_error_get_code(op->error) == SBX_ERROR_CANCELLED) {
        sbx_error_fill(op->error, op_backend(op), op->name);
    } else {
        sbx_error *e = cancel_error(op, 1, op->error);

        /* The call returned success before its cancellation took effect:
         * it happened (a destroy ended its sandbox). */
        if (e && !op->error)
            sbx_error_add_context(e, "completed", "true");
        if (e) {
            sbx_error_free(op->error);
            op->error = e;
        }
    }
    op->failed = 1;
    op->value = -1;
}

/* ---------------------------------------------------------------- running */

/* Runs @op's synchronous call in this thread and stores the outcome. */
static void
op_run(sbx_op *op)
{
    sbx_error *err = NULL;
    int64_t v = 0;
    int rc = 0;

    if (op->internal) {
        /* A sandbox nobody took: destroy it and free the handle. */
        op->made = op->sandbox;
        op->sandbox = NULL;
        op_drop_outputs(op);
        return;
    }
    switch (op->kind) {
    case SBX_OP_CLIENT_NEW:
        op->made_client = sbx_client_new_with_mode(op->s1, op->plugin_mode, &err);
        rc = op->made_client ? 0 : -1;
        break;
    case SBX_OP_CLIENT_PROBE: {
        uint64_t caps = 0;

        rc = sbx_client_probe(op->client, &caps, &err);
        v = (int64_t)caps;
        break;
    }
    case SBX_OP_SANDBOX_CREATE:
        op->made = sbx_sandbox_create(op->client, op->options, &err);
        rc = op->made ? 0 : -1;
        break;
    case SBX_OP_CREATE:
        op->made = sbx_create(op->s1, op->options, &err);
        rc = op->made ? 0 : -1;
        break;
    case SBX_OP_SANDBOX_RESUME:
        op->made = sbx_sandbox_resume(op->client, op->s1, &err);
        rc = op->made ? 0 : -1;
        break;
    case SBX_OP_RESUME:
        op->made = sbx_resume(op->s1, &err);
        rc = op->made ? 0 : -1;
        break;
    case SBX_OP_DESTROY:
        rc = sbx_sandbox_destroy(op->sandbox, &err);
        break;
    case SBX_OP_IS_ALIVE:
        rc = sbx_sandbox_is_alive(op->sandbox, &err);
        v = rc > 0;
        break;
    case SBX_OP_EXECUTE_COMMAND:
        op->result = sbx_sandbox_execute_command(op->sandbox, &op->rq, &err);
        rc = op->result ? 0 : -1;
        break;
    case SBX_OP_EXECUTE_SHELL:
        op->result = sbx_sandbox_execute_shell(op->sandbox, op->s1, &err);
        rc = op->result ? 0 : -1;
        break;
    case SBX_OP_EXECUTE_CODE:
        op->result = sbx_sandbox_execute_code(op->sandbox, op->s1, op->s2,
                                              op->has_request ? &op->rq : NULL, &err);
        rc = op->result ? 0 : -1;
        break;
    case SBX_OP_LIST_FILES:
        rc = sbx_sandbox_list_files_as(op->sandbox, op->s1, op->s2, &op->list, &op->list_count,
                                       &err);
        break;
    case SBX_OP_READ_FILE:
        rc = sbx_sandbox_read_file_as(op->sandbox, op->s1, op->s2, &op->data, &op->data_len,
                                      &err);
        break;
    case SBX_OP_READ_FILE_TO_FD:
        rc = sbx_sandbox_read_file_to_fd(op->sandbox, op->s1, op->fd, &err);
        break;
    case SBX_OP_WRITE_FILE:
        rc = sbx_sandbox_write_file_as(op->sandbox, op->s1, op->s2, op->bytes, op->nbytes, &err);
        break;
    case SBX_OP_WRITE_FILE_FROM_FD:
        rc = sbx_sandbox_write_file_from_fd(op->sandbox, op->s1, op->fd, op->mode, &err);
        break;
    case SBX_OP_UPLOAD_FILE:
        rc = sbx_sandbox_upload_file(op->sandbox, op->s1, op->s2, &err);
        break;
    case SBX_OP_DOWNLOAD_FILE:
        rc = sbx_sandbox_download_file(op->sandbox, op->s1, op->s2, &err);
        break;
    case SBX_OP_UPLOAD_DIR:
        v = sbx_sandbox_upload_dir(op->sandbox, op->s1, op->s2, &err);
        rc = v < 0 ? -1 : 0;
        break;
    case SBX_OP_DOWNLOAD_DIR:
        v = sbx_sandbox_download_dir(op->sandbox, op->s1, op->s2, &err);
        rc = v < 0 ? -1 : 0;
        break;
    case SBX_OP_SESSION_STATE:
        op->data = sbx_sandbox_session_state(op->sandbox, &err);
        op->data_len = op->data ? strlen(op->data) : 0;
        rc = op->data ? 0 : -1;
        break;
    case SBX_OP_EXTRACT_TAR:
        v = sbx_extract_tar_fd(op->fd, op->s1, &err);
        rc = v < 0 ? -1 : 0;
        break;
    case SBX_OP_SNAPSHOT:
        op->data = sbx_sandbox_snapshot(op->sandbox, &err);
        op->data_len = op->data ? strlen(op->data) : 0;
        rc = op->data ? 0 : -1;
        break;
    case SBX_OP_DESTROY_BY_ID:
        rc = sbx_client_destroy_by_id(op->client, op->s1, &err);
        break;
    case SBX_OP_RUN_AGENT:
        op->agent_run = sbx_sandbox_run_agent(op->sandbox, &op->agent, &err);
        rc = op->agent_run ? 0 : -1;
        break;
    case SBX_OP_APPLY_PATCH:
        v = sbx_sandbox_apply_patch(op->sandbox, op->bytes, op->nbytes, op->strip, op->s1, &err);
        rc = v < 0 ? -1 : 0;
        break;
    case SBX_OP_PERSIST_WORKSPACE:
        v = sbx_sandbox_persist_workspace(op->sandbox, op->s1, op->mode, op->fd, &err);
        rc = v < 0 ? -1 : 0;
        break;
    case SBX_OP_HYDRATE_WORKSPACE:
        v = sbx_sandbox_hydrate_workspace(op->sandbox, op->s1, op->mode, op->fd, &err);
        rc = v < 0 ? -1 : 0;
        break;
    case SBX_OP_RESOLVE_PORT:
        op->data = sbx_sandbox_resolve_port(op->sandbox, op->mode, &err);
        op->data_len = op->data ? strlen(op->data) : 0;
        v = op->mode;
        rc = op->data ? 0 : -1;
        break;
    }
    if (rc < 0) {
        op->failed = 1;
        op->value = -1;
        if (!err)
            err = sbx_error_new(sbx_error_code_for_op(op->name), op->name, "%s failed without a reason",
                                op->name);
        op->error = err;
    } else {
        op->value = v;
        sbx_error_free(err);
    }
}

/* Resets a worker's cancel eventfd to "not readable". */
static void
drain_eventfd(int fd)
{
    uint64_t n;
    ssize_t r;

    do
        r = read(fd, &n, sizeof(n));
    while (r < 0 && errno == EINTR);
}

/* Makes the pool's descriptor readable. Under the lock. */
static void
signal_eventfd(int fd)
{
    uint64_t one = 1;
    ssize_t r;

    do
        r = write(fd, &one, sizeof(one));
    while (r < 0 && errno == EINTR);
    /* EAGAIN only at a counter near 2^64: it is readable then anyway. */
}

/* Moves @op to the done list and wakes the dispatcher. Under the lock. */
static void
post_done(sbx_async *a, sbx_op *op)
{
    op->state = OP_DONE;
    list_append(&a->done, op);
    signal_eventfd(a->efd);
}

/* The first pending operation that may start now, or NULL. Under the lock. */
static sbx_op *
pick(sbx_async *a)
{
    for (sbx_op *op = a->pending.head; op; op = op->next) {
        if (a->stopping && !op->internal)
            continue;
        if (op->internal || !op->key || a->max_per_client == 0 ||
            op->key->running < a->max_per_client)
            return op;
    }
    return NULL;
}

static void *
worker_main(void *arg)
{
    async_worker *w = arg;
    sbx_async *a = w->async;

    pthread_mutex_lock(&a->lock);
    for (;;) {
        sbx_op *op = pick(a);

        if (!op) {
            if (a->stopping)
                break;
            pthread_cond_wait(&a->work_cv, &a->lock);
            continue;
        }
        list_remove(&a->pending, op);
        op->state = OP_RUNNING;
        op->cancel_fd = w->cancel_fd;
        if (op->key)
            op->key->running++;
        a->busy++;
        pthread_mutex_unlock(&a->lock);

        sbx_call_scope_set(w->cancel_fd, 0);
        op_run(op);
        sbx_call_scope_set(-1, 0);

        pthread_mutex_lock(&a->lock);
        a->busy--;
        if (op->key) {
            op->key->running--;
            key_release(a, op);
        }
        if (op->internal) {
            pthread_mutex_unlock(&a->lock);
            op_free(op);
            pthread_mutex_lock(&a->lock);
            continue;
        }
        if (op->cancelled) {
            /* Cancelled while it ran: release what it made here, on the
             * worker, before anyone sees the completion. */
            op->state = OP_FINISHING;
            pthread_mutex_unlock(&a->lock);
            op_finish_cancelled(op);
            pthread_mutex_lock(&a->lock);
        }
        op->cancel_fd = -1;
        drain_eventfd(w->cancel_fd);
        post_done(a, op);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/*
 * Starts one more worker. Signals are blocked in it (except those a fault
 * raises), so process signals reach the application's threads. Returns 0
 * or -1. Under the lock.
 */
static int
spawn_worker(sbx_async *a)
{
    async_worker *w = &a->workers[a->nthreads];
    sigset_t all, old;
    int rc;

    w->async = a;
    w->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->cancel_fd < 0)
        return -1;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGABRT);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        sbx_close_fd(&w->cancel_fd);
        errno = rc;
        return -1;
    }
    a->nthreads++;
    return 0;
}

/*
 * Queues @op (pending) and makes sure a worker will see it: starts one
 * when fewer idle workers than pending operations exist. Returns 0, or -1
 * (errno set) when no worker exists and none could start; @op is then not
 * queued. Under the lock.
 */
static int
enqueue(sbx_async *a, sbx_op *op)
{
    op->state = OP_PENDING;
    list_append(&a->pending, op);
    if (a->nthreads < a->max_workers && a->nthreads - a->busy < a->pending.count &&
        spawn_worker(a) < 0 && a->nthreads == 0) {
        int e = errno;

        list_remove(&a->pending, op);
        errno = e;
        return -1;
    }
    pthread_cond_signal(&a->work_cv);
    return 0;
}

/* ---------------------------------------------------------------- pool */

SBX_EXPORT sbx_async *
sbx_async_new(unsigned max_workers, sbx_error **error)
{
    static const char op[] = "async_new";
    sbx_async *a;

    if (max_workers > SBX_ASYNC_MAX_WORKERS) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "invalid max_workers %u: at most %u", max_workers,
                                     (unsigned)SBX_ASYNC_MAX_WORKERS);
        sbx_error_add_contextf(e, "max_workers", "%u", max_workers);
        return NULL;
    }
    if (max_workers == 0)
        max_workers = SBX_ASYNC_DEFAULT_WORKERS;
    a = calloc(1, sizeof(*a));
    if (!a || !(a->workers = calloc(max_workers, sizeof(*a->workers)))) {
        free(a);
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    a->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->efd < 0) {
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot create an eventfd: %s",
                      strerror(errno));
        free(a->workers);
        free(a);
        return NULL;
    }
    a->max_workers = max_workers;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->work_cv, NULL);
    return a;
}

static void async_free_now(sbx_async *a);

SBX_EXPORT void
sbx_async_free(sbx_async *async)
{
    sbx_async *a = async;

    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    if (a->dispatch_depth > 0 && pthread_equal(a->dispatcher, pthread_self())) {
        /* From a callback: the dispatch running it still holds the pool.
         * Nothing more is queued or dispatched from now on; the pool goes
         * when that dispatch returns. */
        a->stopping = 1;
        a->free_deferred = 1;
        pthread_cond_broadcast(&a->work_cv);
        pthread_mutex_unlock(&a->lock);
        return;
    }
    pthread_mutex_unlock(&a->lock);
    async_free_now(a);
}

static void
async_free_now(sbx_async *a)
{
    op_list dropped = { 0 }, done;
    sbx_op *op, *next;

    pthread_mutex_lock(&a->lock);
    a->stopping = 1;
    /* Not started: cancelled, no callback. Internal ones still run. */
    for (op = a->pending.head; op; op = next) {
        next = op->next;
        if (op->internal)
            continue;
        list_remove(&a->pending, op);
        key_release(a, op);
        list_append(&dropped, op);
    }
    pthread_cond_broadcast(&a->work_cv);
    pthread_mutex_unlock(&a->lock);

    /* Workers finish what runs and the internal operations, then exit;
     * nothing starts new workers once stopping is set. */
    for (unsigned i = 0; i < a->nthreads; i++)
        pthread_join(a->workers[i].thread, NULL);

    for (op = dropped.head; op; op = next) {
        next = op->next;
        op_free(op);
    }
    done = a->done;
    for (op = done.head; op; op = next) {
        next = op->next;
        op_free(op);            /* destroys a sandbox nobody took */
    }
    for (unsigned i = 0; i < a->nthreads; i++)
        sbx_close_fd(&a->workers[i].cancel_fd);
    sbx_close_fd(&a->efd);
    while (a->keys) {           /* none left in practice */
        async_key *k = a->keys;

        a->keys = k->next;
        free(k->name);
        free(k);
    }
    pthread_cond_destroy(&a->work_cv);
    pthread_mutex_destroy(&a->lock);
    free(a->workers);
    free(a);
}

SBX_EXPORT int
sbx_async_get_fd(const sbx_async *async)
{
    return async ? async->efd : -1;
}

SBX_EXPORT size_t
sbx_async_pending(const sbx_async *async)
{
    sbx_async *a = (sbx_async *)async;
    size_t n;

    if (!a)
        return 0;
    pthread_mutex_lock(&a->lock);
    n = a->outstanding;
    pthread_mutex_unlock(&a->lock);
    return n;
}

SBX_EXPORT int
sbx_async_set_max_per_client(sbx_async *async, unsigned n, sbx_error **error)
{
    if (!async) {
        sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, "set_max_per_client",
                      "async is NULL");
        return -1;
    }
    pthread_mutex_lock(&async->lock);
    async->max_per_client = n;
    pthread_cond_broadcast(&async->work_cv);   /* a raised bound frees waiting ops */
    pthread_mutex_unlock(&async->lock);
    return 0;
}

/*
 * After @op's callback: releases what it did not steal. A sandbox goes to
 * a worker as an internal operation (destroy + free) so this thread does
 * not block on it; when no worker can take it, it is destroyed here.
 */
static void
op_after_callback(sbx_async *a, sbx_op *op)
{
    if (op->made) {
        sbx_sandbox *sb = op->made;

        op->made = NULL;
        op_drop_outputs(op);
        op_clear_args(op);
        sbx_error_free(op->error);
        op->error = NULL;
        op->internal = 1;
        op->done = NULL;
        op->client = NULL;
        op->sandbox = sb;
        op->key = NULL;
        pthread_mutex_lock(&a->lock);
        if (!a->stopping && enqueue(a, op) == 0) {
            pthread_mutex_unlock(&a->lock);
            return;
        }
        pthread_mutex_unlock(&a->lock);
        op->made = sb;
        op->sandbox = NULL;
    }
    op_free(op);
}

SBX_EXPORT int
sbx_async_dispatch(sbx_async *async)
{
    sbx_async *a = async;
    op_list batch;
    int n = 0, free_now;

    if (!a)
        return -1;
    pthread_mutex_lock(&a->lock);
    if (a->free_deferred) {
        /* A callback freed the pool: no more callbacks. */
        pthread_mutex_unlock(&a->lock);
        return 0;
    }
    batch = a->done;
    a->done = (op_list){ 0 };
    drain_eventfd(a->efd);
    a->outstanding -= batch.count;
    for (sbx_op *op = batch.head; op; op = op->next)
        op->state = OP_DISPATCHED;
    a->dispatch_depth++;
    a->dispatcher = pthread_self();
    pthread_mutex_unlock(&a->lock);

    for (sbx_op *op = batch.head, *next; op; op = next) {
        next = op->next;
        op->prev = op->next = NULL;
        /* After a callback freed the pool, the rest of the batch is
         * dropped as sbx_async_free() drops undispatched completions. */
        if (a->free_deferred) {
            op_after_callback(a, op);
            continue;
        }
        if (op->done)
            op->done(op, op->user_data);
        op_after_callback(a, op);
        n++;
    }
    pthread_mutex_lock(&a->lock);
    free_now = --a->dispatch_depth == 0 && a->free_deferred;
    pthread_mutex_unlock(&a->lock);
    if (free_now)
        async_free_now(a);      /* @a is gone: only @n is returned */
    return n;
}

SBX_EXPORT int
sbx_async_wait(sbx_async *async, double timeout_secs)
{
    double end;
    int n;

    if (!async || isnan(timeout_secs))
        return -1;
    end = timeout_secs < 0 ? INFINITY : sbx_monotonic_now() + timeout_secs;
    for (;;) {
        struct pollfd p = { .fd = async->efd, .events = POLLIN };
        double left;
        int ms;

        /* A callback may have freed the pool: a dispatch that ran one
         * returns at once, and @async is not touched again. A dispatch
         * that frees the pool has run at least the callback that freed
         * it, so it never returns 0: after a 0, @async is still
         * allocated. free_deferred set and the pool still there means
         * this wait runs inside a callback that freed it (the outermost
         * dispatch frees it when that callback returns); it is written
         * only by this thread's callbacks, so it is read here unlocked. */
        if ((n = sbx_async_dispatch(async)) != 0)
            return n;
        if (async->free_deferred || sbx_async_pending(async) == 0)
            return 0;
        left = end - sbx_monotonic_now();
        if (left <= 0)
            return 0;
        ms = isinf(left) ? -1 : left * 1000.0 >= INT32_MAX ? INT32_MAX : (int)ceil(left * 1000.0);
        if (poll(&p, 1, ms) < 0 && errno != EINTR)
            return 0;
    }
}

/* ---------------------------------------------------------------- ops API */

SBX_EXPORT int
sbx_op_cancel(sbx_op *op)
{
    sbx_async *a;
    int rc = 1;

    if (!op)
        return -1;
    a = op->async;
    pthread_mutex_lock(&a->lock);
    switch (op->state) {
    case OP_PENDING: {
        sbx_error *e = cancel_error(op, 0, NULL);

        list_remove(&a->pending, op);
        key_release(a, op);
        op->cancelled = 1;
        op->failed = 1;
        op->value = -1;
        op->error = e;
        post_done(a, op);
        break;
    }
    case OP_RUNNING:
        if (!op->cancelled) {
            op->cancelled = 1;
            signal_eventfd(op->cancel_fd);
        }
        break;
    case OP_FINISHING:
        break;
    case OP_DONE:
    case OP_DISPATCHED:
        rc = op->cancelled ? 1 : 0;
        break;
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

SBX_EXPORT sbx_op_kind
sbx_op_get_kind(const sbx_op *op)
{
    return op ? op->kind : (sbx_op_kind)0;
}

SBX_EXPORT const sbx_error *
sbx_op_get_error(const sbx_op *op)
{
    return op ? op->error : NULL;
}

SBX_EXPORT sbx_error *
sbx_op_steal_error(sbx_op *op)
{
    sbx_error *e;

    if (!op)
        return NULL;
    e = op->error;
    op->error = NULL;
    return e;
}

SBX_EXPORT sbx_sandbox *
sbx_op_get0_sandbox(const sbx_op *op)
{
    if (!op)
        return NULL;
    switch (op->kind) {
    case SBX_OP_SANDBOX_CREATE:
    case SBX_OP_CREATE:
    case SBX_OP_SANDBOX_RESUME:
    case SBX_OP_RESUME:
        return op->made;
    default:
        return op->sandbox;
    }
}

SBX_EXPORT sbx_sandbox *
sbx_op_steal_sandbox(sbx_op *op)
{
    sbx_sandbox *sb;

    if (!op)
        return NULL;
    sb = op->made;
    op->made = NULL;
    return sb;
}

SBX_EXPORT sbx_client *
sbx_op_steal_client(sbx_op *op)
{
    sbx_client *c;

    if (!op)
        return NULL;
    c = op->made_client;
    op->made_client = NULL;
    return c;
}

SBX_EXPORT const sbx_agent_run *
sbx_op_get0_agent_run(const sbx_op *op)
{
    return op ? op->agent_run : NULL;
}

SBX_EXPORT sbx_agent_run *
sbx_op_steal_agent_run(sbx_op *op)
{
    sbx_agent_run *r;

    if (!op)
        return NULL;
    r = op->agent_run;
    op->agent_run = NULL;
    return r;
}

SBX_EXPORT const sbx_result *
sbx_op_get0_result(const sbx_op *op)
{
    return op ? op->result : NULL;
}

SBX_EXPORT sbx_result *
sbx_op_steal_result(sbx_op *op)
{
    sbx_result *r;

    if (!op)
        return NULL;
    r = op->result;
    op->result = NULL;
    return r;
}

SBX_EXPORT char *
sbx_op_steal_data(sbx_op *op, size_t *len)
{
    char *d;

    if (len)
        *len = 0;
    if (!op || !op->data)
        return NULL;
    d = op->data;
    if (len)
        *len = op->data_len;
    op->data = NULL;
    op->data_len = 0;
    return d;
}

SBX_EXPORT sbx_file_info **
sbx_op_steal_file_list(sbx_op *op, size_t *count)
{
    sbx_file_info **l;

    if (count)
        *count = 0;
    if (!op || !op->list)
        return NULL;
    l = op->list;
    if (count)
        *count = op->list_count;
    op->list = NULL;
    op->list_count = 0;
    return l;
}

SBX_EXPORT int64_t
sbx_op_get_int64(const sbx_op *op)
{
    if (!op || op->failed)
        return -1;
    return op->value;
}

/* ---------------------------------------------------------------- submission */

/* The submission error: invalid_argument "@what is NULL" for @name. */
static sbx_op *
null_arg(sbx_error **error, const char *name, const char *what, const char *backend)
{
    sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, name, "%s is NULL", what);

    sbx_error_fill(e, backend, name);
    return NULL;
}

/* A new operation of @kind on @async (checked by the caller), or NULL with
 * *@error set when memory runs out. */
static sbx_op *
op_new(sbx_async *async, sbx_op_kind kind, sbx_op_done_fn done, void *user_data,
       sbx_error **error)
{
    sbx_op *op = calloc(1, sizeof(*op));

    if (!op) {
        sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, kind_op_name(kind), "out of memory");
        return NULL;
    }
    op->async = async;
    op->kind = kind;
    op->name = kind_op_name(kind);
    op->done = done;
    op->user_data = user_data;
    op->cancel_fd = -1;
    op->fd = -1;
    return op;
}

/* Copies @s into *@dst (NULL stays NULL). Returns 0 or -1 (OOM). */
static int
copy_str(char **dst, const char *s)
{
    *dst = NULL;
    if (!s)
        return 0;
    *dst = strdup(s);
    return *dst ? 0 : -1;
}

/* Copies a NULL-terminated vector into @v; *@view receives the copy's
 * view, or NULL when @in is NULL. Returns 0 or -1 (OOM). */
static int
copy_vec(const char *const *in, sbx_strv *v, const char *const **view)
{
    *view = NULL;
    if (!in)
        return 0;
    for (size_t i = 0; in[i]; i++)
        if (sbx_strv_push(v, in[i]) < 0)
            return -1;
    *view = sbx_strv_view(v);
    return 0;
}

/*
 * Copies @in (read within its struct_size, as the exec engine does) with
 * every buffer it points to into @op->rq. Returns 0, or -1 with *@err set
 * (invalid_argument for a struct_size too small; OOM).
 */
static int
copy_request(sbx_op *op, const sbx_exec_request *in, sbx_error **err)
{
    size_t min = offsetof(sbx_exec_request, flags), n;

    if (in->struct_size < min) {
        sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, op->name,
                      "request struct_size is %zu, needs at least %zu "
                      "(initialise it with SBX_EXEC_REQUEST_INIT)", in->struct_size, min);
        return -1;
    }
    if (in->struct_size >= sizeof(op->rq))
        n = sizeof(op->rq);
    else if (in->struct_size >= offsetof(sbx_exec_request, tty_cols) + sizeof(in->tty_cols))
        n = offsetof(sbx_exec_request, tty_cols) + sizeof(in->tty_cols);
    else if (in->struct_size >= min + sizeof(in->flags))
        n = min + sizeof(in->flags);
    else
        n = min;
    memset(&op->rq, 0, sizeof(op->rq));
    memcpy(&op->rq, in, n);
    op->rq.struct_size = sizeof(op->rq);
    op->has_request = 1;
    if (copy_vec(in->argv, &op->argv, &op->rq.argv) < 0 ||
        copy_vec(in->env, &op->env, &op->rq.env) < 0 ||
        copy_str(&op->shell, in->shell) < 0 || copy_str(&op->cwd, in->cwd) < 0 ||
        copy_str(&op->user, op->rq.user) < 0)
        goto oom;
    op->rq.shell = op->shell;
    op->rq.cwd = op->cwd;
    op->rq.user = op->user;
    if (in->stdin_data) {
        op->stdin_copy = malloc(in->stdin_len ? in->stdin_len : 1);
        if (!op->stdin_copy)
            goto oom;
        if (in->stdin_len)
            memcpy(op->stdin_copy, in->stdin_data, in->stdin_len);
    }
    op->rq.stdin_data = op->stdin_copy;
    return 0;
oom:
    sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, op->name, "out of memory copying the request");
    return -1;
}

/*
 * A copy of @in through the public setters (the option values were
 * validated when set, so the setters accept them again); the workspace
 * manifest is shared by reference. Checks that every set field was
 * carried. Returns 0 with *@out (NULL for NULL @in), or -1 with *@err set.
 */
static int
copy_options(const sbx_options *in, sbx_options **out, sbx_error **err)
{
    sbx_options *o;
    sbx_error *e = NULL;
    sbx_strv env = { 0 };
    int ok = 1;

    *out = NULL;
    if (!in)
        return 0;
    o = sbx_options_new();
    if (!o || sbx_options_env_strv(in, &env) < 0) {
        sbx_options_free(o);
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "create", "out of memory copying the options");
        return -1;
    }
    for (size_t i = 0; ok && i < env.count; i++) {
        char *eq = strchr(env.items[i], '=');

        *eq = '\0';
        ok = sbx_options_set_env(o, env.items[i], eq + 1, &e) == 0;
    }
    sbx_strv_clear(&env);
#define COPY_IF(field, call)                                                  \
    if (ok && sbx_options_is_set(in, field))                                  \
        ok = (call) == 0;
    COPY_IF(SBX_OPTION_WORKDIR, sbx_options_set_workdir(o, sbx_options_get0_workdir(in), &e))
    COPY_IF(SBX_OPTION_TIMEOUT_SECS,
            sbx_options_set_timeout_secs(o, sbx_options_get_timeout_secs(in), &e))
    COPY_IF(SBX_OPTION_CPU, sbx_options_set_cpu(o, sbx_options_get_cpu(in), &e))
    COPY_IF(SBX_OPTION_MEMORY_MB,
            sbx_options_set_memory_mb(o, sbx_options_get_memory_mb(in), &e))
    COPY_IF(SBX_OPTION_GIT_REPO,
            sbx_options_set_git_repo(o, sbx_options_get0_git_repo(in),
                                     sbx_options_get0_git_ref(in), &e))
    COPY_IF(SBX_OPTION_IMAGE, sbx_options_set_image(o, sbx_options_get0_image(in), &e))
    COPY_IF(SBX_OPTION_TEMPLATE,
            sbx_options_set_template(o, sbx_options_get0_template(in), &e))
    COPY_IF(SBX_OPTION_SNAPSHOT_ID,
            sbx_options_set_snapshot_id(o, sbx_options_get0_snapshot_id(in), &e))
    COPY_IF(SBX_OPTION_APP_NAME,
            sbx_options_set_app_name(o, sbx_options_get0_app_name(in), &e))
    COPY_IF(SBX_OPTION_GPU, sbx_options_set_gpu(o, sbx_options_get0_gpu(in), &e))
    COPY_IF(SBX_OPTION_DISK_MB, sbx_options_set_disk_mb(o, sbx_options_get_disk_mb(in), &e))
    COPY_IF(SBX_OPTION_ALLOW_INTERNET,
            sbx_options_set_allow_internet(o, sbx_options_get_allow_internet(in), &e))
    COPY_IF(SBX_OPTION_BACKEND_OPTIONS,
            sbx_options_set_backend_options(o, sbx_options_get0_backend_options(in), &e))
    COPY_IF(SBX_OPTION_PRESET, sbx_options_set_preset(o, sbx_options_get0_preset(in), &e))
    COPY_IF(SBX_OPTION_WORKSPACE,
            sbx_options_set_workspace(o, sbx_options_get0_workspace(in), &e))
    COPY_IF(SBX_OPTION_DETACHED, sbx_options_set_detached(o, sbx_options_get_detached(in), &e))
    COPY_IF(SBX_OPTION_USER, sbx_options_set_user(o, sbx_options_get0_user(in), &e))
#undef COPY_IF
    if (ok) {
        void *progress_data;
        sbx_progress_fn progress = sbx_options_get_progress(in, &progress_data);
        ok = sbx_options_set_progress(o, progress, progress_data, &e) == 0;
    }
    if (ok) {
        const uint16_t *ports;
        size_t nports = sbx_options_get_ports(in, &ports);

        for (size_t i = 0; ok && i < nports; i++)
            ok = sbx_options_add_port(o, ports[i], &e) == 0;
    }
    for (size_t i = 0; ok && i < sbx_options_get_file_count(in); i++) {
        const char *path, *data;
        size_t len;

        sbx_options_get0_file(in, i, &path, &data, &len);
        ok = sbx_options_add_file(o, path, data, len, &e) == 0;
    }
    if (ok && sbx_options_set_fields(o) != sbx_options_set_fields(in)) {
        e = sbx_error_new(SBX_ERROR_CREATION_FAILED, "create",
                          "cannot copy the options: fields 0x%llx set, 0x%llx copied",
                          (unsigned long long)sbx_options_set_fields(in),
                          (unsigned long long)sbx_options_set_fields(o));
        ok = 0;
    }
    if (!ok) {
        sbx_options_free(o);
        if (!e)
            e = sbx_error_new(SBX_ERROR_RESOURCE_EXHAUSTED, "create", "cannot copy the options");
        sbx_error_fill(e, NULL, "create");
        sbx_error_propagate(err, e);
        return -1;
    }
    *out = o;
    return 0;
}

/* The key of operations on @sandbox: its client, or the backend name for
 * a sandbox on the process-wide client (made by sbx_create / sbx_resume). */
static void
sandbox_key(sbx_sandbox *sandbox, const void **ptr, const char **name)
{
    if (sandbox->owns_client) {
        *ptr = NULL;
        *name = sbx_sandbox_get0_backend(sandbox);
    } else {
        *ptr = sandbox->client;
        *name = NULL;
    }
}

/* The backend named by a session state document, for sbx_resume_async's
 * key; NULL when it cannot be read (the resume itself reports that). New
 * string. */
static char *
state_backend(const char *state_json)
{
    json_object *doc = json_tokener_parse(state_json), *b;
    char *name = NULL;

    if (doc && json_object_object_get_ex(doc, "backend", &b) &&
        json_object_is_type(b, json_type_string) &&
        sbx_backend_name_valid(json_object_get_string(b)))
        name = strdup(json_object_get_string(b));
    json_object_put(doc);
    return name;
}

/*
 * Queues @op (arguments copied; @key_ptr / @key_name its key, both NULL
 * for none). On failure frees @op and returns NULL with *@error set.
 */
static sbx_op *
submit(sbx_op *op, const void *key_ptr, const char *key_name, sbx_error **error)
{
    sbx_async *a = op->async;
    sbx_error_code code;
    sbx_error *e;
    const char *why;

    pthread_mutex_lock(&a->lock);
    if (a->stopping) {
        why = "the pool is being freed";
        goto refuse;
    }
    if (key_ptr || key_name) {
        op->key = key_get(a, key_ptr, key_name);
        if (!op->key) {
            why = "out of memory";
            goto refuse;
        }
    }
    if (enqueue(a, op) < 0) {
        key_release(a, op);
        why = "cannot start a worker thread";
        goto refuse;
    }
    a->outstanding++;
    pthread_mutex_unlock(&a->lock);
    return op;

refuse:
    code = a->stopping ? SBX_ERROR_INVALID_ARGUMENT : SBX_ERROR_RESOURCE_EXHAUSTED;
    pthread_mutex_unlock(&a->lock);
    e = sbx_set_error(error, code, op->name, "cannot queue %s: %s", op->name, why);
    sbx_error_fill(e, op_backend(op), op->name);
    op_free(op);
    return NULL;
}

/* Submits @op after an argument copy failed (OOM): frees it, sets *@error. */
static sbx_op *
copy_failed(sbx_op *op, sbx_error **error)
{
    sbx_set_error(error, SBX_ERROR_RESOURCE_EXHAUSTED, op->name, "out of memory copying the arguments");
    op_free(op);
    return NULL;
}

/* Common start of the sandbox operations: checks @async and @sandbox. */
static sbx_op *
sandbox_op(sbx_async *async, sbx_sandbox *sandbox, sbx_op_kind kind, sbx_op_done_fn done,
           void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, kind_op_name(kind), "async",
                        sandbox ? sbx_sandbox_get0_backend(sandbox) : NULL);
    if (!sandbox)
        return null_arg(error, kind_op_name(kind), "sandbox", NULL);
    op = op_new(async, kind, done, user_data, error);
    if (op)
        op->sandbox = sandbox;
    return op;
}

/* Queues a sandbox operation under its sandbox's key. */
static sbx_op *
submit_sandbox_op(sbx_op *op, sbx_error **error)
{
    const void *ptr;
    const char *name;

    sandbox_key(op->sandbox, &ptr, &name);
    return submit(op, ptr, name, error);
}

SBX_EXPORT sbx_op *
sbx_client_new_with_mode_async(sbx_async *async, const char *backend, sbx_plugin_mode mode,
                               sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, "client_new", "async", NULL);
    if (!(op = op_new(async, SBX_OP_CLIENT_NEW, done, user_data, error)))
        return NULL;
    op->plugin_mode = mode;
    if (copy_str(&op->s1, backend) < 0)
        return copy_failed(op, error);
    return submit(op, NULL, backend && sbx_backend_name_valid(backend) ? backend : NULL,
                  error);
}

SBX_EXPORT sbx_op *
sbx_client_new_async(sbx_async *async, const char *backend, sbx_op_done_fn done,
                     void *user_data, sbx_error **error)
{
    return sbx_client_new_with_mode_async(async, backend, SBX_PLUGIN_MODE_DEFAULT, done,
                                          user_data, error);
}

SBX_EXPORT sbx_op *
sbx_client_probe_async(sbx_async *async, sbx_client *client, sbx_op_done_fn done,
                       void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, "probe", "async", client ? sbx_client_get0_backend(client) : NULL);
    if (!client)
        return null_arg(error, "probe", "client", NULL);
    if (!(op = op_new(async, SBX_OP_CLIENT_PROBE, done, user_data, error)))
        return NULL;
    op->client = client;
    return submit(op, client, NULL, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_create_async(sbx_async *async, sbx_client *client, const sbx_options *options,
                         sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, "create", "async", client ? sbx_client_get0_backend(client) : NULL);
    if (!client)
        return null_arg(error, "create", "client", NULL);
    if (!(op = op_new(async, SBX_OP_SANDBOX_CREATE, done, user_data, error)))
        return NULL;
    op->client = client;
    if (copy_options(options, &op->options, error) < 0) {
        op_free(op);
        return NULL;
    }
    return submit(op, client, NULL, error);
}

SBX_EXPORT sbx_op *
sbx_create_async(sbx_async *async, const char *backend, const sbx_options *options,
                 sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, "create", "async", NULL);
    if (!(op = op_new(async, SBX_OP_CREATE, done, user_data, error)))
        return NULL;
    if (copy_str(&op->s1, backend) < 0)
        return copy_failed(op, error);
    if (copy_options(options, &op->options, error) < 0) {
        op_free(op);
        return NULL;
    }
    return submit(op, NULL, backend && sbx_backend_name_valid(backend) ? backend : NULL,
                  error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_resume_async(sbx_async *async, sbx_client *client, const char *state_json,
                         sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, "resume", "async", client ? sbx_client_get0_backend(client) : NULL);
    if (!client)
        return null_arg(error, "resume", "client", NULL);
    if (!(op = op_new(async, SBX_OP_SANDBOX_RESUME, done, user_data, error)))
        return NULL;
    op->client = client;
    if (copy_str(&op->s1, state_json) < 0)
        return copy_failed(op, error);
    return submit(op, client, NULL, error);
}

SBX_EXPORT sbx_op *
sbx_resume_async(sbx_async *async, const char *state_json, sbx_op_done_fn done,
                 void *user_data, sbx_error **error)
{
    sbx_op *op;
    sbx_op *queued;

    if (!async)
        return null_arg(error, "resume", "async", NULL);
    if (!(op = op_new(async, SBX_OP_RESUME, done, user_data, error)))
        return NULL;
    if (copy_str(&op->s1, state_json) < 0)
        return copy_failed(op, error);
    op->s2 = state_json ? state_backend(state_json) : NULL;
    queued = submit(op, NULL, op->s2, error);
    return queued;
}

SBX_EXPORT sbx_op *
sbx_sandbox_destroy_async(sbx_async *async, sbx_sandbox *sandbox, sbx_op_done_fn done,
                          void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_DESTROY, done, user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_is_alive_async(sbx_async *async, sbx_sandbox *sandbox, sbx_op_done_fn done,
                           void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_IS_ALIVE, done, user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_execute_command_async(sbx_async *async, sbx_sandbox *sandbox,
                                  const sbx_exec_request *request, sbx_op_done_fn done,
                                  void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (async && sandbox && !request)
        return null_arg(error, "execute_command", "request", sbx_sandbox_get0_backend(sandbox));
    op = sandbox_op(async, sandbox, SBX_OP_EXECUTE_COMMAND, done, user_data, error);
    if (!op)
        return NULL;
    if (copy_request(op, request, error) < 0) {
        sbx_error_fill(error ? *error : NULL, sbx_sandbox_get0_backend(sandbox), op->name);
        op_free(op);
        return NULL;
    }
    return submit_sandbox_op(op, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_execute_async(sbx_async *async, sbx_sandbox *sandbox,
                          const sbx_exec_request *request, sbx_op_done_fn done,
                          void *user_data, sbx_error **error)
{
    return sbx_sandbox_execute_command_async(async, sandbox, request, done, user_data, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_execute_shell_async(sbx_async *async, sbx_sandbox *sandbox, const char *script,
                                sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_EXECUTE_SHELL, done, user_data, error);

    if (!op)
        return NULL;
    if (copy_str(&op->s1, script) < 0)
        return copy_failed(op, error);
    return submit_sandbox_op(op, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_execute_code_async(sbx_async *async, sbx_sandbox *sandbox, const char *language,
                               const char *code, const sbx_exec_request *request,
                               sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_EXECUTE_CODE, done, user_data, error);

    if (!op)
        return NULL;
    if (copy_str(&op->s1, language) < 0 || copy_str(&op->s2, code) < 0)
        return copy_failed(op, error);
    if (request && copy_request(op, request, error) < 0) {
        sbx_error_fill(error ? *error : NULL, sbx_sandbox_get0_backend(sandbox), op->name);
        op_free(op);
        return NULL;
    }
    return submit_sandbox_op(op, error);
}

/* A sandbox operation on one path (@s1) and optionally a second (@s2). */
static sbx_op *
path_op(sbx_async *async, sbx_sandbox *sandbox, sbx_op_kind kind, const char *s1,
        const char *s2, sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, kind, done, user_data, error);

    if (!op)
        return NULL;
    if (copy_str(&op->s1, s1) < 0 || copy_str(&op->s2, s2) < 0)
        return copy_failed(op, error);
    return op;
}

/* persist / hydrate: @dir (may be NULL) copied, @flags and @fd kept. */
static sbx_op *
workspace_op(sbx_async *async, sbx_sandbox *sandbox, sbx_op_kind kind, const char *dir,
             unsigned flags, int fd, sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, kind, dir, NULL, done, user_data, error);

    if (!op)
        return NULL;
    op->fd = fd;
    op->mode = flags;
    return submit_sandbox_op(op, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_persist_workspace_async(sbx_async *async, sbx_sandbox *sandbox, const char *dir,
                                    unsigned flags, int fd, sbx_op_done_fn done,
                                    void *user_data, sbx_error **error)
{
    return workspace_op(async, sandbox, SBX_OP_PERSIST_WORKSPACE, dir, flags, fd, done,
                        user_data, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_hydrate_workspace_async(sbx_async *async, sbx_sandbox *sandbox, const char *dir,
                                    unsigned flags, int fd, sbx_op_done_fn done,
                                    void *user_data, sbx_error **error)
{
    return workspace_op(async, sandbox, SBX_OP_HYDRATE_WORKSPACE, dir, flags, fd, done,
                        user_data, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_resolve_port_async(sbx_async *async, sbx_sandbox *sandbox, unsigned port,
                               sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_RESOLVE_PORT, done, user_data, error);

    if (!op)
        return NULL;
    op->mode = port;
    return submit_sandbox_op(op, error);
}

/* list_files, read_file and write_file keep the user (may be NULL) in s2. */
SBX_EXPORT sbx_op *
sbx_sandbox_list_files_async(sbx_async *async, sbx_sandbox *sandbox, const char *path,
                             sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    return sbx_sandbox_list_files_as_async(async, sandbox, path, NULL, done, user_data, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_list_files_as_async(sbx_async *async, sbx_sandbox *sandbox, const char *path,
                                const char *user, sbx_op_done_fn done, void *user_data,
                                sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_LIST_FILES, path, user, done, user_data,
                         error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_read_file_async(sbx_async *async, sbx_sandbox *sandbox, const char *path,
                            sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    return sbx_sandbox_read_file_as_async(async, sandbox, path, NULL, done, user_data, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_read_file_as_async(sbx_async *async, sbx_sandbox *sandbox, const char *path,
                               const char *user, sbx_op_done_fn done, void *user_data,
                               sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_READ_FILE, path, user, done, user_data,
                         error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_read_file_to_fd_async(sbx_async *async, sbx_sandbox *sandbox, const char *path,
                                  int fd, sbx_op_done_fn done, void *user_data,
                                  sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_READ_FILE_TO_FD, path, NULL, done,
                         user_data, error);

    if (!op)
        return NULL;
    op->fd = fd;
    return submit_sandbox_op(op, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_write_file_async(sbx_async *async, sbx_sandbox *sandbox, const char *path,
                             const void *data, size_t len, sbx_op_done_fn done,
                             void *user_data, sbx_error **error)
{
    return sbx_sandbox_write_file_as_async(async, sandbox, path, NULL, data, len, done,
                                           user_data, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_write_file_as_async(sbx_async *async, sbx_sandbox *sandbox, const char *path,
                                const char *user, const void *data, size_t len,
                                sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_WRITE_FILE, path, user, done, user_data,
                         error);

    if (!op)
        return NULL;
    if (data) {
        if (!(op->bytes = malloc(len ? len : 1)))
            return copy_failed(op, error);
        if (len)
            memcpy(op->bytes, data, len);
    }
    op->nbytes = len;
    return submit_sandbox_op(op, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_write_file_from_fd_async(sbx_async *async, sbx_sandbox *sandbox,
                                     const char *path, int fd, uint32_t mode,
                                     sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_WRITE_FILE_FROM_FD, path, NULL, done,
                         user_data, error);

    if (!op)
        return NULL;
    op->fd = fd;
    op->mode = mode;
    return submit_sandbox_op(op, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_upload_file_async(sbx_async *async, sbx_sandbox *sandbox, const char *local_path,
                              const char *sandbox_path, sbx_op_done_fn done,
                              void *user_data, sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_UPLOAD_FILE, local_path, sandbox_path, done,
                         user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_download_file_async(sbx_async *async, sbx_sandbox *sandbox,
                                const char *sandbox_path, const char *local_path,
                                sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_DOWNLOAD_FILE, sandbox_path, local_path,
                         done, user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_upload_dir_async(sbx_async *async, sbx_sandbox *sandbox, const char *local_dir,
                             const char *sandbox_dir, sbx_op_done_fn done, void *user_data,
                             sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_UPLOAD_DIR, local_dir, sandbox_dir, done,
                         user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_download_dir_async(sbx_async *async, sbx_sandbox *sandbox,
                               const char *sandbox_dir, const char *local_dir,
                               sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op = path_op(async, sandbox, SBX_OP_DOWNLOAD_DIR, sandbox_dir, local_dir, done,
                         user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_sandbox_session_state_async(sbx_async *async, sbx_sandbox *sandbox, sbx_op_done_fn done,
                                void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_SESSION_STATE, done, user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_extract_tar_fd_async(sbx_async *async, int fd, const char *dest_dir, sbx_op_done_fn done,
                         void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, "extract_tar", "async", NULL);
    if (!(op = op_new(async, SBX_OP_EXTRACT_TAR, done, user_data, error)))
        return NULL;
    op->fd = fd;
    if (copy_str(&op->s1, dest_dir) < 0)
        return copy_failed(op, error);
    return submit(op, NULL, NULL, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_snapshot_async(sbx_async *async, sbx_sandbox *sandbox, sbx_op_done_fn done,
                           void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_SNAPSHOT, done, user_data, error);

    return op ? submit_sandbox_op(op, error) : NULL;
}

SBX_EXPORT sbx_op *
sbx_client_destroy_by_id_async(sbx_async *async, sbx_client *client, const char *id,
                               sbx_op_done_fn done, void *user_data, sbx_error **error)
{
    sbx_op *op;

    if (!async)
        return null_arg(error, "destroy_by_id", "async",
                        client ? sbx_client_get0_backend(client) : NULL);
    if (!client)
        return null_arg(error, "destroy_by_id", "client", NULL);
    if (!(op = op_new(async, SBX_OP_DESTROY_BY_ID, done, user_data, error)))
        return NULL;
    op->client = client;
    if (copy_str(&op->s1, id) < 0)
        return copy_failed(op, error);
    return submit(op, client, NULL, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_run_agent_async(sbx_async *async, sbx_sandbox *sandbox,
                            const sbx_agent_request *request, sbx_op_done_fn done,
                            void *user_data, sbx_error **error)
{
    const char *const *view;
    sbx_op *op;

    if (async && sandbox && !request)
        return null_arg(error, "run_agent", "request", sbx_sandbox_get0_backend(sandbox));
    if (!(op = sandbox_op(async, sandbox, SBX_OP_RUN_AGENT, done, user_data, error)))
        return NULL;
    if (request->struct_size < offsetof(sbx_agent_request, prompt) + sizeof(request->prompt)) {
        sbx_error *e = sbx_set_error(error, SBX_ERROR_INVALID_ARGUMENT, op->name,
                                     "request struct_size is %zu, needs at least %zu "
                                     "(initialise it with SBX_AGENT_REQUEST_INIT)",
                                     request->struct_size,
                                     offsetof(sbx_agent_request, prompt) +
                                     sizeof(request->prompt));
        sbx_error_fill(e, sbx_sandbox_get0_backend(sandbox), op->name);
        op_free(op);
        return NULL;
    }
    /* Read within struct_size only: the fields past it (an older header's
     * request has none) stay zero, and every copy below reads the copy. */
    memset(&op->agent, 0, sizeof(op->agent));
    memcpy(&op->agent, request, request->struct_size < sizeof(op->agent)
                                ? request->struct_size : sizeof(op->agent));
    op->agent.struct_size = sizeof(op->agent);
    if (copy_str(&op->s1, op->agent.prompt) < 0 || copy_str(&op->s2, op->agent.model) < 0 ||
        copy_str(&op->s3, op->agent.resume) < 0 || copy_str(&op->cwd, op->agent.cwd) < 0 ||
        copy_str(&op->shell, op->agent.command) < 0)
        return copy_failed(op, error);
    op->agent.prompt = op->s1;
    op->agent.model = op->s2;
    op->agent.resume = op->s3;
    op->agent.cwd = op->cwd;
    op->agent.command = op->shell;
    if (copy_vec(op->agent.extra_args, &op->argv, &view) < 0)
        return copy_failed(op, error);
    op->agent.extra_args = view;
    if (copy_vec(op->agent.env, &op->env, &view) < 0)
        return copy_failed(op, error);
    op->agent.env = view;
    return submit_sandbox_op(op, error);
}

SBX_EXPORT sbx_op *
sbx_sandbox_apply_patch_async(sbx_async *async, sbx_sandbox *sandbox, const char *patch,
                              size_t len, int strip, const char *dir, sbx_op_done_fn done,
                              void *user_data, sbx_error **error)
{
    sbx_op *op = sandbox_op(async, sandbox, SBX_OP_APPLY_PATCH, done, user_data, error);

    if (!op)
        return NULL;
    op->strip = strip;
    if (copy_str(&op->s1, dir) < 0)
        return copy_failed(op, error);
    /* A NULL patch reaches the call, which reports it. */
    if (patch) {
        op->bytes = malloc(len ? len : 1);
        if (!op->bytes)
            return copy_failed(op, error);
        if (len)
            memcpy(op->bytes, patch, len);
        op->nbytes = len;
    }
    return submit_sandbox_op(op, error);
}
