/*
 * sbx — run commands and code in sandboxes through libsbx.
 *
 *   sbx run [OPTION]... [--] COMMAND [ARG]...
 *   sbx exec-code [OPTION]... CODE
 *   sbx backends [--json]
 *   sbx create [OPTION]...
 *   sbx exec [OPTION]... ID [--] COMMAND [ARG]...
 *   sbx cp [-r] SRC DST
 *   sbx ls [--json] ID [PATH]
 *   sbx rm ID...
 *   sbx ps [--json]
 *
 * The command's output goes to stdout/stderr untouched, as it arrives. The
 * tool's own messages go to stderr as "sbx: MESSAGE [code=...]"; the tool's
 * own failures exit 125 (as `docker run` does), otherwise the exit status is
 * the command's (128+N for signal N, 124 on timeout).
 *
 * run and exec-code: the sandbox is always destroyed before sbx exits: also
 * on errors and on SIGINT, SIGTERM and SIGHUP, whose handlers only set a
 * flag and wake the main thread; the command runs on a worker thread so the
 * main thread can destroy the sandbox (which ends the command) while it
 * runs.
 *
 * create, exec, cp, ls, rm and ps work on sandboxes that outlive sbx: an id
 * maps to the sandbox's session state recorded in the user's state
 * directory ("state store" below), and each command resumes from it.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

/* Exit status of the tool's own failures (bad usage, create failed, ...). */
#define EXIT_TOOL 125
/* How long to wait for a running exec to return once its sandbox has been
 * destroyed after a signal. */
#define SIGNAL_DRAIN_SECS 10

/* ------------------------------------------------------------------ util */

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void msg(const char *fmt, ...)
{
    va_list ap;
    char buf[4096];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sbx: %s\n", buf);
}

/* Prints @error as "sbx: MESSAGE [code=CODE, ...]" and frees it. */
static void msg_error(sbx_error *error)
{
    char *text;

    if (error == NULL) {
        msg("unknown error");
        return;
    }
    text = sbx_error_to_string(error);
    if (text != NULL) {
        fprintf(stderr, "sbx: %s\n", text);
        free(text);
    } else {
        fprintf(stderr, "sbx: %s [code=%s]\n", sbx_error_get0_message(error),
                sbx_error_code_name(sbx_error_get_code(error)));
    }
    sbx_error_free(error);
}

static int parse_positive_double(const char *text, double *out)
{
    char *end;
    double v;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v <= 0)
        return -1;
    *out = v;
    return 0;
}

static int parse_positive_int64(const char *text, int64_t *out)
{
    char *end;
    long long v;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v <= 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static const char *default_backend(void)
{
    const char *env = getenv("SBX_BACKEND");

    return env != NULL && *env != '\0' ? env : "local";
}

/* ----------------------------------------------------------------- signals */

static volatile sig_atomic_t g_signal;
static int g_signal_pipe[2] = { -1, -1 };

static void on_signal(int signo)
{
    int saved = errno;
    char c = 1;
    ssize_t n;

    if (g_signal == 0)
        g_signal = signo;
    if (g_signal_pipe[1] >= 0) {
        n = write(g_signal_pipe[1], &c, 1);
        (void)n;
    }
    errno = saved;
}

/* A handler rather than SIG_IGN: a caught signal is reset to the default in
 * the programs the library starts, an ignored one would be inherited. */
static void on_sigpipe(int signo)
{
}

static void install_signal_handlers(void)
{
    static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction sa, old;
    size_t i;

    if (pipe(g_signal_pipe) == 0) {
        for (i = 0; i < 2; i++) {
            fcntl(g_signal_pipe[i], F_SETFD, FD_CLOEXEC);
            fcntl(g_signal_pipe[i], F_SETFL, O_NONBLOCK);
        }
    } else {
        g_signal_pipe[0] = g_signal_pipe[1] = -1;
    }

    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_signal;
    for (i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++) {
        /* A signal ignored by whoever started us stays ignored. */
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(stop_signals[i], &sa, NULL);
    }
    sa.sa_handler = on_sigpipe;
    sigaction(SIGPIPE, &sa, NULL);
}

static const char *signal_name(int signo)
{
    switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

/* ------------------------------------------------- interruptible calls */

/*
 * Every command ends on SIGINT, SIGTERM and SIGHUP. The handlers (set once,
 * in main) only record the signal and wake the main thread through a
 * pipe. A library call that may block (exec, file transfers, listings,
 * destroy) runs as an operation of a one-worker sbx_async pool while the
 * main thread waits for it or for a stop signal; on a signal the operation
 * is cancelled (sbx_op_cancel: an exec's processes end, a transfer stops
 * and the library removes its staging files). A call that has not
 * returned CANCEL_GRACE_SECS later is left behind: the command's cleanup
 * hook removes what it may have left on this host and sbx exits at once.
 * Either way the exit status is 128+N for signal N.
 */

/* How long a cancelled call may take to return before sbx leaves it. */
#define CANCEL_GRACE_SECS 0.6

static void drain_fd(int fd);

/* What a finished operation handed over (each NULL / 0 when not its kind). */
typedef struct op_outcome {
    int done;
    sbx_error *error;
    sbx_result *result;       /* exec */
    sbx_file_info **list;     /* list_files */
    size_t count;
    int64_t value;            /* transfers: bytes or entries; is_alive */
    sbx_sandbox *sandbox;     /* create */
} op_outcome;

/* Frees what @o holds; a sandbox it holds is destroyed first. */
static void op_outcome_clear(op_outcome *o)
{
    if (o->sandbox != NULL) {
        sbx_sandbox_destroy(o->sandbox, NULL);
        sbx_sandbox_free(o->sandbox);
    }
    sbx_error_free(o->error);
    sbx_result_free(o->result);
    sbx_file_info_list_free(o->list, o->count);
    memset(o, 0, sizeof *o);
}

static void on_op_done(sbx_op *op, void *user_data)
{
    op_outcome *o = user_data;

    o->done = 1;
    o->error = sbx_op_steal_error(op);
    o->result = sbx_op_steal_result(op);
    o->list = sbx_op_steal_file_list(op, &o->count);
    o->value = sbx_op_get_int64(op);
    /* A cancelled create's sandbox is left to the library, which destroys
     * it before the pool is freed. */
    if (o->error == NULL || sbx_error_get_code(o->error) != SBX_ERROR_CANCELLED)
        o->sandbox = sbx_op_steal_sandbox(op);
}

/* Submits one operation to @async (its done callback and user data given). */
typedef sbx_op *(*submit_fn)(sbx_async *async, void *arg, sbx_op_done_fn done,
                             void *user_data, sbx_error **error);

static double monotonic_secs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Runs the call @submit submits (with @arg) and waits for it or a stop
 * signal. Returns 0 when the call finished first (its outcome in *@out,
 * the caller's to clear; a failure is in out->error, not reported); 128+N
 * when stop signal N came first (reported; the call was cancelled and
 * returned within the grace, its outcome dropped); EXIT_TOOL when it could
 * not be started (reported). When the cancelled call does not return
 * within @grace seconds, @cleanup (may be NULL) runs with @cleanup_arg and
 * sbx exits 128+N without waiting for it.
 */
static int call_interruptibly(submit_fn submit, void *arg, const char *what, double grace,
                              void (*cleanup)(void *), void *cleanup_arg, op_outcome *out)
{
    sbx_error *error = NULL;
    sbx_async *async;
    sbx_op *op;
    double deadline = 0;
    int cancelled = 0;

    memset(out, 0, sizeof *out);
    if (g_signal != 0) {
        msg("%s received; %s was not started", signal_name(g_signal), what);
        return 128 + g_signal;
    }
    async = sbx_async_new(1, &error);
    if (async == NULL) {
        msg_error(error);
        return EXIT_TOOL;
    }
    op = submit(async, arg, on_op_done, out, &error);
    if (op == NULL) {
        msg_error(error);
        sbx_async_free(async);
        return EXIT_TOOL;
    }
    while (!out->done) {
        struct pollfd pfd[2];
        int timeout = -1;

        pfd[0].fd = sbx_async_get_fd(async);
        pfd[0].events = POLLIN;
        pfd[1].fd = g_signal_pipe[0];
        pfd[1].events = POLLIN;
        if (cancelled) {
            double left = deadline - monotonic_secs();

            timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
        } else if (g_signal_pipe[0] < 0) {
            timeout = 100;
        }
        if (poll(pfd, 2, timeout) > 0) {
            if (pfd[1].revents & POLLIN)
                drain_fd(g_signal_pipe[0]);
            if (pfd[0].revents & POLLIN)
                sbx_async_dispatch(async);
        }
        if (out->done)
            break;
        if (g_signal != 0 && !cancelled) {
            sbx_op_cancel(op);
            cancelled = 1;
            deadline = monotonic_secs() + grace;
        } else if (cancelled && monotonic_secs() >= deadline) {
            /* The call ignores its cancellation: leave it behind. */
            msg("%s received; %s was cancelled", signal_name(g_signal), what);
            if (cleanup != NULL)
                cleanup(cleanup_arg);
            fflush(stdout);
            _exit(128 + g_signal);
        }
    }
    sbx_async_free(async);
    if (cancelled || (g_signal != 0 && out->error != NULL &&
                      sbx_error_get_code(out->error) == SBX_ERROR_CANCELLED)) {
        op_outcome_clear(out);
        msg("%s received; %s was cancelled", signal_name(g_signal), what);
        return 128 + g_signal;
    }
    return 0;
}

/* The calls the commands make through call_interruptibly. */
typedef struct call_args {
    sbx_sandbox *sandbox;
    const char *a, *b;                 /* paths: sandbox / local as the call takes them */
    const sbx_exec_request *request;
    const sbx_options *options;
} call_args;

static sbx_op *submit_exec(sbx_async *async, void *arg, sbx_op_done_fn done, void *ud,
                           sbx_error **error)
{
    call_args *c = arg;

    return sbx_sandbox_execute_command_async(async, c->sandbox, c->request, done, ud, error);
}

static sbx_op *submit_list(sbx_async *async, void *arg, sbx_op_done_fn done, void *ud,
                           sbx_error **error)
{
    call_args *c = arg;

    return sbx_sandbox_list_files_async(async, c->sandbox, c->a, done, ud, error);
}

static sbx_op *submit_upload_file(sbx_async *async, void *arg, sbx_op_done_fn done, void *ud,
                                  sbx_error **error)
{
    call_args *c = arg;

    return sbx_sandbox_upload_file_async(async, c->sandbox, c->b, c->a, done, ud, error);
}

static sbx_op *submit_upload_dir(sbx_async *async, void *arg, sbx_op_done_fn done, void *ud,
                                 sbx_error **error)
{
    call_args *c = arg;

    return sbx_sandbox_upload_dir_async(async, c->sandbox, c->b, c->a, done, ud, error);
}

static sbx_op *submit_download_file(sbx_async *async, void *arg, sbx_op_done_fn done,
                                    void *ud, sbx_error **error)
{
    call_args *c = arg;

    return sbx_sandbox_download_file_async(async, c->sandbox, c->a, c->b, done, ud, error);
}

static sbx_op *submit_download_dir(sbx_async *async, void *arg, sbx_op_done_fn done,
                                   void *ud, sbx_error **error)
{
    call_args *c = arg;

    return sbx_sandbox_download_dir_async(async, c->sandbox, c->a, c->b, done, ud, error);
}

/* For create: @a is the backend, @options the options. */
static sbx_op *submit_create(sbx_async *async, void *arg, sbx_op_done_fn done, void *ud,
                             sbx_error **error)
{
    call_args *c = arg;

    return sbx_create_async(async, c->a, c->options, done, ud, error);
}

static sbx_op *submit_destroy(sbx_async *async, void *arg, sbx_op_done_fn done, void *ud,
                              sbx_error **error)
{
    call_args *c = arg;

    return sbx_sandbox_destroy_async(async, c->sandbox, done, ud, error);
}

/* ---------------------------------------------------------- names shown */

/*
 * Names that come from a sandbox (file names, record fields) are bytes the
 * sandbox chose. Table output escapes them so they cannot drive the
 * terminal or fake extra lines; JSON output keeps the document valid UTF-8
 * and the exact bytes recoverable.
 */

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
static char *escape_name(const char *s)
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
static void print_escaped(const char *s)
{
    char *e = escape_name(s);

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
static void json_add_name(json_object *o, const char *key, const char *s)
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
static void print_json(json_object *doc)
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
}

/* ------------------------------------------------------------------ output */

/* Output sink: the command's chunks are written to our stdout / stderr as
 * they arrive. A stream whose reader went away is dropped from then on
 * (the command keeps running; its exit code still decides ours). */
typedef struct output_sink {
    int broken[3];
} output_sink;

static void write_all(output_sink *sink, int fd, const void *data, size_t len)
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

static void on_output(sbx_stream stream, const void *data, size_t len,
                      void *user_data)
{
    output_sink *sink = user_data;

    write_all(sink, stream == SBX_STREAM_STDERR ? STDERR_FILENO : STDOUT_FILENO,
              data, len);
}

/* --------------------------------------------------------------- exec job */

/* One exec, run on a worker thread. */
typedef struct exec_job {
    sbx_sandbox *sandbox;
    const char *const *argv;  /* run: the command */
    const char *language;     /* exec-code */
    const char *code;         /* exec-code: non-NULL selects execute_code */
    double timeout;           /* the command's timeout (s); 0: the sandbox's */
    output_sink sink;
    sbx_result *result;
    sbx_error *error;
    int done_pipe[2];
} exec_job;

static void *exec_job_main(void *arg)
{
    exec_job *job = arg;
    sbx_exec_request request = SBX_EXEC_REQUEST_INIT;
    char c = 1;
    ssize_t n;

    request.timeout_secs = job->timeout;   /* 0: the sandbox's timeout_secs */
    request.on_output = on_output;
    request.user_data = &job->sink;
    request.flags = SBX_EXEC_NO_CAPTURE;
    if (job->code != NULL) {
        job->result = sbx_sandbox_execute_code(job->sandbox, job->language,
                                               job->code, &request, &job->error);
    } else {
        request.argv = job->argv;
        job->result = sbx_sandbox_execute_command(job->sandbox, &request,
                                                  &job->error);
    }
    do {
        n = write(job->done_pipe[1], &c, 1);
    } while (n < 0 && errno == EINTR);
    return NULL;
}

static void drain_fd(int fd)
{
    char buf[64];

    while (read(fd, buf, sizeof buf) > 0)
        ;
}

/* Destroys @sandbox; reports a failure. Returns 0 or -1. */
static int destroy_sandbox(sbx_sandbox *sandbox)
{
    sbx_error *error = NULL;

    if (sbx_sandbox_destroy(sandbox, &error) < 0) {
        msg_error(error);
        msg("the sandbox %s may still exist", sbx_sandbox_get0_id(sandbox));
        return -1;
    }
    return 0;
}

/*
 * Runs @job on a worker thread while the main thread waits for it or for a
 * stop signal. Destroys and frees the sandbox in every case and returns the
 * exit status for the tool.
 */
static int run_job_and_destroy(exec_job *job)
{
    pthread_t thread;
    int destroyed = 0, status, rc;
    double waited = 0;

    if (g_signal != 0) {
        msg("%s received; destroying the sandbox", signal_name(g_signal));
        destroy_sandbox(job->sandbox);
        sbx_sandbox_free(job->sandbox);
        return 128 + g_signal;
    }

    if (pipe(job->done_pipe) < 0) {
        msg("pipe: %s", strerror(errno));
        destroy_sandbox(job->sandbox);
        sbx_sandbox_free(job->sandbox);
        return EXIT_TOOL;
    }
    fcntl(job->done_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(job->done_pipe[1], F_SETFD, FD_CLOEXEC);

    rc = pthread_create(&thread, NULL, exec_job_main, job);
    if (rc != 0) {
        msg("cannot start a thread: %s", strerror(rc));
        destroy_sandbox(job->sandbox);
        sbx_sandbox_free(job->sandbox);
        return EXIT_TOOL;
    }

    for (;;) {
        struct pollfd pfd[2];
        int n;

        pfd[0].fd = job->done_pipe[0];
        pfd[0].events = POLLIN;
        pfd[1].fd = g_signal_pipe[0];
        pfd[1].events = POLLIN;
        n = poll(pfd, 2, destroyed ? 1000 : (g_signal_pipe[0] < 0 ? 200 : -1));
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && (pfd[0].revents & (POLLIN | POLLHUP)))
            break;
        if (n > 0 && (pfd[1].revents & POLLIN))
            drain_fd(g_signal_pipe[0]);
        if (g_signal != 0 && !destroyed) {
            msg("%s received; destroying the sandbox", signal_name(g_signal));
            destroy_sandbox(job->sandbox);
            destroyed = 1;
        } else if (destroyed && n == 0) {
            waited += 1;
            if (waited >= SIGNAL_DRAIN_SECS) {
                /* The exec did not return although its sandbox is gone:
                 * leave without waiting for the worker. */
                msg("the command did not end after the sandbox was destroyed");
                _exit(128 + g_signal);
            }
        }
    }
    pthread_join(thread, NULL);
    close(job->done_pipe[0]);
    close(job->done_pipe[1]);

    if (destroyed) {
        sbx_result_free(job->result);
        sbx_error_free(job->error);
        sbx_sandbox_free(job->sandbox);
        return 128 + g_signal;
    }

    if (job->result == NULL) {
        msg_error(job->error);
        job->error = NULL;
        status = EXIT_TOOL;
    } else {
        status = sbx_result_get_exit_code(job->result);
        if (sbx_result_is_timed_out(job->result))
            msg("the command timed out and was killed");
        sbx_result_free(job->result);
    }
    destroy_sandbox(job->sandbox);
    sbx_sandbox_free(job->sandbox);
    if (g_signal != 0)
        return 128 + g_signal;
    return status;
}

/* ------------------------------------------------------------------ help */

/* Help lines of the creation options that run and create share. */
#define CREATION_OPTIONS_HELP \
"  -i, --image=IMAGE       image to start from (backends that take one)\n" \
"      --preset=NAME       preset whose values are the defaults of every\n" \
"                          option not given (see `sbx presets`)\n" \
"      --no-internet       no network but the sandbox's own loopback\n" \
"      --opt=KEY=VALUE     backend option (repeatable; VALUE is read as JSON\n" \
"                          when it is valid JSON, else as a string)\n" \
"      --file=LOCAL:PATH   copy host file LOCAL to sandbox path PATH at\n" \
"                          create, keeping its mode (repeatable; PATH is\n" \
"                          what follows the last ':')\n"

static void usage_main(FILE *out)
{
    fprintf(out,
"Usage: sbx COMMAND [OPTION]...\n"
"\n"
"Run commands and code in sandboxes through libsbx.\n"
"\n"
"Commands:\n"
"  run [OPTION]... [--] COMMAND [ARG]...\n"
"                     create a sandbox, run COMMAND in it, destroy it\n"
"  exec-code [OPTION]... CODE\n"
"                     run a snippet of code (python by default) in a new sandbox\n"
"  backends [--json]  list the backend plugins found and their capabilities\n"
"  create [OPTION]... create a sandbox that outlives sbx and print its id\n"
"  exec [OPTION]... ID [--] COMMAND [ARG]...\n"
"                     run COMMAND in sandbox ID\n"
"  cp [-r] SRC DST    copy files between this host and a sandbox (ID:PATH)\n"
"  ls [--json] ID [PATH]\n"
"                     list a directory of sandbox ID\n"
"  rm ID...           destroy sandboxes and forget them\n"
"  ps [--json]        list the sandboxes made by create\n"
"  gc [--dry-run] [--json]\n"
"                     destroy what no longer should exist: expired sandboxes,\n"
"                     attached ones whose processes died, unrecorded ones\n"
"  presets [--json]   list the presets (creation defaults and setup commands)\n"
"  help [COMMAND]     show this help, or the help of COMMAND\n"
"\n"
"Options:\n"
"  -h, --help         show this help and exit\n"
"  -V, --version      print the version and exit\n"
"\n"
"The backend is \"local\" unless the environment variable SBX_BACKEND names\n"
"another; -b BACKEND overrides both. A backend NAME is the plugin\n"
"libsbx-NAME.so, searched in the directories of SBX_PLUGIN_PATH, then in\n"
"%s.\n"
"\n"
"Exit status: the command's own (128+N when it was killed by signal N, 124\n"
"when it timed out); 125 when sbx itself failed (bad usage, missing backend,\n"
"sandbox creation failed, no such sandbox).\n"
"\n"
"Every command ends on SIGINT, SIGTERM and SIGHUP with status 128+N: the call\n"
"in progress is cancelled (a command run by exec ends, a copy stops and what\n"
"it made on this host is removed; run and exec-code destroy their sandbox).\n",
            sbx_plugin_dir());
}

static void usage_run(FILE *out)
{
    fprintf(out,
"Usage: sbx run [OPTION]... [--] COMMAND [ARG]...\n"
"\n"
"Create a sandbox, run COMMAND with its arguments in it (as an argument\n"
"vector, not through a shell), stream its output, destroy the sandbox and exit\n"
"with the command's exit status.\n"
"\n"
"  -b, --backend=BACKEND   backend to use (default: $SBX_BACKEND, else local)\n"
"  -e, --env=KEY=VALUE     set an environment variable in the sandbox\n"
"                          (repeatable; VALUE is taken literally)\n"
"  -w, --workdir=DIR       directory the command starts in (on local: an\n"
"                          existing directory used as the sandbox root, and\n"
"                          never deleted)\n"
"  -t, --timeout=SECONDS   sandbox lifetime and command timeout (default %g)\n"
"      --cpu=N             vCPUs (fractions allowed)\n"
"      --memory=MIB        memory in MiB\n"
"      --git-repo=URL      clone URL (a local path works) into the sandbox's\n"
"                          working directory, under its last path component\n"
"      --git-ref=REF       branch or tag to clone (with --git-repo)\n"
CREATION_OPTIONS_HELP
"  -h, --help              show this help and exit\n"
"\n"
"The command's standard input is empty (it reads end of file at once): sbx\n"
"does not pass its own standard input on. Options after COMMAND belong to\n"
"the command. The sandbox is destroyed when the command ends, when sbx fails\n"
"and when sbx receives SIGINT, SIGTERM or SIGHUP.\n"
"\n"
"Exit status: the command's (128+N when killed by signal N, 124 when it\n"
"timed out and its processes were killed); 125 when sbx itself failed.\n",
            SBX_DEFAULT_TIMEOUT_SECS);
}

static void usage_exec_code(FILE *out)
{
    fprintf(out,
"Usage: sbx exec-code [OPTION]... CODE\n"
"\n"
"Create a sandbox, run CODE in it, stream its output, destroy the sandbox and\n"
"exit with the interpreter's exit status. CODE \"-\" reads the code from\n"
"standard input. The code's own standard input is empty.\n"
"\n"
"  -b, --backend=BACKEND    backend to use (default: $SBX_BACKEND, else local)\n"
"  -l, --language=LANGUAGE  python (default), bash, sh, node or javascript\n"
"  -t, --timeout=SECONDS    sandbox lifetime and code timeout (default %g)\n"
"  -h, --help               show this help and exit\n"
"\n"
"Exit status: the interpreter's (128+N when killed by signal N, 124 when it\n"
"timed out); 125 when sbx itself failed.\n",
            SBX_DEFAULT_TIMEOUT_SECS);
}

static void usage_backends(FILE *out)
{
    fprintf(out,
"Usage: sbx backends [--json]\n"
"\n"
"List the backend plugins found (SBX_PLUGIN_PATH, then %s):\n"
"name, version, status (\"ok\" or why the plugin is not used), the\n"
"capabilities it declares and, for a usable one, the capabilities a client\n"
"actually has on this host, and where plugins run: \"outofprocess\" (each\n"
"client's plugin in an sbx-plugin-host process of its own, the default) or\n"
"\"inprocess\" (SBX_PLUGIN_MODE=inprocess). Each plugin file is inspected in\n"
"a helper process, so one that crashes while loading is listed with the\n"
"signal instead of ending the listing.\n"
"\n"
"      --json   print a JSON array of objects {name, path, version,\n"
"               description, abi, usable, problem, caps, probed_caps,\n"
"               probe_error, mode}\n"
"  -h, --help   show this help and exit\n",
            sbx_plugin_dir());
}

static void usage_create(FILE *out)
{
    fprintf(out,
"Usage: sbx create [OPTION]...\n"
"\n"
"Create a sandbox that outlives sbx, print its id (alone on one line) and\n"
"leave it running, for `sbx exec`, `sbx cp`, `sbx ls` and `sbx rm`. The id\n"
"maps to the sandbox's session state (no environment value, no credential),\n"
"recorded in %s\n"
"(refused unless it, its records and its parents are the user's, or root's\n"
"for parents, and not writable by group or others).\n"
"\n"
"  -b, --backend=BACKEND   backend to use (default: $SBX_BACKEND, else local)\n"
"  -e, --env=KEY=VALUE     set an environment variable for every command of\n"
"                          the sandbox (repeatable; VALUE is taken literally)\n"
"  -w, --workdir=DIR       directory commands start in (on local: an existing\n"
"                          directory used as the sandbox root, never deleted)\n"
"  -t, --timeout=SECONDS   sandbox lifetime and default command timeout\n"
"                          (default %g)\n"
"      --cpu=N             vCPUs (fractions allowed)\n"
"      --memory=MIB        memory in MiB\n"
"      --git-repo=URL      clone URL (a local path works) into the sandbox's\n"
"                          working directory, under its last path component\n"
"      --git-ref=REF       branch or tag to clone (with --git-repo)\n"
CREATION_OPTIONS_HELP
"  -h, --help              show this help and exit\n"
"\n"
"Exit status: 0 when the sandbox was created and recorded; 125 otherwise\n"
"(nothing is left running then).\n",
            "${SBX_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/sbx}/sandboxes",
            SBX_DEFAULT_TIMEOUT_SECS);
}

static void usage_exec(FILE *out)
{
    fprintf(out,
"Usage: sbx exec [OPTION]... ID [--] COMMAND [ARG]...\n"
"\n"
"Run COMMAND with its arguments (an argument vector, not a shell string) in\n"
"the sandbox ID made by `sbx create`, stream its output and exit with its\n"
"exit status. Files and background processes stay in the sandbox between\n"
"calls; the variables given at create still apply.\n"
"\n"
"  -e, --env=KEY=VALUE     set a variable for this command only (repeatable;\n"
"                          it wins over the sandbox's)\n"
"      --cwd=DIR           sandbox path of the working directory (default:\n"
"                          the sandbox's working directory)\n"
"  -t, --timeout=SECONDS   kill the command's processes after SECONDS\n"
"                          (default: the sandbox's timeout)\n"
"  -h, --help              show this help and exit\n"
"\n"
"The command's standard input is empty. On SIGINT, SIGTERM or SIGHUP the\n"
"command's processes are ended and sbx exits with 128+N; the sandbox stays.\n"
"\n"
"Exit status: the command's (128+N when killed by signal N, 124 when it\n"
"timed out); 125 when sbx itself failed (\"no such sandbox: ID\" for an id\n"
"that is not recorded).\n");
}

static void usage_cp(FILE *out)
{
    fprintf(out,
"Usage: sbx cp [-r] SRC DST\n"
"\n"
"Copy a file (or, with -r, a directory) between this host and a sandbox.\n"
"Exactly one of SRC and DST is ID:PATH, PATH being a sandbox path (on local,\n"
"under the sandbox root). Contents and permission bits (the executable bit\n"
"in particular) are kept.\n"
"\n"
"A file copied to an existing directory, or to a path ending in '/', goes\n"
"into it under its own name. With -r, SRC is a directory whose entries are\n"
"copied into DST (created when missing, merged into an existing one).\n"
"An operand is ID:PATH when it has a ':' before any '/'; write a local name\n"
"that has a colon as ./NAME, and one that starts with '-' as ./-NAME or\n"
"after `--`.\n"
"\n"
"  -r, -R, --recursive   copy directories\n"
"  -h, --help            show this help and exit\n"
"\n"
"On SIGINT, SIGTERM or SIGHUP the copy is cancelled, its partial output on\n"
"this host (staging files, directories it made) is removed and sbx exits\n"
"with 128+N at once, also when the backend does not stop the transfer.\n"
"\n"
"Exit status: 0 on success, 125 on failure, 128+N after signal N.\n");
}

static void usage_ls(FILE *out)
{
    fprintf(out,
"Usage: sbx ls [--json] ID [PATH]\n"
"\n"
"List directory PATH (a sandbox path; default /, the sandbox's top) of the\n"
"sandbox ID, sorted by name: one line per entry with its type (dir or\n"
"file), its size in bytes and its name. Names are bytes the sandbox chose:\n"
"a backslash is shown as \\\\, newline, carriage return and tab as \\n, \\r,\n"
"\\t, and every other control character and every byte that is not valid\n"
"UTF-8 as \\xHH, so a name is always one line and never drives the terminal.\n"
"\n"
"      --json   print a JSON array of objects {name, path, is_dir, size,\n"
"               mode} (mode: the permission bits, as a number); the output\n"
"               is always valid UTF-8: a name or path that is not has each\n"
"               invalid byte shown as U+FFFD and its exact bytes in an added\n"
"               name_base64 / path_base64 (RFC 4648 base64)\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 on success, 125 on failure.\n");
}

static void usage_rm(FILE *out)
{
    fprintf(out,
"Usage: sbx rm ID...\n"
"\n"
"Destroy each sandbox ID (everything running in it ends, and what it left on\n"
"the host is removed), forget it and print its id.\n"
"\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when every sandbox was removed; 1 when a recorded sandbox no\n"
"longer existed (it is forgotten, as `docker rm` reports a missing container\n"
"with status 1); 125 when an id is not recorded (\"no such sandbox: ID\") or\n"
"a sandbox could not be destroyed (it stays recorded).\n");
}

static void usage_gc(FILE *out)
{
    fprintf(out,
"Usage: sbx gc [--dry-run] [--json]\n"
"\n"
"Destroy, through libsbx's lifecycle record (sbx_gc()), every sandbox whose\n"
"lifetime has ended, every attached sandbox whose owning processes have all\n"
"ended without destroying it (a program killed by SIGKILL, say), and, on each\n"
"installed backend that can list what libsbx made, every sandbox with this\n"
"record's create token that no record knows. A sandbox without libsbx's\n"
"labels is never touched. Sandboxes made by `sbx create` are detached: gc\n"
"reaps them only once their lifetime has ended (and forgets them).\n"
"\n"
"Prints one line per sandbox: BACKEND ID REASON RESULT, where REASON is\n"
"expired, owner_gone or unrecorded and RESULT is reaped, would_reap (with\n"
"--dry-run) or failed: MESSAGE. A backend that cannot be listed is reported\n"
"on stderr.\n"
"\n"
"      --dry-run  list what would be destroyed; touch nothing\n"
"      --json     print a JSON array of objects {backend, id, create_token,\n"
"                 reason, result, error} (error: null or the message)\n"
"  -h, --help     show this help and exit\n"
"\n"
"Exit status: 0 when everything found was reaped (or listed, with\n"
"--dry-run); 1 when something could not be reaped; 125 when the record\n"
"cannot be read.\n");
}

static void usage_ps(FILE *out)
{
    fprintf(out,
"Usage: sbx ps [--json]\n"
"\n"
"List the sandboxes made by `sbx create` and not removed, oldest first: id,\n"
"backend, creation time (ISO 8601, UTC) and whether the sandbox still\n"
"exists (yes, no, or unknown when that cannot be told).\n"
"\n"
"      --json   print a JSON array of objects {id, backend, created, alive}\n"
"               (alive: true, false or null)\n"
"  -h, --help   show this help and exit\n");
}

/* Reports bad usage of command @cmd ("" for sbx itself); returns 125. */
static int usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    char buf[4096];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sbx: %s\n", buf);
    fprintf(stderr, "sbx: see 'sbx %s%s--help'\n", cmd, *cmd ? " " : "");
    return EXIT_TOOL;
}

/* Reports an option getopt refused. */
static int bad_option(const char *cmd, char **argv, int opt)
{
    const char *arg = argv[optind - 1];

    if (opt == ':')
        return usage_error(cmd, "option \"%s\" needs a value", arg);
    if (optopt != 0 && strncmp(arg, "--", 2) != 0)
        return usage_error(cmd, "unknown option \"-%c\"", optopt);
    return usage_error(cmd, "unknown option \"%s\"", arg);
}

/* ---------------------------------------------------------- create sandbox */

/* Creates the sandbox; reports a failure and returns NULL. */
static sbx_sandbox *create_sandbox(const char *backend, const sbx_options *options)
{
    sbx_error *error = NULL;
    sbx_sandbox *sandbox = sbx_create(backend, options, &error);

    if (sandbox == NULL)
        msg_error(error);
    return sandbox;
}

/* ------------------------------------------------------------------- run */

enum {
    OPT_CPU = 256,
    OPT_MEMORY,
    OPT_GIT_REPO,
    OPT_GIT_REF,
    OPT_JSON,
    OPT_CWD,
    OPT_PRESET,
    OPT_NO_INTERNET,
    OPT_OPT,
    OPT_FILE
};

/*
 * Adds --opt KEY=VALUE to the JSON object *@obj (made on first use): VALUE
 * is parsed as JSON when it is valid JSON, else kept as a string. Returns
 * -1 to go on, else the exit status (after reporting).
 */
static int add_backend_option(const char *cmd, const char *arg, json_object **obj)
{
    const char *eq = strchr(arg, '=');
    json_object *value;

    if (eq == NULL || eq == arg)
        return usage_error(cmd, "invalid --opt value \"%s\": expected KEY=VALUE", arg);
    if (*obj == NULL && (*obj = json_object_new_object()) == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    /* json-c parses "null" to NULL, which stores a JSON null: right. */
    value = json_tokener_parse(eq + 1);
    if (value == NULL && strcmp(eq + 1, "null") != 0)
        value = json_object_new_string(eq + 1);
    char *key = strndup(arg, (size_t)(eq - arg));
    if (key == NULL) {
        json_object_put(value);
        msg("out of memory");
        return EXIT_TOOL;
    }
    json_object_object_add(*obj, key, value);
    free(key);
    return -1;
}

/*
 * Adds --file LOCAL:PATH to the manifest *@m (made on first use) as a host
 * file entry. Returns -1 to go on, else the exit status.
 */
static int add_file_option(const char *cmd, const char *arg, sbx_manifest **m)
{
    const char *colon = strrchr(arg, ':');
    sbx_error *error = NULL;
    char *local;

    if (colon == NULL || colon == arg || colon[1] == '\0')
        return usage_error(cmd, "invalid --file value \"%s\": expected LOCAL:SANDBOX_PATH",
                           arg);
    if (*m == NULL && (*m = sbx_manifest_new()) == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    local = strndup(arg, (size_t)(colon - arg));
    if (local == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    if (access(local, R_OK) != 0) {
        msg("--file %s: cannot read %s: %s", arg, local, strerror(errno));
        free(local);
        return EXIT_TOOL;
    }
    if (sbx_manifest_add_local_file(*m, colon + 1, local, &error) < 0) {
        free(local);
        msg_error(error);
        return EXIT_TOOL;
    }
    free(local);
    return -1;
}

/*
 * The parse status after an sbx_options setter returned @rc: -1 (go on)
 * when it succeeded, else EXIT_TOOL after reporting @error.
 */
static int setter_status(int rc, sbx_error *error)
{
    if (rc == 0)
        return -1;
    msg_error(error);
    return EXIT_TOOL;
}

/*
 * Parses the sandbox options of run and create (-b -e -w -t --cpu --memory
 * --git-repo --git-ref -h) from @argv into @options and *@backend; getopt
 * stops at the first operand (optind points at it). Returns -1 to go on,
 * else the exit status to leave with (0 after --help, 125 after an error,
 * which it reported).
 */
static int parse_sandbox_options(const char *cmd, void (*help)(FILE *), int argc,
                                 char **argv, sbx_options *options, const char **backend)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "env", required_argument, NULL, 'e' },
        { "workdir", required_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 't' },
        { "cpu", required_argument, NULL, OPT_CPU },
        { "memory", required_argument, NULL, OPT_MEMORY },
        { "git-repo", required_argument, NULL, OPT_GIT_REPO },
        { "git-ref", required_argument, NULL, OPT_GIT_REF },
        { "image", required_argument, NULL, 'i' },
        { "preset", required_argument, NULL, OPT_PRESET },
        { "no-internet", no_argument, NULL, OPT_NO_INTERNET },
        { "opt", required_argument, NULL, OPT_OPT },
        { "file", required_argument, NULL, OPT_FILE },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *git_repo = NULL, *git_ref = NULL;
    json_object *backend_opts = NULL;
    sbx_manifest *files = NULL;
    sbx_error *error = NULL;
    int opt, rc, status = -1;

    opterr = 0;
    while (status < 0 && (opt = getopt_long(argc, argv, "+:b:e:w:t:i:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'i':
            rc = sbx_options_set_image(options, optarg, &error);
            status = setter_status(rc, error);
            break;
        case OPT_PRESET:
            rc = sbx_options_set_preset(options, optarg, &error);
            status = setter_status(rc, error);
            break;
        case OPT_NO_INTERNET:
            sbx_options_set_allow_internet(options, 0, NULL);
            break;
        case OPT_OPT:
            status = add_backend_option(cmd, optarg, &backend_opts);
            break;
        case OPT_FILE:
            status = add_file_option(cmd, optarg, &files);
            break;
        case 'b':
            *backend = optarg;
            break;
        case 'e': {
            const char *eq = strchr(optarg, '=');
            char *key;

            if (eq == NULL || eq == optarg) {
                status = usage_error(cmd, "invalid -e value \"%s\": expected KEY=VALUE",
                                     optarg);
                break;
            }
            key = strndup(optarg, (size_t)(eq - optarg));
            if (key == NULL) {
                msg("out of memory");
                status = EXIT_TOOL;
                break;
            }
            rc = sbx_options_set_env(options, key, eq + 1, &error);
            free(key);
            status = setter_status(rc, error);
            break;
        }
        case 'w':
            rc = sbx_options_set_workdir(options, optarg, &error);
            status = setter_status(rc, error);
            break;
        case 't': {
            double secs;

            if (parse_positive_double(optarg, &secs) < 0) {
                status = usage_error(cmd, "invalid -t value \"%s\"", optarg);
                break;
            }
            rc = sbx_options_set_timeout_secs(options, secs, &error);
            status = setter_status(rc, error);
            break;
        }
        case OPT_CPU: {
            double cpu;

            if (parse_positive_double(optarg, &cpu) < 0) {
                status = usage_error(cmd, "invalid --cpu value \"%s\"", optarg);
                break;
            }
            rc = sbx_options_set_cpu(options, cpu, &error);
            status = setter_status(rc, error);
            break;
        }
        case OPT_MEMORY: {
            int64_t mib;

            if (parse_positive_int64(optarg, &mib) < 0) {
                status = usage_error(cmd, "invalid --memory value \"%s\"", optarg);
                break;
            }
            rc = sbx_options_set_memory_mb(options, mib, &error);
            status = setter_status(rc, error);
            break;
        }
        case OPT_GIT_REPO:
            git_repo = optarg;
            break;
        case OPT_GIT_REF:
            git_ref = optarg;
            break;
        case 'h':
            help(stdout);
            status = 0;
            break;
        default:
            status = bad_option(cmd, argv, opt);
            break;
        }
    }
    if (status < 0 && backend_opts != NULL &&
        sbx_options_set_backend_options(options, json_object_to_json_string(backend_opts),
                                        &error) < 0) {
        msg_error(error);
        status = EXIT_TOOL;
    }
    if (status < 0 && files != NULL && sbx_options_set_workspace(options, files, &error) < 0) {
        msg_error(error);
        status = EXIT_TOOL;
    }
    json_object_put(backend_opts);
    sbx_manifest_free(files); /* the options keep their own reference */
    if (status >= 0)
        return status;
    if (git_ref != NULL && git_repo == NULL)
        return usage_error(cmd, "--git-ref needs --git-repo");
    if (git_repo != NULL &&
        sbx_options_set_git_repo(options, git_repo, git_ref, &error) < 0) {
        msg_error(error);
        return EXIT_TOOL;
    }
    return -1;
}

/** How much longer than its command's timeout the sandbox of `sbx run`
 *  lives. */
#define RUN_LIFETIME_GRACE_SECS 10.0

static int cmd_run(int argc, char **argv)
{
    const char *backend = default_backend();
    sbx_options *options;
    exec_job job;
    int status;

    options = sbx_options_new();
    if (options == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    status = parse_sandbox_options("run", usage_run, argc, argv, options, &backend);
    if (status >= 0)
        goto out;
    status = EXIT_TOOL;
    if (optind >= argc) {
        status = usage_error("run", "no command given");
        goto out;
    }

    memset(&job, 0, sizeof job);
    job.argv = (const char *const *)(argv + optind);
    /* -t is the command's timeout; the sandbox lives a little longer, so
     * that the timeout (TERM, then KILL) is what ends the command, not the
     * end of the sandbox's lifetime. */
    job.timeout = sbx_options_get_timeout_secs(options);
    if (sbx_options_set_timeout_secs(options, job.timeout + RUN_LIFETIME_GRACE_SECS, NULL) < 0)
        job.timeout = 0;
    job.sandbox = create_sandbox(backend, options);
    if (job.sandbox == NULL)
        goto out;
    sbx_options_free(options);
    return run_job_and_destroy(&job);

out:
    sbx_options_free(options);
    return status;
}

/* ------------------------------------------------------------- exec-code */

/* Reads all of standard input into a NUL-terminated string. */
static char *read_stdin(void)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);

    if (buf == NULL)
        return NULL;
    for (;;) {
        ssize_t n;

        if (cap - len < 2) {
            char *bigger = realloc(buf, cap * 2);

            if (bigger == NULL) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        n = read(STDIN_FILENO, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            msg("cannot read the code from standard input: %s", strerror(errno));
            free(buf);
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (strlen(buf) != len) {
        msg("the code read from standard input contains a NUL byte");
        free(buf);
        return NULL;
    }
    return buf;
}

static int cmd_exec_code(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "language", required_argument, NULL, 'l' },
        { "timeout", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *backend = default_backend();
    const char *language = NULL;
    char *code_buf = NULL;
    sbx_options *options;
    sbx_error *error = NULL;
    exec_job job;
    int opt, status = EXIT_TOOL;

    options = sbx_options_new();
    if (options == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:b:l:t:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            backend = optarg;
            break;
        case 'l':
            language = optarg;
            break;
        case 't': {
            double secs;

            if (parse_positive_double(optarg, &secs) < 0) {
                status = usage_error("exec-code", "invalid -t value \"%s\"",
                                     optarg);
                goto out;
            }
            if (sbx_options_set_timeout_secs(options, secs, &error) < 0) {
                msg_error(error);
                goto out;
            }
            break;
        }
        case 'h':
            usage_exec_code(stdout);
            status = 0;
            goto out;
        default:
            status = bad_option("exec-code", argv, opt);
            goto out;
        }
    }
    if (optind >= argc) {
        status = usage_error("exec-code", "no code given");
        goto out;
    }
    if (optind + 1 < argc) {
        status = usage_error("exec-code",
                             "unexpected argument \"%s\" after the code "
                             "(pass the code as one argument)", argv[optind + 1]);
        goto out;
    }

    memset(&job, 0, sizeof job);
    if (strcmp(argv[optind], "-") == 0) {
        code_buf = read_stdin();
        if (code_buf == NULL)
            goto out;
        job.code = code_buf;
    } else {
        job.code = argv[optind];
    }
    job.language = language;
    job.sandbox = create_sandbox(backend, options);
    if (job.sandbox == NULL)
        goto out;
    status = run_job_and_destroy(&job);

out:
    free(code_buf);
    sbx_options_free(options);
    return status;
}

/* -------------------------------------------------------------- backends */

/* Capability names of @caps, space-separated, in a new string. */
static char *caps_to_string(uint64_t caps)
{
    size_t cap = 64 * 24 + 1, len = 0;
    char *out;
    unsigned bit;

    out = malloc(cap);
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    for (bit = 0; bit < 64; bit++) {
        uint64_t b = UINT64_C(1) << bit;
        const char *name;
        int n;

        if (!(caps & b))
            continue;
        name = sbx_capability_name(b);
        if (name != NULL)
            n = snprintf(out + len, cap - len, "%s%s", len ? " " : "", name);
        else
            n = snprintf(out + len, cap - len, "%sbit%u", len ? " " : "", bit);
        if (n > 0)
            len += (size_t)n;
    }
    return out;
}

static json_object *caps_to_json(uint64_t caps)
{
    json_object *array = json_object_new_array();
    unsigned bit;

    for (bit = 0; bit < 64; bit++) {
        uint64_t b = UINT64_C(1) << bit;
        const char *name;
        char other[16];

        if (!(caps & b))
            continue;
        name = sbx_capability_name(b);
        if (name == NULL) {
            snprintf(other, sizeof other, "bit%u", bit);
            name = other;
        }
        json_object_array_add(array, json_object_new_string(name));
    }
    return array;
}

typedef struct backend_row {
    const sbx_backend_info *info;
    int usable;
    int probed;          /* probe succeeded */
    uint64_t probed_caps;
    char *probe_error;   /* message when the client or the probe failed */
} backend_row;

static void probe_backend(backend_row *row)
{
    sbx_error *error = NULL;
    sbx_client *client;

    client = sbx_client_new(sbx_backend_info_get0_name(row->info), &error);
    if (client != NULL && sbx_client_probe(client, &row->probed_caps, &error) == 0)
        row->probed = 1;
    if (!row->probed) {
        row->probe_error = error != NULL ? sbx_error_to_string(error)
                                         : strdup("probe failed");
        sbx_error_free(error);
    }
    sbx_client_free(client);
}

/* "outofprocess" / "inprocess", or why SBX_PLUGIN_MODE is not usable. */
static const char *plugin_mode_text(void)
{
    static char text[512];
    sbx_error *error = NULL;
    int mode = sbx_plugin_mode_resolve(SBX_PLUGIN_MODE_DEFAULT, &error);

    if (mode < 0) {
        snprintf(text, sizeof text, "unusable: %s", sbx_error_get0_message(error));
        sbx_error_free(error);
        return text;
    }
    return sbx_plugin_mode_name((sbx_plugin_mode)mode);
}

static void print_backends_json(backend_row *rows, size_t count)
{
    json_object *array = json_object_new_array();
    size_t i;

    for (i = 0; i < count; i++) {
        const sbx_backend_info *info = rows[i].info;
        const char *problem = sbx_backend_info_get0_problem(info);
        unsigned major = sbx_backend_info_get_abi_major(info);
        unsigned minor = sbx_backend_info_get_abi_minor(info);
        json_object *o = json_object_new_object();
        char abi[32];

        json_object_object_add(o, "name",
                               json_object_new_string(sbx_backend_info_get0_name(info)));
        json_object_object_add(o, "path",
                               json_object_new_string(sbx_backend_info_get0_path(info)));
        json_object_object_add(o, "version",
                               json_object_new_string(sbx_backend_info_get0_version(info)));
        json_object_object_add(o, "description",
                               json_object_new_string(sbx_backend_info_get0_description(info)));
        if (major == 0 && minor == 0) {
            json_object_object_add(o, "abi", NULL);
        } else {
            snprintf(abi, sizeof abi, "%u.%u", major, minor);
            json_object_object_add(o, "abi", json_object_new_string(abi));
        }
        json_object_object_add(o, "usable", json_object_new_boolean(rows[i].usable));
        json_object_object_add(o, "problem",
                               problem != NULL ? json_object_new_string(problem) : NULL);
        json_object_object_add(o, "caps", caps_to_json(sbx_backend_info_get_caps(info)));
        json_object_object_add(o, "probed_caps",
                               rows[i].probed ? caps_to_json(rows[i].probed_caps) : NULL);
        json_object_object_add(o, "mode", json_object_new_string(plugin_mode_text()));
        json_object_object_add(o, "probe_error",
                               rows[i].probe_error != NULL
                                   ? json_object_new_string(rows[i].probe_error)
                                   : NULL);
        json_object_array_add(array, o);
    }
    print_json(array);
    json_object_put(array);
}

static void print_backends_table(backend_row *rows, size_t count)
{
    int name_w = 4, version_w = 7;
    size_t i;

    if (count == 0) {
        printf("no backend plugin found (searched SBX_PLUGIN_PATH and %s)\n",
               sbx_plugin_dir());
        return;
    }
    for (i = 0; i < count; i++) {
        int n = (int)strlen(sbx_backend_info_get0_name(rows[i].info));
        int v = (int)strlen(sbx_backend_info_get0_version(rows[i].info));

        if (n > name_w)
            name_w = n;
        if (v > version_w)
            version_w = v;
    }
    printf("%-*s  %-*s  %s\n", name_w, "NAME", version_w, "VERSION", "STATUS");
    for (i = 0; i < count; i++) {
        const sbx_backend_info *info = rows[i].info;
        const char *version = sbx_backend_info_get0_version(info);
        const char *problem = sbx_backend_info_get0_problem(info);
        const char *description = sbx_backend_info_get0_description(info);
        char *declared;

        printf("%-*s  %-*s  %s\n", name_w, sbx_backend_info_get0_name(info),
               version_w, *version ? version : "-",
               problem != NULL ? problem : "ok");
        if (*description)
            printf("    description: %s\n", description);
        printf("    path:        %s\n", sbx_backend_info_get0_path(info));
        if (!rows[i].usable)
            continue;
        printf("    mode:        %s\n", plugin_mode_text());
        declared = caps_to_string(sbx_backend_info_get_caps(info));
        printf("    declared:    %s\n", declared != NULL ? declared : "");
        free(declared);
        if (rows[i].probed) {
            char *probed = caps_to_string(rows[i].probed_caps);

            printf("    probed:      %s\n", probed != NULL ? probed : "");
            free(probed);
        } else {
            printf("    probed:      failed: %s\n",
                   rows[i].probe_error != NULL ? rows[i].probe_error : "");
        }
    }
}

static int cmd_backends(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, OPT_JSON },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    sbx_backend_info **list = NULL;
    backend_row *rows;
    sbx_error *error = NULL;
    size_t count = 0, i;
    int opt, json = 0;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            usage_backends(stdout);
            return 0;
        default:
            return bad_option("backends", argv, opt);
        }
    }
    if (optind < argc)
        return usage_error("backends", "unexpected argument \"%s\"", argv[optind]);

    if (sbx_backends_list(&list, &count, &error) < 0) {
        msg_error(error);
        return EXIT_TOOL;
    }
    rows = calloc(count ? count : 1, sizeof *rows);
    if (rows == NULL) {
        sbx_backend_info_list_free(list, count);
        msg("out of memory");
        return EXIT_TOOL;
    }
    for (i = 0; i < count; i++) {
        rows[i].info = list[i];
        rows[i].usable = sbx_backend_info_get0_problem(list[i]) == NULL;
        if (rows[i].usable)
            probe_backend(&rows[i]);
    }
    if (json)
        print_backends_json(rows, count);
    else
        print_backends_table(rows, count);
    for (i = 0; i < count; i++)
        free(rows[i].probe_error);
    free(rows);
    sbx_backend_info_list_free(list, count);
    if (fflush(stdout) != 0) {
        msg("cannot write the list: %s", strerror(errno));
        return EXIT_TOOL;
    }
    return 0;
}

/* ---------------------------------------------------------- state store */

/*
 * Sandboxes made by `sbx create` outlive sbx: each id maps to its session
 * state (sbx_sandbox_session_state()) in the user's state directory,
 *
 *   ${SBX_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/sbx}/sandboxes/ID.json
 *
 * as {"created":"2025-01-02T03:04:05Z","state":{...}}. The directories sbx
 * makes are 0700 and the files 0600; a file is written to a temporary name
 * in the same directory, synced and renamed into place, so a reader sees a
 * whole file or none.
 *
 * A record decides what `sbx rm` destroys, so the state is used only when
 * no other user can have planted it (state_dir_open, check_state_file):
 * the sbx directory, sandboxes/ and each record are the effective user's,
 * a real directory or regular file, not writable by group or others; every
 * existing parent above is the user's or root's and not writable by group
 * or others unless sticky. Anything else is a configuration error naming
 * the path, its owner and its mode, and that state is not used at all.
 */

/* Largest state file read (a session state is a few hundred bytes). */
#define STATE_FILE_MAX (1 << 20)

/* 1 when @id can name a state file (and a `cp` operand): [A-Za-z0-9_.-],
 * starting with a letter or digit, at most 200 bytes. */
static int id_valid(const char *id)
{
    size_t i;

    if (!isalnum((unsigned char)id[0]))
        return 0;
    for (i = 0; id[i] != '\0'; i++)
        if (i >= 200 || !(isalnum((unsigned char)id[i]) || strchr("_.-", id[i])))
            return 0;
    return 1;
}

/* The directory sbx owns (new string): SBX_STATE_DIR, else
 * $XDG_STATE_HOME/sbx, else $HOME/.local/state/sbx; NULL when no base
 * directory can be found (reported). */
static char *state_base(void)
{
    const char *base = getenv("SBX_STATE_DIR"), *home;
    char *dir = NULL;

    if (base != NULL && *base != '\0') {
        dir = strdup(base);
    } else {
        base = getenv("XDG_STATE_HOME");
        if (base != NULL && base[0] == '/') {
            if (asprintf(&dir, "%s/sbx", base) < 0)
                dir = NULL;
        } else {
            home = getenv("HOME");
            if (home == NULL || *home == '\0') {
                struct passwd *pw = getpwuid(getuid());

                home = pw != NULL ? pw->pw_dir : NULL;
            }
            if (home == NULL || *home == '\0') {
                msg("cannot find the state directory: set SBX_STATE_DIR, "
                    "XDG_STATE_HOME or HOME");
                return NULL;
            }
            if (asprintf(&dir, "%s/.local/state/sbx", home) < 0)
                dir = NULL;
        }
    }
    if (dir == NULL)
        msg("out of memory");
    return dir;
}

/* "uid N (NAME)" of @uid into @buf. */
static const char *uid_text(uid_t uid, char *buf, size_t size)
{
    struct passwd *pw = getpwuid(uid);

    if (pw != NULL)
        snprintf(buf, size, "uid %u (%s)", (unsigned)uid, pw->pw_name);
    else
        snprintf(buf, size, "uid %u", (unsigned)uid);
    return buf;
}

/*
 * Reports that @what @path (the state directory or file; @parent, when not
 * NULL, the ancestor of it that is wrong) is refused because of @st, and
 * what it must be instead. @need says what the rule is.
 */
static void refuse_state_path(const char *what, const char *path, const char *parent,
                              const struct stat *st, const char *need)
{
    char owner[160], me[160];

    uid_text(st->st_uid, owner, sizeof owner);
    uid_text(geteuid(), me, sizeof me);
    if (parent != NULL)
        msg("refusing the %s %s: its parent %s is owned by %s and has mode %04o; "
            "it must be owned by %s%s and not writable by group or others "
            "unless sticky [code=configuration]", what, path, parent, owner,
            (unsigned)(st->st_mode & 07777), me, geteuid() == 0 ? "" : " or uid 0 (root)");
    else
        msg("refusing the %s %s: it is owned by %s and has mode %04o; it must be %s owned "
            "by %s and not writable by group or others [code=configuration]", what, path,
            owner, (unsigned)(st->st_mode & 07777), need, me);
}

/*
 * Checks (and with @create makes, 0700) one directory sbx owns: a real
 * directory (not a symlink), owned by the effective user, not writable by
 * group or others; one that is merely readable by others is made 0700.
 * Returns 1, 0 when it does not exist and !@create, or -1 (reported).
 */
static int own_dir(const char *path, int create)
{
    struct stat st;

    if (lstat(path, &st) < 0) {
        if (errno != ENOENT) {
            msg("cannot use the state directory %s: %s", path, strerror(errno));
            return -1;
        }
        if (!create)
            return 0;
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
            msg("cannot create the state directory %s: %s", path, strerror(errno));
            return -1;
        }
        if (lstat(path, &st) < 0) {
            msg("cannot use the state directory %s: %s", path, strerror(errno));
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
        refuse_state_path("state directory", path, NULL, &st, "a directory");
        return -1;
    }
    if ((st.st_mode & 07777) != 0700 && chmod(path, 0700) < 0) {
        msg("cannot make the state directory %s private: %s", path, strerror(errno));
        return -1;
    }
    return 1;
}

/*
 * The directory holding the state files (new string in *@dir), checked:
 * every existing ancestor of the directory sbx owns is owned by the user
 * or root and not writable by group or others unless sticky (as /tmp);
 * the directory sbx owns and its sandboxes/ are the user's own, private
 * (see own_dir). With @create, what is missing is made 0700. Returns 1;
 * 0 when the directory does not exist and !@create (nothing recorded);
 * -1 (reported, a configuration error naming the path, its owner and
 * mode).
 */
static int state_dir_open(int create, char **dir)
{
    char *base = state_base(), *p;
    struct stat st;
    int r = -1;

    *dir = NULL;
    if (base == NULL)
        return -1;
    /* The ancestors: none may let another user swap what is below. */
    for (p = base + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (stat(base, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) {
                msg("cannot use the state directory: %s is not a directory", base);
                goto out;
            }
            if ((st.st_uid != 0 && st.st_uid != geteuid()) ||
                ((st.st_mode & 022) != 0 && !(st.st_mode & S_ISVTX))) {
                char *full = NULL;

                *p = '/';
                if (asprintf(&full, "%s/sandboxes", base) < 0)
                    full = NULL;
                *p = '\0';
                refuse_state_path("state directory", full ? full : "", base, &st, NULL);
                free(full);
                goto out;
            }
        } else if (errno != ENOENT) {
            msg("cannot use the state directory %s: %s", base, strerror(errno));
            goto out;
        } else if (!create) {
            r = 0;
            goto out;
        } else if (mkdir(base, 0700) < 0 && errno != EEXIST) {
            msg("cannot create the state directory %s: %s", base, strerror(errno));
            goto out;
        }
        *p = '/';
    }
    r = own_dir(base, create);
    if (r <= 0)
        goto out;
    if (asprintf(dir, "%s/sandboxes", base) < 0) {
        *dir = NULL;
        msg("out of memory");
        r = -1;
        goto out;
    }
    r = own_dir(*dir, create);
    if (r <= 0) {
        free(*dir);
        *dir = NULL;
    }
out:
    free(base);
    return r;
}

/* Checks the state file open on @fd (@path, for messages): a regular
 * file of the effective user, not writable by group or others, at most
 * STATE_FILE_MAX bytes. Returns 0 or -1 (reported). */
static int check_state_file(int fd, const char *path, struct stat *st)
{
    if (fstat(fd, st) < 0) {
        msg("cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st->st_mode) || st->st_uid != geteuid() || (st->st_mode & 022) != 0) {
        refuse_state_path("state file", path, NULL, st, "a regular file");
        return -1;
    }
    if (st->st_size > STATE_FILE_MAX) {
        msg("%s is not a sandbox record (larger than %d bytes)", path, STATE_FILE_MAX);
        return -1;
    }
    return 0;
}

/* Syncs directory @dir (after a rename or unlink in it); errors ignored. */
static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Writes all of @len bytes of @data to @fd. Returns 0 or -1 (errno). */
static int write_fd_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The current time as ISO 8601 UTC ("2025-01-02T03:04:05Z"). */
static void iso8601_now(char out[32])
{
    time_t now = time(NULL);
    struct tm tm;

    gmtime_r(&now, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/*
 * Records the session state @state (JSON text) of sandbox @id, created at
 * @created: written atomically, never replacing the record of another
 * sandbox with the same id. Returns 0 or -1 (reported).
 */
static int state_store(const char *id, const char *created, const char *state)
{
    char *dir = NULL, *path = NULL, *tmp = NULL;
    json_object *doc = NULL, *st;
    const char *text;
    int fd = -1, rc = -1;

    if (!id_valid(id)) {
        msg("cannot record sandbox id \"%s\" (not usable as a file name)", id);
        return -1;
    }
    st = json_tokener_parse(state);
    if (st == NULL) {
        msg("the session state of %s is not JSON", id);
        return -1;
    }
    doc = json_object_new_object();
    if (doc == NULL) {
        json_object_put(st);
        msg("out of memory");
        return -1;
    }
    json_object_object_add(doc, "created", json_object_new_string(created));
    json_object_object_add(doc, "state", st);
    text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
                                               JSON_C_TO_STRING_NOSLASHESCAPE);
    if (state_dir_open(1, &dir) < 0)
        goto out;
    if (asprintf(&path, "%s/%s.json", dir, id) < 0 ||
        asprintf(&tmp, "%s/.%s.json.XXXXXX", dir, id) < 0) {
        path = tmp = NULL;
        msg("out of memory");
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        msg("cannot write in the state directory %s: %s", dir, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto out;
    }
    if (fchmod(fd, 0600) < 0 || write_fd_all(fd, text, strlen(text)) < 0 ||
        write_fd_all(fd, "\n", 1) < 0 || fsync(fd) < 0) {
        msg("cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (close(fd) < 0) {
        fd = -1;
        msg("cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) < 0) {
        int e = errno;

        /* A file system without RENAME_NOREPLACE: link() does not
         * replace either. */
        if ((e == EINVAL || e == ENOSYS) && link(tmp, path) == 0) {
            unlink(tmp);
        } else {
            if (e == EINVAL || e == ENOSYS)
                e = errno;
            if (e == EEXIST)
                msg("a sandbox with id %s is already recorded in %s", id, dir);
            else
                msg("cannot record the sandbox in %s: %s", path, strerror(e));
            goto out;
        }
    }
    free(tmp);
    tmp = NULL;
    sync_dir(dir);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (tmp != NULL) {
        unlink(tmp);
        free(tmp);
    }
    json_object_put(doc);
    free(path);
    free(dir);
    return rc;
}

/* A recorded sandbox. */
typedef struct state_record {
    char *id;
    char *created;     /* ISO 8601 UTC */
    char *backend;
    char *state;       /* the session state, JSON text */
} state_record;

static void state_record_clear(state_record *r)
{
    free(r->id);
    free(r->created);
    free(r->backend);
    free(r->state);
    memset(r, 0, sizeof *r);
}

/*
 * Reads the record of @id. Returns 0; 1 when there is none (nothing
 * reported); -1 when it cannot be read or is malformed (reported, naming
 * the file).
 */
static int state_load(const char *id, state_record *rec)
{
    char *dir = NULL, *path = NULL, *buf = NULL;
    json_object *doc = NULL, *st, *created, *backend;
    struct stat sb;
    size_t len = 0;
    int fd = -1, rc = -1;

    memset(rec, 0, sizeof *rec);
    if (!id_valid(id))
        return 1;
    rc = state_dir_open(0, &dir);
    if (rc <= 0)
        return rc < 0 ? -1 : 1;
    rc = -1;
    if (asprintf(&path, "%s/%s.json", dir, id) < 0) {
        path = NULL;
        msg("out of memory");
        goto out;
    }
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            rc = 1;
            goto out;
        }
        msg("cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    if (check_state_file(fd, path, &sb) < 0)
        goto out;
    buf = malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        msg("out of memory");
        goto out;
    }
    while (len < (size_t)sb.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)sb.st_size - len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    doc = json_tokener_parse(buf);
    if (doc == NULL || !json_object_is_type(doc, json_type_object) ||
        !json_object_object_get_ex(doc, "state", &st) ||
        !json_object_is_type(st, json_type_object) ||
        !json_object_object_get_ex(doc, "created", &created) ||
        !json_object_is_type(created, json_type_string) ||
        !json_object_object_get_ex(st, "backend", &backend) ||
        !json_object_is_type(backend, json_type_string)) {
        msg("%s is malformed (remove it to forget sandbox %s)", path, id);
        goto out;
    }
    rec->id = strdup(id);
    rec->created = strdup(json_object_get_string(created));
    rec->backend = strdup(json_object_get_string(backend));
    rec->state = strdup(json_object_to_json_string_ext(st, JSON_C_TO_STRING_PLAIN |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
    if (!rec->id || !rec->created || !rec->backend || !rec->state) {
        state_record_clear(rec);
        msg("out of memory");
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    json_object_put(doc);
    free(buf);
    free(path);
    free(dir);
    return rc;
}

/* Removes the record of @id. Returns 0 or -1 (reported). */
static int state_forget(const char *id)
{
    char *dir = NULL, *path = NULL;
    int rc = state_dir_open(0, &dir);

    if (rc <= 0)
        return rc;
    rc = 0;
    if (asprintf(&path, "%s/%s.json", dir, id) < 0) {
        free(dir);
        msg("out of memory");
        return -1;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        msg("cannot forget sandbox %s: %s: %s", id, path, strerror(errno));
        rc = -1;
    } else {
        sync_dir(dir);
    }
    free(path);
    free(dir);
    return rc;
}

/*
 * Reattaches to the recorded sandbox @id. Returns it, or NULL after
 * reporting why: "no such sandbox: ID" when nothing is recorded, the
 * library's error otherwise (stored in *@gone_error instead of reported
 * when it is not_found and @gone_error is not NULL).
 */
static sbx_sandbox *open_sandbox(const char *id, sbx_error **gone_error)
{
    state_record rec;
    sbx_error *error = NULL;
    sbx_sandbox *sandbox;
    int r = state_load(id, &rec);

    if (r == 1)
        msg("no such sandbox: %s", id);
    if (r != 0)
        return NULL;
    sandbox = sbx_resume(rec.state, &error);
    state_record_clear(&rec);
    if (sandbox == NULL) {
        if (gone_error != NULL && error != NULL &&
            sbx_error_get_code(error) == SBX_ERROR_NOT_FOUND)
            *gone_error = error;
        else
            msg_error(error);
    }
    return sandbox;
}

/* ---------------------------------------------------------------- create */

static int cmd_create(int argc, char **argv)
{
    const char *backend = default_backend();
    sbx_options *options;
    sbx_sandbox *sandbox = NULL;
    sbx_error *error = NULL;
    char *state = NULL, *dir = NULL, created[32];
    call_args call = { 0 };
    op_outcome outcome;
    int status;

    options = sbx_options_new();
    if (options == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    status = parse_sandbox_options("create", usage_create, argc, argv, options, &backend);
    if (status >= 0)
        goto out;
    /* It outlives sbx: detached, bounded by its lifetime. */
    sbx_options_set_detached(options, 1, NULL);
    status = EXIT_TOOL;
    if (optind < argc) {
        status = usage_error("create", "unexpected argument \"%s\"", argv[optind]);
        goto out;
    }
    /* The record must be possible before a sandbox is made for it. */
    if (state_dir_open(1, &dir) < 0)
        goto out;
    iso8601_now(created);
    /* A stop signal cancels the creation; the library undoes what it made
     * (a sandbox half made or made meanwhile is destroyed). */
    call.a = backend;
    call.options = options;
    status = call_interruptibly(submit_create, &call, "the creation", SIGNAL_DRAIN_SECS, NULL,
                                NULL, &outcome);
    if (status != 0)
        goto out;
    status = EXIT_TOOL;
    sandbox = outcome.sandbox;
    outcome.sandbox = NULL;
    if (sandbox == NULL) {
        msg_error(outcome.error);
        outcome.error = NULL;
        op_outcome_clear(&outcome);
        goto out;
    }
    op_outcome_clear(&outcome);
    state = sbx_sandbox_session_state(sandbox, &error);
    if (state == NULL) {
        msg_error(error);
        msg("the sandbox cannot outlive sbx on backend %s; destroying it", backend);
        destroy_sandbox(sandbox);
        goto out;
    }
    if (state_store(sbx_sandbox_get0_id(sandbox), created, state) < 0) {
        destroy_sandbox(sandbox);
        goto out;
    }
    printf("%s\n", sbx_sandbox_get0_id(sandbox));
    status = 0;
out:
    free(dir);
    free(state);
    sbx_sandbox_free(sandbox);
    sbx_options_free(options);
    return status;
}

/* ------------------------------------------------------------------ exec */

static int cmd_exec(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "env", required_argument, NULL, 'e' },
        { "cwd", required_argument, NULL, OPT_CWD },
        { "timeout", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    sbx_exec_request request = SBX_EXEC_REQUEST_INIT;
    const char *cwd = NULL, *id;
    const char **env;
    size_t nenv = 0;
    double timeout = 0;
    output_sink sink;
    sbx_sandbox *sandbox;
    call_args call = { 0 };
    op_outcome outcome;
    int opt, status = EXIT_TOOL;

    env = calloc((size_t)argc + 1, sizeof *env);
    if (env == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:e:t:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'e': {
            const char *eq = strchr(optarg, '=');

            if (eq == NULL || eq == optarg) {
                status = usage_error("exec", "invalid -e value \"%s\": expected KEY=VALUE",
                                     optarg);
                goto out;
            }
            env[nenv++] = optarg;
            break;
        }
        case OPT_CWD:
            cwd = optarg;
            break;
        case 't':
            if (parse_positive_double(optarg, &timeout) < 0) {
                status = usage_error("exec", "invalid -t value \"%s\"", optarg);
                goto out;
            }
            break;
        case 'h':
            usage_exec(stdout);
            status = 0;
            goto out;
        default:
            status = bad_option("exec", argv, opt);
            goto out;
        }
    }
    if (optind >= argc) {
        status = usage_error("exec", "no sandbox id given");
        goto out;
    }
    id = argv[optind++];
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc) {
        status = usage_error("exec", "no command given");
        goto out;
    }

    sandbox = open_sandbox(id, NULL);
    if (sandbox == NULL)
        goto out;
    memset(&sink, 0, sizeof sink);
    request.argv = (const char *const *)(argv + optind);
    request.env = nenv > 0 ? env : NULL;
    request.cwd = cwd;
    request.timeout_secs = timeout;   /* 0: the sandbox's timeout_secs */
    request.on_output = on_output;
    request.user_data = &sink;
    request.flags = SBX_EXEC_NO_CAPTURE;
    call.sandbox = sandbox;
    call.request = &request;
    /* On a stop signal the command's processes end; the sandbox stays. */
    status = call_interruptibly(submit_exec, &call, "the command", CANCEL_GRACE_SECS, NULL, NULL, &outcome);
    if (status == 0) {
        status = EXIT_TOOL;
        if (outcome.result == NULL) {
            msg_error(outcome.error);
            outcome.error = NULL;
        } else {
            status = sbx_result_get_exit_code(outcome.result);
            if (sbx_result_is_timed_out(outcome.result))
                msg("the command timed out and was killed");
        }
        op_outcome_clear(&outcome);
    }
    sbx_sandbox_free(sandbox);
out:
    free(env);
    return status;
}

/* -------------------------------------------------------------------- cp */

/*
 * Splits a cp operand "ID:PATH" into its parts (new strings) and returns
 * 1; returns 0 for a local path. An operand is a sandbox's when a ':'
 * comes before any '/' and what precedes it is a possible id; a local name
 * with a colon is written "./NAME".
 */
static int split_remote(const char *arg, char **id, char **path)
{
    const char *colon = strchr(arg, ':');
    const char *slash = strchr(arg, '/');

    if (colon == NULL || colon == arg || (slash != NULL && slash < colon))
        return 0;
    *id = strndup(arg, (size_t)(colon - arg));
    if (*id == NULL || !id_valid(*id)) {
        free(*id);
        *id = NULL;
        return 0;
    }
    *path = strdup(colon + 1);
    return 1;
}

/* The last path component of @path (borrowed; "" for "/" or ""). */
static const char *base_name(const char *path)
{
    size_t len = strlen(path);
    const char *end, *start;

    while (len > 1 && path[len - 1] == '/')
        len--;
    end = path + len;
    start = end;
    while (start > path && start[-1] != '/')
        start--;
    return start;
}

/* @dir joined with the last component of @path, as a new string. */
static char *join_base(const char *dir, const char *path)
{
    const char *b = base_name(path);
    size_t blen = strcspn(b, "/");
    size_t dlen = strlen(dir);
    char *out;

    while (dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    if (asprintf(&out, "%.*s%s%.*s", (int)dlen, dir, dir[dlen - 1] == '/' ? "" : "/",
                 (int)blen, b) < 0)
        return NULL;
    return out;
}

/*
 * 1 when sandbox path @path is a directory (it can be listed), 0 when it is
 * not, 128+N when stop signal N came first (reported).
 */
static int sandbox_is_dir(sbx_sandbox *sandbox, const char *path)
{
    call_args call = { sandbox, path, NULL, NULL, NULL };
    op_outcome o;
    int status = call_interruptibly(submit_list, &call, "the copy", CANCEL_GRACE_SECS, NULL, NULL, &o);

    if (status != 0)
        return status == EXIT_TOOL ? 0 : status;
    status = o.list != NULL;
    op_outcome_clear(&o);
    return status;
}

/*
 * What a copy to this host may leave when sbx leaves a call that ignored
 * its cancellation: the library's staging entries (".NAME.sbx-XXXXXX" and
 * ".sbx-XXXXXX", beside the destination or inside an existing destination
 * directory) and the destination's parents that did not exist.
 */
#define CP_WATCHED 2
#define CP_MISSING 32
typedef struct cp_leftovers {
    char *dir[CP_WATCHED];           /* directories watched */
    char **before[CP_WATCHED];       /* staging names there before, NULL-terminated */
    char *missing[CP_MISSING];       /* missing parents, deepest first */
    size_t nmissing;
} cp_leftovers;

/* 1 when @name looks like the library's staging entry. */
static int is_staging_name(const char *name)
{
    return name[0] == '.' && strstr(name, ".sbx-") != NULL;
}

/* The staging names in @dir (NULL-terminated array; NULL when none or
 * unreadable). */
static char **staging_names(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0;

    while (d != NULL && (de = readdir(d)) != NULL) {
        char **bigger;

        if (!is_staging_name(de->d_name))
            continue;
        bigger = realloc(names, (n + 2) * sizeof *names);
        if (bigger == NULL)
            break;
        names = bigger;
        names[n] = strdup(de->d_name);
        if (names[n] != NULL)
            n++;
        names[n] = NULL;
    }
    if (d != NULL)
        closedir(d);
    return names;
}

static void free_names(char **names)
{
    for (size_t i = 0; names != NULL && names[i] != NULL; i++)
        free(names[i]);
    free(names);
}

/* Notes what copying to local path @target may leave (see cp_leftovers). */
static void cp_leftovers_note(cp_leftovers *l, const char *target)
{
    char *copy = strdup(target), *slash;
    struct stat st;

    memset(l, 0, sizeof *l);
    if (copy == NULL)
        return;
    if (stat(copy, &st) == 0 && S_ISDIR(st.st_mode)) {
        l->dir[1] = strdup(copy);
        l->before[1] = staging_names(copy);
    }
    /* The parent, and the parents that are missing. */
    for (;;) {
        size_t len = strlen(copy);

        while (len > 1 && copy[len - 1] == '/')
            copy[--len] = '\0';
        slash = strrchr(copy, '/');
        if (slash == NULL) {
            free(copy);
            copy = strdup(".");
        } else if (slash == copy) {
            slash[1] = '\0';
        } else {
            *slash = '\0';
        }
        if (copy == NULL || stat(copy, &st) == 0 || errno != ENOENT ||
            l->nmissing == CP_MISSING || strcmp(copy, "/") == 0 || strcmp(copy, ".") == 0)
            break;
        l->missing[l->nmissing++] = strdup(copy);
    }
    if (copy != NULL && l->nmissing == 0) {
        l->dir[0] = copy;
        l->before[0] = staging_names(copy);
    } else {
        free(copy);
    }
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Removes what the copy left (cp_leftovers) and frees @arg's contents. */
static void cp_leftovers_remove(void *arg)
{
    cp_leftovers *l = arg;

    for (size_t i = 0; i < CP_WATCHED; i++) {
        char **now = l->dir[i] != NULL ? staging_names(l->dir[i]) : NULL;

        for (size_t k = 0; now != NULL && now[k] != NULL; k++) {
            int old = 0;
            char *path;

            for (size_t j = 0; l->before[i] != NULL && l->before[i][j] != NULL && !old; j++)
                old = strcmp(now[k], l->before[i][j]) == 0;
            if (old || asprintf(&path, "%s/%s", l->dir[i], now[k]) < 0)
                continue;
            nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
            free(path);
        }
        free_names(now);
    }
    /* The parents the copy made, when nothing else is in them. */
    for (size_t i = 0; i < l->nmissing; i++)
        if (l->missing[i] != NULL) {
            char **inside = staging_names(l->missing[i]);

            for (size_t k = 0; inside != NULL && inside[k] != NULL; k++) {
                char *path;

                if (asprintf(&path, "%s/%s", l->missing[i], inside[k]) >= 0) {
                    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
                    free(path);
                }
            }
            free_names(inside);
        }
    for (size_t i = 0; i < l->nmissing; i++)
        if (l->missing[i] != NULL)
            rmdir(l->missing[i]);
}

static void cp_leftovers_free(cp_leftovers *l)
{
    for (size_t i = 0; i < CP_WATCHED; i++) {
        free(l->dir[i]);
        free_names(l->before[i]);
    }
    for (size_t i = 0; i < l->nmissing; i++)
        free(l->missing[i]);
    memset(l, 0, sizeof *l);
}

/* Runs one transfer of cp interruptibly; 0, or the exit status (reported). */
static int cp_transfer(submit_fn submit, sbx_sandbox *sandbox, const char *sandbox_path,
                       const char *local_path, int to_host)
{
    call_args call = { sandbox, sandbox_path, local_path, NULL, NULL };
    cp_leftovers left;
    op_outcome o;
    int status;

    if (to_host)
        cp_leftovers_note(&left, local_path);
    status = call_interruptibly(submit, &call, "the copy", CANCEL_GRACE_SECS,
                                to_host ? cp_leftovers_remove : NULL,
                                to_host ? &left : NULL, &o);
    if (to_host)
        cp_leftovers_free(&left);
    if (status != 0)
        return status;
    if (o.error != NULL) {
        msg_error(o.error);
        o.error = NULL;
        status = EXIT_TOOL;
    }
    op_outcome_clear(&o);
    return status;
}

static int cmd_cp(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "recursive", no_argument, NULL, 'r' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    char *src_id = NULL, *src_path = NULL, *dst_id = NULL, *dst_path = NULL;
    char *target = NULL;
    const char *src, *dst;
    sbx_sandbox *sandbox = NULL;
    int opt, recursive = 0, src_remote, dst_remote, status = EXIT_TOOL, is_dir;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:rRh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'r':
        case 'R':
            recursive = 1;
            break;
        case 'h':
            usage_cp(stdout);
            return 0;
        default:
            return bad_option("cp", argv, opt);
        }
    }
    if (argc - optind != 2)
        return usage_error("cp", "expected SRC and DST, got %d argument%s", argc - optind,
                           argc - optind == 1 ? "" : "s");
    src = argv[optind];
    dst = argv[optind + 1];
    src_remote = split_remote(src, &src_id, &src_path);
    dst_remote = split_remote(dst, &dst_id, &dst_path);
    if (src_remote == dst_remote) {
        status = usage_error("cp", "exactly one of SRC and DST must be ID:PATH (got \"%s\" "
                             "and \"%s\")", src, dst);
        goto out;
    }
    if ((src_remote && (src_path == NULL || *src_path == '\0')) ||
        (dst_remote && (dst_path == NULL || *dst_path == '\0'))) {
        status = usage_error("cp", "empty sandbox path in \"%s\"", src_remote ? src : dst);
        goto out;
    }
    if (*(src_remote ? dst : src) == '\0') {
        status = usage_error("cp", "empty local path");
        goto out;
    }
    sandbox = open_sandbox(src_remote ? src_id : dst_id, NULL);
    if (sandbox == NULL)
        goto out;

    if (dst_remote) {
        struct stat st;

        if (stat(src, &st) < 0) {
            msg("cannot copy %s: %s", src, strerror(errno));
            goto out;
        }
        if (S_ISDIR(st.st_mode)) {
            if (!recursive) {
                msg("%s is a directory (use -r to copy a directory)", src);
                goto out;
            }
            status = cp_transfer(submit_upload_dir, sandbox, dst_path, src, 0);
        } else {
            size_t len = strlen(dst_path);

            is_dir = dst_path[len - 1] == '/' ? 1 : sandbox_is_dir(sandbox, dst_path);
            if (is_dir > 1) {
                status = is_dir;
                goto out;
            }
            target = is_dir ? join_base(dst_path, src) : strdup(dst_path);
            if (target == NULL) {
                msg("out of memory");
                goto out;
            }
            status = cp_transfer(submit_upload_file, sandbox, target, src, 0);
        }
    } else {
        struct stat st;

        is_dir = sandbox_is_dir(sandbox, src_path);
        if (is_dir > 1) {
            status = is_dir;
        } else if (is_dir) {
            if (!recursive) {
                msg("%s is a directory (use -r to copy a directory)", src);
                goto out;
            }
            status = cp_transfer(submit_download_dir, sandbox, src_path, dst, 1);
        } else {
            size_t len = strlen(dst);

            if (dst[len - 1] == '/' || (stat(dst, &st) == 0 && S_ISDIR(st.st_mode)))
                target = join_base(dst, src_path);
            else
                target = strdup(dst);
            if (target == NULL) {
                msg("out of memory");
                goto out;
            }
            status = cp_transfer(submit_download_file, sandbox, src_path, target, 1);
        }
    }
out:
    sbx_sandbox_free(sandbox);
    free(target);
    free(src_id);
    free(src_path);
    free(dst_id);
    free(dst_path);
    return status;
}

/* -------------------------------------------------------------------- ls */

static int cmd_ls(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, OPT_JSON },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    sbx_file_info **list = NULL;
    sbx_sandbox *sandbox;
    call_args call = { 0 };
    op_outcome outcome;
    const char *path;
    size_t count = 0, i;
    int opt, json = 0, status;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            usage_ls(stdout);
            return 0;
        default:
            return bad_option("ls", argv, opt);
        }
    }
    if (optind >= argc)
        return usage_error("ls", "no sandbox id given");
    if (argc - optind > 2)
        return usage_error("ls", "unexpected argument \"%s\"", argv[optind + 2]);
    path = argc - optind == 2 ? argv[optind + 1] : "/";
    sandbox = open_sandbox(argv[optind], NULL);
    if (sandbox == NULL)
        return EXIT_TOOL;
    call.sandbox = sandbox;
    call.a = path;
    status = call_interruptibly(submit_list, &call, "the listing", CANCEL_GRACE_SECS, NULL, NULL, &outcome);
    if (status == 0 && outcome.list == NULL) {
        msg_error(outcome.error);
        outcome.error = NULL;
        status = EXIT_TOOL;
    }
    if (status != 0) {
        op_outcome_clear(&outcome);
        sbx_sandbox_free(sandbox);
        return status;
    }
    list = outcome.list;
    count = outcome.count;
    outcome.list = NULL;
    op_outcome_clear(&outcome);
    if (json) {
        json_object *array = json_object_new_array();

        for (i = 0; i < count; i++) {
            json_object *o = json_object_new_object();

            json_add_name(o, "name", sbx_file_info_get0_name(list[i]));
            json_add_name(o, "path", sbx_file_info_get0_path(list[i]));
            json_object_object_add(o, "is_dir",
                                   json_object_new_boolean(sbx_file_info_is_dir(list[i])));
            json_object_object_add(o, "size",
                                   json_object_new_int64(sbx_file_info_get_size(list[i])));
            json_object_object_add(o, "mode",
                                   json_object_new_int64(sbx_file_info_get_mode(list[i])));
            json_object_array_add(array, o);
        }
        print_json(array);
        json_object_put(array);
    } else {
        for (i = 0; i < count; i++) {
            int64_t size = sbx_file_info_get_size(list[i]);
            char num[32];

            if (size < 0)
                snprintf(num, sizeof num, "-");
            else
                snprintf(num, sizeof num, "%" PRId64, size);
            printf("%-4s %12s  ", sbx_file_info_is_dir(list[i]) ? "dir" : "file", num);
            print_escaped(sbx_file_info_get0_name(list[i]));
            putchar('\n');
        }
    }
    sbx_file_info_list_free(list, count);
    sbx_sandbox_free(sandbox);
    if (fflush(stdout) != 0) {
        msg("cannot write the listing: %s", strerror(errno));
        return EXIT_TOOL;
    }
    return 0;
}

/* -------------------------------------------------------------------- rm */

/* Destroys and forgets sandbox @id. Returns 0, 1 when it was already gone
 * (forgotten), 125 when it could not be removed, 128+N when stop signal N
 * cancelled the destroy (it stays recorded). */
static int remove_one(const char *id)
{
    sbx_error *gone = NULL;
    sbx_sandbox *sandbox = open_sandbox(id, &gone);
    call_args call = { 0 };
    op_outcome outcome;
    int status;

    if (sandbox == NULL) {
        if (gone == NULL)
            return EXIT_TOOL;
        /* Nothing left to destroy (docker rm exits 1 alike). */
        msg_error(gone);
        if (state_forget(id) < 0)
            return EXIT_TOOL;
        msg("sandbox %s no longer exists; forgot it", id);
        return 1;
    }
    call.sandbox = sandbox;
    status = call_interruptibly(submit_destroy, &call, "the removal", CANCEL_GRACE_SECS, NULL, NULL, &outcome);
    if (status == 0 && outcome.error != NULL) {
        msg_error(outcome.error);
        outcome.error = NULL;
        status = EXIT_TOOL;
    }
    op_outcome_clear(&outcome);
    if (status != 0) {
        msg("sandbox %s may still exist; it stays recorded", id);
        sbx_sandbox_free(sandbox);
        return status;
    }
    sbx_sandbox_free(sandbox);
    if (state_forget(id) < 0)
        return EXIT_TOOL;
    printf("%s\n", id);
    return 0;
}

static int cmd_rm(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int opt, status = 0;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            usage_rm(stdout);
            return 0;
        default:
            return bad_option("rm", argv, opt);
        }
    }
    if (optind >= argc)
        return usage_error("rm", "no sandbox id given");
    for (; optind < argc && g_signal == 0; optind++) {
        int r = remove_one(argv[optind]);

        if (r > status)
            status = r;
    }
    return status;
}

/* -------------------------------------------------------------------- ps */

typedef struct ps_row {
    state_record rec;
    int alive;         /* 1, 0, or -1 when it could not be told */
} ps_row;

static int ps_row_cmp(const void *a, const void *b)
{
    const ps_row *x = a, *y = b;
    int c = strcmp(x->rec.created, y->rec.created);

    return c != 0 ? c : strcmp(x->rec.id, y->rec.id);
}

/* Whether the recorded sandbox still exists: 1, 0, or -1 (reported). */
static int record_alive(const state_record *rec)
{
    sbx_error *error = NULL;
    sbx_sandbox *sandbox = sbx_resume(rec->state, &error);
    int alive;

    if (sandbox == NULL) {
        if (error != NULL && sbx_error_get_code(error) == SBX_ERROR_NOT_FOUND) {
            sbx_error_free(error);
            return 0;
        }
        msg_error(error);
        return -1;
    }
    alive = sbx_sandbox_is_alive(sandbox, &error);
    if (alive < 0)
        msg_error(error);
    sbx_sandbox_free(sandbox);
    return alive;
}

static int cmd_ps(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, OPT_JSON },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    ps_row *rows = NULL;
    size_t n = 0, cap = 0, i;
    struct dirent *de;
    char *dir;
    DIR *d;
    int opt, json = 0, status = 0, r;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            usage_ps(stdout);
            return 0;
        default:
            return bad_option("ps", argv, opt);
        }
    }
    if (optind < argc)
        return usage_error("ps", "unexpected argument \"%s\"", argv[optind]);

    r = state_dir_open(0, &dir);
    if (r < 0)
        return EXIT_TOOL;
    d = r == 0 ? NULL : opendir(dir);
    if (d == NULL && r > 0) {
        msg("cannot read the state directory %s: %s", dir, strerror(errno));
        free(dir);
        return EXIT_TOOL;
    }
    while (d != NULL && g_signal == 0 && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        char *id;

        if (len <= 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        id = strndup(de->d_name, len - 5);
        if (id == NULL) {
            msg("out of memory");
            status = EXIT_TOOL;
            break;
        }
        if (!id_valid(id)) {
            free(id);
            continue;
        }
        if (n == cap) {
            ps_row *bigger = realloc(rows, (cap ? cap * 2 : 16) * sizeof *rows);

            if (bigger == NULL) {
                free(id);
                msg("out of memory");
                status = EXIT_TOOL;
                break;
            }
            rows = bigger;
            cap = cap ? cap * 2 : 16;
        }
        r = state_load(id, &rows[n].rec);
        free(id);
        if (r != 0)
            continue;   /* gone meanwhile, or malformed (reported) */
        rows[n].alive = record_alive(&rows[n].rec);
        n++;
    }
    if (d != NULL)
        closedir(d);
    free(dir);
    if (n > 1)
        qsort(rows, n, sizeof *rows, ps_row_cmp);

    if (json) {
        json_object *array = json_object_new_array();

        for (i = 0; i < n; i++) {
            json_object *o = json_object_new_object();

            json_object_object_add(o, "id", json_object_new_string(rows[i].rec.id));
            json_object_object_add(o, "backend", json_object_new_string(rows[i].rec.backend));
            json_object_object_add(o, "created", json_object_new_string(rows[i].rec.created));
            json_object_object_add(o, "alive", rows[i].alive < 0 ? NULL
                                   : json_object_new_boolean(rows[i].alive));
            json_object_array_add(array, o);
        }
        print_json(array);
        json_object_put(array);
    } else {
        int id_w = 2, backend_w = 7;

        /* The backend and the time come from the record: shown escaped. */
        for (i = 0; i < n; i++) {
            char *b = escape_name(rows[i].rec.backend), *c = escape_name(rows[i].rec.created);

            if (b != NULL && c != NULL) {
                free(rows[i].rec.backend);
                free(rows[i].rec.created);
                rows[i].rec.backend = b;
                rows[i].rec.created = c;
            } else {
                free(b);
                free(c);
            }
            if ((int)strlen(rows[i].rec.id) > id_w)
                id_w = (int)strlen(rows[i].rec.id);
            if ((int)strlen(rows[i].rec.backend) > backend_w)
                backend_w = (int)strlen(rows[i].rec.backend);
        }
        printf("%-*s  %-*s  %-20s  %s\n", id_w, "ID", backend_w, "BACKEND", "CREATED",
               "ALIVE");
        for (i = 0; i < n; i++)
            printf("%-*s  %-*s  %-20s  %s\n", id_w, rows[i].rec.id, backend_w,
                   rows[i].rec.backend, rows[i].rec.created,
                   rows[i].alive < 0 ? "unknown" : rows[i].alive ? "yes" : "no");
    }
    for (i = 0; i < n; i++)
        state_record_clear(&rows[i].rec);
    free(rows);
    if (fflush(stdout) != 0) {
        msg("cannot write the list: %s", strerror(errno));
        return EXIT_TOOL;
    }
    return status;
}

/* -------------------------------------------------------------------- gc */

static const char *gc_reason_name(sbx_gc_reason reason)
{
    switch (reason) {
    case SBX_GC_EXPIRED: return "expired";
    case SBX_GC_OWNER_GONE: return "owner_gone";
    case SBX_GC_UNRECORDED: return "unrecorded";
    case SBX_GC_LIST_FAILED: return "list_failed";
    }
    return "unknown";
}

typedef struct gc_out {
    int dry_run;
    json_object *array;   /* --json */
    int failed;
} gc_out;

static int gc_print(const sbx_gc_item *item, void *user_data)
{
    gc_out *o = user_data;
    const char *result = item->reaped ? "reaped" : o->dry_run && !item->error ? "would_reap"
                                                                              : "failed";
    const char *err = item->error ? sbx_error_get0_message(item->error) : NULL;

    if (item->reason == SBX_GC_LIST_FAILED) {
        msg("gc: backend %s cannot be listed: %s", item->backend, err ? err : "");
        return 0;
    }
    if (!item->reaped && !(o->dry_run && !item->error))
        o->failed = 1;
    /* A reaped sandbox that sbx create recorded is forgotten too. */
    if (item->reaped && item->id[0] && id_valid(item->id))
        state_forget(item->id);
    if (o->array != NULL) {
        json_object *e = json_object_new_object();

        json_object_object_add(e, "backend", json_object_new_string(item->backend));
        json_object_object_add(e, "id", json_object_new_string(item->id));
        json_object_object_add(e, "create_token", json_object_new_string(item->create_token));
        json_object_object_add(e, "reason", json_object_new_string(gc_reason_name(item->reason)));
        json_object_object_add(e, "result", json_object_new_string(result));
        json_object_object_add(e, "error", err ? json_object_new_string(err) : NULL);
        json_object_array_add(o->array, e);
    } else if (err != NULL) {
        printf("%s %s %s %s: %s\n", item->backend, item->id[0] ? item->id : "-",
               gc_reason_name(item->reason), result, err);
    } else {
        printf("%s %s %s %s\n", item->backend, item->id[0] ? item->id : "-",
               gc_reason_name(item->reason), result);
    }
    return 0;
}

static int cmd_gc(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "dry-run", no_argument, NULL, 'n' },
        { "json", no_argument, NULL, OPT_JSON },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    gc_out out = { 0 };
    sbx_error *error = NULL;
    int opt, json = 0;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            out.dry_run = 1;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            usage_gc(stdout);
            return 0;
        default:
            return bad_option("gc", argv, opt);
        }
    }
    if (optind < argc)
        return usage_error("gc", "unexpected argument \"%s\"", argv[optind]);
    if (json && (out.array = json_object_new_array()) == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    if (sbx_gc(out.dry_run ? SBX_GC_DRY_RUN : 0, gc_print, &out, &error) < 0) {
        msg_error(error);
        json_object_put(out.array);
        return EXIT_TOOL;
    }
    if (out.array != NULL) {
        printf("%s\n", json_object_to_json_string_ext(out.array, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(out.array);
    }
    return out.failed ? 1 : 0;
}

/* --------------------------------------------------------------- presets */

static void usage_presets(FILE *out)
{
    fprintf(out,
"Usage: sbx presets [--json]\n"
"\n"
"List the presets visible by name (registered at run time, SBX_PRESET_PATH,\n"
"${XDG_CONFIG_HOME:-$HOME/.config}/sbx/presets, then the built-in ones): name,\n"
"description and the file it comes from. `--preset NAME` on run and create\n"
"uses one.\n"
"\n"
"      --json   print a JSON array of the preset documents, each with an added\n"
"               \"source\"\n"
"  -h, --help   show this help and exit\n");
}

static int cmd_presets(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, OPT_JSON },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    sbx_preset **list = NULL;
    sbx_error *error = NULL;
    size_t count = 0;
    int opt, json = 0;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            usage_presets(stdout);
            return 0;
        default:
            return bad_option("presets", argv, opt);
        }
    }
    if (optind < argc)
        return usage_error("presets", "unexpected argument \"%s\"", argv[optind]);
    if (sbx_presets_list(&list, &count, &error) < 0) {
        msg_error(error);
        return EXIT_TOOL;
    }
    if (json) {
        json_object *array = json_object_new_array();
        for (size_t i = 0; i < count; i++) {
            char *doc = sbx_preset_to_json(list[i]);
            json_object *o = doc ? json_tokener_parse(doc) : NULL;
            free(doc);
            if (o == NULL)
                continue;
            json_object_object_add(o, "source",
                                   json_object_new_string(sbx_preset_get0_source(list[i])));
            json_object_array_add(array, o);
        }
        print_json(array);
        json_object_put(array);
    } else {
        size_t width = 4;
        for (size_t i = 0; i < count; i++)
            if (strlen(sbx_preset_get0_name(list[i])) > width)
                width = strlen(sbx_preset_get0_name(list[i]));
        printf("%-*s  %s\n", (int)width, "NAME", "DESCRIPTION");
        /* Names are checked; the description and the path are shown escaped. */
        for (size_t i = 0; i < count; i++) {
            printf("%-*s  ", (int)width, sbx_preset_get0_name(list[i]));
            print_escaped(sbx_preset_get0_description(list[i]));
            printf("\n%-*s  source: ", (int)width, "");
            print_escaped(sbx_preset_get0_source(list[i]));
            putchar('\n');
        }
    }
    sbx_preset_list_free(list, count);
    return 0;
}

/* ------------------------------------------------------------------ main */

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(argv[1], "run") == 0)
        usage_run(stdout);
    else if (strcmp(argv[1], "exec-code") == 0)
        usage_exec_code(stdout);
    else if (strcmp(argv[1], "backends") == 0)
        usage_backends(stdout);
    else if (strcmp(argv[1], "create") == 0)
        usage_create(stdout);
    else if (strcmp(argv[1], "exec") == 0)
        usage_exec(stdout);
    else if (strcmp(argv[1], "cp") == 0)
        usage_cp(stdout);
    else if (strcmp(argv[1], "ls") == 0)
        usage_ls(stdout);
    else if (strcmp(argv[1], "rm") == 0)
        usage_rm(stdout);
    else if (strcmp(argv[1], "ps") == 0)
        usage_ps(stdout);
    else if (strcmp(argv[1], "presets") == 0)
        usage_presets(stdout);
    else if (strcmp(argv[1], "gc") == 0)
        usage_gc(stdout);
    else if (strcmp(argv[1], "help") == 0)
        usage_main(stdout);
    else
        return usage_error("", "unknown command \"%s\"", argv[1]);
    return 0;
}

int main(int argc, char **argv)
{
    const char *cmd;
    int status;

    if (argc < 2) {
        usage_main(stderr);
        return EXIT_TOOL;
    }
    cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("sbx %s\n", sbx_version());
        return fflush(stdout) == 0 ? 0 : EXIT_TOOL;
    }

    install_signal_handlers();
    if (strcmp(cmd, "run") == 0)
        status = cmd_run(argc - 1, argv + 1);
    else if (strcmp(cmd, "exec-code") == 0)
        status = cmd_exec_code(argc - 1, argv + 1);
    else if (strcmp(cmd, "backends") == 0)
        status = cmd_backends(argc - 1, argv + 1);
    else if (strcmp(cmd, "create") == 0)
        status = cmd_create(argc - 1, argv + 1);
    else if (strcmp(cmd, "exec") == 0)
        status = cmd_exec(argc - 1, argv + 1);
    else if (strcmp(cmd, "cp") == 0)
        status = cmd_cp(argc - 1, argv + 1);
    else if (strcmp(cmd, "ls") == 0)
        status = cmd_ls(argc - 1, argv + 1);
    else if (strcmp(cmd, "rm") == 0)
        status = cmd_rm(argc - 1, argv + 1);
    else if (strcmp(cmd, "ps") == 0)
        status = cmd_ps(argc - 1, argv + 1);
    else if (strcmp(cmd, "presets") == 0)
        status = cmd_presets(argc - 1, argv + 1);
    else if (strcmp(cmd, "gc") == 0)
        status = cmd_gc(argc - 1, argv + 1);
    else if (strcmp(cmd, "help") == 0)
        status = cmd_help(argc - 1, argv + 1);
    else if (cmd[0] == '-')
        status = usage_error("", "unknown option \"%s\"", cmd);
    else
        status = usage_error("", "unknown command \"%s\"", cmd);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_TOOL;
    /* A stop signal ends every command with 128+N, also one that finished
     * its work meanwhile. */
    if (g_signal != 0 && status < 128) {
        msg("%s received", signal_name(g_signal));
        status = 128 + g_signal;
    }
    return status;
}
