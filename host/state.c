/*
 * host/state.c — session state and resume: the versioned JSON document
 * from which a sandbox is reattached, in this or another process.
 *
 *     {"version":1,"backend":"local","id":"...","timeout_secs":600,
 *      "size":{"cpu":1,"memory_mb":1024},"data":{...}}
 *
 * "data" is the backend's own object, made by its session_state slot and
 * handed back unchanged to its resume slot. The library adds only the
 * fields above: no option value, no environment value, no credential. The
 * reference's SandboxSessionState carries {"backend","data"}; version, id,
 * timeout_secs and size are this library's additions (the id to name the
 * sandbox in messages and checks, timeout_secs because it is the resumed
 * sandbox's default exec timeout, size — cpu, memory_mb and gpu as the
 * create asked for them — so the resumed sandbox's compute is priced at
 * its own size). A document without size (written before it existed) is
 * priced at the default size. timeout_secs is -1 for a sandbox without a
 * lifetime (SBX_TIMEOUT_NONE: JSON has no infinity).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "internal.h"

/* The one version this library writes and reads. */
#define STATE_VERSION 1

/* Fills backend and op into @err and hands it to the caller's @error. */
static void
finish_error(sbx_error **error, sbx_error *err, const char *backend, const char *op)
{
    sbx_error_fill(err, backend, op);
    sbx_error_propagate(error, err);
}

/* ----------------------------------------------------------- session state */

SBX_EXPORT char *
sbx_sandbox_session_state(sbx_sandbox *sandbox, sbx_error **error)
{
    static const char op[] = "session_state";
    char *(*session_state)(sbx_plugin_sandbox *, const sbx_call_ctx *, sbx_error **);
    const sbx_host_services *services = sbx_host_services_get();
    json_object *doc = NULL, *data = NULL;
    enum json_tokener_error jerr;
    sbx_error *err = NULL;
    char *raw = NULL, *out = NULL;
    const char *backend;
    sbx_call_ctx ctx;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0) {
        finish_error(error, err, sandbox ? sandbox->client->backend : NULL, op);
        return NULL;
    }
    backend = sandbox->client->backend;
    session_state = SBX_SLOT(sandbox->client->plugin, session_state);
    if (!session_state) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" has no session state (cannot resume)", backend);
        goto fail;
    }
    sbx_call_ctx_init_for(&ctx, sandbox->client);
    raw = session_state(sandbox->handle, &ctx, &err);
    if (!raw) {
        sbx_error_ensure(&err, backend, op);
        sbx_error_add_context(err, "sandbox_id", sandbox->id);
        goto fail;
    }
    data = json_tokener_parse_verbose(raw, &jerr);
    if (!data || !json_object_is_type(data, json_type_object)) {
        sbx_set_error(&err, SBX_ERROR_EXECUTION_FAILED, op,
                      "backend \"%s\" returned a session state that is not a JSON object",
                      backend);
        goto fail;
    }
    doc = json_object_new_object();
    if (!doc)
        goto oom;
    json_object_object_add(doc, "version", json_object_new_int(STATE_VERSION));
    json_object_object_add(doc, "backend", json_object_new_string(backend));
    json_object_object_add(doc, "id", json_object_new_string(sandbox->id));
    /* Whole seconds print as an integer (600), others as a number (2.5). */
    if (sandbox->timeout_secs == floor(sandbox->timeout_secs) &&
        fabs(sandbox->timeout_secs) < 9e15)
        json_object_object_add(doc, "timeout_secs",
                               json_object_new_int64((int64_t)sandbox->timeout_secs));
    else
        json_object_object_add(doc, "timeout_secs",
                               json_object_new_double(sandbox->timeout_secs));
    if (sandbox->usage_started && sandbox->cpu > 0 && sandbox->ram_gib > 0) {
        json_object *size = json_object_new_object();

        if (!size)
            goto oom;
        json_object_object_add(doc, "size", size);
        json_object_object_add(size, "cpu",
                               sandbox->cpu == floor(sandbox->cpu) && sandbox->cpu < 9e15
                                   ? json_object_new_int64((int64_t)sandbox->cpu)
                                   : json_object_new_double(sandbox->cpu));
        json_object_object_add(size, "memory_mb",
                               json_object_new_int64(llround(sandbox->ram_gib * 1024.0)));
        if (sandbox->gpu)
            json_object_object_add(size, "gpu", json_object_new_string(sandbox->gpu));
    }
    json_object_object_add(doc, "data", data);
    data = NULL;
    out = sbx_strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
    if (!out)
        goto oom;
    json_object_put(doc);
    services->free(raw);
    return out;

oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    json_object_put(doc);
    json_object_put(data);
    if (raw)
        services->free(raw);
    finish_error(error, err, backend, op);
    return NULL;
}

/* ------------------------------------------------------------------ resume */

/* A parsed session state; the strings are borrowed from @doc. */
typedef struct state_doc {
    json_object *doc;
    const char *backend;
    const char *id;
    double timeout_secs;
    double cpu;             /* size: SBX_DEFAULT_* when the document has none */
    int64_t memory_mb;
    const char *gpu;        /* NULL: none */
    const char *data;       /* the data object, serialised */
} state_doc;

/* Stores an invalid_argument error about the document in *@err. */
static sbx_error *bad_state(sbx_error **err, const char *field, const char *fmt, ...)
    SBX_PRINTF(3, 4);

static sbx_error *
bad_state(sbx_error **err, const char *field, const char *fmt, ...)
{
    va_list ap;
    char *text;
    sbx_error *e;

    va_start(ap, fmt);
    text = sbx_vasprintf(fmt, ap);
    va_end(ap);
    e = sbx_set_error(err, SBX_ERROR_INVALID_ARGUMENT, "resume", "invalid session state: %s",
                      text ? text : "out of memory");
    free(text);
    if (field)
        sbx_error_add_context(e, "field", field);
    return e;
}

/* The JSON type of @o, for messages. */
static const char *
type_name(json_object *o)
{
    return o ? json_type_to_name(json_object_get_type(o)) : "null";
}

/* @v as JSON text for a message: plain, "/" not escaped (borrowed from @v). */
static const char *json_value_text(json_object *v)
{
    return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN
                                                 | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/*
 * Parses and checks @json: an object with version 1, non-empty string
 * backend and id, a positive finite timeout_secs (or -1: none) and an object data, and
 * nothing after it but white space. Returns 0, or -1 with *@err an
 * invalid_argument error naming what is wrong.
 */
static int
state_parse(const char *json, state_doc *st, sbx_error **err)
{
    json_object *o, *v;
    const char *why;
    size_t len, end;
    int64_t version;
    sbx_error *e;

    memset(st, 0, sizeof(*st));
    if (!json) {
        bad_state(err, NULL, "the document is NULL");
        return -1;
    }
    len = strlen(json);
    int parsed = sbx_json_parse_whole(json, &o, &end, &why);
    if (parsed < 0) {
        if (parsed == -2)
            sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "resume", "out of memory");
        else
            bad_state(err, NULL, "malformed JSON at offset %zu of %zu bytes: %s", end, len, why);
        return -1;
    }
    st->doc = o;
    if (!json_object_is_type(o, json_type_object)) {
        bad_state(err, NULL, "a JSON object is expected, not %s", type_name(o));
        goto fail;
    }

    if (!json_object_object_get_ex(o, "version", &v)) {
        bad_state(err, "version", "\"version\" is missing");
        goto fail;
    }
    if (!json_object_is_type(v, json_type_int)) {
        bad_state(err, "version", "\"version\" must be an integer, not %s (%s)",
                  type_name(v), json_value_text(v));
        goto fail;
    }
    version = json_object_get_int64(v);
    if (version != STATE_VERSION) {
        e = bad_state(err, "version", "unknown version %lld (this library reads version %d)",
                      (long long)version, STATE_VERSION);
        sbx_error_add_contextf(e, "version", "%lld", (long long)version);
        goto fail;
    }

    if (!json_object_object_get_ex(o, "backend", &v) ||
        !json_object_is_type(v, json_type_string) || !json_object_get_string_len(v)) {
        bad_state(err, "backend", "\"backend\" must be a non-empty string (got %s)",
                  v ? json_value_text(v) : "nothing");
        goto fail;
    }
    st->backend = json_object_get_string(v);
    if (!sbx_backend_name_valid(st->backend)) {
        e = bad_state(err, "backend", "\"%s\" is not a backend name", st->backend);
        sbx_error_add_context(e, "backend_name", st->backend);
        goto fail;
    }

    if (!json_object_object_get_ex(o, "id", &v) || !json_object_is_type(v, json_type_string) ||
        !json_object_get_string_len(v)) {
        bad_state(err, "id", "\"id\" must be a non-empty string (got %s)",
                  v ? json_value_text(v) : "nothing");
        goto fail;
    }
    st->id = json_object_get_string(v);

    if (!json_object_object_get_ex(o, "timeout_secs", &v) ||
        !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))) {
        bad_state(err, "timeout_secs", "\"timeout_secs\" must be a number (got %s)",
                  v ? json_value_text(v) : "nothing");
        goto fail;
    }
    st->timeout_secs = json_object_get_double(v);
    if (st->timeout_secs != SBX_TIMEOUT_NONE &&
        (!isfinite(st->timeout_secs) || st->timeout_secs <= 0)) {
        bad_state(err, "timeout_secs", "\"timeout_secs\" must be positive and finite, or -1 "
                  "for no lifetime (got %s)", json_value_text(v));
        goto fail;
    }

    st->cpu = SBX_DEFAULT_CPU;
    st->memory_mb = SBX_DEFAULT_MEMORY_MB;
    if (json_object_object_get_ex(o, "size", &v)) {
        json_object *f;

        if (!json_object_is_type(v, json_type_object)) {
            bad_state(err, "size", "\"size\" must be an object (got %s)", type_name(v));
            goto fail;
        }
        if (!json_object_object_get_ex(v, "cpu", &f) ||
            !(json_object_is_type(f, json_type_int) || json_object_is_type(f, json_type_double)) ||
            !isfinite(json_object_get_double(f)) || json_object_get_double(f) <= 0) {
            bad_state(err, "size.cpu", "\"size.cpu\" must be a positive number (got %s)",
                      f ? json_object_to_json_string(f) : "nothing");
            goto fail;
        }
        st->cpu = json_object_get_double(f);
        if (!json_object_object_get_ex(v, "memory_mb", &f) ||
            !json_object_is_type(f, json_type_int) || json_object_get_int64(f) <= 0) {
            bad_state(err, "size.memory_mb",
                      "\"size.memory_mb\" must be a positive integer (got %s)",
                      f ? json_object_to_json_string(f) : "nothing");
            goto fail;
        }
        st->memory_mb = json_object_get_int64(f);
        if (json_object_object_get_ex(v, "gpu", &f)) {
            if (!json_object_is_type(f, json_type_string) || !json_object_get_string_len(f)) {
                bad_state(err, "size.gpu", "\"size.gpu\" must be a non-empty string (got %s)",
                          json_object_to_json_string(f));
                goto fail;
            }
            st->gpu = json_object_get_string(f);
        }
    }

    if (!json_object_object_get_ex(o, "data", &v) || !json_object_is_type(v, json_type_object)) {
        bad_state(err, "data", "\"data\" must be an object (got %s)", type_name(v));
        goto fail;
    }
    st->data = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                 JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!st->data) {
        sbx_set_error(err, SBX_ERROR_RESOURCE_EXHAUSTED, "resume", "out of memory");
        goto fail;
    }
    return 0;

fail:
    json_object_put(st->doc);
    st->doc = NULL;
    return -1;
}

SBX_EXPORT sbx_sandbox *
sbx_sandbox_resume(sbx_client *client, const char *state_json, sbx_error **error)
{
    static const char op[] = "resume";
    int (*resume)(sbx_plugin_client *, const sbx_call_ctx *, const char *,
                  sbx_plugin_sandbox **, sbx_error **);
    void (*sandbox_free)(sbx_plugin_sandbox *);
    const char *(*get_id)(sbx_plugin_sandbox *);
    const char *(*get_root)(sbx_plugin_sandbox *);
    sbx_plugin_sandbox *handle = NULL;
    sbx_sandbox *sandbox = NULL;
    sbx_error *err = NULL, *e;
    sbx_call_ctx ctx;
    state_doc st;
    const char *s;

    if (!client) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "client is NULL");
        finish_error(error, err, NULL, op);
        return NULL;
    }
    if (state_parse(state_json, &st, &err) < 0)
        goto fail;
    if (strcmp(st.backend, client->backend) != 0) {
        e = bad_state(&err, "backend",
                      "it is for backend \"%s\", and this client is for backend \"%s\"",
                      st.backend, client->backend);
        sbx_error_add_context(e, "state_backend", st.backend);
        goto fail;
    }
    /* No lifetime is only made where the owners bound the sandbox. */
    if (st.timeout_secs < 0 && !(client->plugin->caps & SBX_CAP_OWNER_WATCH)) {
        bad_state(&err, "timeout_secs", "\"timeout_secs\" -1 (no lifetime) is not for backend "
                  "\"%s\": it cannot end an attached sandbox when its owners end",
                  client->backend);
        goto fail;
    }
    resume = SBX_SLOT(client->plugin, resume);
    sandbox_free = SBX_SLOT(client->plugin, sandbox_free);
    if (!resume) {
        sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "backend \"%s\" cannot resume sandboxes", client->backend);
        goto fail;
    }
    sbx_call_ctx_init_for(&ctx, client);
    if (resume(client->handle, &ctx, st.data, &handle, &err) != 0) {
        sbx_error_ensure(&err, client->backend, op);
        sbx_error_add_context(err, "sandbox_id", st.id);
        goto fail;
    }
    sbx_error_free(err);
    err = NULL;

    get_id = SBX_SLOT(client->plugin, sandbox_id);
    get_root = SBX_SLOT(client->plugin, sandbox_root);
    s = get_id ? get_id(handle) : NULL;
    if (s && strcmp(s, st.id) != 0) {
        e = bad_state(&err, "id",
                      "\"id\" is \"%s\" but its data describes sandbox \"%s\"", st.id, s);
        sbx_error_add_context(e, "sandbox_id", st.id);
        goto fail_handle;
    }
    sandbox = calloc(1, sizeof(*sandbox));
    if (!sandbox)
        goto oom_handle;
    sandbox->client = client;
    sandbox->handle = handle;
    sandbox->timeout_secs = st.timeout_secs;
    pthread_mutex_init(&sandbox->lock, NULL);
    sandbox->id = strdup(st.id);
    s = get_root ? get_root(handle) : NULL;
    sandbox->root = strdup(s ? s : "");
    if (!sandbox->id || !sandbox->root) {
        sbx_sandbox_free(sandbox);   /* frees the plugin handle too */
        sandbox = NULL;
        handle = NULL;
        goto oom;
    }
    /* The resuming process becomes one of its owners (an attached sandbox
     * lives while one of them does); a detached one has none to add (each
     * process that resumed it, the CLI's every `sbx exec`, left a row). A
     * sandbox this record does not know (made by another user, or before
     * the record) has none. */
    if (sbx_record_find(client->backend, sandbox->id, sandbox->token, NULL) == 1) {
        int detached = 0, alive = 0;

        if (sbx_record_get(sandbox->token, &detached, &alive, NULL) != 1 || !detached)
            sbx_record_add_owner(sandbox->token, NULL);
    } else {
        sandbox->token[0] = '\0';
    }
    /* Priced at the live price the state records, where the provider
     * reports one, else at the size it records (the default size for a
     * document without one); usage copies the gpu string. */
    sbx_usage_sandbox_live_price(sandbox, st.doc);
    /* The exec endpoint from the plugin's own state of what it resumed
     * (it checked the supervisor against the sandbox's own record), never
     * from the document the caller handed in. */
    if (client->mode == SBX_PLUGIN_MODE_OUT_OF_PROCESS) {
        char *fresh = sbx_sandbox_session_state(sandbox, NULL);
        json_object *doc = fresh ? json_tokener_parse(fresh) : NULL;

        sbx_direct_from_state(sandbox, doc, 1);
        json_object_put(doc);
        free(fresh);
    }
    sbx_usage_sandbox_start(sandbox, st.cpu, st.memory_mb, st.gpu);
    json_object_put(st.doc);
    return sandbox;

oom_handle:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail_handle:
    if (sandbox_free)
        sandbox_free(handle);
    goto fail;
oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    json_object_put(st.doc);
    finish_error(error, err, client->backend, op);
    return NULL;
}

SBX_EXPORT sbx_sandbox *
sbx_resume(const char *state_json, sbx_error **error)
{
    static const char op[] = "resume";
    sbx_sandbox *sandbox;
    sbx_client *client;
    sbx_error *err = NULL;
    state_doc st;

    /* The document is checked before a plugin is loaded for it. */
    if (state_parse(state_json, &st, &err) < 0) {
        finish_error(error, err, NULL, op);
        return NULL;
    }
    client = sbx_shared_client_get(st.backend, error);
    json_object_put(st.doc);
    if (!client)
        return NULL;
    sandbox = sbx_sandbox_resume(client, state_json, error);
    if (!sandbox) {
        sbx_shared_client_put(client);
        return NULL;
    }
    sandbox->owns_client = 1;
    return sandbox;
}
