/*
 * server/util.c — helpers of sbx-server (server/util.h).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>              /* isnan(), a macro */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include "util.h"

char *
cp_printf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;

    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        abort();
    va_end(ap);
    return s;
}

int64_t
cp_now_us(void)
{
    struct timespec ts;
    const char *off = getenv("SBX_SERVER_TEST_CLOCK_OFFSET_S");
    const char *file = getenv("SBX_SERVER_TEST_CLOCK_FILE");
    int64_t us;

    if (file && *file) {
        /* The test's clock: UNIX seconds in the file, read at each call
         * (a test steps it, backwards too); the real clock when it holds
         * no number. */
        FILE *f = fopen(file, "r");
        double s = 0;
        int got = f && fscanf(f, "%lf", &s) == 1;
        if (f)
            fclose(f);
        if (got)
            return (int64_t)(s * 1e6 + (s >= 0 ? 0.5 : -0.5));
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    if (off && *off)
        us += (int64_t)(strtod(off, NULL) * 1e6);
    return us;
}

double
cp_mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
cp_iso(int64_t us, char *buf, size_t cap)
{
    time_t s = (time_t)(us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
    int frac = (int)(us - (int64_t)s * 1000000);
    struct tm tm;
    char base[80];

    gmtime_r(&s, &tm);
    /* Four digits of year always (strftime's %Y gives "385" for 385):
     * ISO 8601, as Python's isoformat writes it. */
    snprintf(base, sizeof base, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    if (frac)
        snprintf(buf, cap, "%s.%06d+00:00", base, frac);
    else
        snprintf(buf, cap, "%s+00:00", base);
}

void
cp_now_iso(char *buf, size_t cap)
{
    cp_iso(cp_now_us(), buf, cap);
}

static int
digits(const char **p, int n, int *out)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

/* What is wrong with the date at the start of @text (pydantic's parser's
 * words, cp_iso_error()), or NULL when it is a date. */
static const char *
date_error(const char *text)
{
    static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    const unsigned char *t = (const unsigned char *)text;
    int Y, M, D, max;

    if (strlen(text) < 10)
        return "input is too short";
    for (int i = 0; i < 4; i++)
        if (!isdigit(t[i]))
            return "invalid character in year";
    if (t[4] != '-')
        return "invalid date separator, expected `-`";
    if (!isdigit(t[5]) || !isdigit(t[6]))
        return "invalid character in month";
    if (t[7] != '-')
        return "invalid date separator, expected `-`";
    if (!isdigit(t[8]) || !isdigit(t[9]))
        return "invalid character in day";
    Y = (t[0] - '0') * 1000 + (t[1] - '0') * 100 + (t[2] - '0') * 10 + (t[3] - '0');
    M = (t[5] - '0') * 10 + (t[6] - '0');
    D = (t[8] - '0') * 10 + (t[9] - '0');
    if (M < 1 || M > 12)
        return "month value is outside expected range of 1-12";
    max = mdays[M - 1] + (M == 2 && Y % 4 == 0 && (Y % 100 != 0 || Y % 400 == 0));
    if (D < 1 || D > max)
        return "day value is outside expected range";
    return NULL;
}

const char *
cp_iso_error(const char *text)
{
    const char *e = date_error(text);

    return e ? e : "unexpected extra characters at the end of the input";
}

int
cp_parse_iso(const char *text, int64_t *us)
{
    const char *p = text;
    int Y, M, D, h = 0, m = 0, s = 0, frac = 0, fd = 0, tz = 0, have_tz = 0;
    struct tm tm = { 0 };
    int64_t secs;

    if (!text || digits(&p, 4, &Y) || *p++ != '-' || digits(&p, 2, &M) || *p++ != '-' ||
        digits(&p, 2, &D))
        return -1;
    if (*p == 'T' || *p == 't' || *p == ' ') {
        p++;
        if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &m))
            return -1;
        if (*p == ':') {
            p++;
            if (digits(&p, 2, &s))
                return -1;
            if (*p == '.' || *p == ',') {
                p++;
                if (!isdigit((unsigned char)*p))
                    return -1;
                while (isdigit((unsigned char)*p)) {
                    if (fd < 6) {
                        frac = frac * 10 + (*p - '0');
                        fd++;
                    }
                    p++;
                }
                while (fd < 6) {
                    frac *= 10;
                    fd++;
                }
            }
        }
    } else if (*p) {
        return -1;
    }
    if (*p == 'Z' || *p == 'z') {
        have_tz = 1;
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p == '-' ? -1 : 1, th, tm_;
        p++;
        if (digits(&p, 2, &th))
            return -1;
        if (*p == ':')
            p++;
        if (digits(&p, 2, &tm_))
            return -1;
        /* pydantic (speedate) takes offsets under 24 hours only: +24:00 or
         * +23:60 is "unexpected extra characters at the end of the input". */
        if (th > 23 || tm_ > 59)
            return -1;
        tz = sign * (th * 60 + tm_);
        have_tz = 1;
    }
    if (*p)
        return -1;
    if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || s > 60)
        return -1;
    /* A day the month has (pydantic refuses 02-30; timegm would make it
     * March). */
    if (date_error(text))
        return -1;
    if (!have_tz)
        return -2;
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = m;
    tm.tm_sec = s;
    secs = (int64_t)timegm(&tm) - (int64_t)tz * 60;
    *us = secs * 1000000 + frac;
    return 0;
}

static const char hexdigits[] = "0123456789abcdef";

static void
to_hex(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexdigits[b[i] >> 4];
        out[2 * i + 1] = hexdigits[b[i] & 15];
    }
    out[2 * n] = 0;
}

void
cp_random(void *buf, size_t n)
{
    unsigned char *p = buf;

    while (n) {
        ssize_t k = getrandom(p, n, 0);
        if (k <= 0)
            abort();
        p += k;
        n -= (size_t)k;
    }
}

char *
cp_new_id(const char *prefix)
{
    /* Ids draw from a per-thread pool filled 512 bytes at a time (an
     * execute makes four ids: one getrandom() call instead of four). The
     * pool is for ids only; secrets and nonces call cp_random() directly. */
    static __thread unsigned char pool[512];
    static __thread size_t left;
    unsigned char u[16];
    char hex[33];

    if (left < sizeof u) {
        cp_random(pool, sizeof pool);
        left = sizeof pool;
    }
    memcpy(u, pool + sizeof pool - left, sizeof u);
    memset(pool + sizeof pool - left, 0, sizeof u);
    left -= sizeof u;
    u[6] = (unsigned char)((u[6] & 0x0f) | 0x40);
    u[8] = (unsigned char)((u[8] & 0x3f) | 0x80);
    to_hex(u, sizeof u, hex);
    return cp_printf("%s_%s", prefix, hex);
}

static char *
b64(const void *data, size_t len, int url)
{
    static const char std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const char urls[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char *t = url ? urls : std;
    const unsigned char *d = data;
    char *out = malloc(len / 3 * 4 + 5), *o = out;
    size_t i = 0;

    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
        *o++ = t[v >> 18];
        *o++ = t[(v >> 12) & 63];
        *o++ = t[(v >> 6) & 63];
        *o++ = t[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)d[i] << 16;
        *o++ = t[v >> 18];
        *o++ = t[(v >> 12) & 63];
        if (!url) {
            *o++ = '=';
            *o++ = '=';
        }
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8;
        *o++ = t[v >> 18];
        *o++ = t[(v >> 12) & 63];
        *o++ = t[(v >> 6) & 63];
        if (!url)
            *o++ = '=';
    }
    *o = 0;
    return out;
}

char *
cp_base64(const void *data, size_t len)
{
    return b64(data, len, 0);
}

char *
cp_base64url(const void *data, size_t len)
{
    return b64(data, len, 1);
}

unsigned char *
cp_base64_decode(const char *text, size_t *out_len)
{
    size_t n = strlen(text), o = 0;
    unsigned char *out;
    uint32_t acc = 0;
    int bits = 0, pad = 0;

    out = malloc(n / 4 * 3 + 3);
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)text[i], v;
        if (c == '=') {
            pad++;
            continue;
        }
        if (pad)
            goto bad;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else
            goto bad;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    if (pad > 2)
        goto bad;
    *out_len = o;
    return out;
bad:
    free(out);
    return NULL;
}

/* The HMAC-SHA256 context keyed with the first key cp_hmac_hex() saw (the
 * server's pepper: the only key it is called with), made once. Written
 * once under the mutex, read-only afterwards (EVP_MAC_CTX_dup() only reads
 * its source). Each thread that computes a digest copies it once into a
 * context of its own (hmac_thread), which each call resets to the keyed
 * state with EVP_MAC_init() and no key (OpenSSL 3: "the key set
 * previously is reused"), instead of copying it per call: the copy's
 * allocations were most of a digest's cost (bench/README.md, cp_exec). The
 * thread's copy is freed when the thread ends. */
static pthread_mutex_t hmac_lock = PTHREAD_MUTEX_INITIALIZER;
static char *hmac_key;
static EVP_MAC_CTX *hmac_base;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;
static pthread_key_t hmac_thread;

static void
hmac_thread_free(void *ctx)
{
    EVP_MAC_CTX_free(ctx);
}

static void
hmac_thread_key(void)
{
    pthread_key_create(&hmac_thread, hmac_thread_free);
}

static EVP_MAC_CTX *
hmac_keyed(const char *key)
{
    EVP_MAC_CTX *base;

    pthread_mutex_lock(&hmac_lock);
    if (!hmac_key) {
        EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_end(),
        };
        EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;

        EVP_MAC_free(mac);          /* the context keeps its own reference */
        if (c && EVP_MAC_init(c, (const unsigned char *)key, strlen(key), params) == 1) {
            hmac_key = strdup(key);
            hmac_base = c;
        } else {
            EVP_MAC_CTX_free(c);
        }
    }
    base = hmac_key && !strcmp(hmac_key, key) ? hmac_base : NULL;
    pthread_mutex_unlock(&hmac_lock);
    return base;
}

/* This thread's copy of the keyed context for @key, ready for a new
 * message; NULL when @key is not the one the base context holds (or out of
 * memory). */
static EVP_MAC_CTX *
hmac_for_thread(const char *key)
{
    EVP_MAC_CTX *c, *base = hmac_keyed(key);

    if (!base || pthread_once(&hmac_once, hmac_thread_key) != 0)
        return NULL;
    c = pthread_getspecific(hmac_thread);
    if (!c) {
        c = EVP_MAC_CTX_dup(base);
        if (!c || pthread_setspecific(hmac_thread, c) != 0) {
            EVP_MAC_CTX_free(c);
            return NULL;
        }
        return c;                   /* a fresh copy is in the keyed state */
    }
    if (EVP_MAC_init(c, NULL, 0, NULL) != 1)
        return NULL;
    return c;
}

void
cp_hmac_hex(const char *key, const void *msg, size_t len, char hex[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_MAC_CTX *c = hmac_for_thread(key);
    size_t out = 0;

    if (!c || EVP_MAC_update(c, msg, len) != 1 || EVP_MAC_final(c, md, &out, sizeof md) != 1 ||
        out != sizeof md)
        HMAC(EVP_sha256(), key, (int)strlen(key), msg, len, md, &mdlen);
    to_hex(md, sizeof md, hex);
}

int
cp_consttime_eq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = la != lb;

    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[lb ? i % lb : 0]);
    return diff == 0;
}

/* Length of the valid UTF-8 sequence at @p (of @n bytes), 0 if invalid. */
static size_t
utf8_seq(const unsigned char *p, size_t n)
{
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        return n >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
    if (p[0] >= 0xe0 && p[0] <= 0xef) {
        if (n < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80)
            return 0;
        if (p[0] == 0xe0 && p[1] < 0xa0)
            return 0;
        if (p[0] == 0xed && p[1] >= 0xa0)
            return 0;             /* surrogates */
        return 3;
    }
    if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        if (n < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80)
            return 0;
        if (p[0] == 0xf0 && p[1] < 0x90)
            return 0;
        if (p[0] == 0xf4 && p[1] >= 0x90)
            return 0;
        return 4;
    }
    return 0;
}

int
cp_utf8_valid(const char *data, size_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    size_t i = 0;

    while (i < len) {
        size_t k = utf8_seq(p + i, len - i);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

char *
cp_utf8_lossy(const char *data, size_t len, size_t *out_len)
{
    const unsigned char *p = (const unsigned char *)data;
    char *out = malloc(len * 3 + 1);
    size_t i = 0, o = 0;

    while (i < len) {
        size_t k = utf8_seq(p + i, len - i);
        if (k) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

static void
seal_key(const char *pepper, unsigned char key[32])
{
    static const char label[] = "sbx-server session-state v1";
    unsigned int n = 0;

    HMAC(EVP_sha256(), pepper, (int)strlen(pepper), (const unsigned char *)label,
         sizeof label - 1, key, &n);
}

char *
cp_seal(const char *pepper, const char *aad, const char *plain)
{
    unsigned char key[32], *buf;
    size_t plen = strlen(plain);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n = 0, m = 0, ok = 0;
    char *b = NULL, *out = NULL;

    if (!ctx)
        return NULL;
    seal_key(pepper, key);
    buf = malloc(12 + plen + 16);
    cp_random(buf, 12);
    if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) == 1 &&
        EVP_EncryptInit_ex(ctx, NULL, NULL, key, buf) == 1 &&
        EVP_EncryptUpdate(ctx, NULL, &n, (const unsigned char *)aad, (int)strlen(aad)) == 1 &&
        EVP_EncryptUpdate(ctx, buf + 12, &n, (const unsigned char *)plain, (int)plen) == 1 &&
        EVP_EncryptFinal_ex(ctx, buf + 12 + n, &m) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, buf + 12 + n + m) == 1)
        ok = 1;
    EVP_CIPHER_CTX_free(ctx);
    if (ok) {
        b = cp_base64(buf, 12 + (size_t)n + (size_t)m + 16);
        out = cp_printf("v1.%s", b);
        free(b);
    }
    OPENSSL_cleanse(key, sizeof key);
    free(buf);
    return out;
}

char *
cp_unseal(const char *pepper, const char *aad, const char *sealed)
{
    unsigned char key[32], *raw;
    size_t len = 0;
    EVP_CIPHER_CTX *ctx;
    char *plain = NULL;
    int n = 0, m = 0;

    if (!sealed || strncmp(sealed, "v1.", 3))
        return NULL;
    raw = cp_base64_decode(sealed + 3, &len);
    if (!raw || len < 28) {
        free(raw);
        return NULL;
    }
    ctx = EVP_CIPHER_CTX_new();
    seal_key(pepper, key);
    plain = malloc(len - 28 + 1);
    if (!(ctx && EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
          EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) == 1 &&
          EVP_DecryptInit_ex(ctx, NULL, NULL, key, raw) == 1 &&
          EVP_DecryptUpdate(ctx, NULL, &n, (const unsigned char *)aad, (int)strlen(aad)) == 1 &&
          EVP_DecryptUpdate(ctx, (unsigned char *)plain, &n, raw + 12, (int)(len - 28)) == 1 &&
          EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, raw + len - 16) == 1 &&
          EVP_DecryptFinal_ex(ctx, (unsigned char *)plain + n, &m) == 1)) {
        free(plain);
        plain = NULL;
    } else {
        plain[n + m] = 0;
    }
    EVP_CIPHER_CTX_free(ctx);
    OPENSSL_cleanse(key, sizeof key);
    free(raw);
    return plain;
}

int
cp_unix_time(double v, int64_t *us, const char **why)
{
    double whole, frac;

    if (isnan(v)) {
        *why = "dates after 9999 are not supported as unix timestamps";
        return -1;
    }
    if (v > 2e10 || v < -2e10) {
        /* Milliseconds, within year 1 (...000) to 9999. */
        if (v > 253402300799999.0) {
            *why = "dates after 9999 are not supported as unix timestamps";
            return -1;
        }
        if (v < -62167219200000.0) {
            *why = "dates before 0000 are not supported as unix timestamps";
            return -1;
        }
        if (v < -62135596800000.0) {
            *why = "year 0 is out of range";
            return -1;
        }
        /* In whole milliseconds first: v / 1000 as a double would lose
         * the last microseconds (253402300799999 gave ...59.998993). */
        whole = (double)(int64_t)v;   /* exact: |v| < 2^53 here */
        frac = (v - whole) * 1e3;
        *us = (int64_t)whole * 1000 + (int64_t)(frac >= 0 ? frac + 0.5 : frac - 0.5);
        return 0;
    }
    whole = (double)(int64_t)v;   /* |v| <= 2.6e11 here: toward zero */
    frac = (v - whole) * 1e6;
    *us = (int64_t)whole * 1000000 + (int64_t)(frac >= 0 ? frac + 0.5 : frac - 0.5);
    return 0;
}

int
cp_number_text(const char *text, double *v)
{
    const char *p = text;
    int digits = 0, point = 0;
    char *end;

    if (*p == '+' || *p == '-')
        p++;
    for (; *p; p++) {
        if (*p >= '0' && *p <= '9')
            digits++;
        else if (*p == '.' && !point)
            point = 1;
        else
            break;
    }
    if (!digits)
        return 0;
    if (!point) {
        long long n;
        if (*p)
            return 0;
        errno = 0;
        n = strtoll(text, &end, 10);
        if (errno || *end)
            return 0;
        *v = (double)n;
        return 1;
    }
    if (*p == 'e' || *p == 'E') {
        const char *q = p + 1;
        if (*q == '+' || *q == '-')
            q++;
        if (!(*q >= '0' && *q <= '9'))
            return 0;
        while (*q >= '0' && *q <= '9')
            q++;
        p = q;
    }
    if (*p)
        return 0;
    *v = strtod(text, &end);
    return *end == '\0';
}
