/*
 * host/money.c — exact decimal amounts.
 *
 * Money never goes through binary floating point: a decimal text ("0.0070147",
 * "31.5", "1e-5") is read into an integer count of 10^-scale units, rounded
 * half away from zero past the scale, and printed back exactly. Costs are
 * pico-dollars (scale 12), rates pico-dollars per hour, sums plain integer
 * additions (CASE-41: 0.0070147 + 0.0041023 is 0.011117, not
 * 0.011116999999999998).
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "internal.h"

int
sbx_decimal_parse(const char *text, int scale, int64_t *out)
{
    const char *p = text;
    int neg = 0, seen = 0, frac = 0, exp = 0, shift, point = 0;
    char digits[64];
    size_t nd = 0;
    unsigned __int128 v = 0, limit;
    int round_digit = -1;          /* first digit past the kept ones */

    if (!text || scale < 0 || scale > 18)
        return -1;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    /* Digits first, without deciding where the point lands: collected as
     * an integer with @frac digits after the point. */
    for (;; p++) {
        if (isdigit((unsigned char)*p)) {
            seen = 1;
            if (nd == 0 && *p == '0') {
                /* Leading zeros: of the integer part, nothing; of the
                 * fraction, a place each. */
                if (point)
                    frac++;
                continue;
            }
            if (nd >= sizeof digits) {
                /* Past 64 significant digits: an integer part that long
                 * cannot fit; a fraction's digits that far out change
                 * nothing (at most 19 digits are kept, and only the first
                 * one dropped rounds). */
                if (!point)
                    return -1;
                continue;
            }
            digits[nd++] = *p;
            if (point)
                frac++;
        } else if (*p == '.' && !point) {
            point = 1;
        } else {
            break;
        }
    }
    if (!seen)
        return -1;
    if (*p == 'e' || *p == 'E') {
        char *end;
        long e;

        errno = 0;
        e = strtol(p + 1, &end, 10);
        if (end == p + 1 || (errno && errno != ERANGE) || (e > 40 && nd > 0))
            return -1;
        if (e > 40)
            e = 40;                        /* 0e999 is 0 */
        if (e < -400)
            e = -400;                      /* rounds to 0 all the same */
        exp = (int)e;
        p = end;
    }
    while (isspace((unsigned char)*p))
        p++;
    if (*p)
        return -1;
    /* value = digits × 10^(exp - frac); want value × 10^scale. A
     * negative value may reach INT64_MIN, whose magnitude is one more than
     * INT64_MAX (so that what sbx_decimal_format() prints reads back). */
    limit = (unsigned __int128)INT64_MAX + (neg ? 1 : 0);
    shift = exp - frac + scale;
    for (size_t i = 0; i < nd; i++) {
        int keep = shift >= 0 || (long)i < (long)nd + shift;

        if (keep) {
            v = v * 10 + (unsigned)(digits[i] - '0');
            if (v > limit)
                return -1;
        } else if ((long)i == (long)nd + shift) {
            /* The first digit dropped: when nd + shift < 0 it is one of
             * the zeros before the first significant digit, and nothing
             * rounds up. */
            round_digit = digits[i] - '0';
        }
    }
    for (int i = 0; i < shift; i++) {
        v *= 10;
        if (v > limit)
            return -1;
    }
    if (round_digit >= 5)
        v++;
    if (v > limit)
        return -1;
    *out = neg ? (int64_t)(-(__int128)v) : (int64_t)v;
    return 0;
}

void
sbx_decimal_format(int64_t value, int scale, char *buf, size_t cap)
{
    char digits[48];
    uint64_t mag = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    int n, len;

    if (!buf || cap == 0)
        return;
    n = snprintf(digits, sizeof digits, "%0*llu", scale + 1, (unsigned long long)mag);
    len = n - scale;               /* digits before the point */
    /* Trailing zeros of the fraction go, and the point with them. */
    while (n > len && digits[n - 1] == '0')
        n--;
    if (n > len)
        snprintf(buf, cap, "%s%.*s.%.*s", value < 0 ? "-" : "", len, digits, n - len,
                 digits + len);
    else
        snprintf(buf, cap, "%s%.*s", value < 0 ? "-" : "", len, digits);
}

int
sbx_json_decimal(struct json_object *v, int scale, int64_t *out)
{
    const char *text;

    if (!v)
        return -1;
    switch (json_object_get_type(v)) {
    case json_type_int:
    case json_type_double:
        /* json-c keeps the number's text as it was in the document. */
        text = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
        break;
    case json_type_string:
        text = json_object_get_string(v);
        break;
    default:
        return -1;
    }
    return sbx_decimal_parse(text, scale, out);
}

struct json_object *
sbx_json_new_decimal(int64_t value, int scale)
{
    char buf[64];

    sbx_decimal_format(value, scale, buf, sizeof buf);
    /* The double is what a reader that asks for one gets; the text, exact,
     * is what is printed. */
    return json_object_new_double_s(strtod(buf, NULL), buf);
}

SBX_EXPORT int
sbx_usd_format(int64_t pusd, char *buf, size_t cap)
{
    char tmp[64];
    size_t n;

    sbx_decimal_format(pusd, 12, tmp, sizeof tmp);
    n = strlen(tmp);
    if (!buf || cap <= n)
        return -1;
    memcpy(buf, tmp, n + 1);
    return (int)n;
}

SBX_EXPORT int
sbx_usd_parse(const char *text, int64_t *pusd, sbx_error **error)
{
    sbx_error *err = NULL;

    if (text && !pusd) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "usd_parse", "pusd is NULL");
        sbx_error_propagate(error, err);
        return -1;
    }
    if (!text || sbx_decimal_parse(text, 12, pusd) < 0) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "usd_parse",
                                     "\"%s\" is not a decimal amount of dollars that fits",
                                     text ? text : "(null)");
        sbx_error_add_context(e, "value", text ? text : "(null)");
        sbx_error_propagate(error, err);
        return -1;
    }
    return 0;
}
