/*
 * reap.c — orphans of creates whose outcome is unknown (cloud.h): looked
 * for by their create token, once at once and then once a second on the
 * reaper's thread for a window, and deleted (CASE-20).
 */
#include "cloud.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pending {
    char *token;
    double until;       /* CLOCK_MONOTONIC */
    struct pending *next;
} pending;

struct cl_reaper {
    cl_reap_find_fn find;
    cl_reap_delete_fn del;
    cl_reap_delete_op_fn del_op;    /* or this, with op "create" */
    void *ud;
    pthread_mutex_t lock;
    pending *list;
    int thread_on;
    pthread_t thread;
    int stop_rd, stop_wr;
};

cl_reaper *cl_reaper_new(cl_reap_find_fn find, cl_reap_delete_fn del, void *ud)
{
    cl_reaper *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        free(r);
        return NULL;
    }
    r->stop_rd = p[0];
    r->stop_wr = p[1];
    r->find = find;
    r->del = del;
    r->ud = ud;
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

cl_reaper *cl_reaper_new_op(cl_reap_find_fn find, cl_reap_delete_op_fn del,
                            struct sbx_plugin_client *client)
{
    cl_reaper *r = cl_reaper_new(find, NULL, client);
    if (r)
        r->del_op = del;
    return r;
}

/* One look for @token: deletes what it finds; returns the count, -1 when
 * the look failed. */
static int reap_once(cl_reaper *r, const sbx_call_ctx *ctx, const char *token)
{
    char **ids = NULL;
    if (r->find(r->ud, ctx, token, &ids, NULL) < 0)
        return -1;
    int n = 0;
    for (size_t i = 0; ids && ids[i]; i++) {
        if ((r->del ? r->del(r->ud, ctx, ids[i], NULL)
                    : r->del_op(r->ud, ctx, ids[i], "create", NULL)) == 0) {
            CL_LOG(SBX_LOG_INFO, "deleted sandbox %s left by a create whose answer was lost",
                   ids[i]);
            n++;
        }
    }
    cl_strv_free(ids);
    return n;
}

int cl_reap_now(cl_reaper *r, const sbx_call_ctx *ctx, const char *token, double grace_s)
{
    sbx_call_ctx c = { sizeof(c), 0, -1, NULL };
    if (ctx)
        c = *ctx;
    /* The call's own deadline has usually passed (that is why the outcome
     * is unknown): the look gets a short time of its own. */
    c.deadline = cl_now() + grace_s;
    c.create_token = NULL;
    return reap_once(r, &c, token);
}

static void *reaper_main(void *arg)
{
    cl_reaper *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        pending *p = r->list;
        double now = cl_now();
        /* Drop what has run out of time. */
        pending **pp = &r->list;
        while (*pp) {
            if ((*pp)->until < now) {
                pending *d = *pp;
                *pp = d->next;
                free(d->token);
                free(d);
            } else {
                pp = &(*pp)->next;
            }
        }
        p = r->list;
        char *token = p ? strdup(p->token) : NULL;
        if (p) {
            /* Round robin: move the head to the end. */
            r->list = p->next;
            p->next = NULL;
            pending **end = &r->list;
            while (*end)
                end = &(*end)->next;
            *end = p;
        }
        int empty = r->list == NULL;
        pthread_mutex_unlock(&r->lock);
        if (token) {
            sbx_call_ctx c = { sizeof(c), cl_now() + 10.0, r->stop_rd, NULL };
            reap_once(r, &c, token);
            free(token);
        }
        if (empty) {
            pthread_mutex_lock(&r->lock);
            int still = r->list == NULL;
            if (still)
                r->thread_on = 0;
            pthread_mutex_unlock(&r->lock);
            if (still)
                return NULL;
        }
        if (cl_sleep(1.0, r->stop_rd))
            return NULL;
    }
}

int cl_reaper_add(cl_reaper *r, const char *token, double window_s)
{
    pending *p = calloc(1, sizeof(*p));
    if (!p || !(p->token = strdup(token))) {
        free(p);
        return -1;
    }
    p->until = cl_now() + window_s;
    pthread_mutex_lock(&r->lock);
    p->next = r->list;
    r->list = p;
    int rc = 0;
    if (!r->thread_on) {
        /* A thread that ended by itself is joined before the new one. */
        if (r->thread) {
            pthread_t t = r->thread;
            pthread_mutex_unlock(&r->lock);
            pthread_join(t, NULL);
            pthread_mutex_lock(&r->lock);
            r->thread = 0;
        }
        if (!r->thread_on) {
            rc = pthread_create(&r->thread, NULL, reaper_main, r);
            if (rc == 0)
                r->thread_on = 1;
            else
                r->thread = 0;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return rc == 0 ? 0 : -1;
}

void cl_reaper_free(cl_reaper *r)
{
    if (!r)
        return;
    char b = 1;
    while (write(r->stop_wr, &b, 1) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&r->lock);
    pthread_t t = r->thread;
    r->thread = 0;
    pthread_mutex_unlock(&r->lock);
    if (t)
        pthread_join(t, NULL);
    /* One last look for each that is still pending. */
    for (pending *p = r->list, *n; p; p = n) {
        n = p->next;
        sbx_call_ctx c = { sizeof(c), cl_now() + 5.0, -1, NULL };
        reap_once(r, &c, p->token);
        free(p->token);
        free(p);
    }
    close(r->stop_rd);
    close(r->stop_wr);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void cl_reap_lost(cl_reaper *r, const char *token)
{
    cl_reap_now(r, NULL, token, CL_LOST_LOOK_S);
    cl_reaper_add(r, token, 30.0);
}
