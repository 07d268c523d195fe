/*
 * host/extract.c — JSON out of a command's output, for programs that ask
 * an agent (or any command) for a structured answer: the whole text, then
 * a fenced block, then each balanced {...} in turn, as the reference's
 * return_type parsing searches (sbx.h, "Structured output").
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "internal.h"

/* Parses exactly @len bytes of @s as one JSON value (surrounding white
 * space allowed); NULL when they are not. */
static json_object *
parse_exact(const char *s, size_t len)
{
    json_tokener *tok;
    json_object *v;
    size_t end;

    while (len > 0 && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) {
        s++;
        len--;
    }
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\n' || s[len - 1] == '\r' ||
                       s[len - 1] == '\t'))
        len--;
    if (len == 0 || len > (size_t)INT32_MAX || memchr(s, '\0', len))
        return NULL;
    tok = json_tokener_new();
    if (!tok)
        return NULL;
    v = json_tokener_parse_ex(tok, s, (int)len);
    end = json_tokener_get_parse_end(tok);
    if (v && end != len) {
        json_object_put(v);
        v = NULL;
    }
    if (!v && json_tokener_get_error(tok) == json_tokener_continue) {
        /* A number at the very end needs the end of input to be known. */
        v = json_tokener_parse_ex(tok, "", -1);
    }
    json_tokener_free(tok);
    /* Only objects and arrays are structured answers. */
    if (v && !json_object_is_type(v, json_type_object) &&
        !json_object_is_type(v, json_type_array)) {
        json_object_put(v);
        v = NULL;
    }
    return v;
}

/* The first fenced block (``` or ```json, up to the next ```) that parses. */
static json_object *
from_fence(const char *s, size_t len)
{
    const char *end = s + len, *p = s;

    while ((p = memmem(p, (size_t)(end - p), "```", 3)) != NULL) {
        const char *body = p + 3, *close;
        json_object *v;

        /* The info string ("json", "JSON", ...) up to the end of the line. */
        while (body < end && *body != '\n')
            body++;
        if (body >= end)
            return NULL;
        body++;
        close = memmem(body, (size_t)(end - body), "```", 3);
        if (!close)
            return NULL;
        v = parse_exact(body, (size_t)(close - body));
        if (v)
            return v;
        p = close + 3;
    }
    return NULL;
}

/* Each balanced {...} from left to right (strings and escapes skipped);
 * the first that parses. */
static json_object *
from_objects(const char *s, size_t len)
{
    for (size_t start = 0; start < len; start++) {
        int depth = 0, in_string = 0;

        if (s[start] != '{')
            continue;
        for (size_t i = start; i < len; i++) {
            char c = s[i];

            if (in_string) {
                if (c == '\\')
                    i++;
                else if (c == '"')
                    in_string = 0;
                continue;
            }
            if (c == '"') {
                in_string = 1;
            } else if (c == '{') {
                depth++;
            } else if (c == '}' && --depth == 0) {
                json_object *v = parse_exact(s + start, i - start + 1);

                if (v)
                    return v;
                break;
            }
        }
    }
    return NULL;
}

SBX_EXPORT struct json_object *
sbx_json_extract(const char *text, size_t len, sbx_error **error)
{
    json_object *v;
    sbx_error *err = NULL;

    if (!text) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "json_extract", "text is NULL");
        sbx_error_propagate(error, err);
        return NULL;
    }
    v = parse_exact(text, len);
    if (!v)
        v = from_fence(text, len);
    if (!v)
        v = from_objects(text, len);
    if (!v) {
        char *head = sbx_strndup(text, len > 80 ? 80 : len);
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "json_extract",
                                     "no JSON object or array in the text (%zu bytes%s%s%s)",
                                     len, len ? ", starting \"" : "", head ? head : "",
                                     len ? "\"" : "");

        sbx_error_add_contextf(e, "length", "%zu", len);
        free(head);
        sbx_error_propagate(error, err);
    }
    return v;
}

SBX_EXPORT struct json_object *
sbx_result_get_json(const sbx_result *result, sbx_error **error)
{
    sbx_error *err = NULL, *e;
    json_object *v;

    if (!result) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "json_extract", "result is NULL");
        sbx_error_propagate(error, err);
        return NULL;
    }
    if (result->exit_code != 0) {
        e = sbx_set_error(&err, SBX_ERROR_COMMAND_FAILED, "json_extract",
                          "the command exited with code %d", result->exit_code);
        goto attach;
    }
    v = sbx_json_extract(result->out, result->out_len, &err);
    if (v)
        return v;
    e = err;
    if (e) {
        /* No JSON in what the command printed: the command's failure. */
        sbx_error_free(e);
        err = NULL;
        e = sbx_set_error(&err, SBX_ERROR_COMMAND_FAILED, "json_extract",
                          "the command's output holds no JSON object or array");
    }
attach:
    sbx_error_add_output(e, result, 2048);
    sbx_error_propagate(error, err);
    return NULL;
}
