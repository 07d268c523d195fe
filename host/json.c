/*
 * host/json.c — the whole-document JSON parse the library's JSON inputs
 * share (backend_options, session states): json-c's tokenizer, strict as
 * JSON is written, with the offset and reason of the first fault.
 */
#include <stdint.h>
#include <string.h>

#include <json-c/json.h>

#include "internal.h"

int
sbx_json_parse_whole(const char *json, json_object **out, size_t *at, const char **why)
{
    size_t len = strlen(json), end;
    enum json_tokener_error je;
    json_tokener *tok = json_tokener_new();

    *out = NULL;
    if (!tok) {
        *at = 0;
        *why = "out of memory";
        return -2;
    }
    /* With its NUL, so that a number at the very end is complete. */
    json_object *o = json_tokener_parse_ex(tok, json, (int)(len >= INT32_MAX ? INT32_MAX : len + 1));
    je = json_tokener_get_error(tok);
    end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (je != json_tokener_success) {
        int short_doc = je == json_tokener_continue || je == json_tokener_error_parse_eof;

        json_object_put(o);
        *at = short_doc ? len : end;
        *why = short_doc ? "unexpected end of the document" : json_tokener_error_desc(je);
        return -1;
    }
    while (end < len && strchr(" \t\r\n", json[end]))
        end++;
    if (end < len) {
        json_object_put(o);
        *at = end;
        *why = "unexpected text after the document";
        return -1;
    }
    *out = o;
    return 0;
}
