/*
 * util.c — the hosted-provider base's small parts: host services, errors,
 * buffers, clocks, bounds, base64, JSON helpers, shell scripts, credentials
 * and base URLs (cloud.h).
 */
#include "cloud.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <json-c/json.h>

const sbx_host_services *cl_host;
const char *cl_backend = "cloud";

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int cl_setup(const sbx_host_services *host, const char *backend, sbx_error **error)
{
    cl_host = host;
    cl_backend = backend;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "setup", "libcurl did not initialise: %s",
                curl_easy_strerror(curl_init_rc));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

static __thread cl_last_error last_error;

const cl_last_error *cl_last(void)
{
    return &last_error;
}

sbx_error *cl_fail(sbx_error **error, sbx_error_code code, const char *op,
                   const char *fmt, ...)
{
    if (error && *error)
        return NULL;        /* the first error stands */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error.msg, sizeof(last_error.msg), fmt, ap);
    va_end(ap);
    last_error.code = code;
    last_error.unknown = 0;
    last_error.http_status = 0;
    last_error.retry_after_s = 0;
    if (!error || !cl_host)
        return NULL;
    cl_host->set_error(error, code, op, "%s", last_error.msg);
    return *error;
}

sbx_error *cl_fail_from(sbx_error **error, const cl_last_error *l, const char *op)
{
    cl_last_error c = *l;   /* @l may be the last error itself */
    sbx_error *err = cl_fail(error, c.code, op, "%s", c.msg);
    if (c.unknown)
        cl_outcome_unknown(err);
    return err;
}

void cl_context(sbx_error *err, const char *key, const char *value)
{
    if (err && cl_host && cl_host->error_add_context && value)
        cl_host->error_add_context(err, key, value);
}

void cl_outcome_unknown(sbx_error *err)
{
    last_error.unknown = 1;
    if (err && cl_host && cl_host->error_set_outcome)
        cl_host->error_set_outcome(err, SBX_ERROR_OUTCOME_UNKNOWN);
}

/* Used by http.c to complete the last error with what the answer said. */
void cl_last_set_http(long status, double retry_after_s);
void cl_last_set_http(long status, double retry_after_s)
{
    last_error.http_status = status;
    last_error.retry_after_s = retry_after_s;
}

/* ------------------------------------------------------------------------ */
/* Buffers, clocks, bounds                                                   */
/* ------------------------------------------------------------------------ */

int cl_buf_append(cl_buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int cl_buf_printf(cl_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    int rc = cl_buf_append(b, s, (size_t)n);
    free(s);
    return rc;
}

void cl_buf_clear(cl_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

char *cl_buf_take(cl_buf *b, int bad)
{
    if (bad) {
        cl_buf_clear(b);
        return NULL;
    }
    return b->data;
}

double cl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double cl_wallclock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cl_sleep(double secs, int cancel_fd)
{
    double until = cl_now() + secs;
    for (;;) {
        double left = until - cl_now();
        if (left <= 0)
            return 0;
        struct pollfd pfd = { .fd = cancel_fd, .events = POLLIN };
        int ms = (int)(left * 1000.0) + 1;
        int r = poll(&pfd, cancel_fd >= 0 ? 1 : 0, ms);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return 0;
    }
}

cl_bound cl_bound_make(const sbx_call_ctx *ctx, double secs)
{
    cl_bound b = { 0, 0, -1 };
    if (ctx) {
        b.deadline = ctx->deadline;
        b.cancel_fd = ctx->cancel_fd;
    }
    b.until = b.deadline;
    if (secs > 0) {
        double own = cl_now() + secs;
        if (!b.until || own < b.until)
            b.until = own;
    }
    return b;
}

double cl_bound_left(const cl_bound *b)
{
    if (!b->until)
        return -1;
    double left = b->until - cl_now();
    return left > 0 ? left : 0;
}

sbx_error_code cl_bound_cancel_code(const cl_bound *b)
{
    return b->deadline > 0 && cl_now() >= b->deadline - 0.05 ? SBX_ERROR_TIMEOUT
                                                              : SBX_ERROR_CANCELLED;
}

int cl_bound_cond_wait(const cl_bound *b, pthread_cond_t *cond, pthread_mutex_t *lock)
{
    double left = cl_bound_left(b);
    if (left == 0)
        return -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double step = left < 0 || left > 0.1 ? 0.1 : left;
    ts.tv_nsec += (long)(step * 1e9);
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cond, lock, &ts);
    return 0;
}

int cl_bound_cancelled(const cl_bound *b)
{
    if (b->cancel_fd < 0)
        return 0;
    struct pollfd pfd = { .fd = b->cancel_fd, .events = POLLIN };
    return poll(&pfd, 1, 0) > 0;
}

/* ------------------------------------------------------------------------ */
/* Encodings                                                                 */
/* ------------------------------------------------------------------------ */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *cl_base64_encode(const void *p, size_t n)
{
    const unsigned char *s = p;
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = b64[v >> 6 & 63];
        out[o++] = b64[v & 63];
    }
    if (i < n) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0);
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

int cl_base64_decode(const char *s, size_t n, cl_buf *out)
{
    unsigned v = 0;
    int bits = 0;
    char chunk[768];
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i], d;
        if (ch >= 'A' && ch <= 'Z') d = ch - 'A';
        else if (ch >= 'a' && ch <= 'z') d = ch - 'a' + 26;
        else if (ch >= '0' && ch <= '9') d = ch - '0' + 52;
        else if (ch == '+' || ch == '-') d = 62;
        else if (ch == '/' || ch == '_') d = 63;
        else if (ch == '=') break;
        else if (isspace(ch)) continue;
        else return -1;
        v = (v << 6) | (unsigned)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            chunk[c++] = (char)((v >> bits) & 0xff);
            if (c == sizeof(chunk)) {
                if (cl_buf_append(out, chunk, c) < 0)
                    return -1;
                c = 0;
            }
        }
    }
    if (c && cl_buf_append(out, chunk, c) < 0)
        return -1;
    if (!out->data && cl_buf_append(out, "", 0) < 0)
        return -1;
    return 0;
}

char *cl_url_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                      */
/* ------------------------------------------------------------------------ */

const char *cl_json_str(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v)
        || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

int cl_json_bool(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

int cl_json_int(json_object *o, const char *key, int64_t *out)
{
    json_object *v;
    if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v)
        || json_object_is_type(v, json_type_null))
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
        return 1;
    }
    if (json_object_is_type(v, json_type_double)) {
        double d = json_object_get_double(v);
        if (d != (double)(int64_t)d)
            return -1;
        *out = (int64_t)d;
        return 1;
    }
    if (json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!*s || *end || errno)
            return -1;
        *out = x;
        return 1;
    }
    return -1;
}

json_object *cl_json_path(json_object *o, ...)
{
    va_list ap;
    va_start(ap, o);
    const char *k;
    while (o && (k = va_arg(ap, const char *)) != NULL) {
        json_object *v;
        if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, k, &v))
            o = NULL;
        else
            o = v;
    }
    va_end(ap);
    return o;
}

/* ------------------------------------------------------------------------ */
/* Shell                                                                     */
/* ------------------------------------------------------------------------ */

int cl_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    while (p && *p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0)
            return 0;
        unsigned cp = n == 0 ? *p : (unsigned)(*p & (0x3f >> n));
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3fu);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
            || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        p += n + 1;
    }
    return 1;
}

#define CL_NOT_TEXT "is not valid UTF-8: the provider's API (%s) cannot carry it"

int cl_text_check(const sbx_plugin_exec_request *rq, const char *path, const char *api,
                  unsigned flags, const char *op, sbx_error **error)
{
    char n[32];
    for (size_t i = 0; rq && rq->argv && rq->argv[i]; i++)
        if (!cl_utf8_valid(rq->argv[i])) {
            snprintf(n, sizeof n, "%zu", i);
            cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "argument %zu " CL_NOT_TEXT, i, api), "argument", n);
            return -1;
        }
    if (rq && !cl_utf8_valid(rq->shell)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "the shell command " CL_NOT_TEXT, api);
        return -1;
    }
    for (size_t i = 0; rq && !(flags & CL_TEXT_ENV_AS_BYTES) && rq->env && rq->env[i]; i++) {
        if (cl_utf8_valid(rq->env[i]))
            continue;
        const char *eq = strchr(rq->env[i], '=');
        size_t kn = eq ? (size_t)(eq - rq->env[i]) : strlen(rq->env[i]);
        char *key = strndup(rq->env[i], kn);
        if (key && cl_utf8_valid(key)) {
            cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "environment variable %s " CL_NOT_TEXT, key, api), "env_name", key);
        } else {
            cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                    "the name of environment variable %zu " CL_NOT_TEXT, i, api);
        }
        free(key);
        return -1;
    }
    if (rq && !cl_utf8_valid(rq->cwd)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "the working directory " CL_NOT_TEXT, api);
        return -1;
    }
    if (rq && !cl_utf8_valid(rq->user)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "the user " CL_NOT_TEXT, api);
        return -1;
    }
    if (!cl_utf8_valid(path)) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op, "the path " CL_NOT_TEXT, api);
        return -1;
    }
    return 0;
}

int cl_json_text_check(const sbx_plugin_exec_request *rq, const char *path, const char *op,
                       sbx_error **error)
{
    return cl_text_check(rq, path, "JSON", 0, op, error);
}

char *cl_shell_quote(const char *s)
{
    cl_buf b = { 0 };
    if (cl_buf_append(&b, "'", 1) < 0)
        return NULL;
    for (const char *p = s; *p; p++) {
        int rc = *p == '\'' ? cl_buf_append(&b, "'\\''", 4) : cl_buf_append(&b, p, 1);
        if (rc < 0) {
            cl_buf_clear(&b);
            return NULL;
        }
    }
    return cl_buf_take(&b, cl_buf_append(&b, "'", 1) < 0);
}

char *cl_shell_quote_path(const char *path)
{
    if (path[0] != '-')
        return cl_shell_quote(path);
    size_t n = strlen(path);
    char *dotted = malloc(n + 3);
    if (!dotted)
        return NULL;
    memcpy(dotted, "./", 2);
    memcpy(dotted + 2, path, n + 1);
    char *q = cl_shell_quote(dotted);
    free(dotted);
    return q;
}

char *cl_shell_script(const char *const *argv, const char *shell, const char *cwd)
{
    cl_buf b = { 0 };
    int bad = 0;
    if (cwd) {
        char *q = cl_shell_quote(cwd);
        bad |= !q || cl_buf_printf(&b, "cd -- %s || exit %d\n", q, CL_CWD_MISSING_EXIT) < 0;
        free(q);
    }
    if (argv) {
        /* exec: the command is the shell's own process, so its exit status
         * and signals are the command's. A first word starting with '-'
         * would be an option of exec (bash and busybox sh: exit 2), and
         * "exec --" is no way round it (dash runs a program named "--"):
         * such a command runs as a plain command of the shell instead,
         * whose status is the command's (128+N for a signal N). */
        int plain = argv[0] && argv[0][0] == '-';
        if (!plain)
            bad |= cl_buf_append(&b, "exec", 4) < 0;
        for (size_t i = 0; argv[i] && !bad; i++) {
            char *q = cl_shell_quote(argv[i]);
            bad |= !q || cl_buf_printf(&b, i == 0 && plain ? "%s" : " %s", q) < 0;
            free(q);
        }
    } else if (shell) {
        bad |= cl_buf_append(&b, shell, strlen(shell)) < 0;
    }
    bad |= cl_buf_append(&b, "", 0) < 0;
    return cl_buf_take(&b, bad);
}

const char CL_OUTPUT_ENCODER[] =
    "my @g=qw(TERM INT HUP QUIT USR1 USR2 ALRM);$SIG{$_}='IGNORE' for @g;"
    "$SIG{PIPE}='IGNORE';my $d=0;$SIG{CHLD}=sub{$d=1};"
    "pipe(OR,OW)||exit 126;pipe(ER,EW)||exit 126;"
    "my $p=fork;exit 126 unless defined $p;"
    "if(!$p){close OR;close ER;open(STDOUT,'>&OW');open(STDERR,'>&EW');close OW;close EW;"
    "$SIG{$_}='DEFAULT' for @g,'PIPE','CHLD';exec{$ARGV[0]}@ARGV;exit 127}"
    "close OW;close EW;my @f=([*OR,*STDOUT],[*ER,*STDERR]);my $s=-1;"
    "while(@f){my $r='';vec($r,fileno($_->[0]),1)=1 for @f;my $w=$s;"
    "my $n=select($r,undef,undef,($s>=0||$d)?0:0.25);"
    "if($s<0&&($d||$n<=0)){$d=0;$s=$? if waitpid($p,1)==$p}"
    "if($n<=0){last if $w>=0;next}"
    "for my $e(@f){next unless vec($r,fileno($e->[0]),1);"
    "my $k=sysread($e->[0],my $b,65536);next if !defined $k&&$!==4;"
    "if(!$k){$e->[2]=1;next}utf8::encode($b);"
    "for(my $o=0;$o<length $b;){my $l=length($b)-$o;"
    "if($l>4096){$l=4096;$l-- if ord(substr($b,$o+$l-1,1))>=192}"
    "my $w=syswrite($e->[1],$b,$l,$o);"
    "unless(defined $w){next if $!==4;last}$o+=$w}}"
    "@f=grep{!$_->[2]}@f}"
    "$s=$? if $s<0&&waitpid($p,0)==$p;"
    "if($s&127){$SIG{$_}='DEFAULT' for keys %SIG;kill($s&127,$$)}"
    "exit($s&127?128+($s&127):$s>>8)";

int cl_unencode(cl_unencoder *u, int fd, cl_buf *b)
{
    unsigned char *p = (unsigned char *)b->data;
    size_t o = 0;
    for (size_t i = 0; i < b->len; i++) {
        unsigned char c = p[i];
        if (u->lead) {
            if ((c & 0xc0) != 0x80)
                goto bad;
            p[o++] = (unsigned char)(((u->lead & 0x03) << 6) | (c & 0x3f));
            u->lead = 0;
        } else if (c < 0x80) {
            p[o++] = c;
        } else if (c == 0xc2 || c == 0xc3) {
            u->lead = c;
        } else {
            goto bad;
        }
        continue;
bad:
        cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "the command's %s came through the "
                "provider changed (byte 0x%02x at offset %zu of a piece)",
                fd == 1 ? "stdout" : "stderr", c, i);
        return -1;
    }
    b->len = o;
    return 0;
}

int cl_unencode_end(const cl_unencoder *u, int fd, const char *op, sbx_error **error)
{
    if (!u->lead)
        return 0;
    cl_fail(error, SBX_ERROR_CONNECTION, op, "the command's %s ended inside a character",
            fd == 1 ? "stdout" : "stderr");
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */

char *cl_credential(const char *const *envs, const char *file_under_home, const char *json_key)
{
    for (size_t i = 0; envs && envs[i]; i++) {
        const char *v = getenv(envs[i]);
        if (v && *v)
            return strdup(v);
    }
    const char *home = getenv("HOME");
    if (!file_under_home || !json_key || !home || !*home)
        return NULL;
    char *path = NULL;
    if (asprintf(&path, "%s/%s", home, file_under_home) < 0)
        return NULL;
    json_object *j = json_object_from_file(path);
    free(path);
    const char *v = cl_json_str(j, json_key);
    char *out = v && *v ? strdup(v) : NULL;
    json_object_put(j);
    return out;
}

const char *cl_setting(json_object *config, const char *key, const char *env, const char *dflt)
{
    const char *v = key ? cl_json_str(config, key) : NULL;
    if (v && *v)
        return v;
    v = env ? getenv(env) : NULL;
    return v && *v ? v : dflt;
}

char *cl_base_url(json_object *config, const char *key, const char *env, const char *dflt,
                  sbx_error **error)
{
    const char *v = key ? cl_json_str(config, key) : NULL;
    const char *from = key;
    if (!v && env && getenv(env) && *getenv(env)) {
        v = getenv(env);
        from = env;
    }
    if (!v) {
        v = dflt;
        from = "the default";
    }
    if (!v || (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)) {
        sbx_error *e = cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                               "%s: the base URL \"%s\" is not an http:// or https:// URL",
                               from ? from : "base URL", v ? v : "");
        cl_context(e, "url", v);
        return NULL;
    }
    char *out = strdup(v);
    if (!out) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return NULL;
    }
    size_t n = strlen(out);
    while (n > 8 && out[n - 1] == '/')
        out[--n] = '\0';
    return out;
}

int cl_seconds_option(json_object *config, const char *key, int zero_ok, int max_s, double *out,
                      sbx_error **error)
{
    json_object *v;
    if (!config || !json_object_object_get_ex(config, key, &v))
        return 0;
    double d = -1;
    if ((!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        || !isfinite(d = json_object_get_double(v)) || (zero_ok ? d < 0 || (d > 0 && d < 1)
                                                                 : !(d > 0))
        || d > max_s) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                           "%s client option %s %s is not a number of seconds %s %d", cl_backend,
                           key, json_object_to_json_string(v),
                           zero_ok ? "0, or from 1 to" : "above 0 and at most", max_s),
                   "option", key);
        return -1;
    }
    *out = d;
    return 1;
}

void cl_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}
