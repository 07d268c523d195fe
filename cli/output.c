/*
 * The sbx tool's output (cli.h): the command's streamed output, names
 * escaped for tables and JSON, and exec results.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* ------------------------------------------------------- names shown */

/* The length of the valid UTF-8 sequence at @s (at most @n bytes): 1-4, or
 * 0 when the bytes there are not valid UTF-8 (overlong forms, surrogates
 * and code points above U+10FFFF are not). *@cp gets the code point. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len, i;
    uint32_t c;

    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        len = 2;
        c = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        len = 3;
        c = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        len = 4;
        c = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
        (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

/* 1 when @s is valid UTF-8. */
static int utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), len;
    uint32_t cp;

    while (n > 0) {
        len = utf8_seq(p, n, &cp);
        if (len == 0)
            return 0;
        p += len;
        n -= len;
    }
    return 1;
}

/*
 * @s for a table (new string; NULL when memory runs out): a backslash
 * becomes "\\", newline, carriage return and tab "\n", "\r", "\t", every
 * other control character (C0, DEL and the C1 controls U+0080-U+009F) and
 * every byte that is not part of valid UTF-8 "\xHH" for each of its bytes;
 * the rest (printable ASCII, valid UTF-8) is kept as is.
 */
char *cli_escape_name(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), len, o = 0;
    char *out = malloc(4 * n + 1);
    uint32_t cp;

    if (out == NULL)
        return NULL;
    while (n > 0) {
        len = utf8_seq(p, n, &cp);
        if (len == 1 && cp == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
        } else if (len == 1 && (cp == '\n' || cp == '\r' || cp == '\t')) {
            out[o++] = '\\';
            out[o++] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
        } else if (len == 0 || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
            size_t k, bytes = len ? len : 1;

            for (k = 0; k < bytes; k++)
                o += (size_t)sprintf(out + o, "\\x%02x", p[k]);
            len = bytes;
        } else {
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
        n -= len;
    }
    out[o] = '\0';
    return out;
}

/* Prints @s escaped (escape_name) to stdout. */
void cli_print_escaped(const char *s)
{
    char *e = cli_escape_name(s);

    fputs(e != NULL ? e : "?", stdout);
    free(e);
}

/* Base64 (RFC 4648, with padding) of @s, as a new string. */
static char *base64_of(const char *s)
{
    static const char abc[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i, o = 0;
    char *out = malloc((n + 2) / 3 * 4 + 1);

    if (out == NULL)
        return NULL;
    for (i = 0; i + 2 < n; i += 3) {
        out[o++] = abc[p[i] >> 2];
        out[o++] = abc[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
        out[o++] = abc[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
        out[o++] = abc[p[i + 2] & 63];
    }
    if (i < n) {
        out[o++] = abc[p[i] >> 2];
        if (i + 1 < n) {
            out[o++] = abc[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
            out[o++] = abc[(p[i + 1] & 15) << 2];
        } else {
            out[o++] = abc[(p[i] & 3) << 4];
            out[o++] = '=';
        }
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

/*
 * Adds @key: @s to JSON object @o so that the document stays valid UTF-8:
 * @s itself when it is valid UTF-8 (JSON escapes its control characters);
 * else @s with each byte that is not part of valid UTF-8 replaced by
 * U+FFFD, plus KEY_base64: the exact bytes in base64.
 */
void cli_json_add_name(json_object *o, const char *key, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), len, w = 0;
    char *shown, *b64, b64_key[64];
    uint32_t cp;

    if (utf8_valid(s)) {
        json_object_object_add(o, key, json_object_new_string(s));
        return;
    }
    shown = malloc(3 * n + 1);
    b64 = base64_of(s);
    if (shown != NULL) {
        while (n > 0) {
            len = utf8_seq(p, n, &cp);
            if (len == 0) {
                memcpy(shown + w, "\xef\xbf\xbd", 3);
                w += 3;
                len = 1;
            } else {
                memcpy(shown + w, p, len);
                w += len;
            }
            p += len;
            n -= len;
        }
        shown[w] = '\0';
    }
    json_object_object_add(o, key, shown != NULL ? json_object_new_string(shown) : NULL);
    snprintf(b64_key, sizeof b64_key, "%s_base64", key);
    json_object_object_add(o, b64_key, b64 != NULL ? json_object_new_string(b64) : NULL);
    free(shown);
    free(b64);
}

/*
 * Prints @doc, pretty, and a newline to stdout. json-c escapes the C0
 * controls; DEL and the C1 controls (U+0080-U+009F), which a terminal may
 * also act on, are written as \u007f and \u0080-\u009f: the same string to
 * any JSON reader. (Those bytes occur only inside strings, and the text is
 * valid UTF-8, so 0xc2 there is always a lead byte.)
 */
void cli_print_json(json_object *doc)
{
    const char *text = json_object_to_json_string_ext(
        doc, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                 JSON_C_TO_STRING_NOSLASHESCAPE);
    const unsigned char *p = (const unsigned char *)(text != NULL ? text : "null");

    for (; *p != '\0'; p++) {
        if (*p == 0x7f) {
            fputs("\\u007f", stdout);
        } else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            printf("\\u00%02x", p[1]);
            p++;
        } else {
            putchar(*p);
        }
    }
    putchar('\n');
    json_object_put(doc);
}

/* ------------------------------------------------------------------ output */

static void write_all(cli_sink *sink, int fd, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0 && !sink->broken[fd]) {
        ssize_t n = write(fd, p, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            sink->broken[fd] = 1;
            return;
        }
        p += n;
        len -= (size_t)n;
    }
}

void cli_sink_output(sbx_stream stream, const void *data, size_t len, void *user_data)
{
    cli_sink *sink = user_data;

    write_all(sink, stream == SBX_STREAM_STDERR ? STDERR_FILENO : STDOUT_FILENO,
              data, len);
}

/* The exit status of an exec's result. */
int cli_exec_status(sbx_result *result, sbx_error *error)
{
    int status;

    if (result == NULL) {
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    status = sbx_result_get_exit_code(result);
    if (sbx_result_is_timed_out(result))
        cli_msg("the command timed out and was killed");
    if (sbx_result_is_oom_killed(result))
        cli_msg("the command ran out of memory and was killed (the sandbox's memory limit)");
    sbx_result_free(result);
    return status;
}

void cli_json_add_string(json_object *o, const char *key, const char *s)
{
    json_object_object_add(o, key, s != NULL ? json_object_new_string(s) : NULL);
}
