/*
 * host/util.c — small helpers shared by the rest of the library: strings,
 * string vectors, byte buffers, clocks, name checks, random tokens, fds.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* ------------------------------------------------------- uninstalled */

#ifndef SBX_BUILD_DIR
#define SBX_BUILD_DIR ""
#endif
#ifndef SBX_SOURCE_DIR
#define SBX_SOURCE_DIR ""
#endif

static pthread_once_t uninstalled_once = PTHREAD_ONCE_INIT;
static int uninstalled;

/* 1 when the real path of @a is the file @dir/@name (real path too). */
static int
is_file_in(const char *a, const char *dir, const char *name)
{
    char want[PATH_MAX + 256], real[PATH_MAX];

    if ((size_t)snprintf(want, sizeof want, "%s/%s", dir, name) >= sizeof want ||
        !realpath(want, real))
        return 0;
    return strcmp(a, real) == 0;
}

static void
uninstalled_check(void)
{
    Dl_info info;
    char self[PATH_MAX], libs[PATH_MAX + 16], *slash;

    if (!*SBX_BUILD_DIR || !dladdr((void *)&uninstalled_check, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, self))
        return;
    /* The plugin host compiles the library in: it is the running copy. */
    if (is_file_in(self, SBX_BUILD_DIR, "host/plugin-host/sbx-plugin-host") ||
        is_file_in(self, SBX_BUILD_DIR, "host/plugin-host/.libs/sbx-plugin-host")) {
        uninstalled = 1;
        return;
    }
    slash = strrchr(self, '/');
    if (!slash || strncmp(slash + 1, "libsbx.so", 9) != 0)
        return;
    *slash = '\0';
    if ((size_t)snprintf(libs, sizeof libs, "%s/.libs", SBX_BUILD_DIR) >= sizeof libs)
        return;
    {
        char real[PATH_MAX];

        uninstalled = realpath(libs, real) && strcmp(real, self) == 0;
    }
}

const char *
sbx_uninstalled_build_dir(void)
{
    pthread_once(&uninstalled_once, uninstalled_check);
    return uninstalled ? SBX_BUILD_DIR : NULL;
}

const char *
sbx_uninstalled_source_dir(void)
{
    return sbx_uninstalled_build_dir() ? SBX_SOURCE_DIR : NULL;
}

/* sbx_version: the library version string. */
SBX_EXPORT const char *
sbx_version(void)
{
    return SBX_VERSION_STRING;
}

char *
sbx_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *
sbx_strndup(const char *s, size_t n)
{
    return s ? strndup(s, n) : NULL;
}

/* The length of the well-formed UTF-8 sequence at @p (before @end), or 0. */
static size_t
utf8_seq(const unsigned char *p, const unsigned char *end)
{
    size_t n, left = (size_t)(end - p);
    unsigned char lo = 0x80, hi = 0xBF;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xC2 && p[0] <= 0xDF)
        n = 2;
    else if (p[0] >= 0xE0 && p[0] <= 0xEF)
        n = 3;
    else if (p[0] >= 0xF0 && p[0] <= 0xF4)
        n = 4;
    else
        return 0;
    if (left < n)
        return 0;
    /* The second byte's range excludes overlong forms, surrogates and
     * code points past U+10FFFF. */
    if (p[0] == 0xE0)
        lo = 0xA0;
    else if (p[0] == 0xED)
        hi = 0x9F;
    else if (p[0] == 0xF0)
        lo = 0x90;
    else if (p[0] == 0xF4)
        hi = 0x8F;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

char *
sbx_utf8_dup(const char *s)
{
    const unsigned char *p, *end;
    char *out, *o;
    size_t len;

    if (!s)
        return NULL;
    len = strlen(s);
    end = (const unsigned char *)s + len;
    /* At worst each byte becomes the 3 bytes of U+FFFD. */
    if (len > (SIZE_MAX - 1) / 3 || !(out = malloc(len * 3 + 1)))
        return NULL;
    o = out;
    for (p = (const unsigned char *)s; p < end;) {
        size_t n = utf8_seq(p, end);

        if (n) {
            memcpy(o, p, n);
            o += n;
            p += n;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            p++;
        }
    }
    *o = '\0';
    return out;
}

char *
sbx_vasprintf(const char *fmt, va_list ap)
{
    char *out = NULL;

    if (vasprintf(&out, fmt, ap) < 0)
        return NULL;
    return out;
}

char *
sbx_asprintf(const char *fmt, ...)
{
    va_list ap;
    char *out;

    va_start(ap, fmt);
    out = sbx_vasprintf(fmt, ap);
    va_end(ap);
    return out;
}

/* ---------------------------------------------------------------- strv */

int
sbx_strv_push_take(sbx_strv *v, char *s)
{
    if (!s)
        return -1;
    if (v->count + 1 >= v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        char **items = realloc(v->items, cap * sizeof(*items));

        if (!items) {
            free(s);
            return -1;
        }
        v->items = items;
        v->cap = cap;
    }
    v->items[v->count++] = s;
    v->items[v->count] = NULL;
    return 0;
}

int
sbx_strv_push(sbx_strv *v, const char *s)
{
    return sbx_strv_push_take(v, sbx_strdup(s));
}

int
sbx_strv_pushf(sbx_strv *v, const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = sbx_vasprintf(fmt, ap);
    va_end(ap);
    return sbx_strv_push_take(v, s);
}

char *
sbx_strv_join(const sbx_strv *v, const char *sep)
{
    size_t seplen = strlen(sep), total = 1;
    char *out, *p;

    for (size_t i = 0; i < v->count; i++)
        total += strlen(v->items[i]) + (i ? seplen : 0);
    out = malloc(total);
    if (!out)
        return NULL;
    p = out;
    for (size_t i = 0; i < v->count; i++) {
        size_t n = strlen(v->items[i]);

        if (i) {
            memcpy(p, sep, seplen);
            p += seplen;
        }
        memcpy(p, v->items[i], n);
        p += n;
    }
    *p = '\0';
    return out;
}

int
sbx_strv_contains(const sbx_strv *v, const char *s)
{
    for (size_t i = 0; i < v->count; i++)
        if (strcmp(v->items[i], s) == 0)
            return 1;
    return 0;
}

void
sbx_strv_clear(sbx_strv *v)
{
    for (size_t i = 0; i < v->count; i++)
        free(v->items[i]);
    free(v->items);
    v->items = NULL;
    v->count = v->cap = 0;
}

const char *const *
sbx_strv_view(const sbx_strv *v)
{
    static const char *const empty[] = { NULL };

    return v->count ? (const char *const *)v->items : empty;
}

/* ---------------------------------------------------------------- buf */

int
sbx_buf_append(sbx_buf *b, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    if (len > SIZE_MAX - b->len - 1)
        return -1;
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;

        while (cap < b->len + len + 1)
            cap = cap > SIZE_MAX / 2 ? b->len + len + 1 : cap * 2;
        p = realloc(b->data, cap);
        if (!p)
            return -1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

char *
sbx_buf_steal(sbx_buf *b, size_t *len)
{
    char *out = b->data;

    if (!out)
        out = calloc(1, 1);
    if (!out)
        return NULL;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return out;
}

void
sbx_buf_clear(sbx_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---------------------------------------------------------------- clocks */

double
sbx_monotonic_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double
sbx_wallclock_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- names */

int
sbx_env_key_valid_n(const char *key, size_t len)
{
    if (!key || len == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = key[i];
        int alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
        int digit = c >= '0' && c <= '9';

        if (!alpha && !(digit && i > 0))
            return 0;
    }
    return 1;
}

int
sbx_env_key_valid(const char *key)
{
    return key && sbx_env_key_valid_n(key, strlen(key));
}

int
sbx_backend_name_valid(const char *name)
{
    if (!name || !*name)
        return 0;
    for (size_t i = 0; name[i]; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

        if (!ok && !(i > 0 && (c == '_' || c == '-')))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- tokens */

/* Fills @buf with @len random bytes from getrandom(), /dev/urandom as a
 * fallback. Returns 0 or -1. */
static int
random_bytes(unsigned char *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = getrandom(buf + got, len - got, 0);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += (size_t)n;
    }
    if (got < len) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

        if (fd < 0)
            return -1;
        while (got < len) {
            ssize_t n = read(fd, buf + got, len - got);

            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                close(fd);
                return -1;
            }
            got += (size_t)n;
        }
        close(fd);
    }
    return 0;
}

int
sbx_random_token(char out[SBX_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];

    if (random_bytes(raw, sizeof(raw)) < 0)
        return -1;
    memcpy(out, "sbx-", 4);
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[4 + 2 * i] = hex[raw[i] >> 4];
        out[5 + 2 * i] = hex[raw[i] & 15];
    }
    out[SBX_TOKEN_LEN] = '\0';
    return 0;
}

/* ---------------------------------------------------------------- fds */

int
sbx_set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0)
        return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void
sbx_close_fd(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;

        close(*fd);
        *fd = -1;
        errno = saved;
    }
}

/* ---------------------------------------------------------------- urls */

char *
sbx_redact_url(const char *url)
{
    const char *scheme, *start, *end, *at, *colon;

    if (!url)
        return NULL;
    scheme = strstr(url, "://");
    if (!scheme)
        return strdup(url);
    start = scheme + 3;
    end = start + strcspn(start, "/?#");
    at = NULL;
    for (const char *p = start; p < end; p++)
        if (*p == '@')
            at = p;
    if (!at)
        return strdup(url);
    colon = memchr(start, ':', (size_t)(at - start));
    if (!colon)
        return strdup(url);
    return sbx_asprintf("%.*s[redacted]%s", (int)(colon + 1 - url), url, at);
}
