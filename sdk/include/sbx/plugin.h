/*
 * <sbx/plugin.h> — the libsbx plugin ABI.
 *
 * A backend is a shared object `libsbx-<name>.so` exporting exactly one
 * symbol, sbx_plugin_init, which returns a pointer to a constant
 * sbx_plugin descriptor and does nothing else. The host checks the
 * descriptor before calling any slot:
 *
 *   1. the pointer is not NULL;
 *   2. struct_size covers at least the fields of ABI 1.0
 *      (SBX_PLUGIN_MIN_STRUCT_SIZE);
 *   3. abi_major == SBX_PLUGIN_ABI_MAJOR and abi_minor <= the host's
 *      SBX_PLUGIN_ABI_MINOR (GStreamer's rule);
 *   4. name equals the <name> of the file.
 *
 * A plugin failing a check is listed by `sbx backends` with the reason and
 * never used. Then the host calls `setup` once with its services (logging,
 * error construction, allocation): a plugin never links libsbx.
 *
 * Growth rules. Slots are only appended; the host never reads past
 * struct_size, so an older, shorter descriptor keeps working. A NULL slot
 * means "not supported": the host answers feature_not_supported, or uses a
 * generic fallback built on other slots. Request structs carry their own
 * struct_size; the host never hands a plugin a request that uses a field
 * added in an ABI minor newer than the plugin's abi_minor (it refuses the
 * call with feature_not_supported instead).
 *
 * Threading. Slots may be called from several threads at once, for
 * different sandboxes and for one sandbox; a plugin protects its own shared
 * state. A handle (client, sandbox, process) is never freed while another
 * slot on it runs.
 *
 * Ownership. Strings and structs passed to a slot are borrowed for the call.
 * Descriptors passed to a slot stay owned by the host: a plugin that needs
 * one beyond the call dup()s it. Strings a slot returns (session_state) are
 * allocated with the host's alloc service and freed by the host.
 *
 * Errors. A failing slot returns -1 (or NULL) and, when its `error` argument
 * is not NULL, stores an error made with host->set_error(). The host fills
 * in the backend name and the op when the plugin left them out.
 *
 * Build a plugin with -fvisibility=hidden and a version script exporting
 * only sbx_plugin_init; libtool flags -module -avoid-version. Install it
 * into `pkg-config --variable=plugindir libsbx`.
 */
#ifndef SBX_PLUGIN_H
#define SBX_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>

#include <sbx/sbx.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_PLUGIN_ABI_MAJOR 1
#define SBX_PLUGIN_ABI_MINOR 6

/** The one symbol a plugin exports. */
#define SBX_PLUGIN_INIT_SYMBOL "sbx_plugin_init"

/* ------------------------------------------------------------------------ */
/* Host services                                                             */
/* ------------------------------------------------------------------------ */

typedef enum sbx_log_level {
    SBX_LOG_ERROR = 0,
    SBX_LOG_WARNING = 1,
    SBX_LOG_INFO = 2,
    SBX_LOG_DEBUG = 3
} sbx_log_level;

/**
 * sbx_host_services:
 * Handed to the plugin's setup slot; valid for the life of the process.
 * All functions are thread-safe.
 *
 *  - log: message at @level, prefixed with the backend; printed on stderr
 *    when SBX_DEBUG asks for @level ("1" or "debug": every level; "error",
 *    "warning", "info": up to that one; unset, empty or "0": none; see
 *    "Logging" in <sbx/sbx.h>), dropped otherwise.
 *  - set_error: when @error is not NULL and *@error is NULL, stores a new
 *    error with @code, @op (may be NULL) and the formatted message. The
 *    retryable flag follows from the code.
 *  - error_add_context: appends key=value to an error (copied). Values
 *    under keys that look secret (token, key, secret, password,
 *    authorization) are redacted.
 *  - error_set_outcome: marks whether the provider may have acted.
 *  - alloc / free: memory for strings handed to the host (session state).
 */
typedef struct sbx_host_services {
    size_t struct_size;
    unsigned abi_major;
    unsigned abi_minor;
    void (*log)(sbx_log_level level, const char *backend, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    void (*set_error)(sbx_error **error, sbx_error_code code, const char *op,
                      const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
    void (*error_add_context)(sbx_error *error, const char *key, const char *value);
    void (*error_set_outcome)(sbx_error *error, sbx_error_outcome outcome);
    void *(*alloc)(size_t size);
    void (*free)(void *ptr);
    /* ABI 1.1 (check struct_size): a new pidfd (close-on-exec; the caller
     * closes it) of the process that owns the sandboxes this plugin creates
     * and resumes: the application (in process this process, out of
     * process the application the plugin host serves); -1 with errno when
     * it is not known. Thread-safe. */
    int (*owner_pidfd)(void);
} sbx_host_services;

/* ------------------------------------------------------------------------ */
/* Call context                                                              */
/* ------------------------------------------------------------------------ */

/**
 * sbx_call_ctx:
 * Passed to every slot that may block.
 *  - deadline: CLOCK_MONOTONIC time in seconds by which the slot must
 *    return (with a timeout error if it could not finish); 0 = none.
 *  - cancel_fd: becomes readable when the caller cancels the call; -1 when
 *    the call cannot be cancelled. A plugin polls it beside its own I/O and
 *    returns a timeout error with outcome unknown when it fires.
 *  - create_token: the library-made token of the create this call belongs
 *    to ("sbx-" + 32 hex digits), or NULL outside create. A plugin records
 *    it with the sandbox (provider labels or metadata) so list_owned and
 *    destroy_by_id find what this library made.
 */
typedef struct sbx_call_ctx {
    size_t struct_size;
    double deadline;
    int cancel_fd;
    const char *create_token;
} sbx_call_ctx;

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * sbx_plugin_create_request: ABI 1.0 fields.
 *  - set_fields: SBX_OPTION_* bits the caller set. A plugin refuses, with
 *    a configuration error naming the option and value, a set value it
 *    cannot honour; unset values are defaults it may ignore.
 *  - cpu (vCPUs), memory_mb (MiB), timeout_secs (s): always filled, with
 *    the defaults when unset.
 *  - workdir: NULL when unset.
 *  - env: "KEY=VALUE" strings, NULL-terminated, keys already validated.
 *  - expires_at: wall-clock time (UNIX seconds) when the sandbox's lifetime
 *    would end were it usable at the request (0: no lifetime). The
 *    lifetime counts from when the sandbox is usable: a plugin that records
 *    an expiry beside the create token after slow steps of its own (an
 *    image pull, a boot) counts it again as now + timeout_secs, as the
 *    library does with its record once create returns.
 *  - image, template_name, snapshot_id, app_name, gpu ("TYPE[:COUNT]"),
 *    backend_options (a JSON object): NULL when unset. disk_mb: 0 when
 *    unset. allow_internet: 1 unless the caller set it to 0.
 */
typedef struct sbx_plugin_create_request {
    size_t struct_size;
    uint64_t set_fields;
    double cpu;
    int64_t memory_mb;
    double timeout_secs;
    const char *workdir;
    const char *const *env;
    double expires_at;
    const char *image;
    const char *template_name;
    const char *snapshot_id;
    const char *app_name;
    const char *gpu;
    int64_t disk_mb;
    int allow_internet;
    const char *backend_options;
    /* ABI 1.1: 1 when the sandbox is to outlive the process that made it
     * (bounded by its lifetime); 0 when it is attached to that process. A
     * plugin that enforces attachment itself (the local ones: their
     * supervisor watches the creating process) reads it; check struct_size
     * before reading it. */
    int detached;
    /* ABI 1.3: the sandbox's TCP ports to expose (sbx_options_add_port,
     * SBX_OPTION_PORTS), n_ports of them, distinct, each 1..65535, in the
     * order the caller added them; NULL and 0 when none. A plugin that
     * publishes ports only at create (docker) does it here; every plugin
     * records them so resolve_port answers for them. The host hands ports
     * only to a plugin of ABI 1.3 or later that declares
     * SBX_CAP_EXPOSED_PORTS (otherwise the create fails with
     * feature_not_supported before any slot runs); check struct_size
     * before reading them. */
    const uint16_t *ports;
    size_t n_ports;
    /* ABI 1.4: the sandbox's default user (sbx_options_set_user), a name
     * or a numeric uid as the sandbox's passwd has it, already checked
     * (1..256 bytes, no whitespace or control character); NULL when unset.
     * Exec requests with user NULL and the file slots act as it. The host
     * hands a user only to a plugin of ABI 1.4 or later that declares
     * SBX_CAP_USER (otherwise the create fails with feature_not_supported
     * before any slot runs); a plugin that cannot honour the one given
     * (not in the sandbox's passwd) fails the create naming it. Check
     * struct_size before reading it. */
    const char *user;
} sbx_plugin_create_request;

/**
 * sbx_plugin_exec_request: ABI 1.0 fields.
 *  - argv (NULL-terminated) or shell (script for /bin/sh -c): exactly one.
 *  - env: per-call "KEY=VALUE" overlay (wins over the sandbox's), keys
 *    validated; may be NULL.
 *  - cwd: sandbox path, or NULL for the sandbox's workdir. A missing cwd is
 *    a not_found error with context "path", and nothing runs.
 *  - user: NULL = the sandbox's default user.
 *  - tty_rows / tty_cols: 0 = no terminal.
 *  - stdin_fd: readable descriptor the command's stdin comes from (the
 *    command sees EOF when it closes); -1 = EOF at once. stdout_fd /
 *    stderr_fd: writable descriptors the command's output goes to. Owned by
 *    the host; the plugin dup()s what it keeps.
 */
typedef struct sbx_plugin_exec_request {
    size_t struct_size;
    const char *const *argv;
    const char *shell;
    const char *const *env;
    const char *cwd;
    const char *user;
    unsigned tty_rows;
    unsigned tty_cols;
    int stdin_fd;
    int stdout_fd;
    int stderr_fd;
    /* ABI 1.2: SBX_PLUGIN_EXEC_* request bits; check struct_size before
     * reading it (a shorter request has none). */
    unsigned flags;
    /* ABI 1.5: with SBX_PLUGIN_EXEC_EXIT_FD in flags, a connected
     * AF_UNIX stream socket on which the command's end is reported as one
     * sbx_plugin_exit_record (below); -1 otherwise. Check struct_size
     * before reading it. */
    int exit_fd;
    /* ABI 1.6: CLOCK_MONOTONIC time in seconds after which the command
     * must not start, 0 = none: the end of its timeout, when the caller
     * stops waiting for it (a call's deadline bounds it too, ctx). A
     * plugin that cannot start the command by then fails, with a timeout
     * error of outcome failed when it knows nothing started, and makes
     * sure nothing starts later (the local backend's supervisor refuses
     * a request it reads after it). Check struct_size before reading it;
     * a plugin may ignore it. */
    double start_deadline;
} sbx_plugin_exec_request;

/**
 * Exec request bit: the caller runs the command to its end and needs no
 * confirmation that it started (sbx_sandbox_execute_*, not
 * sbx_sandbox_start_process). exec_start may then return once the request
 * is on its way, without waiting for the command to start, and report a
 * failure to start (a working directory that cannot be used included, with
 * the same error) from exec_wait instead. A plugin may ignore the bit.
 */
#define SBX_PLUGIN_EXEC_START_UNCONFIRMED 1u

/**
 * Exec request bit: nothing reads the command's output before the command
 * ends (no output callback, no caller descriptor, no terminal: the result
 * keeps it). A plugin may then deliver all of it when the command ends,
 * to save round trips (a provider call that runs a command and answers
 * with its output and exit code at once, say); what it delivers must be
 * the same bytes. A plugin may ignore the bit. Since ABI 1.2 (a bit of
 * flags, which older hosts leave 0).
 */
#define SBX_PLUGIN_EXEC_OUTPUT_AT_END 2u

/**
 * Exec request bit (ABI 1.5, set only with SBX_PLUGIN_EXEC_START_UNCONFIRMED
 * and no terminal): the request's exit_fd is the write end of a socket the
 * host reads the command's end from, so that it need not ask exec_wait (out
 * of process a round trip to the plugin host; the plugin may hand the
 * descriptor on to whatever sees the end first, a supervisor, a reaper).
 * When the main process ends with exit code C and exec_wait would return 1
 * with C, the plugin writes one sbx_plugin_exit_record {MAGIC, C} (8 bytes,
 * with MSG_NOSIGNAL: the host may have closed its end) and closes every
 * copy it holds; once the record is written, exec_wait returns 1 (at
 * once, or as soon as the plugin's own notice of the end is in) and
 * exec_free must not kill anything on account of the command still
 * running. On any other end (a failure to start, a kill whose exit the
 * plugin reports later, the sandbox gone) it closes every copy without a
 * record: the host then sees EOF and asks exec_wait as without the bit.
 * A plugin may ignore the bit: it keeps no copy beyond exec_start, so the
 * host sees EOF at once. Owned by the host like the other descriptors.
 */
#define SBX_PLUGIN_EXEC_EXIT_FD 4u

/** The record of SBX_PLUGIN_EXEC_EXIT_FD, in host byte order. */
typedef struct sbx_plugin_exit_record {
    uint32_t magic;            /* SBX_PLUGIN_EXIT_RECORD_MAGIC */
    int32_t code;              /* exit code as exec_wait gives it (0..255,
                                * 128+N for signal N) */
} sbx_plugin_exit_record;

#define SBX_PLUGIN_EXIT_RECORD_MAGIC 0x58584253u /* "SBXX" */

/** One entry of list_files. Strings borrowed for the callback. */
typedef struct sbx_plugin_file_info {
    size_t struct_size;
    const char *name;
    int is_dir;
    int64_t size;    /* bytes; -1 when unknown */
    uint32_t mode;   /* permission bits; 0 when unknown */
} sbx_plugin_file_info;

/** list_files callback: return 0 to go on, non-zero to stop. */
typedef int (*sbx_plugin_file_fn)(const sbx_plugin_file_info *info, void *user_data);

/** One sandbox found by list_owned. Strings borrowed for the callback. */
typedef struct sbx_plugin_owned_info {
    size_t struct_size;
    const char *id;            /* pass to destroy_by_id */
    const char *create_token;  /* as recorded at create */
    double created_at;         /* UNIX seconds; 0 when unknown */
    double expires_at;         /* UNIX seconds; 0 when none */
} sbx_plugin_owned_info;

typedef int (*sbx_plugin_owned_fn)(const sbx_plugin_owned_info *info, void *user_data);

/* ------------------------------------------------------------------------ */
/* The descriptor                                                            */
/* ------------------------------------------------------------------------ */

/* Opaque plugin-side handles. */
typedef struct sbx_plugin_client sbx_plugin_client;
typedef struct sbx_plugin_sandbox sbx_plugin_sandbox;
typedef struct sbx_plugin_process sbx_plugin_process;

/**
 * sbx_plugin:
 * Every slot after `description` may be NULL ("not supported"). Return
 * convention: 0 success, -1 failure with *error set, unless noted.
 */
typedef struct sbx_plugin {
    /* --- header: ABI 1.0, never changes --- */
    size_t struct_size;        /* sizeof(sbx_plugin) as the plugin knew it */
    unsigned abi_major;        /* SBX_PLUGIN_ABI_MAJOR the plugin was built with */
    unsigned abi_minor;        /* SBX_PLUGIN_ABI_MINOR the plugin was built with */
    const char *name;          /* backend name == <name> in libsbx-<name>.so */
    const char *version;       /* the plugin's own version string */
    const char *description;   /* one line */
    uint64_t caps;             /* SBX_CAP_* bits the backend may support */

    /* --- ABI 1.0 slots --- */

    /** Called once, after the checks, before any other slot. */
    int (*setup)(const sbx_host_services *host, sbx_error **error);

    /** New client. @config_json: backend options as a JSON object, or NULL.
     *  Must do no network or provider I/O. */
    int (*client_new)(const char *config_json, sbx_plugin_client **client,
                      sbx_error **error);
    void (*client_free)(sbx_plugin_client *client);

    /** Capability bits this client actually has here (subset of caps). */
    int (*probe)(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                 uint64_t *caps, sbx_error **error);

    /** Lifecycle. */
    int (*create)(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                  const sbx_plugin_create_request *request,
                  sbx_plugin_sandbox **sandbox, sbx_error **error);
    /** Resume from a session state made by session_state (JSON object). */
    int (*resume)(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                  const char *state_json, sbx_plugin_sandbox **sandbox,
                  sbx_error **error);
    /** Versioned JSON with no secret; returned via host->alloc. NULL on error.
     *  The object is the plugin's own, with one member the host reads: a
     *  backend whose provider reports the sandbox's live price (RunPod's
     *  pod "cost") puts it there as "price_usd_per_hour", a JSON number of
     *  USD per hour written as the provider wrote it (read exactly, as a
     *  decimal); the library's usage then prices the sandbox's lifetime and
     *  calls at it in place of the price table's rate for its size (the
     *  table's billing granularity and minimum still apply). The host
     *  reads it once after create and at resume.
     *
     *  A second member it reads, out of process only: "exec_endpoint", an
     *  object naming a process of the sandbox's own that takes commands
     *  straight from the application, so that a command that runs to its end
     *  (no terminal, no interactive stdin, the default working directory and
     *  user) does not cross the plugin host: {"protocol": "sbx-local",
     *  "version": N, "socket": unix socket path, "pid": the process that must
     *  be listening on it, "start": its start time (clock ticks after boot,
     *  /proc/PID/stat field 22), "uid": the user it must run as, "cwd": the
     *  path commands start in as that process sees it (an absolute path: the
     *  host path of the root for local, the workdir inside the sandbox's
     *  namespaces for bubblewrap), "expires_at": UNIX time the lifetime ends
     *  (0: none), "lifetime": seconds, and optionally "destroy": false when
     *  destroy is not to go there (absent: true), and "meta": the absolute
     *  path of a directory the destroyer renames after DESTROYED (see
     *  below)}. pid, start and uid are as
     *  the application's pid and user namespaces see them (a process that is
     *  pid 1 of a namespace of its own is named by its pid outside), which is
     *  what SO_PEERCRED reports there. A plugin names an endpoint only where a
     *  command sent there ends exactly as one sent through the plugin: same
     *  working directory, environment and user, and nothing the plugin adds to
     *  its end (bubblewrap names none for a sandbox with a cgroup, whose OOM
     *  kills exec_end_info reports). The protocol is libsbx-local's supervisor
     *  protocol (EXEC_QUIET, EXIT, ERROR, KILL/KILLED; one connection per
     *  command, closing it before EXIT kills the command's tree), version N
     *  being the one this libsbx speaks; any other protocol or version is
     *  ignored. The application checks the start time when it reads the member
     *  and who serves the socket (SO_PEERCRED: pid and uid) before each
     *  command, and sends a command through the plugin host as before when the
     *  endpoint cannot be reached, is served by another process, or the
     *  lifetime is within a second of its end. At resume the member is taken
     *  from the state the plugin returns for the resumed sandbox, never from
     *  the caller's. Destroy goes there too unless "destroy" is false (DESTROY,
     *  answered by DESTROYED once every process of the sandbox has ended and
     *  its directory is gone from its place; with "meta", once every process
     *  but the one serving the socket has ended, which ends next: the
     *  application holds an exclusive flock(2) on the meta directory from
     *  before DESTROY and renames it to its trash name, ".sbx-trash-" and
     *  its name beside it, once DESTROYED came, and whatever the plugin left
     *  to remove the trash does so; should the lock be held by another, the
     *  plugin host destroys it instead); the application then calls the
     *  destroy slot without waiting for its answer and may free the handle
     *  right behind it (the plugin host frees it once that destroy is over):
     *  the slot finds the sandbox ended and releases what the plugin keeps of
     *  it. With no answer, the application calls destroy as before. */
    char *(*session_state)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                           sbx_error **error);
    /** Ends the sandbox and all it runs; a second call returns 0, and so
     *  does a call on a sandbox its exec endpoint already ended (above). */
    int (*destroy)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                   sbx_error **error);
    /** Returns 1 alive, 0 gone, -1 error. */
    int (*is_alive)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                    sbx_error **error);
    /** Frees the handle only (does not destroy). */
    void (*sandbox_free)(sbx_plugin_sandbox *sandbox);
    /** The provider's id; borrowed from the handle. */
    const char *(*sandbox_id)(sbx_plugin_sandbox *sandbox);
    /** SANDBOX_ROOT value ("" where the sandbox owns /); borrowed. */
    const char *(*sandbox_root)(sbx_plugin_sandbox *sandbox);
    /** Snapshot id, via host->alloc; NULL on error. */
    char *(*snapshot)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                      sbx_error **error);

    /** Exec as a process handle. */
    int (*exec_start)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                      const sbx_plugin_exec_request *request,
                      sbx_plugin_process **process, sbx_error **error);
    /** Interactive stdin, for requests with stdin_fd == -2 (later minors). */
    int (*exec_write_stdin)(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                            const void *data, size_t len, sbx_error **error);
    int (*exec_close_stdin)(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                            sbx_error **error);
    /**
     * Waits up to @timeout_ms (-1 forever, 0 poll) for the main process to
     * end. Returns 1 and stores its exit code (0..255, 128+N for signal N)
     * when it ended, 0 when it still runs, -1 on error.
     */
    int (*exec_wait)(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                     int timeout_ms, int *exit_code, sbx_error **error);
    /** A descriptor readable once exec_wait would not block; -1 if none. */
    int (*exec_event_fd)(sbx_plugin_process *process);
    /** Sends @signal to the command's whole process tree (background
     *  descendants included). Succeeds when it already ended. */
    int (*exec_kill)(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                     int signal, sbx_error **error);
    int (*exec_resize)(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                       unsigned rows, unsigned cols, sbx_error **error);
    /** Frees the handle; kills the process tree if it still runs. */
    void (*exec_free)(sbx_plugin_process *process);

    /** Files, on sandbox paths, through descriptors (nothing whole in memory). */
    int (*list_files)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                      const char *path, sbx_plugin_file_fn fn, void *user_data,
                      sbx_error **error);
    /** Writes the file's bytes to @fd. not_found when missing. */
    int (*read_file)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, int fd, sbx_error **error);
    /** Creates/replaces the file from @fd until EOF, with @mode; creates
     *  missing parent directories. */
    int (*write_file)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                      const char *path, int fd, uint32_t mode, sbx_error **error);
    /** Extracts a tar stream read from @fd under directory @path. */
    int (*upload_tar)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                      const char *path, int fd, sbx_error **error);
    /** Writes a tar stream of directory @path to @fd. */
    int (*download_tar)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                        const char *path, int fd, sbx_error **error);
    /** Fills @info for @path (name = its last component, borrowed until
     *  the next call on the sandbox). not_found when missing. */
    int (*stat_file)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, sbx_plugin_file_info *info,
                     sbx_error **error);

    /** What this library made on the provider (found by create token). */
    int (*list_owned)(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                      sbx_plugin_owned_fn fn, void *user_data, sbx_error **error);
    int (*destroy_by_id)(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                         const char *id, sbx_error **error);

    /* --- ABI 1.1 slots --- */

    /** The sandbox no longer ends with the processes that own it (its
     *  creator, its resumers), only by its lifetime or destroy. For plugins
     *  that enforce attachment themselves; NULL when the library's record
     *  is all there is to it. not_found when the sandbox is gone. */
    int (*detach)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, sbx_error **error);

    /* --- ABI 1.2 slots --- */

    /**
     * Called after exec_wait returned 1: stores in *@flags what more is
     * known of how the command ended, as SBX_PLUGIN_EXEC_* bits (0 when
     * nothing). SBX_PLUGIN_EXEC_OOM_KILLED: the sandbox's OOM-kill counter
     * (cgroup v2 memory.events oom_kill, v1 memory.oom_control oom_kill)
     * rose while the command ran, so its memory limit killed a process
     * (never inferred from the exit code). Fails (not_found, context
     * reason=oom_killed when so) when the sandbox itself ended with the
     * command, naming the cause. NULL: nothing more is ever known.
     */
    int (*exec_end_info)(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                         uint64_t *flags, sbx_error **error);

    /** Stops the sandbox without destroying it: no process in it runs
     *  (ended or frozen), its files stay, and start makes it run again (a
     *  stopped sandbox must still resume, so that start can reach it). Both NULL where the
     *  backend cannot stop without destroying (the library answers
     *  feature_not_supported naming the backend). Stopping a stopped
     *  sandbox and starting a running one succeed. not_found when the
     *  sandbox is gone. */
    int (*stop)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, sbx_error **error);
    int (*start)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx, sbx_error **error);

    /* --- ABI 1.3 slots: exposed ports (SBX_CAP_EXPOSED_PORTS) --- */

    /**
     * Adds TCP port @port (1..65535) of the sandbox to its exposed ports
     * while it runs; exposing an exposed port succeeds. NULL where ports
     * can only be declared at create (docker publishes them then): the
     * host answers feature_not_supported naming the backend. A backend
     * whose sandbox cannot be reached (its own network namespace without
     * a route from the host) fails with feature_not_supported naming why.
     */
    int (*expose_port)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                       unsigned port, sbx_error **error);
    /**
     * Removes @port from the exposed ports: resolve_port fails for it from
     * then on. Unexposing a port that is not exposed succeeds. NULL where
     * the backend cannot withdraw a port from a running sandbox.
     */
    int (*unexpose_port)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                         unsigned port, sbx_error **error);
    /**
     * Where the host reaches exposed port @port: "HOST:PORT" for a plain
     * TCP endpoint (docker: "127.0.0.1:49153", the published port; local:
     * "127.0.0.1:8080") or an "https://..." URL for a provider's preview
     * address (E2B "https://8080-ID.e2b.app"); via host->alloc. A port
     * that is not exposed fails with not_found (context port=N), never a
     * guess. Secrets (a preview's access token) never appear in the string
     * or in an error. NULL on error.
     */
    char *(*resolve_port)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                          unsigned port, sbx_error **error);
    /**
     * The exposed ports as decimal numbers in ascending order, separated by
     * one space ("" when none), via host->alloc; NULL on error.
     */
    char *(*list_ports)(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                        sbx_error **error);

    /* Reserved for later minors (appended here): PTY, remove/mkdir,
     * volume mounts. */
} sbx_plugin;

/** Size of an ABI 1.0 descriptor: the host refuses anything shorter. */
#define SBX_PLUGIN_MIN_STRUCT_SIZE \
    (offsetof(sbx_plugin, destroy_by_id) + sizeof(void (*)(void)))

/** exec_end_info bits. */
#define SBX_PLUGIN_EXEC_OOM_KILLED 1u

/** The init function's type; the plugin defines it as
 *  `SBX_PLUGIN_EXPORT const sbx_plugin *sbx_plugin_init(void)`. */
typedef const sbx_plugin *(*sbx_plugin_init_fn)(void);

#define SBX_PLUGIN_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
}
#endif
#endif /* SBX_PLUGIN_H */
