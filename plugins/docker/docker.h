/*
 * docker.h — what the parts of libsbx-docker.so share.
 *
 *   engine.c  the Docker Engine API client: DOCKER_HOST, API version
 *             negotiation, a pool of libcurl handles per client, requests
 *             with streamed bodies, hijacked connections, error mapping
 *   demux.c   the 8-byte-header stream framing of non-TTY execs
 *   docker.c  the descriptor, clients, lifecycle, session state, snapshot,
 *             list_owned / destroy_by_id
 *   exec.c    the process-handle slots and internal execs
 *   files.c   the file slots (archive endpoints, libarchive)
 *   progress.c the summary line of an image pull (progress.h)
 *
 * The plugin links libcurl, json-c, libarchive and, statically, the HTTP
 * base of the hosted providers (plugins/cloud/base) and the SDK's tar
 * helpers, never libsbx: errors and logging go through the host services
 * handed to setup.
 */
#ifndef SBX_DOCKER_H
#define SBX_DOCKER_H

#include <sbx/plugin.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#define DK_BACKEND "docker"

/* API versions: the newest this plugin speaks (the Engine answers in
 * /_ping with its own maximum; the lower one is used) and the oldest it
 * accepts. */
#define DK_API_MAX_MINOR 41
#define DK_API_MIN_MINOR 25

/* The image when neither the request nor $SBX_DOCKER_IMAGE names one. */
#define DK_DEFAULT_IMAGE "python:3.12-slim"

/* Labels every container (and snapshot image) made by the plugin carries. */
#define DK_LABEL_BACKEND "sbx.backend"
#define DK_LABEL_TOKEN "sbx.create_token"
#define DK_LABEL_EXPIRES "sbx.expires_at"
#define DK_LABEL_SNAPSHOT_OF "sbx.snapshot_of"

/* The environment variable every exec carries so that its process tree can
 * be found inside the container (exec_kill). */
#define DK_EXEC_MARKER "SBX_EXEC_ID"

/* The errors (cl_fail, cl_context, cl_outcome_unknown, cl_last), the log
 * macro CL_LOG, byte buffers (cl_buf), clocks (cl_now, cl_wallclock) and
 * encodings (cl_url_escape, cl_base64_decode) come from the HTTP base the
 * hosted providers stand on too (plugins/cloud/base/cloud.h), linked in
 * statically; cl_setup() keeps the host services in cl_host. */
#include "cloud.h"

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

void dk_sleep_ms(long ms);

/** A wait bound: the earlier of our own limit and the call's deadline, plus
 *  the call's cancel descriptor. */
typedef struct dk_bound {
    double until;       /* CLOCK_MONOTONIC seconds; 0 = none */
    double deadline;    /* the call's own deadline; 0 = none */
    int cancel_fd;
} dk_bound;

/** @secs <= 0: no limit of our own. */
dk_bound dk_bound_make(const sbx_call_ctx *ctx, double secs);
/** Milliseconds left (-1 = unbounded, 0 = expired), capped at @cap_ms when
 *  @cap_ms >= 0. */
int dk_bound_ms(const dk_bound *b, int cap_ms);
int dk_bound_cancelled(const dk_bound *b);
/** The error for an expired or cancelled bound (timeout, outcome unknown). */
sbx_error *dk_fail_bound(sbx_error **error, const dk_bound *b, const char *op,
                         const char *what);

/** Writes all of @p to @fd, waiting with poll (so it works on blocking and
 *  non-blocking descriptors) and giving up when @stop_fd becomes readable or
 *  @b expires. Writes at most PIPE_BUF at a time to a pipe so that it never
 *  blocks. Returns 0, or -1 with errno (ECANCELED, ETIMEDOUT, EPIPE...). */
int dk_write_all(int fd, const void *p, size_t n, int stop_fd, const dk_bound *b);

/** Blocks SIGPIPE on this thread (a write to a closed pipe then fails with
 *  EPIPE) and restores the mask, discarding a SIGPIPE it kept pending. */
#include <signal.h>
void dk_sigpipe_block(sigset_t *old);
void dk_sigpipe_restore(const sigset_t *old);

/** Percent-encodes @s for a URL query (a new string, or NULL). */
char *cl_url_escape(const char *s);

/* ------------------------------------------------------------------------ */
/* The client and its Engine connection (engine.c)                           */
/* ------------------------------------------------------------------------ */

#define DK_POOL_MAX 8

struct sbx_plugin_client {
    char *host_shown;       /* DOCKER_HOST as given (for messages) */
    char *sock;             /* unix socket path; NULL for tcp */
    char *base;             /* "http://localhost" or "http://HOST:PORT" */
    char *host_header;      /* Host header of hijacked requests */
    char *image;            /* default image */
    char *network;          /* NetworkMode when the internet is allowed; NULL = daemon's */
    pthread_mutex_t lock;   /* guards api_minor and the pool */
    int api_minor;          /* negotiated API 1.x; 0 until the first call */
    CURL *idle[DK_POOL_MAX];
    int nidle;
};

/**
 * Sets up @c's transport from @docker_host ("unix:///path", "tcp://h:p" or
 * NULL for the default socket). No I/O. Returns 0 or -1 (configuration
 * error naming the value).
 */
int dk_engine_init(struct sbx_plugin_client *c, const char *docker_host, sbx_error **error);
void dk_engine_free(struct sbx_plugin_client *c);

/** Negotiates the API version once per client (GET /_ping). */
int dk_engine_ready(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *op,
                    sbx_error **error);

/** Streams a request body: fills @buf with up to @cap bytes; returns the
 *  count, 0 at the end, -1 to abort (with the reason kept by the source). */
typedef ssize_t (*dk_source_fn)(void *ud, char *buf, size_t cap);
/** Takes a chunk of a 2xx response body; returns 0, or -1 to abort. */
typedef int (*dk_sink_fn)(void *ud, const char *p, size_t n);

typedef struct dk_req {
    const char *method;         /* GET POST PUT DELETE HEAD */
    const char *path;           /* "/containers/json?all=1"; the version prefix is added */
    int unversioned;            /* /_ping */
    const char *body;           /* JSON body, or NULL */
    size_t body_len;
    dk_source_fn source;        /* or a streamed body (application/x-tar) */
    void *source_ud;
    int64_t source_len;         /* its length, or -1 (chunked) */
    dk_sink_fn sink;            /* a 2xx body goes here; else it is kept in resp */
    void *sink_ud;
    double secs;                /* our own bound for the whole call; <= 0 none */
    int outcome_unknown_on_fail;/* a failed transfer may have acted (create, delete) */
} dk_req;

typedef struct dk_resp {
    long status;
    cl_buf body;                /* kept body (not sunk), capped */
    char *path_stat;            /* X-Docker-Container-Path-Stat, decoded JSON */
    char *api_version;          /* Api-Version header */
} dk_resp;

/**
 * Performs @req. Returns 0 when an HTTP answer came (any status; inspect
 * resp->status), -1 with *@error set when the Engine could not be reached,
 * the bound expired, the call was cancelled or a source / sink aborted
 * (then the source's or sink's own error, when it stored one in
 * *@error, is kept).
 */
int dk_request(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const dk_req *req,
               dk_resp *resp, const char *op, sbx_error **error);
void dk_resp_clear(dk_resp *r);

/** The Engine's message of an error answer ({"message":...} or the text),
 *  trimmed; a new string (never NULL unless memory runs out). */
char *dk_resp_message(const dk_resp *r);

/** Pass as the code of dk_fail_resp() / dk_fail_container() to take it from
 * the HTTP status: 400, 409 and 422 configuration; 401 and 403
 * authentication; 404 not_found; 408 and 504 timeout; 429 rate_limited;
 * other 5xx connection; anything else execution_failed. */
#define DK_CODE_BY_STATUS ((sbx_error_code)-1)

/** Stores an error for an unexpected answer: "@what: MESSAGE (HTTP N)". */
sbx_error *dk_fail_resp(sbx_error **error, sbx_error_code code, const dk_resp *r,
                        const char *op, const char *what);

/** Parses a JSON answer; NULL (and an error) when it is not JSON. */
struct json_object;
struct json_object *dk_resp_json(const dk_resp *r, const char *op, sbx_error **error);

/* A hijacked connection (exec start with Connection: Upgrade). */
typedef struct dk_conn {
    CURL *h;
    int fd;                     /* the raw socket; -1 when closed */
    unsigned char *pre;         /* stream bytes read along with the headers */
    size_t pre_len;
} dk_conn;

/**
 * POSTs @json to @path with "Connection: Upgrade", "Upgrade: tcp" and reads
 * the answer's headers. On 101 (or 200) the connection carries the raw
 * stream from then on: returns 0 with @conn filled. Otherwise returns -1
 * with an error made from the Engine's message (404 / 409: not_found).
 */
int dk_hijack(struct sbx_plugin_client *c, const sbx_call_ctx *ctx, const char *path,
              const char *json, dk_conn *conn, const char *op, sbx_error **error);
void dk_conn_close(dk_conn *conn);

/* ------------------------------------------------------------------------ */
/* Stream framing (demux.c)                                                  */
/* ------------------------------------------------------------------------ */

/** Receives one piece of a stream: 1 stdout, 2 stderr, 3 the Engine's own
 *  error text (stream 0, stdin echoed, is passed as 1). Returns 0 or -1. */
typedef int (*dk_demux_fn)(void *ud, int stream, const unsigned char *p, size_t n);

typedef struct dk_demux {
    int raw;                    /* Tty exec: no framing, all is stdout */
    unsigned char hdr[8];
    size_t hdr_len;
    uint32_t left;              /* payload bytes left in the current frame */
    int stream;
    int bad;                    /* a malformed header was seen */
    unsigned char bad_hdr[8];
} dk_demux;

void dk_demux_init(dk_demux *d, int raw);
/** Feeds @n bytes (any split). Returns 0, or -1 when a header is malformed
 *  (d->bad set) or @fn failed. */
int dk_demux_feed(dk_demux *d, const unsigned char *p, size_t n, dk_demux_fn fn, void *ud);
/** 1 when the stream may end here (not inside a header or a frame). */
int dk_demux_at_boundary(const dk_demux *d);

/* ------------------------------------------------------------------------ */
/* Sandboxes                                                                 */
/* ------------------------------------------------------------------------ */

struct sbx_plugin_sandbox {
    struct sbx_plugin_client *client;
    char *id;                   /* container id */
    char *workdir;              /* absolute working directory ("/" by default) */
    pthread_mutex_t lock;       /* guards destroyed, stat_name, oom_* and ended */
    int destroyed;
    char *stat_name;            /* stat_file's borrowed name */
    int oom_known;              /* oom_kills is the container cgroup's count */
    uint64_t oom_kills;         /* its OOM-kill counter when last read */
    char *ended;                /* why the container ended by itself (the
                                 * message later calls fail with); NULL */
    int owner_known;            /* owner holds the default user's "UID:GID",
                                 * "" for root (files.c, CASE-45) */
    char owner[32];
};

/** not_found when @sb was destroyed; else 0. */
int dk_sandbox_check(struct sbx_plugin_sandbox *sb, const char *op, sbx_error **error);

/** The absolute container path of sandbox path @path (relative to the
 *  workdir); invalid_argument when empty. A new string, or NULL. */
char *dk_sandbox_path(struct sbx_plugin_sandbox *sb, const char *path, const char *op,
                      sbx_error **error);

/** Maps an answer about the container (404 no such container, 409 not
 *  running) to not_found; other statuses to @code. */
sbx_error *dk_fail_container(sbx_error **error, struct sbx_plugin_sandbox *sb,
                             const dk_resp *r, sbx_error_code code, const char *op,
                             const char *what);

/* exec.c */
/** The sandbox of @process, and 1 with its exit code in *@code once it
 *  ended with one (0 while it runs or when it failed). */
int dk_exec_ended(sbx_plugin_process *process, struct sbx_plugin_sandbox **sb, int *code);
int dk_exec_start(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                  const sbx_plugin_exec_request *request, sbx_plugin_process **process,
                  sbx_error **error);
int dk_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                 int *exit_code, sbx_error **error);
int dk_exec_event_fd(sbx_plugin_process *process);
int dk_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int signal,
                 sbx_error **error);
int dk_exec_resize(sbx_plugin_process *process, const sbx_call_ctx *ctx, unsigned rows,
                   unsigned cols, sbx_error **error);
void dk_exec_free(sbx_plugin_process *process);

/**
 * Runs @argv in the sandbox to completion with output captured (each
 * stream capped at @cap bytes; more is an error) and no stdin. Stores the
 * exit code. Bounded by @secs and the call's deadline. Returns 0 or -1.
 */
int dk_exec_capture(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx,
                    const char *const *argv, double secs, size_t cap, cl_buf *out,
                    cl_buf *err, int *exit_code, const char *op, sbx_error **error);
/** dk_exec_capture as @user (the exec's User; NULL: the container's). */
int dk_exec_capture_as(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *user,
                       const char *const *argv, double secs, size_t cap, cl_buf *out,
                       cl_buf *err, int *exit_code, const char *op, sbx_error **error);

/* files.c */
int dk_list_files(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                  sbx_plugin_file_fn fn, void *user_data, sbx_error **error);
int dk_read_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                 int fd, sbx_error **error);
int dk_write_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                  int fd, uint32_t mode, sbx_error **error);
int dk_upload_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                  int fd, sbx_error **error);
int dk_download_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                    int fd, sbx_error **error);
int dk_stat_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, const char *path,
                 sbx_plugin_file_info *info, sbx_error **error);

/** HEAD of the archive endpoint: 1 and the decoded stat when @path exists,
 *  0 when it does not, -1 on error. @mode gets Go's os.FileMode. */
int dk_path_stat(struct sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *abs,
                 uint32_t *mode, int64_t *size, char **name, char **link_target,
                 const char *op, sbx_error **error);

/* Go's os.FileMode type bits, as the stat header carries them. */
#define DK_MODE_DIR     (UINT32_C(1) << 31)
#define DK_MODE_SYMLINK (UINT32_C(1) << 27)

#endif /* SBX_DOCKER_H */
