/*
 * host/error.c — sbx_error: code, message, backend, op, outcome and a small
 * redacted key/value context; the reference's string rendering; the host
 * services handed to plugins (logging, error construction, allocation).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

struct sbx_error {
    sbx_error_code code;
    sbx_error_outcome outcome;
    char *message;              /* never NULL */
    char *backend;              /* never NULL; "" when unset */
    char *op;                   /* never NULL; "" when unset */
    size_t ctx_count;
    size_t ctx_cap;
    char **ctx_keys;
    char **ctx_values;
};

static const char redacted[] = "[redacted]";

static const struct {
    const char *name;
    const char *description;
} code_table[SBX_ERROR_CODE_COUNT] = {
    [SBX_ERROR_UNKNOWN] = { "unknown", "unknown error" },
    [SBX_ERROR_BACKEND_NOT_INSTALLED] = { "backend_not_installed",
                                          "backend plugin not installed" },
    [SBX_ERROR_CONFIGURATION] = { "configuration",
                                  "configuration the backend cannot honour" },
    [SBX_ERROR_CREATION_FAILED] = { "creation_failed", "sandbox creation failed" },
    [SBX_ERROR_EXECUTION_FAILED] = { "execution_failed",
                                     "command could not be executed" },
    [SBX_ERROR_COMMAND_FAILED] = { "command_failed", "command failed" },
    [SBX_ERROR_TIMEOUT] = { "timeout", "operation timed out" },
    [SBX_ERROR_CONNECTION] = { "connection", "provider or plugin host unreachable" },
    [SBX_ERROR_AUTHENTICATION] = { "authentication", "credentials refused" },
    [SBX_ERROR_NOT_FOUND] = { "not_found", "sandbox, file or directory not found" },
    [SBX_ERROR_FEATURE_NOT_SUPPORTED] = { "feature_not_supported",
                                          "feature not supported by the backend" },
    [SBX_ERROR_WORKSPACE] = { "workspace", "workspace or archive refused" },
    [SBX_ERROR_RATE_LIMITED] = { "rate_limited", "rate limited by the provider" },
    [SBX_ERROR_INVALID_ARGUMENT] = { "invalid_argument", "invalid argument" },
    [SBX_ERROR_CANCELLED] = { "cancelled", "operation cancelled by the caller" },
    [SBX_ERROR_RESOURCE_EXHAUSTED] = { "resource_exhausted",
                                       "out of memory, descriptors, threads or processes" },
};

/* ---------------------------------------------------------------- public */

SBX_EXPORT const char *
sbx_error_code_name(sbx_error_code code)
{
    if ((unsigned)code >= SBX_ERROR_CODE_COUNT)
        return "unknown";
    return code_table[code].name;
}

SBX_EXPORT const char *
sbx_strerror(sbx_error_code code)
{
    if ((unsigned)code >= SBX_ERROR_CODE_COUNT)
        return "unknown error";
    return code_table[code].description;
}

SBX_EXPORT sbx_error_code
sbx_error_get_code(const sbx_error *error)
{
    return error ? error->code : SBX_ERROR_UNKNOWN;
}

SBX_EXPORT const char *
sbx_error_get0_message(const sbx_error *error)
{
    return error ? error->message : "";
}

SBX_EXPORT const char *
sbx_error_get0_backend(const sbx_error *error)
{
    return error ? error->backend : "";
}

SBX_EXPORT const char *
sbx_error_get0_op(const sbx_error *error)
{
    return error ? error->op : "";
}

SBX_EXPORT int
sbx_error_is_retryable(const sbx_error *error)
{
    if (!error)
        return 0;
    return error->code == SBX_ERROR_TIMEOUT || error->code == SBX_ERROR_CONNECTION ||
           error->code == SBX_ERROR_RATE_LIMITED;
}

SBX_EXPORT sbx_error_outcome
sbx_error_get_outcome(const sbx_error *error)
{
    return error ? error->outcome : SBX_ERROR_OUTCOME_FAILED;
}

SBX_EXPORT const char *
sbx_error_get0_context(const sbx_error *error, const char *key)
{
    if (!error || !key)
        return NULL;
    for (size_t i = 0; i < error->ctx_count; i++)
        if (strcmp(error->ctx_keys[i], key) == 0)
            return error->ctx_values[i];
    return NULL;
}

SBX_EXPORT size_t
sbx_error_get_context_count(const sbx_error *error)
{
    return error ? error->ctx_count : 0;
}

SBX_EXPORT int
sbx_error_get0_context_at(const sbx_error *error, size_t index, const char **key,
                          const char **value)
{
    if (!error || index >= error->ctx_count)
        return -1;
    if (key)
        *key = error->ctx_keys[index];
    if (value)
        *value = error->ctx_values[index];
    return 0;
}

/*
 * "MESSAGE [code=CODE, retryable; backend=B; op=OP; k=v]": the bracket
 * appears when the code is not unknown or a backend, op or context is set.
 */
/* Appends @v with its control characters (below 0x20, and 0x7f) written
 * as \n, \r, \t or \xNN, so that a context value (a command's stderr, a
 * provider's answer) keeps the rendering on one line. 0 or -1 (OOM). */
static int
append_escaped(sbx_buf *b, const char *v)
{
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        char esc[5];
        size_t n;

        if (*p >= 0x20 && *p != 0x7f) {
            const unsigned char *q = p;
            while (q[1] >= 0x20 && q[1] != 0x7f)
                q++;
            if (sbx_buf_append(b, (const char *)p, (size_t)(q - p) + 1) < 0)
                return -1;
            p = q;
            continue;
        }
        if (*p == '\n' || *p == '\r' || *p == '\t') {
            esc[0] = '\\';
            esc[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
            n = 2;
        } else {
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            n = 4;
        }
        if (sbx_buf_append(b, esc, n) < 0)
            return -1;
    }
    return 0;
}

SBX_EXPORT char *
sbx_error_to_string(const sbx_error *error)
{
    sbx_buf b = { 0 };
    int ok = 0;

    if (!error)
        return strdup("");
    if (sbx_buf_append(&b, error->message, strlen(error->message)) < 0)
        goto out;
    if (error->code != SBX_ERROR_UNKNOWN || error->backend[0] || error->op[0] ||
        error->ctx_count) {
        const char *name = sbx_error_code_name(error->code);

        if (sbx_buf_append(&b, " [code=", 7) < 0 ||
            sbx_buf_append(&b, name, strlen(name)) < 0)
            goto out;
        if (sbx_error_is_retryable(error) && sbx_buf_append(&b, ", retryable", 11) < 0)
            goto out;
        if (error->outcome == SBX_ERROR_OUTCOME_UNKNOWN
            && sbx_buf_append(&b, ", outcome=unknown", 17) < 0)
            goto out;
        if (error->backend[0] &&
            (sbx_buf_append(&b, "; backend=", 10) < 0 ||
             sbx_buf_append(&b, error->backend, strlen(error->backend)) < 0))
            goto out;
        if (error->op[0] &&
            (sbx_buf_append(&b, "; op=", 5) < 0 ||
             sbx_buf_append(&b, error->op, strlen(error->op)) < 0))
            goto out;
        for (size_t i = 0; i < error->ctx_count; i++) {
            const char *k = error->ctx_keys[i], *v = error->ctx_values[i];

            if (sbx_buf_append(&b, "; ", 2) < 0 || sbx_buf_append(&b, k, strlen(k)) < 0 ||
                sbx_buf_append(&b, "=", 1) < 0 || append_escaped(&b, v) < 0)
                goto out;
        }
        if (sbx_buf_append(&b, "]", 1) < 0)
            goto out;
    }
    ok = 1;
out:
    if (!ok) {
        sbx_buf_clear(&b);
        return NULL;
    }
    return sbx_buf_steal(&b, NULL);
}

SBX_EXPORT void
sbx_error_free(sbx_error *error)
{
    if (!error)
        return;
    for (size_t i = 0; i < error->ctx_count; i++) {
        free(error->ctx_keys[i]);
        free(error->ctx_values[i]);
    }
    free(error->ctx_keys);
    free(error->ctx_values);
    free(error->message);
    free(error->backend);
    free(error->op);
    free(error);
}

SBX_EXPORT void
sbx_error_clear(sbx_error **error)
{
    if (error && *error) {
        sbx_error_free(*error);
        *error = NULL;
    }
}

/* ---------------------------------------------------------------- internal */

static const char oom_message[] = "out of memory";

sbx_error *
sbx_error_newv(sbx_error_code code, const char *op, const char *fmt, va_list ap)
{
    sbx_error *e = calloc(1, sizeof(*e));

    if (!e)
        return NULL;
    e->code = (unsigned)code < SBX_ERROR_CODE_COUNT ? code : SBX_ERROR_UNKNOWN;
    e->outcome = SBX_ERROR_OUTCOME_FAILED;
    e->message = fmt ? sbx_vasprintf(fmt, ap) : strdup("");
    e->backend = strdup("");
    e->op = strdup(op ? op : "");
    if (!e->message || !e->backend || !e->op) {
        sbx_error_free(e);
        return NULL;
    }
    return e;
}

sbx_error *
sbx_error_new(sbx_error_code code, const char *op, const char *fmt, ...)
{
    va_list ap;
    sbx_error *e;

    va_start(ap, fmt);
    e = sbx_error_newv(code, op, fmt, ap);
    va_end(ap);
    return e;
}

sbx_error *
sbx_set_error(sbx_error **err, sbx_error_code code, const char *op, const char *fmt, ...)
{
    va_list ap;
    sbx_error *e;

    if (!err || *err)
        return NULL;
    va_start(ap, fmt);
    e = sbx_error_newv(code, op, fmt, ap);
    va_end(ap);
    if (!e) {
        /* Keep the failure visible even without memory: a fresh copy when
         * possible, the code is the one thing we must not lose. */
        e = calloc(1, sizeof(*e));
        if (e) {
            e->code = code;
            e->message = strdup(oom_message);
            e->backend = strdup("");
            e->op = strdup(op ? op : "");
            if (!e->message || !e->backend || !e->op) {
                sbx_error_free(e);
                e = NULL;
            }
        }
    }
    *err = e;
    return e;
}

int
sbx_context_key_is_secret(const char *key)
{
    static const char *const words[] = { "token", "key", "secret", "password",
                                         "authorization" };

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcasestr(key, words[i]))
            return 1;
    return 0;
}

void
sbx_error_add_context(sbx_error *error, const char *key, const char *value)
{
    char *v;

    if (!error || !key)
        return;
    v = strdup(sbx_context_key_is_secret(key) ? redacted : value ? value : "");
    if (!v)
        return;
    for (size_t i = 0; i < error->ctx_count; i++) {
        if (strcmp(error->ctx_keys[i], key) == 0) {
            free(error->ctx_values[i]);
            error->ctx_values[i] = v;
            return;
        }
    }
    if (error->ctx_count == error->ctx_cap) {
        size_t cap = error->ctx_cap ? error->ctx_cap * 2 : 4;
        char **keys = realloc(error->ctx_keys, cap * sizeof(*keys));

        if (!keys) {
            free(v);
            return;
        }
        error->ctx_keys = keys;
        char **values = realloc(error->ctx_values, cap * sizeof(*values));
        if (!values) {
            free(v);
            return;
        }
        error->ctx_values = values;
        error->ctx_cap = cap;
    }
    error->ctx_keys[error->ctx_count] = strdup(key);
    if (!error->ctx_keys[error->ctx_count]) {
        free(v);
        return;
    }
    error->ctx_values[error->ctx_count++] = v;
}

void
sbx_error_add_contextf(sbx_error *error, const char *key, const char *fmt, ...)
{
    va_list ap;
    char *v;

    if (!error)
        return;
    va_start(ap, fmt);
    v = sbx_vasprintf(fmt, ap);
    va_end(ap);
    if (v)
        sbx_error_add_context(error, key, v);
    free(v);
}

void
sbx_error_set_outcome(sbx_error *error, sbx_error_outcome outcome)
{
    if (error)
        error->outcome = outcome;
}

/* Replaces *@field with a copy of @value when it is empty. */
static void
fill_field(char **field, const char *value)
{
    char *copy;

    if ((*field)[0] || !value || !value[0])
        return;
    copy = strdup(value);
    if (copy) {
        free(*field);
        *field = copy;
    }
}

void
sbx_error_fill(sbx_error *error, const char *backend, const char *op)
{
    if (!error)
        return;
    fill_field(&error->backend, backend);
    fill_field(&error->op, op);
}

void
sbx_error_replace_op(sbx_error *error, const char *from, const char *to)
{
    char *copy;

    if (!error || !error->op || strncmp(error->op, from, strlen(from)) != 0 ||
        !(copy = strdup(to)))
        return;
    free(error->op);
    error->op = copy;
}

void
sbx_error_set_message(sbx_error *error, const char *fmt, ...)
{
    va_list ap;
    char *m;

    if (!error)
        return;
    va_start(ap, fmt);
    m = sbx_vasprintf(fmt, ap);
    va_end(ap);
    if (m) {
        free(error->message);
        error->message = m;
    }
}

void
sbx_error_propagate(sbx_error **dest, sbx_error *src)
{
    if (!src)
        return;
    if (dest && !*dest)
        *dest = src;
    else
        sbx_error_free(src);
}

sbx_error_code
sbx_errno_code(int e, sbx_error_code otherwise)
{
    switch (e) {
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOBUFS:
    case EAGAIN:
        return SBX_ERROR_RESOURCE_EXHAUSTED;
    default:
        return otherwise;
    }
}

sbx_error_code
sbx_error_code_for_op(const char *op)
{
    static const char *const file_ops[] = {
        "read_file", "write_file", "list_files", "stat_file", "upload", "download", NULL
    };

    if (!op)
        return SBX_ERROR_EXECUTION_FAILED;
    if (strncmp(op, "create", 6) == 0 || strcmp(op, "client_new") == 0 ||
        strcmp(op, "resume") == 0)
        return SBX_ERROR_CREATION_FAILED;
    for (int i = 0; file_ops[i]; i++)
        if (strncmp(op, file_ops[i], strlen(file_ops[i])) == 0)
            return SBX_ERROR_WORKSPACE;
    return SBX_ERROR_EXECUTION_FAILED;
}

void
sbx_error_ensure(sbx_error **err, const char *backend, const char *slot)
{
    if (!err || *err)
        return;
    sbx_set_error(err, sbx_error_code_for_op(slot), NULL,
                  "backend \"%s\": %s failed without reporting an error",
                  backend ? backend : "", slot);
}

/* ---------------------------------------------------------------- logging */

/*
 * The SBX_DEBUG level (see "Logging" in sbx.h): -1 (nothing) when unset,
 * empty or "0"; the level named by "error", "warning", "info" or "debug"
 * (any case); SBX_LOG_DEBUG (everything) for any other value, "1" first.
 */
static int
debug_level(void)
{
    static const char *const names[] = { "error", "warning", "info", "debug" };
    const char *s = getenv("SBX_DEBUG");

    if (!s || !*s || strcmp(s, "0") == 0)
        return -1;
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    return SBX_LOG_DEBUG;
}

/* Writes one log line with a single stdio call so threads do not interleave. */
static void
log_v(sbx_log_level level, const char *backend, const char *fmt, va_list ap)
{
    char *msg;

    if ((int)level > debug_level())
        return;
    msg = sbx_vasprintf(fmt, ap);
    if (!msg)
        return;
    fprintf(stderr, "sbx[%s]: %s\n", backend && *backend ? backend : "host", msg);
    free(msg);
}

void
sbx_log(sbx_log_level level, const char *backend, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_v(level, backend, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- services */

/* host->set_error: like sbx_set_error, no return value. A plugin's
 * SBX_ERROR_UNKNOWN (or a code this build does not know) becomes the code
 * sbx_error_code_for_op() gives for @op, so no plugin error leaves the
 * library as `unknown`. */
SBX_PRINTF(4, 5) static void
service_set_error(sbx_error **error, sbx_error_code code, const char *op,
                  const char *fmt, ...)
{
    va_list ap;
    sbx_error *e;

    if (!error || *error)
        return;
    if (code == SBX_ERROR_UNKNOWN || (unsigned)code >= SBX_ERROR_CODE_COUNT)
        code = sbx_error_code_for_op(op);
    va_start(ap, fmt);
    e = sbx_error_newv(code, op, fmt, ap);
    va_end(ap);
    if (!e)
        sbx_set_error(error, code, op, "%s", oom_message);
    else
        *error = e;
}

static void *
service_alloc(size_t size)
{
    return malloc(size ? size : 1);
}

static void
service_free(void *ptr)
{
    free(ptr);
}

static int owner_fd = -1;

void
sbx_host_set_owner_pidfd(int fd)
{
    owner_fd = fd;
}

static int
service_owner_pidfd(void)
{
    if (owner_fd >= 0)
        return fcntl(owner_fd, F_DUPFD_CLOEXEC, 3);
    return (int)syscall(SYS_pidfd_open, getpid(), 0);
}

static const sbx_host_services host_services = {
    .struct_size = sizeof(sbx_host_services),
    .abi_major = SBX_PLUGIN_ABI_MAJOR,
    .abi_minor = SBX_PLUGIN_ABI_MINOR,
    .log = sbx_log,
    .set_error = service_set_error,
    .error_add_context = sbx_error_add_context,
    .error_set_outcome = sbx_error_set_outcome,
    .alloc = service_alloc,
    .free = service_free,
    .owner_pidfd = service_owner_pidfd,
};

const sbx_host_services *
sbx_host_services_get(void)
{
    return &host_services;
}
