/*
 * server/lax.h — request body values coerced as pydantic v2's lax mode
 * coerces them (CONTROL-PLANE.md: the reference is FastAPI + pydantic v2,
 * which validates the body json.loads() made with models in their default,
 * lax, mode; the fingerprint hashes the coerced body). One coercion per
 * type, used by every body field of that type (server/api.c reads each
 * field through them and answers a refusal with pydantic's 422 item).
 *
 * What each coercion takes (as pydantic 2.13 does; anything else is the
 * error named):
 * - int: a JSON integer; a JSON float with no fractional part
 *   (int_from_float, past int64 int_parsing_size); true/false as 1/0; a
 *   string of an optional sign and ASCII digits with single underscores
 *   between digits ("1_000"), optionally followed by "." and one or more
 *   zeros ("5.0"), after Unicode white space is trimmed from both ends
 *   (int_parsing; more than 4300 characters written as JSON writes an
 *   integer int_parsing_size, more than 4300 digits written otherwise
 *   int_parsing); else int_type. After a leading zero (and a sign),
 *   zeros and underscores are skipped, and when no minus came before,
 *   one may follow, then one underscore and digits that do not begin
 *   with a zero ("0__5" is 5; "0-5", "+0-5", "-0__5" and "0_-_5" are -5;
 *   "0-05" is int_parsing), as pydantic reads them.
 * - float: a JSON number (an integer past the double range is float_type);
 *   true/false as 1.0/0.0; a string, trimmed of Unicode white space, in
 *   Rust's float syntax (sign, digits with an optional point and exponent,
 *   or inf/infinity/nan in any case), or, untrimmed, in that syntax once
 *   single underscores that neither begin nor end it are removed
 *   (float_parsing); else float_type. The value may be infinite or NaN
 *   ("inf", "nan", "1e999"): the field decides (server/api.c).
 * - bool: true/false; the integers 0 and 1 (other int64s bool_parsing,
 *   larger ones bool_type); floats 0.0 and 1.0 (other whole floats within
 *   int64 bool_parsing, the rest bool_type); the strings "0", "off", "f",
 *   "false", "n", "no", "1", "on", "t", "true", "y", "yes" in any ASCII
 *   case, untrimmed (bool_parsing); else bool_type.
 * - str: never coerced (a number or a boolean is string_type).
 *
 * Values are borrowed json-c objects of a body read by server/api.c's
 * body_object() (so no string holds NUL and no double is non-finite; an
 * integer past int64 prints as its literal). Thread-safe: no state.
 */
#ifndef SBX_SERVER_LAX_H
#define SBX_SERVER_LAX_H

#include <stdint.h>

#include <json-c/json.h>

/* A refusal: pydantic's error type and message (static strings). */
typedef struct cp_lax_error {
    const char *type;
    const char *msg;
} cp_lax_error;

/* Where an integer lies against int64. */
enum {
    CP_LAX_IN_RANGE = 0,
    CP_LAX_ABOVE = 1,             /* past INT64_MAX: *out is INT64_MAX */
    CP_LAX_BELOW = -1,            /* below INT64_MIN: *out is INT64_MIN */
};

/* @v as pydantic's int: 0 with the value in *@out and *@range (CP_LAX_*),
 * or -1 with *@err. */
int cp_lax_int(json_object *v, int64_t *out, int *range, cp_lax_error *err);
/* @v as pydantic's float: 0 with the value (maybe infinite or NaN) in
 * *@out, or -1 with *@err. */
int cp_lax_float(json_object *v, double *out, cp_lax_error *err);
/* @v as pydantic's bool: 0 with 0 or 1 in *@out, or -1 with *@err. */
int cp_lax_bool(json_object *v, int *out, cp_lax_error *err);

/* The same coercions of a string @text of @len bytes (not NUL-terminated
 * necessarily; NUL bytes are characters no rule takes). */
int cp_lax_int_text(const char *text, size_t len, int64_t *out, int *range, cp_lax_error *err);
int cp_lax_float_text(const char *text, size_t len, double *out, cp_lax_error *err);
int cp_lax_bool_text(const char *text, size_t len, int *out, cp_lax_error *err);

#endif
