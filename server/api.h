/*
 * server/api.h — what the endpoint files of sbx-server share: a request's
 * database context, statement helpers, the error payloads, scopes and
 * metering.
 */
#ifndef SBX_SERVER_API_H
#define SBX_SERVER_API_H

#include "lax.h"
#include "server.h"

/* One request's view of the store: a pooled connection, taken on first use
 * and given back at the end of the request (cx_done). A statement that
 * fails sets @failed and logs the engine's message (never a parameter). */
typedef struct cx {
    cp_server *srv;
    const cp_settings *set;
    store *st;
    const store_vtable *vt;
    store_conn *c;
    int failed;
    int in_txn;
} cx;

void cx_init(cx *x, cp_server *srv);
void cx_done(cx *x);

/* `n, params` for q()/ex(): P("a", b) → 2, (const char *const[]){"a", b}. */
#define P(...) (sizeof((const char *[]){ __VA_ARGS__ }) / sizeof(const char *)), \
               ((const char *const[]){ __VA_ARGS__ })

/* A query's rows (store_rows_free), NULL on failure. */
store_rows *q(cx *x, const char *sql, size_t n, const char *const *p);
/* A statement's changed-row count, -1 on failure (*@conflict: a unique
 * violation, when not NULL). */
int64_t ex(cx *x, const char *sql, size_t n, const char *const *p, int *conflict);
/* Transactions (server/store.h: @lock names the decision); durable at
 * commit. tx_begin_volatile(): one whose commit may be lost with the
 * machine (never with the process), for decisions no answer acknowledges. */
int tx_begin(cx *x, const char *lock);
int tx_begin_volatile(cx *x, const char *lock);
/* Gives the request's store connection back to the pool (outside a
 * transaction), before a wait on a provider; the next statement takes
 * one again. */
void cx_release(cx *x);
int tx_commit(cx *x);
void tx_rollback(cx *x);

/* 500 "Internal control-plane error." */
void reply_internal(cp_response *res);
/* 422 with a FastAPI-style validation list of one item: {"type": @type,
 * "loc": [@where, @field], "msg": @msg, "input": @input} (@field left out
 * when NULL; @input taken, NULL is JSON null); a value_error carries
 * "ctx": {"error": {}}, as FastAPI writes a ValueError's. */
void reply_validation(cp_response *res, const char *type, const char *where,
                      const char *field, const char *msg, json_object *input);
/* The same item with @loc, a JSON array of the path to the value (keys
 * and indexes; taken), and "ctx": @ctx after "input" when not NULL
 * (taken). */
void reply_validation_at(cp_response *res, const char *type, json_object *loc,
                         const char *msg, json_object *input, json_object *ctx);
/* Whether @res already holds a 422 whose "detail" is a validation list
 * (a field's refusal, to which the reply_validation functions append the
 * next one): a handler's own check, which pydantic would reach only with
 * every field valid, is then not answered. Reads @res only. */
int reply_has_validation_list(const cp_response *res);

/* reply_validation() with "ctx": @ctx (taken; NULL: none). */
void reply_validation_ctx(cp_response *res, const char *type, const char *where,
                          const char *field, const char *msg, json_object *input,
                          json_object *ctx);
/* An item of a list or dict field: "loc": [@where, @field, @item] (@item,
 * an index or a key, taken). */
void reply_validation_item(cp_response *res, const char *type, const char *where,
                           const char *field, json_object *item, const char *msg,
                           json_object *input);
/* {@name: @value} (@value taken): a constraint's ctx ({"gt": 0}). */
json_object *cp_ctx_num(const char *name, json_object *value);
/* A body member @field whose value @v (borrowed, not null) is read as
 * pydantic v2's lax mode reads the field's type (server/lax.h; one reader
 * per type, used by every field of that type): 0 with the coerced value in
 * *@out, or -1 with pydantic's 422 item in @res ("loc": ["body", @field],
 * "input" @v as sent, a float as Python writes it). body_int_gt0(): an int
 * with gt=0 (greater_than, ctx {"gt": 0}); *@range is CP_LAX_ABOVE when
 * the value is past INT64_MAX (*@out INT64_MAX: the field decides).
 * body_float_gt0(): a float with gt=0 (ctx {"gt": 0.0}); a value that is
 * infinite ("inf", "1e999"), which pydantic would take, is refused as
 * finite_number ("Input should be a finite number"), as a non-finite JSON
 * number is (no record or provider can carry it). body_bool(): a bool. */
int body_int_gt0(cp_response *res, const char *field, json_object *v, int64_t *out,
                 int *range);
int body_float_gt0(cp_response *res, const char *field, json_object *v, double *out);
int body_bool(cp_response *res, const char *field, json_object *v, int *out);
/* pydantic's too_long of a @field_type ("List", "Dictionary") field with
 * at most @max items and @actual: "{T} should have at most N items after
 * validation, not M", ctx {field_type, max_length, actual_length}; @input
 * taken. */
void reply_too_long(cp_response *res, const char *where, const char *field,
                    const char *field_type, size_t max, size_t actual, json_object *input);
/* pydantic's datetime_from_date_parsing of the text @text (a string that
 * cp_parse_iso() refused as invalid): "Input should be a valid datetime or
 * date, E", ctx {"error": E} with E its parser's words for the date
 * (cp_iso_error()); @input taken. */
void reply_datetime_parsing(cp_response *res, const char *where, const char *field,
                            const char *text, json_object *input);
/* A datetime field @field of @where ("body", "query") with the value @v
 * (borrowed) as pydantic v2 reads it: an ISO 8601 date-time with a time
 * zone, or Unix time (cp_unix_time()) as a JSON number (not a boolean) or
 * a numeric string (cp_number_text()), into *@us (microseconds since the
 * epoch, UTC). Returns 0, or -1 with the 422 in @res: a date-time without
 * a time zone "<field> must include a timezone" (the reference's
 * ValueError), a string pydantic refuses datetime_from_date_parsing, a
 * number out of its range datetime_parsing ("Input should be a valid
 * datetime, E", ctx {"error": E}), any other type datetime_type. */
int parse_datetime_value(cp_response *res, const char *where, const char *field, json_object *v,
                         int64_t *us);

/* auth.c: resolves the request's principal into req->who; on failure fills
 * @res (401, or 500 when the store failed) and returns -1. The two steps
 * it is made of are public for a handler that reads the key's row in its
 * own first statement (the execute: one read for the key, the sandbox and
 * the request id's execution): cp_auth_digest() checks the Authorization
 * header and puts the key's digest (lowercase hex HMAC-SHA256 under
 * @pepper) in @digest, or fills @res with 401 and returns -1;
 * cp_auth_apply() takes row 0 of @r, whose api_keys columns are
 * CP_KEY_COLUMNS (no row, or a NULL key_id: no such key), and answers
 * exactly as cp_authenticate() would (401 when unknown, revoked or
 * expired; last_used_at written at most once a minute). Revocation takes
 * effect at the statement that reads the row, on every server of the
 * database: no key is cached. */
int cp_authenticate(cx *x, cp_request *req, cp_response *res);
int cp_auth_digest(const char *pepper, const cp_request *req, cp_response *res,
                   char digest[65]);
int cp_auth_apply(cx *x, cp_request *req, cp_response *res, const store_rows *r);
/* The api_keys columns cp_auth_apply() reads, of the table aliased `k`. */
#define CP_KEY_COLUMNS "k.id AS key_id, k.organization_id AS key_org, k.name AS key_name," \
    " k.scopes_json AS key_scopes, k.expires_at AS key_expires_at," \
    " k.revoked_at AS key_revoked_at, k.last_used_at AS key_last_used_at"
/* auth.c: 1 when the principal holds @scope (`*` holds all; legacy
 * sandboxes:write holds create, execute, terminate and
 * providers:reconcile); else fills @res with 403 and returns 0. */
int cp_require_scope(const cp_request *req, cp_response *res, const char *scope);
int cp_has_scope(const cp_request *req, const char *scope);
/* auth.c: a new product key "bsk_live_" + 43 base64url characters, its
 * digest (HMAC-SHA256 under the pepper, hex) and prefix (first 17). */
void cp_new_product_key(const char *pepper, char secret[64], char digest[65], char prefix[18]);

/* auth.c / api.c handlers. */
void h_organizations(cx *x, cp_request *req, cp_response *res);
void h_keys_list(cx *x, cp_request *req, cp_response *res);
void h_keys_create(cx *x, cp_request *req, cp_response *res);
void h_keys_revoke(cx *x, cp_request *req, cp_response *res);
void h_session(cx *x, cp_request *req, cp_response *res);

/* meter.c: pricing, usage, the ledgers and the costs report. */
/* The hourly rate of a sandbox of this size, pico-dollars per hour (0 when
 * the price table has none), and the pricing source (the table's date). */
int64_t meter_hourly_rate(const char *backend, double cpu, int64_t memory_mb, const char *gpu);
const char *meter_price_version(void);
/* @pusd × the customer markup, rounded half away from zero. */
int64_t meter_customer(const cp_settings *set, int64_t pusd);
/* The cost of @us microseconds at @rate_pusd_h, rounded. */
int64_t meter_cost(int64_t rate_pusd_h, int64_t us);
/* Decimal text of @v units of 10^-@scale (no trailing zeros). */
void meter_fmt(int64_t v, int scale, char *buf, size_t cap);
/* Reads decimal text into 10^-@scale units; 0 or -1. */
int meter_parse(const char *text, int scale, int64_t *out);
/* Lifecycle accrual of sandbox @sandbox_id for observation @obs at @end_us
 * (CONTROL-PLANE.md §5), or at its expiry when that came first: nothing is
 * billed past a lifetime's end. In its own transaction. 0 or -1. */
int meter_accrue(cx *x, const char *sandbox_id, const char *obs, int64_t end_us);
/* Accrues an estimate for every active estimated sandbox of @org. */
int meter_accrue_active(cx *x, const char *org);
/* The execution outbox (meter.c, "The execution outbox"): writes the usage
 * event and both ledger entries of every execution whose key its outcome's
 * transaction put in execution_outbox (meter_outbox_add()), of organisation
 * @org (every organisation when NULL), oldest first, in transactions of up
 * to 64 executions under the lock "meter", each deleting the rows' outbox
 * entries. Must be called outside a
 * transaction. Returns the number of executions it metered (0 when none
 * was pending), or -1 when the store failed (what was committed stays;
 * the rest stays pending). */
int meter_settle(cx *x, const char *org);
/* Inside the outcome's transaction of execution (@org, @sandbox_id,
 * @request_id), whose executions row has its completed_at @completed_at
 * and its amounts: leaves its metering to the outbox (a row of
 * execution_outbox). 0, or -1 when the store failed (x->failed set). */
int meter_outbox_add(cx *x, const char *completed_at, const char *org, const char *sandbox_id,
                     const char *request_id);
/* The outbox thread of @srv: a meter_settle() of every organisation when
 * woken (meter_outbox_wake(), after an answer that left its metering to
 * the outbox) and every @sweep_secs seconds; NULL when the thread cannot
 * start. meter_outbox_stop() wakes it a last time, waits for its pass and
 * frees it (NULL ignored). Thread-safe. */
cp_meter *meter_outbox_start(cp_server *srv, double sweep_secs);
void meter_outbox_wake(cp_meter *m);
void meter_outbox_stop(cp_meter *m);
void h_costs(cx *x, cp_request *req, cp_response *res);
/* api.c: settles every abandoned execution of the store (every
 * organisation's): a `running` one whose deadline (its timeout's end, else
 * its sandbox's expiry) passed more than SBX_SERVER_EXECUTE_GRACE_SECS ago
 * is made failed, outcome unknown, with the row values and payload its
 * replay would settle it with (never metered), each in a transaction of
 * its own under its request id's lock, so a replay, an answer or another
 * server's sweep decides the same row once. Must be called outside a
 * transaction. Returns the number it settled, or -1 when the store failed
 * (what was committed stays). The execution outbox's thread calls it every
 * SBX_SERVER_METER_SWEEP_SECS, and main() before the server listens. */
int cp_settle_abandoned(cx *x);
/* meter.c: one cp_settle_abandoned() over a context of its own, its
 * outcome logged (a failure leaves the rows running for the next sweep or
 * a replay). The outbox thread's sweep, and main()'s before listening. */
void meter_abandoned_pass(cp_server *srv);
/* The detail's "cost" object of a sandbox, or NULL. */
json_object *meter_cost_json(cx *x, const char *sandbox_id);

#endif
