/*
 * cloud.h — the hosted-provider base: what every plugin under plugins/cloud/
 * links (a static convenience library, libsbx-cloud-base.la, compiled into
 * each libsbx-NAME.so, so that each provider stays its own package and
 * nothing is shared at run time but libsbx).
 *
 *   util.c    host services, errors (the last error of the thread), buffers,
 *             clocks, bounds from the call context, base64, JSON helpers,
 *             shell quoting and the command script (cwd for every part of a
 *             command list, CASE-46), credentials from the provider's
 *             variables and files, base URLs, client options in seconds
 *   http.c    one libcurl pool per client (idle easy handles kept with
 *             their connections, keep-alive; a share handle for DNS and TLS
 *             sessions; HTTP/2 where the server offers it), requests bounded by the call's deadline, the retry
 *             policy (only calls safe to repeat; Retry-After in seconds or as
 *             an HTTP-date, capped; exponential backoff with jitter), the
 *             mapping of HTTP statuses to error codes, credential redaction
 *   stream.c  streaming readers fed arbitrary chunks: Server-Sent Events,
 *             NDJSON, Connect's enveloped stream
 *   reap.c    the ownership labels, and orphans of creates whose outcome
 *             is unknown, found by their create token and deleted
 *   proc.c    a process handle over a worker thread that runs one streaming
 *             call (exec_wait, exec_event_fd, output to the host's
 *             descriptors)
 *   grpc.c    gRPC over HTTP/2 through libcurl (h2c with prior knowledge
 *             for http:// channels, ALPN for https://): framing, metadata,
 *             trailers, the status-to-error mapping, deadlines as
 *             grpc-timeout, server streams read as they arrive, the retry
 *             rules of gRPC statuses and a failover host
 *
 * A provider plugin is then mostly a table: how options map to its create
 * body, how its responses map to ids and states, how exec and files are
 * framed.
 *
 * Prefix: cl_ (functions, types), CL_ (macros). Threading: every function
 * is thread-safe unless it says otherwise; a cl_http is shared by the
 * threads of one client. Errors: functions returning int give 0 (or a
 * count) on success and -1 with *error set on failure; the error always
 * names the backend (the host fills it in from the plugin) and the op.
 * Ownership: "a new string" is malloc()ed and freed by the caller with
 * free().
 *
 * Credentials: a credential given to cl_http_set_secret() is never put in an
 * error, a log line, a context value or a session state: every message the
 * base builds from a provider's answer is scrubbed of it (CASE-36). It only
 * travels in the request header named by cl_http_set_auth().
 */
#ifndef SBX_CLOUD_H
#define SBX_CLOUD_H

#include <sbx/plugin.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct json_object;

/* The version the plugins' descriptors and requests carry: the build's
 * (configure defines it), else this. */
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

/* ------------------------------------------------------------------------ */
/* Host services and errors (util.c)                                         */
/* ------------------------------------------------------------------------ */

/** The host services handed to setup; NULL before. */
extern const sbx_host_services *cl_host;

/** The backend name of this plugin ("e2b"), used in log lines; set by
 *  cl_setup. */
extern const char *cl_backend;

/** For a plugin's setup slot: keeps @host and @backend (a static string),
 *  initialises libcurl once (curl_global_init is not thread-safe, so it
 *  runs here, on the host's first call). Returns 0 or -1. */
int cl_setup(const sbx_host_services *host, const char *backend, sbx_error **error);

/**
 * Stores a new error (when @error wants one and holds none: the first error
 * stands) and returns it, or NULL. Also recorded as this thread's last
 * error (cl_last), so a caller that passed NULL can still look at it.
 */
sbx_error *cl_fail(sbx_error **error, sbx_error_code code, const char *op,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/** Adds key=value to @err (copied; NULL @err or @value: nothing). */
void cl_context(sbx_error *err, const char *key, const char *value);
/** Marks @err (and this thread's last error) as outcome unknown: the
 *  provider may have acted. */
void cl_outcome_unknown(sbx_error *err);

typedef struct cl_last_error {
    sbx_error_code code;
    int unknown;          /* outcome unknown */
    long http_status;     /* the answer's status; 0 when none came */
    double retry_after_s; /* the provider's Retry-After; 0 when none */
    char msg[2048];
} cl_last_error;
/** The last error made on this thread (cl_fail / cl_fail_status). */
const cl_last_error *cl_last(void);
/** Stores the error @l (a copy of cl_last(), taken before other calls
 *  made errors of their own, or cl_last() itself) in *@error with @op, as
 *  cl_fail() does (NULL @error: it becomes this thread's last error
 *  again), its outcome unknown kept. Returns it, or NULL. */
sbx_error *cl_fail_from(sbx_error **error, const cl_last_error *l, const char *op);

#define CL_LOG(level, ...)                                                  \
    do {                                                                    \
        if (cl_host && cl_host->log)                                        \
            cl_host->log(level, cl_backend, __VA_ARGS__);                   \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Buffers, clocks, bounds (util.c)                                          */
/* ------------------------------------------------------------------------ */

/** A growable byte buffer, NUL-terminated whenever data != NULL. */
typedef struct cl_buf {
    char *data;
    size_t len, cap;
} cl_buf;

int cl_buf_append(cl_buf *b, const void *p, size_t n);   /* 0 or -1 (ENOMEM) */
int cl_buf_printf(cl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cl_buf_clear(cl_buf *b);
/** The end of a string built in @b: its data (a new string, NUL-terminated;
 *  the caller frees it) when @bad is 0, else NULL with @b cleared (@bad:
 *  a step of the building ran out of memory). */
char *cl_buf_take(cl_buf *b, int bad);

double cl_now(void);        /* CLOCK_MONOTONIC seconds */
double cl_wallclock(void);  /* UNIX seconds */
/** Sleeps @secs, waking early (returns 1) when @cancel_fd becomes readable;
 *  0 after the full sleep. */
int cl_sleep(double secs, int cancel_fd);

/** A wait bound: the earlier of a limit of our own and the call's deadline,
 *  and the call's cancel descriptor. */
typedef struct cl_bound {
    double until;       /* CLOCK_MONOTONIC seconds; 0 = none */
    double deadline;    /* the call's own deadline; 0 = none */
    int cancel_fd;      /* -1 = none */
} cl_bound;

/** @ctx may be NULL; @secs <= 0: no limit of our own. */
cl_bound cl_bound_make(const sbx_call_ctx *ctx, double secs);
/** Seconds left (-1 = unbounded, 0 = expired). */
double cl_bound_left(const cl_bound *b);
int cl_bound_cancelled(const cl_bound *b);
/** The code of a call ended by its cancel descriptor: SBX_ERROR_TIMEOUT when
 *  the call's own deadline has come (out of process the host cancels a call
 *  at its deadline, sbx_client_set_call_timeout()), else
 *  SBX_ERROR_CANCELLED (the caller cancelled it). */
sbx_error_code cl_bound_cancel_code(const cl_bound *b);
/** One step of a wait on @cond, @lock held, within @b: waits at most 0.1 s
 *  (or what is left of @b) for a signal. Returns 0 (check the condition
 *  again), or -1 when @b has expired (nothing was waited). */
int cl_bound_cond_wait(const cl_bound *b, pthread_cond_t *cond, pthread_mutex_t *lock);

/* ------------------------------------------------------------------------ */
/* Encodings, JSON, shell (util.c)                                           */
/* ------------------------------------------------------------------------ */

/** Standard base64 of @n bytes: a new NUL-terminated string, or NULL. */
char *cl_base64_encode(const void *p, size_t n);
/** Decodes standard or URL-safe base64 (padding optional, whitespace
 *  skipped) into @out (appended). Returns 0, or -1 on a byte outside the
 *  alphabet. */
int cl_base64_decode(const char *s, size_t n, cl_buf *out);
/** Percent-encodes @s for a URL query or path segment: a new string. */
char *cl_url_escape(const char *s);

/** Member @key of object @o as a string (borrowed), or NULL when missing or
 *  not a string. */
const char *cl_json_str(struct json_object *o, const char *key);
/** Member @key as an int64: a JSON integer, or a string holding one
 *  (proto3 JSON writes int64 as strings). Returns 1 and sets *@v when
 *  present, 0 when missing, -1 when it is neither. */
int cl_json_int(struct json_object *o, const char *key, int64_t *v);
/** Member @key of object @o as a flag: 1 when present and true as json-c
 *  reads it (true, a non-zero number, a non-empty string), else 0 (missing,
 *  false, null; @o NULL or not an object). */
int cl_json_bool(struct json_object *o, const char *key);
/** Nested lookup: cl_json_path(o, "a", "b", NULL) is o.a.b, or NULL. */
struct json_object *cl_json_path(struct json_object *o, ...) __attribute__((sentinel));

/** 1 when @s (NUL-terminated; NULL counts as valid) is UTF-8 text:
 *  shortest forms, no surrogates, nothing past U+10FFFF; else 0. Pure. */
int cl_utf8_valid(const char *s);

/**
 * The check a provider whose API is JSON (a JSON string carries UTF-8
 * text only) makes before it sends anything of an exec request @rq (NULL:
 * none) or a file @path (NULL: none), op @op: 0 when every part is UTF-8
 * text (cl_utf8_valid()); else -1 with invalid_argument naming the first
 * part that is not, each message ending ": the provider's API (JSON)
 * cannot carry it":
 *  - "argument N is not valid UTF-8" (N the index in rq->argv, from 0;
 *    context argument=N);
 *  - "the shell command is not valid UTF-8";
 *  - "environment variable K is not valid UTF-8" (K the string's key
 *    before '=', context env_name=K), or "the name of environment variable
 *    N is not valid UTF-8" (N the index in rq->env, from 0) when K is not;
 *  - "the working directory is not valid UTF-8";
 *  - "the user is not valid UTF-8";
 *  - "the path is not valid UTF-8".
 * Parts are looked at in that order, the path last. Thread-safe.
 */
int cl_json_text_check(const sbx_plugin_exec_request *rq, const char *path, const char *op,
                       sbx_error **error);

/** cl_text_check() @flags: the per-call environment travels as a file's
 *  bytes (staged in the sandbox and sourced by the command), not in the
 *  API's text, so it is not looked at. */
#define CL_TEXT_ENV_AS_BYTES 0x1u

/**
 * cl_json_text_check() for a provider whose API is @api (a short name,
 * "JSON" or "protobuf": a proto3 string field holds UTF-8 text only, as a
 * JSON string does), each message ending ": the provider's API (@api)
 * cannot carry it"; @flags 0 or CL_TEXT_ENV_AS_BYTES. cl_json_text_check()
 * is cl_text_check(@rq, @path, "JSON", 0, @op, @error). Thread-safe.
 */
int cl_text_check(const sbx_plugin_exec_request *rq, const char *path, const char *api,
                  unsigned flags, const char *op, sbx_error **error);

/** @s quoted for a POSIX shell ('…', with ' as '\''): a new string. */
char *cl_shell_quote(const char *s);
/** Path @path quoted as cl_shell_quote() does, with "./" before it when it
 *  starts with '-', so that no command (find, which takes no "--", among
 *  them) reads it as an option: a new string, NULL on no memory. */
char *cl_shell_quote_path(const char *path);
/**
 * The shell script that runs an exec request's command: argv (each word
 * quoted, after "exec", or alone when the first word starts with '-', which
 * exec would take for an option) or the shell text, in @cwd when it is not
 * NULL. The cwd is
 * entered on a line of its own before the command ("cd -- 'DIR' || exit
 * CL_CWD_MISSING_EXIT", then a newline, then the command), so that it
 * holds for every part of a command list, background operators, comments
 * and here-documents included (CASE-46). Environment values never go into
 * the script: they travel in the provider's env field. A new string.
 */
char *cl_shell_script(const char *const *argv, const char *shell, const char *cwd);
#define CL_CWD_MISSING_EXIT 211

/**
 * A perl program (for "perl -e CL_OUTPUT_ENCODER CMD ARG..."), for
 * providers that carry a command's output as text: it runs CMD with stdout
 * and stderr on pipes and passes each read on at once (output stays live),
 * every byte 0x80-0xFF as the 2-byte UTF-8 of U+0080-U+00FF (latin-1 read
 * as UTF-8: valid text whatever the command wrote; cl_unencode undoes it),
 * in writes of at most 4096 bytes (PIPE_BUF: a reader of the pipe gets
 * whole writes) that each end on a character's end, so a server that
 * decodes each read as text on its own splits no character.
 * It stops reading once CMD has ended and a look at the pipes made after
 * CMD was reaped finds nothing more (a look made before it may have missed
 * what CMD wrote just before its end: on a loaded machine the encoder can
 * be held off the CPU between the two), so a background child that keeps
 * the pipes open does not hold the command, and
 * it ends as CMD did (the same exit status, or the same signal). It
 * ignores the signals that would end it (TERM, INT, HUP, QUIT, USR1, USR2,
 * ALRM; CMD gets them at their default), so a signal sent to every
 * process of a command leaves the command's own handling to decide when
 * it ends (a TERM that CMD ignores does not end the command; SIGKILL ends
 * all). perl-base is in every Debian and Ubuntu image.
 */
extern const char CL_OUTPUT_ENCODER[];

/** One output stream's decoder of CL_OUTPUT_ENCODER's text: zero it to
 *  start. Not thread-safe (one per stream). */
typedef struct cl_unencoder {
    unsigned char lead;     /* a lead byte whose continuation is to come */
} cl_unencoder;
/** Decodes the next piece @b of stream @fd (1 or 2) in place, back to the
 *  bytes the command wrote; a character split across pieces is joined.
 *  Returns 0, or -1 with a connection error (last error, op "exec") when
 *  @b holds anything the encoder does not write (U+FFFD from a server that
 *  split a character, say): the output did not come through byte for
 *  byte. */
int cl_unencode(cl_unencoder *u, int fd, cl_buf *b);
/** At the stream's end: 0, or -1 with a connection error in *@error when
 *  it ended inside a character. */
int cl_unencode_end(const cl_unencoder *u, int fd, const char *op, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* Configuration: credentials, base URLs, options (util.c)                  */
/* ------------------------------------------------------------------------ */

/**
 * The credential: the first non-empty of the environment variables @envs
 * (NULL-terminated), else member @json_key of the JSON file @file_under_home
 * (a path relative to $HOME, e.g. ".e2b/config.json"; NULL for none), else
 * NULL. A new string. Never logged.
 */
char *cl_credential(const char *const *envs, const char *file_under_home, const char *json_key);

/**
 * A string setting of the client: member @key of the client's config JSON
 * @config (NULL: none; @key NULL: not looked at) when it is a non-empty
 * string, else environment variable @env (NULL: none) when it is set and
 * not empty, else @dflt as given (NULL too). Borrowed from @config, the
 * environment or @dflt: valid while @config lives and the environment is
 * not changed. Thread-safe as getenv() is.
 */
const char *cl_setting(struct json_object *config, const char *key, const char *env,
                       const char *dflt);

/**
 * A base URL: member @key of the client's config JSON @config (a string),
 * else environment variable @env, else @dflt. Trailing slashes are removed.
 * An URL that does not start with http:// or https:// is a configuration
 * error naming it. A new string, or NULL with *@error set.
 */
char *cl_base_url(struct json_object *config, const char *key, const char *env,
                  const char *dflt, sbx_error **error);

/**
 * Client option @key of the client's config JSON @config (NULL: none) as a
 * number of seconds: a JSON integer or float, finite: 0 or from 1 to @max_s
 * when @zero_ok is non-zero (0 is "never": an interval under a second, a
 * flood of requests, is refused), else above 0 and at most @max_s. Returns 1
 * with *@out set (seconds, as given: no rounding) when present and in
 * range, 0 when absent (*@out untouched: the caller's default stays), or
 * -1 with a configuration error (op "client_new", context option=@key)
 * whose message is "BACKEND client option KEY VALUE is not a number of
 * seconds 0, or from 1 to MAX" (with @zero_ok) or "... above 0 and at most MAX"
 * (without), BACKEND being cl_backend and VALUE the option as JSON
 * ("\"20\"", true, -1).
 */
int cl_seconds_option(struct json_object *config, const char *key, int zero_ok, int max_s,
                      double *out, sbx_error **error);

/* ------------------------------------------------------------------------ */
/* HTTP (http.c)                                                             */
/* ------------------------------------------------------------------------ */

/** The retry policy of a client (CASE-19). */
typedef struct cl_retry_policy {
    int retries;            /* re-sends after the first attempt; default 3 */
    double base_s;          /* floor of the first backoff without Retry-After
                             * (it is in [base_s, 2 * base_s)); default 0.5 */
    double max_backoff_s;   /* every backoff is below this; default 8 */
    double max_wait_s;      /* a Retry-After above this fails at once
                             * (retry_after_s in context): rate_limited for
                             * a 429, the status's code for a 5xx that
                             * would be re-sent; seconds, default 60 */
    int rate_limit_retries; /* re-sends of a create that carries the call's
                             * create token after a 429 (see cl_request);
                             * default 8 */
} cl_retry_policy;

#define CL_RETRY_POLICY_DEFAULT { 3, 0.5, 8.0, 60.0, 8 }

/** One connection pool per client; opaque. */
typedef struct cl_http cl_http;

/** New pool (no I/O). NULL on memory exhaustion. */
cl_http *cl_http_new(void);
void cl_http_free(cl_http *h);
/** The header that carries the credential on every request ("X-API-Key",
 *  "Authorization" with @value "Bearer KEY"); the value is a secret (see
 *  cl_http_set_secret). Copied. Not thread-safe: call before requests. */
int cl_http_set_auth(cl_http *h, const char *header, const char *value);
/**
 * Marks @h as lacking the credential its provider requires: from then on
 * every request of @h that would carry it (all but those with no_auth,
 * and the gRPC calls and WebSocket terminals over @h) fails at once,
 * nothing sent and not retried, with authentication "@message" (copied:
 * it names where the credential is read from), as
 * cl_http_missing_credential() gives it. NULL clears the
 * mark, as does cl_http_set_auth(). 0, or -1 on no memory. Not
 * thread-safe: call before requests.
 */
int cl_http_set_missing_credential(cl_http *h, const char *message);
/**
 * 0 when @h has its credential (or needs none); -1 with the error of
 * cl_http_set_missing_credential() (op @op) when it lacks it. Thread-safe
 * once configured.
 */
int cl_http_missing_credential(const cl_http *h, const char *op, sbx_error **error);
/** 1 when a cl_http_set_auth() header is set on @h, else 0. */
int cl_http_has_auth(const cl_http *h);
/** Adds the header "@header: @value" (copied; up to 4) to every request
 *  that carries the credential (every one but those with no_auth): what
 *  goes with the credential, such as the organization a token acts for.
 *  Not a secret. 0, or -1 on no memory or a fifth header. Not
 *  thread-safe: call before requests. */
int cl_http_add_header(cl_http *h, const char *header, const char *value);
/**
 * TLS for every request of @h (PEM bytes, copied; NULL for none): @ca_pem
 * the CAs trusted instead of the system's, @cert_pem / @key_pem a client
 * certificate and its key (mutual TLS, as a kubeconfig's client
 * certificate), @insecure 1 to check no server certificate. The key is
 * wiped when @h is freed. 0, or -1 on no memory or a libcurl older than
 * 7.77 (no in-memory PEM). Not thread-safe: call before requests.
 */
int cl_http_set_tls(cl_http *h, const char *ca_pem, size_t ca_len, const char *cert_pem,
                    size_t cert_len, const char *key_pem, size_t key_len, int insecure);
/**
 * The headers every request of @h that carries the credential sends (the
 * cl_http_set_auth() header, then those of cl_http_add_header()), as
 * "Name: value" lines: a new NULL-terminated array of new strings (free
 * with cl_strv_free() of provider.h, or each string and the array), for a
 * connection @h does not make itself (a WebSocket's opening handshake).
 * The credential is a secret: never log the lines. An empty array when @h
 * has none; NULL on no memory. Thread-safe once configured.
 */
char **cl_http_auth_headers(const cl_http *h);
/** Adds @secret to what is scrubbed from every message (copied; up to 8).
 *  Not thread-safe: call before requests. */
int cl_http_set_secret(cl_http *h, const char *secret);
/** Sets the retry policy (copied). Not thread-safe: call before requests. */
void cl_http_set_retry(cl_http *h, const cl_retry_policy *p);
/** Reads "retries" and "rate_limit_retries" (integers from 0 to 100) and
 *  "max_retry_wait_s" (number >= 0) of the client's config JSON into @p; a
 *  bad value is a configuration error naming it (context option). When
 *  "retries" is given without "rate_limit_retries", both take its value
 *  (retries 0: nothing is re-sent, CASE-19 C). */
int cl_retry_policy_from_config(struct json_object *config, cl_retry_policy *p,
                                sbx_error **error);

/** Streams a request body: fills @buf with up to @cap bytes; returns the
 *  count, 0 at the end, -1 to abort (after storing its own error). */
typedef ssize_t (*cl_source_fn)(void *ud, char *buf, size_t cap);
/** Takes a chunk of a 2xx response body; returns 0, or -1 to abort. */
typedef int (*cl_sink_fn)(void *ud, const char *p, size_t n);

/** Whether a request may be sent again after a failure that may have
 *  reached the provider. */
typedef enum cl_idempotency {
    CL_UNSAFE = 0,      /* never re-sent once it may have reached the
                         * provider: such a failure has outcome unknown */
    CL_SAFE = 1         /* reads, deletes, creates carrying a client-chosen
                         * id or token: retried on 429, 5xx and transport
                         * errors */
} cl_idempotency;
/* A create POST whose body carries the call's create token (ctx's
 * create_token) is re-sent after a 429 whatever its cl_idempotency: the
 * provider refused it without acting, and the token finds any sandbox a
 * repeat could duplicate (reap.c). See cl_request. */

typedef struct cl_req {
    const char *method;         /* GET POST PUT DELETE PATCH */
    const char *url;            /* absolute */
    const char *const *headers; /* extra "Name: value" lines, NULL-terminated; may be NULL */
    const char *content_type;   /* of the body; NULL = application/json when body set */
    const void *body;           /* whole body, or NULL */
    size_t body_len;
    cl_source_fn source;        /* or a streamed body (not retried once started) */
    void *source_ud;
    int64_t source_len;         /* its length, or -1 (chunked) */
    cl_sink_fn sink;            /* a 2xx body goes here; else it is kept in resp->body */
    void *sink_ud;
    cl_idempotency idempotent;
    double secs;                /* our own bound on the whole call (retries
                                 * included); <= 0: only the call's deadline */
    double idle_secs;           /* a stream with no byte for this long fails
                                 * as a timeout; <= 0: no idle limit (the
                                 * call's bound only: a quiet command is not
                                 * cut by a fixed read timeout, CASE-52) */
    int no_auth;                /* 1: leave the credential header out */
    int once;                   /* 1: sent once, never re-sent whatever
                                 * the failure (a probe: the answer of
                                 * the moment, at once) */
    const char *what;           /* for messages ("create the sandbox"); NULL = METHOD URL path */
    const char *keep_header;    /* an answer header whose value goes to
                                 * resp->kept_header (a page token such as
                                 * "X-Next-Token"); NULL = none */
    int answers_final;          /* 1: a CL_SAFE request is re-sent after a
                                 * transport failure only, never after an
                                 * HTTP answer (a 5xx is the server's last
                                 * word: a control plane's 502 carries the
                                 * provider's error, and its replay of the
                                 * same idempotency key would only repeat
                                 * it); 429s are handled as for any request */
    long final_status;          /* an answer with this HTTP status is the
                                 * last word of this call, never re-sent,
                                 * returned at once (a status the caller
                                 * looks into itself before anything is
                                 * sent again, such as E2B's envd 502 of a
                                 * sandbox that may be gone); 0: none */
} cl_req;

typedef struct cl_resp {
    long status;                /* HTTP status of the last attempt; 0 when none came */
    cl_buf body;                /* kept (non-sunk) body, capped at 64 MiB */
    double retry_after_s;       /* Retry-After of the last answer; 0 when none */
    int attempts;               /* requests sent */
    char *content_type;         /* the answer's Content-Type; NULL when none */
    int maybe_acted;            /* a CL_UNSAFE request answered 5xx / 408: the
                                 * provider may have acted (cl_fail_status
                                 * then marks the error outcome unknown) */
    char *kept_header;          /* the value of req->keep_header in the last
                                 * answer, blanks trimmed; NULL when absent */
    double waited_s;            /* seconds slept between attempts */
    int lost;                   /* cl_request failed with no answer after
                                 * its last attempt may have reached the
                                 * server (not a refused connection or an
                                 * unresolved name): it may have acted */
} cl_resp;

/**
 * Performs @req with the client's retry policy. Returns 0 when an HTTP
 * answer came that is not retried any more (any status: look at
 * resp->status), -1 with *@error when no usable answer came: transport
 * failure, bound expired (timeout), cancelled, a source or sink aborted, or
 * an answer whose Retry-After passes the policy's max_wait_s, at once,
 * with context retry_after_s: a 429 (rate_limited), or a 5xx that would
 * be re-sent (the status's code: connection, timeout for 504). No wait
 * that would pass the call's bound is slept: the last answer stands. A request that failed after it may
 * have reached the provider and is CL_UNSAFE fails with outcome unknown;
 * libcurl's own re-send of a request whose kept-alive connection died
 * before any byte of the answer is refused for it too (a connection error,
 * outcome unknown, resp->lost set), while a CL_SAFE one keeps it.
 * After retries are exhausted on 429 / 5xx it returns 0 with that status.
 *
 * Rate-limited creates: a POST whose body holds @ctx's create_token (the
 * create of a sandbox labelled with it), answered 429, is sent again up to
 * the policy's rate_limit_retries times (the other retries count apart),
 * even when CL_UNSAFE: each wait is the answer's Retry-After (either form;
 * above max_wait_s: rate_limited at once, as for any request), else the
 * backoff of every retry: equal jitter, uniform in [s/2, s) for the step
 * s = min(max_backoff_s, base_s * 2^(k+1)) of the k-th such re-send (k
 * from 0; with the defaults [0.5, 1), [1, 2), [2, 4), then [4, 8) s: the
 * first wait is never below base_s). Once they are spent it returns 0 with
 * the 429; cl_fail_status then makes it rate_limited with context attempts and
 * waited_s (seconds slept). Thread-safe (the jitter's seed is locked).
 */
int cl_request(cl_http *h, const sbx_call_ctx *ctx, const cl_req *req, cl_resp *resp,
               const char *op, sbx_error **error);
void cl_resp_clear(cl_resp *r);

/**
 * cl_resend_guard / cl_refuse_resend:
 * libcurl sends a request again by itself, on a new connection, when the
 * kept-alive connection it reused died before any byte of the answer came
 * ("Connection died, retrying a fresh connect"), whatever the method or
 * body. The request may have reached the server, so one that is not safe
 * to repeat must not go again. cl_refuse_resend() makes the easy handle
 * @curl (a CURL *) abort, before a byte of it is written, every request
 * after the first that it begins in one perform (CURLOPT_PREREQFUNCTION,
 * libcurl 7.80.0; before that the handle takes a new connection, which
 * curl never re-sends on). @g, zeroed by the caller, must outlive the
 * perform: g->sends counts the requests begun on a connection (0: none
 * reached a server), g->refused is set when a re-send was aborted (the
 * perform then fails, and the call's outcome is unknown). Used by
 * cl_request and cl_grpc_invoke for CL_UNSAFE calls.
 */
typedef struct cl_resend_guard {
    int sends;
    int refused;
} cl_resend_guard;
void cl_refuse_resend(void *curl, cl_resend_guard *g);

/** The error code of an HTTP status: 400, 409, 422 configuration; 401, 403
 *  authentication; 404, 410 not_found; 408, 504 timeout; 429 rate_limited;
 *  other 5xx connection; anything else execution_failed. */
sbx_error_code cl_code_of_status(long status);

/** The provider's message of an error answer ("message", else "error" as a
 *  string or as {"message"}, else the body text), trimmed to 1 KiB and
 *  scrubbed of the client's secrets: a new string (never NULL unless out
 *  of memory). */
char *cl_resp_message(cl_http *h, const cl_resp *r);

/**
 * Stores the error of an unexpected answer: "@what: MESSAGE (HTTP N)", or
 * "@what: MESSAGE (HTTP N; the provider asks to wait S s)" when the answer
 * had a Retry-After, with the code of the status (or @code when it is not
 * (sbx_error_code)-1), context http_status and, for 429 or an answer with
 * a Retry-After, retry_after_s (seconds) and, when the request
 * was sent more than once, attempts and waited_s (seconds slept between
 * them). Returns it.
 */
#define CL_CODE_BY_STATUS ((sbx_error_code)-1)
sbx_error *cl_fail_status(cl_http *h, sbx_error **error, sbx_error_code code,
                          const cl_resp *r, const char *op, const char *what);

/** Parses a JSON answer body; NULL (and a connection error naming @what)
 *  when it is not JSON. The caller json_object_put()s it. */
struct json_object *cl_resp_json(const cl_resp *r, const char *op, const char *what,
                                 sbx_error **error);

/** The value of header @name (case-insensitive) when the raw header line
 *  @line (@n bytes, as libcurl's header callback gets it, CRLF included) is
 *  that header: a new string, blanks and the line end trimmed; NULL when
 *  it is another header (or out of memory). */
char *cl_header_value(const char *line, size_t n, const char *name);

/** Parses a Retry-After value, seconds or an HTTP-date (relative to
 *  @now_wall, UNIX seconds); returns the wait in seconds (>= 0), or -1 when
 *  it is neither. */
double cl_parse_retry_after(const char *value, double now_wall);

/* ------------------------------------------------------------------------ */
/* Streaming readers (stream.c)                                              */
/* ------------------------------------------------------------------------ */

/*
 * Each reader is fed any chunking of its stream (down to single bytes)
 * and calls its callback once per complete frame. A callback returns 0 to
 * go on, 1 when the frame was the stream's final one (the reader then
 * ignores the rest), -1 to abort (after storing its own error). cl_*_end
 * is called when the transport ended: it fails (connection error, "the
 * stream ended before its final frame") unless a callback returned 1, so a
 * cut stream never passes for a finished command. Keepalive frames (SSE
 * comments, empty NDJSON lines) never reach the callback.
 */

/** One Server-Sent Event: @event ("message" when the stream named none),
 *  @data (the data lines joined with \n, NUL-terminated, @data_len bytes),
 *  @id (NULL when none). Borrowed for the call. */
typedef int (*cl_sse_fn)(void *ud, const char *event, const char *data, size_t data_len,
                         const char *id);

typedef struct cl_sse {
    cl_sse_fn fn;
    void *ud;
    cl_buf line;        /* the line being read */
    cl_buf data;        /* data of the event being read */
    char *event;
    char *id;
    int has_data;
    int cr;             /* the last byte was \r (a \n after it ends nothing) */
    int done;           /* the callback returned 1 */
    int failed;
} cl_sse;

void cl_sse_init(cl_sse *s, cl_sse_fn fn, void *ud);
int cl_sse_feed(cl_sse *s, const char *p, size_t n, const char *op, sbx_error **error);
int cl_sse_end(cl_sse *s, const char *op, sbx_error **error);
void cl_sse_clear(cl_sse *s);

/** One NDJSON line, parsed (borrowed for the call). */
typedef int (*cl_ndjson_fn)(void *ud, struct json_object *obj);

typedef struct cl_ndjson {
    cl_ndjson_fn fn;
    void *ud;
    cl_buf line;
    int done;
    int failed;
} cl_ndjson;

void cl_ndjson_init(cl_ndjson *s, cl_ndjson_fn fn, void *ud);
/** A line that is not JSON fails (connection error quoting its start). */
int cl_ndjson_feed(cl_ndjson *s, const char *p, size_t n, const char *op, sbx_error **error);
int cl_ndjson_end(cl_ndjson *s, const char *op, sbx_error **error);
void cl_ndjson_clear(cl_ndjson *s);

/** Connect's envelope flags (connectrpc.com docs/protocol.md). */
#define CL_CONNECT_COMPRESSED 0x01u
#define CL_CONNECT_END_STREAM 0x02u

/** One Connect envelope: @flags and its message (@p, @n bytes; for the JSON
 *  codec, JSON text, NUL-terminated). Borrowed for the call. */
typedef int (*cl_connect_fn)(void *ud, unsigned flags, const char *p, size_t n);

typedef struct cl_connect {
    cl_connect_fn fn;
    void *ud;
    unsigned char hdr[5];
    size_t hdr_len;
    cl_buf msg;
    uint32_t want;      /* length of the envelope being read */
    int done;
    int failed;
    size_t max_len;     /* an envelope longer is refused; default 16 MiB */
} cl_connect;

void cl_connect_init(cl_connect *s, cl_connect_fn fn, void *ud);
/** A compressed envelope (none was asked for) or one longer than max_len
 *  fails. */
int cl_connect_feed(cl_connect *s, const char *p, size_t n, const char *op, sbx_error **error);
int cl_connect_end(cl_connect *s, const char *op, sbx_error **error);
void cl_connect_clear(cl_connect *s);
/**
 * The cl_sink_fn of a command's output stream read by one of the readers
 * above, @ud being the reader (a cl_sse *, a cl_ndjson *, a cl_connect *):
 * the bytes fed to it, op "exec", its error (and its callback's) the
 * thread's last error (cl_last()). 0, or -1 to end the transfer.
 */
int cl_sse_sink(void *ud, const char *p, size_t n);
int cl_ndjson_sink(void *ud, const char *p, size_t n);
int cl_connect_sink(void *ud, const char *p, size_t n);

/** One envelope around @n bytes of @p (flags 0): a new buffer in @out. */
int cl_connect_envelope(const void *p, size_t n, unsigned flags, cl_buf *out);

/**
 * The error of a Connect end-of-stream message or unary error body
 * ({"error":{"code","message"}} or {"code","message"}): 1 and an error
 * stored when it holds one, 0 when it holds none. Codes: unauthenticated,
 * permission_denied -> authentication; not_found -> not_found;
 * deadline_exceeded -> timeout; resource_exhausted -> rate_limited;
 * unavailable -> connection; invalid_argument, failed_precondition,
 * already_exists -> configuration; others -> execution_failed.
 */
int cl_connect_error(cl_http *h, struct json_object *msg, const char *op, const char *what,
                     sbx_error **error);

/* ------------------------------------------------------------------------ */
/* gRPC over HTTP/2 (grpc.c)                                                 */
/* ------------------------------------------------------------------------ */

/*
 * A gRPC channel: calls POST /SERVICE/METHOD with content-type
 * application/grpc, te: trailers, the channel's metadata and the call's,
 * and a body of one length-prefixed message (1 flag byte, 4-byte
 * big-endian length; never compressed). The answer's messages are read as
 * they arrive; grpc-status and grpc-message come as trailers (or in the
 * headers of a trailers-only answer) through libcurl's header callback.
 * Messages themselves are bytes: the caller packs and unpacks them (with
 * protobuf-c). A channel borrows a cl_http for its retry policy and its
 * secrets, which are scrubbed from every message built from an answer
 * (CASE-36); its calls share DNS and TLS sessions, each on a connection of
 * its own.
 *
 * Retries (the official SDKs' rules, contract section 5): RESOURCE_EXHAUSTED
 * is a refusal made before the server acted, so any call is sent again, up
 * to the policy's rate_limit_retries, after the backoff of cl_http (equal
 * jitter: [0.5, 1), [1, 2), [2, 4) s ... with the defaults; never a tight
 * loop), then fails rate_limited with context grpc_status, attempts and
 * waited_s. UNAVAILABLE, and a transport failure after the call may have
 * reached the server, are retried only for CL_SAFE calls (up to retries);
 * a transport failure before the call was sent (no connection) is retried
 * for any call, on the failover URL when the channel has one (once it
 * answered there, the channel stays on it). A server stream whose messages
 * already went to the caller is never re-sent here: the caller resumes it
 * (from its offset).
 *
 * Deadlines: the earlier of the call's own bound (secs) and the call
 * context's deadline goes to the server as grpc-timeout (milliseconds) and
 * bounds the transfer; a call with neither is unbounded (a quiet server
 * stream is not cut by a fixed read timeout, CASE-52); the context's
 * cancel descriptor ends it at once.
 *
 * Threading: a channel is shared by the threads of one client once made;
 * cl_grpc_add_metadata is not thread-safe (call it before calls).
 */
typedef struct cl_grpc cl_grpc;

/** gRPC status codes (grpc/doc/statuscodes.md). */
enum {
    CL_GRPC_OK = 0, CL_GRPC_CANCELLED = 1, CL_GRPC_UNKNOWN = 2, CL_GRPC_INVALID_ARGUMENT = 3,
    CL_GRPC_DEADLINE_EXCEEDED = 4, CL_GRPC_NOT_FOUND = 5, CL_GRPC_ALREADY_EXISTS = 6,
    CL_GRPC_PERMISSION_DENIED = 7, CL_GRPC_RESOURCE_EXHAUSTED = 8,
    CL_GRPC_FAILED_PRECONDITION = 9, CL_GRPC_ABORTED = 10, CL_GRPC_OUT_OF_RANGE = 11,
    CL_GRPC_UNIMPLEMENTED = 12, CL_GRPC_INTERNAL = 13, CL_GRPC_UNAVAILABLE = 14,
    CL_GRPC_DATA_LOSS = 15, CL_GRPC_UNAUTHENTICATED = 16
};

/**
 * A new channel to @url ("http://HOST:PORT" or "https://HOST[:PORT]", no
 * path; trailing slashes are dropped), over @http (borrowed: it must
 * outlive the channel). @failover_url (or NULL) is where calls go once
 * @url does not answer (no connection). No I/O. NULL on no memory or an
 * URL of another scheme.
 */
cl_grpc *cl_grpc_new(cl_http *http, const char *url, const char *failover_url);
void cl_grpc_free(cl_grpc *g);
/** Adds the metadata "@name: @value" (copied; up to 8) to every call of
 *  @g. A secret value is given to cl_http_set_secret() of the channel's
 *  cl_http as well, by the caller. 0, or -1 on no memory or a ninth. */
int cl_grpc_add_metadata(cl_grpc *g, const char *name, const char *value);
/** The URL calls go to now (the failover URL once failed over): borrowed,
 *  lives as long as @g. */
const char *cl_grpc_url(cl_grpc *g);

/** Takes one message of a server stream (@p, @n bytes: the serialized
 *  protobuf, borrowed for the call); returns 0 to go on, -1 to end the call
 *  (after storing its own error). */
typedef int (*cl_grpc_msg_fn)(void *ud, const uint8_t *p, size_t n);

typedef struct cl_grpc_call {
    const char *method;         /* "/modal.client.ModalClient/SandboxCreate" */
    const void *req;            /* the serialized request message */
    size_t req_len;
    cl_idempotency idempotent;  /* CL_SAFE: may be sent again after it may
                                 * have reached the server */
    double secs;                /* our own bound (retries included); <= 0:
                                 * only the call's deadline */
    cl_grpc_msg_fn on_msg;      /* a server stream's messages go here; NULL:
                                 * unary, the answer in resp->msg */
    void *ud;
    const char *const *headers; /* more metadata lines ("name: value") for
                                 * this call, NULL-terminated; NULL: none */
    const char *what;           /* for messages ("create the sandbox") */
} cl_grpc_call;

typedef struct cl_grpc_resp {
    int status;         /* grpc-status of the last attempt; -1 when none came */
    char *message;      /* its grpc-message (percent-decoded, scrubbed), or NULL */
    cl_buf msg;         /* unary: the answer (empty for an empty message) */
    int messages;       /* messages of the last attempt given to on_msg */
    int attempts;       /* calls sent */
    double waited_s;    /* seconds slept between attempts */
    int cut;            /* the last attempt's answer began and ended with no
                         * grpc-status (the path cut it): a stream to resume */
    int aborted;        /* on_msg returned -1 (its error is the caller's) */
} cl_grpc_resp;

/**
 * Performs @call on @g with the retry rules above. 0 when the answer's
 * grpc-status is OK (a unary answer in resp->msg, a stream's messages given
 * to on_msg). Otherwise -1, with *@error set (unless on_msg aborted:
 * resp->aborted, its own error stands): the status's code
 * (cl_grpc_code(); message "@what: GRPC-MESSAGE (gRPC NAME)", context
 * grpc_status), a connection error for a transport failure or a cut stream
 * (resp->cut), a timeout when the bound passed, cancelled when the context
 * was. An error of a CL_UNSAFE call that may have reached the server has
 * outcome unknown. Thread-safe.
 */
int cl_grpc_invoke(cl_grpc *g, const sbx_call_ctx *ctx, const cl_grpc_call *call,
                   cl_grpc_resp *resp, const char *op, sbx_error **error);
void cl_grpc_resp_clear(cl_grpc_resp *r);

/** The error code of gRPC status @status: UNAUTHENTICATED, PERMISSION_DENIED
 *  authentication; NOT_FOUND not_found; RESOURCE_EXHAUSTED rate_limited;
 *  DEADLINE_EXCEEDED timeout; UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN,
 *  DATA_LOSS connection; INVALID_ARGUMENT, FAILED_PRECONDITION,
 *  ALREADY_EXISTS, OUT_OF_RANGE configuration; others execution_failed. */
sbx_error_code cl_grpc_code(int status);
/** The name of gRPC status @status ("RESOURCE_EXHAUSTED"), static. */
const char *cl_grpc_status_name(int status);

/* What grpc.c takes from http.c (not for plugins): the retry policy, the
 * scrubbing of secrets in place, the k-th backoff in seconds, the TLS
 * settings (cl_http_set_tls) put on an easy handle. */
cl_retry_policy cl_http_retry_policy(cl_http *h);
void cl_http_tls_apply(cl_http *h, void *easy);   /* a CURL * */
void cl_http_scrub(const cl_http *h, char *s);
double cl_http_backoff(cl_http *h, int k);

/* ------------------------------------------------------------------------ */
/* Process handles over one streaming call (proc.c)                          */
/* ------------------------------------------------------------------------ */

/*
 * A cl_proc runs @run on a worker thread of its own. @run performs the
 * provider's streaming exec call, writes output with cl_proc_output as it
 * arrives, and returns the exit code (0..255) or -1 after cl_proc_fail.
 * exec_wait / exec_event_fd / exec_free of a plugin map onto
 * cl_proc_wait / cl_proc_event_fd / cl_proc_clear. The plugin's own
 * process struct embeds a cl_proc as its first member. @run passes
 * stop_fd as the cancel_fd of the call context of its requests, so that
 * cl_proc_stop (exec_free, destroy) ends a quiet stream too.
 */
typedef struct cl_proc cl_proc;
typedef int (*cl_proc_run_fn)(cl_proc *p);

/* The context pairs a command's failure can carry to exec_wait. */
#define CL_PROC_CTX_MAX 4

struct cl_proc {
    cl_proc_run_fn run;
    void *ud;                   /* the plugin's */
    int stdout_fd, stderr_fd;   /* dup()s of the host's descriptors; -1 closed */
    int stop_fd;                /* readable once cl_proc_stop was called */
    int stop_wr;
    int event_rd, event_wr;     /* readable once the command ended */
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    int ended;                  /* run returned */
    int exit_code;
    int stopped;
    char err_msg[2048];         /* cl_proc_fail's error, handed to exec_wait */
    sbx_error_code err_code;
    int err_unknown;
    int err_nctx;               /* the failure's context pairs, in order */
    char err_ctx_key[CL_PROC_CTX_MAX][32], err_ctx_val[CL_PROC_CTX_MAX][512];
};

/** Starts @p (its run and ud set by the caller) on its thread with dup()s
 *  of @stdout_fd / @stderr_fd. Returns 0 or -1. */
int cl_proc_start(cl_proc *p, int stdout_fd, int stderr_fd, const char *op, sbx_error **error);
/** Writes output of stream 1 (stdout) or 2 (stderr) to the host's
 *  descriptor, whole, even when the descriptor is non-blocking; 0, or -1
 *  when the host closed it or cl_proc_stop was called. Empty writes do
 *  nothing. Called on the worker thread. */
int cl_proc_output(cl_proc *p, int stream, const void *data, size_t n);
/** Records the command's failure (on the worker thread, before @run returns
 *  -1); exec_wait hands it out. @ctx_key/@ctx_val: its first context pair
 *  or NULL (the pairs of an earlier failure are dropped); more are added
 *  with cl_proc_context(). */
void cl_proc_fail(cl_proc *p, sbx_error_code code, int unknown, const char *ctx_key,
                  const char *ctx_val, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/** Takes the error of the thread's last cl_fail as @p's failure. */
void cl_proc_fail_last(cl_proc *p);
/** The exec_wait slot: 1 and *@exit_code when ended, 0 while it runs, -1
 *  with the run's error. */
int cl_proc_wait(cl_proc *p, int timeout_ms, int *exit_code, const char *op,
                 sbx_error **error);
int cl_proc_event_fd(cl_proc *p);
/** Asks the worker to stop reading (its stream is abandoned). */
void cl_proc_stop(cl_proc *p);
/** 1 once cl_proc_stop was called (for the worker's sinks). */
int cl_proc_stopping(cl_proc *p);
/** Stops, joins the worker and closes the descriptors (not @p itself). */
void cl_proc_clear(cl_proc *p);

/*
 * Live output carried as text (proc.c). Some providers stream a command's
 * output only as text (JSON strings: bytes that are not UTF-8 become
 * U+FFFD) while its exact bytes can be had once it ended (a file in the
 * sandbox, a report in base64). A cl_live sends one stream's text chunks to
 * the host as they come while they are exact, and a cl_live_rest then
 * sends the rest from the whole bytes, checking that they begin with what
 * went live: the host sees the exact output, live as far as it could be.
 * One cl_live per stream, used by one thread at a time.
 */
typedef struct cl_live {
    int off;            /* no more live chunks for this stream */
    uint64_t sent;      /* bytes delivered live */
    uint64_t hash;      /* their FNV-1a (64 bits) */
} cl_live;

void cl_live_init(cl_live *l);
/** Sends @n bytes of output of @stream (1 or 2) to @p's descriptor and
 *  counts them as live. 0, or -1 (and live output off) when the host
 *  closed its descriptor. */
int cl_live_emit(cl_live *l, cl_proc *p, int stream, const char *data, size_t n);
/** 1 when the text chunk @data may not be the command's bytes (it holds
 *  U+FFFD, what the provider puts for bytes that are not UTF-8), else 0. */
int cl_live_suspect(const char *data, size_t n);
/** A text chunk of @stream: sent by cl_live_emit() unless live output is
 *  off or the chunk is suspect (then off from here on: the rest waits for
 *  the whole bytes). 0, or -1 when live output is (now) off. */
int cl_live_text(cl_live *l, cl_proc *p, int stream, const char *data, size_t n);

/** The rest of one stream from its whole bytes (from their start). */
typedef struct cl_live_rest {
    cl_proc *p;
    int stream;
    const cl_live *live;
    uint64_t seen;      /* bytes of the whole so far */
    uint64_t hash;      /* FNV-1a of its first live->sent bytes */
    int differs;        /* the whole does not begin with what went live */
} cl_live_rest;

void cl_live_rest_init(cl_live_rest *r, cl_proc *p, int stream, const cl_live *live);
/** A cl_sink_fn over a cl_live_rest: the first live->sent bytes are
 *  checked against what went live, the rest is sent to the host. */
int cl_live_rest_sink(void *ud, const char *data, size_t n);
/** After the whole went through cl_live_rest_sink(): 0, or -1 with the
 *  thread's error (execution_failed, naming @provider and the stream) when
 *  it did not begin with what went live. */
int cl_live_rest_end(cl_live_rest *r, const char *provider, const char *op);

/* ------------------------------------------------------------------------ */
/* Ownership labels and orphans (reap.c)                                     */
/* ------------------------------------------------------------------------ */

/* The metadata / label keys every hosted sandbox made by libsbx carries, so
 * that list_owned, destroy_by_id and `sbx gc` find it and a create whose
 * answer was lost can be undone: the backend name, the create token
 * ("sbx-" + 32 hex digits) and the expiry (UNIX seconds, decimal). */
#define CL_META_BACKEND "sbx_backend"
#define CL_META_TOKEN "sbx_create_token"
#define CL_META_EXPIRES "sbx_expires_at"

/** Finds the provider ids of the sandboxes carrying create token @token:
 *  stores a NULL-terminated array of new strings in *@ids (freed with
 *  cl_strv_free). Returns 0 or -1. */
typedef int (*cl_reap_find_fn)(void *ud, const sbx_call_ctx *ctx, const char *token,
                               char ***ids, sbx_error **error);
/** Deletes sandbox @id; 0 also when it is already gone. */
typedef int (*cl_reap_delete_fn)(void *ud, const sbx_call_ctx *ctx, const char *id,
                                 sbx_error **error);

void cl_strv_free(char **v);

/**
 * The orphans of a client: creates whose outcome is unknown (sent, no
 * answer in time). cl_reap_now looks for the token's sandboxes once and
 * deletes them (bounded by @ctx's deadline plus @grace_s; returns how many
 * it deleted, or -1). cl_reaper_add keeps looking, on a thread of the
 * reaper, once a second for @window_s seconds, deleting what appears (a
 * provider may finish a create after the client gave up, CASE-20).
 * cl_reaper_free stops the thread after one last look. @ud (the plugin's
 * client) must outlive the reaper.
 */
typedef struct cl_reaper cl_reaper;
cl_reaper *cl_reaper_new(cl_reap_find_fn find, cl_reap_delete_fn del, void *ud);
/** A plugin's delete of sandbox @id by client @client for call @op (a
 *  cl_delete_fn of provider.h): 0 also when it is already gone. */
typedef int (*cl_reap_delete_op_fn)(struct sbx_plugin_client *client, const sbx_call_ctx *ctx,
                                    const char *id, const char *op, sbx_error **error);
/** cl_reaper_new() over the plugin's own delete @del, called with op
 *  "create" (the call whose answer was lost) on @client (the @ud of
 *  @find too). */
cl_reaper *cl_reaper_new_op(cl_reap_find_fn find, cl_reap_delete_op_fn del,
                            struct sbx_plugin_client *client);
int cl_reap_now(cl_reaper *r, const sbx_call_ctx *ctx, const char *token, double grace_s);
int cl_reaper_add(cl_reaper *r, const char *token, double window_s);
/**
 * What a plugin does with a create sent and not answered (or answered with
 * a failure after the provider may have acted), whose sandbox the provider
 * may still make (CASE-20): cl_reap_now() once, with CL_LOST_LOOK_S of its
 * own (the call's deadline has passed; CASE-20 wants the error within half
 * a second of it), then cl_reaper_add() for 30 s. Thread-safe.
 */
#define CL_LOST_LOOK_S 0.5
void cl_reap_lost(cl_reaper *r, const char *token);
void cl_reaper_free(cl_reaper *r);

#endif /* SBX_CLOUD_H */
