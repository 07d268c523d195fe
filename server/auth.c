/*
 * server/auth.c — product keys, the principal, scopes, organisations and
 * API keys (CONTROL-PLANE.md §1 "Sessions and keys", §2).
 *
 * A product key is "bsk_live_" + 43 base64url characters of 32 random
 * bytes (52 characters, as Python's token_urlsafe(32)). Only its digest is
 * stored: lowercase hex HMAC-SHA256 with the pepper as key over the whole
 * secret; lookup is by digest, and the 17-character prefix is for display
 * only. The secret is returned once, by the call that made it, and never
 * logged or echoed by any failure path (CASE-36).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "util.h"


void
cp_new_product_key(const char *pepper, char secret[64], char digest[65], char prefix[18])
{
    unsigned char raw[32];
    char *tok;

    cp_random(raw, sizeof raw);
    tok = cp_base64url(raw, sizeof raw);
    snprintf(secret, 64, "bsk_live_%s", tok);
    free(tok);
    cp_hmac_hex(pepper, secret, strlen(secret), digest);
    memcpy(prefix, secret, 17);
    prefix[17] = 0;
}

int
cp_has_scope(const cp_request *req, const char *scope)
{
    size_t n = req->who.scopes ? json_object_array_length(req->who.scopes) : 0;

    for (size_t i = 0; i < n; i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(req->who.scopes, i));
        if (!s)
            continue;
        if (!strcmp(s, "*") || !strcmp(s, scope))
            return 1;
        if (!strcmp(s, "sandboxes:write") &&
            (!strcmp(scope, "sandboxes:create") || !strcmp(scope, "sandboxes:execute") ||
             !strcmp(scope, "sandboxes:terminate") || !strcmp(scope, "providers:reconcile")))
            return 1;
    }
    return 0;
}

int
cp_require_scope(const cp_request *req, cp_response *res, const char *scope)
{
    char *m;

    if (cp_has_scope(req, scope))
        return 1;
    m = cp_printf("API key requires scope: %s", scope);
    cp_reply_detail(res, 403, m);
    free(m);
    return 0;
}

int
cp_auth_digest(const char *pepper, const cp_request *req, cp_response *res, char digest[65])
{
    const char *h = cp_header(req, "Authorization");
    const char *tok, *end;
    char *token;

    if (!h) {
        cp_reply_detail(res, 401, "Bearer API key or dashboard session required");
        return -1;
    }
    if (strncmp(h, "Bearer ", 7)) {
        cp_reply_detail(res, 401, "Bearer API key required");
        return -1;
    }
    tok = h + 7;
    while (*tok == ' ' || *tok == '\t')
        tok++;
    end = tok + strlen(tok);
    while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if ((size_t)(end - tok) < 9 || strncmp(tok, "bsk_live_", 9)) {
        cp_reply_detail(res, 401, "invalid API key");
        return -1;
    }
    token = strndup(tok, (size_t)(end - tok));
    if (!token) {
        reply_internal(res);
        return -1;
    }
    cp_hmac_hex(pepper, token, strlen(token), digest);
    free(token);
    return 0;
}

int
cp_auth_apply(cx *x, cp_request *req, cp_response *res, const store_rows *r)
{
    char now[40];
    int64_t now_us = cp_now_us(), exp_us, used_us;

    if (r->nrows == 0 || !store_cell(r, 0, "key_id") || store_cell(r, 0, "key_revoked_at")) {
        cp_reply_detail(res, 401, "invalid API key");
        return -1;
    }
    if (store_cell(r, 0, "key_expires_at") &&
        cp_parse_iso(store_cell(r, 0, "key_expires_at"), &exp_us) == 0 && exp_us <= now_us) {
        cp_reply_detail(res, 401, "API key has expired");
        return -1;
    }
    snprintf(req->who.org_id, sizeof req->who.org_id, "%s", store_cell(r, 0, "key_org"));
    snprintf(req->who.key_id, sizeof req->who.key_id, "%s", store_cell(r, 0, "key_id"));
    snprintf(req->who.key_name, sizeof req->who.key_name, "%s", store_cell(r, 0, "key_name"));
    req->who.scopes = json_tokener_parse(store_cell(r, 0, "key_scopes"));
    if (!json_object_is_type(req->who.scopes, json_type_array)) {
        json_object_put(req->who.scopes);
        req->who.scopes = json_object_new_array();
    }
    req->authed = 1;
    /* last_used_at, at most once a minute per key: a read-mostly request
     * stays a read. */
    if (!store_cell(r, 0, "key_last_used_at") ||
        cp_parse_iso(store_cell(r, 0, "key_last_used_at"), &used_us) < 0 ||
        now_us - used_us > 60 * 1000000LL) {
        cp_iso(now_us, now, sizeof now);
        ex(x, "UPDATE api_keys SET last_used_at = ? WHERE id = ?", P(now, req->who.key_id),
           NULL);
        x->failed = 0;             /* a lost timestamp never fails the request */
    }
    return 0;
}

int
cp_authenticate(cx *x, cp_request *req, cp_response *res)
{
    char digest[65];
    store_rows *r;
    int rc;

    if (cp_auth_digest(x->set->pepper, req, res, digest) < 0)
        return -1;
    r = q(x, "SELECT " CP_KEY_COLUMNS " FROM api_keys k WHERE k.key_digest = ?", P(digest));
    if (!r) {
        reply_internal(res);
        return -1;
    }
    rc = cp_auth_apply(x, req, res, r);
    store_rows_free(r);
    return rc;
}

/* The length of the Python whitespace character (str.isspace()) that
 * starts the UTF-8 at @p (@n bytes left), else 0. */
static size_t
py_space_at(const unsigned char *p, size_t n)
{
    if (n >= 1 && ((p[0] >= 0x09 && p[0] <= 0x0d) || (p[0] >= 0x1c && p[0] <= 0x20)))
        return 1;
    if (n >= 2 && p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0))
        return 2;                                       /* U+0085, U+00A0 */
    if (n >= 3 && p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80)
        return 3;                                       /* U+1680 */
    if (n >= 3 && p[0] == 0xe2 && p[1] == 0x80 &&
        (p[2] <= 0x8a || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf))
        return 3;                                       /* U+2000..200A, 2028, 2029, 202F */
    if (n >= 3 && p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f)
        return 3;                                       /* U+205F */
    if (n >= 3 && p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80)
        return 3;                                       /* U+3000 */
    return 0;
}

/* @s (UTF-8) without the whitespace Python's str.strip() removes from both
 * ends: a new string (empty when @s is only whitespace); aborts on out of
 * memory. */
static char *
py_strip(const char *s)
{
    const unsigned char *b = (const unsigned char *)s, *e = b + strlen(s);
    size_t k;

    while ((k = py_space_at(b, (size_t)(e - b))) > 0)
        b += k;
    for (;;) {
        /* The last character's start: back over continuation bytes. */
        const unsigned char *c = e;
        if (c == b)
            break;
        do
            c--;
        while (c > b && (*c & 0xc0) == 0x80);
        if (py_space_at(c, (size_t)(e - c)) != (size_t)(e - c))
            break;
        e = c;
    }
    char *out = strndup((const char *)b, (size_t)(e - b));
    if (!out)
        abort();
    return out;
}

/* {"name": 1..200 characters} → the name, or a 422 in @res. Characters
 * are Unicode code points, as pydantic counts a str (the body is valid
 * UTF-8 by now), and a refusal carries pydantic's ctx: {"max_length": 200}
 * or {"min_length": 1}. */
static const char *
body_name(json_object *body, cp_response *res)
{
    json_object *v, *loc, *ctx;
    const char *name;
    size_t n = 0;

    if (!json_object_object_get_ex(body, "name", &v) || json_object_is_type(v, json_type_null)) {
        reply_validation(res, "missing", "body", "name", "Field required", json_object_get(body));
        return NULL;
    }
    if (!json_object_is_type(v, json_type_string)) {
        reply_validation(res, "string_type", "body", "name", "Input should be a valid string",
                         json_object_get(v));
        return NULL;
    }
    name = json_object_get_string(v);
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        n += (*p & 0xc0) != 0x80;       /* continuation bytes are not counted */
    if (n == 0 || n > 200) {
        loc = json_object_new_array();
        json_object_array_add(loc, json_object_new_string("body"));
        json_object_array_add(loc, json_object_new_string("name"));
        ctx = json_object_new_object();
        json_object_object_add(ctx, n ? "max_length" : "min_length",
                               json_object_new_int(n ? 200 : 1));
        reply_validation_at(res, n ? "string_too_long" : "string_too_short", loc,
                            n ? "String should have at most 200 characters"
                              : "String should have at least 1 character",
                            json_object_get(v), ctx);
        return NULL;
    }
    return name;
}

/* The request body as a JSON object, or a 422 in @res. */
json_object *cp_body_object(const cp_request *req, cp_response *res);

void
h_organizations(cx *x, cp_request *req, cp_response *res)
{
    const char *admin = cp_header(req, "X-Control-Plane-Admin");
    json_object *body, *out, *org, *key, *scopes;
    const char *name;
    char *org_id, *key_id, *blank;
    char now[40], secret[64], digest[65], prefix[18];

    if (!x->set->admin_token || !*x->set->admin_token) {
        cp_reply_detail(res, 503, "organization bootstrap is disabled");
        return;
    }
    if (!admin || !cp_consttime_eq(admin, x->set->admin_token)) {
        cp_reply_detail(res, 401, "invalid control-plane admin token");
        return;
    }
    body = cp_body_object(req, res);
    if (!body)
        return;
    name = body_name(body, res);
    if (!name) {
        json_object_put(body);
        return;
    }
    blank = strdup(name);
    {
        char *s = blank, *e = blank + strlen(blank);
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
            e--;
        if (e == s) {
            free(blank);
            json_object_put(body);
            cp_reply_detail(res, 422, "organization name must not be blank");
            return;
        }
    }
    free(blank);
    org_id = cp_new_id("org");
    key_id = cp_new_id("key");
    cp_now_iso(now, sizeof now);
    cp_new_product_key(x->set->pepper, secret, digest, prefix);
    if (tx_begin(x, org_id) < 0 ||
        ex(x, "INSERT INTO organizations(id, name, created_at) VALUES (?, ?, ?)",
           P(org_id, name, now), NULL) < 0 ||
        ex(x, "INSERT INTO api_keys(id, organization_id, name, key_prefix, key_digest,"
              " scopes_json, created_at) VALUES (?, ?, 'Initial key', ?, ?, '[\"*\"]', ?)",
           P(key_id, org_id, prefix, digest, now), NULL) < 0 ||
        tx_commit(x) < 0) {
        tx_rollback(x);
        reply_internal(res);
    } else {
        out = json_object_new_object();
        org = json_object_new_object();
        json_object_object_add(org, "id", json_object_new_string(org_id));
        json_object_object_add(org, "name", json_object_new_string(name));
        json_object_object_add(org, "created_at", json_object_new_string(now));
        key = json_object_new_object();
        json_object_object_add(key, "id", json_object_new_string(key_id));
        json_object_object_add(key, "name", json_object_new_string("Initial key"));
        json_object_object_add(key, "prefix", json_object_new_string(prefix));
        scopes = json_object_new_array();
        json_object_array_add(scopes, json_object_new_string("*"));
        json_object_object_add(key, "scopes", scopes);
        json_object_object_add(key, "secret", json_object_new_string(secret));
        json_object_object_add(key, "created_at", json_object_new_string(now));
        json_object_object_add(out, "organization", org);
        json_object_object_add(out, "api_key", key);
        cp_reply_json(res, 201, out);
    }
    memset(secret, 0, sizeof secret);
    free(org_id);
    free(key_id);
    json_object_put(body);
}

static json_object *
scopes_of(const char *json)
{
    json_object *a = json ? json_tokener_parse(json) : NULL;

    if (!json_object_is_type(a, json_type_array)) {
        json_object_put(a);
        a = json_object_new_array();
    }
    return a;
}

static json_object *
nullable(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

void
h_keys_list(cx *x, cp_request *req, cp_response *res)
{
    store_rows *r;
    json_object *out;

    if (!cp_require_scope(req, res, "keys:write"))
        return;
    r = q(x, "SELECT id, name, key_prefix, scopes_json, created_at, last_used_at, expires_at,"
             " revoked_at FROM api_keys WHERE organization_id = ? ORDER BY created_at, id",
          P(req->who.org_id));
    if (!r) {
        reply_internal(res);
        return;
    }
    out = json_object_new_array();
    for (size_t i = 0; i < r->nrows; i++) {
        json_object *k = json_object_new_object();
        json_object_object_add(k, "id", json_object_new_string(store_cell(r, i, "id")));
        json_object_object_add(k, "name", json_object_new_string(store_cell(r, i, "name")));
        json_object_object_add(k, "prefix", json_object_new_string(store_cell(r, i, "key_prefix")));
        json_object_object_add(k, "scopes", scopes_of(store_cell(r, i, "scopes_json")));
        json_object_object_add(k, "created_at",
                               json_object_new_string(store_cell(r, i, "created_at")));
        json_object_object_add(k, "last_used_at", nullable(store_cell(r, i, "last_used_at")));
        json_object_object_add(k, "expires_at", nullable(store_cell(r, i, "expires_at")));
        json_object_object_add(k, "revoked_at", nullable(store_cell(r, i, "revoked_at")));
        json_object_array_add(out, k);
    }
    store_rows_free(r);
    cp_reply_json(res, 200, out);
    cp_reply_echo(res);         /* stored names and scopes */
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void
h_keys_create(cx *x, cp_request *req, cp_response *res)
{
    json_object *body, *v, *scopes, *out;
    const char *name, *list[64];
    size_t n = 0;
    char now[40], expires[40], secret[64], digest[65], prefix[18];
    const char *exp_p = NULL;
    char *key_id, *scopes_json;
    int bad = 0, empty = 0;
    char *stripped = NULL;

    if (!cp_require_scope(req, res, "keys:write"))
        return;
    body = cp_body_object(req, res);
    if (!body)
        return;
    /* The model's fields in order (name, scopes, expires_at), every
     * field's error an item of the one 422; then the handler's own
     * check of the scopes. */
    name = body_name(body, res);
    bad |= !name;
    if (json_object_object_get_ex(body, "scopes", &v) && !json_object_is_type(v, json_type_null)) {
        int bad_item = 0;
        if (!json_object_is_type(v, json_type_array)) {
            reply_validation(res, "list_type", "body", "scopes", "Input should be a valid list",
                             json_object_get(v));
            bad_item = 1;
        }
        /* At most 64: pydantic's too_long of a list with max_length,
         * which it finds before the items' errors and in their place. */
        if (!bad_item && json_object_array_length(v) > sizeof list / sizeof list[0]) {
            reply_too_long(res, "body", "scopes", "List", sizeof list / sizeof list[0],
                           json_object_array_length(v), json_object_get(v));
            bad_item = 1;
        }
        for (size_t i = 0; !bad_item && i < json_object_array_length(v); i++) {
            json_object *s = json_object_array_get_idx(v, i);
            if (!json_object_is_type(s, json_type_string)) {
                reply_validation_item(res, "string_type", "body", "scopes",
                                      json_object_new_int((int)i),
                                      "Input should be a valid string", json_object_get(s));
                bad = 1;
            }
        }
        bad |= bad_item;
        for (size_t i = 0; !bad && i < json_object_array_length(v); i++)
            list[n++] = json_object_get_string(json_object_array_get_idx(v, i));
        if (!bad && n == 0)
            empty = 1;
    } else {
        list[n++] = "*";
    }
    if (json_object_object_get_ex(body, "expires_at", &v) &&
        !json_object_is_type(v, json_type_null)) {
        int64_t us;
        if (parse_datetime_value(res, "body", "expires_at", v, &us) < 0) {
            bad = 1;
        } else {
            cp_iso(us, expires, sizeof expires);
            exp_p = expires;
        }
    }
    /* The handler's checks in the reference's order: the name, stripped
     * as Python strips it (and stored so), the scopes, then the expiry's
     * time zone (whose answer parse_datetime_value() gave when no field
     * failed: a detail string, not a list). */
    if (name && !(bad && reply_has_validation_list(res))) {
        stripped = py_strip(name);
        if (!*stripped) {
            cp_reply_detail(res, 422, "API-key name must not be empty");
            goto out;
        }
        name = stripped;
    }
    if (empty && !(bad && reply_has_validation_list(res))) {
        cp_reply_detail(res, 422, "at least one API-key scope is required");
        goto out;
    }
    if (bad)
        goto out;
    qsort(list, n, sizeof list[0], cmp_str);
    scopes = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(list[i], list[i - 1]))
            json_object_array_add(scopes, json_object_new_string(list[i]));
    key_id = cp_new_id("key");
    cp_now_iso(now, sizeof now);
    cp_new_product_key(x->set->pepper, secret, digest, prefix);
    scopes_json = strdup(json_object_to_json_string_ext(scopes, JSON_C_TO_STRING_PLAIN));
    if (ex(x, "INSERT INTO api_keys(id, organization_id, name, key_prefix, key_digest,"
              " scopes_json, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
           P(key_id, req->who.org_id, name, prefix, digest, scopes_json, now, exp_p), NULL) < 0) {
        json_object_put(scopes);
        reply_internal(res);
    } else {
        out = json_object_new_object();
        json_object_object_add(out, "id", json_object_new_string(key_id));
        json_object_object_add(out, "name", json_object_new_string(name));
        json_object_object_add(out, "prefix", json_object_new_string(prefix));
        json_object_object_add(out, "scopes", scopes);
        json_object_object_add(out, "secret", json_object_new_string(secret));
        json_object_object_add(out, "created_at", json_object_new_string(now));
        cp_reply_json(res, 201, out);
    }
    memset(secret, 0, sizeof secret);
    free(scopes_json);
    free(key_id);
out:
    free(stripped);
    json_object_put(body);
}

void
h_keys_revoke(cx *x, cp_request *req, cp_response *res)
{
    char now[40];
    int64_t n;

    if (!cp_require_scope(req, res, "keys:write"))
        return;
    cp_now_iso(now, sizeof now);
    n = ex(x, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND organization_id = ?"
              " AND revoked_at IS NULL", P(now, req->params[0], req->who.org_id), NULL);
    if (n < 0) {
        reply_internal(res);
        return;
    }
    if (n == 0) {
        cp_reply_detail(res, 404, "API key not found");
        return;
    }
    res->status = 204;
}

void
h_session(cx *x, cp_request *req, cp_response *res)
{
    json_object *out = json_object_new_object(), *scopes = json_object_new_array();
    const char *list[64];
    size_t n = 0, have = json_object_array_length(req->who.scopes);
    int admin, op;

    (void)x;
    for (size_t i = 0; i < have && n < 64; i++)
        list[n++] = json_object_get_string(json_object_array_get_idx(req->who.scopes, i));
    qsort(list, n, sizeof list[0], cmp_str);
    for (size_t i = 0; i < n; i++)
        json_object_array_add(scopes, json_object_new_string(list[i]));
    admin = cp_has_scope(req, "policies:write") && cp_has_scope(req, "providers:write");
    op = cp_has_scope(req, "sandboxes:terminate");
    json_object_object_add(out, "api_key_id", json_object_new_string(req->who.key_id));
    json_object_object_add(out, "scopes", scopes);
    json_object_object_add(out, "role", json_object_new_string(admin ? "administrator"
                                                               : op ? "operator" : "observer"));
    json_object_object_add(out, "can_terminate", json_object_new_boolean(op));
    json_object_object_add(out, "can_view_policy",
                           json_object_new_boolean(cp_has_scope(req, "policies:read") &&
                                                   cp_has_scope(req, "usage:read")));
    json_object_object_add(out, "can_manage_policy",
                           json_object_new_boolean(cp_has_scope(req, "policies:write")));
    json_object_object_add(out, "can_view_providers",
                           json_object_new_boolean(cp_has_scope(req, "providers:read")));
    json_object_object_add(out, "can_manage_providers",
                           json_object_new_boolean(cp_has_scope(req, "providers:write")));
    json_object_object_add(out, "can_create",
                           json_object_new_boolean(cp_has_scope(req, "sandboxes:create")));
    json_object_object_add(out, "can_view_alerts",
                           json_object_new_boolean(cp_has_scope(req, "alerts:read")));
    json_object_object_add(out, "can_view_audit",
                           json_object_new_boolean(cp_has_scope(req, "audit:read")));
    json_object_object_add(out, "can_export",
                           json_object_new_boolean(cp_has_scope(req, "exports:read")));
    json_object_object_add(out, "can_view_usage",
                           json_object_new_boolean(cp_has_scope(req, "usage:read")));
    json_object_object_add(out, "auth_mode", json_object_new_string("api_key"));
    cp_reply_json(res, 200, out);
    cp_reply_echo(res);         /* the key's stored scopes */
}
