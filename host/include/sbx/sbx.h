/*
 * libsbx — one C API across sandbox providers.
 *
 * <sbx/sbx.h> is the only public header of the library (the plugin ABI lives
 * in <sbx/plugin.h>). A program creates a sandbox on a backend named by a
 * string ("local", "bubblewrap", "docker", "e2b", ...), runs commands and code
 * in it, and destroys it; moving to another provider changes that string.
 *
 * Conventions used throughout (see README.md, "API conventions"):
 *
 *  - Errors: every fallible call takes `sbx_error **error` as its last
 *    parameter and returns NULL (pointer results) or -1 (int results) on
 *    failure. When `error` is not NULL and `*error` is NULL, a new error is
 *    stored there; the caller frees it with sbx_error_free(). Passing NULL
 *    ignores the error. This is GLib's GError pattern: no hidden global
 *    state, safe from any thread.
 *  - Ownership: `get0` returns a pointer borrowed from the object (valid until
 *    the object is freed or changed); `_new`, `_dup` and `get1` return memory
 *    the caller owns and releases with the matching `_free`.
 *  - Units: durations are seconds (double), sizes are bytes (size_t) unless
 *    a name ends in `_mb` (MiB).
 *  - Threads: an sbx_client may be shared by any number of threads. An
 *    sbx_sandbox accepts concurrent execute calls from several threads; it
 *    must not be freed while another thread uses it. sbx_options and
 *    sbx_result are plain values: use one from one thread at a time.
 *
 * Behaviour follows the reference system (bespokelabs-sandbox, Python): the
 * error codes, option names and exec result fields carry its names.
 */
#ifndef SBX_SBX_H
#define SBX_SBX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define SBX_EXPORT __attribute__((visibility("default")))
#else
#define SBX_EXPORT
#endif

/** Library version, as a string ("0.1.0") and as numbers. Since 0.1. */
#define SBX_VERSION_MAJOR 0
#define SBX_VERSION_MINOR 1
#define SBX_VERSION_PATCH 0
#define SBX_VERSION_STRING "0.1.0"

/**
 * sbx_version:
 * Returns the version of the loaded libsbx as a static string ("0.1.0").
 * Never NULL, never to be freed. Thread-safe. Since 0.1.
 */
SBX_EXPORT const char *sbx_version(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * sbx_error_code:
 * Stable error codes. The names are the reference system's `code` strings
 * (sbx_error_code_name() returns them); invalid_argument and rate_limited are
 * this library's additions. Values are explicit and append-only: a code is
 * never renumbered or reused.
 */
typedef enum sbx_error_code {
    SBX_ERROR_UNKNOWN = 0,               /* "unknown": anything else */
    SBX_ERROR_BACKEND_NOT_INSTALLED = 1, /* no usable libsbx-<backend>.so */
    SBX_ERROR_CONFIGURATION = 2,         /* option the backend cannot honour */
    SBX_ERROR_CREATION_FAILED = 3,       /* a creation step failed */
    SBX_ERROR_EXECUTION_FAILED = 4,      /* the command could not be run */
    SBX_ERROR_COMMAND_FAILED = 5,        /* command ran and failed (typed results) */
    SBX_ERROR_TIMEOUT = 6,               /* a call passed its deadline (retryable) */
    SBX_ERROR_CONNECTION = 7,            /* provider or plugin host unreachable (retryable) */
    SBX_ERROR_AUTHENTICATION = 8,        /* credentials refused */
    SBX_ERROR_NOT_FOUND = 9,             /* sandbox, file or directory does not exist */
    SBX_ERROR_FEATURE_NOT_SUPPORTED = 10,/* backend lacks the feature */
    SBX_ERROR_WORKSPACE = 11,            /* workspace / archive refused */
    SBX_ERROR_RATE_LIMITED = 12,         /* provider throttled (retryable) */
    SBX_ERROR_INVALID_ARGUMENT = 13      /* bad value from the caller */
} sbx_error_code;

/** Number of defined codes; every value below it has a name. */
#define SBX_ERROR_CODE_COUNT 14

/**
 * sbx_error_outcome:
 * Whether the failed operation is known not to have happened (FAILED) or may
 * have taken effect on the provider (UNKNOWN, e.g. a create whose response
 * was lost). Values are explicit and append-only.
 */
typedef enum sbx_error_outcome {
    SBX_ERROR_OUTCOME_FAILED = 0,
    SBX_ERROR_OUTCOME_UNKNOWN = 1
} sbx_error_outcome;

/** An error: code, message, backend, op, retryable, outcome, context. */
typedef struct sbx_error sbx_error;

/**
 * sbx_error_get_code / get0_message / get0_backend / get0_op:
 * Accessors. Strings are borrowed from @error and never NULL ("" when unset;
 * the backend is "" for errors raised before a backend was chosen). The
 * message names the bad value where there is one. Thread-safe on distinct
 * errors. Since 0.1.
 */
SBX_EXPORT sbx_error_code sbx_error_get_code(const sbx_error *error);
SBX_EXPORT const char *sbx_error_get0_message(const sbx_error *error);
SBX_EXPORT const char *sbx_error_get0_backend(const sbx_error *error);
SBX_EXPORT const char *sbx_error_get0_op(const sbx_error *error);

/**
 * sbx_error_is_retryable:
 * 1 when retrying the same call may succeed: true exactly for
 * SBX_ERROR_TIMEOUT, SBX_ERROR_CONNECTION and SBX_ERROR_RATE_LIMITED (the
 * reference's rule). 0 otherwise. Since 0.1.
 */
SBX_EXPORT int sbx_error_is_retryable(const sbx_error *error);

/** sbx_error_get_outcome: see sbx_error_outcome. Since 0.1. */
SBX_EXPORT sbx_error_outcome sbx_error_get_outcome(const sbx_error *error);

/**
 * sbx_error_get0_context:
 * The value of context key @key (e.g. "path", "backend_dirs", "entry",
 * "retry_after_s", "exit_code"), borrowed, or NULL when absent. Context holds
 * no secret: values are redacted before they are stored. Since 0.1.
 */
SBX_EXPORT const char *sbx_error_get0_context(const sbx_error *error,
                                              const char *key);

/**
 * sbx_error_get_context_count / sbx_error_get0_context_at:
 * Iterate the context in insertion order. @index must be below the count;
 * @key and @value receive borrowed strings. Returns 0, or -1 when @index is
 * out of range. Since 0.1.
 */
SBX_EXPORT size_t sbx_error_get_context_count(const sbx_error *error);
SBX_EXPORT int sbx_error_get0_context_at(const sbx_error *error, size_t index,
                                         const char **key, const char **value);

/**
 * sbx_error_to_string:
 * The reference's rendering: "MESSAGE [code=CODE, retryable; backend=B;
 * op=OP; k=v; ...]" (the bracket is omitted when no structured field is
 * set). Returns a new string the caller frees with free(); NULL only when
 * memory runs out. Since 0.1.
 */
SBX_EXPORT char *sbx_error_to_string(const sbx_error *error);

/** sbx_error_free: frees @error; NULL is ignored. Since 0.1. */
SBX_EXPORT void sbx_error_free(sbx_error *error);

/**
 * sbx_error_clear:
 * Frees *@error and sets it to NULL; a NULL @error or *@error is ignored.
 * Since 0.1.
 */
SBX_EXPORT void sbx_error_clear(sbx_error **error);

/**
 * sbx_error_code_name:
 * The stable snake_case name of @code ("not_found", "invalid_argument", ...),
 * as the reference system spells it; "unknown" for values it does not know.
 * Static string. Since 0.1.
 */
SBX_EXPORT const char *sbx_error_code_name(sbx_error_code code);

/**
 * sbx_strerror:
 * A short English description of @code ("sandbox, file or directory not
 * found"), for messages; static string, never NULL. Since 0.1.
 */
SBX_EXPORT const char *sbx_strerror(sbx_error_code code);

/* ------------------------------------------------------------------------ */
/* Capabilities                                                              */
/* ------------------------------------------------------------------------ */

/**
 * Capability bits: what a backend may support (declared by its plugin) and
 * what a configured client actually has on this host (sbx_client_probe()).
 * Values are fixed forever; new bits are appended.
 */
#define SBX_CAP_EXEC            (UINT64_C(1) << 0)  /* execute commands */
#define SBX_CAP_EXEC_STDIN      (UINT64_C(1) << 1)  /* stdin to commands */
#define SBX_CAP_FILES           (UINT64_C(1) << 2)  /* file slots */
#define SBX_CAP_DIR_TRANSFER    (UINT64_C(1) << 3)  /* native tar transfer */
#define SBX_CAP_SNAPSHOT        (UINT64_C(1) << 4)
#define SBX_CAP_RESUME          (UINT64_C(1) << 5)  /* session state / resume */
#define SBX_CAP_PTY             (UINT64_C(1) << 6)
#define SBX_CAP_ISOLATION       (UINT64_C(1) << 7)  /* commands cannot see the host */
#define SBX_CAP_NETWORK_POLICY  (UINT64_C(1) << 8)  /* allow_internet=false */
#define SBX_CAP_CPU_LIMIT       (UINT64_C(1) << 9)
#define SBX_CAP_MEMORY_LIMIT    (UINT64_C(1) << 10)
#define SBX_CAP_DISK_LIMIT      (UINT64_C(1) << 11)
#define SBX_CAP_GPU             (UINT64_C(1) << 12)
#define SBX_CAP_IMAGE           (UINT64_C(1) << 13) /* image / template */
#define SBX_CAP_LIFETIME        (UINT64_C(1) << 14) /* timeout_secs ends the sandbox */
#define SBX_CAP_LIST_OWNED      (UINT64_C(1) << 15) /* list_owned / destroy_by_id */
#define SBX_CAP_EXPOSED_PORTS   (UINT64_C(1) << 16)
#define SBX_CAP_BACKGROUND      (UINT64_C(1) << 17) /* background processes live until destroy */

/**
 * sbx_capability_name:
 * The name of one capability bit ("exec", "memory_limit", ...), or NULL when
 * @cap is not exactly one known bit. Static string. Since 0.1.
 */
SBX_EXPORT const char *sbx_capability_name(uint64_t cap);

/* ------------------------------------------------------------------------ */
/* Backends (plugins)                                                        */
/* ------------------------------------------------------------------------ */

/**
 * Plugin discovery: a backend NAME is the plugin file libsbx-NAME.so, looked
 * up in each directory of the colon-separated environment variable
 * SBX_PLUGIN_PATH, then in the plugin directory chosen at configure time
 * ($(pkglibdir)/plugins; sbx_plugin_dir() returns it). Plugins load lazily,
 * on the first client of their backend, and are never unloaded.
 */

/** sbx_plugin_dir: the configured plugin directory; static string. Since 0.1. */
SBX_EXPORT const char *sbx_plugin_dir(void);

/** One plugin file found by sbx_backends_list(). */
typedef struct sbx_backend_info sbx_backend_info;

/**
 * sbx_backends_list:
 * Finds every libsbx-*.so in the search path (first match of a name wins, as
 * for loading), loads each and checks it. A plugin that fails a check is
 * listed with the reason instead of being used. On success stores a new
 * array of @count entries in *@list (free it with sbx_backend_info_list_free)
 * and returns 0; returns -1 only when memory runs out. Thread-safe.
 * Since 0.1.
 */
SBX_EXPORT int sbx_backends_list(sbx_backend_info ***list, size_t *count,
                                 sbx_error **error);

/**
 * Accessors of a listed plugin. Strings are borrowed and live as long as
 * the list. get0_version / get0_description return "" when the plugin could
 * not be read. get0_problem returns NULL for a usable plugin, else why it is
 * not used (e.g. "ABI major 9, host speaks 1"). get_caps returns the bits the
 * plugin declares it may support (0 when unusable).
 */
SBX_EXPORT const char *sbx_backend_info_get0_name(const sbx_backend_info *info);
SBX_EXPORT const char *sbx_backend_info_get0_path(const sbx_backend_info *info);
SBX_EXPORT const char *sbx_backend_info_get0_version(const sbx_backend_info *info);
SBX_EXPORT const char *sbx_backend_info_get0_description(const sbx_backend_info *info);
SBX_EXPORT const char *sbx_backend_info_get0_problem(const sbx_backend_info *info);
SBX_EXPORT uint64_t sbx_backend_info_get_caps(const sbx_backend_info *info);
/** ABI version the plugin was built against (0 when unreadable). */
SBX_EXPORT unsigned sbx_backend_info_get_abi_major(const sbx_backend_info *info);
SBX_EXPORT unsigned sbx_backend_info_get_abi_minor(const sbx_backend_info *info);

/** sbx_backend_info_list_free: frees a list and its entries; NULL ignored. */
SBX_EXPORT void sbx_backend_info_list_free(sbx_backend_info **list, size_t count);

/* ------------------------------------------------------------------------ */
/* Creation options                                                          */
/* ------------------------------------------------------------------------ */

/** Creation options; remembers which fields the caller set. */
typedef struct sbx_options sbx_options;

/**
 * sbx_option_field: one bit per creation option, used by
 * sbx_options_is_set(). Values are fixed and append-only.
 */
typedef enum sbx_option_field {
    SBX_OPTION_ENV_VARS = 1u << 0,
    SBX_OPTION_WORKDIR = 1u << 1,
    SBX_OPTION_TIMEOUT_SECS = 1u << 2,
    SBX_OPTION_CPU = 1u << 3,
    SBX_OPTION_MEMORY_MB = 1u << 4,
    SBX_OPTION_GIT_REPO = 1u << 5,
    SBX_OPTION_GIT_REF = 1u << 6
} sbx_option_field;

/** Defaults of the reference's SandboxConfig. */
#define SBX_DEFAULT_CPU 1.0
#define SBX_DEFAULT_MEMORY_MB 1024
#define SBX_DEFAULT_TIMEOUT_SECS 600.0

/**
 * sbx_options_new: new options, every field unset (defaults above apply).
 * Returns NULL only when memory runs out. Free with sbx_options_free().
 * Since 0.1.
 */
SBX_EXPORT sbx_options *sbx_options_new(void);

/** sbx_options_free: frees @options; NULL ignored. Since 0.1. */
SBX_EXPORT void sbx_options_free(sbx_options *options);

/**
 * sbx_options_set_env:
 * Sets environment variable @key to @value for every command of the sandbox
 * (a second call with the same key replaces the value). Both strings are
 * copied. @key must match [A-Za-z_][A-Za-z0-9_]*; @value is taken literally
 * (spaces, newlines, quotes, '=', '$'). Errors: invalid_argument naming the
 * key. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_env(sbx_options *options, const char *key,
                                   const char *value, sbx_error **error);

/**
 * sbx_options_set_workdir:
 * The directory commands start in. On `local` it is the sandbox root itself:
 * it must exist when the sandbox is created (invalid_argument naming it
 * otherwise, and nothing is created), and it is never deleted. @path is
 * copied; it must be non-empty and contain no NUL. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_workdir(sbx_options *options, const char *path,
                                       sbx_error **error);

/**
 * sbx_options_set_timeout_secs:
 * The sandbox's lifetime where the provider has one, and the default exec
 * timeout (an exec's own timeout overrides it). Seconds, > 0 and finite;
 * default SBX_DEFAULT_TIMEOUT_SECS. Errors: invalid_argument. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_timeout_secs(sbx_options *options, double secs,
                                            sbx_error **error);

/**
 * sbx_options_set_cpu:
 * vCPUs (fractions allowed), > 0 and finite; default 1. A backend that
 * cannot enforce it refuses it with a configuration error, only when set.
 * Since 0.1.
 */
SBX_EXPORT int sbx_options_set_cpu(sbx_options *options, double cpu,
                                   sbx_error **error);

/**
 * sbx_options_set_memory_mb:
 * Memory in MiB, > 0; default 1024. A backend that cannot enforce it refuses
 * it with a configuration error, only when set. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_memory_mb(sbx_options *options, int64_t memory_mb,
                                         sbx_error **error);

/**
 * sbx_options_set_git_repo:
 * After the sandbox exists, `git clone --depth 1 [--branch REF] -- URL NAME`
 * runs in its working directory (NAME = last path component of @url without
 * ".git"), as the reference does. @url may be a local path (works offline).
 * @ref may be NULL (the default branch). Both copied; @url must be
 * non-empty and must not start with '-'. A failed clone fails the create
 * with creation_failed naming the step "git_clone", and the sandbox is
 * destroyed. Since 0.1.
 */
SBX_EXPORT int sbx_options_set_git_repo(sbx_options *options, const char *url,
                                        const char *ref, sbx_error **error);

/**
 * sbx_options_is_set: 1 when the caller set @field, else 0. Since 0.1.
 */
SBX_EXPORT int sbx_options_is_set(const sbx_options *options,
                                  sbx_option_field field);

/** Getters; they return the default when the field is unset. */
SBX_EXPORT double sbx_options_get_timeout_secs(const sbx_options *options);
SBX_EXPORT double sbx_options_get_cpu(const sbx_options *options);
SBX_EXPORT int64_t sbx_options_get_memory_mb(const sbx_options *options);
/** Borrowed; NULL when unset. */
SBX_EXPORT const char *sbx_options_get0_workdir(const sbx_options *options);
SBX_EXPORT const char *sbx_options_get0_env(const sbx_options *options,
                                            const char *key);

/* ------------------------------------------------------------------------ */
/* Clients and sandboxes                                                     */
/* ------------------------------------------------------------------------ */

/** One backend, reused across many sandboxes (shared connection state). */
typedef struct sbx_client sbx_client;
/** One sandbox. */
typedef struct sbx_sandbox sbx_sandbox;

/**
 * sbx_client_new:
 * A client for @backend ("local", "docker", ...). Checks the name
 * ([a-z0-9][a-z0-9_-]*, else invalid_argument) and loads and checks the
 * plugin; does no network or provider I/O. Errors: backend_not_installed
 * (context "searched": the directories searched, "package": what provides
 * it), or the plugin's problem. Thread-safe; the client may be shared by
 * threads. Free with sbx_client_free() after every sandbox made from it.
 * Since 0.1.
 */
SBX_EXPORT sbx_client *sbx_client_new(const char *backend, sbx_error **error);

/** sbx_client_free: frees @client; NULL ignored. Since 0.1. */
SBX_EXPORT void sbx_client_free(sbx_client *client);

/** sbx_client_get0_backend: the backend name; borrowed. Since 0.1. */
SBX_EXPORT const char *sbx_client_get0_backend(const sbx_client *client);

/**
 * sbx_client_probe:
 * Stores in *@caps the capability bits this client actually has on this
 * host (a subset of what the plugin declares). May do I/O (e.g. ping a
 * daemon). Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_client_probe(sbx_client *client, uint64_t *caps,
                                sbx_error **error);

/**
 * sbx_sandbox_create:
 * Creates a sandbox and returns its handle. @options may be NULL (all
 * defaults); it is not kept. Order: the sandbox exists, then the git clone.
 * Any failure after the provider made the sandbox destroys it before
 * returning, and the error names the step (context "step"). Errors:
 * invalid_argument, configuration (a set option the backend cannot honour,
 * naming it), creation_failed, timeout, connection, and the backend's own.
 * Thread-safe. The handle is freed with sbx_sandbox_free(); freeing does not
 * destroy the sandbox. Since 0.1.
 */
SBX_EXPORT sbx_sandbox *sbx_sandbox_create(sbx_client *client,
                                           const sbx_options *options,
                                           sbx_error **error);

/**
 * sbx_create:
 * sbx_client_new(@backend) + sbx_sandbox_create(); the sandbox keeps the
 * client and frees it with itself. Since 0.1.
 */
SBX_EXPORT sbx_sandbox *sbx_create(const char *backend,
                                   const sbx_options *options,
                                   sbx_error **error);

/**
 * sbx_sandbox_destroy:
 * Ends the sandbox and everything running in it, and removes what it left on
 * the host (its directory on local, unless the caller supplied the
 * workdir). A second destroy is a no-op returning 0. Afterwards every other
 * call on the handle fails with not_found. Returns 0 or -1. Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_destroy(sbx_sandbox *sandbox, sbx_error **error);

/**
 * sbx_sandbox_free:
 * Frees the handle (and the client made by sbx_create()). Does NOT destroy
 * the sandbox: a sandbox outlives its handle and its process until
 * sbx_sandbox_destroy(). NULL ignored. Since 0.1.
 */
SBX_EXPORT void sbx_sandbox_free(sbx_sandbox *sandbox);

/**
 * sbx_sandbox_is_alive:
 * 1 when the sandbox exists and can run commands, 0 when it is gone
 * (destroyed, expired, its supervisor dead), -1 on an error deciding it.
 * Since 0.1.
 */
SBX_EXPORT int sbx_sandbox_is_alive(sbx_sandbox *sandbox, sbx_error **error);

/** Borrowed strings: backend name and the provider's sandbox id. Since 0.1. */
SBX_EXPORT const char *sbx_sandbox_get0_backend(const sbx_sandbox *sandbox);
SBX_EXPORT const char *sbx_sandbox_get0_id(const sbx_sandbox *sandbox);

/**
 * sbx_sandbox_get0_root:
 * The value of SANDBOX_ROOT in the sandbox's commands: the root directory on
 * `local` (whose commands see the host's filesystem), "" where the sandbox
 * owns `/`. Borrowed. Since 0.1.
 */
SBX_EXPORT const char *sbx_sandbox_get0_root(const sbx_sandbox *sandbox);

/* ------------------------------------------------------------------------ */
/* Exec                                                                      */
/* ------------------------------------------------------------------------ */

/** Which stream a chunk of output came from. */
typedef enum sbx_stream {
    SBX_STREAM_STDOUT = 1,
    SBX_STREAM_STDERR = 2
} sbx_stream;

/**
 * sbx_output_fn:
 * Streaming callback: called on the thread that runs the exec with each
 * chunk as it arrives, in order within each stream. @data is borrowed for
 * the call only. The callback sees all output, whatever the output limit:
 * when the stream was not truncated, the concatenation of its chunks equals
 * the result's buffer. Every call comes before the exec returns.
 */
typedef void (*sbx_output_fn)(sbx_stream stream, const void *data, size_t len,
                              void *user_data);

/** Default per-stream output cap: 64 MiB. */
#define SBX_DEFAULT_OUTPUT_LIMIT ((size_t)64 << 20)
/** Grace between SIGTERM and SIGKILL when a timeout ends a command. */
#define SBX_KILL_GRACE_SECS 2.0

/**
 * sbx_exec_request:
 * What to run. Initialise with SBX_EXEC_REQUEST_INIT (it sets struct_size,
 * so the library reads only fields the caller's header knew), then set:
 *
 *  - argv: argument vector, NULL-terminated; passed literally, never joined
 *    into a shell string; argv[0] is looked up in the command's PATH. A
 *    program that cannot be found exits 127 ("not found" on stderr); one
 *    that cannot be executed exits 126 (as POSIX shells report them).
 *  - shell: a script run as `/bin/sh -c SCRIPT`. Exactly one of argv and
 *    shell must be set (invalid_argument otherwise).
 *  - env: "KEY=VALUE" strings, NULL-terminated, laid over the sandbox's
 *    environment for this call (these win). Keys as sbx_options_set_env;
 *    an invalid one is invalid_argument and nothing runs.
 *  - cwd: sandbox path of the working directory (on local, resolved under
 *    the sandbox root, like file paths). NULL = the sandbox's workdir. A
 *    missing one is not_found naming it (context "path"), and nothing runs.
 *  - stdin_data / stdin_len: bytes fed to stdin, then EOF. stdin_data NULL
 *    = the command's stdin is at EOF at once (never the caller's stdin).
 *  - timeout_secs: > 0 a limit; 0 = the sandbox's timeout_secs; < 0 none.
 *    On expiry the command's whole process tree gets SIGTERM, then SIGKILL
 *    after SBX_KILL_GRACE_SECS; the result has timed_out = 1 and exit code
 *    124.
 *  - output_limit: bytes kept per stream; 0 = SBX_DEFAULT_OUTPUT_LIMIT.
 *    Output past it is read and dropped (the command never blocks on it)
 *    and the stream's truncated flag is set.
 *  - on_output / user_data: optional streaming callback.
 *  - flags: SBX_EXEC_NO_CAPTURE keeps nothing in the result (both buffers
 *    empty, not truncated): output only reaches on_output. Unknown bits are
 *    invalid_argument.
 *
 * All pointers are borrowed for the duration of the call.
 */
typedef struct sbx_exec_request {
    size_t struct_size;
    const char *const *argv;
    const char *shell;
    const char *const *env;
    const char *cwd;
    const void *stdin_data;
    size_t stdin_len;
    double timeout_secs;
    size_t output_limit;
    sbx_output_fn on_output;
    void *user_data;
    unsigned flags;
} sbx_exec_request;

/** sbx_exec_request.flags bits. */
#define SBX_EXEC_NO_CAPTURE 1u

#define SBX_EXEC_REQUEST_INIT { sizeof(sbx_exec_request), NULL, NULL, NULL, NULL, \
                                NULL, 0, 0.0, 0, NULL, NULL, 0 }

/** The outcome of a command that ran. */
typedef struct sbx_result sbx_result;

/**
 * sbx_sandbox_execute_command:
 * Runs @request in the sandbox and waits for it. The call itself failing
 * (bad argument, missing cwd, sandbox gone, provider unreachable) is an
 * error and returns NULL; a command that ran and failed is a result with its
 * exit code. The exec ends when the command's main process exits; output it
 * wrote is complete; background descendants keep running until the sandbox
 * is destroyed (their later output is not captured). Errors:
 * invalid_argument, not_found, execution_failed, connection, timeout.
 * Thread-safe: several threads may run commands in one sandbox at once.
 * Free the result with sbx_result_free(). Since 0.1.
 */
SBX_EXPORT sbx_result *sbx_sandbox_execute_command(sbx_sandbox *sandbox,
                                                   const sbx_exec_request *request,
                                                   sbx_error **error);

/**
 * sbx_sandbox_execute_shell:
 * Shorthand: execute_command with request.shell = @script, all else default.
 * Since 0.1.
 */
SBX_EXPORT sbx_result *sbx_sandbox_execute_shell(sbx_sandbox *sandbox,
                                                 const char *script,
                                                 sbx_error **error);

/**
 * sbx_sandbox_execute_code:
 * Runs @code in @language: "python" (default when NULL; python3, falling
 * back to python, as the reference does), "bash", "sh", "node"/"javascript".
 * @request may be NULL; when given, its argv and shell must be NULL and its
 * other fields apply. Errors: as execute_command, plus invalid_argument for
 * an unknown language. A syntax error is a result with a non-zero exit code
 * and the interpreter's message on stderr. Since 0.1.
 */
SBX_EXPORT sbx_result *sbx_sandbox_execute_code(sbx_sandbox *sandbox,
                                                const char *language,
                                                const char *code,
                                                const sbx_exec_request *request,
                                                sbx_error **error);

/**
 * Result accessors. get0_stdout / get0_stderr return the bytes (never NULL:
 * an empty stream is a valid zero-length buffer, NUL-terminated for
 * convenience but binary-safe: use the length) and store the length in
 * *@len when @len is not NULL; borrowed from @result.
 * get_exit_code: the command's code 0..255; 128+N when killed by signal N;
 * 124 when timed out. is_timed_out / is_*_truncated: 1 or 0.
 * get_duration_secs: wall time of the exec in seconds.
 */
SBX_EXPORT const char *sbx_result_get0_stdout(const sbx_result *result, size_t *len);
SBX_EXPORT const char *sbx_result_get0_stderr(const sbx_result *result, size_t *len);
SBX_EXPORT int sbx_result_get_exit_code(const sbx_result *result);
SBX_EXPORT int sbx_result_is_timed_out(const sbx_result *result);
SBX_EXPORT int sbx_result_is_stdout_truncated(const sbx_result *result);
SBX_EXPORT int sbx_result_is_stderr_truncated(const sbx_result *result);
SBX_EXPORT double sbx_result_get_duration_secs(const sbx_result *result);

/** sbx_result_free: frees @result; NULL ignored. Since 0.1. */
SBX_EXPORT void sbx_result_free(sbx_result *result);

#ifdef __cplusplus
}
#endif
#endif /* SBX_SBX_H */
