/*
 * gc.c — sbx_gc(): reaps what the lifecycle record (record.c) says should
 * no longer exist, and what the backends hold with this library's labels
 * that no record knows.
 *
 * 1. Every row of the record whose lifetime has ended (expired), or that is
 *    attached and none of whose owner processes lives (owner_gone), is
 *    destroyed: resumed from its session state and destroyed, or destroyed
 *    by id where the backend can, or, when the provider never answered the
 *    create, found by its create token through list_owned. The row goes
 *    once the sandbox is gone.
 * 2. On every installed backend with SBX_CAP_LIST_OWNED, each sandbox that
 *    carries a create token of this record store (the store id in the
 *    token) but has no row is destroyed by id (unrecorded): a create whose
 *    row was lost. The backends are listed at once, a thread each.
 *    Sandboxes without the labels are never listed, so never touched;
 *    tokens of other stores (other users) are left alone.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct gc_row {
    char *backend, *id, *token, *state;
    sbx_gc_reason reason;
} gc_row;

typedef struct gc_client {
    char *backend;
    sbx_client *client;   /* NULL when it could not be made */
    sbx_error *error;     /* why not */
} gc_client;

typedef struct gc_run {
    unsigned flags;
    sbx_gc_fn fn;
    void *user_data;
    double now;
    gc_row *rows;         /* candidates of step 1 */
    size_t nrows, caprows;
    sbx_strv tokens;      /* every token the record knows */
    gc_client *clients;
    size_t nclients;
    int found;
    int stopped;
    int oom;
} gc_run;

static void
gc_row_clear(gc_row *r)
{
    free(r->backend);
    free(r->id);
    free(r->token);
    free(r->state);
}

/* The client of @backend, made once per run. */
static gc_client *
gc_client_get(gc_run *run, const char *backend)
{
    gc_client *c;

    for (size_t i = 0; i < run->nclients; i++)
        if (strcmp(run->clients[i].backend, backend) == 0)
            return &run->clients[i];
    c = realloc(run->clients, (run->nclients + 1) * sizeof(*c));
    if (!c)
        return NULL;
    run->clients = c;
    c = &run->clients[run->nclients];
    memset(c, 0, sizeof(*c));
    c->backend = sbx_strdup(backend);
    if (!c->backend)
        return NULL;
    run->nclients++;
    c->client = sbx_client_new(backend, &c->error);
    return c;
}

/* Reports one item to the caller. */
static void
gc_report(gc_run *run, const char *backend, const char *id, const char *token,
          sbx_gc_reason reason, int reaped, const sbx_error *error)
{
    sbx_gc_item item = {
        .backend = backend ? backend : "",
        .id = id ? id : "",
        .create_token = token ? token : "",
        .reason = reason,
        .reaped = reaped,
        .error = error,
    };

    if (reason != SBX_GC_LIST_FAILED)
        run->found++;
    if (run->fn && !run->stopped && run->fn(&item, run->user_data) != 0)
        run->stopped = 1;
}

/* Step 1's filter: collects the rows to reap and every known token. */
static int
gc_collect(const sbx_record_row *row, void *user_data)
{
    gc_run *run = user_data;
    sbx_gc_reason reason;
    gc_row *r;

    if (sbx_strv_push(&run->tokens, row->create_token) < 0) {
        run->oom = 1;
        return 1;
    }
    if (row->expires_at > 0 && run->now >= row->expires_at)
        reason = SBX_GC_EXPIRED;
    else if (!row->detached && row->owners_alive == 0)
        reason = SBX_GC_OWNER_GONE;
    else
        return 0;
    if (run->nrows == run->caprows) {
        size_t cap = run->caprows ? 2 * run->caprows : 16;
        gc_row *g = realloc(run->rows, cap * sizeof(*g));
        if (!g) {
            run->oom = 1;
            return 1;
        }
        run->rows = g;
        run->caprows = cap;
    }
    r = &run->rows[run->nrows++];
    r->backend = sbx_strdup(row->backend);
    r->id = sbx_strdup(row->provider_id);
    r->token = sbx_strdup(row->create_token);
    r->state = sbx_strdup(row->session_state);
    r->reason = reason;
    if (!r->backend || !r->id || !r->token || !r->state)
        run->oom = 1;
    return run->oom;
}

/* list_owned walk looking for one token. */
typedef struct token_hunt {
    const char *token;
    char *id;
} token_hunt;

static int
hunt_token(const sbx_owned_sandbox *s, void *user_data)
{
    token_hunt *h = user_data;

    if (strcmp(s->create_token, h->token) != 0)
        return 0;
    h->id = sbx_strdup(s->id);
    return 1;
}

/* Destroys the sandbox of row @r. 0 when it is gone (also when it was gone
 * already), -1 with *@err. */
static int
gc_reap_row(gc_run *run, gc_row *r, sbx_error **err)
{
    gc_client *c = gc_client_get(run, r->backend);
    sbx_sandbox *sb;
    sbx_error *e = NULL;
    uint64_t caps;

    if (!c) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "gc", "out of memory");
        return -1;
    }
    if (!c->client) {
        sbx_set_error(err, sbx_error_get_code(c->error), "gc", "%s",
                      sbx_error_get0_message(c->error));
        return -1;
    }
    caps = c->client->plugin->caps;
    if (r->state[0]) {
        sb = sbx_sandbox_resume(c->client, r->state, &e);
        if (sb) {
            int rc = sbx_sandbox_destroy(sb, err);

            sbx_sandbox_free(sb);
            return rc;
        }
        if (sbx_error_get_code(e) == SBX_ERROR_NOT_FOUND) {
            sbx_error_free(e);
            return 0;
        }
        if (!r->id[0] || !(caps & SBX_CAP_LIST_OWNED)) {
            *err = e;
            return -1;
        }
        sbx_error_free(e);
        e = NULL;
    }
    if (!(caps & SBX_CAP_LIST_OWNED)) {
        if (!r->id[0] && !r->state[0]) {
            /* The create never answered, and this backend keeps nothing
             * findable by token: its plugin removes a half-made sandbox
             * before failing, so nothing is left. */
            return 0;
        }
        sbx_set_error(err, SBX_ERROR_FEATURE_NOT_SUPPORTED, "gc",
                      "backend \"%s\" can neither resume sandbox %s nor destroy it by id",
                      r->backend, r->id);
        return -1;
    }
    if (!r->id[0]) {
        token_hunt h = { r->token, NULL };

        if (sbx_client_list_owned(c->client, hunt_token, &h, err) < 0)
            return -1;
        if (!h.id)
            return 0;   /* the provider made nothing with this token */
        free(r->id);
        r->id = h.id;
    }
    return sbx_client_destroy_by_id(c->client, r->id, err);
}

/* Step 2's walk over one backend's list_owned, run in a thread of its own
 * (the backends are listed at once: a provider that cannot be reached
 * takes its retries' seconds, and those of every backend would add up). */
typedef struct unrecorded_walk {
    gc_run *run;               /* read only in the thread: its tokens */
    const char *name;
    size_t at;                 /* its client: run->clients[at] */
    sbx_strv ids, tokens;
    sbx_error *error;          /* the listing's, when it failed */
    int listed;                /* list_owned succeeded (returned its count) */
    int oom;
    int started;               /* thread is running */
    pthread_t thread;
} unrecorded_walk;

static int
collect_unrecorded(const sbx_owned_sandbox *s, void *user_data)
{
    unrecorded_walk *w = user_data;

    if (!sbx_record_token_is_ours(s->create_token) ||
        sbx_strv_contains(&w->run->tokens, s->create_token))
        return 0;
    if (sbx_strv_push(&w->ids, s->id) < 0 || sbx_strv_push(&w->tokens, s->create_token) < 0) {
        w->oom = 1;
        return 1;
    }
    return 0;
}

static void *
list_unrecorded(void *arg)
{
    unrecorded_walk *w = arg;

    w->listed = sbx_client_list_owned(w->run->clients[w->at].client, collect_unrecorded, w,
                                      &w->error) >= 0;
    return NULL;
}

static void
gc_unrecorded(gc_run *run)
{
    sbx_backend_info **list = NULL;
    unrecorded_walk *walks;
    size_t count = 0, n = 0;

    if (sbx_backends_list(&list, &count, NULL) < 0)
        return;
    walks = calloc(count ? count : 1, sizeof(*walks));
    if (!walks) {
        run->oom = 1;
        sbx_backend_info_list_free(list, count);
        return;
    }
    /* The clients first (the run's array grows here), then one listing
     * thread each; a thread that cannot start lists in this one. */
    for (size_t i = 0; i < count && !run->oom; i++) {
        const char *name = sbx_backend_info_get0_name(list[i]);
        unrecorded_walk *w = &walks[n];

        if (sbx_backend_info_get0_problem(list[i]) ||
            !(sbx_backend_info_get_caps(list[i]) & SBX_CAP_LIST_OWNED))
            continue;
        w->run = run;
        w->name = name;
        n++;
    }
    for (size_t i = 0; i < n && !run->oom; i++) {
        gc_client *c = gc_client_get(run, walks[i].name);

        if (!c)
            run->oom = 1;
        else
            walks[i].at = (size_t)(c - run->clients);
    }
    /* From here on the clients' array no longer moves. */
    for (size_t i = 0; i < n && !run->oom; i++) {
        unrecorded_walk *w = &walks[i];

        if (!run->clients[w->at].client)
            continue;
        w->started = pthread_create(&w->thread, NULL, list_unrecorded, w) == 0;
        if (!w->started)
            list_unrecorded(w);
    }
    for (size_t i = 0; i < n; i++)
        if (walks[i].started)
            pthread_join(walks[i].thread, NULL);
    /* Reported and reaped in the backends' order, in this thread. */
    for (size_t i = 0; i < n && !run->stopped && !run->oom; i++) {
        unrecorded_walk *w = &walks[i];
        gc_client *c = &run->clients[w->at];
        sbx_error *e = NULL;

        if (w->oom) {
            run->oom = 1;
            break;
        }
        if (!c->client) {
            gc_report(run, w->name, NULL, NULL, SBX_GC_LIST_FAILED, 0, c->error);
            continue;
        }
        if (!w->listed) {
            gc_report(run, w->name, NULL, NULL, SBX_GC_LIST_FAILED, 0, w->error);
            continue;
        }
        for (size_t k = 0; k < w->ids.count && !run->stopped; k++) {
            int reaped = 0;

            if (!(run->flags & SBX_GC_DRY_RUN))
                reaped = sbx_client_destroy_by_id(c->client, w->ids.items[k], &e) == 0;
            gc_report(run, w->name, w->ids.items[k], w->tokens.items[k], SBX_GC_UNRECORDED,
                      reaped, e);
            sbx_error_free(e);
            e = NULL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        sbx_strv_clear(&walks[i].ids);
        sbx_strv_clear(&walks[i].tokens);
        sbx_error_free(walks[i].error);
    }
    free(walks);
    sbx_backend_info_list_free(list, count);
}

SBX_EXPORT int
sbx_gc(unsigned flags, sbx_gc_fn fn, void *user_data, sbx_error **error)
{
    static const char op[] = "gc";
    gc_run run = { .flags = flags, .fn = fn, .user_data = user_data };
    sbx_error *err = NULL;

    if (flags & ~(unsigned)SBX_GC_DRY_RUN) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "unknown flags 0x%x",
                      flags & ~(unsigned)SBX_GC_DRY_RUN);
        goto fail;
    }
    run.now = sbx_wallclock_now();
    if (sbx_record_foreach(gc_collect, &run, &err) < 0)
        goto fail;
    if (run.oom)
        goto oom;
    for (size_t i = 0; i < run.nrows && !run.stopped; i++) {
        gc_row *r = &run.rows[i];
        sbx_error *e = NULL;
        int reaped = 0;

        if (!(flags & SBX_GC_DRY_RUN) && gc_reap_row(&run, r, &e) == 0) {
            sbx_record_remove(r->token, NULL);
            reaped = 1;
        }
        gc_report(&run, r->backend, r->id, r->token, r->reason, reaped, e);
        sbx_error_free(e);
    }
    if (!run.stopped)
        gc_unrecorded(&run);
    if (run.oom)
        goto oom;
    goto done;

oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    sbx_error_ensure(&err, NULL, op);
    if (error && !*error)
        *error = err;
    else
        sbx_error_free(err);
    run.found = -1;
done:
    for (size_t i = 0; i < run.nrows; i++)
        gc_row_clear(&run.rows[i]);
    free(run.rows);
    sbx_strv_clear(&run.tokens);
    for (size_t i = 0; i < run.nclients; i++) {
        sbx_client_free(run.clients[i].client);
        sbx_error_free(run.clients[i].error);
        free(run.clients[i].backend);
    }
    free(run.clients);
    return run.found;
}
