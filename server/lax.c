/*
 * server/lax.c — pydantic v2's lax coercions of body values (server/lax.h),
 * rule for rule as pydantic 2.13 (pydantic-core) applies them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lax.h"

static const cp_lax_error INT_TYPE = { "int_type", "Input should be a valid integer" };
static const cp_lax_error INT_PARSING = {
    "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
};
static const cp_lax_error INT_PARSING_SIZE = {
    "int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size"
};
static const cp_lax_error INT_FROM_FLOAT = {
    "int_from_float", "Input should be a valid integer, got a number with a fractional part"
};
static const cp_lax_error FLOAT_TYPE = { "float_type", "Input should be a valid number" };
static const cp_lax_error FLOAT_PARSING = {
    "float_parsing", "Input should be a valid number, unable to parse string as a number"
};
static const cp_lax_error BOOL_TYPE = { "bool_type", "Input should be a valid boolean" };
static const cp_lax_error BOOL_PARSING = {
    "bool_parsing", "Input should be a valid boolean, unable to interpret input"
};

/* pydantic's bound on an integer's text: Python's default
 * int_max_str_digits (cp_lax_int_text() says how it applies). */
#define LAX_MAX_DIGITS 4300

static int
fail(cp_lax_error *err, const cp_lax_error *e)
{
    *err = *e;
    return -1;
}

static int
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The length of the Unicode White_Space character (Rust's
 * char::is_whitespace, which pydantic's trim uses) that begins at @p, or 0. */
static size_t
ws_at(const unsigned char *p, const unsigned char *end)
{
    size_t n = (size_t)(end - p);

    if (n >= 1 && ((*p >= 0x09 && *p <= 0x0d) || *p == 0x20))
        return 1;
    if (n >= 2 && p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0))
        return 2;
    if (n >= 3) {
        if (p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80)                   /* U+1680 */
            return 3;
        if (p[0] == 0xe2 && p[1] == 0x80 &&                 /* U+2000..200A, 2028, 2029, 202F */
            ((p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf))
            return 3;
        if (p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f)                   /* U+205F */
            return 3;
        if (p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80)                   /* U+3000 */
            return 3;
    }
    return 0;
}

/* [*@b, *@e) without Unicode white space at either end. */
static void
trim(const char **b, const char **e)
{
    const unsigned char *p = (const unsigned char *)*b, *q = (const unsigned char *)*e;
    size_t n;

    while (p < q && (n = ws_at(p, q)) > 0)
        p += n;
    while (p < q) {
        /* A white space character ends at q: 1 to 3 bytes back. */
        size_t k;
        for (k = 1; k <= 3 && q - k >= p; k++)
            if (ws_at(q - k, q) == k)
                break;
        if (k > 3 || q - k < p)
            break;
        q -= k;
    }
    *b = (const char *)p;
    *e = (const char *)q;
}

int
cp_lax_int_text(const char *text, size_t len, int64_t *out, int *range, cp_lax_error *err)
{
    const char *b = text, *e = text + len, *dot, *p;
    uint64_t acc = 0;
    size_t sig = 0;
    int neg = 0, over = 0, prev_digit = 0, trimmed;

    trim(&b, &e);
    trimmed = b != text || e != text + len;
    /* "5.0", "5.00": a point and zeros only after it. */
    dot = memchr(b, '.', (size_t)(e - b));
    if (dot) {
        if (dot + 1 == e)
            return fail(err, &INT_PARSING);
        for (p = dot + 1; p < e; p++)
            if (*p != '0')
                return fail(err, &INT_PARSING);
        e = dot;
    }
    /* A sign, then leading zeros: pydantic skips zeros and underscores,
     * then reads a minus sign (after none before), one underscore and
     * digits that do not begin with a zero ("0-5", "+0-5" and "0_-_5"
     * are -5, "-0__5" too; "0-05" is no integer). */
    p = b;
    if (p < e && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    if (e - p > 1 && *p == '0') {
        const char *q = p;
        while (q < e && (*q == '0' || *q == '_'))
            q++;
        if (q == e) {
            if (e[-1] != '0')
                return fail(err, &INT_PARSING);
            *out = 0;
            *range = CP_LAX_IN_RANGE;
            return 0;
        }
        if (*q == '-' && !neg) {
            neg = 1;
            q++;
            if (q < e && *q == '_')
                q++;
            if (q < e && *q == '0' && q + 1 != e)
                return fail(err, &INT_PARSING);
        }
        p = q;
    }
    if (p == e)
        return fail(err, &INT_PARSING);
    for (; p < e; p++) {
        if (*p == '_') {
            /* One underscore between two digits. */
            if (!prev_digit || p + 1 == e || !is_digit(p[1]))
                return fail(err, &INT_PARSING);
            prev_digit = 0;
            continue;
        }
        if (!is_digit(*p))
            return fail(err, &INT_PARSING);
        if (sig || *p != '0')
            sig++;
        if (!over) {
            unsigned d = (unsigned)(*p - '0');
            if (acc > (UINT64_MAX - d) / 10)
                over = 1;
            else
                acc = acc * 10 + d;
        }
        prev_digit = 1;
    }
    /* Past the bound: written as JSON writes integers (an optional
     * minus, no leading zero, no underscore, no white space around), more
     * than LAX_MAX_DIGITS characters are too large (pydantic reads that
     * text as a JSON number first); written otherwise, more digits than
     * that are no integer (Python's int() digit limit). */
    if (sig > LAX_MAX_DIGITS || (size_t)(e - b) > LAX_MAX_DIGITS) {
        const char *d = b + (*b == '-');
        int json_like = !trimmed && *b != '+' && d < e && (*d != '0' || e - d == 1);
        for (p = d; json_like && p < e; p++)
            json_like = is_digit(*p);
        if (json_like && (size_t)(e - b) > LAX_MAX_DIGITS)
            return fail(err, &INT_PARSING_SIZE);
        if (sig > LAX_MAX_DIGITS)
            return fail(err, &INT_PARSING);
    }
    if (neg) {
        if (over || acc > (uint64_t)INT64_MAX + 1) {
            *out = INT64_MIN;
            *range = CP_LAX_BELOW;
        } else {
            *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
            *range = CP_LAX_IN_RANGE;
        }
    } else if (over || acc > (uint64_t)INT64_MAX) {
        *out = INT64_MAX;
        *range = CP_LAX_ABOVE;
    } else {
        *out = (int64_t)acc;
        *range = CP_LAX_IN_RANGE;
    }
    return 0;
}

/* [@b, @e) in Rust's f64 syntax (str::parse): an optional sign, then
 * "inf", "infinity" or "nan" in any case, or digits with an optional
 * point (at least one digit on either side) and an optional exponent. */
static int
rust_float(const char *b, const char *e, double *out)
{
    const char *p = b, *num;
    size_t n;
    int neg = 0, digits = 0;
    char *copy;

    if (p < e && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    n = (size_t)(e - p);
    if ((n == 3 && !strncasecmp(p, "inf", 3)) || (n == 8 && !strncasecmp(p, "infinity", 8))) {
        *out = neg ? -INFINITY : INFINITY;
        return 0;
    }
    if (n == 3 && !strncasecmp(p, "nan", 3)) {
        *out = NAN;
        return 0;
    }
    num = p;
    for (; p < e && is_digit(*p); p++)
        digits++;
    if (p < e && *p == '.')
        for (p++; p < e && is_digit(*p); p++)
            digits++;
    if (!digits)
        return -1;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (p == e || !is_digit(*p))
            return -1;
        while (p < e && is_digit(*p))
            p++;
    }
    if (p != e)
        return -1;
    /* Checked above: strtod() reads exactly this decimal text, correctly
     * rounded (overflow to infinity, underflow to zero, as Rust). */
    copy = strndup(num, (size_t)(e - num));
    *out = strtod(copy, NULL);
    free(copy);
    if (neg)
        *out = -*out;
    return 0;
}

int
cp_lax_float_text(const char *text, size_t len, double *out, cp_lax_error *err)
{
    const char *b = text, *e = text + len;
    char *s, *w;
    int rc, prev_us = 0;

    trim(&b, &e);
    if (rust_float(b, e, out) == 0)
        return 0;
    /* Then underscores out of the untrimmed text: none first or last, and
     * never two together. */
    if (!memchr(text, '_', len) || text[0] == '_' || text[len - 1] == '_')
        return fail(err, &FLOAT_PARSING);
    s = w = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '_') {
            if (prev_us) {
                free(s);
                return fail(err, &FLOAT_PARSING);
            }
            prev_us = 1;
            continue;
        }
        prev_us = 0;
        *w++ = text[i];
    }
    rc = rust_float(s, w, out);
    free(s);
    return rc == 0 ? 0 : fail(err, &FLOAT_PARSING);
}

int
cp_lax_bool_text(const char *text, size_t len, int *out, cp_lax_error *err)
{
    static const char *const words[] = { "0", "off", "f", "false", "n", "no",
                                         "1", "on", "t", "true", "y", "yes" };

    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strlen(words[i]) == len && !strncasecmp(text, words[i], len)) {
            *out = i >= 6;
            return 0;
        }
    return fail(err, &BOOL_PARSING);
}

/* The text json-c prints for the integer @v: its digits, or the literal
 * it was sent as when that was past int64 (server/api.c keeps it). */
static const char *
int_text(json_object *v)
{
    return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

int
cp_lax_int(json_object *v, int64_t *out, int *range, cp_lax_error *err)
{
    const char *t;

    switch (json_object_get_type(v)) {
    case json_type_boolean:
        *out = json_object_get_boolean(v) ? 1 : 0;
        *range = CP_LAX_IN_RANGE;
        return 0;
    case json_type_int:
        t = int_text(v);
        return cp_lax_int_text(t, strlen(t), out, range, err);
    case json_type_double: {
        double d = json_object_get_double(v);
        /* Past 2^53 every double is whole. */
        if (d >= 9223372036854775808.0 || d <= -9223372036854775808.0)
            return fail(err, &INT_PARSING_SIZE);
        if ((double)(int64_t)d != d)
            return fail(err, &INT_FROM_FLOAT);
        *out = (int64_t)d;
        *range = CP_LAX_IN_RANGE;
        return 0;
    }
    case json_type_string:
        return cp_lax_int_text(json_object_get_string(v), (size_t)json_object_get_string_len(v),
                               out, range, err);
    default:
        return fail(err, &INT_TYPE);
    }
}

int
cp_lax_float(json_object *v, double *out, cp_lax_error *err)
{
    switch (json_object_get_type(v)) {
    case json_type_boolean:
        *out = json_object_get_boolean(v) ? 1.0 : 0.0;
        return 0;
    case json_type_int:
        /* Python's float(int): correctly rounded; past the double range
         * an OverflowError, which pydantic answers float_type. */
        *out = strtod(int_text(v), NULL);
        return isinf(*out) ? fail(err, &FLOAT_TYPE) : 0;
    case json_type_double:
        *out = json_object_get_double(v);
        return 0;
    case json_type_string:
        return cp_lax_float_text(json_object_get_string(v),
                                 (size_t)json_object_get_string_len(v), out, err);
    default:
        return fail(err, &FLOAT_TYPE);
    }
}

int
cp_lax_bool(json_object *v, int *out, cp_lax_error *err)
{
    switch (json_object_get_type(v)) {
    case json_type_boolean:
        *out = json_object_get_boolean(v) ? 1 : 0;
        return 0;
    case json_type_int: {
        const char *t = int_text(v);
        int64_t i;
        int range;
        if (cp_lax_int_text(t, strlen(t), &i, &range, err) < 0 || range != CP_LAX_IN_RANGE)
            return fail(err, &BOOL_TYPE);
        if (i != 0 && i != 1)
            return fail(err, &BOOL_PARSING);
        *out = (int)i;
        return 0;
    }
    case json_type_double: {
        double d = json_object_get_double(v);
        if (d != floor(d) || d >= 9223372036854775808.0 || d <= -9223372036854775808.0)
            return fail(err, &BOOL_TYPE);
        if (d != 0 && d != 1)
            return fail(err, &BOOL_PARSING);
        *out = d == 1;
        return 0;
    }
    case json_type_string:
        return cp_lax_bool_text(json_object_get_string(v), (size_t)json_object_get_string_len(v),
                                out, err);
    default:
        return fail(err, &BOOL_TYPE);
    }
}
