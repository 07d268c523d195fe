/*
 * server/util.h — small helpers of sbx-server: strings, time stamps in the
 * reference's form, identifiers, random tokens, encodings, HMAC and sealing.
 *
 * Every function is thread-safe. Strings returned are new (free()) unless
 * said otherwise.
 */
#ifndef SBX_SERVER_UTIL_H
#define SBX_SERVER_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* printf into a new string; aborts on out of memory. */
char *cp_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Microseconds since the Unix epoch (CLOCK_REALTIME). The environment
 * variable SBX_SERVER_TEST_CLOCK_OFFSET_S (seconds, may be negative) shifts
 * it, for tests of time windows; unset in production. */
int64_t cp_now_us(void);
/* CLOCK_MONOTONIC in seconds. */
double cp_mono(void);

/* @us (microseconds since the epoch) as Python's isoformat() of an aware
 * UTC datetime: "2026-09-04T12:00:00+00:00", with ".ffffff" only when the
 * microseconds are not zero. @cap >= 40. */
void cp_iso(int64_t us, char *buf, size_t cap);
void cp_now_iso(char *buf, size_t cap);
/* Reads an ISO 8601 date-time ("2026-09-04T12:00:00Z", "...+02:00",
 * "....123Z", a space instead of "T") into microseconds since the epoch.
 * Returns 0, -1 when it is not one, -2 when it has no time zone. */
int cp_parse_iso(const char *text, int64_t *us);
/* Why @text, which cp_parse_iso() refused as invalid, is no date-time, in
 * the words of pydantic's parser (speedate) for the date it tries last:
 * "input is too short", "invalid character in year", "invalid date
 * separator, expected `-`", "invalid character in month" or "day", "month
 * value is outside expected range of 1-12", "day value is outside expected
 * range", else "unexpected extra characters at the end of the input". A
 * static string. */
const char *cp_iso_error(const char *text);
/* pydantic v2's Unix time: @v seconds since the epoch when |@v| <= 2e10,
 * else milliseconds, to the microsecond (rounded), into *@us. Returns 0,
 * or -1 with *@why the words of pydantic's parser (a static string) for a
 * time it does not take: "dates after 9999 are not supported as unix
 * timestamps", "year 0 is out of range" or "dates before 0000 are not
 * supported as unix timestamps". */
int cp_unix_time(double v, int64_t *us, const char **why);
/* 1 when pydantic reads the string @text as a number of Unix time, its
 * value in *@v: an optional sign, then digits that fit an int64, or
 * digits and a point (either side of it may be empty, not both) with an
 * optional exponent after them ("1700000000", "-1", "1.5", ".5",
 * "1.5e3"); else 0 (the text goes to the date parser). */
int cp_number_text(const char *text, double *v);

/* "<prefix>_" + 32 hex digits of a random UUIDv4, as the reference's ids. */
char *cp_new_id(const char *prefix);
/* @n random bytes from the kernel (getrandom); aborts on failure. */
void cp_random(void *buf, size_t n);

/* base64 (standard, padded) and base64url (no padding) of @len bytes. */
char *cp_base64(const void *data, size_t len);
char *cp_base64url(const void *data, size_t len);
/* Decodes standard base64; NULL when malformed. *@out_len gets the size. */
unsigned char *cp_base64_decode(const char *text, size_t *out_len);

/* Lowercase hex HMAC-SHA256(key = @key, message = @msg) into @hex (65
 * bytes). */
void cp_hmac_hex(const char *key, const void *msg, size_t len, char hex[65]);
/* Constant-time comparison of two strings (the time depends only on the
 * lengths). 1 when equal. */
int cp_consttime_eq(const char *a, const char *b);

/* 1 when @data (@len bytes) is valid UTF-8. */
int cp_utf8_valid(const char *data, size_t len);
/* @data as UTF-8 with every invalid sequence replaced by U+FFFD. */
char *cp_utf8_lossy(const char *data, size_t len, size_t *out_len);

/* Seals @plain (a session state) under AES-256-GCM with a key derived from
 * @pepper (HMAC-SHA256(pepper, "sbx-server session-state v1")) and @aad
 * bound in (the sandbox id): "v1." + base64(nonce 12 | ciphertext | tag
 * 16). NULL on failure. */
char *cp_seal(const char *pepper, const char *aad, const char *plain);
/* Opens what cp_seal() made with the same @pepper and @aad; NULL when it
 * was altered, sealed under another pepper or for another id. */
char *cp_unseal(const char *pepper, const char *aad, const char *sealed);

#endif
