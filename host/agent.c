/*
 * host/agent.c — run_agent: an agent CLI (Claude Code, Codex, OpenCode) in
 * a sandbox, its answer, status and usage read from its JSON output
 * (sbx.h, "Agents"; the reference's run_agent/Usage, CASE-41, CASE-56).
 *
 * The status comes from the CLI's own status fields: Claude's result
 * record (is_error, subtype), Codex's terminal events (turn.completed,
 * turn.failed), OpenCode's step records and error events; never from the
 * answer's text and never from the exit code alone. Costs are read from
 * the exact decimal text of the JSON numbers and summed as integers.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "internal.h"

/* Bytes of each stream kept in a command_failed error's context. */
#define TAIL_BYTES 2048

struct sbx_agent_run {
    sbx_agent_harness harness;
    sbx_agent_status status;
    char *text;
    char *reason;
    char *session_id;
    sbx_error_code error_code;
    int exit_code;
    sbx_result *result;
    sbx_usage usage;
};

SBX_EXPORT const char *
sbx_agent_harness_name(sbx_agent_harness harness)
{
    switch (harness) {
    case SBX_AGENT_CLAUDE_CODE: return "claude-code";
    case SBX_AGENT_CODEX: return "codex";
    case SBX_AGENT_OPENCODE: return "opencode";
    }
    return NULL;
}

SBX_EXPORT sbx_agent_harness
sbx_agent_harness_from_name(const char *name)
{
    if (!name)
        return 0;
    if (strcmp(name, "claude-code") == 0 || strcmp(name, "claude") == 0)
        return SBX_AGENT_CLAUDE_CODE;
    if (strcmp(name, "codex") == 0)
        return SBX_AGENT_CODEX;
    if (strcmp(name, "opencode") == 0)
        return SBX_AGENT_OPENCODE;
    return 0;
}

/* ------------------------------------------------------------ reading */

/* The JSON records of @text: one object, the elements of an array, or
 * one object per line (JSON lines; other lines are skipped). A new array
 * (possibly empty); NULL only when memory runs out. */
static json_object *
parse_records(const char *text, size_t len)
{
    json_object *all = json_object_new_array(), *doc;
    json_tokener *tok;
    const char *line = text, *end = text + len;

    if (!all)
        return NULL;
    tok = json_tokener_new();
    if (!tok)
        return all;
    doc = json_tokener_parse_ex(tok, text, (int)len);
    if (doc && json_tokener_get_parse_end(tok) < len) {
        /* More after the first value: JSON lines, read below. */
        size_t rest = json_tokener_get_parse_end(tok);
        int only_space = 1;

        for (size_t i = rest; i < len; i++)
            if (text[i] != ' ' && text[i] != '\n' && text[i] != '\r' && text[i] != '\t')
                only_space = 0;
        if (!only_space) {
            json_object_put(doc);
            doc = NULL;
        }
    }
    json_tokener_free(tok);
    if (doc && json_object_is_type(doc, json_type_object)) {
        json_object_array_add(all, doc);
        return all;
    }
    if (doc && json_object_is_type(doc, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(doc); i++) {
            json_object *r = json_object_array_get_idx(doc, i);

            if (json_object_is_type(r, json_type_object))
                json_object_array_add(all, json_object_get(r));
        }
        json_object_put(doc);
        return all;
    }
    json_object_put(doc);
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
        json_object *r;

        if (n > 0 && line[0] == '{') {
            char *copy = sbx_strndup(line, n);

            r = copy ? json_tokener_parse(copy) : NULL;
            free(copy);
            if (r && json_object_is_type(r, json_type_object))
                json_object_array_add(all, r);
            else
                json_object_put(r);
        }
        line += n + 1;
    }
    return all;
}

static const char *
get_str(json_object *o, const char *key)
{
    json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static int64_t
get_int(json_object *o, const char *key)
{
    json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || !v)
        return 0;
    return json_object_get_int64(v);
}

/* A token count: a JSON integer >= 0 (an integral number written with a
 * fraction or exponent, such as 1e3, too). Anything else (negative,
 * fractional, past INT64_MAX, a string, a boolean) is not a count the CLI
 * could have meant and counts 0. */
static int64_t
get_count(json_object *o, const char *key)
{
    json_object *v;
    int64_t n;
    double d;

    if (!json_object_object_get_ex(o, key, &v) || !v)
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        /* json-c holds integers past INT64_MAX as unsigned; those are no
         * count either. */
        if (json_object_get_uint64(v) > (uint64_t)INT64_MAX)
            return 0;
        n = json_object_get_int64(v);
        return n > 0 ? n : 0;
    }
    if (json_object_is_type(v, json_type_double)) {
        d = json_object_get_double(v);
        if (d >= 0 && d < 9223372036854775808.0 && d == (double)(int64_t)d)
            return (int64_t)d;
    }
    return 0;
}

/* A cost the CLI reported, in pico-dollars: a decimal number >= 0 that
 * fits. 0 with *@pusd set, or -1 (no such member, or not such a number:
 * the cost is then not known from it). */
static int
get_cost(json_object *o, const char *key, int64_t *pusd)
{
    json_object *v;
    int64_t c;

    if (!json_object_object_get_ex(o, key, &v) || !v ||
        (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)) ||
        sbx_json_decimal(v, 12, &c) < 0 || c < 0)
        return -1;
    *pusd = c;
    return 0;
}

/* The value of a path of keys, NULL when any is missing. */
static json_object *
get_path(json_object *o, const char *k1, const char *k2)
{
    json_object *v;

    if (!json_object_object_get_ex(o, k1, &v) || !v)
        return NULL;
    if (k2 && (!json_object_object_get_ex(v, k2, &v) || !v))
        return NULL;
    return v;
}

/* The kind of an error named by a CLI's structured fields: an HTTP
 * @status, or an error @name; 0 when they say nothing. */
static sbx_error_code
kind_of(int64_t status, const char *name)
{
    if (status == 429)
        return SBX_ERROR_RATE_LIMITED;
    if (status == 401 || status == 403)
        return SBX_ERROR_AUTHENTICATION;
    if (name) {
        if (strcmp(name, "rate_limit") == 0 || strcmp(name, "rate_limit_error") == 0)
            return SBX_ERROR_RATE_LIMITED;
        if (strcmp(name, "authentication_failed") == 0 ||
            strcmp(name, "oauth_org_not_allowed") == 0 ||
            strcmp(name, "authentication_error") == 0 ||
            strcmp(name, "ProviderAuthError") == 0)
            return SBX_ERROR_AUTHENTICATION;
    }
    return 0;
}

/* Claude Code: the last record of type "result". Returns the number of
 * Claude records seen. */
static size_t
read_claude(sbx_agent_run *run, json_object *records)
{
    json_object *result = NULL, *v, *u;
    const char *subtype, *text, *err_name = NULL;
    size_t seen = 0;
    int is_error;

    for (size_t i = 0; i < json_object_array_length(records); i++) {
        json_object *r = json_object_array_get_idx(records, i);
        const char *type = get_str(r, "type");

        if (!type)
            continue;
        if (strcmp(type, "result") == 0)
            result = r;
        if (strcmp(type, "result") == 0 || strcmp(type, "system") == 0 ||
            strcmp(type, "assistant") == 0 || strcmp(type, "user") == 0)
            seen++;
        if (strcmp(type, "assistant") == 0 && get_str(r, "error"))
            err_name = get_str(r, "error");
        if (!run->session_id && get_str(r, "session_id"))
            run->session_id = sbx_strdup(get_str(r, "session_id"));
    }
    if (!result) {
        run->status = SBX_AGENT_FAILED;
        run->reason = sbx_strdup("no result record");
        run->usage.llm_cost_unknown = 1;
        run->error_code = kind_of(0, err_name);
        return seen;
    }
    if (get_str(result, "session_id")) {
        free(run->session_id);
        run->session_id = sbx_strdup(get_str(result, "session_id"));
    }
    u = get_path(result, "usage", NULL);
    if (u) {
        run->usage.input_tokens = get_count(u, "input_tokens");
        run->usage.output_tokens = get_count(u, "output_tokens");
        run->usage.cache_read_tokens = get_count(u, "cache_read_input_tokens");
        run->usage.cache_write_tokens = get_count(u, "cache_creation_input_tokens");
    }
    if (get_cost(result, "total_cost_usd", &run->usage.llm_cost_pusd) == 0)
        run->usage.llm_cost_unknown = 0;
    else
        run->usage.llm_cost_unknown = 1;
    subtype = get_str(result, "subtype");
    text = get_str(result, "result");
    is_error = !(json_object_object_get_ex(result, "is_error", &v) &&
                 json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v));
    if (!is_error && subtype && strcmp(subtype, "success") == 0) {
        run->status = SBX_AGENT_SUCCEEDED;
        run->text = sbx_strdup(text ? text : "");
        return seen;
    }
    run->status = SBX_AGENT_FAILED;
    {
        sbx_strv parts = { 0 };
        json_object *errors = get_path(result, "errors", NULL);
        char *joined = NULL;

        if (errors && json_object_is_type(errors, json_type_array))
            for (size_t i = 0; i < json_object_array_length(errors); i++) {
                json_object *e = json_object_array_get_idx(errors, i);

                sbx_strv_push(&parts, json_object_is_type(e, json_type_string)
                                      ? json_object_get_string(e)
                                      : json_object_to_json_string_ext(
                                            e, JSON_C_TO_STRING_PLAIN));
            }
        if (parts.count == 0 && text && *text)
            sbx_strv_push(&parts, text);
        joined = parts.count ? sbx_strv_join(&parts, "; ") : NULL;
        if (subtype && strcmp(subtype, "success") == 0)
            run->reason = sbx_asprintf("success with is_error true%s%s", joined ? ": " : "",
                                       joined ? joined : "");
        else
            run->reason = sbx_asprintf("%s%s%s", subtype ? subtype : "result without subtype",
                                       joined ? ": " : "", joined ? joined : "");
        free(joined);
        sbx_strv_clear(&parts);
    }
    run->error_code = kind_of(get_int(result, "api_error_status"), err_name);
    /* A rate-limit result with no status field (CASE-56 G1) is the only
     * kind read from the text: the failure itself came from is_error. */
    if (!run->error_code && is_error && text && strncmp(text, "API Error: Rate limit", 21) == 0)
        run->error_code = SBX_ERROR_RATE_LIMITED;
    return seen;
}

/* Codex `exec --json`: thread.started, turn.*, item.*, error. */
static size_t
read_codex(sbx_agent_run *run, json_object *records)
{
    const char *failed = NULL, *last_error = NULL, *text = NULL;
    int completed = 0;
    size_t seen = 0;

    for (size_t i = 0; i < json_object_array_length(records); i++) {
        json_object *r = json_object_array_get_idx(records, i), *item, *u;
        const char *type = get_str(r, "type");

        if (!type)
            continue;
        if (strcmp(type, "thread.started") == 0) {
            seen++;
            if (get_str(r, "thread_id")) {
                free(run->session_id);
                run->session_id = sbx_strdup(get_str(r, "thread_id"));
            }
        } else if (strcmp(type, "turn.completed") == 0) {
            seen++;
            completed = 1;
            u = get_path(r, "usage", NULL);
            if (u) {
                int64_t in = get_count(u, "input_tokens");
                int64_t cached = get_count(u, "cached_input_tokens");
                int64_t out = get_count(u, "output_tokens");
                int64_t reasoning = get_count(u, "reasoning_output_tokens");
                sbx_usage *t = &run->usage;

                /* input_tokens include the cached ones. */
                t->input_tokens = sbx_sat_add(t->input_tokens, in > cached ? in - cached : 0);
                t->cache_read_tokens = sbx_sat_add(t->cache_read_tokens, cached);
                t->output_tokens = sbx_sat_add(t->output_tokens,
                                               out > reasoning ? out - reasoning : 0);
                t->reasoning_tokens = sbx_sat_add(t->reasoning_tokens, reasoning);
            }
        } else if (strcmp(type, "turn.failed") == 0) {
            seen++;
            failed = get_str(get_path(r, "error", NULL), "message");
            if (!failed)
                failed = "";
        } else if (strcmp(type, "error") == 0) {
            seen++;
            last_error = get_str(r, "message") ? get_str(r, "message") : "";
        } else if (strncmp(type, "item.", 5) == 0 || strncmp(type, "turn.", 5) == 0) {
            seen++;
            item = get_path(r, "item", NULL);
            if (strcmp(type, "item.completed") == 0 && item &&
                get_str(item, "type") && strcmp(get_str(item, "type"), "agent_message") == 0)
                text = get_str(item, "text");
        }
    }
    run->usage.llm_cost_unknown = 1;      /* Codex reports no cost */
    if (completed && !failed) {
        run->status = SBX_AGENT_SUCCEEDED;
        run->text = sbx_strdup(text ? text : "");
        return seen;
    }
    run->status = SBX_AGENT_FAILED;
    if (failed)
        run->reason = sbx_asprintf("turn.failed: %s", failed);
    else if (last_error)
        run->reason = sbx_asprintf("error: %s", last_error);
    else
        run->reason = sbx_strdup("no terminal event");
    return seen;
}

/* OpenCode `run --format json`: step_start, text, tool_use, step_finish,
 * error; each step_finish counted once (by part id). */
static size_t
read_opencode(sbx_agent_run *run, json_object *records)
{
    sbx_strv ids = { 0 };
    const char *text = NULL;
    char *error = NULL;
    int open_step = 0, finished = 0, cost_seen = 0, cost_overflow = 0;
    size_t seen = 0;

    for (size_t i = 0; i < json_object_array_length(records); i++) {
        json_object *r = json_object_array_get_idx(records, i), *part, *tokens, *v;
        const char *type = get_str(r, "type"), *id;

        if (!type)
            continue;
        part = get_path(r, "part", NULL);
        if (get_str(r, "sessionID") && !run->session_id)
            run->session_id = sbx_strdup(get_str(r, "sessionID"));
        if (strcmp(type, "step_start") == 0) {
            seen++;
            open_step = 1;
        } else if (strcmp(type, "text") == 0) {
            seen++;
            if (part && get_str(part, "text"))
                text = get_str(part, "text");
        } else if (strcmp(type, "step_finish") == 0) {
            seen++;
            open_step = 0;
            finished = 1;
            id = part ? get_str(part, "id") : NULL;
            if (id && sbx_strv_contains(&ids, id))
                continue;
            if (id)
                sbx_strv_push(&ids, id);
            tokens = part ? get_path(part, "tokens", NULL) : NULL;
            if (tokens) {
                sbx_usage *t = &run->usage;

                t->input_tokens = sbx_sat_add(t->input_tokens, get_count(tokens, "input"));
                t->output_tokens = sbx_sat_add(t->output_tokens, get_count(tokens, "output"));
                t->reasoning_tokens = sbx_sat_add(t->reasoning_tokens,
                                                  get_count(tokens, "reasoning"));
                v = get_path(tokens, "cache", NULL);
                if (v) {
                    t->cache_read_tokens = sbx_sat_add(t->cache_read_tokens,
                                                       get_count(v, "read"));
                    t->cache_write_tokens = sbx_sat_add(t->cache_write_tokens,
                                                        get_count(v, "write"));
                }
            }
            if (part) {
                int64_t c;

                if (get_cost(part, "cost", &c) == 0) {
                    if (__builtin_add_overflow(run->usage.llm_cost_pusd, c,
                                               &run->usage.llm_cost_pusd)) {
                        /* A sum past what an amount holds is no known cost. */
                        run->usage.llm_cost_pusd = 0;
                        cost_overflow = 1;
                    }
                    cost_seen = 1;
                }
            }
        } else if (strcmp(type, "error") == 0) {
            json_object *e = get_path(r, "error", NULL);
            const char *name = e ? get_str(e, "name") : NULL;
            const char *msg = e ? get_str(get_path(e, "data", NULL), "message") : NULL;

            seen++;
            free(error);
            error = sbx_asprintf("error: %s%s%s", name ? name : "error", msg ? ": " : "",
                                 msg ? msg : "");
            if (!run->error_code)
                run->error_code = kind_of(e ? get_int(get_path(e, "data", NULL), "statusCode")
                                            : 0, name);
        } else if (strcmp(type, "tool_use") == 0 || strcmp(type, "reasoning") == 0) {
            seen++;
        }
    }
    sbx_strv_clear(&ids);
    if (cost_overflow)
        run->usage.llm_cost_pusd = 0;
    run->usage.llm_cost_unknown = cost_seen && !cost_overflow ? 0 : 1;
    if (!error && finished && !open_step) {
        run->status = SBX_AGENT_SUCCEEDED;
        run->text = sbx_strdup(text ? text : "");
        return seen;
    }
    run->status = SBX_AGENT_FAILED;
    run->reason = error ? error : sbx_strdup("no step_finish after the last step_start");
    return seen;
}

/* ------------------------------------------------------------ running */

/* The CLI's argument vector for @req into @argv. 0 or -1 (OOM). The
 * prompt comes last, after "--", so that one starting with "-" ("-v",
 * "--dangerously-skip-permissions", "- a list item") is the prompt and
 * never an option of the CLI. */
static int
build_argv(const sbx_agent_request *req, sbx_strv *argv)
{
    const char *cmd = req->command;
    int r = 0;

    switch (req->harness) {
    case SBX_AGENT_CLAUDE_CODE:
        r |= sbx_strv_push(argv, cmd ? cmd : "claude");
        r |= sbx_strv_push(argv, "-p");
        r |= sbx_strv_push(argv, "--output-format");
        r |= sbx_strv_push(argv, "json");
        if (req->model) {
            r |= sbx_strv_push(argv, "--model");
            r |= sbx_strv_push(argv, req->model);
        }
        if (req->resume && !*req->resume) {
            r |= sbx_strv_push(argv, "-c");
        } else if (req->resume) {
            r |= sbx_strv_push(argv, "--resume");
            r |= sbx_strv_push(argv, req->resume);
        }
        for (size_t i = 0; req->extra_args && req->extra_args[i]; i++)
            r |= sbx_strv_push(argv, req->extra_args[i]);
        r |= sbx_strv_push(argv, "--");
        r |= sbx_strv_push(argv, req->prompt);
        break;
    case SBX_AGENT_CODEX:
        r |= sbx_strv_push(argv, cmd ? cmd : "codex");
        r |= sbx_strv_push(argv, "exec");
        r |= sbx_strv_push(argv, "--json");
        if (req->model) {
            r |= sbx_strv_push(argv, "--model");
            r |= sbx_strv_push(argv, req->model);
        }
        for (size_t i = 0; req->extra_args && req->extra_args[i]; i++)
            r |= sbx_strv_push(argv, req->extra_args[i]);
        if (req->resume) {
            r |= sbx_strv_push(argv, "resume");
            r |= sbx_strv_push(argv, *req->resume ? req->resume : "--last");
        }
        r |= sbx_strv_push(argv, "--");
        r |= sbx_strv_push(argv, req->prompt);
        break;
    case SBX_AGENT_OPENCODE:
        r |= sbx_strv_push(argv, cmd ? cmd : "opencode");
        r |= sbx_strv_push(argv, "run");
        r |= sbx_strv_push(argv, "--format");
        r |= sbx_strv_push(argv, "json");
        if (req->model) {
            r |= sbx_strv_push(argv, "--model");
            r |= sbx_strv_push(argv, req->model);
        }
        if (req->resume && !*req->resume) {
            r |= sbx_strv_push(argv, "-c");
        } else if (req->resume) {
            r |= sbx_strv_push(argv, "--session");
            r |= sbx_strv_push(argv, req->resume);
        }
        for (size_t i = 0; req->extra_args && req->extra_args[i]; i++)
            r |= sbx_strv_push(argv, req->extra_args[i]);
        r |= sbx_strv_push(argv, "--");
        r |= sbx_strv_push(argv, req->prompt);
        break;
    }
    return r ? -1 : 0;
}

/* A JSON string of text a CLI or a caller gave (NULL: JSON null): bytes
 * that are not UTF-8 become U+FFFD, so the document stays JSON. */
static json_object *
json_text(const char *text)
{
    char *valid;
    json_object *o;

    if (!text)
        return NULL;
    valid = sbx_utf8_dup(text);
    o = json_object_new_string(valid ? valid : "");
    free(valid);
    return o;
}

/* The ledger record of one finished call. */
static json_object *
call_record(const sbx_sandbox *sandbox, const sbx_agent_request *req, const sbx_agent_run *run)
{
    json_object *o = json_object_new_object();

    json_object_object_add(o, "kind", json_object_new_string("agent_call"));
    json_object_object_add(o, "backend", json_object_new_string(sandbox->client->backend));
    json_object_object_add(o, "sandbox_id", json_object_new_string(sandbox->id));
    json_object_object_add(o, "harness",
                           json_object_new_string(sbx_agent_harness_name(req->harness)));
    json_object_object_add(o, "model", json_text(req->model));
    json_object_object_add(o, "status", json_object_new_string(
                               run->status == SBX_AGENT_SUCCEEDED ? "succeeded" : "failed"));
    json_object_object_add(o, "reason", json_text(run->reason));
    json_object_object_add(o, "exit_code", json_object_new_int(run->exit_code));
    json_object_object_add(o, "session_id", json_text(run->session_id));
    return o;
}

SBX_EXPORT sbx_agent_run *
sbx_sandbox_run_agent(sbx_sandbox *sandbox, const sbx_agent_request *request,
                      sbx_error **error)
{
    static const char op[] = "run_agent";
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_exec_request exec = SBX_EXEC_REQUEST_INIT;
    sbx_strv argv = { 0 };
    sbx_error *err = NULL;
    sbx_agent_run *run = NULL;
    json_object *records = NULL, *record;
    const char *out;
    size_t out_len, seen = 0;
    sbx_result *result;

    if (!sandbox || !request) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "%s is NULL",
                      sandbox ? "request" : "sandbox");
        goto fail;
    }
    /* Every field up to the prompt is needed: an older or uninitialised
     * struct_size is said as such, not as a missing prompt. */
    if (request->struct_size < offsetof(sbx_agent_request, prompt) + sizeof(request->prompt)) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "request struct_size is %zu, needs at least %zu "
                                     "(initialise it with SBX_AGENT_REQUEST_INIT)",
                                     request->struct_size,
                                     offsetof(sbx_agent_request, prompt) +
                                     sizeof(request->prompt));
        sbx_error_add_contextf(e, "struct_size", "%zu", request->struct_size);
        goto fail;
    }
    memcpy(&req, request, request->struct_size < sizeof(req) ? request->struct_size
                                                              : sizeof(req));
    req.struct_size = sizeof(req);
    if (!sbx_agent_harness_name(req.harness)) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "unknown agent harness %d", (int)req.harness);
        sbx_error_add_contextf(e, "harness", "%d", (int)req.harness);
        goto fail;
    }
    if (!req.prompt) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "the prompt is NULL");
        goto fail;
    }
    if (build_argv(&req, &argv) < 0)
        goto oom;
    exec.argv = sbx_strv_view(&argv);
    exec.env = req.env;
    exec.cwd = req.cwd;
    exec.timeout_secs = req.timeout_secs;
    result = sbx_sandbox_execute_command(sandbox, &exec, &err);
    sbx_strv_clear(&argv);
    if (!result) {
        /* The caller's call is run_agent, whichever layer failed. */
        sbx_error_replace_op(err, "execute_command", op);
        sbx_error_replace_op(err, "exec", op);
        goto fail;
    }
    run = calloc(1, sizeof(*run));
    if (!run) {
        sbx_result_free(result);
        goto oom;
    }
    run->harness = req.harness;
    run->result = result;
    run->exit_code = sbx_result_get_exit_code(result);
    run->usage.struct_size = sizeof(run->usage);
    run->usage.calls = 1;
    out = sbx_result_get0_stdout(result, &out_len);
    records = parse_records(out, out_len);
    if (!records)
        goto oom;
    switch (req.harness) {
    case SBX_AGENT_CLAUDE_CODE: seen = read_claude(run, records); break;
    case SBX_AGENT_CODEX: seen = read_codex(run, records); break;
    case SBX_AGENT_OPENCODE: seen = read_opencode(run, records); break;
    }
    json_object_put(records);
    if (seen == 0) {
        sbx_error *e;

        if (sbx_result_is_timed_out(result))
            e = sbx_set_error(&err, SBX_ERROR_TIMEOUT, op,
                              "the %s CLI timed out before it printed a JSON record",
                              sbx_agent_harness_name(req.harness));
        else if (run->exit_code == 127)
            e = sbx_set_error(&err, SBX_ERROR_COMMAND_FAILED, op,
                              "the %s CLI \"%s\" was not found in the sandbox (exit code 127)",
                              sbx_agent_harness_name(req.harness),
                              req.command ? req.command
                              : req.harness == SBX_AGENT_CLAUDE_CODE ? "claude"
                              : req.harness == SBX_AGENT_CODEX ? "codex" : "opencode");
        else
            e = sbx_set_error(&err, SBX_ERROR_COMMAND_FAILED, op,
                              "the %s CLI exited with code %d and printed no %s JSON "
                              "record", sbx_agent_harness_name(req.harness), run->exit_code,
                              sbx_agent_harness_name(req.harness));
        sbx_error_add_output(e, result, TAIL_BYTES);
        sbx_agent_run_free(run);
        run = NULL;
        goto fail;
    }
    /* The exit code and the timeout can only make a run fail. */
    if (run->status == SBX_AGENT_SUCCEEDED &&
        (run->exit_code != 0 || sbx_result_is_timed_out(result))) {
        run->status = SBX_AGENT_FAILED;
        free(run->text);
        run->text = NULL;
        run->reason = sbx_result_is_timed_out(result) ? sbx_strdup("timed out")
                                                      : sbx_asprintf("exit code %d",
                                                                     run->exit_code);
    }
    if (run->status == SBX_AGENT_FAILED) {
        free(run->text);
        run->text = NULL;
        if (sbx_result_is_timed_out(result))
            run->error_code = SBX_ERROR_TIMEOUT;
        else if (!run->error_code)
            run->error_code = SBX_ERROR_COMMAND_FAILED;
        if (!run->reason)
            run->reason = sbx_strdup("failed");
    }
    record = call_record(sandbox, &req, run);
    sbx_usage_call_rate(sandbox, sbx_result_get_duration_secs(result), &run->usage, record);
    sbx_usage_add_tokens_json(record, &run->usage);
    json_object_object_add(record, "llm_cost_usd",
                           run->usage.llm_cost_unknown ? NULL
                           : sbx_json_new_decimal(run->usage.llm_cost_pusd, 12));
    json_object_object_add(record, "compute_cost_usd",
                           run->usage.compute_cost_unknown ? NULL
                           : sbx_json_new_decimal(run->usage.compute_cost_pusd, 12));
    sbx_usage_add_call(sandbox, &run->usage, record);
    json_object_put(record);
    return run;

oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
fail:
    sbx_strv_clear(&argv);
    sbx_error_fill(err, sandbox ? sandbox->client->backend : NULL, op);
    sbx_error_propagate(error, err);
    return NULL;
}

SBX_EXPORT sbx_agent_status
sbx_agent_run_get_status(const sbx_agent_run *run)
{
    return run ? run->status : SBX_AGENT_FAILED;
}

SBX_EXPORT const char *
sbx_agent_run_get0_text(const sbx_agent_run *run)
{
    return run ? run->text : NULL;
}

SBX_EXPORT const char *
sbx_agent_run_get0_reason(const sbx_agent_run *run)
{
    return run ? run->reason : NULL;
}

SBX_EXPORT sbx_error_code
sbx_agent_run_get_error_code(const sbx_agent_run *run)
{
    return run && run->status == SBX_AGENT_FAILED ? run->error_code : 0;
}

SBX_EXPORT const char *
sbx_agent_run_get0_session_id(const sbx_agent_run *run)
{
    return run ? run->session_id : NULL;
}

SBX_EXPORT int
sbx_agent_run_get_exit_code(const sbx_agent_run *run)
{
    return run ? run->exit_code : -1;
}

SBX_EXPORT const char *
sbx_agent_run_get0_stdout(const sbx_agent_run *run, size_t *len)
{
    if (!run) {
        if (len)
            *len = 0;
        return NULL;
    }
    return sbx_result_get0_stdout(run->result, len);
}

SBX_EXPORT const char *
sbx_agent_run_get0_stderr(const sbx_agent_run *run, size_t *len)
{
    if (!run) {
        if (len)
            *len = 0;
        return NULL;
    }
    return sbx_result_get0_stderr(run->result, len);
}

SBX_EXPORT int
sbx_agent_run_get_usage(const sbx_agent_run *run, sbx_usage *usage)
{
    size_t n;

    if (!run || !usage)
        return -1;
    n = usage->struct_size < sizeof(run->usage) ? usage->struct_size : sizeof(run->usage);
    if (n > sizeof(size_t))
        memcpy((char *)usage + sizeof(size_t), (const char *)&run->usage + sizeof(size_t),
               n - sizeof(size_t));
    return 0;
}

SBX_EXPORT char *
sbx_agent_run_to_json(const sbx_agent_run *run)
{
    json_object *o;
    char *s;

    if (!run)
        return NULL;
    o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string(
                               run->status == SBX_AGENT_SUCCEEDED ? "succeeded" : "failed"));
    json_object_object_add(o, "reason", json_text(run->reason));
    json_object_object_add(o, "error_code",
                           run->status == SBX_AGENT_FAILED
                           ? json_object_new_string(sbx_error_code_name(run->error_code)) : NULL);
    json_object_object_add(o, "text", json_text(run->text));
    json_object_object_add(o, "session_id", json_text(run->session_id));
    json_object_object_add(o, "exit_code", json_object_new_int(run->exit_code));
    json_object_object_add(o, "harness",
                           json_object_new_string(sbx_agent_harness_name(run->harness)));
    json_object_object_add(o, "usage", sbx_usage_json(&run->usage));
    s = sbx_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                  JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

SBX_EXPORT void
sbx_agent_run_free(sbx_agent_run *run)
{
    if (!run)
        return;
    free(run->text);
    free(run->reason);
    free(run->session_id);
    sbx_result_free(run->result);
    free(run);
}
