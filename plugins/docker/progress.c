/*
 * progress.c — the summary line of an image pull (progress.h).
 */
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

void dk_pull_progress_bytes(int64_t bytes, char *buf, size_t size)
{
    if (bytes < 1000)
        snprintf(buf, size, "%lld B", (long long)(bytes < 0 ? 0 : bytes));
    else if (bytes < 1000000)
        snprintf(buf, size, "%.1f kB", bytes / 1e3);
    else if (bytes < 1000000000)
        snprintf(buf, size, "%.1f MB", bytes / 1e6);
    else
        snprintf(buf, size, "%.2f GB", bytes / 1e9);
}

/* The layer @id, added when new; NULL when memory ran out. */
static dk_pull_layer *layer_of(dk_pull_progress *p, const char *id)
{
    for (size_t i = 0; i < p->count; i++)
        if (strcmp(p->layers[i].id, id) == 0)
            return &p->layers[i];
    if (p->count == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        dk_pull_layer *grown = realloc(p->layers, ncap * sizeof(*grown));
        if (!grown)
            return NULL;
        p->layers = grown;
        p->cap = ncap;
    }
    dk_pull_layer *l = &p->layers[p->count++];
    memset(l, 0, sizeof(*l));
    snprintf(l->id, sizeof(l->id), "%s", id);
    return l;
}

static int64_t detail(json_object *j, const char *key)
{
    json_object *d, *v;
    if (json_object_object_get_ex(j, "progressDetail", &d)
        && json_object_object_get_ex(d, key, &v) && json_object_is_type(v, json_type_int))
        return json_object_get_int64(v);
    return -1;
}

int dk_pull_progress_feed(dk_pull_progress *p, const char *json_line)
{
    static const char *const layer_statuses[] = {
        "Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum",
        "Download complete", "Extracting", "Pull complete", "Already exists", NULL
    };
    json_object *j = json_tokener_parse(json_line), *st, *idv;
    int rc = 0;
    if (!j)
        return 0;
    if (!json_object_is_type(j, json_type_object)
        || !json_object_object_get_ex(j, "status", &st) || !json_object_is_type(st, json_type_string)
        || !json_object_object_get_ex(j, "id", &idv) || !json_object_is_type(idv, json_type_string))
        goto out;
    const char *status = json_object_get_string(st), *id = json_object_get_string(idv);
    size_t k = 0;
    while (layer_statuses[k] && strcmp(layer_statuses[k], status) != 0)
        k++;
    if (!layer_statuses[k])
        goto out;
    dk_pull_layer *l = layer_of(p, id);
    if (!l) {
        rc = -1;
        goto out;
    }
    if (strcmp(status, "Downloading") == 0) {
        int64_t cur = detail(j, "current"), tot = detail(j, "total");
        if (tot > 0)
            l->total = tot;
        if (cur >= 0)
            l->current = cur;
    } else if (strcmp(status, "Download complete") == 0 || strcmp(status, "Extracting") == 0) {
        if (l->total > 0)
            l->current = l->total;
    } else if (strcmp(status, "Pull complete") == 0) {
        if (l->total > 0)
            l->current = l->total;
        l->done = 1;
    } else if (strcmp(status, "Already exists") == 0) {
        l->done = 1;
        l->present = 1;
    }

    size_t done = 0;
    int64_t have = 0, total = 0;
    for (size_t i = 0; i < p->count; i++) {
        done += p->layers[i].done != 0;
        have += p->layers[i].current;
        total += p->layers[i].total;
    }
    char line[sizeof(p->line)], a[24], b[24];
    if (total > 0) {
        dk_pull_progress_bytes(have, a, sizeof(a));
        dk_pull_progress_bytes(total, b, sizeof(b));
        snprintf(line, sizeof(line), "pulling %s: %zu/%zu layers, %s of %s",
                 p->image ? p->image : "", done, p->count, a, b);
    } else {
        snprintf(line, sizeof(line), "pulling %s: %zu/%zu layers", p->image ? p->image : "",
                 done, p->count);
    }
    if (strcmp(line, p->line) != 0) {
        memcpy(p->line, line, sizeof(line));
        rc = 1;
    }
out:
    json_object_put(j);
    return rc;
}

void dk_pull_progress_clear(dk_pull_progress *p)
{
    free(p->layers);
    p->layers = NULL;
    p->count = p->cap = 0;
    p->line[0] = '\0';
}
