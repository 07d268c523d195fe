/*
 * server/api.c — sbx-server's routes and the sandbox endpoints
 * (CONTROL-PLANE.md §1 "Sandboxes", §3 idempotency), plus the statement
 * and reply helpers the endpoint files share (server/api.h).
 *
 * Bodies are read as the reference's pydantic models read them, in lax
 * mode (server/lax.h: "5" for an int, "yes" for a bool), and a refusal
 * is pydantic's 422 item.
 *
 * Create: the Idempotency-Key (1..255 characters, scoped to the
 * organisation, CASE-38) and the request fingerprint (HMAC-SHA256 under
 * the pepper of the canonical, coerced body, env_vars values included)
 * are checked and the sandbox row reserved in ONE transaction (lock
 * "idempotency:<org>:<key>"); a replay returns the stored record with no
 * provider call, a different body is 409; the provider call comes after
 * the commit, and its outcome is written in a second transaction. A server
 * that dies between the two leaves the record `creating`, and a retry with
 * the key returns that record: the provider create never runs twice for
 * one key.
 *
 * Execute: the key's row is read in the execute's first statement, with
 * the sandbox and the request id's execution (route AUTH_IN_READ,
 * cp_auth_apply()), and answers as every route's authentication does. The
 * request id (the Idempotency-Key, else "req_<hex>") is claimed by
 * inserting a `running` executions row (unique per
 * organisation, sandbox and request id) in the transaction of that read;
 * a completed one is replayed
 * verbatim, a running one is 409, a failed one 409 with the stored
 * payload. Output bytes that are not UTF-8 (CASE-07): "stdout"/"stderr"
 * stay strings (invalid sequences replaced by U+FFFD), and then
 * "stdout_lossy": true with "stdout_b64" (the exact bytes, standard
 * base64) is added for that stream; valid UTF-8 output gets neither field.
 *
 * Commands: {"command": C, "args": null} runs C through /bin/sh -c;
 * {"command": C, "args": [..]} runs the argument vector [C, args...] with
 * no shell; {"code": X, "language": L} runs X in L (python by default).
 * Beyond the reference, optional fields map onto libsbx's exec request:
 * "stdin_b64" (standard base64) is fed to the command's stdin, then EOF, so
 * bytes of any kind can be written into a sandbox through this API
 * (CASE-17; without it stdin is at EOF); "env" ({name: value}) is laid over
 * the sandbox's environment; "cwd" is the working directory (a missing one
 * is the provider's not_found); "timeout_secs" (> 0) bounds the command,
 * which then exits 124 and the reply adds "timed_out": true. A stream cut
 * at libsbx's output cap adds "stdout_truncated"/"stderr_truncated": true.
 * Replies without these conditions carry exactly the reference's fields.
 *
 * The read and the claim are one transaction (STORE_TXN_VOLATILE: never
 * flushed on its own, server/store.h), the outcome another, committed
 * before the answer:
 * the executions row with the amounts answered and the execution's key in
 * execution_outbox (meter_outbox_add()), from which the execution outbox
 * writes the usage event and both ledger
 * entries after the answer (server/meter.c, "The execution outbox"). So
 * an answered execute is metered exactly once even when the server dies
 * right after answering (crash of the server, and with
 * BESPOKE_DB_SYNCHRONOUS=full a power loss too); an unanswered one whose
 * claim was lost with the machine runs again when its request is sent
 * again. The store connection is given back while the command runs.
 *
 * Records made with an Idempotency-Key carry it as "idempotency_key"
 * (beyond the reference), and GET /v1/sandboxes?idempotency_key=K lists
 * the record of key K only: the contract's create has no labels, so the
 * key is how a client finds what it made.
 *
 * Session state (beyond the reference): each sandbox's libsbx session
 * state is kept sealed (AES-256-GCM under a key derived from the pepper,
 * server/util.c) in sandboxes.session_state_sealed, and the sandboxes are
 * made detached, so after a restart, or through another server process on
 * the same database, execute and terminate reattach to it (resume) where
 * the reference answers 409.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "util.h"

/* ---------------------------------------------------------------- helpers */

void
cx_init(cx *x, cp_server *srv)
{
    memset(x, 0, sizeof *x);
    x->srv = srv;
    x->set = cp_server_settings(srv);
    x->st = cp_server_store(srv);
    x->vt = store_vt(x->st);
}

void
cx_done(cx *x)
{
    if (x->c) {
        if (x->in_txn)
            x->vt->rollback(x->c);
        store_release(x->st, x->c);
    }
    x->c = NULL;
    x->in_txn = 0;
}

void
cx_release(cx *x)
{
    if (x->c && !x->in_txn) {
        store_release(x->st, x->c);
        x->c = NULL;
    }
}

static int
conn(cx *x)
{
    char *err = NULL;

    if (x->c)
        return 0;
    x->c = store_acquire(x->st, &err);
    if (!x->c) {
        fprintf(stderr, "sbx-server: store: %s\n", err ? err : "no connection");
        free(err);
        x->failed = 1;
        return -1;
    }
    return 0;
}

static void
log_store_error(const char *what, char *err)
{
    fprintf(stderr, "sbx-server: store %s failed: %s\n", what, err ? err : "?");
    free(err);
}

store_rows *
q(cx *x, const char *sql, size_t n, const char *const *p)
{
    store_rows *rows = NULL;
    char *err = NULL;

    if (conn(x) < 0)
        return NULL;
    if (x->vt->query(x->c, sql, n, p, &rows, &err) < 0) {
        log_store_error("query", err);
        x->failed = 1;
        return NULL;
    }
    return rows;
}

int64_t
ex(cx *x, const char *sql, size_t n, const char *const *p, int *conflict)
{
    char *err = NULL;
    int64_t rc;

    if (conn(x) < 0)
        return -1;
    rc = x->vt->exec(x->c, sql, n, p, conflict, &err);
    if (rc < 0) {
        if (!conflict || !*conflict)
            log_store_error("statement", err);
        else
            free(err);
        x->failed = 1;
    }
    return rc;
}

static int
begin_flags(cx *x, const char *lock, unsigned flags)
{
    char *err = NULL;

    if (conn(x) < 0)
        return -1;
    if (x->vt->begin(x->c, lock, flags, &err) < 0) {
        log_store_error("begin", err);
        x->failed = 1;
        return -1;
    }
    x->in_txn = 1;
    return 0;
}

int
tx_begin(cx *x, const char *lock)
{
    return begin_flags(x, lock, 0);
}

int
tx_begin_volatile(cx *x, const char *lock)
{
    return begin_flags(x, lock, STORE_TXN_VOLATILE);
}

int
tx_commit(cx *x)
{
    char *err = NULL;

    if (!x->in_txn)
        return -1;
    x->in_txn = 0;
    if (x->vt->commit(x->c, &err) < 0) {
        log_store_error("commit", err);
        x->vt->rollback(x->c);
        x->failed = 1;
        return -1;
    }
    return 0;
}

void
tx_rollback(cx *x)
{
    if (x->in_txn && x->c)
        x->vt->rollback(x->c);
    x->in_txn = 0;
}

void
cp_reply_json(cp_response *res, int status, json_object *body)
{
    json_object_put(res->body);
    res->status = status;
    res->body = body;
}

void
cp_reply_echo(cp_response *res)
{
    res->echo = 1;
}

void
cp_reply_detail(cp_response *res, int status, const char *message)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "detail", json_object_new_string(message));
    cp_reply_json(res, status, o);
}

void
reply_internal(cp_response *res)
{
    cp_reply_detail(res, 500, "Internal control-plane error.");
}

int
reply_has_validation_list(const cp_response *res)
{
    json_object *list;

    return res->status == 422 && res->body && json_object_object_get_ex(res->body, "detail", &list) &&
           json_object_is_type(list, json_type_array);
}

void
reply_validation_at(cp_response *res, const char *type, json_object *loc, const char *msg,
                    json_object *input, json_object *ctx)
{
    json_object *o, *list = NULL, *item = json_object_new_object();

    json_object_object_add(item, "type", json_object_new_string(type));
    json_object_object_add(item, "loc", loc);
    json_object_object_add(item, "msg", json_object_new_string(msg));
    json_object_object_add(item, "input", input);
    /* A ValueError's ctx is {"error": the exception}, which FastAPI's
     * encoder writes as {} (an exception has no fields). */
    if (!ctx && !strcmp(type, "value_error")) {
        ctx = json_object_new_object();
        json_object_object_add(ctx, "error", json_object_new_object());
    }
    if (ctx)
        json_object_object_add(item, "ctx", ctx);
    /* A body's every error is one item of the list, in the order found
     * (pydantic's: the model's fields in order, a list's or a dict's
     * items in order). */
    if (reply_has_validation_list(res) && json_object_object_get_ex(res->body, "detail", &list)) {
        json_object_array_add(list, item);
        return;
    }
    o = json_object_new_object();
    list = json_object_new_array();
    json_object_array_add(list, item);
    json_object_object_add(o, "detail", list);
    cp_reply_json(res, 422, o);
    cp_reply_echo(res);         /* @input is the request's */
}

void
reply_validation(cp_response *res, const char *type, const char *where, const char *field,
                 const char *msg, json_object *input)
{
    json_object *loc = json_object_new_array();

    json_object_array_add(loc, json_object_new_string(where));
    if (field)
        json_object_array_add(loc, json_object_new_string(field));
    reply_validation_at(res, type, loc, msg, input, NULL);
}

void
reply_validation_ctx(cp_response *res, const char *type, const char *where, const char *field,
                     const char *msg, json_object *input, json_object *ctx)
{
    json_object *loc = json_object_new_array();

    json_object_array_add(loc, json_object_new_string(where));
    if (field)
        json_object_array_add(loc, json_object_new_string(field));
    reply_validation_at(res, type, loc, msg, input, ctx);
}

void
reply_validation_item(cp_response *res, const char *type, const char *where,
                      const char *field, json_object *item, const char *msg,
                      json_object *input)
{
    json_object *loc = json_object_new_array();

    json_object_array_add(loc, json_object_new_string(where));
    json_object_array_add(loc, json_object_new_string(field));
    json_object_array_add(loc, item);
    reply_validation_at(res, type, loc, msg, input, NULL);
}

json_object *
cp_ctx_num(const char *name, json_object *value)
{
    json_object *ctx = json_object_new_object();

    json_object_object_add(ctx, name, value);
    return ctx;
}

void
reply_too_long(cp_response *res, const char *where, const char *field, const char *field_type,
               size_t max, size_t actual, json_object *input)
{
    json_object *ctx = json_object_new_object();
    char *m = cp_printf("%s should have at most %zu item%s after validation, not %zu",
                        field_type, max, max == 1 ? "" : "s", actual);

    json_object_object_add(ctx, "field_type", json_object_new_string(field_type));
    json_object_object_add(ctx, "max_length", json_object_new_int64((int64_t)max));
    json_object_object_add(ctx, "actual_length", json_object_new_int64((int64_t)actual));
    reply_validation_ctx(res, "too_long", where, field, m, input, ctx);
    free(m);
}

/* pydantic's refusal of a datetime for reason @why (its ctx "error"): as
 * the date parser's (datetime_from_date_parsing, "a valid datetime or
 * date") with @or_date, else datetime_parsing. Takes @input. */
static void
reply_datetime_error(cp_response *res, const char *where, const char *field, int or_date,
                     const char *why, json_object *input)
{
    char *m = cp_printf(or_date ? "Input should be a valid datetime or date, %s"
                                : "Input should be a valid datetime, %s", why);
    json_object *ctx = json_object_new_object();

    json_object_object_add(ctx, "error", json_object_new_string(why));
    reply_validation_ctx(res, or_date ? "datetime_from_date_parsing" : "datetime_parsing", where,
                         field, m, input, ctx);
    free(m);
}

void
reply_datetime_parsing(cp_response *res, const char *where, const char *field, const char *text,
                       json_object *input)
{
    reply_datetime_error(res, where, field, 1, cp_iso_error(text), input);
}

int
parse_datetime_value(cp_response *res, const char *where, const char *field, json_object *v,
                     int64_t *us)
{
    const char *why;
    double n;

    if (json_object_is_type(v, json_type_string)) {
        const char *text = json_object_get_string(v);
        int rc;
        if (cp_number_text(text, &n)) {
            /* The parser's range errors are the date parser's; year 0 is
             * refused after it, as a number's is. */
            if (cp_unix_time(n, us, &why) == 0)
                return 0;
            reply_datetime_error(res, where, field, strcmp(why, "year 0 is out of range") != 0,
                                 why, json_object_get(v));
            return -1;
        }
        rc = cp_parse_iso(text, us);
        if (rc == 0)
            return 0;
        if (rc == -2) {
            /* The handler's check, after the model's: a validation error
             * of another field already in @res is the answer, and so is
             * an earlier check of the handler (start's before end's). */
            if (!(res->status == 422 && res->body)) {
                char *m = cp_printf("%s must include a timezone", field);
                cp_reply_detail(res, 422, m);
                free(m);
            }
        } else {
            reply_datetime_parsing(res, where, field, text, json_object_get(v));
        }
        return -1;
    }
    if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
        n = json_object_is_type(v, json_type_int) ? (double)json_object_get_int64(v)
                                                  : json_object_get_double(v);
        if (cp_unix_time(n, us, &why) == 0)
            return 0;
        reply_datetime_error(res, where, field, 0, why, json_object_get(v));
        return -1;
    }
    reply_validation(res, "datetime_type", where, field, "Input should be a valid datetime",
                     json_object_get(v));
    return -1;
}

/* Member @key of @body as an optional string: *@out stays as it was when
 * it is absent or null; a value of another type is answered 422 (pydantic's
 * string_type, as the reference) and gives -1. */
static int
body_opt_string(json_object *body, const char *key, const char **out, cp_response *res)
{
    json_object *v;

    if (!json_object_object_get_ex(body, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_string)) {
        reply_validation(res, "string_type", "body", key, "Input should be a valid string",
                         json_object_get(v));
        return -1;
    }
    *out = json_object_get_string(v);
    return 0;
}

json_object *cp_body_object(const cp_request *req, cp_response *res);

/* The first value in @v that JSON text cannot carry to the rest of the
 * server, or NULL: a string with a NUL character (\u0000, which C strings
 * would cut short: a command would run truncated) or a number that is not
 * finite (NaN, Infinity, 1e400). @loc gets the path to it (array of keys
 * and indexes, after "body"), and *@type and *@msg the error's. */
static json_object *
body_bad_value(json_object *v, json_object *loc, const char **type, const char **msg)
{
    json_object *bad = NULL;

    switch (json_object_get_type(v)) {
    case json_type_string:
        if (strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v)) {
            *type = "string_type";
            *msg = "Input should be a string without NUL (\\u0000) characters";
            return v;
        }
        return NULL;
    case json_type_double:
        if (!isfinite(json_object_get_double(v))) {
            *type = "finite_number";
            *msg = "Input should be a finite number";
            return v;
        }
        return NULL;
    case json_type_object: {
        json_object_object_foreach(v, k, m) {
            json_object_array_add(loc, json_object_new_string(k));
            if ((bad = body_bad_value(m, loc, type, msg)) != NULL)
                return bad;
            json_object_array_del_idx(loc, json_object_array_length(loc) - 1, 1);
        }
        return NULL;
    }
    case json_type_array:
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            json_object_array_add(loc, json_object_new_int((int)i));
            if ((bad = body_bad_value(json_object_array_get_idx(v, i), loc, type, msg)) != NULL)
                return bad;
            json_object_array_del_idx(loc, json_object_array_length(loc) - 1, 1);
        }
        return NULL;
    default:
        return NULL;
    }
}

/* The whitespace JSON allows, from @p. */
static const char *
json_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string literal at @p (its opening quote). */
static const char *
json_str_end(const char *p, const char *end)
{
    for (p++; p < end && *p != '"'; p++)
        if (*p == '\\')
            p++;
    return p < end ? p + 1 : end;
}

/* The key literal [@k, @ke) as json-c decodes it (escapes and all), so it
 * names the member json-c made; NULL if it cannot be read. */
static json_object *
json_key(json_tokener *tok, const char *k, const char *ke)
{
    json_object *s;

    json_tokener_reset(tok);
    s = json_tokener_parse_ex(tok, k, (int)(ke - k));
    if (s && !json_object_is_type(s, json_type_string)) {
        json_object_put(s);
        s = NULL;
    }
    return s;
}

/* Walks the value at @p of the JSON text json-c parsed into @v (NULL where
 * the text's value is not in the tree: a member a later duplicate key
 * replaced) and gives every integer json-c could not hold (past int64 below
 * zero, past uint64 above; json-c keeps the nearest bound) its literal as
 * its JSON text, so that a 422 echoes the number exactly as it was sent,
 * as pydantic does (Python's ints have no bounds). An integer that fits
 * gets json-c's own text back (a duplicate key's earlier literal may have
 * marked it). Returns the end of the value. The text is JSON json-c read
 * in strict mode, so its shape is known. */
static const char *
keep_int_literals(json_tokener *tok, const char *p, const char *end, json_object *v)
{
    p = json_ws(p, end);
    if (p >= end)
        return end;
    if (*p == '{' || *p == '[') {
        int obj = *p == '{';
        char close = obj ? '}' : ']';
        size_t i = 0;
        p = json_ws(p + 1, end);
        while (p < end && *p != close) {
            json_object *child = NULL;
            if (obj) {
                const char *ke = json_str_end(p, end);
                json_object *k = json_key(tok, p, ke);
                if (k && json_object_is_type(v, json_type_object))
                    child = json_object_object_get(v, json_object_get_string(k));
                json_object_put(k);
                p = json_ws(ke, end);
                if (p < end)            /* ':' */
                    p++;
            } else if (json_object_is_type(v, json_type_array) &&
                       i < json_object_array_length(v)) {
                child = json_object_array_get_idx(v, i);
            }
            i++;
            p = json_ws(keep_int_literals(tok, p, end, child), end);
            if (p < end && *p == ',')
                p = json_ws(p + 1, end);
        }
        return p < end ? p + 1 : end;
    }
    if (*p == '"')
        return json_str_end(p, end);
    {
        const char *e = p;
        int integer = 1;
        while (e < end && (*e == '-' || *e == '+' || *e == '.' ||
                           (*e >= '0' && *e <= '9') || (*e >= 'a' && *e <= 'z') ||
                           (*e >= 'A' && *e <= 'Z'))) {
            if (!(*e >= '0' && *e <= '9') && !(*e == '-' && e == p))
                integer = 0;
            e++;
        }
        if (integer && e > p && json_object_is_type(v, json_type_int)) {
            char *lit = strndup(p, (size_t)(e - p));
            errno = 0;
            if (*lit == '-')
                (void)strtoll(lit, NULL, 10);
            else
                (void)strtoull(lit, NULL, 10);
            if (errno == ERANGE) {
                json_object_set_serializer(v, json_object_userdata_to_json_string, lit,
                                           json_object_free_userdata);
            } else {
                json_object_set_serializer(v, NULL, NULL, NULL);
                free(lit);
            }
        }
        return e;
    }
}

/* The request body as a JSON object, else the answer given (422 in the
 * reference's shapes) and NULL. The text is read as JSON is written
 * (json-c's strict mode: no comments, trailing commas, single-quoted
 * values or text after the value) and, when @utf8, must be UTF-8; a value
 * the server cannot use as sent (body_bad_value()) is 422 naming where it
 * is. A body that is JSON but not an object (null, 5, [1]) is pydantic's
 * model_attributes_type. An integer past int64 keeps its literal as its
 * JSON text (keep_int_literals()), so that an answer echoing it shows the
 * number sent; its value is json-c's nearest bound. */
static json_object *
body_object(const cp_request *req, cp_response *res, int utf8)
{
    json_tokener *tok;
    json_object *o, *bad, *where;
    const char *type = NULL, *msg = NULL;

    if (req->body_len == 0) {
        reply_validation(res, "missing", "body", NULL, "Field required", NULL);
        return NULL;
    }
    tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | (utf8 ? JSON_TOKENER_VALIDATE_UTF8 : 0));
    /* With the body's terminating NUL (server/http.c keeps one after the
     * bytes), so that a scalar at the end ("null", "5") is complete. */
    o = json_tokener_parse_ex(tok, req->body, (int)req->body_len + 1);
    if (!o && json_tokener_get_error(tok) == json_tokener_success)
        o = NULL;
    if (json_tokener_get_error(tok) != json_tokener_success ||
        (size_t)json_tokener_get_parse_end(tok) != req->body_len) {
        json_object *ctx = json_object_new_object(), *loc = json_object_new_array();
        json_object_put(o);
        json_object_array_add(loc, json_object_new_string("body"));
        json_object_array_add(loc, json_object_new_int((int)json_tokener_get_parse_end(tok)));
        json_object_object_add(ctx, "error", json_object_new_string(
                                   json_tokener_error_desc(json_tokener_get_error(tok))));
        reply_validation_at(res, "json_invalid", loc, "JSON decode error", json_object_new_object(),
                            ctx);
        json_tokener_free(tok);
        return NULL;
    }
    keep_int_literals(tok, req->body, req->body + req->body_len, o);
    json_tokener_free(tok);
    where = json_object_new_array();
    json_object_array_add(where, json_object_new_string("body"));
    if ((bad = body_bad_value(o, where, &type, &msg)) != NULL) {
        /* A non-finite number as the text it was sent as: JSON has none. */
        reply_validation_at(res, type, where, msg,
                            json_object_is_type(bad, json_type_double)
                                ? json_object_new_string(json_object_to_json_string(bad))
                                : json_object_get(bad),
                            NULL);
        json_object_put(o);
        return NULL;
    }
    json_object_put(where);
    if (!json_object_is_type(o, json_type_object)) {
        reply_validation(res, "model_attributes_type", "body", NULL,
                         "Input should be a valid dictionary or object to extract fields from",
                         o);
        return NULL;
    }
    return o;
}

/* The body of a request whose strings are stored or shown again (create,
 * keys, organizations): UTF-8 text only, so every answer is valid JSON. */
json_object *
cp_body_object(const cp_request *req, cp_response *res)
{
    return body_object(req, res, 1);
}

static json_object *
jstr(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

static json_object *
jparse(const char *s)
{
    return s ? json_tokener_parse(s) : NULL;
}

/* ---------------------------------------------------------------- records */

#define SANDBOX_SELECT \
    "SELECT s.*, ck.name AS creator_api_key_name, tk.name AS terminated_by_api_key_name," \
    " (SELECT COUNT(*) FROM sandbox_creation_attempts a WHERE a.sandbox_id = s.id)"        \
    " AS attempt_count FROM sandboxes s"                                                   \
    " LEFT JOIN api_keys ck ON ck.id = s.creator_api_key_id"                               \
    " LEFT JOIN api_keys tk ON tk.id = s.terminated_by_api_key_id "

/* The contract's sandbox record of row @i. */
static json_object *
record_json(const store_rows *r, size_t i)
{
    json_object *o = json_object_new_object();
    const char *err = store_cell(r, i, "error");
    static const char *const times[] = { "requested_at", "provisioning_at", "running_at",
                                         "stopping_at", "terminated_at", "failed_at",
                                         "last_provider_observed_at" };

    json_object_object_add(o, "id", jstr(store_cell(r, i, "id")));
    json_object_object_add(o, "backend", jstr(store_cell(r, i, "backend")));
    json_object_object_add(o, "status", jstr(store_cell(r, i, "status")));
    json_object_object_add(o, "config", jparse(store_cell(r, i, "config_json")));
    json_object_object_add(o, "created_at", jstr(store_cell(r, i, "created_at")));
    json_object_object_add(o, "destroyed_at", jstr(store_cell(r, i, "destroyed_at")));
    json_object_object_add(o, "error", err ? jstr("Sandbox operation failed.") : NULL);
    json_object_object_add(o, "attempt_count",
                           json_object_new_int(atoi(store_cell(r, i, "attempt_count"))));
    json_object_object_add(o, "latest_error", jparse(store_cell(r, i, "latest_error_json")));
    json_object_object_add(o, "retry_status", jstr(store_cell(r, i, "retry_status")));
    json_object_object_add(o, "cleanup_status", jstr(store_cell(r, i, "cleanup_status")));
    json_object_object_add(o, "provider_resource_id",
                           jstr(store_cell(r, i, "provider_resource_id")));
    for (size_t k = 0; k < sizeof times / sizeof times[0]; k++)
        json_object_object_add(o, times[k], jstr(store_cell(r, i, times[k])));
    json_object_object_add(o, "hourly_rate_usd", jstr(store_cell(r, i, "hourly_rate_usd")));
    json_object_object_add(o, "currency", jstr(store_cell(r, i, "currency")));
    json_object_object_add(o, "pricing_source", jstr(store_cell(r, i, "pricing_source")));
    json_object_object_add(o, "cost_state", jstr(store_cell(r, i, "cost_state")));
    json_object_object_add(o, "provider_missing",
                           json_object_new_boolean(atoi(store_cell(r, i, "provider_missing"))));
    json_object_object_add(o, "creator_api_key_id", jstr(store_cell(r, i, "creator_api_key_id")));
    json_object_object_add(o, "creator_api_key_name",
                           jstr(store_cell(r, i, "creator_api_key_name")));
    json_object_object_add(o, "version", json_object_new_int(atoi(store_cell(r, i, "version"))));
    json_object_object_add(o, "expires_at", jstr(store_cell(r, i, "expires_at")));
    json_object_object_add(o, "terminated_by_api_key_id",
                           jstr(store_cell(r, i, "terminated_by_api_key_id")));
    json_object_object_add(o, "terminated_by_api_key_name",
                           jstr(store_cell(r, i, "terminated_by_api_key_name")));
    json_object_object_add(o, "termination_reason", jstr(store_cell(r, i, "termination_reason")));
    /* Beyond the reference: the create's Idempotency-Key, only on records
     * made with one (so a record without carries exactly the reference's
     * fields). The contract's create carries no labels or metadata (unknown
     * body fields are dropped), so this key is what a client can find its
     * creates by: libsbx's remote backend sends its create token as the key
     * and lists its sandboxes by it (list_owned, `sbx gc`). */
    if (store_cell(r, i, "idempotency_key"))
        json_object_object_add(o, "idempotency_key", jstr(store_cell(r, i, "idempotency_key")));
    return o;
}

/* Replies @status with @body, made of stored records (cp_reply_echo()). */
static void
reply_stored(cp_response *res, int status, json_object *body)
{
    cp_reply_json(res, status, body);
    cp_reply_echo(res);
}

/* The sandbox @id of @org (NULL rows when none; NULL on failure). */
static store_rows *
load_sandbox(cx *x, const char *org, const char *id)
{
    return q(x, SANDBOX_SELECT "WHERE s.id = ? AND s.organization_id = ?", P(id, org));
}

/* Replies 200/201 with the current record of @id. */
static void
reply_record(cx *x, cp_response *res, int status, const char *org, const char *id)
{
    store_rows *r = load_sandbox(x, org, id);

    if (!r) {
        reply_internal(res);
        return;
    }
    if (r->nrows == 0)
        cp_reply_detail(res, 404, "sandbox not found");
    else
        reply_stored(res, status, record_json(r, 0));
    store_rows_free(r);
}

/* ---------------------------------------------------------------- provider errors */

static const char *
fixed_message(const char *code)
{
    static const char *const m[][2] = {
        { "authentication", "Provider authentication failed." },
        { "backend_not_installed", "Provider backend is unavailable." },
        { "configuration", "Provider configuration is invalid." },
        { "connection", "Provider connection failed." },
        { "creation_failed", "Provider sandbox creation failed." },
        { "execution_failed", "Provider execution failed." },
        { "not_found", "Provider resource was not found." },
        { "timeout", "Provider request timed out." },
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (!strcmp(m[i][0], code))
            return m[i][1];
    return "Provider operation failed.";
}

/* An allowlisted provider id: ^[A-Za-z0-9_.:/-]{1,255}$ without a secret's
 * marks. */
static int
safe_token(const char *v)
{
    size_t n = strlen(v);
    static const char *const bad[] = { "bsk_live_", "api_key", "password", "secret" };

    if (n == 0 || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              strchr("_.:/-", c)))
            return 0;
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (strcasestr(v, bad[i]))
            return 0;
    return 1;
}

/* The contract's error payload (CONTROL-PLANE.md §0) of an operation @op
 * on @backend ("" when NULL) that failed with error code @code (a libsbx
 * code name, whose fixed message the payload carries): @retryable, @unknown
 * (the outcome is "unknown", else "failed") and @ctx, its allowlisted
 * context object (taken; an empty one when NULL). A new object. */
static json_object *
error_payload(const char *code, const char *backend, const char *op, int retryable,
              int unknown, json_object *ctx)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "message", json_object_new_string(fixed_message(code)));
    json_object_object_add(o, "code", json_object_new_string(code));
    json_object_object_add(o, "backend", json_object_new_string(backend ? backend : ""));
    json_object_object_add(o, "op", json_object_new_string(op));
    json_object_object_add(o, "retryable", json_object_new_boolean(retryable));
    json_object_object_add(o, "outcome", json_object_new_string(unknown ? "unknown" : "failed"));
    json_object_object_add(o, "context", ctx ? ctx : json_object_new_object());
    return o;
}

/* The contract's provider error payload for @e during @op: the fixed
 * message per code, and only the allowlisted context (CONTROL-PLANE.md §0),
 * so no provider text (which may echo a credential, CASE-36) leaves. */
static json_object *
provider_payload(const sbx_error *e, const char *backend, const char *op, int *http_status)
{
    json_object *ctx = json_object_new_object();
    sbx_error_code code = e ? sbx_error_get_code(e) : SBX_ERROR_UNKNOWN;
    int unknown = e && sbx_error_get_outcome(e) == SBX_ERROR_OUTCOME_UNKNOWN;
    int retryable = e && sbx_error_is_retryable(e);
    size_t n = e ? sbx_error_get_context_count(e) : 0;

    if (code == SBX_ERROR_UNKNOWN)
        code = !strcmp(op, "create") ? SBX_ERROR_CREATION_FAILED : SBX_ERROR_EXECUTION_FAILED;
    if (!strcmp(op, "create") && unknown)
        retryable = 0;
    for (size_t i = 0; i < n; i++) {
        const char *k = NULL, *v = NULL;
        if (sbx_error_get0_context_at(e, i, &k, &v) < 0 || !k || !v)
            continue;
        if (!strcmp(k, "exit_code") || !strcmp(k, "provider_status")) {
            char *end;
            long iv = strtol(v, &end, 10);
            if (*v && !*end)
                json_object_object_add(ctx, k, json_object_new_int((int)iv));
        } else if (!strcmp(k, "cleanup_status")) {
            if (!strcmp(v, "not_found") || !strcmp(v, "deleted") || !strcmp(v, "unknown"))
                json_object_object_add(ctx, k, json_object_new_string(v));
        } else if (!strcmp(k, "provider_code") || !strcmp(k, "provider_resource_id")) {
            if (safe_token(v))
                json_object_object_add(ctx, k, json_object_new_string(v));
        }
    }
    switch (code) {
    case SBX_ERROR_BACKEND_NOT_INSTALLED:
    case SBX_ERROR_CONFIGURATION:
    case SBX_ERROR_INVALID_ARGUMENT:
        *http_status = 422;
        break;
    case SBX_ERROR_TIMEOUT:
        *http_status = 504;
        break;
    default:
        *http_status = 502;
    }
    return error_payload(sbx_error_code_name(code), backend, op, retryable, unknown, ctx);
}

static void
reply_payload(cp_response *res, int status, json_object *payload)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "detail", payload);
    cp_reply_json(res, status, o);
}

/* An Idempotency-Key is shown in answers (the record's idempotency_key, the
 * execute's request_id), which are JSON and so UTF-8: a key must be UTF-8
 * text without control characters (bytes below 0x20, DEL), else 422 with
 * this detail. */
#define IDEMPOTENCY_KEY_TEXT "idempotency key must be UTF-8 text without control characters"

static int
idempotency_key_is_text(const char *k)
{
    for (const char *p = k; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return 0;
    return cp_utf8_valid(k, strlen(k));
}

/* ---------------------------------------------------------------- create */

typedef struct create_req {
    const char *backend_raw;
    char backend[64];
    json_object *canon;           /* fingerprinted fields (with backend), coerced */
    json_object *config;          /* stored config */
    double cpu;                   /* 1 when absent */
    int64_t memory_mb;            /* 1024 when absent */
    int64_t disk_mb, timeout_secs; /* 0 when absent */
    const char *gpu;
} create_req;

/* A JSON number for @d printed as Python's repr() does: the shortest
 * digits that read back as @d, in fixed notation with at least one
 * decimal when the exponent is within [-4, 16) ("2.0", "10.0", "0.0001"),
 * else in exponent notation ("1e+16", "1.5e-05"). */
static json_object *
jdouble(double d)
{
    char buf[40];
    int prec, exp10;

    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    exp10 = atoi(strchr(buf, 'e') + 1);
    if (exp10 >= -4 && exp10 < 16)
        snprintf(buf, sizeof buf, "%.*f", prec - 1 - exp10 > 0 ? prec - 1 - exp10 : 1, d);
    return json_object_new_double_s(d, buf);
}

/* The input of a refusal: @v as sent, a float as Python's repr() writes
 * it (pydantic echoes the float json.loads() made). */
static json_object *
lax_input(json_object *v)
{
    return json_object_is_type(v, json_type_double) ? jdouble(json_object_get_double(v))
                                                    : json_object_get(v);
}

int
body_int_gt0(cp_response *res, const char *field, json_object *v, int64_t *out, int *range)
{
    cp_lax_error err;

    if (cp_lax_int(v, out, range, &err) < 0) {
        reply_validation(res, err.type, "body", field, err.msg, lax_input(v));
        return -1;
    }
    if (*out <= 0) {
        reply_validation_ctx(res, "greater_than", "body", field, "Input should be greater than 0",
                             lax_input(v), cp_ctx_num("gt", json_object_new_int(0)));
        return -1;
    }
    return 0;
}

int
body_float_gt0(cp_response *res, const char *field, json_object *v, double *out)
{
    cp_lax_error err;

    if (cp_lax_float(v, out, &err) < 0) {
        reply_validation(res, err.type, "body", field, err.msg, json_object_get(v));
        return -1;
    }
    if (!(*out > 0)) {
        reply_validation_ctx(res, "greater_than", "body", field, "Input should be greater than 0",
                             lax_input(v), cp_ctx_num("gt", json_object_new_double(0)));
        return -1;
    }
    if (isinf(*out)) {
        reply_validation(res, "finite_number", "body", field, "Input should be a finite number",
                         lax_input(v));
        return -1;
    }
    return 0;
}

int
body_bool(cp_response *res, const char *field, json_object *v, int *out)
{
    cp_lax_error err;

    if (cp_lax_bool(v, out, &err) < 0) {
        reply_validation(res, err.type, "body", field, err.msg, json_object_get(v));
        return -1;
    }
    return 0;
}

static int
cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* An environment variable's name: not empty, no '=' (libsbx's rule; a
 * name "A=B" would set A to "B=..."). The 422's message when it is not. */
#define ENV_NAME_RULE "Value error, an environment variable name must not be empty or contain '='"

static int
env_name_ok(const char *name)
{
    return *name != '\0' && strchr(name, '=') == NULL;
}

/* 9999-12-31T23:59:59Z in seconds since the epoch: the last time a record
 * shows. */
#define CP_LAST_SECOND INT64_C(253402300799)

/* How a create field is read (pydantic's type of the reference's model). */
enum {
    CF_BACKEND,                 /* str, required; trimmed and lowercased */
    CF_STR,                     /* str */
    CF_FLOAT_GT0,               /* float, gt=0 */
    CF_INT_GT0,                 /* int, gt=0 */
    CF_BOOL,                    /* bool */
    CF_ENV,                     /* dict[str, str], at most 256 */
};

/* The create model's fields, in the reference's order: pydantic validates
 * them in this order, and its 422 lists their refusals so. */
static const struct create_field {
    const char *name;
    int kind;
} create_fields[] = {
    { "backend", CF_BACKEND },  { "preset", CF_STR },       { "cpu", CF_FLOAT_GT0 },
    { "memory_mb", CF_INT_GT0 }, { "disk_mb", CF_INT_GT0 }, { "gpu", CF_STR },
    { "timeout_secs", CF_INT_GT0 }, { "image", CF_STR },    { "env_vars", CF_ENV },
    { "allow_internet", CF_BOOL }, { "app_name", CF_STR },  { "template", CF_STR },
    { "snapshot_id", CF_STR },  { "workdir", CF_STR },      { "git_repo", CF_STR },
    { "git_ref", CF_STR },
};
#define N_CREATE_FIELDS (sizeof create_fields / sizeof create_fields[0])

static int
cmp_create_field(const void *a, const void *b)
{
    return strcmp(create_fields[*(const size_t *)a].name, create_fields[*(const size_t *)b].name);
}

/* The create's backend: trimmed of spaces, tabs and newlines, lowercased
 * (at most 63 bytes kept). */
static void
normalize_backend(create_req *c, json_object *v)
{
    const char *s = json_object_get_string(v), *e;

    while (*s == ' ' || *s == '\t' || *s == '\n')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n'))
        e--;
    c->backend_raw = json_object_get_string(v);
    if ((size_t)(e - s) >= sizeof c->backend)
        e = s + sizeof c->backend - 1;
    for (size_t i = 0; s + i < e; i++)
        c->backend[i] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] + 32 : s[i]);
}

/* env_vars @v (a JSON value, not null) as {name: value} sorted by name into
 * *@canon, and the sorted names into *@names; 0, or -1 with the 422. In
 * pydantic's order: each value's type (every value that is no string is
 * an item of the 422), the length (at most 256), then the names (a
 * validator after those). */
static int
read_env_vars(json_object *v, json_object **canon, json_object **names, cp_response *res)
{
    const char **keys;
    size_t nk = 0, total;

    if (!json_object_is_type(v, json_type_object)) {
        reply_validation(res, "dict_type", "body", "env_vars", "Input should be a valid dictionary",
                         json_object_get(v));
        return -1;
    }
    int bad = 0;
    json_object_object_foreach(v, tk, tv) {
        if (!json_object_is_type(tv, json_type_string)) {
            reply_validation_item(res, "string_type", "body", "env_vars",
                                  json_object_new_string(tk), "Input should be a valid string",
                                  json_object_get(tv));
            bad = 1;
        }
    }
    if (bad)
        return -1;
    total = (size_t)json_object_object_length(v);
    if (total > 256) {
        reply_too_long(res, "body", "env_vars", "Dictionary", 256, total, json_object_get(v));
        return -1;
    }
    json_object_object_foreach(v, nk_, nv) {
        (void)nv;
        if (!env_name_ok(nk_)) {
            reply_validation(res, "value_error", "body", "env_vars", ENV_NAME_RULE,
                             json_object_new_string(nk_));
            return -1;
        }
    }
    keys = calloc(total ? total : 1, sizeof *keys);
    json_object_object_foreach(v, key, val) {
        (void)val;
        keys[nk++] = key;
    }
    qsort(keys, nk, sizeof keys[0], cmp_key);
    *canon = json_object_new_object();
    *names = json_object_new_array();
    for (size_t i = 0; i < nk; i++) {
        json_object_object_add(*canon, keys[i], json_object_get(json_object_object_get(v, keys[i])));
        json_object_array_add(*names, json_object_new_string(keys[i]));
    }
    free(keys);
    return 0;
}

/* ------------------------------------------------------------ the fingerprint's text */

/* @len bytes of UTF-8 at @s as a JSON string of Python's json.dumps with
 * ensure_ascii (its default): \" \\ \b \f \n \r \t, every other
 * character outside ' '..'~' as \uXXXX in lower-case hex (a surrogate pair
 * past U+FFFF); a byte that starts no UTF-8 sequence as U+FFFD. */
static void
canon_put_string(FILE *f, const unsigned char *s, size_t len)
{
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned c = s[i], cp;
        size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0 ? 4 : 0;
        int ok = n > 0 && i + n <= len;

        cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
        for (size_t k = 1; ok && k < n; k++) {
            ok = (s[i + k] & 0xc0) == 0x80;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (!ok) {
            cp = 0xfffd;
            n = 1;
        }
        i += n;
        switch (cp) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (cp >= 0x20 && cp <= 0x7e)
                fputc((int)cp, f);
            else if (cp < 0x10000)
                fprintf(f, "\\u%04x", cp);
            else
                fprintf(f, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                        0xdc00 + ((cp - 0x10000) & 0x3ff));
        }
    }
    fputc('"', f);
}

static int
canon_cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void
canon_put(FILE *f, json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        fputs("null", f);
        break;
    case json_type_boolean:
        fputs(json_object_get_boolean(v) ? "true" : "false", f);
        break;
    case json_type_int:
        fprintf(f, "%lld", (long long)json_object_get_int64(v));
        break;
    case json_type_double:
        /* jdouble()'s values carry Python's repr as their text. */
        fputs(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), f);
        break;
    case json_type_string:
        canon_put_string(f, (const unsigned char *)json_object_get_string(v),
                         (size_t)json_object_get_string_len(v));
        break;
    case json_type_array:
        fputc('[', f);
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            if (i)
                fputc(',', f);
            canon_put(f, json_object_array_get_idx(v, i));
        }
        fputc(']', f);
        break;
    case json_type_object: {
        size_t n = (size_t)json_object_object_length(v), i = 0;
        const char **keys = calloc(n ? n : 1, sizeof *keys);

        if (!keys)
            abort();
        json_object_object_foreach(v, k, val) {
            (void)val;
            keys[i++] = k;
        }
        qsort(keys, n, sizeof *keys, canon_cmp_keys);
        fputc('{', f);
        for (i = 0; i < n; i++) {
            if (i)
                fputc(',', f);
            canon_put_string(f, (const unsigned char *)keys[i], strlen(keys[i]));
            fputc(':', f);
            canon_put(f, json_object_object_get(v, keys[i]));
        }
        fputc('}', f);
        free(keys);
        break;
    }
    }
}

/* The text a create's fingerprint hashes (CONTROL-PLANE.md §3): @v as
 * Python's json.dumps(v, sort_keys=True, separators=(",", ":")) writes it,
 * so that a body gives the reference's bytes. New string; aborts on out of
 * memory. */
static char *
canonical_json(json_object *v)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (!f)
        abort();
    canon_put(f, v);
    if (fclose(f) != 0 || !text)
        abort();
    return text;
}

/* Validates the create body into @c (CONTROL-PLANE.md §1) as the
 * reference's pydantic model does, lax mode (server/lax.h): each field
 * read by the reader of its type, in the model's order, every field's
 * error an item of the one 422; NULL fields are absent, unknown fields
 * dropped. c->canon (fingerprinted, backend
 * included) and c->config (stored; env_vars as env_var_names, left out
 * when empty) hold the coerced values with their keys sorted, so
 * {"timeout_secs": "5"} and {"timeout_secs": 5} are one request. 0, or -1
 * with a 422 in @res. */
static int
parse_create(json_object *body, create_req *c, cp_response *res)
{
    json_object *val[N_CREATE_FIELDS] = { NULL }, *env_names = NULL, *v;
    size_t order[N_CREATE_FIELDS];
    int rc = -1, bad = 0;

    memset(c, 0, sizeof *c);
    c->cpu = 1;
    c->memory_mb = 1024;
    for (size_t k = 0; k < N_CREATE_FIELDS; k++) {
        const char *f = create_fields[k].name;
        if (!json_object_object_get_ex(body, f, &v) || json_object_is_type(v, json_type_null)) {
            if (create_fields[k].kind == CF_BACKEND) {
                reply_validation(res, "missing", "body", f, "Field required",
                                 json_object_get(body));
                bad = 1;
                continue;
            }
            continue;
        }
        switch (create_fields[k].kind) {
        case CF_BACKEND:
        case CF_STR:
            if (!json_object_is_type(v, json_type_string)) {
                reply_validation(res, "string_type", "body", f, "Input should be a valid string",
                                 json_object_get(v));
                bad = 1;
                continue;
            }
            if (create_fields[k].kind == CF_BACKEND) {
                normalize_backend(c, v);
                val[k] = json_object_new_string(c->backend);
            } else {
                val[k] = json_object_get(v);
                if (!strcmp(f, "gpu"))
                    c->gpu = json_object_get_string(v);
            }
            break;
        case CF_FLOAT_GT0: {
            double d;
            if (body_float_gt0(res, f, v, &d) < 0) {
                bad = 1;
                continue;
            }
            c->cpu = d;
            val[k] = jdouble(d);
            break;
        }
        case CF_INT_GT0: {
            int64_t iv;
            int range;
            if (body_int_gt0(res, f, v, &iv, &range) < 0) {
                bad = 1;
                continue;
            }
            /* Past INT64_MAX (timeout_secs is bounded below, as its
             * expiry): pydantic's words for a bound at INT64_MAX, which
             * is what the server can carry, rather than a value cut to it. */
            if (range == CP_LAX_ABOVE && strcmp(f, "timeout_secs") != 0) {
                reply_validation_ctx(res, "less_than_equal", "body", f,
                                     "Input should be less than or equal to "
                                     "9223372036854775807", json_object_get(v),
                                     cp_ctx_num("le", json_object_new_int64(INT64_MAX)));
                bad = 1;
                continue;
            }
            /* The expiry (now + timeout_secs) must be a time the record
             * can show: at most 9999-12-31T23:59:59Z (the reference's
             * datetime raises past it), and never an int64 overflow. */
            if (!strcmp(f, "timeout_secs") && iv > CP_LAST_SECOND - cp_now_us() / 1000000) {
                int64_t le = CP_LAST_SECOND - cp_now_us() / 1000000;
                char *m = cp_printf("Input should be less than or equal to %lld", (long long)le);
                reply_validation_ctx(res, "less_than_equal", "body", f, m, json_object_get(v),
                                     cp_ctx_num("le", json_object_new_int64(le)));
                free(m);
                bad = 1;
                continue;
            }
            if (!strcmp(f, "memory_mb"))
                c->memory_mb = iv;
            else if (!strcmp(f, "disk_mb"))
                c->disk_mb = iv;
            else
                c->timeout_secs = iv;
            val[k] = json_object_new_int64(iv);
            break;
        }
        case CF_BOOL: {
            int bv;
            if (body_bool(res, f, v, &bv) < 0) {
                bad = 1;
                continue;
            }
            val[k] = json_object_new_boolean(bv);
            break;
        }
        case CF_ENV:
            if (read_env_vars(v, &val[k], &env_names, res) < 0) {
                bad = 1;
                continue;
            }
            break;
        }
    }
    if (bad)
        goto out;
    /* The canonical object and the config: keys in sorted order. */
    for (size_t k = 0; k < N_CREATE_FIELDS; k++)
        order[k] = k;
    qsort(order, N_CREATE_FIELDS, sizeof order[0], cmp_create_field);
    c->canon = json_object_new_object();
    c->config = json_object_new_object();
    for (size_t i = 0; i < N_CREATE_FIELDS; i++) {
        size_t k = order[i];
        const char *f = create_fields[k].name;
        if (!val[k])
            continue;
        json_object_object_add(c->canon, f, json_object_get(val[k]));
        if (create_fields[k].kind == CF_ENV) {
            if (json_object_array_length(env_names))
                json_object_object_add(c->config, "env_var_names", json_object_get(env_names));
        } else if (create_fields[k].kind != CF_BACKEND) {
            json_object_object_add(c->config, f, json_object_get(val[k]));
        }
    }
    rc = 0;
out:
    for (size_t k = 0; k < N_CREATE_FIELDS; k++)
        json_object_put(val[k]);
    json_object_put(env_names);
    return rc;
}

static void
create_req_free(create_req *c)
{
    json_object_put(c->canon);
    json_object_put(c->config);
}

/* The libsbx options of a create whose body parse_create() read into @c:
 * its coerced values (c->canon); NULL with *@e. */
static sbx_options *
options_of(const create_req *c, sbx_error **e)
{
    sbx_options *o = sbx_options_new();
    json_object *v;
    int rc = 0;

#define HAS(name) json_object_object_get_ex(c->canon, name, &v)
#define STR(name) (HAS(name) ? json_object_get_string(v) : NULL)
    if (STR("preset"))
        rc |= sbx_options_set_preset(o, STR("preset"), e);
    if (!rc && HAS("cpu"))
        rc |= sbx_options_set_cpu(o, c->cpu, e);
    if (!rc && HAS("memory_mb"))
        rc |= sbx_options_set_memory_mb(o, c->memory_mb, e);
    if (!rc && HAS("disk_mb"))
        rc |= sbx_options_set_disk_mb(o, c->disk_mb, e);
    if (!rc && c->timeout_secs)
        rc |= sbx_options_set_timeout_secs(o, (double)c->timeout_secs, e);
    if (!rc && STR("gpu"))
        rc |= sbx_options_set_gpu(o, STR("gpu"), e);
    if (!rc && STR("image"))
        rc |= sbx_options_set_image(o, STR("image"), e);
    if (!rc && STR("template"))
        rc |= sbx_options_set_template(o, STR("template"), e);
    if (!rc && STR("snapshot_id"))
        rc |= sbx_options_set_snapshot_id(o, STR("snapshot_id"), e);
    if (!rc && STR("app_name"))
        rc |= sbx_options_set_app_name(o, STR("app_name"), e);
    if (!rc && STR("workdir"))
        rc |= sbx_options_set_workdir(o, STR("workdir"), e);
    if (!rc && STR("git_repo"))
        rc |= sbx_options_set_git_repo(o, STR("git_repo"), STR("git_ref"), e);
    if (!rc && HAS("allow_internet"))
        rc |= sbx_options_set_allow_internet(o, json_object_get_boolean(v), e);
    if (!rc && HAS("env_vars")) {
        json_object_object_foreach(v, key, val) {
            if (!rc)
                rc |= sbx_options_set_env(o, key, json_object_get_string(val), e);
        }
    }
#undef STR
#undef HAS
    /* Detached: the sandbox outlives this process's plugin host, so a
     * restarted server (or another replica) reattaches to it. */
    if (!rc)
        rc |= sbx_options_set_detached(o, 1, e);
    if (rc) {
        sbx_options_free(o);
        return NULL;
    }
    return o;
}

static void
h_sandbox_create(cx *x, cp_request *req, cp_response *res)
{
    const char *key = cp_header(req, "Idempotency-Key");
    json_object *body;
    create_req c;
    char fp[65], now[40], expires[40], rate_text[40], lock[400];
    const char *exp_p = NULL;
    char *id = NULL, *att = NULL, *config_text = NULL, *canon_text = NULL;
    store_rows *r = NULL;
    int64_t now_us, rate;
    sbx_client *client;
    sbx_options *opts = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;

    if (!cp_require_scope(req, res, "sandboxes:create"))
        return;
    body = cp_body_object(req, res);
    if (!body)
        return;
    if (parse_create(body, &c, res) < 0)
        goto out;
    if (!cp_backend_enabled(cp_server_runtimes(x->srv), c.backend)) {
        char *m = cp_printf("backend is not enabled: %s", c.backend);
        cp_reply_detail(res, 422, m);
        cp_reply_echo(res);     /* the name as sent, cut at 63 bytes */
        free(m);
        goto out;
    }
    if (key && (strlen(key) < 1 || strlen(key) > 255)) {
        cp_reply_detail(res, 422, "idempotency key must contain 1 to 255 characters");
        goto out;
    }
    if (key && !idempotency_key_is_text(key)) {
        cp_reply_detail(res, 422, IDEMPOTENCY_KEY_TEXT);
        goto out;
    }
    canon_text = canonical_json(c.canon);
    cp_hmac_hex(x->set->pepper, canon_text, strlen(canon_text), fp);
    config_text = strdup(json_object_to_json_string_ext(c.config, JSON_C_TO_STRING_PLAIN |
                                                                       JSON_C_TO_STRING_NOSLASHESCAPE));
    now_us = cp_now_us();
    cp_iso(now_us, now, sizeof now);
    if (c.timeout_secs) {
        cp_iso(now_us + c.timeout_secs * 1000000, expires, sizeof expires);
        exp_p = expires;
    }
    rate = meter_hourly_rate(c.backend, c.cpu, c.memory_mb, c.gpu);
    meter_fmt(rate, 12, rate_text, sizeof rate_text);
    id = cp_new_id("sbx");
    att = cp_new_id("att");

    /* One transaction: the reservation (or the replay decision) and the
     * record. */
    snprintf(lock, sizeof lock, "idempotency:%s:%s", req->who.org_id, key ? key : id);
    if (tx_begin(x, lock) < 0)
        goto internal;
    if (key) {
        r = q(x, "SELECT id, request_fingerprint FROM sandboxes"
                 " WHERE organization_id = ? AND idempotency_key = ?",
              P(req->who.org_id, key));
        if (!r)
            goto internal;
        if (r->nrows) {
            int same = cp_consttime_eq(store_cell(r, 0, "request_fingerprint"), fp);
            char *prev = strdup(store_cell(r, 0, "id"));
            if (!same) {
                /* Records of a server that hashed json-c's text of the
                 * object ("\/" for "/", UTF-8 unescaped), before the
                 * fingerprint followed Python's: their keys still
                 * replay. */
                const char *old = json_object_to_json_string_ext(c.canon, JSON_C_TO_STRING_PLAIN);
                char fp_old[65];
                cp_hmac_hex(x->set->pepper, old, strlen(old), fp_old);
                same = cp_consttime_eq(store_cell(r, 0, "request_fingerprint"), fp_old);
            }
            tx_rollback(x);
            if (same)
                reply_record(x, res, 201, req->who.org_id, prev);
            else
                cp_reply_detail(res, 409,
                                "idempotency key was already used with a different request");
            free(prev);
            goto out;
        }
        store_rows_free(r);
        r = NULL;
    }
    if (ex(x, "INSERT INTO sandboxes(id, organization_id, backend, status, config_json,"
              " created_at, idempotency_key, request_fingerprint, retry_status, requested_at,"
              " provisioning_at, hourly_rate_usd, currency, pricing_source, cost_state,"
              " provider_missing, creator_api_key_id, version, expires_at)"
              " VALUES (?, ?, ?, 'creating', ?, ?, ?, ?, 'not_applicable', ?, ?, ?, 'USD', ?,"
              " 'estimated', 0, ?, 1, ?)",
           P(id, req->who.org_id, c.backend, config_text, now, key, fp, now, now, rate_text,
             meter_price_version(), req->who.key_id, exp_p), NULL) < 0 ||
        ex(x, "INSERT INTO sandbox_creation_attempts(id, sandbox_id, attempt_number, status,"
              " retry_status, started_at) VALUES (?, ?, 1, 'creating', 'not_applicable', ?)",
           P(att, id, now), NULL) < 0 ||
        tx_commit(x) < 0)
        goto internal;

    /* The provider call, after the commit. */
    client = cp_runtime_client(cp_server_runtimes(x->srv), c.backend, &e);
    opts = client ? options_of(&c, &e) : NULL;
    sb = opts ? sbx_sandbox_create(client, opts, &e) : NULL;
    if (sb && getenv("SBX_SERVER_TEST_CRASH_AFTER_PROVIDER_CREATE")) {
        /* Test hook: die between the provider create and the commit of its
         * outcome, as a crash or SIGKILL there would. */
        kill(getpid(), SIGKILL);
    }
    now_us = cp_now_us();
    cp_iso(now_us, now, sizeof now);
    if (sb) {
        char *state = sbx_sandbox_session_state(sb, NULL);
        char *sealed = state ? cp_seal(x->set->pepper, id, state) : NULL;
        const char *rid = sbx_sandbox_get0_id(sb);

        free(state);
        if (tx_begin(x, id) < 0 ||
            ex(x, "UPDATE sandboxes SET status = 'running', running_at = ?,"
                  " provider_resource_id = ?, session_state_sealed = ?, version = version + 1"
                  " WHERE id = ?", P(now, rid, sealed, id), NULL) < 0 ||
            ex(x, "UPDATE sandbox_creation_attempts SET status = 'succeeded', completed_at = ?,"
                  " provider_resource_id = ? WHERE id = ?", P(now, rid, att), NULL) < 0 ||
            tx_commit(x) < 0) {
            free(sealed);
            sbx_sandbox_destroy(sb, NULL);
            sbx_sandbox_free(sb);
            goto internal;
        }
        free(sealed);
        cp_runtime_put(cp_server_runtimes(x->srv), id, sb);
        meter_accrue(x, id, (snprintf(lock, sizeof lock, "create:%s", id), lock), now_us);
        reply_record(x, res, 201, req->who.org_id, id);
    } else {
        int status = 502;
        json_object *payload = provider_payload(e, c.backend, "create", &status);
        json_object *ctx = json_object_object_get(payload, "context");
        const char *cleanup = json_object_get_string(json_object_object_get(ctx, "cleanup_status"));
        const char *prid = json_object_get_string(json_object_object_get(ctx,
                                                                         "provider_resource_id"));
        int unknown = !strcmp(json_object_get_string(json_object_object_get(payload, "outcome")),
                              "unknown");
        const char *retry = (unknown || (cleanup && !strcmp(cleanup, "unknown")))
                                ? "blocked_cleanup_unknown"
                                : json_object_get_boolean(json_object_object_get(payload, "retryable"))
                                      ? "retryable" : "not_retryable";
        const char *ptext = json_object_to_json_string_ext(payload, JSON_C_TO_STRING_PLAIN);

        if (tx_begin(x, id) < 0 ||
            ex(x, "UPDATE sandboxes SET status = 'failed', failed_at = ?, latest_error_json = ?,"
                  " retry_status = ?, cleanup_status = ?, provider_resource_id = ?,"
                  " version = version + 1 WHERE id = ?",
               P(now, ptext, retry, cleanup, prid, id), NULL) < 0 ||
            ex(x, "UPDATE sandbox_creation_attempts SET status = 'failed', completed_at = ?,"
                  " error_json = ?, retry_status = ?, cleanup_status = ?,"
                  " provider_resource_id = ? WHERE id = ?",
               P(now, ptext, retry, cleanup, prid, att), NULL) < 0 ||
            tx_commit(x) < 0) {
            json_object_put(payload);
            goto internal;
        }
        meter_accrue(x, id, (snprintf(lock, sizeof lock, "create:%s", id), lock), now_us);
        reply_payload(res, status, payload);
    }
    goto out;
internal:
    tx_rollback(x);
    reply_internal(res);
out:
    sbx_error_free(e);
    sbx_options_free(opts);
    store_rows_free(r);
    free(config_text);
    free(canon_text);
    free(id);
    free(att);
    if (c.canon || c.config)
        create_req_free(&c);
    json_object_put(body);
}

/* ---------------------------------------------------------------- list, get, detail */

static void
h_sandbox_list(cx *x, cp_request *req, cp_response *res)
{
    const char *key = cp_query(req, "idempotency_key");
    store_rows *r;
    json_object *out;

    if (!cp_require_scope(req, res, "sandboxes:read"))
        return;
    /* Beyond the reference: ?idempotency_key=K lists only the record its
     * create with key K made (none or one; the reference ignores the
     * argument and lists all). */
    if (key)
        r = q(x, SANDBOX_SELECT "WHERE s.organization_id = ? AND s.idempotency_key = ?"
                                " ORDER BY s.created_at DESC, s.id DESC",
              P(req->who.org_id, key));
    else
        r = q(x, SANDBOX_SELECT "WHERE s.organization_id = ?"
                                " ORDER BY s.created_at DESC, s.id DESC",
              P(req->who.org_id));
    if (!r) {
        reply_internal(res);
        return;
    }
    out = json_object_new_array();
    for (size_t i = 0; i < r->nrows; i++)
        json_object_array_add(out, record_json(r, i));
    store_rows_free(r);
    reply_stored(res, 200, out);
}

static void
h_sandbox_get(cx *x, cp_request *req, cp_response *res)
{
    if (!cp_require_scope(req, res, "sandboxes:read"))
        return;
    reply_record(x, res, 200, req->who.org_id, req->params[0]);
}

static void
h_sandbox_detail(cx *x, cp_request *req, cp_response *res)
{
    store_rows *r, *a = NULL, *e = NULL, *po = NULL;
    json_object *out, *list;
    const char *id = req->params[0];
    char obs[200], now[40];
    int64_t now_us = cp_now_us();

    if (!cp_require_scope(req, res, "sandboxes:read"))
        return;
    r = load_sandbox(x, req->who.org_id, id);
    if (!r) {
        reply_internal(res);
        return;
    }
    if (r->nrows == 0) {
        store_rows_free(r);
        cp_reply_detail(res, 404, "sandbox not found");
        return;
    }
    {
        const char *st = store_cell(r, 0, "status");
        if ((!strcmp(st, "creating") || !strcmp(st, "running") || !strcmp(st, "stopping")) &&
            !strcmp(store_cell(r, 0, "cost_state"), "estimated") &&
            strcmp(store_cell(r, 0, "hourly_rate_usd"), "0")) {
            cp_iso(now_us, now, sizeof now);
            snprintf(obs, sizeof obs, "estimate:%s:%s", id, now);
            meter_accrue(x, id, obs, now_us);
            store_rows_free(r);
            r = load_sandbox(x, req->who.org_id, id);
            if (!r || !r->nrows) {
                store_rows_free(r);
                reply_internal(res);
                return;
            }
        }
    }
    a = q(x, "SELECT * FROM sandbox_creation_attempts WHERE sandbox_id = ?"
             " ORDER BY attempt_number", P(id));
    e = q(x, "SELECT * FROM executions WHERE sandbox_id = ? AND organization_id = ?"
             " ORDER BY created_at DESC, id DESC", P(id, req->who.org_id));
    po = q(x, "SELECT * FROM provider_observations WHERE sandbox_id = ? AND organization_id = ?"
              " ORDER BY observed_at DESC", P(id, req->who.org_id));
    if (!a || !e || !po) {
        store_rows_free(r);
        store_rows_free(a);
        store_rows_free(e);
        store_rows_free(po);
        reply_internal(res);
        return;
    }
    out = json_object_new_object();
    json_object_object_add(out, "sandbox", record_json(r, 0));
    list = json_object_new_array();
    for (size_t i = 0; i < a->nrows; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "attempt_number",
                               json_object_new_int(atoi(store_cell(a, i, "attempt_number"))));
        json_object_object_add(o, "status", jstr(store_cell(a, i, "status")));
        json_object_object_add(o, "retry_status", jstr(store_cell(a, i, "retry_status")));
        json_object_object_add(o, "cleanup_status", jstr(store_cell(a, i, "cleanup_status")));
        json_object_object_add(o, "provider_resource_id",
                               jstr(store_cell(a, i, "provider_resource_id")));
        json_object_object_add(o, "started_at", jstr(store_cell(a, i, "started_at")));
        json_object_object_add(o, "completed_at", jstr(store_cell(a, i, "completed_at")));
        json_object_object_add(o, "error", jparse(store_cell(a, i, "error_json")));
        json_object_array_add(list, o);
    }
    json_object_object_add(out, "attempts", list);
    list = json_object_new_array();
    for (size_t i = 0; i < e->nrows; i++) {
        json_object *o = json_object_new_object();
        const char *err = store_cell(e, i, "error");
        json_object_object_add(o, "id", jstr(store_cell(e, i, "id")));
        json_object_object_add(o, "request_id", jstr(store_cell(e, i, "request_id")));
        json_object_object_add(o, "status", jstr(store_cell(e, i, "status")));
        json_object_object_add(o, "created_at", jstr(store_cell(e, i, "created_at")));
        json_object_object_add(o, "completed_at", jstr(store_cell(e, i, "completed_at")));
        json_object_object_add(o, "response", jparse(store_cell(e, i, "response_json")));
        json_object_object_add(o, "error", err ? jparse(err) : NULL);
        json_object_array_add(list, o);
    }
    json_object_object_add(out, "executions", list);
    json_object_object_add(out, "cost", meter_cost_json(x, id));
    list = json_object_new_array();
    for (size_t i = 0; i < po->nrows; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "observation_id", jstr(store_cell(po, i, "observation_id")));
        json_object_object_add(o, "provider_resource_id",
                               jstr(store_cell(po, i, "provider_resource_id")));
        json_object_object_add(o, "status", jstr(store_cell(po, i, "status")));
        json_object_object_add(o, "observed_at", jstr(store_cell(po, i, "observed_at")));
        json_object_object_add(o, "provider_cost_usd", jstr(store_cell(po, i, "provider_cost_usd")));
        json_object_object_add(o, "currency", jstr(store_cell(po, i, "currency")));
        json_object_object_add(o, "missing",
                               json_object_new_boolean(atoi(store_cell(po, i, "missing"))));
        json_object_array_add(list, o);
    }
    json_object_object_add(out, "provider_observations", list);
    store_rows_free(r);
    store_rows_free(a);
    store_rows_free(e);
    store_rows_free(po);
    reply_stored(res, 200, out);
}

/* ---------------------------------------------------------------- runtime */

/* The attached handle of sandbox row @r, reattaching from its sealed
 * session state when this process has none (after a restart, or a sandbox
 * made by another server on the same database). NULL when it cannot. */
static sbx_sandbox *
runtime_of(cx *x, const store_rows *r)
{
    cp_runtimes *rt = cp_server_runtimes(x->srv);
    const char *id = store_cell(r, 0, "id");
    const char *sealed = store_cell(r, 0, "session_state_sealed");
    sbx_sandbox *sb = cp_runtime_get(rt, id), *resumed;
    sbx_client *client;
    char *state;

    if (sb || !sealed)
        return sb;
    state = cp_unseal(x->set->pepper, id, sealed);
    if (!state)
        return NULL;
    client = cp_runtime_client(rt, store_cell(r, 0, "backend"), NULL);
    resumed = client ? sbx_sandbox_resume(client, state, NULL) : NULL;
    free(state);
    if (!resumed)
        return NULL;
    /* A resume may be lazy (out of process it is): ask once whether the
     * sandbox is still there, so a vanished one is "unavailable" in every
     * plugin mode. */
    if (sbx_sandbox_is_alive(resumed, NULL) != 1) {
        sbx_sandbox_free(resumed);
        return NULL;
    }
    cp_runtime_put(rt, id, resumed);
    return cp_runtime_get(rt, id);
}

/* ---------------------------------------------------------------- execute */

static void
add_output(json_object *o, const char *name, const char *data, size_t len)
{
    if (cp_utf8_valid(data, len)) {
        json_object_object_add(o, name, json_object_new_string_len(data, (int)len));
    } else {
        size_t n = 0;
        char *lossy = cp_utf8_lossy(data, len, &n), *b64 = cp_base64(data, len), key[32];
        json_object_object_add(o, name, json_object_new_string_len(lossy, (int)n));
        snprintf(key, sizeof key, "%s_lossy", name);
        json_object_object_add(o, key, json_object_new_boolean(1));
        snprintf(key, sizeof key, "%s_b64", name);
        json_object_object_add(o, key, json_object_new_string(b64));
        free(lossy);
        free(b64);
    }
}

/* The answer to a request id already claimed, from its executions row
 * (row 0 of @r, with the columns named @status, @response and @error): the
 * stored response of a completed one, 409 while it runs, 409 with the stored
 * payload of a failed one. */
static void
replay(cp_response *res, const store_rows *r, const char *status, const char *response,
       const char *error)
{
    const char *st = store_cell(r, 0, status);

    if (!strcmp(st, "completed")) {
        res->status = 200;
        res->raw = strdup(store_cell(r, 0, response));
    } else if (!strcmp(st, "running")) {
        cp_reply_detail(res, 409, "execution is already in progress");
    } else {
        const char *err = store_cell(r, 0, error);
        cp_reply_detail(res, 409, err ? err : "execution failed");
    }
}

/*
 * The answer of an execution whose outcome found its row settled already
 * (settle_abandoned(): its server, this one, took longer than its deadline
 * and the grace, and a replay or a sweep gave up on it): the stored
 * outcome stands, answered as every replay gets it, and this run is not
 * metered. In the caller's transaction. 0, or -1 on a store error.
 */
static int
reply_settled(cx *x, cp_response *res, const char *org, const char *sandbox,
              const char *request_id)
{
    store_rows *r = q(x, "SELECT status, response_json, error FROM executions"
                         " WHERE organization_id = ? AND sandbox_id = ? AND request_id = ?",
                      P(org, sandbox, request_id));

    if (!r || !r->nrows) {
        store_rows_free(r);
        return -1;
    }
    fprintf(stderr, "sbx-server: execution %s of sandbox %s ended after it was settled as "
            "abandoned; its settled outcome stands\n", request_id, sandbox);
    replay(res, r, "status", "response_json", "error");
    store_rows_free(r);
    return 0;
}

/*
 * A `running` execution (row @i of @r: its status @status, deadline
 * @deadline, its sandbox's expiry @expires and, when @sandbox_status is not
 * NULL, its sandbox's status) whose deadline, its timeout's end or else its
 * sandbox's expiry, passed more than SBX_SERVER_EXECUTE_GRACE_SECS ago, or
 * whose sandbox has ended (destroyed, or failed: nothing of it runs, even
 * without a deadline): no server runs it any more (the one that claimed it
 * ended before it answered), so it is settled as failed,
 * outcome unknown (the command may have run, in part or whole), in the
 * caller's write transaction under the lock of its request id
 * ("execution:<sandbox>:<request id>"); its next replays answer that. It
 * is never metered (no outbox row). Returns 1 when settled (the 409 with
 * the stored payload is in @res when not NULL), 0 when it may still be
 * running (or, without @res, another server settled or answered it
 * first), -1 on a store error.
 */
static int
settle_abandoned(cx *x, cp_response *res, const store_rows *r, size_t i, const char *status,
                 const char *deadline, const char *expires, const char *sandbox_status,
                 const char *backend, const char *org, const char *sandbox,
                 const char *request_id)
{
    const char *st = store_cell(r, i, status), *at = store_cell(r, i, deadline);
    const char *sst = sandbox_status ? store_cell(r, i, sandbox_status) : NULL;
    int ended = sst && (!strcmp(sst, "destroyed") || !strcmp(sst, "failed"));
    char now[40];
    int64_t end, n;

    if (!st || strcmp(st, "running"))
        return 0;
    if (!at)
        at = store_cell(r, i, expires);
    if (!ended && (!at || cp_parse_iso(at, &end) < 0 ||
                   cp_now_us() <= end + (int64_t)(x->set->execute_grace_secs * 1e6)))
        return 0;
    json_object *o = error_payload("execution_failed", backend, "execute", 0, 1, NULL);
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    cp_now_iso(now, sizeof now);
    n = ex(x, "UPDATE executions SET status = 'failed', error = ?, completed_at = ?"
              " WHERE organization_id = ? AND sandbox_id = ? AND request_id = ?"
              " AND status = 'running'",
           P(text, now, org, sandbox, request_id), NULL);
    if (n < 0) {
        json_object_put(o);
        return -1;
    }
    if (res)
        cp_reply_detail(res, 409, text);
    json_object_put(o);
    return res || n > 0 ? 1 : 0;
}

int
cp_settle_abandoned(cx *x)
{
    store_rows *r;
    int settled = 0, failed = 0;

    /* The running executions (the partial index executions_running holds
     * those alone), read outside a transaction; each candidate is settled
     * in its own, under its request id's lock, where the update's
     * `status = 'running'` decides against an answer or another server's
     * settlement committed since this read. */
    r = q(x, "SELECT e.organization_id, e.sandbox_id, e.request_id, e.status,"
             " e.deadline_at, s.expires_at, s.status AS sandbox_status, s.backend"
             " FROM executions e"
             " JOIN sandboxes s ON s.id = e.sandbox_id WHERE e.status = 'running'", 0, NULL);
    if (!r)
        return -1;
    for (size_t i = 0; i < r->nrows; i++) {
        const char *org = store_cell(r, i, "organization_id"),
                   *sandbox = store_cell(r, i, "sandbox_id"),
                   *request_id = store_cell(r, i, "request_id");
        char lock[400];
        int rc;

        snprintf(lock, sizeof lock, "execution:%s:%s", sandbox, request_id);
        /* Volatile, as the replay's settlement is: a commit lost with the
         * machine leaves the row running, settled again by the next sweep
         * or replay with the same payload. */
        if (tx_begin_volatile(x, lock) < 0) {
            failed = 1;
            break;
        }
        rc = settle_abandoned(x, NULL, r, i, "status", "deadline_at", "expires_at",
                              "sandbox_status", store_cell(r, i, "backend"), org, sandbox,
                              request_id);
        if (rc < 0 || tx_commit(x) < 0) {
            tx_rollback(x);
            failed = 1;
            break;
        }
        settled += rc;
    }
    store_rows_free(r);
    return failed ? -1 : settled;
}

/* ---------------------------------------------------------------- the execute's deadline */

/* How long past its sandbox's expiry an execute without a timeout runs.
 * The library's default exec timeout is what is left of the lifetime,
 * counted by the caller's library from the start of its create, before
 * this server heard of it: a client on the remote backend ends its command
 * itself at the expiry (timed out, 124). Were this server's default the
 * same instant, its own 124 could reach that client first, an end its
 * library cannot tell from the command's own exit 124. Less than the
 * local backend's grace between the expiry and the sandbox's end (1 s),
 * so a command no caller ends is still timed out here, not ended with its
 * sandbox. */
#define EXEC_DEFAULT_MARGIN_SECS 0.5

/* The answer's deadline of an execute whose command has the timeout
 * @cmd_timeout (seconds): the library ends the command then (SIGTERM, then
 * SIGKILL SBX_KILL_GRACE_SECS later, each a provider call bounded by the
 * provider timeout), so past that and the margin the provider is taken as
 * not answering. */
static double
exec_deadline_secs(const cp_settings *set, double cmd_timeout)
{
    return cmd_timeout + SBX_KILL_GRACE_SECS + set->provider_timeout_secs;
}

/* One execute's provider call (exec_job_run()). The job owns the request's
 * inputs (moved into it) and, when @own_ref, a reference of its own to the
 * sandbox's handle, so that it may outlive the request. */
typedef struct exec_job {
    pthread_mutex_t lock;
    pthread_cond_t cond;          /* on CLOCK_MONOTONIC */
    int refs;                     /* the request's, and its operation's until its callback */
    int done;
    cp_runtimes *rt;
    sbx_sandbox *sb;
    int own_ref;
    sbx_op *op;                   /* the operation on the pool while it runs; else NULL */
    json_object *body;            /* holds the strings below */
    const char *language, *code, *command, *cwd;
    json_object *args;            /* NULL, or an array of strings in @body */
    char **env;                   /* "K=V", NULL-terminated; owned */
    unsigned char *stdin_data;    /* owned */
    size_t stdin_len;
    double timeout;               /* sbx_exec_request.timeout_secs */
    sbx_result *result;           /* set once done */
    sbx_error *error;
} exec_job;

/* A job on @sb, the handle of sandbox @id the request holds. */
static exec_job *
exec_job_new(cp_runtimes *rt, const char *id, sbx_sandbox *sb)
{
    exec_job *j = calloc(1, sizeof *j);
    pthread_condattr_t ca;
    sbx_sandbox *own;

    if (!j)
        return NULL;
    pthread_mutex_init(&j->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cond, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->rt = rt;
    j->sb = sb;
    j->language = "python";
    /* A reference of the job's own, unless the handle was dropped since
     * the request took it (a termination): then the job runs only on the
     * request's thread, under the request's reference. */
    own = cp_runtime_get(rt, id);
    if (own == sb)
        j->own_ref = 1;
    else if (own)
        cp_runtime_unref(rt, own);
    return j;
}

static void
exec_job_unref(exec_job *j)
{
    int last;

    pthread_mutex_lock(&j->lock);
    last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (!last)
        return;
    if (j->own_ref)
        cp_runtime_unref(j->rt, j->sb);
    sbx_result_free(j->result);
    sbx_error_free(j->error);
    free(j->stdin_data);
    for (size_t i = 0; j->env && j->env[i]; i++)
        free(j->env[i]);
    free(j->env);
    json_object_put(j->body);
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

/* Marks @j done with @result or @e (taken). */
static void
exec_job_finish(exec_job *j, sbx_result *result, sbx_error *e)
{
    pthread_mutex_lock(&j->lock);
    j->result = result;
    j->error = e;
    j->done = 1;
    j->op = NULL;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
}

/* The call's request: its argv (a new array of borrowed strings, in
 * *@argv, freed by the caller) or shell, and the job's other inputs. */
static void
exec_job_request(exec_job *j, sbx_exec_request *er, const char ***argv)
{
    *argv = NULL;
    er->stdin_data = j->stdin_data;
    er->stdin_len = j->stdin_len;
    er->env = (const char *const *)j->env;
    er->cwd = j->cwd;
    er->timeout_secs = j->timeout;
    if (j->code)
        return;
    if (j->args) {
        size_t n = json_object_array_length(j->args);
        *argv = calloc(n + 2, sizeof **argv);
        (*argv)[0] = j->command;
        for (size_t i = 0; i < n; i++)
            (*argv)[i + 1] = json_object_get_string(json_object_array_get_idx(j->args, i));
        er->argv = *argv;
    } else {
        er->shell = j->command;
    }
}

/* The call itself, on the calling thread; marks the job done. */
static void
exec_job_call(exec_job *j)
{
    sbx_exec_request er = SBX_EXEC_REQUEST_INIT;
    sbx_result *result;
    sbx_error *e = NULL;
    const char **argv;

    exec_job_request(j, &er, &argv);
    if (j->code)
        result = sbx_sandbox_execute_code(j->sb, j->language, j->code, &er, &e);
    else
        result = sbx_sandbox_execute_command(j->sb, &er, &e);
    free(argv);
    exec_job_finish(j, result, e);
}

/* The operation's callback, on the pool's dispatching thread: the outcome
 * into the job (dropped with it when the request has gone). */
static void
exec_job_done(sbx_op *op, void *user_data)
{
    exec_job *j = user_data;
    cp_runtimes *rt = j->rt;

    exec_job_finish(j, sbx_op_steal_result(op), sbx_op_steal_error(op));
    exec_job_unref(j);
    cp_runtime_worker_end(rt);
}

/* Submits @j to the pool; 1 when it runs there, 0 when it could not be
 * submitted (the caller runs it itself; a pool that cannot be made is
 * logged, naming why: that execute cannot be cancelled at its deadline). */
static int
exec_job_submit(exec_job *j)
{
    sbx_exec_request er = SBX_EXEC_REQUEST_INIT;
    char *why = NULL;
    sbx_async *async = cp_runtime_async(j->rt, &why);
    const char **argv;
    sbx_op *op;

    if (!async) {
        fprintf(stderr, "sbx-server: cannot start the pool of provider calls (%s): the execute "
                "runs on the request's thread, answered when its provider call ends rather "
                "than at its deadline\n",
                why ? why : "?");
        free(why);
        return 0;
    }
    exec_job_request(j, &er, &argv);
    pthread_mutex_lock(&j->lock);
    j->refs++;
    cp_runtime_worker_begin(j->rt);
    /* Under the job's lock, so that the callback (which takes it) cannot
     * have run before j->op is set. */
    if (j->code)
        op = sbx_sandbox_execute_code_async(async, j->sb, j->language, j->code, &er,
                                            exec_job_done, j, NULL);
    else
        op = sbx_sandbox_execute_async(async, j->sb, &er, exec_job_done, j, NULL);
    if (op) {
        j->op = op;
    } else {
        j->refs--;
        cp_runtime_worker_end(j->rt);
    }
    pthread_mutex_unlock(&j->lock);
    free(argv);
    return op != NULL;
}

/*
 * Runs @j. With @threaded (a hosted backend, whose provider may stop
 * answering) as an operation on the runtimes' pool (cp_runtime_async()),
 * the request waiting for it at most @deadline seconds; otherwise on the
 * request's thread (the local backend: the command runs on this host, and
 * the library's own timeout ends it, SIGKILL included). Returns 1 when the
 * deadline came first: nothing in *@result and *@error, and the operation
 * is cancelled (sbx_op_cancel(): its provider call ends through the
 * call's cancel descriptor, and the command's process tree is sent
 * SIGTERM then SIGKILL as on a timeout), what it still brings dropped.
 * Else 0, the call's result or error moved into *@result or *@error.
 */
static int
exec_job_run(exec_job *j, int threaded, double deadline, sbx_result **result,
             sbx_error **error)
{
    int started = 0, expired = 0;

    if (threaded && j->own_ref)
        started = exec_job_submit(j);
    if (!started) {
        exec_job_call(j);
    } else {
        struct timespec ts;
        double whole;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        deadline += ts.tv_sec + ts.tv_nsec / 1e9;
        ts.tv_nsec = (long)(modf(deadline, &whole) * 1e9);
        ts.tv_sec = (time_t)whole;
        pthread_mutex_lock(&j->lock);
        while (!j->done)
            if (pthread_cond_timedwait(&j->cond, &j->lock, &ts) == ETIMEDOUT) {
                expired = !j->done;
                break;
            }
        /* j->op is valid while the job is not done: its callback, which
         * ends it, takes this lock first. */
        if (expired)
            sbx_op_cancel(j->op);
        pthread_mutex_unlock(&j->lock);
    }
    if (expired)
        return 1;
    *result = j->result;
    j->result = NULL;
    *error = j->error;
    j->error = NULL;
    return 0;
}

static void
h_sandbox_execute(cx *x, cp_request *req, cp_response *res)
{
    const char *id = req->params[0], *status, *code = NULL, *command = NULL,
               *language = "python";
    const char *hdr = cp_header(req, "Idempotency-Key");
    json_object *body = NULL, *v, *args = NULL, *out = NULL, *usage;
    store_rows *r = NULL, *ex_rows = NULL;
    sbx_sandbox *sb = NULL;
    sbx_result *result = NULL;
    sbx_error *e = NULL;
    char *request_id = NULL, *exe_id = NULL, now[40], lock[400], t_qty[40], t_prov[40],
         t_cust[40];
    unsigned char *stdin_data = NULL;
    size_t stdin_len = 0;
    char **env = NULL;
    const char *cwd = NULL;
    double exec_timeout = 0;
    double t0, elapsed;
    int64_t us, rate = 0, prov, cust, claimed, changed;
    exec_job *job = NULL;
    int deadline_expired = 0, bad = 0;

    request_id = hdr ? strdup(hdr) : cp_new_id("req");
    /* The read and the claim are one transaction (volatile: no answer
     * acknowledges the claim itself, server/store.h) under the request
     * id's lock: SQLite's write lock, PostgreSQL's advisory lock on the
     * name. A replay and every refusal below commit it with nothing
     * written but the key's last_used_at, when cp_auth_apply() sets it. */
    snprintf(lock, sizeof lock, "execution:%s:%s", id, request_id);
    if (tx_begin_volatile(x, lock) < 0)
        goto internal;
    /* One statement for the key (authentication: its row read now, so a
     * revocation committed before it is seen), the columns an execute
     * reads of the sandbox (runtime_of(), the metering, the error
     * payload), not the whole record, and the execution of this request id
     * when there is one, answered from it as a replay. No key row: 401; a
     * key of another organisation than the sandbox's reads as no sandbox
     * (404). */
    r = q(x, "SELECT " CP_KEY_COLUMNS ", s.id, s.backend, s.status, s.hourly_rate_usd,"
             " s.session_state_sealed, s.expires_at AS sandbox_expires_at,"
             " e.status AS execution_status, e.response_json, e.error AS execution_error,"
             " e.deadline_at AS execution_deadline"
             " FROM api_keys k LEFT JOIN sandboxes s ON s.id = ?"
             " AND s.organization_id = k.organization_id"
             " LEFT JOIN executions e ON e.organization_id = s.organization_id"
             " AND e.sandbox_id = s.id AND e.request_id = ?"
             " WHERE k.key_digest = ?", P(id, request_id, req->key_digest));
    if (!r)
        goto internal;
    if (cp_auth_apply(x, req, res, r) < 0)
        goto out;
    if (!cp_require_scope(req, res, "sandboxes:execute"))
        goto out;
    if (hdr && !idempotency_key_is_text(hdr)) {
        cp_reply_detail(res, 422, IDEMPOTENCY_KEY_TEXT);
        goto out;
    }
    /* A command, its arguments, environment and directory are bytes to
     * the provider, not text the server keeps: they need not be UTF-8
     * (a file name, printf's arguments), only free of NUL. */
    body = body_object(req, res, 0);
    if (!body)
        goto out;
    /* In the reference's order (code, language, command, args), then the
     * fields beyond it; every field's error an item of the one 422. */
    bad |= body_opt_string(body, "code", &code, res) < 0;
    bad |= body_opt_string(body, "language", &language, res) < 0;
    bad |= body_opt_string(body, "command", &command, res) < 0;
    if (json_object_object_get_ex(body, "args", &v) && !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_array)) {
            reply_validation(res, "list_type", "body", "args", "Input should be a valid list",
                             json_object_get(v));
            bad = 1;
        } else {
            for (size_t i = 0; i < json_object_array_length(v); i++)
                if (!json_object_is_type(json_object_array_get_idx(v, i), json_type_string)) {
                    reply_validation_item(res, "string_type", "body", "args",
                                          json_object_new_int((int)i),
                                          "Input should be a valid string",
                                          json_object_get(json_object_array_get_idx(v, i)));
                    bad = 1;
                }
            args = v;
        }
    }
    if (json_object_object_get_ex(body, "stdin_b64", &v) && !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_string) ||
            !(stdin_data = cp_base64_decode(json_object_get_string(v), &stdin_len))) {
            reply_validation(res, "value_error", "body", "stdin_b64",
                             "Value error, stdin_b64 must be standard base64",
                             json_object_get(v));
            bad = 1;
        }
    }
    if (json_object_object_get_ex(body, "env", &v) && !json_object_is_type(v, json_type_null)) {
        size_t n = 0, k = 0;
        int bad_value = 0;
        if (!json_object_is_type(v, json_type_object)) {
            reply_validation(res, "dict_type", "body", "env", "Input should be a valid dictionary",
                             json_object_get(v));
            bad = 1;
        } else {
            /* Each value's type, then (a validator after those) the names. */
            json_object_object_foreach(v, tk, tv) {
                if (!json_object_is_type(tv, json_type_string)) {
                    reply_validation_item(res, "string_type", "body", "env",
                                          json_object_new_string(tk),
                                          "Input should be a valid string", json_object_get(tv));
                    bad_value = 1;
                }
            }
            json_object_object_foreach(v, nk, nv) {
                (void)nv;
                if (!bad_value && !env_name_ok(nk)) {
                    reply_validation(res, "value_error", "body", "env", ENV_NAME_RULE,
                                     json_object_new_string(nk));
                    bad_value = 1;
                }
            }
            bad |= bad_value;
            n = (size_t)json_object_object_length(v);
            env = calloc(n + 1, sizeof *env);
            json_object_object_foreach(v, ek, ev) {
                if (!bad_value)
                    env[k++] = cp_printf("%s=%s", ek, json_object_get_string(ev));
            }
        }
    }
    bad |= body_opt_string(body, "cwd", &cwd, res) < 0;
    if (json_object_object_get_ex(body, "timeout_secs", &v) &&
        !json_object_is_type(v, json_type_null) &&
        body_float_gt0(res, "timeout_secs", v, &exec_timeout) < 0)
        bad = 1;
    if (bad)
        goto out;
    if (!code == !command) {
        reply_validation(res, "value_error", "body", NULL,
                         "Value error, provide exactly one of code or command",
                         json_object_get(body));
        goto out;
    }
    if (!store_cell(r, 0, "id")) {
        cp_reply_detail(res, 404, "sandbox not found");
        goto out;
    }
    status = store_cell(r, 0, "status");
    if (strcmp(status, "running")) {
        char *m = cp_printf("sandbox is %s", status);
        cp_reply_detail(res, 409, m);
        free(m);
        goto out;
    }
    sb = cp_runtime_get(cp_server_runtimes(x->srv), id);
    if (!sb) {
        /* No handle in this process: reattaching is a call to the provider,
         * made outside the transaction, which begins again after it (the
         * claim's conflict below answers a request id claimed meanwhile). */
        if (tx_commit(x) < 0)
            goto internal;
        sb = runtime_of(x, r);
        if (sb && tx_begin_volatile(x, lock) < 0)
            goto internal;
    }
    if (!sb) {
        /* Terminated meanwhile, or truly without a runtime. */
        store_rows *now_r = load_sandbox(x, req->who.org_id, id);
        const char *st = now_r && now_r->nrows ? store_cell(now_r, 0, "status") : "running";
        if (strcmp(st, "running")) {
            char *m = cp_printf("sandbox is %s", st);
            cp_reply_detail(res, 409, m);
            free(m);
        } else {
            cp_reply_detail(res, 409,
                            "sandbox runtime is unavailable after a control-plane restart");
        }
        store_rows_free(now_r);
        goto out;
    }
    if (store_cell(r, 0, "execution_status")) {
        int settled = settle_abandoned(x, res, r, 0, "execution_status", "execution_deadline",
                                       "sandbox_expires_at", NULL, store_cell(r, 0, "backend"),
                                       req->who.org_id, id, request_id);
        if (settled < 0)
            goto internal;
        if (!settled)
            replay(res, r, "execution_status", "response_json", "execution_error");
        goto out;
    }
    exe_id = cp_new_id("exe");
    cp_now_iso(now, sizeof now);
    /* Its deadline: the timeout's end, else the sandbox's expiry. */
    char deadline[40];
    const char *deadline_p = store_cell(r, 0, "sandbox_expires_at");
    if (exec_timeout > 0 && exec_timeout < 1e9) {
        cp_iso(cp_now_us() + (int64_t)(exec_timeout * 1e6), deadline, sizeof deadline);
        deadline_p = deadline;
    }
    /* The claim: one `running` row per (organisation, sandbox, request id),
     * inserted once (the unique constraint decides between racers, in one
     * or several server processes); the existing row when it was there. */
    claimed = ex(x, "INSERT INTO executions(id, organization_id, sandbox_id, request_id, status,"
                    " created_at, deadline_at) VALUES (?, ?, ?, ?, 'running', ?, ?)"
                    " ON CONFLICT DO NOTHING",
                 P(exe_id, req->who.org_id, id, request_id, now, deadline_p), NULL);
    if (claimed < 0)
        goto internal;
    if (claimed == 0) {
        ex_rows = q(x, "SELECT status, response_json, error FROM executions"
                       " WHERE organization_id = ? AND sandbox_id = ? AND request_id = ?",
                    P(req->who.org_id, id, request_id));
        if (!ex_rows || ex_rows->nrows == 0)
            goto internal;     /* executions rows are never deleted */
    }
    if (tx_commit(x) < 0)
        goto internal;
    if (ex_rows && ex_rows->nrows) {
        /* Claimed by a racer since the read above. */
        replay(res, ex_rows, "status", "response_json", "error");
        goto out;
    }

    /* The run, without a store connection held meanwhile. */
    cx_release(x);
    t0 = cp_mono();
    {
        /* The command's own timeout: timeout_secs, else what is left of
         * the sandbox's lifetime and EXEC_DEFAULT_MARGIN_SECS, else the
         * server's (BESPOKE_EXECUTE_TIMEOUT_SECS); the answer's deadline
         * is that plus the margin (exec_deadline_secs()). */
        const char *exp = store_cell(r, 0, "sandbox_expires_at");
        double cmd_timeout = exec_timeout;
        int64_t exp_us;
        if (!(cmd_timeout > 0)) {
            if (exp && cp_parse_iso(exp, &exp_us) == 0) {
                cmd_timeout = (double)(exp_us - cp_now_us()) / 1e6;
                if (cmd_timeout < 1)
                    cmd_timeout = 1;
                cmd_timeout = exec_timeout = cmd_timeout + EXEC_DEFAULT_MARGIN_SECS;
            } else {
                cmd_timeout = exec_timeout = x->set->execute_timeout_secs;
            }
        }
        job = exec_job_new(cp_server_runtimes(x->srv), id, sb);
        if (!job)
            goto internal;
        /* The inputs move into the job, which may outlive the request. */
        job->body = body;
        body = NULL;
        job->language = language;
        job->code = code;
        job->command = command;
        job->cwd = cwd;
        job->args = args;
        job->env = env;
        env = NULL;
        job->stdin_data = stdin_data;
        stdin_data = NULL;
        job->stdin_len = stdin_len;
        job->timeout = exec_timeout;
        deadline_expired = exec_job_run(job, strcmp(store_cell(r, 0, "backend"), "local") != 0,
                                        exec_deadline_secs(x->set, cmd_timeout), &result, &e);
    }
    elapsed = cp_mono() - t0;
    us = (int64_t)(elapsed * 1e6 + 0.5);
    meter_parse(store_cell(r, 0, "hourly_rate_usd"), 12, &rate);
    prov = meter_cost(rate, us);
    cust = meter_customer(x->set, prov);
    meter_fmt(us, 6, t_qty, sizeof t_qty);
    meter_fmt(prov, 12, t_prov, sizeof t_prov);
    meter_fmt(cust, 12, t_cust, sizeof t_cust);
    usage = json_object_new_object();
    json_object_object_add(usage, "runtime_seconds", json_object_new_string(t_qty));
    json_object_object_add(usage, "provider_cost_usd", json_object_new_string(t_prov));
    json_object_object_add(usage, "customer_cost_usd", json_object_new_string(t_cust));
    cp_now_iso(now, sizeof now);
    if (result) {
        size_t ol = 0, el = 0;
        const char *so = sbx_result_get0_stdout(result, &ol), *se = sbx_result_get0_stderr(result, &el);
        const char *text;
        out = json_object_new_object();
        json_object_object_add(out, "request_id", json_object_new_string(request_id));
        add_output(out, "stdout", so, ol);
        add_output(out, "stderr", se, el);
        json_object_object_add(out, "exit_code",
                               json_object_new_int(sbx_result_get_exit_code(result)));
        json_object_object_add(out, "usage", usage);
        if (sbx_result_is_timed_out(result))
            json_object_object_add(out, "timed_out", json_object_new_boolean(1));
        if (sbx_result_is_stdout_truncated(result))
            json_object_object_add(out, "stdout_truncated", json_object_new_boolean(1));
        if (sbx_result_is_stderr_truncated(result))
            json_object_object_add(out, "stderr_truncated", json_object_new_boolean(1));
        text = json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE);
        if (tx_begin(x, lock) < 0 ||
            (changed = ex(x, "UPDATE executions SET status = 'completed', response_json = ?,"
                             " completed_at = ?, runtime_seconds = ?, provider_cost_usd = ?,"
                             " customer_cost_usd = ? WHERE organization_id = ?"
                             " AND sandbox_id = ? AND request_id = ? AND status = 'running'",
                          P(text, now, t_qty, t_prov, t_cust, req->who.org_id, id, request_id),
                          NULL)) < 0)
            goto internal;
        if (changed == 0) {
            if (reply_settled(x, res, req->who.org_id, id, request_id) < 0)
                goto internal;
            goto out;
        }
        if (meter_outbox_add(x, now, req->who.org_id, id, request_id) < 0 || tx_commit(x) < 0)
            goto internal;
        res->status = 200;
        res->raw = strdup(text);
        res->outbox = 1;
    } else {
        int st = 504;
        /* Past its deadline: the provider's timeout, the outcome unknown
         * (the command may have run, or still run) and so not retryable,
         * as the contract has it for a create whose outcome is unknown. */
        json_object *payload = deadline_expired
                                   ? error_payload("timeout", store_cell(r, 0, "backend"),
                                                   "execute", 0, 1, NULL)
                                   : provider_payload(e, store_cell(r, 0, "backend"), "execute",
                                                      &st);
        const char *ptext = json_object_to_json_string_ext(payload, JSON_C_TO_STRING_PLAIN);
        json_object_put(usage);
        if (tx_begin(x, lock) < 0 ||
            (changed = ex(x, "UPDATE executions SET status = 'failed', error = ?, completed_at = ?,"
                             " runtime_seconds = ?, provider_cost_usd = ?, customer_cost_usd = ?"
                             " WHERE organization_id = ? AND sandbox_id = ? AND request_id = ?"
                             " AND status = 'running'",
                          P(ptext, now, t_qty, t_prov, t_cust, req->who.org_id, id, request_id),
                          NULL)) < 0) {
            json_object_put(payload);
            goto internal;
        }
        if (changed == 0) {
            json_object_put(payload);
            if (reply_settled(x, res, req->who.org_id, id, request_id) < 0)
                goto internal;
            goto out;
        }
        if (meter_outbox_add(x, now, req->who.org_id, id, request_id) < 0 || tx_commit(x) < 0) {
            json_object_put(payload);
            goto internal;
        }
        reply_payload(res, st, payload);
        res->outbox = 1;
    }
    goto out;
internal:
    tx_rollback(x);
    reply_internal(res);
out:
    if (x->in_txn && tx_commit(x) < 0)
        tx_rollback(x);
    if (sb)
        cp_runtime_unref(cp_server_runtimes(x->srv), sb);
    if (job)
        exec_job_unref(job);
    sbx_result_free(result);
    sbx_error_free(e);
    json_object_put(out);
    free(stdin_data);
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
    free(request_id);
    free(exe_id);
    store_rows_free(r);
    store_rows_free(ex_rows);
    json_object_put(body);
}

/* ---------------------------------------------------------------- terminate */

/* If-Match: trimmed, a leading W/ dropped, quotes stripped, an integer >= 1.
 * 0 when absent, -1 when malformed. */
static int64_t
if_match(const cp_request *req)
{
    const char *h = cp_header(req, "If-Match");
    char buf[64], *p = buf, *e, *end;
    long long v;

    if (!h)
        return 0;
    snprintf(buf, sizeof buf, "%s", h);
    while (*p == ' ' || *p == '\t')
        p++;
    e = p + strlen(p);
    while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
        *--e = 0;
    if (!strncmp(p, "W/", 2))
        p += 2;
    while (*p == '"')
        p++;
    while (e > p && e[-1] == '"')
        *--e = 0;
    if (!*p)
        return -1;
    v = strtoll(p, &end, 10);
    if (*end || v < 1)
        return -1;
    return v;
}

static void
h_sandbox_terminate(cx *x, cp_request *req, cp_response *res)
{
    const char *id = req->params[0];
    int64_t want = if_match(req), have, end_us;
    store_rows *r = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    char now[40], obs[200];
    const char *status;

    if (!cp_require_scope(req, res, "sandboxes:terminate"))
        return;
    if (want < 0) {
        cp_reply_detail(res, 422, "If-Match must be a sandbox version");
        return;
    }
    r = load_sandbox(x, req->who.org_id, id);
    if (!r)
        goto internal;
    if (r->nrows == 0) {
        cp_reply_detail(res, 404, "sandbox not found");
        goto out;
    }
    status = store_cell(r, 0, "status");
    if (!strcmp(status, "destroyed")) {
        reply_stored(res, 200, record_json(r, 0));
        goto out;
    }
    have = atoll(store_cell(r, 0, "version"));
    if (want && want != have) {
        cp_reply_detail(res, 409, "sandbox changed; refresh before terminating");
        goto out;
    }
    if (!strcmp(status, "stopping")) {
        cp_reply_detail(res, 409, "sandbox termination is already in progress");
        goto out;
    }
    sb = runtime_of(x, r);
    if (!sb) {
        /* A concurrent termination may have just ended it. */
        store_rows *now_r = load_sandbox(x, req->who.org_id, id);
        const char *st = now_r && now_r->nrows ? store_cell(now_r, 0, "status") : "";
        if (!strcmp(st, "destroyed"))
            reply_stored(res, 200, record_json(now_r, 0));
        else if (!strcmp(st, "stopping"))
            cp_reply_detail(res, 409, "sandbox termination is already in progress");
        else
            cp_reply_detail(res, 409, "sandbox runtime is not attached and provider "
                                      "termination is not configured");
        store_rows_free(now_r);
        goto out;
    }
    /* The version check and the move to `stopping`, in one transaction. */
    cp_now_iso(now, sizeof now);
    {
        char ver[24];
        int64_t n;
        snprintf(ver, sizeof ver, "%lld", (long long)have);
        if (tx_begin(x, id) < 0)
            goto internal;
        n = ex(x, "UPDATE sandboxes SET status = 'stopping', stopping_at = COALESCE(stopping_at, ?),"
                  " version = version + 1 WHERE id = ? AND version = ?"
                  " AND status NOT IN ('stopping', 'destroyed')", P(now, id, ver), NULL);
        if (n < 0 || tx_commit(x) < 0)
            goto internal;
        if (n == 0) {
            /* Another request changed it between the read and here: a
             * concurrent termination (in progress, or done) or a version
             * the caller has not seen. */
            store_rows *now_r = load_sandbox(x, req->who.org_id, id);
            const char *st = now_r && now_r->nrows ? store_cell(now_r, 0, "status") : "";
            if (!strcmp(st, "destroyed"))
                reply_stored(res, 200, record_json(now_r, 0));
            else if (!strcmp(st, "stopping"))
                cp_reply_detail(res, 409, "sandbox termination is already in progress");
            else
                cp_reply_detail(res, 409, "sandbox changed; refresh before terminating");
            store_rows_free(now_r);
            goto out;
        }
    }
    if (sbx_sandbox_destroy(sb, &e) == 0) {
        end_us = cp_now_us();
        cp_iso(end_us, now, sizeof now);
        if (tx_begin(x, id) < 0 ||
            ex(x, "UPDATE sandboxes SET status = 'destroyed', destroyed_at = ?, terminated_at = ?,"
                  " termination_reason = 'operator', terminated_by_api_key_id = ?,"
                  " session_state_sealed = NULL, version = version + 1 WHERE id = ?",
               P(now, now, req->who.key_id, id), NULL) < 0 ||
            tx_commit(x) < 0)
            goto internal;
        cp_runtime_drop(cp_server_runtimes(x->srv), id);
        snprintf(obs, sizeof obs, "terminate:%s", id);
        meter_accrue(x, id, obs, end_us);
        reply_record(x, res, 200, req->who.org_id, id);
    } else {
        int st = 502;
        json_object *payload = provider_payload(e, store_cell(r, 0, "backend"), "destroy", &st);
        const char *ptext = json_object_to_json_string_ext(payload, JSON_C_TO_STRING_PLAIN);
        end_us = cp_now_us();
        cp_iso(end_us, now, sizeof now);
        if (tx_begin(x, id) < 0 ||
            ex(x, "UPDATE sandboxes SET status = 'failed', failed_at = ?, latest_error_json = ?,"
                  " retry_status = 'not_retryable', version = version + 1 WHERE id = ?",
               P(now, ptext, id), NULL) < 0 ||
            tx_commit(x) < 0) {
            json_object_put(payload);
            goto internal;
        }
        snprintf(obs, sizeof obs, "terminate-failed:%s", id);
        meter_accrue(x, id, obs, end_us);
        reply_payload(res, st, payload);
    }
    goto out;
internal:
    tx_rollback(x);
    reply_internal(res);
out:
    if (sb)
        cp_runtime_unref(cp_server_runtimes(x->srv), sb);
    sbx_error_free(e);
    store_rows_free(r);
}

/* ---------------------------------------------------------------- routing */

typedef void (*handler_fn)(cx *x, cp_request *req, cp_response *res);

/* How a route authenticates. */
enum {
    AUTH_FIRST,                   /* cp_authenticate() before the handler */
    AUTH_OPEN,                    /* no authentication */
    AUTH_IN_READ,                 /* the key's digest before the handler
                                   * (req->key_digest), its row read with the
                                   * handler's first statement and checked by
                                   * cp_auth_apply(): one read fewer */
};

typedef struct route {
    const char *method;
    const char *pattern;          /* segments; "{id}" matches one */
    handler_fn fn;
    int auth;                     /* AUTH_* */
} route;

static void
h_healthz(cx *x, cp_request *req, cp_response *res)
{
    json_object *o = json_object_new_object();

    (void)x;
    (void)req;
    json_object_object_add(o, "status", json_object_new_string("ok"));
    cp_reply_json(res, 200, o);
}

static const route routes[] = {
    { "GET", "/healthz", h_healthz, AUTH_OPEN },
    { "POST", "/v1/organizations", h_organizations, AUTH_OPEN },
    { "GET", "/v1/session", h_session, 0 },
    { "GET", "/v1/api-keys", h_keys_list, 0 },
    { "POST", "/v1/api-keys", h_keys_create, 0 },
    { "DELETE", "/v1/api-keys/{id}", h_keys_revoke, 0 },
    { "GET", "/v1/sandboxes", h_sandbox_list, 0 },
    { "POST", "/v1/sandboxes", h_sandbox_create, 0 },
    { "GET", "/v1/sandboxes/{id}", h_sandbox_get, 0 },
    { "DELETE", "/v1/sandboxes/{id}", h_sandbox_terminate, 0 },
    { "GET", "/v1/sandboxes/{id}/detail", h_sandbox_detail, 0 },
    { "POST", "/v1/sandboxes/{id}/execute", h_sandbox_execute, AUTH_IN_READ },
    { "GET", "/v1/costs", h_costs, 0 },
};

/* Matches @path against @pattern, storing {id} segments in @params. */
static int
match(const char *pattern, const char *path, const char **params, char store_[][256])
{
    const char *p = pattern, *s = path;
    int np = 0;

    while (*p && *s) {
        if (!strncmp(p, "{id}", 4)) {
            const char *e = strchr(s, '/');
            size_t n = e ? (size_t)(e - s) : strlen(s);
            if (n == 0 || n >= 256)
                return 0;
            memcpy(store_[np], s, n);
            store_[np][n] = 0;
            params[np] = store_[np];
            np++;
            p += 4;
            s += n;
            continue;
        }
        if (*p != *s)
            return 0;
        p++;
        s++;
    }
    return !*p && !*s;
}

void
cp_dispatch(cp_server *srv, cp_request *req, cp_response *res)
{
    static __thread char params[4][256];
    const route *found = NULL;
    int path_known = 0;
    cx x;

    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (!match(routes[i].pattern, req->path, req->params, params))
            continue;
        path_known = 1;
        req->route = routes[i].pattern;
        /* HEAD is GET without the body (libmicrohttpd drops it), as
         * Starlette routes it. */
        if (!strcmp(routes[i].method, req->method) ||
            (!strcmp(req->method, "HEAD") && !strcmp(routes[i].method, "GET"))) {
            found = &routes[i];
            break;
        }
    }
    if (!found) {
        if (path_known)
            cp_reply_detail(res, 405, "Method Not Allowed");
        else {
            req->route = "-";
            cp_reply_detail(res, 404, "Not Found");
        }
        return;
    }
    cx_init(&x, srv);
    if ((found->auth == AUTH_FIRST && cp_authenticate(&x, req, res) < 0) ||
        (found->auth == AUTH_IN_READ &&
         cp_auth_digest(x.set->pepper, req, res, req->key_digest) < 0)) {
        cx_done(&x);
        return;
    }
    found->fn(&x, req, res);
    cx_done(&x);
}
